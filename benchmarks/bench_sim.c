/*
 * bench_sim.c — how fast the simulator is (issue 5: "it should be well under
 * 100 ms, since the search will call it or its cheaper relatives many
 * times").
 *
 *   bench_sim [SOURCE_DIR] [--repeat N] [--only TEXT]
 *
 * For each case it builds the baseline strategy once, then simulates it N
 * times (default 10) and prints the task count, the best and median wall
 * time of one simulation (task graph + event loop) and the throughput in
 * tasks per second. --only runs the cases whose machine or strategy
 * contains TEXT. The headline case is BERT-Large (models/bert-large.pcg,
 * batch 192: one sequence per GPU) data parallel on summit-v100's 192 V100s.
 * The LLaMA-3 8B cases are what `pcgc compile` chooses for 64 H100s (dp 8,
 * pp 8, 64 micro-batches in 1F1B, bf16 storage), simulated as the joint
 * search simulates its rewrites: the copies checked alike on the graph, then
 * copy 0 alone built and run ("copies checked"), and as the expert
 * grid does, copy 0 alone built ("copy 0 built"), and as the joint search
 * simulates a rewrite that splits an operator over copies: every copy built
 * and run ("all copies").
 * Models are read from SOURCE_DIR (default: $PCGC_SOURCE_DIR, else the
 * source tree this was built from, else "."); machines are presets.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_timing.h"
#include "search.h"

#ifndef PCGC_SOURCE_DIR
#define PCGC_SOURCE_DIR "."
#endif

typedef struct bench_case {
  const char *model, *batch, *machine, *strategy;
  pcgc_expert_choice choice; /* an expert strategy, where dp > 0 */
  bool bf16, alike;          /* bf16 storage; copies_alike (else only the replicas hint) */
} bench_case;

static const bench_case cases[] = {
    {"mlp.pcg", "64", "dgx-h100", "sequential", {0, 0, 0, 0, PCGC_SCHEDULE_GPIPE, false, false}, false, false},
    {"mlp.pcg", "64", "dgx-h100", "data-parallel", {0, 0, 0, 0, PCGC_SCHEDULE_GPIPE, false, false}, false, false},
    {"transformer-block.pcg", "64", "h100-4x8", "data-parallel", {0, 0, 0, 0, PCGC_SCHEDULE_GPIPE, false, false}, false, false},
    {"bert-large.pcg", "8", "dgx-h100", "sequential", {0, 0, 0, 0, PCGC_SCHEDULE_GPIPE, false, false}, false, false},
    {"bert-large.pcg", "64", "dgx-h100", "data-parallel", {0, 0, 0, 0, PCGC_SCHEDULE_GPIPE, false, false}, false, false},
    {"bert-large.pcg", "192", "summit-v100", "data-parallel", {0, 0, 0, 0, PCGC_SCHEDULE_GPIPE, false, false}, false, false},
    {"llama3-8b.pcg", "512", "h100-8x8", "copies checked", {8, 1, 8, 64, PCGC_SCHEDULE_1F1B, false, false}, true, false},
    {"llama3-8b.pcg", "512", "h100-8x8", "copy 0 built", {8, 1, 8, 64, PCGC_SCHEDULE_1F1B, false, false}, true, true},
    {"llama3-8b.pcg", "512", "h100-8x8", "all copies", {8, 1, 8, 64, PCGC_SCHEDULE_1F1B, false, false}, true, false},
};

int main(int argc, char **argv) {
  const char *dir = getenv("PCGC_SOURCE_DIR");
  if (!dir || !*dir) dir = PCGC_SOURCE_DIR;
  int repeat = 10;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) repeat = atoi(argv[++i]);
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf("usage: bench_sim [SOURCE_DIR] [--repeat N] [--only TEXT]\n");
      return 0;
    } else dir = argv[i];
  }
  if (repeat < 1) repeat = 1;
  double *wall = malloc((size_t)repeat * sizeof *wall);
  if (!wall) return 4;
  printf("%-22s %5s %-12s %-14s %9s %10s %10s %12s %12s\n", "model", "batch", "machine", "strategy", "tasks",
         "best", "median", "tasks/s", "iteration");
  int rc = 0;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const bench_case *k = &cases[c];
    if (only && !strstr(k->machine, only) && !strstr(k->strategy, only)) continue;
    pcgc_error err = {0};
    char path[4096];
    snprintf(path, sizeof path, "%s/models/%s", dir, k->model);
    const char *names[] = {"B"}, *values[] = {k->batch};
    pcgc_model_options mo = {1, names, values};
    pcgc_graph *g = pcgc_model_load(path, &mo, &err);
    pcgc_machine m;
    pcgc_graph *pg = NULL;
    pcgc_mapping mp = {0, NULL};
    pcgc_expert *x = NULL;
    pcgc_status st = g ? pcgc_machine_load(k->machine, &m, &err) : PCGC_ERR_INVALID;
    if (st == PCGC_OK && k->choice.dp > 0) {
      st = pcgc_expert_new(g, &m, NULL, &x, &err);
      if (st == PCGC_OK) st = pcgc_expert_build(x, k->choice, &pg, &mp, &err);
    } else if (st == PCGC_OK) {
      st = pcgc_strategy_build((pcgc_strategy)pcgc_strategy_from_name(k->strategy), g, &m, 0, &pg, &mp, &err);
    }
    if (st != PCGC_OK) {
      pcgc_error_print(stderr, &err);
      pcgc_expert_free(x);
      pcgc_graph_free(g);
      rc = 1;
      continue;
    }
    pcgc_sim_options o;
    pcgc_sim_options_default(&o);
    if (k->choice.dp > 0) {
      if (k->bf16) pcgc_machine_set_precision(&m, PCGC_PREC_BF16);
      o.schedule = k->choice.schedule;
      o.recompute = k->choice.recompute;
      o.bf16 = k->bf16;
      if (strcmp(k->strategy, "all copies") != 0) { /* else as a rewrite that splits an operator over copies */
        o.replicas = k->choice.dp;
        o.replica_stride = k->choice.tp;
      }
      o.copies_alike = k->alike;
    }
    pcgc_sim_result r;
    int64_t tasks = 0;
    double iter = 0;
    for (int i = 0; i < repeat; i++) {
      double t0 = bench_now();
      st = pcgc_simulate(pg, &mp, &m, &o, &r, &err);
      wall[i] = bench_now() - t0;
      if (st != PCGC_OK) {
        pcgc_error_print(stderr, &err);
        rc = 1;
        break;
      }
      tasks = r.n_tasks;
      iter = r.iteration_time;
      pcgc_sim_result_destroy(&r);
    }
    bench_sort(wall, repeat);
    printf("%-22s %5s %-12s %-14s %9lld %8.2f ms %8.2f ms %12.3g %9.2f ms\n", k->model, k->batch, k->machine,
           k->strategy, (long long)tasks, 1e3 * wall[0], 1e3 * wall[repeat / 2], (double)tasks / wall[repeat / 2],
           1e3 * iter);
    pcgc_mapping_destroy(&mp);
    pcgc_graph_free(pg);
    pcgc_expert_free(x);
    pcgc_graph_free(g);
  }
  free(wall);
  return rc;
}
