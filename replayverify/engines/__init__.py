"""Preservation engines (SPEC §4): eager, whole, readset, region, guarded, policies,
and deliberately wrong mutants, all behind one small protocol and one registry.

Where things live: ``base`` (the engine protocol, the result, ``Strategy``, the run
loop), ``runner`` (how a run starts, runs its ops and sweeps backward: the
``OpRunner`` protocol and the plain ``PlainRunner``), ``plan`` (a program's static facts
for the engines, derived once per program), ``strategies`` (the five strategies and the
engines built from them), ``mutants``, ``registry``, ``profile``. Reuse across the runs
of one check is not here: it is the verifier's runner, ``verifier.memo.Memo``.
"""

from replayverify.engines.base import (
    Engine,
    EngineResult,
    Recovery,
    Strategy,
    Tape,
    run_strategies,
)
from replayverify.engines.preservation import (
    POLICY_STRATEGIES,
    Eager,
    Guarded,
    PolicyEngine,
    ReadSet,
    Region,
    StrategyEngine,
    Whole,
    parse_policy,
    run_policy,
)
from replayverify.engines.registry import (
    ENGINES,
    engine_names,
    get,
    is_mutant,
    mutant_names,
    names,
    register,
    resolve,
    unregister,
)
from replayverify.engines.runner import OpRunner, PlainRunner

__all__ = [
    "ENGINES",
    "POLICY_STRATEGIES",
    "Eager",
    "Engine",
    "EngineResult",
    "Guarded",
    "OpRunner",
    "PlainRunner",
    "PolicyEngine",
    "ReadSet",
    "Recovery",
    "Region",
    "Strategy",
    "StrategyEngine",
    "Tape",
    "Whole",
    "engine_names",
    "get",
    "is_mutant",
    "mutant_names",
    "names",
    "parse_policy",
    "register",
    "resolve",
    "run_policy",
    "run_strategies",
    "unregister",
]
