"""Every JAX method can match, be refused and diverge, on hand-written cases.

JAX runs in a child process: a pytest process holding JAX's threads would later fork
(the suite tests' worker pools), which JAX warns can deadlock.

Where a method cannot reach an outcome on any program it could run (native in-place
writes raise on the first write; a checkpointed impure holder leaks a tracer whenever
its segment runs an op), D is shown against a reference that differs in the generator:
the comparison path of that method, not a framework behaviour.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parents[2]
CHILD = r'''
import json, sys
from replayverify.cohort import Reference, DrawTape, build_case, observe
from replayverify.cohort.jax_adapter import METHODS, JaxAdapter
from tests.cohort import cases as hand
import jax

a = JaxAdapter()
ALL = {m.name: m for m in METHODS}
CASES = {"raw-copy": lambda: build_case("raw-copy", 420001, "float32"),
         "hidden-strided": lambda: build_case("hidden-strided", 420001, "float32"),
         "local-strided": lambda: build_case("local-strided", 420001, "float64"),
         "hidden64": lambda: build_case("hidden-strided", 420001, "float64"),
         "untracked": lambda: hand.untracked_loss("hidden-overlap"),
         "untranslatable": hand.untranslatable, "no-ops": hand.no_ops}
out = {}
for key in json.loads(sys.argv[1]):
    case_name, method, generator = key.split("|")
    case = CASES[case_name]()
    tape = a.draw_tape(case)
    if generator:
        tape = DrawTape(tape.draws, generator.encode())
    out[key] = observe(a, case, ALL[method], Reference.of(case, tape))
out["x64 after"] = bool(jax.config.jax_enable_x64)
out["float32 after"] = str(jax.numpy.zeros(1, dtype="float32").dtype)
print(json.dumps(out))
'''
FUNCTIONAL = ["functional", "checkpoint", "holder-eager"]
IN_PLACE = ["inplace-eager", "inplace-checkpoint"]
KEYS = ([f"{'hidden-strided' if m.startswith('holder') else 'raw-copy'}|{m}|" for m in FUNCTIONAL]
        + [f"untracked|{m}|" for m in FUNCTIONAL] + [f"untranslatable|{m}|" for m in FUNCTIONAL]
        + [f"local-strided|{m}|" for m in IN_PLACE] + [f"no-ops|{m}|" for m in IN_PLACE]
        + [f"no-ops|{m}|other" for m in [*IN_PLACE, "holder-checkpoint"]]
        + ["hidden64|holder-checkpoint|", "no-ops|holder-checkpoint|"])


@pytest.fixture(scope="module")
def got() -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", CHILD, json.dumps(KEYS)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", FUNCTIONAL)
def test_functional_and_eager_holder_methods(got, name):
    family = "hidden-strided" if name.startswith("holder") else "raw-copy"
    assert got[f"{family}|{name}|"]["outcome"] == "match"
    rec = got[f"untracked|{name}|"]
    assert rec["outcome"] == "diverge" and rec["diverged"] == ["gradient"]
    rec = got[f"untranslatable|{name}|"]
    assert rec["outcome"] == "rejected" and rec["exception"]["type"] == "NotImplementedError"


@pytest.mark.parametrize("name", IN_PLACE)
def test_native_in_place_is_refused_on_any_write(got, name):
    rec = got[f"local-strided|{name}|"]
    assert rec["outcome"] == "rejected" and rec["exception"]["type"] == "TypeError"
    assert got[f"no-ops|{name}|"]["outcome"] == "match"
    assert got[f"no-ops|{name}|other"]["diverged"] == ["generator"]


def test_checkpointed_impure_holder_leaks_a_tracer(got):
    rec = got["hidden64|holder-checkpoint|"]
    assert rec["outcome"] == "rejected"
    assert rec["exception"]["type"] == "UnexpectedTracerError"
    assert got["no-ops|holder-checkpoint|"]["outcome"] == "match"
    assert got["no-ops|holder-checkpoint|other"]["outcome"] == "diverge"


def test_float64_is_enabled_only_inside_a_run(got):
    assert got["x64 after"] is False and got["float32 after"] == "float32"
