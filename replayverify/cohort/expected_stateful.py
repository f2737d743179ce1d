"""Expected cells of the stateful-recomputation rows (issue 26), as data.

Frameworks ``jax-state``, ``jax-remat3``, ``flax``, ``flax-linen``, ``keras-torch`` and
``keras-jax``
(docs/cohort.md, "Stateful recomputation APIs"). Pinned to the versions these rows were
observed with on this project's CPU machine: jax/jaxlib 0.10.2, flax 0.12.8, keras 3.15.1
(torch 2.13.0+cpu, jax 0.10.2). ``EXPECTED_STATEFUL[row][family]`` is the letter a
record is expected to have; ``BUG_CLASS_STATEFUL`` says, per row group, what real bug
class it models. Outcomes in the records come from running the frameworks.
"""

from __future__ import annotations

from replayverify.cohort.cases import EXTRA_FAMILIES, FAMILIES

ALL = (*FAMILIES, *EXTRA_FAMILIES)
VERSIONS = {"jax": "0.10.2", "jaxlib": "0.10.2", "flax": "0.12.8", "keras": "3.15.1",
            "torch": "2.13.0+cpu"}


def _all(letter: str) -> dict[str, str]:
    return dict.fromkeys(ALL, letter)


def _hidden(letter: str, running: str, rest: str = "M") -> dict[str, str]:
    """``letter`` on the hidden families, ``running`` on running-stats, ``rest`` else."""
    return {**_all(rest), "hidden-strided": letter, "hidden-overlap": letter,
            "running-stats": running}


# a ref the segment updates (hidden) is updated again by the backward recomputation,
# which also differentiates at the twice-updated value
_REF_CHECKPOINT = _hidden("D", "D")

EXPECTED_STATEFUL: dict[str, dict[str, str]] = {
    "JAX mutable-ref eager": _all("M"),
    "JAX mutable-ref jit eager": _all("M"),
    "JAX mutable-ref checkpoint": _REF_CHECKPOINT,
    "JAX mutable-ref jit checkpoint": _REF_CHECKPOINT,
    # no recomputation of the update, but a wrong hidden buffer where its two views
    # overlap (not where they interleave)
    "JAX mutable-ref checkpoint, everything_saveable": {**_all("M"), "hidden-overlap": "D"},
    "JAX checkpoint, nothing_saveable": _all("M"),
    "JAX checkpoint, everything_saveable": _all("M"),
    "JAX checkpoint, dots_saveable": _all("M"),
    "JAX checkpoint, save_only_these_names": _all("M"),
    "JAX checkpoint, offload to pinned host": _all("M"),
    "JAX jit checkpoint, prevent_cse=True": _all("M"),
    "JAX jit checkpoint, prevent_cse=False": _all("M"),
    "flax NNX module": _all("M"),
    "flax nnx.remat": _all("M"),
    "flax Linen module": _all("M"),
    "flax nn.remat": _all("M"),
    "keras-torch layers": _all("M"),
    # torch.utils.checkpoint restores torch's generator, not the SeedGenerator variable:
    # the recomputation draws again (generator, gradient) and re-assigns hidden variables
    "keras-torch RematScope(full)": _all("D"),
    "keras-torch keras.remat": _all("D"),
    "keras-jax layers": _all("M"),
    # the seed generator's assign inside jax.checkpoint, in a StatelessScope, leaks a tracer
    "keras-jax RematScope(full)": _all("R"),
    "keras-jax keras.remat": _all("R"),
}
# JAX_REMAT3=1: a ref the checkpointed function closes over is refused (AssertionError in
# partial_eval's _check_no_returned_refs; under jit AttributeError 'NullAccum' ... 'ref');
# refs the segment makes itself and functional policies replay correctly
REMAT3_EXPECTED: dict[str, dict[str, str]] = {
    **{f"{row}, JAX_REMAT3=1": _hidden("R", "R") for row in (
        "JAX mutable-ref checkpoint", "JAX mutable-ref jit checkpoint",
        "JAX mutable-ref checkpoint, everything_saveable")},
    **{f"{row}, JAX_REMAT3=1": _all("M") for row in (
        "JAX checkpoint, nothing_saveable", "JAX checkpoint, everything_saveable",
        "JAX checkpoint, dots_saveable", "JAX checkpoint, save_only_these_names",
        "JAX checkpoint, offload to pinned host", "JAX jit checkpoint, prevent_cse=True",
        "JAX jit checkpoint, prevent_cse=False")},
}

BUG_CLASS_STATEFUL: dict[str, str] = {
    "jax mutable refs": (
        "A jax.new_ref the checkpointed function closes over (module state) is written in "
        "place; the backward pass's recomputation applies the write again and "
        "differentiates at the twice-updated value: silently wrong gradient and state, the "
        "class jax-ml/jax#33050 set out to fix (an external ref's effect must run once)."),
    "jax remat3": (
        "With JAX_REMAT3=1 (JAX's next remat) a closed-over ref is refused instead of "
        "written twice: an R where the default remat gives a silent D."),
    "jax remat policies": (
        "Remat policies choose what is saved and what recomputed; on functional code every "
        "choice must give the same gradient, buffers and key (a policy that changed them "
        "would be a miscompiled recomputation)."),
    "jax everything_saveable refs": (
        "With policy=everything_saveable nothing should be recomputed, yet a ref written "
        "through two overlapping views ends with wrong values (the gradient is right): "
        "the ref's reads and writes are reordered or reused across the write."),
    "flax nnx.remat": (
        "NNX threads module state (Variables, BatchStat, the Rngs counter) through "
        "nnx.remat as explicit inputs and outputs: replay-safe by construction, the "
        "functional contrast to the torch rows."),
    "flax nn.remat": (
        "Linen's nn.remat lifts the module's scope: the mutable collections (batch_stats, "
        "the other variables) go in and come out of the checkpointed function as values, "
        "and make_rng derives each key from the scope path and a counter, so the "
        "recomputation draws the same numbers: replay-safe by construction, as NNX."),
    "keras torch remat": (
        "Keras 3's remat on torch is torch.utils.checkpoint(use_reentrant=False): the "
        "recomputation re-runs variable assigns (BatchNormalization's moving statistics) "
        "and advances a seeded SeedGenerator again, whose state torch's preserve_rng_state "
        "does not cover - the BatchNorm-under-checkpoint class of pytorch/pytorch#96136 "
        "in Keras."),
    "keras jax remat": (
        "Keras 3's remat on JAX is jax.checkpoint around a layer call whose variable "
        "assigns go to a StatelessScope outside the checkpoint: the assigned values are "
        "tracers of the checkpoint's trace (UnexpectedTracerError)."),
}


# The version strings the stateful adapters report (``version()``), as observed with
# VERSIONS: a record made with any other is shown with its observed cells and
# ``no-expectation``, like the compiled rows with another torch.
PINNED = frozenset({VERSIONS["jax"], f"{VERSIONS['flax']} (jax {VERSIONS['jax']})",
                    f"{VERSIONS['keras']} (torch {VERSIONS['torch']})",
                    f"{VERSIONS['keras']} (jax {VERSIONS['jax']})"})


def expected_stateful(row: str, family: str, version: str | None = None) -> str | None:
    """The expected letter of a stateful row's record (``row`` as records write it: an
    extra family's rows carry `` [family]``), or None. ``version``: the record's framework
    version; a version other than the pinned ones has no expectation (None: the letter
    observed with the pinned versions)."""
    if version is not None and version not in PINNED:
        return None
    row = row.removesuffix(f" [{family}]")
    table = EXPECTED_STATEFUL if row in EXPECTED_STATEFUL else REMAT3_EXPECTED
    return table.get(row, {}).get(family)
