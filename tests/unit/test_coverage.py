"""Suite coverage: cells, refusal kinds and rates (replayverify.verifier.coverage)."""

from replayverify.programs import execute, generate
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


def test_only_refused_programs_read_bytes_another_dtype_wrote():
    """program_coverage follows the writers' dtypes only for refused programs: admission
    refuses the first such read, so following a supported program's finds none."""
    from replayverify.verifier.coverage import _reads_of_other_dtypes

    seen = {True: 0, False: 0}
    for family in ("mixed", "bytes", "default", "alias"):
        for i in range(30):
            ex = execute(generate(1, i, family))
            views = {v.name: v for v in ex.program.views}
            by_buffer: dict = {}
            for v in ex.program.views:
                by_buffer.setdefault(v.buffer, set()).add(v.dtype)
            reads = _reads_of_other_dtypes(ex, views, by_buffer)
            if ex.admission.supported:
                assert reads == set(), (family, i)
            seen[bool(reads)] += 1
    assert seen[True] and seen[False]  # both kinds of program occurred


def test_a_views_byte_mask_has_the_bits_of_its_bytes():
    """``_byte_mask`` (the repeated-element product for a whole view, one bit per byte of
    the elements at ``where`` otherwise) sets exactly the bits of the view's bytes."""
    import numpy as np

    from replayverify.programs.state import layouts
    from replayverify.verifier.coverage import _byte_mask

    def bits(index: np.ndarray) -> int:
        return sum(1 << b for b in set(index.tolist()))

    rng = np.random.default_rng(0)
    for family in ("mixed", "alias", "bytes", "hazard"):
        for i in range(6):
            for lay in layouts(generate(1, i, family)).values():
                assert _byte_mask(lay) == bits(lay.byte_index)
                where = np.flatnonzero(rng.random(lay.size) < 0.5)
                assert _byte_mask(lay, where) == bits(lay.bytes_of(where))
