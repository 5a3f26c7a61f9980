#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

int cli_session_open(cli_session *s, const char *path, const rl_backend_opts *o) {
    rl_err e = {{0}};
    memset(s, 0, sizeof *s);
    if (!path) {
        path = cli_default_model();
        FILE *f = fopen(path, "rb");
        if (!f) {
            fprintf(stderr, "rawloop: no -m given and the shipped model %s is missing (%s); "
                            "pass -m FILE.gguf\n", path, strerror(errno));
            return -1;
        }
        fclose(f);
    }
    if (rl_model_load(&s->model, path, &e) < 0) {
        fprintf(stderr, "rawloop: %s\n", e.msg);
        return -1;
    }
    const char *w = rl_tok_warning(s->model.tok);
    if (w) fprintf(stderr, "rawloop: warning: %s\n", w);
    if (rl_backend_open(&s->be, &s->model, o, &e) < 0) {
        fprintf(stderr, "rawloop: %s\n", e.msg);
        rl_model_free(&s->model);
        return -1;
    }
    s->loaded = true;
    return 0;
}

void cli_session_close(cli_session *s) {
    if (!s->loaded) return;
    rl_backend_close(&s->be);
    rl_model_free(&s->model);
    s->loaded = false;
}

int cli_parse_device(const char *text, enum rl_device *out) {
    if (rl_device_parse(text, out) == 0) return 0;
    fprintf(stderr, "rawloop: --device expects cpu, cuda or auto, got '%s'\n", text);
    return -1;
}

int cli_parse_kv_type(const char *text, int *kv_type) {
    static const char *const names[] = {"f16", "f32", "q8"}; /* enum rl_kv_type order */
    for (int i = 0; i < 3; i++)
        if (!strcmp(text, names[i])) {
            *kv_type = i;
            return 0;
        }
    fprintf(stderr, "rawloop: --kv-type expects f16, f32 or q8, got '%s'\n", text);
    return -1;
}

int cli_parse_prefill(const char *text, int *prefill) {
    if (!strcmp(text, "exact")) *prefill = RL_PREFILL_EXACT;
    else if (!strcmp(text, "fast")) *prefill = RL_PREFILL_FAST;
    else if (!strcmp(text, "auto")) *prefill = RL_PREFILL_AUTO;
    else {
        fprintf(stderr, "rawloop: --prefill expects exact, fast or auto, got '%s'\n", text);
        return -1;
    }
    return 0;
}

int cli_parse_ids(const char *text, int32_t **ids, size_t *n) {
    size_t cap = 16, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return -1;
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX) {
            fprintf(stderr, "rawloop: --ids: '%.20s' is not a token id\n", p);
            free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = end;
    }
    *ids = v;
    *n = k;
    return 0;
}

int cli_read_file(const char *path, char **buf, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "rawloop: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (!b) break;
        if (n + 1 >= cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
        }
        size_t r = fread(b + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = b == NULL || ferror(f);
    if (f != stdin) fclose(f);
    if (bad) {
        fprintf(stderr, "rawloop: cannot read %s\n", path);
        free(b);
        return -1;
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return 0;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cli_token_stream(rl_tokenizer *tok, const char *text, size_t len, int32_t **out, size_t *n,
                     bool *add_bos, rl_err *e) {
    int32_t *toks = NULL;
    size_t n_toks = 0;
    if (rl_tok_encode(tok, text, len, false, &toks, &n_toks, e) < 0) return -1;
    *add_bos = rl_tok_add_bos(tok) && rl_tok_bos(tok) >= 0;
    int32_t *all = malloc((n_toks + 1) * sizeof *all);
    if (!all) {
        free(toks);
        return rl_fail(e, "out of memory for %zu tokens", n_toks + 1);
    }
    if (*add_bos) all[0] = rl_tok_bos(tok);
    memcpy(all + *add_bos, toks, n_toks * sizeof *toks);
    free(toks);
    *out = all;
    *n = n_toks + *add_bos;
    return 0;
}
