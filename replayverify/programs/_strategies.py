"""Hypothesis strategies for programs, views and ops (the implementation).

The public names live in :mod:`replayverify.strategies`; this module is private so
that the programs layer can be imported without Hypothesis installed (Hypothesis is
a test extra). Everything here is built with ``@st.composite`` and draws in an order
chosen for shrinking: sizes and shapes first, then views, then ops, then values.
Every strategy is valid by construction: what it draws passes
``load_program(program_to_dict(p)) == p``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy

from replayverify.programs.format import views_overlap
from replayverify.programs.generate import Limits, judgeable
from replayverify.programs.model import (
    DTYPES,
    FLOAT_DTYPES,
    OP_SPECS,
    Buffer,
    DtypeRule,
    Init,
    Loss,
    Op,
    OpKind,
    Program,
    Rng,
    View,
)

# Op kinds from the simplest to the most involved: sampled_from shrinks to the first.
KIND_ORDER: tuple[OpKind, ...] = (
    OpKind.COPY, OpKind.AXPBY, OpKind.MUL, OpKind.TANH, OpKind.SIN, OpKind.NOISE,
    OpKind.DROPOUT, OpKind.GATHER, OpKind.SCATTER, OpKind.ICOPY, OpKind.IADD, OpKind.IXOR,
)
DRAW_KINDS = frozenset(k for k, s in OP_SPECS.items() if s.draws)
INT_KINDS = frozenset(k for k, s in OP_SPECS.items() if s.dtypes is DtypeRule.INT)

U32_MAX = 2**32 - 1
_JUDGEABLE = Limits(finite=False)  # non-finite values are legal bytes: keep them


# ---------------------------------------------------------------- argument checks


def _check_int(value: Any, name: str, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name}={value!r} must be an integer")
    if value < lo:
        raise InvalidArgument(f"{name}={value!r} must be >= {lo}")


def _check_bool(value: Any, name: str) -> None:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name}={value!r} must be True or False")


def _check_dtypes(value: Any, name: str, allowed: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidArgument(f"{name}={value!r} must be a sequence of dtype names")
    out = tuple(value)
    if not out:
        raise InvalidArgument(f"{name} must name at least one dtype")
    for d in out:
        if d not in allowed:
            raise InvalidArgument(f"{name} contains {d!r}; allowed: {', '.join(allowed)}")
    return tuple(dict.fromkeys(out))  # drop duplicates, keep order (shrinks to the first)


def _check_kinds(value: Any) -> tuple[OpKind, ...]:
    if value is None:
        return KIND_ORDER
    if isinstance(value, (str, OpKind)) or not isinstance(value, Iterable):
        raise InvalidArgument(f"kinds={value!r} must be a sequence of op kinds")
    chosen = set()
    for k in value:
        try:
            chosen.add(OpKind(k))
        except ValueError:
            raise InvalidArgument(f"kinds contains unknown op kind {k!r}") from None
    if not chosen:
        raise InvalidArgument("kinds must name at least one op kind")
    return tuple(k for k in KIND_ORDER if k in chosen)


# ---------------------------------------------------------------- drawing helpers
#
# The composites below call these helpers with their ``draw`` instead of nesting
# composites, and every primitive strategy is built once and cached: a fresh strategy
# object per draw costs Hypothesis a validation each time, which made generation (and
# above all shrinking) several times slower.


@cache
def _ints(lo: int, hi: int) -> SearchStrategy[int]:
    return st.integers(lo, hi)


def _pick(draw: Any, seq: Sequence[Any]) -> Any:
    """One element of ``seq``; shrinks towards the first (like ``sampled_from``)."""
    return seq[draw(_ints(0, len(seq) - 1))] if len(seq) > 1 else seq[0]


def _decimals(lo: float, hi: float, places: int = 3) -> SearchStrategy[float]:
    """Decimals in [lo, hi] with ``places`` digits, shrinking towards 0 (or ``lo``).

    Drawn as scaled integers: no subnormals, no 1e-200s. Those are legal, but a
    coefficient of 1e-200 shrinks every effect below the SPEC tolerance, which makes
    the negative controls report ``missed`` for reasons that have nothing to do with
    replay.
    """
    scale = 10**places
    return st.integers(round(lo * scale), round(hi * scale)).map(lambda n: n / scale)


def _simple_then(simple: tuple[float, ...], lo: float, hi: float) -> SearchStrategy[float]:
    """Shrinks to ``simple[0]``, then the other simple values, then decimals in [lo, hi]."""
    return st.sampled_from(simple) | _decimals(lo, hi)


COEFS: dict[str, SearchStrategy[float]] = {
    "a": _simple_then((1.0, -1.0, 0.5, 2.0), -2.0, 2.0),
    "b": _simple_then((1.0, -1.0, 0.5, 2.0), -2.0, 2.0),
    "c": _simple_then((0.0, 1.0, -0.5), -1.0, 1.0),
    "sigma": _simple_then((0.1, 1.0, 0.01), 0.0, 1.0),
    "keep": _simple_then((0.5, 1.0, 0.9), 0.05, 1.0),  # in (0, 1] in float32 too
}
WEIGHTS = _simple_then((1.0, 2.0, -1.0, 0.5), -4.0, 4.0)
FLOAT_VALUES = _decimals(-1.0, 1.0, places=6)
# Integer init values over float bytes: small and non-negative (over float64 high
# halves a negative value is a NaN pattern, which helps nobody's gradient).
INT_VALUES = st.integers(0, 1000)


@cache
def _int_coef(dtype: str) -> SearchStrategy[int]:
    info = np.iinfo(DTYPES[dtype])
    return st.sampled_from((1, -1)) | st.integers(int(info.min), int(info.max))


def _draw_values(draw: Any, view: View, index_range: int | None = None) -> tuple:
    """Init values for ``view``: shrink to zeros."""
    if view.is_float:
        elem = FLOAT_VALUES
    elif index_range is not None:  # small, duplicate and negative indices
        elem = _ints(-2 * index_range, 2 * index_range)
    else:
        elem = INT_VALUES
    return tuple(draw(elem) for _ in range(view.size))


# ---------------------------------------------------------------- shapes and views


def _draw_shape(draw: Any, max_elements: int) -> tuple[int, ...]:
    """1-D (shrinks to (1,)) or 2-D with at most ``max_elements`` elements."""
    if not draw(st.booleans()):
        return (draw(_ints(1, max_elements)),)
    rows = draw(_ints(1, max_elements))
    return (rows, draw(_ints(1, max_elements // rows)))


def _extent(shape: tuple[int, ...], elem_stride: int, item: int) -> int:
    """Bytes from the first element's first byte to the end of the last element."""
    return (int(np.prod(shape)) - 1) * elem_stride + item


def _strides(shape: tuple[int, ...], elem_stride: int, order: str) -> tuple[int, ...]:
    if len(shape) == 1:
        return (elem_stride,)
    rows, cols = shape
    return (cols * elem_stride, elem_stride) if order == "C" else (elem_stride, rows * elem_stride)


def _draw_window(draw: Any, *, name: str, buffer: str, dtype: str, shape: tuple[int, ...],
                 elem_strides: Sequence[int], offset_unit: int, max_end: int | None,
                 max_offset: int = 0) -> View:
    """A view of ``shape`` over ``buffer``: row- or column-major (2-D), one of
    ``elem_strides`` between consecutive elements, offset a multiple of ``offset_unit``.

    With ``max_end`` the view ends inside ``max_end`` bytes; otherwise its offset is at
    most ``max_offset`` and the caller sizes the buffer. Shrinks to row-major, the
    first stride and offset 0.
    """
    item = DTYPES[dtype].itemsize
    order = "F" if len(shape) == 2 and draw(st.booleans()) else "C"
    if max_end is not None:
        elem_strides = [s for s in elem_strides if _extent(shape, s, item) <= max_end]
    es = _pick(draw, elem_strides)
    if max_end is not None:
        max_offset = max_end - _extent(shape, es, item)
    offset = offset_unit * draw(_ints(0, max_offset // offset_unit))
    return View(name, buffer, dtype, offset, shape, _strides(shape, es, order))


def views(
    *,
    buffer: str = "state",
    nbytes: int = 128,
    dtypes: Sequence[str] = ("float64", "float32", "int64", "int32"),
    max_elements: int = 16,
    name: str = "v",
) -> SearchStrategy[View]:
    """Valid views named ``name`` over a buffer of ``nbytes`` bytes.

    1-D or 2-D (row- or column-major), with gaps between elements (strides of one to
    three elements), at any aligned offset that keeps every element inside the buffer;
    elements never overlap each other. Shrinks towards the first dtype, a 1-D view of
    one element, row-major, contiguous and at offset 0.
    """
    dts = _check_dtypes(dtypes, "dtypes", tuple(DTYPES))
    _check_int(nbytes, "nbytes", 1)
    _check_int(max_elements, "max_elements", 1)
    if not isinstance(buffer, str) or not buffer:
        raise InvalidArgument(f"buffer={buffer!r} must be a non-empty name")
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"name={name!r} must be a non-empty name")
    fitting = tuple(d for d in dts if DTYPES[d].itemsize <= nbytes)
    if not fitting:
        raise InvalidArgument(f"nbytes={nbytes} is too small for any of {dtypes!r}")
    return _views(buffer=buffer, nbytes=nbytes, dtypes=fitting, max_elements=max_elements,
                  name=name)


@st.composite
def _views(draw, *, buffer: str, nbytes: int, dtypes: tuple[str, ...], max_elements: int,
           name: str) -> View:
    dtype = _pick(draw, dtypes)
    item = DTYPES[dtype].itemsize
    shape = _draw_shape(draw, min(max_elements, nbytes // item))
    return _draw_window(draw, name=name, buffer=buffer, dtype=dtype, shape=shape,
                        elem_strides=(item, 2 * item, 3 * item), offset_unit=item,
                        max_end=nbytes)


# ---------------------------------------------------------------- ops


def _groups(pool: Sequence[View], pred) -> list[list[View]]:
    """Views grouped by (dtype, shape), keeping first-seen order; only groups with pred."""
    groups: dict[tuple, list[View]] = {}
    for v in pool:
        if pred(v):
            groups.setdefault((v.dtype, v.shape), []).append(v)
    return list(groups.values())


def _op_table(pool: Sequence[View], kinds: tuple[OpKind, ...],
              int_writes: bool) -> dict[OpKind, list]:
    """Per feasible kind, the choices an op of that kind can make among ``pool``.

    Elementwise kinds map to groups of views sharing dtype and shape (dst and sources
    are drawn from one group); gather and scatter map to feasible (dst, x, index).
    """
    writable = [v for v in pool if v.is_float or int_writes]
    table: dict[OpKind, list] = {}
    for kind in kinds:
        spec = OP_SPECS[kind]
        if kind in INT_KINDS and not int_writes:
            continue
        if spec.indexed:
            index_views = [v for v in pool if not v.is_float]
            one_d = [v for v in pool if len(v.shape) == 1]
            triples = []
            for ix in index_views:
                if kind is OpKind.GATHER:
                    triples += [(d, x, ix) for d in writable if d.shape == ix.shape
                                for x in one_d if x.dtype == d.dtype]
                else:
                    triples += [(d, x, ix) for d in writable if len(d.shape) == 1
                                for x in pool if x.shape == ix.shape and x.dtype == d.dtype]
            if triples:
                table[kind] = triples
            continue
        if spec.dtypes is DtypeRule.FLOAT:
            groups = _groups(pool, lambda v: v.is_float)
        elif spec.dtypes is DtypeRule.INT:
            groups = _groups(pool, lambda v: not v.is_float)
        else:
            groups = _groups(pool, lambda v: v.is_float or int_writes)
        if groups:
            table[kind] = groups
    return table


def _draw_op(draw: Any, table: dict[OpKind, list], kinds: Sequence[OpKind]) -> Op:
    kind = _pick(draw, kinds)
    spec = OP_SPECS[kind]
    if spec.indexed:
        dst, x, ix = _pick(draw, table[kind])
        return Op(kind, dst.name, x.name, index=ix.name)
    group = _pick(draw, table[kind])
    names = {f: _pick(draw, group).name for f in ("dst",) + spec.sources}
    coefs: dict[str, Any] = {}
    for c in spec.coefs:
        coefs[c.name] = draw(_int_coef(group[0].dtype) if c.kind == "int" else COEFS[c.name])
    return Op(kind, **names, **coefs)


def ops(
    views: Sequence[View], *, kinds: Iterable[OpKind | str] | None = None,
    int_writes: bool = True,
) -> SearchStrategy[Op]:
    """Valid ops over ``views`` (the views of the program they will belong to).

    ``kinds`` restricts the op kinds (default: all that the views allow);
    ``int_writes=False`` never writes an integer view. Shrinks towards ``copy``, the
    first views and the simplest coefficients (1.0 for a, b; 0.0 for c; k = 1).
    """
    if isinstance(views, View) or not isinstance(views, Sequence):
        raise InvalidArgument(f"views={views!r} must be a sequence of View")
    if not views or not all(isinstance(v, View) for v in views):
        raise InvalidArgument("views must be a non-empty sequence of View")
    _check_bool(int_writes, "int_writes")
    table = _op_table(tuple(views), _check_kinds(kinds), int_writes)
    if not table:
        raise InvalidArgument("no op of the requested kinds can be formed from these views")
    return _ops(table=table)


@st.composite
def _ops(draw, *, table: dict[OpKind, list]) -> Op:
    return _draw_op(draw, table, list(table))


# ---------------------------------------------------------------- rng, segments


def rng_states() -> SearchStrategy[Rng]:
    """Philox keys and counters; shrinks towards key (0, 0) and counter 0."""
    return RNG_STATES


_U32 = st.integers(0, U32_MAX)
RNG_STATES = st.builds(Rng, key=st.tuples(_U32, _U32), counter=st.tuples(_U32, _U32, _U32, _U32))


def _draw_segments(draw: Any, n_ops: int) -> tuple[int, ...]:
    """Counts summing to n_ops; shrinks to one segment. Empty segments are allowed."""
    cuts = sorted(draw(_ints(0, n_ops)) for _ in range(draw(_ints(0, 3))))
    return tuple(int(d) for d in np.diff([0, *cuts, n_ops]))


# ---------------------------------------------------------------- programs


def programs(
    *,
    min_ops: int = 1,
    max_ops: int = 16,
    max_elements: int = 16,
    dtypes: Sequence[str] = ("float64", "float32"),
    int_writes: bool = True,
    draws: bool = True,
) -> SearchStrategy[Program]:
    """Valid programs (SPEC §2) exercising what makes replay hard.

    A float buffer ``state`` carries overlapping, strided, 1-D and 2-D windows of one
    float dtype (one of ``dtypes``) and a 1-D view ``flat``; with ``int_writes``,
    integer aliases over its float bytes (int32 halves of float64, int32 over float32,
    int64 over float64) and integer ops that write them; an ``idx`` buffer holds an
    int32 index view with small, duplicate and negative values for gather and scatter.
    With ``draws``, noise and dropout consume the Philox stream. Programs have
    ``min_ops`` to ``max_ops`` ops in up to four segments, at least one input and a
    loss; no view has more than ``max_elements`` elements. Views that no op, input or
    loss uses are dropped, and buffers are sized to the views that remain. Like the
    suite's generators, it refuses programs whose final-storage hazard changes the
    gradient by less than the SPEC tolerance (no check could tell), so every check,
    controls included, is clean on every reference engine.

    Shrinks towards fewer ops (``copy`` first), fewer and smaller views (1-D, one
    element, contiguous, offset 0, row-major), simpler coefficients (a = b = 1,
    c = 0), zero init values, one segment, one input, and key and counter 0.
    """
    _check_int(min_ops, "min_ops", 0)
    _check_int(max_ops, "max_ops", 0)
    if min_ops > max_ops:
        raise InvalidArgument(f"min_ops={min_ops} must be <= max_ops={max_ops}")
    _check_int(max_elements, "max_elements", 1)
    dts = _check_dtypes(dtypes, "dtypes", FLOAT_DTYPES)
    _check_bool(int_writes, "int_writes")
    _check_bool(draws, "draws")
    return _programs(min_ops=min_ops, max_ops=max_ops, max_elements=max_elements, dtypes=dts,
                     int_writes=int_writes, draws=draws)


def _aliases(dtype: str) -> tuple[tuple[str, int, int], ...]:
    """(int dtype, element stride, offset unit) of integer views over ``dtype`` bytes."""
    if dtype == "float64":  # int32 halves (low or high), int32 over both halves, int64
        return (("int32", 8, 4), ("int32", 4, 4), ("int64", 8, 8))
    return (("int32", 4, 4), ("int32", 8, 4))


@cache
def _index_sets(n: int) -> SearchStrategy[list[int]]:
    return st.lists(_ints(0, n - 1), min_size=1, max_size=min(n, 3), unique=True)


@st.composite
def _programs(draw, *, min_ops: int, max_ops: int, max_elements: int, dtypes: tuple[str, ...],
              int_writes: bool, draws: bool) -> Program:
    kinds = tuple(k for k in KIND_ORDER if draws or k not in DRAW_KINDS)
    dtype = _pick(draw, dtypes)
    item = DTYPES[dtype].itemsize
    shape = _draw_shape(draw, max_elements)
    spread = max_elements * item  # offsets up to here: windows overlap often

    def window(name: str, dt: str = dtype, sh: tuple[int, ...] = shape,
               strides: Sequence[int] = (item, 2 * item, 3 * item), unit: int = item) -> View:
        return _draw_window(draw, name=name, buffer="state", dtype=dt, shape=sh,
                            elem_strides=strides, offset_unit=unit, max_end=None,
                            max_offset=spread)

    pool = [window(f"w{i}") for i in range(draw(_ints(1, 4)))]
    flat_n = draw(_ints(1, max_elements))
    pool.append(window("flat", sh=(flat_n,), strides=(item,)))
    if int_writes:
        for i in range(draw(_ints(1, 3))):
            idt, es, unit = _pick(draw, _aliases(dtype))
            pool.append(window(f"i{i}", dt=idt, strides=(es,), unit=unit))
    ix = View("ix", "idx", "int32", 0, shape, _strides(shape, 4, "C"))
    pool.append(ix)

    table = _op_table(pool, kinds, int_writes)
    op_list = draw(st.lists(_ops(table=table), min_size=min_ops, max_size=max_ops))

    floats = [v for v in pool if v.is_float]
    inputs: list[View] = []  # each drawn view that overlaps no earlier input
    for j in draw(_index_sets(len(floats))):
        if not any(_overlap(floats[j], u) for u in inputs):
            inputs.append(floats[j])
    loss_view = _pick(draw, floats)
    weights = tuple(draw(WEIGHTS) for _ in range(loss_view.size))

    used = {loss_view.name, *(v.name for v in inputs)}
    for op in op_list:
        used.update(op.views())
    kept = [v for v in pool if v.name in used]
    init = []
    if ix.name in used:  # indices: the interesting part of gather and scatter
        init.append(Init(ix.name, _draw_values(draw, ix, index_range=flat_n)))
    for _ in range(draw(_ints(0, 3))):
        v = _pick(draw, kept)
        init.append(Init(v.name, _draw_values(draw, v)))

    buffers = []
    for buf in ("state", "idx"):
        ends = [v.end for v in kept if v.buffer == buf]
        if ends:
            buffers.append(Buffer(buf, max(ends)))
    program = Program(
        buffers=tuple(buffers),
        views=tuple(kept),
        ops=tuple(op_list),
        loss=Loss(loss_view.name, weights),
        init=tuple(init),
        rng=draw(RNG_STATES),
        segments=_draw_segments(draw, len(op_list)),
        inputs=tuple(v.name for v in inputs),
    )
    # Like the suite's generators, refuse what no check can judge: a stale operand that
    # moves the gradient by less than the SPEC tolerance (about 3 programs in 100).
    assume(judgeable(program, _JUDGEABLE))
    return program


def _overlap(a: View, b: View) -> bool:
    return a.buffer == b.buffer and views_overlap(a, b)


__all__ = ["KIND_ORDER", "ops", "programs", "rng_states", "views"]
