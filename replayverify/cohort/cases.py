"""Cohort cases: an ordinary SPEC program plus roles, and the families that generate them.

A case says which segment a framework checkpoints and which buffers are *hidden*: read
(and maybe updated) by that segment but owned outside it, like a module-level or
closure buffer. Everything else the segment writes it owns (allocates on entry, returns
on exit); everything else it reads comes in as an argument. Roles live here, not in the
program format: the program is any valid SPEC program and runs through every other
replayverify command unchanged.

Each family builds one program from one seed key, the same numbers for float32 and
float64 (the two dtypes of a key are paired). Every case draws inside the checkpointed
segment (noise or dropout, chosen by the key) and once more after it, before backward.
Only the ops axpby, mul, copy, noise and dropout appear: each is one correctly rounded
IEEE operation per element in every framework, so a framework and the interpreter fed
its draws agree to the bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from replayverify.programs.format import program_from_dict
from replayverify.programs.model import Program

DTYPES = ("float32", "float64")
DEFAULT_SEEDS = (420000, 420050)  # keys A..B-1, the reference paper's fifty
# Dropout keeps are powers of two: dividing by them is exact however a framework divides.
# XLA:CPU divides by multiplying with the reciprocal (measured: 575 of 1,000 float32
# quotients x / 0.875 differ from IEEE division in the last bit), so any other keep
# would make the interpreter's reference inexact for JAX.
KEEP = (0.5, 0.25)
PAD = 32  # elements per buffer


@dataclass(frozen=True, slots=True)
class Roles:
    """What a framework needs to know beyond the program.

    ``segment``: index of the checkpointed segment. ``hidden``: buffers the segment reads
    or updates but does not own. ``later``: op indices after the segment that mutate a
    hidden buffer or draw before backward (documentation; adapters run every op).
    """

    segment: int
    hidden: tuple[str, ...] = ()
    later: tuple[int, ...] = ()
    untracked: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Case:
    """One cohort condition: family, seed key, dtype, the program and its roles."""

    family: str
    seed: int
    dtype: str
    program: Program
    roles: Roles

    @property
    def id(self) -> str:
        return f"{self.family}/{self.seed}/{self.dtype}"

    @property
    def draw_seed(self) -> int:
        """The seed of the framework's own generator: the key, shared by both dtypes."""
        return self.seed

    def segment_ops(self) -> range:
        lo, hi = self.program.segment_bounds()[self.roles.segment]
        return range(lo, hi)


# ---------------------------------------------------------------- building blocks


class _Builder:
    """Views as element ranges (offset, count, stride in elements) of one dtype."""

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.item = np.dtype(dtype).itemsize
        self.buffers: dict[str, int] = {}
        self.views: list[dict] = []
        self.init: list[dict] = []

    def buffer(self, name: str, n: int, values: np.ndarray | None = None) -> None:
        # Every buffer has PAD elements (the tail unused and zero): frameworks that
        # compile per shape (JAX) then meet a few shapes instead of one per case.
        if n > PAD:
            raise ValueError(f"buffer {name!r}: {n} elements, at most {PAD}")
        self.buffers[name] = PAD
        if values is not None:
            whole = self.view(f"{name}_all", name, 0, n)
            self.init.append({"view": whole, "values": [float(v) for v in values]})

    def view(self, name: str, buf: str, offset: int, n: int, stride: int = 1) -> str:
        self.views.append({"name": name, "buffer": buf, "dtype": self.dtype,
                           "offset": offset * self.item, "shape": [n],
                           "strides": [stride * self.item]})
        return name

    def program(self, name: str, ops: list[dict], segments: list[int], loss_view: str,
                weights: np.ndarray, inputs: list[str]) -> Program:
        return program_from_dict({
            "format": "replayverify.program", "version": 1, "name": name,
            "buffers": [{"name": b, "nbytes": n * self.item} for b, n in self.buffers.items()],
            "views": self.views, "init": self.init, "ops": ops, "segments": segments,
            "inputs": inputs, "loss": {"view": loss_view, "weights": [float(w) for w in weights]},
        })


@dataclass(frozen=True)
class _Draws:
    """The numbers one seed key fixes for a family (shared by both dtypes)."""

    n: int
    gap: int  # stride (strided families) or overlap shift (overlap families)
    x: np.ndarray
    hidden: np.ndarray
    coef: np.ndarray  # a, b, c, c1, c2, d1, d2, d3
    draw: dict  # the op inside the segment: noise or dropout with its coefficient
    sigma_after: float
    weights: np.ndarray

    @classmethod
    def of(cls, seed: int, family: str) -> _Draws:
        rng = np.random.default_rng([seed, sum(map(ord, family))])
        n = int(rng.choice([4, 6, 8]))
        if family.endswith("strided"):
            gap = int(rng.choice([2, 3]))
        else:
            gap = int(rng.integers(1, n))
        draw = ({"op": "noise", "sigma": round(float(rng.uniform(0.2, 0.6)), 3)}
                if rng.random() < 0.5 else
                {"op": "dropout", "keep": float(rng.choice(KEEP))})
        return cls(
            n=n, gap=gap,
            x=np.round(rng.uniform(-1.0, 1.0, n), 3),
            hidden=np.round(rng.uniform(-1.0, 1.0, 4 * n), 3),
            coef=np.round(rng.uniform(0.5, 1.5, 8) * rng.choice([-1.0, 1.0], 8), 3),
            draw=draw, sigma_after=round(float(rng.uniform(0.1, 0.5)), 3),
            weights=np.round(rng.uniform(-1.0, 1.0, n), 3),
        )


def _segment_draw(d: _Draws, dst: str, x: str) -> dict:
    return {**d.draw, "dst": dst, "x": x}


def _axpby(dst: str, x: str, y: str, a: float, b: float, c: float = 0.0) -> dict:
    return {"op": "axpby", "dst": dst, "x": x, "y": y, "a": float(a), "b": float(b),
            "c": float(c)}


def _act_views(b: _Builder, d: _Draws, family: str) -> tuple[str, str]:
    """Two activation views of the owned buffer ``act``: strided or overlapping."""
    n, g = d.n, d.gap
    if family.endswith("strided"):
        b.buffer("act", g * n)
        return b.view("a0", "act", 0, n, g), b.view("a1", "act", 1, n, g)
    b.buffer("act", n + g)
    return b.view("a0", "act", 0, n), b.view("a1", "act", g, n)


def _common(b: _Builder, d: _Draws) -> None:
    b.buffer("inp", d.n)
    b.view("x", "inp", 0, d.n)
    b.buffer("out", d.n)
    b.view("y", "out", 0, d.n)
    b.buffer("tail", d.n)
    b.view("t", "tail", 0, d.n)
    b.init.append({"view": "x", "values": [float(v) for v in d.x]})


def _after(d: _Draws) -> dict:
    """The draw after the checkpointed segment, before backward."""
    return {"op": "noise", "dst": "t", "x": "y", "sigma": d.sigma_after}


def _local(family: str, seed: int, dtype: str) -> tuple[Program, Roles]:
    """Strided writes (``local-strided``) or overlapping views (``local-overlap``) of a
    buffer the segment owns; an op reads both views after both were written."""
    d = _Draws.of(seed, family)
    a, bb, c = d.coef[:3]
    b = _Builder(dtype)
    _common(b, d)
    a0, a1 = _act_views(b, d, family)
    ops = [_segment_draw(d, a0, "x"),
           _axpby(a1, a0, "x", a, bb, c),  # overlap: reads a0, writes a1 (memmove)
           {"op": "mul", "dst": "y", "x": a1, "y": a0},
           _after(d)]
    p = b.program(f"{family}-{seed}-{dtype}", ops, [3, 1], "t", d.weights, ["x"])
    return p, Roles(segment=0, later=(3,))


def _raw_copy(family: str, seed: int, dtype: str) -> tuple[Program, Roles]:
    """A raw copy between partially overlapping views of an owned buffer (memmove)."""
    d = _Draws.of(seed, family)
    a, bb, c = d.coef[:3]
    b = _Builder(dtype)
    _common(b, d)
    a0, a1 = _act_views(b, d, family)
    b.buffer("work", d.n)
    w = b.view("w", "work", 0, d.n)
    ops = [_segment_draw(d, a0, "x"),
           {"op": "copy", "dst": a1, "x": a0},  # partial overlap: memmove, not memcpy
           _axpby(w, a1, "x", a, bb, c),
           {"op": "mul", "dst": "y", "x": w, "y": a0},
           _after(d)]
    p = b.program(f"{family}-{seed}-{dtype}", ops, [4, 1], "t", d.weights, ["x"])
    return p, Roles(segment=0, later=(4,))


def _hidden(family: str, seed: int, dtype: str) -> tuple[Program, Roles]:
    """The segment reads a hidden buffer into its computation and updates it through
    strided / overlapping views; the next segment mutates it in place and draws.

    The hidden buffer enters only through axpby (which saves no operand for backward)
    and its update does not depend on the inputs, so eager autograd is valid and the
    hidden buffer never carries a gradient: only a replay sees the mutation.
    """
    d = _Draws.of(seed, family)
    a, bb, c, c1, c2, d1, d2, d3 = d.coef
    b = _Builder(dtype)
    _common(b, d)
    n, g = d.n, d.gap
    a0, a1 = b.view("a0", "act", 0, n), b.view("a1", "act", n, n)
    b.buffer("act", 2 * n)
    if family.endswith("strided"):
        b.buffer("hid", g * n, d.hidden[: g * n])
        h0, h1 = b.view("h0", "hid", 0, n, g), b.view("h1", "hid", 1, n, g)
    else:
        b.buffer("hid", n + g, d.hidden[: n + g])
        h0, h1 = b.view("h0", "hid", 0, n), b.view("h1", "hid", g, n)
    ops = [_segment_draw(d, a0, "x"),
           _axpby(a1, a0, h0, a, bb, c),  # the hidden buffer enters the computation
           _axpby(h1, h1, h0, c1, c2),  # the segment updates it
           {"op": "mul", "dst": "y", "x": a1, "y": a0},
           _axpby(h0, h0, h1, d1, d2, d3),  # later: mutated in place ...
           _after(d)]  # ... and a draw, both before backward
    p = b.program(f"{family}-{seed}-{dtype}", ops, [4, 2], "t", d.weights, ["x"])
    return p, Roles(segment=0, hidden=("hid",), later=(4, 5))


# ---------------------------------------------------------------- beyond the paper


def _saved_overwrite(family: str, seed: int, dtype: str) -> tuple[Program, Roles]:
    """An op saves a view for backward; a later op of the same segment overwrites it in
    place, and the op after that saves again (so a recomputation must run past it)."""
    d = _Draws.of(seed, family)
    a, _, c = d.coef[:3]
    b = _Builder(dtype)
    _common(b, d)
    b.buffer("act", d.n)
    a0 = b.view("a0", "act", 0, d.n)
    b.buffer("tmp", d.n)
    m = b.view("m", "tmp", 0, d.n)
    ops = [_segment_draw(d, a0, "x"),
           {"op": "mul", "dst": m, "x": a0, "y": "x"},  # saves a0
           _axpby(a0, m, m, a, 0.0, c),  # overwrites a0 in place, same segment
           {"op": "mul", "dst": "y", "x": a0, "y": m},  # saves the new a0 and m
           _after(d)]
    p = b.program(f"{family}-{seed}-{dtype}", ops, [4, 1], "t", d.weights, ["x"])
    return p, Roles(segment=0, later=(4,))


def _running_stats(family: str, seed: int, dtype: str) -> tuple[Program, Roles]:
    """A BatchNorm-like running statistic, a hidden buffer the segment updates from its
    input first thing; the loss never reads it."""
    d = _Draws.of(seed, family)
    a, bb, c, m = d.coef[:4]
    mom = 0.125 if m > 0 else 0.25
    b = _Builder(dtype)
    _common(b, d)
    a0, a1 = _act_views(b, d, family)
    b.buffer("stat", d.n, d.hidden[: d.n])
    s = b.view("s", "stat", 0, d.n)
    ops = [_axpby(s, s, "x", 1.0 - mom, mom),  # running statistic, updated per forward
           _segment_draw(d, a0, "x"),
           _axpby(a1, a0, "x", a, bb, c),
           {"op": "mul", "dst": "y", "x": a1, "y": a0},
           _after(d)]
    p = b.program(f"{family}-{seed}-{dtype}", ops, [4, 1], "t", d.weights, ["x"])
    return p, Roles(segment=0, hidden=("stat",), later=(4,), untracked=(0,))


Builder = Callable[[str, int, str], tuple[Program, Roles]]

FAMILIES: dict[str, Builder] = {
    "local-strided": _local,
    "local-overlap": _local,
    "hidden-strided": _hidden,
    "hidden-overlap": _hidden,
    "raw-copy": _raw_copy,
}
EXTRA_FAMILIES: dict[str, Builder] = {
    "in-segment-saved-overwrite": _saved_overwrite,
    "running-stats": _running_stats,
}
HIDDEN_FAMILIES = ("hidden-strided", "hidden-overlap")


def extra_row(row: str, family: str) -> str:
    """The table row of a record: the method's row, qualified by an extra family."""
    return row if family in FAMILIES else f"{row} [{family}]"


def build_case(family: str, seed: int, dtype: str) -> Case:
    """The case of ``family`` for seed key ``seed`` in ``dtype``. ValueError if unknown."""
    builder = FAMILIES.get(family) or EXTRA_FAMILIES.get(family)
    if builder is None:
        known = ", ".join([*FAMILIES, *EXTRA_FAMILIES])
        raise ValueError(f"unknown cohort family {family!r} (known: {known})")
    if dtype not in DTYPES:
        raise ValueError(f"unknown cohort dtype {dtype!r} (known: {', '.join(DTYPES)})")
    program, roles = builder(family, seed, dtype)
    return Case(family, seed, dtype, program, roles)


def cases(seeds: range, *, extra: bool = False) -> list[Case]:
    """Every case of the cohort: per seed key, each family, float32 then float64."""
    families = [*FAMILIES, *(EXTRA_FAMILIES if extra else ())]
    return [build_case(f, s, t) for s in seeds for f in families for t in DTYPES]
