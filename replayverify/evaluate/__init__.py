"""Executed plans: run planned per-segment policies on real workloads and measure them.

:func:`evaluate` calibrates each workload into a profile card, plans every method's policy
from it (:mod:`replayverify.planner`), checks each policy computes exactly what eager does,
then times all methods, paired, in fresh processes, and writes evaluate.json, report.md and
resource-map.png. The per-segment mechanics are :mod:`replayverify.gpu.segments`, shared with
the calibration. See docs/evaluate.md.
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
