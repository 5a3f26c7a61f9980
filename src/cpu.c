/* CPU forward pass. One function reads like the math (forward_chunk); the parallel pieces are
 * small named steps that split work over the thread pool. */
#include "cpu.h"
#include "backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#define RL_X86_SIMD 1
#endif

#include "pool.h"
#include "quant.h"

struct rl_cpu {
    const rl_model *m;
    rl_pool *pool;
    size_t n_ctx, max_batch;
    bool exact;
    size_t q_dim, kv_dim;
    float *x;        /* [B][n_embd] residual stream */
    float *xb;       /* [B][max(n_embd, q_dim)] normed input / attention output */
    float *q;        /* [B][q_dim] */
    float *k, *v;    /* [B][kv_dim] */
    float *hb, *hb2; /* [B][n_ff] */
    rl_q8a *xq;      /* [B][max(n_embd, q_dim, n_ff)/32] quantized activations */
    uint8_t *kc, *vc; /* [n_layer][n_ctx] rows of kv_row bytes: kv_dim f16, f32, or kv_q8 blocks */
    int kv_type;      /* enum rl_kv_type */
    size_t kv_row;    /* bytes per cached position (all kv heads) */
    float *att;       /* [n_threads][n_ctx] attention scores */
    float *inv_freq;  /* [rope_dim/2] */
    /* Weights repacked at load (rl_pack_rows, row-interleaved Q4_0/Q8_0/RQ2/RQ4) for the fast path:
     * lay/output are copies of the model's matrices with data pointing into pack where a
     * matrix was repacked. pack_bytes extra memory (the mmapped originals stay mapped). */
    rl_layer *lay;     /* [n_layer] */
    rl_matrix output;
    uint8_t *pack;
    size_t pack_bytes;
    void (*observe)(void *ctx, size_t mat, const float *x, size_t S, size_t n); /* or NULL */
    void *observe_ctx;
    /* bench --profile: the steps' summed wall-clock time; t0 is when the current step began */
    bool prof;
    double t0;
    rl_prof_row prow[16];
    size_t n_prow;
};

typedef struct pack_job {
    const rl_matrix *src;
    uint8_t *dst;
} pack_job;

/* Each thread repacks its share of the matrix's 8-row groups (groups are independent). */
static void pack_worker(void *ctx, size_t ith, size_t nth) {
    pack_job *j = ctx;
    size_t groups = j->src->rows / RL_PACK_ROWS, g0 = groups * ith / nth, g1 = groups * (ith + 1) / nth;
    size_t r0 = g0 * RL_PACK_ROWS, rb = j->src->row_bytes;
    rl_pack_rows(j->src->type, (const uint8_t *)j->src->data + r0 * rb, rb, (g1 - g0) * RL_PACK_ROWS,
                 j->src->cols, j->dst + r0 * rb);
}

/* The i-th matmul weight of the forward pass (the copies in c), i <= RL_LAYER_MATRIX_COUNT * n_layer. */
static rl_matrix *matrix_at(rl_cpu *c, size_t i) {
    if (i == RL_LAYER_MATRIX_COUNT * c->m->cfg.n_layer) return &c->output;
    rl_layer *L = &c->lay[i / RL_LAYER_MATRIX_COUNT];
    rl_matrix *all[RL_LAYER_MATRIX_COUNT] = RL_LAYER_MATRICES(L);
    return all[i % RL_LAYER_MATRIX_COUNT];
}

/* Repacks every packable matrix into one arena and points the copies at it. Skipped on the
 * exact path (its kernels read the row-major form). */
/* Once a matrix lives in the packed copy its mmapped original is never read again, so its pages
 * are handed back: resident memory stays about one model, not two. The token embedding is kept
 * (rows are gathered from it; a tied output head shares it). */
static void release_pages(const rl_cpu *c, const void *data, size_t bytes) {
    if (data == c->m->tok_embd.data) return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)data + page - 1) / page * page;
    uintptr_t hi = ((uintptr_t)data + bytes) / page * page;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

static int pack_weights(rl_cpu *c, rl_err *e) {
    size_t n_layer = c->m->cfg.n_layer;
    c->lay = malloc(n_layer * sizeof *c->lay + 1);
    if (!c->lay) return rl_fail(e, "out of memory copying the layer table");
    memcpy(c->lay, c->m->layers, n_layer * sizeof *c->lay);
    c->output = c->m->output;
    if (c->exact) return 0;
    size_t total = 0, count = RL_LAYER_MATRIX_COUNT * n_layer + 1;
    for (size_t i = 0; i < count; i++) {
        const rl_matrix *mt = matrix_at(c, i);
        if (rl_pack_supported(mt->type, mt->rows, mt->cols)) total += rl_matrix_bytes(mt);
    }
    if (total == 0) return 0;
    /* 2 MiB aligned and marked for transparent huge pages (this kernel's THP mode is
     * "madvise"): decode streams the whole arena every token, and 4 KiB pages cost a TLB walk
     * every 4 KiB of it. The advice is only a hint; failure changes nothing. */
    size_t huge = (size_t)2 << 20, bytes = (total + huge - 1) / huge * huge;
    c->pack = aligned_alloc(huge, bytes);
    if (!c->pack) return rl_fail(e, "out of memory repacking %.2f GB of weights", (double)total / 1e9);
#ifdef MADV_HUGEPAGE
    (void)madvise(c->pack, bytes, MADV_HUGEPAGE);
#endif
    c->pack_bytes = total;
    size_t off = 0;
    for (size_t i = 0; i < count; i++) {
        rl_matrix *mt = matrix_at(c, i);
        if (!rl_pack_supported(mt->type, mt->rows, mt->cols)) continue;
        pack_job j = {mt, c->pack + off};
        rl_pool_run(c->pool, pack_worker, &j);
        release_pages(c, mt->data, rl_matrix_bytes(mt));
        mt->data = c->pack + off;
        off += rl_matrix_bytes(mt);
    }
    return 0;
}

static bool is_packed(const rl_cpu *c, const rl_matrix *w) {
    const uint8_t *p = w->data;
    return c->pack && p >= c->pack && p < c->pack + c->pack_bytes;
}

size_t rl_cpu_packed_bytes(const rl_cpu *c) { return c->pack_bytes; }

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

/* --kv-type q8: 32 cached values as int8 with one fp32 scale, rounded as rl_q8a_quant_row_ref
 * does (d = amax/127, round-half-even). Blocks never straddle heads (head_dim % 32 == 0). */
typedef struct kv_q8 {
    float d;
    int8_t q[32];
} kv_q8;

static size_t kv_row_bytes(int kv_type, size_t kv_dim) {
    return kv_type == RL_KV_Q8 ? kv_dim / 32 * sizeof(kv_q8)
                               : kv_dim * (kv_type == RL_KV_F32 ? sizeof(float) : sizeof(uint16_t));
}

/* Stores one position's n values (k or v, all heads) in the cache's element type. */
static void kv_store(int kv_type, const float *x, uint8_t *dst, size_t n) {
    if (kv_type == RL_KV_F32) {
        memcpy(dst, x, n * sizeof(float));
    } else if (kv_type == RL_KV_F16) {
        rl_f32_to_f16_row(x, (uint16_t *)dst, n);
    } else {
        kv_q8 *b = (kv_q8 *)dst;
        int sum;
        for (size_t i = 0; i < n / 32; i++, x += 32) b[i].d = rl_round_i8_32(x, b[i].q, &sum);
    }
}

int rl_cpu_new(rl_cpu **out, const rl_model *m, const rl_cpu_opts *o, rl_err *e) {
    const rl_config *cfg = &m->cfg;
    rl_cpu *c = calloc(1, sizeof *c);
    if (!c) return rl_fail(e, "out of memory");
    c->m = m;
    c->exact = o->exact;
    c->observe = o->observe;
    c->observe_ctx = o->observe_ctx;
    c->n_ctx = o->n_ctx ? o->n_ctx : (cfg->n_ctx_train < 4096 ? cfg->n_ctx_train : 4096);
    c->max_batch = o->max_batch ? o->max_batch : 64;
    c->q_dim = cfg->n_head * cfg->head_dim;
    c->kv_dim = cfg->n_head_kv * cfg->head_dim;
    size_t nt = o->n_threads ? o->n_threads : rl_ncpu();
    if (rl_pool_new(&c->pool, nt, e) < 0) {
        free(c);
        return -1;
    }
    size_t B = c->max_batch, wide = max3(cfg->n_embd, c->q_dim, cfg->n_ff);
    size_t kv_elems = cfg->n_layer * c->n_ctx * c->kv_dim;
    if (kv_elems / cfg->n_layer / c->n_ctx != c->kv_dim) goto oom;
    c->x = malloc(B * cfg->n_embd * sizeof(float));
    c->xb = malloc(B * (c->q_dim > cfg->n_embd ? c->q_dim : cfg->n_embd) * sizeof(float));
    c->q = malloc(B * c->q_dim * sizeof(float));
    c->k = malloc(B * c->kv_dim * sizeof(float));
    c->v = malloc(B * c->kv_dim * sizeof(float));
    c->hb = malloc(B * cfg->n_ff * sizeof(float));
    c->hb2 = malloc(B * cfg->n_ff * sizeof(float));
    c->xq = malloc(B * ((wide + 31) / 32) * sizeof(rl_q8a));
    c->att = malloc(nt * c->n_ctx * sizeof(float));
    c->inv_freq = malloc(cfg->rope_dim / 2 * sizeof(float) + 1);
    c->kv_type = o->kv_type;
    if (c->kv_type == RL_KV_Q8 && cfg->head_dim % 32) {
        rl_cpu_free(c);
        return rl_fail(e, "--kv-type q8 needs a head size that is a multiple of 32 (this model: %zu)",
                       cfg->head_dim);
    }
    c->kv_row = kv_row_bytes(c->kv_type, c->kv_dim);
    c->kc = malloc(cfg->n_layer * c->n_ctx * c->kv_row);
    c->vc = malloc(cfg->n_layer * c->n_ctx * c->kv_row);
    if (!c->x || !c->xb || !c->q || !c->k || !c->v || !c->hb || !c->hb2 || !c->xq || !c->att ||
        !c->inv_freq || !c->kc || !c->vc)
        goto oom;
    /* Same op order as HF: inv_freq = 1 / base^(2i/d) in fp32, then divided by the llama3
     * factor (llama.cpp divides theta by rope_freqs[i], which is the same value). */
    for (size_t i = 0; i < cfg->rope_dim / 2; i++) {
        float f = 1.0f / powf(cfg->rope_base, (float)(2 * i) / (float)cfg->rope_dim);
        c->inv_freq[i] = m->rope_freqs ? f / m->rope_freqs[i] : f;
    }
    if (pack_weights(c, e) < 0) {
        rl_cpu_free(c);
        return -1;
    }
    *out = c;
    return 0;
oom:
    {
        size_t n_ctx = c->n_ctx;
        double gb = 2.0 * (double)cfg->n_layer * n_ctx * (double)kv_row_bytes(o->kv_type, c->kv_dim) / 1e9;
        rl_cpu_free(c);
        return rl_fail(e, "out of memory allocating the forward state (context %zu needs "
                       "%.2f GB of KV cache); try a smaller -c", n_ctx, gb);
    }
}

void rl_cpu_free(rl_cpu *c) {
    if (!c) return;
    rl_pool_free(c->pool);
    free(c->x); free(c->xb); free(c->q); free(c->k); free(c->v); free(c->hb); free(c->hb2);
    free(c->xq); free(c->att); free(c->inv_freq); free(c->kc); free(c->vc);
    free(c->lay); free(c->pack);
    free(c);
}

size_t rl_cpu_n_ctx(const rl_cpu *c) { return c->n_ctx; }
size_t rl_cpu_n_threads(const rl_cpu *c) { return rl_pool_size(c->pool); }
size_t rl_cpu_max_batch(const rl_cpu *c) { return c->max_batch; }
size_t rl_cpu_kv_read_bytes(const rl_cpu *c, size_t pos) {
    return 2 * c->m->cfg.n_layer * (pos + 1) * c->kv_row;
}

/* ---- the per-step profile ---------------------------------------------------------------- */

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

void rl_cpu_profile(rl_cpu *c, bool on) {
    c->prof = on;
    c->n_prow = 0;
}

size_t rl_cpu_profile_rows(const rl_cpu *c, rl_prof_row *rows, size_t cap) {
    size_t n = c->n_prow < cap ? c->n_prow : cap;
    memcpy(rows, c->prow, n * sizeof *rows);
    return n;
}

/* Ends a step of the forward pass that read `bytes` (a no-op unless profiling). */
static void step(rl_cpu *c, const char *name, double bytes) {
    if (!c->prof) return;
    double t = now_us();
    rl_prof_add(c->prow, &c->n_prow, sizeof c->prow / sizeof *c->prow, name, t - c->t0, bytes);
    c->t0 = t;
}

/* ---- small fp32 helpers ---------------------------------------------------------------- */

static void rmsnorm(float *out, const float *x, const float *w, size_t n, float eps) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (size_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
}

/* q . k and out += a * v over one cached K/V head, stored as f16, f32 or 8-bit blocks. */
static float dot_kv(const float *q, const void *k, size_t n, int kv_type) {
    if (kv_type == RL_KV_Q8) { /* sum over blocks of d * q . k_int8 */
        const kv_q8 *b = k;
        float s = 0;
#ifdef RL_X86_SIMD
        __m256 acc = _mm256_setzero_ps(); /* one horizontal sum per head, not per block */
        for (size_t i = 0; i < n / 32; i++, q += 32) {
            __m256 d = _mm256_set1_ps(b[i].d);
            for (size_t j = 0; j < 32; j += 8) {
                __m256 kv = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b[i].q + j))));
                acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(q + j), d), kv, acc);
            }
        }
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        s = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
#else
        for (size_t i = 0; i < n / 32; i++, q += 32) {
            float t = 0;
            for (size_t j = 0; j < 32; j++) t += q[j] * (float)b[i].q[j];
            s += b[i].d * t;
        }
#endif
        return s;
    }
    bool f32 = kv_type == RL_KV_F32;
    const uint16_t *kh = k;
    const float *kf = k;
    size_t i = 0;
    float s = 0;
#ifdef RL_X86_SIMD
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        __m256 kv = f32 ? _mm256_loadu_ps(kf + i)
                        : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kh + i)));
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), kv, acc);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    s = _mm_cvtss_f32(h);
#endif
    for (; i < n; i++) s += q[i] * (f32 ? kf[i] : rl_f16_to_f32(kh[i]));
    return s;
}

static void axpy_kv(float *out, float a, const void *v, size_t n, int kv_type) {
    if (kv_type == RL_KV_Q8) {
        const kv_q8 *b = v;
        for (size_t i = 0; i < n / 32; i++, out += 32) {
            float ad = a * b[i].d;
#ifdef RL_X86_SIMD
            __m256 va = _mm256_set1_ps(ad);
            for (size_t j = 0; j < 32; j += 8) {
                __m256 vv = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b[i].q + j))));
                _mm256_storeu_ps(out + j, _mm256_fmadd_ps(va, vv, _mm256_loadu_ps(out + j)));
            }
#else
            for (size_t j = 0; j < 32; j++) out[j] += ad * (float)b[i].q[j];
#endif
        }
        return;
    }
    bool f32 = kv_type == RL_KV_F32;
    const uint16_t *vh = v;
    const float *vf = v;
    size_t i = 0;
#ifdef RL_X86_SIMD
    __m256 va = _mm256_set1_ps(a);
    for (; i + 8 <= n; i += 8) {
        __m256 vv = f32 ? _mm256_loadu_ps(vf + i)
                        : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vh + i)));
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(va, vv, _mm256_loadu_ps(out + i)));
    }
#endif
    for (; i < n; i++) out[i] += a * (f32 ? vf[i] : rl_f16_to_f32(vh[i]));
}

/* Rotates one head in place at position pos. llama pairs (2i, 2i+1); neox pairs (i, i+d/2). */
static void rope(float *h, size_t pos, const float *inv_freq, size_t rope_dim, bool neox) {
    size_t half = rope_dim / 2;
    for (size_t i = 0; i < half; i++) {
        float th = (float)pos * inv_freq[i];
        float cs = cosf(th), sn = sinf(th);
        size_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = h[a], x1 = h[b];
        /* Kept as separate products so the compiler cannot contract to FMA (lesson 6). */
        float m0 = x0 * cs, m1 = x1 * sn, m2 = x0 * sn, m3 = x1 * cs;
        h[a] = m0 - m1;
        h[b] = m2 + m3;
    }
}

/* ---- parallel matmul --------------------------------------------------------------------- */

/* Up to three matmuls over the same input run as one parallel region (Q/K/V, gate/up), split
 * over threads by row tiles so each thread streams a contiguous slice of weights. */
typedef struct mm_job {
    rl_mm mm[3];
    size_t rows[3];
    size_t tile[3];  /* rows per tile */
    size_t tiles[3]; /* tiles per matrix */
    size_t n, total;
} mm_job;

/* Items are row tiles, numbered across the job's matrices in order. */
static void mm_items(void *ctx, size_t t0, size_t t1, size_t ith) {
    mm_job *j = ctx;
    size_t base = 0;
    for (size_t i = 0; i < j->n; base += j->tiles[i], i++) {
        if (t1 <= base) break;
        size_t lo = t0 > base ? t0 - base : 0, hi = t1 - base;
        if (hi > j->tiles[i]) hi = j->tiles[i];
        if (lo >= hi) continue;
        size_t r1 = hi * j->tile[i];
        rl_mm_rows(&j->mm[i], lo * j->tile[i], r1 < j->rows[i] ? r1 : j->rows[i]);
    }
}

static void job_add(const rl_cpu *c, mm_job *j, const rl_matrix *w, const float *x, const rl_q8a *xq, size_t S,
                    float *y, size_t ys, bool acc) {
    size_t i = j->n++;
    j->mm[i] = (rl_mm){.type = w->type, .w = w->data, .row_bytes = w->row_bytes, .n = w->cols,
                       .S = S, .x = x, .xq = rl_type_fp32_act(w->type) ? NULL : xq, .y = y,
                       .ys = ys, .accumulate = acc, .packed = is_packed(c, w)};
    j->rows[i] = w->rows;
    j->tile[i] = rl_mm_row_tile(w->type);
    j->tiles[i] = (w->rows + j->tile[i] - 1) / j->tile[i];
    j->total += j->tiles[i];
}

typedef struct qa_job {
    const float *x;
    rl_q8a *xq;
    size_t S, n;
} qa_job;

/* Items are the batch's rows, independent of each other. */
static void qa_items(void *ctx, size_t lo, size_t hi, size_t ith) {
    qa_job *j = ctx;
    for (size_t s = lo; s < hi; s++)
        rl_q8a_quant_row(j->x + s * j->n, j->xq + s * (j->n / RL_QK), j->n);
}

/* Reports the input of matrix mat to the observe hook (calibration), then quantizes S rows of
 * n activations (row stride n) into c->xq when any of the matrices w[0..nw) that read them needs
 * it (a recipe may give Q and K/V, or gate and up, types with and without the 8-bit path; rl_mm
 * ignores xq for the fp32-activation types).
 * Rows go n/32 blocks apart, as rl_mm reads them (spacing them by the widest row's block count
 * broke every S > 1 batch whose n was not the widest). A batch is split over the threads (at
 * S = 64 this was ~5% of prefill time on one thread). */
static const rl_q8a *quant_act(rl_cpu *c, const float *x, size_t S, size_t n,
                               const rl_matrix *const *w, size_t nw, size_t mat) {
    if (c->observe) c->observe(c->observe_ctx, mat, x, S, n);
    bool need = false;
    for (size_t i = 0; i < nw; i++) need |= !rl_type_fp32_act(w[i]->type);
    if (c->exact || !need) return NULL;
    qa_job j = {x, c->xq, S, n};
    rl_pool_for(c->pool, qa_items, &j, S, 1); /* one row runs on this thread */
    return c->xq;
}

/* ---- attention ---------------------------------------------------------------------------- */

typedef struct att_job {
    rl_cpu *c;
    size_t layer, pos, S;
} att_job;

/* One (token, head) pair per item: causal softmax attention over the cached positions. */
static void att_items(void *ctx, size_t lo, size_t hi, size_t ith) {
    att_job *j = ctx;
    rl_cpu *c = j->c;
    const rl_config *cfg = &c->m->cfg;
    size_t hd = cfg->head_dim, group = cfg->n_head / cfg->n_head_kv;
    float scale = 1.0f / sqrtf((float)hd);
    float *att = c->att + ith * c->n_ctx;
    size_t row = c->kv_row, head = row / cfg->n_head_kv; /* bytes per position, per kv head */
    const uint8_t *kl = c->kc + j->layer * c->n_ctx * row;
    const uint8_t *vl = c->vc + j->layer * c->n_ctx * row;
    for (size_t it = lo; it < hi; it++) {
        size_t s = it / cfg->n_head, h = it % cfg->n_head, kvh = h / group;
        size_t n_pos = j->pos + s + 1;
        const float *q = c->q + s * c->q_dim + h * hd;
        float mx = -INFINITY;
        for (size_t p = 0; p < n_pos; p++) {
            const uint8_t *kp = kl + p * row + kvh * head;
            att[p] = dot_kv(q, kp, hd, c->kv_type) * scale;
            if (att[p] > mx) mx = att[p];
        }
        float sum = 0;
        for (size_t p = 0; p < n_pos; p++) {
            att[p] = expf(att[p] - mx);
            sum += att[p];
        }
        float *out = c->xb + s * c->q_dim + h * hd;
        memset(out, 0, hd * sizeof(float));
        float inv = 1.0f / sum;
        for (size_t p = 0; p < n_pos; p++)
            axpy_kv(out, att[p] * inv, vl + p * row + kvh * head, hd, c->kv_type);
    }
}

/* ---- SwiGLU --------------------------------------------------------------------------------- */

typedef struct silu_job {
    float *g;
    const float *u;
    size_t n;
} silu_job;

static void silu_items(void *ctx, size_t lo, size_t hi, size_t ith) {
    silu_job *j = ctx;
    for (size_t i = lo; i < hi; i++) {
        float g = j->g[i];
        j->g[i] = g / (1.0f + expf(-g)) * j->u[i];
    }
}

/* hb = silu(hb) * hb2 over n values; split over the threads for a batch (scalar expf over
 * S * n_ff values was ~3% of prefill on one thread). */
static void silu_mul(rl_cpu *c, size_t n) {
    silu_job j = {c->hb, c->hb2, n};
    if (n <= 8192) silu_items(&j, 0, n, 0);
    else rl_pool_for(c->pool, silu_items, &j, n, 1024);
}

/* ---- the forward pass ---------------------------------------------------------------------- */

static void run_job(rl_cpu *c, mm_job *j) { rl_pool_for(c->pool, mm_items, j, j->total, 1); }

static void forward_chunk(rl_cpu *c, const int32_t *tok, size_t S, size_t pos, float *logits,
                          bool all_logits) {
    const rl_model *m = c->m;
    const rl_config *cfg = &m->cfg;
    size_t D = cfg->n_embd, F = cfg->n_ff, hd = cfg->head_dim;

    if (c->prof) c->t0 = now_us();
    for (size_t s = 0; s < S; s++)
        rl_dequant_row(m->tok_embd.type,
                       (const uint8_t *)m->tok_embd.data + (size_t)tok[s] * m->tok_embd.row_bytes,
                       c->x + s * D, D);
    step(c, "embed", (double)S * m->tok_embd.row_bytes);

    for (size_t l = 0; l < cfg->n_layer; l++) {
        const rl_layer *L = &c->lay[l]; /* copies: repacked weights where packable */
        /* attention: x += Wo · attn(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x)) */
        for (size_t s = 0; s < S; s++)
            rmsnorm(c->xb + s * D, c->x + s * D, L->attn_norm, D, cfg->norm_eps);
        const rl_q8a *xq = quant_act(c, c->xb, S, D, (const rl_matrix *const[]){&L->wq, &L->wk, &L->wv}, 3, RL_CPU_MAT(l, 0));
        step(c, "norm+quantize", 0);
        mm_job qkv = {0};
        job_add(c, &qkv, &L->wq, c->xb, xq, S, c->q, c->q_dim, false);
        job_add(c, &qkv, &L->wk, c->xb, xq, S, c->k, c->kv_dim, false);
        job_add(c, &qkv, &L->wv, c->xb, xq, S, c->v, c->kv_dim, false);
        run_job(c, &qkv);
        step(c, "qkv", rl_matrix_bytes(&L->wq) + rl_matrix_bytes(&L->wk) + rl_matrix_bytes(&L->wv));

        for (size_t s = 0; s < S; s++) {
            float *q = c->q + s * c->q_dim, *k = c->k + s * c->kv_dim, *v = c->v + s * c->kv_dim;
            if (L->bq) {
                for (size_t i = 0; i < c->q_dim; i++) q[i] += L->bq[i];
                for (size_t i = 0; i < c->kv_dim; i++) k[i] += L->bk[i];
                for (size_t i = 0; i < c->kv_dim; i++) v[i] += L->bv[i];
            }
            for (size_t h = 0; h < cfg->n_head; h++) {
                if (L->q_norm) rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, cfg->norm_eps);
                rope(q + h * hd, pos + s, c->inv_freq, cfg->rope_dim, cfg->rope_neox);
            }
            for (size_t h = 0; h < cfg->n_head_kv; h++) {
                if (L->k_norm) rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, cfg->norm_eps);
                rope(k + h * hd, pos + s, c->inv_freq, cfg->rope_dim, cfg->rope_neox);
            }
            size_t off = (l * c->n_ctx + pos + s) * c->kv_row;
            kv_store(c->kv_type, k, c->kc + off, c->kv_dim);
            kv_store(c->kv_type, v, c->vc + off, c->kv_dim);
        }
        step(c, "rope+kv", 0);
        att_job aj = {c, l, pos, S};
        rl_pool_for(c->pool, att_items, &aj, S * cfg->n_head, 1);
        step(c, "attention", 2.0 * (double)c->kv_row * ((double)S * (double)pos + (double)S * (double)(S + 1) / 2));

        xq = quant_act(c, c->xb, S, c->q_dim, (const rl_matrix *const[]){&L->wo}, 1, RL_CPU_MAT(l, 3));
        step(c, "norm+quantize", 0);
        mm_job o = {0};
        job_add(c, &o, &L->wo, c->xb, xq, S, c->x, D, true);
        run_job(c, &o);
        step(c, "wo+residual", rl_matrix_bytes(&L->wo));

        /* feed-forward: x += Wdown · (silu(Wgate·norm(x)) * Wup·norm(x)) */
        for (size_t s = 0; s < S; s++)
            rmsnorm(c->xb + s * D, c->x + s * D, L->ffn_norm, D, cfg->norm_eps);
        xq = quant_act(c, c->xb, S, D, (const rl_matrix *const[]){&L->w_gate, &L->w_up}, 2, RL_CPU_MAT(l, 4));
        step(c, "norm+quantize", 0);
        mm_job gu = {0};
        job_add(c, &gu, &L->w_gate, c->xb, xq, S, c->hb, F, false);
        job_add(c, &gu, &L->w_up, c->xb, xq, S, c->hb2, F, false);
        run_job(c, &gu);
        step(c, "gate+up", rl_matrix_bytes(&L->w_gate) + rl_matrix_bytes(&L->w_up));
        silu_mul(c, S * F);
        xq = quant_act(c, c->hb, S, F, (const rl_matrix *const[]){&L->w_down}, 1, RL_CPU_MAT(l, 6));
        step(c, "silu+quantize", 0);
        mm_job dn = {0};
        job_add(c, &dn, &L->w_down, c->hb, xq, S, c->x, D, true);
        run_job(c, &dn);
        step(c, "down+residual", rl_matrix_bytes(&L->w_down));
    }

    if (!logits) return;
    size_t first = all_logits ? 0 : S - 1, n_out = S - first;
    for (size_t s = first; s < S; s++)
        rmsnorm(c->xb + (s - first) * D, c->x + s * D, m->output_norm, D, cfg->norm_eps);
    const rl_q8a *xq = quant_act(c, c->xb, n_out, D, (const rl_matrix *const[]){&c->output}, 1,
                                  RL_CPU_MAT_OUTPUT(cfg->n_layer));
    step(c, "norm+quantize", 0);
    mm_job out = {0};
    job_add(c, &out, &c->output, c->xb, xq, n_out, logits, cfg->n_vocab, false);
    run_job(c, &out);
    step(c, "lm_head", rl_matrix_bytes(&c->output));
}

int rl_cpu_forward(rl_cpu *c, const int32_t *tokens, size_t S, size_t pos, float *logits,
                   bool all_logits, rl_err *e) {
    const rl_config *cfg = &c->m->cfg;
    if (S == 0) return rl_fail(e, "forward: no tokens");
    if (pos > c->n_ctx || S > c->n_ctx - pos)
        return rl_fail(e, "context full: %zu tokens at position %zu exceed the context of %zu "
                       "tokens (use a larger -c)", S, pos, c->n_ctx);
    for (size_t i = 0; i < S; i++)
        if (tokens[i] < 0 || (size_t)tokens[i] >= cfg->n_vocab)
            return rl_fail(e, "token id %d at index %zu is out of range [0, %zu)", tokens[i], i,
                           cfg->n_vocab);
    for (size_t done = 0; done < S;) {
        size_t n = S - done < c->max_batch ? S - done : c->max_batch;
        bool last = done + n == S;
        float *lg = NULL;
        if (logits && all_logits) lg = logits + done * cfg->n_vocab;
        else if (logits && last) lg = logits;
        forward_chunk(c, tokens + done, n, pos + done, lg, all_logits);
        done += n;
    }
    return 0;
}
