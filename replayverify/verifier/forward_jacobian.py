"""Forward-mode Jacobian through the mutable storage (SPEC §5 ``forward-jacobian``).

Tangents shadow the storage itself, never the version graph: every distinct float
element address (buffer, first byte, dtype) owns one row of a tangent array of shape
(addresses, input coordinates), so all coordinates propagate at once. Each byte carries
a tag, the address whose write last covered it (or "constant", or "integer write"),
kept once per aligned 4-byte word (every write covers whole words); a float read of an
element is defined iff all its bytes carry that element's own address or are all
constant, which is SPEC §3's admission rule stated on addresses (a program whose
layout makes every float read defined keeps no tags: ``_always_defined``). Values come from
:func:`execute_op` (the interpreter's ``FORWARD``). What does not depend on values (the
addresses, each view's words and tags, each op's step and coefficients, and, on wide
tangents, which ops' tangents can reach the loss at all) is derived once per program
(``_plan``).

The tangent rules (``TANGENT``) are this module's own statement of each op's derivative,
written independently of the interpreter's ``REVERSE`` on purpose: the forward Jacobian
is the reference the reverse rules are checked against, so it must not share them (a
wrong sign in a reverse rule is caught only because TANGENT does not have it). What an
op computes and which elements it writes (scatter's last-wins) is not restated: that
comes from the interpreter.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from replayverify.programs.arrays import as_slices, diagonal_seeds, ranks
from replayverify.programs.errstate import quiet
from replayverify.programs.interpreter import (
    FORWARD,
    ForwardRule,
    OpValues,
    loss_weights,
    op_steps,
    scatter_winners,
)
from replayverify.programs.model import Op, OpKind, PerProgram, Program
from replayverify.programs.state import layouts
from replayverify.verifier.liveness import LIVE_MIN_COORDS, bit_mask, live_ops
from replayverify.verifier.reference_run import evaluations

# The reference is meant to be more accurate than the reverse sweep it checks: with
# tangents in extended precision (80-bit on x86-64; float64 where the platform has no
# wider type), the disagreement measures the version graph's own float64 rounding.
PRECISION = np.longdouble

CONST = -1  # tag of bytes never written by an op and not in an input: tangent 0
INT_WRITTEN = -2  # tag of bytes last written by an integer op: tangent undefined
_PLANS = PerProgram()  # each program's :class:`_Plan`

Values = dict[str, np.ndarray]  # operand values, flat (float64 for float operands)
Tangents = dict[str, np.ndarray]  # operand tangents, (elements, coordinates)
Coefs = Mapping[str, float]  # an op's coefficients, in its view's dtype first, then float64
TangentRule = Callable[[Coefs, Values, Tangents, "np.ndarray | None", int],
                       "tuple[np.ndarray, np.ndarray | None]"]


def coefs_of(op: Op, dtype: np.dtype) -> dict[str, float]:
    """Every coefficient of ``op`` converted to the view's dtype first (SPEC §2), then to
    float64: what the tangent rules multiply by (derived once per program). A float64
    coefficient beyond float32's range becomes inf (callers run under ``quiet``)."""
    # (``op.coef_as`` spelled out: one call per coefficient, not two; for float64, whose
    # conversion ``float`` is, one call in all)
    to = float if dtype.char == "d" else lambda value: float(dtype.type(value))
    coefs = {}
    for c in op.spec.coefs:  # (a plain loop: a comprehension costs more than its few items)
        coefs[c.name] = to(getattr(op, c.name))
    return coefs


# ---------------------------------------------------------------- tangent rules
#
# A tangent rule maps (coefficients, values, tangents, draws, dst size) to (tangent of the
# written elements, where): d(dst) = J d(sources). Values are float64; tangents carry
# their own precision, and products are formed tangent first.


def _t_axpby(c, v, t, d, n):
    return t["x"] * c["a"] + t["y"] * c["b"], None


def _t_mul(c, v, t, d, n):
    return t["x"] * v["y"][:, None] + t["y"] * v["x"][:, None], None


def _arg(c, v, t):
    """a*x rounded in float64 as the program rounds it, then widened to the tangents'
    precision: the derivative of tanh(fl(a*x)) is taken at fl(a*x)."""
    return (c["a"] * v["x"]).astype(t["x"].dtype)


def _t_tanh(c, v, t, d, n):
    return (t["x"] * c["a"]) * (1.0 - np.tanh(_arg(c, v, t)) ** 2)[:, None], None


def _t_sin(c, v, t, d, n):
    return (t["x"] * c["a"]) * np.cos(_arg(c, v, t))[:, None], None


def _t_dropout(c, v, t, d, n):
    mask = d.reshape(-1).astype(t["x"].dtype)[:, None]
    return (t["x"] * mask) / c["keep"], None


def _t_gather(c, v, t, d, n):
    return t["x"][np.mod(v["index"].astype(np.int64), t["x"].shape[0])], None


def _t_scatter(c, v, t, d, n):
    where, src = scatter_winners(v["index"], n)
    return t["x"][src], where


TANGENT: dict[OpKind, TangentRule | None] = {
    OpKind.AXPBY: _t_axpby,
    OpKind.MUL: _t_mul,
    OpKind.TANH: _t_tanh,
    OpKind.SIN: _t_sin,
    OpKind.COPY: lambda c, v, t, d, n: (t["x"], None),
    OpKind.NOISE: lambda c, v, t, d, n: (t["x"], None),  # x + sigma*z: z is a constant
    OpKind.DROPOUT: _t_dropout,
    OpKind.GATHER: _t_gather,
    OpKind.SCATTER: _t_scatter,
    # Integer ops have no tangent: the bytes they write become undefined for float reads.
    OpKind.IADD: None,
    OpKind.IXOR: None,
    OpKind.ICOPY: None,
}


# ---------------------------------------------------------------- tangent storage


@dataclass(frozen=True)
class Addresses:
    """One tangent row per distinct float element address (buffer, first byte, dtype)."""

    count: int
    of_view: dict[str, np.ndarray]  # float view -> address id of each element (row-major)


def addresses(program: Program) -> Addresses:
    """Number the distinct float element addresses of every float view of ``program``
    (in the order of (buffer, first byte, itemsize)); derived once per program."""
    return _plan(program).addresses


def address_count(program: Program) -> int:
    """``addresses(program).count`` without deriving the plan when it is not derived yet:
    the size guard asks it of programs it may refuse, and the plan of a large program
    holds far more than the count. Per buffer, a bitmap of its (first word, itemsize 8)
    keys set at every float element (``_derive_plan`` numbers the same keys)."""
    plan = _PLANS.of(program).get("tangent_plan")
    if plan is not None:
        return plan.addresses.count
    seen = {b.name: np.zeros(2 * -(-b.nbytes // WORD), dtype=bool) for b in program.buffers}
    for lo in layouts(program).values():
        if lo.view.is_float:  # (key: 2 * first word + (itemsize == 8), as _derive_plan's;
            # the starts made here, not kept on the layout, for a program it may refuse)
            starts = lo.view.element_starts()
            seen[lo.view.buffer][starts // (WORD // 2) + (lo.dtype.itemsize == 8)] = True
    return sum(int(np.count_nonzero(keys)) for keys in seen.values())


WORD = 4  # tags are kept per aligned 4-byte word (see _ViewTags)
CONST_TAGS = np.int64(CONST).tobytes()  # the bytes of one CONST tag


class _ViewTags(NamedTuple):
    """What the shadow needs of one view, derived once per program (no value enters it).

    Offsets and strides are multiples of the itemsize (4 or 8), so every element covers
    whole aligned 4-byte words and every write tags whole words: one tag per word says
    exactly what one tag per byte would (the interpreter's ``_Versions`` argues the same).
    Arrays are element-major: an element's words are consecutive. (A NamedTuple, as the
    other per-program records here: one is built per view of every checked program.)
    A plan that keeps no tags (``_always_defined``) leaves the tag fields None and empty.
    """

    name: str
    size: int
    words: np.ndarray | None  # index of each element's words in the storage's tag array
    own: np.ndarray | None  # float views: the address of each element (its tangent row)
    rows: slice | np.ndarray | None  # ``own`` as a slice when consecutive: no gather/scatter
    own_tags: np.ndarray | None  # ``own`` repeated per word: the tags its own writes leave
    all_own: bytes  # the view's tags as bytes when every element was last written whole
    all_const: bytes  # ... and when no element was ever written


class _TangentStep(NamedTuple):
    """One op as the forward Jacobian runs it, derived once per program."""

    op: Op
    dst: _ViewTags
    is_float: bool
    sources: tuple[tuple[str, _ViewTags], ...]  # (field, view) of each value source
    cast: bool  # some source is not float64: its values are cast for the tangent rule
    coefs: dict[str, float]  # float ops: ``coefs_of(op, dtype)``


@dataclass(frozen=True, slots=True)
class _Plan:
    """Everything the forward Jacobian derives from the program alone."""

    addresses: Addresses
    words: int  # 4-byte words of the storage: every buffer's, end to end
    n_coords: int
    inputs: tuple[_ViewTags, ...]
    seeds: tuple[slice, ...] | None  # the inputs' seeds in the flat tangent array, when
    # the ones are all they write (``diagonal_seeds``), else None: written input by input
    steps: tuple[_TangentStep, ...]
    live: tuple[bool, ...]  # per op: its tangents can reach the loss's (see ``_live``)
    loss: _ViewTags
    loss_float: bool
    weights: np.ndarray  # the loss weights, float64
    # False when no float read can see undefined bytes (``_always_defined``): no tags kept
    tagged: bool = True


def _plan(program: Program) -> _Plan:
    """The forward Jacobian's addresses, view tags and op steps: derived once per program
    (held here, not on the program), so that a check only propagates values and tangents."""
    return _PLANS.carried(program, "tangent_plan", _derive_plan)


@quiet  # (coefficients converted to float32 may overflow to inf: a legal value)
def _derive_plan(program: Program) -> _Plan:
    # Every view's elements at once, then slices per view: a handful of array operations
    # per program rather than several per view.
    # (Plain loops over views and ops: a comprehension per op or view costs more than
    # the few items it builds.)
    lay = layouts(program)
    # The buffers end to end, each from a word boundary (``base``: its first word there):
    # one tag array covers the whole storage, so a view's words are one index array.
    base, n_words = {}, 0
    for b in program.buffers:
        base[b.name] = n_words
        n_words += -(-b.nbytes // WORD)
    floats, others = [], []  # float views first: they own the addresses
    for lo in lay.values():
        (floats if lo.view.is_float else others).append(lo)
    los = floats + others
    sizes, key_of_view = [], []
    for lo in los:
        sizes.append(lo.size)
        key_of_view.append(2 * base[lo.view.buffer] + (lo.dtype.itemsize == 8))
    # Per element, key = 2 * (its first word in the storage) + (itemsize == 8), since every
    # element starts on a word: key // 2 is that word, and an address is a distinct key of
    # a float element (the itemsize tells float32 from float64). Ids are the keys' ranks:
    # addresses in the order of (buffer, first byte, itemsize).
    keys = (np.concatenate([lo.starts for lo in los]) // (WORD // 2)
            + np.array(key_of_view).repeat(sizes))
    bounds = list(itertools.accumulate(sizes, initial=0))  # each view's first element
    n_float = len(floats)
    float_keys = keys[:bounds[n_float]]
    distinct, ids = ranks(float_keys, 2 * n_words)
    count = int(distinct.size)
    rows = as_slices(ids, bounds[:n_float + 1])
    views: dict[str, _ViewTags] = {}
    of_view: dict[str, np.ndarray] = {}
    tagged = not _always_defined(program, floats)
    if not tagged:  # no tags: a view is its addresses (``_UntaggedShadow``)
        for i, lo in enumerate(los):
            at, n, name = bounds[i], lo.size, lo.view.name
            if i < n_float:
                own = of_view[name] = ids[at:at + n]
                views[name] = _ViewTags(name, n, None, own, rows[i], None, b"", b"")
            else:
                views[name] = _ViewTags(name, n, None, None, None, None, b"", b"")
    else:
        # Per element, two words and two tags, flat: element j's first word (and tag) at
        # 2j, the second, used by 8-byte elements, at 2j + 1. A view's words and tags are
        # then one slice (every second entry for 4-byte elements).
        own2 = np.repeat(ids, 2)  # float views' elements
        words2 = ((keys // 2)[:, None] + np.arange(2)).reshape(-1)  # every view's
        for i, lo in enumerate(los):
            at, n, name, wide = bounds[i], lo.size, lo.view.name, lo.dtype.itemsize == 8
            words = words2[2 * at:2 * (at + n)] if wide else words2[2 * at:2 * (at + n):2]
            const = CONST_TAGS * (2 * n if wide else n)
            if i < n_float:
                own = of_view[name] = ids[at:at + n]
                tags = own2[2 * at:2 * (at + n)] if wide else own
                views[name] = _ViewTags(name, n, words, own, rows[i], tags, tags.tobytes(),
                                        const)
            else:
                views[name] = _ViewTags(name, n, words, None, None, None, b"", const)

    # Per op, from the interpreter's op steps (derived once, and already by the run that
    # made the execution): the destination's dtype and a float op's value sources.
    steps = []
    for step in op_steps(program):
        op = step.op
        if step.dtype.kind != "f":  # an integer write: only its words matter
            steps.append(_TangentStep(op, views[op.dst], False, (), False, {}))
            continue
        sources, cast = [], False
        for f, lo in step.sources:
            sources.append((f, views[lo.view.name]))
            cast = cast or lo.dtype.char != "d"
        steps.append(_TangentStep(op, views[op.dst], True, tuple(sources), cast,
                                  coefs_of(op, step.dtype)))
    inputs = tuple([views[name] for name in program.inputs])
    n_coords = sum([t.size for t in inputs])
    loss, loss_float = views[program.loss.view], lay[program.loss.view].view.is_float
    live = (_live(steps, loss if loss_float else None, count) if n_coords >= LIVE_MIN_COORDS
            else (True,) * len(steps))
    seeds = diagonal_seeds([("", vt.rows) for vt in inputs], n_coords)
    return _Plan(Addresses(count, of_view), n_words, n_coords, inputs, seeds, tuple(steps),
                 live, loss, loss_float, loss_weights(program), tagged)


def _always_defined(program: Program, floats: list) -> bool:
    """Whether every float read of the program is defined whatever its values, so that
    the tags could only ever say "defined": when in each buffer all float views (the
    layouts ``floats``) have one itemsize s and start every element at a multiple of s
    (two float elements then cover the same bytes, the same address, or disjoint ones)
    and no integer op writes a buffer holding a float view. A word is then CONST or
    tagged by the one address covering it, and the words of an element are written
    together: all CONST or all its own."""
    itemsize: dict[str, int] = {}  # per buffer, the itemsize of its float views
    for lo in floats:  # (plain loops: a generator per view costs more than its items)
        v, s = lo.view, lo.dtype.itemsize
        if itemsize.setdefault(v.buffer, s) != s or v.offset % s:
            return False
        for stride in v.strides:
            if stride % s:
                return False
    for step in op_steps(program):
        if step.dtype.kind != "f" and step.dst.view.buffer in itemsize:
            return False
    return True


def _live(steps: list[_TangentStep], loss: _ViewTags | None, count: int) -> tuple[bool, ...]:
    """Per op, whether the tangents it writes can reach the loss's (:func:`live_ops` over
    addresses, bit i for address i). The run computes no tangents for the others, but
    still tests their reads and writes their tags (they decide whether the derivative is
    defined)."""
    masks: dict[str, int] = {}  # per view, its addresses

    def addresses(vt: _ViewTags) -> int:
        mask = masks.get(vt.name)
        if mask is None:
            mask = masks[vt.name] = bit_mask(vt.rows, count)
        return mask

    return live_ops(steps, loss, addresses)


@dataclass(frozen=True)
class ForwardJacobian:
    """The result: the gradient, or None with the first float read of undefined bytes."""

    gradient: np.ndarray | None
    refused_op: int | None = None  # None with a reason: the loss read was refused
    reason: str = ""
    loss_tangent: np.ndarray | None = None  # (loss elements, coordinates)

    @property
    def supported(self) -> bool:
        return self.gradient is not None


class _Shadow:
    """Tangent rows per address and a per-word tag of the address that last wrote it
    (one tag array for the whole storage: the plan's view words index it)."""

    def __init__(self, plan: _Plan, precision: type = PRECISION):
        self.tangent = np.zeros((plan.addresses.count, plan.n_coords), dtype=precision)
        self.tags = np.full(plan.words, CONST, np.int64)

    def read(self, vt: _ViewTags) -> tuple[np.ndarray, int | None]:
        """Tangents (elements, coordinates) of a float view; the first undefined element.

        An element is defined iff its words all carry its own address or are all CONST.
        A CONST word was never written, and a write tags every word of its elements, so
        (i) the words of one element are never part CONST, part its own address: a word
        test says what the element test says; (ii) a CONST element's tangent row was never
        written either: it is still 0. Defined elements therefore read their own rows.
        """
        tags = self.tags[vt.words]
        raw = tags.tobytes()
        if raw != vt.all_own and raw != vt.all_const:
            first = _first_undefined(tags, vt)
            if first is not None:
                mine = (tags == vt.own_tags).reshape(vt.size, -1).all(axis=1)
                return np.where(mine[:, None], self.tangent[vt.own], 0.0), first
        return self.tangent[vt.rows], None  # (a view of the rows when they are a slice)

    def undefined(self, vt: _ViewTags) -> int | None:
        """``read``'s test alone: the first undefined element of a float view (None: none)."""
        tags = self.tags[vt.words]
        raw = tags.tobytes()
        return None if raw == vt.all_own or raw == vt.all_const else _first_undefined(tags, vt)

    def seed(self, plan: _Plan) -> None:
        """Write the inputs (see ``_seed``) and tag their words."""
        _seed(self.tangent, plan)
        for vt in plan.inputs:
            self.tags[vt.words] = vt.own_tags

    def write(self, vt: _ViewTags, tangent: np.ndarray | None, where) -> None:
        """Tangents of the written elements (None: an integer write, tangent undefined)."""
        if tangent is None:
            self.tags[vt.words if where is None
                      else vt.words.reshape(vt.size, -1)[where]] = INT_WRITTEN
        elif where is None:
            self.tangent[vt.rows] = tangent
            self.tags[vt.words] = vt.own_tags
        else:
            self.tangent[vt.own[where]] = tangent
            self.tag(vt, where)

    def tag(self, vt: _ViewTags, where) -> None:
        """Tag the words of a float write's elements with their own addresses."""
        if where is None:
            self.tags[vt.words] = vt.own_tags
            return
        self.tags[vt.words.reshape(vt.size, -1)[where]] = vt.own_tags.reshape(vt.size,
                                                                               -1)[where]

    def why(self, vt: _ViewTags, j: int, what: str) -> str:
        tags = self.tags[vt.words.reshape(vt.size, -1)[j]]
        where = f"float read at {what} (view {vt.name!r} element {j})"
        if np.any(tags == INT_WRITTEN):
            return f"{where}: its bytes were last written by an integer op"
        return f"{where}: its bytes are not one float write of this element's address"


class _UntaggedShadow(_Shadow):
    """The shadow of a program whose float reads are all defined (``_always_defined``):
    its tags could only say so, so none are kept or tested."""

    def __init__(self, plan: _Plan, precision: type = PRECISION):
        self.tangent = np.zeros((plan.addresses.count, plan.n_coords), dtype=precision)

    def read(self, vt: _ViewTags) -> tuple[np.ndarray, int | None]:
        return self.tangent[vt.rows], None

    def undefined(self, vt: _ViewTags) -> int | None:
        return None

    def seed(self, plan: _Plan) -> None:
        _seed(self.tangent, plan)

    def write(self, vt: _ViewTags, tangent: np.ndarray | None, where) -> None:
        if tangent is None:  # an integer write: no float view's bytes (see _always_defined)
            return
        if where is None:
            self.tangent[vt.rows] = tangent
        else:
            self.tangent[vt.own[where]] = tangent

    def tag(self, vt: _ViewTags, where) -> None:
        pass


def _seed(tangent: np.ndarray, plan: _Plan) -> None:
    """Write the inputs into the fresh (zero) tangents: the element j of the inputs taken
    in order, row-major, gets the tangent e_j (an input's rows are first zeroed: only an
    earlier input can have written them)."""
    if plan.seeds is not None:  # the ones alone, one strided slice per input
        flat = tangent.reshape(-1)  # (a view: the array is fresh, C-ordered)
        for at in plan.seeds:
            flat[at] = 1.0
        return
    first = 0
    for vt in plan.inputs:
        tangent[vt.rows] = 0.0
        tangent[vt.own, first + np.arange(vt.size)] = 1.0
        first += vt.size


def _no_tangent(k: int, step: _TangentStep) -> ValueError:
    return ValueError(f"op {k}: {step.op.kind.value} writes a float view but has no tangent")


def _refusal(k: int, reason: str, steps: Sequence[_TangentStep],
             tangent: Mapping[OpKind, TangentRule | None]) -> ForwardJacobian:
    """The result once op ``k`` reads undefined bytes; a float op from ``k`` on whose kind
    has no tangent rule is still the error it is when the whole run is made."""
    for j in range(k, len(steps)):
        if steps[j].is_float and tangent[steps[j].op.kind] is None:
            raise _no_tangent(j, steps[j])
    return ForwardJacobian(None, k, reason)


def _first_undefined(tags: np.ndarray, vt: _ViewTags) -> int | None:
    """The first element of float view ``vt`` whose word tags ``tags`` are neither all its
    own address nor all CONST (None: every element is defined), element by element (the
    shadow tests the whole view's tags as bytes first)."""
    ok = (tags == vt.own_tags) | (tags == CONST)
    return None if ok.all() else int(np.flatnonzero(~ok)[0]) // (tags.size // vt.size)


@quiet
def forward_jacobian(
    program: Program,
    *,
    forward: Mapping[OpKind, ForwardRule] = FORWARD,
    tangent: dict[OpKind, TangentRule | None] = TANGENT,
    precision: type = PRECISION,
    run: Sequence[OpValues] | None = None,
) -> ForwardJacobian:
    """dL/d(inputs) by forward tangents through the storage, all coordinates at once.

    Tangents are carried in ``precision`` (extended by default) and the gradient is
    rounded to float64 once at the end. The first float read of undefined bytes ends the
    run (the result is that refusal) unless the loss is not float. ``run``: every op's
    values from the program's plain run from B_0 with ``forward`` (``check`` makes it once,
    for the references); without it the ops are run here.
    """
    plan = _plan(program)
    n_coords = plan.n_coords
    shadow = (_Shadow if plan.tagged else _UntaggedShadow)(plan, precision)
    shadow.seed(plan)

    values_of = evaluations(program, forward=forward) if run is None else run
    for k, (step, live, ev) in enumerate(zip(plan.steps, plan.live, values_of)):
        if not step.is_float:
            shadow.write(step.dst, None, ev.where)
            continue
        tans = {}
        for f, src in step.sources:
            if live:
                tans[f], bad = shadow.read(src)
            else:
                bad = shadow.undefined(src)
            if bad is not None and plan.loss_float:
                # The first float read of undefined bytes decides the result (no gradient):
                # nothing the remaining ops propagate can change it, so they are not run.
                return _refusal(k, shadow.why(src, bad, f"op {k}"), plan.steps, tangent)
        rule = tangent[step.op.kind]
        if rule is None:
            raise _no_tangent(k, step)
        if not live:  # no read that matters sees its tangents: only its tags are written
            shadow.tag(step.dst, ev.where)
            continue
        values = ev.operands
        if step.cast:  # (quiet: float32 sNaN bits from integer writes warn in the cast)
            values = {f: (a.astype(np.float64) if f != "index" else a)
                      for f, a in values.items()}
        t_out, where = rule(step.coefs, values, tans, ev.draws, step.dst.size)
        shadow.write(step.dst, t_out, where)

    if not plan.loss_float:  # (undefined reads do not matter then: the gradient is 0)
        return ForwardJacobian(np.zeros(n_coords),
                               loss_tangent=np.zeros((plan.loss.size, n_coords)))
    t_loss, bad = shadow.read(plan.loss)
    if bad is not None:
        return ForwardJacobian(None, None, shadow.why(plan.loss, bad, "the loss"))
    w = plan.weights.astype(precision)
    grad = (w[:, None] * t_loss).sum(axis=0)  # (overflow is a legal value: quiet)
    return ForwardJacobian(grad.astype(np.float64), loss_tangent=t_loss)
