"""Every op's forward semantics on the byte buffers (SPEC §2)."""

import numpy as np
import pytest

from replayverify.programs import FORWARD, REVERSE, OpKind, execute, initial_state, layouts
from replayverify.programs.philox import RngState, draw_normals, draw_uniforms
from tests.helpers import program

F8 = "float64"


def vec(name, buf, off, n, dtype=F8, stride=None):
    item = np.dtype(dtype).itemsize
    return (name, buf, dtype, off * item, (n,), ((stride or 1) * item,))


def final(p, view):
    ex = execute(p)
    return ex.state.read(layouts(p)[view]), ex


def shift_program(direction):
    """copy x[1:] -> x[:-1] ("left") or x[:-1] -> x[1:] ("right") on one buffer."""
    views = [vec("x", "s", 0, 8), vec("lo", "s", 0, 7), vec("hi", "s", 1, 7)]
    dst, src = ("lo", "hi") if direction == "left" else ("hi", "lo")
    return program({"s": 64}, views, [{"op": "copy", "dst": dst, "x": src}],
                   {"view": "x", "weights": [1] * 8},
                   init=[{"view": "x", "values": [float(i) for i in range(8)]}])


def test_copy_is_memmove_shifting_left():
    x, _ = final(shift_program("left"), "x")
    assert x.tolist() == [1, 2, 3, 4, 5, 6, 7, 7]


def test_copy_is_memmove_shifting_right():
    x, _ = final(shift_program("right"), "x")
    assert x.tolist() == [0, 0, 1, 2, 3, 4, 5, 6]


def test_same_bits_whatever_the_layout():
    """A strided (stride 2) copy of the same values gives the same bits as a contiguous one."""
    vals = [0.1 * i - 0.3 for i in range(4)]
    ops = [{"op": "tanh", "dst": "d", "x": "src", "a": 1.3}]
    contiguous = program({"s": 64}, [vec("src", "s", 0, 4), vec("d", "s", 4, 4)], ops,
                         {"view": "d", "weights": [1] * 4},
                         init=[{"view": "src", "values": vals}])
    strided = program({"s": 64}, [vec("src", "s", 0, 4, stride=2), vec("d", "s", 1, 4, stride=2)],
                      ops, {"view": "d", "weights": [1] * 4},
                      init=[{"view": "src", "values": vals}])
    a, _ = final(contiguous, "d")
    b, _ = final(strided, "d")
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() == np.tanh(np.float64(1.3) * np.array(vals)).tobytes()


def test_axpby_left_to_right_in_float32():
    vx, vy = [0.1, 0.2, 0.3], [1e-3, 2e-3, 3e-3]
    p = program({"s": 64}, [vec("x", "s", 0, 3, "float32"), vec("y", "s", 4, 3, "float32"),
                            vec("d", "s", 8, 3, "float32")],
                [{"op": "axpby", "dst": "d", "x": "x", "y": "y", "a": 0.7, "b": -1.1, "c": 0.25}],
                {"view": "d", "weights": [1] * 3},
                init=[{"view": "x", "values": vx}, {"view": "y", "values": vy}])
    d, _ = final(p, "d")
    f = np.float32
    x, y = np.array(vx, f), np.array(vy, f)
    expect = (f(0.7) * x + f(-1.1) * y) + f(0.25)
    assert d.dtype == np.float32 and d.tobytes() == expect.tobytes()


def test_mul_sin():
    p = program({"s": 64}, [vec("x", "s", 0, 4), vec("y", "s", 4, 4)],
                [{"op": "mul", "dst": "y", "x": "x", "y": "y"},
                 {"op": "sin", "dst": "x", "x": "y", "a": 0.5}],
                {"view": "x", "weights": [1] * 4},
                init=[{"view": "x", "values": [1.0, 2.0, 3.0, 4.0]},
                      {"view": "y", "values": [0.5, 0.25, -1.0, 2.0]}])
    x, _ = final(p, "x")
    assert x.tolist() == np.sin(0.5 * np.array([0.5, 0.5, -3.0, 8.0])).tolist()


def test_scatter_duplicates_last_wins_and_untouched_keep_their_values():
    p = program({"s": 64, "i": 16},
                [vec("d", "s", 0, 5), vec("src", "s", 5, 3), vec("ix", "i", 0, 3, "int32")],
                [{"op": "scatter", "dst": "d", "x": "src", "index": "ix"}],
                {"view": "d", "weights": [1] * 5},
                init=[{"view": "d", "values": [9.0] * 5},
                      {"view": "src", "values": [10.0, 20.0, 30.0]},
                      {"view": "ix", "values": [1, -4, 3]}], inputs=["src"])
    d, ex = final(p, "d")
    # -4 mod 5 = 1, so j=1 overwrites j=0 at position 1 (the last j wins)
    assert d.tolist() == [9.0, 20.0, 9.0, 30.0, 9.0]
    assert ex.gradient.tolist() == [0.0, 1.0, 1.0]


def test_gather_floor_modulo_of_negative_indices():
    p = program({"s": 64, "i": 16},
                [vec("src", "s", 0, 3), vec("d", "s", 3, 4), vec("ix", "i", 0, 4, "int32")],
                [{"op": "gather", "dst": "d", "x": "src", "index": "ix"}],
                {"view": "d", "weights": [1, 2, 3, 4]},
                init=[{"view": "src", "values": [10.0, 20.0, 30.0]},
                      {"view": "ix", "values": [-1, -4, 5, 0]}], inputs=["src"])
    d, ex = final(p, "d")
    assert d.tolist() == [30.0, 30.0, 30.0, 10.0]
    assert ex.gradient.tolist() == [4.0, 0.0, 6.0]  # duplicates accumulate


def test_integer_ops_wrap_and_xor():
    p = program({"b": 16}, [vec("i", "b", 0, 2, "int32"), vec("j", "b", 2, 2, "int32")],
                [{"op": "iadd", "dst": "i", "x": "i", "k": 1},
                 {"op": "ixor", "dst": "j", "x": "i", "k": -1},
                 {"op": "icopy", "dst": "i", "x": "j"}],
                {"view": "i", "weights": [1, 1]},
                init=[{"view": "i", "values": [2**31 - 1, -5]}])
    ex = execute(p)
    lay = layouts(p)
    assert ex.state.read(lay["j"]).tolist() == [~(-(2**31)), ~(-4)]
    assert ex.state.read(lay["i"]).tolist() == [2**31 - 1, 3]
    assert ex.gradient.size == 0 and ex.admission.supported


def test_int32_reads_of_float64_halves():
    p = program({"s": 16}, [vec("f", "s", 0, 2), vec("halves", "s", 0, 4, "int32"),
                            vec("lows", "s", 0, 2, "int32", stride=2)],
                [{"op": "icopy", "dst": "lows", "x": "lows"}],
                {"view": "f", "weights": [1, 1]},
                init=[{"view": "f", "values": [1.0, -2.0]}])
    ex = execute(p)
    lay = layouts(p)
    raw = np.array([1.0, -2.0]).view("<i4")
    assert ex.state.read(lay["halves"]).tolist() == raw.tolist()
    assert ex.state.read(lay["lows"]).tolist() == raw[::2].tolist()
    # icopy rewrote the low halves with the same bits, but an integer op was their last writer
    assert not ex.admission.supported


def test_noise_and_dropout_follow_the_draw_rules():
    key, ctr = (3, 4), (2**32 - 2, 0, 0, 0)
    p = program({"s": 64}, [vec("x", "s", 0, 4), vec("y", "s", 4, 4)],
                [{"op": "noise", "dst": "x", "x": "x", "sigma": 0.5},
                 {"op": "dropout", "dst": "y", "x": "y", "keep": 0.5}],
                {"view": "x", "weights": [1] * 4},
                init=[{"view": "x", "values": [1.0] * 4}, {"view": "y", "values": [2.0] * 4}],
                rng={"key": list(key), "counter": list(ctr)})
    ex = execute(p)
    lay = layouts(p)
    z, after = draw_normals(RngState(key, ctr), 4)
    u1, end = draw_uniforms(after, 4)
    assert ex.state.read(lay["x"]).tobytes() == (1.0 + 0.5 * z).tobytes()
    m = (u1 < 0.5).astype(np.float64)
    assert ex.state.read(lay["y"]).tobytes() == ((2.0 * m) / 0.5).tobytes()
    assert ex.rng == end and end.counter == (6, 1, 0, 0)


def test_every_rule_table_covers_every_op_kind():
    for table in (FORWARD, REVERSE):
        assert set(table) == set(OpKind)
    # integer ops are named as having no reverse rule
    assert {k for k, v in REVERSE.items() if v is None} == {OpKind.IADD, OpKind.IXOR,
                                                             OpKind.ICOPY}


def test_initial_state_is_zeroed_then_init_in_order():
    p = program({"s": 32}, [vec("a", "s", 0, 2), vec("b", "s", 1, 2)], [],
                {"view": "a", "weights": [1, 1]},
                init=[{"view": "a", "values": [1.0, 2.0]}, {"view": "b", "values": [5.0, 6.0]}])
    st = initial_state(p)
    assert st.read(layouts(p)["a"]).tolist() == [1.0, 5.0]
    assert st.buffers["s"][24:].tolist() == [0] * 8


@pytest.mark.parametrize("seed", range(3))
def test_execution_is_deterministic(seed):
    from replayverify.programs import generate

    p = generate(seed, 7)
    a, b = execute(p), execute(p)
    assert a.buffers == b.buffers and a.rng == b.rng
    assert (a.gradient is None and b.gradient is None) or np.array_equal(a.gradient, b.gradient)


def test_op_specs_carry_the_facts_about_each_kind():
    from replayverify.programs.model import OP_SPECS, Draw, ShapeRule

    draws = {k: s.draws for k, s in OP_SPECS.items() if s.draws}
    assert draws == {OpKind.NOISE: Draw.NORMAL, OpKind.DROPOUT: Draw.KEEP_MASK}
    assert {k for k, s in OP_SPECS.items() if s.partial} == {OpKind.SCATTER}
    assert {k: s.shape for k, s in OP_SPECS.items() if s.indexed} == {
        OpKind.GATHER: ShapeRule.GATHER, OpKind.SCATTER: ShapeRule.SCATTER}
    assert {k: s.value_operands for k, s in OP_SPECS.items() if s.value_operands} == {
        OpKind.MUL: ("x", "y"), OpKind.TANH: ("x",), OpKind.SIN: ("x",),
        OpKind.GATHER: ("index",), OpKind.SCATTER: ("index",)}
    for kind, spec in OP_SPECS.items():  # every value operand is a field the op reads
        assert set(spec.value_operands) <= set(spec.reads), kind


def test_forward_rules_batch_over_a_trailing_axis():
    """Each FORWARD rule evaluated on operands with a trailing batch axis gives, column by
    column, what it gives on flat operands (the complex step relies on it)."""
    from replayverify.programs.model import OP_SPECS, Op

    rng = np.random.default_rng(0)
    n = 6
    for kind, spec in OP_SPECS.items():
        if spec.dtypes.value == "int":
            continue
        op = Op(kind, "d", "x", y="y" if "y" in spec.sources else None,
                index="i" if spec.indexed else None,
                **{c.name: 0.5 for c in spec.coefs})
        flat = {f: rng.standard_normal(n) for f in spec.sources}
        if spec.indexed:
            flat["index"] = np.array([3, -1, 3, 0, 7, 2])
        d = rng.standard_normal(n) if spec.draws else None
        cols = [FORWARD[kind](op, {f: v if f == "index" else v + j for f, v in flat.items()},
                              d, np.dtype(np.float64), n) for j in range(3)]
        batch = {f: v if f == "index" else v[:, None] + np.arange(3) for f, v in flat.items()}
        got, where = FORWARD[kind](op, batch, d, np.dtype(np.float64), n)
        for j, (want, want_where) in enumerate(cols):
            assert got[:, j].tobytes() == np.asarray(want).tobytes(), kind
            assert (where is None) == (want_where is None)
