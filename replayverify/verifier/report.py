"""Suite outputs: summary.json, report.md and JUnit XML.

The failures a report lists (with their shrunk reproducers) are made by
``verifier.shrink.shrink_failures`` and passed in: this module only renders.
"""

from __future__ import annotations

import math
import os
import shutil
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

from replayverify.untrusted import dumps
from replayverify.verifier.coverage import CoverageTally, render_coverage
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


class SuiteTally:
    """What summary.json says of a run, kept as counters while its records and program
    statistics arrive, so that a suite's memory does not grow with its length.

    What a record adds to the counts depends only on its (check, engine, outcome), and a
    suite's ~15 records per program take a few dozen of those: each is tallied, and one
    record of each kept (its key and control name found from it once at the end). The
    first failing record of each failing program is kept for the shrinker and the report.
    """

    def __init__(self) -> None:
        self.records = 0
        self.tally: Counter = Counter()
        self.one: dict[tuple[str, str, str], Record] = {}  # a record of each
        self.errs: dict[tuple[str, str], float] = {}
        self.failing: list[Record] = []  # the first failing record of each failing program
        self._last_failing = ""
        self.programs = 0
        self.generated = GenerationTally()
        self.coverage = CoverageTally()

    def add_records(self, records: list[Record]) -> None:
        self.records += len(records)
        for r in records:
            key = (r.check, r.engine, r.outcome)
            self.tally[key] += 1
            self.one[key] = r
            err = r.max_abs_err
            if err is not None and math.isfinite(err):
                ce = (r.check, r.engine)
                if err > self.errs.get(ce, -1.0):
                    self.errs[ce] = err
            if r.failing and r.program != self._last_failing:
                self._last_failing = r.program
                self.failing.append(r)

    def add_stats(self, line: dict) -> None:
        self.programs += 1
        self.generated.add(line)
        self.coverage.add(line)

    def summary(self, *, seed: int, seconds: float, extra: dict | None = None) -> dict:
        outcomes: dict[str, Counter] = defaultdict(Counter)
        controls: dict[str, Counter] = defaultdict(Counter)
        key_of: dict[tuple[str, str], str] = {}
        for (check, engine, outcome), n in self.tally.items():
            r = self.one[check, engine, outcome]
            key_of[check, engine] = key = record_key(r)
            outcomes[key][outcome] += n
            name = control_name(r)
            if name is not None:
                controls[name][outcome] += n
        errs: dict[str, float] = {}
        for ce, err in self.errs.items():
            key = key_of[ce]
            errs[key] = max(errs.get(key, 0.0), err)
        representatives = list(self.one.values())
        verdict = "clean" if run_is_clean(representatives) else "failing"  # by the same keys
        summary = {
            "programs": self.programs,
            "seed": seed,
            "records": self.records,
            "verdict": verdict,
            "outcomes": {k: dict(sorted(v.items())) for k, v in sorted(outcomes.items())},
            "max_abs_err": dict(sorted(errs.items())),
            "controls": {k: {o: v.get(o, 0) for o in CONTROL_OUTCOMES[:3]} |
                         ({"error": v["error"]} if v.get("error") else {})
                         for k, v in sorted(controls.items())},
            "generated": self.generated.summary(),
            "coverage": self.coverage.summary(),
            "seconds": round(seconds, 3),
        }
        if extra:
            summary.update(extra)
        return summary

    def undetected_mutants(self) -> list[str]:
        return undetected_mutants(list(self.one.values()))


def summarize(records: list[Record], stats: list[dict], *, programs: int, seed: int,
              seconds: float, extra: dict | None = None) -> dict:
    """The summary of a run's records and statistics (:class:`SuiteTally` at once)."""
    tally = SuiteTally()
    tally.add_records(records)
    for line in stats:
        tally.add_stats(line)
    tally.programs = programs
    return tally.summary(seed=seed, seconds=seconds, extra=extra)


class GenerationTally:
    """Totals of what the generators produced, so a suite's diversity is visible."""

    def __init__(self) -> None:
        self.ops: Counter = Counter()
        self.fams: Counter = Counter()
        self.out: Counter = Counter()

    def add(self, s: dict) -> None:
        out = self.out
        if "ops" not in s:
            out["errored"] += 1
            return
        self.ops.update(s["ops"])
        self.fams[s["program"].split("/")[1]] += 1
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

    def summary(self) -> dict:
        return {"families": dict(sorted(self.fams.items())),
                "ops": dict(sorted(self.ops.items())), **dict(sorted(self.out.items()))}


def generation_stats(stats: list[dict]) -> dict:
    """Totals of what the generators produced, so a suite's diversity is visible."""
    tally = GenerationTally()
    for s in stats:
        tally.add(s)
    return tally.summary()


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


def write_junit(path: Path, records: Iterable[Record], seconds: float) -> None:
    """One test case per record; failing outcomes are failures, unsupported are skipped.

    ``records`` is iterated once (the suite streams them from records.jsonl): the cases are
    written to a temporary file first, the counts the header needs kept meanwhile."""
    from xml.sax.saxutils import escape, quoteattr  # (its imports take ~15 ms: only here)

    n = fails = skips = 0
    body = path.with_name(path.name + ".cases")
    with open(body, "w", encoding="utf-8") as out:
        for r in records:
            n += 1
            attrs = (f"classname={quoteattr(record_key(r))} name={quoteattr(r.program)} "
                     f'time="{r.seconds:.6f}"')
            if r.failing:
                fails += 1
                out.write(f"  <testcase {attrs}><failure message={quoteattr(r.outcome)}>"
                          f"{escape(r.detail)}</failure></testcase>\n")
            elif r.outcome is Outcome.UNSUPPORTED:
                skips += 1
                out.write(f"  <testcase {attrs}><skipped message={quoteattr(r.detail)}/>"
                          "</testcase>\n")
            else:
                out.write(f"  <testcase {attrs}/>\n")
    with open(path, "w", encoding="utf-8") as fh, open(body, encoding="utf-8") as cases:
        fh.write('<?xml version="1.0" encoding="UTF-8"?>\n'
                 f'<testsuite name="replayverify" tests="{n}" failures="{fails}" '
                 f'skipped="{skips}" time="{seconds:.3f}">\n')
        shutil.copyfileobj(cases, fh)
        fh.write("</testsuite>\n")
    body.unlink()


def write_outputs(cfg, tally: SuiteTally, seconds: float, failures: list[dict],
                  records: Callable[[], Iterable[Record]]) -> dict:
    """summary.json, report.md (and JUnit XML, from ``records()``: every record again, in
    order); ``failures`` as ``shrink_failures`` made them."""
    extra = {"family": cfg.family or "mixed", "shard": f"{cfg.shard[0]}/{cfg.shard[1]}",
             "undetected_mutants": tally.undetected_mutants()}
    summary = tally.summary(seed=cfg.seed, seconds=seconds, extra=extra)
    tmp = cfg.out / "summary.json.tmp"
    tmp.write_text(dumps(summary, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, cfg.out / "summary.json")
    (cfg.out / "report.md").write_text(render_report(summary, failures, cfg.command),
                                       encoding="utf-8")
    if cfg.junit:
        write_junit(Path(cfg.junit), records(), seconds)
    return summary
