"""The engine protocol, the result every engine reports, and the run loop engines share.

An engine assigns each segment a preservation *strategy*: what to retain during the
forward pass (data) and how to recover the historical operand values for backward
(one ``recover`` method). The run loop is common to all of them: a forward pass with
``execute_op`` that calls the strategy's retain hooks, then a backward pass over the
segments in reverse order. Each segment is recovered inside a replay transaction that
starts from and ends in the visible state (B_T, R_T), and its ops are differentiated
with the reverse rules of the interpreter fed with the *recovered* operand values.
The engine runs of one program share what is the same for them, byte for byte
(``engines.shared``): an op run from the bytes, R and draws an earlier run ran it from,
the first run's backward for the segments whose recovered values equal its, one state.

The adjoint lives in storage, not in a version graph: one float64 slot per byte of
each buffer, the adjoint of the float element that starts at that byte. Going back
over an op, the adjoint of what it wrote is taken and every slot in the bytes it
overwrote is cleared (earlier versions there are dead after the op), then the
contributions are added to the slots of its sources. Derivative admission (SPEC §3)
guarantees that every admitted float read sees one whole same-extent write, which is
what makes this slot bookkeeping exact.

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
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

import numpy as np

from replayverify.engines.shared import Swept, ops_done, run_op, set_aside, start_state, swept
from replayverify.programs.arrays import scatter_add, to_host
from replayverify.programs.errstate import quiet
from replayverify.programs.interpreter import (
    FORWARD,
    REVERSE,
    Admission,
    ForwardRule,
    OpValues,
    execute,
    execute_op,
    op_steps,
    op_values,
    written_positions,
)
from replayverify.programs.model import Op, OpKind, Program
from replayverify.programs.state import (
    Snapshot,
    State,
    ViewLayout,
    derive_byte_indices,
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
        so an engine that runs on NumPy alone may leave it out of its signature.
        """
        ...


# ---------------------------------------------------------------- per-program plan


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
    # NumPy: per buffer, the adjoint slots as backward starts them (the loss weights at the
    # loss view's element starts, zeros elsewhere); read-only, each run takes copies
    adjoint: dict[str, np.ndarray]
    # the gradient's slots, in input order: per run of consecutive inputs in one buffer,
    # (buffer, their element starts concatenated), so each run is one gather
    gradient_at: tuple[tuple[str, np.ndarray], ...]


def run_plan(program: Program) -> RunPlan:
    """The engines' plan of ``program``: derived once and carried by the program (in
    ``Program.derived``, like its layouts), shared by every engine that runs it."""
    return program.carried("engine_plan", _make_plan)


def _make_plan(program: Program) -> RunPlan:
    # from the interpreter's per-op layouts, derived once too
    ops = tuple([OpPlan(step.op, step.dst, step.reads, dict(step.reads), step.op.spec.partial,
                        step.dst.view.is_float, step.draws) for step in op_steps(program)])
    # every engine run asks for the byte indices of every destination (backward clears the
    # slots an op wrote, journals save its bytes): derived together, once
    derive_byte_indices({op.dst.view.name: op.dst for op in ops}.values())
    weights = np.asarray(program.loss.weights, dtype=np.float64)
    weights.setflags(write=False)
    lay = layouts(program)
    adjoint = {b.name: np.zeros(b.nbytes, dtype=np.float64) for b in program.buffers}
    loss = lay[program.loss.view]
    if loss.view.is_float:  # the loss view's elements are distinct slots
        adjoint[loss.view.buffer][loss.starts] += weights
    for a in adjoint.values():
        a.setflags(write=False)
    runs: list[tuple[str, list[np.ndarray]]] = []
    for name in program.inputs:
        at = lay[name]
        if runs and runs[-1][0] == at.view.buffer:
            runs[-1][1].append(at.starts)
        else:
            runs.append((at.view.buffer, [at.starts]))
    gradient_at = tuple((b, starts[0] if len(starts) == 1 else np.concatenate(starts))
                        for b, starts in runs)
    return RunPlan(program.segment_bounds(), program.nbytes, ops, weights, adjoint, gradient_at)


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
        """Re-execute op ``k`` during replay."""
        return execute_op(program, k, state, draws=draws, forward=self.forward)

    def replay(self, tape: Tape, s: int, state: State,
               draws: Mapping[int, np.ndarray] | None = None) -> list[OpValues]:
        """Re-execute segment ``s`` from the current state, capturing each op's operands.
        (With the interpreter's ops, ``shared.run_op``: an op from bytes and R another run of
        the program ran it from is that run's.)"""
        a, b = tape.bounds[s]
        program, forward, plans = tape.program, self.forward, tape.plans
        execute = _hook(self, "execute")  # None: :meth:`execute` itself, called inline
        done = ops_done(tape, state)
        out = []
        held = 0  # bytes of the operands and draws captured: all held until differentiated
        for k in range(a, b):
            d = None if draws is None else draws.get(k)
            if execute is None:
                rec = run_op(program, k, plans[k], state, d, forward, done)
            else:
                rec = execute(program, k, state, d)
            held += operand_bytes(rec)
            out.append(rec)
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
    replay runs the op itself, ``shared.run_op``)."""
    if getattr(type(strategy), name) is getattr(Strategy, name):
        return None
    return getattr(strategy, name)


def _forward(tape: Tape, state: State) -> None:
    program, plans = tape.program, tape.plans
    done = ops_done(tape, state)
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
                ev = run_op(program, k, plans[k], state, None, FORWARD, done)
                if after is not None:
                    after(tape, s, k, state, ev)
        else:
            for k in range(a, b):
                if before is not None:
                    before(tape, s, k, state)
                pending = journal_open(tape, k, state)
                ev = run_op(program, k, plans[k], state, None, FORWARD, done)
                journal_close(tape, s, k, state, ev, pending)
                if after is not None:
                    after(tape, s, k, state, ev)
        if end is not None:
            end(tape, s, state)


def _back_segment(tape: Tape, adj: dict[str, Any], first: int, ops: Sequence[OpValues]
                  ) -> None:
    """vbar_p(k) += vbar_k * f_k'(v_p(k)) on storage slots, for ops ``first + j`` in
    reverse order, ``ops[j]`` being the recovered record of op ``first + j``.

    What op ``k`` wrote follows from the *recovered* operands (a wrong recovered index
    misplaces the adjoints, as it would in a real engine)."""
    xp = tape.xp
    on_numpy = xp is np  # the layouts' own index arrays, read directly
    plans = tape.plans
    for j in reversed(range(len(ops))):
        k, rec = first + j, ops[j]
        plan = plans[k]
        op, dst = plan.op, plan.dst
        a = adj[dst.view.buffer]
        where = written_positions(op, rec.operands, dst.size) if plan.partial else None
        # only float writes carry derivatives: an integer op's written slots are just cleared
        rule = REVERSE[op.kind] if plan.float_write else None
        if rule is not None:
            starts = dst.starts if on_numpy else dst.starts_in(xp)
            g = a[starts if where is None else starts[where]]
        a[dst.byte_index if on_numpy and where is None else dst.bytes_of(where, xp)] = 0.0
        if rule is None or g.size == 0:
            continue
        if rec.where is not where or rec.op is not op:  # the rule sees op k of this
            # program and what it wrote as derived here
            rec = OpValues(k, op, dst.dtype, dst.size, rec.operands, rec.draws, where)
        sources = plan.sources
        for f, c in rule(rec, g).items():
            src = sources[f]
            if on_numpy:  # a view's elements never overlap: its starts are distinct slots
                adj[src.view.buffer][src.starts] += c
            else:
                scatter_add(xp, adj[src.view.buffer], src.starts_in(xp), c)


def _adjoints(program: Program, plan: RunPlan, xp: ModuleType) -> dict[str, Any]:
    """Backward's starting adjoints, one float64 slot per byte of each buffer."""
    if xp is np:
        return {name: a.copy() for name, a in plan.adjoint.items()}
    adj = {b.name: xp.zeros(b.nbytes, dtype=xp.float64) for b in program.buffers}
    loss = layouts(program)[program.loss.view]
    if loss.view.is_float:
        scatter_add(xp, adj[loss.view.buffer], loss.starts_in(xp), xp.asarray(plan.loss_weights))
    return adj


@quiet
def run_strategies(name: str, program: Program, strategies: Sequence[Strategy],
                   admission: Admission | None = None, xp: ModuleType | None = None
                   ) -> EngineResult:
    """Run ``program`` preserving segment s with ``strategies[s]``; see the module doc.

    ``xp``: the array module to run on (None: NumPy). Admission, when not given, comes
    from the NumPy interpreter.
    """
    xp = np if xp is None else xp
    strategies = tuple(strategies)
    if len(strategies) != len(program.segments):
        raise ValueError(f"{len(strategies)} strategies for a program with "
                         f"{len(program.segments)} segments")
    if admission is None:
        admission = execute(program, record_boundaries=False).admission
    tape = Tape(program, strategies, xp=xp)
    state = start_state(program, xp)
    _forward(tape, state)
    forward = state.snapshot()
    retained = sum(tape.retained)
    seg_retained = tuple(tape.retained)

    plan = run_plan(program)
    n_seg = len(tape.bounds)
    replays: list[Snapshot | None] = [None] * n_seg
    # On NumPy, backward follows the program's first swept backward (``shared.Swept``) for as
    # long as this run recovers the same values: the adjoints are then that sweep's,
    # read-only, copied only where this run parts from it and sweeps its own. The first
    # run (none to follow) keeps its sweep for the runs after it.
    follow = swept(program, plan, xp) if admission.supported else None
    if follow is not None:
        adj = follow.start
    else:
        adj = _adjoints(program, plan, xp) if admission.supported else None
    keep = Swept.first(program, plan, xp) if adj is not None and follow is None else None
    for s in reversed(range(n_seg)):
        rec = strategies[s].recover(tape, s, state)
        replays[s] = rec.replay
        if adj is not None:
            if follow is not None and follow.same(s, rec.ops):
                adj = follow.after[s]
            else:
                if follow is not None:  # parts here: from now on its own adjoints
                    adj, follow = {b: a.copy() for b, a in adj.items()}, None
                _back_segment(tape, adj, tape.bounds[s][0], rec.ops)
                if keep is not None:
                    keep.keep(s, rec.ops, adj)
        tape.temp_now = 0  # the segment's workspace is released once it is differentiated
    if keep is not None:
        keep.kept_by(program)

    gradient = None
    if adj is not None:
        if xp is np:
            parts = [adj[b][starts] for b, starts in plan.gradient_at]
            if len(parts) == 1:  # (a gather: already a fresh array)
                gradient = parts[0]
            else:
                gradient = np.concatenate(parts) if parts else np.empty(0, np.float64)
        else:
            lay = tape.lay
            parts = [adj[lay[n].view.buffer][lay[n].starts_in(xp)] for n in program.inputs]
            gradient = to_host(xp.concatenate(parts)) if parts else np.empty(0, np.float64)
    result = EngineResult(
        engine=name, gradient=gradient, reason="" if admission.supported else admission.reason,
        forward=forward, final=state.snapshot(), replays=tuple(replays),
        retained_bytes=retained, peak_temporary_bytes=tape.temp_peak,
        replayed_ops=tape.replayed_ops, segment_retained_bytes=seg_retained,
        strategies=tuple(tape.chosen),
    )
    set_aside(program, state)
    return result
