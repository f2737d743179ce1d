"""Suite outputs: summary.json, report.md and JUnit XML.

The failures a report lists (with their shrunk reproducers) are made by
``verifier.shrink.shrink_failures`` and passed in: this module only renders.
"""

from __future__ import annotations

import math
import os
from collections import Counter, defaultdict
from pathlib import Path

from replayverify.untrusted import dumps
from replayverify.verifier.coverage import coverage_summary, render_coverage
from replayverify.verifier.records import (
    CONTROL_PREFIX,
    MUTANT_PREFIX,
    Outcome,
    Record,
    run_is_clean,
    undetected_mutants,
)

CONTROL_OUTCOMES = (Outcome.DETECTED, Outcome.MISSED, Outcome.UNSUPPORTED, Outcome.ERROR)


def record_key(r: Record) -> str:
    return f"{r.check}/{r.engine}" if r.engine else r.check


def control_name(r: Record) -> str | None:
    """Controls and engine mutants are counted in ``controls``; other records are not."""
    if r.check.startswith(CONTROL_PREFIX) or r.is_mutant:
        return r.check
    if r.engine.startswith(MUTANT_PREFIX) and r.outcome in (Outcome.DETECTED, Outcome.MISSED):
        return r.engine
    return None


def summarize(records: list[Record], stats: list[dict], *, programs: int, seed: int,
              seconds: float, extra: dict | None = None) -> dict:
    # what a record adds to the counts depends only on its (check, engine, outcome), and
    # a suite's ~15 records per program take a few dozen of those: each is tallied, and
    # its key and control name found, once
    tally = Counter([(r.check, r.engine, r.outcome) for r in records])
    one = {(r.check, r.engine, r.outcome): r for r in records}  # a record of each
    outcomes: dict[str, Counter] = defaultdict(Counter)
    controls: dict[str, Counter] = defaultdict(Counter)
    key_of: dict[tuple[str, str], str] = {}
    for (check, engine, outcome), n in tally.items():
        r = one[check, engine, outcome]
        key_of[check, engine] = key = record_key(r)
        outcomes[key][outcome] += n
        name = control_name(r)
        if name is not None:
            controls[name][outcome] += n
    errs: dict[str, float] = {}
    for r in records:
        if r.max_abs_err is not None and math.isfinite(r.max_abs_err):
            key = key_of[r.check, r.engine]
            errs[key] = max(errs.get(key, 0.0), r.max_abs_err)
    verdict = "clean" if run_is_clean(list(one.values())) else "failing"  # by the same keys
    summary = {
        "programs": programs,
        "seed": seed,
        "records": len(records),
        "verdict": verdict,
        "outcomes": {k: dict(sorted(v.items())) for k, v in sorted(outcomes.items())},
        "max_abs_err": dict(sorted(errs.items())),
        "controls": {k: {o: v.get(o, 0) for o in CONTROL_OUTCOMES[:3]} |
                     ({"error": v["error"]} if v.get("error") else {})
                     for k, v in sorted(controls.items())},
        "generated": generation_stats(stats),
        "coverage": coverage_summary(stats),
        "seconds": round(seconds, 3),
    }
    if extra:
        summary.update(extra)
    return summary


def generation_stats(stats: list[dict]) -> dict:
    """Totals of what the generators produced, so a suite's diversity is visible."""
    ops: Counter = Counter()
    fams: Counter = Counter()
    out = Counter()
    for s in stats:
        if "ops" not in s:
            out["errored"] += 1
            continue
        ops.update(s["ops"])
        fams[s["program"].split("/")[1]] += 1
        out["programs_with_overlapping_writes"] += bool(s["overlapping_writes"])
        out["overlapping_writes"] += s["overlapping_writes"]
        out["programs_with_integer_aliases"] += bool(s["integer_aliases"])
        out["programs_with_hazards"] += bool(s["hazards"])
        out["hazards"] += s["hazards"]
        out["programs_with_draws"] += bool(s["draws"])
        out["programs_with_strided_views"] += bool(s["strided_views"])
        out["float32_programs"] += s["float32"]
        out["admitted_gradients"] += s["supported"]
        out["rejected_draws"] += s["attempts"] - 1
    return {"families": dict(sorted(fams.items())), "ops": dict(sorted(ops.items())),
            **dict(sorted(out.items()))}


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def render_report(summary: dict, failures: list[dict], command: str) -> str:
    lines = ["# replayverify suite report", "",
             f"Command: `{command}`", "",
             f"Verdict: **{summary['verdict']}** — {summary['programs']} programs, "
             f"{summary['records']} records, seed {summary['seed']}, "
             f"{summary['seconds']} s.", ""]
    all_outcomes = sorted({o for v in summary["outcomes"].values() for o in v})
    lines += ["## Checks by engine", "",
              "| check / engine | " + " | ".join(all_outcomes) + " | max abs err |",
              "|---|" + "---|" * (len(all_outcomes) + 1)]
    for key, counts in summary["outcomes"].items():
        if key in summary["controls"]:
            continue
        cells = [str(counts.get(o, 0)) for o in all_outcomes]
        lines.append(f"| {key} | " + " | ".join(cells) +
                     f" | {_fmt(summary['max_abs_err'].get(key))} |")
    lines += ["", "## Controls and engine mutants", "",
              "| control | detected | missed | unsupported |", "|---|---|---|---|"]
    for name, c in summary["controls"].items():
        lines.append(f"| {name} | {c['detected']} | {c['missed']} | {c['unsupported']} |")
    gen = summary["generated"]
    missed = summary.get("undetected_mutants") or []
    if missed:
        lines += ["", f"Mutants no program detected (each fails the run): {', '.join(missed)}"]
    lines += ["", "## What was generated", "",
              "| statistic | value |", "|---|---|"]
    for k, v in gen.items():
        if isinstance(v, dict):
            v = ", ".join(f"{a} {b}" for a, b in v.items())
        lines.append(f"| {k.replace('_', ' ')} | {v} |")
    if "coverage" in summary:
        lines += render_coverage(summary["coverage"])
    lines += ["", "## Failures", ""]
    if not failures:
        lines.append("None.")
    for f in failures:
        lines.append(f"- `{f['program']}` {f['check']}"
                     f"{(' / ' + f['engine']) if f['engine'] else ''}: {f['outcome']} — "
                     f"{f['detail'] or 'no detail'}")
        lines.append(f"  - reproduce: `{f['replay']}`")
        if f.get("shrunk"):
            lines.append(f"  - shrunk to {f['shrunk_ops']} ops: `{f['shrunk']}`; "
                         f"check it: `{f['check_command']}`")
    return "\n".join(lines) + "\n"


def write_junit(path: Path, records: list[Record], seconds: float) -> None:
    """One test case per record; failing outcomes are failures, unsupported are skipped."""
    from xml.sax.saxutils import escape, quoteattr  # (its imports take ~15 ms: only here)

    fails = sum(r.failing for r in records)
    skips = sum(r.outcome is Outcome.UNSUPPORTED for r in records)
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<testsuite name="replayverify" tests="{len(records)}" failures="{fails}" '
           f'skipped="{skips}" time="{seconds:.3f}">']
    for r in records:
        attrs = (f"classname={quoteattr(record_key(r))} name={quoteattr(r.program)} "
                 f'time="{r.seconds:.6f}"')
        if r.failing:
            out.append(f"  <testcase {attrs}><failure message={quoteattr(r.outcome)}>"
                       f"{escape(r.detail)}</failure></testcase>")
        elif r.outcome is Outcome.UNSUPPORTED:
            out.append(f"  <testcase {attrs}><skipped message={quoteattr(r.detail)}/>"
                       "</testcase>")
        else:
            out.append(f"  <testcase {attrs}/>")
    out.append("</testsuite>")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


def write_outputs(cfg, records: list[Record], stats: list[dict], seconds: float,
                  failures: list[dict]) -> dict:
    """summary.json, report.md (and JUnit XML); ``failures`` as ``shrink_failures`` made
    them."""
    extra = {"family": cfg.family or "mixed", "shard": f"{cfg.shard[0]}/{cfg.shard[1]}",
             "undetected_mutants": undetected_mutants(records)}
    summary = summarize(records, stats, programs=len(stats), seed=cfg.seed, seconds=seconds,
                        extra=extra)
    tmp = cfg.out / "summary.json.tmp"
    tmp.write_text(dumps(summary, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, cfg.out / "summary.json")
    (cfg.out / "report.md").write_text(render_report(summary, failures, cfg.command),
                                       encoding="utf-8")
    if cfg.junit:
        write_junit(Path(cfg.junit), records, seconds)
    return summary
