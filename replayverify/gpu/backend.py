"""Which array module runs the engines: NumPy always, CuPy when it is installed and a device exists.

Detection follows array-api-compat: :func:`installed` asks ``importlib.util.find_spec`` and never
imports CuPy. Only :func:`available` (and what uses the GPU) imports CuPy, and only once it is
known to be installed, because whether a CUDA device exists can only be asked through it. This
module and the rest of ``replayverify/gpu`` are the only places that import ``cupy``.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

import numpy as np

from replayverify.programs.arrays import (  # noqa: F401  (re-exported)
    is_cupy_array,
    is_cupy_module,
    namespace_of,
    to_host,
)

INSTALL_HINT = "CuPy is not installed (pip install 'replayverify[gpu]')"
NO_DEVICE = "no CUDA device"

_loaded: tuple[ModuleType | None, str] | None = None


class GpuUnavailable(RuntimeError):
    """The CuPy backend was asked for but cannot run here; the message says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"GPU backend unavailable: {reason}")
        self.reason = reason


def installed() -> bool:
    """Whether CuPy can be imported, decided without importing it."""
    try:
        return importlib.util.find_spec("cupy") is not None
    except (ImportError, ValueError):  # a broken or half-removed installation
        return False


def _load() -> tuple[ModuleType | None, str]:
    """Import CuPy once and ask for a device: (module, "") or (None, reason). Cached."""
    global _loaded
    if _loaded is not None:
        return _loaded
    if not installed():
        # Not cached: installing CuPy later in the same process is then noticed.
        return None, INSTALL_HINT
    try:
        cp = importlib.import_module("cupy")
    except Exception as exc:  # any import failure means "unavailable"
        _loaded = (None, f"CuPy failed to import: {type(exc).__name__}: {exc}")
        return _loaded
    try:
        count = int(cp.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError when there is no driver
        _loaded = (None, f"{NO_DEVICE} ({type(exc).__name__}: {exc})")
        return _loaded
    _loaded = (cp, "") if count > 0 else (None, NO_DEVICE)
    return _loaded


def unavailable_reason() -> str:
    """Why the GPU backend cannot run ("" when it can)."""
    return _load()[1]


def available() -> bool:
    """Whether the CuPy backend can run: CuPy installed, importable, and a CUDA device present."""
    return _load()[0] is not None


def require_cupy() -> ModuleType:
    """The ``cupy`` module, or :class:`GpuUnavailable` naming the reason."""
    cp, reason = _load()
    if cp is None:
        raise GpuUnavailable(reason)
    return cp


def get_xp(name: str = "numpy") -> ModuleType:
    """The array module called ``name`` ("numpy" or "cupy") for the engines' ``xp`` parameter."""
    if name == "numpy":
        return np
    if name == "cupy":
        return require_cupy()
    raise ValueError(f"unknown array backend {name!r}; expected 'numpy' or 'cupy'")


# The array-module helpers live in ``programs.arrays`` (one set for the whole package);
# they are re-exported here as part of the backend's public surface.
to_numpy = to_host
