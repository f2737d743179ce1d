"""Every engine mutant is registered, is a small variation of a real strategy, and is
detected on a hand-written program that exercises its bug class."""

import pytest

from replayverify import engines
from replayverify.engines import Eager, ReadSet, Region, Whole
from replayverify.programs import execute
from replayverify.verifier.engine_checks import engine_records, mutant_records
from tests.helpers import program
from tests.unit.engine_programs import HAND

# mutant -> a hand-written program on which its bug must show
DETECTED_ON = {
    "mutant:region-current-segment-only": "shift_up",
    "mutant:region-undo-forward-order": "shift_up",
    "mutant:region-missing-redo": "shift_up",
    "mutant:region-live-rng": "draws",
    "mutant:region-float-writes-only": "int_reads",
    "mutant:whole-redraw-noise": "draws",
    "mutant:whole-rng-not-reinstated": "draws",
    "mutant:whole-memcpy-overlap": "shift_up",
    "mutant:whole-scatter-first-wins": "gather_scatter",
    "mutant:whole-anchor-after-first-op": "shift_up",
    "mutant:readset-capture-after-write": "shift_up",
    "mutant:readset-missing-second-operand": "shift_up",
    "mutant:eager-retained-view": "shift_up",
    "mutant:eager-mask-from-live-rng": "float32_draws",
    "mutant:replay-leaks-visible-state": "shift_up",
    "mutant:recompute-drops-unused-writes": "shift_up",
    "mutant:recompute-reads-live-buffer": "gather_scatter",
    "mutant:early-stop-stale-draw": "draws",
}
# mutants modelled on public reports vary the strategy closest to checkpointing (whole)
BASE = {"region": Region, "whole": Whole, "readset": ReadSet, "eager": Eager,
        "replay": Whole, "recompute": Whole, "early": Whole}


def test_at_least_ten_mutants_all_mapped():
    assert len(engines.mutant_names()) >= 10
    assert set(engines.mutant_names()) == set(DETECTED_ON)


@pytest.mark.parametrize("mutant", sorted(DETECTED_ON))
def test_mutant_is_detected(mutant):
    p = HAND[DETECTED_ON[mutant]]()
    ex = execute(p)
    (rec,) = mutant_records(p, ex, ex.gradient, [mutant], "p")
    assert rec.check == mutant and rec.engine == mutant
    assert rec.outcome == "detected", rec.detail
    assert set(rec.metrics) == {"retained_bytes", "temporary_bytes", "replayed_ops"}


@pytest.mark.parametrize("mutant", sorted(DETECTED_ON))
def test_mutant_is_a_variation_of_its_named_engine(mutant):
    kind = mutant.removeprefix("mutant:").split("-")[0]
    assert isinstance(engines.get(mutant).strategy, BASE[kind])


@pytest.mark.parametrize("mutant", sorted(DETECTED_ON))
def test_mutant_cites_the_bug_it_models(mutant):
    doc = type(engines.get(mutant).strategy).__doc__ or ""
    assert len(doc.split()) >= 8, doc
    if mutant.split(":")[1].split("-")[0] in ("replay", "recompute", "early"):
        assert "Models pytorch/" in doc, doc


def test_mutants_are_missed_where_their_bug_cannot_show():
    # one segment, no draws, no overlaps, no integer writes: nothing for these to break
    p = program({"s": 32, "t": 32},
                [("x", "s", "float64", 0, (4,), (8,)), ("y", "t", "float64", 0, (4,), (8,))],
                [{"op": "tanh", "dst": "y", "x": "x"}], {"view": "y", "weights": [1] * 4},
                init=[{"view": "x", "values": [0.1, 0.2, 0.3, 0.4]}], inputs=["x"])
    ex = execute(p)
    names = ["mutant:whole-rng-not-reinstated", "mutant:region-live-rng",
             "mutant:whole-memcpy-overlap", "mutant:whole-scatter-first-wins",
             "mutant:region-float-writes-only", "mutant:eager-mask-from-live-rng",
             "mutant:replay-leaks-visible-state", "mutant:recompute-reads-live-buffer",
             "mutant:early-stop-stale-draw"]
    for rec in mutant_records(p, ex, ex.gradient, names, "p"):
        assert rec.outcome == "missed", (rec.check, rec.detail)


def test_mutants_flag_adds_every_mutant_after_the_engines():
    p = HAND["draws"]()
    ex = execute(p)
    recs = engine_records(p, ex, ex.gradient, ["region"], "p", mutants=True)
    assert [r.check for r in recs[:2]] == ["gradient", "bytes"]
    assert [r.check for r in recs[2:]] == list(engines.mutant_names())
    assert all(r.outcome in ("detected", "missed") for r in recs[2:])


def test_a_mutant_named_as_the_engine_under_test_gets_gradient_and_bytes_records():
    p = HAND["shift_up"]()
    ex = execute(p)
    recs = engine_records(p, ex, ex.gradient, ["mutant:region-missing-redo"], "p")
    assert [(r.check, r.engine) for r in recs] == [
        ("gradient", "mutant:region-missing-redo"), ("bytes", "mutant:region-missing-redo")]
    assert recs[1].outcome == "diverge" and "after backward" in recs[1].detail
