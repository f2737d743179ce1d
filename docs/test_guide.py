"""docs/guide.md runs: its ``python`` blocks in order as one script (tracebacks point at
guide lines), each ``text`` block right after a python block is that block's exact
output, and every ``test_`` function the guide defines passes."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import pytest

import replayverify

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide.md"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


def blocks() -> list[tuple[str, str, int]]:
    """(language, code, first line) of every fenced block of the guide."""
    text = GUIDE.read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start(2)) + 1)
            for m in FENCE.finditer(text)]


TESTS = [name for lang, code, _ in blocks() if lang == "python"
         for name in re.findall(r"^def (test_\w+)", code, re.M)]


@pytest.fixture(scope="module")
def guide():
    """Run the guide once from the repository root; undo its engine registrations."""
    namespace: dict = {"__name__": "guide"}
    outputs: list[tuple[str, int]] = []  # (stdout, line) of each python block
    expected: list[tuple[str, int, int]] = []  # (text, line, index of the python block)
    registered = set(replayverify.engines.names())
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        last = None
        for lang, code, line in blocks():
            if lang == "python":
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile("\n" * (line - 1) + code, str(GUIDE), "exec"), namespace)
                outputs.append((out.getvalue(), line))
                last = "python"
            elif lang == "text" and last == "python":
                expected.append((code, line, len(outputs) - 1))
            if lang != "python":
                last = lang
        yield namespace, outputs, expected
    finally:
        os.chdir(cwd)
        for name in set(replayverify.engines.names()) - registered:
            replayverify.engines.unregister(name)


def test_guide_examples_run_and_print_what_it_says(guide):
    _, outputs, expected = guide
    assert len(outputs) >= 8
    for text, line, index in expected:
        assert outputs[index][0] == text, f"docs/guide.md:{line}: output differs"


def test_guide_json_is_the_example_file():
    shown = [code for lang, code, _ in blocks() if lang == "json"]
    example = json.loads((ROOT / "examples" / "shift-tanh.json").read_text())
    assert json.loads(shown[0]) == example


def test_guide_defines_property_tests():
    assert {"test_every_engine_replays_exactly", "test_my_checkpointing"} <= set(TESTS)


@pytest.mark.parametrize("name", TESTS)
def test_guide_property_test(guide, name):
    guide[0][name]()
