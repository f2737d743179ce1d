"""The RawModule built from ``kernels.cu``: compiled lazily on first use, cached per device."""

from __future__ import annotations

from importlib import resources
from types import ModuleType
from typing import Any

# NVRTC options: C++17 for the hex float literals; no fused multiply-add, so that every
# operation of SPEC §2 is rounded on its own as NumPy rounds it.
NVRTC_OPTIONS = ("-std=c++17", "--fmad=false")
BLOCK = 256
BLOCKS_PER_SM = 8

_modules: dict[int, Any] = {}
_sm_counts: dict[int, int] = {}


def source() -> str:
    """The CUDA source of every kernel (the package data file ``kernels.cu``)."""
    return resources.files("replayverify.gpu").joinpath("kernels.cu").read_text(encoding="utf-8")


def function(cp: ModuleType, name: str) -> Any:
    """The RawKernel ``name`` of the module for the current device (compiled on first use)."""
    device = cp.cuda.Device().id
    module = _modules.get(device)
    if module is None:
        module = cp.RawModule(code=source(), options=NVRTC_OPTIONS)
        _modules[device] = module
    return module.get_function(name)


def grid(cp: ModuleType, n: int) -> tuple[tuple[int], tuple[int]]:
    """A grid-stride launch shape for ``n`` work items: at most BLOCKS_PER_SM blocks per SM."""
    device = cp.cuda.Device().id
    sms = _sm_counts.get(device)
    if sms is None:
        sms = int(cp.cuda.Device(device).attributes["MultiProcessorCount"])
        _sm_counts[device] = sms
    blocks = max(1, min(-(-n // BLOCK), sms * BLOCKS_PER_SM))
    return (blocks,), (BLOCK,)
