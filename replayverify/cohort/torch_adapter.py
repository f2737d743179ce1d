"""The torch adapter: functional reference, native eager, torch.utils.checkpoint.

Buffers are 1-D tensors of the case's dtype and views are ``as_strided`` windows on
them. The native methods write in place (``dst.copy_(values)``; a raw copy is
``dst.copy_(src)``), the functional reference gathers and writes with ``index_put``.
Checkpoint methods wrap the checkpointed segment in a function of the non-hidden
buffers it touches: it clones the buffers it writes (it owns them), reads hidden
buffers from the enclosing world (a closure, like a module buffer) and returns what it
wrote. Every run happens under ``torch.random.fork_rng`` on one thread, seeded with
the case's key, so the user's generator and thread count are left as they were.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
from collections.abc import Iterator
from typing import Any

import numpy as np

from replayverify.cohort._ops import RULES, element_geometry, operands, unsupported_ops
from replayverify.cohort.adapter import DrawTape, Method, Observation
from replayverify.cohort.cases import HIDDEN_FAMILIES, Case

HINT = "torch is not installed: pip install torch==2.13.0 (CPU build), or '.[cohort]'"

METHODS = (
    Method("functional", "torch functional reference",
           doc="out-of-place ops (gather, index_put), no checkpoint"),
    Method("eager", "torch native eager", doc="in-place writes on views, no checkpoint"),
    Method("reentrant", "torch reentrant",
           doc="checkpoint(use_reentrant=True, preserve_rng_state=True)"),
    Method("non-reentrant", "torch non-reentrant",
           doc="checkpoint(use_reentrant=False, preserve_rng_state=True)"),
    Method("reentrant-rng-off", "torch reentrant, RNG unpreserved",
           doc="negative control: preserve_rng_state=False"),
    Method("non-reentrant-rng-off", "torch non-reentrant, RNG unpreserved",
           doc="negative control: preserve_rng_state=False"),
    Method("transactional", "torch transactional non-reentrant",
           doc="non-reentrant with a context_fn that restores the declared hidden buffers "
               "and the generator around recomputation, then reinstates the visible ones"),
)
EXTRA_METHODS = (
    Method("selective", "torch selective non-reentrant", HIDDEN_FAMILIES,
           doc="create_selective_checkpoint_contexts: save products of two activations"),
    Method("selective-mutation", "torch selective non-reentrant, cache mutation allowed",
           HIDDEN_FAMILIES, doc="the same with allow_cache_entry_mutation=True"),
    # the wrappers people call (issue #25): they should give the underlying mode's cells
    Method("wrapper-no-reentrant", "torch checkpoint_wrapper NO_REENTRANT",
           doc="apply_activation_checkpointing(checkpoint_wrapper, NO_REENTRANT, "
               "preserve_rng_state=True) on a module running the segment"),
    Method("wrapper-no-reentrant-rng-off",
           "torch checkpoint_wrapper NO_REENTRANT, RNG unpreserved",
           doc="the same with preserve_rng_state=False"),
    Method("wrapper-reentrant", "torch checkpoint_wrapper REENTRANT",
           doc="apply_activation_checkpointing(checkpoint_wrapper, REENTRANT, "
               "preserve_rng_state=True)"),
    Method("wrapper-reentrant-rng-off", "torch checkpoint_wrapper REENTRANT, RNG unpreserved",
           doc="the same with preserve_rng_state=False"),
    Method("sequential", "torch checkpoint_sequential, non-reentrant",
           doc="checkpoint_sequential(use_reentrant=False) over one function per op of "
               "the segment (each clones the buffer it writes, as a layer returns a new "
               "tensor), every op checkpointed"),
)
CHECKPOINT = {
    "reentrant": dict(use_reentrant=True, preserve_rng_state=True),
    "non-reentrant": dict(use_reentrant=False, preserve_rng_state=True),
    "reentrant-rng-off": dict(use_reentrant=True, preserve_rng_state=False),
    "non-reentrant-rng-off": dict(use_reentrant=False, preserve_rng_state=False),
    # the transaction carries the generator itself
    "transactional": dict(use_reentrant=False, preserve_rng_state=False),
    "selective": dict(use_reentrant=False, preserve_rng_state=True),
    "selective-mutation": dict(use_reentrant=False, preserve_rng_state=True),
}
# checkpoint_wrapper rows: (CheckpointImpl member, preserve_rng_state)
WRAPPER = {
    "wrapper-no-reentrant": ("NO_REENTRANT", True),
    "wrapper-no-reentrant-rng-off": ("NO_REENTRANT", False),
    "wrapper-reentrant": ("REENTRANT", True),
    "wrapper-reentrant-rng-off": ("REENTRANT", False),
}


class TorchAdapter:
    """torch eager, reentrant and non-reentrant checkpointing, and a transaction."""

    name = "torch"
    label = "torch"

    def missing(self) -> str | None:
        # find_spec, not import: a parent process stays free of the framework's threads
        return None if importlib.util.find_spec("torch") else HINT

    def version(self) -> str:
        return importlib.metadata.version("torch")

    def methods(self, extra: bool = False) -> tuple[Method, ...]:
        return METHODS + (EXTRA_METHODS if extra else ())

    def draw_tape(self, case: Case) -> DrawTape:
        import torch

        with _isolated(torch, case.draw_seed):
            dtype = getattr(torch, case.dtype)
            draws = {}
            for k, op in enumerate(case.program.ops):
                if op.spec.draws:
                    n = case.program.view(op.dst).size
                    draws[k] = _draw(torch, op, n, dtype).numpy().copy()
            return DrawTape(draws, _rng_bytes(torch))

    def run(self, case: Case, method: Method) -> Observation:
        import torch

        bad = unsupported_ops(case.program)
        if bad:
            raise NotImplementedError(f"the torch adapter does not translate {bad}")
        with _isolated(torch, case.draw_seed):
            run = _Run(torch, case, functional=method.name == "functional")
            if method.name in ("functional", "eager"):
                run.ops(range(len(case.program.ops)), run.bufs)
            else:
                lo = case.segment_ops()
                run.ops(range(0, lo.start), run.bufs)
                run.checkpointed(lo, method.name)
                run.ops(range(lo.stop, len(case.program.ops)), run.bufs)
            run.backward()
            return Observation(run.gradient(), run.buffer_bytes(), _rng_bytes(torch),
                               run.determinism_flagged())

    def plain_method(self, method: Method) -> Method:
        """The run without checkpointing that reproducers compare with: native eager."""
        return METHODS[1]

    def reproducer(self, case: Case, method: Method, record: dict) -> str | None:
        """A standalone script for the plain checkpoint methods and the checkpoint_wrapper
        rows (``repro.py``); None for the transaction and selective checkpointing, whose
        ``context_fn`` does not fit the 40-line budget, for checkpoint_sequential (one
        function per op: never D here) and for the methods without a checkpoint."""
        from replayverify.cohort.torch_repro import script

        title = f"replayverify cohort reproducer: {record['row']} on {case.id} " \
                f"(torch {self.version()})"
        if method.name in WRAPPER:
            impl, preserve = WRAPPER[method.name]
            return script(case, title=title, ckpt="lambda f, *a: WRAP(f)(*a)", imports=(
                "from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import "
                "CheckpointImpl, apply_activation_checkpointing as aac, checkpoint_wrapper as cw",
                "class Seg(torch.nn.Module): forward = lambda self, *a: self.f(*a)  # a module",
                "def WRAP(f):  # as FSDP users apply it",
                "    m = torch.nn.Sequential(Seg()); m[0].f = f",
                f"    aac(m, checkpoint_wrapper_fn=lambda mod: cw(mod, checkpoint_impl="
                f"CheckpointImpl.{impl}, preserve_rng_state={preserve}), check_fn=lambda mod: "
                "isinstance(mod, Seg)); return m[0]"),
                clone_reads=not plain_matches(self, case))
        kwargs = CHECKPOINT.get(method.name)
        if kwargs is None or method.name == "transactional" or \
                method.name.startswith("selective"):
            return None

        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        if not kwargs["use_reentrant"]:
            args += ", determinism_check='default'"
        return script(case, title=title, ckpt=f"lambda f, *a: checkpoint(f, *a, {args})",
                      imports=("from torch.utils.checkpoint import checkpoint",),
                      clone_reads=not plain_matches(self, case))


def plain_matches(adapter: Any, case: Case) -> bool:
    """Whether native eager (no checkpoint) matches the reference on ``case``."""
    from replayverify.cohort.adapter import Reference, observe

    ref = Reference.of(case, adapter.draw_tape(case))
    return observe(adapter, case, METHODS[1], ref)["outcome"] == "match"


@contextlib.contextmanager
def _isolated(torch: Any, seed: int) -> Iterator[None]:
    """Seeded generator and one thread, both given back afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    finally:
        torch.set_num_threads(threads)


def _rng_bytes(torch: Any) -> bytes:
    return torch.get_rng_state().numpy().tobytes()


def _draw(torch: Any, op, n: int, dtype: Any) -> Any:
    """The framework's draw for one op: normals (noise) or the keep mask (dropout)."""
    if op.spec.draws and op.kind.value == "noise":
        return torch.randn(n, dtype=dtype)
    return (torch.rand(n, dtype=dtype) < torch.tensor(op.keep, dtype=dtype)).to(dtype)


class _Run:
    """One execution: the world's buffers, the input leaves, and the ops on them."""

    def __init__(self, torch: Any, case: Case, functional: bool):
        self.torch, self.case, self.functional = torch, case, functional
        self.p = case.program
        self.dtype = getattr(torch, case.dtype)
        self.calls: list[list[tuple]] = []  # per segment-function call: output metadata
        self.bufs: dict[str, Any] = {
            b.name: torch.zeros(b.nbytes // np.dtype(case.dtype).itemsize, dtype=self.dtype)
            for b in self.p.buffers}
        with torch.no_grad():
            for e in self.p.init:
                self.window(e.view).copy_(torch.tensor(e.values, dtype=self.dtype))
        self.leaves = []
        for name in self.p.inputs:
            leaf = self.window(name).detach().clone().requires_grad_(True)
            self.leaves.append(leaf)
            self.write(self.bufs, name, leaf)

    def view(self, bufs: dict, name: str) -> Any:
        """The view's elements: an ``as_strided`` window (native) or a gathered copy
        (functional: as_strided's backward is wrong over rewritten windows, torch 2.13)."""
        b = self.p.view(name).buffer
        if self.functional:
            return bufs[b][self.index(name)].reshape(self.p.view(name).shape)
        shape, strides, offset = element_geometry(self.p, name)
        return bufs[b].as_strided(shape, strides, offset)

    def window(self, name: str) -> Any:
        """An ``as_strided`` window on the world's buffer (set-up, before any op)."""
        shape, strides, offset = element_geometry(self.p, name)
        return self.bufs[self.p.view(name).buffer].as_strided(shape, strides, offset)

    def index(self, name: str) -> Any:
        v = self.p.view(name)
        return self.torch.from_numpy(v.element_starts() // v.itemsize)

    def write(self, bufs: dict, name: str, values: Any) -> None:
        if self.functional:  # out of place: a new buffer tensor
            b = self.p.view(name).buffer
            bufs[b] = bufs[b].index_put((self.index(name),), values.reshape(-1))
        else:
            self.view(bufs, name).copy_(values)

    def coef(self, op) -> Any:
        return lambda name: self.torch.tensor(op.coef(name), dtype=self.dtype)

    def ops(self, ks: range, bufs: dict, log: list | None = None) -> None:
        for k in ks:
            op = self.p.ops[k]
            o = operands(op, lambda name: self.view(bufs, name))
            z = _draw(self.torch, op, self.p.view(op.dst).size, self.dtype) \
                if op.spec.draws else None
            if k in self.case.roles.untracked:  # computed outside autograd, then written
                with self.torch.no_grad():
                    values = RULES[op.kind](self.coef(op), o, z).clone()
            else:
                values = RULES[op.kind](self.coef(op), o, z)
            if log is not None:
                log.append((tuple(values.shape), values.dtype, values.device))
            self.write(bufs, op.dst, values)

    def checkpointed(self, ks: range, method: str) -> None:
        """The segment through torch.utils.checkpoint.checkpoint."""
        from torch.utils.checkpoint import checkpoint

        hidden = set(self.case.roles.hidden)
        touched = {self.p.view(v).buffer for k in ks for v in self.p.ops[k].views()}
        written = {self.p.view(self.p.ops[k].dst).buffer for k in ks}
        args = sorted(touched - hidden)
        owned = sorted(written - hidden)

        def segment(*tensors):
            local = dict(zip(args, tensors))
            for name in owned:  # the segment owns what it writes: allocated on entry
                local[name] = local[name].clone()
            for name in hidden:  # read from the enclosing world, updated in place
                local[name] = self.bufs[name]
            log: list = []
            self.calls.append(log)
            self.ops(ks, local, log)
            return tuple(local[name] for name in owned)

        if method in WRAPPER:
            outs = _wrapped(self.torch, segment, *WRAPPER[method])(
                *(self.bufs[name] for name in args))
            self.bufs.update(zip(owned, outs))
            return
        if method == "sequential":
            self.sequential(ks, args, owned, hidden)
            return
        kwargs = dict(CHECKPOINT[method])
        if method == "transactional":
            kwargs["context_fn"] = functools.partial(_transaction, self.torch, self.bufs,
                                                     tuple(sorted(hidden)))
        elif method.startswith("selective"):
            from torch.utils.checkpoint import create_selective_checkpoint_contexts

            kwargs["context_fn"] = functools.partial(
                create_selective_checkpoint_contexts, _save_products(self.torch),
                allow_cache_entry_mutation=method == "selective-mutation")
        if not kwargs["use_reentrant"]:
            kwargs["determinism_check"] = "default"
        outs = checkpoint(segment, *(self.bufs[name] for name in args), **kwargs)
        self.bufs.update(zip(owned, outs))

    def sequential(self, ks: range, args: list[str], owned: list[str],
                   hidden: set[str]) -> None:
        """The segment through ``checkpoint_sequential``: one function per op, on the
        tuple of the segment's non-hidden buffers, cloning the buffer it writes; an
        identity last (checkpoint_sequential runs its last function unchecked)."""
        from torch.utils.checkpoint import checkpoint_sequential

        def layer(k: int):
            def fn(state):
                local = dict(zip(args, state))
                dst = self.p.view(self.p.ops[k].dst).buffer
                if dst not in hidden:
                    local[dst] = local[dst].clone()
                for name in hidden:
                    local[name] = self.bufs[name]
                self.ops(range(k, k + 1), local)
                return tuple(local[name] for name in args)
            return fn

        functions = [layer(k) for k in ks] + [lambda state: state]
        state = checkpoint_sequential(functions, len(functions),
                                      tuple(self.bufs[name] for name in args),
                                      use_reentrant=False)
        self.bufs.update((name, t) for name, t in zip(args, state) if name in owned)

    def backward(self) -> None:
        torch = self.torch
        w = torch.tensor(self.p.loss.weights, dtype=torch.float64)
        values = self.view(self.bufs, self.p.loss.view).reshape(-1).to(torch.float64)
        (w * values).sum().backward()

    def gradient(self) -> np.ndarray:
        parts = [np.zeros(leaf.numel()) if leaf.grad is None else
                 leaf.grad.detach().reshape(-1).to(self.torch.float64).numpy()
                 for leaf in self.leaves]
        return np.concatenate(parts) if parts else np.zeros(0)

    def buffer_bytes(self) -> dict[str, bytes]:
        return {name: t.detach().contiguous().numpy().tobytes()
                for name, t in self.bufs.items()}

    def determinism_flagged(self) -> bool | None:
        """Would a shape/dtype/device comparison of recomputation and forward object?"""
        if len(self.calls) < 2:
            return None if not self.calls else False
        first = self.calls[0]
        return any(call != first[: len(call)] for call in self.calls[1:])


@contextlib.contextmanager
def _restore(torch: Any, bufs: dict, hidden: tuple[str, ...], state: dict,
             rng: Any) -> Iterator[None]:
    """Put ``state`` and ``rng`` in place; afterwards reinstate what was visible."""
    visible = {h: bufs[h].detach().clone() for h in hidden}
    visible_rng = torch.get_rng_state()
    with torch.no_grad():
        for h in hidden:
            bufs[h].copy_(state[h])
    torch.set_rng_state(rng)
    try:
        yield
    finally:
        with torch.no_grad():
            for h in hidden:
                bufs[h].copy_(visible[h])
        torch.set_rng_state(visible_rng)


def _transaction(torch: Any, bufs: dict, hidden: tuple[str, ...]) -> tuple:
    """The (forward, recompute) contexts of a replay transaction over ``hidden``."""
    entry: dict = {}

    @contextlib.contextmanager
    def forward() -> Iterator[None]:
        entry["state"] = {h: bufs[h].detach().clone() for h in hidden}
        entry["rng"] = torch.get_rng_state()
        yield

    @contextlib.contextmanager
    def recompute() -> Iterator[None]:
        with _restore(torch, bufs, hidden, entry["state"], entry["rng"]):
            yield

    return forward(), recompute()


def _wrapped(torch: Any, fn, impl: str, preserve: bool) -> Any:
    """``fn`` as a module's forward, checkpointed the way FSDP users do it:
    ``apply_activation_checkpointing`` with ``checkpoint_wrapper`` on a parent module."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    class Segment(torch.nn.Module):
        def forward(self, *tensors):
            return fn(*tensors)

    model = torch.nn.Sequential(Segment())
    apply_activation_checkpointing(
        model, checkpoint_wrapper_fn=functools.partial(
            checkpoint_wrapper, checkpoint_impl=getattr(CheckpointImpl, impl),
            preserve_rng_state=preserve),
        check_fn=lambda m: isinstance(m, Segment))
    return model[0]


def _save_products(torch: Any):
    """A selective-checkpoint policy: save products of two activations, recompute the
    rest (coefficient products are 0-d and recomputed)."""
    from torch.utils.checkpoint import CheckpointPolicy

    mul = torch.ops.aten.mul.Tensor

    def policy(ctx, op, *args, **kwargs):
        if op is mul and all(isinstance(a, torch.Tensor) and a.dim() > 0 for a in args[:2]):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy
