/* Is compute-sanitizer racecheck's report on the persistent kernel (persist.cu) a race, or the
 * tool? This kernel is race-free by construction and has the persistent kernel's pattern: a
 * block that synchronises with __syncthreads also runs groups of 128 threads that synchronise
 * with their own named barriers (bar.sync 1 + group, 128), and only some groups do so in a
 * given round (the persistent kernel's attention phase: groups without a (head, split) to do
 * skip it), optionally with thread 0 polling a global word between two block barriers (its grid
 * barrier). Every shared-memory write and read of a[] below is separated by a __syncthreads.
 *
 *   racecheck_probe NAMED SPIN   NAMED 0: no named barriers, 1: every group, 2: group 0 only,
 *                                3: alternate groups each round; SPIN 0/1
 *
 * H200, compute-sanitizer of CUDA 13.0 (docs/test-logs/cuda-2026-12-01.md): 0 hazards for
 * NAMED 0 and 1, 3-7 hazards for NAMED 2 and 3 (a[0]'s write and its read across a
 * __syncthreads): racecheck loses the block barrier when only some groups use named ones. */
#include <cstdio>
#include <cstdlib>

__device__ __forceinline__ void group_sync(int id) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(128) : "memory"); }

__global__ void probe(int *out, const unsigned long long *flag, int named, int spin) {
    __shared__ int a[512];
    __shared__ int r[4];
    const int t = threadIdx.x, grp = t / 128, nt = blockDim.x;
    int s = 0;
    for (int it = 0; it < 4; it++) {
        a[t] = t + it;
        __syncthreads();
        s += a[(t + 1) % nt];
        __syncthreads();
        if (named == 1 || (named == 2 && grp == 0) || (named == 3 && (grp + it) % 2 == 0)) {
            if (t % 128 == 0) r[grp] = s; /* a group's own slot, between its own barriers */
            group_sync(1 + grp);
            s += r[grp];
            group_sync(1 + grp);
        }
        if (spin) {
            __syncthreads();
            if (t == 0)
                while (*(volatile const unsigned long long *)flag == 0) {
                }
            __syncthreads();
        }
        if (t == 0) a[0] = s;
        __syncthreads();
        s += a[0];
        __syncthreads();
    }
    out[blockIdx.x * nt + t] = s;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: racecheck_probe NAMED(0-3) SPIN(0-1)\n");
        return 2;
    }
    const int named = atoi(argv[1]), spin = atoi(argv[2]);
    int *out = NULL;
    unsigned long long *flag = NULL, one = 1;
    cudaError_t e = cudaMalloc(&out, 4 * 512 * sizeof(int));
    if (e == cudaSuccess) e = cudaMalloc(&flag, sizeof one);
    if (e == cudaSuccess) e = cudaMemcpy(flag, &one, sizeof one, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        probe<<<4, 512>>>(out, flag, named, spin);
        e = cudaDeviceSynchronize();
    }
    printf("named %d spin %d: %s\n", named, spin, cudaGetErrorString(e));
    return e != cudaSuccess;
}
