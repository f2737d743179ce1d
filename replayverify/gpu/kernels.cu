// replayverify GPU kernels: region journals and Philox4x32-10.
//
// One RawModule source (compiled by CuPy with NVRTC, and by `nvcc -arch=sm_90 -cubin` in CI).
// No #include: NVRTC ships no standard headers; only the built-in uint4 type is used.
//
// Journal layout (see replayverify/gpu/journal.py, which validates everything on the host):
//   the buffer is a byte array of `buf_vecs` 16-byte vectors, split into regions of
//   `vpr` vectors (granularity = 16 * vpr bytes); only the last region may be shorter.
//   `regions` is a sorted, unique int64 list of region indices; the journal is compact:
//   journal vector i belongs to region regions[i / vpr], vector i % vpr of that region.
//   Only the last listed region can be the short tail, so every journal vector below
//   `journal_vecs` maps inside the buffer and the loops need no bounds test per vector.
//   `shift` is log2(vpr) when vpr is a power of two (the common 4,096-byte case), else -1,
//   so the hot path avoids a 64-bit division.
//
// All offsets are 64-bit; every loop is a grid-stride loop.

typedef unsigned long long u64;
typedef unsigned int u32;

// The per-element bodies are __host__ __device__ so that a host harness (tests/unit) can run
// this exact source on the CPU, one "thread" at a time, and compare it with the NumPy reference.
#define RV_HD __host__ __device__ __forceinline__

RV_HD u64 rv_buffer_vec(const long long* __restrict__ regions,
                                             u64 i, u64 vpr, int shift) {
    u64 r, v;
    if (shift >= 0) {
        r = i >> shift;
        v = i & (vpr - 1);
    } else {
        r = i / vpr;
        v = i - r * vpr;
    }
    return (u64)regions[r] * vpr + v;
}

// Save: journal[i] = buffer[region vector i]  (old bytes, before the writes).
RV_HD void rv_gather_at(const uint4* __restrict__ buf, uint4* __restrict__ journal,
                        const long long* __restrict__ regions, u64 i, u64 vpr, int shift) {
    journal[i] = buf[rv_buffer_vec(regions, i, vpr, shift)];
}

// Restore: buffer[region vector i] = journal[i]  (one-way undo; the journal is unchanged).
RV_HD void rv_scatter_at(uint4* __restrict__ buf, const uint4* __restrict__ journal,
                         const long long* __restrict__ regions, u64 i, u64 vpr, int shift) {
    buf[rv_buffer_vec(regions, i, vpr, shift)] = journal[i];
}

// Swap: exchange journal and buffer regions. Applied to a journal of old bytes it undoes the
// writes and keeps the new bytes in the journal; applied again it redoes them.
RV_HD void rv_swap_at(uint4* __restrict__ buf, uint4* __restrict__ journal,
                      const long long* __restrict__ regions, u64 i, u64 vpr, int shift) {
    const u64 b = rv_buffer_vec(regions, i, vpr, shift);
    const uint4 kept = buf[b];
    buf[b] = journal[i];
    journal[i] = kept;
}

#define RV_GRID_STRIDE(i, n) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (u64)gridDim.x * blockDim.x)

extern "C" __global__ void rv_journal_gather(const uint4* __restrict__ buf,
                                             uint4* __restrict__ journal,
                                             const long long* __restrict__ regions,
                                             u64 journal_vecs, u64 vpr, int shift) {
    RV_GRID_STRIDE(i, journal_vecs) { rv_gather_at(buf, journal, regions, i, vpr, shift); }
}

extern "C" __global__ void rv_journal_scatter(uint4* __restrict__ buf,
                                              const uint4* __restrict__ journal,
                                              const long long* __restrict__ regions,
                                              u64 journal_vecs, u64 vpr, int shift) {
    RV_GRID_STRIDE(i, journal_vecs) { rv_scatter_at(buf, journal, regions, i, vpr, shift); }
}

extern "C" __global__ void rv_journal_swap(uint4* __restrict__ buf,
                                           uint4* __restrict__ journal,
                                           const long long* __restrict__ regions,
                                           u64 journal_vecs, u64 vpr, int shift) {
    RV_GRID_STRIDE(i, journal_vecs) { rv_swap_at(buf, journal, regions, i, vpr, shift); }
}

// ---------------------------------------------------------------------------------------------
// Philox4x32-10 (Salmon et al., SC 2011), the same words as replayverify/programs/philox.py.
// Block j uses the 128-bit counter (ctr_hi:ctr_lo) + j with the carry into the high half.

#define RV_PHILOX_M0 0xD2511F53u
#define RV_PHILOX_M1 0xCD9E8D57u
#define RV_PHILOX_W0 0x9E3779B9u
#define RV_PHILOX_W1 0xBB67AE85u

RV_HD uint4 rv_philox_block(u64 ctr_lo, u64 ctr_hi, u64 j, u32 k0, u32 k1) {
    const u64 lo = ctr_lo + j;                        // wraps mod 2^64
    const u64 hi = ctr_hi + (lo < j ? 1ull : 0ull);   // carry; wraps mod 2^64 (counter mod 2^128)
    u32 c0 = (u32)lo, c1 = (u32)(lo >> 32), c2 = (u32)hi, c3 = (u32)(hi >> 32);
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r) {
            k0 += RV_PHILOX_W0;
            k1 += RV_PHILOX_W1;
        }
        const u64 p0 = (u64)RV_PHILOX_M0 * c0;  // mul.wide.u32 on the device
        const u64 p1 = (u64)RV_PHILOX_M1 * c2;
        const u32 hi0 = (u32)(p0 >> 32), lo0 = (u32)p0;
        const u32 hi1 = (u32)(p1 >> 32), lo1 = (u32)p1;
        const u32 n0 = hi1 ^ c1 ^ k0;
        const u32 n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    uint4 out;  // not make_uint4: only the built-in vector type is needed under NVRTC
    out.x = c0;
    out.y = c1;
    out.z = c2;
    out.w = c3;
    return out;
}

// u = ((hi << 32 | lo) >> 11) * 2^-53: exact in float64, identical to the CPU.
RV_HD double rv_uniform(u32 lo, u32 hi) {
    const u64 bits = (((u64)hi << 32) | (u64)lo) >> 11;
    return (double)bits * 0x1.0p-53;
}

// words: (n, 4) u32, row j = Philox(counter + j).
extern "C" __global__ void rv_philox_words(uint4* __restrict__ out, u64 n, u32 k0, u32 k1,
                                           u64 ctr_lo, u64 ctr_hi) {
    RV_GRID_STRIDE(j, n) {
        out[j] = rv_philox_block(ctr_lo, ctr_hi, j, k0, k1);
    }
}

// uniforms: u1 from (w1, w0), u2 from (w3, w2), float64.
extern "C" __global__ void rv_philox_uniforms(double* __restrict__ u1, double* __restrict__ u2,
                                              u64 n, u32 k0, u32 k1, u64 ctr_lo, u64 ctr_hi) {
    RV_GRID_STRIDE(j, n) {
        const uint4 w = rv_philox_block(ctr_lo, ctr_hi, j, k0, k1);
        u1[j] = rv_uniform(w.x, w.y);
        u2[j] = rv_uniform(w.z, w.w);
    }
}

// normals: z = sqrt(-2 log1p(-u1)) * cos(TWO_PI * u2), each operation rounded separately
// (compile with --fmad=false). log1p and cos may differ from the CPU in the last place.
extern "C" __global__ void rv_philox_normals(double* __restrict__ z, u64 n, u32 k0, u32 k1,
                                             u64 ctr_lo, u64 ctr_hi) {
    const double two_pi = 0x1.921fb54442d18p+2;  // 2.0 * np.pi, exactly
    RV_GRID_STRIDE(j, n) {
        const uint4 w = rv_philox_block(ctr_lo, ctr_hi, j, k0, k1);
        const double a = __dmul_rn(-2.0, log1p(-rv_uniform(w.x, w.y)));
        z[j] = __dmul_rn(sqrt(a), cos(__dmul_rn(two_pi, rv_uniform(w.z, w.w))));
    }
}

// dropout mask: m = 1 where u1 < keep else 0 (keep is the view-dtype coefficient, widened).
extern "C" __global__ void rv_philox_keep(unsigned char* __restrict__ mask, u64 n, double keep,
                                          u32 k0, u32 k1, u64 ctr_lo, u64 ctr_hi) {
    RV_GRID_STRIDE(j, n) {
        const uint4 w = rv_philox_block(ctr_lo, ctr_hi, j, k0, k1);
        mask[j] = rv_uniform(w.x, w.y) < keep ? 1 : 0;
    }
}
