"""``replayverify gpu``: backend information and the cost calibration (which lives in
:mod:`replayverify.evaluate.calibrate`)."""

from __future__ import annotations

import click

from replayverify.cli_common import backend_option, fail, out_option


@click.group("gpu")
def gpu_group() -> None:
    """The CuPy backend: availability and cost calibration."""


@gpu_group.command("info")
def info() -> None:
    """Print whether the GPU backend can run here, and why not.

    Writes no files. Exit status 0 either way.
    """
    from replayverify.gpu import backend  # (on use: ``replayverify`` starts without it)

    if backend.available():
        from replayverify.gpu.device import CupyDevice

        dev = CupyDevice(backend.require_cupy()).describe()
        click.echo(f"GPU backend available: {dev['name']} (CuPy {dev['cupy']})")
    else:
        click.echo(f"GPU backend unavailable: {backend.unavailable_reason()}")
    click.echo(f"CuPy installed: {'yes' if backend.installed() else 'no'}")


@gpu_group.command("calibrate")
@out_option("calibration.json, calibration.md, the plot and profiles/.", required=True)
@click.option("--quick", is_flag=True, help="A reduced grid (64 MiB, 1 and 4 versions).")
@backend_option("cupy", "Default cupy: this command exists to measure the GPU; numpy "
                "runs the same pipeline on the CPU, a smoke test, not GPU numbers.",
                dest="backend_name")
def calibrate_cmd(out_dir: str, quick: bool, backend_name: str) -> None:
    """Measure eager / whole / region peak memory and step time, and journal bandwidth.

    Writes OUT/calibration.json, calibration.md, the plot and profiles/ (progress on
    stderr) and prints each target's figure. Exit status 0, or 2 for bad usage or an
    unavailable GPU backend.
    """
    from replayverify.gpu import backend

    if backend_name == "cupy" and not backend.available():
        fail(f"GPU backend unavailable: {backend.unavailable_reason()}")
    from replayverify.evaluate.calibrate import calibrate

    doc = calibrate(
        out_dir, quick=quick, backend=backend_name, log=lambda msg: click.echo(msg, err=True)
    )
    for t in doc["targets"]:
        met = "not measured" if t["met"] is None else ("met" if t["met"] else "NOT met")
        value = "n/a" if t["measured"] is None else f"{t['measured']:.3f}"
        click.echo(f"{t['target']}: {value} ({met})")
    click.echo(f"wrote {out_dir}/calibration.json, calibration.md, profiles/")
