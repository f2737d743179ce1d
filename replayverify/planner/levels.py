"""Exact planning where the dynamic program's frontier grows: levels and reduced costs.

The DP of :mod:`replayverify.planner.dp` keeps every partial policy that its bound cannot
rule out. On cards whose time saved is (nearly) proportional to the bytes retained, that
bound is flat: every partial policy that can still fill the budget looks equally good, and
the frontier grows with the number of distinct byte sums. This module solves the same model
(minimise ``sum c`` subject to ``P + sum r + max q <= M``) another way.

* Levels. A policy whose largest (clamped) temporary is T fits iff ``sum r <= M - P - T``.
  So the optimum is the least, over the distinct temporaries T, of F(T): the least time of
  a policy using only options with q <= T and retaining at most ``W(T) = M - P - T``
  bytes. (A policy with max q below T is counted in F(T) with less room than it has, never
  with more; it is counted exactly at its own level.)
* Lagrangian bound. For any mu >= 0 and any policy x at level T,
  ``sum c(x) >= L(mu) + sum_j d_j(x_j)`` where ``v_jo = c_jo + mu r_jo``,
  ``L(mu) = sum_j min_o v_jo - mu W(T)`` and ``d_jo = v_jo - min_o v_jo >= 0`` (the reduced
  cost). mu is taken at the break edge of the level's linear relaxation (per segment the
  lower convex hull of its (r, c) points, edges in order of time saved per byte), where
  L(mu) equals the relaxation's value.
* Reduced-cost fixing. With an incumbent policy of time U, a policy faster than U uses no
  option with ``d_jo > U - L``. Usually few segments keep more than one option; the level
  is then solved exactly over those by a meet-in-the-middle search (two halves enumerated
  with their (bytes, time) Pareto sets, each half's best partner found by binary search).
  Where too many segments stay free, a search over a small core of them (the segments
  whose hull edges lie nearest the relaxation's break edge, the others fixed at the
  relaxation's rounded-down solution) improves U first; a better U fixes more. If that
  still leaves too many, the DP runs on the level with the surviving options, and if its
  frontier grows past its limit the result is reported as not proven optimal.
* Order. Levels are visited in order of a cheap bound (L at one mu for every level at
  once, by one sorted sweep) and the search stops when the next cheap bound is within the
  tolerance of U.

Floating point: the bound is a float sum; a level or an option is dismissed only when its
bound exceeds U by more than ``16 (n + 8) eps`` times the magnitude of the sums, so the
answer is optimal up to that tolerance (relative ~1e-12), not bit for bit as the DP's. Ties
between policies of equal time are not broken by peak as the DP breaks them; the answer is
still a deterministic function of the card and the budget.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from replayverify.planner.dp import _EPS, Costs, Problem, _hulls, policy_totals, step_sums

MITM_STATES = 1 << 20
"""Most states one half of the meet-in-the-middle search may hold."""
CORE_BITS = (20, 28, 36, 40)
"""Sizes of the heuristic cores tried in turn while too many segments stay free, as log2 of
their option combinations (a half of the search holds at most the square root)."""


class LevelBound(NamedTuple):
    lb: float  # L(mu): no policy at this level is faster
    mu: float  # time saved per byte at the relaxation's break edge
    x0: np.ndarray  # the relaxation rounded down: a feasible policy at this level
    d: np.ndarray  # (n, 3) reduced costs, inf where not allowed
    tol: float  # rounding allowance for comparisons with lb and d
    room: int  # W(T)
    near: np.ndarray  # segments by how close their hull edges lie to the break edge


class LevelsResult(NamedTuple):
    choice: np.ndarray | None
    proven: bool
    largest: int  # largest state set held (a meet-in-the-middle half or a DP frontier)


def _tolerance(n: int, magnitude: float) -> float:
    return 16.0 * (n + 8) * _EPS * magnitude


def level_bound(prob: Problem, level: int) -> LevelBound | None:
    """The Lagrangian bound of one level (None: no policy fits with max temporary ``level``)."""
    r, c = prob.costs.r, prob.costs.c
    allowed = prob.avail & (prob.qc <= level)
    if not allowed.any(axis=1).all():
        return None
    room = prob.room - int(level)
    h = _hulls(r, c, allowed)
    base = int(h.start_r.sum())
    if base > room:
        return None
    slope = h.dc / h.dr.astype(np.float64)
    order = np.lexsort((h.rank, h.seg, slope))  # most time saved per byte first
    cum = np.cumsum(h.dr[order])
    k = int(np.searchsorted(cum, room - base, side="right"))
    mu = -float(slope[order[k]]) if k < len(order) else 0.0
    x0 = h.start.copy()
    taken = order[:k]
    for rank in (0, 1):  # a segment's second edge is taken only after its first
        sel = taken[h.rank[taken] == rank]
        x0[h.seg[sel]] = h.to[sel]
    v = np.where(allowed, c + mu * r.astype(np.float64), np.inf)
    mins = v.min(axis=1)
    lb = float(mins.sum() - mu * room)
    tol = _tolerance(len(mins), float(np.abs(mins).sum() + mu * abs(room)))
    # the classic core: edges either side of the break, taken and not taken alike, so that
    # the bytes a search over them can add or remove straddle what the rounding left over
    dist = np.full(len(mins), np.iinfo(np.int64).max)
    np.minimum.at(dist, h.seg[order], np.abs(np.arange(len(order)) - k))
    near = np.lexsort((np.arange(len(mins)), dist))
    return LevelBound(lb, mu, x0, v - mins[:, None], tol, room, near)


def cheap_bounds(prob: Problem, levels: np.ndarray, mu: float) -> tuple[np.ndarray, float]:
    """L(mu) at every level at once (inf where a segment has no option or bytes overflow),
    and the tolerance that covers its rounding.

    Per segment, min over options with q <= T of ``c + mu r`` is a step function of T; the
    steps of all segments are summed in one sort (:func:`dp.step_sums`, as :func:`dp.min_peak`
    does for bytes).
    """
    r, c, avail, qc = prob.costs.r, prob.costs.c, prob.avail, prob.qc
    n = r.shape[0]
    v = c + mu * r.astype(np.float64)
    out = np.zeros(len(levels))
    mag = 0.0
    for vals in (v, r.astype(np.float64)):
        seg, col = np.nonzero(avail)
        qa, va = qc[seg, col], vals[seg, col]
        order = np.lexsort((va, qa, seg))
        va = va[order]
        qe, total, count = step_sums(seg[order], qa[order], va)
        pos = np.searchsorted(qe, levels, side="right") - 1
        ok = (pos >= 0) & (count[np.maximum(pos, 0)] == n)
        sums = np.where(ok, total[np.maximum(pos, 0)], np.inf)
        if vals is v:
            out = sums - mu * (prob.room - levels.astype(np.float64))
            mag = float(np.abs(va).sum() + mu * abs(prob.room))
        else:  # least bytes at this level: the level is empty when they overflow its room
            out = np.where(sums > prob.room - levels.astype(np.float64), np.inf, out)
    return out, _tolerance(n, mag)


class _Half(NamedTuple):
    R: np.ndarray  # int64 bytes, increasing
    C: np.ndarray  # float64 time, strictly decreasing
    code: np.ndarray  # int64: options of the half's segments, base 3, first segment highest


def _enumerate(r: np.ndarray, c: np.ndarray, opts: list[np.ndarray], cap: int) -> _Half | None:
    """Pareto set (bytes up, time down) of all option combinations of some segments with at
    most ``cap`` bytes; None when it outgrows :data:`MITM_STATES`."""
    R = np.zeros(1, dtype=np.int64)
    C = np.zeros(1)
    code = np.zeros(1, dtype=np.int64)
    for j, ks in enumerate(opts):
        R = (R[:, None] + r[j, ks][None, :]).reshape(-1)
        C = (C[:, None] + c[j, ks][None, :]).reshape(-1)
        code = (code[:, None] * 3 + ks[None, :]).reshape(-1)
        fit = R <= cap
        R, C, code = R[fit], C[fit], code[fit]
        order = np.lexsort((code, C, R))
        R, C, code = R[order], C[order], code[order]
        best = np.minimum.accumulate(C)
        keep = np.ones(len(C), dtype=bool)
        keep[1:] = C[1:] < best[:-1]
        R, C, code = R[keep], C[keep], code[keep]
        if len(R) > MITM_STATES:
            return None
    return _Half(R, C, code)


def best_combination(
    r: np.ndarray, c: np.ndarray, segs: np.ndarray, opts: list[np.ndarray], cap: int
) -> tuple[np.ndarray, int] | bool | None:
    """Least-time choice of options for segments ``segs`` (``opts[i]``: the allowed option
    indices of ``segs[i]``) retaining at most ``cap`` bytes, exactly, by meet in the middle.

    Returns (options, states held), None when no combination fits, False when a half
    outgrew :data:`MITM_STATES`.
    """
    if cap < 0:
        return None
    sizes = np.array([math.log(len(o)) for o in opts])
    half = int(np.searchsorted(np.cumsum(sizes), sizes.sum() / 2.0)) if len(opts) else 0
    rr, cc = r[segs], c[segs]
    a = _enumerate(rr[:half], cc[:half], opts[:half], cap)
    b = _enumerate(rr[half:], cc[half:], opts[half:], cap)
    if a is None or b is None:
        return False
    idx = np.searchsorted(b.R, cap - a.R, side="right") - 1
    ok = np.flatnonzero(idx >= 0)
    if len(ok) == 0:
        return None
    total = a.C[ok] + b.C[idx[ok]]
    at = int(ok[int(np.argmin(total))])
    out = np.empty(len(segs), dtype=np.int64)
    for word, lo, hi in ((int(a.code[at]), 0, half), (int(b.code[idx[at]]), half, len(segs))):
        for i in range(hi - 1, lo - 1, -1):
            out[i], word = word % 3, word // 3
    return out, len(a.R) + len(b.R)


class _Search:
    """State of one levels search: the incumbent and what was proven."""

    def __init__(self, prob: Problem, choice: np.ndarray):
        self.prob = prob
        self.choice = choice
        self.time = policy_totals(prob.costs, choice)[0]
        self.proven = True
        self.largest = 1

    def offer(self, choice: np.ndarray) -> None:
        """Take ``choice`` when it is strictly faster than the incumbent (and fits)."""
        time, peak = policy_totals(self.prob.costs, choice)
        assert peak - self.prob.costs.persistent <= self.prob.room, "levels: over budget"
        if time < self.time:
            self.choice, self.time = choice.copy(), time

    def _combine(self, base: np.ndarray, segs: np.ndarray, opts: list[np.ndarray], room: int):
        r, c = self.prob.costs.r, self.prob.costs.c
        fixed = np.ones(len(base), dtype=bool)
        fixed[segs] = False
        rows = np.flatnonzero(fixed)
        cap = room - int(r[rows, base[rows]].sum())
        found = best_combination(r, c, segs, opts, cap)
        if found is None or found is False:
            return found
        picks, held = found
        self.largest = max(self.largest, held)
        choice = base.copy()
        choice[segs] = picks
        self.offer(choice)
        return True

    def level(self, level: int, b: LevelBound) -> None:
        """Solve one level: afterwards no policy at it is faster than the incumbent by more
        than the tolerance, or ``proven`` is cleared."""
        self.offer(b.x0)
        for size in (*CORE_BITS, None):
            gap = self.time - b.lb
            if gap <= b.tol:
                return
            free = b.d <= gap + b.tol
            counts = free.sum(axis=1)
            multi = np.flatnonzero(counts >= 2)
            # every segment keeps x0's option (reduced cost 0 up to rounding), so the rest
            # are fixed at their single surviving option
            base = np.where(counts >= 2, b.x0, np.argmax(free, axis=1))
            opts = [np.flatnonzero(free[j]) for j in multi]
            bits = sum(math.log2(len(o)) for o in opts)
            if bits <= 2 * math.log2(MITM_STATES) - 2:
                if self._combine(base, multi, opts, b.room) is not False:
                    return
            if size is None:
                break
            # heuristic core: the free segments whose hull edges lie nearest the break
            is_multi = np.zeros(len(base), dtype=bool)
            is_multi[multi] = True
            ranked = b.near[is_multi[b.near]]
            bits_each = np.log2(counts[ranked])
            core = np.sort(
                ranked[: max(1, int(np.searchsorted(np.cumsum(bits_each), size, side="right")))]
            )
            base = b.x0.copy()
            self._combine(base, core, [np.flatnonzero(free[j]) for j in core], b.room)
        self._dp(b)

    def _dp(self, b: LevelBound) -> None:
        """The frontier DP on the segments that keep several options after reduced-cost
        fixing at this level; the others are fixed at their single surviving option."""
        costs = self.prob.costs
        free = b.d <= self.time - b.lb + b.tol
        multi = np.flatnonzero(free.sum(axis=1) >= 2)
        base = np.where(free.sum(axis=1) >= 2, b.x0, np.argmax(free, axis=1))
        rows = np.flatnonzero(free.sum(axis=1) < 2)
        cap = b.room - int(costs.r[rows, base[rows]].sum())
        fixed_time = float(costs.c[rows, base[rows]].sum())
        if cap < 0:
            return
        r, c, sub_free = costs.r[multi], costs.c[multi], free[multi]
        sub = Problem(Costs(r, np.zeros_like(r), c, sub_free, 0), cap)
        res = sub.run(upper=self.time - fixed_time + b.tol, limit=LEVEL_FRONTIER)
        self.largest = max(self.largest, res.frontier_size)
        if res.aborted:
            self.proven = False
        elif res.choice is not None:
            choice = base.copy()
            choice[multi] = res.choice
            self.offer(choice)


LEVEL_FRONTIER = 1 << 14
"""Frontier at which the DP on one level gives up (the answer is then not proven)."""


def solve_levels(prob: Problem, incumbent: np.ndarray) -> LevelsResult:
    """Least-time policy of ``prob`` (up to the tolerance), starting from a feasible one."""
    search = _Search(prob, incumbent)
    levels = np.unique(prob.qc[prob.avail])
    top = int(prob.qc[np.arange(prob.n), incumbent].max())
    start = level_bound(prob, top)
    mu = start.mu if start is not None else 0.0
    cheap, tol = cheap_bounds(prob, levels, mu)
    for at in np.argsort(cheap, kind="stable").tolist():
        if not cheap[at] < search.time - tol:
            break
        b = level_bound(prob, int(levels[at]))
        if b is None or b.lb >= search.time - b.tol:
            continue
        search.level(int(levels[at]), b)
    return LevelsResult(search.choice, search.proven, search.largest)
