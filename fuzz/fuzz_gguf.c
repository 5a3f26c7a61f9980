/* libFuzzer target for the GGUF reader: gguf_open_memory over arbitrary bytes, then every getter
 * on every key (with each target type) and the first and last byte of every tensor, so ASan
 * catches any pointer or length the reader let through unchecked. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

static volatile uint8_t g_sink;

static void touch(const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) g_sink ^= b[i];
}

/* Calls every getter on one key. The key is copied into a NUL-terminated buffer; keys with an
 * embedded NUL cannot be looked up by C string, so they are skipped for lookup. */
static void exercise_kv(const gguf_file *f, const gguf_kv *kv) {
    char key[256];
    touch(kv->key.ptr, kv->key.len);
    if (kv->type == GGUF_STRING) touch(kv->strs[0].ptr, kv->strs[0].len);
    if (kv->type == GGUF_ARRAY) {
        for (uint64_t i = 0; i < kv->n; i++) {
            if (kv->arr_type == GGUF_STRING) {
                touch(kv->strs[i].ptr, kv->strs[i].len);
            } else {
                g_sink ^= (uint8_t)gguf_arr_i64(kv, i);
                double d = gguf_arr_f64(kv, i);
                g_sink ^= d > 0;
            }
        }
    }
    if (kv->key.len >= sizeof key || memchr(kv->key.ptr, 0, kv->key.len)) return;
    memcpy(key, kv->key.ptr, kv->key.len);
    key[kv->key.len] = 0;
    if (gguf_find(f, key) != kv) abort(); /* the index must find what the parser stored */
    rl_err e;
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float fl;
    bool b;
    gguf_str s;
    const gguf_kv *a;
    if (gguf_get_u32(f, key, &u32, &e) == 1) g_sink ^= (uint8_t)u32;
    if (gguf_get_u64(f, key, &u64, &e) == 1) g_sink ^= (uint8_t)u64;
    if (gguf_get_i64(f, key, &i64, &e) == 1) g_sink ^= (uint8_t)i64;
    if (gguf_get_f32(f, key, &fl, &e) == 1) g_sink ^= fl > 0;
    if (gguf_get_bool(f, key, &b, &e) == 1) g_sink ^= b;
    if (gguf_get_str(f, key, &s, &e) == 1) touch(s.ptr, s.len);
    for (uint32_t t = 0; t < GGUF_VTYPE_COUNT; t++)
        if (gguf_get_arr(f, key, t, &a, &e) == 1 && a->n) g_sink ^= a->data[0];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* Copy into an exact-size heap buffer so reading one byte past the input is an ASan error. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    gguf_file f;
    rl_err e;
    if (gguf_open_memory(&f, buf, size, "fuzz", &e) == 0) {
        for (size_t i = 0; i < f.n_kv; i++) exercise_kv(&f, &f.kv[i]);
        for (size_t i = 0; i < f.n_tensors; i++) {
            const gguf_tensor *t = &f.tensors[i];
            char name[64];
            memcpy(name, t->name.ptr, t->name.len); /* reader guarantees len < 64 */
            name[t->name.len] = 0;
            if (!memchr(t->name.ptr, 0, t->name.len) && gguf_find_tensor(&f, name) != t) abort();
            if (t->nbytes) {
                const uint8_t *p = t->data;
                g_sink ^= p[0] ^ p[t->nbytes - 1];
            }
        }
        gguf_close(&f);
    } else if (e.msg[0] == 0) {
        abort(); /* every rejection must say why */
    }
    free(buf);
    return 0;
}
