/* rawloop mkmodel: a GGUF with random weights of a real model's exact shapes, for benchmarks
 * without downloads. Weights are uniform noise of std 0.02 (norms 1), quantized with rawloop's
 * own quantizers; the tokenizer is copied from a vocab GGUF and padded to the shape's size. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf.h"
#include "pool.h"
#include "quant.h"
#include "recipe.h"
#include "types.h"

typedef struct shape {
    const char *name, *arch;
    size_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx, head_dim;
    float rope_base, eps;
    bool tied;
    float llama3_factor; /* 0: no llama3 rope scaling */
} shape;

static const shape k_shapes[] = {
    {"tinyllama-1.1b", "llama", 2048, 22, 32, 4, 5632, 32000, 2048, 64, 10000, 1e-5f, false, 0},
    {"llama2-7b", "llama", 4096, 32, 32, 32, 11008, 32000, 4096, 128, 10000, 1e-5f, false, 0},
    {"llama3-8b", "llama", 4096, 32, 32, 8, 14336, 128256, 8192, 128, 500000, 1e-5f, false, 0},
    {"llama3.2-1b", "llama", 2048, 16, 32, 8, 8192, 128256, 131072, 64, 500000, 1e-5f, true, 32},
    {"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 3072, 151936, 40960, 128, 1e6f, 1e-6f, true, 0},
    {"qwen3-8b", "qwen3", 4096, 36, 32, 8, 12288, 151936, 40960, 128, 1e6f, 1e-6f, false, 0},
};

typedef struct tdesc {
    char name[64];
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[2];
    int kind; /* 0 noise, 1 ones, 2 rope factors */
} tdesc;

typedef struct gen_job {
    const tdesc *t;
    uint8_t *out;
    size_t row_bytes;
    uint64_t seed;
    const shape *sh;
} gen_job;

static void gen_worker(void *ctx, size_t ith, size_t nth) {
    gen_job *j = ctx;
    size_t cols = j->t->ne[0], rows = j->t->ne[1];
    float *row = malloc(cols * sizeof(float));
    if (!row) return; /* caller checks the sentinel below */
    const float a = 0.02f * sqrtf(3.0f);
    for (size_t r = rows * ith / nth; r < rows * (ith + 1) / nth; r++) {
        uint64_t s = j->seed ^ (r * 0x9e3779b97f4a7c15ULL) ^ 0xd1b54a32d192ed03ULL;
        for (size_t i = 0; i < cols; i++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            row[i] = j->t->kind == 1 ? 1.0f : a * (2.0f * ((s >> 40) / 16777216.0f) - 1.0f);
        }
        if (j->t->kind == 2) {
            /* llama3 rope factors (convert_hf_to_gguf's formula): 1 for short wavelengths,
             * factor for long ones, smooth in between; orig ctx 8192, low 1, high 4. */
            const shape *sh = j->sh;
            double orig = 8192, lo = 1, hi = 4, f = sh->llama3_factor;
            for (size_t i = 0; i < cols; i++) {
                double freq = 1.0 / pow(sh->rope_base, (double)(2 * i) / sh->head_dim);
                double wl = 2 * M_PI / freq;
                if (wl < orig / hi) row[i] = 1;
                else if (wl > orig / lo) row[i] = (float)f;
                else {
                    double sm = (orig / wl - lo) / (hi - lo);
                    row[i] = (float)(1 / ((1 - sm) / f + sm));
                }
            }
        }
        rl_quant_row_fast(j->t->type, row, j->out + r * j->row_bytes, cols, NULL);
    }
    free(row);
}

static void usage(FILE *out) {
    fprintf(out,
        "usage: rawloop mkmodel --shape NAME --type T -o FILE [--vocab FILE] [--seed N] [-t N]\n"
        "Writes a GGUF with random weights of a real model's shapes.\n"
        "  --shape  one of:");
    for (size_t i = 0; i < sizeof k_shapes / sizeof *k_shapes; i++) fprintf(out, " %s", k_shapes[i].name);
    fprintf(out, "\n  --type   one of:");
    for (size_t i = 0; rl_ftype_at(i); i++) fprintf(out, " %s", rl_ftype_at(i)->name);
    for (size_t i = 0; rl_ftype_rawloop_at(i); i++) fprintf(out, " %s", rl_ftype_rawloop_at(i)->name);
    fprintf(out, "\n  --vocab  GGUF whose tokenizer.* keys are copied (default "
                 "../shared/testdata/tokenizers/ggml-vocab-llama-spm.gguf); padded to the shape's "
                 "vocabulary\n");
}

/* Copies tokenizer.* keys, padding tokens/scores/token_type to n_vocab. */
static int copy_vocab(gguf_writer *w, const gguf_file *v, size_t n_vocab, rl_err *e) {
    const gguf_kv *toks = gguf_find(v, "tokenizer.ggml.tokens");
    if (!toks || toks->type != GGUF_ARRAY || toks->arr_type != GGUF_STRING)
        return rl_fail(e, "%s: no tokenizer.ggml.tokens string array", v->name);
    size_t n = (size_t)toks->n;
    if (n > n_vocab)
        return rl_fail(e, "%s has %zu tokens, more than the shape's vocabulary of %zu", v->name, n,
                       n_vocab);
    for (size_t i = 0; i < v->n_kv; i++) {
        const gguf_kv *kv = &v->kv[i];
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10)) continue;
        bool pad = gguf_str_eq(kv->key, "tokenizer.ggml.tokens") ||
                   gguf_str_eq(kv->key, "tokenizer.ggml.scores") ||
                   gguf_str_eq(kv->key, "tokenizer.ggml.token_type");
        if (!pad || n == n_vocab) {
            if (gguf_w_copy_kv(w, kv, e) < 0) return -1;
            continue;
        }
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        if (kv->type != GGUF_ARRAY || kv->n != n)
            return rl_fail(e, "%s: %s has %llu entries, expected %zu", v->name, key,
                           (unsigned long long)kv->n, n);
        if (kv->arr_type == GGUF_STRING) {
            gguf_str *s = malloc(n_vocab * sizeof *s);
            char *names = malloc((n_vocab - n) * 16);
            if (!s || !names) {
                free(s);
                free(names);
                return rl_fail(e, "out of memory");
            }
            memcpy(s, kv->strs, n * sizeof *s);
            for (size_t k = n; k < n_vocab; k++) {
                char *p = names + (k - n) * 16;
                int len = snprintf(p, 16, "<pad_%zu>", k);
                s[k] = (gguf_str){p, (size_t)len};
            }
            int r = gguf_w_arr_str(w, key, s, n_vocab, e);
            free(s);
            free(names);
            if (r < 0) return -1;
        } else if (kv->arr_type == GGUF_F32 || kv->arr_type == GGUF_I32) {
            int32_t *d = malloc(n_vocab * 4);
            if (!d) return rl_fail(e, "out of memory");
            memcpy(d, kv->data, n * 4);
            for (size_t k = n; k < n_vocab; k++) {
                float f = -1e9f;
                if (kv->arr_type == GGUF_F32) memcpy(&d[k], &f, 4);
                else d[k] = 5; /* token_type UNUSED */
            }
            int r = gguf_w_arr(w, key, kv->arr_type, d, n_vocab, e);
            free(d);
            if (r < 0) return -1;
        } else {
            return rl_fail(e, "%s: %s has unexpected element type %u", v->name, key, kv->arr_type);
        }
    }
    return 0;
}

int cmd_mkmodel(int argc, char **argv) {
    static const struct option opts[] = {
        {"shape", 1, 0, 'S'}, {"type", 1, 0, 'T'}, {"output", 1, 0, 'o'}, {"vocab", 1, 0, 'V'},
        {"seed", 1, 0, 's'}, {"threads", 1, 0, 't'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *shape_name = NULL, *type_name = NULL, *outp = NULL;
    const char *vocab = "../shared/testdata/tokenizers/ggml-vocab-llama-spm.gguf";
    long seed = 1, threads = 0;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:s:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'S': shape_name = optarg; break;
        case 'T': type_name = optarg; break;
        case 'o': outp = optarg; break;
        case 'V': vocab = optarg; break;
        case 's': if (cli_parse_long("--seed", optarg, 0, 1L << 62, &seed)) return 2; break;
        case 't': if (cli_parse_long("-t", optarg, 1, 1024, &threads)) return 2; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!shape_name || !type_name || !outp || optind < argc) {
        usage(stderr);
        return 2;
    }
    const shape *sh = NULL;
    const rl_ftype *ft = rl_ftype_find(type_name);
    for (size_t i = 0; i < sizeof k_shapes / sizeof *k_shapes; i++)
        if (!strcmp(k_shapes[i].name, shape_name)) sh = &k_shapes[i];
    if (!sh || !ft) {
        fprintf(stderr, "rawloop mkmodel: unknown %s '%s'\n", sh ? "type" : "shape",
                sh ? type_name : shape_name);
        usage(stderr);
        return 2;
    }

    rl_err e = {{0}};
    gguf_file vf;
    if (gguf_open(&vf, vocab, &e) < 0) {
        fprintf(stderr, "rawloop: vocab: %s\n", e.msg);
        return 1;
    }
    /* tensor list in llama.cpp's order */
    size_t per_layer = 9 + (!strcmp(sh->arch, "qwen3") ? 2 : 0);
    size_t n_t = 3 + (sh->llama3_factor > 0) + per_layer * sh->n_layer;
    tdesc *td = calloc(n_t, sizeof *td);
    rl_pool *pool = NULL;
    gguf_writer *w = NULL;
    uint8_t *buf = NULL;
    int rc = 1;
    if (!td) goto oom;
    size_t k = 0, qd = sh->n_head * sh->head_dim, kvd = sh->n_head_kv * sh->head_dim;
    /* types come from the recipe shared with `rawloop quantize` (src/recipe.h) */
    rl_recipe_ctx rc_ctx = {ft, sh->n_layer, !sh->tied, false, false,
                            rl_recipe_is_70b(sh->arch, sh->n_layer, sh->n_head, sh->n_head_kv)};
#define T2(nm, cols, rows) do { snprintf(td[k].name, 64, "%s", nm); td[k].n_dims = 2; \
        td[k].ne[0] = (cols); td[k].ne[1] = (rows); \
        td[k].type = rl_recipe_type(&rc_ctx, td[k].name, 2, td[k].ne); k++; } while (0)
#define T1(nm, cols, knd) do { snprintf(td[k].name, 64, "%s", nm); td[k].type = RL_F32; \
        td[k].n_dims = 1; td[k].ne[0] = (cols); td[k].ne[1] = 1; td[k].kind = (knd); k++; } while (0)
    T2("token_embd.weight", sh->n_embd, sh->n_vocab);
    T1("output_norm.weight", sh->n_embd, 1);
    if (!sh->tied) T2("output.weight", sh->n_embd, sh->n_vocab);
    if (sh->llama3_factor > 0) T1("rope_freqs.weight", sh->head_dim / 2, 2);
    char nm[64];
    for (size_t l = 0; l < sh->n_layer; l++) {
#define N(s) (snprintf(nm, sizeof nm, "blk.%zu." s, l), nm)
        T1(N("attn_norm.weight"), sh->n_embd, 1);
        T2(N("attn_q.weight"), sh->n_embd, qd);
        T2(N("attn_k.weight"), sh->n_embd, kvd);
        T2(N("attn_v.weight"), sh->n_embd, kvd);
        T2(N("attn_output.weight"), qd, sh->n_embd);
        if (!strcmp(sh->arch, "qwen3")) {
            T1(N("attn_q_norm.weight"), sh->head_dim, 1);
            T1(N("attn_k_norm.weight"), sh->head_dim, 1);
        }
        T1(N("ffn_norm.weight"), sh->n_embd, 1);
        T2(N("ffn_gate.weight"), sh->n_embd, sh->n_ff);
        T2(N("ffn_up.weight"), sh->n_embd, sh->n_ff);
        T2(N("ffn_down.weight"), sh->n_ff, sh->n_embd);
#undef N
    }
    n_t = k;

    w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    if (!w) goto oom;
    char key[96], gname[96];
    snprintf(gname, sizeof gname, "rawloop random %s %s", sh->name, ft->name);
#define KEY(s) (snprintf(key, sizeof key, "%s." s, sh->arch), key)
    if (gguf_w_str(w, "general.architecture", sh->arch, &e) ||
        gguf_w_str(w, "general.name", gname, &e) ||
        gguf_w_u32(w, "general.file_type", ft->file_type, &e) ||
        gguf_w_u32(w, "general.quantization_version", 2, &e) ||
        gguf_w_u32(w, KEY("context_length"), (uint32_t)sh->n_ctx, &e) ||
        gguf_w_u32(w, KEY("embedding_length"), (uint32_t)sh->n_embd, &e) ||
        gguf_w_u32(w, KEY("block_count"), (uint32_t)sh->n_layer, &e) ||
        gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)sh->n_ff, &e) ||
        gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)sh->n_head, &e) ||
        gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)sh->n_head_kv, &e) ||
        gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)sh->head_dim, &e) ||
        gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)sh->head_dim, &e) ||
        gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)sh->head_dim, &e) ||
        gguf_w_f32(w, KEY("rope.freq_base"), sh->rope_base, &e) ||
        gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), sh->eps, &e) ||
        gguf_w_u32(w, KEY("vocab_size"), (uint32_t)sh->n_vocab, &e) ||
        copy_vocab(w, &vf, sh->n_vocab, &e))
        goto fail;
#undef KEY
    size_t max_bytes = 0, total = 0;
    for (size_t i = 0; i < n_t; i++) {
        size_t b = rl_row_bytes(td[i].type, td[i].ne[0]) * td[i].ne[1];
        if (b > max_bytes) max_bytes = b;
        total += b;
        if (gguf_w_tensor(w, td[i].name, td[i].type, td[i].n_dims, td[i].ne, &e)) goto fail;
    }
    buf = malloc(max_bytes);
    if (!buf) goto oom;
    if (rl_pool_new(&pool, threads ? (size_t)threads : rl_ncpu(), &e) < 0) goto fail;
    if (gguf_writer_begin(w, outp, &e) < 0) goto fail;
    double t0 = cli_now();
    size_t done = 0;
    double last = 0;
    for (size_t i = 0; i < n_t; i++) {
        size_t rb = rl_row_bytes(td[i].type, td[i].ne[0]), b = rb * td[i].ne[1];
        gen_job j = {&td[i], buf, rb, (uint64_t)seed * 0x100000001b3ULL + i, sh};
        rl_pool_run(pool, gen_worker, &j);
        if (gguf_writer_write_tensor(w, buf, b, &e) < 0) goto fail;
        done += b;
        if (cli_now() - last < 1.0 && i + 1 < n_t) continue;
        last = cli_now();
        fprintf(stderr, "\rrawloop mkmodel: %5.1f%% (%.2f / %.2f GB, %.0f s)", 100.0 * done / total,
                done / 1e9, total / 1e9, cli_now() - t0);
    }
    if (gguf_writer_finish(w, &e) < 0) goto fail;
    fprintf(stderr, "\nrawloop mkmodel: wrote %s (%s, %s, %.2f GB)\n", outp, sh->name, ft->name,
            total / 1e9);
    rc = 0;
    goto out;
oom:
    rl_fail(&e, "out of memory");
fail:
    fprintf(stderr, "\nrawloop: mkmodel: %s\n", e.msg);
out:
    rl_pool_free(pool);
    gguf_writer_free(w);
    free(buf);
    free(td);
    gguf_close(&vf);
    return rc;
}
