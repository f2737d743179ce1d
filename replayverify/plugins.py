"""Plug-ins named ``module:attr``: one registry and one loader for engines and cohort
adapters.

:class:`Registry` is the one registry (``engines/registry.py`` and ``cohort/registry.py``
each hold one): built-ins listed where the registry is made (objects, or ``module:attr``
strings loaded on first use), user objects added with ``register`` (a taken name or an
object of the wrong kind refused), built-ins protected from ``unregister``, and
``resolve`` for a spec that is not a name (``module:attr``, or a prefix the owner handles,
like the engines' ``policy:``): built once, found by ``get``, never joining ``names``.
Every refusal is one line.

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
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

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


T = TypeVar("T")


class Registry(Generic[T]):
    """Objects of one kind by name: built-ins first, then the user's, in order.

    ``kind`` names the kind in messages ("engine"), ``accepts`` tells an object of the kind,
    ``needs`` says what such an object must have. ``builtin`` maps each built-in name to its
    object or to a ``module:attr`` string loaded on first ``get``. ``prefixes`` maps a spec
    prefix to a function building the object from the rest of the spec (``policy:``).
    ``forbidden`` lists characters a name may not hold; ``unknown`` names what an unknown
    spec was taken for ("cohort framework"); ``also`` lists other spec forms in messages;
    ``known`` gives the known names for a message (default: every name).
    """

    def __init__(self, kind: str, *, accepts: Callable[[object], bool], needs: str,
                 builtin: Mapping[str, T | str],
                 prefixes: Mapping[str, Callable[[str], T]] | None = None,
                 forbidden: str = "", unknown: str = "", also: str = "",
                 known: Callable[[], str] | None = None) -> None:
        self.kind, self.accepts, self.needs = kind, accepts, needs
        self.builtin = dict(builtin)
        self._prefixes, self._forbidden = dict(prefixes or {}), forbidden
        self._unknown, self._also, self._known = unknown, also, known
        self._registered: dict[str, T] = {}
        # built-ins loaded, and objects built from a spec: found by name, but not
        # registered, so they never join ``names`` (the default set of later runs)
        self._resolved: dict[str, T] = {
            k: v for k, v in self.builtin.items() if not isinstance(v, str)}

    def _article(self) -> str:
        return "an" if self.kind[:1] in "aeiou" else "a"

    def register(self, name: str, obj: T) -> T:
        """Make ``obj`` available as ``name``. Refuses a bad or taken name (ValueError) and
        an object of the wrong kind (TypeError)."""
        without = f" without {', '.join(map(repr, self._forbidden))}" if self._forbidden else ""
        if not isinstance(name, str) or not name or any(c in name for c in self._forbidden):
            raise ValueError(f"{self._article()} {self.kind} name must be a non-empty "
                             f"string{without}")
        if name in self.builtin or name in self._registered:
            raise ValueError(f"{self._article()} {self.kind} named {name!r} is already "
                             "registered")
        if not self.accepts(obj):
            raise TypeError(not_a(obj, self.kind, self.needs))
        self._registered[name] = obj
        return obj

    def unregister(self, name: str) -> None:
        """Forget a user-registered or resolved ``name`` (built-ins stay; refused)."""
        if name in self.builtin:
            raise ValueError(f"{name!r} is a built-in {self.kind}")
        self._registered.pop(name, None)
        self._resolved.pop(name, None)

    def names(self) -> tuple[str, ...]:
        """Every name, built-ins then the user's, in registration order."""
        return (*self.builtin, *self._registered)

    def known(self) -> str:
        """The known names, for a one-line message."""
        return self._known() if self._known else ", ".join(self.names())

    def resolve(self, spec: str) -> str:
        """The name under which :meth:`get` finds what ``spec`` names: a name, a spec with
        one of the owner's prefixes, or ``module:attr`` naming an object, or a class or
        factory returning one (built once, cached under ``spec``). ValueError, one line."""
        if spec in self._registered or spec in self.builtin or spec in self._resolved:
            return spec
        for prefix, build in self._prefixes.items():
            if spec.startswith(prefix):
                self._resolved[spec] = build(spec[len(prefix):])
                return spec
        if any(c in spec for c in self._forbidden):
            raise ValueError(f"bad {self._unknown or self.kind} {shown(spec)}: names contain "
                             f"no {', '.join(map(repr, self._forbidden))}")
        self._resolved[spec] = self._load(spec)
        return spec

    def _load(self, spec: str) -> T:
        return load(spec, kind=self.kind, accepts=self.accepts, known=self.known(),
                    needs=self.needs, also=self._also, unknown=self._unknown)

    def get(self, name: str) -> T:
        """The object registered, built in or resolved as ``name`` (a lazy built-in is
        loaded now); KeyError naming the known ones for any other name."""
        if name in self._registered:
            return self._registered[name]
        if name not in self._resolved and isinstance(self.builtin.get(name), str):
            self._resolved[name] = self._load(self.builtin[name])
        try:
            return self._resolved[name]
        except KeyError:
            raise KeyError(f"unknown {self._unknown or self.kind} {name!r}; known: "
                           f"{', '.join(self.names())}") from None
