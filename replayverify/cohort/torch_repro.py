"""Standalone torch reproducers: one case, written out as plain torch code.

``script(case, ...)`` gives the text of a script that imports only torch (and the
standard library), builds the case literally (buffers, views as ``as_strided`` windows,
every op one line, constants inlined), runs it without checkpointing (the plain run)
and with one method, and prints a ``DIFFERS: ...`` line per thing that differs
(gradient beyond SPEC §5's tolerance, a buffer's bytes, the generator state, or the
method raising), exiting 1 if anything did and 0 if nothing did
(docs/cohort.md, "Reproducers").

The script runs the program as the torch adapters do: for a compiled method, the
forward up to the segment's end is a function ``fwd`` of every buffer that the method
compiles (the ops after it run eagerly); the checkpointed segment is a
function ``seg`` of the non-hidden buffers it touches that clones those it writes and
reads hidden buffers from the enclosing scope; the loss is the float64 weighted sum
of the loss view, then ``backward()``.
"""

from __future__ import annotations

from replayverify.cohort._ops import element_geometry
from replayverify.cohort.cases import Case

MAX_LINES = 40  # the reproducer contract's limit
PLAIN = "lambda f, *a: f(*a)"  # the segment called directly: no checkpoint


def _num(v: float) -> str:
    return repr(float(v))


def _list(values) -> str:
    return "[" + ", ".join(_num(v) for v in values) + "]"


class _Writer:
    def __init__(self, case: Case, clone_reads: bool):
        self.case, self.p, self.clone_reads = case, case.program, clone_reads

    def view(self, name: str) -> str:
        shape, strides, offset = element_geometry(self.p, name)
        return f"V(b_{self.p.view(name).buffer}, {shape}, {strides}, {offset})"

    def read(self, name: str) -> str:
        return f"R({self.view(name)})" if self.clone_reads else self.view(name)

    def expr(self, op) -> str:
        x = self.read(op.x)
        n = self.p.view(op.dst).size
        kind = op.kind.value
        if kind == "axpby":
            return f"(C({_num(op.a)}) * {x} + C({_num(op.b)}) * {self.read(op.y)}) " \
                   f"+ C({_num(op.c)})"
        if kind == "mul":
            return f"{x} * {self.read(op.y)}"
        if kind == "copy":
            return x
        if kind == "noise":
            return f"{x} + C({_num(op.sigma)}) * torch.randn({n}, dtype=DT)"
        if kind == "dropout":
            return f"({x} * (torch.rand({n}, dtype=DT) < C({_num(op.keep)})).to(DT)) " \
                   f"/ C({_num(op.keep)})"
        raise ValueError(f"no torch reproducer for op {kind!r}")

    def op_lines(self, k: int, indent: str) -> list[str]:
        op = self.p.ops[k]
        dst = self.view(op.dst)
        if k in self.case.roles.untracked:  # as the adapter: computed under no_grad
            return [f"{indent}with torch.no_grad(): t = ({self.expr(op)}).clone()",
                    f"{indent}{dst}.copy_(t)"]
        return [f"{indent}{dst}.copy_({self.expr(op)})"]


def script(case: Case, *, title: str, ckpt: str, wrap: str | None = None,
           imports: tuple[str, ...] = (), context: str | None = None,
           clone_reads: bool = False) -> str:
    """The reproducer's text. ``ckpt``: a callable ``(seg, *buffers) -> owned buffers``
    for the method's segment; ``wrap``: what the method does to ``fwd``, the function
    of every buffer that runs the ops (a compiled method compiles it; None: no ``fwd``);
    ``context``: a context manager expression active around the method's whole run,
    backward included (a config patch); ``imports``: lines. ``clone_reads``: the plain
    run reads every operand through a clone (what the program means where eager torch
    refuses it: a saved tensor overwritten in place, an overlapping copy), the method
    run reads the views themselves."""
    w = _Writer(case, clone_reads)
    p = case.program
    item = 4 if case.dtype == "float32" else 8
    names = [b.name for b in p.buffers]
    sizes = [b.nbytes // item for b in p.buffers]
    allb = ", ".join(f"b_{n}" for n in names)
    lo = case.segment_ops()
    hidden = set(case.roles.hidden)
    touched = {p.view(v).buffer for k in lo for v in p.ops[k].views()}
    written = {p.view(p.ops[k].dst).buffer for k in lo}
    args = ", ".join(f"b_{n}" for n in sorted(touched - hidden))
    owned = ", ".join(f"b_{n}" for n in sorted(written - hidden))
    eps = "2.0 ** -23" if case.dtype == "float32" else "2.0 ** -52"
    params = ["ckpt", *(["wrap"] if wrap else []), *(["R"] if clone_reads else [])]
    lines = [f"# {title}", "import torch", *imports,
             f"DT, SEED, N_OPS, EPS = torch.{case.dtype}, {case.draw_seed}, {len(p.ops)}, {eps}; "
             "V, C = (lambda b, shape, strides, off: b.as_strided(shape, strides, off)), "
             "(lambda v: torch.tensor(v, dtype=DT))  # a view; a coefficient (0-d)",
             f"def run({', '.join(params)}):", "    torch.manual_seed(SEED)",
             f"    {allb}{',' if len(names) == 1 else ''} = "
             f"(torch.zeros(n, dtype=DT) for n in {tuple(sizes)})"]
    for e in p.init:
        lines.append(f"    {w.view(e.view)}.copy_(torch.tensor({_list(e.values)}, dtype=DT))")
    lines.append("    " + "; ".join(
        ["leaves = [" + ", ".join(f"{w.view(n)}.detach().clone().requires_grad_()"
                                  for n in p.inputs) + "]"]
        + [f"{w.view(n)}.copy_(leaves[{j}])" for j, n in enumerate(p.inputs)]))
    ind = "    "
    if wrap:
        lines.append(f"    def fwd({allb}):")
        ind = "        "
    for k in range(lo.start):
        lines += w.op_lines(k, ind)
    lines += [f"{ind}def seg({args}):",
              f"{ind}    {owned} = {', '.join(f'{b}.clone()' for b in owned.split(', '))}"]
    for k in lo:
        lines += w.op_lines(k, ind + "    ")
    lines += [f"{ind}    return {owned},", f"{ind}{owned}, = ckpt(seg, {args})"]
    if wrap:  # the compiled forward ends with the segment; the rest runs eagerly
        lines += [f"        return {allb},", f"    {allb}, = wrap(fwd)({allb})"]
    for k in range(lo.stop, len(p.ops)):
        lines += w.op_lines(k, "    ")
    lines += [f"    w = torch.tensor({_list(p.loss.weights)}, dtype=torch.float64)",
              f"    (w * {w.view(p.loss.view)}.reshape(-1).to(torch.float64)).sum().backward()",
              "    return torch.cat([torch.zeros(t.numel()) if t.grad is None else "
              "t.grad.reshape(-1) for t in leaves] + [torch.zeros(0)]).double(), {"
              + ", ".join(f"{n!r}: b_{n}" for n in names) + "}, torch.get_rng_state()"]
    plain = [PLAIN, *(["lambda f: f"] if wrap else []),
             *(["lambda t: t.clone()"] if clone_reads else [])]
    lines += [f"plain = run({', '.join(plain)})", "try:"]
    method = [ckpt, *([wrap] if wrap else []), *(["lambda t: t"] if clone_reads else [])]
    body = f"got = run({', '.join(method)})"
    lines += [f"    with {context}:", f"        {body}"] if context else [f"    {body}"]
    lines += ["except Exception as e:  # the method refused it (a compiler error: what it wraps)",
              "    e = getattr(e, 'inner_exception', None) or e; print(f'DIFFERS: raised "
              "{type(e).__name__}: '"
              " + (str(e).strip().splitlines() or [''])[0]); raise SystemExit(1)",
              "err = max((got[0] - plain[0]).abs().tolist(), default=0.0)",
              "out = [f'gradient max|diff| {err:.3g}'] * (not err <= 64 * EPS * N_OPS * "
              "max([1.0, *plain[0].abs().tolist()]))",
              "out += [f'buffer {k}' for k, t in plain[1].items() if t.detach().numpy()"
              ".tobytes() != got[1][k].detach().numpy().tobytes()]",
              "out += ['generator state'] * (not torch.equal(plain[2], got[2]))",
              "print('\\n'.join('DIFFERS: ' + x for x in out) or 'no difference'); "
              "raise SystemExit(1 if out else 0)"]
    return "\n".join(lines) + "\n"
