"""The engines on another array module (``xp``), without a GPU: ``tests/unit/fake_device`` is a
CPU stand-in for CuPy whose arrays refuse implicit conversion to NumPy and NumPy ufuncs.

Every engine, policies and the mutants run on it and must give what they give on NumPy:
the same gradient bits, the same bytes and generator state after the forward pass, after
backward and after every replay, the same accounting. Because the stand-in computes with
NumPy, equality is exact; a silent host round trip or a NumPy-only call on a device
array would raise instead. The only transfers back to the host are the snapshots and the
gradient, which is counted.
"""

import numpy as np
import pytest

from replayverify import engines
from replayverify.engines import PolicyEngine, Region, StrategyEngine, run_policy
from replayverify.programs import execute, generate
from replayverify.programs.arrays import array_namespace, to_host
from replayverify.programs.interpreter import draw as interpreter_draw
from replayverify.programs.interpreter import execute_op, scatter_winners
from replayverify.programs.state import initial_state
from tests.unit import fake_device as fd
from tests.unit.engine_programs import HAND


def assert_same(cpu, dev):
    """Two EngineResults agree bit for bit (gradient, snapshots, accounting)."""
    assert (cpu.gradient is None) == (dev.gradient is None), cpu.engine
    if cpu.gradient is not None:
        assert type(dev.gradient) is np.ndarray
        assert dev.gradient.dtype == cpu.gradient.dtype
        assert dev.gradient.tobytes() == cpu.gradient.tobytes(), cpu.engine
    assert dev.reason == cpu.reason
    assert dev.forward == cpu.forward, cpu.engine
    assert dev.final == cpu.final, (cpu.engine, cpu.final.differences(dev.final))
    assert dev.replays == cpu.replays, cpu.engine
    assert dev.metrics == cpu.metrics
    assert dev.segment_retained_bytes == cpu.segment_retained_bytes
    assert dev.strategies == cpu.strategies


def host_transfers(result, program) -> int:
    """Transfers to the host one run may make: its snapshots and its gradient."""
    snaps = 2 + sum(r is not None for r in result.replays)
    return snaps * len(program.buffers) + (result.gradient is not None and
                                          len(program.inputs) > 0)


def run_both(engine, program, admission):
    cpu = engine.run(program, admission=admission)
    before = fd.TRANSFERS["to_host"]
    dev = engine.run(program, admission=admission, xp=fd)
    assert fd.TRANSFERS["to_host"] - before == host_transfers(dev, program), engine.name
    assert_same(cpu, dev)
    return cpu, dev


# ---------------------------------------------------------------- the stand-in is strict


def test_the_stand_in_refuses_implicit_host_conversion():
    a = fd.arange(4, dtype=np.float64)
    for call in (lambda: np.asarray(a), lambda: np.tanh(a), lambda: np.concatenate([a]),
                 lambda: np.add.at(a, fd.arange(1), 1.0), lambda: a + np.ones(4),
                 lambda: a[np.arange(2)], lambda: a.__setitem__(fd.arange(2), np.ones(2)),
                 lambda: np.unique(a), lambda: a.tobytes()):
        with pytest.raises((TypeError, AttributeError)):
            call()
    assert isinstance(np.float64(2.0) * a, fd.DeviceArray)  # numpy scalars are fine
    assert to_host(fd.tanh(a)).tobytes() == np.tanh(np.arange(4.0)).tobytes()
    assert array_namespace(a) is fd and array_namespace(np.ones(1)) is np


def test_state_lives_on_the_array_module():
    p = HAND["draws"]()
    state = initial_state(p, fd)
    assert all(isinstance(b, fd.DeviceArray) for b in state.buffers.values())
    ref = initial_state(p)
    for k in range(len(p.ops)):
        ev = execute_op(p, k, state)
        execute_op(p, k, ref)
        assert isinstance(ev.values, fd.DeviceArray)
        assert ev.draws is None or isinstance(ev.draws, fd.DeviceArray)
    assert state.snapshot() == ref.snapshot()
    back = ref.snapshot().state(fd)
    assert isinstance(back.buffers[p.buffers[0].name], fd.DeviceArray)
    assert back.snapshot() == ref.snapshot()


@pytest.mark.parametrize("last_wins", [True, False])
def test_scatter_winners_without_numpy_unique(last_wins):
    rng = np.random.default_rng(3)
    for n in (1, 5, 17):
        index = rng.integers(-40, 40, size=(rng.integers(1, 30),)).astype(np.int32)
        want = scatter_winners(index, n, last_wins)
        got = scatter_winners(fd.asarray(index), n, last_wins)
        for w, g in zip(want, got):
            assert to_host(g).tolist() == w.tolist()


# ---------------------------------------------------------------- every engine, exact


@pytest.mark.parametrize("name", sorted(HAND))
def test_engines_on_hand_written_programs(name):
    p = HAND[name]()
    adm = execute(p, record_boundaries=False).admission
    for engine in engines.ENGINES:
        run_both(engines.get(engine), p, adm)
    for g in (8, 4096):
        run_both(StrategyEngine(f"region@{g}", Region(g)), p, adm)


@pytest.mark.parametrize("family", ["default", "derivative", "bytes", "alias", "complex"])
def test_engines_on_generated_programs(family):
    for i in range(4):
        p = generate(2, i, family=family)
        ex = execute(p)
        for engine in engines.ENGINES:
            _, dev = run_both(engines.get(engine), p, ex.admission)
            assert dev.final == ex.final  # and so against the interpreter


def test_policies():
    for i in range(4):
        p = generate(5, i, family="derivative")
        n = len(p.segments)
        adm = execute(p, record_boundaries=False).admission
        for policy in (("eager", "whole", "region", "readset") * n)[:n], \
                      (("region", "whole") * n)[:n], ("region",) * n:
            run_both(PolicyEngine(policy), p, adm)
        assert_same(run_policy(p, ("whole",) * n, adm), run_policy(p, ("whole",) * n, adm, fd))


def test_mutants_behave_the_same_on_both():
    """Wrong engines are wrong in the same bits on both modules (so detected alike)."""
    programs = [HAND[n]() for n in ("shift_up", "gather_scatter", "draws", "int_halves")]
    programs += [generate(0, i, family="derivative") for i in range(2)]
    for p in programs:
        adm = execute(p, record_boundaries=False).admission
        for name in engines.mutant_names():
            run_both(engines.get(name), p, adm)


def test_numpy_is_the_default():
    p = HAND["shift_up"]()
    assert_same(engines.get("region").run(p), engines.get("region").run(p, xp=np))
    assert all(type(b) is np.ndarray for b in initial_state(p).buffers.values())


def test_engines_import_neither_the_gpu_package_nor_cupy():
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, replayverify.engines, replayverify.verifier\n"
            "from replayverify import engines\n"
            "from tests.unit.engine_programs import HAND\n"
            "engines.get('region').run(HAND['draws']())\n"
            "bad = [m for m in sys.modules if m.startswith(('replayverify.gpu', 'cupy'))]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


def _np_gather(op, o, d, t, n):
    x = o["x"].reshape(-1)
    return x[np.mod(o["index"].reshape(-1), x.size)], None


def _host_draw(op, rng, n, dtype, xp=np, blocks=None):
    return interpreter_draw(op, rng, n, dtype)  # forgets to move the draws to xp


@pytest.mark.parametrize("bug", ["np.add.at in backward", "np.mod in a rule", "host draws"])
def test_a_numpy_only_call_in_the_engine_path_raises(bug, monkeypatch):
    """The stand-in is what makes the tests above meaningful: a NumPy-only call raises."""
    import replayverify.engines.preservation as strategies
    import replayverify.engines.runner as runner
    import replayverify.programs.interpreter as interpreter
    from replayverify.programs.model import OpKind

    program = HAND["gather_scatter"]()
    if bug == "np.add.at in backward":
        monkeypatch.setattr(runner, "scatter_add", lambda xp, a, i, v: np.add.at(a, i, v))
    elif bug == "np.mod in a rule":
        monkeypatch.setitem(interpreter.FORWARD, OpKind.GATHER, _np_gather)
    else:
        program = HAND["draws"]()
        monkeypatch.setattr(interpreter, "draw", _host_draw)
        monkeypatch.setattr(strategies, "draw", _host_draw)
    engine = engines.get("whole")
    engine.run(program)  # fine on NumPy
    with pytest.raises(TypeError):
        engine.run(program, xp=fd)


def test_the_verifier_checks_an_engine_on_another_array_module():
    """engine_records(..., xp=...) runs the engines there and judges them against the
    NumPy interpreter: the records are the NumPy run's."""
    from replayverify.verifier.engine_checks import engine_records

    for program in (HAND["gather_scatter"](), HAND["draws"]()):
        ex = execute(program)
        cpu = engine_records(program, ex, None, ["whole", "region"])
        dev = engine_records(program, ex, None, ["whole", "region"], xp=fd)
        assert [(r.check, r.engine, r.outcome, r.detail) for r in dev] == \
            [(r.check, r.engine, r.outcome, r.detail) for r in cpu]
        assert all(r.outcome == "match" for r in dev)
