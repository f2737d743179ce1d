"""The committed suite reports are reproducible: regenerating gives the same counts."""

import json
from pathlib import Path

from replayverify.verifier.suite import SuiteConfig, run_suite

REPORTS = Path(__file__).resolve().parents[2] / "reports"


def test_small_seeded_suite_reproduces_its_committed_summary(tmp_path):
    committed = json.loads((REPORTS / "suite-s0-64" / "summary.json").read_text())
    fresh = run_suite(SuiteConfig(programs=64, seed=0, workers=1, out=tmp_path))
    # counts are exact; measured errors may differ in the last bits between CPUs (numpy's
    # SIMD transcendental functions), so they are compared as figures of the same size
    for key in ("programs", "seed", "records", "verdict", "outcomes", "controls",
                "generated", "undetected_mutants"):
        assert fresh[key] == committed[key], key
    assert fresh["max_abs_err"].keys() == committed["max_abs_err"].keys()
    for key, err in committed["max_abs_err"].items():
        if key.startswith(("gradient", "forward-jacobian", "complex-step")):
            assert fresh["max_abs_err"][key] <= 1e-12 and err <= 1e-12, key


def test_committed_default_suite_is_clean_and_complete():
    s = json.loads((REPORTS / "suite-s0-1024" / "summary.json").read_text())
    assert s["programs"] == 1024 and s["verdict"] == "clean"
    # every (program, check, engine) kept: 15 records per program without mutants
    assert s["records"] == sum(sum(v.values()) for v in s["outcomes"].values()) == 1024 * 15
