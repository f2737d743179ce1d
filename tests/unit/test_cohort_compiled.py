"""The torch.compile adapter and the eager checkpoint wrappers (issue #25).

CI runs aot_eager on one key, every family, both dtypes (each family in one of them,
alternating: the cells are per family, and each compile is cold, so the full product
would double the time for no cell the half does not check), and asserts each record's
letter against the cells pinned to torch 2.13.0 (expected_compiled.py);
``REPLAYVERIFY_FULL_GRID=1`` runs every family in both dtypes, and
reports/cohort-compile/ is the 50-key run of every cell (its test below). Inductor tests
are marked ``inductor`` and skip without a C++ compiler. The honest-record paths (a
graph break, a compile served from a cache, a missing compiler, a backend failure's
phase) and a compiled reproducer run in a subprocess are checked on single cases; the
reproducer is written from the grid's own record (no compile of its own but the
shrinker's).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import pytest

from replayverify.cohort import EXTRA_FAMILIES, FAMILIES, Reference, build_case, observe, run_task
from replayverify.cohort.adapter import LETTER
from replayverify.cohort.expected_compiled import PINNED, letter
from replayverify.cohort.runner import CohortConfig, summarize

torch = pytest.importorskip("torch")

from replayverify.cohort import compiled_adapter as ca  # noqa: E402
from replayverify.cohort.repro import run_script, shows, write_reproducers  # noqa: E402

PINNED_HERE = torch.__version__.split("+")[0] == PINNED
pinned = pytest.mark.skipif(not PINNED_HERE, reason=f"cells pinned to torch {PINNED}")
ALL = [*FAMILIES, *EXTRA_FAMILIES]
KEY = 420000


DTYPES = ("float64", "float32")
# (family, dtype) of the grid: each family once, the dtypes alternating (7 x 6 compiles)
GRID = [(fam, dtype) for i, fam in enumerate(ALL)
        for dtype in (DTYPES if os.environ.get("REPLAYVERIFY_FULL_GRID") == "1"
                      else DTYPES[i % 2:i % 2 + 1])]


@pytest.fixture(scope="module")
def aot_eager_records():
    """Every aot_eager method on key 420000 and every (family, dtype) of GRID, the tasks
    shared by two fresh worker processes (CI has two cores; spawned, so no worker
    inherits this process's torch state). Each case is its own cold compile wherever it
    runs (the adapter resets Dynamo and refuses anything but one fresh compile)."""
    tasks = [f"torch-compile-aot-eager/{fam}/{KEY}/{dtype}" for fam, dtype in GRID]
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_one_thread) as pool:
        return dict(zip(GRID, pool.map(functools.partial(run_task, extra=True), tasks)))


def _one_thread() -> None:
    """A worker's torch on one thread: two workers on two cores, not four threads whose
    idle ones spin (the cases are far below torch's parallel grain: the same kernels)."""
    import torch

    torch.set_num_threads(1)


def test_the_grid_has_every_family_and_both_dtypes():
    assert {fam for fam, _ in GRID} == set(ALL) and {d for _, d in GRID} == set(DTYPES)


@pinned
def test_aot_eager_cells_on_every_family_and_dtype(aot_eager_records):
    for (fam, dtype), records in aot_eager_records.items():
        assert len(records) == len(ca.KINDS)
        for r in records:
            assert r["expected"] is not None, r["row"]
            assert LETTER.get(r["outcome"]) == r["expected"], (fam, dtype, r["row"],
                                                               r["diverged"], r["exception"])


@pinned
def test_the_compiled_findings_are_what_they_claim(aot_eager_records):
    by = {(fam, r["method"]): r for (fam, _), recs in aot_eager_records.items() for r in recs}
    # the memory budget recomputes the draw with fresh numbers: gradient and generator
    assert by[("local-strided", "aot_eager:budget-0")]["diverged"] == ["gradient", "generator"]
    # the compiled graph saves the hidden buffer: the later mutation trips the version check
    hidden = by[("hidden-overlap", "aot_eager:checkpoint")]["exception"]
    assert "modified by an inplace operation" in hidden["message"]
    # functionalization turns the overlapping copy eager refuses into a memmove: M
    assert by[("raw-copy", "aot_eager:checkpoint")]["outcome"] == "match"
    # AOTAutograd traces the joint graph with autograd's version check: R at compile time
    over = by[("in-segment-saved-overwrite", "aot_eager:checkpoint")]["exception"]
    assert over["type"] == "RuntimeError" and over["message"].startswith("compile: ")


def test_other_torch_versions_have_no_expectation():
    row = ca.row_label("aot_eager", "budget-0")
    assert letter(row, "local-strided", f"{PINNED}+cpu") == "D"
    assert letter(row, "local-strided", "2.99.0") is None
    assert letter(row, "local-strided", None) is None
    rec = {"row": row, "outcome": "diverge", "expected": None, "determinism_flagged": None,
           "version": "2.99.0", "framework": "torch-compile-aot-eager"}
    s = summarize(CohortConfig(frameworks=("torch-compile-aot-eager",)), [rec], 0.0)
    assert s["no_expectation"] == [row] and s["verdict"] == "as-expected"


def _one(method_name, case=None):
    adapter = ca.CompiledAdapter()
    case = case or build_case("local-strided", KEY, "float32")
    method = next(m for m in adapter.methods() if m.name == method_name)
    return observe(adapter, case, method, Reference.of(case, adapter.draw_tape(case)))


def test_a_graph_break_is_unsupported_not_a_result(monkeypatch):
    real = ca._checkpointer

    def breaking(torch, kind):
        inner = real(torch, kind)

        def ckpt(fn, *a):
            torch._dynamo.graph_break()
            return inner(fn, *a)
        return ckpt

    monkeypatch.setattr(ca, "_checkpointer", breaking)
    rec = _one("aot_eager:checkpoint")
    assert rec["outcome"] == "unsupported" and rec["detail"].startswith("graph break")


def test_a_compile_served_from_another_run_is_unsupported(monkeypatch):
    assert _one("aot_eager:budget-1")["outcome"] == "match"
    monkeypatch.setattr(torch._dynamo, "reset", lambda: None)  # keep the first compile
    rec = _one("aot_eager:budget-1")
    assert rec["outcome"] == "unsupported" and "not one fresh compile" in rec["detail"]


def test_a_compiled_run_collects_less_often_and_gives_the_threshold_back(monkeypatch):
    import gc

    real, during = ca._checkpointer, []

    def spying(torch, kind):
        during.append(gc.get_threshold())
        return real(torch, kind)

    monkeypatch.setattr(ca, "_checkpointer", spying)
    before = gc.get_threshold()
    assert _one("aot_eager:budget-1")["outcome"] == "match"
    assert during == [(ca.YOUNG, *before[1:])] and gc.get_threshold() == before
    # the heap alive after this process's first compiled run is frozen, once
    assert ca._FROZEN_IN[0] == os.getpid() and gc.get_freeze_count() > 0


def test_inductor_without_a_compiler_is_unsupported_with_a_hint(monkeypatch):
    monkeypatch.setattr(ca, "compiler_found", lambda: False)
    rec = _one("inductor:checkpoint")
    assert rec["outcome"] == "unsupported" and rec["detail"] == ca.COMPILER_HINT
    assert _one("aot_eager:budget-1")["outcome"] == "match"


@pinned
def test_a_compiled_reproducer_shows_its_divergence(aot_eager_records, tmp_path, monkeypatch):
    monkeypatch.setattr(ca.CompiledAdapter, "shrink_checks", 2)  # each candidate compiles
    records = [r for (fam, _), recs in aot_eager_records.items() if fam == "local-overlap"
               for r in recs if r["method"] == "aot_eager:budget-0"]
    (entry,) = write_reproducers(tmp_path, records)
    assert entry["kind"] == "diverged: generator, gradient" and entry["path"]
    text = (tmp_path / entry["path"]).read_text()
    assert text.count("\n") <= 40 and "torch.compile(f, backend='aot_eager'" in text
    assert shows(entry, *run_script(tmp_path / entry["path"]))
    # an R where eager matches: the script reports the compiled run's error, unwrapped
    adapter = ca.CompiledAdapter(("aot_eager",))
    method = next(m for m in adapter.methods() if m.name == "aot_eager:checkpoint")
    path = tmp_path / "hidden.py"
    path.write_text(adapter.reproducer(build_case("hidden-strided", KEY, "float32"), method,
                                       {"row": method.row}))
    assert shows({"claims": ["DIFFERS: raised RuntimeError"]}, *run_script(path))


def test_a_wrapper_reproducer_shows_its_divergence(tmp_path):
    from replayverify.cohort.repro import claims, kind_of
    from replayverify.cohort.torch_adapter import EXTRA_METHODS, TorchAdapter

    adapter = TorchAdapter()
    method = next(m for m in EXTRA_METHODS if m.name == "wrapper-no-reentrant-rng-off")
    case = build_case("hidden-overlap", KEY, "float64")
    rec = observe(adapter, case, method, Reference.of(case, adapter.draw_tape(case)))
    path = tmp_path / "w.py"
    path.write_text(adapter.reproducer(case, method, {"row": method.row}))
    assert "apply_activation_checkpointing" in path.read_text()
    assert shows({"claims": claims(kind_of(rec))}, *run_script(path))


def test_the_wrappers_reproduce_their_modes():
    for fam in ALL:
        records = run_task(f"torch/{fam}/{KEY}/float64", extra=True)
        got = {r["method"]: LETTER.get(r["outcome"]) for r in records}
        assert got["wrapper-no-reentrant"] == got["non-reentrant"], fam
        assert got["wrapper-reentrant"] == got["reentrant"], fam
        assert got["wrapper-no-reentrant-rng-off"] == got["non-reentrant-rng-off"], fam
        assert got["wrapper-reentrant-rng-off"] == got["reentrant-rng-off"], fam
        if PINNED_HERE:
            for r in records:
                if r["method"].startswith(("wrapper", "sequential")):
                    assert LETTER.get(r["outcome"]) == r["expected"], (fam, r["row"])


@pytest.mark.inductor
@pytest.mark.skipif(not ca.compiler_found(), reason="inductor needs a C++ compiler")
@pinned
def test_inductor_cells_on_one_case():
    adapter = ca.CompiledAdapter(("inductor",))
    case = build_case("local-strided", KEY, "float32")
    ref = Reference.of(case, adapter.draw_tape(case))
    for name in ("inductor:checkpoint", "inductor:budget-0"):
        method = next(m for m in adapter.methods() if m.name == name)
        r = observe(adapter, case, method, ref)
        assert LETTER.get(r["outcome"]) == letter(method.row, case.family, torch.__version__)


def test_the_committed_compiled_run_is_as_expected_with_its_reproducers():
    import json
    from pathlib import Path

    reports = Path(__file__).resolve().parents[2] / "reports" / "cohort-compile"
    s = json.loads((reports / "summary.json").read_text())
    assert s["verdict"] == "as-expected" and s["records"] == 7700 and not s["unexpected"]
    assert s["seeds"] == [420000, 420050]  # all 50 keys, engines included (84 + 70 a key)
    for e in s["reproducers"]:
        assert (reports / e["path"]).read_text().count("\n") <= 40
    assert "Verdict: **as-expected**" in (reports / "report.md").read_text()
