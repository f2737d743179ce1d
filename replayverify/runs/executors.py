"""Where tasks run: worker processes on this machine, or a Dask cluster.

A runner (the suite, the cohort) hands an executor a function and a list of tasks,
each named by a unique id, and gets ``fn(task)`` back for every task **in task
order**, one at a time, as soon as it and every task before it have finished. The
runner stays the only writer of its output, so what it writes, and how ``--resume``
continues it, does not depend on where the tasks ran.

``ProcessPool`` is the local executor: forked workers, a pipe each, tasks sent in
batches; a task that kills its worker twice (once alone), or runs past a hard time
limit, is ``lost``; workers die with their parent. ``DaskExecutor``
(the optional ``dask`` extra) submits tasks to a Dask scheduler in a bounded window,
keyed by run token and task id, lets the scheduler rerun a task whose worker died, and
asks ``lost(task, reason)`` for the result of a task that every worker it was given to
died on. Each task carries
the package's source fingerprint (:mod:`replayverify.runs.fingerprint`); a worker whose
replayverify differs refuses it.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Protocol, TypeVar

from replayverify.runs.fingerprint import source_fingerprint
from replayverify.untrusted import shown

T = TypeVar("T")
R = TypeVar("R")

DASK_HINT = "pip install 'replayverify[dask]' (from a checkout: pip install -e '.[dask]')"
CONNECT_TIMEOUT = 30.0  # seconds to reach a scheduler
WORKER_WAIT = 120.0  # seconds for the first worker to join


HARD_GRACE = 10.0  # a task still running this long after its own time limit: worker killed


class DaskError(RuntimeError):
    """A Dask cluster that cannot be used (exit status 2 on the command line)."""


class TaskTimeout(BaseException):
    """Raised inside a task that ran past its time limit. Not an ``Exception``: a plug-in's
    ``except Exception`` does not swallow it (one that catches everything is killed by
    ``ProcessPool``'s hard limit)."""


class Executor(Protocol):
    """Runs ``fn`` on every task; yields the results in task order."""

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], *, name: Callable[[T], str],
            lost: Callable[[T, str], R]) -> Iterator[R]: ...


# ---------------------------------------------------------------- time limits


def _raise_timeout(signum, frame):  # pragma: no cover - runs in the signal handler
    raise TaskTimeout


# True in a local worker process (``_serve``), where SIGALRM is time_limit's alone: the
# handler is installed once there, and a task only arms and disarms the timer (the signal
# module's signal() costs ~3 us a call: it converts the handler it returns to an enum)
_ALARM_IS_OURS = False


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``TaskTimeout`` in this thread once ``seconds`` have passed (0: no limit).

    In the main thread a SIGALRM timer does it. Signals reach only the main thread, and
    Dask workers run tasks in a thread pool, so elsewhere a timer thread schedules the
    exception in this thread with ``PyThreadState_SetAsyncExc``. Both take effect
    between bytecodes, never inside one long C call, so the two limits behave alike.
    """
    if seconds <= 0:
        yield
        return
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM"):
        install = not _ALARM_IS_OURS
        if install:
            old = signal.signal(signal.SIGALRM, _raise_timeout)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            if install:
                signal.signal(signal.SIGALRM, old)
        return
    tid = ctypes.c_ulong(threading.get_ident())
    lock = threading.Lock()
    armed = [True]

    def fire() -> None:
        with lock:
            if armed[0]:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(tid, ctypes.py_object(TaskTimeout))

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            armed[0] = False
            timer.cancel()
            ctypes.pythonapi.PyThreadState_SetAsyncExc(tid, None)  # drop one not yet raised


# ---------------------------------------------------------------- local processes


class _Raised:
    """An exception a task raised in a worker, sent back to be raised in task order."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


def _die_with(parent: int) -> None:
    """End this worker when ``parent`` dies, even one busy in a hung plug-in: the kernel's
    parent-death signal (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``); elsewhere the pipe's
    end (read between tasks) stops it."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the signal was asked for
        os._exit(0)


def _serve(conn: Connection, fn: Callable[[T], R], inherited: list[Connection],
           parent: int, clock=None) -> None:
    """A local worker: runs ``fn`` on each batch of tasks it is sent, sends the results.

    It closes the parent's pipe ends that the fork gave it (so that it sees the parent go
    away), ignores SIGINT (a terminal sends Ctrl-C to the whole group; the parent stops
    its workers itself) and exits when the parent's end of its pipe closes. What it
    inherited is frozen out of its garbage collections (``gc.freeze``): a full collection
    would otherwise walk, and copy page by page, the parent's whole heap. Its SIGALRM
    handler is :func:`time_limit`'s, for good. It dies with its parent (:func:`_die_with`).
    ``clock`` (shared memory) holds when its current task started (``time.monotonic``;
    0 while it waits) and its place in the batch, which the parent reads to enforce a
    hard time limit.
    """
    global _ALARM_IS_OURS
    _die_with(parent)
    gc.freeze()
    for other in inherited:
        other.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, _raise_timeout)
        _ALARM_IS_OURS = True
    try:
        while (batch := conn.recv()) is not None:
            out: list = []
            for i, task in enumerate(batch):
                if clock is not None:
                    clock[1] = i
                    clock[0] = time.monotonic()
                try:
                    out.append(fn(task))
                except Exception as exc:
                    out.append(_Raised(exc))
            if clock is not None:
                clock[0] = 0.0
            conn.send(out)
    except (EOFError, OSError):
        pass


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    batches: deque[tuple[range, bool]]  # sent, not yet answered: (task indices, alone)
    clock: Any = None  # [when its current task started (0.0: none), its place in the batch]


@dataclass(frozen=True)
class ProcessPool:
    """``workers`` forked processes on this machine (1: in this process).

    ``batch``: up to that many consecutive tasks go to a worker as one message, and
    their results come back as one (never so many that a worker gets fewer than four
    batches, so the last ones still finish together); results are yielded one task at a
    time, in task order, whatever the batch. Each worker has its own pipe and up to two
    batches in hand (tasks must be small: they are sent from this thread); the parent
    runs no helper thread. (``multiprocessing.Pool``, used before, has one that
    spins on every result left unread while the caller works: ~10 % of a suite's CPU
    with one program per message, ~3 % with 16.) When a worker dies, the tasks of its
    batches run again, each alone in a new worker; ``lost(task, reason)`` gives the
    result of a task whose lone worker died too. A task's exception is raised here.

    ``limit`` > 0 is a hard wall-clock limit per task: a worker whose task has run that
    long is killed (SIGKILL) and handled as one that died, so a task that ignores its
    own time limit, hangs in C or calls ``os._exit`` loses only itself. With a limit,
    even one worker (or one task) runs in a child process; without, ``workers`` 1 runs
    the tasks in this process. Workers die with this process (:func:`_die_with`).
    """

    workers: int
    batch: int = 1
    limit: float = 0.0

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], *, name: Callable[[T], str],
            lost: Callable[[T, str], R]) -> Iterator[R]:
        if not tasks or (not self.limit and (self.workers <= 1 or len(tasks) <= 1)):
            for task in tasks:
                yield fn(task)
            return
        chunk = max(1, min(self.batch, len(tasks) // (4 * self.workers)))
        # two batches in hand keep a worker busy while the parent writes its last results;
        # tasks sent one by one (the cohort's, long) go one at a time, to end together
        ahead = 2 if chunk > 1 else 1
        # batches made as they are sent (a run of any length holds only those in flight);
        # ``todo`` holds the ones to send again, each alone, after a worker died
        fresh = ((range(i, min(i + chunk, len(tasks))), False)
                 for i in range(0, len(tasks), chunk))
        todo: deque[tuple[range, bool]] = deque()
        left = [len(range(0, len(tasks), chunk))]  # fresh batches not yet taken

        def take() -> tuple[range, bool] | None:
            if todo:
                return todo.popleft()
            if left[0]:
                left[0] -= 1
                return next(fresh)
            return None
        ctx = mp.get_context("fork" if sys.platform != "win32" else "spawn")
        workers: list[_Worker] = []
        done: dict[int, R | _Raised] = {}

        def start() -> None:
            here, there = ctx.Pipe()
            inherited = [here, *(w.conn for w in workers)] if ctx.get_start_method() == "fork" \
                else []
            clock = ctx.RawArray("d", 2) if self.limit else None
            process = ctx.Process(target=_serve, args=(there, fn, inherited, os.getpid(), clock),
                                  daemon=True)
            process.start()
            there.close()
            workers.append(_Worker(process, here, deque(), clock))

        def feed(w: _Worker) -> None:
            while len(w.batches) < ahead and (item := take()) is not None:
                part, alone = item
                try:
                    w.conn.send([tasks[i] for i in part])
                except OSError:  # it died; its pipe says so to wait() below
                    todo.appendleft((part, alone))
                    return
                w.batches.append((part, alone))

        def died(w: _Worker, reason: str = "", culprit: int | None = None) -> None:
            """``culprit``: the task (index) known to have killed it, lost at once."""
            w.process.join()
            w.conn.close()
            workers.remove(w)
            reason = reason or f"its worker process died (exit code {w.process.exitcode})"
            again = list(w.batches)
            if again:  # the first batch was running: its tasks again, each alone
                part, alone = again.pop(0)
                if alone or culprit is not None:
                    first = part.start if culprit is None else culprit
                    done[first] = lost(tasks[first], reason)
                again[:0] = [(range(i, i + 1), True) for i in part
                             if not alone and i != culprit]
            todo.extendleft(reversed(again))
            if todo or left[0]:
                start()

        try:
            for _ in range(min(self.workers, left[0])):
                start()
            written = 0
            while written < len(tasks):
                for w in workers:
                    feed(w)
                by_conn = {w.conn: w for w in workers}
                ready = wait(list(by_conn), self._wait(workers))
                for w in self._overdue(workers):
                    culprit = w.batches[0][0].start + int(w.clock[1])
                    w.process.kill()
                    died(w, f"it ran past the hard time limit of {self.limit:g} s and was "
                            "killed", culprit)
                    ready = [c for c in ready if c is not w.conn]
                for conn in ready:
                    w = by_conn[conn]
                    try:
                        out = conn.recv()
                    except (EOFError, OSError):
                        died(w)
                        continue
                    part, _ = w.batches.popleft()
                    done.update(zip(part, out))
                while written in done:
                    result = done.pop(written)
                    if isinstance(result, _Raised):
                        raise result.exc
                    yield result
                    written += 1
        finally:
            for w in workers:
                w.process.terminate()
            for w in workers:
                w.process.join()
                w.conn.close()


    def _wait(self, workers: list[_Worker]) -> float | None:
        """How long to wait for a result: until the first task could run past the limit."""
        if not self.limit:
            return None
        started = [w.clock[0] for w in workers if w.clock[0]]
        if not started:
            return self.limit  # (a task starting meanwhile is looked at then)
        return max(0.0, min(started) + self.limit - time.monotonic()) + 0.01

    def _overdue(self, workers: list[_Worker]) -> list[_Worker]:
        if not self.limit:
            return []
        now = time.monotonic()
        return [w for w in workers if w.clock[0] and now - w.clock[0] > self.limit]


# ---------------------------------------------------------------- Dask


@dataclass(frozen=True)
class _Refused:
    """A worker's answer to a task built by a different replayverify."""

    worker: str
    fingerprint: str


def _run_on_worker(fn: Callable[[T], R], tasks: list[T],
                   fingerprint: str) -> list[R] | _Refused:
    """What a Dask worker runs: ``fn`` on each task, if this worker has the client's code."""
    mine = source_fingerprint()
    if mine != fingerprint:
        from distributed import get_worker

        return _Refused(get_worker().address, mine)
    return [fn(task) for task in tasks]


def max_local_workers() -> int:
    """The most ``local:N`` worker processes: twice this machine's CPUs, at least 4 (each
    process holds its own interpreter and numpy, ~100 MB; more only compete for CPUs)."""
    return max(4, 2 * (os.cpu_count() or 1))


def parse_address(text: str) -> tuple[str, int | None]:
    """``local`` / ``local:N`` -> ("local", N or None); a scheduler address -> (text, None)."""
    if text == "local" or text.startswith("local:"):
        n = text.partition(":")[2]
        if n and not (n.isascii() and n.isdigit() and len(n) < 10 and int(n) >= 1):
            raise DaskError(f"bad --dask {shown(text)}: local:N needs N >= 1 worker processes")
        if n and int(n) > max_local_workers():
            raise DaskError(f"bad --dask {shown(text)}: at most {max_local_workers()} local "
                            "worker processes here (twice the CPUs, at least 4)")
        return "local", int(n) if n else None
    scheme, sep, rest = text.rpartition("://")
    host, colon, port = rest.rpartition(":")
    if not (colon and host and port.isdigit()) or (sep and not scheme):
        raise DaskError(f"bad --dask {shown(text)}: expected a scheduler address like "
                        "tcp://HOST:8786, or local[:N] for N worker processes here")
    return text, None


class DaskExecutor:
    """Tasks on a Dask cluster, at most ``window`` of them submitted and not yet written.

    ``batch`` consecutive tasks make one Dask task (default 1): Dask's scheduler and
    this client spend a few milliseconds per Dask task, so on a large cluster of short
    tasks batching keeps them from being the bottleneck. A batch's key is
    ``<label>-<run token>-<first task id>`` (with ``+<n more>`` when it holds more than
    one): the token is new for every executor, so a resumed run, a second client on the
    same scheduler, or tasks a killed client left behind never share a key (Dask would
    hand back the other task's result). When every worker given a batch died, its tasks
    are submitted again one by one under their own keys, so that ``lost`` is asked only
    for the task that kills workers.
    """

    def __init__(self, client, label: str = "task", window: int | None = None,
                 batch: int = 1) -> None:
        if batch < 1:
            raise ValueError("batch must be at least 1")
        self.client = client
        self.label = label
        self.batch = batch
        threads = sum(client.nthreads().values())
        self.window = window or max(16, 4 * threads) * batch
        self.token = uuid.uuid4().hex[:12]
        self.fingerprint = source_fingerprint()

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], *, name: Callable[[T], str],
            lost: Callable[[T, str], R]) -> Iterator[R]:
        from distributed import as_completed

        # ids made as tasks are submitted (a run of any length holds only its window's);
        # two tasks in flight under one key would share one result: refused, as is any
        # repeat among the first window's ids (before anything is submitted)
        first = [name(tasks[i]) for i in range(min(len(tasks), self.window))]
        if len(set(first)) != len(first):
            raise ValueError("task ids must be unique within a run")
        members: dict[str, range] = {}  # Dask key -> the tasks it runs
        finished: dict[int, R] = {}
        running = as_completed()

        def submit(part: range) -> None:
            key = f"{self.label}-{self.token}-{name(tasks[part.start])}"
            if len(part) > 1:
                key += f"+{len(part) - 1}"
            if key in members:
                raise ValueError("task ids must be unique within a run")
            future = self.client.submit(_run_on_worker, fn, [tasks[i] for i in part],
                                        self.fingerprint, key=key)
            members[future.key] = part
            running.add(future)

        submitted = written = 0
        try:
            while written < len(tasks):
                while submitted < len(tasks) and submitted - written < self.window:
                    part = range(submitted, min(submitted + self.batch, len(tasks)))
                    submit(part)
                    submitted = part.stop
                future = next(running)
                part = members.pop(future.key)
                out = self._result(future, name(tasks[part.start]))
                future.release()
                if isinstance(out, str) and len(part) > 1:  # lost: find the culprit
                    for i in part:
                        submit(range(i, i + 1))
                elif isinstance(out, str):
                    finished[part.start] = lost(tasks[part.start], out)
                else:
                    finished.update(zip(part, out))
                while written in finished:
                    yield finished.pop(written)
                    written += 1
        finally:
            running.clear()  # futures dropped here are released on the scheduler

    def _result(self, future, first: str) -> list | str:
        """The batch's results, or why every worker that ran it died (a str)."""
        from distributed import CancelledError
        from distributed.scheduler import KilledWorker

        try:
            out = future.result()
        except KilledWorker as exc:
            where = getattr(exc.last_worker, "address", "?")
            return (f"every Dask worker that ran it died ({exc.allowed_failures + 1} "
                    f"workers, the last {where})")
        except CancelledError:
            raise DaskError(f"the Dask scheduler dropped task {first}: was the connection "
                            "lost?") from None
        except Exception as exc:
            raise DaskError(f"task {first} failed on a Dask worker: "
                            f"{type(exc).__name__}: {exc} (every worker needs replayverify "
                            f"{self.fingerprint})") from None
        if isinstance(out, _Refused):
            raise DaskError(f"worker {out.worker} runs replayverify {out.fingerprint}, this "
                            f"client {self.fingerprint}: install the same version everywhere")
        return out


@contextmanager
def _interrupt_ignored() -> Iterator[None]:
    """SIGINT ignored while local workers start, so that Ctrl-C reaches only the client.

    A terminal sends Ctrl-C to every process of the group; the client then closes the
    cluster itself, instead of each worker process printing its own traceback.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _ignore_interrupt_plugin():
    """A worker plugin with the same effect on local workers that the nanny restarts."""
    from distributed import WorkerPlugin

    class IgnoreInterrupt(WorkerPlugin):
        name = "replayverify-ignore-interrupt"

        def setup(self, worker) -> None:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, signal.SIG_IGN)

    return IgnoreInterrupt()


@contextmanager
def dask_executor(address: str, label: str = "task", window: int | None = None,
                  batch: int = 1) -> Iterator[DaskExecutor]:
    """Connect to ``address`` (or start ``local[:N]``) for the duration of a run."""
    where, n_local = parse_address(address)
    try:
        import distributed
    except ImportError:
        raise DaskError(f"--dask needs Dask: {DASK_HINT}") from None
    cluster = None
    if where == "local":
        try:
            with _interrupt_ignored():  # the worker processes inherit it
                cluster = distributed.LocalCluster(
                    n_workers=n_local or os.cpu_count() or 1, threads_per_worker=1,
                    processes=True, host="127.0.0.1", silence_logs=logging.ERROR,
                    dashboard_address=None,  # no dashboard; its HTTP server on any free port
                    scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
        except (OSError, RuntimeError, TimeoutError) as exc:
            raise DaskError(f"cannot start a local Dask cluster ({address}): "
                            f"{type(exc).__name__}: {exc}") from None
    try:
        if cluster is not None:
            client = distributed.Client(cluster)
            client.register_plugin(_ignore_interrupt_plugin())  # and workers restarted later
        else:
            try:
                client = distributed.Client(where, timeout=CONNECT_TIMEOUT)
            except (OSError, TimeoutError) as exc:
                raise DaskError(f"cannot reach a Dask scheduler at {address}: {exc}") from None
        try:
            try:
                client.wait_for_workers(1, timeout=WORKER_WAIT)
            except TimeoutError:
                raise DaskError(f"no Dask worker joined {address} within {WORKER_WAIT:g} s") \
                    from None
            yield DaskExecutor(client, label=label, window=window, batch=batch)
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()
