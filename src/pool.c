#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
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

struct rl_pool {
    size_t n;             /* threads including the caller */
    pthread_t *threads;   /* [n - 1] workers */
    _Atomic size_t gen;   /* bumped once per region */
    _Atomic size_t done;  /* workers finished with the current region */
    _Atomic int quit;
    rl_pool_fn fn;
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

typedef struct worker_arg {
    rl_pool *p;
    size_t ith;
} worker_arg;

static void *worker(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    rl_pool *p = wa.p;
    size_t seen = 0;
    for (;;) {
        size_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (++spins < SPIN_LIMIT) {
                if (spins > YIELD_AFTER) sched_yield();
                else cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen)
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        seen = g;
        if (atomic_load(&p->quit)) return NULL;
        p->fn(p->ctx, wa.ith, p->n);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel);
    }
}

int rl_pool_new(rl_pool **out, size_t n_threads, rl_err *e) {
    if (n_threads == 0) n_threads = 1;
    rl_pool *p = calloc(1, sizeof *p);
    if (!p) return rl_fail(e, "out of memory creating a thread pool");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc(n_threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
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

static void bump(rl_pool *p) {
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void rl_pool_free(rl_pool *p) {
    if (!p) return;
    atomic_store(&p->quit, 1);
    bump(p);
    for (size_t i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

size_t rl_pool_size(const rl_pool *p) { return p->n; }

void rl_pool_run(rl_pool *p, rl_pool_fn fn, void *ctx) {
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_release);
    bump(p);
    fn(ctx, 0, p->n);
    for (int spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) != p->n - 1; spins++) {
        if (spins > YIELD_AFTER) sched_yield();
        else cpu_relax();
    }
}

size_t rl_ncpu(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (size_t)n : 1;
}
