#include "recipe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "types.h"

/* general.file_type values are llama.cpp's llama_ftype: Q4_K and Q5_K are its Q4_K_S / Q5_K_S
 * numbers (the nearest "mostly" type); the _M ones are 15 and 17. */
static const rl_ftype k_ftypes[] = {
    {"F32", RL_F32, RL_MIX_NONE, 0},     {"F16", RL_F16, RL_MIX_NONE, 1},
    {"BF16", RL_BF16, RL_MIX_NONE, 32},  {"Q8_0", RL_Q8_0, RL_MIX_NONE, 7},
    {"Q4_0", RL_Q4_0, RL_MIX_NONE, 2},   {"Q4_1", RL_Q4_1, RL_MIX_NONE, 3},
    {"Q5_0", RL_Q5_0, RL_MIX_NONE, 8},   {"Q5_1", RL_Q5_1, RL_MIX_NONE, 9},
    {"Q4_K", RL_Q4_K, RL_MIX_NONE, 14},  {"Q5_K", RL_Q5_K, RL_MIX_NONE, 16},
    {"Q6_K", RL_Q6_K, RL_MIX_NONE, 18},  {"Q4_K_S", RL_Q4_K, RL_MIX_S, 14},
    {"Q4_K_M", RL_Q4_K, RL_MIX_M, 15},   {"Q5_K_S", RL_Q5_K, RL_MIX_NONE, 16},
    {"Q5_K_M", RL_Q5_K, RL_MIX_M, 17},
};

/* rawloop's own file types: kept apart from llama.cpp's list, whose numbers they do not use */
static const rl_ftype k_rawloop_ftypes[] = {
    {"RQ2", RL_RQ2, RL_MIX_NONE, RL_FILE_TYPE_RAWLOOP},
    {"FP8", RL_FP8, RL_MIX_NONE, RL_FILE_TYPE_RAWLOOP},
    {"RQ4", RL_RQ4, RL_MIX_NONE, RL_FILE_TYPE_RAWLOOP},
};

const rl_ftype *rl_ftype_find(const char *name) {
    for (size_t i = 0; i < sizeof k_ftypes / sizeof *k_ftypes; i++)
        if (!strcasecmp(k_ftypes[i].name, name)) return &k_ftypes[i];
    for (size_t i = 0; i < sizeof k_rawloop_ftypes / sizeof *k_rawloop_ftypes; i++)
        if (!strcasecmp(k_rawloop_ftypes[i].name, name)) return &k_rawloop_ftypes[i];
    return NULL;
}

const rl_ftype *rl_ftype_at(size_t i) {
    return i < sizeof k_ftypes / sizeof *k_ftypes ? &k_ftypes[i] : NULL;
}

const rl_ftype *rl_ftype_rawloop_at(size_t i) {
    return i < sizeof k_rawloop_ftypes / sizeof *k_rawloop_ftypes ? &k_rawloop_ftypes[i] : NULL;
}

bool rl_recipe_is_70b(const char *arch, size_t n_layer, size_t n_head, size_t n_head_kv) {
    if (n_layer != 80) return false;
    return (!strcmp(arch, "llama") && n_head != n_head_kv) || !strcmp(arch, "qwen2");
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

/* The row-length fallback shared by file types and recipe files: llama.cpp's
 * tensor_type_fallback (src/llama-quant.cpp), which replaces a 256-block type that does not
 * divide ne[0] by a 32-block one of about the same size, and uses F16 when even that does not
 * fit. Its Q2_K/Q3_K -> Q4_0 and IQ* -> IQ4_NL entries are for types rawloop does not write.
 * Types it has no entry for (llama.cpp refuses the tensor) fall back to Q8_0 here, which costs
 * no quality: RQ2 and RQ4 (64-value blocks), and 32-block types, for which Q8_0 never fits either, so
 * they end in F16. */
static uint32_t fit_row(uint32_t t, uint64_t ne0) {
    if (ne0 % rl_type_get(t)->blck == 0) return t;
    uint32_t fb = t == RL_Q4_K ? RL_Q5_0 : t == RL_Q5_K ? RL_Q5_1 : RL_Q8_0;
    return ne0 % rl_type_get(fb)->blck == 0 ? fb : RL_F16;
}

/* llama.cpp's output-head rule (llama_tensor_get_type_impl, category OUTPUT, which is also the
 * tied token_embd), for every quantized llama.cpp file type unless pure: Q8_0 when ne[0] is not
 * a multiple of the file type's own block, else Q6_K, except that a Q8_0 file keeps Q8_0. The
 * Q6_K then goes through fit_row like any other choice. */
static uint32_t head_type(uint32_t base, uint64_t ne0) {
    if (ne0 % rl_type_get(base)->blck) return RL_Q8_0;
    return base == RL_Q8_0 ? RL_Q8_0 : RL_Q6_K;
}

int rl_recipe_choose(const rl_recipe_ctx *c, const rl_recipe_rules *rules, const char *name,
                     uint32_t n_dims, const uint64_t *ne, rl_recipe_choice *out, rl_err *e) {
    *out = (rl_recipe_choice){RL_F32, RL_F32, 0};
    if (n_dims < 2) return 0;
    uint32_t t;
    if (rules) {
        const rl_recipe_rule *hit = NULL;
        for (size_t i = 0; i < rules->n && !hit; i++)
            if (rl_glob_match(rules->rule[i].pattern, name)) hit = &rules->rule[i];
        if (!hit)
            return rl_fail(e, "%s: no rule matches tensor '%s' (add a catch-all line such as "
                           "'* Q8_0' at the end)", rules->name, name);
        t = hit->type;
        out->line = hit->line;
    } else {
        const rl_ftype *ft = c->ft;
        t = ft->base;
        const bool head = !strcmp(name, "output.weight") || (!c->has_output && !strcmp(name, "token_embd.weight"));
        if (!c->pure && !rl_type_is_float(t) && !rl_type_is_rawloop(t)) {
            const long v = layer_of(name, "attn_v.weight"), l = v >= 0 ? v : layer_of(name, "ffn_down.weight");
            if (head)
                t = head_type(t, ne[0]);
            else if (ft->mix == RL_MIX_M && l >= 0 && rl_recipe_more_bits((size_t)l, c->n_layer))
                t = RL_Q6_K;
            else if (ft->mix == RL_MIX_S && l >= 0 && (v >= 0 ? v < 4 : (size_t)l < c->n_layer / 8))
                t = RL_Q5_K;
            else if (c->calib && (t == RL_Q4_0 || t == RL_Q5_0) && v < 0 && l >= 0 && (size_t)l < c->n_layer / 8)
                t = t == RL_Q4_0 ? RL_Q4_1 : RL_Q5_1; /* llama.cpp's guard for the first ffn_down */
            /* after the bumps, as in llama.cpp: a more_bits layer's Q6_K stays */
            if (c->is_70b && ft->mix != RL_MIX_NONE && v >= 0 && t == RL_Q4_K) t = RL_Q5_K;
        }
        /* a 2-bit embedding (and tied head) loses too much; FP8 keeps its own 8 bits */
        if (t == RL_RQ2 && !c->pure && !strcmp(name, "token_embd.weight")) t = RL_Q8_0;
        /* RQ4 stands in for the 4-bit llama.cpp types: their output-head rule, so that its files
         * compare with theirs tensor for tensor */
        if (t == RL_RQ4 && !c->pure && head) t = head_type(t, ne[0]);
    }
    out->wanted = t;
    out->type = fit_row(t, ne[0]);
    return 0;
}

uint32_t rl_recipe_type(const rl_recipe_ctx *c, const char *name, uint32_t n_dims,
                        const uint64_t *ne) {
    rl_recipe_choice ch;
    rl_recipe_choose(c, NULL, name, n_dims, ne, &ch, NULL); /* cannot fail without rules */
    return ch.type;
}

/* ---- recipe files ---------------------------------------------------------------------------- */

bool rl_glob_match(const char *p, const char *s) {
    /* iterative: on a mismatch after a '*', let that star absorb one more character */
    const char *star = NULL, *resume = NULL;
    while (*s) {
        if (*p == '*') {
            star = p++;
            resume = s;
        } else if (*p == '?' || *p == *s) {
            p++;
            s++;
        } else if (star) {
            p = star + 1;
            s = ++resume;
        } else {
            return false;
        }
    }
    while (*p == '*') p++;
    return *p == '\0';
}

void rl_recipe_free(rl_recipe_rules *r) {
    free(r->rule);
    r->rule = NULL;
    r->n = 0;
}

static bool is_blank(char ch) { return ch == ' ' || ch == '\t' || ch == '\r'; }

int rl_recipe_parse(rl_recipe_rules *r, const char *text, size_t len, const char *name, rl_err *e) {
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name ? name : "(recipe)");
    size_t cap = 0, line = 0;
    for (size_t pos = 0; pos < len;) {
        size_t end = pos;
        while (end < len && text[end] != '\n') end++;
        line++;
        /* split the line (comment stripped) into at most 3 fields */
        const char *f[3];
        size_t fl[3], nf = 0;
        for (size_t i = pos; i < end && text[i] != '#';) {
            if (text[i] == '\0') {
                rl_fail(e, "%s:%zu: NUL byte in the line (not a text file?)", r->name, line);
                goto fail;
            }
            if (is_blank(text[i])) {
                i++;
                continue;
            }
            size_t j = i;
            while (j < end && !is_blank(text[j]) && text[j] != '#' && text[j] != '\0') j++;
            if (nf < 3) {
                f[nf] = text + i;
                fl[nf] = j - i;
            }
            nf++;
            i = j;
        }
        pos = end + 1;
        if (nf == 0) continue;
        if (nf != 2) {
            rl_fail(e, "%s:%zu: expected 'PATTERN TYPE', found %zu field%s", r->name, line, nf,
                    nf == 1 ? "" : "s");
            goto fail;
        }
        if (fl[0] >= sizeof r->rule->pattern) {
            rl_fail(e, "%s:%zu: pattern of %zu bytes is too long (max %zu)", r->name, line, fl[0],
                    sizeof r->rule->pattern - 1);
            goto fail;
        }
        char tn[32];
        snprintf(tn, sizeof tn, "%.*s", (int)(fl[1] < 31 ? fl[1] : 31), f[1]);
        uint32_t t = fl[1] < 31 ? rl_type_from_name(tn) : UINT32_MAX;
        if (t == UINT32_MAX) {
            char known[256];
            rl_type_computable_names(known, sizeof known, " ");
            rl_fail(e, "%s:%zu: unknown tensor type '%.*s' (known: %s)", r->name, line,
                    (int)(fl[1] < 64 ? fl[1] : 64), f[1], known);
            goto fail;
        }
        if (r->n == cap) {
            cap = cap ? 2 * cap : 16;
            rl_recipe_rule *nr = realloc(r->rule, cap * sizeof *nr);
            if (!nr) {
                rl_fail(e, "%s: out of memory", r->name);
                goto fail;
            }
            r->rule = nr;
        }
        rl_recipe_rule *rr = &r->rule[r->n++];
        memcpy(rr->pattern, f[0], fl[0]);
        rr->pattern[fl[0]] = '\0';
        rr->type = t;
        rr->line = line;
    }
    if (r->n == 0) {
        rl_fail(e, "%s: no rules (expected lines 'PATTERN TYPE')", r->name);
        goto fail;
    }
    return 0;
fail:
    rl_recipe_free(r);
    return -1;
}

int rl_recipe_load(rl_recipe_rules *r, const char *path, rl_err *e) {
    enum { MAX_BYTES = 1 << 20 };
    memset(r, 0, sizeof *r);
    FILE *fp = fopen(path, "rb");
    if (!fp) return rl_fail(e, "%s: cannot open recipe: %s", path, strerror(errno));
    char *buf = malloc(MAX_BYTES + 1);
    if (!buf) {
        fclose(fp);
        return rl_fail(e, "%s: out of memory", path);
    }
    size_t len = fread(buf, 1, MAX_BYTES + 1, fp);
    int err = ferror(fp) ? errno : 0;
    fclose(fp);
    int rc;
    if (err)
        rc = rl_fail(e, "%s: cannot read recipe: %s", path, strerror(err));
    else if (len > MAX_BYTES)
        rc = rl_fail(e, "%s: recipe file is larger than %d bytes", path, MAX_BYTES);
    else
        rc = rl_recipe_parse(r, buf, len, path, e);
    free(buf);
    return rc;
}

uint32_t rl_recipe_file_type(const rl_recipe_rules *r) {
    if (r->n == 0) return 1;
    uint32_t t = r->rule[0].type;
    bool seen_star = false;
    for (size_t i = 0; i < r->n; i++) {
        if (rl_type_is_rawloop(r->rule[i].type)) return RL_FILE_TYPE_RAWLOOP;
        if (!seen_star && !strcmp(r->rule[i].pattern, "*")) { /* later ones are never reached */
            t = r->rule[i].type;
            seen_star = true;
        }
    }
    for (size_t i = 0; i < sizeof k_ftypes / sizeof *k_ftypes; i++)
        if (k_ftypes[i].base == t && k_ftypes[i].mix == RL_MIX_NONE) return k_ftypes[i].file_type;
    return 1;
}
