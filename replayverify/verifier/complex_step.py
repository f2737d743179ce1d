"""Complex-step derivative (SPEC §5 ``complex-step``): float64 programs only.

The program runs on complex128 shadow storage: every 8-byte word of every buffer is
one complex number per input coordinate, storage shape (coordinates, words), with
input coordinate c perturbed by i*h, h = 1e-200. All coordinates go in one pass.
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

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from replayverify.programs.arrays import unique_ints
from replayverify.programs.errstate import quiet
from replayverify.programs.interpreter import FORWARD, ForwardRule, execute_op
from replayverify.programs.model import OpKind, Program
from replayverify.programs.state import ViewLayout, initial_state, layouts

H = 1e-200
WORD = 8  # bytes per float64 word


def float32_views(program: Program) -> list[str]:
    return [v.name for v in program.views if v.dtype == "float32"]


@dataclass(frozen=True)
class ComplexStep:
    gradient: np.ndarray | None
    reason: str = ""  # why there is no gradient
    # the first op whose complex evaluation moved the real parts away from the forward
    # pass's values: the perturbation i*h*tangent was not small there (a huge coefficient
    # times h), so the step is no reference (None: every op kept them)
    perturbed: int | None = None

    @property
    def supported(self) -> bool:
        return self.gradient is not None


class _Imag:
    """Imaginary parts of every float64 word, (coordinates, words) per buffer."""

    def __init__(self, program: Program, n_coords: int):
        self.imag = {b.name: np.zeros((n_coords, -(-b.nbytes // WORD)))
                     for b in program.buffers}

    def read(self, layout: ViewLayout) -> np.ndarray:
        return self.imag[layout.view.buffer][:, layout.starts // WORD]

    def write(self, layout: ViewLayout, imag: np.ndarray | None, where) -> None:
        if imag is None:  # integer write: the words it touches have no derivative
            words = unique_ints(layout.bytes_of(where) // WORD)
            self.imag[layout.view.buffer][:, words] = np.nan
            return
        starts = layout.starts if where is None else layout.starts[where]
        self.imag[layout.view.buffer][:, starts // WORD] = imag


@quiet
def complex_step(
    program: Program,
    *,
    refusal: str = "",
    forward: Mapping[OpKind, ForwardRule] = FORWARD,
    h: float = H,
) -> ComplexStep:
    """dL/d(inputs) = Im(L(inputs + i*h*e_c)) / h for every coordinate c, in one pass.

    ``refusal`` is the interpreter's admission reason when the derivative is not admitted.
    ``forward`` is the forward rule table, for the real and the complex evaluation alike.
    """
    f32 = float32_views(program)
    if f32:
        return ComplexStep(None, "complex-step needs float64 storage; float32 views: "
                           + ", ".join(f32))
    if refusal:
        return ComplexStep(None, refusal)
    lay = layouts(program)
    inputs = [lay[name] for name in program.inputs]
    n_coords = sum(lo.size for lo in inputs)
    im = _Imag(program, n_coords)
    at = 0
    for lo in inputs:
        seed = np.zeros((n_coords, lo.size))
        seed[at + np.arange(lo.size), np.arange(lo.size)] = h
        im.write(lo, seed, None)
        at += lo.size

    state = initial_state(program)
    perturbed = None
    for k, op in enumerate(program.ops):
        dst = lay[op.dst]
        if not dst.view.is_float:
            ev = execute_op(program, k, state, forward=forward)
            im.write(dst, None, ev.where)
            continue
        imag = {f: im.read(lay[getattr(op, f)]) for f in op.spec.sources}
        ev = execute_op(program, k, state, forward=forward)
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are legal values
            # (elements, coordinates): the forward rules batch over a trailing axis
            operands = {f: ev.operands[f][:, None] + 1j * imag[f].T for f in imag}
            if op.spec.indexed:
                operands["index"] = ev.operands["index"]
            out, where = forward[op.kind](op, operands, ev.draws, dst.dtype, dst.size)
        im.write(dst, np.imag(out).T, where)
        if perturbed is None and not _real_parts_kept(out, ev.values):
            perturbed = k

    loss = lay[program.loss.view]
    if not loss.view.is_float:
        return ComplexStep(np.zeros(n_coords))
    w = np.asarray(program.loss.weights, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return ComplexStep(np.sum(w[None, :] * im.read(loss), axis=1) / h,
                           perturbed=perturbed)


def _real_parts_kept(out: np.ndarray, values: np.ndarray | None) -> bool:
    """Re f(x + ih) agrees with f(x) to 1e-8 relative (it differs by O(h^2) when the
    perturbation is small): otherwise the complex evaluation left the linear regime."""
    if values is None:
        return True
    re = np.real(out)
    want = np.asarray(values, np.float64).reshape(re.shape[0], *([1] * (re.ndim - 1)))
    with np.errstate(all="ignore"):
        close = np.abs(re - want) <= 1e-8 * np.abs(want)
    same_special = (re == want) | (np.isnan(re) & np.isnan(want))
    return bool(np.all(close | same_special))
