"""Hand-written cohort cases for the adapter tests."""

from __future__ import annotations

from dataclasses import replace

from replayverify.cohort import Case, Roles, build_case
from tests.helpers import program

F = 8  # float64 itemsize


def vec(name, buf, off, n, stride=1):
    return (name, buf, "float64", off * F, (n,), (stride * F,))


def no_draw() -> Case:
    """No draw anywhere: replay needs no generator, so every method can match."""
    p = program({"inp": 4 * F, "act": 8 * F, "out": 4 * F},
                [vec("x", "inp", 0, 4), vec("a0", "act", 0, 4, 2), vec("a1", "act", 1, 4, 2),
                 vec("y", "out", 0, 4)],
                [{"op": "axpby", "dst": "a0", "x": "x", "y": "x", "a": 0.5, "b": 0.25},
                 {"op": "axpby", "dst": "a1", "x": "a0", "y": "x", "a": -1.5, "c": 0.5},
                 {"op": "mul", "dst": "y", "x": "a1", "y": "a0"}],
                {"view": "y", "weights": [1, -2, 3, 0.5]}, inputs=["x"],
                init=[{"view": "x", "values": [0.5, -1, 2, 0.25]}], segments=[2, 1])
    return Case("local-strided", 7, "float64", p, Roles(segment=0))


def no_ops() -> Case:
    """No op at all: the loss reads the input; nothing to write, so nothing to refuse."""
    p = program({"inp": 4 * F}, [vec("x", "inp", 0, 4)], [],
                {"view": "x", "weights": [1, 2, 3, 4]}, inputs=["x"],
                init=[{"view": "x", "values": [0.5, -1, 2, 0.25]}], segments=[0])
    return Case("hidden-strided", 7, "float64", p, Roles(segment=0))


def untranslatable() -> Case:
    """A gather: adapters refuse ops outside the cohort's five (an exception: R)."""
    p = program({"inp": 4 * F, "idx": 16, "out": 4 * F},
                [vec("x", "inp", 0, 4), ("i", "idx", "int32", 0, (4,), (4,)),
                 vec("y", "out", 0, 4)],
                [{"op": "gather", "dst": "y", "x": "x", "index": "i"}],
                {"view": "y", "weights": [1, 2, 3, 4]}, inputs=["x"],
                init=[{"view": "x", "values": [0.5, -1, 2, 0.25]},
                      {"view": "i", "values": [3, 2, 1, 0]}])
    return Case("hidden-strided", 7, "float64", p, Roles(segment=0, hidden=()))


def untracked_loss(family: str = "local-strided") -> Case:
    """A paper case whose first axpby (an operand of the product the loss reads) is
    declared outside autodiff: every framework then differentiates something else (D)."""
    case = next(c for c in (build_case(family, s, "float64") for s in range(420000, 420050))
                if c.program.ops[0].kind.value == "noise")  # a mask could zero the gradient
    axpby = next(k for k, op in enumerate(case.program.ops) if op.kind.value == "axpby")
    return replace(case, roles=replace(case.roles, untracked=(axpby,)))
