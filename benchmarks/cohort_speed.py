"""Cohort speed: the full 50-key cohort (torch, JAX and --extra), wall time and records/s.

Run: python benchmarks/cohort_speed.py [--seeds 420000:420050] [--workers 2] [--out DIR]
     [--frameworks torch,jax] [--resume]

`--frameworks torch-compile-aot-eager` (or torch-compile, torch-compile-inductor) times
the compiled rows instead (reports/cohort-compile/, issue #25); `--resume` continues an
interrupted run in --out (the wall time printed is then that of the last part).
The stateful rows (reports/cohort-stateful/): --frameworks
jax-state,jax-remat3,flax,keras-torch,keras-jax.

Measures, in one run: (1) the wall time of `run_cohort` over every framework with
`--extra` and the given workers (its records, summary and report go to --out when
given: that is how reports/cohort/ is made); (2) as the baseline, the reference alone:
the interpreter fed each case's draws (`execute(program, draws=...)`), single process,
over the same cases. Reports records/s, the per-framework CPU seconds the records
account for, and the ratio (cohort time per case and worker) / (reference time per
case), so the figure does not depend on the machine's speed. Requirement (issue #11):
under 5 minutes on the 2-core CI machine.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from replayverify.cohort import CohortConfig, cases, parse_seeds, run_cohort
from replayverify.cohort.engines_adapter import EnginesAdapter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", default="420000:420050")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--frameworks", default="torch,jax")
    ap.add_argument("--resume", action="store_true", help="continue the run in --out")
    args = ap.parse_args()
    frameworks = tuple(f.strip() for f in args.frameworks.split(",") if f.strip())
    if args.resume and not args.out:
        ap.error("--resume needs --out")
    seeds = parse_seeds(args.seeds)

    all_cases = cases(range(*seeds), extra=True)
    tapes = [EnginesAdapter().draw_tape(c) for c in all_cases]
    from replayverify.programs import execute

    t = time.perf_counter()
    for c, tape in zip(all_cases, tapes):
        _ = execute(c.program, draws=dict(tape.draws), record_boundaries=False).gradient
    reference = time.perf_counter() - t

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        fw_flag = "" if frameworks == ("torch", "jax") else f" --frameworks {args.frameworks}"
        cfg = CohortConfig(frameworks=frameworks, seeds=seeds, extra=True,
                           workers=args.workers, out=out, resume=args.resume,
                           command=f"replayverify cohort{fw_flag} --seeds {args.seeds} "
                                   f"--extra --workers {args.workers}")
        t = time.perf_counter()
        summary = run_cohort(cfg)
        wall = time.perf_counter() - t
        records = [json.loads(line) for line in (out / "records.jsonl").open()]

    cpu: dict[str, float] = defaultdict(float)
    for r in records:
        cpu[r["framework"]] += r["seconds"]
    n_cases = len(all_cases)
    print(f"cohort {args.seeds} --extra, {args.workers} workers: {summary['records']} records "
          f"({n_cases} cases x frameworks) in {wall:.1f} s wall = "
          f"{summary['records'] / wall:.1f} records/s; verdict {summary['verdict']}")
    print("  seconds inside methods, summed over records: "
          + ", ".join(f"{k} {v:.1f}" for k, v in sorted(cpu.items())))
    print(f"  baseline (interpreter reference alone, 1 process): {reference:.2f} s for "
          f"{n_cases} cases = {1e3 * reference / n_cases:.2f} ms/case")
    ratio = (wall * args.workers / n_cases) / (reference / n_cases)
    print(f"  ratio (cohort s per case x workers) / (reference s per case): {ratio:.0f}")
    limit = 1800 if any(f.startswith("torch-compile") for f in frameworks) else 300
    print(f"  within the {limit // 60}-minute requirement: {'yes' if wall < limit else 'NO'}")


if __name__ == "__main__":
    main()
