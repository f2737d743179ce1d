"""A CPU stand-in for CuPy: an array module whose arrays behave like device arrays in the way
that matters for the engines, so that their ``xp`` path is tested without a GPU.

A :class:`DeviceArray` wraps a NumPy array and, like a CuPy array:

- refuses implicit conversion to NumPy (``__array__`` raises TypeError, so ``np.asarray``,
  ``np.concatenate`` or ``bytes(...)`` on it fail) and refuses NumPy ufuncs
  (``__array_ufunc__ = None``: ``np.tanh(a)`` raises TypeError);
- refuses NumPy arrays as operands of arithmetic;
- comes back to the host only through ``.get()`` (counted in :data:`TRANSFERS`).

It is stricter than CuPy in three ways, so that every transfer in the engine path is
explicit: NumPy arrays are also refused as indices and as assigned values (CuPy would copy
them to the device silently), and it has no ``tobytes``, ``__int__``, ``__float__`` or
``__bool__`` (CuPy's synchronise and copy). Arithmetic runs with NumPy on the wrapped
arrays, so results are bit-identical to NumPy's: this tests the plumbing, not CuPy's
numerics (``tanh``, ``cos``, atomic ``add.at``), which only a GPU run can test.

The module itself is the array module (``xp``): only the handful of functions the engines
call exist here; a missing one fails loudly with AttributeError.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

uint8, int32, int64, float32, float64 = np.uint8, np.int32, np.int64, np.float32, np.float64
TRANSFERS = {"to_device": 0, "to_host": 0}


def _module():
    return sys.modules[__name__]


def _unwrap(x: Any, what: str = "operand") -> Any:
    if isinstance(x, DeviceArray):
        return x._a
    if isinstance(x, np.ndarray):
        raise TypeError(f"a NumPy array as a device {what}: transfer it with xp.asarray first")
    if isinstance(x, (bool, int, float, np.generic)):
        return x
    raise TypeError(f"unsupported device {what} of type {type(x).__name__}")


def _index(key: Any) -> Any:
    if isinstance(key, tuple):
        return tuple(_index(k) for k in key)
    if key is None or key is Ellipsis or isinstance(key, (int, slice)):
        return key
    return _unwrap(key, "index")


def _wrap(a: Any) -> Any:
    return DeviceArray(a) if isinstance(a, np.ndarray) else a


def _binary(name: str, reflected: bool = False):
    op = getattr(np, name)

    def method(self, other):
        a, b = self._a, _unwrap(other)
        return _wrap(op(b, a) if reflected else op(a, b))

    return method


class DeviceArray:
    """A NumPy array in a box that refuses to be treated as one (see the module doc)."""

    __array_ufunc__ = None  # NumPy ufuncs refuse it; binary ops defer to the methods below
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, a: np.ndarray) -> None:
        self._a = a

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def __array_namespace__(self, api_version: str | None = None):
        return _module()

    def __repr__(self) -> str:
        return f"DeviceArray({self._a!r})"

    def get(self) -> np.ndarray:
        """The explicit transfer to the host."""
        TRANSFERS["to_host"] += 1
        return self._a.copy()

    flags = property(lambda self: self._a.flags)
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    ndim = property(lambda self: self._a.ndim)

    def __len__(self) -> int:
        return len(self._a)

    def view(self, dtype: Any) -> DeviceArray:
        return DeviceArray(self._a.view(dtype))

    def reshape(self, *shape: Any) -> DeviceArray:
        return DeviceArray(self._a.reshape(*shape))

    def astype(self, dtype: Any, copy: bool = True) -> DeviceArray:
        return DeviceArray(self._a.astype(dtype, copy=copy))

    def copy(self) -> DeviceArray:
        return DeviceArray(self._a.copy())

    def __getitem__(self, key: Any) -> Any:
        return _wrap(self._a[_index(key)])

    def __setitem__(self, key: Any, value: Any) -> None:
        self._a[_index(key)] = _unwrap(value, "value")

    def __neg__(self) -> DeviceArray:
        return DeviceArray(-self._a)

    __add__, __radd__ = _binary("add"), _binary("add", True)
    __sub__, __rsub__ = _binary("subtract"), _binary("subtract", True)
    __mul__, __rmul__ = _binary("multiply"), _binary("multiply", True)
    __truediv__, __rtruediv__ = _binary("true_divide"), _binary("true_divide", True)
    __floordiv__, __rfloordiv__ = _binary("floor_divide"), _binary("floor_divide", True)
    __mod__, __rmod__ = _binary("mod"), _binary("mod", True)
    __pow__, __rpow__ = _binary("power"), _binary("power", True)
    __xor__, __rxor__ = _binary("bitwise_xor"), _binary("bitwise_xor", True)
    __lt__, __le__ = _binary("less"), _binary("less_equal")
    __gt__, __ge__ = _binary("greater"), _binary("greater_equal")
    __eq__, __ne__ = _binary("equal"), _binary("not_equal")  # type: ignore[assignment]

    # in place, like CuPy (without these Python would rebind ``v *= 2`` to a new array and
    # leave a view's base untouched)
    def __iadd__(self, other: Any) -> DeviceArray:
        np.add(self._a, _unwrap(other), out=self._a)
        return self

    def __isub__(self, other: Any) -> DeviceArray:
        np.subtract(self._a, _unwrap(other), out=self._a)
        return self

    def __imul__(self, other: Any) -> DeviceArray:
        np.multiply(self._a, _unwrap(other), out=self._a)
        return self


# ---------------------------------------------------------------- the array module


def asarray(a: Any, dtype: Any = None) -> DeviceArray:
    """A device array: ``a`` itself if it is one, else a copy of host data (counted)."""
    if isinstance(a, DeviceArray):
        return a if dtype is None else a.astype(dtype, copy=False)
    TRANSFERS["to_device"] += 1
    return DeviceArray(np.array(a, dtype=dtype))


def _function(name: str):
    fn = getattr(np, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        args = tuple([_unwrap(x) for x in a] if isinstance(a, (list, tuple)) else _unwrap(a)
                     for a in args)
        out = fn(*args, **{k: _unwrap(v) if isinstance(v, DeviceArray) else v
                           for k, v in kwargs.items()})
        return tuple(_wrap(o) for o in out) if isinstance(out, tuple) else _wrap(out)

    call.__name__ = name
    return call


def _creation(name: str):
    fn = getattr(np, name)

    def call(*args: Any, **kwargs: Any) -> DeviceArray:
        return DeviceArray(fn(*args, **kwargs))

    call.__name__ = name
    return call


zeros, ones, arange = _creation("zeros"), _creation("ones"), _creation("arange")
empty = _creation("empty")


def empty_like(a: DeviceArray) -> DeviceArray:
    return DeviceArray(np.empty_like(_unwrap(a)))


concatenate, unique, sort = _function("concatenate"), _function("unique"), _function("sort")
searchsorted, isin, mod = _function("searchsorted"), _function("isin"), _function("mod")
tanh, sin, cos = _function("tanh"), _function("sin"), _function("cos")
sum, subtract = _function("sum"), _function("subtract")  # CuPy's names


class _Add:
    """``add`` with the one ufunc method the engines use: ``add.at`` (scatter-add)."""

    __call__ = staticmethod(_function("add"))

    @staticmethod
    def at(a: DeviceArray, index: Any, values: Any) -> None:
        np.add.at(_unwrap(a), _unwrap(index, "index"), _unwrap(values))


add = _Add()
