"""Cohort adapters by name, in the same ``plugins.Registry`` as the engines: built-ins
listed here only.

``--frameworks`` takes registered names (``torch``, ``jax``, ``replayverify``, or one a
user registered) or ``module:attr`` naming an adapter object, or a class or factory
returning one. Built-in adapters import their framework only when they run.
"""

from __future__ import annotations

from replayverify.cohort.adapter import Adapter
from replayverify.plugins import Registry

BUILTIN = {
    "torch": "replayverify.cohort.torch_adapter:TorchAdapter",
    "jax": "replayverify.cohort.jax_adapter:JaxAdapter",
    "replayverify": "replayverify.cohort.engines_adapter:EnginesAdapter",
    "torch-compile": "replayverify.cohort.compiled_adapter:CompiledAdapter",
    "torch-compile-aot-eager": "replayverify.cohort.compiled_adapter:aot_eager_only",
    "torch-compile-inductor": "replayverify.cohort.compiled_adapter:inductor_only",
    "jax-state": "replayverify.cohort.jax_state_adapter:JaxStateAdapter",
    "jax-remat3": "replayverify.cohort.jax_state_adapter:JaxRemat3Adapter",
    "flax": "replayverify.cohort.flax_adapter:FlaxAdapter",
    "flax-linen": "replayverify.cohort.linen_adapter:LinenAdapter",
    "keras-torch": "replayverify.cohort.keras_adapter:KerasTorchAdapter",
    "keras-jax": "replayverify.cohort.keras_adapter:KerasJaxAdapter",
}
_NEEDS = "name, label, missing(), version(), methods(), draw_tape(case) and run(case, method)"

REGISTRY: Registry[Adapter] = Registry(
    "cohort adapter", accepts=lambda o: isinstance(o, Adapter), needs=_NEEDS,
    builtin=BUILTIN, forbidden="/", unknown="cohort framework")
"""The adapters by name (``replayverify.plugins.Registry``)."""


def register(name: str, adapter: Adapter) -> Adapter:
    """Make ``adapter`` available as ``name``. Refuses a taken name or a non-adapter."""
    return REGISTRY.register(name, adapter)


def unregister(name: str) -> None:
    """Remove a user-registered adapter (built-ins stay)."""
    REGISTRY.unregister(name)


def get(spec: str) -> Adapter:
    """The adapter ``spec`` names (built once per process). ValueError with one line."""
    return REGISTRY.get(REGISTRY.resolve(spec))


def names() -> tuple[str, ...]:
    return REGISTRY.names()
