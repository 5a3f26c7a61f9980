/* CPU backend: the forward pass over a batch of S tokens with an f16 (or f32, or 8-bit) KV cache. */
#ifndef RL_CPU_H
#define RL_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "err.h"
#include "model.h"

typedef struct rl_cpu_opts {
    size_t n_threads;  /* 0 = number of online CPUs */
    size_t n_ctx;      /* KV cache capacity in tokens; 0 = min(model context, 4096) */
    size_t max_batch;  /* tokens per forward chunk; 0 = 64 */
    bool exact;        /* fp32 activations everywhere (no 8-bit activation fast path) */
    int kv_type;       /* enum rl_kv_type (backend.h): f16, f32 (fp32 oracle tests) or q8 */
    /* Calibration hook, or NULL: called with the fp32 input x[S][n] of the matmuls of weight
     * RL_CPU_MAT(layer, k) (or RL_CPU_MAT_OUTPUT) right before they run. Matrices that share
     * one input are reported once, under the first: Q for Q/K/V, gate for gate/up. */
    void (*observe)(void *ctx, size_t mat, const float *x, size_t S, size_t n);
    void *observe_ctx;
} rl_cpu_opts;

/* Matrix numbering of the observe hook: k = 0..6 for wq, wk, wv, wo, w_gate, w_up, w_down of
 * layer l; the output head after the last layer. */
#define RL_CPU_MAT(l, k) ((size_t)(l) * 7 + (size_t)(k))
#define RL_CPU_MAT_OUTPUT(n_layer) ((size_t)(n_layer) * 7)

typedef struct rl_cpu rl_cpu;

int rl_cpu_new(rl_cpu **out, const rl_model *m, const rl_cpu_opts *o, rl_err *e);
void rl_cpu_free(rl_cpu *c);
size_t rl_cpu_n_ctx(const rl_cpu *c);
size_t rl_cpu_n_threads(const rl_cpu *c);
/* Tokens per forward chunk (prompts run in chunks of this many). */
size_t rl_cpu_max_batch(const rl_cpu *c);
/* Extra memory held by weights repacked at load for the fast kernels (0 on the exact path). */
size_t rl_cpu_packed_bytes(const rl_cpu *c);
/* Bytes one decode step at position pos reads from the KV cache. */
size_t rl_cpu_kv_read_bytes(const rl_cpu *c, size_t pos);
/* Per-step profile (bench --profile): on clears the table and times every step of the forward
 * calls that follow by the wall clock (each step ends when its threads are done); rows copies
 * up to cap rows and returns the count. */
void rl_cpu_profile(rl_cpu *c, bool on);
size_t rl_cpu_profile_rows(const rl_cpu *c, rl_prof_row *rows, size_t cap);

/* Feeds tokens[0..S) at positions pos..pos+S-1, filling the KV cache. Writes logits of every
 * token ([S][n_vocab]) when all_logits, else only of the last one ([n_vocab]); logits may be
 * NULL to skip the output head. Fails when pos + S exceeds the context or an id is out of
 * range; the cache is left as it was before the call's first bad position. */
int rl_cpu_forward(rl_cpu *c, const int32_t *tokens, size_t S, size_t pos, float *logits,
                   bool all_logits, rl_err *e);

#endif
