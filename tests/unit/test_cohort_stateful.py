"""The stateful-recomputation cohort rows (issue 26): JAX mutable refs and remat policies,
Flax NNX, Keras 3 on torch and JAX.

Frameworks run in child processes (``cohort/isolated.py``, or ``python -c`` for flax):
this process stays free of JAX's threads, which would later fork (the suite tests).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replayverify.cohort import Method, Reference, build_case, observe, registry
from replayverify.cohort.adapter import Adapter
from replayverify.cohort.expected import EXPECTED, expected_letter
from replayverify.cohort.expected_stateful import EXPECTED_STATEFUL, expected_stateful
from replayverify.cohort.isolated import Isolated
from replayverify.cohort.runner import run_task

ROOT = Path(__file__).resolve().parents[2]
NEW = ("jax-state", "jax-remat3", "flax", "keras-torch", "keras-jax")
HAS = {m: importlib.util.find_spec(m) is not None for m in ("jax", "flax", "keras", "torch")}


LETTER = {"match": "M", "rejected": "R", "diverge": "D"}


def by_method(records: list[dict]) -> dict[str, dict]:
    """The records of one task by method, each as its expected cell says (exact cells)."""
    for r in records:
        assert r["expected"] is not None and LETTER[r["outcome"]] == r["expected"], r
    return {r["method"]: r for r in records}


def test_new_frameworks_are_registered_adapters_and_do_not_import_them():
    before = {m for m in ("jax", "keras", "flax") if m in sys.modules}
    for name in NEW:
        a = registry.get(name)
        assert isinstance(a, Adapter) and a.name == name
        assert a.methods() and all(isinstance(m, Method) for m in a.methods())
    assert {m for m in ("jax", "keras", "flax") if m in sys.modules} == before


def test_stateful_rows_have_expectations_outside_the_paper_table():
    assert not set(EXPECTED_STATEFUL) & set(EXPECTED)  # reports/cohort stays as it is
    assert expected_letter("JAX mutable-ref checkpoint", "hidden-strided") == "D"
    assert expected_letter("JAX mutable-ref checkpoint [running-stats]", "running-stats") == "D"
    assert expected_letter("keras-jax keras.remat", "raw-copy") == "R"
    assert expected_stateful("torch reentrant", "hidden-strided") is None
    assert expected_letter("torch reentrant", "hidden-strided") == "D"  # unchanged


def test_stateful_cells_are_expected_only_with_the_versions_they_were_observed_with():
    row = "JAX mutable-ref checkpoint"
    assert expected_letter(row, "hidden-strided", "0.10.2") == "D"
    assert expected_letter(row, "hidden-strided", "0.11.0") is None  # no-expectation
    assert expected_letter("keras-torch keras.remat", "raw-copy", "3.15.1 (torch 2.13.0+cpu)")
    assert expected_letter("keras-torch keras.remat", "raw-copy", "3.16.0 (torch 2.13.0+cpu)") \
        is None
    committed = json.loads((Path(__file__).resolve().parents[2] / "reports" /
                            "cohort-stateful" / "summary.json").read_text())
    versions = {v for fw, v in committed["frameworks"].items() if fw != "replayverify"}
    assert versions and all(expected_stateful(row, "local-strided", v) for v in versions)


def test_isolated_child_answers_and_names_the_exceptions_it_raised():
    child = Isolated("replayverify.cohort.engines_adapter:EnginesAdapter", {"X_TEST": "1"})
    case = build_case("hidden-strided", 420000, "float64")
    obs = child.call("run", case, Method("region", "r"))
    assert obs.buffers.keys() == {b.name for b in case.program.buffers}
    with pytest.raises(Exception) as info:
        child.call("run", case, Method("no-such-engine", "r"))
    assert type(info.value).__name__ == "KeyError" and "no-such-engine" in str(info.value)
    assert child.call("version")  # the same child, still serving


@pytest.mark.skipif(not HAS["jax"], reason="jax not installed")
def test_jax_mutable_ref_checkpoint_diverges_on_a_generated_hidden_case():
    recs = by_method(run_task("jax-state/hidden-strided/420000/float32"))
    assert recs["ref-eager"]["outcome"] == "match"
    ck = recs["ref-checkpoint"]
    assert ck["outcome"] == "diverge" and ck["expected"] == "D"
    assert ck["diverged"] == ["gradient", "buffer hid"]  # the update applied twice
    assert recs["policy-names"]["outcome"] == "match"
    assert all(r["version"] == importlib.metadata.version("jax") for r in recs.values())


@pytest.mark.skipif(not HAS["jax"], reason="jax not installed")
def test_jax_remat3_refuses_a_closed_over_ref():
    recs = by_method(run_task("jax-remat3/hidden-overlap/420000/float64"))
    assert recs["ref-checkpoint"]["exception"]["type"] == "AssertionError"
    assert recs["policy-names"]["outcome"] == "match"
    assert recs["ref-checkpoint"]["row"].endswith(", JAX_REMAT3=1")


@pytest.mark.skipif(not (HAS["keras"] and HAS["torch"]), reason="keras or torch missing")
def test_keras_torch_remat_updates_the_running_statistic_again():
    recs = by_method(run_task("keras-torch/running-stats/420000/float32", extra=True))
    assert recs["layers"]["outcome"] == "match"
    for m in ("remat-scope", "remat"):
        assert recs[m]["outcome"] == "diverge" and "buffer stat" in recs[m]["diverged"]
        assert "generator" in recs[m]["diverged"]  # the SeedGenerator drew again
    assert recs["layers"]["version"].startswith(importlib.metadata.version("keras"))


@pytest.mark.skipif(not (HAS["keras"] and HAS["jax"]), reason="keras or jax missing")
def test_keras_jax_remat_leaks_a_tracer():
    recs = by_method(run_task("keras-jax/hidden-strided/420000/float64"))
    assert recs["layers"]["outcome"] == "match"
    assert recs["remat-scope"]["exception"]["type"] == "UnexpectedTracerError"


FLAX_CHILD = r'''
import json
from replayverify.cohort.runner import run_task
print(json.dumps(run_task("flax/running-stats/420000/float64", extra=True)))
'''


@pytest.mark.skipif(not HAS["flax"], reason="flax not installed")
def test_flax_nnx_remat_threads_its_state():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", FLAX_CHILD], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    recs = by_method(json.loads(run.stdout.splitlines()[-1]))
    assert recs["nnx"]["outcome"] == recs["nnx-remat"]["outcome"] == "match"


def run_reproducer(tmp_path: Path, framework: str, task: str, method: str,
                   extra: bool = False) -> tuple[subprocess.CompletedProcess, dict]:
    """The adapter's reproducer for ``method`` on ``task``'s case, run alone (the method's
    record made by the adapter, as the runner makes it, and checked against its cell)."""
    adapter = registry.get(framework)
    _, fam, seed, dtype = task.split("/")
    case = build_case(fam, int(seed), dtype)
    m = next(m for m in adapter.methods(extra) if m.name == method)
    rec = observe(adapter, case, m, Reference.of(case, adapter.draw_tape(case)))
    assert LETTER[rec["outcome"]] == expected_letter(m.row, fam)
    text = adapter.reproducer(case, m, rec)
    assert text is not None and len(text.splitlines()) <= 40
    script = tmp_path / "repro.py"
    script.write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the framework only
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    return run, rec


def claimed(run: subprocess.CompletedProcess) -> list[str]:
    return [line for line in run.stdout.splitlines() if line.startswith("DIFFERS: ")]


@pytest.mark.skipif(not HAS["jax"], reason="jax not installed")
def test_jax_reproducer_shows_the_double_update(tmp_path):
    run, rec = run_reproducer(tmp_path, "jax-state", "jax-state/hidden-overlap/420001/float64",
                              "ref-checkpoint")
    assert rec["outcome"] == "diverge" and run.returncode == 1, run.stderr[-2000:]
    lines = claimed(run)
    assert any(x.startswith("DIFFERS: gradient") for x in lines) == ("gradient" in
                                                                     rec["diverged"])
    assert "DIFFERS: buffer hid" in lines


@pytest.mark.skipif(not (HAS["keras"] and HAS["torch"]), reason="keras or torch missing")
def test_keras_torch_reproducer_shows_the_running_statistic(tmp_path):
    run, rec = run_reproducer(tmp_path, "keras-torch",
                              "keras-torch/running-stats/420001/float32", "remat-scope",
                              extra=True)
    assert run.returncode == 1, run.stderr[-2000:]
    lines = claimed(run)
    assert "DIFFERS: buffer stat" in lines and "DIFFERS: generator state" in lines
    assert any(x.startswith("DIFFERS: gradient") for x in lines) == ("gradient" in
                                                                     rec["diverged"])


@pytest.mark.skipif(not (HAS["keras"] and HAS["jax"]), reason="keras or jax missing")
def test_keras_jax_reproducer_shows_the_leaked_tracer(tmp_path):
    run, rec = run_reproducer(tmp_path, "keras-jax", "keras-jax/local-strided/420001/float32",
                              "remat")
    assert run.returncode == 1, run.stderr[-2000:]
    assert claimed(run) == [f"DIFFERS: raised {rec['exception']['type']}: "
                            f"{rec['exception']['message']}"]
