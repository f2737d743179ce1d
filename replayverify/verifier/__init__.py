"""The verifier: checks, controls, the suite runner and its reports.

The names users need, loaded on first use (``import replayverify.verifier`` imports none of
the checkers)::

    from replayverify.verifier import check_program, Record

    records = check_program(program)              # one Record per (check, engine)

- running checks: :func:`check_program` (interpret, then check), :func:`check_execution`
  (on an execution you made), :func:`check_isolated` (in a worker process, with a time
  limit), ``CHECKS`` (the check names, in record order), :func:`rejected_record`;
- the checkers, each usable alone: :func:`check_bytes` (the reference byte check;
  :func:`reference_bytes_verdict` its record's verdict), :func:`final_storage_control`,
  :func:`wrong_rng_control`, and per engine :func:`engine_records` (:func:`gradient_verdict`,
  :func:`bytes_verdict`); the derivative references are their modules' functions of the
  same name, ``verifier.forward_jacobian.forward_jacobian`` and
  ``verifier.complex_step.complex_step`` (a package attribute of that name is the module);
- records: :class:`Record`, :class:`Check`, :class:`Outcome`, :class:`Verdict`;
- the suite: :func:`run_suite` with :class:`SuiteConfig` (``SuiteError`` on bad
  parameters), :func:`suite_ids`, :func:`build_program`, :func:`read_records`,
  :func:`iter_records`; ``verifier.shrink.shrink`` makes a failing program small.

The modules behind them are private in all but name; the run machinery the suite shares
with the cohort (executors, the run directory's journal) is :mod:`replayverify.runs`.
``replayverify.check`` (docs/guide.md) is :func:`check_program` on any program-like input.
"""

from __future__ import annotations

import importlib
from typing import Any

_ATTRIBUTES = {
    "CHECKS": "check",
    "check_execution": "check",
    "check_isolated": "check",
    "check_program": "check",
    "rejected_record": "check",
    "check_bytes": "bytes_check",
    "reference_bytes_verdict": "bytes_check",
    "final_storage_control": "controls",
    "wrong_rng_control": "controls",
    "bytes_verdict": "engine_checks",
    "engine_records": "engine_checks",
    "gradient_verdict": "engine_checks",
    "Check": "records",
    "Outcome": "records",
    "Record": "records",
    "Verdict": "compare",
    "SuiteConfig": "suite",
    "SuiteError": "suite",
    "build_program": "suite",
    "iter_records": "suite",
    "read_records": "suite",
    "run_suite": "suite",
    "suite_ids": "suite",
}

__all__ = sorted(_ATTRIBUTES)


def __getattr__(name: str) -> Any:
    if name not in _ATTRIBUTES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_ATTRIBUTES[name]}"), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_ATTRIBUTES])
