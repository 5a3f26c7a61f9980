/* Weight formats and matmul kernels.
 *
 * Without arguments: unit tests. The SIMD kernels (rl_mm_rows) are checked against the scalar
 * reference (rl_mm_rows_ref) on random blocks over many shapes, the fast path against the exact
 * path within the bound its 8-bit activations imply, quantizers by round trip, fp16/bf16 by
 * exhaustive and edge cases (against the F16C hardware conversion where the build has it), the
 * tools' SIMD weight quantizer and row decoder (rl_quant_row_fast, rl_dequant_row_fast) against
 * rl_quant_row and rl_dequant_row byte for byte.
 *
 * With arguments it is the bridge the Python oracle test (tests/py/test_quant_oracle.py) uses:
 *   test_quant dequant TYPE in.bin out.f32    rl_dequant_row over the whole file
 *   test_quant quant TYPE in.f32 out.bin      rl_quant_row over the whole file
 *   test_quant quant TYPE in.f32 out.bin w.f32
 *                                             rl_quant_row_w, rows as long as w (its importances)
 * TYPE is a ggml type name (Q4_K, F16, ...). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "quant.h"

#ifdef __F16C__
#include <immintrin.h>
#endif

static const uint32_t k_types[] = {RL_F32,  RL_F16,  RL_BF16, RL_Q8_0, RL_Q4_0, RL_Q4_1, RL_Q5_0,
                                   RL_Q5_1, RL_Q4_K, RL_Q5_K, RL_Q6_K, RL_RQ2,  RL_RQ4,  RL_FP8};
#define NTYPES (sizeof k_types / sizeof k_types[0])

/* ---- deterministic random numbers ------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static float rndf(void) { /* uniform in [-1, 1) */
    return (float)(rnd() & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static float rnd_gauss(void) {
    float s = 0;
    for (int i = 0; i < 4; i++) s += rndf();
    return s * 0.866f;
}

static void put_f16(uint8_t *p, float f) {
    uint16_t h = rl_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* Random bytes with sane fp16 scales: every bit pattern of the quants is legal, only the
 * scales need to be finite and of a plausible magnitude. */
static void random_row(uint32_t type, uint8_t *w, size_t n) {
    const rl_type_info *ti = rl_type_get(type);
    size_t bytes = n / ti->blck * ti->size;
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    for (size_t i = 0; i < n / ti->blck; i++) {
        uint8_t *b = w + i * ti->size;
        float sc = 0.001f + 0.02f * (rndf() + 1);
        switch (type) {
        case RL_F32: { float v = rnd_gauss(); memcpy(b, &v, 4); break; }
        case RL_F16: put_f16(b, rnd_gauss()); break;
        case RL_BF16: { uint16_t h = rl_f32_to_bf16(rnd_gauss()); memcpy(b, &h, 2); break; }
        case RL_Q8_0: case RL_Q4_0: case RL_Q5_0: put_f16(b, sc); break;
        case RL_Q5_1: put_f16(b, sc * 0.5f); put_f16(b + 2, -8.0f * sc + 0.01f * rndf()); break;
        case RL_Q4_1: put_f16(b, sc); put_f16(b + 2, -8.0f * sc + 0.01f * rndf()); break;
        case RL_Q4_K: case RL_Q5_K: put_f16(b, sc * 0.1f); put_f16(b + 2, sc * 0.1f); break;
        case RL_Q6_K: put_f16(b + 208, sc * 0.05f); break;
        case RL_RQ2: put_f16(b + 16, sc); put_f16(b + 18, -1.5f * sc + 0.01f * rndf()); break;
        case RL_RQ4: put_f16(b + 32, sc * 0.2f); put_f16(b + 34, -1.5f * sc + 0.01f * rndf()); break;
        case RL_FP8: { uint16_t h = rl_f32_to_bf16(sc / 64); memcpy(b, &h, 2); break; } /* codes: any byte */
        }
    }
}

/* ---- fp16 / bf16 ----------------------------------------------------------------------- */

static float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static void test_f16(void) {
    /* every half: f16 -> f32 -> f16 is the identity (NaNs stay NaN) */
    int bad_rt = 0, bad_hw = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = rl_f16_to_f32((uint16_t)h);
        uint16_t back = rl_f32_to_f16(f);
        if (isnan(f) ? !((back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h) bad_rt++;
#ifdef __F16C__
        float hw = _cvtsh_ss((unsigned short)h);
        if (memcmp(&hw, &f, 4) != 0 && !(isnan(hw) && isnan(f))) bad_hw++;
#endif
    }
    CHECK(bad_rt == 0, "%d halves did not round trip", bad_rt);
    CHECK(bad_hw == 0, "%d halves differ from F16C", bad_hw);

    /* f32 -> f16 rounding edge cases */
    CHECK(rl_f32_to_f16(65504.0f) == 0x7bff, "max half");
    CHECK(rl_f32_to_f16(65519.99f) == 0x7bff, "just below the inf threshold");
    CHECK(rl_f32_to_f16(65520.0f) == 0x7c00, "65520 rounds to inf");
    CHECK(rl_f32_to_f16(1e10f) == 0x7c00 && rl_f32_to_f16(-1e10f) == 0xfc00, "overflow");
    CHECK(rl_f32_to_f16(INFINITY) == 0x7c00 && rl_f32_to_f16(-INFINITY) == 0xfc00, "inf");
    uint16_t hn = rl_f32_to_f16(NAN);
    CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0, "nan -> %04x", hn);
    CHECK(isnan(rl_f16_to_f32(0x7e00)) && isinf(rl_f16_to_f32(0xfc00)) && rl_f16_to_f32(0xfc00) < 0, "f16 nan/inf");
    CHECK(rl_f32_to_f16(0x1p-24f) == 0x0001, "smallest subnormal");
    CHECK(rl_f32_to_f16(0x1p-25f) == 0x0000, "half of it ties to even zero");
    CHECK(rl_f32_to_f16(0x1.8p-24f) == 0x0002, "1.5 ulp ties to even 2");
    CHECK(rl_f32_to_f16(0x1.000002p-25f) == 0x0001, "just above half rounds up");
    CHECK(rl_f32_to_f16(-0.0f) == 0x8000, "negative zero");
    CHECK(rl_f32_to_f16(0x1p-14f) == 0x0400, "smallest normal");
    CHECK(rl_f32_to_f16(0x1.ff8p-15f) == 0x03ff, "largest subnormal");
    CHECK(rl_f32_to_f16(0x1.ffcp-15f) == 0x0400, "largest subnormal + half ulp ties up to the normal");
    CHECK(rl_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00, "tie to even (down)");
    CHECK(rl_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02, "tie to even (up)");
    CHECK(rl_f16_to_f32(0x0001) == 0x1p-24f && rl_f16_to_f32(0x8001) == -0x1p-24f, "subnormal decode");

#ifdef __F16C__
    /* random floats over the whole range against the hardware */
    int bad = 0;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = rnd() << 16 ^ rnd();
        float f = bits_f(u);
        uint16_t hw = (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
        uint16_t sw = rl_f32_to_f16(f);
        if (isnan(f) ? (sw & 0x7c00) != 0x7c00 || !(sw & 0x3ff) : sw != hw) bad++;
    }
    CHECK(bad == 0, "%d random floats differ from F16C", bad);
#endif

    /* row conversions (SIMD) equal the scalar ones, odd lengths for the tails */
    enum { N = 1037 };
    float f[N], g[N];
    uint16_t h[N], h2[N];
    for (int i = 0; i < N; i++) {
        f[i] = rndf() * 70000.0f * (i % 3 ? 1e-6f : 1.0f);
        h[i] = (uint16_t)rnd();
    }
    f[5] = NAN;
    f[6] = INFINITY;
    rl_f32_to_f16_row(f, h2, N);
    int bad_row = 0;
    for (int i = 0; i < N; i++) bad_row += i == 5 ? !(h2[i] & 0x3ff) : h2[i] != rl_f32_to_f16(f[i]);
    CHECK(bad_row == 0, "f32_to_f16_row differs at %d places", bad_row);
    rl_f16_to_f32_row(h, g, N);
    bad_row = 0;
    for (int i = 0; i < N; i++) {
        float r = rl_f16_to_f32(h[i]);
        bad_row += isnan(r) ? !isnan(g[i]) : memcmp(&r, &g[i], 4) != 0;
    }
    CHECK(bad_row == 0, "f16_to_f32_row differs at %d places", bad_row);

    /* bf16 */
    CHECK(rl_f32_to_bf16(1.0f) == 0x3f80 && rl_bf16_to_f32(0x3f80) == 1.0f, "bf16 one");
    CHECK(rl_f32_to_bf16(bits_f(0x3f808000)) == 0x3f80, "bf16 tie to even down");
    CHECK(rl_f32_to_bf16(bits_f(0x3f818000)) == 0x3f82, "bf16 tie to even up");
    CHECK(rl_f32_to_bf16(bits_f(0x3f808001)) == 0x3f81, "bf16 above tie");
    CHECK(rl_f32_to_bf16(bits_f(0x7f7fffff)) == 0x7f80, "bf16 overflow to inf");
    CHECK(rl_f32_to_bf16(bits_f(0x7f800001)) == 0x7fc0, "bf16 signalling nan becomes quiet");
    CHECK(rl_f32_to_bf16(-INFINITY) == 0xff80, "bf16 -inf");
    CHECK(rl_f32_to_bf16(bits_f(0x00000001)) == 0x0000, "bf16 denormal rounds to 0");
    int bad_bf = 0;
    for (uint32_t x = 0; x < 65536; x++) {
        float v = rl_bf16_to_f32((uint16_t)x);
        if (!isnan(v) && rl_f32_to_bf16(v) != x) bad_bf++;
    }
    CHECK(bad_bf == 0, "%d bf16 values did not round trip", bad_bf);
}

#if defined(__aarch64__)
/* arm64: the scalar fp16 conversions against the hardware's (fcvt), as F16C is used above. */
static void test_f16_arm64(void) {
    int bad_hw = 0, bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t hb = (uint16_t)h;
        __fp16 hv;
        memcpy(&hv, &hb, 2);
        float hw = (float)hv, f = rl_f16_to_f32(hb);
        if (memcmp(&hw, &f, 4) != 0 && !(isnan(hw) && isnan(f))) bad_hw++;
    }
    CHECK(bad_hw == 0, "%d halves differ from the arm64 fcvt", bad_hw);
    for (int i = 0; i < 2000000; i++) {
        float f = bits_f(rnd() << 16 ^ rnd());
        __fp16 hv = (__fp16)f;
        uint16_t hw, sw = rl_f32_to_f16(f);
        memcpy(&hw, &hv, 2);
        if (isnan(f) ? (sw & 0x7c00) != 0x7c00 || !(sw & 0x3ff) : sw != hw) bad++;
    }
    CHECK(bad == 0, "%d random floats differ from the arm64 fcvt", bad);
}
#endif

/* ---- quantize / dequantize round trips ---------------------------------------------------- */

static void test_roundtrip(void) {
    /* Relative rms error allowed for gaussian data, generous against the expected values
     * (Q8_0 ~0.5%, FP8 ~2.3%, Q5_K ~3.4%, Q5_1 3.6%, Q5_0 4.1%, Q4 ~7-8%, RQ2 ~31%) except Q6_K: its searched sub-block scales
     * (llama.cpp's search, which minimises an x^2-weighted error, not this plain rms) give 1.74%
     * where the plain "largest value to -32" fit gave 1.84%, and the bound sits between the two
     * so that losing the search fails here. */
    const struct { uint32_t type; double tol; } cases[] = {
        {RL_F32, 0}, {RL_F16, 1e-3}, {RL_BF16, 5e-3}, {RL_Q8_0, 0.008}, {RL_Q6_K, 0.0175},
        {RL_Q5_K, 0.045}, {RL_Q4_K, 0.09}, {RL_Q4_0, 0.12}, {RL_Q4_1, 0.09}, {RL_Q5_0, 0.05}, {RL_Q5_1, 0.045},
        {RL_RQ2, 0.33}, {RL_RQ4, 0.09}, {RL_FP8, 0.03},
    };
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t q[N * 4];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double e2 = 0, x2 = 0;
        for (int rep = 0; rep < 4; rep++) {
            for (int i = 0; i < N; i++) x[i] = rnd_gauss() * (rep == 3 ? 1e-3f : 1.0f) + (rep == 2 ? 0.3f : 0.0f);
            if (rep == 1) x[7] = 8.0f; /* an outlier */
            rl_quant_row(cases[c].type, x, q, N);
            rl_dequant_row(cases[c].type, q, y, N);
            for (int i = 0; i < N; i++) {
                e2 += (double)(x[i] - y[i]) * (x[i] - y[i]);
                x2 += (double)x[i] * x[i];
            }
        }
        double rel = sqrt(e2 / x2);
        if (getenv("RL_PRINT_RMS")) printf("%s rms %.4f\n", rl_type_name(cases[c].type), rel);
        CHECK(rel <= cases[c].tol, "%s round trip rms error %.4f > %.4f", rl_type_name(cases[c].type), rel, cases[c].tol);
    }
    /* all-zero blocks quantize to exact zeros */
    memset(x, 0, sizeof x);
    for (size_t t = 0; t < NTYPES; t++) {
        rl_quant_row(k_types[t], x, q, 512);
        rl_dequant_row(k_types[t], q, y, 512);
        int nz = 0;
        for (int i = 0; i < 512; i++) nz += y[i] != 0;
        CHECK(nz == 0, "%s: zeros came back as %d non-zeros", rl_type_name(k_types[t]), nz);
    }
    /* Q8_0: values that are exact multiples of the scale survive */
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) / 16.0f * 127.0f / 16.0f;
    x[0] = -127.0f / 16.0f; /* amax -> d = 1/16 exactly */
    rl_quant_row(RL_Q8_0, x, q, 32);
    rl_dequant_row(RL_Q8_0, q, y, 32);
    int diff = 0;
    for (int i = 0; i < 32; i++) diff += fabsf(x[i] - y[i]) > 1.0f / 32;
    CHECK(diff == 0, "Q8_0 small-grid round trip off at %d", diff);

    /* rl_q8a: every value within half a step of the original, s consistent */
    for (int i = 0; i < 256; i++) x[i] = rnd_gauss();
    rl_q8a a[8];
    CHECK(rl_q8a_row_bytes(256) == sizeof a, "q8a row bytes");
    rl_q8a_quant_row(x, a, 256);
    int off = 0;
    for (int b = 0; b < 8; b++) {
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            off += fabsf(a[b].d * a[b].qs[j] - x[32 * b + j]) > a[b].d * 0.5001f;
            sum += a[b].qs[j];
        }
        off += fabsf(a[b].s - a[b].d * sum) > 1e-6f * fabsf(a[b].s) + 1e-30f;
    }
    CHECK(off == 0, "q8a quantization off at %d places", off);
    /* the SIMD quantizer is bit-identical to the scalar reference, including all-zero blocks,
     * ties at .5 and values at the int8 limits */
    {
        enum { NQ = 32 * 40 };
        float xs[NQ];
        rl_q8a got[NQ / 32], want[NQ / 32];
        for (size_t i = 0; i < NQ; i++) xs[i] = rnd_gauss() * (i % 61 == 0 ? 9.0f : 1.0f);
        for (size_t i = 0; i < 32; i++) xs[i] = 0;                              /* zero block */
        for (size_t i = 32; i < 64; i++) xs[i] = (float)((int)i - 48) + 0.5f;   /* ties */
        xs[64] = -3.0f;                                                           /* -amax */
        rl_q8a_quant_row(xs, got, NQ);
        rl_q8a_quant_row_ref(xs, want, NQ);
        CHECK(memcmp(got, want, sizeof got) == 0, "SIMD q8a quantization differs from the reference");
    }
}

/* ---- kernels vs reference ---------------------------------------------------------------- */

/* Runs rl_mm_rows and rl_mm_rows_ref on one random problem and compares. */
static void one_case(uint32_t type, size_t n, size_t S, size_t rows, size_t r0, size_t r1, bool acc, bool fast) {
    size_t rb = rl_row_bytes(type, n);
    uint8_t *w = malloc(rb * rows);
    float *x = malloc(sizeof(float) * n * S);
    rl_q8a *xq = malloc(rl_q8a_row_bytes(n) * S);
    size_t ys = rows + 3; /* a stride wider than the row count */
    float *y = malloc(sizeof(float) * ys * S), *yr = malloc(sizeof(float) * ys * S);
    float *ye = malloc(sizeof(float) * ys * S);
    float *wrow = malloc(sizeof(float) * n);
    for (size_t r = 0; r < rows; r++) random_row(type, w + r * rb, n);
    for (size_t i = 0; i < n * S; i++) x[i] = rnd_gauss() * (i % 97 == 0 ? 6.0f : 1.0f);
    for (size_t s = 0; s < S; s++) rl_q8a_quant_row(x + s * n, xq + s * (n / RL_QK), n);
    for (size_t i = 0; i < ys * S; i++) y[i] = yr[i] = ye[i] = rndf();
    bool fast_applies = fast && type != RL_F32 && type != RL_F16 && type != RL_BF16;
    rl_mm m = {.type = type, .w = w, .row_bytes = rb, .n = n, .S = S, .x = x, .xq = fast ? xq : NULL,
               .y = y, .ys = ys, .accumulate = acc};
    rl_mm_rows(&m, r0, r1);
    m.y = yr;
    rl_mm_rows_ref(&m, r0, r1);
    if (fast_applies) {
        m.y = ye;
        m.xq = NULL;
        rl_mm_rows_ref(&m, r0, r1);
    }
    int bad = 0, bad_bound = 0, touched = 0;
    double worst = 0;
    for (size_t r = 0; r < rows; r++) {
        rl_dequant_row(type, w + r * rb, wrow, n);
        for (size_t s = 0; s < S; s++) {
            size_t i = s * ys + r;
            if (r < r0 || r >= r1) {
                touched += memcmp(&y[i], &yr[i], 4) != 0;
                continue;
            }
            /* scale of the fp error: sum |w x| (and |y| carried in by accumulate) */
            double mag = fabs(yr[i]), bound = 0;
            for (size_t k = 0; k < n; k++) mag += fabs((double)wrow[k] * x[s * n + k]);
            double err = fabs((double)y[i] - yr[i]) / mag;
            if (err > worst) worst = err;
            if (err > 2e-6) bad++;
            if (fast_applies) {
                /* each activation is off by at most half its block's step d/2 = amax/254 */
                for (size_t b = 0; b < n / RL_QK; b++) {
                    double aw = 0;
                    for (size_t k = 0; k < RL_QK; k++) aw += fabs(wrow[b * RL_QK + k]);
                    bound += aw * xq[s * (n / RL_QK) + b].d * 0.5;
                }
                if (fabs((double)yr[i] - ye[i]) > bound * 1.001 + 2e-6 * mag) bad_bound++;
            }
        }
    }
    CHECK(bad == 0, "%s n=%zu S=%zu rows [%zu,%zu) acc=%d fast=%d: %d mismatches, worst rel %.3g",
          rl_type_name(type), n, S, r0, r1, acc, fast, bad, worst);
    CHECK(touched == 0, "%s: rows outside [%zu,%zu) written", rl_type_name(type), r0, r1);
    CHECK(bad_bound == 0, "%s n=%zu S=%zu: %d fast results outside the 8-bit activation bound",
          rl_type_name(type), n, S, bad_bound);
    free(w); free(x); free(xq); free(y); free(yr); free(ye); free(wrow);
}

static void test_kernels(void) {
    const size_t ns[] = {256, 512, 1024, 2048, 4352};
    const size_t Ss[] = {1, 2, 3, 4, 5, 7, 8, 17};
    for (size_t t = 0; t < NTYPES; t++) {
        for (size_t in = 0; in < sizeof ns / sizeof ns[0]; in++) {
            for (size_t is = 0; is < sizeof Ss / sizeof Ss[0]; is++) {
                size_t n = ns[in], S = Ss[is];
                if (n * S > 20000 && S > 4) continue; /* keep the run short */
                size_t rows = 5 + rnd() % 9;
                size_t r0 = rnd() % 3, r1 = rows - rnd() % 2;
                bool acc = rnd() & 1;
                one_case(k_types[t], n, S, rows, r0, r1, acc, true);
                one_case(k_types[t], n, S, rows, r0 | 1, r1, !acc, false);
            }
        }
        /* n that is not a multiple of 256 for the 32-blocks and float types */
        if (rl_type_get(k_types[t])->blck <= RL_QK) {
            one_case(k_types[t], 96, 3, 7, 1, 7, false, true);
            one_case(k_types[t], 288, 5, 9, 0, 9, true, false);
        }
        if (k_types[t] == RL_F32 || k_types[t] == RL_F16) one_case(k_types[t], 37, 2, 3, 0, 3, false, false);
        if (k_types[t] == RL_RQ2 || k_types[t] == RL_RQ4) { /* rows of 1, 5 and 12 blocks: not multiples of 256 */
            one_case(k_types[t], 64, 1, 6, 0, 6, false, true);
            one_case(k_types[t], 320, 5, 9, 2, 9, true, true);
            one_case(k_types[t], 320, 1, 9, 0, 8, false, false);
            one_case(k_types[t], 768, 3, 7, 1, 7, true, false);
            one_case(k_types[t], 768, 9, 4, 0, 4, false, true);
        }
    }
    printf("kernels: %s\n", rl_simd_name());
}

/* ---- row-interleaved (packed) weights ----------------------------------------------------- */

/* Packs a random matrix, checks every block unpacks to its row-major original, that the
 * reference on the packed form is bit-identical to the reference on the row-major form, and
 * that the SIMD kernels on the packed form agree with it within float summation error. */
static void packed_case(uint32_t type, size_t n, size_t S, size_t rows, size_t r0, size_t r1, bool acc) {
    size_t rb = rl_row_bytes(type, n), bs = rl_type_get(type)->size, bk = rl_type_get(type)->blck;
    uint8_t *w = malloc(rb * rows), *wp = malloc(rb * rows), blk[64];
    float *x = malloc(sizeof(float) * n * S);
    rl_q8a *xq = malloc(rl_q8a_row_bytes(n) * S);
    size_t ys = rows + 5;
    float *y = malloc(sizeof(float) * ys * S), *yr = malloc(sizeof(float) * ys * S), *yp = malloc(sizeof(float) * ys * S);
    for (size_t r = 0; r < rows; r++) random_row(type, w + r * rb, n);
    for (size_t i = 0; i < n * S; i++) x[i] = rnd_gauss() * (i % 89 == 0 ? 5.0f : 1.0f);
    for (size_t s = 0; s < S; s++) rl_q8a_quant_row(x + s * n, xq + s * (n / RL_QK), n);
    CHECK(rl_pack_supported(type, rows, n), "%s rows=%zu n=%zu should be packable", rl_type_name(type), rows, n);
    rl_pack_rows(type, w, rb, rows, n, wp);
    int bad_blk = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b < n / bk; b++) {
            rl_packed_block(type, wp, rb, r, b, blk);
            bad_blk += memcmp(blk, w + r * rb + b * bs, bs) != 0;
        }
    CHECK(bad_blk == 0, "%s: %d packed blocks do not unpack to their original", rl_type_name(type), bad_blk);
    for (int fast = 0; fast < 2; fast++) {
        for (size_t i = 0; i < ys * S; i++) y[i] = yr[i] = yp[i] = rndf();
        rl_mm m = {.type = type, .w = w, .row_bytes = rb, .n = n, .S = S, .x = x, .xq = fast ? xq : NULL,
                   .y = yr, .ys = ys, .accumulate = acc};
        rl_mm_rows_ref(&m, r0, r1);
        m.w = wp;
        m.packed = true;
        m.y = yp;
        rl_mm_rows_ref(&m, r0, r1);
        m.y = y;
        rl_mm_rows(&m, r0, r1);
        int bad = 0, diff_ref = 0;
        double worst = 0;
        for (size_t s = 0; s < S; s++)
            for (size_t r = 0; r < rows; r++) {
                size_t i = s * ys + r;
                diff_ref += memcmp(&yp[i], &yr[i], 4) != 0;
                if (r < r0 || r >= r1) {
                    bad += memcmp(&y[i], &yr[i], 4) != 0;
                    continue;
                }
                double mag = fabs(yr[i]);
                for (size_t b = 0; b < n / bk; b++) {
                    float vals[RL_QK_RQ4];
                    rl_dequant_row(type, w + r * rb + b * bs, vals, bk);
                    for (size_t k = 0; k < bk; k++) mag += fabs((double)vals[k] * x[s * n + b * bk + k]);
                }
                double err = fabs((double)y[i] - yr[i]) / mag;
                if (err > worst) worst = err;
                bad += err > 2e-6;
            }
        CHECK(diff_ref == 0, "%s packed reference differs from row-major reference at %d places", rl_type_name(type), diff_ref);
        CHECK(bad == 0, "%s packed n=%zu S=%zu rows [%zu,%zu) acc=%d fast=%d: %d mismatches, worst rel %.3g",
              rl_type_name(type), n, S, r0, r1, acc, fast, bad, worst);
    }
    free(w); free(wp); free(x); free(xq); free(y); free(yr); free(yp);
}

static void test_packed(void) {
    const uint32_t types[] = {RL_Q4_0, RL_Q8_0, RL_RQ2, RL_RQ4};
    const size_t Ss[] = {1, 2, 3, 4, 5, 7, 8, 9};
    const uint32_t rq[] = {RL_RQ2, RL_RQ4};
    for (size_t i = 0; i < 2; i++) {
        const uint32_t ty = rq[i];
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
        CHECK(rl_pack_supported(ty, 8, 64) && rl_mm_row_tile(ty) == 8, "an AVX2 build packs %s", rl_type_name(ty));
#else
        CHECK(!rl_pack_supported(ty, 8, 64) && rl_pack_format(ty, 8, 64), "%s has a packed form, read only by AVX2",
              rl_type_name(ty));
#endif
    }
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        if (!rl_pack_supported(types[t], 8, 64)) continue; /* RQ2 / RQ4 outside x86: checked above */
        const size_t bk = rl_type_get(types[t])->blck;
        if (bk > RL_QK) CHECK(!rl_pack_supported(types[t], 8, bk + RL_QK), "%s: n not a multiple of its block", rl_type_name(types[t]));
        for (size_t i = 0; i < sizeof Ss / sizeof Ss[0]; i++) {
            size_t n = (i % 3 == 0) ? 2048 : bk * (1 + rnd() % (1280 / bk)), rows = 8 * (1 + rnd() % 4);
            size_t r0 = 8 * (rnd() % 2 ? 0 : rows / 16), r1 = rows - 8 * (rnd() % 2) * (rows > r0 + 8);
            packed_case(types[t], n, Ss[i], rows, r0, r1, rnd() & 1);
        }
        /* wide enough that the kernel splits the columns into L2-sized chunks (24 + 16 in 6-column
         * tiles, RQ2 / RQ4: 28 + 12 in 4-column ones) */
        packed_case(types[t], 5632, 40, 16, 8, 16, true); /* 5632 = 88 x 64 */
        CHECK(!rl_pack_supported(types[t], 12, 64), "rows not a multiple of 8 must not be packable");
    }
    CHECK(!rl_pack_supported(RL_Q4_K, 8, 256), "Q4_K has no packed form");
}

/* ---- batch bits ---------------------------------------------------------------------------- */

/* A column's result does not depend on how many columns share the call: prompts run in chunks
 * must give decoding's bits (the engine's -b 1 = -b 64 logits). Every type, 8-bit activations
 * and fp32, row-major and packed: 7 columns at once against each column alone, bit for bit. */
static void test_batch_bits(void) {
    enum { ROWS = 16, N = 512, S = 7 };
    static float x[N * S], y[ROWS * S], y1[ROWS];
    static rl_q8a xq[N / RL_QK * S];
    for (size_t i = 0; i < N * S; i++) x[i] = rnd_gauss();
    for (size_t s = 0; s < S; s++) rl_q8a_quant_row(x + s * N, xq + s * (N / RL_QK), N);
    for (size_t t = 0; t < NTYPES; t++) {
        const uint32_t type = k_types[t];
        const size_t rb = rl_row_bytes(type, N);
        uint8_t *w = malloc(rb * ROWS), *wp = malloc(rb * ROWS);
        for (size_t r = 0; r < ROWS; r++) random_row(type, w + r * rb, N);
        const bool packable = rl_pack_supported(type, ROWS, N);
        if (packable) rl_pack_rows(type, w, rb, ROWS, N, wp);
        int bad = 0;
        for (int packed = 0; packed < 1 + packable; packed++)
            for (int fast = 0; fast < 2; fast++) {
                rl_mm m = {.type = type, .w = packed ? wp : w, .row_bytes = rb, .n = N, .S = S, .x = x,
                           .xq = fast ? xq : NULL, .y = y, .ys = ROWS, .packed = packed};
                for (size_t i = 0; i < ROWS * S; i++) y[i] = 1e30f; /* an unwritten result differs */
                rl_mm_rows(&m, 0, ROWS);
                for (size_t s = 0; s < S; s++) {
                    for (size_t i = 0; i < ROWS; i++) y1[i] = -1e30f;
                    rl_mm m1 = m;
                    m1.S = 1;
                    m1.x = x + s * N;
                    m1.xq = fast ? xq + s * (N / RL_QK) : NULL;
                    m1.y = y1;
                    rl_mm_rows(&m1, 0, ROWS);
                    bad += memcmp(y1, y + s * ROWS, sizeof y1) != 0;
                }
            }
        CHECK(bad == 0, "%s: %d columns of a 7-column call differ from the column alone", rl_type_name(type), bad);
        free(w);
        free(wp);
    }
}

/* ---- integer extremes ---------------------------------------------------------------------- */

/* Largest integer products the fast path can meet: Q8_0 weights all -128 (Q4_0 / Q5_0 codes all
 * 0, i.e. -8 / -16; Q5_1 codes all 31, RQ2 3, RQ4 15) against activations quantized to -127,
 * row-major and packed (Q4_0 / Q8_0, and RQ2 / RQ4 in x86 builds). Catches an integer dot
 * whose intermediate sums overflow (e.g. int16 sums of more than two int8 products). */
static void test_int_extremes(void) {
    const uint32_t types[] = {RL_Q8_0, RL_Q4_0, RL_Q4_1, RL_Q5_0, RL_Q5_1, RL_RQ2, RL_RQ4};
    enum { ROWS = 16, N = 512, S = 5 };
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        uint32_t type = types[t];
        size_t rb = rl_row_bytes(type, N), bs = rl_type_get(type)->size;
        uint8_t *w = malloc(rb * ROWS), *wp = malloc(rb * ROWS);
        static float x[N * S], y[ROWS * S], yr[ROWS * S];
        static rl_q8a xq[N / RL_QK * S];
        /* d * q + m: all codes at their top (RQ2 / RQ4: d, m at the block's end) */
        const bool offs = type == RL_Q5_1 || type == RL_Q4_1 || type == RL_RQ2 || type == RL_RQ4;
        const size_t doff = type == RL_RQ2 || type == RL_RQ4 ? bs - 4 : 0;
        memset(w, type == RL_Q8_0 ? 0x80 : offs ? 0xFF : 0x00, rb * ROWS);
        for (size_t b = 0; b < rb * ROWS / bs; b++) {
            put_f16(w + b * bs + doff, 0.01f);
            if (offs) put_f16(w + b * bs + doff + 2, 0.02f);
        }
        for (size_t i = 0; i < N * S; i++) x[i] = -1.0f;
        for (size_t s = 0; s < S; s++) rl_q8a_quant_row(x + s * N, xq + s * (N / RL_QK), N);
        CHECK(xq[0].qs[0] == -127, "activation -1 quantized to %d", xq[0].qs[0]);
        bool packable = rl_pack_supported(type, ROWS, N);
        if (packable) rl_pack_rows(type, w, rb, ROWS, N, wp);
        for (int packed = 0; packed < 1 + packable; packed++) {
            for (size_t Sc = 1; Sc <= S; Sc += S - 1) {
                rl_mm m = {.type = type, .w = packed ? wp : w, .row_bytes = rb, .n = N, .S = Sc, .x = x,
                           .xq = xq, .y = y, .ys = ROWS, .packed = packed};
                rl_mm_rows(&m, 0, ROWS);
                m.y = yr;
                rl_mm_rows_ref(&m, 0, ROWS);
                int bad = 0;
                for (size_t i = 0; i < ROWS * Sc; i++) bad += fabsf(y[i] - yr[i]) > 1e-5f * fabsf(yr[i]);
                /* every product is (negative weight) x (-1), Q5_1's (0.31 + 0.02) x (-1), RQ2's (0.03 +
                 * 0.02) x (-1), RQ4's (0.15 + 0.02) x (-1) */
                CHECK(bad == 0 && (offs ? yr[0] < 0 : yr[0] > 0), "%s extremes packed=%d S=%zu: %d results differ (%g vs %g)",
                      rl_type_name(type), packed, Sc, bad, y[0], yr[0]);
            }
        }
        free(w);
        free(wp);
    }
}

/* ---- RQ2 ----------------------------------------------------------------------------------- */

/* Squared error of the plain min/max fit of one block (d = range/L, m = min, fp16-rounded; codes
 * 0..L: RQ2 L = 3, RQ4 L = 15): the starting point of the quantizer's search, which it must never
 * do worse than. */
static double rq_minmax_err(const float *x, int L) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < 64; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    float d = rl_f16_to_f32(rl_f32_to_f16((hi - lo) / (float)L)), m = rl_f16_to_f32(rl_f32_to_f16(lo));
    double e = 0;
    for (int j = 0; j < 64; j++) {
        int q = d > 0 ? (int)lrintf((x[j] - m) / d) : 0;
        q = q < 0 ? 0 : q > L ? L : q;
        e += ((double)d * q + m - x[j]) * ((double)d * q + m - x[j]);
    }
    return e;
}

/* The searched quantizer of a code type (codes 0..L, 64-value blocks): never worse than its
 * min/max starting point on any block, clearly better in total on gaussian data (below ratio),
 * and exact on an (L+1)-level grid and on a constant block. */
static void check_rq_search(uint32_t type, int L, double ratio) {
    enum { N = 64 * 256 };
    static float x[N], yq[N];
    static uint8_t q[N / 64 * 36];
    for (int i = 0; i < N; i++) x[i] = rnd_gauss() * (i % 500 == 0 ? 4.0f : 1.0f);
    rl_quant_row(type, x, q, N);
    rl_dequant_row(type, q, yq, N);
    int worse = 0, bad = 0;
    double e_all = 0, e_mm = 0;
    for (int b = 0; b < N / 64; b++) {
        double e = 0;
        for (int j = 0; j < 64; j++) e += ((double)yq[64 * b + j] - x[64 * b + j]) * ((double)yq[64 * b + j] - x[64 * b + j]);
        double emm = rq_minmax_err(x + 64 * b, L);
        worse += e > emm * (1 + 1e-6) + 1e-12;
        e_all += e;
        e_mm += emm;
    }
    CHECK(worse == 0, "%s quantizer worse than the min/max fit on %d blocks", rl_type_name(type), worse);
    if (getenv("RL_PRINT_RMS")) printf("%s search/minmax error ratio %.3f\n", rl_type_name(type), e_all / e_mm);
    CHECK(e_all < ratio * e_mm, "%s search error %.4g is not clearly below min/max %.4g", rl_type_name(type), e_all, e_mm);
    for (int j = 0; j < 64; j++) x[j] = 0.25f * (float)(j * 7 % (L + 1)) - 0.5f;
    rl_quant_row(type, x, q, 64);
    rl_dequant_row(type, q, yq, 64);
    for (int j = 0; j < 64; j++) bad += yq[j] != x[j];
    CHECK(bad == 0, "%s exact %d-level grid off at %d places", rl_type_name(type), L + 1, bad);
    for (int j = 0; j < 64; j++) x[j] = 3.0f;
    rl_quant_row(type, x, q, 64);
    rl_dequant_row(type, q, yq, 64);
    bad = 0;
    for (int j = 0; j < 64; j++) bad += yq[j] != 3.0f;
    CHECK(bad == 0, "%s constant block off at %d places", rl_type_name(type), bad);
}

/* Integer extremes of a code type's fast path: every code L (the largest) against activations
 * of -1 (int8 -127), d = 0.01, m = 0.02: the SIMD kernel against the reference and the value
 * -(0.01 L + 0.02) per weight. */
static void check_rq_extremes(uint32_t type, int L) {
    enum { R = 8, NN = 1024 };
    const size_t bs = rl_type_get(type)->size, rb = rl_row_bytes(type, NN);
    static uint8_t w[R * NN];
    static float xa[NN], ya[R], yr[R];
    static rl_q8a xq[NN / 32];
    memset(w, 0xFF, sizeof w);
    for (size_t b = 0; b < R * rb / bs; b++) {
        put_f16(w + bs * b + bs - 4, 0.01f);
        put_f16(w + bs * b + bs - 2, 0.02f);
    }
    for (int i = 0; i < NN; i++) xa[i] = -1.0f;
    rl_q8a_quant_row(xa, xq, NN);
    rl_mm m = {.type = type, .w = w, .row_bytes = rb, .n = NN, .S = 1, .x = xa, .xq = xq, .y = ya, .ys = R};
    rl_mm_rows(&m, 0, R);
    m.y = yr;
    rl_mm_rows_ref(&m, 0, R);
    const double want = -(0.01 * L + 0.02) * NN;
    int bad = 0;
    for (int r = 0; r < R; r++) bad += fabsf(ya[r] - yr[r]) > 1e-5f * fabsf(yr[r]) || fabs(yr[r] - want) > 1e-3 * -want;
    CHECK(bad == 0, "%s extremes: %d rows differ (%g vs %g, expected %g)", rl_type_name(type), bad, ya[0], yr[0], want);
}

static void test_rq2(void) {
    CHECK(rl_type_get(RL_RQ2) && rl_type_get(RL_RQ2)->blck == 64 && rl_type_get(RL_RQ2)->size == 20,
          "RQ2 geometry");
    CHECK(rl_type_computable(RL_RQ2) && rl_type_is_rawloop(RL_RQ2) && !rl_type_is_rawloop(RL_Q4_K),
          "RQ2 computable / rawloop id");
    CHECK(rl_type_from_name("rq2") == RL_RQ2 && rl_type_from_name("Q4_k") == RL_Q4_K &&
          rl_type_from_name("Q2_K") == UINT32_MAX && rl_type_from_name("") == UINT32_MAX, "type names");
    CHECK(rl_type_get(RL_RAWLOOP_TYPE_END) == NULL && rl_type_get(RL_RAWLOOP_TYPE_BASE - 1) == NULL, "ids around RQ2");
    CHECK(rl_row_bytes(RL_RQ2, 320) == 100 && rl_row_bytes(RL_RQ2, 96) == 0, "RQ2 row bytes");

    /* the table decoder equals the bit layout for every byte */
    int bad_lut = 0;
    for (uint32_t b = 0; b < 256; b++)
        for (uint32_t k = 0; k < 4; k++) bad_lut += ((rl_rq2_lut[b] >> (8 * k)) & 0xFF) != ((b >> (2 * k)) & 3);
    CHECK(bad_lut == 0, "RQ2 table decoder wrong at %d places", bad_lut);

    /* dequant of a hand-made block: codes 0,1,2,3,0,1,... (byte 0xE4), d = 0.5, m = -1 */
    uint8_t blk[20];
    memset(blk, 0xE4, 16);
    put_f16(blk + 16, 0.5f);
    put_f16(blk + 18, -1.0f);
    blk[15] = 0x1B; /* weights 60..63: codes 3,2,1,0 */
    float y[64];
    rl_dequant_row(RL_RQ2, blk, y, 64);
    int bad = 0;
    for (int j = 0; j < 64; j++) {
        int code = j < 60 ? j % 4 : 3 - j % 4;
        bad += y[j] != 0.5f * code - 1.0f;
    }
    CHECK(bad == 0, "RQ2 hand-made block decodes wrong at %d places", bad);

    /* the search must buy a real gain over min/max on gaussian data (measured: 0.52 of its
     * squared error; min/max alone would also fail the 0.33 rms bound of test_roundtrip) */
    check_rq_search(RL_RQ2, 3, 0.7);

    check_rq_extremes(RL_RQ2, 3);
}

/* ---- RQ4 ----------------------------------------------------------------------------------- */

static void test_rq4(void) {
    CHECK(rl_type_get(RL_RQ4) && rl_type_get(RL_RQ4)->blck == 64 && rl_type_get(RL_RQ4)->size == 36 &&
              rl_type_computable(RL_RQ4) && rl_type_is_rawloop(RL_RQ4) && !rl_type_fp32_act(RL_RQ4) &&
              rl_type_from_name("rq4") == RL_RQ4 && rl_row_bytes(RL_RQ4, 320) == 180 && rl_row_bytes(RL_RQ4, 96) == 0,
          "RQ4 geometry, name, activation path");
    /* a hand-made block, laid out from the documented rule: weight j of half h = j / 32 is in
     * byte 16h + j % 16, the low nibble for j % 32 < 16; codes (5j + 3) % 16, d = 0.25, m = -2 */
    uint8_t blk[36] = {0};
    for (int j = 0; j < 64; j++) blk[16 * (j / 32) + j % 16] |= (uint8_t)(((5 * j + 3) % 16) << (j % 32 < 16 ? 0 : 4));
    put_f16(blk + 32, 0.25f);
    put_f16(blk + 34, -2.0f);
    float y[64];
    rl_dequant_row(RL_RQ4, blk, y, 64);
    int bad = 0;
    for (int j = 0; j < 64; j++) bad += y[j] != 0.25f * (float)((5 * j + 3) % 16) - 2.0f;
    CHECK(bad == 0, "RQ4 hand-made block decodes wrong at %d places", bad);
    /* measured: 0.89 of min/max's squared error on this data (with 16 levels the min/max fit
     * is already close; finer candidate steps, tried up to 33 of them, found the same fits) */
    check_rq_search(RL_RQ4, 15, 0.93);

    check_rq_extremes(RL_RQ4, 15);
}

/* ---- Q5_0 / Q5_1 -------------------------------------------------------------------------- */

/* Places where one 32-value block of x does not come back through quantize + dequantize. */
static int round_trip_misses(uint32_t type, const float *x) {
    uint8_t q[64];
    float y[32];
    rl_quant_row(type, x, q, 32);
    rl_dequant_row(type, q, y, 32);
    int bad = 0;
    for (int j = 0; j < 32; j++) bad += y[j] != x[j];
    return bad;
}
/* Hand-made blocks against the layout written out here (docs/FORMATS.md): value j has low
 * nibble qs[j % 16] (low half for j < 16), fifth bit j of the little-endian qh word. Codes
 * q_j = (7 * j + 3) % 32 cover both halves and both fifth-bit values. */
static void test_q5(void) {
    CHECK(rl_type_get(RL_Q5_0)->size == 22 && rl_type_get(RL_Q5_1)->size == 24 &&
          rl_type_get(RL_Q5_0)->blck == 32 && rl_row_bytes(RL_Q5_1, 320) == 240, "Q5 geometry");
    CHECK(rl_type_computable(RL_Q5_0) && rl_type_computable(RL_Q5_1) &&
          rl_type_from_name("q5_1") == RL_Q5_1 && rl_type_from_name("Q5_0") == RL_Q5_0, "Q5 names");
    CHECK(!rl_pack_supported(RL_Q5_0, 8, 256) && rl_mm_row_tile(RL_Q5_1) == 4, "Q5 not packed");
    for (int t = 0; t < 2; t++) {
        uint32_t type = t ? RL_Q5_1 : RL_Q5_0;
        size_t qh = t ? 4 : 2;
        uint8_t blk[24] = {0};
        int code[32];
        uint32_t bits = 0;
        for (int j = 0; j < 32; j++) {
            code[j] = (7 * j + 3) % 32;
            blk[qh + 4 + j % 16] |= (uint8_t)((code[j] & 15) << (j < 16 ? 0 : 4));
            bits |= (uint32_t)(code[j] >> 4) << j;
        }
        for (int k = 0; k < 4; k++) blk[qh + k] = (uint8_t)(bits >> (8 * k));
        put_f16(blk, 0.25f);
        if (t) put_f16(blk + 2, -1.5f);
        float y[32];
        rl_dequant_row(type, blk, y, 32);
        int bad = 0;
        for (int j = 0; j < 32; j++) bad += y[j] != (t ? 0.25f * code[j] - 1.5f : 0.25f * (code[j] - 16));
        CHECK(bad == 0, "%s hand-made block decodes wrong at %d places", rl_type_name(type), bad);
        /* values on the block's own grid survive quantization exactly (the largest-magnitude
         * value -4 = 0.25 * -16 fixes Q5_0's d; min -1.5 and max 6.25 fix Q5_1's d and m) */
        float x[32];
        for (int j = 0; j < 32; j++) x[j] = y[j];
        if (!t) x[5] = -4.0f;
        else {
            x[5] = -1.5f;
            x[6] = 0.25f * 31 - 1.5f;
        }
        bad = round_trip_misses(type, x);
        CHECK(bad == 0, "%s on-grid values off at %d places after a round trip", rl_type_name(type), bad);

        /* the exact reference matmul against a float64 dot of the dequantized rows (row of 320
         * values: the shipped model's width, not a multiple of 256) */
        enum { R = 6, N = 320 };
        size_t rb = rl_row_bytes(type, N);
        static uint8_t wq[R * 24 * (N / 32)];
        static float xa[N], wr[N], ym[R];
        for (size_t r = 0; r < R; r++) random_row(type, wq + r * rb, N);
        for (size_t i = 0; i < N; i++) xa[i] = rnd_gauss();
        rl_mm m = {.type = type, .w = wq, .row_bytes = rb, .n = N, .S = 1, .x = xa, .y = ym, .ys = R};
        rl_mm_rows_ref(&m, 0, R);
        bad = 0;
        for (size_t r = 0; r < R; r++) {
            rl_dequant_row(type, wq + r * rb, wr, N);
            double dot = 0, mag = 0;
            for (size_t i = 0; i < N; i++) {
                dot += (double)wr[i] * xa[i];
                mag += fabs((double)wr[i] * xa[i]);
            }
            bad += fabs(ym[r] - dot) > 1e-6 * mag;
        }
        CHECK(bad == 0, "%s exact reference matmul off the float64 dot on %d rows", rl_type_name(type), bad);
    }
}

/* ---- Q4_1 ---------------------------------------------------------------------------------- */

/* A hand-made block against the layout written out here (ggml's block_q4_1, docs/FORMATS.md):
 * [0,2) d, [2,4) m, then value j < 16 in the low nibble of qs[j], value j + 16 in its high
 * nibble; value = d * q + m. Then on-grid values through the quantizer, and the two matmul
 * paths against a float64 dot of the dequantized rows. */
static void test_q4_1(void) {
    CHECK(rl_type_get(RL_Q4_1)->size == 20 && rl_type_get(RL_Q4_1)->blck == 32 && rl_row_bytes(RL_Q4_1, 320) == 200 &&
              rl_type_computable(RL_Q4_1) && rl_type_from_name("q4_1") == RL_Q4_1,
          "Q4_1 geometry and name");
    uint8_t blk[20] = {0};
    int code[32];
    for (int j = 0; j < 32; j++) {
        code[j] = (5 * j + 3) % 16;
        blk[4 + j % 16] |= (uint8_t)(code[j] << (j < 16 ? 0 : 4));
    }
    put_f16(blk, 0.25f);
    put_f16(blk + 2, -1.5f);
    float y[32], x[32];
    rl_dequant_row(RL_Q4_1, blk, y, 32);
    int bad = 0;
    for (int j = 0; j < 32; j++) bad += y[j] != 0.25f * code[j] - 1.5f;
    CHECK(bad == 0, "Q4_1 hand-made block decodes wrong at %d places", bad);
    /* min -1.5 and max 0.25 * 15 - 1.5 fix d and m: every on-grid value comes back */
    for (int j = 0; j < 32; j++) x[j] = y[j];
    x[5] = -1.5f;
    x[6] = 0.25f * 15 - 1.5f;
    bad = round_trip_misses(RL_Q4_1, x);
    CHECK(bad == 0, "Q4_1 on-grid values off at %d places after a round trip", bad);

    /* the fast path's reference (8-bit activations) and the exact one against a float64 dot of
     * the dequantized rows times the dequantized activations; the fast path's min term uses
     * s = d_x * sum(q_x), so it is exact up to float rounding too */
    enum { R = 5, N = 320 };
    size_t rb = rl_row_bytes(RL_Q4_1, N);
    static uint8_t wq[R * 200];
    static float xa[N], xd[N], wr[N], ye[R], yf[R];
    static rl_q8a xq[N / RL_QK];
    for (size_t r = 0; r < R; r++) random_row(RL_Q4_1, wq + r * rb, N);
    for (size_t i = 0; i < N; i++) xa[i] = rnd_gauss();
    rl_q8a_quant_row(xa, xq, N);
    for (size_t i = 0; i < N; i++) xd[i] = xq[i / RL_QK].d * xq[i / RL_QK].qs[i % RL_QK];
    rl_mm m = {.type = RL_Q4_1, .w = wq, .row_bytes = rb, .n = N, .S = 1, .x = xa, .y = ye, .ys = R};
    rl_mm_rows_ref(&m, 0, R);
    m.xq = xq;
    m.y = yf;
    rl_mm_rows_ref(&m, 0, R);
    int bad_e = 0, bad_f = 0;
    for (size_t r = 0; r < R; r++) {
        rl_dequant_row(RL_Q4_1, wq + r * rb, wr, N);
        double de = 0, df = 0, mag = 0;
        for (size_t i = 0; i < N; i++) {
            de += (double)wr[i] * xa[i];
            df += (double)wr[i] * xd[i];
            mag += fabs((double)wr[i] * xa[i]);
        }
        bad_e += fabs(ye[r] - de) > 1e-6 * mag;
        bad_f += fabs(yf[r] - df) > 1e-5 * mag;
    }
    CHECK(bad_e == 0 && bad_f == 0, "Q4_1 reference matmul off the float64 dot: exact %d, fast %d rows", bad_e, bad_f);
}

/* ---- FP8 ----------------------------------------------------------------------------------- */

/* e4m3 by its definition, written apart from src/quant.c's: sign, exponent e (bias 7), mantissa m;
 * e = 0 is subnormal. */
static double e4m3_def(int c) {
    int e = (c >> 3) & 15, m = c & 7;
    double v = e ? (1 + m / 8.0) * pow(2, e - 7) : m / 8.0 * pow(2, -6);
    return c & 0x80 ? -v : v;
}

static void test_fp8(void) {
    CHECK(rl_type_get(RL_FP8) && rl_type_get(RL_FP8)->blck == 32 && rl_type_get(RL_FP8)->size == 34 &&
              rl_row_bytes(RL_FP8, 320) == 340 && rl_type_computable(RL_FP8) && rl_type_is_rawloop(RL_FP8) &&
              rl_type_fp32_act(RL_FP8) && !rl_type_is_float(RL_FP8) && rl_type_from_name("fp8") == RL_FP8,
          "FP8 geometry, name, activation path");
    CHECK(rl_type_get(RL_RQ4 + 1) == NULL, "no type after RQ4, the last one");
    int bad = 0;
    for (int c = 0; c < 256; c++) bad += (double)rl_e4m3_to_f32((uint8_t)c) != e4m3_def(c);
    CHECK(bad == 0, "e4m3 decode differs from the definition at %d codes", bad);
    CHECK(rl_e4m3_to_f32(0x7e) == 448.0f && rl_e4m3_to_f32(0x01) == 0x1p-9f && rl_e4m3_to_f32(0x7f) == 480.0f,
          "e4m3 448 / 2^-9 / 0x7f");

    /* every finite code survives a round trip: blocks whose largest value is 448 * d (d a power
     * of two, exact in bf16) hold d * e4m3(c) for all 254 codes */
    enum { NB = 9 };
    static float x[32 * NB], y[32 * NB];
    static uint8_t q[34 * NB];
    const float d = 0x1p-5f;
    int next = 0;
    for (int i = 0; i < 32 * NB; i++) {
        int c = i % 32 == 0 ? 0x7e : next < 256 ? next++ : 0x38;
        if ((c & 0x7f) == 0x7f) c = next < 256 ? next++ : 0x38;
        x[i] = d * (float)e4m3_def(c);
    }
    rl_quant_row(RL_FP8, x, q, 32 * NB);
    rl_dequant_row(RL_FP8, q, y, 32 * NB);
    bad = 0;
    for (int i = 0; i < 32 * NB; i++) bad += memcmp(&x[i], &y[i], 4) != 0;
    CHECK(bad == 0 && next == 256, "FP8 on-grid values off at %d places (codes covered to %d)", bad, next);

    /* ties go to the even code; a block of 1e-30 keeps its values (a bf16 scale, not fp16) */
    for (int i = 0; i < 32; i++) x[i] = 0;
    x[0] = 448.0f;          /* d = 1 */
    x[1] = 1.0625f;         /* between 1 (0x38) and 1.125 (0x39): 0x38 */
    x[2] = 1.1875f;         /* between 1.125 and 1.25 (0x3a): 0x3a */
    x[3] = -3 * 0x1p-10f;   /* between subnormals 2^-9 (1) and 2^-8 (2): 2, negative */
    x[4] = 447.0f;          /* nearer 448 than 416 */
    rl_quant_row(RL_FP8, x, q, 32);
    CHECK(q[0] == 0x80 && q[1] == 0x3f && q[2 + 0] == 0x7e && q[2 + 1] == 0x38 && q[2 + 2] == 0x3a &&
              q[2 + 3] == 0x82 && q[2 + 4] == 0x7e,
          "FP8 block: d %02x%02x codes %02x %02x %02x %02x %02x", q[1], q[0], q[2], q[3], q[4], q[5], q[6]);
    for (int i = 0; i < 32; i++) x[i] = 1e-30f * (float)(i - 16);
    rl_quant_row(RL_FP8, x, q, 32);
    rl_dequant_row(RL_FP8, q, y, 32);
    double e2 = 0, x2 = 0;
    for (int i = 0; i < 32; i++) {
        e2 += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        x2 += (double)x[i] * x[i];
    }
    CHECK(sqrt(e2 / x2) < 0.05, "FP8 block of 1e-30 values: rms error %.3g", sqrt(e2 / x2));
    /* a block below 448 * bf16's smallest normal (1.2e-38) gets a subnormal d, coarse enough that
     * x / d passes 464 (where a plain rounding would reach 0x7f): the codes saturate at +-448
     * (0x7e / 0xfe, e4m3_rne's cap), never the invalid 0x7f / 0xff */
    const float amax = 649.6f * 0x1p-133f; /* amax / 448 = 1.45 steps of bf16's subnormals: d = 1 step */
    for (int i = 0; i < 32; i++) x[i] = amax * (float)(i - 16) / 16;
    rl_quant_row(RL_FP8, x, q, 32);
    float dq = rl_bf16_to_f32((uint16_t)(q[0] | q[1] << 8));
    bad = 0;
    int sat = 0;
    for (int i = 0; i < 32; i++) {
        bad += (q[2 + i] & 0x7f) == 0x7f;
        sat += (q[2 + i] & 0x7f) == 0x7e;
    }
    CHECK(dq == 0x1p-133f && amax / dq > 464 && bad == 0 && sat >= 2,
          "FP8 subnormal d %g: %d invalid codes, %d saturated", dq, bad, sat);
}

/* Checked bit for bit where one result is one block's term: with one-hot activations (column s
 * is 1 at index s, 0 elsewhere) the exact path must return the value rl_dequant_row gives (every
 * SIMD build claims a bit-identical dequantization), and on NEON the fast path the reference's
 * own single-block term (integer dot exact, the same scale products, Q5_1's m * s added once).
 * The x86 fast paths do not claim that: Q4_0's / Q5_0's offset is folded in another lane (AVX-512)
 * or as a separate float term (AVX2), so one block's term is two rounded products. */
static void test_onehot(void) {
#if defined(__aarch64__)
    const int fast_checked = 1;
#else
    const int fast_checked = 0;
#endif
    const uint32_t types[] = {RL_Q8_0, RL_Q4_0, RL_Q4_1, RL_Q5_0, RL_Q5_1, RL_Q4_K, RL_Q5_K, RL_Q6_K, RL_FP8};
    enum { R = 5, N = 256 };
    static float x[N * N], y[N * R], yr[N * R], wrow[N * R];
    static rl_q8a xq[N * (N / RL_QK)];
    static uint8_t w[R * 34 * (N / RL_QK)]; /* Q8_0's rows are the longest */
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        uint32_t type = types[t];
        size_t rb = rl_row_bytes(type, N);
        CHECK(rb * R <= sizeof w, "%s rows do not fit the test's buffer", rl_type_name(type));
        if (rb * R > sizeof w) continue;
        for (size_t r = 0; r < R; r++) {
            random_row(type, w + r * rb, N);
            rl_dequant_row(type, w + r * rb, wrow + r * N, N);
        }
        memset(x, 0, sizeof x);
        for (size_t s = 0; s < N; s++) {
            x[s * N + s] = 1.0f;
            rl_q8a_quant_row(x + s * N, xq + s * (N / RL_QK), N);
        }
        for (int fast = 0; fast < 1 + fast_checked; fast++) {
            rl_mm m = {.type = type, .w = w, .row_bytes = rb, .n = N, .S = N, .x = x, .xq = fast ? xq : NULL,
                       .y = y, .ys = R};
            rl_mm_rows(&m, 0, R);
            m.y = yr;
            rl_mm_rows_ref(&m, 0, R);
            int bad = 0, bad_deq = 0;
            for (size_t s = 0; s < N; s++)
                for (size_t r = 0; r < R; r++) {
                    bad += y[s * R + r] != yr[s * R + r];
                    if (!fast) bad_deq += y[s * R + r] != wrow[r * N + s];
                }
            CHECK(bad == 0 && bad_deq == 0, "%s one-hot fast=%d: %d results differ from the reference, %d from rl_dequant_row",
                  rl_type_name(type), fast, bad, bad_deq);
        }
    }
}

/* A build whose compiler targets SIMD must not silently run the scalar fallback. */
static void test_simd_selected(void) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
    CHECK(strcmp(rl_simd_name(), "avx512-vnni") == 0, "AVX-512 VNNI build runs %s kernels", rl_simd_name());
#elif defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    CHECK(strcmp(rl_simd_name(), "avx512") == 0, "AVX-512 build runs %s kernels", rl_simd_name());
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    CHECK(strcmp(rl_simd_name(), "avx2") == 0, "AVX2 build runs %s kernels", rl_simd_name());
#elif defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
    CHECK(strcmp(rl_simd_name(), "neon-dotprod") == 0, "dotprod build runs %s kernels", rl_simd_name());
#elif defined(__aarch64__) && defined(__ARM_NEON)
    CHECK(strcmp(rl_simd_name(), "neon") == 0, "NEON build runs %s kernels", rl_simd_name());
#endif
}

/* ---- tool mode for the Python oracle ------------------------------------------------------- */

static uint32_t type_by_name(const char *name) {
    return rl_type_from_name(name);
}

static void *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(l > 0 ? (size_t)l : 1);
    *len = fread(p, 1, (size_t)(l > 0 ? l : 0), f);
    fclose(f);
    return p;
}

static int tool(int argc, char **argv) {
    if (argc != 5 && !(argc == 6 && strcmp(argv[1], "quant") == 0)) {
        fprintf(stderr, "usage: %s dequant|quant TYPE in out, or quant TYPE in out w\n", argv[0]);
        return 2;
    }
    uint32_t type = type_by_name(argv[2]);
    if (type == UINT32_MAX || !rl_type_computable(type)) {
        fprintf(stderr, "type %s is not computable\n", argv[2]);
        return 2;
    }
    const rl_type_info *ti = rl_type_get(type);
    size_t len;
    uint8_t *in = slurp(argv[3], &len);
    if (!in) {
        fprintf(stderr, "cannot read %s\n", argv[3]);
        return 2;
    }
    size_t n, outlen;
    void *out;
    if (strcmp(argv[1], "dequant") == 0) {
        if (len % ti->size) return fprintf(stderr, "size %zu not a multiple of %zu\n", len, ti->size), 2;
        n = len / ti->size * ti->blck;
        outlen = n * sizeof(float);
        out = malloc(outlen ? outlen : 1);
        rl_dequant_row(type, in, out, n);
    } else if (strcmp(argv[1], "quant") == 0) {
        n = len / sizeof(float);
        if (len % sizeof(float) || n % ti->blck) return fprintf(stderr, "bad float count\n"), 2;
        outlen = rl_row_bytes(type, n);
        out = malloc(outlen ? outlen : 1);
        float *x = malloc(len ? len : 1);
        memcpy(x, in, len); /* aligned copy */
        if (argc == 6) {
            /* rows of cols = |w| values, each quantized with the same importances */
            size_t wlen, cols;
            float *w = slurp(argv[5], &wlen);
            cols = wlen / sizeof(float);
            if (!w || !cols || wlen % sizeof(float) || cols % ti->blck || n % cols)
                return fprintf(stderr, "bad importances %s\n", argv[5]), 2;
            for (size_t r = 0; r < n / cols; r++)
                rl_quant_row_w(type, x + r * cols, (uint8_t *)out + r * rl_row_bytes(type, cols), cols, w);
            free(w);
        } else {
            rl_quant_row(type, x, out, n);
        }
        free(x);
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        return 2;
    }
    FILE *f = fopen(argv[4], "wb");
    if (!f || fwrite(out, 1, outlen, f) != outlen) return fprintf(stderr, "cannot write %s\n", argv[4]), 2;
    fclose(f);
    free(in);
    free(out);
    return 0;
}

/* sum_j w_j (x_j - deq_j)^2 of x quantized by rl_quant_row_w(type, ..., qw), in double. */
static double weighted_err(uint32_t type, const float *x, const float *w, const float *qw,
                           size_t n, uint8_t *buf, float *y) {
    rl_quant_row_w(type, x, buf, n, qw);
    rl_dequant_row(type, buf, y, n);
    double e = 0;
    for (size_t j = 0; j < n; j++) e += (double)w[j] * ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
    return e;
}

/* The types whose weighted quantizer is llama.cpp's imatrix quantizer. */
static bool is_imatrix(uint32_t ty) {
    return ty == RL_Q4_0 || ty == RL_Q4_1 || ty == RL_Q5_0 || ty == RL_Q5_1 || ty == RL_Q4_K || ty == RL_Q5_K ||
           ty == RL_Q6_K;
}

/* rl_quant_row_w: NULL weights give rl_quant_row's bytes exactly (every type), and so do uniform
 * ones for RQ2 (block_w skips its search) and the types without one. Q4_0/Q4_1/Q5_0/Q5_1 and
 * Q4_K/Q5_K/Q6_K run llama.cpp's imatrix search whenever there are weights, equal or not
 * (llama.cpp does; its error weight w_j sqrt(sigma2 + x_j^2), or Q6_K's w_j in place of the
 * reference's x_j^2, is not the reference's then): equal weights differ from the reference
 * quantizer, and a power-of-two factor on all of them changes no byte (every sum scales
 * exactly). With heavy-tailed per-column weights the searched types lower the weighted error
 * (RQ2 on every block, by construction: the plain fit is one of its candidates; the others on
 * average: K-quants round their 6-bit sub-block scales after the search, and the legacy types
 * weight by w_j sqrt(sigma2 + x_j^2), not w_j, and round d and m to fp16 after it). */
static void test_weighted(void) {
    enum { N = 1024 };
    float *x = malloc(N * sizeof *x), *w = malloc(N * sizeof *w), *y = malloc(N * sizeof *y);
    float *ones = malloc(N * sizeof *ones), *flat = malloc(N * sizeof *flat), *four = malloc(N * sizeof *four);
    uint8_t *a = malloc(N * 4), *b = malloc(N * 4), *c = malloc(N * 4);
    for (size_t j = 0; j < N; j++) {
        ones[j] = 1.0f;
        flat[j] = 3.7f;
        four[j] = 4.0f;
    }
    for (size_t t = 0; t < sizeof k_types / sizeof *k_types; t++) {
        uint32_t ty = k_types[t];
        size_t bad = 0, moved = 0;
        for (int r = 0; r < 20; r++) {
            for (size_t j = 0; j < N; j++) x[j] = rnd_gauss() * (r % 3 == 0 ? 0.02f : 1.0f);
            size_t rb = rl_row_bytes(ty, N);
            rl_quant_row(ty, x, a, N);
            rl_quant_row_w(ty, x, b, N, NULL);
            bad += memcmp(a, b, rb) != 0;
            rl_quant_row_w(ty, x, b, N, ones);
            if (is_imatrix(ty)) {
                moved += memcmp(a, b, rb) != 0;
                rl_quant_row_w(ty, x, c, N, four);
                bad += memcmp(b, c, rb) != 0;
                continue;
            }
            bad += memcmp(a, b, rb) != 0;
            rl_quant_row_w(ty, x, b, N, flat);
            bad += memcmp(a, b, rb) != 0;
        }
        CHECK(bad == 0, "%s: %zu rows differ from rl_quant_row with NULL/uniform weights (imatrix "
              "types: uniform 1 vs 4)", rl_type_name(ty), bad);
        CHECK(!is_imatrix(ty) || moved == 20, "%s: %zu of 20 rows with uniform weights are the "
              "reference quantizer's", rl_type_name(ty), 20 - moved);
    }
    static const uint32_t searched[] = {RL_RQ2, RL_RQ4, RL_Q4_K, RL_Q5_K, RL_Q6_K, RL_Q4_0, RL_Q4_1, RL_Q5_0, RL_Q5_1};
    for (size_t t = 0; t < sizeof searched / sizeof *searched; t++) {
        uint32_t ty = searched[t];
        size_t bs = rl_type_get(ty)->blck, bb = rl_type_get(ty)->size;
        double sum_w = 0, sum_u = 0;
        size_t worse_blocks = 0, blocks = 0;
        for (int r = 0; r < 40; r++) {
            for (size_t j = 0; j < N; j++) {
                x[j] = rnd_gauss();
                float g = rnd_gauss();
                w[j] = expf(1.5f * g); /* log-normal: a few columns dominate, like activations */
            }
            double ew = weighted_err(ty, x, w, w, N, a, y), eu = weighted_err(ty, x, w, NULL, N, b, y);
            sum_w += ew;
            sum_u += eu;
            for (size_t k = 0; k < N / bs; k++, blocks++) { /* block by block */
                double bw = 0, bu = 0;
                float ya[256], yb[256];
                rl_dequant_row(ty, a + bb * k, ya, bs);
                rl_dequant_row(ty, b + bb * k, yb, bs);
                for (size_t j = 0; j < bs; j++) {
                    double xa = x[bs * k + j];
                    bw += w[bs * k + j] * (xa - ya[j]) * (xa - ya[j]);
                    bu += w[bs * k + j] * (xa - yb[j]) * (xa - yb[j]);
                }
                worse_blocks += bw > bu * (1 + 1e-6);
            }
        }
        /* RQ2, RQ4: never; the others: few (measured: Q4_K 0, Q5_K 2, Q6_K 0 of 160, Q4_0 43,
         * Q4_1 6, Q5_0 41, Q5_1 9 of 1280) */
        CHECK(ty == RL_RQ2 || ty == RL_RQ4 ? worse_blocks == 0 : worse_blocks * 10 < blocks, "%s: %zu of %zu blocks "
              "with a larger weighted error than the plain fit", rl_type_name(ty), worse_blocks, blocks);
        CHECK(sum_w < 0.97 * sum_u, "%s: weighted error %g, plain fit's %g (ratio %.3f)",
              rl_type_name(ty), sum_w, sum_u, sum_w / sum_u);
        printf("weighted %s: weighted error ratio %.3f, %zu of %zu blocks worse than the plain fit\n",
               rl_type_name(ty), sum_w / sum_u, worse_blocks, blocks);
    }
    CHECK(rl_quant_uses_weights(RL_RQ2) && rl_quant_uses_weights(RL_RQ4) && rl_quant_uses_weights(RL_Q4_K) && rl_quant_uses_weights(RL_Q4_0) &&
          rl_quant_uses_weights(RL_Q5_1) && rl_quant_uses_weights(RL_Q6_K) && !rl_quant_uses_weights(RL_Q8_0) &&
          !rl_quant_uses_weights(RL_FP8),
          "uses_weights");
    free(x); free(w); free(y); free(ones); free(flat); free(four); free(a); free(b); free(c);
}

/* rl_quant_row_fast (the SIMD weight quantizer the quantize and mkmodel tools call) gives
 * rl_quant_row's bytes for every type: random rows, and blocks made to hit its edge cases (codes
 * at exact .5 ties, negative ties, an all-zero block, one nonzero value, tiny and huge scales). */
static void test_quant_fast(void) {
    enum { N = 1024 };
    static float x[N];
    static uint8_t a[N * 4], b[N * 4]; /* F32 rows are the widest */
    int bad = 0, rows = 0;
    for (size_t t = 0; t < NTYPES; t++) {
        const uint32_t type = k_types[t];
        const size_t rb = rl_row_bytes(type, N);
        CHECK(rb <= sizeof a, "%s: a row of %zu bytes does not fit the test's buffers", rl_type_name(type), rb);
        for (int r = 0; r < 12 && rb <= sizeof a; r++, rows++) {
            const float scale = r < 4 ? 1.0f : r < 8 ? 1e-4f : 300.0f;
            for (size_t i = 0; i < N; i++) x[i] = rnd_gauss() * scale;
            if (r % 4 == 1) /* amax 127 in each 32-block: d = 1, so v.5 values are exact ties */
                for (size_t i = 0; i < N; i++) x[i] = i % 32 == 0 ? 127.0f : (float)((int)(rnd() % 254) - 127) + 0.5f; /* -126.5 .. 126.5 */
            if (r % 4 == 2) /* amax 12.7: d = 0.1 (inexact), values near ties */
                for (size_t i = 0; i < N; i++) x[i] = i % 32 == 5 ? -12.7f : 0.05f * (float)((int)(rnd() % 509) - 254);
            if (r % 4 == 3) { /* a zero block and a block with one value */
                for (size_t i = 0; i < 64; i++) x[i] = 0.0f;
                x[40] = -3.25f;
            }
            memset(a, 0x11, rb);
            memset(b, 0x22, rb);
            rl_quant_row(type, x, a, N);
            rl_quant_row_fast(type, x, b, N, NULL);
            if (memcmp(a, b, rb)) bad++;
        }
    }
    CHECK(bad == 0, "rl_quant_row_fast differs from rl_quant_row on %d of %d rows", bad, rows);
    /* rl_first_nonfinite (the quantize tool's check) over lengths that end inside and outside
     * a SIMD step, a NaN or an infinity anywhere, and finite extremes that must pass */
    int miss = 0;
    static const size_t lens[] = {0, 1, 3, 4, 7, 8, 9, 33, 1000};
    const float odd[] = {NAN, INFINITY, -INFINITY};
    const float fin[3] = {FLT_MAX, -1e-40f, -0.0f}; /* x[i] = fin[i % 3] */
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const size_t n = lens[li];
        for (size_t i = 0; i < n; i++) x[i] = fin[i % 3];
        miss += rl_first_nonfinite(x, n) != SIZE_MAX;
        for (size_t at = 0; at < n; at += n / 5 + 1)
            for (int k = 0; k < 3; k++) {
                x[at] = odd[k];
                if (at + 1 < n) x[n - 1] = NAN; /* a later one does not hide the first */
                miss += rl_first_nonfinite(x, n) != at;
                x[at] = fin[at % 3];
                x[n - 1] = fin[(n - 1) % 3];
            }
    }
    CHECK(miss == 0, "rl_first_nonfinite: %d wrong answers", miss);
    /* and the tools' row decoder, rl_dequant_row_fast, gives rl_dequant_row's values */
    static float ya[N], yb[N];
    bad = 0;
    for (size_t t = 0; t < NTYPES; t++)
        for (int r = 0; r < 4; r++) {
            random_row(k_types[t], a, N);
            rl_dequant_row(k_types[t], a, ya, N);
            rl_dequant_row_fast(k_types[t], a, yb, N);
            if (memcmp(ya, yb, sizeof ya)) bad++;
        }
    CHECK(bad == 0, "rl_dequant_row_fast differs from rl_dequant_row on %d rows", bad);
}

int main(int argc, char **argv) {
    if (argc > 1) return tool(argc, argv);
    test_quant_fast();
    test_f16();
#if defined(__aarch64__)
    test_f16_arm64();
#endif
    test_roundtrip();
    test_kernels();
    test_packed();
    test_int_extremes();
    test_batch_bits();
    test_rq2();
    test_rq4();
    test_q5();
    test_q4_1();
    test_fp8();
    test_weighted();
    test_onehot();
    test_simd_selected();
    return check_report("test_quant");
}
