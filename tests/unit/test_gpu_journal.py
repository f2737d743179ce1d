"""Region journals: the NumPy reference round trips exactly, and bad layouts are refused clearly."""

from __future__ import annotations

import numpy as np
import pytest

from replayverify.gpu import journal as jr

FRACTIONS = [0.001, 0.01, 0.1, 1.0]
GRANULARITIES = [16, 4096]


def _buffer(nbytes: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def _touched(n_regions: int, fraction: float, seed: int) -> np.ndarray:
    """A sorted random set of about ``fraction`` of the regions (at least one)."""
    k = max(1, round(fraction * n_regions))
    rng = np.random.default_rng(seed + 1)
    return np.sort(rng.choice(n_regions, size=k, replace=False)).astype(np.int64)


def _write_inside(buf: np.ndarray, lay: jr.JournalLayout, seed: int) -> None:
    """Overwrite bytes only inside the layout's regions, including each region's last byte."""
    rng = np.random.default_rng(seed + 2)
    g = lay.granularity
    for r in lay.regions:
        lo, hi = int(r) * g, min((int(r) + 1) * g, lay.nbytes)
        buf[lo:hi] ^= rng.integers(1, 256, hi - lo, dtype=np.uint8)  # every byte changes


@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("fraction", FRACTIONS)
@pytest.mark.parametrize("tail", [0, 48])
def test_save_modify_undo_redo_round_trip(granularity: int, fraction: float, tail: int) -> None:
    n_regions = 1000 if granularity == 16 else 256
    nbytes = n_regions * granularity + tail
    total_regions = jr.region_count(nbytes, granularity)
    seed = int(fraction * 1000) + granularity + tail
    before = _buffer(nbytes, seed)
    buf = before.copy()
    lay = jr.layout(nbytes, _touched(total_regions, fraction, seed), granularity)

    journal = jr.save(np, buf, lay)
    assert journal.nbytes == journal.data.size == lay.payload_bytes
    _write_inside(buf, lay, seed)
    after = buf.copy()
    np.testing.assert_array_equal(jr.changed_regions(np, before, after, granularity), lay.regions)

    jr.undo(np, buf, journal)  # old bytes back, new bytes kept
    assert buf.tobytes() == before.tobytes()
    assert journal.holds == "new"
    jr.redo(np, buf, journal)  # new bytes reinstated, old bytes kept
    assert buf.tobytes() == after.tobytes()
    assert journal.holds == "old"

    jr.undo(np, buf, journal)  # the journal survives any number of toggles
    jr.redo(np, buf, journal)
    assert buf.tobytes() == after.tobytes()

    jr.restore(np, buf, journal)  # one-way undo leaves the journal as it was
    assert buf.tobytes() == before.tobytes()
    assert journal.holds == "old"


@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("fraction", FRACTIONS)
def test_save_undo_redo_without_writes_is_identity(granularity: int, fraction: float) -> None:
    nbytes = 200 * granularity
    before = _buffer(nbytes, 7)
    buf = before.copy()
    lay = jr.layout(nbytes, _touched(200, fraction, 7), granularity)
    journal = jr.save(np, buf, lay)
    saved = journal.data.copy()
    jr.undo(np, buf, journal)
    jr.redo(np, buf, journal)
    assert buf.tobytes() == before.tobytes()
    assert journal.data.tobytes() == saved.tobytes()


def test_journal_is_compact_and_in_list_order() -> None:
    g = 32
    buf = np.arange(10 * g + 16, dtype=np.uint8)  # 10 full regions and a 16-byte tail
    lay = jr.layout(buf.size, [1, 4, 10], g)
    assert lay.n_regions == 11 and lay.tail_bytes == 16 and lay.has_tail
    assert lay.payload_bytes == 2 * g + 16
    data = jr.save(np, buf, lay).data
    expected = np.concatenate([buf[g : 2 * g], buf[4 * g : 5 * g], buf[10 * g :]])
    assert data.tobytes() == expected.tobytes()


def test_typed_multidimensional_buffers_are_handled_as_bytes() -> None:
    buf = np.linspace(-1.0, 1.0, 4 * 64).reshape(4, 64)  # 2,048 bytes of float64
    before = buf.copy()
    lay = jr.layout(buf.nbytes, [0, 3], 512)
    journal = jr.save(np, buf, lay)
    buf[0, :10] = 99.0
    buf[3, -1] = -7.0
    jr.undo(np, buf, journal)
    np.testing.assert_array_equal(buf, before)


def test_empty_journal_and_empty_buffer() -> None:
    buf = _buffer(4096, 3)
    journal = jr.save(np, buf, jr.layout(4096, [], 4096))
    assert journal.nbytes == 0
    jr.undo(np, buf, journal)
    jr.redo(np, buf, journal)
    lay = jr.layout(0, np.zeros(0, dtype=np.int64), 4096)
    assert lay.n_regions == 0 and lay.payload_bytes == 0
    assert jr.save(np, np.zeros(0, np.uint8), lay).nbytes == 0


def test_undo_and_redo_refuse_the_wrong_order() -> None:
    buf = _buffer(64, 1)
    journal = jr.save(np, buf, jr.layout(64, [1], 16))
    with pytest.raises(ValueError, match="call undo first"):
        jr.redo(np, buf, journal)
    jr.undo(np, buf, journal)
    with pytest.raises(ValueError, match="already undone"):
        jr.undo(np, buf, journal)


def test_regions_for_ranges() -> None:
    got = jr.regions_for_ranges([0, 4095, 10_000, 50, 8192], [1, 4097, 10_000, 60, 12_289], 4096)
    # [0,1) -> 0; [4095,4097) -> 0,1; empty; [50,60) -> 0; [8192,12289) -> 2,3
    np.testing.assert_array_equal(got, [0, 1, 2, 3])
    assert got.dtype == np.int64
    assert jr.regions_for_ranges([], [], 16).size == 0


_BAD_LAYOUTS = [
    # (nbytes, regions, granularity, message fragment)
    (4096, [0], 0, "granularity must be a positive multiple of 16 bytes, got 0"),
    (4096, [0], -16, "granularity must be a positive multiple of 16 bytes, got -16"),
    (4096, [0], 100, "granularity must be a positive multiple of 16 bytes, got 100"),
    (4096, [0], 16.0, "granularity must be an integer, got float"),
    (4096, [0], True, "granularity must be an integer, got bool"),
    (4100, [0], 4096, "buffer size must be a non-negative multiple of 16 bytes, got 4100"),
    (-16, [0], 16, "buffer size must be a non-negative multiple of 16 bytes, got -16"),
    (64, [[0, 1]], 16, r"region indices must be a 1-D array, got shape \(1, 2\)"),
    (64, [0.0, 1.0], 16, "region indices must be integers, got dtype float64"),
    (64, np.array([True]), 16, "region indices must be integers, got dtype bool"),
    (64, [0, 4], 16, r"region index 4 at position 1 is out of range: .* 4 regions \(0..3\)"),
    (64, [-1, 2], 16, "region index -1 at position 0 is out of range"),
    (64, np.array([2**64 - 1], np.uint64), 16, "region index 18446744073709551615 at position 0"),
    (64, [0, 2, 2], 16, r"index 2 at position 2 follows 2 \(duplicate\)"),
    (64, [0, 3, 1], 16, r"index 1 at position 2 follows 3 \(not sorted\)"),
]


@pytest.mark.parametrize(("nbytes", "regions", "granularity", "message"), _BAD_LAYOUTS)
def test_layout_validation(nbytes, regions, granularity, message) -> None:
    with pytest.raises(ValueError, match=message):
        jr.layout(nbytes, regions, granularity)


def test_operation_validation() -> None:
    lay = jr.layout(64, [1], 16)
    buf = _buffer(64, 2)
    with pytest.raises(ValueError, match="buffer holds 48 bytes but the journal layout is for 64"):
        jr.save(np, buf[:48], lay)
    with pytest.raises(ValueError, match="buffer must be C-contiguous"):
        jr.save(np, np.zeros(128, np.uint8)[::2], lay)
    journal = jr.save(np, buf, lay)
    journal.data = journal.data[:8]
    with pytest.raises(ValueError, match="journal data holds 8 bytes but its layout needs 16"):
        jr.undo(np, buf, journal)
    journal.data = np.zeros(16, np.int8)
    with pytest.raises(ValueError, match="1-D C-contiguous uint8"):
        jr.restore(np, buf, journal)
    with pytest.raises(ValueError, match="differ in length"):
        jr.regions_for_ranges([0, 1], [2], 16)


def test_use_kernels_flag_is_ignored_on_numpy() -> None:
    buf = _buffer(256, 5)
    lay = jr.layout(256, [0, 15], 16)
    a = jr.save(np, buf, lay, use_kernels=True).data
    b = jr.save(np, buf, lay, use_kernels=False).data
    assert a.tobytes() == b.tobytes()


# --- the host plan (coalesced runs) against the plain-indexing reference -----------------------


def _layouts(seed: int) -> list[jr.JournalLayout]:
    """Layouts that take both host paths: few runs (slices) and many (take / put), with
    consecutive regions that coalesce, isolated ones, a short tail, granularities that are
    not powers of two (48 bytes: runs whose common unit is 16 bytes, unaligned to a region
    of another layout) and 64 KiB regions."""
    rng = np.random.default_rng(seed)
    out = []
    for g, n_regions, tail in ((16, 3000, 0), (48, 700, 32), (4096, 64, 16), (65536, 6, 0)):
        nbytes = n_regions * g + tail
        total = jr.region_count(nbytes, g)
        for k in (1, 3, jr.LOOP_RUNS + 1, total // 3, total):
            k = max(1, min(total, k))
            regs = np.sort(rng.choice(total, size=k, replace=False))
            out.append(jr.layout(nbytes, regs, g))
        # runs of several consecutive regions, many of them
        starts = np.arange(0, total - 4, 7)
        regs = np.unique(np.concatenate([starts, starts + 1, starts + 2]))
        out.append(jr.layout(nbytes, regs[regs < total], g))
    return out


def _reference(op: str, buf: np.ndarray, lay: jr.JournalLayout, data: np.ndarray) -> None:
    {"gather": jr._ref_gather, "scatter": jr._ref_scatter, "swap": jr._ref_swap}[op](
        np, buf, lay, data
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_host_plan_matches_the_reference_byte_for_byte(seed: int) -> None:
    for lay in _layouts(seed):
        plan = jr.host_plan(lay)
        assert (plan.slices is None) == (len(_runs(lay)) > jr.LOOP_RUNS)
        for op in ("gather", "scatter", "swap"):
            buf = _buffer(lay.nbytes, seed + 10)
            data = _buffer(lay.payload_bytes, seed + 20)
            want_buf, want_data = buf.copy(), data.copy()
            _reference(op, want_buf, lay, want_data)
            if op == "swap":
                data = jr._host_swap(buf, plan, data)
            else:
                jr.HOST[op](buf, plan, data)
            assert buf.tobytes() == want_buf.tobytes(), (op, lay.granularity, lay.regions.size)
            assert data.tobytes() == want_data.tobytes(), (op, lay.granularity)


def _runs(lay: jr.JournalLayout) -> list[tuple[int, int]]:
    """Contiguous runs of consecutive listed regions, as (first, last) region indices."""
    runs: list[tuple[int, int]] = []
    for r in lay.regions.tolist():
        if runs and runs[-1][1] == r - 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    return runs


def test_overlapping_journals_undo_in_reverse_and_redo_in_order() -> None:
    """Three writes whose regions overlap (different granularities over one buffer, so
    their runs are mutually unaligned): undoing the journals newest first restores each
    earlier state, redoing them oldest first the final one, on both host paths."""
    rng = np.random.default_rng(5)
    nbytes = 48 * 400
    buf = _buffer(nbytes, 3)
    states = [buf.copy()]
    journals = []
    for g, count in ((16, 40), (48, 300), (16, 900)):
        total = jr.region_count(nbytes, g)
        lay = jr.layout(nbytes, np.sort(rng.choice(total, size=count, replace=False)), g)
        journals.append(jr.save(np, buf, lay))
        _write_inside(buf, lay, g + count)
        states.append(buf.copy())
    assert {jr.host_plan(j.layout).slices is None for j in journals} == {True}
    for j, state in zip(reversed(journals), reversed(states[:-1])):
        jr.undo(np, buf, j)
        assert buf.tobytes() == state.tobytes()
    for j, state in zip(journals, states[1:]):
        jr.redo(np, buf, j)
        assert buf.tobytes() == state.tobytes()


def test_unaligned_typed_views_use_the_host_plan() -> None:
    """A buffer that is a typed, reshaped view with an offset into a larger allocation (its
    byte view is not 16-byte aligned): the host plan still moves exactly the listed bytes."""
    base = _buffer(8 * 1000 + 8, 9)
    buf = base[8:].view(np.float64).reshape(10, 100)  # 8,000 bytes at an 8-byte offset
    lay = jr.layout(8000, [0, 1, 2, 7, 40, 41, 499], 16)
    before = buf.copy()
    journal = jr.save(np, buf, lay)
    buf[...] = -1.0
    jr.restore(np, buf, journal)
    want = np.full(1000, -1.0).view(np.uint8)
    old = before.reshape(-1).view(np.uint8)
    for r in lay.regions.tolist():
        want[16 * r : 16 * r + 16] = old[16 * r : 16 * r + 16]
    assert buf.reshape(-1).view(np.uint8).tobytes() == want.tobytes()


# --- OnBuffer: the operations on one buffer, its byte view checked once ----------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_on_buffer_moves_the_bytes_the_functions_move(seed: int) -> None:
    """Save, undo, redo (a restore of the new bytes) and restore through :class:`OnBuffer` leave
    buffer and journal byte for byte as the module's functions do, on both host paths."""
    for lay in _layouts(seed):
        a = _buffer(lay.nbytes, seed + 30)
        b = a.copy()
        ops = jr.OnBuffer(np, b)
        ja, jb = jr.save(np, a, lay), ops.save(lay)
        assert ja.data.tobytes() == jb.data.tobytes() and jb.holds == "old"
        _write_inside(a, lay, seed)
        _write_inside(b, lay, seed)
        jr.undo(np, a, ja)
        ops.undo(jb)
        assert a.tobytes() == b.tobytes() and ja.data.tobytes() == jb.data.tobytes()
        assert jb.holds == "new"
        jr.restore(np, a, ja)
        ops.restore(jb)
        assert a.tobytes() == b.tobytes()


def test_on_buffer_checks_the_buffer_once_and_sizes_per_call(monkeypatch) -> None:
    """The byte view is made (and checked) when the object is built, not per call; a layout
    for another buffer size, journal data of the wrong size and a second undo are refused."""
    calls = []
    real = jr._byte_view
    monkeypatch.setattr(jr, "_byte_view", lambda *a: calls.append(1) or real(*a))
    buf = _buffer(4096, 4)
    ops = jr.OnBuffer(np, buf)
    lay = jr.layout(4096, [1, 2, 40, 200], 16)
    journals = [ops.save(lay) for _ in range(3)]
    for j in journals:
        ops.undo(j)
        ops.restore(j)
    assert len(calls) == 1
    with pytest.raises(ValueError, match="buffer holds 4096 bytes but the journal layout is for"):
        ops.save(jr.layout(8192, [1], 16))
    with pytest.raises(ValueError, match="already undone"):
        ops.undo(journals[0])
    journals[1].data = journals[1].data[:16]
    with pytest.raises(ValueError, match="journal data holds 16 bytes but its layout needs 64"):
        ops.restore(journals[1])


def test_a_segmented_step_checks_the_state_once_per_step(monkeypatch) -> None:
    """run_segmented makes its journal calls through one OnBuffer: with 64 region segments
    (three journal calls each) the state's byte view is checked once."""
    from replayverify.evaluate import segments as sg
    from replayverify.evaluate import workloads as wl

    cell = next(c for c in wl.paper_cells() if c.name == "prototype").at(512)
    step = wl.make_step(np, cell)
    calls = []
    real = jr._byte_view
    monkeypatch.setattr(jr, "_byte_view", lambda *a: calls.append(1) or real(*a))
    sg.run_segmented(step, ("region",) * cell.segments, copy=np.copyto)
    assert cell.segments == 64 and len(calls) == 1
