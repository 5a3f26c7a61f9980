/* Block-wide reductions in a fixed order (warp butterfly, then the warps' results in warp
 * order): the same inputs give the same bits, whichever warp finishes first. Every thread of
 * the block must call them (they hold barriers); red is __shared__ scratch of 32 values. */
#ifndef RL_CUDA_REDUCE_CUH
#define RL_CUDA_REDUCE_CUH

/* Block-wide sum of one double per thread in a fixed order (warp butterfly, then warp 0). */
__device__ inline double block_sum_d(double v, double *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    double t = 0;
    for (int i = 0; i < nw; i++) t += red[i];
    return t;
}

/* A group of nt threads (a multiple of 32, nt | blockDim.x) of one block that synchronises by
 * itself: named barrier id over threads [g * nt, (g + 1) * nt). id 0 with nt = blockDim.x is
 * __syncthreads. The persistent kernel runs several flash-decode blocks in one CUDA block, a
 * group each (barriers 1, 2, ...). */
struct rl_grp {
    int id, nt;
    __device__ __forceinline__ void sync() const {
        asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nt) : "memory");
    }
    __device__ __forceinline__ int tid() const { return (int)threadIdx.x % nt; }
};

__device__ inline float block_max_f(float v, float *red, rl_grp g) {
    int lane = g.tid() & 31, warp = g.tid() >> 5, nw = g.nt >> 5;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    g.sync();
    if (lane == 0) red[warp] = v;
    g.sync();
    float t = red[0];
    for (int i = 1; i < nw; i++) t = fmaxf(t, red[i]);
    return t;
}

__device__ inline float block_sum_f(float v, float *red, rl_grp g) {
    int lane = g.tid() & 31, warp = g.tid() >> 5, nw = g.nt >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    g.sync();
    if (lane == 0) red[warp] = v;
    g.sync();
    float t = 0;
    for (int i = 0; i < nw; i++) t += red[i];
    return t;
}

#endif
