/* ggml tensor type ids and their block geometry, plus rawloop's own types.
 *
 * The GGUF reader needs the block size of every type ggml defines (to size tensors it will
 * never compute with); the engine computes with a subset (rl_type_computable).
 *
 * rawloop's own types have ids from RL_RAWLOOP_TYPE_BASE up, far past ggml's range, so that
 * llama.cpp and the gguf Python package refuse such files instead of misreading them. A file
 * holding one must carry RL_FORMAT_VERSION_KEY (checked by gguf_open, written by the GGUF
 * writer); docs/FORMATS.md, section RQ2, has the rule. */
#ifndef RL_TYPES_H
#define RL_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum rl_type {
    RL_F32 = 0,
    RL_F16 = 1,
    RL_Q4_0 = 2,
    RL_Q4_1 = 3,
    RL_Q5_0 = 6,
    RL_Q5_1 = 7,
    RL_Q8_0 = 8,
    RL_Q8_1 = 9,
    RL_Q2_K = 10,
    RL_Q3_K = 11,
    RL_Q4_K = 12,
    RL_Q5_K = 13,
    RL_Q6_K = 14,
    RL_Q8_K = 15,
    RL_BF16 = 30,
    RL_TYPE_COUNT = 43, /* ggml ids >= this are unknown */
    RL_RAWLOOP_TYPE_BASE = 1024,
    /* 64 weights: 16 bytes of 2-bit codes (weight j: byte j/4, bits 2*(j%4)), fp16 d, fp16 m;
     * value = d*code + m. 2.5 bits per weight. */
    RL_RQ2 = 1024,
    /* 32 weights: bf16 d, then 32 FP8 e4m3 codes (bias 7, no infinities; 0x7f/0xff invalid);
     * value = d * e4m3(code). 8.5 bits per weight, Q8_0's block geometry. docs/FORMATS.md,
     * section FP8. */
    RL_FP8 = 1025,
    /* 64 weights: 32 bytes of 4-bit codes (per 32-value half h: byte 16h + i holds weight
     * 32h + i in its low nibble, 32h + 16 + i in its high one, Q4_0's order), fp16 d, fp16 m;
     * value = d*code + m. 4.5 bits per weight. docs/FORMATS.md, section RQ4. */
    RL_RQ4 = 1026,
    RL_RAWLOOP_TYPE_END = 1027,   /* one past the last rawloop type this build knows */
    RL_RAWLOOP_TYPE_LIMIT = 2048, /* ids [BASE, LIMIT) are reserved for rawloop's types */
};

#define RL_QK_RQ2 64 /* elements per RQ2 block */
#define RL_QK_RQ4 64 /* elements per RQ4 block */
#define RL_FORMAT_VERSION_KEY "rawloop.format_version" /* uint32 */
#define RL_FORMAT_VERSION 1u /* the version this build writes and the highest it reads */

#define RL_QK 32   /* elements per block of Q4_0 / Q5_0 / Q5_1 / Q8_0 */
#define RL_QK_K 256 /* elements per super-block of the K-quants */

typedef struct rl_type_info {
    const char *name; /* "Q4_K" */
    size_t blck;      /* elements per block */
    size_t size;      /* bytes per block */
} rl_type_info;

/* NULL for ids that are out of range, removed from ggml, or whose block size this build does
 * not know; the caller names the id in its error. */
const rl_type_info *rl_type_get(uint32_t type);

/* Name for messages; "type 37" style text for unknown ids (static buffer per call site is not
 * needed: unknown ids return "unknown"). */
const char *rl_type_name(uint32_t type);

/* F32, F16, BF16: the float storage types. */
bool rl_type_is_float(uint32_t type);
/* Types always computed with fp32 activations: the float types and FP8, whose codes are not
 * integers (no 8-bit activation path). */
bool rl_type_fp32_act(uint32_t type);

/* True for the types the engine can compute with (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K
 * RQ2 RQ4 FP8) on the CPU; the GPU runs them all (rl_cuda_runs_type, src/backend.h). */
bool rl_type_computable(uint32_t type);

/* True for ids in rawloop's reserved range [RL_RAWLOOP_TYPE_BASE, RL_RAWLOOP_TYPE_LIMIT),
 * known to this build or not. */
bool rl_type_is_rawloop(uint32_t type);

/* Computable type by name, case-insensitive ("q4_k", "RQ2", "fp8"); UINT32_MAX when unknown. */
uint32_t rl_type_from_name(const char *name);
/* The i-th computable type (for usage text and loops over all types); UINT32_MAX past the end. */
uint32_t rl_type_computable_at(size_t i);
/* Their names, separated by sep, into buf (for messages; truncated to cap - 1 bytes). */
void rl_type_computable_names(char *buf, size_t cap, const char *sep);

/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or type unknown. */
size_t rl_row_bytes(uint32_t type, size_t n);

#endif
