"""Shrinking failing programs to minimal reproducers (delta debugging on the IR).

Every candidate is a valid program (it goes through ``load_program``), and it is kept
only while it still fails the same check on the same engine. Passes, repeated until
none makes progress: delete ops (halves, quarters, ..., single ops), merge segments,
simplify coefficients, shrink view extents, drop init entries and inputs, flatten loss
weights, and remove views and buffers nothing uses.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

from replayverify.programs.format import load_program, program_to_dict
from replayverify.programs.model import Program, ProgramError

Doc = dict


def _ops_deleted(doc: Doc, drop: set[int]) -> Doc:
    out = copy.deepcopy(doc)
    segs, start = [], 0
    for n in doc["segments"]:
        kept = sum(1 for k in range(start, start + n) if k not in drop)
        start += n
        if kept:
            segs.append(kept)
    out["ops"] = [op for k, op in enumerate(doc["ops"]) if k not in drop]
    out["segments"] = segs or [0]
    return out


def _delete_ops(doc: Doc) -> Iterator[Doc]:
    n = len(doc["ops"])
    size = n // 2
    while size >= 1:
        for lo in range(0, n, size):
            yield _ops_deleted(doc, set(range(lo, min(n, lo + size))))
        size //= 2


def _merge_segments(doc: Doc) -> Iterator[Doc]:
    segs = doc["segments"]
    if len(segs) > 1:
        yield {**doc, "segments": [sum(segs)]}
        for j in range(len(segs) - 1):
            yield {**doc, "segments": segs[:j] + [segs[j] + segs[j + 1]] + segs[j + 2:]}


SIMPLE = {"a": (1.0, 0.5), "b": (1.0, 0.0, 0.5), "c": (0.0,), "sigma": (1.0, 0.5),
          "keep": (0.5,), "k": (0, 1)}


def _simplify_coefficients(doc: Doc) -> Iterator[Doc]:
    for k, op in enumerate(doc["ops"]):
        for name, simple in SIMPLE.items():
            if name in op:
                for value in simple:
                    if op[name] != value:
                        out = copy.deepcopy(doc)
                        out["ops"][k][name] = value
                        yield out
                        break


def _shrink_views(doc: Doc) -> Iterator[Doc]:
    """Shorten every 1-D view of one length at once, so ops keep matching shapes."""
    lengths = sorted({v["shape"][0] for v in doc["views"] if len(v["shape"]) == 1}, reverse=True)
    for n in lengths:
        for new in sorted({n // 2, n - 1} - {0}):
            out = copy.deepcopy(doc)
            changed = {v["name"] for v in out["views"] if v["shape"] == [n]}
            for v in out["views"]:
                if v["name"] in changed:
                    v["shape"] = [new]
            for e in out["init"]:
                if e["view"] in changed:
                    e["values"] = e["values"][:new]
            if out["loss"]["view"] in changed:
                out["loss"]["weights"] = out["loss"]["weights"][:new]
            yield out


def _drop_extras(doc: Doc) -> Iterator[Doc]:
    for j in range(len(doc["init"])):
        yield {**doc, "init": doc["init"][:j] + doc["init"][j + 1:]}
    for j in range(len(doc["inputs"])):
        yield {**doc, "inputs": doc["inputs"][:j] + doc["inputs"][j + 1:]}
    weights = doc["loss"]["weights"]
    if any(w != 1.0 for w in weights):
        yield {**doc, "loss": {**doc["loss"], "weights": [1.0] * len(weights)}}
    if doc["rng"] != {"key": [0, 0], "counter": [0, 0, 0, 0]}:
        yield {**doc, "rng": {"key": [0, 0], "counter": [0, 0, 0, 0]}}


def _prune(doc: Doc) -> Doc:
    """Remove views and buffers that nothing refers to (never changes behaviour)."""
    used = {doc["loss"]["view"], *doc["inputs"], *(e["view"] for e in doc["init"])}
    for op in doc["ops"]:
        used.update(v for f, v in op.items() if f in ("dst", "x", "y", "index"))
    views = [v for v in doc["views"] if v["name"] in used]
    bufs = {v["buffer"] for v in views}
    return {**doc, "views": views, "buffers": [b for b in doc["buffers"] if b["name"] in bufs]}


PASSES: tuple[Callable[[Doc], Iterator[Doc]], ...] = (
    _delete_ops, _merge_segments, _simplify_coefficients, _shrink_views, _drop_extras,
)


def shrink(program: Program, still_fails: Callable[[Program], bool],
           max_checks: int = 2000) -> Program:
    """The smallest program found that still satisfies ``still_fails``."""
    best = program
    doc = program_to_dict(program)
    checks = 0
    progress = True
    while progress and checks < max_checks:
        progress = False
        for make in PASSES:
            for cand in make(doc):
                if checks >= max_checks:
                    break
                try:
                    p = load_program(_prune(cand))
                except ProgramError:
                    continue
                checks += 1
                if p != best and still_fails(p):
                    best, doc, progress = p, program_to_dict(p), True
                    break
            if progress:
                break
    try:
        pruned = load_program(_prune(program_to_dict(best)))
        if pruned != best and still_fails(pruned):
            best = pruned
    except ProgramError:
        pass
    return best
