"""replayverify's full ``check`` against ``torch.autograd.gradcheck``, side by side.

Run: python benchmarks/vs_gradcheck.py [--programs 24] [--repeat 15]

Both sides run in this one process, on one thread (``torch.set_num_threads(1)``, and the
BLAS thread variables set to 1 before NumPy loads), so the figures are ratios that do
not depend on the machine:

- replayverify: the median over derivative-family programs (seed 0; 8-16 ops, views
  of 4-16 float64 elements) of one full ``check_program`` (the interpreter, every
  reference check, the controls and the five engines), each program's time being the
  median of ``--repeat`` runs; the forward-Jacobian check alone: ``check_execution``
  with ``checks=("forward-jacobian",)`` on the program's execution (the work of that
  one record: tangents through the storage and the verdict; the interpreter run it
  judges is the artifact under test and is shared by every check); and, for
  reference, that check with the interpreter run included.
- torch: the median of ``--repeat`` runs of ``gradcheck`` with default settings on an
  idiomatic torch function of 16 float64 elements and 12 ops (shifted copy, tanh, mul
  by a shifted alias, axpby, sin, additive noise, strided write).

Without torch the benchmark prints one line and exits 0.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
from dataclasses import replace  # noqa: E402

from _timing import median_time  # noqa: E402

from replayverify.programs.generate import generate  # noqa: E402
from replayverify.programs.interpreter import execute  # noqa: E402
from replayverify.verifier.check import check_execution, check_program  # noqa: E402


def torch_case(torch):
    """The torch function (12 ops on 16 float64 elements) and its input."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(16, dtype=torch.float64, generator=gen, requires_grad=True)
    noise = torch.randn(16, dtype=torch.float64, generator=gen)
    w = torch.arange(1, 17, dtype=torch.float64)

    def f(x):
        h = torch.roll(x, 1)  # 1 shifted copy
        h = torch.tanh(1.5 * h)  # 2-3 scale, tanh
        h = h * torch.roll(h, -2)  # 4-5 mul by a shifted alias
        h = 0.7 * h + 0.3 * x + 0.1  # 6-9 axpby
        h = torch.sin(0.9 * h)  # 10-11 scale, sin
        h = h + 0.01 * noise  # additive noise
        out = h.clone()
        out[::2] = h[1::2].repeat_interleave(2)[: out[::2].numel()]  # 12 strided write
        return (w * out).sum()

    return f, x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("vs_gradcheck: torch is not installed; skipped (pip install 'replayverify[cohort]')")
        return
    torch.set_num_threads(1)
    f, x = torch_case(torch)
    assert torch.autograd.gradcheck(f, (x,))
    programs = [generate(0, i, "derivative") for i in range(args.programs)]
    for p in programs:  # warm-up: imports, first-call costs
        check_program(p)
    # Interleave the two sides so a change in machine load hits both alike.
    only = ("forward-jacobian",)
    full, fj, fj_ex, gc = [], [], [], []
    for p in programs:
        ex = execute(p)
        # a fresh program object per run: nothing derived (layouts, hash, Philox blocks)
        # carries over from the previous run, as in a suite where each program is new
        full.append(median_time(lambda p=p: check_program(replace(p)), args.repeat))
        fj.append(median_time(lambda ex=ex: check_execution(ex, checks=only), args.repeat))
        fj_ex.append(median_time(lambda p=p: check_program(replace(p), checks=only),
                                 args.repeat))
        gc.append(median_time(lambda: torch.autograd.gradcheck(f, (x,)), args.repeat))
    t_full, t_fj, t_fj_ex, t_gc = (statistics.median(v) for v in (full, fj, fj_ex, gc))
    ops = sorted(len(p.ops) for p in programs)
    print(f"programs: {len(programs)} derivative-family (seed 0, {ops[0]}-{ops[-1]} ops); "
          f"median of {args.repeat} runs each; 1 thread; torch {torch.__version__}")
    print(f"torch.autograd.gradcheck (16 elements, 12 ops)  {t_gc * 1e3:8.3f} ms")
    print(f"replayverify check, full                        {t_full * 1e3:8.3f} ms  "
          f"{t_full / t_gc:6.2f}x  (target <= 1.0x)")
    print(f"replayverify check, forward-Jacobian only       {t_fj * 1e3:8.3f} ms  "
          f"{t_fj / t_gc:6.2f}x  (target <= 0.1x)")
    print(f"  the same with the interpreter run included    {t_fj_ex * 1e3:8.3f} ms  "
          f"{t_fj_ex / t_gc:6.2f}x")


if __name__ == "__main__":
    main()
