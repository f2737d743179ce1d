"""Hand-written programs for the engine tests: each exercises one hazard of replay."""

from __future__ import annotations

import numpy as np

from tests.helpers import program


def vec(name, buf, off, n, dtype="float64", stride=1):
    item = np.dtype(dtype).itemsize
    return (name, buf, dtype, off * item, (n,), (stride * item,))


def values(n, seed=0, lo=-0.9, hi=0.9):
    return [round(float(v), 6) for v in np.random.default_rng(seed).uniform(lo, hi, n)]


def shift_up():
    """Overlapping copies in both directions, a later segment overwriting what an
    earlier one reads, in-place tanh and mul."""
    return program(
        {"s": 80},
        [vec("x", "s", 0, 10), vec("lo", "s", 0, 9), vec("hi", "s", 1, 9), vec("a", "s", 0, 4),
         vec("b", "s", 4, 4)],
        [{"op": "copy", "dst": "hi", "x": "lo"},  # shift up: memmove != memcpy
         {"op": "tanh", "dst": "x", "x": "x", "a": 1.3},
         {"op": "mul", "dst": "a", "x": "a", "y": "b"},
         {"op": "copy", "dst": "lo", "x": "hi"},  # shift down
         {"op": "sin", "dst": "b", "x": "a", "a": 0.7},
         {"op": "axpby", "dst": "x", "x": "x", "y": "x", "a": 0.5, "b": -0.25, "c": 0.1},
         {"op": "mul", "dst": "b", "x": "b", "y": "a"},
         {"op": "tanh", "dst": "a", "x": "b"}],
        {"view": "x", "weights": values(10, 1)},
        init=[{"view": "x", "values": values(10)}], inputs=["x"], segments=[2, 3, 3],
    )


def int_halves():
    """int32 views over float64 halves: integer reads of float bytes, an integer write
    over float bytes (byte exact, derivative refused), xor and icopy."""
    return program(
        {"s": 64, "bits": 32},
        [vec("f", "s", 0, 8), vec("halves", "s", 0, 8, "int32"),
         vec("lo", "s", 0, 4, "int32", stride=2), vec("out", "bits", 0, 8, "int32"),
         vec("g", "s", 4, 4)],
        [{"op": "tanh", "dst": "f", "x": "f", "a": 0.9},
         {"op": "icopy", "dst": "out", "x": "halves"},
         {"op": "ixor", "dst": "out", "x": "out", "k": 123456},
         {"op": "iadd", "dst": "lo", "x": "lo", "k": 7},
         {"op": "sin", "dst": "g", "x": "g"},
         {"op": "noise", "dst": "f", "x": "f", "sigma": 0.1}],
        {"view": "f", "weights": [1] * 8},
        init=[{"view": "f", "values": values(8, 2)}], inputs=["f"], segments=[2, 2, 2],
        rng={"key": [5, 9], "counter": [0, 0, 0, 0]},
    )


def int_reads():
    """Integer reads of float bytes in a supported program, with writes to the int buffer."""
    return program(
        {"s": 64, "bits": 32},
        [vec("f", "s", 0, 8), vec("halves", "s", 0, 8, "int32"),
         vec("out", "bits", 0, 8, "int32"), vec("f4", "s", 0, 4)],
        [{"op": "icopy", "dst": "out", "x": "halves"},
         {"op": "tanh", "dst": "f", "x": "f", "a": 0.9},
         {"op": "icopy", "dst": "out", "x": "halves"},
         {"op": "mul", "dst": "f4", "x": "f4", "y": "f4"},
         {"op": "iadd", "dst": "out", "x": "out", "k": -3}],
        {"view": "f", "weights": values(8, 3)},
        init=[{"view": "f", "values": values(8, 4)}], inputs=["f"], segments=[1, 2, 2],
    )


def gather_scatter():
    """Gather and scatter with duplicate and negative indices; the index is rewritten
    (by an integer op) after the ops that read it."""
    return program(
        {"s": 96, "ix": 24},
        [vec("w", "s", 0, 6), vec("v", "s", 6, 6), vec("all", "s", 0, 12),
         vec("idx", "ix", 0, 6, "int32")],
        [{"op": "gather", "dst": "v", "x": "all", "index": "idx"},
         {"op": "tanh", "dst": "w", "x": "v"},
         {"op": "scatter", "dst": "all", "x": "w", "index": "idx"},
         {"op": "iadd", "dst": "idx", "x": "idx", "k": 5},
         {"op": "mul", "dst": "v", "x": "v", "y": "w"},
         {"op": "gather", "dst": "w", "x": "all", "index": "idx"},
         {"op": "scatter", "dst": "all", "x": "v", "index": "idx"}],
        {"view": "all", "weights": values(12, 5)},
        init=[{"view": "all", "values": values(12, 6)},
              {"view": "idx", "values": [-1, 3, -1, 7, 3, -13]}],
        inputs=["all"], segments=[2, 2, 3],
    )


def draws(dtype="float64"):
    """Draws in several segments: noise, dropout, noise again; dropout's mask matters."""
    return program(
        {"s": 8 * np.dtype(dtype).itemsize},
        [vec("x", "s", 0, 8, dtype), vec("h", "s", 0, 4, dtype), vec("t", "s", 4, 4, dtype)],
        [{"op": "noise", "dst": "x", "x": "x", "sigma": 0.05},
         {"op": "tanh", "dst": "h", "x": "t", "a": 1.1},
         {"op": "dropout", "dst": "x", "x": "x", "keep": 0.6},
         {"op": "mul", "dst": "t", "x": "h", "y": "t"},
         {"op": "noise", "dst": "h", "x": "h", "sigma": 0.2},
         {"op": "dropout", "dst": "t", "x": "t", "keep": 0.75},
         {"op": "sin", "dst": "x", "x": "x"}],
        {"view": "x", "weights": values(8, 7)},
        init=[{"view": "x", "values": values(8, 8)}], inputs=["x"], segments=[2, 2, 3],
        rng={"key": [11, 3], "counter": [4294967295, 0, 0, 0]},
    )


def two_d():
    """2-D row-major and column-major windows over one buffer, float32."""
    return program(
        {"s": 64},
        [("m", "s", "float32", 0, (3, 4), (16, 4)), ("c", "s", "float32", 0, (4, 3), (4, 16)),
         ("r", "s", "float32", 4, (2, 4), (16, 4)), ("q", "s", "float32", 20, (2, 4), (16, 4))],
        [{"op": "tanh", "dst": "c", "x": "c", "a": 0.8},
         {"op": "axpby", "dst": "q", "x": "r", "y": "q", "a": 0.7, "b": 0.2, "c": 0.0},
         {"op": "mul", "dst": "r", "x": "r", "y": "q"},
         {"op": "sin", "dst": "m", "x": "m"}],
        {"view": "m", "weights": values(12, 9)},
        init=[{"view": "m", "values": values(12, 10)}], inputs=["m"], segments=[1, 2, 1],
    )


def sparse_writes(n=512, segments=4):
    """A large buffer of which each op writes one element: a low write fraction."""
    ops = []
    for k in range(4 * segments):
        ops.append({"op": "tanh", "dst": f"e{k % 4}", "x": f"e{(k + 1) % 4}", "a": 0.9})
    return program(
        {"s": 8 * n},
        [vec("all", "s", 0, n)] + [vec(f"e{i}", "s", 3 * i, 1) for i in range(4)],
        ops, {"view": "all", "weights": values(n, 11)},
        init=[{"view": "all", "values": values(n, 12)}], inputs=["all"],
        segments=[4] * segments,
    )


def full_rewrites():
    """Every op rewrites the whole buffer: the journal outweighs an anchor."""
    return program(
        {"s": 64}, [vec("x", "s", 0, 8)],
        [{"op": "tanh", "dst": "x", "x": "x"}, {"op": "sin", "dst": "x", "x": "x"}] * 3,
        {"view": "x", "weights": [1] * 8},
        init=[{"view": "x", "values": values(8, 13)}], inputs=["x"], segments=[2, 2, 2],
    )


def float32_draws():
    return draws("float32")


HAND = {
    "shift_up": shift_up,
    "int_halves": int_halves,
    "int_reads": int_reads,
    "gather_scatter": gather_scatter,
    "draws": draws,
    "float32_draws": float32_draws,
    "two_d": two_d,
    "sparse_writes": sparse_writes,
    "full_rewrites": full_rewrites,
}
