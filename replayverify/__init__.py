"""replayverify: a verifier and reference oracle for stateful activation recomputation.

The importable API (everything is loaded on first use, so ``import replayverify`` is
cheap and never imports Hypothesis)::

    import replayverify

    program = replayverify.load_program("examples/shift-tanh.json")  # path, JSON or dict
    result = replayverify.run(program)        # buffers, rng, loss, gradient, admission
    records = replayverify.check(program)     # one Record per (check, engine)
    engine = replayverify.engines.get("region")

Hypothesis strategies live in :mod:`replayverify.strategies` (the ``test`` extra).
See ``docs/guide.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from replayverify._version import __version__ as __version__

if TYPE_CHECKING:
    from replayverify import engines as engines
    from replayverify import programs as programs
    from replayverify import strategies as strategies  # needs Hypothesis: not in __all__
    from replayverify import verifier as verifier
    from replayverify._api import ProgramLike, RunResult, check, load_program, run
    from replayverify.programs.interpreter import Admission
    from replayverify.programs.model import Program, ProgramError
    from replayverify.programs.philox import RngState
    from replayverify.verifier.records import Record

_ATTRIBUTES = {
    "ProgramLike": "replayverify._api",
    "RunResult": "replayverify._api",
    "check": "replayverify._api",
    "load_program": "replayverify._api",
    "run": "replayverify._api",
    "Admission": "replayverify.programs.interpreter",
    "Program": "replayverify.programs.model",
    "ProgramError": "replayverify.programs.model",
    "RngState": "replayverify.programs.philox",
    "Record": "replayverify.verifier.records",
}
_SUBMODULES = ("engines", "programs", "strategies", "verifier")


def __getattr__(name: str) -> Any:
    if name in _ATTRIBUTES:
        value = getattr(importlib.import_module(_ATTRIBUTES[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_ATTRIBUTES, *_SUBMODULES])


__all__ = [
    "Admission",
    "Program",
    "ProgramError",
    "ProgramLike",
    "Record",
    "RngState",
    "RunResult",
    "check",
    "engines",
    "load_program",
    "run",
]
