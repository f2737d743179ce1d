"""The program's plain run from (B_0, R_0), made once per check for three references.

The forward Jacobian and the complex step take every op's values (what it read, drew
and wrote) from a plain run of the program from B_0 with the interpreter's forward
rules (:func:`execute_op`); the byte check replays that same run and compares its state
at every segment boundary. It is one deterministic computation of the program alone, so
``check`` makes it once (:func:`reference_run`) and hands it to the three; each still
runs it itself when called without it. The engines never see it: they are the systems
under test and run their own forward.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

from replayverify.programs.errstate import quiet
from replayverify.programs.interpreter import FORWARD, ForwardRule, OpValues, execute_op, op_steps
from replayverify.programs.model import OpKind, Program
from replayverify.programs.state import Snapshot, State, initial_state


def evaluations(program: Program, state: State | None = None, *,
                forward: Mapping[OpKind, ForwardRule] = FORWARD) -> Iterator[OpValues]:
    """Every op's values in order, run one by one on ``state`` (default: B_0) as the
    caller asks for them."""
    state = initial_state(program) if state is None else state
    for k in range(len(program.ops)):
        yield execute_op(program, k, state, forward=forward)


class ReferenceRun(NamedTuple):
    """The plain run of a program from (B_0, R_0) with the interpreter's forward rules."""

    start: Snapshot  # where it started: (B_0, R_0) unless another start was given
    ops: tuple[OpValues, ...]  # every op's values, in order
    ends: tuple[Snapshot, ...]  # the state after each segment, then after the last op
    # the state before the program's first drawing op (None: it draws nothing): the
    # wrong-rng control replays from there (the ops before it read no generator state)
    before_draw: Snapshot | None = None


def first_draw(program: Program) -> int | None:
    """The program's first op that draws random values (None: it draws nothing), from
    its op steps (derived once)."""
    for k, step in enumerate(op_steps(program)):
        if step.draws:
            return k
    return None


@quiet  # (overflow and invalid results are legal values, as in every entry point)
def reference_run(program: Program, start: Snapshot | None = None, *,
                  forward: Mapping[OpKind, ForwardRule] = FORWARD) -> ReferenceRun:
    """Run the program once from ``start`` (default: its initial state), keeping every
    op's values, the state at every segment end (a valid program's segments cover its
    ops, so the last end is the state after the last op, the same snapshot) and the state
    before the first drawing op of a segment."""
    state = initial_state(program) if start is None else start.state()
    start = state.snapshot() if start is None else start
    drawing = first_draw(program)
    n_ops = len(program.ops)
    ops: list[OpValues] = []
    ends = []
    before_draw = None
    # (a plain loop over the ops, a snapshot at each segment end)
    for lo, hi in program.segment_bounds():
        for k in range(lo, min(hi, n_ops)):
            if k == drawing:
                # (at the segment's start, the state kept there: the start or the last end)
                before_draw = (state.snapshot() if k > lo else ends[-1] if ends else start)
            ops.append(execute_op(program, k, state, forward=forward))
        ends.append(state.snapshot())
    n = len(ops)
    for k in range(n, n_ops):  # (ops past the last segment: none in a valid program)
        ops.append(execute_op(program, k, state, forward=forward))
    ends.append(ends[-1] if ends and len(ops) == n else state.snapshot())
    return ReferenceRun(start, tuple(ops), tuple(ends), before_draw)
