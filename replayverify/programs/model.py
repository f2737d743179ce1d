"""The program IR: a few frozen dataclasses and one enum of op kinds (SPEC §2).

A program is data. Nothing about a particular program lives in code paths: the
tables below say, per op kind, which fields name views and which are coefficients.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from replayverify.untrusted import InputError

FORMAT = "replayverify.program"
VERSION = 1
DEFAULT_MAX_BYTES = 256 * 1024 * 1024

DTYPES: dict[str, np.dtype] = {
    "float64": np.dtype("<f8"),
    "float32": np.dtype("<f4"),
    "int64": np.dtype("<i8"),
    "int32": np.dtype("<i4"),
}
FLOAT_DTYPES = ("float64", "float32")
INT_DTYPES = ("int64", "int32")


class ProgramError(InputError):
    """A program that SPEC §2 refuses. ``field`` names where, ``reason`` says why.

    The message is one line (control characters escaped, at most MAX_MESSAGE characters).
    """


class OpKind(str, enum.Enum):
    """Every operation the IR knows. Each table keyed by op kind must cover all of these."""

    AXPBY = "axpby"
    MUL = "mul"
    TANH = "tanh"
    SIN = "sin"
    COPY = "copy"
    NOISE = "noise"
    DROPOUT = "dropout"
    GATHER = "gather"
    SCATTER = "scatter"
    IADD = "iadd"
    IXOR = "ixor"
    ICOPY = "icopy"


class DtypeRule(enum.Enum):
    """Which dtypes an op's dst and value sources may have."""

    FLOAT = "float"  # dst and sources: the same float dtype
    INT = "int"  # dst and sources: the same integer dtype
    SAME = "same"  # dst and sources: the same dtype, float or integer


@dataclass(frozen=True, slots=True)
class Coef:
    """A coefficient field: ``kind`` is "float" or "int"; ``default`` None means required."""

    name: str
    kind: str
    default: float | int | None = None


@dataclass(frozen=True, slots=True)
class OpSpec:
    """The static shape of one op kind: its view fields, coefficients and dtype rule."""

    sources: tuple[str, ...]  # value sources, read before any write
    coefs: tuple[Coef, ...]
    dtypes: DtypeRule
    draws: bool = False  # consumes one Philox block per dst element
    indexed: bool = False  # has an integer ``index`` view

    @property
    def view_fields(self) -> tuple[str, ...]:
        return ("dst",) + self.sources + (("index",) if self.indexed else ())


_F = DtypeRule.FLOAT
OP_SPECS: dict[OpKind, OpSpec] = {
    OpKind.AXPBY: OpSpec(
        ("x", "y"), (Coef("a", "float", 1.0), Coef("b", "float", 1.0), Coef("c", "float", 0.0)), _F
    ),
    OpKind.MUL: OpSpec(("x", "y"), (), _F),
    OpKind.TANH: OpSpec(("x",), (Coef("a", "float", 1.0),), _F),
    OpKind.SIN: OpSpec(("x",), (Coef("a", "float", 1.0),), _F),
    OpKind.COPY: OpSpec(("x",), (), DtypeRule.SAME),
    OpKind.NOISE: OpSpec(("x",), (Coef("sigma", "float"),), _F, draws=True),
    OpKind.DROPOUT: OpSpec(("x",), (Coef("keep", "float"),), _F, draws=True),
    OpKind.GATHER: OpSpec(("x",), (), DtypeRule.SAME, indexed=True),
    OpKind.SCATTER: OpSpec(("x",), (), DtypeRule.SAME, indexed=True),
    OpKind.IADD: OpSpec(("x",), (Coef("k", "int"),), DtypeRule.INT),
    OpKind.IXOR: OpSpec(("x",), (Coef("k", "int"),), DtypeRule.INT),
    OpKind.ICOPY: OpSpec(("x",), (), DtypeRule.INT),
}


@dataclass(frozen=True, slots=True)
class Buffer:
    name: str
    nbytes: int


@dataclass(frozen=True, slots=True)
class View:
    """A typed strided window: numpy ``as_strided`` semantics, strides in bytes."""

    name: str
    buffer: str
    dtype: str
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def element_starts(self) -> np.ndarray:
        """Byte offset of each element's first byte inside the buffer, row-major (int64)."""
        starts = np.full(self.shape, self.offset, dtype=np.int64)
        for axis, (n, s) in enumerate(zip(self.shape, self.strides)):
            idx = [None] * len(self.shape)
            idx[axis] = slice(None)
            starts = starts + (np.arange(n, dtype=np.int64) * s)[tuple(idx)]
        return starts.reshape(-1)


def view_bytes(view: View) -> np.ndarray:
    """Byte offsets of every byte of every element, element-major (int64, size*itemsize)."""
    return (view.element_starts()[:, None] + np.arange(view.itemsize, dtype=np.int64)).reshape(-1)


@dataclass(frozen=True, slots=True)
class Init:
    view: str
    values: tuple[float, ...] | tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Rng:
    key: tuple[int, int] = (0, 0)
    counter: tuple[int, int, int, int] = (0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class Op:
    """One operation. Fields that the kind does not use are None."""

    kind: OpKind
    dst: str
    x: str
    y: str | None = None
    index: str | None = None
    a: float | None = None
    b: float | None = None
    c: float | None = None
    sigma: float | None = None
    keep: float | None = None
    k: int | None = None

    @property
    def spec(self) -> OpSpec:
        return OP_SPECS[self.kind]

    def views(self) -> tuple[str, ...]:
        """The view names the op uses: dst, its sources, then its index (if any)."""
        return tuple(getattr(self, f) for f in self.spec.view_fields)

    def coef(self, name: str):
        return getattr(self, name)


@dataclass(frozen=True, slots=True)
class Loss:
    view: str
    weights: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Program:
    buffers: tuple[Buffer, ...]
    views: tuple[View, ...]
    ops: tuple[Op, ...]
    loss: Loss
    name: str = ""
    init: tuple[Init, ...] = ()
    rng: Rng = Rng()
    segments: tuple[int, ...] = ()
    inputs: tuple[str, ...] = ()

    def view(self, name: str) -> View:
        for v in self.views:
            if v.name == name:
                return v
        raise KeyError(name)

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buffers)

    def segment_bounds(self) -> tuple[tuple[int, int], ...]:
        """(first op, end op) of each segment."""
        bounds, start = [], 0
        for n in self.segments:
            bounds.append((start, start + n))
            start += n
        return tuple(bounds)

    def to_dict(self) -> dict:
        from replayverify.programs.format import program_to_dict

        return program_to_dict(self)

    def to_json(self, *, indent: int | None = 2) -> str:
        from replayverify.programs.format import program_to_json

        return program_to_json(self, indent=indent)

    @property
    def sha256(self) -> str:
        from replayverify.programs.format import program_sha256

        return program_sha256(self)
