"""``replayverify check`` with --policy, --engine and --mutants."""

import json

from click.testing import CliRunner

from replayverify.cli import main

EXAMPLE = "examples/shift-tanh.json"  # two segments


def run(*args):
    return CliRunner().invoke(main, ["check", EXAMPLE, "--json", *args])


def records(result):
    return [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]


def test_policy_runs_the_plan_through_the_engine_checks():
    res = run("--policy", "eager,region")
    assert res.exit_code == 0, res.output
    mine = [r for r in records(res) if r["engine"] == "policy:eager,region"]
    assert [(r["check"], r["outcome"]) for r in mine] == [("gradient", "match"),
                                                          ("bytes", "match")]
    assert mine[0]["replayed_ops"] == 2 and mine[0]["retained_bytes"] > 0


def test_policy_with_the_wrong_count_is_a_usage_error():
    res = run("--policy", "eager,region,whole")
    assert res.exit_code == 2
    assert "3 entries but the program has 2 segments" in res.output


def test_policy_with_an_unknown_strategy_is_a_usage_error():
    res = run("--policy", "eager,bogus")
    assert res.exit_code == 2 and "'bogus'" in res.output


def test_engine_by_module_attr_and_policy_together():
    res = run("--engine", "tests.unit.test_engines_registry:USER_ENGINE",
              "--policy", "whole,whole")
    assert res.exit_code == 0, res.output
    engines = {r["engine"] for r in records(res) if r["engine"]}
    assert engines == {"tests.unit.test_engines_registry:USER_ENGINE", "policy:whole,whole"}


def test_unknown_engine_is_a_usage_error():
    res = run("--engine", "nope")
    assert res.exit_code == 2 and "unknown engine 'nope'" in res.output


def test_mutants_give_one_record_each():
    res = run("--engine", "region", "--mutants")
    mutants = [r for r in records(res) if r["check"].startswith("mutant:")]
    assert len(mutants) >= 10
    assert all(r["outcome"] in ("detected", "missed") for r in mutants)
    assert any(r["outcome"] == "detected" for r in mutants)
