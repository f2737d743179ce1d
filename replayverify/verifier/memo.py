"""The check-scoped memo: what the engine runs of one check share, computed once and
taken by the runs after it where, byte for byte, it is what they would compute.

A check runs five engines (and, with ``--mutants``, the mutants) on one program. They run
the same forward pass, replay its segments from its states and, where they recover the
same values, differentiate the same numbers. :class:`Memo` is an
:class:`~replayverify.engines.runner.OpRunner` that the code running a check's engines
opens (``engine_checks.engine_records``, the ``profile`` command) and hands to every engine
whose ``run`` takes a ``runner``; it lasts as long as that code holds it and keeps nothing
on the program (it reads the programs layer's carried B_0, nothing more). It keeps, for
the program it serves:

- the op runs (:meth:`Memo.run_op`): an op run in an engine's forward pass or replay is a
  function of the state's bytes and R, the op's forward rule and the draws it is given;
  where all are those of an earlier run, the op writes that run's values and the caller
  takes its record;
- the first run's backward (:class:`Swept`): backward is a function of the recovered
  records' operands and draws (given the program and the reverse rules, which read
  nothing else: the contract stated with ``REVERSE``, enforced by ``back_segment``); a run
  follows the first run's sweep, segment by segment from the last, for as long as it
  recovered the same values, byte for byte;
- one state (:meth:`Memo.start`, :meth:`Memo.finish`): the runs reuse it, with B_0
  written over its buffers, so each view's strided array is made once a check.

A run that does anything else (a wrong recovery, a mutant: other bytes, R, draws or
rules) computes its own, so every run's result is bit for bit the one it gets alone with
the plain runner (tests/unit/test_engines.py). A strategy that overrides ``execute`` runs
its replayed ops itself, never through the memo. NumPy only; op runs and sweeps only for
programs of at most ``KEPT_RUN_BYTES``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from replayverify.engines.plan import OpPlan, RunPlan
from replayverify.engines.runner import Sweep, back_segment
from replayverify.programs.interpreter import REVERSE, ForwardRule, OpValues, execute_op
from replayverify.programs.model import OpKind, Program
from replayverify.programs.state import State, initial_state

# The ops run and the first backward of a program are kept for programs of at most this
# many bytes: the keys hold the state's bytes, the swept adjoints 8 bytes per byte a segment.
# (At most ``plan.KEPT_ADJOINT_BYTES``: a kept sweep starts from the plan's template.)
KEPT_RUN_BYTES = 1 << 16


class Memo:
    """An :class:`~replayverify.engines.runner.OpRunner` that reuses, across the engine
    runs it is given to, what is the same for them (see the module doc). It serves one
    program at a time: given another, it forgets the first."""

    __slots__ = ("_done", "_program", "_state", "_swept")

    def __init__(self) -> None:
        self._program: Program | None = None
        self._done: dict | None = None  # op runs, by op, bytes and R (None: none kept)
        self._swept: Swept | None = None  # the first run's backward
        self._state: State | None = None  # the last finished run's state

    def _serve(self, program: Program) -> None:
        self._program = program
        self._done = {} if program.nbytes <= KEPT_RUN_BYTES else None
        self._swept = self._state = None

    # ---------------------------------------------------------------- the start state

    def start(self, program: Program, xp: ModuleType) -> State:
        """B_0, R_0: the state the previous run handed back (:meth:`finish`) with B_0
        written over its buffers in place and R_0, else a new one. Reusing the buffers
        keeps the strided views that reads and writes go through (``State.typed``, one
        per view, made on first use and valid while its buffer is that object), so they
        are made once a check, not once a run. NumPy states of programs whose B_0 is
        carried (``initial_state``) only."""
        if program is not self._program:
            self._serve(program)
        initial = program.derived.get("initial")
        if xp is np and initial is not None:
            # taken out while a run uses it: a run within a run gets its own
            state, self._state = self._state, None
            if state is not None:
                # (B_0's bytes copied in through each buffer's memoryview: half the cost
                # of an ndarray assignment from np.frombuffer)
                for name, buf in state.buffers.items():
                    buf.data[:] = initial.buffers[name]
                state.rng = initial.rng
                return state
        return initial_state(program, xp)

    def finish(self, program: Program, state: State) -> None:
        """Keep a finished run's state for the next run (:meth:`start`)."""
        if program is self._program and state.xp is np and "initial" in program.derived:
            self._state = state

    # ---------------------------------------------------------------- op runs

    def run_op(self, program: Program, k: int, plan: OpPlan, state: State,
               draws: np.ndarray | None, forward: Mapping[OpKind, ForwardRule]) -> OpValues:
        """``execute_op(program, k, state, draws=draws, forward=forward)``, or what it gave
        in an earlier run.

        Where the state's bytes and R, the rule and the draws are those of a run kept (by
        op and bytes and R), the op writes the values that run wrote, R becomes what it
        became, and the caller takes that run's record (arrays read-only: whoever takes it
        only reads it). A run from other bytes or R, under another rule or given other
        draws (a wrong recovery, a mutant) runs the op itself.
        """
        if program is not self._program:
            self._serve(program)
        done = self._done
        if done is None or state.xp is not np:
            return execute_op(program, k, state, draws=draws, forward=forward)
        rule = forward[plan.op.kind]
        key = (k, tuple([buf.tobytes() for buf in state.buffers.values()]), state.rng)
        hit = done.get(key)
        if hit is not None:
            rec, rng, hit_rule, drew = hit
            # (without given draws the op draws from R: the same only where that run drew)
            if hit_rule is rule and (drew if draws is None else same_draws(draws, rec.draws)):
                dst = state.typed(plan.dst)
                if rec.where is None and dst.ndim == 1:  # the whole 1-D view: no checks
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

    # ---------------------------------------------------------------- backward

    def sweep(self, program: Program, plan: RunPlan, xp: ModuleType) -> Sweep:
        """A run's backward: following the first run's sweep (:class:`Swept`) where this
        NumPy run can (the reverse rules still the ones it was swept with), else its own;
        the first run's is kept for the runs after it."""
        if program is not self._program:
            self._serve(program)
        if xp is not np or self._done is None:
            return Sweep(program, plan, xp)
        rules = reverse_rules(program)
        kept = self._swept
        if kept is not None and kept.rules == rules:
            return _MemoSweep(program, plan, xp, kept.start, follow=kept)
        return _MemoSweep(program, plan, xp, keep=Swept(plan.adjoint, len(plan.bounds), rules),
                          memo=self)


class _MemoSweep(Sweep):
    """A run's backward under a :class:`Memo`: it follows a kept sweep (``follow``) while
    the recovered records are the ones it was swept with; the adjoints are then that
    sweep's, read-only, copied only where this run parts from it and sweeps its own. Or
    it is the first run's (``keep``), kept by the memo once it reaches segment 0."""

    __slots__ = ("follow", "keep", "memo", "program")

    def __init__(self, program: Program, plan: RunPlan, xp: ModuleType,
                 adj: dict[str, np.ndarray] | None = None, *, follow: Swept | None = None,
                 keep: Swept | None = None, memo: Memo | None = None) -> None:
        super().__init__(program, plan, xp, adj)
        self.program, self.follow, self.keep, self.memo = program, follow, keep, memo

    def segment(self, s: int, ops: Sequence[OpValues]) -> None:
        follow = self.follow
        if follow is not None:
            if follow.same(s, ops):
                self.adj = follow.after[s]
                return
            # parts here: from now on its own adjoints
            self.adj, self.follow = {b: a.copy() for b, a in self.adj.items()}, None
        back_segment(self.plans, self.xp, self.adj, self.bounds[s][0], ops)
        keep = self.keep
        if keep is not None:
            keep.keep(s, ops, self.adj)
            if s == 0 and self.memo._program is self.program:  # the whole sweep, kept
                self.memo._swept = keep


def same_draws(given: Any, drawn: Any) -> bool:
    """Whether draws given to an op are those recorded (as the op takes them: flat)."""
    return (type(given) is np.ndarray and type(drawn) is np.ndarray
            and given.dtype == drawn.dtype and given.size == drawn.size
            and given.tobytes() == drawn.tobytes())


def reverse_rules(program: Program) -> tuple:
    """The reverse rule of each op of the program, as ``REVERSE`` has them now."""
    return tuple([REVERSE[op.kind] for op in program.ops])


class Swept:
    """A NumPy backward of the program as the first engine run swept it: per segment, what
    backward read of the recovered records it differentiated (:func:`values_key`) and the
    adjoints after them (read-only copies).

    Backward is a function of the recovered operands and draws alone (with the program
    and the reverse rules): ``runner.back_segment`` derives what an op wrote from its
    recovered operands, takes the op, its dtype and size from the plan, and hands the
    reverse rule no written values. So a later run whose recovered records of segments
    S-1..s hold the same values, byte for byte, ends segment s with the same adjoints,
    and the engines of one check mostly recover the same values (they are meant to). A
    run that recovers anything else (a mutant, a wrong replay) parts from it there and
    sweeps its own: what it recovered is differentiated and judged as before.
    """

    __slots__ = ("after", "keys", "rules", "start")

    def __init__(self, start: dict[str, np.ndarray], n_seg: int, rules: tuple) -> None:
        self.start = start  # the plan's read-only starting adjoints
        self.keys: list[list[tuple] | None] = [None] * n_seg
        self.after: list[dict[str, np.ndarray] | None] = [None] * n_seg
        self.rules = rules

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
    of them is not a NumPy array. (Not ``values``: the reverse rules never see them.)"""
    key = [rec.index, rec.op, rec.dtype, rec.dst_size, tuple(rec.operands)]
    for a in (rec.draws, *rec.operands.values()):
        if a is None:
            key.append(None)
        elif type(a) is np.ndarray:
            key.append((a.dtype, a.shape, a.tobytes()))
        else:
            return None
    return tuple(key)
