"""Detection rate of every engine mutant over a generated suite.

    python benchmarks/mutant_detection.py [--programs 256] [--seed 0] [--family F]
        [--windows 64]

Programs are those of ``replayverify suite --programs N --seed S`` (the suite's family
mix, or one family). For each mutant: on how many programs the gradient or bytes check
detected it. Every mutant must be detected on at least one program; the script exits 1
otherwise. It also checks that no real engine diverges on the same programs.

With ``--family hazard`` each mutant is also measured on the programs built around the
hazard it is meant to break (its class's ``hazard``); the target is >= 50 % on those. With
``--windows K`` the suite is cut into consecutive K-program suites and the script
reports, per mutant, in how many of them it was detected at least once.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from replayverify import engines
from replayverify.programs import execute, generate
from replayverify.programs.generate import hazard_of
from replayverify.verifier.engine_checks import engine_records
from replayverify.verifier.suite import suite_ids


def hazard_of_mutant(name: str) -> str:
    """The hazard a mutant's bug needs (its strategy's ``hazard``)."""
    return getattr(getattr(engines.get(name), "strategy", None), "hazard", "")


TARGET = 0.5


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--family", default=None)
    ap.add_argument("--windows", type=int, default=0,
                    help="also count detection per consecutive K-program suite")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    names = engines.mutant_names()
    detected: Counter = Counter()
    on_hazard: Counter = Counter()  # (mutant) -> detections on its hazard's programs
    per_hazard: Counter = Counter()  # hazard -> programs
    windows: dict[str, set[int]] = {m: set() for m in names}
    real_failures: list[str] = []
    for pid in suite_ids(args.programs, args.seed, args.family):
        program = generate(pid.seed, pid.index, family=pid.family)
        ex = execute(program)
        hazard = hazard_of(pid.index) if pid.family == "hazard" else None
        per_hazard[hazard] += 1
        for r in engine_records(program, ex, ex.gradient, None, str(pid), mutants=True):
            if r.check.startswith("mutant:"):
                hit = r.outcome == "detected"
                detected[r.engine] += hit
                on_hazard[r.engine] += hit and hazard_of_mutant(r.engine) == hazard
                if hit and args.windows:
                    windows[r.engine].add(pid.index // args.windows)
            elif r.failing:
                real_failures.append(f"{pid} {r.check}/{r.engine}: {r.outcome} {r.detail}")
    n = args.programs
    print(f"{n} programs (seed {args.seed}, family {args.family or 'suite mix'}), "
          f"{time.perf_counter() - t0:.1f} s")
    head = f"| {'mutant':38s} | {'detected':>8s} | {'rate':>6s} |"
    rule = "|---|---:|---:|"
    if args.family == "hazard":
        head += " hazard | on its hazard |"
        rule += "---|---:|"
    n_windows = -(-n // args.windows) if args.windows else 0
    if n_windows:
        head += f" {args.windows}-program suites detecting it |"
        rule += "---:|"
    print(head)
    print(rule)
    below = []
    for name in names:
        line = f"| {name:38s} | {detected[name]:8d} | {detected[name] / n:6.1%} |"
        if args.family == "hazard":
            hz = hazard_of_mutant(name)
            k = per_hazard[hz]
            rate = on_hazard[name] / k if k else 0.0
            line += f" {hz} | {on_hazard[name]}/{k} = {rate:.1%} |"
            if rate < TARGET:
                below.append(name)
        if n_windows:
            line += f" {len(windows[name])}/{n_windows} |"
        print(line)
    for line in real_failures:
        print("REAL ENGINE FAILURE:", line)
    never = [m for m in names if detected[m] == 0]
    if never:
        print("never detected:", ", ".join(never))
    if below:
        print(f"below {TARGET:.0%} on their hazard's programs:", ", ".join(below))
    missing_windows = [m for m in names if n_windows and len(windows[m]) < n_windows]
    if missing_windows:
        print("missed by some suite window:", ", ".join(missing_windows))
    return 1 if never or real_failures or below or missing_windows else 0


if __name__ == "__main__":
    sys.exit(main())
