"""What the cohort is expected to show: data, used only to compare with observations.

``EXPECTED[row][family]`` is the outcome letter a record of that row and family is
expected to have (M match, R rejected, D diverge). The five paper families reproduce
the reference paper's Table 2 (cells at 50 keys are these letters counted over
2 dtypes x 50 keys per family); the rest are this project's rows beyond the paper, each
with the bug class it models (``BUG_CLASS``, cited in docs/cohort.md). Outcomes in the
records come from running the frameworks, never from this table.
"""

from __future__ import annotations

from replayverify.cohort.cases import FAMILIES, extra_row
from replayverify.cohort.expected_compiled import letter
from replayverify.cohort.expected_stateful import expected_stateful

LOCAL = ("local-strided", "local-overlap")
HIDDEN = ("hidden-strided", "hidden-overlap")
RAW = ("raw-copy",)
PAPER_FAMILIES = tuple(FAMILIES)


def _by(local: str, hidden: str, raw: str) -> dict[str, str]:
    return {**dict.fromkeys(LOCAL, local), **dict.fromkeys(HIDDEN, hidden),
            **dict.fromkeys(RAW, raw)}


# Table 2 of the reference paper, row by row (the row labels are the records' ``row``).
TABLE2: dict[str, dict[str, str]] = {
    "torch functional reference": _by("M", "M", "M"),
    "torch native eager": _by("M", "M", "R"),
    "torch reentrant": _by("M", "D", "R"),
    "torch non-reentrant": _by("M", "D", "R"),
    "torch reentrant, RNG unpreserved": _by("D", "D", "R"),
    "torch non-reentrant, RNG unpreserved": _by("D", "D", "R"),
    "torch transactional non-reentrant": _by("M", "M", "R"),
    "JAX functional reference": _by("M", "M", "M"),
    "JAX functional checkpoint": _by("M", "M", "M"),
    "JAX native in-place eager": _by("R", "R", "R"),
    "JAX native in-place checkpoint": _by("R", "R", "R"),
    "JAX impure-holder eager": dict.fromkeys(HIDDEN, "M"),
    "JAX impure-holder checkpoint": dict.fromkeys(HIDDEN, "R"),
}
# The paper's cells at its 50 keys, for the report's side-by-side comparison.
PAPER_CELLS: dict[str, tuple[int, int, int]] = {
    "torch functional reference": (500, 0, 0),
    "torch native eager": (400, 100, 0),
    "torch reentrant": (200, 100, 200),
    "torch non-reentrant": (200, 100, 200),
    "torch reentrant, RNG unpreserved": (0, 100, 400),
    "torch non-reentrant, RNG unpreserved": (0, 100, 400),
    "torch transactional non-reentrant": (400, 100, 0),
    "JAX functional reference": (500, 0, 0),
    "JAX functional checkpoint": (500, 0, 0),
    "JAX native in-place eager": (0, 500, 0),
    "JAX native in-place checkpoint": (0, 500, 0),
    "JAX impure-holder eager": (200, 0, 0),
    "JAX impure-holder checkpoint": (0, 200, 0),
}

_OVERWRITE = {
    "torch functional reference": "M",
    "torch native eager": "R",
    "torch reentrant": "R",
    "torch non-reentrant": "D",
    "torch reentrant, RNG unpreserved": "R",
    "torch non-reentrant, RNG unpreserved": "D",
    "torch transactional non-reentrant": "D",
    "JAX functional reference": "M",
    "JAX functional checkpoint": "M",
    "JAX native in-place eager": "R",
    "JAX native in-place checkpoint": "R",
}
_RUNNING = {
    "torch functional reference": "M",
    "torch native eager": "M",
    "torch reentrant": "D",
    "torch non-reentrant": "D",
    "torch reentrant, RNG unpreserved": "D",
    "torch non-reentrant, RNG unpreserved": "D",
    "torch transactional non-reentrant": "M",
    "JAX functional reference": "M",
    "JAX functional checkpoint": "M",
    "JAX native in-place eager": "R",
    "JAX native in-place checkpoint": "R",
}
ENGINE_ROWS = tuple(f"replayverify {e}" for e in ("eager", "whole", "readset", "region",
                                                 "guarded"))


EXTRA: dict[str, dict[str, str]] = {
    **{extra_row(r, "in-segment-saved-overwrite"): {"in-segment-saved-overwrite": x}
       for r, x in _OVERWRITE.items()},
    **{extra_row(r, "running-stats"): {"running-stats": x} for r, x in _RUNNING.items()},
    "torch selective non-reentrant": dict.fromkeys(HIDDEN, "D"),
    "torch selective non-reentrant, cache mutation allowed": dict.fromkeys(HIDDEN, "D"),
    **{row: dict.fromkeys(PAPER_FAMILIES, "M") for row in ENGINE_ROWS},
    **{extra_row(row, fam): {fam: "M"} for row in ENGINE_ROWS
       for fam in ("in-segment-saved-overwrite", "running-stats")},
}
EXPECTED: dict[str, dict[str, str]] = {**TABLE2, **EXTRA}

# One sentence per row group beyond the paper: the real bug class it models.
BUG_CLASS: dict[str, str] = {
    "in-segment-saved-overwrite": (
        "A tensor saved for backward is overwritten in place later in the same checkpointed "
        "region: eager autograd's version counter raises, but non-reentrant checkpointing "
        "differentiates the recomputed, then overwritten, value without a version check - "
        "the silent-gradient class of pytorch/pytorch#197887, where autograd's in-place "
        "check is lost for a saved view."),
    "running-stats": (
        "A module updates a running statistic in its forward (BatchNorm's running_mean "
        "under no_grad); checkpoint recomputation updates it a second time, so gradients "
        "match and only the buffer's state is wrong (pytorch/pytorch#96136, #62471)."),
    "selective": (
        "Selective activation checkpointing (torch.utils.checkpoint."
        "create_selective_checkpoint_contexts) caches chosen op outputs, but the saved "
        "inputs of those ops and every other op are recomputed from the live hidden "
        "buffer, so a policy does not make a stateful region replay-safe; "
        "allow_cache_entry_mutation only governs in-place writes to cached outputs."),
    "determinism": (
        "torch's default determinism_check compares the shapes, dtypes and devices of "
        "recomputed tensors (torch.utils.checkpoint.checkpoint documentation); a replay "
        "that reads mutated state keeps all three, so value divergence passes it."),
    "engines": (
        "replayverify's own engines replay every segment as a transaction from the state "
        "the forward pass saw (SPEC §4), so the same programs match."),
}


def expected_letter(row: str, family: str, version: str | None = None) -> str | None:
    """The expected outcome letter of a record, or None where nothing is expected.
    ``version``: the framework's, for rows whose cells are pinned to one version
    (``expected_compiled``, ``expected_stateful``): another version has no expectation."""
    got = EXPECTED.get(row, {}).get(family)
    if got is None:
        got = letter(row, family, version)
    return got or expected_stateful(row, family, version)
