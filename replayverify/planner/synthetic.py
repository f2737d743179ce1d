"""Synthetic profile cards to the published large-activation, sparse-write shape.

Used by the planner's tests and benchmark, and a starting point for users who want
cards of that shape without a profile of their own. Deterministic in the generator.
"""

from __future__ import annotations

import numpy as np

from replayverify.planner.card import Card, parse_card

GiB = 2**30


def shaped_card(rng: np.random.Generator, n: int, *, units: int = GiB) -> Card:
    """The large-activation, sparse-write shape with random per-segment spread: eager
    retains activations; whole retains the segment input plus a 1-unit snapshot; region
    the input plus a small journal; replay needs the activations as temporaries."""
    segments = []
    for j in range(n):
        a = int(2.65 * units * rng.uniform(0.6, 1.4))
        x = int(1.25 * units * rng.uniform(0.6, 1.4))
        journal = max(1, int(0.009 * units * rng.uniform(0.5, 2.0)))
        snap = units
        b, f = 180 * rng.uniform(0.7, 1.3), 56 * rng.uniform(0.7, 1.3)
        jt, st = 8 * rng.uniform(0.5, 2), 10 * rng.uniform(0.5, 2)
        segments.append(
            {
                "name": f"s{j}",
                "options": {
                    "eager": {"retained": a, "temporary": 0, "time": b},
                    "whole": {
                        "retained": x + snap,
                        "temporary": a + snap,
                        "time": b + f + st,
                        "state_retained": snap,
                        "state_temporary": snap,
                        "state_time": st,
                    },
                    "region": {
                        "retained": x + journal,
                        "temporary": a + journal,
                        "time": b + f + jt,
                        "state_retained": journal,
                        "state_temporary": journal,
                        "state_time": jt,
                    },
                },
            }
        )
    doc = {
        "format": "replayverify.profile",
        "version": 1,
        "persistent_bytes": int(6.5 * units),
        "segments": segments,
    }
    return parse_card(doc)
