"""The ``replayverify`` command line (SPEC §6).

Exit status: 0 clean, 1 a divergence, error or missed control was found, 2 bad usage
or a rejected input file. A rejected file gives one line on stderr, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import sys

import click
import numpy as np

from replayverify.programs.format import load_program, program_sha256
from replayverify.programs.model import DEFAULT_MAX_BYTES, Program, ProgramError


def fail_usage(message: str) -> None:
    """One line on stderr and exit status 2."""
    click.echo(f"replayverify: {message}", err=True)
    sys.exit(2)


def load_or_exit(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Program:
    try:
        return load_program(path, max_bytes=max_bytes)
    except ProgramError as exc:
        fail_usage(f"{path}: rejected: {exc}")
        raise  # unreachable


max_bytes_option = click.option(
    "--max-bytes", type=click.IntRange(min=1), default=DEFAULT_MAX_BYTES, show_default=True,
    help="Refuse programs whose buffers total more than this many bytes.",
)


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
        "buffers": {k: hashlib.sha256(v).hexdigest() for k, v in ex.buffers.items()},
        "rng": {"key": list(ex.rng.key), "counter": list(ex.rng.counter)},
        "loss": ex.loss,
        "gradient": None if grad is None else [float(g) for g in grad],
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
        click.echo(json.dumps(doc, allow_nan=True))
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


if __name__ == "__main__":
    main()
