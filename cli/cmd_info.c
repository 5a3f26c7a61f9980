/* rawloop info: validate a GGUF file and print its header, metadata and tensor table.
 *
 * The output is meant for people and for tests (tests/py/test_malformed.py parses it), so each
 * kv and each tensor is exactly one line of a fixed shape:
 *   <key>: <TYPE> = <value>
 *   <key>: ARRAY of <TYPE>, <n> elements = [e0, e1, ...]
 *   <name>: <ggml type> [ne0, ne1, ...] offset <o>, <n> bytes */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gguf.h"
#include "types.h"

#define STR_SHOW 80   /* bytes of a string value shown before "..." */
#define ARR_SHOW 8    /* array elements shown */

static void usage(FILE *out) {
    fprintf(out, "usage: rawloop info [--help] FILE\n\n"
                 "Validates FILE as GGUF v2/v3 (every count, string, array, tensor shape, type and\n"
                 "offset is checked) and prints the version, alignment, every metadata key with\n"
                 "its value, every tensor with type, shape, offset and size, and totals.\n"
                 "Exit status: 0 valid, 1 invalid or unreadable (reason on stderr), 2 usage.\n");
}


/* A string value, quoted, with quotes, backslashes and control bytes escaped; cut after
 * STR_SHOW bytes at a UTF-8 character boundary. */
static void print_str(gguf_str s) {
    size_t n = s.len;
    if (n > STR_SHOW) {
        n = STR_SHOW;
        while (n > 0 && ((unsigned char)s.ptr[n] & 0xC0) == 0x80) n--;
    }
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
    if (n < s.len) printf("...(%zu bytes)", s.len);
}

/* One scalar of type t at p (the file is little-endian, as is every host rawloop runs on). */
static void print_scalar(uint32_t t, const uint8_t *p) {
    union {
        uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
        uint64_t u64; int64_t i64; float f32; double f64;
    } v;
    memcpy(&v, p, gguf_vtype_size(t));
    switch (t) {
    case GGUF_U8: printf("%u", v.u8); break;
    case GGUF_I8: printf("%d", v.i8); break;
    case GGUF_U16: printf("%u", v.u16); break;
    case GGUF_I16: printf("%d", v.i16); break;
    case GGUF_U32: printf("%" PRIu32, v.u32); break;
    case GGUF_I32: printf("%" PRId32, v.i32); break;
    case GGUF_U64: printf("%" PRIu64, v.u64); break;
    case GGUF_I64: printf("%" PRId64, v.i64); break;
    case GGUF_F32: printf("%.9g", v.f32); break;
    case GGUF_F64: printf("%.17g", v.f64); break;
    case GGUF_BOOL: printf("%s", v.u8 ? "true" : "false"); break;
    default: printf("?"); break;
    }
}

/* A key or tensor name: one token, so spaces and control bytes are escaped. */
static void print_name(gguf_str k) {
    for (size_t i = 0; i < k.len; i++) {
        unsigned char c = (unsigned char)k.ptr[i];
        if (c <= 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
}

static void print_kv(const gguf_kv *kv) {
    printf("  ");
    print_name(kv->key);
    if (kv->type != GGUF_ARRAY) {
        printf(": %s = ", gguf_vtype_name(kv->type));
        if (kv->type == GGUF_STRING) print_str(kv->strs[0]);
        else print_scalar(kv->type, kv->data);
        putchar('\n');
        return;
    }
    printf(": ARRAY of %s, %" PRIu64 " elements = [", gguf_vtype_name(kv->arr_type), kv->n);
    uint64_t shown = kv->n < ARR_SHOW ? kv->n : ARR_SHOW;
    for (uint64_t i = 0; i < shown; i++) {
        if (i) printf(", ");
        if (kv->arr_type == GGUF_STRING) print_str(kv->strs[i]);
        else print_scalar(kv->arr_type, kv->data + i * gguf_vtype_size(kv->arr_type));
    }
    printf("%s]\n", shown < kv->n ? ", ..." : "");
}

int cmd_info(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        usage(stderr);
        return 2;
    }
    if (optind != argc - 1) {
        fprintf(stderr, "rawloop info: expected exactly one FILE\n");
        usage(stderr);
        return 2;
    }
    const char *path = argv[optind];
    gguf_file f;
    rl_err e = {{0}};
    if (gguf_open(&f, path, &e)) {
        fprintf(stderr, "rawloop: %s\n", e.msg);
        return 1;
    }
    printf("file: %s\n", path);
    printf("version: %" PRIu32 "\n", f.version);
    printf("alignment: %zu\n", f.alignment);
    printf("data offset: %zu\n", f.data_offset);
    printf("size: %zu bytes\n", f.size);
    printf("metadata: %zu keys\n", f.n_kv);
    for (size_t i = 0; i < f.n_kv; i++) print_kv(&f.kv[i]);
    printf("tensors: %zu\n", f.n_tensors);
    uint64_t elems = 0;
    size_t bytes = 0;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        uint64_t n = 1;
        printf("  ");
        print_name(t->name);
        printf(": %s [", rl_type_name(t->type));
        for (uint32_t d = 0; d < t->n_dims; d++) {
            printf("%s%" PRIu64, d ? ", " : "", t->ne[d]);
            n *= t->ne[d]; /* the reader checked that the product fits int64 */
        }
        printf("] offset %" PRIu64 ", %zu bytes\n", t->offset, t->nbytes);
        elems += n;
        bytes += t->nbytes;
    }
    printf("total: %zu tensors, %" PRIu64 " elements, %zu bytes of tensor data (%.2f MiB)\n",
           f.n_tensors, elems, bytes, (double)bytes / (1024.0 * 1024.0));
    gguf_close(&f);
    return 0;
}
