/* Tokenizers built from GGUF metadata (tokenizer.ggml.*):
 *  - "llama": SentencePiece BPE (score-ordered merges, byte fallback <0xXX>, space prefix '▁');
 *  - "gpt2": byte-level BPE (rank-ordered merges) with the pre-tokenizer regexes named by
 *    tokenizer.ggml.pre (PCRE2 with Unicode classes), unknown names fall back to "default" with
 *    a warning available through rl_tok_warning().
 * Special (control / user-defined) tokens are matched in the text only when parse_special. */
#ifndef RL_TOKENIZER_H
#define RL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gguf.h"

typedef struct rl_tokenizer rl_tokenizer;

/* Builds the tokenizer from an open GGUF (a vocab-only file is enough). Copies what it keeps,
 * so the file may be closed afterwards. */
int rl_tok_load(rl_tokenizer **out, const gguf_file *f, rl_err *e);
void rl_tok_free(rl_tokenizer *t);

/* Encodes len bytes of text (invalid UTF-8 is replaced, never rejected). Does not add BOS.
 * *ids is malloc'ed, caller frees. */
int rl_tok_encode(const rl_tokenizer *t, const char *text, size_t len, bool parse_special,
                  int32_t **ids, size_t *n_ids, rl_err *e);

size_t rl_tok_n_vocab(const rl_tokenizer *t);
int32_t rl_tok_bos(const rl_tokenizer *t); /* -1 if none */
int32_t rl_tok_eos(const rl_tokenizer *t); /* -1 if none */
bool rl_tok_add_bos(const rl_tokenizer *t); /* tokenizer.ggml.add_bos_token, with the model
                                               type's default when absent */
bool rl_tok_is_eog(const rl_tokenizer *t, int32_t id); /* EOS, EOT, <|im_end|>-like ends */
const char *rl_tok_warning(const rl_tokenizer *t);  /* NULL or a load-time warning */
const char *rl_tok_model_name(const rl_tokenizer *t); /* "llama" / "gpt2" */
const char *rl_tok_pre_name(const rl_tokenizer *t);   /* pre-tokenizer in use */

/* Raw bytes of one token's text (byte-fallback and byte-level tokens decoded, '▁' -> ' ');
 * control tokens give their text only if show_special. Returns byte count written (<= cap;
 * a piece longer than cap is truncated to cap and the full length returned). */
size_t rl_tok_piece(const rl_tokenizer *t, int32_t id, bool show_special, char *buf, size_t cap);

/* Streaming detokenizer: feed ids one at a time, get back only complete UTF-8 sequences
 * (incomplete trailing bytes are held until the next token; invalid ones become U+FFFD).
 * Drops the leading space the SPM space prefix adds to the first token. */
typedef struct rl_detok {
    const rl_tokenizer *t;
    bool first;
    size_t n_pending;
    unsigned char pending[8];
} rl_detok;
void rl_detok_init(rl_detok *d, const rl_tokenizer *t);
/* Appends the text of id to out (cap bytes); returns bytes written. cap >= 256 + 8 suffices for
 * any vocabulary token of up to 256 bytes; longer pieces are written up to cap. */
size_t rl_detok_push(rl_detok *d, int32_t id, char *out, size_t cap);
/* Flushes held bytes (as U+FFFD if incomplete). */
size_t rl_detok_flush(rl_detok *d, char *out, size_t cap);

/* Test hook: splits len bytes of text (after invalid-UTF-8 replacement, returned malloc'ed in
 * *clean) with the regex set of pre-tokenizer `pre` (a tokenizer.ggml.pre name). Piece i is
 * clean[ends[i-1] .. ends[i]) (ends[-1] = 0); *ends is malloc'ed. Caller frees both. */
int rl_pretok_split(const char *pre, const char *text, size_t len, char **clean,
                    size_t *clean_len, size_t **ends, size_t *n_pieces, rl_err *e);

#endif
