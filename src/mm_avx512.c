/* AVX-512 matmul kernels (F + BW + VL; vpdpbusd when the build has AVX512-VNNI); compiles to
 * nothing on other targets. Same structure as the AVX2 kernels in mm.c and tested against the
 * same scalar reference (tests/unit/test_quant.c, built for x86-64-v4 with and without VNNI by
 * `make test-avx512`).
 *
 * Integer dots: dp() sums 4 unsigned x signed byte products into each int32 lane (vpdpbusd, or
 * maddubs + madd without VNNI). Signed weights (Q8_0, Q6_K) move their sign onto the activation
 * (AVX-512 has no vpsignb: a masked subtract from zero does it); Q4_0 / Q5_0 keep their codes
 * unsigned and subtract 8 (16) * sum(activation) in integers, and Q4_1 / Q5_1 add m * s per
 * block, as the AVX2 kernels do.
 *
 * Row-major 32-value formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) and the K-quants put two blocks
 * (groups) in one register:
 * lanes 0-7 hold the first block's 8 partial dots, lanes 8-15 the second's.
 *
 * Row-interleaved (x8) Q4_0 / Q8_0: one 64-byte load holds quant chunks k and k+1 (4 bytes of
 * each of the 8 rows, per chunk). A lane permute shared by all columns puts row r's two chunks
 * next to each other (lanes 2r, 2r+1), so the activation side is a single 8-byte broadcast per
 * load and column. Per block the two lanes of each row are added in integers (the dot is then
 * exact, as in the reference) before the float scales apply.
 *
 * Exact path: dequantization does the reference's operations (scale product first, then one
 * multiply and, for the K-quant mins, one subtract; no fused multiply-add) so the dequantized
 * values are bit-identical to rl_dequant_row; only the fp32 dot order differs. */
#include "mm_avx512.h"
#include "mm_x86.h"

#ifdef RL_MM_AVX512

#include <immintrin.h>
#include <string.h>

#define AINLINE static inline __attribute__((always_inline))
#define RL_UNROLL _Pragma("GCC unroll 8")

/* ---- helpers ---------------------------------------------------------------------------- */

/* fp16 -> fp32 with the AVX512VL form of vcvtph2ps (F16C is not implied by the guard). */
AINLINE float ld_h(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _mm_cvtss_f32(_mm_maskz_cvtph_ps(1, _mm_cvtsi32_si128(h)));
}

AINLINE void put(const rl_mm *m, size_t s, size_t r, float v, bool add) {
    float *y = m->y + s * m->ys + r;
    *y = add ? *y + v : v;
}

#include "mm_rq.h" /* RQ2, RQ4: the AVX2 kernel */

/* The first n lanes (all 16 for n >= 16): masked loads never touch the others, so a row tail
 * needs no scalar loop and no read past its end. */
AINLINE __mmask16 tail_mask(size_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
}

/* acc lane i += the 4 products of unsigned bytes 4i..4i+3 of u with the signed bytes of s.
 * Without VNNI maddubs' int16 pair sums cannot saturate: u <= 128 and |s| <= 127 at every call
 * (an rl_q8a activation is never -128), so 2 * 128 * 127 < 32767. */
AINLINE __m512i dp(__m512i acc, __m512i u, __m512i s) {
#ifdef __AVX512VNNI__
    return _mm512_dpbusd_epi32(acc, u, s);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

/* a negated where w is negative, so |w| * sign_by(a, w) = w * a byte by byte. */
AINLINE __m512i sign_by(__m512i a, __m512i w) {
    return _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(w), _mm512_setzero_si512(), a);
}

/* lo in lanes 0-7 (bytes 0-31), hi in lanes 8-15 */
AINLINE __m512i join(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

AINLINE __m512 join_ps(float lo, float hi) {
    return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(lo), _mm512_set1_ps(hi));
}

AINLINE __m256i ld256(const void *p) {
    return _mm256_loadu_si256((const __m256i *)p);
}

/* ---- fp16 rows ---------------------------------------------------------------------------- */

void rl_avx512_f16_to_f32_row(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(ld256(src + i)));
    if (i < n) {
        __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, src + i)));
    }
}

void rl_avx512_f32_to_f16_row(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {
        __mmask16 k = tail_mask(n - i);
        _mm256_mask_storeu_epi16(dst + i, k, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, src + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

/* ---- unpacked weight values -------------------------------------------------------------- */

AINLINE __m256i q8_0_vals(const uint8_t *b) {
    return ld256(b + 2);
}

/* The row-major 32-value formats of the fast path's tiles, and each one's block size, codes,
 * and how its offset enters (as in mm.c's AVX2 tiles): Q8_0 signed; Q4_0 / Q5_0 unsigned
 * codes with -8 / -16 subtracted in integers (1 / 2 x sum8); Q4_1 / Q5_1 unsigned codes plus
 * the block's min m times the activation sum s (rl_q8a.s), a float term. */
/* codes of the block at b (formats: mm_tq.h): Q8_0 signed, the others unsigned */
AINLINE __m256i tq_vals(const uint8_t *b, const int f) {
    return f == TQ_Q8_0 ? q8_0_vals(b) : tq_uvals(b, f);
}

/* Q4_K / Q5_K groups 2i and 2i+1 (values 0..15 / 0..31), bytes 0-31 and 32-63. Both come from
 * the same 32 bytes of qs (low nibbles for group 2i, high for 2i+1); bit j of qh[l] is the
 * fifth bit of value l of group j. qh NULL for Q4_K. */
AINLINE __m512i qk45_pair(const uint8_t *qs, const uint8_t *qh, size_t i) {
    __m512i raw = _mm512_broadcast_i64x4(ld256(qs + 32 * i));
    __m512i v = _mm512_and_si512(_mm512_mask_srli_epi16(raw, 0xFFFF0000u, raw, 4), _mm512_set1_epi8(0xF));
    if (qh) {
        __m512i h = _mm512_broadcast_i64x4(ld256(qh));
        __m512i bit = _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi8((char)(1u << (2 * i))),
                                              _mm512_set1_epi8((char)(1u << (2 * i + 1))));
        v = _mm512_mask_add_epi8(v, _mm512_test_epi8_mask(h, bit), v, _mm512_set1_epi8(16));
    }
    return v;
}

/* Q6_K groups 2i and 2i+1, signed (-32..31), bytes 0-31 and 32-63. Group j = 4h + k takes its
 * low 4 bits from ql[64h + 32(k%2) ..] (high nibbles when k >= 2) and its top 2 bits from bits
 * 2k, 2k+1 of qh[32h ..]. For the pair, h = i/2 and k = 2(i%2), k+1: the ql bytes of both are
 * 64 contiguous bytes, shifted alike, and the qh bytes are shared, shifted by 2k and 2k+2. */
AINLINE __m512i q6k_pair(const uint8_t *b, size_t i) {
    size_t h = i / 2, k = 2 * (i % 2);
    __m512i lo = _mm512_loadu_si512(b + 64 * h);
    if (k) lo = _mm512_srli_epi16(lo, 4);
    lo = _mm512_and_si512(lo, _mm512_set1_epi8(0xF));
    __m512i hi = _mm512_broadcast_i64x4(ld256(b + 128 + 32 * h));
    hi = _mm512_srl_epi16(hi, _mm_cvtsi32_si128((int)(2 * k)));
    hi = _mm512_mask_srli_epi16(hi, 0xFFFF0000u, hi, 2);
    hi = _mm512_slli_epi16(_mm512_and_si512(hi, _mm512_set1_epi8(3)), 4);
    return _mm512_sub_epi8(_mm512_or_si512(lo, hi), _mm512_set1_epi8(32));
}

/* ---- exact path ---------------------------------------------------------------------------- */

/* 16 int8 -> 16 floats d * q, minus mn for the K-quant mins (the symmetric formats have no
 * subtraction in the reference). The _round forms are builtins, not vector expressions, so no
 * -ffp-contract setting can fuse the multiply and subtract into an FMA. */
AINLINE void store16(float *dst, __m128i q, float d, float mn, const int sub) {
    __m512 v = _mm512_mul_round_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _MM_FROUND_CUR_DIRECTION);
    if (sub) v = _mm512_sub_round_ps(v, _mm512_set1_ps(mn), _MM_FROUND_CUR_DIRECTION);
    _mm512_storeu_ps(dst, v);
}

/* 64 int8 (one register) -> 64 floats; 16-value quarter l uses d[l] and mn[l]. */
AINLINE void store64(float *dst, __m512i q, const float *d, const float *mn, const int sub) {
    store16(dst, _mm512_extracti32x4_epi32(q, 0), d[0], mn[0], sub);
    store16(dst + 16, _mm512_extracti32x4_epi32(q, 1), d[1], mn[1], sub);
    store16(dst + 32, _mm512_extracti32x4_epi32(q, 2), d[2], mn[2], sub);
    store16(dst + 48, _mm512_extracti32x4_epi32(q, 3), d[3], mn[3], sub);
}

/* Dequantizes len values (a multiple of the block size, at most 256) from block pointer b,
 * bit-identical to rl_dequant_row. */
static void dequant_chunk(uint32_t type, const uint8_t *b, float *dst, size_t len) {
    switch (type) {
    case RL_F16:
        rl_avx512_f16_to_f32_row((const uint16_t *)b, dst, len);
        return;
    case RL_BF16:
        for (size_t i = 0; i < len; i += 16) {
            __mmask16 k = tail_mask(len - i);
            __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, b + 2 * i));
            _mm512_mask_storeu_ps(dst + i, k, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
        }
        return;
    case RL_Q8_0:
    case RL_Q4_0:
    case RL_Q4_1:
    case RL_Q5_0:
    case RL_Q5_1: {
        /* Q4_0 / Q5_0 as d * (q - z); Q4_1 / Q5_1 as d * q - (-m), which rounds as the
         * reference's d * q + m */
        const int f = tq_of(type);
        const size_t bs = tq_bs(f);
        const bool min = tq_min(f);
        for (size_t i = 0; i < len / RL_QK; i++, b += bs) {
            __m256i q = tq_vals(b, f);
            if (tq_sub(f)) q = _mm256_sub_epi8(q, _mm256_set1_epi8((char)tq_sub(f)));
            const float d = ld_h(b), mn = min ? -ld_h(b + 2) : 0.0f;
            store16(dst + 32 * i, _mm256_castsi256_si128(q), d, mn, min);
            store16(dst + 32 * i + 16, _mm256_extracti128_si256(q, 1), d, mn, min);
        }
        return;
    }
    case RL_FP8:
        fp8_run(b, dst, len);
        return;
    case RL_Q4_K:
    case RL_Q5_K: {
        float d = ld_h(b), dmin = ld_h(b + 2);
        const uint8_t *qh = type == RL_Q5_K ? b + 16 : NULL, *qs = type == RL_Q5_K ? b + 48 : b + 16;
        RL_UNROLL
        for (size_t i = 0; i < 4; i++) {
            uint8_t s0, m0, s1, m1;
            rl_k4_scale_min(2 * i, b + 4, &s0, &m0);
            rl_k4_scale_min(2 * i + 1, b + 4, &s1, &m1);
            float ds0 = d * s0, ds1 = d * s1, dm0 = dmin * m0, dm1 = dmin * m1;
            const float dd[4] = {ds0, ds0, ds1, ds1}, mm[4] = {dm0, dm0, dm1, dm1};
            store64(dst + 64 * i, qk45_pair(qs, qh, i), dd, mm, 1);
        }
        return;
    }
    case RL_Q6_K: {
        float d = ld_h(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192);
        const float zero[4] = {0, 0, 0, 0};
        RL_UNROLL
        for (size_t i = 0; i < 4; i++) {
            /* 16 values per scale: quarter l of the pair has sc[4i + l] */
            const float dd[4] = {d * sc[4 * i], d * sc[4 * i + 1], d * sc[4 * i + 2], d * sc[4 * i + 3]};
            store64(dst + 64 * i, q6k_pair(b, i), dd, zero, 0);
        }
        return;
    }
    default:
        rl_dequant_row(type, b, dst, len);
        return;
    }
}

/* NR rows (pointers p[k] to len floats) dotted with one column x; two accumulators per row, the
 * tail (len % 32) through masked loads. */
AINLINE void dots_n(const float *const *p, const float *x, size_t len, float *out, const int NR) {
    __m512 a0[4], a1[4];
    RL_UNROLL
    for (int k = 0; k < NR; k++) a0[k] = a1[k] = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= len; i += 32) {
        __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
        RL_UNROLL
        for (int k = 0; k < NR; k++) {
            a0[k] = _mm512_fmadd_ps(_mm512_loadu_ps(p[k] + i), x0, a0[k]);
            a1[k] = _mm512_fmadd_ps(_mm512_loadu_ps(p[k] + i + 16), x1, a1[k]);
        }
    }
    if (i < len) {
        size_t rem = len - i;
        __mmask16 m0 = tail_mask(rem), m1 = rem > 16 ? tail_mask(rem - 16) : 0;
        __m512 x0 = _mm512_maskz_loadu_ps(m0, x + i), x1 = _mm512_maskz_loadu_ps(m1, x + i + 16);
        RL_UNROLL
        for (int k = 0; k < NR; k++) {
            a0[k] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, p[k] + i), x0, a0[k]);
            a1[k] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, p[k] + i + 16), x1, a1[k]);
        }
    }
    RL_UNROLL
    for (int k = 0; k < NR; k++) out[k] = _mm512_reduce_add_ps(_mm512_add_ps(a0[k], a1[k]));
}

#include "mm_exact.h"

/* ---- fast path: row-major tiles of the 32-value formats ---------------------------------- */

/* Blocks b and b+1 (two = 0: block b alone, the upper lanes all zero) of R rows x C columns.
 * Each weight pair is unpacked once for the C columns, each activation pair loaded once for
 * the R rows. Q4_0's -8 (Q5_0's -16) is subtracted as sum8 = 8 * sum(activation) (twice that)
 * from the first lane of each block, so every block's integer dot is exact before its scale
 * dw * da applies; Q4_1's / Q5_1's m * s is added in the block's first lane. */
AINLINE void pair_q(const uint8_t *const *w, const rl_q8a *const *a, size_t b, __m512 acc[4][4], const int R,
                    const int C, const int f, const int two) {
    const size_t bs = tq_bs(f);
    const bool sub = tq_sub(f) != 0, min = tq_min(f);
    const __m512i zero = _mm512_setzero_si512();
    __m512i wq[4], wa[4];
    __m512 dw[4], mw[4];
    RL_UNROLL
    for (int k = 0; k < R; k++) {
        const uint8_t *blk = w[k] + b * bs;
        __m256i lo = tq_vals(blk, f);
        __m256i hi = !two ? _mm256_setzero_si256() : tq_vals(blk + bs, f);
        wq[k] = join(lo, hi);
        wa[k] = f != TQ_Q8_0 ? wq[k] : _mm512_abs_epi8(wq[k]);
        dw[k] = two ? join_ps(ld_h(blk), ld_h(blk + bs)) : _mm512_maskz_mov_ps(0x00FF, _mm512_set1_ps(ld_h(blk)));
        if (min) mw[k] = _mm512_maskz_mov_ps(two ? 0x0101 : 0x0001, two ? join_ps(ld_h(blk + 2), ld_h(blk + bs + 2)) : _mm512_set1_ps(ld_h(blk + 2)));
    }
    RL_UNROLL
    for (int c = 0; c < C; c++) {
        const rl_q8a *ab = a[c] + b;
        __m512i aq = join(ld256(ab[0].qs), two ? ld256(ab[1].qs) : _mm256_setzero_si256());
        __m512 da = two ? join_ps(ab[0].d, ab[1].d) : _mm512_maskz_mov_ps(0x00FF, _mm512_set1_ps(ab[0].d));
        __m512i corr = zero;
        __m512 sa = _mm512_setzero_ps();
        if (sub) {
            const int z = f == TQ_Q4_0 ? 1 : 2;
            corr = _mm512_maskz_set1_epi32(0x0001, z * ab[0].sum8);
            if (two) corr = _mm512_mask_set1_epi32(corr, 0x0100, z * ab[1].sum8);
        }
        if (min) sa = two ? join_ps(ab[0].s, ab[1].s) : _mm512_set1_ps(ab[0].s);
        RL_UNROLL
        for (int k = 0; k < R; k++) {
            __m512i d = f != TQ_Q8_0 ? _mm512_sub_epi32(dp(zero, wq[k], aq), corr) : dp(zero, wa[k], sign_by(aq, wq[k]));
            acc[k][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw[k], da), acc[k][c]);
            if (min) acc[k][c] = _mm512_fmadd_ps(mw[k], sa, acc[k][c]);
        }
    }
}

/* R rows starting at r times C columns starting at s; f selects the weight format. */
AINLINE void tile_q(const rl_mm *m, size_t r, size_t s, const int R, const int C, const int f) {
    const size_t nb = m->n / RL_QK;
    const uint8_t *w[4];
    const rl_q8a *a[4];
    __m512 acc[4][4];
    RL_UNROLL
    for (int k = 0; k < R; k++) w[k] = (const uint8_t *)m->w + (r + (size_t)k) * m->row_bytes;
    RL_UNROLL
    for (int c = 0; c < C; c++) a[c] = m->xq + (s + (size_t)c) * nb;
    RL_UNROLL
    for (int k = 0; k < R; k++) {
        RL_UNROLL
        for (int c = 0; c < C; c++) acc[k][c] = _mm512_setzero_ps();
    }
    size_t b = 0;
    for (; b + 2 <= nb; b += 2) pair_q(w, a, b, acc, R, C, f, 1);
    if (b < nb) pair_q(w, a, b, acc, R, C, f, 0);
    RL_UNROLL
    for (int k = 0; k < R; k++) {
        RL_UNROLL
        for (int c = 0; c < C; c++) put(m, s + (size_t)c, r + (size_t)k, _mm512_reduce_add_ps(acc[k][c]), m->accumulate);
    }
}

/* Decode (S=1) streams 4 rows against one column; prefill uses 4 x 3: 12 accumulators and 4
 * rows' values, abs values and scales stay within the 32 zmm registers. */
#define TR1 4
#define TR 4
#define TC 3

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

/* ---- fast path: row-interleaved (x8) Q4_0 / Q8_0 ----------------------------------------- */

/* 8 activation bytes: p[0..3] in every even dword lane, p[4..7] in every odd one. */
AINLINE __m512i bc8(const int8_t *p) {
    int64_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi64(v);
}

/* Columns per prefill tile: 8 int32 dots + 8 fp32 accumulators + weights and constants fit the
 * 32 zmm registers. Not tuned on AVX-512 hardware. */
#define XC 8

/* One group of 8 interleaved rows times C columns starting at s, for all blocks. A group block
 * is 16 bytes of fp16 scales (row r at 2r), then quant chunks of 32 bytes: chunk k holds quant
 * bytes 4k..4k+3 of rows 0..7 (rl_pack_rows). Load p reads chunks 2p and 2p+1 (dword lanes 0-7
 * and 8-15), the permute makes lane 2r = row r's chunk 2p and lane 2r+1 = its chunk 2p+1, which
 * bc8 of the activation bytes 8p..8p+7 matches. Q8_0: 8 chunks (4 loads), value j = byte j.
 * Q4_0: 4 chunks (2 loads); byte j's low nibble is value j, its high nibble value 16 + j, so the
 * high nibbles pair with activation bytes 16 + 8p... */
AINLINE void tile_x8(const rl_mm *m, size_t r, size_t s, const int C, const int q4) {
    const size_t bs = q4 ? 18 : 34, nb = m->n / RL_QK, gbs = 8 * bs;
    const uint8_t *wg = (const uint8_t *)m->w + r * m->row_bytes;
    const rl_q8a *a[XC];
    __m512 acc[XC];
    const __m512i rows2 = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i m4 = _mm512_set1_epi8(0xF), zero = _mm512_setzero_si512();
    RL_UNROLL
    for (int c = 0; c < C; c++) {
        a[c] = m->xq + (s + (size_t)c) * nb;
        acc[c] = _mm512_setzero_ps();
    }
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = wg + b * gbs;
        __m512i dot[XC];
        RL_UNROLL
        for (int c = 0; c < C; c++) dot[c] = zero;
        if (q4) {
            RL_UNROLL
            for (int p = 0; p < 2; p++) {
                __m512i raw = _mm512_permutexvar_epi32(rows2, _mm512_loadu_si512(blk + 16 + 64 * p));
                __m512i lo = _mm512_and_si512(raw, m4), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
                RL_UNROLL
                for (int c = 0; c < C; c++) {
                    dot[c] = dp(dot[c], lo, bc8(a[c][b].qs + 8 * p));
                    dot[c] = dp(dot[c], hi, bc8(a[c][b].qs + 16 + 8 * p));
                }
            }
        } else {
            RL_UNROLL
            for (int p = 0; p < 4; p++) {
                __m512i w = _mm512_permutexvar_epi32(rows2, _mm512_loadu_si512(blk + 16 + 64 * p));
                __m512i wa = _mm512_abs_epi8(w);
                RL_UNROLL
                for (int c = 0; c < C; c++) dot[c] = dp(dot[c], wa, sign_by(bc8(a[c][b].qs + 8 * p), w));
            }
        }
        /* row scales: lane 2r and 2r+1 = row r's (only the even lanes carry a dot below) */
        __m512 dw = _mm512_permutexvar_ps(dup, _mm512_cvtph_ps(_mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)blk))));
        RL_UNROLL
        for (int c = 0; c < C; c++) {
            /* lane 2r = row r's whole integer dot (its two chunk lanes added), odd lanes 0 */
            __m512i d = _mm512_maskz_add_epi32(0x5555, dot[c], _mm512_shuffle_epi32(dot[c], _MM_PERM_CDAB));
            if (q4) d = _mm512_mask_sub_epi32(d, 0x5555, d, _mm512_set1_epi32(a[c][b].sum8));
            __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(a[c][b].d));
            acc[c] = _mm512_fmadd_ps(dw, t, acc[c]);
        }
    }
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    RL_UNROLL
    for (int c = 0; c < C; c++) {
        float *y = m->y + (s + (size_t)c) * m->ys + r;
        __m256 v = _mm512_castps512_ps256(_mm512_permutexvar_ps(even, acc[c]));
        if (m->accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(y));
        _mm256_storeu_ps(y, v);
    }
}

AINLINE void rows_x8(const rl_mm *m, size_t r0, size_t r1, const int f) {
    const int q4 = f == TQ_Q4_0;
    const size_t chunk = rl_x8_chunk(m, XC); /* (the AVX2 kernel's size; not tuned here) */
    for (size_t s0 = 0; s0 < m->S; s0 += chunk) {
        size_t s1 = m->S - s0 < chunk ? m->S : s0 + chunk;
        for (size_t r = r0; r < r1; r += 8) {
            size_t s = s0;
            for (; s + XC <= s1; s += XC) tile_x8(m, r, s, XC, q4);
            switch (s1 - s) {
            case 7: tile_x8(m, r, s, 7, q4); break;
            case 6: tile_x8(m, r, s, 6, q4); break;
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

/* One super-block unpacked, as 4 group pairs (lanes 0-7 group 2i, 8-15 group 2i+1).
 * Q4_K/Q5_K: unsigned values, int scale per group, min term mn[j] = dmin*m[j] subtracted
 * times the activation sum s. Q6_K: signed values (q: their absolute values, sg: the values),
 * one int8 scale per 16 values (4 lanes), no mins. */
typedef struct kblock {
    __m512i q[4];
    __m512i sg[4];
    __m512i sc[4]; /* int32 scale of each lane's 4 values */
    float mn[8];
    float d;
} kblock;

AINLINE void unpack_k(uint32_t type, const uint8_t *b, kblock *kb) {
    if (type == RL_Q6_K) {
        const int8_t *sc = (const int8_t *)(b + 192);
        const __m512i quad = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
        kb->d = ld_h(b + 208);
        RL_UNROLL
        for (size_t i = 0; i < 4; i++) {
            int32_t s4;
            memcpy(&s4, sc + 4 * i, sizeof s4);
            kb->sg[i] = q6k_pair(b, i);
            kb->q[i] = _mm512_abs_epi8(kb->sg[i]);
            kb->sc[i] = _mm512_permutexvar_epi32(quad, _mm512_cvtepi8_epi32(_mm_cvtsi32_si128(s4)));
        }
        for (size_t j = 0; j < 8; j++) kb->mn[j] = 0;
        return;
    }
    float dmin = ld_h(b + 2);
    const uint8_t *qh = type == RL_Q5_K ? b + 16 : NULL, *qs = type == RL_Q5_K ? b + 48 : b + 16;
    kb->d = ld_h(b);
    RL_UNROLL
    for (size_t i = 0; i < 4; i++) {
        uint8_t s0, m0, s1, m1;
        rl_k4_scale_min(2 * i, b + 4, &s0, &m0);
        rl_k4_scale_min(2 * i + 1, b + 4, &s1, &m1);
        kb->q[i] = qk45_pair(qs, qh, i);
        kb->sc[i] = _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(s0), _mm512_set1_epi32(s1));
        kb->mn[2 * i] = dmin * m0;
        kb->mn[2 * i + 1] = dmin * m1;
    }
}

AINLINE float dot_k(const kblock *kb, const rl_q8a *a, const int signed_q) {
    const __m512i zero = _mm512_setzero_si512();
    __m512 acc = _mm512_setzero_ps();
    float mins = 0;
    RL_UNROLL
    for (size_t i = 0; i < 4; i++) {
        __m512i aq = join(ld256(a[2 * i].qs), ld256(a[2 * i + 1].qs));
        __m512i d = signed_q ? dp(zero, kb->q[i], sign_by(aq, kb->sg[i])) : dp(zero, kb->q[i], aq);
        d = _mm512_mullo_epi32(d, kb->sc[i]); /* exact: |4 * 32 * 127 * 128| < 2^24 */
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), join_ps(kb->d * a[2 * i].d, kb->d * a[2 * i + 1].d), acc);
    }
    RL_UNROLL
    for (size_t j = 0; j < 8; j++) mins += kb->mn[j] * a[j].s;
    return _mm512_reduce_add_ps(acc) - mins;
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
            for (size_t s = 0; s < m->S; s++) put(m, s, r, dot_k(&kb, m->xq + s * nb + 8 * i, type == RL_Q6_K), add);
        }
    }
}

/* ---- activation quantization ------------------------------------------------------------- */

/* Same operations as rl_q8a_quant_row_ref (amax, d = amax/127, id = 127/amax, x*id rounded to
 * nearest even by vcvtps2dq under the default rounding mode, integer sum), so the output is
 * identical. vpmovsdb narrows in lane order and never saturates: |x*id| <= 127. */
void rl_avx512_q8a_quant_row(const float *x, rl_q8a *dst, size_t n) {
    for (size_t i = 0; i < n / RL_QK; i++, x += RL_QK) {
        __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        __m512 mx = _mm512_max_ps(_mm512_max_ps(_mm512_setzero_ps(), _mm512_abs_ps(v0)), _mm512_abs_ps(v1));
        float amax = _mm512_reduce_max_ps(mx);
        float d = amax / 127, id = d != 0 ? 127 / amax : 0;
        __m512 vid = _mm512_set1_ps(id);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
        _mm_storeu_si128((__m128i *)dst[i].qs, _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(dst[i].qs + 16), _mm512_cvtsepi32_epi8(q1));
        int total = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        dst[i].d = d;
        dst[i].s = d * (float)total;
        dst[i].sum8 = 8 * total;
    }
}

/* ---- dispatch ------------------------------------------------------------------------------ */

#define MM_RQ_X8 1
#include "mm_dispatch.h"

void rl_avx512_mm_rows(const rl_mm *m, size_t r0, size_t r1) { mm_rows(m, r0, r1); }

#else
/* ISO C wants at least one declaration in a translation unit */
typedef int rl_mm_avx512_unused;
#endif /* RL_MM_AVX512 */
