"""Philox4x32-10 (Salmon et al., SC 2011) and the draw rules of SPEC §2.

Words are u32 values held in ``uint64`` arrays so that the 32x32 -> 64-bit products
of the round function never overflow. The generator state is explicit: a key of two
u32 words and a 128-bit counter of four u32 words (word 0 least significant).
"""

from __future__ import annotations

import bisect
import functools
import importlib
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

M0 = 0xD2511F53
M1 = 0xCD9E8D57
W0 = 0x9E3779B9
W1 = 0xBB67AE85
ROUNDS = 10

MASK32 = 0xFFFFFFFF
MASK64 = (1 << 64) - 1
MOD128 = 1 << 128
TWO_PI = 2.0 * np.pi


class RngState(NamedTuple):
    """The 24-byte generator state R: key (2 x u32) and counter (4 x u32, word 0 low)."""

    key: tuple[int, int]
    counter: tuple[int, int, int, int]

    @property
    def counter_int(self) -> int:
        c = self.counter
        return c[0] | (c[1] << 32) | (c[2] << 64) | (c[3] << 96)

    def advanced(self, n: int) -> RngState:
        """The state after consuming ``n`` blocks (counter + n mod 2^128)."""
        c = self.counter
        low = c[0] + n
        if 0 <= n and low <= MASK32:  # no carry out of word 0: the common case
            return RngState(self.key, (low, c[1], c[2], c[3]))
        return RngState(self.key, counter_words((self.counter_int + n) % MOD128))

    def to_bytes(self) -> bytes:
        """The 24 little-endian bytes of (key, counter): what the byte check compares."""
        return np.array(self.key + self.counter, dtype="<u4").tobytes()


def counter_words(value: int) -> tuple[int, int, int, int]:
    """Split a 128-bit integer into four u32 words, least significant first."""
    return tuple((value >> (32 * i)) & MASK32 for i in range(4))  # type: ignore[return-value]


def counter_blocks(counter: int, n: int) -> np.ndarray:
    """Counters ``counter + j`` for j in 0..n-1 (mod 2^128) as an (n, 4) uint64 word array."""
    if (counter & MASK32) + n <= MASK32 + 1:  # word 0 never carries: only it counts up
        out = np.empty((n, 4), dtype=np.uint64)
        out[:] = counter_words(counter)
        out[:, 0] += np.arange(n, dtype=np.uint64)
        return out
    j = np.arange(n, dtype=np.uint64)
    lo = np.uint64(counter & MASK64) + j  # wraps mod 2^64
    carry = (lo < j).astype(np.uint64)
    hi = np.uint64((counter >> 64) & MASK64) + carry
    out = np.empty((n, 4), dtype=np.uint64)
    m32 = np.uint64(MASK32)
    s32 = np.uint64(32)
    out[:, 0] = lo & m32
    out[:, 1] = lo >> s32
    out[:, 2] = hi & m32
    out[:, 3] = hi >> s32
    return out


@functools.lru_cache(maxsize=256)
def _round_keys(key: tuple[int, int]) -> np.ndarray:
    """The (k0, k1) of every round, as a read-only (ROUNDS, 2, 1) uint64 array."""
    k0, k1 = int(key[0]), int(key[1])
    out = []
    for _ in range(ROUNDS):
        out.append(((k0,), (k1,)))
        k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
    keys = np.array(out, dtype=np.uint64)
    keys.setflags(write=False)
    return keys


_MULTIPLIERS = np.array([[M0], [M1]], dtype=np.uint64)


# Where the low and high u32 halves of a uint64 lie in its two u32 words (memory order).
_LO, _HI = (0, 1) if sys.byteorder == "little" else (1, 0)


def philox4x32(blocks: np.ndarray, key: tuple[int, int]) -> np.ndarray:
    """Philox4x32-10 of each row of ``blocks`` ((n, 4) u32 words in uint64) under ``key``.

    Words 0 and 2 (multiplied) and words 1 and 3 are carried as two (2, n) arrays, so a
    round is three array operations for all blocks:
    (c0, c1, c2, c3) <- (hi(c2*M1) ^ c1 ^ k0, lo(c2*M1), hi(c0*M0) ^ c3 ^ k1, lo(c0*M0)).
    The halves of the products are read as u32 views of them (no shift, no mask).
    """
    c = blocks.astype(np.uint64).T
    even, odd = c[0::2], c[1::2]  # (c0, c2), (c1, c3)
    for keys in _round_keys((int(key[0]), int(key[1]))):
        # (c0*M0, c2*M1), exact (< 2^64), row-major so that its u32 view pairs halves
        p = np.multiply(even, _MULTIPLIERS, order="C").view(np.uint32)
        even = p[::-1, _HI::2] ^ odd ^ keys  # (uint64: keys are)
        odd = p[::-1, _LO::2]
    return np.stack([even[0], odd[0], even[1], odd[1]], axis=1).astype(np.uint64, copy=False)


def words(state: RngState, n: int) -> np.ndarray:
    """The (n, 4) Philox words of blocks counter+0 .. counter+(n-1)."""
    return philox4x32(counter_blocks(state.counter_int, n), state.key)


def uniforms(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(u1, u2) in [0, 1) float64: u1 from (w1<<32 | w0) >> 11, u2 from (w3<<32 | w2) >> 11."""
    s11 = np.uint64(11)
    scale = 2.0**-53
    if sys.byteorder == "little":  # (w1<<32 | w0, w3<<32 | w2) is a u64 view of the u32 words
        u = (w.astype(np.uint32).view(np.uint64) >> s11).astype(np.float64) * scale
        return u[:, 0], u[:, 1]
    s32 = np.uint64(32)
    u1 = (((w[:, 1] << s32) | w[:, 0]) >> s11).astype(np.float64) * scale
    u2 = (((w[:, 3] << s32) | w[:, 2]) >> s11).astype(np.float64) * scale
    return u1, u2


# Draws of up to this many elements are kept by a :class:`Blocks` cache; larger ones are
# recomputed (their Philox cost is amortised over the elements, and memory stays bounded).
BLOCKS_MAX_ELEMENTS = 1 << 16


class Blocks:
    """Philox uniforms by (key, counter, n), each computed once and then shared.

    Everything that runs one program (the interpreter, the forward Jacobian, the complex
    step, the byte replays, every engine and its replays) draws the same blocks from the
    same generator states; a cache carried by the program computes them once per check.
    It only memoises the pure function (state, n) -> uniforms: whoever draws still
    chooses the state it draws from, so a replay from a wrong state draws wrong values.

    ``span``: how many blocks to compute at once from a state not seen before (the
    program's draws in all). A program's draw ops consume consecutive blocks, so one
    Philox evaluation serves them all: block j depends only on (key, counter + j), and
    a run of blocks sliced at an offset is what a draw from that offset computes.
    """

    __slots__ = ("_draws", "_hits", "_runs", "span")

    def __init__(self, span: int = 0) -> None:
        self.span = min(span, BLOCKS_MAX_ELEMENTS)
        self._hits: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        # per key: the first counters of the runs computed (ascending) and the runs
        self._runs: dict[tuple[int, int], tuple[list[int], list[tuple]]] = {}
        self._draws: dict[tuple, np.ndarray] = {}

    def memo(self, key: tuple, n: int, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """A value derived from blocks (a draw op's values: ``key`` says from which state,
        rule, dtype and coefficient), computed once (read-only) when ``n`` is small."""
        if n > BLOCKS_MAX_ELEMENTS:
            return compute()
        hit = self._draws.get(key)
        if hit is None:
            hit = self._draws[key] = compute()
            hit.setflags(write=False)
        return hit

    def uniforms(self, state: RngState, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(u1, u2) of blocks counter+0 .. counter+(n-1) under the state's key (read-only)."""
        if n > BLOCKS_MAX_ELEMENTS:
            return uniforms(words(state, n))
        key = (state.key, state.counter, n)
        hit = self._hits.get(key)
        if hit is None:
            hit = self._hits[key] = self._from_runs(state, n)
        return hit

    def _from_runs(self, state: RngState, n: int) -> tuple[np.ndarray, np.ndarray]:
        counter = state.counter_int
        firsts, runs = self._runs.setdefault(state.key, ([], []))
        j = bisect.bisect_right(firsts, counter) - 1  # the last run starting at or before
        if j >= 0 and counter - firsts[j] + n <= runs[j][0].size:
            u1, u2 = runs[j]
            at = counter - firsts[j]
            return u1[at: at + n], u2[at: at + n]
        u1, u2 = uniforms(words(state, max(n, self.span)))
        u1.setflags(write=False)
        u2.setflags(write=False)
        j = bisect.bisect_right(firsts, counter)
        firsts.insert(j, counter)
        runs.insert(j, (u1, u2))
        return u1[:n], u2[:n]


def normals(u1: np.ndarray, u2: np.ndarray) -> np.ndarray:
    """Box-Muller exactly as SPEC §2: sqrt(-2 log1p(-u1)) * cos(TWO_PI * u2), float64."""
    return np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(TWO_PI * u2)


def keep_mask(u1: np.ndarray, keep, dtype) -> np.ndarray:
    """Dropout mask: 1 where u1 < keep else 0, in ``dtype``."""
    return (u1 < keep).astype(dtype)


def draw_normals(state: RngState, n: int) -> tuple[np.ndarray, RngState]:
    """n standard normals (float64) and the advanced state."""
    u1, u2 = uniforms(words(state, n))
    return normals(u1, u2), state.advanced(n)


def draw_uniforms(state: RngState, n: int) -> tuple[np.ndarray, RngState]:
    """n first uniforms u1 (float64) and the advanced state."""
    u1, _ = uniforms(words(state, n))
    return u1, state.advanced(n)


# ---------------------------------------------------------------- implementations
#
# One interface, several implementations: each computes the same words, uniforms and
# masks (normals may differ in the last place across backends, SPEC §2) for one array
# module. The CPU one below is the specification; the CUDA kernels (``gpu.philox``)
# are registered by name as a ``module:attr`` reference, imported on first use only.


class PhiloxImpl(NamedTuple):
    """The draws of SPEC §2 for blocks counter+0 .. counter+n-1 of a generator state."""

    name: str
    words: Callable[[RngState, int], Any]  # (n, 4) u32 words (in uint64)
    uniforms: Callable[[RngState, int], tuple[Any, Any]]  # (u1, u2) float64
    normals: Callable[[RngState, int], Any]  # Box-Muller z, float64
    keep_mask: Callable[[RngState, int, Any, Any], Any]  # (state, n, keep, dtype)


CPU = PhiloxImpl(
    "numpy",
    words,
    lambda state, n: uniforms(words(state, n)),
    lambda state, n: normals(*uniforms(words(state, n))),
    lambda state, n, keep, dtype: keep_mask(uniforms(words(state, n))[0], keep, dtype),
)

_IMPLS: dict[str, PhiloxImpl | str] = {
    "numpy": CPU,
    "cupy": "replayverify.gpu.philox:KERNELS",  # the CUDA kernels, imported on first use
}


def register_philox(impl: PhiloxImpl | str, name: str | None = None) -> None:
    """Register a Philox implementation for the array module ``name`` (an implementation
    or a ``module:attr`` reference to one); a name already taken is refused."""
    name = name or (impl.name if isinstance(impl, PhiloxImpl) else None)
    if not name:
        raise ValueError("a Philox implementation given as a reference needs a name")
    if name in _IMPLS:
        raise ValueError(f"a Philox implementation for {name!r} is already registered")
    _IMPLS[name] = impl


def philox_for(module_name: str) -> PhiloxImpl:
    """The Philox implementation registered for an array module ("numpy", "cupy")."""
    impl = _IMPLS.get(module_name)
    if impl is None:
        raise ValueError(f"no Philox implementation for {module_name!r}; registered: "
                         f"{', '.join(sorted(_IMPLS))}")
    if isinstance(impl, str):
        mod, _, attr = impl.partition(":")
        impl = _IMPLS[module_name] = getattr(importlib.import_module(mod), attr)
    return impl
