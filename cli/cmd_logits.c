/* rawloop logits: the logits of every position of a token sequence, for oracle tests. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out) {
    fprintf(out,
        "usage: rawloop logits -m FILE --ids \"1 2 3\" -o OUT [--exact] [-t N] [-b N] [--device D]\n"
        "                     [--kv-type f16|f32|q8] [--prefill exact|fast|auto]\n"
        "Feeds the ids at positions 0..n-1 (no BOS added) and writes float32 little-endian\n"
        "logits, n rows of n_vocab, row i after ids[0..i].\n"
        "  -b, --batch N   tokens per forward chunk (default: CPU 64, GPU fast prefill 2048)\n"
        "  --prefill M     exact (bit-identical to decoding token by token), fast (GPU: fp16\n"
        "                  tensor-core GEMMs, not the same bits) or auto (default: fast on the\n"
        "                  GPU unless --exact; the CPU is always exact)\n");
}

int cmd_logits(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", 1, 0, 'm'}, {"ids", 1, 0, 'i'}, {"output", 1, 0, 'o'}, {"exact", 0, 0, 'x'},
        {"threads", 1, 0, 't'}, {"batch", 1, 0, 'b'}, {"device", 1, 0, 'D'}, {"kv-type", 1, 0, 'K'}, {"prefill", 1, 0, 'F'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *model = NULL, *ids_text = NULL, *outp = NULL;
    rl_backend_opts co = {0};
    long v;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:i:o:t:b:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'i': ids_text = optarg; break;
        case 'o': outp = optarg; break;
        case 'x': co.exact = true; break;
        case 'D': if (cli_parse_device(optarg, &co.device)) return 2; break;
        case 'K': if (cli_parse_kv_type(optarg, &co.kv_type)) return 2; break;
        case 'F': if (cli_parse_prefill(optarg, &co.prefill)) return 2; break;
        case 't': if (cli_parse_long("-t", optarg, 1, 1024, &v)) return 2; co.n_threads = (size_t)v; break;
        case 'b': if (cli_parse_long("-b", optarg, 1, 4096, &v)) return 2; co.max_batch = (size_t)v; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!ids_text || !outp || optind < argc) {
        usage(stderr);
        return 2;
    }
    int32_t *ids;
    size_t n;
    if (cli_parse_ids(ids_text, &ids, &n)) return 2;
    if (n == 0) {
        fprintf(stderr, "rawloop logits: --ids is empty\n");
        free(ids);
        return 2;
    }
    co.n_ctx = n;
    cli_session s;
    if (cli_session_open(&s, model, &co)) {
        free(ids);
        return 1;
    }
    int rc = 1;
    size_t nv = s.model.cfg.n_vocab;
    float *lg = malloc(n * nv * sizeof(float));
    rl_err e = {{0}};
    FILE *f = NULL;
    if (!lg) {
        fprintf(stderr, "rawloop: out of memory\n");
        goto out;
    }
    if (rl_backend_forward(&s.be, ids, n, 0, lg, true, &e) < 0) {
        fprintf(stderr, "rawloop: %s\n", e.msg);
        goto out;
    }
    f = fopen(outp, "wb");
    if (!f || fwrite(lg, sizeof(float), n * nv, f) != n * nv || fclose(f)) {
        fprintf(stderr, "rawloop: cannot write %s\n", outp);
        f = NULL;
        goto out;
    }
    f = NULL;
    rc = 0;
out:
    free(lg);
    free(ids);
    cli_session_close(&s);
    return rc;
}
