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

/* One thread per 32-value chunk, consecutive threads on consecutive chunks (coalesced weight
 * loads); the grid strides over n rows x chunks, a warp 32 chunks at a time. Chunk t's output
 * is at out + 32 t (rows are whole chunks), so a warp's 32 chunks are one contiguous run: each
 * lane puts its chunk in the warp's shared-memory slot (rows 16 bytes apart from a multiple of
 * 128, so 8 lanes' 16-byte stores hit 8 distinct bank groups), and the warp writes the run back
 * in 16-byte pieces, lane l piece l + 32k (a lane storing its own 64 bytes left every store
 * instruction strided over 2 KB: ~1.4 TB/s of writes for the 7B expansions, 35% of a Q4_0
 * chunk's time). */
template <int T, typename O>
__global__ void __launch_bounds__(256) deq_rows_kernel(const rl_dmat m, const int32_t *ids, int r0, int n, O *out) {
    constexpr int CB = 32 * (int)sizeof(O), ST = CB + 16, PC = CB / 16; /* chunk bytes, slot stride, pieces */
    __shared__ __align__(16) unsigned char slot[8][32 * ST];
    unsigned char *my = slot[threadIdx.x >> 5];
    const int lane = threadIdx.x & 31, nch = m.cols / 32;
    const size_t total = (size_t)n * nch;
    for (size_t t0 = ((size_t)blockIdx.x * 8 + (threadIdx.x >> 5)) * 32; t0 < total; t0 += (size_t)gridDim.x * 256) {
        const size_t t = t0 + lane;
        if (t < total) {
            int i = (int)(t / nch), c = (int)(t % nch);
            int r = ids ? ids[i] : r0 + i;
            float v[32];
            deq32<T>(m.q + (size_t)r * m.q_row, m.s ? m.s + (size_t)r * m.s_row : nullptr, c, v);
            store32((O *)(my + lane * ST), v);
        }
        __syncwarp();
        const int pieces = (int)(total - t0 < 32 ? total - t0 : 32) * PC;
        unsigned char *dst = (unsigned char *)(out + t0 * 32);
        for (int p = lane; p < pieces; p += 32) *(uint4 *)(dst + 16 * p) = *(const uint4 *)(my + p / PC * ST + p % PC * 16);
        __syncwarp();
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
    case RL_RQ4: return deq_rows_t<RL_RQ4>(m, ids, r0, n, out, f16, st);
    default: return (int)cudaErrorInvalidValue;
    }
}

/* Block per token; the sum of squares in double and w * (x * r), as the matvec's prologue, four
 * values per load where n allows (a scalar loop made the 7B norms latency-bound: 0.5 TB/s). */
__global__ void rmsnorm_f16_kernel(const float *x, int n, const float *w, float eps, __half *out, int ldo) {
    __shared__ double red[32];
    const float *xr = x + (size_t)blockIdx.x * n;
    __half *o = out + (size_t)blockIdx.x * ldo;
    const bool v4 = n % 4 == 0 && ldo % 4 == 0;
    double ss = 0;
    if (v4)
        for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
            const float4 v = ((const float4 *)xr)[i];
            ss += (double)v.x * (double)v.x + (double)v.y * (double)v.y + (double)v.z * (double)v.z +
                  (double)v.w * (double)v.w;
        }
    else
        for (int i = threadIdx.x; i < n; i += blockDim.x) ss += (double)xr[i] * (double)xr[i];
    ss = block_sum_d(ss, red);
    const float r = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    if (v4)
        for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
            const float4 v = ((const float4 *)xr)[i], g = ((const float4 *)w)[i];
            const __half2 h[2] = {__floats2half2_rn(__fmul_rn(g.x, __fmul_rn(v.x, r)), __fmul_rn(g.y, __fmul_rn(v.y, r))),
                                  __floats2half2_rn(__fmul_rn(g.z, __fmul_rn(v.z, r)), __fmul_rn(g.w, __fmul_rn(v.w, r)))};
            ((uint2 *)o)[i] = *(const uint2 *)h;
        }
    else
        for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = __float2half_rn(__fmul_rn(w[i], __fmul_rn(xr[i], r)));
}

int rl_rmsnorm_f16_launch(const float *x, int n, int n_tok, const float *w, float eps, __half *out,
                          int ldo, cudaStream_t st) {
    rmsnorm_f16_kernel<<<n_tok, 256, 0, st>>>(x, n, w, eps, out, ldo);
    return (int)cudaGetLastError();
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/* Grid y strides over the tokens; four values per load where F allows (32-bit indices, no
 * division). */
__global__ void silu_mul_f16_kernel(const float *gu, int F, int n_tok, __half *out) {
    const int step = gridDim.x * blockDim.x;
    for (int y = blockIdx.y; y < n_tok; y += gridDim.y) {
        const float *g = gu + (size_t)y * 2 * F, *u = g + F;
        __half *o = out + (size_t)y * F;
        if (F % 4 == 0)
            for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < F / 4; i += step) {
                const float4 a = ((const float4 *)g)[i], b = ((const float4 *)u)[i];
                const __half2 h[2] = {__floats2half2_rn(silu_mul(a.x, b.x), silu_mul(a.y, b.y)),
                                      __floats2half2_rn(silu_mul(a.z, b.z), silu_mul(a.w, b.w))};
                ((uint2 *)o)[i] = *(const uint2 *)h;
            }
        else
            for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < F; i += step)
                o[i] = __float2half_rn(silu_mul(g[i], u[i]));
    }
}

int rl_silu_mul_f16_launch(const float *gu, int F, int n_tok, __half *out, cudaStream_t st) {
    const int per = F % 4 == 0 ? F / 4 : F, blocks = (per + 255) / 256 < 64 ? (per + 255) / 256 : 64;
    silu_mul_f16_kernel<<<dim3(blocks, n_tok < 65535 ? n_tok : 65535), 256, 0, st>>>(gu, F, n_tok, out);
    return (int)cudaGetLastError();
}
