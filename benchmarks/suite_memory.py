"""The suite client's memory at any length (issue #28): peak RSS at 1,024 vs 100,000 programs.

Run: python benchmarks/suite_memory.py [--programs 1024 100000] [--real 1024 4096]

Two measurements, each in a fresh subprocess that reports its own peak resident memory
(``ru_maxrss``, RUSAGE_SELF: the client alone, not its workers):

- ``client``: ``run_suite`` over N programs with an executor that hands back, for each
  program id, the records and statistics of one of 16 real programs checked beforehand
  (ids rewritten): everything the client does per program (journal, digests, tally,
  summary, report) at the cost of the client alone, so 100,000 programs take seconds.
  The target: 1,024 and 100,000 programs differ by under 50 MiB.
- ``real``: ``replayverify suite --programs N --workers 1`` run in-process by the
  subprocess (the checks in its one worker), for the N given with ``--real``.

Figures are printed as a table with the host's load average (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CLIENT = r"""
import json, resource, sys, time
from pathlib import Path
from replayverify.verifier.records import Record
from replayverify.verifier.suite import (
    Job,
    ProgramResult,
    SuiteConfig,
    run_job,
    run_suite,
    suite_ids,
)

n, out = int(sys.argv[1]), Path(sys.argv[2])
pool = [run_job(Job(pid, None, False, 0.0)) for pid in suite_ids(16, 0)]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

class Canned:
    def map(self, fn, tasks, *, name, lost):
        for i in range(len(tasks)):
            pid = str(tasks[i].pid)
            o = pool[i % len(pool)]
            yield ProgramResult(pid, [Record(pid, r.sha256, r.check, r.engine, r.outcome,
                                       r.max_abs_err, r.detail, r.seconds, dict(r.metrics))
                                for r in o.records], {**o.stats, "program": pid})

t0 = time.perf_counter()
s = run_suite(SuiteConfig(programs=n, seed=0, out=out, shrink=False), executor=Canned())
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"programs": s["programs"], "records": s["records"],
                  "seconds": round(time.perf_counter() - t0, 2),
                  "start_kib": base, "peak_kib": peak}))
"""

REAL = r"""
import json, resource, sys, time
from replayverify.cli import main
t0 = time.perf_counter()
try:
    main(["suite", "--programs", sys.argv[1], "--workers", "1", "--out", sys.argv[2]])
except SystemExit:
    pass
print(json.dumps({"seconds": round(time.perf_counter() - t0, 2),
                  "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def measure(script: str, n: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        res = subprocess.run([sys.executable, "-c", script, str(n), os.path.join(tmp, "o")],
                             capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, nargs="*", default=[1024, 100_000])
    ap.add_argument("--real", type=int, nargs="*", default=[])
    args = ap.parse_args()
    import replayverify

    print(f"replayverify from {Path(replayverify.__file__).parent} (the subprocesses run "
          "with this cwd first on sys.path)")
    print(f"load average {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")
    print("| run | programs | records | seconds | peak RSS MiB | above start MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    rows = {}
    for n in args.programs:
        d = rows[n] = measure(CLIENT, n)
        print(f"| client | {n} | {d['records']} | {d['seconds']} | {d['peak_kib'] / 1024:.1f} | "
              f"{(d['peak_kib'] - d['start_kib']) / 1024:.1f} |", flush=True)
    for n in args.real:
        d = measure(REAL, n)
        print(f"| real, --workers 1 | {n} | - | {d['seconds']} | {d['peak_kib'] / 1024:.1f} | - |",
              flush=True)
    if len(rows) >= 2:
        lo, hi = min(rows), max(rows)
        diff = (rows[hi]["peak_kib"] - rows[lo]["peak_kib"]) / 1024
        print(f"client peak at {hi} minus at {lo} programs: {diff:.1f} MiB (target < 50)")
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) at the end")


if __name__ == "__main__":
    main()
