"""Deterministic program generators, one per family, valid by construction.

``generate(seed, index, family=...)`` builds program ``index`` of the suite seeded by
``seed``; the same arguments give the same program on any machine. A family is a
function from a seeded ``numpy.random.Generator`` and limits to a :class:`Program`,
registered in :data:`FAMILIES`; add one by writing such a function. Families may
reject a draw (for example a derivative program without a hazard) by returning
None; the next attempt uses the next seed, and the count of attempts is kept.
"""

from __future__ import annotations

import bisect
import functools
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from replayverify.programs.interpreter import (
    Execution,
    execute,
    hazard_gradient,
    stale_operands,
)
from replayverify.programs.model import (
    DTYPES,
    Buffer,
    Init,
    Loss,
    Op,
    OpKind,
    Program,
    Rng,
    View,
    extent,
)
from replayverify.programs.tolerance import program_tolerance

MAX_ATTEMPTS = 200


@dataclass(frozen=True)
class Limits:
    """What a family may produce. Families fill in their own defaults."""

    dims: tuple[int, ...] = (4, 8, 16)
    n_ops: tuple[int, ...] = (8, 12, 16)
    dtypes: tuple[str, ...] = ("float64",)
    draws: bool = True
    int_writes: bool = False
    int_weight: float = 1.0  # relative weight of each integer op kind when int_writes
    gather_scatter: bool = True
    max_segments: int = 4
    require_hazard: bool = False
    require_draw: bool = False
    finite: bool = True  # reject programs whose admitted gradient or values are not finite
    hazard: str = ""  # the ``hazard`` family: which replay hazard to build around


class _Builder:
    """Collects buffers, views, init and ops while a family builds a program."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.buffers: list[Buffer] = []
        self.views: dict[str, View] = {}
        self.init: list[Init] = []
        self.ops: list[Op] = []
        # float fills drawn, rounded when the program is made: (index in init, values)
        self._unrounded: list[tuple[int, np.ndarray]] = []
        self._rounds_exactly = True  # every float fill's bounds within +-2000

    def buffer(self, name: str, nbytes: int) -> str:
        self.buffers.append(Buffer(name, nbytes))
        return name

    def view(self, name: str, buffer: str, dtype: str, offset: int, shape: tuple[int, ...],
             strides: tuple[int, ...]) -> View:
        # the families pass Python ints (every draw they size or place a view with is
        # converted where it is drawn), so the view's fields are as they are given
        v = View(name, buffer, dtype, offset, shape, strides)
        self.views[name] = v
        return v

    def fill(self, view: View, lo: float = -1.0, hi: float = 1.0) -> None:
        """Initial values for ``view``: uniform floats rounded to 6 decimals (when the
        program is made, all at once), or integers in [lo, hi)."""
        if view.is_float:
            self._unrounded.append((len(self.init), self.rng.uniform(lo, hi, view.size)))
            self._rounds_exactly = self._rounds_exactly and max(abs(lo), abs(hi)) < 2000
            self.init.append(Init(view.name, ()))
        else:  # (``tolist`` gives Python ints at once, not a NumPy scalar each)
            self.init.append(Init(view.name,
                                  tuple(self.rng.integers(int(lo), int(hi), view.size).tolist())))

    def _round_fills(self) -> None:
        """Each float fill's values as ``round(x, 6)`` gives them, in one NumPy pass over
        all of them (Python's round costs ~0.3 us a value, ~70 values a program).

        round(x, 6) is the double nearest to m / 10^6, m the integer nearest to x * 10^6
        (ties to even). For |x| < 2000, y = fl(x * 1e6) is within 2^-23 of x * 10^6, so
        where y is farther than 2^-20 from a half-integer, rint(y) = m, and IEEE division
        gives the double nearest to m / 10^6 (both operands exact): the same value, sign
        of zero included. Other draws (about 1 value in 600,000) take Python's round."""
        if not self._unrounded:
            return
        x = np.concatenate([vals for _, vals in self._unrounded])
        y = x * 1e6
        r = np.rint(y)
        np.abs(np.subtract(y, r, out=y), out=y)
        if self._rounds_exactly and y.max() < 0.5 - 2.0**-20:
            rounded = (r / 1e6).tolist()
        else:
            rounded = [round(v, 6) for v in x.tolist()]
        at = 0
        for i, vals in self._unrounded:
            self.init[i] = Init(self.init[i].view, tuple(rounded[at:at + vals.size]))
            at += vals.size
        self._unrounded.clear()

    def coef(self, lo: float, hi: float, nonzero: bool = False) -> float:
        while True:
            c = round(float(self.rng.uniform(lo, hi)), 3)
            if c or not nonzero:
                return c

    def pick(self, seq):
        return seq[self.rng.integers(len(seq))]  # (a NumPy integer indexes a list as is)

    def windows(self, buf: str, dtype: str, n_elems: int, m: int, count: int,
                prefix: str) -> list[View]:
        """``count`` 1-D views of m elements, stride 1 or 2, at random (overlapping) offsets."""
        item = DTYPES[dtype].itemsize
        out = []
        for i in range(count):
            stride = 1 if (i == 0 or self.rng.random() < 0.6 or 2 * m - 1 > n_elems) else 2
            span = (m - 1) * stride + 1
            off = 0 if i == 0 else int(self.rng.integers(0, n_elems - span + 1))
            out.append(self.view(f"{prefix}{i}", buf, dtype, off * item, (m,), (stride * item,)))
        return out

    def program(self, rng_state: Rng, segments, inputs, loss: Loss, name: str) -> Program:
        self._round_fills()
        return Program(
            buffers=tuple(self.buffers), views=tuple(self.views.values()), ops=tuple(self.ops),
            loss=loss, name=name, init=tuple(self.init), rng=rng_state,
            segments=tuple(segments), inputs=tuple(inputs),
        )

    def segments(self, n_ops: int, max_segments: int) -> list[int]:
        s = int(self.rng.integers(1, min(max_segments, n_ops) + 1)) if n_ops else 1
        if n_ops == 0:
            return [0]
        cuts = sorted(self.rng.choice(np.arange(1, n_ops), size=s - 1, replace=False).tolist())
        return [end - start for start, end in zip([0] + cuts, cuts + [n_ops])]

    def rng_state(self) -> Rng:
        key = tuple(int(x) for x in self.rng.integers(0, 2**32, 2))
        if self.rng.random() < 0.25:  # near a carry across counter words
            counter = (2**32 - int(self.rng.integers(1, 8)), 2**32 - 1,
                       int(self.rng.integers(0, 2**32)), 0)
        else:
            counter = (int(self.rng.integers(0, 2**32)), 0, 0, 0)
        return Rng(key, counter)  # type: ignore[arg-type]

    def weights(self, n: int) -> tuple[float, ...]:
        return tuple(map(float, self.rng.integers(1, 6, n).tolist()))


FLOAT_KINDS = {
    OpKind.AXPBY: 3, OpKind.MUL: 2, OpKind.TANH: 2, OpKind.SIN: 2, OpKind.COPY: 2,
}
DRAW_KINDS = {OpKind.NOISE: 1, OpKind.DROPOUT: 1}
INDEX_KINDS = {OpKind.GATHER: 1, OpKind.SCATTER: 1}
INT_KINDS = {OpKind.IADD: 1.0, OpKind.IXOR: 1.0, OpKind.ICOPY: 1.0}


def _float_op(b: _Builder, kind: OpKind, dst: View, pool: list[View]) -> Op:
    x = b.pick(pool)
    if kind is OpKind.AXPBY:
        return Op(kind, dst.name, x.name, y=b.pick(pool).name, a=b.coef(-1.2, 1.2, True),
                  b=b.coef(-1.2, 1.2, True), c=b.coef(-0.5, 0.5))
    if kind is OpKind.MUL:
        return Op(kind, dst.name, x.name, y=b.pick(pool).name)
    if kind in (OpKind.TANH, OpKind.SIN):
        return Op(kind, dst.name, x.name, a=b.coef(0.3, 1.5, True))
    if kind is OpKind.NOISE:
        return Op(kind, dst.name, x.name, sigma=b.coef(0.01, 0.2, True))
    if kind is OpKind.DROPOUT:
        return Op(kind, dst.name, x.name, keep=b.pick([0.5, 0.75, 0.8, 0.9]))
    return Op(kind, dst.name, x.name)


class _Weights:
    """Op kinds with relative weights, and their normalised cumulative weights derived
    once per table (not on every op)."""

    def __init__(self, table: dict[OpKind, float]) -> None:
        self.kinds = list(table)
        w = np.array([table[k] for k in self.kinds], dtype=np.float64)
        cdf = (w / w.sum()).cumsum()
        self.cdf = (cdf / cdf[-1]).tolist()


FLOAT_WEIGHTS = _Weights(FLOAT_KINDS)


@functools.cache
def _kind_weights(draws: bool, indexed: bool, int_weight: float | None) -> _Weights:
    """The kinds ``_mixed`` and ``_alias`` draw from: float ops, then draws, gather and
    scatter, and integer ops (weighted ``int_weight``) as the limits allow. A family has
    one such table, so each is derived once, not for every program."""
    kinds = dict(FLOAT_KINDS)
    if draws:
        kinds.update(DRAW_KINDS)
    if indexed:
        kinds.update(INDEX_KINDS)
    if int_weight is not None:
        kinds.update({k: int_weight for k in INT_KINDS})
    return _Weights(kinds)


DTYPE_MIX_WEIGHTS = _Weights({k: 0.25 if k in INT_KINDS else 1.0 for k in OpKind})


def _pick_kind(b: _Builder, weights: _Weights) -> OpKind:
    """Draw a kind exactly as ``rng.choice(len(kinds), p=w / w.sum())`` does (one uniform,
    found in the normalised cumulative weights; a test checks the two agree), so the
    programs are those the generator has always made."""
    return weights.kinds[bisect.bisect_right(weights.cdf, b.rng.random())]


def _mixed(b: _Builder, limits: Limits, name: str, m: int | None = None) -> Program:
    """The general family: overlapping/strided float windows, 2-D views, draws,
    gather/scatter with duplicate and negative indices, integer aliases."""
    m = m or int(b.pick(limits.dims))
    n_ops = int(b.pick(limits.n_ops))
    dtype = b.pick(limits.dtypes)
    item = DTYPES[dtype].itemsize
    n_elems = 2 * m + 2
    state = b.buffer("state", n_elems * item)
    whole = b.view("all", state, dtype, 0, (n_elems,), (item,))
    b.fill(whole)
    wins = b.windows(state, dtype, n_elems, m, int(b.rng.integers(4, 7)), "w")
    params = b.buffer("params", m * item)
    p = b.view("p", params, dtype, 0, (m,), (item,))
    b.fill(p, -0.8, 0.8)
    pools: list[list[View]] = [wins + [p]]
    if m >= 4 and b.rng.random() < 0.5:  # a 2-D shape class: row-major and column-major
        h = m // 2
        g0 = b.view("g0", state, dtype, 0, (2, h), (h * item, item))
        g1 = b.view("g1", state, dtype, item, (2, h), (item, 2 * item))
        g2 = b.view("g2", state, dtype, (n_elems - m) * item, (2, h), (h * item, item))
        pools.append([g0, g1, g2])
    ints: list[View] = []
    idx: View | None = None
    if limits.gather_scatter:
        idx_buf = b.buffer("idx", m * 4)
        idx = b.view("ix", idx_buf, "int32", 0, (m,), (4,))
        b.fill(idx, -2 * m, 2 * m)
    if limits.int_writes:
        if dtype == "float64":  # int32 over both halves, low halves, int64 exact alias
            ints = [b.view("bits", state, "int32", 0, (m,), (4,)),
                    b.view("lo", state, "int32", item * int(b.rng.integers(0, m + 2)), (m,),
                           (8,)),
                    b.view("hi", state, "int32", 4 + item * int(b.rng.integers(0, m + 2)), (m,),
                           (8,))]
        else:
            ints = [b.view("bits", state, "int32", 0, (m,), (4,)),
                    b.view("lo", state, "int32", item * int(b.rng.integers(0, m + 3)), (m,),
                           (4,))]
    weights = _kind_weights(limits.draws, limits.gather_scatter,
                            limits.int_weight if limits.int_writes else None)
    draw_at = int(b.rng.integers(n_ops)) if limits.require_draw else -1
    for k in range(n_ops):
        kind = _pick_kind(b, weights) if k != draw_at else b.pick(list(DRAW_KINDS))
        if kind in INT_KINDS:
            dst, x = b.pick(ints), b.pick(ints)
            if kind is OpKind.ICOPY:
                b.ops.append(Op(kind, dst.name, x.name))
            else:
                k_max = 2**31 - 1
                kk = int(b.rng.integers(-k_max, k_max)) if kind is OpKind.IXOR else \
                    int(b.rng.integers(-1000, 1000))
                b.ops.append(Op(kind, dst.name, x.name, k=kk))
        elif kind is OpKind.GATHER:
            src = b.pick([whole] + wins)
            b.ops.append(Op(kind, b.pick(wins).name, src.name, index=idx.name))
        elif kind is OpKind.SCATTER:
            dst = b.pick([whole] + wins)
            b.ops.append(Op(kind, dst.name, b.pick(wins + [p]).name, index=idx.name))
        else:
            pool = b.pick(pools) if kind is not OpKind.COPY or len(pools) == 1 else pools[-1]
            b.ops.append(_float_op(b, kind, b.pick(pool), pool))
    loss_view = b.pick(wins + [whole])
    return b.program(b.rng_state(), b.segments(n_ops, limits.max_segments), ["w0", "p"],
                     Loss(loss_view.name, b.weights(loss_view.size)), name)


def _alias(b: _Builder, limits: Limits, name: str) -> Program:
    """Queue, prototype and recurrence patterns at dims 32/64 over shared storage."""
    pattern = b.pick(["queue", "prototype", "recurrence"])
    m = int(b.pick(limits.dims))
    n_ops = int(b.pick(limits.n_ops))
    item = 8
    if pattern == "queue":  # a ring of feature slots; each step enqueues and reads the ring
        slots = 4
        state = b.buffer("queue", (slots + 1) * m * item)
        ring = b.view("ring", state, "float64", 0, ((slots + 1) * m,), (item,))
        b.fill(ring)
        q = [b.view(f"slot{i}", state, "float64", i * m * item, (m,), (item,))
             for i in range(slots + 1)]
        shifted = b.view("shift", state, "float64", item, (m,), (item,))
        feats = b.view("feat", b.buffer("features", m * item), "float64", 0, (m,), (item,))
        b.fill(feats)
        pool, inputs = q + [shifted, feats], ["feat", "slot0"]
    elif pattern == "prototype":  # momentum prototypes, strided rows, int bit reads
        state = b.buffer("protos", 2 * m * item)
        allv = b.view("protos_all", state, "float64", 0, (2 * m,), (item,))
        b.fill(allv)
        pa = b.view("pa", state, "float64", 0, (m,), (2 * item,))
        pb = b.view("pb", state, "float64", item, (m,), (2 * item,))
        pc = b.view("pc", state, "float64", m * item, (m,), (item,))
        xb = b.view("xin", b.buffer("batch", m * item), "float64", 0, (m,), (item,))
        b.fill(xb)
        pool, inputs = [pa, pb, pc, xb], ["xin", "pa"]
    else:  # recurrence: h_{t+1} = tanh(a h_t + x_t) on overlapping windows of one tape
        state = b.buffer("tape", (m + n_ops + 1) * item)
        tape = b.view("tape_all", state, "float64", 0, (m + n_ops + 1,), (item,))
        b.fill(tape, -0.5, 0.5)
        pool = [b.view(f"h{i}", state, "float64", i * item, (m,), (item,)) for i in range(4)]
        xs = b.view("xs", b.buffer("inputs", m * item), "float64", 0, (m,), (item,))
        b.fill(xs)
        pool, inputs = pool + [xs], ["xs"]
    # int32 halves of float64 storage: read as bits, written into a separate int buffer
    bits_buf = b.buffer("bits", m * 4)
    halves = b.view("halves", b.buffers[0].name, "int32", 0, (m,), (4,))
    lows = b.view("lows", b.buffers[0].name, "int32", 0, (m // 2,), (8,))
    out = b.view("ibits", bits_buf, "int32", 0, (m,), (4,))
    out_low = b.view("ibits_low", bits_buf, "int32", 0, (m // 2,), (4,))
    weights = _kind_weights(limits.draws, False, None)
    for _ in range(n_ops):
        r = b.rng.random()
        if r < 0.15:
            b.ops.append(Op(OpKind.ICOPY, out.name, halves.name))
        elif r < 0.22:
            b.ops.append(Op(OpKind.IXOR, out_low.name, lows.name, k=int(b.rng.integers(0, 2**31))))
        elif r < 0.27 and limits.int_writes:  # an integer write over float bytes
            b.ops.append(Op(OpKind.IADD, lows.name, lows.name, k=int(b.rng.integers(1, 9))))
        else:
            kind = _pick_kind(b, weights)
            if pattern == "prototype" and kind is OpKind.AXPBY:
                dst = b.pick(pool[:3])
                b.ops.append(Op(kind, dst.name, dst.name, y=pool[3].name, a=0.9, b=0.1, c=0.0))
            else:
                b.ops.append(_float_op(b, kind, b.pick(pool[:-1]), pool))
    loss_view = b.pick(pool)
    return b.program(b.rng_state(), b.segments(n_ops, limits.max_segments), inputs,
                     Loss(loss_view.name, b.weights(loss_view.size)), name)


# ---------------------------------------------------------------- mixed dtypes

VIEW_KINDS = ("contiguous", "strided", "2-D row-major", "2-D column-major")


def view_kind(view: View) -> str:
    """The layout class of a view: 1-D contiguous or strided, 2-D row- or column-major
    (a 2-D view with one row or one column counts by its strides)."""
    if len(view.shape) == 1:
        return "contiguous" if view.strides[0] == view.itemsize else "strided"
    return "2-D row-major" if view.strides[0] >= view.strides[1] else "2-D column-major"


def _dtype_mix(b: _Builder, limits: Limits, name: str) -> Program:
    """One buffer viewed through all four dtypes in all four view kinds.

    Every dtype gets a contiguous and a stride-2 1-D view of m elements and row- and
    column-major (2, m/2) views, at random aligned offsets. With probability 1/2 the
    float32 views live in their own bytes (the program usually keeps its gradient);
    otherwise all views share the buffer, so float32 reads of float64-written bytes
    (and the reverse), reads of several writes and integer writes under float views
    occur, and admission refuses them. Ops of every kind draw dst and sources of one
    dtype and one shape; index views are int32 and int64, 1-D and 2-D.
    """
    m = int(b.pick(limits.dims))
    h = m // 2
    n_ops = int(b.pick(limits.n_ops))
    separate = b.rng.random() < 0.5
    n64 = 2 * m + 2  # float64 elements of the shared region
    region = n64 * 8
    nbytes = region * (3 if separate else 1)
    state = b.buffer("state", nbytes)
    b.fill(b.view("all", state, "float64", 0, (n64,), (8,)))
    by_dtype: dict[str, list[View]] = {}
    for dtype in DTYPES:
        item = DTYPES[dtype].itemsize
        lo = 0  # first byte of the region the dtype's views live in
        if separate and dtype != "float64":  # float32 in the second, integers in the third
            lo = region if dtype == "float32" else 2 * region
        tag = dtype[0] + dtype[-2:]
        vs = []
        for kind, shape, strides in (("c", (m,), (item,)), ("s", (m,), (2 * item,)),
                                     ("r", (2, h), (h * item, item)),
                                     ("k", (2, h), (item, 2 * item))):
            span = extent(shape, strides, item)
            off = lo + item * int(b.rng.integers(0, (region - span) // item + 1))
            vs.append(b.view(f"{tag}{kind}", state, dtype, off, shape, strides))
        by_dtype[dtype] = vs
    if separate:
        b.fill(by_dtype["float32"][0], -0.9, 0.9)
    idx = b.buffer("idx", 8 * m)
    b.fill(b.view("ixall", idx, "int32", 0, (2 * m,), (4,)), -2 * m, 2 * m)
    index = {("int32", 1): b.view("ix", idx, "int32", 0, (m,), (4,)),
             ("int32", 2): b.view("ix2", idx, "int32", 0, (2, h), (4, 8)),
             ("int64", 1): b.view("kx", idx, "int64", 0, (m,), (8,)),
             ("int64", 2): b.view("kx2", idx, "int64", 0, (2, h), (8 * h, 8))}
    for _ in range(n_ops):
        kind = _pick_kind(b, DTYPE_MIX_WEIGHTS)
        if kind in INT_KINDS:
            dtype = b.pick(["int32", "int64"])
        elif kind in (OpKind.COPY, OpKind.GATHER, OpKind.SCATTER):
            dtype = b.pick(list(DTYPES))
        else:
            dtype = b.pick(["float64", "float32"])
        vs = by_dtype[dtype]
        two_d = b.rng.random() < 0.5
        same = [v for v in vs if (len(v.shape) == 2) == two_d]
        one_d = [v for v in vs if len(v.shape) == 1]
        if kind is OpKind.GATHER:
            dst = b.pick(same)
            ix = index[(b.pick(["int32", "int64"]), len(dst.shape))]
            b.ops.append(Op(kind, dst.name, b.pick(one_d).name, index=ix.name))
        elif kind is OpKind.SCATTER:
            x = b.pick(same)
            ix = index[(b.pick(["int32", "int64"]), len(x.shape))]
            b.ops.append(Op(kind, b.pick(one_d).name, x.name, index=ix.name))
        elif kind in INT_KINDS:
            dst, x = b.pick(same), b.pick(same)
            k = int(b.rng.integers(-1000, 1000)) if kind is OpKind.IADD else \
                int(b.rng.integers(0, 2**31 - 1))
            b.ops.append(Op(kind, dst.name, x.name, k=None if kind is OpKind.ICOPY else k))
        elif kind is OpKind.COPY:
            b.ops.append(Op(kind, b.pick(same).name, b.pick(same).name))
        else:
            b.ops.append(_float_op(b, kind, b.pick(same), same))
    f64 = by_dtype["float64"]
    # overlapping: the input is float64 or float32, so the first refusal varies
    inputs = ["f64c", "f32c"] if separate else [b.pick(["f64c", "f32c"])]
    loss_view = b.pick([b.views["all"]] + f64 + (by_dtype["float32"] if separate else []))
    return b.program(b.rng_state(), b.segments(n_ops, limits.max_segments), inputs,
                     Loss(loss_view.name, b.weights(loss_view.size)), name)


# ---------------------------------------------------------------- hazards

# The replay hazard each program of the ``hazard`` family is built around: program
# ``index`` gets HAZARDS[index % len(HAZARDS)] (see :func:`hazard_of`).
HAZARDS = ("memmove", "scatter-duplicates", "destroyed-history", "draw-state",
           "stale-operand", "int-under-float")


def hazard_of(index: int) -> str:
    """The hazard that program ``index`` of the ``hazard`` family is built around."""
    return HAZARDS[index % len(HAZARDS)]


def _hazard(b: _Builder, limits: Limits, name: str) -> Program:
    """A float64 program of three or four segments built around one replay hazard
    (``limits.hazard``), with a few random float ops around it.

    memmove: copies and an in-place tanh between windows shifted by d < m elements;
    scatter-duplicates: a scatter whose index repeats positions with different values;
    destroyed-history: segment j reads a window that segment j + 2 rewrites;
    draw-state: dropout and noise in every segment (the state R must be reinstated);
    stale-operand: a mul's second operand is rewritten by the next segment;
    int-under-float: integer writes (iadd, ixor, int64) over float64 bytes.
    """
    hazard = limits.hazard
    m = int(b.pick(limits.dims))
    n = 2 * m + 2
    state = b.buffer("state", n * 8)
    allv = b.view("all", state, "float64", 0, (n,), (8,))
    b.fill(allv)
    d = int(b.rng.integers(1, m))
    lo = b.view("lo", state, "float64", 0, (m,), (8,))
    hi = b.view("hi", state, "float64", 8 * d, (m,), (8,))
    far = b.view("far", state, "float64", 8 * (n - m), (m,), (8,))
    params = b.buffer("params", m * 8)
    p = b.view("p", params, "float64", 0, (m,), (8,))
    b.fill(p, -0.8, 0.8)
    pool = [lo, hi, far, p]

    def filler() -> Op:
        kind = _pick_kind(b, FLOAT_WEIGHTS)
        return _float_op(b, kind, b.pick([lo, hi, far]), pool)

    segs: list[list[Op]] = []
    if hazard == "memmove":
        for _ in range(3):
            up = Op(OpKind.COPY, hi.name, lo.name)  # shift up: memcpy reads overwritten
            th = Op(OpKind.TANH, hi.name, lo.name, a=b.coef(0.5, 1.5, True))
            down = Op(OpKind.COPY, lo.name, hi.name)
            mul = Op(OpKind.MUL, lo.name, hi.name, y=lo.name)
            core = [up, th, down, mul]
            segs.append([filler()] + [core[j] for j in b.rng.permutation(4)])
    elif hazard == "scatter-duplicates":
        ix = b.view("ix", b.buffer("idx", m * 4), "int32", 0, (m,), (4,))
        dup = b.rng.integers(-m // 2, m // 2, m)  # m draws from m positions: repeats
        b.init.append(Init(ix.name, tuple(int(v) for v in dup)))
        for _ in range(3):
            segs.append([Op(OpKind.TANH, hi.name, hi.name, a=b.coef(0.5, 1.5, True)),
                         Op(OpKind.SCATTER, far.name, hi.name, index=ix.name),
                         Op(OpKind.MUL, lo.name, far.name, y=p.name), filler()])
    elif hazard == "destroyed-history":  # segment j reads V[j], segment j + 2 rewrites it
        rot = [lo, hi, far]
        for j in range(3):
            src, dst = rot[j % 3], rot[(j + 1) % 3]
            segs.append([Op(OpKind.AXPBY, dst.name, dst.name, y=src.name,
                            a=b.coef(-1.2, 1.2, True), b=b.coef(-1.2, 1.2, True),
                            c=b.coef(-0.5, 0.5)),
                         Op(OpKind.MUL, dst.name, dst.name, y=src.name),
                         Op(OpKind.SIN, dst.name, dst.name, a=b.coef(0.5, 1.5, True)),
                         _float_op(b, _pick_kind(b, FLOAT_WEIGHTS), p, pool)])
    elif hazard == "draw-state":
        for _ in range(3):
            segs.append([Op(OpKind.TANH, lo.name, lo.name, a=b.coef(0.5, 1.5, True)),
                         Op(OpKind.DROPOUT, lo.name, lo.name, keep=b.pick([0.5, 0.75])),
                         Op(OpKind.MUL, far.name, far.name, y=lo.name),
                         Op(OpKind.NOISE, hi.name, hi.name, sigma=b.coef(0.05, 0.2, True)),
                         filler()])
    elif hazard == "stale-operand":  # y of segment j's mul is rewritten by segment j + 1
        for j in range(3):
            x, y = (lo, far) if j % 2 == 0 else (far, lo)
            segs.append([Op(OpKind.MUL, x.name, x.name, y=y.name),
                         Op(OpKind.SIN, x.name, x.name, a=b.coef(0.5, 1.5, True)),
                         _float_op(b, _pick_kind(b, FLOAT_WEIGHTS), p, pool)])
    else:  # int-under-float
        lows = b.view("lows", state, "int32", 0, (m,), (8,))
        highs = b.view("highs", state, "int32", 4 + 8 * (n - m), (m,), (8,))
        words = b.view("words", state, "int64", 8 * d, (m,), (8,))
        for _ in range(3):
            segs.append([Op(OpKind.TANH, hi.name, lo.name, a=b.coef(0.5, 1.5, True)),
                         b.pick([Op(OpKind.IADD, lows.name, lows.name,
                                    k=int(b.rng.integers(1, 1000))),
                                 Op(OpKind.IXOR, highs.name, highs.name,
                                    k=int(b.rng.integers(1, 2**20))),
                                 Op(OpKind.IADD, words.name, words.name,
                                    k=int(b.rng.integers(1, 2**40)))]),
                         Op(OpKind.MUL, far.name, far.name, y=p.name), filler()])
    if b.rng.random() < 0.5:
        segs.append([filler() for _ in range(int(b.rng.integers(1, 4)))])
    for seg in segs:
        b.ops.extend(seg)
    return b.program(b.rng_state(), [len(s) for s in segs], ["all", "p"],
                     Loss(allv.name, b.weights(n)), name)


FamilyFn = Callable[[_Builder, Limits, str], "Program | None"]


@dataclass(frozen=True)
class Family:
    """A named generator: its builder and its default limits."""

    build: FamilyFn
    limits: Limits = field(default_factory=Limits)
    # limits that depend on the program's index (the hazard family's hazard)
    per_index: Callable[[int], dict] | None = None


FAMILIES: dict[str, Family] = {
    # The general mix: both float dtypes, integer aliases and writes, gather/scatter, draws.
    "default": Family(_mixed, Limits(dtypes=("float64", "float32"), int_writes=True,
                                     int_weight=0.2)),
    # float64 with a gradient-changing hazard and a draw in every program.
    "derivative": Family(_mixed, Limits(require_hazard=True, require_draw=True)),
    # Integer aliases and writes over float bytes, duplicates, float32: byte exactness.
    "bytes": Family(_mixed, Limits(dtypes=("float64", "float32"), int_writes=True,
                                   finite=False)),
    # Queue / prototype / recurrence patterns at dims 32 and 64.
    "alias": Family(_alias, Limits(dims=(32, 64), int_writes=True, finite=False)),
    # The analytic float64 subset for complex-step: no integer ops.
    "complex": Family(_mixed, Limits(gather_scatter=True, int_writes=False)),
    # One buffer through float64, float32, int64 and int32 views of every kind: dtype
    # mixing, every admission refusal, 2-D views in every op position.
    "mixed": Family(_dtype_mix, Limits(dims=(4, 8), finite=False)),
    # Programs built around one replay hazard each: HAZARDS[index % 6].
    "hazard": Family(_hazard, Limits(dims=(4, 8)), lambda i: {"hazard": hazard_of(i)}),
}


@dataclass(frozen=True)
class Generated:
    program: Program
    attempts: int  # 1 when the first draw was accepted
    execution: Execution  # the accepting run (with boundaries): checks reuse it


def _seed_words(seed: int, index: int, family: str, attempt: int) -> list[int] | np.ndarray:
    """The words that seed an attempt's generator: as uint32 words when each fits one,
    which seed the same generator as the list (SeedSequence splits a list into uint32
    words one int at a time: a third of the ~12 us that seeding takes)."""
    words = [seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF, index, zlib.crc32(family.encode()),
             attempt]
    return np.array(words, dtype=np.uint32) if 0 <= index <= 0xFFFFFFFF else words


def judgeable(program: Program, limits: Limits) -> bool:
    """Refuse draws whose numbers the checks cannot judge: non-finite gradients (where the
    family wants finite ones), and final-storage hazards that change the gradient by
    less than the SPEC §5 tolerance (a control nobody could detect)."""
    return accepted(program, limits) is not None


def accepted(program: Program, limits: Limits) -> Execution | None:
    """The program's execution when :func:`judgeable` accepts it, else None."""
    ex = execute(program)
    return ex if _judgeable(ex, limits) else None


def _judgeable(ex: Execution, limits: Limits) -> bool:
    program = ex.program
    if not ex.admission.supported:
        return not limits.require_hazard
    g = ex.gradient
    finite = math.isfinite(ex.loss) and bool((np.abs(g) < 1e8).all())  # false for NaN, inf
    if limits.finite and not finite:
        return False
    if not finite or not stale_operands(ex):
        return not limits.require_hazard
    diff = np.abs(hazard_gradient(ex) - g)
    diff = float(np.max(diff[np.isfinite(diff)], initial=0.0))
    tol = program_tolerance(program, g)
    if 0.0 < diff <= tol:
        return False
    if limits.require_hazard:
        scale = max(1.0, float(np.max(np.abs(g)))) if g.size else 1.0
        return diff > max(tol, 1e-6 * scale)
    return True


def generate_with_attempts(seed: int, index: int, family: str = "default",
                           **limits) -> Generated:
    """Like :func:`generate`, also telling how many draws were rejected first."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(sorted(FAMILIES))}")
    fam = FAMILIES[family]
    overrides = {**(fam.per_index(index) if fam.per_index else {}), **limits}
    lim = replace(fam.limits, **overrides) if overrides else fam.limits
    for attempt in range(MAX_ATTEMPTS):
        b = _Builder(np.random.default_rng(_seed_words(seed, index, family, attempt)))
        program = fam.build(b, lim, f"s{seed}/{family}/{index:06d}")
        ex = None if program is None else accepted(program, lim)
        if ex is not None:
            return Generated(program, attempt + 1, ex)
    raise RuntimeError(f"family {family!r} produced no acceptable program for "
                       f"seed {seed} index {index} in {MAX_ATTEMPTS} attempts")


def generate(seed: int, index: int, family: str = "default", **limits) -> Program:
    """Program ``index`` of family ``family`` in the suite seeded by ``seed``.

    Deterministic and valid by construction. ``limits`` override the family's
    :class:`Limits` (for example ``dims=(4,)`` or ``dtypes=("float32",)``).
    """
    return generate_with_attempts(seed, index, family, **limits).program
