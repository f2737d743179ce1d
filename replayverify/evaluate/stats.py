"""Paired comparisons across fresh processes: geometric mean of per-process ratios and a
paired process-bootstrap interval."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DRAWS = 20_000
LEVEL = 0.95
SEED = 20240611


@dataclass(frozen=True, slots=True)
class Ratio:
    """Geometric mean of per-process ratios A_p / B_p and its bootstrap interval."""

    estimate: float
    low: float
    high: float
    processes: int


def geometric_mean(values: np.ndarray) -> float:
    """exp(mean(log x)) of positive values."""
    return float(np.exp(np.mean(np.log(values))))


def paired_ratio(
    a: np.ndarray, b: np.ndarray, *, draws: int = DRAWS, level: float = LEVEL, seed: int = SEED
) -> Ratio:
    """Compare method A with method B measured in the same processes (``a[p]``, ``b[p]``).

    The estimate is the geometric mean of the per-process ratios ``a[p] / b[p]``. The
    interval resamples whole processes with replacement (``draws`` times, a seeded generator,
    so reruns agree), takes the geometric mean of each resample's ratios, and reports the
    central ``level`` percentile interval of those means. Pairing within a process removes
    what the two methods share in that process (its allocator, caches, the machine's load at
    the time) from the comparison.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError("paired_ratio needs two equal-length, non-empty 1-D samples")
    if (a <= 0).any() or (b <= 0).any():
        raise ValueError("paired_ratio needs positive measurements")
    logs = np.log(a / b)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, logs.size, size=(draws, logs.size))
    means = np.exp(logs[picks].mean(axis=1))
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Ratio(geometric_mean(a / b), float(low), float(high), int(logs.size))
