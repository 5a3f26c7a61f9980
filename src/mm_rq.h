/* The AVX2 fast path of rawloop's code types RQ2 and RQ4 (64-value blocks with (d, m)), shared by
 * mm.c's AVX2 build and mm_avx512.c (whose builds include AVX2; 512-bit lanes would only halve
 * the 32-value halves). Included inside those files after their AINLINE, RL_UNROLL, ld_h and
 * put, which it uses; not a header for anything else. */
#ifndef RL_MM_RQ_H
#define RL_MM_RQ_H

#include "mm_x86.h"
#include "quant.h"

/* The 64 codes of an RQ2 block as two registers of 32 (one per activation block). Within each
 * 128-bit lane the order is transposed: byte 4k + i of lane L holds weight 16L + 4i + k, which
 * takes one dword broadcast, one variable shift and one mask (code k of a byte sits at bits
 * 2k). The activations get the same order from rq2_act; the integer dot is unchanged. */
AINLINE void rq2_codes(const uint8_t *q, __m256i c[2]) {
    const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6), m3 = _mm256_set1_epi8(3);
    __m256i raw = _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)q));
    c[0] = _mm256_and_si256(_mm256_srlv_epi32(_mm256_permutevar8x32_epi32(raw, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1)), sh), m3);
    c[1] = _mm256_and_si256(_mm256_srlv_epi32(_mm256_permutevar8x32_epi32(raw, _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3)), sh), m3);
}

/* 32 activations in rq2_codes' order: byte 4k + i of a lane <- byte 4i + k. */
AINLINE __m256i rq2_act(const rl_q8a *a) {
    const __m256i t = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                       0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)a->qs), t);
}

/* RQ2 and RQ4 (four): per row, up to RQ2_CH blocks unpacked once, then dotted against every
 * column; per 32-value half the float step is d*da*dot plus m*s, as in the reference. RQ4's
 * halves are Q4_0's nibble order, so its activations go in as they are. Codes are 0..3 or
 * 0..15, so the maddubs pair sums (at most 2*15*128) cannot saturate. */
#define RQ2_CH 8
AINLINE void rows_rq(const rl_mm *m, size_t r0, size_t r1, const bool four) {
    const size_t nb = m->n / RL_QK_RQ2, na = m->n / RL_QK, bs = four ? 36 : 20;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i c[RQ2_CH][2];
    float d[RQ2_CH], mn[RQ2_CH];
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)m->w + r * m->row_bytes;
        for (size_t b0 = 0; b0 < nb; b0 += RQ2_CH) {
            size_t nc = nb - b0 < RQ2_CH ? nb - b0 : RQ2_CH;
            for (size_t k = 0; k < nc; k++) {
                const uint8_t *blk = w + (b0 + k) * bs;
                if (four) {
                    c[k][0] = nib_vals(blk);
                    c[k][1] = nib_vals(blk + 16);
                } else {
                    rq2_codes(blk, c[k]);
                }
                d[k] = ld_h(blk + bs - 4);
                mn[k] = ld_h(blk + bs - 2);
            }
            bool add = b0 > 0 || m->accumulate;
            for (size_t s = 0; s < m->S; s++) {
                const rl_q8a *a = m->xq + s * na + 2 * b0;
                __m256 acc = _mm256_setzero_ps();
                float mins = 0;
                for (size_t k = 0; k < nc; k++) {
                    RL_UNROLL
                    for (size_t h = 0; h < 2; h++) {
                        const __m256i x = four ? _mm256_loadu_si256((const __m256i *)a[2 * k + h].qs) : rq2_act(&a[2 * k + h]);
                        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(c[k][h], x), ones);
                        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d[k] * a[2 * k + h].d), acc);
                        mins += mn[k] * a[2 * k + h].s;
                    }
                }
                put(m, s, r, hsum(acc) + mins, add);
            }
        }
    }
}

#endif
