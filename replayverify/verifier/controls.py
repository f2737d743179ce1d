"""Negative controls (SPEC §5): deliberately wrong recoveries that the checks must catch.

``control:final-storage`` runs the reverse sweep with the operand values a reverse
rule depends on read from the final storage instead of the recorded versions, and
asks the gradient comparison to catch it. ``control:wrong-rng`` replays a drawing
segment from the wrong generator state (the visible final one, as a replay that
forgot to restore R_s would) and asks the byte comparison to catch it. A control that
cannot apply reports ``unsupported`` with the reason, never ``missed``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from replayverify.programs.interpreter import (
    REVERSE,
    Execution,
    ReverseRule,
    final_storage_operands,
    reverse_sweep,
)
from replayverify.programs.model import OP_SPECS, OpKind
from replayverify.verifier.bytes_check import diff_states, replay
from replayverify.verifier.compare import Verdict, compare_gradients
from replayverify.verifier.records import Outcome
from replayverify.verifier.reference_run import ReferenceRun, first_draw

Comparison = Callable[[np.ndarray, np.ndarray], Verdict]  # (g, g_ref) -> gradient verdict


def stale_reads(ex: Execution) -> list[str]:
    """'op k field' for every value a reverse rule depends on whose bytes differ at the end
    (``Execution.stale``, found once per execution)."""
    return [f"op {k} {ex.program.ops[k].kind.value} {f}" for k, f in ex.stale]


def _value_operand_kinds() -> str:
    """"mul, tanh, sin operand; gather, scatter index": the kinds with value operands."""
    def kinds(index: bool) -> str:
        return ", ".join(k.value for k, s in OP_SPECS.items()
                         if s.value_operands and ("index" in s.value_operands) == index)
    return f"{kinds(False)} operand; {kinds(True)} index"


def final_storage_control(ex: Execution, compare: Comparison | None = None, *,
                          reverse: Mapping[OpKind, ReverseRule | None] = REVERSE) -> Verdict:
    """Sweep with final-storage operands; ``compare(g, g_ref)`` returns a gradient Verdict.

    ``compare`` is the check under test; None: SPEC §5's gradient comparison itself (the
    one ``check`` runs), whose verdict on the pair is the applicability test's below.
    """
    if not ex.admission.supported:
        return Verdict(Outcome.UNSUPPORTED, None,
                       f"the derivative is not admitted: {ex.admission.reason}")
    stale = stale_reads(ex)
    if not stale:
        return Verdict(Outcome.UNSUPPORTED, None, "no value a reverse rule depends on "
                       f"({_value_operand_kinds()}) differs in the final storage")
    g_ref = ex.gradient
    if reverse is REVERSE:  # the same sweep, made once per execution (acceptance asks too)
        g_bad = ex.hazard_gradient
    else:
        g_bad = reverse_sweep(ex, reverse, operands=final_storage_operands(ex))
    where = ", ".join(stale[:4]) + (f" and {len(stale) - 4} more" if len(stale) > 4 else "")
    if np.array_equal(g_bad, g_ref, equal_nan=True):
        # The stale values feed no contribution that reaches an input (a zero adjoint,
        # a constant partner operand, an unchanged index mod n): nothing to detect.
        return Verdict(Outcome.UNSUPPORTED, None, f"stale values ({where}) do not reach the "
                       "gradient: the final-storage sweep reproduces it bit for bit")
    # Applicability, measured with SPEC §5's comparison itself: stale values that change
    # the gradient by no more than the tolerance are indistinguishable from rounding, and
    # a non-finite version-graph gradient gives nothing to compare with.
    effect = compare_gradients(g_bad, g_ref, ex.program)
    if effect.outcome is Outcome.MATCH:
        return Verdict(Outcome.UNSUPPORTED, effect.max_abs_err,
                       f"stale values ({where}) change the gradient by "
                       f"{effect.max_abs_err:.3g}, within the {effect.detail}: below what "
                       "any check can detect")
    if effect.outcome is Outcome.UNSUPPORTED:
        return Verdict(Outcome.UNSUPPORTED, None, f"{effect.detail}; stale: {where}")
    # the check under test must now see the difference
    v = effect if compare is None else compare(g_bad, g_ref)
    if v.outcome is Outcome.MATCH:
        return Verdict(Outcome.MISSED, v.max_abs_err,
                       f"final-storage gradient within tolerance ({v.detail}); stale: {where}")
    return Verdict(Outcome.DETECTED, v.max_abs_err, f"{v.detail}; stale: {where}")


def wrong_rng_control(ex: Execution, run: ReferenceRun | None = None) -> Verdict:
    """Replay the first drawing segment from R_T (or R_s + 1 block if R_T equals R_s).

    ``run``: the program's plain run from (B_0, R_0) (``check`` makes it once for the
    references). The segment's ops before its first drawing op read no generator state,
    so from either state they compute what the run computed there: when the run entered
    the segment exactly at the recorded (B_s, R_s), the replay starts from the run's state
    before that op (with the wrong generator state), else from (B_s, R_s).
    """
    program = ex.program
    # The first drawing segment is the one holding the program's first drawing op.
    drawing = first_draw(program)
    bounds = program.segment_bounds()
    s = None if drawing is None else next(
        (s for s, (lo, hi) in enumerate(bounds) if lo <= drawing < hi), None)
    if s is None:
        return Verdict(Outcome.UNSUPPORTED, None, "the program draws no random values")
    lo, hi = bounds[s]
    start, want = ex.boundaries[s], ex.boundaries[s + 1]
    wrong, how = ex.rng, "the final generator state R_T"
    if tuple(wrong) == tuple(start.rng):
        wrong, how = start.rng.advanced(1), "R_s advanced by one block"
    first = lo
    if run is not None and run.before_draw is not None and (
            run.ends[s - 1] if s else run.start) == start:
        start, first = run.before_draw, drawing
    d = diff_states(replay(program, start, first, hi, rng=wrong), want)
    label = f"segment {s} replayed from {how}"
    if d.exact:
        return Verdict(Outcome.MISSED, 0.0, f"{label}: bytes and generator state equal")
    return Verdict(Outcome.DETECTED, float(d.bytes),
                   f"{label}: {d.bytes} bytes differ; " + "; ".join(d.notes))
