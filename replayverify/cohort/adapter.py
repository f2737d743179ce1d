"""The adapter protocol, the reference, and how an observation becomes an outcome.

An adapter runs cohort cases through one framework. It names its methods and, per
case, gives two things:

- ``draw_tape(case)``: the framework's own draws, made from its generator seeded with
  ``case.draw_seed``, one array per draw op in program order, and the generator's state
  after them. The reference is replayverify's interpreter fed these draws
  (``execute(program, draws=...)``): bit-exact for that framework.
- ``run(case, method)``: forward, ``loss.backward()`` (or the framework's equivalent),
  and then what the program's world holds: the gradient, every buffer's bytes and the
  generator state. An exception is the framework *rejecting* the case.

``compare`` turns that into ``match`` (M), ``diverge`` (D, naming what differed:
the gradient, which buffer, the generator) or ``rejected`` (R, with the exception type
and first line). Gradients are compared with SPEC §5's tolerance taken with the case's
dtype (for float32: 64 * 2^-23 * n_ops * max(1, max|g_ref|)); bytes and the generator
state exactly.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from replayverify.cohort.cases import Case
from replayverify.plugins import PluginFault, call, checked
from replayverify.programs.interpreter import execute
from replayverify.programs.tolerance import tolerance

OUTCOMES = ("match", "rejected", "diverge", "unsupported", "error")  # error: the adapter's
LETTER = {"match": "M", "rejected": "R", "diverge": "D"}


@dataclass(frozen=True)
class Method:
    """One way a framework executes a case. ``families``: where it applies (None: all).
    ``row`` is the table row's label, for example "torch reentrant"."""

    name: str
    row: str
    families: tuple[str, ...] | None = None
    doc: str = ""
    expect: Mapping[str, str] | None = None  # family -> "M"/"R"/"D" (plug-ins; built-in
    # methods are judged by replayverify.cohort.expected)

    def applies(self, case: Case) -> bool:
        return self.families is None or case.family in self.families


@dataclass(frozen=True)
class DrawTape:
    """A framework's draws for a case (op index -> values, row-major) and its generator
    state after them, as bytes."""

    draws: Mapping[int, np.ndarray]
    generator: bytes


Tape = DrawTape
"""The old name of :class:`DrawTape`, kept for adapters written against it (the engines'
``Tape`` is another thing: what one engine run retains)."""


@dataclass
class Observation:
    """What a method left behind: the gradient (inputs' order, row-major), each buffer's
    final bytes, and the generator state (bytes, compared with the tape's).

    ``determinism_flagged``: for checkpoint methods, whether the metadata (shape, dtype,
    device) of the tensors the recomputation produced differed from the forward's — what
    torch's default ``determinism_check`` compares; None where it does not apply.
    """

    gradient: np.ndarray
    buffers: dict[str, bytes]
    generator: bytes
    determinism_flagged: bool | None = None


@runtime_checkable
class Adapter(Protocol):
    """A framework plugged into the cohort (see docs/cohort.md for a worked example)."""

    name: str  # the --frameworks name, for example "torch"
    label: str  # the table's backend label, for example "torch" or "JAX"

    def missing(self) -> str | None:
        """None when usable; otherwise a one-line install hint."""

    def version(self) -> str: ...

    def methods(self, extra: bool = False) -> tuple[Method, ...]:
        """The methods; ``extra``: also those of the rows beyond the paper."""

    def draw_tape(self, case: Case) -> DrawTape: ...

    def run(self, case: Case, method: Method) -> Observation: ...


class NotRun(Exception):
    """Raised by an adapter's ``run`` when the method did not run as itself (a graph
    break, a compiled function served from another case's cache, a missing compiler):
    an ``unsupported`` record carrying the reason, never an R or a result."""


@dataclass(frozen=True)
class Reference:
    """The interpreter's execution of a case fed a tape: gradient and final bytes."""

    gradient: np.ndarray
    buffers: dict[str, bytes]
    generator: bytes

    @classmethod
    def of(cls, case: Case, tape: DrawTape) -> Reference:
        ex = execute(case.program, draws=dict(tape.draws), record_boundaries=False)
        if ex.gradient is None:
            raise ValueError(f"{case.id}: the reference has no gradient "
                             f"({ex.admission.reason})")
        return cls(ex.gradient, ex.buffers, tape.generator)


def compare(case: Case, ref: Reference, obs: Observation) -> tuple[str, list[str], float]:
    """(outcome, what diverged, max |gradient error|) of an observation."""
    diverged = []
    g = np.asarray(obs.gradient, dtype=np.float64).reshape(-1)
    if g.shape != ref.gradient.shape:
        diverged.append(f"gradient shape {g.shape} != {ref.gradient.shape}")
        err = float("inf")
    else:
        err = float(np.max(np.abs(g - ref.gradient))) if g.size else 0.0
        if not err <= tolerance(case.dtype, len(case.program.ops), ref.gradient):
            diverged.append("gradient")
    for name, data in ref.buffers.items():
        if obs.buffers.get(name) != data:
            diverged.append(f"buffer {name}")
    if obs.generator != ref.generator:
        diverged.append("generator")
    return ("diverge" if diverged else "match"), diverged, err


def _exception(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "message": first_line(exc)}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def observe(adapter: Adapter, case: Case, method: Method, ref: Reference) -> dict:
    """Run one method on one case and make its record (every field but the context)."""
    start = time.perf_counter()
    rec: dict = {"outcome": "", "diverged": [], "max_abs_err": None, "exception": None,
                 "determinism_flagged": None}
    try:
        obs = call(adapter.run, case, method)
    except PluginFault as exc:  # the adapter, not the framework: sys.exit, its own Ctrl-C
        rec.update(outcome="error", exception=_exception(exc))
    except NotRun as exc:
        rec["outcome"] = "unsupported"
        rec["detail"] = str(exc)
    except Exception as exc:  # the framework refused the program: R, with its words
        rec.update(outcome="rejected", exception=_exception(exc))
    else:
        try:
            checked(obs, Observation, "the adapter's run")
            outcome, diverged, err = compare(case, ref, obs)
        except Exception as exc:  # an observation that is not one: the adapter's fault
            rec.update(outcome="error", exception=_exception(exc))
        else:
            rec.update(outcome=outcome, diverged=diverged,
                       max_abs_err=err if np.isfinite(err) else None,
                       determinism_flagged=obs.determinism_flagged)
    rec["seconds"] = round(time.perf_counter() - start, 6)
    return rec
