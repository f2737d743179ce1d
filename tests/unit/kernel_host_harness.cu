// Runs the per-element bodies of replayverify/gpu/kernels.cu on the CPU, one index at a time,
// exactly as the grid-stride loops would on a GPU. Built and driven by test_kernels_compile.py.
//
//   harness philox N K0 K1 CTR_LO CTR_HI KEEP   -> stdout: N*4 u32 words, N f64 u1, N f64 u2,
//                                                   N u8 masks (u1 < KEEP)
//   harness gather|scatter|swap DIR VPR SHIFT JOURNAL_VECS
//       reads DIR/buf.bin, DIR/regions.bin (int64), DIR/journal.bin; rewrites buf and journal.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels.cu"

static std::vector<char> slurp(const std::string& path) {
    std::vector<char> data;
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) { std::perror(path.c_str()); std::exit(3); }
    char chunk[65536];
    size_t got;
    while ((got = std::fread(chunk, 1, sizeof chunk, f)) > 0) data.insert(data.end(), chunk, chunk + got);
    std::fclose(f);
    return data;
}

static void spit(const std::string& path, const std::vector<char>& data) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) { std::perror(path.c_str()); std::exit(3); }
    std::fwrite(data.data(), 1, data.size(), f);
    std::fclose(f);
}

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    const std::string cmd = argv[1];
    if (cmd == "philox" && argc == 8) {
        const u64 n = std::strtoull(argv[2], nullptr, 0);
        const u32 k0 = (u32)std::strtoul(argv[3], nullptr, 0);
        const u32 k1 = (u32)std::strtoul(argv[4], nullptr, 0);
        const u64 lo = std::strtoull(argv[5], nullptr, 0);
        const u64 hi = std::strtoull(argv[6], nullptr, 0);
        const double keep = std::strtod(argv[7], nullptr);
        std::vector<uint4> w(n);
        std::vector<double> u1(n), u2(n);
        std::vector<unsigned char> m(n);
        for (u64 j = 0; j < n; ++j) {
            w[j] = rv_philox_block(lo, hi, j, k0, k1);
            u1[j] = rv_uniform(w[j].x, w[j].y);
            u2[j] = rv_uniform(w[j].z, w[j].w);
            m[j] = u1[j] < keep ? 1 : 0;
        }
        std::fwrite(w.data(), sizeof(uint4), n, stdout);
        std::fwrite(u1.data(), sizeof(double), n, stdout);
        std::fwrite(u2.data(), sizeof(double), n, stdout);
        std::fwrite(m.data(), 1, n, stdout);
        return 0;
    }
    if ((cmd == "gather" || cmd == "scatter" || cmd == "swap") && argc == 6) {
        const std::string dir = argv[2];
        const u64 vpr = std::strtoull(argv[3], nullptr, 0);
        const int shift = std::atoi(argv[4]);
        const u64 jv = std::strtoull(argv[5], nullptr, 0);
        std::vector<char> buf = slurp(dir + "/buf.bin");
        std::vector<char> reg = slurp(dir + "/regions.bin");
        std::vector<char> jou = slurp(dir + "/journal.bin");
        uint4* b = reinterpret_cast<uint4*>(buf.data());
        uint4* j = reinterpret_cast<uint4*>(jou.data());
        const long long* r = reinterpret_cast<const long long*>(reg.data());
        for (u64 i = 0; i < jv; ++i) {
            if (cmd == "gather") rv_gather_at(b, j, r, i, vpr, shift);
            else if (cmd == "scatter") rv_scatter_at(b, j, r, i, vpr, shift);
            else rv_swap_at(b, j, r, i, vpr, shift);
        }
        spit(dir + "/buf.bin", buf);
        spit(dir + "/journal.bin", jou);
        return 0;
    }
    std::fprintf(stderr, "usage: see the comment at the top of kernel_host_harness.cu\n");
    return 2;
}
