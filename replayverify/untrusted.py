"""The one door for untrusted JSON, and the strict JSON every command prints.

Program files and planner cards come from users; both enter through :func:`load_json`:
a size limit before parsing, then the parse with an integer-digit limit (and NaN /
Infinity refused), then a depth limit and a check that every string is valid Unicode
(no lone surrogates). Every limit is a constant here and listed in docs/semantics.md
("Bad input"). A refusal is one :class:`InputError` whose message is one line: control
characters are escaped and echoed values are cut to a short prefix (:func:`shown`).

Output that claims to be JSON is strict RFC 8259 JSON: :func:`dumps` encodes the
non-finite floats as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (the
encoding of the protobuf JSON mapping), the same for every command.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

MAX_DOCUMENT_BYTES = 64 * 2**20
"""Default size limit of one JSON document, checked before parsing (64 MiB)."""
MAX_DEPTH = 32
"""Deepest nesting of arrays and objects accepted (a program needs 4, a card 4)."""
MAX_INT_DIGITS = 100
"""Most digits an integer literal may have (the largest field, a u64 count, needs 20)."""
MAX_MESSAGE = 240
"""Longest refusal message (field and reason); the CLI line adds a short prefix."""
MAX_SHOWN = 40
"""Echoed values (names, unknown keys, wrong values) are cut to this many characters."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_BOM = "\ufeff"


class InputError(ValueError):
    """Untrusted input refused: ``field`` names where, ``reason`` says why (one line each)."""

    def __init__(self, field: str, reason: str):
        field = one_line(field, 100)
        reason = one_line(reason, MAX_MESSAGE - len(field) - 2)
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _escape(match: re.Match) -> str:
    ch = match.group()
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch, f"\\u{ord(ch):04x}")


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` with control characters and surrogates escaped, cut to ``limit`` characters."""
    limit = max(limit, 8)
    if len(text) > 4 * limit:  # escaping can only lengthen: cut first, bounded work
        text = text[: 4 * limit]
    out = _CONTROL.sub(_escape, text)
    return out if len(out) <= limit else out[: limit - 3] + "..."


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """A short, safe, one-line rendering of an untrusted value for a message.

    Never recurses into containers and never converts a huge integer to decimal (Python
    refuses more than 4300 digits), so it cannot raise on anything JSON or a dict holds.
    """
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 128:
            return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
        return one_line(repr(value), limit)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return one_line(repr(value[: limit * 2]), limit)
    if isinstance(value, (list, tuple, dict, set, bytes, bytearray)):
        return f"{type(value).__name__} of length {len(value)}"
    return f"a {one_line(type(value).__name__, limit)}"


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (not valid Unicode; cannot be encoded)."""
    return _SURROGATE.search(text) is not None


def _reject_constant(name: str) -> Any:
    raise InputError("json", f"{name} is not a JSON number")


def _parse_int(text: str) -> int:
    digits = len(text) - (text[0] == "-")
    if digits > MAX_INT_DIGITS:
        raise InputError("json", f"an integer literal has {digits} digits, more than the "
                         f"limit of {MAX_INT_DIGITS}")
    return int(text)


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InputError("json", f"duplicate key {shown(key)} in one object")
            seen.add(key)
    return out


def _walk(doc: Any) -> Iterator[tuple[Any, int]]:
    """Every container and string of ``doc`` with its depth (iteratively: no recursion)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        yield value, depth
        if isinstance(value, dict):
            for k, v in value.items():
                yield k, depth
                if isinstance(v, (dict, list, str)):
                    stack.append((v, depth + 1))
        elif isinstance(value, list) and not set(map(type, value)) <= {int, float}:
            stack.extend((v, depth + 1) for v in value if isinstance(v, (dict, list, str)))


def load_json(data: str | bytes, *, error: type[InputError] = InputError,
              max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """Decode one untrusted JSON document, or raise ``error`` (field ``json``) in one line.

    Limits: ``max_bytes`` (checked before decoding), :data:`MAX_DEPTH`,
    :data:`MAX_INT_DIGITS`; NaN / Infinity and duplicate keys are refused, one leading
    UTF-8 byte order mark is ignored (RFC 8259 §8.1 allows that), lone surrogates
    (``"\\ud800"``) are refused.
    """
    size = len(data)  # str: characters, at most its UTF-8 bytes
    if size > max_bytes:
        raise error("json", f"document of {size} bytes exceeds the limit of {max_bytes} bytes")
    if isinstance(data, (bytes, bytearray)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error("json", f"not UTF-8 text (byte {exc.start})") from None
    elif isinstance(data, str):
        text = data
    else:
        raise error("json", f"must be JSON text, got {shown(data)}")
    if text.startswith(_BOM):
        text = text[1:]
    surrogates = has_surrogate(text) or ("\\u" in text and re.search(r"\\u[dD][89a-fA-F]", text))
    try:
        doc = json.loads(text, parse_constant=_reject_constant, parse_int=_parse_int,
                         object_pairs_hook=_pairs)
    except InputError as exc:
        raise error(exc.field, exc.reason) from None
    except json.JSONDecodeError as exc:
        raise error("json", f"not valid JSON ({exc.msg} at line {exc.lineno} column "
                    f"{exc.colno})") from None
    except RecursionError:
        raise error("json", f"nested deeper than the limit of {MAX_DEPTH} levels") from None
    for value, depth in _walk(doc):
        if depth > MAX_DEPTH:
            raise error("json", f"nested deeper than the limit of {MAX_DEPTH} levels")
        if surrogates and isinstance(value, str) and has_surrogate(value):
            raise error("json", f"string {shown(value)} holds a lone surrogate (not Unicode)")
    return doc


def read_document(path: Any, *, error: type[InputError] = InputError,
                  max_bytes: int = MAX_DOCUMENT_BYTES, field: str | None = None) -> Any:
    """Read and decode the JSON file at ``path`` through :func:`load_json`.

    The size is checked on the open file before anything is read into memory. A file
    that cannot be read raises ``error`` with ``field`` (default: the path itself).
    """
    import os

    try:
        name = one_line(os.fsdecode(path), 80)
    except TypeError:
        name = shown(path)
    where, what = (name, "") if field is None else (field, f"{name}: ")
    import stat

    try:
        # a FIFO or device would block open() or never end: regular files only, asked first
        regular = stat.S_ISREG(os.stat(path).st_mode)
        size, data = 0, b""
        if regular:
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                # what the file holds (a byte more, should it grow), never max_bytes up front
                data = b"" if size > max_bytes else fh.read(min(size, max_bytes) + 1)
    except OSError as exc:
        raise error(where, f"{what}cannot read file ({one_line(exc.strerror or str(exc), 80)})"
                    ) from None
    except (ValueError, TypeError) as exc:  # an embedded NUL, a path of the wrong type
        raise error(where, f"{what}not a usable path ({one_line(str(exc), 80)})") from None
    if not regular:
        raise error(where, f"{what}not a regular file")
    if size > max_bytes or len(data) > max_bytes:
        raise error(where, f"{what}file of {max(size, len(data))} bytes exceeds the limit of "
                    f"{max_bytes} bytes")
    return load_json(data, error=error, max_bytes=max_bytes)


# ---------------------------------------------------------------- strict JSON output

NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _finite(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def encode(obj: Any) -> Any:
    """``obj`` with every non-finite float (also numpy scalars) as "NaN"/"Infinity"/"-Infinity"."""
    if isinstance(obj, float):
        return _finite(obj)
    if isinstance(obj, dict):
        return {k: encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if obj and set(map(type, obj)) <= {float, int} and all(map(math.isfinite, obj)):
            return obj  # a list of finite numbers (a gradient): nothing to encode
        return [encode(v) for v in obj]
    if hasattr(obj, "dtype") and getattr(obj, "shape", None) == () and obj.dtype.kind == "f":
        return _finite(float(obj))
    return obj


def decode_float(value: Any) -> Any:
    """Inverse of :func:`encode` for one field: "NaN"/"Infinity"/"-Infinity" back to floats."""
    if isinstance(value, str) and value in NONFINITE:
        return NONFINITE[value]
    return value


def _one_line(sort_keys: bool) -> Any:
    """json's C encoder of strict one-line JSON, made once: ``json.dumps`` (and
    ``JSONEncoder.encode``) sets one up on every call, about a quarter of the time of a
    short document such as a suite's record (a suite writes ~15 per program). None
    where json has no C encoder or one that takes other arguments (it is json's internal
    API, as ``JSONEncoder.iterencode`` calls it): ``dumps`` then calls ``json.dumps``. It
    keeps no circular-reference marks: such a document fails either way, in
    :func:`encode` below."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    try:
        return make(None, json.JSONEncoder(allow_nan=False).default,
                    json.encoder.encode_basestring_ascii, None, ": ", ", ", sort_keys, False,
                    False)
    except TypeError:
        return None


_ONE_LINE, _ONE_LINE_SORTED = _one_line(False), _one_line(True)


def dumps(obj: Any, **kwargs: Any) -> str:
    """Strict RFC 8259 JSON: non-finite floats encoded by :func:`encode`, never NaN tokens."""
    one_line = _ONE_LINE if not kwargs else \
        _ONE_LINE_SORTED if kwargs == {"sort_keys": True} else None
    try:  # most documents (a suite's records) hold no non-finite float and no numpy scalar
        if one_line is not None:
            return "".join(one_line(obj, 0))
        return json.dumps(obj, allow_nan=False, **kwargs)
    except (ValueError, TypeError):  # json refused one: the same text :func:`encode` gives
        return json.dumps(encode(obj), allow_nan=False, **kwargs)


__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_INT_DIGITS",
    "MAX_MESSAGE",
    "MAX_SHOWN",
    "InputError",
    "decode_float",
    "dumps",
    "encode",
    "load_json",
    "one_line",
    "read_document",
    "shown",
]
