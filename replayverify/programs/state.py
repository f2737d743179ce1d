"""Program state (B, R) and typed access to views over byte buffers.

Every op gathers its operands into contiguous arrays and scatters its results, so
reads and writes go through byte-index arrays computed once per view. The same code
runs on any array module ``xp`` that supports integer indexing and ``.view(dtype)``
(NumPy, CuPy): a :class:`State` holds its buffers as ``xp`` arrays, and a layout copies
its index arrays to ``xp`` once. Snapshots are always host bytes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from replayverify.programs.arrays import to_host, unique_ints
from replayverify.programs.model import DTYPES, Program, View, element_bytes
from replayverify.programs.philox import RngState


@dataclass(frozen=True)
class ViewLayout:
    """Where a view's elements live: its buffer, dtype, shape and byte indices."""

    view: View
    dtype: np.dtype
    # the granule of the view's buffer (:func:`granules`): every element of every view over
    # it starts on a multiple of it and covers whole granules (``slots``, ``cover``)
    granule: int = 1
    size: int = field(init=False, repr=False)  # element count (the view's), a plain field
    # copies of ``starts`` and ``byte_index`` in other array modules (one per module: with
    # CuPy, on the device current then) and derived index arrays
    _on: dict[tuple, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", self.view.size)

    @functools.cached_property
    def starts(self) -> np.ndarray:
        """The first byte of each element, row-major (int64, read-only): made when first
        asked (reads and writes on NumPy go through strided views, and the engines need
        only ``slots``), then kept."""
        arr = self.view.element_starts()
        arr.setflags(write=False)
        return arr

    @functools.cached_property
    def byte_index(self) -> np.ndarray:
        """Every byte of every element, element-major (int64): 8 bytes per view byte, so
        made only when a caller asks; reads and writes on NumPy use strided views."""
        arr = element_bytes(self.starts, self.dtype.itemsize)
        arr.setflags(write=False)
        return arr

    @functools.cached_property
    def slots(self) -> np.ndarray:
        """The granule each element starts in, ``starts // granule`` (int64, read-only):
        storage kept per granule (the engines' adjoints) has one slot per element there."""
        if self.granule == 1:
            return self.starts
        # (``starts`` is not kept for this where no one asked for it yet)
        starts = self.__dict__.get("starts")
        arr = (self.view.element_starts() if starts is None else starts) // self.granule
        arr.setflags(write=False)
        return arr

    @functools.cached_property
    def cover(self) -> np.ndarray:
        """Every granule of every element, element-major (int64, read-only): ``slots``
        itself when an element is one granule."""
        per = self.dtype.itemsize // self.granule
        if per == 1:
            return self.slots
        arr = element_bytes(self.slots, per)
        arr.setflags(write=False)
        return arr

    def slots_in(self, xp: ModuleType = np) -> Any:
        """``slots`` as an ``xp`` array (copied to the device once, then reused)."""
        return self.slots if xp is np else self._copy_on(xp, "slots")

    def cover_of(self, where: Any, xp: ModuleType = np) -> Any:
        """Every granule of the elements at flat positions ``where`` (all when None), as an
        ``xp`` array (``where`` must then be one too)."""
        if where is None:
            return self.cover if xp is np else self._copy_on(xp, "cover")
        return element_bytes(self.slots_in(xp)[where], self.dtype.itemsize // self.granule, xp)

    def strided(self, buf: np.ndarray) -> np.ndarray:
        """The view's elements as a writable strided NumPy array over the buffer's memory."""
        v = self.view
        # (arguments by position: the ndarray constructor parses keywords slowly, ~0.3 us
        # of its ~0.55; a check makes about 60 of these, one per view per state)
        return np.ndarray(v.shape, self.dtype, buf, v.offset, v.strides)

    def _copy_on(self, xp: ModuleType, name: str) -> Any:
        key = (xp.__name__, name)
        arr = self._on.get(key)
        if arr is None:
            arr = self._on[key] = xp.asarray(getattr(self, name))
        return arr

    def index(self, xp: ModuleType = np) -> Any:
        """``byte_index`` as an ``xp`` array (copied to the device once, then reused)."""
        return self.byte_index if xp is np else self._copy_on(xp, "byte_index")

    def starts_in(self, xp: ModuleType = np) -> Any:
        """``starts`` as an ``xp`` array (copied to the device once, then reused)."""
        return self.starts if xp is np else self._copy_on(xp, "starts")

    def regions(self, granularity: int, nbytes: int, xp: ModuleType = np) -> tuple[Any, int]:
        """Byte indices of the aligned ``granularity``-byte regions holding the view's
        bytes (clipped to a buffer of ``nbytes``) and the region count: what a region
        journal saves for a write of the whole view. Derived once per granularity."""
        if granularity == self.dtype.itemsize:  # elements start at multiples of their size:
            return self.index(xp), self.size  # the regions are the elements, in order
        key = (xp.__name__, "regions", granularity, nbytes)
        hit = self._on.get(key)
        if hit is None:
            ids = unique_ints(self.byte_index // granularity)
            idx = (ids[:, None] * granularity + np.arange(granularity, dtype=np.int64))
            idx = idx.reshape(-1)
            idx = idx[idx < nbytes]
            idx.setflags(write=False)
            hit = self._on[key] = (idx if xp is np else xp.asarray(idx), int(ids.size))
        return hit

    def bytes_of(self, where: Any, xp: ModuleType = np) -> Any:
        """Byte indices of the elements at flat positions ``where`` (all when None), as an
        ``xp`` array (``where`` must then be one too)."""
        if where is None:
            return self.index(xp)
        return element_bytes(self.starts_in(xp)[where], self.dtype.itemsize, xp)


def derive_byte_indices(lays: Iterable[ViewLayout]) -> None:
    """Derive the :attr:`ViewLayout.byte_index` of distinct layouts together, for a caller
    about to ask for each: one NumPy pass per element size over their starts, each layout
    keeping its slice of the result, instead of one pass per view. Layouts that have one
    keep it."""
    groups: dict[int, list[ViewLayout]] = {}
    for lay in lays:
        if "byte_index" not in lay.__dict__:  # (where the cached property keeps it)
            groups.setdefault(lay.dtype.itemsize, []).append(lay)
    for itemsize, group in groups.items():
        every = element_bytes(np.concatenate([lay.starts for lay in group]), itemsize)
        every.setflags(write=False)
        at = 0
        for lay in group:  # (set as the cached property sets it: a frozen dataclass)
            n = lay.size * itemsize
            object.__setattr__(lay, "byte_index", every[at:at + n])
            at += n


def layouts(program: Program) -> dict[str, ViewLayout]:
    """Layouts of every view of a (validated) program: computed once, on first use, and
    carried by the program itself (``Program.derived``), so every layer that runs it
    (interpreter, checkers, engines) shares them."""
    return program.carried("layouts", _compute_layouts)


def _compute_layouts(program: Program) -> dict[str, ViewLayout]:
    out = {}
    granule = granules(program)
    for v in program.views:
        out[v.name] = ViewLayout(v, DTYPES[v.dtype], granule[v.buffer])
    return out


def granules(program: Program) -> dict[str, int]:
    """Per buffer, its granule: the greatest common divisor of the offsets, strides and
    itemsizes of every view over it (4 or 8 bytes: offsets and strides are multiples of
    the itemsize). Every element of those views starts on a multiple of it and covers
    whole granules, so whatever is kept per element start (an adjoint) needs one slot per
    granule, not per byte, and a write or read covers whole slots: exact, whichever
    views alias which bytes. Carried by the program (``Program.derived``)."""
    return program.carried("granules", _compute_granules)


def _compute_granules(program: Program) -> dict[str, int]:
    out = {b.name: 0 for b in program.buffers}  # (gcd(0, n) = n; a buffer without views: 0)
    for v in program.views:
        out[v.buffer] = math.gcd(out[v.buffer], v.offset, v.itemsize, *v.strides)
    return {name: g or 1 for name, g in out.items()}


WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # unsigned word per width


def as_words(buf: Any, width: int) -> Any:
    """A buffer (a contiguous ``xp`` uint8 array) seen as ``width``-byte unsigned words,
    its last ``size % width`` bytes left out (no element of a view whose itemsize and
    starts are multiples of ``width`` reaches them): gathers and scatters by word index
    then move whole elements or granules with one int64 index per word, not per byte."""
    if width == 1:
        return buf
    return buf[:buf.size - buf.size % width].view(WORDS[width])


def slot_count(nbytes: int, granule: int) -> int:
    """Slots of a buffer of ``nbytes`` kept per ``granule``: one per granule begun."""
    return -(-nbytes // granule)


@dataclass
class State:
    """Mutable (B, R): one uint8 array per buffer (of the array module ``xp``) and the
    Philox state."""

    buffers: dict[str, Any]
    rng: RngState
    xp: ModuleType = field(default=np, compare=False, repr=False)
    # NumPy only: per view, (its buffer, the view as a strided array over that buffer),
    # made on first use; an entry is used only while the buffer is still that object.
    _typed: dict[str, tuple[Any, np.ndarray]] = field(default_factory=dict, compare=False,
                                                      repr=False)

    def copy(self) -> State:
        return State({k: v.copy() for k, v in self.buffers.items()}, self.rng, self.xp)

    def snapshot(self) -> Snapshot:
        """The host bytes of every buffer (copied from the device when ``xp`` is not NumPy)."""
        if self.xp is np:  # (taken once per segment boundary and engine run: no to_host)
            return Snapshot({k: v.tobytes() for k, v in self.buffers.items()}, self.rng)
        return Snapshot({k: to_host(v).tobytes() for k, v in self.buffers.items()}, self.rng)

    def typed(self, layout: ViewLayout) -> np.ndarray:
        """A NumPy state's view as a strided array over its buffer (``as_strided``
        semantics, SPEC §2): reading or assigning it moves exactly the view's bytes."""
        view = layout.view
        buf = self.buffers[view.buffer]
        hit = self._typed.get(view.name)
        if hit is not None and hit[0] is buf:
            return hit[1]
        arr = layout.strided(buf)
        self._typed[view.name] = (buf, arr)
        return arr

    def read(self, layout: ViewLayout) -> Any:
        """Gather a view's values into a fresh contiguous array of its shape."""
        if self.xp is np:
            return self.typed(layout).copy()
        buf = self.buffers[layout.view.buffer]
        return buf[layout.index(self.xp)].view(layout.dtype).reshape(layout.view.shape)

    def read_flat(self, layout: ViewLayout) -> Any:
        """Gather a view's values into a fresh contiguous 1-D array, row-major."""
        if self.xp is np:
            return self.typed(layout).flatten()
        buf = self.buffers[layout.view.buffer]
        return buf[layout.index(self.xp)].view(layout.dtype)

    def write(self, layout: ViewLayout, values, where: Any = None) -> None:
        """Scatter ``values`` (flat, in the view's dtype) to the view's elements ``where``.

        ``values`` must not share memory with the buffers (every op computes fresh ones)."""
        raw = values if values.dtype == layout.dtype else values.astype(layout.dtype)
        if raw.ndim != 1:
            raw = raw.reshape(-1)
        if self.xp is np:
            arr = self.typed(layout)
            if where is None:
                arr[...] = raw if arr.ndim == 1 else raw.reshape(arr.shape)
            elif arr.ndim == 1:
                arr[where] = raw
            else:
                arr[np.unravel_index(where, arr.shape)] = raw
            return
        buf = self.buffers[layout.view.buffer]
        buf[layout.bytes_of(where, self.xp)] = raw.view(np.uint8)


@dataclass(frozen=True)
class Snapshot:
    """Immutable (B, R): buffer bytes by name and the generator state."""

    buffers: dict[str, bytes]
    rng: RngState

    def state(self, xp: ModuleType = np) -> State:
        """A mutable copy, its buffers as ``xp`` arrays."""
        if xp is np:  # (a writable copy of each buffer's bytes, as a bytearray: about half
            # the cost of frombuffer-then-copy; dtype by position, not keyword, for the same)
            bufs = {k: np.frombuffer(bytearray(v), np.uint8) for k, v in self.buffers.items()}
        else:
            bufs = {k: xp.asarray(np.frombuffer(v, dtype=np.uint8))
                    for k, v in self.buffers.items()}
        return State(bufs, self.rng, xp)

    def frozen(self) -> State:
        """A read-only NumPy state over these bytes, copying nothing: a final state held
        beside its snapshot costs no second copy of the buffers."""
        return State({k: np.frombuffer(v, np.uint8) for k, v in self.buffers.items()},
                     self.rng)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return self.rng == other.rng and self.buffers == other.buffers

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.buffers.items())), self.rng))

    def differences(self, other: Snapshot) -> list[str]:
        """Human-readable list of what differs: buffers (first byte) and the generator."""
        out = []
        for name, data in self.buffers.items():
            theirs = other.buffers.get(name)
            if theirs != data:
                a = np.frombuffer(data, np.uint8)
                b = np.frombuffer(theirs or b"", np.uint8)
                n = min(a.size, b.size)
                diff = np.flatnonzero(a[:n] != b[:n])
                first = int(diff[0]) if diff.size else n
                out.append(f"buffer {name!r} differs from byte {first}")
        if self.rng != other.rng:
            out.append(f"generator state {tuple(other.rng)} != {tuple(self.rng)}")
        return out


def initial_state(program: Program, xp: ModuleType = np) -> State:
    """Zeroed buffers, then ``init`` applied in order, and the program's generator state.

    The buffers are ``xp`` arrays; init values are converted on the host, then moved.
    B_0 depends on the program alone and a check starts from it about ten times, so for
    a program of up to ``KEPT_INITIAL_BYTES`` its bytes are derived once, carried by the
    program (``Program.derived``), and copied; larger ones are built each time (their
    zeroed pages cost nothing until written).
    """
    snap = program.derived.get("initial")
    if snap is not None:
        return snap.state(xp)
    if program.nbytes > KEPT_INITIAL_BYTES:
        return _build_initial(program, xp)
    state = _build_initial(program, np)
    snap = program.derived["initial"] = state.snapshot()
    return state if xp is np else snap.state(xp)


KEPT_INITIAL_BYTES = 1 << 20


def _build_initial(program: Program, xp: ModuleType) -> State:
    bufs = {b.name: xp.zeros(b.nbytes, dtype=xp.uint8) for b in program.buffers}
    state = State(bufs, RngState(program.rng.key, program.rng.counter), xp)
    lay = layouts(program)
    for e in program.init:
        layout = lay[e.view]
        values = np.asarray(e.values).astype(layout.dtype)
        state.write(layout, values if xp is np else xp.asarray(values))
    return state
