"""Check records and the tolerance of SPEC §5: one record per (program, check, engine).

Check names and outcomes are ``str`` enums (:class:`Check`, :class:`Outcome`): they
compare equal to, and serialise as, the strings SPEC §5 names. A mutant's check is its
registered name (``mutant:...``), a plain string. :func:`make_record` is the one way
the checkers build a record.
"""

from __future__ import annotations

import enum
import operator
from copy import deepcopy
from dataclasses import dataclass, field, fields

import numpy as np

from replayverify.programs.tolerance import tolerance
from replayverify.untrusted import decode_float, dumps


class StrEnum(str, enum.Enum):
    """A ``str`` enum whose ``str()`` and format are its value (``enum.StrEnum`` is 3.11+)."""

    def __str__(self) -> str:
        return str.__str__(self)


class Outcome(StrEnum):
    """What one check concluded (SPEC §5)."""

    MATCH = "match"
    DIVERGE = "diverge"
    UNSUPPORTED = "unsupported"
    REJECTED = "rejected"
    ERROR = "error"
    DETECTED = "detected"
    MISSED = "missed"


class Check(StrEnum):
    """The checks of SPEC §5, in the order ``check`` reports them, then the two
    pseudo-checks of records that judge no artifact (``load``, ``program``)."""

    GRADIENT = "gradient"
    FORWARD_JACOBIAN = "forward-jacobian"
    COMPLEX_STEP = "complex-step"
    BYTES = "bytes"
    FINAL_STORAGE = "control:final-storage"
    WRONG_RNG = "control:wrong-rng"
    LOAD = "load"  # an input file loading refused
    PROGRAM = "program"  # a suite program that errored or timed out as a whole


OUTCOMES = tuple(Outcome)
FAILING = frozenset({Outcome.DIVERGE, Outcome.ERROR, Outcome.MISSED})
CONTROL_PREFIX = "control:"
MUTANT_PREFIX = "mutant:"
__all__ = ["FAILING", "OUTCOMES", "Check", "Outcome", "Record", "make_record", "max_abs_err",
           "program_label", "record_rows", "records_from_rows",
           "run_is_clean", "tolerance", "undetected_mutants"]


_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True, init=False)
class Record:
    """One verdict. ``engine`` is "" for checks that involve no engine."""

    program: str
    sha256: str
    check: Check | str
    engine: str
    outcome: Outcome
    max_abs_err: float | None
    detail: str = ""
    seconds: float = 0.0
    metrics: dict = field(default_factory=dict)  # retained_bytes, temporary_bytes, replayed_ops

    def __init__(self, program: str, sha256: str, check: Check | str, engine: str,
                 outcome: Outcome | str, max_abs_err: float | None, detail: str = "",
                 seconds: float = 0.0, metrics: dict | None = None) -> None:
        """A loaded check or outcome string becomes its member; the fields are set as one
        dict (a frozen dataclass's generated ``__init__`` sets each through
        ``object.__setattr__``, then calls ``__post_init__``: twice the time, and a suite
        makes ~15 records a program). ``metrics`` None: a dict of the record's own."""
        if type(outcome) is not Outcome:  # a loaded string (the checkers pass members)
            try:
                outcome = Outcome(outcome)
            except ValueError:
                raise ValueError(f"unknown outcome {outcome!r}") from None
        if type(check) is not Check and check in Check._value2member_map_:
            check = Check(check)
        object.__setattr__(self, "__dict__", {
            "program": program, "sha256": sha256, "check": check, "engine": engine,
            "outcome": outcome, "max_abs_err": max_abs_err, "detail": detail,
            "seconds": seconds, "metrics": {} if metrics is None else metrics})

    @property
    def is_mutant(self) -> bool:
        return self.check.startswith(MUTANT_PREFIX)

    @property
    def failing(self) -> bool:
        """A failure by itself. A mutant missed on one program is not: a mutant fails a
        run only when no program of the run detects it (see :func:`undetected_mutants`)."""
        return self.outcome in FAILING and not (self.is_mutant
                                                and self.outcome is Outcome.MISSED)

    def _flat(self) -> dict:
        """The fields in order, then the metrics, as they are (enums, shared containers)."""
        return {"program": self.program, "sha256": self.sha256, "check": self.check,
                "engine": self.engine, "outcome": self.outcome,
                "max_abs_err": self.max_abs_err, "detail": self.detail,
                "seconds": self.seconds, **self.metrics}

    def to_dict(self) -> dict:
        """The flat dict of the record (fields in order, then the metrics); nothing in it
        is shared with the record."""
        d = self._flat()
        d["check"], d["outcome"] = str(self.check), str(self.outcome)
        for k, v in self.metrics.items():
            if not isinstance(v, _SCALARS):
                d[k] = deepcopy(v)
        return d

    def to_json(self) -> str:
        """``to_dict`` as one line of JSON, encoded from the fields as they are (nothing
        to copy, and json writes a ``str`` enum as its value): a suite encodes ~15
        records per program."""
        return dumps(self._flat())

    @classmethod
    def from_dict(cls, d: dict) -> Record:
        base = {k: d[k] for k in ("program", "sha256", "check", "engine", "outcome",
                                  "max_abs_err")}
        extra = {k: v for k, v in d.items() if k not in base and k not in ("detail", "seconds")}
        base["max_abs_err"] = decode_float(base["max_abs_err"])
        return cls(**base, detail=d.get("detail", ""), seconds=d.get("seconds", 0.0),
                   metrics=extra)


RECORD_FIELDS = tuple(f.name for f in fields(Record))
_row_of = operator.attrgetter(*RECORD_FIELDS)


def record_rows(records: list[Record]) -> list[tuple]:
    """Each record as the tuple of its fields in order: a compact form to send records
    between processes (one tuple each, not an object with its state dict)."""
    return list(map(_row_of, records))


def records_from_rows(rows: list[tuple]) -> list[Record]:
    """The records that :func:`record_rows` gave. The fields are set as unpickling sets
    them, without ``__init__``: they come from records, already checked and converted."""
    out = []
    for row in rows:
        r = object.__new__(Record)
        r.__dict__.update(zip(RECORD_FIELDS, row))
        out.append(r)
    return out


def program_label(program, program_id: str | None = None) -> str:
    """The ``program`` field of a program's records: its id, else its name, else its hash."""
    return program_id or program.name or program.sha256[:16]


def make_record(program: str, sha256: str, check: Check | str, verdict, seconds: float = 0.0,
                engine: str = "", metrics: dict | None = None) -> Record:
    """A record from a verdict (anything with ``outcome``, ``max_abs_err``, ``detail``)."""
    return Record(program, sha256, check, engine, verdict.outcome, verdict.max_abs_err,
                  verdict.detail, seconds, dict(metrics or {}))


def undetected_mutants(records: list[Record]) -> list[str]:
    """Mutants that some program ran but no program detected: each fails the run."""
    seen: dict[str, bool] = {}
    for r in records:
        if r.is_mutant:
            seen[r.check] = seen.get(r.check, False) or r.outcome is Outcome.DETECTED
    return sorted(name for name, found in seen.items() if not found)


def run_is_clean(records: list[Record]) -> bool:
    """SPEC §5: no diverge, error or missed; mutants judged over the whole run."""
    return not any(r.failing for r in records) and not undetected_mutants(records)


def max_abs_err(g: np.ndarray, g_ref: np.ndarray) -> float:
    # (the ndarray's own max: np.max's Python wrapper costs as much as the reduction on a
    # gradient's few entries, and a suite program compares 3-4 gradients)
    if np.size(g_ref) == 0:
        return 0.0
    return float(np.abs(np.asarray(g, np.float64) - np.asarray(g_ref, np.float64)).max())
