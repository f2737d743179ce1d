"""The planner against exhaustive enumeration, and its controls, on random cards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import replayverify.planner.dp as dp
from replayverify.planner import OPTIONS, CardError, load_card, plan, policy_cost
from replayverify.planner.plan import card_costs
from replayverify.planner.synthetic import shaped_card
from tests.unit.planner_cards import GiB, best_index, enumerate_policies, small_card

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "large-sparse-card.json"
OPTION_SETS = [OPTIONS, ("eager", "whole"), ("eager", "region"), ("whole",)]


def _budgets(rng: np.random.Generator, peak: np.ndarray) -> list[int]:
    """Budgets below, at and between the policies' peaks, so that every boundary shows up."""
    lo, hi = int(peak.min()), int(peak.max())
    picks = {lo - 1, lo, hi, int(rng.choice(peak)), int(rng.integers(max(lo - 3, 0), hi + 2))}
    return sorted(b for b in picks if b >= 0)


def _check_against_enumeration(card, options, budget, result, *, agnostic=False):
    grid, time, peak, retained = enumerate_policies(card, options)
    assert result.policy is not None
    assert len(result.policy) == len(card.segments)
    assert set(result.policy) <= set(options)
    # predicted values are the returned policy's own costs, recomputed independently
    t, p = policy_cost(card, result.policy)
    assert (result.predicted_time, result.predicted_peak) == (t, p)
    assert result.min_peak == int(peak.min())
    if agnostic:
        return
    fits = peak <= budget
    assert result.feasible == bool(fits.any())
    assert result.optimal and not result.truncated
    if fits.any():
        best = best_index(time, peak, retained, fits)
    else:
        best = best_index(time, peak, retained, peak == peak.min())
    want = [OPTIONS[k] for k in grid[best]]
    # least time, then least peak, then least retained: unique up to equal totals
    assert (result.predicted_time, result.predicted_peak) == (time[best], peak[best])
    assert sum(card.segments[j].option(k).retained for j, k in enumerate(result.policy)) == int(
        retained[best]
    ), (result.policy, want)


@pytest.mark.parametrize("floats", [False, True], ids=["int-times", "float-times"])
@pytest.mark.parametrize("seed", range(12))
def test_matches_exhaustive_enumeration(seed: int, floats: bool) -> None:
    rng = np.random.default_rng([seed, int(floats)])
    for _ in range(12):
        n = int(rng.integers(1, 7))
        card = small_card(rng, n, floats=floats)
        options = OPTION_SETS[int(rng.integers(len(OPTION_SETS)))]
        _, _, peak, _ = enumerate_policies(card, options)
        if len(peak) == 0:
            result = plan(card, 10, options=options)
            assert result.policy is None and not result.feasible
            continue
        for budget in _budgets(rng, peak):
            result = plan(card, budget, options=options)
            _check_against_enumeration(card, options, budget, result)


@pytest.mark.parametrize("seed", range(6))
def test_bounded_passes_match_enumeration(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the time bound applied to every frontier (not only large ones), every pass of
    :func:`solve` and the truncated first pass run on these small cards too."""
    monkeypatch.setattr(dp, "LAZY", 0)
    rng = np.random.default_rng([seed, 99])
    for _ in range(15):
        card = small_card(rng, int(rng.integers(2, 8)), floats=bool(rng.random() < 0.5))
        options = OPTION_SETS[int(rng.integers(2))]
        _, _, peak, _ = enumerate_policies(card, options)
        if len(peak) == 0:
            continue
        for budget in _budgets(rng, peak):
            _check_against_enumeration(card, options, budget, plan(card, budget, options=options))


@pytest.mark.parametrize("seed", range(4))
def test_eager_whole_control_on_sixteen_segments(seed: int) -> None:
    """The published check: the eager/whole control against all 2^16 policies."""
    rng = np.random.default_rng([seed, 16])
    card = shaped_card(rng, 16)
    options = ("eager", "whole")
    _, time, peak, _ = enumerate_policies(card, options)
    assert len(time) == 2**16
    for budget in _budgets(rng, peak):
        _check_against_enumeration(card, options, budget, plan(card, budget, options=options))


def test_joint_on_ten_segments_against_all_3_to_the_10() -> None:
    rng = np.random.default_rng(310)
    card = shaped_card(rng, 10)
    _, _, peak, _ = enumerate_policies(card)
    assert len(peak) == 3**10
    for budget in _budgets(rng, peak):
        _check_against_enumeration(card, OPTIONS, budget, plan(card, budget))


@pytest.mark.parametrize("seed", range(6))
def test_state_agnostic_control(seed: int) -> None:
    """The control's pick is the optimum of the card without state costs; what it reports
    is that pick's true cost and whether it truly fits."""
    rng = np.random.default_rng([seed, 7])
    for _ in range(10):
        card = small_card(rng, int(rng.integers(1, 6)), floats=True, missing=0.1)
        _, _, true_peak, _ = enumerate_policies(card)
        if len(true_peak) == 0:
            continue
        _, time, peak, retained = enumerate_policies(card, agnostic=True)
        for budget in _budgets(rng, true_peak):
            result = plan(card, budget, state_agnostic=True)
            _check_against_enumeration(card, OPTIONS, budget, result, agnostic=True)
            fits = peak <= budget
            mask = fits if fits.any() else peak == peak.min()
            best = best_index(time, peak, retained, mask)
            a = result.state_agnostic
            assert a is not None
            assert (a.planned_time, a.planned_peak) == (time[best], peak[best])
            assert a.planned_feasible == bool(fits.any())
            assert a.planned_time == policy_cost(card, result.policy, agnostic=True)[0]
            assert result.feasible == (result.predicted_peak <= budget)
            assert not result.optimal


@pytest.mark.parametrize("seed", range(6))
def test_truncation_is_recorded_and_feasibility_stays_exact(seed: int) -> None:
    rng = np.random.default_rng([seed, 5])
    for _ in range(8):
        card = small_card(rng, int(rng.integers(3, 7)), floats=True, missing=0.0)
        _, time, peak, _ = enumerate_policies(card)
        for budget in _budgets(rng, peak):
            for k in (1, 2, 5):
                result = plan(card, budget, max_frontier=k)
                assert result.feasible == bool((peak <= budget).any())
                assert result.frontier_size <= k
                assert result.optimal == (not result.truncated)
                t, p = policy_cost(card, result.policy)
                assert (result.predicted_time, result.predicted_peak) == (t, p)
                if result.feasible:
                    assert p <= budget
                    assert t >= time[peak <= budget].min()
                if not result.truncated:
                    assert result.predicted_time == plan(card, budget).predicted_time


def test_time_bound_changes_nothing_but_the_frontier() -> None:
    """``prune=False`` runs one plain pass over the full frontier: same policy, bigger
    frontier."""
    rng = np.random.default_rng(11)
    for n in (12, 24, 40):
        card = shaped_card(rng, n)
        lo, hi = plan(card, 0).min_peak, policy_cost(card, ["eager"] * n)[1]
        for frac in (0.2, 0.5, 0.8):
            budget = int(lo + frac * (hi - lo))
            a, b = plan(card, budget), plan(card, budget, prune=False)
            assert a.policy == b.policy
            assert a.frontier_size <= b.frontier_size


def test_min_peak_matches_enumeration() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        card = small_card(rng, int(rng.integers(1, 6)), floats=False)
        costs = card_costs(card)
        got = dp.min_peak(costs)
        _, _, peak, _ = enumerate_policies(card)
        value, witness = got
        assert value == peak.min()
        assert dp.policy_totals(costs, witness)[1] == value


def test_deterministic_and_order_of_options_irrelevant() -> None:
    rng = np.random.default_rng(8)
    card = shaped_card(rng, 64)
    budget = 90 * GiB
    a = plan(card, budget, options=("region", "eager", "whole"))
    b = plan(card, budget, options="eager,whole,region")
    assert a == b
    assert a.options == OPTIONS


def test_no_policy_when_a_segment_offers_none_of_the_options() -> None:
    card = small_card(np.random.default_rng(0), 3, floats=False, missing=0.0)
    doc = card.to_json()
    del doc["segments"][1]["options"]["eager"]
    del doc["segments"][1]["options"]["whole"]
    from replayverify.planner import parse_card

    result = plan(parse_card(doc), 10**6, options=("eager", "whole"))
    assert result.policy is None and not result.feasible
    assert result.to_json()["policy"] is None and result.min_peak is None


@pytest.mark.parametrize("bad", [-1, 1.5, True, "32GiB"])
def test_plan_refuses_bad_budgets(bad) -> None:
    card = small_card(np.random.default_rng(1), 2, floats=False)
    with pytest.raises(CardError) as err:
        plan(card, bad)
    assert err.value.field == "budget"


def test_plan_refuses_bad_options_and_frontier() -> None:
    card = small_card(np.random.default_rng(1), 2, floats=False)
    with pytest.raises(CardError, match="options"):
        plan(card, 10, options=("eager", "snapshot"))
    with pytest.raises(CardError, match="options"):
        plan(card, 10, options=())
    for bad in (0, 2.5, True):
        with pytest.raises(CardError, match="max_frontier"):
            plan(card, 10, max_frontier=bad)


def test_policy_cost_refuses_wrong_policies() -> None:
    card = small_card(np.random.default_rng(2), 2, floats=False, missing=0.0)
    with pytest.raises(ValueError, match="entries"):
        policy_cost(card, ["eager"])


def test_example_card_reproduces_the_published_outcomes() -> None:
    """At 32 GiB eager/whole has no feasible policy and joint planning fits by retaining
    three segments eagerly and replaying thirteen with regions; the state-agnostic control
    picks whole snapshots and overflows. At 44 GiB both fit and joint is faster."""
    card = load_card(EXAMPLE)
    assert len(card.segments) == 16
    joint = plan(card, 32 * GiB)
    assert joint.feasible and joint.optimal
    assert joint.policy.count("eager") == 3 and joint.policy.count("region") == 13
    assert 29.5 * GiB < joint.predicted_peak <= 32 * GiB
    control = plan(card, 32 * GiB, options="eager,whole")
    assert not control.feasible and control.min_peak > 32 * GiB
    agnostic = plan(card, 32 * GiB, state_agnostic=True)
    assert agnostic.state_agnostic.planned_feasible and not agnostic.feasible
    assert "region" not in agnostic.policy
    j44, c44 = plan(card, 44 * GiB), plan(card, 44 * GiB, options="eager,whole")
    assert j44.feasible and c44.feasible
    assert j44.policy.count("eager") == 13 and j44.policy.count("region") == 3
    assert j44.predicted_time < c44.predicted_time
