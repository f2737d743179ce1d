"""Fuzzed program files and cards: one-line refusals, no traceback, no warning, bounded
memory (issue #13). A few hundred derandomized inputs; scripts/fuzz.sh runs 10,000+."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from tests.property.fuzz_inputs import Case, cases, run_case


@settings(max_examples=300, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(cases())
def test_fuzzed_inputs_are_refused_cleanly_or_run(tmp_path_factory, case: Case) -> None:
    result = run_case(case, tmp_path_factory.mktemp("fuzz"))
    assert not result.problems, (result.outcome, result.problems)
