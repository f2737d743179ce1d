"""One switch for numpy's arithmetic warnings in library code (docs/semantics.md).

Overflow to inf, invalid results (inf - inf, 0 * inf) and division by zero are legal
values of a program's floats, not faults of the verifier: entry points that compute on
program values run under :func:`quiet`, so no RuntimeWarning reaches a user's stderr.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import TypeVar

import numpy as np

F = TypeVar("F", bound=Callable)


# True inside a ``quiet`` call (per thread and context, as numpy's errstate itself).
_QUIET = contextvars.ContextVar("replayverify_quiet", default=False)


def quiet(fn: F) -> F:
    """Run ``fn`` with numpy's floating-point warnings ignored.

    A call made inside another ``quiet`` call runs as it is: the warnings are ignored
    there already (a check nests about ten quiet calls, each errstate costing about
    1 us). Library code inside a quiet call never narrows the errstate before calling
    another quiet function.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _QUIET.get():
            return fn(*args, **kwargs)
        with np.errstate(all="ignore"):
            token = _QUIET.set(True)
            try:
                return fn(*args, **kwargs)
            finally:
                _QUIET.reset(token)

    return wrapper  # type: ignore[return-value]
