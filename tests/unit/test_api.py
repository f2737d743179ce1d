"""The importable oracle API: replayverify.load_program / run / check / engines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import replayverify
from replayverify.engines import StrategyEngine
from replayverify.engines.preservation import ReadSet
from replayverify.programs import execute
from tests.helpers import program

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "shift-tanh.json"


def test_import_is_cheap_and_needs_no_hypothesis():
    code = ("import sys, replayverify; "
            "print(sorted(m for m in ('hypothesis', 'numpy', 'click') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_public_names_resolve_and_unknown_names_do_not():
    for name in replayverify.__all__:
        assert getattr(replayverify, name) is not None
    assert set(replayverify.__all__) <= set(dir(replayverify))
    assert replayverify.Program is replayverify.programs.Program
    with pytest.raises(AttributeError):
        replayverify.no_such_thing  # noqa: B018


@pytest.mark.parametrize("form", ["path", "str", "json", "dict", "program"])
def test_load_program_accepts_every_form(form):
    text = EXAMPLE.read_text()
    source = {"path": EXAMPLE, "str": str(EXAMPLE), "json": text, "dict": json.loads(text),
              "program": replayverify.load_program(EXAMPLE)}[form]
    p = replayverify.load_program(source)
    assert p.name == "shift-tanh" and len(p.ops) == 3


def test_load_program_rejects_with_program_error():
    with pytest.raises(replayverify.ProgramError) as info:
        replayverify.load_program({"format": "replayverify.program", "version": 2})
    assert info.value.field == "program.buffers"  # names the field and the reason


def test_equal_programs_compare_and_hash_equal():
    a = replayverify.load_program(EXAMPLE)
    b = replayverify.load_program(a.to_json())
    c = replayverify.load_program(json.loads(a.to_json(indent=None)))
    assert a == b == c and hash(a) == hash(b) == hash(c) and a is not b
    assert len({a, b, c}) == 1
    doc = json.loads(a.to_json())
    doc["ops"][2]["a"] = 1.25
    assert replayverify.load_program(doc) != a


def test_run_returns_the_interpreter_result():
    p = replayverify.load_program(EXAMPLE)
    r = replayverify.run(p)
    ex = execute(p)
    assert r.program == p
    assert dict(r.buffers) == ex.buffers and isinstance(r.buffers["state"], bytes)
    assert r.rng == ex.rng and r.rng.counter == (8, 0, 0, 0)  # 8 noise draws
    assert r.loss == ex.loss and r.admission.supported
    assert np.array_equal(r.gradient, ex.gradient) and r.gradient.shape == (8,)
    with pytest.raises(ValueError):
        r.gradient[0] = 1.0  # read-only: results are values
    assert replayverify.run(EXAMPLE).buffers == r.buffers  # a path works too


def test_run_reports_refused_gradients_with_the_reason():
    p = program(
        {"s": 16},
        [("x", "s", "float64", 0, (2,), (8,)), ("b", "s", "int32", 0, (2,), (8,))],
        [{"op": "iadd", "dst": "b", "x": "b", "k": 1},
         {"op": "tanh", "dst": "x", "x": "x", "a": 1.0}],
        {"view": "x", "weights": [1, 1]}, inputs=["x"],
    )
    r = replayverify.run(p)
    assert r.gradient is None and not r.admission.supported
    assert "integer op 0" in r.admission.reason


def test_check_records_every_check_and_engine():
    p = replayverify.load_program(EXAMPLE)
    records = replayverify.check(p)
    assert all(isinstance(r, replayverify.Record) for r in records)
    engines = {r.engine for r in records if r.check == "gradient"}
    assert engines == set(replayverify.engines.engine_names())
    assert {r.check for r in records} >= {"gradient", "bytes", "forward-jacobian",
                                          "complex-step", "control:final-storage",
                                          "control:wrong-rng"}
    assert not [r for r in records if r.failing]
    grad = [r for r in records if r.check == "gradient"]
    assert all(r.outcome == "match" and r.max_abs_err < 1e-12 for r in grad)


def test_check_selects_engines_and_checks():
    records = replayverify.check(EXAMPLE, engines=["region"], checks=["gradient"])
    assert [(r.check, r.engine, r.outcome) for r in records] == [("gradient", "region", "match")]
    assert replayverify.check(EXAMPLE, engines=(), checks=["gradient"]) == []
    with pytest.raises(ValueError, match="unknown check"):
        replayverify.check(EXAMPLE, checks=["nope"])


def test_check_accepts_engine_objects_without_registering():
    engine = StrategyEngine("unregistered-readset", ReadSet())
    records = replayverify.check(EXAMPLE, engines=[engine], checks=["gradient", "bytes"])
    assert {(r.check, r.engine, r.outcome) for r in records} == {
        ("gradient", "unregistered-readset", "match"), ("bytes", "", "match"),
        ("bytes", "unregistered-readset", "match")}
    assert "unregistered-readset" not in replayverify.engines.names()


def test_engines_get_and_register_are_reexported():
    region = replayverify.engines.get("region")
    assert region.name == "region"
    mine = StrategyEngine("test-api-readset", ReadSet())
    replayverify.engines.register(mine.name, mine)
    try:
        assert replayverify.engines.get(mine.name) is mine
        with pytest.raises(ValueError, match="already registered"):
            replayverify.engines.register(mine.name, mine)
        records = replayverify.check(EXAMPLE, checks=["gradient"])
        assert mine.name in {r.engine for r in records}  # engines=None: every registered one
    finally:
        replayverify.engines.unregister(mine.name)
    with pytest.raises(KeyError):
        replayverify.engines.get(mine.name)
