"""The committed full run (reports/cohort/) shows the paper's Table 2 at 50 keys and every
row as expected; `python benchmarks/cohort_speed.py --out reports/cohort` remakes it."""

import json
from pathlib import Path

from replayverify.cohort import EXPECTED
from replayverify.cohort.expected_compiled import EXPECTED_COMPILED

REPORTS = Path(__file__).resolve().parents[2] / "reports" / "cohort"

TABLE2 = {  # the reference paper's Table 2, written out
    "torch functional reference": (500, 0, 0),
    "torch native eager": (400, 100, 0),
    "torch reentrant": (200, 100, 200),
    "torch non-reentrant": (200, 100, 200),
    "torch reentrant, RNG unpreserved": (0, 100, 400),
    "torch non-reentrant, RNG unpreserved": (0, 100, 400),
    "torch transactional non-reentrant": (400, 100, 0),
    "JAX functional reference": (500, 0, 0),
    "JAX functional checkpoint": (500, 0, 0),
    "JAX native in-place eager": (0, 500, 0),
    "JAX native in-place checkpoint": (0, 500, 0),
    "JAX impure-holder eager": (200, 0, 0),
    "JAX impure-holder checkpoint": (0, 200, 0),
}


def test_committed_cohort_reproduces_table_2_and_every_extra_row():
    s = json.loads((REPORTS / "summary.json").read_text())
    assert s["seeds"] == [420000, 420050] and s["extra"] and s["verdict"] == "as-expected"
    for row, cells in TABLE2.items():
        c = s["table"][row]
        assert (c["M"], c["R"], c["D"]) == cells, row
    # every row judged, none without expectation (the eager wrapper rows of issue #25 are
    # judged by expected_compiled; a run made before them does not have them)
    assert set(EXPECTED) <= set(s["table"]) <= set(EXPECTED) | set(EXPECTED_COMPILED)
    assert s["records"] == sum(c["M"] + c["R"] + c["D"] for c in s["table"].values())
    assert all(c["determinism_flagged"] in (None, 0) for c in s["table"].values())
    report = (REPORTS / "report.md").read_text()
    assert "Verdict: **as-expected**" in report and "| torch reentrant | 200 / 100 / 200" in report
