"""replayverify's own engines as a cohort framework (rows "replayverify <engine>").

The generator is Philox, the program's own: the tape holds the interpreter's draws and
its final 24-byte state, so the reference is the plain interpreter. Each method runs one
built-in engine (forward, backward by that engine's recovery) and reports its gradient
and final (B, R) as the engine result gives them.
"""

from __future__ import annotations

from replayverify.cohort.adapter import DrawTape, Method, Observation
from replayverify.cohort.cases import Case

ENGINES = ("eager", "whole", "readset", "region", "guarded")


class EnginesAdapter:
    """The built-in engines (no third-party framework needed)."""

    name = "replayverify"
    label = "replayverify"

    def missing(self) -> str | None:
        return None

    def version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("replayverify")
        except PackageNotFoundError:  # pragma: no cover - run from a source tree
            return "source"

    def methods(self, extra: bool = False) -> tuple[Method, ...]:
        return tuple(Method(e, f"replayverify {e}", doc=f"the {e} engine") for e in ENGINES)

    def draw_tape(self, case: Case) -> DrawTape:
        from replayverify.programs.interpreter import execute

        ex = execute(case.program, record_boundaries=False)
        draws = {r.index: r.draws for r in ex.records if r.draws is not None}
        return DrawTape(draws, ex.rng.to_bytes())

    def run(self, case: Case, method: Method) -> Observation:
        from replayverify.engines import registry

        result = registry.get(method.name).run(case.program)
        if result.gradient is None:
            raise ValueError(f"engine {method.name}: no gradient ({result.reason})")
        return Observation(result.gradient, dict(result.final.buffers),
                           result.final.rng.to_bytes())
