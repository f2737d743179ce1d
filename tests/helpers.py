"""Small builders for hand-written test programs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from replayverify.programs import load_program


def program(buffers, views, ops, loss, **rest):
    """A program from compact tuples: buffers {name: nbytes}, views (name, buf, dtype,
    offset, shape, strides), ops as dicts; the rest as SPEC §2 keys."""
    doc = {
        "format": "replayverify.program", "version": 1,
        "buffers": [{"name": n, "nbytes": b} for n, b in buffers.items()],
        "views": [
            {"name": v[0], "buffer": v[1], "dtype": v[2], "offset": v[3], "shape": list(v[4]),
             "strides": list(v[5])} for v in views
        ],
        "ops": ops, "loss": loss,
    }
    doc.update(rest)
    return load_program(doc)


def records_minus_seconds(out: Path) -> list[dict]:
    """The records a run wrote to ``out``/records.jsonl, minus timings, in file order."""
    got = []
    for line in (out / "records.jsonl").read_text().splitlines():
        d = json.loads(line)
        d.pop("seconds")
        got.append(d)
    return got


ROOT = Path(__file__).resolve().parents[1]


def written(out: Path) -> int:
    """Tasks (the suite: programs) completely written to ``out``: progress.jsonl holds
    the run's parameters, then one line per task."""
    p = out / "progress.jsonl"
    return max(p.read_text().count("\n") - 1, 0) if p.exists() else 0


def child_env(**extra: str) -> dict[str, str]:
    """This environment for a child process, this checkout first on PYTHONPATH."""
    return {**os.environ, **extra, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}


@contextmanager
def killed_at_exit(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """``proc`` (started with ``start_new_session``); its whole group killed at exit if
    it is still running then."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_written(proc: subprocess.Popen, out: Path, n: int) -> None:
    """Wait (at most 120 s) until ``proc`` has written ``n`` tasks to ``out``."""
    deadline = time.monotonic() + 120
    while written(out) < n:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, f"{n} tasks not written in 120 s"
        time.sleep(0.01)


def ctrl_c(proc: subprocess.Popen, out: Path, task: str, after: int = 2) -> None:
    """Ctrl-C ``proc``'s group once it has written ``after`` tasks (``task``: what the
    command calls one); it must exit 130 with the one-line message naming ``--resume``."""
    with killed_at_exit(proc):
        wait_written(proc, out, after)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends to the whole group
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert [line for line in err.splitlines() if line.strip()] == [
        f"replayverify: interrupted; every finished {task}'s records are in "
        f"{out / 'records.jsonl'}: continue with the same command and --resume"]


class SlowRegion:
    """The region engine, 0.1 s slower per run: a suite with it keeps a Dask worker busy
    long enough to be killed in the middle of a program (tests/unit/test_distributed.py)."""

    name = "slow-region"

    def run(self, program, *, admission=None):
        import time

        from replayverify.engines import registry

        time.sleep(0.1)
        return registry.get("region").run(program, admission=admission)


slow_region = SlowRegion()  # --engine tests.helpers:slow_region


def interrupt_suite(out: Path, programs: int, *args: str) -> None:
    """Run ``replayverify suite --programs PROGRAMS --seed 3 ARGS --out OUT`` and Ctrl-C it
    (:func:`ctrl_c`) once it has written two programs: it stops before the last one."""
    cmd = [sys.executable, "-m", "replayverify", "suite", "--programs", str(programs),
           "--seed", "3", *args, "--out", str(out)]
    proc = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    ctrl_c(proc, out, "program")
    assert written(out) < programs


def crash_or_raise(task: int) -> int:
    """``task`` back, but for 13: end the process, as a crash would; for 7: raise."""
    import os

    if task == 13:
        os._exit(3)
    if task == 7:
        raise ValueError("seven")
    return task


def exit_worker(task: str) -> str:
    """``task`` back, but for "exit": then end the process, as a crash would (a Dask task
    whose worker dies). It waits 1 s first, so that the worker has reported the tasks it
    finished before (otherwise the scheduler counts them as dying with it)."""
    import os
    import time

    if task == "exit":
        time.sleep(1.0)
        os._exit(3)
    return task


# ---------------------------------------------------------------- faulty engine plug-ins
# (--engine tests.helpers:ExitEngine, ...: tests/unit/test_faults.py and the surface fuzzer)


class _FaultyEngine:
    name = "faulty"

    def fault(self):
        raise NotImplementedError

    def run(self, program, *, admission=None):
        return self.fault()


class ExitEngine(_FaultyEngine):
    def fault(self):
        sys.exit(0)


class InterruptEngine(_FaultyEngine):
    def fault(self):
        raise KeyboardInterrupt


class NoneEngine(_FaultyEngine):
    def fault(self):
        return None


class RaiseEngine(_FaultyEngine):
    def fault(self):
        raise MemoryError("multi\nline")


class JunkEngine(_FaultyEngine):
    def fault(self):
        return {"gradient": [1.0]}


class HangEngine(_FaultyEngine):
    """Swallows the task's timeout (and everything else) and never returns."""

    def fault(self):
        import time

        while True:
            try:
                time.sleep(0.05)
            except BaseException:
                continue


class OsExitEngine(_FaultyEngine):
    def fault(self):
        import os

        os._exit(7)
