/* Dequantisers of the device weight layouts (rl_dmat, kernels.h): chunk c (32 values) of one
 * row to fp32, in the C reference's operation order (no FMA contraction), so a dequantised
 * value equals the CPU's. Shared by the matvec (its fp32 fallback), the embedding lookup and
 * the fast prefill's fp16 weight expansion (prefill.cu); also the CPU's int8 rounding of 32
 * values, which the activations and the q8 KV cache share, and the RoPE rotation. Device
 * code only. */
#ifndef RL_CUDA_DEQUANT_CUH
#define RL_CUDA_DEQUANT_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "types.h"

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

/* Word k of a 16-byte load. */
__device__ __forceinline__ uint32_t word(const uint4 &v, int k) {
    return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

/* The CPU's 32-value int8 rounding (rl_round_i8_32, src/quant.c), its operations exactly:
 * d = amax / 127 and the inverse 127 / amax (0 for an all-zero block), IEEE divisions; a value
 * becomes rint(v * id), half to even. The activations' rounding (matvec's mv_stage) and the q8
 * KV cache (attention's kv_put) both go through these. */
__device__ __forceinline__ float i8_scale(float amax, float *id) {
    const float d = __fdiv_rn(amax, 127.0f);
    *id = d != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    return d;
}
__device__ __forceinline__ int i8_round(float v, float id) { return __float2int_rn(__fmul_rn(v, id)); }

/* Llama RoPE of the pair (x0, x1) at position pos with frequency f, in the CPU reference's
 * order: separate rounded products, then one subtraction and one addition (lesson 6: a
 * contracted c*x0 - s*x1 forked near-tie tokens). rope_kv, its prefill form and the QKV
 * matvec's folded epilogue all rotate through this. */
__device__ __forceinline__ void rope_rot_cs(float &x0, float &x1, float cs, float sn) {
    const float m0 = __fmul_rn(x0, cs), m1 = __fmul_rn(x1, sn), m2 = __fmul_rn(x0, sn), m3 = __fmul_rn(x1, cs);
    x0 = __fsub_rn(m0, m1);
    x1 = __fadd_rn(m2, m3);
}
/* The angle's cosine and sine, as every RoPE path computes them (the prefill's table too). */
__device__ __forceinline__ float2 rope_cs(int pos, float f) {
    const float th = __fmul_rn((float)pos, f);
    return make_float2(cosf(th), sinf(th));
}
__device__ __forceinline__ void rope_rot(float &x0, float &x1, int pos, float f) {
    const float2 c = rope_cs(pos, f);
    rope_rot_cs(x0, x1, c.x, c.y);
}
__device__ __forceinline__ float ldh(const uint8_t *p) {
    return h2f((uint16_t)(p[0] | (p[1] << 8)));
}

__device__ __forceinline__ void deq_f32(const uint8_t *w, const uint8_t *, int c, float *v) {
    const float4 *p = (const float4 *)(w + (size_t)c * 128);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float4 t = __ldg(p + j);
        v[4 * j] = t.x; v[4 * j + 1] = t.y; v[4 * j + 2] = t.z; v[4 * j + 3] = t.w;
    }
}

template <bool BF>
__device__ __forceinline__ void deq_16bit(const uint8_t *w, const uint8_t *, int c, float *v) {
    const uint4 *p = (const uint4 *)(w + (size_t)c * 64);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint4 t = __ldg(p + j);
        uint32_t u[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (BF) {
                v[8 * j + 2 * k] = __uint_as_float(u[k] << 16);
                v[8 * j + 2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
            } else {
                v[8 * j + 2 * k] = h2f((uint16_t)(u[k] & 0xffff));
                v[8 * j + 2 * k + 1] = h2f((uint16_t)(u[k] >> 16));
            }
        }
    }
}

/* repacked: 16 quant bytes (element j low nibble, j+16 high nibble of byte j) + fp16 scale */
__device__ __forceinline__ void deq_q4_0(const uint8_t *w, const uint8_t *s, int c, float *v) {
    uint4 t = __ldg((const uint4 *)(w + (size_t)c * 16));
    float d = h2f(__ldg((const unsigned short *)s + c));
    uint32_t u[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int k = 0; k < 16; k++) {
        int b = (int)((u[k / 4] >> (8 * (k % 4))) & 0xff);
        v[k] = __fmul_rn(d, (float)((b & 0xF) - 8));
        v[k + 16] = __fmul_rn(d, (float)((b >> 4) - 8));
    }
}

__device__ __forceinline__ void deq_q8_0(const uint8_t *w, const uint8_t *s, int c, float *v) {
    const uint4 *p = (const uint4 *)(w + (size_t)c * 32);
    float d = h2f(__ldg((const unsigned short *)s + c));
#pragma unroll
    for (int j = 0; j < 2; j++) {
        uint4 t = __ldg(p + j);
        uint32_t u[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
        for (int k = 0; k < 16; k++)
            v[16 * j + k] = __fmul_rn(d, (float)(int8_t)((u[k / 4] >> (8 * (k % 4))) & 0xff));
    }
}

/* Q4_K as uploaded (matvec.cu repack_q4_k): sub-block c of a row (32 values of super-block c / 8)
 * is 16 bytes of codes at w + 16c in Q4_0's order, and its super-block's 16-byte header (fp16 d,
 * fp16 dmin, the 12 bytes of 6-bit scales and mins) at s + 16 (c / 8). q4k_sub takes what
 * sub-block j needs from the header (h.y, h.z, h.w: scale bytes 0-3, 4-7, 8-11; the 6-bit
 * unpacking is llama.cpp's get_scale_min_k4), so that the streamed matvec (mvs.cuh), which
 * reads headers from its ring, keeps three registers per row instead of the header's four. */
struct q4k_sub {
    uint32_t dm; /* fp16 d (low), fp16 dmin (high) */
    int sc, mn;
};
__device__ __forceinline__ q4k_sub q4k_sub_of(const uint4 &h, int j) {
    const int sh = 8 * (j & 3);
    const int b0 = (h.y >> sh) & 0xff, b4 = (h.z >> sh) & 0xff, b8 = (h.w >> sh) & 0xff;
    q4k_sub k;
    k.dm = h.x;
    k.sc = j < 4 ? b0 & 63 : (b8 & 0xF) | ((b0 >> 6) << 4);
    k.mn = j < 4 ? b4 & 63 : (b8 >> 4) | ((b4 >> 6) << 4);
    return k;
}
/* value = d*sc*q - dmin*m, each product rounded before the subtraction as in the C reference (no
 * FMA contraction); v in the sub-block's order */
__device__ __forceinline__ void q4k_vals(const uint4 &q, const q4k_sub &k, float *v) {
    const float d1 = __fmul_rn(h2f((uint16_t)(k.dm & 0xffff)), (float)k.sc);
    const float m1 = __fmul_rn(h2f((uint16_t)(k.dm >> 16)), (float)k.mn);
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int b = (int)((word(q, i / 4) >> (8 * (i % 4))) & 0xff);
        v[i] = __fsub_rn(__fmul_rn(d1, (float)(b & 0xF)), m1);
        v[i + 16] = __fsub_rn(__fmul_rn(d1, (float)(b >> 4)), m1);
    }
}
__device__ __forceinline__ void deq_q4_k(const uint8_t *w, const uint8_t *s, int c, float *v) {
    q4k_vals(__ldg((const uint4 *)(w + (size_t)c * 16)), q4k_sub_of(__ldg((const uint4 *)(s + (size_t)(c / 8) * 16)), c % 8), v);
}

/* Q5_K as uploaded (matvec.cu repack_q5_k): the scale plane is Q4_K's (the 16-byte super-block
 * headers, q4k_sub), and the code plane is in stages of 32 sub-blocks, 640 bytes each: sub-block
 * u's low 4 bits as 16 bytes in Q4_0's order at 16u, its fifth bits as 4 bytes at 512 + 4u (byte
 * b: bit k the fifth bit of value 4k + b, bit 4 + k that of value 16 + 4k + b), so that a stage
 * streams as Q6_K's does (mvs.cuh). Q5K_SQ: a stage's code bytes; a row's last stage is padded. */
#define Q5K_SQ 640
/* Sub-block c's codes as 8 dp4a words (word k: values 4k .. 4k + 3; k + 4: 16 + 4k ..). */
__device__ __forceinline__ void q5k_codes(const uint4 &lo, uint32_t hi, uint32_t *q) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t u = word(lo, k);
        q[k] = (u & 0x0F0F0F0Fu) | ((hi >> k) & 0x01010101u) << 4;
        q[4 + k] = ((u >> 4) & 0x0F0F0F0Fu) | ((hi >> (4 + k)) & 0x01010101u) << 4;
    }
}
/* value = d*sc*q - dmin*m as q4k_vals (the same reference op order), with 5-bit codes */
__device__ __forceinline__ void q5k_vals(const uint4 &lo, uint32_t hi, const q4k_sub &k, float *v) {
    uint32_t q[8];
    q5k_codes(lo, hi, q);
    const float d1 = __fmul_rn(h2f((uint16_t)(k.dm & 0xffff)), (float)k.sc);
    const float m1 = __fmul_rn(h2f((uint16_t)(k.dm >> 16)), (float)k.mn);
#pragma unroll
    for (int l = 0; l < 32; l++) v[l] = __fsub_rn(__fmul_rn(d1, (float)((q[l / 4] >> (8 * (l % 4))) & 0xff)), m1);
}
/* Sub-block c of a row from the planes (the register kernels and the dequantiser) */
__device__ __forceinline__ void q5k_load(const uint8_t *w, const uint8_t *s, int c, uint4 *lo, uint32_t *hi, q4k_sub *k) {
    const uint8_t *st = w + (size_t)(c / 32) * Q5K_SQ;
    *lo = __ldg((const uint4 *)(st + 16 * (c % 32)));
    *hi = __ldg((const unsigned int *)(st + 512 + 4 * (c % 32)));
    *k = q4k_sub_of(__ldg((const uint4 *)(s + (size_t)(c / 8) * 16)), c % 8);
}
__device__ __forceinline__ void deq_q5_k(const uint8_t *w, const uint8_t *s, int c, float *v) {
    uint4 lo;
    uint32_t hi;
    q4k_sub k;
    q5k_load(w, s, c, &lo, &hi, &k);
    q5k_vals(lo, hi, k, v);
}

/* Q6_K as uploaded (matvec.cu repack_q6_k): a row in stages of 32 sub-blocks (units of 32
 * values, 4 super-blocks), so that it streams through mvs's ring like Q4_0 (mvs.cuh) and every
 * unit's bytes sit at fixed offsets in its stage. Code plane, 768 bytes a stage: unit u's low 4
 * bits as 16 bytes in Q4_0's order at 16u, its high 2 bits as 8 bytes at 512 + 8u (word 0: values
 * 0-15, word 1: 16-31; value 4k + b (+ 16) at bits 8b + 2k); scale plane, 72 bytes a stage: the
 * unit's two int8 sub-scales at 2u (values 0-15, 16-31: llama.cpp's scales in their order), then
 * the 4 super-blocks' fp16 d at 64. A row's last stage is padded to full size. */
#define Q6K_SQ 768 /* code bytes of a stage */
#define Q6K_SS 72  /* scale-plane bytes of a stage */
/* Unit c's four words of 6-bit codes (word k: values 4k .. 4k + 3; k + 4: 16 + 4k ..), as bytes. */
__device__ __forceinline__ void q6k_codes(const uint4 &lo, const uint2 &hi, uint32_t *q) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t u = word(lo, k);
        q[k] = (u & 0x0F0F0F0Fu) | ((hi.x >> (2 * k)) & 0x03030303u) << 4;
        q[4 + k] = ((u >> 4) & 0x0F0F0F0Fu) | ((hi.y >> (2 * k)) & 0x03030303u) << 4;
    }
}
/* value = (d * sc) * (q - 32), both products rounded as in the C reference; sd: the unit's two
 * sub-scales (bytes 0, 1) and its super-block's d (bits 16-31) */
__device__ __forceinline__ void q6k_vals(const uint4 &lo, const uint2 &hi, uint32_t sd, float *v) {
    uint32_t q[8];
    q6k_codes(lo, hi, q);
    const float d = h2f((uint16_t)(sd >> 16));
    const float ds0 = __fmul_rn(d, (float)(int8_t)(sd & 0xff)), ds1 = __fmul_rn(d, (float)(int8_t)((sd >> 8) & 0xff));
#pragma unroll
    for (int l = 0; l < 32; l++) v[l] = __fmul_rn(l < 16 ? ds0 : ds1, (float)((int)((q[l / 4] >> (8 * (l % 4))) & 0xff) - 32));
}
/* Unit c of a row: its codes and sd, from the planes (the register kernels and the dequantiser) */
__device__ __forceinline__ void q6k_load(const uint8_t *w, const uint8_t *s, int c, uint4 *lo, uint2 *hi, uint32_t *sd) {
    const uint8_t *st = w + (size_t)(c / 32) * Q6K_SQ, *ss = s + (size_t)(c / 32) * Q6K_SS;
    const int u = c % 32;
    *lo = __ldg((const uint4 *)(st + 16 * u));
    *hi = __ldg((const uint2 *)(st + 512 + 8 * u));
    *sd = (uint32_t)__ldg((const unsigned short *)(ss + 2 * u)) | (uint32_t)__ldg((const unsigned short *)(ss + 64 + 2 * (u / 8))) << 16;
}
__device__ __forceinline__ void deq_q6_k(const uint8_t *w, const uint8_t *s, int c, float *v) {
    uint4 lo;
    uint2 hi;
    uint32_t sd;
    q6k_load(w, s, c, &lo, &hi, &sd);
    q6k_vals(lo, hi, sd, v);
}

/* FP8 (e4m3) codes to floats. Code compiled for sm_89+ (this build: its sm_90a code) converts
 * two codes per instruction (cvt.rn.f16x2.e4m3x2); the sm_80 code and the compute_80 PTX (which
 * sm_89 and Blackwell run) use integer ops, as sm_80 lacks the instruction: code c becomes
 * the fp16 with bits (c & 0x80) << 8 | (c & 0x7f) << 7, which is e4m3(c) * 2^-8 exactly
 * (subnormals included: the exponent biases differ by 8). A converted value is worth 1 or 2^-8
 * of e4m3(c), and the caller multiplies a chunk's sum by d * E4M3_INV (1 or 256): scaling
 * every product and partial sum by a power of two changes no rounding, so both give the same
 * bits while none of them is an fp32 subnormal (|x| above ~2^-109). (The invalid codes 0x7f /
 * 0xff are NaN to the instruction, +-480 to the integer path and the CPU.) Word u's 4 codes ->
 * f[0..3]. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define E4M3_INV 1.0f
#else
#define E4M3_INV 256.0f
#endif
__device__ __forceinline__ void e4m3x4(uint32_t u, float *f) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        uint32_t b;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(b) : "h"((unsigned short)(u >> (16 * h))));
#else
        const uint32_t x = __byte_perm(u, 0, h ? 0x4342 : 0x4140); /* codes 2h, 2h + 1 as 16-bit lanes */
        b = ((x << 8) & 0x80008000u) | ((x << 7) & 0x3f803f80u);
#endif
        const float2 v = __half22float2(*(const __half2 *)&b);
        f[2 * h] = v.x;
        f[2 * h + 1] = v.y;
    }
}
__device__ __forceinline__ float bf2f(uint32_t h) { return __uint_as_float(h << 16); }

/* FP8, repacked as Q8_0: a plane of 32 codes per block and a plane of bf16 d. value = d *
 * e4m3(code), one rounded product as in the C reference (deq_fp8 in src/quant.c). */
__device__ __forceinline__ void deq_fp8(const uint8_t *w, const uint8_t *s, int c, float *v) {
    const uint4 *p = (const uint4 *)(w + (size_t)c * 32);
    const float d = bf2f(__ldg((const unsigned short *)s + c));
#pragma unroll
    for (int j = 0; j < 2; j++) {
        uint4 t = __ldg(p + j);
        uint32_t u[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float f[4];
            e4m3x4(u[k], f);
#pragma unroll
            for (int i = 0; i < 4; i++) v[16 * j + 4 * k + i] = __fmul_rn(d, __fmul_rn(f[i], E4M3_INV));
        }
    }
}

/* The (d, m) fp16 pair of an RQ2 / RQ4 unit (d in the low half), as floats. */
__device__ __forceinline__ float2 rq_dm(uint32_t dm) {
    return make_float2(h2f((uint16_t)(dm & 0xffff)), h2f((uint16_t)(dm >> 16)));
}

/* RQ2, repacked: a code plane (16 bytes per 64-value block; weight j of a block at byte j/4,
 * bits 2*(j%4)) and a plane of (d, m) fp16 pairs, 4 bytes per block. Chunk c is half c%2 of
 * block c/2: its 8 code bytes are one aligned 8-byte load. value = d*code + m, the product
 * rounded before the add as in the C reference (deq_rq2 in src/quant.c). */
__device__ __forceinline__ void deq_rq2(const uint8_t *w, const uint8_t *s, int c, float *v) {
    uint2 t = __ldg((const uint2 *)(w + (size_t)c * 8));
    uint32_t dm = __ldg((const unsigned int *)s + c / 2);
    const float2 f = rq_dm(dm);
    const float d = f.x, m = f.y;
#pragma unroll
    for (int j = 0; j < 32; j++) {
        uint32_t u = j < 16 ? t.x : t.y;
        v[j] = __fadd_rn(__fmul_rn(d, (float)((u >> (2 * (j % 16))) & 3)), m);
    }
}

/* RQ4, repacked: a code plane (32 bytes per 64-value block; half h of the block is 16 bytes
 * in Q4_0's order: byte i holds value i in its low nibble, value 16 + i in its high one) and the
 * (d, m) plane as RQ2's. Chunk c is half c%2 of block c/2: one aligned 16-byte load. */
__device__ __forceinline__ void deq_rq4(const uint8_t *w, const uint8_t *s, int c, float *v) {
    const uint4 t = __ldg((const uint4 *)(w + (size_t)c * 16));
    const uint32_t dm = __ldg((const unsigned int *)s + c / 2), u[4] = {t.x, t.y, t.z, t.w};
    const float2 f = rq_dm(dm);
    const float d = f.x, m = f.y;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const uint32_t b = (u[j / 4] >> (8 * (j % 4))) & 0xff;
        v[j] = __fadd_rn(__fmul_rn(d, (float)(b & 15)), m);
        v[16 + j] = __fadd_rn(__fmul_rn(d, (float)(b >> 4)), m);
    }
}

/* The 32-value blocks with 4- or 5-bit codes, kept in the file's layout: Q4_1 (20 bytes: d, m,
 * qs[16]), Q5_0 (22: d, qh[4], qs[16]), Q5_1 (24: d, m, qh[4], qs[16]); only 2-byte aligned in
 * general, so loaded as 16-bit words. Value j: the nibble j of qs (low nibbles first), plus bit
 * j of qh as the fifth bit for Q5; Q5_0 decodes d*(q-16), Q4_1 and Q5_1 d*q + m. qn_words gives
 * the codes as 8 words of 4 bytes, values 4k..4k+3 in word k (a dp4a operand each). */
template <int T> struct qn_tr {
    static constexpr bool MIN = T != RL_Q5_0;  /* has m at byte 2 */
    static constexpr bool QH = T != RL_Q4_1;   /* has the fifth bits */
    static constexpr int QS = (MIN ? 4 : 2) + (QH ? 4 : 0);
    static constexpr int BYTES = QS + 16;
};

template <int T>
__device__ __forceinline__ void qn_words(const uint8_t *b, uint32_t *q) {
    using TR = qn_tr<T>;
    const unsigned short *h = (const unsigned short *)(b + TR::QS);
    uint32_t lo[4];
#pragma unroll
    for (int k = 0; k < 4; k++) lo[k] = (uint32_t)__ldg(h + 2 * k) | (uint32_t)__ldg(h + 2 * k + 1) << 16;
    uint32_t qh = 0;
    if constexpr (TR::QH) qh = (uint32_t)__ldg(h - 2) | (uint32_t)__ldg(h - 1) << 16;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        uint32_t nib = k < 4 ? lo[k] & 0x0F0F0F0Fu : (lo[k - 4] >> 4) & 0x0F0F0F0Fu;
        if constexpr (TR::QH) {
            uint32_t hb = (qh >> (4 * k)) & 0xF; /* bits of values 4k..4k+3 to bit 4 of each byte */
            uint32_t spread = (hb & 1) | (hb & 2) << 7 | (hb & 4) << 14 | (hb & 8) << 21;
            nib |= spread << 4;
        }
        q[k] = nib;
    }
}

template <int T>
__device__ __forceinline__ void deq_qn(const uint8_t *w, const uint8_t *, int c, float *v) {
    using TR = qn_tr<T>;
    const uint8_t *b = w + (size_t)c * TR::BYTES;
    uint32_t q[8];
    qn_words<T>(b, q);
    const float d = ldh(b), m = TR::MIN ? ldh(b + 2) : 0.0f;
#pragma unroll
    for (int j = 0; j < 32; j++) {
        int code = (int)((q[j / 4] >> (8 * (j % 4))) & 0xff);
        v[j] = TR::MIN ? __fadd_rn(__fmul_rn(d, (float)code), m) : __fmul_rn(d, (float)(code - 16));
    }
}

template <int T>
__device__ __forceinline__ void deq32(const uint8_t *w, const uint8_t *s, int c, float *v) {
    if (T == RL_F32) deq_f32(w, s, c, v);
    else if (T == RL_F16) deq_16bit<false>(w, s, c, v);
    else if (T == RL_BF16) deq_16bit<true>(w, s, c, v);
    else if (T == RL_Q4_0) deq_q4_0(w, s, c, v);
    else if (T == RL_Q8_0) deq_q8_0(w, s, c, v);
    else if (T == RL_FP8) deq_fp8(w, s, c, v);
    else if (T == RL_Q4_1 || T == RL_Q5_0 || T == RL_Q5_1) deq_qn<T>(w, s, c, v);
    else if (T == RL_Q4_K) deq_q4_k(w, s, c, v);
    else if (T == RL_Q5_K) deq_q5_k(w, s, c, v);
    else if (T == RL_Q6_K) deq_q6_k(w, s, c, v);
    else if (T == RL_RQ4) deq_rq4(w, s, c, v);
    else deq_rq2(w, s, c, v);
}

#endif
