"""The suite runner: generated programs through every check, streamed to disk.

Records are identical whatever the worker count (programs finish in id order, each
program's records are written and flushed as one block), and a killed run resumes
to exactly the records of an uninterrupted one: ``progress.jsonl`` holds the suite's
parameters on its first line and, after each complete program, one appended line with
the byte lengths and sha256 digests of ``records.jsonl`` and ``programs.jsonl``;
``--resume`` proves both are this run's, truncates them to the last complete program
and continues with the next (the mechanics, and the lock that keeps a second run out,
are ``runs/journal.py``'s, which the cohort shares). Program ids are made as they
are needed and the summary is kept as counters (``report.SuiteTally``): the client's
memory does not grow with the suite's length.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

import numpy as np

from replayverify.programs.errstate import quiet
from replayverify.programs.generate import FAMILIES, Generated, generate_with_attempts
from replayverify.programs.interpreter import Execution, stale_operands
from replayverify.programs.model import FLOAT_DTYPES, OP_SPECS, Program, View
from replayverify.programs.state import layouts
from replayverify.runs import executors
from replayverify.runs.executors import Executor, ProcessPool, TaskTimeout, time_limit
from replayverify.runs.journal import RunJournal, open_journal
from replayverify.untrusted import dumps, shown
from replayverify.verifier.compare import Verdict
from replayverify.verifier.coverage import program_coverage
from replayverify.verifier.records import (
    Check,
    Outcome,
    Record,
    make_record,
    record_rows,
    records_from_rows,
)
from replayverify.verifier.report import SuiteTally

SUITE_FAMILIES = ("derivative", "bytes", "alias", "complex", "mixed")  # the default mix
DEFAULT_TIMEOUT = 60.0
BATCH = 16  # programs per message to and from a local worker (see ProcessPool)


class SuiteError(ValueError):
    """Bad suite arguments or an unusable output directory (exit status 2)."""


@dataclass(frozen=True)
class ProgramId:
    seed: int
    family: str
    index: int

    def __str__(self) -> str:
        return f"s{self.seed}/{self.family}/{self.index:06d}"

    @classmethod
    def parse(cls, text: str) -> ProgramId:
        parts = text.strip().split("/")
        try:
            if len(parts) != 3 or not parts[0].startswith("s"):
                raise ValueError
            seed, family, index = int(parts[0][1:]), parts[1], int(parts[2])
        except ValueError:
            raise SuiteError(f"bad program id {shown(text)}: expected s<seed>/<family>/<index>, "
                             "for example s0/derivative/000017") from None
        if family not in FAMILIES:
            raise SuiteError(f"bad program id {shown(text)}: unknown family {shown(family)} "
                             f"(known: {', '.join(sorted(FAMILIES))})")
        if seed < 0 or index < 0:
            raise SuiteError(f"bad program id {shown(text)}: seed and index are non-negative")
        return cls(seed, family, index)

    def build(self) -> tuple[Program, int]:
        g = self.generate()
        return g.program, g.attempts

    def generate(self) -> Generated:
        """The program with its attempt count and the execution that accepted it."""
        return generate_with_attempts(self.seed, self.index, self.family)


MAX_PROGRAMS = 10**15  # a suite's most programs (the message says 10^15): more is refused


class SuiteIds(Sequence[ProgramId]):
    """The programs of a suite, made on demand from their indices (a ``range``): a suite of
    any length costs the same few bytes until its programs are asked for."""

    def __init__(self, seed: int, family: str | None, indices: range) -> None:
        self.seed, self.family, self.indices = seed, family, indices

    def __len__(self) -> int:
        return len(self.indices)

    def _id(self, j: int) -> ProgramId:
        return ProgramId(self.seed, self.family or SUITE_FAMILIES[j % len(SUITE_FAMILIES)], j)

    @overload
    def __getitem__(self, i: int) -> ProgramId: ...
    @overload
    def __getitem__(self, i: slice) -> SuiteIds: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return SuiteIds(self.seed, self.family, self.indices[i])
        return self._id(self.indices[i])

    def __iter__(self) -> Iterator[ProgramId]:
        return map(self._id, self.indices)


def suite_ids(n: int, seed: int, family: str | None = None,
              shard: tuple[int, int] = (0, 1)) -> SuiteIds:
    """The programs of a suite: index i takes family ``family`` or the i-th of the mix;
    with ``shard`` (I, K), the indices i with i mod K = I. Made on demand (a sequence)."""
    if family is not None and family not in FAMILIES:
        raise SuiteError(f"unknown family {shown(family)} (known: {', '.join(sorted(FAMILIES))})")
    if not 0 <= n <= MAX_PROGRAMS:
        raise SuiteError(f"--programs {shown(n)}: a suite has at most 10^15 programs")
    i, k = shard
    return SuiteIds(seed, family, range(i, n, k))


def parse_shard(text: str) -> tuple[int, int]:
    """``I/K`` with 0 <= I < K: this machine runs the programs whose index mod K is I."""
    try:
        i, k = (int(x) for x in text.split("/"))
    except ValueError:
        raise SuiteError(f"bad --shard {shown(text)}: expected I/K, for example 0/4") from None
    if not (k >= 1 and 0 <= i < k):
        raise SuiteError(f"bad --shard {shown(text)}: need K >= 1 and 0 <= I < K")
    return i, k


# ---------------------------------------------------------------- one program


@dataclass
class Job:
    """What a worker needs: a program id and how to check it."""

    pid: ProgramId
    engines: tuple[str, ...] | None
    mutants: bool
    timeout: float


@dataclass
class ProgramResult:
    """One suite program's records and run statistics, as a worker sends them back."""

    pid: str
    records: list[Record]
    stats: dict = field(default_factory=dict)

    def __reduce__(self) -> tuple:
        # from a worker to the parent, the records go as rows of their fields: pickling
        # ~15 tuples, not ~15 objects each with a state dict, takes ~40 % less time
        return _outcome, (self.pid, record_rows(self.records), self.stats)


def _outcome(pid: str, rows: list[tuple], stats: dict) -> ProgramResult:
    return ProgramResult(pid, records_from_rows(rows), stats)


def _resolved(engines: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Engine specs made known in this process (a Dask worker has not seen ``--engine``)."""
    from replayverify.engines import registry

    return None if engines is None else tuple(registry.resolve(e) for e in engines)


def _strided(v: View) -> bool:
    """Whether a view's strides are not the row-major ones of a 1-D or 2-D view of its
    shape and dtype: (itemsize) or (itemsize x columns, itemsize)."""
    if not v.shape:
        return False
    item = v.itemsize
    return v.strides != (item * v.shape[-1],) * (len(v.shape) - 1) + (item,)


def program_stats(ex: Execution, attempts: int) -> dict:
    """What was generated: op kinds, overlapping writes, integer aliases, hazards, draws."""
    program = ex.program
    lay = layouts(program)
    shared: dict[tuple[str, str], bool] = {}  # (source, dst): the same pairs recur

    def overlaps(src: View, dst: View) -> bool:
        # np.shares_memory on the two views as arrays over the final state's buffers (the
        # state keeps them): exact, and ~4x faster than marking one view's bytes in a mask
        key = src.name, dst.name
        if key not in shared:
            shared[key] = np.shares_memory(ex.state.typed(lay[src.name]),
                                           ex.state.typed(lay[dst.name]))
        return shared[key]

    # one pass over the views and one over the ops (each a few microseconds a program)
    floats, int_buffers, strided, float32 = set(), [], 0, False
    for v in program.views:
        if v.dtype in FLOAT_DTYPES:
            floats.add(v.buffer)
            float32 = float32 or v.dtype == "float32"
        else:
            int_buffers.append(v.buffer)
        strided += _strided(v)
    kinds: dict[str, int] = {}
    overlapping = draws = 0
    for op in program.ops:
        spec, dst = OP_SPECS[op.kind], lay[op.dst].view
        kind = op.kind.value
        kinds[kind] = kinds.get(kind, 0) + 1
        draws += spec.draws is not None
        for f in spec.sources:
            src = lay[getattr(op, f)].view
            if src.buffer == dst.buffer and src.name != dst.name and overlaps(src, dst):
                overlapping += 1
                break
    return {
        "ops": kinds,
        "overlapping_writes": overlapping,
        "integer_aliases": sum(b in floats for b in int_buffers),
        "hazards": len(stale_operands(ex)) if ex.admission.supported else 0,
        "draws": draws,
        "strided_views": strided,
        "supported": ex.admission.supported,
        "attempts": attempts,
        "float32": float32,
        "coverage": program_coverage(ex),
    }


@quiet
def run_job(job: Job) -> ProgramResult:
    """Check one program; an exception or a timeout becomes an ``error`` record.

    One ``quiet`` region for the whole job: the quiet calls nested in it (each attempt's
    ``execute``, the sweeps, the checks) find the warnings ignored already and cost
    nothing (an errstate costs ~1 us)."""
    from replayverify.verifier.check import check_execution

    start = time.perf_counter()
    pid = str(job.pid)
    program = None
    try:
        with time_limit(job.timeout):
            g = job.pid.generate()  # its accepting run: the checks and statistics share it
            program = g.program
            records = check_execution(g.execution, program_id=pid,
                                      engines=_resolved(job.engines), mutants=job.mutants)
            stats = program_stats(g.execution, g.attempts)
        return ProgramResult(pid, records, stats)
    except TaskTimeout:
        detail = f"timed out after {job.timeout:g} s"
    except Exception as exc:  # one program's failure never stops the suite
        detail = f"{type(exc).__name__}: {exc}"
    sha = program.sha256 if program is not None else ""
    rec = make_record(pid, sha, Check.PROGRAM, Verdict(Outcome.ERROR, None, detail),
                      round(time.perf_counter() - start, 6))
    return ProgramResult(pid, [rec], {})


# ---------------------------------------------------------------- the run


@dataclass
class SuiteConfig:
    programs: int
    seed: int = 0
    family: str | None = None
    workers: int = 0  # 0: one per CPU
    out: Path = Path("suite-out")
    shard: tuple[int, int] = (0, 1)
    resume: bool = False
    mutants: bool = False
    engines: tuple[str, ...] | None = None
    timeout: float = DEFAULT_TIMEOUT
    shrink: bool = True
    max_shrink: int = 20  # failing programs shrunk per run; the rest get replay commands
    junit: Path | None = None
    command: str = "replayverify suite"


class _Jobs(Sequence[Job]):
    """The jobs of the programs ``ids``, made as the executor asks for them."""

    def __init__(self, ids: SuiteIds, cfg: SuiteConfig) -> None:
        self.ids, self.cfg = ids, cfg

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):  # (an int: the executors never slice it)
        cfg = self.cfg
        return Job(self.ids[i], cfg.engines, cfg.mutants, cfg.timeout)


def _lost(job: Job, reason: str) -> ProgramResult:
    """The record of a program whose every worker died (a crash no exception reports)."""
    pid = str(job.pid)
    return ProgramResult(pid, [make_record(pid, "", Check.PROGRAM,
                                     Verdict(Outcome.ERROR, None, f"lost: {reason}"))], {})


SUITE_FILES = {"records_bytes": "records.jsonl", "stats_bytes": "programs.jsonl"}
SUITE_ENDS = ("summary.json", "report.md")


def _prepare(cfg: SuiteConfig) -> tuple[RunJournal, SuiteTally]:
    """Open the output directory; on resume, truncated to the last complete program,
    whose records and statistics are read back into the run's tally, a line at a time."""
    meta = {"programs": cfg.programs, "seed": cfg.seed, "family": cfg.family,
            "shard": list(cfg.shard), "mutants": cfg.mutants,
            "engines": list(cfg.engines) if cfg.engines else None}
    journal = open_journal(cfg.out, meta, SUITE_FILES, resume=cfg.resume, what="suite",
                           error=SuiteError, ends=SUITE_ENDS)
    tally = SuiteTally()
    if journal.done:
        for rec in iter_records(cfg.out / SUITE_FILES["records_bytes"]):
            tally.add_records([rec])
        with open(cfg.out / SUITE_FILES["stats_bytes"], encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    tally.add_stats(json.loads(line))
    return journal, tally


@contextlib.contextmanager
def _collector_skips_the_heap() -> Iterator[Callable[[], None]]:
    """Freeze the objects this process holds before the run out of the garbage collector's
    generations (``gc.freeze``), and give them back after. The run keeps ~60 new objects
    per program (records, statistics), whose growth sets off full collections, and each
    would walk the whole heap (the modules, the caller's data): ~20 ms per 1,024 programs
    from the command line, ~45 ms with the benchmark's programs in memory.

    Yields ``keep``, which freezes what the run holds so far: called after each program,
    the records kept are never walked either, and the young generation never fills up
    (a program keeps far fewer objects than a collection waits for): the ~100 young
    collections of a 1,024-program run, ~12 ms, go. (Garbage cycles made meanwhile wait
    for the end of the run.) A caller that froze objects itself keeps them as they are,
    and ``keep`` does nothing."""
    if gc.get_freeze_count():
        yield lambda: None
        return
    gc.freeze()
    try:
        yield gc.freeze
    finally:
        gc.unfreeze()


def run_suite(cfg: SuiteConfig,
              on_program: Callable[[ProgramResult | None, int], None] | None = None,
              executor: Executor | None = None) -> dict:
    """Run (or resume) a suite; returns the summary (also written to summary.json).

    ``executor`` says where programs run (default: ``cfg.workers`` local processes);
    the records do not depend on it.
    """
    # what run_job imports on first use is imported here, before local workers fork,
    # instead of once in each: the checks, the engines' checks (optional) and the
    # generators' numpy.random (~8 ms a worker)
    import numpy.random  # noqa: F401

    import replayverify.verifier.check
    from replayverify.verifier.report import write_outputs

    with contextlib.suppress(ModuleNotFoundError):
        import replayverify.verifier.engine_checks  # noqa: F401

    start = time.perf_counter()
    ids = suite_ids(cfg.programs, cfg.seed, cfg.family, cfg.shard)
    journal, tally = _prepare(cfg)
    done = journal.done
    # with a timeout, programs (plug-in engines) run in child processes, killed HARD_GRACE s
    # past it: a hang or os._exit loses only its program ("lost" record)
    executor = executor or ProcessPool(cfg.workers or os.cpu_count() or 1, batch=BATCH,
                                       limit=cfg.timeout + executors.HARD_GRACE
                                       if cfg.timeout else 0)
    jobs = _Jobs(ids[done:], cfg)
    if on_program is not None and done:
        on_program(None, done)
    with journal:  # DIR is this run's until its outputs are written
        with _collector_skips_the_heap() as keep:
            for outcome in executor.map(run_job, jobs, name=lambda j: str(j.pid), lost=_lost):
                line = {"program": outcome.pid, **outcome.stats}
                journal.append({
                    "records_bytes": "".join([r.to_json() + "\n"
                                              for r in outcome.records]).encode(),
                    "stats_bytes": (dumps(line, sort_keys=True) + "\n").encode()})
                # counted as written, not read back: a record's fields are strings and
                # numbers, which its JSON line gives back unchanged (tested)
                tally.add_records(outcome.records)
                tally.add_stats(line)
                if on_program is not None:
                    on_program(outcome, 1)
                keep()
        failures = []
        if tally.failing:
            from replayverify.verifier.shrink import shrink_failures  # (only if failing)

            failures = shrink_failures(cfg.out, tally.failing, build_program,
                                       mutants=cfg.mutants,
                                       limit=cfg.max_shrink if cfg.shrink else 0)
        records = cfg.out / SUITE_FILES["records_bytes"]
        return write_outputs(cfg, tally, time.perf_counter() - start, failures,
                             lambda: iter_records(records))


def build_program(program_id: str) -> Program:
    """The suite program a record's ``program`` field names (``s<seed>/<family>/<index>``)."""
    return ProgramId.parse(program_id).build()[0]


def read_records(path: Path) -> list[Record]:
    return list(iter_records(path))


def iter_records(path: Path) -> Iterator[Record]:
    """The records of a records.jsonl, one line read at a time."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield Record.from_dict(json.loads(line))
