"""Where a warm ``jax-state`` / ``jax-remat3`` child's seconds go (issue 26, speed).

Run: python benchmarks/stateful_profile.py [--seeds 420000:420004] [--remat3]
     [--methods ref-eager,jit-cse] [--families ...] [--no-memo]

One process does what one cohort child does (``CHILD_XLA_FLAGS``, a fresh persistent
compilation cache, every method of the framework on every case, key after key) and
splits each method's wall seconds into: tracing (outermost ``trace_to_jaxpr``, jit and
checkpoint bodies and eager primitives alike), lowering to MLIR and XLA compiling
(``jax.monitoring`` events; a persistent-cache hit counts as a compile of its retrieval
time), and the rest (execution, autodiff transforms, dispatch and Python). Timings are
only meaningful under ``flock /work/briefs/heavy.lock`` (common brief).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", default="420000:420004")
    ap.add_argument("--remat3", action="store_true")
    ap.add_argument("--methods", default="")
    ap.add_argument("--families", default="")
    ap.add_argument("--no-memo", action="store_true",
                    help="jit every case afresh (no JitMemo: main's code before it)")
    args = ap.parse_args()

    from replayverify.cohort.jax_state_adapter import CHILD_XLA_FLAGS

    cache = tempfile.mkdtemp(prefix="stateful-profile-cache-")
    os.environ.update({"XLA_FLAGS": CHILD_XLA_FLAGS, "JAX_COMPILATION_CACHE_DIR": cache,
                       "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                       "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"})
    if args.remat3:
        os.environ["JAX_REMAT3"] = "1"
    t = time.perf_counter()
    import jax
    from jax._src import monitoring
    from jax._src.interpreters import partial_eval as pe

    import_s = time.perf_counter() - t

    from replayverify.cohort import cases
    from replayverify.cohort.jax_state_adapter import (
        METHODS,
        REMAT3_METHODS,
        JaxStateInProcess,
    )
    from replayverify.cohort.runner import parse_seeds

    adapter = JaxStateInProcess()
    if args.no_memo:
        adapter.jits = None
    methods = REMAT3_METHODS if args.remat3 else METHODS
    if args.methods:
        methods = tuple(m for m in methods if m.name in args.methods.split(","))
    current = ["-"]
    acc: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def on_duration(event: str, secs: float, **kw) -> None:
        a = acc[current[0]]
        if event.endswith("jaxpr_to_mlir_module_duration"):
            a["lower"] += secs
        elif event.endswith("backend_compile_duration"):
            a["compile"] += secs
            a["compiles"] += 1

    def on_event(event: str, **kw) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            acc[current[0]]["cache_hits"] += 1

    monitoring.register_event_duration_secs_listener(on_duration)
    monitoring.register_event_listener(on_event)
    depth = [0]
    real_trace = pe.trace_to_jaxpr

    def timed_trace(*a, **kw):
        if depth[0]:
            return real_trace(*a, **kw)
        depth[0] += 1
        t0 = time.perf_counter()
        try:
            return real_trace(*a, **kw)
        finally:
            acc[current[0]]["trace"] += time.perf_counter() - t0
            depth[0] -= 1

    pe.trace_to_jaxpr = timed_trace

    lo, hi = parse_seeds(args.seeds)
    fams = tuple(args.families.split(",")) if args.families else None
    print(f"jax {jax.__version__}, import {import_s:.2f} s, remat3={args.remat3}, "
          f"memo={not args.no_memo}, "
          f"keys {lo}..{hi - 1}", flush=True)
    for seed in range(lo, hi):
        t_key = time.perf_counter()
        n = 0
        for case in cases(range(seed, seed + 1), extra=True):
            if fams and case.family not in fams:
                continue
            current[0] = "draw_tape"
            t0 = time.perf_counter()
            adapter.draw_tape(case)
            acc["draw_tape"]["wall"] += time.perf_counter() - t0
            for m in methods:
                if not m.applies(case):
                    continue
                current[0] = m.name
                t0 = time.perf_counter()
                try:
                    adapter.run(case, m)
                except Exception:  # a rejected case: its seconds count all the same
                    acc[m.name]["rejected"] += 1
                acc[m.name]["wall"] += time.perf_counter() - t0
                acc[m.name]["runs"] += 1
                n += 1
        print(f"key {seed}: {n} runs in {time.perf_counter() - t_key:.1f} s, "
              f"load {os.getloadavg()[0]:.2f}, RSS {_rss_mib():.0f} MiB", flush=True)
    print(f"{'method':28} {'runs':>5} {'wall':>7} {'trace':>7} {'lower':>7} {'compile':>8} "
          f"{'rest':>7} {'compiles':>8} {'hits':>6}")
    tot: dict[str, float] = defaultdict(float)
    for name, a in acc.items():
        rest = a["wall"] - a["trace"] - a["lower"] - a["compile"]
        for k in ("wall", "trace", "lower", "compile", "compiles", "cache_hits", "runs"):
            tot[k] += a[k]
        print(f"{name:28} {a['runs']:5.0f} {a['wall']:7.1f} {a['trace']:7.1f} "
              f"{a['lower']:7.1f} {a['compile']:8.1f} {rest:7.1f} {a['compiles']:8.0f} "
              f"{a['cache_hits']:6.0f}")
    rest = tot["wall"] - tot["trace"] - tot["lower"] - tot["compile"]
    print(f"{'all':28} {tot['runs']:5.0f} {tot['wall']:7.1f} {tot['trace']:7.1f} "
          f"{tot['lower']:7.1f} {tot['compile']:8.1f} {rest:7.1f} {tot['compiles']:8.0f} "
          f"{tot['cache_hits']:6.0f}")
    sys.stdout.flush()


def _rss_mib() -> float:
    """This process's resident set now (Linux /proc), MiB."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


if __name__ == "__main__":
    main()
