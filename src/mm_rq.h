/* The AVX2 fast path of rawloop's code types RQ2 and RQ4 (64-value blocks with (d, m)): row-major
 * (rows_rq) and the row-interleaved form (rows_rq_x8), shared by mm.c's AVX2 build and
 * mm_avx512.c (whose builds include AVX2; 512-bit lanes would only halve the 32-value halves). Included inside those files after their AINLINE, RL_UNROLL, ld_h and
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

/* RQ2 and RQ4 (four): per 32-value half the float step is d*da*dot plus m*s, as in the
 * reference. RQ4's halves are Q4_0's nibble order, so its activations go in as they are. Codes
 * are 0..3 or 0..15, so the maddubs pair sums (at most 2*15*128) cannot saturate.
 * A column's sums go into four accumulators for the whole row (block parity x half; the min
 * terms likewise) and are added and stored once per row: one dependent chain per row, summed
 * and stored every 8 blocks, had bounded decoding (docs/PERF.md, RQ4 on the CPU). rq_half is
 * every term, rq_put the end of every row, in both loops below, so a column's bits do not
 * depend on how many columns a call has: a batch gives decoding's bits. */
/* Block blk's codes as two registers of 32 (one per half) and its (d, m). */
AINLINE void rq_unpack(const uint8_t *blk, size_t bs, bool four, __m256i c[2], float *d, float *mn) {
    if (four) {
        c[0] = nib_vals(blk);
        c[1] = nib_vals(blk + 16);
    } else {
        rq2_codes(blk, c);
    }
    *d = ld_h(blk + bs - 4);
    *mn = ld_h(blk + bs - 2);
}
AINLINE void rq_half(__m256i c, const rl_q8a *ah, float d, float mn, bool four, __m256 *v, float *u) {
    const __m256i x = four ? _mm256_loadu_si256((const __m256i *)ah->qs) : rq2_act(ah);
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(c, x), _mm256_set1_epi16(1));
    *v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * ah->d), *v);
    *u += mn * ah->s;
}
AINLINE void rq_put(const rl_mm *m, size_t s, size_t r, const __m256 *v, const float *u) {
    const __m256 t = _mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3]));
    put(m, s, r, hsum(t) + ((u[0] + u[1]) + (u[2] + u[3])), m->accumulate);
}

/* Decoding (one column): a block's codes are used once, so they go straight into the sums. */
AINLINE void rows_rq1(const rl_mm *m, size_t r0, size_t r1, const bool four) {
    const size_t nb = m->n / RL_QK_RQ2, bs = four ? 36 : 20;
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)m->w + r * m->row_bytes;
        __m256 v[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        float u[4] = {0, 0, 0, 0};
        for (size_t b = 0; b < nb; b++) {
            __m256i c[2];
            float d, mn;
            rq_unpack(w + b * bs, bs, four, c, &d, &mn);
            const size_t j = 2 * (b & 1);
            rq_half(c[0], &m->xq[2 * b], d, mn, four, &v[j], &u[j]);
            rq_half(c[1], &m->xq[2 * b + 1], d, mn, four, &v[j + 1], &u[j + 1]);
        }
        rq_put(m, 0, r, v, u);
    }
}

/* A batch: per row, up to RQ2_CH blocks unpacked once, then dotted against every column (up to
 * RQ2_COLS at a time), whose accumulators wait in memory between chunks. */
#define RQ2_CH 8
#define RQ2_COLS 16
AINLINE void rows_rq(const rl_mm *m, size_t r0, size_t r1, const bool four) {
    if (m->S == 1) {
        rows_rq1(m, r0, r1, four);
        return;
    }
    const size_t nb = m->n / RL_QK_RQ2, na = m->n / RL_QK, bs = four ? 36 : 20;
    __m256i c[RQ2_CH][2];
    float d[RQ2_CH], mn[RQ2_CH];
    __m256 acc[RQ2_COLS][4];
    float mins[RQ2_COLS][4];
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)m->w + r * m->row_bytes;
        for (size_t s0 = 0; s0 < m->S; s0 += RQ2_COLS) {
            const size_t ns = m->S - s0 < RQ2_COLS ? m->S - s0 : RQ2_COLS;
            for (size_t s = 0; s < ns; s++)
                for (size_t k = 0; k < 4; k++) {
                    acc[s][k] = _mm256_setzero_ps();
                    mins[s][k] = 0;
                }
            for (size_t b0 = 0; b0 < nb; b0 += RQ2_CH) {
                const size_t nc = nb - b0 < RQ2_CH ? nb - b0 : RQ2_CH;
                for (size_t k = 0; k < nc; k++) rq_unpack(w + (b0 + k) * bs, bs, four, c[k], &d[k], &mn[k]);
                for (size_t s = 0; s < ns; s++) {
                    const rl_q8a *a = m->xq + (s0 + s) * na + 2 * b0;
                    for (size_t k = 0; k < nc; k++) { /* b0 is even: block b0 + k's parity is k's */
                        const size_t j = 2 * (k & 1);
                        rq_half(c[k][0], &a[2 * k], d[k], mn[k], four, &acc[s][j], &mins[s][j]);
                        rq_half(c[k][1], &a[2 * k + 1], d[k], mn[k], four, &acc[s][j + 1], &mins[s][j + 1]);
                    }
                }
            }
            for (size_t s = 0; s < ns; s++) rq_put(m, s0 + s, r, acc[s], mins[s]);
        }
    }
}

/* Packed RQ2 / RQ4 (rl_pack_rows): group block b of 8 rows is 8 x bs bytes: the 8 rows' d
 * (fp16), their m, then the codes in chunks of 32 bytes (4 bytes of each row), chunk k holding
 * code bytes 4k..4k+3 of the block: Q4_0's x8 layout with two factors. RQ4 (four): 8 chunks,
 * half h in chunks 4h..4h+3 in Q4_0's nibble order (low nibbles values 4k.., high 16 + 4k..).
 * RQ2: 4 chunks, half h in chunks 2h + q (q = 0, 1); byte i of a row's 4 in chunk 2h + q
 * holds weights 16q + 4i + j of the half at bits 2j, so a shift by 2j and a mask give one code
 * of each byte, and the activations go in transposed (rq2_act: dword j of lane q holds
 * qs[16q + j + 4i], i = 0..3), from a copy per column and half. Per half, 8 maddubs per column give the 8 rows'
 * integer dots as one int32 vector (lane = row; pair sums of at most 2*15*127, 8 of them per
 * int16 lane), then acc += d * (dot * da) and acc += m * s, as rows_rq's per-half step but for
 * 8 rows at once. A column's sums do not depend on C, so a batch gives decoding's bits.
 * Columns go in L2-sized chunks as rows_x8's do (rl_x8_chunk). */
#define RQ_XC 4
AINLINE void tile_rq_x8(const rl_mm *m, size_t r, size_t s, const int C, const bool four) {
    const size_t nb = m->n / RL_QK_RQ4, na = m->n / RL_QK, gbs = RL_PACK_ROWS * (four ? 36 : 20);
    const uint8_t *wg = (const uint8_t *)m->w + r * m->row_bytes;
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
    const rl_q8a *a[RQ_XC];
    __m256 acc[RQ_XC];
    _Alignas(32) int8_t tq[RQ_XC][32]; /* RQ2: a column's half, transposed */
    x8_begin(m, s, C, na, a, acc);
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = wg + b * gbs;
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16)));
        for (size_t h = 0; h < 2; h++) {
            __m256i sum[RQ_XC];
            if (!four)
                RL_UNROLL
                for (int c = 0; c < C; c++) _mm256_store_si256((__m256i *)tq[c], rq2_act(&a[c][2 * b + h]));
            RL_UNROLL
            for (int k = 0; k < 4; k++) { /* two code registers and their activations' offsets */
                __m256i w0, w1;
                int o0, o1;
                if (four) {
                    const __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + 32 + 128 * h + 32 * k));
                    w0 = _mm256_and_si256(raw, m4);
                    w1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                    o0 = 4 * k;
                    o1 = 16 + 4 * k;
                } else { /* chunk 2h + k / 2, codes j = 2 (k % 2) and j + 1 */
                    const __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + 32 + 64 * h + 32 * (k / 2)));
                    const int j = 2 * (k % 2);
                    w0 = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m3);
                    w1 = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j + 2), m3);
                    o0 = 16 * (k / 2) + 4 * j;
                    o1 = o0 + 4;
                }
                RL_UNROLL
                for (int c = 0; c < C; c++) {
                    const int8_t *q = four ? a[c][2 * b + h].qs : tq[c];
                    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(w0, bc4(q + o0)),
                                                       _mm256_maddubs_epi16(w1, bc4(q + o1)));
                    sum[c] = k ? _mm256_add_epi16(sum[c], p) : p;
                    RL_KEEP(sum[c]);
                }
            }
            RL_UNROLL
            for (int c = 0; c < C; c++) {
                const rl_q8a *ah = &a[c][2 * b + h];
                const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(sum[c], ones)), _mm256_set1_ps(ah->d));
                acc[c] = _mm256_fmadd_ps(dm, _mm256_set1_ps(ah->s), _mm256_fmadd_ps(dw, t, acc[c]));
            }
        }
    }
    x8_store(m, r, s, C, acc);
}

AINLINE void rows_rq_x8(const rl_mm *m, size_t r0, size_t r1, const bool four) {
    const size_t chunk = rl_x8_chunk(m, RQ_XC);
    for (size_t s0 = 0; s0 < m->S; s0 += chunk) {
        const size_t s1 = m->S - s0 < chunk ? m->S : s0 + chunk;
        for (size_t r = r0; r < r1; r += RL_PACK_ROWS) {
            size_t s = s0;
            for (; s + RQ_XC <= s1; s += RQ_XC) tile_rq_x8(m, r, s, RQ_XC, four);
            switch (s1 - s) {
            case 3: tile_rq_x8(m, r, s, 3, four); break;
            case 2: tile_rq_x8(m, r, s, 2, four); break;
            case 1: tile_rq_x8(m, r, s, 1, four); break;
            default: break;
            }
        }
    }
}

#endif
