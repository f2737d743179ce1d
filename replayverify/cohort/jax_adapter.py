"""The JAX adapter: functional execution, ``jax.checkpoint``, native in-place writes and
an impure holder.

Buffers are 1-D arrays of the case's dtype. Functional methods read a view with a
strided ``lax.slice`` and write it out of place (``lax.pad`` spreads the values to
their positions, a select takes them there: one primitive each, exact bits); the native
in-place methods write ``buf[index] = values``, which JAX refuses. The generator is a
key threaded through the program: each draw splits it. Every run is differentiated
with ``jax.vjp`` and happens inside ``jax.enable_x64(True)`` (a local context: the loss
is float64 as SPEC says, and float64 cases need it); nothing global changes for the user.

The impure holder keeps the hidden buffers and the key in a Python object that the
functions rebind; the other buffers flow through arguments and results.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

import numpy as np

from replayverify.cohort._ops import RULES, operands, unsupported_ops
from replayverify.cohort.adapter import DrawTape, Method, Observation
from replayverify.cohort.cases import HIDDEN_FAMILIES, Case

HINT = "JAX is not installed: pip install jax jaxlib, or '.[cohort]'"

METHODS = (
    Method("functional", "JAX functional reference", doc="functional updates, jax.vjp"),
    Method("checkpoint", "JAX functional checkpoint",
           doc="the segment under jax.checkpoint, every buffer and the key as arguments"),
    Method("inplace-eager", "JAX native in-place eager", doc="buf[index] = values"),
    Method("inplace-checkpoint", "JAX native in-place checkpoint",
           doc="buf[index] = values under jax.checkpoint"),
    Method("holder-eager", "JAX impure-holder eager", HIDDEN_FAMILIES,
           doc="hidden buffers and the key rebound on a Python object"),
    Method("holder-checkpoint", "JAX impure-holder checkpoint", HIDDEN_FAMILIES,
           doc="the same with the segment under jax.checkpoint"),
)


class JaxAdapter:
    """JAX functional checkpointing, native in-place writes and an impure holder."""

    name = "jax"
    label = "JAX"

    def missing(self) -> str | None:
        # find_spec, not import: a parent process stays free of the framework's threads
        return None if importlib.util.find_spec("jax") else HINT

    def version(self) -> str:
        return importlib.metadata.version("jax")

    def methods(self, extra: bool = False) -> tuple[Method, ...]:
        return METHODS

    def draw_tape(self, case: Case) -> DrawTape:
        import jax

        with jax.enable_x64(True):
            key = jax.random.key(case.draw_seed)
            draws = {}
            for k, op in enumerate(case.program.ops):
                if op.spec.draws:
                    key, z = _draw(jax, key, op, case.program.view(op.dst).size, case.dtype)
                    draws[k] = np.asarray(z).copy()
            return DrawTape(draws, _key_bytes(jax, key))

    def run(self, case: Case, method: Method) -> Observation:
        import jax

        bad = unsupported_ops(case.program)
        if bad:
            raise NotImplementedError(f"the JAX adapter does not translate {bad}")
        with jax.enable_x64(True):
            return _Run(jax, case, method.name).observe()


def _key_bytes(jax: Any, key: Any) -> bytes:
    return np.asarray(jax.random.key_data(key)).tobytes()


def _draw(jax: Any, key: Any, op, n: int, dtype: str, keep: Any = None) -> tuple[Any, Any]:
    """(next key, the op's draw); ``keep``: the dropout's keep probability as an array of
    the dtype (default: ``op.keep`` made one)."""
    key, sub = jax.random.split(key)
    if op.kind.value == "noise":
        return key, jax.random.normal(sub, (n,), dtype)
    u = jax.random.uniform(sub, (n,), dtype)
    keep = jax.numpy.asarray(op.keep, dtype) if keep is None else keep
    return key, (u < keep).astype(dtype)


_COEFS = ("a", "b", "c", "sigma", "keep")  # the Op fields RULES and _draw read


class _Holder:
    """Impure state: the hidden buffers and the generator key, rebound by the program."""

    def __init__(self, bufs: dict, key: Any):
        self.bufs = bufs
        self.key = key


class _Run:
    def __init__(self, jax: Any, case: Case, method: str):
        self.jax, self.jnp, self.case, self.method = jax, jax.numpy, case, method
        self.p = case.program
        self.index = {v.name: v.element_starts() // v.itemsize for v in self.p.views}
        bufs = {b.name: np.zeros(b.nbytes // np.dtype(case.dtype).itemsize, case.dtype)
                for b in self.p.buffers}
        for e in self.p.init:
            bufs[self.p.view(e.view).buffer][self.index[e.view]] = e.values
        self.start = {k: self.jnp.asarray(v) for k, v in bufs.items()}
        self.holder: _Holder | None = None
        # The case's numbers as arguments (``numbers()``), while a subclass traces the
        # program with them; None: each is made a constant where it is used.
        self.given: dict | None = None

    def numbers(self) -> dict:
        """Every number of the case the program uses, by name: the start buffers, each
        op's coefficients (``"<k>.<name>"``, in the case's dtype), the loss weights, the
        draw seed, and each 1-D view's first element and mask. A program traced with
        these as arguments is the same program for every case of the same shape
        (``jax_state_adapter``: the persistent compilation cache then serves the cases
        after the first)."""
        jnp, dtype = self.jnp, self.case.dtype
        given = {"start": dict(self.start),
                 "weights": jnp.asarray(self.p.loss.weights, jnp.float64),
                 "seed": jnp.asarray(np.int64(self.case.draw_seed))}  # as random.key has it
        for k, op in enumerate(self.p.ops):
            for c in _COEFS:
                if getattr(op, c) is not None:
                    given[f"{k}.{c}"] = jnp.asarray(op.coef(c), dtype)
        for v in self.p.views:  # where the 1-D views are (read and written)
            if len(v.shape) == 1:
                given[f"lo.{v.name}"] = jnp.asarray(np.int64(v.offset // v.itemsize))
                given[f"mask.{v.name}"] = jnp.asarray(self.mask(v.name))
        return given

    def number(self, name: str, value: Any, dtype: Any) -> Any:
        """Number ``name`` of the case: the argument while tracing with ``numbers()``,
        else ``value`` as a constant array of ``dtype``."""
        if self.given is not None:
            return self.given[name]
        return self.jnp.asarray(value, dtype)

    def seed(self) -> Any:
        """The draw seed: the argument while tracing with ``numbers()``, else the int."""
        return self.case.draw_seed if self.given is None else self.given["seed"]

    # ------------------------------------------------------------ views
    def read(self, bufs: dict, name: str) -> Any:
        """A view's elements: one strided ``lax.slice`` for a 1-D view, else a gather.

        While tracing with ``numbers()``, a 1-D view's first element is an argument: a
        ``dynamic_slice`` of the view's span at it, then the strided slice (the same
        elements; its transpose puts the cotangent at the same places, with no add).
        """
        v = self.p.view(name)
        buf = bufs[v.buffer]
        if len(v.shape) == 1:
            lax = self.jax.lax
            lo, n, step = v.offset // v.itemsize, v.shape[0], v.strides[0] // v.itemsize
            span = (n - 1) * step + 1
            if self.given is not None:
                part = lax.dynamic_slice(buf, (self.given[f"lo.{name}"],), (span,))
                return lax.slice(part, (0,), (span,), (step,))
            return lax.slice(buf, (lo,), (lo + span,), (step,))
        return buf[self.index[name]].reshape(v.shape)

    def written(self, buf: Any, name: str, values: Any) -> Any:
        """``buf`` with the view's elements replaced (out of place, exact bits).

        1-D views: ``lax.pad`` spreads the values to their strided positions and a select
        takes them there (while tracing with ``numbers()``: spread over the view's span,
        which ``dynamic_update_slice`` puts into zeros at the view's first element, an
        argument, as is the mask). Otherwise ``.at[index].set(..., unique_indices=True)``:
        a view's elements are distinct, and without the hint JAX's differentiated
        scatter writes -0.0 as +0.0.
        """
        v = self.p.view(name)
        values = values.reshape(-1)
        if len(v.shape) != 1:
            return buf.at[self.index[name]].set(values, unique_indices=True)
        lax, jnp = self.jax.lax, self.jnp
        lo, n, step = v.offset // v.itemsize, v.shape[0], v.strides[0] // v.itemsize
        zero = jnp.zeros((), buf.dtype)
        if self.given is not None:
            spread = lax.dynamic_update_slice(
                jnp.zeros(buf.shape, buf.dtype), lax.pad(values, zero, [(0, 0, step - 1)]),
                (self.given[f"lo.{name}"],))
            return lax.select(self.given[f"mask.{name}"], spread, buf)
        hi = buf.shape[0] - (lo + (n - 1) * step + 1)
        spread = lax.pad(values, zero, [(lo, hi, step - 1)])
        return lax.select(jnp.asarray(self.mask(name)), spread, buf)

    def mask(self, name: str) -> np.ndarray:
        """True at the elements of 1-D view ``name`` in its buffer."""
        v = self.p.view(name)
        mask = np.zeros(self.p.buffer(v.buffer).nbytes // v.itemsize, bool)
        mask[self.index[name]] = True
        return mask

    # ------------------------------------------------------------ one op
    def op(self, k: int, bufs: dict, key: Any) -> Any:
        op = self.p.ops[k]
        dtype = self.case.dtype
        o = operands(op, lambda name: self.read(bufs, name))
        z = None
        if op.spec.draws:
            key, z = self.draw(key, op)
        values = self.tag(op, RULES[op.kind](
            lambda c: self.number(f"{k}.{c}", op.coef(c), dtype), o, z))
        if k in self.case.roles.untracked:
            values = self.jax.lax.stop_gradient(values)
        self.store(bufs, op.dst, values)
        return key

    def draw(self, key: Any, op) -> tuple[Any, Any]:
        """(next key, the op's draw), as ``draw_tape`` makes it."""
        k = next(k for k, o in enumerate(self.p.ops) if o is op)
        keep = None if op.keep is None else self.number(f"{k}.keep", op.keep, self.case.dtype)
        return _draw(self.jax, key, op, self.p.view(op.dst).size, self.case.dtype, keep)

    def tag(self, op, values: Any) -> Any:
        """An op's output as the program uses it (a subclass may name it for remat)."""
        return values

    def store(self, bufs: dict, name: str, values: Any) -> None:
        """Write view ``name`` of ``bufs``: natively in place (refused) or out of place."""
        b = self.p.view(name).buffer
        if self.method.startswith("inplace"):
            bufs[b][self.index[name]] = values  # JAX arrays are immutable: refused
        else:
            bufs[b] = self.written(bufs[b], name, values)

    def ops(self, ks: range, bufs: dict, key: Any) -> Any:
        for k in ks:
            key = self.op(k, bufs, key)
        return key

    # ------------------------------------------------------------ the program
    def program(self, xs: tuple) -> tuple:
        """(loss, (final buffers, final key)) as a function of the inputs."""
        jnp = self.jnp
        bufs = self.start_buffers()
        for name, x in zip(self.p.inputs, xs):
            b = self.p.view(name).buffer
            bufs[b] = self.written(bufs[b], name, x)
        key = self.jax.random.key(self.seed())
        hidden = self.case.roles.hidden
        holder = self.method.startswith("holder")
        if holder:
            self.holder = _Holder({h: bufs.pop(h) for h in hidden}, key)
        seg = self.case.segment_ops()
        n = len(self.p.ops)
        if self.method in ("functional", "inplace-eager", "holder-eager"):
            key = self.step(range(n), bufs, key)
        else:
            key = self.step(range(seg.start), bufs, key)
            key = self.checkpointed(seg, bufs, key)
            key = self.step(range(seg.stop, n), bufs, key)
        w = self.number("weights", self.p.loss.weights, jnp.float64)
        lv = self.p.loss.view
        values = self.read(bufs, lv).reshape(-1).astype(jnp.float64)
        return jnp.sum(w * values), (bufs, None if holder else key)

    def start_buffers(self) -> dict:
        """The buffers before the inputs are written (arguments while tracing with
        ``numbers()``)."""
        return dict(self.start if self.given is None else self.given["start"])

    def step(self, ks: range, bufs: dict, key: Any) -> Any:
        """Ops ``ks`` on ``bufs``; with a holder, its hidden buffers and key are used and
        rebound."""
        if self.holder is None:
            return self.ops(ks, bufs, key)
        h = self.holder
        merged = {**bufs, **h.bufs}
        h.key = self.ops(ks, merged, h.key)
        for name in list(merged):
            if name in h.bufs:
                h.bufs[name] = merged[name]
            else:
                bufs[name] = merged[name]
        return key

    def checkpointed(self, seg: range, bufs: dict, key: Any) -> Any:
        names = sorted(bufs)

        def segment(values: tuple, key: Any) -> tuple:
            local = dict(zip(names, values))
            key = self.step(seg, local, key)
            return tuple(local[n] for n in names), key

        values, key = self.jax.checkpoint(segment)(tuple(bufs[n] for n in names), key)
        bufs.update(zip(names, values))
        return key

    def observe(self) -> Observation:
        jnp = self.jnp
        xs = tuple(self.start[self.p.view(n).buffer][self.index[n]] for n in self.p.inputs)
        _loss, vjp, (bufs, key) = self.jax.vjp(self.program, xs, has_aux=True)
        (grads,) = vjp(jnp.ones((), jnp.float64))
        gradient = np.concatenate([np.asarray(g, np.float64).reshape(-1) for g in grads]) \
            if grads else np.zeros(0)
        if self.holder is not None:
            bufs = {**bufs, **self.holder.bufs}
            key = self.holder.key
        return Observation(gradient, {n: np.asarray(b).tobytes() for n, b in bufs.items()},
                           _key_bytes(self.jax, key))
