"""Standalone reproducers for a cohort's divergences, shrunk first.

``write_reproducers(out, records)`` picks, for every (row, divergence kind), the first
record in task order and writes ``out/repro/<row-slug>/<case-slug>.py``: a script of at
most 40 lines that imports only its framework (and the standard library), builds the
case literally, runs it without checkpointing (the *plain run*) and with the method,
and prints one ``DIFFERS: ...`` line per thing that differs, exiting 1 if anything did.

The kind of a record:

- a D: the sorted tuple of its ``diverged`` entries (``("buffer hid", "gradient")``);
- an R: ``"rejected:<ExceptionType>"``, only where the plain run matches the reference
  on that case (an R where the plain run raises too says nothing about checkpointing).

What an adapter provides (both optional; not part of the ``Adapter`` protocol, so an
adapter without them still registers and simply gets no reproducers):

- ``reproducer(case, method, record) -> str | None``: the script's text; None when the
  method cannot be reproduced standalone (the index entry then says so).
- ``plain_method(method) -> Method | None``: the method of the same adapter that runs
  a case without checkpointing (torch: ``eager``, the row "torch native eager"). It
  need not be among ``methods()``: when the records hold no record of it for the case,
  it is run here. None: no plain run, so R records get no reproducer (D still do).

Before writing, the case is shrunk with the verifier's shrinker (``verifier/shrink.py``:
shorter views, fewer init entries, flat loss weights, trimmed buffers, then simpler
coefficients) while it keeps its roles and its kind: the ops and segments stay as they
are (roles name op indices), and a candidate is kept only when re-running the adapter
gives the same kind and the plain run the same outcome as on the original case. An
adapter's ``shrink_checks`` (default 400) bounds the candidates run per reproducer.
The scripts compare the method with the plain run, so their ``DIFFERS`` lines name what
the record names: ``gradient ...``, ``buffer <name>``, ``generator state``, ``raised <Type>: ...``
(``claims(kind)`` gives those prefixes; the index entry stores them).
"""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

from replayverify.cohort import registry
from replayverify.cohort.adapter import Adapter, Method, Reference, observe
from replayverify.cohort.cases import Case, build_case
from replayverify.programs.model import Program
from replayverify.runs.executors import Executor, ProcessPool
from replayverify.untrusted import one_line
from replayverify.verifier.shrink import shrink

SHRINK_CHECKS = 400  # candidates run per reproducer (an adapter may set ``shrink_checks``)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def kind_of(record: dict) -> str | tuple[str, ...] | None:
    """The divergence kind of a record (None: neither D nor R)."""
    if record["outcome"] == "diverge":
        return tuple(sorted(record["diverged"]))
    if record["outcome"] == "rejected":
        return f"rejected:{record['exception']['type']}"
    return None


def claims(kind: str | tuple[str, ...]) -> list[str]:
    """The ``DIFFERS:`` line prefixes a reproducer of ``kind`` prints."""
    if isinstance(kind, str):
        return [f"DIFFERS: raised {kind.split(':', 1)[1]}"]
    return [f"DIFFERS: {'generator state' if d == 'generator' else d}" for d in kind]


def _kind_label(kind: str | tuple[str, ...]) -> str:
    return kind if isinstance(kind, str) else "diverged: " + ", ".join(kind)


def _method(adapter: Adapter, name: str) -> Method | None:
    return next((m for m in adapter.methods(True) if m.name == name), None)


def _observe(adapter: Adapter, case: Case, method: Method) -> dict:
    return observe(adapter, case, method, Reference.of(case, adapter.draw_tape(case)))


def shrunk(adapter: Adapter, case: Case, method: Method, kind, plain: Method | None,
           plain_outcome: str | None) -> Case:
    """The smallest case found with the same roles, ops and segments that ``method``
    still gives ``kind`` on (and ``plain`` still ``plain_outcome``)."""
    ops, segments = case.program.ops, case.program.segments
    runs = [getattr(adapter, "shrink_checks", SHRINK_CHECKS)]  # adapter runs left
    same_ops = [True]  # first pass: the ops as they are (views, init, weights shrink)

    def still(p: Program) -> bool:
        if len(p.ops) != len(ops) or p.segments != segments or \
                [op.kind for op in p.ops] != [op.kind for op in ops] or runs[0] <= 0 or \
                (same_ops[0] and p.ops != ops):
            return False
        runs[0] -= 1
        cand = replace(case, program=p)
        try:
            if kind_of(_observe(adapter, cand, method)) != kind:
                return False
            return plain is None or _observe(adapter, cand, plain)["outcome"] == plain_outcome
        except Exception:  # no reference (the interpreter refuses it): not a candidate
            return False

    first = shrink(case.program, still)  # sizes first: the budget may be small
    same_ops[0] = False
    return replace(case, program=shrink(first, still))


def write_reproducers(out: Path, records: list[dict], pool: Executor | None = None
                      ) -> list[dict]:
    """Write one reproducer per (row, divergence kind); the index entries.

    Each entry: ``row``, ``kind`` (as text), ``case`` and ``task`` of the record it
    reproduces, ``claims`` (the ``DIFFERS:`` prefixes the script prints), and either
    ``path`` (relative to ``out``), ``lines``, ``elements`` (before and after
    shrinking) or ``path: None`` with ``why``.

    The groups (one per row and kind) are independent: ``pool`` (default: this
    process) runs them, e.g. the cohort's worker processes, since shrinking re-runs the
    method per candidate (a compile each for torch.compile). The entries and files are
    the same whatever runs them: in the order of the records they reproduce.
    """
    outcomes: dict[str, dict[str, str]] = {}  # task -> method -> outcome
    for rec in records:
        outcomes.setdefault(rec["task"], {})[rec["method"]] = rec["outcome"]
    groups: dict[tuple[str, object], _Job] = {}
    for i, rec in enumerate(records):
        kind = kind_of(rec)
        # a D is reproduced from its group's first record; an R from the first whose
        # plain run matches, found in the worker
        if kind is not None and (isinstance(kind, str) or (rec["row"], kind) not in groups):
            groups.setdefault((rec["row"], kind), _Job()).append(
                (i, rec, outcomes[rec["task"]]))
    found = [r for r in (pool or ProcessPool(1)).map(
        _group, list(groups.values()), name=lambda job: job.name, lost=_lost_group) if r]
    entries = []
    for _, entry, text in sorted(found, key=lambda r: r[0]):
        if text is not None:
            (out / entry["path"]).parent.mkdir(parents=True, exist_ok=True)
            (out / entry["path"]).write_text(text, encoding="utf-8")
        entries.append(entry)
    return entries


class _Job(list):
    """One (row, kind)'s candidate records, in record order, as a pool's task: (index,
    record, the outcomes of its task's methods)."""

    @property
    def name(self) -> str:
        return f"reproducer {self[0][1]['row']} ({kind_of(self[0][1])})"


def _head(rec: dict, kind) -> dict:
    """An index entry's fields that name the record it reproduces."""
    return {"row": rec["row"], "kind": _kind_label(kind), "case": rec["case"],
            "task": rec["task"], "claims": claims(kind)}


def _lost_group(job: _Job, reason: str) -> tuple | None:
    i, rec, _ = job[0]
    return i, {**_head(rec, kind_of(rec)), "path": None,
               "why": one_line(f"lost while shrinking: {reason}", 400)}, None


def _group(job: _Job) -> tuple[int, dict, str | None] | None:
    """The first record of one (row, kind) that gets a reproducer, shrunk: (its index,
    the index entry, the script or None); None when no record of it qualifies. A group's
    records share their framework and method (a row is one method of one framework)."""
    first = job[0][1]
    try:
        adapter = registry.get(first["framework"])
    except ValueError:
        return None
    method = None if getattr(adapter, "reproducer", None) is None else \
        _method(adapter, first["method"])
    if method is None:
        return None
    plain_of = getattr(adapter, "plain_method", None)
    plain = plain_of(method) if plain_of is not None else None
    for i, rec, task_outcomes in job:
        kind = kind_of(rec)
        case = build_case(rec["family"], rec["seed"], rec["dtype"])
        plain_outcome = None if plain is None else \
            task_outcomes.get(plain.name) or \
            _observe(adapter, case, plain)["outcome"]
        if isinstance(kind, str) and plain_outcome != "match":
            continue  # an R where the plain run is not M: not a checkpointing finding
        with warnings.catch_warnings():  # the frameworks' warnings about candidates
            warnings.simplefilter("ignore")
            small = shrunk(adapter, case, method, kind, plain, plain_outcome)
        text = adapter.reproducer(small, method, rec)
        if text is None:
            return i, {**_head(rec, kind), "path": None,
                       "why": f"{adapter.name} gives no standalone script for "
                              f"{rec['method']} (docs/cohort.md)"}, None
        rel = Path("repro") / slug(rec["row"]) / f"{slug(rec['case'])}.py"
        return i, {**_head(rec, kind), "path": rel.as_posix(), "lines": text.count("\n"),
                   "elements": [_elements(case.program), _elements(small.program)]}, text
    return None


def _elements(p: Program) -> int:
    return sum(v.size for v in p.views)


def render(entries: list[dict]) -> list[str]:
    """report.md's "Reproducers" section."""
    lines = ["", "## Reproducers (one per row and divergence kind)", ""]
    if not entries:
        return [*lines, "None."]
    for e in entries:
        if e["path"] is None:
            lines.append(f"- {e['row']}, {e['kind']} ({e['case']}): none: {e['why']}")
        else:
            lines.append(f"- {e['row']}, {e['kind']} ({e['case']}, shrunk "
                         f"{e['elements'][0]} -> {e['elements'][1]} view elements): "
                         f"[{e['path']}]({e['path']})")
    return lines


def run_script(path: Path, timeout: float = 600.0) -> tuple[int, list[str]]:
    """Run a reproducer in a fresh interpreter: (exit status, its ``DIFFERS:`` lines)."""
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=timeout, check=False)
    return done.returncode, [ln for ln in done.stdout.splitlines() if ln.startswith("DIFFERS: ")]


def shows(entry: dict, status: int, lines: list[str]) -> bool:
    """Whether a reproducer's run shows exactly what its index entry claims: exit 1 and
    one ``DIFFERS:`` line per claim, each starting with that claim."""
    return status == 1 and len(lines) == len(entry["claims"]) and all(
        any(ln.startswith(c) for ln in lines) for c in entry["claims"])
