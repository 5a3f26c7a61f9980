/* A Hugging Face model directory seen as the GGUF file llama.cpp's convert_hf_to_gguf.py would
 * make of it: tensors under llama.cpp names in GGUF shape order, and the metadata (model keys
 * and tokenizer) as GGUF key/values.
 *
 * Input: config.json; tokenizer.json (byte-level BPE, written as tokenizer.ggml.model "gpt2")
 * or tokenizer.model (SentencePiece, written as "llama"); tokenizer_config.json when present
 * (bos/eos tokens, add_bos_token); model.safetensors, or shards named by
 * model.safetensors.index.json, or every *.safetensors of the directory.
 * Architectures: llama (Llama 2/3/3.1/3.2, llama3 rope scaling -> rope_freqs.weight), qwen2,
 * qwen3. Every tensor is checked against the shape config.json implies; a missing, extra or
 * misshapen tensor, a missing shard or config key, a dtype other than F32/F16/BF16 (or
 * F8_E4M3, below) or an unsupported architecture or rope scaling is refused with a message
 * naming it.
 *
 * FP8 checkpoints (DeepSeek-V3, Qwen3-*-FP8, AutoFP8): config.json's quantization_config has
 * quant_method "fp8" (fmt "e4m3" when given, activation_scheme "dynamic" or "static") and
 * weight_block_size [br, bc] for block scales; a quantized matrix X.weight is F8_E4M3 and its
 * sibling X.weight_scale_inv or X.weight_scale (F32 or BF16) holds one float per br x bc block
 * of stored values, [ceil(rows / br), ceil(cols / bc)], or one for the whole tensor (shape []
 * or [1]). The sibling is consumed here, never a tensor of its own; a static checkpoint's
 * X.input_scale tensors are read past (noted in warning). docs/FORMATS.md, section FP8.
 *
 * Nothing is converted here: an hf_tensor points at the mapped shard bytes, and the caller
 * reads it row by row (hf_src_row gives the stored row behind each GGUF row, hf_read_row
 * decodes a stored row to float32). */
#ifndef RL_HF_H
#define RL_HF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gguf.h"

/* hf_tensor.type of an FP8 weight: one e4m3 code per value, scaled by hf_tensor.fp8. Not a
 * ggml type id (rawloop's own RL_FP8 is another layout): only hf_read_row decodes it. */
#define HF_F8_E4M3 UINT32_C(0x7fff0001)

/* The scales of an FP8 weight: stored value [r][c] = e4m3(code) * s[r / blk_rows][c / blk_cols],
 * s being X.weight_scale_inv (the inverse of the quantizer's scale, hence the name: it
 * multiplies). A per-tensor scale is one block as large as the tensor. */
typedef struct hf_fp8 {
    const void *scale;         /* [ceil(rows / blk_rows)][n_blk_cols] values of scale_type, in
                                  the mapping */
    uint32_t scale_type;       /* RL_F32 or RL_BF16 */
    size_t blk_rows, blk_cols; /* stored rows / columns per scale, >= 1 */
    size_t n_blk_cols;         /* scales per stored row: ceil(cols / blk_cols) */
} hf_fp8;

typedef struct hf_tensor {
    char name[64];              /* GGUF name, "blk.3.attn_q.weight" */
    char src[128];              /* HF name, "model.layers.3.self_attn.q_proj.weight" ("" for
                                   generated tensors), for messages */
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* GGUF order: ne[0] is the contiguous dim; unused dims 1 */
    uint32_t type;              /* element format of data: RL_F32, RL_F16, RL_BF16 or
                                   HF_F8_E4M3 */
    const void *data;           /* ne[1..] rows of ne[0] elements (in the mapping, or owned) */
    size_t nbytes;
    size_t perm_heads;          /* > 0: llama Q/K, rows stored in HF rotate-half order over
                                   this many heads; see hf_src_row */
    hf_fp8 fp8;                 /* type HF_F8_E4M3 only */
} hf_tensor;

typedef struct hf_model {
    char dir[512];
    char arch[16];          /* "llama", "qwen2", "qwen3" */
    size_t n_layer;
    size_t n_head, n_head_kv; /* attention heads, key/value heads (config.json) */
    size_t n_tensors;
    hf_tensor *tensors;     /* in llama.cpp's order: token_embd, rope_freqs, blk.*, norm, output */
    char warning[512];      /* non-fatal notes for the user ("" when none; "; " between) */
    void *priv;             /* mapped shards, config and tokenizer (hf.c) */
} hf_model;

/* Reads and validates the whole directory. On failure h is left closed (safe to hf_close). */
int hf_open(hf_model *h, const char *dir, rl_err *e);
void hf_close(hf_model *h);

/* Adds every key/value of the GGUF file except general.file_type and
 * general.quantization_version (the writer's caller sets those). */
int hf_write_kvs(const hf_model *h, gguf_writer *w, rl_err *e);

/* The stored row behind GGUF row r of a tensor of `rows` rows: r itself when perm_heads is 0;
 * for a permuted Q/K (HF keeps each head's rows as two halves, llama.cpp's interleaved rope
 * wants pairs 2i, 2i+1) row h*hd + (i%2)*hd/2 + i/2, where hd = rows/perm_heads, i = r%hd. */
size_t hf_src_row(size_t r, size_t rows, size_t perm_heads);

/* Stored row sr of t as ne[0] float32 values: F32/F16/BF16 widened; FP8 as
 * float(e4m3(code)) * its block's scale, one float32 multiply, which is what transformers'
 * Fp8Dequantize and DeepSeek's weight_dequant compute. Returns SIZE_MAX, or for an FP8 row
 * holding a NaN code (0x7f / 0xff, e4m3fn's only NaNs; a finite weight never has one) the column
 * of the first one, out being then incomplete. Thread-safe: reads the mapping only. */
size_t hf_read_row(const hf_tensor *t, size_t sr, float *out);

#endif
