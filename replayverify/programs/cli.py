"""``replayverify run`` and ``show``: one program file through the reference interpreter,
or printed readably; and the one door by which every command loads a program file
(:func:`load_or_exit`, :data:`max_bytes_option`)."""

from __future__ import annotations

import hashlib

import click
import numpy as np

from replayverify.cli_common import fail, json_option
from replayverify.programs.format import load_program, program_sha256
from replayverify.programs.model import DEFAULT_MAX_BYTES, Program, ProgramError
from replayverify.untrusted import dumps, one_line

max_bytes_option = click.option(
    "--max-bytes", type=click.IntRange(min=1), default=DEFAULT_MAX_BYTES, show_default=True,
    help="Refuse programs whose buffers total more than this many bytes.",
)


def load_or_exit(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Program:
    """The program in ``path``; a rejected file in one line and exit 2."""
    try:
        return load_program(path, max_bytes=max_bytes)
    except ProgramError as exc:
        fail(f"{one_line(path, 80)}: rejected: {exc}")


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


@click.command("run")
@click.argument("file", type=click.Path(dir_okay=False))
@json_option("one object (SPEC §6).")
@max_bytes_option
def run_command(file: str, as_json: bool, max_bytes: int) -> None:
    """Execute FILE with the reference interpreter.

    Prints per buffer the sha256 of its final bytes, the final generator key and
    counter, the loss and the gradient (or null with the admission reason); with --json,
    one object (SPEC §6). Exit status 0, or 2 for a rejected file.
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


@click.command("show")
@click.argument("file", type=click.Path(dir_okay=False))
@max_bytes_option
def show_command(file: str, max_bytes: int) -> None:
    """Print the program in FILE readably.

    Writes nothing. Exit status 0, or 2 for a rejected file.
    """
    from replayverify.programs.show import render

    click.echo(render(load_or_exit(file, max_bytes)))


COMMANDS = (run_command, show_command)
