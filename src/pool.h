/* A fixed pool of worker threads for the forward pass.
 *
 * A decode step runs 5 parallel regions per layer (a batch a few more), over a hundred per
 * token, so waking workers through a condition variable each time would cost more than the
 * work. Workers spin on a sequence counter for a while after each region and only then sleep.
 *
 * Two kinds of region:
 * - rl_pool_run calls fn once on every thread and waits for all of them (loading, quantizing,
 *   the bandwidth probe: work that is one share per thread by construction);
 * - rl_pool_for hands out items [0, n) in claims: each thread first takes claims from its own
 *   share (so a thread reads the same rows token after token), then from the others' shares
 *   once its own is done. The caller waits only until every item has run, never for a thread
 *   that claimed nothing: on a machine where another process holds a core, a worker that is not
 *   scheduled loses its share to the threads that are instead of stalling every region for a
 *   scheduler time slice. Which thread runs an item never changes what the item computes. */
#ifndef RL_POOL_H
#define RL_POOL_H

#include <stddef.h>

#include "err.h"

typedef struct rl_pool rl_pool;

/* fn(ctx, ith, nth) is called once on each of nth threads; ith = 0 is the caller. */
typedef void (*rl_pool_fn)(void *ctx, size_t ith, size_t nth);
/* fn(ctx, lo, hi, ith) runs items [lo, hi) on thread ith (< rl_pool_size: an index for the
 * thread's scratch space). */
typedef void (*rl_pool_items_fn)(void *ctx, size_t lo, size_t hi, size_t ith);

int rl_pool_new(rl_pool **out, size_t n_threads, rl_err *e);
void rl_pool_free(rl_pool *p);
size_t rl_pool_size(const rl_pool *p);
/* Runs fn on every thread and returns when all are done. Not reentrant. */
void rl_pool_run(rl_pool *p, rl_pool_fn fn, void *ctx);
/* Runs fn over items [0, n) and returns when every item has run, each exactly once. A claim is
 * half a thread's share (rounded up) and at least min_claim items. Not reentrant. */
void rl_pool_for(rl_pool *p, rl_pool_items_fn fn, void *ctx, size_t n, size_t min_claim);

/* Number of online CPUs (the default thread count). */
size_t rl_ncpu(void);

#endif
