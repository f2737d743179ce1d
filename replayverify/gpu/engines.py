"""The region engine with journals moved by the kernels of :mod:`replayverify.gpu.journal`.

:class:`JournalRegion` is :class:`replayverify.engines.Region` with one change: per op it keeps
the old and the new bytes of the ``granularity``-byte regions (default 4,096) that its
destination view covers as two :class:`~replayverify.gpu.journal.Journal` objects, saved with
the gather kernel and written back (undo: old, redo: new) with the scatter kernel. The undo
span, generator restore and transaction are Region's, so it is checked like any engine.

Two differences from Region, both deliberate:

- a scatter journals every region its destination view covers, not only those it wrote (the
  written ones depend on the index values, which are on the device); putting back a region
  the scatter did not write rewrites the bytes it already holds, so replay stays exact, but
  ``retained_bytes`` can be larger than Region's;
- the kernels move 16-byte vectors, so a buffer whose size is not a multiple of 16 bytes is
  journalled by Region's own index-array entries instead.

On NumPy the journal module's reference implementation runs, so the engine is tested
without a GPU. It is not registered: build it with
``StrategyEngine("region-journal", JournalRegion())`` and run it with ``xp=cupy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from replayverify.engines.base import INDEX_BYTES, Tape
from replayverify.engines.preservation import JournalEntry, Region
from replayverify.gpu import journal as jr
from replayverify.programs.arrays import unique_ints
from replayverify.programs.interpreter import OpValues
from replayverify.programs.state import State


@dataclass(frozen=True)
class KernelEntry:
    """Old and new bytes of the regions one op may write, as two journals of one layout."""

    buffer: str
    old: jr.Journal
    new: jr.Journal

    @property
    def nbytes(self) -> int:
        return self.old.nbytes + self.new.nbytes + INDEX_BYTES * int(self.old.layout.regions.size)


class JournalRegion(Region):
    """Region preservation whose journals are saved and put back by the journal kernels."""

    name = "region-journal"

    def __init__(self, granularity: int = jr.GRANULARITY):
        super().__init__(jr.check_granularity(granularity))

    def journal_open(self, tape: Tape, k: int, state: State) -> Any:
        dst = tape.lay[tape.program.ops[k].dst]
        buf = state.buffers[dst.view.buffer]
        if buf.size % jr.VECTOR_BYTES:
            return super().journal_open(tape, k, state)
        g = self.granularity
        assert g is not None
        # The regions a view covers are program data: computed on the host.
        lay = jr.layout(buf.size, unique_ints(dst.byte_index // g), g)
        return jr.save(tape.xp, buf, lay)

    def journal_close(self, tape: Tape, s: int, k: int, state: State, ev: OpValues,
                      pending: Any) -> None:
        if not isinstance(pending, jr.Journal):
            super().journal_close(tape, s, k, state, ev, pending)
            return
        buffer = tape.lay[tape.program.ops[k].dst].view.buffer
        new = jr.save(tape.xp, state.buffers[buffer], pending.layout)
        entry = KernelEntry(buffer, pending, new)
        tape.keep(s, ("journal", k), entry, entry.nbytes)

    def _put(self, tape: Tape, state: State, entry: Any, which: str) -> None:
        buf = state.buffers[entry.buffer]
        if isinstance(entry, KernelEntry):
            jr.restore(tape.xp, buf, getattr(entry, which))
        else:
            buf[entry.index] = getattr(entry, which)

    def undo(self, tape: Tape, state: State, entries: Sequence[JournalEntry]) -> None:
        for e in reversed(entries):
            self._put(tape, state, e, "old")

    def redo(self, tape: Tape, state: State, entries: Sequence[JournalEntry]) -> None:
        for e in entries:
            self._put(tape, state, e, "new")
