"""GPU Philox: the same words, uniforms and masks as the CPU, bit for bit (SPEC §2)."""

from __future__ import annotations

import numpy as np
import pytest

from replayverify.gpu import philox as gpu
from replayverify.programs import philox as cpu

KNOWN_ANSWERS = [
    ((0, 0), (0, 0, 0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF,) * 4, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0xA4093822, 0x299F31D0),
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]

COUNTERS = [
    0,
    (1 << 32) - 2,
    (1 << 64) - 3,
    (1 << 96) - 1,
    (1 << 128) - 4,
    0x0123456789ABCDEF << 40,
]


@pytest.mark.parametrize(("key", "counter", "expected"), KNOWN_ANSWERS)
def test_known_answers(cp, key, counter, expected) -> None:
    w = gpu.words(cpu.RngState(key, counter), 1).get()
    assert tuple(int(x) for x in w[0]) == expected


@pytest.mark.parametrize("counter", COUNTERS)
@pytest.mark.parametrize("n", [1, 7, 1 << 20])
def test_words_uniforms_masks_match_cpu(cp, counter: int, n: int) -> None:
    state = cpu.RngState((0x12345678, 0x9ABCDEF0), cpu.counter_words(counter))
    ref = cpu.words(state, n)
    w = gpu.words(state, n)
    assert w.dtype == cp.uint64 and w.get().tobytes() == ref.tobytes()
    r1, r2 = cpu.uniforms(ref)
    u1, u2 = gpu.uniforms(state, n)
    assert u1.get().tobytes() == r1.tobytes() and u2.get().tobytes() == r2.tobytes()
    for dtype in (np.float32, np.float64):
        keep = dtype(0.7)
        m = gpu.keep_mask(state, n, keep, dtype)
        assert m.dtype == dtype
        assert m.get().tobytes() == cpu.keep_mask(r1, keep, dtype).tobytes()


def test_normals_agree_within_last_place(cp) -> None:
    state = cpu.RngState((7, 0), (5, 0, 0, 0))
    n = 1 << 16
    z, nxt = gpu.draw_normals(state, n)
    ref, ref_next = cpu.draw_normals(state, n)
    assert nxt == ref_next
    np.testing.assert_allclose(z.get(), ref, rtol=1e-14, atol=1e-15)


def test_draws_advance_like_cpu(cp) -> None:
    state = cpu.RngState((1, 2), cpu.counter_words((1 << 128) - 2))
    u, nxt = gpu.draw_uniforms(state, 5)
    ref, ref_next = cpu.draw_uniforms(state, 5)
    assert u.get().tobytes() == ref.tobytes() and nxt == ref_next
    assert gpu.words(state, 0).shape == (0, 4)
