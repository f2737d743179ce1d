"""A 2-key cohort through both frameworks gives exactly the paper's Table 2 cells / 25."""

from __future__ import annotations

import pytest

from replayverify.cohort import CohortConfig, run_cohort

pytest.importorskip("torch")
pytest.importorskip("jax")

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
    s = run_cohort(CohortConfig(seeds=(420000, 420002), workers=1, out=tmp_path))
    got = {row: (c["M"], c["R"], c["D"]) for row, c in s["table"].items()}
    assert got == CELLS
    assert s["records"] == sum(map(sum, CELLS.values())) == 236
    assert s["verdict"] == "as-expected"
    assert all(c["determinism_flagged"] in (None, 0) for c in s["table"].values())
