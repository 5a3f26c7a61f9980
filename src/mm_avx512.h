/* AVX-512 (F + BW + VL, VNNI when present) kernels behind quant.h's rl_mm_rows,
 * rl_q8a_quant_row and fp16 row conversions. Internal to mm.c, which dispatches to them ahead
 * of AVX2 when the build targets AVX-512 (-march=x86-64-v4, sapphirerapids, znver4, ...). */
#ifndef RL_MM_AVX512_H
#define RL_MM_AVX512_H

#include "quant.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define RL_MM_AVX512 1
void rl_avx512_mm_rows(const rl_mm *m, size_t r0, size_t r1);
void rl_avx512_q8a_quant_row(const float *x, rl_q8a *dst, size_t n);
void rl_avx512_f16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void rl_avx512_f32_to_f16_row(const float *src, uint16_t *dst, size_t n);
#endif

#endif
