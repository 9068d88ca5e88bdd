/*
 * profile.c — `pcgc profile MODEL --machine M -o DB`: measures the CPU
 * backend's kernels (runtime/cpu, f32, one BLAS thread) for every distinct
 * (op, attributes, input shapes) of MODEL and writes a profile database
 * (search/search.h, pcgc_profile_write) that `pcgc simulate --profile DB`
 * uses in place of the roofline.
 *
 * Per distinct kernel (cli/profile_kernels.c times it): buffers of the input
 * and output shapes filled with seeded synthetic data (as the reference
 * trainer draws it), a warm-up call, then N timed calls of forward and N of
 * backward; the database keeps the median of each. Backward is timed together with zeroing the gradients it
 * accumulates into (the kernels add into din, so every caller zeroes them
 * first; the reference trainer does it per step) and computes only the input
 * gradients the model needs (data inputs get none), or with --all-gradients
 * every float input's, as the reference interpreter does. Every weight shape
 * also gets the time of one optimizer update, for each of sgd, momentum and
 * adam (op "weight", attrs "optimizer=NAME"). The
 * measuring lives here, not in search/, so that the search library stays
 * free of runtime dependencies.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "search.h"

void pcgc_cli_profile_help(FILE *f) {
  fprintf(f,
          "usage: pcgc profile MODEL --machine M -o DB [--repeat N] [--no-dropout] [--all-gradients] [--batch B]\n"
          "                    [--set NAME=VALUE]...\n"
          "\n"
          "Measures the local CPU backend's kernels (f32, one BLAS thread) for every distinct\n"
          "operator, attributes and input shapes MODEL needs: a warm-up call, then the median of N\n"
          "calls, forward and backward. Writes the profile database DB (JSON, atomically) that\n"
          "`pcgc simulate --profile DB` uses in place of the roofline estimate.\n"
          "\n"
          "options:\n"
          "  --machine M        the machine the database is for (preset or file); required\n"
          "  -o, --output DB    database file to write; required\n"
          "  --repeat N         timed calls per kernel (default 10); the median is kept\n"
          "  --no-dropout       time dropout as at inference (as `pcgc train --no-dropout`)\n"
          "  --all-gradients    backward computes the gradient of every float input, data inputs\n"
          "                     included, as the reference trainer does (default: only what\n"
          "                     training needs: weights and what depends on them)\n"
          "  --batch B          batch size (`const B`, or an ONNX model's symbolic batch dim)\n"
          "  --set NAME=VALUE   override a `const` of the model; repeatable\n"
          "  -h, --help         show this help\n");
}

static pcgc_status profile_graph(const pcgc_graph *g, pcgc_profile *p, bool training, bool all_grads, int repeat,
                                 pcgc_error *err) {
  int *order = malloc((size_t)g->n_nodes * sizeof *order);
  bool *grad = calloc((size_t)g->n_nodes, sizeof *grad);
  pcgc_status st = order && grad ? pcgc_graph_topo_order(g, order, err)
                                 : pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  int measured = 0, reused = 0, updates = 0;
  for (int k = 0; k < g->n_nodes && st == PCGC_OK; k++) {
    const pcgc_node *n = &g->nodes[order[k]];
    pcgc_op_class cls = pcgc_op_class_of(n->kind);
    bool flt = false, any = false;
    for (int j = 0; j < n->n_out; j++) flt |= pcgc_dtype_is_float(n->out[j].dtype);
    for (int i = 0; i < n->n_in; i++) any |= grad[n->in[i].node];
    if (cls == PCGC_CLASS_SOURCE) grad[n->id] = (all_grads || n->kind == PCGC_OP_WEIGHT) && flt;
    else grad[n->id] = any && flt;
    pcgc_profile_entry e;
    if (n->kind == PCGC_OP_WEIGHT && flt) {
      for (int o = PCGC_OPTIM_SGD; o <= PCGC_OPTIM_ADAM && st == PCGC_OK; o++) {
        pcgc_profile_update_key((pcgc_optim_kind)o, &n->out[0], &e);
        if (pcgc_profile_find(p, &e)) continue;
        if ((st = pcgc__cli_profile_update(&n->out[0], o, repeat, &e.fwd, err)) != PCGC_OK) break;
        if ((st = pcgc_profile_add(p, &e, err)) != PCGC_OK) break;
        updates++;
      }
      continue;
    }
    if (cls != PCGC_CLASS_COMPUTE && cls != PCGC_CLASS_LOSS) continue;
    if ((st = pcgc_profile_key(g, n->id, &e, err)) != PCGC_OK) break;
    if (pcgc_profile_find(p, &e)) {
      reused++;
      continue;
    }
    if ((st = pcgc__cli_profile_measure(g, n->id, grad, training, repeat, &e.fwd, &e.bwd, err)) != PCGC_OK) break;
    if ((st = pcgc_profile_add(p, &e, err)) != PCGC_OK) break;
    measured++;
    printf("%-22s %-24s fwd %10.3f us  bwd %10.3f us\n", pcgc_op_name(n->kind), n->name, e.fwd * 1e6, e.bwd * 1e6);
  }
  if (st == PCGC_OK)
    printf("%d kernels and %d optimizer updates measured (sgd, momentum, adam per weight shape; %d nodes share a measured kernel), median of %d calls\n",
           measured, updates, reused, repeat);
  free(order);
  free(grad);
  return st;
}

int pcgc_cli_profile(int argc, char **argv) {
  const char *model = NULL, *machine = NULL, *output = NULL;
  pcgc_cli_sets sets = {0};
  int repeat = 10;
  bool training = true, all_grads = false;
  long long batch = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      pcgc_cli_profile_help(stdout);
      return EXIT_OK;
    } else if (strcmp(a, "--no-dropout") == 0) {
      training = false;
    } else if (strcmp(a, "--all-gradients") == 0) {
      all_grads = true;
    } else if (a[0] == '-' && a[1] && !v) {
      return pcgc_cli_usage_error("profile", "%s needs a value", a);
    } else if (strcmp(a, "--machine") == 0) {
      machine = argv[++i];
    } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
      output = argv[++i];
    } else if (strcmp(a, "--repeat") == 0 || strcmp(a, "--batch") == 0) {
      char *end;
      long long x = strtoll(argv[++i], &end, 10);
      if (!*argv[i] || *end || x < 1 || x > 1000000000LL)
        return pcgc_cli_usage_error("profile", "expected a positive integer, not '%s'", argv[i]);
      if (a[2] == 'r') {
        if (x > 100000) return pcgc_cli_usage_error("profile", "--repeat %s is too many (at most 100000)", argv[i]);
        repeat = (int)x;
      } else {
        batch = x;
      }
    } else if (strcmp(a, "--set") == 0) {
      int r = pcgc_cli_add_set("profile", argv[++i], &sets);
      if (r >= 0) return r;
    } else if (a[0] == '-' && a[1]) {
      return pcgc_cli_usage_error("profile", "unknown option '%s'", a);
    } else if (!model) {
      model = a;
    } else {
      return pcgc_cli_usage_error("profile", "unexpected argument '%s' (one MODEL only)", a);
    }
  }
  if (!model) return pcgc_cli_usage_error("profile", "missing MODEL%s", "");
  if (!machine) return pcgc_cli_usage_error("profile", "missing --machine M (cpu-local, or a file)%s", "");
  if (!output) return pcgc_cli_usage_error("profile", "missing -o DB (the database file to write)%s", "");
  int code = EXIT_OK;
  pcgc_graph *g = pcgc_cli_load(model, sets.n, sets.names, sets.values, batch, -1, &code);
  if (!g) return code;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_machine m;
  pcgc_profile *p = NULL;
  pcgc_status st = pcgc_machine_load(machine, &m, &err);
  if (st == PCGC_OK && m.device.kind != PCGC_DEVICE_CPU)
    fprintf(stderr, "pcgc profile: warning: machine '%s' is not a CPU; measuring this machine's CPU anyway\n", m.name);
  if (st == PCGC_OK && !(p = pcgc_profile_new(m.name))) st = pcgc_error_set(&err, PCGC_ERR_NOMEM, "out of memory");
  /* One BLAS thread: a profile measures one core's kernels, and the
   * calibration runs the reference trainer with OPENBLAS_NUM_THREADS=1. */
  openblas_set_num_threads(1);
  if (st == PCGC_OK) st = profile_graph(g, p, training, all_grads, repeat, &err);
  if (st == PCGC_OK) st = pcgc_profile_write(p, output, &err);
  if (st == PCGC_OK) printf("wrote %s (%d entries, machine %s)\n", output, pcgc_profile_size(p), m.name);
  else pcgc_error_print(stderr, &err);
  pcgc_profile_free(p);
  pcgc_graph_free(g);
  return pcgc_cli_exit_code(st);
}
