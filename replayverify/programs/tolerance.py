"""The gradient tolerance of SPEC §5, defined once for every layer that needs it."""

from __future__ import annotations

import numpy as np

from replayverify.programs.model import Program

EPS = {name: float(np.finfo(name).eps) for name in ("float64", "float32")}


def tolerance(dtype: str, n_ops: int, g_ref: np.ndarray) -> float:
    """|g - g_ref| <= 64 * eps(dtype) * n_ops * max(1, max|g_ref|)  (SPEC §5)."""
    eps = EPS.get(dtype) or float(np.finfo(np.dtype(dtype)).eps)
    g_ref = np.asarray(g_ref)
    scale = max(1.0, float(np.abs(g_ref).max())) if g_ref.size else 1.0
    return 64.0 * eps * n_ops * scale


def float_dtype(program: Program) -> str:
    """The program's float dtype for tolerances: float32 if any float view is float32."""
    return "float32" if any(v.dtype == "float32" for v in program.views) else "float64"


def program_tolerance(program: Program, g_ref: np.ndarray) -> float:
    """The tolerance for ``program``'s gradients (its float dtype found once per program)."""
    return tolerance(program.carried("float_dtype", float_dtype), len(program.ops), g_ref)
