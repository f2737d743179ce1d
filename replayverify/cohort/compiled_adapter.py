"""The torch.compile adapter: compiled checkpointing, compiled selective checkpointing,
and the partitioner's own recomputation under ``activation_memory_budget``.

Each run builds the world as the torch adapter does (``torch_adapter._Run``: buffers,
``as_strided`` views, the input leaves, the same draws from the same seeded generator)
and compiles the forward up to the end of the checkpointed segment: a function ``fwd``
of every buffer that runs the ops before the segment and the segment and returns the
buffers (the module a user compiles). The ops after the segment (the hidden buffer's
later mutation, the second draw), the loss and ``backward()`` run eagerly after it, as
what happens between that module's forward and backward. The segment is a function of
the non-hidden buffers it touches that clones those it writes and reads hidden buffers
from the enclosing scope; per method it is

- wrapped in ``checkpoint(use_reentrant=False, preserve_rng_state=True)`` (the compiled
  non-reentrant checkpoint, a higher-order op under Dynamo);
- the same with ``context_fn`` = ``create_selective_checkpoint_contexts`` under a policy
  that recomputes everything, or one that saves the random ops' outputs (MUST_SAVE:
  the documented way to keep selective checkpointing RNG-safe);
- called directly (no user checkpoint), compiled under
  ``torch._functorch.config.activation_memory_budget`` 0.0 and 0.5 (the min-cut
  partitioner recomputes to meet the budget) and 1.0 (the default: a control).

Backends: ``aot_eager`` (AOTAutograd with the eager kernels; no C++ compiler) and
``inductor`` with ``torch._inductor.config.fallback_random = True``, so that inductor
draws with eager's generator and the reference fed the draw tape applies (inductor's
default RNG draws its own numbers by design: no tape could feed the reference).

Honest records: ``fullgraph=True`` (a graph break raises instead of running eager
code); ``torch._dynamo.reset()`` before each case; the config patches stay active
through ``backward()`` (AOTAutograd compiles the backward on first use); a compile-time
error is reported with its phase. A graph break, a recompile-limit fallback or a cache
hit from another case gives an ``unsupported`` record with the reason (``Unsupported``
below), never a compiled result: the run counts Dynamo's frames and compiles around the
call and refuses anything but exactly one fresh, whole-graph compile.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import shutil
import warnings
from collections.abc import Iterator
from typing import Any

from replayverify.cohort._ops import RULES, element_geometry, unsupported_ops
from replayverify.cohort.adapter import DrawTape, Method, NotRun, Observation, first_line
from replayverify.cohort.cases import Case
from replayverify.cohort.torch_adapter import (
    TorchAdapter,
    _draw,
    _isolated,
    _rng_bytes,
    _Run,
)

# inductor compiles its C++ kernels one at a time in each worker process (the cohort's
# workers are the parallelism); set before torch reads it, overridable by the user
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

BACKENDS = ("aot_eager", "inductor")
# kind -> (row suffix, what it does)
KINDS = {
    "checkpoint": ("non-reentrant checkpoint",
                   "checkpoint(use_reentrant=False, preserve_rng_state=True) inside the "
                   "compiled forward"),
    "sac-recompute": ("SAC, recompute all",
                      "create_selective_checkpoint_contexts, every op PREFER_RECOMPUTE"),
    "sac-save-rng": ("SAC, random ops saved",
                     "create_selective_checkpoint_contexts, random ops MUST_SAVE, the rest "
                     "PREFER_RECOMPUTE"),
    "budget-0": ("no checkpoint, memory budget 0.0",
                 "activation_memory_budget=0.0: the partitioner recomputes what it can"),
    "budget-0.5": ("no checkpoint, memory budget 0.5",
                   "activation_memory_budget=0.5"),
    "budget-1": ("no checkpoint, memory budget 1.0 (control)",
                 "activation_memory_budget=1.0 (the default): no recomputation"),
}
BUDGET = {"budget-0": 0.0, "budget-0.5": 0.5, "budget-1": 1.0}
COMPILER_HINT = ("inductor needs a working C++ compiler (none found on PATH: install gcc "
                 "or g++, or set CXX); the aot_eager rows do not")


def row_label(backend: str, kind: str) -> str:
    return f"torch.compile {backend}, {KINDS[kind][0]}"


def _methods(backends: tuple[str, ...]) -> tuple[Method, ...]:
    return tuple(Method(f"{b}:{k}", row_label(b, k), doc=f"{b}: {doc}")
                 for b in backends for k, (_, doc) in KINDS.items())


class Unsupported(NotRun):
    """The compiled run did not happen as a compiled run (a graph break, a recompile
    fallback, a cache hit, a missing compiler): an ``unsupported`` record."""


class CompiledAdapter:
    """torch.compile with the aot_eager and inductor backends."""

    label = "torch.compile"
    shrink_checks = 8  # shrinking candidates run per reproducer: each one compiles

    def __init__(self, backends: tuple[str, ...] = BACKENDS, name: str = "torch-compile"):
        self.backends, self.name = tuple(backends), name
        self._eager = TorchAdapter()

    def missing(self) -> str | None:
        return self._eager.missing()

    def version(self) -> str:
        return self._eager.version()

    def methods(self, extra: bool = False) -> tuple[Method, ...]:
        return _methods(self.backends)

    def draw_tape(self, case: Case) -> DrawTape:
        return self._eager.draw_tape(case)

    def plain_method(self, method: Method) -> Method:
        return Method("eager", "torch native eager")

    def reproducer(self, case: Case, method: Method, record: dict) -> str | None:
        """A standalone script: the case compiled as here (``torch_repro.script``)."""
        from replayverify.cohort.torch_adapter import plain_matches
        from replayverify.cohort.torch_repro import PLAIN, script

        backend, kind = method.name.split(":", 1)
        imports = ["from torch.utils.checkpoint import checkpoint",
                   "import torch._functorch.config"]
        context = [f"torch._functorch.config.patch(activation_memory_budget="
                   f"{BUDGET.get(kind, 1.0)})"]
        if backend == "inductor":
            imports[1] += ", torch._inductor.config"
            context.append("torch._inductor.config.patch(fallback_random=True)")
        ckpt = "lambda f, *a: checkpoint(f, *a, use_reentrant=False, preserve_rng_state=True"
        if kind.startswith("budget"):
            ckpt = PLAIN
        elif kind.startswith("sac"):
            imports[0] += ", create_selective_checkpoint_contexts as sac, CheckpointPolicy as P"
            # the random ops this script draws with: randn (noise), rand (dropout)
            policy = "P.MUST_SAVE if op in (torch.ops.aten.randn.default, " \
                     "torch.ops.aten.rand.default) else P.PREFER_RECOMPUTE" \
                if kind == "sac-save-rng" else "P.PREFER_RECOMPUTE"
            imports.append(f"CTX = lambda: sac(lambda ctx, op, *x, **k: {policy})")
            ckpt += ", context_fn=CTX)"
        else:
            ckpt += ")"
        return script(case, title=f"replayverify cohort reproducer: {record['row']} on "
                                  f"{case.id} (torch {self.version()})",
                      ckpt=ckpt, imports=tuple(imports), context=", ".join(context),
                      wrap=f"lambda f: torch.compile(f, backend={backend!r}, fullgraph=True)",
                      clone_reads=not plain_matches(self._eager, case))

    def unsupported(self, method: Method) -> str | None:
        """Why ``method`` cannot run here at all (None: it can)."""
        if method.name.startswith("inductor:") and not compiler_found():
            return COMPILER_HINT
        return None

    def run(self, case: Case, method: Method) -> Observation:
        import torch

        if method.name == "eager":  # the plain run (reproducers compare with it)
            return self._eager.run(case, method)
        bad = unsupported_ops(case.program)
        if bad:
            raise NotImplementedError(f"the torch.compile adapter does not translate {bad}")
        why = self.unsupported(method)
        if why:
            raise Unsupported(why)
        backend, kind = method.name.split(":", 1)
        with _few_collections(), _isolated(torch, case.draw_seed), \
                _config(torch, backend, kind):
            torch._dynamo.reset()
            run = _CompiledRun(torch, case)
            run.forward(backend, kind)
            _phase("backward", run.backward)
            return Observation(run.gradient(), run.buffer_bytes(), _rng_bytes(torch))


YOUNG = 100_000  # allocations between young collections in a compiled run (Python's default: 700)
_FROZEN_IN = [0]  # the process (pid) whose heap _few_collections froze


@contextlib.contextmanager
def _few_collections() -> Iterator[None]:
    """Fewer garbage collections while a method compiles and runs. Neither change alters
    what is computed, only how often the collector walks the heap: on key 420001's 14
    aot_eager tasks the collector's time fell from ~0.6 s to ~0.2 s a task (of ~6 s,
    load ~7).

    - The young generation is collected every ``YOUNG`` allocations instead of 700: a
      compile allocates millions of container objects, and at the default threshold
      the collector runs thousands of times per compile, mostly to find them alive.
      The threshold is given back afterwards.
    - After a process's first compiled run, what is alive is collected once and frozen
      (``gc.freeze``): torch's modules and the compiler's machinery, ~400,000 objects
      the first compile imports and builds, which every later full collection would
      walk again (what is frozen is never collected, even if dropped later: it lives as
      long as the process, as torch's modules do anyway). Objects made afterwards, the
      runs' own, are collected as before; a forked child freezes its own heap on its
      first run.

    ``_config`` also turns off Dynamo's own ``gc.collect(1)`` after every compile
    (``run_gc_after_compile``; ~14 ms a compile, ~1 % of a compiled method), leaving the
    collector's schedule to this threshold.
    """
    old = gc.get_threshold()
    gc.set_threshold(YOUNG, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        if _FROZEN_IN[0] != os.getpid():
            _FROZEN_IN[0] = os.getpid()
            gc.collect()
            gc.freeze()


def aot_eager_only() -> CompiledAdapter:
    """``--frameworks torch-compile-aot-eager``: the aot_eager rows alone."""
    return CompiledAdapter(("aot_eager",), "torch-compile-aot-eager")


def inductor_only() -> CompiledAdapter:
    """``--frameworks torch-compile-inductor``: the inductor rows alone."""
    return CompiledAdapter(("inductor",), "torch-compile-inductor")


def compiler_found() -> bool:
    """Whether inductor's C++ compiler is on PATH (what it calls: $CXX, else g++/c++)."""
    cxx = os.environ.get("CXX")
    return bool(cxx and shutil.which(cxx)) or any(
        shutil.which(c) for c in ("g++", "c++", "clang++"))


@contextlib.contextmanager
def _config(torch: Any, backend: str, kind: str) -> Iterator[None]:
    """The method's config patches, active through forward and backward."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with contextlib.ExitStack() as stack:
        # quiet: anomaly-mode tracebacks of AOTAutograd's tracing, Dynamo's advice on
        # context_fn (the records carry what happened)
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        for name in ("torch._dynamo", "torch._higher_order_ops"):
            log = logging.getLogger(name)
            stack.callback(log.setLevel, log.level)
            log.setLevel(logging.ERROR)
        stack.enter_context(functorch_config.patch(
            activation_memory_budget=BUDGET.get(kind, 1.0)))
        # no gc.collect(1) after each compile (Dynamo's default): _few_collections
        # decides when the collector runs; what is compiled does not change
        stack.enter_context(torch._dynamo.config.patch(run_gc_after_compile=False))
        if backend == "inductor":
            stack.enter_context(inductor_config.patch(fallback_random=True,
                                                      compile_threads=1))
        yield


def _phase(phase: str, fn, *args):
    """Run ``fn``. A backend compiler failure (``BackendCompilerFailed`` wraps every
    error of the backend, AOTAutograd's tracing included) is re-raised as its inner
    exception's type with the phase and first line; Dynamo refusing to trace the whole
    function (a graph break under ``fullgraph=True``) is ``Unsupported``."""
    from torch._dynamo.exc import BackendCompilerFailed
    from torch._dynamo.exc import Unsupported as DynamoUnsupported

    try:
        return fn(*args)
    except BackendCompilerFailed as exc:
        inner = getattr(exc, "inner_exception", None) or exc
        if type(inner).__name__ in ("CppCompileError", "InvalidCxxCompiler"):
            raise Unsupported(f"{COMPILER_HINT} ({type(inner).__name__}: "
                              f"{first_line(inner)})") from None
        raise _renamed(inner, phase) from None
    except DynamoUnsupported as exc:
        raise Unsupported(f"graph break ({phase}): {first_line(exc)}") from None


def _renamed(exc: BaseException, phase: str) -> Exception:
    """An exception of the same type name whose message leads with the phase."""
    cls = type(type(exc).__name__, (Exception,), {})
    return cls(f"{phase}: {first_line(exc)}")


class _CompiledRun(_Run):
    """The torch adapter's world with the forward compiled."""

    def __init__(self, torch: Any, case: Case):
        # plain values per view and op, so Dynamo traces tensors only
        self.geom = {v.name: (v.buffer, *element_geometry(case.program, v.name))
                     for v in case.program.views}
        super().__init__(torch, case, functional=False)
        self.steps = [(RULES[op.kind], op.dst, tuple((f, getattr(op, f))
                                                      for f in op.spec.sources),
                       {c: float(op.coef(c)) for c in ("a", "b", "c", "sigma", "keep")
                        if getattr(op, c, None) is not None},
                       op if op.spec.draws else None, self.p.view(op.dst).size,
                       k in case.roles.untracked)
                      for k, op in enumerate(self.p.ops)]

    def view(self, bufs: dict, name: str) -> Any:
        b, shape, strides, offset = self.geom[name]
        return bufs[b].as_strided(shape, strides, offset)

    def ops(self, ks: range, bufs: dict, log: list | None = None) -> None:
        torch, dtype = self.torch, self.dtype
        for k in ks:
            rule, dst, sources, coefs, draw, n, untracked = self.steps[k]
            o = {f: self.view(bufs, v) for f, v in sources}
            z = _draw(torch, draw, n, dtype) if draw is not None else None

            def c(name, coefs=coefs):
                return torch.tensor(coefs[name], dtype=dtype)

            if untracked:
                with torch.no_grad():
                    values = rule(c, o, z).clone()
            else:
                values = rule(c, o, z)
            self.write(bufs, dst, values)

    def forward(self, backend: str, kind: str) -> None:
        torch = self.torch
        p = self.p
        lo = self.case.segment_ops()
        hidden = set(self.case.roles.hidden)
        touched = {p.view(v).buffer for k in lo for v in p.ops[k].views()}
        written = {p.view(p.ops[k].dst).buffer for k in lo}
        args = sorted(touched - hidden)
        owned = sorted(written - hidden)
        names = list(self.bufs)
        ckpt = _checkpointer(torch, kind)

        def fwd(*tensors):
            bufs = dict(zip(names, tensors))
            self.ops(range(0, lo.start), bufs)

            def segment(*seg_tensors):
                local = dict(zip(args, seg_tensors))
                for name in owned:
                    local[name] = local[name].clone()
                for name in hidden:
                    local[name] = bufs[name]
                self.ops(lo, local)
                return tuple(local[name] for name in owned)

            bufs.update(zip(owned, ckpt(segment, *(bufs[name] for name in args))))
            return tuple(bufs[name] for name in names)

        compiled = torch.compile(fwd, backend=backend, fullgraph=True)
        frames = _Frames(torch)
        outs = _phase("compile", compiled, *(self.bufs[name] for name in names))
        frames.check()
        self.bufs.update(zip(names, outs))
        self.ops(range(lo.stop, len(p.ops)), self.bufs)  # eager, between forward and backward


def _checkpointer(torch: Any, kind: str):
    from torch.utils.checkpoint import checkpoint

    if kind.startswith("budget"):
        return lambda fn, *a: fn(*a)
    if kind == "checkpoint":
        return functools.partial(checkpoint, use_reentrant=False, preserve_rng_state=True)
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    policy = _save_random(torch) if kind == "sac-save-rng" else _recompute_all(torch)
    return functools.partial(
        checkpoint, use_reentrant=False, preserve_rng_state=True,
        context_fn=functools.partial(create_selective_checkpoint_contexts, policy))


def _recompute_all(torch: Any):
    from torch.utils.checkpoint import CheckpointPolicy

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


RANDOM_OPS = ("randn", "rand", "randn_like", "rand_like", "bernoulli", "native_dropout",
              "uniform", "normal")


def _save_random(torch: Any):
    from torch.utils.checkpoint import CheckpointPolicy

    random = {getattr(torch.ops.aten, n) for n in RANDOM_OPS if hasattr(torch.ops.aten, n)}

    def policy(ctx, op, *args, **kwargs):
        packet = getattr(op, "overloadpacket", op)
        return CheckpointPolicy.MUST_SAVE if packet in random else \
            CheckpointPolicy.PREFER_RECOMPUTE

    return policy


class _Frames:
    """Dynamo's counters around one call: exactly one frame, compiled fresh, no graph
    break, no recompile fallback, or Unsupported."""

    def __init__(self, torch: Any):
        from torch._dynamo.utils import counters

        counters.clear()
        self.counters = counters

    def check(self) -> None:
        c = self.counters
        breaks = sum(c["graph_break"].values())
        if breaks:
            raise Unsupported(f"graph break: {next(iter(c['graph_break']))}")
        graphs = c["stats"].get("unique_graphs", 0)
        aot = c["aot_autograd"]
        if graphs != 1 or aot.get("ok", 0) != 1:
            raise Unsupported(f"not one fresh compile ({graphs} graphs captured, "
                              f"{aot.get('ok', 0)} compiled by AOTAutograd): "
                              "a recompile fallback or a cache hit from another case")
