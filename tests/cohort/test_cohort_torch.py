"""Every torch method can match, be refused and diverge, on hand-written cases."""

from __future__ import annotations

import numpy as np
import pytest

from replayverify.cohort import Reference, build_case, observe
from tests.cohort import cases as hand

torch = pytest.importorskip("torch")

from replayverify.cohort.torch_adapter import EXTRA_METHODS, METHODS, TorchAdapter  # noqa: E402

ADAPTER = TorchAdapter()
ALL = {m.name: m for m in METHODS + EXTRA_METHODS}
IN_PLACE = [n for n in ALL if n != "functional"]


def outcome(case, name):
    ref = Reference.of(case, ADAPTER.draw_tape(case))
    return observe(ADAPTER, case, ALL[name], ref)


@pytest.mark.parametrize("name", list(ALL))
def test_each_method_matches_without_draws(name):
    assert outcome(hand.no_draw(), name)["outcome"] == "match"


@pytest.mark.parametrize("name", list(ALL))
def test_each_method_diverges_when_the_loss_reads_an_untracked_op(name):
    rec = outcome(hand.untracked_loss("hidden-strided"), name)
    assert rec["outcome"] == "diverge" and "gradient" in rec["diverged"]


@pytest.mark.parametrize("name", IN_PLACE)
def test_in_place_methods_refuse_the_raw_overlapping_copy(name):
    rec = outcome(build_case("raw-copy", 420000, "float32"), name)
    assert rec["outcome"] == "rejected"
    assert rec["exception"]["type"] == "RuntimeError"
    assert "refer to a single memory location" in rec["exception"]["message"]


def test_functional_is_rejected_only_for_an_untranslatable_op():
    rec = outcome(hand.untranslatable(), "functional")
    assert rec["outcome"] == "rejected" and rec["exception"]["type"] == "NotImplementedError"
    assert outcome(build_case("raw-copy", 420000, "float32"), "functional")["outcome"] == "match"


def test_hidden_replay_diverges_and_the_transaction_matches():
    case = build_case("hidden-overlap", 420002, "float32")
    assert outcome(case, "reentrant")["outcome"] == "diverge"
    assert "buffer hid" in outcome(case, "non-reentrant")["diverged"]
    assert outcome(case, "transactional")["outcome"] == "match"
    assert outcome(case, "eager")["outcome"] == "match"


def test_runs_leave_the_callers_generator_and_threads_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state().clone()
    threads = torch.get_num_threads()
    outcome(build_case("local-strided", 420000, "float64"), "reentrant-rng-off")
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.get_num_threads() == threads


def test_tape_is_the_methods_own_draws():
    case = build_case("local-strided", 420004, "float32")
    tape = ADAPTER.draw_tape(case)
    assert set(tape.draws) == {k for k, op in enumerate(case.program.ops) if op.spec.draws}
    assert all(v.dtype == np.float32 for v in tape.draws.values())
    assert outcome(case, "eager")["outcome"] == "match"  # bit-exact bytes with those draws
