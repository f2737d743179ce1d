"""Shrinking speed: seconds per failing program and the size of the reproducers.

Run: python benchmarks/shrink_speed.py [--programs 64] [--engine mutant:region-current-segment-only]

Runs the suite (seed 0, one worker, no shrinking) with one engine (by default a mutant,
so that programs fail), then shrinks each failing program's first failure alone, as
``suite`` does, timing each; prints the median and the largest time and the op counts
of the reproducers. Also reports, as a baseline measured in the same run, the median
time of one full ``check`` of the same failing programs, so the figure can be read as
a number of checks.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from replayverify.verifier.check import check_program
from replayverify.verifier.suite import ProgramId, SuiteConfig, run_suite


def _shrinker():
    """shrink_failures(out, records, mutants) for this checkout (it moved out of report.py)."""
    try:
        from replayverify.verifier.shrink import shrink_failures
    except ImportError:  # an older checkout: the report module ran the shrinker
        from replayverify.verifier.report import shrink_failures as old

        return lambda out, records, mutants: old(out, records, None, mutants, 1)

    def build(pid: str):
        return ProgramId.parse(pid).build()[0]

    return lambda out, records, mutants: shrink_failures(out, records, build, mutants=mutants,
                                                         limit=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", type=int, default=64)
    ap.add_argument("--engine", default="mutant:region-current-segment-only")
    args = ap.parse_args()
    shrink_one = _shrinker()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "suite"
        run_suite(SuiteConfig(programs=args.programs, workers=1, out=out,
                              engines=(args.engine,), shrink=False))
        from replayverify.verifier.suite import read_records

        records = read_records(out / "records.jsonl")
        failing = sorted({r.program for r in records if r.failing})
        times, ops, checks = [], [], []
        for pid in failing:
            mine = [r for r in records if r.program == pid]
            t = time.perf_counter()
            entries = shrink_one(out, mine, False)
            times.append(time.perf_counter() - t)
            ops.append(entries[0].get("shrunk_ops"))
            program = ProgramId.parse(pid).build()[0]
            t = time.perf_counter()
            check_program(program, engines=(args.engine,))
            checks.append(time.perf_counter() - t)
    print(f"suite: {args.programs} programs, seed 0, engine {args.engine}: "
          f"{len(failing)} failing programs, each shrunk alone")
    if not times:
        return
    print(f"shrink time per failing program   median {statistics.median(times):7.3f} s   "
          f"max {max(times):7.3f} s  (target: median <= 1 s)")
    print(f"reproducer ops                    max {max(o or 0 for o in ops)}  "
          f"(target <= 4); counts {sorted(ops)}")
    print(f"one full check of those programs  median {statistics.median(checks) * 1e3:7.2f} ms "
          f"(baseline: shrink median = {statistics.median(times) / statistics.median(checks):.0f}"
          " checks)")


if __name__ == "__main__":
    main()
