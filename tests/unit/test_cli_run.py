"""`replayverify run` and `show`: the SPEC §6 object, exit statuses, no tracebacks."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from replayverify.cli import main
from replayverify.programs import execute, load_program

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "shift-tanh.json"


def test_run_json_object_matches_the_interpreter():
    res = CliRunner().invoke(main, ["run", "--json", str(EXAMPLE)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    p = load_program(EXAMPLE)
    ex = execute(p)
    assert set(doc) == {"program", "sha256", "buffers", "rng", "loss", "gradient", "admission"}
    assert doc["program"] == "shift-tanh" and doc["sha256"] == p.sha256
    assert doc["buffers"] == {"state": hashlib.sha256(ex.buffers["state"]).hexdigest()}
    assert doc["rng"] == {"key": [7, 0], "counter": [8, 0, 0, 0]}
    assert doc["loss"] == ex.loss and doc["gradient"] == ex.gradient.tolist()
    assert doc["admission"] == {"supported": True, "reason": ""}


def test_run_reports_null_gradient_with_reason(tmp_path):
    doc = json.loads(EXAMPLE.read_text())
    doc["ops"].append({"op": "iadd", "dst": "bits", "x": "bits", "k": 3})
    doc["ops"].append({"op": "copy", "dst": "x", "x": "x"})
    doc["views"][3]["offset"] = 0
    doc["segments"] = [1, 4]
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc))
    res = CliRunner().invoke(main, ["run", "--json", str(f)])
    out = json.loads(res.output)
    assert res.exit_code == 0
    assert out["gradient"] is None
    assert "integer op 3" in out["admission"]["reason"]


def test_rejected_file_is_one_line_and_exit_2(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text('{"format": "replayverify.program", "version": 1}')
    proc = subprocess.run([sys.executable, "-m", "replayverify", "run", str(f)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "program.buffers: required key is missing" in proc.stderr


def test_missing_and_non_json_files_exit_2(tmp_path):
    runner = CliRunner()
    assert runner.invoke(main, ["run", str(tmp_path / "none.json")]).exit_code == 2
    f = tmp_path / "x.json"
    f.write_text("not json")
    res = runner.invoke(main, ["show", str(f)])
    assert res.exit_code == 2 and "not valid JSON" in res.output


def test_show_lists_segments_and_ops():
    res = CliRunner().invoke(main, ["show", str(EXAMPLE)])
    assert res.exit_code == 0
    assert "segment 1:" in res.output and "x = tanh(x) a=1.5" in res.output
