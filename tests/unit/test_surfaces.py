"""One line on every surface (issue #28): output paths checked before any work, --timeout
finite, non-regular inputs refused without blocking, --max-bytes read as what the file
holds, the Python API naming the argument it refuses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import replayverify as rv
from replayverify.cli import main
from tests.helpers import ROOT, child_env

EXAMPLE = str(ROOT / "examples" / "shift-tanh.json")


def one_line_exit_2(args: list[str], *needles: str) -> str:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    text = res.output
    assert text.count("\n") == 1 and text.startswith("replayverify: "), text
    assert "Traceback" not in text
    for needle in needles:
        assert needle in text, text
    return text


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "file"
    path.write_text("x")
    return path


def outs(tmp_path: Path, a_file: Path) -> dict[str, tuple[str, str]]:
    return {"dev-null": ("/dev/null", "not a directory"),
            "under-a-file": (str(a_file / "sub"), "ot a directory"),
            "too-long": (str(tmp_path / ("x" * 300)), "too long"),
            "proc": ("/proc/rv-i28/out", "/proc/rv-i28/out")}


@pytest.mark.parametrize("where", ["dev-null", "under-a-file", "too-long", "proc"])
@pytest.mark.parametrize("command", [
    ["suite", "--programs", "1", "--workers", "1"],
    ["generate", "--programs", "1"],
    ["cohort", "--frameworks", "replayverify", "--seeds", "1:2", "--workers", "1"],
])
def test_an_unusable_out_is_one_line_before_any_work(tmp_path, a_file, where, command):
    path, needle = outs(tmp_path, a_file)[where]
    one_line_exit_2([*command, "--out", path], "--out ", needle)


def test_junit_is_checked_before_the_run(tmp_path):
    out = tmp_path / "s"
    one_line_exit_2(["suite", "--programs", "1", "--workers", "1", "--out", str(out),
                     "--junit", "missing/dir/j.xml"], "--junit missing/dir/j.xml: no directory")
    assert not out.exists()


def test_profile_out_and_replay_save_into_a_missing_directory_are_one_line(tmp_path):
    missing = str(tmp_path / "no" / "card.json")
    one_line_exit_2(["profile", EXAMPLE, "--out", missing], "--out ", "no directory")
    one_line_exit_2(["replay", "s0/bytes/000001", "--save", missing], "--save ",
                    "no directory")


def test_profile_out_on_a_full_disk_is_one_line():
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    one_line_exit_2(["profile", EXAMPLE, "--out", "/dev/full"], "--out /dev/full: ")


@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "-1"])
@pytest.mark.parametrize("command", [["suite", "--programs", "1"],
                                     ["cohort", "--frameworks", "replayverify"]])
def test_timeout_must_be_a_finite_number_of_seconds(tmp_path, command, value):
    res = CliRunner().invoke(main, [*command, "--timeout", value, "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--timeout" in res.output, res.output
    assert not (tmp_path / "o").exists()


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    res = subprocess.run([sys.executable, "-m", "replayverify", "run", str(fifo)],
                         capture_output=True, text=True, env=child_env(), timeout=60,
                         check=False)
    assert res.returncode == 2
    assert res.stderr.endswith("not a regular file\n") and res.stderr.count("\n") == 1


def test_a_huge_max_bytes_reads_only_what_the_file_holds(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    res = subprocess.run([sys.executable, "-m", "replayverify", "run", str(empty),
                          "--max-bytes", "4611686018427387904"], capture_output=True,
                         text=True, env=child_env(), timeout=60, check=False)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1
    res = subprocess.run([sys.executable, "-m", "replayverify", "run", EXAMPLE,
                          "--max-bytes", "4611686018427387904"], capture_output=True,
                         text=True, env=child_env(), timeout=60, check=False)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"engines": "eager"}, r"^engines: a list of .*not 'eager' \(one name: \['eager'\]\)$"),
    ({"engines": [3]}, r"^engines\[0\]: 3 is not one of the engine names"),
    ({"engines": 3}, r"^engines: a list of "),
    ({"checks": "bytes"}, r"^checks: a list of check names, not 'bytes'"),
    ({"mutants": "yes"}, r"^mutants: True or False"),
])
def test_the_python_api_names_the_argument_it_refuses(kwargs, message):
    with pytest.raises(TypeError, match=message):
        rv.check(EXAMPLE, **kwargs)


def test_ids_of_any_suite_or_cohort_are_made_on_demand():
    from replayverify.cohort.runner import CohortConfig, task_ids
    from replayverify.verifier.suite import ProgramId, suite_ids

    ids = suite_ids(10**12, 3, shard=(1, 4))  # a list would need ~60 TB
    assert len(ids) == 25 * 10**10
    assert ids[-1] == ProgramId(3, "alias", 10**12 - 3) and str(ids[0]) == "s3/bytes/000001"
    assert [str(p) for p in ids[2:4]] == ["s3/mixed/000009", "s3/complex/000013"]
    tasks = task_ids(CohortConfig(frameworks=("replayverify",), seeds=(0, 10**11)))
    assert len(tasks) == 10**12 and tasks[-1].startswith("replayverify/") \
        and tasks[-1].endswith(f"/{10**11 - 1}/float64")
    assert tasks[:2] == ["replayverify/local-strided/0/float32",
                         "replayverify/local-strided/0/float64"]


@pytest.mark.parametrize(("args", "needle"), [
    (["generate", "--programs", str(10**20), "--out", "x"], "at most 10^15 programs"),
    (["suite", "--programs", str(10**16), "--out", "x"], "at most 10^15 programs"),
    (["cohort", "--seeds", f"0:{10**18}", "--out", "x"], "at most 10^12 keys"),
])
def test_absurd_lengths_are_refused_in_one_line(tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    one_line_exit_2(args, needle)
    assert not (tmp_path / "x").exists()


def test_junit_at_the_out_directory_is_refused_before_the_run(tmp_path):
    out = tmp_path / "o"
    one_line_exit_2(["suite", "--programs", "1", "--workers", "1", "--out", str(out),
                     "--junit", str(out)], "is --out's directory")
    assert not out.exists()
