"""How fast the exact planner is, with baselines measured in the same run.

    python benchmarks/plan_speed.py            # the full table (about a minute)
    python benchmarks/plan_speed.py --quick    # fewer repeats, smaller baselines

Cards follow the large-activation, sparse-write shape of examples/large-sparse-card.json
with every segment's sizes and times spread at random (seeded), plus a family whose costs
are drawn independently per option, and (full run only) a hard family whose time saved is
nearly proportional to bytes retained, which is not part of the 1,024-segment target.
Budgets sit 30% and 70% (hard family: 50%) of the way from the least possible peak to the
all-eager peak.

Reported per card: exact plan time (median of repeats), the largest frontier the final
exact pass held, and ratios against baselines timed here:

* plain DP: the same dynamic program with no time bound (``prune=False``), i.e. the whole
  untruncated Pareto frontier of every partial policy that can still fit;
* exhaustive: all 2^16 eager/whole policies (the published check) and all 3^10 joint ones;
* greedy: start from the least-peak policy, repeatedly take the switch that saves the most
  time per extra byte while it fits; reported as its time and how much slower its policy
  is than the optimum.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replayverify.planner import OPTIONS, Card, parse_card, plan, policy_cost
from replayverify.planner.dp import min_peak, policy_totals
from replayverify.planner.plan import card_costs
from replayverify.planner.synthetic import GiB, shaped_card


def shaped(n: int, seed: int) -> Card:
    """Large activations, 1-GiB whole snapshots, small region journals, random spread."""
    return shaped_card(np.random.default_rng([seed, n]), n)


def independent(n: int, seed: int) -> Card:
    """Every option's r, q and c drawn independently: no structure to exploit."""
    rng = np.random.default_rng([seed, n, 1])
    segs = [
        {
            "name": f"s{j}",
            "options": {
                k: {
                    "retained": int(rng.integers(0, 1000)),
                    "temporary": int(rng.integers(0, 1000)),
                    "time": float(rng.uniform(0, 100)),
                }
                for k in OPTIONS
            },
        }
        for j in range(n)
    ]
    doc = {"format": "replayverify.profile", "version": 1, "persistent_bytes": 0}
    return parse_card({**doc, "segments": segs})


def correlated(n: int, seed: int) -> Card:
    """A hard family: time saved nearly proportional to bytes retained (the classic hard
    knapsack shape), temporaries as large as one segment's retained bytes."""
    rng = np.random.default_rng([seed, n, 2])
    segs = []
    for j in range(n):
        options = {}
        for k in OPTIONS:
            r = int(rng.integers(0, 10**6))
            q = int(rng.integers(0, 10**6))
            c = 1100 - r * rng.uniform(9e-4, 1.1e-3)
            options[k] = {"retained": r, "temporary": q, "time": c}
        segs.append({"name": f"s{j}", "options": options})
    doc = {"format": "replayverify.profile", "version": 1, "persistent_bytes": 0}
    return parse_card({**doc, "segments": segs})


def budget_at(card: Card, frac: float, options=OPTIONS) -> int:
    least = plan(card, 0, options=options).min_peak
    top = policy_cost(card, ["eager"] * len(card.segments))[1]
    return int(least + frac * (top - least))


def timed(repeats: int, fn, *args, **kwargs) -> tuple[float, object]:
    """Median wall time of ``repeats`` calls of ``fn(*args, **kwargs)``, and the last result."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def exhaustive(card: Card, budget: int, options) -> float:
    """Least time over all policies (same left-to-right sums as the planner)."""
    costs = card_costs(card, options)
    n = len(card.segments)
    cols = [OPTIONS.index(k) for k in OPTIONS if k in options]
    grid = np.array(list(itertools.product(cols, repeat=n)), dtype=np.int64)
    rows = np.arange(n)
    t = np.zeros(len(grid))
    for j in range(n):
        t = t + costs.c[j, grid[:, j]]
    peak = card.persistent_bytes + costs.r[rows, grid].sum(1) + costs.q[rows, grid].max(1)
    return float(t[peak <= budget].min())


def greedy(card: Card, budget: int) -> float:
    """Time of the greedy policy (see the module docstring)."""
    costs = card_costs(card)
    r, q, c, ok = costs.r, costs.q, costs.c, costs.avail
    choice = min_peak(costs)[1].copy()
    rows = np.arange(len(choice))
    while True:
        cur_r, cur_q, cur_c = r[rows, choice], q[rows, choice], c[rows, choice]
        order = np.argsort(cur_q)
        top, second = cur_q[order[-1]], (cur_q[order[-2]] if len(order) > 1 else 0)
        q_others = np.where(rows == order[-1], second, top)
        peak = (
            card.persistent_bytes
            + cur_r.sum()
            - cur_r[:, None]
            + r
            + np.maximum(q_others[:, None], q)
        )
        gain = cur_c[:, None] - c
        extra = np.maximum(r - cur_r[:, None], 1).astype(float)
        score = np.where(ok & (peak <= budget) & (gain > 0), gain / extra, -np.inf)
        j, k = np.unravel_index(np.argmax(score), score.shape)
        if not np.isfinite(score[j, k]):
            return policy_totals(costs, choice)[0]
        choice[j] = k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and baselines")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    print("ratios: baseline time / exact plan time; frontier: baseline's / exact pass's")
    print(f"{'card':<28} {'n':>5} {'budget':>6} {'plan s':>8} {'frontier':>8}  baselines")
    worst_1024 = 0.0
    for family, make in (("shaped", shaped), ("independent", independent)):
        for n in (16, 256, 1024):
            card = make(n, 0)
            for frac in (0.3, 0.7):
                budget = budget_at(card, frac)
                secs, result = timed(repeats, plan, card, budget)
                assert result.feasible and result.optimal
                notes = []
                if n == 16 or (n == 256 and family == "independent" and not args.quick):
                    base, plain = timed(1, plan, card, budget, prune=False)
                    assert plain.policy == result.policy
                    notes.append(
                        f"plain DP {base:.3f} s ({base / secs:.1f}x), frontier "
                        f"{plain.frontier_size} ({plain.frontier_size / result.frontier_size:.0f}x)"
                    )
                if n == 1024:
                    worst_1024 = max(worst_1024, secs)
                    gsecs, gtime = timed(1, greedy, card, budget)
                    notes.append(
                        f"greedy {gsecs:.3f} s ({gsecs / secs:.2f}x), its policy "
                        f"{100 * (gtime / result.predicted_time - 1):.3f}% slower"
                    )
                print(
                    f"{family:<28} {n:>5} {frac:>6.0%} {secs:>8.3f} {result.frontier_size:>8}  "
                    + "; ".join(notes),
                    flush=True,
                )
    if not args.quick:
        for n in (256, 1024):
            card = correlated(n, 0)
            budget = budget_at(card, 0.5)
            secs, result = timed(1, plan, card, budget)
            gsecs, gtime = timed(1, greedy, card, budget)
            print(
                f"{'correlated (hard)':<28} {n:>5} {0.5:>6.0%} {secs:>8.3f} "
                f"{result.frontier_size:>8}  greedy {gsecs:.3f} s ({gsecs / secs:.2f}x), its "
                f"policy {100 * (gtime / result.predicted_time - 1):.3f}% slower",
                flush=True,
            )
    # exhaustive baselines: the published 2^16 eager/whole check, and 3^10 joint policies
    for n, options, label in ((16, ("eager", "whole"), "2^16 eager/whole"), (10, OPTIONS, "3^10")):
        card = shaped(n, 1)
        budget = budget_at(card, 0.5, options)
        secs, result = timed(repeats, plan, card, budget, options=options)
        esecs, best = timed(1, exhaustive, card, budget, options)
        assert best == result.predicted_time
        print(
            f"{'exhaustive ' + label:<28} {n:>5} {0.5:>6.0%} {secs:>8.3f} "
            f"{result.frontier_size:>8}  enumeration {esecs:.3f} s ({esecs / secs:.0f}x), "
            "same optimum"
        )
    example = Path(__file__).resolve().parents[1] / "examples" / "large-sparse-card.json"
    from replayverify.planner import load_card

    card = load_card(example)
    for opts in (OPTIONS, ("eager", "whole")):
        secs, result = timed(repeats, plan, card, 32 * GiB, options=opts)
        print(
            f"{'example ' + '/'.join(o[0] for o in opts):<28} {16:>5} {'32GiB':>6} {secs:>8.3f} "
            f"{result.frontier_size:>8}  feasible={result.feasible}, "
            f"peak {result.predicted_peak / GiB:.2f} GiB"
        )
    verdict = "met" if worst_1024 <= 1.0 else "NOT met"
    print(f"target: 1,024 segments exact in <= 1 s: {verdict} (slowest {worst_1024:.3f} s)")


if __name__ == "__main__":
    main()
