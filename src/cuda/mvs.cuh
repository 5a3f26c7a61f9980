/* The streamed matvec's device code (v2.4), shared by its own kernel (mvs.cu, one launch per
 * matvec) and the persistent decode kernel (persist.cu, every matvec of a token as phases of
 * one launch). Device code only.
 *
 * Weights of the plane types (Q4_0, Q8_0, FP8: a quant plane and a 16-bit scale plane; RQ2:
 * 16 code bytes per 64-value unit and a (d, m) plane of 4 bytes per unit; F16, BF16: rows) reach the lanes through a per-warp ring of D shared-memory stages filled by cp.async:
 * a warp keeps D - 1 stages in flight while it computes the oldest one, and the stream runs on
 * across its work items, so the loads never stop between items.
 *
 * Same arithmetic as matvec.cu's register kernel: work item p (two rows), lane l takes units
 * l, l + 32, ... of both rows in that order through the same dot functions (dot_q8, dot2; RQ2
 * rq2_q8, rq2_f32), and
 * mv_finish's butterfly and epilogue. So both give the same bits, and the exact chunks (which
 * keep the register kernel) stay bit-identical to decoding.
 *
 * Stage j of an item: units 32j .. 32j + 31 of its two rows, per row 32 * 16 * NV bytes of
 * quants (copied as contiguous 16-byte pieces, so each copy instruction of the warp covers 512
 * contiguous bytes) and, with a scale plane, the 64 bytes of the 32 units' 16-bit scales (16
 * lanes x 4 bytes; RQ2: 128 bytes of (d, m) pairs, 32 lanes x 4). A lane reads back its own
 * unit's pieces; the pieces are stored XOR-swizzled so that a quarter-warp's 16-byte reads of
 * units NV pieces apart hit 8 distinct bank groups.
 * (Wider stages, several units per lane, were measured slower: docs/PERF.md v2.4.) */
#ifndef RL_CUDA_MVS_CUH
#define RL_CUDA_MVS_CUH

#include "mv.cuh"

/* The streamed types, X(type) for each: every per-type list of the streamed matvec (mvs_type,
 * mvs_ring_bytes, the kernels rl_mvs_prepare sets up, mvs_kernel_for) is generated from this
 * one, so a type added here is added everywhere. */
#define RL_MVS_TYPES(X) X(RL_Q4_0) X(RL_Q8_0) X(RL_FP8) X(RL_RQ2) X(RL_F16) X(RL_BF16)

__host__ __device__ constexpr bool mvs_type(int T) {
#define MVS_IS(t) T == t ||
    return RL_MVS_TYPES(MVS_IS) false;
#undef MVS_IS
}

/* The streamed types stored as planes with a scale plane (the quantized ones, whose rings are
 * of 8-bit codes or less; RL_CUDA_MVS=2 streams only these). */
__host__ __device__ constexpr bool mvs_scaled(int T) {
    return T == RL_Q4_0 || T == RL_Q8_0 || T == RL_FP8 || T == RL_RQ2;
}

/* Stage layout of type T. D: stages in a warp's ring (D - 1 in flight while one is computed),
 * sized so that a ring is 8-12 KB. */
template <int T> struct mvs_tr {
    static constexpr int NV = mv_tr<T>::NV; /* 16-byte pieces per unit (mv_tr CW values: 32, RQ2 64) */
    static constexpr bool S = mvs_scaled(T); /* has a scale plane */
    static constexpr int SB = T == RL_RQ2 ? 4 : 2;          /* scale-plane bytes per unit (RQ2: d, m) */
    static constexpr int QB = 32 * 16 * NV;                 /* one row's quants of a stage */
    static constexpr int ROW = QB + (S ? 32 * SB : 0);
    static constexpr int STAGE = 2 * ROW;
    static constexpr int D = (T == RL_Q4_0 || T == RL_RQ2) ? 8 : (T == RL_Q8_0 || T == RL_FP8) ? 4 : 3;
    static constexpr int RING = D * STAGE; /* bytes of one warp's ring */
};

/* A warp's ring in bytes, for a type known at run time (0: not streamed). */
__host__ __device__ constexpr size_t mvs_ring_bytes(int T) {
#define MVS_RING(t) T == t ? (size_t)mvs_tr<t>::RING :
    return RL_MVS_TYPES(MVS_RING) 0;
#undef MVS_RING
}

/* Shared memory before the rings: the staged input, rounded up to 16 bytes. */
__host__ __device__ inline size_t mvs_x_bytes(int n, bool q8) { return (stage_bytes(n, q8) + 15) & ~(size_t)15; }

/* Slot of 16-byte piece P of a row's stage: the XOR keeps it within its group of 8 pieces. */
template <int NV> __device__ __forceinline__ int swz(int P) { return P ^ ((P >> 3) & (NV - 1)); }

/* One warp's share of one streamed matvec: items p0, p0 + G, ... of the launch (G warps in
 * all), J stages each. prefetch() issues the first D - 1 stages, which read only weights, so a
 * caller may issue them before the matvec's input exists (before a PDL wait, or before the
 * grid barrier that ends the previous phase); run() stages the input with the whole block
 * (every thread of the block must call it) and computes, issuing the stages that remain. The
 * caller must not touch the warp's ring between the two. CG: activations are read from L2
 * (rl_ld_cg; the persistent kernel). */
template <int T, bool GLU, bool Q8, bool CG = false> struct mvs_warp {
    using TR = mvs_tr<T>;
    static constexpr int NV = TR::NV, D = TR::D;
    const rl_mv_args *a;
    uint8_t *ring;
    int nu, J, G, items, p0, total;
    /* The copy cursor: stage k_issue is step ij of item ip, into the slot at byte s_off of the
     * ring (shared address rs); this lane's next source bytes in the item's two rows are gq
     * (quants) and gs (scales), and left units of the rows remain from this step on. Advanced
     * by additions: the loop issues one stage per computed stage, and recomputing the
     * addresses from (item, step) cost more instructions than the copies themselves. */
    uint32_t rs, s_off;
    int ip, ij, k_issue, left;
    const uint8_t *gq[2], *gs[2];

    __device__ __forceinline__ void seek(int p) {
        const int lane = threadIdx.x & 31;
        const mv_task t = mv_resolve(*a, p, GLU);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            gq[i] = t.w[i] + 16 * lane;
            gs[i] = TR::S ? t.s[i] + 4 * lane : nullptr;
        }
        left = nu;
    }

    __device__ __forceinline__ void init(const rl_mv_args *args, uint8_t *ring_, int warp_id, int n_warps) {
        a = args;
        ring = ring_;
        rs = (uint32_t)__cvta_generic_to_shared(ring_);
        s_off = 0;
        nu = a->n / mv_tr<T>::CW;
        J = (nu + 31) / 32;
        G = n_warps;
        items = mv_items(*a, GLU);
        p0 = warp_id;
        total = p0 < items ? ((items - 1 - p0) / G + 1) * J : 0;
        ip = p0;
        ij = 0;
        k_issue = 0;
        if (total) seek(p0);
    }

    __device__ __forceinline__ void issue() {
        const int lane = threadIdx.x & 31;
        if (k_issue < total) {
            const uint32_t st = rs + s_off;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const uint32_t ru = st + i * TR::ROW;
#pragma unroll
                for (int q = 0; q < NV; q++) { /* piece P = 32q + lane is in unit P / NV of the step */
                    if ((32 * q + lane) / NV < left) cp16(ru + 16 * swz<NV>(32 * q + lane), gq[i] + 512 * q);
                }
                /* the units' scales in 4-byte pieces: lane l copies units (4 / SB) l .. */
                if (TR::S && lane < 8 * TR::SB && 4 / TR::SB * lane < left) cp4(ru + TR::QB + 4 * lane, gs[i]);
                gq[i] += 512 * NV;
                if (TR::S) gs[i] += 32 * TR::SB;
            }
            left -= 32;
            if (++ij == J) {
                ij = 0;
                ip += G;
                if (ip < items) seek(ip);
            }
        }
        k_issue++;
        s_off = s_off + TR::STAGE == D * TR::STAGE ? 0 : s_off + TR::STAGE;
        cp_commit(); /* an empty group past the end keeps the count uniform */
    }

    __device__ __forceinline__ void prefetch() {
        for (int k = 0; k < D - 1; k++) issue();
    }

    /* xs: the block's staging area (mvs_x_bytes(n, Q8)), red: 32 doubles of shared scratch. */
    __device__ __forceinline__ void run(float *xs, double *red) {
        const int n = a->n, lane = threadIdx.x & 31;
        /* RQ2's 8-bit plane in the shift decoder's layout (the table decoder is not streamed) */
        mv_stage<T == RL_RQ2 ? 2 : 0, Q8, 8, CG>(*a, a->x, xs, red);
        const int8_t *xq = (const int8_t *)((const char *)xs + xs_f32_bytes(n));
        const float *xd = (const float *)(xq + n);
        const int *xsum = (const int *)(xd + n / 32);
        const int pos = a->io ? a->io->pos : 0;
        int p = p0, j = 0;
        mv_task t;
        if (total) t = mv_resolve(*a, p0, GLU);
        float acc[2] = {0.0f, 0.0f};
        for (int k = 0; k < total; k++) {
            issue();
            cp_wait<D - 1>(); /* this lane's copies of stage k have landed */
            __syncwarp();     /* and every lane's */
            const uint8_t *st = ring + (k % D) * TR::STAGE;
            const int c = 32 * j + lane; /* mv_kernel's per-lane order */
            if (c < nu) {
                raw_chunk<T> r[2];
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const uint8_t *ru = st + i * TR::ROW;
#pragma unroll
                    for (int q = 0; q < NV; q++) r[i].v[q] = *(const uint4 *)(ru + 16 * swz<NV>(lane * NV + q));
                    if constexpr (TR::SB == 4) r[i].d = *(const uint32_t *)(ru + TR::QB + 4 * lane);
                    else if constexpr (TR::S) r[i].d = *(const uint16_t *)(ru + TR::QB + 2 * lane);
                }
                if constexpr (T == RL_RQ2) { /* unit c is 64-value block c */
                    if constexpr (Q8) rq2_q8<false>(r, xq, xd, xsum, c, nullptr, acc);
                    else rq2_f32<false>(r, xs, c, nullptr, acc);
                } else if constexpr (Q8) {
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
                mv_finish<GLU, CG>(*a, t, p, acc, pos, 0);
                acc[0] = acc[1] = 0.0f;
                j = 0;
                p += G;
                if (p < items) t = mv_resolve(*a, p, GLU);
            }
        }
        cp_wait<0>();
    }
};

#endif
