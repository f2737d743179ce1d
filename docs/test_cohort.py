"""docs/cohort.md runs: its ``python`` blocks that define or run code execute in order as
one script, and each ``text`` block right after one is that block's exact output."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from replayverify import cohort

PAGE = Path(__file__).resolve().parents[1] / "docs" / "cohort.md"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


def test_cohort_page_example_runs_and_prints_what_it_says():
    text = PAGE.read_text(encoding="utf-8")
    blocks = [(m.group(1), m.group(2), text.count("\n", 0, m.start(2)) + 1)
              for m in FENCE.finditer(text)]
    namespace: dict = {"__name__": "cohort_doc"}
    before = set(cohort.registry.names())
    checked, out = 0, None
    try:
        for lang, code, line in blocks:
            if lang == "python" and "execute(program, draws=" not in code:  # a fragment
                buf = io.StringIO()
                with contextlib.redirect_stdout(buf):
                    exec(compile("\n" * (line - 1) + code, str(PAGE), "exec"), namespace)
                out = buf.getvalue()
            elif lang == "text" and out is not None:
                assert out == code, f"docs/cohort.md:{line}: output differs"
                checked += 1
                out = None
    finally:
        for name in set(cohort.registry.names()) - before:
            cohort.unregister(name)
    assert checked >= 1
