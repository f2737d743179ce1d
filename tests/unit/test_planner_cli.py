"""``replayverify plan``: output, exit status 0 / 1 / 2, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from replayverify.planner.cli import plan_command

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "large-sparse-card.json")
KEYS = {"policy", "feasible", "predicted_time", "predicted_peak", "frontier_size", "truncated"}


def _run(*args: str):
    return CliRunner().invoke(plan_command, list(args))


def test_joint_plan_fits_at_32_gib_as_json() -> None:
    result = _run(EXAMPLE, "--budget", "32GiB", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert KEYS <= set(doc)
    assert doc["feasible"] and not doc["truncated"] and doc["optimal"]
    assert len(doc["policy"]) == 16 and doc["policy"].count("region") == 13
    assert doc["predicted_peak"] <= 32 * 2**30 == doc["budget"]


def test_eager_whole_control_has_no_policy_at_32_gib() -> None:
    result = _run(EXAMPLE, "--budget", str(32 * 2**30), "--options", "eager,whole", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert not doc["feasible"] and set(doc["policy"]) <= {"eager", "whole"}
    assert doc["predicted_peak"] == doc["min_peak"] > doc["budget"]


def test_state_agnostic_reports_true_costs() -> None:
    result = _run(EXAMPLE, "--budget", "32GiB", "--state-agnostic", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["state_agnostic"]["planned_feasible"] is True
    assert doc["state_agnostic"]["planned_peak"] <= doc["budget"] < doc["predicted_peak"]
    assert not doc["feasible"] and not doc["optimal"]


def test_truncation_is_flagged() -> None:
    result = _run(EXAMPLE, "--budget", "44GiB", "--max-frontier", "1", "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["truncated"] and not doc["optimal"] and doc["frontier_size"] == 1


def test_text_output() -> None:
    result = _run(EXAMPLE, "--budget", "32GiB")
    assert result.exit_code == 0
    out = result.stdout
    assert "verdict: fits (optimal, by dp)" in out
    assert "policy: eager 3, whole 0, region 13" in out
    assert "block04" in out and "frontier:" in out
    control = _run(EXAMPLE, "--budget", "32GiB", "--options", "whole,eager")
    assert control.exit_code == 1 and "no policy fits" in control.stdout
    agnostic = _run(EXAMPLE, "--budget", "32GiB", "--state-agnostic")
    assert "state-agnostic pick does not fit" in agnostic.stdout


def test_no_policy_when_options_exclude_a_segment(tmp_path) -> None:
    doc = json.loads(Path(EXAMPLE).read_text())
    del doc["segments"][0]["options"]["eager"]
    path = tmp_path / "card.json"
    path.write_text(json.dumps(doc))
    result = _run(str(path), "--budget", "1TiB", "--options", "eager")
    assert result.exit_code == 1
    assert "offers none of eager" in result.stdout
    as_json = _run(str(path), "--budget", "1TiB", "--options", "eager", "--json")
    assert json.loads(as_json.stdout)["policy"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "lots"], "budget: must be bytes"),
        (["--budget", "1.1KiB"], "not a whole number"),
        (["--budget", "1GiB", "--options", "eager,snapshot"], "options: must be a subset"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args: list[str], message: str) -> None:
    result = _run(EXAMPLE, *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "json: not valid JSON"),
        ('{"format": "replayverify.profile"}', "version: required key is missing"),
        (json.dumps({"format": "replayverify.profile", "version": 1, "persistent_bytes": 0,
                     "segments": [{"options": {"eager": {"retained": -1, "temporary": 0,
                                                         "time": 0}}}]}),
         "segments[0].options.eager.retained: must be >= 0"),
    ],
)  # fmt: skip
def test_bad_cards_exit_2_with_one_line(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    result = _run(str(path), "--budget", "1GiB")
    assert result.exit_code == 2
    assert "rejected" in result.stderr and message in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_missing_card_file_exits_2(tmp_path) -> None:
    result = _run(str(tmp_path / "none.json"), "--budget", "1GiB")
    assert result.exit_code == 2
    assert "cannot read" in result.stderr


def test_usage_errors_exit_2() -> None:
    assert _run(EXAMPLE).exit_code == 2  # --budget is required
    assert _run(EXAMPLE, "--budget", "1GiB", "--max-frontier", "0").exit_code == 2


def test_registered_as_replayverify_plan() -> None:
    from replayverify.cli import main

    result = CliRunner().invoke(main, ["plan", EXAMPLE, "--budget", "44GiB", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["feasible"] is True
