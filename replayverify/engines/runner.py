"""What the engines' run loop asks of the world outside the strategies: the op-runner
protocol (:class:`OpRunner`) and its plain default (:class:`PlainRunner`).

An engine run (``engines.base.run_strategies``) does three things that no strategy
chooses: it starts from B_0, R_0; it runs ops (the forward pass, and the replays of
strategies that keep :meth:`Strategy.execute <replayverify.engines.base.Strategy.execute>`);
and it sweeps each segment backward through the reverse rules, fed with the recovered
operand values. The run loop asks its runner for each of them, and only its runner.
:class:`PlainRunner`, what every run uses unless given another, does each the reference
way: ``initial_state``, ``execute_op``, :func:`back_segment`.

A runner may do them faster without changing any result: the verifier's check-scoped
memo (``replayverify.verifier.memo.Memo``) gives the five engines and the mutants of one
check the op runs, the backward and the state that an earlier run of the check made from
the same bytes, R, draws and rules. Whatever a runner does, a run's result must be bit for
bit the one it gets with :class:`PlainRunner` (tests/unit/test_engines.py).

The backward here relies on the contract stated with ``FORWARD`` and ``REVERSE`` in
``programs.interpreter``: :func:`back_segment` hands a reverse rule the op's record
without ``values`` (what it wrote), so a rule reads only what its record's operands and
draws give.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

import numpy as np

from replayverify.engines.plan import OpPlan, RunPlan, loss_adjoints
from replayverify.programs.arrays import scatter_add
from replayverify.programs.interpreter import (
    REVERSE,
    ForwardRule,
    OpValues,
    execute_op,
    written_positions,
)
from replayverify.programs.model import OpKind, Program
from replayverify.programs.state import State, initial_state


@runtime_checkable
class OpRunner(Protocol):
    """How an engine run starts, runs its ops and sweeps its segments backward."""

    def start(self, program: Program, xp: ModuleType) -> State:
        """B_0, R_0 of ``program`` as an ``xp`` state the run may write."""
        ...

    def run_op(self, program: Program, k: int, plan: OpPlan, state: State,
               draws: np.ndarray | None, forward: Mapping[OpKind, ForwardRule]) -> OpValues:
        """``execute_op(program, k, state, draws=draws, forward=forward)``: op ``k``
        (``plan``: its :class:`OpPlan`) run on ``state``, its record returned."""
        ...

    def sweep(self, program: Program, plan: RunPlan, xp: ModuleType) -> Sweep:
        """One run's backward, from the loss (``Sweep.segment`` per segment, last first)."""
        ...

    def finish(self, program: Program, state: State) -> None:
        """The run is over: its state (``start``'s) is handed back."""
        ...


class Sweep:
    """One run's backward: the adjoint, one float64 slot per granule of each buffer (the
    adjoint of the float element starting there; ``state.granules``), from the loss
    weights; the run loop calls :meth:`segment` with each segment's recovered records,
    last segment first, then reads the gradient from :attr:`adj`."""

    __slots__ = ("adj", "bounds", "plans", "xp")

    def __init__(self, program: Program, plan: RunPlan, xp: ModuleType,
                 adj: dict[str, Any] | None = None) -> None:
        self.plans, self.bounds, self.xp = plan.ops, plan.bounds, xp
        self.adj = start_adjoints(program, plan, xp) if adj is None else adj

    def segment(self, s: int, ops: Sequence[OpValues]) -> None:
        """Differentiate segment ``s``: ``ops`` its recovered records, in order."""
        back_segment(self.plans, self.xp, self.adj, self.bounds[s][0], ops)


def start_adjoints(program: Program, plan: RunPlan, xp: ModuleType) -> dict[str, Any]:
    """Backward's starting adjoints, one float64 slot per granule of each buffer: copies of
    the plan's template where it keeps one, else built (``plan.loss_adjoints``)."""
    if xp is np and plan.adjoint is not None:
        return {name: a.copy() for name, a in plan.adjoint.items()}
    return loss_adjoints(program, plan.loss_weights, xp)


def back_segment(plans: Sequence[OpPlan], xp: ModuleType, adj: dict[str, Any], first: int,
                 ops: Sequence[OpValues]) -> None:
    """vbar_p(k) += vbar_k * f_k'(v_p(k)) on storage slots, for ops ``first + j`` in
    reverse order, ``ops[j]`` being the recovered record of op ``first + j``.

    What op ``k`` wrote follows from the *recovered* operands (a wrong recovered index
    misplaces the adjoints, as it would in a real engine). The reverse rule gets the
    record without ``values``: it reads operands and draws only (the contract of
    ``REVERSE``), and one that reads what the op wrote fails here, loudly."""
    on_numpy = xp is np  # the layouts' own slot arrays, read directly
    for j in reversed(range(len(ops))):
        k, rec = first + j, ops[j]
        plan = plans[k]
        op, dst = plan.op, plan.dst
        a = adj[dst.view.buffer]
        where = written_positions(op, rec.operands, dst.size) if plan.partial else None
        # only float writes carry derivatives: an integer op's written slots are just cleared
        rule = REVERSE[op.kind] if plan.float_write else None
        if rule is not None:
            slots = dst.slots if on_numpy else dst.slots_in(xp)
            g = a[slots if where is None else slots[where]]
        a[dst.cover if on_numpy and where is None else dst.cover_of(where, xp)] = 0.0
        if rule is None or g.size == 0:
            continue
        if rec.values is not None or rec.where is not where or rec.op is not op:
            # the rule sees op k of this program, what it wrote as derived here, and not
            # the values it wrote (a replay's record has them)
            rec = OpValues(k, op, dst.dtype, dst.size, rec.operands, rec.draws, where)
        sources = plan.sources
        for f, c in rule(rec, g).items():
            src = sources[f]
            if on_numpy:  # a view's elements never overlap: its slots are distinct
                adj[src.view.buffer][src.slots] += c
            else:
                scatter_add(xp, adj[src.view.buffer], src.slots_in(xp), c)
            del c  # (this op's arrays are not held while the next op's rule runs)
        del g


class PlainRunner:
    """The reference runner: a fresh ``initial_state``, ``execute_op`` per op, a
    :class:`Sweep` of its own per run; nothing kept between runs."""

    def start(self, program: Program, xp: ModuleType) -> State:
        return initial_state(program, xp)

    def run_op(self, program: Program, k: int, plan: OpPlan, state: State,
               draws: np.ndarray | None, forward: Mapping[OpKind, ForwardRule]) -> OpValues:
        return execute_op(program, k, state, draws=draws, forward=forward)

    def sweep(self, program: Program, plan: RunPlan, xp: ModuleType) -> Sweep:
        return Sweep(program, plan, xp)

    def finish(self, program: Program, state: State) -> None:
        pass


PLAIN = PlainRunner()  # what an engine run uses when given no runner
