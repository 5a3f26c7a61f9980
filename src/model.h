/* A Llama-family model bound from a GGUF file.
 *
 * The model description is data: one rl_config filled from metadata covers llama (Llama 2/3,
 * GQA, llama3 rope_freqs, tied output), qwen2 (q/k/v bias) and qwen3 (q/k RMSNorm, explicit
 * head_dim). Weight matrices are read in place from the mmap. Tensors are bound by name and
 * every shape and type is checked before use. */
#ifndef RL_MODEL_H
#define RL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gguf.h"
#include "tokenizer.h"

enum rl_arch { RL_ARCH_LLAMA, RL_ARCH_QWEN2, RL_ARCH_QWEN3 };

typedef struct rl_config {
    enum rl_arch arch;
    char arch_name[16];
    size_t n_layer;
    size_t n_embd;
    size_t n_ff;
    size_t n_head;
    size_t n_head_kv;
    size_t head_dim;    /* attention.key_length, default n_embd / n_head */
    size_t n_vocab;
    size_t n_ctx_train;
    size_t rope_dim;    /* rotated dims per head (<= head_dim) */
    float rope_base;
    float norm_eps;
    bool rope_neox;     /* pairs (i, i + rope_dim/2) (qwen) instead of (2i, 2i+1) (llama) */
    bool qkv_bias;
    bool qk_norm;
} rl_config;

/* A weight matrix of `rows` outputs by `cols` inputs in GGUF order: ne = {cols, rows}. */
typedef struct rl_matrix {
    uint32_t type;
    const void *data;
    size_t rows;
    size_t cols;
    size_t row_bytes;
} rl_matrix;

/* Bytes of a matrix's data (rows x row_bytes). */
static inline size_t rl_matrix_bytes(const rl_matrix *w) { return w->rows * w->row_bytes; }

typedef struct rl_layer {
    const float *attn_norm;        /* [n_embd] */
    rl_matrix wq;                  /* [n_head*head_dim][n_embd] */
    rl_matrix wk, wv;              /* [n_head_kv*head_dim][n_embd] */
    rl_matrix wo;                  /* [n_embd][n_head*head_dim] */
    const float *bq, *bk, *bv;     /* qwen2 biases or NULL */
    const float *q_norm, *k_norm;  /* qwen3: [head_dim] or NULL */
    const float *ffn_norm;         /* [n_embd] */
    rl_matrix w_gate, w_up;        /* [n_ff][n_embd] */
    rl_matrix w_down;              /* [n_embd][n_ff] */
} rl_layer;

/* A layer's matrices in forward order, as an initializer for an array of RL_LAYER_MATRIX_COUNT
 * pointers: the one list every loop over a layer's weights uses. */
#define RL_LAYER_MATRIX_COUNT 7
#define RL_LAYER_MATRICES(L) {&(L)->wq, &(L)->wk, &(L)->wv, &(L)->wo, &(L)->w_gate, &(L)->w_up, &(L)->w_down}

typedef struct rl_model {
    gguf_file file;
    rl_config cfg;
    rl_tokenizer *tok;
    rl_matrix tok_embd;            /* [n_vocab][n_embd] */
    rl_matrix output;              /* [n_vocab][n_embd]; == tok_embd when tied */
    bool tied_output;
    const float *output_norm;      /* [n_embd] */
    const float *rope_freqs;       /* [rope_dim/2] frequency divisors (llama3) or NULL */
    rl_layer *layers;              /* [n_layer] */
    float *f32_store;              /* owned fp32 copies of 1-D tensors */
    size_t file_weight_bytes;      /* bytes of all tensors in the file */
    uint32_t main_type;            /* most common matrix type (for display) */
} rl_model;

int rl_model_load(rl_model *m, const char *path, rl_err *e);
void rl_model_free(rl_model *m);

/* Bytes of weights one decode step reads: every matrix once, one embedding row, norms. */
size_t rl_model_bytes_per_token(const rl_model *m);
/* Short human description: "llama 22L 2048d Q4_0 (1.10 B params)". */
void rl_model_describe(const rl_model *m, char *buf, size_t cap);
size_t rl_model_n_params(const rl_model *m);
/* llama.cpp-style file type label ("Q4_0", "Q4_K_M"-like mixes shown as the main type). */
const char *rl_model_type_name(const rl_model *m);

#endif
