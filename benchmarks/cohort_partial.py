"""Summary, report and reproducers of the keys finished by one or more cohort runs.

Run: python benchmarks/cohort_partial.py RUN_DIR [RUN_DIR ...] OUT_DIR --frameworks F
     --seconds S

Each RUN_DIR holds the records.jsonl of a cohort run (``replayverify cohort --out
RUN_DIR`` or ``benchmarks/cohort_speed.py --out RUN_DIR``), finished or stopped before
its end, over any keys. Tasks run in order framework, key, family, dtype, and a task's
records are written together, so a run's records are whole tasks. This takes each task
from the first RUN_DIR that holds it, keeps the keys from the first one on for which
every framework in F (comma-separated; with --extra's engines, name ``replayverify``
too) has every family and dtype, stopping at the first key that lacks one, puts the
records in the order of one run of those keys, and writes OUT_DIR/summary.json,
report.md and repro/ from them exactly as that run would (``summarize``,
``render_report``, ``write_reproducers``). The command line in them names the runs the
records came from; ``--seconds`` is the wall time the runs had spent. One RUN_DIR: the
keys an interrupted run finished (``--resume`` on it continues the full run instead).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from replayverify.cohort.cases import DTYPES, EXTRA_FAMILIES, FAMILIES
from replayverify.cohort.report import render_report
from replayverify.cohort.repro import write_reproducers
from replayverify.cohort.runner import CohortConfig, read_records, summarize
from replayverify.untrusted import dumps

FAMILY_ORDER = [*FAMILIES, *EXTRA_FAMILIES]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("dirs", nargs="+", help="RUN_DIR ... OUT_DIR")
    ap.add_argument("--frameworks", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    args = ap.parse_args()
    if len(args.dirs) < 2:
        ap.error("give at least one RUN_DIR and the OUT_DIR")
    *runs, out_dir = (Path(d) for d in args.dirs)
    frameworks = tuple(args.frameworks.split(","))
    tasks: dict[str, list[dict]] = {}
    source: dict[str, int] = {}
    for i, run in enumerate(runs):
        by_task: dict[str, list[dict]] = {}
        for r in read_records(run / "records.jsonl"):
            by_task.setdefault(r["task"], []).append(r)
        for task, recs in by_task.items():
            if task not in tasks and recs[0]["framework"] in frameworks:
                tasks[task], source[task] = recs, i
    done: dict[tuple[str, int], int] = {}
    for recs in tasks.values():
        fw_key = (recs[0]["framework"], recs[0]["seed"])
        done[fw_key] = done.get(fw_key, 0) + 1
    first = min(seed for _, seed in done)
    need = len(FAMILY_ORDER) * len(DTYPES)
    key = first
    while all(done.get((fw, key)) == need for fw in frameworks):
        key += 1
    if key == first:
        raise SystemExit(f"no key from {first} on is complete for every framework in "
                         f"{args.frameworks}")

    def order(task: str) -> tuple:
        r = tasks[task][0]
        return (frameworks.index(r["framework"]), r["seed"],
                FAMILY_ORDER.index(r["family"]), DTYPES.index(r["dtype"]))

    kept_tasks = sorted((t for t in tasks if first <= tasks[t][0]["seed"] < key), key=order)
    kept = [r for t in kept_tasks for r in tasks[t]]
    origin = "; ".join(
        f"{run}: {sum(len(tasks[t]) for t in kept_tasks if source[t] == i)} records"
        for i, run in enumerate(runs))
    compiled = [fw for fw in frameworks if fw != "replayverify"]
    cfg = CohortConfig(frameworks=tuple(compiled), seeds=(first, key), extra=True,
                       command=f"replayverify cohort --frameworks {','.join(compiled)} "
                               f"--seeds {first}:{key} --extra (the whole tasks of "
                               f"{len(runs)} cohort run(s), put in "
                               f"run order by benchmarks/cohort_partial.py: {origin})")
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(cfg, kept, args.seconds)
    ran = {r["framework"] for r in kept}  # frameworks not run (not reached) are left out
    summary["frameworks"] = {k: v for k, v in summary["frameworks"].items() if k in ran}
    summary["reproducers"] = write_reproducers(out_dir, kept)
    (out_dir / "summary.json").write_text(dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out_dir / "report.md").write_text(render_report(summary, kept), encoding="utf-8")
    print(f"keys {first}..{key - 1}: {len(kept)} records ({origin}) -> {out_dir}")


if __name__ == "__main__":
    main()
