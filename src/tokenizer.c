/* Tokenizers: SentencePiece BPE ("llama") and byte-level BPE ("gpt2") from GGUF metadata.
 *
 * Shared flow of rl_tok_encode:
 *   1. invalid UTF-8 is replaced by U+FFFD (maximal-subpart rule, as Python's errors="replace"),
 *   2. special tokens are cut out of the text (user-defined always, control/unknown only when
 *      parse_special; leftmost, longest at a position),
 *   3. each remaining fragment is encoded by the model: SPM escapes spaces and merges by score;
 *      BPE splits with the pre-tokenizer regexes and merges by rank.
 * Everything the tokenizer keeps is copied out of the GGUF at load time. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TOK_SPM, TOK_BPE };

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum {
    TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4,
    TT_UNUSED = 5, TT_BYTE = 6,
};

#define MAX_TOKEN_LEN ((size_t)1 << 16) /* longer token texts are rejected as malformed */
#define MAX_REGEX 8
#define MAX_EOG 16

struct rl_tokenizer {
    int kind;               /* TOK_SPM / TOK_BPE */
    size_t n_vocab;
    char *text;             /* all token texts, each NUL-terminated, back to back */
    size_t *off;            /* [n_vocab] start of token i in text */
    uint32_t *len;          /* [n_vocab] its length (<= MAX_TOKEN_LEN) */
    float *score;           /* [n_vocab] SPM merge priority (0 when absent) */
    uint8_t *type;          /* [n_vocab] TT_* */

    int32_t *str_tab;       /* [str_mask+1] open addressing text -> id, -1 empty */
    size_t str_mask;

    uint64_t *mkey;         /* [m_mask+1] merge pair (left id << 32 | right id), ~0 empty */
    int32_t *mrank;         /* [m_mask+1] its rank (index in tokenizer.ggml.merges) */
    int32_t *mres;          /* [m_mask+1] id of the merged token */
    size_t m_mask;

    int32_t byte_tok[256];  /* BPE: token of each byte's GPT-2 char; SPM: <0xXX> token; -1 */

    int32_t *spec;          /* [n_spec] special-token ids sorted by (first byte, length desc) */
    size_t n_spec;
    size_t spec_start[257]; /* spec[spec_start[b] .. spec_start[b+1]) start with byte b */

    pcre2_code *re[MAX_REGEX];
    size_t n_re;

    bool ignore_merges, add_bos, add_space_prefix;
    int32_t bos, eos, eot, unk;
    int32_t eog[MAX_EOG];
    size_t n_eog;
    char model_name[8];
    char pre[64];
    char warning[256];
};

/* ---- UTF-8 ------------------------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (n > 0 bytes available), or 0 when invalid; then *sub
 * is the length of its maximal valid prefix (>= 1, replaced by one U+FFFD) and *trunc says that
 * prefix ran into the end of the buffer (so more bytes might still complete it). */
static size_t utf8_next(const unsigned char *s, size_t n, size_t *sub, bool *trunc) {
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    size_t need;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F; /* <= U+10FFFF */
    } else {
        *sub = 1;
        *trunc = false;
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *sub = i;
            *trunc = true;
            return 0;
        }
        if (s[i] < lo || s[i] > hi) {
            *sub = i;
            *trunc = false;
            return 0;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    return need;
}

/* Length of the (already valid) UTF-8 character starting with byte c. */
static size_t utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

static size_t utf8_put(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static uint32_t utf8_cp(const unsigned char *s, size_t l) {
    switch (l) {
    case 1: return s[0];
    case 2: return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    case 3: return (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    default:
        return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
               (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    }
}

/* Copy of text with every invalid sequence replaced by U+FFFD (EF BF BD); NULL when out of
 * memory. A valid text is still copied so callers own one buffer either way. */
static char *utf8_sanitize(const char *text, size_t len, size_t *out_len) {
    if (len > (SIZE_MAX - 1) / 3) return NULL;
    char *o = malloc(len * 3 + 1);
    if (!o) return NULL;
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, n = 0;
    while (i < len) {
        size_t sub;
        bool trunc;
        size_t l = utf8_next(s + i, len - i, &sub, &trunc);
        if (l) {
            memcpy(o + n, s + i, l);
            n += l;
            i += l;
        } else {
            memcpy(o + n, "\xEF\xBF\xBD", 3);
            n += 3;
            i += sub;
        }
    }
    o[n] = 0;
    *out_len = n;
    return o;
}

/* ---- GPT-2 byte <-> unicode mapping ----------------------------------------------------------
 * Printable bytes map to themselves; the rest, in byte order, to U+0100, U+0101, ... so every
 * byte has a visible character and vocab strings never hold raw spaces or control bytes. */
static uint32_t gpt2_byte_cp(unsigned b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174)) return b;
    unsigned k = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174))) k++;
    return 256 + k;
}

/* Inverse: byte of codepoint cp, or -1 when cp is not a mapped character. */
static int gpt2_cp_byte(uint32_t cp) {
    static int16_t inv[324];
    static bool init;
    if (!init) { /* idempotent and cheap: racing initialisations write the same values */
        for (size_t i = 0; i < 324; i++) inv[i] = -1;
        for (unsigned b = 0; b < 256; b++) inv[gpt2_byte_cp(b)] = (int16_t)b;
        init = true;
    }
    return cp < 324 ? inv[cp] : -1;
}

/* ---- hashing ---------------------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static size_t table_size(size_t n) {
    size_t s = 16;
    while (s < n * 2) s <<= 1;
    return s;
}

/* Id of the token whose text is exactly s[0..n), or -1. */
static int32_t tok_find(const rl_tokenizer *t, const char *s, size_t n) {
    size_t i = (size_t)hash_bytes(s, n) & t->str_mask;
    for (;;) {
        int32_t id = t->str_tab[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->text + t->off[id], s, n) == 0) return id;
        i = (i + 1) & t->str_mask;
    }
}

/* Later duplicates replace earlier ones, as in llama.cpp's token_to_id map. */
static void tok_insert(rl_tokenizer *t, int32_t id) {
    const char *s = t->text + t->off[id];
    size_t n = t->len[id];
    size_t i = (size_t)hash_bytes(s, n) & t->str_mask;
    for (;;) {
        int32_t cur = t->str_tab[i];
        if (cur < 0 || (t->len[cur] == n && memcmp(t->text + t->off[cur], s, n) == 0)) {
            t->str_tab[i] = id;
            return;
        }
        i = (i + 1) & t->str_mask;
    }
}

/* Slot of merge pair key: either holding key or the empty slot where it would go. */
static size_t merge_slot(const rl_tokenizer *t, uint64_t key) {
    size_t i = (size_t)hash_u64(key) & t->m_mask;
    while (t->mkey[i] != UINT64_MAX && t->mkey[i] != key) i = (i + 1) & t->m_mask;
    return i;
}

/* ---- pre-tokenizer regex sets (named by tokenizer.ggml.pre, as in llama.cpp) ------------------
 * A set is applied one regex after another: each regex splits every current piece into its
 * matches and the unmatched gaps between them, never looking past the piece's ends. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACTIONS_CI "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3_TAIL \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const char *const k_re_default[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+",
                                           "[0-9][0-9][0-9]", NULL};
static const char *const k_re_gpt2[] = {RE_GPT2, NULL};
static const char *const k_re_llama3[] = {
    RE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" RE_LLAMA3_TAIL, NULL};
static const char *const k_re_qwen2[] = {
    RE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" RE_LLAMA3_TAIL, NULL};
/* Characters NFC would rewrite (U+1F7D, U+1FBE, U+2126, ...) are escaped so that no editor or
 * tool normalising this file can change the class. */
static const char *const k_re_deepseek_llm[] = {
    "[\\r\\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
    NULL};
static const char *const k_re_deepseek_coder[] = {
    "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}", NULL};
static const char *const k_re_falcon[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2,
                                          "[0-9][0-9][0-9]", NULL};
static const char *const k_re_starcoder[] = {"\\p{N}", RE_GPT2, NULL};

typedef struct pre_def {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *canon; /* the name reported by rl_tok_pre_name */
    const char *const *re;
    bool ignore_merges, add_bos; /* llama.cpp's per-pre defaults */
} pre_def;

static const pre_def k_pre[] = {
    {"default", "default", k_re_default, false, false},
    {"gpt-2|gpt2|phi-2|mpt|olmo|jais", "gpt2", k_re_gpt2, false, false},
    {"llama3|llama-v3|llama-bpe|falcon3|pixtral", "llama-bpe", k_re_llama3, true, true},
    {"dbrx|smaug-bpe|chatglm-bpe", "llama3-regex", k_re_llama3, false, false},
    {"qwen2|stablelm2|hunyuan", "qwen2", k_re_qwen2, false, false},
    {"deepseek-llm", "deepseek-llm", k_re_deepseek_llm, false, false},
    {"deepseek-coder", "deepseek-coder", k_re_deepseek_coder, false, false},
    {"falcon", "falcon", k_re_falcon, false, false},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva", "starcoder", k_re_starcoder,
     false, false},
};

static const pre_def *find_pre(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++) {
        const char *p = k_pre[i].names;
        while (*p) {
            const char *bar = strchr(p, '|');
            size_t l = bar ? (size_t)(bar - p) : strlen(p);
            if (l == n && memcmp(p, name, n) == 0) return &k_pre[i];
            p += l + (bar ? 1 : 0);
        }
    }
    return NULL;
}

static int compile_regexes(pcre2_code **re, size_t *n_re, const pre_def *pd, rl_err *e) {
    *n_re = 0;
    for (size_t i = 0; pd->re[i]; i++) {
        int err;
        PCRE2_SIZE at;
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)pd->re[i], PCRE2_ZERO_TERMINATED,
                                      PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &at,
                                      NULL);
        if (!c) {
            char msg[128];
            pcre2_get_error_message(err, (PCRE2_UCHAR *)msg, sizeof msg);
            return rl_fail(e, "tokenizer: pre-tokenizer '%s' regex %zu does not compile at %zu: %s",
                           pd->canon, i, (size_t)at, msg);
        }
        pcre2_jit_compile(c, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
        re[(*n_re)++] = c;
    }
    return 0;
}

/* ---- growable arrays -------------------------------------------------------------------------- */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem) return -1;
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

typedef struct span {
    size_t a, b; /* [a, b) byte range of the sanitized text */
} span;

/* A merge candidate: adjacent symbols left/right; prio lower = earlier (BPE rank, -SPM score). */
typedef struct cand {
    double prio;
    int32_t left, right;
    int32_t x, y; /* BPE: the two ids; SPM: merged id and merged byte length */
} cand;

/* Scratch for one rl_tok_encode call. */
typedef struct work {
    int32_t *out;
    size_t n_out, cap_out;
    span *sp, *sp2;
    size_t cap_sp, cap_sp2;
    int32_t *sym, *prev, *next; /* symbol ids (-1 unknown), links (-1 none) */
    uint32_t *soff, *slen;      /* symbol byte offset/length inside the word */
    size_t cap_sym[5];
    cand *heap;
    size_t n_heap, cap_heap;
    char *buf;
    size_t cap_buf;
    pcre2_match_data *md;
    bool oom;
} work;

static void emit(work *w, int32_t id) {
    if (w->oom) return;
    if (grow((void **)&w->out, &w->cap_out, w->n_out + 1, sizeof *w->out)) {
        w->oom = true;
        return;
    }
    w->out[w->n_out++] = id;
}

static bool cand_less(const cand *a, const cand *b) {
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

static void heap_push(work *w, cand c) {
    if (w->oom) return;
    if (grow((void **)&w->heap, &w->cap_heap, w->n_heap + 1, sizeof *w->heap)) {
        w->oom = true;
        return;
    }
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = c;
}

static cand heap_pop(work *w) {
    cand top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < n && cand_less(&w->heap[l], best)) m = l, best = &w->heap[l];
        if (r < n && cand_less(&w->heap[r], best)) m = r;
        if (m == i) break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (n) w->heap[i] = last;
    return top;
}

static int ensure_syms(work *w, size_t n) {
    if (grow((void **)&w->sym, &w->cap_sym[0], n, sizeof *w->sym) ||
        grow((void **)&w->prev, &w->cap_sym[1], n, sizeof *w->prev) ||
        grow((void **)&w->next, &w->cap_sym[2], n, sizeof *w->next) ||
        grow((void **)&w->soff, &w->cap_sym[3], n, sizeof *w->soff) ||
        grow((void **)&w->slen, &w->cap_sym[4], n, sizeof *w->slen)) {
        w->oom = true;
        return -1;
    }
    return 0;
}

/* ---- pre-tokenization ------------------------------------------------------------------------- */

static void push_span(span **v, size_t *n, size_t *cap, size_t a, size_t b, bool *oom) {
    if (*oom || a >= b) return;
    if (grow((void **)v, cap, *n + 1, sizeof **v)) {
        *oom = true;
        return;
    }
    (*v)[(*n)++] = (span){a, b};
}

/* Splits text[a, b) with the tokenizer's regex set into w->sp[0..*n). */
static void pretokenize(const rl_tokenizer *t, work *w, const char *text, size_t a, size_t b,
                        size_t *n) {
    *n = 0;
    push_span(&w->sp, n, &w->cap_sp, a, b, &w->oom);
    for (size_t r = 0; r < t->n_re && !w->oom; r++) {
        size_t n2 = 0;
        for (size_t s = 0; s < *n && !w->oom; s++) {
            const char *subj = text + w->sp[s].a;
            size_t len = w->sp[s].b - w->sp[s].a, pos = 0, done = 0;
            while (pos < len) {
                int rc = pcre2_match(t->re[r], (PCRE2_SPTR)subj, len, pos, PCRE2_NO_UTF_CHECK,
                                     w->md, NULL);
                if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
                    rc = pcre2_match(t->re[r], (PCRE2_SPTR)subj, len, pos,
                                     PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, w->md, NULL);
                /* No match, or a resource limit on pathological input: the rest is one gap. */
                if (rc < 0) break;
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
                size_t ms = ov[0], me = ov[1];
                if (ms > done) push_span(&w->sp2, &n2, &w->cap_sp2, w->sp[s].a + done,
                                         w->sp[s].a + ms, &w->oom);
                if (me > ms) {
                    push_span(&w->sp2, &n2, &w->cap_sp2, w->sp[s].a + ms, w->sp[s].a + me,
                              &w->oom);
                    done = pos = me;
                } else { /* empty match: step one character, it stays in the next gap */
                    done = ms;
                    pos = ms + utf8_len((unsigned char)subj[ms]);
                }
            }
            if (done < len)
                push_span(&w->sp2, &n2, &w->cap_sp2, w->sp[s].a + done, w->sp[s].b, &w->oom);
        }
        span *tmp = w->sp;
        size_t tc = w->cap_sp;
        w->sp = w->sp2;
        w->cap_sp = w->cap_sp2;
        w->sp2 = tmp;
        w->cap_sp2 = tc;
        *n = n2;
    }
}

/* ---- byte-level BPE --------------------------------------------------------------------------- */

static void bpe_try_pair(const rl_tokenizer *t, work *w, int32_t l, int32_t r) {
    if (l < 0 || r < 0 || w->sym[l] < 0 || w->sym[r] < 0 || !t->mkey) return;
    uint64_t key = (uint64_t)(uint32_t)w->sym[l] << 32 | (uint32_t)w->sym[r];
    size_t i = merge_slot(t, key);
    if (t->mkey[i] == UINT64_MAX) return;
    heap_push(w, (cand){(double)t->mrank[i], l, r, w->sym[l], w->sym[r]});
}

static void bpe_word(const rl_tokenizer *t, work *w, const unsigned char *s, size_t n) {
    if (t->ignore_merges) { /* the whole pre-token is a token: take it without merging */
        if (n > SIZE_MAX / 2 - 1 ||
            grow((void **)&w->buf, &w->cap_buf, n * 2 + 1, 1)) {
            w->oom = true;
            return;
        }
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += utf8_put(gpt2_byte_cp(s[i]), w->buf + m);
        int32_t id = tok_find(t, w->buf, m);
        if (id >= 0) {
            emit(w, id);
            return;
        }
    }
    if (n > INT32_MAX || ensure_syms(w, n)) {
        w->oom = true;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        w->sym[i] = t->byte_tok[s[i]];
        w->prev[i] = (int32_t)i - 1;
        w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    w->n_heap = 0;
    for (size_t i = 1; i < n; i++) bpe_try_pair(t, w, (int32_t)i - 1, (int32_t)i);
    while (w->n_heap && !w->oom) {
        cand c = heap_pop(w);
        /* stale when either side has changed since the candidate was queued */
        if (w->sym[c.left] != c.x || w->next[c.left] != c.right || w->sym[c.right] != c.y)
            continue;
        uint64_t key = (uint64_t)(uint32_t)c.x << 32 | (uint32_t)c.y;
        w->sym[c.left] = t->mres[merge_slot(t, key)];
        int32_t nx = w->next[c.right];
        w->next[c.left] = nx;
        if (nx >= 0) w->prev[nx] = c.left;
        w->sym[c.right] = -2; /* dead: never equals a queued id */
        w->next[c.right] = -1;
        bpe_try_pair(t, w, w->prev[c.left], c.left);
        bpe_try_pair(t, w, c.left, w->next[c.left]);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i]) {
        if (w->sym[i] >= 0) emit(w, w->sym[i]);
        else if (t->unk >= 0) emit(w, t->unk); /* a byte whose character is not in the vocab */
    }
}

static void bpe_fragment(const rl_tokenizer *t, work *w, const char *text, size_t a, size_t b) {
    size_t n;
    pretokenize(t, w, text, a, b, &n);
    for (size_t i = 0; i < n && !w->oom; i++)
        bpe_word(t, w, (const unsigned char *)text + w->sp[i].a, w->sp[i].b - w->sp[i].a);
}

/* ---- SentencePiece BPE ------------------------------------------------------------------------ */

static bool spm_mergeable(const rl_tokenizer *t, int32_t id) {
    uint8_t ty = t->type[id];
    return ty == TT_NORMAL || ty == TT_USER_DEFINED || ty == TT_UNUSED || ty == TT_UNDEFINED;
}

static void spm_try_pair(const rl_tokenizer *t, work *w, const char *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    size_t len = (size_t)w->slen[l] + w->slen[r];
    int32_t id = tok_find(t, s + w->soff[l], len);
    if (id < 0 || !spm_mergeable(t, id)) return;
    heap_push(w, (cand){-(double)t->score[id], l, r, id, (int32_t)len});
}

/* Encodes s[0..n) (spaces already escaped to U+2581). */
static void spm_text(const rl_tokenizer *t, work *w, const char *s, size_t n) {
    if (n > INT32_MAX || ensure_syms(w, n)) {
        w->oom = true;
        return;
    }
    size_t ns = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_len((unsigned char)s[i]);
        if (l > n - i) l = n - i;
        int32_t id = tok_find(t, s + i, l);
        w->sym[ns] = id >= 0 && spm_mergeable(t, id) ? id : -1;
        w->soff[ns] = (uint32_t)i;
        w->slen[ns] = (uint32_t)l;
        w->prev[ns] = (int32_t)ns - 1;
        w->next[ns] = -1;
        if (ns) w->next[ns - 1] = (int32_t)ns;
        ns++;
        i += l;
    }
    if (!ns) return;
    w->n_heap = 0;
    for (size_t i = 1; i < ns; i++) spm_try_pair(t, w, s, (int32_t)i - 1, (int32_t)i);
    while (w->n_heap && !w->oom) {
        cand c = heap_pop(w);
        if (w->slen[c.left] == 0 || w->slen[c.right] == 0 || w->next[c.left] != c.right ||
            (int64_t)w->slen[c.left] + w->slen[c.right] != c.y)
            continue;
        w->sym[c.left] = c.x;
        w->slen[c.left] += w->slen[c.right];
        w->slen[c.right] = 0;
        int32_t nx = w->next[c.right];
        w->next[c.left] = nx;
        if (nx >= 0) w->prev[nx] = c.left;
        spm_try_pair(t, w, s, w->prev[c.left], c.left);
        spm_try_pair(t, w, s, c.left, w->next[c.left]);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i]) {
        if (w->sym[i] >= 0) {
            emit(w, w->sym[i]);
            continue;
        }
        /* not in the vocab: byte fallback when every byte has a token, else one <unk> */
        const unsigned char *p = (const unsigned char *)s + w->soff[i];
        bool all = true;
        for (uint32_t k = 0; k < w->slen[i]; k++) all = all && t->byte_tok[p[k]] >= 0;
        if (all)
            for (uint32_t k = 0; k < w->slen[i]; k++) emit(w, t->byte_tok[p[k]]);
        else if (t->unk >= 0)
            emit(w, t->unk);
    }
}

static void spm_fragment(const rl_tokenizer *t, work *w, const char *text, size_t a, size_t b,
                         bool prefix) {
    size_t n = b - a;
    if (n > (SIZE_MAX - 3) / 3 || grow((void **)&w->buf, &w->cap_buf, n * 3 + 3, 1)) {
        w->oom = true;
        return;
    }
    size_t m = 0;
    if (prefix) {
        memcpy(w->buf, "\xE2\x96\x81", 3);
        m = 3;
    }
    for (size_t i = a; i < b; i++) {
        if (text[i] == ' ') {
            memcpy(w->buf + m, "\xE2\x96\x81", 3);
            m += 3;
        } else {
            w->buf[m++] = text[i];
        }
    }
    spm_text(t, w, w->buf, m);
}

/* ---- special tokens --------------------------------------------------------------------------- */

static bool is_special_type(uint8_t ty) {
    return ty == TT_CONTROL || ty == TT_USER_DEFINED || ty == TT_UNKNOWN;
}

/* Longest special token matching at text[i..len), or -1. */
static int32_t special_at(const rl_tokenizer *t, const char *text, size_t i, size_t len,
                          bool parse_special) {
    unsigned char c = (unsigned char)text[i];
    for (size_t k = t->spec_start[c]; k < t->spec_start[c + 1]; k++) {
        int32_t id = t->spec[k];
        size_t l = t->len[id];
        if (!parse_special && t->type[id] != TT_USER_DEFINED) continue;
        if (l <= len - i && memcmp(text + i, t->text + t->off[id], l) == 0) return id;
    }
    return -1;
}

static int cmp_spec(const void *pa, const void *pb, void *ctx) {
    const rl_tokenizer *t = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    unsigned char ca = (unsigned char)t->text[t->off[a]], cb = (unsigned char)t->text[t->off[b]];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (t->len[a] != t->len[b]) return t->len[a] > t->len[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* ---- encode ----------------------------------------------------------------------------------- */

static void work_free(work *w) {
    free(w->out);
    free(w->sp);
    free(w->sp2);
    free(w->sym);
    free(w->prev);
    free(w->next);
    free(w->soff);
    free(w->slen);
    free(w->heap);
    free(w->buf);
    if (w->md) pcre2_match_data_free(w->md);
}

static void encode_fragment(const rl_tokenizer *t, work *w, const char *text, size_t a, size_t b,
                            bool prev_special) {
    if (t->kind == TOK_SPM)
        spm_fragment(t, w, text, a, b, t->add_space_prefix && prev_special);
    else
        bpe_fragment(t, w, text, a, b);
}

int rl_tok_encode(const rl_tokenizer *t, const char *text, size_t len, bool parse_special,
                  int32_t **ids, size_t *n_ids, rl_err *e) {
    *ids = NULL;
    *n_ids = 0;
    if (!text && len) return rl_fail(e, "tokenizer: NULL text of %zu bytes", len);
    size_t n;
    char *clean = utf8_sanitize(text ? text : "", len, &n);
    if (!clean) return rl_fail(e, "tokenizer: out of memory for a text of %zu bytes", len);
    work w = {0};
    if (t->kind == TOK_BPE) {
        w.md = pcre2_match_data_create(1, NULL);
        if (!w.md) w.oom = true;
    }
    size_t seg = 0;
    bool prev_special = true; /* the SPM space prefix goes at the start and after specials */
    for (size_t i = 0; i < n && !w.oom;) {
        int32_t id = t->n_spec ? special_at(t, clean, i, n, parse_special) : -1;
        if (id < 0) {
            i++;
            continue;
        }
        if (i > seg) {
            encode_fragment(t, &w, clean, seg, i, prev_special);
        }
        emit(&w, id);
        prev_special = true;
        i += t->len[id];
        seg = i;
    }
    if (seg < n && !w.oom) encode_fragment(t, &w, clean, seg, n, prev_special);
    free(clean);
    if (w.oom) {
        work_free(&w);
        return rl_fail(e, "tokenizer: out of memory encoding a text of %zu bytes", len);
    }
    *ids = w.out;
    *n_ids = w.n_out;
    w.out = NULL;
    work_free(&w);
    return 0;
}

int rl_pretok_split(const char *pre, const char *text, size_t len, char **clean,
                    size_t *clean_len, size_t **ends, size_t *n_pieces, rl_err *e) {
    *clean = NULL;
    *ends = NULL;
    *n_pieces = 0;
    const pre_def *pd = find_pre(pre, strlen(pre));
    if (!pd) return rl_fail(e, "tokenizer: unknown pre-tokenizer '%s'", pre);
    rl_tokenizer t = {0};
    if (compile_regexes(t.re, &t.n_re, pd, e)) goto fail;
    *clean = utf8_sanitize(text ? text : "", len, clean_len);
    work w = {0};
    w.md = pcre2_match_data_create(1, NULL);
    if (!*clean || !w.md) {
        work_free(&w);
        rl_fail(e, "tokenizer: out of memory");
        goto fail;
    }
    size_t n;
    pretokenize(&t, &w, *clean, 0, *clean_len, &n);
    size_t *en = malloc((n ? n : 1) * sizeof *en);
    if (w.oom || !en) {
        free(en);
        work_free(&w);
        rl_fail(e, "tokenizer: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) en[i] = w.sp[i].b;
    work_free(&w);
    for (size_t i = 0; i < t.n_re; i++) pcre2_code_free(t.re[i]);
    *ends = en;
    *n_pieces = n;
    return 0;
fail:
    for (size_t i = 0; i < t.n_re; i++) pcre2_code_free(t.re[i]);
    free(*clean);
    *clean = NULL;
    return -1;
}

/* ---- load ------------------------------------------------------------------------------------- */

void rl_tok_free(rl_tokenizer *t) {
    if (!t) return;
    free(t->text);
    free(t->off);
    free(t->len);
    free(t->score);
    free(t->type);
    free(t->str_tab);
    free(t->mkey);
    free(t->mrank);
    free(t->mres);
    free(t->spec);
    for (size_t i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    free(t);
}

/* Reads an optional token id key into *out (left untouched when absent); ids must be < n_vocab. */
static int get_id(const gguf_file *f, const char *key, size_t n_vocab, int32_t *out, rl_err *e) {
    uint32_t v;
    int r = gguf_get_u32(f, key, &v, e);
    if (r < 0) return rl_wrap(e, "tokenizer: ");
    if (r == 0) return 0;
    if (v >= n_vocab)
        return rl_fail(e, "tokenizer: %s = %u is out of range: the vocabulary has %zu tokens", key,
                       v, n_vocab);
    *out = (int32_t)v;
    return 0;
}

static int get_flag(const gguf_file *f, const char *key, bool *out, rl_err *e) {
    return gguf_get_bool(f, key, out, e) < 0 ? rl_wrap(e, "tokenizer: ") : 0;
}

/* Printable excerpt of a token text for messages. */
static const char *excerpt(const char *s, size_t n, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F && c != '\\') buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", c);
    }
    buf[o] = 0;
    return buf;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static int load_vocab(rl_tokenizer *t, const gguf_file *f, rl_err *e) {
    const gguf_kv *tokens, *scores = NULL, *types = NULL;
    int r = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING, &tokens, e);
    if (r < 0) return rl_wrap(e, "tokenizer: ");
    if (r == 0) return rl_fail(e, "tokenizer: %s has no tokenizer.ggml.tokens array", f->name);
    if (tokens->n == 0) return rl_fail(e, "tokenizer: tokenizer.ggml.tokens is empty");
    if (tokens->n > INT32_MAX)
        return rl_fail(e, "tokenizer: tokenizer.ggml.tokens has %llu entries, more than token ids "
                       "(int32) can address", (unsigned long long)tokens->n);
    size_t n = (size_t)tokens->n;
    t->n_vocab = n;
    r = gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_F32, &scores, e);
    if (r < 0) return rl_wrap(e, "tokenizer: ");
    if (r && scores->n != tokens->n)
        return rl_fail(e, "tokenizer: tokenizer.ggml.scores has %llu entries but "
                       "tokenizer.ggml.tokens has %zu", (unsigned long long)scores->n, n);
    r = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_I32, &types, e);
    if (r < 0) return rl_wrap(e, "tokenizer: ");
    if (r && types->n != tokens->n)
        return rl_fail(e, "tokenizer: tokenizer.ggml.token_type has %llu entries but "
                       "tokenizer.ggml.tokens has %zu", (unsigned long long)types->n, n);

    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        gguf_str s = tokens->strs[i];
        char ex[64];
        if (s.len > MAX_TOKEN_LEN)
            return rl_fail(e, "tokenizer: token %zu is %zu bytes long (limit %zu)", i, s.len,
                           MAX_TOKEN_LEN);
        if (memchr(s.ptr, 0, s.len))
            return rl_fail(e, "tokenizer: token %zu ('%s') contains a NUL byte", i,
                           excerpt(s.ptr, s.len, ex, sizeof ex));
        total += s.len + 1;
    }
    t->text = malloc(total);
    t->off = malloc(n * sizeof *t->off);
    t->len = malloc(n * sizeof *t->len);
    t->score = calloc(n, sizeof *t->score);
    t->type = malloc(n);
    if (!t->text || !t->off || !t->len || !t->score || !t->type)
        return rl_fail(e, "tokenizer: out of memory for %zu tokens", n);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        gguf_str s = tokens->strs[i];
        memcpy(t->text + o, s.ptr, s.len);
        t->text[o + s.len] = 0;
        t->off[i] = o;
        t->len[i] = (uint32_t)s.len;
        o += s.len + 1;
        if (scores) {
            float sc = (float)gguf_arr_f64(scores, i);
            if (sc != sc) return rl_fail(e, "tokenizer: tokenizer.ggml.scores[%zu] is NaN", i);
            t->score[i] = sc;
        }
        int64_t ty = types ? gguf_arr_i64(types, i) : TT_NORMAL;
        if (ty < TT_UNDEFINED || ty > TT_BYTE)
            return rl_fail(e, "tokenizer: tokenizer.ggml.token_type[%zu] = %lld, expected 0..6",
                           i, (long long)ty);
        t->type[i] = (uint8_t)ty;
    }

    size_t ts = table_size(n);
    t->str_tab = malloc(ts * sizeof *t->str_tab);
    if (!t->str_tab) return rl_fail(e, "tokenizer: out of memory");
    memset(t->str_tab, 0xFF, ts * sizeof *t->str_tab);
    t->str_mask = ts - 1;
    for (size_t i = 0; i < n; i++)
        if (t->len[i]) tok_insert(t, (int32_t)i);
    return 0;
}

static int load_merges(rl_tokenizer *t, const gguf_file *f, rl_err *e) {
    const gguf_kv *m;
    int r = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_STRING, &m, e);
    if (r < 0) return rl_wrap(e, "tokenizer: ");
    if (r == 0) return rl_fail(e, "tokenizer: gpt2 tokenizer without tokenizer.ggml.merges");
    if (m->n > INT32_MAX)
        return rl_fail(e, "tokenizer: tokenizer.ggml.merges has %llu entries",
                       (unsigned long long)m->n);
    size_t nm = (size_t)m->n, ts = table_size(nm);
    t->mkey = malloc(ts * sizeof *t->mkey);
    t->mrank = malloc(ts * sizeof *t->mrank);
    t->mres = malloc(ts * sizeof *t->mres);
    char *cat = malloc(2 * MAX_TOKEN_LEN + 2);
    if (!t->mkey || !t->mrank || !t->mres || !cat) {
        free(cat);
        return rl_fail(e, "tokenizer: out of memory for %zu merges", nm);
    }
    memset(t->mkey, 0xFF, ts * sizeof *t->mkey);
    t->m_mask = ts - 1;
    size_t skipped = 0;
    for (size_t i = 0; i < nm; i++) {
        gguf_str s = m->strs[i];
        /* the split is the first space after the first byte: a left part never is empty */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp || (size_t)(sp - s.ptr) == s.len - 1) {
            char ex[64];
            free(cat);
            return rl_fail(e, "tokenizer: tokenizer.ggml.merges[%zu] = '%s' is not two "
                           "space-separated parts", i, excerpt(s.ptr, s.len, ex, sizeof ex));
        }
        size_t la = (size_t)(sp - s.ptr), lb = s.len - la - 1;
        if (la + lb > 2 * MAX_TOKEN_LEN) {
            skipped++;
            continue;
        }
        int32_t a = tok_find(t, s.ptr, la), b = tok_find(t, sp + 1, lb);
        memcpy(cat, s.ptr, la);
        memcpy(cat + la, sp + 1, lb);
        int32_t ab = tok_find(t, cat, la + lb);
        if (a < 0 || b < 0 || ab < 0) { /* can never fire on vocab symbols */
            skipped++;
            continue;
        }
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        size_t slot = merge_slot(t, key);
        if (t->mkey[slot] != UINT64_MAX) continue; /* duplicate: the first (lower) rank wins */
        t->mkey[slot] = key;
        t->mrank[slot] = (int32_t)i;
        t->mres[slot] = ab;
    }
    free(cat);
    if (skipped && !t->warning[0])
        snprintf(t->warning, sizeof t->warning,
                 "%zu of %zu merges name parts that are not tokens and were ignored", skipped, nm);
    return 0;
}

static int load_specials(rl_tokenizer *t) {
    size_t ns = 0;
    for (size_t i = 0; i < t->n_vocab; i++)
        if (is_special_type(t->type[i]) && t->len[i]) ns++;
    if (!ns) return 0;
    t->spec = malloc(ns * sizeof *t->spec);
    if (!t->spec) return -1;
    for (size_t i = 0; i < t->n_vocab; i++)
        if (is_special_type(t->type[i]) && t->len[i]) t->spec[t->n_spec++] = (int32_t)i;
    qsort_r(t->spec, ns, sizeof *t->spec, cmp_spec, t);
    size_t k = 0;
    for (unsigned b = 0; b < 256; b++) {
        t->spec_start[b] = k;
        while (k < ns && (unsigned char)t->text[t->off[t->spec[k]]] == b) k++;
    }
    t->spec_start[256] = ns;
    return 0;
}

static void add_eog(rl_tokenizer *t, int32_t id) {
    if (id < 0) return;
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    if (t->n_eog < MAX_EOG) t->eog[t->n_eog++] = id;
}

static int load(rl_tokenizer *t, const gguf_file *f, rl_err *e) {
    gguf_str model;
    int r = gguf_get_str(f, "tokenizer.ggml.model", &model, e);
    if (r < 0) return rl_wrap(e, "tokenizer: ");
    if (r == 0) return rl_fail(e, "tokenizer: %s has no tokenizer.ggml.model", f->name);
    if (gguf_str_eq(model, "llama")) {
        t->kind = TOK_SPM;
    } else if (gguf_str_eq(model, "gpt2")) {
        t->kind = TOK_BPE;
    } else {
        char ex[64];
        return rl_fail(e, "tokenizer: tokenizer.ggml.model '%s' is not supported (expected "
                       "'llama' or 'gpt2')", excerpt(model.ptr, model.len, ex, sizeof ex));
    }
    snprintf(t->model_name, sizeof t->model_name, "%s", t->kind == TOK_SPM ? "llama" : "gpt2");
    if (load_vocab(t, f, e)) return -1;
    size_t n = t->n_vocab;

    for (int b = 0; b < 256; b++) t->byte_tok[b] = -1;
    if (t->kind == TOK_SPM) {
        /* byte-fallback tokens: type BYTE, text exactly <0xHH> */
        for (size_t i = 0; i < n; i++) {
            if (t->type[i] != TT_BYTE) continue;
            const char *s = t->text + t->off[i];
            int hi = t->len[i] == 6 ? hexval(s[3]) : -1, lo = t->len[i] == 6 ? hexval(s[4]) : -1;
            if (t->len[i] != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>' || hi < 0 || lo < 0) {
                char ex[64];
                return rl_fail(e, "tokenizer: token %zu '%s' has type BYTE but is not of the "
                               "form <0xHH>", i, excerpt(s, t->len[i], ex, sizeof ex));
            }
            t->byte_tok[hi * 16 + lo] = (int32_t)i;
        }
        snprintf(t->pre, sizeof t->pre, "none");
    } else {
        for (unsigned b = 0; b < 256; b++) {
            char buf[4];
            t->byte_tok[b] = tok_find(t, buf, utf8_put(gpt2_byte_cp(b), buf));
        }
        gguf_str pre = {"default", 7};
        r = gguf_get_str(f, "tokenizer.ggml.pre", &pre, e);
        if (r < 0) return rl_wrap(e, "tokenizer: ");
        const pre_def *pd = find_pre(pre.ptr, pre.len);
        if (!pd) {
            char ex[64];
            snprintf(t->warning, sizeof t->warning,
                     "unknown pre-tokenizer '%s': using 'default'; tokens may differ from the "
                     "model's own tokenizer", excerpt(pre.ptr, pre.len, ex, sizeof ex));
            pd = &k_pre[0];
        } else if (r == 0) {
            snprintf(t->warning, sizeof t->warning,
                     "no tokenizer.ggml.pre: using 'default'; tokens may differ from the model's "
                     "own tokenizer");
        }
        snprintf(t->pre, sizeof t->pre, "%s", pd->canon);
        t->ignore_merges = pd->ignore_merges;
        t->add_bos = pd->add_bos;
        if (compile_regexes(t->re, &t->n_re, pd, e)) return -1;
        if (load_merges(t, f, e)) return -1;
    }

    t->bos = t->eos = t->eot = t->unk = -1;
    int32_t eom = -1, pad = -1;
    if (t->kind == TOK_SPM) { /* SentencePiece's conventional ids when the keys are absent */
        t->add_bos = true;
        t->add_space_prefix = true;
        if (n > 2) t->unk = 0, t->bos = 1, t->eos = 2;
    }
    if (get_id(f, "tokenizer.ggml.bos_token_id", n, &t->bos, e) ||
        get_id(f, "tokenizer.ggml.eos_token_id", n, &t->eos, e) ||
        get_id(f, "tokenizer.ggml.eot_token_id", n, &t->eot, e) ||
        get_id(f, "tokenizer.ggml.eom_token_id", n, &eom, e) ||
        get_id(f, "tokenizer.ggml.unknown_token_id", n, &t->unk, e) ||
        get_id(f, "tokenizer.ggml.padding_token_id", n, &pad, e) ||
        get_flag(f, "tokenizer.ggml.add_bos_token", &t->add_bos, e) ||
        get_flag(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, e))
        return -1;
    if (t->kind == TOK_BPE) t->add_space_prefix = false;
    if (t->add_bos && t->bos < 0)
        return rl_fail(e, "tokenizer: tokenizer.ggml.add_bos_token is true but there is no "
                       "tokenizer.ggml.bos_token_id");

    add_eog(t, t->eos);
    add_eog(t, t->eot);
    add_eog(t, eom);
    static const char *const k_end_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end_of_text|>", "<end_of_turn>", "<|endoftext|>",
        "<|end|>",    "<|eom_id|>", "<|return|>",
    };
    for (size_t i = 0; i < sizeof k_end_texts / sizeof k_end_texts[0]; i++) {
        int32_t id = tok_find(t, k_end_texts[i], strlen(k_end_texts[i]));
        if (id >= 0 && t->type[id] == TT_CONTROL) add_eog(t, id);
    }
    if (load_specials(t)) return rl_fail(e, "tokenizer: out of memory");
    return 0;
}

int rl_tok_load(rl_tokenizer **out, const gguf_file *f, rl_err *e) {
    *out = NULL;
    rl_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return rl_fail(e, "tokenizer: out of memory");
    if (load(t, f, e)) {
        rl_tok_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

/* ---- accessors -------------------------------------------------------------------------------- */

size_t rl_tok_n_vocab(const rl_tokenizer *t) { return t->n_vocab; }
int32_t rl_tok_bos(const rl_tokenizer *t) { return t->bos; }
int32_t rl_tok_eos(const rl_tokenizer *t) { return t->eos; }
bool rl_tok_add_bos(const rl_tokenizer *t) { return t->add_bos; }
const char *rl_tok_warning(const rl_tokenizer *t) { return t->warning[0] ? t->warning : NULL; }
const char *rl_tok_model_name(const rl_tokenizer *t) { return t->model_name; }
const char *rl_tok_pre_name(const rl_tokenizer *t) { return t->pre; }

bool rl_tok_is_eog(const rl_tokenizer *t, int32_t id) {
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

/* ---- decoding --------------------------------------------------------------------------------- */

static size_t put_bytes(char *buf, size_t cap, size_t at, const char *s, size_t n) {
    if (at < cap) memcpy(buf + at, s, n < cap - at ? n : cap - at);
    return at + n;
}

size_t rl_tok_piece(const rl_tokenizer *t, int32_t id, bool show_special, char *buf, size_t cap) {
    if (id < 0 || (size_t)id >= t->n_vocab) return 0;
    const char *s = t->text + t->off[id];
    size_t n = t->len[id], o = 0;
    uint8_t ty = t->type[id];
    if (ty == TT_CONTROL || ty == TT_UNKNOWN) return show_special ? put_bytes(buf, cap, 0, s, n) : 0;
    if (t->kind == TOK_SPM) {
        if (ty == TT_BYTE) { /* validated <0xHH> at load */
            char b = (char)(hexval(s[3]) * 16 + hexval(s[4]));
            return put_bytes(buf, cap, 0, &b, 1);
        }
        for (size_t i = 0; i < n;) {
            if (n - i >= 3 && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
                o = put_bytes(buf, cap, o, " ", 1);
                i += 3;
            } else {
                o = put_bytes(buf, cap, o, s + i, 1);
                i++;
            }
        }
        return o;
    }
    if (ty == TT_USER_DEFINED) return put_bytes(buf, cap, 0, s, n);
    /* byte-level: each mapped character is one byte; anything else is copied as is */
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t sub;
        bool trunc;
        size_t l = utf8_next(u + i, n - i, &sub, &trunc);
        int b = l ? gpt2_cp_byte(utf8_cp(u + i, l)) : -1;
        if (b >= 0) {
            char c = (char)b;
            o = put_bytes(buf, cap, o, &c, 1);
        } else {
            size_t k = l ? l : sub;
            o = put_bytes(buf, cap, o, s + i, k);
            l = k;
        }
        i += l;
    }
    return o;
}

void rl_detok_init(rl_detok *d, const rl_tokenizer *t) {
    d->t = t;
    d->first = true;
    d->n_pending = 0;
}

/* Emits the complete sequences of in[0..n) into out, keeping a trailing incomplete one in d
 * (unless flush). Invalid sequences become U+FFFD. */
static size_t emit_utf8(rl_detok *d, const unsigned char *in, size_t n, bool flush, char *out,
                        size_t cap) {
    size_t o = 0;
    d->n_pending = 0;
    for (size_t i = 0; i < n;) {
        size_t sub;
        bool trunc;
        size_t l = utf8_next(in + i, n - i, &sub, &trunc);
        if (l) {
            if (o + l > cap) break;
            memcpy(out + o, in + i, l);
            o += l;
            i += l;
            continue;
        }
        if (trunc && !flush) {
            memcpy(d->pending, in + i, n - i);
            d->n_pending = n - i;
            break;
        }
        if (o + 3 > cap) break;
        memcpy(out + o, "\xEF\xBF\xBD", 3);
        o += 3;
        i += sub;
    }
    return o;
}

size_t rl_detok_push(rl_detok *d, int32_t id, char *out, size_t cap) {
    char stack[1024];
    size_t pn = d->n_pending;
    size_t full = rl_tok_piece(d->t, id, false, NULL, 0);
    char *buf = stack;
    if (pn + full > sizeof stack) {
        buf = malloc(pn + full);
        if (!buf) buf = stack; /* keep streaming what fits rather than fail */
    }
    size_t avail = (buf == stack ? sizeof stack : pn + full) - pn;
    memcpy(buf, d->pending, pn);
    size_t n = rl_tok_piece(d->t, id, false, buf + pn, avail);
    if (n > avail) n = avail;
    size_t skip = 0;
    if (d->first && n > 0) { /* drop the space the SPM prefix put before the first word */
        if (d->t->kind == TOK_SPM && d->t->add_space_prefix && pn == 0 && buf[0] == ' ') skip = 1;
        d->first = false;
    }
    size_t o = emit_utf8(d, (unsigned char *)buf + skip, pn + n - skip, false, out, cap);
    if (buf != stack) free(buf);
    return o;
}

size_t rl_detok_flush(rl_detok *d, char *out, size_t cap) {
    unsigned char tmp[8];
    size_t n = d->n_pending;
    memcpy(tmp, d->pending, n);
    return emit_utf8(d, tmp, n, true, out, cap);
}
