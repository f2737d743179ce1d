"""An adapter whose framework reads an environment variable at import, run in a child.

``KERAS_BACKEND`` (keras on torch or on JAX) and ``JAX_REMAT3`` are read once, when the
framework is imported, so one process cannot run both settings. ``Isolated`` keeps, per
process that uses it (a cohort worker, or the parent with ``--workers 1``), one child
Python process started with the variables set; the framework is imported there once and
every ``draw_tape``, ``run`` and ``version`` call is sent to it (pickled over its
stdin/stdout). The child's own prints go to stderr, so they cannot corrupt the replies.

An exception the framework raised in the child comes back as an exception of the same
class name and message (a cohort ``rejected`` record reads only those two).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import pickle
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, BinaryIO

from replayverify.cohort.adapter import DrawTape, Method, Observation
from replayverify.cohort.cases import Case
from replayverify.plugins import load

_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding replayverify/
_LEN = struct.Struct("<Q")


def _send(fh: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj)
    fh.write(_LEN.pack(len(data)) + data)
    fh.flush()


def _recv(fh: BinaryIO) -> Any:
    head = fh.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError
    return pickle.loads(fh.read(_LEN.unpack(head)[0]))


def raised(type_name: str, message: str) -> Exception:
    """An exception named like the child's (records keep the type name and message)."""
    return type(type_name, (RuntimeError,), {"__module__": "child"})(message)


class Isolated:
    """Calls ``target`` (a ``module:attr`` adapter spec) in a child with ``env`` set
    (``XLA_FLAGS`` there are appended to the user's).

    The child starts on first use in each process (a forked worker starts its own) and
    ends when that process closes its end of the pipe, or at ``close()``.
    """

    def __init__(self, target: str, env: dict[str, str]):
        self.target, self.env = target, env
        self._child: subprocess.Popen | None = None
        self._pid = 0
        self._lock = threading.Lock()  # Dask runs tasks in threads: one call at a time

    def call(self, what: str, *args: Any) -> Any:
        with self._lock:
            return self._call(what, args)

    def _call(self, what: str, args: tuple) -> Any:
        child = self._start()
        try:
            _send(child.stdin, (what, args))
            status, value = _recv(child.stdout)
        except (EOFError, OSError):
            self._child = None
            raise RuntimeError(f"the {self.target} child process died "
                               f"(exit status {child.poll()})") from None
        if status == "ok":
            return value
        raise raised(*value)

    def close(self) -> None:
        """End this process's child, if it has one (the next call starts another)."""
        with self._lock:
            child, self._child = self._child, None
            if child is None or self._pid != os.getpid():
                return  # none, or the parent's (a forked worker leaves it alone)
            child.stdin.close()  # serve() returns at end of input
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            child.stdout.close()

    def _start(self) -> subprocess.Popen:
        if self._child is None or self._pid != os.getpid() or self._child.poll() is not None:
            env = {**os.environ, **self.env,
                   "XLA_FLAGS": " ".join(filter(None, [os.environ.get("XLA_FLAGS"),
                                                       self.env.get("XLA_FLAGS")])),
                   "PYTHONPATH": os.pathsep.join(filter(None, [_ROOT,
                                                               os.environ.get("PYTHONPATH")]))}
            self._child = subprocess.Popen(
                [sys.executable, "-m", "replayverify.cohort.isolated", self.target],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            self._pid = os.getpid()
        return self._child


class IsolatedAdapter:
    """A cohort adapter that runs ``target`` in a child process with ``env`` set.

    Subclasses set ``name``, ``label``, ``target``, ``env``, ``package`` (whose version
    the records carry and whose absence makes them ``unsupported``), ``hint`` and
    ``method_list``.
    """

    name = label = target = package = hint = ""
    env: tuple[tuple[str, str], ...] = ()  # (variable, value); XLA_FLAGS are appended
    method_list: tuple[Method, ...] = ()

    def __init__(self) -> None:
        self.child = Isolated(self.target, dict(self.env))

    def missing(self) -> str | None:
        # find_spec, not import: this process stays free of the framework
        return None if importlib.util.find_spec(self.package) else self.hint

    def version(self) -> str:
        return importlib.metadata.version(self.package)

    def methods(self, extra: bool = False) -> tuple[Method, ...]:
        return self.method_list

    def draw_tape(self, case: Case) -> DrawTape:
        return self.child.call("draw_tape", case)

    def run(self, case: Case, method: Method) -> Observation:
        return self.child.call("run", case, method)

    def close(self) -> None:
        """End the child: what it holds (a JAX child: GBs of compiled programs and
        caches after a few hundred cases) is given back; a later call starts another."""
        self.child.close()


def serve(target: str) -> None:
    """The child: answer calls on the adapter ``target`` names until stdin closes."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints of the framework go to stderr
    adapter = load(target, kind="cohort adapter", accepts=lambda o: hasattr(o, "run"),
                   known="", needs="run()", unknown="cohort adapter")
    stdin = sys.stdin.buffer
    while True:
        try:
            what, args = _recv(stdin)
        except EOFError:
            return
        try:
            reply = ("ok", getattr(adapter, what)(*args))
        except Exception as exc:
            reply = ("err", (type(exc).__name__, str(exc)))
        _send(out, reply)


if __name__ == "__main__":
    serve(sys.argv[1])
