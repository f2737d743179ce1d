"""The framework cohort: the same programs through torch and JAX checkpointing.

Cases are SPEC programs plus roles (``cases``); adapters run them through a framework
(``adapter``: the protocol, ``registry``: by name or ``module:attr``); the reference is
the interpreter fed the framework's own draws; ``runner`` lists tasks, runs one by id
and writes records.jsonl, summary.json and report.md. See docs/cohort.md.
"""

from replayverify.cohort.adapter import (
    Adapter,
    DrawTape,
    Method,
    Observation,
    Reference,
    Tape,
    compare,
    observe,
)
from replayverify.cohort.cases import (
    DEFAULT_SEEDS,
    DTYPES,
    EXTRA_FAMILIES,
    FAMILIES,
    Case,
    Roles,
    build_case,
    cases,
)
from replayverify.cohort.expected import EXPECTED, TABLE2
from replayverify.cohort.registry import get, register, unregister
from replayverify.cohort.runner import (
    CohortConfig,
    CohortError,
    parse_seeds,
    run_cohort,
    run_records,
    run_task,
    run_tasks,
    summarize,
    task_ids,
)

__all__ = [
    "DEFAULT_SEEDS",
    "DTYPES",
    "EXPECTED",
    "EXTRA_FAMILIES",
    "FAMILIES",
    "TABLE2",
    "Adapter",
    "Case",
    "CohortConfig",
    "CohortError",
    "Method",
    "Observation",
    "Reference",
    "Roles",
    "DrawTape",
    "Tape",
    "build_case",
    "cases",
    "compare",
    "get",
    "observe",
    "parse_seeds",
    "register",
    "run_cohort",
    "run_records",
    "run_task",
    "run_tasks",
    "summarize",
    "task_ids",
    "unregister",
]
