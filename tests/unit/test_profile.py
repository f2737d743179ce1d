"""From programs to plans: `profile` cards from the engines' accounting, planned, then
every plan verified through `check --policy` (issue 7 item 5)."""

import json

import pytest
from click.testing import CliRunner

from replayverify.cli import main
from replayverify.engines.preservation import run_policy
from replayverify.engines.profile import profile_card
from replayverify.planner import parse_card, plan, policy_cost
from replayverify.programs import generate, save_program


@pytest.mark.parametrize("index", range(3))
def test_a_card_made_under_a_memo_is_the_plain_card(index):
    """The ``profile`` command runs its policies under one memo: the card is the same."""
    from dataclasses import replace

    from replayverify.verifier.memo import Memo

    p = generate(1, index, "derivative")
    memo = Memo()
    assert profile_card(p, runner=memo) == profile_card(replace(p))
    assert memo._done  # (the memo was used)


@pytest.mark.parametrize("index", range(6))
def test_profile_cards_are_valid_and_exact_for_single_choices(index):
    p = generate(1, index, "derivative")
    card = profile_card(p)
    parsed = parse_card(card)  # the planner's own validation accepts it
    assert len(parsed.segments) == len(p.segments)
    base = run_policy(p, ("eager",) * len(p.segments))
    assert card["persistent_bytes"] == p.nbytes
    # the all-eager policy's retained bytes are exactly what the eager run charged
    assert sum(s["options"]["eager"]["retained"] for s in card["segments"]) == \
        base.retained_bytes
    for s, seg in enumerate(card["segments"]):
        for option in ("whole", "region"):
            policy = tuple(option if t == s else "eager" for t in range(len(p.segments)))
            res = run_policy(p, policy)
            cost = seg["options"][option]
            # one deviation from all-eager: its replayed ops and temporaries are exact
            assert cost["time"] == res.replayed_ops
            assert cost["temporary"] == res.peak_temporary_bytes
            time, _ = policy_cost(parsed, policy)
            assert time == res.replayed_ops


def test_every_plan_from_a_profile_passes_check_policy(tmp_path):
    runner = CliRunner()
    checked = 0
    for index in range(8):
        p = generate(2, index, "derivative")
        if len(p.segments) < 2:
            continue
        card = parse_card(profile_card(p))
        path = tmp_path / f"p{index}.json"
        save_program(p, path)
        floor = plan(card, 2**62).min_peak  # the least peak any policy reaches
        for budget in (floor, 2**62):  # the tightest budget that fits, and no limit
            result = plan(card, budget)
            assert result.feasible
            res = runner.invoke(main, ["check", str(path), "--json", "--policy",
                                       ",".join(result.policy)])
            assert res.exit_code == 0, res.output
            records = [json.loads(x) for x in res.output.splitlines()]
            assert {r["outcome"] for r in records} <= {"match", "unsupported", "detected"}
            checked += 1
    assert checked >= 4


def test_profile_cli_writes_a_card(tmp_path):
    p = generate(0, 3, "derivative")
    src = tmp_path / "p.json"
    save_program(p, src)
    out = tmp_path / "card.json"
    res = CliRunner().invoke(main, ["profile", str(src), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert parse_card(json.loads(out.read_text())).segments
