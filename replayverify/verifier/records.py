"""Check records and the tolerance of SPEC §5: one record per (program, check, engine)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np

from replayverify.programs.tolerance import tolerance

OUTCOMES = ("match", "diverge", "unsupported", "rejected", "error", "detected", "missed")
FAILING = ("diverge", "error", "missed")
__all__ = ["FAILING", "OUTCOMES", "Record", "max_abs_err", "run_is_clean", "tolerance",
           "undetected_mutants"]


@dataclass(frozen=True)
class Record:
    """One verdict. ``engine`` is "" for checks that involve no engine."""

    program: str
    sha256: str
    check: str
    engine: str
    outcome: str
    max_abs_err: float | None
    detail: str = ""
    seconds: float = 0.0
    metrics: dict = field(default_factory=dict)  # retained_bytes, temporary_bytes, replayed_ops

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}")

    @property
    def is_mutant(self) -> bool:
        return self.check.startswith("mutant:")

    @property
    def failing(self) -> bool:
        """A failure by itself. A mutant missed on one program is not: a mutant fails a
        run only when no program of the run detects it (see :func:`undetected_mutants`)."""
        return self.outcome in FAILING and not (self.is_mutant and self.outcome == "missed")

    def to_dict(self) -> dict:
        d = asdict(self)
        metrics = d.pop("metrics")
        d.update(metrics)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=False, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict) -> Record:
        base = {k: d[k] for k in ("program", "sha256", "check", "engine", "outcome",
                                  "max_abs_err")}
        extra = {k: v for k, v in d.items() if k not in base and k not in ("detail", "seconds")}
        return cls(**base, detail=d.get("detail", ""), seconds=d.get("seconds", 0.0),
                   metrics=extra)


def undetected_mutants(records: list[Record]) -> list[str]:
    """Mutants that some program ran but no program detected: each fails the run."""
    seen: dict[str, bool] = {}
    for r in records:
        if r.is_mutant:
            seen[r.check] = seen.get(r.check, False) or r.outcome == "detected"
    return sorted(name for name, found in seen.items() if not found)


def run_is_clean(records: list[Record]) -> bool:
    """SPEC §5: no diverge, error or missed; mutants judged over the whole run."""
    return not any(r.failing for r in records) and not undetected_mutants(records)


def max_abs_err(g: np.ndarray, g_ref: np.ndarray) -> float:
    if np.size(g_ref) == 0:
        return 0.0
    return float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(g_ref, np.float64))))
