"""The reference byte check (SPEC §1, §5 ``bytes``): exact bytes and generator state.

For every segment s, (B_s, R_s) recorded by the forward pass is restored, the segment
is replayed with fresh draws from R_s, and every buffer's bytes and the 24 bytes of
the generator state are compared exactly with (B_{s+1}, R_{s+1}); the whole run from
(B_0, R_0) is compared with the final (B_T, R_T). The measured error is the number
of bytes that differ, over all comparisons (0 when every replay is exact).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replayverify.programs.errstate import quiet
from replayverify.programs.interpreter import FORWARD, Execution, ForwardRule, execute_op
from replayverify.programs.model import OpKind, Program
from replayverify.programs.philox import RngState
from replayverify.programs.state import Snapshot, State
from replayverify.verifier.compare import Verdict
from replayverify.verifier.records import Outcome
from replayverify.verifier.reference_run import ReferenceRun, reference_run


@dataclass(frozen=True)
class ByteDiff:
    """How a replayed state differs from the expected one."""

    bytes: int  # differing bytes over all buffers and the 24-byte generator state
    notes: tuple[str, ...]  # one line per differing buffer, and for the generator

    @property
    def exact(self) -> bool:
        return self.bytes == 0


EXACT = ByteDiff(0, ())  # (immutable: one for every exact comparison)


def diff_states(got: State | Snapshot, want: Snapshot) -> ByteDiff:
    """Compare every buffer's bytes and the generator state exactly."""
    got = got.snapshot() if isinstance(got, State) else got
    if got.rng == want.rng and got.buffers == want.buffers:  # the common case: exact
        return EXACT
    total, notes = 0, []
    for name, data in want.buffers.items():
        mine = got.buffers.get(name)
        if mine is None or len(mine) != len(data):
            total += len(data)
            notes.append(f"buffer {name!r} missing or resized")
            continue
        if mine != data:
            a = np.frombuffer(mine, np.uint8)
            b = np.frombuffer(data, np.uint8)
            bad = np.flatnonzero(a != b)
            total += bad.size
            notes.append(f"buffer {name!r}: {bad.size} bytes differ from byte {int(bad[0])}")
    rng_got, rng_want = RngState(*got.rng).to_bytes(), RngState(*want.rng).to_bytes()
    if rng_got != rng_want:
        n = int(np.count_nonzero(np.frombuffer(rng_got, np.uint8)
                                 != np.frombuffer(rng_want, np.uint8)))
        total += n
        notes.append(f"generator state {tuple(got.rng)} != {tuple(want.rng)}")
    return ByteDiff(total, tuple(notes))


@quiet  # (overflow and invalid results are legal values, as in every entry point)
def replay(program: Program, start: Snapshot | State, first: int, end: int, *,
           rng: RngState | None = None,
           forward: dict[OpKind, ForwardRule] = FORWARD) -> State:
    """Run ops ``first:end`` from ``start`` (optionally with another generator state)."""
    state = start.state() if isinstance(start, Snapshot) else start.copy()
    if rng is not None:
        state.rng = rng
    for k in range(first, end):
        execute_op(program, k, state, forward=forward)
    return state


@dataclass(frozen=True)
class BytesResult:
    bytes_differing: int
    failures: tuple[str, ...]  # "segment s: ..." per failing comparison
    comparisons: int

    @property
    def exact(self) -> bool:
        return self.bytes_differing == 0


def check_bytes(ex: Execution, *, forward: dict[OpKind, ForwardRule] = FORWARD,
                run: ReferenceRun | None = None) -> BytesResult:
    """Replay every segment and the whole run from the recorded boundaries.

    The whole run from (B_0, R_0) passes every boundary. A replay depends only on the
    bytes and the generator state it starts from, so while the whole run's state at the
    start of segment s is exactly the recorded (B_s, R_s), replaying segment s from
    (B_s, R_s) is the same computation as continuing the whole run: its state after the
    segment is that replay's result. Only once the whole run has left the recorded
    boundaries (a segment's comparison failed) are the later segments replayed apart,
    each from its own (B_s, R_s). Every comparison is made either way.

    ``run``: the program's plain run from its initial state (``check`` makes it once for
    the references); when that state is exactly the recorded (B_0, R_0), it is the whole
    run, and its states at the segment ends are compared instead of replaying it again;
    otherwise the whole run is made here, from the recorded (B_0, R_0).
    """
    program = ex.program
    bounds = program.segment_bounds()
    snaps = ex.boundaries
    if len(snaps) != len(bounds) + 1:
        raise ValueError(f"execution recorded {len(snaps)} boundaries for {len(bounds)} "
                         "segments (run execute with record_boundaries=True)")
    total, failures = 0, []

    def compare(label: str, lo: int, hi: int, got: State | Snapshot, want: Snapshot) -> bool:
        nonlocal total
        d = diff_states(got, want)
        total += d.bytes
        if not d.exact:
            failures.append(f"{label} (ops {lo}..{hi - 1}): " + "; ".join(d.notes))
        return d.exact

    if run is None or run.start != snaps[0]:  # not the whole run from the recorded start
        run = reference_run(program, snaps[0], forward=forward)
    whole = iter(run.ends)
    on_record = True  # the whole run's state is the recorded boundary of the next segment
    for s, (lo, hi) in enumerate(bounds):
        end = next(whole)  # the whole run's state after segment s
        got = end if on_record else replay(program, snaps[s], lo, hi, forward=forward)
        on_record = compare(f"segment {s}", lo, hi, got, snaps[s + 1]) and on_record
    compare("whole run", 0, len(program.ops), next(whole), ex.final)
    return BytesResult(total, tuple(failures), len(bounds) + 1)


def reference_bytes_verdict(ex: Execution, run: ReferenceRun | None = None) -> Verdict:
    """The ``bytes`` record of the reference (not of an engine: that is
    ``engine_checks.bytes_verdict``): :func:`check_bytes` as a verdict."""
    res = check_bytes(ex, run=run)
    if res.exact:
        return Verdict(Outcome.MATCH, 0.0, f"{res.comparisons} replays exact (bytes and generator)")
    return Verdict(Outcome.DIVERGE, float(res.bytes_differing), "; ".join(res.failures))
