"""The exact planning dynamic program over (sum retained, max temporary, sum time).

Everything here works on dense cost matrices: ``r`` and ``q`` (int64 bytes), ``c`` (float64
time) and ``avail`` (bool), each of shape (segments, 3) with columns in the canonical option
order eager, whole, region. A policy is an int array of column indices.

The peak of a policy is ``P + sum r + max q`` and the planner minimises ``sum c`` subject to
``peak <= M``. Times are summed left to right in segment order, so the time the program
reports for a policy is bit-for-bit the plain sum of its costs in that order.

The dynamic program walks the segments in order and keeps, after each one, a frontier of
partial policies summarised by R (retained bytes so far), Q (max temporary so far) and C
(time so far). Exactness rests on these reductions, none of which can remove an optimal
policy:

* clamping: every policy's max q is at least ``q_floor = max_j min_o q[j, o]``, so every q
  is raised to ``q_floor`` without changing any policy's peak;
* option filtering: an option whose r and q overflow the budget even with the least r of
  every other segment is never feasible; an option that another option of the same segment
  matches or beats in r, q and c at once is never needed;
* dominance: state A dominates B when C_A <= C_B, R_A <= R_B and R_A + Q_A <= R_B + Q_B.
  For any completion adding retained bytes s and max temporary T, the peaks are
  R + s + max(Q, T), and max over T of their difference is max(R_A - R_B, (R_A + Q_A) -
  (R_B + Q_B)); so A's completion is never later, never higher and never retains more.
  This implies, and is stronger than, dominance in (R, Q, C). Dominance on R + Q alone
  would be wrong: a later segment can raise the maximum of one state and not the other;
* budget look-ahead: a state whose R + Q plus the least r of every later segment exceeds
  the budget is dropped;
* time bound (:func:`replayverify.planner.search.solve`): a state whose time plus a lower
  bound on the rest (the linear-programming relaxation of the remaining multiple-choice
  knapsack, per band of the final max temporary, see :class:`_Bound`) exceeds a threshold
  is dropped; a pass is accepted only when that provably lost nothing.

Truncation (``max_frontier``) is the only step that can lose the optimum; it is recorded.
Times are floats: a state's C is the left-to-right sum of its prefix, which is exactly how
:func:`policy_totals` sums a whole policy, and float addition is monotone, so dominance by C
is safe. The bound is compared with a tolerance that covers its own rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

_EPS = float(np.finfo(np.float64).eps)
_QBIG = np.iinfo(np.int64).max
_BLOCK = 1 << 22
"""Largest number of entries the dominance filter materialises at once."""
LAZY = 32
"""Frontiers up to this many states are kept whole: bounding them costs more than it saves."""


class Costs(NamedTuple):
    """Dense cost matrices of one card under one option set and one cost model."""

    r: np.ndarray  # (n, 3) int64 retained bytes
    q: np.ndarray  # (n, 3) int64 temporary bytes
    c: np.ndarray  # (n, 3) float64 time
    avail: np.ndarray  # (n, 3) bool
    persistent: int


@dataclass(frozen=True, slots=True)
class DPResult:
    """What one run of the dynamic program found (``choice`` None: no feasible state).

    ``aborted``: the frontier outgrew the pass's ``limit``; ``choice`` is then the best
    policy known so far (or None), not a proven optimum. ``method`` says what produced the
    answer (``"dp"`` or ``"levels"``) and ``proven`` whether it is optimal.
    """

    choice: np.ndarray | None
    frontier_size: int
    truncated: bool
    pruned: bool
    aborted: bool = False
    method: str = "dp"
    proven: bool = True


def policy_totals(costs: Costs, choice: np.ndarray) -> tuple[float, int]:
    """(time, peak) of a policy: time summed left to right, peak ``P + sum r + max q``."""
    rows = np.arange(len(choice))
    time = 0.0
    for value in costs.c[rows, choice].tolist():
        time += value
    peak = costs.persistent + int(costs.r[rows, choice].sum()) + int(costs.q[rows, choice].max())
    return time, peak


# --- least peak -----------------------------------------------------------------------------


def step_sums(
    seg: np.ndarray, qa: np.ndarray, va: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sum over segments of each segment's least value among its options with q <= t.

    ``seg``, ``qa``, ``va``: one entry per available option (at most three per segment),
    sorted by segment, then increasing q. Returns the options' q in increasing order, the
    running sum of the per-segment step functions at each of them, and how many segments
    have an option at or below it (the sum covers every segment where that count is n).
    """
    run = va.copy()  # running min of va within a segment, options in increasing q
    for k in (1, 2):
        same = seg[k:] == seg[:-k]
        run[k:] = np.where(same, np.minimum(run[k:], va[:-k]), run[k:])
    first = np.ones(len(seg), dtype=bool)
    first[1:] = seg[1:] != seg[:-1]
    delta = run.copy()
    delta[1:] = np.where(first[1:], run[1:], run[1:] - run[:-1])
    ev = np.argsort(qa, kind="stable")
    return qa[ev], np.cumsum(delta[ev]), np.cumsum(first[ev])


def min_peak(costs: Costs) -> tuple[int, np.ndarray] | None:
    """The least peak any policy reaches, and one policy reaching it (None: no policy).

    For a threshold t, the least peak among policies with max q <= t is at most
    ``P + S(t) + t`` where S(t) sums each segment's least r among options with q <= t;
    the minimum over thresholds is exact. S(t) is a sum of per-segment step functions,
    evaluated at every option's q at once by sorting the steps. Among the options below the
    best threshold the witness takes least r, then least c, then the earlier option.
    """
    r, q, c, avail = costs.r, costs.q, costs.c, costs.avail
    n = r.shape[0]
    if not avail.any(axis=1).all():
        return None
    seg, col = np.nonzero(avail)
    qa, ra, ca = q[seg, col], r[seg, col], c[seg, col]
    order = np.lexsort((col, ca, ra, qa, seg))
    qe, total, count = step_sums(seg[order], qa[order], ra[order])
    ends = np.flatnonzero(np.append(qe[1:] != qe[:-1], True))
    ends = ends[count[ends] == n]
    peaks = costs.persistent + total[ends] + qe[ends]
    t = qe[ends[int(np.argmin(peaks))]]
    allowed = avail & (q <= t)
    rr = np.where(allowed, r, _QBIG)
    best_r = allowed & (rr == rr.min(axis=1, keepdims=True))
    cc = np.where(best_r, c, np.inf)
    best = best_r & (cc == cc.min(axis=1, keepdims=True))
    choice = np.argmax(best, axis=1)
    return int(peaks.min()), choice


# --- preprocessing --------------------------------------------------------------------------


def _reduce(costs: Costs, room: int) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Clamp q to q_floor and drop options that can never be needed; None if nothing fits.

    Returns the reduced availability, the clamped q and q_floor.
    """
    r, q, c = costs.r, costs.q, costs.c
    avail = costs.avail.copy()
    while True:
        if not avail.any(axis=1).all():
            return None
        min_r = np.where(avail, r, _QBIG).min(axis=1)
        q_floor = int(np.where(avail, q, _QBIG).min(axis=1).max())
        qc = np.maximum(q, q_floor)
        others = int(min_r.sum()) - min_r
        fits = avail & (r + others[:, None] + qc <= room)
        if (fits == avail).all():
            break
        avail = fits
    # Within-segment dominance: option x goes if some other option y matches or beats it in
    # r, clamped q and c, strictly somewhere or with y earlier in canonical order.
    keep = avail.copy()
    for x in range(3):
        for y in range(3):
            if x == y:
                continue
            le = (r[:, y] <= r[:, x]) & (qc[:, y] <= qc[:, x]) & (c[:, y] <= c[:, x])
            eq = (r[:, y] == r[:, x]) & (qc[:, y] == qc[:, x]) & (c[:, y] == c[:, x])
            beaten = avail[:, y] & avail[:, x] & le & (~eq | (y < x))
            keep[:, x] &= ~beaten
    return keep, qc, q_floor


class _Hulls(NamedTuple):
    """Per segment the lower convex hull of its (r, c) points, from its least-r point."""

    start: np.ndarray  # (n,) option index of the start point
    start_r: np.ndarray  # (n,) int64, 0 where the segment has no allowed option
    start_c: np.ndarray  # (n,) float64, 0 where the segment has no allowed option
    seg: np.ndarray  # per edge: segment
    to: np.ndarray  # per edge: option index at its far end
    rank: np.ndarray  # per edge: 0 for a segment's first edge, 1 for its second
    dr: np.ndarray  # per edge: int64 bytes added (> 0)
    dc: np.ndarray  # per edge: float64 time saved (< 0)


def _hulls(r: np.ndarray, c: np.ndarray, allowed: np.ndarray) -> _Hulls:
    """Hull edges of every segment at once.

    With at most three points a hull has at most two edges; the first goes to the point of
    least slope (ties: the farther one), so a second edge is strictly less steep and a
    segment's edges come in slope order.
    """
    n = r.shape[0]
    rows = np.arange(n)
    live = allowed.any(axis=1)
    rr = np.where(allowed, r, _QBIG)
    first = allowed & (rr == rr.min(axis=1, keepdims=True))
    start = np.argmin(np.where(first, c, np.inf), axis=1)
    at_r = np.where(live, r[rows, start], 0).astype(np.int64)
    at_c = np.where(live, c[rows, start], 0.0)
    start_r, start_c = at_r, at_c
    parts: list[tuple[np.ndarray, ...]] = []
    for rank in range(2):
        ok = live[:, None] & allowed & (r > at_r[:, None]) & (c < at_c[:, None])
        dr = np.where(ok, r - at_r[:, None], 1).astype(np.float64)
        slope = np.where(ok, (c - at_c[:, None]) / dr, np.inf)
        steepest = ok & (slope == slope.min(axis=1, keepdims=True))
        k = np.argmax(np.where(steepest, r, -1), axis=1)
        live = ok.any(axis=1)
        idx = np.flatnonzero(live)
        ki = k[idx]
        parts.append(
            (idx, ki, np.full(len(idx), rank), r[idx, ki] - at_r[idx], c[idx, ki] - at_c[idx])
        )
        at_r = np.where(live, r[rows, k], at_r)
        at_c = np.where(live, c[rows, k], at_c)
    seg, to, rk, dr_, dc_ = (np.concatenate(x) for x in zip(*parts))
    return _Hulls(start, start_r, start_c, seg, to, rk, dr_.astype(np.int64), dc_)


class _Bound:
    """Lower bound on the time of segments i+1..n-1 for states (R, Q) after step i.

    The final max temporary T of any completion is at least Q. Levels split T into bands
    [L_g, L_{g+1}); a completion whose T falls in band g uses only options with
    q < L_{g+1} and has at most ``room - R - max(Q, L_g)`` bytes for its retained sum. The
    linear-programming relaxation of that multiple-choice knapsack (per segment the lower
    convex hull of its (r, c) points, edges taken in order of time saved per byte, the last
    one fractionally) bounds the band; a state's bound is the least over the bands T can
    reach. With at most ``max_bands`` distinct levels each level is its own band.

    Evaluating a piece of the convex relaxation other than the right one gives a smaller
    value (each piece's line supports the function), so the bound stays valid even where
    rounding misplaces a state between pieces; only feasibility (bytes left >= 0) needs
    exact integers, and gets them.
    """

    def __init__(
        self, r: np.ndarray, c: np.ndarray, qc: np.ndarray, avail: np.ndarray, max_bands: int = 32
    ):
        n = r.shape[0]
        levels = np.unique(qc[avail])
        if len(levels) > max_bands:
            pick = np.linspace(0, len(levels) - 1, max_bands).round().astype(np.int64)
            levels = levels[np.unique(pick)]
        self.levels = levels.astype(np.int64)
        self.tops = np.append(levels[1:], _QBIG).astype(np.int64)
        g_count = len(levels)
        self.r0 = np.zeros((g_count, n + 1), dtype=np.int64)
        self.c0 = np.zeros((g_count, n + 1))
        self.lack = np.zeros((g_count, n + 1), dtype=np.int64)
        segs, drs, dcs, bands = [], [], [], []
        for g in range(g_count):
            allowed = avail & (qc < self.tops[g])
            h = _hulls(r, c, allowed)
            self.r0[g, :n] = np.cumsum(h.start_r[::-1])[::-1]
            self.c0[g, :n] = np.cumsum(h.start_c[::-1])[::-1]
            self.lack[g, :n] = np.cumsum((~allowed.any(axis=1))[::-1])[::-1]
            segs.append(h.seg)
            drs.append(h.dr)
            dcs.append(h.dc)
            bands.append(np.full(len(h.seg), g))
        seg, dr, dc, band = (np.concatenate(x) for x in (segs, drs, dcs, bands))
        slope = dc / dr.astype(np.float64) if len(dr) else dc
        order = np.lexsort((seg, slope, band))  # per band, steepest saving per byte first
        self.seg, self.dr, self.dc = seg[order], dr[order].astype(np.int64), dc[order]
        self.slope = np.append(slope[order], 0.0)
        self.edges = np.searchsorted(band[order], np.arange(g_count + 1))
        by_seg = np.argsort(self.seg, kind="stable")
        self._by_seg = by_seg
        self._seg_edges = np.searchsorted(self.seg[by_seg], np.arange(n + 1))
        self._reset()

    def _reset(self) -> None:
        self._dr, self._dc, self._done = self.dr.copy(), self.dc.copy(), -1

    def evaluate(self, i: int, R: np.ndarray, Q: np.ndarray, room: int) -> np.ndarray:
        """Bound on the time of segments after step i for each state (inf: cannot fit).

        Calls within one pass come with non-decreasing i: the edges of segments already
        walked are zeroed in place rather than masked anew at every step.
        """
        if i < self._done:
            self._reset()
        if i > self._done:
            gone = self._by_seg[self._seg_edges[self._done + 1] : self._seg_edges[i + 1]]
            self._dr[gone], self._dc[gone] = 0, 0.0
            self._done = i
        # Bands a state can still reach form a suffix: higher bands admit more options.
        usable = np.flatnonzero((self.lack[:, i + 1] == 0) & (self.tops > Q.min()))
        if len(usable) == 0:
            return np.full(len(R), np.inf)
        first = int(self.edges[usable[0]])
        cum_r = np.concatenate(([0], np.cumsum(self._dr[first:])))
        cum_c = np.concatenate(([0.0], np.cumsum(self._dc[first:])))
        lo, hi = self.edges[usable] - first, self.edges[usable + 1] - first
        extra = (
            room - R[None, :] - np.maximum(Q[None, :], self.levels[usable, None])
            - self.r0[usable, i + 1, None]
        )  # fmt: skip
        k = np.empty(extra.shape, dtype=np.int64)
        for row, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
            # number of this band's edges taken whole; edges already walked add nothing
            k[row] = a + np.searchsorted(cum_r[a + 1 : b + 1], extra[row] + cum_r[a], "right")
        base_r, base_c = cum_r[lo, None], cum_c[lo, None]
        slope = self.slope[first:]
        part = np.where(k < hi[:, None], (extra - (cum_r[k] - base_r)) * slope[k], 0.0)
        value = self.c0[usable, i + 1, None] + (cum_c[k] - base_c) + part
        ok = (extra >= 0) & (Q[None, :] < self.tops[usable, None])
        return np.where(ok, value, np.inf).min(axis=0)


# --- the frontier ---------------------------------------------------------------------------


def _pareto(R: np.ndarray, S: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Indices of the states that no other state matches or beats in R, S and C at once,
    sorted by (R, S, C); of exact duplicates the one with the smallest index is kept.

    After sorting by (R, S, C, index), state j is dominated iff some earlier state i has
    S_i <= S_j and C_i <= C_j. The states are cut, in order of S, into about sqrt(m) groups
    of equal size. For j, earlier states in lower groups are covered by a running minimum of
    C per group followed by a minimum across groups (a groups x m array); earlier states in
    j's own group by comparing the group's members pairwise (groups x size x size). Both are
    O(m^1.5), whatever the number of distinct S values.
    """
    m = len(R)
    order = np.lexsort((np.arange(m), C, S, R))
    if m <= 1:
        return order
    S, C = S[order], C[order]
    by_s = np.lexsort((np.arange(m), S))  # positions in order of S (ties: earlier first)
    size = int(np.ceil(np.sqrt(m)))
    groups = -(-m // size)
    group = np.empty(m, dtype=np.int64)
    group[by_s] = np.arange(m) // size
    dominated = np.zeros(m, dtype=bool)
    carry = np.full(m, np.inf)  # least C among states <= j in the groups already done
    step = max(1, _BLOCK // m)
    for g0 in range(0, groups, step):
        g1 = min(groups, g0 + step)
        # Earlier states in strictly lower groups.
        mine = (group >= g0) & (group < g1)
        own = np.full((g1 - g0, m), np.inf)
        own[group[mine] - g0, np.flatnonzero(mine)] = C[mine]
        run = np.minimum.accumulate(own, axis=1)
        run = np.minimum.accumulate(np.vstack((carry[None, :], run)), axis=0)
        idx = np.flatnonzero(mine & (np.arange(m) > 0))
        dominated[idx] = run[group[idx] - g0, idx - 1] <= C[idx]
        carry = run[-1]
        # Earlier states in the same group, pairwise (a group's last row may be short).
        members = np.full((g1 - g0) * size, m, dtype=np.int64)
        chunk = by_s[g0 * size : g1 * size]
        members[: len(chunk)] = chunk
        members = members.reshape(g1 - g0, size)
        valid = members < m
        at = np.minimum(members, m - 1)
        s_ = S[at]
        c_ = np.where(valid, C[at], np.inf)
        beats = (
            valid[:, :, None]
            & (members[:, :, None] < members[:, None, :])
            & (s_[:, :, None] <= s_[:, None, :])
            & (c_[:, :, None] <= c_[:, None, :])
        )
        hit = beats.any(axis=1) & valid
        dominated[members[hit]] = True
    return order[~dominated]


class Problem:
    """One card, cost model and budget, preprocessed once for repeated DP passes."""

    def __init__(self, costs: Costs, budget: int):
        self.costs = costs
        self.n = costs.r.shape[0]
        self.room = budget - costs.persistent
        reduced = _reduce(costs, self.room) if self.room >= 0 else None
        self.empty = reduced is None
        if reduced is None:
            return
        self.avail, self.qc, self.q_floor = reduced
        min_r = np.where(self.avail, costs.r, _QBIG).min(axis=1)
        self.r_after = np.concatenate((np.cumsum(min_r[::-1])[::-1], [0]))
        self._lp: _Bound | None = None
        self._lp_rough: _Bound | None = None
        total_c = float(np.where(costs.avail, costs.c, 0.0).max(axis=1).sum())
        self.tol = 16.0 * (self.n + 8) * _EPS * total_c

    @property
    def lp(self) -> _Bound:
        """The time bound (32 bands), built at first use."""
        if self._lp is None:
            self._lp = _Bound(self.costs.r, self.costs.c, self.qc, self.avail)
        return self._lp

    @property
    def lp_rough(self) -> _Bound:
        """The cheaper time bound (four bands), built at first use."""
        if self._lp_rough is None:
            self._lp_rough = _Bound(self.costs.r, self.costs.c, self.qc, self.avail, max_bands=4)
        return self._lp_rough

    def root_bound(self) -> float:
        """A lower bound on the time of every feasible policy (inf when none can fit)."""
        if self.empty:
            return float("inf")
        zero = np.zeros(1, dtype=np.int64)
        return float(self.lp.evaluate(-1, zero, zero + self.q_floor, self.room)[0])

    def run(
        self,
        *,
        max_frontier: int | None = None,
        upper: float | None = None,
        rough: bool = False,
        limit: int | None = None,
        work: int | None = None,
    ) -> DPResult:
        """One DP pass: least-time policy with peak <= budget (ties: least peak, then least
        retained bytes).

        With ``upper`` set, a frontier larger than ``LAZY`` states drops those whose time
        plus bound exceeds ``upper``; ``pruned`` records whether any went. A pass that drops
        none, or whose best time is <= ``upper``, is exact. ``max_frontier`` keeps, at each
        step, the states with the least time plus bound and marks the result truncated
        when it had to. ``rough`` uses a cheaper, looser bound (four bands). ``limit``
        stops the pass (``aborted``) as soon as a frontier holds more states, or the
        frontiers walked so far hold more than ``work`` states in all.
        """
        if self.empty:
            return DPResult(None, 0, False, False)
        n, room, r, c, qc = self.n, self.room, self.costs.r, self.costs.c, self.qc
        R = np.zeros(1, dtype=np.int64)
        Q = np.full(1, self.q_floor, dtype=np.int64)
        C = np.zeros(1)
        parents: list[np.ndarray] = []
        picks: list[np.ndarray] = []
        largest, truncated, pruned, held = 1, False, False, 0
        lp = self.lp_rough if rough else self.lp
        for i in range(n):
            ks = np.flatnonzero(self.avail[i])
            f = len(R)
            nR = (R[None, :] + r[i, ks][:, None]).reshape(-1)
            nQ = np.maximum(Q[None, :], qc[i, ks][:, None]).reshape(-1)
            nC = (C[None, :] + c[i, ks][:, None]).reshape(-1)
            keep = np.flatnonzero(nR + nQ + self.r_after[i + 1] <= room)
            promise = None
            if (upper is not None and len(keep) > LAZY) or (
                max_frontier is not None and len(keep) > max_frontier
            ):
                promise = nC[keep] + lp.evaluate(i, nR[keep], nQ[keep], room)
                if upper is not None and len(keep) > LAZY:
                    ok = promise <= upper + self.tol
                    if not ok.all():
                        pruned = True
                        keep, promise = keep[ok], promise[ok]
            front = _pareto(nR[keep], nR[keep] + nQ[keep], nC[keep])
            keep = keep[front]
            if promise is not None:
                promise = promise[front]
            if max_frontier is not None and len(keep) > max_frontier:
                truncated = True
                best = np.lexsort((np.arange(len(keep)), promise))[:max_frontier]
                keep = keep[np.sort(best)]
            held += len(keep)
            if (limit is not None and len(keep) > limit) or (work is not None and held > work):
                return DPResult(None, max(largest, len(keep)), truncated, pruned, True)
            R, Q, C = nR[keep], nQ[keep], nC[keep]
            parents.append(keep % f)
            picks.append(ks[keep // f])
            largest = max(largest, len(keep))
            if len(keep) == 0:
                return DPResult(None, largest, truncated, pruned)
        at = np.lexsort((R, R + Q, C))[0]
        choice = np.empty(n, dtype=np.int64)
        for i in range(n - 1, -1, -1):
            choice[i] = picks[i][at]
            at = parents[i][at]
        return DPResult(choice, largest, truncated, pruned)


def frontier_dp(
    costs: Costs,
    budget: int,
    *,
    max_frontier: int | None = None,
    upper: float | None = None,
) -> DPResult:
    """One DP pass on a fresh :class:`Problem` (see :meth:`Problem.run`)."""
    return Problem(costs, budget).run(max_frontier=max_frontier, upper=upper)
