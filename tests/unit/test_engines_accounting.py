"""Engine accounting checked against independent formulas: tests that fail if an
engine's retained bytes, temporary bytes or replayed ops lie."""

import numpy as np
import pytest

from replayverify import engines
from replayverify.engines import Region, StrategyEngine
from replayverify.programs import execute, generate, layouts
from tests.unit.engine_programs import HAND

RNG = 24


def run(name, p):
    return engines.get(name).run(p)


def read_fields(op):
    return op.spec.sources + (("index",) if op.spec.indexed else ())


def draw_bytes(p):
    lay = layouts(p)
    return sum(lay[op.dst].size * lay[op.dst].dtype.itemsize for op in p.ops if op.spec.draws)


def eager_formula(p):
    lay = layouts(p)
    total = 0
    for op in p.ops:
        bufs = {lay[getattr(op, f)].view.buffer for f in read_fields(op)}
        total += sum(p.buffer(b).nbytes for b in bufs) + RNG
    return total


def readset_formula(p):
    lay = layouts(p)
    total = 0
    for op in p.ops:
        per_buf = {}
        for f in read_fields(op):
            v = lay[getattr(op, f)]
            per_buf.setdefault(v.view.buffer, set()).update(v.byte_index.tolist())
        total += sum(len(s) for s in per_buf.values()) + (RNG if op.spec.draws else 0)
    return total


def whole_formula(p):
    return len(p.segments) * (p.nbytes + RNG) + draw_bytes(p)


def region_formula(p, granularity=None):
    """Old and new bytes of every region each op wrote, 8 bytes per region index, R_s."""
    ex = execute(p)
    lay = layouts(p)
    total = RNG * len(p.segments)
    for rec in ex.records:
        dst = lay[rec.op.dst]
        g = granularity or dst.dtype.itemsize
        written = dst.bytes_of(rec.where)
        ids = np.unique(written // g)
        nbytes = p.buffer(dst.view.buffer).nbytes
        size = sum(min(g, nbytes - i * g) for i in ids.tolist())
        total += 2 * size + 8 * ids.size
    return total


PROGRAMS = [HAND[n]() for n in sorted(HAND)] + [generate(4, i, family=f)
                                                 for i in range(6)
                                                 for f in ("bytes", "derivative", "alias")]


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p.name or "hand")
def test_retained_bytes_match_independent_formulas(p):
    assert run("eager", p).retained_bytes == eager_formula(p)
    assert run("readset", p).retained_bytes == readset_formula(p)
    assert run("whole", p).retained_bytes == whole_formula(p)
    assert run("region", p).retained_bytes == region_formula(p)


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p.name or "hand")
def test_eager_retains_at_least_what_readset_retains(p):
    e, r = run("eager", p), run("readset", p)
    assert e.retained_bytes >= r.retained_bytes
    assert all(a >= b for a, b in zip(e.segment_retained_bytes, r.segment_retained_bytes))


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p.name or "hand")
def test_replayed_ops_and_temporaries(p):
    n = len(p.ops)
    for name in ("eager", "readset"):
        r = run(name, p)
        assert r.replayed_ops == 0 and r.peak_temporary_bytes == 0
        assert all(s is None for s in r.replays)
    for name in ("whole", "region", "guarded"):
        r = run(name, p)
        assert r.replayed_ops == n  # every segment replayed exactly once
        assert all(s is not None for s in r.replays)
    # whole holds a copy of the visible state during its transactions
    assert run("whole", p).peak_temporary_bytes >= p.nbytes + RNG
    assert sum(run("region", p).segment_retained_bytes) == run("region", p).retained_bytes


def test_region_retains_less_than_whole_at_low_write_fractions():
    p = HAND["sparse_writes"]()
    region, whole = run("region", p), run("whole", p)
    assert region.retained_bytes * 10 < whole.retained_bytes
    # region needs no copy of the visible state: its workspace is far smaller too
    assert region.peak_temporary_bytes * 10 < whole.peak_temporary_bytes


def test_region_granularity_changes_the_accounting_honestly():
    p = HAND["sparse_writes"]()
    for g in (8, 64, 4096):
        r = StrategyEngine("r", Region(g)).run(p)
        assert r.retained_bytes == region_formula(p, g)
    small = StrategyEngine("r", Region(8)).run(p).retained_bytes
    big = StrategyEngine("r", Region(4096)).run(p).retained_bytes
    assert big > small


def test_guarded_never_retains_more_than_region_or_whole():
    for p in PROGRAMS:
        g = run("guarded", p).retained_bytes
        assert g <= run("region", p).retained_bytes and g <= run("whole", p).retained_bytes
