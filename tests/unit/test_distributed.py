"""Suites on Dask: a LocalCluster, and a real scheduler with worker processes on loopback.

The records of a Dask run must equal those of a local run line for line (minus
timings), also when a worker is killed mid-run, and a run whose client was killed
resumes by submitting only the programs not yet written.
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from replayverify.cli import main
from replayverify.runs.executors import (
    DaskError,
    DaskExecutor,
    TaskTimeout,
    dask_executor,
    parse_address,
    time_limit,
)
from replayverify.verifier.suite import SuiteConfig, run_suite, suite_ids
from tests.helpers import child_env, interrupt_suite, written
from tests.helpers import records_minus_seconds as lines

SLOW = "tests.helpers:slow_region"  # 0.1 s per program more: time to kill a worker mid-task
needs_dask = pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                                reason="needs the dask extra (dask[distributed])")


# ---------------------------------------------------------------- without a cluster


@pytest.mark.parametrize("text, expected", [
    ("local", ("local", None)), ("local:3", ("local", 3)),
    ("tcp://127.0.0.1:8786", ("tcp://127.0.0.1:8786", None)),
    ("scheduler.example:8786", ("scheduler.example:8786", None)),
])
def test_addresses(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize("bad", ["local:0", "local:x", "tcp://host", "host", "://h:1", "",
                                 "local:99999", "local:" + "9" * 5000, "local:\u0663"])
def test_bad_addresses_are_refused_in_one_line(bad):
    with pytest.raises(DaskError, match="bad --dask") as info:
        parse_address(bad)
    assert "\n" not in str(info.value)


def test_time_limit_stops_a_task_in_a_worker_thread():
    """Dask runs tasks outside the main thread, where SIGALRM cannot reach them."""
    seen = []

    def task():
        try:
            with time_limit(0.2):
                while True:
                    sum(range(100))
        except TaskTimeout:
            seen.append("timeout")
        with time_limit(5.0):  # finishes in time: nothing fires later
            seen.append("quick")
        time.sleep(0.3)
        seen.append("after")

    t = threading.Thread(target=task)
    t.start()
    t.join(30)
    assert seen == ["timeout", "quick", "after"]


def test_without_dask_the_option_exits_2_with_the_install_hint(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    res = CliRunner().invoke(main, ["suite", "--programs", "2", "--dask", "local:1",
                                    "--out", str(tmp_path / "s")])
    assert res.exit_code == 2, res.output
    assert "pip install 'replayverify[dask]'" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


# ---------------------------------------------------------------- a LocalCluster


@pytest.fixture(scope="module")
def local2():
    pytest.importorskip("distributed")
    with dask_executor("local:2", label="test") as ex:
        yield ex


@needs_dask
@pytest.mark.parametrize("batch", [1, 5])
def test_local_cluster_gives_the_records_of_a_local_run(local2, tmp_path, batch):
    ref = run_suite(SuiteConfig(programs=16, seed=2, workers=1, out=tmp_path / "local"))
    got = run_suite(SuiteConfig(programs=16, seed=2, out=tmp_path / "dask"),
                    executor=DaskExecutor(local2.client, label="test", batch=batch))
    assert lines(tmp_path / "dask") == lines(tmp_path / "local")
    assert {k: v for k, v in got.items() if k != "seconds"} == \
        {k: v for k, v in ref.items() if k != "seconds"}


@needs_dask
def test_a_worker_with_other_code_refuses_the_run_in_one_line(local2, tmp_path):
    ex = DaskExecutor(local2.client, label="test")
    ex.fingerprint = "0.0.0+other"  # as if this client ran another replayverify
    with pytest.raises(DaskError, match=r"^worker tcp://\S+ runs replayverify \S+, this "
                                        r"client 0\.0\.0\+other: install the same") as info:
        run_suite(SuiteConfig(programs=2, seed=0, out=tmp_path), executor=ex)
    assert "\n" not in str(info.value)
    assert (tmp_path / "records.jsonl").read_text() == ""


@needs_dask
@pytest.mark.parametrize("batch", [1, 3])
def test_a_task_whose_workers_all_die_becomes_its_lost_result(local2, batch):
    """In a batch, only the task that kills its worker is lost: the others run again."""
    from tests.helpers import exit_worker

    scheduler = local2.client.cluster.scheduler
    allowed = scheduler.allowed_failures
    scheduler.allowed_failures = 0  # give up after one death (the nanny restarts the worker)
    try:
        out = list(DaskExecutor(local2.client, label="test", batch=batch).map(
            exit_worker, ["a", "b", "exit"], name=str,
            lost=lambda task, why: f"lost {task}: {why}"))
    finally:
        scheduler.allowed_failures = allowed
    assert out[:2] == ["a", "b"]
    assert out[2].startswith("lost exit: every Dask worker that ran it died")


@needs_dask
def test_cohort_on_a_local_cluster_gives_the_records_of_a_local_run(local2, tmp_path):
    from replayverify.cohort.runner import CohortConfig, run_cohort

    def config(out):
        return CohortConfig(frameworks=("replayverify",), seeds=(420000, 420002), workers=1,
                            out=out)

    run_cohort(config(tmp_path / "local"))
    run_cohort(config(tmp_path / "dask"),
               executor=DaskExecutor(local2.client, label="cohort"))
    assert lines(tmp_path / "dask") == lines(tmp_path / "local")
    assert len(lines(tmp_path / "local")) == 100


@needs_dask  # (DaskExecutor.map imports distributed first)
def test_task_ids_must_be_unique():
    class Client:
        def nthreads(self):
            return {"w": 1}

    with pytest.raises(ValueError, match="unique"):
        list(DaskExecutor(Client()).map(str, ["a", "a"], name=str, lost=None))


# ---------------------------------------------------------------- `dask scheduler` + workers


class Loopback:
    """``dask scheduler`` and ``dask worker`` processes on 127.0.0.1, free ports."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.file = root / "scheduler.json"
        self.env = child_env()
        self.procs: dict[str, subprocess.Popen] = {}
        self.address = ""

    def spawn(self, name: str, *args: str) -> None:
        with open(self.root / f"{name}.log", "wb") as log:
            self.procs[name] = subprocess.Popen([sys.executable, "-m", "dask", *args],
                                                stdout=log, stderr=subprocess.STDOUT,
                                                env=self.env, start_new_session=True)

    def start(self) -> None:
        self.spawn("scheduler", "scheduler", "--host", "127.0.0.1", "--port", "0",
                   "--no-dashboard", "--scheduler-file", str(self.file))
        deadline = time.monotonic() + 120
        while not self.file.exists() or not self.file.read_text().strip():
            assert self.procs["scheduler"].poll() is None, self.log("scheduler")
            assert time.monotonic() < deadline, "the scheduler did not start in 120 s"
            time.sleep(0.1)
        time.sleep(0.1)  # the file is written in one go, but be sure it is complete
        self.address = json.loads(self.file.read_text())["address"]

    def worker(self, name: str) -> None:
        self.spawn(name, "worker", "--scheduler-file", str(self.file), "--name", name,
                   "--nthreads", "1", "--no-nanny", "--no-dashboard", "--host", "127.0.0.1",
                   "--death-timeout", "120", "--local-directory", str(self.root / name))

    def kill(self, name: str) -> None:
        self.procs[name].kill()
        self.procs[name].wait(30)

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        """Kill every process (a graceful close can take seconds; nothing here needs one)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


@pytest.fixture(scope="module")
def loopback(tmp_path_factory):
    pytest.importorskip("distributed")
    cluster = Loopback(tmp_path_factory.mktemp("dask"))
    try:
        cluster.start()
        cluster.worker("steady")
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The local run the Dask runs must reproduce."""
    out = tmp_path_factory.mktemp("reference") / "s"
    from replayverify.engines import registry

    run_suite(SuiteConfig(programs=24, seed=3, workers=1, out=out,  # no fork: JAX may be
                          engines=(registry.resolve(SLOW),)))  # loaded, with its threads
    return lines(out)


def _worker_address(client, name: str) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for address, info in client.scheduler_info(n_workers=-1)["workers"].items():
            if info.get("name") == name:
                return address
        time.sleep(0.1)
    raise AssertionError(f"worker {name} did not join in 120 s")


@needs_dask
def test_a_worker_killed_mid_run_leaves_every_record_exactly_once(loopback, reference,
                                                                  tmp_path):
    from replayverify.engines import registry

    loopback.worker("doomed")
    killed = []
    with dask_executor(loopback.address, label="test") as ex:
        doomed = _worker_address(ex.client, "doomed")

        def on_program(outcome, n):
            if killed or outcome is None:
                return
            busy = ex.client.processing(workers=[doomed]).get(doomed, ())
            if busy:  # the scheduler has given it programs: kill it in the middle
                loopback.kill("doomed")
                killed.append(busy)

        summary = run_suite(SuiteConfig(programs=24, seed=3, out=tmp_path,
                                        engines=(registry.resolve(SLOW),)),
                            on_program=on_program, executor=ex)
    assert killed, "the doomed worker never had a program to die on"
    assert summary["verdict"] == "clean"
    assert lines(tmp_path) == reference


@needs_dask
def test_resume_after_the_client_is_killed_submits_only_what_is_missing(loopback, reference,
                                                                       tmp_path):
    out = tmp_path / "s"
    cmd = [sys.executable, "-m", "replayverify", "suite", "--programs", "24", "--seed", "3",
           "--engine", SLOW, "--dask", loopback.address, "--out", str(out)]
    proc = subprocess.Popen(cmd, env=loopback.env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while written(out) < 3:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "no program was written in 120 s"
        time.sleep(0.01)
    proc.kill()
    proc.wait(30)
    done = written(out)
    assert 3 <= done < 24, done

    from replayverify.engines import registry

    submitted = []

    class Spy:
        def __init__(self, inner):
            self.inner = inner

        def map(self, fn, tasks, *, name, lost):
            submitted.extend(name(t) for t in tasks)
            return self.inner.map(fn, tasks, name=name, lost=lost)

    with dask_executor(loopback.address, label="test") as ex:
        run_suite(SuiteConfig(programs=24, seed=3, out=out, resume=True,
                              engines=(registry.resolve(SLOW),)), executor=Spy(ex))
    ids = [str(p) for p in suite_ids(24, 3)]
    assert written(out) == 24 and submitted == ids[done:]
    assert lines(out) == reference


@needs_dask
def test_ctrl_c_gives_one_line_exit_130_and_a_directory_any_executor_resumes(reference,
                                                                            tmp_path):
    from replayverify.engines import registry

    out = tmp_path / "s"
    interrupt_suite(out, 24, "--engine", SLOW, "--dask", "local:1")
    run_suite(SuiteConfig(programs=24, seed=3, workers=1, out=out, resume=True,
                          engines=(registry.resolve(SLOW),)))  # and locally this time
    assert lines(out) == reference


@needs_dask
def test_a_cohort_task_whose_dask_workers_die_is_error_records_and_the_run_goes_on(
        local2, tmp_path):
    """A lost cohort task on Dask is what it is on local processes (tests/unit/test_faults):
    one ``error`` record per method, ``lost: ...``, and the other tasks' records.

    One task in flight at a time (window 1): Dask also counts a death against a task that
    was only queued on the dying worker, and with no failure allowed that innocent task
    would be lost too, whenever the scheduler happened to put it there."""
    from replayverify.cohort.runner import CohortConfig, run_cohort

    scheduler = local2.client.cluster.scheduler
    allowed = scheduler.allowed_failures
    scheduler.allowed_failures = 0  # give up after one death (the nanny restarts the worker)
    try:
        summary = run_cohort(
            CohortConfig(frameworks=("tests.unit.test_faults:OsExitOnOneToy",),
                         seeds=(5, 6), workers=1, out=tmp_path),
            executor=DaskExecutor(local2.client, label="cohort", window=1))
    finally:
        scheduler.allowed_failures = allowed
    recs = lines(tmp_path)
    lost = [r for r in recs if r["case"] == "raw-copy/5/float64"]
    assert [(r["method"], r["outcome"]) for r in lost] == [("replay", "error"), ("stale", "error")]
    assert all(r["detail"].startswith("lost: every Dask worker that ran it died") for r in lost)
    others = [r for r in recs if r["case"] != "raw-copy/5/float64"]
    assert len(others) == 18 and {r["outcome"] for r in others} != {"error"}
    assert summary["verdict"] == "unexpected" and summary["outcomes"]["error"] == 2
