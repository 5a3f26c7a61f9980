/* Fused dequant-matvec for every weight type of the CPU backend (the embedding lookup is
 * prefill.cu's row dequantiser: the same deq32).
 *
 * v2.1: Q4_0 and Q8_0 also have the CPU's 8-bit-activation path (default, off with --exact):
 * the prologue rounds the staged input to int8 blocks and the chunk dots are dp4a, ~1/4 of the
 * instructions per weight of the fp32 path. (A v3 with one block per 8 rows and the rounding
 * done once by the producer's last block was slower: docs/PERF.md.) RQ2 (rawloop's 2-bit type)
 * has both paths; its lanes own whole 64-value blocks and it has two code decoders (section
 * RQ2 below; docs/CUDA.md, "RQ2 on the GPU").
 *
 * Design (v2): one kernel instantiation per weight type (v1 had one kernel for all eight
 * types at 116 registers, so 16 warps/SM; Q4_0/F16/BF16 now fit 64 registers, 32 warps/SM).
 * A warp works on two rows at once (gate r and up r for the GLU, rows 2i and 2i+1 otherwise,
 * which are also llama RoPE pairs); its lanes stride over the 32-element chunks, loading U
 * chunks of both rows before using any. The first loads are issued before the prologue that
 * stages x in shared memory (RMS-normalised: every block recomputes the scale), so the weight
 * latency overlaps it. The grid is capped at what is resident at once (no second wave).
 * Lane sums meet in a fixed butterfly: deterministic, no atomics; per-lane chunk order and the
 * per-chunk op order are v1's, so the results are bit-identical to v1. Epilogues: bias,
 * residual add, SwiGLU, and for Q/K/V: RoPE + the f16 K/V cache write. */
#include <cuda_fp16.h>
#include <string.h>

#include "mv.cuh"

/* ---- device layout ---------------------------------------------------------------------- */

bool rl_dmat_repacked(uint32_t type) {
    return type == RL_Q4_0 || type == RL_Q8_0 || type == RL_FP8 || type == RL_Q4_K || type == RL_Q5_K || type == RL_Q6_K ||
           type == RL_RQ2 || type == RL_RQ4;
}

/* Q5_K / Q6_K rows are uploaded in stages of 32 sub-blocks of 32 values (dequant.cuh), the last
 * one padded to full size. */
static size_t kq_stages(size_t cols) { return (cols / 32 + 31) / 32; }

void rl_dmat_sizes(uint32_t type, size_t rows, size_t cols, size_t row_bytes, size_t *q_bytes,
                   size_t *s_bytes) {
    if (type == RL_Q4_0) {
        *q_bytes = rows * (cols / 2);
        *s_bytes = rows * (cols / 32) * 2;
    } else if (type == RL_Q8_0 || type == RL_FP8) {
        *q_bytes = rows * cols;
        *s_bytes = rows * (cols / 32) * 2;
    } else if (type == RL_Q4_K) { /* 16 bytes of quants per 32 (Q4_0's order), the 16-byte header per 256 apart */
        *q_bytes = rows * (cols / 2);
        *s_bytes = rows * (cols / 256) * 16;
    } else if (type == RL_Q5_K) { /* stages of 32 units of 32 values: 640 code bytes; Q4_K's headers apart */
        *q_bytes = rows * kq_stages(cols) * 640;
        *s_bytes = rows * (cols / 256) * 16;
    } else if (type == RL_Q6_K) { /* stages of 32 units of 32 values: 768 code bytes, 72 of scales and d */
        *q_bytes = rows * kq_stages(cols) * 768;
        *s_bytes = rows * kq_stages(cols) * 72;
    } else if (type == RL_RQ2 || type == RL_RQ4) { /* 16 (RQ4: 32) code bytes per 64, the (d, m) fp16 pair apart */
        *q_bytes = rows * (cols / (type == RL_RQ2 ? 4 : 2));
        *s_bytes = rows * (cols / 64) * 4;
    } else {
        *q_bytes = rows * row_bytes;
        *s_bytes = 0;
    }
}

/* Q4_0 / Q8_0 / FP8: [16-bit d][quants] blocks -> quants plane + d plane. RQ2 / RQ4:
 * [codes][fp16 d][fp16 m] 20- / 36-byte blocks (4-byte aligned) -> 16- / 32-byte code plane +
 * (d, m) plane. Q4_K: [d dmin scales[12]][qs[128]] 144-byte blocks -> the 16-byte headers in the
 * scale plane, and each 32-value sub-block's codes as 16 bytes in Q4_0's order (byte i: value i
 * low, value 16 + i high; llama.cpp's block keeps sub-blocks 2j and 2j + 1 in the low and high
 * nibbles of the same 32 bytes). So a Q4_K row streams as Q4_0's does: 16 bytes of codes and 2
 * of scale plane per 32 values (dequant.cuh q4k_*; mvs.cuh). Q6_K: [ql qh scales][fp16 d] 210-byte
 * blocks (only 2-byte aligned) -> stages of 32 sub-blocks (dequant.cuh, Q6_K as uploaded). */
/* Eight bytes at p / to p (little-endian, as the device reads them). */
static uint64_t ld8(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static void st8(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
#define LO4 0x0F0F0F0F0F0F0F0FULL

/* A sub-block's low 4 bits in Q4_0's order (byte i: value i | value 16 + i << 4), from the
 * nibbles at bit sh of v[0..31] (llama.cpp's ql / qs bytes, one value each). */
static void put_low4(uint8_t *dst, const uint8_t *v, int sh) {
    for (int h = 0; h < 16; h += 8) st8(dst + h, (ld8(v + h) >> sh & LO4) | (ld8(v + 16 + h) >> sh & LO4) << 4);
}

/* The repacks below work on 8 bytes at a time: a byte-at-a-time repack read 0.5-0.65 GB/s here,
 * seconds of a 7B Q4_K_M file's load. */
static void repack_q4_k(const uint8_t *src, size_t rows, size_t cols, size_t row_bytes, uint8_t *q, uint8_t *s) {
    const size_t nb = cols / 256;
    for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = src + r * row_bytes + b * 144, *qs = blk + 16;
            memcpy(s + (r * nb + b) * 16, blk, 16);
            for (int j = 0; j < 4; j++) { /* sub-blocks 2j (low nibbles) and 2j + 1 (high) */
                uint8_t *o = q + ((r * nb + b) * 8 + 2 * j) * 16;
                put_low4(o, qs + 32 * j, 0);
                put_low4(o + 16, qs + 32 * j, 4);
            }
        }
}

/* Q5_K: [d dmin scales[12]][qh[32]][qs[128]] 176-byte blocks -> the headers as Q4_K's, the codes
 * in stages of 32 sub-blocks (dequant.cuh, Q5_K as uploaded): llama.cpp's dequantize_row_q5_K
 * takes value l of sub-block sb from qs[32 (sb / 2) + l] (nibble sb & 1) and bit sb of qh[l]. */
static void repack_q5_k(const uint8_t *src, size_t rows, size_t cols, size_t row_bytes, uint8_t *q, uint8_t *s) {
    const size_t nb = cols / 256, stages = kq_stages(cols);
    memset(q, 0, rows * stages * 640); /* the last stage's padding */
    for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = src + r * row_bytes + b * 176, *qh = blk + 16, *qs = blk + 48;
            memcpy(s + (r * nb + b) * 16, blk, 16);
            for (int sb = 0; sb < 8; sb++) {
                const size_t c = b * 8 + sb, u = c % 32;
                uint8_t *st = q + (r * stages + c / 32) * 640;
                put_low4(st + 16 * u, qs + 32 * (sb / 2), 4 * (sb & 1));
                uint32_t hw = 0; /* byte b: bit k the fifth bit of value 4k + b, bit 4 + k that of 16 + 4k + b */
                for (int k = 0; k < 4; k++) {
                    uint32_t v0, v1;
                    memcpy(&v0, qh + 4 * k, 4);
                    memcpy(&v1, qh + 16 + 4 * k, 4);
                    hw |= (v0 >> sb & 0x01010101u) << k | (v1 >> sb & 0x01010101u) << (4 + k);
                }
                memcpy(st + 512 + 4 * u, &hw, 4);
            }
        }
}

/* Sub-block sb of a 210-byte Q6_K block: llama.cpp's dequantize_row_q6_K takes value l of group g
 * (of 4) in half hh (of 2) from ql[64 hh + 32 (g & 1) + l] (nibble g / 2) and qh[32 hh + l] (bits
 * 2g, 2g + 1), with sub-scales 2 sb and 2 sb + 1. */
static void repack_q6_k(const uint8_t *src, size_t rows, size_t cols, size_t row_bytes, uint8_t *q, uint8_t *s) {
    const size_t nb = cols / 256, stages = kq_stages(cols);
    memset(q, 0, rows * stages * 768); /* the last stage's padding */
    memset(s, 0, rows * stages * 72);
    for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = src + r * row_bytes + b * 210, *ql = blk, *qh = blk + 128, *sc = blk + 192;
            for (int sb = 0; sb < 8; sb++) {
                const size_t c = b * 8 + sb, u = c % 32;
                uint8_t *st = q + (r * stages + c / 32) * 768, *ss = s + (r * stages + c / 32) * 72;
                const int hh = sb / 4, g = sb % 4;
                const uint8_t *l4 = ql + 64 * hh + 32 * (g & 1), *h2 = qh + 32 * hh;
                put_low4(st + 16 * u, l4, 4 * (g / 2));
                for (int w = 0; w < 2; w++) { /* word w: values 16w + 4k + b at bits 8b + 2k */
                    uint32_t hw = 0;
                    for (int k = 0; k < 4; k++) {
                        uint32_t v;
                        memcpy(&v, h2 + 16 * w + 4 * k, 4); /* values 16w + 4k + b at byte b */
                        hw |= (v >> (2 * g) & 0x03030303u) << (2 * k);
                    }
                    memcpy(st + 512 + 8 * u + 4 * w, &hw, 4);
                }
                ss[2 * u] = sc[2 * sb];
                ss[2 * u + 1] = sc[2 * sb + 1];
                if (sb == 0) {
                    ss[64 + 2 * (u / 8)] = blk[208];
                    ss[64 + 2 * (u / 8) + 1] = blk[209];
                }
            }
        }
}

void rl_dmat_repack(uint32_t type, const uint8_t *src, size_t rows, size_t cols, size_t row_bytes,
                    uint8_t *q, uint8_t *s) {
    if (type == RL_Q4_K) {
        repack_q4_k(src, rows, cols, row_bytes, q, s);
        return;
    }
    if (type == RL_Q5_K) {
        repack_q5_k(src, rows, cols, row_bytes, q, s);
        return;
    }
    if (type == RL_Q6_K) {
        repack_q6_k(src, rows, cols, row_bytes, q, s);
        return;
    }
    if (type == RL_RQ2 || type == RL_RQ4) {
        const size_t bs = type == RL_RQ2 ? 20 : 36, sb = 4, qb = bs - sb, nb = cols / 64;
        for (size_t r = 0; r < rows; r++)
            for (size_t b = 0; b < nb; b++) {
                const uint8_t *blk = src + r * row_bytes + b * bs;
                memcpy(q + (r * nb + b) * qb, blk, qb);
                memcpy(s + (r * nb + b) * sb, blk + qb, sb);
            }
        return;
    }
    size_t nb = cols / 32, qb = type == RL_Q4_0 ? 16 : 32, bb = qb + 2;
    for (size_t r = 0; r < rows; r++) {
        const uint8_t *row = src + r * row_bytes;
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + b * bb;
            uint8_t *qd = q + (r * nb + b) * qb, *sd = s + (r * nb + b) * 2;
            sd[0] = blk[0];
            sd[1] = blk[1];
            for (size_t i = 0; i < qb; i++) qd[i] = blk[2 + i];
        }
    }
}

template <int XL, bool Q8>
__global__ void mv_prep_kernel(const rl_mv_args a) {
    __shared__ double red[32];
    rl_pdl_trigger();
    rl_pdl_wait();
    const int col = blockIdx.x;
    mv_stage<XL, Q8>(a, a.x + (size_t)col * a.n, (float *)((char *)a.scratch + (size_t)col * col_bytes(a.n)), red);
}

/* Lane `lane`'s units j .. j + U - 1 of item t's two rows into r (those below nu): the first
 * item's loads before the prologue, each round's in the loop, the pipelined loop's next ones. */
template <int T>
__device__ __forceinline__ void ld_units(raw_chunk<T> (&r)[mv_tr<T>::U][2], const mv_task &t, int lane, int j, int nu) {
#pragma unroll
    for (int u = 0; u < mv_tr<T>::U; u++) {
        const int c = lane + 32 * (j + u);
        if (c < nu) {
            ld_chunk<T>(r[u][0], t.w[0], t.s[0], c);
            ld_chunk<T>(r[u][1], t.w[1], t.s[1], c);
        }
    }
}

/* NS columns (an exact chunk of NS tokens; 1 = decoding). NS = 1 stages its input in shared
 * memory; NS > 1 reads the NS staged columns mv_prep_kernel wrote (same layout, same values)
 * and takes each weight unit once for all NS columns, each column's sum in the one-column
 * order: decoding's bits, one weight read per chunk instead of per token.
 * Blocks of nw warps, grid-stride over work items (the grid is one wave: see rl_mv_launch).
 * The first item's first loads are issued before the prologue (and, under PDL, before waiting
 * for the previous kernel), so the weight latency overlaps staging x. Prologue: stage x in
 * shared memory, RMS-normalised as the CPU does (sum of squares in double, then w * (x * r)),
 * padded by 4 floats per 32 so a quarter-warp's 16-byte loads hit distinct banks. Lane l takes
 * units l, l + 32, ... of both rows; lane sums meet in a fixed butterfly (no atomics). Decode
 * blocks have up to 16 warps (the prologue is per block: bigger blocks do it fewer times per
 * SM; 7B Q4_0 +7% at 16: docs/PERF.md); the register budget is MINB blocks of 256 threads per
 * SM either way. (Splitting a row pair across the warps of a block, summed through shared
 * memory, was measured and dropped: no faster on 7B, 5% slower on TinyLlama.) */
template <int T, bool GLU, bool Q8, bool LUT, int NS>
__global__ void __launch_bounds__(NS == 1 ? 512 : 256) __maxnreg__(NS == 1 ? mv_tr<T>::REGS : 255)
mv_kernel(const rl_mv_args a) {
    constexpr int U = mv_tr<T>::U;
    /* decoding's F16 / BF16 rows issue their next units' loads before the current dots (below);
     * H200, tg128, docs/PERF.md v2.27: 7B F16 +3.1-3.3%, 8B F16 +2.4-2.9% */
    constexpr bool PIPE = NS == 1 && !Q8 && (T == RL_F16 || T == RL_BF16);
    extern __shared__ float xs[];
    __shared__ double red[32];
    __shared__ uint32_t lut[LUT ? 256 : 1]; /* RQ2's table decoder */
    rl_pdl_trigger();
    const int n = a.n, tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5;
    /* nch 32-value chunks (the activation planes), nu lane units of CW values */
    const int nw = nt >> 5, nch = n / 32, nu = n / mv_tr<T>::CW, J = (nu + 31) / 32, G = gridDim.x * nw;
    const int items = mv_items(a, GLU);
    int p = blockIdx.x * nw + warp;
    raw_chunk<T> rw[U][2];
    bool pre = p < items;
    if (pre) ld_units<T>(rw, mv_resolve(a, p, GLU), lane, 0, nu);
    rl_pdl_wait();
    /* column s's staged input at xb + s * cb: shared memory (NS 1) or the prep kernel's */
    const char *xb = (const char *)xs;
    const size_t cb = NS == 1 ? 0 : col_bytes(n);
    if constexpr (LUT)
        for (int i = tid; i < 256; i += nt) lut[i] = rq2_lut_entry((uint32_t)i);
    if constexpr (NS == 1) mv_stage<T == RL_RQ2 ? (LUT ? 1 : 2) : 0, Q8, (mv_tr<T>::NV >= 4 ? 4 : 8)>(a, a.x, xs, red);
    else {
        xb = (const char *)a.scratch;
        __syncthreads(); /* the table */
    }

    const int pos = a.io ? a.io->pos : 0;
    if constexpr (PIPE) {
        /* the next units' loads (this item's next U, or the next item's first U) are issued
         * before the current units' dots, so a lane always has a round in flight; the same
         * units in the same order, so the same sums */
        raw_chunk<T> rn[U][2];
        for (; p < items; p += G) {
            const mv_task t = mv_resolve(a, p, GLU);
            float acc[2] = {0.0f, 0.0f};
            for (int j0 = 0; j0 < J; j0 += U) {
                const bool last = j0 + U >= J;
                const int pn = last ? p + G : p;
                if (pn < items) ld_units<T>(rn, last ? mv_resolve(a, pn, GLU) : t, lane, last ? 0 : j0 + U, nu);
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int c = lane + 32 * (j0 + u);
                    if (c < nu) dot2<T>(rw[u], xs + c * 36, acc, t.w, t.s, c);
                }
#pragma unroll
                for (int u = 0; u < U; u++) {
                    rw[u][0] = rn[u][0];
                    rw[u][1] = rn[u][1];
                }
            }
            mv_finish<GLU>(a, t, p, acc, pos, 0);
        }
    } else
    for (; p < items; p += G) {
        mv_task t = mv_resolve(a, p, GLU);
        float acc[NS][2];
#pragma unroll
        for (int s = 0; s < NS; s++) acc[s][0] = acc[s][1] = 0.0f;
        for (int j0 = 0; j0 < J; j0 += U) {
            if (!pre) ld_units<T>(rw, t, lane, j0, nu);
            pre = false;
#pragma unroll
            for (int u = 0; u < U; u++) {
                int c = lane + 32 * (j0 + u);
                if (c >= nu) continue;
#pragma unroll
                for (int s = 0; s < NS; s++) {
                    const float *xs_s = (const float *)(xb + s * cb);
                    const int8_t *xq = (const int8_t *)((const char *)xs_s + xs_f32_bytes(n));
                    const float *xd = (const float *)(xq + n);
                    const int *xsum = (const int *)(xd + nch);
                    if constexpr (T == RL_RQ2) {
                        if constexpr (Q8) rq2_q8<LUT>(rw[u], xq, xd, xsum, c, lut, acc[s], 0);
                        else rq2_f32<LUT>(rw[u], xs_s, c, lut, acc[s]);
                    } else if constexpr (T == RL_RQ4) {
                        if constexpr (Q8) rq4_q8(rw[u], xq, xd, xsum, c, acc[s]);
                        else rq4_f32(rw[u], xs_s, c, acc[s]);
                    } else if constexpr (Q8) {
                        const int4 xa = *(const int4 *)(xq + c * 32), xc = *(const int4 *)(xq + c * 32 + 16);
                        const int xw[8] = {xa.x, xa.y, xa.z, xa.w, xc.x, xc.y, xc.z, xc.w};
#pragma unroll
                        for (int i = 0; i < 2; i++) {
                            if constexpr (mv_tr<T>::NV > 0) acc[s][i] += dot_q8<T>(rw[u][i], xw, xd[c], xsum[c]);
                            else acc[s][i] += kq_dot_q8<T>(t.w[i], t.s[i], c, xw, xd[c], xsum[c]);
                        }
                    } else {
                        dot2<T>(rw[u], xs_s + c * 36, acc[s], t.w, t.s, c);
                    }
                }
            }
        }
#pragma unroll
        for (int s = 0; s < NS; s++) mv_finish<GLU>(a, t, p, acc[s], pos, s);
    }
}

typedef void (*mv_fn)(const rl_mv_args);

template <int T, bool LUT, int NS> static mv_fn mv_pick_ns(bool glu, bool q8) {
    if constexpr (q8_ok(T))
        if (q8) return glu ? mv_kernel<T, true, true, LUT, NS> : mv_kernel<T, false, true, LUT, NS>;
    return glu ? mv_kernel<T, true, false, LUT, NS> : mv_kernel<T, false, false, LUT, NS>;
}

template <int T, bool LUT = false> static mv_fn mv_pick(bool glu, bool q8, int ns) {
    switch (ns) {
    case 4: return mv_pick_ns<T, LUT, 4>(glu, q8);
    case 8: return mv_pick_ns<T, LUT, 8>(glu, q8);
    case 16: return mv_pick_ns<T, LUT, 16>(glu, q8);
    default: return mv_pick_ns<T, LUT, 1>(glu, q8);
    }
}

/* lut: RQ2's code decoder (RL_CUDA_RQ2_LUT), a template argument so the inner loop has no
 * branch on it; the other types have one kernel. */
static mv_fn mv_kernel_for(uint32_t type, bool glu, bool q8, bool lut, int ns) {
    switch (type) {
    case RL_RQ2: return lut ? mv_pick<RL_RQ2, true>(glu, q8, ns) : mv_pick<RL_RQ2, false>(glu, q8, ns);
    case RL_F32: return mv_pick<RL_F32>(glu, q8, ns);
    case RL_F16: return mv_pick<RL_F16>(glu, q8, ns);
    case RL_BF16: return mv_pick<RL_BF16>(glu, q8, ns);
    case RL_Q4_0: return mv_pick<RL_Q4_0>(glu, q8, ns);
    case RL_Q8_0: return mv_pick<RL_Q8_0>(glu, q8, ns);
    case RL_FP8: return mv_pick<RL_FP8>(glu, q8, ns);
    case RL_Q4_1: return mv_pick<RL_Q4_1>(glu, q8, ns);
    case RL_Q5_0: return mv_pick<RL_Q5_0>(glu, q8, ns);
    case RL_Q5_1: return mv_pick<RL_Q5_1>(glu, q8, ns);
    case RL_Q4_K: return mv_pick<RL_Q4_K>(glu, q8, ns);
    case RL_Q5_K: return mv_pick<RL_Q5_K>(glu, q8, ns);
    case RL_RQ4: return mv_pick<RL_RQ4>(glu, q8, ns);
    default: return mv_pick<RL_Q6_K>(glu, q8, ns);
    }
}

bool rl_mv_q8(uint32_t type) { return q8_ok((int)type); }

/* The weight types this backend has kernels for: the one list (mv_kernel_for dispatches it). */
static const uint32_t k_types[] = {RL_F32, RL_F16, RL_BF16, RL_Q4_0, RL_Q8_0, RL_Q4_1, RL_Q5_0, RL_Q5_1, RL_Q4_K, RL_Q5_K, RL_Q6_K, RL_RQ2, RL_RQ4, RL_FP8};

bool rl_mv_type_ok(uint32_t type) {
    for (uint32_t t : k_types)
        if (t == type) return true;
    return false;
}

size_t rl_mv_scratch_bytes(int n, int ns) { return (size_t)ns * col_bytes(n) + (ns > 1 ? mvx_frag_bytes(n) : 0); }

size_t rl_mv_smem(int n, bool q8) { return stage_bytes(n, q8); }

static bool aligned(const void *p, size_t row, size_t to) { return (uintptr_t)p % to == 0 && row % to == 0; }

bool rl_mv_planes_aligned(const rl_mv_args *a, size_t s_to, bool s_needed) {
    for (int i = 0; i < (a->mode == RL_MV_GLU ? 2 : a->nseg); i++) {
        const rl_dmat &m = a->seg[i].w;
        if (m.type != a->seg[0].w.type || !aligned(m.q, m.q_row, 16) || (m.s ? !aligned(m.s, m.s_row, s_to) : s_needed))
            return false;
    }
    return true;
}

int rl_mv_prepare(int max_n) {
    for (uint32_t t : k_types)
        for (int g = 0; g < 2; g++)
            for (int q = 0; q < 2; q++)
                for (int l = 0; l < 1 + (t == RL_RQ2); l++) {
                    /* never lowered: a narrower model opened later (a draft, a test's) shares them */
                    cudaError_t err = rl_smem_at_least(mv_kernel_for(t, g, q, l, 1), rl_mv_smem(max_n, q));
                    if (err != cudaSuccess) return (int)err;
                }
    const int err = rl_mvs_prepare();
    return err ? err : rl_mvx_prepare();
}

/* The staging kernel of a chunk launch: the 8-bit plane's layout is the matvec's (mv_stage XL:
 * 0 plain, RQ2's 1 rotated for the table decoder, 2 rotated and transposed for shifts). */
static mv_fn prep_kernel_for(uint32_t type, bool q8, bool lut) {
    if (!q8) return mv_prep_kernel<0, false>;
    if (type != RL_RQ2) return mv_prep_kernel<0, true>;
    return lut ? mv_prep_kernel<1, true> : mv_prep_kernel<2, true>;
}

/* Blocks of mv_kernel f resident per SM at once (occupancy, then the knob's cap). */
static int mv_occupancy(mv_fn f, int threads, size_t smem, const rl_cuda_knobs *k) {
    int occ = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, f, threads, smem) != cudaSuccess || occ < 1)
        occ = 1;
    return occ < k->mv_blocks_per_sm ? occ : k->mv_blocks_per_sm;
}

/* Warps per block of the one-token kernel f1: the knob's, halved while that keeps more warps
 * resident (Q8_0 and RQ2, at 80 registers, fit one 16-warp block per SM, 16 warps, but three
 * 8-warp blocks, 24). A chunk's staging kernel uses the same size, so its sums are the same. */
static int mv_block_warps(mv_fn f1, int warps, size_t smem, const rl_cuda_knobs *k) {
    while (warps > 8 && mv_occupancy(f1, warps / 2 * 32, smem, k) * (warps / 2) >
                            mv_occupancy(f1, warps * 32, smem, k) * warps)
        warps /= 2;
    return warps;
}

/* One launch of a uniform-type argument set. Grid: enough blocks for one item per warp, capped
 * at what is resident at once (occupancy, and the knob), so there is no second wave: warps
 * that get several items loop. A chunk (ns > 1) first stages its columns with the one-column
 * prologue (the decode kernel's block size, so the same bits), then runs blocks of at most 8
 * warps (the ns-column kernels need the registers). */
static int mv_launch1(const rl_mv_args *a, const rl_cuda_knobs *k, int n_sm, cudaStream_t st, rl_mv_count *n) {
    bool glu = a->mode == RL_MV_GLU;
    const int items = mv_items(*a, glu);
    uint32_t type = a->seg[0].w.type;
    bool q8 = a->fast && rl_mv_q8(type), lut = k->rq2_lut != 0;
    int ns = a->ns > 1 ? a->ns : 1, warps = k->mv_warps, launches = 1;
    if (ns != 1 && ns != 4 && ns != 8 && ns != 16) return -1;
    const int streamed = rl_mvs_launch(a, k, n_sm, st, n);
    if (streamed) return streamed;
    mv_fn f = mv_kernel_for(type, glu, q8, lut, ns);
    warps = mv_block_warps(mv_kernel_for(type, glu, q8, lut, 1), warps, rl_mv_smem(a->n, q8), k);
    if (ns > 1) { /* stage the columns: the one-column prologue, once per column, with the block
                   * size of the kernel that decodes one token (streamed or not), so the same bits */
        rl_mv_args one = *a;
        one.ns = 1;
        const int sw = rl_mvs_warps(&one, k);
        if (rl_mvx_applies(a, k)) return rl_mvx_launch(a, k, n_sm, sw ? sw : warps, st);
        if (a->staged) return -1; /* only the tensor-core chunk reads a plane staged elsewhere */
        if (rl_launch(prep_kernel_for(type, q8, lut), dim3(ns), dim3((sw ? sw : warps) * 32), 0, st, k->pdl == 1, *a))
            return -1;
        launches = 2;
        if (warps > 8) warps = 8;
    }
    size_t smem = ns == 1 ? rl_mv_smem(a->n, q8) : 0;
    int blocks = (items + warps - 1) / warps, cap = mv_occupancy(f, warps * 32, smem, k) * n_sm;
    if (blocks > cap) blocks = cap;
    if (blocks < 1) blocks = 1;
    return rl_launch(f, dim3(blocks), dim3(warps * 32), smem, st, k->pdl == 1, *a) ? -1 : launches;
}

int rl_mv_launch(const rl_mv_args *a, const rl_cuda_knobs *k, int n_sm, cudaStream_t st, rl_mv_count *cnt) {
    bool same = true;
    for (int i = 1; i < a->nseg; i++) same = same && a->seg[i].w.type == a->seg[0].w.type;
    if (same) return mv_launch1(a, k, n_sm, st, cnt);
    int n = 0;
    if (a->mode == RL_MV_GLU) { /* gate to y, then y = silu(y) * up */
        rl_mv_args g = *a;
        g.nseg = 1;
        g.mode = RL_MV_STORE;
        rl_mv_args u = g;
        u.seg[0].w = a->seg[1].w;
        u.mode = RL_MV_GLU_MUL;
        int lg = mv_launch1(&g, k, n_sm, st, cnt), lu = lg < 0 ? -1 : mv_launch1(&u, k, n_sm, st, cnt);
        return lg < 0 || lu < 0 ? -1 : lg + lu;
    }
    /* one launch per run of segments of one type (Q4_K_M's Q and K beside a Q6_K V: two
     * launches, not three; each launch has a fixed cost of several microseconds), or one for
     * two runs where both stream (rl_mvs_launch2) */
    rl_mv_args run[3]; /* at most one run per segment (rl_mv_args seg) */
    int nrun = 0;
    for (int i = 0, j; i < a->nseg; i = j) {
        for (j = i + 1; j < a->nseg && a->seg[j].w.type == a->seg[i].w.type;) j++;
        rl_mv_args *r = &run[nrun++];
        *r = *a;
        for (int g = i; g < j; g++) r->seg[g - i] = a->seg[g];
        r->nseg = j - i;
    }
    if (nrun == 2) { /* rl_mvs_launch2 takes decoding's one column only (rl_mvs_applies) */
        const int l2 = rl_mvs_launch2(&run[0], &run[1], k, n_sm, st, cnt);
        if (l2) return l2;
    }
    for (int i = 0; i < nrun; i++) {
        int l1 = mv_launch1(&run[i], k, n_sm, st, cnt);
        if (l1 < 0) return -1;
        n += l1;
    }
    return n;
}
