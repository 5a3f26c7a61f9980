/* Weight formats: reference (scalar) dequantization and quantization, and the matmul kernels
 * the CPU forward pass calls.
 *
 * Two activation paths:
 *  - exact: activations stay fp32; each weight row is dequantized on the fly and dotted in fp32.
 *    The scalar version of this path is the reference every SIMD kernel is tested against.
 *  - fast (default for quantized weights): the activation vector is quantized once to rl_q8a
 *    blocks (8-bit, one fp32 scale per 32 values) and the dot products run in integer SIMD, the
 *    way llama.cpp does. Relative logit error is bounded at 3e-2 instead of 1e-3 (documented in
 *    README and tested).
 * F32/F16/BF16 weights always use the fp32 path. */
#ifndef RL_QUANT_H
#define RL_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "types.h"

/* fp16 / bf16 scalar conversion (round-to-nearest-even on the way down). */
float rl_f16_to_f32(uint16_t h);
uint16_t rl_f32_to_f16(float f);
float rl_bf16_to_f32(uint16_t h);
uint16_t rl_f32_to_bf16(float f);
void rl_f16_to_f32_row(const uint16_t *src, float *dst, size_t n); /* SIMD where available */
void rl_f32_to_f16_row(const float *src, uint16_t *dst, size_t n);

/* Q4_K / Q5_K: scale and min j (0..7) of the 8 six-bit pairs packed in a super-block's 12
 * bytes q (ggml's layout); every CPU reader of the format takes them from here (the GPU
 * unpacks them in src/cuda/dequant.cuh). */
static inline void rl_k4_scale_min(size_t j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* A Q8_0 block's scale from its amax, with ggml's reference operations: d = amax / 127 stored as
 * fp16 at b (little-endian), and 1 / d returned (0 for a zero block), the factor each code is
 * x * id rounded from. The scalar quantizer and the SIMD row writers (src/mm.c, mm_neon.c) share it. */
static inline float rl_q8_0_scale(float amax, uint8_t *b) {
    const float d = amax / 127;
    const uint16_t h = rl_f32_to_f16(d);
    b[0] = (uint8_t)h;
    b[1] = (uint8_t)(h >> 8);
    return d != 0 ? 1.0f / d : 0.0f;
}

/* Reference dequantization of n elements (n a multiple of the block size) of any computable
 * type. Scalar code that follows ggml-quants.c's op order. */
void rl_dequant_row(uint32_t type, const void *src, float *dst, size_t n);

/* Quantizes n floats into type (any computable type). Q8_0, Q4_0, Q5_0 and Q5_1 follow ggml's
 * reference quantizers (byte-identical to gguf.quants.quantize); Q4_K, Q5_K and Q6_K follow llama.cpp's
 * reference K-quantizers (byte-identical to llama-quantize without an imatrix);
 * RQ2 searches (d, m) per block for the least squared error (docs/FORMATS.md, section RQ2);
 * FP8 rounds x / d to the nearest e4m3 value (section FP8). */
void rl_quant_row(uint32_t type, const float *src, void *dst, size_t n);
/* Same, with per-element importances w[0..n) (calibration: mean squared activation of each
 * input column; w NULL = rl_quant_row, byte for byte). Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and
 * Q6_K with w run llama.cpp's imatrix quantizers (the same bytes as llama-quantize given w as its
 * imatrix), searches that differ from the reference quantizers even for equal weights. RQ2
 * minimises sum_j w_j (x_j - deq_j)^2, and a block whose weights are all equal is quantized
 * exactly as without weights. The other types ignore w. */
void rl_quant_row_w(uint32_t type, const float *src, void *dst, size_t n, const float *w);
/* True when rl_quant_row_w uses its weights for this type. */
bool rl_quant_uses_weights(uint32_t type);
/* rl_quant_row_w's bytes, by SIMD where there is a kernel (mm.c: F16 by rl_f32_to_f16_row, Q8_0
 * on x86 with AVX2 and on arm64), else rl_quant_row_w itself. What the quantize and mkmodel
 * tools call. */
void rl_quant_row_fast(uint32_t type, const float *src, void *dst, size_t n, const float *w);
/* rl_dequant_row's values, F16 by rl_f16_to_f32_row (F16C / NEON: the same values, a NaN
 * quieted). What the quantize tool decodes its input rows with. */
void rl_dequant_row_fast(uint32_t type, const void *src, float *dst, size_t n);
/* Index of the first NaN or infinity among x[0..n), SIZE_MAX if every value is finite. The
 * quantizers' roundings of such a value are undefined (a float-to-int conversion), so the
 * quantize tool refuses a tensor that holds one. */
size_t rl_first_nonfinite(const float *x, size_t n);

/* The value of an FP8 (e4m3) code, exactly (docs/FORMATS.md, section FP8); the table is
 * rl_e4m3_to_f32's, for loops that decode many codes. */
extern const float rl_e4m3_f32[256];
float rl_e4m3_to_f32(uint8_t c);

/* RQ2 table decoder: entry b holds the 4 codes of code byte b, code k in byte k (a dp4a /
 * maddubs operand in weight order). 256 entries. */
extern const uint32_t *const rl_rq2_lut;

/* The fast path's activation block: 32 int8 values with one fp32 scale d (x ~ d*qs), and
 * s = d * sum(qs), which lets offset formats (Q4_0's -8, Q5_0's -16, Q5_1 and K-quant mins)
 * fold in one multiply;
 * sum8 = 8 * sum(qs) exactly, which the packed Q4_0 kernel subtracts in integers. */
typedef struct rl_q8a {
    float d;
    float s;
    int32_t sum8;
    int8_t qs[32];
} rl_q8a;

/* Rounds 32 values to int8 with one scale d (returned; x ~ d * q), d = amax / 127 and
 * round-half-even: the one rounding rule of the fast path's activations and of the 8-bit KV
 * cache. *sum = sum of the q. */
float rl_round_i8_32(const float *x, int8_t *q, int *sum);

/* Bytes of the quantized form of an activation row of n values (n multiple of 32). */
size_t rl_q8a_row_bytes(size_t n);
void rl_q8a_quant_row(const float *x, rl_q8a *dst, size_t n);
/* Scalar reference of rl_q8a_quant_row (which is SIMD where available, with identical output). */
void rl_q8a_quant_row_ref(const float *x, rl_q8a *dst, size_t n);

/* One matmul: y[s][r] = W[r,:] . x[s,:] for rows r of W and columns s of the activations.
 * W is row-major in its stored format, n = its contiguous dimension (ne[0]). */
typedef struct rl_mm {
    uint32_t type;     /* weight type (computable) */
    const void *w;     /* row r starts at w + r * row_bytes */
    size_t row_bytes;
    size_t n;          /* inner dimension */
    size_t S;          /* number of activation columns (tokens) */
    const float *x;    /* [S][n] fp32 activations (exact path, and F32/F16/BF16 weights) */
    const rl_q8a *xq;  /* [S][n/32] quantized activations, or NULL for the exact path */
    float *y;          /* y[s * ys + r] */
    size_t ys;
    bool accumulate;   /* y += result (residual add folded in) instead of y = result */
    bool packed;       /* w is in the row-interleaved form of rl_pack_rows (same size; row r's
                          group starts at w + (r / 8) * 8 * row_bytes); r0, r1 multiples of 8 */
} rl_mm;

/* Computes rows [r0, r1) for all S columns; threads call it on disjoint row ranges. Uses the
 * best SIMD kernel of this build for the type and path. */
void rl_mm_rows(const rl_mm *m, size_t r0, size_t r1);
/* Scalar reference of the same computation (the oracle for the SIMD kernels). */
void rl_mm_rows_ref(const rl_mm *m, size_t r0, size_t r1);

/* Row-interleaved ("x8") weights, Q4_0, Q8_0, RQ2 and RQ4: groups of RL_PACK_ROWS rows, and
 * within a group, block b of all 8 rows together: the 8 rows' fp16 factors, one 16-byte run per
 * factor (Q4_0 / Q8_0: d; RQ2 / RQ4: d, then m), then the quants with the rows interleaved
 * every 4 bytes (byte 32k + 4r + i of the quants = row r's quant byte 4k + i). One 32-byte load
 * then holds 4 quant bytes of each of the 8 rows, so the kernels multiply it by 4 broadcast
 * activation bytes and get one int32 per row without any horizontal sum, and decode streams
 * one contiguous array. Same byte count as the row-major form. */
#define RL_PACK_ROWS 8

/* Columns per L2 chunk of a packed matmul whose tiles take xc columns at a time: every 8-row
 * group re-reads a chunk's activations, so the chunk must stay in L2 (512 KiB per core on the
 * AVX2 machine this was set on) beside the weights streaming through; at n = 5632 (FFN down)
 * 64 columns are 500 KB, and chunked each group reads them from L2, not L3. A multiple of xc,
 * at least xc. The columns' sums do not depend on the chunking: the same bits. */
static inline size_t rl_x8_chunk(const rl_mm *m, size_t xc) {
    const size_t act_bytes = 224u * 1024u, col_bytes = m->n / RL_QK * sizeof(rl_q8a);
    const size_t chunk = act_bytes / col_bytes / xc * xc;
    return chunk < xc ? xc : chunk;
}
/* True when the packed form exists for this matrix (Q4_0 / Q8_0 / RQ2 / RQ4, rows a multiple of 8). */
bool rl_pack_format(uint32_t type, size_t rows, size_t n);
/* True when this build's kernels read the matrix packed, so the engine packs it: the packed
 * form, and for RQ2 / RQ4 an x86 build (their packed kernel is AVX2; elsewhere they stay row-major). */
bool rl_pack_supported(uint32_t type, size_t rows, size_t n);
/* Repacks rows x n weights (row-major, row_bytes apart) into dst (rows * row_bytes bytes). */
void rl_pack_rows(uint32_t type, const void *w, size_t row_bytes, size_t rows, size_t n, void *dst);
/* Copies block b of row r of a packed matrix back into its row-major block form (dst: one
 * block, type size bytes). */
void rl_packed_block(uint32_t type, const void *packed, size_t row_bytes, size_t r, size_t b, void *dst);

/* Row-block granularity threads should split on (a multiple the kernels tile by). */
size_t rl_mm_row_tile(uint32_t type);

/* Name of the SIMD level compiled in: "avx2", "neon", "scalar", ... */
const char *rl_simd_name(void);

#endif
