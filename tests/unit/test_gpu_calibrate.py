"""The calibration pipeline on the NumPy backend (tiny grid), its cards, and the CLI without a GPU.

These check the workload model, the bookkeeping, the files written and the planner card
format; they measure nothing about a GPU (``scripts/gpu-check.sh`` does, on a lent device).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from replayverify.evaluate import calibrate as cal
from replayverify.evaluate import calibration_report as report
from replayverify.gpu import backend
from replayverify.gpu import journal as jr
from replayverify.gpu.cli import gpu_group

KIB = 1024
TINY = cal.Grid(
    buffers=(256 * KIB,),
    fractions=(0.01, 1.0),
    versions=(1, 3),
    warmups=1,
    steps=2,
    min_steps=1,
    journal_sizes=(64 * KIB, 2 * cal.MIB),
    journal_buffer=4 * cal.MIB,
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("calibration")
    return out, cal.calibrate(out, backend="numpy", grid=TINY)


def test_every_cell_runs_every_method_consistently(run) -> None:
    _, doc = run
    assert doc["device"]["backend"] == "numpy" and doc["grid_name"] == "custom"
    assert len(doc["cells"]) == 3 * 1 * 2 * 2 and not doc["skipped"]
    for cell in doc["cells"]:
        assert cell["consistent"], cell["consistency_detail"]
        for method in cal.METHODS:
            m = cell["methods"][method]
            assert "error" not in m, m
            assert m["time_s"] > 0 and m["peak_bytes"] >= 0 and m["steps"] >= 1


def test_memory_follows_the_model(run) -> None:
    _, doc = run
    for cell in doc["cells"]:
        n, L = cell["buffer_bytes"], cell["live_versions"]
        m = cell["methods"]
        assert m["eager"]["peak_bytes"] >= L * n  # a full pre-state per live version
        assert n <= m["whole"]["peak_bytes"] < 2 * n  # one snapshot
        if cell["write_fraction"] < 1:  # sparse: journals far below one snapshot
            assert sum(cell["journal_bytes"]) <= L * 4 * cal.ROW_BYTES[cell["workload"]] + L * 8192
            assert cell["ratios"]["region/whole"]["peak"] < 0.5
        else:
            assert cell["journal_bytes"] == [n] * L


def test_files_cards_and_report(run) -> None:
    parse_card = pytest.importorskip("replayverify.planner.card").parse_card
    out, doc = run
    on_disk = json.loads((out / "calibration.json").read_text())
    assert on_disk["format"] == "replayverify.calibration" and on_disk["cells"] == doc["cells"]
    md = (out / "calibration.md").read_text()
    assert "NumPy backend: a CPU smoke test" in md
    assert "| workload | MiB | write % | live |" in md
    assert "region/whole at 1,024 MiB, 0.1%, 64 versions | not in this grid" in md
    if doc["plot"].startswith("plot: skipped"):
        assert "matplotlib is not installed" in md and not (out / "calibration.png").exists()
    else:
        assert (out / "calibration.png").stat().st_size > 0
    assert len(doc["profiles"]) == len(doc["cells"])
    for rel in doc["profiles"]:
        raw = json.loads((out / rel).read_text())
        card = parse_card(raw)  # the planner accepts it
        cell = next(c for c in doc["cells"] if report.card_name(c) == raw["name"])
        assert len(card.segments) == cell["live_versions"]
        assert card.persistent_bytes == cell["persistent_bytes"]
        region = card.segments[0].option("region")
        assert region is not None and region.state_retained == cell["journal_bytes"][0]
        whole = card.segments[0].option("whole")
        assert whole is not None and whole.state_retained == cell["buffer_bytes"]


def test_journal_bandwidth_rows_and_targets(run) -> None:
    _, doc = run
    rows = doc["journal_bandwidth"]
    assert {(r["pattern"], r["op"]) for r in rows} == {
        (p, o) for p in ("contiguous", "strided") for o in ("save", "restore", "swap")
    }
    assert all(r["bytes_per_s"] > 0 for r in rows)
    names = [t["target"] for t in doc["targets"]]
    assert len(names) == 2 and all("80%" in n for n in names)  # the 1 GiB cell is not in TINY
    assert all(t["measured"] is not None for t in doc["targets"])  # a 2 MiB journal is >= 1 MiB


def test_targets_pick_the_paper_cell() -> None:
    cell = {
        "workload": "queue",
        "buffer_bytes": 1024 * cal.MIB,
        "write_fraction": 0.001,
        "live_versions": 64,
        "ratios": {"region/whole": {"peak": 0.04, "time": 0.5}},
    }
    rows = report.targets({"journal_bandwidth": [], "cells": [cell]})
    assert [t["met"] for t in rows] == [None, None, True, False]


@pytest.mark.parametrize("workload", cal.WORKLOADS)
def test_write_sets(workload: str) -> None:
    nbytes = 1024 * KIB
    sets = cal.write_sets(np, workload, nbytes, 0.01, 4, 4096)
    row = cal.ROW_BYTES[workload]
    for ws in sets:
        assert ws.rows == round(0.01 * nbytes / row)
        touched = np.zeros(nbytes, dtype=bool)
        if ws.index is None:
            for a, b in ws.ranges:
                touched[a * row : b * row] = True
        else:
            for r in ws.index:
                touched[r * row : (r + 1) * row] = True
        assert touched.sum() == ws.rows * row
        before = np.zeros(nbytes, np.uint8)
        np.testing.assert_array_equal(
            jr.changed_regions(np, before, touched.view(np.uint8), 4096), ws.layout.regions
        )
    if workload == "queue":  # the ring head advances
        assert sets[1].ranges[0][0] == sets[0].ranges[0][1]


def test_full_and_quick_grids_match_the_issue() -> None:
    assert cal.FULL.buffers == (64 * cal.MIB, 1024 * cal.MIB)
    assert cal.FULL.fractions == (0.001, 1.0) and cal.FULL.versions == (1, 64)
    assert cal.FULL.granularity == 4096 and cal.FULL.workloads == cal.WORKLOADS
    assert (cal.FULL.warmups, cal.FULL.steps) == (3, 10)
    assert max(cal.QUICK.buffers) < max(cal.FULL.buffers)


def test_cli_calibrate_without_gpu_exits_2_with_one_line(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(backend, "_load", lambda: (None, backend.INSTALL_HINT))
    result = CliRunner().invoke(gpu_group, ["calibrate", "--out", str(tmp_path / "c")])
    assert result.exit_code == 2
    assert result.stderr == (
        "replayverify: GPU backend unavailable: CuPy is not installed "
        "(pip install 'replayverify[gpu]')\n"
    )
    assert result.stdout == ""
    assert not (tmp_path / "c").exists()


def test_cli_info_without_gpu(monkeypatch) -> None:
    monkeypatch.setattr(backend, "_load", lambda: (None, "no CUDA device"))
    result = CliRunner().invoke(gpu_group, ["info"])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == "GPU backend unavailable: no CUDA device"


def test_cli_calibrate_numpy_backend(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(cal, "QUICK", TINY)
    out = tmp_path / "c"
    result = CliRunner().invoke(
        gpu_group, ["calibrate", "--out", str(out), "--quick", "--backend", "numpy"]
    )
    assert result.exit_code == 0, result.output
    assert "journal save/restore/swap >= 80% of copy bandwidth" in result.stdout
    assert (out / "calibration.json").exists() and (out / "calibration.md").exists()
