"""Plug-ins named ``module:attr``: one loader for engines and cohort adapters.

``--engine`` and ``--frameworks`` both accept ``module:attr`` naming an object, or a class
or factory returning one. :func:`load` imports the module, follows the dotted attribute,
calls a class or factory when it gives no object of the wanted kind yet, and checks the
kind; every failure is a ValueError with one line. No project imports but the one door for
untrusted text (``untrusted.one_line``): the registries of every layer use it.

:func:`call` is the guard every call into a plug-in goes through (an engine's ``run``, a
cohort adapter's methods): what a plug-in may do to end a call that no record could
stand for (``sys.exit``, a ``KeyboardInterrupt`` of its own) becomes a
:class:`PluginFault`, an ordinary exception that the caller turns into an ``error``
record; a real Ctrl-C still stops the run.
"""

from __future__ import annotations

import importlib
import signal
import threading
from collections.abc import Callable
from typing import Any

from replayverify.untrusted import one_line, shown


class PluginFault(Exception):
    """A plug-in called ``sys.exit``, raised ``KeyboardInterrupt`` itself, or returned a
    result of the wrong kind."""


_interrupts = 0  # SIGINTs this process received while our counting handler was installed


def _count_interrupt(signum: int, frame: object) -> None:
    global _interrupts
    _interrupts += 1
    raise KeyboardInterrupt


def _counting() -> bool:
    """Whether SIGINTs are counted here: our handler replaces Python's default one (same
    behaviour, plus the count) the first time it is asked for, in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return False
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.default_int_handler:
        signal.signal(signal.SIGINT, _count_interrupt)
        return True
    return handler is _count_interrupt or handler == signal.SIG_IGN


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, a plug-in's method, with ``SystemExit`` and a
    ``KeyboardInterrupt`` the plug-in raised itself turned into :class:`PluginFault`.

    A ``KeyboardInterrupt`` is the plug-in's own when no SIGINT arrived during the call
    (counted by our handler, or SIGINT ignored as in a worker); when that cannot be told
    (another SIGINT handler, or not the main thread) it is taken for a real Ctrl-C and
    passes on.
    """
    counted = _counting()
    before = _interrupts
    try:
        return fn(*args, **kwargs)
    except SystemExit as exc:
        raise PluginFault(f"called sys.exit({shown(exc.code)})") from None
    except KeyboardInterrupt:
        if counted and _interrupts == before:
            raise PluginFault("raised KeyboardInterrupt (no Ctrl-C was pressed)") from None
        raise


def checked(value: object, kind: type | tuple[type, ...], what: str) -> Any:
    """``value`` if it is a ``kind``; else a :class:`PluginFault` naming ``what`` returned it."""
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(
            k.__name__ for k in kind)
        raise PluginFault(f"{what} returned {shown(value)}, not {names}")
    return value


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
        raise ValueError(one_line(f"unknown {unknown or kind} {shown(spec)}; known: {known} "
                                  f"(or module:attr{also})", 400))
    if module.startswith("."):
        raise ValueError(one_line(f"cannot load {kind} {shown(spec)}: a relative module name; "
                                  "give the module's full dotted name", 400))
    try:
        obj = call(importlib.import_module, module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        if isinstance(obj, type) or (not accepts(obj) and callable(obj)):
            obj = call(obj)  # a class or a factory
        ok = accepts(obj)
    except Exception as exc:  # importing or building user code: anything, in one line
        why = str(exc) if isinstance(exc, (ImportError, AttributeError)) else \
            f"{type(exc).__name__}: {exc}"
        raise ValueError(one_line(f"cannot load {kind} {shown(spec)}: {why}", 400)) from None
    if not ok:
        raise ValueError(one_line(not_a(spec, kind, needs), 400))
    return obj


def not_a(what: object, kind: str, needs: str) -> str:
    """The one-line message for an object that is not of ``kind``."""
    article = "an" if kind[:1] in "aeiou" else "a"
    return f"{what!r} is not {article} {kind}: it needs {needs}"
