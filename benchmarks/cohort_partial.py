"""Summary, report and reproducers of the keys an interrupted cohort run finished.

Run: python benchmarks/cohort_partial.py RUN_DIR OUT_DIR --frameworks F --seconds S

RUN_DIR holds an interrupted run's records.jsonl (``replayverify cohort --out RUN_DIR``
or ``benchmarks/cohort_speed.py --out RUN_DIR``, stopped before its end). Tasks run in
order framework, key, family, dtype, so the first frameworks' leading keys are complete:
this keeps the records of the keys every asked framework finished with every family and
dtype, and writes OUT_DIR/summary.json, report.md and repro/ from them exactly as a run
of those keys would (``summarize``, ``render_report``, ``write_reproducers``). The
command line in them says what ran; ``--seconds`` is the wall time the run had spent.
``--resume`` on RUN_DIR continues the full run instead.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from replayverify.cohort.cases import DTYPES, EXTRA_FAMILIES, FAMILIES
from replayverify.cohort.report import render_report
from replayverify.cohort.repro import write_reproducers
from replayverify.cohort.runner import CohortConfig, read_records, summarize
from replayverify.untrusted import dumps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--frameworks", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    args = ap.parse_args()
    frameworks = tuple(args.frameworks.split(","))
    records = read_records(Path(args.run_dir) / "records.jsonl")
    need = len([*FAMILIES, *EXTRA_FAMILIES]) * len(DTYPES)
    done: dict[tuple[str, int], set] = defaultdict(set)
    for r in records:
        done[(r["framework"], r["seed"])].add(r["task"])
    first = min(r["seed"] for r in records)
    key = first
    while all(len(done[(fw, key)]) == need for fw in frameworks):
        key += 1
    kept = [r for r in records if r["framework"] in frameworks and first <= r["seed"] < key]
    cfg = CohortConfig(frameworks=frameworks, seeds=(first, key), extra=True,
                       command=f"replayverify cohort --frameworks {args.frameworks} --seeds "
                               f"{first}:{key} --extra (the keys finished by an interrupted "
                               f"run of benchmarks/cohort_speed.py, cut by "
                               f"benchmarks/cohort_partial.py)")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(cfg, kept, args.seconds)
    ran = {r["framework"] for r in kept}  # replayverify's engines run last: not reached
    summary["frameworks"] = {k: v for k, v in summary["frameworks"].items() if k in ran}
    summary["reproducers"] = write_reproducers(out, kept)
    (out / "summary.json").write_text(dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / "report.md").write_text(render_report(summary, kept), encoding="utf-8")
    print(f"keys {first}..{key - 1}: {len(kept)} records of {len(records)} -> {out}")


if __name__ == "__main__":
    main()
