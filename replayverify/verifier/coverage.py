"""Suite coverage: which corners of the semantics the generated programs reached.

Per program (:func:`program_coverage`, computed from its execution) and per suite
(:func:`coverage_summary`): the (op kind x view kind x dtype) cells that occurred (each
view an op names counts in its own cell, the index view included), the admission
refusal of SPEC §3 each refused program reported, and rates of what makes replay hard
(buffers viewed through both float dtypes, float reads of bytes another dtype wrote,
int64 and int32 views, 2-D views per op field, draws per segment position). The suite
writes the summary under ``coverage`` in summary.json and as tables in report.md, so a
user sees what a suite did *not* exercise.
"""

from __future__ import annotations

from collections import Counter

from replayverify.programs.generate import VIEW_KINDS, view_kind
from replayverify.programs.interpreter import Execution
from replayverify.programs.model import DTYPES, FLOAT_DTYPES, INT_DTYPES, OP_SPECS, DtypeRule

# The refusal kinds of SPEC §3 and the phrase of the interpreter's reason that names each.
REFUSALS = {
    "integer write": "last written by integer op",
    "several writes": "from several writes",
    "different byte extent": "at a different byte extent",
}
DRAW_POSITIONS = ("only op", "first op", "inside", "last op")


def refusal_kind(reason: str) -> str:
    """The SPEC §3 refusal kind an admission reason states ("" if none matches)."""
    for kind, phrase in REFUSALS.items():
        if phrase in reason:
            return kind
    return ""


def possible_cells() -> list[tuple[str, str, str]]:
    """Every (op kind, view kind, dtype) cell that a valid program can occupy."""
    out = []
    for kind, spec in OP_SPECS.items():
        dtypes = {DtypeRule.FLOAT: FLOAT_DTYPES, DtypeRule.INT: INT_DTYPES,
                  DtypeRule.SAME: tuple(DTYPES)}[spec.dtypes]
        if spec.indexed:
            dtypes = tuple(dict.fromkeys(dtypes + INT_DTYPES))
        out += [(kind.value, vk, d) for vk in VIEW_KINDS for d in DTYPES if d in dtypes]
    return out


def _draw_position(k: int, bounds: tuple[tuple[int, int], ...]) -> str:
    for a, b in bounds:
        if a <= k < b:
            if b - a == 1:
                return "only op"
            return "first op" if k == a else "last op" if k == b - 1 else "inside"
    raise IndexError(k)


# per op kind, from the one table: its name, the fields naming views, and whether it draws
_KIND = {kind: (kind.value, spec.view_fields, spec.draws is not None)
         for kind, spec in OP_SPECS.items()}


def program_coverage(ex: Execution) -> dict:
    """What one program exercised (JSON-ready; :func:`coverage_summary` adds them up)."""
    program = ex.program
    label, two_d = {}, set()
    by_buffer: dict[str, set[str]] = {}
    for v in program.views:  # (one pass: each is a few microseconds a program)
        label[v.name] = f"{view_kind(v)}|{v.dtype}"  # its cell's
        if len(v.shape) == 2:
            two_d.add(v.name)
        by_buffer.setdefault(v.buffer, set()).add(v.dtype)
    cells, fields_2d, draws = set(), set(), set()  # each view an op names counts
    bounds = program.segment_bounds()
    for k, op in enumerate(program.ops):
        kind, fields, drawing = _KIND[op.kind]
        for f in fields:  # (a plain loop: a comprehension is a function call in 3.11)
            name = getattr(op, f)
            cells.add(f"{kind}|{label[name]}")
            if name in two_d:
                fields_2d.add(f)
        if drawing:
            draws.add(_draw_position(k, bounds))
    # the interpreter's version bookkeeping saw every float read of bytes that another
    # dtype wrote last (Execution.foreign_reads)
    reads = [f"{reader} read of {writer}-written bytes" for reader, writer in ex.foreign_reads]
    return {
        "cells": sorted(cells),
        "refusal": "" if ex.admission.supported else refusal_kind(ex.admission.reason),
        "float_reads_of_other_dtypes": sorted(reads),
        "both_float_dtypes_on_one_buffer": any(set(FLOAT_DTYPES) <= d
                                               for d in by_buffer.values()),
        "view_dtypes": sorted({v.dtype for v in program.views}),
        "fields_2d": sorted(fields_2d),
        "draw_positions": sorted(draws),
    }


RATES = (
    ("buffers viewed as float64 and float32", lambda c: c["both_float_dtypes_on_one_buffer"]),
    ("float32 reads of float64-written bytes",
     lambda c: "float32 read of float64-written bytes" in c["float_reads_of_other_dtypes"]),
    ("float64 reads of float32-written bytes",
     lambda c: "float64 read of float32-written bytes" in c["float_reads_of_other_dtypes"]),
    ("float reads of integer-written bytes",
     lambda c: any("int" in r for r in c["float_reads_of_other_dtypes"])),
    ("int64 views", lambda c: "int64" in c["view_dtypes"]),
    ("int32 views", lambda c: "int32" in c["view_dtypes"]),
    *((f"2-D {f} views", lambda c, f=f: f in c["fields_2d"]) for f in ("dst", "x", "y", "index")),
    *((label, lambda c, p=p: p in c["draw_positions"]) for p, label in zip(DRAW_POSITIONS, (
        "draws as a segment's only op", "draws as a segment's first op",
        "draws inside a segment", "draws as a segment's last op"))),
    *((f"admission refused: {k}", lambda c, k=k: c["refusal"] == k) for k in REFUSALS),
)


class CoverageTally:
    """:func:`coverage_summary` kept as counters, one program's statistics at a time (the
    suite's memory does not grow with its length)."""

    def __init__(self) -> None:
        self.n = 0
        self.cells: Counter = Counter()
        self.refusals: Counter = Counter()
        self.rates = dict.fromkeys((name for name, _ in RATES), 0)

    def add(self, stats: dict) -> None:
        c = stats.get("coverage")
        if c is None:
            return
        self.n += 1
        self.cells.update(c["cells"])
        self.refusals[c["refusal"]] += bool(c["refusal"])
        for name, test in RATES:
            self.rates[name] += bool(test(c))

    def summary(self) -> dict:
        cells, refusals = self.cells, self.refusals
        possible = [f"{k}|{vk}|{d}" for k, vk, d in possible_cells()]
        table: dict = {}
        for key in possible:
            k, vk, d = key.split("|")
            table.setdefault(k, {}).setdefault(vk, {})[d] = cells[key]
        return {
            "programs": self.n,
            "cells": table,
            "cells_occurred": sum(1 for key in possible if cells[key]),
            "cells_possible": len(possible),
            "missing_cells": [key.replace("|", " / ") for key in possible if not cells[key]],
            "admission_refusals": {k: refusals[k] for k in REFUSALS},
            "missing_refusals": [k for k in REFUSALS if not refusals[k]],
            "rates": dict(self.rates),
        }


def coverage_summary(stats: list[dict]) -> dict:
    """The suite's coverage: counts per cell and refusal, what did not occur, and rates
    (programs with each property, of the programs that ran)."""
    tally = CoverageTally()
    for s in stats:
        tally.add(s)
    return tally.summary()


def render_coverage(cov: dict) -> list[str]:
    """report.md lines: the rates, the cell table and the refusals."""
    n = cov["programs"] or 1
    lines = ["", "### Rates", "", "| programs with | count | rate |", "|---|---:|---:|"]
    for name, count in cov["rates"].items():
        lines.append(f"| {name} | {count} | {count / n:.1%} |")
    cols = [(vk, d) for vk in VIEW_KINDS for d in DTYPES]
    lines += ["", "## Coverage", "",
              f"(op kind x view kind x dtype) cells that occurred: {cov['cells_occurred']} of "
              f"{cov['cells_possible']} possible (each view an op names counts; — marks a "
              "cell no valid program has).", "",
              "| op | " + " | ".join(f"{vk} {d}" for vk, d in cols) + " |",
              "|---|" + "---:|" * len(cols)]
    for kind, by_vk in cov["cells"].items():
        row = [str(by_vk[vk][d]) if d in by_vk.get(vk, {}) else "—" for vk, d in cols]
        lines.append(f"| {kind} | " + " | ".join(row) + " |")
    missing = cov["missing_cells"]
    lines += ["", "Cells that did not occur: " + (", ".join(missing) if missing else "none."),
              "", "| admission refusal (SPEC §3) | programs |", "|---|---:|"]
    for kind, count in cov["admission_refusals"].items():
        lines.append(f"| {kind} | {count} |")
    gone = cov["missing_refusals"]
    lines += ["", "Refusal kinds that did not occur: " + (", ".join(gone) if gone else "none.")]
    return lines
