"""The cohort runner: a list of task ids, one task run by id, records out.

A task is one case through every method of one framework:
``"<framework>/<family>/<seed key>/<dtype>"``. ``task_ids(config)`` lists them in a
fixed order, ``run_task(task_id, extra=...)`` runs one anywhere (a worker process, a
Dask worker) and returns its records as plain dicts, and ``run_cohort`` maps them over
an executor (``runs/executors.py``: local processes or Dask) in task order, so the
records do not depend on where they ran, appends each task's records to records.jsonl
as it arrives (resumable, like the suite's), then writes summary.json and report.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from replayverify.cohort import registry
from replayverify.cohort.adapter import LETTER, Method, Reference, observe
from replayverify.cohort.cases import (
    DEFAULT_SEEDS,
    DTYPES,
    EXTRA_FAMILIES,
    FAMILIES,
    build_case,
    extra_row,
)
from replayverify.cohort.compile_cache import shared_compile_cache
from replayverify.cohort.expected import expected_letter
from replayverify.plugins import call, checked
from replayverify.runs.executors import Executor, ProcessPool
from replayverify.runs.journal import open_journal
from replayverify.untrusted import dumps, one_line, shown

TASK_LIMIT = 600.0  # default hard wall-clock limit per task (s): its worker is then killed
ASK_LIMIT = 60.0  # hard seconds to ask a lost task's adapter its methods (in a child)
MAX_KEYS = 10**12  # most seed keys of one cohort (the message says 10^12)


class CohortError(ValueError):
    """Bad cohort arguments (exit status 2)."""


@dataclass(frozen=True)
class CohortConfig:
    frameworks: tuple[str, ...] = ("torch", "jax")
    seeds: tuple[int, int] = DEFAULT_SEEDS  # keys seeds[0] .. seeds[1]-1
    extra: bool = False
    workers: int = 0  # 0: one per CPU
    out: Path | None = None
    resume: bool = False  # continue the run in ``out`` (same frameworks, seeds, extra)
    command: str = "replayverify cohort"
    families: tuple[str, ...] = field(default=())  # () : all (with --extra: and extras)
    timeout: float = TASK_LIMIT  # hard seconds per task, in a child process (0: none)

    def framework_list(self) -> tuple[str, ...]:
        """The frameworks asked for; with ``extra``, replayverify's own engines too."""
        if self.extra and "replayverify" not in self.frameworks:
            return (*self.frameworks, "replayverify")
        return self.frameworks

    def family_list(self) -> tuple[str, ...]:
        if self.families:
            return self.families
        return (*FAMILIES, *(EXTRA_FAMILIES if self.extra else ()))


def parse_seeds(text: str) -> tuple[int, int]:
    """``A:B`` -> keys A..B-1 (A < B, both >= 0)."""
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise CohortError(f"bad --seeds {shown(text)}: expected A:B, for example "
                          "420000:420050") from None
    if not 0 <= a < b:
        raise CohortError(f"bad --seeds {shown(text)}: need 0 <= A < B")
    if b - a > MAX_KEYS:
        raise CohortError(f"bad --seeds {shown(text)}: at most 10^12 keys in one cohort")
    return a, b


def check_config(cfg: CohortConfig) -> None:
    """Refuse unknown or repeated frameworks or families with one line (CohortError)."""
    for fw in {fw for fw in cfg.framework_list() if cfg.framework_list().count(fw) > 1}:
        raise CohortError(f"--frameworks names {fw!r} more than once")
    for fw in cfg.framework_list():
        try:
            registry.get(fw)
        except ValueError as exc:
            raise CohortError(str(exc)) from None
    for fam in cfg.family_list():
        if fam not in FAMILIES and fam not in EXTRA_FAMILIES:
            raise CohortError(f"unknown cohort family {shown(fam)}")


class TaskIds(Sequence[str]):
    """Every task of the cohort from number ``start`` on, in record order (framework, seed
    key, family, dtype), each made when asked for: a cohort of any length costs the same
    few bytes. A slice is a list."""

    def __init__(self, cfg: CohortConfig, start: int = 0) -> None:
        self.fws, self.fams = cfg.framework_list(), cfg.family_list()
        self.seeds = range(*cfg.seeds)
        self.start = start
        self.n = len(self.fws) * len(self.seeds) * len(self.fams) * len(DTYPES) - start

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(self.n)[i]]
        if not -self.n <= i < self.n:
            raise IndexError(i)
        rest, dtype = divmod(i % self.n + self.start, len(DTYPES))
        rest, fam = divmod(rest, len(self.fams))
        fw, seed = divmod(rest, len(self.seeds))
        return f"{self.fws[fw]}/{self.fams[fam]}/{self.seeds[seed]}/{DTYPES[dtype]}"


def task_ids(cfg: CohortConfig) -> TaskIds:
    """Every task of the cohort, in record order: framework, seed key, family, dtype."""
    return TaskIds(cfg)


class _Items(Sequence[tuple[str, bool]]):
    """(task id, extra) for each task from number ``skip`` on, made when asked for."""

    def __init__(self, cfg: CohortConfig, skip: int) -> None:
        self.ids, self.extra = TaskIds(cfg, skip), cfg.extra

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):  # (an int: the executors never slice it)
        return self.ids[i], self.extra


def parse_task(task_id: str) -> tuple[str, str, int, str]:
    fw, fam, seed, dtype = task_id.rsplit("/", 3)
    return fw, fam, int(seed), dtype


def run_task(task_id: str, *, extra: bool = False) -> list[dict]:
    """Every applicable method of one framework on one case: one record each.

    A framework that is missing gives ``unsupported`` records with the install hint;
    a framework exception is a ``rejected`` record; nothing raises for a framework.
    """
    fw = parse_task(task_id)[0]
    adapter, case, methods, base = _plan(task_id, extra)
    hint = _ask(fw, "missing()", adapter.missing, kind=(str, type(None)))
    ref = None
    if hint is None:
        try:
            ref = Reference.of(case, call(adapter.draw_tape, case))
        except Exception as exc:  # the framework cannot even draw: nothing to compare
            hint = one_line(f"no reference: {type(exc).__name__}: {exc}")
    version = "" if ref is None else _ask(fw, "version()", adapter.version, kind=str)
    records = []
    for m in methods:
        if ref is None:
            body = _empty("unsupported", hint)
        else:
            obs = observe(adapter, case, m, ref)
            body = {**obs, "detail": obs.get("detail", "")}
        records.append({**_head(base, m, version), **body})
    return records


def _plan(task_id: str, extra: bool) -> tuple:
    """(adapter, case, the methods that apply to it, the fields every record of it has)."""
    fw = parse_task(task_id)[0]
    adapter = registry.get(fw)
    case, base = _base(task_id, adapter.name)
    methods = [m for m in _ask(fw, "methods()", adapter.methods, extra, kind=(tuple, list))
               if _ask(fw, "methods()", checked, m, Method, "a method", kind=Method)
               .applies(case)]
    return adapter, case, methods, base


def _base(task_id: str, framework: str) -> tuple:
    """(the task's case, the fields every record of the task has but the method's)."""
    _, fam, seed, dtype = parse_task(task_id)
    case = build_case(fam, seed, dtype)
    return case, {"task": task_id, "case": case.id, "framework": framework, "family": fam,
                  "seed": seed, "dtype": dtype, "sha256": case.program.sha256}


def _head(base: dict, m: Method, version: str) -> dict:
    row = extra_row(m.row, base["family"])
    return {**base, "version": version, "method": m.name, "row": row,
            "expected": _expected(m, row, base["family"], version)}


def _empty(outcome: str, detail: str | None) -> dict:
    """A record's body when the method did not run (``unsupported``, or a lost task)."""
    return {"outcome": outcome, "diverged": [], "max_abs_err": None, "exception": None,
            "determinism_flagged": None, "detail": detail, "seconds": 0.0}


def _ask(fw: str, what: str, fn: Callable, *args: object, kind: type | tuple[type, ...]):
    """A cohort adapter's answer (``fn(*args)``, of ``kind``); CohortError in one line when it
    raises, exits or answers something else: no task of it can be recorded."""
    try:
        return checked(call(fn, *args), kind, what)
    except Exception as exc:
        raise CohortError(one_line(f"cohort adapter {fw!r}: {what} failed: "
                                   f"{type(exc).__name__}: {exc}", 400)) from None


def _expected(method, row: str, family: str, version: str) -> str | None:
    own = getattr(method, "expect", None)
    if own:
        return own.get(family)
    return expected_letter(row, family, version or None)


# ---------------------------------------------------------------- the run


# The framework of the last task this process ran (``_run_one``): tasks come framework
# after framework, and when a worker moves on, the adapter it leaves may give back what it
# holds (``close()``, optional: an isolated adapter ends its child, which in a JAX row
# holds GBs of compiled programs, 2026-12-02: two such idle children and two busy ones
# filled a 24 GB machine in a 50-key run).
_last_framework: list[str] = []


def _run_one(args: tuple[str, bool]) -> list[dict]:
    fw = parse_task(args[0])[0]
    if _last_framework and _last_framework[0] != fw:
        # it only gives memory back: nothing may fail here, not even a lookup of a
        # framework unregistered since (a user's adapter of an earlier run in this process)
        with contextlib.suppress(Exception):
            close = getattr(registry.get(_last_framework[0]), "close", None)
            if callable(close):
                call(close)
    _last_framework[:] = [fw]
    return run_task(args[0], extra=args[1])


def _lost(item: tuple[str, bool], reason: str) -> list[dict]:
    """The records of a task every worker it was given to died on (it ran past the hard
    time limit, or ended its process): one ``error`` record per method the framework would
    have run, ``detail`` "lost: <reason>", and the run goes on. The adapter's methods and
    version are asked in a child process under a hard limit (plug-in code can hang or end
    the client too); if that fails as well, one ``error`` record, method "?", stands for the
    task."""
    detail = one_line(f"lost: {reason}", 400)
    pool = ProcessPool(1, limit=ASK_LIMIT)
    return next(iter(pool.map(partial(_lost_records, detail), [item], name=lambda i: i[0],
                              lost=partial(_unknown, detail))))


def _lost_records(detail: str, item: tuple[str, bool]) -> list[dict]:
    try:
        adapter, _, methods, base = _plan(*item)
        version = _ask(parse_task(item[0])[0], "version()", adapter.version, kind=str)
    except Exception as exc:  # (CohortError) the adapter cannot say: one record for all
        return _unknown(detail, item, one_line(str(exc), 400))
    return [{**_head(base, m, version), **_empty("error", detail)} for m in methods]


def _unknown(detail: str, item: tuple[str, bool], why: str) -> list[dict]:
    """The one ``error`` record of a lost task whose methods are not known (``why``)."""
    fw = parse_task(item[0])[0]
    head = {"version": "", "method": "?", "row": f"{fw} ?", "expected": None}
    why = one_line(f"{detail}; its methods unknown: {why}", 400)
    return [{**_base(item[0], fw)[1], **head, **_empty("error", why)}]


def _workers(cfg: CohortConfig) -> int:
    return cfg.workers or os.cpu_count() or 1


def run_tasks(cfg: CohortConfig, executor: Executor | None = None,
              skip: int = 0) -> Iterator[list[dict]]:
    """Each task's records, in task order, from task number ``skip`` on.

    ``executor`` says where tasks run (default: ``cfg.workers`` local processes; or a
    ``DaskExecutor``, each Dask task keyed by its cohort task id); the records do not
    depend on it.
    """
    executor = executor or ProcessPool(_workers(cfg), limit=cfg.timeout)
    items = _Items(cfg, skip)
    with shared_compile_cache():  # JAX's compiles shared by the run's processes
        yield from executor.map(_run_one, items, name=lambda item: item[0], lost=_lost)


def run_records(cfg: CohortConfig, executor: Executor | None = None,
                on_task: Callable[[int], None] | None = None) -> Iterator[dict]:
    """Records of every task in order (nothing written)."""
    for recs in run_tasks(cfg, executor):
        if on_task is not None:
            on_task(1)
        yield from recs


COHORT_FILES = {"records_bytes": "records.jsonl"}


def run_meta(cfg: CohortConfig) -> dict:
    """The options that change the records: ``--resume`` must be given the same."""
    return {"frameworks": list(cfg.frameworks), "seeds": list(cfg.seeds), "extra": cfg.extra,
            "families": list(cfg.families)}


def run_cohort(cfg: CohortConfig, executor: Executor | None = None,
               on_task: Callable[[int], None] | None = None) -> dict:
    """Run (or with ``cfg.resume`` continue) the cohort; the summary.

    With ``cfg.out``, each task's records are appended to records.jsonl and flushed as
    it arrives (``runs/journal.py``, as the suite does), so an interrupted run
    loses nothing it reported and ``resume`` reruns only the tasks not completely
    written; summary.json and report.md are then written from every record in the file,
    with a shrunk standalone reproducer per row and divergence kind under ``out/repro/``
    (``repro.write_reproducers``; summary["reproducers"] indexes them).
    ``on_task(n)`` is told of tasks done (on resume first of those already written).
    """
    from replayverify.cohort.report import render_report
    from replayverify.cohort.repro import write_reproducers

    check_config(cfg)
    start = time.perf_counter()
    out = cfg.out
    if out is None:
        records = list(run_records(cfg, executor, on_task))
        return summarize(cfg, records, time.perf_counter() - start)
    with open_journal(out, run_meta(cfg), COHORT_FILES, resume=cfg.resume, what="cohort",
                      error=CohortError, ends=("summary.json", "report.md")) as journal:
        if on_task is not None and journal.done:
            on_task(journal.done)
        for recs in run_tasks(cfg, executor, skip=journal.done):
            journal.append({"records_bytes": "".join(dumps(r) + "\n" for r in recs).encode()})
            if on_task is not None:
                on_task(1)
        # still locked: DIR is this run's until its outputs are written
        records = read_records(out / "records.jsonl")
        # shrunk in the run's own worker processes (a Dask run's too: shrinking is short)
        reproducers = write_reproducers(out, records, ProcessPool(_workers(cfg)))
        summary = summarize(cfg, records, time.perf_counter() - start)
        summary["reproducers"] = reproducers
        (out / "summary.json").write_text(dumps(summary, indent=2) + "\n", encoding="utf-8")
        (out / "report.md").write_text(render_report(summary, records), encoding="utf-8")
    return summary


def read_records(path: Path) -> list[dict]:
    """The records of a cohort's records.jsonl, in file order."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def summarize(cfg: CohortConfig, records: list[dict], seconds: float) -> dict:
    """The table (observed and expected cells per row) and the verdict."""
    table: dict[str, dict] = {}
    versions: dict[str, str] = {}
    for r in records:
        cell = table.setdefault(r["row"], {"M": 0, "R": 0, "D": 0, "unsupported": 0,
                                           "expected": {"M": 0, "R": 0, "D": 0},
                                           "unexpected_records": 0,
                                           "determinism_flagged": None})
        letter = LETTER.get(r["outcome"])
        if r["outcome"] == "error":  # the adapter's fault: a key only where one occurred
            cell["error"] = cell.get("error", 0) + 1
        else:
            cell[letter or "unsupported"] += 1
        if r["expected"] is not None:
            cell["expected"][r["expected"]] += 1
            if letter is not None and letter != r["expected"]:
                cell["unexpected_records"] += 1
        if r["determinism_flagged"] is not None:
            if r["outcome"] == "diverge":
                cell["determinism_flagged"] = (cell["determinism_flagged"] or 0) + bool(
                    r["determinism_flagged"])
            elif cell["determinism_flagged"] is None:
                cell["determinism_flagged"] = 0
        if r["version"]:
            versions[r["framework"]] = r["version"]
    unexpected, unjudged = [], []
    errored = {r["row"] for r in records if r["outcome"] == "error"}  # the adapter's faults
    for row, cell in table.items():
        if row in errored:
            unexpected.append(row)
            continue
        ran = cell["M"] + cell["R"] + cell["D"]
        if ran and not sum(cell["expected"].values()):
            unjudged.append(row)  # no expectation (another torch than the pinned one)
        if ran == 0 or not sum(cell["expected"].values()):
            continue  # not run (framework missing) or no expectation: nothing to judge
        if any(cell[k] != cell["expected"][k] for k in "MRD") or cell["unsupported"]:
            unexpected.append(row)
    missing = sorted({r["framework"] for r in records if r["outcome"] == "unsupported"})
    return {
        "frameworks": {fw: versions.get(registry.get(fw).name, "not installed")
                       for fw in cfg.framework_list()},
        "seeds": list(cfg.seeds), "extra": cfg.extra,
        "table": table,
        "records": len(records),
        "outcomes": dict(sorted(Counter(r["outcome"] for r in records).items())),
        "verdict": "unexpected" if unexpected else "as-expected",
        "unexpected": unexpected,
        "not_run": missing,
        **({"no_expectation": unjudged} if unjudged else {}),
        "command": cfg.command,
        "seconds": round(seconds, 3),
    }
