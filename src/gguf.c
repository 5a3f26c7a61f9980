/* GGUF reader and writer. Layout and validation rules: ../shared/reference/formats-and-ecosystem.md
 * §1.1; the checks are ordered so that no count read from the file reaches an allocation, a
 * multiplication or a pointer before it has been bounded by the bytes that remain.
 *
 * Decision on zero dimensions: ggml accepts ne[k] == 0 (an empty tensor), so we do too. Such a
 * tensor has nbytes 0, its data pointer may equal the end of the file, and no code here divides
 * by any ne. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "types.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_MAX_STRING ((uint64_t)1 << 30) /* 1 GiB, as ggml's GGUF_MAX_STRING_LENGTH */
#define GGUF_MAX_ARRAY ((uint64_t)1 << 30)  /* elements, as ggml's GGUF_MAX_ARRAY_ELEMENTS */
#define GGUF_MAX_NAME 64                    /* tensor names are shorter than this (ggml) */
#define GGUF_KV_MIN 12                      /* key length u64 + value type u32 */
#define GGUF_TI_MIN 24                      /* name length u64 + n_dims + type + offset */

/* Bytes of one scalar of each value type; 0 for STRING and ARRAY (variable) and bad ids. */
size_t gguf_vtype_size(uint32_t t) {
    static const size_t k[GGUF_VTYPE_COUNT] = {
        [GGUF_U8] = 1, [GGUF_I8] = 1, [GGUF_U16] = 2, [GGUF_I16] = 2, [GGUF_U32] = 4,
        [GGUF_I32] = 4, [GGUF_F32] = 4, [GGUF_BOOL] = 1, [GGUF_U64] = 8, [GGUF_I64] = 8,
        [GGUF_F64] = 8,
    };
    return t < GGUF_VTYPE_COUNT ? k[t] : 0;
}

const char *gguf_vtype_name(uint32_t t) {
    static const char *k[GGUF_VTYPE_COUNT] = {
        "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
        "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
    };
    return t < GGUF_VTYPE_COUNT ? k[t] : "unknown";
}

static bool is_int_type(uint32_t t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_U16: case GGUF_I16: case GGUF_U32: case GGUF_I32:
    case GGUF_U64: case GGUF_I64:
        return true;
    default:
        return false;
    }
}

/* Printable, bounded copy of a string from the file for messages (names may hold any bytes). */
static const char *show(char *buf, size_t cap, gguf_str s) {
    size_t o = 0;
    for (size_t i = 0; i < s.len && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c >= 0x20 && c != 0x7f && c != '\'' && c != '\\') {
            buf[o++] = (char)c;
        } else {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        }
    }
    if (o + 5 >= cap && cap > 4) memcpy(buf + cap - 4, "...", 4), o = cap - 1;
    buf[o < cap ? o : cap - 1] = 0;
    return buf;
}

bool gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

/* ---- name index: open addressing over keys and tensor names ---------------------------------- */

typedef struct htab {
    size_t mask;  /* capacity - 1, capacity a power of two >= 2 * entries */
    size_t *slot; /* [capacity] entry index + 1, 0 = empty */
} htab;

typedef struct gguf_index {
    htab kv, tensors;
} gguf_index;

static int htab_init(htab *h, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2; /* n is bounded by file size / 12, so this cannot overflow */
    h->slot = calloc(cap, sizeof *h->slot);
    h->mask = cap - 1;
    return h->slot ? 0 : -1;
}

/* Inserts entry idx named s; returns the index of an existing entry with the same name, or
 * SIZE_MAX when s was new. */
static size_t htab_insert(htab *h, gguf_str s, size_t idx, const gguf_str *(*name_of)(const void *,
                                                                                      size_t),
                          const void *arr) {
    size_t i = (size_t)hash_bytes(s.ptr, s.len) & h->mask;
    for (;; i = (i + 1) & h->mask) {
        if (!h->slot[i]) {
            h->slot[i] = idx + 1;
            return SIZE_MAX;
        }
        const gguf_str *o = name_of(arr, h->slot[i] - 1);
        if (o->len == s.len && memcmp(o->ptr, s.ptr, s.len) == 0) return h->slot[i] - 1;
    }
}

static size_t htab_find(const htab *h, const char *key, const gguf_str *(*name_of)(const void *,
                                                                                   size_t),
                        const void *arr) {
    if (!h->slot) return SIZE_MAX;
    size_t n = strlen(key);
    size_t i = (size_t)hash_bytes(key, n) & h->mask;
    for (; h->slot[i]; i = (i + 1) & h->mask) {
        const gguf_str *o = name_of(arr, h->slot[i] - 1);
        if (o->len == n && memcmp(o->ptr, key, n) == 0) return h->slot[i] - 1;
    }
    return SIZE_MAX;
}

static const gguf_str *kv_name(const void *arr, size_t i) { return &((const gguf_kv *)arr)[i].key; }
static const gguf_str *tensor_name(const void *arr, size_t i) {
    return &((const gguf_tensor *)arr)[i].name;
}

/* ---- reader ---------------------------------------------------------------------------------- */

typedef struct cursor {
    const uint8_t *base;
    size_t size, pos;
    const char *file; /* for messages */
    char where[160];  /* what is being parsed, e.g. "kv 3 'general.name'" */
    rl_err *e;
} cursor;

static size_t remaining(const cursor *c) { return c->size - c->pos; }

static int need(cursor *c, size_t n, const char *what) {
    if (n <= remaining(c)) return 0;
    return rl_fail(c->e, "%s: %s: %s at offset %zu needs %zu bytes but only %zu remain (file "
                   "truncated?)", c->file, c->where, what, c->pos, n, remaining(c));
}

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) { return get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

static int rd_u32(cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return -1;
    *v = get_u32(c->base + c->pos);
    c->pos += 4;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return -1;
    *v = get_u64(c->base + c->pos);
    c->pos += 8;
    return 0;
}

static int rd_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t len;
    char w[96];
    snprintf(w, sizeof w, "%s length", what);
    if (rd_u64(c, &len, w)) return -1;
    if (len > GGUF_MAX_STRING)
        return rl_fail(c->e, "%s: %s: %s length %llu exceeds the 1 GiB limit", c->file, c->where,
                       what, (unsigned long long)len);
    if (len > remaining(c))
        return rl_fail(c->e, "%s: %s: %s length %llu at offset %zu exceeds the %zu bytes that "
                       "remain", c->file, c->where, what, (unsigned long long)len, c->pos - 8,
                       remaining(c));
    s->ptr = (const char *)c->base + c->pos;
    s->len = (size_t)len;
    c->pos += (size_t)len;
    return 0;
}

/* Reads one value of scalar type t (not ARRAY) at the cursor; strings go to *s. */
static int rd_scalar(cursor *c, uint32_t t, gguf_str *s) {
    if (t == GGUF_STRING) return rd_str(c, s, "string");
    size_t sz = gguf_vtype_size(t);
    if (need(c, sz, gguf_vtype_name(t))) return -1;
    if (t == GGUF_BOOL && c->base[c->pos] > 1)
        return rl_fail(c->e, "%s: %s: BOOL value at offset %zu is %u, must be 0 or 1", c->file,
                       c->where, c->pos, c->base[c->pos]);
    c->pos += sz;
    return 0;
}

static int parse_kv(cursor *c, gguf_kv *kv, size_t i) {
    char kb[96];
    snprintf(c->where, sizeof c->where, "kv %zu", i);
    if (rd_str(c, &kv->key, "key")) return -1;
    if (kv->key.len == 0) return rl_fail(c->e, "%s: kv %zu: empty key", c->file, i);
    snprintf(c->where, sizeof c->where, "kv %zu key '%s'", i, show(kb, sizeof kb, kv->key));
    if (rd_u32(c, &kv->type, "value type")) return -1;
    if (kv->type >= GGUF_VTYPE_COUNT)
        return rl_fail(c->e, "%s: %s: unknown value type %u (valid 0..%d)", c->file, c->where,
                       kv->type, GGUF_VTYPE_COUNT - 1);
    kv->n = 1;
    if (kv->type != GGUF_ARRAY) {
        kv->data = c->base + c->pos;
        if (kv->type == GGUF_STRING) {
            kv->strs = malloc(sizeof *kv->strs);
            if (!kv->strs) return rl_fail(c->e, "%s: out of memory", c->file);
        }
        return rd_scalar(c, kv->type, kv->strs);
    }
    uint64_t n;
    if (rd_u32(c, &kv->arr_type, "array element type") || rd_u64(c, &n, "array count")) return -1;
    if (kv->arr_type == GGUF_ARRAY)
        return rl_fail(c->e, "%s: %s: nested arrays are not supported", c->file, c->where);
    if (kv->arr_type >= GGUF_VTYPE_COUNT)
        return rl_fail(c->e, "%s: %s: unknown array element type %u (valid 0..%d)", c->file,
                       c->where, kv->arr_type, GGUF_VTYPE_COUNT - 1);
    if (n > GGUF_MAX_ARRAY)
        return rl_fail(c->e, "%s: %s: array count %llu exceeds the limit of 2^30 elements",
                       c->file, c->where, (unsigned long long)n);
    /* Each string element needs at least its 8-byte length, so this bounds the allocation too. */
    size_t elem = kv->arr_type == GGUF_STRING ? 8 : gguf_vtype_size(kv->arr_type);
    if (n > remaining(c) / elem)
        return rl_fail(c->e, "%s: %s: array count %llu of %s needs at least %llu bytes but only "
                       "%zu remain", c->file, c->where, (unsigned long long)n,
                       gguf_vtype_name(kv->arr_type), (unsigned long long)(n * elem), remaining(c));
    kv->n = n;
    kv->data = c->base + c->pos;
    if (kv->arr_type == GGUF_STRING) {
        kv->strs = malloc((n ? (size_t)n : 1) * sizeof *kv->strs);
        if (!kv->strs) return rl_fail(c->e, "%s: out of memory", c->file);
        for (size_t j = 0; j < n; j++) {
            snprintf(c->where, sizeof c->where, "kv %zu key '%s' element %zu", i, kb, j);
            if (rd_str(c, &kv->strs[j], "string")) return -1;
        }
        return 0;
    }
    if (kv->arr_type == GGUF_BOOL)
        for (size_t j = 0; j < n; j++)
            if (c->base[c->pos + j] > 1)
                return rl_fail(c->e, "%s: %s: BOOL element %zu is %u, must be 0 or 1", c->file,
                               c->where, j, c->base[c->pos + j]);
    c->pos += (size_t)n * elem;
    return 0;
}

static uint64_t align_up(uint64_t o, uint64_t a) { return o + (a - o % a) % a; }

static int parse_tensor_info(cursor *c, gguf_tensor *t, size_t i) {
    char nb[96];
    snprintf(c->where, sizeof c->where, "tensor %zu", i);
    if (rd_str(c, &t->name, "tensor name")) return -1;
    show(nb, sizeof nb, t->name);
    if (t->name.len == 0) return rl_fail(c->e, "%s: tensor %zu: empty tensor name", c->file, i);
    if (t->name.len >= GGUF_MAX_NAME)
        return rl_fail(c->e, "%s: tensor %zu: name '%s' is %zu bytes long, the limit is %d",
                       c->file, i, nb, t->name.len, GGUF_MAX_NAME - 1);
    snprintf(c->where, sizeof c->where, "tensor '%s'", nb);
    if (rd_u32(c, &t->n_dims, "n_dims")) return -1;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return rl_fail(c->e, "%s: tensor '%s': n_dims is %u, must be 1..%d", c->file, nb,
                       t->n_dims, GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims) continue;
        if (rd_u64(c, &t->ne[d], "dimension")) return -1;
        if (t->ne[d] > (uint64_t)INT64_MAX)
            return rl_fail(c->e, "%s: tensor '%s': ne[%u] = %llu is out of range (max 2^63-1)",
                           c->file, nb, d, (unsigned long long)t->ne[d]);
    }
    if (rd_u32(c, &t->type, "type") || rd_u64(c, &t->offset, "offset")) return -1;
    const rl_type_info *ti = rl_type_get(t->type);
    if (!ti && rl_type_is_rawloop(t->type))
        return rl_fail(c->e, "%s: tensor '%s': rawloop type id %u is unknown to this build "
                       "(written by a newer rawloop?)", c->file, nb, t->type);
    if (!ti)
        return rl_fail(c->e, "%s: tensor '%s': unknown or unsupported ggml type id %u", c->file,
                       nb, t->type);
    if (t->ne[0] % ti->blck)
        return rl_fail(c->e, "%s: tensor '%s': ne[0] = %llu is not a multiple of the %s block "
                       "size %zu", c->file, nb, (unsigned long long)t->ne[0], ti->name, ti->blck);
    /* Element count must fit int64 like ggml's; byte size must fit size_t and leave room for
     * padding, so later sums and pointer arithmetic cannot wrap. */
    uint64_t nel = 1, bytes = t->ne[0] / ti->blck;
    bool ovf = __builtin_mul_overflow(bytes, (uint64_t)ti->size, &bytes);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        ovf |= __builtin_mul_overflow(nel, t->ne[d], &nel);
        if (d > 0) ovf |= __builtin_mul_overflow(bytes, t->ne[d], &bytes);
    }
    if (ovf || nel > (uint64_t)INT64_MAX || bytes > SIZE_MAX / 2)
        return rl_fail(c->e, "%s: tensor '%s': element count or byte size overflows (ne = "
                       "%llu x %llu x %llu x %llu of %s)", c->file, nb,
                       (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                       (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], ti->name);
    t->nbytes = (size_t)bytes;
    return 0;
}

static int check_alignment(gguf_file *f, rl_err *e) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find(f, "general.alignment");
    if (!kv) return 0;
    if (kv->type != GGUF_U32)
        return rl_fail(e, "%s: key 'general.alignment' must be UINT32, found %s", f->name,
                       kv->type == GGUF_ARRAY ? "ARRAY" : gguf_vtype_name(kv->type));
    uint32_t a = get_u32(kv->data);
    if (a == 0 || (a & (a - 1)))
        return rl_fail(e, "%s: key 'general.alignment' is %u, must be a non-zero power of two",
                       f->name, a);
    f->alignment = a;
    return 0;
}

/* A tensor in one of rawloop's own types (RQ2, ...) is only trusted when the file says which
 * version of those layouts it was written with: RL_FORMAT_VERSION_KEY, a uint32 from 1 to the
 * version this build knows. Layouts may change between versions, and without the key a file
 * could be a foreign one that happens to reuse the ids. */
static int check_format_version(gguf_file *f, rl_err *e) {
    const gguf_tensor *t = NULL;
    for (size_t i = 0; i < f->n_tensors && !t; i++)
        if (rl_type_is_rawloop(f->tensors[i].type)) t = &f->tensors[i];
    if (!t) return 0;
    char nb[96];
    show(nb, sizeof nb, t->name);
    const gguf_kv *kv = gguf_find(f, RL_FORMAT_VERSION_KEY);
    if (!kv)
        return rl_fail(e, "%s: tensor '%s' has rawloop's own type %s, but the file lacks the key "
                       "'%s' (UINT32, %u) that files with rawloop types must carry", f->name, nb,
                       rl_type_name(t->type), RL_FORMAT_VERSION_KEY, RL_FORMAT_VERSION);
    if (kv->type != GGUF_U32)
        return rl_fail(e, "%s: key '%s' must be UINT32, found %s", f->name,
                       RL_FORMAT_VERSION_KEY, gguf_vtype_name(kv->type));
    uint32_t v = (uint32_t)kv->data[0] | (uint32_t)kv->data[1] << 8 |
                 (uint32_t)kv->data[2] << 16 | (uint32_t)kv->data[3] << 24;
    if (v < 1 || v > RL_FORMAT_VERSION)
        return rl_fail(e, "%s: key '%s' is %u; this build reads rawloop format version 1%s",
                       f->name, RL_FORMAT_VERSION_KEY, v,
                       v > RL_FORMAT_VERSION ? " (the file was written by a newer rawloop)" : "");
    return 0;
}

static int parse(gguf_file *f, rl_err *e) {
    cursor c = {.base = f->base, .size = f->size, .file = f->name, .e = e};
    snprintf(c.where, sizeof c.where, "header");
    if (f->size == 0) return rl_fail(e, "%s: empty file (0 bytes), not a GGUF file", f->name);
    if (f->size < 4 || memcmp(f->base, GGUF_MAGIC, 4) != 0) {
        char mb[40];
        gguf_str m = {(const char *)f->base, f->size < 4 ? f->size : 4};
        return rl_fail(e, "%s: bad magic '%s', expected 'GGUF' (not a GGUF file)", f->name,
                       show(mb, sizeof mb, m));
    }
    c.pos = 4;
    uint32_t v;
    if (rd_u32(&c, &v, "version")) return -1;
    if (v == 0 || v == 1 || (v & 0xFFFF) == 0) {
        if (v != 0 && (v & 0xFFFF) == 0)
            return rl_fail(e, "%s: version 0x%08x looks byte-swapped: the file has the wrong "
                           "endianness (big-endian GGUF is not supported)", f->name, v);
        return rl_fail(e, "%s: GGUF version %u is not supported (need 2 or 3)", f->name, v);
    }
    if (v > 3) return rl_fail(e, "%s: GGUF version %u is not supported (need 2 or 3)", f->name, v);
    f->version = v;
    uint64_t nt, nkv;
    if (rd_u64(&c, &nt, "tensor count") || rd_u64(&c, &nkv, "kv count")) return -1;
    /* Bound both counts by what the remaining bytes could hold before allocating anything. */
    if (nkv > remaining(&c) / GGUF_KV_MIN)
        return rl_fail(e, "%s: kv count %llu is impossible: %zu bytes remain, each kv needs at "
                       "least %d", f->name, (unsigned long long)nkv, remaining(&c), GGUF_KV_MIN);
    if (nt > (remaining(&c) - (size_t)nkv * GGUF_KV_MIN) / GGUF_TI_MIN)
        return rl_fail(e, "%s: tensor count %llu is impossible: %zu bytes remain, each tensor "
                       "info needs at least %d", f->name, (unsigned long long)nt, remaining(&c),
                       GGUF_TI_MIN);
    gguf_index *ix = calloc(1, sizeof *ix);
    f->index = ix;
    f->kv = calloc(nkv ? (size_t)nkv : 1, sizeof *f->kv);
    f->tensors = calloc(nt ? (size_t)nt : 1, sizeof *f->tensors);
    if (!ix || !f->kv || !f->tensors || htab_init(&ix->kv, (size_t)nkv) ||
        htab_init(&ix->tensors, (size_t)nt))
        return rl_fail(e, "%s: out of memory", f->name);

    for (size_t i = 0; i < nkv; i++) {
        f->n_kv = i + 1; /* so gguf_close frees what this kv allocated */
        if (parse_kv(&c, &f->kv[i], i)) return -1;
        size_t dup = htab_insert(&ix->kv, f->kv[i].key, i, kv_name, f->kv);
        if (dup != SIZE_MAX) {
            char kb[96];
            return rl_fail(e, "%s: duplicate key '%s' (kv %zu and kv %zu)", f->name,
                           show(kb, sizeof kb, f->kv[i].key), dup, i);
        }
    }
    if (check_alignment(f, e)) return -1;

    for (size_t i = 0; i < nt; i++) {
        f->n_tensors = i + 1;
        if (parse_tensor_info(&c, &f->tensors[i], i)) return -1;
        size_t dup = htab_insert(&ix->tensors, f->tensors[i].name, i, tensor_name, f->tensors);
        if (dup != SIZE_MAX) {
            char nb[96];
            return rl_fail(e, "%s: duplicate tensor name '%s' (tensors %zu and %zu)", f->name,
                           show(nb, sizeof nb, f->tensors[i].name), dup, i);
        }
    }

    if (check_format_version(f, e)) return -1;

    /* Tensor data: packed in order, each padded to the alignment, after the aligned header. */
    f->data_offset = (size_t)align_up(c.pos, f->alignment);
    if (nt > 0 && f->data_offset > f->size)
        return rl_fail(e, "%s: header ends at %zu but the file is only %zu bytes: no room for "
                       "the data section at %zu", f->name, c.pos, f->size, f->data_offset);
    size_t avail = nt > 0 ? f->size - f->data_offset : 0;
    uint64_t expect = 0;
    for (size_t i = 0; i < nt; i++) {
        gguf_tensor *t = &f->tensors[i];
        char nb[96];
        show(nb, sizeof nb, t->name);
        if (t->offset != expect)
            return rl_fail(e, "%s: tensor '%s': offset %llu is not where the previous tensor "
                           "ends (expected %llu)", f->name, nb, (unsigned long long)t->offset,
                           (unsigned long long)expect);
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return rl_fail(e, "%s: tensor '%s': data [%llu, %llu) of the data section extends "
                           "past the end of the file (the data section holds %zu bytes)",
                           f->name, nb, (unsigned long long)t->offset,
                           (unsigned long long)t->offset + t->nbytes, avail);
        t->data = f->base + f->data_offset + t->offset;
        /* offset + nbytes <= avail < SIZE_MAX, so aligning cannot wrap. */
        expect = align_up(t->offset + t->nbytes, f->alignment);
    }
    return 0;
}

static void init_file(gguf_file *f, const char *name) {
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name ? name : "(memory)");
}

int gguf_open_memory(gguf_file *f, const void *buf, size_t size, const char *name, rl_err *e) {
    init_file(f, name);
    f->base = buf;
    f->size = size;
    if (size && !buf) return rl_fail(e, "%s: NULL buffer", f->name);
    if (parse(f, e)) {
        gguf_close(f);
        return -1;
    }
    return 0;
}

int gguf_open(gguf_file *f, const char *path, rl_err *e) {
    init_file(f, path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rl_fail(e, "%s: cannot open: %s", f->name, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return rl_fail(e, "%s: cannot stat: %s", f->name, strerror(err));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return rl_fail(e, "%s: is a directory, not a GGUF file", f->name);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return rl_fail(e, "%s: not a regular file (cannot be memory-mapped)", f->name);
    }
    if (st.st_size == 0) {
        close(fd);
        return rl_fail(e, "%s: empty file (0 bytes), not a GGUF file", f->name);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (m == MAP_FAILED) return rl_fail(e, "%s: mmap failed: %s", f->name, strerror(err));
    f->map = m;
    f->base = m;
    f->size = (size_t)st.st_size;
    if (parse(f, e)) {
        gguf_close(f);
        return -1;
    }
    return 0;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    for (size_t i = 0; f->kv && i < f->n_kv; i++) free(f->kv[i].strs);
    free(f->kv);
    free(f->tensors);
    gguf_index *ix = f->index;
    if (ix) {
        free(ix->kv.slot);
        free(ix->tensors.slot);
        free(ix);
    }
    if (f->map) munmap(f->map, f->size);
    char name[sizeof f->name];
    memcpy(name, f->name, sizeof name);
    memset(f, 0, sizeof *f);
    memcpy(f->name, name, sizeof name);
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    const gguf_index *ix = f->index;
    if (!ix) return NULL;
    size_t i = htab_find(&ix->kv, key, kv_name, f->kv);
    return i < f->n_kv ? &f->kv[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    const gguf_index *ix = f->index;
    if (!ix) return NULL;
    size_t i = htab_find(&ix->tensors, name, tensor_name, f->tensors);
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

/* ---- getters --------------------------------------------------------------------------------- */

/* An integer of any width and signedness as sign + magnitude, so range checks are exact. */
typedef struct wide_int {
    bool neg;
    uint64_t mag;
} wide_int;

static wide_int read_int(const uint8_t *p, uint32_t t) {
    int64_t s; /* the casts below are modular in GCC and Clang */
    switch (t) {
    case GGUF_U8: return (wide_int){false, p[0]};
    case GGUF_I8: s = (int8_t)p[0]; break;
    case GGUF_U16: return (wide_int){false, (uint64_t)p[0] | (uint64_t)p[1] << 8};
    case GGUF_I16: s = (int16_t)(uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_U32: return (wide_int){false, get_u32(p)};
    case GGUF_I32: s = (int32_t)get_u32(p); break;
    case GGUF_U64: return (wide_int){false, get_u64(p)};
    case GGUF_I64: s = (int64_t)get_u64(p); break;
    default: return (wide_int){false, 0};
    }
    return s < 0 ? (wide_int){true, (uint64_t)0 - (uint64_t)s} : (wide_int){false, (uint64_t)s};
}

static double read_float(const uint8_t *p, uint32_t t) {
    if (t == GGUF_F32) {
        float x;
        memcpy(&x, &(uint32_t){get_u32(p)}, 4);
        return x;
    }
    if (t == GGUF_F64) {
        double x;
        memcpy(&x, &(uint64_t){get_u64(p)}, 8);
        return x;
    }
    wide_int w = read_int(p, t);
    return w.neg ? -(double)w.mag : (double)w.mag;
}

static int wrong_type(const gguf_file *f, const gguf_kv *kv, const char *want, rl_err *e) {
    char kb[96];
    if (kv->type == GGUF_ARRAY)
        return rl_fail(e, "%s: key '%s' must be %s, found ARRAY of %s", f->name,
                       show(kb, sizeof kb, kv->key), want, gguf_vtype_name(kv->arr_type));
    return rl_fail(e, "%s: key '%s' must be %s, found %s", f->name, show(kb, sizeof kb, kv->key),
                   want, gguf_vtype_name(kv->type));
}

/* Shared by the integer getters: the value as sign + magnitude, or an error for non-integers. */
static int get_int(const gguf_file *f, const char *key, wide_int *w, const char *want,
                   rl_err *e) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    if (!is_int_type(kv->type)) return wrong_type(f, kv, want, e);
    *w = read_int(kv->data, kv->type);
    return 1;
}

static int out_of_range(const gguf_file *f, const char *key, wide_int w, const char *want,
                        rl_err *e) {
    return rl_fail(e, "%s: key '%s' = %s%llu is out of range for %s", f->name, key,
                   w.neg ? "-" : "", (unsigned long long)w.mag, want);
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, rl_err *e) {
    wide_int w = {false, 0};
    int r = get_int(f, key, &w, "an integer (UINT32)", e);
    if (r <= 0) return r;
    if (w.neg || w.mag > UINT32_MAX) return out_of_range(f, key, w, "UINT32", e);
    *out = (uint32_t)w.mag;
    return 1;
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, rl_err *e) {
    wide_int w = {false, 0};
    int r = get_int(f, key, &w, "an integer (UINT64)", e);
    if (r <= 0) return r;
    if (w.neg) return out_of_range(f, key, w, "UINT64", e);
    *out = w.mag;
    return 1;
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, rl_err *e) {
    wide_int w = {false, 0};
    int r = get_int(f, key, &w, "an integer (INT64)", e);
    if (r <= 0) return r;
    if (w.neg ? w.mag > (uint64_t)INT64_MAX + 1 : w.mag > (uint64_t)INT64_MAX)
        return out_of_range(f, key, w, "INT64", e);
    *out = w.neg ? (int64_t)(0 - w.mag) : (int64_t)w.mag;
    return 1;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out, rl_err *e) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_F32 && kv->type != GGUF_F64 && !is_int_type(kv->type))
        return wrong_type(f, kv, "a number (FLOAT32)", e);
    double x = read_float(kv->data, kv->type);
    if (isfinite(x) && (x > FLT_MAX || x < -FLT_MAX)) /* infinities pass through unchanged */
        return rl_fail(e, "%s: key '%s' = %g is out of range for FLOAT32", f->name, key, x);
    *out = (float)x;
    return 1;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out, rl_err *e) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_BOOL) return wrong_type(f, kv, "BOOL", e);
    *out = kv->data[0] != 0;
    return 1;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, rl_err *e) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_STRING) return wrong_type(f, kv, "STRING", e);
    *out = kv->strs[0];
    return 1;
}

int gguf_get_arr(const gguf_file *f, const char *key, uint32_t elem_type, const gguf_kv **out,
                 rl_err *e) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_ARRAY || kv->arr_type != elem_type) {
        char want[48];
        snprintf(want, sizeof want, "ARRAY of %s", gguf_vtype_name(elem_type));
        return wrong_type(f, kv, want, e);
    }
    *out = kv;
    return 1;
}

int64_t gguf_arr_i64(const gguf_kv *kv, uint64_t i) {
    const uint8_t *p = kv->data + i * gguf_vtype_size(kv->arr_type);
    if (kv->arr_type == GGUF_F32 || kv->arr_type == GGUF_F64) {
        /* Truncated toward zero and saturated (NaN gives 0): an out-of-range cast would be UB. */
        double x = read_float(p, kv->arr_type);
        if (!(x == x)) return 0;
        if (x >= 9223372036854775807.0) return INT64_MAX;
        if (x <= -9223372036854775808.0) return INT64_MIN;
        return (int64_t)x;
    }
    if (kv->arr_type == GGUF_BOOL) return p[0];
    wide_int w = read_int(p, kv->arr_type);
    return w.neg ? (int64_t)(0 - w.mag) : (int64_t)w.mag;
}

double gguf_arr_f64(const gguf_kv *kv, uint64_t i) {
    const uint8_t *p = kv->data + i * gguf_vtype_size(kv->arr_type);
    if (kv->arr_type == GGUF_BOOL) return p[0];
    return read_float(p, kv->arr_type);
}

/* ---- writer ---------------------------------------------------------------------------------- */

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
    bool oom; /* sticky: an append failed */
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->oom || n == 0) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put_u32(buf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}

static void put_u64(buf *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_str(buf *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}

struct gguf_writer {
    size_t alignment;
    buf kvs, infos;   /* serialized kv records and tensor infos */
    size_t n_kv;
    char **keys;      /* [n_kv] for duplicate detection */
    size_t n_tensors;
    char **names;     /* [n_tensors] */
    size_t *sizes;    /* [n_tensors] nbytes of each tensor */
    uint64_t data_size; /* padded size of the data section so far */
    bool has_align_kv;
    bool has_rawloop_type; /* a tensor of a rawloop type: begin adds RL_FORMAT_VERSION_KEY */
    FILE *fp;
    char *path, *tmp;
    size_t next; /* next tensor to write */
    size_t part; /* bytes of tensor `next` written so far (gguf_writer_write_part) */
};

static bool pow2(size_t a) { return a && !(a & (a - 1)); }

static int w_add_key(gguf_writer *w, const char *key, uint32_t type, rl_err *e) {
    if (!key || !*key) return rl_fail(e, "gguf writer: empty key");
    if (type != GGUF_U32 && !strcmp(key, "general.alignment"))
        return rl_fail(e, "gguf writer: key 'general.alignment' must be UINT32, given %s",
                       gguf_vtype_name(type));
    if (strlen(key) > GGUF_MAX_STRING) return rl_fail(e, "gguf writer: key too long");
    if (w->fp) return rl_fail(e, "gguf writer: key '%s' added after the header was written", key);
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key)) return rl_fail(e, "gguf writer: duplicate key '%s'", key);
    char **k = realloc(w->keys, (w->n_kv + 1) * sizeof *k);
    if (!k) return rl_fail(e, "gguf writer: out of memory");
    w->keys = k;
    if (!(k[w->n_kv] = strdup(key))) return rl_fail(e, "gguf writer: out of memory");
    w->n_kv++;
    put_str(&w->kvs, key, strlen(key));
    return 0;
}

static int w_done(gguf_writer *w, rl_err *e) {
    return w->kvs.oom || w->infos.oom ? rl_fail(e, "gguf writer: out of memory") : 0;
}

/* general.alignment is managed by the writer: a caller's value must agree with w->alignment and
 * is written once (so copying every kv of a file with the same alignment just works). */
static int w_alignment_key(gguf_writer *w, const char *key, uint32_t type, const uint8_t *val,
                           rl_err *e) {
    if (strcmp(key, "general.alignment")) return 0;
    if (type != GGUF_U32)
        return rl_fail(e, "gguf writer: key 'general.alignment' must be UINT32, given %s",
                       gguf_vtype_name(type));
    uint32_t a = get_u32(val);
    if (a != w->alignment)
        return rl_fail(e, "gguf writer: general.alignment %u differs from the writer's %zu", a,
                       w->alignment);
    return w->has_align_kv ? 1 : 0;
}

static int w_scalar(gguf_writer *w, const char *key, uint32_t type, const void *v, rl_err *e) {
    uint8_t le[8];
    size_t n = gguf_vtype_size(type);
    uint64_t x = 0;
    memcpy(&x, v, n); /* host is little-endian (checked by the reader's byte order rules) */
    for (size_t i = 0; i < 8; i++) le[i] = (uint8_t)(x >> (8 * i));
    int r = w_alignment_key(w, key, type, le, e);
    if (r) return r < 0 ? -1 : 0;
    if (w_add_key(w, key, type, e)) return -1;
    if (!strcmp(key, "general.alignment")) w->has_align_kv = true;
    put_u32(&w->kvs, type);
    put(&w->kvs, le, n);
    return w_done(w, e);
}

gguf_writer *gguf_writer_new(size_t alignment) {
    if (alignment == 0) alignment = GGUF_DEFAULT_ALIGNMENT;
    if (!pow2(alignment) || alignment > UINT32_MAX) return NULL;
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->alignment = alignment;
    if (alignment != GGUF_DEFAULT_ALIGNMENT &&
        gguf_w_u32(w, "general.alignment", (uint32_t)alignment, NULL)) {
        gguf_writer_free(w);
        return NULL;
    }
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    if (w->fp) {
        fclose(w->fp);
        unlink(w->tmp);
    }
    for (size_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    for (size_t i = 0; i < w->n_tensors; i++) free(w->names[i]);
    free(w->keys);
    free(w->names);
    free(w->sizes);
    free(w->kvs.p);
    free(w->infos.p);
    free(w->path);
    free(w->tmp);
    free(w);
}

int gguf_w_u32(gguf_writer *w, const char *key, uint32_t v, rl_err *e) {
    return w_scalar(w, key, GGUF_U32, &v, e);
}
int gguf_w_i32(gguf_writer *w, const char *key, int32_t v, rl_err *e) {
    return w_scalar(w, key, GGUF_I32, &v, e);
}
int gguf_w_u64(gguf_writer *w, const char *key, uint64_t v, rl_err *e) {
    return w_scalar(w, key, GGUF_U64, &v, e);
}
int gguf_w_f32(gguf_writer *w, const char *key, float v, rl_err *e) {
    return w_scalar(w, key, GGUF_F32, &v, e);
}
int gguf_w_bool(gguf_writer *w, const char *key, bool v, rl_err *e) {
    uint8_t b = v ? 1 : 0;
    return w_scalar(w, key, GGUF_BOOL, &b, e);
}

int gguf_w_str(gguf_writer *w, const char *key, const char *v, rl_err *e) {
    if (w_add_key(w, key, GGUF_STRING, e)) return -1;
    put_u32(&w->kvs, GGUF_STRING);
    put_str(&w->kvs, v, strlen(v));
    return w_done(w, e);
}

static int check_arr(const char *key, uint32_t elem_type, size_t n, rl_err *e) {
    if (elem_type >= GGUF_VTYPE_COUNT || elem_type == GGUF_ARRAY)
        return rl_fail(e, "gguf writer: key '%s': bad array element type %u", key, elem_type);
    if (n > GGUF_MAX_ARRAY)
        return rl_fail(e, "gguf writer: key '%s': %zu elements exceed the 2^30 limit", key, n);
    return 0;
}

int gguf_w_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *data, size_t n,
               rl_err *e) {
    if (check_arr(key, elem_type, n, e)) return -1;
    if (elem_type == GGUF_STRING)
        return rl_fail(e, "gguf writer: key '%s': use gguf_w_arr_str for string arrays", key);
    size_t sz = gguf_vtype_size(elem_type);
    if (elem_type == GGUF_BOOL)
        for (size_t i = 0; i < n; i++)
            if (((const uint8_t *)data)[i] > 1)
                return rl_fail(e, "gguf writer: key '%s': BOOL element %zu is not 0 or 1", key, i);
    if (w_add_key(w, key, GGUF_ARRAY, e)) return -1;
    put_u32(&w->kvs, GGUF_ARRAY);
    put_u32(&w->kvs, elem_type);
    put_u64(&w->kvs, n);
    put(&w->kvs, data, n * sz); /* host is little-endian */
    return w_done(w, e);
}

int gguf_w_arr_str(gguf_writer *w, const char *key, const gguf_str *strs, size_t n, rl_err *e) {
    if (check_arr(key, GGUF_STRING, n, e) || w_add_key(w, key, GGUF_ARRAY, e)) return -1;
    put_u32(&w->kvs, GGUF_ARRAY);
    put_u32(&w->kvs, GGUF_STRING);
    put_u64(&w->kvs, n);
    for (size_t i = 0; i < n; i++) put_str(&w->kvs, strs[i].ptr, strs[i].len);
    return w_done(w, e);
}

int gguf_w_copy_kv(gguf_writer *w, const gguf_kv *kv, rl_err *e) {
    char key[512];
    if (kv->key.len >= sizeof key) return rl_fail(e, "gguf writer: key too long to copy");
    memcpy(key, kv->key.ptr, kv->key.len);
    key[kv->key.len] = 0;
    if (kv->type == GGUF_ARRAY) {
        if (kv->arr_type == GGUF_STRING) return gguf_w_arr_str(w, key, kv->strs, (size_t)kv->n, e);
        return gguf_w_arr(w, key, kv->arr_type, kv->data, (size_t)kv->n, e);
    }
    if (kv->type == GGUF_STRING) {
        if (w_add_key(w, key, GGUF_STRING, e)) return -1;
        put_u32(&w->kvs, GGUF_STRING);
        put_str(&w->kvs, kv->strs[0].ptr, kv->strs[0].len);
        return w_done(w, e);
    }
    if (kv->type >= GGUF_VTYPE_COUNT) return rl_fail(e, "gguf writer: bad value type %u", kv->type);
    int r = w_alignment_key(w, key, kv->type, kv->data, e);
    if (r) return r < 0 ? -1 : 0;
    if (w_add_key(w, key, kv->type, e)) return -1;
    if (!strcmp(key, "general.alignment")) w->has_align_kv = true;
    put_u32(&w->kvs, kv->type);
    put(&w->kvs, kv->data, gguf_vtype_size(kv->type)); /* already little-endian bytes */
    return w_done(w, e);
}

int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                  const uint64_t *ne, rl_err *e) {
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len >= GGUF_MAX_NAME)
        return rl_fail(e, "gguf writer: tensor name '%s' must be 1..%d bytes", name ? name : "",
                       GGUF_MAX_NAME - 1);
    if (w->fp) return rl_fail(e, "gguf writer: tensor '%s' added after the header", name);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return rl_fail(e, "gguf writer: tensor '%s': n_dims %u must be 1..4", name, n_dims);
    const rl_type_info *ti = rl_type_get(type);
    if (!ti) return rl_fail(e, "gguf writer: tensor '%s': unknown type id %u", name, type);
    if (ne[0] % ti->blck)
        return rl_fail(e, "gguf writer: tensor '%s': ne[0] = %llu is not a multiple of the %s "
                       "block size %zu", name, (unsigned long long)ne[0], ti->name, ti->blck);
    uint64_t bytes = ne[0] / ti->blck;
    bool ovf = __builtin_mul_overflow(bytes, (uint64_t)ti->size, &bytes);
    for (uint32_t d = 1; d < n_dims; d++) ovf |= __builtin_mul_overflow(bytes, ne[d], &bytes);
    if (ovf || bytes > SIZE_MAX / 4 || w->data_size > SIZE_MAX / 4)
        return rl_fail(e, "gguf writer: tensor '%s': size overflows", name);
    for (size_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->names[i], name))
            return rl_fail(e, "gguf writer: duplicate tensor name '%s'", name);
    char **nm = realloc(w->names, (w->n_tensors + 1) * sizeof *nm);
    if (nm) w->names = nm;
    size_t *sz = nm ? realloc(w->sizes, (w->n_tensors + 1) * sizeof *sz) : NULL;
    if (sz) w->sizes = sz;
    if (!nm || !sz || !(nm[w->n_tensors] = strdup(name)))
        return rl_fail(e, "gguf writer: out of memory");
    sz[w->n_tensors++] = (size_t)bytes;
    w->has_rawloop_type |= rl_type_is_rawloop(type);
    put_str(&w->infos, name, len);
    put_u32(&w->infos, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) put_u64(&w->infos, ne[d]);
    put_u32(&w->infos, type);
    put_u64(&w->infos, w->data_size);
    w->data_size = align_up(w->data_size + bytes, w->alignment);
    return w_done(w, e);
}

static const uint8_t k_zeros[4096];

static int w_write(gguf_writer *w, const void *p, size_t n, rl_err *e) {
    if (n && fwrite(p, 1, n, w->fp) != n)
        return rl_fail(e, "%s: write failed: %s", w->tmp, strerror(errno));
    return 0;
}

static int w_pad(gguf_writer *w, uint64_t written, rl_err *e) {
    size_t pad = (size_t)(align_up(written, w->alignment) - written);
    while (pad) {
        size_t n = pad < sizeof k_zeros ? pad : sizeof k_zeros;
        if (w_write(w, k_zeros, n, e)) return -1;
        pad -= n;
    }
    return 0;
}

int gguf_writer_begin(gguf_writer *w, const char *path, rl_err *e) {
    if (w->fp || w->path) return rl_fail(e, "gguf writer: begin called twice");
    /* files with rawloop's own types always say which layout version they hold */
    bool has_version = false;
    for (size_t i = 0; i < w->n_kv; i++) has_version |= !strcmp(w->keys[i], RL_FORMAT_VERSION_KEY);
    if (w->has_rawloop_type && !has_version &&
        gguf_w_u32(w, RL_FORMAT_VERSION_KEY, RL_FORMAT_VERSION, e) < 0)
        return -1;
    if (w_done(w, e)) return -1;
    size_t n = strlen(path);
    w->path = strdup(path);
    w->tmp = malloc(n + 5);
    if (!w->path || !w->tmp) return rl_fail(e, "gguf writer: out of memory");
    memcpy(w->tmp, path, n);
    memcpy(w->tmp + n, ".tmp", 5);
    w->fp = fopen(w->tmp, "wb");
    if (!w->fp) return rl_fail(e, "%s: cannot create: %s", w->tmp, strerror(errno));
    buf h = {0};
    put(&h, GGUF_MAGIC, 4);
    put_u32(&h, 3);
    put_u64(&h, w->n_tensors);
    put_u64(&h, w->n_kv);
    if (h.oom) {
        free(h.p);
        return rl_fail(e, "gguf writer: out of memory");
    }
    int r = w_write(w, h.p, h.len, e) || w_write(w, w->kvs.p, w->kvs.len, e) ||
            w_write(w, w->infos.p, w->infos.len, e) ||
            w_pad(w, (uint64_t)h.len + w->kvs.len + w->infos.len, e);
    free(h.p);
    return r ? -1 : 0;
}

int gguf_writer_write_part(gguf_writer *w, const void *data, size_t nbytes, rl_err *e) {
    if (!w->fp) return rl_fail(e, "gguf writer: write before begin");
    if (w->next >= w->n_tensors)
        return rl_fail(e, "%s: more tensors written than the %zu declared", w->path, w->n_tensors);
    size_t size = w->sizes[w->next];
    if (nbytes > size - w->part)
        return rl_fail(e, "%s: tensor '%s' needs %zu more bytes, given %zu", w->path,
                       w->names[w->next], size - w->part, nbytes);
    if (w_write(w, data, nbytes, e)) return -1;
    w->part += nbytes;
    if (w->part == size) {
        if (w_pad(w, size, e)) return -1;
        w->next++;
        w->part = 0;
    }
    return 0;
}

int gguf_writer_write_tensor(gguf_writer *w, const void *data, size_t nbytes, rl_err *e) {
    if (w->fp && w->next < w->n_tensors && (w->part || nbytes != w->sizes[w->next]))
        return rl_fail(e, "%s: tensor '%s' needs %zu bytes, given %zu", w->path,
                       w->names[w->next], w->sizes[w->next] - w->part, nbytes);
    return gguf_writer_write_part(w, data, nbytes, e);
}

int gguf_writer_finish(gguf_writer *w, rl_err *e) {
    if (!w->fp) return rl_fail(e, "gguf writer: finish before begin");
    if (w->next != w->n_tensors)
        return rl_fail(e, "%s: only %zu of %zu tensors were written%s", w->path, w->next,
                       w->n_tensors, w->part ? " (the last one in part)" : "");
    FILE *fp = w->fp;
    w->fp = NULL;
    bool bad = fflush(fp) != 0 || ferror(fp);
    int err = errno;
    if (fclose(fp) != 0 && !bad) bad = true, err = errno;
    if (bad) {
        unlink(w->tmp);
        return rl_fail(e, "%s: write failed: %s", w->tmp, strerror(err));
    }
    if (rename(w->tmp, w->path) != 0) {
        err = errno;
        unlink(w->tmp);
        return rl_fail(e, "%s: cannot rename to %s: %s", w->tmp, w->path, strerror(err));
    }
    return 0;
}
