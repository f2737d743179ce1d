"""The journal-kernel region engine (``replayverify.gpu.engines``) on NumPy, where the journal
module runs its reference: exact against the interpreter and bit-identical to Region at the
same granularity (accounting too, unless a scatter journals regions it did not write)."""

import numpy as np
import pytest

from replayverify.engines import Region, StrategyEngine
from replayverify.gpu import journal as jr
from replayverify.gpu.engines import JournalRegion, KernelEntry
from replayverify.programs import execute, generate
from replayverify.programs.model import OpKind
from tests.unit.engine_programs import HAND
from tests.unit.test_engines import assert_engine_exact


def check(p, granularity):
    ex = execute(p)
    got = StrategyEngine("region-journal", JournalRegion(granularity)).run(
        p, admission=ex.admission)
    assert_engine_exact(got, ex)
    want = StrategyEngine("region", Region(granularity)).run(p, admission=ex.admission)
    assert (got.gradient is None) == (want.gradient is None)
    if want.gradient is not None:
        assert got.gradient.tobytes() == want.gradient.tobytes()
    if not any(op.kind is OpKind.SCATTER for op in p.ops):
        assert got.metrics == want.metrics
        assert got.segment_retained_bytes == want.segment_retained_bytes


@pytest.mark.parametrize("granularity", [16, 4096])
@pytest.mark.parametrize("name", sorted(HAND))
def test_hand_written(name, granularity):
    check(HAND[name](), granularity)


@pytest.mark.parametrize("family", ["default", "derivative", "bytes", "alias", "complex"])
def test_generated(family):
    for i in range(6):
        check(generate(3, i, family=family), 4096)


def test_kernel_entries_are_used_where_buffers_allow():
    p = HAND["gather_scatter"]()  # buffers of 96 bytes (kernel journals) and 24 (fallback)
    from replayverify.engines.base import Tape, _forward
    from replayverify.programs.state import initial_state

    st = JournalRegion()
    tape = Tape(p, (st,) * len(p.segments))
    _forward(tape, initial_state(p))
    kinds = {type(v).__name__ for k, v in tape.data.items() if k[0] == "journal"}
    assert kinds == {"KernelEntry", "JournalEntry"}
    for v in tape.data.values():
        if isinstance(v, KernelEntry):
            assert v.old.layout is v.new.layout and v.old.layout.granularity == jr.GRANULARITY


def test_granularity_must_suit_the_kernels():
    with pytest.raises(ValueError, match="multiple of 16"):
        JournalRegion(100)
    assert np.all(jr.layout(96, [0], 4096).regions == [0])
