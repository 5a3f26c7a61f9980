/* Kernel lab: can a decode matvec stream its weights faster as one contiguous bulk copy per
 * block? Not a test, not production code; numbers for docs/PERF.md. Built by `make lab`, run
 * on the device: lab_bulk [reps].
 *
 * Question. The streamed matvec (mvs.cuh) reads a layer-sized tensor at 2.8-3.8 TB/s after a
 * fixed ~4.9 us per launch (PERF.md v2.9), against a 4.6 TB/s read stream. Each of its warps
 * streams two rows through its own cp.async ring: ~4200 row streams at once, and every 16
 * bytes cost a lane a copy instruction. Here a block owns a contiguous range of rows, so its
 * weights are one contiguous run of the quant plane and one of the scale plane; one producer
 * thread moves them in pages of PR whole rows with cp.async.bulk (the copy engine, no lane
 * instructions) into a ring of NS shared-memory slots (an mbarrier per slot for "full" and one
 * for "empty"), and 16 consumer warps compute: page k goes to warp group k mod (16 / PR), and
 * warp i of the group takes row i, lane l its 32-value units l, l + 32, ... (the one-token
 * kernels' per-lane order, so such a kernel could keep their bits).
 *
 * Timing as in lab_mvs: CUDA graphs of K launches back to back, each reading the previous
 * one's output (PDL: the producer starts copying before the wait), matrices rotating over a 3
 * GB pool so that every launch reads DRAM; median over replays of the time per launch. Q4_0
 * planes (16 code bytes and an fp16 scale per 32 values); the input is fp32, rounded to int8
 * per 32 values in each block (the no-norm prologue of the production kernel). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "bulk.cuh"
#include "kernels.h"
#include "lab.cuh"
#include "types.h"


static cudaStream_t st;

__device__ __forceinline__ uint32_t sa(const void *p) { return rl_smem_addr(p); }

/* A bounded wait: a lab kernel that deadlocks (a bug here) says where in diag (host-mapped:
 * role, page, block, parity) and goes on, instead of hanging the device run. */
__device__ __forceinline__ void mb_wait(uint32_t b, uint32_t parity, int *diag, int role, int k) {
    for (long it = 0;; it++) {
        if (mb_try(b, parity)) return;
        if (it == (1L << 22)) {
            if (atomicCAS(diag, 0, 1) == 0) {
                diag[1] = role;
                diag[2] = k;
                diag[3] = blockIdx.x;
                diag[4] = (int)parity;
                __threadfence_system();
            }
            return;
        }
    }
}

struct bulk_args {
    const uint8_t *q, *s; /* planes: rows of qb code bytes, rows of sb scale bytes */
    const float *x;       /* [n] */
    float *y;             /* [rows] */
    int *diag;            /* host-mapped [5]: the first wait that timed out */
    int rows, n;
};

/* MATH 0: the consumers only touch each page (one word per lane and row): the copy engine's
 * stream rate with this ring. MATH 1: the Q4_0 dot products. */
template <int PR, int NS, int MATH>
__global__ void __launch_bounds__(544) bulk_mv(const bulk_args a) {
    /* a slot must always go to the same warp group: a parity wait cannot tell phase k from
     * phase k + 2, so a group running ahead onto a slot another group has not refilled yet
     * would pass its wait (call 3's PR 4 / NS 10 failed that way) */
    static_assert(NS % (16 / PR) == 0, "slots must be a multiple of the warp groups");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* cp.async.bulk and tx-count mbarriers */
    extern __shared__ __align__(128) uint8_t sm[];
    rl_pdl_trigger();
    const int n = a.n, nu = n / 32, qb = nu * 16, sb = nu * 2, slot = PR * (qb + sb);
    uint64_t *full = (uint64_t *)sm, *empty = full + NS;
    int8_t *xq = (int8_t *)(sm + 16 * NS);
    float *xd = (float *)(xq + n);
    uint8_t *ring = (uint8_t *)(((uintptr_t)(xd + nu) + 127) & ~(uintptr_t)127);
    const int B = gridDim.x, b = blockIdx.x, r0 = (int)((long)a.rows * b / B), r1 = (int)((long)a.rows * (b + 1) / B);
    const int npages = (r1 - r0 + PR - 1) / PR, G = 16 / PR;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int i = 0; i < NS; i++) {
            mb_init(sa(&full[i]), 1);
            mb_init(sa(&empty[i]), PR);
        }
        mb_init_fence();
    }
    __syncthreads();
    if (warp == 16) { /* the producer: weights only, so before the PDL wait */
        if (lane == 0)
            for (int k = 0; k < npages; k++) {
                const int sl = k % NS, ra = r0 + k * PR, nr = r1 - ra < PR ? r1 - ra : PR;
                if (k >= NS) mb_wait(sa(&empty[sl]), ((k / NS) - 1) & 1, a.diag, 1, k);
                const uint32_t dst = sa(ring + (size_t)sl * slot);
                mb_expect(sa(&full[sl]), (uint32_t)(nr * (qb + sb)));
                bulk_copy(dst, a.q + (size_t)ra * qb, nr * qb, sa(&full[sl]));
                bulk_copy(dst + PR * qb, a.s + (size_t)ra * sb, nr * sb, sa(&full[sl]));
            }
        return;
    }
    rl_pdl_wait();
    /* stage the input: int8 per 32 values (4 threads per unit, 8 values each) */
    for (int c4 = threadIdx.x; c4 < nu * 4; c4 += 512) {
        const float4 *xv = (const float4 *)(a.x + 8 * c4);
        const float4 v0 = xv[0], v1 = xv[1];
        const float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
        float m = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) m = fmaxf(m, fabsf(v[j]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        const float d = m / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) xq[8 * c4 + j] = (int8_t)__float2int_rn(v[j] * id);
        if ((c4 & 3) == 0) xd[c4 / 4] = d;
    }
    asm volatile("bar.sync 1, 512;" ::: "memory"); /* the consumers only: the producer has left */
    const int g = warp / PR, i = warp % PR;
    for (int k = g; k < npages; k += G) {
        const int sl = k % NS, ra = r0 + k * PR;
        mb_wait(sa(&full[sl]), (k / NS) & 1, a.diag, 2, k);
        const uint8_t *pg = ring + (size_t)sl * slot;
        float acc = 0.0f;
        if (ra + i < r1) {
            const uint8_t *rq = pg + (size_t)i * qb;
            const __half *rs = (const __half *)(pg + PR * qb) + (size_t)i * nu;
            if (MATH == 0) {
                acc = (float)*(const uint32_t *)(rq + 16 * lane);
            } else {
                for (int c = lane; c < nu; c += 32) {
                    const int4 w = *(const int4 *)(rq + 16 * c);
                    const int4 xa = *(const int4 *)(xq + 32 * c), xc = *(const int4 *)(xq + 32 * c + 16);
                    const int ww[4] = {w.x, w.y, w.z, w.w}, xl[4] = {xa.x, xa.y, xa.z, xa.w}, xh[4] = {xc.x, xc.y, xc.z, xc.w};
                    int dot = 0, sx = 0;
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        dot = __dp4a(ww[j] & 0x0f0f0f0f, xl[j], dot);
                        dot = __dp4a((ww[j] >> 4) & 0x0f0f0f0f, xh[j], dot);
                        sx = __dp4a(0x01010101, xl[j], sx);
                        sx = __dp4a(0x01010101, xh[j], sx);
                    }
                    acc += __half2float(rs[c]) * xd[c] * (float)(dot - 8 * sx);
                }
            }
        }
        __syncwarp();
        if (lane == 0) mb_arrive(sa(&empty[sl]));
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0 && ra + i < r1) a.y[ra + i] = acc;
    }
#endif
}

/* Random codes; as fp16 scales the words are arbitrary numbers, which the timing ignores
 * (the dots' values are never looked at). */
__global__ void fill_random(uint32_t *p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t v = (uint32_t)i * 2654435761u + 0x9e3779b9u;
        v ^= v >> 15;
        v *= 2246822519u;
        v ^= v >> 13;
        p[i] = v & 0x3bff3bffu; /* fp16 halves below 1.0, no NaN or infinity */
    }
}


template <int PR, int NS, int MATH> static size_t smem_of(int n) {
    const size_t nu = n / 32;
    return 16 * NS + n + 4 * nu + 128 + (size_t)NS * PR * (nu * 18);
}

static int *diag;

template <int PR, int NS, int MATH>
static void run(const char *label, uint8_t *pool, size_t pool_bytes, float *x, float *y, int n, int n_sm, int reps) {
    const size_t nu = n / 32, qb = nu * 16, sb = nu * 2, smem = smem_of<PR, NS, MATH>(n);
    CKL(cudaFuncSetAttribute(bulk_mv<PR, NS, MATH>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    for (int rows : {4096, 12288, 22016, 32768, 65536}) {
        if (n > 4096 && rows > 8192) continue;
        const size_t qbytes = ((size_t)rows * qb + 255) & ~(size_t)255, sbytes = ((size_t)rows * sb + 255) & ~(size_t)255;
        const int nmat = (int)std::min((size_t)64, pool_bytes / (qbytes + sbytes));
        double us = time_graph(st, 64, reps, [&](int k) {
            bulk_args a;
            const uint8_t *m = pool + (size_t)(k % nmat) * (qbytes + sbytes);
            a.q = m;
            a.s = m + qbytes;
            a.x = (k & 1) ? y : x;
            a.y = (k & 1) ? x : y;
            a.rows = rows;
            a.n = n;
            a.diag = diag;
            CKL((cudaError_t)rl_launch(bulk_mv<PR, NS, MATH>, dim3(n_sm), dim3(544), smem, st, true, a));
        });
        const double mb = (double)rows * nu * 18 / 1e6;
        if (diag[0]) {
            printf("| %s | %d | %d | %d | %d | TIMED-OUT WAIT: role %s page %d block %d parity %d |\n", label, n, rows, PR, NS,
                   diag[1] == 1 ? "producer(empty)" : "consumer(full)", diag[2], diag[3], diag[4]);
            fflush(stdout);
            exit(1);
        }
        printf("| %s | %d | %d | %d | %d | %.1f | %.2f | %.0f |\n", label, n, rows, PR, NS, mb, us, mb * 1e6 / us / 1e3);
    }
}

int main(int argc, char **argv) {
    const int reps = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    CKL(cudaSetDeviceFlags(cudaDeviceMapHost));
    CKL(cudaHostAlloc(&diag, 8 * sizeof(int), cudaHostAllocMapped));
    memset(diag, 0, 8 * sizeof(int));
    cudaDeviceProp pr;
    CKL(cudaGetDeviceProperties(&pr, 0));
    CKL(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    printf("# %s, %d SMs, L2 %d MB\n", pr.name, pr.multiProcessorCount, pr.l2CacheSize >> 20);
    const size_t pool_bytes = (size_t)3 << 30;
    uint8_t *pool;
    CKL(cudaMalloc(&pool, pool_bytes));
    fill_random<<<1024, 256>>>((uint32_t *)pool, pool_bytes / 4);
    CKL(cudaDeviceSynchronize());
    float *x, *y;
    CKL(cudaMalloc(&x, 65536 * 4));
    CKL(cudaMalloc(&y, 65536 * 4));
    {
        std::vector<float> h(65536);
        for (size_t i = 0; i < h.size(); i++) h[i] = 0.5f + 0.001f * (float)(i % 1013);
        CKL(cudaMemcpy(x, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
        CKL(cudaMemcpy(y, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    }
    const int S = pr.multiProcessorCount;
    printf("\n| kernel | n | rows | rows/page | slots | MB | us/launch | GB/s |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    run<8, 10, 0>("bulk, touch only", pool, pool_bytes, x, y, 4096, S, reps);
    run<16, 5, 1>("bulk, Q4_0 dots", pool, pool_bytes, x, y, 4096, S, reps);
    run<8, 10, 1>("bulk, Q4_0 dots", pool, pool_bytes, x, y, 4096, S, reps);
    run<4, 8, 1>("bulk, Q4_0 dots", pool, pool_bytes, x, y, 4096, S, reps);
    run<4, 12, 1>("bulk, Q4_0 dots", pool, pool_bytes, x, y, 4096, S, reps);
    run<2, 16, 1>("bulk, Q4_0 dots", pool, pool_bytes, x, y, 4096, S, reps);
    run<2, 32, 1>("bulk, Q4_0 dots", pool, pool_bytes, x, y, 4096, S, reps);
    run<4, 8, 0>("bulk, touch only", pool, pool_bytes, x, y, 11008, S, reps);
    run<4, 8, 1>("bulk, Q4_0 dots", pool, pool_bytes, x, y, 11008, S, reps);
    run<2, 16, 1>("bulk, Q4_0 dots", pool, pool_bytes, x, y, 11008, S, reps);
    run<1, 32, 1>("bulk, Q4_0 dots", pool, pool_bytes, x, y, 11008, S, reps);
    return 0;
}
