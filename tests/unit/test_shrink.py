"""The shrinker on 2-D views (a dimension at a time) and on mixed-dtype buffers."""

from replayverify.programs import execute, generate
from replayverify.programs.format import program_to_dict
from replayverify.verifier.coverage import refusal_kind
from replayverify.verifier.shrink import _shrink_views, shrink
from tests.unit.engine_programs import HAND


def _two_d_used(p):
    views = {v.name: v for v in p.views}
    return any(len(views[n].shape) == 2 for op in p.ops for n in op.views())


def test_2d_views_shrink_one_dimension_at_a_time():
    p = HAND["two_d"]()  # (3, 4) row-major, (4, 3) column-major, (2, 4) windows
    cands = list(_shrink_views(program_to_dict(p)))
    shapes = [sorted({tuple(v["shape"]) for v in c["views"]}) for c in cands]
    assert [(1, 4), (2, 4), (4, 3)] in shapes  # (3, 4) -> (1, 4): rows only
    assert [(2, 4), (3, 2), (4, 3)] in shapes  # (3, 4) -> (3, 2): columns only
    small = shrink(p, _two_d_used)
    assert len(small.ops) == 1
    assert [v.shape for v in small.views if len(v.shape) == 2] == [(1, 1)]


def test_a_one_row_2d_view_becomes_1d_with_its_values():
    p = HAND["two_d"]()
    small = shrink(p, lambda q: any(v.size >= 4 for v in q.views if v.name == "m")
                   and "m" in q.inputs and q.loss.view == "m"
                   and any(e.view == "m" for e in q.init))
    m = small.view("m")
    assert m.shape == (4,) and m.strides == (4,)  # one row of 4, row-major stride
    init = {e.view: e.values for e in small.init}
    assert init["m"] == {e.view: e.values for e in p.init}["m"][:4]


def test_mixed_dtype_buffers_shrink_keeping_the_alias():
    def extent_refused(q):
        return refusal_kind(execute(q).admission.reason) == "different byte extent"

    p = next(q for q in (generate(0, i, "mixed") for i in range(40)) if extent_refused(q)
             and len(q.ops) >= 8)
    small = shrink(p, extent_refused)
    assert extent_refused(small)
    assert len(small.ops) <= 2 < len(p.ops)
    (buf,) = {v.buffer for v in small.views if v.is_float}
    assert {v.dtype for v in small.views if v.buffer == buf} >= {"float64", "float32"}
    assert small.buffer(buf).nbytes <= 32 < p.buffer(buf).nbytes  # cut to the views' bytes
    assert min(v.offset for v in small.views if v.buffer == buf) < 8
