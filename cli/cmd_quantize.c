/* rawloop quantize: rewrites an F32/F16/BF16 GGUF in one of the standard ggml types.
 *
 * Streams tensor by tensor: the input is memory-mapped, each output tensor is built in one
 * buffer (the largest output tensor is the peak extra memory) by all threads over rows, and
 * written before the next is started. The writer goes to OUT.tmp and renames at the end, so an
 * error or a kill never leaves a half-written OUT. Tensor types come from src/recipe.h. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "gguf.h"
#include "pool.h"
#include "quant.h"
#include "recipe.h"
#include "types.h"

static void usage(FILE *out) {
    fprintf(out,
        "usage: rawloop quantize [--help] IN OUT --type T [-t N] [--pure]\n"
        "Writes IN's model to OUT with its matrices in type T (1-D tensors stay F32).\n"
        "IN is a GGUF whose matrices are F32, F16 or BF16 (a matrix already in the type the\n"
        "recipe chooses is copied as is). Hugging Face safetensors input is not supported yet.\n"
        "  --type T   one of:");
    for (size_t i = 0; rl_ftype_at(i); i++) fprintf(out, " %s", rl_ftype_at(i)->name);
    fprintf(out,
        "\n"
        "             Q4_K_M/Q5_K_M: output head and attn_v/ffn_down of some layers in Q6_K\n"
        "             (llama.cpp's recipes); matrices whose row length is not a multiple of the\n"
        "             type's block fall back to Q8_0 (or F16). docs/FORMATS.md has the rules.\n"
        "  --pure     every matrix in the base type (no _M mix)\n"
        "  -t N       threads (default: all CPUs)\n");
}

/* One tensor's conversion, split over threads by rows. */
typedef struct qjob {
    const gguf_tensor *t;
    uint32_t dst_type;
    size_t cols, rows, src_row_bytes, dst_row_bytes;
    uint8_t *out;
    float *scratch; /* cols floats per thread */
} qjob;

static void q_worker(void *ctx, size_t ith, size_t nth) {
    qjob *j = ctx;
    float *row = j->scratch + ith * j->cols;
    const uint8_t *src = j->t->data;
    for (size_t r = j->rows * ith / nth; r < j->rows * (ith + 1) / nth; r++) {
        rl_dequant_row(j->t->type, src + r * j->src_row_bytes, row, j->cols);
        rl_quant_row(j->dst_type, row, j->out + r * j->dst_row_bytes, j->cols);
    }
}

/* n_layer from {arch}.block_count, else one more than the largest blk.N in the tensor names. */
static int model_layers(const gguf_file *f, size_t *n_layer, rl_err *e) {
    gguf_str arch;
    uint32_t n = 0;
    if (gguf_get_str(f, "general.architecture", &arch, e) == 1) {
        char key[128];
        snprintf(key, sizeof key, "%.*s.block_count", (int)(arch.len < 64 ? arch.len : 64),
                 arch.ptr);
        if (gguf_get_u32(f, key, &n, e) < 0) return -1;
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
                                         {"pure", 0, 0, 'P'}, {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *type_name = NULL;
    long threads = 0;
    bool pure = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'T': type_name = optarg; break;
        case 't': if (cli_parse_long("-t", optarg, 1, 1024, &threads)) return 2; break;
        case 'P': pure = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!type_name || argc - optind != 2) {
        usage(stderr);
        return 2;
    }
    const char *inp = argv[optind], *outp = argv[optind + 1];
    const rl_ftype *ft = rl_ftype_find(type_name);
    if (!ft) {
        fprintf(stderr, "rawloop quantize: unknown type '%s'\n", type_name);
        usage(stderr);
        return 2;
    }
    if (!strcmp(inp, outp) || same_file(inp, outp)) {
        fprintf(stderr, "rawloop: quantize: OUT is the same file as IN (%s)\n", inp);
        return 1;
    }

    rl_err e = {{0}};
    gguf_file f;
    if (gguf_open(&f, inp, &e) < 0) {
        fprintf(stderr, "rawloop: quantize: %s\n", e.msg);
        return 1;
    }
    gguf_writer *w = NULL;
    rl_pool *pool = NULL;
    uint32_t *types = NULL;
    uint8_t *buf = NULL;
    float *scratch = NULL;
    int rc = 1;
    size_t n_layer = 0;
    if (model_layers(&f, &n_layer, &e) < 0) goto fail;
    rl_recipe_ctx rctx = {ft, n_layer, gguf_find_tensor(&f, "output.weight") != NULL, pure};

    w = gguf_writer_new(f.alignment);
    types = calloc(f.n_tensors ? f.n_tensors : 1, sizeof *types);
    if (!w || !types) goto oom;

    /* kvs in order; file_type and quantization_version replaced in place or appended */
    bool saw_ft = false, saw_qv = false;
    for (size_t i = 0; i < f.n_kv; i++) {
        const gguf_kv *kv = &f.kv[i];
        int r;
        if (gguf_str_eq(kv->key, "general.file_type")) {
            r = gguf_w_u32(w, "general.file_type", ft->file_type, &e);
            saw_ft = true;
        } else if (gguf_str_eq(kv->key, "general.quantization_version")) {
            r = gguf_w_u32(w, "general.quantization_version", 2, &e);
            saw_qv = true;
        } else {
            r = gguf_w_copy_kv(w, kv, &e);
        }
        if (r < 0) goto fail;
    }
    if ((!saw_ft && gguf_w_u32(w, "general.file_type", ft->file_type, &e) < 0) ||
        (!saw_qv && gguf_w_u32(w, "general.quantization_version", 2, &e) < 0))
        goto fail;

    /* choose every type first, so that a refused tensor stops us before anything is written */
    size_t max_out = 0, max_cols = 0, bytes_in = 0, bytes_out = 0, elems = 0;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.len < 255 ? t->name.len : 255),
                 t->name.ptr);
        uint32_t dt = rl_recipe_type(&rctx, name, t->n_dims, t->ne);
        if (dt != t->type && !rl_type_is_float(t->type)) {
            rl_fail(&e, "%s: tensor '%s' is %s: requantizing from %s is not supported; give an "
                        "F32/F16/BF16 file", inp, name, rl_type_name(t->type),
                    rl_type_name(t->type));
            goto fail;
        }
        size_t rows = 1;
        for (uint32_t d = 1; d < t->n_dims; d++) rows *= (size_t)t->ne[d];
        size_t ob = rl_row_bytes(dt, (size_t)t->ne[0]) * rows;
        if (ob > max_out) max_out = ob;
        if (t->ne[0] > max_cols) max_cols = (size_t)t->ne[0];
        bytes_in += t->nbytes;
        bytes_out += ob;
        elems += (size_t)t->ne[0] * rows;
        types[i] = dt;
        if (gguf_w_tensor(w, name, dt, t->n_dims, t->ne, &e) < 0) goto fail;
    }

    size_t nth = threads ? (size_t)threads : rl_ncpu();
    buf = malloc(max_out ? max_out : 1);
    scratch = malloc((max_cols ? max_cols : 1) * nth * sizeof(float));
    if (!buf || !scratch) goto oom;
    if (rl_pool_new(&pool, nth, &e) < 0) goto fail;
    if (gguf_writer_begin(w, outp, &e) < 0) goto fail;
    fprintf(stderr, "rawloop quantize: %s -> %s (%s%s), %zu tensors, %zu layers, %zu threads, "
                    "peak buffer %.1f MB beyond the mapped input\n",
            inp, outp, ft->name, pure ? ", pure" : "", f.n_tensors, n_layer, nth,
            (max_out + max_cols * nth * sizeof(float)) / 1e6);

    double t0 = cli_now(), last = t0;
    size_t done = 0, count[RL_TYPE_COUNT] = {0};
    for (size_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        /* rows from the shape, not nbytes / row bytes: ggml allows empty (ne = 0) tensors */
        size_t cols = (size_t)t->ne[0], rows = 1;
        for (uint32_t d = 1; d < t->n_dims; d++) rows *= (size_t)t->ne[d];
        size_t drb = rl_row_bytes(types[i], cols);
        const void *out = t->data;
        if (types[i] != t->type) {
            qjob j = {t, types[i], cols, rows, rl_row_bytes(t->type, cols), drb, buf, scratch};
            rl_pool_run(pool, q_worker, &j);
            out = buf;
        }
        if (gguf_writer_write_tensor(w, out, drb * rows, &e) < 0) goto fail;
        count[types[i]]++;
        done += t->nbytes;
        double now = cli_now();
        if (now - last >= 1.0 || i + 1 == f.n_tensors) {
            last = now;
            fprintf(stderr, "\rrawloop quantize: %5.1f%% (%.2f / %.2f GB in, %.0f s)",
                    bytes_in ? 100.0 * done / bytes_in : 100.0, done / 1e9, bytes_in / 1e9,
                    now - t0);
        }
    }
    if (gguf_writer_finish(w, &e) < 0) goto fail;
    fprintf(stderr, "\nrawloop quantize: wrote %s in %.1f s\n  tensors:", outp, cli_now() - t0);
    for (uint32_t ty = 0; ty < RL_TYPE_COUNT; ty++)
        if (count[ty]) fprintf(stderr, " %zu %s", count[ty], rl_type_name(ty));
    fprintf(stderr, "\n  tensor bytes: %zu in, %zu out (%.3f of the input); %.3f bits per weight\n",
            bytes_in, bytes_out, bytes_in ? (double)bytes_out / bytes_in : 0.0,
            elems ? 8.0 * bytes_out / elems : 0.0);
    rc = 0;
    goto out;
oom:
    rl_fail(&e, "out of memory");
fail:
    fprintf(stderr, "\nrawloop: quantize: %s\n", e.msg);
out:
    rl_pool_free(pool);
    gguf_writer_free(w);
    free(buf);
    free(scratch);
    free(types);
    gguf_close(&f);
    return rc;
}
