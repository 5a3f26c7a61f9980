/* rawloop perplexity: llama.cpp's llama-perplexity semantics, so the numbers compare.
 * The text is tokenized with BOS (when the model adds one), cut into non-overlapping chunks of
 * CTX tokens, the first token of each chunk is replaced by BOS, and only the second half of
 * each chunk is scored: logits at positions CTX/2 .. CTX-2 predict the next token. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out) {
    fprintf(out,
        "usage: rawloop perplexity -m FILE -f TEXT [-c CTX] [-t N] [-b N] [--exact] [--chunks N]\n"
        "                          [--device cpu|cuda|auto] [--kv-type f16|f32]\n"
        "Prints [chunk]running-PPL as it goes and 'Final estimate: PPL = X +/- E'.\n"
        "  -c, --ctx-size N  tokens per chunk (default 512)\n"
        "  -b, --batch N     tokens per forward chunk (default 64)\n"
        "      --chunks N    stop after N chunks (default: all)\n");
}

int cmd_perplexity(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", 1, 0, 'm'}, {"file", 1, 0, 'f'}, {"ctx-size", 1, 0, 'c'},
        {"threads", 1, 0, 't'}, {"batch", 1, 0, 'b'}, {"exact", 0, 0, 'x'},
        {"chunks", 1, 0, 'k'}, {"device", 1, 0, 'D'}, {"kv-type", 1, 0, 'K'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *model = NULL, *path = NULL;
    long ctx = 512, v, max_chunks = -1;
    rl_backend_opts co = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:f:c:t:b:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'f': path = optarg; break;
        case 'c': if (cli_parse_long("-c", optarg, 8, 1L << 20, &ctx)) return 2; break;
        case 't': if (cli_parse_long("-t", optarg, 1, 1024, &v)) return 2; co.n_threads = (size_t)v; break;
        case 'b': if (cli_parse_long("-b", optarg, 1, 4096, &v)) return 2; co.max_batch = (size_t)v; break;
        case 'k': if (cli_parse_long("--chunks", optarg, 1, 1L << 30, &max_chunks)) return 2; break;
        case 'x': co.exact = true; break;
        case 'D': if (cli_parse_device(optarg, &co.device)) return 2; break;
        case 'K': if (cli_parse_kv_type(optarg, &co.kv_f32)) return 2; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!path || optind < argc) {
        usage(stderr);
        return 2;
    }
    char *text;
    size_t len;
    if (cli_read_file(path, &text, &len)) return 1;
    co.n_ctx = (size_t)ctx;
    cli_session s;
    if (cli_session_open(&s, model, &co)) {
        free(text);
        return 1;
    }
    int rc = 1;
    rl_err e = {{0}};
    int32_t *toks = NULL, *all = NULL;
    float *lg = NULL;
    size_t n_toks;
    rl_tokenizer *tok = s.model.tok;
    size_t nv = s.model.cfg.n_vocab;
    double t0 = cli_now();
    if (rl_tok_encode(tok, text, len, false, &toks, &n_toks, &e) < 0) {
        fprintf(stderr, "rawloop: tokenizing %s: %s\n", path, e.msg);
        goto out;
    }
    bool add_bos = rl_tok_add_bos(tok) && rl_tok_bos(tok) >= 0;
    all = malloc((n_toks + 1) * sizeof *all);
    if (!all) goto out;
    size_t n_all = 0;
    if (add_bos) all[n_all++] = rl_tok_bos(tok);
    memcpy(all + n_all, toks, n_toks * sizeof *toks);
    n_all += n_toks;
    fprintf(stderr, "rawloop: tokenized %s: %zu tokens in %.2f s\n", path, n_all, cli_now() - t0);
    if (n_all < 2 * (size_t)ctx) {
        fprintf(stderr, "rawloop: need at least %ld tokens for a context of %ld, the text has "
                        "%zu\n", 2 * ctx, ctx, n_all);
        goto out;
    }
    size_t n_chunks = n_all / (size_t)ctx;
    if (max_chunks > 0 && (size_t)max_chunks < n_chunks) n_chunks = (size_t)max_chunks;
    lg = malloc((size_t)ctx * nv * sizeof(float));
    if (!lg) {
        fprintf(stderr, "rawloop: out of memory for %ld x %zu logits\n", ctx, nv);
        goto out;
    }
    size_t first = (size_t)ctx / 2, count = 0;
    double nll = 0, nll2 = 0;
    fprintf(stderr, "rawloop: %zu chunks of %ld tokens, %s, %s\n", n_chunks, ctx, s.be.name,
            s.be.numerics);
    t0 = cli_now();
    for (size_t ch = 0; ch < n_chunks; ch++) {
        int32_t *chunk = all + ch * (size_t)ctx;
        int32_t saved = chunk[0];
        if (add_bos) chunk[0] = rl_tok_bos(tok);
        int r = rl_backend_forward(&s.be, chunk, (size_t)ctx, 0, lg, true, &e);
        chunk[0] = saved;
        if (r < 0) {
            fprintf(stderr, "rawloop: %s\n", e.msg);
            goto out;
        }
        for (size_t i = first; i + 1 < (size_t)ctx; i++) {
            const float *row = lg + i * nv;
            float mx = row[0];
            for (size_t j = 1; j < nv; j++) mx = row[j] > mx ? row[j] : mx;
            double sum = 0;
            for (size_t j = 0; j < nv; j++) sum += exp((double)row[j] - mx);
            double l = log(sum) + mx - row[chunk[i + 1]];
            nll += l;
            nll2 += l * l;
            count++;
        }
        printf("[%zu]%.4f,", ch + 1, exp(nll / count));
        fflush(stdout);
        if (ch == 0)
            fprintf(stderr, "rawloop: %.2f s per chunk, ~%.0f s total\n", cli_now() - t0,
                    (cli_now() - t0) * n_chunks);
    }
    double mean = nll / count, var = nll2 / count - mean * mean, ppl = exp(mean);
    printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl,
           var > 0 && count > 1 ? sqrt(var / (count - 1)) * ppl : 0.0);
    fprintf(stderr, "rawloop: %zu tokens scored in %.2f s (%.1f tok/s evaluated)\n", count,
            cli_now() - t0, n_chunks * ctx / (cli_now() - t0));
    rc = 0;
out:
    free(lg);
    free(all);
    free(toks);
    free(text);
    cli_session_close(&s);
    return rc;
}
