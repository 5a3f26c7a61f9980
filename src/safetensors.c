#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct { const char *name; size_t size; } k_dtypes[ST_DTYPE_COUNT] = {
    [ST_F64] = {"F64", 8},   [ST_F32] = {"F32", 4},   [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2}, [ST_I64] = {"I64", 8},   [ST_I32] = {"I32", 4},
    [ST_I16] = {"I16", 2},   [ST_I8] = {"I8", 1},     [ST_U64] = {"U64", 8},
    [ST_U32] = {"U32", 4},   [ST_U16] = {"U16", 2},   [ST_U8] = {"U8", 1},
    [ST_BOOL] = {"BOOL", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *st_dtype_name(uint32_t dtype) {
    return dtype < ST_DTYPE_COUNT ? k_dtypes[dtype].name : "unknown";
}

size_t st_dtype_size(uint32_t dtype) { return dtype < ST_DTYPE_COUNT ? k_dtypes[dtype].size : 0; }

void st_close(st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    if (f->map) munmap(f->map, f->size);
    memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    for (size_t i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

/* A JSON integer in [0, max]. */
static int get_uint(const json_t *v, uint64_t max, uint64_t *out) {
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0 || (uint64_t)x > max) return -1;
    *out = (uint64_t)x;
    return 0;
}

static int parse_tensor(st_file *f, st_tensor *t, const char *name, const json_t *v,
                        size_t data_size, rl_err *e) {
    if (!json_is_object(v))
        return rl_fail(e, "%s: header entry '%s' is not an object", f->name, name);
    const json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
                 *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off))
        return rl_fail(e, "%s: tensor '%s' needs string 'dtype', array 'shape' and array "
                       "'data_offsets'", f->name, name);
    const char *dts = json_string_value(dt);
    uint32_t d;
    for (d = 0; d < ST_DTYPE_COUNT; d++)
        if (!strcmp(dts, k_dtypes[d].name)) break;
    if (d == ST_DTYPE_COUNT)
        return rl_fail(e, "%s: tensor '%s' has unknown dtype '%.32s'", f->name, name, dts);
    t->dtype = d;
    size_t nd = json_array_size(sh);
    if (nd > ST_MAX_DIMS)
        return rl_fail(e, "%s: tensor '%s' has %zu dimensions, at most %d supported", f->name,
                       name, nd, ST_MAX_DIMS);
    t->n_dims = (uint32_t)nd;
    size_t n = 1;
    for (size_t i = 0; i < ST_MAX_DIMS; i++) t->shape[i] = 1;
    for (size_t i = 0; i < nd; i++) {
        uint64_t x;
        if (get_uint(json_array_get(sh, i), UINT64_MAX >> 1, &x))
            return rl_fail(e, "%s: tensor '%s': shape[%zu] is not a non-negative integer",
                           f->name, name, i);
        if (x && n > SIZE_MAX / x)
            return rl_fail(e, "%s: tensor '%s': shape overflows", f->name, name);
        n *= (size_t)x;
        t->shape[i] = x;
    }
    t->nelem = n;
    size_t es = k_dtypes[d].size;
    if (n > SIZE_MAX / es) return rl_fail(e, "%s: tensor '%s': size overflows", f->name, name);
    uint64_t b, end;
    if (json_array_size(off) != 2 || get_uint(json_array_get(off, 0), UINT64_MAX >> 1, &b) ||
        get_uint(json_array_get(off, 1), UINT64_MAX >> 1, &end))
        return rl_fail(e, "%s: tensor '%s': data_offsets must be two non-negative integers",
                       f->name, name);
    if (end < b || end > data_size)
        return rl_fail(e, "%s: tensor '%s': data_offsets [%llu, %llu] lie outside the %zu-byte "
                       "data section", f->name, name, (unsigned long long)b,
                       (unsigned long long)end, data_size);
    if (end - b != n * es)
        return rl_fail(e, "%s: tensor '%s': data_offsets span %llu bytes but shape x %s needs %zu",
                       f->name, name, (unsigned long long)(end - b), k_dtypes[d].name, n * es);
    t->nbytes = n * es;
    t->data = (const void *)(uintptr_t)b; /* made absolute once the data section is known */
    return 0;
}

static int cmp_offset(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)(*(const st_tensor *const *)a)->data,
              y = (uintptr_t)(*(const st_tensor *const *)b)->data;
    return x < y ? -1 : x > y;
}

/* No two tensors share a byte (empty tensors take none). */
static int check_overlap(st_file *f, rl_err *e) {
    if (f->n_tensors < 2) return 0;
    const st_tensor **by = malloc(f->n_tensors * sizeof *by);
    if (!by) return rl_fail(e, "%s: out of memory", f->name);
    for (size_t i = 0; i < f->n_tensors; i++) by[i] = &f->tensors[i];
    qsort(by, f->n_tensors, sizeof *by, cmp_offset);
    int r = 0;
    const st_tensor *prev = NULL;
    for (size_t i = 0; i < f->n_tensors && !r; i++) {
        if (!by[i]->nbytes) continue;
        if (prev && (uintptr_t)by[i]->data < (uintptr_t)prev->data + prev->nbytes)
            r = rl_fail(e, "%s: tensors '%s' and '%s' overlap in the data section", f->name,
                        prev->name, by[i]->name);
        prev = by[i];
    }
    free(by);
    return r;
}

int st_open_memory(st_file *f, const void *buf, size_t size, const char *name, rl_err *e) {
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->base = buf;
    f->size = size;
    if (size < 8)
        return rl_fail(e, "%s: %zu bytes is too short for a safetensors file", f->name, size);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | f->base[i];
    if (hl < 2 || hl > size - 8 || hl > ST_MAX_HEADER)
        return rl_fail(e, "%s: header length %llu is impossible for a %zu-byte file (not a "
                       "safetensors file?)", f->name, (unsigned long long)hl, size);
    const char *hdr = (const char *)f->base + 8;
    if (hdr[0] != '{')
        return rl_fail(e, "%s: header does not start with '{' (not a safetensors file?)", f->name);
    json_error_t je;
    json_t *root = json_loadb(hdr, (size_t)hl, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return rl_fail(e, "%s: header JSON invalid at byte %d: %s", f->name, je.position, je.text);
    int r = 0;
    size_t data_off = 8 + (size_t)hl, data_size = size - data_off;
    if (!json_is_object(root)) {
        r = rl_fail(e, "%s: header is not a JSON object", f->name);
        goto out;
    }
    f->tensors = calloc(json_object_size(root) + 1, sizeof *f->tensors);
    if (!f->tensors) {
        r = rl_fail(e, "%s: out of memory", f->name);
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) continue;
        st_tensor *t = &f->tensors[f->n_tensors];
        t->name = strdup(key);
        if (!t->name) {
            r = rl_fail(e, "%s: out of memory", f->name);
            goto out;
        }
        f->n_tensors++;
        if ((r = parse_tensor(f, t, key, v, data_size, e))) goto out;
    }
    if ((r = check_overlap(f, e))) goto out;
    for (size_t i = 0; i < f->n_tensors; i++)
        f->tensors[i].data = f->base + data_off + (uintptr_t)f->tensors[i].data;
out:
    json_decref(root);
    if (r) {
        f->map = NULL; /* the caller's buffer (st_open unmaps its own on failure) */
        st_close(f);
        return -1;
    }
    return 0;
}

int st_open(st_file *f, const char *path, rl_err *e) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rl_fail(e, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return rl_fail(e, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    void *map = NULL;
    if (size) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int err = errno;
            close(fd);
            return rl_fail(e, "%s: mmap failed: %s", path, strerror(err));
        }
    }
    close(fd);
    if (st_open_memory(f, map ? map : "", size, path, e) < 0) {
        if (map) munmap(map, size);
        return -1;
    }
    f->map = map;
    return 0;
}
