"""The calibration pipeline on CuPy with a tiny grid: memory hook, events and kernels all run."""

from __future__ import annotations

from replayverify.evaluate import calibrate as cal

TINY = cal.Grid(
    buffers=(4 * cal.MIB,),
    fractions=(0.001, 1.0),
    versions=(1, 4),
    warmups=1,
    steps=2,
    min_steps=1,
    journal_sizes=(1 * cal.MIB,),
    journal_buffer=16 * cal.MIB,
)


def test_tiny_cupy_calibration(cp, tmp_path) -> None:
    doc = cal.calibrate(tmp_path, backend="cupy", grid=TINY)
    assert doc["device"]["backend"] == "cupy"
    for cell in doc["cells"]:
        assert cell["consistent"], cell["consistency_detail"]
        n, L = cell["buffer_bytes"], cell["live_versions"]
        m = cell["methods"]
        assert all("error" not in m[k] for k in cal.METHODS), m
        assert m["eager"]["peak_bytes"] >= L * n  # the hook sees the pre-state copies
        assert m["whole"]["peak_bytes"] >= n  # and the snapshot
        assert m["region"]["peak_bytes"] >= sum(cell["journal_bytes"])
    assert (tmp_path / "calibration.md").exists()
