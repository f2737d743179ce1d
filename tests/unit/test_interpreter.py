"""The versioned interpreter: admission verdicts, gradient against sympy, segments."""

import numpy as np
import pytest

from replayverify.programs import execute, generate, layouts
from replayverify.programs.model import DTYPES
from replayverify.programs.philox import RngState, draw_normals, draw_uniforms
from tests.helpers import program

sympy = pytest.importorskip("sympy")


def vec(name, buf, off, n, dtype="float64", stride=1):
    item = np.dtype(dtype).itemsize
    return (name, buf, dtype, off * item, (n,), (stride * item,))


# ---------------------------------------------------------------- admission


def test_float_read_of_integer_written_bytes_is_unsupported_with_op_and_reason():
    p = program({"s": 32}, [vec("f", "s", 0, 4), vec("lo", "s", 0, 4, "int32", stride=2)],
                [{"op": "tanh", "dst": "f", "x": "f"},
                 {"op": "iadd", "dst": "lo", "x": "lo", "k": 1},
                 {"op": "sin", "dst": "f", "x": "f"}],
                {"view": "f", "weights": [1] * 4},
                init=[{"view": "f", "values": [0.1, 0.2, 0.3, 0.4]}], inputs=["f"])
    ex = execute(p)
    assert not ex.admission.supported and ex.gradient is None
    assert ex.admission.op == 2
    assert ex.admission.reason.startswith("float read at op 2")
    assert "last written by integer op 1" in ex.admission.reason


def test_integer_reads_of_float_bytes_are_fine():
    p = program({"s": 32, "b": 16},
                [vec("f", "s", 0, 4), vec("halves", "s", 0, 4, "int32"),
                 vec("out", "b", 0, 4, "int32")],
                [{"op": "icopy", "dst": "out", "x": "halves"},
                 {"op": "tanh", "dst": "f", "x": "f"}],
                {"view": "f", "weights": [1] * 4},
                init=[{"view": "f", "values": [0.1, 0.2, 0.3, 0.4]}], inputs=["f"])
    assert execute(p).admission.supported


def test_float_read_across_two_writes_is_unsupported():
    # view "mid" straddles two float64 elements written by different ops
    p = program({"s": 32}, [vec("f", "s", 0, 2), vec("g", "s", 2, 2),
                            ("mid", "s", "float32", 4, (2,), (8,))],
                [{"op": "tanh", "dst": "f", "x": "f"}],
                {"view": "mid", "weights": [1, 1]}, inputs=["f"])
    ex = execute(p)
    assert not ex.admission.supported
    assert "the loss" in ex.admission.reason and "different byte extent" in ex.admission.reason


def test_mixed_constant_and_written_bytes_are_unsupported():
    p = program({"s": 32}, [vec("f4", "s", 0, 2, "float32"), vec("d", "s", 0, 1)],
                [{"op": "tanh", "dst": "f4", "x": "f4"}],
                {"view": "d", "weights": [1]}, init=[])
    p2 = program({"s": 32}, [("half", "s", "float32", 0, (1,), (4,)), vec("d", "s", 0, 1)],
                 [{"op": "tanh", "dst": "half", "x": "half"}],
                 {"view": "d", "weights": [1]})
    assert not execute(p).admission.supported
    reason = execute(p2).admission.reason
    assert "several writes" in reason and "constant" in reason


def test_constants_are_not_differentiated():
    p = program({"s": 32}, [vec("x", "s", 0, 2), vec("c", "s", 2, 2)],
                [{"op": "mul", "dst": "x", "x": "x", "y": "c"}],
                {"view": "x", "weights": [1, 1]},
                init=[{"view": "x", "values": [1.0, 2.0]}, {"view": "c", "values": [3.0, 4.0]}],
                inputs=["x"])
    assert execute(p).gradient.tolist() == [3.0, 4.0]


def test_boundaries_are_the_segment_states():
    p = generate(0, 3, "derivative")
    ex = execute(p)
    assert len(ex.boundaries) == len(p.segments) + 1
    assert ex.boundaries[-1] == ex.final
    from replayverify.programs import initial_state, run_forward

    assert ex.boundaries[0] == initial_state(p).snapshot()
    for s, (lo, hi) in enumerate(p.segment_bounds()):
        st = ex.boundaries[s].state()
        run_forward(p, st, lo, hi)
        assert st.snapshot() == ex.boundaries[s + 1]


def test_the_final_state_reads_the_last_boundarys_bytes_read_only():
    """With boundaries recorded, the final state is B_T's bytes themselves (one copy for
    both), read-only; without, the state the ops ran on."""
    from replayverify.programs import run_forward

    p = generate(0, 3, "derivative")
    ex = execute(p)
    for name, buf in ex.state.buffers.items():
        assert not buf.flags.writeable
        assert buf.base is ex.boundaries[-1].buffers[name]  # (those bytes, not a copy)
    with pytest.raises(ValueError, match="read-only"):
        ex.state.write(layouts(p)[p.loss.view], np.zeros(layouts(p)[p.loss.view].size))
    unrecorded = execute(p, record_boundaries=False)
    assert unrecorded.boundaries == [] and unrecorded.final == ex.final
    assert all(buf.flags.writeable for buf in unrecorded.state.buffers.values())
    assert run_forward(p).snapshot() == ex.final


def test_given_draws_replace_philox_and_keep_the_generator_exact():
    p = program({"b": 32}, [vec("x", "b", 0, 4)],
                [{"op": "noise", "dst": "x", "x": "x", "sigma": 0.5},
                 {"op": "dropout", "dst": "x", "x": "x", "keep": 0.5},
                 {"op": "mul", "dst": "x", "x": "x", "y": "x"}],
                {"view": "x", "weights": [1, 1, 1, 1]}, inputs=["x"],
                init=[{"view": "x", "values": [1, 2, 3, 4]}])
    z = np.array([0.5, -1.0, 2.0, 0.25])
    mask = np.array([1.0, 0.0, 1.0, 1.0])
    ex = execute(p, draws={0: z, 1: mask})
    x = np.array([1, 2, 3, 4.0])
    y = (x + 0.5 * z) * mask / 0.5
    got = np.frombuffer(ex.buffers["b"], np.float64)
    np.testing.assert_array_equal(got, y * y)
    assert ex.rng == execute(p).rng  # advanced by the element counts, as when drawing
    np.testing.assert_allclose(ex.gradient, 2 * y * mask / 0.5)
    only_noise = execute(p, draws={0: z})  # op 1 then draws from Philox
    assert only_noise.records[1].draws.tolist() == execute(p).records[1].draws.tolist()
    with pytest.raises(ValueError, match="op 2 is not a draw op"):
        execute(p, draws={2: z})
    with pytest.raises(ValueError, match="draws 4 values, 3 given"):
        execute(p, draws={0: z[:3]})


# ---------------------------------------------------------------- sympy reference


class SymbolicRun:
    """An independent interpreter over sympy expressions, one per float64 element slot.

    Only for float64 programs whose float views are 8-byte aligned (the complex
    family): each slot (buffer, byte offset) holds an expression in the input symbols.
    """

    def __init__(self, p):
        self.p = p
        self.slots = {}
        self.ints = {}
        self.rng = RngState(p.rng.key, p.rng.counter)
        lay = layouts(p)
        self.lay = lay
        for b in p.buffers:
            raw = np.zeros(b.nbytes, np.uint8)
            self.ints[b.name] = raw
        for e in p.init:
            v = lay[e.view]
            arr = np.asarray(e.values).astype(v.dtype)
            self.ints[v.view.buffer][v.byte_index] = arr.view(np.uint8)
        self.symbols = []
        for name in p.inputs:
            v = lay[name]
            for j, start in enumerate(v.starts):
                s = sympy.Symbol(f"{name}_{j}")
                self.symbols.append(s)
                self.slots[(v.view.buffer, int(start))] = s

    def read(self, name):
        v = self.lay[name]
        if not v.view.is_float:
            return self.ints[v.view.buffer][v.byte_index].view(v.dtype).tolist()
        out = []
        for start in v.starts:
            key = (v.view.buffer, int(start))
            if key not in self.slots:
                raw = self.ints[v.view.buffer][int(start): int(start) + 8].view("<f8")[0]
                self.slots[key] = sympy.Float(float(raw), 30)
            out.append(self.slots[key])
        return out

    def write(self, name, values, where=None):
        v = self.lay[name]
        where = range(len(values)) if where is None else where
        for j, val in zip(where, values):
            self.slots[(v.view.buffer, int(v.starts[j]))] = val

    def run(self):
        for op in self.p.ops:
            kind = op.kind.value
            x = self.read(op.x)
            n = len(x)
            if kind == "axpby":
                y = self.read(op.y)
                out = [(op.a * xi + op.b * yi) + op.c for xi, yi in zip(x, y)]
            elif kind == "mul":
                out = [xi * yi for xi, yi in zip(x, self.read(op.y))]
            elif kind == "tanh":
                out = [sympy.tanh(op.a * xi) for xi in x]
            elif kind == "sin":
                out = [sympy.sin(op.a * xi) for xi in x]
            elif kind == "copy":
                out = list(x)
            elif kind == "noise":
                z, self.rng = draw_normals(self.rng, n)
                out = [xi + op.sigma * float(zi) for xi, zi in zip(x, z)]
            elif kind == "dropout":
                u, self.rng = draw_uniforms(self.rng, n)
                out = [xi * float(ui < op.keep) / op.keep for xi, ui in zip(x, u)]
            elif kind == "gather":
                idx = self.read(op.index)
                out = [x[i % n] for i in idx]
            elif kind == "scatter":
                idx = self.read(op.index)
                m = self.lay[op.dst].size
                hits = {}
                for j, i in enumerate(idx):
                    hits[i % m] = x[j]
                self.write(op.dst, list(hits.values()), list(hits.keys()))
                continue
            else:
                raise AssertionError(kind)
            self.write(op.dst, out)
        w = self.p.loss.weights
        return sum(wi * li for wi, li in zip(w, self.read(self.p.loss.view)))


@pytest.mark.parametrize("index", range(12))
def test_gradient_agrees_with_sympy(index):
    p = generate(11, index, "complex", dims=(4,), n_ops=(8,))
    ex = execute(p)
    assert ex.admission.supported
    sym = SymbolicRun(p)
    loss = sym.run()
    values = {}
    lay = layouts(p)
    from replayverify.programs import initial_state

    st = initial_state(p)
    for name in p.inputs:
        for s, v in zip([s for s in sym.symbols if s.name.startswith(name + "_")],
                        st.read(lay[name]).reshape(-1)):
            values[s] = sympy.Float(float(v), 30)
    ref = np.array([float(sympy.diff(loss, s).evalf(30, subs=values)) for s in sym.symbols])
    assert abs(float(loss.evalf(30, subs=values)) - ex.loss) <= 1e-12 * max(1, abs(ex.loss))
    scale = max(1.0, float(np.max(np.abs(ref))))
    assert np.max(np.abs(ex.gradient - ref)) <= 1e-12 * scale


def test_dtypes_table_is_little_endian():
    assert all(d.byteorder in "<|=" for d in DTYPES.values())


def test_the_final_storage_sweep_reads_only_the_stale_operands():
    """``final_storage_operands`` reads from the final state only the value operands whose
    bytes changed (``Execution.stale``); the others keep their recorded arrays. The sweep
    gives, bit for bit, the gradient of reading every value operand from final storage,
    and the stale reads are those whose recorded and final bytes differ."""
    from replayverify.programs.interpreter import final_storage_operands, reverse_sweep

    def every_operand_from_final_storage(ex):
        lay = layouts(ex.program)

        def operands(rec):
            out = dict(rec.operands)
            for f in rec.op.spec.value_operands:
                out[f] = ex.state.read(lay[getattr(rec.op, f)]).reshape(-1)
            return out

        return operands

    changed = 0
    for family in ("derivative", "hazard", "alias", "mixed", "complex"):
        for i in range(12):
            ex = execute(generate(2, i, family))
            final = every_operand_from_final_storage(ex)
            assert ex.stale == [(rec.index, f) for rec in ex.records if rec.float_op
                                for f in rec.op.spec.value_operands
                                if final(rec)[f].tobytes() != rec.operands[f].tobytes()]
            if not ex.admission.supported:
                continue
            want = reverse_sweep(ex, operands=final)
            assert want.tobytes() == reverse_sweep(
                ex, operands=final_storage_operands(ex)).tobytes()
            assert want.tobytes() == ex.hazard_gradient.tobytes()
            changed += not np.array_equal(want, ex.gradient)
    assert changed > 20  # the stale operands do change most of these gradients


def test_the_two_sweeps_share_the_ops_after_the_last_stale_read():
    """``gradient`` and ``hazard_gradient`` continue one shared sweep over the ops after
    the last stale read; each is, bit for bit, its own whole sweep, whichever is asked
    first."""
    from replayverify.programs.interpreter import final_storage_operands, reverse_sweep

    shared = 0
    for family in ("derivative", "hazard", "alias", "mixed"):
        for i in range(10):
            for hazard_first in (False, True):
                ex = execute(generate(4, i, family))
                if not ex.admission.supported:
                    continue
                if hazard_first:
                    hazard, gradient = ex.hazard_gradient, ex.gradient
                else:
                    gradient, hazard = ex.gradient, ex.hazard_gradient
                assert gradient.tobytes() == reverse_sweep(ex).tobytes()
                assert hazard.tobytes() == reverse_sweep(
                    ex, operands=final_storage_operands(ex)).tobytes()
                # (let go once both sweeps took what they need)
                assert "_shared_sweep" not in ex.__dict__
                stop = ex._shared_sweep[0]
                shared += 0 < stop < len(ex.records)
    assert shared > 20


def test_past_shared_sweep_nodes_each_sweep_is_its_own_whole_sweep(monkeypatch):
    """Over ``SHARED_SWEEP_NODES`` version nodes the two sweeps share nothing (no adjoints
    kept between them), and each is, bit for bit, its own whole sweep."""
    from replayverify.programs import interpreter
    from replayverify.programs.interpreter import final_storage_operands, reverse_sweep

    monkeypatch.setattr(interpreter, "SHARED_SWEEP_NODES", 0)
    swept = 0
    for family in ("derivative", "hazard", "alias", "mixed"):
        for i in range(10):
            ex = execute(generate(4, i, family))
            if not ex.admission.supported:
                continue
            gradient = ex.gradient
            assert "_shared_sweep" not in ex.__dict__
            hazard = ex.hazard_gradient
            assert "_shared_sweep" not in ex.__dict__
            assert gradient.tobytes() == reverse_sweep(ex).tobytes()
            assert hazard.tobytes() == reverse_sweep(
                ex, operands=final_storage_operands(ex)).tobytes()
            swept += 1
    assert swept > 20


def test_contributions_added_in_chunks_give_the_same_gradients(monkeypatch):
    """A large read's contributions are added ``ACCUMULATE_CHUNK`` elements at a time:
    forced to 3, every gradient (admitted or with constant reads) is the same bit for bit."""
    from replayverify.programs import interpreter

    programs = [generate(4, i, family) for family in ("derivative", "alias", "mixed")
                for i in range(8)]
    whole = [(ex.gradient.tobytes(), ex.hazard_gradient.tobytes())
             for ex in map(execute, programs) if ex.admission.supported]
    monkeypatch.setattr(interpreter, "ACCUMULATE_CHUNK", 3)
    chunked = [(ex.gradient.tobytes(), ex.hazard_gradient.tobytes())
               for ex in map(execute, programs) if ex.admission.supported]
    assert chunked == whole and len(whole) > 10


def test_reverse_rules_take_each_coefficient_in_the_views_dtype():
    """``_f64`` is ``float(op.coef_as(name, dtype))``, also where float64 skips NumPy."""
    from replayverify.programs.interpreter import OpValues, _f64
    from replayverify.programs.model import Op, OpKind

    for value in (0.1, -2.5, 1e-310, 3.4e38, 1e39, 7, 2**60 + 1, float("inf")):
        op = Op(OpKind.TANH, dst="d", x="x", a=value)
        for dtype in (DTYPES["float64"], DTYPES["float32"], np.dtype(">f8")):
            rec = OpValues(0, op, dtype, 1, {})
            with np.errstate(over="ignore"):  # 1e39 is inf in float32
                assert _f64(rec, "a") == float(op.coef_as("a", dtype))
                assert type(_f64(rec, "a")) is float


def test_reverse_rules_read_operands_as_flat_float64():
    """``_x``: a flat float64 operand as it is, any other flattened and cast."""
    from replayverify.programs.interpreter import OpValues, _x
    from replayverify.programs.model import Op, OpKind

    op = Op(OpKind.TANH, dst="d", x="x", a=1.0)
    flat = np.arange(6.0)
    for given in (flat, flat[::2], flat.reshape(2, 3), flat.astype(np.float32)):
        got = _x(OpValues(0, op, DTYPES["float64"], 1, {"x": given}))
        assert got.dtype == np.float64 and got.ndim == 1
        assert got.tobytes() == given.reshape(-1).astype(np.float64).tobytes()
    assert _x(OpValues(0, op, DTYPES["float64"], 1, {"x": flat})) is flat
