/* Attention for one decode token: q/k norm + RoPE + KV-cache write (one launch; only for
 * qk-norm or neox models, otherwise it is folded into the QKV matvec's epilogue), then split-K
 * flash decode over the cache (one launch).
 *
 * Flash decode: block (head h, split s) covers positions [s*S, (s+1)*S) of [0, pos] and writes
 * the unnormalised partial (max m, sum l, o[hd]); the last block of a head to finish (an atomic
 * ticket, not an atomic sum) merges the active splits in split order. A single active split
 * writes o / l directly. The same input gives the same bits. */
#include <cuda_fp16.h>
#include <math.h>

#include "attention.cuh"

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
        float th = __fmul_rn((float)pos, a.inv_freq[t]);
        float cs = cosf(th), sn = sinf(th);
        ia = a.neox ? t : 2 * t;
        ib = a.neox ? t + half : 2 * t + 1;
        float x0 = h[ia], x1 = h[ib];
        /* separate rounded products, as the CPU reference (lesson 6) */
        float m0 = __fmul_rn(x0, cs), m1 = __fmul_rn(x1, sn), m2 = __fmul_rn(x0, sn),
              m3 = __fmul_rn(x1, cs);
        ra = __fsub_rn(m0, m1);
        rb = __fadd_rn(m2, m3);
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

template <int HJ, bool Q8>
__global__ void __launch_bounds__(ATT_THREADS, 8) flash_decode_kernel(const rl_att_args a) {
    extern __shared__ float sm[];
    __shared__ float red[32];
    __shared__ int ticket;
    rl_pdl_trigger();
    rl_pdl_wait();
    flash_decode_block<HJ, Q8>(a, blockIdx.x, blockIdx.y, blockIdx.z, sm, red, &ticket, rl_grp{0, ATT_THREADS});
}

typedef void (*att_fn)(const rl_att_args);

template <bool Q8> static att_fn att_pick(int hj) {
    return hj <= 1 ? flash_decode_kernel<1, Q8> : hj <= 2 ? flash_decode_kernel<2, Q8>
                   : hj <= 4 ? flash_decode_kernel<4, Q8> : flash_decode_kernel<8, Q8>;
}

static att_fn att_kernel(const rl_att_args *a) {
    const int hj = (a->hd + 63) / 64;
    return a->kd ? att_pick<true>(hj) : att_pick<false>(hj);
}

size_t rl_attention_smem(const rl_att_args *a) {
    return (size_t)(a->split_max + a->hd + (ATT_THREADS / 32) * a->hd) * sizeof(float);
}

int rl_attention_prepare(const rl_att_args *a) {
    const size_t smem = rl_attention_smem(a);
    if (smem <= 48 * 1024) return 0;
    const int hj = (a->hd + 63) / 64;
    for (att_fn f : {att_pick<false>(hj), att_pick<true>(hj)}) { /* either cache type */
        cudaError_t err = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (err != cudaSuccess) return (int)err;
    }
    return 0;
}

/* The split widening keeps at most max_split splits active at any position, so the grid needs no more:
 * v1 launched n_ctx / split blocks per head, most of which returned at once. */
int rl_attention_launch(const rl_att_args *a, bool pdl, cudaStream_t st) {
    dim3 grid(a->n_head, a->n_split < a->max_split ? a->n_split : a->max_split, a->n_tok > 1 ? a->n_tok : 1);
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

int rl_attention_prefill_launch(const rl_att_args *a, __half *out, cudaStream_t st) {
    if (a->hd > PF_DMAX || a->hd % 2) return (int)cudaErrorInvalidValue;
    size_t smem = (size_t)(32 * (a->hd + 1) + 32 * a->hd + PF_Q * a->hd) * sizeof(float);
    if (smem > 48 * 1024) { /* per call: cheap, and right for whichever device is current */
        cudaError_t err = cudaFuncSetAttribute(attention_prefill_kernel,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (err != cudaSuccess) return (int)err;
    }
    dim3 grid((a->n_tok + PF_Q - 1) / PF_Q, a->n_head);
    attention_prefill_kernel<<<grid, PF_Q * 32, smem, st>>>(*a, out);
    return (int)cudaGetLastError();
}
