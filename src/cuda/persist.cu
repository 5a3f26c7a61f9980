/* The persistent decode kernel (v2.5): every layer of a decoding token in one launch.
 *
 * Why: the launch-per-step graph runs 5 kernels per layer, and on the H200 each kernel
 * boundary costs ~5 us of drain, launch and ramp-up (TinyLlama Q4_0: 727 us per token for 113
 * launches, of which reading the weights at the stream ceiling would take ~130 us; docs/PERF.md
 * v2.4). Here the boundaries are grid barriers (one atomic per block and a spin on a generation
 * word, ~1-2 us), and before each barrier every warp already issues the first weight stages of
 * the next matvec, which need no activations, so the memory pipe does not drain at a boundary.
 *
 * Phases of layer l, each the code of its own one-launch kernel at the same block size, so the
 * same bits as the graph of launches (the norm's sums depend on the block size, and the plan
 * takes the streamed launches' warps):
 *   QKV matvec (mvs.cuh; RoPE and the f16 K/V write in its epilogue) | flash decode
 *   (attention.cuh: the block's warps in groups of 4, each group one flash-decode block with its
 *   own named barrier) | Wo (+ residual) | gate + up + SiLU | down (+ residual).
 * Activations written in one phase are read in a later one on other SMs, through L2 (__ldcg in
 * the shared device code: an SM's L1 is not coherent with other SMs' stores).
 *
 * Blocks: as many as are resident at once (a cooperative launch, so the driver refuses rather
 * than deadlocks if they do not fit). The streamed matvec's work items are spread over all
 * resident warps the same way its own launch spreads them. */
#include <stdio.h>

#include "attention.cuh"
#include "mvs.cuh"

/* Grid barrier over all blocks: a 64-bit arrival counter that only grows. A block arrives with
 * a fire-and-forget add (no reply to wait for) and waits until the counter reaches its target;
 * so the last arrival releases everyone after one trip to L2 and back (a reset-and-generation
 * barrier needs three or four such trips in a row after the last arrival: measured slower).
 * Barrier k of a launch (k = 0 .. NB - 1) waits for base + (k + 1) * nblocks, base being the
 * counter at the launch's start: every launch adds exactly P = NB * nblocks, so base is a
 * multiple of P; a block reads the counter before it first arrives, when fewer than nblocks
 * arrivals of this launch can have landed (< P), and rounds down. Thread 0 arrives with a
 * release and waits with acquire loads, and the __syncthreads on either side extend that
 * order to the whole block (PTX memory model: the CTA barrier orders the block's writes
 * before the release, and the acquire before the block's later reads). tr (RL_CUDA_PERSIST_TRACE): each block's %globaltimer at every
 * arrival and release. */
struct pk_bar {
    unsigned long long *c, base;
    unsigned long long *tr; /* [2 NB + 2][gridDim.x] or NULL */
    int k;

    __device__ __forceinline__ void start(unsigned long long *c_, int nb, unsigned long long *tr_) {
        c = c_;
        tr = tr_;
        k = 0;
        if (threadIdx.x == 0) {
            const unsigned long long P = (unsigned long long)nb * gridDim.x, c0 = rl_ld_acquire(c);
            base = c0 / P * P;
            /* the argument above, checked: anything else touching the counter (or a launch
             * that stopped midway) would otherwise be a silent race */
            if (c0 - base >= gridDim.x) __trap();
            if (tr) tr[blockIdx.x] = rl_gtimer();
        }
    }
    __device__ __forceinline__ void sync() {
        __syncthreads();
        if (threadIdx.x == 0) {
            const unsigned long long target = base + (unsigned long long)(k + 1) * gridDim.x;
            if (tr) tr[(size_t)(2 * k + 1) * gridDim.x + blockIdx.x] = rl_gtimer();
            rl_red_release(c);
            while (rl_ld_acquire(c) < target) {
            }
            if (tr) tr[(size_t)(2 * k + 2) * gridDim.x + blockIdx.x] = rl_gtimer();
        }
        k++;
        __syncthreads();
    }
    __device__ __forceinline__ void end() {
        if (threadIdx.x == 0 && tr) tr[(size_t)(2 * k + 1) * gridDim.x + blockIdx.x] = rl_gtimer();
    }
};

#define PK_GROUP_WARPS (ATT_THREADS / 32)
#define PK_MAX_GROUPS 4 /* 16 warps */

/* Layer l's attention: the active flash-decode blocks (head h, split s) of the graph's launch,
 * taken by the groups of the grid in turn; inactive splits are never visited. */
template <int HJ>
__device__ __forceinline__ void pk_attention(const rl_att_args &a, uint8_t *smem, size_t att_smem, float (*ared)[32],
                                             int *tick) {
    const int grp = (threadIdx.x >> 5) / PK_GROUP_WARPS, n_grp = (blockDim.x >> 5) / PK_GROUP_WARPS;
    const int n_pos = a.io->pos + 1;
    const int S = rl_att_split_len(a.split, a.max_split, n_pos);
    const int nvb = a.n_head * ((n_pos + S - 1) / S);
    float *sm = (float *)(smem + (size_t)grp * att_smem);
    const rl_grp g = {1 + grp, ATT_THREADS};
    for (int vb = blockIdx.x * n_grp + grp; vb < nvb; vb += gridDim.x * n_grp)
        flash_decode_block<HJ, false, true>(a, vb % a.n_head, vb / a.n_head, 0, sm, ared[grp], &tick[grp], g);
}

/* Copies a phase's arguments into shared memory with the whole block (ends with a barrier).
 * The one-launch kernels read theirs from the constant bank; read from the global table, each
 * first touch of a field is a dependent trip to L2 inside the phase. */
template <typename A> __device__ __forceinline__ void pk_args(A *dst, const A *src) {
    static_assert(sizeof(A) % 4 == 0, "word copy");
    for (int i = threadIdx.x; i < (int)(sizeof(A) / 4); i += blockDim.x)
        ((int *)dst)[i] = __ldg((const int *)src + i);
    __syncthreads();
}

template <int T, bool Q8>
__global__ void __launch_bounds__(512) persist_kernel(const rl_pk_layer *__restrict__ lay, int n_layer,
                                                      unsigned long long *bar, unsigned long long *trace, int hj,
                                                      size_t xs_bytes, size_t att_smem) {
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ double red[32];
    __shared__ float ared[PK_MAX_GROUPS][32];
    __shared__ int tick[PK_MAX_GROUPS];
    /* two slots: a phase's arguments are copied while warps of the block may still compute the
     * previous phase, which reads the other slot (QKV and gate/up take slot 0, Wo and down 1) */
    __shared__ __align__(16) rl_mv_args sa[2];
    __shared__ __align__(16) rl_att_args sat;
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int wid = blockIdx.x * nw + warp, G = gridDim.x * nw;
    float *xs = (float *)smem;
    uint8_t *ring = smem + xs_bytes + (size_t)warp * mvs_tr<T>::RING;
    mvs_warp<T, false, Q8, true> m; /* QKV, Wo, down */
    mvs_warp<T, true, Q8, true> gu; /* gate + up */
    pk_bar gb;
    gb.start(bar, rl_persist_barriers(n_layer), trace);
    pk_args(&sa[0], &lay[0].qkv);
    m.init(&sa[0], ring, wid, G);
    m.prefetch();
    for (int l = 0; l < n_layer; l++) {
        const rl_pk_layer &L = lay[l];
        m.run(xs, red); /* QKV: the ring holds its first stages */
        pk_args(&sa[1], &L.wo);
        pk_args(&sat, &L.att);
        m.init(&sa[1], ring, wid, G);
        m.prefetch();
        gb.sync();
        if (hj == 1) pk_attention<1>(sat, smem, att_smem, ared, tick);
        else if (hj == 2) pk_attention<2>(sat, smem, att_smem, ared, tick);
        else pk_attention<4>(sat, smem, att_smem, ared, tick);
        gb.sync();
        m.run(xs, red); /* Wo */
        pk_args(&sa[0], &L.glu);
        gu.init(&sa[0], ring, wid, G);
        gu.prefetch();
        gb.sync();
        gu.run(xs, red);
        pk_args(&sa[1], &L.down);
        m.init(&sa[1], ring, wid, G);
        m.prefetch();
        gb.sync();
        m.run(xs, red);
        if (l + 1 < n_layer) {
            pk_args(&sa[0], &lay[l + 1].qkv);
            m.init(&sa[0], ring, wid, G);
            m.prefetch();
            gb.sync();
        }
    }
    gb.end();
}

typedef void (*pk_fn)(const rl_pk_layer *, int, unsigned long long *, unsigned long long *, int, size_t, size_t);

static pk_fn pk_kernel_for(uint32_t type, bool q8) {
    switch (type) {
    case RL_Q4_0: return q8 ? persist_kernel<RL_Q4_0, true> : persist_kernel<RL_Q4_0, false>;
    case RL_Q8_0: return q8 ? persist_kernel<RL_Q8_0, true> : persist_kernel<RL_Q8_0, false>;
    case RL_FP8: return persist_kernel<RL_FP8, false>;
    case RL_RQ2: return q8 ? persist_kernel<RL_RQ2, true> : persist_kernel<RL_RQ2, false>;
    case RL_RQ4: return q8 ? persist_kernel<RL_RQ4, true> : persist_kernel<RL_RQ4, false>;
    case RL_F16: return persist_kernel<RL_F16, false>;
    case RL_BF16: return persist_kernel<RL_BF16, false>;
    default: return nullptr;
    }
}

#define NO(...)                                                                                     \
    do {                                                                                            \
        snprintf(why, why_cap, __VA_ARGS__);                                                        \
        return -1;                                                                                  \
    } while (0)

int rl_persist_plan(const rl_pk_layer *lay, int n_layer, const rl_cuda_knobs *k, int n_sm, rl_pk_plan *plan,
                    char *why, size_t why_cap) {
    static const char *const name[4] = {"QKV", "Wo", "gate/up", "down"};
    if (n_layer < 1) NO("no layers");
    const uint32_t type = lay[0].qkv.seg[0].w.type;
    const bool q8 = lay[0].qkv.fast && rl_mv_q8(type);
    int warps = 0;
    size_t xs = 0;
    for (int l = 0; l < n_layer; l++) {
        const rl_mv_args *mv[4] = {&lay[l].qkv, &lay[l].wo, &lay[l].glu, &lay[l].down};
        for (int i = 0; i < 4; i++) {
            const rl_mv_args *a = mv[i];
            for (int s = 0; s < a->nseg; s++)
                if (a->seg[s].w.type != type) NO("layer %d mixes weight types (one kernel per type)", l);
            const int w = rl_mvs_warps(a, k);
            if (!w) NO("layer %d's %s matvec is not streamed (RL_CUDA_MVS, or its shape)", l, name[i]);
            if (warps && w != warps) NO("the streamed matvecs differ in block size (%d, %d warps)", warps, w);
            warps = w;
            if ((a->fast && rl_mv_q8(type)) != q8) NO("layers differ in activation precision");
            const size_t x = mvs_x_bytes(a->n, q8);
            if (x > xs) xs = x;
        }
        const rl_att_args *t = &lay[l].att;
        if (t->hd != lay[0].att.hd || t->n_head != lay[0].att.n_head || t->split_max != lay[0].att.split_max)
            NO("layers differ in attention shape (the plan takes layer 0's)");
        if (!lay[l].qkv.seg[1].y16 || !lay[l].qkv.seg[2].y16)
            NO("RoPE and the cache write are not folded into the QKV matvec (neox rotation, q/k norms, "
               "a q8 KV cache or RL_CUDA_ROPE_FOLD=0)");
        if (t->kd) NO("a q8 KV cache (the persistent attention reads f16)");
        if (t->hd > 256) NO("head_dim %d > 256", t->hd);
        if (t->n_tok > 1) NO("a chunk of %d tokens", t->n_tok);
    }
    if (warps % PK_GROUP_WARPS || warps / PK_GROUP_WARPS > PK_MAX_GROUPS)
        NO("%d warps per block: attention needs a multiple of %d, at most %d", warps, PK_GROUP_WARPS,
           PK_GROUP_WARPS * PK_MAX_GROUPS);
    const pk_fn f = pk_kernel_for(type, q8);
    if (!f) NO("weight type %u has no persistent kernel", type);
    const size_t att = (rl_attention_smem(&lay[0].att) + 15) & ~(size_t)15;
    const size_t xs_all = att * (size_t)(warps / PK_GROUP_WARPS) > xs ? att * (size_t)(warps / PK_GROUP_WARPS) : xs;
    const size_t smem = xs_all + (size_t)warps * mvs_ring_bytes((int)type);
    int dev = 0, coop = 0, occ = 0, optin = 0;
    cudaFuncAttributes fa;
    cudaError_t err = cudaGetDevice(&dev);
    if (!err) err = cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev);
    if (!err) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (!err) err = cudaFuncGetAttributes(&fa, f);
    if (err) NO("device query failed: %s", cudaGetErrorString(err));
    if (!coop) NO("the device has no cooperative launch");
    /* the limit the device allows (not this plan's size: another backend in the process may
     * plan more for the same kernel) */
    const size_t lim = (size_t)optin > fa.sharedSizeBytes ? (size_t)optin - fa.sharedSizeBytes : 0;
    if (smem > lim) NO("%zu bytes of shared memory per block, the device allows %zu", smem, lim);
    err = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)lim);
    if (!err) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, f, warps * 32, smem);
    if (err) {
        cudaGetLastError();
        NO("%zu bytes of shared memory per block: %s", smem, cudaGetErrorString(err));
    }
    if (occ < 1) NO("no block of %d warps and %zu bytes of shared memory fits an SM", warps, smem);
    if (occ > k->mv_blocks_per_sm) occ = k->mv_blocks_per_sm;
    plan->type = type;
    plan->q8 = q8;
    plan->warps = warps;
    plan->blocks = occ * n_sm;
    plan->hj = (lay[0].att.hd + 63) / 64 <= 1 ? 1 : (lay[0].att.hd + 63) / 64 <= 2 ? 2 : 4;
    plan->xs_bytes = xs_all;
    plan->att_smem = att;
    plan->smem = smem;
    return 0;
}

int rl_persist_launch(const rl_pk_plan *p, const rl_pk_layer *lay, int n_layer, unsigned long long *bar,
                      unsigned long long *trace, cudaStream_t st) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeCooperative;
    at[0].val.cooperative = 1;
    cfg.gridDim = dim3(p->blocks);
    cfg.blockDim = dim3(p->warps * 32);
    cfg.dynamicSmemBytes = p->smem;
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return (int)cudaLaunchKernelEx(&cfg, pk_kernel_for(p->type, p->q8), lay, n_layer, bar, trace, p->hj, p->xs_bytes,
                                   p->att_smem);
}
