/* rawloop: command-line entry point. Dispatches to one subcommand per file in cli/. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} k_cmds[] = {
    {"run", cmd_run, "generate text from a prompt, streaming it to stdout"},
    {"tokenize", cmd_tokenize, "print the token ids of stdin's text"},
    {"perplexity", cmd_perplexity, "perplexity of a text (llama-perplexity semantics)"},
    {"bench", cmd_bench, "prompt and generation speed, bytes per token, share of bandwidth"},
    {"mkmodel", cmd_mkmodel, "write a random-weight GGUF of a real model's shapes"},
    {"info", cmd_info, "validate a GGUF file and print its metadata and tensors"},
    {"logits", cmd_logits, "write the logits of a token sequence (for tests)"},
    {"quantize", cmd_quantize, "rewrite an F32/F16/BF16 GGUF in Q8_0, Q4_0, Q4_K_M, ... types"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: rawloop <command> [options]   (rawloop <command> --help for details)\n\n"
                 "commands:\n");
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        fprintf(out, "  %-11s %s\n", k_cmds[i].name, k_cmds[i].help);
}

int cli_parse_long(const char *opt, const char *text, long min, long max, long *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max) {
        fprintf(stderr, "rawloop: %s expects a whole number in [%ld, %ld], got '%s'\n", opt, min,
                max, text);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_float(const char *opt, const char *text, float *out) {
    char *end;
    errno = 0;
    float v = strtof(text, &end);
    if (errno || end == text || *end || !isfinite(v)) {
        fprintf(stderr, "rawloop: %s expects a number, got '%s'\n", opt, text);
        return -1;
    }
    *out = v;
    return 0;
}

/* The shipped model lives next to the binary's source tree: <repo>/models/. The binary is in
 * <repo>/build/, so look relative to the executable first, then to the working directory. */
const char *cli_default_model(void) {
    static char path[PATH_MAX];
    static const char *rel = "models/rawloop-small.gguf";
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            int k = snprintf(path, sizeof path, "%.*s/../%s", (int)(sizeof path - 64), exe, rel);
            if (k > 0 && (size_t)k < sizeof path && access(path, R_OK) == 0) return path;
        }
    }
    return rel;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        if (!strcmp(argv[1], k_cmds[i].name)) return k_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "rawloop: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
