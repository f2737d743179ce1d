"""The evaluation's workloads (the activation-pressure step and the three calibration cells)
and the methods it compares.

Every size is given at the published scale and divided by ``scale`` (:meth:`Cell.at`), so
the same study runs on a laptop and, at ``scale=1``, on a GPU with enough memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from replayverify.evaluate import calibrate as cal
from replayverify.gpu import journal as jr
from replayverify.programs.arrays import to_host

GiB = 1 << 30
MiB = 1 << 20
ACTIVATION = "activation"
CALIBRATION_WORKLOADS = cal.WORKLOADS
QUEUE_ROW_BYTES = cal.ROW_BYTES["queue"]

METHODS = ("eager", "whole", "regions", "state-agnostic", "eager/whole", "joint")
LABELS = {
    "eager": "Eager",
    "whole": "Whole snapshots",
    "regions": "Fixed regions",
    "state-agnostic": "State-agnostic planner",
    "eager/whole": "State-aware eager/whole",
    "joint": "Joint planner",
}


@dataclass(frozen=True, slots=True)
class Cell:
    """One workload shape. Sizes in bytes (or elements) at the published scale."""

    name: str
    workload: str  # "activation" or one of the calibration workloads
    state_bytes: int
    fraction: float
    segments: int
    activation_elements: int  # width x batch (activation workload only)
    budgets: tuple[int, ...]
    granularity: int = jr.GRANULARITY

    def at(self, scale: int) -> Cell:
        """This cell with every byte size, element count and budget divided by ``scale``.

        The state keeps whole rows and a multiple of 16 bytes; the journal granularity is
        divided too (so the journal stays the same fraction of what is written) but never
        below 16 bytes, the journal kernels' vector.
        """
        if scale == 1:
            return self
        row = cal.ROW_BYTES["queue" if self.workload == ACTIVATION else self.workload]
        unit = np.lcm(row, 16)
        state = max(unit, (self.state_bytes // scale) // unit * unit)
        gran = max(16, (self.granularity // scale) // 16 * 16)
        act = max(16, self.activation_elements // scale) if self.activation_elements else 0
        return Cell(
            self.name,
            self.workload,
            int(state),
            self.fraction,
            self.segments,
            act,
            tuple(b // scale for b in self.budgets),
            gran,
        )


def paper_cells() -> tuple[Cell, ...]:
    """The published study: four activation-pressure cells (a 1 GiB feature queue, sixteen
    segments, small 256 x 256 or large 4,096 x 65,536 activations, write fraction 0.001 or
    1; a 32 GiB budget, and 44 GiB for the large sparse cell) and the three calibration
    workloads at 1,024 MiB, write fraction 0.001, 64 live segments (a 20 GiB budget)."""
    cells = []
    for size, elems in (("small", 256 * 256), ("large", 4096 * 65536)):
        for kind, f in (("sparse", 0.001), ("dense", 1.0)):
            budgets = (32 * GiB, 44 * GiB) if (size, kind) == ("large", "sparse") else (32 * GiB,)
            cells.append(Cell(f"{size}-{kind}", ACTIVATION, GiB, f, 16, elems, budgets))
    for w in CALIBRATION_WORKLOADS:
        cells.append(Cell(w, w, 1024 * MiB, 0.001, 64, 0, (20 * GiB,)))
    return tuple(cells)


class ActivationStep:
    """The activation-pressure step (a :class:`~replayverify.evaluate.segments.SegmentedStep`).

    State: a feature queue of 512-byte rows. Segment k reads the queue rows it is about to
    overwrite (the next ``f`` of the ring, as the calibration's queue workload) and forms
    their mean ``c_k``; from its input ``h_k`` (``width x batch`` elements) it computes the
    activation ``t_k = tanh(a_k h_k + 0.01 c_k)`` and its output ``h_{k+1} = b_k t_k``, then
    enqueues (``v = 0.5 v + (k + 1)`` on its rows). The loss is ``sum(v * h_L)``. Backward of
    segment k needs ``t_k`` and ``h_k`` (for the gradients of ``a_k``, ``b_k`` and ``h_k``), so
    eager keeps both; a replayed segment keeps ``h_k`` and recomputes ``t_k`` from the
    queue's pre-write rows. Gradients: ``d a``, ``d b`` (one each per segment, in
    ``self.grads``) and the gradient of the step's input (what the step returns).
    """

    def __init__(self, xp: ModuleType, cell: Cell, dtype: Any = np.float32):
        self.xp, self.cell, self.dtype = xp, cell, np.dtype(dtype)
        self.segments = cell.segments
        self.sets = cal.write_sets(
            xp, "queue", cell.state_bytes, cell.fraction, cell.segments, cell.granularity
        )
        n = cell.activation_elements
        self.state = xp.empty(cell.state_bytes // self.dtype.itemsize, dtype=self.dtype)
        i = xp.arange(n, dtype=xp.int64)
        self.h0 = (((i % 97) - 48).astype(self.dtype)) * self.dtype.type(0.02)
        self.v = (((i % 13) - 6).astype(self.dtype)) * self.dtype.type(0.05)
        k = np.arange(cell.segments)
        self.a = [self.dtype.type(x) for x in 1.0 - 0.02 * k]
        self.b = [self.dtype.type(x) for x in 0.9 + 0.01 * k]
        self.grads = xp.zeros(2 * cell.segments, dtype=self.dtype)
        self.reset()

    def reset(self) -> None:
        """The queue's initial contents (the calibration's), gradients zeroed."""
        n = self.state.size
        idx = self.xp.arange(n, dtype=self.xp.int64)
        self.state[...] = (idx % 9973).astype(self.dtype) * self.dtype.type(1e-4)
        self.grads[...] = 0

    def rows(self) -> Any:
        return self.state.reshape(-1, QUEUE_ROW_BYTES // self.dtype.itemsize)

    # the SegmentedStep protocol
    def layout(self, k: int) -> jr.JournalLayout:
        return self.sets[k].layout

    def begin(self) -> Any:
        return self.h0.copy()  # the step's input batch

    def forward(self, k: int, carry: Any, *, keep: bool, write: bool) -> tuple[Any, Any]:
        xp, ws = self.xp, self.sets[k]
        rows = self.rows()
        count = ws.rows * rows.shape[1]
        c = (cal._use(xp, rows, ws) / count * 0.01).astype(self.dtype)
        t = carry * self.a[k]
        t += c
        xp.tanh(t, out=t)
        out = t * self.b[k]
        if write:
            cal._apply("queue", xp, rows, ws, k)
        return (carry, t), out

    def seed(self, carry: Any) -> Any:
        return self.v.copy()

    def backward(self, k: int, saved: Any, grad: Any) -> Any:
        xp = self.xp
        h, t = saved
        u = t * t
        xp.subtract(self.dtype.type(1), u, out=u)
        self.grads[2 * k + 1] = xp.sum(grad * t)  # d b_k
        u *= grad
        u *= self.b[k]  # gradient of the pre-activation
        self.grads[2 * k] = xp.sum(u * h)  # d a_k
        u *= self.a[k]
        return u


def calibration_step(xp: ModuleType, cell: Cell, dtype: Any = np.float32) -> Any:
    """A calibration workload's cell (``evaluate/calibrate.py``) as a segmented step, reset to its
    initial state. Its backward values (the sums of each segment's pre-write rows) are the
    step's result."""
    sets = cal.write_sets(
        xp, cell.workload, cell.state_bytes, cell.fraction, cell.segments, cell.granularity
    )
    step = cal._Cell(
        xp,
        cell.workload,
        cell.state_bytes,
        cell.fraction,
        cell.segments,
        sets,
        dtype=np.dtype(dtype),
    )
    step.reset()
    return step


def make_step(xp: ModuleType, cell: Cell, dtype: Any = np.float32) -> Any:
    """The segmented step of ``cell`` on ``xp``, in its initial state."""
    if cell.workload == ACTIVATION:
        return ActivationStep(xp, cell, dtype)
    return calibration_step(xp, cell, dtype)


def result_bytes(xp: ModuleType, step: Any, result: Any) -> bytes:
    """Everything a step computed, as host bytes: the final state, the gradients and the
    step's result (the input gradient, or the calibration's backward sums)."""
    parts = [to_host(step.state).tobytes()]
    if isinstance(step, ActivationStep):
        parts.append(to_host(step.grads).tobytes())
        parts.append(to_host(result).tobytes())
    else:
        parts.append(np.array([float(to_host(xp.asarray(v))) for v in result]).tobytes())
    return b"".join(parts)
