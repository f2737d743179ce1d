"""Adding an op is guarded (issue 27): a new ``OpKind`` fails here until the generator
weighs and emits it, the Hypothesis strategies draw it, and the cohort translates it or
names why not. (The interpreter's, tangent and byte tables are checked in test_ops.py and
test_checkers.py.)

The generator's tables are not derived from ``OP_SPECS`` on purpose: their weights are
data, their order is part of every seed's draws (reordering changes every generated
program), and each kind needs its own operand code in the builders; deriving membership
would let a new kind in with no such code.
"""

from __future__ import annotations

import importlib

import pytest

from replayverify.programs.model import OP_SPECS, DtypeRule, OpKind, ShapeRule


def category(kind: OpKind) -> str:
    """Which generator table ``kind`` belongs in, from its OP_SPECS entry."""
    spec = OP_SPECS[kind]
    if spec.dtypes is DtypeRule.INT:
        return "int"
    if spec.draws is not None:
        return "draw"
    if spec.shape is not ShapeRule.ELEMENTWISE:
        return "index"
    return "float"


def test_every_op_kind_has_a_weight_in_exactly_the_generator_table_its_spec_asks_for():
    g = importlib.import_module("replayverify.programs.generate")

    tables = {"float": g.FLOAT_KINDS, "draw": g.DRAW_KINDS, "index": g.INDEX_KINDS,
              "int": g.INT_KINDS}
    for kind in OpKind:
        holders = [name for name, table in tables.items() if kind in table]
        assert holders == [category(kind)], (kind, holders)
    assert set(g.DTYPE_MIX_WEIGHTS.kinds) == set(OpKind)


@pytest.mark.parametrize("family", ["default", "mixed"])
def test_the_generator_emits_every_op_kind(family):
    from replayverify.programs.generate import generate

    seen = {op.kind for i in range(40) for op in generate(0, i, family).ops}
    assert seen == set(OpKind), set(OpKind) - seen


def test_the_strategies_order_every_op_kind_once():
    """KIND_ORDER is written out (simplest first: what the strategies shrink towards);
    a kind missing from it is never drawn. That each one is drawn: test_strategies.py."""
    from replayverify.programs._strategies import KIND_ORDER

    assert len(KIND_ORDER) == len(set(KIND_ORDER)) and set(KIND_ORDER) == set(OpKind)


def test_the_cohort_translates_every_op_kind_or_says_why_not():
    from replayverify.cohort._ops import NOT_TRANSLATED, RULES

    assert not set(RULES) & set(NOT_TRANSLATED)
    assert set(RULES) | set(NOT_TRANSLATED) == set(OpKind)
    assert all(why.strip() for why in NOT_TRANSLATED.values())
