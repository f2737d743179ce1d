"""Hypothesis strategies for replayverify programs (needs the ``test`` extra).

Use them in your own property tests::

    from hypothesis import given
    import replayverify
    from replayverify.strategies import programs

    @given(programs(max_ops=8))
    def test_every_engine_replays_exactly(program):
        records = replayverify.check(program, checks=("gradient", "bytes"))
        assert not [r for r in records if r.failing]

``st.from_type(Program)`` resolves to :func:`programs` once this package is installed:
the ``hypothesis`` entry point in ``pyproject.toml`` calls
:func:`_hypothesis_setup_hook` when Hypothesis is imported.
"""

from __future__ import annotations

from typing import Any


def _hypothesis_setup_hook() -> None:
    """Register :func:`programs` for ``st.from_type(Program)`` (run by Hypothesis)."""
    from hypothesis import strategies as st

    from replayverify.programs.model import Program

    st.register_type_strategy(Program, _program_strategy)


def _program_strategy(thing: Any) -> Any:
    # Resolved at first use: the hook runs while Hypothesis itself is still importing
    # (possibly because this very module imported it), so nothing is built before.
    return programs()


# The hook and its resolver come first: importing Hypothesis below runs the hook,
# which must find them on this partially imported module.
from replayverify.programs._strategies import ops, programs, rng_states, views  # noqa: E402

__all__ = ["ops", "programs", "rng_states", "views"]
