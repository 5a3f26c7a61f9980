/* NEON (arm64) kernels behind quant.h's rl_mm_rows, rl_q8a_quant_row and fp16 row conversions.
 * Internal to mm.c, which dispatches to them when the build targets arm64 with NEON. */
#ifndef RL_MM_NEON_H
#define RL_MM_NEON_H

#include "quant.h"

/* little-endian only: the kernels reinterpret loaded block bytes as fp16 / int16 lanes */
#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(__ARM_BIG_ENDIAN)
#define RL_MM_NEON 1
void rl_neon_mm_rows(const rl_mm *m, size_t r0, size_t r1);
void rl_neon_q8a_quant_row(const float *x, rl_q8a *dst, size_t n);
void rl_neon_f16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void rl_neon_f32_to_f16_row(const float *src, uint16_t *dst, size_t n);
void rl_neon_q8_0_row(const float *x, uint8_t *b, size_t n); /* Q8_0 weight blocks, rl_quant_row's bytes */
bool rl_neon_any_nonfinite(const float *x, size_t n); /* n a multiple of 4: a NaN or infinity among x[0..n) */
#endif

#endif
