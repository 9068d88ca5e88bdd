/*
 * bench_rules.c — how fast the rule library loads, instantiates, verifies
 * and matches (issue 4's measurement).
 *
 *   bench_rules [SOURCE_DIR] [--repeat N] [--no-verify]
 *
 * Prints: the time to load (parse + static checks) every rules/ file; the
 * number of instances for a 2-node x 4-device machine (8 devices: degrees
 * 2, 4, 8; dims below rank 4) and the time to instantiate; the time to
 * verify the whole library by execution (pcgc_ruleset_verify, default
 * options); and the matcher on BERT-Large (models/bert-large.pcg, 625
 * nodes): for every instance (dims below BERT's largest rank), every match
 * in the graph, repeated N times (default 3), as matches per second and
 * instances scanned per second. Also how many instances match at all.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "substitutions.h"

#ifndef PCGC_SOURCE_DIR
#define PCGC_SOURCE_DIR "."
#endif

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const pcgc_error *err) {
  pcgc_error_print(stderr, err);
  return 1;
}

int main(int argc, char **argv) {
  const char *dir = getenv("PCGC_SOURCE_DIR");
  if (!dir || !*dir) dir = PCGC_SOURCE_DIR;
  int repeat = 3;
  bool verify = true;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) repeat = atoi(argv[++i]);
    else if (strcmp(argv[i], "--no-verify") == 0) verify = false;
    else if (argv[i][0] != '-') dir = argv[i];
    else {
      fprintf(stderr, "usage: bench_rules [SOURCE_DIR] [--repeat N] [--no-verify]\n");
      return 2;
    }
  }
  if (repeat < 1) repeat = 1;
  char path[4096];
  pcgc_error err;
  pcgc_error_clear(&err);

  pcgc_ruleset *rs = pcgc_ruleset_new();
  snprintf(path, sizeof path, "%s/rules", dir);
  double t0 = now();
  if (!rs || pcgc_ruleset_load_dir(rs, path, &err) != PCGC_OK) return fail(&err);
  double t_load = now() - t0;
  printf("load       %4d rules from %s in %.2f ms\n", pcgc_ruleset_size(rs), path, 1e3 * t_load);

  int64_t deg[16];
  int nd = pcgc_rules_machine_degrees(8, deg, 16);
  pcgc_rule_inst *ri = NULL;
  int n = 0;
  t0 = now();
  if (pcgc_ruleset_instantiate(rs, deg, nd, 4, &ri, &n, &err) != PCGC_OK) return fail(&err);
  printf("instances  %4d for 2 nodes x 4 devices (degrees 2, 4, 8; dims 0..3) in %.3f ms\n", n, 1e3 * (now() - t0));
  free(ri);

  if (verify) {
    int unsound = 0;
    int64_t runs = 0;
    t0 = now();
    if (pcgc_ruleset_verify(rs, NULL, true, NULL, &unsound, &runs, &err) != PCGC_OK) return fail(&err);
    double t = now() - t0;
    printf("verify     %4d rules, %d unsound, %lld executions in %.2f s (%.0f executions/s)\n", pcgc_ruleset_size(rs),
           unsound, (long long)runs, t, (double)runs / t);
  }

  snprintf(path, sizeof path, "%s/models/bert-large.pcg", dir);
  pcgc_graph *g = pcgc_model_load(path, NULL, &err);
  if (!g || pcgc_graph_infer(g, &err) != PCGC_OK) return fail(&err);
  int rank = pcgc_rules_max_rank(g);
  if (pcgc_ruleset_instantiate(rs, deg, nd, rank, &ri, &n, &err) != PCGC_OK) return fail(&err);
  t0 = now();
  pcgc_graph_index *ix = pcgc_graph_index_new(g, &err);
  if (!ix) return fail(&err);
  double t_index = now() - t0;
  int64_t matches = 0;
  int matching = 0;
  t0 = now();
  for (int r = 0; r < repeat; r++)
    for (int i = 0; i < n; i++) {
      int64_t c = pcgc_rule_count_matches(&ri[i], g, ix, 0, &err);
      if (c < 0) return fail(&err);
      matches += c;
      if (r == 0 && c > 0) matching++;
    }
  double t = (now() - t0) / repeat;
  matches /= repeat;
  printf("match      BERT-Large (%d nodes): index %.3f ms; %d instances (dims below rank %d), %d of them match, "
         "%lld matches in %.2f ms: %.3g matches/s, %.3g instances scanned/s\n",
         g->n_nodes, 1e3 * t_index, n, rank, matching, (long long)matches, 1e3 * t, (double)matches / t,
         (double)n / t);
  pcgc_graph_index_free(ix);
  pcgc_graph_free(g);
  free(ri);
  pcgc_ruleset_free(rs);
  return 0;
}
