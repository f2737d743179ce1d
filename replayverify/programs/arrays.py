"""Array-module helpers: the same code runs on NumPy and on CuPy (the array module ``xp``).

Following array-api-compat, shared code takes the array module as a parameter or finds it
from its arrays with :func:`array_namespace`, which never imports CuPy: a CuPy array can only
exist once CuPy is imported. NumPy stays the specification; on NumPy every helper is the
plain NumPy call, so the NumPy path is unchanged. Device arrays are never converted
implicitly: :func:`to_host` is the one explicit transfer back (``.get()``).
"""

from __future__ import annotations

import itertools
import sys
from types import ModuleType
from typing import Any

import numpy as np


def array_namespace(a: Any) -> ModuleType:
    """The array module of ``a``: NumPy, CuPy, or what ``a.__array_namespace__()`` names."""
    if type(a) is np.ndarray or isinstance(a, (np.ndarray, np.generic)):
        return np
    module = type(a).__module__
    if module == "cupy" or module.startswith("cupy."):
        return sys.modules["cupy"]
    get = getattr(a, "__array_namespace__", None)
    if get is None:
        raise TypeError(f"{type(a).__name__} is not an array of a known array module")
    return get()


def is_numpy(xp: ModuleType) -> bool:
    return xp is np


def is_cupy_module(xp: Any) -> bool:
    """Whether ``xp`` is the CuPy module, decided by name so that CuPy is never imported."""
    return getattr(xp, "__name__", None) == "cupy"


def is_cupy_array(x: Any) -> bool:
    """Whether ``x`` is a CuPy array; false without looking further when CuPy was never
    imported."""
    cp = sys.modules.get("cupy")
    return cp is not None and isinstance(x, cp.ndarray)


def namespace_of(*arrays: Any) -> ModuleType:
    """The array module of ``arrays``: CuPy if any is a CuPy array, else NumPy."""
    for a in arrays:
        if is_cupy_array(a):
            return sys.modules["cupy"]
    return np


def to_host(a: Any) -> np.ndarray:
    """``a`` as a NumPy array: itself on NumPy, a host copy (``a.get()``) of a device array,
    ``np.asarray`` of anything else (lists, scalars)."""
    if isinstance(a, np.ndarray):
        return a
    get = getattr(a, "get", None)
    return np.asarray(a) if get is None or isinstance(a, (dict, list, tuple)) else get()


def to_xp(xp: ModuleType, a: np.ndarray) -> Any:
    """A host array moved to ``xp`` (itself on NumPy)."""
    return a if xp is np else xp.asarray(a)


def scatter_add(xp: ModuleType, a: Any, index: Any, values: Any) -> None:
    """``a[index] += values`` with repeated indices accumulating, in place (``np.add.at``).

    CuPy's ``add.at`` is its scatter-add kernel (``cupyx.scatter_add``): atomic additions,
    so with repeated indices the order of the float additions, and so the last bit of
    the sums, may vary from run to run; NumPy adds in index order.
    """
    if xp is np:
        np.add.at(a, index, values)
        return
    at = getattr(xp.add, "at", None)
    if at is None:
        raise TypeError(f"{xp.__name__}.add has no .at (scatter-add); CuPy has it from v13")
    at(a, index, values)


def unique_ints(a: Any) -> Any:
    """The sorted distinct values of an integer array: ``np.unique(a)``, in ``a``'s dtype.

    When the values span at most a few times their count (byte and element indices of
    views almost always do), a bitmap over that span: linear time. NumPy 2's hashing
    ``np.unique`` takes tens of seconds on the 8M byte indices of a 1M-element float64
    view; a sort is the fallback for sparse values.
    """
    xp = array_namespace(a)
    if xp is not np:  # CuPy's unique sorts already
        return xp.unique(a)
    a = a.reshape(-1)
    if a.size == 0:
        return a.copy()
    lo, hi = int(a.min()), int(a.max())
    if hi - lo <= 8 * a.size + 4096:
        mask = xp.zeros(hi - lo + 1, dtype=bool)
        mask[a - lo] = True
        return (xp.flatnonzero(mask) + lo).astype(a.dtype, copy=False)
    s = xp.sort(a)
    keep = xp.empty(s.size, dtype=bool)
    keep[0] = True
    keep[1:] = s[1:] != s[:-1]
    return s[keep]


def ranks(keys: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values of ``keys`` (NumPy integers in [0, ``span``)) and each
    key's rank among them: ``np.unique(keys, return_inverse=True)``. When the span is at
    most a few times their count (as :func:`unique_ints` decides), a bitmap over the span
    numbers the set positions (linear time, reading the span only at the keys); else a
    sort."""
    if span <= 8 * keys.size + 4096:
        seen = np.zeros(span, dtype=bool)
        seen[keys] = True
        distinct = seen.nonzero()[0]
        at = np.empty(span, dtype=np.int64)  # read at the set positions only
        at[distinct] = np.arange(distinct.size)
        return distinct, at[keys]
    distinct = unique_ints(keys)
    return distinct, distinct.searchsorted(keys)


def as_slice(ids: np.ndarray) -> slice | np.ndarray:
    """``ids`` as the slice it equals when they are consecutive ascending integers (then
    indexing reads a view and assigns without a scatter), else ``ids`` itself."""
    return as_slices(ids, (0, ids.size))[0]


def as_slices(ids: np.ndarray, bounds) -> list[slice | np.ndarray]:
    """:func:`as_slice` of each part ``ids[bounds[i]:bounds[i + 1]]``, decided on the ids
    as one Python list (one array operation for all parts: the parts are small, and an
    array operation per test costs more than comparing their few items as lists)."""
    values = ids.tolist()
    out: list[slice | np.ndarray] = []
    for a, b in itertools.pairwise(bounds):
        if b > a:  # consecutive: the part's ids are first, first + 1, ...
            first = values[a]
            if values[a:b] == list(range(first, first + b - a)):
                out.append(slice(first, first + b - a))
                continue
        out.append(ids[a:b])
    return out


def diagonal_seeds(parts, n_cols: int) -> tuple[slice, ...] | None:
    """Where a seed writes ones into fresh (rows, ``n_cols``) zero arrays, C order,
    flattened: part i, ``(array, rows)`` (its array's key and its rows, a slice or
    positions), puts a one at (row j of the part, column ``first_i + j``) of its array, the
    parts' columns following each other from 0. When every part's rows are a slice and no
    two parts of one array share a row, those ones are all the seed writes (each part
    first zeroes its rows, which only an earlier part can have written): one strided slice
    per part. Else None: the seed is written part by part.
    """
    out, spans, first = [], [], 0
    for array, rows in parts:
        if not isinstance(rows, slice):
            return None
        n = rows.stop - rows.start
        start = rows.start * n_cols + first
        out.append(slice(start, start + (n - 1) * (n_cols + 1) + 1, n_cols + 1))
        spans.append((array, rows.start, rows.stop))
        first += n
    spans.sort()
    for (array, _, stop), (other, start, _) in itertools.pairwise(spans):
        if array == other and stop > start:
            return None
    return tuple(out)
