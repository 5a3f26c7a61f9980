#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* Spin iterations before a worker goes to sleep: long enough to span the gap between two
 * regions of one token (microseconds), short enough that an idle pool stops burning a core. */
#define SPIN_LIMIT 200000
/* After this many pauses a spinning thread yields its core each time round: on an oversubscribed
 * machine the thread it waits for may be the one that needs the core. */
#define YIELD_AFTER 20000
/* rl_pool_for: claims per thread's share. More claims leave less behind a thread that is
 * descheduled holding one, but cost on a quiet machine: TinyLlama's CPU decode lost 2.5% at 8,
 * within the noise of one claim a share at 2 and 4; beside a busy process 2, 4 and 8 decoded
 * alike, one claim a share gained less (docs/PERF.md, "Work stealing in the thread pool"). */
#define CLAIMS_PER_SHARE 2

/* One thread's share of an rl_pool_for region: (region tag << 32) | its next unclaimed item.
 * A cache line each, so that a thread claiming from its own share touches no other's line. */
typedef struct cursor {
    _Alignas(64) _Atomic uint64_t v;
} cursor;

/* A region's fields are written by the caller and read by the workers as a seqlock: `seq` is
 * odd while they are written and even once they are published, and a worker that finds `seq`
 * changed after copying them drops the copy. A worker may come late to an rl_pool_for region,
 * after the caller has returned from it and is writing the next; its claims then fail (the
 * cursors carry the newer tag), so it never runs a finished region's items or touches its
 * context. The tag is the region's number modulo 2^32: only a worker descheduled for exactly a
 * multiple of 2^32 regions could mistake one for another. */
struct rl_pool {
    size_t n;                 /* threads including the caller */
    pthread_t *threads;       /* [n - 1] workers */
    cursor *cur;              /* [n] shares of the current rl_pool_for region */
    _Atomic int quit;
    pthread_mutex_t mu;       /* with cv: sleeping workers wait for the next region */
    pthread_cond_t cv;
    /* 2r + 1 while region r is written, 2r + 2 once published. Its own line: the workers poll
     * it while the caller writes the fields below. */
    _Alignas(64) _Atomic uint64_t seq;
    _Alignas(64) _Atomic(rl_pool_fn) fn; /* rl_pool_run's region; NULL for rl_pool_for's */
    _Atomic(rl_pool_items_fn) ifn;
    _Atomic(void *) ctx;
    _Atomic size_t items, claim;
    /* rl_pool_run: workers finished; rl_pool_for: items finished. Its own line: the caller
     * polls it while the workers read the region's fields. */
    _Alignas(64) _Atomic size_t done;
};

typedef struct worker_arg {
    rl_pool *p;
    size_t ith;
} worker_arg;

static uint32_t tag_of(uint64_t seq) { return (uint32_t)(seq >> 1); }

/* One round of a wait: a pause, and past YIELD_AFTER rounds the core given up instead. */
static void backoff(int spins) {
    if (spins > YIELD_AFTER) sched_yield();
    else cpu_relax();
}

/* The first published region after `seen`. */
static uint64_t wait_next(rl_pool *p, uint64_t seen) {
    for (int spins = 0;; spins++) {
        uint64_t s = atomic_load_explicit(&p->seq, memory_order_acquire);
        if (s != seen && !(s & 1)) return s;
        if (spins < SPIN_LIMIT) {
            backoff(spins);
            continue;
        }
        pthread_mutex_lock(&p->mu);
        while ((s = atomic_load_explicit(&p->seq, memory_order_acquire)) == seen || (s & 1))
            pthread_cond_wait(&p->cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
        return s;
    }
}

/* Claims and runs items of the region tagged `tag`: thread ith's own share first, then the
 * others' in turn. Returns when no share has an item left or the region is over. */
static void take_items(rl_pool *p, uint32_t tag, size_t ith, rl_pool_items_fn fn, void *ctx,
                       size_t items, size_t claim) {
    size_t ran = 0; /* counted once at the end: `done` is one line that every thread writes */
    for (size_t k = 0; k < p->n; k++) {
        size_t v = (ith + k) % p->n, end = items * (v + 1) / p->n;
        _Atomic uint64_t *cur = &p->cur[v].v;
        uint64_t c = atomic_load_explicit(cur, memory_order_acquire);
        for (;;) {
            if ((uint32_t)(c >> 32) != tag) goto out;
            size_t lo = (uint32_t)c;
            if (lo >= end) break;
            size_t hi = end - lo > claim ? lo + claim : end;
            uint64_t next = ((uint64_t)tag << 32) | hi;
            if (!atomic_compare_exchange_weak_explicit(cur, &c, next, memory_order_acq_rel,
                                                       memory_order_acquire))
                continue;
            fn(ctx, lo, hi, ith);
            ran += hi - lo;
            c = atomic_load_explicit(cur, memory_order_acquire);
        }
    }
out:
    if (ran) atomic_fetch_add_explicit(&p->done, ran, memory_order_release);
}

static void *worker(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    rl_pool *p = wa.p;
    uint64_t seen = 0;
    for (;;) {
        uint64_t s = wait_next(p, seen);
        seen = s;
        if (atomic_load(&p->quit)) return NULL;
        rl_pool_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        rl_pool_items_fn ifn = atomic_load_explicit(&p->ifn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
        size_t items = atomic_load_explicit(&p->items, memory_order_relaxed);
        size_t claim = atomic_load_explicit(&p->claim, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&p->seq, memory_order_relaxed) != s) continue; /* came late */
        if (fn) {
            fn(ctx, wa.ith, p->n);
            atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        } else {
            take_items(p, tag_of(s), wa.ith, ifn, ctx, items, claim);
        }
    }
}

/* Publishes the next region (its fields written inside the odd phase) and wakes the sleepers. */
static uint64_t publish(rl_pool *p, rl_pool_fn fn, rl_pool_items_fn ifn, void *ctx, size_t items,
                        size_t claim) {
    uint64_t s = atomic_load_explicit(&p->seq, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->seq, s, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ifn, ifn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->items, items, memory_order_relaxed);
    atomic_store_explicit(&p->claim, claim, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    for (size_t v = 0; !fn && v < p->n; v++)
        atomic_store_explicit(&p->cur[v].v, ((uint64_t)tag_of(s + 1) << 32) | (items * v / p->n),
                              memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->seq, s + 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return s + 1;
}

static void wait_done(rl_pool *p, size_t want) {
    for (int spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) != want; spins++)
        backoff(spins);
}

int rl_pool_new(rl_pool **out, size_t n_threads, rl_err *e) {
    if (n_threads == 0) n_threads = 1;
    rl_pool *p = aligned_alloc(_Alignof(rl_pool), sizeof *p); /* sizeof is a multiple of it */
    if (!p) return rl_fail(e, "out of memory creating a thread pool");
    memset(p, 0, sizeof *p);
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc(n_threads, sizeof *p->threads);
    p->cur = aligned_alloc(sizeof(cursor), n_threads * sizeof(cursor));
    if (!p->threads || !p->cur) {
        p->n = 1;
        rl_pool_free(p);
        return rl_fail(e, "out of memory creating a thread pool");
    }
    for (size_t i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa || pthread_create(&p->threads[i - 1], NULL, worker, (wa->p = p, wa->ith = i, wa))) {
            free(wa);
            p->n = i; /* the workers started so far get joined */
            rl_pool_free(p);
            return rl_fail(e, "cannot start thread %zu of %zu", i, n_threads);
        }
    }
    *out = p;
    return 0;
}

void rl_pool_free(rl_pool *p) {
    if (!p) return;
    atomic_store(&p->quit, 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->seq, 2, memory_order_acq_rel);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p->cur);
    free(p);
}

size_t rl_pool_size(const rl_pool *p) { return p->n; }

void rl_pool_run(rl_pool *p, rl_pool_fn fn, void *ctx) {
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    publish(p, fn, NULL, ctx, 0, 0);
    fn(ctx, 0, p->n);
    wait_done(p, p->n - 1);
}

/* Items beyond 2^32 - 1 (none in the forward pass) run as several regions: the cursors hold
 * 32-bit item numbers. */
typedef struct offset_items {
    rl_pool_items_fn fn;
    void *ctx;
    size_t base;
} offset_items;

static void offset_fn(void *ctx, size_t lo, size_t hi, size_t ith) {
    offset_items *o = ctx;
    o->fn(o->ctx, o->base + lo, o->base + hi, ith);
}

void rl_pool_for(rl_pool *p, rl_pool_items_fn fn, void *ctx, size_t n, size_t min_claim) {
    const size_t piece = UINT32_MAX;
    if (n > piece) {
        for (size_t base = 0; base < n; base += piece) {
            offset_items o = {fn, ctx, base};
            rl_pool_for(p, offset_fn, &o, n - base < piece ? n - base : piece, min_claim);
        }
        return;
    }
    if (n == 0) return;
    if (p->n == 1 || n == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    size_t claim = (n + p->n * CLAIMS_PER_SHARE - 1) / (p->n * CLAIMS_PER_SHARE);
    if (claim < min_claim) claim = min_claim;
    uint64_t s = publish(p, NULL, fn, ctx, n, claim);
    take_items(p, tag_of(s), 0, fn, ctx, n, claim);
    wait_done(p, n);
}

size_t rl_ncpu(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (size_t)n : 1;
}
