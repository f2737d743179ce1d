"""The engine registry: built-ins by name, user engines, duplicates refused, resolve."""

import pytest

from replayverify import engines
from replayverify.engines import PolicyEngine, Region, StrategyEngine
from replayverify.programs import execute
from replayverify.verifier.engine_checks import engine_records
from tests.unit.engine_programs import HAND

USER_ENGINE = StrategyEngine("user-region-64", Region(64))


def make_engine():
    return StrategyEngine("made", Region(16))


def test_builtins_are_registered_in_order():
    assert engines.engine_names()[:5] == engines.ENGINES
    assert all(engines.is_mutant(n) for n in engines.mutant_names())
    assert set(engines.names()) >= set(engines.ENGINES) | set(engines.mutant_names())
    for name in engines.names():
        assert isinstance(engines.get(name), engines.Engine)


def test_duplicates_are_refused():
    with pytest.raises(ValueError, match="already registered"):
        engines.register("region", USER_ENGINE)
    with pytest.raises(ValueError, match="already registered"):
        engines.register("mutant:region-missing-redo", USER_ENGINE)


def test_non_engines_are_refused():
    with pytest.raises(TypeError, match="not an engine"):
        engines.register("not-an-engine", object())
    with pytest.raises(ValueError, match="non-empty"):
        engines.register("", USER_ENGINE)


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(KeyError, match=r"unknown engine 'nope'.*eager"):
        engines.get("nope")


def test_user_engine_is_checked_like_the_builtins():
    engines.register("test-user", USER_ENGINE)
    try:
        with pytest.raises(ValueError, match="already registered"):
            engines.register("test-user", USER_ENGINE)
        p = HAND["shift_up"]()
        ex = execute(p)
        recs = engine_records(p, ex, ex.gradient, ["test-user"], "p")
        assert [(r.check, r.engine, r.outcome) for r in recs] == [
            ("gradient", "test-user", "match"), ("bytes", "test-user", "match")]
    finally:
        engines.unregister("test-user")
    assert "test-user" not in engines.names()
    with pytest.raises(ValueError, match="built-in"):
        engines.unregister("eager")


def test_resolve_policy_and_module_attr():
    spec = "policy:eager,whole,region"
    try:
        assert engines.resolve(spec) == spec
        assert isinstance(engines.get(spec), PolicyEngine)
        assert engines.resolve(spec) == spec  # idempotent
        for attr in ("USER_ENGINE", "make_engine"):
            name = engines.resolve(f"tests.unit.test_engines_registry:{attr}")
            assert isinstance(engines.get(name), StrategyEngine)
    finally:
        for n in (spec, "tests.unit.test_engines_registry:USER_ENGINE",
                  "tests.unit.test_engines_registry:make_engine"):
            engines.unregister(n)
    for bad, msg in [("nope", "unknown engine"), ("no.such.module:x", "cannot load"),
                     ("tests.unit.test_engines_registry:missing", "cannot load"),
                     ("policy:eager,bogus", "policy entries"),
                     ("tests.unit.test_engines_registry:pytest", "not an engine")]:
        with pytest.raises(ValueError, match=msg):
            engines.resolve(bad)
