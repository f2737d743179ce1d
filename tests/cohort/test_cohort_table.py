"""A 2-key cohort through both frameworks, by the command, gives exactly the paper's
Table 2 cells / 25. In a child process: JAX's threads must not live in the pytest
process, which later forks. Two workers, as CI has two cores (the records do not depend
on the worker count; the command's worker pool is what a user runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parents[2]

# The reference paper's Table 2 at 50 keys, divided by 25: written out, not derived.
CELLS = {
    "torch functional reference": (20, 0, 0),
    "torch native eager": (16, 4, 0),
    "torch reentrant": (8, 4, 8),
    "torch non-reentrant": (8, 4, 8),
    "torch reentrant, RNG unpreserved": (0, 4, 16),
    "torch non-reentrant, RNG unpreserved": (0, 4, 16),
    "torch transactional non-reentrant": (16, 4, 0),
    "JAX functional reference": (20, 0, 0),
    "JAX functional checkpoint": (20, 0, 0),
    "JAX native in-place eager": (0, 20, 0),
    "JAX native in-place checkpoint": (0, 20, 0),
    "JAX impure-holder eager": (8, 0, 0),
    "JAX impure-holder checkpoint": (0, 8, 0),
}


def test_two_keys_both_frameworks_exact_cells(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "replayverify", "cohort", "--seeds",
                          "420000:420002", "--workers", "2", "--out", str(tmp_path)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    s = json.loads((tmp_path / "summary.json").read_text())
    got = {row: (c["M"], c["R"], c["D"]) for row, c in s["table"].items()}
    assert got == CELLS
    assert s["records"] == sum(map(sum, CELLS.values())) == 236
    assert s["verdict"] == "as-expected"
    assert all(c["determinism_flagged"] in (None, 0) for c in s["table"].values())
    assert "verdict as-expected" in run.stdout
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(lines) == 236 and {json.loads(x)["framework"] for x in lines} == {"torch", "jax"}
