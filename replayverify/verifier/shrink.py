"""Shrinking failing programs to minimal reproducers (delta debugging on the IR).

Every candidate is a valid program (it goes through ``load_program``), and it is kept
only while it still fails the same check on the same engine. Passes, repeated until
none makes progress: delete ops (halves, quarters, ..., single ops), merge segments,
simplify coefficients, shrink view extents (the views of one shape together, 2-D views
a dimension at a time, down to 1-D), drop init entries and inputs, flatten loss
weights, cut buffers to the bytes their views reach and move them down (by multiples
of 8 bytes, so views of different dtypes keep aliasing the same bytes), and remove
views and buffers nothing uses.

:func:`shrink_failures` is what the suite runs on its failing records: it shrinks the
first failure of each failing program and writes the reproducers; the report module
only renders the entries it returns.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from pathlib import Path

from replayverify.programs.format import load_program, program_to_dict, save_program
from replayverify.programs.model import DTYPES, Program, ProgramError, extent
from replayverify.verifier.records import MUTANT_PREFIX, Check, Record

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
    """Each coefficient set to the values of SIMPLE that come before its own (a value
    of SIMPLE is only ever replaced by a simpler one, so the pass cannot cycle)."""
    for k, op in enumerate(doc["ops"]):
        for name, simple in SIMPLE.items():
            if name in op:
                for value in simple:
                    if op[name] == value:
                        break
                    out = copy.deepcopy(doc)
                    out["ops"][k][name] = value
                    yield out


def _rows(values: list, shape: list[int], new: list[int]) -> list:
    """Row-major ``values`` of ``shape`` cut to the leading ``new`` block."""
    if len(new) != len(shape):  # (1, c) or (r, 1) made 1-D: the same elements in order
        return values
    if len(shape) == 1:
        return values[:new[0]]
    cols = shape[1]
    return [values[i * cols + j] for i in range(new[0]) for j in range(new[1])]


def _reshaped(doc: Doc, shape: list[int], new: list[int],
              strides: Callable[[list[int]], list[int]] | None = None) -> Doc:
    """Every view of ``shape`` given shape ``new`` (and strides), its init values and
    loss weights cut to match. All views of one shape change together, so the ops that
    combine them (sources, destination, index) keep matching shapes."""
    out = copy.deepcopy(doc)
    changed = {v["name"] for v in out["views"] if v["shape"] == shape}
    for v in out["views"]:
        if v["name"] in changed:
            if strides is not None:
                v["strides"] = strides(v["strides"])
            v["shape"] = list(new)
    for e in out["init"]:
        if e["view"] in changed:
            e["values"] = _rows(e["values"], shape, new)
    if out["loss"]["view"] in changed:
        out["loss"]["weights"] = _rows(out["loss"]["weights"], shape, new)
    return out


def _shrink_views(doc: Doc) -> Iterator[Doc]:
    """Shorten the views of one shape at once, one dimension at a time (2-D views: rows,
    then columns; a 2-D view with one row or column becomes 1-D)."""
    shapes = sorted({tuple(v["shape"]) for v in doc["views"]},
                    key=lambda sh: (-math.prod(sh), sh))
    for shape in shapes:
        for axis, n in enumerate(shape):
            for m in sorted({n // 2, n - 1} - {0}):
                new = list(shape)
                new[axis] = m
                yield _reshaped(doc, list(shape), new)
        if len(shape) == 2 and 1 in shape:  # (1, c) or (r, 1): the same elements, 1-D
            keep = 1 if shape[0] == 1 else 0
            yield _reshaped(doc, list(shape), [shape[keep]], lambda st, k=keep: [st[k]])


def _trim_buffers(doc: Doc) -> Iterator[Doc]:
    """Buffers cut to the bytes their views reach, then moved down so the lowest view
    starts near byte 0 (by a multiple of 8 bytes: every dtype's alignment and every
    alias between views of different dtypes are kept)."""
    ends: dict[str, int] = {}
    lows: dict[str, int] = {}
    for v in doc["views"]:
        end = v["offset"] + extent(v["shape"], v["strides"], DTYPES[v["dtype"]].itemsize)
        ends[v["buffer"]] = max(ends.get(v["buffer"], 0), end)
        lows[v["buffer"]] = min(lows.get(v["buffer"], v["offset"]), v["offset"])
    if any(b["nbytes"] > ends.get(b["name"], b["nbytes"]) for b in doc["buffers"]):
        yield {**doc, "buffers": [{**b, "nbytes": ends.get(b["name"], b["nbytes"])}
                                  for b in doc["buffers"]]}
    for name, low in lows.items():
        shift = low - low % 8
        if shift:
            out = copy.deepcopy(doc)
            for v in out["views"]:
                if v["buffer"] == name:
                    v["offset"] -= shift
            for b in out["buffers"]:
                if b["name"] == name:
                    b["nbytes"] -= shift
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
    _trim_buffers,
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


def shrink_failures(out: Path, records: list[Record], build: Callable[[str], Program], *,
                    mutants: bool, limit: int) -> list[dict]:
    """Shrink the first failure of each failing program (up to ``limit`` programs).

    ``build`` makes the program a record's ``program`` field names. Each shrunk program
    is saved under ``out/failures/`` with the command that checks it; every failing
    program gets an entry (program, check, engine, outcome, detail, replay command, and
    for the shrunk ones the reproducer's path, op count and check command).
    """
    from replayverify.verifier.check import check_program

    failures, seen = [], set()
    for r in records:
        if not r.failing or r.program in seen:
            continue
        seen.add(r.program)
        entry = {"program": r.program, "check": str(r.check), "engine": r.engine,
                 "outcome": str(r.outcome), "detail": r.detail,
                 "replay": f"replayverify replay {r.program}" + engine_flag(r.engine, mutants)}
        if len(failures) < limit and r.check != Check.PROGRAM:
            engine_arg = (r.engine,) if r.engine else ()

            def still_fails(p, r=r, engine_arg=engine_arg):
                got = check_program(p, program_id=r.program, engines=engine_arg or None,
                                    checks=None if r.is_mutant else (r.check,),
                                    mutants=mutants and r.is_mutant)
                return any(x.failing and x.check == r.check and x.engine == r.engine
                           for x in got)

            small = shrink(build(r.program), still_fails)
            path = out / "failures" / f"{r.program}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            save_program(small, path)
            cmd = f"replayverify check {path}" + engine_flag(r.engine, mutants)
            path.with_suffix(".txt").write_text(cmd + "\n", encoding="utf-8")
            entry.update(shrunk=str(path), shrunk_ops=len(small.ops), check_command=cmd)
        failures.append(entry)
    return failures


def engine_flag(engine: str, mutants: bool) -> str:
    """The option that makes ``check``/``replay`` run the engine a record names."""
    if not engine:
        return ""
    if mutants and engine.startswith(MUTANT_PREFIX):
        return " --mutants"
    return f" --engine {engine}"
