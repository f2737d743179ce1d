"""Long cohort runs: records flushed per task, --resume, Ctrl-C, on Dask too.

No framework needed: a plug-in numpy adapter (``tests.cohort.test_cohort_core``'s toy)
made slow by an environment variable, so that a child process can be killed mid-run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from replayverify.cli import main
from replayverify.cohort import CohortConfig, CohortError, run_cohort, task_ids
from tests.cohort.test_cohort_core import ToyAdapter
from tests.helpers import ROOT, child_env, ctrl_c, killed_at_exit, wait_written, written
from tests.helpers import records_minus_seconds as records

TOY = "tests.cohort.test_cohort_resume:SlowToy"
SEEDS = (5, 9)  # 4 keys x 5 families x 2 dtypes = 40 tasks, 80 records
needs_dask = pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                                reason="needs the dask extra (dask[distributed])")


class SlowToy(ToyAdapter):
    """The toy adapter, sleeping RV_TEST_TOY_DELAY seconds per method run (default 0)."""

    def run(self, case, method):
        time.sleep(float(os.environ.get("RV_TEST_TOY_DELAY", "0")))
        return super().run(case, method)


def config(out: Path, **kw) -> CohortConfig:
    return CohortConfig(frameworks=(TOY,), seeds=SEEDS, workers=1, out=out, **kw)


def summary(out: Path) -> dict:
    """summary.json minus the time and the command line (its --out differs here)."""
    d = json.loads((out / "summary.json").read_text())
    d.pop("seconds")
    d.pop("command")
    return d


def report(out: Path) -> str:
    text = (out / "report.md").read_text()
    return re.sub(r"\d+(\.\d+)? s\b", "T s", re.sub(r"`replayverify [^`]*`", "`C`", text))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted")
    run_cohort(config(out))
    return out


def same_as(out: Path, ref: Path) -> None:
    assert records(out) == records(ref)
    assert len(records(ref)) == 80
    assert summary(out) == summary(ref)
    assert report(out) == report(ref)


def start(out: Path, *extra: str) -> subprocess.Popen:
    """The cohort command in a child process of its own group, 0.05 s per method run."""
    env = child_env(RV_TEST_TOY_DELAY="0.05")
    cmd = [sys.executable, "-m", "replayverify", "cohort", "--frameworks", TOY,
           "--seeds", f"{SEEDS[0]}:{SEEDS[1]}", "--workers", "1", "--out", str(out), *extra]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def test_a_killed_run_keeps_every_task_it_reported_and_resume_reruns_only_the_rest(
        reference, tmp_path):
    out = tmp_path / "c"
    proc = start(out)
    with killed_at_exit(proc):
        wait_written(proc, out, 3)
        proc.kill()  # SIGKILL: no handler runs, no file is closed cleanly
        proc.wait(30)
    done = written(out)
    assert 3 <= done < 40, done
    kept = records(out)
    assert len(kept) >= 2 * done and kept[:2 * done] == records(reference)[:2 * done]
    with open(out / "records.jsonl", "ab") as fh:  # as if killed in the middle of a line
        fh.write(b'{"task": "toy/raw-copy/5/flo')

    submitted = []

    class Spy:
        def map(self, fn, tasks, *, name, lost):
            submitted.extend(name(t) for t in tasks)
            return map(fn, tasks)

    seen = []
    s = run_cohort(config(out, resume=True), executor=Spy(), on_task=seen.append)
    assert submitted == task_ids(config(out))[done:]
    assert seen[0] == done and sum(seen) == 40
    assert s["records"] == 80 and s["verdict"] == "as-expected"
    same_as(out, reference)


def test_ctrl_c_gives_one_line_exit_130_and_the_command_resumes(reference, tmp_path,
                                                                monkeypatch):
    out = tmp_path / "c"
    proc = start(out)
    ctrl_c(proc, out, "task")
    assert 2 <= written(out) < 40
    argv = ["cohort", "--frameworks", TOY, "--seeds", "5:9", "--workers", "1",
            "--out", str(out)]
    monkeypatch.setattr(sys, "argv", ["replayverify", *argv, "--resume"])
    r = CliRunner().invoke(main, [*argv, "--resume"])
    assert r.exit_code == 0, r.output
    same_as(out, reference)
    # the files name the command of an uninterrupted run
    assert json.loads((out / "summary.json").read_text())["command"] == " ".join(
        ["replayverify", *argv])


def interrupted(out: Path, after: int) -> None:
    """A run stopped by Ctrl-C once ``after`` tasks were written."""
    def on_task(n):
        if written(out) >= after:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_cohort(config(out), on_task=on_task)
    assert written(out) == after


@pytest.mark.parametrize("frameworks, seeds, flags, differs", [
    (TOY, "5:8", [], "seeds [5, 9] there, [5, 8] here"),
    (TOY, "5:9", ["--extra"], "extra False there, True here"),
    (f"{TOY},replayverify", "5:9", [], f"frameworks ['{TOY}'] there, "),
])
def test_resume_with_other_options_is_refused_in_one_line(tmp_path, frameworks, seeds,
                                                          flags, differs):
    out = tmp_path / "c"
    interrupted(out, 3)
    before = (out / "records.jsonl").read_bytes()
    argv = ["cohort", "--frameworks", frameworks, "--seeds", seeds, *flags,
            "--workers", "1", "--out", str(out), "--resume"]
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        f"replayverify: --resume: {out} holds a different cohort (") and differs in lines[0]
    assert (out / "records.jsonl").read_bytes() == before  # nothing touched


def test_a_finished_directory_is_not_overwritten_without_resume(reference, tmp_path):
    with pytest.raises(CohortError, match="exists: pass --resume"):
        run_cohort(config(reference))
    r = CliRunner().invoke(main, ["cohort", "--frameworks", TOY, "--seeds", "5:9",
                                  "--workers", "1", "--out", str(reference)])
    assert r.exit_code == 2 and "exists: pass --resume" in r.output


def test_resuming_a_finished_run_reruns_nothing(reference, tmp_path):
    out = tmp_path / "c"
    run_cohort(config(out))
    submitted = []

    class Spy:
        def map(self, fn, tasks, *, name, lost):
            submitted.extend(tasks)
            return map(fn, tasks)

    run_cohort(config(out, resume=True), executor=Spy())
    assert submitted == []
    same_as(out, reference)


@needs_dask
def test_resume_on_dask_ends_with_the_records_of_a_local_run(reference, tmp_path):
    out = tmp_path / "c"
    interrupted(out, 5)
    r = CliRunner().invoke(main, ["cohort", "--frameworks", TOY, "--seeds", "5:9",
                                  "--out", str(out), "--resume", "--dask", "local:1"])
    assert r.exit_code == 0, r.output
    same_as(out, reference)
