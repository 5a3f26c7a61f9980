/* rawloop quantize: rewrites an F32/F16/BF16 GGUF, or converts a Hugging Face model directory
 * (safetensors shards, config.json, tokenizer; src/hf.h; FP8 checkpoints included), in one of
 * the standard ggml types, rawloop's own RQ2 / RQ4 / FP8, or a per-tensor mix from a recipe file.
 *
 * Streams tensor by tensor: the input is memory-mapped, each output tensor is built in one
 * buffer (the largest output tensor is the peak extra memory) by all threads over rows, each
 * row decoded to float32 in a per-thread row buffer (an FP8 checkpoint's rows too), and
 * written before the next is started. The writer goes to OUT.tmp and renames at the end, so an
 * error or a kill never leaves a half-written OUT. Tensor types come from src/recipe.h. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cpu.h"
#include "gguf.h"
#include "hf.h"
#include "model.h"
#include "pool.h"
#include "quant.h"
#include "recipe.h"
#include "types.h"

static void usage(FILE *out) {
    fprintf(out,
        "usage: rawloop quantize [--help] IN OUT (--type T | --recipe FILE) [-t N] [--pure] [--slice-kb N]\n"
        "       [--calib TEXT [--calib-chunks N] [--calib-out FILE]]\n"
        "Writes IN's model to OUT (GGUF) with its matrices in type T or in the types a recipe\n"
        "file gives (1-D tensors stay F32).\n"
        "IN is either a GGUF whose matrices are F32, F16 or BF16 (a matrix already in the type\n"
        "the recipe chooses is copied as is), or a Hugging Face model directory: config.json,\n"
        "*.safetensors (F32/F16/BF16, or FP8: F8_E4M3 weights with weight_scale_inv block\n"
        "scales, quantization_config quant_method fp8, dequantized on the fly; shards via\n"
        "model.safetensors.index.json), tokenizer.json\n"
        "(byte-level BPE) or tokenizer.model (SentencePiece), optional tokenizer_config.json;\n"
        "architectures llama (llama3 rope scaling included), qwen2, qwen3. Tensors, keys and\n"
        "the Q/K row order come out as llama.cpp's convert_hf_to_gguf.py writes them.\n"
        "  --type T   one of:");
    for (size_t i = 0; rl_ftype_at(i); i++) fprintf(out, " %s", rl_ftype_at(i)->name);
    for (size_t i = 0; rl_ftype_rawloop_at(i); i++) fprintf(out, " %s", rl_ftype_rawloop_at(i)->name);
    fprintf(out,
        "\n"
        "             Output head Q6_K in every quantized type (Q8_0 if its rows do not fit the\n"
        "             type's block; Q8_0 files keep Q8_0); attn_v/ffn_down of some layers Q6_K\n"
        "             for Q4_K_M/Q5_K_M, attn_v of layers 0-3 and ffn_down of the first eighth\n"
        "             Q5_K for Q4_K_S (llama.cpp's recipes; Q5_K_S is Q5_K with that head; Q4_K\n"
        "             and Q5_K have no bumps). Rows no block fits fall back as\n"
        "             llama.cpp's: Q4_K->Q5_0, Q5_K->Q5_1, Q6_K->Q8_0, else F16.\n"
        "             docs/FORMATS.md has the rules.\n"
        "             RQ2: rawloop's 2-bit type (64-value blocks, 2.5 bits per weight; only\n"
        "             rawloop reads it), token_embd.weight in Q8_0 unless --pure\n"
        "             FP8: rawloop's 8-bit float type (e4m3 codes, a bf16 scale per 32\n"
        "             values, 8.5 bits per weight; only rawloop reads it), every matrix\n"
        "             RQ4: rawloop's 4-bit type (64-value blocks of codes 0..15 with a\n"
        "             searched step and minimum, 4.5 bits per weight; only rawloop reads it),\n"
        "             with the output head rule above\n"
        "  --recipe FILE  per-tensor types: lines 'PATTERN TYPE', first match wins; PATTERN a\n"
        "             glob over the tensor name ('*' any run, '?' one character), e.g.\n"
        "               blk.*.ffn_gate.weight RQ2\n"
        "               blk.*.attn_*.weight   Q8_0\n"
        "               *                     Q4_K\n"
        "             TYPE one of:");
    for (size_t i = 0; rl_type_computable_at(i) != UINT32_MAX; i++)
        fprintf(out, " %s", rl_type_name(rl_type_computable_at(i)));
    fprintf(out,
        "\n"
        "             ('#' starts a comment). A matrix no rule matches is an error; the row\n"
        "             fallback above applies (noted in the output)\n"
        "  --calib TEXT  calibration (GGUF input only): runs IN on the text (chunks of 512\n"
        "             tokens, fp32 CPU path) and weights each weight's error by the mean square\n"
        "             of the activation it multiplies (per input column, plus a uniform part)\n"
        "             in the quantizers that search: Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K / Q5_K /\n"
        "             Q6_K (llama.cpp's imatrix quantizers), RQ2 and RQ4. Q8_0 and FP8 ignore the\n"
        "             weights (noted); Q4_0 / Q5_0 also put ffn_down of the first eighth of the\n"
        "             layers in Q4_1 / Q5_1, as llama.cpp does with an imatrix\n"
        "  --calib-chunks N  use the first N chunks of TEXT (default 8)\n"
        "  --calib-out FILE  also write the importances each weighted matrix gets as a\n"
        "             llama.cpp imatrix file (legacy format, ncall 1), so that\n"
        "             llama-quantize --imatrix FILE weights the same matrices with the same\n"
        "             numbers (the blocks then match for Q4_0 / Q5_0 / Q4_1 / Q5_1 / Q4_K /\n"
        "             Q5_K / Q6_K: docs/FORMATS.md)\n"
        "  --pure     every matrix in the base type (no head rule, _M/_S bumps or --calib\n"
        "             ffn_down rule; RQ2's token_embd too)\n"
        "  -t N       threads (default: all CPUs)\n"
        "  --slice-kb N  build each output tensor in slices of at most N KiB (default 262144,\n"
        "             i.e. 256 MiB): the memory beyond the mapped input, whatever the model\n");
}

/* One input tensor, from a GGUF file or a Hugging Face directory. */
typedef struct src_tensor {
    char name[256];
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint32_t type;       /* ggml type of the stored rows */
    const uint8_t *data;
    size_t nbytes;
    size_t perm_heads;   /* > 0: rows stored in another order (hf_src_row) */
    const hf_tensor *hf; /* a directory's tensor, whose rows hf_read_row decodes; NULL for a
                            GGUF's (rl_dequant_row) */
} src_tensor;

/* One slice [r0, r0 + n) of a tensor's rows, split over threads by rows; out holds the slice. */
typedef struct qjob {
    const src_tensor *t;
    uint32_t dst_type;
    size_t cols, rows, src_row_bytes, dst_row_bytes;
    size_t r0, n;
    uint8_t *out;
    float *scratch; /* cols floats per thread */
    const float *w; /* [cols] importances of the input columns, or NULL */
    size_t *bad_at; /* [nth]: stored index (row * cols + col) of the first value a thread met that
                       no weight may have (an FP8 NaN code, or a NaN or infinity in the decoded
                       row), where it stopped; SIZE_MAX none */
    bool scan_only; /* a tensor copied as it is: its rows are decoded and checked, not written */
} qjob;

static void q_worker(void *ctx, size_t ith, size_t nth) {
    qjob *j = ctx;
    float *row = j->scratch + ith * j->cols;
    j->bad_at[ith] = SIZE_MAX;
    for (size_t i = j->n * ith / nth; i < j->n * (ith + 1) / nth; i++) {
        size_t r = j->r0 + i, sr = hf_src_row(r, j->rows, j->t->perm_heads);
        size_t c = SIZE_MAX;
        if (!j->t->hf) rl_dequant_row_fast(j->t->type, j->t->data + sr * j->src_row_bytes, row, j->cols);
        else c = hf_read_row(j->t->hf, sr, row);
        if (c == SIZE_MAX) c = rl_first_nonfinite(row, j->cols);
        if (c != SIZE_MAX) {
            j->bad_at[ith] = sr * j->cols + c;
            return;
        }
        if (!j->scan_only) rl_quant_row_fast(j->dst_type, row, j->out + i * j->dst_row_bytes, j->cols, j->w);
    }
}

/* The error for stored element `bad` of t, which q_worker stopped at: an FP8 NaN code, or a
 * decoded NaN or infinity (the rounding of either to an integer code is undefined, and no model
 * has one; llama-quantize stops where a quantized row's scales come out NaN or infinite).
 * row: scratch for one decoded row. */
static void report_nonfinite(const char *inp, const src_tensor *t, size_t cols, size_t bad, float *row, bool copied,
                             rl_err *e) {
    const size_t r = bad / cols, c = bad % cols;
    const char *name = t->hf ? t->hf->src : t->name;
    if (t->hf && hf_read_row(t->hf, r, row) == c) {
        rl_fail(e, "%s: tensor '%s' holds e4m3 code 0x%02x at [%zu, %zu]: a NaN (F8_E4M3 codes 0x7f and 0xff), "
                   "which no finite weight has", inp, name, t->data[bad], r, c);
        return;
    }
    if (!t->hf) rl_dequant_row_fast(t->type, t->data + r * rl_row_bytes(t->type, cols), row, cols);
    rl_fail(e, "%s: tensor '%s' holds %s at [%zu, %zu]: a weight must be finite%s", inp, name,
            isnan(row[c]) ? "a NaN" : row[c] > 0 ? "+infinity" : "-infinity", r, c, copied ? "" : " to be quantized");
}

/* Runs j on the pool's nth threads: -1 with e set where one met a value no weight may have. */
static int run_qjob(rl_pool *pool, qjob *j, size_t nth, const char *inp, rl_err *e) {
    rl_pool_run(pool, q_worker, j);
    size_t bad = SIZE_MAX;
    for (size_t k = 0; k < nth; k++) bad = j->bad_at[k] < bad ? j->bad_at[k] : bad;
    if (bad == SIZE_MAX) return 0;
    report_nonfinite(inp, j->t, j->cols, bad, j->scratch, j->scan_only, e);
    return -1;
}

/* Output tensors are built and written in slices of at most this many bytes (--slice-kb), so
 * the memory beyond the mapped input stays bounded whatever the largest tensor (a 70B model's
 * F32 head is 4.2 GB). */
static size_t g_slice_bytes = (size_t)256 << 20;
#define SLICE_BYTES g_slice_bytes

/* The input as a list of src_tensors and its kvs in w: a GGUF's copied (file_type and
 * quantization_version set to the output's), a directory's made by hf_write_kvs. */
static int open_input(const char *inp, bool is_hf, gguf_file *f, hf_model *h, src_tensor **out,
                      size_t *n, size_t *n_layer, bool *is_70b, gguf_writer *w, const rl_ftype *ft,
                      rl_err *e);

/* Slot of an output type in the per-type tallies (output types are always computable). */
static size_t type_slot(uint32_t t) {
    size_t i = 0;
    while (rl_type_computable_at(i) != UINT32_MAX && rl_type_computable_at(i) != t) i++;
    return i;
}
#define N_SLOTS 16 /* more than the computable types */

/* n_layer from {arch}.block_count, else one more than the largest blk.N in the tensor names;
 * and whether llama.cpp would quantize the model as its 70B type (rl_recipe_is_70b, from the
 * attention.head_count(_kv) keys; a file without an architecture is not). */
static int model_layers(const gguf_file *f, size_t *n_layer, bool *is_70b, rl_err *e) {
    gguf_str arch;
    uint32_t n = 0, nh = 0, nkv = 0;
    char a[64] = "", key[128];
    if (gguf_get_str(f, "general.architecture", &arch, e) == 1) {
        snprintf(a, sizeof a, "%.*s", (int)(arch.len < 63 ? arch.len : 63), arch.ptr);
        snprintf(key, sizeof key, "%s.block_count", a);
        if (gguf_get_u32(f, key, &n, e) < 0) return -1;
        snprintf(key, sizeof key, "%s.attention.head_count", a);
        if (gguf_get_u32(f, key, &nh, e) < 0) return -1;
        nkv = nh; /* llama.cpp's default when head_count_kv is absent */
        snprintf(key, sizeof key, "%s.attention.head_count_kv", a);
        if (gguf_get_u32(f, key, &nkv, e) < 0) return -1;
    }
    size_t max = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const gguf_str *nm = &f->tensors[i].name;
        if (nm->len < 5 || memcmp(nm->ptr, "blk.", 4)) continue;
        size_t l = 0, k = 4;
        while (k < nm->len && k < 14 && nm->ptr[k] >= '0' && nm->ptr[k] <= '9')
            l = l * 10 + (size_t)(nm->ptr[k++] - '0');
        if (k > 4 && l + 1 > max) max = l + 1;
    }
    *n_layer = n ? n : max;
    *is_70b = rl_recipe_is_70b(a, *n_layer, nh, nkv);
    return 0;
}

/* Calibration (--calib): for every matmul input of the forward pass, numbered as the CPU
 * backend's observe hook numbers them, the per-column mean of x_j^2 over the calibration
 * tokens. A weight that multiplies a large activation matters more to the output, so the
 * quantizers weight its error by this (the imatrix idea; calib_run adds a uniform part). */
typedef struct calib {
    size_t n_mat;     /* 7 * n_layer + 1 (the hook's numbering) */
    size_t n_layer;
    bool tied;        /* the output head is token_embd */
    size_t *cols;     /* [n_mat] input width, 0 = never observed */
    size_t *count;    /* [n_mat] tokens observed */
    double **sum;     /* [n_mat][cols] sums of x_j^2 */
    float **imp;      /* [n_mat][cols] sum / count, made by calib_run at the end */
    bool oom;
} calib;

static void calib_observe(void *ctx, size_t mat, const float *x, size_t S, size_t n) {
    calib *cb = ctx;
    if (mat >= cb->n_mat || cb->oom) return;
    if (!cb->sum[mat]) {
        if (!(cb->sum[mat] = calloc(n ? n : 1, sizeof(double)))) {
            cb->oom = true;
            return;
        }
        cb->cols[mat] = n;
    }
    if (cb->cols[mat] != n) return; /* one matrix always has one width */
    double *acc = cb->sum[mat];
    for (size_t s = 0; s < S; s++)
        for (size_t j = 0; j < n; j++) acc[j] += (double)x[s * n + j] * x[s * n + j];
    cb->count[mat] += S;
}

static void calib_free(calib *cb) {
    for (size_t i = 0; cb->sum && i < cb->n_mat; i++) free(cb->sum[i]);
    for (size_t i = 0; cb->imp && i < cb->n_mat; i++) free(cb->imp[i]);
    free(cb->sum);
    free(cb->imp);
    free(cb->cols);
    free(cb->count);
    memset(cb, 0, sizeof *cb);
}

#define CALIB_CTX 512

/* Runs the model in path over up to max_chunks chunks of CALIB_CTX tokens of the text (BOS
 * first in each chunk when the model adds one, as perplexity does) on the exact fp32 CPU path
 * and fills cb. Fails when the text is shorter than one chunk. */
static int calib_run(calib *cb, const char *model_path, const char *text_path, size_t max_chunks,
                     size_t nth, size_t *n_chunks, rl_err *e) {
    char *text = NULL;
    size_t len = 0;
    int32_t *all = NULL;
    float *logits = NULL;
    rl_model m = {0};
    rl_cpu *cpu = NULL;
    int rc = -1;
    FILE *tf = fopen(text_path, "rb");
    if (!tf) {
        rl_fail(e, "--calib: cannot open %s: %s", text_path, strerror(errno));
        goto out;
    }
    fclose(tf);
    if (cli_read_file(text_path, &text, &len)) {
        rl_fail(e, "--calib: cannot read %s", text_path);
        goto out;
    }
    if (rl_model_load(&m, model_path, e) < 0) goto out;
    bool add_bos;
    size_t n_all;
    if (cli_token_stream(m.tok, text, len, &all, &n_all, &add_bos, e) < 0) goto out;
    *n_chunks = n_all / CALIB_CTX;
    if (*n_chunks == 0) {
        rl_fail(e, "--calib: %s has %zu tokens; calibration needs at least one chunk of %d",
                text_path, n_all, CALIB_CTX);
        goto out;
    }
    if (*n_chunks > max_chunks) *n_chunks = max_chunks;
    cb->n_layer = m.cfg.n_layer;
    cb->n_mat = RL_CPU_MAT_OUTPUT(m.cfg.n_layer) + 1;
    cb->tied = m.tied_output;
    cb->cols = calloc(cb->n_mat, sizeof *cb->cols);
    cb->count = calloc(cb->n_mat, sizeof *cb->count);
    cb->sum = calloc(cb->n_mat, sizeof *cb->sum);
    cb->imp = calloc(cb->n_mat, sizeof *cb->imp);
    size_t batch = 64;
    logits = malloc(batch * m.cfg.n_vocab * sizeof(float));
    if (!cb->cols || !cb->count || !cb->sum || !cb->imp || !logits) {
        rl_fail(e, "out of memory");
        goto out;
    }
    rl_cpu_opts co = {.n_threads = nth, .n_ctx = CALIB_CTX, .max_batch = batch, .exact = true,
                      .observe = calib_observe, .observe_ctx = cb};
    if (rl_cpu_new(&cpu, &m, &co, e) < 0) goto out;
    for (size_t ch = 0; ch < *n_chunks; ch++) {
        int32_t *t = all + ch * CALIB_CTX;
        if (add_bos) t[0] = rl_tok_bos(m.tok);
        /* all logits, so that the head's input is observed at every position */
        for (size_t p = 0; p < CALIB_CTX; p += batch)
            if (rl_cpu_forward(cpu, t + p, batch, p, logits, true, e) < 0) goto out;
        if (cb->oom) {
            rl_fail(e, "out of memory");
            goto out;
        }
    }
    for (size_t i = 0; i < cb->n_mat; i++) {
        if (!cb->sum[i] || !cb->count[i]) continue;
        if (!(cb->imp[i] = malloc(cb->cols[i] * sizeof(float)))) {
            rl_fail(e, "out of memory");
            goto out;
        }
        /* w_j = E[x_j^2] + its mean over the columns: the diagonal estimate alone (imatrix)
         * made held-out KLD of RQ2 worse on rawloop-small (0.147 vs 0.146 unweighted, 8
         * chunks); half-uniform weights made it better (0.141); sqrt(E[x_j^2]) gave 0.142 */
        double mean = 0;
        for (size_t j = 0; j < cb->cols[i]; j++) mean += cb->sum[i][j];
        mean /= (double)cb->count[i] * (double)cb->cols[i];
        for (size_t j = 0; j < cb->cols[i]; j++)
            cb->imp[i][j] = (float)(cb->sum[i][j] / (double)cb->count[i] + mean);
    }
    rc = 0;
out:
    rl_cpu_free(cpu);
    rl_model_free(&m);
    free(logits);
    free(all);
    free(text);
    return rc;
}

/* The importances for a tensor's input columns, or NULL (not a matmul weight the forward pass
 * multiplies, e.g. an untied token_embd, whose rows are gathered). */
static const float *calib_weights(const calib *cb, const char *name, size_t cols) {
    size_t mat = SIZE_MAX, l = 0;
    int k = -1;
    if (!cb->imp) return NULL;
    if (!strcmp(name, "output.weight") || (cb->tied && !strcmp(name, "token_embd.weight"))) {
        mat = RL_CPU_MAT_OUTPUT(cb->n_layer);
    } else if (sscanf(name, "blk.%zu.%n", &l, &k) == 1 && k > 0 && l < cb->n_layer) {
        static const char *const names[] = {"attn_q.weight", "attn_k.weight", "attn_v.weight",
                                            "attn_output.weight", "ffn_gate.weight",
                                            "ffn_up.weight", "ffn_down.weight"};
        static const size_t slot[] = {0, 0, 0, 3, 4, 4, 6}; /* shared inputs: see the hook */
        for (size_t i = 0; i < 7; i++)
            if (!strcmp(name + k, names[i])) mat = RL_CPU_MAT(l, slot[i]);
    }
    if (mat >= cb->n_mat || cb->cols[mat] != cols) return NULL;
    return cb->imp[mat];
}

/* --calib-out FILE: writes the importances every weighted tensor gets as a llama.cpp legacy
 * imatrix (int32 entry count; per entry int32 name length, name, int32 ncall, int32 count,
 * float values; llama-quantize divides by ncall, here 1, so it reads back these exact floats).
 * Only tensors whose type uses them are written, so that llama-quantize weights the same
 * tensors rawloop does; docs/FORMATS.md (rule 4) compares the two files. A file that could not
 * be written whole is removed. */
static int calib_save_imatrix(const calib *cb, const src_tensor *src, const uint32_t *types,
                              size_t n_src, const char *path, rl_err *e) {
    FILE *f = fopen(path, "wb");
    if (!f) return rl_fail(e, "--calib-out: cannot create %s: %s", path, strerror(errno));
    int32_t n = 0;
    bool ok = fwrite(&n, sizeof n, 1, f) == 1;
    for (size_t i = 0; i < n_src && ok; i++) {
        size_t cols = (size_t)src[i].ne[0];
        const float *w = calib_weights(cb, src[i].name, cols);
        if (!w || types[i] == src[i].type || !rl_quant_uses_weights(types[i])) continue;
        int32_t hdr[3] = {(int32_t)strlen(src[i].name), 1, (int32_t)cols};
        ok = fwrite(&hdr[0], sizeof *hdr, 1, f) == 1 && fwrite(src[i].name, 1, (size_t)hdr[0], f) == (size_t)hdr[0] &&
             fwrite(&hdr[1], sizeof *hdr, 2, f) == 2 && fwrite(w, sizeof *w, cols, f) == cols;
        n++;
    }
    ok = ok && fseek(f, 0, SEEK_SET) == 0 && fwrite(&n, sizeof n, 1, f) == 1;
    if (fclose(f) != 0 || !ok) {
        remove(path);
        return rl_fail(e, "--calib-out: cannot write %s", path);
    }
    return 0;
}

/* Same file (by device and inode) when both exist. */
static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) || stat(b, &sb)) return false;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int cmd_quantize(int argc, char **argv) {
    static const struct option opts[] = {{"type", 1, 0, 'T'}, {"threads", 1, 0, 't'},
                                         {"pure", 0, 0, 'P'}, {"recipe", 1, 0, 'R'},
                                         {"slice-kb", 1, 0, 'S'}, {"calib", 1, 0, 'C'},
                                         {"calib-chunks", 1, 0, 'N'}, {"calib-out", 1, 0, 'I'},
                                         {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *type_name = NULL, *recipe_path = NULL, *calib_path = NULL, *calib_out = NULL;
    long threads = 0, slice_kb = 256 * 1024, calib_chunks = -1;
    bool pure = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'T': type_name = optarg; break;
        case 'R': recipe_path = optarg; break;
        case 't': if (cli_parse_long("-t", optarg, 1, 1024, &threads)) return 2; break;
        case 'P': pure = true; break;
        case 'S': if (cli_parse_long("--slice-kb", optarg, 1, 1L << 30, &slice_kb)) return 2; break;
        case 'C': calib_path = optarg; break;
        case 'N': if (cli_parse_long("--calib-chunks", optarg, 1, 1L << 30, &calib_chunks)) return 2; break;
        case 'I': calib_out = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!type_name == !recipe_path || argc - optind != 2) {
        if (type_name && recipe_path) fprintf(stderr, "rawloop quantize: give --type or --recipe, not both\n");
        usage(stderr);
        return 2;
    }
    if (recipe_path && pure) {
        fprintf(stderr, "rawloop quantize: --pure applies to --type only\n");
        usage(stderr);
        return 2;
    }
    if ((calib_chunks > 0 || calib_out) && !calib_path) {
        fprintf(stderr, "rawloop quantize: %s needs --calib\n", calib_out ? "--calib-out" : "--calib-chunks");
        usage(stderr);
        return 2;
    }
    const char *inp = argv[optind], *outp = argv[optind + 1];
    if (calib_out && (!strcmp(calib_out, inp) || !strcmp(calib_out, outp) || same_file(calib_out, inp))) {
        fprintf(stderr, "rawloop quantize: --calib-out names IN or OUT (%s)\n", calib_out);
        return 2;
    }
    g_slice_bytes = (size_t)slice_kb << 10;
    const rl_ftype *ft = type_name ? rl_ftype_find(type_name) : NULL;
    if (type_name && !ft) {
        fprintf(stderr, "rawloop quantize: unknown type '%s'\n", type_name);
        usage(stderr);
        return 2;
    }
    if (!strcmp(inp, outp) || same_file(inp, outp)) {
        fprintf(stderr, "rawloop: quantize: OUT is the same file as IN (%s)\n", inp);
        return 1;
    }

    rl_err e = {{0}};
    rl_recipe_rules rules = {0};
    rl_ftype recipe_ft = {"recipe", RL_F16, RL_MIX_NONE, 1}; /* only names the file type */
    if (recipe_path) {
        if (rl_recipe_load(&rules, recipe_path, &e) < 0) {
            fprintf(stderr, "rawloop: quantize: %s\n", e.msg);
            return 1;
        }
        recipe_ft.file_type = rl_recipe_file_type(&rules);
        ft = &recipe_ft;
    }
    gguf_file f = {0};
    hf_model h = {0};
    src_tensor *src = NULL;
    size_t n_src = 0;
    gguf_writer *w = NULL;
    rl_pool *pool = NULL;
    uint32_t *types = NULL;
    uint8_t *buf = NULL;
    float *scratch = NULL;
    size_t *bad_at = NULL;
    int rc = 1;
    size_t n_layer = 0;
    bool is_70b = false;
    bool mid_line = false; /* the progress line is open: an error starts a new one */
    /* a GGUF's own alignment is kept; converted files get the default */
    struct stat sb;
    bool is_hf = stat(inp, &sb) == 0 && S_ISDIR(sb.st_mode); /* a directory: Hugging Face */
    calib cb = {0};
    if (is_hf && calib_path) {
        rl_fail(&e, "--calib needs a GGUF input, and %s is a Hugging Face directory: convert it "
                    "first (rawloop quantize %s model-f16.gguf --type F16), then quantize that "
                    "file with --calib", inp, inp);
        goto fail;
    }
    if (!is_hf) {
        if (gguf_open(&f, inp, &e) < 0) goto fail;
        w = gguf_writer_new(f.alignment);
    } else {
        w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    }
    if (!w) goto oom;
    if (open_input(inp, is_hf, &f, &h, &src, &n_src, &n_layer, &is_70b, w, ft, &e) < 0) goto fail;
    if (h.warning[0]) fprintf(stderr, "rawloop quantize: warning: %s\n", h.warning);
    bool has_output = false;
    for (size_t i = 0; i < n_src; i++) has_output |= !strcmp(src[i].name, "output.weight");
    rl_recipe_ctx rctx = {ft, n_layer, has_output, pure, calib_path != NULL, is_70b};
    types = calloc(n_src ? n_src : 1, sizeof *types);
    if (!types) goto oom;

    /* choose every type first, so that a refused tensor stops us before anything is written;
     * row-length fallbacks are tallied per (wanted, written) pair for one note each */
    size_t max_out = 0, max_cols = 0, bytes_in = 0, bytes_out = 0, elems = 0;
    size_t n_fb[N_SLOTS][N_SLOTS] = {{0}}, first_fb[N_SLOTS][N_SLOTS] = {{0}};
    for (size_t i = 0; i < n_src; i++) {
        const src_tensor *t = &src[i];
        const char *name = t->name;
        rl_recipe_choice ch;
        if (rl_recipe_choose(&rctx, recipe_path ? &rules : NULL, name, t->n_dims, t->ne, &ch, &e) < 0)
            goto fail;
        uint32_t dt = ch.type;
        if (ch.wanted != dt) {
            size_t a = type_slot(ch.wanted), b = type_slot(dt);
            if (!n_fb[a][b]++) first_fb[a][b] = i;
        }
        if (dt != t->type && !rl_type_is_float(t->type) && !t->hf) {
            rl_fail(&e, "%s: tensor '%s' is %s: requantizing from %s is not supported; give an "
                        "F32/F16/BF16 file", inp, name, rl_type_name(t->type),
                    rl_type_name(t->type));
            goto fail;
        }
        size_t rows = 1;
        for (uint32_t d = 1; d < t->n_dims; d++) rows *= (size_t)t->ne[d];
        size_t rb = rl_row_bytes(dt, (size_t)t->ne[0]), ob = rb * rows;
        size_t slice = ob < SLICE_BYTES ? ob : rb > SLICE_BYTES ? rb : SLICE_BYTES / rb * rb;
        if (slice > max_out) max_out = slice;
        if (t->ne[0] > max_cols) max_cols = (size_t)t->ne[0];
        bytes_in += t->nbytes;
        bytes_out += ob;
        elems += (size_t)t->ne[0] * rows;
        types[i] = dt;
        if (gguf_w_tensor(w, name, dt, t->n_dims, t->ne, &e) < 0) goto fail;
    }

    size_t nth = threads ? (size_t)threads : rl_ncpu();
    size_t calib_n = 0, n_weighted = 0, n_unweighted = 0;
    if (calib_path) {
        double tc = cli_now();
        if (calib_run(&cb, inp, calib_path, calib_chunks > 0 ? (size_t)calib_chunks : 8, nth,
                      &calib_n, &e) < 0)
            goto fail;
        for (size_t i = 0; i < n_src; i++) {
            if (types[i] == src[i].type || !calib_weights(&cb, src[i].name, (size_t)src[i].ne[0]))
                continue;
            if (rl_quant_uses_weights(types[i])) n_weighted++;
            else n_unweighted++;
        }
        fprintf(stderr, "rawloop quantize: --calib: importances from %zu chunk%s of %d tokens of "
                        "%s (%.1f s); %zu matri%s use them, %zu (types without a weighted "
                        "search: Q8_0, FP8, floats) ignore them\n",
                calib_n, calib_n == 1 ? "" : "s", CALIB_CTX, calib_path, cli_now() - tc,
                n_weighted, n_weighted == 1 ? "x" : "ces", n_unweighted);
        if (calib_out) {
            if (calib_save_imatrix(&cb, src, types, n_src, calib_out, &e) < 0) goto fail;
            fprintf(stderr, "rawloop quantize: --calib-out: wrote the importances of %zu matri%s to %s\n",
                    n_weighted, n_weighted == 1 ? "x" : "ces", calib_out);
        }
    }
    buf = malloc(max_out ? max_out : 1);
    scratch = malloc((max_cols ? max_cols : 1) * nth * sizeof(float));
    bad_at = malloc(nth * sizeof *bad_at);
    if (!buf || !scratch || !bad_at) goto oom;
    if (rl_pool_new(&pool, nth, &e) < 0) goto fail;
    if (gguf_writer_begin(w, outp, &e) < 0) goto fail;
    fprintf(stderr, "rawloop quantize: %s -> %s (%s%s%s%s), %zu tensors, %zu layers, %zu threads, "
                    "peak buffer %.1f MB beyond the mapped input\n",
            inp, outp, ft->name, recipe_path ? " " : "", recipe_path ? recipe_path : "",
            pure ? ", pure" : "", n_src, n_layer, nth, (max_out + max_cols * nth * sizeof(float)) / 1e6);
    for (size_t a = 0; a < N_SLOTS; a++)
        for (size_t b = 0; b < N_SLOTS; b++) {
            if (!n_fb[a][b]) continue;
            const src_tensor *t = &src[first_fb[a][b]];
            uint32_t want = rl_type_computable_at(a);
            fprintf(stderr, "rawloop quantize: note: %zu matri%s in %s instead of %s: rows of %llu "
                            "values are not a multiple of its %zu-value block (first: %s)\n",
                    n_fb[a][b], n_fb[a][b] == 1 ? "x" : "ces", rl_type_name(rl_type_computable_at(b)),
                    rl_type_name(want), (unsigned long long)t->ne[0], rl_type_get(want)->blck, t->name);
        }

    double t0 = cli_now(), last = t0;
    size_t done = 0, count[N_SLOTS] = {0};
    for (size_t i = 0; i < n_src; i++) {
        const src_tensor *t = &src[i];
        /* rows from the shape, not nbytes / row bytes: ggml allows empty (ne = 0) tensors */
        size_t cols = (size_t)t->ne[0], rows = 1;
        for (uint32_t d = 1; d < t->n_dims; d++) rows *= (size_t)t->ne[d];
        size_t drb = rl_row_bytes(types[i], cols);
        if (types[i] == t->type && !t->perm_heads) {
            /* copied as it is, but checked like a quantized one when it is floats (a NaN norm
             * weight makes every logit NaN); a quantized input tensor is not decoded */
            if (t->hf || t->type == RL_F32 || t->type == RL_F16 || t->type == RL_BF16) {
                qjob j = {t, types[i], cols, rows, rl_row_bytes(t->type, cols), drb, 0, rows, NULL,
                          scratch, NULL, bad_at, true};
                if (run_qjob(pool, &j, nth, inp, &e) < 0) goto fail;
            }
            if (gguf_writer_write_tensor(w, t->data, drb * rows, &e) < 0) goto fail;
        } else {
            size_t step = drb ? SLICE_BYTES / drb : rows;
            if (step < 1) step = 1; /* one row larger than a slice: max_out covers it */
            for (size_t r0 = 0; r0 < rows; r0 += step) {
                size_t n = rows - r0 < step ? rows - r0 : step;
                qjob j = {t, types[i], cols, rows, rl_row_bytes(t->type, cols), drb, r0, n, buf,
                          scratch, calib_weights(&cb, t->name, cols), bad_at, false};
                if (run_qjob(pool, &j, nth, inp, &e) < 0) goto fail; /* OUT.tmp is removed by gguf_writer_free */
                if (gguf_writer_write_part(w, buf, drb * n, &e) < 0) goto fail;
            }
            if (!rows && gguf_writer_write_tensor(w, buf, 0, &e) < 0) goto fail;
        }
        count[type_slot(types[i])]++;
        done += t->nbytes;
        double now = cli_now();
        if (now - last >= 1.0 || i + 1 == n_src) {
            last = now;
            mid_line = true;
            fprintf(stderr, "\rrawloop quantize: %5.1f%% (%.2f / %.2f GB in, %.0f s)",
                    bytes_in ? 100.0 * done / bytes_in : 100.0, done / 1e9, bytes_in / 1e9,
                    now - t0);
        }
    }
    if (gguf_writer_finish(w, &e) < 0) goto fail;
    fprintf(stderr, "\nrawloop quantize: wrote %s in %.1f s\n  tensors:", outp, cli_now() - t0);
    for (size_t k = 0; k < N_SLOTS; k++)
        if (count[k]) fprintf(stderr, " %zu %s", count[k], rl_type_name(rl_type_computable_at(k)));
    fprintf(stderr, "\n  tensor bytes: %zu in, %zu out (%.3f of the input); %.3f bits per weight\n",
            bytes_in, bytes_out, bytes_in ? (double)bytes_out / bytes_in : 0.0,
            elems ? 8.0 * bytes_out / elems : 0.0);
    rc = 0;
    goto out;
oom:
    rl_fail(&e, "out of memory");
fail:
    fprintf(stderr, "%srawloop: quantize: %s\n", mid_line ? "\n" : "", e.msg);
out:
    rl_pool_free(pool);
    gguf_writer_free(w);
    free(buf);
    free(scratch);
    free(bad_at);
    free(types);
    free(src);
    hf_close(&h);
    gguf_close(&f);
    rl_recipe_free(&rules);
    calib_free(&cb);
    return rc;
}

static int open_input(const char *inp, bool is_hf, gguf_file *f, hf_model *h, src_tensor **out,
                      size_t *n, size_t *n_layer, bool *is_70b, gguf_writer *w, const rl_ftype *ft,
                      rl_err *e) {
    if (is_hf) { /* the caller opened a GGUF otherwise */
        if (hf_open(h, inp, e) < 0 || hf_write_kvs(h, w, e) < 0) return -1;
        if (gguf_w_u32(w, "general.file_type", ft->file_type, e) < 0 ||
            gguf_w_u32(w, "general.quantization_version", 2, e) < 0)
            return -1;
        *n_layer = h->n_layer;
        *is_70b = rl_recipe_is_70b(h->arch, h->n_layer, h->n_head, h->n_head_kv);
        *n = h->n_tensors;
        src_tensor *s = *out = calloc(*n ? *n : 1, sizeof *s);
        if (!s) return rl_fail(e, "out of memory");
        for (size_t i = 0; i < *n; i++) {
            const hf_tensor *t = &h->tensors[i];
            snprintf(s[i].name, sizeof s[i].name, "%s", t->name);
            s[i].n_dims = t->n_dims;
            memcpy(s[i].ne, t->ne, sizeof t->ne);
            s[i].type = t->type;
            s[i].data = t->data;
            s[i].nbytes = t->nbytes;
            s[i].perm_heads = t->perm_heads;
            s[i].hf = t;
        }
        return 0;
    }
    if (model_layers(f, n_layer, is_70b, e) < 0) return -1;
    /* kvs in order; file_type and quantization_version replaced in place or appended */
    bool saw_ft = false, saw_qv = false;
    for (size_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        int r;
        if (gguf_str_eq(kv->key, "general.file_type")) {
            r = gguf_w_u32(w, "general.file_type", ft->file_type, e);
            saw_ft = true;
        } else if (gguf_str_eq(kv->key, "general.quantization_version")) {
            r = gguf_w_u32(w, "general.quantization_version", 2, e);
            saw_qv = true;
        } else if (gguf_str_eq(kv->key, RL_FORMAT_VERSION_KEY)) {
            r = 0; /* the writer adds it when the output holds rawloop types */
        } else {
            r = gguf_w_copy_kv(w, kv, e);
        }
        if (r < 0) return -1;
    }
    if ((!saw_ft && gguf_w_u32(w, "general.file_type", ft->file_type, e) < 0) ||
        (!saw_qv && gguf_w_u32(w, "general.quantization_version", 2, e) < 0))
        return -1;
    *n = f->n_tensors;
    src_tensor *s = *out = calloc(*n ? *n : 1, sizeof *s);
    if (!s) return rl_fail(e, "out of memory");
    for (size_t i = 0; i < *n; i++) {
        const gguf_tensor *t = &f->tensors[i];
        snprintf(s[i].name, sizeof s[i].name, "%.*s",
                 (int)(t->name.len < 255 ? t->name.len : 255), t->name.ptr);
        s[i].n_dims = t->n_dims;
        memcpy(s[i].ne, t->ne, sizeof t->ne);
        s[i].type = t->type;
        s[i].data = t->data;
        s[i].nbytes = t->nbytes;
    }
    return 0;
}
