"""Fuzzed surfaces (issue #28): damaged run directories resumed, faulty engine plug-ins,
option garbage, two runs at once, kill-and-resume. A derandomized slice (a fixed seed);
scripts/fuzz_surfaces.sh runs thousands."""

from __future__ import annotations

import random

from tests.property.fuzz_surfaces import Fixtures, campaign, concurrent_case, kill_resume_case

IN_PROCESS = {"damage": 10, "faulty-engine": 4, "options": 10}


def test_fuzzed_surfaces_refuse_in_one_line_and_never_lose_or_invent_records(tmp_path):
    failures = campaign(40, 0, tmp_path, IN_PROCESS, report=lambda _line: None)
    assert not failures, [(f.kind, f.what, f.problems) for f in failures]


def test_two_runs_at_once_and_a_killed_run_end_with_the_records_of_one_run(tmp_path):
    fx = Fixtures(tmp_path)
    for case in (concurrent_case, kill_resume_case):
        (tmp_path / "w").mkdir(exist_ok=True)
        result = case(random.Random(0), tmp_path / "w", fx)
        assert not result.problems, (result.kind, result.what, result.problems)
