"""The engine protocol, the result every engine reports, and the run loop engines share.

An engine assigns each segment a preservation *strategy*: what to retain during the
forward pass (data) and how to recover the historical operand values for backward
(one ``recover`` method). The run loop is common to all of them: a forward pass that
runs each op and calls the strategy's retain hooks, then a backward pass over the
segments in reverse order. Each segment is recovered inside a replay transaction that
starts from and ends in the visible state (B_T, R_T), and its ops are differentiated
with the reverse rules of the interpreter fed with the *recovered* operand values.
The start state, each op run and each segment's backward come from the run's
``runner`` (``engines.runner.OpRunner``): by default ``PlainRunner`` (``initial_state``,
``execute_op``, ``runner.back_segment``). Nothing is kept between runs here; the
verifier's check-scoped memo (``verifier.memo``) is a runner that reuses, across the
engine runs of one check, what is the same for them byte for byte.

The adjoint lives in storage, not in a version graph: one float64 slot per granule of
each buffer (``state.granules``: the gcd of the offsets, strides and itemsizes of its
views, so every element starts on a granule and covers whole ones), the adjoint of the
float element that starts there. Going back over an op, the adjoint of what it wrote
is taken and every slot in the granules it overwrote is cleared (earlier versions there
are dead after the op), then the contributions are added to the slots of its sources.
Derivative admission (SPEC §3) guarantees that every admitted float read sees one whole
same-extent write, which is what makes this slot bookkeeping exact.

Accounting (bytes, all engines alike): ``retained_bytes`` counts what the forward
pass keeps for backward (copies of buffer bytes, recorded draws, 24 bytes per saved
generator state, 8 bytes per journal region index); ``peak_temporary_bytes`` is the
largest workspace held at once outside the retained state (operand values captured
while replaying a segment, a saved copy of the visible state, and the larger of the
two representations a guarded segment holds until it chooses); ``replayed_ops``
counts ops re-executed during backward. The adjoint arrays are common to every
engine and not counted.

Array module: ``run_strategies(..., xp=cupy)`` keeps the buffers, everything retained
(copies, journals, anchors, recorded draws), the replays and the adjoints as ``xp``
arrays; the reverse rules run there too. Random draws are computed on the host by the
CPU Philox and moved to ``xp``. What the result reports is host data: snapshots are
bytes, the gradient a NumPy array. ``xp=None`` is NumPy, the specification.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from replayverify.engines.plan import OpPlan, RunPlan, run_plan  # noqa: F401  (re-exported)
from replayverify.engines.runner import PLAIN, OpRunner
from replayverify.programs.arrays import to_host
from replayverify.programs.errstate import quiet
from replayverify.programs.interpreter import (
    FORWARD,
    Admission,
    ForwardRule,
    OpValues,
    execute,
    execute_op,
    op_values,
    written_positions,
)
from replayverify.programs.model import OpKind, Program
from replayverify.programs.state import (
    Snapshot,
    State,
    ViewLayout,
    layouts,
)

RNG_BYTES = 24  # key (2 x u32) and counter (4 x u32)
INDEX_BYTES = 8  # one int64 region index in a journal


# ---------------------------------------------------------------- protocol and result


@dataclass
class EngineResult:
    """What one engine run reports. ``gradient`` is None when admission refused it."""

    engine: str
    gradient: np.ndarray | None
    reason: str  # the admission reason when gradient is None
    forward: Snapshot  # (B, R) right after the engine's own forward pass
    final: Snapshot  # (B, R) after the whole backward pass: must equal (B_T, R_T)
    replays: tuple[Snapshot | None, ...]  # per segment: state right after its replay
    retained_bytes: int
    peak_temporary_bytes: int
    replayed_ops: int
    segment_retained_bytes: tuple[int, ...] = ()
    strategies: tuple[str, ...] = ()  # what each segment used (guarded: its choice)

    @property
    def metrics(self) -> dict[str, int]:
        """The accounting carried by every record of this engine (SPEC §5 records)."""
        return {"retained_bytes": self.retained_bytes,
                "temporary_bytes": self.peak_temporary_bytes,
                "replayed_ops": self.replayed_ops}


@runtime_checkable
class Engine(Protocol):
    """An engine: a name and one method. Register your own with ``engines.register``."""

    name: str

    def run(self, program: Program, *, admission: Admission | None = None,
            xp: ModuleType | None = None) -> EngineResult:
        """Forward, backward through the engine's own recovery; report the result.

        ``admission`` is the program's derivative admission (computed when None); ``xp``
        the array module to run on (None: NumPy, the specification; CuPy with the GPU
        backend). The verifier passes ``xp`` only when asked to check on another module,
        so an engine that runs on NumPy alone may leave it out of its signature. It
        passes ``runner`` (an :class:`~replayverify.engines.runner.OpRunner`: the check's
        memo) only to engines whose ``run`` names that parameter, as the built-in ones
        do (``run_strategies``).
        """
        ...


# ---------------------------------------------------------------- recovery records


@dataclass
class Recovery:
    """A segment's recovered ops, in order, and the state its replay produced (if any).

    Each op is an :class:`OpValues` holding the historical values its reverse rule needs
    (operands read and draws): a replay's own record, or one built with
    :meth:`Tape.recovered` from values a strategy retained.
    """

    ops: list[OpValues]
    replay: Snapshot | None = None


@dataclass(slots=True)
class Tape:
    """Everything one run retains, keyed, with per-segment byte accounting."""

    program: Program
    strategies: tuple[Strategy, ...]
    data: dict[Any, Any] = field(default_factory=dict)
    sizes: dict[Any, tuple[int, int]] = field(default_factory=dict)  # key -> (segment, bytes)
    anchored: list[bool] = field(default_factory=list)
    chosen: list[str] = field(default_factory=list)
    journal_owner: list[Strategy | None] = field(default_factory=list)
    # the journal plans of the program (per granularity) that this run's journals use,
    # looked up once a run instead of once an op (``Region.journal_open``)
    journal_plans: dict[int | None, Any] = field(default_factory=dict)
    temp_now: int = 0
    temp_peak: int = 0
    replayed_ops: int = 0

    xp: ModuleType = np  # the array module of everything retained
    runner: OpRunner = PLAIN  # how the run's ops run (``Strategy.replay``)

    # from the program's run plan
    lay: dict[str, ViewLayout] = field(init=False, repr=False)
    bounds: tuple[tuple[int, int], ...] = field(init=False, repr=False)
    nbytes: int = field(init=False, repr=False)  # of all buffers together
    plans: tuple[OpPlan, ...] = field(init=False, repr=False)  # per op, its OpPlan
    retained: list[int] = field(init=False, repr=False)  # bytes retained per segment

    def __post_init__(self) -> None:
        self.lay = layouts(self.program)
        plan = run_plan(self.program)
        self.bounds = plan.bounds
        self.nbytes = plan.nbytes
        self.plans = plan.ops
        self.retained = [0] * len(self.program.segments)
        self.anchored = [st.anchors for st in self.strategies]
        self.chosen = [st.name for st in self.strategies]
        # A journalling segment needs every later write journalled up to the next anchor
        # (or the end): the union of its own and later writes that can destroy its state.
        owner: Strategy | None = None
        for st in self.strategies:
            if st.anchors:
                owner = None
            if st.journals:
                owner = st
            self.journal_owner.append(owner)

    def recovered(self, k: int, operands: Mapping[str, Any], draws: Any = None) -> OpValues:
        """The record of op ``k`` from recovered operand values and draws."""
        return op_values(self.program, k, operands, draws)

    def record(self, k: int, operands: dict[str, Any], draws: Any = None) -> OpValues:
        """:meth:`recovered` for values already flat (as :func:`gather_view` and the draws
        give them): built from the op's plan, where it wrote derived from the operands."""
        plan = self.plans[k]
        dst = plan.dst
        where = written_positions(plan.op, operands, dst.size) if plan.partial else None
        return OpValues(k, plan.op, dst.dtype, dst.size, operands, draws, where)

    def keep(self, s: int, key: Any, value: Any, nbytes: int) -> None:
        """Retain ``value`` for backward, charging ``nbytes`` to segment ``s``."""
        n = int(nbytes)
        self.data[key] = value
        self.sizes[key] = (s, n)
        self.retained[s] += n

    def drop(self, key: Any) -> int:
        """Release a retained value; returns the bytes it was charged."""
        s, n = self.sizes.pop(key)
        del self.data[key]
        self.retained[s] -= n
        return n

    def borrow(self, nbytes: int) -> None:
        """Hold ``nbytes`` of temporary workspace."""
        self.temp_now += int(nbytes)
        self.temp_peak = max(self.temp_peak, self.temp_now)

    def give_back(self, nbytes: int) -> None:
        self.temp_now -= int(nbytes)

    def chain_end(self, s: int) -> int:
        """The first segment after ``s`` holding an anchor, or the number of segments."""
        for t in range(s + 1, len(self.bounds)):
            if self.anchored[t]:
                return t
        return len(self.bounds)


def gather_view(buffers: Mapping[str, Any], layout: ViewLayout, xp: ModuleType) -> Any:
    """A view's values, flat, read from ``buffers`` (a mapping of ``xp`` uint8 arrays)."""
    return buffers[layout.view.buffer][layout.index(xp)].view(layout.dtype)


def operand_bytes(rec: OpValues) -> int:
    n = 0 if rec.draws is None else rec.draws.nbytes
    for v in rec.operands.values():
        n += v.nbytes
    return int(n)


def copy_buffers(state: State) -> dict[str, np.ndarray]:
    return {name: buf.copy() for name, buf in state.buffers.items()}


def load_buffers(state: State, saved: Mapping[str, np.ndarray]) -> None:
    """Overwrite the live buffers in place (never rebinding them) with ``saved``."""
    for name, buf in saved.items():
        state.buffers[name][...] = buf


# ---------------------------------------------------------------- strategy


class Strategy:
    """How one segment is preserved: retain hooks for the forward pass and ``recover``.

    Strategies are stateless; everything a run keeps lives in its :class:`Tape`.
    ``anchors``: the strategy keeps B_s (it ends a journal chain); ``journals``: it
    needs its own and later writes journalled (see :meth:`journal_open`).
    """

    name: ClassVar[str] = "?"
    anchors: ClassVar[bool] = False
    journals: ClassVar[bool] = False
    forward: ClassVar[Mapping[OpKind, ForwardRule]] = FORWARD

    # forward hooks
    def begin(self, tape: Tape, s: int, state: State) -> None:
        """Called at the start of segment ``s`` (state is B_s, R_s)."""

    def before(self, tape: Tape, s: int, k: int, state: State) -> None:
        """Called before op ``k`` runs."""

    def after(self, tape: Tape, s: int, k: int, state: State, ev: OpValues) -> None:
        """Called after op ``k`` ran (``ev`` says what it read, wrote and drew)."""

    def end(self, tape: Tape, s: int, state: State) -> None:
        """Called at the end of segment ``s`` (state is B_{s+1}, R_{s+1})."""

    # journal hooks (used when this strategy owns the journal of a segment)
    def journal_open(self, tape: Tape, k: int, state: State) -> Any:
        return None

    def journal_close(self, tape: Tape, s: int, k: int, state: State, ev: OpValues,
                      pending: Any) -> None:
        """Record the journal entry of op ``k``."""

    # recovery
    def recover(self, tape: Tape, s: int, state: State) -> Recovery:
        """The historical operand values of segment ``s``'s ops. Must leave ``state``
        exactly as it found it (the visible (B_T, R_T))."""
        raise NotImplementedError

    # shared pieces of replay-based recovery
    def execute(self, program: Program, k: int, state: State,
                draws: np.ndarray | None) -> OpValues:
        """Re-execute op ``k`` during replay: ``execute_op`` with :attr:`forward`'s rules.

        :meth:`replay` runs each op through the run's runner (``tape.runner.run_op``, with
        :attr:`forward`) as long as this method is :class:`Strategy`'s; a strategy that
        overrides it (a mutant's own copy loop) has its replayed ops run by its override
        instead, never by the runner, so a runner that reuses earlier op runs (the
        verifier's memo) never stands in for it. (Called directly, as some mutants' own
        replays do, it runs the op plainly.)"""
        return execute_op(program, k, state, draws=draws, forward=self.forward)

    def replay(self, tape: Tape, s: int, state: State,
               draws: Mapping[int, np.ndarray] | None = None) -> list[OpValues]:
        """Re-execute segment ``s`` from the current state, capturing each op's operands
        (each op run by ``tape.runner``, or by an overriding :meth:`execute`)."""
        a, b = tape.bounds[s]
        program, forward, plans = tape.program, self.forward, tape.plans
        execute = _hook(self, "execute")  # None: :meth:`execute` itself, by the runner
        run_op = tape.runner.run_op
        out = []
        held = 0  # bytes of the operands and draws captured: all held until differentiated
        for k in range(a, b):
            d = None if draws is None else draws.get(k)
            if execute is None:
                rec = run_op(program, k, plans[k], state, d, forward)
            else:
                rec = execute(program, k, state, d)
            held += operand_bytes(rec)
            # (what the op wrote is in the state now: backward reads operands and draws
            # only, so the record is held without it)
            out.append(rec if rec.values is None else rec._replace(values=None))
        tape.borrow(held)
        tape.replayed_ops += b - a
        return out

    def reinstate(self, state: State, saved: dict[str, np.ndarray] | None, rng) -> None:
        """End of a transaction: put the visible bytes (when saved) and R back."""
        if saved is not None:
            load_buffers(state, saved)
        state.rng = rng

    def transaction(self, tape: Tape, state: State, *, copy_visible: bool) -> Transaction:
        """Replay as a transaction (``with strategy.transaction(...):``): save what
        reinstating the visible state needs (R always; all bytes when ``copy_visible``),
        run the body, reinstate."""
        return Transaction(self, tape, state, copy_visible)


class Transaction:
    """:meth:`Strategy.transaction`'s context: the visible R (and bytes) saved on entry
    and reinstated on exit, whatever the body does. (A class rather than a generator
    context manager: one is entered per replayed segment, and a generator's setup costs
    about as much as saving the state.)"""

    __slots__ = ("copy_visible", "held", "rng", "saved", "state", "strategy", "tape")

    def __init__(self, strategy: Strategy, tape: Tape, state: State, copy_visible: bool):
        self.strategy, self.tape, self.state = strategy, tape, state
        self.copy_visible = copy_visible

    def __enter__(self) -> None:
        state, tape = self.state, self.tape
        self.rng = state.rng
        self.saved = copy_buffers(state) if self.copy_visible else None
        self.held = RNG_BYTES + (tape.nbytes if self.copy_visible else 0)
        tape.borrow(self.held)

    def __exit__(self, *exc: object) -> None:
        self.strategy.reinstate(self.state, self.saved, self.rng)
        self.tape.give_back(self.held)


# ---------------------------------------------------------------- the run loop


def _hook(strategy: Strategy, name: str) -> Any:
    """``strategy``'s bound method ``name``, or None where it keeps :class:`Strategy`'s
    (a hook that does nothing: the run loop then skips the call; ``execute``: the
    replay has the run's runner run the op)."""
    if getattr(type(strategy), name) is getattr(Strategy, name):
        return None
    return getattr(strategy, name)


def _forward(tape: Tape, state: State) -> None:
    program, plans = tape.program, tape.plans
    run_op = tape.runner.run_op
    # the hooks of the segment's strategy and of its journal's owner, looked up when they
    # change (an engine preserves every segment with one strategy: once a run)
    st = owner = None
    for s, (a, b) in enumerate(tape.bounds):
        if tape.strategies[s] is not st:
            st = tape.strategies[s]
            begin, before, after, end = (_hook(st, "begin"), _hook(st, "before"),
                                         _hook(st, "after"), _hook(st, "end"))
        if tape.journal_owner[s] is not owner:
            owner = tape.journal_owner[s]
            if owner is not None:
                journal_open, journal_close = owner.journal_open, owner.journal_close
        if begin is not None:
            begin(tape, s, state)
        if owner is None:
            for k in range(a, b):
                if before is not None:
                    before(tape, s, k, state)
                ev = run_op(program, k, plans[k], state, None, FORWARD)
                if after is not None:
                    after(tape, s, k, state, ev)
        else:
            for k in range(a, b):
                if before is not None:
                    before(tape, s, k, state)
                pending = journal_open(tape, k, state)
                ev = run_op(program, k, plans[k], state, None, FORWARD)
                journal_close(tape, s, k, state, ev, pending)
                if after is not None:
                    after(tape, s, k, state, ev)
        if end is not None:
            end(tape, s, state)


@quiet
def run_strategies(name: str, program: Program, strategies: Sequence[Strategy],
                   admission: Admission | None = None, xp: ModuleType | None = None,
                   runner: OpRunner | None = None) -> EngineResult:
    """Run ``program`` preserving segment s with ``strategies[s]``; see the module doc.

    ``xp``: the array module to run on (None: NumPy). Admission, when not given, comes
    from the NumPy interpreter. ``runner``: where the start state, the op runs and the
    backward come from (None: ``runner.PLAIN``); the result is the same whichever.
    """
    xp = np if xp is None else xp
    runner = PLAIN if runner is None else runner
    strategies = tuple(strategies)
    if len(strategies) != len(program.segments):
        raise ValueError(f"{len(strategies)} strategies for a program with "
                         f"{len(program.segments)} segments")
    if admission is None:
        admission = execute(program, record_boundaries=False).admission
    tape = Tape(program, strategies, xp=xp, runner=runner)
    state = runner.start(program, xp)
    _forward(tape, state)
    forward = state.snapshot()
    retained = sum(tape.retained)
    seg_retained = tuple(tape.retained)

    plan = run_plan(program)
    n_seg = len(tape.bounds)
    replays: list[Snapshot | None] = [None] * n_seg
    sweep = runner.sweep(program, plan, xp) if admission.supported else None
    for s in reversed(range(n_seg)):
        rec = strategies[s].recover(tape, s, state)
        replays[s] = rec.replay
        if s == 0:  # the last recovery is made: nothing retained is read after it
            tape.data.clear()
        if sweep is not None:
            sweep.segment(s, rec.ops)
        del rec  # the segment's workspace is released once it is differentiated
        tape.temp_now = 0

    gradient = None
    if sweep is not None:
        adj = sweep.adj
        if xp is np:
            parts = [adj[b][slots] for b, slots in plan.gradient_at]
            if len(parts) == 1:  # (a gather: already a fresh array)
                gradient = parts[0]
            else:
                gradient = np.concatenate(parts) if parts else np.empty(0, np.float64)
        else:
            lay = tape.lay
            parts = [adj[lay[n].view.buffer][lay[n].slots_in(xp)] for n in program.inputs]
            gradient = to_host(xp.concatenate(parts)) if parts else np.empty(0, np.float64)
    result = EngineResult(
        engine=name, gradient=gradient, reason="" if admission.supported else admission.reason,
        forward=forward, final=state.snapshot(), replays=tuple(replays),
        retained_bytes=retained, peak_temporary_bytes=tape.temp_peak,
        replayed_ops=tape.replayed_ops, segment_retained_bytes=seg_retained,
        strategies=tuple(tape.chosen),
    )
    runner.finish(program, state)
    return result
