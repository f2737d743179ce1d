"""Planner profile cards derived from the engines' own accounting on a finite program.

For every segment s and option o in (eager, whole, region) the program runs under the
policy "eager everywhere, o at s". Bytes are the engines' exact accounting; time is
replayed ops. With every other segment eager:

- retained r_s(o) = retained(run) - (retained(all eager) - eager's charge to s),
  so what o costs beyond the eager segments it sits among;
- temporary q_s(o) = the run's peak temporary bytes (eager borrows none);
- time c_s(o) = the run's replayed ops (eager replays none).

Whole and region retain only state (anchors, recorded draws, journals) and spend
their time replaying, so their ``state_retained``/``state_time`` are their totals;
eager retains pre-operation values (activations) and charges no state. Costs measured
in isolation are conservative for adjacent region segments, whose journals share the
later writes they cover; ``check --policy`` verifies any plan built from the card.
"""

from __future__ import annotations

from replayverify.engines.preservation import run_policy
from replayverify.engines.runner import OpRunner
from replayverify.programs.interpreter import execute
from replayverify.programs.model import Program

OPTIONS = ("eager", "whole", "region")


def profile_card(program: Program, runner: OpRunner | None = None) -> dict:
    """The ``replayverify.profile`` card of ``program`` (one segment entry per segment).

    ``runner``: what the policy runs use (None: the plain one); the CLI passes the
    verifier's memo, since the card runs 1 + 2 x segments policies on one program."""
    admission = execute(program, record_boundaries=False).admission
    n = len(program.segments)
    base = run_policy(program, ("eager",) * n, admission, runner=runner)
    segments = []
    for s in range(n):
        options = {}
        for option in OPTIONS:
            policy = tuple(option if t == s else "eager" for t in range(n))
            res = base if option == "eager" else run_policy(program, policy, admission,
                                                                    runner=runner)
            others = base.retained_bytes - base.segment_retained_bytes[s]
            cost = {"retained": res.retained_bytes - others,
                    "temporary": res.peak_temporary_bytes,
                    "time": res.replayed_ops}
            if option != "eager":
                cost.update(state_retained=cost["retained"], state_time=cost["time"])
            options[option] = cost
        segments.append({"name": f"segment {s}", "options": options})
    persistent = sum(b.nbytes for b in program.buffers)
    return {"format": "replayverify.profile", "version": 1, "persistent_bytes": persistent,
            "segments": segments}
