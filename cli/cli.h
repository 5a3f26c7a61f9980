/* Subcommands of the rawloop CLI. Each takes the arguments after its name (argv[0] is the
 * subcommand name, as getopt_long expects), prints its own --help, and returns the process exit
 * code: 0 success, 1 runtime error (message on stderr), 2 usage error (usage on stderr). */
#ifndef RL_CLI_H
#define RL_CLI_H

int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_quantize(int argc, char **argv);

/* Parses a non-negative integer option value; prints an error naming opt and returns -1 when
 * text is not a whole number in [min, max]. */
int cli_parse_long(const char *opt, const char *text, long min, long max, long *out);
int cli_parse_float(const char *opt, const char *text, float *out);

/* Default model path when -m is not given (the model shipped in the repository). */
const char *cli_default_model(void);

#endif

/* ---- shared by the commands that run a model (cli/session.c) ---- */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "model.h"

typedef struct cli_session {
    rl_model model;
    rl_backend be;
    bool loaded;
} cli_session;

/* Loads path (or the shipped model when NULL) and creates the CPU state; prints the error
 * and returns -1 on failure. */
int cli_session_open(cli_session *s, const char *path, const rl_backend_opts *o);
/* Handles --device's argument; prints an error and returns -1 on a bad name. */
int cli_parse_device(const char *text, enum rl_device *out);
/* f16, f32 or q8 into an enum rl_kv_type; prints and returns -1 on anything else. */
int cli_parse_kv_type(const char *text, int *kv_type);
/* exact, fast or auto into an enum rl_prefill; prints and returns -1 on anything else. */
int cli_parse_prefill(const char *text, int *prefill);
void cli_session_close(cli_session *s);
/* Parses "1 2 3" or "1,2,3" into a malloc'ed id list; prints an error on bad input. */
int cli_parse_ids(const char *text, int32_t **ids, size_t *n);
/* Reads a whole file (or "-" = stdin) into a malloc'ed NUL-terminated buffer. */
int cli_read_file(const char *path, char **buf, size_t *len);
/* llama-perplexity's token stream of a text: its tokens, after the model's BOS when the model
 * adds one (*add_bos). *out is malloc'ed. 0, or -1 with e set. */
int cli_token_stream(rl_tokenizer *tok, const char *text, size_t len, int32_t **out, size_t *n,
                     bool *add_bos, rl_err *e);
double cli_now(void);
