/* GGUF v2/v3 reader (memory-mapped, strict) and writer.
 *
 * The reader trusts nothing in the file: every count, length, offset and size is checked
 * against the bytes that remain and against overflow before it is used (rules in
 * ../shared/reference/formats-and-ecosystem.md §1.1 and the bug classes of §2). Strings and
 * tensor data are not copied: gguf_str and gguf_tensor.data point into the mapping, which lives
 * until gguf_close. */
#ifndef RL_GGUF_H
#define RL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
    GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10,
    GGUF_I64 = 11, GGUF_F64 = 12, GGUF_VTYPE_COUNT = 13,
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gguf_str {
    const char *ptr; /* not NUL-terminated; points into the file */
    size_t len;
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    uint32_t type;       /* enum gguf_vtype */
    uint32_t arr_type;   /* element type when type == GGUF_ARRAY */
    uint64_t n;          /* element count when GGUF_ARRAY, else 1 */
    const uint8_t *data; /* the value (GGUF_ARRAY: the first element), little-endian */
    gguf_str *strs;      /* GGUF_STRING: 1 entry; ARRAY of STRING: n entries; else NULL */
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous dim; dims past n_dims are 1 */
    uint32_t type;              /* ggml type id (see types.h); known block size, checked */
    uint64_t offset;            /* relative to the data section, as stored */
    size_t nbytes;              /* checked: offset + nbytes lies inside the file */
    const void *data;
} gguf_tensor;

typedef struct gguf_file {
    char name[256]; /* path or caller-given name, for messages */
    uint32_t version;
    size_t n_kv;
    gguf_kv *kv;
    size_t n_tensors;
    gguf_tensor *tensors;
    size_t alignment;
    size_t data_offset; /* start of the tensor data section */
    const uint8_t *base;
    size_t size;
    void *map; /* mmap'ed region to unmap, or NULL for gguf_open_memory */
    void *index; /* private: hash index of keys and tensor names */
} gguf_file;

/* Opens and fully validates path. On failure f is left closed (safe to gguf_close). */
int gguf_open(gguf_file *f, const char *path, rl_err *e);
/* Same rules over a caller-owned buffer (the fuzzer's entry point); buf must outlive f. */
int gguf_open_memory(gguf_file *f, const void *buf, size_t size, const char *name, rl_err *e);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters. Return 1 when found and converted, 0 when the key is absent (out untouched),
 * -1 with a message when present but of an unusable type or out of range.
 * Integer getters accept any integer type whose value fits; gguf_get_f32 accepts F32/F64 and
 * integers. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, rl_err *e);
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, rl_err *e);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, rl_err *e);
int gguf_get_f32(const gguf_file *f, const char *key, float *out, rl_err *e);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out, rl_err *e);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, rl_err *e);
/* Array of a given element type (any of the scalar types or GGUF_STRING). */
int gguf_get_arr(const gguf_file *f, const char *key, uint32_t elem_type, const gguf_kv **out,
                 rl_err *e);
/* Element i of an integer/float array as a double/int64, with the array's element type.
 * gguf_arr_i64 truncates floats toward zero and saturates (NaN gives 0); UINT64 values above
 * INT64_MAX come back as their two's-complement bit pattern (cast to uint64_t to recover). */
int64_t gguf_arr_i64(const gguf_kv *kv, uint64_t i);
double gguf_arr_f64(const gguf_kv *kv, uint64_t i);

/* "UINT32", "ARRAY", ... ("unknown" out of range) and the byte size of a scalar type (0 for
 * STRING, ARRAY and unknown types). */
const char *gguf_vtype_name(uint32_t t);
size_t gguf_vtype_size(uint32_t t);

/* Compares a gguf_str with a C string. */
bool gguf_str_eq(gguf_str s, const char *c);

/* ---- writer ---------------------------------------------------------------------------------
 * Builds the header in memory, then streams tensor data in the order tensors were added.
 * Usage: gguf_writer_init; add kvs and tensor infos; gguf_writer_begin(path) writes the header;
 * gguf_writer_write_tensor for each tensor in order (bytes = its nbytes); gguf_writer_finish.
 * The file is written to path + ".tmp" and renamed on finish, so a failure loses nothing. */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(size_t alignment);
void gguf_writer_free(gguf_writer *w); /* also removes an unfinished temp file */
int gguf_w_u32(gguf_writer *w, const char *key, uint32_t v, rl_err *e);
int gguf_w_i32(gguf_writer *w, const char *key, int32_t v, rl_err *e);
int gguf_w_u64(gguf_writer *w, const char *key, uint64_t v, rl_err *e);
int gguf_w_f32(gguf_writer *w, const char *key, float v, rl_err *e);
int gguf_w_bool(gguf_writer *w, const char *key, bool v, rl_err *e);
int gguf_w_str(gguf_writer *w, const char *key, const char *v, rl_err *e);
/* Array of fixed-size scalars (elem_type not STRING/ARRAY): n elements copied from data. */
int gguf_w_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *data, size_t n,
               rl_err *e);
/* Array of strings given as pointer+length pairs. */
int gguf_w_arr_str(gguf_writer *w, const char *key, const gguf_str *strs, size_t n, rl_err *e);
/* Copies a kv (any type, arrays included) from an open file. */
int gguf_w_copy_kv(gguf_writer *w, const gguf_kv *kv, rl_err *e);
int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                  const uint64_t *ne, rl_err *e);
int gguf_writer_begin(gguf_writer *w, const char *path, rl_err *e);
int gguf_writer_write_tensor(gguf_writer *w, const void *data, size_t nbytes, rl_err *e);
/* The next tensor's bytes in pieces (in order); it is padded and done once its declared size
 * is reached. Lets a writer stream a tensor larger than the memory it wants to hold. */
int gguf_writer_write_part(gguf_writer *w, const void *data, size_t nbytes, rl_err *e);
int gguf_writer_finish(gguf_writer *w, rl_err *e);

#endif
