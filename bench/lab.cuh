/* What the kernel labs (bench/lab_*.cu) share: a CUDA check that exits, and the timing of a
 * CUDA graph of K launches replayed `reps` times. Lab code only; never production. */
#ifndef RL_BENCH_LAB_CUH
#define RL_BENCH_LAB_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#define CKL(call)                                                                                \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "lab: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* Median µs per launch: enq(i) enqueues launch i of K on st; the graph is captured once, run
 * three times to warm up, then replayed reps times, each replay timed by two events. */
template <typename F> static double time_graph(cudaStream_t st, int K, int reps, F enq) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CKL(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < K; i++) enq(i);
    CKL(cudaStreamEndCapture(st, &g));
    CKL(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    CKL(cudaEventCreate(&a));
    CKL(cudaEventCreate(&b));
    for (int w = 0; w < 3; w++) CKL(cudaGraphLaunch(ge, st));
    std::vector<double> t;
    for (int r = 0; r < reps; r++) {
        CKL(cudaEventRecord(a, st));
        CKL(cudaGraphLaunch(ge, st));
        CKL(cudaEventRecord(b, st));
        CKL(cudaEventSynchronize(b));
        float ms;
        CKL(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.0 / K);
    }
    CKL(cudaGetLastError());
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

#endif
