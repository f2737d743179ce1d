"""Forward-mode Jacobian through the mutable storage (SPEC §5 ``forward-jacobian``).

Tangents shadow the storage itself, never the version graph: every distinct float
element address (buffer, first byte, dtype) owns one row of a float64 tangent array
of shape (addresses, input coordinates), so all coordinates propagate at once. Each
byte carries a tag, the address whose write last covered it (or "constant", or
"integer write"); a float read of an element is defined iff all its bytes carry that
element's own address or are all constant, which is SPEC §3's admission rule stated
on addresses. Values come from :func:`execute_op` (the interpreter's ``FORWARD``).

The tangent rules (``TANGENT``) are this module's own statement of each op's derivative,
written independently of the interpreter's ``REVERSE`` on purpose: the forward Jacobian
is the reference the reverse rules are checked against, so it must not share them (a
wrong sign in a reverse rule is caught only because TANGENT does not have it). What an
op computes and which elements it writes (scatter's last-wins) is not restated: that
comes from the interpreter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from replayverify.programs.arrays import unique_ints
from replayverify.programs.errstate import quiet
from replayverify.programs.interpreter import FORWARD, ForwardRule, execute_op, scatter_winners
from replayverify.programs.model import Op, OpKind, Program
from replayverify.programs.state import ViewLayout, initial_state, layouts

# The reference is meant to be more accurate than the reverse sweep it checks: with
# tangents in extended precision (80-bit on x86-64; float64 where the platform has no
# wider type), the disagreement measures the version graph's own float64 rounding.
PRECISION = np.longdouble

CONST = -1  # tag of bytes never written by an op and not in an input: tangent 0
INT_WRITTEN = -2  # tag of bytes last written by an integer op: tangent undefined

Values = dict[str, np.ndarray]  # operand values, flat (float64 for float operands)
Tangents = dict[str, np.ndarray]  # operand tangents, (elements, coordinates)
TangentRule = Callable[[Op, Values, Tangents, "np.ndarray | None", np.dtype, int],
                       "tuple[np.ndarray, np.ndarray | None]"]


def _coef(op: Op, name: str, dtype: np.dtype) -> float:
    """A coefficient converted to the view's dtype first (SPEC §2), then to float64."""
    return float(op.coef_as(name, dtype))


# ---------------------------------------------------------------- tangent rules
#
# A tangent rule maps (op, values, tangents, draws, dtype, dst size) to (tangent of the
# written elements, where): d(dst) = J d(sources). Values are float64; tangents carry
# their own precision, and products are formed tangent first.


def _t_axpby(op, v, t, d, dt, n):
    return t["x"] * _coef(op, "a", dt) + t["y"] * _coef(op, "b", dt), None


def _t_mul(op, v, t, d, dt, n):
    return t["x"] * v["y"][:, None] + t["y"] * v["x"][:, None], None


def _arg(op, v, t, dt):
    """a*x rounded in float64 as the program rounds it, then widened to the tangents'
    precision: the derivative of tanh(fl(a*x)) is taken at fl(a*x)."""
    return (_coef(op, "a", dt) * v["x"]).astype(t["x"].dtype)


def _t_tanh(op, v, t, d, dt, n):
    return (t["x"] * _coef(op, "a", dt)) * (1.0 - np.tanh(_arg(op, v, t, dt)) ** 2)[:, None], None


def _t_sin(op, v, t, d, dt, n):
    return (t["x"] * _coef(op, "a", dt)) * np.cos(_arg(op, v, t, dt))[:, None], None


def _t_dropout(op, v, t, d, dt, n):
    mask = d.reshape(-1).astype(t["x"].dtype)[:, None]
    return (t["x"] * mask) / _coef(op, "keep", dt), None


def _t_gather(op, v, t, d, dt, n):
    return t["x"][np.mod(v["index"].astype(np.int64), t["x"].shape[0])], None


def _t_scatter(op, v, t, d, dt, n):
    where, src = scatter_winners(v["index"], n)
    return t["x"][src], where


TANGENT: dict[OpKind, TangentRule | None] = {
    OpKind.AXPBY: _t_axpby,
    OpKind.MUL: _t_mul,
    OpKind.TANH: _t_tanh,
    OpKind.SIN: _t_sin,
    OpKind.COPY: lambda op, v, t, d, dt, n: (t["x"], None),
    OpKind.NOISE: lambda op, v, t, d, dt, n: (t["x"], None),  # x + sigma*z: z is a constant
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
    found = program.derived.get("addresses")
    if found is None:
        found = program.derived["addresses"] = _addresses(program)
    return found


def _addresses(program: Program) -> Addresses:
    lay = layouts(program)
    buf_id = {b.name: i for i, b in enumerate(program.buffers)}
    floats = [lay[v.name] for v in program.views if v.is_float]
    if not floats:
        return Addresses(0, {})
    # key = (buffer, first byte, itemsize) as one integer in the same lexicographic order
    # (the itemsize distinguishes float32 from float64); ids are the keys' ranks
    span = max(b.nbytes for b in program.buffers) + 1
    keys = np.concatenate([(buf_id[lo.view.buffer] * span + lo.starts) * 2
                           + (lo.dtype.itemsize == 8) for lo in floats])
    uniq = unique_ints(keys)
    ids = np.searchsorted(uniq, keys)
    out, at = {}, 0
    for lo in floats:
        out[lo.view.name] = ids[at:at + lo.size]
        at += lo.size
    return Addresses(int(ids.max()) + 1, out)


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
    """Tangent rows per address and a per-byte tag of the address that last wrote it."""

    def __init__(self, program: Program, n_coords: int, precision: type = PRECISION):
        self.program = program
        self.addr = addresses(program)
        self.tangent = np.zeros((self.addr.count, n_coords), dtype=precision)
        self.tags = {b.name: np.full(b.nbytes, CONST, np.int64) for b in program.buffers}
        # per float view: its element addresses repeated per byte, (elements, itemsize)
        # (the tags its own writes leave), and as bytes the tags of a whole view last
        # written by its own elements and of a never-written one (derived once per program)
        self.own_bytes = program.derived.setdefault("address_bytes", {})

    def _own_bytes(self, layout: ViewLayout) -> tuple[np.ndarray, bytes, bytes]:
        hit = self.own_bytes.get(layout.view.name)
        if hit is None:
            own = self.addr.of_view[layout.view.name]
            rep = np.repeat(own, layout.dtype.itemsize).reshape(layout.size, -1)
            rep.setflags(write=False)
            const = np.full(rep.size, CONST, np.int64).tobytes()
            hit = self.own_bytes[layout.view.name] = (rep, rep.tobytes(), const)
        return hit

    def read(self, layout: ViewLayout) -> tuple[np.ndarray, int | None]:
        """Tangents (elements, coordinates) of a float view; the first undefined element."""
        own = self.addr.of_view[layout.view.name]
        tags = self.tags[layout.view.buffer][layout.byte_index]
        rep, all_mine, all_const = self._own_bytes(layout)
        raw = tags.tobytes()
        if raw == all_mine:  # every element last written whole at its own address
            return self.tangent.take(own, axis=0), None
        if raw == all_const:  # never written: tangent 0
            return np.zeros((layout.size, self.tangent.shape[1]), self.tangent.dtype), None
        tags = tags.reshape(layout.size, -1)
        mine = (tags == rep).all(axis=1)
        const = (tags == CONST).all(axis=1)
        bad = ~(mine | const)
        first = int(np.flatnonzero(bad)[0]) if bad.any() else None
        return np.where(mine[:, None], self.tangent[own], 0.0), first

    def write(self, layout: ViewLayout, tangent: np.ndarray | None, where) -> None:
        """Tangents of the written elements (None: an integer write, tangent undefined)."""
        if tangent is None:
            self.tags[layout.view.buffer][layout.bytes_of(where)] = INT_WRITTEN
            return
        own = self.addr.of_view[layout.view.name]
        rep = self._own_bytes(layout)[0]
        if where is None:
            self.tangent[own] = tangent
            self.tags[layout.view.buffer][layout.byte_index] = rep.reshape(-1)
        else:
            self.tangent[own[where]] = tangent
            self.tags[layout.view.buffer][layout.bytes_of(where)] = rep[where].reshape(-1)

    def why(self, layout: ViewLayout, j: int, what: str) -> str:
        tags = self.tags[layout.view.buffer][layout.bytes_of(np.array([j]))]
        where = f"float read at {what} (view {layout.view.name!r} element {j})"
        if np.any(tags == INT_WRITTEN):
            return f"{where}: its bytes were last written by an integer op"
        return f"{where}: its bytes are not one float write of this element's address"


def _steps(program: Program) -> tuple:
    """Per op: (op, dst layout, dst is float, ((field, layout) of each value source)),
    looked up once per program."""
    steps = program.derived.get("tangent_steps")
    if steps is None:
        lay = layouts(program)
        steps = program.derived["tangent_steps"] = tuple(
            (op, lay[op.dst], lay[op.dst].view.is_float,
             tuple((f, lay[getattr(op, f)]) for f in op.spec.sources))
            for op in program.ops)
    return steps


@quiet
def forward_jacobian(
    program: Program,
    *,
    forward: Mapping[OpKind, ForwardRule] = FORWARD,
    tangent: dict[OpKind, TangentRule | None] = TANGENT,
    precision: type = PRECISION,
) -> ForwardJacobian:
    """dL/d(inputs) by forward tangents through the storage, all coordinates at once.

    Tangents are carried in ``precision`` (extended by default) and the gradient is
    rounded to float64 once at the end.
    """
    lay = layouts(program)
    inputs = [lay[name] for name in program.inputs]
    n_coords = sum(lo.size for lo in inputs)
    shadow = _Shadow(program, n_coords, precision)
    state = initial_state(program)
    at = 0
    for lo in inputs:
        seed = np.zeros((lo.size, n_coords), dtype=precision)
        seed[np.arange(lo.size), at + np.arange(lo.size)] = 1.0
        shadow.write(lo, seed, None)
        at += lo.size

    refused: tuple[int | None, str] | None = None
    for k, (op, dst, is_float, sources) in enumerate(_steps(program)):
        tans = {}
        if is_float:
            for f, src in sources:
                tans[f], bad = shadow.read(src)
                if bad is not None and refused is None:
                    refused = (k, shadow.why(src, bad, f"op {k}"))
        ev = execute_op(program, k, state, forward=forward)
        if not is_float:
            shadow.write(dst, None, ev.where)
            continue
        rule = tangent[op.kind]
        if rule is None:
            raise ValueError(f"op {k}: {op.kind.value} writes a float view but has no tangent")
        # (quiet: float32 sNaN bits from integer writes warn in the cast)
        values = {f: (a.astype(np.float64, copy=False) if f != "index" else a)
                  for f, a in ev.operands.items()}
        t_out, where = rule(op, values, tans, ev.draws, dst.dtype, dst.size)
        shadow.write(dst, t_out, where)

    loss = lay[program.loss.view]
    if not loss.view.is_float:
        return ForwardJacobian(np.zeros(n_coords), loss_tangent=np.zeros((loss.size, n_coords)))
    t_loss, bad = shadow.read(loss)
    if bad is not None and refused is None:
        refused = (None, shadow.why(loss, bad, "the loss"))
    if refused is not None:
        return ForwardJacobian(None, refused[0], refused[1])
    w = np.asarray(program.loss.weights, dtype=np.float64).astype(precision)
    with np.errstate(over="ignore", invalid="ignore"):
        grad = np.sum(w[:, None] * t_loss, axis=0)
    return ForwardJacobian(grad.astype(np.float64), loss_tangent=t_loss)
