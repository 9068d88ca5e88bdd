/*
 * cli.h — what the files of the `pcgc` command share (common.c): exit
 * codes, usage errors, model loading and report formats; and each
 * command's entry point (main.c dispatches to them).
 */
#ifndef PCGC_CLI_H
#define PCGC_CLI_H

#include "pcg.h"
#include "search.h"

/* Exit codes (docs/cli.md). */
enum {
  EXIT_OK = 0,
  EXIT_INVALID = 1,  /* the model (or other input) is invalid */
  EXIT_USAGE = 2,    /* bad command line */
  EXIT_IO = 3,       /* a file could not be read or written */
  EXIT_INTERNAL = 4, /* out of memory or an internal error */
};

/* The --set NAME=VALUE options of a command. */
#define PCGC_CLI_MAX_SETS 64
typedef struct pcgc_cli_sets {
  int n;
  const char *names[PCGC_CLI_MAX_SETS];
  const char *values[PCGC_CLI_MAX_SETS];
  char buf[PCGC_CLI_MAX_SETS][128];
} pcgc_cli_sets;

/* Adds one --set argument ("NAME=VALUE"); returns -1, or EXIT_USAGE after
 * printing what is wrong. */
int pcgc_cli_add_set(const char *cmd, const char *kv, pcgc_cli_sets *s);

/* Prints "pcgc CMD: error: <fmt with arg>" and a hint to --help; returns EXIT_USAGE. */
int pcgc_cli_usage_error(const char *cmd, const char *fmt, const char *arg);
int pcgc_cli_exit_code(pcgc_status s);
/* Loads and validates a model (a .pcg model file or an .onnx file); prints
 * the error and sets *code on failure. batch > 0 sets the batch size: the
 * model file's `const B`, or an ONNX model's symbolic batch dim. loss >= 0
 * (an op kind from pcgc_cli_loss_kind) adds that loss (pcgc_graph_add_loss). */
pcgc_graph *pcgc_cli_load(const char *path, int n_set, const char *const *names, const char *const *values,
                          int64_t batch, int loss, int *code);

/* --loss KIND (softmax_cross_entropy or mse): the op kind into *kind, or
 * EXIT_USAGE after printing what is wrong; -1 when fine. pcgc_cli_load then
 * puts the loss on the model's one output (an exported ONNX inference graph
 * has none). */
int pcgc_cli_loss_kind(const char *cmd, const char *name, int *kind);

/* "dp 2 x tp 4 x pp 2, 8 micro-batches in 1F1B order, activations recomputed" */
void pcgc_cli_format_choice(char *buf, size_t n, pcgc_expert_choice c);
/* "12.3 ms": seconds with four significant digits in s, ms, us or ns; returns b. */
const char *pcgc_cli_fmt_time(char *b, size_t n, double s);
/* "8.29 MiB": bytes with three significant digits in B, KiB ... TiB; returns b. */
const char *pcgc_cli_fmt_bytes(char *b, size_t n, double x);
/* Loads a profile database (--profile DB) for machine m, whose precision is
 * already applied (pcgc_machine_set_precision), and says on stderr, as
 * "pcgc CMD: ...", how its times reach m's device. A link it measured among
 * m's devices per node (pcgc profile --links) is applied to a one-node
 * machine: its all-reduces over all of them as measured, the fitted link for
 * the rest (pcgc_profile_apply_link). */
pcgc_status pcgc_cli_load_profile(const char *cmd, const char *profile, pcgc_machine *m, pcgc_profile **p,
                                  pcgc_error *err);
/* Of two simulated programs, whether a is the better: it fits on more devices, or on as many
 * and is faster (how compile chooses between a plan's two orders, and between its rewrites and
 * the expert strategy). */
bool pcgc_cli_better_program(const pcgc_sim_result *a, const pcgc_sim_result *b);
/* Lowers plan g (views mp) for D devices with co into *prog (pcgc_codegen's status and error):
 * in the order of the global schedule (pcgc_codegen_options.order) that pcgc compile recorded in
 * it (program.order), else, for a plan without that record (a hand-written strategy file) and a
 * machine m to simulate on (not NULL), in the order compile would keep: lowered both ways, each
 * program simulated with so, the better (pcgc_cli_better_program), topological (0) on a tie, when
 * the second cannot be lowered or simulated, or above a million instructions (lowered once, as
 * compile does). pcgc run and pcgc simulate both lower plans with it, so they lower alike. */
struct pcgc_codegen_options;
struct pcgc_program;
enum { PCGC_CLI_LOWER_TWICE_MAX_INSTRUCTIONS = 1000000 };
pcgc_status pcgc_cli_lower_plan(const pcgc_strategy_info *info, const pcgc_graph *g, const pcgc_mapping *mp, int D,
                                const struct pcgc_codegen_options *co, const pcgc_machine *m,
                                const pcgc_sim_options *so, struct pcgc_program **prog, pcgc_error *err);
/* The launcher: $PCGC_MPIRUN, else the mpirun found at build time ("" if none). */
const char *pcgc_cli_mpirun_path(void);
/* Replaces this process with `mpirun -np n --bind-to none pcgc SUB argv...`
 * (allowed as root, oversubscribed, ranks yielding their cores when n exceeds
 * them; PCGC_LAUNCHED set). Returns only on failure, having said why as
 * "pcgc CMD: error: ...". */
void pcgc_cli_exec_mpirun(const char *cmd, int n, const char *sub, int argc, char **argv);
#define PCGC_CLI_LOSS_HELP                                                                          \
  "  --loss KIND        softmax_cross_entropy | mse: add this loss on the model's one output,\n"    \
  "                     against a new input 'labels' (for ONNX inference graphs, which have none)\n"

int pcgc_cli_train(int argc, char **argv);
void pcgc_cli_train_help(FILE *f);
int pcgc_cli_compile(int argc, char **argv);
void pcgc_cli_compile_help(FILE *f);
int pcgc_cli_simulate(int argc, char **argv);
void pcgc_cli_simulate_help(FILE *f);
int pcgc_cli_rules(int argc, char **argv);
void pcgc_cli_rules_help(FILE *f);
int pcgc_cli_run(int argc, char **argv);
/* cli/verify.c: `pcgc verify PLAN`; pcgc__cli_verify_plan is also what
 * `pcgc compile --verify` runs (shown: the name messages give the plan,
 * NULL: path; machine: a preset or file for the plan's machine, NULL: its
 * name; fixed: --set constants). Returns an exit code. */
int pcgc_cli_verify(int argc, char **argv);
void pcgc_cli_verify_help(FILE *f);
int pcgc__cli_verify_plan(const char *path, const char *shown, const char *machine, int n_fixed,
                          const char *const *fixed_names, const char *const *fixed_values, int steps, double tol);
void pcgc_cli_run_help(FILE *f);
int pcgc_cli_plan(int argc, char **argv);
void pcgc_cli_plan_help(FILE *f);
int pcgc_cli_profile(int argc, char **argv);
void pcgc_cli_profile_help(FILE *f);
/* cli/profile_kernels.c: times the kernels of node `id` of the typed
 * sequential graph g, forward and backward (backward with its gradient
 * zeroing; only inputs whose producer has grad[producer] get a gradient;
 * bwd = 0 when none does): a warm-up call, then the median of `repeat`.
 * be: the backend whose kernels run (NULL or a host backend: the CPU's). */
#define PCGC_CLI_PROFILE_MAX_INPUTS 16
struct pcgc_backend;
pcgc_status pcgc__cli_profile_measure(const pcgc_graph *g, int id, const bool *grad, bool training, int repeat,
                                      struct pcgc_backend *be, double *fwd, double *bwd, pcgc_error *err);
/* Times one optimizer update of a weight of type t (f32): `optimizer` is 0
 * plain SGD, 1 SGD with momentum 0.9, 2 Adam (the order of search.h's
 * pcgc_optim_kind); a warm-up call, then the median of `repeat`. */
pcgc_status pcgc__cli_profile_update(const pcgc_ptensor *t, int optimizer, int repeat, struct pcgc_backend *be,
                                     double *seconds, pcgc_error *err);
/* Both then keep the mean of the timed calls instead of their median (profile
 * --copies with more processes than cores: a call that lost its core to a copy
 * counts, as the run's wall time does). */
void pcgc__cli_profile_use_mean(bool mean);
/* profile --links N (cli/profile_links.c): starts N ranks of this binary
 * that time their all-reduces, and fits l's link to them for N devices of
 * one node of m (*worst: the largest relative misfit left). */
pcgc_status pcgc__cli_measure_links(int n, const pcgc_machine *m, pcgc_profile_link *l, double *worst,
                                    pcgc_error *err);
/* One of those ranks (profile --links-rank FILE): rank 0 writes "bytes
 * seconds" lines to FILE. An exit code. */
int pcgc__cli_links_rank(const char *out);

#endif
