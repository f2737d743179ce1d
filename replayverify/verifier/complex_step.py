"""Complex-step derivative (SPEC §5 ``complex-step``): float64 programs only.

The program runs on complex128 shadow storage: every 8-byte word of every buffer is
one complex number per input coordinate (its imaginary parts stored as (words,
coordinates) per buffer), with input coordinate c perturbed by i*h, h = 1e-200. All
coordinates go in one pass; each view's words and each op's step (and, in wide
programs, which ops' values can reach the loss at all) are derived once per program
(``_plan``).
Each float op is evaluated by the interpreter's own forward rule (``FORWARD``, the one
definition of the op) on complex128 operands (real + i*imag) batched over the
coordinates; no formula and no derivative is written here, and
gradient = Im(L) / h. What is differentiated is the function the interpreter runs.

The real part of every word is the storage's bytes, produced by :func:`execute_op`:
Re f(x + i*h*t) = f(x) - O(h^2), below float64 resolution at h = 1e-200, so taking
the real part from the real evaluation changes nothing numerically while making
integer reads of float bytes see exactly the forward pass's bytes (libm's complex
tanh and the signs of zeros in complex products could otherwise differ in the last
bit). Integer writes make the imaginary part of the words they touch NaN: such bytes
have no derivative, and admission guarantees no float op reads them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from replayverify.programs.arrays import as_slices, diagonal_seeds
from replayverify.programs.errstate import quiet
from replayverify.programs.interpreter import FORWARD, ForwardRule, OpValues, loss_weights
from replayverify.programs.model import Op, OpKind, PerProgram, Program
from replayverify.programs.state import layouts
from replayverify.verifier.liveness import LIVE_MIN_COORDS, bit_mask, live_ops
from replayverify.verifier.reference_run import evaluations

H = 1e-200
WORD = 8  # bytes per float64 word
_PLANS = PerProgram()  # each program's :class:`_Plan`


def float32_views(program: Program) -> list[str]:
    return [v.name for v in program.views if v.dtype == "float32"]


@dataclass(frozen=True)
class ComplexStep:
    gradient: np.ndarray | None
    reason: str = ""  # why there is no gradient
    # the first op whose complex evaluation moved the real parts away from the forward
    # pass's values: the perturbation i*h*tangent was not small there (a huge coefficient
    # times h), so the step is no reference (None: every op kept them, or not watched)
    perturbed: int | None = None

    @property
    def supported(self) -> bool:
        return self.gradient is not None


class _Words(NamedTuple):
    """A view's elements as rows of the imaginary storage: one 8-byte word per float64
    element; for an integer element, the word holding it. (A NamedTuple, as the other
    per-program records here: one is built per view of every checked program.)"""

    name: str
    buffer: str
    size: int
    words: np.ndarray  # element -> word (first byte // 8)
    rows: slice | np.ndarray  # ``words`` as a slice when consecutive: no gather/scatter


class _ComplexStep(NamedTuple):
    """One op as the complex step runs it, derived once per program."""

    op: Op
    dst: _Words
    dtype: np.dtype  # the destination's
    is_float: bool
    sources: tuple[tuple[str, _Words], ...]  # (field, view) of each value source
    indexed: bool  # it reads an integer index view too (handed to the rule as it is)


@dataclass(frozen=True, slots=True)
class _Plan:
    """Everything the complex step derives from the program alone."""

    words: dict[str, int]  # per buffer, its word count
    n_coords: int
    inputs: tuple[_Words, ...]
    seeds: tuple[slice, ...] | None  # the inputs' seeds in their buffers' flat imaginary
    # parts, when the perturbations are all they write (``diagonal_seeds``), else None
    steps: tuple[_ComplexStep, ...]
    live: tuple[bool, ...]  # per op: its imaginary parts can reach the loss's (``_live``)
    loss: _Words
    loss_float: bool
    weights: np.ndarray  # the loss weights, float64


def _plan(program: Program) -> _Plan:
    """The complex step's word indices and op steps: derived once per program (held
    here, not on the program), so that a check only propagates values."""
    return _PLANS.carried(program, "complex_plan", _derive_plan)


def _derive_plan(program: Program) -> _Plan:
    # (Plain loops over views and ops: a comprehension per op costs more than the few
    # items it builds.)
    lay = layouts(program)
    los = list(lay.values())
    words = np.concatenate([lo.starts for lo in los]) // WORD  # every view's, at once
    bounds = list(itertools.accumulate([lo.size for lo in los], initial=0))
    views = {lo.view.name: _Words(lo.view.name, lo.view.buffer, lo.size, words[a:b], rows)
             for lo, a, b, rows in zip(los, bounds, bounds[1:], as_slices(words, bounds))}
    steps = []
    for op in program.ops:
        dst = lay[op.dst]
        sources = []
        for f in op.spec.sources:
            sources.append((f, views[getattr(op, f)]))
        steps.append(_ComplexStep(op, views[op.dst], dst.dtype, dst.view.is_float,
                                  tuple(sources), op.spec.indexed))
    inputs = tuple([views[name] for name in program.inputs])
    n_coords = sum([v.size for v in inputs])
    loss, loss_float = views[program.loss.view], lay[program.loss.view].view.is_float
    n_words = {b.name: -(-b.nbytes // WORD) for b in program.buffers}
    live = (_live(steps, loss if loss_float else None, n_words)
            if n_coords >= LIVE_MIN_COORDS else (True,) * len(steps))
    seeds = diagonal_seeds([(v.buffer, v.rows) for v in inputs], n_coords)
    return _Plan(n_words, n_coords, inputs, seeds, tuple(steps), live, loss, loss_float,
                 loss_weights(program))


def _live(steps: list[_ComplexStep], loss: _Words | None,
          n_words: dict[str, int]) -> tuple[bool, ...]:
    """Per op, whether the imaginary parts it writes can reach the loss's (:func:`live_ops`
    over the buffers' words end to end). A run that does not watch the real parts skips
    the others; integer ops always run."""
    base, end = {}, 0  # each buffer's first word
    for name, n in n_words.items():
        base[name] = end
        end += n
    masks: dict[str, int] = {}  # per view, its words

    def words(v: _Words) -> int:
        mask = masks.get(v.name)
        if mask is None:
            at = v.rows if isinstance(v.rows, slice) else v.words
            mask = masks[v.name] = bit_mask(at, end) << base[v.buffer]
        return mask

    return live_ops(steps, loss, words)


@quiet
def complex_step(
    program: Program,
    *,
    refusal: str = "",
    forward: Mapping[OpKind, ForwardRule] = FORWARD,
    h: float = H,
    watch: bool = True,
    run: Sequence[OpValues] | None = None,
) -> ComplexStep:
    """dL/d(inputs) = Im(L(inputs + i*h*e_c)) / h for every coordinate c, in one pass.

    ``refusal`` is the interpreter's admission reason when the derivative is not admitted.
    ``forward`` is the forward rule table, for the real and the complex evaluation alike.
    ``watch`` compares every op's real parts with the forward pass's values to find
    ``perturbed``; without it the gradient is the same and ``perturbed`` is None.
    ``run``: every op's values from the program's plain run from B_0 with ``forward``
    (``check`` makes it once, for the references); without it the ops are run here.
    """
    f32 = float32_views(program)
    if f32:
        return ComplexStep(None, "complex-step needs float64 storage; float32 views: "
                           + ", ".join(f32))
    if refusal:
        return ComplexStep(None, refusal)
    plan = _plan(program)
    n_coords = plan.n_coords
    # imaginary parts of every float64 word, (words, coordinates) per buffer
    imag = {name: np.zeros((n, n_coords)) for name, n in plan.words.items()}
    if plan.seeds is not None:  # the perturbations alone, one strided slice per input
        for v, at in zip(plan.inputs, plan.seeds):  # (reshape: a view of a fresh array)
            imag[v.buffer].reshape(-1)[at] = h
    else:
        at = 0
        for v in plan.inputs:  # input element j: coordinate at + j perturbed by i*h
            imag[v.buffer][v.rows] = 0.0  # (only an earlier input can have written them)
            imag[v.buffer][v.words, at + np.arange(v.size)] = h
            at += v.size

    perturbed = None
    values_of = evaluations(program, forward=forward) if run is None else run
    # (watching compares every op's real parts: then every op runs)
    lives = itertools.repeat(True) if watch else plan.live
    for k, (step, live, ev) in enumerate(zip(plan.steps, lives, values_of)):
        dst = step.dst
        if not step.is_float:  # integer write: the words it touches have no derivative
            where = ev.where
            imag[dst.buffer][dst.rows if where is None else dst.words[where]] = np.nan
            continue
        if not live:  # no read that matters sees what it writes
            continue
        # (elements, coordinates): the forward rules batch over a trailing axis; inf and
        # NaN are legal values (this function runs under ``quiet``)
        operands = {}
        for f, v in step.sources:  # (the imaginary rows are a view when they are a slice)
            operands[f] = ev.operands[f][:, None] + 1j * imag[v.buffer][v.rows]
        if step.indexed:
            operands["index"] = ev.operands["index"]
        out, where = forward[step.op.kind](step.op, operands, ev.draws, step.dtype, dst.size)
        imag[dst.buffer][dst.rows if where is None else dst.words[where]] = out.imag
        if watch and perturbed is None and not _real_parts_kept(out, ev.values):
            perturbed = k

    if not plan.loss_float:
        return ComplexStep(np.zeros(n_coords))
    loss = imag[plan.loss.buffer][plan.loss.rows].T  # (coordinates, elements)
    return ComplexStep((plan.weights[None, :] * loss).sum(axis=1) / h, perturbed=perturbed)


def _real_parts_kept(out: np.ndarray, values: np.ndarray | None) -> bool:
    """Re f(x + ih) agrees with f(x) to 1e-8 relative (it differs by O(h^2) when the
    perturbation is small): otherwise the complex evaluation left the linear regime."""
    if values is None:
        return True
    re = out.real
    want = np.asarray(values, np.float64).reshape(re.shape[0], *([1] * (re.ndim - 1)))
    if (re == want).all():  # the common case (no rounding apart)
        return True
    with np.errstate(all="ignore"):
        close = np.abs(re - want) <= 1e-8 * np.abs(want)
    if close.all():
        return True
    same_special = (re == want) | (np.isnan(re) & np.isnan(want))
    return bool(np.all(close | same_special))
