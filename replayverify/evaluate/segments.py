"""Per-segment preservation, executed for real on an array module: eager, whole, region.

One implementation serves the calibration (``evaluate/calibrate.py``: its eager, whole and region
methods are the uniform policies) and the evaluation of planned policies
(``replayverify.evaluate``: any per-segment policy a planner emits).

A workload is a :class:`SegmentedStep`: one training step cut into ``segments`` segments over
a flat state buffer (``state``). Segment k reads the state, computes, and writes some regions
of the state (``layout(k)``, the regions its write touches); its backward needs what
``forward`` returned as ``saved``. Per segment the policy chooses how backward gets it:

- ``eager``: keep ``saved`` from the forward pass (``keep=True``: the workload returns the
  form it keeps, e.g. a full pre-state copy or an activation);
- ``whole``: keep an anchor (a snapshot of the state, plus the segment's input ``carry``) and
  recompute in backward: inside a transaction (the visible state is copied aside, the anchor
  loaded, the segment replayed, the visible state put back). With ``share_anchors`` a run of
  consecutive whole segments keeps one anchor, at its start, and backward replays the run
  once, in order; a run that ends at the last segment while no journal is undone needs no
  transaction (replaying it reproduces the visible state);
- ``region``: keep the input ``carry`` and a journal of the regions the segment writes
  (:mod:`replayverify.gpu.journal`: the NumPy reference or the CUDA kernels); backward undoes
  journals in reverse order back to the segment's pre-state, replays the segment without
  writing, and at the end of backward redoes every undone journal in order (a one-way
  restore of the new bytes the undo left in the journal: the journals are dropped then).
  A later segment whose writes overlap an earlier region segment's regions is journalled
  too, whatever its own option (the journal must cover every later write that destroys
  bytes the earlier segment needs; SPEC §4).

Afterwards the state holds exactly what the forward pass left. :class:`Tally` records, per
segment, the bytes retained and the phases' marks for the instrumented steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from replayverify.gpu import journal as jr

OPTIONS = ("eager", "whole", "region")
Phase = Callable[[str], None]


def no_phase(_: str) -> None:
    """A phase callback that records nothing."""


class SegmentedStep(Protocol):
    """One step of a workload, cut into segments over one flat state buffer."""

    xp: ModuleType
    state: Any
    segments: int

    def layout(self, k: int) -> jr.JournalLayout:
        """The regions of ``state`` that segment k writes."""
        ...

    def begin(self) -> Any:
        """The carry into segment 0 (the step's input)."""
        ...

    def forward(self, k: int, carry: Any, *, keep: bool, write: bool) -> tuple[Any, Any]:
        """Run segment k from ``carry``: (what its backward needs, carry into k + 1).

        Reads ``state`` as it stands (it must hold the segment's pre-state); writes the
        segment's regions when ``write``. ``keep``: the result is kept until backward (eager),
        so return the form worth keeping.
        """
        ...

    def seed(self, carry: Any) -> Any:
        """The gradient flowing into the last segment's backward, from the final carry."""
        ...

    def backward(self, k: int, saved: Any, grad: Any) -> Any:
        """Segment k's backward: from the gradient of its output, that of its input."""
        ...


def nbytes_of(value: Any) -> int:
    """Device bytes held by a kept value (arrays inside tuples and lists are summed)."""
    if value is None:
        return 0
    if isinstance(value, (tuple, list)):
        return sum(nbytes_of(v) for v in value)
    return int(getattr(value, "nbytes", 0))


@dataclass(slots=True)
class Tally:
    """Per segment: bytes retained from forward to backward (all, and the part that
    preserves state), journal bytes (held until the final redo), and whether its recovery
    copied the visible state aside (a whole transaction)."""

    retained: list[int] = field(default_factory=list)
    state_retained: list[int] = field(default_factory=list)
    journal: list[int] = field(default_factory=list)
    transaction: list[bool] = field(default_factory=list)


def journalled(step: SegmentedStep, policy: Sequence[str]) -> list[bool]:
    """Which segments' writes are journalled: region segments, and later segments whose
    writes overlap the regions of an earlier region segment."""
    out = [option == "region" for option in policy]
    if not any(out) or all(out):  # nothing to look up: no region, or every segment journals
        return out
    seen = None
    for k, option in enumerate(policy):
        lay = step.layout(k)
        if seen is None:
            seen = np.zeros(lay.n_regions, dtype=bool)
        if option == "region":
            seen[lay.regions] = True
        elif k > out.index(True):
            out[k] = bool(seen[lay.regions].any())
    return out


def run_segmented(
    step: SegmentedStep,
    policy: Sequence[str],
    *,
    copy: Callable[[Any, Any], None],
    phase: Phase = no_phase,
    share_anchors: bool = False,
    tally: Tally | None = None,
) -> Any:
    """One step of ``step`` under ``policy`` (one option per segment); returns what the
    first segment's backward returned (the gradient of the step's input).

    ``copy(dst, src)`` copies one device array into another of the same shape (a device
    memcpy on CuPy). ``phase(name)`` marks the start of a ``preserve``, ``recover`` or
    ``compute`` phase, and of each segment's forward (``forward:k``) and backward
    (``backward:k``) work, the final redo (``redo``) and the step's end (``end``).
    """
    xp, state, n = step.xp, step.state, step.segments
    if len(policy) != n:
        raise ValueError(f"the policy has {len(policy)} entries for {n} segments")
    bad = sorted(set(policy) - set(OPTIONS))
    if bad:
        raise ValueError(f"unknown options {bad}; options are {', '.join(OPTIONS)}")
    journal_of = journalled(step, policy)
    # the journal operations on the state, its byte view checked once per step
    ops = jr.OnBuffer(xp, state) if any(journal_of) else None
    anchor_at = [
        p == "whole" and not (share_anchors and k > 0 and policy[k - 1] == "whole")
        for k, p in enumerate(policy)
    ]
    kept: list[Any] = [None] * n  # eager: saved; whole/region: the input carry
    anchors: dict[int, Any] = {}
    journals: dict[int, jr.Journal] = {}
    carry = step.begin()
    if tally is not None:
        tally.transaction.extend([False] * n)
    for k in range(n):
        phase(f"forward:{k}")
        option = policy[k]
        if anchor_at[k]:
            phase("preserve")
            anchors[k] = state.copy()
        if journal_of[k]:
            phase("preserve")
            journals[k] = ops.save(step.layout(k))
        phase("compute")
        saved, nxt = step.forward(k, carry, keep=option == "eager", write=True)
        kept[k] = saved if option == "eager" else carry
        if tally is not None:
            state_bytes = nbytes_of(anchors.get(k)) + nbytes_of(journals.get(k))
            own = nbytes_of(saved) if option == "eager" else nbytes_of(carry)
            tally.retained.append(own + state_bytes)
            tally.state_retained.append(state_bytes)
            tally.journal.append(nbytes_of(journals.get(k)))
        del saved
        carry = nxt
    grad = step.seed(carry)
    del carry
    undone = n  # journals of segments >= undone are undone
    replayed: dict[int, Any] = {}
    k = n - 1
    while k >= 0:
        phase(f"backward:{k}")
        option = policy[k]
        if option == "eager":
            saved = kept[k]
        elif option == "whole" and k in replayed:
            saved = replayed.pop(k)
        elif option == "whole":
            start = k
            while not anchor_at[start]:
                start -= 1
            tail = k == n - 1 and undone == n
            phase("recover")
            visible = None if tail else state.copy()
            if tally is not None:
                tally.transaction[k] = not tail
            copy(state, anchors[start])
            phase("compute")
            inner = kept[start]
            for j in range(start, k + 1):
                replayed[j], inner = step.forward(j, inner, keep=False, write=j < k or tail)
            del inner
            if visible is not None:
                phase("recover")
                copy(state, visible)
                del visible
            phase("compute")
            saved = replayed.pop(k)
        else:
            phase("recover")
            for j in range(undone - 1, k - 1, -1):
                if j in journals:
                    ops.undo(journals[j])
            undone = min(undone, k)
            phase("compute")
            saved, _ = step.forward(k, kept[k], keep=False, write=False)
        kept[k] = None
        anchors.pop(k, None)
        grad = step.backward(k, saved, grad)
        del saved
        k -= 1
    if undone < n:
        phase("redo")
        phase("recover")
        for j in range(undone, n):  # the journals are dropped next: a one-way restore
            if j in journals:  # of the new bytes that undo left in them is the redo
                ops.restore(journals[j])
    phase("end")
    return grad
