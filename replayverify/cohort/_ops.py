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

# Op kinds with no rule above, each with why. The cohort families (cases.py) use only ops
# that are one correctly rounded IEEE operation per element in every framework, so that a
# framework and the interpreter fed its draws agree to the bit; no adapter translates the
# rest: a case holding one is refused by every adapter, naming it (``unsupported_ops``).
# A new op kind goes into RULES or here, with its reason: tests/unit/test_op_tables.py
# fails until it is in exactly one of the two.
_LIBM = "not correctly rounded: each framework's libm may differ from NumPy's in the last bit"
_INT = "no cohort family uses it: the cases hold float buffers only"
_INDEX = "no cohort family uses it: the cases hold no index views"
NOT_TRANSLATED: dict[OpKind, str] = {
    OpKind.TANH: _LIBM,
    OpKind.SIN: _LIBM,
    OpKind.GATHER: _INDEX,
    OpKind.SCATTER: _INDEX,
    OpKind.IADD: _INT,
    OpKind.IXOR: _INT,
    OpKind.ICOPY: _INT,
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
