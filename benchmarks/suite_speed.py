"""Suite speed: programs per second, and verification time over plain interpretation.

Run: python benchmarks/suite_speed.py [--programs 1024] [--workers 2] [--seed 0]
     [--repeat N] [--breakdown] [--dask local:2 | --dask tcp://HOST:8786]

Measures, in one run: (1) the wall time of `run_suite` on the default mix with the
given workers; (2) the time of one plain (unversioned) forward interpretation of every
program of the same suite, single process, as the baseline. Reports programs per
second and the ratio (full verification, per program and per worker) / (plain forward),
so the figure does not depend on the machine's speed; then the same ratio over the plain
forward run with the process's heap frozen out of the garbage collector (median of
three passes), the condition the suite's own processes run under and the steadier figure.
One run's ratio swings by up to 10 % on a shared machine (the machine's speed drifts
between the baseline and the suite): ``--repeat N`` measures N times, baseline then suite,
prints each run, and reports the run with the median ratio.

With ``--dask ADDRESS`` it also runs the same suite through Dask, in the same process
run: for ``local:N``, local processes and a LocalCluster with 1 and with N workers
(scaling = wall time with 1 worker / with N, for both); for a scheduler address, that
cluster next to the local run; ``--dask-batch 1,8`` runs Dask once per batch size.
It reports each run's wall time (cluster start-up apart), checks that every Dask run
wrote the local run's records, and gives the pickled size of what goes over the wire
per program (the task, and the records and statistics back).

With ``--breakdown`` it also runs the same programs once more in this process, one
stage at a time, and prints where a program's time goes (generation, each check,
statistics, the record lines), per program and in units of the frozen-heap plain
forward: what the ratio is made of.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import replayverify.verifier.check  # noqa: F401  (see main)
from replayverify.programs import run_forward
from replayverify.verifier.suite import (
    Job,
    SuiteConfig,
    program_stats,
    run_job,
    run_suite,
    suite_ids,
)


def _records(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    for r in rows:
        r.pop("seconds")
    return rows


def _timed_suite(args, out: Path, workers: int = 1, executor=None) -> tuple[float, dict]:
    t = time.perf_counter()
    summary = run_suite(SuiteConfig(programs=args.programs, seed=args.seed, workers=workers,
                                    out=out), executor=executor)
    return time.perf_counter() - t, summary


def dask_comparison(args) -> None:
    """Local processes and Dask on the same suite, 1 worker and N, in this one run."""
    from replayverify.runs.executors import dask_executor, parse_address
    from replayverify.runs.fingerprint import source_fingerprint

    where, n = parse_address(args.dask)
    batches = [int(b) for b in args.dask_batch.split(",")]
    rows = []  # (label, workers, start-up seconds or None, wall seconds, records ok)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        counts = [1, n or os.cpu_count() or 1] if where == "local" else [args.workers]
        counts = sorted(set(counts))
        for w in counts:
            wall, summary = _timed_suite(args, tmp / f"local{w}", workers=w)
            rows.append((f"local processes, {w}", w, None, wall, True))
            reference = _records(tmp / f"local{w}")
            address = f"local:{w}" if where == "local" else args.dask
            for batch in batches:
                t = time.perf_counter()
                with dask_executor(address, label="bench", batch=batch) as ex:
                    start = time.perf_counter() - t
                    threads = sum(ex.client.nthreads().values())
                    out = tmp / f"dask{w}-{batch}"
                    wall, _ = _timed_suite(args, out, executor=ex)
                label = f"dask {address}" + (f", batch {batch}" if batch > 1 else "")
                rows.append((label, threads, start, wall, _records(out) == reference))
    jobs = [Job(pid, None, False, 60.0) for pid in suite_ids(min(args.programs, 64), args.seed)]
    sent = [len(pickle.dumps((run_job, job, source_fingerprint()))) for job in jobs]
    back = [len(pickle.dumps(run_job(job))) for job in jobs]

    print(f"suite: {args.programs} programs, seed {args.seed}, {os.cpu_count()} CPUs, "
          f"verdict {summary['verdict']}, {summary['records']} records")
    print(f"{'run':<28} {'workers':>7} {'start-up s':>10} {'wall s':>8} {'programs/s':>10} "
          f"{'records = local':>15}")
    for label, w, start, wall, same in rows:
        print(f"{label:<28} {w:>7} {'-' if start is None else f'{start:.2f}':>10} "
              f"{wall:8.2f} {args.programs / wall:10.1f} {'yes' if same else 'NO':>15}")
    if where == "local" and len(counts) == 2:
        walls = {label: wall for label, _, _, wall, _ in rows}
        lo, hi = counts
        print(f"scaling {hi} vs {lo} worker(s): local processes "
              f"{walls[f'local processes, {lo}'] / walls[f'local processes, {hi}']:.2f}x")
        for batch in batches:
            tail = f", batch {batch}" if batch > 1 else ""
            print(f"scaling {hi} vs {lo} worker(s): dask{tail} "
                  f"{walls[f'dask local:{lo}{tail}'] / walls[f'dask local:{hi}{tail}']:.2f}x")
    for label, w, _, wall, _ in rows:
        if label.startswith("dask"):
            local = next(x[3] for x in rows if x[0] == f"local processes, {w}")
            print(f"{label} / local processes, {w}: wall time {wall / local:.2f}")
    print(f"over the wire per program (pickled, mean of {len(jobs)}): task "
          f"{sum(sent) / len(sent):.0f} B out, records and statistics "
          f"{sum(back) / len(back):.0f} B back")
    if not all(x[4] for x in rows):
        raise SystemExit("a Dask run's records differ from the local run's")


def _plain_pass(programs: list) -> tuple[float, float]:
    """CPU and wall seconds of one plain forward of every program."""
    t, c = time.perf_counter(), time.process_time()
    for p in programs:
        run_forward(p)
    return time.process_time() - c, time.perf_counter() - t


def breakdown(args, plain: float) -> None:
    """Per stage, the CPU time of a suite program, in one process (no workers)."""
    from collections import Counter

    from replayverify.verifier.check import check_execution

    ids = suite_ids(args.programs, args.seed)
    cpu = time.process_time
    stages: Counter[str] = Counter()
    checks: Counter[str] = Counter()  # wall seconds the records carry, per check
    gc.freeze()  # (what this process holds is not walked by its collections, as in a worker)
    for pid in ids:
        t = cpu()
        g = pid.generate()
        t1 = cpu()
        records = check_execution(g.execution, program_id=str(pid))
        t2 = cpu()
        program_stats(g.execution, g.attempts)
        t3 = cpu()
        for r in records:
            r.to_json()
        t4 = cpu()
        stages["generation (build, versioned run, acceptance)"] += t1 - t
        stages["checks (every record of the program)"] += t2 - t1
        stages["statistics"] += t3 - t2
        stages["record lines (JSON)"] += t4 - t3
        for r in records:
            if r.engine and r.check != "gradient":
                continue  # an engine's two records carry the one run's seconds
            checks[f"engine {r.engine}" if r.engine else str(r.check)] += r.seconds
    gc.unfreeze()
    n, unit = len(ids), plain / len(ids)
    total = sum(stages.values())
    print(f"\nwhere a program's time goes (one process, {n} programs, the heap frozen; plain "
          f"forward with the heap frozen {unit * 1e6:.0f} us per program = 1 unit)")
    for name, s in stages.items():
        print(f"  {name:<46} {s / n * 1e6:8.0f} us  {s / n / unit:6.2f} units")
        if name.startswith("checks"):
            for check, w in checks.most_common():
                print(f"    {check:<44} {w / n * 1e6:8.0f} us  {w / n / unit:6.2f} units  "
                      "(wall, from the records)")
    print(f"  {'total':<46} {total / n * 1e6:8.0f} us  {total / n / unit:6.2f} units")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--programs", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dask", default=None, metavar="ADDRESS",
                    help="also run on Dask: local:N or a scheduler address")
    ap.add_argument("--dask-batch", default="1", metavar="K[,K...]",
                    help="programs per Dask task; each value is one Dask run (default 1)")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="measure N times (baseline, then suite) and report the run with the "
                         "median ratio: one run swings by up to 10 %% on a shared machine")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time each stage of a suite program, in this process")
    args = ap.parse_args()
    if args.dask:
        dask_comparison(args)
        return

    # Both sides are timed after this process imported what they run (the checks too, at
    # the top: run_suite would import them in the timed part, ~20 ms where no bytecode is
    # cached), so the ratio is per-program work, not one-time imports. The baseline is
    # one pass over fresh program objects, as the target was set with.
    programs = [replace(pid.build()[0]) for pid in suite_ids(args.programs, args.seed)]
    runs = []  # per repeat: (suite CPU, suite wall, summary, plain CPU, plain wall, frozen CPU)
    for i in range(args.repeat):
        plain, plain_wall = _plain_pass([replace(p) for p in programs] if i else programs)
        with tempfile.TemporaryDirectory() as tmp:
            t, c0 = time.perf_counter(), os.times()
            summary = run_suite(SuiteConfig(programs=args.programs, seed=args.seed,
                                            workers=args.workers, out=Path(tmp) / "suite"))
            wall, c1 = time.perf_counter() - t, os.times()
        cpu = sum(b - a for a, b in zip(c0[:4], c1[:4]))  # user+system, self and children
        runs.append((cpu, wall, summary, plain, plain_wall, _frozen_plain(programs)))
        if args.repeat > 1:
            print(f"run {i + 1}/{args.repeat}: suite CPU {cpu:.2f} s, plain forward "
                  f"{plain:.3f} s: {cpu / plain:.1f}x; heap frozen {runs[-1][5]:.3f} s: "
                  f"{cpu / runs[-1][5]:.1f}x", flush=True)
    # the run whose one-pass ratio is the median (the lower middle one for an even count)
    cpu, wall, summary, plain, plain_wall, plain_frozen = sorted(
        runs, key=lambda r: r[0] / r[3])[(len(runs) - 1) // 2]
    if args.repeat > 1:
        print(f"(below: the run with the median ratio over the plain forward, of {len(runs)}; "
              f"the frozen-heap ratio's median is "
              f"{statistics.median(r[0] / r[5] for r in runs):.1f}x)")
    print(f"suite: {args.programs} programs, seed {args.seed}, {args.workers} workers, "
          f"{os.cpu_count()} CPUs; verdict {summary['verdict']}, {summary['records']} records")
    print(f"wall time                         {wall:8.2f} s  (target <= 20 s for 1,024 "
          "programs, 2 workers, 2 cores)")
    print(f"programs per second               {args.programs / wall:8.1f}")
    print(f"suite CPU time (self + workers)    {cpu:8.2f} s")
    print(f"plain forward, all programs       {plain:8.3f} s CPU, {plain_wall:.3f} s wall  "
          "(baseline, one process, fresh program objects)")
    print(f"verification / plain forward      {cpu / plain:8.1f}x  (CPU seconds; target <= 12x)")
    print(f"  in worker-seconds (wall)        {wall * args.workers / plain_wall:8.1f}x  "
          "(wall x workers over plain-forward wall: sensitive to other load)")
    print(f"  baseline with the heap frozen   {plain_frozen:8.3f} s CPU (median of 3): "
          f"{cpu / plain_frozen:.1f}x")
    if args.breakdown:  # (timed with the heap frozen: its unit is that baseline)
        breakdown(args, plain_frozen)


def _frozen_plain(programs: list) -> float:
    """The plain forward's CPU seconds with this process's heap frozen out of the garbage
    collector (gc.freeze), median of three passes over fresh program objects: the
    condition the suite's processes run under (its workers freeze what they inherit,
    run_suite the caller's heap). The collections of a plain pass otherwise walk the
    benchmark's own objects too (the built programs, the modules)."""
    frozen = []
    for _ in range(3):
        fresh = [replace(p) for p in programs]  # (nothing derived carried over)
        gc.freeze()
        frozen.append(_plain_pass(fresh)[0])
        gc.unfreeze()
        del fresh
    return sorted(frozen)[1]


if __name__ == "__main__":
    main()
