"""Bad input (docs/semantics.md, "Bad input"): one door for untrusted JSON, one-line
refusals, no traceback, no warning, no unbounded allocation, strict JSON output.

One test per class of issue #13; the fuzz test (tests/property/test_fuzz_inputs.py)
covers the space around them.
"""

from __future__ import annotations

import copy
import json
import math
import tracemalloc
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from replayverify.cli import main
from replayverify.planner.card import CardError, load_card, loads_card, parse_budget, parse_card
from replayverify.programs import load_program
from replayverify.programs.model import ProgramError
from replayverify.untrusted import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    MAX_INT_DIGITS,
    MAX_MESSAGE,
    decode_float,
    dumps,
    load_json,
    shown,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shift-tanh.json"
CARD = ROOT / "examples" / "large-sparse-card.json"
LINE = 300  # the longest refusal line the CLI may print


def _doc() -> dict:
    return json.loads(EXAMPLE.read_text())


def _card() -> dict:
    return {"format": "replayverify.profile", "version": 1, "persistent_bytes": 0,
            "segments": [{"name": "a", "options": {"eager": {"retained": 1, "temporary": 0,
                                                              "time": 1.0}}}]}


def _refused(source, **kw) -> ProgramError:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ProgramError) as err:
            load_program(source, **kw)
    msg = str(err.value)
    assert "\n" not in msg and len(msg) <= MAX_MESSAGE, msg
    return err.value


def _cli(args: list[str]) -> tuple[int, str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = CliRunner().invoke(main, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exc_info
    return res.exit_code, res.stdout, res.stderr


def _one_line_refusal(args: list[str]) -> str:
    code, _, err = _cli(args)
    assert code == 2, err
    assert err.count("\n") == 1 and len(err) < LINE and "Traceback" not in err, err
    return err


# ---------------------------------------------------------------- the door


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 100_000])
def test_deep_nesting_is_refused_in_programs_and_cards(tmp_path, depth: int) -> None:
    text = '{"format": "replayverify.program", "name": ' + _nested(depth) + "}"
    assert "nested deeper" in _refused(text).reason
    with pytest.raises(CardError, match="nested deeper"):
        loads_card(text)
    path = tmp_path / "deep.json"
    path.write_text(text)
    assert "nested deeper" in _one_line_refusal(["run", str(path)])
    assert "nested deeper" in _one_line_refusal(["plan", str(path), "--budget", "1GiB"])


def test_deep_nesting_inside_a_dict_is_echoed_briefly() -> None:
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    doc = _doc()
    doc["unknown"] = deep
    assert _refused(doc).field == "program.unknown"
    doc = _doc()
    doc["name"] = deep
    assert "list of length 1" in _refused(doc).reason


def test_integer_digit_limit_in_files_and_dicts() -> None:
    big = "9" * 5000
    text = EXAMPLE.read_text().replace('"nbytes": 128', f'"nbytes": {big}')
    assert f"limit of {MAX_INT_DIGITS}" in _refused(text).reason
    with pytest.raises(CardError, match="digits"):
        loads_card(json.dumps(_card()).replace('"retained": 1', f'"retained": {big}'))
    doc = _doc()
    doc["buffers"][0]["nbytes"] = 10**5000  # a dict has no parser: the echo must be safe
    assert "digits" in _refused(doc).reason
    doc = _doc()
    doc["ops"][2]["a"] = -(10**5000)
    assert "beyond float64" in _refused(doc).reason


def test_integers_beyond_float64_where_a_float_is_due() -> None:
    text = EXAMPLE.read_text().replace('"a": 1.5', '"a": 1' + "0" * 310)
    assert "digits" in _refused(text).reason  # in a file the digit limit comes first
    doc = _doc()
    doc["ops"][2]["a"] = 10**310
    assert "beyond float64" in _refused(doc).reason
    card = _card()
    card["segments"][0]["options"]["eager"]["time"] = 10**310
    with pytest.raises(CardError, match="beyond float64"):
        parse_card(card)
    with pytest.raises(CardError, match="digits"):
        loads_card(json.dumps(card))


@pytest.mark.parametrize("where", ["name", "key", "view"])
def test_lone_surrogates_are_refused_not_echoed(tmp_path, where: str) -> None:
    text = EXAMPLE.read_text()
    text = {"name": text.replace('"shift-tanh"', '"a\\ud800b"'),
            "key": text.replace('"name": "shift-tanh"', '"\\udfff": 1'),
            "view": text.replace('"dst": "head"', '"dst": "\\ud800"')}[where]
    assert "surrogate" in _refused(text).reason
    path = tmp_path / "s.json"
    path.write_text(text)
    _one_line_refusal(["run", str(path)])
    card = json.dumps(_card()).replace('"a"', '"\\ud800"')
    with pytest.raises(CardError, match="surrogate"):
        loads_card(card)
    doc = _doc()
    doc["name"] = "x\ud800"  # from a dict
    assert "surrogate" in _refused(doc).reason


def test_odd_keys_and_odd_sources() -> None:
    doc = _doc()
    doc[3] = 1
    doc["zz\nzz"] = 2
    err = _refused(doc)
    assert err.field in ("program.3", "program.'zz\\nzz'", "program.zz\\nzz")
    for source in (123, 1.5, None, ["a"], object()):
        assert _refused(source).field == "program"
    load_program(EXAMPLE.read_bytes())
    assert "not UTF-8" in _refused(b"\xff{}").reason
    assert "usable path" in _refused("bad\x00path.json").reason
    assert "cannot read" in _refused(Path("/nonexistent/file.json")).reason


def test_size_limit_before_parsing(tmp_path) -> None:
    path = tmp_path / "big.json"
    with open(path, "wb") as fh:
        fh.truncate(MAX_DOCUMENT_BYTES + 1)  # sparse: costs no disk
    tracemalloc.start()
    err = _refused(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "exceeds the limit" in err.reason and peak < 2**20
    with pytest.raises(CardError, match="exceeds the limit"):
        load_card(path)
    assert "exceeds the limit" in _refused("{" + " " * MAX_DOCUMENT_BYTES + "}").reason


def test_duplicate_keys_are_refused_and_a_bom_is_ignored(tmp_path) -> None:
    text = EXAMPLE.read_text()
    dup = text.replace('"name": "shift-tanh",', '"name": "a", "name": "b",')
    assert "duplicate key 'name'" in _refused(dup).reason
    with pytest.raises(CardError, match="duplicate key"):
        loads_card(json.dumps(_card()).replace('"version": 1', '"version": 1, "version": 1'))
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + EXAMPLE.read_bytes())
    assert load_program(bom) == load_program(EXAMPLE)
    assert load_program("\ufeff" + text) == load_program(EXAMPLE)
    card = tmp_path / "card.json"
    card.write_bytes(b"\xef\xbb\xbf" + json.dumps(_card()).encode())
    assert load_card(card) == parse_card(_card())


def test_null_segments_is_refused_like_every_optional_key() -> None:
    for key in ("segments", "init", "inputs", "rng", "name"):
        doc = _doc()
        doc[key] = None
        assert _refused(doc).field == key, key
    doc = _doc()
    del doc["segments"]
    assert load_program(doc).segments == (3,)


# ---------------------------------------------------------------- one-line refusals


def test_refusals_are_one_short_line(tmp_path) -> None:
    doc = _doc()
    doc["views"][0]["dtype"] = "x" * 1_000_000
    assert len(str(_refused(doc))) <= MAX_MESSAGE
    doc = _doc()
    doc["bad\nkey\r\x00"] = 1
    err = _refused(doc)
    assert "\\n" in err.field
    path = tmp_path / ("p\nq" * 60 + ".json")
    path.write_text(json.dumps(doc))
    _one_line_refusal(["run", str(path)])
    _one_line_refusal(["show", str(path)])
    code, out, _ = _cli(["check", "--json", str(path)])
    assert code == 2 and len(out.splitlines()) == 1
    cpath = tmp_path / "c.json"
    card = _card()
    card["segments"][0]["name"] = "\n" * 100_000
    card["segments"].append(card["segments"][0])
    cpath.write_text(json.dumps(card))
    _one_line_refusal(["plan", str(cpath), "--budget", "1GiB"])


def test_shown_never_raises() -> None:
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    for value in (10**10000, -(10**10000), deep, "\ud800" * 10, b"\x00", object(), 1e308):
        text = shown(value)
        assert "\n" not in text and len(text) <= 60, text
        text.encode("utf-8")


# ---------------------------------------------------------------- views: arithmetic first


def test_self_overlapping_view_refused_without_enumerating() -> None:
    doc = _doc()
    doc["views"].append({"name": "huge", "buffer": "state", "dtype": "float64", "offset": 0,
                         "shape": [32768, 32768], "strides": [8, 8]})
    doc["buffers"][0]["nbytes"] = 2**20
    tracemalloc.start()
    err = _refused(doc)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "overlap each other" in err.reason and peak < 2**20


def test_float32_range_check_raises_no_warning() -> None:
    doc = _doc()
    for v in doc["views"]:
        if v["dtype"] == "float64":
            v["dtype"] = "float32"
            v["strides"] = [4]
    doc["ops"][2]["a"] = 1e300
    assert "does not fit float32" in _refused(doc).reason  # warnings are errors there


# ---------------------------------------------------------------- strict JSON output


def _overflowing_program(tmp_path) -> Path:
    doc = _doc()
    doc["ops"] = [{"op": "axpby", "dst": "x", "x": "x", "y": "x", "a": 1e308, "b": 1e308},
                  {"op": "mul", "dst": "xs", "x": "xs", "y": "head"}]
    doc["segments"] = [2]
    doc["inputs"] = ["x"]
    path = tmp_path / "overflow.json"
    path.write_text(json.dumps(doc))
    return path


def test_run_json_is_strict_with_non_finite_values(tmp_path) -> None:
    code, out, err = _cli(["run", "--json", str(_overflowing_program(tmp_path))])
    assert code == 0 and err == ""
    doc = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in output"))
    assert doc["loss"] in ("NaN", "Infinity", "-Infinity")
    assert any(g in ("NaN", "Infinity", "-Infinity") for g in doc["gradient"])


def test_check_json_is_strict(tmp_path) -> None:
    code, out, _ = _cli(["check", "--json", str(_overflowing_program(tmp_path))])
    assert code in (0, 1)
    for line in out.splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in output"))


def test_the_encoding_of_non_finite_numbers() -> None:
    import numpy as np

    doc = {"a": math.nan, "b": [math.inf, -math.inf, np.float32("nan")], "c": 1.5}
    text = dumps(doc)
    assert text == '{"a": "NaN", "b": ["Infinity", "-Infinity", "NaN"], "c": 1.5}'
    back = json.loads(text)
    assert math.isnan(decode_float(back["a"])) and decode_float(back["b"][0]) == math.inf
    assert decode_float("other") == "other"


def test_dumps_writes_what_json_dumps_writes() -> None:
    # dumps keeps json's C encoder between calls: the same text as json.dumps, keys
    # sorted or not; documents json refuses (non-finite, numpy scalars) take the fallback
    import numpy as np

    docs = [{"b": 1, "a": [1.5, None, True, "\u00e9\n"], "3": {"z": (), "y": -0.0}},
            "text", 2.5, [], {"big": 10**30, "tiny": 5e-324, "s": "\ud7ff\x7f"}, {3: 1}]
    for doc in docs:
        for sort in (False, True):
            assert dumps(doc, sort_keys=sort) == json.dumps(doc, sort_keys=sort)
    assert dumps({"b": np.float64(2), "a": math.inf}, sort_keys=True) == \
        '{"a": "Infinity", "b": 2.0}'
    assert dumps([1, 2], indent=1) == json.dumps([1, 2], indent=1)


def test_dumps_without_json_s_c_encoder(monkeypatch) -> None:
    # json's C encoder is its internal API: where it is missing or takes other arguments,
    # dumps writes through json.dumps, the same text
    import replayverify.untrusted as untrusted

    def other_arguments(*args):
        raise TypeError("c_make_encoder() takes other arguments")

    monkeypatch.setattr(json.encoder, "c_make_encoder", other_arguments)
    assert untrusted._one_line(True) is None
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)  # (json without its C part)
    assert untrusted._one_line(False) is None
    monkeypatch.setattr(untrusted, "_ONE_LINE", None)
    monkeypatch.setattr(untrusted, "_ONE_LINE_SORTED", None)
    doc = {"b": 1, "a": [1.5, math.inf]}
    assert dumps(doc, sort_keys=True) == '{"a": [1.5, "Infinity"], "b": 1}'
    assert dumps({"b": 1}) == json.dumps({"b": 1})


# ---------------------------------------------------------------- planner numbers


@pytest.mark.parametrize("budget", ["9" * 30, "1" + "0" * 25 + "GiB", "1e400", "9" * 100])
def test_huge_budgets_are_refused_in_one_line(budget: str) -> None:
    with pytest.raises(CardError):
        parse_budget(budget)
    _one_line_refusal(["plan", str(CARD), "--budget", budget])


def test_card_times_that_overflow_float64_sums(tmp_path) -> None:
    card = _card()
    seg = card["segments"][0]
    seg["options"]["eager"]["time"] = 1.7e308
    card["segments"].append({"name": "b", "options": copy.deepcopy(seg["options"])})
    with pytest.raises(CardError, match="overflow float64"):
        parse_card(card)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(card))
    _one_line_refusal(["plan", str(path), "--budget", "1GiB", "--json"])


def test_load_json_defaults() -> None:
    assert load_json('{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}
    assert load_json(b'\xef\xbb\xbf[1]') == [1]


# ---------------------------------------------------------------- verdicts on extreme values


def _checked(doc: dict) -> list:
    from replayverify.verifier.check import check_program

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return check_program(load_program(doc))


def test_non_finite_reference_is_unsupported_not_diverge(tmp_path) -> None:
    records = _checked(json.loads(_overflowing_program(tmp_path).read_text()))
    assert not [r for r in records if r.outcome in ("diverge", "error")], [
        (r.check, r.engine, r.detail) for r in records if r.outcome in ("diverge", "error")]
    assert any("non-finite reference at coordinate" in r.detail for r in records)
    code, _, _ = _cli(["check", str(_overflowing_program(tmp_path))])
    assert code == 0


def test_tiny_dropout_keep_is_not_a_false_alarm() -> None:
    doc = _doc()
    doc["ops"] = [{"op": "dropout", "dst": "x", "x": "x", "keep": 1e-300},
                  {"op": "mul", "dst": "x", "x": "x", "y": "x"}]
    doc["segments"] = [2]
    records = _checked(doc)
    assert not [r for r in records if r.failing], [
        (r.check, r.engine, r.detail) for r in records if r.failing]


def test_an_engine_that_differs_from_a_finite_reference_still_diverges() -> None:
    import numpy as np

    from replayverify.programs.model import Program
    from replayverify.verifier.compare import compare_gradients

    program = load_program(_doc())
    assert isinstance(program, Program)
    ref = np.array([1.0, 2.0])
    assert compare_gradients(np.array([1.0, np.nan]), ref, program).outcome == "diverge"
    assert compare_gradients(np.array([1.0, 2.0]), np.array([1.0, np.inf]),
                             program).outcome == "unsupported"
    assert compare_gradients(np.array([1.0, np.inf]), np.array([1.0, np.inf]),
                             program).outcome == "match"
    assert compare_gradients(np.array([1.0, np.inf]), ref, program,
                             both_references=True).outcome == "unsupported"


def test_final_storage_below_tolerance_is_unsupported_with_the_effect() -> None:
    doc = _doc()
    doc["ops"] = [{"op": "tanh", "dst": "head", "x": "xs", "a": 1.0},
                  {"op": "axpby", "dst": "xs", "x": "xs", "y": "xs", "a": 1.0, "b": 0.0,
                   "c": 1e-15}]
    doc["segments"] = [2]
    doc["inputs"] = ["xs"]
    doc["loss"] = {"view": "head", "weights": [1.0] * 7}
    doc["views"] = [v for v in doc["views"] if v["name"] in ("xs", "head")]
    doc["views"][0]["offset"], doc["views"][1]["offset"] = 64, 0
    doc["init"] = [{"view": "xs", "values": [0.1 * j for j in range(7)]}]
    [r] = [r for r in _checked(doc) if r.check == "control:final-storage"]
    assert r.outcome == "unsupported" and "change the gradient by" in r.detail, r.detail
    assert r.max_abs_err is not None and 0 < r.max_abs_err


def test_float64_overflow_in_the_engines_is_not_a_false_alarm() -> None:
    doc = json.loads((ROOT / "tests/programs/checkers/overwritten-operand.json").read_text())
    doc["init"][0]["values"][2] = 1.7e308  # tanh(1.5 * x): a*x overflows float64 only
    records = _checked(doc)
    engines = [r for r in records if r.check == "gradient" and r.engine]
    assert engines and all(r.outcome == "unsupported" for r in engines), [
        (r.engine, r.outcome, r.detail) for r in engines]
    assert "overflows float64 at coordinate 2" in engines[0].detail
    assert not [r for r in records if r.failing]


def test_a_wrong_engine_gradient_still_diverges_next_to_float64_overflow() -> None:
    import numpy as np

    from replayverify.programs import execute
    from replayverify.verifier.engine_checks import float64_overflow
    from replayverify.verifier.forward_jacobian import forward_jacobian

    doc = json.loads((ROOT / "tests/programs/checkers/overwritten-operand.json").read_text())
    doc["init"][0]["values"][2] = 1.7e308
    ex = execute(load_program(doc))
    ref = np.asarray(forward_jacobian(ex.program).gradient, np.float64)
    assert np.isfinite(ref).all()
    good = ref.copy()
    good[2] = np.nan
    assert float64_overflow(good, ref, ex)
    wrong = good.copy()
    wrong[0] += 1.0  # a finite entry off by more than the tolerance
    assert float64_overflow(wrong, ref, ex) == ""
    other = ref.copy()
    other[2] = np.inf  # not what the float64 sweep gives
    assert float64_overflow(other, ref, ex) == ""


def test_complex_step_out_of_range_is_unsupported_not_diverge() -> None:
    doc = json.loads((ROOT / "tests/programs/checkers/no-hazard.json").read_text())
    doc["ops"][0]["a"] = 1e-300  # h * a underflows: the step sees no derivative at all
    doc["loss"]["weights"][0] = 1e300  # while the true gradient is 0.8
    [r] = [r for r in _checked(doc) if r.check == "complex-step"]
    assert r.outcome == "unsupported" and "changes with h" in r.detail, r.detail
    doc = json.loads((ROOT / "tests/programs/checkers/no-hazard.json").read_text())
    [r] = [r for r in _checked(doc) if r.check == "complex-step"]
    assert r.outcome == "match"


def test_complex_step_with_a_huge_perturbation_is_unsupported() -> None:
    doc = json.loads((ROOT / "tests/programs/checkers/no-hazard.json").read_text())
    doc["ops"][0]["a"] = -1e300  # a * i*h = -1e100 i: not a small step
    doc["init"][0]["values"][0] = 1e-300
    [r] = [r for r in _checked(doc) if r.check == "complex-step"]
    assert r.outcome == "unsupported" and "linear regime at op 0" in r.detail, r.detail


def test_complex_step_with_a_subnormal_coefficient_is_unsupported() -> None:
    doc = json.loads((ROOT / "tests/programs/checkers/no-hazard.json").read_text())
    doc["ops"][0]["a"] = 5e-324  # i*a*h is exactly 0 for any usable h
    doc["init"][0]["values"] = [0.4, 1.7e308, 1e300]
    doc["loss"]["weights"] = [1, 1e300, 3]
    [r] = [r for r in _checked(doc) if r.check == "complex-step"]
    assert r.outcome == "unsupported" and "coefficient a = 5e-324" in r.detail, r.detail
