/* Base log-prob files and KL statistics; the format and its error are described in kld.h. */
#include "kld.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KLD_FLOOR_NATS 64.0
#define KLD_CODES 65535.0

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_f32(unsigned char *p, float f) {
    uint32_t v;
    memcpy(&v, &f, 4);
    put_u32(p, v);
}
static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const unsigned char *p) {
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}
static float get_f32(const unsigned char *p) {
    uint32_t v = get_u32(p);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

size_t kld_row_bytes(size_t n_vocab) { return KLD_ROW_HEAD + 2 * n_vocab; }
size_t kld_n_scored(size_t ctx) { return ctx - 1 - ctx / 2; }

int kld_write_header(FILE *f, const kld_header *h, const int32_t *tokens, rl_err *e) {
    unsigned char head[KLD_HEAD_BYTES] = {0}, t[4];
    memcpy(head, KLD_MAGIC, 8);
    put_u32(head + 8, KLD_VERSION);
    put_u64(head + 16, h->n_vocab);
    put_u64(head + 24, h->ctx);
    put_u64(head + 32, h->n_chunks);
    put_u64(head + 40, h->n_scored);
    if (fwrite(head, 1, sizeof head, f) != sizeof head) return rl_fail(e, "write failed");
    for (size_t i = 0; i < h->ctx * h->n_chunks; i++) {
        put_u32(t, (uint32_t)tokens[i]);
        if (fwrite(t, 1, 4, f) != 4) return rl_fail(e, "write failed");
    }
    return 0;
}

int kld_read_header(FILE *f, kld_header *h, int32_t **tokens, rl_err *e) {
    unsigned char head[KLD_HEAD_BYTES];
    *tokens = NULL;
    size_t got = fread(head, 1, sizeof head, f);
    if (got >= 8 && memcmp(head, KLD_MAGIC, 8) != 0)
        return rl_fail(e, "not a rawloop base logits file (magic is not \"%s\")", KLD_MAGIC);
    if (got != sizeof head)
        return rl_fail(e, "truncated: %zu bytes, the header alone is %u", got, KLD_HEAD_BYTES);
    uint32_t ver = get_u32(head + 8);
    if (ver != KLD_VERSION)
        return rl_fail(e, "format version %u, this rawloop reads version %u", ver, KLD_VERSION);
    h->n_vocab = get_u64(head + 16);
    h->ctx = get_u64(head + 24);
    h->n_chunks = get_u64(head + 32);
    h->n_scored = get_u64(head + 40);
    /* Plausibility bounds; the byte count below is computed with overflow checks. */
    if (h->n_vocab < 1 || h->n_vocab > (1u << 24) || h->ctx < 8 || h->ctx > (1u << 20) ||
        h->n_chunks < 1 || h->n_chunks > (1u << 24))
        return rl_fail(e, "implausible header: n_vocab %llu, ctx %llu, n_chunks %llu",
                       (unsigned long long)h->n_vocab, (unsigned long long)h->ctx,
                       (unsigned long long)h->n_chunks);
    if (h->n_scored != kld_n_scored(h->ctx))
        return rl_fail(e, "header says %llu scored positions per chunk, ctx %llu has %zu",
                       (unsigned long long)h->n_scored, (unsigned long long)h->ctx,
                       kld_n_scored(h->ctx));
    uint64_t n_tok = h->ctx * h->n_chunks, rows, body, want;
    if (__builtin_mul_overflow(h->n_chunks, h->n_scored, &rows) ||
        __builtin_mul_overflow(rows, (uint64_t)kld_row_bytes(h->n_vocab), &body) ||
        __builtin_add_overflow(body, (uint64_t)KLD_HEAD_BYTES + 4 * n_tok, &want) || want > (uint64_t)INT64_MAX)
        return rl_fail(e, "implausible header: %llu chunks of %llu rows of a %llu-token vocabulary",
                       (unsigned long long)h->n_chunks, (unsigned long long)h->n_scored,
                       (unsigned long long)h->n_vocab);
    if (fseeko(f, 0, SEEK_END) != 0) return rl_fail(e, "cannot seek");
    off_t size = ftello(f);
    if (size < 0 || fseeko(f, KLD_HEAD_BYTES, SEEK_SET) != 0) return rl_fail(e, "cannot seek");
    if ((uint64_t)size < want)
        return rl_fail(e, "truncated: %lld bytes, the header's counts need %llu",
                       (long long)size, (unsigned long long)want);
    if ((uint64_t)size > want)
        return rl_fail(e, "%llu bytes after the last row (the header's counts need %llu)",
                       (unsigned long long)((uint64_t)size - want), (unsigned long long)want);
    int32_t *t = malloc(n_tok * sizeof *t);
    unsigned char b[4];
    if (!t) return rl_fail(e, "out of memory for %llu tokens", (unsigned long long)n_tok);
    for (uint64_t i = 0; i < n_tok; i++) {
        if (fread(b, 1, 4, f) != 4) {
            free(t);
            return rl_fail(e, "read failed at token %llu", (unsigned long long)i);
        }
        int32_t id = (int32_t)get_u32(b);
        if (id < 0 || (uint64_t)id >= h->n_vocab) {
            free(t);
            return rl_fail(e, "token %llu is %d, outside the vocabulary of %llu",
                           (unsigned long long)i, (int)id, (unsigned long long)h->n_vocab);
        }
        t[i] = id;
    }
    *tokens = t;
    return 0;
}

double kld_lse_argmax(const float *x, size_t n, size_t *imax) {
    size_t im = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[im]) im = i;
    double mx = x[im], sum = 0;
    for (size_t i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    *imax = im;
    return mx + log(sum);
}

void kld_encode_row(const float *logits, size_t nv, int32_t tok, double lse, size_t im,
                    unsigned char *row) {
    float mn = logits[0];
    for (size_t i = 1; i < nv; i++) mn = logits[i] < mn ? logits[i] : mn;
    double hi = (double)logits[im] - lse, lo = (double)mn - lse;
    if (lo < hi - KLD_FLOOR_NATS) lo = hi - KLD_FLOOR_NATS;
    float step = (float)((hi - lo) / KLD_CODES), lo32 = (float)lo;
    put_f32(row, lo32);
    put_f32(row + 4, step);
    put_u32(row + 8, (uint32_t)im);
    put_f32(row + 12, (float)((double)logits[tok] - lse));
    unsigned char *c = row + KLD_ROW_HEAD;
    for (size_t i = 0; i < nv; i++) {
        /* Quantize against the stored lo32/step so the decode's rounding is the only error. */
        double q = step > 0 ? ((double)logits[i] - lse - lo32) / step : 0;
        q = q < 0 ? 0 : q > KLD_CODES ? KLD_CODES : q;
        unsigned v = (unsigned)lrint(q);
        c[2 * i] = (unsigned char)v;
        c[2 * i + 1] = (unsigned char)(v >> 8);
    }
}

int kld_stats_init(kld_stats *s, size_t n, rl_err *e) {
    memset(s, 0, sizeof *s);
    s->kld = malloc((n ? n : 1) * sizeof *s->kld);
    s->dp = malloc((n ? n : 1) * sizeof *s->dp);
    if (!s->kld || !s->dp) {
        kld_stats_free(s);
        return rl_fail(e, "out of memory for %zu positions", n);
    }
    s->cap = n;
    return 0;
}

void kld_stats_free(kld_stats *s) {
    free(s->kld);
    free(s->dp);
    s->kld = s->dp = NULL;
}

static double code_at(const unsigned char *c, size_t i) {
    return (double)((unsigned)c[2 * i] | (unsigned)c[2 * i + 1] << 8);
}

int kld_stats_add(kld_stats *s, const float *x, size_t nv, int32_t tok, double lse, size_t im,
                  const unsigned char *row, rl_err *e) {
    if (s->count >= s->cap) return rl_fail(e, "more positions than the %zu expected", s->cap);
    double lo = get_f32(row), step = get_f32(row + 4), lp_tok_base = get_f32(row + 12);
    uint32_t im_base = get_u32(row + 8);
    if (!isfinite(lo) || !isfinite(step) || step < 0 || im_base >= nv ||
        !isfinite(lp_tok_base) || lp_tok_base > 1e-3)
        return rl_fail(e, "corrupt row %zu (scale %g, offset %g, argmax %u, log-prob %g)",
                       s->count, step, lo, im_base, lp_tok_base);
    const unsigned char *c = row + KLD_ROW_HEAD;
    /* Renormalize the decoded base row (see kld.h): its own log-sum-exp, relative to its
     * largest code so nothing overflows. */
    double cmax = 0, zb = 0;
    for (size_t i = 0; i < nv; i++) cmax = code_at(c, i) > cmax ? code_at(c, i) : cmax;
    for (size_t i = 0; i < nv; i++) zb += exp(step * (code_at(c, i) - cmax));
    double base_shift = step * cmax + log(zb); /* lp_base_i = step * code_i - base_shift */
    double kl = 0;
    for (size_t i = 0; i < nv; i++) {
        double lpb = step * code_at(c, i) - base_shift;
        kl += exp(lpb) * (lpb - ((double)x[i] - lse));
    }
    double nll = lse - x[tok], nll_b = -lp_tok_base;
    double dp = exp(-nll) - exp(-nll_b);
    s->sum_nll += nll;
    s->sum_nll2 += nll * nll;
    s->sum_nll_base += nll_b;
    s->sum_nll_base2 += nll_b * nll_b;
    s->sum_nll_nll_base += nll * nll_b;
    s->sum_kld += kl;
    s->sum_kld2 += kl * kl;
    s->sum_dp += dp;
    s->sum_dp2 += dp * dp;
    s->sum_dp4 += dp * dp * dp * dp;
    s->n_same_top += im == im_base;
    s->kld[s->count] = (float)kl;
    s->dp[s->count] = (float)dp;
    s->count++;
    return 0;
}

/* Mean and its standard error, with llama-perplexity's convention of reporting no error for
 * ten samples or fewer. */
static void mean_se(double sum, double sum2, size_t n, double *mean, double *se) {
    *mean = n ? sum / n : 0;
    double var = n ? sum2 / n - *mean * *mean : 0;
    *se = var > 0 && n > 10 ? sqrt(var / (n - 1)) : 0;
}

static double covariance(double sa, double sb, double sab, size_t n) {
    if (n < 10) return 0;
    return (sab / n - (sa / n) * (sb / n)) / (n - 1);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Linear interpolation between closest ranks over sorted v (numpy's default percentile). */
static double pct(const float *v, size_t n, double f) {
    if (n == 0) return 0;
    if (f <= 0) return v[0];
    if (f >= 1) return v[n - 1];
    double p = f * (double)(n - 1);
    size_t i = (size_t)p;
    p -= (double)i;
    return (1 - p) * v[i] + p * v[i + 1 < n ? i + 1 : n - 1];
}

void kld_stats_print(kld_stats *s, FILE *out) {
    size_t n = s->count;
    qsort(s->kld, n, sizeof *s->kld, cmp_float);
    qsort(s->dp, n, sizeof *s->dp, cmp_float);
    double lq, lq_se, lb, lb_se, kl, kl_se, dpm, dpm_se, mse, mse_se;
    mean_se(s->sum_nll, s->sum_nll2, n, &lq, &lq_se);
    mean_se(s->sum_nll_base, s->sum_nll_base2, n, &lb, &lb_se);
    mean_se(s->sum_kld, s->sum_kld2, n, &kl, &kl_se);
    mean_se(s->sum_dp, s->sum_dp2, n, &dpm, &dpm_se);
    mean_se(s->sum_dp2, s->sum_dp4, n, &mse, &mse_se);
    double cov = covariance(s->sum_nll, s->sum_nll_base, s->sum_nll_nll_base, n);
    double ppl = exp(lq), ppl_b = exp(lb);
    double ratio = lq - lb, ratio_var = lq_se * lq_se + lb_se * lb_se - 2 * cov;
    double ratio_se = ratio_var > 0 ? sqrt(ratio_var) : 0;
    double diff_var = ppl * lq_se * ppl * lq_se + ppl_b * lb_se * ppl_b * lb_se -
                      2 * ppl * ppl_b * cov;
    double top = n ? (double)s->n_same_top / n : 0;
    double top_se = n > 1 ? sqrt(top * (1 - top) / (n - 1)) : 0;
    double rms = sqrt(mse), rms_se = rms > 0 ? 0.5 / rms * mse_se : 0;
    if (n < 100)
        fprintf(out, "note: only %zu positions scored; the statistics below are rough\n", n);
    fprintf(out, "====== Perplexity statistics ======\n");
    fprintf(out, "Mean PPL(Q)                   : %10.6f +/- %10.6f\n", ppl, ppl * lq_se);
    fprintf(out, "Mean PPL(base)                : %10.6f +/- %10.6f\n", ppl_b, ppl_b * lb_se);
    if (lq_se > 0 && lb_se > 0)
        fprintf(out, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * cov / (lq_se * lb_se));
    fprintf(out, "Mean ln(PPL(Q)/PPL(base))     : %10.6f +/- %10.6f\n", ratio, ratio_se);
    fprintf(out, "Mean PPL(Q)/PPL(base)         : %10.6f +/- %10.6f\n", exp(ratio),
            exp(ratio) * ratio_se);
    fprintf(out, "Mean PPL(Q)-PPL(base)         : %10.6f +/- %10.6f\n", ppl - ppl_b,
            diff_var > 0 ? sqrt(diff_var) : 0.0);
    fprintf(out, "\n====== KL divergence statistics ======\n");
    fprintf(out, "Mean    KLD: %10.6f +/- %10.6f\n", kl, kl_se);
    static const struct { const char *name; double f; } kq[] = {
        {"Maximum", 1}, {"99.9%  ", 0.999}, {"99.0%  ", 0.99}, {"95.0%  ", 0.95},
        {"90.0%  ", 0.9}, {"Median ", 0.5}, {"10.0%  ", 0.1}, {" 5.0%  ", 0.05},
        {" 1.0%  ", 0.01}, {" 0.1%  ", 0.001}, {"Minimum", 0}};
    for (size_t i = 0; i < sizeof kq / sizeof kq[0]; i++)
        fprintf(out, "%s KLD: %10.6f\n", kq[i].name, pct(s->kld, n, kq[i].f));
    fprintf(out, "\n====== Token probability statistics ======\n");
    fprintf(out, "Mean    dp: %6.3f +/- %5.3f %%\n", 100 * dpm, 100 * dpm_se);
    for (size_t i = 0; i < sizeof kq / sizeof kq[0]; i++)
        fprintf(out, "%s dp: %6.3f%%\n", kq[i].name, 100 * pct(s->dp, n, kq[i].f));
    fprintf(out, "RMS dp    : %6.3f +/- %5.3f %%\n", 100 * rms, 100 * rms_se);
    fprintf(out, "Same top p: %6.3f +/- %5.3f %%\n", 100 * top, 100 * top_se);
    fprintf(out,
            "KLD: n=%zu mean=%.9g se=%.9g median=%.9g p99=%.9g max=%.9g top1=%.9g top1_se=%.9g "
            "ln_ppl_ratio=%.9g ln_ppl_ratio_se=%.9g ppl_ratio=%.9g ppl_q=%.9g ppl_base=%.9g "
            "rms_dp=%.9g\n",
            n, kl, kl_se, pct(s->kld, n, 0.5), pct(s->kld, n, 0.99), pct(s->kld, n, 1), top,
            top_se, ratio, ratio_se, exp(ratio), ppl, ppl_b, rms);
}
