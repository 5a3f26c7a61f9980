/* Which ggml type each tensor of a model gets when a file is written in a given file type.
 *
 * One table and one rule set shared by `rawloop quantize` and `rawloop mkmodel`, so that a
 * random-weight benchmark file and a quantized real model of the same name have the same
 * tensor types. The _M recipes follow llama.cpp's (llama-quant.cpp): more bits for the output
 * head and for attn_v / ffn_down of some layers. The full rules are in docs/FORMATS.md. */
#ifndef RL_RECIPE_H
#define RL_RECIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A file type: a plain tensor type for every matrix, or a llama.cpp-style mix. */
typedef struct rl_ftype {
    const char *name;   /* "Q4_K_M" */
    uint32_t base;      /* type of the matrices the recipe does not single out (enum rl_type) */
    bool mix_m;         /* Q*_K_M: output head and attn_v/ffn_down of more_bits layers in Q6_K */
    uint32_t file_type; /* general.file_type value (llama.cpp's llama_ftype) */
} rl_ftype;

/* Case-insensitive lookup; NULL for an unknown name. */
const rl_ftype *rl_ftype_find(const char *name);
/* The i-th known file type (for usage text); NULL past the end. */
const rl_ftype *rl_ftype_at(size_t i);

/* llama.cpp's use_more_bits: the first and last eighth of the layers and every third one
 * between get the _M recipes' extra bits. */
bool rl_recipe_more_bits(size_t layer, size_t n_layer);

/* What a recipe needs to know about the model as a whole. */
typedef struct rl_recipe_ctx {
    const rl_ftype *ft;
    size_t n_layer;  /* {arch}.block_count */
    bool has_output; /* false for tied embeddings: token_embd is then also the output head */
    bool pure;       /* every matrix in ft->base (no _M mix); 1-D tensors still stay F32 */
} rl_recipe_ctx;

/* The type of tensor `name` of n_dims dimensions (ne[0] contiguous):
 *  - 1-D tensors (norms, biases, rope_freqs) are F32;
 *  - F32/F16/BF16 file types: every matrix in that type;
 *  - output.weight (or token_embd.weight when there is no output.weight) in Q6_K for the _M
 *    recipes; blk.N.attn_v / blk.N.ffn_down in Q6_K on more_bits layers for the _M recipes;
 *    everything else (token_embd included) in the base type;
 *  - a matrix whose ne[0] is not a multiple of the chosen type's block falls back: a K-quant
 *    (256-element blocks) to Q8_0, and when even 32 does not divide ne[0], to F16. (llama.cpp
 *    falls back to Q5_0/Q5_1/Q8_0, which rawloop does not compute; Q8_0 never loses quality.) */
uint32_t rl_recipe_type(const rl_recipe_ctx *c, const char *name, uint32_t n_dims,
                        const uint64_t *ne);

#endif
