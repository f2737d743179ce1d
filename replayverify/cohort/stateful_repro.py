"""Standalone reproducers for the stateful rows (the cohort reproducer contract).

``jax_script`` and ``keras_script`` write, for one case and one method, a Python script
of at most 40 lines that imports only its framework (and ``os``/``sys``): the case's
buffers, views and ops inlined as constants, a ten-line interpreter of the five cohort
ops in that framework, the plain run (no checkpoint) and the method's run, and one
``DIFFERS: ...`` line per thing that differs (the gradient beyond SPEC §5's tolerance,
a buffer's bytes, the generator state), exit status 1 if anything did. A raised
exception is ``DIFFERS: raised <Type>: <first line>``.
"""

# The scripts' lines are long on purpose: a reproducer has at most 40 lines (the contract),
# so this file is exempt from the 100-column rule (pyproject.toml, per-file-ignores).

from __future__ import annotations

import numpy as np

from replayverify.cohort.cases import Case

_KINDS = {"axpby": ("a", "b", "c"), "mul": (), "copy": (), "noise": ("sigma",),
          "dropout": ("keep",)}


def literal(case: Case) -> str:
    """The case as constants: BUFS (initial values), VIEWS, OPS, SEG, HIDDEN, ..."""
    p = case.program
    item = np.dtype(case.dtype).itemsize
    bufs = {b.name: np.zeros(b.nbytes // item) for b in p.buffers}
    for e in p.init:
        v = p.view(e.view)
        bufs[v.buffer][v.element_starts() // item] = e.values
    used = sorted({n for op in p.ops for n in op.views()} | {p.loss.view, *p.inputs})
    views = {}
    for n in used:
        v = p.view(n)
        if len(v.shape) != 1:
            raise ValueError("reproducers write 1-D views only")
        views[n] = (v.buffer, v.offset // item, v.shape[0], v.strides[0] // item)
    ops = [(op.kind.value, op.dst, op.x, op.y,
            {c: float(op.coef(c)) for c in _KINDS[op.kind.value]}) for op in p.ops]
    seg = case.segment_ops()
    return "\n".join([
        f"DT, SEED, SEG = '{case.dtype}', {case.draw_seed}, ({seg.start}, {seg.stop}); "
        f"HIDDEN, UNTRACKED, INPUTS = {tuple(case.roles.hidden)!r}, "
        f"{tuple(case.roles.untracked)!r}, {tuple(p.inputs)!r}; "
        f"LOSS, TOL = ({p.loss.view!r}, {[float(w) for w in p.loss.weights]!r}), "
        f"64 * {float(np.finfo(case.dtype).eps)!r} * {len(p.ops)}",
        f"BUFS = {({k: [float(x) for x in v] for k, v in bufs.items()})!r}",
        f"VIEWS = {views!r}; OPS = {ops!r}",
    ])


_COMPARE = '''def compare(a, b):
    (ga, ba, ra), (gb, bb, rb) = [(np.asarray(g, np.float64), {n: np.asarray(v) for n, v in B.items()}, np.asarray(r)) for g, B, r in (a, b)]
    err = float(abs(ga - gb).max()) if ga.size else 0.0; out = [f"gradient max|diff| {err:.3g}"] if err > TOL * max(1, float(abs(ga).max())) else []
    return out + [f"buffer {n}" for n in ba if ba[n].tobytes() != bb[n].tobytes()] + (["generator state"] if ra.tobytes() != rb.tobytes() else [])
try: diffs = compare(run(False), run(True))
except Exception as exc: diffs = [f"raised {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"]
print("".join(f"DIFFERS: {d}\\n" for d in diffs), end=""); sys.exit(1 if diffs else 0)
'''
RULES = ('{"axpby": lambda: (c["a"] * rd(x) + c["b"] * rd(y)) + c["c"], "mul": lambda: rd(x) * rd(y), '
         '"copy": lambda: rd(x), "noise": lambda: rd(x) + c["sigma"] * z, '
         '"dropout": lambda: (rd(x) * z) / c["keep"]}[kind]()')


def jax_script(case: Case, *, jit: bool, policy: str | None, remat3: bool) -> str:
    """JAX mutable refs: plain ``jax.vjp`` against ``jax.checkpoint`` of the segment."""
    pol = f"jax.checkpoint_policies.{policy}" if policy else "None"
    return f'''import os, sys; os.environ.update(XLA_FLAGS="--xla_cpu_max_isa=AVX", JAX_REMAT3="{int(remat3)}")  # no FMA under jit
import jax, jax.numpy as jnp, numpy as np; jax.config.update("jax_enable_x64", True)
{literal(case)}
def sl(v): b, lo, n, st = VIEWS[v]; return b, slice(lo, lo + (n - 1) * st + 1, st)
def ops(ks, R, key):
    for k in ks:
        kind, dst, x, y, c = OPS[k]; rd = lambda v: R[sl(v)[0]][sl(v)[1]]; c = {{n: jnp.asarray(v, DT) for n, v in c.items()}}
        if kind in ("noise", "dropout"):
            key, sub = jax.random.split(key); n = VIEWS[dst][2]
            z = jax.lax.optimization_barrier(jax.random.normal(sub, (n,), DT) if kind == "noise" else (jax.random.uniform(sub, (n,), DT) < c["keep"]).astype(DT))
        val = {RULES}; R[sl(dst)[0]][sl(dst)[1]] = jax.lax.stop_gradient(val) if k in UNTRACKED else val
    return key
def run(ckpt):  # the initial arrays made outside jit, as a model's are
    B0 = {{b: jnp.asarray(v, DT) for b, v in BUFS.items()}}; hid = {{h: jax.new_ref(B0[h]) for h in HIDDEN}}
    def seg(vals, key):
        L = {{b: jax.new_ref(v) for b, v in vals.items()}}; L.update(hid); key = ops(range(*SEG), L, key); return {{b: L[b][...] for b in vals}}, key
    def prog(xs):
        V = {{b: v for b, v in B0.items() if b not in HIDDEN}}
        for name, x in zip(INPUTS, xs): V[sl(name)[0]] = V[sl(name)[0]].at[sl(name)[1]].set(x)
        R = {{b: jax.new_ref(v) for b, v in V.items()}}; R.update(hid); key = ops(range(SEG[0]), R, jax.random.key(SEED))
        vals, key = (jax.checkpoint(seg, policy={pol}) if ckpt else seg)({{b: R[b][...] for b in V}}, key)
        for b, v in vals.items(): R[b][...] = v
        key = ops(range(SEG[1], len(OPS)), R, key); l = R[sl(LOSS[0])[0]][sl(LOSS[0])[1]].astype(jnp.float64)
        return jnp.sum(jnp.asarray(LOSS[1]) * l), ({{b: R[b][...] for b in V}}, jax.random.key_data(key))
    xs = tuple(B0[sl(n)[0]][sl(n)[1]] for n in INPUTS)
    _, vjp, (bufs, key) = jax.vjp(jax.jit(prog) if {jit} else prog, xs, has_aux=True)
    return jnp.concatenate([v.reshape(-1) for v in vjp(jnp.float64(1.0))[0]] or [jnp.zeros(0)]), {{**bufs, **{{h: r[...] for h, r in hid.items()}}}}, key
''' + _COMPARE


def keras_script(case: Case, *, backend: str, how: str) -> str:
    """Keras on ``backend`` (torch or jax): the layer stack without and with remat
    (``how``: "remat-scope" builds the segment layer in RematScope(mode="full"),
    "remat" calls it through keras.remat)."""
    env = ('KERAS_BACKEND="torch"' if backend == "torch" else
           'KERAS_BACKEND="jax", JAX_ENABLE_X64="1", XLA_FLAGS="--xla_cpu_max_isa=AVX"')
    fw = "torch" if backend == "torch" else "jax, jax.numpy as jnp"
    return f'''import os, sys; os.environ.update({env}); import keras, numpy as np, {fw}; from keras import ops
{literal(case)}
IDX = {{v: np.arange(lo, lo + (n - 1) * st + 1, st) for v, (b, lo, n, st) in VIEWS.items()}}; NAMES = sorted(b for b in BUFS if b not in HIDDEN); now = lambda t: t.value if isinstance(t, keras.Variable) else t
def write(B, v, val):
    b = VIEWS[v][0]; m = np.zeros(len(BUFS[b]), bool); m[IDX[v]] = True; sp = np.zeros(len(BUFS[b]), "int64"); sp[IDX[v]] = np.arange(len(IDX[v])); new = ops.where(ops.convert_to_tensor(m), ops.take(val, sp), now(B[b]))
    B[b].assign(new) if isinstance(B[b], keras.Variable) else B.__setitem__(b, new)
class Ops(keras.layers.Layer):
    def __init__(self, ks, st): super().__init__(dtype=DT, autocast=False); self.ks, self.st = ks, st
    def call(self, *ts):
        B = dict(zip(NAMES, ts)); B.update(self.st["hid"])
        for k in self.ks:
            kind, dst, x, y, c = OPS[k]; rd = lambda v: ops.take(now(B[VIEWS[v][0]]), IDX[v]); c = {{n: ops.convert_to_tensor(np.asarray(v, DT)) for n, v in c.items()}}; n, g = VIEWS[dst][2], self.st["gen"]
            z = keras.random.normal((n,), dtype=DT, seed=g) if kind == "noise" else ops.cast(ops.less(keras.random.uniform((n,), dtype=DT, seed=g), c["keep"]), DT) if kind == "dropout" else None
            val = {RULES}; write(B, dst, ops.stop_gradient(val) if k in UNTRACKED else val)
        return tuple(B[n] for n in NAMES)
def fwd(xs, st, remat):
    B = {{b: ops.convert_to_tensor(np.asarray(BUFS[b], DT)) for b in NAMES}}; pre, post = Ops(range(SEG[0]), st), Ops(range(SEG[1], len(OPS)), st)
    for n, x in zip(INPUTS, xs): write(B, n, x)
    with keras.RematScope(mode="full" if remat and "{how}" == "remat-scope" else None): seg = Ops(range(*SEG), st)
    seg = keras.remat(seg) if remat and "{how}" == "remat" else seg; vals = tuple(B[n] for n in NAMES)
    for f, ks in ((pre, range(SEG[0])), (seg, range(*SEG)), (post, range(SEG[1], len(OPS)))): vals = f(*vals) if len(ks) else vals
    B = dict(zip(NAMES, vals)); return ops.sum(ops.convert_to_tensor(np.asarray(LOSS[1])) * ops.cast(ops.take(B[VIEWS[LOSS[0]][0]], IDX[LOSS[0]]), "float64")), B
def state(): return {{"hid": {{h: keras.Variable(np.asarray(BUFS[h], DT), trainable=False) for h in HIDDEN}}, "gen": keras.random.SeedGenerator(SEED)}}
''' + (_KERAS_TORCH if backend == "torch" else _KERAS_JAX) + _COMPARE


_KERAS_TORCH = '''def run(remat):
    torch.set_num_threads(1); st = state(); xs = [torch.tensor(np.asarray(BUFS[VIEWS[n][0]], DT)[IDX[n]], requires_grad=True) for n in INPUTS]; loss, B = fwd(xs, st, remat); loss.backward()
    out = {**{n: v.detach().numpy() for n, v in B.items()}, **{h: v.value.detach().numpy() for h, v in st["hid"].items()}}
    return torch.cat([x.grad.reshape(-1).double() for x in xs] or [torch.zeros(0)]).numpy(), out, st["gen"].state.value.numpy()
'''
_KERAS_JAX = '''def run(remat):
    st = state(); V = [*st["hid"].values(), st["gen"].state]; init = [v.value for v in V]
    def prog(xs):
        with keras.StatelessScope(state_mapping=list(zip(V, init))) as sc:
            loss, B = fwd(xs, st, remat); fin = [sc.get_current_value(v) for v in V]; fin = [i if f is None else f for f, i in zip(fin, init)]
        return loss, ({**B, **dict(zip(st["hid"], fin))}, fin[-1])
    _, vjp, (out, gen) = jax.vjp(prog, [jnp.asarray(np.asarray(BUFS[VIEWS[n][0]], DT)[IDX[n]]) for n in INPUTS], has_aux=True)
    return jnp.concatenate([g.reshape(-1) for g in vjp(jnp.float64(1.0))[0]] or [jnp.zeros(0)]), out, gen
'''
