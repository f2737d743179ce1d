"""The CUDA sources compile, and their element code agrees with NumPy when run on the CPU.

A kernel that does not compile fails here whenever ``nvcc`` exists (CI has it). Beyond
compiling, ``kernel_host_harness.cu`` includes ``kernels.cu`` and runs its per-element
``__host__ __device__`` bodies on the CPU, index by index: the Philox words, uniforms and
masks, and the journal gather / scatter / swap index arithmetic, checked against
``replayverify.programs.philox`` and the NumPy journal reference. The grid-stride loops and
the launches themselves run only on a GPU (``tests/gpu``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from replayverify.gpu import journal as jr
from replayverify.programs import philox as cpu

NVCC = shutil.which("nvcc")
GPU_DIR = Path(jr.__file__).parent
KERNELS = GPU_DIR / "kernels.cu"
HARNESS = Path(__file__).with_name("kernel_host_harness.cu")

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH; kernels not compiled")

KNOWN_ANSWERS = [  # SPEC §2 (Random123 known-answer tests)
    ((0, 0), (0, 0, 0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    (
        (0xFFFFFFFF, 0xFFFFFFFF),
        (0xFFFFFFFF,) * 4,
        (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
    ),
    (
        (0xA4093822, 0x299F31D0),
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, check=False, timeout=300, **kw)


@needs_nvcc
def test_kernels_compile_to_sm90_cubin(tmp_path: Path) -> None:
    out = tmp_path / "kernels.cubin"
    cmd = [NVCC, "-arch=sm_90", "-cubin", "--fmad=false", "-o", str(out), str(KERNELS)]
    proc = _run(cmd, text=True)
    assert proc.returncode == 0, f"nvcc failed:\n{proc.stdout}\n{proc.stderr}"
    assert out.stat().st_size > 0
    for name in (
        "rv_journal_gather",
        "rv_journal_scatter",
        "rv_journal_swap",
        "rv_philox_words",
        "rv_philox_uniforms",
        "rv_philox_normals",
        "rv_philox_keep",
    ):
        assert name.encode() in out.read_bytes(), f"{name} missing from the cubin"


@needs_nvcc
def test_journal_kernels_move_16_byte_vectors(tmp_path: Path) -> None:
    out = tmp_path / "kernels.ptx"
    proc = _run([NVCC, "-arch=sm_90", "-ptx", "-o", str(out), str(KERNELS)], text=True)
    assert proc.returncode == 0, proc.stderr
    ptx = out.read_text()
    for name in ("rv_journal_gather", "rv_journal_scatter", "rv_journal_swap"):
        body = ptx.split(f".entry {name}(", 1)[1].split("\n}\n", 1)[0]
        assert re.search(r"ld\.global(\.nc)?\.v4\.u32", body), f"{name}: no 16-byte loads"
        assert "st.global.v4.u32" in body, f"{name}: no 16-byte stores"


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if NVCC is None:
        pytest.skip("nvcc is not on PATH; the host harness cannot be built")
    exe = tmp_path_factory.mktemp("harness") / "harness"
    proc = _run([NVCC, f"-I{GPU_DIR}", "-o", str(exe), str(HARNESS)], text=True)
    assert proc.returncode == 0, f"nvcc failed on the host harness:\n{proc.stdout}\n{proc.stderr}"
    return exe


def _philox(exe: Path, state: cpu.RngState, n: int, keep: float):
    c = state.counter_int
    args = [str(n), str(state.key[0]), str(state.key[1]), str(c & cpu.MASK64), str(c >> 64)]
    proc = _run([str(exe), "philox", *args, repr(keep)])
    assert proc.returncode == 0, proc.stderr
    raw = proc.stdout
    w = np.frombuffer(raw[: 16 * n], dtype="<u4").reshape(n, 4).astype(np.uint64)
    u1 = np.frombuffer(raw[16 * n : 24 * n], dtype="<f8")
    u2 = np.frombuffer(raw[24 * n : 32 * n], dtype="<f8")
    mask = np.frombuffer(raw[32 * n :], dtype=np.uint8)
    assert mask.size == n
    return w, u1, u2, mask


@needs_nvcc
@pytest.mark.parametrize(("key", "counter", "expected"), KNOWN_ANSWERS)
def test_kernel_philox_known_answers(harness, key, counter, expected) -> None:
    w, _, _, _ = _philox(harness, cpu.RngState(key, counter), 1, 0.5)
    assert tuple(int(x) for x in w[0]) == expected


@needs_nvcc
@pytest.mark.parametrize(
    "counter",
    [
        0,
        (1 << 32) - 2,  # carry from word 0 into word 1
        (1 << 64) - 3,  # carry from the low into the high 64 bits
        (1 << 96) - 1,
        (1 << 128) - 4,  # wraps to 0 (mod 2^128)
        0x0123456789ABCDEF_FEDCBA9876543210,
    ],
)
def test_kernel_philox_matches_cpu_across_carries(harness, counter: int) -> None:
    state = cpu.RngState((0x12345678, 0x9ABCDEF0), cpu.counter_words(counter))
    n, keep = 9, np.float64(np.float32(0.7))
    w, u1, u2, mask = _philox(harness, state, n, float(keep))
    ref = cpu.words(state, n)
    np.testing.assert_array_equal(w, ref)
    r1, r2 = cpu.uniforms(ref)
    assert u1.tobytes() == r1.tobytes() and u2.tobytes() == r2.tobytes()
    np.testing.assert_array_equal(mask, cpu.keep_mask(r1, keep, np.uint8))


def _journal_op(exe: Path, op: str, tmp: Path, buf, lay, journal: np.ndarray):
    (tmp / "buf.bin").write_bytes(buf.tobytes())
    (tmp / "regions.bin").write_bytes(lay.regions.astype("<i8").tobytes())
    (tmp / "journal.bin").write_bytes(journal.tobytes())
    vpr = lay.granularity // 16
    shift = vpr.bit_length() - 1 if vpr & (vpr - 1) == 0 else -1
    proc = _run([str(exe), op, str(tmp), str(vpr), str(shift), str(lay.payload_bytes // 16)])
    assert proc.returncode == 0, proc.stderr
    out_buf = np.frombuffer((tmp / "buf.bin").read_bytes(), dtype=np.uint8)
    out_journal = np.frombuffer((tmp / "journal.bin").read_bytes(), dtype=np.uint8)
    return out_buf, out_journal


@needs_nvcc
@pytest.mark.parametrize(
    ("granularity", "n_full", "tail", "regions"),
    [
        (16, 64, 0, [0, 5, 6, 63]),
        (48, 20, 0, [1, 2, 19]),  # 3 vectors per region: the division path
        (48, 20, 32, [0, 7, 20]),  # with the 32-byte tail region listed
        (4096, 8, 0, [0, 3, 7]),
        (4096, 8, 1024, [2, 8]),
    ],
)
def test_kernel_journal_matches_reference(harness, tmp_path, granularity, n_full, tail, regions):
    nbytes = granularity * n_full + tail
    rng = np.random.default_rng(granularity + tail)
    buf = rng.integers(0, 256, nbytes, dtype=np.uint8)
    lay = jr.layout(nbytes, regions, granularity)
    ref = jr.save(np, buf, lay)

    empty = np.zeros(lay.payload_bytes, np.uint8)
    got_buf, got_journal = _journal_op(harness, "gather", tmp_path, buf, lay, empty)
    assert got_buf.tobytes() == buf.tobytes()
    assert got_journal.tobytes() == ref.data.tobytes()

    other = rng.integers(0, 256, lay.payload_bytes, dtype=np.uint8)
    expected = buf.copy()
    jr.restore(np, expected, jr.Journal(lay, other.copy()))
    got_buf, got_journal = _journal_op(harness, "scatter", tmp_path, buf, lay, other)
    assert got_buf.tobytes() == expected.tobytes()
    assert got_journal.tobytes() == other.tobytes()

    expected_buf = buf.copy()
    swapped = jr.Journal(lay, other.copy())
    jr.swap(np, expected_buf, swapped)
    got_buf, got_journal = _journal_op(harness, "swap", tmp_path, buf, lay, other)
    assert got_buf.tobytes() == expected_buf.tobytes()
    assert got_journal.tobytes() == swapped.data.tobytes()
