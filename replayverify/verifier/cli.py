"""``replayverify check``, ``replay``, ``suite``, ``generate`` and ``profile``: the verifier's
commands,
and the run machinery every long command shares (:func:`run_streamed`: progress, Dask,
Ctrl-C; :func:`out_dir_or_exit`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import click

from replayverify.cli_common import (
    INTERRUPTED,
    ISOLATED_HELP,
    PREFIX,
    USAGE,
    command_line,
    dask_option,
    engine_option,
    fail,
    finish,
    finish_clean_if,
    json_option,
    mutants_option,
    out_file_or_exit,
    out_option,
    progress,
    seed_option,
    timeout_option,
    workers_option,
    write_or_exit,
)
from replayverify.programs.cli import load_or_exit, max_bytes_option
from replayverify.programs.format import load_program
from replayverify.programs.model import Program, ProgramError
from replayverify.untrusted import dumps, one_line


def out_dir_or_exit(path: str, option: str = "--out", make: bool = False) -> None:
    """A directory for outputs that can be made writable (with ``make``: made), asked
    before any work; else one line and exit 2."""
    from replayverify.runs.journal import check_dir, prepare_dir

    try:
        (prepare_dir if make else check_dir)(Path(path), ValueError, option)
    except ValueError as exc:
        fail(str(exc))


def resolve_engines(specs: tuple[str, ...]) -> tuple[str, ...] | None:
    """The engine names the --engine options ask for, None for none given (every
    registered engine); one line and exit 2 when one names nothing."""
    if not specs:
        return None
    from replayverify.engines import registry

    try:
        return tuple(registry.resolve(spec) for spec in specs)
    except ValueError as exc:
        fail(str(exc))


@contextlib.contextmanager
def _executor(dask: str | None, label: str, batch: int = 1):
    """The Dask executor ``--dask`` asks for, or None (local worker processes)."""
    if dask is None:
        yield None
        return
    from replayverify.runs.executors import dask_executor

    with dask_executor(dask, label=label, batch=batch) as executor:
        yield executor


def run_streamed(run: Callable, *, total: int, unit: str, label: str, dask: str | None,
                 dask_batch: int, errors: tuple[type[Exception], ...], out: Path,
                 show: Callable[[dict, Path], None], clean: str) -> NoReturn:
    """``run(executor, tick)`` with a progress bar over ``total`` ``unit``, locally or on
    Dask, then ``show(summary, out)`` and exit 0 if the summary's verdict is ``clean``,
    else 1. ``errors`` (and Dask's) end in one line and exit 2; Ctrl-C in one line saying
    how to resume and exit 130 (every finished task's records are in OUT/records.jsonl)."""
    from replayverify.runs.executors import DaskError

    records = out / "records.jsonl"
    bar = progress(total, unit)
    try:
        with _executor(dask, label, dask_batch) as executor:
            summary = run(executor, bar.update)
    except (*errors, DaskError) as exc:
        bar.render_finish()
        fail(str(exc))
    except OSError as exc:  # the outputs: a disk full, a file made unwritable meanwhile
        bar.render_finish()
        fail(f"cannot write {exc.filename or 'the outputs'}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        bar.render_finish()
        click.echo(f"\n{PREFIX}interrupted; every finished {unit[:-1]}'s records are in "
                   f"{records}: continue with the same command and --resume", err=True)
        finish(INTERRUPTED)
    finally:
        bar.render_finish()
    show(summary, out)
    finish_clean_if(summary["verdict"] == clean)


@click.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@json_option("one record per line.")
@engine_option("Default: every registered engine.")
@mutants_option
@click.option("--policy", "policy_text", default=None, metavar="S0,S1,...",
              help="Check this preservation plan: one of eager, whole, region (or readset) "
                   "per segment, comma-separated. Without --engine only the plan's engine "
                   "runs.")
@timeout_option(0.0, ISOLATED_HELP)
@max_bytes_option
def check_command(files: tuple[str, ...], as_json: bool, engine_specs: tuple[str, ...],
                  mutants: bool, policy_text: str | None, timeout: float,
                  max_bytes: int) -> None:
    """Run every check on every engine for each program FILE.

    One record per (program, check, engine), as JSON Lines with --json or as a table.
    Writes no files. Exit status: 2 if any file is rejected (it gives a `rejected`
    record), else 1 if any record is diverge, error or missed, else 0.
    """
    from replayverify.verifier.check import rejected_record
    from replayverify.verifier.records import run_is_clean

    engines = resolve_engines(engine_specs)
    policy = None
    if policy_text is not None:
        from replayverify.engines import PolicyEngine, registry

        try:
            policy = PolicyEngine(tuple(policy_text.split(",")))
            engines = (*(engines or ()), registry.resolve(policy.name))
        except ValueError as exc:
            fail(f"--policy: {exc}")
    records, rejected = [], False
    for path in files:
        try:
            program = load_program(path, max_bytes=max_bytes)
        except ProgramError as exc:
            got, rejected = [rejected_record(one_line(path, 80), str(exc))], True
        else:
            if policy is not None and len(policy.policy) != len(program.segments):
                fail(f"{path}: --policy has {len(policy.policy)} entries but the program "
                     f"has {len(program.segments)} segments (one entry per segment)")
            got = _checked(program, path, engines, mutants, timeout)
        if as_json:
            for r in got:
                click.echo(r.to_json())
        records += got
    if not as_json:
        click.echo(_record_table(records, len(files)))
    if rejected:
        finish(USAGE)  # each rejected file's line is its record, already printed
    finish_clean_if(run_is_clean(records))


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

    from replayverify.verifier.records import undetected_mutants

    head = ("program", "check", "engine", "outcome", "max_abs_err", "detail")
    rows = [(r.program, r.check, r.engine or "-", r.outcome,
             "-" if r.max_abs_err is None else f"{r.max_abs_err:.3g}", r.detail)
            for r in records]
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:5], widths)) + "  " + row[5]
             for row in [head, *rows]]
    counts = Counter(r.outcome for r in records)
    failing = sum(r.failing for r in records) + len(undetected_mutants(records))
    verdict = ("rejected input" if counts["rejected"] else
               "clean" if not failing else f"{failing} failing")
    lines.append(f"{n_files} file(s), {len(records)} record(s): "
                 + ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
                 + f"; verdict: {verdict}")
    return "\n".join(line.rstrip() for line in lines)


@click.command("replay")
@click.argument("program_id", metavar="ID")
@json_option("one record per line.")
@engine_option("Default: every registered engine.")
@mutants_option
@click.option("--save", type=click.Path(dir_okay=False), default=None,
              help="Also write the rebuilt program to this file.")
@timeout_option(0.0, ISOLATED_HELP)
def replay_command(program_id: str, as_json: bool, engine_specs: tuple[str, ...],
                   mutants: bool, save: str | None, timeout: float) -> None:
    """Rebuild suite program ID (s<seed>/<family>/<index>) and check it.

    This is the reproducer command printed for every failure of a suite. Prints its
    records as a table (or JSON Lines with --json); writes the program to --save if given.
    Exit status 0 when clean, 1 when a record is diverge, error or missed, 2 on bad usage.
    """
    from replayverify.programs.format import save_program
    from replayverify.verifier.records import run_is_clean
    from replayverify.verifier.suite import ProgramId, SuiteError

    if save:
        out_file_or_exit(save, "--save")
    engines = resolve_engines(engine_specs)
    try:
        program, _ = ProgramId.parse(program_id).build()
    except SuiteError as exc:
        fail(str(exc))
    if save:
        try:
            save_program(program, save)
        except OSError as exc:
            fail(f"--save {one_line(save, 120)}: {exc.strerror or exc}")
    records = _checked(program, program_id, engines, mutants, timeout)
    if as_json:
        for r in records:
            click.echo(r.to_json())
    else:
        click.echo(_record_table(records, 1))
    finish_clean_if(run_is_clean(records))


FAMILY_HELP = ("Only this family (derivative, bytes, alias, complex, mixed, default, "
               "hazard); default: derivative, bytes, alias, complex, mixed in turn.")


@click.command("suite")
@click.option("--programs", "n_programs", type=click.IntRange(min=1), required=True,
              help="How many programs the suite has (all shards together).")
@seed_option
@click.option("--family", type=str, default=None, help=FAMILY_HELP)
@workers_option
@out_option("records.jsonl, summary.json, report.md, failures/.", default="suite-out")
@click.option("--shard", type=str, default="0/1", show_default=True,
              help="I/K: run the programs whose index mod K is I (0 <= I < K).")
@click.option("--resume", is_flag=True,
              help="Continue an interrupted run in --out; ends with the same records.")
@mutants_option
@engine_option("Default: every registered engine.")
@timeout_option(60.0, "per program before it becomes an error record (0: none). "
                      "With a limit, programs run in worker processes, and one still running "
                      "10 s past it (an engine that ignores it, or hangs) is killed: a `lost` "
                      "error record.")
@click.option("--junit", type=click.Path(dir_okay=False), default=None,
              help="Also write JUnit XML here, one test case per record.")
@click.option("--no-shrink", is_flag=True, help="Do not shrink failing programs.")
@click.option("--max-shrink", type=click.IntRange(min=0), default=20, show_default=True,
              help="Shrink at most this many failing programs.")
@dask_option
def suite_command(n_programs, seed, family, workers, out_dir, shard, resume, mutants,
                  engine_specs, timeout, junit, no_shrink, max_shrink, dask,
                  dask_batch) -> None:
    """Generate programs from SEED and run every check on every engine.

    Streams records to OUT/records.jsonl (flushed per program), then writes
    OUT/summary.json and OUT/report.md and prints a summary. Failing programs are
    shrunk to minimal reproducers in OUT/failures/. Exit status 0 when clean, 1 when
    a divergence, error or missed control was found, 2 on bad usage, 130 on Ctrl-C.
    """
    from replayverify.verifier.suite import (
        SuiteConfig,
        SuiteError,
        parse_shard,
        run_suite,
        suite_ids,
    )

    if junit:
        out_file_or_exit(junit, "--junit")
        if os.path.abspath(junit) == os.path.abspath(out_dir):
            fail(f"--junit {one_line(junit, 120)}: is --out's directory")
    try:
        engines = resolve_engines(engine_specs)
        cfg = SuiteConfig(
            programs=n_programs, seed=seed, family=family, workers=workers, out=Path(out_dir),
            shard=parse_shard(shard), resume=resume, mutants=mutants, engines=engines,
            timeout=timeout, shrink=not no_shrink, max_shrink=max_shrink,
            junit=Path(junit) if junit else None, command=command_line(),
        )
        total = len(suite_ids(cfg.programs, cfg.seed, cfg.family, cfg.shard))
    except SuiteError as exc:
        fail(str(exc))
    out_dir_or_exit(out_dir)
    run_streamed(
        lambda executor, tick: run_suite(cfg, on_program=lambda _o, n: tick(n),
                                         executor=executor),
        total=total, unit="programs", label="suite", dask=dask, dask_batch=dask_batch,
        errors=(SuiteError,), out=cfg.out, show=_print_summary, clean="clean")


def _print_summary(summary: dict, out) -> None:
    click.echo(f"verdict {summary['verdict']}: {summary['programs']} programs, "
               f"{summary['records']} records in {summary['seconds']} s -> {out}")
    width = max([len(k) for k in summary["outcomes"]] + [10])
    for key, counts in summary["outcomes"].items():
        cells = "  ".join(f"{o} {n}" for o, n in counts.items())
        err = summary["max_abs_err"].get(key)
        tail = f"  max_abs_err {err:.3g}" if err is not None else ""
        click.echo(f"  {key:<{width}}  {cells}{tail}")


@click.command("generate")
@click.option("--programs", "n_programs", type=click.IntRange(min=1), required=True,
              help="How many programs to write.")
@seed_option
@click.option("--family", type=str, default=None, help=FAMILY_HELP)
@out_option("OUT/<family>/<index>.json, one file per program.", required=True)
def generate_command(n_programs, seed, family, out_dir) -> None:
    """Write the programs of a suite as JSON files OUT/<family>/<index>.json.

    The same programs `suite` with the same --programs, --seed and --family checks.
    Exit status 0, or 2 on bad usage or an unusable --out.
    """
    from replayverify.programs.format import save_program
    from replayverify.verifier.suite import SuiteError, suite_ids

    try:
        ids = suite_ids(n_programs, seed, family)
    except SuiteError as exc:
        fail(str(exc))
    out_dir_or_exit(out_dir, make=True)
    for pid in ids:
        program, _ = pid.build()
        path = Path(out_dir) / f"{pid}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_program(program, path)
    click.echo(f"wrote {len(ids)} programs under {out_dir}")


@click.command("profile")
@click.argument("file", type=click.Path(dir_okay=False))
@out_option("the card (default: print it).", directory=False, dest="out")
@max_bytes_option
def profile_command(file: str, out: str | None, max_bytes: int) -> None:
    """Derive a planner profile card for FILE from the engines' accounting.

    Per segment, eager / whole / region costs: retained and temporary bytes (exact)
    and replayed ops as time. Plan with `replayverify plan CARD --budget B`, then verify
    the plan with `replayverify check FILE --policy ...`. Writes the card to --out or
    prints it. Exit status 0, or 2 for a rejected file or an unwritable --out.
    """
    from replayverify.engines.profile import profile_card
    from replayverify.verifier.memo import Memo

    if out:
        out_file_or_exit(out, "--out")
    # the policy runs of one program share their op runs and backward (``Memo``)
    card = dumps(profile_card(load_or_exit(file, max_bytes), runner=Memo()), indent=2)
    if out:
        write_or_exit(out, card + "\n", "--out")
    else:
        click.echo(card)


COMMANDS = (check_command, replay_command, suite_command, generate_command, profile_command)
