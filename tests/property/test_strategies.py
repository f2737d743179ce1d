"""The Hypothesis strategies: valid by construction, within their arguments, shrinking
well, and what a user writes with them (every engine; their own engine) stays clean."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import replayverify
from replayverify.engines import Recovery, Strategy, StrategyEngine
from replayverify.programs import (
    Buffer,
    Loss,
    OpKind,
    Program,
    View,
    canonical_json,
    execute,
    load_program,
    program_sha256,
    program_to_dict,
)
from replayverify.programs.model import view_bytes
from replayverify.strategies import ops, programs, rng_states, views

# find() without the explain phase, which only annotates reports and costs seconds.
FIND = settings(database=None, derandomize=True, phases=[Phase.generate, Phase.shrink])
View_F = View("f", "s", "float64", 0, (2,), (8,))


def program_of(view_list, op_list=()) -> Program:
    """The smallest program around some views (and ops): buffers sized to fit."""
    ends: dict[str, int] = {}
    for v in view_list:
        end = v.offset + sum((n - 1) * s for n, s in zip(v.shape, v.strides)) + v.itemsize
        ends[v.buffer] = max(ends.get(v.buffer, 0), end)
    first = view_list[0]
    return Program(
        buffers=tuple(Buffer(b, n) for b, n in ends.items()), views=tuple(view_list),
        ops=tuple(op_list), loss=Loss(first.name, (1.0,) * first.size),
        segments=(len(op_list),),
    )


# ---------------------------------------------------------------- valid by construction


@given(programs())
def test_generated_programs_round_trip_through_json(program):
    assert load_program(program_to_dict(program)) == program
    assert load_program(program.to_json()) == program
    assert program_sha256(load_program(program.to_json())) == program.sha256
    # the canonical JSON, written field by field, is json.dumps of the canonical document
    assert canonical_json(program) == json.dumps(program_to_dict(program), sort_keys=True,
                                                 separators=(",", ":"), allow_nan=False)


ARGUMENTS = [
    {},
    {"min_ops": 0, "max_ops": 0},
    {"min_ops": 3, "max_ops": 3, "max_elements": 1},
    {"max_ops": 6, "max_elements": 4, "dtypes": ("float32",)},
    {"max_ops": 6, "dtypes": ("float64",), "int_writes": False},
    {"max_ops": 6, "draws": False},
    {"max_ops": 6, "int_writes": False, "draws": False, "max_elements": 2},
]


@pytest.mark.parametrize("kwargs", ARGUMENTS, ids=lambda kw: ",".join(map(str, kw.items())))
@settings(max_examples=15)
@given(data=st.data())
def test_generated_programs_respect_their_arguments(kwargs, data):
    program = data.draw(programs(**kwargs))
    assert load_program(program_to_dict(program)) == program  # validation accepts it
    assert kwargs.get("min_ops", 1) <= len(program.ops) <= kwargs.get("max_ops", 16)
    assert all(v.size <= kwargs.get("max_elements", 16) for v in program.views)
    floats = {v.dtype for v in program.views if v.is_float}
    assert len(floats) == 1 and floats <= set(kwargs.get("dtypes", ("float64", "float32")))
    kinds = {op.kind for op in program.ops}
    if not kwargs.get("draws", True):
        assert not kinds & {OpKind.NOISE, OpKind.DROPOUT}
    if not kwargs.get("int_writes", True):
        assert all(program.view(op.dst).is_float for op in program.ops)
    assert program.inputs and program.view(program.loss.view).is_float


@settings(max_examples=20)
@given(view=views(nbytes=40, max_elements=6))
def test_views_fit_their_buffer_and_validate(view):
    assert view.size <= 6
    assert int(view_bytes(view).max()) < 40
    assert load_program(program_to_dict(program_of([view]))).views == (view,)


POOL = (
    *(views(name=f"f{i}", dtypes=("float64",), nbytes=64, max_elements=4) for i in range(2)),
    views(name="i0", dtypes=("int32",), nbytes=64, max_elements=4),
)


@settings(max_examples=30)
@given(data=st.data())
def test_ops_are_valid_over_the_views_they_were_drawn_for(data):
    pool = [data.draw(s) for s in POOL]
    op_list = data.draw(st.lists(ops(pool), min_size=1, max_size=4))
    program = program_of(pool, op_list)
    assert load_program(program_to_dict(program)) == program


@settings(max_examples=20)
@given(rng=rng_states())
def test_rng_states_round_trip(rng):
    doc = program_to_dict(program_of([View_F]))
    doc["rng"] = {"key": list(rng.key), "counter": list(rng.counter)}
    assert load_program(doc).rng == rng


def test_from_type_resolves_to_programs():
    @settings(max_examples=5)
    @given(st.from_type(Program))
    def inner(program):
        assert load_program(program_to_dict(program)) == program

    inner()


# ---------------------------------------------------------------- what they cover


def test_strategies_cover_what_the_docstring_claims():
    """Across a fixed batch: every op kind, 2-D and strided and overlapping views, int32
    halves of float64, negative and duplicate indices, several segments, draws, and
    both admitted and refused derivatives."""
    seen: set[str] = set()

    @settings(max_examples=150, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(programs())
    def collect(p):
        seen.update(op.kind.value for op in p.ops)
        views_ = {v.name: v for v in p.views}
        if any(len(v.shape) == 2 for v in p.views):
            seen.add("2-D")
        if any(v.strides[-1] > v.itemsize for v in p.views):
            seen.add("strided")
        if any(v.dtype == "int32" and views_[o].dtype == "float64" and v.strides[-1] == 8
               for v in p.views for o in views_ if views_[o].buffer == v.buffer):
            seen.add("int32 halves")
        floats = [v for v in p.views if v.is_float]
        if any(np.intersect1d(view_bytes(a), view_bytes(b)).size and a != b
               for a in floats for b in floats):
            seen.add("overlap")
        for e in p.init:
            if e.view == "ix" and len(set(e.values)) < len(e.values) and min(e.values) < 0:
                seen.add("duplicate negative indices")
        if len(p.segments) > 1:
            seen.add("segments")
        seen.add("admitted" if execute(p).admission.supported else "refused")

    collect()
    wanted = {k.value for k in OpKind} | {
        "2-D", "strided", "int32 halves", "overlap", "duplicate negative indices", "segments",
        "admitted", "refused",
    }
    assert wanted <= seen, wanted - seen


def test_shrinks_to_a_tiny_program():
    p = find(programs(), lambda p: any(op.kind is OpKind.GATHER for op in p.ops),
             settings=FIND)
    assert len(p.ops) == 1 and p.rng.key == (0, 0) and p.segments == (1,)
    assert all(v.size == 1 for v in p.views) and len(p.views) <= 3


# ---------------------------------------------------------------- invalid arguments


INVALID = [
    (programs, {"min_ops": -1}),
    (programs, {"min_ops": 1.5}),
    (programs, {"max_ops": True}),
    (programs, {"min_ops": 5, "max_ops": 4}),
    (programs, {"max_elements": 0}),
    (programs, {"dtypes": ()}),
    (programs, {"dtypes": "float64"}),
    (programs, {"dtypes": ("int32",)}),
    (programs, {"dtypes": ("float16",)}),
    (programs, {"int_writes": 1}),
    (programs, {"draws": None}),
    (views, {"nbytes": 0}),
    (views, {"nbytes": 4, "dtypes": ("float64",)}),
    (views, {"max_elements": 0}),
    (views, {"dtypes": ("complex128",)}),
    (views, {"buffer": ""}),
    (views, {"name": 3}),
    (ops, {"views": []}),
    (ops, {"views": View_F}),
    (ops, {"views": [View_F], "kinds": ["nope"]}),
    (ops, {"views": [View_F], "kinds": []}),
    (ops, {"views": [View_F], "kinds": "copy"}),
    (ops, {"views": [View_F], "kinds": ["iadd"]}),  # no integer view to write
    (ops, {"views": [View_F], "int_writes": "yes"}),
]


@pytest.mark.parametrize(("strategy", "kwargs"), INVALID,
                         ids=[f"{s.__name__}-{kw}" for s, kw in INVALID])
def test_invalid_arguments_are_refused(strategy, kwargs):
    with pytest.raises(InvalidArgument):
        strategy(**kwargs).validate()


# ---------------------------------------------------------------- the oracle on them


@settings(max_examples=25)
@given(programs(max_ops=10))
def test_run_agrees_with_the_interpreter(program):
    result = replayverify.run(program)
    ex = execute(program)
    assert result.buffers == ex.buffers and result.rng == ex.rng
    assert result.admission == ex.admission
    if ex.gradient is None:
        assert result.gradient is None
    else:
        assert np.array_equal(result.gradient, ex.gradient, equal_nan=True)


@settings(max_examples=80)
@given(programs(max_ops=10))
def test_check_is_clean_for_every_reference_engine(program):
    records = replayverify.check(program)  # every check, the controls included
    assert {r.engine for r in records} >= set(replayverify.engines.ENGINES)
    assert [r for r in records if r.failing] == []


# A user's tests, as docs/guide.md shows them.


@settings(max_examples=20)
@given(programs(max_ops=8))
def test_user_every_engine_on_generated_programs(program):
    failures = [r for r in replayverify.check(program, checks=["gradient", "bytes"])
                if r.failing]
    assert not failures, failures


class KeepOperands(Strategy):
    """A user's engine: keep every op's operands and draws; read them back."""

    name = "keep-operands"

    def after(self, tape, s, k, state, ev):
        nbytes = sum(v.nbytes for v in ev.operands.values())
        tape.keep(s, k, ev, nbytes)

    def recover(self, tape, s, state):
        a, b = tape.bounds[s]
        return Recovery([tape.data[k] for k in range(a, b)])


class LiveOperands(KeepOperands):
    """Broken on purpose: reads the operands from the live (final) storage."""

    def recover(self, tape, s, state):
        a, b = tape.bounds[s]
        out = []
        for k in range(a, b):
            kept = tape.data[k]
            op = tape.program.ops[k]
            live = {f: state.read(tape.lay[getattr(op, f)]) for f in kept.operands}
            out.append(tape.recovered(k, live, kept.draws))
        return Recovery(out)


@pytest.fixture
def user_engine():
    engine = StrategyEngine("test-keep-operands", KeepOperands())
    replayverify.engines.register(engine.name, engine)
    yield engine.name
    replayverify.engines.unregister(engine.name)


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=programs(max_ops=8))
def test_user_engine_on_generated_programs(user_engine, program):
    records = replayverify.check(program, engines=[user_engine], checks=["gradient", "bytes"])
    assert {r.engine for r in records if r.check == "gradient"} == {user_engine}
    assert not [r for r in records if r.failing]


def test_a_broken_user_engine_is_caught_and_shrunk():
    broken = StrategyEngine("live-operands", LiveOperands())

    def fails(p):
        return any(r.failing for r in replayverify.check(p, engines=[broken],
                                                         checks=["gradient"]))

    p = find(programs(), fails, settings=settings(FIND, max_examples=300))
    assert 1 <= len(p.ops) <= 3, p.to_json()
