/* GGUF reader/writer round trips, getter conversions, writer file handling, and the reader's
 * behaviour on every truncation of a valid file.
 *
 * `test_gguf --write PATH` only writes the sample file (sample_write below) and exits; the pytest
 * suite reads it with the gguf Python package as an independent check of the writer. */
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "gguf.h"
#include "types.h"

static char g_dir[64]; /* scratch directory */

static bool exists(const char *p) { return access(p, F_OK) == 0; }

static void path_in(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", g_dir, name);
}

/* ---- the sample file ---------------------------------------------------------------------- */

static const int32_t k_i32s[] = {-3, 0, 7, 2147483647, -2147483647 - 1};
static const float k_f32s[] = {0.5f, -1.25f, 3.0e38f, 1e-7f};
static const uint8_t k_u8s[] = {0, 1, 255};
static const uint16_t k_u16s[] = {1, 65535};
static const int16_t k_i16s[] = {-32768, 32767};
static const int8_t k_i8s[] = {-128, 127, 0};
static const uint32_t k_u32s[] = {4000000000u, 5};
static const uint64_t k_u64s[] = {18446744073709551615ull, 0};
static const int64_t k_i64s[] = {-9223372036854775807ll - 1, 42};
static const double k_f64s[] = {3.141592653589793, -1e300};
static const uint8_t k_bools[] = {1, 0, 1};
static const char *k_strs[] = {"alpha", "", "γάμμα ✓", "with\nnewline"};

/* Tensors: an F32 matrix, an F16 vector, a Q8_0 matrix (2 rows of 2 blocks), a Q4_K row, and a
 * zero-sized F32 tensor. Data bytes are a deterministic pattern. */
typedef struct sample_tensor {
    const char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
} sample_tensor;

static const sample_tensor k_tensors[] = {
    {"tok_embd.weight", RL_F32, 2, {4, 3, 1, 1}},
    {"norm.weight", RL_F16, 1, {8, 1, 1, 1}},
    {"blk.0.attn_q.weight", RL_Q8_0, 2, {64, 2, 1, 1}},
    {"blk.0.ffn_down.weight", RL_Q4_K, 3, {256, 1, 2, 1}},
    {"empty", RL_F32, 4, {2, 0, 3, 1}},
};
#define N_SAMPLE_TENSORS (sizeof k_tensors / sizeof k_tensors[0])

static size_t sample_nbytes(const sample_tensor *t) {
    const rl_type_info *ti = rl_type_get(t->type);
    return t->ne[0] / ti->blck * ti->size * t->ne[1] * t->ne[2] * t->ne[3];
}

static uint8_t pattern(size_t tensor, size_t i) { return (uint8_t)(tensor * 31 + i * 7 + 1); }

static int sample_write(const char *path, size_t alignment, rl_err *e) {
    gguf_writer *w = gguf_writer_new(alignment);
    if (!w) return rl_fail(e, "writer_new(%zu) failed", alignment);
    gguf_str strs[4];
    for (int i = 0; i < 4; i++) strs[i] = (gguf_str){k_strs[i], strlen(k_strs[i])};
    int r = gguf_w_str(w, "general.architecture", "rawloop-test", e) ||
            gguf_w_u32(w, "test.u32", 4000000000u, e) || gguf_w_i32(w, "test.i32", -123456, e) ||
            gguf_w_u64(w, "test.u64", 18446744073709551615ull, e) ||
            gguf_w_f32(w, "test.f32", 0.1f, e) || gguf_w_bool(w, "test.true", true, e) ||
            gguf_w_bool(w, "test.false", false, e) || gguf_w_str(w, "test.empty_str", "", e) ||
            gguf_w_arr(w, "test.arr.i32", GGUF_I32, k_i32s, 5, e) ||
            gguf_w_arr(w, "test.arr.f32", GGUF_F32, k_f32s, 4, e) ||
            gguf_w_arr(w, "test.arr.u8", GGUF_U8, k_u8s, 3, e) ||
            gguf_w_arr(w, "test.arr.u16", GGUF_U16, k_u16s, 2, e) ||
            gguf_w_arr(w, "test.arr.i16", GGUF_I16, k_i16s, 2, e) ||
            gguf_w_arr(w, "test.arr.i8", GGUF_I8, k_i8s, 3, e) ||
            gguf_w_arr(w, "test.arr.u32", GGUF_U32, k_u32s, 2, e) ||
            gguf_w_arr(w, "test.arr.u64", GGUF_U64, k_u64s, 2, e) ||
            gguf_w_arr(w, "test.arr.i64", GGUF_I64, k_i64s, 2, e) ||
            gguf_w_arr(w, "test.arr.f64", GGUF_F64, k_f64s, 2, e) ||
            gguf_w_arr(w, "test.arr.bool", GGUF_BOOL, k_bools, 3, e) ||
            gguf_w_arr(w, "test.arr.empty", GGUF_F32, NULL, 0, e) ||
            gguf_w_arr_str(w, "test.arr.str", strs, 4, e);
    for (size_t i = 0; !r && i < N_SAMPLE_TENSORS; i++)
        r = gguf_w_tensor(w, k_tensors[i].name, k_tensors[i].type, k_tensors[i].n_dims,
                          k_tensors[i].ne, e);
    r = r || gguf_writer_begin(w, path, e);
    for (size_t i = 0; !r && i < N_SAMPLE_TENSORS; i++) {
        size_t n = sample_nbytes(&k_tensors[i]);
        uint8_t *d = malloc(n + 1);
        for (size_t j = 0; j < n; j++) d[j] = pattern(i, j);
        r = gguf_writer_write_tensor(w, d, n, e);
        free(d);
    }
    r = r || gguf_writer_finish(w, e);
    gguf_writer_free(w);
    return r ? -1 : 0;
}

static void check_sample(const gguf_file *f, size_t alignment) {
    rl_err e = {{0}};
    CHECK(f->version == 3, "version %u", f->version);
    CHECK(f->alignment == alignment, "alignment %zu", f->alignment);
    CHECK(f->data_offset % alignment == 0, "data offset %zu", f->data_offset);
    CHECK(f->n_kv == 21 + (alignment != GGUF_DEFAULT_ALIGNMENT), "n_kv %zu", f->n_kv);
    gguf_str s = {0};
    CHECK(gguf_get_str(f, "general.architecture", &s, &e) == 1 && gguf_str_eq(s, "rawloop-test"),
          "%s", e.msg);
    CHECK(gguf_get_str(f, "test.empty_str", &s, &e) == 1 && s.len == 0, "empty str");
    uint32_t u32 = 0;
    CHECK(gguf_get_u32(f, "test.u32", &u32, &e) == 1 && u32 == 4000000000u, "u32 %u", u32);
    int64_t i64 = 0;
    CHECK(gguf_get_i64(f, "test.i32", &i64, &e) == 1 && i64 == -123456, "i32 %lld",
          (long long)i64);
    uint64_t u64 = 0;
    CHECK(gguf_get_u64(f, "test.u64", &u64, &e) == 1 && u64 == UINT64_MAX, "u64");
    float f32 = 0;
    CHECK(gguf_get_f32(f, "test.f32", &f32, &e) == 1 && f32 == 0.1f, "f32 %g", f32);
    bool b = false;
    CHECK(gguf_get_bool(f, "test.true", &b, &e) == 1 && b, "true");
    CHECK(gguf_get_bool(f, "test.false", &b, &e) == 1 && !b, "false");

    const gguf_kv *a = NULL;
    CHECK(gguf_get_arr(f, "test.arr.i32", GGUF_I32, &a, &e) == 1 && a->n == 5, "%s", e.msg);
    for (size_t i = 0; a && i < 5; i++)
        CHECK(gguf_arr_i64(a, i) == k_i32s[i], "i32[%zu] = %lld", i, (long long)gguf_arr_i64(a, i));
    a = NULL;
    CHECK(gguf_get_arr(f, "test.arr.f32", GGUF_F32, &a, &e) == 1 && a->n == 4, "%s", e.msg);
    for (size_t i = 0; a && i < 4; i++)
        CHECK(gguf_arr_f64(a, i) == (double)k_f32s[i], "f32[%zu]", i);
    /* Every remaining scalar array type, through the generic element readers. */
    static const struct { const char *key; uint32_t t; size_t n; double v[5]; } arrs[] = {
        {"test.arr.u8", GGUF_U8, 3, {0, 1, 255}},
        {"test.arr.u16", GGUF_U16, 2, {1, 65535}},
        {"test.arr.i16", GGUF_I16, 2, {-32768, 32767}},
        {"test.arr.i8", GGUF_I8, 3, {-128, 127, 0}},
        {"test.arr.u32", GGUF_U32, 2, {4000000000.0, 5}},
        {"test.arr.i64", GGUF_I64, 2, {-9223372036854775808.0, 42}},
        {"test.arr.f64", GGUF_F64, 2, {3.141592653589793, -1e300}},
        {"test.arr.bool", GGUF_BOOL, 3, {1, 0, 1}},
    };
    for (size_t k = 0; k < sizeof arrs / sizeof arrs[0]; k++) {
        a = NULL;
        CHECK(gguf_get_arr(f, arrs[k].key, arrs[k].t, &a, &e) == 1 && a->n == arrs[k].n, "%s: %s",
              arrs[k].key, e.msg);
        for (size_t i = 0; a && i < arrs[k].n; i++)
            CHECK(gguf_arr_f64(a, i) == arrs[k].v[i], "%s[%zu] = %g", arrs[k].key, i,
                  gguf_arr_f64(a, i));
    }
    a = NULL;
    CHECK(gguf_get_arr(f, "test.arr.i64", GGUF_I64, &a, &e) == 1 && gguf_arr_i64(a, 0) == INT64_MIN,
          "i64 min");
    a = NULL;
    CHECK(gguf_get_arr(f, "test.arr.u64", GGUF_U64, &a, &e) == 1 && a->n == 2 &&
              (uint64_t)gguf_arr_i64(a, 0) == UINT64_MAX, "u64 arr");
    a = NULL;
    CHECK(gguf_get_arr(f, "test.arr.empty", GGUF_F32, &a, &e) == 1 && a->n == 0, "empty arr");
    a = NULL;
    CHECK(gguf_get_arr(f, "test.arr.str", GGUF_STRING, &a, &e) == 1 && a->n == 4, "%s", e.msg);
    for (size_t i = 0; a && i < 4; i++)
        CHECK(gguf_str_eq(a->strs[i], k_strs[i]), "str[%zu] = '%.*s'", i, (int)a->strs[i].len,
              a->strs[i].ptr);

    CHECK(f->n_tensors == N_SAMPLE_TENSORS, "n_tensors %zu", f->n_tensors);
    for (size_t i = 0; i < N_SAMPLE_TENSORS && i < f->n_tensors; i++) {
        const sample_tensor *want = &k_tensors[i];
        const gguf_tensor *t = gguf_find_tensor(f, want->name);
        CHECK(t == &f->tensors[i], "find_tensor(%s)", want->name);
        if (!t) continue;
        CHECK(t->type == want->type && t->n_dims == want->n_dims, "%s type/dims", want->name);
        for (int d = 0; d < 4; d++) CHECK(t->ne[d] == want->ne[d], "%s ne[%d]", want->name, d);
        size_t n = sample_nbytes(want);
        CHECK(t->nbytes == n, "%s nbytes %zu want %zu", want->name, t->nbytes, n);
        CHECK(t->offset % alignment == 0, "%s offset %llu", want->name,
              (unsigned long long)t->offset);
        CHECK(((const uint8_t *)t->data - f->base) % alignment == 0, "%s data misaligned",
              want->name);
        size_t bad = 0;
        for (size_t j = 0; j < n; j++) bad += ((const uint8_t *)t->data)[j] != pattern(i, j);
        CHECK(bad == 0, "%s: %zu data bytes differ", want->name, bad);
    }
    CHECK(gguf_find_tensor(f, "nope") == NULL, "absent tensor");
    CHECK(gguf_find(f, "nope") == NULL, "absent key");
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_round_trip(size_t alignment) {
    char path[128];
    path_in(path, sizeof path, "sample.gguf");
    rl_err e = {{0}};
    CHECK(sample_write(path, alignment, &e) == 0, "write (align %zu): %s", alignment, e.msg);
    gguf_file f;
    CHECK(gguf_open(&f, path, &e) == 0, "open: %s", e.msg);
    if (f.base) check_sample(&f, alignment);

    /* Copying every kv into a new file gives the same metadata (alignment key included). */
    char copy[128];
    path_in(copy, sizeof copy, "copy.gguf");
    gguf_writer *w = gguf_writer_new(alignment);
    int r = 0;
    for (size_t i = 0; i < f.n_kv && !r; i++) r = gguf_w_copy_kv(w, &f.kv[i], &e);
    CHECK(r == 0, "copy_kv: %s", e.msg);
    CHECK(gguf_writer_begin(w, copy, &e) == 0 && gguf_writer_finish(w, &e) == 0, "%s", e.msg);
    gguf_writer_free(w);
    gguf_file g;
    CHECK(gguf_open(&g, copy, &e) == 0, "open copy: %s", e.msg);
    CHECK(g.n_kv == f.n_kv && g.n_tensors == 0, "copy n_kv %zu", g.n_kv);
    /* Tensor-less files end right after the header: the data section starts past EOF. */
    for (size_t i = 0; i < g.n_kv && i < f.n_kv; i++) {
        const gguf_kv *x = &f.kv[i], *y = &g.kv[i];
        bool same = x->key.len == y->key.len && !memcmp(x->key.ptr, y->key.ptr, x->key.len) &&
                    x->type == y->type && x->arr_type == y->arr_type && x->n == y->n;
        CHECK(same, "copied kv %zu differs", i);
    }
    gguf_close(&g);
    gguf_close(&f);
    CHECK(f.base == NULL && f.kv == NULL, "close clears");
    gguf_close(&f); /* closing twice is harmless */
}

static void *read_all(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    void *p = malloc(*n ? *n : 1);
    if (fread(p, 1, *n, fp) != *n) *n = 0;
    fclose(fp);
    return p;
}

/* Every prefix of a valid file must be rejected with a message (until the last tensor's data is
 * complete: the padding after it is optional), and never crash; under ASan each prefix is copied
 * into an exact-size buffer so any overread is caught. */
static void test_truncation(void) {
    char path[128];
    path_in(path, sizeof path, "trunc.gguf");
    rl_err e = {{0}};
    CHECK(sample_write(path, 32, &e) == 0, "%s", e.msg);
    size_t n = 0;
    uint8_t *all = read_all(path, &n);
    gguf_file f;
    CHECK(gguf_open_memory(&f, all, n, "trunc", &e) == 0, "%s", e.msg);
    const gguf_tensor *last = &f.tensors[f.n_tensors - 1];
    size_t need_to = f.data_offset + last->offset + last->nbytes;
    gguf_close(&f);
    size_t wrong = 0, silent = 0;
    for (size_t len = 0; len < n; len++) {
        uint8_t *p = malloc(len ? len : 1);
        memcpy(p, all, len);
        e.msg[0] = 0;
        int r = gguf_open_memory(&f, p, len, "trunc", &e);
        if ((r == 0) != (len >= need_to)) wrong++;
        if (r != 0 && e.msg[0] == 0) silent++;
        if (r == 0) gguf_close(&f);
        free(p);
    }
    CHECK(wrong == 0, "%zu prefixes accepted/rejected wrongly (need %zu of %zu)", wrong, need_to, n);
    CHECK(silent == 0, "%zu rejections without a message", silent);
    e.msg[0] = 0;
    CHECK(gguf_open_memory(&f, all, 10, "short.gguf", &e) == -1 && strstr(e.msg, "short.gguf") &&
              strstr(e.msg, "truncated"), "%s", e.msg);
    free(all);
}

/* Builds tiny files by hand to hit the rules the writer would never produce. */
typedef struct hb {
    uint8_t p[512];
    size_t n;
} hb;
static void h_u32(hb *b, uint32_t v) { memcpy(b->p + b->n, &v, 4); b->n += 4; }
static void h_u64(hb *b, uint64_t v) { memcpy(b->p + b->n, &v, 8); b->n += 8; }
static void h_str(hb *b, const char *s) { h_u64(b, strlen(s)); memcpy(b->p + b->n, s, strlen(s)); b->n += strlen(s); }
static void h_head(hb *b, uint32_t version, uint64_t nt, uint64_t nkv) {
    b->n = 0;
    memcpy(b->p, "GGUF", 4);
    b->n = 4;
    h_u32(b, version);
    h_u64(b, nt);
    h_u64(b, nkv);
}

static void expect_fail(const hb *b, const char *sub, const char *what) {
    gguf_file f;
    rl_err e = {{0}};
    int r = gguf_open_memory(&f, b->p, b->n, "hand.gguf", &e);
    CHECK(r == -1 && strstr(e.msg, sub) && strstr(e.msg, "hand.gguf"), "%s: r=%d msg='%s' (want '%s')",
          what, r, e.msg, sub);
    if (r == 0) gguf_close(&f);
}

static void test_handmade(void) {
    hb b;
    h_head(&b, 1, 0, 0);
    expect_fail(&b, "version 1", "v1");
    h_head(&b, 0x03000000, 0, 0);
    expect_fail(&b, "endianness", "byte-swapped");
    h_head(&b, 3, 0, 1);
    h_str(&b, "general.alignment");
    h_u32(&b, GGUF_I32);
    h_u32(&b, 32);
    expect_fail(&b, "must be UINT32, found INT32", "alignment I32");
    h_head(&b, 3, 0, 1);
    h_str(&b, "general.alignment");
    h_u32(&b, GGUF_U32);
    h_u32(&b, 48);
    expect_fail(&b, "power of two", "alignment 48");
    h_head(&b, 3, 0, 2);
    h_str(&b, "a");
    h_u32(&b, GGUF_U8);
    b.p[b.n++] = 1;
    h_str(&b, "a");
    h_u32(&b, GGUF_U8);
    b.p[b.n++] = 1;
    expect_fail(&b, "duplicate key 'a'", "dup key");
    h_head(&b, 3, 0, 1);
    h_str(&b, "b");
    h_u32(&b, GGUF_BOOL);
    b.p[b.n++] = 2;
    expect_fail(&b, "must be 0 or 1", "bool 2");
    h_head(&b, 3, 0, 1);
    h_str(&b, "");
    h_u32(&b, GGUF_U8);
    b.p[b.n++] = 1;
    expect_fail(&b, "empty key", "empty key");
    h_head(&b, 3, 0, 1);
    h_str(&b, "arr");
    h_u32(&b, GGUF_ARRAY);
    h_u32(&b, GGUF_ARRAY);
    h_u64(&b, 1);
    h_u32(&b, GGUF_U8);
    h_u64(&b, 0);
    expect_fail(&b, "nested", "nested array");
    h_head(&b, 3, 0, 1);
    h_str(&b, "arr");
    h_u32(&b, GGUF_ARRAY);
    h_u32(&b, GGUF_U32);
    h_u64(&b, 1ull << 62);
    expect_fail(&b, "array count", "huge array");
    h_head(&b, 3, 0, (uint64_t)1 << 63);
    expect_fail(&b, "kv count", "huge n_kv");
    h_head(&b, 3, UINT64_MAX, 0);
    expect_fail(&b, "tensor count", "huge n_tensors");
    /* A tensor whose bytes-per-row product wraps 64 bits. */
    h_head(&b, 3, 1, 0);
    h_str(&b, "t");
    h_u32(&b, 2);
    h_u64(&b, 1ull << 40);
    h_u64(&b, 1ull << 40);
    h_u32(&b, RL_F32);
    h_u64(&b, 0);
    expect_fail(&b, "overflows", "ne overflow");
    /* Type 4 (removed Q4_2), named with the tensor in the message. */
    h_head(&b, 3, 1, 0);
    h_str(&b, "blk.0.x");
    h_u32(&b, 1);
    h_u64(&b, 32);
    h_u32(&b, 4);
    h_u64(&b, 0);
    expect_fail(&b, "'blk.0.x': unknown or unsupported ggml type id 4", "type 4");
    h_head(&b, 3, 1, 0);
    h_str(&b, "q");
    h_u32(&b, 1);
    h_u64(&b, 33);
    h_u32(&b, RL_Q8_0);
    h_u64(&b, 0);
    expect_fail(&b, "not a multiple", "ne0 % blck");
    /* Offsets must be packed: a second tensor at 64 instead of 32. */
    h_head(&b, 3, 2, 0);
    h_str(&b, "a");
    h_u32(&b, 1);
    h_u64(&b, 4);
    h_u32(&b, RL_F32);
    h_u64(&b, 0);
    h_str(&b, "b");
    h_u32(&b, 1);
    h_u64(&b, 4);
    h_u32(&b, RL_F32);
    h_u64(&b, 64);
    while (b.n % 32) b.p[b.n++] = 0;
    b.n += 96;
    expect_fail(&b, "offset 64 is not where the previous tensor ends (expected 32)", "unpacked");
    /* Zero dims are accepted (empty tensor), and their data pointer stays in bounds. */
    h_head(&b, 3, 1, 0);
    h_str(&b, "z");
    h_u32(&b, 2);
    h_u64(&b, 0);
    h_u64(&b, 5);
    h_u32(&b, RL_Q8_0);
    h_u64(&b, 0);
    while (b.n % 32) b.p[b.n++] = 0;
    gguf_file f;
    rl_err e = {{0}};
    CHECK(gguf_open_memory(&f, b.p, b.n, "zero.gguf", &e) == 0 && f.tensors[0].nbytes == 0,
          "zero dim: %s", e.msg);
    gguf_close(&f);
}

static void test_getters(void) {
    char path[128];
    path_in(path, sizeof path, "getters.gguf");
    rl_err e = {{0}};
    gguf_writer *w = gguf_writer_new(32);
    static const uint8_t u8s[] = {1, 2};
    int r = gguf_w_i32(w, "neg", -5, &e) || gguf_w_i32(w, "pos", 77, &e) ||
            gguf_w_u64(w, "big", 1ull << 40, &e) || gguf_w_u64(w, "max", UINT64_MAX, &e) ||
            gguf_w_f32(w, "f", 2.5f, &e) || gguf_w_str(w, "s", "x", &e) ||
            gguf_w_bool(w, "b", true, &e) || gguf_w_arr(w, "scores", GGUF_U8, u8s, 2, &e);
    /* Double too large for a float, written as raw little-endian F64 through copy_kv. */
    double huge = 1e300;
    gguf_kv kv = {.key = {"huge", 4}, .type = GGUF_F64, .n = 1, .data = (const uint8_t *)&huge};
    r = r || gguf_w_copy_kv(w, &kv, &e);
    r = r || gguf_writer_begin(w, path, &e) || gguf_writer_finish(w, &e);
    gguf_writer_free(w);
    CHECK(r == 0, "write: %s", e.msg);
    gguf_file f;
    CHECK(gguf_open(&f, path, &e) == 0, "%s", e.msg);
    uint32_t u32 = 99;
    CHECK(gguf_get_u32(&f, "absent", &u32, &e) == 0 && u32 == 99, "absent leaves out untouched");
    CHECK(gguf_get_u32(&f, "pos", &u32, &e) == 1 && u32 == 77, "I32 -> u32");
    CHECK(gguf_get_u32(&f, "neg", &u32, &e) == -1 && strstr(e.msg, "out of range") &&
              strstr(e.msg, "'neg'"), "neg -> u32: %s", e.msg);
    CHECK(gguf_get_u32(&f, "big", &u32, &e) == -1 && strstr(e.msg, "out of range"), "2^40 -> u32");
    uint64_t u64 = 0;
    CHECK(gguf_get_u64(&f, "big", &u64, &e) == 1 && u64 == 1ull << 40, "u64");
    CHECK(gguf_get_u64(&f, "neg", &u64, &e) == -1, "neg -> u64");
    int64_t i64 = 0;
    CHECK(gguf_get_i64(&f, "neg", &i64, &e) == 1 && i64 == -5, "i64");
    CHECK(gguf_get_i64(&f, "max", &i64, &e) == -1 && strstr(e.msg, "INT64"), "u64max -> i64");
    CHECK(gguf_get_u32(&f, "f", &u32, &e) == -1 && strstr(e.msg, "found FLOAT32"), "%s", e.msg);
    float fl = 0;
    CHECK(gguf_get_f32(&f, "pos", &fl, &e) == 1 && fl == 77.0f, "int -> f32");
    CHECK(gguf_get_f32(&f, "f", &fl, &e) == 1 && fl == 2.5f, "f32");
    CHECK(gguf_get_f32(&f, "huge", &fl, &e) == -1 && strstr(e.msg, "out of range"), "%s", e.msg);
    CHECK(gguf_get_f32(&f, "s", &fl, &e) == -1 && strstr(e.msg, "found STRING"), "%s", e.msg);
    bool b = false;
    CHECK(gguf_get_bool(&f, "b", &b, &e) == 1 && b, "bool");
    CHECK(gguf_get_bool(&f, "pos", &b, &e) == -1 && strstr(e.msg, "must be BOOL"), "%s", e.msg);
    gguf_str s = {0};
    CHECK(gguf_get_str(&f, "pos", &s, &e) == -1 && strstr(e.msg, "must be STRING, found INT32"),
          "%s", e.msg);
    const gguf_kv *a = NULL;
    /* The PR #26690 class: scores stored as U8 must not be read as F32. */
    CHECK(gguf_get_arr(&f, "scores", GGUF_F32, &a, &e) == -1 && a == NULL &&
              strstr(e.msg, "ARRAY of FLOAT32, found ARRAY of UINT8"), "%s", e.msg);
    CHECK(gguf_get_arr(&f, "pos", GGUF_F32, &a, &e) == -1, "scalar as array");
    gguf_close(&f);
}

static size_t count_dir(void) {
    DIR *d = opendir(g_dir);
    size_t n = 0;
    for (struct dirent *x; d && (x = readdir(d));) n += x->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void test_writer_files(void) {
    char path[128], tmp[160];
    path_in(path, sizeof path, "w.gguf");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(path);
    rl_err e = {{0}};
    uint64_t ne[1] = {8};
    float data[8] = {0};
    size_t before = count_dir();

    /* Abandoned writer: the temp file appears at begin and is removed by free; path never. */
    gguf_writer *w = gguf_writer_new(0);
    CHECK(gguf_w_tensor(w, "t", RL_F32, 1, ne, &e) == 0, "%s", e.msg);
    CHECK(gguf_writer_begin(w, path, &e) == 0, "%s", e.msg);
    CHECK(exists(tmp) && !exists(path), "tmp during write");
    CHECK(gguf_writer_write_tensor(w, data, 4, &e) == -1 && strstr(e.msg, "needs 32 bytes"), "%s",
          e.msg);
    CHECK(gguf_writer_finish(w, &e) == -1 && strstr(e.msg, "0 of 1"), "%s", e.msg);
    gguf_writer_free(w);
    CHECK(!exists(tmp) && !exists(path), "free removes tmp");
    CHECK(count_dir() == before, "no leftovers");

    /* Finished writer: renamed into place, tmp gone; an existing file is replaced atomically. */
    for (int round = 0; round < 2; round++) {
        w = gguf_writer_new(64);
        CHECK(gguf_w_u32(w, "round", (uint32_t)round, &e) == 0, "%s", e.msg);
        CHECK(gguf_w_tensor(w, "t", RL_F32, 1, ne, &e) == 0, "%s", e.msg);
        CHECK(gguf_writer_begin(w, path, &e) == 0, "%s", e.msg);
        CHECK(gguf_writer_write_tensor(w, data, sizeof data, &e) == 0, "%s", e.msg);
        CHECK(gguf_writer_write_tensor(w, data, sizeof data, &e) == -1, "extra tensor");
        CHECK(gguf_writer_finish(w, &e) == 0, "%s", e.msg);
        gguf_writer_free(w);
        CHECK(exists(path) && !exists(tmp), "renamed");
        gguf_file f;
        uint32_t v = 9;
        CHECK(gguf_open(&f, path, &e) == 0 && gguf_get_u32(&f, "round", &v, &e) == 1 &&
                  v == (uint32_t)round && f.alignment == 64, "round %d: %s", round, e.msg);
        gguf_close(&f);
    }
    CHECK(count_dir() == before + 1, "only the final file remains");

    /* A tensor written in parts: 12 + 20 bytes of 32, then the next tensor whole; the file reads
     * back with both tensors' bytes; a part past the declared size and a finish in the middle
     * of a tensor are refused. */
    {
        uint64_t ne2[1] = {8};
        float a[8], b[8];
        for (int i = 0; i < 8; i++) a[i] = (float)i, b[i] = (float)(100 + i);
        w = gguf_writer_new(32);
        CHECK(gguf_w_tensor(w, "a", RL_F32, 1, ne2, &e) == 0 && gguf_w_tensor(w, "b", RL_F32, 1, ne2, &e) == 0,
              "%s", e.msg);
        CHECK(gguf_writer_begin(w, path, &e) == 0, "%s", e.msg);
        CHECK(gguf_writer_write_part(w, a, 12, &e) == 0, "%s", e.msg);
        CHECK(gguf_writer_write_tensor(w, (const char *)a + 12, 20, &e) == -1, "whole write mid-tensor");
        CHECK(gguf_writer_finish(w, &e) == -1 && strstr(e.msg, "in part"), "%s", e.msg);
        CHECK(gguf_writer_write_part(w, (const char *)a + 12, 24, &e) == -1 && strstr(e.msg, "20 more bytes"),
              "%s", e.msg);
        CHECK(gguf_writer_write_part(w, (const char *)a + 12, 20, &e) == 0, "%s", e.msg);
        CHECK(gguf_writer_write_tensor(w, b, sizeof b, &e) == 0, "%s", e.msg);
        CHECK(gguf_writer_finish(w, &e) == 0, "%s", e.msg);
        gguf_writer_free(w);
        gguf_file f;
        CHECK(gguf_open(&f, path, &e) == 0 && f.n_tensors == 2, "%s", e.msg);
        if (f.n_tensors == 2)
            CHECK(!memcmp(f.tensors[0].data, a, 32) && !memcmp(f.tensors[1].data, b, 32), "part bytes");
        gguf_close(&f);
    }

    /* Writer misuse: each rejected with a message. */
    w = gguf_writer_new(32);
    CHECK(gguf_writer_new(3) == NULL && gguf_writer_new(48) == NULL, "non-pow2 alignment");
    CHECK(gguf_w_u32(w, "k", 1, &e) == 0 && gguf_w_u32(w, "k", 2, &e) == -1 &&
              strstr(e.msg, "duplicate key"), "dup key: %s", e.msg);
    CHECK(gguf_w_u32(w, "", 1, &e) == -1, "empty key");
    CHECK(gguf_w_i32(w, "general.alignment", 32, &e) == -1 && strstr(e.msg, "UINT32"), "%s",
          e.msg);
    CHECK(gguf_w_u32(w, "general.alignment", 64, &e) == -1, "alignment disagrees");
    CHECK(gguf_w_u32(w, "general.alignment", 32, &e) == 0, "alignment agrees");
    uint64_t ne33[2] = {33, 1}, big[2] = {1ull << 62, 1ull << 62};
    CHECK(gguf_w_tensor(w, "q", RL_Q8_0, 2, ne33, &e) == -1 && strstr(e.msg, "multiple"), "%s",
          e.msg);
    CHECK(gguf_w_tensor(w, "q", 4, 1, ne, &e) == -1 && strstr(e.msg, "type"), "removed type");
    CHECK(gguf_w_tensor(w, "q", RL_F32, 5, ne, &e) == -1, "n_dims 5");
    CHECK(gguf_w_tensor(w, "q", RL_F32, 2, big, &e) == -1 && strstr(e.msg, "overflow"), "%s",
          e.msg);
    char longname[80];
    memset(longname, 'n', 64);
    longname[64] = 0;
    CHECK(gguf_w_tensor(w, longname, RL_F32, 1, ne, &e) == -1, "64-byte name");
    longname[63] = 0;
    CHECK(gguf_w_tensor(w, longname, RL_F32, 1, ne, &e) == 0, "63-byte name: %s", e.msg);
    CHECK(gguf_w_tensor(w, longname, RL_F32, 1, ne, &e) == -1 && strstr(e.msg, "duplicate"),
          "dup tensor");
    uint8_t bad_bool = 2;
    CHECK(gguf_w_arr(w, "bb", GGUF_BOOL, &bad_bool, 1, &e) == -1, "bool 2");
    CHECK(gguf_writer_begin(w, "/nonexistent-dir/x.gguf", &e) == -1 && strstr(e.msg, "cannot"),
          "%s", e.msg);
    gguf_writer_free(w);
}

static void test_open_errors(void) {
    gguf_file f;
    rl_err e = {{0}};
    char path[128];
    CHECK(gguf_open(&f, "/nonexistent/x.gguf", &e) == -1 && strstr(e.msg, "cannot open"), "%s",
          e.msg);
    gguf_close(&f);
    CHECK(gguf_open(&f, g_dir, &e) == -1 && strstr(e.msg, "directory"), "%s", e.msg);
    path_in(path, sizeof path, "empty.gguf");
    FILE *fp = fopen(path, "wb");
    fclose(fp);
    CHECK(gguf_open(&f, path, &e) == -1 && strstr(e.msg, "empty"), "%s", e.msg);
    CHECK(gguf_open_memory(&f, "GGUX\3\0\0\0", 8, "m", &e) == -1 && strstr(e.msg, "magic"), "%s",
          e.msg);
    unlink(path);
}

/* Many tensors and keys: the hash index must find every one (and quickly). */
static void test_many(void) {
    char path[128];
    path_in(path, sizeof path, "many.gguf");
    rl_err e = {{0}};
    enum { N = 3000 };
    gguf_writer *w = gguf_writer_new(32);
    char name[64];
    uint64_t ne[1] = {32};
    int r = 0;
    for (int i = 0; i < N && !r; i++) {
        snprintf(name, sizeof name, "blk.%d.k", i);
        r = gguf_w_u32(w, name, (uint32_t)i, &e);
        snprintf(name, sizeof name, "blk.%d.weight", i);
        r = r || gguf_w_tensor(w, name, RL_Q8_0, 1, ne, &e);
    }
    r = r || gguf_writer_begin(w, path, &e);
    uint8_t blk[34] = {0};
    for (int i = 0; i < N && !r; i++) r = gguf_writer_write_tensor(w, blk, 34, &e);
    r = r || gguf_writer_finish(w, &e);
    gguf_writer_free(w);
    CHECK(r == 0, "%s", e.msg);
    gguf_file f;
    CHECK(gguf_open(&f, path, &e) == 0, "%s", e.msg);
    size_t bad = 0;
    for (int i = 0; i < N && f.base; i++) {
        uint32_t v = 0;
        snprintf(name, sizeof name, "blk.%d.k", i);
        bad += gguf_get_u32(&f, name, &v, &e) != 1 || v != (uint32_t)i;
        snprintf(name, sizeof name, "blk.%d.weight", i);
        const gguf_tensor *t = gguf_find_tensor(&f, name);
        bad += t != &f.tensors[i] || t->offset != (uint64_t)i * 64;
    }
    CHECK(bad == 0, "%zu lookups wrong", bad);
    gguf_close(&f);
    unlink(path);
}

static void rm_dir(void) {
    DIR *d = opendir(g_dir);
    char p[512];
    for (struct dirent *x; d && (x = readdir(d));) {
        if (x->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", g_dir, x->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(g_dir);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write")) {
        rl_err e = {{0}};
        if (sample_write(argv[2], 32, &e)) {
            fprintf(stderr, "test_gguf: %s\n", e.msg);
            return 1;
        }
        return 0;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/test_gguf.XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip(32);
    test_round_trip(64);
    test_round_trip(1);
    test_truncation();
    test_handmade();
    test_getters();
    test_writer_files();
    test_open_errors();
    test_many();
    rm_dir();
    return check_report("test_gguf");
}
