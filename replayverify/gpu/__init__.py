"""The CuPy backend: array-module dispatch, region-journal and Philox kernels, calibration.

Importing this package never imports CuPy; :func:`available` says whether the backend can run
and :func:`unavailable_reason` why not. Submodules: ``journal`` (layout, NumPy reference, kernel
launches), ``philox`` (GPU Philox), ``calibrate`` (the cost calibration), ``cli``.
"""

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
