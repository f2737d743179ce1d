"""The engines on CuPy arrays (``xp=cupy``) against the CPU, as SPEC §2 allows across backends.

- Bytes and generator state are exact *within* the GPU backend: every engine's state after
  its forward pass, after backward and after each segment replay equals the GPU's own plain
  forward pass (``execute_op`` on device buffers) at the segment boundaries.
- R is integer state: identical to the CPU's.
- Verdicts are the CPU's, and gradients are within SPEC §5's tolerance of the CPU engine's,
  wherever the two backends compute the same thing up to float rounding. ``tanh``/``sin``
  (and ``cos`` in backward) may differ in the last place across backends; when float bytes
  that differ are then read as integers (an int view over float bytes, a gather index),
  the two backends run different computations, and only the within-GPU checks apply.
  Such programs are counted (``record_property``), not hidden.

The NumPy interpreter stays the specification: admission and the reference gradient come
from it. Kept small: CuPy compiles each elementwise kernel on first use.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from replayverify import engines
from replayverify.engines import Region, StrategyEngine
from replayverify.gpu import journal as jr
from replayverify.gpu.engines import JournalRegion
from replayverify.programs import execute, generate
from replayverify.programs.arrays import array_namespace, scatter_add
from replayverify.programs.interpreter import execute_op
from replayverify.programs.state import initial_state, layouts
from replayverify.verifier.compare import compare_gradients
from replayverify.verifier.engine_checks import bytes_verdict, gradient_verdict
from tests.unit.engine_programs import HAND

FAMILIES = ("default", "derivative", "bytes", "alias", "complex")
PER_FAMILY = 2
MUTANTS = ("mutant:region-current-segment-only", "mutant:whole-redraw-noise")


def gpu_reference(cp, program) -> SimpleNamespace:
    """The GPU backend's own (B, R) at every segment boundary, like ``Execution.boundaries``."""
    state = initial_state(program, cp)
    cuts = np.cumsum((0,) + program.segments).tolist()
    bounds = [state.snapshot()] * cuts.count(0)
    for k in range(len(program.ops)):
        execute_op(program, k, state)
        bounds += [state.snapshot()] * cuts.count(k + 1)
    return SimpleNamespace(program=program, final=bounds[-1], boundaries=bounds)


def float_bytes_read_as_integers(program) -> bool:
    """Whether some integer view overlaps a float view (so float rounding can reach integers)."""
    lay = layouts(program)
    for buf in program.buffers:
        views = [v for v in lay.values() if v.view.buffer == buf.name]
        floats = [v.byte_index for v in views if v.view.is_float]
        ints = [v.byte_index for v in views if not v.view.is_float]
        if floats and ints and np.intersect1d(np.concatenate(floats),
                                              np.concatenate(ints)).size:
            return True
    return False


def programs():
    out = [(name, HAND[name]()) for name in ("shift_up", "gather_scatter", "draws", "two_d")]
    out += [(f"{f}/{i}", generate(0, i, family=f)) for f in FAMILIES for i in range(PER_FAMILY)]
    return out


def check_engine(cp, engine, p, ex, ref, cross):
    """Run ``engine`` on CPU and GPU; assert the checks of the module doc. Returns the GPU
    result and whether the cross-backend comparison applied."""
    cpu = engine.run(p, admission=ex.admission)
    gpu = engine.run(p, admission=ex.admission, xp=cp)
    assert bytes_verdict(cpu, ex).outcome == "match", engine.name
    byt = bytes_verdict(gpu, ref)
    assert byt.outcome == "match", (engine.name, byt.detail)
    assert gpu.final.rng == cpu.final.rng == ex.final.rng
    assert gpu.metrics == cpu.metrics, engine.name
    assert (gpu.gradient is None) == (cpu.gradient is None)
    if cross:
        assert gradient_verdict(gpu, ex, None).outcome == gradient_verdict(cpu, ex, None).outcome
        if cpu.gradient is not None:
            v = compare_gradients(gpu.gradient, cpu.gradient, p)
            assert v.outcome == "match", (engine.name, v.detail)
    return gpu


def test_array_module_helpers_on_cupy(cp):
    a = cp.zeros(5, dtype=cp.float64)
    assert array_namespace(a) is cp
    scatter_add(cp, a, cp.asarray([0, 2, 2, 4, 0]), cp.asarray([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert a.get().tolist() == [6.0, 0.0, 5.0, 0.0, 4.0]


def test_reference_engines_on_cupy(cp, record_property):
    exact_programs, coupled = 0, []
    for label, p in programs():
        ex = execute(p)
        ref = gpu_reference(cp, p)
        same_bytes = ref.boundaries == ex.boundaries
        exact_programs += same_bytes
        cross = same_bytes or not float_bytes_read_as_integers(p)
        if not cross:
            coupled.append(label)
        results = {}
        for name in engines.ENGINES:
            results[name] = check_engine(cp, engines.get(name), p, ex, ref, cross)
        if ex.admission.supported:  # within the GPU backend the engines agree with each other
            for name, r in results.items():
                v = compare_gradients(r.gradient, results["eager"].gradient, p)
                assert v.outcome == "match", (label, name, v.detail)
    record_property("programs_bytes_identical_across_backends", exact_programs)
    record_property("programs_without_cross_backend_gradient_check", ",".join(coupled))


def test_policies_and_mutants_on_cupy(cp):
    detected = dict.fromkeys(MUTANTS, 0)
    for label, p in programs()[:6]:
        ex, ref = execute(p), gpu_reference(cp, p)
        cross = ref.boundaries == ex.boundaries or not float_bytes_read_as_integers(p)
        n = len(p.segments)
        check_engine(cp, engines.PolicyEngine((("region", "whole", "eager") * n)[:n]), p, ex,
                     ref, cross)
        if not cross:
            continue
        for name in MUTANTS:
            m = engines.get(name)
            cpu, gpu = m.run(p, admission=ex.admission), m.run(p, admission=ex.admission, xp=cp)
            found_cpu = "diverge" in (gradient_verdict(cpu, ex, None).outcome,
                                      bytes_verdict(cpu, ex).outcome)
            found_gpu = "diverge" in (gradient_verdict(gpu, ex, None).outcome,
                                      bytes_verdict(gpu, ref).outcome)
            assert found_gpu == found_cpu, (label, name)
            detected[name] += found_gpu
    assert all(detected.values()), detected


def test_region_with_journal_kernels_on_cupy(cp):
    """Region at 4,096-byte granularity, journals saved and put back by the RawModule kernels."""
    for label, p in programs():
        ex, ref = execute(p), gpu_reference(cp, p)
        cross = ref.boundaries == ex.boundaries or not float_bytes_read_as_integers(p)
        gpu = check_engine(cp, StrategyEngine("region-journal", JournalRegion(jr.GRANULARITY)),
                           p, ex, ref, cross)
        plain = StrategyEngine("region@4096", Region(4096)).run(p, admission=ex.admission, xp=cp)
        assert gpu.final == plain.final and gpu.replays == plain.replays, label
