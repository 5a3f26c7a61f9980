/* The 32-value block formats Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 as the SIMD matmul kernels see
 * them (mm.c's AVX2 tiles, mm_avx512.c, mm_neon.c): one enum and one description of the block
 * layout, so the three files cannot disagree. Bytes of a block:
 *   Q8_0 [0,2) d [2,34) int8                      value d*q
 *   Q4_0 [0,2) d [2,18) nibbles                   value d*(q - 8)
 *   Q4_1 [0,2) d [2,4) m [4,20) nibbles           value d*q + m
 *   Q5_0 [0,2) d [2,6) qh [6,22) nibbles          value d*(q - 16)
 *   Q5_1 [0,2) d [2,4) m [4,8) qh [8,24) nibbles  value d*q + m
 * Nibble j < 16 is the low half of byte j, nibble j + 16 its high half; a Q5 code's fifth bit
 * is bit j of the little-endian 32-bit qh. The kernels take the format as a compile-time
 * constant (always-inlined helpers), so each instantiation keeps only its own format's code. */
#ifndef RL_MM_TQ_H
#define RL_MM_TQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "types.h"

enum { TQ_Q8_0, TQ_Q4_0, TQ_Q4_1, TQ_Q5_0, TQ_Q5_1 };

#define TQ_INLINE static inline __attribute__((always_inline))

/* block bytes */
TQ_INLINE size_t tq_bs(const int f) {
    return f == TQ_Q8_0 ? 34 : f == TQ_Q4_0 ? 18 : f == TQ_Q4_1 ? 20 : f == TQ_Q5_0 ? 22 : 24;
}

/* value d*q + m: the block's min m (fp16 at byte 2) times the activation sum enters per block */
TQ_INLINE bool tq_min(const int f) { return f == TQ_Q4_1 || f == TQ_Q5_1; }

/* five-bit codes: qh, 4 bytes just before the nibbles */
TQ_INLINE bool tq_q5(const int f) { return f == TQ_Q5_0 || f == TQ_Q5_1; }

/* byte offset of the quants (int8 or nibbles) */
TQ_INLINE size_t tq_qs_at(const int f) {
    return f == TQ_Q8_0 || f == TQ_Q4_0 ? 2 : f == TQ_Q4_1 ? 4 : f == TQ_Q5_0 ? 6 : 8;
}

/* what is subtracted from an unsigned code: 8 (Q4_0), 16 (Q5_0), else 0 */
TQ_INLINE int tq_sub(const int f) { return f == TQ_Q4_0 ? 8 : f == TQ_Q5_0 ? 16 : 0; }

/* the format of a tensor type, -1 for the others (a run-time value: dispatch by switch where
 * the format must be a constant) */
TQ_INLINE int tq_of(const uint32_t type) {
    return type == RL_Q8_0 ? TQ_Q8_0 : type == RL_Q4_0 ? TQ_Q4_0 : type == RL_Q4_1 ? TQ_Q4_1
         : type == RL_Q5_0 ? TQ_Q5_0 : type == RL_Q5_1 ? TQ_Q5_1 : -1;
}

#endif
