/* Attention for one decode token: q/k norm + RoPE + KV-cache write (one launch), then split-K
 * flash decode over the cache (one launch) and a deterministic combine (one launch).
 *
 * Flash decode: block (head h, split s) covers positions [s*split, (s+1)*split) ∩ [0, pos]:
 * scores into shared memory (one warp per position, lanes over the head dimension), block max,
 * exp and sum, then one thread per output dimension accumulates sum_p e_p * v_p in position
 * order. It writes the unnormalised partial (max m, sum l, o[hd]); the combine merges the
 * active splits in split order. No atomics anywhere: the same input gives the same bits. */
#include <cuda_fp16.h>
#include <math.h>

#include "kernels.h"

/* Block-wide sum of one double per thread in a fixed order (warp butterfly, then warp 0). */
__device__ double block_sum_d(double v, double *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    double t = 0;
    for (int i = 0; i < nw; i++) t += red[i];
    return t;
}

/* Block (blockDim.x == hd rounded up to 32) per head: blocks [0, n_head) rotate q in place,
 * [n_head, n_head + n_kv) rotate k and store it, then [.., + n_kv) store v. */
__global__ void rope_kv_kernel(const rl_att_args a) {
    __shared__ float h[512];
    __shared__ double red[32];
    int b = blockIdx.x, t = threadIdx.x, hd = a.hd, pos = a.io->pos;
    int kind = b < a.n_head ? 0 : b < a.n_head + a.n_head_kv ? 1 : 2;
    int head = kind == 0 ? b : kind == 1 ? b - a.n_head : b - a.n_head - a.n_head_kv;
    const float *src = kind == 0 ? a.q + head * hd : kind == 1 ? a.k + head * hd : a.v + head * hd;
    float val = t < hd ? src[t] : 0.0f;
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
        if (kind == 0) a.q[head * hd + t] = h[t];
        else a.kc[(size_t)pos * a.n_head_kv * hd + head * hd + t] = __half_as_ushort(__float2half_rn(h[t]));
    }
}

void rl_rope_kv_launch(const rl_att_args *a, cudaStream_t st) {
    int threads = (a->hd + 31) / 32 * 32;
    rope_kv_kernel<<<a->n_head + 2 * a->n_head_kv, threads, 0, st>>>(*a);
}

#define ATT_THREADS 128

__device__ float block_max_f(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = red[0];
    for (int i = 1; i < nw; i++) t = fmaxf(t, red[i]);
    return t;
}

__device__ float block_sum_f(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = 0;
    for (int i = 0; i < nw; i++) t += red[i];
    return t;
}

/* grid (n_head, n_split); dynamic shared memory: split floats of scores + hd floats of q */
__global__ void flash_decode_kernel(const rl_att_args a) {
    extern __shared__ float sm[];
    __shared__ float red[32];
    float *sc = sm, *qs = sm + a.split;
    int h = blockIdx.x, s = blockIdx.y, hd = a.hd, n_pos = a.io->pos + 1;
    int p0 = s * a.split;
    if (p0 >= n_pos) return; /* inactive split: the combine never reads it */
    int p1 = min(p0 + a.split, n_pos), np = p1 - p0;
    int kv_dim = a.n_head_kv * hd, kvh = h / (a.n_head / a.n_head_kv);
    int t = threadIdx.x, lane = t & 31, warp = t >> 5, nw = blockDim.x >> 5;
    for (int d = t; d < hd; d += blockDim.x) qs[d] = a.q[h * hd + d];
    __syncthreads();
    float scale = 1.0f / sqrtf((float)hd);
    const __half *kc = (const __half *)a.kc + kvh * hd;
    for (int p = warp; p < np; p += nw) {
        const __half *kr = kc + (size_t)(p0 + p) * kv_dim;
        float acc = 0.0f;
        for (int d = lane; d < hd; d += 32) acc = fmaf(qs[d], __half2float(kr[d]), acc);
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) sc[p] = acc * scale;
    }
    __syncthreads();
    float m = -INFINITY;
    for (int p = t; p < np; p += blockDim.x) m = fmaxf(m, sc[p]);
    m = block_max_f(m, red);
    float l = 0.0f;
    for (int p = t; p < np; p += blockDim.x) {
        float e = expf(sc[p] - m);
        sc[p] = e;
        l += e;
    }
    l = block_sum_f(l, red); /* also orders the sc[] writes before the reads below */
    float *out = a.part + ((size_t)h * a.n_split + s) * (hd + 2);
    const __half *vc = (const __half *)a.vc + kvh * hd;
    for (int d = t; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int p = 0; p < np; p++) o = fmaf(sc[p], __half2float(vc[(size_t)(p0 + p) * kv_dim + d]), o);
        out[2 + d] = o;
    }
    if (t == 0) {
        out[0] = m;
        out[1] = l;
    }
}

/* one block per head, one thread per output dimension; splits merged in order */
__global__ void att_combine_kernel(const rl_att_args a) {
    int h = blockIdx.x, hd = a.hd, n_pos = a.io->pos + 1;
    int ns = (n_pos + a.split - 1) / a.split;
    const float *part = a.part + (size_t)h * a.n_split * (hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < ns; s++) M = fmaxf(M, part[s * (hd + 2)]);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float L = 0.0f, o = 0.0f;
        for (int s = 0; s < ns; s++) {
            const float *p = part + s * (hd + 2);
            float w = expf(p[0] - M);
            L = fmaf(p[1], w, L);
            o = fmaf(p[2 + d], w, o);
        }
        a.out[h * hd + d] = o / L;
    }
}

void rl_attention_launch(const rl_att_args *a, cudaStream_t st) {
    dim3 grid(a->n_head, a->n_split);
    size_t smem = (size_t)(a->split + a->hd) * sizeof(float);
    flash_decode_kernel<<<grid, ATT_THREADS, smem, st>>>(*a);
    int threads = (a->hd + 31) / 32 * 32;
    att_combine_kernel<<<a->n_head, threads, 0, st>>>(*a);
}
