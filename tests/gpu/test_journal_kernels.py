"""The RawModule journal kernels give exactly the NumPy reference's bytes."""

from __future__ import annotations

import numpy as np
import pytest

from replayverify.gpu import journal as jr

FRACTIONS = [0.001, 0.01, 0.1, 1.0]


def _case(granularity: int, n_full: int, tail: int, fraction: float, seed: int):
    nbytes = granularity * n_full + tail
    rng = np.random.default_rng(seed)
    host = rng.integers(0, 256, nbytes, dtype=np.uint8)
    n = jr.region_count(nbytes, granularity)
    k = max(1, round(fraction * n))
    regions = np.sort(rng.choice(n, size=k, replace=False))
    if tail:
        regions = np.union1d(regions, [n - 1])  # always exercise the tail region
    return host, jr.layout(nbytes, regions, granularity), rng


@pytest.mark.parametrize("fraction", FRACTIONS)
@pytest.mark.parametrize(
    ("granularity", "n_full", "tail"),
    [(16, 5000, 0), (48, 3000, 32), (4096, 300, 0), (4096, 300, 1024)],
)
def test_kernels_match_reference(cp, granularity, n_full, tail, fraction) -> None:
    host, lay, rng = _case(granularity, n_full, tail, fraction, granularity + tail)
    dev = cp.asarray(host)

    ref = jr.save(np, host, lay)
    got = jr.save(cp, dev, lay)
    assert got.data.get().tobytes() == ref.data.tobytes()
    assert jr.save(cp, dev, lay, use_kernels=False).data.get().tobytes() == ref.data.tobytes()

    new = host.copy()
    for r in lay.regions:  # write inside the regions only
        lo, hi = int(r) * granularity, min((int(r) + 1) * granularity, lay.nbytes)
        new[lo:hi] ^= rng.integers(1, 256, hi - lo, dtype=np.uint8)
    dev[...] = cp.asarray(new)
    jr.undo(cp, dev, got)
    assert dev.get().tobytes() == host.tobytes()
    jr.redo(cp, dev, got)
    assert dev.get().tobytes() == new.tobytes()
    assert got.data.get().tobytes() == ref.data.tobytes()
    jr.restore(cp, dev, got)
    assert dev.get().tobytes() == host.tobytes()


def test_offsets_beyond_4_gib(cp) -> None:
    g = 4096
    nbytes = (4 << 30) + 64 * g  # regions past 2^32 bytes need 64-bit offsets
    buf = cp.zeros(nbytes, dtype=cp.uint8)
    n = nbytes // g
    regions = np.array([0, (1 << 20) - 1, 1 << 20, n - 2, n - 1], dtype=np.int64)
    lay = jr.layout(nbytes, regions, g)
    for i, r in enumerate(regions):
        buf[int(r) * g : (int(r) + 1) * g] = i + 1
    journal = jr.save(cp, buf, lay)
    expected = np.repeat(np.arange(1, regions.size + 1, dtype=np.uint8), g)
    assert journal.data.get().tobytes() == expected.tobytes()
    buf[int(regions[-1]) * g :] = 0
    jr.undo(cp, buf, journal)
    assert int(buf[-1]) == regions.size
    del buf


def test_misaligned_buffer_is_refused(cp) -> None:
    base = cp.zeros(4096 + 16 + 8, dtype=cp.uint8)
    view = base[8 : 8 + 4096]
    lay = jr.layout(4096, [0], 4096)
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        jr.save(cp, view, lay)


def test_mixed_namespaces_are_refused(cp) -> None:
    lay = jr.layout(64, [0], 16)
    with pytest.raises(ValueError, match="but xp is cupy"):
        jr.save(cp, np.zeros(64, np.uint8), lay)
