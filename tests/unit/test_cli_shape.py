"""One CLI shape (issue 27): every command's --help renders in the same voice, an option
that several commands take has one name, type and lead sentence everywhere, and every
error is one line with the one prefix and exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from replayverify.cli import main
from replayverify.cli_common import LEADS, PREFIX
from tests.helpers import ROOT

EXAMPLE = str(ROOT / "examples" / "shift-tanh.json")

# Options several commands take whose help rightly differs per command, and why. Any other
# option name shared by two commands must be made in cli_common (a LEADS entry) or carry
# the same help everywhere.
MAY_DIFFER = {
    "--programs": "suite: the suite's size across shards; generate: files to write",
    "--resume": "what a resumed run must repeat differs (suite: the command; cohort: "
                "--frameworks, --seeds, --extra)",
}


def commands(group: click.Group = main, prefix: tuple[str, ...] = ()):
    """Every leaf command as (path, command), groups walked."""
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from commands(cmd, (*prefix, name))
        else:
            yield (*prefix, name), cmd


COMMANDS = list(commands())
IDS = [" ".join(path) for path, _ in COMMANDS]


def long_name(param: click.Parameter) -> str | None:
    return next((o for o in param.opts if o.startswith("--")), None)


def options() -> dict[str, list[tuple[str, click.Option]]]:
    """Each long option name -> the (command, option) pairs that take it."""
    found: dict[str, list[tuple[str, click.Option]]] = {}
    for path, cmd in COMMANDS:
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden and long_name(p):
                found.setdefault(long_name(p), []).append((" ".join(path), p))
    return found


def test_the_walk_finds_every_command_of_spec_6_and_the_others():
    assert {"check", "suite", "replay", "generate", "run", "show", "profile", "cohort",
            "plan", "evaluate", "gpu info", "gpu calibrate"} == set(IDS)


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=IDS)
def test_every_help_says_what_the_command_does_writes_and_exits_with(path):
    res = CliRunner().invoke(main, [*path, "--help"])
    assert res.exit_code == 0, res.output
    body = res.output.split("\n\n", 1)[1]
    assert body.strip()[0].isupper(), body  # a first line that says what it does
    text = " ".join(res.output.split())
    assert "Exit status" in text, f"{' '.join(path)} --help names no exit status"
    assert any(w in text for w in ("Write", "write", "Print", "print", "Streams")), text


def test_a_shared_option_has_one_name_type_and_lead_everywhere():
    for name, uses in options().items():
        if len(uses) < 2 or name in MAY_DIFFER:
            continue
        shapes = {(type(p.type).__name__, p.multiple, p.is_flag) for _, p in uses}
        assert len(shapes) == 1, (name, {c: (type(p.type).__name__, p.multiple, p.is_flag)
                                         for c, p in uses})
        if name in LEADS:
            bad = [c for c, p in uses if not (p.help or "").startswith(LEADS[name])]
            assert not bad, f"{name} in {bad} does not start with {LEADS[name]!r}"
        else:
            helps = {p.help for _, p in uses}
            assert len(helps) == 1, f"{name}: help differs: {helps}; make it in cli_common"


def test_every_option_named_in_cli_common_is_made_there():
    """A command that declares --workers (or --engine, ...) by hand would miss its lead."""
    for name, uses in options().items():
        if name in LEADS:
            for cmd, p in uses:
                assert (p.help or "").startswith(LEADS[name]), (cmd, name, p.help)


def test_engine_is_repeatable_wherever_it_is_accepted():
    uses = options()["--engine"]
    assert {c for c, _ in uses} == {"check", "replay", "suite"}
    assert all(p.multiple for _, p in uses)


def test_workers_means_parallel_worker_processes_everywhere():
    uses = options()["--workers"]
    assert {c for c, _ in uses} == {"suite", "cohort"}
    assert all(p.default == 0 for _, p in uses)


def test_no_command_shows_processes_beside_workers():
    """One name per concept: parallel workers are --workers; evaluate's sequential
    measuring processes are --repeats (--processes only as a hidden old spelling)."""
    assert "--processes" not in options()
    assert [c for c, _ in options()["--repeats"]] == ["evaluate"]


def test_backend_defaults_to_numpy_unless_the_command_measures_the_gpu():
    defaults = {c: p.default for c, p in options()["--backend"]}
    assert defaults == {"evaluate": "numpy", "gpu calibrate": "cupy"}


@pytest.fixture
def rejected_file(tmp_path) -> str:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "nope"}))
    return str(path)


def errors(tmp: Path, bad: str) -> dict[str, list[str]]:
    out = str(tmp / "o")
    return {
        "run": ["run", bad],
        "show": ["show", bad],
        "profile": ["profile", bad],
        "check": ["check", EXAMPLE, "--engine", "no-such-engine"],
        "replay": ["replay", "s0/nope/0"],
        "replay-engine": ["replay", "s0/bytes/000001", "--engine", "no-such-engine"],
        "suite": ["suite", "--programs", "1", "--shard", "3/2", "--out", out],
        "suite-engine": ["suite", "--programs", "1", "--engine", "no-such", "--out", out],
        "generate": ["generate", "--programs", "1", "--family", "nope", "--out", out],
        "cohort": ["cohort", "--frameworks", "no-such", "--seeds", "1:2", "--out", out],
        "plan": ["plan", bad, "--budget", "1GiB"],
        "evaluate": ["evaluate", "--out", out, "--cells", "nope"],
    }


@pytest.mark.parametrize("case", list(errors(Path("/x"), "/y")))
def test_an_error_is_one_line_with_the_prefix_and_exit_2(tmp_path, rejected_file, case):
    res = CliRunner().invoke(main, errors(tmp_path, rejected_file)[case])
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    err = res.output.splitlines()
    assert len(err) == 1 and err[0].startswith(PREFIX), res.output
    assert PREFIX not in err[0][len(PREFIX):], err  # one prefix, not two


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=IDS)
def test_click_usage_errors_exit_2_in_every_command(path):
    res = CliRunner().invoke(main, [*path, "--no-such-option"])
    assert res.exit_code == 2 and "No such option" in res.output, res.output
