"""Every JAX method can match, be refused and diverge, on hand-written cases.

Where a method cannot reach an outcome on any program it could run (native in-place
writes raise on the first write; a checkpointed impure holder leaks a tracer whenever
its segment runs an op), D is shown against a reference that differs in the generator:
the comparison path of that method, not a framework behaviour.
"""

from __future__ import annotations

import pytest

from replayverify.cohort import Reference, Tape, build_case, observe
from tests.cohort import cases as hand

jax = pytest.importorskip("jax")

from replayverify.cohort.jax_adapter import METHODS, JaxAdapter  # noqa: E402

ADAPTER = JaxAdapter()
ALL = {m.name: m for m in METHODS}


def outcome(case, name, generator=None):
    tape = ADAPTER.draw_tape(case)
    if generator is not None:
        tape = Tape(tape.draws, generator)
    return observe(ADAPTER, case, ALL[name], Reference.of(case, tape))


@pytest.mark.parametrize("name", ["functional", "checkpoint", "holder-eager"])
def test_functional_and_eager_holder_methods(name):
    family = "hidden-strided" if name.startswith("holder") else "raw-copy"
    assert outcome(build_case(family, 420001, "float32"), name)["outcome"] == "match"
    rec = outcome(hand.untracked_loss("hidden-overlap"), name)
    assert rec["outcome"] == "diverge" and rec["diverged"] == ["gradient"]
    assert outcome(hand.untranslatable(), name)["outcome"] == "rejected"


@pytest.mark.parametrize("name", ["inplace-eager", "inplace-checkpoint"])
def test_native_in_place_is_refused_on_any_write(name):
    rec = outcome(build_case("local-strided", 420001, "float64"), name)
    assert rec["outcome"] == "rejected" and rec["exception"]["type"] == "TypeError"
    assert outcome(hand.no_ops(), name)["outcome"] == "match"
    assert outcome(hand.no_ops(), name, generator=b"other")["diverged"] == ["generator"]


def test_checkpointed_impure_holder_leaks_a_tracer():
    rec = outcome(build_case("hidden-strided", 420001, "float64"), "holder-checkpoint")
    assert rec["outcome"] == "rejected"
    assert rec["exception"]["type"] == "UnexpectedTracerError"
    assert outcome(hand.no_ops(), "holder-checkpoint")["outcome"] == "match"
    assert outcome(hand.no_ops(), "holder-checkpoint",
                   generator=b"other")["outcome"] == "diverge"


def test_float64_is_enabled_only_inside_a_run():
    outcome(build_case("local-strided", 420001, "float64"), "functional")
    assert not jax.config.jax_enable_x64
    assert jax.numpy.zeros(1, dtype="float32").dtype == jax.numpy.float32
