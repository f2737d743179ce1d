"""Loading, validating and saving programs (SPEC §2 and §6).

Validation happens here, before anything is evaluated or allocated: every rule of
SPEC §2 raises :class:`ProgramError` naming the field and the reason. The interpreter
may then assume a valid program. The canonical document and its hash
(``program_to_dict``, ``canonical_json``, ``program_sha256``) are written by
:mod:`replayverify.programs.model`, beside ``Program``, and re-exported here.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from replayverify.programs.model import (
    DEFAULT_MAX_BYTES,
    DTYPES,
    FLOAT_DTYPES,
    FORMAT,
    INT_DTYPES,
    OP_SPECS,
    VERSION,
    Buffer,
    DtypeRule,
    Init,
    Loss,
    Op,
    OpKind,
    Program,
    ProgramError,
    Rng,
    ShapeRule,
    View,
    canonical_json,
    extent,
    program_sha256,
    program_to_dict,
    program_to_json,
)
from replayverify.untrusted import (
    MAX_DOCUMENT_BYTES,
    MAX_SHOWN,
    has_surrogate,
    load_json,
    one_line,
    read_document,
    shown,
)

TOP_KEYS = {
    "format", "version", "name", "buffers", "views", "init", "rng", "ops", "segments",
    "inputs", "loss",
}
REQUIRED_TOP = ("format", "version", "buffers", "views", "ops", "loss")
U32 = (0, 2**32 - 1)
INT_RANGES = {d: (int(np.iinfo(d).min), int(np.iinfo(d).max)) for d in INT_DTYPES}
FLOAT32_MAX = float(np.finfo(np.float32).max)  # a Python float: comparing never casts


# ---------------------------------------------------------------- parsing helpers


def parse_json(text: str | bytes, *, max_document: int = MAX_DOCUMENT_BYTES) -> Any:
    """Decode untrusted JSON text through the one door (:func:`untrusted.load_json`)."""
    return load_json(text, error=ProgramError, max_bytes=max_document)


def _key(key: Any) -> str:
    return one_line(key, MAX_SHOWN) if isinstance(key, str) else shown(key)


def _obj(value: Any, field: str, allowed: set[str], required: tuple[str, ...] = ()) -> dict:
    if not isinstance(value, dict):
        raise ProgramError(field, f"must be an object, got {type(value).__name__}")
    unknown = sorted(_key(k) for k in value if k not in allowed)
    if unknown:
        raise ProgramError(f"{field}.{unknown[0]}", "unknown key")
    for key in required:
        if key not in value:
            raise ProgramError(f"{field}.{key}", "required key is missing")
    return value


def _list(value: Any, field: str) -> list:
    if not isinstance(value, list):
        raise ProgramError(field, f"must be a list, got {type(value).__name__}")
    return value


def _int(value: Any, field: str, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            value = int(value)
        else:
            raise ProgramError(field, f"must be an integer, got {shown(value)}")
    if lo is not None and value < lo:
        raise ProgramError(field, f"must be >= {lo}, got {shown(value)}")
    if hi is not None and value > hi:
        raise ProgramError(field, f"must be <= {hi}, got {shown(value)}")
    return value


def _float(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProgramError(field, f"must be a number, got {shown(value)}")
    try:
        out = float(value)
    except OverflowError:  # an integer beyond float64's range
        raise ProgramError(field, f"must be finite, got {shown(value)} (beyond float64)"
                           ) from None
    if not math.isfinite(out):
        raise ProgramError(field, f"must be finite, got {shown(value)}")
    return out


def _str(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise ProgramError(field, f"must be a string, got {shown(value)}")
    if has_surrogate(value):
        raise ProgramError(field, f"{shown(value)} holds a lone surrogate (not Unicode)")
    return value


def _name(value: Any, field: str) -> str:
    name = _str(value, field)
    if not name:
        raise ProgramError(field, "must be a non-empty name")
    return name


# ---------------------------------------------------------------- from dict


def program_from_dict(doc: Any, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Program:
    """Validate a decoded JSON document and build the :class:`Program`."""
    doc = _obj(doc, "program", TOP_KEYS, REQUIRED_TOP)
    if not isinstance(doc["format"], str) or doc["format"] != FORMAT:
        raise ProgramError("format", f"must be {FORMAT!r}, got {shown(doc['format'])}")
    if type(doc["version"]) is not int or doc["version"] != VERSION:
        raise ProgramError("version", f"must be {VERSION}, got {shown(doc['version'])}")
    name = _str(doc.get("name", ""), "name")

    buffers = _buffers(doc["buffers"], max_bytes)
    views = _views(doc["views"], {b.name: b for b in buffers})
    by_view = {v.name: v for v in views}
    init = _init(doc.get("init", []), by_view)
    rng = _rng(doc.get("rng", {}))
    ops = tuple(_op(o, f"ops[{i}]", by_view) for i, o in enumerate(_list(doc["ops"], "ops")))
    segments = _segments(doc.get("segments", _DEFAULT), len(ops))
    inputs = _inputs(doc.get("inputs", []), by_view)
    loss = _loss(doc["loss"], by_view)
    return Program(
        buffers=buffers, views=views, ops=ops, loss=loss, name=name, init=init, rng=rng,
        segments=segments, inputs=inputs,
    )


def _buffers(value: Any, max_bytes: int) -> tuple[Buffer, ...]:
    out: list[Buffer] = []
    seen: set[str] = set()
    total = 0
    for i, b in enumerate(_list(value, "buffers")):
        field = f"buffers[{i}]"
        b = _obj(b, field, {"name", "nbytes"}, ("name", "nbytes"))
        name = _name(b["name"], f"{field}.name")
        if name in seen:
            raise ProgramError(f"{field}.name", f"duplicate buffer name {shown(name)}")
        seen.add(name)
        nbytes = _int(b["nbytes"], f"{field}.nbytes", lo=1)
        total += nbytes
        if total > max_bytes:  # refused as soon as it is known, before anything is allocated
            raise ProgramError(
                "buffers", f"total {shown(total)} bytes exceeds the limit of {max_bytes} bytes "
                "(raise it with --max-bytes)"
            )
        out.append(Buffer(name, nbytes))
    if not out:
        raise ProgramError("buffers", "a program needs at least one buffer")
    return tuple(out)


def _views(value: Any, buffers: dict[str, Buffer]) -> tuple[View, ...]:
    out: list[View] = []
    seen: set[str] = set()
    keys = {"name", "buffer", "dtype", "offset", "shape", "strides"}
    for i, v in enumerate(_list(value, "views")):
        field = f"views[{i}]"
        v = _obj(v, field, keys, tuple(sorted(keys)))
        name = _name(v["name"], f"{field}.name")
        if name in seen:
            raise ProgramError(f"{field}.name", f"duplicate view name {shown(name)}")
        seen.add(name)
        buf = _str(v["buffer"], f"{field}.buffer")
        if buf not in buffers:
            raise ProgramError(f"{field}.buffer", f"unknown buffer {shown(buf)}")
        dtype = _str(v["dtype"], f"{field}.dtype")
        if dtype not in DTYPES:
            raise ProgramError(f"{field}.dtype",
                               f"must be one of {sorted(DTYPES)}, got {shown(dtype)}")
        item = DTYPES[dtype].itemsize
        offset = _int(v["offset"], f"{field}.offset", lo=0)
        if offset % item:
            raise ProgramError(f"{field}.offset",
                               f"{shown(offset)} is not a multiple of itemsize {item}")
        raw_shape = _list(v["shape"], f"{field}.shape")
        raw_strides = _list(v["strides"], f"{field}.strides")
        if len(raw_shape) not in (1, 2):
            raise ProgramError(f"{field}.shape", f"must be 1-D or 2-D, got {len(raw_shape)} dims")
        if len(raw_strides) != len(raw_shape):
            raise ProgramError(f"{field}.strides", "must have one stride per dimension")
        shape = tuple(_int(n, f"{field}.shape[{j}]", lo=1) for j, n in enumerate(raw_shape))
        strides = tuple(_int(s, f"{field}.strides[{j}]") for j, s in enumerate(raw_strides))
        for j, s in enumerate(strides):
            if s <= 0:
                raise ProgramError(f"{field}.strides[{j}]", f"must be positive, got {shown(s)}")
            if s % item:
                raise ProgramError(
                    f"{field}.strides[{j}]", f"{shown(s)} is not a multiple of itemsize {item}"
                )
        end = offset + extent(shape, strides, item)
        if end > buffers[buf].nbytes:
            raise ProgramError(field, f"elements reach byte {shown(end)} of buffer {shown(buf)} "
                               f"({buffers[buf].nbytes} bytes)")
        if self_overlaps(shape, strides, item):
            raise ProgramError(f"{field}.strides", "elements of the view overlap each other")
        out.append(View(name, buf, dtype, offset, shape, strides))
    return tuple(out)


def self_overlaps(shape: tuple[int, ...], strides: tuple[int, ...], item: int) -> bool:
    """Whether two elements of a view share a byte, decided without enumerating them.

    Strides are positive multiples of the itemsize, so two element starts differ by a
    multiple of it and overlap iff they coincide: di*s0 + dj*s1 = 0 with |di| < n0,
    |dj| < n1, not both 0. With s0 = g*a, s1 = g*b (g = gcd) the smallest solution is
    (di, dj) = (b, -a): the view overlaps itself iff b < n0 and a < n1. 1-D views never do.
    """
    if len(shape) < 2:
        return False
    (n0, n1), (s0, s1) = shape, (strides[0] // item, strides[1] // item)
    g = math.gcd(s0, s1)
    return s1 // g < n0 and s0 // g < n1


def _view_ref(value: Any, field: str, views: dict[str, View]) -> View:
    name = _str(value, field)
    if name not in views:
        raise ProgramError(field, f"unknown view {shown(name)}")
    return views[name]


def _init(value: Any, views: dict[str, View]) -> tuple[Init, ...]:
    out = []
    for i, e in enumerate(_list(value, "init")):
        field = f"init[{i}]"
        e = _obj(e, field, {"view", "values"}, ("view", "values"))
        view = _view_ref(e["view"], f"{field}.view", views)
        vals = _list(e["values"], f"{field}.values")
        if len(vals) != view.size:
            raise ProgramError(f"{field}.values", f"has {len(vals)} values, view "
                               f"{shown(view.name)} has {view.size}")
        out.append(Init(view.name, _values(vals, view.dtype, f"{field}.values")))
    return tuple(out)


def _floats(vals: list, field: str) -> tuple[float, ...]:
    """Every entry a finite float (ints accepted). Lists of floats only, all finite, take a
    vectorised path; anything else is checked one by one, naming the first bad entry."""
    if set(map(type, vals)) <= {float}:
        arr = np.array(vals, dtype=np.float64)
        if np.isfinite(arr).all():
            return tuple(vals)
    return tuple(_float(x, f"{field}[{j}]") for j, x in enumerate(vals))


def _values(vals: list, dtype: str, field: str) -> tuple:
    if dtype in INT_DTYPES:
        lo, hi = INT_RANGES[dtype]
        if vals and set(map(type, vals)) <= {int} and lo <= min(vals) and max(vals) <= hi:
            return tuple(vals)
        return tuple(_int(x, f"{field}[{j}]", lo, hi) for j, x in enumerate(vals))
    out = _floats(vals, field)
    if dtype == "float32":
        big = np.flatnonzero(np.abs(np.array(out, dtype=np.float64)) > FLOAT32_MAX)
        if big.size:
            raise ProgramError(f"{field}[{int(big[0])}]", "does not fit float32")
    return out


def _rng(value: Any) -> Rng:
    r = _obj(value, "rng", {"key", "counter"})
    key = tuple(_int(w, f"rng.key[{j}]", *U32) for j, w in enumerate(_list(r.get("key", [0, 0]),
                                                                            "rng.key")))
    counter = tuple(_int(w, f"rng.counter[{j}]", *U32)
                    for j, w in enumerate(_list(r.get("counter", [0, 0, 0, 0]), "rng.counter")))
    if len(key) != 2:
        raise ProgramError("rng.key", f"must have 2 u32 words, got {len(key)}")
    if len(counter) != 4:
        raise ProgramError("rng.counter", f"must have 4 u32 words, got {len(counter)}")
    return Rng(key, counter)  # type: ignore[arg-type]


def _op(value: Any, field: str, views: dict[str, View]) -> Op:
    if not isinstance(value, dict):
        raise ProgramError(field, f"must be an object, got {type(value).__name__}")
    kind_name = value.get("op")
    try:
        if not isinstance(kind_name, str):
            raise ValueError
        kind = OpKind(kind_name)
    except ValueError:
        raise ProgramError(f"{field}.op", f"unknown op {shown(kind_name)}") from None
    spec = OP_SPECS[kind]
    names = spec.view_fields
    _obj(value, field, {"op", *names, *(c.name for c in spec.coefs)}, ("op", *names))
    vs = {f: _view_ref(value[f], f"{field}.{f}", views) for f in names}
    dst = vs["dst"]
    for src in spec.sources:
        if vs[src].dtype != dst.dtype:
            raise ProgramError(
                f"{field}.{src}", f"dtype {vs[src].dtype} differs from dst dtype {dst.dtype}"
            )
    if spec.dtypes is DtypeRule.FLOAT and not dst.is_float:
        raise ProgramError(f"{field}.dst", f"{kind.value} needs float views, got {dst.dtype}")
    if spec.dtypes is DtypeRule.INT and dst.is_float:
        raise ProgramError(f"{field}.dst", f"{kind.value} needs integer views, got {dst.dtype}")
    if spec.shape is ShapeRule.GATHER:
        _shape_check(vs["index"], dst.shape, f"{field}.index")
        if len(vs["x"].shape) != 1:
            raise ProgramError(f"{field}.x", f"{kind.value} needs a 1-D source")
    elif spec.shape is ShapeRule.SCATTER:
        _shape_check(vs["index"], vs["x"].shape, f"{field}.index")
        if len(dst.shape) != 1:
            raise ProgramError(f"{field}.dst", f"{kind.value} needs a 1-D destination")
    else:
        for src in spec.sources:
            _shape_check(vs[src], dst.shape, f"{field}.{src}")
    if spec.indexed and vs["index"].is_float:
        raise ProgramError(f"{field}.index", f"must be an integer view, got {vs['index'].dtype}")
    coefs: dict[str, float | int] = {}
    for c in spec.coefs:
        cf = f"{field}.{c.name}"
        if c.name not in value:
            if c.default is None:
                raise ProgramError(cf, "required key is missing")
            coefs[c.name] = c.default
        elif c.kind == "int":
            coefs[c.name] = _int(value[c.name], cf, *INT_RANGES[dst.dtype])
        else:
            coefs[c.name] = _float(value[c.name], cf)
            if dst.dtype == "float32" and abs(coefs[c.name]) > FLOAT32_MAX:
                raise ProgramError(cf, "does not fit float32")
        if c.interval is not None:
            lo, hi = c.interval
            x = float(np.asarray(coefs[c.name], dtype=DTYPES[dst.dtype]))
            if not lo < x <= hi:
                raise ProgramError(cf, f"must be in ({lo:g}, {hi:g}], got {coefs[c.name]!r} "
                                   f"(as {dst.dtype}: {x!r})")
    return Op(kind=kind, **{f: vs[f].name for f in names}, **coefs)


def _shape_check(view: View, shape: tuple[int, ...], field: str) -> None:
    if view.shape != shape:
        raise ProgramError(field, f"shape {list(view.shape)} must be {list(shape)}")


_DEFAULT = object()  # an optional key that is absent (null is refused, like every other key)


def _segments(value: Any, n_ops: int) -> tuple[int, ...]:
    if value is _DEFAULT:
        return (n_ops,)
    segs = tuple(_int(n, f"segments[{j}]", lo=0) for j, n in
                 enumerate(_list(value, "segments")))
    if not segs:
        raise ProgramError("segments", "must list at least one segment")
    if sum(segs) != n_ops:
        raise ProgramError("segments", f"sum to {shown(sum(segs))}, the program has {n_ops} ops")
    return segs


def _inputs(value: Any, views: dict[str, View]) -> tuple[str, ...]:
    names: list[str] = []
    for i, n in enumerate(_list(value, "inputs")):
        field = f"inputs[{i}]"
        view = _view_ref(n, field, views)
        if not view.is_float:
            raise ProgramError(field, f"input view {shown(view.name)} must be float, "
                               f"got {view.dtype}")
        if view.name in names:
            raise ProgramError(field, f"duplicate input {shown(view.name)}")
        for other in (views[m] for m in names):
            if other.buffer == view.buffer and views_overlap(view, other):
                raise ProgramError(field, f"input {shown(view.name)} overlaps input "
                                   f"{shown(other.name)}")
        names.append(view.name)
    return tuple(names)


def views_overlap(a: View, b: View) -> bool:
    """Whether two views (each free of self-overlap) share a byte: a sweep over element
    intervals, 16 bytes per element, never one index per byte."""
    lo = max(a.offset, b.offset)
    hi = min(a.end, b.end)
    if lo >= hi:
        return False
    starts = np.concatenate([a.element_starts(), b.element_starts()])
    ends = np.concatenate([np.full(a.size, a.itemsize, np.int64),
                           np.full(b.size, b.itemsize, np.int64)])
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], starts[order] + ends[order]
    return bool(np.any(starts[1:] < np.maximum.accumulate(ends)[:-1]))


def _loss(value: Any, views: dict[str, View]) -> Loss:
    loss = _obj(value, "loss", {"view", "weights"}, ("view", "weights"))
    view = _view_ref(loss["view"], "loss.view", views)
    weights = _list(loss["weights"], "loss.weights")
    if len(weights) != view.size:
        raise ProgramError(
            "loss.weights", f"has {len(weights)} weights, view {shown(view.name)} has {view.size}"
        )
    return Loss(view.name, _floats(weights, "loss.weights"))


# ---------------------------------------------------------------- loading and saving


def load_program(
    source: str | os.PathLike | bytes | dict | Program, *, max_bytes: int = DEFAULT_MAX_BYTES,
    max_document: int | None = None,
) -> Program:
    """Load a program from a path, JSON text (str or bytes) or a decoded dict (SPEC §2).

    Anything else, and anything SPEC §2 or the limits of docs/semantics.md ("Bad input")
    refuse, raises :class:`ProgramError` with a one-line message. JSON documents are
    limited to ``max_document`` bytes (default: the larger of 64 MiB and a quarter of
    ``max_bytes``).
    """
    if max_document is None:
        max_document = max(MAX_DOCUMENT_BYTES, max_bytes // 4)
    if isinstance(source, Program):
        return program_from_dict(program_to_dict(source), max_bytes=max_bytes)
    if isinstance(source, dict):
        return program_from_dict(source, max_bytes=max_bytes)
    if isinstance(source, (bytes, bytearray)):
        doc = parse_json(bytes(source), max_document=max_document)
    elif isinstance(source, str) and source.lstrip().lstrip("\ufeff").startswith("{"):
        doc = parse_json(source, max_document=max_document)
    elif isinstance(source, (str, os.PathLike)):
        doc = read_document(source, error=ProgramError, max_bytes=max_document)
    else:
        raise ProgramError("program", "must be a path, JSON text or a dict, got "
                           f"{shown(source)}")
    return program_from_dict(doc, max_bytes=max_bytes)


def save_program(program: Program, path: str | os.PathLike) -> None:
    """Write the program as readable canonical JSON, atomically."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(program_to_json(program) + "\n", encoding="utf-8")
    os.replace(tmp, path)


__all__ = [
    "FLOAT_DTYPES",
    "ProgramError",
    "canonical_json",
    "load_program",
    "parse_json",
    "program_from_dict",
    "program_sha256",
    "program_to_dict",
    "program_to_json",
    "save_program",
]
