"""Which float ops' derivative parts can reach the loss: the references skip the others.

The forward Jacobian (tangents per address) and the complex step (imaginary parts per
8-byte word) spend most of a wide program's run (many input coordinates) on arithmetic
over elements x coordinates. An op whose written parts no read that matters sees (they
are overwritten whole before the loss reads them) need not compute them. Each reference
says what a location is (its addresses, its words) and gives a view's locations as a bit
mask; :func:`live_ops` walks back from the loss over those masks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# Programs of at least this many input coordinates skip the ops whose derivative parts
# cannot reach the loss, in both references. Finding them costs about 1 us per op;
# skipping one saves its arithmetic over elements x coordinates (the forward Jacobian's
# 2-3 extended-precision operations, about 6 ns each; the complex step's complex
# evaluation), which pays on wide programs (the suite's alias programs: 64-128
# coordinates) but not on narrow ones (8-32), where few ops are dead and their arrays
# are small.
LIVE_MIN_COORDS = 48


def bit_mask(positions: slice | np.ndarray, count: int) -> int:
    """Locations ``positions`` (a slice, or indices below ``count``) as a bit mask: bit i
    for location i."""
    if isinstance(positions, slice):
        return ((1 << (positions.stop - positions.start)) - 1) << positions.start
    bits = np.zeros(count, dtype=bool)
    bits[positions] = True
    return int.from_bytes(np.packbits(bits, bitorder="little").tobytes(), "little")


def live_ops(steps: Sequence[Any], loss: Any | None,
             locations: Callable[[Any], int]) -> tuple[bool, ...]:
    """Per op, whether the parts it writes can reach the loss's (``loss``: the loss view,
    None when it is not float: then nothing is live).

    ``steps``: the reference's per-op steps (``is_float``, ``op``, ``dst`` and
    ``sources`` as (field, view) pairs); ``locations(view)``: the view's locations as a
    bit mask. Walking back from the loss: a float op is live when it writes a location
    still to be read; its whole write ends those reads (they read this op's parts) and
    its sources are read. A partial write (scatter) ends none: the elements it leaves
    keep older parts. Integer ops are never live (they write no parts). Derived from the
    program alone: the scatter positions do not enter (every scatter is taken as partial).
    """
    wanted = 0 if loss is None else locations(loss)  # locations still to be read
    live = []
    for step in reversed(steps):
        if not step.is_float or not wanted & locations(step.dst):
            live.append(False)
            continue
        live.append(True)
        if not step.op.spec.partial:
            wanted &= ~locations(step.dst)
        for _, src in step.sources:
            wanted |= locations(src)
    return tuple(reversed(live))
