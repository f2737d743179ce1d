"""Philox4x32-10 on the GPU: the same words, uniforms and masks as ``replayverify.programs.philox``,
registered behind its one interface (``philox_for("cupy")`` is :data:`KERNELS`).

Each function takes the explicit generator state (:class:`RngState`) and a block count ``n`` and
launches one kernel of ``kernels.cu`` over blocks counter+0 .. counter+n-1 (128-bit carries).
Words and uniforms are bit-identical to the CPU; normals use the GPU's ``log1p`` and ``cos``, which
may differ from the CPU in the last place (SPEC §2 compares them by tolerance across backends).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replayverify.gpu import _kernels
from replayverify.gpu.backend import require_cupy
from replayverify.programs.philox import MASK32, MASK64, PhiloxImpl, RngState


def _args(state: RngState) -> tuple[np.uint32, np.uint32, np.uint64, np.uint64]:
    c = state.counter_int
    return (
        np.uint32(state.key[0] & MASK32),
        np.uint32(state.key[1] & MASK32),
        np.uint64(c & MASK64),
        np.uint64((c >> 64) & MASK64),
    )


def _launch(name: str, n: int, outputs: tuple, extra: tuple, state: RngState) -> None:
    cp = require_cupy()
    if n:
        blocks, threads = _kernels.grid(cp, n)
        _kernels.function(cp, name)(
            blocks, threads, (*outputs, np.uint64(n), *extra, *_args(state))
        )


def words(state: RngState, n: int) -> Any:
    """The (n, 4) Philox words of blocks counter+0 .. counter+n-1, uint64 like the CPU's."""
    cp = require_cupy()
    out = cp.empty((n, 4), dtype=cp.uint32)
    _launch("rv_philox_words", n, (out,), (), state)
    return out.astype(cp.uint64)


def uniforms(state: RngState, n: int) -> tuple[Any, Any]:
    """(u1, u2) float64 of the same n blocks, exactly as SPEC §2 and the CPU."""
    cp = require_cupy()
    u1 = cp.empty(n, dtype=cp.float64)
    u2 = cp.empty(n, dtype=cp.float64)
    _launch("rv_philox_uniforms", n, (u1, u2), (), state)
    return u1, u2


def normals(state: RngState, n: int) -> Any:
    """Box-Muller normals (float64) of the n blocks: sqrt(-2 log1p(-u1)) * cos(TWO_PI * u2)."""
    cp = require_cupy()
    z = cp.empty(n, dtype=cp.float64)
    _launch("rv_philox_normals", n, (z,), (), state)
    return z


def keep_mask(state: RngState, n: int, keep: float, dtype: Any) -> Any:
    """Dropout mask of the n blocks: 1 where u1 < keep else 0, in ``dtype``.

    ``keep`` is the coefficient already converted to the view's dtype (SPEC §2); it is widened
    to float64 exactly, as NumPy does when comparing it with u1.
    """
    cp = require_cupy()
    m = cp.empty(n, dtype=cp.uint8)
    _launch("rv_philox_keep", n, (m,), (np.float64(keep),), state)
    return m.astype(dtype)


# The kernels behind ``programs.philox``'s one Philox interface (registered there as
# "cupy"; ``philox_for("cupy")`` imports this module on first use).
KERNELS = PhiloxImpl("cupy", words, uniforms, normals, keep_mask)


def draw_normals(state: RngState, n: int) -> tuple[Any, RngState]:
    """n standard normals (float64) and the advanced state."""
    return normals(state, n), state.advanced(n)


def draw_uniforms(state: RngState, n: int) -> tuple[Any, RngState]:
    """n first uniforms u1 (float64) and the advanced state."""
    return uniforms(state, n)[0], state.advanced(n)
