/*
 * test_joint.c — the rule-driven joint search (search/joint.c):
 *   - a start strategy with a needless partition/combine round trip on every
 *     layer: the search removes them (rules from the library), and the
 *     result is faster than the start and holds no such pair;
 *   - the result is never slower than the start, duplicates are recognised,
 *     the budget bounds the graphs expanded; a rule applied everywhere it
 *     matches removes every round trip in one expansion;
 *   - two runs give the same graph (canonical hash) and the same time.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search.h"
#include "substitutions.h"

#include "../common/check_main.h"

static pcgc_ruleset *rs;

static void setup(void) {
  rs = pcgc_ruleset_new();
  pcgc_error err = {0};
  ck_assert_msg(pcgc_ruleset_load_dir(rs, pcgc_rules_default_dir(), &err) == PCGC_OK, "%s", err.message);
}

static void teardown(void) {
  pcgc_ruleset_free(rs);
  rs = NULL;
}

/* Data parallel over 4 devices, with a gratuitous combine + partition of
 * the activations between the layers. */
static const char *ROUND_TRIPS =
    "model rt\n"
    "input x: f32[64, 512]\n"
    "input t: f32[64, 512]\n"
    "weight w1: f32[512, 512]\n"
    "weight w2: f32[512, 512]\n"
    "weight w3: f32[512, 512]\n"
    "xp = partition(x, dim=0, degree=4)\n"
    "tp = partition(t, dim=0, degree=4)\n"
    "r1 = replicate(w1, degree=4)\n"
    "r2 = replicate(w2, degree=4)\n"
    "r3 = replicate(w3, degree=4)\n"
    "h1 = linear(xp, r1, act=relu)\n"
    "c1 = combine(h1, dim=0, degree=4)\n"
    "p1 = partition(c1, dim=0, degree=4)\n"
    "h2 = linear(p1, r2, act=relu)\n"
    "c2 = combine(h2, dim=0, degree=4)\n"
    "p2 = partition(c2, dim=0, degree=4)\n"
    "h3 = linear(p2, r3)\n"
    "loss = mse(h3, tp)\n";

static pcgc_graph *typed(const char *text) {
  pcgc_error err = {0};
  pcgc_graph *g = pcgc_model_parse(text, strlen(text), "inline.pcg", NULL, &err);
  ck_assert_msg(g != NULL, "%s", err.message);
  ck_assert_int_eq(pcgc_graph_infer(g, &err), PCGC_OK);
  return g;
}

static int count_kind(const pcgc_graph *g, pcgc_op_kind k) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i].kind == k;
  return n;
}

static void run(const pcgc_graph *g, const pcgc_machine *m, int budget, pcgc_joint_result *r) {
  pcgc_mapping mp;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 1}, &err), PCGC_OK);
  pcgc_joint_options o;
  pcgc_joint_options_default(&o);
  o.budget = budget;
  o.time_limit = 0; /* deterministic */
  ck_assert_msg(pcgc_joint_search(g, &mp, 4, 1, m, rs, &o, r, &err) == PCGC_OK, "%s", err.message);
  pcgc_mapping_destroy(&mp);
}

START_TEST(removes_round_trips) {
  pcgc_machine m;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_machine_load("dgx-h100", &m, &err), PCGC_OK);
  pcgc_graph *g = typed(ROUND_TRIPS);
  ck_assert_int_eq(count_kind(g, PCGC_OP_COMBINE), 2);
  pcgc_joint_result r;
  run(g, &m, 8, &r);
  ck_assert(isfinite(r.start_time));
  ck_assert_msg(r.time < r.start_time, "no improvement: %g s from %g s", r.time, r.start_time);
  ck_assert_int_gt(r.improvements, 0);
  ck_assert_int_le(r.expanded, 8);
  ck_assert_int_gt(r.evaluated, 0);
  ck_assert_int_gt(r.duplicates, 0); /* the two round trips removed in either order meet */
  ck_assert_msg(count_kind(r.graph, PCGC_OP_COMBINE) == 0, "%d combines left", count_kind(r.graph, PCGC_OP_COMBINE));
  ck_assert_int_eq(pcgc_graph_validate(r.graph, &err), PCGC_OK);
  /* the views belong to the result */
  ck_assert_int_eq(r.mapping.n_nodes, r.graph->n_nodes);

  /* deterministic: the same graph and time again */
  pcgc_joint_result r2;
  run(g, &m, 8, &r2);
  ck_assert(r2.time == r.time);
  ck_assert(pcgc_graph_hash(r2.graph) == pcgc_graph_hash(r.graph));
  ck_assert_int_eq(r2.evaluated, r.evaluated);
  pcgc_joint_result_destroy(&r);
  pcgc_joint_result_destroy(&r2);

  /* one expansion is enough: the cancelling rule applied everywhere it
   * matches removes both round trips in one move */
  run(g, &m, 1, &r);
  ck_assert_int_eq(r.expanded, 1);
  ck_assert_int_gt(r.wide, 0);
  ck_assert_msg(count_kind(r.graph, PCGC_OP_COMBINE) == 0, "%d combines left after one expansion",
                count_kind(r.graph, PCGC_OP_COMBINE));
  pcgc_joint_result_destroy(&r);

  /* a heap of one graph: the search still finds the round-trip-free graph,
   * dropping the worse candidates as it goes */
  {
    pcgc_mapping mp;
    ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 1}, &err), PCGC_OK);
    pcgc_joint_options o;
    pcgc_joint_options_default(&o);
    o.budget = 8;
    o.time_limit = 0;
    o.max_held = 1;
    o.alpha = 100; /* keep every candidate: the heap overflows at once */
    ck_assert_int_eq(pcgc_joint_search(g, &mp, 4, 1, &m, rs, &o, &r, &err), PCGC_OK);
    ck_assert_int_gt(r.dropped, 0);
    ck_assert_int_eq(count_kind(r.graph, PCGC_OP_COMBINE), 0);
    pcgc_joint_result_destroy(&r);
    pcgc_mapping_destroy(&mp);
  }

  /* budget 0: the start comes back untouched */
  run(g, &m, 0, &r);
  ck_assert(r.time == r.start_time);
  ck_assert_int_eq(r.expanded, 0);
  ck_assert(pcgc_graph_hash(r.graph) == pcgc_graph_hash(g));
  ck_assert(r.budget_hit);
  pcgc_joint_result_destroy(&r);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(never_worse) {
  pcgc_machine m;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_machine_load("dgx-h100", &m, &err), PCGC_OK);
  pcgc_graph *seq = typed("model mlp\ninput x: f32[64, 256]\ninput t: f32[64, 10]\n"
                          "h = linear(x, out=256, act=relu)\ny = linear(h, out=10)\nloss = mse(y, t)\n");
  pcgc_graph *dp = NULL;
  pcgc_mapping mp;
  ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_DATA_PARALLEL, seq, &m, 4, &dp, &mp, &err), PCGC_OK);
  pcgc_joint_options o;
  pcgc_joint_options_default(&o);
  o.time_limit = 0;
  pcgc_joint_result r;
  ck_assert_int_eq(pcgc_joint_search(dp, &mp, 4, 1, &m, rs, &o, &r, &err), PCGC_OK);
  ck_assert(r.time <= r.start_time);
  ck_assert_int_gt(r.instances, 100);
  pcgc_joint_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(dp);
  pcgc_graph_free(seq);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("joint");
  TCase *tc = tcase_create("joint");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, removes_round_trips);
  tcase_add_test(tc, never_worse);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(suite)
