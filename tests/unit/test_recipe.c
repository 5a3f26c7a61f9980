/* Per-tensor type recipes (src/recipe.h) on the tensor list of a 22-layer TinyLlama-1.1B and
 * on small edge cases. The expected layer sets are written out by hand from llama.cpp's
 * use_more_bits for 22 layers (first 22/8 = 2, last from 7*22/8 = 19, every third between
 * starting at 2 + 2), not computed with the function under test. */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "recipe.h"
#include "types.h"

/* TinyLlama-1.1B: n_embd 2048, kv dim 256, n_ff 5632, 22 layers, untied output head. */
#define N_LAYER 22
static const int k_q6_layers[] = {0, 1, 4, 7, 10, 13, 16, 19, 20, 21};

static bool in_q6_set(size_t l) {
    for (size_t i = 0; i < sizeof k_q6_layers / sizeof *k_q6_layers; i++)
        if ((size_t)k_q6_layers[i] == l) return true;
    return false;
}

static uint32_t ty(const rl_recipe_ctx *c, const char *name, uint32_t n_dims, uint64_t ne0,
                   uint64_t ne1) {
    uint64_t ne[4] = {ne0, ne1, 1, 1};
    return rl_recipe_type(c, name, n_dims, ne);
}

/* Every tensor of the model under file type `ft`; `mix` true when the _M rules should apply
 * (expect Q6_K on the hand-written layers), base = the type of everything else. The head is
 * Q6_K in every quantized file type but Q8_0 (llama.cpp's output rule) unless pure. */
static void check_tinyllama(const char *ftname, uint32_t base, bool mix, bool pure) {
    const rl_ftype *ft = rl_ftype_find(ftname);
    CHECK(ft != NULL, "file type %s known", ftname);
    if (!ft) return;
    rl_recipe_ctx c = {ft, N_LAYER, true, pure, false, false};
    bool quantized = base != RL_F32 && base != RL_F16 && base != RL_BF16;
    uint32_t head = quantized && !pure && base != RL_Q8_0 ? RL_Q6_K : base;
    CHECK(ty(&c, "token_embd.weight", 2, 2048, 32000) == base, "%s token_embd", ftname);
    CHECK(ty(&c, "output.weight", 2, 2048, 32000) == head, "%s output", ftname);
    CHECK(ty(&c, "output_norm.weight", 1, 2048, 1) == RL_F32, "%s output_norm", ftname);
    size_t n_q6 = 0;
    for (size_t l = 0; l < N_LAYER; l++) {
        char nm[64];
        uint32_t more = mix && in_q6_set(l) ? RL_Q6_K : base;
#define T(s, nd, a, b, want) do { snprintf(nm, sizeof nm, "blk.%zu." s, l); \
        uint32_t got = ty(&c, nm, nd, a, b); \
        CHECK(got == (want), "%s %s: got %s, want %s", ftname, nm, rl_type_name(got), \
              rl_type_name(want)); } while (0)
        T("attn_norm.weight", 1, 2048, 1, RL_F32);
        T("ffn_norm.weight", 1, 2048, 1, RL_F32);
        T("attn_q.weight", 2, 2048, 2048, base);
        T("attn_k.weight", 2, 2048, 256, base);
        T("attn_v.weight", 2, 2048, 256, more);
        T("attn_output.weight", 2, 2048, 2048, base);
        T("ffn_gate.weight", 2, 2048, 5632, base);
        T("ffn_up.weight", 2, 2048, 5632, base);
        /* ffn_down's rows are 5632 = 22 * 256 long: K-quants fit, no fallback */
        T("ffn_down.weight", 2, 5632, 2048, more);
#undef T
        n_q6 += more == RL_Q6_K && base != RL_Q6_K;
    }
    CHECK(n_q6 == (mix ? 10u : 0u), "%s: %zu more_bits layers", ftname, n_q6);
}

static void test_tinyllama(void) {
    check_tinyllama("Q4_K_M", RL_Q4_K, true, false);
    check_tinyllama("q5_k_m", RL_Q5_K, true, false); /* names are case-insensitive */
    check_tinyllama("Q4_K_M", RL_Q4_K, false, true);  /* --pure: no mix */
    check_tinyllama("Q4_K", RL_Q4_K, false, false);
    check_tinyllama("Q5_K", RL_Q5_K, false, false);
    check_tinyllama("Q6_K", RL_Q6_K, false, false);
    check_tinyllama("Q8_0", RL_Q8_0, false, false);
    check_tinyllama("Q4_0", RL_Q4_0, false, false);
    check_tinyllama("Q5_0", RL_Q5_0, false, false);
    check_tinyllama("Q5_1", RL_Q5_1, false, false);
    check_tinyllama("Q4_0", RL_Q4_0, false, true);
    check_tinyllama("F16", RL_F16, false, false);
    check_tinyllama("BF16", RL_BF16, false, false);
    check_tinyllama("F32", RL_F32, false, false);
}

/* Q4_K_S on TinyLlama's 22 layers: attn_v of layers 0-3 and ffn_down of layers 0-1 (22 / 8 = 2)
 * in Q5_K (llama_tensor_get_type: i_attention_wv < 4, i_layer < n_layer / 8), head Q6_K,
 * everything else Q4_K. Q5_K_S: plain Q5_K with the head rule, file type 16 as Q5_K. */
static void test_k_s(void) {
    rl_recipe_ctx c = {rl_ftype_find("q4_k_s"), N_LAYER, true, false, false, false};
    CHECK(c.ft && c.ft->file_type == 14 && c.ft->base == RL_Q4_K, "Q4_K_S known, file type 14");
    if (!c.ft) return;
    size_t n_v = 0, n_down = 0;
    for (size_t l = 0; l < N_LAYER; l++) {
        char nm[64];
        snprintf(nm, sizeof nm, "blk.%zu.attn_v.weight", l);
        uint32_t v = ty(&c, nm, 2, 2048, 256);
        CHECK(v == (l < 4 ? RL_Q5_K : RL_Q4_K), "Q4_K_S %s: %s", nm, rl_type_name(v));
        n_v += v == RL_Q5_K;
        snprintf(nm, sizeof nm, "blk.%zu.ffn_down.weight", l);
        uint32_t d = ty(&c, nm, 2, 5632, 2048);
        CHECK(d == (l < 2 ? RL_Q5_K : RL_Q4_K), "Q4_K_S %s: %s", nm, rl_type_name(d));
        n_down += d == RL_Q5_K;
        snprintf(nm, sizeof nm, "blk.%zu.attn_q.weight", l);
        CHECK(ty(&c, nm, 2, 2048, 2048) == RL_Q4_K, "Q4_K_S %s", nm);
        snprintf(nm, sizeof nm, "blk.%zu.ffn_up.weight", l);
        CHECK(ty(&c, nm, 2, 2048, 5632) == RL_Q4_K, "Q4_K_S %s", nm);
    }
    CHECK(n_v == 4 && n_down == 2, "Q4_K_S bumps: %zu attn_v, %zu ffn_down", n_v, n_down);
    CHECK(ty(&c, "output.weight", 2, 2048, 32000) == RL_Q6_K, "Q4_K_S head");
    CHECK(ty(&c, "token_embd.weight", 2, 2048, 32000) == RL_Q4_K, "Q4_K_S token_embd");
    CHECK(ty(&c, "blk.0.attn_v.weight", 2, 320, 64) == RL_Q5_1, "Q4_K_S bump falls back as Q5_K");
    c.pure = true;
    CHECK(ty(&c, "blk.0.attn_v.weight", 2, 2048, 256) == RL_Q4_K, "pure Q4_K_S: no bump");
    c.pure = false;
    c.n_layer = 32; /* 32 / 8 = 4 ffn_down layers */
    CHECK(ty(&c, "blk.3.ffn_down.weight", 2, 11008, 4096) == RL_Q5_K &&
              ty(&c, "blk.4.ffn_down.weight", 2, 11008, 4096) == RL_Q4_K, "Q4_K_S ffn_down at 32 layers");
    check_tinyllama("Q5_K_S", RL_Q5_K, false, false);
    /* with calibration (llama.cpp: an imatrix), Q4_0 / Q5_0 put ffn_down of layers < n/8 in
     * Q4_1 / Q5_1; nothing else moves, and Q4_K_S / Q8_0 ignore it */
    rl_recipe_ctx q = {rl_ftype_find("Q4_0"), N_LAYER, true, false, true, false};
    for (size_t l = 0; l < N_LAYER; l++) {
        char nm[64];
        snprintf(nm, sizeof nm, "blk.%zu.ffn_down.weight", l);
        uint32_t d = ty(&q, nm, 2, 5632, 2048);
        CHECK(d == (l < 2 ? RL_Q4_1 : RL_Q4_0), "calib Q4_0 %s: %s", nm, rl_type_name(d));
        snprintf(nm, sizeof nm, "blk.%zu.attn_v.weight", l);
        CHECK(ty(&q, nm, 2, 2048, 256) == RL_Q4_0, "calib Q4_0 %s", nm);
    }
    CHECK(ty(&q, "output.weight", 2, 2048, 32000) == RL_Q6_K, "calib Q4_0 head");
    q.ft = rl_ftype_find("Q5_0");
    CHECK(ty(&q, "blk.0.ffn_down.weight", 2, 5632, 2048) == RL_Q5_1, "calib Q5_0 ffn_down 0");
    q.ft = rl_ftype_find("Q8_0");
    CHECK(ty(&q, "blk.0.ffn_down.weight", 2, 5632, 2048) == RL_Q8_0, "calib Q8_0 ffn_down 0");
    q.ft = rl_ftype_find("Q4_0");
    q.pure = true;
    CHECK(ty(&q, "blk.0.ffn_down.weight", 2, 5632, 2048) == RL_Q4_0, "calib pure Q4_0 ffn_down 0");
    q.pure = false;
    q.calib = false;
    CHECK(ty(&q, "blk.0.ffn_down.weight", 2, 5632, 2048) == RL_Q4_0, "Q4_0 without calib");
    CHECK(rl_ftype_find("Q5_K_S")->file_type == 16, "Q5_K_S file type 16");
}

static void test_more_bits(void) {
    /* n = 32 (Llama-2-7B): first 4, last 4 (28..31), every third from 4: 6, 9, ..., 27 */
    static const int want32[] = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
    size_t k = 0;
    for (size_t l = 0; l < 32; l++) {
        bool expect = k < sizeof want32 / sizeof *want32 && (size_t)want32[k] == l;
        if (expect) k++;
        CHECK(rl_recipe_more_bits(l, 32) == expect, "more_bits(%zu, 32)", l);
    }
    for (size_t l = 0; l < N_LAYER; l++)
        CHECK(rl_recipe_more_bits(l, N_LAYER) == in_q6_set(l), "more_bits(%zu, 22)", l);
}

static void test_tied_and_fallback(void) {
    rl_recipe_ctx c = {rl_ftype_find("Q4_K_M"), 16, false, false, false, false};
    /* tied embeddings: token_embd is the output head, so it gets the head's Q6_K */
    CHECK(ty(&c, "token_embd.weight", 2, 2048, 128256) == RL_Q6_K, "tied token_embd Q6_K");
    c.pure = true;
    CHECK(ty(&c, "token_embd.weight", 2, 2048, 128256) == RL_Q4_K, "pure tied token_embd");
    c.pure = false;
    /* rows of 128 / 320 / 352 values (the draft and small models) cannot hold a 256-value K
     * block: llama.cpp's tensor_type_fallback table (llama-quant.cpp) is Q4_K -> Q5_0,
     * Q5_K -> Q5_1, Q6_K -> Q8_0 */
    CHECK(ty(&c, "blk.1.attn_q.weight", 2, 128, 128) == RL_Q5_0, "Q4_K fallback");
    CHECK(ty(&c, "blk.1.attn_q.weight", 2, 320, 320) == RL_Q5_0, "Q4_K fallback, 320 columns");
    CHECK(ty(&c, "blk.0.ffn_down.weight", 2, 352, 128) == RL_Q8_0, "Q6_K fallback");
    CHECK(ty(&c, "blk.2.ffn_down.weight", 2, 352, 128) == RL_Q5_0, "ffn_down of a plain layer");
    CHECK(ty(&c, "blk.2.ffn_down.weight", 2, 768, 320) == RL_Q4_K, "768 = 3 * 256 fits");
    /* the head's rule: ne[0] not a multiple of Q4_K's block -> Q8_0 */
    CHECK(ty(&c, "output.weight", 2, 320, 4096) == RL_Q8_0, "head fallback");
    /* not even 32 divides 100: F16 */
    CHECK(ty(&c, "blk.1.attn_q.weight", 2, 100, 128) == RL_F16, "F16 fallback");
    c.ft = rl_ftype_find("Q5_K_M");
    CHECK(ty(&c, "blk.1.attn_q.weight", 2, 320, 320) == RL_Q5_1, "Q5_K fallback");
    CHECK(ty(&c, "blk.0.attn_v.weight", 2, 320, 64) == RL_Q8_0, "Q5_K_M attn_v: Q6_K -> Q8_0");
    CHECK(ty(&c, "blk.1.attn_q.weight", 2, 80, 320) == RL_F16, "Q5_1 does not fit 80 either");
    c.pure = true; /* --pure skips the mix, not the fallback (as llama.cpp) */
    CHECK(ty(&c, "token_embd.weight", 2, 320, 4096) == RL_Q5_1, "pure Q5_K_M tied head");
    CHECK(ty(&c, "blk.0.attn_v.weight", 2, 320, 64) == RL_Q5_1, "pure Q5_K_M attn_v");
    c.pure = false;
    c.ft = rl_ftype_find("Q6_K");
    CHECK(ty(&c, "blk.1.attn_q.weight", 2, 320, 320) == RL_Q8_0, "Q6_K fallback");
    c.ft = rl_ftype_find("Q4_0");
    CHECK(ty(&c, "blk.1.attn_q.weight", 2, 48, 128) == RL_F16, "Q4_0 fallback");
    CHECK(ty(&c, "blk.1.attn_q.weight", 2, 64, 128) == RL_Q4_0, "Q4_0 fits");
    /* Q4_0's head (here the tied token_embd): Q6_K, which a 320-value row cannot hold -> Q8_0;
     * 512 holds it; a row of 48 (not a multiple of Q4_0's 32) -> Q8_0, which does not fit
     * either -> F16 */
    CHECK(ty(&c, "token_embd.weight", 2, 320, 4096) == RL_Q8_0, "Q4_0 tied head, 320");
    CHECK(ty(&c, "token_embd.weight", 2, 512, 4096) == RL_Q6_K, "Q4_0 tied head, 512");
    CHECK(ty(&c, "token_embd.weight", 2, 48, 4096) == RL_F16, "Q4_0 tied head, 48");
    c.has_output = true;
    CHECK(ty(&c, "token_embd.weight", 2, 512, 4096) == RL_Q4_0, "Q4_0 untied token_embd");
    CHECK(ty(&c, "output.weight", 2, 512, 4096) == RL_Q6_K, "Q4_0 output");
    c.has_output = false;
    c.ft = rl_ftype_find("Q8_0");
    CHECK(ty(&c, "token_embd.weight", 2, 320, 4096) == RL_Q8_0, "Q8_0 head stays Q8_0");
    c.ft = rl_ftype_find("RQ2"); /* rawloop's own type: its own token_embd rule, no head rule */
    CHECK(ty(&c, "token_embd.weight", 2, 320, 4096) == RL_Q8_0, "RQ2 token_embd");
    CHECK(ty(&c, "blk.0.ffn_up.weight", 2, 96, 768) == RL_Q8_0, "RQ2: 64 does not divide 96 -> Q8_0");
    CHECK(ty(&c, "blk.0.ffn_up.weight", 2, 768, 320) == RL_RQ2, "RQ2 fits");
    c.ft = rl_ftype_find("Q4_0");
    /* 3-D (expert) tensors follow ne[0] like matrices; 1-D stays F32 whatever its name */
    uint64_t ne3[4] = {256, 64, 8, 1};
    CHECK(rl_recipe_type(&c, "blk.0.ffn_up_exps.weight", 3, ne3) == RL_Q4_0, "3-D");
    CHECK(ty(&c, "rope_freqs.weight", 1, 32, 1) == RL_F32, "rope_freqs F32");
    /* names that only look like layer tensors do not get more bits */
    c.ft = rl_ftype_find("Q5_K_M");
    CHECK(ty(&c, "blk.0.attn_v.weight.x", 2, 256, 256) == RL_Q5_K, "suffix must match exactly");
    CHECK(ty(&c, "blk.x.attn_v.weight", 2, 256, 256) == RL_Q5_K, "layer must be a number");
    CHECK(ty(&c, "blk.0.attn_v.weight", 2, 256, 256) == RL_Q6_K, "layer 0 gets more bits");
    CHECK(ty(&c, "blk.5.attn_v.weight", 2, 256, 256) == RL_Q5_K, "layer 5 of 16 does not");
}

static void test_table(void) {
    CHECK(rl_ftype_find("Q3_K_M") == NULL, "unknown type");
    CHECK(rl_ftype_find("") == NULL, "empty name");
    /* llama_ftype numbers readers use to label the file */
    static const struct { const char *n; uint32_t v; } ft[] = {
        {"F32", 0}, {"F16", 1}, {"Q4_0", 2}, {"Q4_1", 3}, {"Q8_0", 7}, {"Q5_0", 8}, {"Q5_1", 9},
        {"Q4_K", 14}, {"Q4_K_S", 14}, {"Q4_K_M", 15}, {"Q5_K_S", 16},
        {"Q5_K", 16}, {"Q5_K_M", 17}, {"Q6_K", 18}, {"BF16", 32}};
    for (size_t i = 0; i < sizeof ft / sizeof *ft; i++) {
        const rl_ftype *f = rl_ftype_find(ft[i].n);
        CHECK(f && f->file_type == ft[i].v, "%s file_type", ft[i].n);
    }
    size_t n = 0;
    while (rl_ftype_at(n)) n++;
    CHECK(n == sizeof ft / sizeof *ft, "%zu file types listed", n);
}

/* Recipe files: an explicit type takes the same fallback as a file type's choice. */
static void test_rules_fallback(void) {
    static const char text[] = "blk.*.ffn_down.weight Q4_K\nblk.*.attn_q.weight q5_k\n"
                               "blk.*.attn_k.weight Q6_K\nblk.*.attn_v.weight Q5_0\n* Q5_1\n";
    rl_recipe_rules r;
    rl_err e = {0};
    CHECK(rl_recipe_parse(&r, text, sizeof text - 1, "t.recipe", &e) == 0, "parse: %s", e.msg);
    static const struct { const char *name; uint64_t ne0; uint32_t want; size_t line; } cases[] = {
        {"blk.0.ffn_down.weight", 320, RL_Q5_0, 1}, {"blk.0.ffn_down.weight", 768, RL_Q4_K, 1},
        {"blk.0.attn_q.weight", 320, RL_Q5_1, 2},   {"blk.0.attn_k.weight", 320, RL_Q8_0, 3},
        {"blk.0.attn_v.weight", 320, RL_Q5_0, 4},   {"blk.0.attn_v.weight", 40, RL_F16, 4},
        {"output.weight", 96, RL_Q5_1, 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint64_t ne[4] = {cases[i].ne0, 64, 1, 1};
        rl_recipe_choice ch;
        int rc = rl_recipe_choose(NULL, &r, cases[i].name, 2, ne, &ch, &e);
        CHECK(rc == 0 && ch.type == cases[i].want && ch.line == cases[i].line,
              "%s ne0=%llu: got %s (line %zu), want %s", cases[i].name,
              (unsigned long long)cases[i].ne0, rl_type_name(ch.type), ch.line, rl_type_name(cases[i].want));
    }
    CHECK(rl_recipe_file_type(&r) == 9, "catch-all Q5_1 -> llama_ftype MOSTLY_Q5_1 (9)");
    rl_recipe_free(&r);
}

/* Every type a file type or recipe can write has kernels on the CPU and on the GPU; were one
 * missing on the GPU, or not yet verified there, --device auto would send its models to the
 * CPU (src/backend.c). */
static void test_gpu_types(void) {
    for (size_t i = 0; rl_type_computable_at(i) != UINT32_MAX; i++) {
        const uint32_t t = rl_type_computable_at(i);
#ifdef RL_HAVE_CUDA
        CHECK(rl_cuda_runs_type(t), "%s does not run on the GPU", rl_type_name(t));
#else
        CHECK(!rl_cuda_runs_type(t), "a build without CUDA runs %s on the GPU", rl_type_name(t));
#endif
    }
}

/* llama.cpp's 70B rule on an 80-layer Llama-2/3-70B (n_embd 8192, kv dim 1024, n_ff 28672):
 * its loader types llama with 80 layers and GQA, and qwen2 with 80 layers, as 70B; attn_v that
 * the recipe would write as Q4_K becomes Q5_K (after the bumps: the _M recipe's Q6_K layers
 * stay Q6_K). The _M layer set for 80 layers, by hand: 0-9 (80/8 = 10), 70-79 (7*80/8 = 70),
 * and 10 + 3k + 2 = 12, 15, ..., 69 between. */
static void test_70b(void) {
    CHECK(rl_recipe_is_70b("llama", 80, 64, 8), "llama 80 layers GQA is 70B");
    CHECK(!rl_recipe_is_70b("llama", 80, 64, 64), "llama 80 layers MHA is llama.cpp's 65B");
    CHECK(!rl_recipe_is_70b("llama", 79, 64, 8) && !rl_recipe_is_70b("llama", 81, 64, 8), "80 layers exactly");
    CHECK(rl_recipe_is_70b("qwen2", 80, 64, 64) && rl_recipe_is_70b("qwen2", 80, 64, 8), "qwen2 80 layers");
    CHECK(!rl_recipe_is_70b("qwen3", 80, 64, 8), "qwen3 has no 70B type in llama.cpp");
    rl_recipe_ctx m = {rl_ftype_find("Q4_K_M"), 80, true, false, false, true};
    rl_recipe_ctx s = {rl_ftype_find("Q4_K_S"), 80, true, false, false, true};
    size_t n6 = 0, n5 = 0;
    for (size_t l = 0; l < 80; l++) {
        char nm[64];
        const bool more = l < 10 || l >= 70 || (l >= 12 && (l - 12) % 3 == 0);
        snprintf(nm, sizeof nm, "blk.%zu.attn_v.weight", l);
        uint32_t v = ty(&m, nm, 2, 8192, 1024);
        CHECK(v == (more ? RL_Q6_K : RL_Q5_K), "70B Q4_K_M %s: %s", nm, rl_type_name(v));
        n6 += v == RL_Q6_K;
        n5 += v == RL_Q5_K;
        v = ty(&s, nm, 2, 8192, 1024);
        CHECK(v == RL_Q5_K, "70B Q4_K_S %s: %s (layers 0-3 by the S rule, the rest by 70B)", nm, rl_type_name(v));
        snprintf(nm, sizeof nm, "blk.%zu.attn_k.weight", l);
        CHECK(ty(&m, nm, 2, 8192, 1024) == RL_Q4_K, "70B Q4_K_M %s stays Q4_K", nm);
        snprintf(nm, sizeof nm, "blk.%zu.ffn_down.weight", l);
        CHECK(ty(&m, nm, 2, 28672, 8192) == (more ? RL_Q6_K : RL_Q4_K), "70B Q4_K_M %s: ffn_down unchanged", nm);
        CHECK(ty(&s, nm, 2, 28672, 8192) == (l < 10 ? RL_Q5_K : RL_Q4_K), "70B Q4_K_S %s", nm);
    }
    CHECK(n6 == 40 && n5 == 40, "70B Q4_K_M attn_v: %zu Q6_K, %zu Q5_K (want 40, 40)", n6, n5);
    /* Q5_K_M's non-bumped attn_v is Q5_K already; Q4_0 and rawloop's plain Q4_K (no per-layer
     * bumps) do not move; pure writes the base everywhere */
    rl_recipe_ctx o = {rl_ftype_find("Q5_K_M"), 80, true, false, false, true};
    CHECK(ty(&o, "blk.11.attn_v.weight", 2, 8192, 1024) == RL_Q5_K, "70B Q5_K_M attn_v");
    o.ft = rl_ftype_find("Q4_0");
    CHECK(ty(&o, "blk.11.attn_v.weight", 2, 8192, 1024) == RL_Q4_0, "70B Q4_0 attn_v stays");
    o.ft = rl_ftype_find("Q4_K");
    CHECK(ty(&o, "blk.11.attn_v.weight", 2, 8192, 1024) == RL_Q4_K, "70B plain Q4_K attn_v stays");
    m.pure = true;
    CHECK(ty(&m, "blk.11.attn_v.weight", 2, 8192, 1024) == RL_Q4_K, "70B pure Q4_K_M attn_v stays");
    m.pure = false;
    m.is_70b = false;
    CHECK(ty(&m, "blk.11.attn_v.weight", 2, 8192, 1024) == RL_Q4_K, "not 70B: attn_v Q4_K");
}

int main(void) {
    test_gpu_types();
    test_tinyllama();
    test_k_s();
    test_70b();
    test_more_bits();
    test_tied_and_fallback();
    test_table();
    test_rules_fallback();
    return check_report("test_recipe");
}
