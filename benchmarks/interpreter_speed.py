"""Speed of the reference interpreter: forward + reverse of a 16-op, 16-element program.

Run: python benchmarks/interpreter_speed.py [--repeat N]

Reports the time of one versioned execution plus the reverse sweep, and as a baseline
measured in the same run, one plain (unversioned) forward interpretation of the same
program, so the figure is a ratio that does not depend on the machine's speed.
"""

from __future__ import annotations

import argparse
import statistics

from _timing import median_time

from replayverify.programs import execute, generate, run_forward


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    programs = [generate(0, i, "complex", dims=(16,), n_ops=(16,)) for i in range(20)]
    fwd = [median_time(lambda p=p: run_forward(p), args.repeat) for p in programs]
    both = [median_time(lambda p=p: execute(p, record_boundaries=False).gradient, args.repeat)
            for p in programs]
    f, b = statistics.median(fwd), statistics.median(both)
    print(f"programs: 20 x (16 ops, 16 elements, float64); median of {args.repeat} runs each")
    print(f"plain forward interpretation      {f * 1e3:8.3f} ms")
    print(f"versioned forward + reverse sweep {b * 1e3:8.3f} ms")
    print(f"ratio (versioned+reverse / plain) {b / f:8.2f}")


if __name__ == "__main__":
    main()
