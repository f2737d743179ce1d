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

from replayverify.programs.interpreter import FORWARD, ForwardRule, OpValues, execute_op
from replayverify.programs.model import OpKind, Program
from replayverify.programs.state import Snapshot, initial_state


def evaluations(program: Program, *,
                forward: Mapping[OpKind, ForwardRule] = FORWARD) -> Iterator[OpValues]:
    """Every op's values in order, run one by one from B_0 as the caller asks for them."""
    state = initial_state(program)
    for k in range(len(program.ops)):
        yield execute_op(program, k, state, forward=forward)


class ReferenceRun(NamedTuple):
    """The plain run of a program from (B_0, R_0) with the interpreter's forward rules."""

    start: Snapshot  # (B_0, R_0): the program's initial state
    ops: tuple[OpValues, ...]  # every op's values, in order
    ends: tuple[Snapshot, ...]  # the state after each segment, then after the last op


def reference_run(program: Program) -> ReferenceRun:
    """Run the program once from its initial state, keeping every op's values and the
    state at every segment end (a valid program's last segment ends at its last op)."""
    state = initial_state(program)
    start = state.snapshot()
    ops, ends = [], []
    for _, hi in program.segment_bounds():
        while len(ops) < hi:
            ops.append(execute_op(program, len(ops), state))
        ends.append(state.snapshot())
    while len(ops) < len(program.ops):
        ops.append(execute_op(program, len(ops), state))
    ends.append(state.snapshot())
    return ReferenceRun(start, tuple(ops), tuple(ends))
