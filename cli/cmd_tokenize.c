/* rawloop tokenize: prints the tokens of stdin's text (the whole of it, as one text). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf.h"
#include "tokenizer.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: rawloop tokenize -m FILE [--ids] [--special] [--no-bos] < text\n"
            "\n"
            "Tokenizes all of stdin as one text with the tokenizer of FILE (a vocab-only GGUF is\n"
            "enough) and prints one line per token: the id, then the piece quoted.\n"
            "\n"
            "  -m, --model FILE   GGUF file holding tokenizer.ggml.* metadata\n"
            "      --ids          print only the ids, on one line separated by spaces (no BOS)\n"
            "      --special      match special (control) tokens written in the text\n"
            "      --no-bos       do not prepend BOS (it is prepended when the model asks for it)\n"
            "  -h, --help         this help\n");
}

static char *read_all(FILE *in, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, in);
        if (n < cap) break;
        char *b = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
        if (!b) {
            free(buf);
            return NULL;
        }
        buf = b;
        cap *= 2;
    }
    if (buf && ferror(in)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* The piece as a C-like quoted string: UTF-8 is printed as is, control bytes escaped. */
static void print_quoted(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
}

int cmd_tokenize(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'}, {"ids", no_argument, NULL, 'i'},
        {"special", no_argument, NULL, 's'},     {"no-bos", no_argument, NULL, 'b'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    const char *model = NULL;
    bool ids_only = false, special = false, no_bos = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'i': ids_only = true; break;
        case 's': special = true; break;
        case 'b': no_bos = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "rawloop tokenize: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!model) model = cli_default_model();

    rl_err e = {{0}};
    gguf_file f;
    if (gguf_open(&f, model, &e)) {
        fprintf(stderr, "rawloop: %s\n", e.msg);
        return 1;
    }
    rl_tokenizer *t;
    if (rl_tok_load(&t, &f, &e)) {
        fprintf(stderr, "rawloop: %s: %s\n", model, e.msg);
        gguf_close(&f);
        return 1;
    }
    gguf_close(&f);
    if (rl_tok_warning(t)) fprintf(stderr, "rawloop: warning: %s\n", rl_tok_warning(t));

    size_t len = 0;
    char *text = read_all(stdin, &len);
    if (!text) {
        fprintf(stderr, "rawloop: cannot read stdin\n");
        rl_tok_free(t);
        return 1;
    }
    int32_t *ids;
    size_t n;
    if (rl_tok_encode(t, text, len, special, &ids, &n, &e)) {
        fprintf(stderr, "rawloop: %s\n", e.msg);
        free(text);
        rl_tok_free(t);
        return 1;
    }
    free(text);
    if (ids_only) {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    } else {
        int32_t bos = rl_tok_bos(t);
        if (!no_bos && rl_tok_add_bos(t) && bos >= 0) {
            char buf[256];
            size_t l = rl_tok_piece(t, bos, true, buf, sizeof buf);
            printf("%6d ", bos);
            print_quoted(buf, l < sizeof buf ? l : sizeof buf);
            putchar('\n');
        }
        for (size_t i = 0; i < n; i++) {
            char buf[1024];
            size_t l = rl_tok_piece(t, ids[i], true, buf, sizeof buf);
            printf("%6d ", ids[i]);
            print_quoted(buf, l < sizeof buf ? l : sizeof buf);
            putchar('\n');
        }
    }
    free(ids);
    rl_tok_free(t);
    return fflush(stdout) == 0 ? 0 : 1;
}
