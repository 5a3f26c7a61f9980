#include "hf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h" /* rl_dequant_row, rl_e4m3_f32 */
#include "safetensors.h"
#include "types.h"

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type; SentencePiece's piece types
 * use the same numbers). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5 };

typedef struct hf_priv {
    st_file *shards;
    size_t n_shards;
    bool **used;          /* [shard][tensor]: claimed by a GGUF tensor (or knowingly skipped) */
    float *rope_freqs;    /* generated llama3 factors (owned data of rope_freqs.weight) */

    /* model keys */
    size_t n_vocab, n_ctx, n_embd, n_ff, n_head, n_head_kv, head_dim;
    bool explicit_head_dim;
    double rms_eps, rope_theta;

    /* quantization_config with quant_method "fp8": F8_E4M3 weights are read (hf_fp8) */
    bool fp8;
    bool fp8_static;      /* activation_scheme "static": X.input_scale tensors, not used */
    size_t fp8_blk[2];    /* weight_block_size [rows, cols]; {0, 0} when config.json gives
                             none (then only per-tensor scales fit) */

    /* tokenizer */
    bool spm;             /* tokenizer.ggml.model "llama" (else "gpt2") */
    const char *pre;      /* tokenizer.ggml.pre */
    size_t n_tok;
    char **tok;           /* [n_tok] token texts (owned) */
    int32_t *tok_type;    /* [n_tok] */
    float *score;         /* [n_tok] (SPM) */
    size_t n_merges;
    char **merges;        /* [n_merges] "a b" (owned) */
    int32_t bos, eos, unk, pad; /* -1 when absent */
    int add_bos, add_eos;       /* -1: leave the key out */
    int add_space_prefix;       /* SPM: normalizer's add_dummy_prefix; -1 leave out */
} hf_priv;

size_t hf_src_row(size_t r, size_t rows, size_t perm_heads) {
    if (!perm_heads) return r;
    size_t hd = rows / perm_heads, i = r % hd;
    return r - i + (i % 2) * (hd / 2) + i / 2;
}

/* Scale i (row-major) of an FP8 weight, as float32 (a BF16 scale widens exactly). */
static float fp8_scale_at(const hf_fp8 *f, size_t i) {
    if (f->scale_type == RL_BF16) {
        uint16_t b;
        memcpy(&b, (const uint8_t *)f->scale + 2 * i, 2);
        uint32_t u = (uint32_t)b << 16;
        float x;
        memcpy(&x, &u, 4);
        return x;
    }
    float x;
    memcpy(&x, (const uint8_t *)f->scale + 4 * i, 4);
    return x;
}

size_t hf_read_row(const hf_tensor *t, size_t sr, float *out) {
    size_t cols = (size_t)t->ne[0];
    if (t->type != HF_F8_E4M3) {
        rl_dequant_row_fast(t->type, (const uint8_t *)t->data + sr * rl_row_bytes(t->type, cols), out,
                            cols);
        return SIZE_MAX;
    }
    const hf_fp8 *f = &t->fp8;
    const uint8_t *q = (const uint8_t *)t->data + sr * cols;
    size_t s0 = sr / f->blk_rows * f->n_blk_cols;
    for (size_t c0 = 0, b = 0; c0 < cols; c0 += f->blk_cols, b++) {
        float s = fp8_scale_at(f, s0 + b);
        size_t c1 = cols - c0 < f->blk_cols ? cols : c0 + f->blk_cols;
        for (size_t c = c0; c < c1; c++) {
            if ((q[c] & 0x7f) == 0x7f) return c;
            out[c] = rl_e4m3_f32[q[c]] * s;
        }
    }
    return SIZE_MAX;
}

/* ---- JSON helpers ----------------------------------------------------------------------------- */

/* Loads dir/file; *root = NULL (and 0) when absent and !required. */
static int load_json_flags(const char *dir, const char *file, bool required, size_t flags,
                           json_t **root, rl_err *e) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    *root = NULL;
    if (access(p, F_OK) != 0) {
        if (!required) return 0;
        return rl_fail(e, "%s: missing (a Hugging Face model directory needs it)", p);
    }
    json_error_t je;
    *root = json_load_file(p, JSON_REJECT_DUPLICATES | flags, &je);
    if (!*root) return rl_fail(e, "%s: line %d: %s", p, je.line, je.text);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return rl_fail(e, "%s: not a JSON object", p);
    }
    return 0;
}

static int load_json(const char *dir, const char *file, bool required, json_t **root, rl_err *e) {
    return load_json_flags(dir, file, required, 0, root, e);
}

/* config.json integer key (> 0): 1 found, 0 absent (or null) and optional, -1 error. Values
 * are written as uint32 GGUF keys, so anything above INT32_MAX is refused here rather than
 * truncated later (and products of two of them cannot overflow 64 bits). */
static int cfg_size(const json_t *cfg, const char *dir, const char *key, bool required,
                    size_t *out, rl_err *e) {
    const json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        if (required) return rl_fail(e, "%s/config.json: missing key '%s'", dir, key);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > INT32_MAX)
        return rl_fail(e, "%s/config.json: '%s' must be a positive integer below 2^31", dir, key);
    *out = (size_t)json_integer_value(v);
    return 1;
}

static int cfg_num(const json_t *obj, const char *where, const char *key, bool required,
                   double *out, rl_err *e) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required) return rl_fail(e, "%s: missing key '%s'", where, key);
        return 0;
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return rl_fail(e, "%s: '%s' must be a number", where, key);
    *out = json_number_value(v);
    return 1;
}

/* Appends a note to h->warning ("; " between notes). */
static void add_warning(hf_model *h, const char *fmt, ...) {
    size_t k = strlen(h->warning);
    if (k && k + 2 < sizeof h->warning) k += (size_t)snprintf(h->warning + k, sizeof h->warning - k, "; ");
    if (k + 1 >= sizeof h->warning) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->warning + k, sizeof h->warning - k, fmt, ap);
    va_end(ap);
}

/* ---- config ----------------------------------------------------------------------------------- */

/* config.json's quantization_config: absent, or FP8 as DeepSeek-V3 and Qwen3-*-FP8 publish it
 * ({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
 * "weight_block_size": [128, 128]}) or as AutoFP8 / vLLM's "fp8" writes it (per-tensor
 * X.weight_scale, and with activation_scheme "static" an X.input_scale per matrix: the scale of
 * FP8 activations, which rawloop does not compute with, so they are read past, as llama.cpp's
 * converter does). Any other method, format or activation scheme is refused: its tensors would
 * mean something this reader does not compute. */
static int read_quant_config(hf_priv *p, const json_t *cfg, const char *where, rl_err *e) {
    const json_t *qc = json_object_get(cfg, "quantization_config");
    if (!qc || json_is_null(qc)) return 0;
    if (!json_is_object(qc)) return rl_fail(e, "%s: quantization_config is not an object", where);
    const char *qm = json_string_value(json_object_get(qc, "quant_method"));
    if (!qm)
        return rl_fail(e, "%s: quantization_config has no 'quant_method' string", where);
    if (strcmp(qm, "fp8"))
        return rl_fail(e, "%s: quantization_config quant_method '%.32s' is not supported (only "
                       "'fp8': F8_E4M3 weights with block scales)", where, qm);
    const json_t *fmt = json_object_get(qc, "fmt"), *as = json_object_get(qc, "activation_scheme");
    if (fmt && !json_is_null(fmt) &&
        (!json_is_string(fmt) || strcmp(json_string_value(fmt), "e4m3")))
        return rl_fail(e, "%s: quantization_config fmt '%.32s' is not supported (only 'e4m3')",
                       where, json_is_string(fmt) ? json_string_value(fmt) : "(not a string)");
    if (as && !json_is_null(as)) {
        const char *asv = json_string_value(as);
        if (!asv || (strcmp(asv, "dynamic") && strcmp(asv, "static")))
            return rl_fail(e, "%s: quantization_config activation_scheme '%.32s' is not supported "
                           "(only 'dynamic' or 'static')", where, asv ? asv : "(not a string)");
        p->fp8_static = !strcmp(asv, "static");
    }
    const json_t *bs = json_object_get(qc, "weight_block_size");
    if (bs && !json_is_null(bs)) {
        if (!json_is_array(bs) || json_array_size(bs) != 2)
            return rl_fail(e, "%s: quantization_config weight_block_size must be [rows, cols]",
                           where);
        for (size_t i = 0; i < 2; i++) {
            const json_t *v = json_array_get(bs, i);
            if (!json_is_integer(v) || json_integer_value(v) <= 0 ||
                json_integer_value(v) > INT32_MAX)
                return rl_fail(e, "%s: quantization_config weight_block_size[%zu] must be a "
                               "positive integer below 2^31", where, i);
            p->fp8_blk[i] = (size_t)json_integer_value(v);
        }
    }
    p->fp8 = true;
    return 0;
}

/* Fills p's model keys and h->arch; computes rope_freqs for llama3 scaling. */
static int read_config(hf_model *h, hf_priv *p, const json_t *cfg, rl_err *e) {
    const char *dir = h->dir;
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    if (!mt) return rl_fail(e, "%s/config.json: missing key 'model_type'", dir);
    if (strcmp(mt, "llama") && strcmp(mt, "qwen2") && strcmp(mt, "qwen3"))
        return rl_fail(e, "%s/config.json: unsupported architecture '%.64s' (supported: llama, "
                       "qwen2, qwen3)", dir, mt);
    snprintf(h->arch, sizeof h->arch, "%s", mt);
    const char *act = json_string_value(json_object_get(cfg, "hidden_act"));
    if (act && strcmp(act, "silu"))
        return rl_fail(e, "%s/config.json: hidden_act '%.32s' is not supported (silu)", dir, act);
    if (json_is_true(json_object_get(cfg, "attention_bias")) ||
        json_is_true(json_object_get(cfg, "mlp_bias")))
        return rl_fail(e, "%s/config.json: attention_bias/mlp_bias are not supported for %s", dir,
                       mt);

    if (cfg_size(cfg, dir, "vocab_size", true, &p->n_vocab, e) < 0 ||
        cfg_size(cfg, dir, "hidden_size", true, &p->n_embd, e) < 0 ||
        cfg_size(cfg, dir, "num_hidden_layers", true, &h->n_layer, e) < 0 ||
        cfg_size(cfg, dir, "intermediate_size", true, &p->n_ff, e) < 0 ||
        cfg_size(cfg, dir, "num_attention_heads", true, &p->n_head, e) < 0 ||
        cfg_size(cfg, dir, "max_position_embeddings", true, &p->n_ctx, e) < 0)
        return -1;
    p->n_head_kv = p->n_head;
    if (cfg_size(cfg, dir, "num_key_value_heads", false, &p->n_head_kv, e) < 0) return -1;
    if (p->n_head % p->n_head_kv)
        return rl_fail(e, "%s/config.json: num_attention_heads %zu is not a multiple of "
                       "num_key_value_heads %zu", dir, p->n_head, p->n_head_kv);
    p->head_dim = p->n_embd / p->n_head;
    h->n_head = p->n_head;
    h->n_head_kv = p->n_head_kv;
    int r = cfg_size(cfg, dir, "head_dim", false, &p->head_dim, e);
    if (r < 0) return -1;
    p->explicit_head_dim = r == 1;
    if (!r && p->n_embd % p->n_head)
        return rl_fail(e, "%s/config.json: hidden_size %zu is not a multiple of "
                       "num_attention_heads %zu and there is no head_dim", dir, p->n_embd,
                       p->n_head);
    if (p->head_dim % 2) return rl_fail(e, "%s/config.json: head_dim %zu is odd", dir, p->head_dim);
    if (p->head_dim > 65536 || p->n_head * p->head_dim > INT32_MAX)
        return rl_fail(e, "%s/config.json: %zu heads of %zu values are out of range", dir, p->n_head,
                       p->head_dim);
    char where[600];
    snprintf(where, sizeof where, "%s/config.json", dir);
    if (cfg_num(cfg, where, "rms_norm_eps", true, &p->rms_eps, e) < 0) return -1;

    /* rope: transformers 5 keeps theta and scaling in rope_parameters, 4.x in rope_theta and
     * rope_scaling */
    const json_t *rp = json_object_get(cfg, "rope_parameters");
    const json_t *rs = json_is_object(rp) ? rp : json_object_get(cfg, "rope_scaling");
    p->rope_theta = 10000.0;
    if (cfg_num(cfg, where, "rope_theta", false, &p->rope_theta, e) < 0) return -1;
    if (json_is_object(rp) && cfg_num(rp, where, "rope_theta", false, &p->rope_theta, e) < 0)
        return -1;
    if (!(p->rope_theta > 0)) return rl_fail(e, "%s: rope_theta must be positive", where);
    if (read_quant_config(p, cfg, where, e) < 0) return -1;
    const char *rt = NULL;
    if (json_is_object(rs)) {
        rt = json_string_value(json_object_get(rs, "rope_type"));
        if (!rt) rt = json_string_value(json_object_get(rs, "type"));
    }
    if (rt && strcmp(rt, "default") && !(strcmp(rt, "llama3") == 0 && !strcmp(mt, "llama")))
        return rl_fail(e, "%s: rope scaling '%.32s' is not supported for %s (only llama3 on "
                       "llama)", where, rt, mt);
    if (rt && !strcmp(rt, "llama3")) {
        /* rope_freqs.weight: per frequency the divisor llama3 scaling applies to it, as
         * convert_hf_to_gguf computes it (1 for short wavelengths, factor for long ones,
         * interpolated between) */
        double factor, lo, hi, octx;
        if (cfg_num(rs, where, "factor", true, &factor, e) < 0 ||
            cfg_num(rs, where, "low_freq_factor", true, &lo, e) < 0 ||
            cfg_num(rs, where, "high_freq_factor", true, &hi, e) < 0 ||
            cfg_num(rs, where, "original_max_position_embeddings", true, &octx, e) < 0)
            return -1;
        if (!(factor > 0) || !(lo > 0) || !(hi > lo) || !(octx > 0))
            return rl_fail(e, "%s: llama3 rope scaling parameters out of range", where);
        size_t n = p->head_dim / 2;
        p->rope_freqs = malloc(n * sizeof(float));
        if (!p->rope_freqs) return rl_fail(e, "out of memory");
        for (size_t i = 0; i < n; i++) {
            float f = (float)(1.0 / pow(p->rope_theta, (double)(2 * i) / (double)p->head_dim));
            double wavelen = 2 * M_PI / f;
            if (wavelen < octx / hi) {
                p->rope_freqs[i] = 1.0f;
            } else if (wavelen > octx / lo) {
                p->rope_freqs[i] = (float)factor;
            } else {
                double smooth = (octx / wavelen - lo) / (hi - lo);
                p->rope_freqs[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
            }
        }
    }
    return 0;
}

/* ---- shards ----------------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int add_shard(hf_model *h, hf_priv *p, const char *file, size_t cap, rl_err *e) {
    for (size_t i = 0; i < p->n_shards; i++) {
        const char *nm = strrchr(p->shards[i].name, '/');
        if (!strcmp(nm ? nm + 1 : p->shards[i].name, file)) return 0;
    }
    if (p->n_shards == cap) return rl_fail(e, "internal: shard list full");
    if (!*file || strchr(file, '/') || !strcmp(file, "..") || !strcmp(file, "."))
        return rl_fail(e, "%s/model.safetensors.index.json: shard name '%.64s' is not a file "
                       "name", h->dir, file);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", h->dir, file);
    if (access(path, F_OK) != 0)
        return rl_fail(e, "%s: missing shard (%s)", path, strerror(errno));
    if (st_open(&p->shards[p->n_shards], path, e) < 0) return -1;
    p->used[p->n_shards] = calloc(p->shards[p->n_shards].n_tensors + 1, sizeof(bool));
    p->n_shards++;
    if (!p->used[p->n_shards - 1]) return rl_fail(e, "out of memory");
    return 0;
}

/* Opens the shards the index names, else every *.safetensors (sorted). */
static int open_shards(hf_model *h, hf_priv *p, rl_err *e) {
    json_t *idx;
    if (load_json(h->dir, "model.safetensors.index.json", false, &idx, e) < 0) return -1;
    int r = 0;
    if (idx) {
        const json_t *wm = json_object_get(idx, "weight_map");
        if (!json_is_object(wm)) {
            json_decref(idx);
            return rl_fail(e, "%s/model.safetensors.index.json: no 'weight_map' object", h->dir);
        }
        size_t cap = json_object_size(wm) + 1;
        p->shards = calloc(cap, sizeof *p->shards);
        p->used = calloc(cap, sizeof *p->used);
        if (!p->shards || !p->used) r = rl_fail(e, "out of memory");
        const char *name;
        json_t *v;
        json_object_foreach((json_t *)wm, name, v) {
            if (r) break;
            if (!json_is_string(v)) {
                r = rl_fail(e, "%s/model.safetensors.index.json: weight_map['%.64s'] is not a "
                            "string", h->dir, name);
                break;
            }
            r = add_shard(h, p, json_string_value(v), cap, e);
        }
        /* every tensor the index lists must be in the shard it names */
        json_object_foreach((json_t *)wm, name, v) {
            if (r) break;
            for (size_t i = 0; i < p->n_shards; i++) {
                const char *nm = strrchr(p->shards[i].name, '/');
                if (strcmp(nm + 1, json_string_value(v))) continue;
                if (!st_find(&p->shards[i], name))
                    r = rl_fail(e, "%s: tensor '%.64s' listed in model.safetensors.index.json "
                                "is not in this shard", p->shards[i].name, name);
            }
        }
        json_decref(idx);
        return r;
    }
    DIR *d = opendir(h->dir);
    if (!d) return rl_fail(e, "%s: cannot open directory: %s", h->dir, strerror(errno));
    char **names = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && !r) {
        size_t l = strlen(de->d_name);
        if (l <= 12 || strcmp(de->d_name + l - 12, ".safetensors")) continue;
        char **nn = realloc(names, (n + 1) * sizeof *names);
        if (!nn || !(nn[n] = strdup(de->d_name))) r = rl_fail(e, "out of memory");
        if (nn) names = nn, n += !r;
    }
    closedir(d);
    if (!r && !n) r = rl_fail(e, "%s: no *.safetensors files (and no model.safetensors.index.json)",
                              h->dir);
    if (!r) {
        qsort(names, n, sizeof *names, cmp_str);
        p->shards = calloc(n, sizeof *p->shards);
        p->used = calloc(n, sizeof *p->used);
        if (!p->shards || !p->used) r = rl_fail(e, "out of memory");
    }
    for (size_t i = 0; i < n && !r; i++) r = add_shard(h, p, names[i], n, e);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return r;
}

/* The stored tensor named hf_name: 1 found (*out, marked used), 0 absent, -1 duplicate. */
static int find_src(hf_priv *p, const char *hf_name, const st_tensor **out, rl_err *e) {
    *out = NULL;
    for (size_t s = 0; s < p->n_shards; s++) {
        const st_tensor *t = st_find(&p->shards[s], hf_name);
        if (!t) continue;
        if (*out)
            return rl_fail(e, "tensor '%s' is in two shards (%s and another)", hf_name,
                           p->shards[s].name);
        *out = t;
        p->used[s][t - p->shards[s].tensors] = true;
    }
    return *out != NULL;
}

/* ---- tensors ---------------------------------------------------------------------------------- */

/* What each tensor's shape is made of. */
enum dim { D_1, D_VOCAB, D_EMBD, D_FF, D_Q, D_KV, D_HD };

typedef struct tdef {
    const char *hf, *gguf; /* per-layer names after "model.layers.N." / "blk.N." */
    enum dim rows, cols;   /* HF shape [rows, cols]; cols D_1 for vectors */
    int arch;              /* 0 all, 2 qwen2 only, 3 qwen3 only */
    int perm;              /* llama: 1 permute over n_head, 2 over n_head_kv */
} tdef;

static const tdef k_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight", D_EMBD, D_1, 0, 0},
    {"self_attn.q_proj.weight", "attn_q.weight", D_Q, D_EMBD, 0, 1},
    {"self_attn.k_proj.weight", "attn_k.weight", D_KV, D_EMBD, 0, 2},
    {"self_attn.v_proj.weight", "attn_v.weight", D_KV, D_EMBD, 0, 0},
    {"self_attn.q_proj.bias", "attn_q.bias", D_Q, D_1, 2, 0},
    {"self_attn.k_proj.bias", "attn_k.bias", D_KV, D_1, 2, 0},
    {"self_attn.v_proj.bias", "attn_v.bias", D_KV, D_1, 2, 0},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", D_HD, D_1, 3, 0},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", D_HD, D_1, 3, 0},
    {"self_attn.o_proj.weight", "attn_output.weight", D_EMBD, D_Q, 0, 0},
    {"post_attention_layernorm.weight", "ffn_norm.weight", D_EMBD, D_1, 0, 0},
    {"mlp.gate_proj.weight", "ffn_gate.weight", D_FF, D_EMBD, 0, 0},
    {"mlp.up_proj.weight", "ffn_up.weight", D_FF, D_EMBD, 0, 0},
    {"mlp.down_proj.weight", "ffn_down.weight", D_EMBD, D_FF, 0, 0},
};

static uint64_t dim_size(const hf_priv *p, enum dim d) {
    switch (d) {
    case D_VOCAB: return p->n_vocab;
    case D_EMBD: return p->n_embd;
    case D_FF: return p->n_ff;
    case D_Q: return (uint64_t)p->n_head * p->head_dim;
    case D_KV: return (uint64_t)p->n_head_kv * p->head_dim;
    case D_HD: return p->head_dim;
    default: return 1;
    }
}

/* "[a, b]": a stored tensor's shape, for messages. */
static const char *shape_str(const st_tensor *s, char *buf, size_t cap) {
    int k = snprintf(buf, cap, "[");
    for (uint32_t i = 0; i < s->n_dims && k < (int)cap - 24; i++)
        k += snprintf(buf + k, cap - (size_t)k, "%s%llu", i ? ", " : "",
                      (unsigned long long)s->shape[i]);
    snprintf(buf + k, cap - (size_t)k, "]");
    return buf;
}

/* The scales of F8_E4M3 weight hname, stored [rows, cols]: its sibling hname_scale_inv
 * (DeepSeek, transformers) or hname_scale (AutoFP8, vLLM), a multiplier either way, which
 * must be F32 or BF16, one value per weight_block_size block (the last block of a row or column
 * may be partial, as DeepSeek's weight_dequant masks it) or one for the whole tensor, and finite
 * (a NaN scale would poison every value of its block without a trace). */
static int fp8_scales(hf_model *h, hf_priv *p, const char *hname, uint64_t rows, uint64_t cols,
                      hf_fp8 *f, rl_err *e) {
    if (!p->fp8)
        return rl_fail(e, "%s: tensor '%s' is F8_E4M3 but config.json has no quantization_config "
                       "with quant_method 'fp8' to say how it is scaled", h->dir, hname);
    char sn[160], got[96];
    snprintf(sn, sizeof sn, "%s_scale_inv", hname);
    const st_tensor *s;
    int r = find_src(p, sn, &s, e);
    if (!r) {
        snprintf(sn, sizeof sn, "%s_scale", hname);
        r = find_src(p, sn, &s, e);
    }
    if (r < 0) return -1;
    if (!r)
        return rl_fail(e, "%s: tensor '%s' is F8_E4M3 but its scales '%s_scale_inv' (or "
                       "'%s_scale') are not in any shard", h->dir, hname, hname, hname);
    if (s->dtype != ST_F32 && s->dtype != ST_BF16)
        return rl_fail(e, "%s: tensor '%s' has dtype %s; FP8 scales must be F32 or BF16", h->dir,
                       sn, st_dtype_name(s->dtype));
    f->scale = s->data;
    f->scale_type = s->dtype == ST_F32 ? RL_F32 : RL_BF16;
    if (s->nelem == 1 && s->n_dims <= 1) { /* [] or [1]: one scale for the tensor */
        f->blk_rows = rows ? (size_t)rows : 1;
        f->blk_cols = cols ? (size_t)cols : 1;
    } else if (!p->fp8_blk[0]) {
        return rl_fail(e, "%s: tensor '%s' has shape %s, block scales, but config.json's "
                       "quantization_config has no weight_block_size", h->dir, sn,
                       shape_str(s, got, sizeof got));
    } else {
        f->blk_rows = p->fp8_blk[0];
        f->blk_cols = p->fp8_blk[1];
        uint64_t sr = (rows + f->blk_rows - 1) / f->blk_rows,
                 sc = (cols + f->blk_cols - 1) / f->blk_cols;
        if (s->n_dims != 2 || s->shape[0] != sr || s->shape[1] != sc)
            return rl_fail(e, "%s: tensor '%s' has shape %s, but weight_block_size [%zu, %zu] "
                           "over '%s' [%llu, %llu] implies [%llu, %llu] (or [] / [1] for one "
                           "scale)", h->dir, sn, shape_str(s, got, sizeof got), f->blk_rows,
                           f->blk_cols, hname, (unsigned long long)rows,
                           (unsigned long long)cols, (unsigned long long)sr,
                           (unsigned long long)sc);
    }
    f->n_blk_cols = (cols + f->blk_cols - 1) / f->blk_cols;
    if (!f->n_blk_cols) f->n_blk_cols = 1;
    for (size_t i = 0; i < s->nelem; i++) {
        float v = fp8_scale_at(f, i);
        if (!isfinite(v))
            return rl_fail(e, "%s: tensor '%s' holds a non-finite scale (%g) at index %zu", h->dir,
                           sn, (double)v, i);
    }
    return 0;
}

/* Appends GGUF tensor gname from HF tensor hname; optional: absent is not an error. */
static int add_tensor(hf_model *h, hf_priv *p, const char *hname, const char *gname,
                      enum dim rows, enum dim cols, size_t perm_heads, bool optional,
                      rl_err *e) {
    const st_tensor *s;
    int r = find_src(p, hname, &s, e);
    if (r < 0) return -1;
    if (!r) {
        if (optional) return 0;
        return rl_fail(e, "%s: tensor '%s' not found in any shard", h->dir, hname);
    }
    uint64_t er = dim_size(p, rows), ec = dim_size(p, cols);
    bool vec = cols == D_1;
    if (s->n_dims != (vec ? 1u : 2u) || s->shape[0] != er || (!vec && s->shape[1] != ec)) {
        char got[96];
        shape_str(s, got, sizeof got);
        if (vec)
            return rl_fail(e, "%s: tensor '%s' has shape %s, config.json implies [%llu]", h->dir,
                           hname, got, (unsigned long long)er);
        return rl_fail(e, "%s: tensor '%s' has shape %s, config.json implies [%llu, %llu]",
                       h->dir, hname, got, (unsigned long long)er, (unsigned long long)ec);
    }
    static const uint32_t k_types[ST_DTYPE_COUNT] = {[ST_F32] = RL_F32 + 1,
                                                     [ST_F16] = RL_F16 + 1,
                                                     [ST_BF16] = RL_BF16 + 1,
                                                     [ST_F8_E4M3] = HF_F8_E4M3 + 1};
    if (!k_types[s->dtype] || (s->dtype == ST_F8_E4M3 && vec))
        return rl_fail(e, "%s: tensor '%s' has dtype %s; only F32, F16 and BF16 can be converted "
                       "(and F8_E4M3 matrices with block scales)", h->dir, hname,
                       st_dtype_name(s->dtype));
    hf_fp8 fp8 = {0};
    if (s->dtype == ST_F8_E4M3 && fp8_scales(h, p, hname, er, ec, &fp8, e) < 0) return -1;
    hf_tensor *t = &h->tensors[h->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", gname);
    snprintf(t->src, sizeof t->src, "%s", hname);
    t->fp8 = fp8;
    t->n_dims = vec ? 1 : 2;
    t->ne[0] = vec ? er : ec;
    t->ne[1] = vec ? 1 : er;
    t->ne[2] = t->ne[3] = 1;
    t->type = k_types[s->dtype] - 1;
    t->data = s->data;
    t->nbytes = s->nbytes;
    t->perm_heads = perm_heads;
    if (perm_heads && ((size_t)er % perm_heads || (er / perm_heads) % 2))
        return rl_fail(e, "%s: tensor '%s': %llu rows do not split into %zu heads of even size",
                       h->dir, hname, (unsigned long long)er, perm_heads);
    return 1;
}

static int collect_tensors(hf_model *h, hf_priv *p, bool tied, rl_err *e) {
    size_t cap = 4 + h->n_layer * (sizeof k_layer / sizeof k_layer[0]);
    h->tensors = calloc(cap, sizeof *h->tensors);
    if (!h->tensors) return rl_fail(e, "out of memory");
    int arch = !strcmp(h->arch, "qwen2") ? 2 : !strcmp(h->arch, "qwen3") ? 3 : 0;
    if (add_tensor(h, p, "model.embed_tokens.weight", "token_embd.weight", D_VOCAB, D_EMBD, 0,
                   false, e) < 0)
        return -1;
    if (p->rope_freqs) {
        hf_tensor *t = &h->tensors[h->n_tensors++];
        snprintf(t->name, sizeof t->name, "rope_freqs.weight");
        t->n_dims = 1;
        t->ne[0] = p->head_dim / 2;
        t->ne[1] = t->ne[2] = t->ne[3] = 1;
        t->type = RL_F32;
        t->data = p->rope_freqs;
        t->nbytes = p->head_dim / 2 * sizeof(float);
    }
    for (size_t l = 0; l < h->n_layer; l++) {
        for (size_t i = 0; i < sizeof k_layer / sizeof k_layer[0]; i++) {
            const tdef *d = &k_layer[i];
            if (d->arch && d->arch != arch) continue;
            char hn[128], gn[64];
            snprintf(hn, sizeof hn, "model.layers.%zu.%s", l, d->hf);
            snprintf(gn, sizeof gn, "blk.%zu.%s", l, d->gguf);
            size_t perm = arch || !d->perm ? 0 : d->perm == 1 ? p->n_head : p->n_head_kv;
            if (add_tensor(h, p, hn, gn, d->rows, d->cols, perm, false, e) < 0) return -1;
        }
    }
    if (add_tensor(h, p, "model.norm.weight", "output_norm.weight", D_EMBD, D_1, 0, false, e) < 0)
        return -1;
    /* tied: lm_head is the embedding (llama.cpp writes no output.weight); a file may still
     * carry a copy, which is skipped */
    if (tied) {
        const st_tensor *s;
        if (find_src(p, "lm_head.weight", &s, e) < 0 ||
            find_src(p, "lm_head.weight_scale_inv", &s, e) < 0 ||
            find_src(p, "lm_head.weight_scale", &s, e) < 0 || find_src(p, "lm_head.input_scale", &s, e) < 0)
            return -1;
    } else if (add_tensor(h, p, "lm_head.weight", "output.weight", D_VOCAB, D_EMBD, 0, true,
                          e) < 0) {
        return -1;
    }
    /* anything left over means config.json and the weights disagree, except a static FP8
     * checkpoint's activation scales (counted, said in the warning) */
    size_t n_input_scale = 0;
    for (size_t s = 0; s < p->n_shards; s++)
        for (size_t i = 0; i < p->shards[s].n_tensors; i++) {
            const char *nm = p->shards[s].tensors[i].name;
            size_t l = strlen(nm);
            if (p->used[s][i] || (l >= 20 && !strcmp(nm + l - 20, "rotary_emb.inv_freq")))
                continue;
            if (p->fp8_static && l >= 12 && !strcmp(nm + l - 12, ".input_scale")) {
                n_input_scale++;
                continue;
            }
            if ((l >= 10 && !strcmp(nm + l - 10, "_scale_inv")) || (l >= 13 && !strcmp(nm + l - 13, ".weight_scale")))
                return rl_fail(e, "%s: unexpected tensor '%.96s': FP8 scales of a weight that is "
                               "not F8_E4M3, or that a %s model does not have", p->shards[s].name,
                               nm, h->arch);
            return rl_fail(e, "%s: unexpected tensor '%.96s' (not part of a %zu-layer %s model "
                           "as config.json describes it)", p->shards[s].name, nm, h->n_layer,
                           h->arch);
        }
    if (n_input_scale)
        add_warning(h, "FP8 activation_scheme 'static': %zu input_scale tensors (the scales of FP8 "
                    "activations) are not used; rawloop computes activations its own way", n_input_scale);
    return 0;
}

/* ---- tokenizer -------------------------------------------------------------------------------- */

static int tok_grow(hf_priv *p, size_t n, rl_err *e) {
    if (n <= p->n_tok) return 0;
    if (n > ((size_t)1 << 24)) return rl_fail(e, "tokenizer: token id %zu is too large", n - 1);
    char **t = realloc(p->tok, n * sizeof *t);
    if (t) p->tok = t;
    int32_t *ty = realloc(p->tok_type, n * sizeof *ty);
    if (ty) p->tok_type = ty;
    float *sc = realloc(p->score, n * sizeof *sc);
    if (sc) p->score = sc;
    if (!t || !ty || !sc) return rl_fail(e, "out of memory");
    for (size_t i = p->n_tok; i < n; i++) p->tok[i] = NULL, p->tok_type[i] = 0, p->score[i] = 0;
    p->n_tok = n;
    return 0;
}

static int tok_set(hf_priv *p, size_t id, const char *text, size_t len, int32_t type, rl_err *e) {
    if (tok_grow(p, id + 1, e)) return -1;
    char *s = malloc(len + 1);
    if (!s) return rl_fail(e, "out of memory");
    memcpy(s, text, len);
    s[len] = 0;
    free(p->tok[id]);
    p->tok[id] = s;
    p->tok_type[id] = type;
    return 0;
}

static int32_t tok_find(const hf_priv *p, const char *text) {
    for (size_t i = 0; text && i < p->n_tok; i++)
        if (p->tok[i] && !strcmp(p->tok[i], text)) return (int32_t)i;
    return -1;
}

/* The pre-tokenizer regexes of the tokenizer.json files rawloop knows, by tokenizer.ggml.pre. */
static const struct { const char *re, *pre; } k_pre_re[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
     "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", "llama-bpe"},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
     "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", "qwen2"},
};

/* Looks through a pre_tokenizer (or a Sequence of them): *split gets the first Split regex,
 * *bytelevel whether a ByteLevel step is there, *bl_regex whether that step splits with
 * GPT-2's own regex. */
static void scan_pre(const json_t *pt, const char **split, bool *bytelevel, bool *bl_regex) {
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (!type) return;
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(pt, "pretokenizers");
        for (size_t i = 0; i < json_array_size(arr); i++)
            scan_pre(json_array_get(arr, i), split, bytelevel, bl_regex);
    } else if (!strcmp(type, "Split") && !*split) {
        *split = json_string_value(json_object_get(json_object_get(pt, "pattern"), "Regex"));
    } else if (!strcmp(type, "ByteLevel")) {
        *bytelevel = true;
        const json_t *ur = json_object_get(pt, "use_regex");
        *bl_regex = !ur || json_is_true(ur);
    }
}

/* Byte-level BPE from tokenizer.json. */
static int read_bpe(hf_model *h, hf_priv *p, const json_t *tj, rl_err *e) {
    char where[600];
    snprintf(where, sizeof where, "%s/tokenizer.json", h->dir);
    const json_t *model = json_object_get(tj, "model");
    const json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return rl_fail(e, "%s: model needs a 'vocab' object and a 'merges' array", where);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return rl_fail(e, "%s: vocab['%.64s'] is not a token id", where, key);
        size_t id = (size_t)json_integer_value(v);
        if (id < p->n_tok && p->tok[id])
            return rl_fail(e, "%s: token id %zu is given twice", where, id);
        if (tok_set(p, id, key, strlen(key), TT_NORMAL, e)) return -1;
    }
    const json_t *added = json_object_get(tj, "added_tokens");
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        const json_t *id = json_object_get(a, "id");
        const char *text = json_string_value(json_object_get(a, "content"));
        if (!json_is_integer(id) || json_integer_value(id) < 0 || !text)
            return rl_fail(e, "%s: added_tokens[%zu] needs 'id' and 'content'", where, i);
        int32_t type = json_is_true(json_object_get(a, "special")) ? TT_CONTROL : TT_USER_DEFINED;
        if (tok_set(p, (size_t)json_integer_value(id), text, strlen(text), type, e)) return -1;
    }
    /* merges: "a b" strings (older files) or ["a", "b"] pairs */
    p->n_merges = json_array_size(merges);
    p->merges = calloc(p->n_merges + 1, sizeof *p->merges);
    if (!p->merges) return rl_fail(e, "out of memory");
    for (size_t i = 0; i < p->n_merges; i++) {
        const json_t *m = json_array_get(merges, i);
        const char *a = json_string_value(m), *b = "";
        if (!a && json_array_size(m) == 2) {
            a = json_string_value(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
        }
        if (!a || !b) return rl_fail(e, "%s: merges[%zu] is neither \"a b\" nor [a, b]", where, i);
        size_t la = strlen(a), lb = strlen(b);
        if (!(p->merges[i] = malloc(la + lb + 2))) return rl_fail(e, "out of memory");
        memcpy(p->merges[i], a, la);
        if (*b) p->merges[i][la] = ' ', memcpy(p->merges[i] + la + 1, b, lb + 1);
        else p->merges[i][la] = 0;
    }

    const char *split = NULL;
    bool bytelevel = false, bl_regex = false;
    scan_pre(json_object_get(tj, "pre_tokenizer"), &split, &bytelevel, &bl_regex);
    if (!bytelevel) return -2; /* not byte-level: the caller tries tokenizer.model */
    p->pre = NULL;
    if (split) {
        for (size_t i = 0; i < sizeof k_pre_re / sizeof k_pre_re[0]; i++)
            if (!strcmp(split, k_pre_re[i].re)) p->pre = k_pre_re[i].pre;
    } else if (bl_regex) {
        p->pre = "gpt-2";
    }
    if (!p->pre) {
        p->pre = strcmp(h->arch, "llama") ? "qwen2" : "llama-bpe";
        add_warning(h, "tokenizer.json's pre-tokenizer regex is not one rawloop knows; using '%s' "
                    "(the %s family's), tokens may differ", p->pre, h->arch);
    }
    /* add_bos when tokenizer_config.json does not say: the post-processor's template */
    const json_t *pp = json_object_get(tj, "post_processor");
    const char *ppt = json_string_value(json_object_get(pp, "type"));
    if (ppt && !strcmp(ppt, "Sequence")) {
        const json_t *arr = json_object_get(pp, "processors");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            const json_t *x = json_array_get(arr, i);
            const char *xt = json_string_value(json_object_get(x, "type"));
            if (xt && !strcmp(xt, "TemplateProcessing")) pp = x, ppt = xt;
        }
    }
    p->add_bos = 0;
    if (ppt && !strcmp(ppt, "TemplateProcessing")) {
        const json_t *first = json_array_get(json_object_get(pp, "single"), 0);
        p->add_bos = json_object_get(first, "SpecialToken") != NULL;
    }
    return 0;
}

/* ---- SentencePiece tokenizer.model (protobuf) -------------------------------------------------
 * ModelProto: 1 = repeated SentencePiece {1 piece, 2 score (float), 3 type}, 2 = TrainerSpec
 * {3 model_type, 40 unk_id, 41 bos_id, 42 eos_id, 43 pad_id}, 3 = NormalizerSpec
 * {3 add_dummy_prefix}. */

typedef struct pb { const uint8_t *p, *end; } pb;

static int pb_varint(pb *b, uint64_t *v) {
    *v = 0;
    for (int s = 0; s < 64; s += 7) {
        if (b->p >= b->end) return -1;
        uint8_t c = *b->p++;
        *v |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80)) return 0;
    }
    return -1;
}

/* Next field: *field, *wt; for wire type 2 *sub is the payload, for 0 *v the value, for 5 *v the
 * 32 bits. Returns 1, 0 at the end, -1 when malformed. */
static int pb_next(pb *b, uint32_t *field, uint32_t *wt, pb *sub, uint64_t *v) {
    if (b->p >= b->end) return 0;
    uint64_t key;
    if (pb_varint(b, &key) || key >> 35) return -1;
    *field = (uint32_t)(key >> 3);
    *wt = key & 7;
    switch (*wt) {
    case 0: return pb_varint(b, v) ? -1 : 1;
    case 1:
        if (b->end - b->p < 8) return -1;
        b->p += 8;
        return 1;
    case 2:
        if (pb_varint(b, v) || *v > (uint64_t)(b->end - b->p)) return -1;
        sub->p = b->p;
        sub->end = b->p + *v;
        b->p += *v;
        return 1;
    case 5:
        if (b->end - b->p < 4) return -1;
        *v = (uint64_t)b->p[0] | (uint64_t)b->p[1] << 8 | (uint64_t)b->p[2] << 16 |
             (uint64_t)b->p[3] << 24;
        b->p += 4;
        return 1;
    default: return -1;
    }
}

static int read_spm_buf(hf_priv *p, const uint8_t *buf, size_t size, const char *where,
                        rl_err *e) {
    pb b = {buf, buf + size}, sub;
    uint32_t f, wt;
    uint64_t v;
    int r;
    int64_t ids[4] = {0, 1, 2, -1}; /* unk, bos, eos, pad: SentencePiece's defaults */
    p->add_space_prefix = 1;
    while ((r = pb_next(&b, &f, &wt, &sub, &v)) == 1) {
        if (f == 1 && wt == 2) {
            const uint8_t *text = NULL;
            size_t len = 0;
            float score = 0;
            int32_t type = TT_NORMAL;
            pb s = sub, x;
            uint32_t sf, swt;
            uint64_t sv;
            int rr;
            while ((rr = pb_next(&s, &sf, &swt, &x, &sv)) == 1) {
                if (sf == 1 && swt == 2) text = x.p, len = (size_t)(x.end - x.p);
                else if (sf == 2 && swt == 5) memcpy(&score, &(uint32_t){(uint32_t)sv}, 4);
                else if (sf == 3 && swt == 0) type = (int32_t)sv;
            }
            if (rr < 0 || !text) return rl_fail(e, "%s: piece %zu is malformed", where, p->n_tok);
            if (type < 1 || type > 6)
                return rl_fail(e, "%s: piece %zu has type %d, expected 1..6", where, p->n_tok,
                               type);
            size_t id = p->n_tok;
            if (tok_set(p, id, (const char *)text, len, type, e)) return -1;
            p->score[id] = score;
        } else if ((f == 2 || f == 3) && wt == 2) {
            pb s = sub, x;
            uint32_t sf, swt;
            uint64_t sv;
            int rr;
            while ((rr = pb_next(&s, &sf, &swt, &x, &sv)) == 1) {
                if (swt != 0) continue;
                if (f == 2 && sf == 3 && sv != 2)
                    return rl_fail(e, "%s: model_type %llu is not BPE (2); rawloop's llama "
                                   "tokenizer is SentencePiece BPE", where,
                                   (unsigned long long)sv);
                if (f == 2 && sf >= 40 && sf <= 43) ids[sf - 40] = (int64_t)(int32_t)sv;
                if (f == 3 && sf == 3) p->add_space_prefix = sv != 0;
            }
            if (rr < 0) return rl_fail(e, "%s: malformed %s", where, f == 2 ? "trainer_spec" :
                                       "normalizer_spec");
        }
    }
    if (r < 0) return rl_fail(e, "%s: malformed protobuf (not a SentencePiece model?)", where);
    if (!p->n_tok) return rl_fail(e, "%s: no pieces", where);
    int32_t *dst[4] = {&p->unk, &p->bos, &p->eos, &p->pad};
    for (int i = 0; i < 4; i++) *dst[i] = ids[i] >= 0 && (size_t)ids[i] < p->n_tok ? (int32_t)ids[i] : -1;
    p->add_bos = 1;
    p->add_eos = 0;
    return 0;
}

static int read_spm(hf_model *h, hf_priv *p, rl_err *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.model", h->dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rl_fail(e, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) || sb.st_size <= 0) {
        close(fd);
        return rl_fail(e, "%s: empty or unreadable", path);
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return rl_fail(e, "%s: mmap failed", path);
    int r = read_spm_buf(p, m, (size_t)sb.st_size, path, e);
    munmap(m, (size_t)sb.st_size);
    p->spm = true;
    p->pre = "default";
    return r;
}

/* A tokenizer_config.json special token: "text" or {"content": "text"}. */
static const char *special_text(const json_t *tc, const char *key) {
    const json_t *v = json_object_get(tc, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_string_value(v);
}

/* config.json's id: an integer or a list (Llama 3.1 lists several eos ids: the first one). */
static int32_t cfg_id(const json_t *cfg, const char *key) {
    const json_t *v = json_object_get(cfg, key);
    if (json_is_array(v)) v = json_array_get(v, 0);
    return json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < INT32_MAX
               ? (int32_t)json_integer_value(v) : -1;
}

static int read_tokenizer(hf_model *h, hf_priv *p, const json_t *cfg, rl_err *e) {
    json_t *tj = NULL, *tc = NULL;
    char path[4096];
    p->bos = p->eos = p->unk = p->pad = -1;
    p->add_bos = p->add_eos = p->add_space_prefix = -1;
    int r = load_json(h->dir, "tokenizer.json", false, &tj, e);
    if (!r && tj) {
        const char *mt = json_string_value(json_object_get(json_object_get(tj, "model"), "type"));
        if (!mt || strcmp(mt, "BPE")) r = -2;
        else r = read_bpe(h, p, tj, e);
        if (r == -2) { /* not byte-level BPE: drop what was read, fall back to SentencePiece */
            for (size_t i = 0; i < p->n_tok; i++) free(p->tok[i]);
            for (size_t i = 0; i < p->n_merges; i++) free(p->merges[i]);
            free(p->merges);
            p->merges = NULL;
            p->n_tok = p->n_merges = 0;
        }
    }
    snprintf(path, sizeof path, "%s/tokenizer.model", h->dir);
    if ((!tj || r == -2) && access(path, F_OK) == 0) r = read_spm(h, p, e);
    else if (!tj || r == -2)
        r = rl_fail(e, "%s: no usable tokenizer: needs a byte-level BPE tokenizer.json or a "
                    "SentencePiece tokenizer.model", h->dir);
    json_decref(tj);
    if (r) return -1;

    /* its model_max_length is often 1e30 written as an integer, beyond json_int_t; only its
     * strings and booleans are read */
    if (load_json_flags(h->dir, "tokenizer_config.json", false, JSON_DECODE_INT_AS_REAL, &tc,
                        e) < 0)
        return -1;
    int32_t *ids[4] = {&p->bos, &p->eos, &p->unk, &p->pad};
    static const char *const keys[4] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    static const char *const cfg_keys[4] = {"bos_token_id", "eos_token_id", NULL, "pad_token_id"};
    for (int i = 0; i < 4; i++) {
        int32_t id = tok_find(p, special_text(tc, keys[i]));
        if (id < 0 && cfg_keys[i]) id = cfg_id(cfg, cfg_keys[i]);
        if (id >= 0) *ids[i] = id;
    }
    const json_t *ab = json_object_get(tc, "add_bos_token"), *ae = json_object_get(tc, "add_eos_token");
    if (json_is_boolean(ab)) p->add_bos = json_is_true(ab);
    if (json_is_boolean(ae)) p->add_eos = json_is_true(ae);
    json_decref(tc);

    if (p->n_tok > p->n_vocab)
        return rl_fail(e, "%s: the tokenizer has %zu tokens but config.json's vocab_size is %zu",
                       h->dir, p->n_tok, p->n_vocab);
    /* ids the tokenizer leaves out, up to vocab_size: named placeholders, as llama.cpp does */
    if (tok_grow(p, p->n_vocab, e)) return -1;
    for (size_t i = 0; i < p->n_vocab; i++) {
        if (p->tok[i]) continue;
        char pad[32];
        int n = snprintf(pad, sizeof pad, "[PAD%zu]", i);
        if (tok_set(p, i, pad, (size_t)n, TT_UNUSED, e)) return -1;
    }
    for (int i = 0; i < 4; i++)
        if (*ids[i] >= (int32_t)p->n_tok) *ids[i] = -1;
    if (p->add_bos == 1 && p->bos < 0)
        return rl_fail(e, "%s: add_bos_token is set but no bos token is known", h->dir);
    return 0;
}

/* ---- open / close ----------------------------------------------------------------------------- */

void hf_close(hf_model *h) {
    hf_priv *p = h->priv;
    if (p) {
        for (size_t i = 0; i < p->n_shards; i++) {
            st_close(&p->shards[i]);
            free(p->used[i]);
        }
        free(p->shards);
        free(p->used);
        free(p->rope_freqs);
        for (size_t i = 0; i < p->n_tok; i++) free(p->tok[i]);
        for (size_t i = 0; i < p->n_merges; i++) free(p->merges[i]);
        free(p->tok);
        free(p->tok_type);
        free(p->score);
        free(p->merges);
        free(p);
    }
    free(h->tensors);
    memset(h, 0, sizeof *h);
}

int hf_open(hf_model *h, const char *dir, rl_err *e) {
    memset(h, 0, sizeof *h);
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    if (dl >= sizeof h->dir) return rl_fail(e, "%s: path too long", dir);
    memcpy(h->dir, dir, dl);
    hf_priv *p = h->priv = calloc(1, sizeof *p);
    if (!p) return rl_fail(e, "out of memory");
    json_t *cfg;
    if (load_json(h->dir, "config.json", true, &cfg, e) < 0) goto fail;
    bool tied = json_is_true(json_object_get(cfg, "tie_word_embeddings"));
    int r = read_config(h, p, cfg, e);
    if (!r) r = read_tokenizer(h, p, cfg, e);
    json_decref(cfg);
    if (r || open_shards(h, p, e) || collect_tensors(h, p, tied, e)) goto fail;
    return 0;
fail:
    hf_close(h);
    return -1;
}

/* ---- metadata --------------------------------------------------------------------------------- */

static int w_arr_strs(gguf_writer *w, const char *key, char *const *s, size_t n, rl_err *e) {
    gguf_str *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return rl_fail(e, "out of memory");
    for (size_t i = 0; i < n; i++) v[i] = (gguf_str){s[i], strlen(s[i])};
    int r = gguf_w_arr_str(w, key, v, n, e);
    free(v);
    return r;
}

int hf_write_kvs(const hf_model *h, gguf_writer *w, rl_err *e) {
    const hf_priv *p = h->priv;
    const char *a = h->arch;
    char k[128];
    const char *base = strrchr(h->dir, '/');
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", a, s), k)
    if (gguf_w_str(w, "general.architecture", a, e) ||
        gguf_w_str(w, "general.name", base ? base + 1 : h->dir, e) ||
        gguf_w_u32(w, KEY("vocab_size"), (uint32_t)p->n_vocab, e) ||
        gguf_w_u32(w, KEY("context_length"), (uint32_t)p->n_ctx, e) ||
        gguf_w_u32(w, KEY("embedding_length"), (uint32_t)p->n_embd, e) ||
        gguf_w_u32(w, KEY("block_count"), (uint32_t)h->n_layer, e) ||
        gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)p->n_ff, e) ||
        gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)p->n_head, e) ||
        gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)p->n_head_kv, e) ||
        gguf_w_f32(w, KEY("rope.freq_base"), (float)p->rope_theta, e) ||
        gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)p->rms_eps, e) ||
        gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)p->head_dim, e))
        return -1;
    if (p->explicit_head_dim &&
        (gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)p->head_dim, e) ||
         gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)p->head_dim, e)))
        return -1;
#undef KEY
    if (gguf_w_str(w, "tokenizer.ggml.model", p->spm ? "llama" : "gpt2", e) ||
        gguf_w_str(w, "tokenizer.ggml.pre", p->pre, e) ||
        w_arr_strs(w, "tokenizer.ggml.tokens", p->tok, p->n_tok, e) ||
        (p->spm && gguf_w_arr(w, "tokenizer.ggml.scores", GGUF_F32, p->score, p->n_tok, e)) ||
        gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_I32, p->tok_type, p->n_tok, e) ||
        (!p->spm && w_arr_strs(w, "tokenizer.ggml.merges", p->merges, p->n_merges, e)))
        return -1;
    static const char *const id_keys[4] = {"tokenizer.ggml.bos_token_id",
                                           "tokenizer.ggml.eos_token_id",
                                           "tokenizer.ggml.unknown_token_id",
                                           "tokenizer.ggml.padding_token_id"};
    const int32_t ids[4] = {p->bos, p->eos, p->unk, p->pad};
    for (int i = 0; i < 4; i++)
        if (ids[i] >= 0 && gguf_w_u32(w, id_keys[i], (uint32_t)ids[i], e)) return -1;
    if ((p->add_bos >= 0 && gguf_w_bool(w, "tokenizer.ggml.add_bos_token", p->add_bos, e)) ||
        (p->add_eos >= 0 && gguf_w_bool(w, "tokenizer.ggml.add_eos_token", p->add_eos, e)) ||
        (p->spm && p->add_space_prefix >= 0 &&
         gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", p->add_space_prefix, e)))
        return -1;
    return 0;
}
