"""The evaluation's report (tables shaped like the paper's Tables 4, 6, 7 and 8) and its
resource map (the paper's Figure 3). Reads the evaluate.json document only."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path
from typing import Any

from replayverify.evaluate.workloads import ACTIVATION, LABELS, METHODS

MiB = 1 << 20


def _mib(x: float | None) -> str:
    return "—" if x is None else f"{x / MiB:.2f}"


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{1e3 * x:.2f}"


def _machine(dev: dict[str, Any]) -> str:
    """The device line: its name, and the CPU model and cores where recorded."""
    cpu = ", ".join(
        x for x in (dev.get("cpu"), dev.get("cores") and f"{dev['cores']} cores") if x
    )
    return f"{dev.get('name', '?')}; {cpu}" if cpu else dev.get("name", "?")


def _budget(doc: dict[str, Any], b: int) -> str:
    return f"{b / MiB:.0f} MiB (= {b * doc['scale'] / (1 << 30):.0f} GiB / {doc['scale']})"


def _summary(doc: dict[str, Any]) -> dict[tuple[str, int, str], dict[str, Any]]:
    return {(s["cell"], s["budget"], s["method"]): s for s in doc["summary"]}


def _ratio(c: dict[str, Any], q: str) -> str:
    v = c.get(q)
    if v is None:
        return "—"
    return f"{v['estimate']:.4f} [{v['low']:.4f}, {v['high']:.4f}]"


def markdown(doc: dict[str, Any]) -> str:
    """report.md: what ran, the paper-shaped tables, predictions against measurements."""
    S = _summary(doc)
    cells = doc["cells"]
    K = doc["processes"]
    dev = doc["device"]
    per_cell = doc.get("process_per_cell", False)  # evaluate.json before: one for all cells
    lines = [
        "# Executed plans: measured against predicted",
        "",
        f"Backend {doc['backend']} ({_machine(dev)}); every byte size and budget divided "
        f"by {doc['scale']} (`--scale {doc['scale']}`); {K} fresh processes"
        + (" per cell" if per_cell else "")
        + f", each running every method{' of its cell' if per_cell else ''} with "
        f"{doc['warmups']} warmups and {doc['steps']} measured steps, methods paired "
        f"within a process (their order rotates from process to process). Cards: one "
        f"calibration process{' per cell' if per_cell else ''}, "
        f"{doc['calibration_steps']} instrumented steps per option. "
        f"Load average (1, 5, 15 min) at start {doc['load_average']['start']}, at end "
        f"{doc['load_average']['end']}; {doc['seconds']:.0f} s in all.",
        "",
        "Peaks are allocated bytes (NumPy: tracemalloc; CuPy: a memory hook on the pool): the "
        "bytes allocated when the step starts (the persistent state, inputs and parameters) "
        "plus the step's peak above that, largest over processes; times are the mean over "
        "processes of each process's mean step time. 'Infeasible' is the planner's exact "
        "outcome on the card (nothing executed), never an observed failure.",
        "",
        f"Source sha256 `{doc['source_sha256'][:16]}…`; cards: "
        + ", ".join(f"{n} `{c['sha256'][:12]}…`" for n, c in doc["cards"].items())
        + ".",
        "",
    ]
    act = [c for c in cells if c["workload"] == ACTIVATION]
    if act:
        b0 = act[0]["budgets"][0]
        lines += [
            f"## Activation-pressure cells (shape of Table 4): peak MiB / step ms, "
            f"budget {_budget(doc, b0)}",
            "",
            "| activation / writes | " + " | ".join(LABELS[m] for m in METHODS) + " |",
            "|---|" + "---|" * len(METHODS),
        ]
        for c in act:
            row = []
            for m in METHODS:
                s = S[(c["name"], c["budgets"][0], m)]
                row.append(
                    "Infeasible"
                    if s["infeasible"]
                    else f"{_mib(s.get('peak'))} / {_ms(s.get('time_s'))}"
                )
            lines.append(f"| {c['name'].replace('-', ' / ')} | " + " | ".join(row) + " |")
        lines.append("")
        for c in act:
            if len(c["budgets"]) < 2:
                continue
            for b in reversed(c["budgets"]):
                lines += [
                    f"## {c['name']} at {_budget(doc, b)} (shape of Tables 6 and 7)",
                    "",
                    "| method | step ms | peak MiB | fits / processes | predicted ms | "
                    "predicted MiB | policy (eager/whole/region) |",
                    "|---|---|---|---|---|---|---|",
                ]
                for m in METHODS:
                    s = S[(c["name"], b, m)]
                    counts = s["policy_counts"]
                    pol = (
                        "—"
                        if counts is None
                        else "/".join(str(counts[o]) for o in ("eager", "whole", "region"))
                    )
                    if s["infeasible"]:
                        lines.append(
                            f"| {LABELS[m]} | infeasible (least peak "
                            f"{_mib(s.get('min_peak'))} MiB) | — | — | — | — | — |"
                        )
                        continue
                    lines.append(
                        f"| {LABELS[m]} | {_ms(s.get('time_s'))} | {_mib(s.get('peak'))} | "
                        f"{s.get('fits', 0)} / {s.get('processes', 0)} | "
                        f"{_ms(s['predicted_time_s'])} | {_mib(s['predicted_peak'])} | {pol} |"
                    )
                lines.append("")
    cals = [c for c in cells if c["workload"] != ACTIVATION]
    comps = doc["comparisons"]
    if cals:
        lines += [
            "## Regions / whole in the calibration workloads (shape of Table 8)",
            "",
            "Geometric mean of per-process ratios, paired process-bootstrap 95% interval "
            "(lower is better). Peak: the step's peak above its starting allocation, as in "
            "the calibration (the state buffer itself is not counted).",
            "",
            "| workload | step time | peak allocated memory |",
            "|---|---|---|",
        ]
        for c in comps:
            if (c["a"], c["b"]) == ("regions", "whole"):
                lines.append(f"| {c['cell']} | {_ratio(c, 'time')} | {_ratio(c, 'peak')} |")
        lines.append("")
    lines += [
        "## Paired comparisons",
        "",
        "Activation cells: peak = allocated in all (persistent state, inputs, parameters "
        "included); calibration workloads: peak above the step's start. Time: the "
        "per-process mean step (the paper's measure); least-step: each process's fastest "
        "step, the one least disturbed by other jobs on a shared CPU. Fit: in how many "
        "measuring processes A's and B's measured peak was within the budget (a comparison "
        "is one where both fit only if both fit in every process).",
        "",
        "| cell | budget | A / B | time ratio [95%] | least-step time ratio [95%] | "
        "peak ratio [95%] | fit: A; B |",
        "|---|---|---|---|---|---|---|",
    ]
    def fit(c: dict[str, Any], method: str) -> str:
        s = S.get((c["cell"], c["budget"], method)) or {}
        return f"{s.get('fits', 0)}/{s.get('processes', 0)}" if s.get("processes") else "—"

    for c in comps:
        what = f"{LABELS[c['a']]} / {LABELS[c['b']]}"
        if "infeasible" in c:
            lines.append(
                f"| {c['cell']} | {c['budget'] / MiB:.0f} MiB | {what} | "
                f"infeasible: {', '.join(c['infeasible'])} | — | — | — |"
            )
        else:
            lines.append(
                f"| {c['cell']} | {c['budget'] / MiB:.0f} MiB | {what} | "
                f"{_ratio(c, 'time')} | {_ratio(c, 'time_min')} | {_ratio(c, 'peak')} | "
                f"{fit(c, c['a'])}; {fit(c, c['b'])} |"
            )
    lines += [
        "",
        "## Predicted (card) against measured, every executed method",
        "",
        "Peak: the card's persistent bytes plus retained plus largest temporary, against the "
        "measured starting allocation plus the step's peak above it; the ratio compares the "
        "parts above the step's start (the starting allocation drifts by a few KiB of Python "
        "objects between processes). Time: the sum of the card's per-segment times (plain "
        "steps timed in the calibration process exactly as the measuring processes time "
        "them, mean step, then fitted) against the measured mean (mean over processes of "
        "each process's mean step), and the least step beside it. Machine: the reference "
        "kernel's time (a fixed elementwise kernel timed around every policy's steps) in "
        "the measuring processes over its time in the calibration process; 'at calibration "
        "speed' divides the time ratio by it. A time ratio outside [0.8, 1.25] says what "
        "was measured about it in the note (with the steps' CPU share: process CPU time over "
        "wall time, below 1 when other jobs took the CPU).",
        "",
        "| cell | budget MiB | method | predicted MiB | measured MiB | above start: measured / "
        "predicted | predicted ms | measured ms | measured / predicted | least step / "
        "predicted | machine | at calibration speed | note | semantic checks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in doc["summary"]:
        if s["infeasible"]:
            continue
        pr, mp = s["predicted_peak"], s.get("peak")
        pa, ma = s.get("predicted_above_start"), s.get("peak_above_start")
        pt, mt = s["predicted_time_s"], s.get("time_s")
        rp = "—" if ma is None or not pa else f"{ma / pa:.3f}"
        rt = "—" if mt is None or not pt else f"{mt / pt:.3f}"
        ma_t = s.get("time_min_s")
        rs = "—" if ma_t is None or not pt else f"{ma_t / pt:.3f}"
        slow = s.get("machine_slowdown")
        sl = "—" if slow is None else f"{slow:.2f}"
        rn = "—" if slow is None or mt is None or not pt else f"{mt / pt / slow:.3f}"
        sem = f"{s['semantic_pass']} pass" + (
            f", {s['semantic_fail']} FAIL" if s["semantic_fail"] else ""
        )
        lines.append(
            f"| {s['cell']} | {s['budget'] / MiB:.0f} | {LABELS[s['method']]} | "
            f"{_mib(pr)} | {_mib(mp)} | {rp} | {_ms(pt)} | {_ms(mt)} | {rt} | {rs} | {sl} | "
            f"{rn} | {time_note(s)} | {sem} |"
        )
    lines += _fit_lines(doc) + _rank_lines(doc)
    fails = [s for s in doc["summary"] if not s["infeasible"] and s["semantic_fail"]]
    lines += ["", "## Semantic checks", ""]
    if fails:
        for s in fails:
            lines.append(
                f"- FAILED: {s['cell']} {LABELS[s['method']]}: {'; '.join(s['semantic_detail'])}"
            )
    else:
        lines.append(
            "Every executed method, in every process, computed the same final state, "
            "gradients and result as eager, bit for bit, in float64 and in float32, "
            "before it was timed."
        )
    lines += ["", doc.get("plot", ""), ""]
    return "\n".join(lines)


def time_note(s: dict[str, Any]) -> str:
    """Why a method's measured / predicted mean time is outside [0.8, 1.25], in measured
    terms only: the machine's speed against the calibration's (the reference kernel), the
    spread of the processes' means around the prediction, steps too short to time well.
    Empty inside the band."""
    pt, mt = s.get("predicted_time_s"), s.get("time_s")
    if not pt or mt is None or 0.8 <= mt / pt <= 1.25:
        return ""
    parts = []
    slow = s.get("machine_slowdown")
    if slow is not None:
        at = mt / pt / slow
        parts.append(
            f"reference kernel {slow:.2f}x its calibration time"
            + (
                f"; {at:.2f} at calibration speed"
                if 0.8 <= at <= 1.25
                else f", still {at:.2f} at calibration speed"
            )
        )
    share, cal_share = s.get("cpu_share"), s.get("calibration_cpu_share")
    if share is not None and cal_share is not None:
        parts.append(f"CPU share of the steps {share:.2f}, in the calibration {cal_share:.2f}")
    means = s.get("process_time_s") or []
    if len(means) > 1:
        lo, hi = min(means) / pt, max(means) / pt
        parts.append(f"process means {lo:.2f}-{hi:.2f} of predicted")
    if mt < 5e-3:
        parts.append("steps under 5 ms")
    return "; ".join(parts) or "outside [0.8, 1.25]"


def _fit_lines(doc: dict[str, Any]) -> list[str]:
    fits = {n: c["fit"] for n, c in doc["cards"].items() if "fit" in c}
    if not fits:
        return []
    first = next(iter(fits.values()))
    terms = first["terms"]
    tie_z, margin = first.get("tie_z", 2.0), first.get("tie_margin", 0.01)
    lines = [
        "",
        "## Time model (fitted in the calibration process)",
        "",
        "Each card's per-segment times come from instrumented steps of the uniform policies, "
        "scaled to their plain steps' mean. The calibration process then times plain steps "
        "of the uniform policies, random mixes and every planner pick at the cell's budgets "
        "(re-planning on the fitted card, at most three times, until its picks are "
        "measured; picks of the last fit that no round timed are timed once more, not "
        "fitted again), each by the "
        "statistic the measuring processes report (the mean step), and fits one scale "
        "per option by least squares on relative error, pulled towards 1, then one scale "
        "per segment and option on what remains. Errors: predicted / target - 1 (the target: "
        "the measured time, raised only for a tie, below) over the "
        "timed policies, RMS and largest, for the card as calibrated, as fitted, and "
        "fitted without the policy it predicts (leave one out). Reference kernel: its mean "
        "time while the fit's policies were timed (the machine's speed then).",
        "",
        "Each round's policies are timed together in interleaved blocks (round robin, a "
        "warmup and a few steps each), so a change of the machine's speed falls on all of "
        "them alike. Spread: per policy, the standard error of its mean step from its "
        "blocks, over that mean (median and largest over the cell's policies). Two "
        f"policies are tied when their means differ by at most {tie_z:g} standard "
        "errors of the difference; where a planner's option set has timed policies tied "
        "with the fastest, the fit aims at the simplest of them (fewest distinct options, "
        "then fewest state-preserving segments): the tied, less simple ones that were timed "
        f"faster aim at its time + {margin:.0%} (ties column: option sets and "
        "budgets where that happened).",
        "",
        "| cell | policies | "
        + " | ".join(f"{t} scale" for t in terms)
        + " | error before (rms / max) | after | leave one out | per segment: after | "
        "leave one out | per segment: ridge | spread (median / max) | ties | "
        "reference kernel ms |",
        "|---|---|" + "---|" * len(terms) + "---|---|---|---|---|---|---|---|---|",
    ]
    for name, f in fits.items():

        def err(e: dict[str, float]) -> str:
            return f"{e['rms']:.3f} / {e['max']:.3f}"

        lines.append(
            f"| {name} | {f['policies']} | "
            + " | ".join(f"{x:.3f}" for x in f["scales"])
            + f" | {err(f['error_before'])} | {err(f['error_after'])} | "
            f"{err(f['error_leave_one_out'])} | "
            + (
                f"{err(f['per_segment']['error_after'])} | "
                f"{err(f['per_segment']['error_leave_one_out'])} | "
                f"{f['per_segment'].get('ridge', '—')} |"
                if "per_segment" in f
                else "— | — | — |"
            )
            + f" {_spread(f)} | {len(f.get('ties', []))} | {_ms(f.get('probe_s'))} |"
        )
    off = [(name, o) for name, f in fits.items() for o in f.get("picks_slower_than_measured", [])]
    lines.append("")
    for name, f in fits.items():
        for t in f.get("ties", []):
            lines.append(
                f"- {name}, {LABELS[t['method']]} at {t['budget'] / MiB:.0f} MiB: tied with "
                f"the fastest and preferred, {t['preferred']} ({_ms(t['preferred_s'])} ms); "
                f"aimed above it: {len(t['raised'])} policy(ies) timed faster within the "
                "spread."
            )
    if off:
        for name, o in off:
            lines.append(
                f"- {name}, {LABELS[o['method']]} at {o['budget'] / MiB:.0f} MiB: its pick was "
                f"timed at {_ms(o['pick_s'])} ms, "
                + (
                    "tied with a simpler policy that fits"
                    if o.get("tied")
                    else "slower than another policy that fits"
                )
                + f" ({o['best']}, {_ms(o['best_s'])} ms), at the loosest pull tried."
            )
    else:
        lines.append(
            "In every cell, each state-aware planner's pick that the calibration timed was the "
            "fastest timed policy of its option set that fits the budget, or the simplest of "
            "those tied with it (the per-segment pull towards 1 was loosened where needed: "
            "the ridge column)."
        )
    unmeasured = [(n, len(f["unmeasured_picks"])) for n, f in fits.items()
                  if f.get("unmeasured_picks")]  # evaluate.json before picks were timed late
    if unmeasured:
        lines.append(
            "Picks of the fitted card that the calibration's rounds did not reach (not timed "
            "there): " + ", ".join(f"{n} {k}" for n, k in unmeasured) + "."
        )
    for name, f in fits.items():
        late = f.get("picks_timed_after_fit") or []
        if not late:
            continue
        off = f.get("picks_off_after_fit") or []
        lines.append(
            f"{name}: {len(late)} pick(s) of the final fitted card that no round had timed "
            "were timed after the fit (not fitted again: each re-fit can price a new "
            "permutation of a mix lowest); "
            + (
                "; ".join(
                    f"{LABELS[o['method']]} at {o['budget'] / MiB:.0f} MiB, timed at "
                    f"{_ms(o['pick_s'])} ms, "
                    + ("tied with the simpler" if o["tied"] else "slower than")
                    + f" {o['best']} ({_ms(o['best_s'])} ms)"
                    for o in off
                )
                if off
                else "each was the fastest timed policy of its option set that fits, or the "
                "simplest of those tied with it"
            )
            + "."
        )
    return lines


def _spread(fit: dict[str, Any]) -> str:
    """Median and largest relative spread (standard error / mean) of a fit's timed policies."""
    rel = [m["spread_s"] / m["measured_s"] for m in fit["measured"] if "spread_s" in m]
    if not rel:
        return "—"
    return f"{statistics.median(rel):.1%} / {max(rel):.1%}"


def _rank_lines(doc: dict[str, Any]) -> list[str]:
    ranks = doc.get("ranks")
    if not ranks:
        return []
    lines = [
        "",
        "## Does the card order the methods as measured?",
        "",
        "Per cell and budget, the distinct executed policies that fit the budget in every "
        "process: Kendall's tau between the card's and the measured order of their times "
        "(mean steps; 1: the same order), the measured order (fastest first; methods that "
        "executed the same policy share a place), and the joint planner's measured time over "
        "the fastest.",
        "",
        "| cell | budget MiB | policies | tau | measured order | joint / fastest |",
        "|---|---|---|---|---|---|",
    ]
    for r in ranks:
        tau = "—" if r["kendall_tau"] is None else f"{r['kendall_tau']:.2f}"
        order = " < ".join(" = ".join(LABELS[m] for m in ms) for ms in r["measured_order"])
        jb = "—" if r["joint_over_best"] is None else f"{r['joint_over_best']:.3f}"
        lines.append(
            f"| {r['cell']} | {r['budget'] / MiB:.0f} | {r['policies']} | {tau} | {order} | {jb} |"
        )
    return lines


def plot(doc: dict[str, Any], path: Path) -> str:
    """resource-map.png (the paper's Figure 3): per cell, every executed method as a point
    (peak against step time), budget lines, the joint planner highlighted. Needs matplotlib
    (the ``plot`` extra); without it nothing is written and the returned line says so."""
    if importlib.util.find_spec("matplotlib") is None:
        return (
            "resource map: PNG skipped, matplotlib is not installed "
            "(pip install 'replayverify[plot]')"
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S = _summary(doc)
    cells = doc["cells"]
    cols = min(4, len(cells))
    rows = -(-len(cells) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    colours = {
        "eager": "tab:blue",
        "whole": "tab:gray",
        "regions": "tab:green",
        "state-agnostic": "tab:purple",
        "eager/whole": "tab:red",
        "joint": "tab:orange",
    }
    for ax, c in zip(axes.flat, cells):
        drawn = set()
        for b in c["budgets"]:
            ax.axvline(b / MiB, color="black", linestyle="--", linewidth=0.8)
            ax.annotate(
                f"budget {b / MiB:.0f}",
                (b / MiB, 1.0),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                rotation=90,
                va="top",
                ha="right",
            )
            for m in METHODS:
                s = S[(c["name"], b, m)]
                if s["infeasible"] or s.get("peak") is None:
                    continue
                point = (s["peak"] / MiB, 1e3 * s["time_s"])
                if (m, point) in drawn:
                    continue
                drawn.add((m, point))
                joint = m == "joint"
                ax.scatter(
                    *point,
                    s=90 if joint else 36,
                    color=colours[m],
                    zorder=3 if joint else 2,
                    edgecolors="black" if joint else "none",
                    label=LABELS[m] if c is cells[0] or joint else None,
                )
                tag = (
                    m
                    if len(c["budgets"]) == 1 or m in ("eager", "whole", "regions")
                    else f"{m} @{b / MiB:.0f}"
                )
                ax.annotate(tag, point, fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.set_title(c["name"], fontsize=9)
        ax.set_xlabel("peak allocated MiB", fontsize=8)
        ax.set_ylabel("step ms", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(cells) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
    fig.suptitle(
        f"Resource map: measured peak and step time, scale 1/{doc['scale']} "
        f"({doc['backend']}), joint planner highlighted",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"resource map: {path.name}"
