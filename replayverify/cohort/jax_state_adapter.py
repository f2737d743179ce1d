"""JAX's stateful recomputation APIs: mutable refs, remat policies, ``JAX_REMAT3``.

Framework ``jax-state`` (rows beyond the paper, docs/cohort.md "Stateful recomputation
APIs"), on the JAX adapter's execution (``jax_adapter._Run``: the same reads, writes,
draws and key threading, so the reference and the tape are the JAX adapter's):

- **mutable refs** (``jax.new_ref``): every buffer lives in a ref and every op writes
  its view in place through it (``ref[lo:hi:step] = values``). Hidden buffers are refs
  created before ``jax.vjp`` and closed over, like module state; the other buffers are
  refs the differentiated function creates. With a checkpoint, the segment gets the
  values of the buffers it does not hide, puts them in refs of its own, and returns
  their values with the key. Each with and without ``jax.jit`` around the program.
  Hidden refs are read after the backward pass: what a recomputation did to them shows.
- **remat policies** on the functional program: ``jax.checkpoint(policy=...)`` with
  ``nothing_saveable``, ``everything_saveable``, ``dots_saveable``,
  ``save_only_these_names("draw")`` and the offload policy
  ``save_and_offload_only_these_names`` (device to pinned host), the draw op's output
  named ``"draw"`` with ``checkpoint_name``; and ``prevent_cse`` both ways under jit.

``jax-remat3`` runs the checkpoint methods with ``JAX_REMAT3=1``, which JAX reads at
import: in a child process of each worker (``isolated.py``).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from replayverify.cohort.adapter import Method, Observation
from replayverify.cohort.cases import Case
from replayverify.cohort.isolated import IsolatedAdapter
from replayverify.cohort.jax_adapter import _COEFS, HINT, JaxAdapter, _key_bytes, _Run


@dataclass(frozen=True)
class How:
    """How a method runs the program: buffers in refs or not, a checkpoint with its
    policy and ``prevent_cse``, jit."""

    refs: bool = False
    checkpoint: bool = True
    jit: bool = False
    policy: str | None = None
    prevent_cse: bool = True


HOW: dict[str, How] = {
    "ref-eager": How(refs=True, checkpoint=False),
    "ref-jit-eager": How(refs=True, checkpoint=False, jit=True),
    "ref-checkpoint": How(refs=True),
    "ref-jit-checkpoint": How(refs=True, jit=True),
    "ref-checkpoint-everything": How(refs=True, policy="everything_saveable"),
    "policy-nothing": How(policy="nothing_saveable"),
    "policy-everything": How(policy="everything_saveable"),
    "policy-dots": How(policy="dots_saveable"),
    "policy-names": How(policy="save_only_these_names"),
    "policy-offload": How(policy="save_and_offload_only_these_names"),
    "jit-cse": How(jit=True),
    "jit-no-cse": How(jit=True, prevent_cse=False),
}
METHODS = (
    Method("ref-eager", "JAX mutable-ref eager",
           doc="buffers in jax.new_ref refs written in place, jax.vjp, no checkpoint"),
    Method("ref-jit-eager", "JAX mutable-ref jit eager", doc="the same under jax.jit"),
    Method("ref-checkpoint", "JAX mutable-ref checkpoint",
           doc="the segment under jax.checkpoint: hidden buffers in refs made outside it, "
               "its own buffers in refs it makes from the values it is given"),
    Method("ref-jit-checkpoint", "JAX mutable-ref jit checkpoint", doc="the same under jit"),
    Method("ref-checkpoint-everything", "JAX mutable-ref checkpoint, everything_saveable",
           doc="ref-checkpoint with policy=everything_saveable"),
    Method("policy-nothing", "JAX checkpoint, nothing_saveable",
           doc="functional, jax.checkpoint(policy=nothing_saveable)"),
    Method("policy-everything", "JAX checkpoint, everything_saveable",
           doc="functional, policy=everything_saveable"),
    Method("policy-dots", "JAX checkpoint, dots_saveable", doc="functional, dots_saveable"),
    Method("policy-names", "JAX checkpoint, save_only_these_names",
           doc="functional, the draw op's output named 'draw' with checkpoint_name, "
               "policy=save_only_these_names('draw')"),
    Method("policy-offload", "JAX checkpoint, offload to pinned host",
           doc="functional, policy=save_and_offload_only_these_names(offloaded: 'draw', "
               "device -> pinned_host)"),
    Method("jit-cse", "JAX jit checkpoint, prevent_cse=True", doc="functional, under jit"),
    Method("jit-no-cse", "JAX jit checkpoint, prevent_cse=False",
           doc="functional, under jit, jax.checkpoint(prevent_cse=False)"),
)
PLAIN = METHODS[0]  # ref-eager: the plain run of the reproducers (cohort/repro.py)
REMAT3 = ", JAX_REMAT3=1"
REMAT3_METHODS = tuple(Method(m.name, m.row + REMAT3, m.families, m.doc + "; JAX_REMAT3=1")
                       for m in METHODS if HOW[m.name].checkpoint)


def _policy(jax: Any, name: str | None) -> Any:
    cp = jax.checkpoint_policies
    if name is None:
        return None
    if name == "save_only_these_names":
        return cp.save_only_these_names("draw")
    if name == "save_and_offload_only_these_names":
        return cp.save_and_offload_only_these_names(
            names_which_can_be_saved=[], names_which_can_be_offloaded=["draw"],
            offload_src="device", offload_dst="pinned_host")
    return getattr(cp, name)


class JaxStateInProcess(JaxAdapter):
    """JAX mutable refs and remat policies, in this process (the child of ``jax-state``
    and ``jax-remat3``)."""

    name = "jax-state"
    label = "JAX"

    def __init__(self) -> None:
        self.jits = JitMemo()  # this process's jitted programs, by method and shape

    def methods(self, extra: bool = False) -> tuple[Method, ...]:
        return METHODS

    def run(self, case: Case, method: Method) -> Observation:
        import jax

        with jax.enable_x64(True):
            return _StateRun(jax, case, method.name, self.jits).observe()


class _Ref:
    """A buffer held in a JAX ref (so reads and writes go through it in place)."""

    def __init__(self, ref: Any):
        self.ref = ref


def _value(buf: Any) -> Any:
    return buf.ref[...] if isinstance(buf, _Ref) else buf


class _StateRun(_Run):
    def __init__(self, jax: Any, case: Case, method: str,
                 jit: Callable[[_StateRun], Any] | None = None):
        super().__init__(jax, case, method)
        self.how = HOW[method]
        self.hidden: dict[str, _Ref] = {}
        # a jit method's jitted program (``with_numbers``): made here, or by ``jit``
        self.jit = jit or jit_afresh

    def read(self, bufs: dict, name: str) -> Any:
        buf = bufs[self.p.view(name).buffer]
        if not isinstance(buf, _Ref):
            return super().read(bufs, name)
        return buf.ref[self._slice(name)]

    def store(self, bufs: dict, name: str, values: Any) -> None:
        buf = bufs[self.p.view(name).buffer]
        if not isinstance(buf, _Ref):
            return super().store(bufs, name, values)
        buf.ref[self._slice(name)] = values.reshape(-1)

    def _slice(self, name: str) -> slice:
        v = self.p.view(name)
        if len(v.shape) != 1:
            raise NotImplementedError("the mutable-ref methods write 1-D views only")
        lo, n, step = v.offset // v.itemsize, v.shape[0], v.strides[0] // v.itemsize
        return slice(lo, lo + (n - 1) * step + 1, step)

    def draw(self, key: Any, op) -> tuple[Any, Any]:
        # Under jit, XLA fuses the draw with its consumer and computes some normals in
        # another way than the draw alone (measured: 151 of 200 8-element float32 draws
        # differ in a bit even without FMA); a barrier keeps the draw a computation of
        # its own, computed as draw_tape computes it.
        key, z = super().draw(key, op)
        return key, (self.jax.lax.optimization_barrier(z) if self.how.jit else z)

    def tag(self, op, values: Any) -> Any:
        if op.spec.draws and self.how.policy is not None:
            from jax.ad_checkpoint import checkpoint_name

            return checkpoint_name(values, "draw")
        return values

    def program(self, xs: tuple) -> tuple:
        if not self.how.refs:
            return super().program(xs)
        bufs = self.start_buffers()
        for name, x in zip(self.p.inputs, xs):
            b = self.p.view(name).buffer
            bufs[b] = self.written(bufs[b], name, x)
        refs: dict[str, Any] = {b: _Ref(self.jax.new_ref(v)) for b, v in bufs.items()
                                if b not in self.hidden}
        refs.update(self.hidden)
        key = self.jax.random.key(self.seed())
        seg, n = self.case.segment_ops(), len(self.p.ops)
        if not self.how.checkpoint:
            key = self.ops(range(n), refs, key)
        else:
            key = self.ops(range(seg.start), refs, key)
            key = self.checkpointed(seg, refs, key)
            key = self.ops(range(seg.stop, n), refs, key)
        jnp = self.jnp
        w = self.number("weights", self.p.loss.weights, jnp.float64)
        values = self.read(refs, self.p.loss.view).reshape(-1).astype(jnp.float64)
        return jnp.sum(w * values), ({b: _value(r) for b, r in refs.items()
                                      if b not in self.hidden}, key)

    def checkpointed(self, seg: range, bufs: dict, key: Any) -> Any:
        how = self.how
        names = sorted(b for b in bufs if b not in self.hidden)

        def segment(values: tuple, key: Any) -> tuple:
            local: dict[str, Any] = dict(zip(names, values))
            if how.refs:  # the segment's own buffers: refs it makes
                local = {n: _Ref(self.jax.new_ref(v)) for n, v in local.items()}
            local.update(self.hidden)
            key = self.ops(seg, local, key)
            return tuple(_value(local[n]) for n in names), key

        fn = self.jax.checkpoint(segment, policy=_policy(self.jax, how.policy),
                                 prevent_cse=how.prevent_cse)
        values, key = fn(tuple(_value(bufs[n]) for n in names), key)
        for n, v in zip(names, values):
            if isinstance(bufs[n], _Ref):
                bufs[n].ref[...] = v
            else:
                bufs[n] = v
        return key

    def with_numbers(self, xs: tuple, given: dict) -> tuple:
        """``program(xs)`` with the case's numbers taken from ``given`` (``numbers()``)."""
        self.given = given
        try:
            return self.program(xs)
        finally:
            self.given = None

    def observe(self) -> Observation:
        import numpy as np

        jax, jnp = self.jax, self.jnp
        if self.how.refs:
            self.hidden = {h: _Ref(jax.new_ref(self.start[h])) for h in self.case.roles.hidden}
        xs = tuple(self.start[self.p.view(n).buffer][self.index[n]] for n in self.p.inputs)
        fn = self.program
        if self.how.jit:
            # the case's numbers are arguments of the jitted program, not constants in
            # it: cases of the same shape lower to the same module, and the persistent
            # compilation cache (compile_cache.py) compiles it once (docs/cohort.md,
            # "Speed"); the arithmetic is the same, op by op
            jitted, given = self.jit(self), self.numbers()
            fn = lambda xs: jitted(xs, given)  # noqa: E731
        _loss, vjp, (bufs, key) = jax.vjp(fn, xs, has_aux=True)
        (grads,) = vjp(jnp.ones((), jnp.float64))
        gradient = np.concatenate([np.asarray(g, np.float64).reshape(-1) for g in grads]) \
            if grads else np.zeros(0)
        bufs = {**bufs, **{h: r.ref[...] for h, r in self.hidden.items()}}  # after backward
        return Observation(gradient, {n: np.asarray(b).tobytes() for n, b in bufs.items()},
                           _key_bytes(jax, key))


def jit_afresh(run: _StateRun) -> Any:
    """``run``'s program jitted for it alone (numbers as arguments, ``with_numbers``)."""
    return run.jax.jit(run.with_numbers)


def shape_key(case: Case, starts: bool) -> tuple:
    """Everything of ``case`` a jit method's trace reads but ``numbers()``: the dtype, the
    buffers, the views (a 1-D view's start only with ``starts``, where the method slices
    at it statically: the mutable-ref methods), each op but its coefficients' values,
    the inputs, the loss view, the segments and the roles. Two cases with one key trace
    to the same program (``numbers()`` gives each its own arguments)."""
    p = case.program

    def view(v) -> tuple:
        return tuple(None if f.name == "offset" and len(v.shape) == 1 and not starts
                     else getattr(v, f.name) for f in dataclasses.fields(v))

    def op(o) -> tuple:
        return tuple(getattr(o, f.name) is not None if f.name in _COEFS
                     else getattr(o, f.name) for f in dataclasses.fields(o))

    return (case.dtype, p.buffers, tuple(map(view, p.views)), tuple(map(op, p.ops)),
            p.inputs, p.loss.view, len(p.loss.weights), p.segments, case.roles)


class JitMemo:
    """The jitted programs of the last ``size`` (method, ``shape_key``) pairs this process
    ran: a case whose shape is among them is dispatched through JAX's own caches, with no
    tracing, lowering or compiling (docs/cohort.md, "Speed").

    It relies on ``shape_key``: what it leaves out, ``with_numbers`` takes as arguments,
    so a program traced for one case of a shape is the program of all of them. A run
    whose program closes over refs of its own (hidden buffers in refs, made for that
    case) is jitted afresh, never memoised. Bounded because each entry keeps its two
    executables and JAX's caches for them alive: ~8-14 MiB of the child's memory
    (measured: unbounded over 50 keys, a ``jax-state`` child grew to 6.8 GB and two of
    them and two ``jax-remat3`` ones filled the 24 GB machine). The least recently used
    pair goes first.
    """

    def __init__(self, size: int = 128) -> None:
        self.size = size
        self.jitted: OrderedDict[tuple, Any] = OrderedDict()

    def __call__(self, run: _StateRun) -> Any:
        if run.hidden:
            return jit_afresh(run)
        key = (run.method, shape_key(run.case, starts=run.how.refs))
        if key in self.jitted:
            self.jitted.move_to_end(key)
            return self.jitted[key]
        if len(self.jitted) >= self.size:
            self.jitted.popitem(last=False)
        jitted = self.jitted[key] = jit_afresh(run)
        return jitted


# XLA:CPU contracts a*x + b into a fused multiply-add under jit (measured with jax 0.10.2:
# 173 of 1,000 float32 (a*x + b*y) + c differ from the ops one by one in the last bit);
# without AVX2 there is no FMA, and jit computes each op correctly rounded, as the
# reference does. The flag is read when the backend starts: in the child.
NO_FMA = "--xla_cpu_max_isa=AVX"
# Eager JAX compiles every primitive anew for each distinct shape and slice, and jit each
# case's program: compiling is nearly all of these rows' time. These flags halve XLA:CPU's
# compile time (measured: 2.2 -> 1.0 s CPU for the ~50 compiles of one eager case, 1.4 ->
# 0.6 s for a jit case) and leave the arithmetic as it is: no fast math either way, no
# FMA (AVX), IEEE ops correctly rounded whatever LLVM optimises; the records of a
# multi-key run are identical with and without them (docs/cohort.md, "Speed"). One LLVM
# module per executable, not split for parallel codegen: these modules are small, the
# split costs more than its threads win on a loaded machine (measured: 21-23 -> 17-18 CPU
# seconds for the 297 compiles of 28 case-methods), and it changes where code is
# compiled, not what it computes (the observations' bytes identical both ways).
FAST_COMPILE = ("--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
                " --xla_cpu_use_fusion_emitters=false --xla_cpu_parallel_codegen_split_count=1")
CHILD_XLA_FLAGS = f"{NO_FMA} {FAST_COMPILE}"
TARGET = "replayverify.cohort.jax_state_adapter:JaxStateInProcess"


class JaxStateAdapter(IsolatedAdapter):
    """JAX mutable refs and remat policies (framework ``jax-state``), in a child with
    ``CHILD_XLA_FLAGS`` in XLA_FLAGS."""

    name, label, package, hint, target = "jax-state", "JAX", "jax", HINT, TARGET
    env = (("XLA_FLAGS", CHILD_XLA_FLAGS),)
    method_list = METHODS

    shrink_checks = 0  # the cases are already small; each candidate costs seconds of JAX

    def reproducer(self, case: Case, method: Method, record: dict) -> str | None:
        return _reproducer(case, method, remat3=False)

    def plain_method(self, method: Method) -> Method | None:
        return PLAIN


class JaxRemat3Adapter(IsolatedAdapter):
    """The checkpoint methods of ``jax-state`` with ``JAX_REMAT3=1`` (read at import)."""

    name, label, package, hint, target = "jax-remat3", "JAX", "jax", HINT, TARGET
    env = (("XLA_FLAGS", CHILD_XLA_FLAGS), ("JAX_REMAT3", "1"))
    method_list = REMAT3_METHODS

    shrink_checks = 0

    def reproducer(self, case: Case, method: Method, record: dict) -> str | None:
        return _reproducer(case, method, remat3=True)

    def plain_method(self, method: Method) -> Method | None:
        return PLAIN


def _reproducer(case: Case, method: Method, remat3: bool) -> str | None:
    """A script for the mutable-ref checkpoint methods (the functional policy rows
    match): the program without and with the checkpoint, both under jit for a jit
    method (docs/cohort.md, "Reproducers")."""
    how = HOW[method.name]
    if not (how.refs and how.checkpoint):
        return None
    from replayverify.cohort.stateful_repro import jax_script

    return jax_script(case, jit=how.jit, policy=how.policy, remat3=remat3)
