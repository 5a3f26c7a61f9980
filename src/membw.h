/* Measures the machine's memory read bandwidth the way the benchmarks use it: n threads each
 * stream a slice of a buffer much larger than the caches with wide loads. */
#ifndef RL_MEMBW_H
#define RL_MEMBW_H

#include <stddef.h>

/* Best of `reps` passes over `bytes` bytes (0 = 1 GiB) with n_threads threads; GB/s (1e9).
 * Returns 0 if the buffer cannot be allocated. */
double rl_measure_read_gbps(size_t n_threads, size_t bytes, int reps);

#endif
