"""The ``mixed`` and ``hazard`` families, and the existing families left unchanged."""

import pytest

from replayverify import engines
from replayverify.programs import execute, generate, load_program
from replayverify.programs.format import program_to_dict
from replayverify.programs.generate import HAZARDS, hazard_of, view_kind
from replayverify.verifier.engine_checks import mutant_records
from replayverify.verifier.suite import SUITE_FAMILIES, suite_ids

# sha256 prefixes of programs generated before the new families existed: adding families
# must not change what the existing ones generate for the same (seed, index, family)
PINNED = {
    "default": ["9129f74c3b9ae68e", "21d26cd08631d139", "8ce718360067c8f0", "04b44cef106185fa"],
    "derivative": ["60cc0df1dc0c3b31", "3d9c5506fbc23e5d", "ef444a8e2204cf3a",
                   "9269254eb5617530"],
    "bytes": ["7e38974502de99b2", "b0182abec68d06d3", "8e372c02a7209b38", "0f044f3fc0a1a8a6"],
    "alias": ["641e2c84a809df68", "304556772841f5ad", "f2be385784da3708", "1cd59cef847195d9"],
    "complex": ["4876569d899a82af", "589c4f3660c92a36", "34ce84b01cbd750e",
                "13259bf5a60ad78d"],
}


@pytest.mark.parametrize("family", sorted(PINNED))
def test_existing_families_generate_the_same_programs(family):
    got = [generate(0, i, family).sha256[:16] for i in (0, 1, 7)] + \
        [generate(3, 11, family).sha256[:16]]
    assert got == PINNED[family]


def test_the_default_rotation_gains_mixed():
    assert SUITE_FAMILIES == ("derivative", "bytes", "alias", "complex", "mixed")
    assert [p.family for p in suite_ids(6, 0)] == list(SUITE_FAMILIES) + ["derivative"]


@pytest.mark.parametrize("family", ["mixed", "hazard"])
def test_new_families_are_valid_and_deterministic(family):
    for i in range(12):
        p = generate(5, i, family)
        assert load_program(program_to_dict(p)) == p
        assert generate(5, i, family) == p


def _refusal_kind(reason: str) -> str:
    for kind in ("integer op", "several writes", "different byte extent"):
        if kind in reason:
            return kind
    return reason


def test_mixed_mixes_dtypes_refusals_and_2d_positions():
    refusals, positions, cells = set(), set(), set()
    for i in range(60):
        p = generate(0, i, "mixed")
        views = {v.name: v for v in p.views}
        assert {v.dtype for v in p.views if v.buffer == "state"} == \
            {"float64", "float32", "int64", "int32"}
        ex = execute(p)
        if not ex.admission.supported:
            refusals.add(_refusal_kind(ex.admission.reason))
        for op in p.ops:
            for f in op.spec.view_fields:
                v = views[getattr(op, f)]
                cells.add((op.kind.value, view_kind(v), v.dtype))
                if len(v.shape) == 2:
                    positions.add(f)
    assert refusals == {"integer op", "several writes", "different byte extent"}
    assert positions == {"dst", "x", "y", "index"}
    assert len(cells) >= 100  # of the 120 possible (op kind, view kind, dtype) cells


def test_hazard_programs_cycle_through_the_hazards():
    assert [hazard_of(i) for i in range(7)] == list(HAZARDS) + [HAZARDS[0]]


@pytest.mark.parametrize("mutant", engines.mutant_names())
def test_every_mutant_is_detected_on_the_programs_of_its_hazard(mutant):
    hazard = engines.get(mutant).strategy.hazard
    assert hazard in HAZARDS
    hits = 0
    for i in [i for i in range(18) if hazard_of(i) == hazard]:
        p = generate(0, i, "hazard")
        ex = execute(p)
        (rec,) = mutant_records(p, ex, ex.gradient, [mutant], f"s0/hazard/{i}")
        hits += rec.outcome == "detected"
    assert hits >= 2, (mutant, hazard, hits)  # of 3


def test_a_kind_is_drawn_as_rng_choice_draws_it():
    """The generator derives each weight table's cumulative weights once; every draw and
    the generator state after it equal ``rng.choice(len(kinds), p=w / w.sum())``'s."""
    import numpy as np

    from replayverify.programs.generate import (
        FLOAT_KINDS,
        INT_KINDS,
        _Builder,
        _pick_kind,
        _Weights,
    )
    from replayverify.programs.model import OpKind

    for table in (FLOAT_KINDS, {**FLOAT_KINDS, **dict.fromkeys(INT_KINDS, 0.2)},
                  {k: 0.25 if k in INT_KINDS else 1.0 for k in OpKind}):
        weights, kinds = _Weights(table), list(table)
        w = np.array([table[k] for k in kinds], dtype=np.float64)
        p = w / w.sum()  # what the generator passed to rng.choice
        for seed in range(200):
            b, rng = _Builder(np.random.default_rng(seed)), np.random.default_rng(seed)
            for _ in range(20):
                assert _pick_kind(b, weights) is kinds[int(rng.choice(len(kinds), p=p))]
            assert b.rng.random() == rng.random()


def test_seed_words_as_uint32_seed_what_the_list_seeds():
    """An attempt's generator is seeded with its words as a uint32 array when each fits
    one word: the same generator as the list of ints (a larger index keeps the list)."""
    import numpy as np

    from replayverify.programs.generate import _seed_words

    for seed, index in ((0, 0), (3, 11), (2**40 + 5, 2**32 - 1), (-7, 123456), (1, 2**32)):
        words = _seed_words(seed, index, "derivative", 4)
        as_list = [int(w) for w in words] if isinstance(words, np.ndarray) else words
        assert isinstance(words, np.ndarray) == (index < 2**32)
        assert (np.random.default_rng(words).bit_generator.state
                == np.random.default_rng(as_list).bit_generator.state)


def test_fills_are_rounded_as_python_rounds_them():
    """Float fills are rounded in one NumPy pass when the program is made: the values
    equal ``round(x, 6)`` bit for bit, also for draws next to a half-way point (which
    take Python's round) and for bounds too large for the NumPy pass."""
    import numpy as np

    from replayverify.programs.generate import _Builder
    from replayverify.programs.model import Init, View

    def filled(draws: list[np.ndarray], bound: float = 1.0) -> list[tuple]:
        b = _Builder(np.random.default_rng(0))
        for i, x in enumerate(draws):  # as fill leaves them
            b._unrounded.append((len(b.init), x))
            b.init.append(Init(f"v{i}", ()))
        b._rounds_exactly = bound < 2000
        b._round_fills()
        return [init.values for init in b.init]

    def python(draws: list[np.ndarray]) -> list[tuple]:
        return [tuple(round(v, 6) for v in x.tolist()) for x in draws]

    def same(a: list[tuple], b: list[tuple]) -> bool:
        return [np.array(t).tobytes() for t in a] == [np.array(t).tobytes() for t in b]

    rng = np.random.default_rng(7)
    for _ in range(200):
        draws = [rng.uniform(-1, 1, int(n)) for n in rng.integers(1, 40, 3)]
        assert same(filled(draws), python(draws))
    k = rng.integers(-10**6, 10**6, 64)
    for eps in (0.0, 1e-17, -1e-17, 3e-13):  # at and next to half-way points
        draws = [(k + 0.5) / 1e6 + eps, rng.uniform(-1e-6, 1e-6, 8)]  # (and zeros' signs)
        assert same(filled(draws), python(draws))
    draws = [rng.uniform(-5000, 5000, 50)]
    assert same(filled(draws, 5000.0), python(draws))
    b = _Builder(np.random.default_rng(3))
    b.fill(View("v", "b", "float64", 0, (30,), (8,)), -0.8, 0.8)
    b._round_fills()
    again = np.random.default_rng(3).uniform(-0.8, 0.8, 30)
    assert b.init[0].values == tuple(round(v, 6) for v in again.tolist())
