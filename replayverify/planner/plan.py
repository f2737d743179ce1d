"""Planning a card under a budget, with the two controls of the published study.

* ``options``: restrict the choices (``("eager", "whole")`` is the correctly costed
  eager/whole control: the same costs, no regions).
* ``state_agnostic``: plan as if state preservation were free (``state_*`` costs left out),
  then charge the chosen policy its true costs and say whether it still fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from replayverify.planner.card import OPTIONS, Card, CardError
from replayverify.planner.dp import Costs, frontier_dp, min_peak, policy_totals
from replayverify.planner.search import solve


@dataclass(frozen=True, slots=True)
class AgnosticReport:
    """What the state-agnostic control believed about its own pick."""

    planned_time: float | None
    planned_peak: int | None
    planned_feasible: bool


@dataclass(frozen=True, slots=True)
class Plan:
    """The planner's answer.

    ``policy`` names one option per segment (None when some segment offers none of the
    allowed options). When no policy fits, ``policy`` is one of least peak (and, among those,
    least time), so the shortfall can be read off ``predicted_peak``. ``optimal`` holds when
    the answer is exact for the card's true costs: no truncation and not state-agnostic.
    ``min_peak`` is the least peak of any policy over the allowed options, true costs.
    ``method`` names what produced the policy: ``"dp"`` (the frontier dynamic program),
    ``"levels"`` (levels and reduced costs, used when the frontier grows, see
    :mod:`replayverify.planner.levels`), ``"truncated"`` (``max_frontier`` was given) or
    ``"least-peak"`` (the least-peak witness: a truncated DP found nothing) or ``"none"``
    (no policy over the allowed options).
    """

    policy: tuple[str, ...] | None
    feasible: bool
    predicted_time: float | None
    predicted_peak: int | None
    frontier_size: int
    truncated: bool
    optimal: bool
    budget: int
    options: tuple[str, ...]
    min_peak: int | None
    state_agnostic: AgnosticReport | None = None
    method: str = "dp"

    def to_json(self) -> dict[str, Any]:
        """The JSON object that ``replayverify plan --json`` prints."""
        out: dict[str, Any] = {
            "policy": None if self.policy is None else list(self.policy),
            "feasible": self.feasible,
            "predicted_time": self.predicted_time,
            "predicted_peak": self.predicted_peak,
            "frontier_size": self.frontier_size,
            "truncated": self.truncated,
            "optimal": self.optimal,
            "budget": self.budget,
            "options": list(self.options),
            "min_peak": self.min_peak,
            "method": self.method,
        }
        if self.state_agnostic is not None:
            a = self.state_agnostic
            out["state_agnostic"] = {
                "planned_time": a.planned_time,
                "planned_peak": a.planned_peak,
                "planned_feasible": a.planned_feasible,
            }
        return out


def card_costs(card: Card, options: Sequence[str] = OPTIONS, *, agnostic: bool = False) -> Costs:
    """Dense cost matrices of ``card`` restricted to ``options`` (state costs left out if
    ``agnostic``)."""
    n = len(card.segments)
    r = np.zeros((n, 3), dtype=np.int64)
    q = np.zeros((n, 3), dtype=np.int64)
    c = np.zeros((n, 3))
    avail = np.zeros((n, 3), dtype=bool)
    for j, seg in enumerate(card.segments):
        for kind, cost in seg.options:
            if kind not in options:
                continue
            k = OPTIONS.index(kind)
            use = cost.agnostic() if agnostic else cost
            r[j, k], q[j, k], c[j, k], avail[j, k] = use.retained, use.temporary, use.time, True
    return Costs(r, q, c, avail, card.persistent_bytes)


def policy_cost(card: Card, policy: Sequence[str], *, agnostic: bool = False) -> tuple[float, int]:
    """(time, peak) of ``policy`` on ``card``: time summed left to right in segment order,
    peak = persistent + sum retained + max temporary."""
    if len(policy) != len(card.segments):
        raise ValueError(f"policy has {len(policy)} entries for {len(card.segments)} segments")
    costs = card_costs(card, agnostic=agnostic)
    choice = np.array([OPTIONS.index(p) for p in policy], dtype=np.int64)
    missing = ~costs.avail[np.arange(len(choice)), choice]
    if missing.any():
        j = int(np.flatnonzero(missing)[0])
        raise ValueError(f"segment {card.segments[j].name!r} has no option {policy[j]!r}")
    return policy_totals(costs, choice)


def _parse_options(options: Sequence[str] | str) -> tuple[str, ...]:
    items = options.split(",") if isinstance(options, str) else list(options)
    items = [o.strip() for o in items]
    bad = [o for o in items if o not in OPTIONS]
    if bad or not items:
        raise CardError("options", f"must be a subset of {', '.join(OPTIONS)}, got {options!r}")
    return tuple(o for o in OPTIONS if o in items)


def _solve(
    costs: Costs, budget: int, max_frontier: int | None, prune: bool
) -> tuple[np.ndarray | None, bool, int, bool, int | None, str, bool]:
    """(choice, feasible, frontier size, truncated, least peak, method, proven) for one cost
    model."""
    least = min_peak(costs)
    if least is None:
        return None, False, 0, False, None, "none", True
    peak, witness = least
    feasible = peak <= budget
    target = budget if feasible else peak  # infeasible: least time among least-peak policies
    if max_frontier is not None:
        res = frontier_dp(costs, target, max_frontier=max_frontier)
        method = "truncated" if res.truncated else "dp"
    elif prune:
        res = solve(costs, target, incumbent=witness)
        method = res.method
    else:
        res = frontier_dp(costs, target)
        method = "dp"
    if res.choice is None:
        return witness, feasible, res.frontier_size, res.truncated, peak, "least-peak", True
    return res.choice, feasible, res.frontier_size, res.truncated, peak, method, res.proven


def plan(
    card: Card,
    budget: int,
    *,
    options: Sequence[str] | str = OPTIONS,
    state_agnostic: bool = False,
    max_frontier: int | None = None,
    prune: bool = True,
) -> Plan:
    """Least-time policy whose peak ``P + sum r + max q`` fits ``budget`` bytes.

    Ties go to the least peak, then the least retained bytes; partial policies that reach
    exactly the same totals are resolved towards the earlier option (eager, whole, region)
    of the newest segment. ``prune=False`` switches off the time bound, not exactness.
    """
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 0:
        raise CardError("budget", f"must be a non-negative number of bytes, got {budget!r}")
    if max_frontier is not None and (
        isinstance(max_frontier, bool)
        or not isinstance(max_frontier, (int, np.integer))
        or max_frontier < 1
    ):
        raise CardError("max_frontier", f"must be a positive integer, got {max_frontier!r}")
    budget = int(budget)
    opts = _parse_options(options)
    true = card_costs(card, opts)
    true_least = min_peak(true)
    least = None if true_least is None else true_least[0]
    if true_least is None:
        return Plan(None, False, None, None, 0, False, True, budget, opts, None, None, "none")
    model = card_costs(card, opts, agnostic=True) if state_agnostic else true
    choice, fits, size, truncated, _, method, proven = _solve(model, budget, max_frontier, prune)
    assert choice is not None
    policy = tuple(OPTIONS[k] for k in choice.tolist())
    time, peak = policy_totals(true, choice)
    report = None
    if state_agnostic:
        planned_time, planned_peak = policy_totals(model, choice)
        report = AgnosticReport(planned_time, planned_peak, fits)
        fits = peak <= budget
    return Plan(
        policy,
        bool(fits),
        time,
        peak,
        size,
        truncated,
        not truncated and not state_agnostic and proven,
        budget,
        opts,
        least,
        report,
        method,
    )
