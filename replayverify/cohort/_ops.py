"""Cohort ops in a framework: the SPEC formulas over the framework's own tensors.

One rule per op kind the families use, written once for any array library whose
tensors support ``+``, ``*`` and ``/`` (torch, jax.numpy): coefficients arrive as
0-d tensors of the case's dtype (converted like numpy's ``dtype.type(c)``), and each
formula is evaluated left to right as SPEC §2 writes it. ``z`` is the op's draw: the
standard normals (noise) or the 0/1 mask (dropout) in the dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from replayverify.programs.model import Op, OpKind, Program

Coef = Callable[[str], Any]

RULES: dict[OpKind, Callable[[Coef, dict, Any], Any]] = {
    OpKind.AXPBY: lambda c, o, z: (c("a") * o["x"] + c("b") * o["y"]) + c("c"),
    OpKind.MUL: lambda c, o, z: o["x"] * o["y"],
    OpKind.COPY: lambda c, o, z: o["x"],  # the source itself: a raw copy into dst
    OpKind.NOISE: lambda c, o, z: o["x"] + c("sigma") * z,
    OpKind.DROPOUT: lambda c, o, z: (o["x"] * z) / c("keep"),
}


def unsupported_ops(program: Program) -> list[str]:
    """Op kinds of ``program`` that the framework adapters do not translate."""
    return sorted({op.kind.value for op in program.ops if op.kind not in RULES})


def element_geometry(program: Program, name: str) -> tuple[tuple, tuple, int]:
    """(shape, strides, offset) of a view in elements of its dtype."""
    v = program.view(name)
    return v.shape, tuple(s // v.itemsize for s in v.strides), v.offset // v.itemsize


def operands(op: Op, read: Callable[[str], Any]) -> dict:
    return {f: read(getattr(op, f)) for f in op.spec.sources}
