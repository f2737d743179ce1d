"""The ``replayverify`` command line (SPEC §6).

Exit status: 0 clean, 1 a divergence, error or missed control was found, 2 bad usage
or a rejected input file. A rejected file gives one line on stderr, never a traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from typing import NoReturn

import click
import numpy as np

from replayverify.evaluate.cli import evaluate_command
from replayverify.gpu.cli import gpu_group
from replayverify.planner.cli import plan_command
from replayverify.programs.format import load_program, program_sha256
from replayverify.programs.model import DEFAULT_MAX_BYTES, Program, ProgramError
from replayverify.runs.executors import DaskError
from replayverify.untrusted import dumps, one_line


def fail_usage(message: str) -> NoReturn:
    """One line on stderr and exit status 2 (control characters escaped, cut at 400)."""
    click.echo(f"replayverify: {one_line(message, 400)}", err=True)
    sys.exit(2)


def out_dir_or_exit(path: str, option: str = "--out", make: bool = False) -> None:
    """A directory for outputs that can be made writable (with ``make``: made), asked
    before any work; else one line and exit 2."""
    from pathlib import Path

    from replayverify.runs.journal import check_dir, prepare_dir

    try:
        (prepare_dir if make else check_dir)(Path(path), ValueError, option)
    except ValueError as exc:
        fail_usage(str(exc))


def out_file_or_exit(path: str, option: str) -> None:
    """A file an option will write, checked before any work: its directory exists and is
    writable, the name fits, it is not a directory; else one line and exit 2."""
    shown_path = one_line(path, 120)
    parent = os.path.dirname(os.path.abspath(path))
    why = ("is a directory" if os.path.isdir(path) else
           f"no directory {one_line(parent, 80)}" if not os.path.isdir(parent) else
           "its directory is not writable" if not os.access(parent, os.W_OK | os.X_OK) else
           "file name too long" if len(os.fsencode(os.path.basename(path))) > 255 else
           "not a regular file" if os.path.exists(path) and not os.path.isfile(path) else "")
    if why:
        fail_usage(f"{option} {shown_path}: {why}")


def write_or_exit(path: str, text: str, option: str) -> None:
    """``text`` written to ``path``; a failure (a full disk) in one line, exit 2."""
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        fail_usage(f"{option} {one_line(path, 120)}: {exc.strerror or exc}")


def load_or_exit(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Program:
    try:
        return load_program(path, max_bytes=max_bytes)
    except ProgramError as exc:
        fail_usage(f"{one_line(path, 80)}: rejected: {exc}")


MAX_TIMEOUT = 1e6  # seconds (11.6 days): beyond, the interval timer cannot be set


def _timeout(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """--timeout: finite, 0 (none) or positive, at most MAX_TIMEOUT."""
    if value is not None and not (0 <= value <= MAX_TIMEOUT):  # (NaN fails both)
        raise click.BadParameter(f"{value!r} is not a number of seconds from 0 (no limit) "
                                 f"to {MAX_TIMEOUT:g}")
    return value


def timeout_option(default: float, help: str):
    return click.option("--timeout", type=float, default=default, show_default=True,
                        callback=_timeout, help=help)


ISOLATED_HELP = ("Seconds per program (0, the default: no limit, checked in this process). "
                 "With a limit, each program is checked in a worker process: past it, an "
                 "error record; a worker still running 10 s later (an engine that ignores "
                 "it) or ending itself (os._exit) gives a `lost` error record.")


max_bytes_option = click.option(
    "--max-bytes", type=click.IntRange(min=1), default=DEFAULT_MAX_BYTES, show_default=True,
    help="Refuse programs whose buffers total more than this many bytes.",
)


def dask_option(command):
    """``--dask ADDRESS`` and ``--dask-batch K``, for the commands that run many tasks."""
    command = click.option(
        "--dask-batch", "dask_batch", type=click.IntRange(min=1), default=1, show_default=True,
        help="With --dask: programs (cohort: tasks) per Dask task. Dask spends a few ms "
             "per task on the scheduler and this client: batch on large clusters.")(command)
    return click.option(
        "--dask", "dask", metavar="ADDRESS", default=None,
        help="Run on a Dask cluster: a scheduler address (tcp://HOST:8786) or local[:N] for "
             "N worker processes here, N at most twice the CPUs (at least 4) (needs the dask "
             "extra; see docs/distributed.md). "
             "Records, --resume (and the suite's --shard) are as for a local run; "
             "--workers is then "
             "ignored.")(command)


@contextlib.contextmanager
def _executor(dask: str | None, label: str, batch: int = 1):
    """The Dask executor ``--dask`` asks for, or None (local worker processes)."""
    if dask is None:
        yield None
        return
    from replayverify.runs.executors import dask_executor

    with dask_executor(dask, label=label, batch=batch) as executor:
        yield executor


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="replayverify")
def main() -> None:
    """Verify that activation recomputation replays the state the forward pass saw.

    Programs are JSON files in the format of SPEC §2 (see docs/semantics.md).
    """


def run_document(program: Program) -> dict:
    """The object ``run --json`` prints (SPEC §6)."""
    from replayverify.programs.interpreter import execute

    ex = execute(program, record_boundaries=False)
    grad = ex.gradient
    return {
        "program": program.name,
        "sha256": program_sha256(program),
        "buffers": {k: hashlib.sha256(np.ascontiguousarray(v).data).hexdigest()
                    for k, v in ex.state.buffers.items()},
        "rng": {"key": list(ex.rng.key), "counter": list(ex.rng.counter)},
        "loss": ex.loss,
        "gradient": None if grad is None else np.asarray(grad, np.float64).tolist(),
        "admission": ex.admission.to_dict(),
    }


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@max_bytes_option
def run(file: str, as_json: bool, max_bytes: int) -> None:
    """Execute FILE with the reference interpreter.

    Prints per buffer the sha256 of its final bytes, the final generator key and
    counter, the loss and the gradient (or null with the admission reason).
    """
    doc = run_document(load_or_exit(file, max_bytes))
    if as_json:
        click.echo(dumps(doc))
        return
    click.echo(f"program  {doc['program'] or '(unnamed)'}  sha256 {doc['sha256']}")
    for name, digest in doc["buffers"].items():
        click.echo(f"buffer   {name}: {digest}")
    click.echo(f"rng      key {doc['rng']['key']}  counter {doc['rng']['counter']}")
    click.echo(f"loss     {doc['loss']!r}")
    if doc["gradient"] is None:
        click.echo(f"gradient null ({doc['admission']['reason']})")
    else:
        with np.printoptions(precision=17):
            click.echo(f"gradient {np.array(doc['gradient'])}")


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@max_bytes_option
def show(file: str, max_bytes: int) -> None:
    """Print the program in FILE readably."""
    from replayverify.programs.show import render

    click.echo(render(load_or_exit(file, max_bytes)))


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON record per line.")
@click.option("--engine", "engine_specs", multiple=True,
              help="Engine to check (repeatable): a registered name, policy:eager,region,... "
                   "or module:attr. Default: every registered engine.")
@click.option("--mutants", is_flag=True, help="Also run the engine mutants as controls.")
@click.option("--policy", "policy_text", default=None, metavar="S0,S1,...",
              help="Check this preservation plan: one of eager, whole, region (or readset) "
                   "per segment, comma-separated. Without --engine only the plan's engine "
                   "runs.")
@timeout_option(0.0, ISOLATED_HELP)
@max_bytes_option
def check(files: tuple[str, ...], as_json: bool, engine_specs: tuple[str, ...], mutants: bool,
          policy_text: str | None, timeout: float, max_bytes: int) -> None:
    """Run every check on every engine for each program FILE.

    One record per (program, check, engine), as JSON Lines with --json or as a table.
    Exit status: 2 if any file is rejected (it gives a ``rejected`` record), else 1 if
    any record is diverge, error or missed, else 0.
    """
    from replayverify.verifier.check import rejected_record
    from replayverify.verifier.records import run_is_clean

    engines = None
    if engine_specs:
        from replayverify.engines import registry

        try:
            engines = [registry.resolve(spec) for spec in engine_specs]
        except ValueError as exc:
            fail_usage(str(exc))
    policy = None
    if policy_text is not None:
        from replayverify.engines import PolicyEngine, registry

        try:
            policy = PolicyEngine(tuple(policy_text.split(",")))
            engines = [*(engines or []), registry.resolve(policy.name)]
        except ValueError as exc:
            fail_usage(f"--policy: {exc}")
    records, rejected = [], False
    for path in files:
        try:
            program = load_program(path, max_bytes=max_bytes)
        except ProgramError as exc:
            got, rejected = [rejected_record(one_line(path, 80), str(exc))], True
        else:
            if policy is not None and len(policy.policy) != len(program.segments):
                fail_usage(f"{path}: --policy has {len(policy.policy)} entries but the program "
                           f"has {len(program.segments)} segments (one entry per segment)")
            got = _checked(program, path, engines, mutants, timeout)
        if as_json:
            for r in got:
                click.echo(r.to_json())
        records += got
    if not as_json:
        click.echo(_record_table(records, len(files)))
    sys.exit(2 if rejected else 0 if run_is_clean(records) else 1)


def _checked(program: Program, program_id: str, engines, mutants: bool, timeout: float):
    """The records of every check on ``program``: here, or with a ``timeout``, in a worker
    process (``check_isolated``)."""
    from replayverify.verifier.check import check_isolated, check_program

    if timeout:
        return check_isolated(program, timeout=timeout, program_id=program_id,
                              engines=engines, mutants=mutants)
    return check_program(program, program_id=program_id, engines=engines, mutants=mutants)


def _record_table(records: list, n_files: int) -> str:
    """Aligned columns (program, check, engine, outcome, max_abs_err, detail), a summary."""
    from collections import Counter

    head = ("program", "check", "engine", "outcome", "max_abs_err", "detail")
    rows = [(r.program, r.check, r.engine or "-", r.outcome,
             "-" if r.max_abs_err is None else f"{r.max_abs_err:.3g}", r.detail)
            for r in records]
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:5], widths)) + "  " + row[5]
             for row in [head, *rows]]
    from replayverify.verifier.records import undetected_mutants

    counts = Counter(r.outcome for r in records)
    failing = sum(r.failing for r in records) + len(undetected_mutants(records))
    verdict = ("rejected input" if counts["rejected"] else
               "clean" if not failing else f"{failing} failing")
    lines.append(f"{n_files} file(s), {len(records)} record(s): "
                 + ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
                 + f"; verdict: {verdict}")
    return "\n".join(line.rstrip() for line in lines)


@main.command()
@click.option("--programs", "n_programs", type=click.IntRange(min=1), required=True,
              help="How many programs the suite has (all shards together).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Suite seed: same seed, same programs and records on any machine.")
@click.option("--family", type=str, default=None,
              help="Only this family (derivative, bytes, alias, complex, mixed, default, "
                   "hazard); default: derivative, bytes, alias, complex, mixed in turn.")
@click.option("--workers", type=click.IntRange(min=0), default=0,
              help="Worker processes (default: one per CPU). Records do not depend on it.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="suite-out",
              show_default=True, help="Directory for records.jsonl, summary.json, report.md.")
@click.option("--shard", type=str, default="0/1", show_default=True,
              help="I/K: run the programs whose index mod K is I (0 <= I < K).")
@click.option("--resume", is_flag=True,
              help="Continue an interrupted run in --out; ends with the same records.")
@click.option("--mutants", is_flag=True, help="Also run the engine mutants as controls.")
@click.option("--engine", "engine", type=str, default=None,
              help="System under test: a registered engine name or module:attr.")
@timeout_option(60.0, "Seconds per program before it becomes an error record (0: none). "
                      "With a limit, programs run in worker processes, and one still running "
                      "10 s past it (an engine that ignores it, or hangs) is killed: a `lost` "
                      "error record.")
@click.option("--junit", type=click.Path(dir_okay=False), default=None,
              help="Also write JUnit XML here, one test case per record.")
@click.option("--no-shrink", is_flag=True, help="Do not shrink failing programs.")
@click.option("--max-shrink", type=click.IntRange(min=0), default=20, show_default=True,
              help="Shrink at most this many failing programs.")
@dask_option
def suite(n_programs, seed, family, workers, out_dir, shard, resume, mutants, engine, timeout,
          junit, no_shrink, max_shrink, dask, dask_batch) -> None:
    """Generate programs from SEED and run every check on every engine.

    Streams records to OUT/records.jsonl (flushed per program), then writes
    OUT/summary.json and OUT/report.md and prints a summary. Failing programs are
    shrunk to minimal reproducers in OUT/failures/. Exit status 0 when clean, 1 when
    a divergence, error or missed control was found.
    """
    from pathlib import Path

    from replayverify.verifier.suite import SuiteConfig, SuiteError, parse_shard, run_suite

    if junit:
        out_file_or_exit(junit, "--junit")
        if os.path.abspath(junit) == os.path.abspath(out_dir):
            fail_usage(f"--junit {one_line(junit, 120)}: is --out's directory")
    try:
        engines = resolve_engines(engine)
        cfg = SuiteConfig(
            programs=n_programs, seed=seed, family=family, workers=workers, out=Path(out_dir),
            shard=parse_shard(shard), resume=resume, mutants=mutants, engines=engines,
            timeout=timeout, shrink=not no_shrink, max_shrink=max_shrink,
            junit=Path(junit) if junit else None, command=_command_line(),
        )
        from replayverify.verifier.suite import suite_ids

        total = len(suite_ids(cfg.programs, cfg.seed, cfg.family, cfg.shard))
    except SuiteError as exc:
        fail_usage(str(exc))
    out_dir_or_exit(out_dir)
    summary = _run_streamed(
        lambda executor, tick: run_suite(cfg, on_program=lambda _o, n: tick(n),
                                         executor=executor),
        total=total, unit="programs", label="suite", dask=dask, dask_batch=dask_batch,
        errors=(SuiteError,), records=cfg.out / "records.jsonl")
    _print_summary(summary, cfg.out)
    sys.exit(0 if summary["verdict"] == "clean" else 1)


def _command_line() -> str:
    """This command as typed, less ``--resume``: the files of a resumed run name the
    command an uninterrupted run would have, as they hold the same records."""
    return " ".join(["replayverify", *(a for a in sys.argv[1:] if a != "--resume")])


def _run_streamed(run, *, total: int, unit: str, label: str, dask: str | None,
                  dask_batch: int, errors: tuple[type[Exception], ...], records) -> dict:
    """``run(executor, tick)`` with a progress bar over ``total`` ``unit``, locally or on
    Dask: ``errors`` (and Dask's) end in one line and exit 2; Ctrl-C in one line saying
    how to resume and exit 130 (every finished task's records are in ``records``)."""
    bar = _progress(total, unit)
    try:
        with _executor(dask, label, dask_batch) as executor:
            return run(executor, bar.update)
    except (*errors, DaskError) as exc:
        bar.render_finish()
        fail_usage(str(exc))
    except OSError as exc:  # the outputs: a disk full, a file made unwritable meanwhile
        bar.render_finish()
        fail_usage(f"cannot write {exc.filename or 'the outputs'}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        bar.render_finish()
        click.echo(f"\nreplayverify: interrupted; every finished {unit[:-1]}'s records are in "
                   f"{records}: continue with the same command and --resume", err=True)
        sys.exit(130)
    finally:
        bar.render_finish()


def _progress(total: int, label: str = "programs"):
    """A progress bar with ETA on a terminal; silent otherwise."""
    return click.progressbar(length=total, label=label, show_eta=True, show_pos=True,
                             file=sys.stderr if sys.stderr.isatty() else _Null())


class _Null:
    def write(self, _s: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _print_summary(summary: dict, out) -> None:
    click.echo(f"verdict {summary['verdict']}: {summary['programs']} programs, "
               f"{summary['records']} records in {summary['seconds']} s -> {out}")
    width = max([len(k) for k in summary["outcomes"]] + [10])
    for key, counts in summary["outcomes"].items():
        cells = "  ".join(f"{o} {n}" for o, n in counts.items())
        err = summary["max_abs_err"].get(key)
        tail = f"  max_abs_err {err:.3g}" if err is not None else ""
        click.echo(f"  {key:<{width}}  {cells}{tail}")


@main.command("generate")
@click.option("--programs", "n_programs", type=click.IntRange(min=1), required=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--family", type=str, default=None,
              help="Only this family; default: the suite's mix.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True)
def generate_cmd(n_programs, seed, family, out_dir) -> None:
    """Write the programs of a suite as JSON files OUT/<family>/<index>.json."""
    from pathlib import Path

    from replayverify.programs.format import save_program
    from replayverify.verifier.suite import SuiteError, suite_ids

    try:
        ids = suite_ids(n_programs, seed, family)
    except SuiteError as exc:
        fail_usage(str(exc))
    out_dir_or_exit(out_dir, make=True)
    for pid in ids:
        program, _ = pid.build()
        path = Path(out_dir) / f"{pid}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_program(program, path)
    click.echo(f"wrote {len(ids)} programs under {out_dir}")


def resolve_engines(spec: str | None) -> tuple[str, ...] | None:
    """The engine names a --engine option asks for (exit 2 when it names nothing)."""
    if spec is None:
        return None
    from replayverify.engines import registry

    try:
        return (registry.resolve(spec),)
    except ValueError as exc:
        fail_usage(str(exc))


@main.command()
@click.argument("program_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON record per line.")
@click.option("--engine", "engine", type=str, default=None,
              help="Check this engine (registered name or module:attr) instead of all.")
@click.option("--mutants", is_flag=True, help="Also run the engine mutants as controls.")
@click.option("--save", type=click.Path(dir_okay=False), default=None,
              help="Also write the rebuilt program to this file.")
@timeout_option(0.0, ISOLATED_HELP)
def replay(program_id: str, as_json: bool, engine: str | None, mutants: bool,
           save: str | None, timeout: float) -> None:
    """Rebuild suite program ID (s<seed>/<family>/<index>) and check it.

    This is the reproducer command printed for every failure of a suite.
    """
    from replayverify.programs.format import save_program
    from replayverify.verifier.records import run_is_clean
    from replayverify.verifier.suite import ProgramId, SuiteError

    if save:
        out_file_or_exit(save, "--save")
    try:
        program, _ = ProgramId.parse(program_id).build()
    except SuiteError as exc:
        fail_usage(str(exc))
    if save:
        try:
            save_program(program, save)
        except OSError as exc:
            fail_usage(f"--save {one_line(save, 120)}: {exc.strerror or exc}")
    records = _checked(program, program_id, resolve_engines(engine), mutants, timeout)
    if as_json:
        for r in records:
            click.echo(r.to_json())
    else:
        click.echo(_record_table(records, 1))
    sys.exit(0 if run_is_clean(records) else 1)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Write the card here instead of printing it.")
@max_bytes_option
def profile(file: str, out: str | None, max_bytes: int) -> None:
    """Derive a planner profile card for FILE from the engines' accounting.

    Per segment, eager / whole / region costs: retained and temporary bytes (exact)
    and replayed ops as time. Plan with `replayverify plan CARD --budget B`, then verify
    the plan with `replayverify check FILE --policy ...`.
    """
    from replayverify.engines.profile import profile_card

    if out:
        out_file_or_exit(out, "--out")
    card = dumps(profile_card(load_or_exit(file, max_bytes)), indent=2)
    if out:
        write_or_exit(out, card + "\n", "--out")
    else:
        click.echo(card)


@main.command()
@click.option("--frameworks", default="torch,jax", show_default=True,
              help="Comma-separated: torch, jax, replayverify; the stateful APIs jax-state, "
                   "jax-remat3, flax, keras-torch, keras-jax; or module:attr naming your "
                   "own adapter (docs/cohort.md).")
@click.option("--seeds", default="420000:420050", show_default=True,
              help="Seed keys A:B (A included, B not); each key gives every family in "
                   "float32 and float64.")
@click.option("--extra", is_flag=True,
              help="Also the rows beyond the paper: in-segment saved-tensor overwrite, "
                   "selective checkpointing, running statistics, replayverify's engines.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="cohort-out",
              show_default=True, help="Directory for records.jsonl, summary.json, report.md.")
@click.option("--workers", type=click.IntRange(min=0), default=0,
              help="Worker processes (default: one per CPU). Records do not depend on it.")
@click.option("--resume", is_flag=True,
              help="Continue an interrupted run in --out (same --frameworks, --seeds, "
                   "--extra): tasks already written are not rerun; ends with the same files.")
@timeout_option(600.0, "Hard seconds per task (one case through every method of one "
                       "framework; 0: none): tasks run in worker processes, and one still "
                       "running then is killed and stops the run in one line (the tasks "
                       "before it are written: --resume continues).")
@dask_option
def cohort(frameworks: str, seeds: str, extra: bool, out_dir: str, workers: int, resume: bool,
           timeout: float, dask: str | None, dask_batch: int) -> None:
    """Run the framework cohort: the same programs through torch and JAX checkpointing.

    Five paired program families per seed key, float32 and float64, through every
    method of each framework, compared with the reference interpreter fed the
    framework's own draws: M match, R the framework raised, D silent divergence.
    Streams records to OUT/records.jsonl (flushed per task; an interrupted run
    continues with --resume), then writes OUT/summary.json and OUT/report.md and
    prints the table. Exit status 0 when every cell is as expected (the reference
    paper's Table 2 and the documented extra rows), 1 when a cell is not, 2 on bad
    usage. A framework that is not installed gives `unsupported` records with an
    install hint.
    """
    from pathlib import Path

    from replayverify.cohort.runner import CohortConfig, CohortError, parse_seeds, run_cohort

    try:
        cfg = CohortConfig(
            frameworks=tuple(f.strip() for f in frameworks.split(",") if f.strip()),
            seeds=parse_seeds(seeds), extra=extra, workers=workers, out=Path(out_dir),
            resume=resume, timeout=timeout, command=_command_line())
        if not cfg.frameworks:
            raise CohortError("--frameworks names no framework")
        from replayverify.cohort.runner import check_config, task_ids

        check_config(cfg)
        total = len(task_ids(cfg))
    except CohortError as exc:
        fail_usage(str(exc))
    out_dir_or_exit(out_dir)
    summary = _run_streamed(
        lambda executor, tick: run_cohort(cfg, on_task=tick, executor=executor),
        total=total, unit="tasks", label="cohort", dask=dask, dask_batch=dask_batch,
        errors=(CohortError,), records=cfg.out / "records.jsonl")
    _print_cohort(summary, cfg.out)
    sys.exit(0 if summary["verdict"] == "as-expected" else 1)


def _print_cohort(summary: dict, out) -> None:
    click.echo(f"verdict {summary['verdict']}: {summary['records']} records in "
               f"{summary['seconds']} s -> {out}")
    width = max(len(k) for k in summary["table"]) if summary["table"] else 10
    click.echo(f"  {'backend / method':<{width}}  M / R / D     expected")
    for row, c in summary["table"].items():
        e = c["expected"]
        exp = f"{e['M']} / {e['R']} / {e['D']}" if sum(e.values()) else "-"
        mark = "  UNEXPECTED" if row in summary["unexpected"] else ""
        cells = f"{c['M']} / {c['R']} / {c['D']}"
        click.echo(f"  {row:<{width}}  {cells:<12}  {exp}{mark}")
    for fw in summary["not_run"]:
        click.echo(f"  {fw}: not run ({summary['frameworks'].get(fw, 'not installed')}); "
                   "see report.md for the install hint", err=True)


main.add_command(gpu_group)
main.add_command(plan_command)
main.add_command(evaluate_command)

if __name__ == "__main__":
    main()
