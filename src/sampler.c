#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct rl_sampler {
    rl_sampler_opts o;
    size_t n_vocab;
    cand *c;         /* [n_vocab] working candidates */
    float *p;        /* [n_vocab] probabilities */
    int32_t *recent; /* ring of the last repeat_last_n tokens */
    size_t n_recent, head;
    uint64_t rng;
};

rl_sampler_opts rl_sampler_defaults(void) {
    return (rl_sampler_opts){.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                             .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0x5eed};
}

int rl_sampler_new(rl_sampler **out, const rl_sampler_opts *o, size_t n_vocab, rl_err *e) {
    if (n_vocab == 0) return rl_fail(e, "sampler: empty vocabulary");
    if (!(o->repeat_penalty > 0)) return rl_fail(e, "sampler: repeat penalty must be > 0");
    rl_sampler *s = calloc(1, sizeof *s);
    if (!s) return rl_fail(e, "out of memory");
    s->o = *o;
    s->n_vocab = n_vocab;
    s->c = malloc(n_vocab * sizeof *s->c);
    s->p = malloc(n_vocab * sizeof *s->p);
    s->recent = malloc((o->repeat_last_n ? o->repeat_last_n : 1) * sizeof *s->recent);
    if (!s->c || !s->p || !s->recent) {
        rl_sampler_free(s);
        return rl_fail(e, "out of memory");
    }
    /* splitmix64 of the seed so small seeds still give well-mixed states */
    uint64_t z = o->seed + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    s->rng = (z ^ (z >> 31)) | 1;
    *out = s;
    return 0;
}

void rl_sampler_free(rl_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->p);
    free(s->recent);
    free(s);
}

void rl_sampler_accept(rl_sampler *s, int32_t tok) {
    if (!s->o.repeat_last_n) return;
    s->recent[s->head] = tok;
    s->head = (s->head + 1) % s->o.repeat_last_n;
    if (s->n_recent < s->o.repeat_last_n) s->n_recent++;
}

/* xorshift64* -> uniform in [0, 1) with 24 bits, exactly representable as float */
static float rng_uniform(rl_sampler *s) {
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return (float)((s->rng * 0x2545F4914F6CDD1DULL) >> 40) / 16777216.0f;
}

int32_t rl_argmax(const float *x, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id; /* stable order on ties: lower id first */
}

/* Min-heap by "worse candidate first" order (the reverse of cmp_cand). */
static void heap_up(cand *h, size_t i) {
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (cmp_cand(&h[i], &h[p]) <= 0) break;
        cand t = h[i]; h[i] = h[p]; h[p] = t;
        i = p;
    }
}

static void heap_down(cand *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cmp_cand(&h[l], &h[w]) > 0) w = l;
        if (r < n && cmp_cand(&h[r], &h[w]) > 0) w = r;
        if (w == i) return;
        cand t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}

int32_t rl_sampler_sample(rl_sampler *s, const float *logits) {
    size_t n = s->n_vocab;
    for (size_t i = 0; i < n; i++) s->c[i] = (cand){logits[i], (int32_t)i};
    if (s->o.repeat_penalty != 1.0f) {
        for (size_t r = 0; r < s->n_recent; r++) {
            int32_t t = s->recent[r];
            if (t < 0 || (size_t)t >= n) continue;
            float *l = &s->c[t].logit;
            /* apply once per distinct token: mark by comparing with the original logit */
            if (*l != logits[t]) continue;
            *l = *l > 0 ? *l / s->o.repeat_penalty : *l * s->o.repeat_penalty;
        }
    }
    if (s->o.temp <= 0) {
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (s->c[i].logit > s->c[best].logit) best = i;
        return s->c[best].id;
    }
    /* top-k: keep the k best, sorted. A bounded min-heap costs O(n log k), which matters at
     * 150k-token vocabularies where a full sort per token would rival the forward pass. */
    size_t k = n;
    if (s->o.top_k > 0 && (size_t)s->o.top_k < n) k = (size_t)s->o.top_k;
    if (k < n) {
        cand *h = s->c; /* h[0..k) is a min-heap (worst kept candidate at the root) */
        for (size_t i = 0; i < k; i++) heap_up(h, i);
        for (size_t i = k; i < n; i++)
            if (cmp_cand(&s->c[i], &h[0]) < 0) {
                h[0] = s->c[i];
                heap_down(h, k, 0);
            }
    }
    qsort(s->c, k, sizeof *s->c, cmp_cand);
    /* softmax over the k kept (without temperature, as llama.cpp's top-p/min-p see it) */
    float mx = s->c[0].logit, sum = 0;
    for (size_t i = 0; i < k; i++) sum += s->p[i] = expf(s->c[i].logit - mx);
    if (s->o.top_p < 1.0f) {
        float cum = 0;
        size_t keep = k;
        for (size_t i = 0; i < k; i++) {
            cum += s->p[i] / sum;
            if (cum >= s->o.top_p) {
                keep = i + 1;
                break;
            }
        }
        k = keep;
    }
    if (s->o.min_p > 0) {
        size_t keep = 1;
        while (keep < k && s->p[keep] >= s->o.min_p * s->p[0]) keep++;
        k = keep;
    }
    sum = 0;
    for (size_t i = 0; i < k; i++) sum += s->p[i] = expf((s->c[i].logit - mx) / s->o.temp);
    float r = rng_uniform(s) * sum, cum = 0;
    for (size_t i = 0; i < k; i++) {
        cum += s->p[i];
        if (r < cum) return s->c[i].id;
    }
    return s->c[k - 1].id;
}
