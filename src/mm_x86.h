/* 256-bit unpacking of the 32-value block formats, shared by the AVX2 kernels (mm.c) and the
 * AVX-512 ones (mm_avx512.c, whose builds include AVX2). Header-only, for those two files. */
#ifndef RL_MM_X86_H
#define RL_MM_X86_H

#if defined(__AVX2__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "mm_tq.h"
#include "quant.h"

/* An empty asm that claims to modify v: GCC can no longer reassociate a chain of integer adds
 * through it. Without it, GCC turns the x8 tiles' per-column add chains into chains evaluated last,
 * which keeps every maddubs result live at once and spills them (1.5x slower at S=64). */
#define RL_KEEP(v)                 \
    do {                           \
        __m256i keep_ = (v);       \
        __asm__("" : "+x"(keep_)); \
        (v) = keep_;               \
    } while (0)

/* 4 activation bytes broadcast to all 8 dword lanes (one per interleaved row). */
static inline __attribute__((always_inline)) __m256i bc4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* The 256-bit x8 tiles' (8 interleaved rows from r, C columns from s) two ends: column c's
 * activations (na blocks a column) and a zero accumulator; then each column's 8 sums stored at
 * its y rows r..r+7 (added to them with accumulate). */
static inline __attribute__((always_inline)) void x8_begin(const rl_mm *m, size_t s, const int C, size_t na,
                                                           const rl_q8a **a, __m256 *acc) {
    _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) {
        a[c] = m->xq + (s + (size_t)c) * na;
        acc[c] = _mm256_setzero_ps();
    }
}
static inline __attribute__((always_inline)) void x8_store(const rl_mm *m, size_t r, size_t s, const int C,
                                                           const __m256 *acc) {
    _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) {
        float *y = m->y + (s + (size_t)c) * m->ys + r;
        __m256 v = acc[c];
        if (m->accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(y));
        _mm256_storeu_ps(y, v);
    }
}

/* A 32-value block loaded into v[0..3], and its amax = max |x_j| as the scalar references take
 * it (fmaxf: a NaN value is skipped, the running max being max_ps's second operand). */
static inline __attribute__((always_inline)) float blk32_amax(const float *x, __m256 v[4]) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        m = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), m);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
}

/* 32 int32 codes (each within int8) stored as 32 bytes in order: the packs work within 128-bit
 * lanes (dwords v0[0-3] v1[0-3] v2[0-3] v3[0-3] v0[4-7] ...), the permute puts them back. */
static inline __attribute__((always_inline)) void st_i8x32(void *dst, const __m256i q[4]) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i *)dst, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* The sum of the 8 lanes, in a fixed order. */
static inline __attribute__((always_inline)) float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 32 four-bit codes of a Q4_0/Q4_1/Q5_0/Q5_1 block as unsigned 0..15: value j < 16 is the low
 * nibble of qs[j], value j + 16 the high nibble of qs[j]. */
static inline __attribute__((always_inline)) __m256i nib_vals(const uint8_t *qs) {
    __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_and_si256(v, _mm256_set1_epi8(0xF));
}

/* Q5_0 / Q5_1 codes 0..31 (qh at b + qh_off, nibbles after it): bit j of the 32-bit qh is value
 * j's fifth bit, so byte j of a register gets qh byte j/8 (one in-lane shuffle of the broadcast
 * word) and tests bit j%8. */
static inline __attribute__((always_inline)) __m256i q5_uvals(const uint8_t *b, size_t qh_off) {
    uint32_t qh;
    memcpy(&qh, b + qh_off, sizeof qh);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i h = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), spread), bit);
    h = _mm256_and_si256(_mm256_cmpeq_epi8(h, bit), _mm256_set1_epi8(16));
    return _mm256_or_si256(nib_vals(b + qh_off + 4), h);
}

/* the unsigned codes of a Q4_0/Q4_1/Q5_0/Q5_1 block (mm_tq.h) */
static inline __attribute__((always_inline)) __m256i tq_uvals(const uint8_t *b, const int f) {
    return tq_q5(f) ? q5_uvals(b, tq_qs_at(f) - 4) : nib_vals(b + tq_qs_at(f));
}

/* len values (len / 32 consecutive FP8 blocks: bf16 d, 32 e4m3 codes) as floats. Code c becomes
 * the fp16 with bits (c & 0x80) << 8 | (c & 0x7f) << 7, which is e4m3(c) * 2^-8 exactly
 * (subnormals included: the exponent biases differ by 8); * 256 then * d is the reference's
 * d * e4m3(c), bit for bit. The AVX2 and AVX-512 dequantisers both use it. */
static inline __attribute__((always_inline)) void fp8_run(const uint8_t *b, float *dst, size_t len) {
    for (size_t i = 0; i < len / 32; i++, b += 34, dst += 32) {
        const __m256 d = _mm256_castsi256_ps(_mm256_set1_epi32((int)((uint32_t)(b[0] | (b[1] << 8)) << 16)));
        for (size_t k = 0; k < 4; k++) {
            __m128i c = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(b + 2 + 8 * k)));
            __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(c, _mm_set1_epi16(0x80)), 8),
                                     _mm_slli_epi16(_mm_and_si128(c, _mm_set1_epi16(0x7f)), 7));
            _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(d, _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f))));
        }
    }
}

#endif
#endif
