/* GPU kernel tests (need a CUDA device; run by tests/cuda/run_device.sh). Every matvec type
 * and epilogue mode against a float64 reference computed on the CPU from rl_dequant_row (the
 * reference dequantiser), over several shapes; RQ2 under both of its code decoders
 * (RL_CUDA_RQ2_LUT=0 and 1), the streamed types (F16, BF16, Q8_0, FP8, Q4_0, RQ4, Q4_K, Q5_K, Q6_K) under
 * both matvec kernels (RL_CUDA_MVS=1 and 0), and the types with a scale plane but the K-quants also
 * with the streamed kernel's bulk pages (RL_CUDA_MVB=1, pages of about 8 KB and of about 1 KB): all of which must
 * agree bit for bit; a QKV whose V has another type in one launch against each matrix alone; the argmax's first-max tie
 * rule; the fast prefill's attention kernels. Without a device it says so and exits 77 (skipped). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "quant.h"
#include "rl_cuda.h"

static uint64_t rs = 0x243f6a8885a308d3ULL;
static float frand(void) { /* uniform in [-1, 1) */
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((rs >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* Output r of a launch in mode (0 store, 1 add onto init, 2 SwiGLU of the two halves) from the
 * float64 reference dots. */
static double expected(const double *ref, const double *init, size_t rows, int mode, size_t r) {
    double v = ref[r];
    if (mode == 1) v += init[r];
    if (mode == 2) v = ref[r] / (1.0 + exp(-ref[r])) * ref[r + rows / 2];
    return v;
}

/* One GPU run of the matvec (y gets its output) against ref (init: y's values before it, the
 * residual of mode 1), then a second run that must give the same bits. dn names the variant. */
static void check_gpu(uint32_t type, const uint8_t *w, size_t rows, size_t cols, const float *x,
                      const float *nw, int mode, bool fast, const double *ref, const double *init,
                      float *y, const char *dn, int *kernel) {
    size_t out = mode == 2 ? rows / 2 : rows, rb = rl_row_bytes(type, cols);
    for (size_t r = 0; r < out; r++) y[r] = (float)init[r];
    double mx = 0, err = 0;
    for (size_t r = 0; r < out; r++) mx = fmax(mx, fabs(expected(ref, init, rows, mode, r)));
    rl_err e = {{0}};
    int rc = rl_cuda_test_matvec(type, w, rows, cols, rb, x, nw, 1e-5f, mode, fast, y, kernel, &e);
    CHECK(rc == 0, "%s: %s", rl_type_name(type), e.msg);
    int bad = 0;
    for (size_t r = 0; r < out; r++) {
        double v = expected(ref, init, rows, mode, r);
        if (!isfinite(y[r])) bad++;
        double d = fabs((double)y[r] - v);
        if (d > err) err = d;
    }
    double rel = mx > 0 ? err / mx : err;
    CHECK(bad == 0 && rel < 2e-5, "%s%s %zux%zu mode %d norm %d %s: rel err %.3g, %d non-finite",
          rl_type_name(type), dn, rows, cols, mode, nw != NULL, fast ? "q8" : "f32", rel, bad);
    printf("  matvec %-5s %5zu x %-5zu mode %d norm %d %s: max rel err %.2e%s\n", rl_type_name(type),
           rows, cols, mode, nw != NULL, fast ? "q8 " : "f32", rel, dn);
    /* run-to-run: the same input gives the same bits */
    float *y2 = malloc(rows * sizeof(float));
    for (size_t r = 0; r < out; r++) y2[r] = (float)init[r];
    if (mode != 1)
        for (size_t r = 0; r < out; r++) y2[r] = 12345.0f;
    rc = rl_cuda_test_matvec(type, w, rows, cols, rb, x, nw, 1e-5f, mode, fast, y2, NULL, &e);
    CHECK(rc == 0 && memcmp(y, y2, out * sizeof(float)) == 0, "%s%s: second run differs", rl_type_name(type), dn);
    free(y2);
}

/* A rows x cols matrix of type from uniform values (F32 in [-1, 1), the others in [-0.5, 0.5)),
 * quantized by the CPU's rl_quant_row; the caller frees it. */
static uint8_t *rand_matrix(uint32_t type, size_t rows, size_t cols) {
    const size_t rb = rl_row_bytes(type, cols);
    uint8_t *w = malloc(rows * rb);
    float *row = malloc(cols * sizeof(float));
    for (size_t r = 0; r < rows; r++) {
        for (size_t i = 0; i < cols; i++) row[i] = frand() * (type == RL_F32 ? 1.0f : 0.5f);
        rl_quant_row(type, row, w + r * rb, cols);
    }
    free(row);
    return w;
}

/* fast: the 8-bit-activation path where the type has one; its reference is the CPU's own fast
 * path (rl_mm_rows_ref on rl_q8a_quant_row_ref of the normalised input), whose per-chunk terms
 * the GPU reproduces exactly (only the summation order differs). */
static void test_matvec(uint32_t type, size_t rows, size_t cols, int mode, int with_norm, bool fast) {
    size_t rb = rl_row_bytes(type, cols);
    uint8_t *w = rand_matrix(type, rows, cols);
    float *row = malloc(cols * sizeof(float)), *x = malloc(cols * sizeof(float));
    float *nw = malloc(cols * sizeof(float)), *xn = malloc(cols * sizeof(float));
    size_t out = mode == 2 ? rows / 2 : rows;
    float *y = malloc(rows * sizeof(float));
    double *ref = malloc(rows * sizeof(double)), *init = malloc(rows * sizeof(double));
    for (size_t i = 0; i < cols; i++) x[i] = frand() * 3.0f, nw[i] = 0.5f + frand() * 0.25f;
    if (with_norm) { /* the CPU's rmsnorm, op for op */
        double ss = 0;
        for (size_t i = 0; i < cols; i++) ss += (double)x[i] * x[i];
        float rr = 1.0f / sqrtf((float)(ss / (double)cols) + 1e-5f);
        for (size_t i = 0; i < cols; i++) xn[i] = nw[i] * (x[i] * rr);
    } else {
        memcpy(xn, x, cols * sizeof(float));
    }
    fast = fast && rl_cuda_has_q8(type);
    if (fast) {
        rl_q8a *xq = malloc(rl_q8a_row_bytes(cols));
        float *yf = malloc(rows * sizeof(float));
        rl_q8a_quant_row_ref(xn, xq, cols);
        rl_mm m = {.type = type, .w = w, .row_bytes = rb, .n = cols, .S = 1, .x = xn, .xq = xq,
                   .y = yf, .ys = rows};
        rl_mm_rows_ref(&m, 0, rows);
        for (size_t r = 0; r < rows; r++) ref[r] = yf[r];
        free(xq);
        free(yf);
    } else {
        for (size_t r = 0; r < rows; r++) {
            rl_dequant_row(type, w + r * rb, row, cols);
            double s = 0;
            for (size_t i = 0; i < cols; i++) s += (double)row[i] * xn[i];
            ref[r] = s;
        }
    }
    for (size_t r = 0; r < out; r++) init[r] = mode == 1 ? frand() * 10 : 12345.0f;
    /* Kernels that must give the same bits (the knobs are read at every test call), each
     * checked against the reference: RQ2's two code decoders (the integer dot, and the fp32
     * path's order, do not depend on the decoder), and for the plane types the streamed matvec
     * and the register-loaded one (the same per-lane unit order and dot functions), and for
     * those with a scale plane the streamed one's bulk pages, of about 8 KB and about 1 KB.
     * Variant 0 is the streamed kernel (RQ2: with the shift decoder), 1 the register one. */
    const bool streams = type == RL_F16 || type == RL_BF16 || type == RL_Q8_0 || type == RL_FP8 || type == RL_Q4_0 ||
                         type == RL_RQ2 || type == RL_RQ4 || type == RL_Q4_K || type == RL_Q5_K || type == RL_Q6_K; /* RQ2: the shift decoder streams, the table one does not */
    const bool bulk = streams && type != RL_F16 && type != RL_BF16 && type != RL_Q4_K && type != RL_Q5_K && type != RL_Q6_K &&
                      cols % 256 == 0;
    const char *knob = type == RL_RQ2 ? "RL_CUDA_RQ2_LUT" : "RL_CUDA_MVS";
    const struct {
        const char *on, *mvb, *page, *name;
    } var[4] = {{type == RL_RQ2 ? "0" : "1", "0", "8", type == RL_RQ2 ? " shift" : " streamed"},
                {type == RL_RQ2 ? "1" : "0", "0", "8", type == RL_RQ2 ? " lut" : " registers"},
                {type == RL_RQ2 ? "0" : "1", "1", "8", " bulk"},
                {type == RL_RQ2 ? "0" : "1", "1", "1", " bulk 1 KB pages"}};
    float *y0 = malloc(rows * sizeof(float));
    for (int k = 0; k < (bulk ? 4 : streams ? 2 : 1); k++) {
        if (streams) {
            setenv(knob, var[k].on, 1);
            setenv("RL_CUDA_MVB", var[k].mvb, 1);
            setenv("RL_CUDA_MVB_PAGE", var[k].page, 1);
        }
        int kernel = -1;
        check_gpu(type, w, rows, cols, x, with_norm ? nw : NULL, mode, fast, ref, init, y, streams ? var[k].name : "", &kernel);
        const int want = !streams || k == 1 || cols % 64 ? 0 : k >= 2 ? 2 : 1;
        static const char *kname[3] = {"registers", "streamed", "streamed with bulk copies"};
        CHECK(kernel == want, "%s %zux%zu%s: the %s kernel ran, expected the %s one", rl_type_name(type), rows, cols,
              streams ? var[k].name : "", kernel >= 0 && kernel <= 2 ? kname[kernel] : "?", kname[want]);
        if (k == 0) memcpy(y0, y, out * sizeof(float));
        else CHECK(memcmp(y0, y, out * sizeof(float)) == 0, "%s %zux%zu mode %d %s:%s and%s differ",
                   rl_type_name(type), rows, cols, mode, fast ? "q8" : "f32", var[0].name, var[k].name);
    }
    unsetenv(knob);
    unsetenv("RL_CUDA_MVB");
    unsetenv("RL_CUDA_MVB_PAGE");
    free(y0);
    free(w); free(row); free(x); free(nw); free(xn); free(y); free(ref); free(init);
}

/* Exact chunks: one launch of ns = 4, 8 and 16 columns must give every column the bits of the
 * one-column launch (decoding's kernel) on the same input, in both numerics; for Q4_0 / Q8_0
 * with 8-bit activations under both chunk kernels (RL_CUDA_MVX=1: int8 tensor cores in both
 * layouts, RL_CUDA_MVX_RES=0 and 1; RL_CUDA_MVX=0: dp4a). */
static void test_chunk(uint32_t type, size_t rows, size_t cols, int mode, int with_norm, bool fast) {
    enum { NS = 16 };
    const size_t rb = rl_row_bytes(type, cols), out = mode == 2 ? rows / 2 : rows;
    uint8_t *w = rand_matrix(type, rows, cols);
    float *x = malloc(NS * cols * sizeof(float));
    float *nw = malloc(cols * sizeof(float)), *init = malloc(out * sizeof(float));
    float *y1 = malloc(NS * out * sizeof(float)), *yc = malloc(NS * out * sizeof(float));
    for (size_t i = 0; i < NS * cols; i++) x[i] = frand() * 3.0f;
    for (size_t i = 0; i < cols; i++) nw[i] = 0.5f + frand() * 0.25f;
    for (size_t r = 0; r < out; r++) init[r] = mode == 1 ? frand() * 10 : 12345.0f;
    fast = fast && rl_cuda_has_q8(type);
    const float *nwp = with_norm ? nw : NULL;
    rl_err e = {{0}};
    for (size_t s = 0; s < NS; s++) {
        memcpy(y1 + s * out, init, out * sizeof(float));
        CHECK(rl_cuda_test_matvec(type, w, rows, cols, rb, x + s * cols, nwp, 1e-5f, mode, fast, y1 + s * out, NULL, &e) == 0,
              "%s: %s", rl_type_name(type), e.msg);
    }
    const bool mma = fast && (type == RL_Q4_0 || type == RL_Q8_0);
    static const char *const kname[3] = {" mma blocked", " mma residue", " dp4a"};
    for (int k = 0; k < (mma ? 3 : 1); k++) {
        setenv("RL_CUDA_MVX", k == 2 ? "0" : "1", 1);
        setenv("RL_CUDA_MVX_RES", k == 1 ? "1" : "0", 1);
        for (size_t ns = 4; ns <= NS; ns *= 2) {
            for (size_t s = 0; s < ns; s++) memcpy(yc + s * out, init, out * sizeof(float));
            int rc = rl_cuda_test_matvec_chunk(type, w, rows, cols, rb, x, nwp, 1e-5f, mode, fast, ns, yc, &e);
            CHECK(rc == 0, "%s chunk %zu: %s", rl_type_name(type), ns, e.msg);
            size_t bad = 0;
            for (size_t i = 0; i < ns * out; i++) bad += memcmp(&yc[i], &y1[i], sizeof(float)) != 0;
            CHECK(rc == 0 && bad == 0, "%s %zux%zu mode %d norm %d %s%s: chunk of %zu differs from one column at a time in %zu of %zu outputs",
                  rl_type_name(type), rows, cols, mode, with_norm, fast ? "q8" : "f32", mma ? kname[k] : "",
                  ns, bad, ns * out);
        }
    }
    unsetenv("RL_CUDA_MVX");
    unsetenv("RL_CUDA_MVX_RES");
    printf("  chunk  %-5s %5zu x %-5zu mode %d norm %d %s: 4/8/16 columns = one at a time%s\n", rl_type_name(type), rows,
           cols, mode, with_norm, fast ? "q8 " : "f32", mma ? " (mma blocked, mma residue, dp4a)" : "");
    free(w); free(x); free(nw); free(init); free(y1); free(yc);
}

/* A QKV whose V has another type (Q4_K_M's Q4_K beside Q6_K, Q5_K_M's Q5_K beside Q6_K): one
 * step of both matrices on the same input must give each matrix's rows the bits of its own
 * launch (test_matvec checks those against the CPU), in one launch where the pair streams
 * (RL_CUDA_MVS2=1, mvs.cu mvs2_kernel) and in two with the knob off. */
static void test_pair(uint32_t t1, uint32_t t2, size_t rows1, size_t rows2, size_t cols, int with_norm, bool fast) {
    const uint32_t ty[2] = {t1, t2};
    const size_t rows[2] = {rows1, rows2}, rb[2] = {rl_row_bytes(t1, cols), rl_row_bytes(t2, cols)};
    uint8_t *w[2];
    w[0] = rand_matrix(t1, rows1, cols); /* in this order: the draws of frand() are the test's */
    w[1] = rand_matrix(t2, rows2, cols);
    float *x = malloc(cols * sizeof(float)), *nw = malloc(cols * sizeof(float));
    float *y1 = malloc((rows1 + rows2) * sizeof(float)), *yp = malloc((rows1 + rows2) * sizeof(float));
    for (size_t i = 0; i < cols; i++) x[i] = frand() * 3.0f, nw[i] = 0.5f + frand() * 0.25f;
    const float *nwp = with_norm ? nw : NULL;
    fast = fast && rl_cuda_has_q8(t1) && rl_cuda_has_q8(t2);
    rl_err e = {{0}};
    /* each matrix alone (the streamed kernel, as decoding runs it) */
    setenv("RL_CUDA_MVS", "1", 1);
    for (int m = 0; m < 2; m++)
        CHECK(rl_cuda_test_matvec(ty[m], w[m], rows[m], cols, rb[m], x, nwp, 1e-5f, 0, fast, y1 + (m ? rows1 : 0), NULL, &e) == 0,
              "%s: %s", rl_type_name(ty[m]), e.msg);
    const bool streams = cols % 64 == 0;
    for (int k = 1; k >= 0; k--) {
        setenv("RL_CUDA_MVS2", k ? "1" : "0", 1);
        int launches = -1;
        for (size_t r = 0; r < rows1 + rows2; r++) yp[r] = 12345.0f;
        CHECK(rl_cuda_test_matvec_pair(t1, w[0], rows1, rb[0], t2, w[1], rows2, rb[1], cols, x, nwp, 1e-5f, fast, yp, &launches, &e) == 0,
              "%s + %s: %s", rl_type_name(t1), rl_type_name(t2), e.msg);
        const int want = k && streams ? 1 : 2;
        CHECK(launches == want, "%s + %s %zu + %zu x %zu, RL_CUDA_MVS2=%d: %d launches, expected %d", rl_type_name(t1),
              rl_type_name(t2), rows1, rows2, cols, k, launches, want);
        size_t bad = 0;
        for (size_t r = 0; r < rows1 + rows2; r++) bad += memcmp(&yp[r], &y1[r], sizeof(float)) != 0;
        CHECK(bad == 0, "%s + %s %zu + %zu x %zu norm %d %s, RL_CUDA_MVS2=%d: %zu of %zu outputs differ from each matrix's own launch",
              rl_type_name(t1), rl_type_name(t2), rows1, rows2, cols, with_norm, fast ? "q8" : "f32", k, bad, rows1 + rows2);
    }
    unsetenv("RL_CUDA_MVS2");
    unsetenv("RL_CUDA_MVS");
    printf("  pair   %-4s + %-4s %5zu + %-5zu x %-5zu norm %d %s: one launch = two = each alone\n", rl_type_name(t1),
           rl_type_name(t2), rows1, rows2, cols, with_norm, fast ? "q8 " : "f32");
    free(w[0]); free(w[1]); free(x); free(nw); free(y1); free(yp);
}

static void test_argmax(void) {
    size_t n = 32000;
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = frand();
    size_t at[3] = {31999, 7, 12345};
    for (int k = 0; k < 3; k++) {
        v[at[k]] = 5.0f; /* ties: the first one must win */
        int32_t want = (int32_t)at[0], got = -1;
        for (int j = 0; j <= k; j++) if ((int32_t)at[j] < want) want = (int32_t)at[j];
        rl_err e = {{0}};
        CHECK(rl_cuda_test_argmax(v, n, &got, &e) == 0, "%s", e.msg);
        CHECK(got == want, "argmax: got %d, want %d", got, want);
    }
    free(v);
}

/* The fast prefill's attention against a float64 causal softmax over the same fp16 cache and
 * fp32 q: queries that do not fill the last 64-query tile, a start past 0 that is no multiple
 * of the key tile, grouped heads, every head size the tensor-core kernel has and one it lacks
 * (256: the fp32 kernel). The bound is the fast class's: the tensor-core kernel rounds q and
 * the softmax weights to fp16; the output itself is fp16. Both kernels, twice: same bytes. */
static void test_prefill_attention(void) {
    const int cases[][5] = {/* n_head, n_head_kv, hd, n_tok, pos0 */
                            {4, 1, 64, 100, 0}, {4, 2, 128, 200, 37}, {2, 2, 80, 65, 130}, {3, 1, 96, 1, 63},
                            {8, 8, 128, 512, 0}, {2, 1, 256, 70, 5}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int nh = cases[ci][0], nkv = cases[ci][1], hd = cases[ci][2], nt = cases[ci][3], p0 = cases[ci][4];
        const size_t nq = (size_t)nt * nh * hd, kvd = (size_t)nkv * hd, nkv_all = (size_t)(p0 + nt) * kvd;
        float *q = malloc(nq * sizeof *q);
        uint16_t *kc = malloc(nkv_all * 2), *vc = malloc(nkv_all * 2), *o1 = malloc(nq * 2), *o2 = malloc(nq * 2);
        double *sc = malloc((size_t)(p0 + nt) * sizeof *sc);
        for (size_t i = 0; i < nq; i++) q[i] = 2.0f * frand();
        for (size_t i = 0; i < nkv_all; i++) {
            kc[i] = rl_f32_to_f16(frand());
            vc[i] = rl_f32_to_f16(frand());
        }
        for (int mma = 1; mma >= 0; mma--) {
            rl_err e = {{0}};
            bool used = false;
            CHECK(rl_cuda_test_prefill_attention(q, kc, vc, nh, nkv, hd, nt, p0, mma, o1, &used, &e) == 0, "%s", e.msg);
            CHECK(rl_cuda_test_prefill_attention(q, kc, vc, nh, nkv, hd, nt, p0, mma, o2, &used, &e) == 0, "%s", e.msg);
            CHECK(!memcmp(o1, o2, nq * 2), "prefill attention hd %d: two runs differ", hd);
            double worst = 0;
            for (int s = 0; s < nt; s++)
                for (int h = 0; h < nh; h++) {
                    const float *qr = q + ((size_t)s * nh + h) * hd;
                    const size_t ko = (size_t)(h / (nh / nkv)) * hd;
                    double mx = -INFINITY, l = 0;
                    for (int p = 0; p <= p0 + s; p++) {
                        double d = 0;
                        for (int j = 0; j < hd; j++) d += (double)qr[j] * rl_f16_to_f32(kc[p * kvd + ko + j]);
                        sc[p] = d / sqrt((double)hd);
                        if (sc[p] > mx) mx = sc[p];
                    }
                    for (int p = 0; p <= p0 + s; p++) l += sc[p] = exp(sc[p] - mx);
                    for (int j = 0; j < hd; j++) {
                        double want = 0;
                        for (int p = 0; p <= p0 + s; p++) want += sc[p] * rl_f16_to_f32(vc[p * kvd + ko + j]);
                        want /= l;
                        double got = rl_f16_to_f32(o1[((size_t)s * nh + h) * hd + j]), err = fabs(got - want);
                        if (!(err <= worst)) worst = err; /* NaN sticks */
                    }
                }
            const double bound = mma && used ? 1e-2 : 2e-3;
            CHECK(worst <= bound, "prefill attention %s, heads %d/%d, hd %d, %d tokens at %d: max error %.3e > %g",
                  used ? "mma" : "fp32", nh, nkv, hd, nt, p0, worst, bound);
            CHECK(used == (mma && hd != 256), "prefill attention hd %d: mma kernel %s", hd, used ? "used" : "not used");
            printf("prefill attention %-4s heads %d/%d hd %3d, %3d tokens at %3d: max abs error %.2e\n",
                   used ? "mma" : "fp32", nh, nkv, hd, nt, p0, worst);
        }
        free(q); free(kc); free(vc); free(o1); free(o2); free(sc);
    }
}

/* A test's attention input: nq queries in [-2, 2), a K and V cache of ncache f16 values in [-1, 1). */
static void rand_att(size_t nq, size_t ncache, float **q, uint16_t **kc, uint16_t **vc) {
    *q = malloc(nq * sizeof **q);
    *kc = malloc(ncache * 2);
    *vc = malloc(ncache * 2);
    for (size_t i = 0; i < nq; i++) (*q)[i] = 2.0f * frand();
    for (size_t i = 0; i < ncache; i++) {
        (*kc)[i] = rl_f32_to_f16(frand());
        (*vc)[i] = rl_f32_to_f16(frand());
    }
}

/* An exact chunk's flash decode that also writes Wo's tensor-core input (RL_CUDA_ATT_STAGE)
 * against its own output staged by the chunk's staging kernel: the same plane, byte for byte,
 * and the same output. Head sizes 64 (TinyLlama), 96, 128 and 256, grouped and plain heads,
 * chunks of 16, 8 and 4, one attention split and several (the merging block stages), splits
 * widened past max_split (one to four keys a thread), Q4_0's and Q8_0's integer terms. Each
 * case runs twice: the block per head writing the plane, and the block per KV group
 * (RL_CUDA_ATT_GQA, where the heads are grouped) against the block per head, so the grouped
 * kernel's outputs, partials and merge are the per-head kernel's bits. Then, where the group's
 * heads fit tensor cores (RL_CUDA_ATT_MMA: 2-8 a group, or 1 with bit 16; hd 64 or 128), each
 * of its variants staged against itself unstaged, its last token against its one-token launch
 * (byte for byte), and its output within 1e-5 of the block per head's (1e-4 for a peaked
 * softmax); with bit 32, where the grid has 2-16 splits (16 also with widening past them, and
 * two where a chunk's first tokens have one active split), its split blocks as clusters: byte
 * for byte the output of the ticket's merge. */
static void test_att_stage(void) {
    const int cases[][7] = {/* n_head, n_head_kv, hd, tokens, pos, split, max_split (0: no widening) */
                            {32, 4, 64, 16, 20, 128, 0},   {32, 4, 64, 16, 300, 128, 0}, {8, 8, 128, 8, 3, 128, 0},
                            {8, 8, 128, 16, 200, 64, 0},   {6, 2, 96, 4, 50, 32, 0},     {4, 1, 256, 16, 90, 128, 0},
                            {32, 8, 128, 16, 500, 128, 0}, {32, 4, 64, 16, 900, 128, 2}, {12, 4, 64, 8, 600, 32, 3},
                            {16, 2, 128, 4, 130, 128, 0},  {28, 4, 128, 16, 260, 128, 20},
                            {32, 4, 64, 4, 2040, 128, 16}, {32, 8, 128, 8, 2100, 128, 16},
                            {32, 4, 64, 16, 120, 128, 0}};
    int ran_gqa = 0, ran_mma = 0, ran_cl = 0;
    const bool clusters = rl_cuda_att_clusters(); /* sm_90 code on a device with cluster launch */
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int nh = cases[ci][0], nkv = cases[ci][1], hd = cases[ci][2], nt = cases[ci][3], pos = cases[ci][4],
                  split = cases[ci][5], msplit = cases[ci][6];
        const size_t nq = (size_t)nt * nh * hd, ncache = (size_t)(pos + nt) * nkv * hd;
        float *q;
        uint16_t *kc, *vc;
        rand_att(nq, ncache, &q, &kc, &vc);
        const uint32_t types[] = {RL_Q4_0, RL_Q8_0};
        bool used = false;
        for (int ti = 0; ti < 2; ti++)
            for (int gq = 0; gq < 2; gq++) {
                rl_err e = {{0}};
                bool same = false, u = false;
                double dist = 0.0;
                CHECK(rl_cuda_test_att_stage(q, kc, vc, nh, nkv, hd, nt, pos, split, msplit, types[ti], gq, 0, &u,
                                             &same, &dist, &e) == 0, "%s", e.msg);
                CHECK(same, "attention staging, heads %d/%d, hd %d, %d tokens at %d, split %d/%d, %s, %s: plane or "
                      "output differs", nh, nkv, hd, nt, pos, split, msplit, rl_type_name(types[ti]),
                      u ? "block per KV group" : "block per head");
                /* the grouped kernel applies to grouped heads of at most 128 dimensions, 8 a group */
                CHECK(u == (gq && nh / nkv >= 2 && nh / nkv <= 8 && hd <= 128), "attention, heads %d/%d, hd %d: "
                      "block per KV group %s", nh, nkv, hd, u ? "used" : "not used");
                used |= u;
            }
        ran_gqa += used;
        /* the group's heads on tensor cores (RL_CUDA_ATT_MMA, each variant): staged = unstaged,
         * the last token = its one-token launch, and near the block per head (q and p in two
         * f16 halves). Each variant takes q at another scale: 1e-3 (q's power-of-two scaling
         * upward) and 24 (a peaked softmax: small p, where fp32's own score error ~|s| 2^-24
         * in either kernel loosens the bound). Dropping q's or p's low half gives 1e-4 to 3e-4
         * here at scale 1, the kernel ~1e-7. */
        const float qscale[4] = {1.0f, 1e-3f, 24.0f, 1.0f};
        const double bound[4] = {1e-5, 1e-5, 1e-4, 1e-5};
        float *qv = malloc(nq * sizeof *qv);
        double worst = 0.0;
        int mma_ran = 0;
        for (int mv = 1; mv < 8; mv += 2) {
            rl_err e = {{0}};
            bool same = false, u = false;
            double dist = -1.0;
            for (size_t i = 0; i < nq; i++) qv[i] = q[i] * qscale[mv / 2];
            /* first the knob's value without bit 16: plain heads (a group of one) stay off it */
            if (mv == 1) {
                CHECK(rl_cuda_test_att_stage(qv, kc, vc, nh, nkv, hd, nt, pos, split, msplit, RL_Q4_0, false, mv,
                                             &u, &same, &dist, &e) == 0, "%s", e.msg);
                CHECK(u == (nh / nkv >= 2 && nh / nkv <= 8 && (hd == 64 || hd == 128)), "attention, heads %d/%d, "
                      "hd %d, RL_CUDA_ATT_MMA=1: tensor cores %s", nh, nkv, hd, u ? "used" : "not used");
                CHECK(!u || same, "attention on tensor cores (1), heads %d/%d: plane or output differs", nh, nkv);
                /* bits 32 and 64: a token's split blocks as one cluster where the grid has 2-16
                 * splits, in chunks too, the merge through distributed shared memory: the
                 * bytes of the ticket's */
                const int n_all = (pos + nt + split - 1) / split, ny = msplit > 0 && msplit < n_all ? msplit : n_all;
                CHECK(rl_cuda_test_att_stage(qv, kc, vc, nh, nkv, hd, nt, pos, split, msplit, RL_Q4_0, false, 1 | 16 | 32 | 64,
                                             &u, &same, &dist, &e) == 0, "%s", e.msg);
                CHECK(u == (clusters && nh / nkv <= 8 && (hd == 64 || hd == 128) && ny >= 2 &&
                            ny <= rl_cuda_att_cluster_max()),
                      "attention, heads %d/%d, hd %d, %d splits: clusters %s", nh, nkv, hd, ny, u ? "used" : "not used");
                CHECK(!u || same, "attention on tensor cores in clusters, heads %d/%d, hd %d, %d tokens at %d, %d "
                      "splits: not the bytes of the ticket's merge, or of its one-token launch", nh, nkv, hd, nt, pos,
                      ny);
                ran_cl += u;
            }
            CHECK(rl_cuda_test_att_stage(qv, kc, vc, nh, nkv, hd, nt, pos, split, msplit, RL_Q4_0, false, mv | 16, &u,
                                         &same, &dist, &e) == 0, "%s", e.msg);
            CHECK(u == (nh / nkv <= 8 && (hd == 64 || hd == 128)), "attention, heads %d/%d, hd %d: "
                  "tensor cores %s", nh, nkv, hd, u ? "used" : "not used");
            if (!u) continue;
            CHECK(same, "attention staging on tensor cores (%d), heads %d/%d, hd %d, %d tokens at %d, split %d/%d: "
                  "plane or output differs, or the last token is not its one-token launch", mv, nh, nkv, hd, nt, pos,
                  split, msplit);
            CHECK(dist >= 0.0 && dist <= bound[mv / 2], "attention on tensor cores (%d, q x %g), heads %d/%d, hd %d, "
                  "%d tokens at %d: %.3e from the block per head (bound %g)", mv, qscale[mv / 2], nh, nkv, hd, nt, pos,
                  dist, bound[mv / 2]);
            if (qscale[mv / 2] == 1.0f) worst = dist > worst ? dist : worst;
            mma_ran++;
        }
        free(qv);
        ran_mma += mma_ran;
        printf("  attention staging heads %2d/%d hd %3d, %2d tokens at %3d, split %3d/%2d: plane = the staging "
               "kernel's%s", nh, nkv, hd, nt, pos, split, msplit, used ? "; per KV group = per head" : "");
        if (mma_ran) printf("; tensor cores %.1e from per head (q x 1)", worst);
        printf("\n");
        free(q);
        free(kc);
        free(vc);
    }
    CHECK(ran_gqa == 11, "the block per KV group ran in %d cases", ran_gqa);
    CHECK(ran_mma == 48, "the tensor-core kernel ran in %d cases and variants", ran_mma);
    CHECK(ran_cl == (clusters ? 10 : 0), "the tensor-core kernel ran in clusters in %d cases", ran_cl);
    if (!clusters) printf("  attention clusters: not on this device or build (their checks ran as not used)\n");
    else printf("  attention clusters: room for %d blocks a cluster\n", rl_cuda_att_cluster_max());
    CHECK(rl_cuda_att_cluster_max() >= 2 && rl_cuda_att_cluster_max() <= 16, "cluster room of %d blocks",
          rl_cuda_att_cluster_max());
}

/* The tensor-core flash decode over a q8 cache (amq8.patch): grouped heads (and plain ones with
 * bit 16) take it under the default knob (33); an exact chunk's last token is the bytes of its
 * one-token launch (decoding's, in clusters where its splits fit one, against the chunk's
 * ticket merge); and the output is near the
 * block per head's over the same codes and scales. The kernel turns code x scale into f16 (a
 * relative rounding of at most 2^-11 a value, the f16 cache's own), so the bound is looser than
 * the f16 kernel's 1e-5: 5e-3 of the largest output. A wrong scale or code order is O(1). */
static void test_att_q8(void) {
    const int cases[][7] = {/* n_head, n_head_kv, hd, tokens, pos, split, max_split (0: no widening) */
                            {32, 4, 64, 16, 20, 128, 0},  {32, 4, 64, 16, 300, 128, 0},   {32, 8, 128, 16, 500, 128, 0},
                            {16, 8, 128, 4, 130, 128, 0}, {32, 4, 64, 4, 2040, 128, 16},  {28, 4, 128, 16, 260, 128, 20},
                            {8, 8, 128, 8, 200, 64, 0},   {6, 2, 96, 4, 50, 32, 0}};
    int ran = 0, ran_cl = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int nh = cases[ci][0], nkv = cases[ci][1], hd = cases[ci][2], nt = cases[ci][3], pos = cases[ci][4],
                  split = cases[ci][5], msplit = cases[ci][6], G = nh / nkv;
        const size_t nq = (size_t)nt * nh * hd, ncache = (size_t)(pos + nt) * nkv * hd;
        float *q;
        uint16_t *kc, *vc;
        rand_att(nq, ncache, &q, &kc, &vc);
        for (int plain = 0; plain < (G == 1 ? 2 : 1); plain++) {
            const int mv = 33 | (plain ? 16 : 0);
            rl_err e = {{0}};
            bool used = false, cl = false, same = false;
            double dist = -1.0;
            CHECK(rl_cuda_test_att_q8(q, kc, vc, nh, nkv, hd, nt, pos, split, msplit, mv, &used, &cl, &same, &dist, &e) == 0,
                  "%s", e.msg);
            const bool want = (G >= 2 || plain) && G <= 8 && (hd == 64 || hd == 128);
            CHECK(used == want, "q8 cache, heads %d/%d, hd %d, RL_CUDA_ATT_MMA=%d: tensor cores %s", nh, nkv, hd, mv,
                  used ? "used" : "not used");
            CHECK(same, "q8 cache on tensor cores, heads %d/%d, hd %d, %d tokens at %d, split %d/%d: the chunk's last "
                  "token is not the bytes of its one-token launch%s", nh, nkv, hd, nt, pos, split, msplit,
                  cl ? " (clusters)" : "");
            if (used)
                CHECK(dist >= 0.0 && dist <= 5e-3, "q8 cache on tensor cores, heads %d/%d, hd %d, %d tokens at %d: "
                      "%.3e from the block per head (bound 5e-3)", nh, nkv, hd, nt, pos, dist);
            ran += used;
            ran_cl += cl;
            printf("  q8 cache heads %2d/%d hd %3d, %2d tokens at %4d, split %3d/%2d, knob %d: %s%s, %.1e from per head\n",
                   nh, nkv, hd, nt, pos, split, msplit, mv, used ? "tensor cores" : "block per head",
                   cl ? " in clusters" : "", dist);
        }
        free(q);
        free(kc);
        free(vc);
    }
    CHECK(ran == 7, "the q8 cache ran on tensor cores in %d cases", ran);
    if (rl_cuda_att_clusters()) CHECK(ran_cl >= 3, "the q8 cache ran in clusters in %d cases", ran_cl);
}

/* test_cuda [att]: "att" runs the attention tests alone, small enough for compute-sanitizer's
 * racecheck to finish (decoding under it does not, with its launches a token) */
int main(int argc, char **argv) {
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "att") != 0)) {
        fprintf(stderr, "usage: test_cuda [att]\n");
        return 2;
    }
    if (!rl_cuda_device_present()) {
        printf("test_cuda: no CUDA device, skipped\n");
        return 77;
    }
    if (argc == 2) {
        test_prefill_attention();
        test_att_stage();
        test_att_q8();
        return check_report("test_cuda att");
    }
    const uint32_t types[] = {RL_F32, RL_F16, RL_BF16, RL_Q8_0, RL_FP8, RL_Q4_0, RL_Q4_1, RL_Q5_0, RL_Q5_1, RL_Q4_K, RL_Q5_K, RL_Q6_K, RL_RQ2, RL_RQ4};
    /* the last: more work items than resident warps, so a streamed warp runs on across items */
    const size_t shapes[][2] = {{1, 256}, {77, 512}, {1000, 2048}, {256, 5632}, {12288, 1024}};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            for (int fast = 0; fast < 1 + rl_cuda_has_q8(types[t]); fast++) {
                test_matvec(types[t], shapes[s][0], shapes[s][1], 0, s % 2, fast);
                if (s == 2) {
                    test_matvec(types[t], shapes[s][0], shapes[s][1], 1, 0, fast);
                    test_matvec(types[t], shapes[s][0], shapes[s][1], 2, 1, fast);
                }
            }
        }
    /* exact chunks: odd rows and a partial last tile (77), GLU and residual modes (1000 x 2048),
     * a chunk count that is not a multiple of 32 (5632 / 32 = 176), an odd one (1184 / 32 = 37:
     * the residue layout's last scale pair half past the end), more tiles than one wave */
    const size_t cshapes[][4] = {{77, 512, 0, 1}, {1000, 2048, 0, 1}, {1000, 2048, 1, 0}, {1000, 2048, 2, 1},
                                 {256, 5632, 0, 0}, {77, 1184, 0, 1}, {200, 1184, 2, 0}, {12288, 1024, 0, 1}};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (size_t s = 0; s < sizeof cshapes / sizeof *cshapes; s++)
            for (int fast = 0; fast < 1 + rl_cuda_has_q8(types[t]); fast++)
                if (cshapes[s][1] % rl_type_get(types[t])->blck == 0) /* 1184: not the 64- and 256-value blocks */
                    test_chunk(types[t], cshapes[s][0], cshapes[s][1], (int)cshapes[s][2], (int)cshapes[s][3], fast);
    /* mixed-type QKV pairs: a GQA shape (Q + K 4096 + 1024 beside V 1024 rows), odd items, TinyLlama's
     * input width, and more items than resident warps */
    const size_t pshapes[][3] = {{5120, 1024, 4096}, {130, 66, 512}, {2304, 256, 2048}, {8192, 4096, 4096}};
    const uint32_t firsts[] = {RL_Q4_K, RL_Q5_K};
    for (size_t t = 0; t < 2; t++)
        for (size_t s = 0; s < sizeof pshapes / sizeof *pshapes; s++)
            for (int fast = 0; fast < 2; fast++)
                test_pair(firsts[t], RL_Q6_K, pshapes[s][0], pshapes[s][1], pshapes[s][2], (int)(s % 2 == 0), fast);
    test_argmax();
    test_prefill_attention();
    test_att_stage();
    test_att_q8();
    return check_report("test_cuda");
}
