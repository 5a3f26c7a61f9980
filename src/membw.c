#include "membw.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "pool.h"

typedef struct bw_job {
    const uint8_t *buf;
    size_t bytes;
    uint64_t sink[64];
} bw_job;

static void bw_worker(void *ctx, size_t ith, size_t nth) {
    bw_job *j = ctx;
    size_t chunk = j->bytes / nth / 256 * 256;
    const uint8_t *p = j->buf + ith * chunk;
#ifdef __AVX2__
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < chunk; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    j->sink[ith % 64] = (uint64_t)_mm256_extract_epi64(a0, 0);
#else
    uint64_t a = 0;
    for (size_t i = 0; i < chunk; i += 8) a ^= *(const uint64_t *)(p + i);
    j->sink[ith % 64] = a;
#endif
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double rl_measure_read_gbps(size_t n_threads, size_t bytes, int reps) {
    if (!bytes) bytes = (size_t)1 << 30;
    uint8_t *buf = aligned_alloc(64, bytes);
    if (!buf) return 0;
    memset(buf, 1, bytes); /* touch every page so the timing sees no page faults */
    rl_pool *pool;
    if (rl_pool_new(&pool, n_threads, NULL) < 0) {
        free(buf);
        return 0;
    }
    bw_job j = {.buf = buf, .bytes = bytes};
    double best = 0;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now_s();
        rl_pool_run(pool, bw_worker, &j);
        double dt = now_s() - t0;
        size_t read = bytes / n_threads / 256 * 256 * n_threads;
        if (r > 0 && read / dt / 1e9 > best) best = read / dt / 1e9; /* first pass warms up */
    }
    rl_pool_free(pool);
    free(buf);
    return best;
}
