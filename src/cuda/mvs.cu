/* Streamed matvec (v2.4): decoding's matvec for the weight types stored as planes (Q4_0, Q8_0:
 * a quant plane and an fp16 scale plane; F16, BF16: rows), with the weights brought to the
 * lanes through a ring of shared-memory stages instead of registers.
 *
 * Why: mv_kernel (matvec.cu) loads U units of both rows into registers, waits for them,
 * computes, and loads again: each warp alternates between waiting for memory and computing,
 * the bytes in flight per SM are capped by the register budget (Q4_0: 64 registers, ~32-64 KB
 * per SM), and each new work item starts with a full memory round trip. On Llama-2-7B its big
 * matrices read at 1.0-2.2 TB/s of the H200's ~4.6 (docs/PERF.md v2.3). Here each warp keeps
 * D - 1 stages of cp.async copies in flight while it computes the oldest one, and the stream
 * runs on across work items, so the loads never stop between items; the bytes in flight are
 * bounded by shared memory, not registers.
 *
 * Same arithmetic as mv_kernel: work item p (two rows), lane l takes units l, l + 32, ... of
 * both rows in that order through the same dot functions (dot_q8, dot2), and mv_finish's
 * butterfly and epilogue. So the two kernels give the same bits, and the exact chunks (which
 * keep mv_kernel) stay bit-identical to decoding.
 *
 * Stage j of an item: units 32j .. 32j + 31 of its two rows, per row 32 * 16 * NV bytes of
 * quants (copied as contiguous 16-byte pieces, so each copy instruction of the warp covers 512
 * contiguous bytes) and, with a scale plane, the 64 bytes of the 32 units' fp16 scales (16
 * lanes x 4 bytes). A lane reads back its own unit's pieces; the pieces are stored XOR-swizzled
 * so that a quarter-warp's 16-byte reads of units NV pieces apart hit 8 distinct bank groups. */
#include "mv.cuh"

/* The streamed types and their stage layout. D: stages in the ring per warp (D - 1 in flight
 * while one is computed), sized so a warp's ring is 8-12 KB. */
__host__ __device__ constexpr bool mvs_type(int T) {
    return T == RL_Q4_0 || T == RL_Q8_0 || T == RL_F16 || T == RL_BF16;
}
template <int T> struct mvs_tr {
    static constexpr int NV = mv_tr<T>::NV;                 /* 16-byte pieces per 32-value unit */
    static constexpr bool S = T == RL_Q4_0 || T == RL_Q8_0; /* has a scale plane */
    /* units per lane and row in one stage (4 for Q4_0 / 2 for Q8_0, to spread a stage's fixed
     * costs over more weights, measured slower: docs/PERF.md v2.4) */
    static constexpr int W = 1;
    static constexpr int QB = 32 * 16 * NV;                 /* one row's quants of one unit step */
    static constexpr int ROW = W * (QB + (S ? 64 : 0));
    static constexpr int STAGE = 2 * ROW;
    /* stages in a warp's ring (D - 1 in flight while one is computed): 8-12 KB per warp */
    static constexpr int D = T == RL_Q4_0 ? 8 : T == RL_Q8_0 ? 4 : 3;
};

__device__ __forceinline__ void cp16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src)
                 : "memory");
}
__device__ __forceinline__ void cp4(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src)
                 : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* Slot of 16-byte piece P of a row's stage: the XOR keeps it within its group of 8 pieces. */
template <int NV> __device__ __forceinline__ int swz(int P) { return P ^ ((P >> 3) & (NV - 1)); }

/* Shared memory before the rings: the staged input, rounded up to 16 bytes. */
__host__ __device__ inline size_t mvs_x_bytes(int n, bool q8) { return (stage_bytes(n, q8) + 15) & ~(size_t)15; }

template <int T, bool GLU, bool Q8>
__global__ void __launch_bounds__(512) mvs_kernel(const rl_mv_args a) {
    using TR = mvs_tr<T>;
    constexpr int NV = TR::NV, D = TR::D, W = TR::W;
    extern __shared__ __align__(16) float xs[];
    __shared__ double red[32];
    rl_pdl_trigger();
    const int n = a.n, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    /* J stages per item, each W unit steps of 32 units */
    const int nu = n / 32, J = (nu + 32 * W - 1) / (32 * W), G = gridDim.x * nw, items = mv_items(a, GLU);
    const int p0 = blockIdx.x * nw + warp, mine = p0 < items ? (items - 1 - p0) / G + 1 : 0, total = mine * J;
    uint8_t *ring = (uint8_t *)xs + mvs_x_bytes(n, Q8) + (size_t)warp * D * TR::STAGE;

    /* the copy cursor: stage k = (item ip, step ij), issued in order */
    int ip = p0, ij = 0, k_issue = 0;
    mv_task ti = mv_resolve(a, p0 < items ? p0 : 0, GLU);
    auto issue = [&]() {
        if (k_issue < total) {
            uint8_t *st = ring + (k_issue % D) * TR::STAGE;
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int u = 0; u < W; u++) {
                    const int c0 = 32 * (W * ij + u);
                    uint8_t *ru = st + i * TR::ROW + u * TR::QB;
#pragma unroll
                    for (int q = 0; q < NV; q++) {
                        const int P = 32 * q + lane; /* piece P is in unit c0 + P / NV */
                        if (c0 + P / NV < nu) cp16(ru + 16 * swz<NV>(P), ti.w[i] + (size_t)c0 * 16 * NV + 16 * P);
                    }
                    if (TR::S && lane < 16 && c0 + 2 * lane < nu)
                        cp4(st + i * TR::ROW + W * TR::QB + 64 * u + 4 * lane, ti.s[i] + (size_t)(c0 + 2 * lane) * 2);
                }
            if (++ij == J) {
                ij = 0;
                ip += G;
                if (ip < items) ti = mv_resolve(a, ip, GLU);
            }
        }
        k_issue++;
        cp_commit(); /* an empty group past the end keeps the count uniform */
    };
    /* the first stages are weights only: in flight before waiting for the previous kernel */
    for (int k = 0; k < D - 1; k++) issue();
    rl_pdl_wait();
    mv_stage<0, Q8>(a, a.x, xs, red);
    const int8_t *xq = (const int8_t *)((const char *)xs + xs_f32_bytes(n));
    const float *xd = (const float *)(xq + n);
    const int *xsum = (const int *)(xd + nu);

    const int pos = a.io ? a.io->pos : 0;
    int p = p0, j = 0;
    mv_task t = mv_resolve(a, p0 < items ? p0 : 0, GLU); /* ti has moved on */
    float acc[2] = {0.0f, 0.0f};
    for (int k = 0; k < total; k++) {
        issue();
        cp_wait<D - 1>(); /* this lane's copies of stage k have landed */
        __syncwarp();     /* and every lane's */
        const uint8_t *st = ring + (k % D) * TR::STAGE;
#pragma unroll
        for (int u = 0; u < W; u++) { /* unit steps in order: mv_kernel's per-lane order */
            const int c = 32 * (W * j + u) + lane;
            if (c >= nu) break;
            raw_chunk<T> r[2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const uint8_t *ru = st + i * TR::ROW + u * TR::QB;
#pragma unroll
                for (int q = 0; q < NV; q++) r[i].v[q] = *(const uint4 *)(ru + 16 * swz<NV>(lane * NV + q));
                if constexpr (TR::S) r[i].d = *(const uint16_t *)(st + i * TR::ROW + W * TR::QB + 64 * u + 2 * lane);
            }
            if constexpr (Q8) {
                const int4 xa = *(const int4 *)(xq + c * 32), xc = *(const int4 *)(xq + c * 32 + 16);
                const int xw[8] = {xa.x, xa.y, xa.z, xa.w, xc.x, xc.y, xc.z, xc.w};
#pragma unroll
                for (int i = 0; i < 2; i++) acc[i] += dot_q8<T>(r[i], xw, xd[c], xsum[c]);
            } else {
                dot2<T>(r, xs + c * 36, acc, nullptr, nullptr, c);
            }
        }
        __syncwarp(); /* the slot is refilled by the next issue */
        if (++j == J) {
            mv_finish<GLU>(a, t, p, acc, pos, 0);
            acc[0] = acc[1] = 0.0f;
            j = 0;
            p += G;
            if (p < items) t = mv_resolve(a, p, GLU);
        }
    }
    cp_wait<0>();
}

typedef void (*mvs_fn)(const rl_mv_args);

template <int T> static mvs_fn mvs_pick(bool glu, bool q8) {
    if constexpr (q8_ok(T))
        if (q8) return glu ? mvs_kernel<T, true, true> : mvs_kernel<T, false, true>;
    return glu ? mvs_kernel<T, true, false> : mvs_kernel<T, false, false>;
}

static mvs_fn mvs_kernel_for(uint32_t type, bool glu, bool q8) {
    switch (type) {
    case RL_Q4_0: return mvs_pick<RL_Q4_0>(glu, q8);
    case RL_Q8_0: return mvs_pick<RL_Q8_0>(glu, q8);
    case RL_F16: return mvs_pick<RL_F16>(glu, q8);
    default: return mvs_pick<RL_BF16>(glu, q8);
    }
}

/* A warp's ring in bytes. */
static size_t mvs_ring_bytes(uint32_t type) {
    switch (type) {
    case RL_Q4_0: return (size_t)mvs_tr<RL_Q4_0>::STAGE * mvs_tr<RL_Q4_0>::D;
    case RL_Q8_0: return (size_t)mvs_tr<RL_Q8_0>::STAGE * mvs_tr<RL_Q8_0>::D;
    case RL_F16: return (size_t)mvs_tr<RL_F16>::STAGE * mvs_tr<RL_F16>::D;
    default: return (size_t)mvs_tr<RL_BF16>::STAGE * mvs_tr<RL_BF16>::D;
    }
}

/* The most dynamic shared memory a block of f may have: the device's opt-in limit less the
 * kernel's static shared memory. 0 on error. */
static size_t mvs_smem_limit(mvs_fn f) {
    int dev = 0, optin = 0;
    cudaFuncAttributes fa;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, f) != cudaSuccess || (size_t)optin <= fa.sharedSizeBytes)
        return 0;
    return (size_t)optin - fa.sharedSizeBytes;
}

int rl_mvs_prepare(void) {
    const uint32_t types[] = {RL_Q4_0, RL_Q8_0, RL_F16, RL_BF16};
    for (uint32_t t : types)
        for (int g = 0; g < 2; g++)
            for (int q = 0; q < 2; q++) {
                mvs_fn f = mvs_kernel_for(t, g, q);
                size_t lim = mvs_smem_limit(f);
                cudaError_t err = lim ? cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)lim)
                                      : cudaErrorInvalidValue;
                if (err != cudaSuccess) return (int)err;
            }
    return 0;
}

/* Whether a plane is 16-byte (quants) or 4-byte (scales) aligned row by row. */
static bool aligned(const void *p, size_t row, size_t to) { return (uintptr_t)p % to == 0 && row % to == 0; }

bool rl_mvs_applies(const rl_mv_args *a, const rl_cuda_knobs *k) {
    const uint32_t type = a->seg[0].w.type;
    const bool glu = a->mode == RL_MV_GLU;
    if (!k->mvs || a->ns > 1 || !mvs_type((int)type) || a->n % 64 != 0) return false;
    if (k->mvs == 2 && type != RL_Q4_0 && type != RL_Q8_0) return false;
    for (int i = 0; i < (glu ? 2 : a->nseg); i++) {
        const rl_dmat &m = a->seg[i].w;
        if (m.type != type || !aligned(m.q, m.q_row, 16) || (m.s && !aligned(m.s, m.s_row, 4))) return false;
    }
    return true;
}

/* Warps per block of the streamed launch for a (0: it does not stream), its kernel and shared
 * memory: the knob's warps, fewer while x and the rings do not fit. */
static int mvs_plan(const rl_mv_args *a, const rl_cuda_knobs *k, mvs_fn *f, size_t *smem) {
    if (!rl_mvs_applies(a, k) || mv_items(*a, a->mode == RL_MV_GLU) < 1) return 0;
    const uint32_t type = a->seg[0].w.type;
    const bool q8 = a->fast && rl_mv_q8(type);
    *f = mvs_kernel_for(type, a->mode == RL_MV_GLU, q8);
    const size_t lim = mvs_smem_limit(*f), xb = mvs_x_bytes(a->n, q8), rb = mvs_ring_bytes(type);
    int nw = k->mv_warps;
    while (nw > 1 && xb + nw * rb > lim) nw--;
    *smem = xb + nw * rb;
    return lim && *smem <= lim ? nw : 0;
}

int rl_mvs_warps(const rl_mv_args *a, const rl_cuda_knobs *k) {
    mvs_fn f;
    size_t smem;
    return mvs_plan(a, k, &f, &smem);
}

int rl_mvs_launch(const rl_mv_args *a, const rl_cuda_knobs *k, int n_sm, cudaStream_t st) {
    mvs_fn f;
    size_t smem;
    const int nw = mvs_plan(a, k, &f, &smem);
    if (!nw) return 0;
    int occ = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, f, nw * 32, smem) != cudaSuccess || occ < 1) occ = 1;
    if (occ > k->mv_blocks_per_sm) occ = k->mv_blocks_per_sm;
    /* items per warp as even as the resident warps allow, then only as many blocks as that needs */
    const int items = mv_items(*a, a->mode == RL_MV_GLU), cap = occ * n_sm * nw, ipw = (items + cap - 1) / cap;
    const int blocks = (items + ipw * nw - 1) / (ipw * nw);
    /* PDL (knob 1 or 2): the first D - 1 stages are copied while the previous kernel runs */
    return rl_launch(f, dim3(blocks), dim3(nw * 32), smem, st, k->pdl != 0, *a) ? -1 : 1;
}
