"""Moved to :mod:`replayverify.runs.executors` (the suite, the cohort and the evaluation
share it); this old path keeps its public names for code that imports them from here."""

from replayverify.runs.executors import (  # noqa: F401  (re-exported)
    CONNECT_TIMEOUT,
    DASK_HINT,
    HARD_GRACE,
    WORKER_WAIT,
    DaskError,
    DaskExecutor,
    Executor,
    ProcessPool,
    TaskTimeout,
    dask_executor,
    max_local_workers,
    parse_address,
    time_limit,
)
from replayverify.runs.fingerprint import source_fingerprint  # noqa: F401  (re-exported)
