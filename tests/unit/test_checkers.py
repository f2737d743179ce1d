"""The independent checkers on hand-written programs (SPEC §3, §5)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from replayverify.programs import FORWARD, REVERSE, OpKind, execute, layouts, load_program
from replayverify.programs.generate import generate
from replayverify.programs.state import Snapshot
from replayverify.verifier import check as check_module
from replayverify.verifier import complex_step as complex_step_module
from replayverify.verifier import forward_jacobian as forward_jacobian_module
from replayverify.verifier.check import CHECKS, check_execution, check_program
from replayverify.verifier.complex_step import complex_step
from replayverify.verifier.forward_jacobian import TANGENT, forward_jacobian
from replayverify.verifier.records import tolerance

PROGRAMS = Path(__file__).parents[1] / "programs" / "checkers"
REFERENCE = ("forward-jacobian", "complex-step", "bytes", "control:final-storage",
             "control:wrong-rng")
INTEGER_OPS = {OpKind.IADD, OpKind.IXOR, OpKind.ICOPY}

# Expected outcome of every engine-free check, in REFERENCE order.
EXPECTED = {
    "shift-both-ways": ("match", "match", "match", "detected", "unsupported"),
    "int-write-under-float-read": ("unsupported", "unsupported", "match", "unsupported",
                                   "unsupported"),
    "int-reads-float-bits": ("match", "match", "match", "detected", "unsupported"),
    "float32": ("match", "unsupported", "match", "detected", "detected"),
    "gather-scatter-duplicates": ("match", "match", "match", "detected", "unsupported"),
    "draws-in-last-segment": ("match", "match", "match", "detected", "detected"),
    "overwritten-operand": ("match", "match", "match", "detected", "unsupported"),
    "no-hazard": ("match", "match", "match", "unsupported", "unsupported"),
    "dead-hazard": ("match", "match", "match", "unsupported", "unsupported"),
}


def load(name: str):
    return load_program(PROGRAMS / f"{name}.json")


def outcomes(records) -> dict[str, str]:
    return {r.check: r.outcome for r in records if r.engine == ""}


def by_check(records) -> dict:
    return {r.check: r for r in records if r.engine == ""}


def test_every_program_file_has_expectations():
    assert {p.stem for p in PROGRAMS.glob("*.json")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hand_written_outcomes(name):
    records = check_program(load(name), engines=(), checks=REFERENCE)
    assert [r.check for r in records] == list(REFERENCE)
    assert tuple(r.outcome for r in records) == EXPECTED[name], [r.detail for r in records]
    for r in records:
        assert (r.max_abs_err is None) == (r.outcome == "unsupported"), r
        if r.max_abs_err is None:
            assert "nothing compared" in r.detail or r.check.startswith("control:")
        json.loads(r.to_json())


def test_tables_cover_every_op_kind_and_name_integer_ops():
    assert set(TANGENT) == set(OpKind)
    assert {k for k, rule in TANGENT.items() if rule is None} == INTEGER_OPS


def test_complex_step_evaluates_the_interpreters_forward_rules(monkeypatch):
    """No second statement of an op: a forward rule changed in FORWARD changes the
    complex step's derivative too (here tanh(a*x) -> tanh(2*a*x): twice the slope)."""
    p = load("shift-both-ways")
    right = FORWARD[OpKind.TANH]
    g = complex_step(p).gradient

    def doubled(op, o, d, t, n):
        return right(op, {"x": 2.0 * o["x"]}, d, t, n)

    with monkeypatch.context() as m:
        m.setitem(FORWARD, OpKind.TANH, doubled)
        g2 = complex_step(p).gradient
    assert not np.allclose(g, g2)


def test_integer_write_under_float_read_is_unsupported_exactly_there():
    p = load("int-write-under-float-read")
    ex = execute(p)
    fj = forward_jacobian(p)
    assert not ex.admission.supported and ex.admission.op == 2
    assert fj.gradient is None and fj.refused_op == 2 and "integer op" in fj.reason
    rec = by_check(check_program(p, engines=(), checks=REFERENCE))
    for check in ("forward-jacobian", "complex-step"):
        assert rec[check].outcome == "unsupported"
        assert ex.admission.reason in rec[check].detail
        assert "op 2" in rec[check].detail and "integer op 1" in rec[check].detail
    assert rec["bytes"].outcome == "match"  # byte checks run on every admitted program


def test_a_refusal_ends_the_forward_jacobian_but_a_missing_tangent_rule_is_still_an_error():
    # The first read of undefined bytes decides the result, so the ops after it are not
    # propagated; a float op from there on without a tangent rule is the same error as when
    # every op ran.
    p = load("int-write-under-float-read")
    with pytest.raises(ValueError, match="op 2: sin writes a float view but has no tangent"):
        forward_jacobian(p, tangent={**TANGENT, OpKind.SIN: None})


def _analysed_and_propagated(monkeypatch, module, programs, run):
    """``run(fresh copies of programs)`` with every program analysed for dead ops, then with
    none (``module.LIVE_MIN_COORDS``); checks that the analysis found dead float ops."""

    def results(min_coords: int) -> tuple[list, int]:
        monkeypatch.setattr(module, "LIVE_MIN_COORDS", min_coords)
        fresh = [dataclasses.replace(p) for p in programs]  # (the plan is carried per program)
        plans = [module._plan(q) for q in fresh]
        dead = sum(step.is_float and not live for plan in plans
                   for step, live in zip(plan.steps, plan.live))
        return run(fresh), dead

    (analysed, dead), (propagated, none) = results(0), results(2**62)
    assert dead > 20 and none == 0
    return analysed, propagated


def test_skipping_the_tangents_that_cannot_reach_the_loss_changes_nothing(monkeypatch):
    # Wide programs do not compute the tangents of ops no read that matters sees (``_live``);
    # with every program analysed, each result equals the one with every op propagated.
    programs = [generate(5, i, family) for family in ("alias", "derivative", "hazard", "mixed")
                for i in range(6)]
    analysed, propagated = _analysed_and_propagated(
        monkeypatch, forward_jacobian_module, programs,
        lambda fresh: [forward_jacobian(q) for q in fresh])
    for a, b in zip(analysed, propagated):
        assert (a.refused_op, a.reason) == (b.refused_op, b.reason)
        for x, y in ((a.gradient, b.gradient), (a.loss_tangent, b.loss_tangent)):
            assert (x is None) == (y is None)
            if x is not None:  # (equal values, NaN where NaN, and the same signs of zero)
                assert np.array_equal(x, y, equal_nan=True)
                assert np.array_equal(np.signbit(x), np.signbit(y))


def test_skipping_the_complex_evaluations_that_cannot_reach_the_loss_changes_nothing(
        monkeypatch):
    # Likewise for the complex step's ops whose imaginary parts no read that matters sees,
    # skipped when the real parts are not watched.
    programs = [generate(5, i, family) for family in ("alias", "derivative", "hazard")
                for i in range(6)]
    analysed, propagated = _analysed_and_propagated(
        monkeypatch, complex_step_module, programs,
        lambda fresh: [complex_step(q, watch=False, h=h).gradient for q in fresh
                       for h in (1e-200, 1e-20)])
    for a, b in zip(analysed, propagated):
        assert a.tobytes() == b.tobytes()


def test_programs_whose_float_reads_are_always_defined_keep_no_tags(monkeypatch):
    # Where the layout alone makes every float read defined (``_always_defined``: one
    # itemsize per buffer's float views, aligned elements, no integer write into them) the
    # forward Jacobian keeps no tags; with them kept anyway, every result is the same.
    module = forward_jacobian_module
    def always_defined(p) -> bool:
        lay = layouts(p)
        return module._always_defined(p, [lo for lo in lay.values() if lo.view.is_float])

    assert always_defined(load("shift-both-ways"))
    for name in ("int-write-under-float-read", "int-reads-float-bits"):
        assert not always_defined(load(name))
    programs = [generate(9, i, family) for family in ("alias", "complex", "derivative")
                for i in range(8)]
    programs = [p for p in programs if always_defined(p)]
    assert len(programs) >= 12
    untagged = [forward_jacobian(dataclasses.replace(p)) for p in programs]
    monkeypatch.setattr(module, "_always_defined", lambda program, floats: False)
    for p, a in zip(programs, untagged):
        b = forward_jacobian(dataclasses.replace(p))  # (a fresh plan: tags kept)
        assert a.refused_op is b.refused_op is None and a.reason == b.reason == ""
        for x, y in ((a.gradient, b.gradient), (a.loss_tangent, b.loss_tangent)):
            assert np.array_equal(x, y, equal_nan=True)
            assert np.array_equal(np.signbit(x), np.signbit(y))


def test_integer_reads_of_float_bits_keep_the_derivative():
    p = load("int-reads-float-bits")
    ex = execute(p)
    assert ex.admission.supported
    np.testing.assert_allclose(forward_jacobian(p).gradient, ex.gradient, rtol=0, atol=1e-15)
    np.testing.assert_allclose(complex_step(p).gradient, ex.gradient, rtol=0, atol=1e-15)


def test_float32_program_complex_step_reason_and_float32_tolerance():
    p = load("float32")
    rec = by_check(check_program(p, engines=(), checks=REFERENCE))
    assert rec["complex-step"].detail.startswith("complex-step needs float64")
    g = execute(p).gradient
    assert f"tolerance {tolerance('float32', len(p.ops), g):.3g}" in rec["forward-jacobian"].detail


def test_wrong_rng_replays_the_drawing_segment():
    rec = by_check(check_program(load("draws-in-last-segment"), engines=(),
                                 checks=["control:wrong-rng"]))["control:wrong-rng"]
    assert rec.outcome == "detected"
    assert "segment 2" in rec.detail and "generator state" in rec.detail
    assert rec.max_abs_err > 0


def test_wrong_rng_from_the_reference_run_gives_the_replay_from_the_boundary():
    """Given the plain run, the control replays from the run's state before the first
    drawing op; without it, or when the run did not enter the segment at the recorded
    (B_s, R_s), from (B_s, R_s): the same verdict either way."""
    from replayverify.verifier.controls import wrong_rng_control
    from replayverify.verifier.reference_run import first_draw, reference_run

    shortcut = 0
    for family in ("default", "derivative", "bytes", "hazard"):
        for i in range(12):
            p = generate(7, i, family)
            ex, run = execute(p), reference_run(p)
            assert wrong_rng_control(ex, run) == wrong_rng_control(ex)
            bounds = p.segment_bounds()
            # the first segment with a drawing op, which the control finds as the one
            # holding the program's first drawing op
            s = next((s for s, (lo, hi) in enumerate(bounds)
                      if any(op.spec.draws for op in p.ops[lo:hi])), None)
            drawing = first_draw(p)
            assert drawing == next((k for k, op in enumerate(p.ops) if op.spec.draws), None)
            assert s == (None if drawing is None else next(
                s for s, (lo, hi) in enumerate(bounds) if lo <= drawing < hi))
            if s is None:
                continue
            shortcut += not p.ops[bounds[s][0]].spec.draws
            # a recorded boundary the run does not pass: the replay starts from it
            snap = ex.boundaries[s]
            name, data = next(iter(snap.buffers.items()))
            flipped = bytearray(data)
            flipped[0] ^= 1
            ex.boundaries[s] = Snapshot({**snap.buffers, name: bytes(flipped)}, snap.rng)
            assert wrong_rng_control(ex, run) == wrong_rng_control(ex)
    assert shortcut >= 5  # segments whose first op draws nothing: the run's state is used


def test_final_storage_names_the_stale_operand():
    rec = by_check(check_program(load("overwritten-operand"), engines=(),
                                 checks=["control:final-storage"]))
    assert "op 0 tanh x" in rec["control:final-storage"].detail


def test_bytes_check_catches_a_changed_byte_or_generator_state():
    p = load("draws-in-last-segment")
    ex = execute(p)
    snap = ex.boundaries[1]
    data = bytearray(snap.buffers["s"])
    data[3] ^= 1
    ex.boundaries[1] = Snapshot({"s": bytes(data)}, snap.rng)
    rec = by_check(check_execution(ex, engines=(), checks=["bytes"]))["bytes"]
    assert rec.outcome == "diverge" and rec.max_abs_err >= 2  # segments 0 and 1 see it
    assert "segment 0" in rec.detail and "segment 1" in rec.detail

    ex = execute(p)
    ex.boundaries[2] = Snapshot(ex.boundaries[2].buffers, ex.boundaries[2].rng.advanced(1))
    rec = by_check(check_execution(ex, engines=(), checks=["bytes"]))["bytes"]
    assert rec.outcome == "diverge" and "generator state" in rec.detail


def test_every_check_name_yields_exactly_one_engine_free_record():
    records = check_program(load("shift-both-ways"), engines=())
    assert [r.check for r in records] == [c for c in CHECKS if c != "gradient"]


def test_an_exception_inside_a_check_becomes_an_error_record(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("complex storage exploded")

    monkeypatch.setattr(check_module, "complex_step", boom)
    records = check_program(load("shift-both-ways"), engines=(), checks=REFERENCE)
    rec = by_check(records)
    assert len(records) == len(REFERENCE)
    assert rec["complex-step"].outcome == "error"
    assert rec["complex-step"].detail == "RuntimeError: complex storage exploded"
    assert rec["forward-jacobian"].outcome == "match"


# ---------------------------------------------------------------- broken interpreters


def memcpy_copy(program):
    """A copy rule that writes element by element in order: later reads see earlier writes."""
    lay = layouts(program)

    def rule(op, o, d, t, n):
        dst, src = lay[op.dst], lay[op.x]
        x = o["x"].copy()  # (elements,) or batched (elements, coordinates)
        out = np.empty_like(x)
        same = dst.view.buffer == src.view.buffer
        src_at = {int(s): j for j, s in enumerate(src.starts)}
        for j in range(x.shape[0]):  # a test double: one element at a time, on purpose
            out[j] = x[j]
            k = src_at.get(int(dst.starts[j])) if same else None
            if k is not None and k > j:
                x[k] = out[j]
        return out, None

    return rule


def test_memcpy_interpreter_is_caught(monkeypatch):
    p = load("shift-both-ways")
    with monkeypatch.context() as m:
        m.setitem(FORWARD, OpKind.COPY, memcpy_copy(p))
        broken = execute(p)
        broken.gradient  # noqa: B018  (computed while the broken rule is in place)
    assert broken.loss != execute(p).loss
    rec = by_check(check_execution(broken, engines=(), checks=REFERENCE))
    assert rec["bytes"].outcome == "diverge"
    assert rec["forward-jacobian"].outcome == "diverge"
    assert rec["complex-step"].outcome == "diverge"


@pytest.mark.parametrize("kind", [OpKind.TANH, OpKind.MUL])
def test_wrong_sign_reverse_rule_is_caught(monkeypatch, kind):
    p = load("shift-both-ways")
    right = REVERSE[kind]

    def wrong(rec, g):
        return {f: -c for f, c in right(rec, g).items()}

    with monkeypatch.context() as m:
        m.setitem(REVERSE, kind, wrong)
        broken = execute(p)
        broken.gradient  # noqa: B018
    rec = by_check(check_execution(broken, engines=(), checks=REFERENCE))
    assert rec["forward-jacobian"].outcome == "diverge"
    assert rec["complex-step"].outcome == "diverge"
    assert rec["bytes"].outcome == "match"


def test_checkers_do_not_use_the_reverse_rules(monkeypatch):
    """Emptying REVERSE leaves the forward Jacobian and the complex step intact."""
    p = load("gather-scatter-duplicates")
    g = execute(p).gradient
    with monkeypatch.context() as m:
        for kind in OpKind:
            m.setitem(REVERSE, kind, None)
        fj = forward_jacobian(p).gradient
        cs = complex_step(p).gradient
    np.testing.assert_allclose(fj, g, rtol=0, atol=1e-14)
    np.testing.assert_allclose(cs, g, rtol=0, atol=1e-14)


def test_a_failing_reference_is_an_error_record_for_the_engines_too(monkeypatch):
    def boom(program, **options):
        raise RuntimeError("no tangents today")

    monkeypatch.setattr(check_module, "forward_jacobian", boom)
    records = check_program(load("shift-both-ways"), engines=("eager",))
    errors = [(r.check, r.engine) for r in records if r.outcome == "error"]
    assert ("forward-jacobian", "") in errors and ("gradient", "*") in errors
    assert any(r.check == "bytes" and r.engine == "eager" for r in records)


def test_live_ops_walks_back_from_the_loss():
    # Locations as bits: x=1, a=2, b=4. op0: a <- x; op1: b <- x, overwritten whole by
    # op2: b <- a before the loss reads b; op3: a <- x after the last read of a; op4: an
    # integer write. A scatter (partial) into b keeps the earlier writer of b live.
    from types import SimpleNamespace as S

    from replayverify.verifier.liveness import bit_mask, live_ops

    spec = {False: S(partial=False), True: S(partial=True)}

    def step(dst, *sources, is_float=True, partial=False):
        return S(is_float=is_float, op=S(spec=spec[partial]), dst=dst,
                 sources=tuple(("x", s) for s in sources))

    bit = {"x": 1, "a": 2, "b": 4}.__getitem__
    steps = [step("a", "x"), step("b", "x"), step("b", "a"), step("a", "x"),
             step("b", "x", is_float=False)]
    assert live_ops(steps, "b", bit) == (True, False, True, False, False)
    assert live_ops(steps, None, bit) == (False,) * 5
    steps[2] = step("b", "a", partial=True)
    assert live_ops(steps, "b", bit) == (True, True, True, False, False)
    assert bit_mask(slice(2, 5), 8) == 0b11100 == bit_mask(np.array([2, 3, 4]), 8)


def test_the_replays_called_alone_warn_about_no_overflow():
    """Overflow and invalid results are legal values: the references' runs and replays
    called alone (not inside ``check``) ignore numpy's warnings about them, as every
    entry point does. Generated programs of these seeds overflow in some op."""
    import warnings

    from replayverify.verifier.bytes_check import check_bytes
    from replayverify.verifier.controls import wrong_rng_control
    from replayverify.verifier.reference_run import reference_run

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for family in ("default", "derivative", "bytes", "hazard"):
            for i in range(12):
                p = generate(7, i, family)
                ex = execute(p)
                reference_run(p)
                check_bytes(ex)
                wrong_rng_control(ex)


def test_the_size_guard_counts_addresses_without_deriving_the_tangent_plan():
    """``address_count`` (what the size guard multiplies) is the plan's address count,
    found without deriving the plan: the guard asks it of programs it may refuse."""
    from replayverify.verifier.forward_jacobian import _PLANS, address_count, addresses

    for family in ("derivative", "hazard", "alias", "mixed"):
        for i in range(10):
            p = generate(4, i, family)
            n = address_count(p)
            assert "tangent_plan" not in _PLANS.of(p)
            assert n == addresses(p).count == address_count(p), (family, i)


def test_check_program_lets_its_execution_go_before_the_engines_run(monkeypatch):
    """The engines are judged against what ``check_program`` took from its execution (the
    final state, the boundaries, admission and the version graph's gradient), so the
    execution itself (every op's operands and version ids) is gone while they run, and
    the records are those of the check that holds it (``check_execution``)."""
    import weakref

    from replayverify import engines

    made = []
    real_execute = check_module.execute

    def execute_and_watch(program, **kwargs):
        ex = real_execute(program, **kwargs)
        made.append(weakref.ref(ex))
        return ex

    alive = []

    class Probe:
        name = "probe"

        def run(self, program, *, admission=None):
            alive.append(made[-1]() is not None)
            return engines.get("region").run(program, admission=admission)

    p = load_program(PROGRAMS / "overwritten-operand.json")
    monkeypatch.setattr(check_module, "execute", execute_and_watch)
    let_go = check_program(p, engines=[Probe()])
    assert alive == [False]
    ex = execute(p)  # (held here)
    made.append(weakref.ref(ex))
    held = check_execution(ex, engines=[Probe()])
    assert alive == [False, True]
    assert [r.to_dict() | {"seconds": 0} for r in let_go] == \
        [r.to_dict() | {"seconds": 0} for r in held]
    assert [r.outcome for r in let_go if r.engine == "probe"] == ["match", "match"]
