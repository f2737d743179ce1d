"""A readable rendering of a program: buffers, views, ops by segment, inputs, loss."""

from __future__ import annotations

from replayverify.programs.format import program_sha256
from replayverify.programs.model import Program


def _coefs(op) -> str:
    parts = [f"{c.name}={op.coef(c.name)!r}" for c in op.spec.coefs]
    return (" " + " ".join(parts)) if parts else ""


def render(program: Program) -> str:
    lines = [f"program {program.name or '(unnamed)'}  sha256 {program_sha256(program)}"]
    for b in program.buffers:
        lines.append(f"buffer {b.name}: {b.nbytes} bytes")
    for v in program.views:
        shape = "x".join(map(str, v.shape))
        lines.append(
            f"  view {v.name:<10} {v.dtype:<7} {v.buffer}[{v.offset}:] shape {shape} "
            f"strides {list(v.strides)}"
        )
    for e in program.init:
        lines.append(f"init {e.view} = {list(e.values)}")
    lines.append(f"rng key {list(program.rng.key)} counter {list(program.rng.counter)}")
    for s, (lo, hi) in enumerate(program.segment_bounds()):
        lines.append(f"segment {s}:")
        for k in range(lo, hi):
            op = program.ops[k]
            srcs = ", ".join(getattr(op, f) for f in op.spec.view_fields[1:])
            lines.append(f"  {k:>3}  {op.dst} = {op.kind.value}({srcs}){_coefs(op)}")
    lines.append(f"inputs {', '.join(program.inputs) or '(none)'}")
    lines.append(f"loss sum(w * {program.loss.view}), w = {list(program.loss.weights)}")
    return "\n".join(lines)
