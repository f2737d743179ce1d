"""The program IR: a few frozen dataclasses and one enum of op kinds (SPEC §2).

A program is data. Nothing about a particular program lives in code paths: the
``OP_SPECS`` table says, per op kind, which fields name views and which are
coefficients, its dtype and shape rules, whether and what it draws, and which operand
values its derivative depends on. Where each op kind is defined:

- here, ``OP_SPECS``: its static facts (validated by ``programs.format``);
- ``programs.interpreter.FORWARD``: its one forward definition (the interpreter, the
  engines' replays and the complex step all evaluate it), and ``REVERSE``: its reverse
  rule;
- ``verifier.forward_jacobian.TANGENT``: its tangent rule, derived independently of
  ``REVERSE`` on purpose (the forward Jacobian checks the reverse rules);
- ``programs.philox``: the draws (``Draw``) and their Philox stream.

The canonical document and its hash (``program_to_dict``, ``canonical_json``,
``program_sha256``; SPEC §6) are written at the end of this file, beside the model, so that
``Program.to_dict``, ``to_json`` and ``sha256`` need nothing above it; ``programs.format``
(loading and validation) re-exports them.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from replayverify.untrusted import InputError

T = TypeVar("T")

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


class ShapeRule(enum.Enum):
    """How an op's operand shapes relate to its destination, and what it writes."""

    ELEMENTWISE = "elementwise"  # every source shaped like dst; dst written whole
    GATHER = "gather"  # x 1-D of length n, index shaped like dst; dst written whole
    SCATTER = "scatter"  # dst 1-D, index shaped like x; only the positions hit, last j wins


class Draw(enum.Enum):
    """What a drawing op makes of each element's Philox block (SPEC §2, Random draws)."""

    NORMAL = "normal"  # z = Box-Muller(u1, u2), cast to the view's dtype
    KEEP_MASK = "keep-mask"  # 1 where u1 < keep else 0, in the view's dtype


@dataclass(frozen=True, slots=True)
class Coef:
    """A coefficient field: ``kind`` is "float" or "int"; ``default`` None means required;
    ``interval`` (lo, hi): the value converted to the view's dtype must lie in (lo, hi]."""

    name: str
    kind: str
    default: float | int | None = None
    interval: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class OpSpec:
    """Everything static about one op kind (SPEC §2): its view fields, coefficients,
    dtype and shape rules, what it draws, and the operand values its reverse rule reads."""

    sources: tuple[str, ...]  # value sources, read before any write
    coefs: tuple[Coef, ...]
    dtypes: DtypeRule
    draws: Draw | None = None  # one Philox block per dst element, used as ``draws`` says
    shape: ShapeRule = ShapeRule.ELEMENTWISE
    value_operands: tuple[str, ...] = ()  # operands whose values the derivative depends on
    # Derived from the fields above, once (the engines and the checkers ask per op):
    indexed: bool = field(init=False, compare=False, repr=False)  # an integer ``index``
    # view (gather, scatter)
    partial: bool = field(init=False, compare=False, repr=False)  # writes only the dst
    # positions its index hits (scatter)
    reads: tuple[str, ...] = field(init=False, compare=False, repr=False)  # the fields
    # whose views the op reads: its value sources, then its index
    view_fields: tuple[str, ...] = field(init=False, compare=False, repr=False)  # dst, reads

    def __post_init__(self) -> None:
        indexed = self.shape is not ShapeRule.ELEMENTWISE
        reads = self.sources + (("index",) if indexed else ())
        object.__setattr__(self, "indexed", indexed)
        object.__setattr__(self, "partial", self.shape is ShapeRule.SCATTER)
        object.__setattr__(self, "reads", reads)
        object.__setattr__(self, "view_fields", ("dst",) + reads)


_F = DtypeRule.FLOAT
_A = Coef("a", "float", 1.0)
OP_SPECS: dict[OpKind, OpSpec] = {
    OpKind.AXPBY: OpSpec(("x", "y"), (_A, Coef("b", "float", 1.0), Coef("c", "float", 0.0)), _F),
    OpKind.MUL: OpSpec(("x", "y"), (), _F, value_operands=("x", "y")),
    OpKind.TANH: OpSpec(("x",), (_A,), _F, value_operands=("x",)),
    OpKind.SIN: OpSpec(("x",), (_A,), _F, value_operands=("x",)),
    OpKind.COPY: OpSpec(("x",), (), DtypeRule.SAME),
    OpKind.NOISE: OpSpec(("x",), (Coef("sigma", "float"),), _F, draws=Draw.NORMAL),
    OpKind.DROPOUT: OpSpec(("x",), (Coef("keep", "float", interval=(0.0, 1.0)),), _F,
                           draws=Draw.KEEP_MASK),
    OpKind.GATHER: OpSpec(("x",), (), DtypeRule.SAME, shape=ShapeRule.GATHER,
                          value_operands=("index",)),
    OpKind.SCATTER: OpSpec(("x",), (), DtypeRule.SAME, shape=ShapeRule.SCATTER,
                           value_operands=("index",)),
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
    size: int = field(init=False, compare=False, repr=False)  # element count, derived

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", math.prod(self.shape))

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    @property
    def end(self) -> int:
        """One past the view's last byte in its buffer."""
        return self.offset + extent(self.shape, self.strides, self.itemsize)

    def element_starts(self) -> np.ndarray:
        """Byte offset of each element's first byte inside the buffer, row-major (int64)."""
        if 1 <= len(self.shape) <= 2 and all(s > 0 for s in self.strides):
            # every valid view (1-D or 2-D, positive strides): one arange per axis
            n, s = self.shape[-1], self.strides[-1]
            if len(self.shape) == 1:
                return np.arange(self.offset, self.offset + n * s, s, dtype=np.int64)
            (n0, s0), off = (self.shape[0], self.strides[0]), self.offset
            rows = np.arange(off, off + n0 * s0, s0, dtype=np.int64)
            return (rows[:, None] + np.arange(0, n * s, s, dtype=np.int64)).reshape(-1)
        starts = np.full(self.shape, self.offset, dtype=np.int64)
        for axis, (n, s) in enumerate(zip(self.shape, self.strides)):
            idx = [None] * len(self.shape)
            idx[axis] = slice(None)
            starts = starts + (np.arange(n, dtype=np.int64) * s)[tuple(idx)]
        return starts.reshape(-1)


def extent(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> int:
    """Bytes from a strided view's first byte to one past its last (positive strides)."""
    return sum((n - 1) * s for n, s in zip(shape, strides)) + itemsize


def element_bytes(starts: Any, itemsize: int, xp: Any = np) -> Any:
    """Byte offsets of every byte of the elements whose first bytes are ``starts``,
    element-major (int64, an ``xp`` array)."""
    return (starts[:, None] + xp.arange(itemsize, dtype=xp.int64)).reshape(-1)


def view_bytes(view: View) -> np.ndarray:
    """Byte offsets of every byte of every element, element-major (int64, size*itemsize)."""
    return element_bytes(view.element_starts(), view.itemsize)


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

    def coef_as(self, name: str, dtype: np.dtype) -> Any:
        """A coefficient converted to ``dtype`` (the view's dtype), as SPEC §2 converts
        every coefficient before a formula uses it; ``float()`` of it is its float64."""
        return dtype.type(getattr(self, name))


@dataclass(frozen=True, slots=True)
class Loss:
    view: str
    weights: tuple[float, ...]


@dataclass(frozen=True, slots=True, weakref_slot=True)
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
    # The programs layer's data derived from the fields above, computed once on first use
    # and carried with the program (its hash, layouts, op steps, Philox blocks, B_0, the
    # loss weights as an array): never compared, hashed or copied by replace(). Other
    # layers keep theirs in a :class:`PerProgram` of their own.
    derived: dict[str, Any] = field(init=False, default_factory=dict, compare=False,
                                    repr=False)

    def carried(self, key: Any, make: Callable[..., T], *args: Any) -> T:
        """``make(self, *args)``, computed on first use and carried in ``derived`` under
        ``key`` (which must tell ``args`` apart): how the programs layer derives
        per-program data once (layouts, op steps, blocks)."""
        value = self.derived.get(key)
        if value is None:
            value = self.derived[key] = make(self, *args)
        return value

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
        return program_to_dict(self)

    def to_json(self, *, indent: int | None = 2) -> str:
        return program_to_json(self, indent=indent)

    @property
    def sha256(self) -> str:
        """SHA-256 of the canonical JSON, computed once per program object."""
        return self.carried("sha256", program_sha256)


class PerProgram:
    """A layer's own per-program data: ``carried(program, key, make, *args)`` is
    ``make(program, *args)``, computed once per program *object* and held here, not on the
    program, for as long as the program lives (keyed by identity, dropped by a weak
    reference's callback: equal programs made by ``replace`` are other objects and derive
    their own). Each layer above the programs layer makes one (the engines' plans, the
    verifier's reference plans), so ``Program.derived`` holds the programs layer's alone.
    (Not a cache keyed by ``id()`` alone: each entry holds a weak reference to its program,
    checked on every lookup, and goes when the program goes; ``WeakKeyDictionary`` would
    hash programs by value.) A value must not refer back to its program (it would keep
    it alive)."""

    __slots__ = ("_by",)

    def __init__(self) -> None:
        # id(program) -> (a weak reference to it, its data by key)
        self._by: dict[int, tuple[weakref.ref, dict[Any, Any]]] = {}

    def of(self, program: Program) -> dict[Any, Any]:
        """This layer's data of ``program``, by key (filled by :meth:`carried`)."""
        hit = self._by.get(id(program))
        if hit is not None and hit[0]() is program:
            return hit[1]
        data: dict[Any, Any] = {}
        key = id(program)
        self._by[key] = (weakref.ref(program, functools.partial(self._forget, key)), data)
        return data

    def carried(self, program: Program, key: Any, make: Callable[..., T], *args: Any) -> T:
        """``make(program, *args)``, computed on first use and held under ``key`` (which
        must tell ``args`` apart), like :meth:`Program.carried`."""
        data = self.of(program)
        value = data.get(key)
        if value is None:
            value = data[key] = make(program, *args)
        return value

    def __len__(self) -> int:
        """The programs alive that this cache holds data of."""
        return len(self._by)

    def _forget(self, key: int, ref: weakref.ref) -> None:
        hit = self._by.get(key)
        if hit is not None and hit[0] is ref:  # (not a later program's, given its id)
            del self._by[key]


# ---------------------------------------------------------------- the canonical document
# (SPEC §6; here, beside the model it writes, so that Program.to_dict, to_json and sha256
# need no module above this one; programs.format re-exports these names and reads them)

# Per op kind, its document fields in order: (field, conversion) for the views (None: the
# name as is) and then the coefficients (int or float); a table read from OP_SPECS.
_OP_FIELDS = {kind: tuple([(f, None) for f in spec.view_fields]
                          + [(c.name, int if c.kind == "int" else float) for c in spec.coefs])
              for kind, spec in OP_SPECS.items()}


def program_to_dict(program: Program) -> dict:
    """The canonical document: every default filled in (SPEC §6)."""
    views = {v.name: v for v in program.views}
    ops = []
    for op in program.ops:
        d: dict[str, Any] = {"op": op.kind.value}
        for f, to in _OP_FIELDS[op.kind]:
            d[f] = getattr(op, f) if to is None else to(getattr(op, f))
        ops.append(d)
    init = [{"view": e.view,
             "values": list(map(int if views[e.view].dtype in INT_DTYPES else float, e.values))}
            for e in program.init]
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": program.name,
        "buffers": [{"name": b.name, "nbytes": b.nbytes} for b in program.buffers],
        "views": [
            {"name": v.name, "buffer": v.buffer, "dtype": v.dtype, "offset": v.offset,
             "shape": list(v.shape), "strides": list(v.strides)}
            for v in program.views
        ],
        "init": init,
        "rng": {"key": list(program.rng.key), "counter": list(program.rng.counter)},
        "ops": ops,
        "segments": list(program.segments),
        "inputs": list(program.inputs),
        "loss": {"view": program.loss.view, "weights": list(map(float, program.loss.weights))},
    }


def program_to_json(program: Program, *, indent: int | None = 2) -> str:
    """Readable JSON of the canonical document (keys in the order SPEC §2 shows)."""
    return json.dumps(program_to_dict(program), indent=indent, allow_nan=False)


def canonical_json(program: Program) -> str:
    """Keys sorted, separators ``,`` and ``:``, defaults filled in (SPEC §6).

    That is ``json.dumps`` of :func:`program_to_dict` (:func:`_canonical_json_of_dict`,
    the definition). Every record names its program by this text's hash, so every checked
    program asks for it once: it is written here directly from the program's fields
    (``_canonical_text``), the same text without building the nested document and
    sorting its keys. Where a field is not of a type this writer spells exactly as
    ``json.dumps`` does, the definition writes the text (or raises what it raises).
    """
    text = _canonical_text(program)
    return _canonical_json_of_dict(program) if text is None else text


def _canonical_json_of_dict(program: Program) -> str:
    # (check_circular=False: the document is a fresh tree, so there is no cycle to detect;
    # the text is the same and the encoder keeps no registry of the containers it is in)
    return json.dumps(program_to_dict(program), sort_keys=True, separators=(",", ":"),
                      allow_nan=False, check_circular=False)


# What json.dumps (separators "," and ":", ensure_ascii, sort_keys) writes, and so what
# the writer below writes: an object as "{" + ",".join(key + ":" + value, keys sorted) +
# "}", a list as "[" + ",".join(items) + "]", a str by ``encode_basestring_ascii`` (the
# function json's encoder calls), an int (not a bool) and a finite float by their type's
# __repr__; a non-finite float it refuses (ValueError).
_string = json.encoder.encode_basestring_ascii


def _op_text_table() -> dict[OpKind, tuple[str, tuple[tuple[str, Any], ...]]]:
    """Per op kind, its canonical JSON with a hole per field (keys sorted; views as JSON
    strings, %s; coefficients as numbers, %r) and each hole's (field, conversion): the
    conversions are program_to_dict's (int or float), whose results %r writes as json
    does."""
    table = {}
    for kind, fields in _OP_FIELDS.items():
        holes = {f: (f, _string if to is None else to) for f, to in fields}
        keys = sorted([*holes, "op"])
        text = ",".join(_string(k) + ":" + (_string(kind.value).replace("%", "%%") if k == "op"
                                            else "%s" if holes[k][1] is _string else "%r")
                        for k in keys)
        table[kind] = ("{" + text + "}", tuple(holes[k] for k in keys if k != "op"))
    return table


_OP_TEXT = _op_text_table()

# A view's canonical JSON, by its number of dimensions (1 or 2, SPEC §2): names as JSON
# strings, offset, shape and strides as ints (the writer checks that they are ints).
_VIEW_TEXT = {d: '{"buffer":%s,"dtype":%s,"name":%s,"offset":%d,"shape":['
                 + ",".join(["%d"] * d) + '],"strides":[' + ",".join(["%d"] * d) + "]}"
              for d in (1, 2)}


def _numbers(values: Any, kind: type) -> str:
    """``values`` as json.dumps writes them once program_to_dict has converted them by
    ``kind`` (int or float): ``kind.__repr__`` takes nothing but an int (a float) or a
    subclass and writes the value's own repr; anything else raises TypeError, and the
    definition writes the text. (A bool is an int: only init values and op coefficients
    come here as ints, which program_to_dict converts with int() as well.)"""
    return ",".join(map(kind.__repr__, values))


def _canonical_text(program: Program) -> str | None:
    """The canonical JSON written from the program's fields, every object's keys in sorted
    order; None where a field is not what this writer spells exactly as json.dumps does:
    a name that is not a string, a count or size that is not an int, a non-finite number
    (json.dumps refuses it). Numbers go through program_to_dict's conversions first."""
    ints = [b.nbytes for b in program.buffers]
    for v in program.views:
        ints += (v.offset, *v.shape, *v.strides)
    ints += (*program.rng.key, *program.rng.counter, *program.segments)
    if set(map(type, ints)) - {int}:  # (json.dumps writes a bool as true, refuses others)
        return None
    dtype = {v.name: v.dtype for v in program.views}
    try:
        buffers = [f'{{"name":{_string(b.name)},"nbytes":{b.nbytes!r}}}'
                   for b in program.buffers]
        init = [f'{{"values":[{_numbers(e.values, int if dtype[e.view] in INT_DTYPES else float)}'
                f'],"view":{_string(e.view)}}}' for e in program.init]
        # every op's template filled at once: one format call for all ops
        texts = [_OP_TEXT[op.kind] for op in program.ops]
        ops = ",".join([template for template, _ in texts]) % tuple(
            [to(getattr(op, f)) for op, (_, holes) in zip(program.ops, texts) for f, to in holes])
        views = [_VIEW_TEXT[len(v.shape)] % (_string(v.buffer), _string(v.dtype),
                                             _string(v.name), v.offset, *v.shape, *v.strides)
                 for v in program.views]
        text = "".join([
            '{"buffers":[', ",".join(buffers),
            '],"format":', _string(FORMAT),
            ',"init":[', ",".join(init),
            '],"inputs":[', ",".join(map(_string, program.inputs)),
            '],"loss":{"view":', _string(program.loss.view),
            ',"weights":[', _numbers(program.loss.weights, float),
            ']},"name":', _string(program.name),
            ',"ops":[', ops,
            '],"rng":{"counter":[', _numbers(program.rng.counter, int),
            '],"key":[', _numbers(program.rng.key, int),
            ']},"segments":[', _numbers(program.segments, int),
            '],"version":', repr(VERSION),
            ',"views":[', ",".join(views),
            "]}",
        ])
    except (TypeError, KeyError):  # a name that is not a string, a number that is not an
        return None  # int or float, a view that is not 1-D or 2-D (or strides for each)
    # A non-finite float is written nan, inf or -inf here (json.dumps refuses it); those
    # letters appear nowhere else but inside a name, where the definition gives the same text.
    if "nan" in text or "inf" in text:
        return None
    return text


def program_sha256(program: Program) -> str:
    return hashlib.sha256(canonical_json(program).encode("utf-8")).hexdigest()
