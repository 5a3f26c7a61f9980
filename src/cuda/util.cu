/* Small kernels: greedy argmax on the GPU and the 16-byte read stream that measures the
 * device's own read bandwidth (the ceiling bench reports against). */
#include <math.h>

#include "kernels.h"

#define ARGMAX_THREADS 1024

/* One block. Each thread scans a strided slice keeping the first maximum; the tree keeps
 * (larger value, or equal value at the smaller index): the first maximum overall. */
__global__ void argmax_kernel(const float *v, int n, int32_t *out) {
    __shared__ float bv[ARGMAX_THREADS];
    __shared__ int bi[ARGMAX_THREADS];
    rl_pdl_trigger();
    rl_pdl_wait();
    int t = threadIdx.x;
    float best = -INFINITY;
    int idx = n; /* sentinel: loses every tie */
    const int nt = blockDim.x;
    for (int base = t; base < n; base += 8 * nt) {
        float x[8]; /* eight independent loads in flight, then compared in index order */
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = base + k * nt < n ? v[base + k * nt] : -INFINITY;
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (base + k * nt < n && (idx == n || x[k] > best)) { /* the first maximum stays */
                best = x[k];
                idx = base + k * nt;
            }
    }
    bv[t] = best;
    bi[t] = idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
            float ov = bv[t + s];
            int oi = bi[t + s];
            if (oi < n && (bi[t] == n || ov > bv[t] || (ov == bv[t] && oi < bi[t]))) {
                bv[t] = ov;
                bi[t] = oi;
            }
        }
        __syncthreads();
    }
    if (t == 0) *out = bi[0] < n ? bi[0] : 0;
}

void rl_argmax_launch(const float *v, int n, int32_t *out, bool pdl, cudaStream_t st) {
    rl_launch(argmax_kernel, dim3(1), dim3(ARGMAX_THREADS), 0, st, pdl, v, n, out);
}

/* Streaming (evict-first) 16-byte loads, four in flight per thread per step; the XOR of what
 * was read goes to sink so the loads cannot be removed. */
__global__ void read_stream_kernel(const uint4 *p, size_t n, uint32_t *sink) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, st = (size_t)gridDim.x * blockDim.x;
    uint32_t x = 0;
    for (; i + 3 * st < n; i += 4 * st) {
        uint4 a = __ldcs(p + i), b = __ldcs(p + i + st), c = __ldcs(p + i + 2 * st),
              d = __ldcs(p + i + 3 * st);
        x ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
             d.z ^ d.w;
    }
    for (; i < n; i += st) {
        uint4 a = __ldcs(p + i);
        x ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    for (int o = 16; o > 0; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
    if ((threadIdx.x & 31) == 0 && x == 0x9e3779b9u) sink[blockIdx.x] = x; /* almost never */
}

void rl_read_stream_launch(const void *buf, size_t n16, uint32_t *sink, int blocks,
                           cudaStream_t st) {
    read_stream_kernel<<<blocks, 512, 0, st>>>((const uint4 *)buf, n16, sink);
}
