"""The one module:attr loader behind --engine and --frameworks."""

from __future__ import annotations

import pytest

from replayverify.plugins import load


class Thing:
    name = "thing"  # a class attribute: the class itself must still be instantiated


def make_thing() -> Thing:
    return Thing()


def _accepts(obj: object) -> bool:
    return isinstance(obj, Thing)


@pytest.mark.parametrize("spec", [f"{__name__}:Thing", f"{__name__}:make_thing"])
def test_a_class_or_factory_is_called_once(spec: str) -> None:
    assert isinstance(load(spec, kind="thing", accepts=_accepts, known="a", needs="x"), Thing)


@pytest.mark.parametrize(("spec", "message"), [
    ("plain", "unknown widget 'plain'; known: a, b (or module:attr, or more)"),
    ("no.such.module:x", "cannot load thing 'no.such.module:x'"),
    (f"{__name__}:missing", "cannot load thing"),
    ("math:pi", "'math:pi' is not a thing: it needs x"),
])
def test_refusals_are_one_line_value_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        load(spec, kind="thing", accepts=_accepts, known="a, b", needs="x", also=", or more",
             unknown="widget")
    assert message in str(info.value) and "\n" not in str(info.value)


class Broken:
    def __init__(self) -> None:
        raise ValueError("first line\nsecond line")


@pytest.mark.parametrize(("source", "attr", "message"), [
    ("raise RuntimeError('no GPU here')", "X", "RuntimeError: no GPU here"),
    ("def f(:\n", "X", "SyntaxError: "),
    ("import sys\nsys.exit(3)", "X", "PluginFault: called sys.exit(3)"),
    ("raise KeyboardInterrupt", "X", "PluginFault: raised KeyboardInterrupt"),
    (f"from {__name__} import Broken as X", "X", "ValueError: first line\\nsecond line"),
])
def test_loading_user_code_never_shows_a_traceback(tmp_path, monkeypatch, source, attr,
                                                   message) -> None:
    """Import raising anything, a syntax error, a constructor raising, a message of two
    lines: one line, a ValueError, naming what went wrong."""
    name = f"rv_plugin_{abs(hash(source))}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError) as info:
        load(f"{name}:{attr}", kind="thing", accepts=_accepts, known="a", needs="x")
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"cannot load thing '{name}:{attr}': ")
    assert message in text, text


def test_a_relative_module_name_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^cannot load thing '\.rel:X': a relative module"):
        load(".rel:X", kind="thing", accepts=_accepts, known="a", needs="x")


def test_the_guard_turns_exit_and_a_plugins_own_interrupt_into_a_fault() -> None:
    import sys

    from replayverify.plugins import PluginFault, call, checked

    def leave():
        sys.exit(0)

    def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(PluginFault, match=r"called sys.exit\(0\)"):
        call(leave)
    with pytest.raises(PluginFault, match="raised KeyboardInterrupt"):
        call(interrupt)
    assert call(lambda a, b=0: a + b, 1, b=2) == 3
    with pytest.raises(PluginFault, match="run returned None, not dict"):
        checked(None, dict, "run")


def test_a_real_ctrl_c_during_a_plugin_call_still_interrupts() -> None:
    import os
    import signal
    import time

    from replayverify.plugins import call

    def wait_for_ctrl_c():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)

    with pytest.raises(KeyboardInterrupt):
        call(wait_for_ctrl_c)


# -- the one Registry behind engines and cohort adapters ----------------------------------

LAZY = Thing()


def lazy_thing() -> Thing:
    return LAZY


def a_registry():
    from replayverify.plugins import Registry

    return Registry("thing", accepts=_accepts, needs="x", forbidden="/",
                    builtin={"made": Thing(), "lazy": f"{__name__}:lazy_thing"},
                    prefixes={"twice:": lambda rest: Thing()})


def test_both_registries_are_the_one_registry():
    from replayverify.cohort import registry as cohort
    from replayverify.engines import registry as engines
    from replayverify.plugins import Registry

    assert isinstance(engines.REGISTRY, Registry) and isinstance(cohort.REGISTRY, Registry)


def test_a_registry_lists_builtins_then_users_and_protects_builtins():
    reg = a_registry()
    mine = Thing()
    assert reg.register("mine", mine) is mine
    assert reg.names() == ("made", "lazy", "mine") and reg.get("mine") is mine
    assert reg.get("lazy") is LAZY  # a module:attr built-in, loaded on first get
    for name, error, message in [("made", ValueError, "'made' is a built-in thing"),
                                 ("lazy", ValueError, "'lazy' is a built-in thing")]:
        with pytest.raises(error, match=message):
            reg.unregister(name)
    reg.unregister("mine")
    assert reg.names() == ("made", "lazy")


@pytest.mark.parametrize(("name", "obj", "error", "message"), [
    ("made", Thing(), ValueError, "a thing named 'made' is already registered"),
    ("", Thing(), ValueError, "a thing name must be a non-empty string without '/'"),
    ("a/b", Thing(), ValueError, "without '/'"),
    ("new", object(), TypeError, "is not a thing: it needs x"),
])
def test_a_registry_refuses_in_one_line(name, obj, error, message):
    with pytest.raises(error) as info:
        a_registry().register(name, obj)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_resolve_builds_once_and_never_joins_the_names():
    reg = a_registry()
    spec = f"{__name__}:make_thing"
    assert reg.resolve(spec) == spec and reg.resolve("twice:x") == "twice:x"
    first = reg.get(spec)
    assert reg.resolve(spec) == spec and reg.get(spec) is first
    assert reg.names() == ("made", "lazy")
    reg.unregister(spec)
    with pytest.raises(KeyError, match=r"unknown thing .*; known: made, lazy"):
        reg.get(spec)
    with pytest.raises(ValueError, match="names contain no '/'"):
        reg.resolve("a/b:c")
    with pytest.raises(ValueError, match="unknown thing 'nope'; known: made, lazy"):
        reg.resolve("nope")
