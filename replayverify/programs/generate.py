"""Deterministic program generators, one per family, valid by construction.

``generate(seed, index, family=...)`` builds program ``index`` of the suite seeded by
``seed``; the same arguments give the same program on any machine. A family is a
function from a seeded ``numpy.random.Generator`` and limits to a :class:`Program`,
registered in :data:`FAMILIES`; add one by writing such a function. Families may
reject a draw (for example a derivative program without a hazard) by returning
None; the next attempt uses the next seed, and the count of attempts is kept.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

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
)

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


class _Builder:
    """Collects buffers, views, init and ops while a family builds a program."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.buffers: list[Buffer] = []
        self.views: dict[str, View] = {}
        self.init: list[Init] = []
        self.ops: list[Op] = []

    def buffer(self, name: str, nbytes: int) -> str:
        self.buffers.append(Buffer(name, nbytes))
        return name

    def view(self, name: str, buffer: str, dtype: str, offset: int, shape, strides) -> View:
        v = View(name, buffer, dtype, int(offset), tuple(int(s) for s in shape),
                 tuple(int(s) for s in strides))
        self.views[name] = v
        return v

    def fill(self, view: View, lo: float = -1.0, hi: float = 1.0) -> None:
        if view.is_float:
            vals = tuple(round(float(x), 6) for x in self.rng.uniform(lo, hi, view.size))
        else:
            vals = tuple(int(x) for x in self.rng.integers(int(lo), int(hi), view.size))
        self.init.append(Init(view.name, vals))

    def coef(self, lo: float, hi: float, nonzero: bool = False) -> float:
        while True:
            c = round(float(self.rng.uniform(lo, hi)), 3)
            if c or not nonzero:
                return c

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

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
        return np.diff([0] + cuts + [n_ops]).tolist()

    def rng_state(self) -> Rng:
        key = tuple(int(x) for x in self.rng.integers(0, 2**32, 2))
        if self.rng.random() < 0.25:  # near a carry across counter words
            counter = (2**32 - int(self.rng.integers(1, 8)), 2**32 - 1,
                       int(self.rng.integers(0, 2**32)), 0)
        else:
            counter = (int(self.rng.integers(0, 2**32)), 0, 0, 0)
        return Rng(key, counter)  # type: ignore[arg-type]

    def weights(self, n: int) -> tuple[float, ...]:
        return tuple(float(x) for x in self.rng.integers(1, 6, n))


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


def _pick_kind(b: _Builder, table: dict[OpKind, float]) -> OpKind:
    kinds = list(table)
    w = np.array([table[k] for k in kinds], dtype=np.float64)
    return kinds[int(b.rng.choice(len(kinds), p=w / w.sum()))]


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
    kinds = dict(FLOAT_KINDS)
    if limits.draws:
        kinds.update(DRAW_KINDS)
    ints: list[View] = []
    idx: View | None = None
    if limits.gather_scatter:
        kinds.update(INDEX_KINDS)
        idx_buf = b.buffer("idx", m * 4)
        idx = b.view("ix", idx_buf, "int32", 0, (m,), (4,))
        b.fill(idx, -2 * m, 2 * m)
    if limits.int_writes:
        kinds.update({k: limits.int_weight for k in INT_KINDS})
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
    draw_at = int(b.rng.integers(n_ops)) if limits.require_draw else -1
    for k in range(n_ops):
        kind = _pick_kind(b, kinds) if k != draw_at else b.pick(list(DRAW_KINDS))
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
    kinds = dict(FLOAT_KINDS)
    kinds.update(DRAW_KINDS if limits.draws else {})
    for _ in range(n_ops):
        r = b.rng.random()
        if r < 0.15:
            b.ops.append(Op(OpKind.ICOPY, out.name, halves.name))
        elif r < 0.22:
            b.ops.append(Op(OpKind.IXOR, out_low.name, lows.name, k=int(b.rng.integers(0, 2**31))))
        elif r < 0.27 and limits.int_writes:  # an integer write over float bytes
            b.ops.append(Op(OpKind.IADD, lows.name, lows.name, k=int(b.rng.integers(1, 9))))
        else:
            kind = _pick_kind(b, kinds)
            if pattern == "prototype" and kind is OpKind.AXPBY:
                dst = b.pick(pool[:3])
                b.ops.append(Op(kind, dst.name, dst.name, y=pool[3].name, a=0.9, b=0.1, c=0.0))
            else:
                b.ops.append(_float_op(b, kind, b.pick(pool[:-1]), pool))
    loss_view = b.pick(pool)
    return b.program(b.rng_state(), b.segments(n_ops, limits.max_segments), inputs,
                     Loss(loss_view.name, b.weights(loss_view.size)), name)


FamilyFn = Callable[[_Builder, Limits, str], "Program | None"]


@dataclass(frozen=True)
class Family:
    """A named generator: its builder and its default limits."""

    build: FamilyFn
    limits: Limits = field(default_factory=Limits)


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
}


@dataclass(frozen=True)
class Generated:
    program: Program
    attempts: int  # 1 when the first draw was accepted


def _seed_words(seed: int, index: int, family: str, attempt: int) -> list[int]:
    return [seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF, index, zlib.crc32(family.encode()),
            attempt]


def judgeable(program: Program, limits: Limits) -> bool:
    """Refuse draws whose numbers the checks cannot judge: non-finite gradients (where the
    family wants finite ones), and final-storage hazards that change the gradient by
    less than the SPEC §5 tolerance (a control nobody could detect)."""
    from replayverify.programs.interpreter import execute, hazard_gradient, stale_operands
    from replayverify.programs.tolerance import program_tolerance

    ex = execute(program, record_boundaries=False)
    if not ex.admission.supported:
        return not limits.require_hazard
    g = ex.gradient
    finite = bool(np.isfinite(ex.loss) and np.all(np.isfinite(g)) and np.all(np.abs(g) < 1e8))
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
    lim = replace(fam.limits, **limits)
    for attempt in range(MAX_ATTEMPTS):
        b = _Builder(np.random.default_rng(_seed_words(seed, index, family, attempt)))
        program = fam.build(b, lim, f"s{seed}/{family}/{index:06d}")
        if program is not None and judgeable(program, lim):
            return Generated(program, attempt + 1)
    raise RuntimeError(f"family {family!r} produced no acceptable program for "
                       f"seed {seed} index {index} in {MAX_ATTEMPTS} attempts")


def generate(seed: int, index: int, family: str = "default", **limits) -> Program:
    """Program ``index`` of family ``family`` in the suite seeded by ``seed``.

    Deterministic and valid by construction. ``limits`` override the family's
    :class:`Limits` (for example ``dims=(4,)`` or ``dtypes=("float32",)``).
    """
    return generate_with_attempts(seed, index, family, **limits).program
