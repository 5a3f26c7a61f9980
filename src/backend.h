/* A backend runs the forward pass of a bound model: the CPU (cpu.c) or, when rawloop was built
 * with nvcc and a GPU is present, CUDA (src/cuda/). The CLI talks only to this interface. */
#ifndef RL_BACKEND_H
#define RL_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "model.h"

enum rl_device { RL_DEVICE_AUTO, RL_DEVICE_CPU, RL_DEVICE_CUDA };

/* KV cache element: f16 (default), f32 (the fp32 oracle tests), or 8-bit blocks of 32 values
 * with an fp32 scale (36 bytes per 32: 0.56x of f16), rounded like the fast path's activations. */
enum rl_kv_type { RL_KV_F16, RL_KV_F32, RL_KV_Q8 };

/* How a forward call of several tokens (a prompt) runs. EXACT: logits bit-identical to decoding
 * the same tokens one at a time. FAST (GPU): tensor-core GEMMs over fp16 weights and
 * activations, the same quality class as decoding but not the same bits. AUTO: FAST on the GPU
 * unless --exact, EXACT on the CPU (whose batched prefill already keeps decoding's numerics). */
enum rl_prefill { RL_PREFILL_AUTO, RL_PREFILL_EXACT, RL_PREFILL_FAST };

typedef struct rl_backend_opts {
    enum rl_device device;
    size_t n_threads;  /* CPU threads; 0 = all cores */
    size_t n_ctx;      /* KV capacity in tokens; 0 = min(model context, 4096) */
    size_t max_batch;  /* tokens per forward chunk; 0 = backend default */
    bool exact;        /* CPU: fp32 activations everywhere */
    int kv_type;       /* enum rl_kv_type; f32 is CPU-only */
    int prefill;       /* enum rl_prefill */
} rl_backend_opts;

/* One line of a per-kernel profile: a step of the forward pass (one or a few kernels), its
 * summed time over the profiled tokens and the bytes it had to read in that time. */
typedef struct rl_prof_row {
    char name[24];
    size_t calls;  /* launches of this step over the profiled tokens */
    double us;     /* summed GPU time, microseconds */
    double bytes;  /* summed bytes the step reads (weights; KV for attention; 0 where not
                      counted); the fast prefill's fp16 expansion: read plus written */
} rl_prof_row;

/* Adds one call of step `name` (us, bytes) to the table rows[0..*n) of at most cap rows: to its
 * row, or to a new one at the end; a step past cap rows is dropped. Both backends' profiles. */
static inline void rl_prof_add(rl_prof_row *rows, size_t *n, size_t cap, const char *name, double us,
                               double bytes) {
    size_t r = 0;
    while (r < *n && strcmp(rows[r].name, name)) r++;
    if (r == *n) {
        if (r == cap) return;
        memset(&rows[r], 0, sizeof rows[r]);
        snprintf(rows[r].name, sizeof rows[r].name, "%s", name);
        (*n)++;
    }
    rows[r].calls++;
    rows[r].us += us;
    rows[r].bytes += bytes;
}

/* What a backend implementation provides (cpu.c, src/cuda/). */
typedef struct rl_backend_ops {
    void (*free)(void *impl);
    size_t (*n_ctx)(const void *impl);
    size_t (*kv_read_bytes)(const void *impl, size_t pos);
    int (*forward)(void *impl, const int32_t *tokens, size_t S, size_t pos, float *logits,
                   bool all_logits, rl_err *e);
    double (*read_ceiling_gbps)(void *impl); /* the device's own read-stream bandwidth */
    /* Per-kernel profile (NULL where the backend has none): profile(impl, true) clears the
     * table and times every step of the following forward calls (slower: for reports only):
     * decoding's steps, or a GPU fast prefill's for a call of several tokens; profile(impl,
     * false) stops. profile_rows copies up to cap rows; returns the count. */
    int (*profile)(void *impl, bool on, rl_err *e);
    size_t (*profile_rows)(void *impl, rl_prof_row *rows, size_t cap);
    /* Kernel launches of the largest exact prompt chunk run so far (its tokens in *tokens);
     * 0 where none has run or the backend launches no kernels (NULL: the CPU). rl_backend's
     * `launches` is decoding's, one token. */
    size_t (*chunk_launches)(const void *impl, size_t *tokens);
} rl_backend_ops;

typedef struct rl_backend {
    const rl_backend_ops *ops;
    void *impl;
    enum rl_device device;
    size_t n_threads;
    size_t repacked_bytes; /* host weights copied into a kernel-friendly layout at load */
    size_t launches;       /* GPU kernel launches per decoded token (0: the CPU, which has none) */
    const char *numerics;  /* what the arithmetic is, for reports: "8-bit activations", ... */
    char prefill[256];     /* how prompts run, for reports: "exact: ...", "fast: ..." */
    char name[128]; /* "cpu-avx2", "cuda NVIDIA H200" */
} rl_backend;

int rl_backend_open(rl_backend *b, const rl_model *m, const rl_backend_opts *o, rl_err *e);
void rl_backend_close(rl_backend *b);

static inline int rl_backend_forward(rl_backend *b, const int32_t *tokens, size_t S, size_t pos,
                                     float *logits, bool all_logits, rl_err *e) {
    return b->ops->forward(b->impl, tokens, S, pos, logits, all_logits, e);
}
static inline size_t rl_backend_n_ctx(const rl_backend *b) { return b->ops->n_ctx(b->impl); }
static inline size_t rl_backend_kv_read_bytes(const rl_backend *b, size_t pos) {
    return b->ops->kv_read_bytes(b->impl, pos);
}

/* Parses "cpu" / "cuda" / "auto"; -1 on anything else. */
int rl_device_parse(const char *s, enum rl_device *out);
/* Implemented in src/cuda/ when built with nvcc (RL_HAVE_CUDA); without it, rl_cuda_open fails
 * with a message and rl_cuda_device_present (what --device auto asks) is false. */
int rl_cuda_open(rl_backend *b, const rl_model *m, const rl_backend_opts *o, rl_err *e);
bool rl_cuda_device_present(void);
/* Whether the CUDA backend has kernels for a weight type that have passed its device tests
 * (false without CUDA): --device auto runs a model with any other matrix type on the CPU.
 * --device cuda also runs a type whose kernels are built but not yet verified (none now). */
bool rl_cuda_runs_type(uint32_t type);

#endif
