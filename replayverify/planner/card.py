"""Profile cards: what the planner knows about each segment, validated before planning.

A card lists, per segment, the options it may use (eager retention, replay from a whole
snapshot, replay with region preservation) and what each costs: retained bytes r held
until backward, temporary bytes q needed while the segment is recovered, and time c.
``state_*`` fields say which part of each total is due to preserving historical state;
the state-agnostic control plans without them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from replayverify.untrusted import (
    MAX_SHOWN,
    InputError,
    has_surrogate,
    load_json,
    one_line,
    read_document,
    shown,
)

FORMAT = "replayverify.profile"
VERSION = 1
OPTIONS = ("eager", "whole", "region")
"""Every option a segment may offer, in canonical order (used for tie-breaking)."""

MAX_TOTAL_BYTES = (1 << 63) - 1
"""Bound on P + sum(max r) + max(max q): keeps every byte sum exact in int64."""

_COST_KEYS = ("retained", "temporary", "time")
_STATE_KEYS = ("state_retained", "state_temporary", "state_time")


class CardError(InputError):
    """A profile card that the planner refuses. ``field`` names where, ``reason`` says why.

    The message is one line (control characters escaped, at most MAX_MESSAGE characters).
    """


@dataclass(frozen=True, slots=True)
class OptionCost:
    """Costs of one option of one segment; ``state_*`` are the parts due to state."""

    retained: int
    temporary: int
    time: float
    state_retained: int = 0
    state_temporary: int = 0
    state_time: float = 0.0

    def agnostic(self) -> OptionCost:
        """The same option with its state-preservation costs left out."""
        return OptionCost(
            self.retained - self.state_retained,
            self.temporary - self.state_temporary,
            self.time - self.state_time,
        )


@dataclass(frozen=True, slots=True)
class SegmentCard:
    """One segment: its name and the options it offers, in canonical order."""

    name: str
    options: tuple[tuple[str, OptionCost], ...]

    def option(self, kind: str) -> OptionCost | None:
        """The costs of option ``kind``, or None when the segment does not offer it."""
        for name, cost in self.options:
            if name == kind:
                return cost
        return None


@dataclass(frozen=True, slots=True)
class Card:
    """A validated profile card: persistent bytes P and the segments in program order."""

    persistent_bytes: int
    segments: tuple[SegmentCard, ...]
    name: str = ""

    def to_json(self) -> dict[str, Any]:
        """The card as a JSON object that :func:`parse_card` accepts again."""
        segs = []
        for seg in self.segments:
            opts = {}
            for kind, cost in seg.options:
                entry: dict[str, Any] = {k: getattr(cost, k) for k in _COST_KEYS}
                for k in _STATE_KEYS:
                    if getattr(cost, k):
                        entry[k] = getattr(cost, k)
                opts[kind] = entry
            segs.append({"name": seg.name, "options": opts})
        doc: dict[str, Any] = {"format": FORMAT, "version": VERSION}
        if self.name:
            doc["name"] = self.name
        doc["persistent_bytes"] = self.persistent_bytes
        doc["segments"] = segs
        return doc


# --- validation helpers ---------------------------------------------------------------------


def _obj(value: Any, field: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict:
    if not isinstance(value, dict):
        raise CardError(field, f"must be an object, got {type(value).__name__}")
    known = set(required) | set(optional)
    unknown = sorted(one_line(k, MAX_SHOWN) if isinstance(k, str) else shown(k)
                     for k in value if k not in known)
    if unknown:
        raise CardError(f"{field}.{unknown[0]}" if field else unknown[0], "unknown key")
    for key in required:
        if key not in value:
            raise CardError(f"{field}.{key}" if field else key, "required key is missing")
    return value


def _bytes(value: Any, field: str) -> int:
    # Like program files: a float with an integral value is accepted where an int is due.
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CardError(field, f"must be a whole number of bytes, got {shown(value)}")
    if value < 0:
        raise CardError(field, f"must be >= 0, got {shown(value)}")
    if value > MAX_TOTAL_BYTES:
        raise CardError(field, f"must be <= {MAX_TOTAL_BYTES}, got {shown(value)}")
    return value


def _time(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CardError(field, f"must be a number, got {shown(value)}")
    try:
        out = float(value)
    except OverflowError:  # an integer beyond float64's range
        raise CardError(field, f"must be finite, got {shown(value)} (beyond float64)") from None
    if not math.isfinite(out):
        raise CardError(field, f"must be finite, got {shown(value)}")
    if out < 0:
        raise CardError(field, f"must be >= 0, got {shown(value)}")
    return out


def _option(value: Any, field: str) -> OptionCost:
    doc = _obj(value, field, _COST_KEYS, _STATE_KEYS)
    retained = _bytes(doc["retained"], f"{field}.retained")
    temporary = _bytes(doc["temporary"], f"{field}.temporary")
    time = _time(doc["time"], f"{field}.time")
    s_ret = _bytes(doc.get("state_retained", 0), f"{field}.state_retained")
    s_tmp = _bytes(doc.get("state_temporary", 0), f"{field}.state_temporary")
    s_time = _time(doc.get("state_time", 0), f"{field}.state_time")
    for key, part, total in (
        ("state_retained", s_ret, retained),
        ("state_temporary", s_tmp, temporary),
        ("state_time", s_time, time),
    ):
        if part > total:
            whole = key.removeprefix("state_")
            raise CardError(f"{field}.{key}",
                            f"must be <= {whole} ({shown(total)}), got {shown(part)}")
    return OptionCost(retained, temporary, time, s_ret, s_tmp, s_time)


def _segment(value: Any, field: str, index: int) -> SegmentCard:
    doc = _obj(value, field, ("options",), ("name",))
    name = doc.get("name", f"s{index}")
    if not isinstance(name, str) or not name:
        raise CardError(f"{field}.name", f"must be a non-empty string, got {shown(name)}")
    if has_surrogate(name):
        raise CardError(f"{field}.name", f"{shown(name)} holds a lone surrogate (not Unicode)")
    opts = _obj(doc["options"], f"{field}.options", (), OPTIONS)
    if not opts:
        raise CardError(f"{field}.options", "a segment needs at least one option")
    parsed = tuple(
        (kind, _option(opts[kind], f"{field}.options.{kind}")) for kind in OPTIONS if kind in opts
    )
    return SegmentCard(name, parsed)


def parse_card(doc: Any) -> Card:
    """Validate a card given as a decoded JSON object; raise :class:`CardError` if bad."""
    doc = _obj(doc, "", ("format", "version", "persistent_bytes", "segments"), ("name",))
    if not isinstance(doc["format"], str) or doc["format"] != FORMAT:
        raise CardError("format", f"must be {FORMAT!r}, got {shown(doc['format'])}")
    if type(doc["version"]) is not int or doc["version"] != VERSION:
        raise CardError("version", f"must be {VERSION}, got {shown(doc['version'])}")
    name = doc.get("name", "")
    if not isinstance(name, str):
        raise CardError("name", f"must be a string, got {shown(name)}")
    if has_surrogate(name):
        raise CardError("name", f"{shown(name)} holds a lone surrogate (not Unicode)")
    persistent = _bytes(doc["persistent_bytes"], "persistent_bytes")
    raw = doc["segments"]
    if not isinstance(raw, list):
        raise CardError("segments", f"must be a list, got {type(raw).__name__}")
    if not raw:
        raise CardError("segments", "a card needs at least one segment")
    segments = tuple(_segment(s, f"segments[{i}]", i) for i, s in enumerate(raw))
    seen: dict[str, int] = {}
    for i, seg in enumerate(segments):
        if seg.name in seen:
            first = seen[seg.name]
            raise CardError(
                f"segments[{i}].name", f"duplicate name {shown(seg.name)} (also segments[{first}])"
            )
        seen[seg.name] = i
    total = persistent + sum(max(c.retained for _, c in s.options) for s in segments)
    total += max(max(c.temporary for _, c in s.options) for s in segments)
    if total > MAX_TOTAL_BYTES:
        raise CardError(
            "segments", f"byte totals exceed {MAX_TOTAL_BYTES} (2^63 - 1); cannot plan exactly"
        )
    slowest = [max(c.time for _, c in s.options) for s in segments]
    if not math.isfinite(sum(slowest)):  # Python floats overflow to inf, silently
        raise CardError("segments", "time totals overflow float64 (sum of the segments' "
                        "largest times is beyond 1.8e308)")
    return Card(persistent, segments, name)


def loads_card(text: str | bytes) -> Card:
    """Parse and validate a card from untrusted JSON text (the limits of
    :func:`replayverify.untrusted.load_json`; NaN and Infinity are refused)."""
    return parse_card(load_json(text, error=CardError))


def load_card(path: str | Path) -> Card:
    """Read, parse and validate a card file."""
    return parse_card(read_document(path, error=CardError, field="file"))


# --- budgets --------------------------------------------------------------------------------

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}  # fmt: skip
_BUDGET = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_budget(text: str | int) -> int:
    """Bytes from a size such as ``44GiB``, ``512MiB``, ``1.5GB`` or ``34359738368``.

    Units are case-insensitive; ``KB``/``MB``/``GB`` are powers of 1000 and ``KiB``/``MiB``/
    ``GiB`` powers of 1024. The result must be a whole, non-negative number of bytes.
    Raises :class:`CardError` with field ``budget``.
    """
    if isinstance(text, bool):
        raise CardError("budget", f"must be bytes or a size like 44GiB, got {shown(text)}")
    if isinstance(text, int):
        if text < 0:
            raise CardError("budget", f"must be >= 0, got {shown(text)}")
        if text > MAX_TOTAL_BYTES:
            raise CardError("budget", f"must be <= {MAX_TOTAL_BYTES} (2^63 - 1), got "
                            f"{shown(text)}")
        return text
    if not isinstance(text, str) or len(text) > 64:
        raise CardError("budget", f"must be bytes or a size like 44GiB, got {shown(text)}")
    match = _BUDGET.match(text)
    if not match or match.group(2).lower() not in _UNITS:
        raise CardError("budget", f"must be bytes or a size like 44GiB, got {shown(text)}")
    try:
        value = Decimal(match.group(1)) * _UNITS[match.group(2).lower()]
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        raise CardError("budget", f"not a number: {shown(text)}") from None
    if value != value.to_integral_value():
        raise CardError("budget", f"{shown(text)} is not a whole number of bytes")
    if value > MAX_TOTAL_BYTES:
        raise CardError("budget", f"{shown(text)} is more than {MAX_TOTAL_BYTES} bytes "
                        "(2^63 - 1), the most the planner counts exactly")
    return int(value)


def format_bytes(n: int) -> str:
    """A readable size in binary units, e.g. ``29.94 GiB``."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"
