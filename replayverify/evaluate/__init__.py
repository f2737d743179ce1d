"""Executed plans: run planned per-segment policies on real workloads and measure them.

:func:`evaluate` calibrates each workload into a profile card, plans every method's policy
from it (:mod:`replayverify.planner`), checks each policy computes exactly what eager does,
then times all methods, paired, in fresh processes, and writes evaluate.json, report.md and
resource-map.png. See docs/evaluate.md.

Modules: ``run`` (the study, in fresh processes), ``measure`` (what one process measures),
``workloads`` (the cells and the methods), ``segments`` (the per-segment policies executed on
NumPy or CuPy through the array module ``xp``: one implementation for the calibration and the
evaluation), ``calibrate`` (the cost calibration, ``replayverify gpu calibrate``),
``calibration_report`` and ``report`` (their reports), ``stats``, ``cli``. With
``backend="numpy"`` nothing of the CuPy backend (:mod:`replayverify.gpu`) is imported beyond the
region journal's NumPy reference (``gpu/journal.py``).
"""

from replayverify.evaluate.run import DEFAULT_SCALE, EvaluateError, evaluate
from replayverify.evaluate.stats import Ratio, geometric_mean, paired_ratio
from replayverify.evaluate.workloads import (
    LABELS,
    METHODS,
    ActivationStep,
    Cell,
    make_step,
    paper_cells,
)

__all__ = [
    "DEFAULT_SCALE",
    "LABELS",
    "METHODS",
    "ActivationStep",
    "Cell",
    "EvaluateError",
    "Ratio",
    "evaluate",
    "geometric_mean",
    "make_step",
    "paired_ratio",
    "paper_cells",
]
