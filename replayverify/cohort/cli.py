"""``replayverify cohort``: the same programs through the frameworks' checkpointing."""

from __future__ import annotations

import click

from replayverify.cli_common import (
    command_line,
    dask_option,
    fail,
    out_option,
    timeout_option,
    workers_option,
)
from replayverify.verifier.cli import out_dir_or_exit, run_streamed


@click.command("cohort")
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
@out_option("records.jsonl, summary.json, report.md, repro/.", default="cohort-out")
@workers_option
@click.option("--resume", is_flag=True,
              help="Continue an interrupted run in --out (same --frameworks, --seeds, "
                   "--extra): tasks already written are not rerun; ends with the same files.")
@timeout_option(600.0, "per task, hard (one case through every method of one framework; "
                       "0: none): tasks run in worker processes; one still running then is "
                       "killed, and a task that kills its worker (os._exit), or runs past "
                       "it, is one error record per method ('lost: ...'); the run goes on.")
@dask_option
def cohort_command(frameworks: str, seeds: str, extra: bool, out_dir: str, workers: int,
                   resume: bool, timeout: float, dask: str | None, dask_batch: int) -> None:
    """Run the framework cohort: the same programs through torch and JAX checkpointing.

    Five paired program families per seed key, float32 and float64, through every
    method of each framework, compared with the reference interpreter fed the
    framework's own draws: M match, R the framework raised, D silent divergence.
    Streams records to OUT/records.jsonl (flushed per task; an interrupted run
    continues with --resume), then writes OUT/summary.json and OUT/report.md and
    prints the table. Exit status 0 when every cell is as expected (the reference
    paper's Table 2 and the documented extra rows), 1 when a cell is not, 2 on bad
    usage, 130 on Ctrl-C. A framework that is not installed gives `unsupported` records
    with an install hint.
    """
    from pathlib import Path

    from replayverify.cohort.runner import (
        CohortConfig,
        CohortError,
        check_config,
        parse_seeds,
        run_cohort,
        task_ids,
    )

    try:
        cfg = CohortConfig(
            frameworks=tuple(f.strip() for f in frameworks.split(",") if f.strip()),
            seeds=parse_seeds(seeds), extra=extra, workers=workers, out=Path(out_dir),
            resume=resume, timeout=timeout, command=command_line())
        if not cfg.frameworks:
            raise CohortError("--frameworks names no framework")
        check_config(cfg)
        total = len(task_ids(cfg))
    except CohortError as exc:
        fail(str(exc))
    out_dir_or_exit(out_dir)
    run_streamed(
        lambda executor, tick: run_cohort(cfg, on_task=tick, executor=executor),
        total=total, unit="tasks", label="cohort", dask=dask, dask_batch=dask_batch,
        errors=(CohortError,), out=cfg.out, show=_print_cohort, clean="as-expected")


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


COMMANDS = (cohort_command,)
