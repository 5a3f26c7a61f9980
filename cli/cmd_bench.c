/* rawloop bench: llama-bench-style pp/tg speeds plus the bytes each generated token reads and
 * the share of the machine's measured read bandwidth they represent. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "quant.h"

static void usage(FILE *out) {
    fprintf(out,
        "usage: rawloop bench [-m FILE] [-p 512] [-n 128] [-r 5] [-t N] [-d 0] [-c N] [--json] [--exact] [--profile]\n"
        "                    [--prefill exact|fast|auto] [--autotune]\n"
        "  -p N        prompt-processing test of N tokens (0 skips it)\n"
        "  -n N        generation test of N tokens (0 skips it)\n"
        "  -r N        repetitions (median and standard deviation reported)\n"
        "  -d N        run both tests after N tokens of context (depth)\n"
        "  -c N        KV cache size in tokens (default: what the tests need, -d plus the\n"
        "              longer of -p and -n, plus one; `rawloop run` takes min(model context,\n"
        "              4096)): the GPU sizes its attention splits and scratch by it\n"
        "  -b N        tokens per forward chunk in prompt processing (default: CPU 64, GPU fast prefill 2048)\n"
        "  -t N        threads (default: all cores)\n"
        "  --json      one JSON object instead of the table\n"
        "  --exact     fp32 activations (no 8-bit activation fast path)\n"
        "  --no-ceiling skip measuring the memory read bandwidth\n"
        "  --profile   after the timed runs, time each step of the forward pass over another\n"
        "              -n tokens (GPU: a graph with an event after every step; CPU: the wall\n"
        "              clock) and print its time, share of the token, bytes read and GB/s;\n"
        "              with -p, the same for one more prompt of -p tokens (CPU, GPU fast prefill)\n"
        "  --device D  cpu, cuda or auto (default)\n"
        "  --kv-type T f16 (default), f32 (CPU only), or q8 (8-bit blocks of 32) KV cache\n"
        "  --autotune  GPU: time tg (-n, -r, -d) while one pass of coordinate descent tries the\n"
        "              knobs (matvec warps, blocks per SM, streaming, PDL, persistent kernel; with\n"
        "              -d >= 1024 the attention split and its cap), each on a new backend, and\n"
        "              print the fastest as an export line\n"
        "  --prefill M exact (bit-identical to decoding token by token), fast (GPU: fp16\n"
        "              tensor-core GEMMs, same quality class, not the same bits) or auto\n"
        "              (default: fast on the GPU unless --exact; the CPU is always exact)\n");
}

typedef struct stats {
    double median, mean, sd, min, max;
} stats;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static stats summarize(double *v, size_t n) {
    stats s = {0};
    if (!n) return s;
    qsort(v, n, sizeof *v, cmp_d);
    s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    s.min = v[0];
    s.max = v[n - 1];
    for (size_t i = 0; i < n; i++) s.mean += v[i] / n;
    for (size_t i = 0; i < n; i++) s.sd += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0;
    return s;
}

/* One timed generation test: ng tokens one at a time after depth tokens of context (already
 * in the cache); tokens per second into *rate. */
static int tg_rate(rl_backend *be, const int32_t *toks, long ng, long depth, float *lg, double *rate,
                   rl_err *e) {
    double t0 = cli_now();
    for (long i = 0; i < ng; i++)
        if (rl_backend_forward(be, toks + i, 1, (size_t)(depth + i), lg, false, e)) return -1;
    *rate = ng / (cli_now() - t0);
    return 0;
}

/* Median tg rate, reps times (the context of depth tokens written before each). */
static int time_tg(rl_backend *be, const int32_t *toks, long ng, long reps, long depth, float *lg,
                   double *tps, rl_err *e) {
    double v[64];
    if (reps > 64) reps = 64;
    if (rl_backend_forward(be, toks, 1, 0, lg, false, e)) return -1; /* warm-up */
    for (long rep = 0; rep < reps; rep++) {
        if (depth > 0 && rl_backend_forward(be, toks, (size_t)depth, 0, NULL, false, e)) return -1;
        if (tg_rate(be, toks, ng, depth, lg, &v[rep], e)) return -1;
    }
    *tps = summarize(v, (size_t)reps).median;
    return 0;
}

/* --autotune: the GPU's knobs (docs/CUDA.md, "Knobs") tried on this machine and model by
 * coordinate descent: starting from the shipped defaults, each knob in turn takes each of its
 * values with the others at their best so far, each setting on a freshly opened backend (the
 * knobs are read at open). A full grid of seven knobs would be hundreds of runs; one pass costs
 * one run per value. Prints every run and the environment line that selects the best.
 * Attention's split knobs only matter with context, so they are tried only with -d >= 1024.
 * The caller's values of these variables are restored afterwards. */
typedef struct tune_knob {
    const char *name;
    const char *values[4]; /* "" first: unset, the shipped default; NULL ends the list */
    bool depth_only;
} tune_knob;

static const tune_knob k_tune[] = {
    {"RL_CUDA_MV_WARPS", {"", "4", "8", "16"}, false},
    {"RL_CUDA_MV_BLOCKS", {"", "2", "4", NULL}, false},
    {"RL_CUDA_MVS", {"", "0", "1", "2"}, false},
    {"RL_CUDA_PDL", {"", "0", "1", NULL}, false},
    {"RL_CUDA_PERSIST", {"", "1", NULL, NULL}, false},
    {"RL_CUDA_ATT_SPLIT", {"", "64", "256", NULL}, true},
    {"RL_CUDA_ATT_MAXSPLIT", {"", "16", "20", "64"}, true}, /* "": 16 or 20 by model (cuda_backend.cu) */
};
#define N_TUNE (sizeof k_tune / sizeof k_tune[0])

static void tune_apply(const int *pick) {
    for (size_t i = 0; i < N_TUNE; i++) {
        const char *v = k_tune[i].values[pick[i]];
        if (*v) setenv(k_tune[i].name, v, 1);
        else unsetenv(k_tune[i].name);
    }
}

static int autotune(cli_session *s, const rl_backend_opts *co, long ng, long reps, long depth,
                    const int32_t *toks, float *lg) {
    char *saved[N_TUNE];
    int best[N_TUNE] = {0}, rc = 0;
    for (size_t i = 0; i < N_TUNE; i++) {
        const char *v = getenv(k_tune[i].name);
        saved[i] = v ? strdup(v) : NULL;
    }
    double best_tps = 0;
    rl_err e = {{0}};
    printf("autotune: %s, tg%ld at depth %ld, median of %ld, each setting on a new backend;\n"
           "one pass of coordinate descent from the shipped defaults (\"-\": unset)%s\n\n"
           "| knob | value | tg t/s | best so far |\n| --- | ---: | ---: | ---: |\n",
           s->be.name, ng, depth, reps, depth >= 1024 ? "" : "; attention splits kept (-d < 1024)");
    for (size_t k = 0; k < N_TUNE && !rc; k++) {
        if (k_tune[k].depth_only && depth < 1024) continue;
        /* the defaults are timed once, as the first knob's first value */
        for (int v = k == 0 ? 0 : 1; v < 4 && k_tune[k].values[v] && !rc; v++) {
            int pick[N_TUNE];
            memcpy(pick, best, sizeof pick);
            pick[k] = v;
            tune_apply(pick);
            rl_backend_close(&s->be);
            double tps = 0;
            if (rl_backend_open(&s->be, &s->model, co, &e) || time_tg(&s->be, toks, ng, reps, depth, lg, &tps, &e)) {
                fprintf(stderr, "rawloop: autotune (%s=%s): %s\n", k_tune[k].name, k_tune[k].values[v], e.msg);
                rc = -1;
                break;
            }
            if (tps > best_tps) {
                best_tps = tps;
                memcpy(best, pick, sizeof best);
            }
            printf("| %s | %s | %.2f | %.2f |\n", k_tune[k].name, *k_tune[k].values[v] ? k_tune[k].values[v] : "-",
                   tps, best_tps);
            fflush(stdout);
        }
    }
    for (size_t i = 0; i < N_TUNE; i++) { /* the caller's environment as it was */
        if (saved[i]) setenv(k_tune[i].name, saved[i], 1);
        else unsetenv(k_tune[i].name);
        free(saved[i]);
    }
    if (rc) return -1;
    printf("\nfastest: %.2f tok/s with ", best_tps);
    bool any = false;
    for (size_t i = 0; i < N_TUNE; i++)
        if (best[i]) {
            printf("%s%s=%s", any ? " " : "\n  export ", k_tune[i].name, k_tune[i].values[best[i]]);
            any = true;
        }
    printf("%s\n(unset, the shipped defaults apply: docs/CUDA.md, \"Knobs\"; knobs are read when a "
           "backend opens; one pass of descent is not a full search)\n", any ? "" : "the shipped defaults");
    return 0;
}

int cmd_bench(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", 1, 0, 'm'}, {"n-prompt", 1, 0, 'p'}, {"n-gen", 1, 0, 'n'},
        {"repetitions", 1, 0, 'r'}, {"threads", 1, 0, 't'}, {"depth", 1, 0, 'd'}, {"ctx-size", 1, 0, 'c'},
        {"batch", 1, 0, 'b'}, {"json", 0, 0, 'j'}, {"exact", 0, 0, 'x'},
        {"no-ceiling", 0, 0, 'C'}, {"profile", 0, 0, 'P'}, {"device", 1, 0, 'D'}, {"kv-type", 1, 0, 'K'}, {"prefill", 1, 0, 'F'}, {"autotune", 0, 0, 'A'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *model = NULL;
    long np = 512, ng = 128, reps = 5, depth = 0, n_ctx = 0, v;
    bool json = false, no_ceiling = false, profile = false, tune = false;
    rl_backend_opts co = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:n:r:t:d:c:b:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'p': if (cli_parse_long("-p", optarg, 0, 1L << 20, &np)) return 2; break;
        case 'n': if (cli_parse_long("-n", optarg, 0, 1L << 20, &ng)) return 2; break;
        case 'r': if (cli_parse_long("-r", optarg, 1, 1000, &reps)) return 2; break;
        case 'd': if (cli_parse_long("-d", optarg, 0, 1L << 20, &depth)) return 2; break;
        case 'c': if (cli_parse_long("-c", optarg, 1, 1L << 24, &n_ctx)) return 2; break;
        case 't': if (cli_parse_long("-t", optarg, 1, 1024, &v)) return 2; co.n_threads = (size_t)v; break;
        case 'b': if (cli_parse_long("-b", optarg, 1, 4096, &v)) return 2; co.max_batch = (size_t)v; break;
        case 'j': json = true; break;
        case 'x': co.exact = true; break;
        case 'C': no_ceiling = true; break;
        case 'P': profile = true; break;
        case 'D': if (cli_parse_device(optarg, &co.device)) return 2; break;
        case 'K': if (cli_parse_kv_type(optarg, &co.kv_type)) return 2; break;
        case 'F': if (cli_parse_prefill(optarg, &co.prefill)) return 2; break;
        case 'A': tune = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    size_t need = (size_t)depth + (size_t)(np > ng ? np : ng);
    if (n_ctx && (size_t)n_ctx < need + 1) {
        fprintf(stderr, "rawloop: bench: -c %ld is too small: the tests need %zu tokens of context (-d %ld plus "
                "the longer of -p %ld and -n %ld, plus one)\n", n_ctx, need + 1, depth, np, ng);
        return 2;
    }
    co.n_ctx = n_ctx ? (size_t)n_ctx : need + 1;
    cli_session s;
    if (cli_session_open(&s, model, &co)) return 1;
    /* the prompt is profiled where it runs as batches (the CPU, the GPU's fast prefill); the
     * GPU's exact chunks are captured graphs without events, so there only decoding is */
    const bool prof_prompt = profile && np > 0 && (s.be.device == RL_DEVICE_CPU || !strncmp(s.be.prefill, "fast", 4));
    if (profile && (!s.be.ops->profile || (ng < 1 && !prof_prompt))) {
        if (!s.be.ops->profile)
            fprintf(stderr, "rawloop: --profile: the %s backend has no per-kernel profile\n", s.be.name);
        else
            fprintf(stderr, "rawloop: --profile needs a generation test (-n > 0), or a prompt (-p > 0) on the CPU "
                            "or with the GPU's fast prefill\n");
        cli_session_close(&s);
        return 1;
    }
    if (tune && (s.be.device != RL_DEVICE_CUDA || ng < 1 || json || profile)) {
        fprintf(stderr, "rawloop: --autotune %s\n", s.be.device != RL_DEVICE_CUDA
                ? "tunes the GPU's tile knobs; this backend has none (use --device cuda)"
                : ng < 1 ? "needs a generation test (-n > 0)" : "prints its own table (no --json/--profile)");
        cli_session_close(&s);
        return 1;
    }
    const rl_config *cfg = &s.model.cfg;
    size_t nt = s.be.n_threads;
    int rc = 1;
    rl_err e = {{0}};
    size_t n_tok = need + 1;
    int32_t *toks = malloc(n_tok * sizeof *toks);
    float *lg = malloc(cfg->n_vocab * sizeof(float));
    double *pp = calloc((size_t)reps, sizeof(double)), *tg = calloc((size_t)reps, sizeof(double));
    if (!toks || !lg || !pp || !tg) goto out;
    uint64_t r = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < n_tok; i++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        toks[i] = (int32_t)(r % cfg->n_vocab);
    }
    if (tune) {
        rc = autotune(&s, &co, ng, reps, depth, toks, lg) ? 1 : 0;
        goto out;
    }
    if (!json) fprintf(stderr, "rawloop: warming up\n");
    /* warm-up: on the GPU the whole prompt once (the first GEMMs of a size load their kernels) */
    size_t warm = np <= 0 ? 1 : s.be.device == RL_DEVICE_CUDA ? (size_t)np : (size_t)(np < 16 ? np : 16);
    if (rl_backend_forward(&s.be, toks, warm, 0, lg, false, &e) ||
        rl_backend_forward(&s.be, toks, 1, 0, lg, false, &e))
        goto fail;
    for (long rep = 0; rep < reps; rep++) {
        if (depth > 0 && rl_backend_forward(&s.be, toks, (size_t)depth, 0, NULL, false, &e)) goto fail;
        if (np > 0) {
            double t0 = cli_now();
            if (rl_backend_forward(&s.be, toks + depth, (size_t)np, (size_t)depth, lg, false, &e))
                goto fail;
            pp[rep] = np / (cli_now() - t0);
        }
        if (ng > 0 && tg_rate(&s.be, toks, ng, depth, lg, &tg[rep], &e)) goto fail;
        if (!json) fprintf(stderr, "rawloop: rep %ld/%ld: pp %.2f tok/s, tg %.2f tok/s\n",
                           rep + 1, reps, pp[rep], tg[rep]);
    }
    rl_prof_row prof[16], pprof[16];
    size_t n_prof = 0, n_pprof = 0;
    if (prof_prompt) {
        if (s.be.ops->profile(s.be.impl, true, &e)) goto fail;
        if (rl_backend_forward(&s.be, toks + depth, (size_t)np, (size_t)depth, lg, false, &e)) goto fail;
        n_pprof = s.be.ops->profile_rows(s.be.impl, pprof, sizeof pprof / sizeof *pprof);
        if (s.be.ops->profile(s.be.impl, false, &e)) goto fail;
    }
    if (profile && ng > 0) {
        if (depth > 0 && rl_backend_forward(&s.be, toks, (size_t)depth, 0, NULL, false, &e)) goto fail;
        if (s.be.ops->profile(s.be.impl, true, &e)) goto fail;
        for (long i = 0; i < ng; i++)
            if (rl_backend_forward(&s.be, toks + i, 1, (size_t)(depth + i), lg, false, &e)) goto fail;
        n_prof = s.be.ops->profile_rows(s.be.impl, prof, sizeof prof / sizeof *prof);
        if (s.be.ops->profile(s.be.impl, false, &e)) goto fail;
    }
    double prof_us = 0, pprof_us = 0;
    for (size_t i = 0; i < n_prof; i++) prof_us += prof[i].us;
    for (size_t i = 0; i < n_pprof; i++) pprof_us += pprof[i].us;
    stats sp = summarize(pp, (size_t)reps), sg = summarize(tg, (size_t)reps);
    size_t wbytes = rl_model_bytes_per_token(&s.model);
    size_t kvb = ng > 0 ? rl_backend_kv_read_bytes(&s.be, (size_t)(depth + ng / 2)) : 0;
    double bpt = (double)(wbytes + kvb), gbps = bpt * sg.median / 1e9;
    double ceil = no_ceiling ? 0 : s.be.ops->read_ceiling_gbps(s.be.impl);
    size_t chunk_tok = 0, chunk_n = s.be.ops->chunk_launches ? s.be.ops->chunk_launches(s.be.impl, &chunk_tok) : 0;
    char desc[256];
    rl_model_describe(&s.model, desc, sizeof desc);
    if (json) {
        printf("{\"model\": \"%s\", \"type\": \"%s\", \"backend\": \"%s\", "
               "\"threads\": %zu, \"exact\": %s, \"depth\": %ld, \"n_ctx\": %zu, \"n_prompt\": %ld, "
               "\"n_gen\": %ld, \"reps\": %ld, \"pp_tps\": %.3f, \"pp_sd\": %.3f, "
               "\"pp_min\": %.3f, \"pp_max\": %.3f, \"tg_tps\": %.3f, \"tg_sd\": %.3f, "
               "\"tg_min\": %.3f, \"tg_max\": %.3f, \"bytes_per_token\": %.0f, "
               "\"weight_bytes_per_token\": %zu, \"kv_bytes_per_token\": %zu, \"gbps\": %.3f, "
               "\"ceiling_gbps\": %.3f, \"ceiling_share\": %.4f, \"file_bytes\": %zu, "
               "\"repacked_bytes\": %zu, \"prefill\": \"%s\", \"launches_per_token\": ",
               desc, rl_model_type_name(&s.model), s.be.name, nt,
               co.exact ? "true" : "false", depth, rl_backend_n_ctx(&s.be), np, ng, reps, sp.median, sp.sd, sp.min,
               sp.max, sg.median, sg.sd, sg.min, sg.max, bpt, wbytes, kvb, gbps, ceil,
               ceil > 0 ? gbps / ceil : 0, s.model.file_weight_bytes, s.be.repacked_bytes, s.be.prefill);
        if (s.be.launches) printf("%zu", s.be.launches);
        else printf("null"); /* the CPU launches no kernels */
        /* an exact prompt's chunk graph (its launches for chunk_tokens tokens), where one ran */
        if (chunk_n) printf(", \"launches_per_chunk\": %zu, \"chunk_tokens\": %zu", chunk_n, chunk_tok);
        else printf(", \"launches_per_chunk\": null, \"chunk_tokens\": null");
        if (profile && ng > 0) {
            printf(", \"profile\": [");
            for (size_t i = 0; i < n_prof; i++)
                printf("%s{\"step\": \"%s\", \"steps_per_token\": %.2f, \"us_per_token\": %.3f, "
                       "\"bytes_per_token\": %.0f, \"gbps\": %.2f}", i ? ", " : "", prof[i].name,
                       (double)prof[i].calls / ng, prof[i].us / ng, prof[i].bytes / ng,
                       prof[i].us > 0 ? prof[i].bytes / (prof[i].us * 1e3) : 0);
            printf("]");
        }
        if (prof_prompt) {
            printf(", \"prompt_profile\": [");
            for (size_t i = 0; i < n_pprof; i++)
                printf("%s{\"step\": \"%s\", \"calls\": %zu, \"us\": %.3f, \"bytes\": %.0f, \"gbps\": %.2f}",
                       i ? ", " : "", pprof[i].name, pprof[i].calls, pprof[i].us, pprof[i].bytes,
                       pprof[i].us > 0 ? pprof[i].bytes / (pprof[i].us * 1e3) : 0);
            printf("]");
        }
        printf("}\n");
    } else {
        printf("| model | size | params | backend | threads | test | t/s | GB/s | %% of read "
               "ceiling |\n| --- | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: |\n");
        char dtag[32] = "";
        if (depth) snprintf(dtag, sizeof dtag, " @ d%ld", depth);
        if (np > 0)
            printf("| %s %s | %.2f GB | %.2f B | %s | %zu | pp%ld%s | %.2f ± %.2f | | |\n",
                   cfg->arch_name, rl_model_type_name(&s.model), s.model.file_weight_bytes / 1e9,
                   rl_model_n_params(&s.model) / 1e9, s.be.name, nt, np, dtag, sp.median,
                   sp.sd);
        if (ng > 0)
            printf("| %s %s | %.2f GB | %.2f B | %s | %zu | tg%ld%s | %.2f ± %.2f | %.1f | "
                   "%.0f%% |\n", cfg->arch_name, rl_model_type_name(&s.model),
                   s.model.file_weight_bytes / 1e9, rl_model_n_params(&s.model) / 1e9,
                   s.be.name, nt, ng, dtag, sg.median, sg.sd, gbps,
                   ceil > 0 ? 100 * gbps / ceil : 0);
        printf("\nbytes per generated token: %.1f MB (weights %.1f MB + KV %.1f MB at position "
               "%ld); read ceiling %.1f GB/s (%s, %zu threads, measured now); %s; median ± sd of %ld "
               "runs\n", bpt / 1e6, wbytes / 1e6, kvb / 1e6, depth + ng / 2, ceil, s.be.name, nt,
               s.be.numerics, reps);
        if (np > 0) printf("prompt processing: prefill %s\n", s.be.prefill);
        if (chunk_n)
            printf("an exact chunk of %zu tokens: one graph of %zu launches (%.1f per token; decoding: %zu per "
                   "token)\n", chunk_tok, chunk_n, (double)chunk_n / (double)chunk_tok, s.be.launches);
        if (prof_prompt) {
            const char *how = s.be.device == RL_DEVICE_CPU ? "the wall clock after every step"
                                                           : "an event after every step";
            printf("\nper-step profile of one prompt of %ld tokens at depth %ld (%s; %.2f ms in all, "
                   "%.0f tok/s):\n\n| step | calls | ms | %% of prompt | GB | GB/s |\n"
                   "| --- | ---: | ---: | ---: | ---: | ---: |\n", np, depth, how, pprof_us / 1e3,
                   pprof_us > 0 ? np / (pprof_us * 1e-6) : 0);
            for (size_t i = 0; i < n_pprof; i++)
                printf("| %s | %zu | %.3f | %.1f%% | %.2f | %.0f |\n", pprof[i].name, pprof[i].calls,
                       pprof[i].us / 1e3, 100 * pprof[i].us / pprof_us, pprof[i].bytes / 1e9,
                       pprof[i].us > 0 ? pprof[i].bytes / (pprof[i].us * 1e3) : 0);
        }
        if (profile && ng > 0) {
            printf("\nper-step profile over %ld tokens at depth %ld (%s; %.1f us/token in all):\n\n"
                   "| step | calls/token | us/token | %% of token | MB/token | GB/s | %% of ceiling |\n"
                   "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n", ng, depth,
                   s.be.device == RL_DEVICE_CPU ? "the wall clock after every step"
                                                : "a graph with a timing event after every step",
                   prof_us / ng);
            for (size_t i = 0; i < n_prof; i++) {
                double g = prof[i].us > 0 ? prof[i].bytes / (prof[i].us * 1e3) : 0;
                printf("| %s | %.0f | %.2f | %.1f%% | %.2f | %.0f | %.0f%% |\n", prof[i].name,
                       (double)prof[i].calls / ng, prof[i].us / ng, 100 * prof[i].us / prof_us,
                       prof[i].bytes / ng / 1e6, g, ceil > 0 ? 100 * g / ceil : 0);
            }
        }
        if (s.be.repacked_bytes)
            printf("weights repacked at load into an interleaved copy: %.2f GB (the mapped "
                   "originals are released)\n", s.be.repacked_bytes / 1e9);
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "rawloop: %s\n", e.msg);
out:
    free(toks);
    free(lg);
    free(pp);
    free(tg);
    cli_session_close(&s);
    return rc;
}
