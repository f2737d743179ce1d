"""``replayverify profile``: a planner profile card from the engines' accounting."""

from __future__ import annotations

import click

from replayverify.cli_common import out_file_or_exit, out_option, write_or_exit
from replayverify.programs.cli import load_or_exit, max_bytes_option
from replayverify.untrusted import dumps


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

    if out:
        out_file_or_exit(out, "--out")
    card = dumps(profile_card(load_or_exit(file, max_bytes)), indent=2)
    if out:
        write_or_exit(out, card + "\n", "--out")
    else:
        click.echo(card)


COMMANDS = (profile_command,)
