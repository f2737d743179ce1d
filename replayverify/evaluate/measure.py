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
from typing import Any

import numpy as np

from replayverify.evaluate.workloads import Cell, make_step, result_bytes
from replayverify.gpu import calibrate as cal
from replayverify.gpu import segments as sg
from replayverify.gpu.backend import is_cupy_module

OPTIONS = sg.OPTIONS


def execute(dev: Any, step: Any, policy: tuple[str, ...], share: bool, **kw: Any) -> Any:
    """One step of ``step`` under ``policy`` on ``dev``."""
    return sg.run_policy(step, policy, copy=dev.copy, share_anchors=share, **kw)


class Recorder:
    """A phase callback for :func:`segments.run_policy`: per segment, seconds per phase, and
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
    dev: Any, step: Any, option: str, share: bool, steps: int
) -> tuple[int, list[dict[str, Any]]]:
    """(starting allocation, per-segment costs) of the uniform policy ``option`` on ``step``,
    run ``steps`` times (after one warmup) with per-segment instrumentation.

    Per segment: ``retained`` is the bytes the segment kept from forward to backward (exact,
    from the arrays kept); ``temporary`` the largest excess of a forward or backward
    interval's peak over what was live at its start by the model (persistent bytes plus the
    retained bytes of segments up to it, and journals still held); ``time`` the segment's
    forward and backward seconds (mean over steps) plus its share of the final redo (by
    journal bytes), scaled so that the segments add up to the median time of plain
    (uninstrumented) steps of the same policy (at least five, after a warmup). The
    ``state_*`` parts are the anchor or journal bytes, the transaction's copy of the
    visible state, and the preserve/recover seconds (scaled alike).
    """
    xp = dev.xp
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
    # that their sum is the median of plain, uninstrumented steps of the same policy
    plain = float(np.median(time_policy(dev, step, policy, share, 1, max(5, steps))["times_s"]))
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


def calibrate_card(dev: Any, cell: Cell, steps: int) -> dict[str, Any]:
    """A profile card for ``cell``: every uniform policy (eager, whole, region; whole with
    one anchor per segment, as a planner's whole option executes) calibrated by
    :func:`policy_costs`. Its persistent bytes are the least starting allocation seen."""
    step = make_step(dev.xp, cell)
    options: list[dict[str, Any]] = [{} for _ in range(step.segments)]
    persistent = None
    for option in OPTIONS:
        base, costs = policy_costs(dev, step, option, False, steps)
        persistent = base if persistent is None else min(persistent, base)
        for k, cost in enumerate(costs):
            options[k][option] = cost
    return _card(f"evaluate-{cell.name}", persistent or 0, options)


def calibrate_shared_whole(dev: Any, cell: Cell, steps: int) -> dict[str, Any]:
    """The card of the uniform whole method with shared anchors (the paper's whole-snapshot
    method of Table 8: one snapshot before segment 0, backward restores it once and replays
    the segments in order). Each segment carries its share of that one run (the first one
    the anchor), so the card prices that uniform policy only, not any mix: a planner's
    whole option is priced by :func:`calibrate_card`."""
    step = make_step(dev.xp, cell)
    base, costs = policy_costs(dev, step, "whole", True, steps)
    return _card(f"evaluate-{cell.name}-shared-whole", base, [{"whole": c} for c in costs])


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


def time_policy(
    dev: Any, step: Any, policy: tuple[str, ...], share: bool, warmups: int, steps: int
) -> dict[str, Any]:
    """Mean synchronized step time and peak bytes above the step's starting allocation."""
    step.reset()
    for _ in range(warmups):
        execute(dev, step, policy, share)
    times, peaks, starts = [], [], []
    for _ in range(steps):
        dev.sync()
        dev.reset_peak()
        base = dev.current()
        a = dev.mark()
        execute(dev, step, policy, share)
        b = dev.mark()
        times.append(dev.elapsed(a, b))
        peaks.append(dev.peak() - base)
        starts.append(base)
    return {
        "time_s": float(np.mean(times)),
        "times_s": times,
        "peak_above_start": max(peaks),
        "start_bytes": min(starts),
    }


def _cell(doc: dict[str, Any]) -> Cell:
    """The cell ``dataclasses.asdict`` sent (JSON turned its budgets into a list)."""
    return Cell(**{**doc, "budgets": tuple(doc["budgets"])})


def serve(request: dict[str, Any]) -> dict[str, Any]:
    """Answer one request: ``{"mode": "calibrate", ...}`` or ``{"mode": "measure", ...}``."""
    dev = cal.device(request["backend"])
    out: dict[str, Any] = {"device": dev.describe(), "cells": {}}
    with dev.tracking():
        for cdoc in request["cells"]:
            cell = _cell(cdoc["cell"])
            if request["mode"] == "calibrate":
                card = {"card": calibrate_card(dev, cell, request["steps"])}
                dev.release()
                if cdoc["shared_whole"]:
                    card["shared_whole"] = calibrate_shared_whole(dev, cell, request["steps"])
                    dev.release()
                out["cells"][cell.name] = card
                continue
            runs = cdoc["runs"]  # [{"key", "policy", "share"}], eager's first
            order = list(range(len(runs)))
            shift = request["process"] % len(order)
            order = order[shift:] + order[:shift]  # methods take turns at going first
            reference: dict[str, bytes] = {}
            checks = {}
            for i in range(len(runs)):  # eager first: the reference
                run = runs[i]
                ok, why = semantic_check(dev, cell, tuple(run["policy"]), run["share"], reference)
                checks[run["key"]] = (ok, why)
            del reference  # eager's results: not held while timing
            dev.release()
            step = make_step(dev.xp, cell)
            rows = {}
            for i in order:
                run = runs[i]
                ok, why = checks[run["key"]]
                if not ok:
                    rows[run["key"]] = {"semantic": False, "detail": why}
                    continue
                row = time_policy(
                    dev,
                    step,
                    tuple(run["policy"]),
                    run["share"],
                    request["warmups"],
                    request["steps"],
                )
                row.update(semantic=True, detail="", position=order.index(i))
                rows[run["key"]] = row
            del step
            dev.release()
            out["cells"][cell.name] = rows
    return out


def main() -> None:
    request = json.loads(sys.stdin.read())
    json.dump(serve(request), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
