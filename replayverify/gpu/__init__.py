"""The CuPy backend: array-module dispatch, the region-journal and Philox kernels, the device.

Importing this package never imports CuPy (nor :mod:`~replayverify.gpu.backend`: the names
below load on first use); :func:`available` says whether the backend can run and
:func:`unavailable_reason` why not. Submodules: ``backend`` (detection, ``get_xp``),
``journal`` (layout, NumPy reference, kernel launches), ``philox`` (GPU Philox), ``engines``
(the engines' journal on device), ``device`` (CUDA-event clock, pool memory hook), ``cli``.
The cost calibration and its report, and the per-segment policies it executes, are
:mod:`replayverify.evaluate`'s (``calibrate``, ``calibration_report``, ``segments``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replayverify.gpu.backend import (
        GpuUnavailable,
        available,
        get_xp,
        installed,
        is_cupy_array,
        namespace_of,
        to_numpy,
        unavailable_reason,
    )

__all__ = [
    "GpuUnavailable",
    "available",
    "get_xp",
    "installed",
    "is_cupy_array",
    "namespace_of",
    "to_numpy",
    "unavailable_reason",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("replayverify.gpu.backend"), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
