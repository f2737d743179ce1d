"""The levels method (planner/levels.py) against exhaustive enumeration, and on the cards
whose frontier grows: the optimum must match, and the answer must say how it was found."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import replayverify.planner.dp as dp
import replayverify.planner.search as search
from replayverify.planner import OPTIONS, parse_card, plan, policy_cost
from replayverify.planner.levels import best_combination
from tests.unit.planner_cards import enumerate_policies, small_card


def _proportional(rng: np.random.Generator, n: int) -> object:
    """Time saved exactly proportional to bytes retained: the DP's bound is flat here."""
    segments = []
    for j in range(n):
        options = {}
        for kind in OPTIONS:
            r = int(rng.integers(0, 10**6))
            options[kind] = {
                "retained": r,
                "temporary": int(rng.integers(0, 10**6)),
                "time": 1000.0 - r * 1e-3,
            }
        segments.append({"name": f"s{j}", "options": options})
    doc = {"format": "replayverify.profile", "version": 1, "persistent_bytes": 0}
    return parse_card({**doc, "segments": segments})


def _force_levels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every exact DP pass give up at once, so the levels method answers."""
    monkeypatch.setattr(search, "FRONTIER_LIMIT", 0)
    monkeypatch.setattr(search, "WORK_LIMIT", 0)
    defaults = search.solve.__kwdefaults__
    monkeypatch.setitem(defaults, "limit", 0)
    monkeypatch.setitem(defaults, "work", 0)


@pytest.mark.parametrize("seed", range(8))
def test_levels_match_exhaustive_enumeration(seed: int, monkeypatch) -> None:
    _force_levels(monkeypatch)
    rng = np.random.default_rng([seed, 12])
    for _ in range(20):
        n = int(rng.integers(1, 7))
        card = small_card(rng, n, floats=bool(rng.random() < 0.5))
        options = (OPTIONS, ("eager", "whole"))[int(rng.integers(2))]
        _, time, peak, _ = enumerate_policies(card, options)
        if len(peak) == 0:
            continue
        for budget in sorted({int(peak.min()), int(np.median(peak)), int(peak.max())}):
            result = plan(card, budget, options=options)
            assert result.method in ("levels", "least-peak")
            assert result.optimal
            assert (result.predicted_time, result.predicted_peak) == policy_cost(
                card, result.policy
            )
            assert result.predicted_peak <= budget
            best = time[peak <= budget].min()
            assert result.predicted_time == pytest.approx(best, rel=1e-12, abs=1e-12)


def test_best_combination_is_exact() -> None:
    rng = np.random.default_rng(5)
    for _ in range(40):
        n = int(rng.integers(1, 7))
        r = rng.integers(0, 50, size=(n, 3)).astype(np.int64)
        c = rng.integers(0, 20, size=(n, 3)).astype(np.float64)
        opts = [np.flatnonzero(rng.random(3) < 0.7) for _ in range(n)]
        opts = [o if len(o) else np.array([1]) for o in opts]
        cap = int(rng.integers(0, 120))
        best = None
        for combo in itertools.product(*opts):
            rr = sum(int(r[j, k]) for j, k in enumerate(combo))
            cc = sum(float(c[j, k]) for j, k in enumerate(combo))
            if rr <= cap and (best is None or cc < best):
                best = cc
        found = best_combination(r, c, np.arange(n), opts, cap)
        if best is None:
            assert found is None
            continue
        picks, _ = found
        assert all(k in o for k, o in zip(picks.tolist(), opts))
        assert int(r[np.arange(n), picks].sum()) <= cap
        assert float(c[np.arange(n), picks].sum()) == best


def test_proportional_card_is_solved_exactly_by_levels() -> None:
    """The card that made the DP run for minutes: its optimum meets the relaxation's bound,
    which the levels method proves."""
    card = _proportional(np.random.default_rng(3), 1024)
    least = plan(card, 0).min_peak
    top = policy_cost(card, ["eager"] * 1024)[1]
    budget = (least + top) // 2
    result = plan(card, budget)
    assert result.feasible and result.optimal and result.method == "levels"
    assert result.predicted_peak <= budget
    low = dp.Problem(dp.Costs(*_costs(card)), budget).root_bound()
    assert result.predicted_time <= low + 1e-6 * abs(low)


def _costs(card):
    from replayverify.planner.plan import card_costs

    c = card_costs(card)
    return c.r, c.q, c.c, c.avail, c.persistent
