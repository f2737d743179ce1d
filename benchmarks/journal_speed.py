"""How fast the NumPy journal saves, undoes and redoes regions, against ``np.copyto`` of the
same number of bytes, measured alternately in the same run.

    python benchmarks/journal_speed.py            # every granularity and pattern
    python benchmarks/journal_speed.py --quick    # fewer sizes and repeats

A 64 MiB buffer; journals of ``J`` bytes (64 KiB and 1 MiB) in regions of 16 bytes to 64
KiB; three region patterns: ``contiguous`` (one run of consecutive regions, e.g. the queue's
ring rows), ``rows`` (runs of 1 KiB, scattered: the prototype memory's rows; only for
regions up to 1 KiB) and ``isolated`` (every region its own run, evenly strided over the
buffer: the worst case, one fancy-index element per region). Per case and operation the
median over rounds of (operation seconds) / (seconds of one ``np.copyto`` of ``J`` bytes),
each round timing both back to back. The operations are those a segmented step executes
(``replayverify.evaluate.segments``, through ``journal.OnBuffer``): ``save`` makes a new
journal of ``J`` bytes (allocating it, as a step does), ``undo`` exchanges ``J`` bytes of
buffer and journal (two passes; also given against one copy of the ``2 J`` bytes it writes,
as ``gpu calibrate`` counts a swap's bandwidth), ``restore`` writes the journal back (the
step's redo). The target is a ratio of at most 2. The load average is printed with the
table: the machine is shared.

``floor`` is a second baseline for the same operation: one ``np.copyto`` from a strided view
of exactly the journal's bytes (basic slicing, no index arrays: the least work NumPy can do to
read those addresses in that order), and ``save/floor`` the save's ratio to it. Scattered
small regions touch a different cache line (and, 16 KiB apart, a different page) per region,
so their floor is set by memory latency, not bandwidth: a ratio to one contiguous copy near 2
is out of reach for any gather there, and ``save/floor`` says how far the journal is from the
memory system's own cost for that pattern. The buffer is filled before timing, so reads see
real pages, not the shared zero page a fresh ``np.zeros`` maps.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from replayverify.gpu import journal as jr

KiB, MiB = 1 << 10, 1 << 20
BUFFER = 64 * MiB


def _regions(pattern: str, granularity: int, count: int) -> np.ndarray | None:
    n_regions = BUFFER // granularity
    if pattern == "contiguous":
        return np.arange(count, dtype=np.int64) + n_regions // 3
    if pattern == "isolated":
        return np.arange(count, dtype=np.int64) * (n_regions // count)
    per_row = KiB // granularity  # rows: 1 KiB runs, evenly strided
    if per_row < 1 or count % per_row:
        return None
    rows = count // per_row
    first = np.arange(rows, dtype=np.int64) * (n_regions // rows)
    return (first[:, None] + np.arange(per_row, dtype=np.int64)).reshape(-1)


def _floor_view(regions: np.ndarray, granularity: int, buf: np.ndarray) -> np.ndarray:
    """A strided view of ``buf`` holding exactly the bytes of ``regions`` in their order,
    read off the regions themselves: evenly spaced runs of consecutive regions, all of one
    length (what ``_regions`` makes; the caller checks the bytes against the journal)."""
    firsts = np.concatenate([[0], np.flatnonzero(np.diff(regions) != 1) + 1])
    run = regions.size // firsts.size * granularity  # bytes per run
    start = int(regions[0]) * granularity
    if firsts.size == 1:
        return buf[start:start + run]
    step = int(regions[firsts[1]] - regions[0]) * granularity
    return buf[start:start + firsts.size * step].reshape(firsts.size, step)[:, :run]


def _time(fn, reps: int) -> float:
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def measure(
    pattern: str, granularity: int, journal_bytes: int, rounds: int
) -> dict[str, float] | None:
    """Median ratio over ``rounds`` of each operation's time to one copyto of the bytes."""
    count = journal_bytes // granularity
    regions = _regions(pattern, granularity, count)
    if regions is None:
        return None
    buf = (np.arange(BUFFER, dtype=np.uint32) % 251).astype(np.uint8)  # real pages, distinct
    lay = jr.layout(BUFFER, regions, granularity)
    on = jr.OnBuffer(np, buf)
    journal = on.save(lay)
    view = _floor_view(regions, granularity, buf)
    floor_dst = np.empty(view.shape, dtype=np.uint8)
    np.copyto(floor_dst, view)
    assert np.array_equal(floor_dst.reshape(-1), journal.data), "floor view != journal bytes"
    src = np.ones(journal_bytes, dtype=np.uint8)
    dst = np.empty_like(src)
    reps = max(5, min(200, (64 * MiB) // journal_bytes))

    def undo() -> None:
        journal.holds = "old"  # exchange back and forth: the same bytes move every time
        on.undo(journal)

    ops = {
        "save": lambda: on.save(lay),
        "undo": undo,
        "restore": lambda: on.restore(journal),
    }
    src2 = np.ones(2 * journal_bytes, dtype=np.uint8)
    dst2 = np.empty_like(src2)
    ratios: dict[str, list[float]] = {op: [] for op in (*ops, "undo written", "floor",
                                                         "save/floor")}
    for _ in range(rounds):
        for op, fn in ops.items():
            fn()
            base = _time(lambda: np.copyto(dst, src), reps)
            t = _time(fn, reps)
            ratios[op].append(t / base)
            if op == "save":
                floor = _time(lambda: np.copyto(floor_dst, view), reps)
                ratios["floor"].append(floor / base)
                ratios["save/floor"].append(t / floor)
            if op == "undo":  # an exchange writes 2 J bytes (buffer and journal)
                ratios["undo written"].append(t / _time(lambda: np.copyto(dst2, src2), reps))
    out = {op: statistics.median(r) for op, r in ratios.items()}
    out["copy_us"] = 1e6 * _time(lambda: np.copyto(dst, src), reps)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    args = ap.parse_args()
    grans = (16, 256, 4 * KiB, 64 * KiB) if args.quick else (16, 64, 256, KiB, 4 * KiB, 64 * KiB)
    sizes = (64 * KiB,) if args.quick else (64 * KiB, MiB)
    rounds = 3 if args.quick else 7
    print(f"load average at start: {os.getloadavg()}")
    print(
        f"{'pattern':<11} {'region':>7} {'journal':>8} {'regions':>7} "
        f"{'copy us':>8} {'save':>6} {'undo':>6} {'of 2J':>6} {'restore':>7} {'floor':>6} "
        f"{'save/floor':>10}"
        "   (ratio to one np.copyto of J bytes; of 2J: of the 2 J bytes an exchange writes; "
        "floor: one strided copy of the same bytes)"
    )
    for pattern in ("contiguous", "rows", "isolated"):
        for g in grans:
            for size in sizes:
                if g > size:
                    continue
                r = measure(pattern, g, size, rounds)
                if r is None:
                    continue
                print(
                    f"{pattern:<11} {g:>7} {size // KiB:>6}Ki {size // g:>7} "
                    f"{r['copy_us']:>8.1f} {r['save']:>6.2f} {r['undo']:>6.2f} "
                    f"{r['undo written']:>6.2f} {r['restore']:>7.2f} {r['floor']:>6.2f} "
                    f"{r['save/floor']:>10.2f}"
                )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
