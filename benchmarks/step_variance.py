"""Why do `replayverify evaluate`'s step times vary? Per-step diagnosis of one evaluation process.

    python benchmarks/step_variance.py                         # a measuring process, large-sparse
    python benchmarks/step_variance.py --mode calibrate        # the calibration process instead
    python benchmarks/step_variance.py --steps 20 --cells large-sparse,queue --json out.json
    python benchmarks/step_variance.py --aliasing              # 2 MiB kernels at every dst offset

Runs what `replayverify evaluate` runs in one fresh process (`measure.serve`, scale 512, the
committed cards' policies for the measuring mode), with `measure.execute` wrapped: per step,
its wall time, the process's CPU time (`time.process_time`), minor and major page faults and
voluntary / involuntary context switches (`resource.getrusage`), every Python collection
during it with its generation and duration (`gc.callbacks`), and the reference kernel
(`measure.speed_probe`) right after it (inside `time_policy`'s window, so short steps reach
its 0.1 s in fewer repeats). Prints, per cell and policy (eager/whole/region counts), the
spread of the measured steps and what came with them; the process re-executes itself with
evaluate's allocator settings (`run.ALLOCATOR_ENV`) when they are not set.
docs/evaluate.md ("Why step times vary") quotes its figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

import numpy as np

from replayverify.evaluate import measure, run
from replayverify.evaluate.workloads import ACTIVATION, paper_cells

COMMITTED = Path(__file__).resolve().parents[1] / "reports" / "evaluate" / "evaluate.json"


class Recorder:
    """Wraps ``measure.execute``: one record per call, with what happened during it."""

    def __init__(self, probe: bool) -> None:
        self.calls: list[dict] = []
        self.collections: list[tuple[int, float]] = []
        self.probe = probe
        self._gc_start = 0.0
        self._execute = measure.execute

    def on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.collections.append((info["generation"], time.perf_counter() - self._gc_start))

    def execute(self, dev, step, policy, share, **kw):
        frame = sys._getframe(1)
        caller = frame.f_code.co_name
        timed = caller == "time_policy" and "times" in frame.f_locals  # not a warmup
        seen = len(self.collections)
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        c0, t0 = time.process_time(), time.perf_counter()
        out = self._execute(dev, step, policy, share, **kw)
        t1, c1 = time.perf_counter(), time.process_time()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        cell = getattr(getattr(step, "cell", None), "name", None) or step.workload
        counts = "/".join(str(list(policy).count(o)) for o in measure.OPTIONS)
        self.calls.append(
            {
                "caller": caller,
                "timed": timed,
                "cell": cell,
                "policy": counts + ("S" if share else ""),
                "wall": t1 - t0,
                "cpu": c1 - c0,
                "minflt": r1.ru_minflt - r0.ru_minflt,
                "majflt": r1.ru_majflt - r0.ru_majflt,
                "nivcsw": r1.ru_nivcsw - r0.ru_nivcsw,
                "gc": self.collections[seen:],
                "probe": measure.speed_probe(dev) if self.probe else None,
            }
        )
        return out


def request(mode: str, names: list[str], steps: int) -> dict:
    cells = [c.at(run.DEFAULT_SCALE) for c in paper_cells() if c.name in names]
    if mode == "calibrate":
        return {
            "mode": "calibrate",
            "backend": "numpy",
            "steps": 3,
            "timing": {"warmups": 2, "steps": steps},
            "cells": [{"cell": asdict(c), "shared_whole": c.workload != ACTIVATION} for c in cells],
        }
    plans = json.loads(COMMITTED.read_text())["plans"]
    todo = []
    for c in cells:
        runs: dict[str, dict] = {}
        for e in plans:
            if e["cell"] == c.name and not e["infeasible"]:
                runs.setdefault(
                    e["key"], {"key": e["key"], "policy": e["policy"], "share": e["share_anchors"]}
                )
        eager = ",".join(("eager",) * c.segments)
        todo.append(
            {"cell": asdict(c), "runs": [runs[eager]] + [r for k, r in runs.items() if k != eager]}
        )
    return {"mode": "measure", "backend": "numpy", "process": 0, "warmups": 2, "steps": steps,
            "cells": todo}


def summary(calls: list[dict]) -> None:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for c in calls:
        if c["timed"]:  # the measured, uninstrumented steps (not warmups)
            groups[(c["cell"], c["policy"])].append(c)
    print("cell policy(e/w/r) steps | wall ms min med mean max | cpu/wall | faults/step "
          "(after the first) | involuntary switches | gc collections (ms) | corr(step, kernel)")
    for (cell, policy), cs in groups.items():
        w = [1e3 * c["wall"] for c in cs]
        probe = [c["probe"] for c in cs if c["probe"] is not None]
        corr = (
            f"{np.corrcoef([c['wall'] for c in cs], probe)[0, 1]:.2f}"
            if len(probe) == len(cs) > 2
            else "—"
        )
        gcs = [g for c in cs for g in c["gc"]]
        print(
            f"{cell} {policy} {len(cs)} | {min(w):.1f} {statistics.median(w):.1f} "
            f"{statistics.fmean(w):.1f} {max(w):.1f} | "
            f"{sum(c['cpu'] for c in cs) / sum(c['wall'] for c in cs):.2f} | "
            f"{statistics.fmean(c['minflt'] for c in cs[1:]) if len(cs) > 1 else 0:.1f} | "
            f"{sum(c['nivcsw'] for c in cs)} | {len(gcs)} ({1e3 * sum(t for _, t in gcs):.1f}) | "
            f"{corr}"
        )
    if calls:
        most = max(calls, key=lambda c: c["minflt"])
        print(f"most page faults in one step: {most['minflt']} minor ({most['caller']}, "
              f"{most['cell']} {most['policy']}); major faults in all: "
              f"{sum(c['majflt'] for c in calls)}")


def aliasing() -> None:
    """2 MiB float32 multiply, tanh and copy with the destination at offsets 0..4,080 bytes
    (mod 4,096) from the source: least and median of 30."""
    n = 1 << 19
    base = np.empty(2 * 4 * n + 3 * 4096, dtype=np.uint8)
    a0 = (-base.ctypes.data) % 4096
    src = base[a0 : a0 + 4 * n].view(np.float32)
    src[:] = 0.5
    for d in (0, 16, 32, 64, 256, 2048, 4080):
        off = a0 + 4 * n + 4096 + d
        dst = base[off : off + 4 * n].view(np.float32)
        kernels = {
            "multiply": lambda dst=dst: np.multiply(src, np.float32(0.9), out=dst),
            "tanh": lambda dst=dst: np.tanh(src, out=dst),
            "copy": lambda dst=dst: np.copyto(dst, src),
        }
        for name, fn in kernels.items():
            fn()
            ts = []
            for _ in range(30):
                t = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t)
            print(f"offset {d:5d} {name:8s} least {1e6 * min(ts):7.1f} us, "
                  f"median {1e6 * statistics.median(ts):7.1f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("measure", "calibrate"), default="measure")
    ap.add_argument("--cells", default="large-sparse")
    ap.add_argument("--steps", type=int, default=20, help="measured steps per method")
    ap.add_argument("--no-probe", action="store_true", help="no reference kernel after steps")
    ap.add_argument("--json", help="write every step's record here")
    ap.add_argument("--aliasing", action="store_true", help="the address-offset test only")
    args = ap.parse_args()
    if any(os.environ.get(k) != v for k, v in run.ALLOCATOR_ENV.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **run.ALLOCATOR_ENV})
    if args.aliasing:
        aliasing()
        return
    rec = Recorder(probe=not args.no_probe)
    gc.callbacks.append(rec.on_gc)
    measure.execute = rec.execute
    measure.serve(request(args.mode, args.cells.split(","), args.steps))
    thp = [ln.split()[1] for ln in Path("/proc/self/smaps_rollup").read_text().splitlines()
           if ln.startswith("AnonHugePages")]
    print(f"{args.mode} process, load {os.getloadavg()[0]:.2f}, gc thresholds "
          f"{gc.get_threshold()}, tracked objects {len(gc.get_objects())}, AnonHugePages "
          f"{thp[0] if thp else '?'} kB")
    summary(rec.calls)
    if args.json:
        Path(args.json).write_text(json.dumps(rec.calls))


if __name__ == "__main__":
    main()
