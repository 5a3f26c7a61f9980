/* The CUDA backend: one device arena for the weights (uploaded once), one for activations and
 * the f16 KV cache, and a forward pass captured once into a CUDA graph that reads the token
 * and position from device memory. A decode step is then: one 8-byte copy, one graph launch,
 * one copy of the logits when the caller asks for them. Prompts run through the same graph
 * one token at a time, so prefill logits are bit-identical to decoding (v1; chunked prefill
 * kernels are future work). See docs/CUDA.md. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

extern "C" {
#include "backend.h"
#include "quant.h"
#include "types.h"
}
#include "kernels.h"
#include "rl_cuda.h"

struct dlayer {
    rl_dmat wq, wk, wv, wo, wg, wu, wd;
    const float *attn_norm, *ffn_norm, *bq, *bk, *bv, *q_norm, *k_norm;
};

/* --profile's timing events: one after every step; step i ran between ev[i] and ev[i + 1]. */
struct prof_marks {
    int n, cap;
    cudaEvent_t *ev;     /* [cap + 1] */
    const char **label;  /* [cap] step names (static strings) */
    double *bytes;       /* [cap] bytes read; < 0: the layer's KV cache at pos */
};

/* an exact chunk's graphs by its tokens' attention splits: at most 1, 2, 4, 8, 16, or any */
#define CHUNK_BANDS 6

struct rl_cuda {
    const rl_model *m;
    int n_sm;
    size_t n_ctx, q_dim, kv_dim, max_n;
    int n_split, split_max; /* attention splits per head (at most the knob's cap), widest split */
    rl_cuda_knobs knobs;
    bool fast;        /* 8-bit activations where the weight type has them (not --exact) */
    uint8_t *warena;  /* weights, read-only after upload */
    size_t wbytes, woff;
    uint8_t *aarena;  /* activations, partials, KV cache */
    size_t abytes;
    dlayer *lay;      /* [n_layer] */
    rl_dmat emb, out;
    const float *out_norm, *inv_freq;
    /* activations of up to RL_CHUNK_MAX tokens (an exact chunk; decoding uses token 0) */
    float *x;         /* [chunk][n_embd] residual stream */
    float *q, *k, *v; /* in qkv: [chunk][q_dim | kv_dim | kv_dim], qkv_dim apart */
    size_t qkv_dim;   /* q_dim + 2 kv_dim */
    float *att;       /* [chunk][q_dim] attention output */
    float *hb;        /* [chunk][n_ff] silu(gate) * up */
    float *logits;    /* [chunk][n_vocab] */
    float *part;      /* [chunk][n_head][n_split][head_dim + 2] */
    int *count;       /* [chunk][n_head] attention split tickets */
    void *mvs;        /* the chunk matvecs' scratch (rl_mv_scratch_bytes) */
    size_t chunk_max; /* tokens per exact launch at most: 16, or -b's 1/4/8 */
    /* exact chunks of 4, 8, 16 tokens, captured at first use: [0] the LM head on the last
     * token only (a prompt), [1] on every token (all-logits calls); [band]: for chunks whose
     * tokens have at most 1, 2, 4, 8, 16 attention splits, or any number (chunk_band) */
    cudaGraphExec_t cgraph[2][3][CHUNK_BANDS];
    size_t chunk_launches[3]; /* launches of a chunk of 4, 8, 16 tokens, once its graph exists */
    uint8_t *kc, *vc; /* [n_layer][n_ctx][kv_dim]: f16, or int8 with --kv-type q8 */
    float *kd, *vd;   /* q8: the scales, [n_layer][n_ctx][kv_dim / 32]; else NULL */
    bool kv_q8;
    rl_cuda_io *io;
    int32_t *amax;
    rl_cuda_io *h_io; /* pinned [n_ctx]: one slot per position, so queued copies never alias */
    float *h_logits;  /* pinned [n_vocab] */
    int32_t *h_amax;  /* pinned */
    cudaStream_t st;
    cudaGraphExec_t graph; /* one token */
    /* one token whose position has at most 1, 2, 4, 8, 16 attention splits (RL_CUDA_ATT_BANDS),
     * captured at first use: the grid holds no idle split blocks, and clusters fit it */
    cudaGraphExec_t dgraph[CHUNK_BANDS - 1];
    /* the one-token graph's kernels, as its report gives them; capturing other graphs
     * (chunks, the profile) saves and restores them */
    struct {
        size_t launches;
        size_t streamed; /* of them, streamed matvecs (mvs.cu) */
        size_t bulked;   /* of those, with bulk copies (RL_CUDA_MVB) */
    } n;
    /* decoding's layers in one persistent kernel (persist.cu) where it applies */
    bool pk_on;
    rl_pk_plan pk;
    rl_pk_layer *pk_lay; /* [n_layer] device copy of the layers' arguments */
    unsigned long long *pk_bar;   /* its grid barrier's counter, zeroed at open */
    unsigned long long *pk_trace; /* RL_CUDA_PERSIST_TRACE: the last token's barrier times */
    char *pk_trace_file;          /* a copy of the variable's value when the trace was set up */
    char pk_why[200];             /* why it is off */
    /* --profile: a second graph with a timing event after every step (marks); a fast prefill
     * records the same events on its stream while profiling (pf_marks) */
    bool prof_on, prof_cap, pf_marks;
    cudaGraphExec_t pgraph;
    prof_marks gm, pm;     /* the profile graph's marks; the profiled fast prefill's */
    rl_prof_row prow[16];
    size_t n_prow;
    /* fast prefill (prefill_fast): cuBLAS, and buffers for chunks of pf_chunk tokens, made at
     * the first prompt (pf*), the [chunk][n_vocab] logits only when all of them are asked for */
    rl_gemm *gemm;    /* NULL: prompts run token by token through the graph (exact) */
    size_t pf_chunk, pw16_elems;
    uint8_t *parena;
    int32_t *ptok;    /* [chunk] */
    float *px;        /* [chunk][n_embd] residual stream */
    float *pqkv;      /* [chunk][q_dim + 2 kv_dim] */
    float *pgu;       /* [chunk][2 n_ff] gate | up */
    float *plg;       /* [plg_rows][n_vocab]: all-logits calls, a group of tokens at a time */
    size_t plg_rows;
    __half *pa16;     /* [chunk][max(n_embd, q_dim, n_ff)] GEMM input */
    __half *patt;     /* [chunk][q_dim] attention output */
    __half *pw16;     /* [pw16_elems] one GEMM's weights (q|k|v, gate|up, ...) or an LM-head slab in fp16 */
    float2 *prope;    /* [chunk][rope_dim / 2] the chunk's RoPE (cos, sin) */
};

/* Ends a profiled step: in the profile graph's capture a graph node, in a profiled fast prefill
 * an event on the stream; a no-op otherwise. */
static void mark(rl_cuda *c, const char *label, double bytes) {
    prof_marks *m = c->prof_cap ? &c->gm : c->pf_marks ? &c->pm : NULL;
    if (!m || m->n >= m->cap) return;
    m->label[m->n] = label;
    m->bytes[m->n] = bytes;
    if (c->prof_cap) cudaEventRecordWithFlags(m->ev[++m->n], c->st, cudaEventRecordExternal);
    else cudaEventRecord(m->ev[++m->n], c->st);
}

static double dmat_bytes(const rl_dmat *w) { return (double)w->rows * (double)(w->q_row + w->s_row); }

#define CK(call)                                                                                \
    do {                                                                                        \
        cudaError_t err_ = (call);                                                              \
        if (err_ != cudaSuccess)                                                                \
            return rl_fail(e, "CUDA: %s failed: %s (%s)", #call, cudaGetErrorName(err_),         \
                           cudaGetErrorString(err_));                                           \
    } while (0)

static size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

/* ---- knobs --------------------------------------------------------------------------------- */

static int knob(const char *name, int def, int lo, int hi, int *out, rl_err *e) {
    const char *s = getenv(name);
    *out = def;
    if (!s || !*s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi)
        return rl_fail(e, "%s=%s: expected an integer in [%d, %d]", name, s, lo, hi);
    *out = (int)v;
    return 0;
}

/* Warps per matvec block when RL_CUDA_MV_WARPS is unset. Each block stages (and normalises,
 * and rounds to int8) the whole input in its prologue, so fewer, larger blocks repeat that work
 * fewer times per SM; it pays where the input is long and costs where it is short (H200,
 * tg128, docs/PERF.md v2.3: 16 warps vs 8 at n_embd 4096: 7B Q4_0 466 vs 438, F16 232 vs 225,
 * Llama-3-8B Q4_0 426 vs 397; at 2048, TinyLlama Q4_0 1271 vs 1273, F16 830 vs 870). */
static int mv_warps_for(size_t n_embd) { return n_embd >= 4096 ? 16 : 8; }

/* Which weight types decoding's matvec streams (mvs.cu) when RL_CUDA_MVS is unset: 1 all the
 * plane types, 2 the 8-bit-or-less ones only (Q4_0, Q8_0, FP8, RQ2, RQ4). With PDL on the streamed launches (H200, tg128,
 * docs/PERF.md v2.4): TinyLlama F16 +15% streamed, Llama-2-7B F16 -8% (its 16-bit rings leave
 * 13-16 warps per SM where the register kernel has 32); Q4_0/Q8_0 gain at both sizes. */
static int mvs_for(size_t n_embd) { return n_embd >= 4096 ? 2 : 1; }

/* The exact chunk's layout (mvx.cu) when RL_CUDA_MVX_RES is unset: residues where the input is
 * short enough that the tree weighs on a tile of two rounds (an H100, S = 16, docs/PERF.md
 * v2.33: TinyLlama Q4_0 +10%, Q8_0 +8%; at n_embd 4096 7B Q4_0 -2%, 8B Q4_0 -4%, 7B Q8_0
 * -3.6%). */
static int mvx_res_for(size_t n_embd) { return n_embd <= 2048 ? 1 : 0; }

static int read_knobs(rl_cuda_knobs *k, rl_err *e) {
    if (knob("RL_CUDA_MV_WARPS", 0, 0, 16, &k->mv_warps, e) || /* 0: mv_warps_for */
        knob("RL_CUDA_MV_BLOCKS", 8, 1, 64, &k->mv_blocks_per_sm, e) ||
        /* 128 positions per split: one split (no merge) while decoding the first 128 positions
         * (docs/PERF.md v2.9); at most 20 splits, widened in steps of 128 past 2560 positions
         * (v2.10: against 16 and 32, +1-4% at depth 2048 and 4096; the grid holds max_split
         * blocks per head, and idle ones cost: 32 lost 5% at depth 4096), or 16 where the
         * clusters run (v2.39: TinyLlama +4% at depth 4096 without them, and a cluster holds 16) */
        knob("RL_CUDA_ATT_SPLIT", 128, 32, 8192, &k->att_split, e) ||
        knob("RL_CUDA_ATT_MAXSPLIT", -1, 1, 1024, &k->att_max_split, e) || /* unset: open_impl */
        /* RL_CUDA_PDL 2: the launches that copy weights before they wait (docs/CUDA.md) */
        knob("RL_CUDA_PDL", 2, 0, 2, &k->pdl, e) ||
        knob("RL_CUDA_ROPE_FOLD", 1, 0, 1, &k->rope_fold, e) ||
        knob("RL_CUDA_RQ2_LUT", 0, 0, 1, &k->rq2_lut, e) || /* RQ2 decoder: docs/CUDA.md */
        knob("RL_CUDA_MVS", -1, 0, 2, &k->mvs, e) || /* streamed matvec (mvs.cu); unset: mvs_for */
        knob("RL_CUDA_MVS2", 1, 0, 1, &k->mvs2, e) || /* a mixed-type QKV in one streamed launch (mvs.cu) */
        knob("RL_CUDA_MVB", 0, 0, 1, &k->mvb, e) || /* bulk copies into the streamed matvec (mvs.cuh) */
        knob("RL_CUDA_MVB_PAGE", 8, 1, 64, &k->mvb_page, e) ||
        knob("RL_CUDA_MVB_SLOTS", 64, 2, 64, &k->mvb_slots, e) ||
        knob("RL_CUDA_MVX", 1, 0, 1, &k->mvx, e) || /* exact chunks on tensor cores (mvx.cu) */
        knob("RL_CUDA_ATT_STAGE", 1, 0, 1, &k->att_stage, e) || /* Wo's chunk input from the flash decode */
        /* a chunk's attention per KV group (attention.cu) above 16 splits x heads a group (H100,
         * docs/PERF.md v2.35: TinyLlama from 3 splits, Llama-3-8B from 5) */
        knob("RL_CUDA_ATT_GQA", 16, 0, 1 << 20, &k->att_gqa, e) ||
        /* a KV group's heads on tensor cores (attention.cu), grouped heads only unless bit 16 (H100,
         * docs/PERF.md v2.38: TinyLlama and 8B +4-7% at depth 4096 and S=16, Llama-2-7B's plain
         * heads -4% and -10%); decoding's split blocks as one cluster (32; v2.39: at depth 1024
         * and 4096 TinyLlama +8-10%, 8B +4%; in chunks too, 64, S=16 lost 1%; the block per
         * head's, once 128, lost 6-13% at depth 4096 and was removed, v2.40) */
        knob("RL_CUDA_ATT_MMA", 33, 0, 127, &k->att_mma, e) ||
        knob("RL_CUDA_ATT_BANDS", 1, 0, 1, &k->att_bands, e) || /* decoding's graphs by splits (dgraph) */
        knob("RL_CUDA_ATT_PDL_BAND", 0, 0, 1024, &k->att_pdl_band, e) || /* enqueue */
        knob("RL_CUDA_MVX_STAGE8", 1, 0, 1, &k->mvx_stage8, e) || /* 8-warp staging of a chunk input without a norm */
        knob("RL_CUDA_MVX_RES", -1, 0, 1, &k->mvx_res, e) || /* the exact chunk's layout; unset: mvx_res_for */
        knob("RL_CUDA_PF_MMA", 1, 0, 1, &k->pf_mma, e) || /* the fast prefill's attention (attention.cu) */
        knob("RL_CUDA_PF_ROPE_TAB", 1, 0, 1, &k->pf_rope_tab, e) || /* its RoPE angles (attention.cu) */
        knob("RL_CUDA_PERSIST", 0, 0, 1, &k->persist, e)) /* persist.cu: off unless asked (docs/PERF.md v2.5) */
        return -1;
    return 0;
}

/* ---- upload ---------------------------------------------------------------------------------- */

/* Two passes over the same code: plan (arena == NULL: sizes only) and copy. */
static int put_bytes(rl_cuda *c, const void *src, size_t n, const uint8_t **dst, rl_err *e) {
    size_t off = c->woff;
    c->woff = align256(off + n);
    if (!c->warena) return 0;
    *dst = c->warena + off;
    CK(cudaMemcpy(c->warena + off, src, n, cudaMemcpyHostToDevice));
    return 0;
}

static int put_vec(rl_cuda *c, const float *src, size_t n, const float **dst, rl_err *e) {
    if (!src) {
        *dst = NULL;
        return 0;
    }
    const uint8_t *p = NULL;
    if (put_bytes(c, src, n * sizeof(float), &p, e)) return -1;
    *dst = (const float *)p;
    return 0;
}

static int put_mat(rl_cuda *c, const rl_matrix *w, rl_dmat *d, const char *what, rl_err *e) {
    /* whole blocks, and at least 32-value chunks (the float types); a type the CPU gains is not run here silently */
    const size_t blck = rl_mv_type_ok(w->type) ? rl_type_get(w->type)->blck : 1;
    if (!rl_mv_type_ok(w->type) || w->cols % (blck > 32 ? blck : 32))
        return rl_fail(e, "CUDA: %s: type %s with %zu columns is not supported on the GPU (--device cpu runs it)",
                       what, rl_type_name(w->type), w->cols);
    size_t qb, sb;
    rl_dmat_sizes(w->type, w->rows, w->cols, w->row_bytes, &qb, &sb);
    d->type = w->type;
    d->rows = (int)w->rows;
    d->cols = (int)w->cols;
    d->s = NULL;
    if (!rl_dmat_repacked(w->type)) {
        d->q_row = w->row_bytes;
        d->s_row = 0;
        return put_bytes(c, w->data, qb, &d->q, e);
    }
    d->q_row = qb / w->rows;
    d->s_row = sb / w->rows;
    if (!c->warena) {
        c->woff = align256(align256(c->woff + qb) + sb);
        return 0;
    }
    uint8_t *tmp = (uint8_t *)malloc(qb + sb);
    if (!tmp) return rl_fail(e, "CUDA: out of host memory repacking %s (%.1f MB)", what, (qb + sb) / 1e6);
    rl_dmat_repack(w->type, (const uint8_t *)w->data, w->rows, w->cols, w->row_bytes, tmp, tmp + qb);
    int rc = put_bytes(c, tmp, qb, &d->q, e);
    if (!rc) rc = put_bytes(c, tmp + qb, sb, &d->s, e);
    free(tmp);
    return rc;
}

static int upload_pass(rl_cuda *c, const float *inv_freq, rl_err *e) {
    const rl_model *m = c->m;
    const rl_config *cfg = &m->cfg;
    c->woff = 0;
    char what[64];
    if (put_mat(c, &m->tok_embd, &c->emb, "token_embd.weight", e)) return -1;
    if (m->tied_output) c->out = c->emb;
    else if (put_mat(c, &m->output, &c->out, "output.weight", e)) return -1;
    if (put_vec(c, m->output_norm, cfg->n_embd, &c->out_norm, e)) return -1;
    if (put_vec(c, inv_freq, cfg->rope_dim / 2, &c->inv_freq, e)) return -1;
    for (size_t l = 0; l < cfg->n_layer; l++) {
        const rl_layer *L = &m->layers[l];
        dlayer *D = &c->lay[l];
        const rl_matrix *src[RL_LAYER_MATRIX_COUNT] = RL_LAYER_MATRICES(L);
        rl_dmat *dst[RL_LAYER_MATRIX_COUNT] = {&D->wq, &D->wk, &D->wv, &D->wo, &D->wg, &D->wu, &D->wd};
        for (int i = 0; i < RL_LAYER_MATRIX_COUNT; i++) {
            snprintf(what, sizeof what, "layer %zu matrix %d", l, i);
            if (put_mat(c, src[i], dst[i], what, e)) return -1;
        }
        if (put_vec(c, L->attn_norm, cfg->n_embd, &D->attn_norm, e) ||
            put_vec(c, L->ffn_norm, cfg->n_embd, &D->ffn_norm, e) ||
            put_vec(c, L->bq, c->q_dim, &D->bq, e) || put_vec(c, L->bk, c->kv_dim, &D->bk, e) ||
            put_vec(c, L->bv, c->kv_dim, &D->bv, e) ||
            put_vec(c, L->q_norm, cfg->head_dim, &D->q_norm, e) ||
            put_vec(c, L->k_norm, cfg->head_dim, &D->k_norm, e))
            return -1;
    }
    return 0;
}

static int dev_alloc(void **p, size_t n, const char *what, rl_err *e) {
    cudaError_t err = cudaMalloc(p, n);
    if (err == cudaSuccess) return 0;
    cudaGetLastError();
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    return rl_fail(e, "CUDA: cannot allocate %.3f GB for %s (%.3f GB free of %.3f GB): %s", n / 1e9,
                   what, fr / 1e9, tot / 1e9, cudaGetErrorString(err));
}

/* ---- the forward pass of ns tokens (enqueued once per ns, under graph capture) -----------------
 * ns = 1 is decoding; ns = 4, 8, 16 an exact chunk, whose kernels compute every token's values
 * with the one-token kernels' arithmetic (so its logits are decoding's, bit for bit). */

/* One matvec step of the token: launched, and counted (kernels; streamed ones). */
static void mv_go(rl_cuda *c, const rl_mv_args *a, int *rc) {
    rl_mv_count m = {0, 0};
    int k = rl_mv_launch(a, &c->knobs, c->n_sm, c->st, &m);
    if (k < 0) *rc = -1;
    else c->n.launches += (size_t)k;
    c->n.streamed += m.streamed;
    c->n.bulked += m.bulked;
}

/* The arguments of a one-matrix matvec: y (mode) W · x, x RMS-normalised first with norm_w. */
static void mv_args1(const rl_cuda *c, rl_mv_args *a, const rl_dmat *w, float *y, int mode, const float *x,
                     const float *norm_w, int n, int ns, int ys) {
    memset(a, 0, sizeof *a);
    a->ns = ns;
    a->ys = ys;
    a->scratch = c->mvs;
    a->seg[0].w = *w;
    a->seg[0].y = y;
    a->nseg = 1;
    a->mode = mode;
    a->x = x;
    a->norm_w = norm_w;
    a->eps = c->m->cfg.norm_eps;
    a->n = n;
    a->fast = c->fast;
}

static void seg(rl_mv_seg *s, const rl_dmat *w, const float *bias, float *y, uint16_t *y16, bool rope) {
    s->w = *w;
    s->bias = bias;
    s->y = y;
    s->y16 = y16;
    s->rope = rope;
}

/* Whether layer l's RoPE and K/V write fold into its QKV epilogue: llama rotation into an f16
 * cache; q/k norms (qwen3) and neox rotation keep the separate rope_kv launch. */
static bool rope_folds(const rl_cuda *c, size_t l) {
    return c->knobs.rope_fold && !c->m->cfg.rope_neox && !c->lay[l].q_norm && !c->lay[l].k_norm && !c->kv_q8;
}

/* The attention arguments every use shares: layer l's cache, norms and the model's shape. */
static void att_layer(const rl_cuda *c, size_t l, rl_att_args *t) {
    const rl_config *cfg = &c->m->cfg;
    const dlayer *L = &c->lay[l];
    memset(t, 0, sizeof *t);
    const size_t cells = l * c->n_ctx * c->kv_dim, es = c->kv_q8 ? 1 : 2;
    t->kc = (uint16_t *)(c->kc + cells * es);
    t->vc = (uint16_t *)(c->vc + cells * es);
    t->kd = c->kv_q8 ? c->kd + cells / 32 : NULL;
    t->vd = c->kv_q8 ? c->vd + cells / 32 : NULL;
    t->q_norm = L->q_norm;
    t->k_norm = L->k_norm;
    t->inv_freq = c->inv_freq;
    t->n_head = (int)cfg->n_head;
    t->n_head_kv = (int)cfg->n_head_kv;
    t->hd = (int)cfg->head_dim;
    t->rope_dim = (int)cfg->rope_dim;
    t->n_ctx = (int)c->n_ctx;
    t->neox = cfg->rope_neox;
    t->eps = cfg->norm_eps;
}

/* Every argument of layer l's steps for ns tokens (the launches' and the persistent kernel's);
 * splits: a chunk graph's band, its tokens' most attention splits (0: decoding, no cap). */
static void layer_args(const rl_cuda *c, size_t l, int ns, int splits, rl_pk_layer *P) {
    const rl_config *cfg = &c->m->cfg;
    const dlayer *L = &c->lay[l];
    const int D = (int)cfg->n_embd, F = (int)cfg->n_ff;
    const bool fold = rope_folds(c, l);
    rl_att_args *t = &P->att;
    att_layer(c, l, t);
    t->q = c->q;
    t->k = c->k;
    t->v = c->v;
    t->part = c->part;
    t->out = c->att;
    t->count = c->count;
    t->io = c->io;
    t->n_split = c->n_split;
    t->split = c->knobs.att_split;
    t->split_max = c->split_max;
    t->max_split = c->knobs.att_max_split;
    t->n_tok = ns;
    t->split_cap = splits;
    t->gqa = splits > 0 && c->knobs.att_gqa > 0 &&
             (size_t)splits * (cfg->n_head / cfg->n_head_kv) > (size_t)c->knobs.att_gqa;
    t->mma = c->knobs.att_mma;
    t->tok_stride = (int)c->qkv_dim;
    /* q, k, v = W{q,k,v} · rmsnorm(x) (+ bias): one launch (one per matrix if their types
     * differ), RoPE and the f16 K/V write in its epilogue where they fold */
    rl_mv_args *a = &P->qkv;
    mv_args1(c, a, &L->wq, c->q, RL_MV_STORE, c->x, L->attn_norm, D, ns, (int)c->qkv_dim);
    a->seg[0].bias = L->bq;
    a->seg[0].rope = fold;
    seg(&a->seg[1], &L->wk, L->bk, fold ? NULL : c->k, fold ? t->kc : NULL, fold);
    seg(&a->seg[2], &L->wv, L->bv, fold ? NULL : c->v, fold ? t->vc : NULL, false);
    a->nseg = 3;
    a->inv_freq = c->inv_freq;
    a->io = c->io;
    a->hd = (int)cfg->head_dim;
    a->rope_dim = (int)cfg->rope_dim;
    /* x += Wo · att; in an exact chunk on tensor cores the flash decode writes Wo's int8 input
     * (its fragment plane) from its outputs, so Wo needs no staging launch */
    mv_args1(c, &P->wo, &L->wo, c->x, RL_MV_ADD, c->att, NULL, (int)c->q_dim, ns, D);
    if (ns > 1 && c->knobs.att_stage && cfg->head_dim % 32 == 0 && rl_mvx_applies(&P->wo, &c->knobs)) {
        t->frag = rl_mvx_plane(&P->wo, &t->frag_k8);
        P->wo.staged = true;
    }
    /* hb = silu(Wg · rmsnorm(x)) * (Wu · rmsnorm(x)): one launch */
    a = &P->glu;
    mv_args1(c, a, &L->wg, c->hb, RL_MV_GLU, c->x, L->ffn_norm, D, ns, F);
    seg(&a->seg[1], &L->wu, NULL, NULL, NULL, false);
    a->nseg = 2;
    /* x += Wd · hb */
    mv_args1(c, &P->down, &L->wd, c->x, RL_MV_ADD, c->hb, NULL, F, ns, D);
}

/* One step of ns tokens; the LM head for the last `head` of them (1 or ns); splits as
 * layer_args takes it. */
static int enqueue(rl_cuda *c, int ns, int head, int splits, rl_err *e) {
    const rl_config *cfg = &c->m->cfg;
    int D = (int)cfg->n_embd, V = (int)cfg->n_vocab, rc = 0;
    /* 2: only the launches that copy weights before they wait (rl_mvs_launch, rl_mvx_launch) */
    bool pdl = c->knobs.pdl == 1;
    c->n.launches = c->n.streamed = c->n.bulked = 0;
    c->gm.n = 0;
    if (c->prof_cap) cudaEventRecordWithFlags(c->gm.ev[0], c->st, cudaEventRecordExternal);
    rl_deq_rows_launch(&c->emb, c->io->toks, 0, ns, c->x, false, c->st); /* the first node: a plain launch */
    c->n.launches++;
    mark(c, "embed", (double)c->emb.q_row + (double)c->emb.s_row);
    /* decoding: every layer in one persistent kernel where it applies (not in the profile's
     * graph, whose point is a time per step) */
    const bool persist = ns == 1 && c->pk_on && !c->prof_cap;
    if (persist) {
        if (rl_persist_launch(&c->pk, c->pk_lay, (int)cfg->n_layer, c->pk_bar, c->pk_trace, c->st)) rc = -1;
        c->n.launches++;
        c->n.streamed += 4 * cfg->n_layer;
    }
    for (size_t l = 0; l < (persist ? 0 : cfg->n_layer); l++) {
        const dlayer *L = &c->lay[l];
        rl_pk_layer P;
        layer_args(c, l, ns, splits, &P);
        const bool fold = P.qkv.seg[0].rope; /* rope_folds(c, l), as layer_args decided */
        mv_go(c, &P.qkv, &rc);
        mark(c, fold ? "qkv+rope+kv" : "qkv", dmat_bytes(&L->wq) + dmat_bytes(&L->wk) + dmat_bytes(&L->wv));
        if (!fold) {
            rl_rope_kv_launch(&P.att, pdl, c->st);
            c->n.launches++;
            mark(c, "rope+kv", 0);
        }
        /* RL_CUDA_ATT_MMA bit 8: the tensor-core attention launched with PDL (measured apart:
         * PDL on the default kernel cost 12-14% at depth 4096, docs/PERF.md v2.37 §1);
         * RL_CUDA_ATT_PDL_BAND: any attention, in a decoding graph of at most that many splits */
        const int most = splits > 0 ? splits : c->n_split; /* the graph's splits a head */
        const bool apdl = pdl || (c->knobs.pdl && (((c->knobs.att_mma & 9) == 9 && rl_att_mma(&P.att)) ||
                                                   (ns == 1 && most <= c->knobs.att_pdl_band)));
        if (rl_attention_launch(&P.att, apdl, c->st)) rc = -1;
        c->n.launches++;
        mark(c, "attention", -1);
        mv_go(c, &P.wo, &rc);
        mark(c, "wo+residual", dmat_bytes(&L->wo));
        mv_go(c, &P.glu, &rc);
        mark(c, "gate+up+silu", dmat_bytes(&L->wg) + dmat_bytes(&L->wu));
        mv_go(c, &P.down, &rc);
        mark(c, "down+residual", dmat_bytes(&L->wd));
    }
    rl_mv_args a;
    /* a prompt's chunk needs only its last token's logits: that column alone runs the one-token
     * kernels, which give it the same bits */
    mv_args1(c, &a, &c->out, c->logits + (size_t)(ns - head) * V, RL_MV_STORE, c->x + (size_t)(ns - head) * D,
             c->out_norm, D, head, V);
    mv_go(c, &a, &rc);
    mark(c, "norm+lm_head", dmat_bytes(&c->out));
    rl_argmax_launch(c->logits + (size_t)(ns - 1) * V, V, c->amax, pdl, c->st);
    c->n.launches++;
    mark(c, "argmax", 0);
    CK(cudaGetLastError());
    if (rc) return rl_fail(e, "CUDA: a kernel launch failed");
    return 0;
}

/* The persistent kernel's plan and device copy of the layers' arguments (at open, before the
 * first capture: the copy is a synchronous one). Where it does not apply, pk_on stays false
 * and pk_why says why. */
static int persist_setup(rl_cuda *c, rl_err *e) {
    const size_t n = c->m->cfg.n_layer;
    c->pk_on = false;
    if (!c->knobs.persist) {
        snprintf(c->pk_why, sizeof c->pk_why, "off (RL_CUDA_PERSIST=0)");
        return 0;
    }
    rl_pk_layer *h = (rl_pk_layer *)calloc(n, sizeof *h);
    if (!h) return rl_fail(e, "out of memory");
    for (size_t l = 0; l < n; l++) layer_args(c, l, 1, 0, &h[l]);
    if (rl_att_mma(&h[0].att)) { /* its attention is flash_decode_block's: chunks would not be its bits */
        free(h);
        snprintf(c->pk_why, sizeof c->pk_why,
                 "the attention runs on tensor cores (RL_CUDA_ATT_MMA; the persistent kernel has none)");
        return 0;
    }
    int rc = 0;
    if (!rl_persist_plan(h, (int)n, &c->knobs, c->n_sm, &c->pk, c->pk_why, sizeof c->pk_why)) {
        cudaError_t err = cudaMemcpy(c->pk_lay, h, n * sizeof *h, cudaMemcpyHostToDevice);
        if (err != cudaSuccess)
            rc = rl_fail(e, "CUDA: copying the layer table failed: %s", cudaGetErrorString(err));
        c->pk_on = !rc;
    }
    free(h);
    const char *tf = getenv("RL_CUDA_PERSIST_TRACE");
    if (!rc && c->pk_on && tf && *tf) {
        /* a copy: environ's string may change or go before the backend closes */
        if (!(c->pk_trace_file = strdup(tf))) return rl_fail(e, "out of memory for RL_CUDA_PERSIST_TRACE");
        const size_t n_tr = rl_persist_trace_words((int)n, c->pk.blocks);
        if (dev_alloc((void **)&c->pk_trace, n_tr * 8, "the persistent kernel's trace", e)) return -1;
        CK(cudaMemset(c->pk_trace, 0, n_tr * 8));
    }
    return rc;
}

/* RL_CUDA_PERSIST_TRACE=FILE: the last token's barrier timestamps, written when the backend
 * closes: int32 blocks, int32 barriers, then [2 barriers + 2][blocks] uint64 ns (start,
 * arrival and release per barrier, end). A diagnostic; errors are reported, not fatal. */
static void persist_trace_write(rl_cuda *c) {
    const char *tf = c->pk_trace_file;
    if (!c->pk_trace || !tf || !c->pk_on) return; /* nothing traced if its capture failed */
    const int32_t hdr[2] = {c->pk.blocks, rl_persist_barriers((int)c->m->cfg.n_layer)};
    const size_t n_tr = rl_persist_trace_words((int)c->m->cfg.n_layer, c->pk.blocks);
    uint64_t *h = (uint64_t *)malloc(n_tr * 8);
    FILE *f = h ? fopen(tf, "wb") : NULL;
    if (!f || cudaMemcpy(h, c->pk_trace, n_tr * 8, cudaMemcpyDeviceToHost) != cudaSuccess ||
        fwrite(hdr, sizeof hdr, 1, f) != 1 || fwrite(h, 8, n_tr, f) != n_tr)
        fprintf(stderr, "rawloop: RL_CUDA_PERSIST_TRACE: could not write %s\n", tf);
    if (f) fclose(f);
    free(h);
}

static int capture_into(rl_cuda *c, cudaGraphExec_t *out, int ns, int head, int splits, rl_err *e) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal));
    int rc = enqueue(c, ns, head, splits, e);
    cudaError_t err = cudaStreamEndCapture(c->st, &g);
    if (rc) {
        if (err == cudaSuccess) cudaGraphDestroy(g);
        return -1;
    }
    CK(err);
    err = cudaGraphInstantiate(out, g, 0);
    cudaGraphDestroy(g);
    CK(err);
    return 0;
}

static int capture1(rl_cuda *c, rl_err *e) { return capture_into(c, &c->graph, 1, 1, 0, e); }

/* With the persistent kernel (if asked for) and PDL first; if the driver refuses programmatic
 * edges or a cooperative launch in a graph, again without PDL, then without the persistent
 * kernel (with PDL, then without). */
static int capture(rl_cuda *c, rl_err *e) {
    const int pdl = c->knobs.pdl;
    if (!capture1(c, e)) return 0;
    if (pdl) {
        cudaGetLastError();
        c->knobs.pdl = 0;
        if (!capture1(c, e)) return 0;
    }
    if (!c->pk_on) return -1;
    cudaGetLastError();
    c->pk_on = false;
    snprintf(c->pk_why, sizeof c->pk_why, "the graph capture of its launch failed: %.150s", e->msg);
    c->knobs.pdl = pdl;
    if (!capture1(c, e)) return 0;
    if (!pdl) return -1;
    cudaGetLastError();
    c->knobs.pdl = 0;
    return capture1(c, e);
}

/* ---- backend ops ---------------------------------------------------------------------------- */

static void cuda_free(void *impl) {
    rl_cuda *c = (rl_cuda *)impl;
    if (!c) return;
    persist_trace_write(c);
    free(c->pk_trace_file);
    if (c->pk_trace) cudaFree(c->pk_trace);
    if (c->graph) cudaGraphExecDestroy(c->graph);
    for (cudaGraphExec_t g : c->dgraph)
        if (g) cudaGraphExecDestroy(g);
    for (auto &gs : c->cgraph)
        for (auto &gb : gs)
            for (cudaGraphExec_t g : gb)
                if (g) cudaGraphExecDestroy(g);
    if (c->pgraph) cudaGraphExecDestroy(c->pgraph);
    for (prof_marks *m : {&c->gm, &c->pm}) {
        for (int i = 0; m->ev && i <= m->cap; i++)
            if (m->ev[i]) cudaEventDestroy(m->ev[i]);
        free(m->ev);
        free(m->label);
        free(m->bytes);
    }
    rl_gemm_close(c->gemm); /* before its stream goes */
    if (c->st) cudaStreamDestroy(c->st);
    cudaFree(c->parena);
    cudaFree(c->warena);
    cudaFree(c->aarena);
    cudaFreeHost(c->h_io);
    cudaFreeHost(c->h_logits);
    cudaFreeHost(c->h_amax);
    free(c->lay);
    free(c);
}

static size_t cuda_n_ctx(const void *impl) { return ((const rl_cuda *)impl)->n_ctx; }

/* Bytes of one position's K and V rows in one layer: f16, or int8 + an fp32 scale per 32. */
static double kv_row_bytes(const rl_cuda *c) { return 2.0 * (double)c->kv_dim * (c->kv_q8 ? 1.125 : 2.0); }

static size_t cuda_kv_read(const void *impl, size_t pos) {
    const rl_cuda *c = (const rl_cuda *)impl;
    return (size_t)((double)c->m->cfg.n_layer * (double)(pos + 1) * kv_row_bytes(c));
}

/* Adds the step times of what m marked (the token just launched by the profile graph, or a
 * prefill chunk) to the table. */
static int prof_collect(rl_cuda *c, const prof_marks *m, size_t pos, rl_err *e) {
    CK(cudaStreamSynchronize(c->st));
    for (int i = 0; i < m->n; i++) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, m->ev[i], m->ev[i + 1]));
        double bytes = m->bytes[i] >= 0 ? m->bytes[i] : (double)(pos + 1) * kv_row_bytes(c);
        rl_prof_add(c->prow, &c->n_prow, sizeof c->prow / sizeof *c->prow, m->label[i], ms * 1e3, bytes);
    }
    return 0;
}

/* Events and tables of cap marks, once (kept on failure, freed with the backend, so a retry
 * does not leak). */
static int marks_alloc(prof_marks *m, int cap, rl_err *e) {
    if (!m->ev) {
        m->ev = (cudaEvent_t *)calloc((size_t)cap + 1, sizeof *m->ev);
        m->label = (const char **)calloc((size_t)cap, sizeof *m->label);
        m->bytes = (double *)calloc((size_t)cap, sizeof *m->bytes);
        if (!m->ev || !m->label || !m->bytes) return rl_fail(e, "out of memory");
        m->cap = cap;
    }
    for (int i = 0; i <= m->cap; i++)
        if (!m->ev[i]) CK(cudaEventCreate(&m->ev[i]));
    return 0;
}

static int cuda_profile(void *impl, bool on, rl_err *e) {
    rl_cuda *c = (rl_cuda *)impl;
    c->n_prow = 0;
    c->pf_marks = false;
    if (!on) {
        c->prof_on = false;
        return 0;
    }
    /* a token's steps: at most 8 per layer; a prefill chunk's: 13 per layer */
    if (marks_alloc(&c->gm, (int)(c->m->cfg.n_layer * 8 + 8), e) ||
        marks_alloc(&c->pm, (int)(c->m->cfg.n_layer * 13 + 8), e))
        return -1;
    if (!c->pgraph) {
        c->prof_cap = true;
        const auto n = c->n;
        int rc = capture_into(c, &c->pgraph, 1, 1, 0, e);
        c->prof_cap = false;
        c->n = n;
        if (rc) return -1;
    }
    c->prof_on = true;
    return 0;
}

static size_t cuda_profile_rows(void *impl, rl_prof_row *rows, size_t cap) {
    rl_cuda *c = (rl_cuda *)impl;
    size_t n = c->n_prow < cap ? c->n_prow : cap;
    memcpy(rows, c->prow, n * sizeof *rows);
    return n;
}

/* ---- fast prefill -------------------------------------------------------------------------------
 * A prompt chunk of n tokens as GEMMs: each weight matrix (the LM head in row slabs) is expanded
 * to fp16 once per chunk (F16 weights are used in place) and multiplied on the tensor cores with
 * the n tokens' fp16 activations, fp32 accumulation, each output at its column offset of the
 * chunk's q|k|v or gate|up rows; residuals accumulate in fp32 (beta = 1). RoPE,
 * q/k norms and the cache write are the decode kernel's (rope_kv, over n tokens), attention is
 * a causal prefill kernel. Quality class of decoding, not its bits (docs/CUDA.md). */

static int pf_alloc(rl_cuda *c, rl_err *e) {
    const rl_config *cfg = &c->m->cfg;
    size_t P = c->pf_chunk, D = cfg->n_embd, F = cfg->n_ff, Q = c->q_dim, KV = c->kv_dim;
    size_t wide = D > Q ? D : Q;
    wide = wide > F ? wide : F;
    size_t w = 2 * F * D > (Q + 2 * KV) * D ? 2 * F * D : (Q + 2 * KV) * D; /* gate|up or q|k|v */
    c->pw16_elems = w; /* the LM head goes through in slabs of w / n_embd rows */
    size_t off = 0;
    size_t o_tok = off; off = align256(off + P * 4);
    size_t o_x = off; off = align256(off + P * D * 4);
    size_t o_qkv = off; off = align256(off + P * (Q + 2 * KV) * 4);
    size_t o_gu = off; off = align256(off + P * 2 * F * 4);
    size_t o_a = off; off = align256(off + P * wide * 2);
    size_t o_att = off; off = align256(off + P * Q * 2);
    size_t o_w = off; off = align256(off + w * 2);
    size_t o_rope = off; off = align256(off + P * (cfg->rope_dim / 2) * sizeof(float2));
    /* all-logits calls (perplexity) go through the LM head in groups of tokens whose logits
     * fit 64 MiB, so the buffer does not grow with the chunk times a 150k vocabulary */
    size_t V = cfg->n_vocab, g = ((size_t)64 << 20) / (V * 4);
    c->plg_rows = g < 1 ? 1 : g > P ? P : g;
    size_t o_lg = off; off = align256(off + c->plg_rows * V * 4);
    char what[128];
    snprintf(what, sizeof what, "the fast prefill's buffers (chunks of %zu tokens; -b sets it)", P);
    if (dev_alloc((void **)&c->parena, off, what, e)) return -1;
    c->ptok = (int32_t *)(c->parena + o_tok);
    c->px = (float *)(c->parena + o_x);
    c->pqkv = (float *)(c->parena + o_qkv);
    c->pgu = (float *)(c->parena + o_gu);
    c->pa16 = (__half *)(c->parena + o_a);
    c->patt = (__half *)(c->parena + o_att);
    c->pw16 = (__half *)(c->parena + o_w);
    c->prope = (float2 *)(c->parena + o_rope);
    c->plg = (float *)(c->parena + o_lg);
    return 0;
}

/* Launch checks of the prefill: a kernel that fails names itself and its CUDA error (the
 * launchers return cudaError_t); GEMMs are checked by pf_gemm / GEMM_OK (cuBLAS statuses). */
#define PK(call, what)                                                                          \
    do {                                                                                        \
        int st_ = (call);                                                                       \
        if (st_) return rl_fail(e, "CUDA: fast prefill: %s failed: %s", what,                  \
                                cudaGetErrorString((cudaError_t)st_));                         \
    } while (0)

/* C[t][.] (+)= A[t] . W rows, W the rows of nw matrices of one width one after the other (q|k|v,
 * gate|up: one GEMM, whose tiles cuBLAS fills better than three small ones). F16 weights that lie
 * so in the arena (put_mat uploads a layer's matrices in that order) are the GEMM's operand in
 * place; any other type is expanded to fp16 in pw16 first, matrix after matrix. */
static int pf_gemm(rl_cuda *c, const rl_dmat *const *w, int nw, const __half *A, int lda, int N, float *C,
                   int ldc, float beta, const char *what, const char *gemm_label, rl_err *e) {
    const __half *W = (const __half *)w[0]->q;
    int rows = 0;
    bool in_place = true;
    for (int i = 0; i < nw; i++) {
        in_place = in_place && w[i]->type == RL_F16 && w[i]->q == w[0]->q + (size_t)rows * w[0]->q_row;
        rows += w[i]->rows;
    }
    if (!in_place) {
        double bytes = 0;
        for (int i = 0, r = 0; i < nw; r += w[i]->rows, i++) {
            int st = rl_deq_rows_launch(w[i], NULL, 0, w[i]->rows, c->pw16 + (size_t)r * w[0]->cols, true, c->st);
            if (st) return rl_fail(e, "CUDA: fast prefill: %s expansion failed (status %d: %s)", what, st,
                                   cudaGetErrorString(cudaGetLastError()));
            bytes += dmat_bytes(w[i]) + 2.0 * w[i]->rows * w[i]->cols; /* read, and written in fp16 */
        }
        mark(c, "expansion to fp16", bytes);
        W = c->pw16;
    }
    int st = rl_gemm_f16(c->gemm, W, rows, w[0]->cols, A, lda, N, C, ldc, beta);
    if (st) return rl_fail(e, "CUDA: fast prefill: %s GEMM failed (cuBLAS status %d)", what, st);
    mark(c, gemm_label, 2.0 * rows * w[0]->cols);
    return 0;
}

static int pf_chunk_run(rl_cuda *c, size_t n, size_t pos0, rl_err *e) {
    const rl_config *cfg = &c->m->cfg;
    const int D = (int)cfg->n_embd, F = (int)cfg->n_ff, Q = (int)c->q_dim, KV = (int)c->kv_dim;
    const int N = (int)n, NQKV = Q + 2 * KV;
    cudaStream_t st = c->st;
    PK(rl_deq_rows_launch(&c->emb, c->ptok, 0, N, c->px, false, st), "embedding");
    mark(c, "embedding", 0);
    const float *rope_tab_of = NULL; /* the inv_freq the table holds the angles of */
    for (size_t l = 0; l < cfg->n_layer; l++) {
        const dlayer *L = &c->lay[l];
        PK(rl_rmsnorm_f16_launch(c->px, D, N, L->attn_norm, cfg->norm_eps, c->pa16, D, st), "attn_norm");
        mark(c, "RMSNorm to fp16", 0);
        const rl_dmat *qkv[3] = {&L->wq, &L->wk, &L->wv}, *gu[2] = {&L->wg, &L->wu};
        if (pf_gemm(c, qkv, 3, c->pa16, D, N, c->pqkv, NQKV, 0.0f, "q|k|v", "GEMM q|k|v", e)) return -1;
        rl_att_args t;
        att_layer(c, l, &t);
        t.q = c->pqkv;
        t.k = c->pqkv + Q;
        t.v = c->pqkv + Q + KV;
        t.n_tok = N;
        t.tok_stride = NQKV;
        t.pos0 = (int)pos0;
        t.bq = L->bq;
        t.bk = L->bk;
        t.bv = L->bv;
        const bool tab = c->knobs.pf_rope_tab && rl_rope_kv_prefill_flat(&t);
        if (tab && t.inv_freq != rope_tab_of) {
            rl_rope_table_launch(&t, c->prope, st);
            PK((int)cudaGetLastError(), "RoPE table");
            rope_tab_of = t.inv_freq;
        }
        rl_rope_kv_prefill_launch(&t, tab ? c->prope : NULL, st);
        PK((int)cudaGetLastError(), "rope + KV write");
        mark(c, "RoPE + KV write", 0);
        PK(rl_attention_prefill_launch(&t, c->patt, c->knobs.pf_mma != 0, st), "attention");
        mark(c, "attention", 0);
        const rl_dmat *wo = &L->wo;
        if (pf_gemm(c, &wo, 1, c->patt, Q, N, c->px, D, 1.0f, "wo", "GEMM wo (+ residual)", e)) return -1;
        PK(rl_rmsnorm_f16_launch(c->px, D, N, L->ffn_norm, cfg->norm_eps, c->pa16, D, st), "ffn_norm");
        mark(c, "RMSNorm to fp16", 0);
        if (pf_gemm(c, gu, 2, c->pa16, D, N, c->pgu, 2 * F, 0.0f, "gate|up", "GEMM gate|up", e)) return -1;
        PK(rl_silu_mul_f16_launch(c->pgu, F, N, c->pa16, st), "SwiGLU");
        mark(c, "SwiGLU to fp16", 0);
        const rl_dmat *wd = &L->wd;
        if (pf_gemm(c, &wd, 1, c->pa16, F, N, c->px, D, 1.0f, "down", "GEMM down (+ residual)", e)) return -1;
    }
    return 0;
}

/* Logits of every token of the chunk: final norm, then per group of plg_rows tokens the LM
 * head GEMM in row slabs, copied out. */
static int pf_all_logits(rl_cuda *c, size_t n, float *logits, rl_err *e) {
    const rl_config *cfg = &c->m->cfg;
    const int D = (int)cfg->n_embd, V = (int)cfg->n_vocab;
    PK(rl_rmsnorm_f16_launch(c->px, D, (int)n, c->out_norm, cfg->norm_eps, c->pa16, D, c->st), "output_norm");
    int slab = c->out.type == RL_F16 ? V : (int)(c->pw16_elems / (size_t)D); /* F16: in place */
    for (size_t g0 = 0; g0 < n; g0 += c->plg_rows) {
        int G = (int)(n - g0 < c->plg_rows ? n - g0 : c->plg_rows);
        for (int v0 = 0; v0 < V; v0 += slab) {
            int rows = V - v0 < slab ? V - v0 : slab;
            const __half *W = (const __half *)c->out.q;
            if (c->out.type != RL_F16) {
                PK(rl_deq_rows_launch(&c->out, NULL, v0, rows, c->pw16, true, c->st), "LM head expansion");
                W = c->pw16;
            }
            int st = rl_gemm_f16(c->gemm, W, rows, D, c->pa16 + g0 * D, D, G, c->plg + v0, V, 0.0f);
            if (st) return rl_fail(e, "CUDA: fast prefill: LM head GEMM failed (cuBLAS status %d)", st);
        }
        if (g0 + G == n) {
            rl_argmax_launch(c->plg + (size_t)(G - 1) * V, V, c->amax, false, c->st);
            CK(cudaMemcpyAsync(c->h_amax, c->amax, sizeof(int32_t), cudaMemcpyDeviceToHost, c->st));
        }
        /* on the backend's stream (a plain cudaMemcpy would not wait for it: it is non-blocking) */
        CK(cudaMemcpyAsync(logits + g0 * V, c->plg, (size_t)G * V * sizeof(float), cudaMemcpyDeviceToHost, c->st));
        CK(cudaStreamSynchronize(c->st));
    }
    return 0;
}

/* Rows [first, first + rows) of the device logits into dst (through the pinned buffer; dst NULL:
 * none), and the argmax into h_amax (rl_cuda_last_argmax); waits for the stream. */
static int copy_logits(rl_cuda *c, size_t first, size_t rows, float *dst, rl_err *e) {
    size_t nv = c->m->cfg.n_vocab;
    if (dst)
        CK(cudaMemcpyAsync(c->h_logits, c->logits + first * nv, rows * nv * sizeof(float),
                           cudaMemcpyDeviceToHost, c->st));
    CK(cudaMemcpyAsync(c->h_amax, c->amax, sizeof(int32_t), cudaMemcpyDeviceToHost, c->st));
    CK(cudaStreamSynchronize(c->st));
    if (dst) memcpy(dst, c->h_logits, rows * nv * sizeof(float));
    return 0;
}

static int prefill_fast(rl_cuda *c, const int32_t *tokens, size_t S, size_t pos, float *logits,
                        bool all_logits, rl_err *e) {
    const rl_config *cfg = &c->m->cfg;
    size_t nv = cfg->n_vocab;
    c->pf_marks = false; /* an earlier call that failed midway may have left it set */
    for (size_t s0 = 0; s0 < S; s0 += c->pf_chunk) {
        size_t n = S - s0 < c->pf_chunk ? S - s0 : c->pf_chunk;
        /* stream-ordered: the previous chunk's embedding may not have read ptok yet */
        CK(cudaMemcpyAsync(c->ptok, tokens + s0, n * sizeof(int32_t), cudaMemcpyHostToDevice, c->st));
        if (c->prof_on) { /* --profile: events between the steps, summed per chunk */
            c->pf_marks = true;
            c->pm.n = 0;
            CK(cudaEventRecord(c->pm.ev[0], c->st));
        }
        if (pf_chunk_run(c, n, pos + s0, e)) return -1;
        if (logits && all_logits) {
            if (pf_all_logits(c, n, logits + s0 * nv, e)) return -1;
            mark(c, "LM head, every token", 0);
        } else if (s0 + n == S) { /* the last token's logits: decoding's final norm + LM head */
            const auto cnt = c->n;
            int rc = 0;
            rl_mv_args a;
            mv_args1(c, &a, &c->out, c->logits, RL_MV_STORE, c->px + (n - 1) * cfg->n_embd, c->out_norm,
                     (int)cfg->n_embd, 1, 0);
            mv_go(c, &a, &rc);
            c->n = cnt;
            if (rc) return rl_fail(e, "CUDA: fast prefill: LM head launch failed");
            rl_argmax_launch(c->logits, (int)nv, c->amax, false, c->st);
            mark(c, "norm + LM head + argmax", dmat_bytes(&c->out));
            if (copy_logits(c, 0, 1, logits, e)) return -1;
        }
        if (c->pf_marks) {
            c->pf_marks = false;
            if (prof_collect(c, &c->pm, 0, e)) return -1;
        }
    }
    CK(cudaStreamSynchronize(c->st));
    CK(cudaGetLastError());
    return 0;
}

/* The band of a chunk of ns tokens at pos: the smallest b with at most 2^b attention splits at
 * every one of its positions (the split widens past max_split, so the last token need not have
 * the most), or CHUNK_BANDS - 1 past 2^(CHUNK_BANDS - 2). Its graph's attention grid holds that
 * many splits, and the block per KV group runs where that many splits times a group's heads
 * exceed RL_CUDA_ATT_GQA (layer_args). */
static int chunk_band(const rl_cuda *c, size_t pos, size_t ns) {
    int most = 1;
    for (size_t i = 1; i <= ns; i++) {
        const int n_pos = (int)(pos + i), S = rl_att_split_len(c->knobs.att_split, c->knobs.att_max_split, n_pos);
        if ((n_pos + S - 1) / S > most) most = (n_pos + S - 1) / S;
    }
    int b = 0;
    while (b < CHUNK_BANDS - 1 && (1 << b) < most) b++;
    return b;
}

static int cuda_forward(void *impl, const int32_t *tokens, size_t S, size_t pos, float *logits,
                        bool all_logits, rl_err *e) {
    rl_cuda *c = (rl_cuda *)impl;
    size_t nv = c->m->cfg.n_vocab;
    if (S == 0) return rl_fail(e, "forward: no tokens");
    if (pos > c->n_ctx || S > c->n_ctx - pos)
        return rl_fail(e, "context full: %zu tokens at position %zu exceed the context of %zu "
                       "tokens (use a larger -c)", S, pos, c->n_ctx);
    for (size_t i = 0; i < S; i++)
        if (tokens[i] < 0 || (size_t)tokens[i] >= nv)
            return rl_fail(e, "token id %d at index %zu is out of range [0, %zu)", tokens[i], i, nv);
    if (S > 1 && c->gemm) return prefill_fast(c, tokens, S, pos, logits, all_logits, e);
    if (!c->graph && capture(c, e)) return -1;
    /* exact: chunks of 16, 8, 4 tokens (as -b allows), the rest one by one; every size gives
     * decoding's bits */
    for (size_t s = 0; s < S;) {
        size_t ns = 1;
        int gi = -1;
        for (int i = 2; i >= 0 && !c->prof_on; i--)
            if (((size_t)4 << i) <= c->chunk_max && S - s >= ((size_t)4 << i)) {
                ns = (size_t)4 << i;
                gi = i;
                break;
            }
        const bool all = logits && all_logits;
        const int band = chunk_band(c, pos + s, ns);
        /* one token: the band's own graph where it holds fewer splits than the whole one (not
         * the persistent kernel's, whose grid is not the attention's) */
        cudaGraphExec_t *dg = gi < 0 && c->knobs.att_bands && !c->pk_on && !c->prof_on &&
                                      band < CHUNK_BANDS - 1 && (1 << band) < c->n_split
                                  ? &c->dgraph[band]
                                  : NULL;
        cudaGraphExec_t *g = gi >= 0 ? &c->cgraph[all][gi][band] : dg;
        if (g && !*g) {
            const auto cnt = c->n; /* the report keeps the one-token count */
            int rc = capture_into(c, g, (int)ns, all ? (int)ns : 1, band < CHUNK_BANDS - 1 ? 1 << band : c->n_split, e);
            if (!rc && gi >= 0) c->chunk_launches[gi] = c->n.launches;
            c->n = cnt;
            if (rc) return -1;
        }
        rl_cuda_io *h = &c->h_io[pos + s];
        h->pos = (int32_t)(pos + s);
        for (size_t i = 0; i < ns; i++) h->toks[i] = tokens[s + i];
        CK(cudaMemcpyAsync(c->io, h, sizeof *h, cudaMemcpyHostToDevice, c->st));
        CK(cudaGraphLaunch(g ? *g : c->prof_on ? c->pgraph : c->graph, c->st));
        if (c->prof_on && prof_collect(c, &c->gm, pos + s, e)) return -1;
        if (logits && (all_logits || s + ns == S)) {
            size_t first = all_logits ? 0 : ns - 1; /* every row, or the last */
            if (copy_logits(c, first, ns - first, logits + (all_logits ? s * nv : 0), e)) return -1;
        }
        s += ns;
    }
    /* also makes every queued read of h_io complete before the caller reuses positions */
    CK(cudaStreamSynchronize(c->st));
    return 0;
}

/* Best of 5 passes of 16-byte streaming loads over up to 4 GiB (less if memory is short). */
static double cuda_ceiling(void *impl) {
    rl_cuda *c = (rl_cuda *)impl;
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) return 0;
    size_t n = (size_t)4 << 30;
    while (n > fr / 2 && n > ((size_t)64 << 20)) n /= 2;
    void *buf = NULL;
    uint32_t *sink = NULL;
    int blocks = c->n_sm * 4;
    double best = 0;
    cudaEvent_t a = NULL, b = NULL;
    if (cudaMalloc(&buf, n) != cudaSuccess || cudaMalloc(&sink, blocks * sizeof(uint32_t)) != cudaSuccess)
        goto out;
    if (cudaMemset(buf, 0x5a, n) != cudaSuccess || cudaEventCreate(&a) || cudaEventCreate(&b)) goto out;
    for (int i = 0; i < 6; i++) {
        cudaEventRecord(a, c->st);
        rl_read_stream_launch(buf, n / 16, sink, blocks, c->st);
        cudaEventRecord(b, c->st);
        if (cudaEventSynchronize(b) != cudaSuccess) goto out;
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        double gbps = (double)n / (ms * 1e-3) / 1e9;
        if (i > 0 && gbps > best) best = gbps; /* the first pass is a warm-up */
    }
out:
    cudaGetLastError();
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    cudaFree(buf);
    cudaFree(sink);
    return best;
}

static size_t cuda_chunk_launches(const void *impl, size_t *tokens) {
    const rl_cuda *c = (const rl_cuda *)impl;
    for (int i = 2; i >= 0; i--)
        if (c->chunk_launches[i]) {
            *tokens = (size_t)4 << i;
            return c->chunk_launches[i];
        }
    *tokens = 0;
    return 0;
}

static const rl_backend_ops k_cuda_ops = {cuda_free,    cuda_n_ctx,   cuda_kv_read,     cuda_forward,
                                          cuda_ceiling, cuda_profile, cuda_profile_rows, cuda_chunk_launches};

/* Every type with kernels has passed test_cuda on a device (RQ4, the last, on 2026-12-04). A
 * type added later stays out of here (--device auto keeps it on the CPU) until it has. */
extern "C" bool rl_cuda_runs_type(uint32_t type) { return rl_mv_type_ok(type); }

extern "C" bool rl_cuda_device_present(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return n > 0;
}

/* The splits at open (n_split, split_max), and the attention's arguments as far as they are known
 * there (shape, splits, knobs; one token). */
static void att_open_args(rl_cuda *c, rl_att_args *t) {
    const rl_config *cfg = &c->m->cfg;
    c->n_split = (int)((c->n_ctx + c->knobs.att_split - 1) / c->knobs.att_split);
    /* at most max_split splits are ever active (the split widens past that): the partials and
     * the grid need no more */
    if (c->n_split > c->knobs.att_max_split) c->n_split = c->knobs.att_max_split;
    /* the split only widens with the position, so the last one's is the widest */
    c->split_max = rl_att_split_len(c->knobs.att_split, c->knobs.att_max_split, (int)c->n_ctx);
    memset(t, 0, sizeof *t);
    t->n_head = (int)cfg->n_head;
    t->n_head_kv = (int)cfg->n_head_kv;
    t->hd = (int)cfg->head_dim;
    t->split_max = c->split_max;
    t->n_split = c->n_split;
    t->split = c->knobs.att_split;
    t->max_split = c->knobs.att_max_split;
    t->n_tok = 1;
    t->mma = c->knobs.att_mma; /* bit 32 asks for cluster launches */
}

/* the attention's shared memory at the context's size, checked against the device's, and its
 * kernels' attributes raised to it (rl_attention_prepare) */
static int att_open_prepare(const rl_cuda *c, const rl_att_args *t, const cudaDeviceProp *p, rl_err *e) {
    const size_t smem = rl_attention_smem(t);
    if (smem > (size_t)p->sharedMemPerBlockOptin)
        return rl_fail(e, "CUDA: a context of %zu tokens needs %zu bytes of attention shared "
                       "memory per block (%s has %zu); use a smaller -c", c->n_ctx, smem, p->name,
                       (size_t)p->sharedMemPerBlockOptin);
    const int err = rl_attention_prepare(t);
    return err ? rl_fail(e, "CUDA: attention prepare failed: %s", cudaGetErrorString((cudaError_t)err)) : 0;
}

static int open_impl(rl_cuda *c, const rl_model *m, const rl_backend_opts *o, rl_backend *b, rl_err *e) {
    const rl_config *cfg = &m->cfg;
    c->m = m;
    c->fast = !o->exact;
    if (read_knobs(&c->knobs, e)) return -1;
    if (!c->knobs.mv_warps) c->knobs.mv_warps = mv_warps_for(cfg->n_embd);
    if (c->knobs.mvs < 0) c->knobs.mvs = mvs_for(cfg->n_embd);
    if (c->knobs.mvx_res < 0) c->knobs.mvx_res = mvx_res_for(cfg->n_embd);
    if (o->kv_type == RL_KV_F32)
        return rl_fail(e, "CUDA: --kv-type f32 is CPU-only; the GPU keeps an f16 or q8 cache");
    c->kv_q8 = o->kv_type == RL_KV_Q8;
    if (c->kv_q8 && cfg->head_dim % 32)
        return rl_fail(e, "CUDA: --kv-type q8 needs head_dim %% 32 == 0 (this model: %zu)", cfg->head_dim);
    if (!rl_cuda_device_present()) return rl_fail(e, "CUDA: no CUDA device found");
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    CK(cudaSetDevice(0));
    c->n_sm = p.multiProcessorCount;
    if (p.major < 9) c->knobs.pdl = c->knobs.mvb = 0; /* griddepcontrol, cp.async.bulk: sm_90+ */
    c->knobs.att_mma = rl_att_mma_knob(c->knobs.att_mma); /* clusters: sm_90 code on a device with them */
    c->n_ctx = o->n_ctx ? o->n_ctx : (cfg->n_ctx_train < 4096 ? cfg->n_ctx_train : 4096);
    c->q_dim = cfg->n_head * cfg->head_dim;
    c->kv_dim = cfg->n_head_kv * cfg->head_dim;
    if (cfg->head_dim > 512 || cfg->head_dim % 8 || cfg->rope_dim > cfg->head_dim ||
        cfg->n_head % cfg->n_head_kv || c->q_dim % 32 || cfg->n_embd % 32 || cfg->n_ff % 32)
        return rl_fail(e, "CUDA: unsupported shape (head_dim %zu, rope_dim %zu, %zu heads, %zu kv "
                       "heads, n_embd %zu, n_ff %zu)", cfg->head_dim, cfg->rope_dim, cfg->n_head,
                       cfg->n_head_kv, cfg->n_embd, cfg->n_ff);
    {
        /* RL_CUDA_ATT_MAXSPLIT unset: 16 where decoding's attention runs in clusters (a cluster
         * holds at most 16 blocks), else 20 */
        const bool ms_unset = c->knobs.att_max_split < 0;
        if (ms_unset) c->knobs.att_max_split = 16;
        rl_att_args t;
        att_open_args(c, &t);
        /* first, where its shared memory fits: prepare learns how many blocks a cluster may hold */
        bool prepared = rl_attention_smem(&t) <= (size_t)p.sharedMemPerBlockOptin;
        if (prepared) CK((cudaError_t)rl_attention_prepare(&t));
        if (ms_unset && (!prepared || !rl_att_cluster(&t))) {
            c->knobs.att_max_split = 20;
            att_open_args(c, &t);
            prepared = false;
        }
        if (!prepared && att_open_prepare(c, &t, &p, e)) return -1;
    }
    size_t mx = cfg->n_embd > c->q_dim ? cfg->n_embd : c->q_dim;
    c->max_n = mx > cfg->n_ff ? mx : cfg->n_ff;
    /* the 8-bit planes need n + n/8 more bytes; where only the fp32 path fits, run that */
    size_t optin = (size_t)p.sharedMemPerBlockOptin;
    if (c->fast && rl_mv_smem((int)c->max_n, true) > optin && rl_mv_smem((int)c->max_n, false) <= optin)
        c->fast = false;
    size_t smem_need = rl_mv_smem((int)c->max_n, c->fast);
    if (smem_need > optin)
        return rl_fail(e, "CUDA: an input of %zu values needs %zu bytes of shared memory; %s has %zu",
                       c->max_n, smem_need, p.name, (size_t)p.sharedMemPerBlockOptin);
    CK((cudaError_t)rl_mv_prepare((int)c->max_n));
    c->lay = (dlayer *)calloc(cfg->n_layer, sizeof *c->lay);
    float *inv = (float *)malloc((cfg->rope_dim / 2 + 1) * sizeof(float));
    if (!c->lay || !inv) {
        free(inv);
        return rl_fail(e, "out of memory");
    }
    /* the CPU backend's inv_freq, op for op */
    for (size_t i = 0; i < cfg->rope_dim / 2; i++) {
        float f = 1.0f / powf(cfg->rope_base, (float)(2 * i) / (float)cfg->rope_dim);
        inv[i] = m->rope_freqs ? f / m->rope_freqs[i] : f;
    }
    int rc = upload_pass(c, inv, e); /* plan */
    if (!rc) {
        c->wbytes = c->woff;
        rc = dev_alloc((void **)&c->warena, c->wbytes, "the weights", e);
    }
    if (!rc) rc = upload_pass(c, inv, e);
    free(inv);
    if (rc) return -1;

    size_t kv_elems = cfg->n_layer * c->n_ctx * c->kv_dim, off = 0, T = RL_CHUNK_MAX;
    c->qkv_dim = c->q_dim + 2 * c->kv_dim;
    size_t o_x = off; off = align256(off + T * cfg->n_embd * 4);
    size_t o_q = off; off = align256(off + T * c->qkv_dim * 4);
    size_t o_att = off; off = align256(off + T * c->q_dim * 4);
    size_t o_hb = off; off = align256(off + T * cfg->n_ff * 4);
    size_t o_lg = off; off = align256(off + T * cfg->n_vocab * 4);
    size_t o_part = off; off = align256(off + T * cfg->n_head * (size_t)c->n_split * (cfg->head_dim + 2) * 4);
    size_t o_io = off; off = align256(off + sizeof(rl_cuda_io));
    size_t o_cnt = off; off = align256(off + T * cfg->n_head * sizeof(int));
    size_t o_mvs = off; off = align256(off + rl_mv_scratch_bytes((int)c->max_n, (int)T));
    size_t o_am = off; off = align256(off + sizeof(int32_t));
    size_t o_pk = off; off = align256(off + cfg->n_layer * sizeof(rl_pk_layer));
    size_t o_bar = off; off = align256(off + sizeof(unsigned long long));
    const size_t kv_es = c->kv_q8 ? 1 : 2, kv_sc = c->kv_q8 ? kv_elems / 32 * 4 : 0;
    size_t o_kc = off; off = align256(off + kv_elems * kv_es);
    size_t o_vc = off; off = align256(off + kv_elems * kv_es);
    size_t o_kd = off; off = align256(off + kv_sc);
    size_t o_vd = off; off = align256(off + kv_sc);
    c->abytes = off;
    char what[96];
    snprintf(what, sizeof what, "activations and the KV cache of %zu tokens", c->n_ctx);
    if (dev_alloc((void **)&c->aarena, c->abytes, what, e)) return -1;
    CK(cudaMemset(c->aarena, 0, c->abytes));
    c->x = (float *)(c->aarena + o_x);
    c->q = (float *)(c->aarena + o_q);
    c->k = c->q + c->q_dim;
    c->v = c->k + c->kv_dim;
    c->mvs = c->aarena + o_mvs;
    c->att = (float *)(c->aarena + o_att);
    c->hb = (float *)(c->aarena + o_hb);
    c->logits = (float *)(c->aarena + o_lg);
    c->part = (float *)(c->aarena + o_part);
    c->io = (rl_cuda_io *)(c->aarena + o_io);
    c->count = (int *)(c->aarena + o_cnt);
    c->amax = (int32_t *)(c->aarena + o_am);
    c->pk_lay = (rl_pk_layer *)(c->aarena + o_pk);
    c->pk_bar = (unsigned long long *)(c->aarena + o_bar);
    c->kc = c->aarena + o_kc;
    c->vc = c->aarena + o_vc;
    c->kd = c->kv_q8 ? (float *)(c->aarena + o_kd) : NULL;
    c->vd = c->kv_q8 ? (float *)(c->aarena + o_vd) : NULL;
    CK(cudaMallocHost((void **)&c->h_io, c->n_ctx * sizeof(rl_cuda_io)));
    CK(cudaMallocHost((void **)&c->h_logits, T * cfg->n_vocab * sizeof(float)));
    CK(cudaMallocHost((void **)&c->h_amax, sizeof(int32_t)));
    CK(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking));
    if (persist_setup(c, e) || capture(c, e)) return -1;
    if (c->knobs.persist && !c->pk_on) /* asked for: say why not */
        fprintf(stderr, "rawloop: RL_CUDA_PERSIST=1 but the persistent kernel does not apply: %s\n", c->pk_why);
    b->launches = c->n.launches;
    if (c->pk_on)
        snprintf(b->name, sizeof b->name, "cuda %.40s, graph of %zu launches/token (layers: 1 persistent)%s", p.name,
                 c->n.launches, c->kv_q8 ? ", q8 KV cache" : "");
    else
        snprintf(b->name, sizeof b->name, "cuda %.40s, graph of %zu launches/token (%zu streamed%s)%s%s", p.name,
                 c->n.launches, c->n.streamed, c->n.bulked ? ", bulk copies" : "",
                 c->knobs.pdl == 1 || (c->knobs.pdl == 2 && c->n.streamed) ? ", PDL" : "",
                 c->kv_q8 ? ", q8 KV cache" : "");
    /* prompts: fast unless asked for exact (or --exact); without cuBLAS an explicit
     * --prefill fast is an error, the default falls back to exact and says why */
    int pm = o->prefill == RL_PREFILL_AUTO ? (o->exact ? RL_PREFILL_EXACT : RL_PREFILL_FAST) : o->prefill;
    /* 2048 tokens per fast-prefill chunk unless -b says otherwise: every chunk expands the
     * quantized weights to fp16 again, and the GEMMs fill better; against 512, pp2048 +28%
     * (7B Q4_0), +6% (7B F16), +42% (TinyLlama Q4_0), for ~0.4 GB more buffers on a 7B
     * (docs/PERF.md v2.13). No chunk is longer than the context. */
    c->pf_chunk = o->max_batch ? o->max_batch : 2048;
    if (c->pf_chunk > c->n_ctx) c->pf_chunk = c->n_ctx;
    c->chunk_max = o->max_batch ? (o->max_batch >= 16 ? 16 : o->max_batch >= 8 ? 8 : o->max_batch >= 4 ? 4 : 1) : 16;
    char exact_desc[128];
    snprintf(exact_desc, sizeof exact_desc, "exact: chunks of up to %zu tokens per launch, bit-identical "
             "to decoding", c->chunk_max);
    char why[200] = "";
    if (pm == RL_PREFILL_FAST && cfg->head_dim > 256)
        snprintf(why, sizeof why, "head_dim %zu > 256, the prefill attention's limit", cfg->head_dim);
    else if (pm == RL_PREFILL_FAST && !rl_gemm_open(&c->gemm, c->st, why, sizeof why)) {
        rl_err ae = {{0}}; /* its buffers now, so a prompt never meets an allocation failure */
        if (pf_alloc(c, &ae)) {
            snprintf(why, sizeof why, "%.190s", ae.msg);
            rl_gemm_close(c->gemm);
            c->gemm = NULL;
        }
    }
    if (pm == RL_PREFILL_FAST && !c->gemm) {
        cudaGetLastError(); /* whatever the failed attempt left must not fail a later launch check */
        if (o->prefill == RL_PREFILL_FAST) return rl_fail(e, "CUDA: --prefill fast is unavailable: %s", why);
        snprintf(b->prefill, sizeof b->prefill, "%s (fast prefill unavailable: %.80s)", exact_desc, why);
    } else if (c->gemm) {
        snprintf(b->prefill, sizeof b->prefill, "fast: fp16 tensor-core GEMMs (cuBLAS) in chunks of "
                 "%zu tokens, fp32 accumulation; not bit-identical to decoding", c->pf_chunk);
    } else {
        snprintf(b->prefill, sizeof b->prefill, "%s", exact_desc);
    }
    return 0;
}

/* One open at a time: open raises kernels' shared-memory limits (read, then set, never lowered)
 * and lowers the attention's cluster room, process-wide state that two concurrent opens (a
 * server's draft and target, say) would otherwise race on. */
static std::mutex open_mutex;

/* The test hooks' prepares under the same lock: they set the same process-wide state. */
static int locked_mv_prepare(int max_n) {
    std::lock_guard<std::mutex> lock(open_mutex);
    return rl_mv_prepare(max_n);
}
static int locked_att_prepare(const rl_att_args *a) {
    std::lock_guard<std::mutex> lock(open_mutex);
    return rl_attention_prepare(a);
}

extern "C" int rl_cuda_open(rl_backend *b, const rl_model *m, const rl_backend_opts *o, rl_err *e) {
    rl_cuda *c = (rl_cuda *)calloc(1, sizeof *c);
    if (!c) return rl_fail(e, "out of memory");
    int rc;
    {
        std::lock_guard<std::mutex> lock(open_mutex);
        rc = open_impl(c, m, o, b, e);
    }
    if (rc) {
        cuda_free(c);
        memset(b, 0, sizeof *b);
        return -1;
    }
    b->ops = &k_cuda_ops;
    b->impl = c;
    b->device = RL_DEVICE_CUDA;
    b->n_threads = 1;
    b->numerics = c->fast ? "8-bit activations for quantized weights, fp32 for float and FP8 weights"
                          : o->exact ? "fp32 activations (--exact)"
                                     : "fp32 activations (the 8-bit path does not fit this GPU's shared memory)";
    return 0;
}


extern "C" int32_t rl_cuda_last_argmax(void *impl) { return *((rl_cuda *)impl)->h_amax; }

/* ---- test hooks ----------------------------------------------------------------------------- */

/* One launch of ns columns (1: decoding's kernels) for the test hooks below; m2 (or NULL): a
 * second matrix, of another type, as a second store segment after the first (y: its rows
 * follow), and *launches the kernels that took. */
static int test_matvec(uint32_t type, const void *w, size_t rows, size_t cols, size_t row_bytes, const float *x,
                       const float *norm_w, float eps, int mode, bool fast, size_t ns, float *y, int *kernel,
                       const rl_matrix *m2, int *launches, rl_err *e) {
    rl_cuda c;
    memset(&c, 0, sizeof c);
    if (read_knobs(&c.knobs, e)) return -1;
    if (!c.knobs.mv_warps) c.knobs.mv_warps = 8;
    if (c.knobs.mvs < 0) c.knobs.mvs = 1;
    if (c.knobs.mvx_res < 0) c.knobs.mvx_res = mvx_res_for(cols);
    c.knobs.pdl = 0; /* a lone launch on the legacy stream */
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    if (p.major < 9) c.knobs.mvb = 0;
    rl_matrix mat = {type, w, rows, cols, row_bytes};
    rl_dmat d, d2, d3;
    const size_t out_rows = (mode == RL_MV_GLU ? rows / 2 : rows) + (m2 ? m2->rows : 0), xb = align256(ns * cols * 4),
                 yb = align256(ns * out_rows * 4), sb = ns > 1 ? align256(rl_mv_scratch_bytes((int)cols, (int)ns)) : 0;
    if (put_mat(&c, &mat, &d, "test matrix", e) || (m2 && put_mat(&c, m2, &d3, "second test matrix", e))) return -1;
    c.wbytes = c.woff;
    if (dev_alloc((void **)&c.warena, c.wbytes + xb + align256(cols * 4) + yb + sb + 256, "test", e)) return -1;
    c.woff = 0;
    int rc = put_mat(&c, &mat, &d, "test matrix", e);
    if (!rc && m2) rc = put_mat(&c, m2, &d3, "second test matrix", e);
    float *dx = (float *)(c.warena + c.wbytes), *dn = (float *)((char *)dx + xb);
    float *dy = (float *)((char *)dn + align256(cols * 4));
    void *scratch = ns > 1 ? (char *)dy + yb : NULL;
    rl_mv_args a;
    memset(&a, 0, sizeof a);
    if (!rc && (cudaMemcpy(dx, x, ns * cols * 4, cudaMemcpyHostToDevice) ||
                (norm_w && cudaMemcpy(dn, norm_w, cols * 4, cudaMemcpyHostToDevice)) ||
                cudaMemcpy(dy, y, ns * out_rows * 4, cudaMemcpyHostToDevice)))
        rc = rl_fail(e, "CUDA: test upload failed");
    if (!rc) {
        a.seg[0].w = d;
        a.seg[0].y = dy;
        a.nseg = 1;
        if (mode == RL_MV_GLU) {
            /* the two halves of the matrix as gate and up */
            d.rows = d2.rows = (int)(rows / 2);
            d2 = d;
            d2.q = d.q + (rows / 2) * d.q_row;
            d2.s = d.s ? d.s + (rows / 2) * d.s_row : NULL;
            a.seg[0].w = d;
            a.seg[1].w = d2;
            a.nseg = 2;
        }
        if (m2 && mode == RL_MV_STORE) {
            a.seg[1].w = d3;
            a.seg[1].y = dy + rows;
            a.nseg = 2;
        }
        a.mode = mode;
        a.x = dx;
        a.norm_w = norm_w ? dn : NULL;
        a.eps = eps;
        a.n = (int)cols;
        a.fast = fast;
        a.ns = (int)ns;
        a.ys = (int)out_rows;
        a.scratch = scratch;
        if (kernel) *kernel = rl_mvs_warps(&a, &c.knobs) > 0 ? 1 + rl_mvb_applies(&a, &c.knobs) : 0;
        int n = -1;
        if (locked_mv_prepare((int)cols) || (n = rl_mv_launch(&a, &c.knobs, p.multiProcessorCount, 0, NULL)) < 0 ||
            cudaDeviceSynchronize() || cudaMemcpy(y, dy, ns * out_rows * 4, cudaMemcpyDeviceToHost))
            rc = rl_fail(e, "CUDA: test matvec failed: %s", cudaGetErrorString(cudaGetLastError()));
        if (launches) *launches = n;
    }
    cudaFree(c.warena);
    return rc;
}

extern "C" int rl_cuda_test_matvec(uint32_t type, const void *w, size_t rows, size_t cols,
                                   size_t row_bytes, const float *x, const float *norm_w, float eps,
                                   int mode, bool fast, float *y, int *kernel, rl_err *e) {
    return test_matvec(type, w, rows, cols, row_bytes, x, norm_w, eps, mode, fast, 1, y, kernel, NULL, NULL, e);
}

extern "C" int rl_cuda_test_matvec_pair(uint32_t type, const void *w, size_t rows, size_t row_bytes, uint32_t type2,
                                        const void *w2, size_t rows2, size_t row_bytes2, size_t cols, const float *x,
                                        const float *norm_w, float eps, bool fast, float *y, int *launches, rl_err *e) {
    const rl_matrix m2 = {type2, w2, rows2, cols, row_bytes2};
    return test_matvec(type, w, rows, cols, row_bytes, x, norm_w, eps, RL_MV_STORE, fast, 1, y, NULL, &m2, launches, e);
}

extern "C" int rl_cuda_test_matvec_chunk(uint32_t type, const void *w, size_t rows, size_t cols, size_t row_bytes,
                                         const float *x, const float *norm_w, float eps, int mode, bool fast,
                                         size_t ns, float *y, rl_err *e) {
    if (ns != 4 && ns != 8 && ns != 16) return rl_fail(e, "chunk test: %zu columns (4, 8 or 16)", ns);
    return test_matvec(type, w, rows, cols, row_bytes, x, norm_w, eps, mode, fast, ns, y, NULL, NULL, NULL, e);
}

extern "C" bool rl_cuda_has_q8(uint32_t type) { return rl_mv_q8(type); }

extern "C" bool rl_cuda_att_clusters(void) { return rl_att_mma_knob(32) == 32; }
extern "C" int rl_cuda_att_cluster_max(void) { return rl_att_cluster_max(); }

extern "C" int rl_cuda_test_argmax(const float *v, size_t n, int32_t *out, rl_err *e) {
    float *dv = NULL;
    int32_t *dout = NULL;
    int rc = 0;
    if (cudaMalloc(&dv, n * 4) || cudaMalloc(&dout, 4) || cudaMemcpy(dv, v, n * 4, cudaMemcpyHostToDevice))
        rc = rl_fail(e, "CUDA: argmax test setup failed");
    if (!rc) {
        rl_argmax_launch(dv, (int)n, dout, false, 0);
        if (cudaDeviceSynchronize() || cudaMemcpy(out, dout, 4, cudaMemcpyDeviceToHost))
            rc = rl_fail(e, "CUDA: argmax test failed: %s", cudaGetErrorString(cudaGetLastError()));
    }
    cudaFree(dv);
    cudaFree(dout);
    return rc;
}

/* The attention test hooks' common part: q ([nq] fp32) and the f16 cache (k and v, [nkv] each)
 * uploaded into a->q, a->kc, a->vc (the caller frees them, also after a failure), a's head shape
 * set and the rest zero. tail: cache values past the nkv given, f16 NaN (0x7e7e), which no
 * kernel may read: rows past a token's position are masked, never multiplied by a zero weight. */
static int att_test_setup(rl_att_args *a, const float *q, const uint16_t *kc, const uint16_t *vc, size_t nq, size_t nkv,
                          size_t tail, int n_head, int n_head_kv, int hd) {
    memset(a, 0, sizeof *a);
    a->n_head = n_head;
    a->n_head_kv = n_head_kv;
    a->hd = hd;
    if (cudaMalloc(&a->q, nq * 4) || cudaMalloc(&a->kc, (nkv + tail) * 2) || cudaMalloc(&a->vc, (nkv + tail) * 2) ||
        cudaMemcpy(a->q, q, nq * 4, cudaMemcpyHostToDevice) || cudaMemcpy(a->kc, kc, nkv * 2, cudaMemcpyHostToDevice) ||
        cudaMemcpy(a->vc, vc, nkv * 2, cudaMemcpyHostToDevice) || cudaMemset(a->kc + nkv, 0x7e, tail * 2) ||
        cudaMemset(a->vc + nkv, 0x7e, tail * 2))
        return -1;
    return 0;
}

/* A test's context, splits and per-launch buffers in its attention arguments (max_split 0: no
 * widening); nt tokens of qd floats each. */
static void att_test_splits(rl_att_args *t, int n_ctx, int n_split, int split, int max_split, int nt, int qd,
                            float *part, int *cnt, rl_cuda_io *io) {
    t->rope_dim = t->hd;
    t->n_ctx = n_ctx;
    t->part = part;
    t->count = cnt;
    t->io = io;
    t->n_split = n_split;
    t->split = split;
    t->max_split = max_split > 0 ? max_split : n_split;
    t->split_max = rl_att_split_len(split, t->max_split, n_ctx);
    t->n_tok = nt;
    t->tok_stride = qd;
}

/* One launch of a test's attention, its first bytes of output copied to y (host). */
static int att_test_run(const rl_att_args *t, void *y, size_t bytes, rl_err *e) {
    if (rl_attention_launch(t, false, 0) || cudaDeviceSynchronize() ||
        cudaMemcpy(y, t->out, bytes, cudaMemcpyDeviceToHost))
        return rl_fail(e, "CUDA: attention test failed: %s", cudaGetErrorString(cudaGetLastError()));
    return 0;
}

/* max |a - b| / max |b| over n floats, a NaN anywhere sticking */
static double att_test_dist(const void *a, const void *b, size_t n) {
    double dmax = 0.0, bmax = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double x = ((const float *)a)[i], y = ((const float *)b)[i];
        if (!(fabs(x - y) <= dmax)) dmax = fabs(x - y);
        if (!(fabs(y) <= bmax)) bmax = fabs(y);
    }
    return bmax > 0.0 ? dmax / bmax : dmax;
}

/* a chunk's last token alone (decoding's launch), its position in io1 */
static rl_att_args att_test_last(const rl_att_args *t, int nt, int qd, rl_cuda_io *io1) {
    rl_att_args t1 = *t;
    t1.n_tok = 1;
    t1.q = t->q + (size_t)(nt - 1) * qd;
    t1.io = io1;
    return t1;
}

extern "C" int rl_cuda_test_att_stage(const float *q, const uint16_t *kc, const uint16_t *vc, int n_head, int n_head_kv,
                                      int hd, int nt, int pos, int split, int max_split, uint32_t type, bool gqa,
                                      int mma, bool *used, bool *same, double *dist, rl_err *e) {
    const int qd = n_head * hd, n_ctx = pos + nt, n_all = (n_ctx + split - 1) / split,
              n_split = max_split > 0 && max_split < n_all ? max_split : n_all;
    const size_t nq = (size_t)nt * qd, nkv = (size_t)n_ctx * n_head_kv * hd, sb = rl_mv_scratch_bytes(qd, nt),
                 pb = (size_t)nt * n_head * n_split * (hd + 2) * 4;
    if ((nt != 4 && nt != 8 && nt != 16) || hd % 32 || (type != RL_Q4_0 && type != RL_Q8_0))
        return rl_fail(e, "attention staging test: %d tokens, head size %d, type %u", nt, hd, type);
    rl_cuda_knobs k;
    if (read_knobs(&k, e)) return -1;
    k.pdl = 0; /* lone launches on the legacy stream */
    const int asked = mma; /* bit 32 asked for: *used says whether clusters ran */
    mma = rl_att_mma_knob(mma);
    float *o1 = NULL, *o2 = NULL, *part = NULL;
    uint8_t *s1 = NULL, *s2 = NULL;
    int *cnt = NULL;
    rl_cuda_io *io = NULL, hio;
    memset(&hio, 0, sizeof hio);
    hio.pos = pos;
    rl_att_args t;
    int rc = 0;
    /* io[1]: the chunk's last token alone (its one-token launch) */
    rl_cuda_io hio1 = hio;
    hio1.pos = pos + nt - 1;
    if (att_test_setup(&t, q, kc, vc, nq, nkv, (size_t)16 * n_head_kv * hd, n_head, n_head_kv, hd) ||
        cudaMalloc(&o1, nq * 4) || cudaMalloc(&o2, nq * 4) || cudaMalloc(&part, pb) ||
        cudaMalloc(&cnt, (size_t)nt * n_head * 4) || cudaMalloc(&s1, sb) || cudaMalloc(&s2, sb) ||
        cudaMalloc(&io, 2 * sizeof *io) || cudaMemcpy(io, &hio, sizeof hio, cudaMemcpyHostToDevice) ||
        cudaMemcpy(io + 1, &hio1, sizeof hio1, cudaMemcpyHostToDevice) || cudaMemset(cnt, 0, (size_t)nt * n_head * 4) ||
        cudaMemset(s1, 0xa5, sb) || cudaMemset(s2, 0xa5, sb) || cudaMemset(o1, 0xff, nq * 4) ||
        cudaMemset(o2, 0xff, nq * 4)) /* NaN: an output a run leaves unwritten never matches */
        rc = rl_fail(e, "CUDA: attention staging test setup failed");
    if (!rc) {
        att_test_splits(&t, n_ctx, n_split, split, max_split, nt, qd, part, cnt, io);
        /* Wo's arguments as layer_args makes them (only the type, input and scratch matter to
         * the staging) */
        rl_mv_args w;
        memset(&w, 0, sizeof w);
        w.seg[0].w.type = type;
        w.nseg = 1;
        w.n = qd;
        w.ns = nt;
        w.fast = true;
        w.x = o2;
        w.scratch = s2;
        rl_mv_args w1 = w;
        w1.scratch = s1;
        /* run 1: the flash decode stages the plane itself; run 2: its output, then the staging kernel */
        rl_att_args t1 = t, t2 = t;
        t1.out = o1;
        t1.frag = rl_mvx_plane(&w1, &t1.frag_k8);
        t1.gqa = gqa;
        t1.mma = mma;
        t2.out = o2;
        t2.gqa = false;
        t2.mma = mma; /* the tensor-core kernel is its own bits: staged against itself unstaged */
        uint8_t *h1 = (uint8_t *)malloc(sb), *h2 = (uint8_t *)malloc(sb), *y1 = (uint8_t *)malloc(nq * 4),
                *y2 = (uint8_t *)malloc(nq * 4);
        int st = !h1 || !h2 || !y1 || !y2 ? -1 : locked_att_prepare(&t1);
        /* after prepare, which may find less room for clusters */
        *used = mma ? (asked & 32 ? rl_att_cluster(&t1) : rl_att_mma(&t1)) : rl_att_gqa(&t1);
        if (!st) st = rl_attention_launch(&t1, false, 0);
        if (!st) st = rl_attention_launch(&t2, false, 0);
        if (st || rl_mvx_stage_launch(&w, &k, 8, 0) || cudaDeviceSynchronize() ||
            cudaMemcpy(h1, s1, sb, cudaMemcpyDeviceToHost) || cudaMemcpy(h2, s2, sb, cudaMemcpyDeviceToHost) ||
            cudaMemcpy(y1, o1, nq * 4, cudaMemcpyDeviceToHost) || cudaMemcpy(y2, o2, nq * 4, cudaMemcpyDeviceToHost))
            rc = rl_fail(e, "CUDA: attention staging test failed: %s", cudaGetErrorString(cudaGetLastError()));
        /* the plane is what follows the staged columns; the bytes before it neither run writes */
        const size_t p0 = (size_t)(t1.frag - s1);
        *same = !rc && !memcmp(y1, y2, nq * 4) && !memcmp(h1 + p0, h2 + p0, sb - p0);
        *dist = -1.0;
        if (!rc && mma && *used) {
            /* the tensor-core kernel's chunk keeps its one-token bits: the last token alone */
            rl_att_args t3 = att_test_last(&t2, nt, qd, io + 1);
            rc = att_test_run(&t3, y2, (size_t)qd * 4, e);
            *same = *same && !rc && !memcmp(y1 + (size_t)(nt - 1) * qd * 4, y2, (size_t)qd * 4);
            if (!rc && (mma & 32)) { /* the clusters' merge: the bytes of the ticket's */
                t2.mma = mma & ~32;
                rc = att_test_run(&t2, y2, nq * 4, e);
                *same = *same && !rc && !memcmp(y1, y2, nq * 4);
            }
            /* and against the block per head */
            t2.mma = 0;
            if (!rc) rc = att_test_run(&t2, y2, nq * 4, e);
            if (!rc) *dist = att_test_dist(y1, y2, nq);
        }
        free(h1);
        free(h2);
        free(y1);
        free(y2);
    }
    cudaFree(t.q);
    cudaFree(t.kc);
    cudaFree(t.vc);
    cudaFree(o1);
    cudaFree(o2);
    cudaFree(part);
    cudaFree(cnt);
    cudaFree(s1);
    cudaFree(s2);
    cudaFree(io);
    return rc;
}

/* a test's f16 cache rows as a q8 cache, rounded as the CPU's q8 cache is (rl_round_i8_32);
 * the scales of the tail rows (past the chunk) NaN */
static int att_test_q8(const uint16_t *c, size_t n, size_t tail, void **codes, float **scales) {
    int8_t *hc = (int8_t *)malloc(n);
    float *hd = (float *)malloc(n / 32 * sizeof(float));
    int rc = !hc || !hd, sum;
    for (size_t b = 0; !rc && b < n / 32; b++) {
        float x[32];
        for (size_t i = 0; i < 32; i++) x[i] = rl_f16_to_f32(c[32 * b + i]);
        hd[b] = rl_round_i8_32(x, hc + 32 * b, &sum);
    }
    if (!rc)
        rc = cudaMalloc(codes, n + tail) || cudaMalloc((void **)scales, (n + tail) / 32 * sizeof(float)) ||
             cudaMemcpy(*codes, hc, n, cudaMemcpyHostToDevice) ||
             cudaMemcpy(*scales, hd, n / 32 * sizeof(float), cudaMemcpyHostToDevice) ||
             cudaMemset((int8_t *)*codes + n, 0x7e, tail) || cudaMemset(*scales + n / 32, 0xff, tail / 32 * sizeof(float));
    free(hc);
    free(hd);
    return rc;
}

extern "C" int rl_cuda_test_att_q8(const float *q, const uint16_t *kc, const uint16_t *vc, int n_head, int n_head_kv,
                                   int hd, int nt, int pos, int split, int max_split, int mma, bool *used, bool *cl,
                                   bool *same, double *dist, rl_err *e) {
    const int qd = n_head * hd, n_ctx = pos + nt, n_all = (n_ctx + split - 1) / split,
              n_split = max_split > 0 && max_split < n_all ? max_split : n_all;
    const size_t nq = (size_t)nt * qd, nkv = (size_t)n_ctx * n_head_kv * hd, tail = (size_t)16 * n_head_kv * hd,
                 pb = (size_t)nt * n_head * n_split * (hd + 2) * 4;
    if (nt < 1 || hd % 32) return rl_fail(e, "q8 attention test: %d tokens, head size %d", nt, hd);
    mma = rl_att_mma_knob(mma);
    rl_att_args t;
    memset(&t, 0, sizeof t);
    t.n_head = n_head;
    t.n_head_kv = n_head_kv;
    t.hd = hd;
    float *o = NULL, *part = NULL;
    int *cnt = NULL;
    void *kq = NULL, *vq = NULL;
    rl_cuda_io *io = NULL, hio[2];
    memset(hio, 0, sizeof hio);
    hio[0].pos = pos;
    hio[1].pos = pos + nt - 1; /* the chunk's last token alone */
    uint8_t *y1 = (uint8_t *)malloc(nq * 4), *y2 = (uint8_t *)malloc(nq * 4);
    int rc = 0;
    if (!y1 || !y2 || cudaMalloc((void **)&t.q, nq * 4) || cudaMemcpy(t.q, q, nq * 4, cudaMemcpyHostToDevice) ||
        att_test_q8(kc, nkv, tail, &kq, &t.kd) || att_test_q8(vc, nkv, tail, &vq, &t.vd) || cudaMalloc(&o, nq * 4) ||
        cudaMalloc(&part, pb) || cudaMalloc(&cnt, (size_t)nt * n_head * 4) || cudaMalloc(&io, sizeof hio) ||
        cudaMemcpy(io, hio, sizeof hio, cudaMemcpyHostToDevice) || cudaMemset(cnt, 0, (size_t)nt * n_head * 4) ||
        cudaMemset(o, 0xff, nq * 4)) /* NaN: an output a run leaves unwritten never matches */
        rc = rl_fail(e, "CUDA: q8 attention test setup failed");
    t.kc = (uint16_t *)kq;
    t.vc = (uint16_t *)vq;
    *used = *cl = *same = false;
    *dist = -1.0;
    if (!rc) {
        att_test_splits(&t, n_ctx, n_split, split, max_split, nt, qd, part, cnt, io);
        t.out = o;
        t.mma = mma;
        if (locked_att_prepare(&t)) rc = rl_fail(e, "CUDA: q8 attention test: prepare failed");
        /* the chunk's last token alone: decoding's launch, as clusters where its splits fit one
         * (a chunk's split blocks merge by the ticket unless bit 64) */
        rl_att_args t1 = att_test_last(&t, nt, qd, io + 1);
        *used = rl_att_mma(&t);
        *cl = *used && rl_att_cluster(&t1);
        if (!rc) rc = att_test_run(&t, y1, nq * 4, e);
        *same = !rc;
        if (!rc && *used) {
            rc = att_test_run(&t1, y2, (size_t)qd * 4, e);
            *same = *same && !rc && !memcmp(y1 + (size_t)(nt - 1) * qd * 4, y2, (size_t)qd * 4);
        }
        if (!rc) { /* against the block per head over the same cache */
            rl_att_args t3 = t;
            t3.mma = 0;
            rc = att_test_run(&t3, y2, nq * 4, e);
            if (!rc) *dist = att_test_dist(y1, y2, nq);
        }
    }
    free(y1);
    free(y2);
    cudaFree(t.q);
    cudaFree(kq);
    cudaFree(vq);
    cudaFree(t.kd);
    cudaFree(t.vd);
    cudaFree(o);
    cudaFree(part);
    cudaFree(cnt);
    cudaFree(io);
    return rc;
}

extern "C" int rl_cuda_test_prefill_attention(const float *q, const uint16_t *kc, const uint16_t *vc, int n_head,
                                              int n_head_kv, int hd, int n_tok, int pos0, bool mma, uint16_t *out,
                                              bool *used, rl_err *e) {
    const size_t nq = (size_t)n_tok * n_head * hd, nkv = (size_t)(pos0 + n_tok) * n_head_kv * hd;
    __half *dout = NULL;
    rl_att_args a;
    int rc = 0;
    if (att_test_setup(&a, q, kc, vc, nq, nkv, 0, n_head, n_head_kv, hd) || cudaMalloc(&dout, nq * 2))
        rc = rl_fail(e, "CUDA: prefill attention test setup failed");
    if (!rc) {
        a.n_tok = n_tok;
        a.tok_stride = n_head * hd;
        a.pos0 = pos0;
        *used = mma && rl_attention_prefill_mma(&a);
        int st = rl_attention_prefill_launch(&a, dout, mma, 0);
        if (st || cudaDeviceSynchronize() || cudaMemcpy(out, dout, nq * 2, cudaMemcpyDeviceToHost))
            rc = rl_fail(e, "CUDA: prefill attention test failed: %s",
                         cudaGetErrorString(st ? (cudaError_t)st : cudaGetLastError()));
    }
    cudaFree(a.q);
    cudaFree(a.kc);
    cudaFree(a.vc);
    cudaFree(dout);
    return rc;
}
