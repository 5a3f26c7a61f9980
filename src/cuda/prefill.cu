/* Kernels of the fast prefill (cuda_backend.cu: prefill_fast): weight rows expanded to fp16
 * for the tensor-core GEMMs (gemm.cu), the embedding of a chunk of tokens, RMSNorm and SwiGLU
 * over a chunk, each writing the fp16 input of the next GEMM. */
#include "dequant.cuh"
#include "kernels.h"
#include "reduce.cuh"

__device__ __forceinline__ void store32(float *o, const float *v) {
#pragma unroll
    for (int j = 0; j < 32; j += 4) *(float4 *)(o + j) = make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]);
}
__device__ __forceinline__ void store32(__half *o, const float *v) {
#pragma unroll
    for (int j = 0; j < 32; j += 8) {
        __half2 h[4] = {__floats2half2_rn(v[j], v[j + 1]), __floats2half2_rn(v[j + 2], v[j + 3]),
                        __floats2half2_rn(v[j + 4], v[j + 5]), __floats2half2_rn(v[j + 6], v[j + 7])};
        *(uint4 *)(o + j) = *(const uint4 *)h;
    }
}

/* One thread per 32-value chunk, consecutive threads on consecutive chunks of a row (coalesced
 * weight loads); the grid strides over n rows x chunks. */
template <int T, typename O>
__global__ void deq_rows_kernel(const rl_dmat m, const int32_t *ids, int r0, int n, O *out) {
    const int nch = m.cols / 32;
    const size_t total = (size_t)n * nch;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(t / nch), c = (int)(t % nch);
        int r = ids ? ids[i] : r0 + i;
        float v[32];
        deq32<T>(m.q + (size_t)r * m.q_row, m.s ? m.s + (size_t)r * m.s_row : nullptr, c, v);
        store32(out + (size_t)i * m.cols + (size_t)c * 32, v);
    }
}

template <int T>
static int deq_rows_t(const rl_dmat *m, const int32_t *ids, int r0, int n, void *out, bool f16, cudaStream_t st) {
    size_t total = (size_t)n * (m->cols / 32);
    int threads = 256, blocks = (int)((total + threads - 1) / threads);
    if (blocks > 8192) blocks = 8192;
    if (blocks < 1) return 0;
    if (f16) deq_rows_kernel<T, __half><<<blocks, threads, 0, st>>>(*m, ids, r0, n, (__half *)out);
    else deq_rows_kernel<T, float><<<blocks, threads, 0, st>>>(*m, ids, r0, n, (float *)out);
    return (int)cudaGetLastError();
}

int rl_deq_rows_launch(const rl_dmat *m, const int32_t *ids, int r0, int n, void *out, bool f16,
                       cudaStream_t st) {
    switch (m->type) {
    case RL_F32: return deq_rows_t<RL_F32>(m, ids, r0, n, out, f16, st);
    case RL_F16: return deq_rows_t<RL_F16>(m, ids, r0, n, out, f16, st);
    case RL_BF16: return deq_rows_t<RL_BF16>(m, ids, r0, n, out, f16, st);
    case RL_Q4_0: return deq_rows_t<RL_Q4_0>(m, ids, r0, n, out, f16, st);
    case RL_Q8_0: return deq_rows_t<RL_Q8_0>(m, ids, r0, n, out, f16, st);
    case RL_FP8: return deq_rows_t<RL_FP8>(m, ids, r0, n, out, f16, st);
    case RL_Q4_1: return deq_rows_t<RL_Q4_1>(m, ids, r0, n, out, f16, st);
    case RL_Q5_0: return deq_rows_t<RL_Q5_0>(m, ids, r0, n, out, f16, st);
    case RL_Q5_1: return deq_rows_t<RL_Q5_1>(m, ids, r0, n, out, f16, st);
    case RL_Q4_K: return deq_rows_t<RL_Q4_K>(m, ids, r0, n, out, f16, st);
    case RL_Q5_K: return deq_rows_t<RL_Q5_K>(m, ids, r0, n, out, f16, st);
    case RL_Q6_K: return deq_rows_t<RL_Q6_K>(m, ids, r0, n, out, f16, st);
    case RL_RQ2: return deq_rows_t<RL_RQ2>(m, ids, r0, n, out, f16, st);
    default: return (int)cudaErrorInvalidValue;
    }
}

/* Block per token; the sum of squares in double and w * (x * r), as the matvec's prologue. */
__global__ void rmsnorm_f16_kernel(const float *x, int n, const float *w, float eps, __half *out, int ldo) {
    __shared__ double red[32];
    const float *xr = x + (size_t)blockIdx.x * n;
    double ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += (double)xr[i] * (double)xr[i];
    ss = block_sum_d(ss, red);
    float r = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    __half *o = out + (size_t)blockIdx.x * ldo;
    for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = __float2half_rn(__fmul_rn(w[i], __fmul_rn(xr[i], r)));
}

int rl_rmsnorm_f16_launch(const float *x, int n, int n_tok, const float *w, float eps, __half *out,
                          int ldo, cudaStream_t st) {
    rmsnorm_f16_kernel<<<n_tok, 256, 0, st>>>(x, n, w, eps, out, ldo);
    return (int)cudaGetLastError();
}

__global__ void silu_mul_f16_kernel(const float *gu, int F, int n_tok, __half *out) {
    size_t total = (size_t)n_tok * F;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (size_t)gridDim.x * blockDim.x) {
        size_t s = t / F, i = t % F;
        float g = gu[s * 2 * F + i], u = gu[s * 2 * F + F + i];
        out[t] = __float2half_rn(g / (1.0f + expf(-g)) * u);
    }
}

int rl_silu_mul_f16_launch(const float *gu, int F, int n_tok, __half *out, cudaStream_t st) {
    size_t total = (size_t)n_tok * F;
    int blocks = (int)((total + 255) / 256);
    if (blocks > 8192) blocks = 8192;
    silu_mul_f16_kernel<<<blocks, 256, 0, st>>>(gu, F, n_tok, out);
    return (int)cudaGetLastError();
}
