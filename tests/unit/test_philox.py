import numpy as np
import pytest

from replayverify.programs.philox import (
    RngState,
    counter_blocks,
    counter_words,
    draw_normals,
    keep_mask,
    normals,
    philox4x32,
    uniforms,
    words,
)

KNOWN = [
    ((0, 0), (0, 0, 0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 2, (0xFFFFFFFF,) * 4, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0xA4093822, 0x299F31D0), (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("key,counter,expected", KNOWN)
def test_known_answers(key, counter, expected):
    got = philox4x32(np.array([counter], dtype=np.uint64), key)
    assert tuple(int(w) for w in got[0]) == expected


@pytest.mark.parametrize("key,counter,expected", KNOWN)
def test_known_answers_through_state(key, counter, expected):
    assert tuple(int(w) for w in words(RngState(key, counter), 1)[0]) == expected


def test_counter_carries_across_every_word():
    start = (1 << 96) - 2  # words (fffffffe, ffffffff, ffffffff, 0)
    blocks = counter_blocks(start, 3)
    assert blocks.tolist() == [
        [0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFF, 0],
        [0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0],
        [0, 0, 0, 1],
    ]
    # the 64-bit boundary
    assert counter_blocks((1 << 64) - 1, 2).tolist() == [[2**32 - 1, 2**32 - 1, 0, 0],
                                                         [0, 0, 1, 0]]


def test_counter_wraps_at_2_128():
    top = (1 << 128) - 1
    assert counter_blocks(top, 2).tolist() == [[2**32 - 1] * 4, [0, 0, 0, 0]]
    state = RngState((1, 2), counter_words(top))
    assert state.advanced(3).counter == (2, 0, 0, 0)
    # the block after the wrap is the block of counter 0
    assert np.array_equal(words(state, 2)[1], words(RngState((1, 2), (0, 0, 0, 0)), 1)[0])


def test_blocks_are_the_same_whether_drawn_at_once_or_in_pieces():
    state = RngState((5, 6), (2**32 - 3, 2**32 - 1, 7, 0))
    whole = words(state, 10)
    parts = np.concatenate([words(state, 4), words(state.advanced(4), 6)])
    assert np.array_equal(whole, parts)


def test_uniform_and_normal_rules_follow_the_spec():
    w = words(RngState((7, 0), (0, 0, 0, 0)), 64)
    u1, u2 = uniforms(w)
    w0, w1, w2, w3 = (int(x) for x in w[5])
    assert u1[5] == ((w1 << 32 | w0) >> 11) * 2.0**-53
    assert u2[5] == ((w3 << 32 | w2) >> 11) * 2.0**-53
    assert np.all((u1 >= 0) & (u1 < 1)) and np.all((u2 >= 0) & (u2 < 1))
    z = normals(u1, u2)
    expect = np.sqrt(-2.0 * np.log1p(-u1[5])) * np.cos(2.0 * np.pi * u2[5])
    assert z[5] == expect
    z2, after = draw_normals(RngState((7, 0), (0, 0, 0, 0)), 64)
    assert np.array_equal(z, z2) and after.counter == (64, 0, 0, 0)


def test_keep_mask():
    u = np.array([0.0, 0.49, 0.5, 0.99])
    assert keep_mask(u, 0.5, np.float32).tolist() == [1.0, 1.0, 0.0, 0.0]
    assert keep_mask(u, 0.5, np.float32).dtype == np.float32


def test_state_bytes_are_24_little_endian():
    s = RngState((1, 2), (3, 4, 5, 0x01020304))
    raw = s.to_bytes()
    assert len(raw) == 24 and raw[-4:] == bytes([4, 3, 2, 1])


def test_one_philox_interface_cpu_and_kernels_registered_duplicates_refused():
    from replayverify.programs.philox import CPU, PhiloxImpl, philox_for, register_philox

    cpu = philox_for("numpy")
    assert cpu is CPU
    for key, counter, want in KNOWN:
        got = cpu.words(RngState(key, counter), 1)[0]
        assert tuple(int(w) for w in got) == want
    state = RngState((3, 4), (5, 0, 0, 0))
    u1, u2 = cpu.uniforms(state, 7)
    assert cpu.normals(state, 7).tobytes() == normals(u1, u2).tobytes()
    assert cpu.keep_mask(state, 7, 0.5, np.float32).tobytes() == \
        keep_mask(u1, 0.5, np.float32).tobytes()
    # the CUDA kernels sit behind the same interface (importing them needs no CuPy)
    kernels = philox_for("cupy")
    assert isinstance(kernels, PhiloxImpl) and kernels.name == "cupy"
    with pytest.raises(ValueError, match="already registered"):
        register_philox(CPU)
    with pytest.raises(ValueError, match="already registered"):
        register_philox(kernels)
    with pytest.raises(ValueError, match="no Philox implementation"):
        philox_for("torch")


def test_shared_blocks_memoise_only_the_state_they_are_asked_for():
    from replayverify.programs.philox import Blocks

    blocks = Blocks()
    a = RngState((1, 2), (3, 0, 0, 0))
    u1, u2 = blocks.uniforms(a, 5)
    assert blocks.uniforms(a, 5)[0] is u1  # computed once
    want = uniforms(words(a, 5))
    assert u1.tobytes() == want[0].tobytes() and u2.tobytes() == want[1].tobytes()
    b = a.advanced(1)  # another state: other values, never the cached ones
    assert blocks.uniforms(b, 5)[0].tobytes() == uniforms(words(b, 5))[0].tobytes()
    assert blocks.uniforms(b, 5)[0].tobytes() != u1.tobytes()
    assert not u1.flags.writeable


def test_blocks_computed_a_span_at_a_time_are_those_of_each_state():
    """A span of blocks sliced at an offset is what a draw from that offset computes,
    across the 2^32 and 2^64 carries and the 2^128 wrap, for any key."""
    import random

    from replayverify.programs.philox import MOD128, Blocks

    rnd = random.Random(0)
    for _ in range(300):
        blocks = Blocks(rnd.choice([0, 1, 7, 40]))
        key = (rnd.getrandbits(32), rnd.getrandbits(32))
        base = rnd.choice([0, 2**32 - 2, 2**64 - 3, MOD128 - 4, rnd.getrandbits(128)])
        for _ in range(6):
            k = key if rnd.random() < 0.8 else (1, 2)
            state = RngState(k, counter_words((base + rnd.randint(-2, 30)) % MOD128))
            n = rnd.randint(0, 20)
            got, want = blocks.uniforms(state, n), uniforms(words(state, n))
            assert got[0].tobytes() == want[0].tobytes()
            assert got[1].tobytes() == want[1].tobytes()
            assert not got[0].flags.writeable
