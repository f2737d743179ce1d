"""Run every check on one program and return one record per (program, check, engine).

The interpreter runs once; each check then runs on that execution, and an exception
inside a check becomes an ``error`` record carrying its message, so no record is
ever dropped. Records come in a fixed order: forward-jacobian, complex-step, bytes,
control:final-storage, control:wrong-rng, then the engines' gradient and bytes.
The program's plain run from B_0, which the forward Jacobian, the complex step and the
byte check each need, is made once (``reference_run``) and handed to the three.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import numpy as np

from replayverify.engines.base import Engine
from replayverify.programs.errstate import quiet
from replayverify.programs.interpreter import Execution, execute, op_steps
from replayverify.programs.model import OP_SPECS, PerProgram, Program
from replayverify.programs.state import layouts
from replayverify.verifier.bytes_check import reference_bytes_verdict
from replayverify.verifier.compare import Verdict, compare_gradients, error_verdict
from replayverify.verifier.complex_step import complex_step
from replayverify.verifier.controls import final_storage_control, wrong_rng_control
from replayverify.verifier.engine_checks import ExpectedStates, engine_records
from replayverify.verifier.forward_jacobian import (
    PRECISION,
    ForwardJacobian,
    address_count,
    forward_jacobian,
)
from replayverify.verifier.records import Check, Outcome, Record, make_record, program_label
from replayverify.verifier.reference_run import ReferenceRun, first_draw, reference_run

# The checks ``check`` can run, in record order; the engines report GRADIENT and BYTES.
CHECKS = (Check.GRADIENT, Check.FORWARD_JACOBIAN, Check.COMPLEX_STEP, Check.BYTES,
          Check.FINAL_STORAGE, Check.WRONG_RNG)
REFERENCE_CHECKS = CHECKS[1:]
ENGINE_CHECKS = (Check.GRADIENT, Check.BYTES)  # the checks engine_records reports per engine


SECOND_H = 1e-20  # the complex step's second step size, to test a diverge for stability
MAX_SHADOW_BYTES = 2 * 2**30  # the most a derivative reference may allocate, all arrays
PRECISION_BYTES = np.dtype(PRECISION).itemsize  # the forward Jacobian's tangent entries
PER_PROGRAM = PerProgram()  # the references' size estimates, derived once per program


class TooLarge(Exception):
    """A derivative reference would need more memory than MAX_SHADOW_BYTES."""


def reference_bytes(program: Program, check: str) -> tuple[int, int]:
    """(peak, shadow) bytes a derivative reference holds: every array it allocates.

    The shadow (coordinates x addresses for the forward Jacobian, x 8-byte words for the
    complex step) lives throughout, beside the forward Jacobian's tags (int64, counted
    per buffer byte: a bound, they are kept per 4-byte word, and only where needed);
    on top comes the largest working set of one step: an op's source tangents (gathered
    and masked: 2 arrays per source) and its rule's temporaries and result (3 per
    destination), the inputs' seeds or the loss's tangents and weighted product. Each of
    those is (elements x coordinates) in the reference's precision.
    """
    return PER_PROGRAM.carried(program, ("reference_bytes", str(check)), _reference_bytes, check)


def _reference_bytes(program: Program, check: str) -> tuple[int, int]:
    # the same for both references: derived once
    sizes = PER_PROGRAM.carried(program, "reference_sizes", _reference_sizes)
    if check == Check.FORWARD_JACOBIAN:
        item = PRECISION_BYTES
        shadow = address_count(program) * sizes.coords * item
        # an op's working set, per element: 2 per source, 3 per destination
        fixed, seed, op_max = shadow + 8 * program.nbytes, item, item * sizes.fj_op_max
        per_dst = 3 * item
    else:  # complex step: float64 imaginary parts, complex128 operands and results
        shadow = sum(-(-b.nbytes // 8) for b in program.buffers) * sizes.coords * 8
        # an op's working set, per element: 8 + 16 per source, 3 * 16 per destination
        fixed, seed, op_max, per_dst = shadow, 8, 24 * sizes.cs_op_max, 3 * 16
    return fixed + sizes.coords * max(sizes.inputs_max * seed, sizes.loss * per_dst,
                                      op_max), shadow


class _Sizes(NamedTuple):
    """What both references' estimates count, derived once per program."""

    coords: int  # input coordinates
    inputs_max: int  # elements of the largest input
    loss: int  # elements of the loss view
    fj_op_max: int  # max over float ops of 2 * source elements + 3 * destination elements
    cs_op_max: int  # max over float ops of source elements + 2 * destination elements


def _reference_sizes(program: Program) -> _Sizes:
    lay = layouts(program)
    fj_op_max = cs_op_max = 0  # (0: no float op; every other term is >= 0)
    # (the interpreter's op steps, derived once: a float op's ``sources`` are its value
    # sources' layouts; a plain loop: a comprehension per op costs more than its items)
    for step in op_steps(program):
        if step.dtype.kind == "f":  # (the destination's dtype: a float op)
            src = 0
            for _, lo in step.sources:
                src += lo.size
            fj, cs = 2 * src + 3 * step.size, src + 2 * step.size
            if fj > fj_op_max:  # (comparisons: a max() call per op costs more)
                fj_op_max = fj
            if cs > cs_op_max:
                cs_op_max = cs
    inputs = [lay[name].size for name in program.inputs]
    return _Sizes(sum(inputs), max(inputs, default=0), lay[program.loss.view].size,
                  fj_op_max, cs_op_max)


# The most value sources an op reads (x, y): what bounds an op's working set below.
MAX_SOURCES = max(len(spec.sources) for spec in OP_SPECS.values())


def _reference_bound(program: Program) -> int:
    """An upper bound of both references' ``reference_bytes`` peaks from a few counts:
    with E elements over all views, V the largest view, C input coordinates, N buffer
    bytes in B buffers and S = MAX_SOURCES, every count the estimates take is at most
    its bound here (addresses <= E, 8-byte words <= (N + 7B) / 8, an input, the loss
    and each source or destination <= V elements), so the forward Jacobian's peak is at
    most P C (E + (2S + 3) V) + 8 N (P = PRECISION_BYTES) and the complex step's
    C (N + 7B) + 24 (S + 2) C V."""
    lay = layouts(program)
    total = largest = 0
    for lo in lay.values():  # (a plain loop: comprehensions cost more than these items)
        total += lo.size
        if lo.size > largest:
            largest = lo.size
    coords = 0
    for name in program.inputs:
        coords += lay[name].size
    nbytes, n_buffers, s = program.nbytes, len(program.buffers), MAX_SOURCES
    return max(PRECISION_BYTES * coords * (total + (2 * s + 3) * largest) + 8 * nbytes,
               coords * (nbytes + 7 * n_buffers) + 24 * (s + 2) * coords * largest)


def _guard(what: str, program: Program, check: str) -> None:
    # (the exact estimate only when the bound does not already show it fits: for the
    # suite's programs, none; the bound costs a third of the estimate)
    if PER_PROGRAM.carried(program, "reference_bound", _reference_bound) <= MAX_SHADOW_BYTES:
        return
    peak, shadow = reference_bytes(program, check)
    if peak > MAX_SHADOW_BYTES:
        raise TooLarge(f"{what} would need {peak / 2**30:.3g} GiB ({shadow / 2**30:.3g} GiB "
                       "of shadow storage, input coordinates x elements, plus working "
                       f"arrays), over the {MAX_SHADOW_BYTES / 2**30:g} GiB limit: not run")


def forward_jacobian_verdict(ex: Execution, fj: ForwardJacobian) -> Verdict:
    """Version-graph gradient against the forward Jacobian, admission cross-checked."""
    adm = ex.admission
    if not adm.supported:
        if fj.supported:
            return Verdict(Outcome.DIVERGE, None, f"the interpreter refuses ({adm.reason}) "
                           "but every tangent the forward Jacobian read was defined")
        if fj.refused_op != adm.op:
            return Verdict(Outcome.DIVERGE, None, "admission disagrees: interpreter: "
                           f"{adm.reason}; forward Jacobian: {fj.reason}")
        return Verdict(Outcome.UNSUPPORTED, None, f"{adm.reason} (nothing compared)")
    if not fj.supported:
        return Verdict(Outcome.DIVERGE, None,
                       f"the interpreter admits the derivative but {fj.reason}")
    return compare_gradients(ex.gradient, fj.gradient, ex.program, both_references=True)


def complex_step_verdict(ex: Execution, run: Callable[[], ReferenceRun] | None = None
                         ) -> Verdict:
    """Version-graph gradient against the complex step (``run``: the program's plain run
    from B_0, made on first call; None: the complex step runs the ops itself)."""
    try:
        _guard("the complex step", ex.program, Check.COMPLEX_STEP)
        ops = None if run is None else run().ops
        # Only a diverge asks whether the step left the linear regime (``perturbed``):
        # then a second, otherwise identical run watches the real parts.
        cs = complex_step(ex.program, refusal=ex.admission.reason, watch=False, run=ops)
    except TooLarge as exc:
        return Verdict(Outcome.UNSUPPORTED, None, str(exc))
    except MemoryError:  # the estimate is a bound of the arrays, not of the machine's memory
        return Verdict(Outcome.UNSUPPORTED, None, "the complex step ran out of memory "
                       f"(estimated {reference_bytes(ex.program, Check.COMPLEX_STEP)[0]} "
                       "bytes): not run")
    if not cs.supported:
        return Verdict(Outcome.UNSUPPORTED, None, f"{cs.reason} (nothing compared)")
    v = compare_gradients(ex.gradient, cs.gradient, ex.program, both_references=True)
    if v.outcome is not Outcome.DIVERGE:
        return v
    watched = complex_step(ex.program, refusal=ex.admission.reason, run=ops)  # watching
    if watched.perturbed is not None:
        return Verdict(Outcome.UNSUPPORTED, None, f"the complex step left the linear regime "
                       f"at op {watched.perturbed} (its real parts moved away from the "
                       f"forward pass: i*h times a huge coefficient is no small step), so it "
                       f"cannot judge here: {v.detail}")
    # With h = 1e-200 the imaginary parts leave float64's normal range when a derivative
    # is below ~1e-108 (or far above 1): a step that changes with h cannot judge. A
    # diverge stands only when a second step, h = 1e-20, agrees with it.
    again = complex_step(ex.program, refusal=ex.admission.reason, h=SECOND_H, watch=False,
                         run=ops)
    stable = compare_gradients(cs.gradient, again.gradient, ex.program, both_references=True)
    if stable.outcome is not Outcome.MATCH:
        return Verdict(Outcome.UNSUPPORTED, None, "the complex step changes with h "
                       f"(1e-200 vs {SECOND_H:g}: {stable.detail}), so it cannot judge "
                       f"here: {v.detail}")
    extreme = extreme_magnitude(ex)
    if extreme:
        return Verdict(Outcome.UNSUPPORTED, None, f"{extreme}: beyond the range the "
                       f"complex step resolves with h = 1e-200, so it cannot judge here: "
                       f"{v.detail}")
    return v


RESOLVED = (1e-100, 1e100)  # magnitudes whose products with h (and tangents) stay normal


def extreme_magnitude(ex: Execution) -> str:
    """The first float coefficient or operand value of magnitude outside [1e-100, 1e100]
    (zero aside), or "": with h = 1e-200 its product with an imaginary part underflows
    (a subnormal coefficient makes i*a*h exactly 0) or is no small step."""
    lo, hi = RESOLVED
    for rec in ex.records:
        if not rec.float_op:
            continue
        for c in rec.op.spec.coefs:
            mag = abs(float(rec.op.coef(c.name)))
            if mag and not lo <= mag <= hi:
                return f"op {rec.index} coefficient {c.name} = {rec.op.coef(c.name)!r}"
        for f, vals in rec.operands.items():
            if f == "index":
                continue
            mag = np.abs(np.asarray(vals, np.float64))
            odd = (mag > 0) & ((mag < lo) | (mag > hi))
            if odd.any():
                j = int(np.flatnonzero(odd)[0])
                return f"op {rec.index} operand {f} element {j} = {float(vals[j])!r}"
    return ""


def _error(label: str, sha: str, check: Check | str, exc: BaseException,
           seconds: float = 0.0, engine: str = "") -> Record:
    return make_record(label, sha, check, error_verdict(exc), seconds, engine)


def check_execution(
    ex: Execution,
    *,
    program_id: str | None = None,
    engines: Sequence[str | Engine] | None = None,
    checks: Iterable[str] | None = None,
    mutants: bool = False,
) -> list[Record]:
    """Every requested check on an execution (the artifact under test).

    ``engines`` None runs every registered engine, () none; ``mutants`` asks the engine
    checks for their deliberately broken engines as well.
    """
    return _check(ex.program, ex, program_id=program_id, engines=engines,
                  wanted=_wanted(checks), mutants=mutants)


def _wanted(checks: Iterable[str] | None) -> tuple[Check, ...]:
    if checks is None:
        return CHECKS
    checks = tuple(checks)
    unknown = [c for c in checks if c not in CHECKS]
    if unknown:
        raise ValueError(f"unknown check {str(unknown[0])!r}; known: {', '.join(CHECKS)}")
    return tuple(Check(c) for c in checks)


def check_program(
    program: Program,
    *,
    program_id: str | None = None,
    engines: Sequence[str | Engine] | None = None,
    checks: Iterable[str] | None = None,
    mutants: bool = False,
) -> list[Record]:
    """Run the interpreter once, then every requested check: one record per check."""
    return _check(program, None, program_id=program_id, engines=engines,
                  wanted=_wanted(checks), mutants=mutants)


@quiet
def _check(program: Program, ex: Execution | None, *, program_id: str | None,
           engines: Sequence[str | Engine] | None, wanted: tuple[Check, ...],
           mutants: bool) -> list[Record]:
    """:func:`check_execution` of ``ex``; None: of ``execute(program)``, run here and let go
    before the engines run (``ExpectedStates.let_go``: they are judged against what was
    taken from it), so that a large program's records and version ids are not held
    beside the engines' runs."""
    label, sha = program_label(program, program_id), program.sha256
    own = ex is None
    if own:
        t0 = time.perf_counter()
        try:
            ex = execute(program)
        except Exception as exc:
            seconds = time.perf_counter() - t0
            return [_error(label, sha, c, exc, seconds) for c in wanted]
    records: list[Record] = []
    fj: list[ForwardJacobian] = []  # computed once, for its record and the engines
    plain: list[ReferenceRun] = []  # the program's plain run, made once for the references

    def reference() -> ReferenceRun:
        if not plain:
            # (from (B_0, R_0) as this check's own execution recorded it: one copy of
            # those bytes for both)
            plain.append(reference_run(program, ex.boundaries[0] if own else None))
        return plain[0]

    def run(check: Check, fn: Callable[[], Verdict]) -> None:
        t0 = time.perf_counter()
        try:
            v = fn()
        except Exception as exc:  # one record per check, never dropped
            records.append(_error(label, sha, check, exc, time.perf_counter() - t0))
            return
        records.append(make_record(label, sha, check, v, time.perf_counter() - t0))

    def jacobian() -> ForwardJacobian:
        if not fj:
            _guard("the forward Jacobian", program, Check.FORWARD_JACOBIAN)
            try:
                fj.append(forward_jacobian(program, run=reference().ops))
            except MemoryError:
                peak = reference_bytes(program, Check.FORWARD_JACOBIAN)[0]
                raise TooLarge(f"the forward Jacobian ran out of memory (estimated {peak} "
                               "bytes): not run") from None
        return fj[0]

    def jacobian_verdict() -> Verdict:
        try:
            return forward_jacobian_verdict(ex, jacobian())
        except TooLarge as exc:
            return Verdict(Outcome.UNSUPPORTED, None, str(exc))

    if Check.FORWARD_JACOBIAN in wanted:
        run(Check.FORWARD_JACOBIAN, jacobian_verdict)
    if Check.COMPLEX_STEP in wanted:
        run(Check.COMPLEX_STEP, lambda: complex_step_verdict(ex, reference))
    if Check.BYTES in wanted:
        run(Check.BYTES, lambda: reference_bytes_verdict(ex, reference()))
    if first_draw(program) is None:
        # (past the references, only the wrong-rng control takes the plain run, and only
        # from a program that draws: not held through the final-storage sweeps; made
        # again if the engines' forward Jacobian, not yet run, needs it)
        plain.clear()
    if Check.FINAL_STORAGE in wanted:
        run(Check.FINAL_STORAGE, lambda: final_storage_control(ex))
    if Check.WRONG_RNG in wanted:
        # (the plain run when a reference made it; not made for this control alone, which
        # would run the whole program to save the few ops before the first draw)
        run(Check.WRONG_RNG, lambda: wrong_rng_control(ex, plain[0] if plain else None))

    engine_wanted = [c for c in ENGINE_CHECKS if c in wanted]
    if not (engine_wanted and (engines is None or len(engines) or mutants)):
        return records
    t0 = time.perf_counter()
    try:
        reference_gradient = jacobian().gradient
    except TooLarge:  # the engines are compared with the version graph instead
        reference_gradient = None
    except Exception as exc:  # the engines' gradient has no reference: say so
        reference_gradient = None
        records.append(_error(label, sha, Check.GRADIENT, exc, engine="*"))
    plain.clear()  # (the references are done: the engines need not hold the plain run)
    try:
        expected = ExpectedStates(ex)
        if own:  # (made here: the engines need only what was taken from it)
            expected.let_go()
            del ex
        extra = {"mutants": True} if mutants else {}
        got = engine_records(program, expected, reference_gradient, engines, label, **extra)
    except Exception as exc:
        records.append(_error(label, sha, Check.GRADIENT, exc, time.perf_counter() - t0,
                              engine="*"))
    else:
        records.extend(r for r in got if r.check in engine_wanted
                       or r.check.startswith("mutant:"))
    return records


def check_isolated(program: Program, *, timeout: float, program_id: str | None = None,
                   engines: Sequence[str | Engine] | None = None,
                   mutants: bool = False) -> list[Record]:
    """:func:`check_program` in a worker process: past ``timeout`` seconds one ``error``
    record says so, and a worker still running ``HARD_GRACE`` s later (an engine that
    swallows the timeout, or hangs in C) or that ends its process (``os._exit``) is one
    ``error`` record ``lost: ...``; this process goes on either way."""
    from replayverify.runs import executors

    label, sha = program_label(program, program_id), program.sha256

    def one(_: int) -> list[Record]:
        t0 = time.perf_counter()
        try:
            with executors.time_limit(timeout):
                return check_program(program, program_id=program_id, engines=engines,
                                     mutants=mutants)
        except executors.TaskTimeout:
            v = Verdict(Outcome.ERROR, None, f"timed out after {timeout:g} s")
            return [make_record(label, sha, Check.PROGRAM, v, time.perf_counter() - t0)]

    def lost(_: int, reason: str) -> list[Record]:
        return [make_record(label, sha, Check.PROGRAM, Verdict(Outcome.ERROR, None,
                                                                f"lost: {reason}"))]

    pool = executors.ProcessPool(1, limit=timeout + executors.HARD_GRACE)
    return next(iter(pool.map(one, [0], name=str, lost=lost)))


def rejected_record(program_id: str, reason: str, sha256: str = "") -> Record:
    """The one record of an input file that loading refuses (SPEC §2, §6)."""
    return make_record(program_id, sha256, Check.LOAD,
                       Verdict(Outcome.REJECTED, None, f"{reason} (not loaded; nothing compared)"))
