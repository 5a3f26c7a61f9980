/* Error reporting for library code.
 *
 * Library functions never exit or print: they return 0 on success and -1 on failure, with a
 * message in an rl_err that names the file, field or tensor, what was expected and what was
 * found. Only main() decides to print and exit. */
#ifndef RL_ERR_H
#define RL_ERR_H

#include <stddef.h>

typedef struct rl_err {
    char msg[1024];
} rl_err;

/* Sets e->msg (e may be NULL) and returns -1, so callers can write `return rl_fail(e, ...)`. */
int rl_fail(rl_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes an existing message ("loading x.gguf: " + old message); returns -1. */
int rl_wrap(rl_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
