/* Matmul micro-benchmark: TinyLlama-1.1B-shaped weight matrices (n=2048: 2048, 5632 and 32000
 * rows; n=5632: 2048 rows), larger than L3 in total so decode reads come from DRAM.
 *
 *   build/bench_mm [seconds-per-case [TYPE]]   TYPE e.g. Q4_0, Q4_0x8 (row-interleaved)
 *
 * Prints, per weight type and thread count, GB/s of weights for S=1 (decode) and GFLOP/s for
 * S=64 (prefill), plus a read-stream probe (the DRAM ceiling decode is measured against).
 * Threads split rows on rl_mm_row_tile boundaries, like the engine's pool. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define MAXT 2

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* ---- a tiny pool: workers wait on a barrier, run job(tid), meet again ------------------- */

typedef struct pool {
    pthread_t th[MAXT];
    pthread_barrier_t start, done;
    int nt;
    void (*job)(void *ctx, int tid, int nt);
    void *ctx;
    int quit;
} pool;

typedef struct worker_arg {
    pool *p;
    int tid;
} worker_arg;

static void *worker(void *arg) {
    worker_arg *wa = arg;
    pool *p = wa->p;
    for (;;) {
        pthread_barrier_wait(&p->start);
        if (p->quit) return NULL;
        p->job(p->ctx, wa->tid, p->nt);
        pthread_barrier_wait(&p->done);
    }
}

static worker_arg g_args[MAXT];

static void pool_init(pool *p, int nt) {
    p->nt = nt;
    p->quit = 0;
    pthread_barrier_init(&p->start, NULL, (unsigned)nt);
    pthread_barrier_init(&p->done, NULL, (unsigned)nt);
    for (int t = 1; t < nt; t++) {
        g_args[t] = (worker_arg){p, t};
        pthread_create(&p->th[t], NULL, worker, &g_args[t]);
    }
}

static void pool_run(pool *p, void (*job)(void *, int, int), void *ctx) {
    p->job = job;
    p->ctx = ctx;
    if (p->nt > 1) pthread_barrier_wait(&p->start);
    job(ctx, 0, p->nt);
    if (p->nt > 1) pthread_barrier_wait(&p->done);
}

static void pool_free(pool *p) {
    p->quit = 1;
    if (p->nt > 1) pthread_barrier_wait(&p->start);
    for (int t = 1; t < p->nt; t++) pthread_join(p->th[t], NULL);
    pthread_barrier_destroy(&p->start);
    pthread_barrier_destroy(&p->done);
}

/* ---- matmul jobs --------------------------------------------------------------------------- */

typedef struct mat {
    size_t n, rows;
    void *w;
    size_t row_bytes;
} mat;

static const struct { size_t n, rows; } k_shapes[] = {{2048, 2048}, {2048, 5632}, {2048, 32000}, {5632, 2048}};
#define NSHAPES (sizeof k_shapes / sizeof k_shapes[0])

static void mm_job(void *ctx, int tid, int nt) {
    const rl_mm *m = ctx;
    /* rows in tiles, tiles split evenly over threads */
    size_t rows = m->ys, tile = rl_mm_row_tile(m->type);
    size_t ntile = (rows + tile - 1) / tile;
    size_t t0 = ntile * (size_t)tid / (size_t)nt, t1 = ntile * (size_t)(tid + 1) / (size_t)nt;
    size_t r0 = t0 * tile, r1 = t1 * tile < rows ? t1 * tile : rows;
    if (r0 < r1) rl_mm_rows(m, r0, r1);
}

static void fill(uint32_t type, mat *mt) {
    const rl_type_info *ti = rl_type_get(type);
    size_t nb = mt->n / ti->blck * mt->rows, bytes = nb * ti->size;
    uint8_t *w = aligned_alloc(64, (bytes + 63) / 64 * 64);
    for (size_t i = 0; i < bytes; i += 4) {
        uint32_t r = rnd();
        memcpy(w + i, &r, bytes - i < 4 ? bytes - i : 4);
    }
    /* finite, small scales so no NaN/Inf slows anything */
    size_t off = type == RL_Q6_K ? 208 : 0;
    for (size_t b = 0; b < nb; b++) {
        uint16_t h = rl_f32_to_f16(0.01f);
        if (type == RL_F16) h = rl_f32_to_f16((float)(rnd() % 1000) * 1e-3f - 0.5f);
        if (type == RL_FP8) h = rl_f32_to_bf16(0.01f);
        memcpy(w + b * ti->size + off, &h, 2);
        if (type == RL_Q4_K || type == RL_Q4_1 || type == RL_Q5_1) memcpy(w + b * ti->size + 2, &h, 2); /* dmin / m */
    }
    mt->w = w;
    mt->row_bytes = rl_row_bytes(type, mt->n);
}

static void bench_type(uint32_t type, bool packed, double secs) {
    mat mats[NSHAPES];
    size_t total_bytes = 0;
    for (size_t i = 0; i < NSHAPES; i++) {
        mats[i].n = k_shapes[i].n;
        mats[i].rows = k_shapes[i].rows;
        fill(type, &mats[i]);
        if (packed) {
            void *p = aligned_alloc(64, (mats[i].row_bytes * mats[i].rows + 63) / 64 * 64);
            rl_pack_rows(type, mats[i].w, mats[i].row_bytes, mats[i].rows, mats[i].n, p);
            free(mats[i].w);
            mats[i].w = p;
        }
        total_bytes += mats[i].row_bytes * mats[i].rows;
    }
    const size_t Smax = 64, nmax = 5632;
    float *x = malloc(sizeof(float) * Smax * nmax);
    rl_q8a *xq = malloc(rl_q8a_row_bytes(nmax) * Smax);
    float *y = malloc(sizeof(float) * Smax * 32000);
    for (size_t i = 0; i < Smax * nmax; i++) x[i] = (float)(rnd() % 2001) * 1e-3f - 1.0f;
    bool fast = !rl_type_fp32_act(type);

    for (int nt = 1; nt <= MAXT; nt++) {
        pool p;
        pool_init(&p, nt);
        for (size_t S = 1; S <= Smax; S += Smax - 1) {
            size_t total_flops = 0;
            double best = 1e30;
            for (int rep = 0; rep < 1000; rep++) {
                double t0 = now();
                for (size_t i = 0; i < NSHAPES; i++) {
                    const mat *mt = &mats[i];
                    if (rep == 0 && fast)
                        for (size_t s = 0; s < S; s++) rl_q8a_quant_row(x + s * mt->n, xq + s * (mt->n / 32), mt->n);
                    /* ys doubles as the row count for mm_job (y is [S][rows]) */
                    rl_mm m = {.type = type, .w = mt->w, .row_bytes = mt->row_bytes, .n = mt->n, .S = S,
                               .x = x, .xq = fast ? xq : NULL, .y = y, .ys = mt->rows, .accumulate = false,
                               .packed = packed};
                    pool_run(&p, mm_job, &m);
                    if (rep == 0) total_flops += 2 * mt->n * mt->rows * S;
                }
                double dt = now() - t0;
                /* the first pass quantized activations: not timed as a sample */
                if (rep > 0 && dt < best) best = dt;
                static double spent;
                spent = rep == 0 ? 0 : spent + dt;
                if (rep > 2 && spent > secs) break;
            }
            if (S == 1)
                printf("%-5s%s threads=%d S=1   %7.1f GB/s   (%.2f ms per %zu MB pass)\n", rl_type_name(type), packed ? "x8" : "", nt,
                       (double)total_bytes / best * 1e-9, best * 1e3, total_bytes >> 20);
            else
                printf("%-5s%s threads=%d S=%-3zu %7.1f GFLOP/s (%.2f ms per pass)\n", rl_type_name(type), packed ? "x8" : "", nt, S,
                       (double)total_flops / best * 1e-9, best * 1e3);
            fflush(stdout);
        }
        pool_free(&p);
    }
    for (size_t i = 0; i < NSHAPES; i++) free(mats[i].w);
    free(x);
    free(xq);
    free(y);
}

/* ---- read-stream probe ---------------------------------------------------------------------- */

typedef struct stream_ctx {
    const uint8_t *buf;
    size_t bytes;
    double sink[MAXT];
} stream_ctx;

static void stream_job(void *ctx, int tid, int nt) {
    stream_ctx *c = ctx;
    size_t per = c->bytes / (size_t)nt / 128 * 128;
    const uint8_t *p = c->buf + per * (size_t)tid;
#if defined(__AVX2__)
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < per; i += 128) {
        a0 = _mm256_add_epi32(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi32(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi32(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi32(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3));
    c->sink[tid] = (double)_mm256_extract_epi32(s, 0);
#else
    uint64_t s = 0;
    for (size_t i = 0; i < per; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        s += v;
    }
    c->sink[tid] = (double)s;
#endif
}

static void bench_stream(void) {
    stream_ctx c = {.bytes = (size_t)2 << 30};
    uint8_t *buf = aligned_alloc(64, c.bytes);
    if (!buf) {
        printf("stream: cannot allocate 2 GiB\n");
        return;
    }
    memset(buf, 1, c.bytes);
    c.buf = buf;
    for (int nt = 1; nt <= MAXT; nt++) {
        pool p;
        pool_init(&p, nt);
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now();
            pool_run(&p, stream_job, &c);
            double dt = now() - t0;
            if (dt < best) best = dt;
        }
        printf("stream threads=%d %7.1f GB/s (AVX2 loads over 2 GiB)\n", nt, (double)c.bytes / best * 1e-9);
        pool_free(&p);
    }
    free(buf);
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 0.5;
    printf("simd: %s\n", rl_simd_name());
    /* optional filter: build/bench_mm SECS TYPE[x8] runs one case (e.g. Q4_0x8) and no stream probe */
    const char *only = argc > 2 ? argv[2] : NULL;
    if (!only) bench_stream();
    const uint32_t types[] = {RL_Q4_0, RL_Q8_0, RL_Q4_1, RL_Q5_0, RL_Q5_1, RL_Q4_K, RL_Q6_K, RL_F16, RL_FP8};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (int pk = 0; pk < 2; pk++) {
            if (pk && !rl_pack_supported(types[i], 2048, 2048)) continue;
            char name[16];
            snprintf(name, sizeof name, "%s%s", rl_type_name(types[i]), pk ? "x8" : "");
            if (only && strcmp(only, name) != 0) continue;
            bench_type(types[i], pk, secs);
        }
    return 0;
}
