#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "types.h"

typedef struct binder {
    rl_model *m;
    float *store;      /* cursor into m->f32_store */
    float *store_end;
} binder;

static const char *fname(const rl_model *m) { return m->file.name; }

/* Reads "<arch>.<suffix>" as a size; per-layer arrays are accepted when all entries agree. */
static int get_size(rl_model *m, const char *suffix, size_t *out, bool required, rl_err *e) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->cfg.arch_name, suffix);
    const gguf_kv *kv = gguf_find(&m->file, key);
    if (!kv) {
        if (required) return rl_fail(e, "%s: missing required key '%s'", fname(m), key);
        return 0;
    }
    if (kv->type == GGUF_ARRAY) {
        if (kv->n == 0 || kv->arr_type == GGUF_STRING || kv->arr_type == GGUF_F32 ||
            kv->arr_type == GGUF_F64 || kv->arr_type == GGUF_BOOL)
            return rl_fail(e, "%s: key '%s' must be an integer or an array of integers", fname(m),
                           key);
        int64_t v0 = gguf_arr_i64(kv, 0);
        for (uint64_t i = 1; i < kv->n; i++)
            if (gguf_arr_i64(kv, i) != v0)
                return rl_fail(e, "%s: key '%s' varies per layer (%lld vs %lld at layer %llu); "
                               "per-layer sizes are not supported", fname(m), key, (long long)v0,
                               (long long)gguf_arr_i64(kv, i), (unsigned long long)i);
        if (v0 <= 0 || v0 > (1LL << 40))
            return rl_fail(e, "%s: key '%s' = %lld is out of range", fname(m), key, (long long)v0);
        *out = (size_t)v0;
        return 1;
    }
    uint64_t v;
    int r = gguf_get_u64(&m->file, key, &v, e);
    if (r < 0) return r;
    if (v == 0 || v > (1ULL << 40))
        return rl_fail(e, "%s: key '%s' = %llu is out of range", fname(m), key,
                       (unsigned long long)v);
    *out = (size_t)v;
    return 1;
}

static int get_float(rl_model *m, const char *suffix, float *out, rl_err *e) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->cfg.arch_name, suffix);
    return gguf_get_f32(&m->file, key, out, e);
}

static int load_config(rl_model *m, rl_err *e) {
    rl_config *c = &m->cfg;
    gguf_str arch;
    int r = gguf_get_str(&m->file, "general.architecture", &arch, e);
    if (r < 0) return -1;
    if (r == 0) return rl_fail(e, "%s: missing key 'general.architecture'", fname(m));
    static const struct { const char *name; enum rl_arch arch; } archs[] = {
        {"llama", RL_ARCH_LLAMA}, {"qwen2", RL_ARCH_QWEN2}, {"qwen3", RL_ARCH_QWEN3}};
    size_t i;
    for (i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (gguf_str_eq(arch, archs[i].name)) break;
    if (i == sizeof archs / sizeof archs[0])
        return rl_fail(e, "%s: unsupported architecture '%.*s' (supported: llama, qwen2, qwen3)",
                       fname(m), (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
    c->arch = archs[i].arch;
    snprintf(c->arch_name, sizeof c->arch_name, "%s", archs[i].name);
    c->qkv_bias = c->arch == RL_ARCH_QWEN2;
    c->qk_norm = c->arch == RL_ARCH_QWEN3;
    c->rope_neox = c->arch != RL_ARCH_LLAMA;

    if (get_size(m, "embedding_length", &c->n_embd, true, e) < 0) return -1;
    if (get_size(m, "block_count", &c->n_layer, true, e) < 0) return -1;
    if (get_size(m, "feed_forward_length", &c->n_ff, true, e) < 0) return -1;
    if (get_size(m, "attention.head_count", &c->n_head, true, e) < 0) return -1;
    c->n_head_kv = c->n_head;
    if (get_size(m, "attention.head_count_kv", &c->n_head_kv, false, e) < 0) return -1;
    c->n_ctx_train = 4096;
    if (get_size(m, "context_length", &c->n_ctx_train, false, e) < 0) return -1;
    if (c->n_embd % c->n_head)
        return rl_fail(e, "%s: embedding_length %zu is not a multiple of head_count %zu",
                       fname(m), c->n_embd, c->n_head);
    c->head_dim = c->n_embd / c->n_head;
    if (get_size(m, "attention.key_length", &c->head_dim, false, e) < 0) return -1;
    size_t vdim = c->head_dim;
    if (get_size(m, "attention.value_length", &vdim, false, e) < 0) return -1;
    if (vdim != c->head_dim)
        return rl_fail(e, "%s: value_length %zu != key_length %zu is not supported", fname(m),
                       vdim, c->head_dim);
    if (c->n_head % c->n_head_kv)
        return rl_fail(e, "%s: head_count %zu is not a multiple of head_count_kv %zu", fname(m),
                       c->n_head, c->n_head_kv);
    c->rope_dim = c->head_dim;
    if (get_size(m, "rope.dimension_count", &c->rope_dim, false, e) < 0) return -1;
    if (c->rope_dim > c->head_dim || c->rope_dim % 2)
        return rl_fail(e, "%s: rope.dimension_count %zu must be even and <= head dim %zu",
                       fname(m), c->rope_dim, c->head_dim);
    if (c->head_dim % 2 || c->head_dim > 1024)
        return rl_fail(e, "%s: head dim %zu is not supported (even, <= 1024)", fname(m),
                       c->head_dim);
    c->rope_base = 10000.0f;
    if (get_float(m, "rope.freq_base", &c->rope_base, e) < 0) return -1;
    c->norm_eps = 1e-5f;
    if (get_float(m, "attention.layer_norm_rms_epsilon", &c->norm_eps, e) < 0) return -1;
    if (!(c->rope_base > 0) || !(c->norm_eps >= 0))
        return rl_fail(e, "%s: rope.freq_base %g / rms epsilon %g out of range", fname(m),
                       c->rope_base, c->norm_eps);

    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", c->arch_name);
    gguf_str st;
    r = gguf_get_str(&m->file, key, &st, e);
    if (r < 0) return -1;
    if (r == 1 && !gguf_str_eq(st, "none")) {
        /* llama3 scaling arrives as the rope_freqs tensor; other schemes change the math. */
        return rl_fail(e, "%s: rope scaling type '%.*s' is not supported (only none, and "
                       "llama3 factors through rope_freqs.weight)", fname(m),
                       (int)(st.len > 32 ? 32 : st.len), st.ptr);
    }
    return 0;
}

/* Finds a tensor and checks it is a matrix ne = {cols, rows} of a computable type. */
static int bind_matrix(rl_model *m, rl_matrix *out, const char *name, size_t rows, size_t cols,
                       bool optional, rl_err *e) {
    const gguf_tensor *t = gguf_find_tensor(&m->file, name);
    memset(out, 0, sizeof *out);
    if (!t) {
        if (optional) return 0;
        return rl_fail(e, "%s: missing tensor '%s'", fname(m), name);
    }
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
        return rl_fail(e, "%s: tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%zu, %zu]",
                       fname(m), name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                       (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], cols, rows);
    if (!rl_type_computable(t->type)) {
        char list[160];
        rl_type_computable_names(list, sizeof list, ", ");
        return rl_fail(e, "%s: tensor '%s' has type %s (id %u), which rawloop cannot compute with "
                       "(supported: %s)", fname(m), name, rl_type_name(t->type), t->type, list);
    }
    out->type = t->type;
    out->data = t->data;
    out->rows = rows;
    out->cols = cols;
    out->row_bytes = rl_row_bytes(t->type, cols);
    if (out->row_bytes == 0 || out->row_bytes * rows != t->nbytes)
        return rl_fail(e, "%s: tensor '%s' of type %s: %zu columns do not fill whole blocks",
                       fname(m), name, rl_type_name(t->type), cols);
    return 1;
}

/* Binds a 1-D tensor of n values as an owned fp32 copy. */
static int bind_vec(binder *b, const float **out, const char *name, size_t n, bool optional,
                    rl_err *e) {
    rl_model *m = b->m;
    const gguf_tensor *t = gguf_find_tensor(&m->file, name);
    *out = NULL;
    if (!t) {
        if (optional) return 0;
        return rl_fail(e, "%s: missing tensor '%s'", fname(m), name);
    }
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return rl_fail(e, "%s: tensor '%s' has shape [%llu, %llu], expected [%zu]", fname(m), name,
                       (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], n);
    if (!rl_type_computable(t->type) || rl_row_bytes(t->type, n) == 0)
        return rl_fail(e, "%s: tensor '%s' has type %s (id %u), not usable for a vector",
                       fname(m), name, rl_type_name(t->type), t->type);
    if ((size_t)(b->store_end - b->store) < n)
        return rl_fail(e, "%s: internal: vector store exhausted at '%s'", fname(m), name);
    rl_dequant_row(t->type, t->data, b->store, n);
    *out = b->store;
    b->store += n;
    return 1;
}

static int bind_weights(rl_model *m, rl_err *e) {
    rl_config *c = &m->cfg;
    size_t qd = c->n_head * c->head_dim, kvd = c->n_head_kv * c->head_dim;

    const gguf_tensor *te = gguf_find_tensor(&m->file, "token_embd.weight");
    if (!te) return rl_fail(e, "%s: missing tensor 'token_embd.weight'", fname(m));
    c->n_vocab = (size_t)te->ne[1];
    if (bind_matrix(m, &m->tok_embd, "token_embd.weight", c->n_vocab, c->n_embd, false, e) < 0)
        return -1;
    int r = bind_matrix(m, &m->output, "output.weight", c->n_vocab, c->n_embd, true, e);
    if (r < 0) return -1;
    m->tied_output = r == 0;
    if (m->tied_output) m->output = m->tok_embd;

    size_t per_layer = 2 * c->n_embd + (c->qkv_bias ? qd + 2 * kvd : 0) +
                       (c->qk_norm ? 2 * c->head_dim : 0);
    size_t total = per_layer * c->n_layer + c->n_embd + c->rope_dim / 2;
    m->f32_store = malloc(total * sizeof(float));
    m->layers = calloc(c->n_layer, sizeof *m->layers);
    if (!m->f32_store || !m->layers) return rl_fail(e, "%s: out of memory", fname(m));
    binder b = {m, m->f32_store, m->f32_store + total};

    if (bind_vec(&b, &m->output_norm, "output_norm.weight", c->n_embd, false, e) < 0) return -1;
    r = bind_vec(&b, &m->rope_freqs, "rope_freqs.weight", c->rope_dim / 2, true, e);
    if (r < 0) return -1;
    for (size_t i = 0; i < c->rope_dim / 2 && m->rope_freqs; i++)
        if (!(m->rope_freqs[i] > 0))
            return rl_fail(e, "%s: rope_freqs.weight[%zu] = %g must be positive", fname(m), i,
                           m->rope_freqs[i]);

    char name[96];
#define NAME(s) (snprintf(name, sizeof name, "blk.%zu." s, l), name)
    for (size_t l = 0; l < c->n_layer; l++) {
        rl_layer *L = &m->layers[l];
        if (bind_vec(&b, &L->attn_norm, NAME("attn_norm.weight"), c->n_embd, false, e) < 0 ||
            bind_vec(&b, &L->ffn_norm, NAME("ffn_norm.weight"), c->n_embd, false, e) < 0 ||
            bind_matrix(m, &L->wq, NAME("attn_q.weight"), qd, c->n_embd, false, e) < 0 ||
            bind_matrix(m, &L->wk, NAME("attn_k.weight"), kvd, c->n_embd, false, e) < 0 ||
            bind_matrix(m, &L->wv, NAME("attn_v.weight"), kvd, c->n_embd, false, e) < 0 ||
            bind_matrix(m, &L->wo, NAME("attn_output.weight"), c->n_embd, qd, false, e) < 0 ||
            bind_matrix(m, &L->w_gate, NAME("ffn_gate.weight"), c->n_ff, c->n_embd, false, e) < 0 ||
            bind_matrix(m, &L->w_up, NAME("ffn_up.weight"), c->n_ff, c->n_embd, false, e) < 0 ||
            bind_matrix(m, &L->w_down, NAME("ffn_down.weight"), c->n_embd, c->n_ff, false, e) < 0)
            return -1;
        if (c->qkv_bias &&
            (bind_vec(&b, &L->bq, NAME("attn_q.bias"), qd, false, e) < 0 ||
             bind_vec(&b, &L->bk, NAME("attn_k.bias"), kvd, false, e) < 0 ||
             bind_vec(&b, &L->bv, NAME("attn_v.bias"), kvd, false, e) < 0))
            return -1;
        if (c->qk_norm &&
            (bind_vec(&b, &L->q_norm, NAME("attn_q_norm.weight"), c->head_dim, false, e) < 0 ||
             bind_vec(&b, &L->k_norm, NAME("attn_k_norm.weight"), c->head_dim, false, e) < 0))
            return -1;
    }
#undef NAME
    return 0;
}

int rl_model_load(rl_model *m, const char *path, rl_err *e) {
    memset(m, 0, sizeof *m);
    if (gguf_open(&m->file, path, e) < 0) return -1;
    if (load_config(m, e) < 0 || bind_weights(m, e) < 0) goto fail;
    if (rl_tok_load(&m->tok, &m->file, e) < 0) {
        rl_wrap(e, "%s: tokenizer: ", fname(m));
        goto fail;
    }
    if (rl_tok_n_vocab(m->tok) > m->cfg.n_vocab) {
        rl_fail(e, "%s: tokenizer has %zu tokens but token_embd.weight has only %zu rows",
                fname(m), rl_tok_n_vocab(m->tok), m->cfg.n_vocab);
        goto fail;
    }
    /* The most common matrix type by bytes names the file ("Q4_0"); ggml's ids and rawloop's
     * own (from RL_RAWLOOP_TYPE_BASE) share one tally, rawloop's after ggml's. */
    enum { N_OWN = RL_RAWLOOP_TYPE_END - RL_RAWLOOP_TYPE_BASE };
    size_t by_type[RL_TYPE_COUNT + N_OWN] = {0};
    for (size_t i = 0; i < m->file.n_tensors; i++) {
        const gguf_tensor *t = &m->file.tensors[i];
        m->file_weight_bytes += t->nbytes;
        if (t->ne[1] <= 1) continue;
        if (t->type < RL_TYPE_COUNT) by_type[t->type] += t->nbytes;
        else if (t->type >= RL_RAWLOOP_TYPE_BASE && t->type < RL_RAWLOOP_TYPE_END)
            by_type[RL_TYPE_COUNT + (t->type - RL_RAWLOOP_TYPE_BASE)] += t->nbytes;
    }
    size_t best = m->main_type;
    for (uint32_t i = 0; i < RL_TYPE_COUNT + N_OWN; i++)
        if (by_type[i] > by_type[best]) best = i;
    m->main_type = best < RL_TYPE_COUNT ? (uint32_t)best : (uint32_t)(RL_RAWLOOP_TYPE_BASE + best - RL_TYPE_COUNT);
    return 0;
fail:
    rl_model_free(m);
    return -1;
}

void rl_model_free(rl_model *m) {
    rl_tok_free(m->tok);
    free(m->layers);
    free(m->f32_store);
    gguf_close(&m->file);
    memset(m, 0, sizeof *m);
}

size_t rl_model_bytes_per_token(const rl_model *m) {
    const rl_config *c = &m->cfg;
    size_t b = m->tok_embd.row_bytes + rl_matrix_bytes(&m->output) + c->n_embd * sizeof(float);
    for (size_t l = 0; l < c->n_layer; l++) {
        const rl_layer *L = &m->layers[l];
        b += rl_matrix_bytes(&L->wq) + rl_matrix_bytes(&L->wk) + rl_matrix_bytes(&L->wv) +
             rl_matrix_bytes(&L->wo) + rl_matrix_bytes(&L->w_gate) + rl_matrix_bytes(&L->w_up) +
             rl_matrix_bytes(&L->w_down) + 2 * c->n_embd * sizeof(float);
    }
    return b;
}

size_t rl_model_n_params(const rl_model *m) {
    size_t n = 0;
    for (size_t i = 0; i < m->file.n_tensors; i++) {
        const gguf_tensor *t = &m->file.tensors[i];
        n += (size_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    return n;
}

const char *rl_model_type_name(const rl_model *m) { return rl_type_name(m->main_type); }

void rl_model_describe(const rl_model *m, char *buf, size_t cap) {
    const rl_config *c = &m->cfg;
    snprintf(buf, cap, "%s %zuL %zud %zu/%zu heads %s (%.2f B params, %.2f GB)", c->arch_name,
             c->n_layer, c->n_embd, c->n_head, c->n_head_kv, rl_model_type_name(m),
             rl_model_n_params(m) / 1e9, m->file_weight_bytes / 1e9);
}
