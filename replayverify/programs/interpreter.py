"""The versioned reference interpreter (SPEC §3): the living definition of the IR.

Execution gathers each op's operands from the byte buffers (all reads before the
first write), computes with the op's forward rule, and scatters the results. Beside
the bytes it tracks the version id of the last writer of every byte (stored once per
aligned 4-byte word, which is exact: see ``_Versions``). Every element an op
writes is a new version node; nodes are stored per op as arrays (operand version ids,
operand values, consumed random values), never as one Python object per element.
The reverse sweep over that graph gives dL/d(inputs).

Where each op kind is defined: its static facts in ``model.OP_SPECS``; what it computes
in :data:`FORWARD` (the one forward definition, also evaluated by the engines' replays
and, on complex128, by the complex step); its reverse rule in :data:`REVERSE`; scatter's
"last j wins" in :func:`scatter_winners`. One op's values are one :class:`OpValues`.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from replayverify.programs.arrays import array_namespace, scatter_add
from replayverify.programs.errstate import quiet
from replayverify.programs.model import DTYPES, Draw, Op, OpKind, Program
from replayverify.programs.philox import Blocks, RngState, keep_mask, normals, uniforms, words
from replayverify.programs.state import Snapshot, State, ViewLayout, initial_state, layouts

# ---------------------------------------------------------------- forward rules
#
# FORWARD is the one definition of what each op computes. A forward rule maps
# (op, operands, draws, dtype, n) to (values, where): operands are flat arrays in
# row-major element order, optionally batched over a trailing axis (shape (elements,)
# or (elements, batch)); index operands and draws are flat (elements,); ``dtype`` is the
# destination view's, to which every coefficient is converted first; ``n`` is the
# destination's element count. ``values`` are the new dst elements (dst-major, same
# trailing batch axis) at flat positions ``where`` (None: all, in order). Every formula
# is evaluated left to right with ufuncs exactly as SPEC §2 writes it. The interpreter
# and the engines' replays evaluate it on the view's dtype; the complex step evaluates
# the same rules on complex128 operands batched over input coordinates. Rules take the
# ufuncs from the operands' array module (``array_namespace``), so they run unchanged on
# CuPy arrays; on NumPy they are NumPy's.
#
# The contract of a forward rule (what the engines' runners rely on, ``engines.runner``):
# it is a pure function of its arguments (op, operands, draws, dtype, n). It reads no
# global or mutable state, keeps nothing, and never writes its operands: the same
# arguments give the same values, byte for byte. (The check's memo, ``verifier.memo``,
# gives an engine run the record an earlier run of the same op made from the same bytes,
# R, draws and rule, instead of running the rule again.)

Operands = dict[str, Any]
ForwardRule = Callable[[Op, Operands, Any, np.dtype, int], tuple]


def _col(d: Any, x: Any) -> Any:
    """Per-element draws shaped to broadcast against ``x`` (batched or not)."""
    return d if x.ndim == 1 else d.reshape((-1,) + (1,) * (x.ndim - 1))


def _axpby(op, o, d, t, n):
    return ((op.coef_as("a", t) * o["x"] + op.coef_as("b", t) * o["y"])
            + op.coef_as("c", t)), None


def _gather(op, o, d, t, n):
    x = o["x"]  # positions as int64 whatever the index view's dtype: NumPy converts a
    # narrower index array to intp on every indexing, which costs more than this cast
    xp = array_namespace(x)
    return x[xp.mod(o["index"], x.shape[0], dtype=xp.int64)], None


def scatter_winners(index, n: int, last_wins: bool = True):
    """(positions, sources): for each dst position hit, the j that wins (the last by SPEC).

    The one statement of scatter's "last j wins" (SPEC §2): the forward rule, the reverse
    rule, the tangent rule and the engines' backward all take it from here. Positions
    are ascending. On NumPy, a stable argsort of the positions; on other array modules
    a sort of the unique keys ``pos * m + j``, which needs no stable sort.
    """
    xp = array_namespace(index)
    if xp is not np:
        return _scatter_winners_sorted(xp, index, n, last_wins)
    pos = np.mod(index.reshape(-1), n, dtype=np.int64)
    order = pos.argsort(kind="stable")  # positions ascending, j ascending within each
    p = pos[order]
    ends = np.empty(p.size, bool)
    if last_wins:  # the last j of each run of equal positions
        np.not_equal(p[1:], p[:-1], out=ends[:-1])
        ends[-1] = True
    else:  # the first j of each run
        np.not_equal(p[1:], p[:-1], out=ends[1:])
        ends[0] = True
    return p[ends], order[ends]


def _scatter_winners_sorted(xp: ModuleType, index, n: int, last_wins: bool):
    pos = xp.mod(index.reshape(-1).astype(xp.int64), n)
    m = pos.size
    key = xp.sort(pos * m + xp.arange(m, dtype=xp.int64))  # unique keys: (position, j)
    p, j = key // m, key % m
    if last_wins:  # the last j of each run of equal positions
        ends = xp.concatenate([p[1:] != p[:-1], xp.ones(1, dtype=bool)])
    else:  # the first j of each run
        ends = xp.concatenate([xp.ones(1, dtype=bool), p[1:] != p[:-1]])
    return p[ends], j[ends]


def _scatter(op, o, d, t, n):
    where, src = scatter_winners(o["index"], n)
    return o["x"][src], where


FORWARD: dict[OpKind, ForwardRule] = {
    OpKind.AXPBY: _axpby,
    OpKind.MUL: lambda op, o, d, t, n: (o["x"] * o["y"], None),
    OpKind.TANH: lambda op, o, d, t, n: (
        array_namespace(o["x"]).tanh(op.coef_as("a", t) * o["x"]), None),
    OpKind.SIN: lambda op, o, d, t, n: (
        array_namespace(o["x"]).sin(op.coef_as("a", t) * o["x"]), None),
    OpKind.COPY: lambda op, o, d, t, n: (o["x"].copy(), None),
    OpKind.NOISE: lambda op, o, d, t, n: (o["x"] + op.coef_as("sigma", t) * _col(d, o["x"]),
                                          None),
    OpKind.DROPOUT: lambda op, o, d, t, n: ((o["x"] * _col(d, o["x"])) / op.coef_as("keep", t),
                                            None),
    OpKind.GATHER: _gather,
    OpKind.SCATTER: _scatter,
    OpKind.IADD: lambda op, o, d, t, n: (o["x"] + op.coef_as("k", t), None),
    OpKind.IXOR: lambda op, o, d, t, n: (o["x"] ^ op.coef_as("k", t), None),
    OpKind.ICOPY: lambda op, o, d, t, n: (o["x"].copy(), None),
}


def written_positions(op: Op, operands: Operands, n: int) -> Any:
    """The flat dst positions op writes given its operands (None: all, in order)."""
    if not op.spec.partial:
        return None
    return scatter_winners(operands["index"], n)[0]


def draw(op: Op, rng: RngState, n: int, dtype: np.dtype, xp: ModuleType = np,
         blocks: Blocks | None = None) -> tuple[np.ndarray, RngState]:
    """The random values op consumes from ``rng`` (``OpSpec.draws`` says which: z cast to
    dtype, or the keep mask) and the advanced state.

    Computed on the host by the CPU Philox, then moved to ``xp``: every array module sees
    the same bits (words, uniforms, masks and also the normals). ``blocks`` shares the
    Philox uniforms of a (state, n) among everything that runs one program.
    """
    kind = op.spec.draws

    def compute() -> np.ndarray:
        u1, u2 = uniforms(words(rng, n)) if blocks is None else blocks.uniforms(rng, n)
        if kind is Draw.NORMAL:
            return normals(u1, u2).astype(dtype)
        return keep_mask(u1, op.coef_as("keep", dtype), dtype)

    if blocks is None:
        values = compute()
    else:  # the values too are a function of (state, n, rule, dtype, keep): shared.
        # keep as written (None for noise) fixes, with the dtype, the converted keep; the
        # key holds plain values, whose hashes cost no Python call (an enum member's does)
        key = (rng, n, kind.value, dtype.str, op.keep)
        values = blocks.memo(key, n, compute)
    return (values if xp is np else xp.asarray(values)), rng.advanced(n)


def philox_blocks(program: Program) -> Blocks:
    """The program's shared Philox blocks (carried by the program, like its layouts),
    computed a program's draws at a time."""
    return program.carried("blocks", _blocks)


def _blocks(program: Program) -> Blocks:
    n = sum(step.size for step in op_steps(program) if step.draws)
    # A check also draws just past the program's blocks (control:wrong-rng replays a
    # segment from the final state R_T). One evaluation costs ~50 us plus ~0.2 us per
    # block, so while the draws are few, twice as many blocks serve that replay too.
    return Blocks(2 * n if n <= FEW_DRAWS else n)


FEW_DRAWS = 256  # up to this many blocks, a Philox evaluation costs about its overhead


class OpValues(NamedTuple):
    """The values of one op: what it read, drew and wrote. The one record of an op's
    values: the interpreter, the engines' replays and recoveries, the checkers and the
    reverse rules all use it.

    ``operands``: each field the op reads (its sources, then ``index``) -> the values
    read before any write of the op, flat in row-major element order; ``draws``: the
    random values it consumed (flat; None when it draws nothing); ``where``: the flat
    dst positions it wrote (None: all, in order); ``values``: what it wrote there (flat,
    dst dtype; None in the interpreter's records and in a record a recovery made, which
    backward does not need).

    Immutable like the IR's frozen dataclasses, but a ``NamedTuple``: one is built per
    executed op (about 230 per check), and a frozen dataclass's ``__init__`` costs about
    four times a tuple's.
    """

    index: int
    op: Op
    dtype: np.dtype  # the destination view's
    dst_size: int
    operands: Operands
    draws: Any = None
    where: Any = None
    values: Any = None

    @property
    def float_op(self) -> bool:
        """The op writes a float view (only such ops carry derivatives)."""
        return self.dtype.kind == "f"


def op_values(program: Program, k: int, operands: Operands, draws: Any = None) -> OpValues:
    """The record of op ``k`` from operand values (view-shaped or flat) and draws, as a
    recovery supplies them: ``where`` follows from the recovered index."""
    op = program.ops[k]
    dst = layouts(program)[op.dst]
    flat = {f: v.reshape(-1) for f, v in operands.items()}
    return OpValues(k, op, dst.dtype, dst.size, flat,
                    None if draws is None else draws.reshape(-1),
                    written_positions(op, flat, dst.size))


@dataclass(frozen=True, slots=True)
class _Step:
    """What executing one op needs that does not depend on values, derived once per
    program (``op_steps``): the rule key, the destination's layout, dtype and element
    count, the layouts it reads, and (float ops) the sources whose versions it reads.
    (A slotted dataclass, not a NamedTuple: built once per op, its fields are read on
    every run of the op, and a slot reads faster than a tuple field.)"""

    op: Op
    kind: OpKind
    dst: ViewLayout
    dtype: np.dtype  # the destination's
    size: int  # the destination's element count
    reads: tuple[tuple[str, ViewLayout], ...]  # (field, layout) of every view it reads
    draws: bool
    sources: tuple[tuple[str, ViewLayout], ...]  # float ops: (field, layout) of each source
    flat: bool  # the destination is 1-D


def op_steps(program: Program) -> tuple[_Step, ...]:
    """Per op, its layouts and rule key: derived once and carried by the program."""
    return program.carried("steps", _derive_steps)


def _derive_steps(program: Program) -> tuple[_Step, ...]:
    lay = layouts(program)
    out = []
    for op in program.ops:
        spec, dst = op.spec, lay[op.dst]
        reads = tuple([(f, lay[getattr(op, f)]) for f in spec.reads])
        sources = reads[: len(spec.sources)] if dst.view.is_float else ()
        out.append(_Step(op, op.kind, dst, dst.dtype, dst.size, reads,
                         spec.draws is not None, sources, len(dst.view.shape) == 1))
    return tuple(out)


def execute_op(
    program: Program,
    k: int,
    state: State,
    *,
    draws: np.ndarray | None = None,
    forward: Mapping[OpKind, ForwardRule] = FORWARD,
) -> OpValues:
    """Run op ``k`` on ``state`` in place: gather, compute, scatter (memmove semantics).

    ``draws`` replays recorded random values instead of drawing; the generator is
    advanced by the op's element count either way, so bytes and R stay exact. Runs on
    the state's array module: operands, values and draws are ``state.xp`` arrays.
    Overflow and invalid results are legal values: callers run under
    ``errstate.quiet`` (every entry point does) so that numpy does not warn about them.
    """
    step = op_steps(program)[k]
    operands, draws, where, values = _run_step(program, step, state, draws, forward)
    return OpValues(k, step.op, step.dtype, step.size, operands, draws, where, values)


def _run_step(program: Program, step: _Step, state: State, draws: Any,
              forward: Mapping[OpKind, ForwardRule]) -> tuple[Operands, Any, Any, Any]:
    """``execute_op``'s work: (operands, draws, where, values) of the op run on ``state``."""
    operands = {}
    on_numpy = state.xp is np
    if on_numpy:  # strided views over the buffers, flattened: fresh copies, one per view
        # (a view read by two fields, as in mul(x, x), is one array: no rule writes it)
        typed = state.typed
        last = None
        for f, lay in step.reads:
            if last is None or last[0] is not lay:
                last = (lay, typed(lay).flatten())
            operands[f] = last[1]
    else:
        for f, lay in step.reads:
            operands[f] = state.read_flat(lay)
    if step.draws:
        if draws is None:
            draws, state.rng = draw(step.op, state.rng, step.size, step.dtype, state.xp,
                                    philox_blocks(program))
        else:
            draws = draws.reshape(-1)
            state.rng = state.rng.advanced(step.size)
    values, where = forward[step.kind](step.op, operands, draws, step.dtype, step.size)
    # (an equal dtype that is another object takes the cast below, which copies nothing)
    if type(values) is not np.ndarray or values.dtype is not step.dtype or values.ndim != 1:
        values = state.xp.asarray(values).astype(step.dtype, copy=False).reshape(-1)
    if on_numpy and where is None and step.flat:  # the common write: the whole 1-D view
        typed(step.dst)[...] = values
    else:
        state.write(step.dst, values, where)
    return operands, draws, where, values


@quiet
def run_forward(program: Program, state: State | None = None, start: int = 0,
                stop: int | None = None) -> State:
    """Plain (unversioned) execution of ops ``start:stop``; returns the state."""
    state = initial_state(program) if state is None else state
    for k in range(start, len(program.ops) if stop is None else stop):
        execute_op(program, k, state)
    return state


def loss_of(program: Program, state: State) -> float:
    """L = sum(weights * view) in float64, read from ``state``."""
    with np.errstate(over="ignore", invalid="ignore"):  # float32 sNaN bits warn in the cast
        return _loss(program, state)


def _loss(program: Program, state: State) -> float:
    """:func:`loss_of` for a caller that ignores numpy's warnings already (``execute`` runs
    quiet): no errstate of its own, which costs about as much as the sum. The sum is the
    ndarray method, the same ``add.reduce`` as ``np.sum`` without its Python wrapper."""
    values = state.read(layouts(program)[program.loss.view]).astype(np.float64).reshape(-1)
    return float((loss_weights(program) * values).sum())


def loss_weights(program: Program) -> np.ndarray:
    """The loss weights as a read-only float64 array, converted once and carried by the
    program: the interpreter, its sweeps, the engines and the references all weigh the
    loss with this one array (a large loss's tuple converts in milliseconds each time)."""
    return program.carried("loss_weights", _loss_weights)


def _loss_weights(program: Program) -> np.ndarray:
    weights = np.asarray(program.loss.weights, dtype=np.float64)
    weights.setflags(write=False)
    return weights


# ---------------------------------------------------------------- reverse rules
#
# A reverse rule maps (values, gbar) to {source field: contribution per source element}:
# ``values`` is the op's :class:`OpValues` record (the historical operands and draws),
# ``gbar`` the adjoints of the written elements (at ``values.where``). Derivatives are
# evaluated in float64 from the recorded operand values, with the ufuncs of their array
# module (the engines run these rules on CuPy arrays too).
#
# The contract of a reverse rule: a pure function of ``gbar`` and what
# ``verifier.memo.values_key`` covers of the record: the op index, the op (and so its
# coefficients), the destination dtype and size, the operands and the draws (and
# ``where``, which follows from the operands). It never reads ``values.values`` (what the
# op wrote): the engines' backward (``engines.runner.back_segment``) hands every rule a
# record whose ``values`` is None, so a rule that reads them fails at once instead of
# giving a check's memo a key that misses what the derivative depends on. (A derivative
# that the written values would give, like tanh's, is recomputed from the operands.)

ReverseRule = Callable[[OpValues, Any], dict]


def _f64(rec: OpValues, name: str) -> float:
    """``float(rec.op.coef_as(name, rec.dtype))``: the coefficient in the view's dtype,
    as a float64. For a float64 view that conversion is ``float`` alone (no NumPy scalar
    in between: the reverse sweeps and the engines' backward ask ~70 times a program)."""
    value = getattr(rec.op, name)
    return float(value) if rec.dtype is _FLOAT64 else float(rec.dtype.type(value))


_FLOAT64 = DTYPES["float64"]  # NumPy's one float64 dtype (any other converts as before)


def _rev_tanh(rec, g):
    a = _f64(rec, "a")
    return {"x": g * a * (1.0 - array_namespace(g).tanh(a * _x(rec)) ** 2)}


def _rev_sin(rec, g):
    a = _f64(rec, "a")
    return {"x": g * a * array_namespace(g).cos(a * _x(rec))}


def _rev_gather(rec, g):
    xp = array_namespace(g)
    n = rec.operands["x"].size
    dx = xp.zeros(n, dtype=g.dtype)
    scatter_add(xp, dx, xp.mod(rec.operands["index"].reshape(-1).astype(xp.int64), n), g)
    return {"x": dx}


def _rev_scatter(rec, g):
    xp = array_namespace(g)
    g_dst = xp.zeros(rec.dst_size, dtype=g.dtype)
    g_dst[rec.where] = g
    where, src = scatter_winners(rec.operands["index"], rec.dst_size)
    dx = xp.zeros(rec.operands["x"].size, dtype=g.dtype)
    dx[src] = g_dst[where]
    return {"x": dx}


def _x(rec: OpValues, f: str = "x") -> np.ndarray:
    """Operand ``f`` as a flat float64 array: the record's own when it is one already (most
    are; a reshape and an astype cost twice the test)."""
    x = rec.operands[f]
    if x.dtype is _FLOAT64 and x.ndim == 1:
        return x
    return x.reshape(-1).astype(np.float64, copy=False)


REVERSE: dict[OpKind, ReverseRule | None] = {
    OpKind.AXPBY: lambda rec, g: {"x": g * _f64(rec, "a"), "y": g * _f64(rec, "b")},
    OpKind.MUL: lambda rec, g: {"x": g * _x(rec, "y"), "y": g * _x(rec)},
    OpKind.TANH: _rev_tanh,
    OpKind.SIN: _rev_sin,
    OpKind.COPY: lambda rec, g: {"x": g},
    OpKind.NOISE: lambda rec, g: {"x": g},
    OpKind.DROPOUT: lambda rec, g: {
        "x": g * rec.draws.reshape(-1).astype(np.float64) / _f64(rec, "keep")},
    OpKind.GATHER: _rev_gather,
    OpKind.SCATTER: _rev_scatter,
    # Integer ops write integers: nothing flows back through them.
    OpKind.IADD: None,
    OpKind.IXOR: None,
    OpKind.ICOPY: None,
}


# ---------------------------------------------------------------- versioning

CONST = -1  # version id of bytes never written by a float op and not in an input
BAD = -2  # version id of a float read that admission refused


@dataclass(frozen=True)
class Admission:
    """Whether the derivative is defined (SPEC §3), and if not, where and why."""

    supported: bool
    reason: str = ""
    op: int | None = None

    def to_dict(self) -> dict:
        return {"supported": self.supported, "reason": self.reason}


class OpVersions(NamedTuple):
    """The version nodes one op read and created, stored as arrays (a NamedTuple, like
    :class:`OpValues`: one per executed op)."""

    reads: dict[str, np.ndarray]  # per float source field, the id each element read
    # ids of the written elements (at the op's ``where``, in order): nodes are handed out
    # in order, one contiguous run per op, so the run's bounds say them all (an adjoint
    # array indexed with it is a view, and no id array is held per op)
    writes: slice
    # the fields of ``reads`` in which every element read a version (no CONST or BAD)
    complete: frozenset[str] = frozenset()


DTYPE_CODE = {name: i for i, name in enumerate(DTYPES)}
DTYPE_NAME = {i: name for name, i in DTYPE_CODE.items()}
INPUT_OP = -1


class ElementTags(NamedTuple):
    """The extent tags of the bytes of one element of a dtype (see :class:`_Versions`),
    seen as one integer of the element's size (little-endian: byte j's tag in byte j)."""

    dtype: np.dtype  # the signed integer dtype of the element's size
    own: np.ndarray  # 0-d, of ``dtype``: the element's own tags, byte j's code + 1 + 4 j
    raw: bytes  # its bytes


def _element_tags(dtype: str) -> ElementTags:
    code, size = DTYPE_CODE[dtype], DTYPES[dtype].itemsize
    raw = bytes(code + 1 + 4 * j for j in range(size))
    as_one = np.dtype(f"<i{size}")
    return ElementTags(as_one, np.frombuffer(raw, as_one).reshape(()), raw)


ELEMENT_TAGS = {name: _element_tags(name) for name in DTYPES}


class _ViewWords(NamedTuple):
    """A view's elements in :class:`_Versions`' arrays, each of the view's shape (views of
    them, made once per view): the ids (plus one) of the last writers of each element's
    ``first`` and ``second`` word (None for one-word elements), and its bytes' ``tags``
    as one integer (``ElementTags``); ``own``, that integer for the view's own extent,
    and ``raw``, the bytes of ``tags`` when every element carries it."""

    first: np.ndarray
    second: np.ndarray | None
    tags: np.ndarray
    own: np.ndarray
    raw: bytes


INT32_IDS_BELOW = 2**31 - 2  # node capacity below which ids (plus one) are stored as int32
COMPACT_IDS = 1 << 16  # a view read by this many elements or more: ids in the stored dtype


# 1 as a 0-d intp array: NumPy subtracts it from an array about twice as fast as the
# Python int 1, which it converts on every use (~0.27 vs ~0.5 us)
_ONE = np.ones((), np.intp)


class _Versions:
    """The version graph's bookkeeping: the nodes made so far and every byte's last writer.

    Node ids are handed out in order, a contiguous run per op (the inputs first), so a
    node's op is found from the first id of each run.

    The last writer of every byte is stored once per aligned 4-byte word, which is exact:
    offsets and strides are multiples of the itemsize (4 or 8), so every element covers
    whole aligned words and the bytes of a word always share their last writer
    (``writers``: its id plus one). Every byte also carries its last writer's *extent tag*
    there (``tags``): ``dtype code + 1 + 4 j`` for the writing element's j-th byte, 0 for
    "never written". Given the byte, its tag names the writer's extent (first byte: this one's
    minus j; dtype), so a byte carries the tag a reading element expects there exactly
    when its last writer had the element's own extent. The tags an element expects are
    the same for every element of a dtype (``ELEMENT_TAGS``), and a view's tags are a
    strided array over the tag array with the view's own offset and strides: nothing is
    derived per program or per view (absolute tags, 4 * first byte + dtype per element,
    were derived per program: ~30 us a fresh one).

    The arrays are zero-filled (``np.zeros``: pages never written cost no memory), so the
    bookkeeping grows with what is written, not with the buffers' size: at most 2 bytes
    per buffer byte (int32 ids, int64 only for programs that could create 2^31 nodes;
    int8 tags). The id arrays handed out (an op's reads, the inputs', the loss's; an
    op's writes are a run, a slice) are intp whatever the stored dtype: the reverse
    sweeps index the adjoints with them, and NumPy indexes with an intp array about
    seven times faster than with an int32 one (~0.7 vs ~4.6 us for 16 elements), which
    it converts on every use. The ids a view of at least ``COMPACT_IDS`` elements reads
    are kept in the stored dtype instead: an execution holds them while it lives, int32
    ids take half the memory, and converting that many costs little beside the indexing
    itself.
    """

    def __init__(self, program: Program, capacity: int) -> None:
        # ``capacity`` is the most nodes the program can create (its inputs' elements plus
        # every op's destination elements): it decides the stored ids' dtype
        self.id_dtype = np.int32 if capacity < INT32_IDS_BELOW else np.int64
        self._one = np.ones((), self.id_dtype)  # (subtracted from stored ids: see resolve)
        self.n = 0
        self._firsts: list[int] = []  # the first id of each op's run of nodes
        self._ops: list[int] = []  # that op (INPUT_OP for an input)
        self.writers = {b.name: np.zeros(-(-b.nbytes // 4), self.id_dtype)
                        for b in program.buffers}
        self.tags = {b.name: np.zeros(b.nbytes, np.int8) for b in program.buffers}
        self._strided: dict[str, _ViewWords] = {}
        self.foreign: set[tuple[str, str]] = set()  # see Execution.foreign_reads

    def _words_of(self, layout: ViewLayout) -> _ViewWords:
        """The view's elements in the id and tag arrays (``write`` and ``resolve`` look
        them up in ``_strided`` first). Word w's id sits at ``w * itemsize`` of the id
        array, byte 4w of the buffer for int32 ids: a view's offset and strides there
        are its own (scaled by 2 for int64 ids); byte b's tag sits at byte b."""
        v = layout.view
        vw = self._strided.get(v.name)
        if vw is None:
            ids, et = self.writers[v.buffer], ELEMENT_TAGS[v.dtype]
            offset, strides = v.offset, v.strides
            if ids.itemsize == 8:
                offset, strides = 2 * offset, tuple([2 * s for s in strides])
            # (shape, dtype, buffer, offset, strides) by position, as ViewLayout.strided
            first = np.ndarray(v.shape, ids.dtype, ids, offset, strides)
            second = None if et.dtype.itemsize == 4 else \
                np.ndarray(v.shape, ids.dtype, ids, offset + ids.itemsize, strides)
            tags = np.ndarray(v.shape, et.dtype, self.tags[v.buffer], v.offset, v.strides)
            vw = self._strided[v.name] = _ViewWords(first, second, tags, et.own,
                                                    et.raw * v.size)
        return vw

    def write(self, op: int, layout: ViewLayout, where: np.ndarray | None) -> slice:
        """New nodes for the elements ``op`` writes at ``where`` (all if None), recorded as
        the last writers of their bytes; returns their ids, a contiguous run."""
        lo, m = self.n + 1, layout.size if where is None else where.size
        stored = np.arange(lo, lo + m, dtype=self.id_dtype)  # their ids plus one
        vw = self._strided.get(layout.view.name) or self._words_of(layout)
        if where is None:
            at = ...
            if vw.first.ndim != 1:
                stored = stored.reshape(vw.first.shape)
        else:
            at = where if vw.first.ndim == 1 else np.unravel_index(where, layout.view.shape)
        vw.first[at] = stored
        if vw.second is not None:
            vw.second[at] = stored
        vw.tags[at] = vw.own
        self._firsts.append(self.n)
        self._ops.append(op)
        self.n += m
        return slice(lo - 1, lo - 1 + m)

    def resolve(self, layout: ViewLayout, op: int | None,
                explain: bool) -> tuple[np.ndarray, str, bool]:
        """Version id read by each element of a float view, or BAD; when ``explain``, the
        reason for the first BAD element ("" when there is none; ``op``: the reading op,
        None for the loss); and whether every element read a version (no CONST or BAD).

        An element reads one version exactly when each of its bytes was last written by
        a node of its own extent, or none of them was ever written (CONST). Equal tags
        suffice: a node of the element's extent covers all its bytes, so the last such
        node is the last writer of every byte that still carries its tag."""
        vw = self._strided.get(layout.view.name) or self._words_of(layout)
        # the writers of the elements' first words, flat (one subtraction): intp for a
        # view of fewer than COMPACT_IDS elements (NumPy indexes with an intp array several
        # times faster than with an int32 one), else in the stored dtype (see the class doc)
        first = vw.first - (_ONE if layout.size < COMPACT_IDS else self._one)
        if first.ndim != 1:
            first = first.reshape(-1)
        raw = vw.tags.tobytes()
        if raw == vw.raw:  # the common case: each byte its element's tag
            return first, "", True
        tags = vw.tags if vw.tags.ndim == 1 else vw.tags.reshape(-1)
        own = tags == vw.own
        # every element carries its own tags or none (0: never written, CONST) exactly
        # when the elements with any tag are the ones with their own
        if np.count_nonzero(tags) == np.count_nonzero(own):
            return first, "", False
        ok = own | (tags == 0)
        vids = np.where(ok, first, BAD)
        # the dtypes other than the view's that last wrote its bytes, from their tags (an
        # admitted element's are its own or 0): Execution.foreign_reads
        dtype = layout.view.dtype
        for t in set(raw):
            if t and DTYPE_NAME[(t - 1) % 4] != dtype:
                self.foreign.add((dtype, DTYPE_NAME[(t - 1) % 4]))
        if not explain:
            return vids, "", False
        j = int(np.flatnonzero(~ok)[0])
        row = [int(first[j])]  # the last writer of each of element j's words
        if vw.second is not None:
            row.append(int(vw.second.reshape(-1)[j]) - 1)
        what = "the loss" if op is None else f"op {op}"
        # (a word's tag: the tag of its first byte)
        return vids, self._refusal(row, tags[j:j + 1].tobytes()[::4], layout, j, what), False

    def _op_of(self, v: int) -> int:
        return self._ops[bisect.bisect_right(self._firsts, v) - 1]

    def _refusal(self, row: list[int], tags: bytes, layout: ViewLayout, j: int,
                 what: str) -> str:
        """Why element ``j`` (its words' last writers ``row``, CONST if never written, and
        their tags) does not read one float version."""
        where = f"float read at {what} (view {layout.view.name!r} element {j})"
        dtypes = [DTYPE_NAME[(t - 1) % 4] for t in tags]  # each word's writer's
        for v, dtype in zip(row, dtypes):
            if v >= 0 and dtype not in ("float64", "float32"):
                return f"{where} of bytes last written by integer op {self._op_of(v)}"
        writers = sorted(set(row))
        if len(writers) > 1:
            ops = sorted({("input" if v >= 0 and self._op_of(v) == INPUT_OP else
                           "constant" if v < 0 else f"op {self._op_of(v)}") for v in writers})
            return f"{where} of bytes from several writes ({', '.join(ops)})"
        v = writers[0]
        src = "an input" if self._op_of(v) == INPUT_OP else f"op {self._op_of(v)}"
        return (f"{where} of bytes written by {src} as {dtypes[0]} "
                f"at a different byte extent")


@dataclass
class Execution:
    """The result of running a program with the versioned interpreter."""

    program: Program
    state: State  # final (B_T, R_T); read-only over the last boundary's bytes when recorded
    records: list[OpValues]  # per op, what it read, drew and wrote
    versions: list[OpVersions]  # per op, the version nodes it read and wrote
    input_vids: np.ndarray
    loss_vids: np.ndarray
    loss: float
    admission: Admission
    n_nodes: int
    boundaries: list[Snapshot] = field(default_factory=list)  # B_s, R_s for s = 0..S
    # (reader dtype, writer dtype) for every float read (a float op's source, the loss) of
    # bytes whose last writer (an input or an op) had another dtype: admission refuses
    # each such read, so only a refused program has any (the suite's coverage counts them)
    foreign_reads: frozenset[tuple[str, str]] = frozenset()

    @property
    def buffers(self) -> dict[str, bytes]:
        return {k: v.tobytes() for k, v in self.state.buffers.items()}

    @property
    def rng(self) -> RngState:
        return self.state.rng

    @property
    def final(self) -> Snapshot:
        return self.state.snapshot()

    @functools.cached_property
    def gradient(self) -> np.ndarray | None:
        """dL/d(inputs) by the reverse sweep (swept once), or None when admission refused it."""
        if not self.admission.supported:
            return None
        return _sweep_rest(self)

    @functools.cached_property
    def stale(self) -> list[tuple[int, str]]:
        """:func:`stale_reads`, found once: the generator's acceptance, the suite's
        statistics and the final-storage control each ask."""
        return stale_reads(self)

    @functools.cached_property
    def hazard_gradient(self) -> np.ndarray:
        """:func:`hazard_gradient`, swept once: the generator's acceptance and the
        final-storage control both judge it."""
        return _sweep_rest(self, final_storage_operands(self))

    @functools.cached_property
    def _shared_sweep(self) -> tuple[int, np.ndarray]:
        """(n, the adjoints after the reverse sweep over ops n.. ): the part of the sweep
        that ``gradient`` and ``hazard_gradient`` share, swept once. Every op after the
        last stale read (op n - 1) sees the same operands in both sweeps, so there both do
        the same arithmetic on the same adjoints, bit for bit; they part at op n - 1 (and
        share the whole sweep when nothing is stale). Swept inside :func:`_sweep_rest`'s
        ``quiet``."""
        stop = self.stale[-1][0] + 1 if self.stale else 0
        adj = _loss_adjoints(self, np.longdouble)
        _sweep_ops(self, adj, stop, len(self.records))
        return stop, adj

    @functools.cached_property
    def final_views(self) -> dict[str, np.ndarray]:
        """Views read from the final state, flat and read-only, by name (filled by
        :func:`final_storage_operands` as it reads them: the final state does not change)."""
        return {}


def given_draws(program: Program, draws: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Check recorded draw values for :func:`execute`: one flat array per draw op index,
    with the destination's element count, cast to its dtype. ValueError otherwise."""
    lay = layouts(program)
    out = {}
    for k, values in draws.items():
        if not (isinstance(k, int) and 0 <= k < len(program.ops)
                and program.ops[k].spec.draws):
            raise ValueError(f"draws: op {k!r} is not a draw op of the program")
        dst = lay[program.ops[k].dst]
        values = np.asarray(values).reshape(-1)
        if values.size != dst.size:
            raise ValueError(f"draws: op {k} draws {dst.size} values, {values.size} given")
        out[k] = values.astype(dst.dtype)
    return out


@quiet
def execute(program: Program, *, record_boundaries: bool = True,
            forward: Mapping[OpKind, ForwardRule] = FORWARD,
            draws: Mapping[int, np.ndarray] | None = None) -> Execution:
    """Run ``program`` with version tracking (SPEC §3).

    ``forward`` replaces the forward rule table (tests inject broken rules with it).
    ``draws`` runs the program with given random values instead of Philox ones: for a
    draw op index, the values it consumes (noise: z in the view's dtype; dropout: the 0/1
    mask), row-major. Ops not in ``draws`` draw from Philox as usual, and the generator
    advances by the element count either way, so R is the program's. The cohort uses it
    to make the reference bit-exact for a framework that drew with its own generator.
    """
    given = given_draws(program, draws) if draws else {}
    lay = layouts(program)
    steps = op_steps(program)
    state = initial_state(program)
    store = _Versions(program, sum(lay[name].size for name in program.inputs)
                      + sum(step.size for step in steps))

    for name in program.inputs:
        store.write(INPUT_OP, lay[name], None)
    # the first nodes are the inputs', in order (as an op's reads: intp unless many)
    input_vids = np.arange(store.n, dtype=np.intp if store.n < COMPACT_IDS else store.id_dtype)

    admission = Admission(True)
    records: list[OpValues] = []
    versions: list[OpVersions] = []
    cuts = list(itertools.accumulate(program.segments, initial=0))  # ops done at each boundary
    boundaries: list[Snapshot] = []
    if record_boundaries:
        boundaries += [state.snapshot()] * cuts.count(0)

    for k, step in enumerate(steps):
        read_vids, complete = {}, []
        last = None  # (a view read by two fields, as in mul(x, x): resolved once)
        for f, src in step.sources:  # a float op's sources
            if last is None or last[0] is not src:
                last = (src, *store.resolve(src, k, admission.supported))
            _, vids, reason, whole = last
            read_vids[f] = vids
            if whole:
                complete.append(f)
            if reason:
                admission = Admission(False, reason, k)
        operands, drawn, where, _ = _run_step(program, step, state, given.get(k), forward)
        out = store.write(k, step.dst, where)
        # the written values stay in the state; no reverse rule or check reads them from
        # the record, which would hold a second copy of everything written
        records.append(OpValues(k, step.op, step.dtype, step.size, operands, drawn, where))
        versions.append(OpVersions(read_vids, out, frozenset(complete)))
        if record_boundaries and (k + 1) in cuts:
            boundaries += [state.snapshot()] * cuts.count(k + 1)

    loss_layout = lay[program.loss.view]
    if loss_layout.view.is_float:
        loss_vids, reason, _ = store.resolve(loss_layout, None, admission.supported)
        if reason:
            admission = Admission(False, reason, None)
    else:
        loss_vids = np.full(loss_layout.size, CONST, dtype=np.int64)
    loss = _loss(program, state)
    if boundaries and cuts[-1] == len(steps):  # the last boundary is the final state: kept
        state = boundaries[-1].frozen()  # once, the state read-only over its bytes
    return Execution(program, state, records, versions, input_vids, loss_vids, loss,
                     admission, store.n, boundaries, frozenset(store.foreign))


ACCUMULATE_CHUNK = 1 << 16  # elements of a large read whose contributions are added at once


def _accumulate(adj: np.ndarray, vids: np.ndarray, contrib: np.ndarray,
                complete: bool = False) -> None:
    """adj[vids] += contrib, skipping CONST and BAD reads (``complete``: the caller knows
    there are none). The versions read through one view are distinct (a version is one
    element's extent, and a view's elements never share a byte), so an indexed ``+=``
    adds each contribution once: no ``np.add.at``. A read of over ``ACCUMULATE_CHUNK``
    elements is added a chunk at a time (the same sums: one addition per element), so
    that the adjoints it gathers (and int32 ids as intp) are not all held at once."""
    if vids.size > ACCUMULATE_CHUNK:
        for i in range(0, vids.size, ACCUMULATE_CHUNK):
            j = i + ACCUMULATE_CHUNK
            _accumulate(adj, vids[i:j], contrib[i:j], complete)
        return
    if complete:
        adj[vids] += contrib
        return
    mask = vids >= 0
    if mask.all():  # no constants read: no masked copies
        adj[vids] += contrib
    else:
        adj[vids[mask]] += contrib[mask]


@quiet
def reverse_sweep(ex: Execution, reverse: Mapping[OpKind, ReverseRule | None] = REVERSE,
                  operands: Callable[[OpValues], Operands] | None = None,
                  dtype: type = np.longdouble) -> np.ndarray:
    """vbar_p(k) += vbar_k * f_k'(v_p(k)) over the version graph, in reverse op order.

    ``dtype`` is the adjoints' precision (extended by default; the engine checks sweep in
    float64 once to tell an engine's float64 overflow from a wrong replay).

    ``operands`` may substitute the operand values a rule sees (the final-storage
    control does); by default they are the recorded historical versions.
    """
    # Adjoints accumulate in extended precision where the platform has it (x86: 80-bit),
    # so the reference's own rounding stays well below the tolerance it judges with.
    adj = _loss_adjoints(ex, dtype)
    _sweep_ops(ex, adj, 0, len(ex.records), reverse, operands)
    return adj[ex.input_vids].astype(np.float64)


def _loss_adjoints(ex: Execution, dtype: type) -> np.ndarray:
    """The adjoints a reverse sweep starts from: the loss weights on the loss's versions."""
    adj = np.zeros(ex.n_nodes, dtype=dtype)
    _accumulate(adj, ex.loss_vids, loss_weights(ex.program))
    return adj


def _sweep_ops(ex: Execution, adj: np.ndarray, start: int, stop: int,
               reverse: Mapping[OpKind, ReverseRule | None] = REVERSE,
               operands: Callable[[OpValues], Operands] | None = None) -> None:
    """:func:`reverse_sweep` over ops stop - 1 down to ``start``, in place on ``adj``."""
    for rec, ver in zip(reversed(ex.records[start:stop]), reversed(ex.versions[start:stop])):
        rule = reverse[rec.op.kind]
        if rule is None or not rec.float_op or ver.writes.stop == ver.writes.start:
            continue
        g = adj[ver.writes]  # (a view: an op reads only earlier nodes, so the
        # contributions below never land on its own writes' adjoints)
        if operands is not None:
            given = operands(rec)
            if given is not rec.operands:  # (final storage keeps most ops' own operands)
                rec = rec._replace(operands=given)
        for f, contrib in rule(rec, g).items():
            _accumulate(adj, ver.reads[f], contrib, f in ver.complete)
            del contrib  # (not held while the next op's rule runs)


# The most version nodes whose adjoints the two sweeps of an execution share: sharing
# holds a copy of them beside the sweep that goes on from them (16 bytes a node), which
# for a large graph costs more memory than the shared ops' sweep costs time.
SHARED_SWEEP_NODES = 1 << 18


@quiet
def _sweep_rest(ex: Execution,
                operands: Callable[[OpValues], Operands] | None = None) -> np.ndarray:
    """dL/d(inputs): :func:`reverse_sweep`, continued from the part the two sweeps of an
    execution share (``Execution._shared_sweep``: the ops from ``stop`` on). The shared
    adjoints are copied only where this sweep goes on from them (nothing stale: it is
    the whole sweep), and let go once both sweeps took what they need. Where they share
    no op (the last op reads a stale value), or the graph has over ``SHARED_SWEEP_NODES``
    nodes, each sweeps from the loss on its own: no adjoints are kept between them, and
    one adjoint array is held at a time."""
    n = len(ex.records)
    if ex.n_nodes > SHARED_SWEEP_NODES or (ex.stale and ex.stale[-1][0] == n - 1):
        adj = _loss_adjoints(ex, np.longdouble)
        _sweep_ops(ex, adj, 0, n, REVERSE, operands)
        return adj[ex.input_vids].astype(np.float64)
    stop, tail = ex._shared_sweep
    if "gradient" in ex.__dict__ or "hazard_gradient" in ex.__dict__:
        del ex.__dict__["_shared_sweep"]  # (the other sweep is done: this one is the last)
        adj = tail
    else:
        adj = tail.copy() if stop else tail
    _sweep_ops(ex, adj, 0, stop, REVERSE, operands)
    return adj[ex.input_vids].astype(np.float64)


def _final_view(ex: Execution) -> Callable[[str], np.ndarray]:
    """A view's values in the final state, flat and read-only, by name (each view read
    once per execution, kept in ``Execution.final_views``: the final state does not
    change, so a view whose elements flatten without a copy, as a 1-D one's do, is read
    in place: an array over the final state's bytes, not a copy of them)."""
    lay = layouts(ex.program)
    final = ex.final_views

    def read(name: str) -> np.ndarray:
        hit = final.get(name)
        if hit is None:
            hit = final[name] = ex.state.typed(lay[name]).reshape(-1)  # (a new array object)
            hit.setflags(write=False)
        return hit

    return read


def final_storage_operands(ex: Execution) -> Callable[[OpValues], Operands]:
    """Operands as a sweep that reads final storage instead of versions would see them:
    each op's value operands (``OpSpec.value_operands``) read from the final state.

    Only the stale ones (``Execution.stale``) are read: every other value operand has the
    same bytes in the final state as in the record, so an op with none keeps its recorded
    operands (the same values, no copy)."""
    read = _final_view(ex)
    stale: dict[int, list[str]] = {}
    for k, f in ex.stale:
        stale.setdefault(k, []).append(f)

    def operands(rec: OpValues) -> Operands:
        fields = stale.get(rec.index)
        if fields is None:
            return rec.operands
        out = dict(rec.operands)
        for f in fields:
            out[f] = read(getattr(rec.op, f))
        return out

    return operands


def stale_reads(ex: Execution) -> list[tuple[int, str]]:
    """(op, field) for every value operand of a float op whose bytes differ in the final
    storage from the version the op read (SPEC §5, final-storage); ``Execution.stale``
    keeps it."""
    read = _final_view(ex)
    now: dict[str, bytes] = {}  # each view's final bytes (ops read the same views)
    out = []
    for rec in ex.records:
        if rec.float_op:
            for f in rec.op.spec.value_operands:
                name = getattr(rec.op, f)
                final = now.get(name)
                if final is None:
                    final = now[name] = read(name).tobytes()
                if final != rec.operands[f].tobytes():
                    out.append((rec.index, f))
    return out


def stale_operands(ex: Execution) -> list[int]:
    """Ops whose value operands were read from bytes that differ in the final storage."""
    return sorted({k for k, _ in ex.stale})


def hazard_gradient(ex: Execution) -> np.ndarray:
    """The gradient a reverse sweep reading final storage would give (control input)."""
    return ex.hazard_gradient
