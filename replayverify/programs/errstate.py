"""One switch for numpy's arithmetic warnings in library code (docs/semantics.md).

Overflow to inf, invalid results (inf - inf, 0 * inf) and division by zero are legal
values of a program's floats, not faults of the verifier: entry points that compute on
program values run under :func:`quiet`, so no RuntimeWarning reaches a user's stderr.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import numpy as np

F = TypeVar("F", bound=Callable)


def quiet(fn: F) -> F:
    """Run ``fn`` with numpy's floating-point warnings ignored (a fresh errstate per call)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
