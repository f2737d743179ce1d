"""Flax Linen: the cohort programs as a module whose state is variable collections.

Framework ``flax-linen`` (docs/cohort.md, "Stateful recomputation APIs"). A ``Block``
module holds the hidden buffers as Linen variables: in the ``batch_stats`` collection
for a buffer an ``untracked`` op writes (the running statistic), in a ``state``
collection otherwise; both are passed to ``apply`` as ``mutable``. Every draw takes
``self.make_rng("draw")`` in the block (the stream's counter advances) and draws as the
JAX adapter does with that key. The other buffers are arrays written out of place, as
the JAX adapter writes them (its ``_Run``), passed through the block and returned.

The block runs the ops before the segment and after it in a plain method and the
segment's ops in ``__call__``; the method ``linen-remat`` wraps the block class in
``nn.remat`` (which lifts ``__call__`` only: the segment). Gradients by ``jax.vjp``
of ``apply`` with respect to the inputs. Compared: the buffers (the returned arrays
and the final variables, from the updated collections) and, as the generator state,
the key the stream gives next (``make_rng`` once more in the block after the program).

The draw tape is the plain module's forward run with its draws recorded: Linen derives
each key from the scope path and a counter, which ``nn.remat`` must leave as they are.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replayverify.cohort.adapter import DrawTape, Method, Observation
from replayverify.cohort.cases import Case
from replayverify.cohort.flax_adapter import FlaxAdapter
from replayverify.cohort.jax_adapter import _draw, _Run

METHODS = (
    Method("linen", "flax Linen module",
           doc="variables in batch_stats/state collections (mutable), make_rng draws"),
    Method("linen-remat", "flax nn.remat", doc="the block under nn.remat: the segment"),
)
COLLECTIONS = ("batch_stats", "state")


class LinenAdapter(FlaxAdapter):
    """Flax Linen with and without ``nn.remat`` (missing flax: the same install hint)."""

    name = "flax-linen"
    label = "flax"

    def methods(self, extra: bool = False) -> tuple[Method, ...]:
        return METHODS

    def plain_method(self, method: Method) -> Method | None:
        return METHODS[0]

    def draw_tape(self, case: Case) -> DrawTape:
        import jax

        with jax.enable_x64(True):
            run = _LinenRun(jax, case, "linen")
            run.drawn = []
            _loss, (_bufs, _final, key) = run.loss(run.inputs())
            ks = [k for k, op in enumerate(case.program.ops) if op.spec.draws]
            return DrawTape({k: np.asarray(z).copy() for k, z in zip(ks, run.drawn)},
                        np.asarray(key).tobytes())

    def run(self, case: Case, method: Method) -> Observation:
        import jax

        with jax.enable_x64(True):
            return _LinenRun(jax, case, method.name).observe()


class _LinenRun(_Run):
    def __init__(self, jax: Any, case: Case, method: str):
        import flax.linen as nn
        from flax.core.scope import Variable

        super().__init__(jax, case, method)
        self.nn, self.variable = nn, Variable
        stats = {self.p.view(self.p.ops[k].dst).buffer for k in case.roles.untracked}
        self.collection = {h: "batch_stats" if h in stats else "state"
                           for h in case.roles.hidden}
        self.names = sorted(b for b in self.start if b not in self.collection)
        self.block: Any = None  # the block the ops run in (its variables and stream)
        self.drawn: list | None = None  # draw_tape: the draws, in program order

    def read(self, bufs: dict, name: str) -> Any:
        b = self.p.view(name).buffer
        if isinstance(bufs[b], self.variable):
            return super().read({**bufs, b: bufs[b].value}, name)
        return super().read(bufs, name)

    def store(self, bufs: dict, name: str, values: Any) -> None:
        buf = bufs[self.p.view(name).buffer]
        if isinstance(buf, self.variable):
            buf.value = self.written(buf.value, name, values)
        else:
            super().store(bufs, name, values)

    def draw(self, key: Any, op) -> tuple[Any, Any]:
        _, z = _draw(self.jax, self.block.make_rng("draw"), op, self.p.view(op.dst).size,
                     self.case.dtype)
        if self.drawn is not None:
            self.drawn.append(z)
        return key, z

    def in_block(self, block: Any, ks: range, values: tuple) -> tuple:
        """Ops ``ks`` on ``values`` (the non-hidden buffers) and ``block``'s variables."""
        self.block = block
        bufs = dict(zip(self.names, values))
        bufs.update({h: getattr(block, f"buf_{h}") for h in self.collection})
        self.ops(ks, bufs, None)
        return tuple(bufs[n] for n in self.names)

    def top(self) -> Any:
        nn, run, jax = self.nn, self, self.jax
        seg, n = self.case.segment_ops(), len(self.p.ops)

        class Block(nn.Module):
            def setup(self):
                for h, col in run.collection.items():
                    setattr(self, f"buf_{h}", self.variable(col, h, lambda h=h: run.start[h]))

            def outside(self, lo: int, hi: int, values: tuple) -> tuple:
                return run.in_block(self, range(lo, hi), values)

            def __call__(self, values: tuple) -> tuple:
                return run.in_block(self, seg, values)

            def next_key(self) -> Any:
                return jax.random.key_data(self.make_rng("draw"))

        block_class = nn.remat(Block) if self.method == "linen-remat" else Block

        class Top(nn.Module):
            @nn.compact
            def __call__(self, values: tuple) -> tuple:
                block = block_class(name="block")
                values = block.outside(0, seg.start, values)
                values = block(values)
                values = block.outside(seg.stop, n, values)
                return values, block.next_key()

        return Top()

    def inputs(self) -> tuple:
        return tuple(self.start[self.p.view(n).buffer][self.index[n]] for n in self.p.inputs)

    def loss(self, xs: tuple) -> tuple:
        jnp = self.jnp
        bufs = {b: self.start[b] for b in self.names}
        for name, x in zip(self.p.inputs, xs):
            b = self.p.view(name).buffer
            bufs[b] = self.written(bufs[b], name, x)
        variables: dict = {}
        for h, col in self.collection.items():
            variables.setdefault(col, {}).setdefault("block", {})[h] = self.start[h]
        (values, key), final = self.top().apply(
            variables, tuple(bufs[b] for b in self.names),
            rngs={"draw": self.jax.random.key(self.case.draw_seed)}, mutable=COLLECTIONS)
        bufs = dict(zip(self.names, values))
        bufs.update({h: final[col]["block"][h] for h, col in self.collection.items()})
        w = jnp.asarray(self.p.loss.weights, jnp.float64)
        values = self.read(bufs, self.p.loss.view).reshape(-1).astype(jnp.float64)
        return jnp.sum(w * values), (bufs, final, key)

    def observe(self) -> Observation:
        _loss, vjp, (bufs, _final, key) = self.jax.vjp(self.loss, self.inputs(), has_aux=True)
        (grads,) = vjp(self.jnp.ones((), self.jnp.float64))
        gradient = np.concatenate([np.asarray(g, np.float64).reshape(-1) for g in grads]) \
            if grads else np.zeros(0)
        return Observation(gradient, {n: np.asarray(b).tobytes() for n, b in bufs.items()},
                           np.asarray(key).tobytes())
