/* Minimal assertion helpers for the C unit tests. Each test binary counts its checks and
 * exits non-zero when any failed; tests/py/test_units.py runs every binary under pytest. */
#ifndef RL_CHECK_H
#define RL_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_total, check_failed;

#define CHECK(cond, ...)                                                               \
    do {                                                                               \
        check_total++;                                                                 \
        if (!(cond)) {                                                                 \
            check_failed++;                                                            \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                              \
            fputc('\n', stderr);                                                       \
        }                                                                              \
    } while (0)

static inline int check_report(const char *name) {
    printf("%s: %d checks, %d failed\n", name, check_total, check_failed);
    return check_failed ? 1 : 0;
}

#endif
