/* NEON (arm64) matmul kernels; compiles to nothing on other targets. Same structure as the
 * AVX2 kernels in mm.c, tested against the same scalar reference (tests/unit/test_quant.c, run
 * under qemu-aarch64 by `make test-arm64` for both -march=armv8-a and armv8.2-a+dotprod).
 *
 * Integer dots: with the dotprod extension (__ARM_FEATURE_DOTPROD) sdot sums 4 int8 products
 * into each int32 lane; baseline armv8-a gets the same lane layout from widening multiplies
 * and pairwise adds (dot16). Every 4-byte group lands in one int32 lane either way, which is
 * what the row-interleaved (x8) layout of rl_pack_rows needs: one 16-byte load holds 4 bytes
 * of 4 rows, and a dot against 4 broadcast activation bytes gives one int32 per row.
 *
 * Exact path: dequantization does the reference's multiplies (scale product first, then one
 * multiply and, for the K-quant mins, one subtract per value; no fused multiply-add) so the
 * dequantized values are bit-identical to rl_dequant_row; only the fp32 dot order differs.
 *
 * The 32-value formats (Q8_0, Q4_0, Q5_0, Q5_1) share one unpacker and one tile driver, with the
 * format a compile-time constant of each instantiation (as mm.c's AVX2 driver). sdot and the
 * widening fallback take two signed operands, so Q4_0's -8 and Q5_0's -16 stay inside the
 * integer dot as in the reference; Q5_1's codes 0..31 enter unsigned-as-signed and its min m
 * adds m * s per block (s: the activation block's da * sum(qs)). */
#include "mm_neon.h"

#ifdef RL_MM_NEON

#include <arm_neon.h>
#include <string.h>

#include "mm_tq.h"

#define AINLINE static inline __attribute__((always_inline))
#define RL_UNROLL _Pragma("GCC unroll 8")

/* ---- helpers ---------------------------------------------------------------------------- */

AINLINE float ld_h(const uint8_t *p) {
    __fp16 h;
    memcpy(&h, p, sizeof h);
    return (float)h;
}

AINLINE void put(const rl_mm *m, size_t s, size_t r, float v, bool add) {
    float *y = m->y + s * m->ys + r;
    *y = add ? *y + v : v;
}

/* acc lane i += sum of the products of bytes 4i..4i+3 of w and a. The baseline version's int16
 * pair sums cannot overflow because one operand is always an rl_q8a activation (|q| <= 127):
 * 2 * 128 * 127 < 32767. */
AINLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) {
#ifdef __ARM_FEATURE_DOTPROD
    return vdotq_s32(acc, w, a);
#else
    int16x8_t p = vpaddq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(a)), vmull_high_s8(w, a));
    return vpadalq_s16(acc, p);
#endif
}

/* 4 activation bytes broadcast to all 4 int32 lanes (one per interleaved row). */
AINLINE int8x16_t bc4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return vreinterpretq_s8_s32(vdupq_n_s32(v));
}

/* ---- fp16 rows ---------------------------------------------------------------------------- */

void rl_neon_f16_to_f32_row(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(src + i));
        vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
        vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
    }
    for (; i < n; i++) dst[i] = rl_f16_to_f32(src[i]);
}

void rl_neon_f32_to_f16_row(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    /* fcvtn rounds by FPCR, which is round-to-nearest-even unless someone changed it */
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(src + i)), vld1q_f32(src + i + 4));
        vst1q_u16(dst + i, vreinterpretq_u16_f16(h));
    }
    for (; i < n; i++) dst[i] = rl_f32_to_f16(src[i]);
}

/* ---- unpacked weight values (16 at a time) ----------------------------------------------- */

/* The 32-value block formats (layout and helpers: mm_tq.h). */

/* Block values as int8: Q8_0 as stored, Q4_0 code - 8, Q5_0 code - 16, Q4_1 / Q5_1 the code
 * 0..15 / 0..31 (their d*q + m has no offset to fold in). Nibble codes: value j < 16 is the low nibble of byte
 * j, value j + 16 its high nibble; Q5's fifth bit of value j is bit j of the little-endian
 * 32-bit qh, i.e. bit j % 8 of qh byte j / 8, which each register lane tests on a broadcast. */
AINLINE void tq_vals(const uint8_t *b, int8x16_t v[2], const int f) {
    if (f == TQ_Q8_0) {
        v[0] = vld1q_s8((const int8_t *)(b + 2));
        v[1] = vld1q_s8((const int8_t *)(b + 18));
        return;
    }
    const size_t qs_at = tq_qs_at(f);
    uint8x16_t raw = vld1q_u8(b + qs_at), u[2] = {vandq_u8(raw, vdupq_n_u8(0xF)), vshrq_n_u8(raw, 4)};
    if (tq_q5(f)) {
        const uint8_t *qh = b + qs_at - 4;
        const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
        RL_UNROLL
        for (int h = 0; h < 2; h++) {
            uint8x16_t hb = vcombine_u8(vdup_n_u8(qh[2 * h]), vdup_n_u8(qh[2 * h + 1]));
            u[h] = vorrq_u8(u[h], vandq_u8(vtstq_u8(hb, bit), vdupq_n_u8(16)));
        }
    }
    const int8_t off = (int8_t)tq_sub(f);
    RL_UNROLL
    for (int h = 0; h < 2; h++) v[h] = vsubq_s8(vreinterpretq_s8_u8(u[h]), vdupq_n_s8(off));
}

/* Q4_K / Q5_K sub-block j (values 0..15 or 0..31); qh NULL for Q4_K */
AINLINE void qk45_vals(const uint8_t *qs, const uint8_t *qh, size_t j, int8x16_t v[2]) {
    RL_UNROLL
    for (int h = 0; h < 2; h++) {
        uint8x16_t q = vld1q_u8(qs + 32 * (j / 2) + 16 * (size_t)h);
        q = j % 2 ? vshrq_n_u8(q, 4) : vandq_u8(q, vdupq_n_u8(0xF));
        if (qh) {
            uint8x16_t bit = vtstq_u8(vld1q_u8(qh + 16 * h), vdupq_n_u8((uint8_t)(1u << j)));
            q = vorrq_u8(q, vandq_u8(bit, vdupq_n_u8(16)));
        }
        v[h] = vreinterpretq_s8_u8(q);
    }
}

/* Q6_K sub-block j of 32 values, signed (-32..31); v[0] has scale sc[2j], v[1] sc[2j+1]. */
AINLINE void q6k_vals(const uint8_t *b, size_t j, int8x16_t v[2]) {
    size_t h = j / 4, k = j % 4;
    const int8x16_t hshift = vdupq_n_s8((int8_t)(-2 * (int)k));
    RL_UNROLL
    for (int i = 0; i < 2; i++) {
        uint8x16_t lo = vld1q_u8(b + 64 * h + (k % 2) * 32 + 16 * (size_t)i);
        lo = k >= 2 ? vshrq_n_u8(lo, 4) : vandq_u8(lo, vdupq_n_u8(0xF));
        uint8x16_t hi = vshlq_u8(vld1q_u8(b + 128 + 32 * h + 16 * (size_t)i), hshift);
        hi = vshlq_n_u8(vandq_u8(hi, vdupq_n_u8(3)), 4);
        v[i] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, hi)), vdupq_n_s8(32));
    }
}

/* ---- exact path ---------------------------------------------------------------------------- */

/* 16 int8 -> 16 floats d * q - mn (mn = 0 for the symmetric formats, where the reference has
 * no subtraction: x - 0 == x for every x, -0 included). */
AINLINE void store16(float *dst, int8x16_t q, float d, float mn) {
    int16x8_t h[2] = {vmovl_s8(vget_low_s8(q)), vmovl_high_s8(q)};
    const float32x4_t vd = vdupq_n_f32(d), vm = vdupq_n_f32(mn);
    RL_UNROLL
    for (int i = 0; i < 2; i++) {
        float32x4_t a = vcvtq_f32_s32(vmovl_s16(vget_low_s16(h[i])));
        float32x4_t b = vcvtq_f32_s32(vmovl_high_s16(h[i]));
        vst1q_f32(dst + 8 * i, vsubq_f32(vmulq_f32(vd, a), vm));
        vst1q_f32(dst + 8 * i + 4, vsubq_f32(vmulq_f32(vd, b), vm));
    }
}

/* len values (a multiple of 32) of a 32-value block format. Q4_1's / Q5_1's d*q - (-m) rounds as the
 * reference's d*q + m does (x - (-y) is x + y for every x, y, signed zeros included). */
AINLINE void dequant_q(const uint8_t *b, float *dst, size_t len, const int f) {
    const size_t bs = tq_bs(f);
    int8x16_t v[2];
    for (size_t i = 0; i < len / RL_QK; i++, b += bs) {
        tq_vals(b, v, f);
        float d = ld_h(b), mn = tq_min(f) ? -ld_h(b + 2) : 0;
        store16(dst + 32 * i, v[0], d, mn);
        store16(dst + 32 * i + 16, v[1], d, mn);
    }
}

/* Dequantizes len values (a multiple of the block size, at most 256) from block pointer b,
 * bit-identical to rl_dequant_row. */
static void dequant_chunk(uint32_t type, const uint8_t *b, float *dst, size_t len) {
    int8x16_t v[2];
    switch (type) {
    case RL_F16:
        rl_neon_f16_to_f32_row((const uint16_t *)b, dst, len);
        return;
    case RL_BF16: {
        size_t i = 0;
        for (; i + 8 <= len; i += 8) {
            uint16x8_t h = vreinterpretq_u16_u8(vld1q_u8(b + 2 * i));
            vst1q_f32(dst + i, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)));
            vst1q_f32(dst + i + 4, vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)));
        }
        for (; i < len; i++) dst[i] = rl_bf16_to_f32((uint16_t)(b[2 * i] | (b[2 * i + 1] << 8)));
        return;
    }
    case RL_Q8_0: dequant_q(b, dst, len, TQ_Q8_0); return;
    case RL_Q4_0: dequant_q(b, dst, len, TQ_Q4_0); return;
    case RL_Q5_0: dequant_q(b, dst, len, TQ_Q5_0); return;
    case RL_Q5_1: dequant_q(b, dst, len, TQ_Q5_1); return;
    case RL_Q4_1: dequant_q(b, dst, len, TQ_Q4_1); return;
    case RL_Q4_K:
    case RL_Q5_K: {
        float d = ld_h(b), dmin = ld_h(b + 2);
        const uint8_t *qh = type == RL_Q5_K ? b + 16 : NULL, *qs = type == RL_Q5_K ? b + 48 : b + 16;
        for (size_t j = 0; j < 8; j++) {
            uint8_t sc, m;
            rl_k4_scale_min(j, b + 4, &sc, &m);
            qk45_vals(qs, qh, j, v);
            float ds = d * sc, dm = dmin * m;
            store16(dst + 32 * j, v[0], ds, dm);
            store16(dst + 32 * j + 16, v[1], ds, dm);
        }
        return;
    }
    case RL_Q6_K: {
        float d = ld_h(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192);
        for (size_t j = 0; j < 8; j++) {
            q6k_vals(b, j, v);
            store16(dst + 32 * j, v[0], d * sc[2 * j], 0);
            store16(dst + 32 * j + 16, v[1], d * sc[2 * j + 1], 0);
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
    float32x4_t a0[4], a1[4];
    RL_UNROLL
    for (int k = 0; k < NR; k++) a0[k] = a1[k] = vdupq_n_f32(0);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        float32x4_t x0 = vld1q_f32(x + i), x1 = vld1q_f32(x + i + 4);
        RL_UNROLL
        for (int k = 0; k < NR; k++) {
            a0[k] = vfmaq_f32(a0[k], vld1q_f32(p[k] + i), x0);
            a1[k] = vfmaq_f32(a1[k], vld1q_f32(p[k] + i + 4), x1);
        }
    }
    RL_UNROLL
    for (int k = 0; k < NR; k++) {
        float v = vaddvq_f32(vaddq_f32(a0[k], a1[k]));
        for (size_t t = i; t < len; t++) v += p[k][t] * x[t];
        out[k] = v;
    }
}

#include "mm_exact.h"

/* ---- fast path: row-major Q8_0 / Q4_0 / Q5_0 / Q5_1 tiles --------------------------------- */

/* A row-major tile's start and end (tile_q, tile_rq): the R rows' weights and the C columns'
 * activations (na blocks of 32 a column), zeroed accumulators and min sums; at the end each
 * (row, column)'s horizontal sum, plus its min sum where the format has one. */
AINLINE void tile_begin(const rl_mm *m, size_t r, size_t s, const int R, const int C, size_t na, const uint8_t **w,
                        const rl_q8a **a, float32x4_t acc[4][4], float32x4_t *off) {
    RL_UNROLL
    for (int k = 0; k < R; k++) w[k] = (const uint8_t *)m->w + (r + (size_t)k) * m->row_bytes;
    RL_UNROLL
    for (int c = 0; c < C; c++) {
        a[c] = m->xq + (s + (size_t)c) * na;
        off[c] = vdupq_n_f32(0);
    }
    RL_UNROLL
    for (int k = 0; k < R; k++) {
        RL_UNROLL
        for (int c = 0; c < C; c++) acc[k][c] = vdupq_n_f32(0);
    }
}
AINLINE void tile_end(const rl_mm *m, size_t r, size_t s, const int R, const int C, float32x4_t acc[4][4],
                      const float32x4_t *off, const bool mins) {
    RL_UNROLL
    for (int c = 0; c < C; c++) {
        _Alignas(16) float o[4];
        vst1q_f32(o, off[c]);
        RL_UNROLL
        for (int k = 0; k < R; k++) {
            float v = vaddvq_f32(acc[k][c]);
            if (mins) v += o[k];
            put(m, s + (size_t)c, r + (size_t)k, v, m->accumulate);
        }
    }
}

/* R rows starting at r times C columns starting at s, weight format f: each weight block is
 * unpacked once per tile, each activation block loaded once per tile; per (row, column) the
 * block's int32 lanes are converted and scaled by dw*da into a float accumulator (one
 * horizontal sum at the end). Q4_1's / Q5_1's m * s terms collect per column in off[c], lane k = row k. */
AINLINE void tile_q(const rl_mm *m, size_t r, size_t s, const int R, const int C, const int f) {
    const size_t bs = tq_bs(f), nb = m->n / RL_QK;
    const uint8_t *w[4];
    const rl_q8a *a[4];
    float32x4_t acc[4][4], off[4];
    tile_begin(m, r, s, R, C, nb, w, a, acc, off);
    for (size_t b = 0; b < nb; b++) {
        int8x16_t wq[4][2];
        float dw[4];
        _Alignas(16) float mw[4] = {0};
        RL_UNROLL
        for (int k = 0; k < R; k++) {
            const uint8_t *blk = w[k] + b * bs;
            tq_vals(blk, wq[k], f);
            dw[k] = ld_h(blk);
            if (tq_min(f)) mw[k] = ld_h(blk + 2);
        }
        RL_UNROLL
        for (int c = 0; c < C; c++) {
            const rl_q8a *ab = &a[c][b];
            int8x16_t a0 = vld1q_s8(ab->qs), a1 = vld1q_s8(ab->qs + 16);
            RL_UNROLL
            for (int k = 0; k < R; k++) {
                int32x4_t d = dot16(dot16(vdupq_n_s32(0), wq[k][0], a0), wq[k][1], a1);
                acc[k][c] = vfmaq_n_f32(acc[k][c], vcvtq_f32_s32(d), dw[k] * ab->d);
            }
            if (tq_min(f)) off[c] = vfmaq_n_f32(off[c], vld1q_f32(mw), ab->s);
        }
    }
    tile_end(m, r, s, R, C, acc, off, tq_min(f));
}

/* 4 rows x 4 columns: 16 accumulators + 8 weight registers + 2 activation registers fit the
 * 32 vector registers (Q5_1's 4 + 1 more for its min sums spill a few). */
#define TR 4
#define TC 4

AINLINE void rows_q(const rl_mm *m, size_t r0, size_t r1, const int f) {
    size_t r = r0;
    for (; r + TR <= r1; r += TR) {
        size_t s = 0;
        if (m->S > 1)
            for (; s + TC <= m->S; s += TC) tile_q(m, r, s, TR, TC, f);
        for (; s < m->S; s++) tile_q(m, r, s, TR, 1, f);
    }
    for (; r < r1; r++) {
        size_t s = 0;
        for (; s + TC <= m->S; s += TC) tile_q(m, r, s, 1, TC, f);
        for (; s < m->S; s++) tile_q(m, r, s, 1, 1, f);
    }
}

/* ---- fast path: row-major RQ2 / RQ4 (64-value blocks, d and m at the block's end) -------- */

/* A block's 64 codes (RQ2 0..3, RQ4 0..15) as four registers of 16 in weight order: v[0], v[1]
 * the first 32-value half, v[2], v[3] the second. RQ4: Q4_0's nibble order per half (byte j of
 * the half's 16 holds values j and j + 16). RQ2: weight 4i + k sits at bits 2k of byte i, so a
 * table lookup spreads each byte over 4 lanes and a per-lane shift right by 2k and a mask take
 * its code out. */
AINLINE void rq_vals(const uint8_t *b, const bool four, int8x16_t v[4]) {
    if (four) {
        RL_UNROLL
        for (int h = 0; h < 2; h++) {
            const uint8x16_t raw = vld1q_u8(b + 16 * h);
            v[2 * h] = vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(0xF)));
            v[2 * h + 1] = vreinterpretq_s8_u8(vshrq_n_u8(raw, 4));
        }
        return;
    }
    static const uint8_t spread[16] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
    static const int8_t shift[16] = {0, -2, -4, -6, 0, -2, -4, -6, 0, -2, -4, -6, 0, -2, -4, -6};
    const uint8x16_t raw = vld1q_u8(b), idx = vld1q_u8(spread);
    const int8x16_t sh = vld1q_s8(shift);
    RL_UNROLL
    for (int j = 0; j < 4; j++) {
        const uint8x16_t bytes = vqtbl1q_u8(raw, vaddq_u8(idx, vdupq_n_u8((uint8_t)(4 * j))));
        v[j] = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(bytes, sh), vdupq_n_u8(3)));
    }
}

/* R rows starting at r times C columns starting at s: per 32-value half, d * d_x * dot into a
 * float accumulator per (row, column) and m * s_x into the column's min sums (lane k = row k),
 * as tile_q does for Q4_1. Every (row, column) takes its terms in the same order whatever C
 * is, so a batch gives decoding's bits. Codes are at most 15, so the baseline dot16's int16
 * pair sums cannot overflow. */
AINLINE void tile_rq(const rl_mm *m, size_t r, size_t s, const int R, const int C, const bool four) {
    const size_t bs = four ? 36 : 20, nb = m->n / RL_QK_RQ2, na = m->n / RL_QK;
    const uint8_t *w[4];
    const rl_q8a *a[4];
    float32x4_t acc[4][4], off[4];
    tile_begin(m, r, s, R, C, na, w, a, acc, off);
    for (size_t b = 0; b < nb; b++) {
        int8x16_t wq[4][4];
        float dw[4];
        _Alignas(16) float mw[4] = {0};
        RL_UNROLL
        for (int k = 0; k < R; k++) {
            const uint8_t *blk = w[k] + b * bs;
            rq_vals(blk, four, wq[k]);
            dw[k] = ld_h(blk + bs - 4);
            mw[k] = ld_h(blk + bs - 2);
        }
        const float32x4_t mv = vld1q_f32(mw);
        RL_UNROLL
        for (int c = 0; c < C; c++) {
            RL_UNROLL
            for (int h = 0; h < 2; h++) {
                const rl_q8a *ab = &a[c][2 * b + (size_t)h];
                const int8x16_t a0 = vld1q_s8(ab->qs), a1 = vld1q_s8(ab->qs + 16);
                RL_UNROLL
                for (int k = 0; k < R; k++) {
                    const int32x4_t d = dot16(dot16(vdupq_n_s32(0), wq[k][2 * h], a0), wq[k][2 * h + 1], a1);
                    acc[k][c] = vfmaq_n_f32(acc[k][c], vcvtq_f32_s32(d), dw[k] * ab->d);
                }
                off[c] = vfmaq_n_f32(off[c], mv, ab->s);
            }
        }
    }
    tile_end(m, r, s, R, C, acc, off, true);
}

/* 4 rows x 2 columns: 8 accumulators, 16 code registers and 2 activation registers fit the 32
 * vector registers. */
AINLINE void rows_rq(const rl_mm *m, size_t r0, size_t r1, const bool four) {
    size_t r = r0;
    for (; r + TR <= r1; r += TR) {
        size_t s = 0;
        for (; s + 2 <= m->S; s += 2) tile_rq(m, r, s, TR, 2, four);
        for (; s < m->S; s++) tile_rq(m, r, s, TR, 1, four);
    }
    for (; r < r1; r++) {
        size_t s = 0;
        for (; s + 2 <= m->S; s += 2) tile_rq(m, r, s, 1, 2, four);
        for (; s < m->S; s++) tile_rq(m, r, s, 1, 1, four);
    }
}

/* ---- fast path: row-interleaved (x8) Q4_0 / Q8_0 ----------------------------------------- */

/* One group of 8 interleaved rows times C columns starting at s, all blocks; f is TQ_Q4_0 or
 * TQ_Q8_0, the only formats NEON builds pack (rl_pack_supported). A 32-byte chunk k of a block
 * holds quant bytes 4k..4k+3 of rows 0..7: two 16-byte registers (rows 0-3, rows 4-7), each
 * dotted with the column's 4 matching activation bytes broadcast. Q4_0's low nibbles are values
 * 4k.., its high nibbles values 16+4k.. of the same rows. */
AINLINE void tile_x8(const rl_mm *m, size_t r, size_t s, const int C, const int f) {
    const size_t bs = tq_bs(f), nb = m->n / RL_QK, gbs = 8 * bs;
    const uint8_t *wg = (const uint8_t *)m->w + r * m->row_bytes;
    const rl_q8a *a[4];
    float32x4_t acc[4][2];
    RL_UNROLL
    for (int c = 0; c < C; c++) {
        a[c] = m->xq + (s + (size_t)c) * nb;
        acc[c][0] = acc[c][1] = vdupq_n_f32(0);
    }
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = wg + b * gbs;
        int32x4_t dot[4][2];
        RL_UNROLL
        for (int c = 0; c < C; c++) dot[c][0] = dot[c][1] = vdupq_n_s32(0);
        if (f == TQ_Q4_0) {
            RL_UNROLL
            for (int k = 0; k < 4; k++) {
                int8x16_t lo[2], hi[2];
                RL_UNROLL
                for (int h = 0; h < 2; h++) {
                    uint8x16_t raw = vld1q_u8(blk + 16 + 32 * k + 16 * h);
                    lo[h] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(0xF))), vdupq_n_s8(8));
                    hi[h] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)), vdupq_n_s8(8));
                }
                RL_UNROLL
                for (int c = 0; c < C; c++) {
                    int8x16_t al = bc4(a[c][b].qs + 4 * k), ah = bc4(a[c][b].qs + 16 + 4 * k);
                    RL_UNROLL
                    for (int h = 0; h < 2; h++) dot[c][h] = dot16(dot16(dot[c][h], lo[h], al), hi[h], ah);
                }
            }
        } else {
            RL_UNROLL
            for (int k = 0; k < 8; k++) {
                int8x16_t w0 = vld1q_s8((const int8_t *)(blk + 16 + 32 * k));
                int8x16_t w1 = vld1q_s8((const int8_t *)(blk + 32 + 32 * k));
                RL_UNROLL
                for (int c = 0; c < C; c++) {
                    int8x16_t av = bc4(a[c][b].qs + 4 * k);
                    dot[c][0] = dot16(dot[c][0], w0, av);
                    dot[c][1] = dot16(dot[c][1], w1, av);
                }
            }
        }
        float16x8_t dh = vreinterpretq_f16_u8(vld1q_u8(blk));
        float32x4_t dw[2] = {vcvt_f32_f16(vget_low_f16(dh)), vcvt_high_f32_f16(dh)};
        RL_UNROLL
        for (int c = 0; c < C; c++) {
            RL_UNROLL
            for (int h = 0; h < 2; h++)
                acc[c][h] = vfmaq_f32(acc[c][h], dw[h], vmulq_n_f32(vcvtq_f32_s32(dot[c][h]), a[c][b].d));
        }
    }
    RL_UNROLL
    for (int c = 0; c < C; c++) {
        float *y = m->y + (s + (size_t)c) * m->ys + r;
        RL_UNROLL
        for (int h = 0; h < 2; h++) {
            float32x4_t v = acc[c][h];
            if (m->accumulate) v = vaddq_f32(v, vld1q_f32(y + 4 * h));
            vst1q_f32(y + 4 * h, v);
        }
    }
}

#define XC 4
AINLINE void rows_x8(const rl_mm *m, size_t r0, size_t r1, const int f) {
    const size_t chunk = rl_x8_chunk(m, XC); /* (the AVX2 kernel's size; not tuned here) */
    for (size_t s0 = 0; s0 < m->S; s0 += chunk) {
        size_t s1 = m->S - s0 < chunk ? m->S : s0 + chunk;
        for (size_t r = r0; r < r1; r += 8) {
            size_t s = s0;
            for (; s + XC <= s1; s += XC) tile_x8(m, r, s, XC, f);
            switch (s1 - s) {
            case 3: tile_x8(m, r, s, 3, f); break;
            case 2: tile_x8(m, r, s, 2, f); break;
            case 1: tile_x8(m, r, s, 1, f); break;
            default: break;
            }
        }
    }
}

/* ---- fast path: K-quants ------------------------------------------------------------------- */

/* One super-block unpacked: 8 groups of 32 int8 values (two registers each) plus factors.
 * Q4_K/Q5_K: unsigned values, one int scale sc[2j] per group (sc[2j+1] equal), min term
 * mn[j] = dmin*m[j] subtracted times the activation sum s. Q6_K: signed values, one int8
 * scale per 16 values (sc[2j], sc[2j+1]), no mins. */
typedef struct kblock {
    int8x16_t q[8][2];
    int32_t sc[16];
    float mn[8];
    float d;
} kblock;

AINLINE void unpack_k(uint32_t type, const uint8_t *b, kblock *kb) {
    if (type == RL_Q6_K) {
        const int8_t *sc = (const int8_t *)(b + 192);
        kb->d = ld_h(b + 208);
        for (size_t j = 0; j < 8; j++) {
            q6k_vals(b, j, kb->q[j]);
            kb->sc[2 * j] = sc[2 * j];
            kb->sc[2 * j + 1] = sc[2 * j + 1];
            kb->mn[j] = 0;
        }
        return;
    }
    float dmin = ld_h(b + 2);
    const uint8_t *qh = type == RL_Q5_K ? b + 16 : NULL, *qs = type == RL_Q5_K ? b + 48 : b + 16;
    kb->d = ld_h(b);
    for (size_t j = 0; j < 8; j++) {
        uint8_t sc, mm;
        rl_k4_scale_min(j, b + 4, &sc, &mm);
        qk45_vals(qs, qh, j, kb->q[j]);
        kb->sc[2 * j] = kb->sc[2 * j + 1] = sc;
        kb->mn[j] = dmin * mm;
    }
}

AINLINE float dot_k(const kblock *kb, const rl_q8a *a) {
    float32x4_t acc = vdupq_n_f32(0);
    float mins = 0;
    RL_UNROLL
    for (size_t j = 0; j < 8; j++) {
        int32x4_t d0 = dot16(vdupq_n_s32(0), kb->q[j][0], vld1q_s8(a[j].qs));
        int32x4_t d1 = dot16(vdupq_n_s32(0), kb->q[j][1], vld1q_s8(a[j].qs + 16));
        int32x4_t d = vmlaq_n_s32(vmulq_n_s32(d0, kb->sc[2 * j]), d1, kb->sc[2 * j + 1]);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(d), kb->d * a[j].d);
        mins += kb->mn[j] * a[j].s;
    }
    return vaddvq_f32(acc) - mins;
}

static void rows_k(const rl_mm *m, size_t r0, size_t r1, uint32_t type) {
    const rl_type_info *ti = rl_type_get(type);
    size_t nsb = m->n / RL_QK_K, nb = m->n / RL_QK;
    kblock kb;
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)m->w + r * m->row_bytes;
        for (size_t i = 0; i < nsb; i++) {
            unpack_k(type, w + i * ti->size, &kb);
            bool add = i > 0 || m->accumulate;
            for (size_t s = 0; s < m->S; s++) put(m, s, r, dot_k(&kb, m->xq + s * nb + 8 * i), add);
        }
    }
}

/* ---- activation quantization ------------------------------------------------------------- */

/* A 32-value block loaded into v and its amax (0 for a zero block) */
AINLINE float blk32_amax(const float *x, float32x4_t v[8]) {
    float32x4_t mx = vdupq_n_f32(0);
    RL_UNROLL
    for (int k = 0; k < 8; k++) {
        v[k] = vld1q_f32(x + 4 * k);
        mx = vmaxq_f32(mx, vabsq_f32(v[k]));
    }
    return vmaxvq_f32(mx);
}

/* 32 codes in [-127, 127] stored as int8 (the saturating narrows never saturate) */
AINLINE void st_i8x32(int8_t *dst, const int32x4_t q[8]) {
    RL_UNROLL
    for (int h = 0; h < 2; h++) {
        int16x8_t a = vcombine_s16(vqmovn_s32(q[4 * h]), vqmovn_s32(q[4 * h + 1]));
        int16x8_t b = vcombine_s16(vqmovn_s32(q[4 * h + 2]), vqmovn_s32(q[4 * h + 3]));
        vst1q_s8(dst + 16 * h, vcombine_s8(vqmovn_s16(a), vqmovn_s16(b)));
    }
}

/* Same operations as rl_q8a_quant_row_ref (amax, d = amax/127, id = 127/amax, x*id rounded to
 * nearest even by fcvtns, integer sum), so the output is identical: |x*id| <= 127. */
void rl_neon_q8a_quant_row(const float *x, rl_q8a *dst, size_t n) {
    for (size_t i = 0; i < n / RL_QK; i++, x += RL_QK) {
        float32x4_t v[8];
        float amax = blk32_amax(x, v);
        float d = amax / 127, id = d != 0 ? 127 / amax : 0;
        int32x4_t q[8], sum = vdupq_n_s32(0);
        RL_UNROLL
        for (int k = 0; k < 8; k++) {
            q[k] = vcvtnq_s32_f32(vmulq_n_f32(v[k], id));
            sum = vaddq_s32(sum, q[k]);
        }
        st_i8x32(dst[i].qs, q);
        int total = vaddvq_s32(sum);
        dst[i].d = d;
        dst[i].s = d * (float)total;
        dst[i].sum8 = 8 * total;
    }
}

/* Q8_0 weight blocks with quant.c's operations (quant_q8_0, ggml's quantize_row_q8_0_ref):
 * d = amax / 127, id = 1 / d, codes x * id rounded half away from zero, which fcvtas does as
 * roundf does; d stored as fp16. */
void rl_neon_q8_0_row(const float *x, uint8_t *b, size_t n) {
    for (size_t i = 0; i < n / RL_QK; i++, x += RL_QK, b += 34) {
        float32x4_t v[8];
        const float id = rl_q8_0_scale(blk32_amax(x, v), b);
        int32x4_t q[8];
        RL_UNROLL
        for (int k = 0; k < 8; k++) q[k] = vcvtaq_s32_f32(vmulq_n_f32(v[k], id));
        st_i8x32((int8_t *)b + 2, q);
    }
}

bool rl_neon_any_nonfinite(const float *x, size_t n) {
    const uint32x4_t e = vdupq_n_u32(0x7f800000u);
    uint32x4_t acc = vdupq_n_u32(0);
    for (size_t i = 0; i < n; i += 4) acc = vorrq_u32(acc, vceqq_u32(vandq_u32(vreinterpretq_u32_f32(vld1q_f32(x + i)), e), e));
    return vmaxvq_u32(acc) != 0;
}

/* ---- dispatch ------------------------------------------------------------------------------ */

#include "mm_dispatch.h" /* RQ2 / RQ4 are not packed here: no rows_rq_x8 */

void rl_neon_mm_rows(const rl_mm *m, size_t r0, size_t r1) { mm_rows(m, r0, r1); }

#else
/* ISO C wants at least one declaration in a translation unit */
typedef int rl_mm_neon_unused;
#endif /* RL_MM_NEON */
