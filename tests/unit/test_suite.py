"""The suite runner: determinism across workers, resume after SIGKILL, shards, shrinking."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replayverify.programs import load_program
from replayverify.verifier.suite import (
    ProgramId,
    SuiteConfig,
    SuiteError,
    parse_shard,
    read_records,
    run_suite,
    suite_ids,
)


def strip_times(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        d = json.loads(line)
        d.pop("seconds")
        out.append(d)
    return out


def test_program_ids_round_trip_and_rebuild_the_same_program():
    for pid in suite_ids(8, 5):
        again = ProgramId.parse(str(pid))
        assert again == pid
        assert again.build()[0] == pid.build()[0]
    assert str(ProgramId(0, "derivative", 17)) == "s0/derivative/000017"


@pytest.mark.parametrize("bad", ["x0/derivative/1", "s0/nofamily/1", "s0/derivative", "s-1/bytes/2",
                                 "s0/bytes/x"])
def test_bad_ids_are_refused(bad):
    with pytest.raises(SuiteError):
        ProgramId.parse(bad)


def test_shards_partition_the_suite():
    full = {str(p) for p in suite_ids(10, 1)}
    parts = [{str(p) for p in suite_ids(10, 1, shard=(i, 3))} for i in range(3)]
    assert set().union(*parts) == full and sum(map(len, parts)) == len(full)
    with pytest.raises(SuiteError):
        parse_shard("3/3")


def test_records_do_not_depend_on_worker_count(tmp_path):
    a = run_suite(SuiteConfig(programs=8, seed=2, workers=1, out=tmp_path / "a"))
    b = run_suite(SuiteConfig(programs=8, seed=2, workers=2, out=tmp_path / "b"))
    assert strip_times(tmp_path / "a" / "records.jsonl") == strip_times(
        tmp_path / "b" / "records.jsonl")
    assert a["verdict"] == b["verdict"] == "clean"
    assert {k: v for k, v in a.items() if k != "seconds"} == \
        {k: v for k, v in b.items() if k != "seconds"}
    # every program has its records, none dropped
    programs = {r.program for r in read_records(tmp_path / "a" / "records.jsonl")}
    assert programs == {str(p) for p in suite_ids(8, 2)}


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_local_workers_yield_in_task_order_and_a_crash_loses_only_its_task(batch):
    """A worker that dies takes no other task with it: the tasks of its batches run again,
    each alone, and only the one that kills its lone worker too becomes ``lost``."""
    from replayverify.runs.executors import ProcessPool
    from tests.helpers import crash_or_raise

    tasks = [t for t in range(40) if t != 7]
    got = list(ProcessPool(2, batch=batch).map(crash_or_raise, tasks, name=str,
                                               lost=lambda t, why: f"lost {t}: {why}"))
    assert got == ["lost 13: its worker process died (exit code 3)" if t == 13 else t
                   for t in tasks]


def test_a_task_that_raises_in_a_local_worker_raises_in_task_order():
    from replayverify.runs.executors import ProcessPool
    from tests.helpers import crash_or_raise

    seen = []
    with pytest.raises(ValueError, match="seven"):
        for r in ProcessPool(2, batch=2).map(crash_or_raise, list(range(20)), name=str,
                                             lost=lambda t, why: None):
            seen.append(r)
    assert seen == list(range(7))


def test_ctrl_c_with_local_workers_gives_one_line_exit_130_and_resumes(tmp_path):
    """Ctrl-C reaches the whole group: the workers ignore it, the parent stops them."""
    from replayverify.engines import registry
    from tests.helpers import interrupt_suite

    slow = "tests.helpers:slow_region"  # 0.1 s per program more: time to interrupt
    ref = tmp_path / "ref"
    run_suite(SuiteConfig(programs=16, seed=3, workers=1, out=ref,
                          engines=(registry.resolve(slow),)))
    out = tmp_path / "s"
    interrupt_suite(out, 16, "--engine", slow, "--workers", "2")
    run_suite(SuiteConfig(programs=16, seed=3, workers=2, out=out, resume=True,
                          engines=(registry.resolve(slow),)))
    assert strip_times(out / "records.jsonl") == strip_times(ref / "records.jsonl")


def test_refuses_to_overwrite_without_resume(tmp_path):
    run_suite(SuiteConfig(programs=1, seed=0, workers=1, out=tmp_path))
    with pytest.raises(SuiteError, match="--resume"):
        run_suite(SuiteConfig(programs=1, seed=0, workers=1, out=tmp_path))


H = '{"journal": 2, "run": {"n": 1}}'
Z = '"records_sha256": "' + "0" * 64 + '"'


@pytest.mark.parametrize("progress", [
    "[1]\n", '"x"\n', "{oops\n", H + "\n[2]\n", H + '\n{"records_bytes": 3, ' + Z + "}\n",
    H + '\n{"done": "1", "records_bytes": 3, ' + Z + "}\n",
    H + '\n{"done": 1, "records_bytes": "3", ' + Z + "}\n",
    H + '\n{"done": 1, "records_bytes": -3, ' + Z + "}\n",  # truncate() would raise OSError
    H + '\n{"done": -1, "records_bytes": 0, ' + Z + "}\n",
    H + '\n{"done": true, "records_bytes": 0, ' + Z + "}\n",
    H + '\n{"done": 1, "records_bytes": 99, ' + Z + "}\n",  # past the file's end: would pad
    H + '\n{"done": 1, "records_bytes": 0}\n',  # no digest
    H + '\n{"done": 2, "records_bytes": 0, ' + Z + "}\n",  # more done than marks
    '{"journal": 3, "run": {"n": 1}}\n', '{"journal": 2, "run": 1}\n',
])
def test_resume_refuses_a_damaged_progress_file_in_one_line(tmp_path, progress):
    from replayverify.runs.journal import open_journal

    (tmp_path / "progress.jsonl").write_text(progress)
    with pytest.raises(SuiteError, match=r"^--resume: .*progress.jsonl is damaged; choose "
                                         r"another --out$"):
        open_journal(tmp_path, {"n": 1}, {"records_bytes": "records.jsonl"}, resume=True,
                     what="suite", error=SuiteError)


def test_sigkill_then_resume_gives_the_records_of_an_uninterrupted_run(tmp_path):
    ref = tmp_path / "ref"
    run_suite(SuiteConfig(programs=24, seed=4, workers=1, out=ref))
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "replayverify", "suite", "--programs", "24", "--seed", "4",
           "--workers", "1", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = out / "records.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline:  # kill it part-way through
        if records.exists() and records.stat().st_size > 2000:
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(strip_times(records))
    assert 0 < done
    res = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert strip_times(records) == strip_times(ref / "records.jsonl")


def test_a_resumed_run_reports_what_an_uninterrupted_one_does(tmp_path):
    """The report is made from the records read back on resume and the records kept in
    memory as they were written; both give what records.jsonl holds."""
    kept = []
    whole = run_suite(SuiteConfig(programs=6, seed=1, workers=1, mutants=True,
                                  out=tmp_path / "whole"),
                      on_program=lambda o, n: kept.extend(o.records))
    assert [repr(r) for r in kept] == \
        [repr(r) for r in read_records(tmp_path / "whole" / "records.jsonl")]

    def stop_after_3(outcome, n):
        if outcome is not None and outcome.pid.endswith("000002"):
            raise KeyboardInterrupt

    cfg = SuiteConfig(programs=6, seed=1, workers=1, mutants=True, out=tmp_path / "cut")
    with pytest.raises(KeyboardInterrupt):
        run_suite(cfg, on_program=stop_after_3)
    assert len({r.program for r in read_records(cfg.out / "records.jsonl")}) == 3
    cfg.resume = True
    resumed = run_suite(cfg)
    assert {k: v for k, v in resumed.items() if k != "seconds"} == \
        {k: v for k, v in whole.items() if k != "seconds"}
    assert [line for line in (tmp_path / "cut" / "report.md").read_text().splitlines()
            if "Verdict" not in line and "Command" not in line] == \
        [line for line in (tmp_path / "whole" / "report.md").read_text().splitlines()
         if "Verdict" not in line and "Command" not in line]


def test_a_failing_engine_exits_1_and_shrinks_to_at_most_4_ops(tmp_path):
    out = tmp_path / "s"
    res = subprocess.run(
        [sys.executable, "-m", "replayverify", "suite", "--programs", "12", "--seed", "0",
         "--family", "derivative", "--workers", "1", "--out", str(out), "--max-shrink", "3",
         "--engine", "mutant:region-current-segment-only"],
        capture_output=True, text=True, check=False)
    assert res.returncode == 1, res.stdout + res.stderr
    shrunk = sorted((out / "failures").rglob("*.json"))
    assert shrunk, "no reproducers written"
    report = (out / "report.md").read_text()
    for path in shrunk:
        p = load_program(path)
        assert len(p.ops) <= 4, (path, len(p.ops))
        cmd = path.with_suffix(".txt").read_text().split()
        assert str(path) in report
        again = subprocess.run([sys.executable, "-m", "replayverify", *cmd[1:], "--json"],
                               capture_output=True, text=True, check=False)
        assert again.returncode == 1, again.stdout + again.stderr


def test_junit_and_report_are_written(tmp_path):
    junit = tmp_path / "junit.xml"
    s = run_suite(SuiteConfig(programs=4, seed=0, workers=1, out=tmp_path / "o", junit=junit))
    assert "<testsuite" in junit.read_text()
    report = (tmp_path / "o" / "report.md").read_text()
    assert "## Checks by engine" in report and "## What was generated" in report
    gen = s["generated"]
    assert sum(gen["families"].values()) == 4 and gen["ops"]


@pytest.mark.parametrize("workers", [1, 2])  # 2: worker processes keep their alarm handler
def test_a_program_that_raises_or_times_out_becomes_an_error_record(tmp_path, monkeypatch,
                                                                    workers):
    import replayverify.verifier.check as check_mod

    real = check_mod.check_execution

    def flaky(ex, **kw):
        if ex.program.name.endswith("000001"):
            raise RuntimeError("boom")
        if ex.program.name.endswith("000002"):
            time.sleep(5)
        return real(ex, **kw)

    monkeypatch.setattr(check_mod, "check_execution", flaky)
    s = run_suite(SuiteConfig(programs=4, seed=0, workers=workers, out=tmp_path, timeout=0.5,
                              shrink=False))
    recs = read_records(tmp_path / "records.jsonl")
    errors = {r.program: r.detail for r in recs if r.outcome == "error"}
    assert errors == {"s0/bytes/000001": "RuntimeError: boom",
                      "s0/alias/000002": "timed out after 0.5 s"}
    assert s["verdict"] == "failing"
    assert {r.program for r in recs} == {str(p) for p in suite_ids(4, 0)}  # the run went on


def test_replay_rebuilds_and_checks_any_id(tmp_path):
    from click.testing import CliRunner

    from replayverify.cli import main

    runner = CliRunner()
    for pid in ("s0/complex/000003", "s7/alias/000123", "s2/default/000005"):
        res = runner.invoke(main, ["replay", pid, "--json", "--save", str(tmp_path / "p.json")])
        assert res.exit_code == 0, res.output
        lines = [json.loads(x) for x in res.output.splitlines()]
        assert {r["program"] for r in lines} == {pid}
        assert load_program(tmp_path / "p.json") == ProgramId.parse(pid).build()[0]
    bad = runner.invoke(main, ["replay", "s0/nope/1"])
    assert bad.exit_code == 2 and "unknown family" in bad.output


def test_a_suite_program_is_executed_once_per_generation_attempt(monkeypatch):
    """The suite checks the execution with which the generator accepted the program: the
    interpreter runs once per attempt, never again for the checks or the statistics."""
    import importlib

    from replayverify.verifier.suite import Job, run_job

    gen, check, engine_checks = (importlib.import_module(f"replayverify.{m}") for m in (
        "programs.generate", "verifier.check", "verifier.engine_checks"))

    calls = []
    for module in (gen, check, engine_checks):
        real = module.execute
        monkeypatch.setattr(module, "execute",
                            lambda p, _real=real, **kw: calls.append(p.name) or _real(p, **kw))
    pid = ProgramId(0, "derivative", 3)
    out = run_job(Job(pid, None, False, 60.0))
    assert not any(r.failing for r in out.records)
    assert len(calls) == out.stats["attempts"]


def test_overlapping_writes_count_ops_with_a_source_sharing_a_byte_with_dst():
    """program_stats asks np.shares_memory; the definition: an op whose destination and
    one of its other sources (same buffer) have a byte index in common."""
    import numpy as np

    from replayverify.programs.model import OP_SPECS, view_bytes
    from replayverify.verifier.suite import program_stats

    for family in ("derivative", "bytes", "alias", "mixed", "hazard"):
        for index in range(6):
            g = ProgramId(1, family, index).generate()
            p = g.program
            views = {v.name: v for v in p.views}
            expected = 0
            for op in p.ops:
                dst = views[op.dst]
                srcs = [views[getattr(op, f)] for f in OP_SPECS[op.kind].sources]
                expected += any(s.buffer == dst.buffer and s.name != dst.name and
                                np.intersect1d(view_bytes(s), view_bytes(dst)).size
                                for s in srcs)
            assert program_stats(g.execution, g.attempts)["overlapping_writes"] == expected


def test_the_heap_is_frozen_out_of_collections_while_a_suite_runs_and_given_back(tmp_path):
    import gc

    before = gc.get_freeze_count()
    during = []
    run_suite(SuiteConfig(programs=2, seed=0, workers=1, out=tmp_path / "a", shrink=False),
              on_program=lambda _o, _n: during.append(gc.get_freeze_count()))
    assert during and all(n > 0 for n in during)
    assert gc.get_freeze_count() == before
    if before == 0:  # and what the run keeps is frozen as it comes (given back after)
        kept = []
        run_suite(SuiteConfig(programs=3, seed=0, workers=1, out=tmp_path / "c", shrink=False),
                  on_program=lambda o, _n: kept.append((o, gc.get_freeze_count())))
        assert all(gc.is_tracked(o) and n > 0 for o, n in kept)
        counts = [n for _, n in kept]
        assert counts == sorted(set(counts))  # growing: what was kept is frozen
        assert gc.get_freeze_count() == 0
    if before == 0:  # a caller's own frozen objects are left frozen
        gc.freeze()
        try:
            run_suite(SuiteConfig(programs=2, seed=0, workers=1, out=tmp_path / "b",
                                  shrink=False))
            assert gc.get_freeze_count() > 0  # (the run's gc.unfreeze() would make it 0)
        finally:
            gc.unfreeze()
