/* The thread pool: rl_pool_run calls every thread exactly once a region; rl_pool_for runs every
 * item exactly once a region over every item count and claim size, passes thread indices in
 * range, lets the other threads take a stalled thread's share, never runs a finished region's
 * items in a later one (a context on the caller's stack, reused region after region), wakes
 * workers that went to sleep, and splits a region of more than 2^32 items. `make test-tsan`
 * runs this file under ThreadSanitizer. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "pool.h"

typedef struct run_ctx {
    _Atomic int hits[8];
    _Atomic int calls;
} run_ctx;

static void run_fn(void *ctx, size_t ith, size_t nth) {
    run_ctx *c = ctx;
    atomic_fetch_add(&c->hits[ith], 1);
    atomic_fetch_add(&c->calls, (int)nth);
}

static void test_run(void) {
    for (size_t n = 1; n <= 4; n++) {
        rl_pool *p;
        CHECK(rl_pool_new(&p, n, NULL) == 0, "pool of %zu", n);
        run_ctx c;
        memset(&c, 0, sizeof c);
        for (int r = 0; r < 1000; r++) rl_pool_run(p, run_fn, &c);
        for (size_t i = 0; i < n; i++)
            CHECK(c.hits[i] == 1000, "thread %zu ran %d times of 1000", i, (int)c.hits[i]);
        CHECK(c.calls == (int)(1000 * n * n), "nth passed correctly");
        rl_pool_free(p);
    }
}

#define MAX_ITEMS 70000

typedef struct for_ctx {
    _Atomic unsigned char *hits; /* [n] times each item ran */
    size_t n, nth;
    _Atomic int bad;             /* ranges out of bounds or thread index out of range */
    _Atomic size_t by_thread[8]; /* items each thread ran */
    int stall_ith;               /* this thread sleeps in its first claim (-1: none) */
    _Atomic int stalled;
} for_ctx;

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void for_fn(void *ctx, size_t lo, size_t hi, size_t ith) {
    for_ctx *c = ctx;
    if (lo >= hi || hi > c->n || ith >= c->nth) {
        atomic_store(&c->bad, 1);
        return;
    }
    if ((int)ith == c->stall_ith && !atomic_exchange(&c->stalled, 1)) sleep_ms(50);
    for (size_t i = lo; i < hi; i++) atomic_fetch_add(&c->hits[i], 1);
    atomic_fetch_add(&c->by_thread[ith], hi - lo);
}

/* Runs one region with a fresh context on this stack frame; 1 if every item ran once. */
static int for_once(rl_pool *p, _Atomic unsigned char *hits, size_t n, size_t min_claim,
                    int stall_ith, size_t *by_stalled) {
    for_ctx c = {.hits = hits, .n = n, .nth = rl_pool_size(p), .stall_ith = stall_ith};
    for (size_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
    rl_pool_for(p, for_fn, &c, n, min_claim);
    int ok = !atomic_load(&c.bad);
    for (size_t i = 0; i < n; i++) ok &= atomic_load(&hits[i]) == 1;
    if (by_stalled) *by_stalled = atomic_load(&c.by_thread[stall_ith]);
    return ok;
}

static void test_for(void) {
    static _Atomic unsigned char hits[MAX_ITEMS];
    const size_t counts[] = {0, 1, 2, 3, 7, 8, 9, 31, 100, 1000, 4097, 65537};
    const size_t claims[] = {1, 3, 64, 100000};
    for (size_t nth = 1; nth <= 4; nth++) {
        rl_pool *p;
        CHECK(rl_pool_new(&p, nth, NULL) == 0, "pool of %zu", nth);
        int bad = 0;
        for (int round = 0; round < 20; round++)
            for (size_t a = 0; a < sizeof counts / sizeof *counts; a++)
                for (size_t b = 0; b < sizeof claims / sizeof *claims; b++)
                    bad += !for_once(p, hits, counts[a], claims[b], -1, NULL);
        CHECK(bad == 0, "%zu threads: %d regions ran an item other than once", nth, bad);

        /* Thousands of short regions back to back: workers arrive late to many of them. */
        bad = 0;
        for (int r = 0; r < 20000; r++) bad += !for_once(p, hits, 1 + (size_t)r % 37, 1, -1, NULL);
        CHECK(bad == 0, "%zu threads, short regions: %d ran an item other than once", nth, bad);

        /* Workers asleep on the condition variable (the spin limit is well under 300 ms). */
        sleep_ms(300);
        CHECK(for_once(p, hits, 5000, 1, -1, NULL), "%zu threads: region after sleeping", nth);
        CHECK(atomic_load(&hits[0]) == 1, "first item after sleeping");

        if (nth >= 2) {
            /* Thread 1 stalls for 50 ms in its first claim; the other threads take the rest of
             * its share (2 claims a share) instead of waiting. */
            size_t n = 8000, by1 = 0;
            CHECK(for_once(p, hits, n, 1, 1, &by1), "%zu threads, a stalled worker", nth);
            CHECK(by1 < n / nth, "%zu threads: the stalled thread ran %zu items, its whole share",
                  nth, by1);
        }
        rl_pool_free(p);
    }
}

typedef struct big_ctx {
    _Atomic uint64_t covered, bad;
    uint64_t n;
} big_ctx;

static void big_fn(void *ctx, size_t lo, size_t hi, size_t ith) {
    big_ctx *c = ctx;
    if (lo >= hi || hi > c->n) atomic_fetch_add(&c->bad, 1);
    else atomic_fetch_add(&c->covered, hi - lo);
}

/* More items than the cursors' 32 bits hold: the region runs in pieces, each item once (large
 * claims, so no item is touched one by one). */
static void test_for_big(void) {
    rl_pool *p;
    CHECK(rl_pool_new(&p, 2, NULL) == 0, "pool of 2");
    big_ctx c = {.n = (uint64_t)UINT32_MAX * 2 + 12345};
    rl_pool_for(p, big_fn, &c, (size_t)c.n, (size_t)1 << 40);
    CHECK(atomic_load(&c.bad) == 0, "%llu ranges out of bounds", (unsigned long long)c.bad);
    CHECK(atomic_load(&c.covered) == c.n, "covered %llu of %llu items",
          (unsigned long long)c.covered, (unsigned long long)c.n);
    rl_pool_free(p);
}

int main(void) {
    test_run();
    test_for();
    test_for_big();
    return check_report("test_pool");
}
