"""Random profile cards and a brute-force reference for the planner tests.

Every generator takes an explicit ``numpy.random.Generator``; nothing here touches a
global RNG.
"""

from __future__ import annotations

import itertools

import numpy as np

from replayverify.planner import OPTIONS, Card, parse_card

MiB = 2**20
GiB = 2**30


def small_card(rng: np.random.Generator, n: int, *, floats: bool, missing: float = 0.2) -> Card:
    """Tiny integer byte counts (many ties) and integer or float times; options drop out at
    random, but every segment keeps at least one."""
    segments = []
    for j in range(n):
        options = {}
        for kind in OPTIONS:
            if rng.random() < missing:
                continue
            r, q = int(rng.integers(0, 12)), int(rng.integers(0, 12))
            time = float(rng.random() * 10) if floats else int(rng.integers(0, 8))
            cost = {"retained": r, "temporary": q, "time": time}
            if kind != "eager":
                cost["state_retained"] = int(rng.integers(0, r + 1))
                cost["state_temporary"] = int(rng.integers(0, q + 1))
                cost["state_time"] = float(rng.random() * time) if floats else int(time // 2)
            options[kind] = cost
        if not options:
            options["region"] = {"retained": 1, "temporary": 1, "time": 1}
        segments.append({"name": f"s{j}", "options": options})
    doc = {
        "format": "replayverify.profile",
        "version": 1,
        "persistent_bytes": int(rng.integers(0, 6)),
        "segments": segments,
    }
    return parse_card(doc)


def enumerate_policies(
    card: Card, options=OPTIONS, *, agnostic: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every policy over ``options`` that the card admits, as (choices, time, peak, R).

    Times are summed left to right in segment order, like the planner's; ``choices`` are
    indices into ``OPTIONS``.
    """
    n = len(card.segments)
    cols_used = [OPTIONS.index(k) for k in OPTIONS if k in options]
    grid = np.array(list(itertools.product(cols_used, repeat=n)), dtype=np.int64).reshape(-1, n)
    r = np.zeros((n, 3), dtype=np.int64)
    q = np.zeros((n, 3), dtype=np.int64)
    c = np.zeros((n, 3))
    ok = np.zeros((n, 3), dtype=bool)
    for j, seg in enumerate(card.segments):
        for kind, cost in seg.options:
            if kind in options:
                k = OPTIONS.index(kind)
                use = cost.agnostic() if agnostic else cost
                r[j, k], q[j, k], c[j, k], ok[j, k] = use.retained, use.temporary, use.time, True
    cols = np.arange(n)
    admitted = ok[cols, grid].all(axis=1)
    grid = grid[admitted]
    time = np.zeros(len(grid))
    for j in range(n):
        time = time + c[j, grid[:, j]]
    retained = r[cols, grid].sum(axis=1)
    peak = card.persistent_bytes + retained + q[cols, grid].max(axis=1)
    return grid, time, peak, retained


def best_index(time: np.ndarray, peak: np.ndarray, retained: np.ndarray, mask: np.ndarray) -> int:
    """Index of the policy least in (time, peak, retained) among ``mask``."""
    idx = np.flatnonzero(mask)
    return int(idx[np.lexsort((retained[idx], peak[idx], time[idx]))[0]])
