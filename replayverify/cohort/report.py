"""report.md of a cohort run: the table with observed and expected cells side by side,
every distinct rejection message, and what each divergence was."""

from __future__ import annotations

from collections import Counter, defaultdict

from replayverify.cohort.expected import BUG_CLASS, PAPER_CELLS, TABLE2
from replayverify.cohort.expected_stateful import BUG_CLASS_STATEFUL, EXPECTED_STATEFUL


def _cells(c: dict) -> str:
    return f"{c['M']} / {c['R']} / {c['D']}"


def render_report(summary: dict, records: list[dict]) -> str:
    table = summary["table"]
    lines = ["# Framework cohort", "",
             f"`{summary['command']}`: {summary['records']} records, seed keys "
             f"{summary['seeds'][0]}-{summary['seeds'][1] - 1}, "
             f"{summary['seconds']} s. Verdict: **{summary['verdict']}**"
             + (f" (unexpected rows: {', '.join(summary['unexpected'])})"
                if summary["unexpected"] else "") + ".", "",
             "Frameworks: " + ", ".join(f"{k} {v}" for k, v in summary["frameworks"].items())
             + ".", ""]
    if summary["not_run"]:
        hints = sorted({r["detail"] for r in records if r["outcome"] == "unsupported"})
        lines += [f"Not run (unsupported): {', '.join(summary['not_run'])} - "
                  + "; ".join(hints), ""]
    lines += ["M: matches the reference (gradient within tolerance, every buffer's bytes and "
              "the generator state exact); R: the framework raised; D: silent divergence. "
              "Expected cells are the reference paper's Table 2 (scaled to the keys run) and, "
              "for the rows beyond it, docs/cohort.md's predictions. 'det.' counts the D "
              "records whose recomputation changed a tensor's shape, dtype or device (what "
              "torch's default determinism_check compares).", "",
              "| backend / method | M / R / D observed | expected | paper (50 keys) | "
              "as expected | det. |", "|---|---|---|---|---|---|"]
    paper_rows = [r for r in TABLE2 if r in table]
    other = [r for r in table if r not in TABLE2]
    for row in paper_rows + other:
        c = table[row]
        exp = c["expected"]
        has_exp = sum(exp.values()) > 0
        paper = PAPER_CELLS.get(row)
        ran = c["M"] + c["R"] + c["D"]
        ok = ("no-expectation" if ran else "-") if not has_exp else \
            ("no" if row in summary["unexpected"] else "yes")
        obs = _cells(c) + (f" (+{c['unsupported']} unsupported)" if c["unsupported"] else "") \
            + (f" (+{c['error']} adapter errors)" if c.get("error") else "")
        det = "-" if c["determinism_flagged"] is None else str(c["determinism_flagged"])
        lines.append(f"| {row} | {obs} | {_cells(exp) if has_exp else '-'} | "
                     f"{' / '.join(map(str, paper)) if paper else '-'} | {ok} | {det} |")
    lines += ["", "## Rejections (every distinct message)", ""]
    rejections: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for r in records:
        if r["outcome"] == "rejected":
            e = r["exception"]
            rejections[(e["type"], e["message"])][r["row"]] += 1
    if not rejections:
        lines.append("None.")
    for (etype, msg), rows in sorted(rejections.items()):
        where = ", ".join(f"{row} ({n})" for row, n in sorted(rows.items()))
        lines.append(f"- `{etype}: {msg}` - {where}")
    lines += ["", "## Divergences (what differed, per row)", ""]
    diverged: dict[str, Counter] = defaultdict(Counter)
    state_only: Counter = Counter()
    for r in records:
        if r["outcome"] == "diverge":
            diverged[r["row"]][", ".join(r["diverged"])] += 1
            if "gradient" not in r["diverged"]:
                state_only[r["row"]] += 1
    if not diverged:
        lines.append("None.")
    for row in diverged:
        kinds = "; ".join(f"{k}: {n}" for k, n in sorted(diverged[row].items()))
        extra = f" ({state_only[row]} with a matching gradient)" if state_only[row] else ""
        lines.append(f"- {row}{extra}: {kinds}")
    unexpected = [r for r in records if r["expected"] and r["outcome"] != "unsupported"
                  and {"match": "M", "rejected": "R", "diverge": "D"}.get(r["outcome"])
                  != r["expected"]]
    if unexpected:
        lines += ["", "## Unexpected records (first 20)", ""]
        for r in unexpected[:20]:
            lines.append(f"- {r['case']} {r['row']}: {r['outcome']} (expected "
                         f"{r['expected']}) {r['diverged'] or r['exception'] or r['detail'] or ''}")
    if "reproducers" in summary:
        from replayverify.cohort.repro import render

        lines += render(summary["reproducers"])
    if summary["extra"]:
        lines += ["", "## Rows beyond the paper: the bug class each models", ""]
        lines += [f"- **{k}**: {v}" for k, v in BUG_CLASS.items()]
        from replayverify.cohort.expected_compiled import BUG_CLASS_COMPILED, ROWS

        if any(row.split(" [")[0] in ROWS for row in table):
            lines += [f"- **{k}**: {v}" for k, v in BUG_CLASS_COMPILED.items()]
    if any(r["row"].split(" [")[0] in EXPECTED_STATEFUL for r in records):
        lines += ["", "## Stateful recomputation APIs: the bug class each row group models",
                  ""]
        lines += [f"- **{k}**: {v}" for k, v in BUG_CLASS_STATEFUL.items()]
    return "\n".join(lines) + "\n"
