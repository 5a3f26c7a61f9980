/* The matvec's device code shared by its kernels: matvec.cu's mv_kernel (weights loaded into
 * registers; every type, exact chunks of NS tokens) and mvs.cu's mvs_kernel (weights streamed
 * through a shared-memory ring; decoding, the plane types) take a unit's values through the
 * same dot functions in the same order, so they give the same bits; mvx.cu's tensor-core
 * chunk reproduces their order with mv_tree32 and shares their epilogue. Device code only. */
#ifndef RL_CUDA_MV_CUH
#define RL_CUDA_MV_CUH

#include <cuda_fp16.h>

#include "dequant.cuh"
#include "kernels.h"
#include "types.h"

#define XPAD(i) ((i) + ((i) >> 5) * 4) /* padded shared-memory index of input element i */

/* Shared memory of one block for an input of n values: the staged fp32 input (padded), then,
 * with 8-bit activations, its rl_q8a form in three planes: int8 values [n] (16-byte aligned),
 * scales d [n/32] and integer sums [n/32]. */
__host__ __device__ inline size_t xs_f32_bytes(int n) { return ((size_t)XPAD(n) * 4 + 15) & ~(size_t)15; }
/* The whole staged input: fp32, then with 8-bit activations int8 [n], d [n/32], sums [n/32]. */
__host__ __device__ inline size_t stage_bytes(int n, bool q8) {
    return xs_f32_bytes(n) + (q8 ? (size_t)n + (size_t)(n / 32) * 8 : 0) + 16;
}

/* cp.async of 16 (L2 only) or 4 bytes to a shared-memory address; cp16z copies the first
 * `bytes` of 16 (0..16) and zero-fills the rest, reading nothing past them. */
__device__ __forceinline__ void cp16(uint32_t dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp16z(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
/* cp16z's for N = 4 or 8 bytes (L1 too): the first `bytes` of N, the rest zero-filled */
template <int N> __device__ __forceinline__ void cp_z(uint32_t dst, const void *src, int bytes) {
    static_assert(N == 4 || N == 8, "cp.async.ca copies 4, 8 or 16 bytes");
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dst), "l"(src), "n"(N), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp4(uint32_t dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
/* %globaltimer (ns, the same clock on every SM): the traces of persist.cu and the kernel lab */
__device__ __forceinline__ unsigned long long rl_gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
/* A grid-wide counter's two halves (persist.cu's barrier, lab_lat's): a release add, so the
 * writes ordered before it (by a __syncthreads, for the block's) are visible to whoever
 * acquires the new value; and the acquire load that waits for it. */
__device__ __forceinline__ void rl_red_release(unsigned long long *p) {
    asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(p) : "memory");
}
__device__ __forceinline__ unsigned long long rl_ld_acquire(const unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* ---- matvec ------------------------------------------------------------------------------ */

/* Q4_0 / Q8_0 chunk · x with the scale factored out: d * sum((q - z) * x). Integer to float
 * without the quarter-rate I2F: a byte permute builds the float 2^23 + q (exactly), one FADD
 * removes 2^23 + z: full-rate ops instead of a quarter-rate I2F per weight (lesson 4; with
 * the attention rework it took 1.1B Q4_0 from 724 to 944 tok/s). Not the CPU's op order,
 * which the 1e-3 gate does not need; deq_q4_0 / deq_q8_0 (embedding) keep the reference order. */
#define MAGIC 0x4B000000u /* bits of 2^23 */
__device__ __forceinline__ float mag(uint32_t u, int b) {
    return __uint_as_float(__byte_perm(u, MAGIC, 0x7650 + b));
}

/* A dequantised chunk's 32 values . x, two interleaved sums (the fp32 dot of every type that
 * chunk_dot dequantises first; the streamed Q4_K takes it too, so both give the same bits). */
__device__ __forceinline__ float dot32_f32(const float *v, const float *xc) {
    float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; j += 4) {
        float4 xx = *(const float4 *)(xc + j);
        a0 = fmaf(v[j], xx.x, a0);
        a1 = fmaf(v[j + 1], xx.y, a1);
        a0 = fmaf(v[j + 2], xx.z, a0);
        a1 = fmaf(v[j + 3], xx.w, a1);
    }
    return a0 + a1;
}

template <int T>
__device__ __forceinline__ float chunk_dot(const uint8_t *w, const uint8_t *s, int c, const float *xc) {
    if (T == RL_Q4_0) {
        uint4 t = __ldg((const uint4 *)(w + (size_t)c * 16));
        float d = h2f(__ldg((const unsigned short *)s + c));
        uint32_t u[4] = {t.x, t.y, t.z, t.w};
        float a0 = 0.0f, a1 = 0.0f;
        const float z = 8388616.0f; /* 2^23 + 8 */
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t lo = u[k] & 0x0F0F0F0Fu, hi = (u[k] >> 4) & 0x0F0F0F0Fu;
            float4 xl = *(const float4 *)(xc + 4 * k), xh = *(const float4 *)(xc + 16 + 4 * k);
            a0 = fmaf(mag(lo, 0) - z, xl.x, a0);
            a1 = fmaf(mag(hi, 0) - z, xh.x, a1);
            a0 = fmaf(mag(lo, 1) - z, xl.y, a0);
            a1 = fmaf(mag(hi, 1) - z, xh.y, a1);
            a0 = fmaf(mag(lo, 2) - z, xl.z, a0);
            a1 = fmaf(mag(hi, 2) - z, xh.z, a1);
            a0 = fmaf(mag(lo, 3) - z, xl.w, a0);
            a1 = fmaf(mag(hi, 3) - z, xh.w, a1);
        }
        return d * (a0 + a1);
    } else if (T == RL_Q8_0) {
        const uint4 *p = (const uint4 *)(w + (size_t)c * 32);
        uint4 t0 = __ldg(p), t1 = __ldg(p + 1);
        float d = h2f(__ldg((const unsigned short *)s + c));
        uint32_t u[8] = {t0.x, t0.y, t0.z, t0.w, t1.x, t1.y, t1.z, t1.w};
        float a0 = 0.0f, a1 = 0.0f;
        const float z = 8388736.0f; /* 2^23 + 128 */
#pragma unroll
        for (int k = 0; k < 8; k++) {
            uint32_t v = u[k] ^ 0x80808080u; /* int8 q -> q + 128 */
            float4 xx = *(const float4 *)(xc + 4 * k);
            a0 = fmaf(mag(v, 0) - z, xx.x, a0);
            a1 = fmaf(mag(v, 1) - z, xx.y, a1);
            a0 = fmaf(mag(v, 2) - z, xx.z, a0);
            a1 = fmaf(mag(v, 3) - z, xx.w, a1);
        }
        return d * (a0 + a1);
    } else {
        float v[32];
        deq32<T>(w, s, c, v);
        return dot32_f32(v, xc);
    }
}

/* ---- the matvec kernel (one instantiation per weight type) ------------------------------ */

/* Per type: CW values per lane unit (a "chunk" of the loops below: 32, except RQ2's whole
 * 64-value block), NV 16-byte loads per unit (0: the K-quants, which load inside chunk_dot),
 * and U units per lane loaded before any is used. A warp works on two rows at once, so a lane
 * has 2 * U * NV loads in flight (Q4_0 4 + 4 scale loads, Q8_0 8, F16/BF16 8 and the next
 * unit's 8 (mv_kernel's PIPE), F32 16, RQ2 4 + 4 (d, m) loads). */
template <int T> struct mv_tr {
    static constexpr int CW = T == RL_RQ2 || T == RL_RQ4 ? 64 : 32;
    static constexpr int NV = (T == RL_Q4_0 || T == RL_RQ2) ? 1 : (T == RL_Q8_0 || T == RL_FP8 || T == RL_RQ4) ? 2 : (T == RL_F16 || T == RL_BF16) ? 4 : T == RL_F32 ? 8 : 0;
    static constexpr int U = (T == RL_Q4_0 || T == RL_Q8_0 || T == RL_FP8 || T == RL_RQ2 || T == RL_RQ4) ? 2 : 1;
    /* F16 / BF16: 2, the registers for mv_kernel's next round of loads in flight beside the
     * current one (at 4 they spill: 7B F16 -32%, docs/PERF.md v2.27) */
    static constexpr int MINB = T == RL_Q4_0 ? 4 : (T == RL_Q8_0 || T == RL_FP8 || T == RL_RQ2 || T == RL_RQ4) ? 3 : 2;
    /* registers per thread: MINB blocks of 256 threads resident per SM, whatever the block size
     * (the decode kernel takes blocks of up to 512 threads: __maxnreg__, not launch bounds) */
    static constexpr int REGS = (65536 / (256 * MINB)) & ~7;
};

/* Types whose matvec has the 8-bit-activation path (the CPU's fast path, src/quant.h): the
 * input is rounded once per block to rl_q8a (d = amax/127, q = rint(x * 127/amax), exactly as
 * rl_q8a_quant_row_ref), and each 32-value chunk is an exact integer dot (dp4a) times the
 * scales, so a chunk's term is the CPU's bit for bit; only the order the terms are summed
 * differs. */
__host__ __device__ constexpr bool q8_ok(int T) {
    return T == RL_Q4_0 || T == RL_Q8_0 || T == RL_Q4_1 || T == RL_Q5_0 || T == RL_Q5_1 || T == RL_Q4_K || T == RL_Q5_K ||
           T == RL_Q6_K || T == RL_RQ2 || T == RL_RQ4;
}

template <int T> struct raw_chunk {
    uint4 v[mv_tr<T>::NV > 0 ? mv_tr<T>::NV : 1];
    uint32_t d; /* scale bits: fp16 (Q4_0, Q8_0), bf16 (FP8); RQ2, RQ4: the (d, m) fp16 pair, d low */
};
/* Q6_K's unit in the streamed matvec's registers: low and high code bits, and the sub-scales
 * and d (dequant.cuh q6k_vals). */
template <> struct raw_chunk<RL_Q6_K> {
    uint4 v[1];
    uint2 hi;
    uint32_t sd;
};
/* Q5_K's unit in the streamed matvec's registers: low 4 bits, fifth bits, and what it takes from
 * its super-block's header (dequant.cuh). */
template <> struct raw_chunk<RL_Q5_K> {
    uint4 v[1];
    uint32_t hi;
    q4k_sub k;
};
/* Q4_K's unit in the streamed matvec's registers: a sub-block's 16 bytes of codes and what it
 * takes from its super-block's header (dequant.cuh q4k_sub). The register kernel loads K-quants
 * inside the dot. */
template <> struct raw_chunk<RL_Q4_K> {
    uint4 v[1];
    q4k_sub k;
};

/* Both rows' (d, m) pairs of an RQ2 / RQ4 item, as floats (the fp32 dots' prologue). */
template <int T> __device__ __forceinline__ void rq_dm2(const raw_chunk<T> *r, float *d, float *m) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float2 dm = rq_dm(r[i].d);
        d[i] = dm.x;
        m[i] = dm.y;
    }
}

template <int T>
__device__ __forceinline__ void ld_chunk(raw_chunk<T> &r, const uint8_t *w, const uint8_t *s, int c) {
    constexpr int NV = mv_tr<T>::NV;
    if constexpr (NV > 0) {
        const uint4 *p = (const uint4 *)(w + (size_t)c * (16 * NV));
#pragma unroll
        for (int k = 0; k < NV; k++) r.v[k] = __ldg(p + k);
        if constexpr (T == RL_Q4_0 || T == RL_Q8_0 || T == RL_FP8) r.d = __ldg((const unsigned short *)s + c);
        if constexpr (T == RL_RQ2 || T == RL_RQ4) r.d = __ldg((const unsigned int *)s + c);
    }
}

/* The 8-bit code types' four values of one word, exact in float: Q8_0's int8 codes (q + 128
 * through the 2^23 trick, then - (2^23 + 128)) or FP8's e4m3 values; and the chunk's scale
 * that multiplies their sum: Q8_0's fp16 d, FP8's bf16 d times E4M3_INV (dequant.cuh: the
 * factor by which e4m3x4's values are short on this architecture). */
template <int T> __device__ __forceinline__ void dec8x4(uint32_t u, float f[4]) {
    if constexpr (T == RL_Q8_0) {
        const float z = 8388736.0f; /* 2^23 + 128 */
        const uint32_t v = u ^ 0x80808080u; /* int8 q -> q + 128 */
#pragma unroll
        for (int j = 0; j < 4; j++) f[j] = mag(v, j) - z;
    } else {
        e4m3x4(u, f);
    }
}
template <int T> __device__ __forceinline__ float scale8(uint32_t d) {
    if constexpr (T == RL_Q8_0) return h2f((uint16_t)d);
    else return __fmul_rn(bf2f(d), E4M3_INV);
}

/* acc[i] += chunk c of row i · xc for both rows, in chunk_dot's op order (so the sums are those
 * of v1; FP8, which chunk_dot does not take, factors d out of the chunk as Q8_0 does); x is
 * read from shared memory once for the two rows. */
template <int T>
__device__ __forceinline__ void dot2(const raw_chunk<T> *r, const float *xc, float *acc,
                                     const uint8_t *const *w, const uint8_t *const *s, int c) {
    if constexpr (T == RL_Q4_0) {
        float a0[2] = {0.0f, 0.0f}, a1[2] = {0.0f, 0.0f};
        const float z = 8388616.0f; /* 2^23 + 8 */
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float4 xl = *(const float4 *)(xc + 4 * k), xh = *(const float4 *)(xc + 16 + 4 * k);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                uint32_t u = word(r[i].v[0], k), lo = u & 0x0F0F0F0Fu, hi = (u >> 4) & 0x0F0F0F0Fu;
                a0[i] = fmaf(mag(lo, 0) - z, xl.x, a0[i]);
                a1[i] = fmaf(mag(hi, 0) - z, xh.x, a1[i]);
                a0[i] = fmaf(mag(lo, 1) - z, xl.y, a0[i]);
                a1[i] = fmaf(mag(hi, 1) - z, xh.y, a1[i]);
                a0[i] = fmaf(mag(lo, 2) - z, xl.z, a0[i]);
                a1[i] = fmaf(mag(hi, 2) - z, xh.z, a1[i]);
                a0[i] = fmaf(mag(lo, 3) - z, xl.w, a0[i]);
                a1[i] = fmaf(mag(hi, 3) - z, xh.w, a1[i]);
            }
        }
#pragma unroll
        for (int i = 0; i < 2; i++) acc[i] += h2f((uint16_t)r[i].d) * (a0[i] + a1[i]);
    } else if constexpr (T == RL_Q8_0 || T == RL_FP8) { /* four 8-bit codes per word */
        float a0[2] = {0.0f, 0.0f}, a1[2] = {0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float4 xx = *(const float4 *)(xc + 4 * k);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                float f[4];
                dec8x4<T>(word(r[i].v[k / 4], k % 4), f);
                a0[i] = fmaf(f[0], xx.x, a0[i]);
                a1[i] = fmaf(f[1], xx.y, a1[i]);
                a0[i] = fmaf(f[2], xx.z, a0[i]);
                a1[i] = fmaf(f[3], xx.w, a1[i]);
            }
        }
#pragma unroll
        for (int i = 0; i < 2; i++) acc[i] += scale8<T>(r[i].d) * (a0[i] + a1[i]);
    } else if constexpr (mv_tr<T>::NV > 0) { /* F32, F16, BF16: value j of the chunk is v(j) */
        float a0[2] = {0.0f, 0.0f}, a1[2] = {0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < 8; j++) { /* values 4j .. 4j+3 */
            float4 xx = *(const float4 *)(xc + 4 * j);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                float v0, v1, v2, v3;
                if constexpr (T == RL_F32) {
                    v0 = __uint_as_float(r[i].v[j].x); v1 = __uint_as_float(r[i].v[j].y);
                    v2 = __uint_as_float(r[i].v[j].z); v3 = __uint_as_float(r[i].v[j].w);
                } else {
                    uint32_t p = word(r[i].v[j / 2], 2 * (j % 2)), q = word(r[i].v[j / 2], 2 * (j % 2) + 1);
                    if constexpr (T == RL_BF16) {
                        v0 = __uint_as_float(p << 16); v1 = __uint_as_float(p & 0xffff0000u);
                        v2 = __uint_as_float(q << 16); v3 = __uint_as_float(q & 0xffff0000u);
                    } else {
                        v0 = h2f((uint16_t)(p & 0xffff)); v1 = h2f((uint16_t)(p >> 16));
                        v2 = h2f((uint16_t)(q & 0xffff)); v3 = h2f((uint16_t)(q >> 16));
                    }
                }
                a0[i] = fmaf(v0, xx.x, a0[i]);
                a1[i] = fmaf(v1, xx.y, a1[i]);
                a0[i] = fmaf(v2, xx.z, a0[i]);
                a1[i] = fmaf(v3, xx.w, a1[i]);
            }
        }
#pragma unroll
        for (int i = 0; i < 2; i++) acc[i] += a0[i] + a1[i];
    } else { /* K-quants: load and dequantise inside chunk_dot */
#pragma unroll
        for (int i = 0; i < 2; i++) acc[i] += chunk_dot<T>(w[i], s[i], c, xc);
    }
}

/* The integer dot of 32 4-bit codes in Q4_0's order (byte i of q: value i low, value 16 + i
 * high) with int8 inputs, xl the words of values 0-15, xh of 16-31: Q4_0's, Q4_K's and RQ4's
 * halves. */
__device__ __forceinline__ int nib_dot(const uint4 &q, const int *xl, const int *xh) {
    int dot = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t u = word(q, k);
        dot = __dp4a((int)(u & 0x0F0F0F0Fu), xl[k], dot);
        dot = __dp4a((int)((u >> 4) & 0x0F0F0F0Fu), xh[k], dot);
    }
    return dot;
}

/* The 8-bit-activation chunk dot of one row: xw = the chunk's 32 int8 inputs as 8 words, xd
 * their scale, xsum their integer sum. Q4_0: sum((q - 8) * x) = dp4a(q, x) - 8 * sum(x).
 * The term is (d_w * d_x) * (float)dot, the CPU reference's expression, bit for bit. */
template <int T>
__device__ __forceinline__ float dot_q8(const raw_chunk<T> &r, const int *xw, float xd, int xsum) {
    int dot = 0;
    if constexpr (T == RL_Q4_0) {
        dot = nib_dot(r.v[0], xw, xw + 4) - 8 * xsum;
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) dot = __dp4a((int)word(r.v[k / 4], k % 4), xw[k], dot);
    }
    /* both products rounded: a plain '*' here is fused into the caller's accumulate (FFMA),
     * and the CPU reference (built without contraction) rounds the term first */
    return __fmul_rn(__fmul_rn(h2f((uint16_t)r.d), xd), (float)dot);
}

/* Q4_K sub-block (codes q in Q4_0's order, k from its super-block's header: dequant.cuh) against
 * the chunk's int8 inputs: kq_dot_q8's Q4_K term, shared with the streamed matvec. */
__device__ __forceinline__ float q4k_dot_q8(const uint4 &q, const q4k_sub &k, const int *xw, float xd, int xsum) {
    const int dot = nib_dot(q, xw, xw + 4);
    const float dx = __fmul_rn(h2f((uint16_t)(k.dm & 0xffff)), xd), sx = __fmul_rn(xd, (float)xsum);
    return __fsub_rn(__fmul_rn(dx, (float)(k.sc * dot)), __fmul_rn(__fmul_rn(h2f((uint16_t)(k.dm >> 16)), (float)k.mn), sx));
}

/* Q5_K sub-block (dequant.cuh q5k_codes) against the chunk's int8 inputs: Q4_K's expression with
 * 5-bit codes (the CPU reference's Q5_K term); shared with the streamed matvec. */
__device__ __forceinline__ float q5k_dot_q8(const uint4 &lo, uint32_t hi, const q4k_sub &k, const int *xw, float xd, int xsum) {
    uint32_t q[8];
    q5k_codes(lo, hi, q);
    int dot = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) dot = __dp4a((int)q[i], xw[i], dot);
    const float dx = __fmul_rn(h2f((uint16_t)(k.dm & 0xffff)), xd), sx = __fmul_rn(xd, (float)xsum);
    return __fsub_rn(__fmul_rn(dx, (float)(k.sc * dot)), __fmul_rn(__fmul_rn(h2f((uint16_t)(k.dm >> 16)), (float)k.mn), sx));
}

/* Q6_K unit (dequant.cuh q6k_codes) against the chunk's int8 inputs: the CPU reference's
 * (d * d_x) * (float)(sc_lo * dot_lo + sc_hi * dot_hi), dot over (q - 32) * x; shared with the
 * streamed matvec. */
__device__ __forceinline__ float q6k_dot_q8(const uint4 &lo, const uint2 &hi, uint32_t sd, const int *xw, float xd) {
    uint32_t q[8];
    q6k_codes(lo, hi, q);
    int dl = 0, dh = 0, xl = 0, xh = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        dl = __dp4a((int)q[k], xw[k], dl);
        xl = __dp4a(0x01010101, xw[k], xl);
        dh = __dp4a((int)q[4 + k], xw[4 + k], dh);
        xh = __dp4a(0x01010101, xw[4 + k], xh);
    }
    const int dot = (int)(int8_t)(sd & 0xff) * (dl - 32 * xl) + (int)(int8_t)((sd >> 8) & 0xff) * (dh - 32 * xh);
    return __fmul_rn(__fmul_rn(h2f((uint16_t)(sd >> 16)), xd), (float)dot);
}

/* K-quant sub-block c (32 values of super-block c / 8) against the chunk's int8 inputs, with the
 * CPU reference's integer sums and float expressions (src/quant.c ref_fast_dot):
 *   Q4_K/Q5_K: (d * d_x) * (float)(sc * dot) - (dmin * m) * s_x,  s_x = d_x * (float)sum(x)
 *   Q6_K:      (d * d_x) * (float)(sc_lo * dot_lo + sc_hi * dot_hi), dot over (q - 32) * x
 * Q4_K, Q5_K and Q6_K are repacked at upload (dequant.cuh). */
template <int T>
__device__ __forceinline__ float kq_dot_q8(const uint8_t *w, const uint8_t *s, int c, const int *xw,
                                           float xd, int xsum) {
    const int sb = c % 8;
    if constexpr (T == RL_Q4_1 || T == RL_Q5_0 || T == RL_Q5_1) {
        /* the CPU reference's terms (src/quant.c ref_fast_dot): (d·dx)·dot with Q5_0's -16 inside
         * the integer dot, and for Q4_1 / Q5_1 m·s, s = dx·(float)Σx */
        constexpr bool MIN = qn_tr<T>::MIN;
        const uint8_t *b = w + (size_t)c * qn_tr<T>::BYTES;
        uint32_t q[8];
        qn_words<T>(b, q);
        int dot = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) dot = __dp4a((int)q[k], xw[k], dot);
        if (!MIN) dot -= 16 * xsum;
        float t = __fmul_rn(__fmul_rn(ldh(b), xd), (float)dot);
        if (MIN) t = __fadd_rn(t, __fmul_rn(ldh(b + 2), __fmul_rn(xd, (float)xsum)));
        return t;
    } else if constexpr (T == RL_Q4_K) {
        return q4k_dot_q8(__ldg((const uint4 *)(w + (size_t)c * 16)), q4k_sub_of(__ldg((const uint4 *)(s + (size_t)(c / 8) * 16)), sb),
                          xw, xd, xsum);
    } else if constexpr (T == RL_Q5_K) {
        uint4 lo;
        uint32_t hi;
        q4k_sub k;
        q5k_load(w, s, c, &lo, &hi, &k);
        return q5k_dot_q8(lo, hi, k, xw, xd, xsum);
    } else {
        uint4 lo;
        uint2 hi;
        uint32_t sd;
        q6k_load(w, s, c, &lo, &hi, &sd);
        return q6k_dot_q8(lo, hi, sd, xw, xd);
    }
}

/* ---- RQ2 -----------------------------------------------------------------------------------
 * A lane owns whole 64-value blocks (mv_tr CW = 64), both 32-value halves: per block and row one
 * 16-byte load of codes and one 4-byte load of (d, m), and a warp's loads of 32 consecutive
 * blocks are 512 and 128 contiguous bytes. With 32-value units a lane would load 8 bytes of
 * codes and two lanes the same (d, m) pair: half-width loads, twice the load instructions per
 * byte. U = 2 blocks per lane and row in flight: a 4096-wide row (64 blocks) is then loaded in
 * one go, before the prologue.
 *
 * Two code decoders, picked by the LUT template argument (knob RL_CUDA_RQ2_LUT) so that they
 * can be measured against each other. Both turn a code word u (4 code bytes: weights 4i + k at
 * byte i, bits 2k) into 4 words of 4 byte-sized codes, a dp4a operand each:
 *  - shifts (LUT false): cw[k] = (u >> 2k) & 0x03030303, codes k of the 4 bytes, i.e. weights
 *    k, 4 + k, 8 + k, 12 + k: a transposed order, which the activations get too (mv_stage XL 2;
 *    src/mm.c's rq2_act does the same on the CPU). Two integer ops per 4 codes (one for k = 0).
 *  - table (LUT true): cw[i] = lut[byte i of u], the 4 codes of byte i in weight order
 *    (rl_rq2_lut's contents). A byte extract, an address and a shared-memory load per 4 codes.
 * The table is in shared memory, not __constant__: the lanes of a warp look up their own code
 * bytes, up to 32 different entries per load; the constant cache serves one address at a time
 * (up to 32-way serialised), shared memory serves them at once up to bank conflicts (entry b
 * is in bank b % 32). 1 KB per block, filled in the prologue (rq2_lut_entry).
 * The fast path's integer dot does not depend on the order of its terms, and the fp32 path takes
 * the weights in the same order with either decoder, so the two decoders give the same bits. */
__device__ __forceinline__ uint32_t rq2_lut_entry(uint32_t b) { /* rl_rq2_lut[b], src/quant.c */
    return (b & 3) | ((b >> 2) & 3) << 8 | ((b >> 4) & 3) << 16 | ((b >> 6) & 3) << 24;
}

template <bool LUT>
__device__ __forceinline__ void rq2_decode(uint32_t u, const uint32_t *lut, uint32_t *cw) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if constexpr (LUT) cw[k] = lut[(u >> (8 * k)) & 0xff];
        else cw[k] = (u >> (2 * k)) & 0x03030303u;
    }
}

/* dp4a of 4 unsigned bytes of a by 4 signed bytes of b, plus c (IDP.4A.U8.S8) */
__device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* Byte offset of piece p (values 16p .. 16p + 15) of block b in the RQ2 activation plane:
 * rotated by b / 2 so that the 16-byte loads of a quarter-warp (8 consecutive blocks, 64 bytes
 * apart) hit 8 distinct bank groups; unrotated they would conflict 4-way. */
__device__ __forceinline__ int rq2_rot(int b) { return (b >> 1) & 3; }
__device__ __forceinline__ int rq2_slot(int b, int p) { return 64 * b + 16 * ((p + rq2_rot(b)) & 3); }

/* Fast path, block b of both rows: per half h, dot = the codes . int8 inputs (dp4a), then the
 * CPU reference's term (src/quant.c ref_fast_dot), every operation rounded as there:
 *   (d * d_x) * (float)dot + m * s_x,   s_x = d_x * (float)sum(x)  (rl_q8a.s) */
/* rot (MASK): rq2_rot(b), which callers whose lane l takes blocks l, l + 32, ... know from the
 * lane alone (rq2_rot(b + 32) = rq2_rot(b)): the pieces' offsets are then the same on every
 * step. MASK (without LUT): the one-mask decode below, the same integer dot as the shift decoder's;
 * the streamed kernel takes it, while the register kernels keep the shifts, whose one
 * accumulator per row needs fewer registers (eight per row and half spilled in their exact
 * chunks of 8 and 16 columns). */
template <bool LUT, bool MASK = false>
__device__ __forceinline__ void rq2_q8(const raw_chunk<RL_RQ2> *r, const int8_t *xq, const float *xd,
                                       const int *xsum, int b, const uint32_t *lut, float *acc, int rot) {
    const float2 dx = *(const float2 *)(xd + 2 * b);
    const int2 sm = *(const int2 *)(xsum + 2 * b);
    const int8_t *xb = xq + 64 * b;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float dot[2];
        if constexpr (LUT || !MASK) {
            int di[2] = {0, 0};
#pragma unroll
            for (int p = 2 * h; p < 2 * h + 2; p++) {
                const int4 xv = *(const int4 *)(xq + rq2_slot(b, p));
                const int xw[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    uint32_t cw[4];
                    rq2_decode<LUT>(word(r[i].v[0], p), lut, cw);
#pragma unroll
                    for (int k = 0; k < 4; k++) di[i] = __dp4a((int)cw[k], xw[k], di[i]);
                }
            }
            dot[0] = (float)di[0];
            dot[1] = (float)di[1];
        } else {
            /* One mask per four codes, no shift (v2.24): u & (0x03030303 << 2k) holds codes k of
             * the word's bytes times 4^k (bytes up to 192: an unsigned-by-signed dp4a), summed
             * per k; 64 a0 + 16 a1 + 4 a2 + a3 is then 64 times the shift decoder's dot, exactly
             * (a half is 32 values: |64 dot| <= 64 * 32 * 3 * 128 < 2^24, so its float is exact
             * too, and so is the product by 2^-6: the float of the same integer). Three
             * multiply-adds and a multiplication per row and half where the shifts took six. */
            int a[2][4] = {};
#pragma unroll
            for (int p = 2 * h; p < 2 * h + 2; p++) {
                const int4 xv = *(const int4 *)(xb + 16 * ((p + rot) & 3));
                const int xw[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const uint32_t u = word(r[i].v[0], p);
#pragma unroll
                    for (int k = 0; k < 4; k++) a[i][k] = dp4a_us(u & (0x03030303u << (2 * k)), xw[k], a[i][k]);
                }
            }
#pragma unroll
            for (int i = 0; i < 2; i++)
                dot[i] = __fmul_rn((float)(64 * a[i][0] + 16 * a[i][1] + 4 * a[i][2] + a[i][3]), 0.015625f);
        }
        const float xdh = h ? dx.y : dx.x, sx = __fmul_rn(xdh, (float)(h ? sm.y : sm.x));
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float2 dm = rq_dm(r[i].d);
            acc[i] += __fadd_rn(__fmul_rn(__fmul_rn(dm.x, xdh), dot[i]), __fmul_rn(dm.y, sx));
        }
    }
}

/* fp32 path, block b of both rows. Value = d * code + m as deq_rq2 (dequant.cuh): the product
 * of an fp16 d and a code 0..3 has at most 13 significant bits, so it is exact in fp32 and
 * fmaf(d, code, m) rounds once, like the reference's rounded add: the same bits in one FFMA.
 * The code becomes a float without I2F: the float 2^23 + code (one byte permute), minus 2^23. */
template <bool LUT>
__device__ __forceinline__ void rq2_f32(const raw_chunk<RL_RQ2> *r, const float *xs, int b,
                                        const uint32_t *lut, float *acc) {
    float d[2], m[2];
    rq_dm2(r, d, m);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float *xc = xs + (2 * b + h) * 36;
        float a0[2] = {0.0f, 0.0f}, a1[2] = {0.0f, 0.0f};
#pragma unroll
        for (int pp = 0; pp < 2; pp++) {
            float4 x4[4];
#pragma unroll
            for (int j = 0; j < 4; j++) x4[j] = *(const float4 *)(xc + 16 * pp + 4 * j);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                uint32_t cw[4];
                rq2_decode<LUT>(word(r[i].v[0], 2 * h + pp), lut, cw);
#pragma unroll
                for (int j = 0; j < 4; j++) { /* weights 4j .. 4j + 3 of the piece */
                    float c[4];
#pragma unroll
                    for (int k = 0; k < 4; k++) c[k] = (LUT ? mag(cw[j], k) : mag(cw[k], j)) - 8388608.0f;
                    a0[i] = fmaf(fmaf(d[i], c[0], m[i]), x4[j].x, a0[i]);
                    a1[i] = fmaf(fmaf(d[i], c[1], m[i]), x4[j].y, a1[i]);
                    a0[i] = fmaf(fmaf(d[i], c[2], m[i]), x4[j].z, a0[i]);
                    a1[i] = fmaf(fmaf(d[i], c[3], m[i]), x4[j].w, a1[i]);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < 2; i++) acc[i] += a0[i] + a1[i];
    }
}

/* ---- RQ4 -----------------------------------------------------------------------------------
 * A lane owns whole 64-value blocks (mv_tr CW = 64) as with RQ2: per block and row two 16-byte
 * loads of codes (half h: Q4_0's nibble order, byte i = values i and 16 + i) and one 4-byte
 * load of (d, m), so a warp's loads of 32 consecutive blocks are 1024 and 128 contiguous bytes.
 * The 8-bit plane stays in the plain layout (mv_stage XL 0): half h of block b is chunk 2b + h.
 *
 * Fast path, block b of both rows: per half, dot = the codes . int8 inputs (dp4a), then the
 * CPU reference's term (src/quant.c ref_fast_dot), every operation rounded as there:
 *   (d * d_x) * (float)dot + m * s_x,   s_x = d_x * (float)sum(x)  (rl_q8a.s) */
__device__ __forceinline__ void rq4_q8(const raw_chunk<RL_RQ4> *r, const int8_t *xq, const float *xd,
                                       const int *xsum, int b, float *acc) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int c = 2 * b + h;
        const int4 xa = *(const int4 *)(xq + c * 32), xc = *(const int4 *)(xq + c * 32 + 16);
        const int xl[4] = {xa.x, xa.y, xa.z, xa.w}, xh[4] = {xc.x, xc.y, xc.z, xc.w};
        const float sx = __fmul_rn(xd[c], (float)xsum[c]);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int dot = nib_dot(r[i].v[h], xl, xh);
            const float2 dm = rq_dm(r[i].d);
            acc[i] += __fadd_rn(__fmul_rn(__fmul_rn(dm.x, xd[c]), (float)dot), __fmul_rn(dm.y, sx));
        }
    }
}

/* fp32 path, block b of both rows. Value = d * code + m as deq_rq4: an fp16 d times a code
 * 0..15 has at most 15 significant bits, exact in fp32, so one FFMA rounds as the reference's
 * rounded add; the code becomes a float through the 2^23 byte permute (mag). */
__device__ __forceinline__ void rq4_f32(const raw_chunk<RL_RQ4> *r, const float *xs, int b, float *acc) {
    float d[2], m[2];
    rq_dm2(r, d, m);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float *xc = xs + (2 * b + h) * 36;
        float a0[2] = {0.0f, 0.0f}, a1[2] = {0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float4 xl = *(const float4 *)(xc + 4 * k), xh = *(const float4 *)(xc + 16 + 4 * k);
            const float fl[4] = {xl.x, xl.y, xl.z, xl.w}, fh[4] = {xh.x, xh.y, xh.z, xh.w};
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const uint32_t u = word(r[i].v[h], k), lo = u & 0x0F0F0F0Fu, hi = (u >> 4) & 0x0F0F0F0Fu;
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    a0[i] = fmaf(fmaf(d[i], mag(lo, j) - 8388608.0f, m[i]), fl[j], a0[i]);
                    a1[i] = fmaf(fmaf(d[i], mag(hi, j) - 8388608.0f, m[i]), fh[j], a1[i]);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < 2; i++) acc[i] += a0[i] + a1[i];
    }
}

/* One quarter of a 32-value chunk's rounding to int8 with rl_q8a_quant_row_ref's operations
 * (IEEE division, round-half-even): e holds values 8k .. 8k + 7 of the chunk (int8 words 2k,
 * 2k + 1 into w2), four adjacent lanes per chunk, k = lane % 4. The chunk's amax and integer
 * sum meet in two shuffles each (max and integer adds are exact in any order), so every lane of
 * the warp must call it. Returns the chunk's scale d. */
__device__ __forceinline__ float i8_quarter(const float *e, uint32_t *w2, int *sum) {
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) amax = fmaxf(amax, fabsf(e[j]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    float id;
    const float d = i8_scale(amax, &id);
    int s = 0;
#pragma unroll
    for (int w = 0; w < 2; w++) {
        uint32_t u = 0;
#pragma unroll
        for (int b = 0; b < 4; b++) {
            int q = i8_round(e[4 * w + b], id);
            s += q;
            u |= (uint32_t)(q & 0xff) << (8 * b);
        }
        w2[w] = u;
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    *sum = s;
    return d;
}

/* The 8-bit input's quarters (i8_quarter: four adjacent lanes per 32-value chunk, two of its
 * eight int8 words each; a thread per quarter, quarter i = thread i, i + threads, ...). XL: the
 * int8 plane's layout: 0 plain; RQ2's: 1 pieces rotated (rq2_slot), 2 rotated and, within each
 * 16-value piece, transposed for the shift decoder (word k byte i = value 4i + k). q8_at: the
 * input index of value j of quarter i in i8_quarter's order (XL 0, 1: 8i + j). */
template <int XL> __device__ __forceinline__ int q8_at(int i, int j) {
    const int c = i / 4, k = 2 * (i % 4) + j / 4, b = j % 4;
    return 32 * c + (XL == 2 ? 16 * (k / 4) + 4 * b + k % 4 : 4 * k + b);
}
/* Quarter i's 8 values of p (zeros where off): two 16-byte loads where they are contiguous. */
template <int XL, bool CG> __device__ __forceinline__ void q8_load(const float *p, int i, bool on, float *v) {
    if (XL != 2 && on) {
        const float4 *pv = (const float4 *)(p + 8 * i);
        const float4 a = rl_ld_cg<CG>(pv), b = rl_ld_cg<CG>(pv + 1);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
        return;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = on ? rl_ld_cg<CG>(p + q8_at<XL>(i, j)) : 0.0f;
}
/* Quarter i's int8 words, and with the first quarter of its chunk the chunk's d and sum. */
template <int XL>
__device__ __forceinline__ void q8_store(int8_t *xq, float *xd, int *xsum, int i, const uint32_t *w2, float d, int sum) {
    const int c = i / 4, k0 = 2 * (i % 4);
    /* words k0, k0 + 1 lie in the same 16-value half: one 8-byte store */
    const int half = k0 / 4, o = XL ? rq2_slot(c / 2, 2 * (c % 2) + half) : c * 32 + 16 * half;
    *(uint2 *)(xq + o + 4 * (k0 % 4)) = make_uint2(w2[0], w2[1]);
    if (k0 == 0) {
        xd[c] = d;
        xsum[c] = sum;
    }
}

__device__ __forceinline__ const uint8_t *qrow(const rl_dmat &m, int r) { return m.q + (size_t)r * m.q_row; }
__device__ __forceinline__ const uint8_t *srow(const rl_dmat &m, int r) {
    return m.s ? m.s + (size_t)r * m.s_row : nullptr;
}

/* A launch's segments cut into units of `per` rows, the last unit of each segment partial: how
 * many units there are (mv_units), and unit u's segment and first row (mv_unit). The matvec's
 * work items are units of 2 rows, the tensor-core chunk's tiles units of 16 (mvx.cu). */
__host__ __device__ inline int mv_units(const rl_mv_args &a, int per) {
    int n = 0;
    for (int i = 0; i < a.nseg; i++) n += (a.seg[i].w.rows + per - 1) / per;
    return n;
}
__host__ __device__ inline int mv_unit(const rl_mv_args &a, int u, int per, int *row) {
    int si = 0;
    while (si < a.nseg - 1 && u >= (a.seg[si].w.rows + per - 1) / per) u -= (a.seg[si++].w.rows + per - 1) / per;
    *row = per * u;
    return si;
}

/* Work item p of a launch: two rows. GLU: gate row p and up row p. Otherwise rows 2i and 2i+1 of
 * the segment that item p falls in (the second one absent past an odd row count; it then
 * re-reads the first row and its result is dropped). */
struct mv_task {
    const uint8_t *w[2], *s[2];
    int seg, ra, rb; /* rb == -1: absent */
};

__device__ __forceinline__ mv_task mv_resolve(const rl_mv_args &a, int p, bool glu) {
    mv_task t;
    if (glu) {
        t.seg = 0;
        t.ra = t.rb = p;
        t.w[0] = qrow(a.seg[0].w, p); t.s[0] = srow(a.seg[0].w, p);
        t.w[1] = qrow(a.seg[1].w, p); t.s[1] = srow(a.seg[1].w, p);
        return t;
    }
    t.seg = mv_unit(a, p, 2, &t.ra);
    const rl_dmat &m = a.seg[t.seg].w;
    t.rb = t.ra + 1 < m.rows ? t.ra + 1 : -1;
    t.w[0] = qrow(m, t.ra); t.s[0] = srow(m, t.ra);
    t.w[1] = t.rb >= 0 ? qrow(m, t.rb) : t.w[0];
    t.s[1] = t.rb >= 0 ? srow(m, t.rb) : t.s[0];
    return t;
}

/* Column col of an output: the cache row pos, or y + col * ys. */
template <bool CG>
__device__ __forceinline__ void mv_store(const rl_mv_args &a, const rl_mv_seg &sg, int r, float v, int pos, int col) {
    float *y = sg.y + (size_t)col * a.ys;
    if (sg.y16) sg.y16[(size_t)pos * sg.w.rows + r] = __half_as_ushort(__float2half_rn(v));
    else if (a.mode == RL_MV_ADD) y[r] = rl_ld_cg<CG>(y + r) + v;
    else if (a.mode == RL_MV_GLU_MUL) {
        const float g = rl_ld_cg<CG>(y + r);
        y[r] = g / (1.0f + expf(-g)) * v;
    }
    else y[r] = v;
}

/* The staged input of one column, in the byte layout the one-column kernel builds in shared
 * memory (rl_mv_smem): padded fp32, then the int8 plane, scales and sums. A chunk launch has
 * them in global memory, column s at scratch + s * col_bytes(n), written by mv_prep_kernel. */
__host__ __device__ inline size_t col_bytes(int n) { return (stage_bytes(n, true) + 255) & ~(size_t)255; }

/* The exact tensor-core chunk's activations (mvx.cu) in the order its lanes take them: per
 * 32-value chunk c, MVX_FRAG bytes at frag + c * MVX_FRAG: first 32 lanes x 16 bytes, lane
 * (g, t) = 4g + t holding the MMA B words of columns g and g + 8 (int8 words t and 4 + t of
 * each), then 4 x 32 bytes, group t holding d_x of columns 2t, 2t + 1, 2t + 8, 2t + 9 and then
 * their integer terms (mvx_stage_kernel): one 16-byte load per lane for the B operands of both
 * 8-column tiles and two for its epilogue. Columns past ns are zero. The plane follows the ns
 * staged columns in the chunk's scratch (rl_mv_scratch_bytes). */
#define MVX_FRAG 640
__host__ __device__ inline size_t mvx_frag_bytes(int n) { return (size_t)(n / 32) * MVX_FRAG; }
/* Where a chunk's plane lies (after its ns staged columns), and its term's k8 (below). */
__host__ __device__ inline uint8_t *mvx_plane(const rl_mv_args &a) {
    return (uint8_t *)a.scratch + (size_t)a.ns * col_bytes(a.n);
}
__host__ __device__ inline int mvx_k8(const rl_mv_args &a) { return a.seg[0].w.type == RL_Q4_0 ? 8 : 0; }

/* The float with bits MVX_MAGIC + v is 1.5 * 2^23 + v for an integer |v| < 2^22 (mvx_i2f, mvx.cu). */
#define MVX_MAGIC 0x4B400000

/* Quarter k (0..3) of 32-value chunk c of column col, rounded by i8_quarter (its two words w2,
 * the chunk's d and integer sum), into the fragment plane frag of an ns-column chunk, with the
 * same quarter of the zero columns col + ns, col + 2 ns, ... below 16. The term stored is
 * MVX_MAGIC less k8 times the sum (k8: 8 for Q4_0's unsigned nibbles, 0 for Q8_0), the MMA's
 * accumulator input. Written by mvx_stage_kernel, and by the flash decode of an exact chunk for
 * Wo's input (rl_att_args frag), from the same fp32 values: the same bytes. */
__device__ __forceinline__ void mvx_put(uint8_t *frag, int c, int col, int ns, int k, const uint32_t *w2, float d,
                                        int sum, int k8) {
    uint8_t *f = frag + (size_t)c * MVX_FRAG;
    for (int cc = col; cc < 16; cc += ns) {
        const bool z = cc != col;
        const int hi = cc >= 8, gi = cc % 8, t = gi / 2, slot = cc % 2 + 2 * hi;
#pragma unroll
        for (int h = 0; h < 2; h++) { /* int8 word j = 2k + h */
            const int j = 2 * k + h;
            *(uint32_t *)(f + (4 * gi + j % 4) * 16 + (2 * hi + j / 4) * 4) = z ? 0u : w2[h];
        }
        if (k == 0) {
            *(float *)(f + 512 + 32 * t + 4 * slot) = z ? 0.0f : d;
            *(int *)(f + 512 + 32 * t + 16 + 4 * slot) = z ? MVX_MAGIC : MVX_MAGIC - k8 * sum;
        }
    }
}

/* The prologue's loops over the input load B values per thread before using any: a plain
 * strided loop waits out one load's latency per iteration (at n = 11008 and 512 threads that
 * was 22 round trips to L2 in a row, most of a 7B down projection's 22 us under ncu). Each
 * thread still takes elements tid, tid + nt, ... in that order, so sums and values are those
 * of the plain loop, bit for bit, whatever B is. B = 8; 4 where the kernel holds big prefetched
 * weight loads across the prologue (the register kernel's 16/32-bit types: at 8 its F16 kernel
 * spilled). */

/* The RMS scale 1 / sqrt(mean(x^2) + eps): the sum of squares in double, as on the CPU. red is
 * read after the barrier without another: two calls in a row need a barrier between them. */
template <int B, bool CG>
__device__ __forceinline__ float mv_norm_scale(const rl_mv_args &a, const float *x, double *red) {
    const int n = a.n, tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
    double ss = 0;
    for (int i0 = tid; i0 < n; i0 += B * nt) {
        float v[B];
#pragma unroll
        for (int u = 0; u < B; u++) v[u] = i0 + u * nt < n ? rl_ld_cg<CG>(x + i0 + u * nt) : 0.0f;
#pragma unroll
        for (int u = 0; u < B; u++)
            if (i0 + u * nt < n) ss += (double)v[u] * (double)v[u];
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    /* every thread adds the warps' sums in warp order (the same bits everywhere): one barrier,
     * where thread 0 adding them and a second barrier to hand red[0] on had been two */
    double t = 0;
    for (int i = 0; i < nw; i++) t += red[i];
    return 1.0f / sqrtf((float)(t / (double)n) + a.eps);
}

/* mv_stage's hook: loading() runs once the input's first loads are issued (the kernel lab's
 * timeline issues ring stages there, bench/lab_mvs.cu); the default does nothing. norm_w() and
 * input() say where the norm weights and a one-token input are read from (the kernel lab's
 * input by bulk copy reads copies in shared memory, bench/lab_mvs.cu xb_hook). */
struct mv_hook {
    __device__ __forceinline__ void loading() const {}
    __device__ __forceinline__ const float *norm_w(const rl_mv_args &a) const { return a.norm_w; }
    __device__ __forceinline__ const float *input(const rl_mv_args &a) const { return a.x; }
};

/* Stages column x of the input at xs, RMS-normalised as the CPU does (sum of squares in
 * double, then w * (x * r)) or copied: padded fp32, and with Q8 the rl_q8a planes after it (F32)
 * or, without F32, only the planes, at xs (the streamed kernels, which never read the fp32
 * copy: mvs_x_bytes). xs is shared memory in the decode kernels and global scratch in a chunk's
 * staging kernel (one block per column, the decode block size): the same operations give the
 * same bytes. Ends with a barrier, after which the whole block may read the staged input.
 * Q8: each thread's quarters (q8_at) are loaded once, with the norm's first batch, normalised
 * and rounded in registers (i8_quarter) and stored as int8: the fp32 copy's shared-memory round
 * trip and its barrier are gone from the prologue, which the kernel lab's timeline put at 2.3
 * (no norm) to 3.9 us of a 12.5 us launch (docs/PERF.md v2.17). Same values, same bits. */
template <int XL, bool Q8, int B = 8, bool CG = false, bool F32 = true, class H = mv_hook>
__device__ __forceinline__ void mv_stage(const rl_mv_args &a, const float *x, float *xs, double *red, const H &h = H()) {
    const int n = a.n, tid = threadIdx.x, nt = blockDim.x;
    const float *w = h.norm_w(a);
    if constexpr (Q8) {
        const int nq = n / 8, lane = tid & 31;
        int8_t *xq = F32 ? (int8_t *)((char *)xs + xs_f32_bytes(n)) : (int8_t *)xs;
        float *xd = (float *)(xq + n);
        int *xsum = (int *)(xd + n / 32);
        float v[8], g[8];
        q8_load<XL, CG>(x, tid, tid < nq, v); /* the first quarter, beside the norm's loads */
        h.loading();
        if (w) q8_load<XL, false>(w, tid, tid < nq, g);
        const float r = w ? mv_norm_scale<B, CG>(a, x, red) : 1.0f;
        for (int base = tid & ~31, first = 1; base < nq; base += nt, first = 0) { /* warp-uniform */
            const int i = base + lane;
            const bool on = i < nq; /* a whole chunk's four lanes alike (n is a multiple of 32) */
            if (!first) {
                q8_load<XL, CG>(x, i, on, v);
                if (w) q8_load<XL, false>(w, i, on, g);
            }
            float e[8];
#pragma unroll
            for (int j = 0; j < 8; j++) e[j] = w ? __fmul_rn(g[j], __fmul_rn(v[j], r)) : v[j];
            if (F32 && on)
#pragma unroll
                for (int j = 0; j < 8; j++) xs[XPAD(q8_at<XL>(i, j))] = e[j];
            uint32_t w2[2];
            int sum;
            const float d = i8_quarter(e, w2, &sum); /* every lane of the warp */
            if (on) q8_store<XL>(xq, xd, xsum, i, w2, d, sum);
        }
        __syncthreads(); /* also makes a block's global writes visible to the block */
        return;
    }
    h.loading();
    const float r = w ? mv_norm_scale<B, CG>(a, x, red) : 1.0f;
    for (int i0 = tid; i0 < n; i0 += B * nt) {
        float v[B], g[B];
#pragma unroll
        for (int u = 0; u < B; u++) {
            const int i = i0 + u * nt;
            v[u] = i < n ? rl_ld_cg<CG>(x + i) : 0.0f;
            g[u] = w && i < n ? w[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < B; u++) {
            const int i = i0 + u * nt;
            if (i < n) xs[XPAD(i)] = w ? __fmul_rn(g[u], __fmul_rn(v[u], r)) : v[u];
        }
    }
    __syncthreads(); /* also makes a block's global writes visible to the block */
}

/* The epilogue of output pair (va, vb) of work item p for column s, at position pos + s: SwiGLU
 * (GLU: va the gate row p, vb the up row p); else bias, llama RoPE in the rope_kv kernel's op
 * order (lesson 6), and the store (residual add, f16 cache row, or plain) of rows t.ra and t.rb. */
template <bool GLU, bool CG = false>
__device__ __forceinline__ void mv_epilogue(const rl_mv_args &a, const mv_task &t, int p, float va, float vb,
                                            int pos, int s) {
    if (GLU) {
        a.seg[0].y[(size_t)s * a.ys + p] = va / (1.0f + expf(-va)) * vb;
        return;
    }
    const rl_mv_seg &sg = a.seg[t.seg];
    if (sg.bias) {
        va = va + sg.bias[t.ra];
        if (t.rb >= 0) vb = vb + sg.bias[t.rb];
    }
    if (sg.rope && t.ra % a.hd < a.rope_dim) {
        rope_rot(va, vb, pos + s, a.inv_freq[t.ra % a.hd / 2]);
    }
    mv_store<CG>(a, sg, t.ra, va, pos + s, s);
    if (t.rb >= 0) mv_store<CG>(a, sg, t.rb, vb, pos + s, s);
}

/* Both rows' butterflies at once (v2.24; the streamed kernel's, every lane of the warp calls
 * it): the rows share the first step, lanes 0-15 keeping row 0's sums and lanes 16-31 row 1's,
 * each adding its partner's sum of the row it keeps, as that row's own step does; the other
 * four steps stay within each half. So lanes 0-15 end with mv_finish's row 0 sum and lanes
 * 16-31 with its row 1 sum, the same additions of the same operands (a + b and b + a are the
 * same bits), in 6 shuffles instead of 10. Lanes 0-15 return row 0's sum in va and row 1's in
 * vb, lanes 16-31 the other way round. */
__device__ __forceinline__ void mv_reduce2(const float *acc, float &va, float &vb) {
    const bool lo = (threadIdx.x & 16) == 0;
    float v = (lo ? acc[0] : acc[1]) + __shfl_xor_sync(0xffffffffu, lo ? acc[1] : acc[0], 16);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    va = v;
    vb = __shfl_xor_sync(0xffffffffu, v, 16);
}

/* The end of work item p for column s: the lanes' two sums meet in a fixed butterfly (lane l
 * adds lane l ^ o's sum for o = 16, 8, 4, 2, 1; mv_tree32 is the same sums), then lane 0 applies
 * the epilogue. (The register kernels keep this form: mv_reduce2's selects spilled in their
 * exact chunks.) */
template <bool GLU, bool CG = false>
__device__ __forceinline__ void mv_finish(const rl_mv_args &a, const mv_task &t, int p, float *acc, int pos, int s) {
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
    if ((threadIdx.x & 31) == 0) mv_epilogue<GLU, CG>(a, t, p, acc[0], acc[1], pos, s);
}

/* Lane 0's result of mv_finish's butterfly over the 32 lane sums v[l], in one thread: at step o
 * lane 0's lineage adds v[l] + v[l + o] for l < o (float addition is commutative, so lane l's
 * acc + lane (l ^ o)'s is the same bits). Clobbers v. */
template <int O> __device__ __forceinline__ void mv_tree_step(float *v) {
#pragma unroll
    for (int l = 0; l < O; l++) v[l] = v[l] + v[l + O];
}
__device__ __forceinline__ float mv_tree32(float *v) { /* steps with constant bounds: v stays in registers */
    mv_tree_step<16>(v);
    mv_tree_step<8>(v);
    mv_tree_step<4>(v);
    mv_tree_step<2>(v);
    mv_tree_step<1>(v);
    return v[0];
}

/* Work items of a launch: GLU one per row pair (gate r, up r), else one per 2 rows of each
 * segment. */
__host__ __device__ inline int mv_items(const rl_mv_args &a, bool glu) {
    return glu ? a.seg[0].w.rows : mv_units(a, 2);
}

#endif
