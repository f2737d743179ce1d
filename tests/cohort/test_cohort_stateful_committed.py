"""The committed run of the stateful rows (reports/cohort-stateful/) is as expected, with
every row judged and every framework's version recorded."""

import json
from pathlib import Path

from replayverify.cohort.expected import expected_letter

REPORTS = Path(__file__).resolve().parents[2] / "reports" / "cohort-stateful"


def test_committed_stateful_run_is_as_expected_and_names_its_versions():
    s = json.loads((REPORTS / "summary.json").read_text())
    assert s["verdict"] == "as-expected" and not s["unexpected"] and not s["not_run"]
    assert s["frameworks"]["keras-torch"] == "3.15.1 (torch 2.13.0+cpu)"
    assert s["frameworks"]["jax-state"] == "0.10.2"
    for row, cell in s["table"].items():
        if row.startswith("replayverify "):
            continue
        family = row.split(" [")[1][:-1] if " [" in row else "hidden-strided"
        assert expected_letter(row, family) is not None, row
        assert cell["unexpected_records"] == 0, row
    keys = s["seeds"][1] - s["seeds"][0]  # per key: both hidden families, both dtypes
    assert s["table"]["JAX mutable-ref checkpoint"]["D"] == 4 * keys
    assert s["table"]["keras-torch RematScope(full) [running-stats]"]["D"] == 2 * keys
    assert "Verdict: **as-expected**" in (REPORTS / "report.md").read_text()
