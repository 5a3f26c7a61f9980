#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int rl_fail(rl_err *e, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int rl_wrap(rl_err *e, const char *fmt, ...) {
    if (e) {
        char prefix[512], old[sizeof e->msg];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof prefix, fmt, ap);
        va_end(ap);
        memcpy(old, e->msg, sizeof old);
        size_t n = strlen(prefix), m = strnlen(old, sizeof old - 1);
        if (n > sizeof e->msg - 1) n = sizeof e->msg - 1;
        if (m > sizeof e->msg - 1 - n) m = sizeof e->msg - 1 - n;
        memcpy(e->msg, prefix, n);
        memcpy(e->msg + n, old, m);
        e->msg[n + m] = 0;
    }
    return -1;
}
