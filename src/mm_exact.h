/* The exact path's row driver (fp32 activations): rows in groups of 4, each dequantized a
 * 256-value chunk at a time into a buffer and dotted with every column. Shared by mm.c's AVX2
 * build, mm_avx512.c and mm_neon.c, which differ only in the dequant_chunk and dots_n they define
 * before including it (with put); not a header for anything else. */
#ifndef RL_MM_EXACT_H
#define RL_MM_EXACT_H

static void exact_rows(const rl_mm *m, size_t r0, size_t r1) {
    enum { CH = RL_QK_K, NR = 4 };
    _Alignas(64) float buf[NR][CH];
    const rl_type_info *ti = rl_type_get(m->type);
    size_t chunk_bytes = CH / ti->blck * ti->size;
    for (size_t r = r0; r < r1; r += NR) {
        size_t nr = r1 - r < NR ? r1 - r : NR;
        for (size_t i0 = 0; i0 < m->n; i0 += CH) {
            size_t len = m->n - i0 < CH ? m->n - i0 : CH;
            const float *p[NR];
            for (size_t k = 0; k < nr; k++) {
                const uint8_t *w = (const uint8_t *)m->w + (r + k) * m->row_bytes + i0 / CH * chunk_bytes;
                if (m->type == RL_F32) {
                    p[k] = (const float *)w;
                } else {
                    dequant_chunk(m->type, w, buf[k], len);
                    p[k] = buf[k];
                }
            }
            bool add = i0 > 0 || m->accumulate;
            for (size_t s = 0; s < m->S; s++) {
                float out[NR];
                const float *x = m->x + s * m->n + i0;
                switch (nr) {
                case 4: dots_n(p, x, len, out, 4); break;
                case 3: dots_n(p, x, len, out, 3); break;
                case 2: dots_n(p, x, len, out, 2); break;
                default: dots_n(p, x, len, out, 1); break;
                }
                for (size_t k = 0; k < nr; k++) put(m, s, r + k, out[k], add);
            }
        }
    }
}

#endif
