"""``replayverify check FILE... [--json]``: records, table, exit status (SPEC §6)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from replayverify.cli import main
from replayverify.verifier import check as check_module
from replayverify.verifier.records import Record

PROGRAMS = Path(__file__).parents[1] / "programs" / "checkers"
SHIFT = str(PROGRAMS / "shift-both-ways.json")
F32 = str(PROGRAMS / "float32.json")


def invoke(*args):
    return CliRunner().invoke(main, ["check", *args])


def test_json_lines_one_record_per_check_and_engine():
    res = invoke(SHIFT, F32, "--json", "--engine", "eager", "--engine", "region")
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.output.splitlines()]
    assert len(rows) == 2 * (5 + 2 * 2)
    assert {r["program"] for r in rows} == {SHIFT, F32}
    assert {(r["check"], r["engine"]) for r in rows if r["program"] == F32} >= {
        ("complex-step", ""), ("gradient", "eager"), ("bytes", "region")}
    assert all(set(r) >= {"program", "sha256", "check", "engine", "outcome", "max_abs_err",
                          "detail", "seconds"} for r in rows)


def test_table_has_aligned_columns_and_a_summary():
    res = invoke(SHIFT, "--engine", "eager")
    assert res.exit_code == 0
    lines = res.output.splitlines()
    assert lines[0].split() == ["program", "check", "engine", "outcome", "max_abs_err", "detail"]
    col = lines[0].index("outcome")
    assert all(line[col:].split()[0] in ("outcome", "match", "detected", "unsupported")
               for line in lines[:-1])
    assert lines[-1].startswith("1 file(s), 7 record(s)") and "verdict: clean" in lines[-1]


def test_rejected_file_gives_a_rejected_record_and_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "replayverify.program", "version": 1}')
    res = invoke(SHIFT, str(bad), str(tmp_path / "missing.json"), "--json", "--engine", "eager")
    assert res.exit_code == 2
    rows = [json.loads(line) for line in res.output.splitlines()]
    rejected = [r for r in rows if r["outcome"] == "rejected"]
    assert [r["program"] for r in rejected] == [str(bad), str(tmp_path / "missing.json")]
    assert "buffers" in rejected[0]["detail"] and rejected[0]["max_abs_err"] is None
    assert "Traceback" not in res.output


def test_too_large_program_is_rejected():
    res = invoke(SHIFT, "--max-bytes", "16")
    assert res.exit_code == 2
    assert "rejected" in res.output and "exceeds the limit" in res.output


def test_a_failing_record_exits_1(monkeypatch):
    def diverging(program, **kwargs):
        return [Record(kwargs["program_id"], "", "bytes", "", "diverge", 3.0, "made up")]

    monkeypatch.setattr(check_module, "check_program", diverging)
    res = invoke(SHIFT)
    assert res.exit_code == 1
    assert "diverge" in res.output and "1 failing" in res.output


def test_unknown_engine_is_bad_usage():
    res = invoke(SHIFT, "--engine", "no-such-engine")
    assert res.exit_code == 2
    assert "unknown engine" in res.output and "Traceback" not in res.output
