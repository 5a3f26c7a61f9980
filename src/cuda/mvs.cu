/* Streamed matvec (v2.4): decoding's matvec for the weight types stored as planes (Q4_0, Q8_0,
 * FP8, RQ2, RQ4, Q4_K, Q5_K, Q6_K, F16, BF16), one launch per matvec; the device code and its layout are in mvs.cuh.
 *
 * Why: mv_kernel (matvec.cu) loads U units of both rows into registers, waits for them,
 * computes, and loads again: each warp alternates between waiting for memory and computing,
 * the bytes in flight per SM are capped by the register budget (Q4_0: 64 registers, ~32-64 KB
 * per SM), and each new work item starts with a full memory round trip. On Llama-2-7B its big
 * matrices read at 1.0-2.2 TB/s of the H200's ~4.6 (docs/PERF.md v2.3). Here the bytes in
 * flight are bounded by shared memory, not registers, and the loads run on across items. */
#include "mvs.cuh"

/* Block b of nb working on a: its warps take items b * nw + warp, then every nb * nw-th.
 * DS: the ring's stages (mvs_tr D, or D16 in blocks of 16 warps) */
template <int T, bool GLU, bool Q8, int DS>
__device__ __forceinline__ void mvs_block(const rl_mv_args &a, float *xs, double *red, int b, int nb) {
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    mvs_warp<T, GLU, Q8, false, DS> w;
    w.init(&a, (uint8_t *)xs + mvs_x_bytes(a.n, Q8) + (size_t)warp * DS * mvs_tr<T>::STAGE, b * nw + warp, nb * nw);
    /* the first stages are weights only: in flight before waiting for the previous kernel */
    w.prefetch();
    rl_pdl_wait();
    w.run(xs, red);
}

/* At most 16 warps share an SM (rl_mvs_pad), so a thread may hold 128 registers: held to
 * ptxas's default target instead, the fp32 kernels of Q4_0, F16 and BF16 spilled a few bytes
 * (v2.24). */
template <int T, bool GLU, bool Q8, int DS>
__global__ void __launch_bounds__(512, 1) mvs_kernel(const __grid_constant__ rl_mv_args a) {
    extern __shared__ __align__(16) float xs[];
    __shared__ double red[32];
    rl_pdl_trigger();
    mvs_block<T, GLU, Q8, DS>(a, xs, red, blockIdx.x, gridDim.x);
}

/* Two matvecs of different types on the same input in one launch (rl_mvs_launch2): blocks
 * [0, nb1) work on a1 as a launch of nb1 blocks would, the others on a2. Why: Q4_K_M's and
 * Q5_K_M's QKV has a Q6_K V in half the layers, which was a second launch of its own, and each
 * launch costs several microseconds beyond its bytes (docs/PERF.md v2.21 section 2). Every
 * item is a warp's work as in its own launch, so the same sums and the same bits. */
template <int T1, int T2, bool Q8, int D1, int D2>
__global__ void __launch_bounds__(512, 1) mvs2_kernel(const __grid_constant__ rl_mv_args a1,
                                                   const __grid_constant__ rl_mv_args a2, const int nb1) {
    extern __shared__ __align__(16) float xs[];
    __shared__ double red[32];
    rl_pdl_trigger();
    if ((int)blockIdx.x < nb1) mvs_block<T1, false, Q8, D1>(a1, xs, red, blockIdx.x, nb1);
    else mvs_block<T2, false, Q8, D2>(a2, xs, red, blockIdx.x - nb1, gridDim.x - nb1);
}

/* The bulk-page variant (mvs.cuh mvb_block): after the staging area, the slots' full and empty
 * barriers (16 bytes a slot), then the slots. */
template <int T, bool GLU, bool Q8>
__global__ void __launch_bounds__(512) mvb_kernel(const __grid_constant__ rl_mv_args a, const mvb_geom g) {
    extern __shared__ __align__(16) float xs[];
    __shared__ double red[32];
    rl_pdl_trigger();
    uint8_t *bars = (uint8_t *)xs + mvs_x_bytes(a.n, Q8);
    mvb_block<T, GLU, Q8> b;
    b.init(&a, bars + (size_t)16 * g.ns, (uint64_t *)bars, g);
    b.prefetch(); /* weights only: in flight before waiting for the previous kernel */
    rl_pdl_wait();
    b.run(xs, red);
}

typedef void (*mvs_fn)(const rl_mv_args);
typedef void (*mvb_fn)(const rl_mv_args, const mvb_geom);

template <int T, int DS> static mvs_fn mvs_pick_d(bool glu, bool q8) {
    if constexpr (q8_ok(T))
        if (q8) return glu ? mvs_kernel<T, true, true, DS> : mvs_kernel<T, false, true, DS>;
    return glu ? mvs_kernel<T, true, false, DS> : mvs_kernel<T, false, false, DS>;
}
template <int T> static mvs_fn mvs_pick(bool glu, bool q8, bool w16) {
    if constexpr (mvs_tr<T>::D16 != mvs_tr<T>::D)
        if (w16) return mvs_pick_d<T, mvs_tr<T>::D16>(glu, q8);
    return mvs_pick_d<T, mvs_tr<T>::D>(glu, q8);
}

typedef void (*mvs2_fn)(const rl_mv_args, const rl_mv_args, const int);

template <int T1, int T2, bool Q8> static mvs2_fn mvs2_pick_q(bool w16) {
    if (w16) return mvs2_kernel<T1, T2, Q8, mvs_tr<T1>::D16, mvs_tr<T2>::D16>;
    return mvs2_kernel<T1, T2, Q8, mvs_tr<T1>::D, mvs_tr<T2>::D>;
}
template <int T1, int T2> static mvs2_fn mvs2_pick(bool q8, bool w16) {
    return q8 ? mvs2_pick_q<T1, T2, true>(w16) : mvs2_pick_q<T1, T2, false>(w16);
}

/* The pairs of types one QKV launch takes (the first type's segments, then the second's):
 * llama.cpp's Q4_K_M and Q5_K_M recipes, whose V is Q6_K in half the layers. NULL for others. */
static mvs2_fn mvs2_kernel_for(uint32_t t1, uint32_t t2, bool q8, bool w16) {
    if (t2 != RL_Q6_K) return nullptr;
    if (t1 == RL_Q4_K) return mvs2_pick<RL_Q4_K, RL_Q6_K>(q8, w16);
    if (t1 == RL_Q5_K) return mvs2_pick<RL_Q5_K, RL_Q6_K>(q8, w16);
    return nullptr;
}

/* NULL for a type that is not streamed (callers check mvs_type first); w16: for blocks of 16
 * warps or more (mvs_tr D16) */
static mvs_fn mvs_kernel_for(uint32_t type, bool glu, bool q8, bool w16) {
    switch (type) {
#define MVS_CASE(t) case t: return mvs_pick<t>(glu, q8, w16);
        RL_MVS_TYPES(MVS_CASE)
#undef MVS_CASE
    default: return nullptr;
    }
}

template <int T> static mvb_fn mvb_pick(bool glu, bool q8) {
    if constexpr (mvb_type(T)) {
        if constexpr (q8_ok(T))
            if (q8) return glu ? mvb_kernel<T, true, true> : mvb_kernel<T, false, true>;
        return glu ? mvb_kernel<T, true, false> : mvb_kernel<T, false, false>;
    }
    return nullptr;
}

/* NULL for a type without a bulk kernel */
static mvb_fn mvb_kernel_for(uint32_t type, bool glu, bool q8) {
    switch (type) {
#define MVB_CASE(t) case t: return mvb_pick<t>(glu, q8);
        RL_MVS_TYPES(MVB_CASE)
#undef MVB_CASE
    default: return nullptr;
    }
}

/* The most dynamic shared memory a block of f may have: the device's opt-in limit less the
 * kernel's static shared memory. 0 on error. */
template <typename F> static size_t mvs_smem_limit(F f) {
    int dev = 0, optin = 0;
    cudaFuncAttributes fa;
    if (!f || cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, f) != cudaSuccess || (size_t)optin <= fa.sharedSizeBytes)
        return 0;
    return (size_t)optin - fa.sharedSizeBytes;
}

/* (kernels.h) Why: two 16-warp blocks per SM read a layer's tensors slower than one (docs/PERF.md
 * v2.17: Q4_0 28.3 MB 12.63 against 11.57 us), and a grid sized for one block per SM whose
 * blocks fit two is not spread one per SM (the block scheduler packs them: 16.21 us). The 8-bit
 * staging without its fp32 copy had made Q4_0's block fit twice: decoding lost 2% that way and
 * 14% with the grid cut to one block per SM. */
size_t rl_mvs_pad(const void *f, int nw, size_t need, size_t lim) {
    int dev = 0, sm = 0, rsv = 0;
    cudaFuncAttributes fa;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&rsv, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, f) != cudaSuccess)
        return need;
    const int blocks = nw >= 16 ? 1 : 16 / nw;
    /* blocks + 1 blocks of more than sm / (blocks + 1) bytes each (static, reserved and dynamic) do not fit */
    const size_t over = (size_t)sm / (blocks + 1) + 1, fixed = fa.sharedSizeBytes + (size_t)rsv;
    const size_t pad = over > fixed ? (over - fixed + 15) & ~(size_t)15 : 0;
    return need < pad && pad <= lim ? pad : need;
}

int rl_mvs_prepare(void) {
#define MVS_ID(t) t,
    const uint32_t types[] = {RL_MVS_TYPES(MVS_ID)};
#undef MVS_ID
    for (uint32_t t : types)
        for (int g = 0; g < 2; g++)
            for (int q = 0; q < 2; q++) {
                size_t lim = 0;
                cudaError_t err = cudaSuccess;
                for (int w16 = 0; w16 < 2 && err == cudaSuccess; w16++) {
                    mvs_fn f = mvs_kernel_for(t, g, q, w16);
                    lim = mvs_smem_limit(f);
                    err = lim ? cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)lim)
                              : cudaErrorInvalidValue;
                }
                if (err != cudaSuccess) return (int)err;
                for (int w16 = 0; w16 < 2 && !g; w16++) { /* the two-type QKV kernels whose first type is t */
                    mvs2_fn f2 = mvs2_kernel_for(t, RL_Q6_K, q, w16);
                    if (!f2) continue;
                    lim = mvs_smem_limit(f2);
                    err = lim ? cudaFuncSetAttribute(f2, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)lim)
                              : cudaErrorInvalidValue;
                    if (err != cudaSuccess) return (int)err;
                }
                mvb_fn fb = mvb_kernel_for(t, g, q);
                if (fb && (lim = mvs_smem_limit(fb)) &&
                    (err = cudaFuncSetAttribute(fb, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)lim)) != cudaSuccess)
                    return (int)err;
            }
    return 0;
}

bool rl_mvs_applies(const rl_mv_args *a, const rl_cuda_knobs *k) {
    const uint32_t type = a->seg[0].w.type;
    if (!k->mvs || a->ns > 1 || !mvs_type((int)type) || a->n % 64 != 0) return false;
    if (k->mvs == 2 && !mvs_scaled((int)type)) return false; /* 8-bit rings or less */
    if (type == RL_RQ2 && k->rq2_lut) return false; /* the table decoder stays in the register kernel */
    return rl_mv_planes_aligned(a, 4, false);
}

/* Warps per block of the streamed launch for a (0: it does not stream), its kernel and shared
 * memory: the knob's warps, fewer while x and the rings do not fit. */
static int mvs_plan(const rl_mv_args *a, const rl_cuda_knobs *k, mvs_fn *f, size_t *smem) {
    if (!rl_mvs_applies(a, k) || mv_items(*a, a->mode == RL_MV_GLU) < 1) return 0;
    const uint32_t type = a->seg[0].w.type;
    const bool q8 = a->fast && rl_mv_q8(type);
    *f = mvs_kernel_for(type, a->mode == RL_MV_GLU, q8, false);
    const size_t lim = mvs_smem_limit(*f), xb = mvs_x_bytes(a->n, q8);
    size_t rb = mvs_ring_bytes((int)type);
    int nw = k->mv_warps;
    while (nw > 1 && xb + nw * rb > lim) nw--;
    if (nw >= 16) { /* the 16-warp ring (mvs_tr D16): no larger, so the warps still fit */
        *f = mvs_kernel_for(type, a->mode == RL_MV_GLU, q8, true);
        rb = mvs_ring_bytes((int)type, true);
    }
    *smem = rl_mvs_pad((const void *)*f, nw, xb + nw * rb, lim);
    return lim && *smem <= lim ? nw : 0;
}

/* The bulk launch of a (0: not bulk): mvs_plan's warps (so the same staging and bits), the last
 * one the producer. Pages of whole items, about the knob's kilobytes (RL_CUDA_MVB_PAGE); groups
 * of as many warps as a page has items; as many slots as the block's share of an SM's shared
 * memory holds (a block of nw warps takes nw / 16 of it, as mvs's 16-warp block takes all)
 * and the knob allows (RL_CUDA_MVB_SLOTS), a multiple of the groups. Bulk copies need sm_90
 * and 16-byte aligned runs whose sizes are multiples of 16, and a run of rows is one copy only
 * where rows follow one another without padding: planes 16-byte aligned, row strides equal to
 * a row's bytes. */
static int mvb_plan(const rl_mv_args *a, const rl_cuda_knobs *k, int nw, mvb_fn *f, size_t *smem, mvb_geom *g) {
    const int type = (int)a->seg[0].w.type;
    if (!k->mvb || nw < 2 || !mvb_type(type) || !rl_mv_planes_aligned(a, 16, true)) return 0;
    const size_t nu = (size_t)(a->n / mvs_unit_values(type));
    const size_t qb = nu * mvb_unit_bytes(type, false), sb = nu * mvb_unit_bytes(type, true), item = 2 * (qb + sb);
    for (int i = 0; i < (a->mode == RL_MV_GLU ? 2 : a->nseg); i++)
        if (a->seg[i].w.q_row != qb || a->seg[i].w.s_row != sb) return 0;
    const bool q8 = a->fast && rl_mv_q8((uint32_t)type);
    *f = mvb_kernel_for((uint32_t)type, a->mode == RL_MV_GLU, q8);
    const size_t lim = mvs_smem_limit(*f), budget = lim * (size_t)nw / 16; /* nw <= 16 (the knob's range) */
    const size_t fixed = mvs_x_bytes(a->n, q8);
    if (!*f || budget <= fixed) return 0;
    const int consumers = nw - 1;
    int pi = (int)(((size_t)k->mvb_page * 1024 + item / 2) / item);
    pi = pi < 1 ? 1 : pi > consumers ? consumers : pi;
    int groups = consumers / pi;
    int ns = (int)((budget - fixed) / ((size_t)pi * item + 16));
    if (ns > k->mvb_slots) ns = k->mvb_slots;
    if (ns >= groups) ns -= ns % groups;
    else groups = ns;
    if (ns < 2) return 0;
    g->pi = pi;
    g->groups = groups;
    g->ns = ns;
    *smem = fixed + (size_t)ns * (16 + (size_t)pi * item);
    return nw;
}

int rl_mvs_warps(const rl_mv_args *a, const rl_cuda_knobs *k) {
    mvs_fn f;
    size_t smem;
    return mvs_plan(a, k, &f, &smem);
}

bool rl_mvb_applies(const rl_mv_args *a, const rl_cuda_knobs *k) {
    mvb_fn f;
    size_t smem;
    mvb_geom g;
    return mvb_plan(a, k, rl_mvs_warps(a, k), &f, &smem, &g) > 0;
}

/* The grid of a streamed launch of `items` work items in blocks of nw warps, at most cap blocks;
 * *ipw: the most items a warp takes. Every block of the cap where each warp has an item, the
 * items per warp then uneven by one, rather than only as many blocks as *ipw needs: an idle SM
 * adds nothing to the read, and 7B's gate + up had run 115 blocks on 132 SMs (docs/PERF.md
 * v2.47: +0.1 to +0.6% tg128 on nine files, the same bits; its tail, by SM, stays). */
static int mvs_blocks(int items, int nw, int cap, int *ipw) {
    *ipw = (items + cap * nw - 1) / (cap * nw);
    if (items >= cap * nw) return cap;
    return (items + *ipw * nw - 1) / (*ipw * nw);
}

int rl_mvs_launch2(const rl_mv_args *a1, const rl_mv_args *a2, const rl_cuda_knobs *k, int n_sm, cudaStream_t st,
                   rl_mv_count *n) {
    if (!k->mvs2 || a1->mode == RL_MV_GLU || a2->mode == RL_MV_GLU || a1->n != a2->n || a1->x != a2->x) return 0;
    mvs_fn f1, f2;
    mvb_fn fb;
    size_t s1, s2, sb;
    mvb_geom g;
    const int nw = mvs_plan(a1, k, &f1, &s1);
    if (!nw || mvs_plan(a2, k, &f2, &s2) != nw || mvb_plan(a1, k, nw, &fb, &sb, &g) || mvb_plan(a2, k, nw, &fb, &sb, &g))
        return 0;
    const uint32_t t1 = a1->seg[0].w.type, t2 = a2->seg[0].w.type;
    const bool q8 = a1->fast && rl_mv_q8(t1);
    if (q8 != (a2->fast && rl_mv_q8(t2))) return 0;
    mvs2_fn f = mvs2_kernel_for(t1, t2, q8, nw >= 16);
    if (!f) return 0;
    const size_t lim = mvs_smem_limit(f), smem = s1 > s2 ? s1 : s2; /* each already padded (mvs_plan) */
    if (!lim || smem > lim) return 0;
    int occ = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, f, nw * 32, smem) != cudaSuccess || occ < 1) occ = 1;
    if (occ > k->mv_blocks_per_sm) occ = k->mv_blocks_per_sm;
    const int i1 = mv_items(*a1, false), i2 = mv_items(*a2, false), cap = occ * n_sm;
    if (cap < 2) return 0;
    /* an item's bytes: two rows (both planes) */
    const size_t ib1 = 2 * (a1->seg[0].w.q_row + a1->seg[0].w.s_row), ib2 = 2 * (a2->seg[0].w.q_row + a2->seg[0].w.s_row);
    /* the split of the resident blocks whose busiest warp has the fewest bytes */
    int b1 = 1, ipw1, ipw2;
    size_t best = SIZE_MAX;
    for (int b = 1; b < cap; b++) {
        mvs_blocks(i1, nw, b, &ipw1);
        mvs_blocks(i2, nw, cap - b, &ipw2);
        const size_t l1 = (size_t)ipw1 * ib1, l2 = (size_t)ipw2 * ib2, l = l1 > l2 ? l1 : l2;
        if (l < best) best = l, b1 = b;
    }
    const int nb1 = mvs_blocks(i1, nw, b1, &ipw1), nb2 = mvs_blocks(i2, nw, cap - b1, &ipw2);
    if (n) n->streamed++; /* never bulk */
    return rl_launch(f, dim3(nb1 + nb2), dim3(nw * 32), smem, st, k->pdl != 0, *a1, *a2, nb1) ? -1 : 1;
}

int rl_mvs_launch(const rl_mv_args *a, const rl_cuda_knobs *k, int n_sm, cudaStream_t st, rl_mv_count *n) {
    mvs_fn f;
    size_t smem;
    const int nw = mvs_plan(a, k, &f, &smem);
    if (!nw) return 0;
    mvb_fn fb;
    size_t smem_b;
    mvb_geom g;
    const bool bulk = mvb_plan(a, k, nw, &fb, &smem_b, &g) > 0;
    int occ = 0;
    if ((bulk ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fb, nw * 32, smem_b)
              : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, f, nw * 32, smem)) != cudaSuccess ||
        occ < 1)
        occ = 1;
    if (occ > k->mv_blocks_per_sm) occ = k->mv_blocks_per_sm;
    const int items = mv_items(*a, a->mode == RL_MV_GLU);
    if (n) {
        n->streamed++;
        n->bulked += bulk;
    }
    /* PDL (knob 1 or 2): the first stages are copied while the previous kernel runs */
    if (bulk) { /* one wave of blocks, each a contiguous run of items */
        g.ipb = (items + occ * n_sm - 1) / (occ * n_sm);
        return rl_launch(fb, dim3((items + g.ipb - 1) / g.ipb), dim3(nw * 32), smem_b, st, k->pdl != 0, *a, g) ? -1 : 1;
    }
    int ipw;
    const int blocks = mvs_blocks(items, nw, occ * n_sm, &ipw);
    return rl_launch(f, dim3(blocks), dim3(nw * 32), smem, st, k->pdl != 0, *a) ? -1 : 1;
}
