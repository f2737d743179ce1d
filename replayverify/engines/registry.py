"""Engines by name: the built-in engines and mutants are listed here, and only here.

``register(name, engine)`` adds a user's engine (anything with a ``name`` and a
``run(program, *, admission=None)`` method) so the verifier checks it like the
built-in ones; a name already taken is refused. The registry is the one
``replayverify.plugins.Registry`` the cohort's adapters use too.
"""

from __future__ import annotations

from replayverify.engines import mutants as m
from replayverify.engines.base import Engine
from replayverify.engines.preservation import (
    Eager,
    Guarded,
    PolicyEngine,
    ReadSet,
    Region,
    StrategyEngine,
    Whole,
)
from replayverify.plugins import Registry

ENGINES = ("eager", "whole", "readset", "region", "guarded")
MUTANT_PREFIX = "mutant:"


def _builtin() -> dict[str, Engine]:
    table = [
        ("eager", Eager()),
        ("whole", Whole()),
        ("readset", ReadSet()),
        ("region", Region()),
        ("guarded", Guarded()),
        ("mutant:region-current-segment-only", m.RegionCurrentSegmentOnly()),
        ("mutant:region-undo-forward-order", m.RegionUndoForwardOrder()),
        ("mutant:region-missing-redo", m.RegionMissingRedo()),
        ("mutant:region-live-rng", m.RegionLiveRng()),
        ("mutant:region-float-writes-only", m.RegionFloatWritesOnly()),
        ("mutant:whole-redraw-noise", m.WholeRedrawNoise()),
        ("mutant:whole-rng-not-reinstated", m.WholeRngNotReinstated()),
        ("mutant:whole-memcpy-overlap", m.WholeMemcpyOverlap()),
        ("mutant:whole-scatter-first-wins", m.WholeScatterFirstWins()),
        ("mutant:whole-anchor-after-first-op", m.WholeAnchorAfterFirstOp()),
        ("mutant:readset-capture-after-write", m.ReadSetCaptureAfterWrite()),
        ("mutant:readset-missing-second-operand", m.ReadSetMissingSecondOperand()),
        ("mutant:eager-retained-view", m.EagerRetainedView()),
        ("mutant:eager-mask-from-live-rng", m.EagerMaskFromLiveRng()),
        ("mutant:replay-leaks-visible-state", m.ReplayLeaksVisibleState()),
        ("mutant:recompute-drops-unused-writes", m.RecomputeDropsUnusedWrites()),
        ("mutant:recompute-reads-live-buffer", m.RecomputeReadsLiveBuffer()),
        ("mutant:early-stop-stale-draw", m.EarlyStopStaleDraw()),
    ]
    return {name: StrategyEngine(name, strategy) for name, strategy in table}


_NEEDS = "a name and a run(program, *, admission=None) method"


def _known() -> str:
    """The known names for a one-line message: the engines, and how many mutants (their
    names alone would take ~700 characters)."""
    mutants = mutant_names()
    return ", ".join(engine_names()) + (f"; {len(mutants)} mutants ({mutants[0]}, ...)"
                                        if mutants else "")


REGISTRY: Registry[Engine] = Registry(
    "engine", accepts=lambda o: isinstance(o, Engine), needs=_NEEDS, builtin=_builtin(),
    prefixes={"policy:": lambda rest: PolicyEngine(tuple(rest.split(",")))},
    also=", or policy:eager,region,...", known=_known)
"""The engines by name (``replayverify.plugins.Registry``)."""


def register(name: str, engine: Engine) -> Engine:
    """Make ``engine`` available as ``name``. Refuses a taken name or a non-engine."""
    return REGISTRY.register(name, engine)


def unregister(name: str) -> None:
    """Remove a user-registered (or resolved) engine; built-in engines stay."""
    REGISTRY.unregister(name)


def resolve(spec: str) -> str:
    """The name under which ``get`` finds the engine ``spec`` names.

    ``spec`` is a registered name, ``policy:eager,region,...`` (one entry per segment),
    or ``module:attr`` naming an engine object, or a class or factory returning one.
    The latter two are built once and cached under ``spec`` without joining the
    registered (default) engines. Raises ValueError with a one-line reason.
    """
    return REGISTRY.resolve(spec)


def get(name: str) -> Engine:
    """The engine registered as ``name``; KeyError naming the known engines otherwise."""
    return REGISTRY.get(name)


def names() -> tuple[str, ...]:
    """Every registered name, engines and mutants, in registration order."""
    return REGISTRY.names()


def engine_names() -> tuple[str, ...]:
    """Registered engines that are not mutants."""
    return tuple(n for n in names() if not n.startswith(MUTANT_PREFIX))


def mutant_names() -> tuple[str, ...]:
    return tuple(n for n in names() if n.startswith(MUTANT_PREFIX))


def is_mutant(name: str) -> bool:
    return name.startswith(MUTANT_PREFIX)
