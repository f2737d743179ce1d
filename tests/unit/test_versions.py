"""The versioned interpreter's bookkeeping against a per-byte statement of SPEC §3.

``execute`` stores one last writer per aligned 4-byte word and decides a float read by
comparing each byte's extent tag with the one its element expects (``_Versions``). The
reference here keeps the last writer of every byte and decides each element on its own,
as SPEC §3 words it: an element reads one version when all its bytes were last written
by one node of its own extent (first byte and dtype), or were never written (CONST).
Version ids, admission and its reason must agree exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from replayverify.programs import execute, generate, layouts
from replayverify.programs.interpreter import BAD, CONST
from replayverify.strategies import programs

INT = ("int64", "int32")


class PerByte:
    """Last writer per byte; nodes as (op, dtype, first byte) in creation order."""

    def __init__(self, program):
        self.lay = layouts(program)
        self.last = {b.name: np.full(b.nbytes, CONST, np.int64) for b in program.buffers}
        self.nodes: list[tuple[int, str, int]] = []

    def write(self, op, name, where):
        lo = self.lay[name]
        positions = range(lo.size) if where is None else [int(j) for j in where]
        ids = []
        for j in positions:
            start = int(lo.starts[j])
            ids.append(len(self.nodes))
            self.nodes.append((op, lo.view.dtype, start))
            self.last[lo.view.buffer][start: start + lo.dtype.itemsize] = ids[-1]
        return ids

    def read(self, name, what):
        lo = self.lay[name]
        vids, reason = [], ""
        for j, start in enumerate(int(s) for s in lo.starts):
            row = self.last[lo.view.buffer][start: start + lo.dtype.itemsize].tolist()
            writers = sorted(set(row))
            if writers == [CONST]:
                vids.append(CONST)
                continue
            v = writers[0]
            if len(writers) == 1 and self.nodes[v][1:] == (lo.view.dtype, start):
                vids.append(v)
                continue
            vids.append(BAD)
            reason = reason or self.why(row, writers, f"float read at {what} (view "
                                        f"{lo.view.name!r} element {j})")
        return vids, reason

    def why(self, row, writers, where):
        for v in row:
            if v >= 0 and self.nodes[v][1] in INT:
                return f"{where} of bytes last written by integer op {self.nodes[v][0]}"
        if len(writers) > 1:
            ops = sorted({"constant" if v < 0 else "input" if self.nodes[v][0] < 0
                          else f"op {self.nodes[v][0]}" for v in writers})
            return f"{where} of bytes from several writes ({', '.join(ops)})"
        op, dtype, _ = self.nodes[writers[0]]
        src = "an input" if op < 0 else f"op {op}"
        return f"{where} of bytes written by {src} as {dtype} at a different byte extent"


def assert_versions_match(program):
    ex = execute(program)
    ref = PerByte(program)
    inputs = [v for name in program.inputs for v in ref.write(-1, name, None)]
    assert ex.input_vids.tolist() == inputs
    reason, at = "", None
    for k, (op, rec, ver) in enumerate(zip(program.ops, ex.records, ex.versions)):
        if ref.lay[op.dst].view.is_float:
            for f in op.spec.sources:
                vids, why = ref.read(getattr(op, f), f"op {k}")
                assert ver.reads[f].tolist() == vids, (k, f)
                assert (f in ver.complete) == all(v >= 0 for v in vids), (k, f)
                if why and not reason:
                    reason, at = why, k
        written = range(ver.writes.start, ver.writes.stop)  # (a run of ids)
        assert list(written) == ref.write(k, op.dst, rec.where)
    if ref.lay[program.loss.view].view.is_float:
        vids, why = ref.read(program.loss.view, "the loss")
        assert ex.loss_vids.tolist() == vids
        if why and not reason:
            reason, at = why, None
    assert ex.n_nodes == len(ref.nodes)
    assert (ex.admission.supported, ex.admission.reason, ex.admission.op) == \
        (not reason, reason, at)


@pytest.mark.parametrize("family", ["alias", "hazard", "mixed", "bytes", "default"])
def test_versions_agree_with_a_per_byte_reference(family):
    for index in range(12):
        assert_versions_match(generate(5, index, family))


@settings(max_examples=60, deadline=None)
@given(programs(max_ops=8))
def test_versions_agree_with_a_per_byte_reference_on_any_program(program):
    assert_versions_match(program)


@pytest.mark.parametrize("family", ["alias", "mixed", "bytes"])
def test_int64_ids_agree_with_a_per_byte_reference(family, monkeypatch):
    """Ids stored as int64 (a program that could create 2^31 nodes: offsets and strides
    in the id array scale by 2), forced on small programs."""
    from replayverify.programs import interpreter

    monkeypatch.setattr(interpreter, "INT32_IDS_BELOW", 0)
    for index in range(12):
        assert_versions_match(generate(5, index, family))


@pytest.mark.parametrize("family", ["alias", "mixed", "bytes"])
def test_compact_read_ids_agree_with_a_per_byte_reference(family, monkeypatch):
    """The ids a large view reads kept in the stored dtype (int32; ``COMPACT_IDS``), forced
    on every view of small programs: the same versions, admission and gradient."""
    from replayverify.programs import interpreter

    plain = [execute(generate(5, index, family)) for index in range(12)]
    monkeypatch.setattr(interpreter, "COMPACT_IDS", 0)
    for index in range(12):
        assert_versions_match(generate(5, index, family))
        ex = execute(generate(5, index, family))
        assert all(v.dtype == np.int32 for ver in ex.versions for v in ver.reads.values())
        if ex.admission.supported:
            assert ex.gradient.tobytes() == plain[index].gradient.tobytes()
