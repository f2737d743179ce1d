"""What every ``replayverify`` command shares: the exit path, the options, the voice.

Exit status (SPEC §6), the same for every command: :data:`CLEAN` 0, :data:`FOUND` 1 (a
divergence, error or missed control was found; plan: no policy fits; evaluate: a semantic
check failed; cohort: a cell is not as expected), :data:`USAGE` 2 (bad usage or a rejected
input: one line on stderr, never a traceback), :data:`INTERRUPTED` 130 (Ctrl-C). Every
command ends through :func:`fail` or :func:`finish`; click's own usage errors (an unknown
option, a bad value) keep click's format and exit 2 too.

Each option that several commands take is made here, once, so that it has one name, one
type and one lead sentence of help everywhere (``tests/unit/test_cli_shape.py`` walks the
command tree and checks it): :func:`workers_option`, :func:`engine_option`,
:func:`seed_option`, :func:`out_option`, :func:`timeout_option`, :func:`backend_option`,
:func:`json_option`, :data:`mutants_option` and :func:`dask_option`. The command groups
live in their packages' ``cli.py``; ``replayverify/cli.py`` only assembles them. This
module imports no layer of the package, so every layer's ``cli.py`` may use it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from replayverify.untrusted import one_line

CLEAN, FOUND, USAGE, INTERRUPTED = 0, 1, 2, 130
PREFIX = "replayverify: "
"""The one prefix of every line a command writes to stderr about a failure."""

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = USAGE) -> NoReturn:
    """One line ``replayverify: MESSAGE`` on stderr (control characters escaped, cut at
    400) and exit ``code`` (2, bad usage or a rejected input, unless told)."""
    click.echo(PREFIX + one_line(message, 400), err=True)
    finish(code)


def finish(code: int) -> NoReturn:
    """End the command with exit status ``code``: the one exit path (``SystemExit``, which
    click passes through, so it also ends a command run by ``CliRunner``)."""
    sys.exit(code)


def finish_clean_if(clean: bool) -> NoReturn:
    """Exit 0 when ``clean``, else 1 (something was found)."""
    finish(CLEAN if clean else FOUND)


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
        fail(f"{option} {shown_path}: {why}")


def write_or_exit(path: str, text: str, option: str) -> None:
    """``text`` written to ``path``; a failure (a full disk) in one line, exit 2."""
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        fail(f"{option} {one_line(path, 120)}: {exc.strerror or exc}")


def command_line() -> str:
    """This command as typed, less ``--resume``: the files of a resumed run name the
    command an uninterrupted run would have, as they hold the same records."""
    return " ".join(["replayverify", *(a for a in sys.argv[1:] if a != "--resume")])


# -- shared options: name, type and lead help sentence fixed here -------------------------

LEADS = {
    "--workers": "Worker processes (0, the default: one per CPU). Records do not depend "
                 "on it.",
    "--engine": "Engine to check (repeatable): a registered name, policy:eager,region,... "
                "or module:attr.",
    "--seed": "Suite seed: same seed, same programs and records on any machine.",
    "--out": "Output",
    "--timeout": "Seconds",
    "--backend": "Array module: numpy (the CPU) or cupy (a GPU).",
    "--json": "Print JSON:",
    "--mutants": "Also run the engine mutants as controls.",
    "--dask": "Run on a Dask cluster:",
    "--dask-batch": "With --dask:",
}
"""The sentence each shared option's help starts with, whatever the command adds."""


def workers_option(command: F) -> F:
    """``--workers N``: parallel worker processes, 0 for one per CPU."""
    return click.option("--workers", type=click.IntRange(min=0), default=0,
                        help=LEADS["--workers"])(command)


def engine_option(default_help: str) -> Callable[[F], F]:
    """``--engine SPEC`` (repeatable, into ``engine_specs``); ``default_help`` says what
    runs without it."""
    return click.option("--engine", "engine_specs", multiple=True, metavar="SPEC",
                        help=f"{LEADS['--engine']} {default_help}")


def seed_option(command: F) -> F:
    return click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                        help=LEADS["--seed"])(command)


def out_option(what: str, *, default: str | None = None, required: bool = False,
               directory: bool = True, dest: str = "out_dir") -> Callable[[F], F]:
    """``--out``: a directory (or with ``directory=False`` a file) holding ``what``."""
    kind = "directory" if directory else "file"
    return click.option(
        "--out", dest, type=click.Path(file_okay=not directory, dir_okay=directory),
        default=default, required=required, show_default=default is not None,
        help=f"{LEADS['--out']} {kind}: {what}")


MAX_TIMEOUT = 1e6  # seconds (11.6 days): beyond, the interval timer cannot be set


def _timeout(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """--timeout: finite, 0 (none) or positive, at most MAX_TIMEOUT."""
    if value is not None and not (0 <= value <= MAX_TIMEOUT):  # (NaN fails both)
        raise click.BadParameter(f"{value!r} is not a number of seconds from 0 (no limit) "
                                 f"to {MAX_TIMEOUT:g}")
    return value


def timeout_option(default: float, help: str) -> Callable[[F], F]:
    """``--timeout SECONDS`` (0: no limit); ``help`` continues the lead "Seconds"."""
    return click.option("--timeout", type=float, default=default, show_default=True,
                        callback=_timeout, help=f"{LEADS['--timeout']} {help}")


ISOLATED_HELP = ("per program (0, the default: no limit, checked in this process). "
                 "With a limit, each program is checked in a worker process: past it, an "
                 "error record; a worker still running 10 s later (an engine that ignores "
                 "it) or ending itself (os._exit) gives a `lost` error record.")


def backend_option(default: str, why: str, *, dest: str = "backend") -> Callable[[F], F]:
    """``--backend numpy|cupy``. The one default policy: numpy, unless the command exists
    to measure the GPU; ``why`` says which and why in the help."""
    return click.option("--backend", dest, type=click.Choice(["numpy", "cupy"]),
                        default=default, show_default=True,
                        help=f"{LEADS['--backend']} {why}")


def json_option(what: str) -> Callable[[F], F]:
    """``--json`` (into ``as_json``): print ``what`` as strict JSON instead of a table."""
    return click.option("--json", "as_json", is_flag=True, help=f"{LEADS['--json']} {what}")


mutants_option = click.option("--mutants", is_flag=True, help=LEADS["--mutants"])


def dask_option(command: F) -> F:
    """``--dask ADDRESS`` and ``--dask-batch K``, for the commands that run many tasks."""
    command = click.option(
        "--dask-batch", "dask_batch", type=click.IntRange(min=1), default=1, show_default=True,
        help=f"{LEADS['--dask-batch']} programs (cohort: tasks) per Dask task. Dask spends a "
             "few ms per task on the scheduler and this client: batch on large clusters.",
    )(command)
    return click.option(
        "--dask", "dask", metavar="ADDRESS", default=None,
        help=f"{LEADS['--dask']} a scheduler address (tcp://HOST:8786) or local[:N] for "
             "N worker processes here, N at most twice the CPUs (at least 4) (needs the dask "
             "extra; see docs/distributed.md). Records, --resume (and the suite's --shard) "
             "are as for a local run; --workers is then ignored.")(command)


def deprecated_alias(old: str, new: str, type: click.ParamType) -> Callable[[F], F]:
    """A hidden option ``old`` (value in ``old_<name>``) kept working for scripts written
    before it became ``new``; the command passes it through :func:`take_alias`."""
    dest = "old_" + old.lstrip("-").replace("-", "_")
    return click.option(old, dest, type=type, default=None, hidden=True,
                        help=f"Deprecated spelling of {new}.")


def take_alias(value: Any, old_value: Any, old: str, new: str) -> Any:
    """``old_value`` when the deprecated ``old`` was given (saying so on stderr), else
    ``value``."""
    if old_value is None:
        return value
    click.echo(f"{PREFIX}{old} is deprecated: use {new}", err=True)
    return old_value


# -- progress -----------------------------------------------------------------------------

def progress(total: int, label: str = "programs"):
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
