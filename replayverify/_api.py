"""The importable oracle: load a program, run the reference interpreter, check engines.

Re-exported lazily by :mod:`replayverify`; see ``docs/guide.md``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

import numpy as np

from replayverify.programs.format import load_program
from replayverify.programs.interpreter import Admission, execute
from replayverify.programs.model import Program
from replayverify.programs.philox import RngState
from replayverify.untrusted import shown

if TYPE_CHECKING:
    from replayverify.engines.base import Engine
    from replayverify.verifier.records import Record

ProgramLike = Union[Program, str, os.PathLike, dict]  # noqa: UP007 (a runtime alias on 3.10)


def as_program(program: ProgramLike) -> Program:
    """``program`` itself, or the program loaded (and validated) from a path, JSON or dict."""
    return program if isinstance(program, Program) else load_program(program)


@dataclass(frozen=True)
class RunResult:
    """What the reference interpreter computed: the final (B, R), the loss and dL/d(inputs).

    ``gradient`` is None when derivative admission refuses it; ``admission.reason``
    then says where and why (SPEC §3).
    """

    program: Program
    buffers: Mapping[str, bytes]  # buffer name -> final bytes
    rng: RngState  # final Philox key and counter
    loss: float
    gradient: np.ndarray | None  # read-only, float64, inputs in listed order, row-major
    admission: Admission


def run(program: ProgramLike) -> RunResult:
    """Execute ``program`` with the versioned reference interpreter (SPEC §3)."""
    program = as_program(program)
    ex = execute(program, record_boundaries=False)
    gradient = ex.gradient
    if gradient is not None:
        gradient = np.array(gradient, dtype=np.float64)
        gradient.setflags(write=False)
    return RunResult(program, dict(ex.buffers), ex.rng, float(ex.loss), gradient, ex.admission)


def check(
    program: ProgramLike,
    engines: Sequence[str | Engine] | None = None,
    checks: Iterable[str] | None = None,
    *,
    program_id: str | None = None,
    mutants: bool = False,
) -> list[Record]:
    """Every requested check on ``program``: one :class:`Record` per (check, engine).

    ``engines``: registered names (see ``replayverify.engines.register``) or engine
    objects; None means every registered engine that is not a mutant, ``()`` none.
    ``checks``: a subset of ``gradient``, ``forward-jacobian``, ``complex-step``,
    ``bytes``, ``control:final-storage``, ``control:wrong-rng`` (None: all).
    A record is ``failing`` iff its outcome is ``diverge``, ``error`` or ``missed``.
    """
    from replayverify.engines.base import Engine
    from replayverify.verifier.check import check_program

    # check_program hands ``engines`` to engine_records, which takes names or objects.
    engines = _items("engines", engines, (str, Engine), "engine names or engine objects")
    checks = _items("checks", checks, (str,), "check names")
    if not isinstance(mutants, bool):
        raise TypeError(f"mutants: True or False, not {shown(mutants)}")
    if program_id is not None and not isinstance(program_id, str):
        raise TypeError(f"program_id: a str or None, not {shown(program_id)}")
    return check_program(as_program(program), program_id=program_id,
                         engines=engines,
                         checks=checks, mutants=mutants)


def _items(argument: str, value: object, kinds: tuple[type, ...], what: str) -> tuple | None:
    """``value`` (None, or an iterable of ``kinds``) as a tuple; TypeError naming
    ``argument`` otherwise. A lone str is refused: iterated, it would be its letters."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        hint = f" (one name: [{value!r}])" if isinstance(value, str) else ""
        raise TypeError(f"{argument}: a list of {what}, not {shown(value)}{hint}")
    items = tuple(value)
    for i, item in enumerate(items):
        if not isinstance(item, kinds):
            raise TypeError(f"{argument}[{i}]: {shown(item)} is not one of the {what}")
    return items


__all__ = ["ProgramLike", "RunResult", "as_program", "check", "load_program", "run"]
