/*
 * main.c — the `pcgc` command line: dispatches subcommands, parses their
 * flags, and turns library errors into messages and exit codes
 * (docs/cli.md). Output files are written atomically: to a temporary file
 * in the same folder, flushed and fsync'ed, then renamed over the target,
 * so a crash or a bad input never leaves a half-written file.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"


typedef struct cli_opts {
  const char *model;
  const char *output; /* -o FILE, or NULL for stdout */
  int64_t batch;      /* --batch B, or 0 */
  pcgc_cli_sets sets;
} cli_opts;

static void print_main_help(FILE *f) {
  fprintf(f,
          "pcgc %s — a compiler that parallelises deep-learning training across a cluster\n"
          "\n"
          "usage: pcgc COMMAND [OPTIONS] ...\n"
          "\n"
          "commands:\n"
          "  check MODEL   validate a model and summarise it: operators by kind, parameters,\n"
          "                forward+backward FLOPs per iteration, activation memory\n"
          "  show MODEL    print the model in canonical text form (parses back identically)\n"
          "  dot MODEL     print the graph in Graphviz DOT (parallel operators drawn distinctly)\n"
          "  train MODEL   train on one CPU device with the reference interpreter, printing\n"
          "                the loss per step\n"
          "  compile MODEL --machine M [-o STRATEGY]\n"
          "                search data x tensor x pipeline parallel strategies by simulation,\n"
          "                print the fastest that fits per operator, write it as a strategy file\n"
          "  simulate MODEL|STRATEGY --machine M\n"
          "                simulate one training iteration of a baseline strategy (sequential,\n"
          "                data-parallel) or of a strategy file on a machine: time, idle, bytes\n"
          "                moved, memory\n"
          "  run PLAN      train a compiled plan as one process per device (CPU or CUDA backend,\n"
          "                MPI); --check compares it with the single-process reference\n"
          "  verify PLAN   check a plan by execution: the same strategy at the smallest sizes, one\n"
          "                CPU process per device, against the single-device reference\n"
          "  plan show PLAN\n"
          "                print the lowered per-device programs: buffers, memory, instructions\n"
          "  profile MODEL --machine M -o DB\n"
          "                measure the kernels MODEL needs (CPU, or the GPU for GPU machines) into a\n"
          "                profile database for\n"
          "                `simulate --profile DB`\n"
          "  rules check|list [PATH...]\n"
          "                check substitution rules by execution, or list them with their\n"
          "                instance counts for a machine (docs/rules.md)\n"
          "  help [CMD]    show help for a command\n"
          "\n"
          "Every command takes --help. MODEL is a model file (docs/model-format.md) or an\n"
          "ONNX file (docs/onnx.md).\n"
          "Exit codes: 0 ok, 1 invalid input, 2 bad command line, 3 I/O error, 4 internal\n"
          "error (docs/cli.md).\n",
          PCGC_VERSION_STRING);
}

static void print_cmd_help(FILE *f, const char *cmd) {
  if (strcmp(cmd, "check") == 0) {
    fprintf(f,
            "usage: pcgc check MODEL [--batch B] [--set NAME=VALUE]...\n"
            "\n"
            "Parses MODEL, infers every tensor's shape and parallel type, validates the graph\n"
            "and prints: operators by kind, trainable parameters, forward and backward FLOPs\n"
            "of one training iteration, and activation memory (operator outputs kept for the\n"
            "backward pass).\n"
            "\n"
            "options:\n"
            "  --batch B         batch size: the model's `const B`, or an ONNX model's symbolic\n"
            "                    batch dim\n"
            "  --set NAME=VALUE  override a `const` of the model (e.g. --set B=32); repeatable\n"
            "  -h, --help        show this help\n"
            "\n"
            "exit codes: 0 valid, 1 invalid model (the error names file:line:col), 2 usage, 3 I/O\n");
  } else if (strcmp(cmd, "show") == 0) {
    fprintf(f,
            "usage: pcgc show MODEL [-o FILE] [--batch B] [--set NAME=VALUE]...\n"
            "\n"
            "Prints the model's canonical text form: every weight explicit, every attribute\n"
            "written, nodes in topological order. It parses back to a graph with the same hash.\n"
            "\n"
            "options:\n"
            "  -o, --output FILE  write to FILE (atomically) instead of standard output\n"
            "  --batch B          batch size (`const B`, or an ONNX model's symbolic batch dim)\n"
            "  --set NAME=VALUE   override a `const` of the model; repeatable\n"
            "  -h, --help         show this help\n");
  } else if (strcmp(cmd, "dot") == 0) {
    fprintf(f,
            "usage: pcgc dot MODEL [-o FILE] [--batch B] [--set NAME=VALUE]...\n"
            "\n"
            "Prints the graph in Graphviz DOT. Render with: pcgc dot MODEL | dot -Tsvg > g.svg\n"
            "Parallel operators (partition, combine, replicate, reduce, pipeline) are drawn as\n"
            "distinct coloured shapes; weights and inputs as their own shapes.\n"
            "\n"
            "options:\n"
            "  -o, --output FILE  write to FILE (atomically) instead of standard output\n"
            "  --batch B          batch size (`const B`, or an ONNX model's symbolic batch dim)\n"
            "  --set NAME=VALUE   override a `const` of the model; repeatable\n"
            "  -h, --help         show this help\n");
  } else if (strcmp(cmd, "train") == 0) {
    pcgc_cli_train_help(f);
  } else if (strcmp(cmd, "compile") == 0) {
    pcgc_cli_compile_help(f);
  } else if (strcmp(cmd, "simulate") == 0) {
    pcgc_cli_simulate_help(f);
  } else if (strcmp(cmd, "profile") == 0) {
    pcgc_cli_profile_help(f);
  } else if (strcmp(cmd, "rules") == 0) {
    pcgc_cli_rules_help(f);
  } else if (strcmp(cmd, "run") == 0) {
    pcgc_cli_run_help(f);
  } else if (strcmp(cmd, "verify") == 0) {
    pcgc_cli_verify_help(f);
  } else if (strcmp(cmd, "plan") == 0) {
    pcgc_cli_plan_help(f);
  } else {
    print_main_help(f);
  }
}

/* Parses the flags common to the model commands. Returns -1 on success
 * (continue), or an exit code. */
static int parse_opts(const char *cmd, int argc, char **argv, cli_opts *o, bool allow_output) {
  memset(o, 0, sizeof *o);
  bool no_more_flags = false;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!no_more_flags && a[0] == '-' && a[1]) {
      if (strcmp(a, "--") == 0) {
        no_more_flags = true;
      } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
        print_cmd_help(stdout, cmd);
        return EXIT_OK;
      } else if (allow_output && (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0)) {
        if (i + 1 >= argc) return pcgc_cli_usage_error(cmd, "%s needs a file name", a);
        o->output = argv[++i];
      } else if (strcmp(a, "--batch") == 0) {
        if (i + 1 >= argc) return pcgc_cli_usage_error(cmd, "%s needs a value", a);
        char *end = NULL;
        long long b = strtoll(argv[++i], &end, 10);
        if (!*argv[i] || *end || b < 1 || b > 1000000000LL)
          return pcgc_cli_usage_error(cmd, "--batch must be a positive integer, not '%s'", argv[i]);
        o->batch = b;
      } else if (strcmp(a, "--set") == 0 || strncmp(a, "--set=", 6) == 0) {
        const char *kv = a[5] == '=' ? a + 6 : NULL;
        if (!kv) {
          if (i + 1 >= argc) return pcgc_cli_usage_error(cmd, "%s needs NAME=VALUE", a);
          kv = argv[++i];
        }
        int r = pcgc_cli_add_set(cmd, kv, &o->sets);
        if (r >= 0) return r;
      } else {
        return pcgc_cli_usage_error(cmd, "unknown option '%s'", a);
      }
    } else if (!o->model) {
      o->model = a;
    } else {
      return pcgc_cli_usage_error(cmd, "unexpected argument '%s' (one MODEL only)", a);
    }
  }
  if (!o->model) return pcgc_cli_usage_error(cmd, "missing MODEL%s", "");
  return -1;
}

static pcgc_graph *load(const cli_opts *o, int *code) {
  return pcgc_cli_load(o->model, o->sets.n, o->sets.names, o->sets.values, o->batch, -1, code);
}

/* ----------------------------------------------------------- output */

typedef pcgc_status (*writer_fn)(FILE *, const pcgc_graph *, pcgc_error *);

static int write_output(const char *cmd, const char *path, writer_fn fn, const pcgc_graph *g) {
  pcgc_error err;
  pcgc_error_clear(&err);
  if (!path) {
    pcgc_status s = fn(stdout, g, &err);
    if (s == PCGC_OK && fflush(stdout) != 0) s = pcgc_error_set(&err, PCGC_ERR_IO, "writing to standard output failed");
    if (s != PCGC_OK) pcgc_error_print(stderr, &err);
    return pcgc_cli_exit_code(s);
  }
  char *text = NULL; /* written whole, then atomically (pcgc_write_file_atomic) */
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  pcgc_status s = f ? fn(f, g, &err) : pcgc_error_set(&err, PCGC_ERR_NOMEM, "out of memory");
  if (f && fclose(f) != 0 && s == PCGC_OK) s = pcgc_error_set(&err, PCGC_ERR_NOMEM, "out of memory");
  if (s == PCGC_OK) s = pcgc_write_file_atomic(path, text, len, &err);
  free(text);
  if (s != PCGC_OK) {
    fprintf(stderr, "pcgc %s: ", cmd);
    pcgc_error_print(stderr, &err);
  }
  return pcgc_cli_exit_code(s);
}

/* ------------------------------------------------------------ check */

static void human(char *buf, size_t n, double v, const char *unit, double base) {
  static const char *const si[] = {"", "K", "M", "G", "T", "P", "E"};
  static const char *const bin[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  int i = 0;
  while (v >= base && i < 6) {
    v /= base;
    i++;
  }
  snprintf(buf, n, i ? "%.2f %s%s" : "%.0f %s%s", v, base == 1024 ? bin[i] : si[i], unit);
}

static void commas(char *buf, size_t n, int64_t v) {
  char raw[32];
  snprintf(raw, sizeof raw, "%lld", (long long)v);
  size_t len = strlen(raw), k = 0;
  for (size_t i = 0; i < len && k + 2 < n; i++) {
    buf[k++] = raw[i];
    size_t left = len - i - 1;
    if (left > 0 && left % 3 == 0 && raw[i] != '-') buf[k++] = ',';
  }
  buf[k] = '\0';
}

static int cmd_check(int argc, char **argv) {
  cli_opts o;
  int r = parse_opts("check", argc, argv, &o, false);
  if (r >= 0) return r;
  int code = EXIT_OK;
  pcgc_graph *g = load(&o, &code);
  if (!g) return code;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_graph_stats st;
  if (pcgc_graph_stats_compute(g, &st, &err) != PCGC_OK) {
    pcgc_error_print(stderr, &err);
    pcgc_graph_free(g);
    return EXIT_INVALID;
  }
  int n_ops = 0, n_par = 0;
  for (int k = 0; k < PCGC_OP_COUNT; k++) {
    pcgc_op_class c = pcgc_op_class_of((pcgc_op_kind)k);
    if (c == PCGC_CLASS_COMPUTE || c == PCGC_CLASS_LOSS) n_ops += st.count_by_kind[k];
    if (c == PCGC_CLASS_PARALLEL) n_par += st.count_by_kind[k];
  }
  char a[64], b[64], c[64], d[64];
  printf("%s: ok — model '%s' is valid\n", o.model, g->name ? g->name : "(unnamed)");
  printf("  nodes          %d: %d operators, %d parallel operators, %d weights, %d inputs\n", st.n_nodes,
         n_ops, n_par, st.count_by_kind[PCGC_OP_WEIGHT], st.count_by_kind[PCGC_OP_INPUT]);
  commas(a, sizeof a, st.params);
  human(b, sizeof b, st.param_bytes, "B", 1024);
  printf("  parameters     %s (%s of weights)\n", a, b);
  human(a, sizeof a, st.fwd_flops, "FLOP", 1000);
  human(b, sizeof b, st.bwd_flops, "FLOP", 1000);
  human(c, sizeof c, st.fwd_flops + st.bwd_flops, "FLOP", 1000);
  printf("  FLOPs/iter     %s forward + %s backward = %s\n", a, b, c);
  human(a, sizeof a, st.activation_bytes, "B", 1024);
  human(d, sizeof d, st.input_bytes, "B", 1024);
  printf("  activations    %s kept for backward (inputs: %s)\n", a, d);
  printf("  operators by kind:\n");
  for (int k = 0; k < PCGC_OP_COUNT; k++)
    if (st.count_by_kind[k] && pcgc_op_class_of((pcgc_op_kind)k) != PCGC_CLASS_SOURCE)
      printf("    %-22s %d\n", pcgc_op_name((pcgc_op_kind)k), st.count_by_kind[k]);
  pcgc_graph_free(g);
  return EXIT_OK;
}

static int cmd_write(const char *cmd, writer_fn fn, int argc, char **argv) {
  cli_opts o;
  int r = parse_opts(cmd, argc, argv, &o, true);
  if (r >= 0) return r;
  int code = EXIT_OK;
  pcgc_graph *g = load(&o, &code);
  if (!g) return code;
  code = write_output(cmd, o.output, fn, g);
  pcgc_graph_free(g);
  return code;
}

/* The searches simulate thousands of candidates, each allocating task
 * arrays of tens of MiB and freeing them. glibc serves such blocks by mmap
 * and returns them at once, so every simulation page-faults its arrays in
 * anew (a fifth of GPT-3's compile time on summit-v100). Keeping them in the
 * heap (no mmap below 1 GiB, no trimming below 1 GiB, the heap grown 256 MiB
 * at a time) takes GPT-3's expert search there from 19.3 s to 13.4-13.9 s,
 * for at most the peak memory it used anyway. */
static void keep_freed_memory(void) {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 << 20);
#endif
}

int main(int argc, char **argv) {
  keep_freed_memory();
  if (argc < 2) {
    print_main_help(stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
    print_main_help(stdout);
    return EXIT_OK;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    printf("pcgc %s\n", PCGC_VERSION_STRING);
    return EXIT_OK;
  }
  if (strcmp(cmd, "help") == 0) {
    if (argc > 2) print_cmd_help(stdout, argv[2]);
    else print_main_help(stdout);
    return EXIT_OK;
  }
  if (strcmp(cmd, "check") == 0) return cmd_check(argc - 2, argv + 2);
  if (strcmp(cmd, "show") == 0) return cmd_write("show", pcgc_graph_write_text, argc - 2, argv + 2);
  if (strcmp(cmd, "dot") == 0) return cmd_write("dot", pcgc_graph_write_dot, argc - 2, argv + 2);
  if (strcmp(cmd, "train") == 0) return pcgc_cli_train(argc - 2, argv + 2);
  if (strcmp(cmd, "compile") == 0) return pcgc_cli_compile(argc - 2, argv + 2);
  if (strcmp(cmd, "simulate") == 0) return pcgc_cli_simulate(argc - 2, argv + 2);
  if (strcmp(cmd, "profile") == 0) return pcgc_cli_profile(argc - 2, argv + 2);
  if (strcmp(cmd, "rules") == 0) return pcgc_cli_rules(argc - 2, argv + 2);
  if (strcmp(cmd, "run") == 0) return pcgc_cli_run(argc - 2, argv + 2);
  if (strcmp(cmd, "verify") == 0) return pcgc_cli_verify(argc - 2, argv + 2);
  if (strcmp(cmd, "plan") == 0) return pcgc_cli_plan(argc - 2, argv + 2);
  return pcgc_cli_usage_error(NULL, "unknown command '%s' (commands: check, show, dot, train, compile, simulate, profile, rules, run, verify, plan, help)",
                              cmd);
}
