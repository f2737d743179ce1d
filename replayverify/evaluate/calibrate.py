"""Cost calibration of eager, whole-snapshot and region preservation on one device.

The grid follows the paper's prespecified calibration: state buffers of 64 and 1,024 MiB,
write fractions 0.001 and 1, 1 and 64 live versions, 4,096-byte regions, and three workloads.

Model (one *step*; ``L`` live versions = ``L`` segments, each writing fraction ``f`` of the
float32 state buffer ``S`` of ``N`` bytes with a read-modify-write, and each needing its
pre-write values in backward):

- ``queue``: a feature queue (ring of 512-byte rows); segment k overwrites the next
  ``f * rows`` rows after the head, contiguously (wrapping): ``v = v * 0.5 + (k + 1)``.
- ``prototype``: prototype memory (1,024-byte rows); segment k updates ``f * rows`` rows chosen
  at random (fixed seed): ``v = v * 0.99 + 0.01 * (k + 1)``, scattered, so about four times
  more regions are touched than bytes written.
- ``recurrence``: an unrolled recurrence over a batch of 2,048-byte hidden states; segment k
  updates ``f * rows`` evenly strided rows (phase k): ``v = tanh(v * 0.9 + 0.1)``.

At ``f = 1`` every segment writes the whole buffer. The backward use of segment k is a sum over
its pre-write values. Methods:

- ``eager`` keeps a full pre-state copy per live version (``L * N`` bytes) and reads it.
- ``whole`` keeps one full snapshot taken before segment 0; backward restores ``S`` from it
  and replays the segments in order (reading each pre-write value on the way), which
  reproduces the visible state exactly.
- ``region`` saves, before each segment, a journal of the 4,096-byte regions it touches
  (``replayverify.gpu.journal``, the RawModule kernels on CuPy); backward undoes the journals
  in reverse order (reading each pre-state), then redoes them in order.

These are the uniform policies of :func:`replayverify.evaluate.segments.run_segmented` (whole with
``share_anchors``): the same per-segment mechanics that ``replayverify evaluate`` executes
for planned, mixed policies.

Before timing, one step of each method runs from the same initial state and the three must
agree bit for bit (final state and every backward sum); the cell records ``consistent``.

Measured per method: peak allocated bytes during a step above the bytes allocated when the
step starts (CuPy: a ``MemoryHook`` counting pool allocations minus frees, not the pool's
totals; NumPy: ``tracemalloc``), the mean synchronized step time (CUDA events), and, in one
extra instrumented step, the time spent preserving and recovering state. Device-to-device copy
bandwidth and journal save / restore / swap bandwidth are measured in the same run.

The NumPy backend runs the same code on the CPU for smoke tests; its numbers are not GPU numbers.
The report, targets and planner cards are written by
``replayverify.evaluate.calibration_report``. The CuPy device (CUDA events, a memory hook) is
:class:`replayverify.gpu.device.CupyDevice`; everything else here is the backend's user.
"""

from __future__ import annotations

import itertools
import os
import platform
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from replayverify.evaluate import segments as sg
from replayverify.evaluate.calibration_report import (
    METHODS,
    MIB,
    markdown,
    plot,
    profile_card,
    size_text,
    targets,
)
from replayverify.gpu import journal as jr
from replayverify.untrusted import dumps

WORKLOADS = ("queue", "prototype", "recurrence")
ROW_BYTES = {"queue": 512, "prototype": 1024, "recurrence": 2048}
SEED = 20240611


@dataclass(frozen=True, slots=True)
class Grid:
    """What to calibrate. Sizes in bytes; ``method_budget_s`` caps the measured steps per method."""

    buffers: tuple[int, ...] = (64 * MIB, 1024 * MIB)
    fractions: tuple[float, ...] = (0.001, 1.0)
    versions: tuple[int, ...] = (1, 64)
    workloads: tuple[str, ...] = WORKLOADS
    granularity: int = jr.GRANULARITY
    warmups: int = 3
    steps: int = 10
    min_steps: int = 3
    method_budget_s: float = 8.0
    journal_sizes: tuple[int, ...] = (1 * MIB, 16 * MIB, 256 * MIB)
    journal_buffer: int = 1024 * MIB
    time_budget_s: float = 240.0


FULL = Grid()
QUICK = Grid(
    buffers=(64 * MIB,),
    versions=(1, 4),
    warmups=1,
    steps=3,
    min_steps=2,
    journal_sizes=(1 * MIB, 16 * MIB),
    journal_buffer=64 * MIB,
    time_budget_s=120.0,
)


# --- devices: array module, clock and allocation tracking ---------------------------------------


def cpu_model() -> str | None:
    """The CPU's model name as Linux reports it (``/proc/cpuinfo``), else None: step times
    from two machines are only comparable knowing what each ran on."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


class _NumpyDevice:
    """CPU stand-in: perf_counter clock, tracemalloc allocation tracking."""

    max_reps = 20

    def __init__(self) -> None:
        self.xp = np
        self.name = "numpy"

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "numpy",
            "name": platform.processor() or platform.machine(),
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
        }

    def sync(self) -> None:
        pass

    def mark(self) -> Any:
        return time.perf_counter()

    def elapsed(self, a: Any, b: Any) -> float:
        return b - a

    @contextmanager
    def tracking(self) -> Iterator[Any]:
        was = tracemalloc.is_tracing()
        if not was:
            tracemalloc.start()
        try:
            yield self
        finally:
            if not was:
                tracemalloc.stop()

    def current(self) -> int:
        return tracemalloc.get_traced_memory()[0]

    def reset_peak(self) -> None:
        tracemalloc.reset_peak()

    def peak(self) -> int:
        return tracemalloc.get_traced_memory()[1]

    def copy(self, dst: Any, src: Any) -> None:
        np.copyto(dst, src)

    def release(self) -> None:
        pass  # reference counting has already freed the arrays


def array_module(backend: str) -> ModuleType:
    """The array module of ``backend`` ("numpy" or "cupy"; for "cupy" GpuUnavailable names
    why it cannot run). "numpy" never imports the CuPy backend (:mod:`replayverify.gpu.backend`)."""
    if backend == "numpy":
        return np
    from replayverify.gpu.backend import get_xp

    return get_xp(backend)


def device(backend: str) -> Any:
    """The device of ``backend`` ("numpy" or "cupy"): clock, allocation tracking, copy.
    CuPy's is :class:`replayverify.gpu.device.CupyDevice`."""
    xp = array_module(backend)  # raises GpuUnavailable with the reason
    if xp is np:
        return _NumpyDevice()
    from replayverify.gpu.device import CupyDevice

    return CupyDevice(xp)


# --- workloads ----------------------------------------------------------------------------------


@dataclass(slots=True)
class WriteSet:
    """The rows one segment writes: contiguous row ranges, or a sorted row index array."""

    ranges: list[tuple[int, int]]
    index: Any  # xp int64 array, or None when ``ranges`` is used
    rows: int
    layout: jr.JournalLayout


def _row_choice(workload: str, n_rows: int, m: int, k: int) -> np.ndarray | list[tuple[int, int]]:
    if m >= n_rows:
        return [(0, n_rows)]
    if workload == "queue":
        head = (k * m) % n_rows
        end = head + m
        return [(head, min(end, n_rows))] + ([(0, end - n_rows)] if end > n_rows else [])
    if workload == "prototype":
        rng = np.random.default_rng([SEED, n_rows, m, k])
        return np.sort(rng.choice(n_rows, size=m, replace=False)).astype(np.int64)
    stride = n_rows // m
    return np.sort((k + np.arange(m, dtype=np.int64) * stride) % n_rows)


def write_sets(
    xp: ModuleType, workload: str, nbytes: int, fraction: float, versions: int, granularity: int
) -> list[WriteSet]:
    """The write set of every segment of one cell, with its journal layout."""
    row = ROW_BYTES[workload]
    n_rows = nbytes // row
    m = max(1, min(n_rows, round(fraction * n_rows)))
    out = []
    for k in range(versions):
        choice = _row_choice(workload, n_rows, m, k)
        if isinstance(choice, list):
            starts = np.array([a * row for a, _ in choice], dtype=np.int64)
            stops = np.array([b * row for _, b in choice], dtype=np.int64)
            ranges, index = choice, None
        else:
            starts = choice * row
            stops = starts + row
            ranges, index = [], xp.asarray(choice)
        regions = jr.regions_for_ranges(starts, stops, granularity)
        out.append(WriteSet(ranges, index, m, jr.layout(nbytes, regions, granularity)))
    return out


def _update(workload: str, xp: ModuleType, v: Any, k: int) -> None:
    """The segment's read-modify-write, in place on ``v`` (float32)."""
    f32 = np.float32
    if workload == "queue":
        v *= f32(0.5)
        v += f32(k + 1)
    elif workload == "prototype":
        v *= f32(0.99)
        v += f32(0.01) * f32(k + 1)
    else:
        v *= f32(0.9)
        v += f32(0.1)
        xp.tanh(v, out=v)


def _apply(workload: str, xp: ModuleType, rows: Any, ws: WriteSet, k: int) -> None:
    if ws.index is None:
        for a, b in ws.ranges:
            _update(workload, xp, rows[a:b], k)
    else:
        v = rows[ws.index]
        _update(workload, xp, v, k)
        rows[ws.index] = v


def _use(xp: ModuleType, rows: Any, ws: WriteSet) -> Any:
    """The backward use of a segment's pre-write values: their float64 sum (a device scalar)."""
    if ws.index is None:
        return sum((xp.sum(rows[a:b], dtype=xp.float64) for a, b in ws.ranges), start=0.0)
    return xp.sum(rows[ws.index], dtype=xp.float64)


@dataclass(slots=True)
class _Cell:
    """One calibration cell as a :class:`~replayverify.evaluate.segments.SegmentedStep`: segment k
    reads the rows it is about to write (its backward use is their float64 sum) and writes
    them. Kept for backward by eager: the full pre-state; by replay: the sum itself."""

    xp: ModuleType
    workload: str
    nbytes: int
    fraction: float
    versions: int
    sets: list[WriteSet]
    state: Any = None
    dtype: Any = np.float32

    @property
    def segments(self) -> int:
        return self.versions

    def rows(self, buf: Any) -> Any:
        return buf.reshape(-1, ROW_BYTES[self.workload] // np.dtype(self.dtype).itemsize)

    def init_state(self) -> None:
        xp = self.xp
        dtype = np.dtype(self.dtype)
        n = self.nbytes // dtype.itemsize
        if self.state is None:
            self.state = xp.empty(n, dtype=dtype)
        chunk = 16 * MIB
        for a in range(0, n, chunk):  # chunked so that initialising never doubles the footprint
            b = min(n, a + chunk)
            idx = xp.arange(a, b, dtype=xp.int64)
            self.state[a:b] = (idx % 9973).astype(dtype) * dtype.type(1e-4)

    def reset(self) -> None:
        """The initial state (as for every method's first step)."""
        self.init_state()

    # the SegmentedStep protocol
    def layout(self, k: int) -> jr.JournalLayout:
        return self.sets[k].layout

    def begin(self) -> Any:
        return None

    def forward(self, k: int, carry: Any, *, keep: bool, write: bool) -> tuple[Any, Any]:
        rows, ws = self.rows(self.state), self.sets[k]
        saved = ("copy", self.state.copy()) if keep else ("sum", _use(self.xp, rows, ws))
        if write:
            _apply(self.workload, self.xp, rows, ws, k)
        return saved, None

    def seed(self, carry: Any) -> Any:
        return [None] * self.versions

    def backward(self, k: int, saved: Any, grad: Any) -> Any:
        kind, value = saved
        grad[k] = _use(self.xp, self.rows(value), self.sets[k]) if kind == "copy" else value
        return grad


# --- one step of each method: the uniform policies of replayverify.evaluate.segments -----------

def _step(method: str, dev: Any, cell: _Cell, phase: sg.Phase) -> list[Any]:
    """One step of ``cell`` with every segment preserved by ``method``; a whole method keeps
    one anchor for the whole run of segments (replayed once, in order, in backward)."""
    policy = (method,) * cell.versions
    return sg.run_segmented(cell, policy, copy=dev.copy, phase=phase, share_anchors=True)


STEPS = {m: partial(_step, m) for m in METHODS}


def _timed_step(dev: Any, cell: _Cell, method: str) -> tuple[float, int]:
    """(synchronized seconds, peak bytes above the bytes allocated at the start)."""
    dev.sync()
    dev.reset_peak()
    base = dev.current()
    a = dev.mark()
    out = STEPS[method](dev, cell, sg.no_phase)
    b = dev.mark()
    seconds = dev.elapsed(a, b)
    peak = dev.peak() - base
    del out
    return seconds, peak


def _phased_step(dev: Any, cell: _Cell, method: str) -> dict[str, float]:
    """Seconds per phase (preserve / recover / compute) of one instrumented step."""
    marks: list[tuple[str, Any]] = []

    def phase(name: str) -> None:
        marks.append((name, dev.mark()))

    dev.sync()
    phase("compute")
    STEPS[method](dev, cell, phase)
    phase("end")
    totals = dict.fromkeys(("preserve", "recover", "compute"), 0.0)
    for (name, a), (_, b) in itertools.pairwise(marks):  # segment marks count as compute
        totals[name if name in totals else "compute"] += dev.elapsed(a, b)
    return totals


def _consistency(dev: Any, cell: _Cell) -> tuple[bool, str]:
    """One step of each method from the same state: the same final bytes and backward sums."""
    xp = cell.xp
    ref_state, ref_sums = None, None
    for method in METHODS:
        cell.init_state()
        sums = STEPS[method](dev, cell, sg.no_phase)
        sums = np.array([float(s) for s in sums], dtype=np.float64)
        if ref_state is None:
            ref_state, ref_sums = cell.state.copy(), sums
            continue
        same = bool(xp.array_equal(cell.state.view(xp.uint32), ref_state.view(xp.uint32)))
        if not same:
            return False, f"{method}: final state differs from eager"
        if sums.tobytes() != ref_sums.tobytes():
            return False, f"{method}: backward sums differ from eager"
    del ref_state
    return True, ""


def _measure_method(dev: Any, cell: _Cell, method: str, grid: Grid) -> dict[str, Any]:
    cell.init_state()
    warm = [_timed_step(dev, cell, method)[0] for _ in range(max(1, grid.warmups))]
    budget_steps = int(grid.method_budget_s / max(warm[-1], 1e-9))
    steps = max(grid.min_steps, min(grid.steps, budget_steps))
    times, peaks = [], []
    for _ in range(steps):
        t, p = _timed_step(dev, cell, method)
        times.append(t)
        peaks.append(p)
    phases = _phased_step(dev, cell, method)
    return {
        "warmups": len(warm),
        "steps": steps,
        "time_s": float(np.mean(times)),
        "time_s_min": float(np.min(times)),
        "times_s": times,
        "peak_bytes": int(max(peaks)),
        "baseline_bytes": int(dev.current()),
        "preserve_s": phases["preserve"],
        "recover_s": phases["recover"],
        "compute_s": phases["compute"],
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _run_cell(dev: Any, grid: Grid, workload: str, nbytes: int, f: float, L: int) -> dict:
    xp = dev.xp
    sets = write_sets(xp, workload, nbytes, f, L, grid.granularity)
    cell = _Cell(xp, workload, nbytes, f, L, sets)
    rec: dict[str, Any] = {
        "workload": workload,
        "buffer_bytes": nbytes,
        "buffer_mib": nbytes / MIB,
        "write_fraction": f,
        "live_versions": L,
        "granularity": grid.granularity,
        "row_bytes": ROW_BYTES[workload],
        "written_bytes_per_segment": sets[0].rows * ROW_BYTES[workload],
        "journal_bytes": [ws.layout.payload_bytes for ws in sets],
        "methods": {},
    }
    with dev.tracking():
        cell.init_state()
        try:
            rec["consistent"], rec["consistency_detail"] = _consistency(dev, cell)
        except Exception as exc:  # recorded, the calibration goes on
            rec["consistent"], rec["consistency_detail"] = False, f"{type(exc).__name__}: {exc}"
        dev.release()
        for method in METHODS:
            try:
                rec["methods"][method] = _measure_method(dev, cell, method, grid)
            except Exception as exc:  # e.g. out of memory: recorded, not fatal
                rec["methods"][method] = {"error": f"{type(exc).__name__}: {exc}"}
            dev.release()
        # The state buffer and the write-set index arrays, allocated before any step.
        rec["persistent_bytes"] = nbytes + _index_bytes(sets)
    del cell
    dev.release()
    m = rec["methods"]
    for num, den in (("region", "whole"), ("region", "eager")):
        rec.setdefault("ratios", {})[f"{num}/{den}"] = {
            "peak": _ratio(m[num].get("peak_bytes"), m[den].get("peak_bytes")),
            "time": _ratio(m[num].get("time_s"), m[den].get("time_s")),
        }
    return rec


def _index_bytes(sets: list[WriteSet]) -> int:
    return sum(int(ws.index.nbytes) for ws in sets if ws.index is not None)


# --- bandwidth --------------------------------------------------------------------------------


def _repeat_time(dev: Any, fn: Callable[[], None], reps: int) -> float:
    fn()
    dev.sync()
    a = dev.mark()
    for _ in range(reps):
        fn()
    b = dev.mark()
    return dev.elapsed(a, b) / reps


def _reps(dev: Any, nbytes: int) -> int:
    """Repetitions per timing: about 2 GiB of traffic, at least 5, at most ``dev.max_reps``."""
    return max(5, min(dev.max_reps, (2048 * MIB) // max(nbytes, 1)))


def copy_bandwidth(dev: Any, nbytes: int) -> dict[str, float]:
    """Device-to-device copy of ``nbytes``: seconds per copy and bytes copied per second."""
    xp = dev.xp
    src = xp.zeros(nbytes, dtype=xp.uint8)
    dst = xp.empty_like(src)
    seconds = _repeat_time(dev, partial(dev.copy, dst, src), _reps(dev, nbytes))
    del src, dst
    dev.release()
    return {"bytes": nbytes, "seconds": seconds, "bytes_per_s": nbytes / seconds}


def journal_bandwidth(dev: Any, grid: Grid, copy_peak: float) -> list[dict[str, Any]]:
    """Save / restore / swap bandwidth for each journal size and two region patterns.

    Bandwidth counts bytes written per second, as a copy does: a save or restore of J bytes
    writes J, a swap writes 2 J (buffer and journal). Each is also given as a fraction of a
    same-size device copy and of the large-copy bandwidth ``copy_peak``.
    """
    xp, g = dev.xp, grid.granularity
    nbytes = grid.journal_buffer
    n_regions = nbytes // g
    buf = xp.zeros(nbytes, dtype=xp.uint8)
    out = []
    for size in grid.journal_sizes:
        k = min(n_regions, max(1, size // g))
        same = copy_bandwidth(dev, k * g)["bytes_per_s"]
        patterns = {
            "contiguous": np.arange(k, dtype=np.int64),
            "strided": (np.arange(k, dtype=np.int64) * (n_regions // k)),
        }
        for pattern, regions in patterns.items():
            lay = jr.layout(nbytes, regions, g)
            journal = jr.save(xp, buf, lay)
            ops = {
                "save": (partial(jr.save_into, xp, buf, journal), 1),
                "restore": (partial(jr.restore, xp, buf, journal), 1),
                "swap": (partial(jr.swap, xp, buf, journal), 2),
            }
            for op, (fn, factor) in ops.items():
                seconds = _repeat_time(dev, fn, _reps(dev, lay.payload_bytes))
                bw = factor * lay.payload_bytes / seconds
                out.append(
                    {
                        "pattern": pattern,
                        "journal_bytes": lay.payload_bytes,
                        "op": op,
                        "seconds": seconds,
                        "bytes_per_s": bw,
                        "fraction_of_same_size_copy": bw / same,
                        "fraction_of_peak_copy": bw / copy_peak,
                    }
                )
            del journal
    del buf
    dev.release()
    return out


# --- entry point --------------------------------------------------------------------------------


def calibrate(
    out_dir: str | Path,
    *,
    quick: bool = False,
    backend: str = "cupy",
    grid: Grid | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the calibration grid and write calibration.json, calibration.md, a plot and cards.

    ``backend`` "cupy" needs a GPU (raises GpuUnavailable otherwise); "numpy" runs the same
    pipeline on the CPU for testing. ``grid`` overrides the full or ``quick`` grid.
    """
    grid_name = "custom" if grid is not None else ("quick" if quick else "full")
    grid = grid or (QUICK if quick else FULL)
    say = log or (lambda _msg: None)
    dev = device(backend)
    out = Path(out_dir)
    (out / "profiles").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    say(f"calibrate: {backend}, {grid_name} grid")

    copy = copy_bandwidth(dev, max(grid.buffers))
    say(f"copy bandwidth {copy['bytes_per_s'] / 1e9:.1f} GB/s")
    doc: dict[str, Any] = {
        "format": "replayverify.calibration",
        "version": 1,
        "device": dev.describe(),
        "quick": quick,
        "grid_name": grid_name,
        "grid": asdict(grid),
        "copy_bandwidth": copy,
        "cells": [],
        "skipped": [],
    }
    doc["journal_bandwidth"] = journal_bandwidth(dev, grid, copy["bytes_per_s"])
    for workload in grid.workloads:
        for nbytes in grid.buffers:
            for f in grid.fractions:
                for L in grid.versions:
                    tag = f"{workload}/{size_text(nbytes)}/f{f:g}/L{L}"
                    if time.perf_counter() - t0 > grid.time_budget_s:
                        doc["skipped"].append(tag)
                        continue
                    cell = _run_cell(dev, grid, workload, nbytes, f, L)
                    doc["cells"].append(cell)
                    say(f"{tag}: region/whole {cell['ratios']['region/whole']}")
    doc["targets"] = targets(doc)
    doc["seconds"] = time.perf_counter() - t0

    cards = []
    for cell in doc["cells"]:
        card = profile_card(cell)
        if card is not None:
            path = out / "profiles" / f"{card['name']}.json"
            path.write_text(dumps(card, indent=1) + "\n", encoding="utf-8")
            cards.append(str(path.relative_to(out)))
    doc["profiles"] = cards
    note = plot(doc, out / "calibration.png")
    doc["plot"] = note
    (out / "calibration.json").write_text(dumps(doc, indent=1) + "\n", encoding="utf-8")
    (out / "calibration.md").write_text(markdown(doc, note), encoding="utf-8")
    return doc


__all__ = ["FULL", "QUICK", "Grid", "calibrate", "device", "write_sets"]
