/* rawloop run: prompt in, continuation streamed out. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "sampler.h"

static void usage(FILE *out) {
    fprintf(out,
        "usage: rawloop run [options]\n"
        "Generates a continuation of the prompt and streams it to stdout; speeds go to stderr.\n\n"
        "  -m, --model FILE       GGUF model (default: the shipped models/rawloop-small.gguf)\n"
        "  -p, --prompt TEXT      prompt text (special tokens like <s> are parsed)\n"
        "  -f, --file FILE        read the prompt from FILE ('-' = stdin)\n"
        "      --ids \"1 2 3\"      prompt as token ids (no BOS is added)\n"
        "  -n, --n-predict N      tokens to generate (default 128)\n"
        "  -c, --ctx-size N       context size in tokens (default: min(model, 4096))\n"
        "  -t, --threads N        CPU threads (default: all cores)\n"
        "  -b, --batch N          prompt tokens per forward chunk (default: CPU 64, GPU fast\n"
        "                         prefill 2048; GPU exact prefill takes 16, 8, 4 or 1, the\n"
        "                         largest not above N)\n"
        "      --device D         cpu, cuda or auto (default auto: cuda when built with it and\n"
        "                         a GPU is present)\n"
        "      --temp T           temperature, 0 = greedy (default 0.8)\n"
        "      --top-k K          (default 40, 0 = off)\n"
        "      --top-p P          (default 0.95, 1 = off)\n"
        "      --min-p P          (default 0.05, 0 = off)\n"
        "      --repeat-penalty R (default 1.0 = off)\n"
        "      --repeat-last-n N  tokens the penalty looks back over (default 64)\n"
        "  -s, --seed N           RNG seed (default: random, printed on stderr)\n"
        "      --exact            keep activations in fp32 (no 8-bit activation fast path)\n"
        "      --kv-type T        KV cache type: f16 (default), f32 (CPU only), or q8 (8-bit)\n"
        "      --prefill M        how the prompt runs: exact (bit-identical to decoding it token\n"
        "                         by token), fast (GPU: fp16 tensor-core GEMMs, same quality\n"
        "                         class, not the same bits) or auto (default: fast on the GPU\n"
        "                         unless --exact; the CPU is always exact)\n"
        "      --no-bos           do not add the BOS token before the prompt\n"
        "      --ignore-eos       keep generating past end-of-generation tokens\n"
        "      --print-ids        print generated token ids instead of text\n"
        "  -h, --help             this help\n");
}

enum { O_TEMP = 256, O_TOPK, O_TOPP, O_MINP, O_RP, O_RLN, O_EXACT, O_NOBOS, O_IGNEOS, O_IDS,
       O_PRINTIDS, O_DEVICE, O_KV, O_PREFILL };

int cmd_run(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", 1, 0, 'm'}, {"prompt", 1, 0, 'p'}, {"file", 1, 0, 'f'},
        {"n-predict", 1, 0, 'n'}, {"ctx-size", 1, 0, 'c'}, {"threads", 1, 0, 't'},
        {"batch", 1, 0, 'b'}, {"seed", 1, 0, 's'}, {"temp", 1, 0, O_TEMP}, {"top-k", 1, 0, O_TOPK},
        {"top-p", 1, 0, O_TOPP}, {"min-p", 1, 0, O_MINP}, {"repeat-penalty", 1, 0, O_RP},
        {"repeat-last-n", 1, 0, O_RLN}, {"exact", 0, 0, O_EXACT}, {"no-bos", 0, 0, O_NOBOS},
        {"ignore-eos", 0, 0, O_IGNEOS}, {"ids", 1, 0, O_IDS}, {"print-ids", 0, 0, O_PRINTIDS}, {"device", 1, 0, O_DEVICE}, {"kv-type", 1, 0, O_KV}, {"prefill", 1, 0, O_PREFILL},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *model = NULL, *prompt = NULL, *pfile = NULL, *ids_text = NULL;
    long n_predict = 128, n_ctx = 0, threads = 0, batch = 0, v;
    bool seeded = false, no_bos = false, ignore_eos = false, print_ids = false;
    rl_sampler_opts so = rl_sampler_defaults();
    rl_backend_opts co = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:f:n:c:t:b:s:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'f': pfile = optarg; break;
        case O_IDS: ids_text = optarg; break;
        case 'n': if (cli_parse_long("-n", optarg, 0, 1L << 30, &n_predict)) return 2; break;
        case 'c': if (cli_parse_long("-c", optarg, 1, 1L << 24, &n_ctx)) return 2; break;
        case 't': if (cli_parse_long("-t", optarg, 1, 1024, &threads)) return 2; break;
        case 'b': if (cli_parse_long("-b", optarg, 1, 4096, &batch)) return 2; co.max_batch = (size_t)batch; break;
        case 's':
            if (cli_parse_long("--seed", optarg, 0, 0x7fffffffffffffffL, &v)) return 2;
            so.seed = (uint64_t)v;
            seeded = true;
            break;
        case O_TEMP: if (cli_parse_float("--temp", optarg, &so.temp)) return 2; break;
        case O_TOPK:
            if (cli_parse_long("--top-k", optarg, 0, 1L << 30, &v)) return 2;
            so.top_k = (int32_t)v;
            break;
        case O_TOPP: if (cli_parse_float("--top-p", optarg, &so.top_p)) return 2; break;
        case O_MINP: if (cli_parse_float("--min-p", optarg, &so.min_p)) return 2; break;
        case O_RP: if (cli_parse_float("--repeat-penalty", optarg, &so.repeat_penalty)) return 2; break;
        case O_RLN:
            if (cli_parse_long("--repeat-last-n", optarg, 0, 1L << 20, &v)) return 2;
            so.repeat_last_n = (size_t)v;
            break;
        case O_EXACT: co.exact = true; break;
        case O_NOBOS: no_bos = true; break;
        case O_IGNEOS: ignore_eos = true; break;
        case O_PRINTIDS: print_ids = true; break;
        case O_DEVICE: if (cli_parse_device(optarg, &co.device)) return 2; break;
        case O_KV: if (cli_parse_kv_type(optarg, &co.kv_type)) return 2; break;
        case O_PREFILL: if (cli_parse_prefill(optarg, &co.prefill)) return 2; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "rawloop run: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!!prompt + !!pfile + !!ids_text > 1) {
        fprintf(stderr, "rawloop run: give only one of -p, -f and --ids\n");
        return 2;
    }
    if (!seeded) so.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);

    char *pbuf = NULL;
    size_t plen = 0;
    if (pfile && cli_read_file(pfile, &pbuf, &plen)) return 1;
    if (prompt) plen = strlen(prompt);

    co.n_threads = (size_t)threads;
    co.n_ctx = (size_t)n_ctx;
    cli_session s;
    if (cli_session_open(&s, model, &co)) {
        free(pbuf);
        return 1;
    }
    const rl_config *cfg = &s.model.cfg;
    rl_tokenizer *tok = s.model.tok;
    int rc = 1;
    int32_t *ids = NULL, *toks = NULL;
    size_t n_ids = 0;
    float *logits = malloc(cfg->n_vocab * sizeof(float));
    rl_sampler *smp = NULL;
    rl_err e = {{0}};
    if (!logits) goto out;
    if (ids_text) {
        if (cli_parse_ids(ids_text, &ids, &n_ids)) goto out;
    } else {
        const char *text = pbuf ? pbuf : prompt ? prompt : "";
        if (rl_tok_encode(tok, text, plen, true, &ids, &n_ids, &e) < 0) {
            fprintf(stderr, "rawloop: tokenizing the prompt: %s\n", e.msg);
            goto out;
        }
        if (!no_bos && rl_tok_add_bos(tok) && rl_tok_bos(tok) >= 0) {
            int32_t *withbos = malloc((n_ids + 1) * sizeof *withbos);
            if (!withbos) goto out;
            withbos[0] = rl_tok_bos(tok);
            memcpy(withbos + 1, ids, n_ids * sizeof *ids);
            free(ids);
            ids = withbos;
            n_ids++;
        }
    }
    if (n_ids == 0) {
        fprintf(stderr, "rawloop: the prompt is empty and the model adds no BOS token; give a "
                        "prompt with -p\n");
        goto out;
    }
    size_t ctx = rl_backend_n_ctx(&s.be);
    if (n_ids + (size_t)n_predict > ctx) {
        fprintf(stderr, "rawloop: prompt (%zu tokens) + -n %ld exceeds the context of %zu tokens; "
                        "raise -c (model trained for %zu) or lower -n\n", n_ids, n_predict, ctx,
                cfg->n_ctx_train);
        goto out;
    }
    if (rl_sampler_new(&smp, &so, cfg->n_vocab, &e) < 0) {
        fprintf(stderr, "rawloop: %s\n", e.msg);
        goto out;
    }
    if (!seeded && so.temp > 0) fprintf(stderr, "rawloop: seed %llu\n", (unsigned long long)so.seed);
    for (size_t i = 0; i < n_ids; i++) rl_sampler_accept(smp, ids[i]);

    double t0 = cli_now();
    if (rl_backend_forward(&s.be, ids, n_ids, 0, logits, false, &e) < 0) {
        fprintf(stderr, "rawloop: %s\n", e.msg);
        goto out;
    }
    double t1 = cli_now();
    rl_detok dt;
    rl_detok_init(&dt, tok);
    char piece[1024];
    size_t n_gen = 0, pos = n_ids;
    for (; n_gen < (size_t)n_predict; n_gen++) {
        int32_t next = rl_sampler_sample(smp, logits);
        rl_sampler_accept(smp, next);
        if (!ignore_eos && rl_tok_is_eog(tok, next)) break;
        if (print_ids) {
            printf(n_gen ? " %d" : "%d", next);
        } else {
            size_t k = rl_detok_push(&dt, next, piece, sizeof piece);
            fwrite(piece, 1, k, stdout);
        }
        fflush(stdout);
        if (n_gen + 1 == (size_t)n_predict) {
            n_gen++;
            break;
        }
        if (rl_backend_forward(&s.be, &next, 1, pos++, logits, false, &e) < 0) {
            fprintf(stderr, "\nrawloop: %s\n", e.msg);
            goto out;
        }
    }
    if (!print_ids) {
        size_t k = rl_detok_flush(&dt, piece, sizeof piece);
        fwrite(piece, 1, k, stdout);
    }
    printf("\n");
    fflush(stdout); /* the text's last line before the stats on stderr, also when both go to one pipe */
    double t2 = cli_now();
    fprintf(stderr, "rawloop: prompt %zu tokens in %.3f s (%.2f tok/s); generated %zu tokens in "
                    "%.3f s (%.2f tok/s); %s, %zu threads, %s; prefill %s\n", n_ids, t1 - t0,
            n_ids / (t1 - t0), n_gen, t2 - t1, n_gen > 1 ? (n_gen - 1) / (t2 - t1) : 0.0,
            s.be.name, s.be.n_threads, s.be.numerics, s.be.prefill);
    rc = 0;
out:
    rl_sampler_free(smp);
    free(logits);
    free(ids);
    free(toks);
    free(pbuf);
    cli_session_close(&s);
    return rc;
}
