/* Token sampling: greedy, or penalties -> top-k -> top-p -> min-p -> temperature -> draw, the
 * order llama.cpp's default chain uses, with a seeded RNG so a seed reproduces the text. */
#ifndef RL_SAMPLER_H
#define RL_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct rl_sampler_opts {
    float temp;           /* <= 0: greedy (first maximum wins ties) */
    int32_t top_k;        /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off */
    size_t repeat_last_n; /* how many recent tokens the penalty looks at */
    uint64_t seed;
} rl_sampler_opts;

typedef struct rl_sampler rl_sampler;

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, penalty 1.0 over 64. */
rl_sampler_opts rl_sampler_defaults(void);
int rl_sampler_new(rl_sampler **out, const rl_sampler_opts *o, size_t n_vocab, rl_err *e);
void rl_sampler_free(rl_sampler *s);
/* Remembers an emitted (or prompt) token for the repetition penalty. */
void rl_sampler_accept(rl_sampler *s, int32_t tok);
/* Picks the next token from logits[n_vocab]; logits are not modified. */
int32_t rl_sampler_sample(rl_sampler *s, const float *logits);
/* Index of the largest value, the first one on ties. */
int32_t rl_argmax(const float *x, size_t n);

#endif
