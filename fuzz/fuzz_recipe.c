/* libFuzzer target: the recipe parser and glob (`rawloop quantize --recipe FILE`,
 * src/recipe.c). Any bytes are parsed; a rejection must say why and leave no rules. An accepted
 * recipe must hold patterns that fit, known types and line numbers inside the text, every
 * pattern must match its own text, and rl_glob_match must agree with a reference matcher (a
 * table over pattern and name positions) for each pattern against real tensor names and
 * against the other patterns' text; rl_recipe_choose then picks the first matching rule. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "recipe.h"
#include "types.h"

/* Whole-string match of p against s by dynamic programming: m[i][j] = p[i..] matches s[j..]. */
static bool glob_ref(const char *p, const char *s) {
    size_t np = strlen(p), ns = strlen(s);
    bool *m = calloc((np + 1) * (ns + 1), sizeof *m);
    if (!m) abort();
#define M(i, j) m[(i) * (ns + 1) + (j)]
    M(np, ns) = true;
    for (size_t i = np; i-- > 0;)
        for (size_t j = ns + 1; j-- > 0;) {
            if (p[i] == '*') M(i, j) = M(i + 1, j) || (j < ns && M(i, j + 1));
            else M(i, j) = j < ns && (p[i] == '?' || p[i] == s[j]) && M(i + 1, j + 1);
        }
    bool r = M(0, 0);
#undef M
    free(m);
    return r;
}

static const char *const names[] = {
    "token_embd.weight",   "output.weight",         "output_norm.weight",
    "blk.0.attn_q.weight", "blk.31.attn_v.weight",  "blk.7.ffn_down.weight",
    "blk.12.ffn_gate.weight", "blk.3.attn_output.weight", "",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rl_recipe_rules r;
    rl_err e = {0};
    if (rl_recipe_parse(&r, (const char *)data, size, "fuzz", &e)) {
        if (!e.msg[0] || r.n != 0 || r.rule != NULL) abort();
        rl_recipe_free(&r);
        return 0;
    }
    size_t lines = 1;
    for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
    for (size_t i = 0; i < r.n; i++) {
        const rl_recipe_rule *u = &r.rule[i];
        size_t len = strnlen(u->pattern, sizeof u->pattern);
        if (len == 0 || len >= sizeof u->pattern) abort();
        if (u->line < 1 || u->line > lines || (i && u->line <= r.rule[i - 1].line)) abort();
        if (rl_type_name(u->type) == NULL) abort();
        if (!rl_glob_match(u->pattern, u->pattern)) abort();
        for (size_t k = 0; k < sizeof names / sizeof *names; k++)
            if (rl_glob_match(u->pattern, names[k]) != glob_ref(u->pattern, names[k])) abort();
        for (size_t k = 0; k < r.n; k++)
            if (rl_glob_match(u->pattern, r.rule[k].pattern) != glob_ref(u->pattern, r.rule[k].pattern))
                abort();
    }
    (void)rl_recipe_file_type(&r);
    rl_recipe_ctx ctx = {.ft = rl_ftype_find("Q8_0"), .n_layer = 32, .has_output = true};
    const uint64_t shapes[][2] = {{4096, 4096}, {32, 7}, {100, 3}};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        for (size_t s = 0; s < 3; s++)
            for (uint32_t nd = 1; nd <= 2; nd++) {
                rl_recipe_choice c;
                rl_err ce = {0};
                int rc = rl_recipe_choose(&ctx, &r, names[k], nd, shapes[s], &c, &ce);
                if (nd == 1) { /* 1-D tensors are F32 whatever the rules say */
                    if (rc || c.type != RL_F32) abort();
                    continue;
                }
                size_t first = r.n;
                for (size_t i = 0; i < r.n && first == r.n; i++)
                    if (rl_glob_match(r.rule[i].pattern, names[k])) first = i;
                if (first == r.n) {
                    if (!rc || !ce.msg[0]) abort(); /* no rule matches: an error that says so */
                    continue;
                }
                if (rc || c.line != r.rule[first].line || c.wanted != r.rule[first].type) abort();
                if (rl_type_name(c.type) == NULL) abort();
            }
    rl_recipe_free(&r);
    return 0;
}
