"""The five engines and policies against the interpreter: gradient within the SPEC
tolerance, exact bytes and generator state after the forward pass, after backward and
after every segment replay; each replay transaction leaves the visible state intact."""

import itertools
from dataclasses import replace

import numpy as np
import pytest

from replayverify import engines
from replayverify.engines import (
    Eager,
    Guarded,
    PolicyEngine,
    ReadSet,
    Region,
    StrategyEngine,
    Whole,
    run_policy,
    run_strategies,
)
from replayverify.programs import execute, generate
from replayverify.verifier.compare import compare_gradients
from replayverify.verifier.engine_checks import engine_records
from replayverify.verifier.memo import Memo
from tests.unit.engine_programs import HAND


def assert_engine_exact(result, ex):
    """Gradient within tolerance (or refused with the admission reason) and exact bytes."""
    if ex.admission.supported:
        v = compare_gradients(result.gradient, ex.gradient, ex.program)
        assert v.outcome == "match", (result.engine, v.detail)
    else:
        assert result.gradient is None and result.reason == ex.admission.reason
    assert result.forward == ex.final, result.engine
    assert result.final == ex.final, (result.engine, ex.final.differences(result.final))
    for s, snap in enumerate(result.replays):
        if snap is not None:
            assert snap == ex.boundaries[s + 1], (result.engine, s)


@pytest.mark.parametrize("name", sorted(HAND))
@pytest.mark.parametrize("engine", engines.ENGINES)
def test_engines_on_hand_written_programs(name, engine):
    p = HAND[name]()
    ex = execute(p)
    assert_engine_exact(engines.get(engine).run(p, admission=ex.admission), ex)


def test_hand_written_programs_cover_what_they_claim():
    assert not execute(HAND["int_halves"]()).admission.supported
    for name in ("shift_up", "int_reads", "gather_scatter", "draws", "float32_draws", "two_d"):
        g = execute(HAND[name]()).gradient
        assert g is not None and np.all(np.isfinite(g)) and np.any(g != 0), name


@pytest.mark.parametrize("engine", engines.ENGINES)
def test_admission_is_computed_when_not_given(engine):
    p = HAND["int_halves"]()
    r = engines.get(engine).run(p)
    assert r.gradient is None and "integer op 3" in r.reason


@pytest.mark.parametrize("family", ["default", "derivative", "bytes", "alias", "complex"])
def test_engines_on_generated_programs(family):
    for i in range(12):
        p = generate(1, i, family=family)
        ex = execute(p)
        for engine in engines.ENGINES:
            assert_engine_exact(engines.get(engine).run(p, admission=ex.admission), ex)


@pytest.mark.parametrize("granularity", [1, 8, 16, 4096])
def test_region_granularity(granularity):
    for name in ("shift_up", "gather_scatter", "draws", "int_halves", "two_d"):
        p = HAND[name]()
        ex = execute(p)
        eng = StrategyEngine(f"region@{granularity}", Region(granularity))
        assert_engine_exact(eng.run(p, admission=ex.admission), ex)


def test_region_granularity_is_validated():
    for bad in (0, -8, 2.5):
        with pytest.raises(ValueError, match="granularity"):
            Region(bad)


def test_every_policy_runs_through_the_same_checks():
    p = HAND["shift_up"]()  # three segments
    ex = execute(p)
    for policy in itertools.product(["eager", "whole", "region", "readset"], repeat=3):
        r = run_policy(p, ",".join(policy), admission=ex.admission)
        assert_engine_exact(r, ex)
        assert r.strategies == policy
        assert r.engine == "policy:" + ",".join(policy)


def test_policies_on_generated_programs():
    names = ["eager", "whole", "region"]
    for i in range(16):
        p = generate(2, i, family="bytes")
        ex = execute(p)
        policy = tuple(names[(i + s) % 3] for s in range(len(p.segments)))
        assert_engine_exact(PolicyEngine(policy).run(p, admission=ex.admission), ex)


def test_policy_errors():
    p = HAND["shift_up"]()
    with pytest.raises(ValueError, match="3 segments"):
        run_policy(p, "eager,region")
    with pytest.raises(ValueError, match="'bogus'"):
        run_policy(p, "eager,bogus,region")
    with pytest.raises(ValueError, match="strategies"):
        run_strategies("x", p, [Eager()])


def test_guarded_picks_the_smaller_payload_per_segment():
    sparse = engines.get("guarded").run(HAND["sparse_writes"]())
    assert set(sparse.strategies) == {"region"}
    full = engines.get("guarded").run(HAND["full_rewrites"]())
    assert set(full.strategies) == {"whole"}
    for name in HAND:
        p = HAND[name]()
        g = engines.get("guarded").run(p).segment_retained_bytes
        w = engines.get("whole").run(p).segment_retained_bytes
        r = engines.get("region").run(p).segment_retained_bytes
        assert all(gs == min(ws, rs) for gs, ws, rs in zip(g, w, r)), name


def _checked(cls):
    """A strategy whose every recovery asserts the visible state is left untouched."""

    class Checked(cls):
        def recover(self, tape, s, state):
            before = state.snapshot()
            rec = super().recover(tape, s, state)
            assert state.snapshot() == before, f"{cls.name} segment {s} changed the state"
            return rec

    Checked.name = cls.name
    return Checked


@pytest.mark.parametrize("cls", [Eager, ReadSet, Whole, Region, Guarded])
def test_each_replay_transaction_ends_in_the_visible_state(cls):
    for name in HAND:
        p = HAND[name]()
        ex = execute(p)
        strategy = _checked(cls)()
        r = run_strategies(cls.name, p, [strategy] * len(p.segments), ex.admission)
        assert_engine_exact(r, ex)


def test_engine_records_match_and_unsupported_exactly_where_admission_says():
    for i in range(24):
        p = generate(3, i, family="bytes" if i % 2 else "alias")
        ex = execute(p)
        recs = engine_records(p, ex, ex.gradient, None, f"p{i}")
        assert [(r.check, r.engine) for r in recs] == [
            (c, e) for e in engines.ENGINES for c in ("gradient", "bytes")]
        for r in recs:
            assert set(r.metrics) == {"retained_bytes", "temporary_bytes", "replayed_ops"}
            if r.check == "bytes":
                assert r.outcome == "match", r.detail
            elif ex.admission.supported:
                assert r.outcome == "match", r.detail
                assert r.max_abs_err is not None
            else:
                assert r.outcome == "unsupported" and r.detail == ex.admission.reason
            r.to_json()  # serialisable


def test_engine_records_without_forward_jacobian_use_the_version_graph():
    p = HAND["shift_up"]()
    ex = execute(p)
    recs = engine_records(p, ex, None, ["region"], "p")
    assert recs[0].outcome == "match" and "version graph" in recs[0].detail


def test_an_engine_that_raises_gives_error_records():
    class Broken:
        name = "broken"

        def run(self, program, *, admission=None):
            raise RuntimeError("boom")

    p = HAND["shift_up"]()
    recs = engine_records(p, execute(p), None, [Broken()], "p")
    assert [(r.check, r.outcome) for r in recs] == [("gradient", "error"), ("bytes", "error")]
    assert "boom" in recs[0].detail


def _gradient_bytes(engine, p, ex):
    g = engines.get(engine).run(p, admission=ex.admission).gradient
    return None if g is None else g.tobytes()


def _everything(engine, p, ex, runner=None):
    """What an engine run reports: the gradient's bytes, the states and the accounting."""
    r = engines.get(engine).run(p, admission=ex.admission, runner=runner)
    return (None if r.gradient is None else r.gradient.tobytes(), r.forward, r.final,
            r.replays, r.metrics, r.strategies)


def test_a_run_after_others_reports_what_it_reports_alone():
    """Under one check's memo, an engine run may take an op run from an earlier run of the
    program that started from the same bytes, R and draws, and follow the backward the
    first run swept (for the segments whose recovered values it matches byte for byte):
    every engine's and every mutant's result, run after an engine or a mutant under the
    same memo, is the one it gets run alone with the plain runner (gradient bytes, states
    after forward, backward and every replay, and the accounting). Mutants that recover
    other values (and get another gradient) part from the first run's sweep and sweep
    their own."""
    names = (*engines.ENGINES, *engines.mutant_names())
    parted = 0
    for family, i in itertools.product(("derivative", "hazard", "default"), range(2)):
        p = generate(4, i, family=family)
        ex = execute(p)
        alone = {name: _everything(name, replace(p), ex) for name in names}
        for first, second in itertools.product(names, repeat=2):
            memo = Memo()
            _everything(first, p, ex, memo)
            kept = len(memo._done)
            assert _everything(second, p, ex, memo) == alone[second], (family, i, first, second)
            if first == second:  # the same run again: every op run it asks for is kept
                assert len(memo._done) == kept, (family, i, first)
            parted += alone[first][0] != alone[second][0]
    assert parted  # (some second runs recovered other values than the first)


def test_a_check_leaves_only_the_programs_layers_data_on_the_program():
    """The engines' plans, the memo's op runs, sweep and state, and the verifier's plans
    are held by their layers: after a full check (engines, mutants, every reference), the
    program carries the programs layer's data alone, and the layers' caches let the
    program go."""
    import gc
    import weakref

    from replayverify.engines.plan import PER_PROGRAM
    from replayverify.verifier.check import check_program

    programs_layer = {"blocks", "steps", "layouts", "granules", "initial", "sha256",
                      "float_dtype", "loss_weights"}
    for family in ("derivative", "hazard", "default"):
        p = generate(4, 0, family=family)
        check_program(p, mutants=True)
        assert set(p.derived) <= programs_layer, set(p.derived) - programs_layer
        assert PER_PROGRAM.of(p)  # (the engines' plans are held, by the engines layer)
        alive = weakref.ref(p)
        del p
        gc.collect()
        assert alive() is None  # (no cache keeps it)
        assert all(ref() is not None for ref, _ in PER_PROGRAM._by.values())


def test_a_run_under_other_rules_takes_no_replay_or_backward_of_an_earlier_run(monkeypatch):
    from replayverify.programs.interpreter import FORWARD, REVERSE
    from replayverify.programs.model import OpKind

    p = HAND["shift_up"]()
    ex = execute(p)
    memo = Memo()
    engines.get("whole").run(p, admission=ex.admission, runner=memo)  # (keeps its replays
    # and backward)
    tanh, axpby = REVERSE[OpKind.TANH], FORWARD[OpKind.AXPBY]
    with monkeypatch.context() as m:
        m.setitem(REVERSE, OpKind.TANH, lambda rec, g: {f: -c for f, c in tanh(rec, g).items()})
        other_reverse = _everything("whole", replace(p), ex)
        assert _everything("whole", p, ex, memo) == other_reverse
    with monkeypatch.context() as m:
        m.setitem(FORWARD, OpKind.AXPBY, lambda *a: ((lambda v, w: (v + 1.0, w))(*axpby(*a))))
        other_forward = _everything("whole", replace(p), ex)
        assert _everything("whole", p, ex, memo) == other_forward
    plain = _everything("whole", replace(p), ex)
    assert other_reverse[0] != plain[0] and other_forward[3] != plain[3]


def test_a_reverse_rule_never_sees_what_the_op_wrote(monkeypatch):
    """The reverse rules' contract (``programs.interpreter``): a rule reads its record's
    operands and draws, never ``values``, which the memo's backward key leaves out. The
    run loop hands every rule a record without values (a replay's own record has them),
    so a rule that reads them fails loudly, under the plain runner and the memo alike."""
    from replayverify.programs.interpreter import REVERSE
    from replayverify.programs.model import OpKind

    p = HAND["shift_up"]()  # (its tanh is replayed by whole: the replay's record has values)
    ex = execute(p)
    tanh = REVERSE[OpKind.TANH]
    seen = []

    def reads_values(rec, g):
        seen.append(rec.values)
        return {f: c * (1.0 - rec.values ** 2) for f, c in tanh(rec, g).items()}

    monkeypatch.setitem(REVERSE, OpKind.TANH, reads_values)
    for runner in (None, Memo()):
        with pytest.raises(TypeError):
            engines.get("whole").run(replace(p), admission=ex.admission, runner=runner)
    assert seen and all(v is None for v in seen)


class _ShiftedDraws(Whole):
    """Replays with recorded noise one off: the replay starts from the bytes and R that
    whole's replay starts from, with other draws."""

    def recorded_draws(self, tape, s):
        return {k: d + 1.0 if d.dtype.kind == "f" else d
                for k, d in super().recorded_draws(tape, s).items()}


def test_a_replay_given_other_draws_is_not_taken_from_an_earlier_run():
    shifted = StrategyEngine("whole-shifted-draws", _ShiftedDraws())
    p = HAND["draws"]()
    memo = Memo()
    alone = shifted.run(replace(p))
    whole = engines.get("whole").run(p, runner=memo)
    after = shifted.run(p, runner=memo)
    assert after.replays == alone.replays != whole.replays
    assert after.gradient.tobytes() == alone.gradient.tobytes()


def test_an_op_run_is_taken_from_an_earlier_one_only_from_the_same_bytes_r_and_draws():
    """``Memo.run_op`` gives what ``execute_op`` gives from the state (bytes and R) and
    draws it is called with, whatever ran before it; op 0 of ``draws`` is a noise op."""
    from replayverify.engines.base import run_plan
    from replayverify.programs.interpreter import FORWARD, execute_op
    from replayverify.programs.state import initial_state

    p = HAND["draws"]()
    b0 = initial_state(p)
    other_bytes = b0.copy()
    other_bytes.buffers["s"][0] ^= 1
    other_r = b0.copy()
    other_r.rng = other_r.rng.advanced(1)
    drawn = execute_op(p, 0, b0.copy()).draws
    memo = Memo()
    # given other draws first, then none (the op draws from R), then the recorded ones
    for start, draws in [(b0, drawn + 1.0), (b0, None), (b0, drawn), (other_bytes, None),
                         (other_r, None), (b0, drawn + 1.0)]:
        want, got = start.copy(), start.copy()
        rec = execute_op(p, 0, want, draws=draws)
        taken = memo.run_op(p, 0, run_plan(p).ops[0], got, draws, FORWARD)
        assert got.snapshot() == want.snapshot()
        assert taken.draws.tobytes() == rec.draws.tobytes()
        assert taken.values.tobytes() == rec.values.tobytes()
    assert len(memo._done) == 3  # (one kept run for each start)


def test_larger_programs_keep_no_replays_or_backward(monkeypatch):
    from replayverify.verifier import memo as memo_module

    p = HAND["shift_up"]()
    memo = Memo()
    engines.get("whole").run(p, runner=memo)
    assert memo._done and memo._swept is not None
    monkeypatch.setattr(memo_module, "KEPT_RUN_BYTES", p.nbytes - 1)
    memo = Memo()
    engines.get("whole").run(p, runner=memo)
    assert memo._done is None and memo._swept is None


def test_the_engines_of_a_check_share_one_memo_and_user_engines_keep_their_protocol():
    """``engine_records`` hands its memo to the engines whose ``run`` takes a ``runner``
    (and to the mutants), never to an engine of the bare protocol."""
    from replayverify.verifier import engine_checks

    got = []

    class Bare:
        name = "bare"

        def run(self, program, *, admission=None):
            got.append(("bare", None))
            return engines.get("whole").run(program, admission=admission)

    class Taking:
        name = "taking"

        def run(self, program, *, admission=None, runner=None):
            got.append(("taking", runner))
            return engines.get("whole").run(program, admission=admission, runner=runner)

    p = HAND["shift_up"]()
    ex = execute(p)
    recs = engine_checks.engine_records(p, ex, None, [Bare(), Taking(), Taking()])
    assert [r.outcome for r in recs] == ["match"] * 6
    assert got[0] == ("bare", None)
    assert isinstance(got[1][1], Memo) and got[1][1] is got[2][1]


def test_an_instance_run_of_the_bare_protocol_gets_no_runner():
    """Whether an engine takes a runner is kept per class, so an instance whose own
    ``run`` (an attribute) has the bare protocol is asked by itself, not answered by its
    class's (which takes one)."""
    from replayverify.verifier.engine_checks import takes_runner

    class Taking:
        name = "taking"

        def run(self, program, *, admission=None, runner=None):
            return engines.get("whole").run(program, admission=admission, runner=runner)

    assert takes_runner(Taking())  # (the class's answer is now kept)
    bare = Taking()
    bare.run = lambda program, *, admission=None: engines.get("whole").run(
        program, admission=admission)
    assert not takes_runner(bare)
    p = HAND["shift_up"]()
    ex = execute(p)
    from replayverify.verifier import engine_checks

    recs = engine_checks.engine_records(p, ex, None, [bare])
    assert [r.outcome for r in recs] == ["match"] * 2


def test_adjoints_are_kept_one_slot_per_granule():
    """The engines keep one adjoint slot per granule of a buffer (``state.granules``: the
    gcd of its views' offsets, strides and itemsizes), not one per byte: 8 bytes where
    only 8-byte elements lie, 4 where a 4-byte view aliases them (a float64 element then
    covers two slots: the hand-written programs run every engine there, above)."""
    from replayverify.engines.plan import run_plan
    from replayverify.programs.state import granules, layouts

    seen = set()
    for name, make in HAND.items():
        p = make()
        g = granules(p)
        plan = run_plan(p)
        for b in p.buffers:
            sizes = [n for v in p.views if v.buffer == b.name
                     for n in (v.offset, v.itemsize, *v.strides)]
            assert all(n % g[b.name] == 0 for n in sizes), name
            assert any(n % (2 * g[b.name]) for n in sizes), name  # the greatest such
            assert plan.adjoint[b.name].size == -(-b.nbytes // g[b.name]), name
            seen.add(g[b.name])
        for lay in layouts(p).values():
            assert lay.slots.tolist() == (lay.starts // g[lay.view.buffer]).tolist()
            per = lay.dtype.itemsize // g[lay.view.buffer]
            assert lay.cover.tolist() == [s + j for s in lay.slots.tolist() for j in range(per)]
    assert seen == {4, 8}


def test_a_large_programs_runs_build_their_starting_adjoints(monkeypatch):
    """Past ``KEPT_ADJOINT_BYTES`` the plan keeps no template: each run builds the same
    starting adjoints, and the engines' results are the same bit for bit."""
    from replayverify.engines import plan as plan_module
    from replayverify.engines.runner import start_adjoints
    from replayverify.verifier import memo

    assert memo.KEPT_RUN_BYTES <= plan_module.KEPT_ADJOINT_BYTES  # (a kept sweep's start)
    for name in ("shift_up", "two_d", "draws"):
        kept = HAND[name]()
        template = plan_module.run_plan(kept).adjoint
        with monkeypatch.context() as m:
            m.setattr(plan_module, "KEPT_ADJOINT_BYTES", 0)
            p = HAND[name]()
            plan = plan_module.run_plan(p)
            assert plan.adjoint is None
            built = start_adjoints(p, plan, np)
            assert {b: a.tobytes() for b, a in built.items()} == \
                {b: a.tobytes() for b, a in template.items()}
            ex = execute(p)
            for engine in ("eager", "region", "guarded"):
                assert _everything(engine, p, ex) == _everything(engine, kept, ex), engine
