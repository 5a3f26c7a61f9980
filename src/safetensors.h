/* safetensors reader (memory-mapped, strict).
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F16", "shape": [rows, cols], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"k": "v"}}, then the data section; offsets are relative to its start.
 * Like the GGUF reader it trusts nothing: the header length, every shape and offset is checked
 * against the file size and for overflow, byte counts must equal shape x element size, and no
 * two tensors may overlap. Tensor data is not copied: st_tensor.data points into the mapping,
 * which lives until st_close. */
#ifndef RL_SAFETENSORS_H
#define RL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define ST_MAX_DIMS 4
#define ST_MAX_HEADER ((size_t)100 << 20) /* the format's own limit on the JSON header */

enum st_dtype {
    ST_F64, ST_F32, ST_F16, ST_BF16, ST_I64, ST_I32, ST_I16, ST_I8, ST_U64, ST_U32, ST_U16,
    ST_U8, ST_BOOL, ST_F8_E4M3, ST_F8_E5M2, ST_DTYPE_COUNT,
};

typedef struct st_tensor {
    char *name;                  /* owned, NUL-terminated */
    uint32_t dtype;              /* enum st_dtype */
    uint32_t n_dims;             /* 0 for a scalar */
    uint64_t shape[ST_MAX_DIMS]; /* as stored: shape[0] outermost (row-major), unused dims 1 */
    size_t nelem;                /* product of shape */
    const void *data;            /* inside the mapping */
    size_t nbytes;               /* nelem x element size, checked */
} st_tensor;

typedef struct st_file {
    char name[256];      /* path, for messages */
    const uint8_t *base;
    size_t size;
    void *map;           /* mmap'ed region, or NULL for st_open_memory */
    size_t n_tensors;
    st_tensor *tensors;  /* in header order */
} st_file;

/* Opens and validates path. On failure f is left closed (safe to st_close). */
int st_open(st_file *f, const char *path, rl_err *e);
/* Same rules over a caller-owned buffer that outlives f. */
int st_open_memory(st_file *f, const void *buf, size_t size, const char *name, rl_err *e);
void st_close(st_file *f);

const st_tensor *st_find(const st_file *f, const char *name);

/* "BF16", ...; "unknown" out of range. Element size in bytes (0 out of range). */
const char *st_dtype_name(uint32_t dtype);
size_t st_dtype_size(uint32_t dtype);

#endif
