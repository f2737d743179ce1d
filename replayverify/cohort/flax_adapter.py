"""Flax NNX: the cohort programs as a module whose state is ``nnx.Variable``s.

Framework ``flax``. The module holds the hidden buffers as variables (an
``nnx.BatchStat`` for a buffer an ``untracked`` op writes, the running statistic;
``nnx.Variable`` otherwise) and an ``nnx.Rngs`` with one stream, ``draw``, seeded with
the case's key: each draw takes ``rngs.draw()`` (the stream's counter advances) and
draws ``jax.random.normal`` or the keep mask ``jax.random.uniform(...) < keep`` with
it. The other buffers are arrays written out of place, as the JAX adapter writes them
(its ``_Run``: the same reads, writes and formulas). Gradients by ``nnx.grad`` with
respect to the inputs; the module's state comes back through NNX's transforms.

Methods: the module as it is, and the segment under ``nnx.remat``. The generator state
compared is the stream's key data and counter; the final variables are the buffers.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

import numpy as np

from replayverify.cohort.adapter import DrawTape, Method, Observation
from replayverify.cohort.cases import Case
from replayverify.cohort.jax_adapter import _Run

HINT = "flax is not installed: pip install flax, or '.[flax]'"
METHODS = (
    Method("nnx", "flax NNX module", doc="nnx.Module state, nnx.Rngs draws, nnx.grad"),
    Method("nnx-remat", "flax nnx.remat", doc="the segment under nnx.remat"),
)


class FlaxAdapter:
    """Flax NNX with and without ``nnx.remat``."""

    name = "flax"
    label = "flax"

    def missing(self) -> str | None:
        return None if importlib.util.find_spec("flax") else HINT

    def version(self) -> str:
        return (f"{importlib.metadata.version('flax')} "
                f"(jax {importlib.metadata.version('jax')})")

    def methods(self, extra: bool = False) -> tuple[Method, ...]:
        return METHODS

    def plain_method(self, method: Method) -> Method | None:
        return METHODS[0]  # the module without remat

    def draw_tape(self, case: Case) -> DrawTape:
        import jax
        from flax import nnx

        with jax.enable_x64(True):
            rngs = nnx.Rngs(draw=case.draw_seed)
            draws = {k: np.asarray(_draw(jax, rngs, op, case.program.view(op.dst).size,
                                         case.dtype)).copy()
                     for k, op in enumerate(case.program.ops) if op.spec.draws}
            return DrawTape(draws, _rng_bytes(jax, rngs))

    def run(self, case: Case, method: Method) -> Observation:
        import jax

        with jax.enable_x64(True):
            return _NnxRun(jax, case, method.name).observe()


def _draw(jax: Any, rngs: Any, op, n: int, dtype: str) -> Any:
    key = rngs.draw()
    if op.kind.value == "noise":
        return jax.random.normal(key, (n,), dtype)
    u = jax.random.uniform(key, (n,), dtype)
    return (u < jax.numpy.asarray(op.keep, dtype)).astype(dtype)


def _rng_bytes(jax: Any, rngs: Any) -> bytes:
    stream = rngs.draw
    return (np.asarray(jax.random.key_data(stream.key.value)).tobytes()
            + np.asarray(stream.count.value).tobytes())


class _NnxRun(_Run):
    def __init__(self, jax: Any, case: Case, method: str):
        from flax import nnx

        super().__init__(jax, case, method)
        self.nnx = nnx
        stats = {self.p.view(self.p.ops[k].dst).buffer for k in case.roles.untracked}
        model = nnx.Module()
        for h in case.roles.hidden:
            kind = nnx.BatchStat if h in stats else nnx.Variable
            setattr(model, f"buf_{h}", kind(self.start[h]))
        model.rngs = nnx.Rngs(draw=case.draw_seed)
        self.model = model
        self.rngs: Any = None  # the model's stream, as seen inside a transform

    def read(self, bufs: dict, name: str) -> Any:
        b = self.p.view(name).buffer
        if isinstance(bufs[b], self.nnx.Variable):
            return super().read({**bufs, b: bufs[b].value}, name)
        return super().read(bufs, name)

    def store(self, bufs: dict, name: str, values: Any) -> None:
        b = self.p.view(name).buffer
        buf = bufs[b]
        if isinstance(buf, self.nnx.Variable):
            buf.value = self.written(buf.value, name, values)
        else:
            super().store(bufs, name, values)

    def draw(self, key: Any, op) -> tuple[Any, Any]:
        return key, _draw(self.jax, self.rngs, op, self.p.view(op.dst).size, self.case.dtype)

    def with_model(self, model: Any, ks: range, bufs: dict) -> None:
        """Ops ``ks`` with the hidden buffers and the stream of ``model``."""
        self.rngs = model.rngs
        local = {**bufs, **{h: getattr(model, f"buf_{h}") for h in self.case.roles.hidden}}
        self.ops(ks, local, None)
        bufs.update({n: v for n, v in local.items() if n not in self.case.roles.hidden})

    def loss(self, xs: tuple, model: Any) -> tuple:
        jnp = self.jnp
        bufs = {b: v for b, v in self.start.items() if b not in self.case.roles.hidden}
        for name, x in zip(self.p.inputs, xs):
            b = self.p.view(name).buffer
            bufs[b] = self.written(bufs[b], name, x)
        seg, n = self.case.segment_ops(), len(self.p.ops)
        names = sorted(bufs)
        self.with_model(model, range(seg.start), bufs)

        def segment(model: Any, values: tuple) -> tuple:
            local = dict(zip(names, values))
            self.with_model(model, seg, local)
            return tuple(local[n] for n in names)

        fn = self.nnx.remat(segment) if self.method == "nnx-remat" else segment
        bufs = dict(zip(names, fn(model, tuple(bufs[n] for n in names))))
        self.with_model(model, range(seg.stop, n), bufs)
        w = jnp.asarray(self.p.loss.weights, jnp.float64)
        values = self.read(bufs, self.p.loss.view).reshape(-1).astype(jnp.float64)
        return jnp.sum(w * values), bufs

    def observe(self) -> Observation:
        xs = tuple(self.start[self.p.view(n).buffer][self.index[n]] for n in self.p.inputs)
        grads, bufs = self.nnx.grad(self.loss, argnums=0, has_aux=True)(xs, self.model)
        gradient = np.concatenate([np.asarray(g, np.float64).reshape(-1) for g in grads]) \
            if grads else np.zeros(0)
        model = self.model
        bufs = {**bufs, **{h: getattr(model, f"buf_{h}").value for h in self.case.roles.hidden}}
        return Observation(gradient, {n: np.asarray(b).tobytes() for n, b in bufs.items()},
                           _rng_bytes(self.jax, model.rngs))
