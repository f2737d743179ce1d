"""A run directory is a small database with one writer (issue #28): one run per DIR, and
``--resume`` proves the files are its own before it changes anything."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from replayverify.runs.journal import open_journal
from replayverify.verifier.suite import SuiteConfig, SuiteError, run_suite
from tests.helpers import ROOT, child_env, killed_at_exit, wait_written

FILES = {"records_bytes": "records.jsonl"}


def snapshot(out: Path) -> dict[str, bytes]:
    """Every file of ``out`` but the lock (which names the last run's pid)."""
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())
            if p.is_file() and p.name != "run.lock"}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("finished")
    run_suite(SuiteConfig(programs=4, seed=0, workers=1, out=out))
    return out


def suite_cli(out: Path, *extra: str, seed: int = 0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "replayverify", "suite", "--programs", "4", "--seed", str(seed),
         "--workers", "1", "--out", str(out), *extra],
        capture_output=True, text=True, env=child_env(), cwd=ROOT, check=False)


def lines_swapped(b: bytes) -> bytes:
    lines = b.splitlines(keepends=True)
    lines[0], lines[1] = lines[1], lines[0]
    return b"".join(lines)


DAMAGE = {
    "a record duplicated": lambda b: b.splitlines(keepends=True)[0] + b,
    "a garbage line": lambda b: b"{not json\n" + b,
    "same-length edit": lambda b: b.replace(b'"match"', b'"error"', 1),
    "two records swapped": lines_swapped,
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_resume_refuses_records_that_differ_from_their_marks_and_changes_nothing(
        tmp_path, finished, damage):
    out = tmp_path / "d"
    shutil.copytree(finished, out)
    records = out / "records.jsonl"
    records.write_bytes(DAMAGE[damage](records.read_bytes()))
    before = snapshot(out)
    res = suite_cli(out, "--resume")
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.count("\n") == 1 and "is not what this run wrote" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert snapshot(out) == before


def test_another_seeds_records_under_this_runs_progress_are_refused(tmp_path, finished):
    other = tmp_path / "seed1"
    run_suite(SuiteConfig(programs=4, seed=1, workers=1, out=other))
    out = tmp_path / "d"
    shutil.copytree(finished, out)
    shutil.copy(other / "records.jsonl", out / "records.jsonl")
    before = snapshot(out)
    res = suite_cli(out, "--resume")
    assert res.returncode == 2 and "is not what this run wrote" in res.stderr, res.stderr
    assert snapshot(out) == before


@pytest.mark.parametrize("resume", [False, True])
def test_records_without_progress_are_refused_with_or_without_resume(tmp_path, finished,
                                                                      resume):
    out = tmp_path / "d"
    out.mkdir()
    shutil.copy(finished / "records.jsonl", out / "records.jsonl")
    before = snapshot(out)
    res = suite_cli(out, *(["--resume"] if resume else []), seed=1)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert snapshot(out) == before


def test_a_progress_file_of_an_older_replayverify_is_refused_in_one_line(tmp_path):
    (tmp_path / "progress.jsonl").write_text('{"n": 1}\n{"done": 1, "records_bytes": 0}\n')
    with pytest.raises(SuiteError, match=r"^--resume: .* written by an older replayverify"):
        open_journal(tmp_path, {"n": 1}, FILES, resume=True, what="suite", error=SuiteError)


@pytest.mark.parametrize("bad", ["utf8", "dir"])
def test_an_unreadable_progress_file_is_one_line(tmp_path, bad):
    path = tmp_path / "progress.jsonl"
    if bad == "dir":
        path.mkdir()
    else:
        path.write_bytes(b'{"journal": 2, "run": {"n": 1}}\n\xff\xfe\n')
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(SuiteError, match=r"progress.jsonl (is damaged|is not a regular)"):
        open_journal(tmp_path, {"n": 1}, FILES, resume=True, what="suite", error=SuiteError)
    assert sorted(p.name for p in tmp_path.iterdir()) == [*before, "run.lock"]


def test_a_summary_that_cannot_be_written_is_refused_before_any_work(tmp_path):
    (tmp_path / "summary.json").mkdir()
    with pytest.raises(SuiteError, match=r"summary.json is not a regular file"):
        run_suite(SuiteConfig(programs=2, seed=0, workers=1, out=tmp_path))
    assert not (tmp_path / "records.jsonl").exists()


@pytest.mark.parametrize("make", ["loop", "dangling", "file"])
def test_an_unusable_out_is_one_line(tmp_path, make):
    out = tmp_path / "out"
    if make == "loop":
        out.symlink_to(out)
    elif make == "dangling":
        out.symlink_to(tmp_path / "nowhere" / "x")
    else:
        out.write_text("x")
    with pytest.raises(SuiteError, match=r"^--out .*out(/sub)?: "):
        open_journal(out / "sub" if make == "file" else out, {"n": 1}, FILES, resume=False,
                     what="suite", error=SuiteError)


def test_one_process_cannot_open_one_dir_twice(tmp_path):
    with open_journal(tmp_path, {"n": 1}, FILES, resume=False, what="suite", error=SuiteError):
        with pytest.raises(SuiteError, match=r"in use by another run \(pid \d+\)"):
            open_journal(tmp_path, {"n": 1}, FILES, resume=True, what="suite",
                         error=SuiteError)
    with open_journal(tmp_path, {"n": 1}, FILES, resume=True, what="suite", error=SuiteError):
        pass  # released


def test_a_second_run_on_a_busy_dir_gets_one_line_naming_the_holder(tmp_path):
    """Two ``--resume`` of one DIR started together wrote the continuation twice."""
    out = tmp_path / "s"
    slow = "tests.helpers:slow_region"
    cmd = [sys.executable, "-m", "replayverify", "suite", "--programs", "400", "--seed", "3",
           "--workers", "1", "--out", str(out), "--engine", slow]
    first = subprocess.Popen(cmd, env=child_env(), cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    with killed_at_exit(first):
        wait_written(first, out, 1)  # (it then runs ~40 s more: killed at the end)
        before = (out / "progress.jsonl").read_text().count("\n")
        res = subprocess.run(cmd + ["--resume"], env=child_env(), cwd=ROOT,
                             capture_output=True, text=True, check=False)
        assert res.returncode == 2, res.stdout + res.stderr
        assert res.stderr == (f"replayverify: {out} is in use by another run (pid {first.pid}): "
                              "wait for it to end, or choose another --out\n")
        assert first.poll() is None
    lines = (out / "progress.jsonl").read_text().splitlines()
    assert len(lines) >= before
    assert [json.loads(x)["done"] for x in lines[1:]] == list(range(1, len(lines)))
