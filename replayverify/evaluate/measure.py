"""What one evaluation process does: calibrate a workload into a profile card, check that a
policy computes what eager computes, and time a policy's steps.

Run as ``python -m replayverify.evaluate.measure`` with a JSON request on stdin; the answer is
one JSON object on stdout. The parent (:mod:`replayverify.evaluate.run`) starts a fresh
process for the calibration and for each measured process, so no process inherits another's
allocator or cache state.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from replayverify.evaluate import calibrate as cal
from replayverify.evaluate import segments as sg
from replayverify.evaluate.workloads import Cell, make_step, result_bytes
from replayverify.programs.arrays import is_cupy_module

OPTIONS = sg.OPTIONS


@dataclass(frozen=True, slots=True)
class Timing:
    """How a policy's plain steps are timed: ``warmups`` unmeasured steps, then ``steps``
    measured ones (more while they add up to less than ``MIN_TIMED_S``). The calibration
    times its cards and its fit exactly as the measuring processes time their rows."""

    warmups: int = 2
    steps: int = 5


def execute(dev: Any, step: Any, policy: tuple[str, ...], share: bool, **kw: Any) -> Any:
    """One step of ``step`` under ``policy`` on ``dev``."""
    return sg.run_segmented(step, policy, copy=dev.copy, share_anchors=share, **kw)


class Recorder:
    """A phase callback for :func:`segments.run_segmented`: per segment, seconds per phase, and
    the peak allocated bytes of its forward and of its backward interval."""

    def __init__(self, dev: Any, n: int):
        self.dev, self.n = dev, n
        self.seconds = [dict.fromkeys(("preserve", "recover", "compute"), 0.0) for _ in range(n)]
        self.redo = 0.0
        self.peak = {"forward": [0] * n, "backward": [0] * n}
        self.where: tuple[str, int] | None = None
        self.phase = "compute"
        self.dev.sync()
        self.t = dev.mark()
        dev.reset_peak()

    def __call__(self, name: str) -> None:
        now = self.dev.mark()
        spent = self.dev.elapsed(self.t, now)
        if self.where is not None:
            kind, k = self.where
            if kind == "redo":
                self.redo += spent
            else:
                self.seconds[k][self.phase] += spent
        self.t = now
        if name in ("preserve", "recover", "compute"):
            self.phase = name
            return
        if self.where is not None and self.where[0] != "redo":
            kind, k = self.where
            self.peak[kind][k] = max(self.peak[kind][k], self.dev.peak())
        self.dev.reset_peak()
        self.phase = "compute"
        if name == "end":
            self.where = None
        elif name == "redo":
            self.where = ("redo", 0)
        else:
            kind, k = name.split(":")
            self.where = (kind, int(k))


def policy_costs(
    dev: Any, cell: Cell, option: str, share: bool, steps: int, timing: Timing
) -> tuple[int, list[dict[str, Any]]]:
    """(starting allocation, per-segment costs) of the uniform policy ``option`` on ``step``,
    run ``steps`` times (after one warmup) with per-segment instrumentation.

    Per segment: ``retained`` is the bytes the segment kept from forward to backward (exact,
    from the arrays kept); ``temporary`` the largest excess of a forward or backward
    interval's peak over what was live at its start by the model (persistent bytes plus the
    retained bytes of segments up to it, and journals still held); ``time`` the segment's
    forward and backward seconds (mean over steps) plus its share of the final redo (by
    journal bytes), scaled so that the segments add up to the mean time of plain
    (uninstrumented) steps of the same policy, timed as the measuring processes time them
    (``timing``: the same warmups and steps, :func:`time_policy`), since the mean step is
    what the report compares. The ``state_*`` parts are the anchor or journal bytes, the
    transaction's copy of the visible state, and the preserve/recover seconds (scaled
    alike).

    The instrumented steps run with allocation tracking (from before the step is built, so
    that the starting allocation counts it), the plain ones without: ``tracemalloc`` slows
    every allocation, and more so for options that make many small ones.
    """
    xp = dev.xp
    with dev.tracking():
        step = make_step(xp, cell)
        n = step.segments
        policy = (option,) * n
        step.reset()
        execute(dev, step, policy, share)
        runs = []
        for _ in range(steps):
            dev.sync()
            base = dev.current()
            tally = sg.Tally()
            rec = Recorder(dev, n)
            execute(dev, step, policy, share, phase=rec, tally=tally)
            rec("end")
            runs.append((base, tally, rec))
    # instrumentation (a mark and an allocation reading at every phase) costs more for
    # options with more phases; it only apportions: each segment's seconds are scaled so
    # that their sum is the mean of plain, uninstrumented steps of the same policy
    plain = time_policy(dev, step, policy, share, timing.warmups, timing.steps)["time_s"]
    tally = runs[0][1]
    r = tally.retained
    journal = [tally.journal[k] for k in range(n)]
    total_journal = sum(journal) or 1
    instrumented = statistics.fmean(
        sum(sum(rec.seconds[k].values()) for k in range(n)) + rec.redo for _, _, rec in runs
    )
    scale = plain / instrumented if instrumented > 0 else 1.0
    out = []
    for k in range(n):
        before = sum(r[: k + 1])
        later_journals = sum(journal[k + 1 :])
        excess = 0
        for b, _, rec in runs:
            excess = max(
                excess,
                rec.peak["forward"][k] - b - before,
                rec.peak["backward"][k] - b - before - later_journals,
            )
        secs = [
            sum(rec.seconds[k].values()) + rec.redo * journal[k] / total_journal
            for _, _, rec in runs
        ]
        state_secs = [
            rec.seconds[k]["preserve"]
            + rec.seconds[k]["recover"]
            + rec.redo * journal[k] / total_journal
            for _, _, rec in runs
        ]
        q = max(0, int(excess))
        if option == "whole" and tally.transaction[k]:
            state_tmp = min(q, int(step.state.nbytes))
        elif option == "region":
            state_tmp = min(q, journal[k]) if not is_cupy_module(xp) else 0
        else:
            state_tmp = 0
        cost = {"retained": int(r[k]), "temporary": q, "time": scale * statistics.fmean(secs)}
        if option != "eager":
            cost.update(
                state_retained=int(tally.state_retained[k]),
                state_temporary=state_tmp,
                state_time=min(scale * statistics.fmean(state_secs), cost["time"]),
            )
        out.append(cost)
    return min(b for b, _, _ in runs), out


def _card(name: str, persistent: int, options: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "format": "replayverify.profile",
        "version": 1,
        "name": name,
        "persistent_bytes": int(persistent),
        "segments": [{"name": f"s{k:02d}", "options": o} for k, o in enumerate(options)],
    }


def calibrate_card(
    dev: Any, cell: Cell, steps: int, timing: Timing = Timing()
) -> dict[str, Any]:
    """A profile card for ``cell``: every uniform policy (eager, whole, region; whole with
    one anchor per segment, as a planner's whole option executes) calibrated by
    :func:`policy_costs`. Its persistent bytes are the least starting allocation seen."""
    options: list[dict[str, Any]] = [{} for _ in range(cell.segments)]
    persistent = None
    for option in OPTIONS:
        base, costs = policy_costs(dev, cell, option, False, steps, timing)
        dev.release()
        persistent = base if persistent is None else min(persistent, base)
        for k, cost in enumerate(costs):
            options[k][option] = cost
    return _card(f"evaluate-{cell.name}", persistent or 0, options)


def calibrate_shared_whole(
    dev: Any, cell: Cell, steps: int, timing: Timing = Timing()
) -> dict[str, Any]:
    """The card of the uniform whole method with shared anchors (the paper's whole-snapshot
    method of Table 8: one snapshot before segment 0, backward restores it once and replays
    the segments in order). Each segment carries its share of that one run (the first one
    the anchor), so the card prices that uniform policy only, not any mix: a planner's
    whole option is priced by :func:`calibrate_card`."""
    base, costs = policy_costs(dev, cell, "whole", True, steps, timing)
    return _card(f"evaluate-{cell.name}-shared-whole", base, [{"whole": c} for c in costs])


# --- the time model: fitted to plain steps of uniform, random and planned policies -----------

FIT_RANDOM = 2  # random mixed policies per cell
FIT_ROUNDS = 3  # re-plan on the fitted card and time new picks at most this many times
FIT_RIDGE = 0.3  # pull of each scale towards 1 (the uncorrected card)
# the per-segment stage's pull, loosened step by step while a planner's pick was measured
# slower than another timed policy it could have picked (the model orders them wrongly)
FIT_RIDGES = (FIT_RIDGE, 0.1, 0.03, 0.01, 0.003)
FIT_SEED = 20260601
FIT_BLOCKS = 4  # interleaved blocks per policy and round (time_interleaved)
# two timed policies are tied when their means differ by at most TIE_Z standard errors of
# the difference (from their blocks' spread): the calibration cannot order them
TIE_Z = 2.0
TIE_MARGIN = 0.01  # a tied, less simple policy's fit target: the preferred one's + 1 %


def _design(card: dict[str, Any], policy: tuple[str, ...], per_segment: bool) -> np.ndarray:
    """The card's seconds that ``policy`` spends in each parameter of the time model: per
    option (eager, whole, region), or per segment and option."""
    n = len(card["segments"])
    out = np.zeros(len(OPTIONS) * (n if per_segment else 1))
    for k, (seg, option) in enumerate(zip(card["segments"], policy)):
        i = OPTIONS.index(option)
        out[i + (len(OPTIONS) * k if per_segment else 0)] += seg["options"][option]["time"]
    return out


def fit_scales(
    card: dict[str, Any],
    measured: dict[tuple[str, ...], float],
    per_segment: bool = False,
    ridge: float = FIT_RIDGE,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Scales of the card's times (one per option, or per segment and option) that make its
    sums match the measured plain step times, by least squares on relative error with a
    ridge towards 1, kept in [0.5, 2]; with the fit's errors (predicted / measured - 1 over
    the measured policies: before, after, and leaving each policy out)."""
    policies = list(measured)
    A = np.array([_design(card, p, per_segment) / measured[p] for p in policies])
    used = A.any(axis=0)

    def solve(rows: np.ndarray) -> np.ndarray:
        k = int(used.sum())
        lhs = np.vstack([rows[:, used], ridge * np.eye(k)])
        rhs = np.concatenate([np.ones(len(rows)), ridge * np.ones(k)])
        scale = np.ones(A.shape[1])
        scale[used] = np.clip(np.linalg.lstsq(lhs, rhs, rcond=None)[0], 0.5, 2.0)
        return scale

    scale = solve(A)
    before = A.sum(axis=1) - 1
    after = A @ scale - 1
    loo = np.array(
        [A[i] @ solve(np.delete(A, i, axis=0)) - 1 for i in range(len(policies))]
        if len(policies) > 1
        else [np.nan]
    )

    def summary(err: np.ndarray) -> dict[str, float]:
        return {"rms": float(np.sqrt(np.mean(err**2))), "max": float(np.max(np.abs(err)))}

    report = {
        "policies": len(policies),
        "ridge": ridge,
        "error_before": summary(before),
        "error_after": summary(after),
        "error_leave_one_out": summary(loo),
    }
    if not per_segment:
        report["terms"] = list(OPTIONS)
        report["scales"] = [float(x) for x in scale]
    return scale, report


def scaled_card(card: dict[str, Any], scale: np.ndarray) -> dict[str, Any]:
    """``card`` with its times multiplied by fitted scales (one per option, or per segment
    and option)."""
    per_segment = scale.size > len(OPTIONS)
    out = json.loads(json.dumps(card))
    for k, seg in enumerate(out["segments"]):
        for option, cost in seg["options"].items():
            x = float(scale[OPTIONS.index(option) + (len(OPTIONS) * k if per_segment else 0)])
            cost["time"] *= x
            if "state_time" in cost:
                cost["state_time"] = min(cost["state_time"] * x, cost["time"])
    return out


def _planned(cell: Cell, card: dict[str, Any]) -> set[tuple[str, ...]]:
    from replayverify.evaluate.run import plan_methods

    return {tuple(e["policy"]) for e in plan_methods(cell, card) if e["policy"] is not None}


def simplicity(policy: tuple[str, ...]) -> tuple[int, int]:
    """How much preservation machinery ``policy`` runs, the less the simpler: its number of
    distinct options, then its number of state-preserving (non-eager) segments."""
    return len(set(policy)), sum(o != "eager" for o in policy)


def tied(
    a: tuple[str, ...], b: tuple[str, ...], measured: dict, spread: dict | None
) -> bool:
    """Whether the calibration cannot order ``a`` and ``b``: their measured means differ by
    at most ``TIE_Z`` standard errors of the difference (0 without a spread: equal only)."""
    s = spread or {}
    return abs(measured[a] - measured[b]) <= TIE_Z * float(np.hypot(s.get(a, 0), s.get(b, 0)))


def preferred(
    rivals: list[tuple[str, ...]], measured: dict, spread: dict | None
) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """(the policy a planner should pick among the timed ``rivals``, the ones tied with the
    fastest). Among the policies the calibration cannot tell from the fastest, the simplest
    (:func:`simplicity`, then the faster): the measuring processes then compare it with
    the simpler methods' plans, which are the same or close, so a tie the calibration
    could not break is not decided for them by its noise; with no tie, the fastest."""
    fastest = min(rivals, key=measured.__getitem__)
    ties = [q for q in rivals if tied(q, fastest, measured, spread)]
    return min(ties, key=lambda q: (simplicity(q), measured[q])), ties


def _rivals(
    parsed: Any, measured: dict, options: set[str], budget: int
) -> list[tuple[str, ...]]:
    from replayverify.planner import policy_cost

    return [q for q in measured if set(q) <= options and policy_cost(parsed, q)[1] <= budget]


PLANNER_OPTIONS = {"joint": set(OPTIONS), "eager/whole": {"eager", "whole"}}


def picks_off(
    cell: Cell,
    card: dict[str, Any],
    measured: dict[tuple[str, ...], float],
    spread: dict[tuple[str, ...], float] | None = None,
) -> list[dict[str, Any]]:
    """The state-aware planners' picks (joint, eager/whole; every budget of ``cell``) that
    were timed and are not the policy :func:`preferred` names among the timed policies of
    their option set that fit the same budget on ``card``: measured slower than the
    fastest beyond the calibration's spread (``spread``: standard errors), or tied with it
    and less simple than the simplest tied one. Where the card orders them wrongly."""
    from replayverify.evaluate.run import plan_methods
    from replayverify.planner import parse_card

    parsed = parse_card(card)
    out = []
    for e in plan_methods(cell, card):
        pick = None if e["policy"] is None else tuple(e["policy"])
        if e["method"] not in PLANNER_OPTIONS or pick not in measured:
            continue
        rivals = _rivals(parsed, measured, PLANNER_OPTIONS[e["method"]], e["budget"])
        best, ties = preferred(rivals, measured, spread)
        if pick not in ties or simplicity(pick) > simplicity(best):
            out.append(
                {
                    "method": e["method"],
                    "budget": e["budget"],
                    "pick": ",".join(pick),
                    "pick_s": measured[pick],
                    "best": ",".join(best),
                    "best_s": measured[best],
                    "tied": pick in ties,
                }
            )
    return out


def fit_targets(
    cell: Cell,
    card: dict[str, Any],
    measured: dict[tuple[str, ...], float],
    spread: dict[tuple[str, ...], float],
) -> tuple[dict[tuple[str, ...], float], list[dict[str, Any]]]:
    """The times the fit aims at: the measured ones, except that where a state-aware
    planner's option set at one of ``cell``'s budgets has timed policies tied with the
    fastest, each tied policy less simple than the :func:`preferred` one and measured
    faster than it aims at the preferred one's time + ``TIE_MARGIN`` (a move within the
    tie, by its definition, plus 1 %), so that the fitted card orders the tie as the rule
    does. With the ties found (per option set and budget)."""
    from replayverify.planner import parse_card

    parsed = parse_card(card)
    target = dict(measured)
    ties_found = []
    for budget in cell.budgets:
        for method, options in PLANNER_OPTIONS.items():
            rivals = _rivals(parsed, measured, options, budget)
            if not rivals:
                continue
            best, ties = preferred(rivals, measured, spread)
            raised = [
                q
                for q in ties
                if simplicity(q) > simplicity(best) and measured[q] < measured[best]
            ]
            for q in raised:
                target[q] = max(target[q], measured[best] * (1 + TIE_MARGIN))
            if raised:
                ties_found.append(
                    {
                        "method": method,
                        "budget": budget,
                        "preferred": ",".join(best),
                        "preferred_s": measured[best],
                        "raised": [",".join(q) for q in raised],
                    }
                )
    return target, ties_found


def fit_card(
    dev: Any, cell: Cell, card: dict[str, Any], timing: Timing = Timing()
) -> tuple[dict[str, Any], dict]:
    """Fit the card's time model to plain steps measured here, and re-plan on it until the
    planners' picks are all measured (at most ``FIT_ROUNDS`` times).

    Measured: the uniform policies, ``FIT_RANDOM`` random mixes and every policy a planner
    picks at the cell's budgets (state-agnostic, eager/whole, joint), each round's policies
    timed together in interleaved blocks (:func:`time_interleaved`), so that a change of
    the machine's speed falls on all of them alike and each time has a measured spread; a
    policy's time is its mean step, the statistic the report compares. The uniform
    policies are timed in every round and bring later rounds to the first one's speed. The
    fit aims at :func:`fit_targets` (ties broken towards the simpler policy) and is
    corrected until no pick is off (:func:`picks_off`). Returns the fitted card and the
    fit's record (scales, errors, every policy's measured, spread and predicted seconds,
    the ties, and the reference kernel's seconds while they were timed:
    :func:`speed_probe`).
    """
    step = make_step(dev.xp, cell)
    n = step.segments
    rng = np.random.default_rng([FIT_SEED, n])
    # the uniform policies are timed again, in every round: times taken minutes apart on a
    # shared CPU differ by more than a mix differs from the sum of its parts, so a later
    # round's times are brought to the first round's speed by the uniform policies' ratio
    uniform = [(o,) * n for o in OPTIONS]
    todo = {tuple(str(x) for x in rng.choice(OPTIONS, size=n)) for _ in range(FIT_RANDOM)}
    measured: dict[tuple[str, ...], float] = {}
    spread: dict[tuple[str, ...], float] = {}
    blocks: dict[tuple[str, ...], list[float]] = {}
    probes: list[float] = []
    shares: list[float] = []

    def time_round(policies: set[tuple[str, ...]]) -> None:
        rows = time_interleaved(dev, step, sorted(policies | set(uniform)), timing)
        probes.append(next(iter(rows.values()))["probe_s"])
        shares.extend(r["cpu_share"] for r in rows.values())
        now = {p: r["time_s"] for p, r in rows.items()}
        speed = 1.0
        if measured:
            speed = float(np.exp(np.mean([np.log(measured[u] / now[u]) for u in uniform])))
        for p, r in rows.items():
            if p not in measured:
                measured[p] = r["time_s"] * speed
                spread[p] = r["spread_s"] * speed
                blocks[p] = [t * speed for t in r["blocks_s"]]

    fitted, report, ties = card, None, []
    for _ in range(FIT_ROUNDS):
        todo -= set(measured)
        if not todo and measured:
            break
        time_round(todo)
        target, ties = fit_targets(cell, card, measured, spread)
        scale, report = fit_scales(card, target)
        per_option = scaled_card(card, scale)
        # then one scale per segment and option, on the residuals: a mix's segments do
        # not always cost what they cost among their own kind; pulled towards 1 less and
        # less while a planner's pick is off (the model is corrected until its choice is
        # the measured best, or the simplest of those the calibration cannot tell apart)
        for ridge in FIT_RIDGES:
            fine, report["per_segment"] = fit_scales(per_option, target, True, ridge)
            fitted = scaled_card(per_option, fine)
            report["picks_slower_than_measured"] = picks_off(cell, fitted, measured, spread)
            if not report["picks_slower_than_measured"]:
                break
        todo = _planned(cell, fitted)
    assert report is not None
    # the last fit's picks that no round timed are timed now, once, and not fitted again:
    # re-planning on each new fit can keep finding new, untimed permutations of a mix whose
    # segments the card prices alike (seen on large-sparse: eight rounds, a new pick in
    # each), and a pick the calibration never timed would be executed unchecked. They are
    # judged as the rounds' picks are (``picks_off_after_fit``: those measured slower than
    # a timed rival, or tied with a simpler one)
    after = todo - set(measured)
    if after:
        time_round(after)
    late = {",".join(p) for p in after}
    report["picks_timed_after_fit"] = sorted(late)
    report["picks_off_after_fit"] = (
        [o for o in picks_off(cell, fitted, measured, spread) if o["pick"] in late]
        if late
        else []
    )
    report["measured"] = [
        {
            "policy": ",".join(p),
            "measured_s": t,
            "spread_s": spread[p],
            "blocks_s": blocks[p],
            "target_s": target.get(p, t),
            "card_s": float(_design(card, p, False).sum()),
            "fitted_s": float(_design(fitted, p, False).sum()),
        }
        for p, t in measured.items()
    ]
    report["blocks"] = FIT_BLOCKS
    report["block_steps"] = block_steps(timing, FIT_BLOCKS)
    report["ties"] = ties
    report["tie_z"], report["tie_margin"] = TIE_Z, TIE_MARGIN
    report["probe_s"] = float(np.mean(probes))
    report["cpu_share"] = float(np.mean(shares))
    return fitted, report


def semantic_check(
    dev: Any, cell: Cell, policy: tuple[str, ...], share: bool, reference: dict[str, bytes]
) -> tuple[bool, str]:
    """Run one step from the initial state in float64 and in float32 and compare the final
    state, the gradients and the step's result with ``reference`` (eager's), bit for bit."""
    xp = dev.xp
    for dtype in ("float64", "float32"):
        step = make_step(xp, cell, dtype)
        got = result_bytes(xp, step, execute(dev, step, policy, share))
        if dtype not in reference:
            reference[dtype] = got
        elif got != reference[dtype]:
            return False, f"{dtype}: final state or gradients differ from eager"
        del step
        dev.release()
    return True, ""


MIN_TIMED_S = 0.1  # short steps are repeated until they add up to this
MAX_STEPS = 50


PROBE_ELEMENTS = 1 << 19  # 2 MiB of float32: a large activation at the default scale
PROBE_REPEATS = 3


def speed_probe(dev: Any) -> float:
    """Seconds of a fixed reference kernel (``tanh``, a product and a sum over 2 MiB of
    float32, four times: the elementwise work the steps do), least of ``PROBE_REPEATS``:
    the machine's speed at this moment. Timed around every policy's steps in the
    calibration and in the measuring processes, it tells a change of the machine's speed
    between them from a wrong card."""
    xp = dev.xp
    x = xp.linspace(-2.0, 2.0, PROBE_ELEMENTS, dtype=xp.float32)
    y, z = xp.empty_like(x), xp.empty_like(x)
    best = float("inf")
    for _ in range(PROBE_REPEATS):
        dev.sync()
        a = dev.mark()
        for _ in range(4):
            xp.tanh(x, out=y)
            xp.multiply(x, y, out=z)
            xp.add(z, y, out=y)
        dev.sync()
        best = min(best, dev.elapsed(a, dev.mark()))
    del x, y, z
    return best


def time_policy(
    dev: Any,
    step: Any,
    policy: tuple[str, ...],
    share: bool,
    warmups: int,
    steps: int,
    min_timed_s: float = MIN_TIMED_S,
    probe: bool = True,
) -> dict[str, Any]:
    """Mean and least synchronized step time over ``steps`` steps, or more while they add up
    to less than ``min_timed_s`` (at most ``MAX_STEPS``): a step of a few milliseconds is
    at the mercy of the scheduler on a shared CPU. Call without allocation tracking (it
    slows the steps). ``probe_s`` (with ``probe``): :func:`speed_probe` before the warmups
    and after the steps, their mean; ``cpu_share``: the process's CPU time over the steps'
    wall time (below 1 when other jobs took the CPU from it; on CuPy the host's share
    only)."""
    before = speed_probe(dev) if probe else 0.0
    step.reset()
    for _ in range(warmups):
        execute(dev, step, policy, share)
    times: list[float] = []
    cpu = 0.0
    while len(times) < steps or (sum(times) < min_timed_s and len(times) < MAX_STEPS):
        dev.sync()
        c = time.process_time()
        a = dev.mark()
        execute(dev, step, policy, share)
        b = dev.mark()
        cpu += time.process_time() - c
        times.append(dev.elapsed(a, b))
    out = {
        "time_s": float(np.mean(times)),
        "time_min_s": float(min(times)),
        "times_s": times,
        "cpu_share": cpu / sum(times),
    }
    if probe:
        out["probe_s"] = (before + speed_probe(dev)) / 2
    return out


def time_interleaved(
    dev: Any,
    step: Any,
    policies: list[tuple[str, ...]],
    timing: Timing,
    blocks: int = FIT_BLOCKS,
) -> dict[tuple[str, ...], dict[str, Any]]:
    """Every policy of ``policies`` timed in ``blocks`` short blocks, round robin (the
    order rotated by one each block): a change of the machine's speed while they are timed
    falls on all of them alike instead of on whichever was being timed. A block is
    :func:`time_policy` with one warmup (none if ``timing`` has none) and
    ``block_steps(timing, blocks)`` steps (more while they add up to less than
    ``MIN_TIMED_S / blocks``).

    Per policy: ``time_s``, the mean over all its blocks' steps (the measuring processes
    report a row's mean step and the report compares means, so a median here would
    predict a statistic nobody measures); ``blocks_s``, each block's mean step;
    ``spread_s``, the standard error of that mean from the blocks (their standard
    deviation over the square root of their number; 0 with one block); ``cpu_share``;
    ``probe_s``, :func:`speed_probe` before and after all the blocks, their mean."""
    warmups, steps = min(1, timing.warmups), block_steps(timing, blocks)
    before = speed_probe(dev)
    times: dict[tuple[str, ...], list[float]] = {p: [] for p in policies}
    means: dict[tuple[str, ...], list[float]] = {p: [] for p in policies}
    cpu = dict.fromkeys(policies, 0.0)
    for b in range(blocks):
        shift = b % len(policies) if policies else 0
        for p in policies[shift:] + policies[:shift]:
            row = time_policy(
                dev, step, p, False, warmups, steps, MIN_TIMED_S / blocks, probe=False
            )
            times[p] += row["times_s"]
            means[p].append(row["time_s"])
            cpu[p] += row["cpu_share"] * sum(row["times_s"])
    probe = (before + speed_probe(dev)) / 2
    return {
        p: {
            "time_s": float(np.mean(times[p])),
            "blocks_s": means[p],
            "spread_s": (
                float(np.std(means[p], ddof=1) / np.sqrt(len(means[p])))
                if len(means[p]) > 1
                else 0.0
            ),
            "cpu_share": cpu[p] / sum(times[p]),
            "probe_s": probe,
        }
        for p in policies
    }


def block_steps(timing: Timing, blocks: int) -> int:
    """Measured steps per block of :func:`time_interleaved`: the measuring processes' steps
    spread across the blocks, at least two per block (a block's mean of one step is a
    single draw of the scheduler)."""
    return max(2, -(-timing.steps // blocks))


def peak_policy(
    dev: Any, step: Any, policy: tuple[str, ...], share: bool, warmups: int, steps: int = 1
) -> dict[str, Any]:
    """Peak bytes above the step's starting allocation (largest over ``steps`` steps after
    ``warmups``) and that starting allocation (call with allocation tracking)."""
    step.reset()
    for _ in range(warmups):
        execute(dev, step, policy, share)
    peaks, starts = [], []
    for _ in range(steps):
        dev.sync()
        dev.reset_peak()
        base = dev.current()
        execute(dev, step, policy, share)
        peaks.append(dev.peak() - base)
        starts.append(base)
    return {"peak_above_start": max(peaks), "start_bytes": min(starts)}


def _cell(doc: dict[str, Any]) -> Cell:
    """The cell ``dataclasses.asdict`` sent (JSON turned its budgets into a list)."""
    return Cell(**{**doc, "budgets": tuple(doc["budgets"])})


def serve(request: dict[str, Any]) -> dict[str, Any]:
    """Answer one request: ``{"mode": "calibrate", ...}`` or ``{"mode": "measure", ...}``."""
    dev = cal.device(request["backend"])
    out: dict[str, Any] = {"device": dev.describe(), "cells": {}}
    for cdoc in request["cells"]:
        cell = _cell(cdoc["cell"])
        if request["mode"] == "calibrate":
            timing = Timing(**request["timing"])
            raw = calibrate_card(dev, cell, request["steps"], timing)
            fitted, fit = fit_card(dev, cell, raw, timing)
            dev.release()
            card = {"card": fitted, "unfitted": raw, "fit": fit}
            if cdoc["shared_whole"]:
                card["shared_whole"] = calibrate_shared_whole(
                    dev, cell, request["steps"], timing
                )
                dev.release()
            out["cells"][cell.name] = card
        else:
            out["cells"][cell.name] = measure_cell(dev, cell, cdoc["runs"], request)
    return out


def measure_cell(
    dev: Any, cell: Cell, runs: list[dict[str, Any]], request: dict[str, Any]
) -> dict[str, Any]:
    """Every run's semantic check, then its peak (one step, with allocation tracking from
    before the step is built; the semantic checks warmed the code paths), then its time
    (without tracking). ``runs``: ``{"key", "policy", "share"}``, eager's first; the order
    of the timed runs rotates with the process."""
    order = list(range(len(runs)))
    shift = request["process"] % len(order)
    order = order[shift:] + order[:shift]  # methods take turns at going first
    rows: dict[str, dict[str, Any]] = {}
    with dev.tracking():
        reference: dict[str, bytes] = {}
        for run in runs:  # eager first: the reference
            ok, why = semantic_check(dev, cell, tuple(run["policy"]), run["share"], reference)
            if not ok:
                rows[run["key"]] = {"semantic": False, "detail": why}
        del reference  # eager's results: not held while measuring
        dev.release()
        step = make_step(dev.xp, cell)
        for i in order:
            run = runs[i]
            if run["key"] not in rows:
                policy = tuple(run["policy"])
                rows[run["key"]] = peak_policy(dev, step, policy, run["share"], 0)
    for i in order:
        run = runs[i]
        if rows[run["key"]].get("semantic") is False:
            continue
        row = time_policy(
            dev, step, tuple(run["policy"]), run["share"], request["warmups"], request["steps"]
        )
        rows[run["key"]].update(row, semantic=True, detail="", position=order.index(i))
    del step
    dev.release()
    return rows


def main() -> None:
    request = json.loads(sys.stdin.read())
    json.dump(serve(request), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
