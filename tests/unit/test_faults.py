"""Faults of plug-ins contained (issue #28): an engine or cohort adapter that exits, raises
its own KeyboardInterrupt, returns junk, hangs or ends its process gives ``error`` (or
``lost``) records or one line, never a silent exit 0 or a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replayverify.engines import registry
from tests.cohort.test_cohort_core import ToyAdapter
from tests.helpers import ROOT, child_env

HERE = "tests.helpers"  # the faulty engines
TOYS = "tests.unit.test_faults"  # the faulty adapters


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replayverify", *args], capture_output=True,
                          text=True, env=child_env(), cwd=ROOT, check=False, timeout=timeout)


@pytest.mark.parametrize(("engine", "detail"), [
    ("ExitEngine", "PluginFault: called sys.exit(0)"),
    ("InterruptEngine", "PluginFault: raised KeyboardInterrupt (no Ctrl-C was pressed)"),
    ("NoneEngine", "PluginFault: the engine's run returned None, not EngineResult"),
])
@pytest.mark.parametrize("command", ["check", "replay"])
def test_an_engine_that_exits_or_returns_junk_gives_error_records_in_process(
        tmp_path, engine, detail, command):
    target = str(ROOT / "examples" / "shift-tanh.json") if command == "check" \
        else "s0/derivative/000001"
    res = cli(command, target, "--json", "--engine", f"{HERE}:{engine}")
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr == ""
    recs = [json.loads(x) for x in res.stdout.splitlines()]
    mine = [r for r in recs if r["engine"] == f"{HERE}:{engine}"]
    assert [r["outcome"] for r in mine] == ["error", "error"]
    assert {r["detail"] for r in mine} == {detail}


def test_a_suite_in_process_with_an_exiting_engine_writes_its_summary(tmp_path):
    out = tmp_path / "s"
    res = cli("suite", "--programs", "3", "--workers", "1", "--timeout", "0", "--out", str(out),
              "--engine", f"{HERE}:ExitEngine", "--no-shrink")
    assert res.returncode == 1, res.stdout + res.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "failing"
    assert summary["outcomes"][f"gradient/{HERE}:ExitEngine"] == {"error": 3}


def test_an_engine_that_swallows_its_timeout_is_killed_and_loses_only_its_program(
        tmp_path, monkeypatch):
    import replayverify.runs.executors as executors
    import replayverify.verifier.suite as suite_mod

    monkeypatch.setattr(executors, "HARD_GRACE", 0.5)
    engine = registry.resolve(f"{HERE}:HangEngine")
    summary = suite_mod.run_suite(suite_mod.SuiteConfig(
        programs=2, workers=1, timeout=0.2, out=tmp_path, engines=(engine,), shrink=False))
    recs = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert [r["detail"] for r in recs] == \
        ["lost: it ran past the hard time limit of 0.7 s and was killed"] * 2
    assert summary["verdict"] == "failing"


def test_an_engine_that_ends_its_process_loses_only_its_program(tmp_path):
    out = tmp_path / "s"
    res = cli("suite", "--programs", "2", "--workers", "1", "--out", str(out), "--engine",
              f"{HERE}:OsExitEngine", "--no-shrink")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert [r["detail"] for r in recs] == ["lost: its worker process died (exit code 7)"] * 2


@pytest.mark.parametrize("command", ["check", "replay"])
def test_check_and_replay_with_a_timeout_contain_an_engine_that_ends_the_process(command):
    target = str(ROOT / "examples" / "shift-tanh.json") if command == "check" \
        else "s0/derivative/000001"
    res = cli(command, target, "--json", "--timeout", "30", "--engine", f"{HERE}:OsExitEngine")
    assert res.returncode == 1, res.stdout + res.stderr
    recs = [json.loads(x) for x in res.stdout.splitlines()]
    assert [(r["check"], r["outcome"], r["detail"]) for r in recs] == \
        [("program", "error", "lost: its worker process died (exit code 7)")]


def test_check_with_a_timeout_kills_an_engine_that_swallows_it(monkeypatch):
    import replayverify.runs.executors as executors
    from replayverify import check
    from replayverify.programs import load_program
    from replayverify.verifier.check import check_isolated

    monkeypatch.setattr(executors, "HARD_GRACE", 0.5)
    program = load_program(ROOT / "examples" / "shift-tanh.json")
    recs = check_isolated(program, timeout=0.3, engines=(f"{HERE}:HangEngine",))
    assert [(r.check, r.outcome, r.detail) for r in recs] == \
        [("program", "error", "lost: it ran past the hard time limit of 0.8 s and was killed")]
    assert [r.outcome for r in check_isolated(program, timeout=30)] == \
        [r.outcome for r in check(program)]


# ---------------------------------------------------------------- cohort adapters


class ExitToy(ToyAdapter):
    def run(self, case, method):
        sys.exit(0)


class NoneToy(ToyAdapter):
    def run(self, case, method):
        return None


class HangOnOneToy(ToyAdapter):
    def run(self, case, method):
        while case.id == "raw-copy/5/float64":
            time.sleep(0.05)
        return super().run(case, method)


class MissingRaises(ToyAdapter):
    def missing(self):
        raise RuntimeError("no")


class MethodsJunk(ToyAdapter):
    def methods(self, extra=False):
        return ["replay"]


class VersionBytes(ToyAdapter):
    def version(self):
        return b"1.0"


def cohort(out: Path, adapter: str, *extra: str) -> subprocess.CompletedProcess:
    return cli("cohort", "--frameworks", adapter, "--seeds", "5:6", "--workers", "1",
               "--out", str(out), *extra)


@pytest.mark.parametrize(("adapter", "exception"), [
    ("ExitToy", {"type": "PluginFault", "message": "called sys.exit(0)"}),
    ("NoneToy", {"type": "PluginFault",
                 "message": "the adapter's run returned None, not Observation"}),
])
def test_an_adapter_whose_run_exits_or_returns_junk_gives_error_records(tmp_path, adapter,
                                                                         exception):
    res = cohort(tmp_path / "c", f"{TOYS}:{adapter}")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    recs = [json.loads(x) for x in (tmp_path / "c" / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 20 and {r["outcome"] for r in recs} == {"error"}
    assert {json.dumps(r["exception"]) for r in recs} == {json.dumps(exception)}
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert summary["verdict"] == "unexpected"
    assert summary["table"]["toy replay"]["error"] == 10
    assert "(+10 adapter errors)" in (tmp_path / "c" / "report.md").read_text()


@pytest.mark.parametrize(("adapter", "message"), [
    ("MissingRaises", "missing() failed: RuntimeError: no"),
    ("MethodsJunk", "methods() failed: PluginFault: a method returned 'replay', not Method"),
    ("VersionBytes", "version() failed: PluginFault: version() returned bytes of length 3"),
])
def test_an_adapter_that_answers_junk_stops_the_cohort_in_one_line(tmp_path, adapter,
                                                                    message):
    res = cohort(tmp_path / "c", f"{TOYS}:{adapter}")
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.count("\n") == 1 and message in res.stderr, res.stderr


class OsExitOnOneToy(ToyAdapter):
    def run(self, case, method):
        if case.id == "raw-copy/5/float64":
            os._exit(3)
        return super().run(case, method)


class MethodsOsExit(ToyAdapter):
    def __init__(self):
        self.client = os.getpid()  # made where it is loaded: in the client

    def methods(self, extra=False):
        if os.getpid() != self.client:  # a worker, or the client's guarded question
            os._exit(4)
        return super().methods(extra)


def records_of(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


def test_a_task_whose_worker_dies_is_error_records_and_the_run_goes_on(tmp_path):
    out = tmp_path / "c"
    res = cohort(out, f"{TOYS}:OsExitOnOneToy")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stdout + res.stderr
    recs = records_of(out)
    lost = [r for r in recs if r["case"] == "raw-copy/5/float64"]
    assert [(r["method"], r["outcome"], r["detail"]) for r in lost] == [
        (m, "error", "lost: its worker process died (exit code 3)") for m in ("replay", "stale")]
    normal = [r for r in recs if r["case"] != "raw-copy/5/float64"]
    assert len(normal) == 18 and "error" not in {r["outcome"] for r in normal}
    keys = {k for r in normal for k in r}  # a lost record has every field of a normal one
    assert all(set(r) == keys for r in lost) and lost[0]["expected"] == "M"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "unexpected" and summary["outcomes"]["error"] == 2
    assert summary["table"]["toy replay"]["error"] == 1
    assert "lost: its worker process died" in (out / "report.md").read_text()


def test_a_task_past_its_hard_limit_is_error_records_and_the_run_finishes(tmp_path):
    res = cohort(tmp_path / "c", f"{TOYS}:HangOnOneToy", "--timeout", "1")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stdout + res.stderr
    recs = records_of(tmp_path / "c")
    assert len(recs) == 20
    assert [(r["case"], r["detail"]) for r in recs if r["outcome"] == "error"] == [
        ("raw-copy/5/float64", "lost: it ran past the hard time limit of 1 s and was killed")
    ] * 2


def test_a_lost_task_whose_adapter_cannot_name_its_methods_is_one_record(tmp_path):
    out = tmp_path / "c"
    res = cohort(out, f"{TOYS}:MethodsOsExit")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stdout + res.stderr
    recs = records_of(out)
    assert len(recs) == 10 and {(r["method"], r["outcome"]) for r in recs} == {("?", "error")}
    assert recs[0]["detail"] == ("lost: its worker process died (exit code 4); its methods "
                                 "unknown: its worker process died (exit code 4)")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "unexpected" and summary["outcomes"] == {"error": 10}
    # --resume of a finished run with lost tasks: nothing run again, the same records
    again = cohort(out, f"{TOYS}:MethodsOsExit", "--resume")
    assert again.returncode == 1 and records_of(out) == recs, again.stdout + again.stderr


def test_a_framework_named_twice_is_refused(tmp_path):
    res = cohort(tmp_path / "c", "replayverify,replayverify")
    assert res.returncode == 2
    assert res.stderr == "replayverify: --frameworks names 'replayverify' more than once\n"


def test_workers_die_with_a_killed_client(tmp_path):
    """SIGKILL of the client: its worker, busy in a hung engine, goes too."""
    import signal

    out = tmp_path / "s"
    proc = subprocess.Popen(
        [sys.executable, "-m", "replayverify", "suite", "--programs", "2", "--workers", "1",
         "--out", str(out), "--engine", f"{HERE}:HangEngine", "--timeout", "600"],
        env=child_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: list[int] = []
    deadline = time.monotonic() + 60
    while not children and time.monotonic() < deadline:
        time.sleep(0.2)
        path = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        children = [int(x) for x in path.read_text().split()] if path.exists() else []
    assert children, "no worker started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{children[0]}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = Path(f"/proc/{children[0]}/status")
    assert not alive.exists() or "State:\tZ" in alive.read_text()
