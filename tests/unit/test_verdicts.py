"""Pins for the two places where docs/semantics.md refines SPEC §5's wording."""

import pytest

from replayverify.verifier.check import check_program
from replayverify.verifier.records import Record, run_is_clean, undetected_mutants
from tests.helpers import program


def rec(check, outcome, engine=""):
    return Record("p", "", check, engine, outcome, 0.0)


def test_a_mutant_fails_a_run_only_when_no_program_detects_it():
    once = [rec("mutant:m", "missed"), rec("mutant:m", "detected"), rec("bytes", "match")]
    never = [rec("mutant:m", "missed"), rec("mutant:m", "missed")]
    assert run_is_clean(once) and undetected_mutants(once) == []
    assert not run_is_clean(never) and undetected_mutants(never) == ["mutant:m"]
    assert not rec("mutant:m", "missed").failing


@pytest.mark.parametrize("outcome", ["diverge", "error"])
def test_diverge_and_error_always_fail(outcome):
    assert not run_is_clean([rec("gradient", outcome, "region")])


def test_a_missed_control_fails_the_run():
    assert not run_is_clean([rec("control:final-storage", "missed")])


def _dead_or_live_hazard(loss_view):
    """op 0 reads x into tanh; op 1 overwrites x with constants: a stale operand. The
    loss reads either x (tanh's result never reaches it) or y (it does)."""
    vec = lambda name, off: (name, "s", "float64", off * 8, (2,), (8,))  # noqa: E731
    return program({"s": 48}, [vec("x", 0), vec("y", 2), vec("c", 4)],
                   [{"op": "tanh", "dst": "y", "x": "x", "a": 1.0},
                    {"op": "copy", "dst": "x", "x": "c"}],
                   {"view": loss_view, "weights": [1.0, 2.0]},
                   init=[{"view": "x", "values": [0.3, -0.7]},
                         {"view": "c", "values": [1.5, 2.5]}], inputs=["x"])


def test_final_storage_is_unsupported_when_stale_values_do_not_reach_the_gradient():
    [r] = check_program(_dead_or_live_hazard("x"), checks=["control:final-storage"])
    assert r.outcome == "unsupported" and "do not reach the gradient" in r.detail


def test_final_storage_is_detected_when_they_do():
    [r] = check_program(_dead_or_live_hazard("y"), checks=["control:final-storage"])
    assert r.outcome == "detected", r.detail


def test_references_too_large_for_memory_say_so_and_engines_fall_back(monkeypatch):
    import replayverify.verifier.check as check_mod
    from replayverify.programs import generate

    monkeypatch.setattr(check_mod, "MAX_SHADOW_BYTES", 100)
    records = check_program(generate(0, 0, "derivative"))
    by = {(r.check, r.engine): r for r in records}
    for check in ("forward-jacobian", "complex-step"):
        assert by[(check, "")].outcome == "unsupported"
        assert "over the" in by[(check, "")].detail and "not run" in by[(check, "")].detail
    assert by[("gradient", "region")].outcome == "match"
    assert "against the version graph" in by[("gradient", "region")].detail
    assert run_is_clean(records)


def test_the_memory_guards_bound_is_above_both_references_estimates():
    # _guard skips the exact estimates when this bound fits: it must never be below them
    import replayverify.verifier.check as check_mod
    from replayverify.programs import generate
    from replayverify.programs.generate import FAMILIES

    for family in FAMILIES:
        for i in range(12):
            p = generate(5, i, family)
            bound = check_mod._reference_bound(p)
            for check in ("forward-jacobian", "complex-step"):
                assert check_mod.reference_bytes(p, check)[0] <= bound, (family, i, check)


def test_a_record_is_the_frozen_dataclass_of_its_fields():
    """Record's own ``__init__`` (the fields set as one dict) behaves as the dataclass's
    generated one with the conversions: loaded strings become members, the defaults, a
    metrics dict per record, frozen, equal and serialised by its fields."""
    import dataclasses

    from replayverify.verifier.records import Check, Outcome

    r = Record("p", "h", "gradient", "e", "match", 0.5)
    assert (type(r.check), type(r.outcome)) == (Check, Outcome)
    assert (r.detail, r.seconds, r.metrics) == ("", 0.0, {})
    assert r.metrics is not Record("p", "h", "gradient", "e", "match", 0.5).metrics
    assert type(Record("p", "h", "mutant:m", "e", Outcome.MISSED, None).check) is str
    full = Record(program="p", sha256="h", check=Check.BYTES, engine="", outcome="diverge",
                  max_abs_err=None, detail="d", seconds=1.5, metrics={"k": 1})
    assert [getattr(full, f.name) for f in dataclasses.fields(Record)] == [
        "p", "h", "bytes", "", "diverge", None, "d", 1.5, {"k": 1}]
    assert full == Record.from_dict(full.to_dict()) and full != r
    assert dataclasses.replace(full, detail="x").detail == "x"
    assert full.to_json() == ('{"program": "p", "sha256": "h", "check": "bytes", "engine": '
                              '"", "outcome": "diverge", "max_abs_err": null, "detail": "d", '
                              '"seconds": 1.5, "k": 1}')
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.detail = "x"
    with pytest.raises(ValueError, match="unknown outcome 'bogus'"):
        Record("p", "h", "gradient", "e", "bogus", 0.0)
