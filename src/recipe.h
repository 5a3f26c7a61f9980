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

#include "err.h"

/* llama.cpp's per-layer bumps (llama_tensor_get_type, dense models): _M: attn_v and ffn_down of
 * the more_bits layers in Q6_K; Q4_K_S: attn_v of layers 0-3 and ffn_down of the first n/8
 * layers in Q5_K. */
enum rl_mix { RL_MIX_NONE, RL_MIX_M, RL_MIX_S };

/* A file type: a plain tensor type for every matrix, or a llama.cpp-style mix. */
typedef struct rl_ftype {
    const char *name;   /* "Q4_K_M" */
    uint32_t base;      /* type of the matrices the recipe does not single out (enum rl_type) */
    uint8_t mix;        /* which attn_v/ffn_down get more bits (enum rl_mix; the head rule is
                           every quantized file type's) */
    uint32_t file_type; /* general.file_type value (llama.cpp's llama_ftype) */
} rl_ftype;

/* general.file_type of files whose matrices use rawloop's own types (outside llama_ftype,
 * whose largest value, LLAMA_FTYPE_GUESSED, is 1024). */
#define RL_FILE_TYPE_RAWLOOP 2048u

/* Case-insensitive lookup, llama.cpp's file types and rawloop's (RQ2, FP8, RQ4); NULL for an unknown
 * name. */
const rl_ftype *rl_ftype_find(const char *name);
/* The i-th known llama.cpp file type (for usage text); NULL past the end. */
const rl_ftype *rl_ftype_at(size_t i);
/* The i-th rawloop file type (RQ2: every matrix in RQ2 but token_embd in Q8_0 unless --pure;
 * FP8: every matrix; RQ4: every matrix but the output head, which takes llama.cpp's head rule
 * unless --pure); NULL past the end. */
const rl_ftype *rl_ftype_rawloop_at(size_t i);

/* A recipe file (`rawloop quantize --recipe FILE`): lines "PATTERN TYPE", '#' to the end of a
 * line is a comment, blank lines are skipped. PATTERN is a glob over the whole tensor name
 * ('*' any run of characters, dots included; '?' one character; everything else literal);
 * TYPE a computable tensor type name (rl_type_from_name). The first rule whose pattern
 * matches a matrix's name gives its type. */
typedef struct rl_recipe_rule {
    char pattern[128];
    uint32_t type;
    size_t line; /* 1-based line in the file, for messages */
} rl_recipe_rule;

typedef struct rl_recipe_rules {
    char name[256];       /* file name, for messages */
    rl_recipe_rule *rule; /* [n] in file order */
    size_t n;
} rl_recipe_rules;

/* Parses text of len bytes (name: for messages). Errors name the line; on failure r is empty
 * (safe to rl_recipe_free). */
int rl_recipe_parse(rl_recipe_rules *r, const char *text, size_t len, const char *name, rl_err *e);
/* Reads and parses a file (at most 1 MiB). */
int rl_recipe_load(rl_recipe_rules *r, const char *path, rl_err *e);
void rl_recipe_free(rl_recipe_rules *r);
/* Whole-string glob match with '*' and '?'. */
bool rl_glob_match(const char *pattern, const char *s);
/* general.file_type for a file written with these rules: RL_FILE_TYPE_RAWLOOP when a rule
 * names a rawloop type, else the plain llama.cpp file type of the catch-all rule's type (the
 * first rule whose pattern is "*"), else of the first rule's. */
uint32_t rl_recipe_file_type(const rl_recipe_rules *r);

/* llama.cpp's use_more_bits: the first and last eighth of the layers and every third one
 * between get the _M recipes' extra bits. */
bool rl_recipe_more_bits(size_t layer, size_t n_layer);

/* What a recipe needs to know about the model as a whole. */
typedef struct rl_recipe_ctx {
    const rl_ftype *ft;
    size_t n_layer;  /* {arch}.block_count */
    bool has_output; /* false for tied embeddings: token_embd is then also the output head */
    bool pure;       /* every matrix in ft->base (no head rule, bumps or calib rule); 1-D tensors
                        still stay F32 */
    bool calib;      /* --calib given (llama.cpp's has_imatrix): Q4_0 / Q5_0 put the first n/8
                        ffn_down in Q4_1 / Q5_1 */
    bool is_70b;     /* llama.cpp's LLM_TYPE_70B (rl_recipe_is_70b): the _M / _S recipes put
                        attn_v in Q5_K where they would write Q4_K */
} rl_recipe_ctx;

/* Whether llama.cpp would quantize this model as its 70B type: its loader gives llama models
 * of 80 layers with grouped-query attention (n_head != n_head_kv; without it, 80 layers is
 * the 65B) and qwen2 models of 80 layers that type; of the architectures rawloop reads, no
 * other. Eight query heads then share each attn_v row, so attn_v is an eighth of attn_q's
 * size and more bits there cost little. */
bool rl_recipe_is_70b(const char *arch, size_t n_layer, size_t n_head, size_t n_head_kv);

/* What rl_recipe_choose decided for one tensor. */
typedef struct rl_recipe_choice {
    uint32_t type;   /* the type to write */
    uint32_t wanted; /* the type the recipe asked for; differs from type after a fallback */
    size_t line;     /* the recipe file line that matched, 0 without rules or for 1-D tensors */
} rl_recipe_choice;

/* The type of tensor `name` of n_dims dimensions (ne[0] contiguous):
 *  - 1-D tensors (norms, biases, rope_freqs) are F32;
 *  - F32/F16/BF16 file types: every matrix in that type;
 *  - output.weight (or token_embd.weight when there is no output.weight) in every quantized
 *    llama.cpp file type unless pure, as llama.cpp does: Q8_0 when ne[0] is not a multiple of
 *    the file type's block, else Q6_K (a Q8_0 file keeps Q8_0);
 *    blk.N.attn_v / blk.N.ffn_down in Q6_K on more_bits layers for the _M recipes; for
 *    Q4_K_S attn_v of layers 0-3 and ffn_down of layers below n_layer / 8 in Q5_K (Q5_K_S has
 *    no bumps: it is Q5_K with the head rule); for a 70B (is_70b) every other attn_v of the
 *    _M / _S recipes that would be Q4_K is Q5_K; with calib, ffn_down of layers below n_layer / 8
 *    in Q4_1 for Q4_0 and Q5_1 for Q5_0 (llama.cpp does this only with an imatrix);
 *    token_embd.weight in Q8_0 for RQ2 unless pure (the rows it looks up, and the output
 *    head when tied, lose too much at 2 bits); for RQ4 the head rule above, unless pure;
 *    everything else (token_embd included) in the base type;
 *  - a matrix whose ne[0] is not a multiple of the chosen type's block falls back as in
 *    llama.cpp's tensor_type_fallback: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0 (RQ2 and RQ4,
 *    which llama.cpp does not know, -> Q8_0), and to F16 when the fallback does not fit either. */
uint32_t rl_recipe_type(const rl_recipe_ctx *c, const char *name, uint32_t n_dims,
                        const uint64_t *ne);

/* The same decision with its provenance. With rules (a recipe file; c is then not used):
 * 1-D tensors are F32; a matrix takes the type of the first matching rule, with the same
 * row-length fallback as above (llama.cpp likewise applies it to its manual overrides).
 * Fails, naming the tensor, when no rule matches a matrix. Without rules it cannot fail. */
int rl_recipe_choose(const rl_recipe_ctx *c, const rl_recipe_rules *rules, const char *name,
                     uint32_t n_dims, const uint64_t *ne, rl_recipe_choice *out, rl_err *e);

#endif
