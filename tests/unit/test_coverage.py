"""Suite coverage: cells, refusal kinds and rates (replayverify.verifier.coverage)."""

from hypothesis import given, settings

from replayverify.programs import execute, generate, layouts
from replayverify.strategies import programs
from replayverify.verifier.coverage import (
    REFUSALS,
    coverage_summary,
    possible_cells,
    program_coverage,
    refusal_kind,
    render_coverage,
)
from tests.helpers import program
from tests.unit.engine_programs import HAND, vec


def _mixed_read(reader, writers):
    """Buffer s written through ``writers`` views (float ops), then read by ``reader``."""
    views = [vec("d", "s", 0, 4), ("f", "s", "float32", 0, (8,), (4,)),
             ("f2", "s", "float32", 0, (4,), (4,)), ("f3", "s", "float32", 16, (4,), (4,)),
             vec("i", "s", 0, 8, "int32")]
    ops = [{"op": "tanh", "dst": w, "x": w} if w != "i" else
           {"op": "iadd", "dst": "i", "x": "i", "k": 1} for w in writers]
    ops.append({"op": "sin", "dst": reader, "x": reader})
    n = {"d": 4, "f": 8}[reader]
    return program({"s": 32}, views, ops, {"view": reader, "weights": [1] * n})


def test_every_refusal_kind_is_named_by_the_interpreter():
    cases = {"integer write": _mixed_read("d", ["i"]),
             "several writes": _mixed_read("d", ["f2", "f3"]),
             "different byte extent": _mixed_read("f", ["d"])}
    assert set(cases) == set(REFUSALS)
    for kind, p in cases.items():
        ex = execute(p)
        assert not ex.admission.supported
        assert refusal_kind(ex.admission.reason) == kind, ex.admission.reason
        assert program_coverage(ex)["refusal"] == kind
    assert refusal_kind("") == ""


def test_float_reads_of_other_dtypes_are_seen():
    cov = program_coverage(execute(_mixed_read("f", ["d"])))
    assert cov["float_reads_of_other_dtypes"] == ["float32 read of float64-written bytes"]
    cov = program_coverage(execute(_mixed_read("d", ["i", "f2"])))
    assert cov["float_reads_of_other_dtypes"] == ["float32 read of int32-written bytes",
                                                  "float64 read of float32-written bytes",
                                                  "float64 read of int32-written bytes"]
    assert cov["both_float_dtypes_on_one_buffer"]


def test_cells_fields_and_draw_positions():
    cov = program_coverage(execute(HAND["two_d"]()))
    assert "tanh|2-D column-major|float32" in cov["cells"]
    assert "sin|2-D row-major|float32" in cov["cells"]
    assert cov["fields_2d"] == ["dst", "x", "y"]
    cov = program_coverage(execute(HAND["draws"]()))  # draws at ops 0, 2 | 4, 5 of [2, 2, 3]
    assert cov["draw_positions"] == ["first op", "inside"]


def test_possible_cells_follow_the_dtype_rules():
    cells = possible_cells()
    assert len(cells) == len(set(cells)) == 120
    assert ("tanh", "strided", "float32") in cells and ("tanh", "strided", "int32") not in cells
    assert ("gather", "2-D row-major", "int64") in cells
    assert ("iadd", "contiguous", "float64") not in cells


def test_summary_lists_what_did_not_occur_and_renders():
    stats = [{"coverage": program_coverage(execute(generate(0, i, "mixed")))}
             for i in range(40)]
    cov = coverage_summary(stats)
    assert cov["programs"] == 40
    assert cov["missing_refusals"] == []
    assert cov["cells_occurred"] + len(cov["missing_cells"]) == cov["cells_possible"] == 120
    assert cov["rates"]["int64 views"] == 40
    text = "\n".join(render_coverage(cov))
    assert "## Coverage" in text and "| gather |" in text
    only_draws = coverage_summary([{"coverage": program_coverage(execute(HAND["draws"]()))}])
    assert only_draws["missing_refusals"] == list(REFUSALS)
    assert "iadd / contiguous / int32" in only_draws["missing_cells"]


def _foreign_reads_byte_by_byte(ex):
    """(reader dtype, writer dtype) of every float read of bytes whose last writer had
    another dtype, following each byte's last writer's dtype through the run."""
    program, lay = ex.program, layouts(ex.program)
    last = {b.name: [None] * b.nbytes for b in program.buffers}
    found = set()

    def write(name, where):
        lo = lay[name]
        for j in range(lo.size) if where is None else where.tolist():
            start = int(lo.starts[j])
            last[lo.view.buffer][start:start + lo.dtype.itemsize] = \
                [lo.view.dtype] * lo.dtype.itemsize

    def read(name):
        lo = lay[name]
        if lo.view.is_float:
            for start in lo.starts.tolist():
                for dtype in last[lo.view.buffer][start:start + lo.dtype.itemsize]:
                    if dtype is not None and dtype != lo.view.dtype:
                        found.add((lo.view.dtype, dtype))

    for name in program.inputs:
        write(name, None)
    for rec in ex.records:
        if lay[rec.op.dst].view.is_float:
            for f in rec.op.spec.sources:
                read(getattr(rec.op, f))
        write(rec.op.dst, rec.where)
    read(program.loss.view)
    return found


def test_foreign_reads_are_every_float_read_of_bytes_another_dtype_wrote():
    """Execution.foreign_reads (from the version bookkeeping's tags, looked at only where
    admission refuses an element) against each byte's last writer followed through the
    run; only refused programs have any."""
    seen = {True: 0, False: 0}
    for family in ("mixed", "bytes", "default", "alias", "hazard"):
        for i in range(30):
            ex = execute(generate(1, i, family))
            assert ex.foreign_reads == _foreign_reads_byte_by_byte(ex), (family, i)
            if ex.admission.supported:
                assert not ex.foreign_reads, (family, i)
            seen[bool(ex.foreign_reads)] += 1
    assert seen[True] and seen[False]  # both kinds of program occurred


@settings(max_examples=60, deadline=None)
@given(programs(max_ops=8))
def test_foreign_reads_on_any_program(program):
    ex = execute(program)
    assert ex.foreign_reads == _foreign_reads_byte_by_byte(ex)
