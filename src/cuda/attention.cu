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

#include "kernels.h"
#include "reduce.cuh"

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
        if (t < hd) a.vc[(size_t)pos * a.n_head_kv * hd + head * hd + t] = __half_as_ushort(__float2half_rn(val));
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
        else a.kc[(size_t)pos * a.n_head_kv * hd + head * hd + t] = __half_as_ushort(__float2half_rn(h[t]));
    }
}

void rl_rope_kv_launch(const rl_att_args *a, bool pdl, cudaStream_t st) {
    int threads = (a->hd + 31) / 32 * 32;
    rl_launch(rope_kv_kernel, dim3(a->n_head + 2 * a->n_head_kv, a->n_tok > 1 ? a->n_tok : 1),
              dim3(threads), 0, st, pdl, *a);
}

#define ATT_THREADS 128

/* grid (n_head, n_split), ATT_THREADS threads; dynamic shared memory: split scores, hd of q,
 * and nw * hd for the cross-warp sum of the output.
 * Scores: one thread per key (16-byte loads along the key row, q broadcast from shared).
 * Output: warp w takes positions w, w + nw, ...; lane l the dimension pairs 2l + 64j (coalesced
 * 4-byte loads of a value row); the warps' sums are added in warp order. The partials (max m,
 * sum l, unnormalised o[hd]) are merged at the end of this kernel by the head's last block. */
__global__ void flash_decode_kernel(const rl_att_args a) {
    extern __shared__ float sm[];
    __shared__ float red[32];
    rl_pdl_trigger();
    rl_pdl_wait();
    const int hd = a.hd, nw = blockDim.x >> 5;
    float *sc = sm, *qs = sm + a.split_max, *ow = qs + hd;
    /* token z of an exact chunk (grid z; 0 when decoding) sits at io->pos + z: its q, output,
     * partials and tickets are its own, and everything below is the one-token computation */
    const int z = blockIdx.z;
    int h = blockIdx.x, s = blockIdx.y, n_pos = a.io->pos + z + 1;
    const float *qz = a.q + (size_t)z * a.tok_stride;
    float *oz = a.out + (size_t)z * a.n_head * hd;
    float *pz = a.part + (size_t)z * a.n_head * a.n_split * (hd + 2);
    int *cz = a.count + (size_t)z * a.n_head;
    /* positions per split: the knob, widened (in steps of 32) to keep at most max_split splits so the
     * merge stays short at depth; a function of pos only, so every block agrees */
    int S = max(a.split, ((n_pos + a.max_split - 1) / a.max_split + 31) / 32 * 32);
    int p0 = s * S;
    if (p0 >= n_pos) return; /* inactive split: the merge never reads it */
    int np = min(p0 + S, n_pos) - p0;
    int kv_dim = a.n_head_kv * hd, kvh = h / (a.n_head / a.n_head_kv);
    int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    for (int d = t; d < hd; d += blockDim.x) qs[d] = qz[h * hd + d];
    __syncthreads();
    float scale = 1.0f / sqrtf((float)hd);
    const __half *kc = (const __half *)a.kc + kvh * hd;
    float m = -INFINITY;
    for (int p = t; p < np; p += blockDim.x) {
        const uint4 *kr = (const uint4 *)(kc + (size_t)(p0 + p) * kv_dim);
        float acc0 = 0.0f, acc1 = 0.0f;
        /* the key row's loads in groups of 8 issued before any is used: v2 loaded one 16-byte
         * piece, waited, used it (16 round trips per key at hd 128, ~8 us per layer) */
        for (int g = 0; g < hd / 8; g += 8) {
          uint4 kk[8];
#pragma unroll
          for (int j = 0; j < 8; j++) kk[j] = g + j < hd / 8 ? kr[g + j] : make_uint4(0, 0, 0, 0);
#pragma unroll
          for (int j = 0; j < 8; j++) {
            if (g + j >= hd / 8) break;
            int d8 = g + j;
            uint4 k8 = kk[j];
            const float *qq = qs + 8 * d8;
            float2 f0 = __half22float2(*(const __half2 *)&k8.x);
            float2 f1 = __half22float2(*(const __half2 *)&k8.y);
            float2 f2 = __half22float2(*(const __half2 *)&k8.z);
            float2 f3 = __half22float2(*(const __half2 *)&k8.w);
            acc0 = fmaf(qq[0], f0.x, acc0);
            acc1 = fmaf(qq[1], f0.y, acc1);
            acc0 = fmaf(qq[2], f1.x, acc0);
            acc1 = fmaf(qq[3], f1.y, acc1);
            acc0 = fmaf(qq[4], f2.x, acc0);
            acc1 = fmaf(qq[5], f2.y, acc1);
            acc0 = fmaf(qq[6], f3.x, acc0);
            acc1 = fmaf(qq[7], f3.y, acc1);
          }
        }
        float v = (acc0 + acc1) * scale;
        sc[p] = v;
        m = fmaxf(m, v);
    }
    m = block_max_f(m, red);
    float l = 0.0f;
    for (int p = t; p < np; p += blockDim.x) {
        float e = expf(sc[p] - m);
        sc[p] = e;
        l += e;
    }
    l = block_sum_f(l, red); /* its barriers also order the sc[] writes before the reads below */
    const __half *vc = (const __half *)a.vc + kvh * hd;
    float2 acc[8];
#pragma unroll
    for (int j = 0; j < 8; j++) acc[j] = make_float2(0.0f, 0.0f);
#pragma unroll 4
    for (int p = warp; p < np; p += nw) {
        const __half2 *vr = (const __half2 *)(vc + (size_t)(p0 + p) * kv_dim);
        float e = sc[p];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int d = 2 * lane + 64 * j;
            if (d < hd) {
                float2 f = __half22float2(vr[d / 2]);
                acc[j].x = fmaf(e, f.x, acc[j].x);
                acc[j].y = fmaf(e, f.y, acc[j].y);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
        int d = 2 * lane + 64 * j;
        if (d < hd) {
            ow[warp * hd + d] = acc[j].x;
            ow[warp * hd + d + 1] = acc[j].y;
        }
    }
    __syncthreads();
    int ns = (n_pos + S - 1) / S;
    if (ns == 1) { /* a single split is its own merge: o / l, the same bits as the merge gives */
        for (int d = t; d < hd; d += blockDim.x) {
            float o = 0.0f;
            for (int w = 0; w < nw; w++) o += ow[w * hd + d];
            oz[h * hd + d] = o / l;
        }
        return;
    }
    float *out = pz + ((size_t)h * a.n_split + s) * (hd + 2);
    for (int d = t; d < hd; d += blockDim.x) {
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
    __shared__ int ticket;
    __threadfence();
    __syncthreads();
    if (t == 0) ticket = atomicAdd(&cz[h], 1);
    __syncthreads();
    if (ticket != ns - 1) return;
    __threadfence();
    const float *ph = pz + (size_t)h * a.n_split * (hd + 2);
    float M = -INFINITY;
    for (int q = 0; q < ns; q++) M = fmaxf(M, __ldcg(ph + q * (hd + 2)));
    for (int d = t; d < hd; d += blockDim.x) {
        float L = 0.0f, o = 0.0f;
        for (int q = 0; q < ns; q++) {
            const float *pq = ph + q * (hd + 2);
            float w = expf(__ldcg(pq) - M);
            L = fmaf(__ldcg(pq + 1), w, L);
            o = fmaf(__ldcg(pq + 2 + d), w, o);
        }
        oz[h * hd + d] = o / L;
    }
    if (t == 0) cz[h] = 0;
}

/* The split widening keeps at most max_split splits active at any position, so the grid needs no more:
 * v1 launched n_ctx / split blocks per head, most of which returned at once. */
void rl_attention_launch(const rl_att_args *a, bool pdl, cudaStream_t st) {
    dim3 grid(a->n_head, a->n_split < a->max_split ? a->n_split : a->max_split, a->n_tok > 1 ? a->n_tok : 1);
    size_t smem = (size_t)(a->split_max + a->hd + (ATT_THREADS / 32) * a->hd) * sizeof(float);
    rl_launch(flash_decode_kernel, grid, dim3(ATT_THREADS), smem, st, pdl, *a);
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
    const __half *kc = (const __half *)a.kc + kvh * hd, *vc = (const __half *)a.vc + kvh * hd;
    for (int k0 = 0; k0 <= last; k0 += 32) {
        __syncthreads(); /* the previous tile is used up */
        for (int i = threadIdx.x; i < 16 * hd; i += blockDim.x) { /* 32 keys x hd/2 pairs */
            int j = i / (hd / 2), d = 2 * (i % (hd / 2));
            float2 kf = make_float2(0.0f, 0.0f), vf = kf;
            if (k0 + j <= last) {
                kf = __half22float2(*(const __half2 *)(kc + (size_t)(k0 + j) * kv_dim + d));
                vf = __half22float2(*(const __half2 *)(vc + (size_t)(k0 + j) * kv_dim + d));
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
