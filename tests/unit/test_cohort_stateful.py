"""The stateful-recomputation cohort rows (issue 26): JAX mutable refs and remat policies,
Flax NNX and Linen, Keras 3 on torch and JAX.

Frameworks run in child processes (``cohort/isolated.py``, or ``python -c`` for flax):
this process stays free of JAX's threads, which would later fork (the suite tests).

One task per framework, every method, exact cells (``by_method``): each is run once, in
a module-scoped fixture, and its tests and the reproducer tests read its records (a
reproducer is written from the task's own record, as ``write_reproducers`` does; only
the script's own run is extra). Both flax frameworks run in one child process.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from replayverify.cohort import Method, build_case, registry
from replayverify.cohort.adapter import Adapter
from replayverify.cohort.expected import EXPECTED, expected_letter
from replayverify.cohort.expected_stateful import EXPECTED_STATEFUL, expected_stateful
from replayverify.cohort.isolated import Isolated
from replayverify.cohort.runner import run_task

ROOT = Path(__file__).resolve().parents[2]
NEW = ("jax-state", "jax-remat3", "flax", "flax-linen", "keras-torch", "keras-jax")
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


# framework -> (the packages it needs, its one task, --extra)
TASKS = {"jax-state": (("jax",), "jax-state/hidden-strided/420000/float32", False),
         "jax-remat3": (("jax",), "jax-remat3/hidden-overlap/420000/float64", False),
         "keras-torch": (("keras", "torch"), "keras-torch/running-stats/420000/float32", True),
         "keras-jax": (("keras", "jax"), "keras-jax/hidden-strided/420000/float64", False)}
# the reproducers run: name -> (framework, task, method); the tasks' own cases but one
SCRIPTS = {"jax": ("jax-state", TASKS["jax-state"][1], "ref-checkpoint"),
           "jax jit": ("jax-state", TASKS["jax-state"][1], "ref-jit-checkpoint"),
           "jax jit local": ("jax-state", "jax-state/local-strided/420000/float32",
                             "ref-jit-checkpoint"),
           "remat3 jit": ("jax-remat3", TASKS["jax-remat3"][1], "ref-jit-checkpoint"),
           "keras-torch": ("keras-torch", TASKS["keras-torch"][1], "remat-scope"),
           "keras-jax": ("keras-jax", TASKS["keras-jax"][1], "remat")}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> Iterator[dict[str, Future]]:
    """Every framework's task, the flax child and the reproducer scripts, started at once
    on two threads (CI has two cores): each runs in a process of its own (an isolated
    adapter's child, ``python -c``, the script), so two run side by side and the records
    are what each would give alone. Only those whose packages are installed."""
    with ThreadPoolExecutor(2) as pool:
        out = {fw: pool.submit(run_task, task, extra=extra)
               for fw, (needs, task, extra) in TASKS.items() if all(HAS[m] for m in needs)}
        if HAS["flax"]:
            out["flax"] = pool.submit(run_flax_child)
        for name, (fw, task, method) in SCRIPTS.items():
            if fw in out:
                out[f"script {name}"] = pool.submit(
                    run_reproducer, tmp_path_factory.mktemp("repro"), fw, task, method)
        yield out


def records_of(framework: str):
    """A fixture: ``framework``'s task's records by method, each as its cell says."""
    @pytest.fixture(scope="module")
    def records(jobs) -> dict[str, dict]:
        return by_method(jobs[framework].result())
    return records


jax_state, jax_remat3, keras_torch, keras_jax = map(records_of, TASKS)


needs_jax = pytest.mark.skipif(not HAS["jax"], reason="jax not installed")
needs_keras_torch = pytest.mark.skipif(not (HAS["keras"] and HAS["torch"]),
                                       reason="keras or torch missing")
needs_keras_jax = pytest.mark.skipif(not (HAS["keras"] and HAS["jax"]),
                                     reason="keras or jax missing")


@needs_jax
def test_jax_mutable_ref_checkpoint_diverges_on_a_generated_hidden_case(jax_state):
    recs = jax_state
    assert recs["ref-eager"]["outcome"] == "match"
    for m in ("ref-checkpoint", "ref-jit-checkpoint"):
        ck = recs[m]
        assert ck["outcome"] == "diverge" and ck["expected"] == "D"
        assert ck["diverged"] == ["gradient", "buffer hid"]  # the update applied twice
    assert recs["policy-names"]["outcome"] == "match"
    assert all(r["version"] == importlib.metadata.version("jax") for r in recs.values())


@needs_jax
def test_jax_remat3_refuses_a_closed_over_ref(jax_remat3):
    recs = jax_remat3
    assert recs["ref-checkpoint"]["exception"]["type"] == "AssertionError"
    assert recs["ref-jit-checkpoint"]["exception"]["type"] == "AttributeError"
    assert recs["policy-names"]["outcome"] == "match"
    assert recs["ref-checkpoint"]["row"].endswith(", JAX_REMAT3=1")


@needs_keras_torch
def test_keras_torch_remat_updates_the_running_statistic_again(keras_torch):
    recs = keras_torch
    assert recs["layers"]["outcome"] == "match"
    for m in ("remat-scope", "remat"):
        assert recs[m]["outcome"] == "diverge" and "buffer stat" in recs[m]["diverged"]
        assert "generator" in recs[m]["diverged"]  # the SeedGenerator drew again
    assert recs["layers"]["version"].startswith(importlib.metadata.version("keras"))


@needs_keras_jax
def test_keras_jax_remat_leaks_a_tracer(keras_jax):
    recs = keras_jax
    assert recs["layers"]["outcome"] == "match"
    assert recs["remat-scope"]["exception"]["type"] == "UnexpectedTracerError"


FLAX_CHILD = r'''
import json
from replayverify.cohort import Reference, build_case, observe
from replayverify.cohort.linen_adapter import METHODS, LinenAdapter
from replayverify.cohort.runner import run_task
from tests.cohort import cases as hand

out = {fw: run_task(f"{fw}/running-stats/420000/float64", extra=True)
       for fw in ("flax", "flax-linen")}
out["flax-linen hidden"] = run_task("flax-linen/hidden-overlap/420000/float32")
a, case = LinenAdapter(), hand.untracked_loss("hidden-strided")
out["linen untracked"] = [observe(a, case, m, Reference.of(case, a.draw_tape(case)))
                          for m in METHODS]
print(json.dumps(out))
'''


def run_child(code: str) -> dict:
    """Run ``code`` in a fresh Python (this checkout first on its path) and return the
    JSON object its last line prints."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.splitlines()[-1])


def run_flax_child() -> dict:
    return run_child(FLAX_CHILD)


@pytest.fixture(scope="module")
def flax_child(jobs) -> dict:
    return jobs["flax"].result()


@pytest.mark.skipif(not HAS["flax"], reason="flax not installed")
def test_flax_nnx_remat_threads_its_state(flax_child):
    recs = by_method(flax_child["flax"])
    assert recs["nnx"]["outcome"] == recs["nnx-remat"]["outcome"] == "match"


@pytest.mark.skipif(not HAS["flax"], reason="flax not installed")
def test_flax_linen_remat_threads_its_collections_and_rng(flax_child):
    for task in ("flax-linen", "flax-linen hidden"):
        recs = by_method(flax_child[task])
        assert recs["linen"]["outcome"] == recs["linen-remat"]["outcome"] == "match"
        assert recs["linen-remat"]["row"].startswith("flax nn.remat")
        assert recs["linen"]["version"] == registry.get("flax").version()
    # the comparison sees a difference where there is one: a loss reading an untracked op
    for rec in flax_child["linen untracked"]:
        assert rec["outcome"] == "diverge" and rec["diverged"] == ["gradient"]


def test_flax_linen_without_flax_is_unsupported_with_the_hint(monkeypatch):
    from replayverify.cohort import flax_adapter

    real = flax_adapter.importlib.util.find_spec
    monkeypatch.setattr(flax_adapter.importlib.util, "find_spec",
                        lambda name, *a: None if name == "flax" else real(name, *a))
    recs = run_task("flax-linen/hidden-strided/420000/float32")
    assert [r["method"] for r in recs] == ["linen", "linen-remat"]
    assert all(r["outcome"] == "unsupported" and r["detail"] == flax_adapter.HINT
               for r in recs)


def run_reproducer(tmp_path: Path, framework: str, task: str,
                   method: str) -> subprocess.CompletedProcess:
    """The adapter's reproducer for ``method`` on ``task``'s case, run alone."""
    adapter = registry.get(framework)
    _, fam, seed, dtype = task.split("/")
    m = next(m for m in adapter.methods(True) if m.name == method)
    return run_script(tmp_path, adapter.reproducer(build_case(fam, int(seed), dtype), m,
                                                   {"row": m.row}))


def reproduced(jobs: dict, name: str, rec: dict) -> subprocess.CompletedProcess:
    """Script ``name``'s run, for ``rec`` (its task's record of the script's method, as
    ``write_reproducers`` would write it: a D or an R, as its cell says)."""
    fw, task, method = SCRIPTS[name]
    assert (rec["framework"], rec["task"], rec["method"]) == (fw, task, method)
    assert LETTER[rec["outcome"]] == expected_letter(rec["row"], rec["family"]) != "M"
    return jobs[f"script {name}"].result()


def run_script(tmp_path: Path, text: str | None) -> subprocess.CompletedProcess:
    """A reproducer's text, run as a script without replayverify on the path."""
    assert text is not None and len(text.splitlines()) <= 40
    script = tmp_path / "repro.py"
    script.write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the framework only
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)


def claimed(run: subprocess.CompletedProcess) -> list[str]:
    return [line for line in run.stdout.splitlines() if line.startswith("DIFFERS: ")]


def shows_the_exception(run: subprocess.CompletedProcess, rec: dict) -> None:
    """``rec`` (an R) reproduced standalone: exit 1, the record's exception its one line."""
    assert run.returncode == 1, run.stderr[-2000:]
    assert claimed(run) == [f"DIFFERS: raised {rec['exception']['type']}: "
                            f"{rec['exception']['message']}"]


@needs_jax
@pytest.mark.parametrize("method", ["ref-checkpoint", "ref-jit-checkpoint"])
def test_jax_reproducer_shows_the_double_update(jobs, jax_state, method):
    rec = jax_state[method]
    run = reproduced(jobs, "jax jit" if "jit" in method else "jax", rec)
    assert rec["outcome"] == "diverge" and run.returncode == 1, run.stderr[-2000:]
    lines = claimed(run)
    assert any(x.startswith("DIFFERS: gradient") for x in lines) == ("gradient" in
                                                                     rec["diverged"])
    assert "DIFFERS: buffer hid" in lines and len(lines) == len(rec["diverged"])


@needs_jax
def test_jax_remat3_jit_reproducer_shows_the_refusal(jobs, jax_remat3):
    rec = jax_remat3["ref-jit-checkpoint"]
    shows_the_exception(reproduced(jobs, "remat3 jit", rec), rec)


@needs_keras_torch
def test_keras_torch_reproducer_shows_the_running_statistic(jobs, keras_torch):
    rec = keras_torch["remat-scope"]
    run = reproduced(jobs, "keras-torch", rec)
    assert run.returncode == 1, run.stderr[-2000:]
    lines = claimed(run)
    assert "DIFFERS: buffer stat" in lines and "DIFFERS: generator state" in lines
    assert any(x.startswith("DIFFERS: gradient") for x in lines) == ("gradient" in
                                                                     rec["diverged"])


@needs_keras_jax
def test_keras_jax_reproducer_shows_the_leaked_tracer(jobs, keras_jax):
    rec = keras_jax["remat"]
    shows_the_exception(reproduced(jobs, "keras-jax", rec), rec)


@needs_jax
def test_a_jit_reproducer_of_a_matching_case_shows_nothing(jobs):
    """The script makes its initial arrays outside jit, as the adapter does: built inside
    it, a strided ref write into one crashes JAX's state discharge on a local case."""
    fw, task, method = SCRIPTS["jax jit local"]
    row = next(m.row for m in registry.get(fw).methods() if m.name == method)
    assert expected_letter(row, task.split("/")[1]) == "M"
    run = jobs["script jax jit local"].result()
    assert (run.returncode, claimed(run)) == (0, []), run.stdout + run.stderr[-2000:]


class _CacheProbe:
    """An adapter whose draw_tape fails naming the JAX cache directory it was given."""

    name, label = "cache-probe", "probe"

    def missing(self):
        return None

    def version(self):
        return "0"

    def methods(self, extra=False):
        return (Method("m", "probe m"),)

    def draw_tape(self, case):
        raise RuntimeError(f"cache={os.environ.get('JAX_COMPILATION_CACHE_DIR')}")

    def run(self, case, method):  # pragma: no cover - never reached (no reference)
        raise AssertionError


def test_a_cohort_run_shares_one_temporary_jax_compilation_cache(monkeypatch):
    from replayverify.cohort.runner import CohortConfig, run_records

    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    registry.register("cache-probe", _CacheProbe())
    try:
        cfg = CohortConfig(frameworks=("cache-probe",), seeds=(420000, 420001),
                           families=("raw-copy",), workers=1, timeout=0)
        seen = {r["detail"].rpartition("cache=")[2] for r in run_records(cfg)}
    finally:
        registry.unregister("cache-probe")
    (path,) = seen  # one directory for the run's every task
    assert path != "None" and "replayverify-jax-cache-" in path
    assert not Path(path).exists()  # removed when the run ends
    assert "JAX_COMPILATION_CACHE_DIR" not in os.environ  # the variables restored


def test_a_users_own_jax_compilation_cache_is_kept(monkeypatch, tmp_path):
    from replayverify.cohort.compile_cache import shared_compile_cache

    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", raising=False)
    with shared_compile_cache() as path:
        assert path == str(tmp_path) == os.environ["JAX_COMPILATION_CACHE_DIR"]
        assert "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ
    assert tmp_path.exists() and os.environ["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path)


# Two cases of one shape (the same ops and views; other numbers): local-overlap 420000 and
# 420004 (the views at the same places), 420003 and 420005 (at other places).
SHARED_CHILD = r"""
import json, os, sys, tempfile
from replayverify.cohort.jax_state_adapter import CHILD_XLA_FLAGS
os.environ.update(XLA_FLAGS=CHILD_XLA_FLAGS, JAX_COMPILATION_CACHE_DIR=tempfile.mkdtemp(),
                  JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                  JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1")
import jax
from jax._src import monitoring
from replayverify.cohort import build_case
from replayverify.cohort import jax_state_adapter as jsa

hits = []
monitoring.register_event_listener(
    lambda event, **kw: hits.append(1) if event.endswith("/cache_hits") else None)


class Constants(jsa._StateRun):  # the case's numbers as constants in the jitted program
    def numbers(self):
        return {}

    def with_numbers(self, xs, given):
        return self.program(xs)


def observe(run, case, method):
    with jax.enable_x64(True):
        o = run(jax, case, method).observe()
    return [o.gradient.tobytes().hex(), {k: v.hex() for k, v in o.buffers.items()},
            o.generator.hex()]


out = {}
for method, (a, b) in (("ref-jit-checkpoint", (420000, 420004)),
                       ("jit-cse", (420003, 420005))):
    first = observe(jsa._StateRun, build_case("local-overlap", a, "float32"), method)
    before = len(hits)
    case = build_case("local-overlap", b, "float32")
    second = observe(jsa._StateRun, case, method)
    out[method] = {"hits": len(hits) - before, "same": first == second,
                   "as_constants": second == observe(Constants, case, method)}
print(json.dumps(out))
"""


@needs_jax
def test_jit_cases_of_one_shape_share_their_compiled_programs():
    """The jit methods pass the case's numbers (and where its views are) as arguments:
    the second case of a shape loads both its programs (forward, backward) from the
    persistent compilation cache, and observes what the program with the numbers as
    constants observes, to the byte."""
    out = run_child(SHARED_CHILD)
    for method in ("ref-jit-checkpoint", "jit-cse"):
        assert out[method] == {"hits": 2, "same": False, "as_constants": True}, (method, out)


# One process's JitMemo over cases of one shape (local-overlap 420003 and 420005: the
# views at other places) and hidden-strided 420003 and 420006 (a hidden family: its refs
# are the case's own).
MEMO_CHILD = r"""
import json, os, tempfile
from replayverify.cohort.jax_state_adapter import CHILD_XLA_FLAGS
os.environ.update(XLA_FLAGS=CHILD_XLA_FLAGS, JAX_COMPILATION_CACHE_DIR=tempfile.mkdtemp(),
                  JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                  JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1")
import jax
from jax._src import monitoring
from replayverify.cohort import build_case
from replayverify.cohort import jax_state_adapter as jsa

events = []
monitoring.register_event_duration_secs_listener(lambda event, secs, **kw: events.append(1))


def observe(case, method, jit):
    with jax.enable_x64(True):
        o = jsa._StateRun(jax, case, method, jit).observe()
    return [o.gradient.tobytes().hex(), {k: v.hex() for k, v in o.buffers.items()},
            o.generator.hex()]


out = {}
for family, a, b in (("local-overlap", 420003, 420005), ("hidden-strided", 420003, 420006)):
    first, second = (build_case(family, s, "float32") for s in (a, b))
    keys = [jsa.shape_key(c, starts) for starts in (False, True) for c in (first, second)]
    for method in ("jit-cse", "ref-jit-checkpoint"):
        memo = jsa.JitMemo()
        observe(first, method, memo)
        before = len(events)
        served = observe(second, method, memo)
        out[f"{family} {method}"] = {
            "compiled": len(events) > before, "memoised": len(memo.jitted),
            "as_fresh": served == observe(second, method, None)}
    out[family] = [keys[0] == keys[1], keys[2] == keys[3]]
small = jsa.JitMemo(size=1)  # the least recently used shape goes
for family in ("local-overlap", "hidden-strided"):
    observe(build_case(family, 420003, "float32"), "jit-cse", small)
last = jsa.shape_key(build_case("hidden-strided", 420003, "float32"), False)
out["evicted"] = list(small.jitted) == [("jit-cse", last)]
print(json.dumps(out))
"""


@needs_jax
def test_a_memoised_jit_program_serves_a_case_of_its_shape_as_a_fresh_one_would():
    """``JitMemo``: the second case of a shape (the same ``shape_key``) runs the first's
    jitted program with no lowering or compiling at all and observes, to the byte, what a
    program jitted for it alone observes; the mutable-ref methods' key holds where the
    views start (they slice there statically), the functional ones' does not; a case with
    hidden refs (its own, closed over) is jitted afresh and never memoised; a full memo
    lets its least recently used shape go."""
    out = run_child(MEMO_CHILD)
    assert out["local-overlap"] == [True, False]  # same shape, views elsewhere
    assert out["local-overlap jit-cse"] == {"compiled": False, "memoised": 1,
                                            "as_fresh": True}
    assert out["local-overlap ref-jit-checkpoint"] == {"compiled": True, "memoised": 2,
                                                       "as_fresh": True}
    assert out["hidden-strided"][0]  # one shape, yet its own refs: never memoised
    for method in ("jit-cse", "ref-jit-checkpoint"):
        memoised = 1 if method == "jit-cse" else 0
        assert out[f"hidden-strided {method}"]["memoised"] == memoised
        assert out[f"hidden-strided {method}"]["as_fresh"]
    assert out["evicted"]


def test_an_isolated_child_can_be_ended_and_a_later_call_starts_another():
    child = Isolated("replayverify.cohort.engines_adapter:EnginesAdapter", {})
    assert child.call("version")
    first = child._child
    child.close()
    assert first.poll() is not None  # ended
    assert child.call("version") and child._child is not first
    child.close()


def test_a_worker_moving_to_another_framework_closes_the_adapter_it_leaves(monkeypatch):
    from replayverify.cohort import runner
    from replayverify.cohort.engines_adapter import EnginesAdapter

    closed = []

    class Closing(EnginesAdapter):
        def close(self):
            closed.append(self.name)

    registry.register("test-closing", Closing())
    try:
        monkeypatch.setattr(runner, "_last_framework", [])
        for task in ("test-closing/hidden-strided/420000/float64",
                     "test-closing/hidden-strided/420001/float64"):
            runner._run_one((task, False))
        assert closed == []  # the same framework: kept
        runner._run_one(("replayverify/hidden-strided/420000/float64", False))
        assert len(closed) == 1  # left for another framework: closed once
    finally:
        registry.unregister("test-closing")
    # a framework unregistered since (a user's adapter of an earlier run in this process,
    # or one a forked worker inherited) is left alone, and the task runs
    monkeypatch.setattr(runner, "_last_framework", ["test-closing"])
    assert runner._run_one(("replayverify/hidden-strided/420000/float64", False))
