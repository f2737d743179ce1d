"""The CuPy device the calibration and the evaluation measure on: CUDA events for time, a
pool ``MemoryHook`` for allocated bytes, device memcpy for copies.

Its NumPy stand-in, and everything that uses either, live in
:mod:`replayverify.evaluate.calibrate` (``device(backend)``); this is the backend's part.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any


class CupyDevice:
    """CUDA events for time, a MemoryHook for allocated bytes, memcpy for copies."""

    max_reps = 200

    def __init__(self, cp: ModuleType) -> None:
        self.xp = cp
        self.name = "cupy"
        self.cp = cp

        class PeakHook(cp.cuda.MemoryHook):
            """Bytes taken from the pool minus bytes returned, and their maximum."""

            name = "replayverify-calibrate-peak"

            def __init__(self) -> None:
                self.now = 0
                self.top = 0

            def malloc_postprocess(self, **kw: Any) -> None:
                if kw.get("mem_ptr"):
                    self.now += int(kw["mem_size"])
                    self.top = max(self.top, self.now)

            def free_postprocess(self, **kw: Any) -> None:
                self.now -= int(kw["mem_size"])

        self.hook = PeakHook()
        self.tracking_depth = 0

    def describe(self) -> dict[str, Any]:
        cp = self.cp
        dev = cp.cuda.Device()
        props = cp.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        return {
            "backend": "cupy",
            "name": name.decode() if isinstance(name, bytes) else str(name),
            "device_id": dev.id,
            "total_memory_bytes": int(props["totalGlobalMem"]),
            "compute_capability": f"{props['major']}.{props['minor']}",
            "cupy": cp.__version__,
            "cuda_runtime": int(cp.cuda.runtime.runtimeGetVersion()),
            "cuda_driver": int(cp.cuda.runtime.driverGetVersion()),
        }

    def sync(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()

    def mark(self) -> Any:
        ev = self.cp.cuda.Event()
        ev.record()
        return ev

    def elapsed(self, a: Any, b: Any) -> float:
        b.synchronize()
        return self.cp.cuda.get_elapsed_time(a, b) / 1e3

    @contextmanager
    def tracking(self) -> Iterator[Any]:
        if self.tracking_depth:  # nested: the hook is already installed
            yield self
            return
        self.hook.now = self.hook.top = 0
        self.tracking_depth = 1
        try:
            with self.hook:
                yield self
        finally:
            self.tracking_depth = 0

    def current(self) -> int:
        return self.hook.now

    def reset_peak(self) -> None:
        self.hook.top = self.hook.now

    def peak(self) -> int:
        return self.hook.top

    def copy(self, dst: Any, src: Any) -> None:
        dst.data.copy_from_device_async(src.data, src.nbytes)

    def release(self) -> None:
        gc.collect()
        self.sync()
        self.cp.get_default_memory_pool().free_all_blocks()
