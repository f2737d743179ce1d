"""Shared by tests/ and docs/ (a conftest.py at the root is loaded for both, and for
``pytest docs`` alone): the derandomized Hypothesis profile for CI, and the skip log.

Skip log: with ``REPLAYVERIFY_SKIPS_TO=FILE`` set, the node id of every test or test file
that skipped itself (a missing optional extra, mostly) is appended to FILE. ``.ci/run``
runs the README's test command with only the ``test`` extra installed, then installs the
extras and runs exactly what that first run skipped, so no test file has to be listed by
hand (tests/gpu is left out: CI has no GPU).
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=40, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_SKIPS_TO = os.environ.get("REPLAYVERIFY_SKIPS_TO")


def _log_skip(report) -> None:
    if (_SKIPS_TO and report.skipped and not hasattr(report, "wasxfail")
            and not report.nodeid.startswith("tests/gpu")):
        with open(_SKIPS_TO, "a", encoding="utf-8") as fh:
            fh.write(report.nodeid + "\n")


def pytest_collectreport(report) -> None:  # a test file that skipped itself whole
    _log_skip(report)


def pytest_runtest_logreport(report) -> None:  # one test (skipif marks, pytest.skip)
    _log_skip(report)
