"""Expected cells of the compiled rows and the eager checkpoint wrappers (issue #25).

Data pinned to one torch version (``PINNED``): what torch.compile's recomputation does
with these programs is an implementation property (Dynamo's and AOTAutograd's handling
of input mutation, the min-cut partitioner's choices), not an API contract, so a
record of another torch version has no expected letter and its row is reported as
``no-expectation`` with the observed cells. ``expected.expected_letter`` falls back to
``letter`` here for rows it does not know. Each row's reading, and the upstream reports
it matches, are in docs/cohort.md ("Compiled recomputation and the wrappers").
"""

from __future__ import annotations

from replayverify.cohort.cases import extra_row

PINNED = "2.13.0"  # torch, without the local build tag (2.13.0+cpu)

LOCAL = ("local-strided", "local-overlap")
HIDDEN = ("hidden-strided", "hidden-overlap")
OVERWRITE = "in-segment-saved-overwrite"
RUNNING = "running-stats"


def _by(local: str, hidden: str, raw: str, overwrite: str, running: str) -> dict[str, str]:
    """family -> letter over the five paper families and the two extra ones."""
    return {**dict.fromkeys(LOCAL, local), **dict.fromkeys(HIDDEN, hidden),
            "raw-copy": raw, OVERWRITE: overwrite, RUNNING: running}


# The wrappers reproduce the mode they wrap (torch non-reentrant / reentrant rows of
# expected.py, extra families included); checkpoint_sequential with one function per op
# never re-runs a stateful op from a stale state: each recomputation replays one op
# from the tuple saved at its own boundary.
WRAPPERS: dict[str, dict[str, str]] = {
    "torch checkpoint_wrapper NO_REENTRANT": _by("M", "D", "R", "D", "D"),
    "torch checkpoint_wrapper NO_REENTRANT, RNG unpreserved": _by("D", "D", "R", "D", "D"),
    "torch checkpoint_wrapper REENTRANT": _by("M", "D", "R", "R", "D"),
    "torch checkpoint_wrapper REENTRANT, RNG unpreserved": _by("D", "D", "R", "R", "D"),
    "torch checkpoint_sequential, non-reentrant": _by("M", "M", "R", "M", "M"),
}

# Per backend, per method kind (compiled_adapter.KINDS), torch 2.13.0 on CPU.
_COMPILED: dict[str, dict[str, str]] = {
    "non-reentrant checkpoint": _by("M", "R", "M", "R", "M"),
    "SAC, recompute all": _by("M", "R", "M", "R", "M"),
    "SAC, random ops saved": _by("M", "R", "M", "R", "M"),
    "no checkpoint, memory budget 0.0": _by("D", "R", "D", "R", "D"),
    "no checkpoint, memory budget 0.5": _by("M", "M", "M", "R", "M"),
    "no checkpoint, memory budget 1.0 (control)": _by("M", "M", "M", "R", "M"),
}
COMPILED: dict[str, dict[str, str]] = {
    f"torch.compile {backend}, {kind}": cells
    for backend in ("aot_eager", "inductor") for kind, cells in _COMPILED.items()}

ROWS: dict[str, dict[str, str]] = {**WRAPPERS, **COMPILED}


# as the records name the rows: a family beyond the paper qualifies its row
EXPECTED_COMPILED: dict[str, dict[str, str]] = {}
for _row, _cells in ROWS.items():
    for _fam, _x in _cells.items():
        EXPECTED_COMPILED.setdefault(extra_row(_row, _fam), {})[_fam] = _x


def letter(row: str, family: str, version: str | None) -> str | None:
    """The expected letter of a record of ``row`` and ``family`` made with torch
    ``version``; None for other rows and for a torch other than ``PINNED``."""
    if version is None or version.split("+")[0] != PINNED:
        return None
    return EXPECTED_COMPILED.get(row, {}).get(family)


# One sentence per row group, for report.md (docs/cohort.md has the whole reading).
BUG_CLASS_COMPILED: dict[str, str] = {
    "torch.compile memory budget": (
        "activation_memory_budget < 1.0 lets the min-cut partitioner recompute the draw in "
        "backward with fresh random numbers: a wrong gradient and an advanced generator "
        "(pytorch/pytorch#190758, #190717; open fixes #190759, #191684)."),
    "torch.compile checkpoint / SAC": (
        "the compiled graph saves the hidden buffer as a graph input, so its later eager "
        "mutation trips autograd's version check (R where eager checkpointing is D); "
        "functionalization makes the overlapping raw copy a memmove (M where eager is R); "
        "AOTAutograd's joint-graph trace raises on the in-segment overwrite at compile time "
        "(related: pytorch/pytorch#113737)."),
    "checkpoint_wrapper": (
        "apply_activation_checkpointing(checkpoint_wrapper) gives the cells of the mode it "
        "wraps; preserve_rng_state=False is what torchtitan shipped until "
        "pytorch/torchtitan#2380 (#1323)."),
    "checkpoint_sequential": (
        "one checkpointed function per op replays each op from the tuple saved at its own "
        "boundary: no stale hidden state is replayed (M where whole-segment checkpointing "
        "is D); no upstream report found."),
}
