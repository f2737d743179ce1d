"""Verdicts and the gradient comparison of SPEC §5, shared by the checkers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from replayverify.programs.errstate import quiet
from replayverify.programs.model import Program
from replayverify.programs.tolerance import float_dtype, program_tolerance
from replayverify.verifier.records import Outcome, max_abs_err

__all__ = ["Verdict", "compare_gradients", "error_verdict", "float_dtype"]


@dataclass(frozen=True)
class Verdict:
    """What one check found: outcome, the measured error and a one-line detail."""

    outcome: Outcome
    max_abs_err: float | None
    detail: str = ""


def error_verdict(exc: BaseException) -> Verdict:
    """The verdict of a check that raised: ``error`` with the exception's message."""
    return Verdict(Outcome.ERROR, None, f"{type(exc).__name__}: {exc}")


@quiet  # (inf - inf in the common-case test below is a legal value, not a fault)
def compare_gradients(g: np.ndarray, g_ref: np.ndarray, program: Program, *,
                      both_references: bool = False) -> Verdict:
    """``match`` iff |g - g_ref| <= 64 eps n_ops max(1, max|g_ref|) everywhere (SPEC §5).

    Identical non-finite entries compare equal. Where they differ and the reference is
    not finite (either side when ``both_references``: two references compared with each
    other), nothing can be judged there: ``unsupported`` ("non-finite reference at
    coordinate k"). ``diverge`` is kept for a gradient that differs from a finite reference.
    """
    g = np.asarray(g, np.float64)
    g_ref = np.asarray(g_ref, np.float64)
    if g.shape != g_ref.shape:
        return Verdict(Outcome.DIVERGE, None,
                       f"gradient shape {g.shape} != reference {g_ref.shape}")
    if g_ref.size == 0:
        return Verdict(Outcome.MATCH, 0.0, "no inputs: the gradient is empty")
    # A finite max |g - g_ref| means every entry of both is finite (inf - x and NaN - x are
    # not): the common case needs no finiteness masks.
    err = max_abs_err(g, g_ref)
    if not math.isfinite(err):
        finite = np.isfinite(g) & np.isfinite(g_ref)
        if not finite.all():
            bad = ~finite
            if not np.array_equal(g[bad], g_ref[bad], equal_nan=True):
                differ = bad & ~((g == g_ref) | (np.isnan(g) & np.isnan(g_ref)))
                ref_bad = ~np.isfinite(g_ref) | (~np.isfinite(g) if both_references else False)
                if (differ & ref_bad).any():
                    j = int(np.flatnonzero(differ & ref_bad)[0])
                    return Verdict(Outcome.UNSUPPORTED, None, f"non-finite reference at "
                                   f"coordinate {j}: {float(g[j])!r} vs reference "
                                   f"{float(g_ref[j])!r} (nothing compared)")
                j = int(np.flatnonzero(differ)[0])
                return Verdict(Outcome.DIVERGE, None, f"non-finite gradient at coordinate "
                               f"{j}: {float(g[j])!r} vs reference {float(g_ref[j])!r}")
            g, g_ref = g[finite], g_ref[finite]  # identical non-finite entries: the rest
            err = max_abs_err(g, g_ref)
    tol = program_tolerance(program, g_ref)
    if err <= tol:
        return Verdict(Outcome.MATCH, err, f"tolerance {tol:.3g}")
    j = int(np.argmax(np.abs(g - g_ref)))
    return Verdict(Outcome.DIVERGE, err, f"max_abs_err {err:.3g} > tolerance {tol:.3g} "
                   f"(coordinate {j}: {float(g[j])!r} vs reference {float(g_ref[j])!r})")
