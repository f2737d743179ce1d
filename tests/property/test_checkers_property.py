"""Property tests: the three derivative references agree with each other and with sympy,
and correct generated programs never diverge, error or miss a control."""

from __future__ import annotations

import itertools

import mpmath
import numpy as np
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from replayverify.programs import OpKind, Program, execute, generate, initial_state, layouts
from replayverify.programs.arrays import as_slices, diagonal_seeds, ranks
from replayverify.programs.interpreter import scatter_winners
from replayverify.verifier.check import check_program
from replayverify.verifier.complex_step import complex_step
from replayverify.verifier.forward_jacobian import forward_jacobian
from replayverify.verifier.records import tolerance

FAMILIES = ("default", "derivative", "bytes", "alias", "complex", "mixed", "hazard")
indices = st.integers(min_value=0, max_value=2**20)  # shrinks towards program 0


def symbolic_gradient(program: Program, ex) -> np.ndarray:
    """Interpret a float64 program on sympy symbols (one per input element) and
    differentiate L exactly; index values and random draws come from the recorded run."""
    lay = layouts(program)
    state = initial_state(program)
    words = {}  # (buffer, word) -> expression
    for name, buf in state.buffers.items():
        vals = np.frombuffer(buf.tobytes()[: buf.size // 8 * 8], "<f8")
        for w, v in enumerate(vals):
            words[name, w] = sp.Rational(float(v)) if np.isfinite(v) else sp.nan
    symbols, at = [], {}
    for name in program.inputs:
        lo = lay[name]
        for j, s in enumerate(lo.starts):
            sym = sp.Symbol(f"{name}_{j}")
            at[sym] = words[lo.view.buffer, int(s) // 8]
            words[lo.view.buffer, int(s) // 8] = sym
            symbols.append(sym)

    def read(name):
        lo = lay[name]
        return [words[lo.view.buffer, int(s) // 8] for s in lo.starts]

    def coef(op, name):
        return sp.Rational(float(np.float64(op.coef(name))))

    for rec in ex.records:
        op = rec.op
        if not rec.float_op:
            continue
        x = read(op.x)
        out, where = None, None
        if op.kind is OpKind.AXPBY:
            y = read(op.y)
            out = [(coef(op, "a") * u + coef(op, "b") * v) + coef(op, "c") for u, v in zip(x, y)]
        elif op.kind is OpKind.MUL:
            out = [u * v for u, v in zip(x, read(op.y))]
        elif op.kind is OpKind.TANH:
            out = [sp.tanh(coef(op, "a") * u) for u in x]
        elif op.kind is OpKind.SIN:
            out = [sp.sin(coef(op, "a") * u) for u in x]
        elif op.kind is OpKind.COPY:
            out = x
        elif op.kind is OpKind.NOISE:
            out = [u + coef(op, "sigma") * sp.Rational(float(z))
                   for u, z in zip(x, rec.draws.reshape(-1))]
        elif op.kind is OpKind.DROPOUT:
            out = [u * sp.Rational(float(m)) / coef(op, "keep")
                   for u, m in zip(x, rec.draws.reshape(-1))]
        elif op.kind is OpKind.GATHER:
            out = [x[int(i) % len(x)] for i in rec.operands["index"].reshape(-1)]
        elif op.kind is OpKind.SCATTER:
            where, src = scatter_winners(rec.operands["index"], rec.dst_size)
            out = [x[int(j)] for j in src]
        dst = lay[op.dst]
        starts = dst.starts if where is None else dst.starts[where]
        for s, e in zip(starts, out):
            words[dst.view.buffer, int(s) // 8] = e

    L = sum(sp.Rational(float(w)) * e for w, e in zip(program.loss.weights,
                                                          read(program.loss.view)))
    if not isinstance(L, sp.Basic):
        return np.zeros(len(symbols))
    grads = [sp.diff(L, s) for s in symbols]
    with mpmath.workdps(40):
        f = sp.lambdify(symbols, grads, modules="mpmath")
        vals = f(*[mpmath.mpf(sp.Rational(v).p) / mpmath.mpf(sp.Rational(v).q)
                   for v in at.values()])
        return np.array([float(v) for v in vals], dtype=np.float64)


def within(g, g_ref, program) -> bool:
    tol = tolerance("float64", len(program.ops), g_ref)
    return g.shape == g_ref.shape and bool(np.all(np.abs(g - g_ref) <= tol))


@settings(max_examples=20)
@given(index=indices, family=st.sampled_from(("complex", "default")),
       n_ops=st.sampled_from((4, 6, 8)))
def test_all_references_agree_with_sympy(index, family, n_ops):
    p = generate(7, index, family=family, dims=(4,), n_ops=(n_ops,), dtypes=("float64",),
                 int_writes=False)
    ex = execute(p)
    if not ex.admission.supported or not len(p.inputs):
        return
    exact = symbolic_gradient(p, ex)
    vg = ex.gradient
    fj = forward_jacobian(p).gradient
    cs = complex_step(p).gradient
    for name, g in (("version graph", vg), ("forward Jacobian", fj), ("complex step", cs)):
        assert within(g, exact, p), (name, g, exact)


@settings(max_examples=30)
@given(index=indices, family=st.sampled_from(FAMILIES))
def test_correct_programs_never_fail_a_check(index, family):
    p = generate(3, index, family=family)
    records = check_program(p, engines=())
    assert len(records) == 5
    bad = [(r.check, r.outcome, r.detail) for r in records if r.failing]
    assert not bad, (p.name, bad)
    fj = next(r for r in records if r.check == "forward-jacobian")
    assert (fj.outcome == "unsupported") == (not execute(p).admission.supported)


@settings(max_examples=25)
@given(index=indices, family=st.sampled_from(("complex", "derivative")))
def test_forward_jacobian_and_complex_step_agree(index, family):
    p = generate(11, index, family=family)
    fj = forward_jacobian(p).gradient
    cs = complex_step(p).gradient
    assert within(cs, fj, p)
    # the hazard the derivative family guarantees: the final-storage control is detected
    if family == "derivative":
        rec = check_program(p, engines=(), checks=["control:final-storage"])[0]
        assert rec.outcome == "detected", rec.detail


@given(st.lists(st.integers(0, 12), max_size=30), st.lists(st.integers(0, 30), max_size=5))
def test_plan_parts_are_slices_exactly_when_consecutive(values, cuts):
    """as_slices (the references' plans read rows as slices): each part is the slice it
    equals when its ids ascend by one, else the part itself."""
    ids = np.asarray(values, np.intp)
    bounds = [0, *sorted(min(c, ids.size) for c in cuts), ids.size]
    for (a, b), part in zip(itertools.pairwise(bounds), as_slices(ids, bounds)):
        want = ids[a:b]
        if b > a and np.array_equal(want, np.arange(want[0], want[0] + want.size)):
            assert part == slice(int(want[0]), int(want[0]) + want.size)
        else:
            assert isinstance(part, np.ndarray) and np.array_equal(part, want)


@given(st.lists(st.integers(0, 4095), max_size=40), st.sampled_from((4096, 2**40)))
def test_ranks_are_np_unique_with_inverse(values, span):
    """ranks (the forward Jacobian's addresses, a read set's union of bytes): the distinct
    keys and each key's rank, as np.unique gives them, on the bitmap (span 4096: never
    more than 8 per key + 4096) and on the sort (a span far wider than the keys)."""
    keys = np.asarray(values, np.int64)
    distinct, at = ranks(keys, span)
    want, inverse = np.unique(keys, return_inverse=True)
    assert np.array_equal(distinct, want) and np.array_equal(at, inverse.reshape(-1))


@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 6), st.integers(1, 4)),
                max_size=4),
       st.lists(st.integers(0, 9), max_size=3))
def test_diagonal_seeds_write_what_the_part_by_part_seed_writes(spans, ragged):
    """The references' seeds: when diagonal_seeds gives slices, writing ones there into
    fresh zeros gives the arrays the part-by-part seed gives (each part zeroes its rows,
    then puts a one at (row j, first + j)); parts with positions give None."""
    parts = [(a, slice(r, r + n)) for a, r, n in spans]
    if ragged:  # positions, not a slice
        parts.append(("a", np.asarray(ragged, np.intp)))
    rows = {a: 16 for a in "ab"}
    n_cols = sum(np.arange(16)[r].size for _, r in parts)
    want = {a: np.zeros((rows[a], n_cols)) for a in rows}
    first = 0
    for a, r in parts:
        at = np.arange(16)[r]
        want[a][at] = 0.0
        want[a][at, first + np.arange(at.size)] = 1.0
        first += at.size
    seeds = diagonal_seeds(parts, n_cols)
    if seeds is None:
        assert ragged or any(a == b and r.start < s.stop and s.start < r.stop
                             for (i, (a, r)), (j, (b, s)) in itertools.product(
                                 enumerate(parts), repeat=2) if i != j)
        return
    assert not ragged
    got = {a: np.zeros((rows[a], n_cols)) for a in rows}
    for (a, _), at in zip(parts, seeds):
        got[a].reshape(-1)[at] = 1.0
    for a in rows:
        assert np.array_equal(got[a], want[a])
