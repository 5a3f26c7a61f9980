/* Scalar weight formats: fp16/bf16 conversion, reference dequantization and quantization, the
 * activation quantizer of the fast path, and the scalar matmul every SIMD kernel is tested
 * against. Block layouts follow ggml-common.h; the dequantizers keep ggml's operation order
 * (scale products first, then one multiply per element) so results match the gguf Python
 * package bit for bit. This file is compiled with -std=c11, which keeps GCC from contracting
 * a*b-c into an FMA (that would change the low bits against the oracle). */
#include "quant.h"

#include <math.h>
#include <string.h>

/* ---- fp16 / bf16 ---------------------------------------------------------------------- */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float rl_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in fp32 */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t rl_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) {
        /* NaN stays NaN (quiet bit set, top payload kept, as F16C does); Inf stays Inf */
        if (x > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((x >> 13) & 0x3ff));
        return (uint16_t)(sign | 0x7c00);
    }
    /* 65520 and up round (to even) past the largest half, 65504 */
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
    if (x < 0x38800000u) {
        /* Result is subnormal: adding 0.5 puts the value at the fp32 exponent whose ulp is
         * 2^-24, the half subnormal step, so the FPU performs the round-to-nearest-even. */
        float v = bits_f32(x) + 0.5f;
        return (uint16_t)(sign | (f32_bits(v) - 0x3f000000u));
    }
    /* Rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even; a
     * mantissa carry moves into the exponent, which is the right result. */
    uint32_t odd = (x >> 13) & 1;
    x += 0xc8000fffu + odd;
    return (uint16_t)(sign | (x >> 13));
}

float rl_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t rl_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    /* as ggml: NaNs become quiet NaNs, everything else rounds to nearest even */
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

/* ---- block layouts (ggml-common.h) ---------------------------------------------------- */

/* The blocks are read byte-wise through these offsets rather than through structs, so no
 * alignment is assumed (Q8_0 blocks are 34 bytes, rows start anywhere). */
static inline float ld_f16(const uint8_t *p) {
    return rl_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

static inline void st_f16(uint8_t *p, float f) {
    uint16_t h = rl_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* Q4_K: [0,2) d  [2,4) dmin  [4,16) scales  [16,144) qs */
static void deq_q4_k(const uint8_t *b, float *y) {
    float d = ld_f16(b), dmin = ld_f16(b + 2);
    const uint8_t *sc = b + 4, *q = b + 16;
    for (size_t j = 0, is = 0; j < RL_QK_K; j += 64, is += 2) {
        uint8_t s, m;
        rl_k4_scale_min(is, sc, &s, &m);
        float d1 = d * s, m1 = dmin * m;
        rl_k4_scale_min(is + 1, sc, &s, &m);
        float d2 = d * s, m2 = dmin * m;
        for (size_t l = 0; l < 32; l++) y[j + l] = d1 * (q[l] & 0xF) - m1;
        for (size_t l = 0; l < 32; l++) y[j + 32 + l] = d2 * (q[l] >> 4) - m2;
        q += 32;
    }
}

/* Q5_K: [0,2) d  [2,4) dmin  [4,16) scales  [16,48) qh  [48,176) qs; bit k of qh[l] is the
 * fifth bit of element l of sub-block k. */
static void deq_q5_k(const uint8_t *b, float *y) {
    float d = ld_f16(b), dmin = ld_f16(b + 2);
    const uint8_t *sc = b + 4, *qh = b + 16, *q = b + 48;
    for (size_t j = 0, is = 0; j < RL_QK_K; j += 64, is += 2) {
        uint8_t s, m;
        rl_k4_scale_min(is, sc, &s, &m);
        float d1 = d * s, m1 = dmin * m;
        rl_k4_scale_min(is + 1, sc, &s, &m);
        float d2 = d * s, m2 = dmin * m;
        for (size_t l = 0; l < 32; l++)
            y[j + l] = d1 * ((q[l] & 0xF) + (((qh[l] >> is) & 1) << 4)) - m1;
        for (size_t l = 0; l < 32; l++)
            y[j + 32 + l] = d2 * ((q[l] >> 4) + (((qh[l] >> (is + 1)) & 1) << 4)) - m2;
        q += 32;
    }
}

/* Q6_K: [0,128) ql  [128,192) qh  [192,208) int8 scales  [208,210) d */
static void deq_q6_k(const uint8_t *b, float *y) {
    float d = ld_f16(b + 208);
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    for (size_t n = 0; n < RL_QK_K; n += 128) {
        for (size_t l = 0; l < 32; l++) {
            size_t is = l / 16;
            int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[n + l] = d * sc[is] * q1;
            y[n + l + 32] = d * sc[is + 2] * q2;
            y[n + l + 64] = d * sc[is + 4] * q3;
            y[n + l + 96] = d * sc[is + 6] * q4;
        }
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

/* Q5_0: [0,2) d  [2,6) qh  [6,22) qs.  Q5_1: [0,2) d  [2,4) m  [4,8) qh  [8,24) qs.
 * Value j (0..31) is the low nibble of qs[j] (j < 16) or the high nibble of qs[j-16], plus bit j
 * of the little-endian uint32 qh as its fifth bit: q in 0..31. Q5_0 decodes d*(q-16), Q5_1
 * d*q + m. */
static inline size_t q5_qh_off(uint32_t type) {
    return type == RL_Q5_1 ? 4 : 2;
}

static inline int q5_code(const uint8_t *b, size_t qh_off, size_t j) {
    const uint8_t *qs = b + qh_off + 4;
    int lo = j < RL_QK / 2 ? qs[j] & 0xF : qs[j - RL_QK / 2] >> 4;
    return lo | (((b[qh_off + j / 8] >> (j % 8)) & 1) << 4);
}

/* RQ2: [0,16) codes (weight j: byte j/4, bits 2*(j%4))  [16,18) d  [18,20) m */
static inline int rq2_code(const uint8_t *b, size_t j) {
    return (b[j / 4] >> (2 * (j % 4))) & 3;
}

static void deq_rq2(const uint8_t *b, float *y) {
    float d = ld_f16(b + 16), m = ld_f16(b + 18);
    for (size_t j = 0; j < RL_QK_RQ2; j++) y[j] = d * (float)rq2_code(b, j) + m;
}

/* RQ4: [0,32) codes (half h = j/32: byte 16h + j%16, low nibble for j%32 < 16, else high: Q4_0's
 * order per half)  [32,34) d  [34,36) m */
static inline int rq4_code(const uint8_t *b, size_t j) {
    const uint8_t c = b[16 * (j / 32) + j % 16];
    return j % 32 < 16 ? c & 0xF : c >> 4;
}

static void deq_rq4(const uint8_t *b, float *y) {
    float d = ld_f16(b + 32), m = ld_f16(b + 34);
    for (size_t j = 0; j < RL_QK_RQ4; j++) y[j] = d * (float)rq4_code(b, j) + m;
}

/* The table decoder: byte -> its 4 codes as 4 bytes, lowest code in the lowest byte, so one
 * 32-bit load gives a dp4a/maddubs operand in weight order. Built by the preprocessor so it is
 * a constant the GPU side can copy as is; tests/unit/test_quant.c checks it against rq2_code. */
#define RQ2_C4(b) ((uint32_t)((b) & 3) | (uint32_t)(((b) >> 2) & 3) << 8 | \
                   (uint32_t)(((b) >> 4) & 3) << 16 | (uint32_t)(((b) >> 6) & 3) << 24)
#define RQ2_L4(b) RQ2_C4(b), RQ2_C4((b) + 1), RQ2_C4((b) + 2), RQ2_C4((b) + 3)
#define RQ2_L16(b) RQ2_L4(b), RQ2_L4((b) + 4), RQ2_L4((b) + 8), RQ2_L4((b) + 12)
#define RQ2_L64(b) RQ2_L16(b), RQ2_L16((b) + 16), RQ2_L16((b) + 32), RQ2_L16((b) + 48)
static const uint32_t k_rq2_lut[256] = {RQ2_L64(0), RQ2_L64(64), RQ2_L64(128), RQ2_L64(192)};
const uint32_t *const rl_rq2_lut = k_rq2_lut;

/* FP8: [0,2) d (bf16)  [2,34) e4m3 codes, weight j in byte 2 + j; value d * e4m3(code).
 * e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal (m/8 * 2^-6).
 * 0x7f / 0xff are invalid (never written; docs/FORMATS.md, section FP8): this reads the value
 * their bits spell, +-480. */
/* The 256 values at compile time: (8 + m) * 2^e / 1024 for exponent e > 0, m / 512 for e = 0,
 * exact in float. A table rather than ldexpf per weight: the Hugging Face FP8 reader decodes
 * every weight of a checkpoint through it (8e9 for an 8B model). */
#define E4M3_MAG(c) ((c) >> 3 & 15 ? (float)((8 + ((c) & 7)) << ((c) >> 3 & 15)) / 1024.0f \
                                   : (float)((c) & 7) / 512.0f)
#define E4M3(c) ((c) & 0x80 ? -E4M3_MAG((c) & 0x7f) : E4M3_MAG(c))
#define E4M3_4(c) E4M3(c), E4M3((c) + 1), E4M3((c) + 2), E4M3((c) + 3)
#define E4M3_16(c) E4M3_4(c), E4M3_4((c) + 4), E4M3_4((c) + 8), E4M3_4((c) + 12)
#define E4M3_64(c) E4M3_16(c), E4M3_16((c) + 16), E4M3_16((c) + 32), E4M3_16((c) + 48)
const float rl_e4m3_f32[256] = {E4M3_64(0), E4M3_64(64), E4M3_64(128), E4M3_64(192)};

float rl_e4m3_to_f32(uint8_t c) { return rl_e4m3_f32[c]; }

/* The code nearest to v (ties to even), saturating at +-448 (0x7e / 0xfe, the largest finite
 * e4m3 value), so it never returns the invalid 0x7f / 0xff; a NaN gives +-448 too. */
static uint8_t e4m3_rne(float v) {
    uint8_t sign = signbit(v) ? 0x80 : 0;
    float a = fabsf(v);
    if (a < 0x1p-6f) /* subnormal: steps of 2^-9; 8 steps is code 8, the smallest normal */
        return sign | (uint8_t)nearbyintf(a * 0x1p9f);
    if (!(a < 448.0f)) return sign | 0x7e; /* 448 .. 464 round to it too: 480 is not a value */
    int k;
    frexpf(a, &k); /* a = f * 2^k, f in [0.5, 1): exponent k - 1 */
    int q = (int)nearbyintf(ldexpf(a, 4 - k)); /* mantissa in steps of 1/8: 8 .. 16 */
    /* q == 16 carries into the next exponent, which the code's layout does by itself */
    return sign | (uint8_t)((k + 5) * 8 + q);
}

static void deq_fp8(const uint8_t *b, float *y) {
    float d = rl_bf16_to_f32((uint16_t)(b[0] | (b[1] << 8)));
    for (size_t j = 0; j < RL_QK; j++) y[j] = d * rl_e4m3_to_f32(b[2 + j]);
}

void rl_dequant_row(uint32_t type, const void *src, float *dst, size_t n) {
    const uint8_t *b = src;
    switch (type) {
    case RL_F32:
        memcpy(dst, src, n * sizeof(float));
        return;
    case RL_F16:
        for (size_t i = 0; i < n; i++) dst[i] = ld_f16(b + 2 * i);
        return;
    case RL_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = rl_bf16_to_f32((uint16_t)(b[2 * i] | (b[2 * i + 1] << 8)));
        return;
    case RL_Q8_0:
        for (size_t i = 0; i < n / RL_QK; i++, b += 34) {
            float d = ld_f16(b);
            for (size_t j = 0; j < RL_QK; j++) dst[i * RL_QK + j] = d * (int8_t)b[2 + j];
        }
        return;
    case RL_Q4_0:
        for (size_t i = 0; i < n / RL_QK; i++, b += 18) {
            float d = ld_f16(b);
            float *y = dst + i * RL_QK;
            for (size_t j = 0; j < RL_QK / 2; j++) {
                y[j] = d * ((b[2 + j] & 0xF) - 8);
                y[j + RL_QK / 2] = d * ((b[2 + j] >> 4) - 8);
            }
        }
        return;
    case RL_Q4_1: /* [0,2) d  [2,4) m  [4,20) qs as Q4_0's; value d*q + m */
        for (size_t i = 0; i < n / RL_QK; i++, b += 20) {
            float d = ld_f16(b), m = ld_f16(b + 2);
            float *y = dst + i * RL_QK;
            for (size_t j = 0; j < RL_QK / 2; j++) {
                y[j] = d * (float)(b[4 + j] & 0xF) + m;
                y[j + RL_QK / 2] = d * (float)(b[4 + j] >> 4) + m;
            }
        }
        return;
    case RL_Q5_0:
        for (size_t i = 0; i < n / RL_QK; i++, b += 22) {
            float d = ld_f16(b);
            for (size_t j = 0; j < RL_QK; j++) dst[i * RL_QK + j] = d * (float)(q5_code(b, 2, j) - 16);
        }
        return;
    case RL_Q5_1:
        for (size_t i = 0; i < n / RL_QK; i++, b += 24) {
            float d = ld_f16(b), m = ld_f16(b + 2);
            for (size_t j = 0; j < RL_QK; j++) dst[i * RL_QK + j] = d * (float)q5_code(b, 4, j) + m;
        }
        return;
    case RL_Q4_K:
        for (size_t i = 0; i < n / RL_QK_K; i++) deq_q4_k(b + i * 144, dst + i * RL_QK_K);
        return;
    case RL_Q5_K:
        for (size_t i = 0; i < n / RL_QK_K; i++) deq_q5_k(b + i * 176, dst + i * RL_QK_K);
        return;
    case RL_Q6_K:
        for (size_t i = 0; i < n / RL_QK_K; i++) deq_q6_k(b + i * 210, dst + i * RL_QK_K);
        return;
    case RL_RQ2:
        for (size_t i = 0; i < n / RL_QK_RQ2; i++) deq_rq2(b + i * 20, dst + i * RL_QK_RQ2);
        return;
    case RL_RQ4:
        for (size_t i = 0; i < n / RL_QK_RQ4; i++) deq_rq4(b + i * 36, dst + i * RL_QK_RQ4);
        return;
    case RL_FP8:
        for (size_t i = 0; i < n / RL_QK; i++) deq_fp8(b + i * 34, dst + i * RL_QK);
        return;
    default:
        /* not computable: callers check rl_type_computable first; leave a visible result */
        for (size_t i = 0; i < n; i++) dst[i] = NAN;
        return;
    }
}

/* ---- quantization --------------------------------------------------------------------- */

static void quant_q8_0(const float *x, uint8_t *b) {
    float amax = 0;
    for (size_t j = 0; j < RL_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float id = rl_q8_0_scale(amax, b);
    for (size_t j = 0; j < RL_QK; j++) b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

/* FP8: d = amax / 448 rounded to bf16 (bf16, not fp16: a block of small weights would
 * underflow an fp16 d), then each code is the e4m3 value nearest to x / d, saturated at +-448
 * by e4m3_rne (a subnormal d can be far below amax / 448). */
static void quant_fp8(const float *x, uint8_t *b) {
    float amax = 0;
    for (size_t j = 0; j < RL_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    uint16_t h = rl_f32_to_bf16(amax / 448);
    float d = rl_bf16_to_f32(h);
    b[0] = (uint8_t)h;
    b[1] = (uint8_t)(h >> 8);
    for (size_t j = 0; j < RL_QK; j++) b[2 + j] = d != 0 ? e4m3_rne(x[j] / d) : 0;
}

/* Writes the 32 codes q (0..15, or 0..31 for Q5) of a Q4_0 / Q4_1 / Q5_0 / Q5_1 block after its
 * fp16 header (d, and m for the _1 types): value j in the low nibble of qs[j] (j < 16) or the
 * high nibble of qs[j - 16]; for Q5, its fifth bit is bit j of the little-endian qh. */
static void put_codes32(uint32_t type, const uint8_t *q, uint8_t *b) {
    bool q5 = type == RL_Q5_0 || type == RL_Q5_1;
    size_t hdr = type == RL_Q4_1 || type == RL_Q5_1 ? 4 : 2;
    uint8_t *qs = b + hdr + (q5 ? 4 : 0);
    for (size_t j = 0; j < RL_QK / 2; j++) qs[j] = (uint8_t)((q[j] & 0xF) | ((q[j + RL_QK / 2] & 0xF) << 4));
    if (!q5) return;
    uint32_t qh = 0;
    for (size_t j = 0; j < RL_QK; j++) qh |= (uint32_t)(q[j] >> 4) << j;
    for (size_t k = 0; k < 4; k++) b[hdr + k] = (uint8_t)(qh >> (8 * k));
}

static void quant_q4_0(const float *x, uint8_t *b) {
    /* the signed value of largest magnitude (first one on ties) maps to -8 */
    float amax = 0, max = 0;
    for (size_t j = 0; j < RL_QK; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    float d = max / -8;
    float id = d != 0 ? 1.0f / d : 0.0f;
    st_f16(b, d);
    uint8_t q[RL_QK];
    for (size_t j = 0; j < RL_QK; j++) {
        int c = (int)(x[j] * id + 8.5f);
        q[j] = (uint8_t)(c > 15 ? 15 : c);
    }
    put_codes32(RL_Q4_0, q, b);
}

/* The smallest and largest of n values (the first of equal ones: -0.0 and +0.0 keep their
 * order, as in ggml's quantizers). */
static void block_range(const float *x, size_t n, float *lo, float *hi) {
    *lo = *hi = x[0];
    for (size_t j = 1; j < n; j++) {
        *lo = fminf(*lo, x[j]);
        *hi = fmaxf(*hi, x[j]);
    }
}

/* Q4_1 as ggml's reference quantizer (and gguf.quants): d = (max - min) / 15, m = min, codes
 * the truncation of (x - min) * id + 0.5, clamped to 15. */
static void quant_q4_1(const float *x, uint8_t *b) {
    float lo, hi;
    block_range(x, RL_QK, &lo, &hi);
    float d = (hi - lo) / 15;
    float id = d != 0 ? 1.0f / d : 0.0f;
    st_f16(b, d);
    st_f16(b + 2, lo);
    uint8_t q[RL_QK];
    for (size_t j = 0; j < RL_QK; j++) {
        int c = (int)((x[j] - lo) * id + 0.5f);
        q[j] = (uint8_t)(c > 15 ? 15 : c);
    }
    put_codes32(RL_Q4_1, q, b);
}

/* Q5_0 / Q5_1 as ggml's reference quantizers (and gguf.quants): Q5_0 maps the signed value of
 * largest magnitude to -16, Q5_1 spans [min, max] with d = (max - min) / 31; codes are
 * truncations of x*id + 16.5 (resp. (x - min)*id + 0.5), clamped to 31. */
static void quant_q5(uint32_t type, const float *x, uint8_t *b) {
    float d, id, lo = 0, off;
    if (type == RL_Q5_0) {
        float amax = 0, max = 0;
        for (size_t j = 0; j < RL_QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        d = max / -16;
        off = 16.5f;
    } else {
        float hi;
        block_range(x, RL_QK, &lo, &hi);
        d = (hi - lo) / 31;
        off = 0.5f;
        st_f16(b + 2, lo);
    }
    id = d != 0 ? 1.0f / d : 0.0f;
    st_f16(b, d);
    uint8_t q[RL_QK];
    for (size_t j = 0; j < RL_QK; j++) {
        int c = (int)((x[j] - lo) * id + off);
        q[j] = (uint8_t)(c > 31 ? 31 : c);
    }
    put_codes32(type, q, b);
}

static inline int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* Per-element weight of an error term: 1 without weights (w NULL). Weighted fits minimise
 * sum_j w_j (x_j - deq_j)^2, w being the calibration importances of the row's columns. */
static inline float wt(const float *w, size_t j) {
    return w ? w[j] : 1.0f;
}

/* ---- K-quants: the same blocks as llama.cpp's llama-quantize (without an imatrix) -------
 *
 * The searches below reproduce ggml's reference K-quantizers step for step, so a model
 * quantized here is byte-identical to one quantized by llama-quantize from the same floats
 * (tests/py/test_kquant_llama.py holds llama.cpp's blocks for a set of rows). Identity needs
 * the same float operations in the same order: every sum is accumulated left to right in
 * float, products are grouped as written in the comments, nothing is fused (the build runs
 * without FP contraction; ggml's quantizers live in its baseline-x86-64 base library, which
 * has no FMA to contract into), and rounding goes through kq_round. */

#ifdef __clang__
/* clang contracts a*b + c into an fma by default even in ISO C mode (gcc does not under
 * -std=c11); a fused multiply-add rounds once where ggml rounds twice and changes the bytes */
#pragma STDC FP_CONTRACT OFF
#endif

/* Nearest integer, ties to even, the way ggml rounds in its K-quantizers: adding 1.5 * 2^23
 * leaves the float with a unit of 1 in the last place, so the adder rounds (to nearest even)
 * and the integer sits in the low mantissa bits. For |v| < 2^22 this is lrintf; beyond that it
 * wraps where lrintf would not, and matching llama.cpp there too costs nothing. */
static inline int kq_round(float v) {
    return (int)(f32_bits(v + 12582912.0f) & 0x7fffffu) - 0x400000;
}

/* Asymmetric fit of one 32-value block, x ~ scale * q + lo with q in [0, nmax] and
 * lo <= 0, minimising sum_i e_i (x_i - scale*q_i - lo)^2 for the error weights e. Start: the
 * range [min(x, 0), max(x)] split into nmax steps. Then nsteps + 1 candidate grids, the range
 * split into nmax + r0 + dr k steps (k = 0..nsteps; r0 < 0 widens the steps, clipping the
 * extremes), each with the codes it rounds to and the weighted least-squares (scale, lo) for
 * those codes (lo pinned to 0 when it would come out positive); a candidate replaces the best so
 * far only when its error is strictly smaller. Fills q (the best candidate's codes) and *neg_lo
 * (= -lo, the "min" K-quants store); returns scale (0 for a constant block).
 * This is ggml's make_qkx2_quants (dr = 0.1: the K-quants' sub-blocks) and, given explicit
 * weights, its make_qkx3_quants (dr = 0.05: the imatrix Q4_1 / Q5_1 / Q4_K / Q5_K); the two
 * differ only in their grids and in qkx3's x^2 default weights, which rawloop never uses. */
static float kq_fit_asym(const float *x, const float *e, int nmax, float r0, float dr, int nsteps, uint8_t *q,
                         float *neg_lo) {
    enum { N = 32 };
    float lo = x[0], hi = x[0], sum_e = e[0], sum_ex = e[0] * x[0];
    for (size_t i = 1; i < N; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sum_e += e[i];
        sum_ex += e[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        memset(q, 0, N);
        *neg_lo = -lo;
        return 0;
    }
    float inv = (float)nmax / (hi - lo), scale = 1 / inv, best = 0;
    for (size_t i = 0; i < N; i++) {
        q[i] = (uint8_t)clampi(kq_round(inv * (x[i] - lo)), 0, nmax);
        float r = scale * q[i] + lo - x[i];
        best += e[i] * (r * r);
    }
    uint8_t cand[N];
    for (int k = 0; k <= nsteps; k++) {
        inv = (r0 + dr * (float)k + (float)nmax) / (hi - lo);
        /* sums over codes c: e c, (e c) c, (e c) x, grouped as written */
        float s_c = 0, s_cc = 0, s_cx = 0;
        for (size_t i = 0; i < N; i++) {
            int c = clampi(kq_round(inv * (x[i] - lo)), 0, nmax);
            cand[i] = (uint8_t)c;
            s_c += e[i] * (float)c;
            s_cc += e[i] * (float)c * (float)c;
            s_cx += e[i] * (float)c * x[i];
        }
        float det = sum_e * s_cc - s_c * s_c;
        if (!(det > 0)) continue;
        float cs = (sum_e * s_cx - sum_ex * s_c) / det, clo = (s_cc * sum_ex - s_c * s_cx) / det;
        if (clo > 0) {
            clo = 0;
            cs = s_cx / s_cc;
        }
        float err = 0;
        for (size_t i = 0; i < N; i++) {
            float r = cs * cand[i] + clo - x[i];
            err += e[i] * (r * r);
        }
        if (err < best) {
            memcpy(q, cand, N);
            best = err;
            scale = cs;
            lo = clo;
        }
    }
    *neg_lo = -lo;
    return scale;
}

/* Packs 8 six-bit scales and mins the way rl_k4_scale_min reads them. A value above 63 is not
 * masked: its high bits land in the neighbouring fields as they do in ggml's packing. Only
 * llama.cpp's imatrix Q4_K stores such a value (a negative sub-block scale wraps in uint8 and is
 * not clamped there: quant_k45); every other caller passes values <= 63. */
static void pack_scale_min_k4(const uint8_t *sc, const uint8_t *m, uint8_t *q) {
    for (size_t j = 0; j < 4; j++) {
        q[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

/* The reference K-quantizers' 6-bit sub-block scales (or mins) v[0..8): the grid max(v) / 63,
 * codes rounded to it and clamped to 63 (after the uint8 wrap, ggml's order). Returns the
 * super-scale max(v) / 63. */
static float k45_grid_scales(const float *v, uint8_t *l) {
    float vmax = 0;
    for (size_t j = 0; j < 8; j++)
        if (v[j] > vmax) vmax = v[j];
    float inv = vmax > 0 ? 63.0f / vmax : 0.0f;
    for (size_t j = 0; j < 8; j++) {
        uint8_t c = (uint8_t)kq_round(inv * v[j]);
        l[j] = c < 63 ? c : 63;
    }
    return vmax / 63.0f;
}

/* The imatrix K-quantizers' sub-block scales (or mins) v[0..n): a super-scale d and codes
 * l_j in [0, nmax] minimising sum_j e_j (v_j - d l_j)^2, where e_j is sub-block j's total error
 * weight (a scale that carries many important values must be rounded more carefully). Start:
 * the largest value on nmax, and the grids (nmax + 0.1k) / max, k = -4..4, each scored by
 * its rounding's error; the best grid's codes are then moved one at a time to their
 * least-squares value given the others (at most 5 passes), a move kept when it raises the
 * fit (sum e v l)^2 / sum e l^2. Returns the least-squares d of the final codes. This is ggml's
 * make_qp_quants, in its order of operations; like it, the codes are kept in uint8 throughout,
 * so a negative v (a degenerate sub-block fit) gives a wrapped code and is scored as one. */
static float kq_fit_scales(const float *v, const float *e, size_t n, int nmax, uint8_t *l) {
    float vmax = 0;
    for (size_t j = 0; j < n; j++) vmax = vmax > v[j] ? vmax : v[j];
    if (vmax < 1e-15f) {
        memset(l, 0, n);
        return 0;
    }
    float inv = (float)nmax / vmax, step = 1 / inv, best = 0;
    for (size_t j = 0; j < n; j++) {
        l[j] = (uint8_t)kq_round(inv * v[j]); /* not clamped: v_j <= max rounds to <= nmax */
        float r = v[j] - step * l[j];
        best += e[j] * r * r;
    }
    for (int k = -4; k <= 4; k++) {
        if (k == 0) continue;
        float inv_k = (0.1f * (float)k + (float)nmax) / vmax, step_k = 1 / inv_k, err = 0;
        for (size_t j = 0; j < n; j++) {
            int c = kq_round(inv_k * v[j]);
            float r = v[j] - step_k * (float)(c < nmax ? c : nmax);
            err += e[j] * r * r;
        }
        if (err < best) {
            best = err;
            inv = inv_k;
        }
    }
    float s_vl = 0, s_ll = 0; /* sum e v l, sum e l^2 */
    for (size_t j = 0; j < n; j++) {
        int c = kq_round(inv * v[j]);
        c = c < nmax ? c : nmax;
        l[j] = (uint8_t)c;
        s_vl += e[j] * v[j] * (float)c;
        s_ll += e[j] * (float)c * (float)c;
    }
    for (int pass = 0; pass < 5; pass++) {
        size_t moved = 0;
        for (size_t j = 0; j < n; j++) {
            /* the sums without code j; its least-squares value given the others is v_j / d' */
            float vl = s_vl - e[j] * v[j] * l[j], ll = s_ll - e[j] * l[j] * l[j];
            if (!(vl > 0 && ll > 0)) continue;
            int c = kq_round(v[j] * ll / vl);
            c = c < nmax ? c : nmax;
            if (c == l[j]) continue;
            vl += e[j] * v[j] * (float)c;
            ll += e[j] * (float)c * (float)c;
            if (vl * vl * s_ll > s_vl * s_vl * ll) {
                l[j] = (uint8_t)c;
                s_vl = vl;
                s_ll = ll;
                moved++;
            }
        }
        if (!moved) break;
    }
    return s_ll > 0 ? s_vl / s_ll : 0.0f;
}

/* Step one of Q4_K / Q5_K: the asymmetric fit of each 32-value sub-block (scale[j], min[j] and
 * its codes in q), and sw[j], the sum of its error weights.
 * - Without importances (llama.cpp's reference quantizer, llama-quantize without an imatrix):
 *   error weight rms(sub-block) + |x_l| (large values count more, none is zero), on the grid
 *   nmax - 1 + 0.1k, k = 0..20 (Q4_K) or nmax - 0.5 + 0.1k, k = 0..15 (Q5_K).
 * - With importances w (llama.cpp's imatrix quantizer, quantize_row_q4_K_impl / q5_K_impl):
 *   error weight w_l sqrt(sigma2 + x_l^2), sigma2 twice the super-block's mean square (the
 *   importance times the value's size with a floor, so small values still count; the legacy
 *   types' weight, but from the 256 values), on make_qkx3_quants' finer grid
 *   nmax - 0.9 + 0.05k, k = 0..36. */
static void k45_fit_subblocks(const float *x, const float *w, int qmax, float *scale, float *min, float *sw,
                              uint8_t *q) {
    float sigma2 = 0, e[32];
    if (w) {
        float ss = 0;
        for (size_t l = 0; l < RL_QK_K; l++) ss += x[l] * x[l];
        sigma2 = 2 * ss / (float)RL_QK_K;
    }
    for (size_t j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        if (w) {
            float sum = 0;
            for (size_t l = 0; l < 32; l++) {
                e[l] = w[32 * j + l] * sqrtf(sigma2 + xs[l] * xs[l]);
                sum += e[l];
            }
            sw[j] = sum;
            scale[j] = kq_fit_asym(xs, e, qmax, -0.9f, 0.05f, 36, q + 32 * j, &min[j]);
        } else {
            float ss = 0;
            for (size_t l = 0; l < 32; l++) ss += xs[l] * xs[l];
            float rms = sqrtf(ss / 32);
            for (size_t l = 0; l < 32; l++) e[l] = rms + fabsf(xs[l]);
            sw[j] = 0; /* unused: the reference rounds its sub-block scales unweighted */
            float r0 = qmax == 15 ? -1.0f : -0.5f;
            int nsteps = qmax == 15 ? 20 : 15;
            scale[j] = kq_fit_asym(xs, e, qmax, r0, 0.1f, nsteps, q + 32 * j, &min[j]);
        }
    }
}

/* Q4_K and Q5_K share everything but the number of levels, the search's grid and where the
 * fifth bit goes. Step one fits each sub-block (k45_fit_subblocks); step two rounds the 8
 * scales and the 8 mins to 6 bits under fp16 super-scales d and dmin: on the grid max/63
 * without importances, by kq_fit_scales with them (llama.cpp's imatrix Q4_K leaves a wrapped
 * scale code unclamped, its Q5_K clamps it to 63; only a negative sub-block scale tells them
 * apart). Then the codes are re-derived from the stored (fp16, 6-bit) values, except in a
 * sub-block whose stored scale is 0, which keeps its search codes as llama.cpp does. */
static void quant_k45(const float *x, const float *w, uint8_t *b, int bits) {
    int qmax = (1 << bits) - 1;
    float scale[8], min[8], sw[8], d, dmin;
    uint8_t q[RL_QK_K], sc[8], m[8];
    k45_fit_subblocks(x, w, qmax, scale, min, sw, q);
    if (w) {
        d = kq_fit_scales(scale, sw, 8, 63, sc);
        dmin = kq_fit_scales(min, sw, 8, 63, m);
        for (size_t j = 0; j < 8 && bits == 5; j++) {
            sc[j] = sc[j] < 63 ? sc[j] : 63;
            m[j] = m[j] < 63 ? m[j] : 63;
        }
    } else {
        d = k45_grid_scales(scale, sc);
        dmin = k45_grid_scales(min, m);
    }
    pack_scale_min_k4(sc, m, b + 4);
    /* the stored (fp16) super-scales and 6-bit fields are what the decoder multiplies by */
    st_f16(b, d);
    st_f16(b + 2, dmin);
    float df = ld_f16(b), dminf = ld_f16(b + 2);
    for (size_t j = 0; j < 8; j++) {
        uint8_t s6, m6;
        rl_k4_scale_min(j, b + 4, &s6, &m6);
        float ds = df * s6;
        if (ds == 0) continue;
        float dm = dminf * m6;
        for (size_t l = 0; l < 32; l++) q[32 * j + l] = (uint8_t)clampi(kq_round((x[32 * j + l] + dm) / ds), 0, qmax);
    }
    uint8_t *qh = bits == 5 ? b + 16 : NULL, *qs = bits == 5 ? b + 48 : b + 16;
    if (qh) memset(qh, 0, 32);
    for (size_t j = 0; j < 8; j++) {
        for (size_t l = 0; l < 32; l++) {
            int c = q[32 * j + l];
            /* sub-blocks 2k and 2k+1 share the bytes qs[32k..32k+32): low then high nibble */
            uint8_t *p = qs + 32 * (j / 2) + l;
            if (j % 2 == 0)
                *p = (uint8_t)(c & 0xF);
            else
                *p |= (uint8_t)((c & 0xF) << 4);
            if (qh) qh[l] |= (uint8_t)(((c >> 4) & 1) << j);
        }
    }
}

/* Symmetric scale of n <= 32 values on the grid [-nmax, nmax - 1], minimising
 * sum e (x - s q)^2 with e = w (the imatrix Q4_0 / Q5_0 of quant_legacy_w, the imatrix Q6_K)
 * or, w NULL, e = x^2 (the reference Q6_K: the x^2 weight favours the large values).
 * Candidates: the signed value of largest magnitude mapped to -(nmax + 0.1 k), k = -9..9; each
 * gives codes and the least-squares scale for them, and a candidate wins when it lowers the
 * error (the comparison is on sum(e q x)^2 / sum(e q^2), the error reduction of the
 * least-squares scale, strictly greater).
 * Fills q with codes + nmax (0 for an all-zero block) and returns the scale. This is ggml's
 * make_qx_quants with rmse_type 1. */
static float fit_sym(const float *x, size_t n, int nmax, const float *w, uint8_t *q) {
    float amax = 0, max = 0;
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < 1e-15f) {
        memset(q, 0, n);
        return 0;
    }
    float best = 0, scale = 0;
    for (int k = 0; k <= 18; k++) {
        /* k = 0 is the plain fit (-nmax / max), always taken; then t = -9..-1, 1..9 */
        int t = k == 0 ? 0 : k <= 9 ? k - 10 : k - 9;
        float inv = k == 0 ? (float)-nmax / max : -((float)nmax + 0.1f * (float)t) / max;
        float s_cx = 0, s_cc = 0;
        uint8_t cand[32]; /* codes + nmax */
        for (size_t i = 0; i < n; i++) {
            int c = clampi(kq_round(inv * x[i]), -nmax, nmax - 1);
            float e = w ? w[i] : x[i] * x[i];
            s_cx += e * x[i] * (float)c;
            s_cc += e * (float)c * (float)c;
            cand[i] = (uint8_t)(c + nmax);
        }
        bool take = k == 0 || (s_cc > 0 && s_cx * s_cx > best * s_cc);
        if (!take) continue;
        memcpy(q, cand, n);
        scale = s_cc != 0 ? s_cx / s_cc : 0.0f;
        best = scale * s_cx;
    }
    return scale;
}

/* Q6_K: per 16 values a searched scale (fit_sym); the super-block scale d maps the sub-block
 * scale of largest magnitude to -128. Without importances (w NULL) this is llama.cpp's reference
 * quantizer, whose search weights each value by x^2. With them it is its imatrix quantizer
 * (quantize_row_q6_K_impl), which weights each value by its importance alone: unlike Q4_K and
 * the legacy types, no sqrt(sigma2 + x^2) factor (llama.cpp has it commented out). Everything
 * after the search is the same in both. */
static void quant_q6_k(const float *x, const float *w, uint8_t *b) {
    float scale[16], amax_s = 0, max_s = 0;
    uint8_t q[RL_QK_K];
    for (size_t j = 0; j < 16; j++) {
        scale[j] = fit_sym(x + 16 * j, 16, 32, w ? w + 16 * j : NULL, q + 16 * j);
        if (fabsf(scale[j]) > amax_s) {
            amax_s = fabsf(scale[j]);
            max_s = scale[j];
        }
    }
    memset(b, 0, 210);
    if (amax_s < 1e-15f) return; /* all codes 0, all scales 0, d = +0 */
    float inv = -128.0f / max_s;
    st_f16(b + 208, 1 / inv);
    float d = ld_f16(b + 208);
    int8_t *sc = (int8_t *)(b + 192);
    for (size_t j = 0; j < 16; j++) {
        int s = kq_round(inv * scale[j]);
        sc[j] = (int8_t)(s < 127 ? s : 127);
    }
    /* codes from the stored scales, except where a stored scale is 0: those keep the search's */
    for (size_t j = 0; j < 16; j++) {
        float ds = d * sc[j];
        if (ds == 0) continue;
        for (size_t l = 0; l < 16; l++) q[16 * j + l] = (uint8_t)(clampi(kq_round(x[16 * j + l] / ds), -32, 31) + 32);
    }
    uint8_t *ql = b, *qh = b + 128;
    for (size_t i = 0; i < RL_QK_K; i++) {
        int c = q[i];
        /* element i lives in half h, quarter k (which nibble / qh bit pair), lane l */
        size_t h = i / 128, k = (i % 128) / 32, l = i % 32;
        uint8_t *pl = ql + 64 * h + l + (k % 2) * 32;
        *pl |= (uint8_t)((c & 0xF) << (k / 2 * 4));
        qh[32 * h + l] |= (uint8_t)(((c >> 4) & 3) << (2 * k));
    }
}

/* llama.cpp's imatrix quantizers for Q4_0 / Q4_1 / Q5_0 / Q5_1 (quantize_row_q4_0_impl and
 * its siblings in ggml-quants.c), on a row x[0..n) with column importances w[0..n). The error
 * weight of x_j is w_j * sqrt(sigma2 + x_j^2), sigma2 the row's mean square: the importance
 * times the value's size with a floor, so that small values still count. Q4_0 / Q5_0 search a
 * symmetric scale (fit_sym); Q4_1 / Q5_1 search a step and an offset (kq_fit_asym on
 * make_qkx3_quants' grid: 37 step counts nmax - 0.9 + 0.05 k) and store m = lo. The codes are the
 * search's, not re-derived from the fp16 d and m (llama.cpp keeps them too).
 * Unlike RQ2 (block_w), a block of equal importances does not fall back to the reference
 * quantizer: llama.cpp runs this search whenever it has importances, and the search differs
 * from the reference's min/max fit even with equal ones (the imatrix K-quants likewise). Same
 * float operations, in the same order, as ggml's (docs/FORMATS.md, rule 4 of the recipes, says
 * what was compared). */
static void quant_legacy_w(uint32_t type, const float *x, size_t n, const float *w, uint8_t *b) {
    int levels = type == RL_Q4_0 || type == RL_Q4_1 ? 16 : 32;
    bool asym = type == RL_Q4_1 || type == RL_Q5_1;
    size_t bs = rl_type_get(type)->size;
    float ss = 0;
    for (size_t j = 0; j < n; j++) ss += x[j] * x[j];
    float sigma2 = ss / (float)n;
    for (size_t i = 0; i < n / RL_QK; i++, x += RL_QK, w += RL_QK, b += bs) {
        float e[RL_QK];
        uint8_t q[RL_QK];
        for (size_t j = 0; j < RL_QK; j++) e[j] = w[j] * sqrtf(sigma2 + x[j] * x[j]);
        if (asym) {
            float neg_lo, d = kq_fit_asym(x, e, levels - 1, -0.9f, 0.05f, 36, q, &neg_lo);
            st_f16(b, d);
            st_f16(b + 2, -neg_lo);
        } else { /* codes -levels/2 .. levels/2 - 1, stored + levels/2 */
            st_f16(b, fit_sym(x, RL_QK, levels / 2, e, q));
        }
        put_codes32(type, q, b);
    }
}

#ifdef __clang__
#pragma STDC FP_CONTRACT DEFAULT
#endif

/* The (d, m) fit of rawloop's code types (RQ2: L = 3, RQ4: L = 15; 64-value blocks): the
 * (w-weighted) squared error of x ~ d*q + m with d and m first rounded to fp16 (what the file
 * stores) and the codes q chosen as the nearest level of 0..L (the nearest level minimises
 * every term whatever its weight); fills q. */
_Static_assert(RL_QK_RQ2 == RL_QK_RQ4, "the RQ search takes 64-value blocks");
static float rq_assign(const float *x, const float *w, int L, float d, float m, uint8_t *q) {
    d = rl_f16_to_f32(rl_f32_to_f16(d));
    m = rl_f16_to_f32(rl_f32_to_f16(m));
    float id = d > 0 ? 1.0f / d : 0.0f, e = 0;
    for (size_t j = 0; j < RL_QK_RQ2; j++) {
        q[j] = (uint8_t)clampi((int)lrintf((x[j] - m) * id), 0, L);
        float r = d * (float)q[j] + m - x[j];
        e += w ? w[j] * (r * r) : r * r;
    }
    return e;
}

/* (Weighted) least-squares d, m for fixed codes q (a line through the points (q_j, x_j), point j
 * of weight w_j); false when the slope is undetermined (all codes equal, or no weight). */
static bool rq_refit(const float *x, const float *w, const uint8_t *q, float *d, float *m) {
    double sq = 0, sqq = 0, sx = 0, sqx = 0, n = 0;
    for (size_t j = 0; j < RL_QK_RQ2; j++) {
        double wj = wt(w, j);
        n += wj;
        sq += wj * q[j];
        sqq += wj * q[j] * q[j];
        sx += wj * x[j];
        sqx += wj * q[j] * (double)x[j];
    }
    double det = n * sqq - sq * sq;
    if (det <= 0) return false;
    double dd = (n * sqx - sq * sx) / det;
    if (!(dd > 0)) return false;
    *d = (float)dd;
    *m = (float)((sx - dd * sq) / n);
    return true;
}

/* The search of RQ2 and RQ4 (codes 0..L, 64 values): every candidate step
 * d = range / (L + k * L/6), k = 0..8 (the min/max fit first, then ever stronger clipping of
 * both tails, down to 3/7 of the range), is centred on the block's range, then refined by two
 * rounds of "codes for (d, m), least-squares (d, m) for those codes" (Lloyd iterations for a
 * uniform grid); the fit with the least squared error after fp16 rounding of d and m wins. A
 * constant block stores d = 0, m = the value.
 * With weights w, every fit is scored by the weighted error, and the candidates are walked
 * twice: with weighted refits, and with the unweighted refits of the plain search. So the plain
 * search's winner is among the candidates, and the weighted fit's weighted error is never
 * larger than the plain fit's. Fills the codes bq, *d and *m. */
static void quant_rq(const float *x, const float *w, int L, uint8_t *bq, float *best_d, float *best_m) {
    float lo, hi;
    block_range(x, RL_QK_RQ2, &lo, &hi);
    uint8_t q[RL_QK_RQ2];
    *best_d = 0;
    *best_m = lo;
    float best = rq_assign(x, w, L, 0, lo, bq);
    for (int pass = w ? 0 : 1; pass < 2; pass++) {
        const float *rw = pass == 0 ? w : NULL; /* the refit's weights */
        for (int k = 0; k <= 8 && hi > lo; k++) {
            /* L / 3 is exact (1 or 5), so RQ2's steps are 3 + k/2 bit for bit as before */
            float d = (hi - lo) / ((float)L + 0.5f * (float)k * (float)(L / 3)), m = lo + ((hi - lo) - (float)L * d) / 2;
            for (int it = 0;; it++) {
                float e = rq_assign(x, w, L, d, m, q);
                if (e < best) {
                    best = e;
                    *best_d = d;
                    *best_m = m;
                    memcpy(bq, q, sizeof q);
                }
                if (it == 2 || !rq_refit(x, rw, q, &d, &m)) break;
            }
        }
    }
}

/* One RQ2 / RQ4 block: the search, then the codes packed by the documented layout (types.h)
 * before d and m. */
static void quant_rq_block(uint32_t type, const float *x, const float *w, uint8_t *b) {
    const bool four = type == RL_RQ4;
    const size_t cb = four ? 32 : 16; /* code bytes */
    uint8_t q[RL_QK_RQ2];
    float d, m;
    quant_rq(x, w, four ? 15 : 3, q, &d, &m);
    memset(b, 0, cb);
    for (size_t j = 0; j < RL_QK_RQ2; j++) {
        if (four) b[16 * (j / 32) + j % 16] |= (uint8_t)(q[j] << (j % 32 < 16 ? 0 : 4));
        else b[j / 4] |= (uint8_t)(q[j] << (2 * (j % 4)));
    }
    st_f16(b + cb, d);
    st_f16(b + cb + 2, m);
}

/* The types whose weighted quantizer is quant_legacy_w (a whole row at a time). */
static bool legacy_w(uint32_t type) {
    return type == RL_Q4_0 || type == RL_Q4_1 || type == RL_Q5_0 || type == RL_Q5_1;
}

bool rl_quant_uses_weights(uint32_t type) {
    return type == RL_Q4_K || type == RL_Q5_K || type == RL_Q6_K || type == RL_RQ2 || type == RL_RQ4 || legacy_w(type);
}

/* The importances of the block at off, or NULL without importances. */
static const float *w_at(const float *w, size_t off) { return w ? w + off : NULL; }

/* RQ2's weights for the block of n values at offset off, or NULL when they are all equal: a
 * uniform weight changes no choice of its search, and the plain path then gives the unweighted
 * quantizer's bytes. (The llama.cpp types run their imatrix search on any importances.) */
static const float *block_w(const float *w, size_t off, size_t n) {
    if (!w) return NULL;
    w += off;
    for (size_t j = 1; j < n; j++)
        if (w[j] != w[0]) return w;
    return NULL;
}

void rl_quant_row(uint32_t type, const float *src, void *dst, size_t n) {
    rl_quant_row_w(type, src, dst, n, NULL);
}

void rl_quant_row_w(uint32_t type, const float *src, void *dst, size_t n, const float *w) {
    uint8_t *b = dst;
    /* llama.cpp's imatrix Q4_0 / Q4_1 / Q5_0 / Q5_1 take the whole row (their error weights use
     * its mean square), so they leave before the per-block loops of the reference quantizers */
    if (w && legacy_w(type)) {
        quant_legacy_w(type, src, n, w, b);
        return;
    }
    switch (type) {
    case RL_F32:
        memcpy(dst, src, n * sizeof(float));
        return;
    case RL_F16:
        for (size_t i = 0; i < n; i++) st_f16(b + 2 * i, src[i]);
        return;
    case RL_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = rl_f32_to_bf16(src[i]);
            b[2 * i] = (uint8_t)h;
            b[2 * i + 1] = (uint8_t)(h >> 8);
        }
        return;
    case RL_Q8_0:
        for (size_t i = 0; i < n / RL_QK; i++) quant_q8_0(src + i * RL_QK, b + i * 34);
        return;
    case RL_Q4_0:
        for (size_t i = 0; i < n / RL_QK; i++) quant_q4_0(src + i * RL_QK, b + i * 18);
        return;
    case RL_FP8:
        for (size_t i = 0; i < n / RL_QK; i++) quant_fp8(src + i * RL_QK, b + i * 34);
        return;
    case RL_Q4_1:
        for (size_t i = 0; i < n / RL_QK; i++) quant_q4_1(src + i * RL_QK, b + i * 20);
        return;
    case RL_Q5_0:
    case RL_Q5_1:
        for (size_t i = 0, bs = rl_type_get(type)->size; i < n / RL_QK; i++) quant_q5(type, src + i * RL_QK, b + i * bs);
        return;
    /* the K-quants' searches are per 256-value super-block; w NULL selects the reference search */
    case RL_Q4_K:
        for (size_t i = 0; i < n / RL_QK_K; i++) quant_k45(src + i * RL_QK_K, w_at(w, i * RL_QK_K), b + i * 144, 4);
        return;
    case RL_Q5_K:
        for (size_t i = 0; i < n / RL_QK_K; i++) quant_k45(src + i * RL_QK_K, w_at(w, i * RL_QK_K), b + i * 176, 5);
        return;
    case RL_Q6_K:
        for (size_t i = 0; i < n / RL_QK_K; i++) quant_q6_k(src + i * RL_QK_K, w_at(w, i * RL_QK_K), b + i * 210);
        return;
    case RL_RQ2:
    case RL_RQ4:
        for (size_t i = 0, bs = rl_type_get(type)->size; i < n / RL_QK_RQ2; i++)
            quant_rq_block(type, src + i * RL_QK_RQ2, block_w(w, i * RL_QK_RQ2, RL_QK_RQ2), b + i * bs);
        return;
    default:
        return;
    }
}

/* ---- fast-path activations ------------------------------------------------------------ */

size_t rl_q8a_row_bytes(size_t n) {
    return n / RL_QK * sizeof(rl_q8a);
}

float rl_round_i8_32(const float *x, int8_t *q, int *sum) {
    float amax = 0;
    for (size_t j = 0; j < RL_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127, id = d != 0 ? 127 / amax : 0;
    int s = 0;
    for (size_t j = 0; j < RL_QK; j++) {
        /* round-to-nearest-even vectorizes; the rounding mode only needs to be fixed */
        int v = (int)nearbyintf(x[j] * id);
        q[j] = (int8_t)v;
        s += v;
    }
    *sum = s;
    return d;
}

void rl_q8a_quant_row_ref(const float *x, rl_q8a *dst, size_t n) {
    for (size_t i = 0; i < n / RL_QK; i++, x += RL_QK) {
        int sum;
        float d = rl_round_i8_32(x, dst[i].qs, &sum);
        dst[i].d = d;
        dst[i].s = d * (float)sum;
        dst[i].sum8 = 8 * sum;
    }
}

/* ---- scalar reference matmul ---------------------------------------------------------- */

/* Fast-path reference: per weight block, an integer dot against the activation's int8 values,
 * then the scales, added to acc in order (a packed matrix's blocks, one call each, sum as the
 * row-major row's). Integer part is exact, so SIMD kernels differ only in float summation. */
/* GCC 12 with AVX512-VNNI enabled auto-vectorizes the int8 x int8 sum below into a vpdpbusd
 * sequence that gets the sign wrong (seen on an Intel Xeon, 2026-11-30: the reference, not the
 * kernels, disagreed with the exact integer dot whenever a weight was -128). The reference must
 * be the plain scalar sum, so vectorization is switched off for it. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))
#endif
static float ref_fast_dot(uint32_t type, const uint8_t *w, const rl_q8a *a, size_t n, float acc) {
    switch (type) {
    case RL_Q8_0:
        for (size_t i = 0; i < n / RL_QK; i++, w += 34) {
            int dot = 0;
            for (size_t j = 0; j < RL_QK; j++) dot += (int8_t)w[2 + j] * a[i].qs[j];
            acc += ld_f16(w) * a[i].d * (float)dot;
        }
        return acc;
    case RL_Q4_0:
        for (size_t i = 0; i < n / RL_QK; i++, w += 18) {
            int dot = 0;
            for (size_t j = 0; j < RL_QK / 2; j++)
                dot += ((w[2 + j] & 0xF) - 8) * a[i].qs[j] + ((w[2 + j] >> 4) - 8) * a[i].qs[j + 16];
            acc += ld_f16(w) * a[i].d * (float)dot;
        }
        return acc;
    case RL_Q4_1: /* as Q5_1 below: the min folds in through s */
        for (size_t i = 0; i < n / RL_QK; i++, w += 20) {
            int dot = 0;
            for (size_t j = 0; j < RL_QK / 2; j++) dot += (w[4 + j] & 0xF) * a[i].qs[j] + (w[4 + j] >> 4) * a[i].qs[j + 16];
            acc += ld_f16(w) * a[i].d * (float)dot;
            acc += ld_f16(w + 2) * a[i].s;
        }
        return acc;
    case RL_Q5_0:
    case RL_Q5_1: {
        /* Q5_0 as Q4_0 (offset inside the integer dot); Q5_1's min folds in through s */
        size_t bs = rl_type_get(type)->size, qh_off = q5_qh_off(type);
        int sub = type == RL_Q5_0 ? 16 : 0;
        for (size_t i = 0; i < n / RL_QK; i++, w += bs) {
            int dot = 0;
            for (size_t j = 0; j < RL_QK; j++) dot += (q5_code(w, qh_off, j) - sub) * a[i].qs[j];
            acc += ld_f16(w) * a[i].d * (float)dot;
            if (type == RL_Q5_1) acc += ld_f16(w + 2) * a[i].s;
        }
        return acc;
    }
    case RL_Q4_K:
    case RL_Q5_K: {
        size_t bs = type == RL_Q4_K ? 144 : 176;
        for (size_t i = 0; i < n / RL_QK_K; i++, w += bs) {
            float d = ld_f16(w), dmin = ld_f16(w + 2);
            const uint8_t *qh = w + 16, *qs = type == RL_Q4_K ? w + 16 : w + 48;
            const rl_q8a *ab = a + 8 * i;
            for (size_t j = 0; j < 8; j++) {
                uint8_t sc, m;
                rl_k4_scale_min(j, w + 4, &sc, &m);
                int dot = 0;
                for (size_t l = 0; l < 32; l++) {
                    int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
                    if (type == RL_Q5_K) q |= ((qh[l] >> j) & 1) << 4;
                    dot += q * ab[j].qs[l];
                }
                acc += d * ab[j].d * (float)(sc * dot) - dmin * m * ab[j].s;
            }
        }
        return acc;
    }
    case RL_Q6_K:
        for (size_t i = 0; i < n / RL_QK_K; i++, w += 210) {
            float d = ld_f16(w + 208);
            const int8_t *sc = (const int8_t *)(w + 192);
            const rl_q8a *ab = a + 8 * i;
            for (size_t j = 0; j < 8; j++) {
                int dot = 0;
                for (size_t l = 0; l < 32; l++) {
                    size_t e = 32 * j + l, h = e / 128, k = (e % 128) / 32, ll = e % 32;
                    int q = (w[64 * h + ll + (k % 2) * 32] >> (k / 2 * 4)) & 0xF;
                    q |= ((w[128 + 32 * h + ll] >> (2 * k)) & 3) << 4;
                    dot += sc[e / 16] * (q - 32) * ab[j].qs[l];
                }
                acc += d * ab[j].d * (float)dot;
            }
        }
        return acc;
    case RL_RQ2:
    case RL_RQ4: {
        /* per 32-value half: integer dot of the codes, then the scale and the min term */
        const bool four = type == RL_RQ4;
        const size_t bs = four ? 36 : 20, dm = bs - 4;
        for (size_t i = 0; i < n / RL_QK_RQ2; i++, w += bs) {
            float d = ld_f16(w + dm), m = ld_f16(w + dm + 2);
            const rl_q8a *ab = a + 2 * i;
            for (size_t h = 0; h < 2; h++) {
                int dot = 0;
                for (size_t l = 0; l < RL_QK; l++)
                    dot += (four ? rq4_code(w, RL_QK * h + l) : rq2_code(w, RL_QK * h + l)) * ab[h].qs[l];
                acc += d * ab[h].d * (float)dot + m * ab[h].s;
            }
        }
        return acc;
    }
    default:
        return NAN;
    }
}

static bool uses_fast_path(const rl_mm *m) {
    return m->xq != NULL && !rl_type_fp32_act(m->type);
}

/* ---- row-interleaved (x8) weights --------------------------------------------------------- */

/* A packable block's parts in its row-major form: hb bytes of fp16 factors at hoff (Q4_0 /
 * Q8_0: d first; RQ2 / RQ4: d, m last), the quants at qoff. */
typedef struct pack_fmt {
    size_t bs, hb, hoff, qoff;
} pack_fmt;

static pack_fmt pack_fmt_of(uint32_t type) {
    const size_t bs = rl_type_get(type)->size;
    return type == RL_RQ2 || type == RL_RQ4 ? (pack_fmt){bs, 4, bs - 4, 0} : (pack_fmt){bs, 2, 0, 2};
}

bool rl_pack_format(uint32_t type, size_t rows, size_t n) {
    if (type != RL_Q4_0 && type != RL_Q8_0 && type != RL_RQ2 && type != RL_RQ4) return false;
    return rows % RL_PACK_ROWS == 0 && n > 0 && n % rl_type_get(type)->blck == 0;
}

/* Offset of the 8-row group holding row r's block b inside a packed matrix (bs: block bytes).
 * Inside it: factor f (fp16) of row r at 16 f + 2 (r % 8), then its quant byte j at
 * 8 hb + (j / 4) * 32 + (r % 8) * 4 + j % 4. */
static size_t packed_group(size_t bs, size_t row_bytes, size_t r, size_t b) {
    return r / RL_PACK_ROWS * RL_PACK_ROWS * row_bytes + b * RL_PACK_ROWS * bs;
}

/* Block b of row r between its row-major form (blk) and its place in a packed matrix: to the
 * packed form when pack, else back. */
static void packed_move(const pack_fmt *f, uint8_t *packed, size_t row_bytes, size_t r, size_t b, uint8_t *blk, bool pack) {
    const size_t lane = r % RL_PACK_ROWS, qb = f->bs - f->hb;
    uint8_t *g = packed + packed_group(f->bs, row_bytes, r, b);
    for (size_t h = 0; h < f->hb; h += 2) {
        uint8_t *pp = g + 8 * h + 2 * lane, *bp = blk + f->hoff + h;
        memcpy(pack ? pp : bp, pack ? bp : pp, 2);
    }
    for (size_t j = 0; j < qb; j += 4) {
        uint8_t *pp = g + 8 * f->hb + j * RL_PACK_ROWS + lane * 4, *bp = blk + f->qoff + j;
        memcpy(pack ? pp : bp, pack ? bp : pp, 4);
    }
}

void rl_pack_rows(uint32_t type, const void *w, size_t row_bytes, size_t rows, size_t n, void *dst) {
    const pack_fmt f = pack_fmt_of(type);
    const size_t nb = n / rl_type_get(type)->blck;
    for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b < nb; b++)
            packed_move(&f, dst, row_bytes, r, b, (uint8_t *)w + r * row_bytes + b * f.bs, true);
}

void rl_packed_block(uint32_t type, const void *packed, size_t row_bytes, size_t r, size_t b, void *dst) {
    const pack_fmt f = pack_fmt_of(type);
    packed_move(&f, (uint8_t *)packed, row_bytes, r, b, dst, false);
}

/* Packed weights: the same computation with each block gathered back into row-major form
 * first; a block at a time, so the sums run in the same order as the row-major path. */
static void ref_packed(const rl_mm *m, size_t r0, size_t r1, bool fast) {
    uint8_t blk[64];
    float vals[RL_QK_RQ4];
    const size_t bk = rl_type_get(m->type)->blck;
    for (size_t r = r0; r < r1; r++) {
        for (size_t s = 0; s < m->S; s++) {
            float v = 0;
            for (size_t b = 0; b < m->n / bk; b++) {
                rl_packed_block(m->type, m->w, m->row_bytes, r, b, blk);
                if (fast) {
                    v = ref_fast_dot(m->type, blk, m->xq + s * (m->n / RL_QK) + b * (bk / RL_QK), bk, v);
                } else {
                    rl_dequant_row(m->type, blk, vals, bk);
                    for (size_t i = 0; i < bk; i++) v += vals[i] * m->x[s * m->n + b * bk + i];
                }
            }
            float *y = m->y + s * m->ys + r;
            *y = m->accumulate ? *y + v : v;
        }
    }
}

void rl_mm_rows_ref(const rl_mm *m, size_t r0, size_t r1) {
    /* exact path: dequantize a chunk at a time (no row-sized stack buffer); the dot still runs
     * in index order with one accumulator, chunks just repeat per column */
    float chunk[RL_QK_K];
    bool fast = uses_fast_path(m);
    if (m->packed) {
        ref_packed(m, r0, r1, fast);
        return;
    }
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)m->w + r * m->row_bytes;
        for (size_t s = 0; s < m->S; s++) {
            float v = 0;
            if (fast) {
                v = ref_fast_dot(m->type, w, m->xq + s * (m->n / RL_QK), m->n, 0.0f);
            } else {
                const float *x = m->x + s * m->n;
                for (size_t i0 = 0; i0 < m->n; i0 += RL_QK_K) {
                    size_t len = m->n - i0 < RL_QK_K ? m->n - i0 : RL_QK_K;
                    rl_dequant_row(m->type, w + rl_row_bytes(m->type, i0), chunk, len);
                    for (size_t i = 0; i < len; i++) v += chunk[i] * x[i0 + i];
                }
            }
            float *y = m->y + s * m->ys + r;
            *y = m->accumulate ? *y + v : v;
        }
    }
}
