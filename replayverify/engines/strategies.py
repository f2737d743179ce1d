"""Moved to :mod:`replayverify.engines.preservation` (``replayverify.strategies`` is the
Hypothesis strategies; the engines' module now has a name of its own); this old path keeps
its public names for code that imports them from here."""

from replayverify.engines.preservation import (  # noqa: F401  (re-exported)
    POLICY_STRATEGIES,
    Eager,
    Guarded,
    JournalEntry,
    JournalOp,
    PolicyEngine,
    ReadSet,
    ReadSetPlan,
    Region,
    StrategyEngine,
    Whole,
    parse_policy,
    read_fields,
    readset_plan,
    redraw,
    run_policy,
)
