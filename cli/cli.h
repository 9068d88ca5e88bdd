/*
 * cli.h — what the files of the `pcgc` command share: exit codes, usage
 * errors and model loading.
 */
#ifndef PCGC_CLI_H
#define PCGC_CLI_H

#include "pcg.h"

/* Exit codes (docs/cli.md). */
enum {
  EXIT_OK = 0,
  EXIT_INVALID = 1,  /* the model (or other input) is invalid */
  EXIT_USAGE = 2,    /* bad command line */
  EXIT_IO = 3,       /* a file could not be read or written */
  EXIT_INTERNAL = 4, /* out of memory or an internal error */
};

/* Prints "pcgc CMD: error: <fmt with arg>" and a hint to --help; returns EXIT_USAGE. */
int pcgc_cli_usage_error(const char *cmd, const char *fmt, const char *arg);
int pcgc_cli_exit_code(pcgc_status s);
/* Loads and validates a model (a .pcg model file or an .onnx file); prints
 * the error and sets *code on failure. batch > 0 sets the batch size: the
 * model file's `const B`, or an ONNX model's symbolic batch dim. */
pcgc_graph *pcgc_cli_load(const char *path, int n_set, const char *const *names, const char *const *values,
                          int64_t batch, int *code);

int pcgc_cli_train(int argc, char **argv);
void pcgc_cli_train_help(FILE *f);
int pcgc_cli_simulate(int argc, char **argv);
void pcgc_cli_simulate_help(FILE *f);

#endif
