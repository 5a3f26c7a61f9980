/* Tokenizer unit tests: malformed vocab metadata is rejected with a message naming the field,
 * the streaming detokenizer holds split UTF-8, decode(encode(x)) == x on the real vocabs.
 *
 * Run from the repository root (test_units.py does). Test-only mode used by
 * tests/py/test_pretokenizer.py:
 *   test_tokenizer --pretok NAME < text   prints each pre-tokenizer piece as hex, one a line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gguf.h"
#include "tokenizer.h"

#define VOCAB_DIR "../shared/testdata/tokenizers/"

static char g_dir[64];

/* ---- synthetic vocab files ------------------------------------------------------------------ */

typedef struct vspec {
    const char *model, *pre;
    const char **tokens;
    size_t n_tokens;
    enum { NO_SCORES, SCORES_F32, SCORES_U8 } scores;
    size_t n_scores;
    const int32_t *types;
    size_t n_types;
    const char **merges;
    size_t n_merges;
    int64_t bos;                /* -1 = absent */
    const gguf_str *raw_token; /* when set, replaces tokens[raw_index] (embedded NULs) */
    size_t raw_index;
} vspec;

static int write_vocab(const char *path, const vspec *v) {
    rl_err e;
    gguf_writer *w = gguf_writer_new(0);
    if (!w) return -1;
    gguf_str *strs = calloc(v->n_tokens + v->n_merges + 1, sizeof *strs);
    float *sc = calloc(v->n_scores + 1, sizeof *sc);
    uint8_t *sc8 = calloc(v->n_scores + 1, 1);
    int rc = -1;
    if (!strs || !sc || !sc8) goto out;
    for (size_t i = 0; i < v->n_tokens; i++)
        strs[i] = (gguf_str){v->tokens[i], strlen(v->tokens[i])};
    if (v->raw_token) strs[v->raw_index] = *v->raw_token;
    for (size_t i = 0; i < v->n_scores; i++) sc[i] = -(float)i, sc8[i] = (uint8_t)i;
    if (gguf_w_str(w, "tokenizer.ggml.model", v->model, &e)) goto out;
    if (v->pre && gguf_w_str(w, "tokenizer.ggml.pre", v->pre, &e)) goto out;
    if (gguf_w_arr_str(w, "tokenizer.ggml.tokens", strs, v->n_tokens, &e)) goto out;
    if (v->scores == SCORES_F32 &&
        gguf_w_arr(w, "tokenizer.ggml.scores", GGUF_F32, sc, v->n_scores, &e))
        goto out;
    if (v->scores == SCORES_U8 &&
        gguf_w_arr(w, "tokenizer.ggml.scores", GGUF_U8, sc8, v->n_scores, &e))
        goto out;
    if (v->types && gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_I32, v->types, v->n_types, &e))
        goto out;
    if (v->merges) {
        for (size_t i = 0; i < v->n_merges; i++)
            strs[i] = (gguf_str){v->merges[i], strlen(v->merges[i])};
        if (gguf_w_arr_str(w, "tokenizer.ggml.merges", strs, v->n_merges, &e)) goto out;
    }
    if (v->bos >= 0 && gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos, &e))
        goto out;
    if (gguf_writer_begin(w, path, &e) || gguf_writer_finish(w, &e)) goto out;
    rc = 0;
out:
    if (rc) fprintf(stderr, "write_vocab(%s): %s\n", path, e.msg);
    gguf_writer_free(w);
    free(strs);
    free(sc);
    free(sc8);
    return rc;
}

/* Loads v; returns the tokenizer or NULL with the message in e. */
static rl_tokenizer *load_spec(const vspec *v, rl_err *e) {
    char path[128];
    snprintf(path, sizeof path, "%s/vocab.gguf", g_dir);
    if (write_vocab(path, v)) {
        snprintf(e->msg, sizeof e->msg, "(could not write the test file)");
        return NULL;
    }
    gguf_file f;
    rl_tokenizer *t = NULL;
    if (gguf_open(&f, path, e) == 0) {
        if (rl_tok_load(&t, &f, e)) t = NULL;
        gguf_close(&f);
    }
    unlink(path);
    return t;
}

static rl_tokenizer *load_file(const char *path) {
    rl_err e;
    gguf_file f;
    rl_tokenizer *t = NULL;
    if (gguf_open(&f, path, &e) == 0) {
        if (rl_tok_load(&t, &f, &e)) t = NULL;
        gguf_close(&f);
    }
    CHECK(t != NULL, "loading %s: %s", path, e.msg);
    return t;
}

/* A tiny SentencePiece vocab: <unk> <s> </s>, 256 byte tokens, a few pieces. */
enum { SPM_BYTES = 3, SPM_N = 3 + 256 + 6 };
static const char *g_spm_tok[SPM_N];
static int32_t g_spm_type[SPM_N + 1]; /* one spare for the too-long token_type case */
static char g_bytes[256][8];

static vspec spm_spec(void) {
    static const char *pieces[] = {"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab",
                                   "\xE2\x96\x81" "ab"};
    g_spm_tok[0] = "<unk>", g_spm_type[0] = 2;
    g_spm_tok[1] = "<s>", g_spm_type[1] = 3;
    g_spm_tok[2] = "</s>", g_spm_type[2] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(g_bytes[b], sizeof g_bytes[b], "<0x%02X>", b);
        g_spm_tok[SPM_BYTES + b] = g_bytes[b];
        g_spm_type[SPM_BYTES + b] = 6;
    }
    for (int i = 0; i < 6; i++) {
        g_spm_tok[SPM_BYTES + 256 + i] = pieces[i];
        g_spm_type[SPM_BYTES + 256 + i] = 1;
    }
    return (vspec){.model = "llama", .tokens = g_spm_tok, .n_tokens = SPM_N,
                   .scores = SCORES_F32, .n_scores = SPM_N, .types = g_spm_type,
                   .n_types = SPM_N, .bos = 1};
}

/* A tiny byte-level vocab: the 256 GPT-2 byte characters, then "ab". */
static const char *g_bpe_tok[257];
static char g_bpe_chars[256][5];
static const char *g_bpe_merges[] = {"a b"};

static vspec bpe_spec(void) {
    for (unsigned b = 0, k = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        unsigned cp = keep ? b : 256 + k++;
        char *o = g_bpe_chars[b];
        if (cp < 0x80) o[0] = (char)cp, o[1] = 0;
        else o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), o[2] = 0;
        g_bpe_tok[b] = g_bpe_chars[b];
    }
    g_bpe_tok[256] = "ab";
    return (vspec){.model = "gpt2", .pre = "gpt-2", .tokens = g_bpe_tok, .n_tokens = 257,
                   .merges = g_bpe_merges, .n_merges = 1, .bos = -1};
}

static void expect_fail(const vspec *v, const char *what, const char *needle1,
                        const char *needle2) {
    rl_err e = {{0}};
    rl_tokenizer *t = load_spec(v, &e);
    CHECK(t == NULL, "%s: loaded, expected an error", what);
    rl_tok_free(t);
    if (!t) {
        CHECK(strstr(e.msg, needle1) != NULL, "%s: message '%s' lacks '%s'", what, e.msg, needle1);
        if (needle2)
            CHECK(strstr(e.msg, needle2) != NULL, "%s: message '%s' lacks '%s'", what, e.msg,
                  needle2);
    }
}

static void test_malformed(void) {
    vspec ok = spm_spec();
    rl_err e = {{0}};
    rl_tokenizer *t = load_spec(&ok, &e);
    CHECK(t != NULL, "valid tiny SPM vocab rejected: %s", e.msg);
    rl_tok_free(t);
    vspec okb = bpe_spec();
    t = load_spec(&okb, &e);
    CHECK(t != NULL, "valid tiny BPE vocab rejected: %s", e.msg);
    rl_tok_free(t);

    vspec v = ok;
    v.scores = SCORES_U8;
    expect_fail(&v, "scores as U8", "tokenizer.ggml.scores", "FLOAT32");
    v = ok;
    v.n_scores = SPM_N - 1;
    expect_fail(&v, "scores too short", "tokenizer.ggml.scores", "264");
    v = ok;
    v.n_types = SPM_N + 1;
    expect_fail(&v, "token_type too long", "tokenizer.ggml.token_type", "266");
    v = ok;
    v.bos = SPM_N;
    expect_fail(&v, "bos out of range", "bos_token_id", "out of range");
    v = ok;
    v.model = "bert";
    expect_fail(&v, "unknown model", "'bert'", "not supported");
    v = ok;
    v.n_tokens = v.n_scores = v.n_types = 0;
    expect_fail(&v, "empty vocab", "tokenizer.ggml.tokens", "empty");

    static const char *bad_bytes[] = {"<0xZZ>", "<0x-1>", "<0x4>", "<0x411>", "0x41"};
    for (size_t i = 0; i < sizeof bad_bytes / sizeof bad_bytes[0]; i++) {
        v = ok;
        const char *saved = g_spm_tok[SPM_BYTES + 0x41];
        g_spm_tok[SPM_BYTES + 0x41] = bad_bytes[i];
        expect_fail(&v, bad_bytes[i], "BYTE", "<0xHH>");
        g_spm_tok[SPM_BYTES + 0x41] = saved;
    }
    int32_t types2[SPM_N];
    memcpy(types2, g_spm_type, sizeof types2);
    types2[5] = 9;
    v = ok;
    v.types = types2;
    expect_fail(&v, "token_type 9", "token_type[5]", "9");

    gguf_str nul = {"a\0b", 3};
    v = ok;
    v.raw_token = &nul;
    v.raw_index = SPM_BYTES + 256 + 1;
    expect_fail(&v, "embedded NUL", "NUL", "260");

    static const char *nospace[] = {"ab"}, *endspace[] = {"a "};
    v = okb;
    v.merges = nospace;
    expect_fail(&v, "merge without space", "tokenizer.ggml.merges[0]", "'ab'");
    v = okb;
    v.merges = endspace;
    expect_fail(&v, "merge with empty right part", "tokenizer.ggml.merges[0]", "two");
    v = okb;
    v.merges = NULL;
    expect_fail(&v, "gpt2 without merges", "merges", NULL);

    v = okb;
    v.pre = "no-such-pre";
    t = load_spec(&v, &e);
    CHECK(t && rl_tok_warning(t) && strstr(rl_tok_warning(t), "no-such-pre"),
          "unknown pre: expected a warning naming it");
    CHECK(t && strcmp(rl_tok_pre_name(t), "default") == 0, "unknown pre: not using default");
    rl_tok_free(t);
}

/* ---- encode / detok ------------------------------------------------------------------------- */

static size_t detok_all(const rl_tokenizer *t, const int32_t *ids, size_t n, char *out,
                        size_t cap) {
    rl_detok d;
    rl_detok_init(&d, t);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += rl_detok_push(&d, ids[i], out + o, cap - o);
    o += rl_detok_flush(&d, out + o, cap - o);
    return o;
}

static void test_spm_small(void) {
    vspec v = spm_spec();
    rl_err e;
    rl_tokenizer *t = load_spec(&v, &e);
    CHECK(t != NULL, "tiny SPM: %s", e.msg);
    if (!t) return;
    int32_t *ids;
    size_t n;
    /* "ab é": ▁ab, ▁, then é as bytes C3 A9 */
    CHECK(rl_tok_encode(t, "ab \xC3\xA9", 5, false, &ids, &n, &e) == 0, "%s", e.msg);
    int32_t want[] = {SPM_BYTES + 256 + 5, SPM_BYTES + 256 + 0, SPM_BYTES + 0xC3,
                      SPM_BYTES + 0xA9};
    CHECK(n == 4 && memcmp(ids, want, sizeof want) == 0, "tiny SPM: got %zu ids", n);

    rl_detok d;
    rl_detok_init(&d, t);
    char out[300];
    size_t o = rl_detok_push(&d, 1, out, sizeof out); /* <s>: nothing, still "first" */
    CHECK(o == 0, "BOS gave %zu bytes", o);
    o = rl_detok_push(&d, ids[0], out, sizeof out);
    CHECK(o == 2 && memcmp(out, "ab", 2) == 0, "first token keeps its space? '%.*s'", (int)o,
          out);
    o = rl_detok_push(&d, ids[1], out, sizeof out);
    CHECK(o == 1 && out[0] == ' ', "later space dropped");
    o = rl_detok_push(&d, ids[2], out, sizeof out);
    CHECK(o == 0, "lead byte C3 was not held (%zu bytes)", o);
    o = rl_detok_push(&d, ids[3], out, sizeof out);
    CHECK(o == 2 && memcmp(out, "\xC3\xA9", 2) == 0, "split UTF-8 not joined");
    /* a lone lead byte followed by ASCII: U+FFFD then the text */
    o = rl_detok_push(&d, SPM_BYTES + 0xE6, out, sizeof out);
    o += rl_detok_push(&d, SPM_BYTES + 0x9C, out + o, sizeof out - o);
    CHECK(o == 0, "two bytes of a 3-byte sequence were emitted");
    o = rl_detok_push(&d, SPM_BYTES + 256 + 1, out, sizeof out);
    CHECK(o == 4 && memcmp(out, "\xEF\xBF\xBD" "a", 4) == 0, "incomplete sequence not replaced");
    o = rl_detok_push(&d, SPM_BYTES + 0xF0, out, sizeof out);
    o += rl_detok_flush(&d, out + o, sizeof out - o);
    CHECK(o == 3 && memcmp(out, "\xEF\xBF\xBD", 3) == 0, "flush of held byte");
    o = rl_detok_push(&d, SPM_BYTES + 0xFF, out, sizeof out);
    CHECK(o == 3 && memcmp(out, "\xEF\xBF\xBD", 3) == 0, "invalid byte FF not replaced");
    free(ids);

    /* special tokens: <s> only with parse_special; a space prefix follows a special token */
    CHECK(rl_tok_encode(t, "<s>a", 4, true, &ids, &n, &e) == 0, "%s", e.msg);
    CHECK(n == 2 && ids[0] == 1 && ids[1] == SPM_BYTES + 256 + 3, "<s>a parse_special: %zu", n);
    free(ids);
    CHECK(rl_tok_encode(t, "<s>", 3, false, &ids, &n, &e) == 0, "%s", e.msg);
    CHECK(n == 4 && ids[0] == SPM_BYTES + 256 + 0 && ids[1] == SPM_BYTES + '<',
          "<s> without parse_special should be text (%zu ids)", n);
    free(ids);
    CHECK(rl_tok_encode(t, "", 0, false, &ids, &n, &e) == 0 && n == 0, "empty text");
    free(ids);
    CHECK(rl_tok_is_eog(t, 2) && !rl_tok_is_eog(t, 1), "eos is end of generation");
    rl_tok_free(t);
}

static void round_trip(const char *vocab, const char *text) {
    rl_tokenizer *t = load_file(vocab);
    if (!t) return;
    int32_t *ids;
    size_t n;
    rl_err e;
    size_t len = strlen(text);
    CHECK(rl_tok_encode(t, text, len, false, &ids, &n, &e) == 0, "%s", e.msg);
    char *out = malloc(len * 3 + 64);
    size_t o = detok_all(t, ids, n, out, len * 3 + 64);
    CHECK(o == len && memcmp(out, text, len) == 0, "%s: round trip gave '%.*s'", vocab, (int)o,
          out);
    free(ids);
    /* invalid UTF-8 never fails and comes back as U+FFFD */
    CHECK(rl_tok_encode(t, "a\xFF" "b\xE2\x82", 5, true, &ids, &n, &e) == 0, "%s", e.msg);
    o = detok_all(t, ids, n, out, len * 3 + 64);
    CHECK(o == 8 && memcmp(out, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD", 8) == 0,
          "%s: invalid UTF-8 decoded to '%.*s'", vocab, (int)o, out);
    free(ids);
    /* every piece is consistent between the sized and the probing call */
    char buf[8];
    for (size_t id = 0; id < rl_tok_n_vocab(t); id++) {
        size_t full = rl_tok_piece(t, (int32_t)id, true, NULL, 0);
        size_t got = rl_tok_piece(t, (int32_t)id, true, buf, sizeof buf);
        if (full != got) {
            CHECK(full == got, "%s: piece %zu length %zu vs %zu", vocab, id, full, got);
            break;
        }
    }
    free(out);
    rl_tok_free(t);
}

static const char k_sample[] =
    "Hello world! The quick brown fox -- jumped over 1234567 lazy dogs.\n\n"
    "\tIndented\tcode: for (int i = 0; i < n; i++) { x += a[i] * 2; }\n"
    "Ünïcödé: Äpfel, naïve café, Ελληνικά, русский, 日本語のテキスト, 한국어, emoji 🦙🔥.\n"
    "   leading spaces and trailing   \n"
    "it's we'll they've I'M\r\nwindows line";

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--pretok") == 0) {
        size_t cap = 1 << 16, len = 0;
        char *in = malloc(cap);
        while (in && (len += fread(in + len, 1, cap - len, stdin)) == cap) {
            char *bigger = realloc(in, cap * 2);
            if (!bigger) free(in);
            in = bigger;
            cap *= 2;
        }
        char *clean;
        size_t clen, *ends, n;
        rl_err e;
        if (!in || rl_pretok_split(argv[2], in, len, &clean, &clen, &ends, &n, &e)) {
            fprintf(stderr, "test_tokenizer: %s\n", in ? e.msg : "out of memory");
            return 1;
        }
        for (size_t i = 0, a = 0; i < n; a = ends[i++]) {
            for (size_t k = a; k < ends[i]; k++) printf("%02x", (unsigned char)clean[k]);
            putchar('\n');
        }
        free(in);
        free(clean);
        free(ends);
        return 0;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/rl_tok_test_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_malformed();
    test_spm_small();
    round_trip(VOCAB_DIR "ggml-vocab-gpt-2.gguf", k_sample);
    round_trip(VOCAB_DIR "ggml-vocab-llama-spm.gguf", k_sample);
    round_trip(VOCAB_DIR "ggml-vocab-llama-spm.gguf", " leading space kept");
    round_trip(VOCAB_DIR "ggml-vocab-deepseek-llm.gguf", k_sample);
    rmdir(g_dir);
    return check_report("test_tokenizer");
}
