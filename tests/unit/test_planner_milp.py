"""The planner's optimum against an independent MILP formulation (scipy's HiGHS).

x[j, o] in {0, 1} picks option o for segment j, z >= 0 stands for the max temporary:

    minimise   sum c[j, o] x[j, o]
    subject to sum_o x[j, o] = 1                      for every segment j
               q[j, o] x[j, o] - z <= 0               for every available (j, o)
               P + sum r[j, o] x[j, o] + z <= M

Nothing here shares code with the dynamic program.
"""

from __future__ import annotations

import numpy as np
import pytest

from replayverify.planner import OPTIONS, parse_card, plan, policy_cost
from replayverify.planner.synthetic import shaped_card
from tests.unit.planner_cards import MiB

scipy_optimize = pytest.importorskip("scipy.optimize")


def _milp(card, budget: int, options=OPTIONS) -> tuple[float, list[str]] | None:
    """Least time and a policy by MILP, or None when infeasible."""
    pairs = [
        (j, kind, cost)
        for j, seg in enumerate(card.segments)
        for kind, cost in seg.options
        if kind in options
    ]
    n, v = len(card.segments), len(pairs) + 1  # last variable is z
    scale = float(max(budget, 1))  # bytes as fractions of the budget, for conditioning
    obj = np.array([cost.time for _, _, cost in pairs] + [0.0])
    rows, lo, hi = [], [], []
    for j in range(n):
        row = np.zeros(v)
        row[[i for i, (s, _, _) in enumerate(pairs) if s == j]] = 1.0
        rows.append(row)
        lo.append(1.0)
        hi.append(1.0)
    for i, (_, _, cost) in enumerate(pairs):
        row = np.zeros(v)
        row[i], row[-1] = cost.temporary / scale, -1.0
        rows.append(row)
        lo.append(-np.inf)
        hi.append(0.0)
    row = np.array([cost.retained / scale for _, _, cost in pairs] + [1.0])
    rows.append(row)
    lo.append(-np.inf)
    hi.append((budget - card.persistent_bytes) / scale)
    integrality = np.array([1] * len(pairs) + [0])
    bounds = scipy_optimize.Bounds(np.zeros(v), np.array([1.0] * len(pairs) + [np.inf]))
    res = scipy_optimize.milp(
        obj,
        constraints=scipy_optimize.LinearConstraint(np.array(rows), lo, hi),
        integrality=integrality,
        bounds=bounds,
        options={"mip_rel_gap": 0.0, "time_limit": 60.0},
    )
    if res.status == 2:  # infeasible
        return None
    assert res.status == 0, res.message
    policy = [""] * n
    for i, (j, kind, _) in enumerate(pairs):
        if res.x[i] > 0.5:
            policy[j] = kind
    return float(res.fun), policy


def _independent_card(rng: np.random.Generator, n: int):
    """Costs drawn independently per option: no structure for either method to exploit."""
    segments = [
        {
            "name": f"s{j}",
            "options": {
                kind: {
                    "retained": int(rng.integers(0, 1000)),
                    "temporary": int(rng.integers(0, 4000)),
                    "time": float(rng.uniform(0, 100)),
                }
                for kind in OPTIONS
            },
        }
        for j in range(n)
    ]
    doc = {"format": "replayverify.profile", "version": 1, "persistent_bytes": 100}
    return parse_card({**doc, "segments": segments})


@pytest.mark.parametrize(
    ("n", "seed", "frac", "options"),
    [
        (64, 0, 0.15, OPTIONS),
        (64, 1, 0.5, OPTIONS),
        (64, 2, 0.85, OPTIONS),
        (64, 3, 0.5, ("eager", "whole")),
        (256, 4, 0.3, OPTIONS),
        (256, 5, 0.7, OPTIONS),
        (256, 6, 0.5, ("eager", "whole")),
        (64, 7, -0.05, OPTIONS),
    ],
)
@pytest.mark.parametrize("family", ["shaped", "independent"])
def test_dp_reaches_the_milp_optimum(family: str, n: int, seed: int, frac: float, options) -> None:
    rng = np.random.default_rng([seed, n])
    if family == "shaped":
        card = shaped_card(rng, n, units=1024 * MiB)
    else:
        card = _independent_card(rng, n)
    lo = plan(card, 0, options=options).min_peak
    hi = policy_cost(card, ["eager"] * n)[1]
    budget = max(int(lo + frac * (hi - lo)), 0)
    result = plan(card, budget, options=options)
    reference = _milp(card, budget, options)
    assert result.feasible == (reference is not None)
    if reference is None:
        return
    best, policy = reference
    milp_time, milp_peak = policy_cost(card, policy)
    assert milp_peak <= budget * (1 + 1e-9)
    assert result.predicted_peak <= budget
    tol = 1e-9 * max(1.0, abs(best))
    # the DP is exact, so it can only match or beat the solver's integer solution
    assert result.predicted_time <= milp_time + tol
    assert result.predicted_time == pytest.approx(best, rel=1e-9, abs=1e-9)
