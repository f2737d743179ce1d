"""Reproducers (cohort/repro.py) on the torch adapter's own rows: one per row and
divergence kind, shrunk with the case's roles kept, and each shows what it claims when
run as a standalone script."""

from __future__ import annotations

import pytest

from replayverify.cohort import build_case, run_task
from replayverify.cohort.repro import claims, kind_of, run_script, shows, write_reproducers
from replayverify.runs.executors import ProcessPool

torch = pytest.importorskip("torch")

from replayverify.cohort.torch_adapter import METHODS, TorchAdapter  # noqa: E402


def test_claims_name_what_a_record_names():
    rec = {"outcome": "diverge", "diverged": ["gradient", "generator", "buffer hid"]}
    assert kind_of(rec) == ("buffer hid", "generator", "gradient")
    assert claims(kind_of(rec)) == ["DIFFERS: buffer hid", "DIFFERS: generator state",
                                    "DIFFERS: gradient"]
    rec = {"outcome": "rejected", "exception": {"type": "RuntimeError", "message": "x"}}
    assert claims(kind_of(rec)) == ["DIFFERS: raised RuntimeError"]
    assert kind_of({"outcome": "match"}) is None


def test_one_shrunk_reproducer_per_row_and_kind_that_shows_its_divergence(tmp_path):
    records = run_task("torch/hidden-strided/420000/float32")
    entries = write_reproducers(tmp_path, records)
    diverged = {(r["row"], tuple(sorted(r["diverged"]))) for r in records
                if r["outcome"] == "diverge"}
    assert len(entries) == len(diverged) and diverged
    nr = next(e for e in entries if e["row"] == "torch non-reentrant")
    rec = next(r for r in records if r["row"] == "torch non-reentrant")
    assert nr["claims"] == claims(kind_of(rec)) and nr["path"]
    assert nr["elements"][1] < nr["elements"][0]  # shrunk
    for e in entries:
        if e["path"]:
            assert (tmp_path / e["path"]).read_text().count("\n") <= 40
    status, lines = run_script(tmp_path / nr["path"])
    assert shows(nr, status, lines), (status, lines)
    text = (tmp_path / nr["path"]).read_text()
    assert "import torch" in text and "replayverify" not in text.replace(
        "# replayverify cohort reproducer", "")


def test_reproducers_written_by_a_pool_are_the_serial_ones(tmp_path):
    """The cohort shrinks its reproducers in its worker processes: the same entries in
    the same order and the same files as one process writes; and a group whose worker
    is lost gets an entry saying so instead of ending the run."""
    records = [*run_task("torch/hidden-strided/420000/float32"),
               *run_task("torch/raw-copy/420001/float64")]
    serial = write_reproducers(tmp_path / "serial", records)
    pooled = write_reproducers(tmp_path / "pool", records, ProcessPool(2))
    assert pooled == serial and len(serial) >= 2
    for e in serial:
        if e["path"]:
            assert (tmp_path / "pool" / e["path"]).read_bytes() == \
                (tmp_path / "serial" / e["path"]).read_bytes()

    class Lost(ProcessPool):
        def map(self, fn, tasks, *, name, lost):
            return iter([lost(t, "worker ended (signal 9)") for t in tasks])

    lost = write_reproducers(tmp_path / "lost", records, Lost(2))
    # (every group is in it: whether an R qualifies is found by the lost worker)
    assert {(e["row"], e["kind"]) for e in serial} <= {(e["row"], e["kind"]) for e in lost}
    assert all(e["path"] is None and e["why"].startswith("lost while shrinking: worker ended")
               for e in lost)


def test_a_reproducer_of_a_matching_method_shows_nothing(tmp_path):
    adapter = TorchAdapter()
    case = build_case("hidden-overlap", 420002, "float32")
    method = next(m for m in METHODS if m.name == "non-reentrant")
    path = tmp_path / "r.py"
    path.write_text(adapter.reproducer(build_case("local-strided", 420000, "float32"), method,
                                       {"row": method.row}))
    assert run_script(path) == (0, [])
    path.write_text(adapter.reproducer(case, method, {"row": method.row}))
    status, lines = run_script(path)
    assert status == 1 and "DIFFERS: buffer hid" in lines
