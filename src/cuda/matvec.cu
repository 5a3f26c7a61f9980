/* Fused dequant-matvec for every weight type of the CPU backend, plus the embedding lookup
 * (which uses the same dequantisers).
 *
 * Design: a block of W warps stages the input in shared memory (RMS-normalised in the prologue
 * when the matvec follows a norm: every block recomputes the scale, so no separate norm
 * launch). Each warp then owns output rows (grid-stride); its lanes stride over the row's
 * 32-element chunks (lane l: chunks l, l+32, ..., two in flight), so a warp's weight loads of
 * one step are contiguous 16-byte loads. Per chunk a lane dots its 32 input values (16-byte
 * shared loads) with the chunk (chunk_dot: one function per type;
 * Q4_0/Q8_0 with a byte-permute int->float, the other types via deq32 in rl_dequant_row's op
 * order). The shared copy is padded by 4 floats after every 32 values so a quarter-warp's
 * 16-byte loads hit distinct banks. Lane sums are combined by a fixed butterfly:
 * deterministic, no atomics. Epilogues: bias, residual add, and SwiGLU (gate row r and up row
 * r in one pass: one read of x, both rows' loads in flight).
 * Measured (docs/PERF.md): 4 rows per warp sharing the x registers was slower (fewer warps,
 * fewer loads in flight on 1B-sized matrices), so a warp owns one row (two for the GLU). */
#include <cuda_fp16.h>

#include "kernels.h"
#include "types.h"

#define XPAD(i) ((i) + ((i) >> 5) * 4) /* padded shared-memory index of input element i */

/* ---- device layout ---------------------------------------------------------------------- */

bool rl_dmat_repacked(uint32_t type) { return type == RL_Q4_0 || type == RL_Q8_0; }

void rl_dmat_sizes(uint32_t type, size_t rows, size_t cols, size_t row_bytes, size_t *q_bytes,
                   size_t *s_bytes) {
    if (type == RL_Q4_0) {
        *q_bytes = rows * (cols / 2);
        *s_bytes = rows * (cols / 32) * 2;
    } else if (type == RL_Q8_0) {
        *q_bytes = rows * cols;
        *s_bytes = rows * (cols / 32) * 2;
    } else {
        *q_bytes = rows * row_bytes;
        *s_bytes = 0;
    }
}

void rl_dmat_repack(uint32_t type, const uint8_t *src, size_t rows, size_t cols, size_t row_bytes,
                    uint8_t *q, uint8_t *s) {
    size_t nb = cols / 32, qb = type == RL_Q4_0 ? 16 : 32, bb = qb + 2;
    for (size_t r = 0; r < rows; r++) {
        const uint8_t *row = src + r * row_bytes;
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + b * bb;
            uint8_t *qd = q + (r * nb + b) * qb, *sd = s + (r * nb + b) * 2;
            sd[0] = blk[0];
            sd[1] = blk[1];
            for (size_t i = 0; i < qb; i++) qd[i] = blk[2 + i];
        }
    }
}

/* ---- dequantisers: chunk c (32 values) of one row ---------------------------------------- */

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float ldh(const uint8_t *p) {
    return h2f((uint16_t)(p[0] | (p[1] << 8)));
}

__device__ __forceinline__ void deq_f32(const uint8_t *w, const uint8_t *, int c, float *v) {
    const float4 *p = (const float4 *)(w + (size_t)c * 128);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float4 t = __ldg(p + j);
        v[4 * j] = t.x; v[4 * j + 1] = t.y; v[4 * j + 2] = t.z; v[4 * j + 3] = t.w;
    }
}

template <bool BF>
__device__ __forceinline__ void deq_16bit(const uint8_t *w, const uint8_t *, int c, float *v) {
    const uint4 *p = (const uint4 *)(w + (size_t)c * 64);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint4 t = __ldg(p + j);
        uint32_t u[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (BF) {
                v[8 * j + 2 * k] = __uint_as_float(u[k] << 16);
                v[8 * j + 2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
            } else {
                v[8 * j + 2 * k] = h2f((uint16_t)(u[k] & 0xffff));
                v[8 * j + 2 * k + 1] = h2f((uint16_t)(u[k] >> 16));
            }
        }
    }
}

/* repacked: 16 quant bytes (element j low nibble, j+16 high nibble of byte j) + fp16 scale */
__device__ __forceinline__ void deq_q4_0(const uint8_t *w, const uint8_t *s, int c, float *v) {
    uint4 t = __ldg((const uint4 *)(w + (size_t)c * 16));
    float d = h2f(__ldg((const unsigned short *)s + c));
    uint32_t u[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int k = 0; k < 16; k++) {
        int b = (int)((u[k / 4] >> (8 * (k % 4))) & 0xff);
        v[k] = __fmul_rn(d, (float)((b & 0xF) - 8));
        v[k + 16] = __fmul_rn(d, (float)((b >> 4) - 8));
    }
}

__device__ __forceinline__ void deq_q8_0(const uint8_t *w, const uint8_t *s, int c, float *v) {
    const uint4 *p = (const uint4 *)(w + (size_t)c * 32);
    float d = h2f(__ldg((const unsigned short *)s + c));
#pragma unroll
    for (int j = 0; j < 2; j++) {
        uint4 t = __ldg(p + j);
        uint32_t u[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
        for (int k = 0; k < 16; k++)
            v[16 * j + k] = __fmul_rn(d, (float)(int8_t)((u[k / 4] >> (8 * (k % 4))) & 0xff));
    }
}

__device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q4_K / Q5_K: chunk c is sub-block c%8 of super-block c/8; value = d*sc*q - dmin*m, with the
 * product rounded before the subtraction as in the C reference (no FMA contraction). */
template <bool FIVE>
__device__ __forceinline__ void deq_qk45(const uint8_t *w, const uint8_t *, int c, float *v) {
    const uint8_t *b = w + (size_t)(c / 8) * (FIVE ? 176 : 144);
    int sb = c % 8, sc, mn;
    scale_min_k4(sb, b + 4, &sc, &mn);
    float d1 = __fmul_rn(ldh(b), (float)sc), m1 = __fmul_rn(ldh(b + 2), (float)mn);
    const uint4 *qp = (const uint4 *)(b + (FIVE ? 48 : 16) + 32 * (sb / 2));
    uint4 q0 = __ldg(qp), q1 = __ldg(qp + 1);
    uint32_t u[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    uint32_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (FIVE) {
        const uint4 *hp = (const uint4 *)(b + 16);
        uint4 h0 = __ldg(hp), h1 = __ldg(hp + 1);
        h[0] = h0.x; h[1] = h0.y; h[2] = h0.z; h[3] = h0.w;
        h[4] = h1.x; h[5] = h1.y; h[6] = h1.z; h[7] = h1.w;
    }
    int shift = (sb & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; l++) {
        int q = (int)((u[l / 4] >> (8 * (l % 4) + shift)) & 0xF);
        if (FIVE) q += (int)(((h[l / 4] >> (8 * (l % 4) + sb)) & 1) << 4);
        v[l] = __fsub_rn(__fmul_rn(d1, (float)q), m1);
    }
}

/* Q6_K (210-byte blocks, not 16-byte aligned: byte loads). Chunk c: half h, group g of
 * super-block c/8 = elements 128h + 32g + l. */
__device__ __forceinline__ void deq_q6_k(const uint8_t *w, const uint8_t *, int c, float *v) {
    const uint8_t *b = w + (size_t)(c / 8) * 210;
    int sb = c % 8, hh = sb / 4, g = sb % 4;
    float d = ldh(b + 208);
    const uint8_t *ql = b + 64 * hh + 32 * (g & 1), *qh = b + 128 + 32 * hh;
    const int8_t *sc = (const int8_t *)(b + 192 + 8 * hh + 2 * g);
    float ds0 = __fmul_rn(d, (float)sc[0]), ds1 = __fmul_rn(d, (float)sc[1]);
#pragma unroll
    for (int l = 0; l < 32; l++) {
        int lo = g >= 2 ? (ql[l] >> 4) : (ql[l] & 0xF);
        int q = (lo | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
        v[l] = __fmul_rn(l < 16 ? ds0 : ds1, (float)q);
    }
}

template <int T>
__device__ __forceinline__ void deq32(const uint8_t *w, const uint8_t *s, int c, float *v) {
    if (T == RL_F32) deq_f32(w, s, c, v);
    else if (T == RL_F16) deq_16bit<false>(w, s, c, v);
    else if (T == RL_BF16) deq_16bit<true>(w, s, c, v);
    else if (T == RL_Q4_0) deq_q4_0(w, s, c, v);
    else if (T == RL_Q8_0) deq_q8_0(w, s, c, v);
    else if (T == RL_Q4_K) deq_qk45<false>(w, s, c, v);
    else if (T == RL_Q5_K) deq_qk45<true>(w, s, c, v);
    else deq_q6_k(w, s, c, v);
}

/* ---- matvec ------------------------------------------------------------------------------ */

/* Q4_0 / Q8_0 chunk · x with the scale factored out: d * sum((q - z) * x). Integer to float
 * without the quarter-rate I2F: a byte permute builds the float 2^23 + q (exactly), one FADD
 * removes 2^23 + z: full-rate ops instead of a quarter-rate I2F per weight (lesson 4; with
 * the attention rework it took 1.1B Q4_0 from 724 to 944 tok/s). Not the CPU's op order,
 * which the 1e-3 gate does not need; deq_q4_0 / deq_q8_0 (embedding) keep the reference order. */
#define MAGIC 0x4B000000u /* bits of 2^23 */
__device__ __forceinline__ float mag(uint32_t u, int b) {
    return __uint_as_float(__byte_perm(u, MAGIC, 0x7650 + b));
}

template <int T>
__device__ __forceinline__ float chunk_dot(const uint8_t *w, const uint8_t *s, int c, const float *xc) {
    if (T == RL_Q4_0) {
        uint4 t = __ldg((const uint4 *)(w + (size_t)c * 16));
        float d = h2f(__ldg((const unsigned short *)s + c));
        uint32_t u[4] = {t.x, t.y, t.z, t.w};
        float a0 = 0.0f, a1 = 0.0f;
        const float z = 8388616.0f; /* 2^23 + 8 */
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t lo = u[k] & 0x0F0F0F0Fu, hi = (u[k] >> 4) & 0x0F0F0F0Fu;
            float4 xl = *(const float4 *)(xc + 4 * k), xh = *(const float4 *)(xc + 16 + 4 * k);
            a0 = fmaf(mag(lo, 0) - z, xl.x, a0);
            a1 = fmaf(mag(hi, 0) - z, xh.x, a1);
            a0 = fmaf(mag(lo, 1) - z, xl.y, a0);
            a1 = fmaf(mag(hi, 1) - z, xh.y, a1);
            a0 = fmaf(mag(lo, 2) - z, xl.z, a0);
            a1 = fmaf(mag(hi, 2) - z, xh.z, a1);
            a0 = fmaf(mag(lo, 3) - z, xl.w, a0);
            a1 = fmaf(mag(hi, 3) - z, xh.w, a1);
        }
        return d * (a0 + a1);
    } else if (T == RL_Q8_0) {
        const uint4 *p = (const uint4 *)(w + (size_t)c * 32);
        uint4 t0 = __ldg(p), t1 = __ldg(p + 1);
        float d = h2f(__ldg((const unsigned short *)s + c));
        uint32_t u[8] = {t0.x, t0.y, t0.z, t0.w, t1.x, t1.y, t1.z, t1.w};
        float a0 = 0.0f, a1 = 0.0f;
        const float z = 8388736.0f; /* 2^23 + 128 */
#pragma unroll
        for (int k = 0; k < 8; k++) {
            uint32_t v = u[k] ^ 0x80808080u; /* int8 q -> q + 128 */
            float4 xx = *(const float4 *)(xc + 4 * k);
            a0 = fmaf(mag(v, 0) - z, xx.x, a0);
            a1 = fmaf(mag(v, 1) - z, xx.y, a1);
            a0 = fmaf(mag(v, 2) - z, xx.z, a0);
            a1 = fmaf(mag(v, 3) - z, xx.w, a1);
        }
        return d * (a0 + a1);
    } else {
        float v[32];
        deq32<T>(w, s, c, v);
        float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
        for (int j = 0; j < 32; j += 4) {
            float4 xx = *(const float4 *)(xc + j);
            a0 = fmaf(v[j], xx.x, a0);
            a1 = fmaf(v[j + 1], xx.y, a1);
            a0 = fmaf(v[j + 2], xx.z, a0);
            a1 = fmaf(v[j + 3], xx.w, a1);
        }
        return a0 + a1;
    }
}

/* R rows (any pointers, same type) against x (shared, padded): R independent weight loads per
 * chunk in flight. Results are complete (butterfly-reduced) sums in every lane. */
template <int T, int R>
__device__ void rows_dot_t(const uint8_t *const *w, const uint8_t *const *s, const float *xs,
                           int nch, int lane, float *acc) {
#pragma unroll
    for (int i = 0; i < R; i++) acc[i] = 0.0f;
#pragma unroll(R == 1 ? 2 : 1) /* two chunks in flight; R = 2 has two rows in flight already */
    for (int c = lane; c < nch; c += 32) {
#pragma unroll
        for (int i = 0; i < R; i++) acc[i] += chunk_dot<T>(w[i], s[i], c, xs + c * 36);
    }
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
}

template <int R>
__device__ void rows_dot(uint32_t type, const uint8_t *const *w, const uint8_t *const *s,
                         const float *xs, int nch, int lane, float *acc) {
    switch (type) {
    case RL_F32: rows_dot_t<RL_F32, R>(w, s, xs, nch, lane, acc); break;
    case RL_F16: rows_dot_t<RL_F16, R>(w, s, xs, nch, lane, acc); break;
    case RL_BF16: rows_dot_t<RL_BF16, R>(w, s, xs, nch, lane, acc); break;
    case RL_Q4_0: rows_dot_t<RL_Q4_0, R>(w, s, xs, nch, lane, acc); break;
    case RL_Q8_0: rows_dot_t<RL_Q8_0, R>(w, s, xs, nch, lane, acc); break;
    case RL_Q4_K: rows_dot_t<RL_Q4_K, R>(w, s, xs, nch, lane, acc); break;
    case RL_Q5_K: rows_dot_t<RL_Q5_K, R>(w, s, xs, nch, lane, acc); break;
    default: rows_dot_t<RL_Q6_K, R>(w, s, xs, nch, lane, acc); break;
    }
}

__device__ __forceinline__ const uint8_t *qrow(const rl_dmat &m, int r) { return m.q + (size_t)r * m.q_row; }
__device__ __forceinline__ const uint8_t *srow(const rl_dmat &m, int r) {
    return m.s ? m.s + (size_t)r * m.s_row : nullptr;
}

__device__ float row_dot(const rl_dmat &m, int r, const float *xs, int nch, int lane) {
    const uint8_t *w[1] = {qrow(m, r)}, *s[1] = {srow(m, r)};
    float acc[1];
    rows_dot<1>(m.type, w, s, xs, nch, lane, acc);
    return acc[0];
}

__device__ __forceinline__ void epilogue(const rl_mv_args &a, const rl_mv_seg &sg, int r, float v) {
    if (sg.bias) v = v + sg.bias[r];
    if (a.mode == RL_MV_ADD) sg.y[r] = sg.y[r] + v;
    else sg.y[r] = v;
}

__global__ void matvec_kernel(const rl_mv_args a) {
    extern __shared__ float xs[];
    __shared__ double red[32];
    const int n = a.n, tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5;
    const int nw = nt >> 5;
    /* prologue: stage x, RMS-normalised as the CPU does (sum of squares in double, then
     * out = w * (x * r)) */
    float r = 1.0f;
    if (a.norm_w) {
        double ss = 0;
        for (int i = tid; i < n; i += nt) ss += (double)a.x[i] * (double)a.x[i];
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) red[warp] = ss;
        __syncthreads();
        if (tid == 0) {
            double t = 0;
            for (int i = 0; i < nw; i++) t += red[i];
            red[0] = t;
        }
        __syncthreads();
        r = 1.0f / sqrtf((float)(red[0] / (double)n) + a.eps);
    }
    for (int i = tid; i < n; i += nt)
        xs[XPAD(i)] = a.norm_w ? __fmul_rn(a.norm_w[i], __fmul_rn(a.x[i], r)) : a.x[i];
    __syncthreads();

    const int nch = n / 32;
    if (a.mode == RL_MV_GLU) { /* row r of gate and row r of up in one pass */
        const rl_dmat &g = a.seg[0].w, &u = a.seg[1].w;
        for (int r = blockIdx.x * nw + warp; r < g.rows; r += gridDim.x * nw) {
            float acc[2];
            if (g.type == u.type) {
                const uint8_t *w[2] = {qrow(g, r), qrow(u, r)}, *s[2] = {srow(g, r), srow(u, r)};
                rows_dot<2>(g.type, w, s, xs, nch, lane, acc);
            } else {
                acc[0] = row_dot(g, r, xs, nch, lane);
                acc[1] = row_dot(u, r, xs, nch, lane);
            }
            if (lane == 0) a.seg[0].y[r] = acc[0] / (1.0f + expf(-acc[0])) * acc[1];
        }
        return;
    }
    int total = 0;
    for (int i = 0; i < a.nseg; i++) total += a.seg[i].w.rows;
    for (int row = blockIdx.x * nw + warp; row < total; row += gridDim.x * nw) {
        int si = 0, r = row;
        while (r >= a.seg[si].w.rows) r -= a.seg[si++].w.rows;
        float v = row_dot(a.seg[si].w, r, xs, nch, lane);
        if (lane == 0) epilogue(a, a.seg[si], r, v);
    }
}

size_t rl_mv_smem(int n) { return (size_t)XPAD(n) * sizeof(float) + 16; }

int rl_mv_prepare(int max_n) {
    return (int)cudaFuncSetAttribute(matvec_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)rl_mv_smem(max_n));
}

int rl_mv_launch(const rl_mv_args *a, const rl_cuda_knobs *k, int n_sm, cudaStream_t st) {
    int groups = 0;
    if (a->mode == RL_MV_GLU) groups = a->seg[0].w.rows;
    else
        for (int i = 0; i < a->nseg; i++) groups += a->seg[i].w.rows;
    int warps = k->mv_warps, blocks = (groups + warps - 1) / warps;
    int cap = k->mv_blocks_per_sm * n_sm;
    if (blocks > cap) blocks = cap;
    matvec_kernel<<<blocks, warps * 32, rl_mv_smem(a->n), st>>>(*a);
    return (int)cudaGetLastError();
}

/* ---- embedding ---------------------------------------------------------------------------- */

template <int T>
__device__ void embed_t(const rl_dmat &m, int tok, float *x) {
    const uint8_t *w = m.q + (size_t)tok * m.q_row, *s = m.s ? m.s + (size_t)tok * m.s_row : nullptr;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < m.cols / 32; c += gridDim.x * blockDim.x) {
        float v[32];
        deq32<T>(w, s, c, v);
#pragma unroll
        for (int j = 0; j < 32; j++) x[c * 32 + j] = v[j];
    }
}

__global__ void embed_kernel(const rl_dmat m, const rl_cuda_io *io, float *x) {
    int tok = io->tok;
    switch (m.type) {
    case RL_F32: embed_t<RL_F32>(m, tok, x); break;
    case RL_F16: embed_t<RL_F16>(m, tok, x); break;
    case RL_BF16: embed_t<RL_BF16>(m, tok, x); break;
    case RL_Q4_0: embed_t<RL_Q4_0>(m, tok, x); break;
    case RL_Q8_0: embed_t<RL_Q8_0>(m, tok, x); break;
    case RL_Q4_K: embed_t<RL_Q4_K>(m, tok, x); break;
    case RL_Q5_K: embed_t<RL_Q5_K>(m, tok, x); break;
    default: embed_t<RL_Q6_K>(m, tok, x); break;
    }
}

void rl_embed_launch(const rl_dmat *emb, const rl_cuda_io *io, float *x, cudaStream_t st) {
    int nch = emb->cols / 32, threads = 64, blocks = (nch + threads - 1) / threads;
    embed_kernel<<<blocks, threads, 0, st>>>(*emb, io, x);
}
