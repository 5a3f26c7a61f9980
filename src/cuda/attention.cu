/* Attention for one decode token: q/k norm + RoPE + KV-cache write (one launch; only for
 * qk-norm or neox models, otherwise it is folded into the QKV matvec's epilogue), then split-K
 * flash decode over the cache (one launch).
 *
 * Flash decode: block (head h, split s) covers positions [s*S, (s+1)*S) of [0, pos] and writes
 * the unnormalised partial (max m, sum l, o[hd]); the last block of a head to finish (an atomic
 * ticket, not an atomic sum) merges the active splits in split order. A single active split
 * writes o / l directly. The same input gives the same bits. */
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <math.h>

#include <atomic>
#include <type_traits>

#include "attention.cuh"
#include "mv.cuh" /* cp.async helpers */

/* Stores value v of cache cell i (position row + column): f16, or with a q8 cache (a.kd set)
 * int8 with one fp32 scale per 32 cells, rounded as the CPU's --kv-type q8 (rl_round_i8_32:
 * d = amax / 127, q = rint(v * (127 / amax)), half to even), so both caches hold the same
 * bytes for the same values. Called by all 32 lanes of a warp for 32 consecutive cells (q8
 * needs head_dim % 32 == 0: a warp is then one block). */
__device__ __forceinline__ void kv_put(uint16_t *c, float *cd, size_t i, float v) {
    if (!cd) {
        c[i] = __half_as_ushort(__float2half_rn(v));
        return;
    }
    float amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float id;
    const float d = i8_scale(amax, &id);
    ((int8_t *)c)[i] = (int8_t)i8_round(v, id);
    if (i % 32 == 0) cd[i / 32] = d;
}

/* Block (blockDim.x == hd rounded up to 32) per head and token (grid y: n_tok, 1 when decoding):
 * blocks [0, n_head) rotate q in place, [n_head, n_head + n_kv) rotate k and store it, then
 * [.., + n_kv) store v. Token s sits at position pos + s (pos: io->pos, or pos0 without io) and
 * its q, k, v at s * tok_stride from the given pointers; biases (bq, bk, bv: the prefill's, whose
 * GEMMs have no epilogue) are added first. */
__global__ void rope_kv_kernel(const rl_att_args a) {
    __shared__ float h[512];
    __shared__ double red[32];
    rl_pdl_trigger();
    rl_pdl_wait();
    int b = blockIdx.x, t = threadIdx.x, hd = a.hd, pos = (a.io ? a.io->pos : a.pos0) + (int)blockIdx.y;
    size_t to = (size_t)blockIdx.y * a.tok_stride;
    int kind = b < a.n_head ? 0 : b < a.n_head + a.n_head_kv ? 1 : 2;
    int head = kind == 0 ? b : kind == 1 ? b - a.n_head : b - a.n_head - a.n_head_kv;
    const float *src = (kind == 0 ? a.q : kind == 1 ? a.k : a.v) + to + head * hd;
    const float *bias = kind == 0 ? a.bq : kind == 1 ? a.bk : a.bv;
    float val = t < hd ? src[t] : 0.0f;
    if (bias && t < hd) val = val + bias[head * hd + t];
    if (kind == 2) {
        if (t < hd) kv_put(a.vc, a.vd, (size_t)pos * a.n_head_kv * hd + head * hd + t, val);
        return;
    }
    const float *nw = kind == 0 ? a.q_norm : a.k_norm;
    if (nw) { /* per-head RMSNorm (qwen3), sum of squares in double as on the CPU */
        double ss = block_sum_d((double)val * (double)val, red);
        float r = 1.0f / sqrtf((float)(ss / (double)hd) + a.eps);
        if (t < hd) val = __fmul_rn(nw[t], __fmul_rn(val, r));
    }
    if (t < hd) h[t] = val;
    __syncthreads();
    int half = a.rope_dim / 2, ia = 0, ib = 0;
    float ra = 0.0f, rb = 0.0f;
    if (t < half) {
        ia = a.neox ? t : 2 * t;
        ib = a.neox ? t + half : 2 * t + 1;
        ra = h[ia];
        rb = h[ib];
        rope_rot(ra, rb, pos, a.inv_freq[t]);
    }
    __syncthreads();
    if (t < half) {
        h[ia] = ra;
        h[ib] = rb;
    }
    __syncthreads();
    if (t < hd) {
        if (kind == 0) a.q[to + head * hd + t] = h[t];
        else kv_put(a.kc, a.kd, (size_t)pos * a.n_head_kv * hd + head * hd + t, h[t]);
    }
}

void rl_rope_kv_launch(const rl_att_args *a, bool pdl, cudaStream_t st) {
    int threads = (a->hd + 31) / 32 * 32;
    rl_launch(rope_kv_kernel, dim3(a->n_head + 2 * a->n_head_kv, a->n_tok > 1 ? a->n_tok : 1),
              dim3(threads), 0, st, pdl, *a);
}

/* The fast prefill's RoPE and f16 cache write where no q/k norm needs a head's reduction:
 * rope_kv's arithmetic, one thread per rotated pair (q, k) or value (v) instead of a block per
 * head and token (96 x 512 blocks for a 7B chunk of 512, latency-bound: 8.7% of the chunk's
 * time under ncu). Pair t < rope_dim / 2 of a head is rope_kv's (t, t + half) or (2t, 2t + 1);
 * the pairs past it cover the unrotated dimensions rope_dim.. in order. */
__global__ void rope_kv_flat_kernel(const rl_att_args a, const float2 *__restrict__ tab) {
    const int hd = a.hd, half = a.rope_dim / 2, nqk = (a.n_head + a.n_head_kv) * (hd / 2);
    const int per_tok = nqk + a.n_head_kv * hd;
    for (int s = blockIdx.y; s < a.n_tok; s += gridDim.y) { /* grid y strides over the tokens */
        const int pos = a.pos0 + s;
        const size_t to = (size_t)s * a.tok_stride, crow = (size_t)pos * a.n_head_kv * hd;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < per_tok; j += gridDim.x * blockDim.x) {
            if (j >= nqk) {
                const int v = j - nqk; /* head * hd + d */
                float val = a.v[to + v];
                if (a.bv) val = val + a.bv[v];
                a.vc[crow + v] = __half_as_ushort(__float2half_rn(val));
                continue;
            }
            const int head = j / (hd / 2), t = j % (hd / 2), isq = head < a.n_head, hh = isq ? head : head - a.n_head;
            const bool rot = t < half;
            const int ia = rot ? (a.neox ? t : 2 * t) : a.rope_dim + 2 * (t - half);
            const int ib = rot ? (a.neox ? t + half : 2 * t + 1) : ia + 1;
            const float *src = (isq ? a.q : a.k) + to + hh * hd, *bias = isq ? a.bq : a.bk;
            float x0 = src[ia], x1 = src[ib];
            if (bias) {
                x0 = x0 + bias[hh * hd + ia];
                x1 = x1 + bias[hh * hd + ib];
            }
            if (rot && tab) {
                const float2 c = tab[(size_t)s * half + t];
                rope_rot_cs(x0, x1, c.x, c.y);
            } else if (rot) {
                rope_rot(x0, x1, pos, a.inv_freq[t]);
            }
            if (isq) {
                a.q[to + hh * hd + ia] = x0;
                a.q[to + hh * hd + ib] = x1;
            } else {
                a.kc[crow + hh * hd + ia] = __half_as_ushort(__float2half_rn(x0));
                a.kc[crow + hh * hd + ib] = __half_as_ushort(__float2half_rn(x1));
            }
        }
    }
}

/* The chunk's rotation table: (cos, sin) of every (token s, pair t), tab[s * half + t], the
 * values rope_rot computes, for every layer and head of the chunk to share instead of 2 M
 * sincos per 7B layer at 512 tokens. The kernel stays bound by its fp32 q/k/v traffic: the
 * table took 7% off it (docs/PERF.md v2.14). */
__global__ void rope_table_kernel(const float *__restrict__ inv_freq, int half, int pos0, int n, float2 *tab) {
    const size_t N = (size_t)n * half;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x)
        tab[i] = rope_cs(pos0 + (int)(i / half), inv_freq[i % half]);
}

void rl_rope_table_launch(const rl_att_args *a, float2 *tab, cudaStream_t st) {
    const int half = a->rope_dim / 2;
    const size_t N = (size_t)a->n_tok * half, nb = (N + 255) / 256;
    if (half) rope_table_kernel<<<nb < 1024 ? (int)nb : 1024, 256, 0, st>>>(a->inv_freq, half, a->pos0, a->n_tok, tab);
}

bool rl_rope_kv_prefill_flat(const rl_att_args *a) { return !a->q_norm && !a->k_norm && !a->kd; }

void rl_rope_kv_prefill_launch(const rl_att_args *a, const float2 *tab, cudaStream_t st) {
    if (!rl_rope_kv_prefill_flat(a)) {
        rl_rope_kv_launch(a, false, st);
        return;
    }
    const int per_tok = (a->n_head + a->n_head_kv) * (a->hd / 2) + a->n_head_kv * a->hd;
    const int bx = (per_tok + 255) / 256 < 64 ? (per_tok + 255) / 256 : 64;
    rope_kv_flat_kernel<<<dim3(bx, a->n_tok < 65535 ? a->n_tok : 65535), 256, 0, st>>>(*a, tab);
}

/* ST: an exact chunk whose flash decode also stages Wo's input (a.frag set); a template flag, so
 * that decoding's kernel has none of its code (as a runtime test it cost TinyLlama's one-token
 * rate ~1.3%, docs/PERF.md v2.29). */
template <int HJ, bool Q8, bool ST>
__global__ void __launch_bounds__(ATT_THREADS, 8) flash_decode_kernel(const rl_att_args a) {
    extern __shared__ float sm[];
    __shared__ float red[32];
    __shared__ int ticket;
    rl_pdl_trigger();
    rl_pdl_wait();
    flash_decode_block<HJ, Q8, false, ST>(a, blockIdx.x, blockIdx.y, blockIdx.z, sm, red, &ticket,
                                          rl_grp{0, ATT_THREADS});
}

typedef void (*att_fn)(const rl_att_args);

template <bool Q8, bool ST> static att_fn att_pick(int hj) {
    return hj <= 1 ? flash_decode_kernel<1, Q8, ST> : hj <= 2 ? flash_decode_kernel<2, Q8, ST>
                   : hj <= 4 ? flash_decode_kernel<4, Q8, ST> : flash_decode_kernel<8, Q8, ST>;
}

/* the grid's splits (y): at most max_split are ever active (the split widens past that), and a
 * chunk's graph, or decoding's, caps them by its band */
static int att_ny(const rl_att_args *a) {
    int ny = a->n_split < a->max_split ? a->n_split : a->max_split;
    if (a->split_cap > 0 && a->split_cap < ny) ny = a->split_cap;
    return ny;
}

#define ATT_CLMAX 16 /* a cluster's most blocks (non-portable above 8: Hopper allows 16) */

/* A cluster's most blocks this device can hold at once, for the tensor-core kernel's cluster
 * variant as prepared so far (rl_attention_prepare lowers it): a GPU whose GPCs hold fewer SMs,
 * or a partition of one, may have no room for 16, and such a launch fails rather than waits.
 * Only ever lowered, so contexts of different shapes share the smallest answer; atomic because
 * one context may capture a graph while another opens (rl_cuda_open serialises the opens). A
 * cluster and the ticket merge give the same bits, so a graph captured before a lowering stays
 * right. */
static std::atomic<int> att_room{ATT_CLMAX};

/* whether the grid's splits make a cluster: 2 .. att_room */
static bool att_cl_fits(const rl_att_args *a) {
    const int ny = att_ny(a);
    return ny >= 2 && ny <= att_room.load(std::memory_order_relaxed);
}

static att_fn att_kernel(const rl_att_args *a) {
    const int hj = (a->hd + 63) / 64;
    if (a->frag) return a->kd ? att_pick<true, true>(hj) : att_pick<false, true>(hj);
    return a->kd ? att_pick<true, false>(hj) : att_pick<false, false>(hj);
}

size_t rl_attention_smem(const rl_att_args *a) {
    return (size_t)(a->split_max + a->hd + (ATT_THREADS / 32) * a->hd) * sizeof(float);
}

/* Whether this block is the last of a launch's ns split blocks to have written its partials
 * (the whole block calls it, after those writes): a ticket, not an atomic sum, so the merge
 * that block then runs does not depend on which block came last. count: the group's or head's
 * counter, zero between launches (the merging block resets it); ticket: block shared. */
__device__ __forceinline__ bool att_last_block(int *count, int *ticket, int ns) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) *ticket = atomicAdd(count, 1);
    __syncthreads();
    if (*ticket != ns - 1) return false;
    __threadfence();
    return true;
}

/* The merge of a KV group's G heads (hd each) by the group's last block of NT threads: every
 * split's (m, l) staged in ml [G][ns][2] (shared), then each output x = i hd + d (head h0 + i)
 * from its splits in split order, merge_splits's arithmetic, into out[x] (and st[x] with ST).
 * A thread's outputs x = t + k NT (k < DI; G hd <= DI NT) take their loads in one batch of
 * LB / DI splits each (at most 16; LB: the loads a thread may hold), so a block with fewer
 * threads than outputs makes no more trips. pz: the token's partials [n_head][n_split][hd + 2];
 * *cz, the group's ticket, is reset. */
template <int NT, int DI, int LB, bool ST>
__device__ __forceinline__ void att_merge_group(const float *pz, int h0, int n_split, int hd, int G, int ns, float *ml,
                                                float *out, float *st, int *cz) {
    constexpr int MC = LB / DI > 16 ? 16 : LB / DI;
    const int t = threadIdx.x;
    for (int x = t; x < G * ns * 2; x += NT) {
        const int i = x / (2 * ns), j = (x >> 1) % ns;
        ml[x] = __ldcg(pz + ((size_t)(h0 + i) * n_split + j) * (hd + 2) + (x & 1));
    }
    __syncthreads();
    float M[DI], L[DI], O[DI];
#pragma unroll
    for (int k = 0; k < DI; k++) {
        M[k] = -INFINITY; /* max is exact in any order */
        L[k] = O[k] = 0.0f;
        const int x = t + k * NT;
        if (x < G * hd)
            for (int j = 0; j < ns; j++) M[k] = fmaxf(M[k], ml[(x / hd) * 2 * ns + 2 * j]);
    }
    for (int j0 = 0; j0 < ns; j0 += MC) {
        float oq[DI][MC];
#pragma unroll
        for (int k = 0; k < DI; k++) {
            const int x = t + k * NT, i = x / hd, d = x % hd;
#pragma unroll
            for (int j = 0; j < MC; j++)
                oq[k][j] = x < G * hd && j0 + j < ns
                               ? __ldcg(pz + ((size_t)(h0 + i) * n_split + j0 + j) * (hd + 2) + 2 + d)
                               : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < DI; k++) {
            const int x = t + k * NT;
            if (x >= G * hd) break;
            const float *mi = ml + (x / hd) * 2 * ns;
#pragma unroll
            for (int j = 0; j < MC; j++) {
                if (j0 + j >= ns) break;
                merge_term(mi[2 * (j0 + j)], mi[2 * (j0 + j) + 1], oq[k][j], M[k], L[k], O[k]);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < DI; k++) {
        const int x = t + k * NT;
        if (x >= G * hd) break;
        out[x] = O[k] / L[k];
        if constexpr (ST) st[x] = O[k] / L[k];
    }
    if (t == 0) *cz = 0;
}

/* ---- an exact chunk's flash decode for grouped heads ------------------------------------------
 * In a chunk the G = n_head / n_head_kv query heads of a KV group, times the chunk's tokens, read
 * the same key and value rows; flash_decode_kernel's block per (head, split, token) has each of
 * them fetch the rows again from L2 and runs its chain of dependent trips once per head
 * (docs/PERF.md v2.34: a TinyLlama chunk's attention, 26% of the chunk). Here block (KV group
 * kvh, split, token) of GQ_THREADS threads reads each key and value row once for the group's
 * G heads and computes their split with flash_decode_block's arithmetic in its order, so that
 * every head's output, partials and merge are that kernel's bits (test_cuda checks them byte
 * for byte). Each half of the block takes half the heads:
 * - scores: thread r + 128 * half plays the one-token block's thread r (keys r, r + 128, ..)
 *   for its half's heads; each dot keeps the two interleaved accumulators;
 * - the sum of exponentials: warp i (head i) replays the one-token block's reduction, the four
 *   warps' butterflies over the same lanes and their results in warp order;
 * - values: thread (half, w, lane) plays the one-token block's warp w, lane (rows w, w + 4, ..;
 *   dimension pairs 2 lane + 64 j) for its half's heads; the four warps' sums in warp order;
 * - the merge: the group's last block to finish (one ticket, count[h0] of its first head)
 *   merges every head's splits as flash_decode_block does.
 * G times fewer blocks, each G / 2 times the arithmetic: it pays where the splits are many
 * (TinyLlama's chunks at 1-2k positions), not where they are few, so the host picks it by the
 * chunk's splits (the knob RL_CUDA_ATT_GQA, rl_att_args.gqa; docs/PERF.md v2.35).
 * f16 cache, 2 <= G <= 8, hd % 32 == 0, hd <= 128 (rl_att_gqa); otherwise flash_decode_kernel. */
#define GQ_THREADS 256
#define GQ_GMAX 8

/* floats of dynamic shared memory: q and then the outputs [G][hd], scores [G][split_max], the
 * warps' value sums [G][4][hd], the merge's (m, l) pairs [G][n_split][2] */
static size_t gqa_smem(const rl_att_args *a) {
    const size_t G = (size_t)(a->n_head / a->n_head_kv), hd = (size_t)a->hd;
    return (G * hd + G * (size_t)a->split_max + G * 4 * hd + G * 2 * (size_t)a->n_split) * sizeof(float);
}

/* the shapes and cache the block per KV group serves (whether a launch asks for it aside) */
static bool gqa_fits(const rl_att_args *a) {
    const int G = a->n_head / a->n_head_kv;
    return !a->kd && G >= 2 && G <= GQ_GMAX && a->hd % 32 == 0 && a->hd <= 128 && gqa_smem(a) <= 96 * 1024;
}

bool rl_att_gqa(const rl_att_args *a) { return a->gqa && a->n_tok > 1 && gqa_fits(a); }

template <int HJ, bool ST>
__global__ void __launch_bounds__(GQ_THREADS, 3) flash_chunk_gqa_kernel(const rl_att_args a) {
    extern __shared__ float sm[];
    __shared__ float mred[GQ_GMAX][4], stat[GQ_GMAX][2]; /* per head: the warps' maxima; (m, l) */
    __shared__ int ticket;
    rl_pdl_trigger();
    rl_pdl_wait();
    constexpr int GH = GQ_GMAX / 2, PB = 32 / HJ; /* heads per half; value rows per batch */
    const int kvh = blockIdx.x, s = blockIdx.y, z = blockIdx.z, hd = a.hd, G = a.n_head / a.n_head_kv;
    const int h0 = kvh * G, t = threadIdx.x, lane = t & 31, warp = t >> 5, w4 = warp & 3, r = t & 127;
    const int i0 = (t >> 7) * ((G + 1) / 2), ni = min(G, i0 + (G + 1) / 2) - i0; /* this half's heads */
    const int n_pos = a.io->pos + z + 1, S = rl_att_split_len(a.split, a.max_split, n_pos), p0 = s * S;
    if (p0 >= n_pos) return;
    const int ns = (n_pos + S - 1) / S;
    const int np = min(p0 + S, n_pos) - p0, kv_dim = a.n_head_kv * hd;
    const int SM = a.split_max;
    float *qs = sm, *sc = qs + G * hd, *ow = sc + G * SM, *ml = ow + G * 4 * hd;
    const float *qz = a.q + (size_t)z * a.tok_stride + (size_t)h0 * hd;
    float *oz = a.out + (size_t)z * a.n_head * hd + (size_t)h0 * hd;
    float *pz = a.part + (size_t)z * a.n_head * a.n_split * (hd + 2);
    int *cz = a.count + (size_t)z * a.n_head + h0;
    for (int d = t; d < G * hd; d += GQ_THREADS) qs[d] = qz[d];
    __syncthreads();
    const float scale = 1.0f / sqrtf((float)hd);
    float m[GH];
#pragma unroll
    for (int i = 0; i < GH; i++) m[i] = -INFINITY;
    for (int p = r; p < np; p += 128) {
        const uint4 *kr = (const uint4 *)((const __half *)a.kc + (size_t)(p0 + p) * kv_dim + kvh * hd);
        float acc0[GH], acc1[GH];
#pragma unroll
        for (int i = 0; i < GH; i++) acc0[i] = acc1[i] = 0.0f;
        for (int gb = 0; gb < hd / 8; gb += 8) {
            uint4 kk[8];
#pragma unroll
            for (int j = 0; j < 8; j++) kk[j] = gb + j < hd / 8 ? kr[gb + j] : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                if (gb + j >= hd / 8) break;
                float2 f[4];
                f16x8(kk[j], f);
#pragma unroll
                for (int i = 0; i < GH; i++) {
                    if (i >= ni) break;
                    dot8(qs + (i0 + i) * hd + 8 * (gb + j), f, acc0[i], acc1[i]);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < GH; i++) {
            if (i >= ni) break;
            const float v = (acc0[i] + acc1[i]) * scale;
            sc[(i0 + i) * SM + p] = v;
            m[i] = fmaxf(m[i], v);
        }
    }
    /* the value rows' first batch goes out before the reductions (flash_decode_block's order) */
    uint32_t vv[PB][HJ];
    auto load_v = [&](int pb) {
#pragma unroll
        for (int b = 0; b < PB; b++) {
            const int p = pb + b * 4;
            const size_t cell = (size_t)(p0 + p) * kv_dim + kvh * hd;
#pragma unroll
            for (int j = 0; j < HJ; j++) {
                const int d = 2 * lane + 64 * j;
                vv[b][j] = p < np && d < hd ? *(const unsigned int *)((const __half *)a.vc + cell + d) : 0u;
            }
        }
    };
    load_v(w4);
#pragma unroll
    for (int i = 0; i < GH; i++) { /* maximum: exact in any order */
        float v = m[i];
        for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane == 0 && i < ni) mred[i0 + i][w4] = v;
    }
    __syncthreads();
    if (warp < G) { /* head `warp`: the one-token block's sum, its warps replayed in turn */
        float *sh = sc + warp * SM;
        const float M = fmaxf(fmaxf(fmaxf(mred[warp][0], mred[warp][1]), mred[warp][2]), mred[warp][3]);
        float tot = 0.0f;
        for (int w = 0; w < 4; w++) {
            float l = 0.0f;
            for (int p = 32 * w + lane; p < np; p += 128) {
                const float e = expf(sh[p] - M);
                sh[p] = e;
                l += e;
            }
            for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
            tot += l;
        }
        if (lane == 0) {
            stat[warp][0] = M;
            stat[warp][1] = tot;
        }
    }
    __syncthreads();
    float2 acc[GH][HJ];
#pragma unroll
    for (int i = 0; i < GH; i++)
#pragma unroll
        for (int j = 0; j < HJ; j++) acc[i][j] = make_float2(0.0f, 0.0f);
    for (int pb = w4; pb < np; pb += PB * 4) {
        if (pb != w4) load_v(pb);
#pragma unroll
        for (int b = 0; b < PB; b++) {
            const int p = pb + b * 4;
            if (p >= np) break;
#pragma unroll
            for (int i = 0; i < GH; i++) {
                if (i >= ni) break;
                const float e = sc[(i0 + i) * SM + p];
#pragma unroll
                for (int j = 0; j < HJ; j++) {
                    const float2 f = __half22float2(*(const __half2 *)&vv[b][j]);
                    acc[i][j].x = fmaf(e, f.x, acc[i][j].x);
                    acc[i][j].y = fmaf(e, f.y, acc[i][j].y);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < GH; i++) {
        if (i >= ni) break;
#pragma unroll
        for (int j = 0; j < HJ; j++) {
            const int d = 2 * lane + 64 * j;
            if (d < hd) {
                ow[((i0 + i) * 4 + w4) * hd + d] = acc[i][j].x;
                ow[((i0 + i) * 4 + w4) * hd + d + 1] = acc[i][j].y;
            }
        }
    }
    __syncthreads();
    if (ns == 1) {
        for (int x = t; x < G * hd; x += GQ_THREADS) {
            const int i = x / hd, d = x % hd;
            float o = 0.0f;
            for (int w = 0; w < 4; w++) o += ow[(i * 4 + w) * hd + d];
            oz[x] = o / stat[i][1];
            if constexpr (ST) qs[x] = o / stat[i][1];
        }
        if constexpr (ST) {
            __syncthreads();
            if (warp < G) att_stage_out(a, h0 + warp, z, qs + warp * hd, lane);
        }
        return;
    }
    for (int x = t; x < G * hd; x += GQ_THREADS) {
        const int i = x / hd, d = x % hd;
        float o = 0.0f;
        for (int w = 0; w < 4; w++) o += ow[(i * 4 + w) * hd + d];
        pz[((size_t)(h0 + i) * a.n_split + s) * (hd + 2) + 2 + d] = o;
    }
    if (t < G) {
        float *out = pz + ((size_t)(h0 + t) * a.n_split + s) * (hd + 2);
        out[0] = stat[t][0];
        out[1] = stat[t][1];
    }
    if (!att_last_block(cz, &ticket, ns)) return;
    /* the merge, flash_decode_block's arithmetic per head (a thread's outputs in one batch) */
    constexpr int DI = (GQ_GMAX * 64 * HJ + GQ_THREADS - 1) / GQ_THREADS; /* 80 registers: 16 loads held */
    att_merge_group<GQ_THREADS, DI, 16, ST>(pz, h0, a.n_split, hd, G, ns, ml, oz, qs, cz);
    if constexpr (ST) {
        __syncthreads();
        if (warp < G) att_stage_out(a, h0 + warp, z, qs + warp * hd, lane);
    }
}

static att_fn gqa_kernel(const rl_att_args *a) {
    if (a->frag) return a->hd <= 64 ? flash_chunk_gqa_kernel<1, true> : flash_chunk_gqa_kernel<2, true>;
    return a->hd <= 64 ? flash_chunk_gqa_kernel<1, false> : flash_chunk_gqa_kernel<2, false>;
}

/* ---- a KV group's flash decode on tensor cores (RL_CUDA_ATT_MMA; decoding and exact chunks) ----
 * flash_decode_kernel spends ~40 warp-instructions per head and key at depth (docs/PERF.md v2.37
 * §5): each of a group's G heads converts and multiplies every key and value element itself.
 * Here block (KV group kvh, split s, token z) puts the group's heads on the rows of m16n8k16
 * f16 products with fp32 accumulation, so each key and value row is loaded once for the group
 * and converted by the product:
 * - rows g < 8 hold head g's operand rounded to f16 (hi), rows g + 8 its remainder (lo), so
 *   that hi + lo is within ~2^-22 of the operand relative to its row's largest value, and one
 *   product gives both: a score is (row g + row g + 8) of the accumulator. q is scaled by a
 *   power of two into f16's range first, p by 2^15 (both exact), the factors taken out after;
 * - scores: lane (g, tq) loads 16 bytes of key row g of an 8-key tile, dims 32 j + 8 tq ..
 *   + 7, used as the B fragment of k-steps 2 j (dims + 0..3) and 2 j + 1 (+ 4..7); q's A
 *   fragment holds the same dims in the same places (the dot's terms in another order, the
 *   same sum), so no key is rearranged in memory or shared memory;
 * - values: the same loads of value rows, transposed in registers (movmatrix) into B
 *   fragments; the probabilities' A fragment is the scores' accumulator as it stands (rows g
 *   and g + 8 again: p's hi and lo);
 * - softmax online per warp over its 16-key tiles (warp w: tiles w, w + NW, ..), the warps'
 *   (m, l, o) combined in warp order, then partials, one ticket for the group (as the chunks'
 *   grouped kernel) and the merge in split order.
 * Not flash_decode_kernel's bits (another order of the dot's terms, q and p in two halves):
 * the knob selects this kernel for decoding and chunks alike, so a chunk's logits stay its
 * one-token logits (a token's block is the same computation at any z). The knob's bits: 1 on
 * (the default) for grouped heads, 2 each warp's next tile loaded before the products of its
 * current one (PF), 4 twice the warps a block (NW: 8 at hd 64 and 4 at hd 128, or 16 and 8),
 * which changes which warp sums which keys: every value is its own arithmetic, chunks = one
 * token under each; 8 (host) the launch with PDL where the graph has it; 16 plain heads too
 * (G = 1 fills one row of 8: the conversions still go to the product; slower at depth); 32
 * (experimental, session 41, with 2 and 4 off) a (group, token)'s split blocks launched as one
 * thread-block cluster (CL) where the grid has 2 to 16 splits: each block keeps its partials
 * in its shared memory, and after a cluster barrier block s merges heads s, s + ns, .. by
 * reading every split's partials through distributed shared memory, instead of writing them
 * to L2, taking a ticket and the last block reading them back. The same sums in the same
 * order as att_merge_group: the same bytes as without bit 32. G <= 8, hd 64 or 128; an f16
 * cache, or a q8 one (--kv-type q8, Q8) in the default variants (bits 2 and 4 off): each
 * lane loads its 8 codes and their block's scale where the f16 cache has its 16 bytes, and
 * turns them into the f16 values code x scale (rounded, as the f16 cache rounds every value;
 * an int8 step is 8 or more of f16's) just before the tile's products, so the products are
 * the f16 cache's and a tile's loads still overlap the previous tile's work. */
#define AM_GMAX 8

/* the cluster barrier (sm_90 and later; the host launches clusters only where the device has
 * them, so the older targets' copy never runs it) */
__device__ __forceinline__ void att_cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::this_cluster().sync();
#else
    __trap();
#endif
}

/* p (this block's shared memory) in the block of cluster rank r */
__device__ __forceinline__ const float *att_peer(const float *p, int r) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return cooperative_groups::this_cluster().map_shared_rank(p, (unsigned)r);
#else
    __trap();
    return p;
#endif
}

/* One output of a cluster's merge: every rank j < ns holds its split's (m, l) at ml and its
 * unnormalised value at o (the same offsets in each block's shared memory); merge_term in split
 * order, as every merge adds them, so the same bits. */
__device__ __forceinline__ float att_peer_merge(const float *ml, const float *o, int ns) {
    float M = -INFINITY, L = 0.0f, O = 0.0f;
    for (int j = 0; j < ns; j++) M = fmaxf(M, att_peer(ml, j)[0]);
    for (int j = 0; j < ns; j++) {
        const float *mj = att_peer(ml, j);
        merge_term(mj[0], mj[1], att_peer(o, j)[0], M, L, O);
    }
    return O / L;
}

static int am_nw(int hd, int mma) { return (hd <= 64 ? 8 : 4) * (mma & 4 ? 2 : 1); }

/* floats of dynamic shared memory for nw warps: the warps' o [nw][G][hd] (later the merge's
 * (m, l) pairs [G][n_split][2]), their m, l and weights [nw][G] each, the block's (M, L) [G][2],
 * the outputs [G][hd] */
static size_t am_smem_nw(const rl_att_args *a, size_t nw) {
    const size_t G = (size_t)(a->n_head / a->n_head_kv), hd = (size_t)a->hd;
    const size_t wo = nw * G * hd > 2 * G * (size_t)a->n_split ? nw * G * hd : 2 * G * (size_t)a->n_split;
    return (wo + 3 * nw * G + 2 * G + G * hd) * sizeof(float);
}

static size_t am_smem(const rl_att_args *a) { return am_smem_nw(a, (size_t)am_nw(a->hd, a->mma)); }

/* the shapes the kernel serves, with room for its widest block (whatever the knob's value) */
static bool am_fits(const rl_att_args *a) {
    const int G = a->n_head / a->n_head_kv;
    return (!a->kd || !(a->mma & 6)) && G >= 1 && G <= AM_GMAX && a->n_head % a->n_head_kv == 0 &&
           (a->hd == 64 || a->hd == 128) && am_smem_nw(a, (size_t)am_nw(a->hd, 4)) <= 96 * 1024;
}

/* grouped heads only, unless bit 16: a plain model's head fills one of the 8 rows and lost at
 * depth (docs/PERF.md v2.38) */
static bool am_use(const rl_att_args *a) {
    return (a->mma & 1) && am_fits(a) && (a->n_head > a->n_head_kv || (a->mma & 16));
}

bool rl_att_mma(const rl_att_args *a) { return am_use(a); }

__device__ __forceinline__ void am_mma(float d[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t am_trans(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

/* two floats as f16 pairs: the rounded values (hi) and what rounding left (lo) */
__device__ __forceinline__ void am_split(float x, float y, uint32_t &hi, uint32_t &lo) {
    const __half2 h = __floats2half2_rn(x, y);
    const float2 f = __half22float2(h);
    const __half2 l = __floats2half2_rn(x - f.x, y - f.y);
    hi = *(const uint32_t *)&h;
    lo = *(const uint32_t *)&l;
}

/* What one warp loads of a 16-key tile: lane (g, tq) 16 bytes of the key and of the value
 * rows of keys k0 + g and k0 + 8 + g, at dims 32 j + 8 tq. */
template <int HD> struct am_tile {
    static constexpr int NJ = HD / 32, ND = HD / 8;
    uint4 k[2][NJ], v[2][NJ];
    /* the rows' 8 values at the cache's element cell; past the split zeros, never the
     * cache's stale rows (0 * NaN) */
    __device__ __forceinline__ void put(int hf, int j, bool in, const rl_att_args &a, size_t cell) {
        k[hf][j] = in ? *(const uint4 *)((const __half *)a.kc + cell) : make_uint4(0, 0, 0, 0);
        v[hf][j] = in ? *(const uint4 *)((const __half *)a.vc + cell) : make_uint4(0, 0, 0, 0);
    }
};

/* A q8 cache's tile (--kv-type q8): lane (g, tq) holds 8 codes of the key and of the value
 * rows where am_tile holds 16 bytes of f16, and each row's scale of block j (dims 32 j ..
 * 32 j + 31). */
template <int HD> struct am_q8tile {
    static constexpr int NJ = HD / 32;
    uint2 k[2][NJ], v[2][NJ];
    float dk[2][NJ], dv[2][NJ];
    /* past the split: zeros, scale 0 */
    __device__ __forceinline__ void put(int hf, int j, bool in, const rl_att_args &a, size_t cell) {
        k[hf][j] = in ? *(const uint2 *)((const int8_t *)a.kc + cell) : make_uint2(0, 0);
        v[hf][j] = in ? *(const uint2 *)((const int8_t *)a.vc + cell) : make_uint2(0, 0);
        dk[hf][j] = in ? a.kd[cell / 32] : 0.0f;
        dv[hf][j] = in ? a.vd[cell / 32] : 0.0f;
    }
};

/* a tile of either cache: rows tile * 16 + 8 hf + g of the split, dims 32 j + 8 tq */
template <int HD, class T>
__device__ __forceinline__ void am_load(T &b, const rl_att_args &a, int tile, int p0, int np, size_t kv_dim, int kvh,
                                        int g, int tq) {
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int p = tile * 16 + 8 * hf + g;
        const size_t cell = (size_t)(p0 + p) * kv_dim + (size_t)kvh * HD + 8 * tq;
#pragma unroll
        for (int j = 0; j < T::NJ; j++) b.put(hf, j, p < np, a, cell + 32 * j);
    }
}

/* 8 codes (two words) times a scale as 8 f16 values, in the order of am_tile's 16 bytes */
__device__ __forceinline__ uint4 am_q8h(uint2 c, float d) {
    uint32_t h[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t w = i < 2 ? c.x : c.y, sh = 16 * (i & 1);
        const __half2 x = __floats2half2_rn((float)(int8_t)(w >> sh) * d, (float)(int8_t)(w >> (sh + 8)) * d);
        h[i] = *(const uint32_t *)&x;
    }
    return make_uint4(h[0], h[1], h[2], h[3]);
}

template <int HD>
__device__ __forceinline__ void am_step(const am_tile<HD> &b, const uint32_t (*qa)[4], float ssc, int tile, int np,
                                        int tq, float &m, float &l, float (*o)[4]);

/* the q8 tile's values in f16 (am_q8h), then the f16 tile's step */
template <int HD>
__device__ __forceinline__ void am_step(const am_q8tile<HD> &r, const uint32_t (*qa)[4], float ssc, int tile, int np,
                                        int tq, float &m, float &l, float (*o)[4]) {
    am_tile<HD> b;
#pragma unroll
    for (int hf = 0; hf < 2; hf++)
#pragma unroll
        for (int j = 0; j < am_q8tile<HD>::NJ; j++) {
            b.k[hf][j] = am_q8h(r.k[hf][j], r.dk[hf][j]);
            b.v[hf][j] = am_q8h(r.v[hf][j], r.dv[hf][j]);
        }
    am_step<HD>(b, qa, ssc, tile, np, tq, m, l, o);
}

/* A tile's scores, their online softmax into (m, l) and its probabilities times its values
 * into o ([dims 32 j + 8 tq + 2 c + (0, 1) of output tile 4 j + c][hi 0, 1; lo 2, 3]). */
template <int HD>
__device__ __forceinline__ void am_step(const am_tile<HD> &b, const uint32_t (*qa)[4], float ssc, int tile, int np,
                                        int tq, float &m, float &l, float (*o)[4]) {
    constexpr int NJ = am_tile<HD>::NJ;
    float sc[2][4]; /* rows g (hi) and g + 8 (lo) for keys 8 hf + 2 tq + (0, 1) */
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        sc[hf][0] = sc[hf][1] = sc[hf][2] = sc[hf][3] = 0.0f;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            am_mma(sc[hf], qa[2 * j][0], qa[2 * j][1], qa[2 * j][2], qa[2 * j][3], b.k[hf][j].x, b.k[hf][j].y);
            am_mma(sc[hf], qa[2 * j + 1][0], qa[2 * j + 1][1], qa[2 * j + 1][2], qa[2 * j + 1][3], b.k[hf][j].z,
                   b.k[hf][j].w);
        }
    }
    float x[4], tmax = -INFINITY;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int hf = i >> 1, u = i & 1, p = tile * 16 + 8 * hf + 2 * tq + u;
        x[i] = p < np ? (sc[hf][u] + sc[hf][2 + u]) * ssc : -INFINITY;
        tmax = fmaxf(tmax, x[i]);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
    const float mn = fmaxf(m, tmax), corr = expf(m - mn); /* m = -inf first: corr 0 */
    m = mn;
    float pr[4];
#pragma unroll
    for (int i = 0; i < 4; i++) pr[i] = expf(x[i] - mn);
    l = fmaf(l, corr, (pr[0] + pr[1]) + (pr[2] + pr[3]));
    /* keys 2 tq + (0, 1) and 8 + 2 tq + (0, 1); p scaled by 2^15 (exact, < 65504) so that its
     * remainder stays a normal f16 down to p = 2^-18 (o carries the factor until the warp's
     * sums are written) */
    uint32_t ph0, pl0, ph1, pl1;
    am_split(pr[0] * 0x1p15f, pr[1] * 0x1p15f, ph0, pl0);
    am_split(pr[2] * 0x1p15f, pr[3] * 0x1p15f, ph1, pl1);
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const uint32_t *v0 = &b.v[0][j].x, *v1 = &b.v[1][j].x;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            float *oc = o[4 * j + c];
#pragma unroll
            for (int r = 0; r < 4; r++) oc[r] *= corr;
            am_mma(oc, ph0, pl0, ph1, pl1, am_trans(v0[c]), am_trans(v1[c]));
        }
    }
}

/* two blocks an SM where the registers allow (256 threads at hd 64, 128 at hd 128), else one */
template <int HD, int NW, bool PF, bool ST, bool CL, bool Q8 = false>
__global__ void __launch_bounds__(32 * NW, NW * HD <= 512 ? 2 : 1) flash_mma_kernel(const rl_att_args a) {
    constexpr int NT = 32 * NW, NJ = am_tile<HD>::NJ, ND = am_tile<HD>::ND;
    extern __shared__ float sm[];
    __shared__ int ticket;
    rl_pdl_trigger();
    rl_pdl_wait();
    const int kvh = blockIdx.x, s = blockIdx.y, z = blockIdx.z, G = a.n_head / a.n_head_kv, h0 = kvh * G;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = lane >> 2, tq = lane & 3;
    const int n_pos = a.io->pos + z + 1, S = rl_att_split_len(a.split, a.max_split, n_pos), p0 = s * S;
    if (p0 >= n_pos) { /* inactive split: the merge never reads it (a cluster's two barriers still count it) */
        if constexpr (CL) {
            att_cluster_sync();
            att_cluster_sync();
        }
        return;
    }
    const int np = min(p0 + S, n_pos) - p0, ns = (n_pos + S - 1) / S, nt16 = (np + 15) / 16;
    const size_t kv_dim = (size_t)a.n_head_kv * HD;
    float *wo = sm, *wm = wo + (NW * G * HD > 2 * G * a.n_split ? NW * G * HD : 2 * G * a.n_split);
    float *wl = wm + NW * G, *wf = wl + NW * G, *ML = wf + NW * G, *os = ML + 2 * G;
    const float *qz = a.q + (size_t)z * a.tok_stride;
    float *oz = a.out + (size_t)z * a.n_head * HD;
    float *pz = a.part + (size_t)z * a.n_head * a.n_split * (HD + 2);
    int *cz = a.count + (size_t)z * a.n_head + h0;

    /* the first tile's rows are asked for before q, so the two trips overlap */
    typename std::conditional<Q8, am_q8tile<HD>, am_tile<HD>>::type bufA, bufB;
    if (warp < nt16) am_load<HD>(bufA, a, warp, p0, np, kv_dim, kvh, g, tq);
    /* q of head g (lanes g >= G: zero rows), dims 32 j + 8 tq .. + 7, scaled by 2^-e so that
     * |q'| < 2^14 over the head (the four lanes of a head agree on e) */
    float qv[NJ][8];
    float mx = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int i = 0; i < 8; i++) {
            qv[j][i] = g < G ? __ldcg(qz + (size_t)(h0 + g) * HD + 32 * j + 8 * tq + i) : 0.0f;
            mx = fmaxf(mx, fabsf(qv[j][i]));
        }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    int e = 0;
    if (mx > 0.0f) {
        (void)frexpf(mx, &e); /* mx < 2^e */
        e -= 14;
    }
    /* A fragments of k-steps 2 j + c: a0 / a2 hi of dims + 4c + (0, 1) / + 4c + (2, 3), a1 / a3 lo */
    uint32_t qa[2 * NJ][4];
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const float *v = qv[j] + 4 * c;
            am_split(ldexpf(v[0], -e), ldexpf(v[1], -e), qa[2 * j + c][0], qa[2 * j + c][1]);
            am_split(ldexpf(v[2], -e), ldexpf(v[3], -e), qa[2 * j + c][2], qa[2 * j + c][3]);
        }
    const float ssc = ldexpf(1.0f / sqrtf((float)HD), e);

    float m = -INFINITY, l = 0.0f;
    float o[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    if constexpr (PF) { /* two buffers in turn: the next tile's loads before this tile's products */
        for (int tile = warp; tile < nt16; tile += 2 * NW) {
            if (tile + NW < nt16) am_load<HD>(bufB, a, tile + NW, p0, np, kv_dim, kvh, g, tq);
            am_step<HD>(bufA, qa, ssc, tile, np, tq, m, l, o);
            if (tile + NW >= nt16) break;
            if (tile + 2 * NW < nt16) am_load<HD>(bufA, a, tile + 2 * NW, p0, np, kv_dim, kvh, g, tq);
            am_step<HD>(bufB, qa, ssc, tile + NW, np, tq, m, l, o);
        }
    } else {
        for (int tile = warp; tile < nt16; tile += NW) {
            if (tile != warp) am_load<HD>(bufA, a, tile, p0, np, kv_dim, kvh, g, tq);
            am_step<HD>(bufA, qa, ssc, tile, np, tq, m, l, o);
        }
    }
    /* the warp's (m, l, o) for its heads; a head's four lanes hold its keys' l in parts */
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (g < G) {
        if (tq == 0) {
            wm[warp * G + g] = m;
            wl[warp * G + g] = l;
        }
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                float *w = wo + ((size_t)warp * G + g) * HD + 32 * j + 8 * tq + 2 * c;
                w[0] = (o[4 * j + c][0] + o[4 * j + c][2]) * 0x1p-15f;
                w[1] = (o[4 * j + c][1] + o[4 * j + c][3]) * 0x1p-15f;
            }
    }
    __syncthreads();
    if (t < G) { /* the warps in order: warps without keys have m = -inf, l = 0 and weight 0 */
        float M = -INFINITY, L = 0.0f;
        for (int w = 0; w < NW; w++) M = fmaxf(M, wm[w * G + t]);
        for (int w = 0; w < NW; w++) {
            const float f = wm[w * G + t] == -INFINITY ? 0.0f : expf(wm[w * G + t] - M);
            wf[w * G + t] = f;
            L = fmaf(wl[w * G + t], f, L);
        }
        ML[2 * t] = M;
        ML[2 * t + 1] = L;
    }
    __syncthreads();
    for (int x = t; x < G * HD; x += NT) {
        const int i = x / HD, d = x % HD;
        float O = 0.0f;
        for (int w = 0; w < NW; w++) O = fmaf(wo[((size_t)w * G + i) * HD + d], wf[w * G + i], O);
        if (ns == 1) {
            oz[(size_t)(h0 + i) * HD + d] = O / ML[2 * i + 1];
            if constexpr (ST) os[x] = O / ML[2 * i + 1];
        } else if constexpr (CL) {
            wo[x] = O; /* warp 0's slot of output x, read above by this thread alone */
        } else {
            pz[((size_t)(h0 + i) * a.n_split + s) * (HD + 2) + 2 + d] = O;
        }
    }
    if constexpr (CL) {
        /* every split's partials (wo) and (M, L) (ML) visible to the cluster; then block s
         * merges heads s, s + ns, .. from every split's shared memory in split order,
         * att_merge_group's sums; a second barrier before any block leaves, so that none
         * frees memory a peer still reads */
        att_cluster_sync();
        if (ns > 1) /* the cluster spans the grid's splits: split j is rank j */
            for (int i = s; i < G; i += ns)
                for (int d = t; d < HD; d += NT) {
                    const float y = att_peer_merge(ML + 2 * i, wo + i * HD + d, ns);
                    oz[(size_t)(h0 + i) * HD + d] = y;
                    if constexpr (ST) os[i * HD + d] = y;
                }
        att_cluster_sync();
        if constexpr (ST) {
            if (ns == 1)
                for (int i = warp; i < G; i += NW) att_stage_out(a, h0 + i, z, os + i * HD, lane);
            else if (s < ns)
                for (int i = s + warp * ns; i < G; i += NW * ns) att_stage_out(a, h0 + i, z, os + i * HD, lane);
        }
        return;
    }
    if (ns == 1) {
        if constexpr (ST) {
            __syncthreads();
            for (int i = warp; i < G; i += NW) att_stage_out(a, h0 + i, z, os + i * HD, lane);
        }
        return;
    }
    if (t < G) {
        float *out = pz + ((size_t)(h0 + t) * a.n_split + s) * (HD + 2);
        out[0] = ML[2 * t];
        out[1] = ML[2 * t + 1];
    }
    /* the group's last block to finish merges every head's splits in split order (a ticket,
     * not a sum), flash_decode_block's arithmetic per head */
    if (!att_last_block(cz, &ticket, ns)) return;
    /* wo holds the merge's (m, l) pairs: the warps' o are used up */
    att_merge_group<NT, (AM_GMAX * HD + NT - 1) / NT, 32, ST>(pz, h0, a.n_split, HD, G, ns, wo, oz + (size_t)h0 * HD,
                                                              os, cz);
    if constexpr (ST) {
        __syncthreads();
        for (int i = warp; i < G; i += NW) att_stage_out(a, h0 + i, z, os + i * HD, lane);
    }
}

/* bit 32: decoding's split blocks as one cluster, where the grid's splits fit one (2 ..
 * ATT_CLMAX); bit 64: a chunk's too (S=16 lost 1%, docs/PERF.md v2.39) */
static bool am_cluster(const rl_att_args *a) {
    return (a->mma & 32) && !(a->mma & 6) && att_cl_fits(a) && (a->n_tok <= 1 || (a->mma & 64));
}

bool rl_att_cluster(const rl_att_args *a) { return am_use(a) && am_cluster(a); }

int rl_att_mma_knob(int mma) {
    if (!(mma & 32)) return mma;
    int dev = 0, has = 0;
    cudaFuncAttributes fa;
    /* ptxVersion: the virtual architecture the loaded code came from (a GPU newer than the
     * build's sm_90a runs the compute_80 PTX, whose cluster calls trap) */
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&has, cudaDevAttrClusterLaunch, dev) != cudaSuccess ||
        !has || cudaFuncGetAttributes(&fa, flash_mma_kernel<64, 8, false, false, true>) != cudaSuccess ||
        fa.ptxVersion < 90) {
        (void)cudaGetLastError(); /* a failed query is an answer, not an error to carry */
        return mma & ~(32 | 64);
    }
    return mma;
}

template <int HD, bool ST, bool Q8 = false> static att_fn am_pick(int mma, bool cl) {
    constexpr int N0 = HD <= 64 ? 8 : 4;
    if (cl) return flash_mma_kernel<HD, N0, false, ST, true, Q8>;
    if constexpr (Q8) return flash_mma_kernel<HD, N0, false, ST, false, true>; /* am_fits: bits 2, 4 off */
    switch (mma & 6) {
    case 0: return flash_mma_kernel<HD, N0, false, ST, false>;
    case 2: return flash_mma_kernel<HD, N0, true, ST, false>;
    case 4: return flash_mma_kernel<HD, 2 * N0, false, ST, false>;
    default: return flash_mma_kernel<HD, 2 * N0, true, ST, false>;
    }
}

template <bool ST, bool Q8> static att_fn am_pick_hd(const rl_att_args *a, bool cl) {
    return a->hd <= 64 ? am_pick<64, ST, Q8>(a->mma, cl) : am_pick<128, ST, Q8>(a->mma, cl);
}

/* staged for Wo or not (frag), a q8 cache or an f16 one (kd) */
static att_fn am_kernel(const rl_att_args *a) {
    const bool cl = am_cluster(a);
    if (a->kd) return a->frag ? am_pick_hd<true, true>(a, cl) : am_pick_hd<false, true>(a, cl);
    return a->frag ? am_pick_hd<true, false>(a, cl) : am_pick_hd<false, false>(a, cl);
}

/* room lowered to the largest cluster (along y, at most room) of f's blocks that the device can
 * hold at least once, 1 where none of 2 or more can */
template <typename F> static void att_cl_room(std::atomic<int> *room, F f, dim3 block, size_t smem) {
    int n = room->load();
    for (; n >= 2; n--) {
        cudaLaunchAttribute at;
        at.id = cudaLaunchAttributeClusterDimension;
        at.val.clusterDim.x = 1;
        at.val.clusterDim.y = (unsigned)n;
        at.val.clusterDim.z = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(1, (unsigned)n, 1);
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = smem;
        cfg.attrs = &at;
        cfg.numAttrs = 1;
        int k = 0;
        if (cudaOccupancyMaxActiveClusters(&k, f, &cfg) == cudaSuccess && k > 0) break;
        (void)cudaGetLastError(); /* no room is an answer, not an error to carry */
    }
    if (n < 2) n = 1;
    for (int r = room->load(); n < r && !room->compare_exchange_weak(r, n);) {
    }
}

int rl_att_cluster_max(void) { return att_room.load(); }

int rl_attention_prepare(const rl_att_args *a) {
    const size_t smem = rl_attention_smem(a);
    if (smem > 48 * 1024) {
        const int hj = (a->hd + 63) / 64;
        for (att_fn f : {att_pick<false, false>(hj), att_pick<true, false>(hj), att_pick<false, true>(hj),
                         att_pick<true, true>(hj)}) { /* either cache type, staging or not */
            cudaError_t err = rl_smem_at_least(f, smem);
            if (err != cudaSuccess) return (int)err;
        }
    }
    /* the tensor-core kernel, where the knob would run it: every variant, sized for the widest */
    const size_t am_max = am_smem_nw(a, (size_t)am_nw(a->hd, 4));
    if (am_fits(a))
        for (int v = 0; v < (a->mma & 32 ? 10 : 8); v += 2) /* 8: the cluster variant */
            for (att_fn f : {am_pick<64, false>(v, v == 8), am_pick<128, false>(v, v == 8),
                             am_pick<64, true>(v, v == 8), am_pick<128, true>(v, v == 8),
                             am_pick<64, false, true>(v, v == 8), am_pick<128, false, true>(v, v == 8),
                             am_pick<64, true, true>(v, v == 8), am_pick<128, true, true>(v, v == 8)}) {
                cudaError_t err = am_max > 48 * 1024 ? rl_smem_at_least(f, am_max) : cudaSuccess;
                if (err == cudaSuccess && v == 8) /* clusters of up to 16 blocks */
                    err = cudaFuncSetAttribute(f, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
                if (err != cudaSuccess) return (int)err;
            }
    if ((a->mma & 32) && !(a->mma & 6) && am_fits(a)) /* the cluster variant, where it would run: its block */
        att_cl_room(&att_room, a->hd <= 64 ? am_pick<64, false>(8, true) : am_pick<128, false>(8, true),
                    dim3(32 * am_nw(a->hd, 0)), am_smem_nw(a, (size_t)am_nw(a->hd, 0)));
    if (!gqa_fits(a) || gqa_smem(a) <= 48 * 1024) return 0; /* the grouped chunk kernel, where it would run */
    for (att_fn f : {flash_chunk_gqa_kernel<1, false>, flash_chunk_gqa_kernel<2, false>, flash_chunk_gqa_kernel<1, true>,
                     flash_chunk_gqa_kernel<2, true>}) {
        cudaError_t err = rl_smem_at_least(f, gqa_smem(a));
        if (err != cudaSuccess) return (int)err;
    }
    return 0;
}

/* The split widening keeps at most max_split splits active at any position, so the grid needs no more:
 * v1 launched n_ctx / split blocks per head, most of which returned at once. */
int rl_attention_launch(const rl_att_args *a, bool pdl, cudaStream_t st) {
    const int ny = att_ny(a);
    if (am_use(a)) /* before the grouped chunk kernel: a chunk must be its tokens' one-token bits */
        return rl_launch_cl(am_kernel(a), dim3(a->n_head_kv, ny, a->n_tok > 1 ? a->n_tok : 1),
                            dim3(32 * am_nw(a->hd, a->mma)), am_smem(a), st, pdl, am_cluster(a) ? ny : 0, *a);
    if (rl_att_gqa(a))
        return rl_launch(gqa_kernel(a), dim3(a->n_head_kv, ny, a->n_tok), dim3(GQ_THREADS), gqa_smem(a), st, pdl, *a);
    dim3 grid(a->n_head, ny, a->n_tok > 1 ? a->n_tok : 1);
    return rl_launch(att_kernel(a), grid, dim3(ATT_THREADS), rl_attention_smem(a), st, pdl, *a);
}

/* ---- prefill (fast mode) ---------------------------------------------------------------------
 * Causal attention of n_tok queries (positions pos0 .. pos0 + n_tok - 1, already roped, at
 * tok_stride floats apart in q) over the f16 cache, whose rows up to the last query's position
 * the rope_kv launch has written. Block: head h, PF_Q consecutive queries, one warp each; key
 * tiles of 32 positions staged in shared memory as fp32 (K padded by one float per row so lane j
 * reading key j's element d hits bank (j + d) % 32), shared by the block's warps. Per tile a
 * warp scores key (tile + lane), updates its running max and sum (online softmax), and adds the
 * tile's weighted values to its lane's dimensions lane + 32i. Not decoding's bits (another
 * summation order): the fast prefill is a quality class, not a bit-exact path. */
#define PF_Q 8
#define PF_DMAX 256

__global__ void __launch_bounds__(PF_Q * 32) attention_prefill_kernel(const rl_att_args a, __half *out) {
    extern __shared__ float sm[];
    const int hd = a.hd, h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kp = hd + 1, kv_dim = a.n_head_kv * hd, kvh = h / (a.n_head / a.n_head_kv);
    float *ks = sm, *vs = ks + 32 * kp, *qs = vs + 32 * hd + warp * hd;
    const int s0 = blockIdx.x * PF_Q, s = s0 + warp;
    const bool act = s < a.n_tok;
    const int mypos = a.pos0 + s, last = a.pos0 + min(s0 + PF_Q, a.n_tok) - 1;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int d = lane; d < hd; d += 32) qs[d] = act ? a.q[(size_t)s * a.tok_stride + h * hd + d] * scale : 0.0f;
    float m = -INFINITY, l = 0.0f, acc[PF_DMAX / 32];
#pragma unroll
    for (int i = 0; i < PF_DMAX / 32; i++) acc[i] = 0.0f;
    for (int k0 = 0; k0 <= last; k0 += 32) {
        __syncthreads(); /* the previous tile is used up */
        for (int i = threadIdx.x; i < 16 * hd; i += blockDim.x) { /* 32 keys x hd/2 pairs */
            int j = i / (hd / 2), d = 2 * (i % (hd / 2));
            float2 kf = make_float2(0.0f, 0.0f), vf = kf;
            const size_t cell = (size_t)(k0 + j) * kv_dim + kvh * hd + d;
            if (k0 + j <= last && a.kd) { /* q8 cache: int8 times its block's scale */
                const int8_t *kq = (const int8_t *)a.kc + cell, *vq = (const int8_t *)a.vc + cell;
                const float dk = a.kd[cell / 32], dv = a.vd[cell / 32];
                kf = make_float2(dk * (float)kq[0], dk * (float)kq[1]);
                vf = make_float2(dv * (float)vq[0], dv * (float)vq[1]);
            } else if (k0 + j <= last) {
                kf = __half22float2(*(const __half2 *)((const __half *)a.kc + cell));
                vf = __half22float2(*(const __half2 *)((const __half *)a.vc + cell));
            }
            ks[j * kp + d] = kf.x;
            ks[j * kp + d + 1] = kf.y;
            vs[j * hd + d] = vf.x;
            vs[j * hd + d + 1] = vf.y;
        }
        __syncthreads();
        if (!act || k0 > mypos) continue;
        const int p = k0 + lane;
        float sc = -INFINITY;
        if (p <= mypos) {
            float s0a = 0.0f, s1a = 0.0f;
            const float *kr = ks + lane * kp;
            for (int d = 0; d < hd; d += 2) {
                s0a = fmaf(qs[d], kr[d], s0a);
                s1a = fmaf(qs[d + 1], kr[d + 1], s1a);
            }
            sc = s0a + s1a;
        }
        float tm = sc;
        for (int o = 16; o > 0; o >>= 1) tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, o));
        const float mn = fmaxf(m, tm), alpha = expf(m - mn);
        const float pj = p <= mypos ? expf(sc - mn) : 0.0f;
        float ps = pj;
        for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
        l = l * alpha + ps;
        m = mn;
#pragma unroll
        for (int i = 0; i < PF_DMAX / 32; i++) acc[i] *= alpha;
        const int nk = min(32, mypos - k0 + 1);
        for (int j = 0; j < nk; j++) {
            const float w = __shfl_sync(0xffffffffu, pj, j);
            const float *vr = vs + j * hd;
#pragma unroll
            for (int i = 0; i < PF_DMAX / 32; i++)
                if (lane + 32 * i < hd) acc[i] = fmaf(w, vr[lane + 32 * i], acc[i]);
        }
    }
    if (!act) return;
    const float il = 1.0f / l;
#pragma unroll
    for (int i = 0; i < PF_DMAX / 32; i++)
        if (lane + 32 * i < hd) out[(size_t)s * a.n_head * hd + h * hd + lane + 32 * i] = __float2half_rn(acc[i] * il);
}

/* ---- prefill on the tensor cores ----------------------------------------------------------------
 * The same causal attention with fp16 mma.sync (m16n8k16, fp32 accumulation), FlashAttention-2's
 * loop (Dao, 2023). Block: head h and PFM_Q consecutive queries, 4 warps of 16 queries; the
 * heaviest blocks (the last queries, which see the most keys) are dispatched first. Key tiles of
 * PFM_K positions of the f16 cache go to shared memory by cp.async in two stages (the next tile
 * is copied under this one's math), K and V rows padded by 16 bytes so that ldmatrix's 8 rows
 * fall in 8 distinct bank groups. Per tile a warp computes its 16 x PFM_K scores S = Q K^T (q
 * scaled by log2(e) / sqrt(hd) and rounded to fp16 once), masks the keys past each query's
 * position, updates each row's running max and sum (online softmax in base 2), rounds P to fp16
 * and adds P V to its 16 x hd output in registers. The fp16 roundings of q and P are of the
 * fast class, as the GEMMs' fp16 inputs are; the summation order is not decoding's. */
#define PFM_Q 64
#define PFM_K 64

__device__ __forceinline__ void mma_f16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* Four 8 x 8 fp16 matrices from shared memory (lanes 8i..8i+7 give matrix i's row addresses);
 * T: transposed, for an operand whose k runs down the rows (V). */
template <bool T> __device__ __forceinline__ void ldsm4(uint32_t *r, uint32_t addr) {
    if (T)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ uint32_t h2pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&v;
}

template <int HD> __host__ __device__ constexpr size_t pfm_smem() { return (size_t)2 * 2 * PFM_K * (HD + 8) * 2; }

/* Thread (g = lane / 4, c = lane % 4) of a warp holds, in mma's fragment layout, rows g and g + 8
 * of the warp's 16 queries: of every 8-column n-tile of S and O the columns 2c, 2c + 1. */
template <int HD> __global__ void __launch_bounds__(128) attention_prefill_mma_kernel(const rl_att_args a, __half *out) {
    constexpr int LD = HD + 8, KS = HD / 16, DN = HD / 8, NJ = PFM_K / 8;
    extern __shared__ __align__(16) __half pfm[]; /* [stage][K, V][PFM_K][LD] */
    const int h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int kv_dim = a.n_head_kv * HD, kvh = h / (a.n_head / a.n_head_kv);
    const int s0 = (gridDim.x - 1 - blockIdx.x) * PFM_Q, w0 = s0 + warp * 16;
    const int last = a.pos0 + min(s0 + PFM_Q, a.n_tok) - 1;  /* the block's last query position */
    const int wlast = a.pos0 + min(w0 + 16, a.n_tok) - 1;    /* the warp's */
    const bool busy = w0 < a.n_tok;
    const int ntile = last / PFM_K + 1;
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(pfm);
    auto load = [&](int t) { /* tile t into stage t & 1; positions past last zero-filled */
        const int p0 = t * PFM_K;
        const uint32_t dst = sb + (uint32_t)((t & 1) * 2 * PFM_K * LD * 2);
        for (int i = threadIdx.x; i < 2 * PFM_K * (HD / 8); i += blockDim.x) {
            const int kv = i / (PFM_K * (HD / 8)), r = i / (HD / 8) % PFM_K, col = i % (HD / 8) * 8, p = p0 + r;
            const uint16_t *src = (kv ? a.vc : a.kc) + (size_t)min(p, last) * kv_dim + kvh * HD + col;
            cp16z(dst + (uint32_t)(((kv * PFM_K + r) * LD + col) * 2), src, p <= last ? 16 : 0);
        }
        cp_commit();
    };
    load(0);
    /* q rows w0 + g and w0 + g + 8 as the A operand of every k-step (rows past n_tok: zeros) */
    uint32_t qf[KS][4];
    const int ra = w0 + g, rb = ra + 8;
    {
        const float qs = 1.44269504088896341f / sqrtf((float)HD);
        const float *qa = a.q + (size_t)ra * a.tok_stride + h * HD, *qb = a.q + (size_t)rb * a.tok_stride + h * HD;
        const bool va = ra < a.n_tok, vb = rb < a.n_tok;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            const int d = kk * 16 + 2 * c;
            qf[kk][0] = h2pack(va ? qa[d] * qs : 0.0f, va ? qa[d + 1] * qs : 0.0f);
            qf[kk][1] = h2pack(vb ? qb[d] * qs : 0.0f, vb ? qb[d + 1] * qs : 0.0f);
            qf[kk][2] = h2pack(va ? qa[d + 8] * qs : 0.0f, va ? qa[d + 9] * qs : 0.0f);
            qf[kk][3] = h2pack(vb ? qb[d + 8] * qs : 0.0f, vb ? qb[d + 9] * qs : 0.0f);
        }
    }
    const int pa = a.pos0 + ra, pb = pa + 8;
    float o[DN][4], mr[2] = {-INFINITY, -INFINITY}, lr[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < DN; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    /* ldmatrix row addresses: matrix m = lane / 8, its row lane % 8 */
    const int mi = lane >> 3, mrow = lane & 7;
    for (int t = 0; t < ntile; t++) {
        if (t + 1 < ntile) {
            load(t + 1);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const int p0 = t * PFM_K;
        if (busy && p0 <= wlast) {
            const uint32_t kb = sb + (uint32_t)((t & 1) * 2 * PFM_K * LD * 2), vb = kb + (uint32_t)(PFM_K * LD * 2);
            float s[NJ][4];
#pragma unroll
            for (int j = 0; j < NJ; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
            for (int j = 0; j < NJ; j += 2) /* matrices: keys of n-tiles j, j + 1 x dims kk*16, +8 */
#pragma unroll
                for (int kk = 0; kk < KS; kk++) {
                    uint32_t b[4];
                    ldsm4<false>(b, kb + (uint32_t)(((j * 8 + (mi >> 1) * 8 + mrow) * LD + kk * 16 + (mi & 1) * 8) * 2));
                    mma_f16(s[j], qf[kk], b[0], b[1]);
                    mma_f16(s[j + 1], qf[kk], b[2], b[3]);
                }
            const bool edge = p0 + PFM_K - 1 > a.pos0 + w0; /* a key past the warp's first query */
            float mx[2] = {mr[0], mr[1]};
#pragma unroll
            for (int j = 0; j < NJ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    if (edge && p0 + j * 8 + 2 * c + (e & 1) > (e < 2 ? pa : pb)) s[j][e] = -INFINITY;
                    mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
                }
            float al[2], ls[2] = {0.0f, 0.0f};
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                al[r] = exp2f(mr[r] - mx[r]); /* 0 on the first tile (mr = -inf; key 0 is always seen) */
                mr[r] = mx[r];
            }
#pragma unroll
            for (int j = 0; j < NJ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[j][e] = exp2f(s[j][e] - mx[e >> 1]);
                    ls[e >> 1] += s[j][e];
                }
            lr[0] = lr[0] * al[0] + ls[0];
            lr[1] = lr[1] * al[1] + ls[1];
#pragma unroll
            for (int n = 0; n < DN; n++) {
                o[n][0] *= al[0];
                o[n][1] *= al[0];
                o[n][2] *= al[1];
                o[n][3] *= al[1];
            }
#pragma unroll
            for (int kk = 0; kk < PFM_K / 16; kk++) { /* S's fragments of n-tiles 2kk, 2kk+1 are P's A operand */
                const uint32_t pf[4] = {h2pack(s[2 * kk][0], s[2 * kk][1]), h2pack(s[2 * kk][2], s[2 * kk][3]),
                                        h2pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                        h2pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                for (int n = 0; n < DN; n += 2) { /* matrices: keys kk*16, +8 x dims of n-tiles n, n + 1 */
                    uint32_t b[4];
                    ldsm4<true>(b, vb + (uint32_t)(((kk * 16 + (mi & 1) * 8 + mrow) * LD + n * 8 + (mi >> 1) * 8) * 2));
                    mma_f16(o[n], pf, b[0], b[1]);
                    mma_f16(o[n + 1], pf, b[2], b[3]);
                }
            }
        }
        __syncthreads(); /* every warp is done with this stage before tile t + 2 is copied into it */
    }
    if (!busy) return;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lr[r] += __shfl_xor_sync(0xffffffffu, lr[r], 1);
        lr[r] += __shfl_xor_sync(0xffffffffu, lr[r], 2);
    }
    const float ia = 1.0f / lr[0], ib = 1.0f / lr[1];
    const size_t od = (size_t)a.n_head * HD;
#pragma unroll
    for (int n = 0; n < DN; n++) {
        const int d = h * HD + n * 8 + 2 * c;
        if (ra < a.n_tok) *(__half2 *)(out + (size_t)ra * od + d) = __floats2half2_rn(o[n][0] * ia, o[n][1] * ia);
        if (rb < a.n_tok) *(__half2 *)(out + (size_t)rb * od + d) = __floats2half2_rn(o[n][2] * ib, o[n][3] * ib);
    }
}

typedef void (*pfm_fn)(const rl_att_args, __half *);

/* The tensor-core kernel for a head size and its shared memory, or NULL where it has none. */
static pfm_fn pfm_kernel(int hd, size_t *smem) {
    switch (hd) {
    case 64: *smem = pfm_smem<64>(); return attention_prefill_mma_kernel<64>;
    case 80: *smem = pfm_smem<80>(); return attention_prefill_mma_kernel<80>;
    case 96: *smem = pfm_smem<96>(); return attention_prefill_mma_kernel<96>;
    case 128: *smem = pfm_smem<128>(); return attention_prefill_mma_kernel<128>;
    default: return NULL;
    }
}

bool rl_attention_prefill_mma(const rl_att_args *a) {
    size_t smem;
    return !a->kd && pfm_kernel(a->hd, &smem);
}

int rl_attention_prefill_launch(const rl_att_args *a, __half *out, bool mma, cudaStream_t st) {
    size_t smem = 0;
    pfm_fn f = mma && !a->kd ? pfm_kernel(a->hd, &smem) : NULL;
    dim3 grid((a->n_tok + PFM_Q - 1) / PFM_Q, a->n_head), block(128);
    if (!f) { /* the fp32 kernel */
        if (a->hd > PF_DMAX || a->hd % 2) return (int)cudaErrorInvalidValue;
        f = attention_prefill_kernel;
        smem = (size_t)(32 * (a->hd + 1) + 32 * a->hd + PF_Q * a->hd) * sizeof(float);
        grid = dim3((a->n_tok + PF_Q - 1) / PF_Q, a->n_head);
        block = dim3(PF_Q * 32);
    }
    if (smem > 48 * 1024) { /* per call: cheap, and right for whichever device is current */
        cudaError_t err = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (err != cudaSuccess) return (int)err;
    }
    f<<<grid, block, smem, st>>>(*a, out);
    return (int)cudaGetLastError();
}
