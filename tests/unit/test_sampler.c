/* Sampler: greedy tie-break, seeded reproducibility, that top-k / top-p / min-p never return a
 * token outside the set they keep, the empirical distribution at temperature 1, and the
 * repetition penalty. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "sampler.h"

static void test_greedy(void) {
    float x[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
    CHECK(rl_argmax(x, 6) == 1, "first maximum must win ties");
    rl_sampler_opts o = rl_sampler_defaults();
    o.temp = 0;
    rl_sampler *s;
    CHECK(rl_sampler_new(&s, &o, 6, NULL) == 0, "new");
    CHECK(rl_sampler_sample(s, x) == 1, "greedy sampler = argmax");
    rl_sampler_free(s);
}

static int draw_many(const rl_sampler_opts *o, const float *x, size_t n, int32_t *out, size_t k) {
    rl_sampler *s;
    if (rl_sampler_new(&s, o, n, NULL)) return -1;
    for (size_t i = 0; i < k; i++) out[i] = rl_sampler_sample(s, x);
    rl_sampler_free(s);
    return 0;
}

static void test_seed_and_filters(void) {
    enum { N = 1000, K = 4000 };
    static float x[N];
    for (size_t i = 0; i < N; i++) x[i] = sinf((float)i * 0.37f) * 3.0f;
    static int32_t a[K], b[K], c[K];
    rl_sampler_opts o = rl_sampler_defaults();
    o.seed = 42;
    draw_many(&o, x, N, a, K);
    draw_many(&o, x, N, b, K);
    CHECK(memcmp(a, b, sizeof a) == 0, "same seed must give the same draws");
    o.seed = 43;
    draw_many(&o, x, N, c, K);
    CHECK(memcmp(a, c, sizeof a) != 0, "another seed should give other draws");

    /* top-k 5: every draw is among the 5 largest logits */
    o = rl_sampler_defaults();
    o.top_k = 5; o.top_p = 1; o.min_p = 0; o.temp = 1;
    draw_many(&o, x, N, a, K);
    float fifth;
    {
        float t[N];
        memcpy(t, x, sizeof t);
        for (int r = 0; r < 5; r++) { /* selection of the 5th largest */
            size_t m = 0;
            for (size_t i = 1; i < N; i++) if (t[i] > t[m]) m = i;
            fifth = t[m];
            t[m] = -INFINITY;
        }
    }
    int bad = 0;
    for (size_t i = 0; i < K; i++) bad += x[a[i]] < fifth;
    CHECK(bad == 0, "%d draws outside the top-5", bad);

    /* min-p 0.5: kept tokens have p >= 0.5 * p_max, i.e. logit >= max + ln 0.5 */
    o.top_k = 0; o.min_p = 0.5f;
    draw_many(&o, x, N, a, K);
    float mx = x[rl_argmax(x, N)];
    bad = 0;
    for (size_t i = 0; i < K; i++) bad += x[a[i]] < mx + logf(0.5f) - 1e-5f;
    CHECK(bad == 0, "%d draws below min-p", bad);
}

static void test_distribution(void) {
    /* 3 tokens with probabilities 0.5 / 0.3 / 0.2 at temperature 1 and no filters */
    float x[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    rl_sampler_opts o = rl_sampler_defaults();
    o.top_k = 0; o.top_p = 1; o.min_p = 0; o.temp = 1; o.seed = 7;
    enum { K = 60000 };
    static int32_t d[K];
    draw_many(&o, x, 3, d, K);
    int cnt[3] = {0};
    for (size_t i = 0; i < K; i++) cnt[d[i]]++;
    double want[3] = {0.5, 0.3, 0.2};
    for (int i = 0; i < 3; i++) {
        double f = (double)cnt[i] / K, sd = sqrt(want[i] * (1 - want[i]) / K);
        CHECK(fabs(f - want[i]) < 5 * sd, "token %d frequency %.4f, expected %.2f", i, f, want[i]);
    }
    /* temperature 0.5 sharpens: p ~ q^2 -> 0.25/0.09/0.04 normalized */
    o.temp = 0.5f;
    draw_many(&o, x, 3, d, K);
    memset(cnt, 0, sizeof cnt);
    for (size_t i = 0; i < K; i++) cnt[d[i]]++;
    double z = 0.25 + 0.09 + 0.04;
    CHECK(fabs((double)cnt[0] / K - 0.25 / z) < 0.01, "temperature 0.5: %.4f vs %.4f",
          (double)cnt[0] / K, 0.25 / z);
}

static void test_penalty(void) {
    float x[4] = {2.0f, 1.9f, -1.0f, -1.1f};
    rl_sampler_opts o = rl_sampler_defaults();
    o.temp = 0;
    o.repeat_penalty = 1.5f;
    rl_sampler *s;
    rl_sampler_new(&s, &o, 4, NULL);
    rl_sampler_accept(s, 0); /* 2.0 / 1.5 = 1.33 < 1.9 */
    CHECK(rl_sampler_sample(s, x) == 1, "penalized token should lose");
    rl_sampler_accept(s, 1); /* both penalized: 1.33 vs 1.27 */
    CHECK(rl_sampler_sample(s, x) == 0, "both penalized: the larger wins again");
    rl_sampler_free(s);
}

int main(void) {
    test_greedy();
    test_seed_and_filters();
    test_distribution();
    test_penalty();
    return check_report("test_sampler");
}
