"""The committed suite reports are reproducible: regenerating gives the same counts."""

import json
from pathlib import Path

import pytest

from replayverify import engines
from replayverify.verifier.suite import SUITE_FAMILIES, SuiteConfig, run_suite

REPORTS = Path(__file__).resolve().parents[2] / "reports"
COUNTED = ("programs", "seed", "records", "verdict", "outcomes", "controls", "generated",
           "coverage", "undetected_mutants")


@pytest.mark.parametrize("name, config", [
    ("suite-s0-64", {}),  # the default rotation, mixed included
    ("suite-s0-60-hazard", {"family": "hazard", "mutants": True}),
])
def test_small_seeded_suite_reproduces_its_committed_summary(tmp_path, name, config):
    committed = json.loads((REPORTS / name / "summary.json").read_text())
    n = committed["programs"]
    fresh = run_suite(SuiteConfig(programs=n, seed=0, workers=1, out=tmp_path, **config))
    # counts are exact; measured errors may differ in the last bits between CPUs (numpy's
    # SIMD transcendental functions), so they are compared as figures of the same size
    for key in COUNTED:
        assert fresh[key] == committed[key], key
    assert fresh["max_abs_err"].keys() == committed["max_abs_err"].keys()
    for key, err in committed["max_abs_err"].items():
        if key.startswith(("gradient", "forward-jacobian", "complex-step")):
            assert fresh["max_abs_err"][key] <= 1e-12 and err <= 1e-12, key


def test_committed_default_suite_is_clean_complete_and_covers_everything():
    s = json.loads((REPORTS / "suite-s0-1024" / "summary.json").read_text())
    assert s["programs"] == 1024 and s["verdict"] == "clean"
    # every (program, check, engine) kept: 15 records per program without mutants
    assert s["records"] == sum(sum(v.values()) for v in s["outcomes"].values()) == 1024 * 15
    assert set(s["generated"]["families"]) == set(SUITE_FAMILIES)
    cov = s["coverage"]
    assert cov["missing_cells"] == [] and cov["cells_occurred"] == cov["cells_possible"]
    assert cov["missing_refusals"] == [] and all(cov["admission_refusals"].values())


@pytest.mark.parametrize("name", ["suite-s0-256-mutants", "suite-s0-60-hazard"])
def test_committed_mutant_suites_detect_every_mutant(name):
    s = json.loads((REPORTS / name / "summary.json").read_text())
    assert s["verdict"] == "clean" and s["undetected_mutants"] == []
    mutants = {k: v for k, v in s["controls"].items() if k.startswith("mutant:")}
    assert set(mutants) == set(engines.mutant_names())
    assert all(v["detected"] > 0 for v in mutants.values())
