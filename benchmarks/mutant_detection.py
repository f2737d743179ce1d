"""Detection rate of every engine mutant over a generated suite (issue 4).

    python benchmarks/mutant_detection.py [--programs 256] [--seed 0] [--family F]

Programs are those of ``replayverify suite --programs N --seed S`` (the suite's family
mix, or one family). For each mutant: on how many programs the gradient or bytes check
detected it. Every mutant must be detected on at least one program; the script exits 1
otherwise. It also checks that no real engine diverges on the same programs.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from replayverify import engines
from replayverify.programs import execute, generate
from replayverify.verifier.engine_checks import engine_records

SUITE_FAMILIES = ("derivative", "bytes", "alias", "complex")  # as replayverify suite


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--family", default=None)
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    detected: Counter = Counter()
    real_failures: list[str] = []
    for i in range(args.programs):
        family = args.family or SUITE_FAMILIES[i % len(SUITE_FAMILIES)]
        program = generate(args.seed, i, family=family)
        ex = execute(program)
        pid = f"s{args.seed}/{family}/{i:06d}"
        for r in engine_records(program, ex, ex.gradient, None, pid, mutants=True):
            if r.check.startswith("mutant:"):
                detected[r.engine] += r.outcome == "detected"
            elif r.failing:
                real_failures.append(f"{pid} {r.check}/{r.engine}: {r.outcome} {r.detail}")
    n = args.programs
    print(f"{n} programs (seed {args.seed}, family {args.family or 'suite mix'}), "
          f"{time.perf_counter() - t0:.1f} s")
    print(f"{'mutant':40s} {'detected':>9s} {'rate':>7s}")
    for name in engines.mutant_names():
        print(f"{name:40s} {detected[name]:9d} {detected[name] / n:7.1%}")
    for line in real_failures:
        print("REAL ENGINE FAILURE:", line)
    never = [m for m in engines.mutant_names() if detected[m] == 0]
    if never:
        print("never detected:", ", ".join(never))
    return 1 if never or real_failures else 0


if __name__ == "__main__":
    sys.exit(main())
