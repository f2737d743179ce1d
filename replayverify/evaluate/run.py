"""The evaluation study: calibrate -> card -> plan -> execute in fresh processes -> report."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from replayverify.evaluate.calibrate import array_module
from replayverify.evaluate.report import markdown, plot
from replayverify.evaluate.stats import paired_ratio
from replayverify.evaluate.workloads import ACTIVATION, METHODS, Cell, paper_cells
from replayverify.planner import parse_card, plan, policy_cost
from replayverify.runs import fingerprint
from replayverify.untrusted import dumps

DEFAULT_SCALE = 512
SOURCES = ("evaluate", "gpu/journal.py", "planner")


class EvaluateError(Exception):
    """A measuring process failed; the message says which and why."""


def source_sha256() -> str:
    """sha256 over the source files that define the study (:mod:`replayverify.runs.fingerprint`)."""
    return fingerprint.source_sha256(SOURCES)


# glibc's allocator keeps what a process frees (no trimming, a fixed mmap threshold of 32
# MiB, its maximum), as CuPy's pool and PyTorch's caching allocator do: otherwise whether a
# step's arrays come from pages the allocator kept or from fresh pages the kernel must
# fault in and zero depends on the allocator's history, and a step's time with it (a factor
# up to five for eager steps that keep 128 MiB). Other C libraries ignore these variables.
ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(4 << 30)}


def _spawn(request: dict[str, Any]) -> dict[str, Any]:
    """Run one request in a fresh Python process (``python -m replayverify.evaluate.measure``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "replayverify.evaluate.measure"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env={**os.environ, **ALLOCATOR_ENV},
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EvaluateError(f"a {request['mode']} process failed: {tail}")
    return json.loads(proc.stdout)


def _uniform(cell: Cell, option: str) -> tuple[str, ...]:
    return (option,) * cell.segments


def plan_methods(
    cell: Cell, card_doc: dict[str, Any], shared_doc: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Every (budget, method) of a cell: the policy to execute (or why none), and what the
    card predicts for it. Uniform methods are the same at every budget. The whole method
    of a calibration workload shares one anchor (the paper's whole snapshot) and is
    predicted by its own card, ``shared_doc``."""
    card = parse_card(card_doc)
    shared = None if shared_doc is None else parse_card(shared_doc)
    out = []
    for budget in cell.budgets:
        for method in METHODS:
            entry: dict[str, Any] = {"cell": cell.name, "budget": budget, "method": method}
            share = False
            if method in ("eager", "whole", "regions"):
                option = {"eager": "eager", "whole": "whole", "regions": "region"}[method]
                policy: tuple[str, ...] | None = _uniform(cell, option)
                share = method == "whole" and shared is not None
                entry["planner"] = None
            else:
                if method == "state-agnostic":
                    result = plan(card, budget, state_agnostic=True)
                    runnable = bool(
                        result.state_agnostic and result.state_agnostic.planned_feasible
                    )
                elif method == "eager/whole":
                    result = plan(card, budget, options=("eager", "whole"))
                    runnable = result.feasible
                else:
                    result = plan(card, budget)
                    runnable = result.feasible
                entry["planner"] = result.to_json()
                policy = result.policy if runnable else None
            entry["policy"] = None if policy is None else list(policy)
            entry["share_anchors"] = share
            if policy is None:
                entry["infeasible"] = True
                entry["predicted_time_s"] = entry["predicted_peak"] = None
                entry["predicted_above_start"] = None
            else:
                by = shared if share else card
                t, p = policy_cost(by, policy)
                entry.update(
                    infeasible=False,
                    predicted_time_s=t,
                    predicted_peak=p,
                    predicted_above_start=p - by.persistent_bytes,
                    key=("S:" if share else "") + ",".join(policy),
                )
            out.append(entry)
    return out


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def evaluate(
    out_dir: str | Path,
    *,
    scale: int = DEFAULT_SCALE,
    processes: int = 10,
    backend: str = "numpy",
    warmups: int = 2,
    steps: int = 5,
    calibration_steps: int = 3,
    cells: Sequence[str] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the study and write DIR/evaluate.json, DIR/report.md, DIR/resource-map.png and the
    cards (DIR/cards/<cell>.json). Returns the evaluate.json document."""
    say = log or (lambda _m: None)
    if scale < 1 or processes < 1 or warmups < 0 or steps < 1 or calibration_steps < 1:
        raise ValueError("scale, processes, steps and calibration steps must be >= 1, warmups >= 0")
    known = {c.name: c for c in paper_cells()}
    names = list(known) if not cells else list(cells)
    bad = [c for c in names if c not in known]
    if bad:
        raise ValueError(f"unknown cells {bad}; cells are {', '.join(known)}")
    chosen = [known[c].at(scale) for c in names]
    if backend != "numpy":  # the backend's reason, before any process starts
        from replayverify.gpu.backend import GpuUnavailable

        try:
            array_module(backend)
        except GpuUnavailable as exc:
            raise EvaluateError(str(exc)) from None
    out = Path(out_dir)
    (out / "cards").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    load_start = _loadavg()
    say(f"evaluate: {backend}, scale 1/{scale}, {processes} processes, cells {', '.join(names)}")

    # calibrate -> card: each cell in a fresh process of its own, as it is measured (below)
    cal_docs = {
        c.name: _spawn(
            {
                "mode": "calibrate",
                "backend": backend,
                "steps": calibration_steps,
                "timing": {"warmups": warmups, "steps": steps},  # as the measuring processes
                "cells": [{"cell": asdict(c), "shared_whole": c.workload != ACTIVATION}],
            }
        )
        for c in chosen
    }
    device = cal_docs[chosen[0].name]["device"]
    cards: dict[str, dict[str, Any]] = {}
    plans: list[dict[str, Any]] = []
    for cell in chosen:
        got = cal_docs[cell.name]["cells"][cell.name]
        cards[cell.name] = {}
        parts = (("card", ""), ("unfitted", ".unfitted"), ("shared_whole", ".shared-whole"))
        for part, suffix in parts:
            if part not in got:
                continue
            text = dumps(got[part], indent=1) + "\n"
            (out / "cards" / f"{cell.name}{suffix}.json").write_text(text, encoding="utf-8")
            entry = {
                "path": f"cards/{cell.name}{suffix}.json",
                "sha256": hashlib.sha256(text.encode()).hexdigest(),
            }
            if part == "card":
                cards[cell.name].update(entry)
            else:
                cards[cell.name][part] = entry
        for extra in ("fit",):
            if extra in got:
                cards[cell.name][extra] = got[extra]
        plans.extend(plan_methods(cell, got["card"], got.get("shared_whole")))
    say(f"calibrated {len(chosen)} cells in {time.perf_counter() - t0:.1f} s")

    # execute: every distinct policy of a cell, eager's first, in each fresh process
    runs_of: dict[str, list[dict[str, Any]]] = {}
    for cell in chosen:
        seen: dict[str, dict[str, Any]] = {}
        for e in plans:
            if e["cell"] == cell.name and not e["infeasible"] and e["key"] not in seen:
                seen[e["key"]] = {
                    "key": e["key"],
                    "policy": e["policy"],
                    "share": e["share_anchors"],
                }
        eager_key = ",".join(_uniform(cell, "eager"))
        runs_of[cell.name] = [seen[eager_key]] + [r for k, r in seen.items() if k != eager_key]
    # each cell in a fresh process of its own, K times: a cell's steps never run in an
    # allocator and caches that another cell's steps shaped (measured in one process after
    # the activation cells, queue's regions / whole read 0.935-1.010 over four studies;
    # alone, 0.896-0.968 over nine: docs/evaluate.md)
    rows: list[dict[str, Any]] = []
    for p in range(processes):
        tp = time.perf_counter()
        for c in chosen:
            doc = _spawn(
                {
                    "mode": "measure",
                    "backend": backend,
                    "process": p,
                    "warmups": warmups,
                    "steps": steps,
                    "cells": [{"cell": asdict(c), "runs": runs_of[c.name]}],
                }
            )
            for key, row in doc["cells"][c.name].items():
                rows.append({"process": p, "cell": c.name, "key": key, **row})
        say(f"round {p + 1}/{processes} (a process per cell): {time.perf_counter() - tp:.1f} s")

    result = {
        "format": "replayverify.evaluate",
        "version": 1,
        "backend": backend,
        "device": device,
        "scale": scale,
        "processes": processes,
        "warmups": warmups,
        "steps": steps,
        "calibration_steps": calibration_steps,
        "cells": [asdict(c) for c in chosen],
        "cards": cards,
        "source_sha256": source_sha256(),
        "plans": plans,
        "rows": rows,
        "load_average": {"start": load_start, "end": _loadavg()},
        "process_per_cell": True,
        "allocator_env": ALLOCATOR_ENV,
    }
    result["summary"] = summarise(result)
    result["comparisons"] = compare(result)
    result["ranks"] = rank_agreement(result)
    result["seconds"] = time.perf_counter() - t0
    note = plot(result, out / "resource-map.png")
    result["plot"] = note
    (out / "evaluate.json").write_text(dumps(result, indent=1) + "\n", encoding="utf-8")
    (out / "report.md").write_text(markdown(result), encoding="utf-8")
    say(note)
    return result


def _rows(doc: dict[str, Any], cell: str, key: str) -> list[dict[str, Any]]:
    return sorted(
        (r for r in doc["rows"] if r["cell"] == cell and r["key"] == key),
        key=lambda r: r["process"],
    )


def summarise(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (cell, budget, method): measured means against predictions, fits counts."""
    out = []
    for e in doc["plans"]:
        s = {
            k: e[k]
            for k in (
                "cell",
                "budget",
                "method",
                "infeasible",
                "predicted_time_s",
                "predicted_peak",
            )
        }
        s["policy_counts"] = (
            None
            if e["policy"] is None
            else {o: e["policy"].count(o) for o in ("eager", "whole", "region")}
        )
        if e["planner"] is not None:
            s["min_peak"] = e["planner"]["min_peak"]
            s["planner_method"] = e["planner"]["method"]
        if not e["infeasible"]:
            rows = _rows(doc, e["cell"], e["key"])
            ok = [r for r in rows if r["semantic"]]
            s["semantic_pass"] = len(ok)
            s["semantic_fail"] = len(rows) - len(ok)
            s["semantic_detail"] = sorted({r["detail"] for r in rows if not r["semantic"]})
            if ok:
                peaks = [r["start_bytes"] + r["peak_above_start"] for r in ok]
                s["time_s"] = float(np.mean([r["time_s"] for r in ok]))
                if all("time_min_s" in r for r in ok):  # each process's least step
                    s["time_min_s"] = float(np.mean([r["time_min_s"] for r in ok]))
                s["process_time_s"] = [r["time_s"] for r in ok]  # each process's mean
                probe = doc["cards"].get(e["cell"], {}).get("fit", {}).get("probe_s")
                if probe and all("probe_s" in r for r in ok):
                    # the machine's speed while this method was timed, against the
                    # calibration's (the reference kernel's seconds, measured / calibration)
                    s["machine_slowdown"] = float(np.mean([r["probe_s"] for r in ok])) / probe
                if all("cpu_share" in r for r in ok):  # the CPU the steps had, as measured
                    s["cpu_share"] = float(np.mean([r["cpu_share"] for r in ok]))
                    fit = doc["cards"].get(e["cell"], {}).get("fit", {})
                    s["calibration_cpu_share"] = fit.get("cpu_share")
                s["peak"] = int(max(peaks))
                s["peak_min"] = int(min(peaks))
                s["peak_above_start"] = int(max(r["peak_above_start"] for r in ok))
                s["predicted_above_start"] = e["predicted_above_start"]
                s["fits"] = sum(p <= e["budget"] for p in peaks)
                s["processes"] = len(ok)
        out.append(s)
    return out


COMPARISONS = (
    # (cells it applies to, budget index, A, B, quantities)
    ("activation", -1, "joint", "eager/whole", ("time", "peak")),
    ("activation", 0, "joint", "regions", ("time", "peak")),
    ("activation", 0, "joint", "state-agnostic", ("time", "peak")),
    ("calibration", 0, "regions", "whole", ("time", "peak")),
)


def compare(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Paired ratios A/B (geometric mean of per-process ratios, bootstrap interval)."""
    out = []
    by = {(e["cell"], e["budget"], e["method"]): e for e in doc["plans"]}
    for cdoc in doc["cells"]:
        kind = "activation" if cdoc["workload"] == ACTIVATION else "calibration"
        for applies, bi, a, b, quantities in COMPARISONS:
            if applies != kind or (bi == -1 and len(cdoc["budgets"]) < 2):
                continue
            budget = cdoc["budgets"][bi]
            ea, eb = by[(cdoc["name"], budget, a)], by[(cdoc["name"], budget, b)]
            entry: dict[str, Any] = {
                "cell": cdoc["name"],
                "budget": budget,
                "a": a,
                "b": b,
                "peak_basis": "above start" if kind == "calibration" else "allocated",
            }
            if ea["infeasible"] or eb["infeasible"]:
                entry["infeasible"] = [m for m, e in ((a, ea), (b, eb)) if e["infeasible"]]
                out.append(entry)
                continue
            ra = {r["process"]: r for r in _rows(doc, cdoc["name"], ea["key"]) if r["semantic"]}
            rb = {r["process"]: r for r in _rows(doc, cdoc["name"], eb["key"]) if r["semantic"]}
            both = sorted(set(ra) & set(rb))
            if not both:
                entry["missing"] = "no process measured both"
                out.append(entry)
                continue
            has_min = all("time_min_s" in r for r in (*ra.values(), *rb.values()))
            for q in quantities + (("time_min",) if has_min else ()):
                if q in ("time", "time_min"):
                    va = [ra[p][f"{q}_s"] for p in both]
                    vb = [rb[p][f"{q}_s"] for p in both]
                elif kind == "calibration":  # as the calibration (and Table 8): above start
                    va = [ra[p]["peak_above_start"] for p in both]
                    vb = [rb[p]["peak_above_start"] for p in both]
                else:  # allocated in all, persistent state and parameters included
                    va = [ra[p]["start_bytes"] + ra[p]["peak_above_start"] for p in both]
                    vb = [rb[p]["start_bytes"] + rb[p]["peak_above_start"] for p in both]
                r = paired_ratio(np.array(va), np.array(vb))
                entry[q] = {
                    "estimate": r.estimate,
                    "low": r.low,
                    "high": r.high,
                    "processes": r.processes,
                }
            out.append(entry)
    return out


def _kendall(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-a between two orderings (None with fewer than two items)."""
    n = len(x)
    if n < 2:
        return None
    s = 0
    for i in range(n):
        for j in range(i + 1, n):
            s += int(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]))
    return s / (n * (n - 1) / 2)


def rank_agreement(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (cell, budget): the executed policies that fit the budget in every process,
    ordered by predicted and by measured time (the mean step, as the card's);
    Kendall's tau between the two orders, and the joint planner's time over the fastest."""
    out = []
    for cdoc in doc["cells"]:
        for budget in cdoc["budgets"]:
            seen: dict[str, dict[str, Any]] = {}
            for s in doc["summary"]:
                if (s["cell"], s["budget"]) != (cdoc["name"], budget) or s["infeasible"]:
                    continue
                if not s.get("processes") or s.get("fits") != s["processes"]:
                    continue
                e = next(
                    e
                    for e in doc["plans"]
                    if (e["cell"], e["budget"], e["method"]) == (s["cell"], budget, s["method"])
                )
                entry = seen.setdefault(
                    e["key"],
                    {
                        "methods": [],
                        "predicted_s": s["predicted_time_s"],
                        "measured_s": s["time_s"],
                    },
                )
                entry["methods"].append(s["method"])
            items = list(seen.values())
            pred = [i["predicted_s"] for i in items]
            meas = [i["measured_s"] for i in items]
            best = min(items, key=lambda i: i["measured_s"]) if items else None
            joint = next((i for i in items if "joint" in i["methods"]), None)
            out.append(
                {
                    "cell": cdoc["name"],
                    "budget": budget,
                    "policies": len(items),
                    "kendall_tau": _kendall(pred, meas),
                    "predicted_order": [
                        i["methods"] for i in sorted(items, key=lambda i: i["predicted_s"])
                    ],
                    "measured_order": [
                        i["methods"] for i in sorted(items, key=lambda i: i["measured_s"])
                    ],
                    "joint_over_best": None
                    if joint is None or best is None
                    else joint["measured_s"] / best["measured_s"],
                    "best": None if best is None else best["methods"],
                }
            )
    return out
