/* libFuzzer target: encodes arbitrary bytes with a real vocabulary (special-token parsing on
 * and off, chosen by the first byte) and streams the ids back through the detokenizer.
 * The vocab comes from $RL_FUZZ_VOCAB, else ../shared/testdata/tokenizers/ggml-vocab-gpt-2.gguf
 * relative to the repository root (found from the executable's directory or the working
 * directory). A missing vocab aborts the run: a target that tests nothing must not pass. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "tokenizer.h"

#define DEFAULT_VOCAB "../shared/testdata/tokenizers/ggml-vocab-gpt-2.gguf"

static rl_tokenizer *g_tok;

static const char *find_vocab(void) {
    const char *env = getenv("RL_FUZZ_VOCAB");
    if (env && *env) return env;
    static char path[PATH_MAX + 64];
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) { /* <repo>/build-fuzz/fuzz_tokenizer -> <repo>/../shared/... */
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(path, sizeof path, "%s/../" DEFAULT_VOCAB, exe);
            if (access(path, R_OK) == 0) return path;
        }
    }
    return DEFAULT_VOCAB;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *path = find_vocab();
    rl_err e;
    gguf_file f;
    if (gguf_open(&f, path, &e) || rl_tok_load(&g_tok, &f, &e)) {
        fprintf(stderr, "fuzz_tokenizer: cannot load vocab %s: %s (set RL_FUZZ_VOCAB)\n", path,
                e.msg);
        exit(1);
    }
    gguf_close(&f);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    bool special = data[0] & 1;
    int32_t *ids;
    size_t n;
    rl_err e;
    if (rl_tok_encode(g_tok, (const char *)data + 1, size - 1, special, &ids, &n, &e)) abort();
    rl_detok d;
    rl_detok_init(&d, g_tok);
    char out[300];
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= rl_tok_n_vocab(g_tok)) abort();
        rl_detok_push(&d, ids[i], out, sizeof out);
        char piece[16];
        rl_tok_piece(g_tok, ids[i], true, piece, sizeof piece);
    }
    rl_detok_flush(&d, out, sizeof out);
    free(ids);
    return 0;
}
