"""The file-level import graph: no circles, and no import from a lower layer up to a higher
one (``replayverify/_layers.py``). Every import counts, function-level and
``TYPE_CHECKING`` ones included: a file that imports another depends on it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from replayverify._layers import LAYERS, layer_of

PACKAGE = Path(__file__).resolve().parents[2] / "replayverify"




def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, module: str, is_package: bool, level: int) -> str:
    if not level:
        return name
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of this package it imports (the deepest that exist)."""
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node.module or "", m, is_package, node.level)
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else [*subs, base]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != m and t.split(".")[0] == "replayverify":
                    edges[m].add(t)
    return edges


def circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in edges:
        if v not in index:
            visit(v)
    return out


GRAPH = import_graph()


def test_the_graph_is_read() -> None:
    """The reader sees what it must (a guard against a reader that finds nothing)."""
    assert "replayverify.runs.executors" in GRAPH["replayverify.verifier.suite"]
    assert "replayverify.programs.model" in GRAPH["replayverify.programs.format"]
    # a function-level import counts
    assert "replayverify.evaluate.calibrate" in GRAPH["replayverify.gpu.cli"]


def test_every_module_has_a_layer() -> None:
    missing = sorted(m for m in GRAPH if layer_of(m) is None)
    assert not missing, f"no layer in replayverify/_layers.py names {missing}"


def test_no_import_runs_up_a_layer() -> None:
    up = sorted(f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
                for m, targets in GRAPH.items() for t in targets
                if layer_of(m) is not None and layer_of(t) is not None
                and layer_of(t) > layer_of(m))
    assert not up, "\n".join(up)


def test_no_circles_between_files() -> None:
    found = circles(GRAPH)
    assert not found, "\n".join(" <-> ".join(sorted(c)) for c in found)


@pytest.mark.parametrize(("edges", "expected"), [
    ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [{"a", "b"}]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}, [{"a", "b", "c"}]),
])
def test_circles_are_found(edges, expected) -> None:
    assert circles(edges) == expected


def test_layer_of() -> None:
    names = [name for name, _ in LAYERS]
    assert names[layer_of("replayverify.gpu.cli")] == "front"
    assert names[layer_of("replayverify.gpu.journal")] == "backends"
    assert names[layer_of("replayverify")] == "front"
    assert names[layer_of("replayverify.runs")] == "runs"
    assert layer_of("replayverify_other") is None


@pytest.mark.parametrize(("old", "new", "names"), [
    ("replayverify.verifier.executors", "replayverify.runs.executors",
     ("ProcessPool", "DaskExecutor", "dask_executor", "time_limit", "TaskTimeout", "DaskError",
      "parse_address", "HARD_GRACE")),
    ("replayverify.verifier.executors", "replayverify.runs.fingerprint", ("source_fingerprint",)),
    ("replayverify.verifier.journal", "replayverify.runs.journal",
     ("open_journal", "prepare_dir", "check_dir", "Journal", "RunJournal", "RunLock")),
    ("replayverify.programs.format", "replayverify.programs.model",
     ("program_to_dict", "program_to_json", "canonical_json", "program_sha256")),
    ("replayverify.engines.strategies", "replayverify.engines.preservation",
     ("Eager", "Whole", "ReadSet", "Region", "Guarded", "StrategyEngine", "PolicyEngine",
      "run_policy", "parse_policy", "POLICY_STRATEGIES")),
])
def test_moved_names_keep_their_old_paths(old, new, names) -> None:
    import importlib

    was, now = importlib.import_module(old), importlib.import_module(new)
    assert [getattr(was, n) is getattr(now, n) for n in names] == [True] * len(names)
