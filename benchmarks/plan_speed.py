"""How fast and how large the exact planner is, with baselines measured in the same run.

    python benchmarks/plan_speed.py            # the full table (a few minutes)
    python benchmarks/plan_speed.py --quick    # fewer repeats, no slow baselines

Card families (seeded): ``shaped`` follows the large-activation, sparse-write shape of
examples/large-sparse-card.json with every segment's sizes and times spread at random;
``independent`` draws every option's costs independently; ``correlated`` makes time saved
nearly proportional to bytes retained (the classic hard knapsack shape) with temporaries as
large as one segment's retained bytes; ``proportional`` makes it exactly proportional (the
card that made the frontier DP run for minutes). Budgets sit 30% and 70% (correlated and
proportional also 50%) of the way from the least possible peak to the all-eager peak.

Reported per card: median wall time of ``plan`` over repeats, its CPU time, its peak of
traced allocations (tracemalloc, which sees numpy's buffers), the method that produced the
answer (``dp``: the frontier DP; ``levels``: levels and reduced costs, used when the
frontier grows past its limits), the largest state set held, and baselines timed here:

* frontier DP: the same dynamic program with its limits lifted (what ``plan`` ran before
  the levels method existed), answer compared;
* plain DP: the DP with no time bound either (``prune=False``, the whole untruncated
  Pareto frontier);
* MILP: the model as a mixed-integer program (binary choice per option, one continuous max
  temporary) solved by scipy's HiGHS with zero gap (full run, hard families only); its
  policy is checked against the budget in exact integers, since HiGHS's feasibility
  tolerance can admit a few bytes over;
* exhaustive: all 2^16 eager/whole policies (the published check) and all 3^10 joint ones;
* greedy: start from the least-peak policy, repeatedly take the switch that saves the most
  time per extra byte while it fits; reported as its time and how much slower its policy
  is than the optimum.

The timed figures depend on the machine's load (it is shared): CPU seconds are printed
beside wall seconds for that reason.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replayverify.planner import OPTIONS, Card, parse_card, plan, policy_cost
from replayverify.planner.dp import min_peak, policy_totals
from replayverify.planner.plan import card_costs
from replayverify.planner.search import solve
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


def _bytes_priced(rng: np.random.Generator, n: int, time_of) -> Card:
    """n segments whose options draw r and q up to 10^6 bytes, then take time ``time_of(r)``."""
    segs = []
    for j in range(n):
        options = {}
        for k in OPTIONS:
            r = int(rng.integers(0, 10**6))
            q = int(rng.integers(0, 10**6))
            options[k] = {"retained": r, "temporary": q, "time": time_of(r)}
        segs.append({"name": f"s{j}", "options": options})
    doc = {"format": "replayverify.profile", "version": 1, "persistent_bytes": 0}
    return parse_card({**doc, "segments": segs})


def correlated(n: int, seed: int) -> Card:
    """A hard family: time saved nearly proportional to bytes retained (the classic hard
    knapsack shape), temporaries as large as one segment's retained bytes."""
    rng = np.random.default_rng([seed, n, 2])
    return _bytes_priced(rng, n, lambda r: 1100 - r * rng.uniform(9e-4, 1.1e-3))


def proportional(n: int, seed: int) -> Card:
    """Time saved exactly proportional to bytes retained: every partial policy that can
    still fill the budget looks equally good to the DP's bound."""
    rng = np.random.default_rng([seed, n, 3])
    return _bytes_priced(rng, n, lambda r: 1000.0 - r * 1e-3)


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


def measured(repeats: int, card: Card, budget: int) -> tuple[float, float, float, object]:
    """(median wall s, CPU s of one call, traced peak MB of one call, plan) of ``plan``."""
    secs, result = timed(repeats, plan, card, budget)
    c0 = time.process_time()
    plan(card, budget)
    cpu = time.process_time() - c0
    tracemalloc.start()
    plan(card, budget)
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return secs, cpu, peak, result


def frontier_dp_only(card: Card, budget: int) -> float:
    """The frontier DP with its limits lifted: the optimum's time."""
    costs = card_costs(card)
    res = solve(costs, budget, incumbent=min_peak(costs)[1], limit=None, work=None)
    return policy_totals(costs, res.choice)[0]


@contextlib.contextmanager
def _quiet_stdout():
    """HiGHS prints progress lines from C++ straight to file descriptor 1."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def milp(card: Card, budget: int, limit: float = 120.0) -> tuple[float, bool, str]:
    """(time of HiGHS's policy, whether it fits in exact integers, status) for the card."""
    from scipy import optimize, sparse

    costs = card_costs(card)
    r, q, c, ok = costs.r, costs.q, costs.c, costs.avail
    n = r.shape[0]
    seg, col = np.nonzero(ok)
    m = len(seg)
    room = budget - costs.persistent
    scale = float(max(room, 1))
    idx = np.arange(m)
    one = sparse.csr_matrix((np.ones(m), (seg, idx)), shape=(n, m + 1))
    # z >= sum_o q[j, o] x[j, o] per segment: exactly one option is chosen, so this is
    # z >= the chosen q, and tighter in the relaxation than one row per option
    tmp = sparse.csr_matrix(
        (
            np.append(q[seg, col] / scale, -np.ones(n)),
            (np.append(seg, np.arange(n)), np.append(idx, np.full(n, m))),
        ),
        shape=(n, m + 1),
    )
    fit = sparse.csr_matrix(np.append(r[seg, col] / scale, 1.0)[None, :])
    a = sparse.vstack([one, tmp, fit]).tocsr()
    lo = np.concatenate([np.ones(n), np.full(n, -np.inf), [-np.inf]])
    hi = np.concatenate([np.ones(n), np.zeros(n), [room / scale]])
    with _quiet_stdout():
        res = optimize.milp(
            np.append(c[seg, col], 0.0),
            constraints=optimize.LinearConstraint(a, lo, hi),
            integrality=np.append(np.ones(m), 0),
            bounds=optimize.Bounds(np.zeros(m + 1), np.append(np.ones(m), np.inf)),
            options={"mip_rel_gap": 0.0, "time_limit": limit},
        )
    if res.x is None:
        return float("nan"), False, res.message
    choice = np.zeros(n, dtype=np.int64)
    pick = res.x[:m] > 0.5
    choice[seg[pick]] = col[pick]
    t, peak = policy_totals(costs, choice)
    return t, peak <= budget, "optimal" if res.status == 0 else res.message


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
    print("ratios: baseline time / plan time; states: the largest set plan held")
    print(
        f"{'card':<24} {'n':>5} {'budget':>6} {'plan s':>7} {'cpu s':>6} {'peak MB':>7} "
        f"{'method':>6} {'states':>7}  baselines"
    )
    worst: dict[str, tuple[float, float]] = {}
    families = [
        ("shaped", shaped, (0.3, 0.7)),
        ("independent", independent, (0.3, 0.7)),
        ("correlated", correlated, (0.3, 0.5, 0.7)),
        ("proportional", proportional, (0.3, 0.5, 0.7)),
    ]
    for family, make, fracs in families:
        for n in (16, 256, 1024):
            card = make(n, 0)
            for frac in fracs:
                budget = budget_at(card, frac)
                secs, cpu, peak, result = measured(repeats, card, budget)
                assert result.feasible and result.optimal, (family, n, frac)
                notes = []
                hard = family in ("correlated", "proportional")
                if n == 16 or (n == 256 and family == "independent" and not args.quick):
                    base, plain = timed(1, plan, card, budget, prune=False)
                    assert plain.predicted_time == result.predicted_time
                    notes.append(f"plain DP {base:.3f} s ({base / secs:.1f}x)")
                if (n == 1024 and not hard) or (n == 256 and family == "correlated"):
                    base, best = timed(1, frontier_dp_only, card, budget)
                    same = abs(best - result.predicted_time) <= 1e-9 * abs(best)
                    notes.append(
                        f"frontier DP {base:.3f} s ({base / secs:.1f}x), "
                        f"{'same optimum' if same else f'optimum {best!r}'}"
                    )
                if n == 1024:
                    key = f"{family} {frac:.0%}"
                    worst[key] = (secs, peak)
                    gsecs, gtime = timed(1, greedy, card, budget)
                    notes.append(
                        f"greedy {gsecs:.3f} s, its policy "
                        f"{100 * (gtime / result.predicted_time - 1):.4f}% slower"
                    )
                    if hard and not args.quick:
                        msecs, (mtime, fits, status) = timed(1, milp, card, budget)
                        verdict = "fits" if fits else "OVER BUDGET in exact bytes"
                        notes.append(
                            f"MILP {msecs:.2f} s ({msecs / secs:.1f}x), {status}, {verdict}, "
                            f"time {mtime - result.predicted_time:+.3g} vs plan"
                        )
                print(
                    f"{family:<24} {n:>5} {frac:>6.0%} {secs:>7.3f} {cpu:>6.2f} {peak:>7.1f} "
                    f"{result.method:>6} {result.frontier_size:>7}  " + "; ".join(notes),
                    flush=True,
                )
    big = independent(10_000, 0)
    for frac in (0.3, 0.7):
        budget = budget_at(big, frac)
        secs, cpu, peak, result = measured(repeats, big, budget)
        assert result.feasible and result.optimal
        worst[f"independent-10000 {frac:.0%}"] = (secs, peak)
        print(
            f"{'independent':<24} {10_000:>5} {frac:>6.0%} {secs:>7.3f} {cpu:>6.2f} "
            f"{peak:>7.1f} {result.method:>6} {result.frontier_size:>7}",
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
    at_1024 = {k: v for k, v in worst.items() if "10000" not in k}
    slow = max(at_1024.items(), key=lambda kv: kv[1][0])
    big_mem = max(at_1024.items(), key=lambda kv: kv[1][1])
    ok = slow[1][0] <= 2.0 and big_mem[1][1] <= 300.0
    print(
        f"target: every family exact at 1,024 segments in <= 2 s and <= 300 MB: "
        f"{'met' if ok else 'NOT met'} (slowest {slow[0]} {slow[1][0]:.3f} s, largest "
        f"{big_mem[0]} {big_mem[1][1]:.1f} MB)"
    )
    t10k = max(v[0] for k, v in worst.items() if "10000" in k)
    print(
        f"target: 10,000-segment independent card exact in <= 5 s: "
        f"{'met' if t10k <= 5.0 else 'NOT met'} (slowest {t10k:.3f} s)"
    )


if __name__ == "__main__":
    main()
