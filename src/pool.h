/* A fixed pool of worker threads for the forward pass.
 *
 * A decode step runs ~10 parallel regions per layer, a few hundred per token, so waking
 * workers through a condition variable each time would cost more than the work. Workers spin on
 * a generation counter for a while after each region and only then sleep. */
#ifndef RL_POOL_H
#define RL_POOL_H

#include <stddef.h>

#include "err.h"

typedef struct rl_pool rl_pool;

/* fn(ctx, ith, nth) is called once on each of nth threads; ith = 0 is the caller. */
typedef void (*rl_pool_fn)(void *ctx, size_t ith, size_t nth);

int rl_pool_new(rl_pool **out, size_t n_threads, rl_err *e);
void rl_pool_free(rl_pool *p);
size_t rl_pool_size(const rl_pool *p);
/* Runs fn on every thread and returns when all are done. Not reentrant. */
void rl_pool_run(rl_pool *p, rl_pool_fn fn, void *ctx);

/* Number of online CPUs (the default thread count). */
size_t rl_ncpu(void);

#endif
