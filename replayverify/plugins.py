"""Plug-ins named ``module:attr``: one loader for engines and cohort adapters.

``--engine`` and ``--frameworks`` both accept ``module:attr`` naming an object, or a class
or factory returning one. :func:`load` imports the module, follows the dotted attribute,
calls a class or factory when it gives no object of the wanted kind yet, and checks the
kind; every failure is a ValueError with one line. No project imports: the registries of
every layer use it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def load(spec: str, *, kind: str, accepts: Callable[[object], bool], known: str,
         needs: str, also: str = "", unknown: str = "") -> object:
    """The object ``spec`` (``module:attr``) names, checked by ``accepts``.

    ``kind`` names what is wanted in messages ("engine", "cohort adapter"), ``needs`` what
    such an object must have. A name that is not ``module:attr`` is refused as an unknown
    ``unknown`` (default ``kind``), listing ``known`` names and ``also`` other forms. A
    class, or a callable that is not itself accepted, is called with no arguments once.
    """
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"unknown {unknown or kind} {spec!r}; known: {known} "
                         f"(or module:attr{also})")
    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load {kind} {spec!r}: {exc}") from None
    if isinstance(obj, type) or (not accepts(obj) and callable(obj)):
        obj = obj()  # a class or a factory
    if not accepts(obj):
        raise ValueError(not_a(spec, kind, needs))
    return obj


def not_a(what: object, kind: str, needs: str) -> str:
    """The one-line message for an object that is not of ``kind``."""
    article = "an" if kind[:1] in "aeiou" else "a"
    return f"{what!r} is not {article} {kind}: it needs {needs}"
