#include "recipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "types.h"

/* general.file_type values are llama.cpp's llama_ftype: Q4_K and Q5_K are its Q4_K_S / Q5_K_S
 * numbers (the nearest "mostly" type); the _M ones are 15 and 17. */
static const rl_ftype k_ftypes[] = {
    {"F32", RL_F32, false, 0},    {"F16", RL_F16, false, 1},    {"BF16", RL_BF16, false, 32},
    {"Q8_0", RL_Q8_0, false, 7},  {"Q4_0", RL_Q4_0, false, 2},  {"Q4_K", RL_Q4_K, false, 14},
    {"Q5_K", RL_Q5_K, false, 16}, {"Q6_K", RL_Q6_K, false, 18}, {"Q4_K_M", RL_Q4_K, true, 15},
    {"Q5_K_M", RL_Q5_K, true, 17},
};

const rl_ftype *rl_ftype_find(const char *name) {
    for (size_t i = 0; i < sizeof k_ftypes / sizeof *k_ftypes; i++)
        if (!strcasecmp(k_ftypes[i].name, name)) return &k_ftypes[i];
    return NULL;
}

const rl_ftype *rl_ftype_at(size_t i) {
    return i < sizeof k_ftypes / sizeof *k_ftypes ? &k_ftypes[i] : NULL;
}

bool rl_recipe_more_bits(size_t i, size_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i >= n / 8 && (i - n / 8) % 3 == 2);
}

/* "blk.N.<suffix>" -> N when the rest is exactly suffix; -1 otherwise. */
static long layer_of(const char *name, const char *suffix) {
    if (strncmp(name, "blk.", 4)) return -1;
    char *end;
    const char *p = name + 4;
    if (*p < '0' || *p > '9') return -1;
    long l = strtol(p, &end, 10);
    if (*end != '.' || strcmp(end + 1, suffix)) return -1;
    return l;
}

uint32_t rl_recipe_type(const rl_recipe_ctx *c, const char *name, uint32_t n_dims,
                        const uint64_t *ne) {
    if (n_dims < 2) return RL_F32;
    const rl_ftype *ft = c->ft;
    uint32_t t = ft->base;
    if (ft->mix_m && !c->pure && !rl_type_is_float(t)) {
        bool head = !strcmp(name, "output.weight") ||
                    (!c->has_output && !strcmp(name, "token_embd.weight"));
        long l = layer_of(name, "attn_v.weight");
        if (l < 0) l = layer_of(name, "ffn_down.weight");
        if (head || (l >= 0 && rl_recipe_more_bits((size_t)l, c->n_layer))) t = RL_Q6_K;
    }
    const rl_type_info *ti = rl_type_get(t);
    if (ne[0] % ti->blck == 0) return t;
    if (ne[0] % RL_QK == 0) return RL_Q8_0;
    return RL_F16;
}
