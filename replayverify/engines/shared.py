"""What the engine runs of one program share: each is computed once and taken by the
runs after it where, byte for byte, it is what they would compute.

A check runs five engines (and, with ``--mutants``, the mutants) on one program. They run
the same forward pass, replay its segments from its states and, where they recover the
same values, differentiate the same numbers. Three things are kept by the program
(``Program.derived``) for the runs after the first:

- ``run_op``: an op run in an engine's forward pass or replay is a function of the state's
  bytes and R, the op's forward rule and the draws it is given; where all are those of an
  earlier run, the op writes that run's values and the caller takes its record;
- ``Swept``: backward is a function of the recovered values (given the program and the
  reverse rules); a run follows the first run's sweep, segment by segment from the last,
  for as long as it recovered the same values, byte for byte;
- ``start_state``: the runs reuse one state, with B_0 written over its buffers, so each
  view's strided array is made once a program.

A run that does anything else (a wrong recovery, a mutant: other bytes, R, draws or
rules) computes its own, so every run's result is bit for bit the one it gets alone
(tests/unit/test_engines.py). NumPy only; ``run_op`` and ``Swept`` only for programs of
at most ``KEPT_RUN_BYTES``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from replayverify.programs.interpreter import REVERSE, ForwardRule, OpValues, execute_op
from replayverify.programs.model import OpKind, Program
from replayverify.programs.state import State, initial_state

if TYPE_CHECKING:
    from replayverify.engines.base import OpPlan, RunPlan, Tape

# The ops run and the first backward of a program are kept for programs of at most this
# many bytes: the keys hold the state's bytes, the swept adjoints 8 bytes per byte a segment.
KEPT_RUN_BYTES = 1 << 16
# their keys in ``Program.derived``
OPS_DONE = "engine_ops"  # the op runs ``run_op`` made, by op, bytes and R
SWEPT = "swept_backward"  # the first run's ``Swept``
ENGINE_STATE = "engine_state"  # the state ``set_aside`` kept


def ops_done(tape: Tape, state: State) -> dict | None:
    """The program's ops run so far by its engine runs (``run_op``), for a NumPy state of
    a program of at most ``KEPT_RUN_BYTES``; else None."""
    if state.xp is not np or tape.nbytes > KEPT_RUN_BYTES:
        return None
    return tape.program.carried(OPS_DONE, _none_done)


def _none_done(program: Program) -> dict:
    return {}


def run_op(program: Program, k: int, plan: OpPlan, state: State, draws: np.ndarray | None,
           forward: Mapping[OpKind, ForwardRule], done: dict | None) -> OpValues:
    """``execute_op(program, k, state, draws=draws, forward=forward)``, or, with ``done``
    (``ops_done``; None: none kept), what it gave in an earlier run of the program.

    An op run is a function of the state's bytes and R, its forward rule and the draws it
    is given: where all are those of a run kept in ``done`` (by op and bytes and R), the
    op writes the values that run wrote, R becomes what it became, and the caller takes
    that run's record (arrays read-only: whoever takes it only reads it). The five
    engines of a check run the same forward pass and replay its segments from its
    states: most of their ops are computed once. A run from other bytes or R, under
    another rule or given other draws (a wrong recovery, a mutant) runs the op itself.
    """
    if done is None:
        return execute_op(program, k, state, draws=draws, forward=forward)
    rule = forward[plan.op.kind]
    key = (k, tuple([buf.tobytes() for buf in state.buffers.values()]), state.rng)
    hit = done.get(key)
    if hit is not None:
        rec, rng, hit_rule, drew = hit
        # (without given draws the op draws from R: the same only where that run drew too)
        if hit_rule is rule and (drew if draws is None else same_draws(draws, rec.draws)):
            dst = state.typed(plan.dst)
            if rec.where is None and dst.ndim == 1:  # the whole 1-D view: no checks needed
                dst[...] = rec.values
            else:
                state.write(plan.dst, rec.values, rec.where)
            state.rng = rng
            return rec
    rec = execute_op(program, k, state, draws=draws, forward=forward)
    if hit is None:
        for a in (*rec.operands.values(), rec.draws, rec.where, rec.values):
            if type(a) is np.ndarray:
                a.setflags(write=False)
        done[key] = (rec, state.rng, rule, draws is None)
    return rec


def same_draws(given: Any, drawn: Any) -> bool:
    """Whether draws given to an op are those recorded (as the op takes them: flat)."""
    return (type(given) is np.ndarray and type(drawn) is np.ndarray
            and given.dtype == drawn.dtype and given.size == drawn.size
            and given.tobytes() == drawn.tobytes())


def swept(program: Program, plan: RunPlan, xp: ModuleType) -> Swept | None:
    """The program's first swept backward, when this NumPy run can follow it (the reverse
    rules still the ones it was swept with)."""
    if xp is not np or plan.nbytes > KEPT_RUN_BYTES:
        return None
    kept = program.derived.get(SWEPT)
    if kept is None or kept.rules != reverse_rules(program):
        return None
    return kept


def reverse_rules(program: Program) -> tuple:
    """The reverse rule of each op of the program, as ``REVERSE`` has them now."""
    return tuple([REVERSE[op.kind] for op in program.ops])


class Swept:
    """A NumPy backward of the program as the first engine run swept it: per segment, what
    backward read of the recovered records it differentiated (``values_key``) and the
    adjoints after them (read-only copies).

    Backward is a function of the recovered values alone (with the program and the reverse
    rules): ``base._back_segment`` derives what an op wrote from its recovered operands and
    takes the op, its dtype and size from the plan. So a later run whose recovered records
    of segments S-1..s hold the same values, byte for byte, ends segment s with the same
    adjoints, and the engines of one check mostly recover the same values (they are meant
    to). A run that recovers anything else (a mutant, a wrong replay) parts from it there
    and sweeps its own: what it recovered is differentiated and judged as before.
    """

    __slots__ = ("after", "keys", "rules", "start")

    def __init__(self, start: dict[str, np.ndarray], n_seg: int, rules: tuple) -> None:
        self.start = start  # the plan's read-only starting adjoints
        self.keys: list[list[tuple] | None] = [None] * n_seg
        self.after: list[dict[str, np.ndarray] | None] = [None] * n_seg
        self.rules = rules

    @classmethod
    def first(cls, program: Program, plan: RunPlan, xp: ModuleType) -> Swept | None:
        """A sweep to keep (``keep``, then ``kept_by``) for the program's later runs:
        NumPy runs of programs of at most ``KEPT_RUN_BYTES``; else None."""
        if xp is not np or plan.nbytes > KEPT_RUN_BYTES:
            return None
        return cls(plan.adjoint, len(plan.bounds), reverse_rules(program))

    def kept_by(self, program: Program) -> None:
        """The sweep, whole, kept for the program's later runs (``swept``)."""
        program.derived[SWEPT] = self

    def keep(self, s: int, ops: Sequence[OpValues], adj: dict[str, np.ndarray]) -> None:
        keys = [values_key(rec) for rec in ops]
        if None in keys:
            return  # (values that are not NumPy arrays: no later run follows this segment)
        after = {}
        for b, a in adj.items():
            a = a.copy()
            a.setflags(write=False)
            after[b] = a
        self.keys[s], self.after[s] = keys, after

    def same(self, s: int, ops: Sequence[OpValues]) -> bool:
        """Whether ``ops`` hold the values segment ``s`` was swept with, byte for byte."""
        keys = self.keys[s]
        if keys is None or len(keys) != len(ops):
            return False
        for key, rec in zip(keys, ops):
            if key != values_key(rec):
                return False
        return True


def values_key(rec: OpValues) -> tuple | None:
    """What backward reads of a recovered record: its op (index, op, dtype, size) and the
    dtype, shape and bytes of its draws and of each operand (by field); None where one
    of them is not a NumPy array."""
    key = [rec.index, rec.op, rec.dtype, rec.dst_size, tuple(rec.operands)]
    for a in (rec.draws, *rec.operands.values()):
        if a is None:
            key.append(None)
        elif type(a) is np.ndarray:
            key.append((a.dtype, a.shape, a.tobytes()))
        else:
            return None
    return tuple(key)


def start_state(program: Program, xp: ModuleType) -> State:
    """B_0, R_0 for a run: the state the program's previous run set aside
    (:func:`set_aside`) with B_0 written over its buffers in place and R_0, else a new one.
    A check runs every engine on one program: reusing the buffers keeps the strided views
    that reads and writes go through (``State.typed``, one per view, made on first use and
    valid while its buffer is that object), so they are made once a program, not once a run.
    NumPy states of programs whose B_0 is carried (``initial_state``) only."""
    initial = program.derived.get("initial")
    if xp is np and initial is not None:
        # taken out while a run uses it: a run within a run of this program gets its own
        state = program.derived.pop(ENGINE_STATE, None)
        if state is not None:
            # (B_0's bytes copied in through each buffer's memoryview: half the cost of an
            # ndarray assignment from np.frombuffer)
            for name, buf in state.buffers.items():
                buf.data[:] = initial.buffers[name]
            state.rng = initial.rng
            return state
    return initial_state(program, xp)


def set_aside(program: Program, state: State) -> None:
    """Keep a finished run's state for the program's next run (:func:`start_state`)."""
    if state.xp is np and "initial" in program.derived:
        program.derived[ENGINE_STATE] = state
