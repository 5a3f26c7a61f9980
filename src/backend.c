#include "backend.h"
#include "types.h"

#include <stdio.h>
#include <string.h>

#include "cpu.h"
#include "membw.h"
#include "quant.h"

static void cpu_free(void *impl) { rl_cpu_free(impl); }
static size_t cpu_n_ctx(const void *impl) { return rl_cpu_n_ctx(impl); }
static size_t cpu_kv(const void *impl, size_t pos) { return rl_cpu_kv_read_bytes(impl, pos); }
static int cpu_forward(void *impl, const int32_t *t, size_t S, size_t pos, float *lg, bool all,
                       rl_err *e) {
    return rl_cpu_forward(impl, t, S, pos, lg, all, e);
}
static double cpu_ceiling(void *impl) {
    return rl_measure_read_gbps(rl_cpu_n_threads(impl), (size_t)1 << 30, 5);
}

static int cpu_profile(void *impl, bool on, rl_err *e) {
    (void)e;
    rl_cpu_profile(impl, on);
    return 0;
}
static size_t cpu_profile_rows(void *impl, rl_prof_row *rows, size_t cap) {
    return rl_cpu_profile_rows(impl, rows, cap);
}

static const rl_backend_ops k_cpu_ops = {cpu_free, cpu_n_ctx, cpu_kv, cpu_forward, cpu_ceiling, cpu_profile,
                                         cpu_profile_rows, NULL};

int rl_device_parse(const char *s, enum rl_device *out) {
    if (!strcmp(s, "cpu")) *out = RL_DEVICE_CPU;
    else if (!strcmp(s, "cuda") || !strcmp(s, "gpu")) *out = RL_DEVICE_CUDA;
    else if (!strcmp(s, "auto")) *out = RL_DEVICE_AUTO;
    else return -1;
    return 0;
}

#ifndef RL_HAVE_CUDA
int rl_cuda_open(rl_backend *b, const rl_model *m, const rl_backend_opts *o, rl_err *e) {
    return rl_fail(e, "this rawloop was built without CUDA (nvcc was not found at build time); "
                   "use --device cpu");
}
bool rl_cuda_device_present(void) { return false; }
bool rl_cuda_runs_type(uint32_t type) { return false; }
#endif

/* The first matrix type of m the GPU has no kernels for, or UINT32_MAX. */
static uint32_t gpu_missing_type(const rl_model *m) {
    if (!rl_cuda_runs_type(m->tok_embd.type)) return m->tok_embd.type;
    if (!rl_cuda_runs_type(m->output.type)) return m->output.type;
    for (size_t l = 0; l < m->cfg.n_layer; l++) {
        const rl_layer *L = &m->layers[l];
        const rl_matrix *w[RL_LAYER_MATRIX_COUNT] = RL_LAYER_MATRICES(L);
        for (size_t i = 0; i < sizeof w / sizeof *w; i++)
            if (!rl_cuda_runs_type(w[i]->type)) return w[i]->type;
    }
    return UINT32_MAX;
}

int rl_backend_open(rl_backend *b, const rl_model *m, const rl_backend_opts *o, rl_err *e) {
    memset(b, 0, sizeof *b);
    enum rl_device d = o->device;
    uint32_t missing = UINT32_MAX;
    if (d == RL_DEVICE_AUTO) {
        d = rl_cuda_device_present() ? RL_DEVICE_CUDA : RL_DEVICE_CPU;
        if (d == RL_DEVICE_CUDA && (missing = gpu_missing_type(m)) != UINT32_MAX) d = RL_DEVICE_CPU;
    }
    if (d == RL_DEVICE_CUDA) return rl_cuda_open(b, m, o, e);
    if (o->prefill == RL_PREFILL_FAST)
        return rl_fail(e, "--prefill fast is GPU-only: the CPU's prompts already run in batches "
                       "with decoding's arithmetic (use --prefill exact or leave it out)");
    rl_cpu_opts co = {.n_threads = o->n_threads, .n_ctx = o->n_ctx, .max_batch = o->max_batch,
                      .exact = o->exact, .kv_type = o->kv_type};
    rl_cpu *c;
    if (rl_cpu_new(&c, m, &co, e) < 0) return -1;
    b->ops = &k_cpu_ops;
    b->impl = c;
    b->device = RL_DEVICE_CPU;
    b->n_threads = rl_cpu_n_threads(c);
    b->repacked_bytes = rl_cpu_packed_bytes(c);
    /* the fast path rounds activations only for quantized weights: a float model is fp32 */
    b->numerics = o->exact ? "exact fp32 activations"
                  : rl_type_is_float(m->main_type) ? "fp32 activations (float weights)"
                  : rl_type_fp32_act(m->main_type) ? "fp32 activations (FP8 weights)"
                                                   : "8-bit activations for quantized weights";
    if (missing != UINT32_MAX) /* said wherever the backend is named (run, bench, perplexity) */
        snprintf(b->name, sizeof b->name, "cpu-%s (auto: the GPU has no verified %s kernels)", rl_simd_name(),
                 rl_type_name(missing));
    else
        snprintf(b->name, sizeof b->name, "cpu-%s", rl_simd_name());
    snprintf(b->prefill, sizeof b->prefill, "exact: batches of up to %zu tokens, bit-identical "
             "to decoding them one at a time", rl_cpu_max_batch(c));
    return 0;
}

void rl_backend_close(rl_backend *b) {
    if (b->ops) b->ops->free(b->impl);
    memset(b, 0, sizeof *b);
}
