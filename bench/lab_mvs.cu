/* Kernel lab for decoding's streamed matvec (src/cuda/mvs.cu), on a GPU: where a launch's time
 * goes. Not a test; numbers for docs/PERF.md. Built by `make lab` (nvcc); run on the device:
 *
 *   lab_mvs [reps] [sections: a comma list of 1, 1b, 2, 3, 4; default all]
 *
 * Every timing is a CUDA graph of K launches back to back (the decode graph's situation: each
 * launch's input is the previous one's output buffer, PDL as in decoding), replayed `reps`
 * times; the figure is the median over replays of the time per launch. The matrices rotate
 * over a pool several times the L2, so every launch reads its weights from DRAM.
 *
 *  1. the production kernel (rl_mvs_launch, Q4_0 and Q8_0 in the plane layout, 8-bit
 *     activations, RMS norm prologue) over rows at n = 4096 and at n = 11008: time against
 *     bytes gives the fixed cost per launch (intercept) and the streaming rate (slope);
 *     the same without the norm, and without PDL; with the bulk pages (RL_CUDA_MVB) at two
 *     page sizes, without the norm, and in at most 8 slots; with 8-warp blocks; and with one
 *     block per SM where two would fit. Then the cp.async ring's depth (stages per warp) with
 *     the grid at one block per SM, the blocks per SM the resources allow printed beside it;
 *  1b. a timeline of one launch in the chain (trace_kernel: per warp, when it started, when its
 *     PDL wait returned, when its input was staged, when its first stage landed, when it
 *     ended): what the fixed cost per launch is made of;
 *  2. read-only kernels with the streamed matvec's access pattern (each warp two rows, 512
 *     contiguous bytes per row per step) and with a sequential pattern over the same bytes,
 *     to separate what DRAM gives each pattern from what the matvec's instructions cost;
 *  3. an empty kernel chained with PDL: the floor of a launch inside a graph;
 *  4. RQ2, RQ4 and Q4_0 on tensors larger than the L2 (issue 5's 2-bit kernel goal), against
 *     the read ceiling. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "kernels.h"
#include "lab.cuh"
#include "mvs.cuh"
#include "types.h"

static int n_sm;
static cudaStream_t st;

/* ---- read-only pattern kernels (lab only) ----------------------------------------------------- */

/* Warp w of G reads items w, w + G, ...: item p is rows 2p and 2p + 1 of a [rows][rb16 * 16]
 * plane, each row in steps of 32 16-byte pieces (512 contiguous bytes), U steps of both rows in
 * flight. TILED: the same bytes laid out step-major ([step][item][row][512 B]), so the warps on
 * one step read one contiguous region. */
template <bool TILED>
__global__ void __launch_bounds__(512) rows_read(const uint4 *m, int items, int steps, uint32_t *sink) {
    const int lane = threadIdx.x & 31, G = gridDim.x * (blockDim.x >> 5);
    const int w = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    constexpr int U = 4;
    uint32_t acc = 0;
    for (int p = w; p < items; p += G)
        for (int j0 = 0; j0 < steps; j0 += U) {
            uint4 v[2 * U];
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const int j = j0 + u;
                    size_t idx = TILED ? (((size_t)j * items + p) * 2 + i) * 32 + lane
                                       : ((size_t)(2 * p + i) * steps + j) * 32 + lane;
                    v[2 * u + i] = j < steps ? __ldcs(m + idx) : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
            for (int k = 0; k < 2 * U; k++) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
        }
    for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0 && acc == 0x9e3779b9u) sink[w] = acc;
}

__global__ void empty_kernel(int *p) {
    rl_pdl_trigger();
    rl_pdl_wait();
    if (p && threadIdx.x == 0 && blockIdx.x == 0) p[0]++;
}


/* ---- the production matvec -------------------------------------------------------------------- */

struct pool {
    uint8_t *buf;
    size_t bytes;
};

/* A pool of random bytes; fp16 scales are written over the scale planes per matrix. */
static pool make_pool(size_t bytes) {
    pool p;
    p.bytes = bytes;
    CKL(cudaMalloc(&p.buf, bytes));
    std::vector<uint32_t> h(1 << 20);
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    for (auto &v : h) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        v = (uint32_t)s;
    }
    for (size_t o = 0; o < bytes; o += h.size() * 4)
        CKL(cudaMemcpy(p.buf + o, h.data(), std::min(h.size() * 4, bytes - o), cudaMemcpyHostToDevice));
    return p;
}

__global__ void fill_half(__half *p, size_t n, float v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2half(v * (1.0f + 0.001f * (float)(i % 97)));
}

struct mat {
    rl_dmat w;
    size_t bytes;
};

/* Matrices of rows x n of type T (Q4_0, Q8_0, RQ2, RQ4) carved one after another from the
 * pool, as many as fit: random quants or codes, and the scale plane's halves (RQ2 / RQ4: d and
 * m) written small. */
static std::vector<mat> carve(pool &P, uint32_t T, int rows, int n) {
    const bool rq = T == RL_RQ2 || T == RL_RQ4;
    const size_t vu = rq ? 64 : 32, ub = T == RL_Q4_0 || T == RL_RQ2 ? 16 : 32, nu = (size_t)n / vu;
    const size_t qb = nu * ub, sb = nu * (rq ? 4 : 2);
    const size_t q_bytes = ((size_t)rows * qb + 255) & ~(size_t)255, s_bytes = ((size_t)rows * sb + 255) & ~(size_t)255;
    std::vector<mat> v;
    for (size_t off = 0; off + q_bytes + s_bytes <= P.bytes && v.size() < 4096; off += q_bytes + s_bytes) {
        mat m;
        m.w.type = T;
        m.w.q = P.buf + off;
        m.w.s = P.buf + off + q_bytes;
        m.w.q_row = qb;
        m.w.s_row = sb;
        m.w.rows = rows;
        m.w.cols = n;
        m.bytes = (size_t)rows * (qb + sb);
        fill_half<<<64, 256>>>((__half *)m.w.s, (size_t)rows * sb / 2, 0.002f);
        v.push_back(m);
    }
    CKL(cudaDeviceSynchronize());
    return v;
}

/* Blocks of W warps for a launch of rows / 2 items with at most bps blocks per SM resident:
 * rl_mvs_launch's sizing (items per warp as even as the resident warps allow). */
static int lab_grid(int rows, int W, int bps) {
    const int items = rows / 2, cap = bps * n_sm * W, ipw = (items + cap - 1) / cap;
    return (items + ipw * W - 1) / (ipw * W);
}

/* Launch i of a chain over the matrices ms (STORE, 8-bit activations, one token): it reads
 * what launch i - 1 wrote (x and y ping-pong: a dependency, as in decoding). */
static rl_mv_args chain_args(const std::vector<mat> &ms, int i, float *x, float *y, int n, int rows, const float *norm_w) {
    rl_mv_args a;
    memset(&a, 0, sizeof a);
    a.seg[0].w = ms[i % ms.size()].w;
    a.seg[0].y = (i & 1) ? x : y;
    a.x = (i & 1) ? y : x;
    a.nseg = 1;
    a.mode = RL_MV_STORE;
    a.norm_w = norm_w;
    a.eps = 1e-5f;
    a.n = n;
    a.fast = true;
    a.ns = 1;
    a.ys = rows;
    return a;
}

/* The trace kernel's staging hook: the stages that the launch did not prefetch before the wait,
 * issued once the input's loads are in flight (so that they do not queue ahead of them). */
template <class W> struct lab_hook : mv_hook {
    W *w;
    int rest;
    __device__ __forceinline__ void loading() const { w->prefetch(rest); }
};

/* The input by bulk copy (trace_kernel's XB; sm_90). The question: do the staging's loads of x
 * from L2 wait behind the ring's cp.async copies in the SM's load path (the timeline put the
 * staging at 2.3-3.9 us of a layer-sized launch, docs/PERF.md v2.17, v2.18)? Here thread 0
 * moves the norm weights (before the wait) and x (after it) into shared memory by
 * cp.async.bulk, which bypasses that path, counted on one mbarrier, and the staging reads
 * those copies: the same values in the same order. (Answer, v2.19: no faster; a production
 * knob built on it lost 4-14% in decoding and was removed.)
 * buf: n floats for x, then n for the norm weights when a has them, then the barrier (8
 * bytes); xb_bytes in all, 16-byte aligned. begin() ends with a block barrier. */
__host__ __device__ inline size_t xb_bytes(int n, bool norm) { return (size_t)n * 4 * (norm ? 2 : 1) + 16; }

struct xb_hook : mv_hook {
    float *x, *w;
    uint32_t bar;
    __device__ __forceinline__ const float *norm_w(const rl_mv_args &) const { return w; }
    __device__ __forceinline__ const float *input(const rl_mv_args &) const { return x; }

    __device__ __forceinline__ void begin(const rl_mv_args &a, float *buf) {
        x = buf;
        w = a.norm_w ? buf + a.n : nullptr;
        bar = rl_smem_addr(buf + (size_t)a.n * (a.norm_w ? 2 : 1));
        if (threadIdx.x == 0) {
            const uint32_t bytes = (uint32_t)a.n * 4;
            mb_init(bar, 1);
            mb_init_fence();
            mb_expect(bar, w ? 2 * bytes : bytes);
            if (w) bulk_copy(rl_smem_addr(w), a.norm_w, bytes, bar);
        }
        __syncthreads(); /* the barrier is initialised before any thread waits on it */
    }
    /* after the PDL wait: x's copy, then every thread waits for both */
    __device__ __forceinline__ void fetch(const rl_mv_args &a) const {
        if (threadIdx.x == 0) bulk_copy(rl_smem_addr(x), a.x, (uint32_t)a.n * 4, bar);
        while (!mb_try(bar, 0)) {
        }
    }
};

/* mvs_kernel (non-GLU, 8-bit activations) with a ring of DS stages per warp (production takes
 * mvs_tr<T>::D) and a timeline: for launch `on` of a graph, lane 0 of every warp writes 8
 * values at tr + 8 * warp: %globaltimer (ns) at its start, clock64() at its start, after the
 * PDL wait, once the input is staged, once its first stage has landed, at its end, and
 * %globaltimer at its end (the cycle counters are per SM; the two timers place them).
 * Variants: PRE stages prefetched before the wait (production DS - 1), the rest once the input
 * is being loaded (lab_hook); STAGE false: no staging at all (the values are wrong; the floor
 * of a launch without a prologue). */
template <int T, int DS, int PRE = DS - 1, bool STAGE = true, bool XB = false>
__global__ void __launch_bounds__(512) trace_kernel(const __grid_constant__ rl_mv_args a, long long *tr, int on) {
    extern __shared__ __align__(16) float xs[];
    __shared__ double red[32];
    const unsigned long long g0 = rl_gtimer();
    const long long c0 = clock64();
    rl_pdl_trigger();
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5, lane = threadIdx.x & 31;
    long long *t = on ? tr + 8 * ((size_t)blockIdx.x * nw + warp) : nullptr;
    using W = mvs_warp<T, false, true, false, DS>;
    W w;
    uint8_t *rings = (uint8_t *)xs + mvs_x_bytes(a.n, true);
    xb_hook xb;
    if constexpr (XB) xb.begin(a, (float *)(rings + (size_t)nw * DS * mvs_tr<T>::STAGE));
    w.init(&a, rings + (size_t)warp * DS * mvs_tr<T>::STAGE, blockIdx.x * nw + warp, gridDim.x * nw);
    w.prefetch(PRE);
    rl_pdl_wait();
    const long long c1 = clock64();
    if constexpr (XB) {
        xb.fetch(a);
        w.template run<true, STAGE>(xs, red, t ? t + 3 : nullptr, xb);
    } else {
        w.template run<true, STAGE>(xs, red, t ? t + 3 : nullptr, lab_hook<W>{{}, &w, DS - 1 - PRE});
    }
    if (t && lane == 0) {
        const unsigned long long g1 = rl_gtimer();
        t[0] = (long long)g0;
        t[1] = c0;
        t[2] = c1;
        t[6] = (long long)g1;
    }
}

/* One row of the timeline: launch 40 of the 64 in the graph traced; per warp, the times from
 * the launch's earliest warp start (µs): percentiles over the warps. The variant
 * (trace_kernel's) is named in the ring column: PRE stages prefetched before the wait, no
 * staging (!STAGE). */
template <int T, int DS, int PRE = DS - 1, bool STAGE = true, bool XB = false>
static void trace_row(const std::vector<mat> &ms, int n, int rows, const float *nw, float *x, float *y, int reps, bool norm) {
    const int W = 16, K = 64, ON = 40;
    /* shared memory padded as the production launch pads it (one 16-warp block per SM) */
    int optin = 0;
    CKL(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    const size_t smem = rl_mvs_pad((const void *)trace_kernel<T, DS, PRE, STAGE, XB>, W,
                                   mvs_x_bytes(n, true) + (size_t)W * DS * mvs_tr<T>::STAGE +
                                       (XB ? xb_bytes(n, norm) : 0),
                                   (size_t)optin - 1024);
    CKL(cudaFuncSetAttribute(trace_kernel<T, DS, PRE, STAGE, XB>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int occ = 0;
    CKL(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, trace_kernel<T, DS, PRE, STAGE, XB>, W * 32, smem));
    const int blocks = lab_grid(rows, W, occ), nwarps = blocks * W;
    long long *tr;
    CKL(cudaMalloc(&tr, (size_t)nwarps * 8 * sizeof(long long)));
    double us = time_graph(st, K, reps, [&](int i) {
        CKL((cudaError_t)rl_launch(trace_kernel<T, DS, PRE, STAGE, XB>, dim3(blocks), dim3(W * 32), smem, st, true,
                                   chain_args(ms, i, x, y, n, rows, norm ? nw : NULL), tr, (int)(i == ON)));
    });
    std::vector<long long> h((size_t)nwarps * 8);
    CKL(cudaMemcpy(h.data(), tr, h.size() * sizeof(long long), cudaMemcpyDeviceToHost));
    CKL(cudaFree(tr));
    /* ns per cycle over all warps, then every event placed at start + cycles * ratio */
    double gs = 0, cs = 0;
    long long t0 = h[0];
    for (int w = 0; w < nwarps; w++) {
        gs += (double)(h[8 * w + 6] - h[8 * w]);
        cs += (double)(h[8 * w + 5] - h[8 * w + 1]);
        t0 = std::min(t0, h[8 * w]);
    }
    const double r = gs / cs;
    static const char *ev[5] = {"start", "waited", "staged", "first stage", "end"};
    printf("| %s | %d | %d | %.1f | %s | %d stages, %d before the wait%s, %.2f us/launch, %.3f ns/cycle |",
           T == RL_Q4_0 ? "Q4_0" : "Q8_0", n, rows, ms[0].bytes / 1e6, norm ? "yes" : "no", DS, PRE,
           STAGE ? (XB ? ", input by bulk copy" : "") : ", NO STAGING", us, r);
    for (int e = 0; e < 5; e++) {
        std::vector<double> v(nwarps);
        for (int w = 0; w < nwarps; w++)
            v[w] = ((double)(h[8 * w] - t0) + (double)(h[8 * w + 1 + e] - h[8 * w + 1]) * r) / 1e3;
        std::sort(v.begin(), v.end());
        printf(" %s %.2f/%.2f/%.2f/%.2f |", ev[e], v[0], v[nwarps / 10], v[nwarps / 2], v[nwarps - 1]);
    }
    printf("\n");
}

/* One row of the depth experiment: 16 warps, the norm, PDL, grid of at most bpsm blocks per SM
 * (mvs.cu's sizing), the blocks per SM the resources allow printed beside the time. */
template <int T, int DS>
static void depth_row(const std::vector<mat> &ms, int n, int rows, const float *nw, float *x, float *y, int reps, int bpsm) {
    const int W = 16;
    const size_t smem = mvs_x_bytes(n, true) + (size_t)W * DS * mvs_tr<T>::STAGE;
    CKL(cudaFuncSetAttribute(trace_kernel<T, DS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int occ = 0;
    CKL(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, trace_kernel<T, DS>, W * 32, smem));
    const int blocks = lab_grid(rows, W, std::min(occ, bpsm));
    double us = time_graph(st, 64, reps, [&](int i) {
        CKL((cudaError_t)rl_launch(trace_kernel<T, DS>, dim3(blocks), dim3(W * 32), smem, st, true,
                                   chain_args(ms, i, x, y, n, rows, nw), (long long *)nullptr, 0));
    });
    char name[96];
    snprintf(name, sizeof name, "cp.async %d stages, %.0f KB/block, fits %d/SM, grid %d", DS, smem / 1024.0, occ, blocks);
    printf("| %s | %d | %d | %.1f | yes | yes | %s | %.2f | %.0f |\n", T == RL_Q4_0 ? "Q4_0" : "Q8_0", n, rows,
           ms[0].bytes / 1e6, name, us, ms[0].bytes / us / 1e3);
}

int main(int argc, char **argv) {
    const int reps = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : 20;
    /* the sections to run, as a comma list (default all): 1 (the production kernel and the
     * depth rows), 1b (timelines), 2 (read patterns), 3 (the empty kernel), 4 (RQ2 / RQ4 /
     * Q4_0 on tensors larger than the L2, against the read ceiling) */
    const char *only = argc > 2 ? argv[2] : "1,1b,2,3,4";
    auto want = [&](const char *sec) {
        const size_t l = strlen(sec);
        for (const char *p = only; (p = strstr(p, sec)) != nullptr; p += l)
            if ((p == only || p[-1] == ',') && (p[l] == ',' || !p[l])) return true;
        return false;
    };
    cudaDeviceProp pr;
    CKL(cudaGetDeviceProperties(&pr, 0));
    n_sm = pr.multiProcessorCount;
    CKL(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CKL((cudaError_t)rl_mvs_prepare());
    printf("# %s, %d SMs, L2 %d MB\n", pr.name, n_sm, pr.l2CacheSize >> 20);

    const size_t pool_bytes = (size_t)3 << 30; /* 3 GB: 50x the L2 */
    pool P = make_pool(pool_bytes);
    const int nmax = 16384;
    float *x, *y, *nw;
    CKL(cudaMalloc(&x, 2 * sizeof(float) * 65536));
    CKL(cudaMalloc(&y, 2 * sizeof(float) * 65536));
    CKL(cudaMalloc(&nw, sizeof(float) * nmax));
    {
        std::vector<float> h(65536 * 2);
        for (size_t i = 0; i < h.size(); i++) h[i] = 0.5f + 0.001f * (float)(i % 1013);
        CKL(cudaMemcpy(x, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
        CKL(cudaMemcpy(y, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
        CKL(cudaMemcpy(nw, h.data(), nmax * 4, cudaMemcpyHostToDevice));
    }
    rl_cuda_knobs kn;
    memset(&kn, 0, sizeof kn);
    kn.mv_warps = 16;
    kn.mv_blocks_per_sm = 8;
    kn.pdl = 2;
    kn.mvs = 2;
    const int K = 64;

    /* 1. the production kernel */
    if (want("1")) printf("\n| type | n | rows | MB | norm | pdl | copies | us/launch | GB/s |\n| --- | ---: | ---: | ---: | --- | --- | --- | ---: | ---: |\n");
    const uint32_t types[2] = {RL_Q4_0, RL_Q8_0};
    for (uint32_t T : types)
        for (int n : {4096, 11008}) {
            if (!want("1")) break;
            const int rows_list[] = {512, 2048, 4096, 8192, 12288, 22016, 32768, 65536};
            for (int rows : rows_list) {
                if (n == 11008 && rows > 8192) continue;
                std::vector<mat> ms = carve(P, T, rows, n);
                if (ms.size() < 4) continue;
                /* variants: 0 as decoding runs it, 1 without the norm, 2 without PDL; from 3
                 * the bulk pages (RL_CUDA_MVB, mvs.cuh mvb_block): pages of about 8, 2 and 16
                 * KB; 8 and 16 KB without the norm; 8 KB in at most 8 slots (lab_bulk's
                 * fastest ring: pages of 4 rows, 8 slots, no norm) */
                static const struct {
                    int page, slots;
                    bool norm, bulk;
                    int warps, bpsm; /* warps per block, most blocks per SM in the grid */
                    const char *name;
                } bv[] = {{8, 64, true, false, 16, 8, "cp.async"},
                          {8, 64, false, false, 16, 8, "cp.async"},
                          {8, 64, true, false, 16, 8, "cp.async"},
                          {8, 64, true, true, 16, 8, "bulk 8 KB"},
                          {16, 64, true, true, 16, 8, "bulk 16 KB"},
                          {8, 64, false, true, 16, 8, "bulk 8 KB"},
                          {8, 8, true, true, 16, 8, "bulk 8 KB, <= 8 slots"},
                          {8, 8, true, true, 16, 1, "bulk 8 KB, <= 8 slots, grid 1/SM"},
                          {8, 8, false, true, 16, 1, "bulk 8 KB, <= 8 slots, grid 1/SM"},
                          {8, 64, true, false, 8, 8, "cp.async 8 warps"},
                          {8, 64, true, false, 8, 1, "cp.async 8 warps, grid 1/SM"}};
                for (int variant = 0; variant < (int)(sizeof bv / sizeof bv[0]); variant++) {
                    const bool norm = bv[variant].norm;
                    kn.pdl = variant == 2 ? 0 : 2;
                    kn.mvb = bv[variant].bulk;
                    kn.mvb_page = bv[variant].page;
                    kn.mvb_slots = bv[variant].slots;
                    kn.mv_warps = bv[variant].warps;
                    kn.mv_blocks_per_sm = bv[variant].bpsm;
                    if (variant && variant < 3 && rows != 4096 && rows != 12288 && rows != 32768) continue;
                    if (variant >= 3 && rows != 4096 && rows != 12288 && rows != 65536) continue;
                    double us = time_graph(st, K, reps, [&](int i) {
                        const rl_mv_args a = chain_args(ms, i, x, y, n, rows, norm ? nw : NULL);
                        if (rl_mvs_launch(&a, &kn, n_sm, st, NULL) != 1 || rl_mvb_applies(&a, &kn) != (kn.mvb != 0)) {
                            fprintf(stderr, "lab_mvs: the streamed matvec did not launch as asked (bulk %d)\n", kn.mvb);
                            exit(1);
                        }
                    });
                    printf("| %s | %d | %d | %.1f | %s | %s | %s | %.2f | %.0f |\n", T == RL_Q4_0 ? "Q4_0" : "Q8_0", n, rows,
                           ms[0].bytes / 1e6, norm ? "yes" : "no", kn.pdl ? "yes" : "no",
                           bv[variant].name, us, ms[0].bytes / us / 1e3);
                }
                /* the ring's depth, with the grid at one block per SM: does a block small
                 * enough for two per SM (the next launch's block resident beside this one's,
                 * prefetching during its tail) beat the deeper ring? */
                if (rows == 4096 || rows == 12288 || rows == 22016 || rows == 65536 || (n == 11008 && rows == 8192)) {
                    if (T == RL_Q4_0) {
                        depth_row<RL_Q4_0, 8>(ms, n, rows, nw, x, y, reps, 1);
                        depth_row<RL_Q4_0, 6>(ms, n, rows, nw, x, y, reps, 1);
                        depth_row<RL_Q4_0, 5>(ms, n, rows, nw, x, y, reps, 1);
                        depth_row<RL_Q4_0, 4>(ms, n, rows, nw, x, y, reps, 2);
                    } else {
                        depth_row<RL_Q8_0, 4>(ms, n, rows, nw, x, y, reps, 1);
                        depth_row<RL_Q8_0, 3>(ms, n, rows, nw, x, y, reps, 1);
                    }
                }
            }
        }
    kn.pdl = 2;
    kn.mv_warps = 16;
    kn.mv_blocks_per_sm = 8;

    /* 1b. timelines of one launch in the chain: per warp, µs from the launch's first warp start,
     * min / p10 / median / max over the warps; on the QKV shape (and down's, and Q8_0's) the
     * input by bulk copy (xb_hook), 2 ring stages before the PDL wait (docs/PERF.md v2.18:
     * faster here, not in decoding), and the floor without staging */
    if (want("1b")) {
        printf("\n| type | n | rows | MB | norm | ring, time | start | PDL wait returned | input staged | first stage landed | end |\n"
               "| --- | ---: | ---: | ---: | --- | --- | --- | --- | --- | --- | --- |\n");
        for (int rows : {4096, 12288, 65536}) {
            std::vector<mat> ms = carve(P, RL_Q4_0, rows, 4096);
            trace_row<RL_Q4_0, 5>(ms, 4096, rows, nw, x, y, reps, true);
            trace_row<RL_Q4_0, 5, 4, true, true>(ms, 4096, rows, nw, x, y, reps, true);
            if (rows != 12288) continue;
            trace_row<RL_Q4_0, 5, 2>(ms, 4096, rows, nw, x, y, reps, true);
            trace_row<RL_Q4_0, 5, 4, false>(ms, 4096, rows, nw, x, y, reps, true);
            trace_row<RL_Q4_0, 5>(ms, 4096, rows, nw, x, y, reps, false);
            trace_row<RL_Q4_0, 5, 4, true, true>(ms, 4096, rows, nw, x, y, reps, false);
        }
        std::vector<mat> ms = carve(P, RL_Q4_0, 4096, 11008);
        trace_row<RL_Q4_0, 5>(ms, 11008, 4096, nw, x, y, reps, false);
        trace_row<RL_Q4_0, 5, 4, true, true>(ms, 11008, 4096, nw, x, y, reps, false);
        trace_row<RL_Q4_0, 5, 4, false>(ms, 11008, 4096, nw, x, y, reps, false);
        std::vector<mat> m8 = carve(P, RL_Q8_0, 12288, 4096);
        trace_row<RL_Q8_0, 4>(m8, 4096, 12288, nw, x, y, reps, true);
        trace_row<RL_Q8_0, 4, 3, true, true>(m8, 4096, 12288, nw, x, y, reps, true);
        trace_row<RL_Q8_0, 4, 3, false>(m8, 4096, 12288, nw, x, y, reps, true);
    }

    /* 2. read-only patterns over bytes shaped like a Q4_0 quant plane: rows of 4 steps of 512
     * B (n = 4096), 8 and 22 steps (longer rows, n = 8192 and ~11008) */
    if (want("2")) printf("\n| pattern | MB | warps/SM | us/launch | GB/s |\n| --- | ---: | ---: | ---: | ---: |\n");
    uint32_t *sink;
    CKL(cudaMalloc(&sink, 4 << 20));
    for (int steps : {4, 8, 22}) {
        if (!want("2")) break;
        for (int items : {2048, 6144, 11008}) {
            const size_t bytes = (size_t)items * 2 * steps * 512;
            const int nmat = (int)std::min((size_t)64, pool_bytes / bytes);
            for (int wps : {16, 32})
                for (int tiled = 0; tiled < 2; tiled++) {
                    const int blocks = n_sm * wps / 16;
                    double us = time_graph(st, K, reps, [&](int i) {
                        const uint4 *m = (const uint4 *)(P.buf + (size_t)(i % nmat) * bytes);
                        if (tiled) rows_read<true><<<blocks, 512, 0, st>>>(m, items, steps, sink);
                        else rows_read<false><<<blocks, 512, 0, st>>>(m, items, steps, sink);
                    });
                    printf("| %s, %d steps of 512 B per row, %d items | %.1f | %d | %.2f | %.0f |\n",
                           tiled ? "step-major" : "row-major", steps, items, bytes / 1e6, wps, us, bytes / us / 1e3);
                }
            const size_t n16 = bytes / 16;
            double us = time_graph(st, K, reps, [&](int i) {
                rl_read_stream_launch(P.buf + (size_t)(i % nmat) * bytes, n16, sink, n_sm * 4, st);
            });
            printf("| sequential (read_stream) | %.1f | | %.2f | %.0f |\n", bytes / 1e6, us, bytes / us / 1e3);
        }
    }

    /* 4. issue 5's kernel goal: the streamed matvec alone on tensors larger than the L2 (n =
     * 4096, 8-bit activations, the norm, PDL, a chain as in 1), RQ2 beside RQ4 and Q4_0, by
     * cp.async rings and by bulk pages; GB/s against the read ceiling measured as
     * `rawloop bench` measures it (cuda_ceiling: the best of 5 passes of rl_read_stream over
     * 2 GiB after a warm-up) */
    if (want("4")) {
        const size_t cb = (size_t)2 << 30;
        double best = 0;
        for (int r = 0; r < 6; r++) {
            cudaEvent_t e0, e1;
            CKL(cudaEventCreate(&e0));
            CKL(cudaEventCreate(&e1));
            CKL(cudaEventRecord(e0, st));
            rl_read_stream_launch(P.buf, cb / 16, sink, n_sm * 4, st);
            CKL(cudaEventRecord(e1, st));
            CKL(cudaEventSynchronize(e1));
            float ms = 0;
            CKL(cudaEventElapsedTime(&ms, e0, e1));
            if (r > 0) best = std::max(best, (double)cb / (ms * 1e-3) / 1e9);
            cudaEventDestroy(e0);
            cudaEventDestroy(e1);
        }
        printf("\nread ceiling (rl_read_stream, 2 GiB, best of 5): %.0f GB/s\n", best);
        printf("\n| type | rows | MB | copies | us/launch | GB/s | share of the ceiling |\n| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
        for (uint32_t T : {RL_RQ2, RL_RQ4, RL_Q4_0})
            for (int rows : {22016, 65536, 131072}) {
                std::vector<mat> ms = carve(P, T, rows, 4096);
                if (ms.size() < 4) continue;
                for (int bulk = 0; bulk < 2; bulk++) {
                    kn.mvb = bulk;
                    kn.mvb_page = 8;
                    kn.mvb_slots = 8;
                    double us = time_graph(st, K, reps, [&](int i) {
                        const rl_mv_args a = chain_args(ms, i, x, y, 4096, rows, nw);
                        if (rl_mvs_launch(&a, &kn, n_sm, st, NULL) != 1 || rl_mvb_applies(&a, &kn) != (bulk != 0)) {
                            fprintf(stderr, "lab_mvs: the streamed matvec did not launch as asked (bulk %d)\n", bulk);
                            exit(1);
                        }
                    });
                    const double gbps = ms[0].bytes / us / 1e3;
                    printf("| %s | %d | %.1f | %s | %.2f | %.0f | %.1f%% |\n",
                           T == RL_RQ2 ? "RQ2" : T == RL_RQ4 ? "RQ4" : "Q4_0", rows, ms[0].bytes / 1e6,
                           bulk ? "bulk 8 KB, <= 8 slots" : "cp.async (production)", us, gbps, 100 * gbps / best);
                }
            }
        kn.mvb = 0;
    }

    /* 3. an empty kernel, chained with and without PDL */
    for (int pdl = 0; pdl < 2 && want("3"); pdl++) {
        double us = time_graph(st, K, reps, [&](int) {
            rl_launch(empty_kernel, dim3(n_sm), dim3(512), 0, st, pdl != 0, (int *)sink);
        });
        printf("\nempty kernel, %d blocks of 512, pdl %d: %.2f us/launch\n", n_sm, pdl, us);
    }
    return 0;
}
