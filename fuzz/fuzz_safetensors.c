/* libFuzzer target for the safetensors reader: st_open_memory over arbitrary bytes, then every
 * tensor's name, the first and last byte of its data, and a lookup by name, so ASan catches any
 * offset, length or name the reader let through unchecked. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

static volatile uint8_t g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file f;
    rl_err e;
    if (st_open_memory(&f, data, size, "fuzz", &e) == 0) {
        for (size_t i = 0; i < f.n_tensors; i++) {
            const st_tensor *t = &f.tensors[i];
            size_t nl = strlen(t->name);
            g_sink ^= nl ? (uint8_t)t->name[nl - 1] : 0;
            if (t->nbytes) {
                const uint8_t *p = t->data;
                g_sink ^= p[0] ^ p[t->nbytes - 1];
            }
            if (t->nbytes != t->nelem * st_dtype_size(t->dtype)) abort(); /* the checked invariant */
            if (st_find(&f, t->name) == NULL) abort(); /* what the parser stored must be found */
            g_sink ^= (uint8_t)st_dtype_name(t->dtype)[0];
        }
        st_close(&f);
    }
    return 0;
}
