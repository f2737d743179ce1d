"""The five preservation strategies of SPEC §4 and the engines built from them.

Each strategy differs from the others in what it retains (its forward hooks) and in
one recovery method. Replay-based recoveries run inside ``Strategy.transaction``. The
run loop, and how ops run (``engines.runner``), are ``engines.base``'s: nothing here
knows of reuse between runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from replayverify.engines.base import (
    INDEX_BYTES,
    RNG_BYTES,
    EngineResult,
    Recovery,
    Strategy,
    Tape,
    copy_buffers,
    gather_view,
    load_buffers,
    run_strategies,
)
from replayverify.engines.plan import PER_PROGRAM
from replayverify.engines.runner import OpRunner
from replayverify.programs.arrays import ranks, unique_ints
from replayverify.programs.interpreter import Admission, OpValues, draw, philox_blocks
from replayverify.programs.model import Op, Program
from replayverify.programs.state import State, ViewLayout, as_words, slot_count
from replayverify.untrusted import shown


def read_fields(op: Op) -> tuple[str, ...]:
    """The fields whose views an op reads: its value sources, then its index."""
    return op.spec.reads


def redraw(tape: Tape, k: int, rng) -> np.ndarray | None:
    """The random values op ``k`` consumed, recomputed from the generator state before it."""
    plan = tape.plans[k]
    if not plan.draws:
        return None
    dst = plan.dst
    return draw(plan.op, rng, dst.size, dst.dtype, tape.xp, philox_blocks(tape.program))[0]


# ---------------------------------------------------------------- eager


class Eager(Strategy):
    """Retains, before every op, the full buffers it reads and R; reads the saved pre-state."""

    name = "eager"

    def keep_buffer(self, buf: np.ndarray) -> np.ndarray:
        return buf.copy()

    def before(self, tape: Tape, s: int, k: int, state: State) -> None:
        keep, buffers = self.keep_buffer, state.buffers
        saved = {}  # each buffer an operand lies in, once
        nbytes = RNG_BYTES
        for _, lay in tape.plans[k].reads:
            name = lay.view.buffer
            if name not in saved:
                buf = buffers[name]
                saved[name] = keep(buf)
                nbytes += buf.nbytes
        tape.keep(s, ("eager", k), (saved, state.rng), nbytes)

    def rng_for(self, tape: Tape, k: int, saved_rng, state: State):
        return saved_rng

    def recover(self, tape: Tape, s: int, state: State) -> Recovery:
        a, b = tape.bounds[s]
        xp, data, plans = tape.xp, tape.data, tape.plans
        ops = []
        for k in range(a, b):
            saved, rng = data[("eager", k)]
            plan = plans[k]
            operands = {}
            for f, lay in plan.reads:  # each operand read from its saved buffer (NumPy:
                # through the view's strides, as a state reads it: no byte index derived)
                operands[f] = (lay.strided(saved[lay.view.buffer]).flatten()
                               if xp is np else gather_view(saved, lay, xp))
            draws = redraw(tape, k, self.rng_for(tape, k, rng, state)) if plan.draws else None
            ops.append(tape.record(k, operands, draws))
        return Recovery(ops)


# ---------------------------------------------------------------- read-set


class ReadSetPlan(NamedTuple):
    """How a read set keeps the retained operands of one op, derived once per program and
    set of retained fields (:func:`readset_plan`) for ops that read a buffer through
    several views; the others keep the same parts as they read them
    (:func:`_distinct_views`).

    A buffer the op reads (retained fields) through one view, or through views in disjoint
    byte ranges, is kept as those views' values: exactly its bytes read, since a view never
    overlaps itself. A buffer read through views whose ranges meet is kept as the
    granules (``ViewLayout.cover``) at the sorted union of theirs, each granule once, and
    each view is recovered from the positions of its granules there: the same bytes as a
    union of byte indices, with one index per granule.
    """

    views: tuple[ViewLayout, ...]  # kept as their values (parts 0..len(views)-1)
    # (buffer, granule, granule indices) kept as granule words (next parts)
    unions: tuple[tuple[str, int, Any], ...]
    at: dict[str, tuple[int, Any]]  # retained field -> (part, granule positions in a union)
    nbytes: int  # bytes of the values kept (the indices are the program's: not charged)
    on: dict[str, tuple[Any, Any]]  # the arrays above on other array modules, made once

    def arrays(self, xp: ModuleType) -> tuple[tuple[tuple[str, int, Any], ...],
                                              dict[str, tuple[int, Any]]]:
        """``unions`` and ``at`` with their arrays on ``xp``."""
        if xp is np:
            return self.unions, self.at
        hit = self.on.get(xp.__name__)
        if hit is None:
            hit = self.on[xp.__name__] = (
                tuple((b, g, xp.asarray(idx)) for b, g, idx in self.unions),
                {f: (part, None if pos is None else xp.asarray(pos))
                 for f, (part, pos) in self.at.items()})
        return hit


def readset_plan(tape: Tape, k: int, fields: tuple[str, ...]) -> ReadSetPlan:
    """The :class:`ReadSetPlan` of op ``k`` retaining ``fields``, derived once per program
    (held by the engines layer, ``plan.PER_PROGRAM``)."""
    plans = PER_PROGRAM.carried(tape.program, "readset_plans", _no_plans)
    plan = plans.get((k, fields))
    if plan is None:
        plan = plans[(k, fields)] = _readset_plan(tape, k, fields)
    return plan


def _no_plans(program: Program) -> dict:
    return {}  # filled per (op, retained fields) as the read sets ask


def _readset_plan(tape: Tape, k: int, fields: tuple[str, ...]) -> ReadSetPlan:
    sources = tape.plans[k].sources
    per_buffer: dict[str, dict[str, ViewLayout]] = {}  # buffer -> its distinct views read
    for f in fields:
        lay = sources[f]
        per_buffer.setdefault(lay.view.buffer, {})[lay.view.name] = lay
    views: list[ViewLayout] = []
    unions: list[tuple[str, int, Any]] = []
    nbytes = 0
    part = {}  # view -> the part that keeps it
    apart = {b: _apart(list(lays.values())) for b, lays in per_buffer.items()}
    for b, lays in per_buffer.items():
        if apart[b]:  # each view's values: its bytes, none twice
            for name, lay in lays.items():
                part[name] = len(views)
                views.append(lay)
                nbytes += lay.size * lay.dtype.itemsize
    positions = {}  # view -> where its bytes sit in its buffer's union
    for b, lays in per_buffer.items():
        if not apart[b]:
            granule = next(iter(lays.values())).granule  # (the buffer's)
            idx, pos = _union(list(lays.values()), tape.program.buffer(b).nbytes)
            positions.update(pos)
            for name in lays:
                part[name] = len(views) + len(unions)
            unions.append((b, granule, idx))
            nbytes += int(idx.size) * granule
    at = {}
    for f in fields:
        view = sources[f].view
        p = part[view.name]
        at[f] = (p, None if p < len(views) else positions[view.name])
    return ReadSetPlan(tuple(views), tuple(unions), at, nbytes, {})


def _apart(lays: list[ViewLayout]) -> bool:
    """Whether views of one buffer lie in disjoint byte ranges (from each one's first byte
    to past its last): then no byte is in two of them."""
    spans = sorted((lay.view.offset, lay.view.end) for lay in lays)
    return all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))


def _union(lays: list[ViewLayout], nbytes: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The sorted distinct granules of views of one buffer (of ``nbytes``) and, per view
    name, the positions of its granules among them (:func:`ranks`)."""
    indices = [lay.cover for lay in lays]
    idx, at = ranks(np.concatenate(indices), slot_count(nbytes, lays[0].granule))
    bounds = itertools.accumulate([i.size for i in indices], initial=0)
    return idx, {lay.view.name: at[a:b]
                 for lay, (a, b) in zip(lays, itertools.pairwise(bounds))}


def _distinct_views(sources: dict[str, ViewLayout], fields: tuple[str, ...], state: State
                    ) -> tuple[list[Any] | None, dict[str, tuple[int, None]] | None, int]:
    """The read set of an op whose every buffer it reads (``fields``) is read through one
    view, as :class:`ReadSetPlan` keeps it: each view's values once (fresh copies), where
    each field's values sit, their bytes; (None, None, 0) when some buffer is read through
    two views. Made as it is kept: most ops read such sets, and they need no plan."""
    kept: list[Any] = []
    at: dict[str, tuple[int, None]] = {}
    seen: dict[str, tuple[str, int]] = {}  # buffer -> (its view read, the part keeping it)
    nbytes = 0
    for f in fields:
        lay = sources[f]
        view = lay.view
        hit = seen.get(view.buffer)
        if hit is None:
            seen[view.buffer] = (view.name, len(kept))
            at[f] = (len(kept), None)
            values = state.read_flat(lay)
            kept.append(values)
            nbytes += values.nbytes
        elif hit[0] == view.name:
            at[f] = (hit[1], None)
        else:
            return None, None, 0
    return kept, at, nbytes


class ReadSet(Strategy):
    """Retains the bytes each op reads (the union over its read views) and, for draw
    ops, R before the op; reads the retained operands directly.

    Byte indices are declared by the program, so only values are charged.
    """

    name = "readset"

    def retained_fields(self, op: Op) -> tuple[str, ...]:
        return read_fields(op)

    def plan(self, tape: Tape, k: int) -> ReadSetPlan:
        return readset_plan(tape, k, tuple(self.retained_fields(tape.plans[k].op)))

    def capture(self, tape: Tape, s: int, k: int, state: State) -> None:
        op = tape.plans[k]
        fields = tuple(self.retained_fields(op.op))
        kept, at, nbytes = _distinct_views(op.sources, fields, state)
        if kept is None:  # a buffer read through several views: their union, planned once
            plan = readset_plan(tape, k, fields)
            unions, at = plan.arrays(tape.xp)
            kept = [state.read_flat(lay) for lay in plan.views]  # fresh copies
            kept += [as_words(state.buffers[name], g)[idx] for name, g, idx in unions]
            nbytes = plan.nbytes
        rng = state.rng if op.draws else None
        nbytes += RNG_BYTES if rng else 0
        # ``at`` (where each retained operand sits in ``kept``) follows from the program: it
        # is not charged
        tape.keep(s, ("readset", k), (kept, rng, at), nbytes)

    def before(self, tape: Tape, s: int, k: int, state: State) -> None:
        self.capture(tape, s, k, state)

    def recover(self, tape: Tape, s: int, state: State) -> Recovery:
        a, b = tape.bounds[s]
        data, plans = tape.data, tape.plans
        ops = []
        for k in range(a, b):
            kept, rng, at = data[("readset", k)]
            operands = {}
            for f, lay in plans[k].reads:
                if f in at:  # the retained values (flat)
                    part, pos = at[f]
                    operands[f] = kept[part] if pos is None else kept[part][pos].view(lay.dtype)
                else:  # not retained: whatever the live storage holds now
                    operands[f] = state.read_flat(lay)
            # (R is kept for draw ops only)
            ops.append(tape.record(k, operands, None if rng is None else redraw(tape, k, rng)))
        return Recovery(ops)


# ---------------------------------------------------------------- whole


class Whole(Strategy):
    """Retains a full anchor (B_s, R_s) per segment and the random values its ops drew;
    replays the segment from the anchor reusing the recorded draws."""

    name = "whole"
    anchors = True

    def take_anchor(self, tape: Tape, s: int, state: State) -> None:
        tape.keep(s, ("anchor", s), (copy_buffers(state), state.rng),
                  tape.nbytes + RNG_BYTES)

    def begin(self, tape: Tape, s: int, state: State) -> None:
        self.take_anchor(tape, s, state)

    def after(self, tape: Tape, s: int, k: int, state: State, ev: OpValues) -> None:
        if ev.draws is not None:
            tape.keep(s, ("draws", k), ev.draws.copy(), ev.draws.nbytes)

    def load_anchor(self, tape: Tape, s: int, state: State) -> None:
        buffers, rng = tape.data[("anchor", s)]
        load_buffers(state, buffers)
        state.rng = rng

    def recorded_draws(self, tape: Tape, s: int) -> dict[int, np.ndarray] | None:
        a, b = tape.bounds[s]
        data, plans = tape.data, tape.plans
        return {k: data[("draws", k)] for k in range(a, b)
                if plans[k].draws and ("draws", k) in data}

    def recover(self, tape: Tape, s: int, state: State) -> Recovery:
        with self.transaction(tape, state, copy_visible=True):
            self.load_anchor(tape, s, state)
            ops = self.replay(tape, s, state, self.recorded_draws(tape, s))
            snap = state.snapshot()
        return Recovery(ops, snap)


# ---------------------------------------------------------------- region


class JournalEntry(NamedTuple):
    """Old and new bytes of the regions one op overwrote, in one buffer. (A ``NamedTuple``
    like ``OpValues``: one is made per journalled op of every run.)"""

    buffer: str
    index: Any  # word indices of the journalled regions (region-major), an xp array
    old: Any  # their words before the op
    new: Any  # and after it
    regions: int
    width: int = 1  # bytes per word: the buffer is seen as ``as_words(buffer, width)``

    @property
    def nbytes(self) -> int:
        return int(self.old.nbytes + self.new.nbytes) + INDEX_BYTES * self.regions

    def words(self, buffers: Mapping[str, Any]) -> Any:
        """The entry's buffer among ``buffers`` as the words ``index`` points at."""
        return as_words(buffers[self.buffer], self.width)


class JournalOp(NamedTuple):
    """What journalling one op's write needs, derived once per program, granularity and
    array module (:meth:`Region.journal_plan`): the regions its destination view covers."""

    buffer: str
    index: Any  # word indices of those regions (region-major), an xp array
    regions: int
    nbytes: int  # the entry's charge when the op writes all of them (old, new, indices)
    granularity: int
    # bytes per word of ``index``: the itemsize when the regions are the elements (the
    # default granularity), in element order, one word each; else 1 (byte indices)
    width: int


class Region(Strategy):
    """Retains R_s and a journal with old and new values of every overwritten region
    (``granularity`` bytes, default one element of the written view). Recovery undoes
    the journal in reverse order back to B_s, replays the segment, then redoes the
    later writes to reinstate (B_T, R_T).

    The journal that recovering segment s walks covers the writes of s *and of every
    later segment* up to the next anchor (or the end): saving only s's own writes
    misses later writes that destroy bytes s needs.
    """

    name = "region"
    journals = True

    def __init__(self, granularity: int | None = None):
        if granularity is not None and (not isinstance(granularity, int) or granularity < 1):
            raise ValueError(f"granularity must be a positive number of bytes, got "
                             f"{granularity!r}")
        self.granularity = granularity

    def __repr__(self) -> str:
        return f"{type(self).__name__}(granularity={self.granularity})"

    def begin(self, tape: Tape, s: int, state: State) -> None:
        tape.keep(s, ("rng", s), state.rng, RNG_BYTES)

    def journal_plan(self, tape: Tape) -> tuple[JournalOp, ...]:
        """Per op, its :class:`JournalOp`: derived once per program, like its run plan."""
        key = ("journal_plan", self.granularity, tape.xp.__name__)
        return PER_PROGRAM.carried(tape.program, key, self._journal_plan, tape)

    def _journal_plan(self, program: Program, tape: Tape) -> tuple[JournalOp, ...]:
        sizes = {b.name: b.nbytes for b in program.buffers}
        made: dict[str, JournalOp] = {}  # per destination view (about two ops write each)
        out = []
        for op in tape.plans:
            dst = op.dst
            j = made.get(dst.view.name)
            if j is None:
                g = self.granularity or dst.dtype.itemsize
                if g == dst.dtype.itemsize:  # the regions are the elements (their starts
                    # are multiples of their size): each one itemsize-byte word (the
                    # view's slots when its buffer's granule is the itemsize)
                    idx = (dst.slots_in(tape.xp) if dst.granule == g
                           else dst.starts_in(tape.xp) // g)
                    regions, width = dst.size, g
                else:
                    idx, regions = dst.regions(g, sizes[dst.view.buffer], tape.xp)
                    width = 1
                j = made[dst.view.name] = JournalOp(
                    dst.view.buffer, idx, regions,
                    2 * int(idx.size) * width + INDEX_BYTES * regions, g, width)
            out.append(j)
        return tuple(out)

    def journal_open(self, tape: Tape, k: int, state: State) -> Any:
        plan = tape.journal_plans.get(self.granularity)  # looked up once a run
        if plan is None:
            plan = tape.journal_plans[self.granularity] = self.journal_plan(tape)
        j = plan[k]
        # the old words of every region it may write
        return j, as_words(state.buffers[j.buffer], j.width)[j.index]

    def journal_close(self, tape: Tape, s: int, k: int, state: State, ev: OpValues,
                      pending: Any) -> None:
        if pending is None:
            return
        j, old = pending
        buf = as_words(state.buffers[j.buffer], j.width)
        if ev.where is None:
            entry = JournalEntry(j.buffer, j.index, old, buf[j.index], j.regions, j.width)
            tape.keep(s, ("journal", k), entry, j.nbytes)
            return
        # a scatter: keep only the regions it actually wrote
        xp, g = tape.xp, j.granularity
        if j.width > 1:  # the regions are the elements, one word each: those at the
            # (ascending, distinct) written positions
            idx = j.index[ev.where]
            entry = JournalEntry(j.buffer, idx, old[ev.where], buf[idx], int(ev.where.size),
                                 j.width)
            tape.keep(s, ("journal", k), entry, entry.nbytes)
            return
        written = unique_ints(tape.plans[k].dst.bytes_of(ev.where, xp) // g)  # ids, sorted
        ids = j.index // g
        # a region is written iff its id is the first written id at or above it
        # (past the last written id, the search wraps to the first, which is smaller)
        keep = written[xp.searchsorted(written, ids) % written.size] == ids
        idx = j.index[keep]
        entry = JournalEntry(j.buffer, idx, old[keep], buf[idx], int(written.size))
        tape.keep(s, ("journal", k), entry, entry.nbytes)

    def entries(self, tape: Tape, first: int, stop: int) -> list[JournalEntry]:
        """Journal entries of the ops of segments ``first``..``stop``-1, in write order."""
        if first >= stop:
            return []
        a, b = tape.bounds[first][0], tape.bounds[stop - 1][1]
        get = tape.data.get
        out = []
        for k in range(a, b):
            entry = get(("journal", k))
            if entry is not None:
                out.append(entry)
        return out

    def undo_span(self, tape: Tape, s: int, t: int) -> tuple[int, int]:
        """Segments whose writes are undone to recover ``s`` from the state at ``t``."""
        return s, t

    def undo(self, tape: Tape, state: State, entries: Sequence[JournalEntry]) -> None:
        buffers = state.buffers
        for e in reversed(entries):
            e.words(buffers)[e.index] = e.old

    def redo(self, tape: Tape, state: State, entries: Sequence[JournalEntry]) -> None:
        buffers = state.buffers
        for e in entries:
            e.words(buffers)[e.index] = e.new

    def restore_rng(self, tape: Tape, s: int, state: State) -> None:
        state.rng = tape.data[("rng", s)]

    def recover(self, tape: Tape, s: int, state: State) -> Recovery:
        t = tape.chain_end(s)
        last = len(tape.bounds)
        with self.transaction(tape, state, copy_visible=t < last):
            if t < last:  # start from the next anchor instead of the visible state
                buffers, _ = tape.data[("anchor", t)]
                load_buffers(state, buffers)
            self.undo(tape, state, self.entries(tape, *self.undo_span(tape, s, t)))
            self.restore_rng(tape, s, state)
            ops = self.replay(tape, s, state)
            snap = state.snapshot()
            if t == last:
                self.redo(tape, state, self.entries(tape, s + 1, last))
        return Recovery(ops, snap)


# ---------------------------------------------------------------- guarded


class Guarded(Region):
    """Per segment, the region journal or a whole anchor, whichever payload is smaller.

    Both are taken during the segment's forward pass; at its end the larger is dropped
    (and counted as temporary). Recovery follows the representation kept.
    """

    name = "guarded"
    _whole = Whole()

    def begin(self, tape: Tape, s: int, state: State) -> None:
        super().begin(tape, s, state)
        self._whole.begin(tape, s, state)

    after = Whole.after  # the draws kept as a whole anchor keeps them (no call through)

    def end(self, tape: Tape, s: int, state: State) -> None:
        a, b = tape.bounds[s]
        sizes, plans = tape.sizes, tape.plans  # (sizes: key -> (segment, bytes) retained)
        journal, anchor = [("rng", s)], [("anchor", s)]  # each representation's keys
        j_bytes, a_bytes = sizes[journal[0]][1], sizes[anchor[0]][1]
        for k in range(a, b):
            key = ("journal", k)
            hit = sizes.get(key)
            if hit is not None:
                journal.append(key)
                j_bytes += hit[1]
            if plans[k].draws:  # (only draw ops keep draws)
                key = ("draws", k)
                hit = sizes.get(key)
                if hit is not None:
                    anchor.append(key)
                    a_bytes += hit[1]
        use_anchor = a_bytes < j_bytes
        dropped = 0
        for key in journal if use_anchor else anchor:
            dropped += tape.drop(key)
        tape.borrow(dropped)  # both were held until here
        tape.give_back(dropped)
        tape.anchored[s] = use_anchor
        tape.chosen[s] = "whole" if use_anchor else "region"

    def recover(self, tape: Tape, s: int, state: State) -> Recovery:
        if tape.anchored[s]:
            return self._whole.recover(tape, s, state)
        return super().recover(tape, s, state)


# ---------------------------------------------------------------- engines

POLICY_STRATEGIES: dict[str, Strategy] = {
    "eager": Eager(),
    "readset": ReadSet(),
    "whole": Whole(),
    "region": Region(),
}


@dataclass(frozen=True)
class StrategyEngine:
    """An engine that preserves every segment with one strategy."""

    name: str
    strategy: Strategy

    def run(self, program: Program, *, admission: Admission | None = None,
            xp: ModuleType | None = None, runner: OpRunner | None = None) -> EngineResult:
        """Run on ``xp`` arrays (None: NumPy) with ``runner`` (None: the plain one); see
        :func:`run_strategies`."""
        strategies = (self.strategy,) * len(program.segments)
        return run_strategies(self.name, program, strategies, admission, xp, runner)


def parse_policy(text: str | Sequence[str]) -> tuple[str, ...]:
    """A policy from "eager,region,..." (or a sequence of names); ValueError if unknown."""
    items = [p.strip() for p in text.split(",")] if isinstance(text, str) else list(text)
    bad = [p for p in items if p not in POLICY_STRATEGIES]
    if bad or not items:
        raise ValueError(f"policy entries must be among {', '.join(POLICY_STRATEGIES)}; "
                         f"got {', '.join(map(shown, bad[:3])) or 'nothing'}"
                         + (f" and {len(bad) - 3} more" if len(bad) > 3 else ""))
    return tuple(items)


@dataclass(frozen=True)
class PolicyEngine:
    """An engine that preserves segment s as ``policy[s]`` (eager / whole / region, or
    readset): any plan the planner emits runs through the same code and checks."""

    policy: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", parse_policy(self.policy))

    @property
    def name(self) -> str:
        return "policy:" + ",".join(self.policy)

    def check_segments(self, program: Program) -> None:
        if len(self.policy) != len(program.segments):
            raise ValueError(f"the policy has {len(self.policy)} entries but the program "
                             f"has {len(program.segments)} segments (one entry per segment)")

    def run(self, program: Program, *, admission: Admission | None = None,
            xp: ModuleType | None = None, runner: OpRunner | None = None) -> EngineResult:
        """Run on ``xp`` arrays (None: NumPy) with ``runner`` (None: the plain one); see
        :func:`run_strategies`."""
        self.check_segments(program)
        strategies = tuple(POLICY_STRATEGIES[p] for p in self.policy)
        return run_strategies(self.name, program, strategies, admission, xp, runner)


def run_policy(program: Program, policy: str | Sequence[str],
               admission: Admission | None = None,
               xp: ModuleType | None = None, runner: OpRunner | None = None) -> EngineResult:
    """Run ``program`` under a per-segment policy such as "eager,region,whole"."""
    return PolicyEngine(tuple(parse_policy(policy))).run(program, admission=admission, xp=xp,
                                                         runner=runner)
