"""The ``replayverify`` command line (SPEC §6): this module only assembles the commands.

Each command lives with the layer it drives: ``programs/cli.py`` (run, show),
``verifier/cli.py`` (check, replay, suite, generate, and profile, which runs the engines
under the verifier's check-scoped memo), ``cohort/cli.py`` (cohort), ``planner/cli.py``
(plan), ``evaluate/cli.py`` (evaluate) and ``gpu/cli.py`` (gpu info, gpu calibrate). What
they share (options, the exit path, the error prefix, exit status 0 clean / 1 found / 2
bad usage or rejected input / 130 interrupted) is in ``cli_common.py``.
"""

from __future__ import annotations

import click

from replayverify.cohort.cli import COMMANDS as COHORT
from replayverify.evaluate.cli import evaluate_command
from replayverify.gpu.cli import gpu_group
from replayverify.planner.cli import plan_command
from replayverify.programs.cli import COMMANDS as PROGRAMS
from replayverify.verifier.cli import COMMANDS as VERIFIER


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="replayverify")
def main() -> None:
    """Verify that activation recomputation replays the state the forward pass saw.

    Programs are JSON files in the format of SPEC §2 (see docs/semantics.md). Exit
    status of every command: 0 clean, 1 something was found (a divergence, error or
    missed control; an unexpected cohort cell; no plan fits), 2 bad usage or a rejected
    input (one line on stderr), 130 interrupted.
    """


for _command in (*PROGRAMS, *VERIFIER, *COHORT, plan_command, evaluate_command,
                 gpu_group):
    main.add_command(_command)

if __name__ == "__main__":
    main()
