"""The planner's exact search: bounded DP passes, and levels where the frontier grows.

:func:`solve` runs the dynamic program of :mod:`replayverify.planner.dp` with a time bound,
and hands a card whose frontier grows past its limits to
:mod:`replayverify.planner.levels` (which builds on the DP's model and keeps no frontier).
"""

from __future__ import annotations

import numpy as np

from replayverify.planner.dp import Costs, DPResult, Problem, policy_totals
from replayverify.planner.levels import solve_levels

FRONTIER_LIMIT = 2048
"""An exact pass whose frontier grows past this many states stops, and :func:`solve` solves
the card by levels instead (:mod:`replayverify.planner.levels`)."""
WORK_LIMIT = 1 << 16
"""Likewise for a pass whose frontiers, summed over the segments walked, pass this many
states (the parent pointers it holds): the DP's time and memory grow with that sum."""


def solve(
    costs: Costs,
    budget: int,
    *,
    incumbent: np.ndarray | None = None,
    beam: int = 64,
    first: float = 0.35,
    limit: int | None = FRONTIER_LIMIT,
    work: int | None = WORK_LIMIT,
) -> DPResult:
    """Least-time policy with peak <= budget, or no choice when none fits.

    A truncated pass (``beam`` states per step) gives a feasible time U (``incumbent``, any
    known feasible policy, caps it). Exact passes then drop states whose time plus bound
    exceeds a threshold, starting ``first`` of the way from the root bound L to U and
    doubling its distance from L up to U. A pass is exact as soon as its best time is
    within its threshold (every state on an optimal policy has time plus bound <= the
    optimum), or it dropped nothing, or its threshold is U. A threshold near the optimum
    keeps the frontier small where many partial policies stay close to the bound (costs
    strongly correlated with bytes).

    The DP holds at most ``limit`` states per segment and ``work`` in all: a pass that would
    hold more stops, and the card is solved by levels instead (:func:`levels.solve_levels`,
    which keeps no frontier), from the best policy known. So does a card whose truncated
    pass alone would exceed ``work``. ``method`` in the result says which solved it.
    """
    prob = Problem(costs, budget)
    if prob.empty:
        return DPResult(None, 0, False, False)
    best = incumbent
    upper = float("inf") if incumbent is None else policy_totals(costs, incumbent)[0]
    largest = 0
    if best is None or work is None or prob.n * beam <= work:
        quick = prob.run(max_frontier=beam, rough=True)
        largest = quick.frontier_size
        if quick.choice is not None:
            time = policy_totals(costs, quick.choice)[0]
            if time < upper:
                best, upper = quick.choice, time
        if not np.isfinite(upper):
            return prob.run()  # no feasible policy known: one plain exact pass
        low = prob.root_bound()
        gap = (upper - low) * first
        while True:
            threshold = upper if gap >= upper - low else low + gap
            res = prob.run(upper=threshold, limit=limit, work=work)
            if res.aborted:
                largest = max(largest, res.frontier_size)
                break
            if res.choice is not None:
                time = policy_totals(costs, res.choice)[0]
                if time <= threshold or not res.pruned or threshold >= upper:
                    return res
                if time < upper:
                    best, upper = res.choice, time
            elif not res.pruned or threshold >= upper:
                return res
            gap *= 2.0
    assert best is not None
    found = solve_levels(prob, best)
    return DPResult(
        found.choice, max(largest, found.largest), False, True, False, "levels", found.proven
    )
