/* Kernel lab: how long does a dependent read wait while every SM streams weights with a given
 * number of bytes in flight? Not a test, not production code; numbers for docs/PERF.md. Built
 * by `make lab`, run on the device: lab_lat [hops] [reps].
 *
 * Question. A decoding matvec launch stages its input (x, 16 KB, just written by the previous
 * launch, so in L2) 2.3-3.9 µs after its PDL wait returns, while its ring's first weight
 * stages are already requested (docs/PERF.md v2.17 section 1, v2.19 section 2); an input copied
 * by the copy engine took as long as the loads, so the wait is not the SM's load path. The
 * explanation PERF.md's status section gives is a queue: the input's request waits behind the
 * 5-19 MB of weights the grid asked for first, bytes in flight / bandwidth. If that holds, any
 * design that keeps the memory system busy across a data dependency pays it at every
 * dependency, and the depth of every ring is a trade between the two; if not, the staging's
 * time is somewhere else (the norm's chain, the PDL release) and shallower rings are not the
 * lever. This lab measures it directly, away from the matvec.
 *
 * Method. One block per SM (the dynamic shared memory asked for leaves room for one). Warp 0's
 * lane 0 follows a chain of dependent 4-byte loads (each load's value is the next index; one
 * 128-byte line per hop, in a random cycle over the block's own lines), L1 bypassed
 * (L1::no_allocate), L2 told to keep them (evict_last); its time per hop over `hops` hops,
 * after a warm pass, is the latency of a dependent read. The other warps stream a 2 GB pool
 * (its lines marked evict_first, each warp its own contiguous share) until the chain is done,
 * in one of three ways:
 *   cp.async   each lane 16-byte copies into a per-warp ring of D stages (the matvecs' way),
 *              D stages in flight per warp;
 *   ld.global  each lane D 16-byte loads into registers, the next D issued before the previous
 *              are used (2D in flight at most);
 *   bulk       lane 0 keeps D cp.async.bulk copies of S bytes in flight on D mbarriers (sm_90).
 * Two chains: 128 lines per SM (16 KB, the size of x; 2.1 MB over the GPU: L2 hits) and 32768
 * lines per SM (4 MB a block, 0.5 GB in all: DRAM). Each row prints the bytes in flight per SM
 * and over the GPU, the streamed bandwidth, the latency per hop of both chains, and what a
 * first-in-first-out queue would predict for the L2 chain: the idle latency plus the bytes in
 * flight over the GPU divided by the bandwidth. Medians over `reps` launches (blocks: median
 * of the per-block latencies).
 *
 * A third measure, for the dataflow schedule docs/PERF.md leaves to build: warp 0's lane 0
 * crosses grid barriers instead (persist.cu's: a release add on a counter, then a spin on
 * acquire loads until every block has added; all blocks resident, one per SM), the ns per barrier under the
 * same streaming. v2.22's attention fold paid 2.5-3.1 µs a layer for its counts and waits; this
 * says whether such a signal costs that much by itself while the SM streams. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "bulk.cuh"
#include "lab.cuh"
#include "mv.cuh" /* cp_commit, cp_wait */

enum { M_IDLE, M_CPASYNC, M_LDG, M_BULK };
static const char *mode_name[] = {"idle", "cp.async", "ld.global", "bulk"};

#define MAX_SW 15   /* streaming warps per block (warp 0 chases) */
#define MAX_SLOTS 8 /* bulk copies in flight per warp */
#define OUTW 4 /* per block: chase ns, bytes streamed, final index (keeps the chain live), error flag */

struct lat_args {
    const uint8_t *w;      /* streamed pool */
    size_t w_bytes;
    const uint32_t *chain; /* chain[i]: index of the next hop's word; NULL: grid barriers */
    unsigned long long *ctr; /* the barriers' counter (zero at launch) */
    uint32_t lines;        /* lines per block in the chain */
    int hops, sw, stage;   /* hops timed; streaming warps; bytes per warp stage */
    unsigned long long *out;
};

__device__ __forceinline__ uint64_t policy_last() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ uint64_t policy_first() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
/* one hop: a dependent load that skips L1 */
__device__ __forceinline__ uint32_t hop(const uint32_t *p, uint64_t pol) {
    uint32_t v;
    asm volatile("ld.global.L1::no_allocate.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(pol) : "memory");
    return v;
}
__device__ __forceinline__ void cp16_first(uint32_t dst, const void *src, uint64_t pol) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "l"(pol)
                 : "memory");
}
__device__ __forceinline__ uint4 ld16_first(const void *p, uint64_t pol) {
    uint4 v;
    asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(pol)
                 : "memory");
    return v;
}
__device__ __forceinline__ void bulk_first(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar, uint64_t pol) {
#if RL_BULK
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar), "l"(pol)
                 : "memory");
#endif
}

/* One grid barrier: this block's arrival, then a spin until `target` arrivals (every block
 * resident: one per SM, the grid n_sm). Bounded, as mb_wait: false after ~2^26 tries (a block
 * that never ran would otherwise hang the device run). */
__device__ __forceinline__ bool grid_bar(unsigned long long *ctr, unsigned long long target) {
    rl_red_release(ctr);
    for (int it = 0; it < (1 << 26); it++)
        if (rl_ld_acquire(ctr) >= target) return true;
    return false;
}

/* A bounded wait for a copy (a bug here would hang the device run): false, and out[3] set,
 * after ~2^24 tries. */
__device__ __forceinline__ bool mb_wait(uint32_t bar, uint32_t parity, unsigned long long *out) {
    for (int it = 0; it < (1 << 24); it++)
        if (mb_try(bar, parity)) return true;
    out[3] = 1;
    return false;
}

template <int MODE, int D> __global__ void lat_kernel(lat_args a) {
    extern __shared__ __align__(128) uint8_t ring[];
    __shared__ volatile int stop;
    __shared__ __align__(8) uint64_t bars[MAX_SW * MAX_SLOTS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) stop = 0;
    if (MODE == M_BULK && warp > 0 && lane == 0)
        for (int k = 0; k < D; k++) mb_init(rl_smem_addr(&bars[(warp - 1) * MAX_SLOTS + k]), 1);
    mb_init_fence();
    __syncthreads();
    unsigned long long *out = a.out + (size_t)blockIdx.x * OUTW;
    if (warp == 0) {
        if (lane == 0 && !a.chain) {
            const unsigned long long n = gridDim.x, warm = 16;
            bool ok = true;
            for (unsigned long long h = 1; h <= warm && ok; h++) ok = grid_bar(a.ctr, h * n);
            const uint64_t t0 = rl_gtimer();
            for (unsigned long long h = 1; h <= (unsigned long long)a.hops && ok; h++) ok = grid_bar(a.ctr, (warm + h) * n);
            const uint64_t t1 = rl_gtimer();
            out[0] = t1 - t0;
            if (!ok) out[3] = 2;
            stop = 1;
        } else if (lane == 0) {
            const uint64_t pol = policy_last();
            uint32_t i = blockIdx.x * a.lines * 32u; /* the block's first line */
            /* warm (the L2 chain's every line), and the stream settles */
            for (uint32_t h = 0; h < (a.lines < 2048 ? a.lines : 2048); h++) i = hop(a.chain + i, pol);
            const uint64_t t0 = rl_gtimer();
            for (int h = 0; h < a.hops; h++) i = hop(a.chain + i, pol);
            const uint64_t t1 = rl_gtimer();
            out[0] = t1 - t0;
            out[2] = i;
            stop = 1;
        }
        return;
    }
    if (MODE == M_IDLE) {
        if (lane == 0) out[1] = 0;
        return;
    }
    /* streaming warps: each its own contiguous share of the pool, a whole number of stages */
    const size_t share = (a.w_bytes / ((size_t)gridDim.x * a.sw)) / (size_t)a.stage * (size_t)a.stage;
    const uint8_t *base = a.w + ((size_t)blockIdx.x * a.sw + (size_t)(warp - 1)) * share;
    const uint64_t pol = policy_first();
    size_t off = 0;
    unsigned long long bytes = 0;
    if constexpr (MODE == M_CPASYNC) {
        const uint32_t r0 = rl_smem_addr(ring + (size_t)(warp - 1) * D * a.stage);
        for (int s = 0; !stop; s++) {
            const uint32_t dst = r0 + (uint32_t)((s % D) * a.stage);
            /* per lane, so that ptxas keeps the offset in a vector register: with it uniform,
             * CUDA 13.0's ptxas emitted an LDGSTS [R+UR] whose policy operand read a register
             * just overwritten, and the launch died with an illegal instruction (session 30) */
            for (int u = 16 * lane; u < a.stage; u += 512) cp16_first(dst + u, base + off + u, pol);
            cp_commit();
            bytes += (unsigned)a.stage;
            off = off + 2 * (size_t)a.stage <= share ? off + a.stage : 0;
            cp_wait<D - 1>(); /* at most D stages of this warp in flight */
        }
        cp_wait<0>();
    } else if constexpr (MODE == M_LDG) {
        uint4 v[D];
        uint32_t acc = 0;
#pragma unroll
        for (int k = 0; k < D; k++) v[k] = ld16_first(base + off + 512 * k + 16 * lane, pol);
        while (!stop) {
            off = off + 2 * 512 * (size_t)D <= share ? off + 512 * D : 0;
            uint4 n[D];
#pragma unroll
            for (int k = 0; k < D; k++) n[k] = ld16_first(base + off + 512 * k + 16 * lane, pol);
#pragma unroll
            for (int k = 0; k < D; k++) {
                acc ^= v[k].x ^ v[k].w;
                v[k] = n[k];
            }
            bytes += 512u * D;
        }
        if (acc == 0x9e3779b9u) atomicXor(&out[2], (unsigned long long)acc); /* keeps the loads */
    } else if constexpr (MODE == M_BULK) {
        if (lane == 0) {
            const uint32_t r0 = rl_smem_addr(ring + (size_t)(warp - 1) * D * a.stage);
            for (int k = 0; k < D; k++) { /* the first D copies */
                const uint32_t b = rl_smem_addr(&bars[(warp - 1) * MAX_SLOTS + k]);
                mb_expect(b, (uint32_t)a.stage);
                bulk_first(r0 + (uint32_t)(k * a.stage), base + off, (uint32_t)a.stage, b, pol);
                off = off + 2 * (size_t)a.stage <= share ? off + a.stage : 0;
            }
            int s = 0;
            for (; !stop; s++) { /* wait for the oldest, refill it */
                const int k = s % D;
                const uint32_t b = rl_smem_addr(&bars[(warp - 1) * MAX_SLOTS + k]);
                if (!mb_wait(b, (uint32_t)((s / D) & 1), out)) break;
                bytes += (unsigned)a.stage;
                mb_expect(b, (uint32_t)a.stage);
                bulk_first(r0 + (uint32_t)(k * a.stage), base + off, (uint32_t)a.stage, b, pol);
                off = off + 2 * (size_t)a.stage <= share ? off + a.stage : 0;
            }
            for (int e = s; e < s + D; e++) /* no copy outlives the block */
                mb_wait(rl_smem_addr(&bars[(warp - 1) * MAX_SLOTS + e % D]), (uint32_t)((e / D) & 1), out);
        }
    }
    if (lane == 0) atomicAdd(&out[1], bytes);
}

typedef void (*lat_fn)(lat_args);

template <int MODE> static lat_fn pick(int d) {
    switch (d) {
    case 1: return lat_kernel<MODE, 1>;
    case 2: return lat_kernel<MODE, 2>;
    case 3: return lat_kernel<MODE, 3>;
    case 4: return lat_kernel<MODE, 4>;
    case 6: return lat_kernel<MODE, 6>;
    case 8: return lat_kernel<MODE, 8>;
    default: return nullptr;
    }
}
static lat_fn kernel_for(int mode, int d) {
    switch (mode) {
    case M_IDLE: return lat_kernel<M_IDLE, 1>;
    case M_CPASYNC: return pick<M_CPASYNC>(d);
    case M_LDG: return pick<M_LDG>(d);
    default: return pick<M_BULK>(d);
    }
}

/* A random cycle over each block's `lines` lines: entry (block, line) holds the index of the
 * next line's first word. */
static std::vector<uint32_t> make_chain(int blocks, uint32_t lines, uint64_t seed) {
    std::vector<uint32_t> c((size_t)blocks * lines * 32, 0);
    std::vector<uint32_t> perm(lines);
    for (int b = 0; b < blocks; b++) {
        for (uint32_t i = 0; i < lines; i++) perm[i] = i;
        for (uint32_t i = lines - 1; i > 0; i--) { /* Fisher-Yates, splitmix64 */
            seed += 0x9e3779b97f4a7c15ull;
            uint64_t z = seed;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            z ^= z >> 31;
            std::swap(perm[i], perm[(uint32_t)(z % (i + 1))]);
        }
        const size_t b0 = (size_t)b * lines * 32;
        /* the cycle starts at line 0 (where the kernel starts) */
        std::rotate(perm.begin(), std::find(perm.begin(), perm.end(), 0u), perm.end());
        for (uint32_t i = 0; i < lines; i++)
            c[b0 + (size_t)perm[i] * 32] = (uint32_t)(b0 + (size_t)perm[(i + 1) % lines] * 32);
    }
    return c;
}

struct cfg {
    int mode, sw, d, stage;
};

int main(int argc, char **argv) {
    const int hops = argc > 1 ? atoi(argv[1]) : 3000, reps = argc > 2 ? atoi(argv[2]) : 5;
    if (hops < 1 || reps < 1) {
        fprintf(stderr, "usage: lab_lat [hops >= 1] [reps >= 1]\n");
        return 2;
    }
    cudaDeviceProp p;
    CKL(cudaGetDeviceProperties(&p, 0));
    const int n_sm = p.multiProcessorCount;
    const bool bulk_ok = p.major >= 9;
    const size_t w_bytes = (size_t)2 << 30;
    uint8_t *w;
    CKL(cudaMalloc(&w, w_bytes));
    CKL(cudaMemset(w, 1, w_bytes));
    const uint32_t lines[2] = {128, 32768}; /* per SM: 16 KB (L2), 4 MB (DRAM) */
    uint32_t *chain[2];
    for (int c = 0; c < 2; c++) {
        std::vector<uint32_t> h = make_chain(n_sm, lines[c], 12345 + c);
        CKL(cudaMalloc(&chain[c], h.size() * 4));
        CKL(cudaMemcpy(chain[c], h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    }
    unsigned long long *out;
    CKL(cudaMalloc(&out, (size_t)n_sm * OUTW * sizeof *out));
    /* one block per SM: at least 120 KB of dynamic shared memory asked for */
    const size_t min_smem = 120 * 1024, max_smem = (size_t)p.sharedMemPerBlockOptin - 4096;
    std::vector<cfg> cfgs = {{M_IDLE, 0, 1, 512}};
    for (int d : {1, 2, 3, 4, 6, 8}) cfgs.push_back({M_CPASYNC, 15, d, 1024});
    for (int d : {4, 6}) cfgs.push_back({M_CPASYNC, 15, d, 2048});
    cfgs.push_back({M_CPASYNC, 8, 2, 1152}); /* ~ the Q4_0 ring's prefetch: 16 warps x 2 x 1152 B */
    for (int d : {1, 2, 4, 8}) cfgs.push_back({M_LDG, 15, d, 512});
    if (bulk_ok)
        for (int d : {1, 2, 3}) cfgs.push_back({M_BULK, 15, d, 4096});
    printf("lab_lat: %s, %d SMs, %d hops, %d reps; chains %u and %u lines per SM\n", p.name, n_sm, hops, reps,
           lines[0], lines[1]);
    printf("%-10s %3s %2s %6s | %12s %12s | %8s | %12s %14s | %12s | %10s\n", "streaming", "sw", "D", "stage",
           "KB/SM flight", "MB flight", "GB/s", "L2 ns/hop", "FIFO model ns", "DRAM ns/hop", "barrier ns");
    unsigned long long *ctr;
    CKL(cudaMalloc(&ctr, sizeof *ctr));
    double idle_l2 = 0;
    for (const cfg &c : cfgs) {
        lat_fn f = kernel_for(c.mode, c.d);
        const size_t ring = (size_t)c.sw * c.d * c.stage;
        const size_t smem = std::max(ring, min_smem);
        if (!f || smem > max_smem) {
            printf("%-10s %3d %2d %6d | skipped (shared memory %zu)\n", mode_name[c.mode], c.sw, c.d, c.stage, smem);
            continue;
        }
        CKL(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        /* bytes in flight per warp: D stages (cp.async, bulk); up to 2D loads of 16 B a lane (ld.global) */
        const double flight_sm = (double)c.sw * c.d * (c.mode == M_LDG ? 2.0 * 512 : c.stage);
        double lat[3] = {0, 0, 0}, gbs = 0;
        for (int ch = 0; ch < 3; ch++) { /* the L2 chain, the DRAM chain, grid barriers */
            std::vector<double> l, bw;
            for (int r = 0; r < reps; r++) {
                CKL(cudaMemset(out, 0, (size_t)n_sm * OUTW * sizeof *out));
                CKL(cudaMemset(ctr, 0, sizeof *ctr));
                lat_args a = {w, w_bytes, ch < 2 ? chain[ch] : nullptr, ctr, ch < 2 ? lines[ch] : 0, hops, c.sw, c.stage, out};
                cudaEvent_t e0, e1;
                CKL(cudaEventCreate(&e0));
                CKL(cudaEventCreate(&e1));
                CKL(cudaEventRecord(e0));
                f<<<n_sm, 32 * (1 + c.sw), smem>>>(a);
                CKL(cudaEventRecord(e1));
                CKL(cudaEventSynchronize(e1));
                CKL(cudaGetLastError());
                float ms;
                CKL(cudaEventElapsedTime(&ms, e0, e1));
                cudaEventDestroy(e0);
                cudaEventDestroy(e1);
                std::vector<unsigned long long> h((size_t)n_sm * OUTW);
                CKL(cudaMemcpy(h.data(), out, h.size() * sizeof h[0], cudaMemcpyDeviceToHost));
                std::vector<double> per;
                double bytes = 0;
                for (int b = 0; b < n_sm; b++) {
                    if (h[(size_t)b * OUTW + 3]) {
                        fprintf(stderr, "lab_lat: %s D=%d: %s (block %d)\n", mode_name[c.mode], c.d,
                                h[(size_t)b * OUTW + 3] == 2 ? "a grid barrier never completed" : "a bulk copy never completed", b);
                        return 1;
                    }
                    per.push_back((double)h[(size_t)b * OUTW] / hops);
                    bytes += (double)h[(size_t)b * OUTW + 1];
                }
                std::sort(per.begin(), per.end());
                l.push_back(per[per.size() / 2]);
                bw.push_back(bytes / (ms * 1e6)); /* over the whole kernel, warm pass included */
            }
            std::sort(l.begin(), l.end());
            std::sort(bw.begin(), bw.end());
            lat[ch] = l[l.size() / 2];
            if (ch == 0) gbs = bw[bw.size() / 2];
        }
        if (c.mode == M_IDLE) idle_l2 = lat[0];
        const double flight_gpu = flight_sm * n_sm, model = idle_l2 + (gbs > 0 ? flight_gpu / gbs : 0.0);
        printf("%-10s %3d %2d %6d | %12.1f %12.2f | %8.0f | %12.1f %14.1f | %12.1f | %10.1f\n", mode_name[c.mode], c.sw,
               c.d, c.stage, flight_sm / 1024, flight_gpu / 1e6, gbs, lat[0], model, lat[1], lat[2]);
    }
    cudaFree(w);
    cudaFree(chain[0]);
    cudaFree(chain[1]);
    cudaFree(out);
    cudaFree(ctr);
    return 0;
}
