"""Keras 3: the cohort programs as a layer stack, with and without rematerialization.

Frameworks ``keras-torch`` and ``keras-jax``: Keras reads ``KERAS_BACKEND`` once, at
import, so each runs in a child process of its own per worker (``isolated.py``;
keras-jax with ``JAX_ENABLE_X64=1`` for the float64 cases and XLA:CPU without FMA, as
``jax-state``).

The program becomes three Keras layers (``Ops``): the ops before the checkpointed
segment, the segment, and the ops after it; each takes and returns the buffers the case
does not hide, as tensors, and computes with ``keras.ops`` only: a view is read with
``ops.take`` and written out of place with ``ops.where`` over ``ops.take`` (exact
bits; the SPEC formulas of ``_ops.RULES``). Hidden buffers are non-trainable
``keras.Variable``s that the layers update with ``assign``, as BatchNormalization
updates ``moving_mean``; an ``untracked`` op goes through ``ops.stop_gradient``. Draws
come from one ``keras.random.SeedGenerator`` seeded with the case's key: noise is
``keras.random.normal``, dropout's keep mask ``keras.random.uniform(...) < keep``, as
``Dropout`` draws it (its own formula, ``where(mask, x / keep, 0)``, writes +0.0 where
SPEC's ``(x * mask) / keep`` writes -0.0, so the op applies SPEC's). The generator state
is the seed generator's ``state`` variable.

Methods: the plain stack; the segment layer built inside
``keras.RematScope(mode="full")``; the segment called through ``keras.remat``. The torch
backend differentiates with ``loss.backward()``; the JAX backend with ``jax.vjp`` over a
function that runs the stack in a ``keras.StatelessScope`` holding the variables, whose
final values it returns (how Keras trains on JAX).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

import numpy as np

from replayverify.cohort._ops import RULES, operands, unsupported_ops
from replayverify.cohort.adapter import DrawTape, Method, Observation
from replayverify.cohort.cases import Case
from replayverify.cohort.isolated import IsolatedAdapter
from replayverify.cohort.jax_state_adapter import CHILD_XLA_FLAGS

HINT = "keras is not installed: pip install keras, or '.[keras]'"


def _methods(backend: str) -> tuple[Method, ...]:
    return (
        Method("layers", f"keras-{backend} layers", doc="the layer stack, no remat"),
        Method("remat-scope", f"keras-{backend} RematScope(full)",
               doc="the segment layer built inside keras.RematScope(mode='full')"),
        Method("remat", f"keras-{backend} keras.remat",
               doc="the segment layer called through keras.remat"),
    )


class KerasInProcess:
    """Keras on the backend this process imported it with (the adapters' child)."""

    label = "keras"

    def __init__(self) -> None:
        import keras

        self.keras = keras
        self.backend = keras.backend.backend()
        self.name = f"keras-{self.backend}"
        if self.backend == "torch":
            import torch

            torch.set_num_threads(1)

    def methods(self, extra: bool = False) -> tuple[Method, ...]:
        return _methods(self.backend)

    def draw_tape(self, case: Case) -> DrawTape:
        keras = self.keras
        gen = keras.random.SeedGenerator(case.draw_seed)
        draws = {k: np.asarray(keras.ops.convert_to_numpy(_draw(keras, gen, op,
                                                                case.program.view(op.dst).size,
                                                                case.dtype))).copy()
                 for k, op in enumerate(case.program.ops) if op.spec.draws}
        return DrawTape(draws, _state_bytes(keras, gen))

    def run(self, case: Case, method: Method) -> Observation:
        bad = unsupported_ops(case.program)
        if bad:
            raise NotImplementedError(f"the keras adapter does not translate {bad}")
        run = _Stack(self.keras, case, method.name)
        return run.torch() if self.backend == "torch" else run.jax()


def _state_bytes(keras: Any, gen: Any) -> bytes:
    return np.asarray(keras.ops.convert_to_numpy(gen.state.value)).tobytes()


def _draw(keras: Any, gen: Any, op, n: int, dtype: str) -> Any:
    if op.kind.value == "noise":
        return keras.random.normal((n,), dtype=dtype, seed=gen)
    u = keras.random.uniform((n,), dtype=dtype, seed=gen)
    return keras.ops.cast(keras.ops.less(u, keras.ops.convert_to_tensor(op.keep, dtype)),
                          dtype)


class _Stack:
    """One execution: the buffers, the hidden variables, the generator and the layers."""

    def __init__(self, keras: Any, case: Case, method: str):
        self.keras, self.ops_, self.case, self.method = keras, keras.ops, case, method
        p = self.p = case.program
        self.dtype = case.dtype
        self.index = {v.name: v.element_starts() // v.itemsize for v in p.views}
        start = {b.name: np.zeros(b.nbytes // np.dtype(case.dtype).itemsize, case.dtype)
                 for b in p.buffers}
        for e in p.init:
            start[p.view(e.view).buffer][self.index[e.view]] = e.values
        self.start = start
        self.hidden = {h: keras.Variable(start[h], dtype=case.dtype, trainable=False,
                                         name=f"hidden_{h}") for h in case.roles.hidden}
        self.gen = keras.random.SeedGenerator(case.draw_seed)
        self.names = sorted(b for b in start if b not in self.hidden)

    # ------------------------------------------------------------ views
    def read(self, bufs: dict, name: str) -> Any:
        buf = bufs[self.p.view(name).buffer]
        value = buf.value if isinstance(buf, self.keras.Variable) else buf
        return self.ops_.take(value, self.index[name])

    def write(self, bufs: dict, name: str, values: Any) -> None:
        """Out of place: every element of the buffer from ``values`` (in the view) or the
        buffer; a hidden buffer's variable is assigned the result."""
        ops = self.ops_
        b = self.p.view(name).buffer
        buf = bufs[b]
        cur = buf.value if isinstance(buf, self.keras.Variable) else buf
        n = cur.shape[0]
        where = np.zeros(n, bool)
        where[self.index[name]] = True
        spread = np.zeros(n, np.int64)
        spread[self.index[name]] = np.arange(len(self.index[name]))
        new = ops.where(ops.convert_to_tensor(where), ops.take(values, spread), cur)
        if isinstance(buf, self.keras.Variable):
            buf.assign(new)
        else:
            bufs[b] = new

    def run_ops(self, ks: range, bufs: dict) -> None:
        ops = self.ops_
        for k in ks:
            op = self.p.ops[k]
            o = operands(op, lambda name: self.read(bufs, name))
            z = _draw(self.keras, self.gen, op, self.p.view(op.dst).size, self.dtype) \
                if op.spec.draws else None
            values = RULES[op.kind](
                lambda c, op=op: ops.convert_to_tensor(np.asarray(op.coef(c), self.dtype)),
                o, z)
            if k in self.case.roles.untracked:
                values = ops.stop_gradient(values)
            self.write(bufs, op.dst, values)

    # ------------------------------------------------------------ the stack
    def layer(self, ks: range) -> Any:
        keras, stack = self.keras, self

        class Ops(keras.layers.Layer):
            """Ops ``ks`` of the program on the buffers it is given."""

            def call(self, *tensors):
                bufs = dict(zip(stack.names, tensors))
                bufs.update(stack.hidden)
                stack.run_ops(ks, bufs)
                return tuple(bufs[n] for n in stack.names)

        return Ops(dtype=self.dtype, autocast=False)

    def forward(self, xs: list) -> tuple[Any, list]:
        """(loss, final buffer tensors) from the input tensors."""
        ops, keras = self.ops_, self.keras
        bufs = {n: ops.convert_to_tensor(self.start[n]) for n in self.names}
        for name, x in zip(self.p.inputs, xs):
            self.write(bufs, name, x)
        seg, n = self.case.segment_ops(), len(self.p.ops)
        pre, post = self.layer(range(seg.start)), self.layer(range(seg.stop, n))
        if self.method == "remat-scope":
            with keras.RematScope(mode="full"):
                segment = self.layer(seg)
        else:
            segment = self.layer(seg)
        if self.method == "remat":
            segment = keras.remat(segment)
        values = tuple(bufs[n] for n in self.names)
        for f, ks in ((pre, range(seg.start)), (segment, seg), (post, range(seg.stop, n))):
            if len(ks):
                values = f(*values)
        bufs = dict(zip(self.names, values))
        w = ops.convert_to_tensor(np.asarray(self.p.loss.weights, np.float64))
        loss = ops.sum(w * ops.cast(self.read(bufs, self.p.loss.view), "float64"))
        return loss, list(values)

    def observation(self, gradient: np.ndarray, values: list, hidden: dict,
                    state: Any) -> Observation:
        np_ = self.ops_.convert_to_numpy
        bufs = {n: np.asarray(np_(v)).tobytes() for n, v in zip(self.names, values)}
        bufs.update({h: np.asarray(np_(v)).tobytes() for h, v in hidden.items()})
        return Observation(gradient, bufs, np.asarray(np_(state)).tobytes())

    def inputs(self) -> list[np.ndarray]:
        return [self.start[self.p.view(n).buffer][self.index[n]] for n in self.p.inputs]

    def torch(self) -> Observation:
        import torch

        xs = [torch.tensor(x, requires_grad=True) for x in self.inputs()]
        loss, values = self.forward(xs)
        loss.backward()
        parts = [np.zeros(x.numel()) if x.grad is None else
                 x.grad.detach().reshape(-1).to(torch.float64).numpy() for x in xs]
        gradient = np.concatenate(parts) if parts else np.zeros(0)
        values = [v.detach() for v in values]
        return self.observation(gradient, values,
                                {h: v.value.detach() for h, v in self.hidden.items()},
                                self.gen.state.value)

    def jax(self) -> Observation:
        import jax

        keras = self.keras
        variables = [*self.hidden.values(), self.gen.state]
        initial = [v.value for v in variables]

        def program(xs: list) -> tuple:
            with keras.StatelessScope(state_mapping=list(zip(variables, initial))) as scope:
                loss, values = self.forward(xs)
                final = [scope.get_current_value(v) for v in variables]
            return loss, (values, [f if f is not None else i
                                   for f, i in zip(final, initial)])

        xs = [jax.numpy.asarray(x) for x in self.inputs()]
        _loss, vjp, (values, final) = jax.vjp(program, xs, has_aux=True)
        (grads,) = vjp(jax.numpy.ones((), jax.numpy.float64))
        gradient = np.concatenate([np.asarray(g, np.float64).reshape(-1) for g in grads]) \
            if grads else np.zeros(0)
        hidden = dict(zip(self.hidden, final[:-1]))
        return self.observation(gradient, values, hidden, final[-1])


class _KerasAdapter(IsolatedAdapter):
    """Keras on one backend, in a child process with ``KERAS_BACKEND`` set."""

    label, package, hint = "keras", "keras", HINT
    target = "replayverify.cohort.keras_adapter:KerasInProcess"
    backend = ""

    shrink_checks = 100

    def plain_method(self, method: Method) -> Method | None:
        return self.method_list[0]  # the layer stack without remat

    def reproducer(self, case: Case, method: Method, record: dict) -> str | None:
        """The layer stack without and with the method's remat (docs/cohort.md)."""
        if method.name == "layers":
            return None  # the plain run itself
        from replayverify.cohort.stateful_repro import keras_script

        return keras_script(case, backend=self.backend, how=method.name)

    def missing(self) -> str | None:
        if importlib.util.find_spec(self.backend) is None:
            return f"{self.backend} is not installed (needed by {self.name})"
        return super().missing()

    def version(self) -> str:
        return (f"{importlib.metadata.version('keras')} "
                f"({self.backend} {importlib.metadata.version(self.backend)})")


class KerasTorchAdapter(_KerasAdapter):
    name, backend = "keras-torch", "torch"
    env = (("KERAS_BACKEND", "torch"),)
    method_list = _methods("torch")


class KerasJaxAdapter(_KerasAdapter):
    name, backend = "keras-jax", "jax"
    env = (("KERAS_BACKEND", "jax"), ("JAX_ENABLE_X64", "1"), ("XLA_FLAGS", CHILD_XLA_FLAGS))
    method_list = _methods("jax")
