"""The gradient tolerance of SPEC §5, defined once for every layer that needs it."""

from __future__ import annotations

import numpy as np

from replayverify.programs.model import Program


def tolerance(dtype: str, n_ops: int, g_ref: np.ndarray) -> float:
    """|g - g_ref| <= 64 * eps(dtype) * n_ops * max(1, max|g_ref|)  (SPEC §5)."""
    eps = float(np.finfo(np.dtype(dtype)).eps)
    scale = max(1.0, float(np.max(np.abs(g_ref)))) if np.size(g_ref) else 1.0
    return 64.0 * eps * n_ops * scale


def float_dtype(program: Program) -> str:
    """The program's float dtype for tolerances: float32 if any float view is float32."""
    return "float32" if any(v.dtype == "float32" for v in program.views) else "float64"


def program_tolerance(program: Program, g_ref: np.ndarray) -> float:
    return tolerance(float_dtype(program), len(program.ops), g_ref)
