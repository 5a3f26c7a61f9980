/* The streamed matvec's device code (v2.4), shared by its own kernel (mvs.cu, one launch per
 * matvec) and the persistent decode kernel (persist.cu, every matvec of a token as phases of
 * one launch). Device code only.
 *
 * Weights of the plane types (Q4_0, Q8_0, FP8: a quant plane and a 16-bit scale plane; Q4_K: Q4_0's
 * code plane and a plane of 16-byte super-block headers, 2 bytes per unit; Q5_K: Q4_K's headers
 * and codes in stages of 32 units; Q6_K: both planes in stages of 32 units (dequant.cuh, Q5_K /
 * Q6_K as uploaded); RQ2 / RQ4: 16 / 32 code
 * bytes per 64-value unit and a (d, m) plane of 4 bytes per unit; F16, BF16: rows) reach the
 * lanes through a per-warp ring of D shared-memory stages filled by cp.async:
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
 * lanes x 4 bytes, which for Q4_K are the 4 headers of the stage's 32 units, each lane reading
 * its unit's whole header; RQ2: 128 bytes of (d, m) pairs, 32 lanes x 4; Q5_K: 640 bytes of
 * codes and Q4_K's headers; Q6_K: 768 bytes of codes and 72 of sub-scales and d, a stage of its
 * planes as it is). A lane reads back its own
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
#define RL_MVS_TYPES(X) X(RL_Q4_0) X(RL_Q8_0) X(RL_FP8) X(RL_RQ2) X(RL_RQ4) X(RL_Q4_K) X(RL_Q5_K) X(RL_Q6_K) X(RL_F16) X(RL_BF16)

__host__ __device__ constexpr bool mvs_type(int T) {
#define MVS_IS(t) T == t ||
    return RL_MVS_TYPES(MVS_IS) false;
#undef MVS_IS
}

/* The streamed types stored as planes with a scale plane (the quantized ones, whose rings are
 * of 8-bit codes or less; RL_CUDA_MVS=2 streams only these). */
__host__ __device__ constexpr bool mvs_scaled(int T) {
    return T == RL_Q4_0 || T == RL_Q8_0 || T == RL_FP8 || T == RL_RQ2 || T == RL_RQ4 || T == RL_Q4_K || T == RL_Q5_K ||
           T == RL_Q6_K;
}

/* The scaled types the bulk-page variant takes: a unit's bytes are its own in each plane (Q4_K's
 * 2 bytes per unit are an eighth of its super-block's header, which the unit needs whole; Q6_K's
 * planes are in stages). */
__host__ __device__ constexpr bool mvb_type(int T) { return mvs_scaled(T) && T != RL_Q4_K && T != RL_Q5_K && T != RL_Q6_K; }

/* Stage layout of type T. D: stages in a warp's ring (D - 1 in flight while one is computed),
 * a ring of 4-12 KB. Q4_0 had 8 stages until the kernel lab timed the depth (docs/PERF.md
 * v2.17): at 5 a layer's tensors read ~1 us faster (QKV-sized 28.3 MB 11.57 against 12.59 us,
 * down-sized 25.4 MB 13.84 against 14.90), a 151 MB one 2% slower; and 3 in decoding (v2.20,
 * tg128 alternated: Llama-2-7B +1.5-1.9%, TinyLlama +0.2-1.9%; Q4_K, the same ring, with it).
 * Q8_0 is best at 4 (Q6_K, a ring of similar stages, takes 4 too). Q5_K takes Q4_K's 3, and 2 in
 * 16-warp blocks (a row of a stage: 704 bytes, Q4_K's 576, Q6_K's 848). The K-quants' depths
 * were swept in decoding (v2.22, tg128 two rounds, Q4_K 2-5, Q5_K 2-5, Q6_K 3-6 on TinyLlama and
 * Llama-2-7B Q4_K_M / Q5_K_M): only Q5_K at 2 in 7B's 16-warp blocks gained (+2.5%; TinyLlama's
 * 8-warp blocks lost 1.3% at 2); every other depth was within 0.5% or slower. Q4_0 (2, 4), Q8_0
 * (2, 3, 5) and F16 (2, 4) were swept the same way: none beat its default.
 * RQ4 at 2 and RQ2 at 3 in 16-warp blocks (D16; 8 in smaller ones) were timed in decoding
 * (v2.19, tg128): RQ4 4 -> 2 +6% on TinyLlama, +11% on Llama-2-7B; RQ2 8 -> 3 +12% on 7B,
 * while TinyLlama's 8-warp blocks lost 3% at 4-6. A shallower ring leaves less queued in the
 * memory system ahead of the input's loads when the PDL wait returns (the lab's timeline: the
 * staging takes as long by bulk copy as by loads, v2.19). */
template <int T> struct mvs_tr {
    /* 16-byte pieces per unit (mv_tr CW values: 32, RQ2 64); Q4_K's repacked codes as Q4_0's;
     * Q5_K's and Q6_K's low 4 bits as Q4_0's, their high bits after them (dequant.cuh) */
    static constexpr int NV = T == RL_Q4_K || T == RL_Q5_K || T == RL_Q6_K ? 1 : mv_tr<T>::NV;
    static constexpr bool S = mvs_scaled(T); /* has a scale plane */
    /* scale-plane bytes per unit (RQ2, RQ4: d, m; Q4_K: its 16-byte header per 8 units); Q6_K: a
     * stage's 72 bytes (SS) in a region of 80, for the next row's 16-byte alignment */
    static constexpr int SB = T == RL_RQ2 || T == RL_RQ4 ? 4 : 2;
    static constexpr int QB = T == RL_Q6_K ? Q6K_SQ : T == RL_Q5_K ? Q5K_SQ : 32 * 16 * NV; /* one row's quants of a stage */
    static constexpr int SS = T == RL_Q6_K ? Q6K_SS : 32 * SB;      /* one row's scale-plane bytes of a stage */
    static constexpr int ROW = QB + (T == RL_Q6_K ? 80 : S ? SS : 0);
    static constexpr int STAGE = 2 * ROW;
    static constexpr int D = T == RL_Q4_0 || T == RL_Q4_K || T == RL_Q5_K ? 3 : T == RL_RQ2 ? 8 : T == RL_RQ4 ? 2
                             : (T == RL_Q8_0 || T == RL_FP8 || T == RL_Q6_K) ? 4 : 3;
    static constexpr int D16 = T == RL_RQ2 ? 3 : T == RL_Q5_K ? 2 : D; /* in blocks of 16 warps or more */
    static constexpr int RING = D * STAGE; /* bytes of one warp's ring */
};

/* A warp's ring in bytes (blocks of 16 warps or more: the D16 ring), for a type known at run
 * time (0: not streamed). */
__host__ __device__ constexpr size_t mvs_ring_bytes(int T, bool w16 = false) {
#define MVS_RING(t) T == t ? (size_t)(w16 ? mvs_tr<t>::D16 : mvs_tr<t>::D) * mvs_tr<t>::STAGE :
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

/* Shared memory before the rings: the staged input (mv_stage without F32: with 8-bit
 * activations only their planes, else the fp32 copy), rounded up to 16 bytes. */
__host__ __device__ inline size_t mvs_x_bytes(int n, bool q8) {
    return ((q8 ? stage_bytes(n, true) - xs_f32_bytes(n) : stage_bytes(n, false)) + 15) & ~(size_t)15;
}

/* #pragma unroll in code that the host compiler sees too (mvs_locate, mvs_cursor) */
#ifdef __CUDA_ARCH__
#define RL_UNROLL _Pragma("unroll")
#else
#define RL_UNROLL
#endif

/* Slot of 16-byte piece P of a row's stage: the XOR keeps it within its group of 8 pieces. */
template <int NV> __host__ __device__ __forceinline__ int swz(int P) { return P ^ ((P >> 3) & (NV - 1)); }

/* The staged input as the dot functions read it (mv_stage's layout at xs without F32): fp32
 * (padded), or with 8-bit activations (q8) the int8 plane, the chunk scales and the integer
 * sums. */
struct mv_xin {
    const float *xs, *xd;
    const int8_t *xq;
    const int *xsum;
    __device__ __forceinline__ mv_xin(const float *xs_, int n, bool q8) : xs(xs_) {
        xq = (const int8_t *)xs_ + (q8 ? 0 : xs_f32_bytes(n)); /* (unused without q8) */
        xd = (const float *)(xq + n);
        xsum = (const int *)(xd + n / 32);
    }
};

/* acc[i] += unit c of row i . x for both rows of an item: the streamed kernels' one dot, in
 * mv_kernel's order (so all of them give the same bits). */
template <int T, bool Q8>
__device__ __forceinline__ void mvs_dot(const raw_chunk<T> *r, const mv_xin &x, int c, float *acc) {
    if constexpr (T == RL_RQ2) { /* unit c is 64-value block c */
        /* c = lane + 32j in every caller: the pieces' rotation is the lane's */
        if constexpr (Q8) rq2_q8<false, true>(r, x.xq, x.xd, x.xsum, c, nullptr, acc, rq2_rot(threadIdx.x & 31));
        else rq2_f32<false>(r, x.xs, c, nullptr, acc);
    } else if constexpr (T == RL_RQ4) {
        if constexpr (Q8) rq4_q8(r, x.xq, x.xd, x.xsum, c, acc);
        else rq4_f32(r, x.xs, c, acc);
    } else if constexpr (Q8) {
        const int4 xa = *(const int4 *)(x.xq + c * 32), xc = *(const int4 *)(x.xq + c * 32 + 16);
        const int xw[8] = {xa.x, xa.y, xa.z, xa.w, xc.x, xc.y, xc.z, xc.w};
#pragma unroll
        for (int i = 0; i < 2; i++) {
            /* the K-quants: kq_dot_q8's terms, from the ring */
            if constexpr (T == RL_Q4_K) acc[i] += q4k_dot_q8(r[i].v[0], r[i].k, xw, x.xd[c], x.xsum[c]);
            else if constexpr (T == RL_Q5_K) acc[i] += q5k_dot_q8(r[i].v[0], r[i].hi, r[i].k, xw, x.xd[c], x.xsum[c]);
            else if constexpr (T == RL_Q6_K) acc[i] += q6k_dot_q8(r[i].v[0], r[i].hi, r[i].sd, xw, x.xd[c]);
            else acc[i] += dot_q8<T>(r[i], xw, x.xd[c], x.xsum[c]);
        }
    } else if constexpr (T == RL_Q4_K || T == RL_Q5_K || T == RL_Q6_K) { /* chunk_dot's dequantise-then-dot */
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float v[32];
            if constexpr (T == RL_Q4_K) q4k_vals(r[i].v[0], r[i].k, v);
            else if constexpr (T == RL_Q5_K) q5k_vals(r[i].v[0], r[i].hi, r[i].k, v);
            else q6k_vals(r[i].v[0], r[i].hi, r[i].sd, v);
            acc[i] += dot32_f32(v, x.xs + c * 36);
        }
    } else {
        dot2<T>(r, x.xs + c * 36, acc, nullptr, nullptr, c);
    }
}

/* Where a warp's copy cursor stands on item p: lane l's first source bytes in both rows'
 * planes (q, s), the additions dq, ds to the item G on (GLU: G rows on, else 2G rows), valid
 * for the items before step_end (GLU: all of them; else those of p's segment with both rows),
 * so that mv_resolve's search and multiplications run once per segment, not once per item.
 * mv_resolve's rows, with the second row's pointers the first's plus a row or nothing (an
 * absent second row re-reads the first). Inlined: called, it read the launch's parameters
 * through a generic pointer (LD, not LDC), a chain of dependent loads that every warp waited
 * out at once on each segment's first item (docs/PERF.md v2.44: 7B QKV 6% slower alone). Inlined
 * it reads them by LDC, and the stage path keeps its length (29 instructions for Q4_0 QKV)
 * without the register-pair copies of v2.24 (v2.45: tg128 +1-2% against the loop before). */
struct mvs_loc {
    const uint8_t *q[2], *s[2];
    ptrdiff_t dq[2], ds[2];
    int step_end;
};
template <int T, bool GLU>
__host__ __device__ __forceinline__ mvs_loc mvs_locate(const rl_mv_args &a, int p, int G, int items, int lane) {
    using TR = mvs_tr<T>;
    int seg = 0, ra = p;
    if (!GLU) seg = mv_unit(a, p, 2, &ra);
    mvs_loc l;
RL_UNROLL
    for (int i = 0; i < 2; i++) {
        const rl_dmat &m = a.seg[GLU ? i : seg].w;
        const int r = GLU ? p : ra;
        l.q[i] = m.q + (size_t)r * m.q_row + 16 * lane;
        l.s[i] = TR::S ? m.s + (size_t)r * m.s_row + 4 * lane : nullptr;
        if (!GLU && i == 1 && ra + 1 < m.rows) {
            l.q[1] += m.q_row;
            if (TR::S) l.s[1] += m.s_row;
        }
        const ptrdiff_t rows = GLU ? G : 2 * (ptrdiff_t)G;
        l.dq[i] = rows * (ptrdiff_t)m.q_row;
        l.ds[i] = TR::S ? rows * (ptrdiff_t)m.s_row : 0;
    }
    l.step_end = GLU ? items : p - ra / 2 + a.seg[seg].w.rows / 2;
    return l;
}

/* The copy cursor of one lane of a streamed warp (mvs_warp): stage k_issue is step ij of item
 * ip; this lane's source bytes of the step in the item's two rows are bq + oq (quants) and
 * bs + os (scales), and left units of the rows remain from this step on. Advanced by
 * additions: the loop issues one stage per computed stage, and recomputing the addresses from
 * (item, step) cost more instructions than the copies themselves (v2.6; v2.24: the item's
 * bases move by dq / ds, mvs_locate). Each copy's source is a fresh sum of a base and a 32-bit
 * offset: pointers advanced in place needed copying into register pairs before the copies
 * (ptxas kept their halves apart, or the new and the old values in separate registers).
 * Host and device code, so that a host test walks it (tests/cuda/test_cursor.cu). */
template <int T, bool GLU> struct mvs_cursor {
    using TR = mvs_tr<T>;
    static constexpr int NV = TR::NV;
    const rl_mv_args *a;
    int lane, nu, J, G, items, p0, total;
    uint32_t oq, os;
    int ip, ij, k_issue, left, step_end;
    const uint8_t *bq[2], *bs[2];
    ptrdiff_t dq[2], ds[2];

    __host__ __device__ __forceinline__ void seek(int p) {
        const mvs_loc l = mvs_locate<T, GLU>(*a, p, G, items, lane);
        for (int i = 0; i < 2; i++) {
            bq[i] = l.q[i];
            bs[i] = l.s[i];
            dq[i] = l.dq[i];
            ds[i] = l.ds[i];
        }
        step_end = l.step_end;
        oq = os = 0;
        left = nu;
    }

    /* warp warp_id of n_warps, lane lane_ */
    __host__ __device__ __forceinline__ void init(const rl_mv_args *args, int warp_id, int n_warps, int lane_) {
        a = args;
        lane = lane_;
        nu = a->n / mv_tr<T>::CW;
        J = (nu + 31) / 32;
        G = n_warps;
        items = mv_items(*a, GLU);
        p0 = warp_id;
        total = p0 < items ? ((items - 1 - p0) / G + 1) * J : 0;
        ip = p0;
        ij = 0;
        k_issue = 0;
        for (int i = 0; i < 2; i++) { /* set by seek; a warp without items keeps these */
            bq[i] = bs[i] = nullptr;
            dq[i] = ds[i] = 0;
        }
        oq = os = 0;
        left = step_end = 0;
        if (total) seek(p0);
    }

    /* This lane's copies of the stage at the cursor: f(byte offset in the stage, source,
     * 16 or 4 bytes), row i at i * TR::ROW. */
    /* f is a device lambda in mvs_warp and a host one in the test: each instantiation runs
     * where its f does, which nvcc's execution-space check cannot see */
#pragma nv_exec_check_disable
    template <class F> __host__ __device__ __forceinline__ void copies(F &&f) const {
RL_UNROLL
        for (int i = 0; i < 2; i++) {
            const uint32_t ru = i * TR::ROW;
            const uint8_t *gq = bq[i] + oq, *gs = TR::S ? bs[i] + os : nullptr;
            const int lf = left; /* units of the rows from this step on */
            if constexpr (T == RL_Q6_K) {
                /* lane l: unit l's low bits, units 2l and 2l + 1's high bits and sub-scales, and
                 * lanes 16-17 the d of super-blocks 2(l - 16), 2(l - 16) + 1 (16 units each) */
                if (lane < lf) f(ru + 16 * lane, gq, 16);
                if (lane < 16 && 2 * lane < lf) f(ru + 512 + 16 * lane, gq + 512, 16);
                if (lane < 16 ? 2 * lane < lf : lane < 18 && 16 * (lane - 16) < lf) f(ru + TR::QB + 4 * lane, gs, 4);
            } else if constexpr (T == RL_Q5_K) {
                /* lane l: unit l's low bits, units 4l .. 4l + 3's fifth bits, and Q4_K's headers */
                if (lane < lf) f(ru + 16 * lane, gq, 16);
                if (lane < 8 && 4 * lane < lf) f(ru + 512 + 16 * lane, gq + 512, 16);
                if (lane < 16 && 2 * lane < lf) f(ru + TR::QB + 4 * lane, gs, 4);
            } else {
                /* piece P = 32q + lane is in unit P / NV of the step; its slot is 32q + swz(lane)
                 * (the XOR takes bits 3-4 of P, which q does not touch for NV <= 4), so one
                 * register and immediate offsets address all NV copies */
                static_assert(NV <= 4, "swz(32q + lane) = 32q + swz(lane) needs NV <= 4");
                const uint32_t rl = ru + 16 * swz<NV>(lane);
RL_UNROLL
                for (int q = 0; q < NV; q++) {
                    if ((32 * q + lane) / NV < lf) f(rl + 512 * q, gq + 512 * q, 16);
                }
                /* the units' scales in 4-byte pieces: lane l copies units (4 / SB) l .. */
                if (TR::S && lane < 8 * TR::SB && 4 / TR::SB * lane < lf) f(ru + TR::QB + 4 * lane, gs, 4);
            }
        }
    }

    /* Past the stage at the cursor (its copies issued): the next step, or the next item. */
    __host__ __device__ __forceinline__ void step() {
        left -= 32;
        oq += TR::QB;
        if (TR::S) os += TR::SS;
        if (++ij == J) {
            ij = 0;
            ip += G;
            if (ip < step_end) {
                for (int i = 0; i < 2; i++) {
                    bq[i] += dq[i];
                    if (TR::S) bs[i] += ds[i];
                }
                oq = os = 0;
                left = nu;
            } else if (!GLU && ip < items) {
                seek(ip);
            }
        }
    }
};

/* One warp's share of one streamed matvec: items p0, p0 + G, ... of the launch (G warps in
 * all), J stages each. prefetch() issues the first D - 1 stages, which read only weights, so a
 * caller may issue them before the matvec's input exists (before a PDL wait, or before the
 * grid barrier that ends the previous phase); run() stages the input with the whole block
 * (every thread of the block must call it) and computes, issuing the stages that remain. The
 * caller must not touch the warp's ring between the two. CG: activations are read from L2
 * (rl_ld_cg; the persistent kernel). */
template <int T, bool GLU, bool Q8, bool CG = false, int DS = mvs_tr<T>::D> struct mvs_warp {
    using TR = mvs_tr<T>;
    static constexpr int NV = TR::NV, D = DS; /* DS: stages of the ring (the kernel lab varies it) */
    mvs_cursor<T, GLU> cur; /* the copy cursor of this lane */
    uint8_t *ring;
    uint32_t rs, s_off; /* the ring's shared address; the slot of the next stage issued */

    __device__ __forceinline__ void init(const rl_mv_args *args, uint8_t *ring_, int warp_id, int n_warps) {
        ring = ring_;
        /* through a shuffle, which ptxas cannot recompute: left as an expression of the warp
         * index and n it was rebuilt on every step (~9 instructions) */
        rs = __shfl_sync(0xffffffffu, (uint32_t)__cvta_generic_to_shared(ring_), 0);
        s_off = 0;
        cur.init(args, warp_id, n_warps, threadIdx.x & 31);
    }

    /* The next stage's copies into the next slot (none past the last: an empty group keeps
     * the count uniform). */
    __device__ __forceinline__ void issue() {
        if (cur.k_issue < cur.total) {
            const uint32_t st = rs + s_off;
            cur.copies([&](uint32_t off, const uint8_t *src, int bytes) {
                if (bytes == 16) cp16(st + off, src);
                else cp4(st + off, src);
            });
            cur.step();
        }
        cur.k_issue++;
        s_off = s_off + TR::STAGE == D * TR::STAGE ? 0 : s_off + TR::STAGE;
        cp_commit();
    }

    /* the first k stages; run() needs D - 1 issued before its loop (the kernel lab issues some
     * from the staging hook) */
    __device__ __forceinline__ void prefetch(int k = D - 1) {
        for (int i = 0; i < k; i++) issue();
    }

    /* xs: the block's staging area (mvs_x_bytes(n, Q8)), red: 32 doubles of shared scratch, h:
     * mv_stage's hook.
     * TRACE (the kernel lab's timeline, bench/lab_mvs.cu): where tr is not NULL, lane 0 writes
     * clock64() once the input is staged, once the warp's first stage has landed and at its
     * end to tr[0..2]. STAGE false (the lab's floor) leaves the input unstaged. */
    template <bool TRACE = false, bool STAGE = true, class H = mv_hook>
    __device__ __forceinline__ void run(float *xs, double *red, long long *tr = nullptr, const H &h = H()) {
        const rl_mv_args *a = cur.a;
        const int n = a->n, lane = threadIdx.x & 31, nu = cur.nu, J = cur.J, G = cur.G, total = cur.total;
        /* RQ2's 8-bit plane in the shift decoder's layout (the table decoder is not streamed) */
        if (STAGE) mv_stage<T == RL_RQ2 ? 2 : 0, Q8, 8, CG, false>(*a, h.input(*a), xs, red, h);
        else h.loading();
        if (TRACE && tr && lane == 0) tr[0] = clock64();
        const mv_xin x(xs, n, Q8);
        const int pos = a->io ? a->io->pos : 0;
        int p = cur.p0, j = 0;
        float acc[2] = {0.0f, 0.0f};
        for (int k = 0; k < total; k++) {
            issue();
            cp_wait<D - 1>(); /* this lane's copies of stage k have landed */
            __syncwarp();     /* and every lane's */
            if (TRACE && tr && k == 0 && lane == 0) tr[1] = clock64();
            /* stage k's slot, (k % D) * STAGE: issue() has just filled slot (k + D - 1) % D
             * and moved s_off on to the next, k % D */
            const uint8_t *st = ring + s_off;
            const int c = 32 * j + lane; /* mv_kernel's per-lane order */
            if (c < nu) {
                raw_chunk<T> r[2];
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const uint8_t *ru = st + i * TR::ROW;
#pragma unroll
                    for (int q = 0; q < NV; q++) r[i].v[q] = *(const uint4 *)(ru + 16 * swz<NV>(lane * NV + q));
                    if constexpr (T == RL_Q6_K) {
                        r[i].hi = *(const uint2 *)(ru + 512 + 8 * lane);
                        r[i].sd = (uint32_t)*(const uint16_t *)(ru + TR::QB + 2 * lane) |
                                  (uint32_t)*(const uint16_t *)(ru + TR::QB + 64 + 2 * (lane >> 3)) << 16;
                    } else if constexpr (T == RL_Q4_K || T == RL_Q5_K) {
                        if constexpr (T == RL_Q5_K) r[i].hi = *(const uint32_t *)(ru + 512 + 4 * lane);
                        r[i].k = q4k_sub_of(*(const uint4 *)(ru + TR::QB + 16 * (lane >> 3)), lane & 7);
                    }
                    else if constexpr (TR::SB == 4) r[i].d = *(const uint32_t *)(ru + TR::QB + 4 * lane);
                    else if constexpr (TR::S) r[i].d = *(const uint16_t *)(ru + TR::QB + 2 * lane);
                }
                mvs_dot<T, Q8>(r, x, c, acc);
            }
            __syncwarp(); /* the slot is refilled by the next issue */
            if (++j == J) {
                float va, vb;
                mv_reduce2(acc, va, vb);
                /* lane 0 holds both rows' sums; its epilogue runs while the next item's
                 * stages land (deferring 16 items' epilogues past the loop left each warp's
                 * last ones exposed: PERF v2.25 section 3) */
                if (lane == 0) mv_epilogue<GLU, CG>(*a, mv_resolve(*a, p, GLU), p, va, vb, pos, 0);
                acc[0] = acc[1] = 0.0f;
                j = 0;
                p += G;
            }
        }
        cp_wait<0>();
        if (TRACE && tr && lane == 0) tr[2] = clock64();
    }
};


/* ---- bulk pages from a producer warp (v2.16, knob RL_CUDA_MVB) ----------------------------
 * Why: the kernel lab's bulk matvec (bench/lab_bulk.cu: a block's contiguous rows moved by one
 * producer in pages of several rows) read layer-sized Q4_0 tensors 1.3-1.8x faster than mvs
 * (docs/PERF.md v2.14), while v2.15's bulk ring, each warp copying its own pages of one item,
 * was slower than mvs on every tensor and model measured (v2.16).
 *
 * Block b owns the launch's items [b * ipb, b * ipb + ipb). Its last warp is the producer:
 * lane 0 moves page k, the block's items k * PI .. k * PI + PI - 1 (whole items), into slot
 * k % NS by cp.async.bulk, one copy per plane and run of rows within one matrix. The other
 * warps compute, in G groups of PI warps: group g takes pages g, g + G, ..., warp i of it item
 * i of the page; lane l its units l, l + 32, ... of both rows through mvs_dot, then mv_finish:
 * mvs's order, dot and epilogue, so the same bits. The staging is mvs's too: every warp of the
 * block (the producer as well) stages the input, after the producer has issued the first NS
 * pages and before it issues the rest.
 *
 * A slot holds PI items' rows (non-GLU: item j's at 2j and 2j + 1, the rows of a page being
 * consecutive within each matrix; GLU: gate rows at 0 .. PI - 1, up rows at PI .. 2PI - 1): row
 * r's quants at r * qb, then its scales at 2 PI qb + r * sb. Barriers per slot: full (the
 * producer's one arrival with the page's bytes) and empty (PI arrivals, one per warp of the
 * group, the slot read). NS is a multiple of G, so a slot always serves the same group, whose
 * warps take its pages in order: a wait by parity cannot meet a phase two ahead (the lab's
 * failure with slots shared between groups). Reads from a slot: a lane takes its unit's 16-byte
 * pieces at QU-byte strides (Q4_0: conflict-free; Q8_0 / FP8: two-way bank conflicts). Only the
 * types with a scale plane. */
template <int T> struct mvb_tr {
    static constexpr int QU = 16 * mv_tr<T>::NV; /* quant bytes per unit */
    static constexpr int SB = mvs_tr<T>::SB;     /* scale bytes per unit */
};
/* Bytes per unit of the quant plane (scale false) or of the scale plane, for a type known at
 * run time (0: not a bulk type). */
__host__ __device__ constexpr int mvb_unit_bytes(int T, bool scale) {
#define MVB_UB(t) T == t ? (scale ? mvb_tr<t>::SB : mvb_tr<t>::QU) :
    return mvb_type(T) ? RL_MVS_TYPES(MVB_UB) 0 : 0;
#undef MVB_UB
}

/* The page shape of a launch, chosen by the host (mvs.cu mvb_plan). */
struct mvb_geom {
    int ipb;    /* items per block */
    int pi;     /* items per page, and warps per group */
    int groups; /* G */
    int ns;     /* slots, a multiple of G */
};

template <int T, bool GLU, bool Q8> struct mvb_block {
    static_assert(mvb_type(T), "bulk pages take the types with a scale plane of their own");
    static constexpr int QU = mvb_tr<T>::QU, SB = mvb_tr<T>::SB;
    const rl_mv_args *a;
    const uint8_t *ring;
    mvb_geom g;
    uint32_t rs, full0, empty0; /* shared addresses of slot 0 and of the barrier arrays */
    int nu, qb, sb, slot, i0, i1, npages;
    /* The producer's copy cursor (lane 0's registers), advanced by additions page by page: the
     * next page's first rows in the planes (GLU: gate, up; else the current segment's), that
     * segment's index and rows left. Resolving each page from (item, segment) through the
     * launch's parameters cost more than the copies (a first version: about 0.6 us a page). */
    const uint8_t *cq[2], *cs[2];
    int seg, left;

    /* bars: 2 * ns barriers (full, then empty). Lane 0 of the producer initialises them. */
    __device__ __forceinline__ void init(const rl_mv_args *args, uint8_t *ring_, uint64_t *bars, mvb_geom g_) {
        a = args;
        g = g_;
        ring = ring_;
        rs = rl_smem_addr(ring_);
        full0 = rl_smem_addr(bars);
        empty0 = full0 + 8 * g.ns;
        nu = a->n / mv_tr<T>::CW;
        qb = nu * QU;
        sb = nu * SB;
        slot = 2 * g.pi * (qb + sb);
        i0 = blockIdx.x * g.ipb;
        i1 = min(mv_items(*a, GLU), i0 + g.ipb);
        npages = i1 > i0 ? (i1 - i0 + g.pi - 1) / g.pi : 0;
        if (producer() && (threadIdx.x & 31) == 0) {
            for (int i = 0; i < g.ns; i++) {
                mb_init(full0 + 8 * i, 1);
                mb_init(empty0 + 8 * i, g.pi);
            }
            mb_init_fence();
            if (npages) {
                if constexpr (GLU) {
                    for (int h = 0; h < 2; h++) {
                        cq[h] = qrow(a->seg[h].w, i0);
                        cs[h] = srow(a->seg[h].w, i0);
                    }
                } else {
                    int ra;
                    seg = mv_unit(*a, i0, 2, &ra);
                    cq[0] = qrow(a->seg[seg].w, ra);
                    cs[0] = srow(a->seg[seg].w, ra);
                    left = a->seg[seg].w.rows - ra;
                }
            }
        }
    }

    __device__ __forceinline__ bool producer() const { return (int)(threadIdx.x >> 5) == (int)(blockDim.x >> 5) - 1; }

    /* nr rows from the cursor's plane h into slot rows ro.. of the slot at dst. */
    __device__ __forceinline__ void copy_rows(uint32_t dst, uint32_t bar, int h, int ro, int nr) {
        mb_expect_only(bar, nr * (qb + sb));
        bulk_copy(dst + ro * qb, cq[h], nr * qb, bar);
        bulk_copy(dst + 2 * g.pi * qb + ro * sb, cs[h], nr * sb, bar);
        cq[h] += (size_t)nr * qb;
        cs[h] += (size_t)nr * sb;
    }

    /* Producer lane 0: page k (pages go in order) into slot k % ns, once the group has read the
     * slot's last page. GLU: one run per matrix; else one per run of the page's items within
     * one segment. */
    __device__ __forceinline__ void issue(int k) {
        const int sl = k % g.ns, np = min(g.pi, i1 - (i0 + k * g.pi));
        if (k >= g.ns)
            while (!mb_try(empty0 + 8 * sl, (uint32_t)(k / g.ns - 1) & 1)) {
            }
        const uint32_t dst = rs + sl * slot, bar = full0 + 8 * sl;
        bulk_fence(); /* the group's reads of the slot (ordered by the barrier) before the copy engine's writes */
        if constexpr (GLU) {
            copy_rows(dst, bar, 0, 0, np);
            copy_rows(dst, bar, 1, g.pi, np);
        } else {
            for (int it = 0; it < np;) {
                const int run = min(np - it, (left + 1) / 2), nr = min(2 * run, left);
                copy_rows(dst, bar, 0, 2 * it, nr);
                left -= nr;
                it += run;
                if (!left && ++seg < a->nseg) { /* the next segment's first rows */
                    cq[0] = a->seg[seg].w.q;
                    cs[0] = a->seg[seg].w.s;
                    left = a->seg[seg].w.rows;
                }
            }
        }
        mb_arrive(bar); /* the producer's one arrival: the phase ends when the bytes have landed */
    }

    /* The first pages read only weights: issued before the caller waits for its input. */
    __device__ __forceinline__ void prefetch() {
        if (producer() && (threadIdx.x & 31) == 0)
            for (int k = 0; k < min(g.ns, npages); k++) issue(k);
    }

    /* Every thread of the block: stages the input, then issues (producer) or computes. */
    __device__ __forceinline__ void run(float *xs, double *red) {
        mv_stage<T == RL_RQ2 ? 2 : 0, Q8, 8, false, false>(*a, a->x, xs, red);
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        if (producer()) {
            if (lane == 0)
                for (int k = g.ns; k < npages; k++) issue(k);
            return;
        }
        const int grp = warp / g.pi, wi = warp % g.pi;
        if (grp >= g.groups) return;
        const mv_xin x(xs, a->n, Q8);
        const int pos = a->io ? a->io->pos : 0;
        for (int k = grp; k < npages; k += g.groups) {
            const int sl = k % g.ns, p = i0 + k * g.pi + wi;
            while (!mb_try(full0 + 8 * sl, (uint32_t)(k / g.ns) & 1)) {
            }
            float acc[2] = {0.0f, 0.0f};
            mv_task t{};
            if (p < i1) {
                t = mv_resolve(*a, p, GLU);
                const uint8_t *st = ring + (size_t)sl * slot;
                const int r0 = GLU ? wi : 2 * wi, r1 = GLU ? g.pi + wi : t.rb >= 0 ? 2 * wi + 1 : r0;
                for (int c = lane; c < nu; c += 32) { /* mv_kernel's per-lane order */
                    raw_chunk<T> r[2];
#pragma unroll
                    for (int i = 0; i < 2; i++) {
                        const int ro = i ? r1 : r0;
                        const uint8_t *ru = st + (size_t)ro * qb + (size_t)c * QU;
#pragma unroll
                        for (int q = 0; q < mv_tr<T>::NV; q++) r[i].v[q] = *(const uint4 *)(ru + 16 * q);
                        const uint8_t *su = st + (size_t)2 * g.pi * qb + (size_t)ro * sb + (size_t)c * SB;
                        if constexpr (SB == 4) r[i].d = *(const uint32_t *)su;
                        else r[i].d = *(const uint16_t *)su;
                    }
                    mvs_dot<T, Q8>(r, x, c, acc);
                }
            }
            __syncwarp(); /* every lane has read the slot */
            if (lane == 0) mb_arrive(empty0 + 8 * sl);
            if (p < i1) mv_finish<GLU, false>(*a, t, p, acc, pos, 0);
        }
    }
};

#endif
