/* Base log-probability files and KL-divergence statistics for `rawloop perplexity
 * --save-logits / --kl-divergence`, with llama-perplexity's statistics (mean KLD with its
 * standard error, percentiles interpolated the same way, "Same top p", ln(PPL(Q)/PPL(base))
 * with the covariance-aware error) but rawloop's own file format.
 *
 * File layout (every field little-endian, whatever the host):
 *   0   char[8]  "RLLOGIT1"
 *   8   u32      version (1)
 *   12  u32      reserved, 0
 *   16  u64      n_vocab
 *   24  u64      ctx          tokens per chunk
 *   32  u64      n_chunks
 *   40  u64      n_scored     scored positions per chunk: ctx - 1 - ctx/2
 *   48  i32[ctx * n_chunks]   the tokens as fed to the model (BOS already at each chunk start)
 *   ..  n_chunks * n_scored rows of KLD_ROW_HEAD + 2 * n_vocab bytes:
 *         f32 lo      log-prob of code 0
 *         f32 step    log-prob per code unit
 *         i32 argmax  exact argmax of the base logits (first index on ties)
 *         f32 lp_tok  exact log-prob of the token that follows (for PPL(base))
 *         u16 code[n_vocab]   log-prob ~= lo + step * code
 *
 * Storage choice and its error: each row's log-probs are mapped linearly onto 0..65535 between
 * the row's largest log-prob and its smallest (floored at 64 nats below the largest; anything
 * lower has p < 1.6e-28). That is llama.cpp's uint16 idea, except llama.cpp floors at 16 nats
 * and drops those tokens from the sum; we keep every token. The rounding error of a log-prob is
 * at most step/2 <= 64/65535/2 = 4.9e-4 nats (about 1.2e-4 for a typical 16-nat range). On
 * reading, the row is renormalized so the decoded probabilities sum to 1: then the stored
 * distribution is itself a distribution, the first-order error term cancels, and KL(base||base)
 * comes out at ~1e-8 instead of ~1e-5. Top-1 and PPL(base) use the exact argmax and lp_tok. */
#ifndef RL_CLI_KLD_H
#define RL_CLI_KLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

#define KLD_MAGIC "RLLOGIT1"
#define KLD_VERSION 1u
#define KLD_HEAD_BYTES 48u
#define KLD_ROW_HEAD 16u

/* What a base file describes; n_scored is derived from ctx but stored so a reader can check. */
typedef struct kld_header {
    uint64_t n_vocab, ctx, n_chunks, n_scored;
} kld_header;

size_t kld_row_bytes(size_t n_vocab);
/* Scored positions per chunk for ctx: logits at ctx/2 .. ctx-2 predict the next token. */
size_t kld_n_scored(size_t ctx);

/* Writes the header and the [ctx * n_chunks] fed tokens. */
int kld_write_header(FILE *f, const kld_header *h, const int32_t *tokens, rl_err *e);
/* Reads and checks the header (magic, version, n_scored, file size against the counts) and
 * returns the fed tokens in *tokens (malloc'ed). On success f is positioned at the first row. */
int kld_read_header(FILE *f, kld_header *h, int32_t **tokens, rl_err *e);

/* Log-sum-exp of n logits (in double, so long vocabularies add up) and their first argmax:
 * computed once per scored row by the caller and given to the two functions below. */
double kld_lse_argmax(const float *x, size_t n, size_t *imax);

/* Encodes one row of logits (n_vocab floats, log-sum-exp lse, argmax im) predicting token tok
 * into row (kld_row_bytes(n_vocab) bytes). */
void kld_encode_row(const float *logits, size_t n_vocab, int32_t tok, double lse, size_t im,
                    unsigned char *row);

/* Running KL statistics over every scored position. */
typedef struct kld_stats {
    double sum_nll, sum_nll2;            /* quant model's -log p(next token) */
    double sum_nll_base, sum_nll_base2;  /* base model's, from the file */
    double sum_nll_nll_base;             /* for the covariance of the two */
    double sum_kld, sum_kld2;
    double sum_dp, sum_dp2, sum_dp4;     /* dp = p_quant(next) - p_base(next) */
    size_t n_same_top, count, cap;
    float *kld;                          /* [cap] per-position KL, for the percentiles */
    float *dp;                           /* [cap] per-position dp */
} kld_stats;

int kld_stats_init(kld_stats *s, size_t n_positions, rl_err *e);
void kld_stats_free(kld_stats *s);
/* Adds one position: logits of the model under test (n_vocab floats), the token that follows
 * and the base file's row. Fails (leaving s unchanged) on a corrupt row. */
int kld_stats_add(kld_stats *s, const float *logits, size_t n_vocab, int32_t tok, double lse,
                  size_t im, const unsigned char *row, rl_err *e);
/* Prints llama-perplexity's statistics block, then one machine-readable line
 * "KLD: n=.. mean=.. se=.. median=.. p99=.. max=.. top1=.. top1_se=.. ln_ppl_ratio=.. ..."
 * (top1 as a fraction). Sorts the per-position arrays. */
void kld_stats_print(kld_stats *s, FILE *out);

#endif
