/* fp16 GEMM on the tensor cores for the fast prefill, through cuBLAS loaded at run time.
 *
 * Why cuBLAS: a dense GEMM at the tensor cores' rate is a library's job (one well-kept by the
 * GPU's vendor), and the prefill is the one place rawloop needs one. Why dlopen: libcublasLt is
 * half a gigabyte, far too large to link statically, and linking it dynamically would make the
 * whole binary (CPU paths included) refuse to start wherever the library is missing. So the
 * library is looked up the first time a fast prefill runs; when it is not found the backend
 * says so and prefills exactly (token by token), which needs nothing but the driver. */
#include <cublas_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

typedef cublasStatus_t (*create_fn)(cublasHandle_t *);
typedef cublasStatus_t (*destroy_fn)(cublasHandle_t);
typedef cublasStatus_t (*stream_fn)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*gemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                  const void *, const void *, cudaDataType, int, const void *,
                                  cudaDataType, int, const void *, void *, cudaDataType, int,
                                  cublasComputeType_t, cublasGemmAlgo_t);

struct rl_gemm {
    void *lib;
    cublasHandle_t h;
    destroy_fn destroy;
    gemm_fn gemm;
};

/* One library file: open it, find the four entry points, create a handle on st. 0; -1 when the
 * file does not open, -2 when it opens but does not work; the reason in why. */
static int try_open(const char *file, cudaStream_t st, rl_gemm *g, char *why, size_t why_cap) {
    memset(g, 0, sizeof *g);
    g->lib = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (!g->lib) {
        snprintf(why, why_cap, "%s", dlerror());
        return -1;
    }
    create_fn create = (create_fn)dlsym(g->lib, "cublasCreate_v2");
    stream_fn set_stream = (stream_fn)dlsym(g->lib, "cublasSetStream_v2");
    g->destroy = (destroy_fn)dlsym(g->lib, "cublasDestroy_v2");
    g->gemm = (gemm_fn)dlsym(g->lib, "cublasGemmEx");
    cublasStatus_t s = CUBLAS_STATUS_NOT_INITIALIZED;
    if (!create || !set_stream || !g->destroy || !g->gemm)
        snprintf(why, why_cap, "%s lacks cublasCreate_v2 / cublasGemmEx", file);
    else if ((s = create(&g->h)) != CUBLAS_STATUS_SUCCESS || (s = set_stream(g->h, st)) != CUBLAS_STATUS_SUCCESS)
        snprintf(why, why_cap, "%s: cublasCreate / cublasSetStream failed (status %d)", file, (int)s);
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    if (g->h) g->destroy(g->h);
    dlclose(g->lib);
    return -2;
}

int rl_gemm_open(rl_gemm **out, cudaStream_t st, char *why, size_t why_cap) {
    *out = NULL;
    rl_gemm g;
    /* RL_CUBLAS names the library file when it is not on the loader's path; then only it */
    const char *env = getenv("RL_CUBLAS");
    const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    int ok = -1;
    if (env && *env) {
        ok = try_open(env, st, &g, why, why_cap);
    } else {
        /* report a library that opened but failed before one that is not there */
        char reason[256] = "";
        int rank = 0; /* of the reason kept: 1 not found, 2 opened but failed */
        for (const char *n : names) {
            if (!(ok = try_open(n, st, &g, why, why_cap))) break;
            int r = ok == -2 ? 2 : 1;
            if (r > rank) {
                rank = r;
                snprintf(reason, sizeof reason, "%.250s", why);
            }
        }
        if (ok) snprintf(why, why_cap, "%s (set RL_CUBLAS=/path/to/libcublas.so)", reason);
    }
    if (ok) return -1;
    rl_gemm *h = (rl_gemm *)malloc(sizeof *h);
    if (!h) {
        snprintf(why, why_cap, "out of memory");
        g.destroy(g.h);
        dlclose(g.lib);
        return -1;
    }
    *h = g;
    *out = h;
    return 0;
}

void rl_gemm_close(rl_gemm *g) {
    if (!g) return;
    g->destroy(g->h);
    dlclose(g->lib);
    free(g);
}

/* Row-major C[t][r] = beta * C[t][r] + sum_k A[t][k] * W[r][k] (fp16 in, fp32 accumulate and
 * out). In cuBLAS's column-major terms: C^T (rows x n_tok) = op_T(W as k x rows) . A^T. */
int rl_gemm_f16(rl_gemm *g, const __half *W, int rows, int k, const __half *A, int lda, int n_tok,
                float *C, int ldc, float beta) {
    const float one = 1.0f;
    cublasStatus_t s = g->gemm(g->h, CUBLAS_OP_T, CUBLAS_OP_N, rows, n_tok, k, &one, W, CUDA_R_16F, k,
                               A, CUDA_R_16F, lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS ? 0 : (int)s;
}
