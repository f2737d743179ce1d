"""Engine records (SPEC §4, §5): per engine a ``gradient`` and a ``bytes`` record; per
mutant one ``mutant:<...>`` record, ``detected`` or ``missed``.

``gradient``: the engine's gradient against the reference (the forward-Jacobian
gradient when given, else the version graph's) within the SPEC tolerance, or
``unsupported`` with the admission reason exactly where admission refuses.
``bytes``: the engine's forward pass ends in (B_T, R_T), its backward leaves (B_T, R_T)
exactly, and each segment it replayed reproduced (B_{s+1}, R_{s+1}); the measured error
is the number of differing bytes. Every record carries the engine's accounting:
retained bytes, peak temporary bytes and replayed ops.

The engines and mutants of one check run with one :class:`~replayverify.verifier.memo.Memo`
(opened by :func:`engine_records`), handed to each engine whose ``run`` takes a
``runner``: what their runs share is computed once, and each result is the one the engine
gets alone.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from replayverify import engines as registry
from replayverify.engines.base import Engine, EngineResult
from replayverify.plugins import call, checked
from replayverify.programs.interpreter import Execution, execute, reverse_sweep
from replayverify.programs.model import Program
from replayverify.programs.state import Snapshot
from replayverify.verifier.bytes_check import diff_states
from replayverify.verifier.compare import Verdict, compare_gradients, error_verdict
from replayverify.verifier.memo import Memo
from replayverify.verifier.records import Check, Outcome, Record, make_record, program_label

GRADIENT, BYTES = Check.GRADIENT, Check.BYTES


def gradient_verdict(result: EngineResult, execution: Execution | ExpectedStates,
                     reference: np.ndarray | None) -> Verdict:
    """An engine's gradient against the reference, or ``unsupported`` where admission refuses.

    ``execution``: the execution judged against, or the :class:`ExpectedStates` taken from
    it (its admission, program and version-graph gradient are read alike)."""
    adm = execution.admission
    if not adm.supported:
        if result.gradient is not None:
            return Verdict(Outcome.DIVERGE, None, f"the engine returned a gradient where admission "
                           f"refuses it: {adm.reason}")
        return Verdict(Outcome.UNSUPPORTED, None, adm.reason)
    if result.gradient is None:
        return Verdict(Outcome.DIVERGE, None, "admission holds but the engine returned no "
                       f"gradient ({result.reason or 'no reason given'})")
    note = ""
    if reference is None:  # no forward-Jacobian gradient: fall back to the version graph
        reference, note = execution.gradient, " (against the version graph)"
    v = compare_gradients(result.gradient, reference, execution.program)
    if v.outcome is Outcome.DIVERGE:
        overflow = float64_overflow(result.gradient, reference, execution)
        if overflow:
            return Verdict(Outcome.UNSUPPORTED, None, overflow + note)
    return Verdict(v.outcome, v.max_abs_err, v.detail + note) if note else v


def float64_overflow(g: np.ndarray, reference: np.ndarray,
                     execution: Execution | ExpectedStates) -> str:
    """Why an engine's non-finite entries are float64's, not the replay's, or "".

    Engines accumulate adjoints in float64; the references in extended precision, where
    an intermediate adjoint near 1e308 may stay finite. When every entry where the engine
    is not finite is exactly what the version graph swept in float64 gives, and every other
    entry matches the reference within tolerance, the engine replayed correctly and only
    float64 overflowed: nothing can be compared there (``unsupported``), as for a
    non-finite reference.
    """
    g = np.asarray(g, np.float64)
    reference = np.asarray(reference, np.float64)
    bad = ~np.isfinite(g) & np.isfinite(reference)
    if not bad.any():
        return ""
    finite = np.isfinite(g)
    if finite.any() and compare_gradients(g[finite], reference[finite],
                                          execution.program).outcome is not Outcome.MATCH:
        return ""
    if isinstance(execution, ExpectedStates):
        execution = execution.execution
    g64 = reverse_sweep(execution, dtype=np.float64)
    if not np.array_equal(g[~finite], g64[~finite], equal_nan=True):
        return ""
    j = int(np.flatnonzero(bad)[0])
    return (f"the gradient overflows float64 at coordinate {j}: {float(g[j])!r}, as the "
            "version graph swept in float64 gives, vs the extended-precision reference "
            f"{float(reference[j])!r} (nothing compared there)")


class ExpectedStates:
    """What the engines of one check are judged against, taken from ``execution`` once for
    every engine: the program, its admission, (B_T, R_T), the states a segment's replay
    must end in (B_{s+1}, R_{s+1}) and the version graph's gradient; and the gradient
    verdicts given so far against one reference (:meth:`gradient_verdict`).

    :meth:`let_go` keeps those alone and lets the execution go (its per-op records and
    version ids: most of what a large program's check holds). A verdict that needs the
    execution itself afterwards (an engine's float64 overflow, swept again in float64)
    runs the program again: let go only an execution that ``execute(program)`` made,
    which running it again gives bit for bit (``check_program`` lets go its own)."""

    def __init__(self, execution: Execution) -> None:
        self.program = execution.program
        self.admission = execution.admission
        self._execution: Execution | None = execution
        self._final: Snapshot | None = None
        self._gradient: np.ndarray | None = None  # the version graph's, once let go
        self._ends = execution.boundaries[1:]  # (B_0 is no replay's end: not held)
        self._reference: np.ndarray | None = None  # the reference of ``_verdicts``
        self._verdicts: dict[tuple, Verdict] = {}
        self._exact: dict[int, Verdict] = {}  # the exact bytes verdict, per replay count

    @property
    def final(self) -> Snapshot:
        """(B_T, R_T), taken once: the last recorded boundary itself when it is that state
        (one copy of the bytes for both)."""
        if self._final is None:
            final = self._execution.final
            last = self._ends[-1] if self._ends else None
            self._final = last if last == final else final
        return self._final

    @property
    def execution(self) -> Execution:
        """The execution judged against: the one given, or once let go, the program run
        again (not kept)."""
        return execute(self.program) if self._execution is None else self._execution

    @property
    def gradient(self) -> np.ndarray | None:
        """The version graph's gradient (None where admission refuses it)."""
        return self._gradient if self._execution is None else self._execution.gradient

    def let_go(self) -> ExpectedStates:
        """Take (B_T, R_T) and the version graph's gradient now and let the execution go
        (see the class doc); returns self. A gradient that raises keeps the execution:
        each verdict that asks for it then raises, as it would have."""
        if self._execution is not None:
            self.final  # noqa: B018  (taken while the execution is here)
            try:
                gradient = self._execution.gradient
            except Exception:
                return self
            self._gradient, self._execution = gradient, None
        return self

    def gradient_verdict(self, result: EngineResult, reference: np.ndarray | None) -> Verdict:
        """:func:`gradient_verdict` of ``result``. A verdict is a function of the gradient's
        bytes (given the execution and the reference), and the engines of one check mostly
        return the same bytes: an equal gradient is judged once per reference."""
        g = result.gradient
        if g is None or type(g) is not np.ndarray:
            return gradient_verdict(result, self, reference)
        if reference is not self._reference:
            self._reference, self._verdicts = reference, {}
        key = (g.dtype.str, g.shape, g.tobytes())
        hit = self._verdicts.get(key)
        if hit is None:
            hit = self._verdicts[key] = gradient_verdict(result, self, reference)
        return hit

    def exact_verdict(self, result: EngineResult) -> Verdict | None:
        """The ``match`` bytes verdict when the engine's forward, final and every replay
        snapshot equal the expected states (Snapshot equality, what :func:`diff_states`
        tests first: the common case), else None. The verdict depends on the number of
        replays alone: each is made once (a verdict is immutable)."""
        want = self.final
        if not (result.forward == want and result.final == want):
            return None
        replays = result.replays
        ends = None  # taken at the first replay: none are needed without one
        n = 0
        for s, snap in enumerate(replays):
            if snap is not None:
                if ends is None:
                    ends = self.ends(len(replays))
                if not snap == ends[s]:
                    return None
                n += 1
        hit = self._exact.get(n)
        if hit is None:
            hit = self._exact[n] = exact_match(n)
        return hit

    def ends(self, segments: int) -> list[Snapshot]:
        """(B_{s+1}, R_{s+1}) for s = 0..``segments`` - 1, the state after each segment;
        recorded by re-running the program (once) when the execution did not record
        them."""
        if len(self._ends) != segments:
            self._ends = execute(self.program).boundaries[1:]
        return self._ends


def bytes_verdict(result: EngineResult, execution: Execution | ExpectedStates) -> Verdict:
    """Exact bytes and generator state: forward end, after backward, and every replay.

    ``execution``: the execution judged against, or the states taken from it."""
    expected = _expected(execution)
    exact = expected.exact_verdict(result)  # the common case: all exact
    if exact is not None:
        return exact
    want = expected.final
    replayed = [(s, snap) for s, snap in enumerate(result.replays) if snap is not None]
    ends = expected.ends(len(result.replays)) if replayed else []
    checks = [("after the forward pass", result.forward, want),
              ("after backward", result.final, want)]
    checks += [(f"replay of segment {s}", snap, ends[s]) for s, snap in replayed]
    total, notes = 0, []
    for label, got, expected_state in checks:
        d = diff_states(got, expected_state)
        total += d.bytes
        if not d.exact:
            notes.append(f"{label}: " + "; ".join(d.notes))
    if notes:
        return Verdict(Outcome.DIVERGE, float(total), "; ".join(notes))
    return exact_match(len(replayed))


def _expected(execution: Execution | ExpectedStates) -> ExpectedStates:
    return execution if isinstance(execution, ExpectedStates) else ExpectedStates(execution)


def exact_match(replays: int) -> Verdict:
    """The bytes verdict of an engine whose forward end, final state and ``replays``
    segment replays are all exact."""
    return Verdict(Outcome.MATCH, 0.0, f"final state and {replays} segment replays exact "
                   "(bytes and generator)")


def _engines(names: Sequence[str | Engine] | None) -> list[tuple[str, Engine]]:
    if names is None:  # the registered engines: found by their names as they are
        return [(name, registry.get(name)) for name in registry.engine_names()]
    out = []
    for item in names:
        if isinstance(item, str):
            name = registry.resolve(item)
            out.append((name, registry.get(name)))
        else:
            out.append((item.name, item))
    return out


_TAKES_RUNNER: dict[Any, bool] = {}  # an engine class's ``run`` -> whether it takes one


def takes_runner(engine: Engine) -> bool:
    """Whether ``engine.run`` has a ``runner`` parameter (the built-in engines' ``run``
    does; the :class:`Engine` protocol needs none)."""
    # the answer is kept per class's ``run``; an instance's own ``run`` is asked each time
    own = "run" in getattr(engine, "__dict__", {})
    fn = None if own else getattr(type(engine), "run", None)
    hit = _TAKES_RUNNER.get(fn) if fn is not None else None
    if hit is None:
        try:
            params = inspect.signature(engine.run).parameters
        except (TypeError, ValueError):  # (a callable without a signature)
            params = {}
        runner = params.get("runner")
        hit = runner is not None and runner.kind in (inspect.Parameter.KEYWORD_ONLY,
                                                     inspect.Parameter.POSITIONAL_OR_KEYWORD)
        if fn is not None:
            _TAKES_RUNNER[fn] = hit
    return hit


def _run(engine: Engine, expected: ExpectedStates, reference: np.ndarray | None,
         xp: ModuleType | None = None, memo: Memo | None = None
         ) -> tuple[EngineResult, Verdict, Verdict, float]:
    t0 = time.perf_counter()
    extra: dict[str, Any] = {} if xp is None else {"xp": xp}  # NumPy-only engines need
    # not take ``xp``, and the Engine protocol has no ``runner``
    if memo is not None and takes_runner(engine):
        extra["runner"] = memo
    # a plug-in's sys.exit, its own KeyboardInterrupt or a result of another kind: an error
    result = checked(call(engine.run, expected.program, admission=expected.admission,
                          **extra), EngineResult, "the engine's run")
    grad = expected.gradient_verdict(result, reference)
    byt = bytes_verdict(result, expected)
    return result, grad, byt, time.perf_counter() - t0


def engine_records(program: Program, execution: Execution | ExpectedStates,
                   reference_gradient: np.ndarray | None,
                   engines: Sequence[str | Engine] | None = None,
                   program_id: str | None = None, *,
                   mutants: bool | Sequence[str] = False,
                   xp: ModuleType | None = None) -> list[Record]:
    """Run each engine on ``program`` and judge it against ``execution`` (SPEC §5).

    ``engines``: the systems under test, as names (registered, ``policy:...`` or
    ``module:attr``) or engine objects; None means every registered engine that is not
    a mutant. Each gives a ``gradient`` and a ``bytes`` record (``error`` records if it
    raises), a mutant named here included. ``mutants`` (True: every registered mutant)
    adds the mutants as controls: one ``mutant:...`` record each, see
    :func:`mutant_records`. ``xp`` runs the engines on that array module (for example
    CuPy); they are judged against the NumPy interpreter all the same. The engines and
    mutants share one :class:`Memo`, opened here for this check. ``execution``: the
    execution judged against, or the :class:`ExpectedStates` taken from it.
    """
    label = program_label(program, program_id)
    sha = program.sha256
    records: list[Record] = []
    expected = _expected(execution)  # one snapshot of (B_T, R_T) for every engine
    memo = Memo()
    for name, engine in _engines(engines):
        t0 = time.perf_counter()
        try:
            result, grad, byt, seconds = _run(engine, expected, reference_gradient, xp, memo)
        except Exception as exc:  # one record per check, never dropped
            err = error_verdict(exc)
            records += [make_record(label, sha, c, err, time.perf_counter() - t0, name)
                        for c in (GRADIENT, BYTES)]
            continue
        metrics = result.metrics
        del result  # (its states and gradient: not held while the next engine runs)
        for check, v in ((GRADIENT, grad), (BYTES, byt)):
            records.append(make_record(label, sha, check, v, seconds, name, metrics))
    if mutants:
        names = None if mutants is True else mutants
        records += mutant_records(program, expected, reference_gradient, names, label,
                                  memo=memo)
    return records


def mutant_records(program: Program, execution: Execution | ExpectedStates,
                   reference_gradient: np.ndarray | None,
                   mutants: Sequence[str] | None = None,
                   program_id: str | None = None, *, memo: Memo | None = None) -> list[Record]:
    """One control record per mutant (default: every registered one): ``check`` and
    ``engine`` are its name; ``detected`` when its gradient or bytes check diverges (or
    it raises), ``missed`` when both match. ``memo``: the check's (one is opened when
    None). ``execution``: as for :func:`engine_records`."""
    label = program_label(program, program_id)
    sha = program.sha256
    records = []
    expected = _expected(execution)
    memo = Memo() if memo is None else memo
    for name in registry.mutant_names() if mutants is None else mutants:
        t0 = time.perf_counter()
        try:
            result, grad, byt, seconds = _run(registry.get(name), expected,
                                              reference_gradient, memo=memo)
        except Exception as exc:
            raised = Verdict(Outcome.DETECTED, None, f"raised {type(exc).__name__}: {exc}")
            records.append(make_record(label, sha, name, raised, time.perf_counter() - t0,
                                       name))
            continue
        found = [f"{c}: {v.detail}" for c, v in ((GRADIENT, grad), (BYTES, byt))
                 if v.outcome is Outcome.DIVERGE]
        v = Verdict(Outcome.DETECTED if found else Outcome.MISSED, grad.max_abs_err,
                    "; ".join(found) or "gradient and bytes both matched")
        records.append(make_record(label, sha, name, v, seconds, name, result.metrics))
        del result  # (not held while the next mutant runs)
    return records
