"""Suite speed: programs per second, and verification time over plain interpretation.

Run: python benchmarks/suite_speed.py [--programs 1024] [--workers 2] [--seed 0]

Measures, in one run: (1) the wall time of `run_suite` on the default mix with the
given workers; (2) the time of one plain (unversioned) forward interpretation of every
program of the same suite, single process, as the baseline. Reports programs per
second and the ratio (full verification, per program and per worker) / (plain forward),
so the figure does not depend on the machine's speed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from replayverify.programs import run_forward
from replayverify.verifier.suite import SuiteConfig, run_suite, suite_ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--programs", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    programs = [pid.build()[0] for pid in suite_ids(args.programs, args.seed)]
    t = time.perf_counter()
    for p in programs:
        run_forward(p)
    plain = time.perf_counter() - t

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        summary = run_suite(SuiteConfig(programs=args.programs, seed=args.seed,
                                        workers=args.workers, out=Path(tmp) / "suite"))
        wall = time.perf_counter() - t
    print(f"suite: {args.programs} programs, seed {args.seed}, {args.workers} workers, "
          f"{os.cpu_count()} CPUs; verdict {summary['verdict']}, {summary['records']} records")
    print(f"wall time                         {wall:8.2f} s  (target <= 20 s for 1,024 "
          "programs, 2 workers, 2 cores)")
    print(f"programs per second               {args.programs / wall:8.1f}")
    print(f"plain forward, all programs       {plain:8.3f} s  (baseline, one process)")
    print(f"verification / plain forward      {wall * args.workers / plain:8.1f}x  "
          "(worker-seconds of the suite over the baseline)")


if __name__ == "__main__":
    main()
