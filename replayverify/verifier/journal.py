"""Moved to :mod:`replayverify.runs.journal` (the suite, the cohort and the evaluation share
it); this old path keeps its public names for code that imports them from here."""

from replayverify.runs.journal import (  # noqa: F401  (re-exported)
    LOCK,
    PROGRESS,
    VERSION,
    Journal,
    RunJournal,
    RunLock,
    check_dir,
    open_journal,
    prepare_dir,
)
