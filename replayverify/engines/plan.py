"""A program's static facts for the engines, derived once per program: per op its
:class:`OpPlan`, and the :class:`RunPlan` (segment bounds, sizes, where backward starts
and ends). Held by the engines layer (:data:`PER_PROGRAM`, with the strategies' own
per-program plans), never on the user's ``Program``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from replayverify.programs.arrays import scatter_add
from replayverify.programs.interpreter import loss_weights, op_steps
from replayverify.programs.model import Op, PerProgram, Program
from replayverify.programs.state import ViewLayout, granules, layouts, slot_count

# the engines layer's per-program data: the run plan, the read sets' and journals' plans
PER_PROGRAM = PerProgram()


class OpPlan(NamedTuple):
    """What the run loop and the strategies' hooks need of one op, looked up once per
    program (:func:`run_plan`) instead of on every call: an engine run otherwise spends
    most of its time re-deriving these from the op, its spec and the layouts. Only what
    several engines read is here: in a check every engine runs a new program once, so a
    field one strategy alone reads costs the same derived here or in its hook. (A
    ``NamedTuple``: one is made per op of every program checked.)"""

    op: Op
    dst: ViewLayout
    reads: tuple[tuple[str, ViewLayout], ...]  # (field, layout) of every view it reads
    sources: dict[str, ViewLayout]  # the same, by field (where adjoints flow back to)
    partial: bool  # it writes only the dst positions its index hits (scatter)
    float_write: bool  # it writes a float view: only such ops carry derivatives
    draws: bool  # it consumes random values


@dataclass(frozen=True, slots=True)
class RunPlan:
    """A program's static facts for the engines: segment bounds, total bytes, per-op plans,
    and where backward starts and ends (every engine that runs the program uses them)."""

    bounds: tuple[tuple[int, int], ...]
    nbytes: int
    ops: tuple[OpPlan, ...]
    loss_weights: np.ndarray  # float64, read-only
    # NumPy, programs of at most KEPT_ADJOINT_BYTES: per buffer, the adjoint slots (one
    # per granule, ``state.granules``) as backward starts them (the loss weights at the
    # loss view's element slots, zeros elsewhere); read-only, each run takes copies. None
    # for a larger program: each run builds its own (``runner.start_adjoints``)
    adjoint: dict[str, np.ndarray] | None
    # the gradient's slots, in input order: per run of consecutive inputs in one buffer,
    # (buffer, their element slots concatenated), so each run is one gather
    gradient_at: tuple[tuple[str, np.ndarray], ...]


def run_plan(program: Program) -> RunPlan:
    """The engines' plan of ``program``: derived once per program object and held by the
    engines layer (:data:`PER_PROGRAM`), shared by every engine that runs it."""
    return PER_PROGRAM.carried(program, "run_plan", _make_plan)


# A program of at most this many bytes keeps its starting adjoints as a template (a
# copy is cheaper than building them); a larger one's runs each build theirs, whose zeroed
# pages cost nothing until written, instead of holding a second whole array beside them.
KEPT_ADJOINT_BYTES = 1 << 20


def loss_adjoints(program: Program, weights: np.ndarray, xp: ModuleType) -> dict[str, Any]:
    """Backward's starting adjoints, one float64 slot per granule of each buffer: the loss
    weights at the loss view's element slots, zeros elsewhere (``xp`` arrays)."""
    granule = granules(program)
    adj = {b.name: xp.zeros(slot_count(b.nbytes, granule[b.name]), dtype=xp.float64)
           for b in program.buffers}
    loss = layouts(program)[program.loss.view]
    if loss.view.is_float:
        if xp is np:  # the loss view's elements are distinct slots
            adj[loss.view.buffer][loss.slots] += weights
        else:
            scatter_add(xp, adj[loss.view.buffer], loss.slots_in(xp), xp.asarray(weights))
    return adj


def _make_plan(program: Program) -> RunPlan:
    # from the interpreter's per-op layouts, derived once too
    ops = tuple([OpPlan(step.op, step.dst, step.reads, dict(step.reads), step.op.spec.partial,
                        step.dst.view.is_float, step.draws) for step in op_steps(program)])
    weights = loss_weights(program)  # (read-only, carried by the program)
    lay = layouts(program)
    adjoint = None
    if program.nbytes <= KEPT_ADJOINT_BYTES:
        adjoint = loss_adjoints(program, weights, np)
        for a in adjoint.values():
            a.setflags(write=False)
    runs: list[tuple[str, list[np.ndarray]]] = []
    for name in program.inputs:
        at = lay[name]
        if runs and runs[-1][0] == at.view.buffer:
            runs[-1][1].append(at.slots)
        else:
            runs.append((at.view.buffer, [at.slots]))
    gradient_at = tuple((b, slots[0] if len(slots) == 1 else np.concatenate(slots))
                        for b, slots in runs)
    return RunPlan(program.segment_bounds(), program.nbytes, ops, weights, adjoint, gradient_at)


