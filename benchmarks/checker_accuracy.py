"""Accuracy of the independent derivative references on generated float64 programs.

For each program: the version-graph gradient (reverse sweep) against the forward
Jacobian and against the complex step, as max|g - g_ref| / max(1, max|g_ref|).
Targets (SPEC §5 and the paper this project follows): forward Jacobian <= 8.88e-16,
complex step <= 1e-15.

    python benchmarks/checker_accuracy.py --programs 1024 [--seed 0] [--family derivative]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from replayverify.programs import execute, generate
from replayverify.verifier.complex_step import complex_step
from replayverify.verifier.forward_jacobian import forward_jacobian


def relative(g: np.ndarray, g_ref: np.ndarray) -> float:
    if g_ref.size == 0:
        return 0.0
    return float(np.max(np.abs(g - g_ref))) / max(1.0, float(np.max(np.abs(g_ref))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--family", default="derivative")
    args = ap.parse_args()

    t0 = time.perf_counter()
    fj_worst = cs_worst = (0.0, "")
    coords = admitted = cs_programs = 0
    for i in range(args.programs):
        p = generate(args.seed, i, family=args.family, dtypes=("float64",))
        ex = execute(p, record_boundaries=False)
        if not ex.admission.supported:
            continue
        admitted += 1
        g = ex.gradient
        fj = forward_jacobian(p)
        fj_worst = max(fj_worst, (relative(g, fj.gradient), p.name))
        cs = complex_step(p)
        if cs.supported:
            cs_programs += 1
            coords += g.size
            cs_worst = max(cs_worst, (relative(g, cs.gradient), p.name))
    seconds = time.perf_counter() - t0
    print(f"family {args.family}, seed {args.seed}: {args.programs} programs, "
          f"{admitted} admitted, {seconds:.1f} s")
    print(f"forward-Jacobian vs version graph: max relative {fj_worst[0]:.3g} "
          f"(target 8.88e-16) at {fj_worst[1] or '-'}")
    print(f"complex-step vs version graph:     max relative {cs_worst[0]:.3g} "
          f"(target 1e-15) over {cs_programs} programs, {coords} coordinates, "
          f"at {cs_worst[1] or '-'}")


if __name__ == "__main__":
    main()
