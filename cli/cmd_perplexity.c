/* rawloop perplexity: llama.cpp's llama-perplexity semantics, so the numbers compare.
 * The text is tokenized with BOS (when the model adds one), cut into non-overlapping chunks of
 * CTX tokens, the first token of each chunk is replaced by BOS, and only the second half of
 * each chunk is scored: logits at positions CTX/2 .. CTX-2 predict the next token.
 *
 * --save-logits BASE stores the log-softmax of every scored position (format in kld.h);
 * --kl-divergence BASE reruns the same tokens through another model (usually a quantization of
 * BASE's model) and compares its distributions with the stored ones, as llama-perplexity's
 * --kl-divergence does. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "kld.h"

static void usage(FILE *out) {
    fprintf(out,
        "usage: rawloop perplexity -m FILE -f TEXT [-c CTX] [-t N] [-b N] [--exact] [--chunks N]\n"
        "                          [--device cpu|cuda|auto] [--kv-type f16|f32|q8] [--prefill M]\n"
        "                          [--save-logits BASE | --kl-divergence BASE]\n"
        "Prints [chunk]running-PPL as it goes and 'Final estimate: PPL = X +/- E'.\n"
        "  -c, --ctx-size N  tokens per chunk (default 512; with --kl-divergence, BASE's)\n"
        "  -b, --batch N     tokens per forward chunk (default: CPU 64, GPU fast prefill 2048)\n"
        "      --prefill M   exact (bit-identical to decoding token by token), fast (GPU: fp16\n"
        "                    tensor-core GEMMs, not the same bits) or auto (default: fast on\n"
        "                    the GPU unless --exact; the CPU is always exact)\n"
        "      --chunks N    stop after N chunks (default: all; with --kl-divergence, BASE's)\n"
        "      --save-logits BASE\n"
        "                    also write the log-probs of every scored position to BASE\n"
        "                    (written as BASE.tmp, renamed when complete). Each row is stored as\n"
        "                    uint16 codes on a linear scale between the row's top log-prob and\n"
        "                    its lowest (floored 64 nats down): error <= range/131070 nats, e.g.\n"
        "                    1.2e-4 for a 16-nat range; 2*n_vocab+16 bytes per scored position\n"
        "      --kl-divergence BASE\n"
        "                    score the same tokens as BASE (same vocabulary, ctx, chunks and\n"
        "                    text, else refused) and print llama-perplexity's statistics: PPL(Q)\n"
        "                    vs PPL(base), KL(base||this model) mean +/- error, percentiles,\n"
        "                    token-probability change, 'Same top p' (argmax agreement), and one\n"
        "                    line 'KLD: n=.. mean=.. se=.. median=.. p99=.. max=.. top1=.. ...'\n"
        "                    (top1 a fraction). Stored rows are renormalized on reading, so a\n"
        "                    model against its own BASE gives a KLD of ~1e-8, not 0.\n");
}

/* The half-written BASE.tmp, removed if a signal ends the run: BASE itself only ever appears
 * by rename of a complete file. */
static char g_tmp_path[4096];
static volatile sig_atomic_t g_tmp_armed;
static const int g_sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
static struct sigaction g_old_sa[4];

static void on_signal(int sig) {
    if (g_tmp_armed) unlink(g_tmp_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void tmp_arm(const char *path) {
    snprintf(g_tmp_path, sizeof g_tmp_path, "%s", path);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* a signal the caller ignores (nohup, a background job's SIGINT) stays ignored */
    for (size_t i = 0; i < 4; i++) {
        sigaction(g_sigs[i], NULL, &g_old_sa[i]);
        if (g_old_sa[i].sa_handler != SIG_IGN) sigaction(g_sigs[i], &sa, NULL);
    }
    g_tmp_armed = 1;
}

static void tmp_disarm(void) {
    if (!g_tmp_armed) return;
    g_tmp_armed = 0;
    for (size_t i = 0; i < 4; i++) sigaction(g_sigs[i], &g_old_sa[i], NULL);
}

int cmd_perplexity(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", 1, 0, 'm'}, {"file", 1, 0, 'f'}, {"ctx-size", 1, 0, 'c'},
        {"threads", 1, 0, 't'}, {"batch", 1, 0, 'b'}, {"exact", 0, 0, 'x'},
        {"chunks", 1, 0, 'k'}, {"device", 1, 0, 'D'}, {"kv-type", 1, 0, 'K'}, {"prefill", 1, 0, 'F'},
        {"save-logits", 1, 0, 'S'}, {"kl-divergence", 1, 0, 'L'}, {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    const char *model = NULL, *path = NULL, *save_path = NULL, *base_path = NULL;
    long ctx = 512, v, max_chunks = -1;
    bool ctx_given = false;
    rl_backend_opts co = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:f:c:t:b:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'f': path = optarg; break;
        case 'c': if (cli_parse_long("-c", optarg, 8, 1L << 20, &ctx)) return 2; ctx_given = true; break;
        case 't': if (cli_parse_long("-t", optarg, 1, 1024, &v)) return 2; co.n_threads = (size_t)v; break;
        case 'b': if (cli_parse_long("-b", optarg, 1, 4096, &v)) return 2; co.max_batch = (size_t)v; break;
        case 'k': if (cli_parse_long("--chunks", optarg, 1, 1L << 30, &max_chunks)) return 2; break;
        case 'x': co.exact = true; break;
        case 'D': if (cli_parse_device(optarg, &co.device)) return 2; break;
        case 'K': if (cli_parse_kv_type(optarg, &co.kv_type)) return 2; break;
        case 'F': if (cli_parse_prefill(optarg, &co.prefill)) return 2; break;
        case 'S': save_path = optarg; break;
        case 'L': base_path = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!path || optind < argc) {
        usage(stderr);
        return 2;
    }
    if (save_path && base_path) {
        fprintf(stderr, "rawloop: --save-logits and --kl-divergence do not go together\n");
        return 2;
    }
    int rc = 1;
    rl_err e = {{0}};
    char *text = NULL, *tmp_path = NULL;
    int32_t *all = NULL, *base_toks = NULL;
    float *lg = NULL;
    unsigned char *rows = NULL;
    FILE *base = NULL, *tmp = NULL;
    kld_header bh = {0};
    kld_stats st = {0};
    cli_session s = {0};
    size_t len;
    /* The base file is checked before the model loads, so a bad one fails at once. */
    if (base_path) {
        base = fopen(base_path, "rb");
        if (!base) {
            fprintf(stderr, "rawloop: cannot open %s: %s\n", base_path, strerror(errno));
            goto out;
        }
        if (kld_read_header(base, &bh, &base_toks, &e) < 0) {
            fprintf(stderr, "rawloop: %s: %s\n", base_path, e.msg);
            goto out;
        }
        if (ctx_given && (uint64_t)ctx != bh.ctx) {
            fprintf(stderr, "rawloop: %s was made with -c %llu, this run has -c %ld\n", base_path,
                    (unsigned long long)bh.ctx, ctx);
            goto out;
        }
        if (max_chunks > 0 && (uint64_t)max_chunks != bh.n_chunks) {
            fprintf(stderr, "rawloop: %s has %llu chunks, this run asks for --chunks %ld\n",
                    base_path, (unsigned long long)bh.n_chunks, max_chunks);
            goto out;
        }
        ctx = (long)bh.ctx;
        max_chunks = (long)bh.n_chunks;
    }
    /* Created up front so an unwritable path fails before minutes of work. */
    if (save_path) {
        size_t n = strlen(save_path) + 5;
        tmp_path = malloc(n);
        if (!tmp_path) goto oom;
        snprintf(tmp_path, n, "%s.tmp", save_path);
        if (strlen(tmp_path) >= sizeof g_tmp_path) {
            fprintf(stderr, "rawloop: --save-logits path is too long\n");
            goto out;
        }
        tmp = fopen(tmp_path, "wb");
        if (!tmp) { /* not armed yet: a BASE.tmp this run did not create is not removed */
            fprintf(stderr, "rawloop: cannot create %s: %s\n", tmp_path, strerror(errno));
            goto out;
        }
        tmp_arm(tmp_path);
    }
    if (cli_read_file(path, &text, &len)) goto out;
    co.n_ctx = (size_t)ctx;
    if (cli_session_open(&s, model, &co)) goto out;
    rl_tokenizer *tok = s.model.tok;
    size_t nv = s.model.cfg.n_vocab;
    if (base && bh.n_vocab != nv) {
        fprintf(stderr, "rawloop: %s was made by a model with %llu vocabulary entries, this one "
                        "has %zu\n", base_path, (unsigned long long)bh.n_vocab, nv);
        goto out;
    }
    double t0 = cli_now();
    bool add_bos;
    size_t n_all;
    if (cli_token_stream(tok, text, len, &all, &n_all, &add_bos, &e) < 0) {
        fprintf(stderr, "rawloop: tokenizing %s: %s\n", path, e.msg);
        goto out;
    }
    fprintf(stderr, "rawloop: tokenized %s: %zu tokens in %.2f s\n", path, n_all, cli_now() - t0);
    if (n_all < 2 * (size_t)ctx) {
        fprintf(stderr, "rawloop: need at least %ld tokens for a context of %ld, the text has "
                        "%zu\n", 2 * ctx, ctx, n_all);
        goto out;
    }
    size_t n_chunks = n_all / (size_t)ctx;
    if (max_chunks > 0 && (size_t)max_chunks < n_chunks) n_chunks = (size_t)max_chunks;
    /* The tokens as fed: BOS replaces the first token of each chunk. */
    size_t n_fed = n_chunks * (size_t)ctx;
    for (size_t ch = 0; add_bos && ch < n_chunks; ch++) all[ch * (size_t)ctx] = rl_tok_bos(tok);
    if (base) {
        if (n_chunks != bh.n_chunks) {
            fprintf(stderr, "rawloop: %s has %llu chunks of %ld tokens, %s has only %zu\n",
                    base_path, (unsigned long long)bh.n_chunks, ctx, path, n_chunks);
            goto out;
        }
        for (size_t i = 0; i < n_fed; i++)
            if (all[i] != base_toks[i]) {
                fprintf(stderr, "rawloop: %s scored other tokens: token %zu (chunk %zu) is %d "
                                "there, %d here (another text or tokenizer?)\n",
                        base_path, i, i / (size_t)ctx, (int)base_toks[i], (int)all[i]);
                goto out;
            }
    }
    size_t first = (size_t)ctx / 2, n_scored = kld_n_scored((size_t)ctx);
    size_t row_bytes = kld_row_bytes(nv);
    lg = malloc((size_t)ctx * nv * sizeof(float));
    if ((save_path || base) && !(rows = malloc(n_scored * row_bytes))) goto oom;
    if (base && kld_stats_init(&st, n_chunks * n_scored, &e) < 0) goto oom;
    if (!lg) goto oom;
    if (tmp) {
        kld_header h = {nv, (uint64_t)ctx, n_chunks, n_scored};
        if (kld_write_header(tmp, &h, all, &e) < 0) goto write_failed;
    }
    size_t count = 0;
    double nll = 0, nll2 = 0;
    fprintf(stderr, "rawloop: %zu chunks of %ld tokens, %s, %s; prefill %s\n", n_chunks, ctx,
            s.be.name, s.be.numerics, s.be.prefill);
    t0 = cli_now();
    for (size_t ch = 0; ch < n_chunks; ch++) {
        const int32_t *chunk = all + ch * (size_t)ctx;
        if (rl_backend_forward(&s.be, chunk, (size_t)ctx, 0, lg, true, &e) < 0) {
            fprintf(stderr, "rawloop: %s\n", e.msg);
            goto out;
        }
        if (base && fread(rows, row_bytes, n_scored, base) != n_scored) {
            fprintf(stderr, "rawloop: %s: read failed at chunk %zu\n", base_path, ch);
            goto out;
        }
        for (size_t i = first; i + 1 < (size_t)ctx; i++) {
            const float *row = lg + i * nv;
            unsigned char *r = rows ? rows + (i - first) * row_bytes : NULL;
            size_t im;
            double lse = kld_lse_argmax(row, nv, &im), l = lse - row[chunk[i + 1]];
            nll += l;
            nll2 += l * l;
            count++;
            if (tmp) kld_encode_row(row, nv, chunk[i + 1], lse, im, r);
            if (base && kld_stats_add(&st, row, nv, chunk[i + 1], lse, im, r, &e) < 0) {
                fprintf(stderr, "rawloop: %s: chunk %zu: %s\n", base_path, ch, e.msg);
                goto out;
            }
        }
        if (tmp && fwrite(rows, row_bytes, n_scored, tmp) != n_scored) goto write_failed;
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
    if (base) {
        printf("\n");
        kld_stats_print(&st, stdout);
    }
    if (tmp) {
        FILE *f = tmp;
        tmp = NULL;
        if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
            fclose(f);
            goto write_failed;
        }
        if (fclose(f) != 0) goto write_failed;
        if (rename(tmp_path, save_path) != 0) {
            fprintf(stderr, "rawloop: cannot rename %s to %s: %s\n", tmp_path, save_path,
                    strerror(errno));
            goto out;
        }
        tmp_disarm();
        fprintf(stderr, "rawloop: wrote %s (%zu positions of %zu log-probs)\n", save_path,
                count, nv);
    }
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "rawloop: out of memory (chunks of %ld tokens)\n", ctx);
    goto out;
write_failed:
    fprintf(stderr, "rawloop: writing %s failed: %s\n", tmp_path, strerror(errno));
out:
    if (tmp) fclose(tmp);
    if (g_tmp_armed) {
        unlink(tmp_path);
        tmp_disarm();
    }
    if (base) fclose(base);
    kld_stats_free(&st);
    free(rows);
    free(tmp_path);
    free(lg);
    free(base_toks);
    free(all);
    free(text);
    cli_session_close(&s);
    return rc;
}
