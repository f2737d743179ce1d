"""Structural fuzzing of program files and planner cards (issue #13).

Valid seeds (the example program, the hand-written checker programs, two cards) are
mutated structurally: keys deleted, duplicated, renamed and retyped, values replaced by
extreme numbers, deep nesting, long strings and control characters, views given odd
shapes and strides; the JSON text is then perhaps cut, given a BOM, a duplicate key or a
huge literal. Each input goes through ``load_program`` / ``load_card`` and, in process,
through click's CliRunner (``run --json``, ``show``, ``check --json``, ``plan --json``).

An input passes when: the command exits 0 or 2 (``check`` may not find a failure in a
valid program: exit 1 fails too); a refusal is one stderr line under 300 characters;
nothing raises past the CLI (no traceback); no warning is emitted; the traced peak
memory stays under 1 GiB; and, when ``time_limit`` is given, it takes under that many
seconds. ``tests/property/test_fuzz_inputs.py`` runs a few hundred derandomized inputs
in CI (no time limit: no timed assertions in tests); ``scripts/fuzz.sh`` runs 10,000+
with the 5 s limit and prints one summary line.
"""

from __future__ import annotations

import copy
import json
import sys
import time
import tracemalloc
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import strategies as st

from replayverify.cli import main
from replayverify.planner.card import CardError, loads_card, parse_card
from replayverify.programs import load_program
from replayverify.programs.model import ProgramError

ROOT = Path(__file__).resolve().parents[2]
PROGRAM_SEEDS = [ROOT / "examples" / "shift-tanh.json",
                 *sorted((ROOT / "tests" / "programs" / "checkers").glob("*.json"))]
SMALL_CARD = {
    "format": "replayverify.profile", "version": 1, "name": "small", "persistent_bytes": 1024,
    "segments": [
        {"name": "a", "options": {"eager": {"retained": 4096, "temporary": 0, "time": 1.0},
                                  "whole": {"retained": 1024, "temporary": 4096, "time": 2.0,
                                            "state_retained": 512, "state_temporary": 512,
                                            "state_time": 0.5}}},
        {"name": "b", "options": {"region": {"retained": 2048, "temporary": 1024,
                                             "time": 1.5}}},
    ],
}
CARD_SEEDS = [SMALL_CARD, json.loads((ROOT / "examples" / "large-sparse-card.json").read_text())]
MEMORY_LIMIT = 2**30
LINE = 300

# ---------------------------------------------------------------- values and mutations

_DEEP = "deep"  # placeholder: replaced by a nested list at dump time (cheap to shrink)
EXTREME = [
    None, True, False, 0, -1, 1, 3, 7, 8, 2**31, 2**32, 2**32 - 1, 2**53 + 1, 2**63 - 1, 2**63,
    2**64, -(2**63) - 1, 10**30, 10**99, 10**400, 1e308, -1e308, 1.7976931348623157e308,
    5e-324, -0.0, 0.5, 1.5, 1e-300, 3.4028235e38, 3.5e38, float("nan"), float("inf"),
    "", "x", "float64", "float32", "int32", "int64", "axpby", "tanh", "scatter", "gather",
    "dropout", "noise", "x" * 5000, "a\nb\rc\x00d\x1b[31m\u2028e", "\ud800", "\udfff\ud800",
    "é€😀", [], {}, [0] * 3, [1, 2], [32768, 32768], [8, 8], [1 << 40], [0], [-8], [8, 0],
    [[1]], {"a": 1}, _DEEP,
]
KEYS = ["name", "op", "dst", "x", "y", "index", "a", "k", "keep", "sigma", "shape",
        "strides", "offset", "buffer", "dtype", "values", "weights", "segments", "inputs",
        "rng", "key", "counter", "nbytes", "options", "eager", "whole", "region", "retained",
        "temporary", "time", "state_time", "persistent_bytes", "\n", "\x00", "\ud800", "é"]


def _paths(doc: Any) -> list[tuple]:
    """Every path into ``doc`` (keys and list positions), the root first."""
    out: list[tuple] = [()]
    stack = [((), doc)]
    while stack:
        path, value = stack.pop()
        items = (value.items() if isinstance(value, dict)
                 else enumerate(value) if isinstance(value, list) else ())
        for k, v in items:
            out.append(path + (k,))
            if len(out) < 5000:
                stack.append((path + (k,), v))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for k in path:
        doc = doc[k]
    return doc


@st.composite
def mutation(draw, doc: Any) -> tuple:
    """One structural change, as data: (kind, path, argument). Shrinks towards deletion."""
    paths = _paths(doc)
    path = draw(st.sampled_from(paths))
    kind = draw(st.sampled_from(["delete", "set", "set", "set", "retype", "rename", "add",
                                 "duplicate", "view", "number"]))
    if kind in ("set", "add"):
        arg = draw(st.one_of(st.sampled_from(EXTREME), st.sampled_from(EXTREME),
                             st.sampled_from(EXTREME), st.integers(), st.floats(),
                             st.text(max_size=20)))
        if kind == "add":
            arg = (draw(st.one_of(st.sampled_from(KEYS), st.text(max_size=8))), arg)
    elif kind == "rename":
        arg = draw(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)))
    elif kind == "view":
        arg = (draw(st.sampled_from([[32768, 32768], [8192, 8192], [1 << 20], [3, 5], [1],
                                     [2, 2, 2], [], [1 << 40, 1]])),
               draw(st.sampled_from([[8, 8], [8], [16, 8], [8, 16], [4, 4], [24, 8], [0],
                                     [2**62], [-8, 8], [1]])),
               draw(st.sampled_from([0, 4, 8, 2**40, -8, 7])))
    elif kind == "number":
        arg = draw(st.one_of(st.integers(min_value=-(2**70), max_value=2**70),
                             st.floats(allow_nan=False, allow_infinity=False),
                             st.sampled_from([2**63, 10**30, 1e308, -0.0, 5e-324])))
    else:
        arg = None
    return kind, path, arg


def apply(doc: Any, change: tuple) -> Any:
    """The document after one change (the input is not modified)."""
    kind, path, arg = change
    doc = copy.deepcopy(doc)
    if not path:
        return arg if kind == "set" else doc
    parent, key = _get(doc, path[:-1]), path[-1]
    if kind == "delete":
        del parent[key]
    elif kind == "set":
        parent[key] = arg
    elif kind == "retype":
        v = parent[key]
        parent[key] = ([v] if not isinstance(v, list) else
                       {"0": v[0]} if v else "list") if not isinstance(v, str) else [v]
    elif kind == "rename" and isinstance(parent, dict):
        parent[arg] = parent.pop(key)
    elif kind == "add":
        target = parent[key]
        if isinstance(target, dict):
            target[arg[0]] = arg[1]
        elif isinstance(target, list):
            target.append(arg[1])
    elif kind == "duplicate" and isinstance(parent, list):
        parent.insert(key, copy.deepcopy(parent[key]))
    elif kind == "view" and isinstance(parent[key], dict):
        parent[key].update(shape=arg[0], strides=arg[1], offset=arg[2])
    elif kind == "number":
        parent[key] = arg
    return doc


def _deep(depth: int) -> Any:
    out: list = []
    for _ in range(depth):
        out = [out]
    return out


def _materialize(doc: Any, depth: int) -> Any:
    """Replace the deep-nesting placeholder by ``depth`` nested lists."""
    if doc == _DEEP:
        return _deep(depth)
    if isinstance(doc, dict):
        return {k: _materialize(v, depth) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_materialize(v, depth) for v in doc]
    return doc


def to_text(doc: Any, edit: tuple[str, int], depth: int) -> str | None:
    """JSON text of ``doc`` (NaN tokens allowed) with one text-level edit, or None when
    the document cannot be written as JSON text (a non-string key)."""
    try:
        text = json.dumps(_materialize(doc, min(depth, 400)), allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        return None
    if depth > 400:  # deeper than json.dumps can write: splice the brackets in
        text = text.replace('"deep"', "[" * depth + "]" * depth, 1)
    kind, pos = edit
    cut = pos % (len(text) + 1)
    if kind == "truncate":
        text = text[:cut]
    elif kind == "bom":
        text = "\ufeff" + text
    elif kind == "dupkey":
        text = text.replace('"name":', '"name": 1, "name":', 1)
    elif kind == "digits":
        text = text.replace("1", "1" + "0" * (pos % 6000), 1)
    elif kind == "surrogate":
        text = text.replace('"name": "', '"name": "\\ud83d', 1)
    elif kind == "nest":
        text = text.replace('"name": ', '"name": ' + "[" * depth + "]" * depth + ", \"x\": ", 1)
    elif kind == "garbage":
        text = text[:cut] + "\x00,]}\u2028" + text[cut:]
    return text


@dataclass(frozen=True)
class Case:
    """One fuzzed input: what it is, how it is fed in, and with which command."""

    card: bool
    doc: Any
    text: str | None
    how: str  # "text", "dict" or a CLI command


NUMERIC_KEYS = ("a", "b", "c", "sigma", "keep", "k", "values", "weights")
EXTREME_FLOATS = [0.0, -0.0, 5e-324, -5e-324, 1e-300, 1e-30, 1e-8, 0.5, 1.0, -1.0, 1e8,
                  1e154, -1e154, 1e300, -1e300, 1.7e308, -1.7e308, 3.4e38, -3.4e38]


def _numeric_paths(doc: Any) -> list[tuple]:
    """Paths of the numbers a valid program may hold extreme values in (coefficients,
    init values, loss weights): changing them keeps the program's structure."""
    out = []
    for path in _paths(doc):
        if path and any(k in NUMERIC_KEYS for k in path if isinstance(k, str)):
            value = _get(doc, path)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out.append(path)
    return out


@st.composite
def extreme_values(draw) -> Case:
    """A hand-written program with extreme but (mostly) valid numbers, checked or run: no
    structural change, so a correct verifier gives exit 0 (or 2 where a value does not fit
    the view's dtype) and never a false ``diverge`` or ``missed``."""
    doc = json.loads(draw(st.sampled_from(PROGRAM_SEEDS)).read_text())
    paths = _numeric_paths(doc)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(paths))
        old = _get(doc, path)
        if path[-1] == "keep" or (len(path) > 1 and path[-2] == "keep"):
            new: Any = draw(st.sampled_from([1e-300, 1e-30, 1e-8, 0.5, 1.0]))
        elif isinstance(old, int) and path[-1] == "k":
            new = draw(st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31), 2**63 - 1]))
        elif isinstance(old, int) and not isinstance(old, bool) and "values" in path:
            new = draw(st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]))
        else:
            new = draw(st.sampled_from(EXTREME_FLOATS))
        doc = apply(doc, ("set", path, new))
    how = draw(st.sampled_from(["check", "check", "run"]))
    return Case(False, doc, json.dumps(doc), how)


@st.composite
def cases(draw) -> Case:
    """A mutated program or card and a way to feed it in. Shrinks towards few changes.
    One case in four keeps a program's structure and makes its numbers extreme."""
    if draw(st.integers(0, 3)) == 0:
        return draw(extreme_values())
    card = draw(st.booleans())
    seeds = CARD_SEEDS if card else [json.loads(p.read_text()) for p in PROGRAM_SEEDS]
    doc = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(0, 4))):
        doc = apply(doc, draw(mutation(doc)))
    edit = (draw(st.sampled_from(["none", "none", "none", "truncate", "bom", "dupkey",
                                  "digits", "surrogate", "garbage", "nest"])),
            draw(st.integers(0, 10**6)))
    depth = draw(st.sampled_from([2, 33, 1000, 100_000]))
    text = to_text(doc, edit, depth)
    commands = (["plan"] if card else ["run", "show", "check"]) + ["text", "dict"]
    how = draw(st.sampled_from(commands))
    if text is None and how != "dict":
        how = "dict"
    return Case(card, _materialize(doc, min(depth, 400)), text, how)


# ---------------------------------------------------------------- running one case


@dataclass
class Result:
    """What one case did; ``problems`` is empty when it passed."""

    outcome: str  # "exit 0", "exit 2", "loaded", "refused", ...
    seconds: float
    peak: int
    problems: list[str] = field(default_factory=list)


def _cli(case: Case, tmp: Path) -> tuple[str, list[str]]:
    path = tmp / ("card.json" if case.card else "program.json")
    path.write_text(case.text or "", encoding="utf-8", errors="surrogatepass")
    args = {"run": ["run", "--json", str(path)], "show": ["show", str(path)],
            "check": ["check", "--json", str(path)],
            "plan": ["plan", str(path), "--budget", "1GiB", "--json"]}[case.how]
    res = CliRunner().invoke(main, args)
    problems = []
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        problems.append(f"raised {type(res.exception).__name__}: {res.exception!s:.200}")
    ok_codes = (0, 1, 2) if case.how == "plan" else (0, 2)  # plan: 1 = no policy fits
    if res.exit_code not in ok_codes:
        bad = [f"{r['check']}/{r['engine']} {r['outcome']}: {r['detail'][:150]}"
               for r in map(json.loads, res.stdout.splitlines()[:200] if case.how == "check"
                            else [])
               if r["outcome"] in ("diverge", "error", "missed")]
        problems.append(f"exit {res.exit_code}: {'; '.join(bad[:3]) or res.stdout[-300:]!r}")
    if "Traceback" in res.stderr or "Warning" in res.stderr:
        problems.append(f"stderr: {res.stderr[:300]!r}")
    if res.exit_code == 2:
        lines = res.stderr.splitlines()
        if case.how == "check" and not lines:  # a rejected file: one record, its detail
            lines = [json.loads(ln)["detail"] for ln in res.stdout.splitlines()
                     if '"rejected"' in ln]
        if len(lines) != 1 or len(lines[0]) >= LINE or "\n" in lines[0]:
            problems.append(f"refusal is not one line under {LINE} chars: "
                            f"{res.stderr[:300]!r}")
    return f"{case.how} exit {res.exit_code}", problems


def _direct(case: Case) -> tuple[str, list[str]]:
    source = case.doc if case.how == "dict" else case.text
    error = CardError if case.card else ProgramError
    try:
        if case.card:
            if case.how == "dict":
                parse_card(source)
            else:
                loads_card(source)
        else:
            load_program(source)
    except error as exc:
        msg = str(exc)
        if "\n" in msg or len(msg) > 240:
            return f"{case.how} refused", [f"message not one line <= 240: {msg[:300]!r}"]
        return f"{case.how} refused", []
    except Exception as exc:  # anything else is a bug
        return f"{case.how} raised", [f"raised {type(exc).__name__}: {exc!s:.200}"]
    return f"{case.how} loaded", []


def run_case(case: Case, tmp: Path, time_limit: float | None = None) -> Result:
    """Feed one case in; collect what went wrong (warnings, memory, time, output)."""
    tracemalloc.start()
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if case.how in ("text", "dict"):
            outcome, problems = _direct(case)
        else:
            outcome, problems = _cli(case, tmp)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    problems += [f"warning {w.category.__name__}: {w.message!s:.200}" for w in caught
                 if not issubclass(w.category, (DeprecationWarning, ResourceWarning))]
    if peak >= MEMORY_LIMIT:
        problems.append(f"peak {peak / 2**20:.0f} MiB >= {MEMORY_LIMIT / 2**20:.0f} MiB")
    if time_limit is not None and seconds >= time_limit:
        problems.append(f"took {seconds:.1f} s >= {time_limit} s")
    return Result(outcome, seconds, peak, problems)


# ---------------------------------------------------------------- the campaign


def campaign(examples: int, seed: int, time_limit: float, tmp: Path,
             keep: Path | None = None) -> int:
    """Run ``examples`` cases; print one summary line (and each failure); 0 iff all pass.
    ``keep``: a directory to write each failing input to (fail-N.json, how in fail-N.txt)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    counts: Counter[str] = Counter()
    failures: list[str] = []
    slowest = [0.0]
    peak = [0]

    @settings(max_examples=examples, database=None, deadline=None, derandomize=False,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @hypothesis_seed(seed)
    @given(cases())
    def body(case: Case) -> None:
        res = run_case(case, tmp, time_limit)
        counts[res.outcome] += 1
        slowest[0] = max(slowest[0], res.seconds)
        peak[0] = max(peak[0], res.peak)
        if res.problems:
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                n = len(failures)
                (keep / f"fail-{n}.json").write_text(
                    case.text if case.text is not None else repr(case.doc),
                    encoding="utf-8", errors="surrogatepass")
                (keep / f"fail-{n}.txt").write_text(f"{case.how}\n{res.problems}\n")
            failures.append(f"{res.outcome}: {'; '.join(res.problems)} | input "
                            f"{(case.text or repr(case.doc))[:200]!r}")

    body()
    total = sum(counts.values())
    for f in failures[:20]:
        print("FAIL", f)
    print(f"fuzz: {total} inputs, {len(failures)} failing; "
          + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
          + f"; slowest {slowest[0]:.2f} s, peak {peak[0] / 2**20:.0f} MiB (traced)")
    return 1 if failures or total < examples else 0


if __name__ == "__main__":
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--keep", type=Path, default=None,
                    help="write each failing input to this directory")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        sys.exit(campaign(a.examples, a.seed, a.time_limit, Path(d), a.keep))
