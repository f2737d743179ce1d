"""Calibration outputs: targets, planner profile cards, the Markdown report and the plot.

Everything here reads the calibration document (plain dicts, as written to calibration.json),
so it runs and is tested without a GPU.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import numpy as np

MIB = 1 << 20
METHODS = ("eager", "whole", "region")

# Targets of the issue (measured, never asserted in tests).
TARGET_JOURNAL_FRACTION = 0.80
TARGET_JOURNAL_MIN_BYTES = MIB
TARGET_CELL = (1024 * MIB, 0.001, 64)
TARGET_PEAK_RATIO = 0.05
TARGET_TIME_RATIO = 0.30


def targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets with their measured values (None where not measured)."""
    rows = []
    jb = [r for r in doc["journal_bandwidth"] if r["journal_bytes"] >= TARGET_JOURNAL_MIN_BYTES]
    for basis in ("fraction_of_same_size_copy", "fraction_of_peak_copy"):
        worst = min((r[basis] for r in jb), default=None)
        rows.append(
            {
                "target": f"journal save/restore/swap >= 80% of copy bandwidth ({basis})",
                "measured": worst,
                "threshold": TARGET_JOURNAL_FRACTION,
                "met": None if worst is None else worst >= TARGET_JOURNAL_FRACTION,
            }
        )
    nbytes, f, L = TARGET_CELL
    for cell in doc["cells"]:
        if (cell["buffer_bytes"], cell["write_fraction"], cell["live_versions"]) != (nbytes, f, L):
            continue
        ratios = cell["ratios"]["region/whole"]
        for key, limit in (("peak", TARGET_PEAK_RATIO), ("time", TARGET_TIME_RATIO)):
            value = ratios[key]
            rows.append(
                {
                    "target": f"{cell['workload']} 1,024 MiB, 0.1%, 64 versions: "
                    f"region/whole {key} <= {limit}",
                    "measured": value,
                    "threshold": limit,
                    "met": None if value is None else value <= limit,
                }
            )
    return rows


def profile_card(cell: dict[str, Any]) -> dict[str, Any] | None:
    """A planner profile card for one cell, or None when a method failed.

    Per segment: eager retains its full pre-state (N bytes); whole is priced as if the segment
    had its own anchor (N bytes; state_time = one snapshot plus one restore); region retains
    the segment's journal, and its state time is the measured preserve+recover time shared in
    proportion to journal bytes. Compute time is the method's step time less its state time,
    divided by the number of segments; temporary bytes are the step peak less what is retained.
    """
    m = cell["methods"]
    if any("error" in m[k] for k in METHODS):
        return None
    L, N = cell["live_versions"], cell["buffer_bytes"]
    journals = cell["journal_bytes"]
    total_journal = sum(journals) or 1

    def compute_share(method: str) -> float:
        state = m[method]["preserve_s"] + m[method]["recover_s"]
        return max(0.0, m[method]["time_s"] - state) / L

    whole_state = m["whole"]["preserve_s"] + m["whole"]["recover_s"]
    region_state = m["region"]["preserve_s"] + m["region"]["recover_s"]
    segments = []
    for k in range(L):
        r_state = region_state * journals[k] / total_journal
        segments.append(
            {
                "name": f"s{k:03d}",
                "options": {
                    "eager": {
                        "retained": N,
                        "temporary": max(0, m["eager"]["peak_bytes"] - L * N),
                        "time": m["eager"]["time_s"] / L,
                    },
                    "whole": {
                        "retained": N,
                        "temporary": max(0, m["whole"]["peak_bytes"] - N),
                        "time": compute_share("whole") + whole_state,
                        "state_retained": N,
                        "state_time": whole_state,
                    },
                    "region": {
                        "retained": journals[k],
                        "temporary": max(0, m["region"]["peak_bytes"] - sum(journals)),
                        "time": compute_share("region") + r_state,
                        "state_retained": journals[k],
                        "state_time": r_state,
                    },
                },
            }
        )
    return {
        "format": "replayverify.profile",
        "version": 1,
        "name": card_name(cell),
        "persistent_bytes": int(cell["persistent_bytes"]),
        "segments": segments,
    }


def card_name(cell: dict[str, Any]) -> str:
    """``queue-1024MiB-w0.1pct-v64``: the file stem of a cell's profile card."""
    mib = cell["buffer_bytes"] / MIB
    size = f"{mib:g}MiB" if mib >= 1 else f"{cell['buffer_bytes'] // 1024}KiB"
    pct = f"{cell['write_fraction'] * 100:g}"
    return f"{cell['workload']}-{size}-w{pct}pct-v{cell['live_versions']}"


def size_text(n: int) -> str:
    return f"{n / MIB:g} MiB" if n >= MIB else f"{n / 1024:g} KiB"


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _gib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**30:.3f}"


def markdown(doc: dict[str, Any], plot_note: str) -> str:
    """The Markdown report: cells, journal bandwidth, targets."""
    dev = doc["device"]
    lines = [
        "# replayverify GPU calibration",
        "",
        f"- backend: **{dev['backend']}**, device: {dev.get('name', '?')}",
        f"- grid: {doc['grid_name']}; granularity {doc['grid']['granularity']}"
        f" bytes; total {doc['seconds']:.1f} s",
        f"- device-to-device copy bandwidth: {doc['copy_bandwidth']['bytes_per_s'] / 1e9:.1f} GB/s"
        f" ({size_text(doc['copy_bandwidth']['bytes'])} copies)",
        f"- {plot_note}",
    ]
    if dev["backend"] != "cupy":
        lines.append("- **NumPy backend: a CPU smoke test of the pipeline, not GPU measurements.**")
    lines += [
        "",
        "Peak = maximum bytes allocated during a step above those allocated when it starts "
        "(GiB); time = mean synchronized step time (ms). See `replayverify/evaluate/calibrate.py` "
        "for the workload model.",
        "",
        "| workload | MiB | write % | live | eager peak | whole peak | region peak "
        "| region/whole peak | eager ms | whole ms | region ms | region/whole time "
        "| region/eager peak | region/eager time | consistent |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in doc["cells"]:
        m = c["methods"]

        def ms(k: str, m: dict = m) -> str:
            return _fmt(m[k].get("time_s") and m[k]["time_s"] * 1e3, ".2f")

        rw, re_ = c["ratios"]["region/whole"], c["ratios"]["region/eager"]
        lines.append(
            f"| {c['workload']} | {c['buffer_mib']:g} | {c['write_fraction'] * 100:g} "
            f"| {c['live_versions']} | {_gib(m['eager'].get('peak_bytes'))} "
            f"| {_gib(m['whole'].get('peak_bytes'))} | {_gib(m['region'].get('peak_bytes'))} "
            f"| {_fmt(rw['peak'])} | {ms('eager')} | {ms('whole')} | {ms('region')} "
            f"| {_fmt(rw['time'])} | {_fmt(re_['peak'])} | {_fmt(re_['time'])} "
            f"| {'yes' if c['consistent'] else 'NO: ' + c['consistency_detail']} |"
        )
    errors = [
        (c, k, c["methods"][k]["error"])
        for c in doc["cells"]
        for k in METHODS
        if "error" in c["methods"][k]
    ]
    if errors:
        lines += ["", "Errors:", ""]
        lines += [f"- {card_name(c)} {k}: {e}" for c, k, e in errors]
    if doc["skipped"]:
        lines += ["", f"Skipped (time budget): {', '.join(doc['skipped'])}"]
    lines += [
        "",
        "## Journal bandwidth",
        "",
        "Bytes written per second (a swap writes twice the journal), as a fraction of a "
        "same-size device copy and of the large-copy bandwidth.",
        "",
        "| pattern | journal MiB | op | GB/s | of same-size copy | of peak copy |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in doc["journal_bandwidth"]:
        lines.append(
            f"| {r['pattern']} | {r['journal_bytes'] / MIB:g} | {r['op']} "
            f"| {r['bytes_per_s'] / 1e9:.1f} | {_fmt(r['fraction_of_same_size_copy'])} "
            f"| {_fmt(r['fraction_of_peak_copy'])} |"
        )
    lines += ["", "## Targets", "", "| target | measured | met |", "|---|---:|---|"]
    for t in doc["targets"]:
        met = "not measured" if t["met"] is None else ("yes" if t["met"] else "**no**")
        lines.append(f"| {t['target']} | {_fmt(t['measured'])} | {met} |")
    if not doc["targets"][2:]:
        lines.append("| region/whole at 1,024 MiB, 0.1%, 64 versions | not in this grid | — |")
    return "\n".join(lines) + "\n"


def plot(doc: dict[str, Any], path: Path) -> str:
    """Write region/whole peak and time ratios per cell; the sentence the report shows."""
    if importlib.util.find_spec("matplotlib") is None:
        return "plot: skipped (matplotlib is not installed)"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = doc["cells"]
    labels = [card_name(c) for c in cells]
    peak = [c["ratios"]["region/whole"]["peak"] or float("nan") for c in cells]
    tm = [c["ratios"]["region/whole"]["time"] or float("nan") for c in cells]
    x = np.arange(len(cells))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(cells)), 4.5))
    ax.bar(x - 0.2, peak, 0.4, label="peak region/whole")
    ax.bar(x + 0.2, tm, 0.4, label="time region/whole")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(x, labels, rotation=75, ha="right", fontsize=7)
    ax.set_title(
        f"Region vs whole snapshot ({doc['device'].get('name', doc['device']['backend'])})"
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: `{path.name}`"
