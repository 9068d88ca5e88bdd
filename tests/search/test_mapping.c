/*
 * test_mapping.c — device mapping by dynamic programming (search/mapping.c):
 *   - on a chain, a diamond and a graph with long skip edges (4 devices, 2
 *     nodes of 2), the DP's cost equals the minimum of a brute force over
 *     every combination of the candidate views, and pcgc_views_cost of the
 *     views it returns equals its own optimum; with the frontier bounded to
 *     force the non-series-parallel fallback, it still never costs more
 *     than the greedy (the gap to the optimum is printed);
 *   - a chain crafted so the greedy's local choice (a node with nothing to
 *     read takes its first candidate) costs more than the DP's;
 *   - pcgc_compile with DP views is never slower than the greedy views of
 *     every full-machine expert strategy of an MLP and a transformer block.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search.h"

static pcgc_machine machine_text(const char *text) {
  pcgc_machine m;
  pcgc_error err = {0};
  ck_assert_msg(pcgc_machine_parse(text, strlen(text), "inline.machine", &m, &err) == PCGC_OK, "%s", err.message);
  return m;
}

/* 2 nodes x 2 devices: 100 GB/s in a node, 10 GB/s between nodes */
static pcgc_machine two_by_two(void) {
  return machine_text("name toy22\nnodes 2\ndevices_per_node 2\ndevice.flops.f32 10 TFLOP/s\ndevice.memory 16 GiB\n"
                      "device.memory_bandwidth 1 TB/s\ndevice.launch_overhead 5 us\nintra.bandwidth 100 GB/s\n"
                      "intra.latency 1 us\ninter.bandwidth 10 GB/s\ninter.latency 5 us\n");
}

static pcgc_machine one_by_four(void) {
  return machine_text("name toy4\nnodes 1\ndevices_per_node 4\ndevice.flops.f32 10 TFLOP/s\ndevice.memory 16 GiB\n"
                      "device.memory_bandwidth 1 TB/s\ndevice.launch_overhead 5 us\nintra.bandwidth 100 GB/s\n"
                      "intra.latency 1 us\n");
}

static pcgc_graph *typed(const char *text) {
  pcgc_error err = {0};
  pcgc_graph *g = pcgc_model_parse(text, strlen(text), "inline.pcg", NULL, &err);
  ck_assert_msg(g != NULL, "%s:%d:%d: %s", err.file, err.line, err.col, err.message);
  ck_assert_msg(pcgc_graph_infer(g, &err) == PCGC_OK, "%s", err.message);
  return g;
}

/* The greedy's views (pcgc_views_replace over one stage of 4 devices). */
static void greedy(const pcgc_graph *g, const pcgc_machine *m, int t, pcgc_mapping *out) {
  pcgc_error err = {0};
  pcgc_mapping all;
  ck_assert_int_eq(pcgc_mapping_init(&all, g->n_nodes, (pcgc_view){0, 1}, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_views_replace(g, g, &all, 4, t, m, out, &err), PCGC_OK);
  pcgc_mapping_destroy(&all);
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)) + 1e-15; }

/* The least pcgc_views_cost over every combination of candidate views,
 * from `init` for resident nodes. */
static double brute_force(const pcgc_graph *g, const pcgc_mapping *init, const pcgc_machine *m, int t,
                          long *combos) {
  int n = g->n_nodes;
  pcgc_view(*cand)[PCGC_VIEWS_MAX_CANDIDATES] = calloc((size_t)n, sizeof *cand);
  int *K = calloc((size_t)n, sizeof *K), *idx = calloc((size_t)n, sizeof *idx);
  ck_assert(cand && K && idx);
  *combos = 1;
  for (int i = 0; i < n; i++) {
    K[i] = pcgc_views_candidates(g, init, i, 4, t, m, cand[i]);
    if (K[i] > 0) *combos *= K[i];
  }
  ck_assert_int_le(*combos, 2000000);
  pcgc_error err = {0};
  pcgc_mapping mp;
  ck_assert_int_eq(pcgc_mapping_init(&mp, n, (pcgc_view){0, 1}, &err), PCGC_OK);
  memcpy(mp.view, init->view, (size_t)n * sizeof *mp.view);
  double best = INFINITY;
  for (;;) {
    for (int i = 0; i < n; i++)
      if (K[i] > 0) mp.view[i] = cand[i][idx[i]];
    double c = pcgc_views_cost(g, &mp, m, &err);
    ck_assert_msg(!isnan(c), "%s", err.message);
    if (c < best) best = c;
    int i = 0;
    for (; i < n; i++) {
      if (K[i] == 0) continue;
      if (++idx[i] < K[i]) break;
      idx[i] = 0;
    }
    if (i == n) break;
  }
  pcgc_mapping_destroy(&mp);
  free(cand);
  free(K);
  free(idx);
  return best;
}

/* DP against brute force (exact when no fallback happened) and greedy. */
static void check_graph(const char *name, const char *text, int max_states, bool exact) {
  pcgc_machine m = two_by_two();
  pcgc_graph *g = typed(text);
  pcgc_mapping gr, dp;
  greedy(g, &m, 2, &gr);
  pcgc_error err = {0};
  pcgc_views_dp_stats s;
  ck_assert_msg(pcgc_views_dp(g, &gr, 4, 2, &m, max_states, &dp, &s, &err) == PCGC_OK, "%s", err.message);
  double cg = pcgc_views_cost(g, &gr, &m, &err), cd = pcgc_views_cost(g, &dp, &m, &err);
  long combos;
  double bf = brute_force(g, &gr, &m, 2, &combos);
  ck_assert(near(cg, s.cost_init));
  ck_assert(near(cd, s.cost));
  ck_assert(cd <= cg);
  ck_assert(bf <= cd * (1 + 1e-12));
  ck_assert_int_ge(s.nodes, 3);
  ck_assert_int_le(s.candidates_max, PCGC_VIEWS_MAX_CANDIDATES);
  if (!s.kept_init) ck_assert(near(s.dp_cost, cd)); /* the DP's optimum is what its views cost */
  if (exact) {
    ck_assert_int_eq(s.fallbacks, 0);
    ck_assert_msg(near(cd, bf), "%s: dp %.9g, brute force %.9g", name, cd, bf);
  }
  printf("%-22s %ld combinations: brute force %.3f us, dp %.3f us (gap %.2f%%), greedy %.3f us; "
         "%d nodes, <= %d candidates, <= %d states, %d fallbacks, memo %d/%d\n",
         name, combos, bf * 1e6, cd * 1e6, (cd / bf - 1) * 100, cg * 1e6, s.nodes, s.candidates_max, s.max_states,
         s.fallbacks, s.memo_hits, s.memo_hits + s.memo_misses);
  pcgc_mapping_destroy(&gr);
  pcgc_mapping_destroy(&dp);
  pcgc_graph_free(g);
}

/* Pieces change count and layout along the chain: 2, 4, 4, 2, 2; a reads
 * nothing placed, so the greedy spreads it (devices 0, 2) where b wants it
 * on 0, 1 (as in crafted_greedy_worse). */
static const char *CHAIN = "model chain\n"
                           "input x: f32[64, 256]\n"
                           "input t: f32[64, 256]\n"
                           "xp = partition(x, dim=1, degree=2)\n"
                           "tp = partition(t, dim=0, degree=2)\n"
                           "a = relu(xp)\n"
                           "b = partition(a, dim=0, degree=2)\n"
                           "c = relu(b)\n"
                           "d = combine(c, dim=1, degree=2)\n"
                           "e = relu(d)\n"
                           "loss = mse(e, tp)\n";

/* a forks into a 4-piece branch and a 2-piece one, rejoined by j. */
static const char *DIAMOND = "model diamond\n"
                             "input x: f32[64, 256]\n"
                             "input t: f32[64, 256]\n"
                             "xp = partition(x, dim=0, degree=2)\n"
                             "tp = partition(t, dim=0, degree=2)\n"
                             "a = relu(xp)\n"
                             "b1 = partition(a, dim=1, degree=2)\n"
                             "c1 = relu(b1)\n"
                             "d1 = combine(c1, dim=1, degree=2)\n"
                             "c2 = relu(a)\n"
                             "j = add(d1, c2)\n"
                             "loss = mse(j, tp)\n";

/* a and b are both read again at the end, across a branch. */
static const char *SKIP = "model skip\n"
                          "input x: f32[64, 256]\n"
                          "input t: f32[64, 256]\n"
                          "xp = partition(x, dim=0, degree=2)\n"
                          "tp = partition(t, dim=0, degree=2)\n"
                          "a = relu(xp)\n"
                          "b = relu(a)\n"
                          "c = partition(b, dim=1, degree=2)\n"
                          "d = relu(c)\n"
                          "e = combine(d, dim=1, degree=2)\n"
                          "f = add(e, b)\n"
                          "h = add(f, a)\n"
                          "loss = mse(h, tp)\n";

START_TEST(chain_exact) {
  check_graph("chain", CHAIN, 0, true);
  check_graph("chain (fallback)", CHAIN, 1, false);
}
END_TEST

START_TEST(diamond_exact) { check_graph("diamond", DIAMOND, 0, true); }
END_TEST

START_TEST(skip_edges) {
  check_graph("skip", SKIP, 0, true);
  check_graph("skip (fallback)", SKIP, 2, false);
  check_graph("diamond (fallback)", DIAMOND, 1, false);
}
END_TEST

/* a reads only its (resident) input, so every view costs the greedy
 * nothing and it takes its first candidate, spreading a's 2 pieces to
 * devices 0 and 2. c (4 pieces on 0..3) reads a's piece p % 2, so a on 0
 * and 1 moves 2 pieces where 0 and 2 moves 3. */
START_TEST(crafted_greedy_worse) {
  pcgc_machine m = one_by_four();
  pcgc_graph *g = typed("model crafted\n"
                        "input x: f32[64, 256]\n"
                        "input t: f32[64, 256]\n"
                        "xp = partition(x, dim=1, degree=2)\n"
                        "t1 = partition(t, dim=1, degree=2)\n"
                        "tp = partition(t1, dim=0, degree=2)\n"
                        "a = relu(xp)\n"
                        "c = partition(a, dim=0, degree=2)\n"
                        "e = relu(c)\n"
                        "loss = mse(e, tp)\n");
  pcgc_mapping gr, dp;
  greedy(g, &m, 1, &gr);
  int a = pcgc_graph_find(g, "a");
  ck_assert_int_eq(gr.view[a].start, 0);
  ck_assert_int_eq(gr.view[a].stride, 2);
  pcgc_error err = {0};
  pcgc_views_dp_stats s;
  ck_assert_int_eq(pcgc_views_dp(g, &gr, 4, 1, &m, 0, &dp, &s, &err), PCGC_OK);
  ck_assert(!s.kept_init);
  ck_assert(s.cost < s.cost_init);
  ck_assert_int_eq(dp.view[a].start, 0);
  ck_assert_int_eq(dp.view[a].stride, 1);
  /* one piece of c (64x128 f32 / 4 = 16 KiB... here 32x128x4 B) fewer moved */
  double piece = 32.0 * 128 * 4;
  ck_assert(near(s.cost_init - s.cost, pcgc_comm_p2p_time(&m, true, 1, piece)));
  long combos;
  ck_assert(near(brute_force(g, &gr, &m, 1, &combos), s.cost));
  printf("crafted: greedy %.3f us, dp %.3f us\n", s.cost_init * 1e6, s.cost * 1e6);
  pcgc_mapping_destroy(&gr);
  pcgc_mapping_destroy(&dp);
  pcgc_graph_free(g);
}
END_TEST

/* ------------------------------------------------------- integration */

/* pcgc_compile (expert strategies only) against the greedy views of every
 * candidate using the whole machine, built and simulated here. */
static void never_slower(const char *text, const pcgc_machine *m) {
  pcgc_error err = {0};
  pcgc_graph *seq = typed(text);
  pcgc_compile_options o;
  pcgc_compile_options_default(&o);
  o.joint.budget = 0;
  o.time_limit = 0;
  pcgc_compile_result r;
  ck_assert_msg(pcgc_compile(seq, m, &o, &r, &err) == PCGC_OK, "%s", err.message);
  pcgc_expert *x = NULL;
  ck_assert_int_eq(pcgc_expert_new(seq, m, NULL, &x, &err), PCGC_OK);
  int D = pcgc_machine_num_devices(m), tried = 0, better = 0;
  double best_greedy = INFINITY;
  for (int b = 1; b <= D; b++)
    for (int t = 1; b * t <= D; t++) {
      if (D % (b * t)) continue;
      int s = D / (b * t);
      if (s > 1 && s > pcgc_expert_layers(x)) continue; /* as pcgc_compile */
      for (int f = 1; f <= (s > 1 ? 4 : 1); f *= 2) {
        pcgc_expert_choice c = {b, t, s, s > 1 ? s * f : 1};
        pcgc_graph *pg = NULL;
        pcgc_mapping mp, dp;
        pcgc_error e = {0};
        if (pcgc_expert_build(x, c, &pg, &mp, &e) != PCGC_OK) continue;
        if (c.tp > 1 && pcgc_expert_tp_matches(x, c.tp, &e) == 0) {
          pcgc_graph_free(pg);
          pcgc_mapping_destroy(&mp);
          continue;
        }
        pcgc_sim_result sg, sd;
        ck_assert_int_eq(pcgc_simulate(pg, &mp, m, &o.sim, &sg, &e), PCGC_OK);
        if (sg.oom_devices == 0 && sg.iteration_time < best_greedy) best_greedy = sg.iteration_time;
        pcgc_views_dp_stats st;
        ck_assert_int_eq(pcgc_views_dp(pg, &mp, b * t, t, m, 0, &dp, &st, &e), PCGC_OK);
        ck_assert(st.cost <= st.cost_init);
        ck_assert_int_eq(pcgc_simulate(pg, &dp, m, &o.sim, &sd, &e), PCGC_OK);
        tried++;
        better += sd.iteration_time < sg.iteration_time;
        printf("  dp %d tp %d pp %d micro %d: greedy %.4f ms, dp views %.4f ms (model cost %.4f -> %.4f ms)\n", b,
               t, s, c.micro, sg.iteration_time * 1e3, sd.iteration_time * 1e3, st.cost_init * 1e3, st.cost * 1e3);
        pcgc_sim_result_destroy(&sg);
        pcgc_sim_result_destroy(&sd);
        pcgc_mapping_destroy(&mp);
        pcgc_mapping_destroy(&dp);
        pcgc_graph_free(pg);
      }
    }
  ck_assert_int_gt(tried, 0);
  ck_assert_msg(r.expert_time <= best_greedy * (1 + 1e-12), "compile %.9g > greedy %.9g", r.expert_time,
                best_greedy);
  printf("%s: compile %.4f ms, best greedy %.4f ms; dp views faster on %d of %d\n", seq->name, r.expert_time * 1e3,
         best_greedy * 1e3, better, tried);
  pcgc_expert_free(x);
  pcgc_compile_result_destroy(&r);
  pcgc_graph_free(seq);
}

START_TEST(compile_never_slower_mlp) {
  pcgc_machine m = two_by_two();
  never_slower("model mlp\ninput x: f32[64, 512]\ninput t: f32[64, 10]\n"
               "h1 = linear(x, out=1024, act=relu)\nh2 = linear(h1, out=1024, act=relu)\n"
               "h3 = linear(h2, out=512, act=relu)\ny = linear(h3, out=10)\nloss = mse(y, t)\n",
               &m);
}
END_TEST

START_TEST(compile_never_slower_transformer) {
  pcgc_machine m = two_by_two();
  FILE *f = fopen(PCGC_SOURCE_DIR "/models/transformer-block.pcg", "rb");
  ck_assert_ptr_nonnull(f);
  char *text = calloc(1, 1 << 16);
  ck_assert_ptr_nonnull(text);
  size_t n = fread(text, 1, (1 << 16) - 1, f);
  fclose(f);
  ck_assert_int_gt((int)n, 0);
  never_slower(text, &m);
  free(text);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("mapping");
  TCase *tc = tcase_create("mapping");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, chain_exact);
  tcase_add_test(tc, diamond_exact);
  tcase_add_test(tc, skip_edges);
  tcase_add_test(tc, crafted_greedy_worse);
  tcase_add_test(tc, compile_never_slower_mlp);
  tcase_add_test(tc, compile_never_slower_transformer);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
