/* The fast path's row dispatch by type, the same for every SIMD build (mm.c's AVX2, mm_avx512.c,
 * mm_neon.c). The including file defines, before it: exact_rows (mm_exact.h: fp32 activations);
 * rows_q (32-value blocks, a TQ_ format of mm_tq.h); rows_x8 (packed Q8_0 / Q4_0, a TQ_ format);
 * rows_k (Q4_K / Q5_K / Q6_K, the type); rows_rq (RQ2 / RQ4, whether four bits); and, where
 * rl_pack_supported packs RQ2 / RQ4, rows_rq_x8 with MM_RQ_X8 defined. Each build's kernel
 * takes its format as a constant, so the cases name it rather than passing m->type through.
 * Not a header for anything else. */
#ifndef RL_MM_DISPATCH_H
#define RL_MM_DISPATCH_H

static void mm_rows(const rl_mm *m, size_t r0, size_t r1) {
    if (m->xq == NULL || rl_type_fp32_act(m->type)) {
        if (m->packed) { /* not a path the engine takes: it packs for the fast path only */
            rl_mm_rows_ref(m, r0, r1);
            return;
        }
        exact_rows(m, r0, r1);
        return;
    }
    if (m->packed) {
        switch (m->type) {
        case RL_Q8_0: rows_x8(m, r0, r1, TQ_Q8_0); return;
        case RL_Q4_0: rows_x8(m, r0, r1, TQ_Q4_0); return;
#ifdef MM_RQ_X8
        case RL_RQ2: rows_rq_x8(m, r0, r1, false); return;
        case RL_RQ4: rows_rq_x8(m, r0, r1, true); return;
#endif
        default: rl_mm_rows_ref(m, r0, r1); return;
        }
    }
    switch (m->type) {
    case RL_Q8_0: rows_q(m, r0, r1, TQ_Q8_0); return;
    case RL_Q4_0: rows_q(m, r0, r1, TQ_Q4_0); return;
    case RL_Q4_1: rows_q(m, r0, r1, TQ_Q4_1); return;
    case RL_Q5_0: rows_q(m, r0, r1, TQ_Q5_0); return;
    case RL_Q5_1: rows_q(m, r0, r1, TQ_Q5_1); return;
    case RL_Q4_K: rows_k(m, r0, r1, RL_Q4_K); return;
    case RL_Q5_K: rows_k(m, r0, r1, RL_Q5_K); return;
    case RL_Q6_K: rows_k(m, r0, r1, RL_Q6_K); return;
    case RL_RQ2: rows_rq(m, r0, r1, false); return;
    case RL_RQ4: rows_rq(m, r0, r1, true); return;
    default: rl_mm_rows_ref(m, r0, r1); return;
    }
}

#endif
