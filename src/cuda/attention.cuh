/* Flash decode's device code, shared by its own kernel (attention.cu, one launch per layer) and
 * the persistent decode kernel (persist.cu, one phase per layer); its score dot also by an
 * exact chunk's block per KV group (attention.cu), which must give the same bits, and its
 * merge's arithmetic (merge_splits) by that kernel's att_merge_group. Device code only. */
#ifndef RL_CUDA_ATTENTION_CUH
#define RL_CUDA_ATTENTION_CUH

#include <cuda_fp16.h>
#include <math.h>

#include "dequant.cuh"
#include "kernels.h"
#include "mv.cuh" /* i8_quarter, mvx_put: an exact chunk's Wo input staged here */
#include "reduce.cuh"

#define ATT_THREADS 128

/* Flash decode. Block (head h, split s, token z) over positions [s * S, (s + 1) * S) of
 * [0, pos]; ATT_THREADS threads. HJ = ceil(hd / 64): a lane's dimension pairs in the value pass.
 * Dynamic shared memory: the split's scores, q, and the warps' outputs [nw][hd].
 * Scores: one thread per key (16-byte loads along the key row in groups of 8, q broadcast from
 * shared memory). Values: warp w takes positions w, w + nw, ...; lane l the dimension pairs
 * 2l + 64j (coalesced 4-byte loads of a value row), a batch of PB rows' loads issued before
 * any is used, the first batch before the score reductions; the warps' sums are added in warp
 * order. A single active split writes o / l; otherwise the partials (max m, sum l,
 * unnormalised o[hd]) go to global memory and the head's last block to finish (an atomic
 * ticket, not an atomic sum) merges every active split in split order ((m, l) staged in
 * shared memory, o loaded 16 splits per batch). The kernel is a chain of memory round trips,
 * so every loop issues its loads in batches (at depth 4096 the value pass was 8 round trips
 * per warp and the merge 32 or more: 7B Q4_0 at d4096 287 -> 329 tok/s; v2.7 cut them again,
 * docs/PERF.md v2.7); the arithmetic keeps v2.2's order, so batching changed no bits. (A block
 * per GQA group reading each key once for its query heads was measured and dropped: an eighth
 * of the blocks, each doing eight heads' work in turn, made TinyLlama's attention 56% slower
 * at short context and slower at depth 4096 too. So were, for decoding, the chunks' grouped
 * kernel, its heads over two halves of 256 threads (-3 to -19% at depth 4096), and 2-8 heads
 * of a group a block, 128 threads each (-1 to -22%): docs/PERF.md v2.36. Decoding's attention
 * waits on each block's chain of trips and on how many SMs run one, not on its L2 reads.)
 * Q8: an int8 cache with a scale per 32 values (--kv-type q8, half the bytes of f16): a key's
 * score is the sum over its 32-value blocks of d * (q . k_int8), a value row adds (e * d) * v. */
/* An exact chunk whose Wo runs on tensor cores (a.frag set: its fragment plane): head h's output
 * o[hd] for token z (in shared memory) rounded to int8 as the chunk's staging kernel would round
 * it (i8_quarter on the same fp32 values, written by mvx_put: the same bytes), column z of the
 * plane, so that Wo needs no staging launch. Warp 0 of the group, a quarter chunk per lane;
 * hd % 32 == 0 (the host sets frag only then). */
__device__ __forceinline__ void att_stage_out(const rl_att_args &a, int h, int z, const float *o, int t) {
    if (t >= 32) return;
    const int nq = a.hd / 8; /* quarters of the head's chunks */
    for (int i0 = 0; i0 < nq; i0 += 32) { /* the same trip count on every lane: i8_quarter shuffles */
        const int i = i0 + t;
        const bool on = i < nq;
        float e[8];
#pragma unroll
        for (int j = 0; j < 8; j++) e[j] = on ? o[8 * i + j] : 0.0f;
        uint32_t w2[2];
        int sum;
        const float d = i8_quarter(e, w2, &sum);
        if (on) mvx_put(a.frag, h * a.hd / 32 + i / 4, z, a.n_tok, i % 4, w2, d, sum, a.frag_k8);
    }
}

/* Eight f16 of a key row (16 bytes) as four fp32 pairs. */
__device__ __forceinline__ void f16x8(uint4 k8, float2 f[4]) {
    f[0] = __half22float2(*(const __half2 *)&k8.x);
    f[1] = __half22float2(*(const __half2 *)&k8.y);
    f[2] = __half22float2(*(const __half2 *)&k8.z);
    f[3] = __half22float2(*(const __half2 *)&k8.w);
}

/* Eight dimensions of a score q . k (f: the key's, f16x8; qq: the matching q values) into the
 * two accumulators that take the even and the odd dimensions in turn: the order every
 * flash-decode kernel keeps, so that their scores are the same bits. */
__device__ __forceinline__ void dot8(const float *qq, const float2 f[4], float &acc0, float &acc1) {
    acc0 = fmaf(qq[0], f[0].x, acc0);
    acc1 = fmaf(qq[1], f[0].y, acc1);
    acc0 = fmaf(qq[2], f[1].x, acc0);
    acc1 = fmaf(qq[3], f[1].y, acc1);
    acc0 = fmaf(qq[4], f[2].x, acc0);
    acc1 = fmaf(qq[5], f[2].y, acc1);
    acc0 = fmaf(qq[6], f[3].x, acc0);
    acc1 = fmaf(qq[7], f[3].y, acc1);
}

/* One split's term of a merge: its (m, l) and unnormalised value o, weighted by exp(m - M) into
 * L and O. Every merge (merge_splits, att_merge_group, the clusters' merge) adds its splits
 * through this, in split order, so that they give the same bits. */
__device__ __forceinline__ void merge_term(float m, float l, float o, float M, float &L, float &O) {
    const float w = expf(m - M);
    L = fmaf(l, w, L);
    O = fmaf(o, w, O);
}

/* The merge of splits [c0, c0 + n) of one output dimension d, in split order: split c0 + j's
 * (m, l) at ml[2j], ml[2j + 1] (shared memory), its unnormalised value at ph[(c0 + j) (hd + 2) +
 * 2 + d] (the head's partials, written by other blocks of the launch: from L2), MC loads a
 * batch; adds to L and O, M being every split's max. (attention.cu's att_merge_group does the
 * same sums for several outputs a thread, their loads in one batch.) */
template <int MC>
__device__ __forceinline__ void merge_splits(const float *ml, const float *ph, int c0, int hd, int d, int n, float M,
                                             float &L, float &O) {
    for (int j0 = 0; j0 < n; j0 += MC) {
        float oq[MC];
#pragma unroll
        for (int j = 0; j < MC; j++) oq[j] = j0 + j < n ? __ldcg(ph + (size_t)(c0 + j0 + j) * (hd + 2) + 2 + d) : 0.0f;
#pragma unroll
        for (int j = 0; j < MC; j++) {
            if (j0 + j >= n) break;
            merge_term(ml[2 * (j0 + j)], ml[2 * (j0 + j) + 1], oq[j], M, L, O);
        }
    }
}

/* Flash-decode block (head h, split s, token z), computed by the ATT_THREADS threads of group g
 * (their own barrier; the kernel below: the whole block). sm: rl_attention_smem(a) bytes of
 * shared memory, red: 32 floats, ticket: one int, all the group's own. CG: rl_ld_cg
 * (kernels.h); ST: the outputs also staged for Wo (att_stage_out). The split partials are
 * written by other blocks of the same launch in either kernel: always from L2. (The splits of a
 * head as one cluster merging through distributed shared memory, RL_CUDA_ATT_MMA bit 128, lost
 * 6-13% at depth 4096 and were removed: docs/PERF.md v2.40.) */
template <int HJ, bool Q8, bool CG = false, bool ST = false>
__device__ __forceinline__ void flash_decode_block(const rl_att_args &a, int h, int s, int z, float *sm, float *red,
                                                   int *ticket_p, rl_grp g) {
    int &ticket = *ticket_p;
    const int hd = a.hd, nt = ATT_THREADS, nw = nt >> 5, t = g.tid(), lane = t & 31, warp = t >> 5;
    float *sc = sm, *qs = sc + a.split_max, *ow = qs + hd;
    /* token z of an exact chunk (grid z; 0 when decoding) sits at io->pos + z: its q, output,
     * partials and tickets are its own, and everything below is the one-token computation */
    const int n_pos = a.io->pos + z + 1;
    const float *qz = a.q + (size_t)z * a.tok_stride;
    float *oz = a.out + (size_t)z * a.n_head * hd;
    float *pz = a.part + (size_t)z * a.n_head * a.n_split * (hd + 2);
    int *cz = a.count + (size_t)z * a.n_head;
    const int S = rl_att_split_len(a.split, a.max_split, n_pos);
    const int p0 = s * S;
    if (p0 >= n_pos) return; /* inactive split: the merge never reads it */
    const int np = min(p0 + S, n_pos) - p0, ns = (n_pos + S - 1) / S;
    const int kv_dim = a.n_head_kv * hd, kvh = h / (a.n_head / a.n_head_kv);
    for (int d = t; d < hd; d += nt) qs[d] = rl_ld_cg<CG>(qz + h * hd + d);
    g.sync();
    const float scale = 1.0f / sqrtf((float)hd);
    float m = -INFINITY;
    for (int p = t; p < np; p += nt) {
        const size_t cell = (size_t)(p0 + p) * kv_dim + kvh * hd; /* the key row's first cell */
        float acc0 = 0.0f, acc1 = 0.0f;
        if constexpr (Q8) {
            const uint4 *kr = (const uint4 *)((const int8_t *)a.kc + cell);
            const float *kd = a.kd + cell / 32;
            for (int gb = 0; gb < hd / 32; gb += 4) { /* 4 blocks: 8 16-byte loads and 4 scales */
                uint4 kk[8];
                float dk[4];
#pragma unroll
                for (int j = 0; j < 8; j++) kk[j] = 2 * gb + j < hd / 16 ? rl_ld_cg<CG>(kr + 2 * gb + j) : make_uint4(0, 0, 0, 0);
#pragma unroll
                for (int b = 0; b < 4; b++) dk[b] = gb + b < hd / 32 ? rl_ld_cg<CG>(kd + gb + b) : 0.0f;
#pragma unroll
                for (int b = 0; b < 4; b++) {
                    if (gb + b >= hd / 32) break;
                    const float *qq = qs + 32 * (gb + b);
                    float t0 = 0.0f, t1 = 0.0f;
#pragma unroll
                    for (int w = 0; w < 8; w++) {
                        const uint32_t u = word(kk[2 * b + w / 4], w % 4);
                        t0 = fmaf(qq[4 * w], (float)(int8_t)(u & 0xff), t0);
                        t1 = fmaf(qq[4 * w + 1], (float)(int8_t)((u >> 8) & 0xff), t1);
                        t0 = fmaf(qq[4 * w + 2], (float)(int8_t)((u >> 16) & 0xff), t0);
                        t1 = fmaf(qq[4 * w + 3], (float)(int8_t)(u >> 24), t1);
                    }
                    acc0 = fmaf(dk[b], t0 + t1, acc0);
                }
            }
        } else {
            const uint4 *kr = (const uint4 *)((const __half *)a.kc + cell);
            for (int gb = 0; gb < hd / 8; gb += 8) {
                uint4 kk[8];
#pragma unroll
                for (int j = 0; j < 8; j++) kk[j] = gb + j < hd / 8 ? rl_ld_cg<CG>(kr + gb + j) : make_uint4(0, 0, 0, 0);
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    if (gb + j >= hd / 8) break;
                    float2 f[4];
                    f16x8(kk[j], f);
                    dot8(qs + 8 * (gb + j), f, acc0, acc1);
                }
            }
        }
        const float v = (acc0 + acc1) * scale;
        sc[p] = v;
        m = fmaxf(m, v);
    }
    /* The value pass's first batch is loaded before the score reductions, so its trip to memory
     * overlaps their barriers (the K registers are dead by now). */
    constexpr int PB = HJ >= 8 ? 2 : Q8 || HJ >= 4 ? 16 / HJ : 32 / HJ; /* value rows per batch */
    uint32_t vv[PB][HJ]; /* two f16, or two int8 in the low half */
    float dv[Q8 ? PB : 1][HJ];
    auto load_v = [&](int pb) {
#pragma unroll
        for (int b = 0; b < PB; b++) {
            const int p = pb + b * nw;
            const size_t cell = (size_t)(p0 + p) * kv_dim + kvh * hd;
#pragma unroll
            for (int j = 0; j < HJ; j++) {
                const int d = 2 * lane + 64 * j;
                const bool in = p < np && d < hd;
                if constexpr (Q8) {
                    vv[b][j] = in ? rl_ld_cg<CG>((const unsigned short *)((const int8_t *)a.vc + cell + d)) : 0u;
                    dv[b][j] = in ? rl_ld_cg<CG>(a.vd + (cell + d) / 32) : 0.0f;
                } else {
                    vv[b][j] = in ? rl_ld_cg<CG>((const unsigned int *)((const __half *)a.vc + cell + d)) : 0u;
                }
            }
        }
    };
    load_v(warp);
    m = block_max_f(m, red, g);
    float l = 0.0f;
    for (int p = t; p < np; p += nt) {
        const float e = expf(sc[p] - m);
        sc[p] = e;
        l += e;
    }
    l = block_sum_f(l, red, g); /* its barriers also order the sc[] writes before the reads below */
    float2 acc[HJ];
#pragma unroll
    for (int j = 0; j < HJ; j++) acc[j] = make_float2(0.0f, 0.0f);
    for (int pb = warp; pb < np; pb += PB * nw) {
        if (pb != warp) load_v(pb);
#pragma unroll
        for (int b = 0; b < PB; b++) {
            const int p = pb + b * nw;
            if (p >= np) break;
            const float e = sc[p];
#pragma unroll
            for (int j = 0; j < HJ; j++) {
                if constexpr (Q8) {
                    const float ed = e * dv[b][j];
                    acc[j].x = fmaf(ed, (float)(int8_t)(vv[b][j] & 0xff), acc[j].x);
                    acc[j].y = fmaf(ed, (float)(int8_t)(vv[b][j] >> 8), acc[j].y);
                } else {
                    const float2 f = __half22float2(*(const __half2 *)&vv[b][j]);
                    acc[j].x = fmaf(e, f.x, acc[j].x);
                    acc[j].y = fmaf(e, f.y, acc[j].y);
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < HJ; j++) {
        const int d = 2 * lane + 64 * j;
        if (d < hd) {
            ow[warp * hd + d] = acc[j].x;
            ow[warp * hd + d + 1] = acc[j].y;
        }
    }
    g.sync();
    if (ns == 1) { /* a single split is its own merge: o / l, the same bits as the merge gives */
        for (int d = t; d < hd; d += nt) {
            float o = 0.0f;
            for (int w = 0; w < nw; w++) o += ow[w * hd + d];
            oz[h * hd + d] = o / l;
            if constexpr (ST) qs[d] = o / l; /* q is used up */
        }
        if constexpr (ST) {
            g.sync();
            att_stage_out(a, h, z, qs, t);
        }
        return;
    }
    float *out = pz + ((size_t)h * a.n_split + s) * (hd + 2);
    for (int d = t; d < hd; d += nt) {
        float o = 0.0f;
        for (int w = 0; w < nw; w++) o += ow[w * hd + d];
        out[2 + d] = o;
    }
    if (t == 0) {
        out[0] = m;
        out[1] = l;
    }
    /* The last block of this head to finish merges every active split, in split order, so the
     * result does not depend on which block came last (the counter is a ticket, not a sum). */
    __threadfence();
    g.sync();
    if (t == 0) ticket = atomicAdd(&cz[h], 1);
    g.sync();
    if (ticket != ns - 1) return;
    __threadfence();
    /* The merge: the splits' (m, l) pairs are staged in shared memory (ow is free now), SC
     * splits per trip (64 with 128 threads), and each thread's o values are loaded MC splits
     * per batch: 1 + ceil(ns / MC) trips to memory where ns <= SC, against two per 8 splits
     * before. The arithmetic and its order are unchanged. */
    constexpr int MC = 16;
    const int SC = min(nt, nw * hd) / 2;
    const float *ph = pz + (size_t)h * a.n_split * (hd + 2);
    float *ml = ow; /* [SC][2] */
    auto stage_ml = [&](int c0) {
        g.sync(); /* the previous chunk's readers are done */
        if (t < 2 * SC && c0 + t / 2 < ns) ml[t] = __ldcg(ph + (size_t)(c0 + t / 2) * (hd + 2) + (t & 1));
        g.sync();
    };
    float M = -INFINITY; /* max is exact in any order */
    for (int c0 = 0; c0 < ns; c0 += SC) {
        stage_ml(c0);
        for (int j = 0; j < SC && c0 + j < ns; j++) M = fmaxf(M, ml[2 * j]);
    }
    constexpr int DI = (64 * HJ + ATT_THREADS - 1) / ATT_THREADS; /* dimensions per thread */
    float L[DI], O[DI];
#pragma unroll
    for (int i = 0; i < DI; i++) L[i] = O[i] = 0.0f;
    for (int c0 = 0; c0 < ns; c0 += SC) {
        if (ns > SC) stage_ml(c0); /* else the one chunk is still staged */
        const int nc = min(SC, ns - c0);
#pragma unroll
        for (int i = 0; i < DI; i++) {
            const int d = t + i * nt;
            if (d >= hd) break;
            merge_splits<MC>(ml, ph, c0, hd, d, nc, M, L[i], O[i]);
        }
    }
#pragma unroll
    for (int i = 0; i < DI; i++)
        if (t + i * nt < hd) {
            oz[h * hd + t + i * nt] = O[i] / L[i];
            if constexpr (ST) qs[t + i * nt] = O[i] / L[i];
        }
    if (t == 0) cz[h] = 0;
    if constexpr (ST) {
        g.sync();
        att_stage_out(a, h, z, qs, t);
    }
}

#endif
