"""Cohort adapters by name, like ``engines/registry.py``: built-ins listed here only.

``--frameworks`` takes registered names (``torch``, ``jax``, ``replayverify``, or one a
user registered) or ``module:attr`` naming an adapter object, or a class or factory
returning one. Built-in adapters import their framework only when they run.
"""

from __future__ import annotations

from replayverify.cohort.adapter import Adapter
from replayverify.plugins import load, not_a
from replayverify.untrusted import shown

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
_REGISTRY: dict[str, Adapter] = {}
_RESOLVED: dict[str, Adapter] = {}


_NEEDS = "name, label, missing(), version(), methods(), draw_tape(case) and run(case, method)"


def register(name: str, adapter: Adapter) -> Adapter:
    """Make ``adapter`` available as ``name``. Refuses a taken name or a non-adapter."""
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError("an adapter name must be a non-empty string without '/'")
    if name in BUILTIN or name in _REGISTRY:
        raise ValueError(f"a cohort adapter named {name!r} is already registered")
    if not isinstance(adapter, Adapter):
        raise TypeError(not_a(adapter, "cohort adapter", _NEEDS))
    _REGISTRY[name] = adapter
    return adapter


def unregister(name: str) -> None:
    """Remove a user-registered adapter (built-ins stay)."""
    if name in BUILTIN:
        raise ValueError(f"{name!r} is a built-in cohort adapter")
    _REGISTRY.pop(name, None)


def _load(spec: str) -> Adapter:
    return load(spec, kind="cohort adapter", accepts=lambda o: isinstance(o, Adapter),
                known=", ".join([*BUILTIN, *_REGISTRY]), needs=_NEEDS,
                unknown="cohort framework")


def get(spec: str) -> Adapter:
    """The adapter ``spec`` names (built once per process). ValueError with one line."""
    if spec in _REGISTRY:
        return _REGISTRY[spec]
    if spec not in _RESOLVED:
        if "/" in spec:
            raise ValueError(f"bad cohort framework {shown(spec)}: names contain no '/'")
        _RESOLVED[spec] = _load(BUILTIN.get(spec, spec))
    return _RESOLVED[spec]


def names() -> tuple[str, ...]:
    return (*BUILTIN, *_REGISTRY)
