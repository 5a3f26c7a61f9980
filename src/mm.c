/* Matmul kernels: the best SIMD level of the build (compile-time: -march picks it), with the
 * scalar reference from quant.c as the fallback. AVX2 lives here, AVX-512 in mm_avx512.c (taken
 * ahead of AVX2 when the build targets it), NEON (arm64) in mm_neon.c.
 *
 * AVX2 layout of the work:
 *  - fast path, Q8_0 / Q4_0 / Q5_0 / Q5_1: register tiles of R weight rows x C activation columns; every
 *    weight block is loaded and unpacked once per tile and reused for the C columns, every
 *    activation block once and reused for the R rows. Integer dots use the abs/sign trick so
 *    maddubs (unsigned x signed) can take two signed operands.
 *  - fast path, K-quants: per row, each 256-value super-block is unpacked once into int8 in
 *    L1 and dotted against all columns.
 *  - fast path, RQ2: per row, 8 blocks at a time are unpacked (codes in a lane-local transposed
 *    order, see rq2_codes) and dotted against all columns, whose activations get the same
 *    transpose by one byte shuffle.
 *  - exact path (fp32 activations; always for F32/F16/BF16): up to 4 rows are dequantized a
 *    256-value chunk at a time into L1, then dotted against each column with the x loads shared
 *    by the 4 rows. Partial sums go straight into y, so no per-call buffer scales with S. */
#include "quant.h"
#include "mm_avx512.h"
#include "mm_neon.h"
#include "mm_x86.h"

#include <math.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(RL_MM_AVX512)
#define RL_MM_AVX2 1
#include <immintrin.h>
#endif

#define AINLINE static inline __attribute__((always_inline))
/* small constant-trip loops over tile rows/columns must unroll so their arrays live in
 * registers; -O2 alone does not do it */
#define RL_UNROLL _Pragma("GCC unroll 8")

#ifdef RL_MM_AVX2

/* ---- helpers ---------------------------------------------------------------------------- */

AINLINE float ld_h(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
}

AINLINE void put(const rl_mm *m, size_t s, size_t r, float v, bool add) {
    float *y = m->y + s * m->ys + r;
    *y = add ? *y + v : v;
}

/* 32 signed int8 weights times 32 signed int8 activations, summed in pairs of 8 int32 lanes:
 * maddubs needs an unsigned left operand, so the weight's sign moves onto the activation. */
AINLINE __m256i dot_i8(__m256i wabs, __m256i w, __m256i a) {
    __m256i p = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(a, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* ---- fp16 rows ---------------------------------------------------------------------------- */

static void avx2_f16_to_f32_row(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

static void avx2_f32_to_f16_row(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = rl_f32_to_f16(src[i]);
}

/* ---- exact path: SIMD dequantization of a chunk ------------------------------------------ */

/* Unpacked 32-value groups of each weight type (signed int8 where the type is symmetric);
 * nib_vals and q5_uvals are in mm_x86.h. */
AINLINE __m256i q4_0_vals(const uint8_t *b) {
    return _mm256_sub_epi8(nib_vals(b + 2), _mm256_set1_epi8(8));
}

AINLINE __m256i q8_0_vals(const uint8_t *b) {
    return _mm256_loadu_si256((const __m256i *)(b + 2));
}

/* Q4_K / Q5_K sub-block j (values 0..15 or 0..31) */
AINLINE __m256i qk45_vals(const uint8_t *qs, const uint8_t *qh, size_t j) {
    __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * (j / 2)));
    if (j % 2) v = _mm256_srli_epi16(v, 4);
    v = _mm256_and_si256(v, _mm256_set1_epi8(0xF));
    if (qh) {
        __m256i bit = _mm256_set1_epi8((char)(1u << j));
        __m256i h = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_loadu_si256((const __m256i *)qh), bit), bit);
        v = _mm256_or_si256(v, _mm256_and_si256(h, _mm256_set1_epi8(16)));
    }
    return v;
}

/* Q6_K sub-block j of 32 values, signed (-32..31) */
AINLINE __m256i q6k_vals(const uint8_t *b, size_t j) {
    size_t h = j / 4, k = j % 4;
    __m256i lo = _mm256_loadu_si256((const __m256i *)(b + 64 * h + (k % 2) * 32));
    if (k >= 2) lo = _mm256_srli_epi16(lo, 4);
    lo = _mm256_and_si256(lo, _mm256_set1_epi8(0xF));
    __m256i hi = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
    hi = _mm256_srli_epi16(hi, (int)(2 * k));
    hi = _mm256_slli_epi16(_mm256_and_si256(hi, _mm256_set1_epi8(3)), 4);
    return _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
}

/* 32 int8 -> 32 floats times d (one multiply per value, like the reference) */
AINLINE void store_scaled(float *dst, __m256i q, __m256 d, __m256 sub) {
    __m128i h[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
    RL_UNROLL
    for (int i = 0; i < 2; i++) {
        __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h[i]));
        __m256 b = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(h[i], 8)));
        _mm256_storeu_ps(dst + 16 * i, _mm256_sub_ps(_mm256_mul_ps(d, a), sub));
        _mm256_storeu_ps(dst + 16 * i + 8, _mm256_sub_ps(_mm256_mul_ps(d, b), sub));
    }
}

/* Dequantizes len values (a multiple of the block size, at most 256) starting at block
 * pointer b. Same products as the reference, so results are bit-identical to it. */
static void dequant_chunk(uint32_t type, const uint8_t *b, float *dst, size_t len) {
    const __m256 zero = _mm256_setzero_ps();
    switch (type) {
    case RL_F16:
        avx2_f16_to_f32_row((const uint16_t *)b, dst, len);
        return;
    case RL_BF16: {
        size_t i = 0;
        for (; i + 8 <= len; i += 8) {
            __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(b + 2 * i)));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
        }
        for (; i < len; i++) dst[i] = rl_bf16_to_f32((uint16_t)(b[2 * i] | (b[2 * i + 1] << 8)));
        return;
    }
    case RL_Q8_0:
        for (size_t i = 0; i < len / 32; i++, b += 34) store_scaled(dst + 32 * i, q8_0_vals(b), _mm256_set1_ps(ld_h(b)), zero);
        return;
    case RL_FP8:
        fp8_run(b, dst, len);
        return;
    case RL_Q4_0:
        for (size_t i = 0; i < len / 32; i++, b += 18) store_scaled(dst + 32 * i, q4_0_vals(b), _mm256_set1_ps(ld_h(b)), zero);
        return;
    case RL_Q5_0:
        for (size_t i = 0; i < len / 32; i++, b += 22)
            store_scaled(dst + 32 * i, _mm256_sub_epi8(q5_uvals(b, 2), _mm256_set1_epi8(16)), _mm256_set1_ps(ld_h(b)), zero);
        return;
    case RL_Q5_1:
        /* d*q - (-m) rounds as the reference's d*q + m does */
        for (size_t i = 0; i < len / 32; i++, b += 24)
            store_scaled(dst + 32 * i, q5_uvals(b, 4), _mm256_set1_ps(ld_h(b)), _mm256_set1_ps(-ld_h(b + 2)));
        return;
    case RL_Q4_1:
        for (size_t i = 0; i < len / 32; i++, b += 20)
            store_scaled(dst + 32 * i, nib_vals(b + 4), _mm256_set1_ps(ld_h(b)), _mm256_set1_ps(-ld_h(b + 2)));
        return;
    case RL_Q4_K:
    case RL_Q5_K: {
        float d = ld_h(b), dmin = ld_h(b + 2);
        const uint8_t *qh = type == RL_Q5_K ? b + 16 : NULL, *qs = type == RL_Q5_K ? b + 48 : b + 16;
        RL_UNROLL
        for (size_t j = 0; j < 8; j++) {
            uint8_t sc, m;
            rl_k4_scale_min(j, b + 4, &sc, &m);
            store_scaled(dst + 32 * j, qk45_vals(qs, qh, j), _mm256_set1_ps(d * sc), _mm256_set1_ps(dmin * m));
        }
        return;
    }
    case RL_RQ2:
        /* natural-order codes through the table decoder; d*q - (-m) rounds as d*q + m does */
        for (size_t i = 0; i < len / RL_QK_RQ2; i++, b += 20) {
            __m256 d = _mm256_set1_ps(ld_h(b + 16)), nm = _mm256_set1_ps(-ld_h(b + 18));
            RL_UNROLL
            for (size_t h = 0; h < 2; h++) {
                const uint8_t *q = b + 8 * h;
                __m256i c = _mm256_setr_epi32((int)rl_rq2_lut[q[0]], (int)rl_rq2_lut[q[1]], (int)rl_rq2_lut[q[2]],
                                              (int)rl_rq2_lut[q[3]], (int)rl_rq2_lut[q[4]], (int)rl_rq2_lut[q[5]],
                                              (int)rl_rq2_lut[q[6]], (int)rl_rq2_lut[q[7]]);
                store_scaled(dst + RL_QK_RQ2 * i + RL_QK * h, c, d, nm);
            }
        }
        return;
    case RL_RQ4:
        /* each half as Q4_1's nibbles; d*q - (-m) rounds as d*q + m does */
        for (size_t i = 0; i < len / RL_QK_RQ4; i++, b += 36) {
            const __m256 d = _mm256_set1_ps(ld_h(b + 32)), nm = _mm256_set1_ps(-ld_h(b + 34));
            store_scaled(dst + RL_QK_RQ4 * i, nib_vals(b), d, nm);
            store_scaled(dst + RL_QK_RQ4 * i + RL_QK, nib_vals(b + 16), d, nm);
        }
        return;
    case RL_Q6_K: {
        float d = ld_h(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192);
        RL_UNROLL
        for (size_t j = 0; j < 8; j++) {
            __m256i q = q6k_vals(b, j);
            __m256 d0 = _mm256_set1_ps(d * sc[2 * j]), d1 = _mm256_set1_ps(d * sc[2 * j + 1]);
            __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
            float *o = dst + 32 * j;
            _mm256_storeu_ps(o, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
            _mm256_storeu_ps(o + 8, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
            _mm256_storeu_ps(o + 16, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
            _mm256_storeu_ps(o + 24, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
        }
        return;
    }
    default:
        rl_dequant_row(type, b, dst, len);
        return;
    }
}

/* NR rows (pointers p[k] to len floats) dotted with one column x; two accumulators per row. */
AINLINE void dots_n(const float *const *p, const float *x, size_t len, float *out, const int NR) {
    __m256 a0[4], a1[4];
    RL_UNROLL
    for (int k = 0; k < NR; k++) a0[k] = a1[k] = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= len; i += 16) {
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
        RL_UNROLL
        for (int k = 0; k < NR; k++) {
            a0[k] = _mm256_fmadd_ps(_mm256_loadu_ps(p[k] + i), x0, a0[k]);
            a1[k] = _mm256_fmadd_ps(_mm256_loadu_ps(p[k] + i + 8), x1, a1[k]);
        }
    }
    RL_UNROLL
    for (int k = 0; k < NR; k++) {
        float v = hsum(_mm256_add_ps(a0[k], a1[k]));
        for (size_t t = i; t < len; t++) v += p[k][t] * x[t];
        out[k] = v;
    }
}

#include "mm_exact.h"

/* ---- fast path: Q8_0 / Q4_0 tiles --------------------------------------------------------- */

typedef unsigned short v8hu __attribute__((vector_size(16)));
typedef float v8sf __attribute__((vector_size(32)));

/* fp16 scales of 8 consecutive blocks (stride bytes apart) as 8 floats: one conversion per 8
 * blocks instead of one per block. */
AINLINE __m256 ld_h8(const uint8_t *p, size_t stride) {
    v8hu v = {0};
    RL_UNROLL
    for (int j = 0; j < 8; j++) {
        uint16_t h;
        memcpy(&h, p + (size_t)j * stride, sizeof h);
        v[j] = h;
    }
    return _mm256_cvtph_ps((__m128i)v);
}

/* The 32-value formats the tile kernels handle. Q8_0 is signed (abs/sign trick); the others
 * enter maddubs as unsigned codes u and their offset is folded in per block through the
 * activation sums s = da * sum(qs):
 *   value = dw * (u - 8)   Q4_0:  dw*da*dot(u, a) - 8 * dw * s
 *   value = dw * (u - 16)  Q5_0:  dw*da*dot(u, a) - 16 * dw * s
 *   value = dw * u + m     Q4_1, Q5_1:  dw*da*dot(u, a) + m * s
 * i.e. + K * coef * s with coef = dw (or m) and K = off_mul. The kernels take the format as a
 * constant, so each instantiation keeps only its own format's code. */
AINLINE float tq_off_mul(const int f) {
    return f == TQ_Q4_0 ? -8.0f : f == TQ_Q5_0 ? -16.0f : 1.0f;
}

/* byte offset of the fp16 factor that multiplies s: dw itself, or Q4_1's / Q5_1's m */
AINLINE size_t tq_coef_at(const int f) {
    return tq_min(f) ? 2 : 0;
}

/* One block of R rows x C columns. The caller supplies the per-(row, column) scale dw*da. */
AINLINE void blk_q(const uint8_t *const *w, const rl_q8a *const *a, size_t b, const float *sc, size_t scs,
                   __m256 acc[4][4], const int R, const int C, const int f) {
    const size_t bs = tq_bs(f);
    __m256i wq[4], wa[4];
    RL_UNROLL
    for (int k = 0; k < R; k++) {
        const uint8_t *blk = w[k] + b * bs;
        if (f != TQ_Q8_0) {
            wq[k] = tq_uvals(blk, f);
        } else {
            wq[k] = q8_0_vals(blk);
            wa[k] = _mm256_sign_epi8(wq[k], wq[k]);
        }
    }
    RL_UNROLL
    for (int c = 0; c < C; c++) {
        __m256i aq = _mm256_loadu_si256((const __m256i *)a[c][b].qs);
        RL_UNROLL
        for (int k = 0; k < R; k++) {
            /* unsigned codes <= 31 against int8: pair sums <= 2*31*128, no int16 saturation */
            __m256i p = f != TQ_Q8_0 ? _mm256_maddubs_epi16(wq[k], aq)
                                     : _mm256_maddubs_epi16(wa[k], _mm256_sign_epi8(aq, wq[k]));
            __m256 v = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
            acc[k][c] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(sc + (size_t)(k * C + c) * scs), acc[k][c]);
        }
    }
}

/* R rows starting at r times C columns starting at s; f selects the weight format.
 * Blocks go in groups of 8 so the scale products are formed 8 at a time in a small table. */
AINLINE void tile_q(const rl_mm *m, size_t r, size_t s, const int R, const int C, const int f) {
    const size_t bs = tq_bs(f), nb = m->n / RL_QK, ca = tq_coef_at(f);
    const uint8_t *w[4];
    const rl_q8a *a[4];
    __m256 acc[4][4], off[4][4];
    RL_UNROLL
    for (int k = 0; k < R; k++) w[k] = (const uint8_t *)m->w + (r + (size_t)k) * m->row_bytes;
    RL_UNROLL
    for (int c = 0; c < C; c++) a[c] = m->xq + (s + (size_t)c) * nb;
    RL_UNROLL
    for (int k = 0; k < R; k++) {
        RL_UNROLL
        for (int c = 0; c < C; c++) acc[k][c] = off[k][c] = _mm256_setzero_ps();
    }
    size_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        _Alignas(32) float sc[4 * 4][8];
        __m256 dw[4], cw[4];
        RL_UNROLL
        for (int k = 0; k < R; k++) {
            _mm_prefetch((const char *)(w[k] + b * bs) + 8 * bs * 4, _MM_HINT_T0);
            dw[k] = ld_h8(w[k] + b * bs, bs);
            cw[k] = ca ? ld_h8(w[k] + b * bs + ca, bs) : dw[k];
        }
        RL_UNROLL
        for (int c = 0; c < C; c++) {
            v8sf da, sa;
            RL_UNROLL
            for (int j = 0; j < 8; j++) {
                da[j] = a[c][b + (size_t)j].d;
                sa[j] = a[c][b + (size_t)j].s;
            }
            RL_UNROLL
            for (int k = 0; k < R; k++) {
                _mm256_store_ps(sc[k * C + c], _mm256_mul_ps(dw[k], (__m256)da));
                if (f != TQ_Q8_0) off[k][c] = _mm256_fmadd_ps(cw[k], (__m256)sa, off[k][c]);
            }
        }
        for (size_t j = 0; j < 8; j++) blk_q(w, a, b + j, &sc[0][j], 8, acc, R, C, f);
    }
    for (; b < nb; b++) {
        float sc[4 * 4];
        RL_UNROLL
        for (int k = 0; k < R; k++) {
            float d = ld_h(w[k] + b * bs), cf = ca ? ld_h(w[k] + b * bs + ca) : d;
            RL_UNROLL
            for (int c = 0; c < C; c++) {
                sc[k * C + c] = d * a[c][b].d;
                if (f != TQ_Q8_0) off[k][c] = _mm256_add_ps(off[k][c], _mm256_setr_ps(cf * a[c][b].s, 0, 0, 0, 0, 0, 0, 0));
            }
        }
        blk_q(w, a, b, sc, 1, acc, R, C, f);
    }
    RL_UNROLL
    for (int k = 0; k < R; k++) {
        RL_UNROLL
        for (int c = 0; c < C; c++) {
            float v = hsum(acc[k][c]);
            if (f != TQ_Q8_0) v += tq_off_mul(f) * hsum(off[k][c]);
            put(m, s + (size_t)c, r + (size_t)k, v, m->accumulate);
        }
    }
}

/* Tile shape: decode (S=1) streams 4 rows against one activation row; prefill uses 2x4,
 * which keeps 8 accumulators + 4 weight registers + temporaries inside the 16 ymm. */
#define TR1 4
#define TR 2
#define TC 4

AINLINE void rows_q(const rl_mm *m, size_t r0, size_t r1, const int f) {
    size_t r = r0;
    if (m->S == 1) {
        for (; r + TR1 <= r1; r += TR1) tile_q(m, r, 0, TR1, 1, f);
        for (; r < r1; r++) tile_q(m, r, 0, 1, 1, f);
        return;
    }
    for (; r + TR <= r1; r += TR) {
        size_t s = 0;
        for (; s + TC <= m->S; s += TC) tile_q(m, r, s, TR, TC, f);
        for (; s < m->S; s++) tile_q(m, r, s, TR, 1, f);
    }
    for (; r < r1; r++) {
        size_t s = 0;
        for (; s + TC <= m->S; s += TC) tile_q(m, r, s, 1, TC, f);
        for (; s < m->S; s++) tile_q(m, r, s, 1, 1, f);
    }
}

/* ---- activation quantization ------------------------------------------------------------- */

/* Same operations as the scalar reference (amax, d = amax/127, id = 127/amax, round to nearest
 * even of x*id under the default rounding mode, integer sum), so the output is identical. */
static void avx2_q8a_quant_row(const float *x, rl_q8a *dst, size_t n) {
    for (size_t i = 0; i < n / RL_QK; i++, x += RL_QK) {
        __m256 v[4];
        float amax = blk32_amax(x, v);
        float d = amax / 127, id = d != 0 ? 127 / amax : 0;
        __m256 vid = _mm256_set1_ps(id);
        __m256i q[4], sum = _mm256_setzero_si256();
        RL_UNROLL
        for (int k = 0; k < 4; k++) {
            q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid));
            sum = _mm256_add_epi32(sum, q[k]);
        }
        st_i8x32(dst[i].qs, q);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
        int total = _mm_cvtsi128_si32(s4);
        dst[i].d = d;
        dst[i].s = d * (float)total;
        dst[i].sum8 = 8 * total;
    }
}

/* ---- fast path: row-interleaved (x8) Q4_0 / Q8_0 ---------------------------------------- */

/* Distance, in 8-row blocks, that decode prefetches ahead of the block it multiplies; 0 = none.
 * A packed matrix is one contiguous stream, which the hardware prefetcher follows: 4, 8 and 16
 * measured no better than none. */
#ifndef PF_BLOCKS
#define PF_BLOCKS 0
#endif


/* One group of 8 interleaved rows times C activation columns starting at s, for all blocks.
 * Per block and column the 8 rows' integer dots come out as one int32 vector (lane = row):
 *  - Q4_0: the nibbles stay unsigned (0..15) so maddubs takes them directly; the block's 8
 *    maddubs results are summed in int16 (at most 16 products of 15*128: 30720 < 32767) before
 *    one madd widens them, and the -8 offset is subtracted as 8 * sum(activation) in int32.
 *  - Q8_0: signed x signed, so the weight's sign moves onto the activation (abs/sign trick),
 *    and each maddubs pair sum (up to 2*127*127) must be widened on its own.
 * Then acc[c] += dw * (dot * da), with the 8 row scales dw converted in one go. */
AINLINE void tile_x8(const rl_mm *m, size_t r, size_t s, const int C, const int q4) {
    const size_t bs = q4 ? 18 : 34, nb = m->n / RL_QK, gbs = 8 * bs;
    const uint8_t *wg = (const uint8_t *)m->w + r * m->row_bytes;
    const rl_q8a *a[8];
    __m256 acc[8];
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0xF);
    x8_begin(m, s, C, nb, a, acc);
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = wg + b * gbs;
        if (C == 1 && PF_BLOCKS) _mm_prefetch((const char *)(blk + PF_BLOCKS * gbs), _MM_HINT_T0);
        __m256i dot[8];
        if (q4) {
            __m256i sum[8];
            RL_UNROLL
            for (int k = 0; k < 4; k++) {
                __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * k));
                __m256i lo = _mm256_and_si256(raw, m4);
                RL_UNROLL
                for (int c = 0; c < C; c++) {
                    __m256i p = _mm256_maddubs_epi16(lo, bc4(a[c][b].qs + 4 * k));
                    sum[c] = k ? _mm256_add_epi16(sum[c], p) : p;
                    RL_KEEP(sum[c]);
                                    }
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                RL_UNROLL
                for (int c = 0; c < C; c++) {
                    sum[c] = _mm256_add_epi16(sum[c], _mm256_maddubs_epi16(hi, bc4(a[c][b].qs + 16 + 4 * k)));
                    RL_KEEP(sum[c]);
                                    }
            }
            RL_UNROLL
            for (int c = 0; c < C; c++)
                dot[c] = _mm256_sub_epi32(_mm256_madd_epi16(sum[c], ones), _mm256_set1_epi32(a[c][b].sum8));
        } else {
            RL_UNROLL
            for (int k = 0; k < 8; k++) {
                __m256i w = _mm256_loadu_si256((const __m256i *)(blk + 16 + 32 * k));
                __m256i wa = _mm256_abs_epi8(w);
                RL_UNROLL
                for (int c = 0; c < C; c++) {
                    __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, _mm256_sign_epi8(bc4(a[c][b].qs + 4 * k), w)), ones);
                    dot[c] = k ? _mm256_add_epi32(dot[c], p) : p;
                    RL_KEEP(dot[c]);
                                    }
            }
        }
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
        RL_UNROLL
        for (int c = 0; c < C; c++) {
            __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(dot[c]), _mm256_set1_ps(a[c][b].d));
            acc[c] = _mm256_fmadd_ps(dw, t, acc[c]);
        }
    }
    x8_store(m, r, s, C, acc);
}

/* Columns per prefill tile: 6 int sums + 6 float accumulators + the unpacked weight register,
 * the nibble mask and a broadcast just fit the 16 ymm registers (measured: 4 columns ~5% slower,
 * 5 and 6 the same for Q4_0, 6 slightly ahead for Q8_0). */
#define XC 6

AINLINE void rows_x8(const rl_mm *m, size_t r0, size_t r1, const int f) {
    const int q4 = f == TQ_Q4_0;
    const size_t chunk = rl_x8_chunk(m, XC);
    for (size_t s0 = 0; s0 < m->S; s0 += chunk) {
        size_t s1 = m->S - s0 < chunk ? m->S : s0 + chunk;
        for (size_t r = r0; r < r1; r += 8) {
            size_t s = s0;
            for (; s + XC <= s1; s += XC) tile_x8(m, r, s, XC, q4);
            switch (s1 - s) {
            case 5: tile_x8(m, r, s, 5, q4); break;
            case 4: tile_x8(m, r, s, 4, q4); break;
            case 3: tile_x8(m, r, s, 3, q4); break;
            case 2: tile_x8(m, r, s, 2, q4); break;
            case 1: tile_x8(m, r, s, 1, q4); break;
            default: break;
            }
        }
    }
}

/* ---- fast path: K-quants ------------------------------------------------------------------- */

/* One super-block unpacked: 8 groups of 32 int8 values plus per-group factors.
 * Q4_K/Q5_K: values unsigned, scale sc[j] (int), min term mn[j] = dmin*m[j] (subtracted times s).
 * Q6_K: values signed, two int8 scales per group (one per 16 values). */
typedef struct kblock {
    __m256i q[8];
    __m256i sc[8]; /* int16 multipliers for madd */
    float mn[8];
    float d;
} kblock;

AINLINE void unpack_k(uint32_t type, const uint8_t *b, kblock *kb) {
    if (type == RL_Q6_K) {
        const int8_t *sc = (const int8_t *)(b + 192);
        kb->d = ld_h(b + 208);
        RL_UNROLL
        for (size_t j = 0; j < 8; j++) {
            kb->q[j] = q6k_vals(b, j);
            kb->sc[j] = _mm256_set_m128i(_mm_set1_epi16(sc[2 * j + 1]), _mm_set1_epi16(sc[2 * j]));
            kb->mn[j] = 0;
        }
        return;
    }
    float dmin = ld_h(b + 2);
    const uint8_t *qh = type == RL_Q5_K ? b + 16 : NULL, *qs = type == RL_Q5_K ? b + 48 : b + 16;
    kb->d = ld_h(b);
    RL_UNROLL
    for (size_t j = 0; j < 8; j++) {
        uint8_t sc, mm;
        rl_k4_scale_min(j, b + 4, &sc, &mm);
        kb->q[j] = qk45_vals(qs, qh, j);
        kb->sc[j] = _mm256_set1_epi16(sc);
        kb->mn[j] = dmin * mm;
    }
}

AINLINE float dot_k(const kblock *kb, const rl_q8a *a, const int signed_q) {
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    RL_UNROLL
    for (size_t j = 0; j < 8; j++) {
        __m256i aq = _mm256_loadu_si256((const __m256i *)a[j].qs);
        __m256i p = signed_q ? _mm256_maddubs_epi16(_mm256_sign_epi8(kb->q[j], kb->q[j]), _mm256_sign_epi8(aq, kb->q[j]))
                             : _mm256_maddubs_epi16(kb->q[j], aq);
        __m256 v = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, kb->sc[j]));
        acc = _mm256_fmadd_ps(v, _mm256_set1_ps(kb->d * a[j].d), acc);
        mins += kb->mn[j] * a[j].s;
    }
    return hsum(acc) - mins;
}

AINLINE void rows_k(const rl_mm *m, size_t r0, size_t r1, uint32_t type) {
    const rl_type_info *ti = rl_type_get(type);
    size_t nsb = m->n / RL_QK_K, nb = m->n / RL_QK;
    kblock kb;
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)m->w + r * m->row_bytes;
        for (size_t i = 0; i < nsb; i++) {
            unpack_k(type, w + i * ti->size, &kb);
            bool add = i > 0 || m->accumulate;
            for (size_t s = 0; s < m->S; s++) {
                float v = dot_k(&kb, m->xq + s * nb + 8 * i, type == RL_Q6_K);
                put(m, s, r, v, add);
            }
        }
    }
}

/* ---- fast path: RQ2, RQ4 (mm_rq.h, shared with the AVX-512 build) ------------------------ */

#include "mm_rq.h"

#define MM_RQ_X8 1
#include "mm_dispatch.h"

static void avx2_mm_rows(const rl_mm *m, size_t r0, size_t r1) { mm_rows(m, r0, r1); }

#endif /* RL_MM_AVX2 */

/* ---- public entry points ------------------------------------------------------------------ */

/* One choice of SIMD level for the four row functions: SIMD(f) names the build's version. */
#if defined(RL_MM_AVX512)
#define SIMD(f) rl_avx512_##f
#elif defined(RL_MM_AVX2)
#define SIMD(f) avx2_##f
#elif defined(RL_MM_NEON)
#define SIMD(f) rl_neon_##f
#else
#define SIMD(f) scalar_##f
static void scalar_mm_rows(const rl_mm *m, size_t r0, size_t r1) { rl_mm_rows_ref(m, r0, r1); }
static void scalar_q8a_quant_row(const float *x, rl_q8a *dst, size_t n) { rl_q8a_quant_row_ref(x, dst, n); }
static void scalar_f16_to_f32_row(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = rl_f16_to_f32(src[i]);
}
static void scalar_f32_to_f16_row(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = rl_f32_to_f16(src[i]);
}
#endif

void rl_mm_rows(const rl_mm *m, size_t r0, size_t r1) { SIMD(mm_rows)(m, r0, r1); }
void rl_q8a_quant_row(const float *x, rl_q8a *dst, size_t n) { SIMD(q8a_quant_row)(x, dst, n); }
void rl_f16_to_f32_row(const uint16_t *src, float *dst, size_t n) { SIMD(f16_to_f32_row)(src, dst, n); }
void rl_f32_to_f16_row(const float *src, uint16_t *dst, size_t n) { SIMD(f32_to_f16_row)(src, dst, n); }

bool rl_pack_supported(uint32_t type, size_t rows, size_t n) {
#if !defined(RL_MM_AVX2) && !defined(RL_MM_AVX512)
    if (type == RL_RQ2 || type == RL_RQ4) return false; /* the reference would read it, slower than row-major */
#endif
    return rl_pack_format(type, rows, n);
}

size_t rl_mm_row_tile(uint32_t type) {
    /* packable types may be packed in groups of 8 rows; 8 is also a multiple of the row-major tile */
    return rl_pack_supported(type, RL_PACK_ROWS, RL_QK_RQ4) ? RL_PACK_ROWS : 4;
}

const char *rl_simd_name(void) {
#if defined(RL_MM_AVX512) && defined(__AVX512VNNI__)
    return "avx512-vnni";
#elif defined(RL_MM_AVX512)
    return "avx512";
#elif defined(RL_MM_AVX2)
    return "avx2";
#elif defined(RL_MM_NEON) && defined(__ARM_FEATURE_DOTPROD)
    return "neon-dotprod";
#elif defined(RL_MM_NEON)
    return "neon";
#else
    return "scalar";
#endif
}

/* ---- weight quantization ------------------------------------------------------------------ */

#if defined(__AVX2__)
/* Q8_0 blocks with quant.c's operations (quant_q8_0, ggml's quantize_row_q8_0_ref): amax as
 * blk32_amax takes it, d = amax / 127, id = 1 / d, codes x * id rounded half away from zero as
 * roundf: trunc(|v|) plus one where the dropped fraction |v| - trunc(|v|) (exact) is at least
 * 0.5, with v's sign. |v| <= 127, so the codes pack to int8 without saturating. Taken on AVX2
 * and AVX-512 builds alike: the work is converting, not multiplying, and one x86 version is
 * enough. */
static void avx2_q8_0_row(const float *x, uint8_t *b, size_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    for (size_t i = 0; i < n / RL_QK; i++, x += RL_QK, b += 34) {
        __m256 v[4];
        const __m256 vid = _mm256_set1_ps(rl_q8_0_scale(blk32_amax(x, v), b));
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            const __m256 p = _mm256_mul_ps(v[k], vid), a = _mm256_andnot_ps(sign, p);
            __m256 t = _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            t = _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(a, t), half, _CMP_GE_OQ), one));
            q[k] = _mm256_cvttps_epi32(_mm256_or_ps(t, _mm256_and_ps(sign, p)));
        }
        st_i8x32(b + 2, q);
    }
}
#endif

void rl_dequant_row_fast(uint32_t type, const void *src, float *dst, size_t n) {
    if (type == RL_F16) rl_f16_to_f32_row(src, dst, n); /* a NaN comes out quieted (F16C) */
    else rl_dequant_row(type, src, dst, n);
}

size_t rl_first_nonfinite(const float *x, size_t n) {
    /* a pass without an early exit over the exponent bits (all ones: NaN or infinity), by SIMD
     * where there is some, since every row quantize writes goes through it; the index only when
     * there is one */
    size_t i = 0;
    bool bad = false;
#if defined(__AVX2__)
    const __m256i e = _mm256_set1_epi32(0x7f800000);
    __m256i acc = _mm256_setzero_si256();
    for (; i + 8 <= n; i += 8)
        acc = _mm256_or_si256(acc, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), e), e));
    bad = !_mm256_testz_si256(acc, acc);
#elif defined(RL_MM_NEON)
    bad = rl_neon_any_nonfinite(x, n / 4 * 4);
    i = n / 4 * 4;
#endif
    for (; i < n; i++) bad = bad || !isfinite(x[i]);
    for (i = 0; bad && i < n; i++)
        if (!isfinite(x[i])) return i;
    return SIZE_MAX;
}

void rl_quant_row_fast(uint32_t type, const float *src, void *dst, size_t n, const float *w) {
    if (type == RL_F16) { /* rounded to nearest even either way, NaN quieted as F16C does */
        rl_f32_to_f16_row(src, dst, n);
        return;
    }
#if defined(__AVX2__)
    if (type == RL_Q8_0 && !rl_quant_uses_weights(type)) {
        avx2_q8_0_row(src, dst, n);
        return;
    }
#elif defined(RL_MM_NEON)
    if (type == RL_Q8_0 && !rl_quant_uses_weights(type)) {
        rl_neon_q8_0_row(src, dst, n);
        return;
    }
#endif
    rl_quant_row_w(type, src, dst, n, w);
}
