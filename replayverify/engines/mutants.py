"""Deliberately wrong strategies: each models one real bug class of recomputation code.

Every mutant is a small variation of a real strategy (one method or one table) and is
registered, next to the real engines, in ``replayverify.engines.registry``. The
checkers must detect each of them on some program: a verifier that passes them all is
not checking anything. ``hazard`` names the replay hazard its bug needs
(``replayverify.programs.generate.HAZARDS``): the ``hazard`` family builds programs
around each, and benchmarks/mutant_detection.py measures each mutant on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from replayverify.engines.base import Recovery, Tape, operand_bytes
from replayverify.engines.preservation import (
    Eager,
    JournalEntry,
    ReadSet,
    Region,
    Whole,
    read_fields,
)
from replayverify.programs.arrays import unique_ints
from replayverify.programs.format import views_overlap
from replayverify.programs.interpreter import FORWARD, ForwardRule, OpValues, scatter_winners
from replayverify.programs.model import Op, OpKind, Program
from replayverify.programs.state import State, layouts

# ---------------------------------------------------------------- region


class RegionCurrentSegmentOnly(Region):
    """The published pitfall: the journal walked for segment s holds only s's own writes,
    so bytes s needs that a later segment overwrote are never restored."""

    hazard = "destroyed-history"

    def undo_span(self, tape: Tape, s: int, t: int) -> tuple[int, int]:
        return s, s + 1


class RegionUndoForwardOrder(Region):
    """Undo applied in write order: a byte written twice ends at its middle value."""

    hazard = "destroyed-history"

    def undo(self, tape: Tape, state: State, entries: Sequence[JournalEntry]) -> None:
        for e in entries:
            e.words(state.buffers)[e.index] = e.old


class RegionMissingRedo(Region):
    """No redo after replay: the visible state is left at B_{s+1} instead of B_T."""

    hazard = "destroyed-history"

    def redo(self, tape: Tape, state: State, entries: Sequence[JournalEntry]) -> None:
        pass


class RegionLiveRng(Region):
    """R_s not restored before replay: the segment redraws from the visible generator."""

    hazard = "draw-state"

    def restore_rng(self, tape: Tape, s: int, state: State) -> None:
        pass


class RegionFloatWritesOnly(Region):
    """Only differentiable (float) writes journalled: integer writes over aliased bytes
    are never undone."""

    hazard = "int-under-float"

    def journal_open(self, tape: Tape, k: int, state: State):
        if not tape.lay[tape.program.ops[k].dst].view.is_float:
            return None
        return super().journal_open(tape, k, state)


# ---------------------------------------------------------------- whole


class WholeRedrawNoise(Whole):
    """Replay draws fresh noise from the live generator: neither the recorded draws are
    reused nor R_s restored."""

    hazard = "draw-state"

    def load_anchor(self, tape: Tape, s: int, state: State) -> None:
        rng = state.rng
        super().load_anchor(tape, s, state)
        state.rng = rng

    def recorded_draws(self, tape: Tape, s: int) -> dict[int, np.ndarray] | None:
        return None


class WholeRngNotReinstated(Whole):
    """The transaction puts the visible bytes back but leaves R where replay left it."""

    hazard = "draw-state"

    def reinstate(self, state: State, saved, rng) -> None:
        super().reinstate(state, saved, state.rng)


class WholeMemcpyOverlap(Whole):
    """Replay copies element by element in ascending order (memcpy, not memmove): an
    overlapping copy reads elements it has already overwritten."""

    hazard = "memmove"

    def execute(self, program: Program, k: int, state: State,
                draws: np.ndarray | None) -> OpValues:
        op = program.ops[k]
        if op.kind is not OpKind.COPY:
            return super().execute(program, k, state, draws)
        lay = layouts(program)
        dst, src = lay[op.dst], lay[op.x]
        x = state.read(src)
        sbuf, dbuf = state.buffers[src.view.buffer], state.buffers[dst.view.buffer]
        xp = state.xp
        for i in range(dst.size):  # per element on purpose: this is the bug
            at = xp.asarray(np.array([i]))
            dbuf[dst.bytes_of(at, xp)] = sbuf[src.bytes_of(at, xp)]
        return OpValues(k, op, dst.dtype, dst.size, {"x": x.reshape(-1)},
                        values=state.read(dst).reshape(-1))


def _scatter_first_wins(op, o, d, t, n):
    where, src = scatter_winners(o["index"], n, last_wins=False)
    return o["x"][src], where


class WholeScatterFirstWins(Whole):
    """Replay's scatter lets the first duplicate index win instead of the last."""

    hazard = "scatter-duplicates"

    forward: ClassVar[Mapping[OpKind, ForwardRule]] = {**FORWARD,
                                                       OpKind.SCATTER: _scatter_first_wins}


class WholeAnchorAfterFirstOp(Whole):
    """The anchor is taken one op late: after the segment's first op ran."""

    hazard = "destroyed-history"

    def begin(self, tape: Tape, s: int, state: State) -> None:
        a, b = tape.bounds[s]
        if a == b:
            self.take_anchor(tape, s, state)

    def before(self, tape: Tape, s: int, k: int, state: State) -> None:
        pass

    def after(self, tape: Tape, s: int, k: int, state: State, ev: OpValues) -> None:
        super().after(tape, s, k, state, ev)
        if k == tape.bounds[s][0]:
            self.take_anchor(tape, s, state)


# ---------------------------------------------------------------- read-set and eager


class ReadSetCaptureAfterWrite(ReadSet):
    """The read set is captured after the op ran: an op whose destination overlaps its
    sources retains values it wrote, not values it read."""

    hazard = "memmove"

    def before(self, tape: Tape, s: int, k: int, state: State) -> None:
        pass

    def after(self, tape: Tape, s: int, k: int, state: State, ev: OpValues) -> None:
        self.capture(tape, s, k, state)


class ReadSetMissingSecondOperand(ReadSet):
    """The declared read set omits an op's second operand (``y``): backward reads it
    from live storage, which later writes may have changed."""

    hazard = "stale-operand"

    def retained_fields(self, op: Op) -> tuple[str, ...]:
        return tuple(f for f in super().retained_fields(op) if f != "y")


class EagerRetainedView(Eager):
    """A retained view of the live buffer instead of a copy: backward reads final storage."""

    hazard = "destroyed-history"

    def keep_buffer(self, buf: np.ndarray) -> np.ndarray:
        return buf


class EagerMaskFromLiveRng(Eager):
    """The dropout mask is recomputed from the live generator instead of the saved R."""

    hazard = "draw-state"

    def rng_for(self, tape: Tape, k: int, saved_rng, state: State):
        return state.rng


# ---------------------------------------------------------------- modelled on public reports
#
# Each of these is a recomputation bug reported against a real framework; the docstring
# names the report. They vary ``Whole`` (replay from an anchor), the strategy closest to
# ``torch.utils.checkpoint`` and to a compiler's recompute-in-backward.


def _segment_written(tape: Tape, s: int) -> dict[str, np.ndarray]:
    """Per buffer, the byte indices that the ops of segment ``s`` may write."""
    a, b = tape.bounds[s]
    parts: dict[str, list[np.ndarray]] = {}
    for k in range(a, b):
        dst = tape.lay[tape.program.ops[k].dst]
        parts.setdefault(dst.view.buffer, []).append(dst.index(tape.xp))
    return {name: unique_ints(tape.xp.concatenate(p)) for name, p in parts.items()}


class ReplayLeaksVisibleState(Whole):
    """Recomputation's writes stay visible: the replay transaction puts R back but not
    the bytes, so in-place state updates made during replay (BatchNorm running
    statistics, an auxiliary loss accumulator) are applied again and remain.

    Models pytorch/pytorch#96136 ("torch.utils.checkpoint should avoid updating
    BatchNorm statistics twice"; also #62471): checkpoint recomputation re-runs the
    forward's in-place updates of module state."""

    hazard = "destroyed-history"

    def reinstate(self, state: State, saved, rng) -> None:
        super().reinstate(state, None, rng)


class RecomputeDropsUnusedWrites(Whole):
    """Replay skips an in-place write that no later op of the segment reads (a dead
    store to the recomputation), although it is part of B_{s+1}; its operands are
    still read for backward, and a skipped draw does not advance R.

    Models pytorch/pytorch#155242 ("Partitioner loses inplace ops where source is
    constant") and #113737 (in-place ops in a selective-checkpointing region are not
    preserved in the AOTAutograd joint graph)."""

    hazard = "destroyed-history"

    def replay(self, tape: Tape, s: int, state: State,
               draws: Mapping[int, np.ndarray] | None = None) -> list:
        a, b = tape.bounds[s]
        out = []
        for k in range(a, b):
            recorded = None if draws is None else draws.get(k)
            if _read_later(tape, k, b):
                ev = self.execute(tape.program, k, state, recorded)
                rec = ev
                tape.replayed_ops += 1
            else:  # the bug: nothing in the recomputation reads it, so it is not redone
                op = tape.program.ops[k]
                operands = {f: state.read(tape.lay[getattr(op, f)]) for f in read_fields(op)}
                rec = tape.recovered(k, operands, recorded)
            tape.borrow(operand_bytes(rec))
            out.append(rec)
        return out


def _read_later(tape: Tape, k: int, stop: int) -> bool:
    """Whether an op after ``k`` and before ``stop`` reads a byte that op ``k`` writes."""
    program = tape.program
    dst = tape.lay[program.ops[k].dst]
    for j in range(k + 1, stop):
        op = program.ops[j]
        for f in read_fields(op):
            src = tape.lay[getattr(op, f)]
            if src.view.buffer == dst.view.buffer and views_overlap(src.view, dst.view):
                return True
    return False


class RecomputeReadsLiveBuffer(Whole):
    """Replay restores only the bytes the segment itself writes; what it only reads is
    taken from the live buffer, so an operand that a later segment overwrote in place
    is recomputed from its current bytes instead of its historical version.

    Models pytorch/pytorch#197039, the compile-partitioner class ("Don't recompute
    reads of mutated inputs or mutable buffers": recomputing in backward defers the
    read past a later mutation), and pytorch/functorch#565 (the partitioner recomputed
    across an in-place op, giving wrong gradients)."""

    hazard = "stale-operand"

    def load_anchor(self, tape: Tape, s: int, state: State) -> None:
        buffers, rng = tape.data[("anchor", s)]
        for name, idx in _segment_written(tape, s).items():
            state.buffers[name][idx] = buffers[name][idx]
        state.rng = rng


class EarlyStopStaleDraw(Whole):
    """Replay stops early, before the segment's first draw (as if everything backward
    needs had been recomputed): that op and the ones after it get the operands the
    stopped replay left in storage and an uninitialised (zero) random buffer instead of
    the mask or noise they used. The replay claims no end state.

    Models pytorch/pytorch#193671 ("Silent wrong gradients: nn.RReLU under
    non-reentrant checkpointing saves uninitialized noise", non-reentrant checkpoint's
    early stop)."""

    hazard = "draw-state"

    def recover(self, tape: Tape, s: int, state: State) -> Recovery:
        a, b = tape.bounds[s]
        program = tape.program
        stop = next((k for k in range(a, b) if program.ops[k].spec.draws), b)
        with self.transaction(tape, state, copy_visible=True):
            self.load_anchor(tape, s, state)
            ops = []
            for k in range(a, b):
                if k < stop:
                    ev = self.execute(program, k, state, tape.data.get(("draws", k)))
                    rec = ev
                    tape.replayed_ops += 1
                else:
                    op = program.ops[k]
                    operands = {f: state.read(tape.lay[getattr(op, f)])
                                for f in read_fields(op)}
                    kept = tape.data.get(("draws", k))
                    rec = tape.recovered(k, operands, None if kept is None else
                                    tape.xp.zeros(kept.shape, dtype=kept.dtype))
                tape.borrow(operand_bytes(rec))
                ops.append(rec)
            snap = None if stop < b else state.snapshot()
        return Recovery(ops, snap)
