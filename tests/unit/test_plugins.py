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
