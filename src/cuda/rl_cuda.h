/* The CUDA backend's C interface beyond backend.h: hooks the GPU test program (tests/cuda/)
 * uses to run single kernels against the CPU reference, and introspection for reports. */
#ifndef RL_CUDA_H
#define RL_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[r] = W[r,:] . x' for rows x cols weights in their GGUF layout (row_bytes apart), where
 * x' = x, or RMSNorm(x) * norm_w when norm_w != NULL; runs the production upload (repack) and
 * matvec kernel. mode 0: store; 1: y += (y holds the input residual); 2: SwiGLU of W (first
 * rows/2 rows = gate) and its second half (up), y gets rows/2 values. fast: the 8-bit
 * activation path where the type has one (rl_mv_q8), as the backend runs without --exact.
 * *kernel (when not NULL): which kernel ran it: 0 the register one (matvec.cu), 1 the streamed
 * one (mvs.cu), 2 the streamed one with bulk copies (RL_CUDA_MVB). */
int rl_cuda_test_matvec(uint32_t type, const void *w, size_t rows, size_t cols, size_t row_bytes,
                        const float *x, const float *norm_w, float eps, int mode, bool fast,
                        float *y, int *kernel, rl_err *e);
/* The same as an exact chunk of ns columns (4, 8 or 16) in one launch: x holds ns inputs of cols
 * values, y ns outputs (rows, or rows / 2 in mode 2) one after the other. */
int rl_cuda_test_matvec_chunk(uint32_t type, const void *w, size_t rows, size_t cols, size_t row_bytes,
                              const float *x, const float *norm_w, float eps, int mode, bool fast,
                              size_t ns, float *y, rl_err *e);
/* Two matrices of different types on the same input in one step, as a QKV whose V has another
 * type (store mode): y gets rows outputs of W, then rows2 of W2; *launches the kernels it took
 * (one with RL_CUDA_MVS2 where both stream and the pair is one mvs.cu takes, else one per
 * matrix). */
int rl_cuda_test_matvec_pair(uint32_t type, const void *w, size_t rows, size_t row_bytes, uint32_t type2,
                             const void *w2, size_t rows2, size_t row_bytes2, size_t cols, const float *x,
                             const float *norm_w, float eps, bool fast, float *y, int *launches, rl_err *e);
/* Whether the type's GPU matvec has the 8-bit-activation path. */
bool rl_cuda_has_q8(uint32_t type);
/* Whether the attention's split blocks can run as clusters here (RL_CUDA_ATT_MMA bit 32: sm_90
 * code on a device with cluster launch). */
bool rl_cuda_att_clusters(void);
/* The most blocks a cluster of attention splits may hold on this device, as found by the
 * contexts opened so far (16 until one finds less room; splits beyond it run without clusters). */
int rl_cuda_att_cluster_max(void);
/* The fast prefill's causal attention: n_tok queries at positions pos0.. (q: [n_tok][n_head *
 * hd] fp32, roped) over an f16 cache of pos0 + n_tok positions (kc, vc: [pos][n_head_kv * hd]
 * fp16 bits); out: [n_tok][n_head * hd] fp16 bits. mma: the tensor-core kernel where it applies
 * (*used says whether it ran), else the fp32 one. */
int rl_cuda_test_prefill_attention(const float *q, const uint16_t *kc, const uint16_t *vc, int n_head,
                                   int n_head_kv, int hd, int n_tok, int pos0, bool mma, uint16_t *out,
                                   bool *used, rl_err *e);
/* The flash decode of an exact chunk of nt tokens (4, 8 or 16) at positions pos.. (q: [nt][n_head
 * * hd] fp32; kc, vc: an f16 cache of pos + nt positions; split positions per attention split, so
 * pos + nt > split merges; max_split > 0: at most that many, the split widening past them as
 * decoding's does, 0: no widening), run once writing Wo's tensor-core input (type Q4_0 or Q8_0)
 * itself and once as the block per head followed by the chunk's staging kernel on its output:
 * *same says that the outputs and the two fragment planes are equal byte for byte. gqa: the
 * first run as the block per KV group where it applies (*used says whether it did). mma (an
 * RL_CUDA_ATT_MMA value, 0 none): both runs on tensor cores where that applies (*used; with
 * bit 32, where the split blocks run as clusters, never where rl_cuda_att_clusters() is
 * false); *same then also says that the chunk's last token is the bytes of its one-token
 * launch (with bit 32: and the output that of the same value without it), and *dist is the
 * output's max |a - b| / max |b| against the block per head (-1 where not run). The
 * device cache has 16 rows of f16 NaN past the chunk, which no kernel may read. hd % 32 == 0. */
int rl_cuda_test_att_stage(const float *q, const uint16_t *kc, const uint16_t *vc, int n_head, int n_head_kv, int hd,
                           int nt, int pos, int split, int max_split, uint32_t type, bool gqa, int mma, bool *used,
                           bool *same, double *dist, rl_err *e);
/* The tensor-core flash decode over a q8 cache (--kv-type q8): the f16 cache kc / vc quantized
 * on the host to int8 codes with a scale per 32 values (as the CPU's q8 cache, d = amax / 127
 * and round-half-even), an exact chunk of nt tokens at pos (split, max_split as above) under mma (an
 * RL_CUDA_ATT_MMA value): *used says whether the tensor-core kernel ran, *cl whether the
 * chunk's last token alone (decoding's launch) ran as clusters; *same that this one-token launch
 * gives the bytes of the chunk's last token (whose splits merge by the ticket unless bit 64);
 * *dist the output's max |a - b| / max |b| against the block per head over the same q8 cache
 * (-1 where not run). The device cache has 16 rows past the chunk whose scales are NaN, which
 * no kernel may read. hd % 32 == 0. */
int rl_cuda_test_att_q8(const float *q, const uint16_t *kc, const uint16_t *vc, int n_head, int n_head_kv, int hd,
                        int nt, int pos, int split, int max_split, int mma, bool *used, bool *cl, bool *same,
                        double *dist, rl_err *e);
/* Index of the first maximum of v[0..n) computed on the GPU. */
int rl_cuda_test_argmax(const float *v, size_t n, int32_t *out, rl_err *e);

/* For an open CUDA backend (rl_backend.impl): the greedy argmax of the last forward (computed
 * on the GPU, first max wins). */
int32_t rl_cuda_last_argmax(void *impl);

#ifdef __cplusplus
}
#endif

#endif
