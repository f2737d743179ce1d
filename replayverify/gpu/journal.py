"""Region journals: save the old bytes of a set of buffer regions, undo and redo the writes.

Layout (shared by the NumPy reference and the CUDA kernels in ``kernels.cu``):

- A buffer is ``nbytes`` bytes, a multiple of 16 (the kernels move 16-byte vectors). Callers
  that own device buffers pad them to 16 bytes.
- It is cut into regions of ``granularity`` bytes (a positive multiple of 16, default 4,096).
  ``nbytes`` need not be a multiple of the granularity: the last region is then a short *tail*
  of ``nbytes % granularity`` bytes and is handled explicitly.
- A journal lists region indices (int64, strictly increasing, each below the number of regions)
  and holds their bytes compactly, in list order: region ``regions[k]`` occupies journal bytes
  ``[k * granularity, (k + 1) * granularity)``. Only the last listed region can be the tail, so
  the journal is exactly the sum of its regions' sizes and its offsets stay uniform.

Operations (``xp`` is the array module, NumPy or CuPy; buffers are C-contiguous arrays of any
dtype, handled as bytes):

- :func:`save` copies the listed regions' current bytes into a new journal (before writing).
- :func:`undo` exchanges journal and buffer: the buffer gets the old bytes back and the journal
  keeps the displaced new bytes, so :func:`redo` (the same exchange) reinstates them. If the
  buffer changed between undo and redo, redo still writes back the journal's bytes, but the
  journal then holds the changed bytes, not the old ones. On NumPy the exchange leaves the
  journal a new ``data`` array (hold the journal, not its data).
- :func:`restore` writes the journal into the buffer one way (cheaper: no exchange).

With NumPy a host plan runs (below: the journal's regions coalesced into contiguous runs,
copied as a slice when there is one, else gathered and scattered by fancy indexing with
precomputed indices in units of the runs' common divisor; an exchange is two passes into a
new journal array); :class:`OnBuffer` makes the calls on one buffer without re-checking it
per call. With CuPy the RawModule kernels run (``use_kernels=False``
runs the plain-indexing reference on CuPy arrays, for cross-checks). The reference is the
definition the tests hold the host plan and the kernels to, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

import numpy as np

from replayverify.programs.arrays import is_cupy_array, is_cupy_module, to_host

GRANULARITY = 4096
VECTOR_BYTES = 16

Holds = Literal["old", "new"]


def _check_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        # ValueError, not TypeError: every layout problem is reported the same way.
        raise ValueError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    return int(value)


def check_granularity(granularity: Any) -> int:
    """The granularity as an int, or ValueError unless it is a positive multiple of 16 bytes."""
    g = _check_int("granularity", granularity)
    if g <= 0 or g % VECTOR_BYTES:
        raise ValueError(f"granularity must be a positive multiple of 16 bytes, got {g}")
    return g


def check_nbytes(nbytes: Any) -> int:
    """The buffer size as an int, or ValueError unless it is a non-negative multiple of 16."""
    n = _check_int("buffer size", nbytes)
    if n < 0 or n % VECTOR_BYTES:
        raise ValueError(
            f"buffer size must be a non-negative multiple of 16 bytes, got {n} "
            "(pad the buffer to a multiple of 16 bytes)"
        )
    return n


def region_count(nbytes: int, granularity: int) -> int:
    """How many regions a buffer of ``nbytes`` has (the last one may be a short tail)."""
    return -(-nbytes // granularity)


def check_regions(regions: Any, n_regions: int) -> np.ndarray:
    """Validated region indices: a read-only int64 array, strictly increasing, in range."""
    arr = to_host(regions)
    if arr.ndim != 1:
        raise ValueError(f"region indices must be a 1-D array, got shape {arr.shape}")
    if arr.size == 0:
        out = np.zeros(0, dtype=np.int64)
        out.flags.writeable = False
        return out
    if arr.dtype.kind not in "iu":
        raise ValueError(f"region indices must be integers, got dtype {arr.dtype}")
    bad = np.flatnonzero((arr < 0) | (arr >= n_regions))
    if bad.size:
        pos = int(bad[0])
        raise ValueError(
            f"region index {int(arr[pos])} at position {pos} is out of range: "
            f"the buffer has {n_regions} regions (0..{n_regions - 1})"
        )
    out = arr.astype(np.int64)
    step = np.diff(out)
    bad = np.flatnonzero(step <= 0)
    if bad.size:
        pos = int(bad[0]) + 1
        what = "duplicate" if step[pos - 1] == 0 else "not sorted"
        raise ValueError(
            f"region indices must be sorted and unique: index {int(out[pos])} at position {pos} "
            f"follows {int(out[pos - 1])} ({what})"
        )
    out.flags.writeable = False
    return out


@dataclass(frozen=True, slots=True, eq=False)
class JournalLayout:
    """Which regions of which buffer a journal holds; built (and validated) by :func:`layout`."""

    nbytes: int
    granularity: int
    regions: np.ndarray
    _device: dict = field(default_factory=dict, repr=False)

    @property
    def n_regions(self) -> int:
        """Number of regions in the buffer."""
        return region_count(self.nbytes, self.granularity)

    @property
    def tail_bytes(self) -> int:
        """Size of the buffer's last region (``granularity`` when there is no short tail)."""
        return self.nbytes - (self.n_regions - 1) * self.granularity if self.nbytes else 0

    @property
    def has_tail(self) -> bool:
        """Whether the journal lists the buffer's short tail region."""
        return bool(
            self.regions.size
            and self.tail_bytes != self.granularity
            and int(self.regions[-1]) == self.n_regions - 1
        )

    @property
    def payload_bytes(self) -> int:
        """Bytes of journal data: the sum of the listed regions' sizes (computed once)."""
        n = self._device.get("payload")
        if n is None:
            full = self.regions.size * self.granularity
            n = full - (self.granularity - self.tail_bytes) if self.has_tail else full
            self._device["payload"] = n
        return n

    def regions_on(self, xp: ModuleType) -> Any:
        """The region indices as an ``xp`` array (copied to the current device once, cached)."""
        if xp is np:
            return self.regions
        key = xp.cuda.Device().id if is_cupy_module(xp) else xp.__name__
        arr = self._device.get(key)
        if arr is None:
            arr = xp.asarray(self.regions)
            self._device[key] = arr
        return arr


def layout(nbytes: int, regions: Any, granularity: int = GRANULARITY) -> JournalLayout:
    """Validate and build a journal layout; ValueError names the problem."""
    g = check_granularity(granularity)
    n = check_nbytes(nbytes)
    return JournalLayout(n, g, check_regions(regions, region_count(n, g)))


def regions_for_ranges(starts: Any, stops: Any, granularity: int = GRANULARITY) -> np.ndarray:
    """Sorted unique indices of the regions that byte ranges ``[starts[i], stops[i])`` touch."""
    g = check_granularity(granularity)
    s = np.asarray(starts, dtype=np.int64).reshape(-1)
    e = np.asarray(stops, dtype=np.int64).reshape(-1)
    if s.shape != e.shape:
        raise ValueError(f"starts and stops differ in length: {s.size} and {e.size}")
    if np.any(s < 0):
        raise ValueError("byte ranges must not start below 0")
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return np.zeros(0, dtype=np.int64)
    first = s // g
    counts = (e - 1) // g - first + 1
    offsets = np.cumsum(counts) - counts
    idx = np.repeat(first - offsets, counts) + np.arange(int(counts.sum()), dtype=np.int64)
    return np.unique(idx)


def changed_regions(
    xp: ModuleType, before: Any, after: Any, granularity: int = GRANULARITY
) -> np.ndarray:
    """Indices (NumPy int64) of the regions whose bytes differ between two equal-size buffers."""
    g = check_granularity(granularity)
    a, b = _byte_view(xp, before, "before"), _byte_view(xp, after, "after")
    if a.size != b.size:
        raise ValueError(f"buffers differ in size: {a.size} and {b.size} bytes")
    diff = a != b
    nfull = a.size // g
    flags = diff[: nfull * g].reshape(nfull, g).any(axis=1)
    if a.size % g:
        flags = xp.concatenate([flags, diff[nfull * g :].any().reshape(1)])
    return to_host(xp.nonzero(flags)[0]).astype(np.int64)


@dataclass(slots=True)
class Journal:
    """A journal's data (``payload_bytes`` uint8) and which bytes it holds: "old" or "new"."""

    layout: JournalLayout
    data: Any
    holds: Holds = "old"

    @property
    def nbytes(self) -> int:
        """Bytes this journal retains."""
        return self.layout.payload_bytes


U8 = np.dtype(np.uint8)


def _byte_view(xp: ModuleType, buf: Any, what: str = "buffer") -> Any:
    if xp is np and type(buf) is np.ndarray:  # the host path: no CuPy check, no new view
        if not buf.flags.c_contiguous:
            raise ValueError(f"{what} must be C-contiguous")
        if buf.ndim == 1:
            return buf if buf.dtype is U8 or buf.dtype == U8 else buf.view(U8)
        return buf.reshape(-1).view(U8)
    if is_cupy_array(buf) != is_cupy_module(xp):
        raise ValueError(f"{what} is a {type(buf).__module__} array but xp is {xp.__name__}")
    if not buf.flags.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous")
    return buf.reshape(-1).view(xp.uint8)


def _buffer_bytes(xp: ModuleType, buf: Any, lay: JournalLayout) -> Any:
    b = _byte_view(xp, buf)
    if b.size != lay.nbytes:
        raise ValueError(f"buffer holds {b.size} bytes but the journal layout is for {lay.nbytes}")
    return b


def _check_data(xp: ModuleType, journal: Journal) -> Any:
    d = journal.data
    if not (xp is np and type(d) is np.ndarray) and is_cupy_array(d) != is_cupy_module(xp):
        raise ValueError(f"journal data is a {type(d).__module__} array but xp is {xp.__name__}")
    if (d.dtype is not U8 and d.dtype != U8) or d.ndim != 1 or not d.flags.c_contiguous:
        raise ValueError("journal data must be a 1-D C-contiguous uint8 array")
    if d.size != journal.layout.payload_bytes:
        raise ValueError(
            f"journal data holds {d.size} bytes but its layout needs {journal.layout.payload_bytes}"
        )
    return d


# --- the reference: plain array indexing, the same on NumPy and CuPy --------------------------


def _parts(xp: ModuleType, b: Any, lay: JournalLayout) -> tuple[Any, Any, int]:
    """(full-region rows of the buffer, their listed indices, bytes of listed full regions)."""
    g = lay.granularity
    nfull = lay.nbytes // g
    idx = lay.regions_on(xp)
    k = idx.size - 1 if lay.has_tail else idx.size
    return b[: nfull * g].reshape(nfull, g), idx[:k], k * g


def _ref_gather(xp: ModuleType, b: Any, lay: JournalLayout, out: Any) -> None:
    rows, idx, cut = _parts(xp, b, lay)
    if cut:
        out[:cut].reshape(-1, lay.granularity)[...] = rows[idx]
    if lay.has_tail:
        out[cut:] = b[rows.size :]


def _ref_scatter(xp: ModuleType, b: Any, lay: JournalLayout, data: Any) -> None:
    rows, idx, cut = _parts(xp, b, lay)
    if cut:
        rows[idx] = data[:cut].reshape(-1, lay.granularity)
    if lay.has_tail:
        b[rows.size :] = data[cut:]


def _ref_swap(xp: ModuleType, b: Any, lay: JournalLayout, data: Any) -> None:
    kept = xp.empty_like(data)
    _ref_gather(xp, b, lay, kept)
    _ref_scatter(xp, b, lay, data)
    data[...] = kept


# --- the NumPy host plan: coalesced runs ------------------------------------------------------

LOOP_RUNS = 1  # up to this many runs are copied as slices; more go through fancy indexing
# (measured on NumPy 2: indexing a void view with 2 runs costs less than 2 slice copies)


@dataclass(frozen=True, slots=True)
class HostPlan:
    """A layout's regions as contiguous runs of the buffer and of the journal (consecutive
    regions coalesce; the journal is compact, so a run is contiguous in both). Few runs:
    ``slices`` (buffer slice, journal slice) pairs. Many: ``unit`` bytes (the common divisor
    of every run's start and stop and of the buffer size) and ``index``, the buffer's units
    in journal order, for fancy indexing (``units[index]``) on a view as
    ``void``, the ``unit``-byte void dtype (made once: making a dtype costs microseconds, as
    much as a small journal's copy). ``nbytes``: the journal's size; ``run``: the buffer's
    slice when there is exactly one run (the journal is then that slice, whole)."""

    slices: tuple[tuple[slice, slice], ...] | None
    unit: int
    index: np.ndarray | None
    void: np.dtype | None = None
    nbytes: int = 0
    run: slice | None = None


def host_plan(lay: JournalLayout) -> HostPlan:
    """The layout's host plan (computed once, cached on the layout)."""
    plan = lay._device.get("host")
    if plan is not None:
        return plan
    g, regs = lay.granularity, lay.regions
    starts = regs * g
    stops = np.minimum(starts + g, lay.nbytes)
    if regs.size:
        cut = np.flatnonzero(regs[1:] != regs[:-1] + 1) + 1
        first = np.concatenate([[0], cut])
        last = np.concatenate([cut - 1, [regs.size - 1]])
        run_starts, run_stops = starts[first], stops[last]
    else:
        run_starts = run_stops = np.zeros(0, dtype=np.int64)
    lengths = run_stops - run_starts
    offsets = np.cumsum(lengths) - lengths
    if run_starts.size <= LOOP_RUNS:
        slices = tuple(
            (slice(int(a), int(b)), slice(int(o), int(o + b - a)))
            for a, b, o in zip(run_starts, run_stops, offsets)
        )
        run = slices[0][0] if len(slices) == 1 else None
        plan = HostPlan(slices, 1, None, nbytes=lay.payload_bytes, run=run)
    else:
        unit = int(np.gcd.reduce(np.concatenate([run_starts, run_stops, [lay.nbytes]])))
        counts = lengths // unit
        base = np.repeat(run_starts // unit - (np.cumsum(counts) - counts), counts)
        index = base + np.arange(int(counts.sum()), dtype=np.int64)
        index.flags.writeable = False
        plan = HostPlan(None, unit, index, np.dtype((np.void, unit)), lay.payload_bytes)
    lay._device["host"] = plan
    return plan


def _units(b: np.ndarray, plan: HostPlan) -> np.ndarray:
    return b.view(plan.void)


def _host_copy(b: np.ndarray, plan: HostPlan) -> np.ndarray:
    """A new journal array holding the plan's bytes of ``b`` (one allocation, one pass)."""
    if plan.slices is None:  # fancy indexing of a void view: faster than np.take here
        return _units(b, plan)[plan.index].view(U8)
    if plan.run is not None:
        return b[plan.run].copy()
    out = np.empty(plan.nbytes, dtype=U8)
    for sb, sj in plan.slices:
        out[sj] = b[sb]
    return out


def _host_gather(b: np.ndarray, plan: HostPlan, out: np.ndarray) -> None:
    if plan.slices is not None:
        for sb, sj in plan.slices:
            out[sj] = b[sb]
    else:
        np.take(_units(b, plan), plan.index, out=_units(out, plan), mode="clip")


def _host_scatter(b: np.ndarray, plan: HostPlan, data: np.ndarray) -> None:
    if plan.run is not None:
        b[plan.run] = data
    elif plan.slices is not None:
        for sb, sj in plan.slices:
            b[sb] = data[sj]
    else:  # faster than np.put
        _units(b, plan)[plan.index] = _units(data, plan)


def _host_swap(b: np.ndarray, plan: HostPlan, data: np.ndarray) -> np.ndarray:
    """The exchange in two passes: the buffer's bytes copied into a new array, the journal's
    written into the buffer; returns the new array, the journal's data from now on (the old
    one is dropped: one journal-sized temporary, as a third copy back would also need)."""
    kept = _host_copy(b, plan)
    _host_scatter(b, plan, data)
    return kept


# --- the CuPy kernels -------------------------------------------------------------------------


def _launch(xp: ModuleType, name: str, b: Any, lay: JournalLayout, data: Any) -> None:
    from replayverify.gpu import _kernels

    n = lay.payload_bytes // VECTOR_BYTES
    if n == 0:
        return
    for what, arr in (("buffer", b), ("journal data", data)):
        if arr.data.ptr % VECTOR_BYTES:
            raise ValueError(f"{what} is not 16-byte aligned (the kernels use 16-byte vectors)")
    vpr = lay.granularity // VECTOR_BYTES
    shift = vpr.bit_length() - 1 if vpr & (vpr - 1) == 0 else -1
    blocks, threads = _kernels.grid(xp, n)
    args = (b, data, lay.regions_on(xp), np.uint64(n), np.uint64(vpr), np.int32(shift))
    _kernels.function(xp, name)(blocks, threads, args)


HOST = {"gather": _host_gather, "scatter": _host_scatter}


def _run(xp: ModuleType, op: str, b: Any, lay: JournalLayout, data: Any, use_kernels: bool):
    if xp is np:
        HOST[op](b, host_plan(lay), data)
    elif use_kernels and is_cupy_module(xp):
        _launch(xp, f"rv_journal_{op}", b, lay, data)
    else:
        {"gather": _ref_gather, "scatter": _ref_scatter, "swap": _ref_swap}[op](xp, b, lay, data)


# --- public operations ------------------------------------------------------------------------

ALREADY_UNDONE = "undo needs a journal holding old bytes; this one was already undone"


def save(xp: ModuleType, buf: Any, lay: JournalLayout, *, use_kernels: bool = True) -> Journal:
    """A new journal holding the current ("old") bytes of ``lay``'s regions of ``buf``."""
    b = _buffer_bytes(xp, buf, lay)
    if xp is np:
        return Journal(lay, _host_copy(b, host_plan(lay)), "old")
    data = xp.empty(lay.payload_bytes, dtype=xp.uint8)
    _run(xp, "gather", b, lay, data, use_kernels)
    return Journal(lay, data, "old")


def save_into(xp: ModuleType, buf: Any, journal: Journal, *, use_kernels: bool = True) -> None:
    """Refill an existing journal with the current bytes (no allocation); it then holds "old"."""
    b = _buffer_bytes(xp, buf, journal.layout)
    _run(xp, "gather", b, journal.layout, _check_data(xp, journal), use_kernels)
    journal.holds = "old"


def swap(xp: ModuleType, buf: Any, journal: Journal, *, use_kernels: bool = True) -> None:
    """Exchange the journal's bytes with the buffer's regions; "old" and "new" trade places."""
    b = _buffer_bytes(xp, buf, journal.layout)
    data = _check_data(xp, journal)
    if xp is np:  # two passes and a new data array (see _host_swap)
        journal.data = _host_swap(b, host_plan(journal.layout), data)
    else:
        _run(xp, "swap", b, journal.layout, data, use_kernels)
    journal.holds = "new" if journal.holds == "old" else "old"


def undo(xp: ModuleType, buf: Any, journal: Journal, *, use_kernels: bool = True) -> None:
    """Put the old bytes back into ``buf``; the journal keeps the new bytes for :func:`redo`."""
    if journal.holds != "old":
        raise ValueError(ALREADY_UNDONE)
    swap(xp, buf, journal, use_kernels=use_kernels)


def redo(xp: ModuleType, buf: Any, journal: Journal, *, use_kernels: bool = True) -> None:
    """Reinstate the bytes that :func:`undo` displaced; the journal holds the old bytes again."""
    if journal.holds != "new":
        raise ValueError("redo needs a journal holding new bytes; call undo first")
    swap(xp, buf, journal, use_kernels=use_kernels)


def restore(xp: ModuleType, buf: Any, journal: Journal, *, use_kernels: bool = True) -> None:
    """Write the journal's bytes into ``buf`` one way (the journal is unchanged)."""
    b = _buffer_bytes(xp, buf, journal.layout)
    _run(xp, "scatter", b, journal.layout, _check_data(xp, journal), use_kernels)


class OnBuffer:
    """The operations above on one buffer whose byte view is checked once, not per call: for
    a caller that saves, undoes and restores many journals of one buffer (a segmented step
    makes three calls per segment, and on NumPy the per-call checks cost as much as copying
    a small journal). Per call only sizes are checked: the layout's buffer size, and the
    journal data's size (the journals must come from :func:`save` or this object, whose data
    are 1-D uint8 arrays). The bytes moved are those of the functions above."""

    def __init__(self, xp: ModuleType, buf: Any, *, use_kernels: bool = True):
        self.xp, self.use_kernels = xp, use_kernels
        self.b = _byte_view(xp, buf)

    def _size(self, lay: JournalLayout) -> None:
        if lay.nbytes != self.b.size:
            raise ValueError(
                f"buffer holds {self.b.size} bytes but the journal layout is for {lay.nbytes}"
            )

    def _plan(self, journal: Journal) -> HostPlan:
        """The journal's host plan, once its sizes are checked against the buffer's."""
        self._size(journal.layout)
        plan = host_plan(journal.layout)
        if journal.data.size != plan.nbytes:
            raise ValueError(
                f"journal data holds {journal.data.size} bytes but its layout needs {plan.nbytes}"
            )
        return plan

    def save(self, lay: JournalLayout) -> Journal:
        """As :func:`save`."""
        if self.xp is not np:
            return save(self.xp, self.b, lay, use_kernels=self.use_kernels)
        self._size(lay)
        return Journal(lay, _host_copy(self.b, host_plan(lay)), "old")

    def undo(self, journal: Journal) -> None:
        """As :func:`undo`."""
        if self.xp is not np:
            undo(self.xp, self.b, journal, use_kernels=self.use_kernels)
        elif journal.holds != "old":
            raise ValueError(ALREADY_UNDONE)
        else:
            journal.data = _host_swap(self.b, self._plan(journal), journal.data)
            journal.holds = "new"

    def restore(self, journal: Journal) -> None:
        """As :func:`restore`."""
        if self.xp is not np:
            restore(self.xp, self.b, journal, use_kernels=self.use_kernels)
        else:
            _host_scatter(self.b, self._plan(journal), journal.data)
