"""``replayverify evaluate``: executed plans, measured against predicted."""

from __future__ import annotations

from pathlib import Path

import click

from replayverify.cli_common import (
    backend_option,
    deprecated_alias,
    fail,
    finish_clean_if,
    out_option,
    take_alias,
)
from replayverify.evaluate.run import DEFAULT_SCALE, EvaluateError, evaluate
from replayverify.evaluate.workloads import paper_cells


@click.command("evaluate")
@out_option("evaluate.json, report.md, resource-map.png and cards/.", required=True)
@click.option(
    "--scale",
    default=DEFAULT_SCALE,
    show_default=True,
    type=click.IntRange(min=1),
    help="Divide every byte size and budget of the published study by S "
    "(1: the paper's scale, for a GPU with enough memory).",
)
@click.option(
    "--repeats",
    "-K",
    "processes",
    default=10,
    show_default=True,
    type=click.IntRange(min=1),
    help="Fresh measuring processes, run one after another: a sample size, not "
    "parallelism (timings must not share the machine, so evaluate takes no --workers); "
    "every method runs in each, paired.",
)
@deprecated_alias("--processes", "--repeats", click.IntRange(min=1))
@click.option(
    "--warmups",
    default=2,
    show_default=True,
    type=click.IntRange(min=0),
    help="Unmeasured steps per method and process.",
)
@click.option(
    "--steps",
    default=5,
    show_default=True,
    type=click.IntRange(min=1),
    help="Measured steps per method and process.",
)
@click.option(
    "--calibration-steps",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="Instrumented steps per option when calibrating the cards.",
)
@backend_option("numpy", "Default numpy, as for every command that does not exist to "
                "measure a GPU: the study runs anywhere; cupy gives the GPU figures.")
@click.option(
    "--cells",
    default=None,
    help="Comma-separated subset of: " + ", ".join(c.name for c in paper_cells()),
)
def evaluate_command(
    out_dir: str,
    scale: int,
    processes: int,
    warmups: int,
    steps: int,
    calibration_steps: int,
    backend: str,
    cells: str | None,
    old_processes: int | None,
) -> None:
    """Run the planner's policies on the paper's workloads and measure them.

    For each workload (four activation-pressure cells and the three calibration workloads):
    calibrate a profile card, plan the state-agnostic, state-aware eager/whole and joint
    policies from it, check every method computes exactly what eager does (float64 and
    float32), then time all methods in K fresh processes (--repeats) and compare them pairwise
    (geometric mean of per-process ratios, bootstrap interval) and against the card's
    predictions. Writes OUT/evaluate.json, report.md, resource-map.png and cards/ (progress
    on stderr). Exit status 0 when every semantic check passed, 1 otherwise, 2 for bad
    usage or an unavailable backend.
    """
    from replayverify.runs.journal import prepare_dir

    processes = take_alias(processes, old_processes, "--processes", "--repeats")
    try:
        prepare_dir(Path(out_dir), EvaluateError)
        doc = evaluate(
            out_dir,
            scale=scale,
            processes=processes,
            backend=backend,
            warmups=warmups,
            steps=steps,
            calibration_steps=calibration_steps,
            cells=None if cells is None else [c.strip() for c in cells.split(",")],
            log=lambda m: click.echo(m, err=True),
        )
    except (ValueError, EvaluateError) as exc:
        fail(f"evaluate: {exc}")
    failed = sum(s.get("semantic_fail", 0) for s in doc["summary"])
    click.echo(
        f"evaluate: {len(doc['rows'])} rows, {failed} failed semantic checks; "
        f"report {out_dir}/report.md"
    )
    finish_clean_if(not failed)
