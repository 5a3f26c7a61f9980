/* The streamed matvec's device code (v2.4), shared by its own kernel (mvs.cu, one launch per
 * matvec) and the persistent decode kernel (persist.cu, every matvec of a token as phases of
 * one launch). Device code only.
 *
 * Weights of the plane types (Q4_0, Q8_0, FP8: a quant plane and a 16-bit scale plane; RQ2 / RQ4:
 * 16 / 32 code bytes per 64-value unit and a (d, m) plane of 4 bytes per unit; F16, BF16: rows) reach the lanes through a per-warp ring of D shared-memory stages filled by cp.async:
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

#include "bulk.cuh"
#include "mv.cuh"

/* The streamed types, X(type) for each: every per-type list of the streamed matvec (mvs_type,
 * mvs_ring_bytes, the kernels rl_mvs_prepare sets up, mvs_kernel_for) is generated from this
 * one, so a type added here is added everywhere. */
#define RL_MVS_TYPES(X) X(RL_Q4_0) X(RL_Q8_0) X(RL_FP8) X(RL_RQ2) X(RL_RQ4) X(RL_F16) X(RL_BF16)

__host__ __device__ constexpr bool mvs_type(int T) {
#define MVS_IS(t) T == t ||
    return RL_MVS_TYPES(MVS_IS) false;
#undef MVS_IS
}

/* The streamed types stored as planes with a scale plane (the quantized ones, whose rings are
 * of 8-bit codes or less; RL_CUDA_MVS=2 streams only these). */
__host__ __device__ constexpr bool mvs_scaled(int T) {
    return T == RL_Q4_0 || T == RL_Q8_0 || T == RL_FP8 || T == RL_RQ2 || T == RL_RQ4;
}

/* Stage layout of type T. D: stages in a warp's ring (D - 1 in flight while one is computed),
 * sized so that a ring is 8-12 KB. */
template <int T> struct mvs_tr {
    static constexpr int NV = mv_tr<T>::NV; /* 16-byte pieces per unit (mv_tr CW values: 32, RQ2 64) */
    static constexpr bool S = mvs_scaled(T); /* has a scale plane */
    static constexpr int SB = T == RL_RQ2 || T == RL_RQ4 ? 4 : 2; /* scale-plane bytes per unit (RQ2, RQ4: d, m) */
    static constexpr int QB = 32 * 16 * NV;                 /* one row's quants of a stage */
    static constexpr int ROW = QB + (S ? 32 * SB : 0);
    static constexpr int STAGE = 2 * ROW;
    static constexpr int D = (T == RL_Q4_0 || T == RL_RQ2) ? 8 : (T == RL_Q8_0 || T == RL_FP8 || T == RL_RQ4) ? 4 : 3;
    static constexpr int RING = D * STAGE; /* bytes of one warp's ring */
};

/* A warp's ring in bytes, for a type known at run time (0: not streamed). */
__host__ __device__ constexpr size_t mvs_ring_bytes(int T) {
#define MVS_RING(t) T == t ? (size_t)mvs_tr<t>::RING :
    return RL_MVS_TYPES(MVS_RING) 0;
#undef MVS_RING
}

/* Values per unit (mv_tr CW: 32, RQ2 / RQ4 64) for a streamed type known at run time (0: not
 * streamed). */
__host__ __device__ constexpr int mvs_unit_values(int T) {
#define MVS_CW(t) T == t ? mv_tr<t>::CW :
    return RL_MVS_TYPES(MVS_CW) 0;
#undef MVS_CW
}

/* Shared memory before the rings: the staged input, rounded up to 16 bytes. */
__host__ __device__ inline size_t mvs_x_bytes(int n, bool q8) { return (stage_bytes(n, q8) + 15) & ~(size_t)15; }

/* Slot of 16-byte piece P of a row's stage: the XOR keeps it within its group of 8 pieces. */
template <int NV> __device__ __forceinline__ int swz(int P) { return P ^ ((P >> 3) & (NV - 1)); }

/* The staged input as the dot functions read it (mv_stage's layout at xs): fp32 (padded), and
 * with 8-bit activations the int8 plane, the chunk scales and the integer sums after it. */
struct mv_xin {
    const float *xs, *xd;
    const int8_t *xq;
    const int *xsum;
    __device__ __forceinline__ mv_xin(const float *xs_, int n) : xs(xs_) {
        xq = (const int8_t *)((const char *)xs_ + xs_f32_bytes(n));
        xd = (const float *)(xq + n);
        xsum = (const int *)(xd + n / 32);
    }
};

/* acc[i] += unit c of row i . x for both rows of an item: the streamed kernels' one dot, in
 * mv_kernel's order (so all of them give the same bits). */
template <int T, bool Q8>
__device__ __forceinline__ void mvs_dot(const raw_chunk<T> *r, const mv_xin &x, int c, float *acc) {
    if constexpr (T == RL_RQ2) { /* unit c is 64-value block c */
        if constexpr (Q8) rq2_q8<false>(r, x.xq, x.xd, x.xsum, c, nullptr, acc);
        else rq2_f32<false>(r, x.xs, c, nullptr, acc);
    } else if constexpr (T == RL_RQ4) {
        if constexpr (Q8) rq4_q8(r, x.xq, x.xd, x.xsum, c, acc);
        else rq4_f32(r, x.xs, c, acc);
    } else if constexpr (Q8) {
        const int4 xa = *(const int4 *)(x.xq + c * 32), xc = *(const int4 *)(x.xq + c * 32 + 16);
        const int xw[8] = {xa.x, xa.y, xa.z, xa.w, xc.x, xc.y, xc.z, xc.w};
#pragma unroll
        for (int i = 0; i < 2; i++) acc[i] += dot_q8<T>(r[i], xw, x.xd[c], x.xsum[c]);
    } else {
        dot2<T>(r, x.xs + c * 36, acc, nullptr, nullptr, c);
    }
}

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
        const mv_xin x(xs, n);
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
                mvs_dot<T, Q8>(r, x, c, acc);
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


/* ---- bulk-copy ring (v2.15, knob RL_CUDA_MVB) ---------------------------------------------
 * The same work items, per-lane unit order, dot (mvs_dot) and epilogue as mvs_warp, so the
 * same bits; the weights reach shared memory as pages moved by the copy engine (bulk.cuh)
 * instead of one cp.async per lane and 16 bytes. Why: the kernel lab's bulk matvec read
 * layer-sized Q4_0 tensors at 1.2-1.8x mvs's rate (docs/PERF.md v2.14).
 *
 * Page k of a warp: units u0 .. u0 + pu - 1 of one item's two rows (pu <= UP, a run-time
 * multiple of 32 chosen by the host, mvb_plan), laid out in its slot as row 0's quants, row 1's
 * quants (pu * QU bytes each), row 0's scales, row 1's scales (pu * SB bytes each). Where the
 * two rows' runs are adjacent in memory (a non-GLU item's whole rows: consecutive rows of a
 * plane without padding) that is one copy per plane, else one per row and plane. A warp's ring
 * has D slots and a barrier each (phase k / D of slot k % D); lane 0 issues the warp's own
 * pages, refilling the slot the warp has just read, so no warp waits on another's progress and
 * the barriers need no "empty" side. Reads from a slot: a lane takes its unit's 16-byte pieces
 * at QU-byte strides (Q4_0: conflict-free; Q8_0 / FP8: two-way bank conflicts, which the
 * copy engine's unswizzled layout cannot avoid). Only the types with a scale plane. */
template <int T> struct mvb_tr {
    static constexpr int QU = 16 * mv_tr<T>::NV; /* quant bytes per unit */
    static constexpr int SB = mvs_tr<T>::SB;     /* scale bytes per unit */
    static constexpr int MAXD = 8;               /* most slots per warp (the barrier area) */
};
/* Bytes of one slot holding up to up units of two rows, for a type known at run time (0: not
 * a bulk type). */
__host__ __device__ constexpr size_t mvb_slot_bytes(int T, int up) {
#define MVB_SLOT(t) T == t ? (size_t)2 * up * (mvb_tr<t>::QU + mvb_tr<t>::SB) :
    return mvs_scaled(T) ? RL_MVS_TYPES(MVB_SLOT) 0 : 0;
#undef MVB_SLOT
}

template <int T, bool GLU, bool Q8> struct mvb_warp {
    static_assert(mvs_scaled(T), "the bulk ring takes the types with a scale plane");
    static constexpr int QU = mvb_tr<T>::QU, SB = mvb_tr<T>::SB;
    const rl_mv_args *a;
    const uint8_t *ring;
    uint32_t rs, bar0; /* shared addresses of slot 0 and of its barrier */
    int up, D, slot, nu, npg, G, items, p0, total;
    int k_issue, ip, ipg; /* the copy cursor: page k_issue is page ipg of item ip */

    __device__ __forceinline__ void init(const rl_mv_args *args, uint8_t *ring_, uint64_t *bars, int up_, int D_,
                                         int warp_id, int n_warps) {
        a = args;
        ring = ring_;
        rs = rl_smem_addr(ring_);
        bar0 = rl_smem_addr(bars);
        up = up_;
        D = D_;
        slot = (int)mvb_slot_bytes(T, up_);
        nu = a->n / mv_tr<T>::CW;
        npg = (nu + up - 1) / up;
        G = n_warps;
        items = mv_items(*a, GLU);
        p0 = warp_id;
        total = p0 < items ? ((items - 1 - p0) / G + 1) * npg : 0;
        k_issue = 0;
        ip = p0;
        ipg = 0;
        if ((threadIdx.x & 31) == 0) {
            for (int i = 0; i < D; i++) mb_init(bar0 + 8 * i, 1);
            mb_init_fence();
        }
        __syncwarp();
    }

    /* Lane 0 copies the next page into its slot (the caller has finished reading that slot). */
    __device__ __forceinline__ void issue() {
        if (k_issue >= total) return;
        if ((threadIdx.x & 31) == 0) {
            const int u0 = ipg * up, pu = min(up, nu - u0), sl = k_issue % D;
            const uint32_t dst = rs + sl * slot, bar = bar0 + 8 * sl, qb = pu * QU, sb = pu * SB;
            const mv_task t = mv_resolve(*a, ip, GLU);
            const bool two = GLU || t.rb >= 0;
            const uint8_t *q0 = t.w[0] + (size_t)u0 * QU, *q1 = t.w[1] + (size_t)u0 * QU;
            const uint8_t *s0 = t.s[0] + (size_t)u0 * SB, *s1 = t.s[1] + (size_t)u0 * SB;
            bulk_fence();
            mb_expect(bar, (two ? 2 : 1) * (qb + sb));
            if (two && q1 == q0 + qb && s1 == s0 + sb) {
                bulk_copy(dst, q0, 2 * qb, bar);
                bulk_copy(dst + 2 * qb, s0, 2 * sb, bar);
            } else {
                bulk_copy(dst, q0, qb, bar);
                bulk_copy(dst + 2 * qb, s0, sb, bar);
                if (two) {
                    bulk_copy(dst + qb, q1, qb, bar);
                    bulk_copy(dst + 2 * qb + sb, s1, sb, bar);
                }
            }
        }
        k_issue++;
        if (++ipg == npg) {
            ipg = 0;
            ip += G;
        }
    }

    /* The first D pages: weights only, so a caller may issue them before the input exists. */
    __device__ __forceinline__ void prefetch() {
        for (int k = 0; k < D; k++) issue();
    }

    /* As mvs_warp::run: stages the input with the whole block, then computes the warp's pages. */
    __device__ __forceinline__ void run(float *xs, double *red) {
        const int lane = threadIdx.x & 31;
        mv_stage<T == RL_RQ2 ? 2 : 0, Q8, 8, false>(*a, a->x, xs, red);
        const mv_xin x(xs, a->n);
        const int pos = a->io ? a->io->pos : 0;
        int p = p0, pg = 0;
        mv_task t;
        if (total) t = mv_resolve(*a, p0, GLU);
        float acc[2] = {0.0f, 0.0f};
        for (int k = 0; k < total; k++) {
            const int sl = k % D, u0 = pg * up, pu = min(up, nu - u0);
            while (!mb_try(bar0 + 8 * sl, (uint32_t)(k / D) & 1)) {
            }
            const uint8_t *st = ring + (size_t)sl * slot;
            for (int cl = lane; cl - lane < pu; cl += 32) { /* the lanes' units: mv_kernel's order */
                if (cl < pu) {
                    raw_chunk<T> r[2];
#pragma unroll
                    for (int i = 0; i < 2; i++) {
                        const uint8_t *ru = st + (size_t)(i * pu + cl) * QU;
#pragma unroll
                        for (int q = 0; q < mv_tr<T>::NV; q++) r[i].v[q] = *(const uint4 *)(ru + 16 * q);
                        const uint8_t *su = st + (size_t)2 * pu * QU + (size_t)(i * pu + cl) * SB;
                        if constexpr (SB == 4) r[i].d = *(const uint32_t *)su;
                        else r[i].d = *(const uint16_t *)su;
                    }
                    mvs_dot<T, Q8>(r, x, u0 + cl, acc);
                }
            }
            __syncwarp(); /* every lane has read the slot: refill it */
            issue();
            if (++pg == npg) {
                mv_finish<GLU, false>(*a, t, p, acc, pos, 0);
                acc[0] = acc[1] = 0.0f;
                pg = 0;
                p += G;
                if (p < items) t = mv_resolve(*a, p, GLU);
            }
        }
    }
};

#endif
