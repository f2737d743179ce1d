"""The cohort without any framework: cases, reference draws, comparison, registry, the
runner over a plug-in adapter, and the command's usage errors."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from replayverify import cohort
from replayverify.cli import main
from replayverify.cohort import (
    CohortConfig,
    DrawTape,
    Method,
    Observation,
    Reference,
    build_case,
    cases,
    compare,
    task_ids,
)
from replayverify.cohort.engines_adapter import EnginesAdapter
from replayverify.programs import execute


def test_every_family_pairs_its_dtypes_and_draws_inside_the_segment():
    for family in [*cohort.FAMILIES, *cohort.EXTRA_FAMILIES]:
        c32, c64 = (build_case(family, 420011, t) for t in ("float32", "float64"))
        assert [op.kind for op in c32.program.ops] == [op.kind for op in c64.program.ops]
        assert c32.program.init[0].values == c64.program.init[0].values
        assert any(c64.program.ops[k].spec.draws for k in c64.segment_ops())
        assert execute(c64.program).admission.supported
        for h in c64.roles.hidden:
            assert h in {b.name for b in c64.program.buffers}


def test_cases_are_deterministic_and_dropout_keeps_divide_exactly():
    a = [c.program.sha256 for c in cases(range(420000, 420004), extra=True)]
    assert a == [c.program.sha256 for c in cases(range(420000, 420004), extra=True)]
    assert len(set(a)) == len(a)
    keeps = {op.keep for c in cases(range(420000, 420050)) for op in c.program.ops
             if op.keep is not None}
    assert keeps <= {0.5, 0.25}


def test_reference_uses_the_given_draws():
    case = build_case("local-strided", 420000, "float64")
    k = next(iter(case.segment_ops()))
    n = case.program.view(case.program.ops[k].dst).size
    ones = {k: np.ones(n), 3: np.zeros(n)}
    ref = Reference.of(case, DrawTape(ones, b"g"))
    ex = execute(case.program, draws=ones)
    assert ref.buffers == ex.buffers and ref.generator == b"g"
    assert ref.buffers != execute(case.program).buffers


def test_compare_names_what_diverged():
    case = build_case("hidden-strided", 420000, "float64")
    ref = Reference(np.array([1.0, 2.0]), {"hid": b"ab", "act": b"cd"}, b"rng")
    ok = Observation(np.array([1.0, 2.0]), {"hid": b"ab", "act": b"cd"}, b"rng")
    assert compare(case, ref, ok)[:2] == ("match", [])
    bad = Observation(np.array([1.0, 2.5]), {"hid": b"ax", "act": b"cd"}, b"RNG")
    assert compare(case, ref, bad)[:2] == ("diverge", ["gradient", "buffer hid", "generator"])
    tiny = Observation(np.array([1.0, 2.0 + 1e-15]), ok.buffers, ok.generator)
    assert compare(case, ref, tiny)[0] == "match"  # within SPEC tolerance


class ToyAdapter:
    """A plug-in adapter: numpy execution, one faithful and one broken method."""

    name = "toy"
    label = "toy"

    def missing(self):
        return None

    def version(self):
        return "1"

    def methods(self, extra=False):
        return (Method("replay", "toy replay", expect={f: "M" for f in cohort.FAMILIES}),
                Method("stale", "toy stale-generator"))

    def draw_tape(self, case):
        return EnginesAdapter().draw_tape(case)

    def run(self, case, method):
        if case.family == "raw-copy" and method.name == "stale":
            raise RuntimeError("toy refuses raw copies\nsecond line")
        ex = execute(case.program)
        rng = ex.rng.to_bytes() if method.name == "replay" else b"stale"
        return Observation(ex.gradient, ex.buffers, rng)


def test_runner_over_a_plugin_adapter(tmp_path):
    cohort.register("toy", ToyAdapter())
    try:
        cfg = CohortConfig(frameworks=("toy",), seeds=(5, 7), workers=1, out=tmp_path)
        assert task_ids(cfg)[:2] == ["toy/local-strided/5/float32", "toy/local-strided/5/float64"]
        s = cohort.run_cohort(cfg)
    finally:
        cohort.unregister("toy")
    assert s["records"] == 2 * 2 * 5 * 2 and s["verdict"] == "as-expected"
    assert s["table"]["toy replay"]["M"] == 20
    stale = s["table"]["toy stale-generator"]
    assert (stale["M"], stale["R"], stale["D"]) == (0, 4, 16)
    recs = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    rej = next(r for r in recs if r["outcome"] == "rejected")
    assert rej["exception"] == {"type": "RuntimeError", "message": "toy refuses raw copies"}
    assert "toy refuses raw copies" in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "summary.json").read_text())["records"] == 40


def test_an_unmet_expectation_is_unexpected(tmp_path):
    broken = ToyAdapter()
    broken.run = lambda case, m: Observation(np.zeros(1), {}, b"")  # type: ignore[method-assign]
    cohort.register("toy-broken", broken)
    try:
        s = cohort.run_cohort(CohortConfig(frameworks=("toy-broken",), seeds=(5, 6),
                                           workers=1))
    finally:
        cohort.unregister("toy-broken")
    assert s["verdict"] == "unexpected" and s["unexpected"] == ["toy replay"]


def test_a_missing_framework_gives_unsupported_records_with_the_hint():
    absent = ToyAdapter()
    absent.missing = lambda: "toy is not installed: pip install toy"  # type: ignore[method-assign]
    cohort.register("toy-absent", absent)
    try:
        recs = cohort.run_task("toy-absent/raw-copy/5/float32")
        s = cohort.run_cohort(CohortConfig(frameworks=("toy-absent",), seeds=(5, 6),
                                           workers=1))
    finally:
        cohort.unregister("toy-absent")
    assert {r["outcome"] for r in recs} == {"unsupported"}
    assert recs[0]["detail"] == "toy is not installed: pip install toy"
    assert s["not_run"] == ["toy"] and s["verdict"] == "as-expected"


def test_registry_refuses_duplicates_and_non_adapters():
    with pytest.raises(ValueError, match="already registered"):
        cohort.register("torch", ToyAdapter())
    with pytest.raises(TypeError, match="not a cohort adapter"):
        cohort.register("x", object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown cohort framework"):
        cohort.get("nope")
    assert cohort.get("tests.cohort.test_cohort_core:ToyAdapter").name == "toy"


def test_replayverify_engines_match_every_family():
    a = EnginesAdapter()
    for family in [*cohort.FAMILIES, *cohort.EXTRA_FAMILIES]:
        case = build_case(family, 420001, "float32")
        ref = Reference.of(case, a.draw_tape(case))
        for m in a.methods():
            assert cohort.observe(a, case, m, ref)["outcome"] == "match", (family, m.name)


def test_engines_adapter_diverges_from_a_different_reference():
    a = EnginesAdapter()
    case = build_case("local-overlap", 420001, "float64")
    tape = a.draw_tape(case)
    other = DrawTape({k: v + 1 for k, v in tape.draws.items()}, tape.generator)
    rec = cohort.observe(a, case, a.methods()[0], Reference.of(case, other))
    assert rec["outcome"] == "diverge" and "gradient" in rec["diverged"]


@pytest.mark.parametrize("args, message", [
    (["--seeds", "5"], "bad --seeds '5'"),
    (["--seeds", "9:3"], "need 0 <= A < B"),
    (["--frameworks", "nope"], "unknown cohort framework 'nope'"),
    (["--frameworks", ","], "names no framework"),
    (["--frameworks", "math:nothing"], "cannot load cohort adapter"),
])
def test_cli_usage_errors_are_one_line(args, message):
    r = CliRunner().invoke(main, ["cohort", *args])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


def test_cli_runs_a_plugin_adapter(tmp_path):
    r = CliRunner().invoke(main, ["cohort", "--frameworks",
                                  "tests.cohort.test_cohort_core:ToyAdapter",
                                  "--seeds", "5:6", "--out", str(tmp_path), "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert "toy replay" in r.output and (tmp_path / "report.md").exists()


def test_case_replace_keeps_it_a_case():
    case = build_case("local-strided", 420000, "float32")
    assert replace(case, seed=1).id == "local-strided/1/float32"


class BrokenToy(ToyAdapter):
    """A plug-in whose faithful method stops being faithful: its cell is unexpected."""

    def run(self, case, method):
        obs = super().run(case, method)
        return Observation(obs.gradient + 1.0, obs.buffers, obs.generator)


def test_cli_exit_status_1_names_the_unexpected_row(tmp_path):
    r = CliRunner().invoke(main, ["cohort", "--frameworks",
                                  "tests.cohort.test_cohort_core:BrokenToy",
                                  "--seeds", "5:6", "--out", str(tmp_path), "--workers", "1"])
    assert r.exit_code == 1, r.output
    assert "verdict unexpected" in r.output and "toy replay" in r.output
    assert "UNEXPECTED" in r.output


def test_torch_missing_gives_unsupported_records_with_the_install_hint(monkeypatch):
    import importlib.util

    from replayverify.cohort.torch_adapter import HINT

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    recs = cohort.run_task("torch/hidden-strided/420000/float32", extra=True)
    # 7 Table 2 methods, 2 selective, 5 wrappers (issue #25): each a record, none run
    assert len(recs) == 14 and {r["outcome"] for r in recs} == {"unsupported"}
    assert {r["detail"] for r in recs} == {HINT} and recs[0]["version"] == ""


def test_the_old_name_tape_still_imports_as_draw_tape():
    from replayverify.cohort import DrawTape, Tape

    assert Tape is DrawTape
