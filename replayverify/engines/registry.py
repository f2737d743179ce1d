"""Engines by name: the built-in engines and mutants are listed here, and only here.

``register(name, engine)`` adds a user's engine (anything with a ``name`` and a
``run(program, *, admission=None)`` method) so the verifier checks it like the
built-in ones; a name already taken is refused.
"""

from __future__ import annotations

from replayverify.engines import mutants as m
from replayverify.engines.base import Engine
from replayverify.engines.strategies import (
    Eager,
    Guarded,
    PolicyEngine,
    ReadSet,
    Region,
    StrategyEngine,
    Whole,
)
from replayverify.plugins import load, not_a

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


_REGISTRY: dict[str, Engine] = _builtin()
_BUILTIN = frozenset(_REGISTRY)
# Engines built from a ``policy:`` or ``module:attr`` spec: found by name, but not
# registered, so they never join the default engine set of later checks.
_RESOLVED: dict[str, Engine] = {}


_NEEDS = "a name and a run(program, *, admission=None) method"


def register(name: str, engine: Engine) -> Engine:
    """Make ``engine`` available as ``name``. Refuses a taken name or a non-engine."""
    if not isinstance(name, str) or not name:
        raise ValueError("an engine name must be a non-empty string")
    if name in _REGISTRY:
        raise ValueError(f"an engine named {name!r} is already registered")
    if not isinstance(engine, Engine):
        raise TypeError(not_a(engine, "engine", _NEEDS))
    _REGISTRY[name] = engine
    return engine


def unregister(name: str) -> None:
    """Remove a user-registered engine (built-in engines stay)."""
    if name in _BUILTIN:
        raise ValueError(f"{name!r} is a built-in engine")
    _REGISTRY.pop(name, None)


def resolve(spec: str) -> str:
    """The name under which ``get`` finds the engine ``spec`` names.

    ``spec`` is a registered name, ``policy:eager,region,...`` (one entry per segment),
    or ``module:attr`` naming an engine object, or a class or factory returning one.
    The latter two are built once and cached under ``spec`` without joining the
    registered (default) engines. Raises ValueError with a one-line reason.
    """
    if spec in _REGISTRY or spec in _RESOLVED:
        return spec
    if spec.startswith("policy:"):
        _RESOLVED[spec] = PolicyEngine(tuple(spec[len("policy:"):].split(",")))
        return spec
    obj = load(spec, kind="engine", accepts=lambda o: isinstance(o, Engine),
               known=_known(), needs=_NEEDS, also=", or policy:eager,region,...")
    _RESOLVED[spec] = obj
    return spec


def _known() -> str:
    """The known names for a one-line message: the engines, and how many mutants (their
    names alone would take ~700 characters)."""
    mutants = mutant_names()
    return ", ".join(engine_names()) + (f"; {len(mutants)} mutants ({mutants[0]}, ...)"
                                        if mutants else "")


def get(name: str) -> Engine:
    """The engine registered as ``name``; KeyError naming the known engines otherwise."""
    try:
        return _REGISTRY[name] if name in _REGISTRY else _RESOLVED[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; known: {', '.join(_REGISTRY)}") from None


def names() -> tuple[str, ...]:
    """Every registered name, engines and mutants, in registration order."""
    return tuple(_REGISTRY)


def engine_names() -> tuple[str, ...]:
    """Registered engines that are not mutants."""
    return tuple(n for n in _REGISTRY if not n.startswith(MUTANT_PREFIX))


def mutant_names() -> tuple[str, ...]:
    return tuple(n for n in _REGISTRY if n.startswith(MUTANT_PREFIX))


def is_mutant(name: str) -> bool:
    return name.startswith(MUTANT_PREFIX)
