/*
 * test_joint.c — the rule-driven joint search (search/joint.c):
 *   - a start strategy with a needless partition/combine round trip on every
 *     layer: the search removes them (rules from the library), and the
 *     result is faster than the start and holds no such pair;
 *   - the result is never slower than the start, duplicates are recognised,
 *     the budget bounds the graphs expanded; a rule applied everywhere it
 *     matches removes every round trip in one expansion;
 *   - two runs give the same graph (canonical hash) and the same time;
 *   - a deep stack of such layers is split at its bottlenecks into segments,
 *     the identical ones searched once, and the spliced result has no round
 *     trip left, keeps the layers' names and validates;
 *   - the region move narrows the towers of inception-style modules onto
 *     disjoint device groups, and its trace lines replay (or are refused
 *     with the reason).
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* dgx-h100 cut to the 4 GPUs the round-trip models are mapped on: with 8,
 * the search rightly spreads a layer over the other 4 too (its batch split in
 * two), where messages go straight from their buffers, and a combine stays. */
static pcgc_machine four_h100(void) {
  pcgc_machine m;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_machine_load("dgx-h100", &m, &err), PCGC_OK);
  m.devices_per_node = 4;
  return m;
}

START_TEST(removes_round_trips) {
  pcgc_machine m = four_h100();
  pcgc_error err = {0};
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

/* Replays r's trace on start: the result, with its canonical hash r's. */
static pcgc_graph *replayed(const pcgc_graph *start, const pcgc_joint_result *r, const pcgc_machine *m) {
  pcgc_error err = {0};
  pcgc_graph *g = NULL;
  ck_assert_msg(pcgc_joint_replay(start, r->n_trace, (const char *const *)r->trace, m, rs, &g, &err) == PCGC_OK, "%s",
                err.message);
  ck_assert(pcgc_graph_hash(g) == pcgc_graph_hash(r->graph));
  ck_assert(pcgc_graph_equal(g, r->graph));
  return g;
}

/* `layers` layers like ROUND_TRIPS's, over 4 devices; tied: the output
 * goes through the first layer's weight again, transposed, as a tied LM
 * head does (a computed node that reads only a weight). */
static char *deep_round_trips(int layers, bool tied) {
  size_t cap = 4096 + (size_t)layers * 512, n = 0;
  char *t = malloc(cap);
  ck_assert_ptr_nonnull(t);
  n += (size_t)snprintf(t + n, cap - n,
                        "model deep\ninput x: f32[64, 256]\ninput t: f32[64, 256]\n"
                        "p0 = partition(x, dim=0, degree=4)\ntp = partition(t, dim=0, degree=4)\n");
  for (int i = 1; i <= layers; i++)
    n += (size_t)snprintf(t + n, cap - n,
                          "weight w%d: f32[256, 256]\nr%d = replicate(w%d, degree=4)\n"
                          "h%d = linear(p%d, r%d, act=relu)\nc%d = combine(h%d, dim=0, degree=4)\n"
                          "p%d = partition(c%d, dim=0, degree=4)\n",
                          i, i, i, i, i - 1, i, i, i, i, i);
  if (tied)
    snprintf(t + n, cap - n, "wt = transpose(r1, perm=[1, 0])\ny = matmul(p%d, wt)\nloss = mse(y, tp)\n", layers);
  else
    snprintf(t + n, cap - n, "loss = mse(p%d, tp)\n", layers);
  return t;
}

START_TEST(segments) {
  pcgc_machine m = four_h100();
  pcgc_error err = {0};
  char *text = deep_round_trips(12, false);
  pcgc_graph *g = typed(text);
  free(text);
  ck_assert_int_eq(count_kind(g, PCGC_OP_COMBINE), 12);
  pcgc_mapping mp;
  ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 1}, &err), PCGC_OK);
  pcgc_joint_options o;
  pcgc_joint_options_default(&o);
  o.time_limit = 0;
  o.budget = 2;
  o.segment_nodes = 6; /* two layers (linear, combine, partition) per segment */
  pcgc_joint_result r;
  ck_assert_msg(pcgc_joint_search(g, &mp, 4, 1, &m, rs, &o, &r, &err) == PCGC_OK, "%s", err.message);
  /* 36 computed nodes and the loss: six segments of two layers, the last
   * with the loss; the first (it reads the data input's partition itself)
   * and the last differ from the four in between, which are searched once */
  ck_assert_int_eq(r.segments, 6);
  ck_assert_int_eq(r.segments_searched, 3);
  ck_assert_int_eq(r.segments_improved, 6);
  ck_assert(!r.splice_rejected);
  ck_assert_msg(r.time < r.start_time, "no improvement: %g s from %g s", r.time, r.start_time);
  ck_assert_msg(count_kind(r.graph, PCGC_OP_COMBINE) == 0, "%d combines left", count_kind(r.graph, PCGC_OP_COMBINE));
  ck_assert_msg(pcgc_graph_validate(r.graph, &err) == PCGC_OK, "%s", err.message);
  ck_assert_int_eq(r.mapping.n_nodes, r.graph->n_nodes);
  /* the trace: every segment's steps in the whole graph's names (copies
   * included), single matches only; replayed, it is the result, names and all */
  ck_assert(!r.untraced);
  ck_assert_int_ge(r.n_trace, 6);
  for (int i = 0; i < r.n_trace; i++) ck_assert_msg(strstr(r.trace[i], " at "), "%s", r.trace[i]);
  {
    pcgc_graph *rg = replayed(g, &r, &m);
    for (int i = 0; i < r.graph->n_nodes; i++)
      ck_assert_str_eq(rg->nodes[i].name, r.graph->nodes[i].name);
    pcgc_graph_free(rg);
  }
  /* every layer keeps its linear under its own name, copies included */
  for (int i = 1; i <= 12; i++) {
    char name[16];
    snprintf(name, sizeof name, "h%d", i);
    int id = pcgc_graph_find(r.graph, name);
    ck_assert_msg(id >= 0 && r.graph->nodes[id].kind == PCGC_OP_LINEAR, "no linear %s", name);
  }
  /* as fast as the whole-graph search's result */
  pcgc_joint_result w;
  o.segment_nodes = 0;
  o.budget = 4;
  ck_assert_int_eq(pcgc_joint_search(g, &mp, 4, 1, &m, rs, &o, &w, &err), PCGC_OK);
  ck_assert_int_eq(w.segments, 0);
  ck_assert_int_eq(count_kind(w.graph, PCGC_OP_COMBINE), 0);
  ck_assert_msg(fabs(w.time - r.time) <= 1e-9 * w.time, "whole %g s, segmented %g s", w.time, r.time);
  ck_assert(pcgc_graph_equal(w.graph, r.graph));
  pcgc_joint_result_destroy(&w);
  pcgc_joint_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);

  /* a tied head: the transpose of w1 waits beside its reader, so the layer
   * boundaries stay bottlenecks; w1 itself, read by the first and the last
   * segment, is rebuilt in both */
  text = deep_round_trips(12, true);
  g = typed(text);
  free(text);
  ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 1}, &err), PCGC_OK);
  o.segment_nodes = 6;
  o.budget = 2;
  ck_assert_msg(pcgc_joint_search(g, &mp, 4, 1, &m, rs, &o, &r, &err) == PCGC_OK, "%s", err.message);
  ck_assert_int_eq(r.segments, 6);
  ck_assert_msg(r.time < r.start_time, "no improvement: %g s from %g s", r.time, r.start_time);
  ck_assert_int_eq(count_kind(r.graph, PCGC_OP_COMBINE), 0);
  ck_assert_int_eq(count_kind(r.graph, PCGC_OP_TRANSPOSE), 1);
  ck_assert_msg(pcgc_graph_validate(r.graph, &err) == PCGC_OK, "%s", err.message);
  pcgc_joint_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
}
END_TEST

/* Every model small enough, split into segments of 1, 2 and 3 computed
 * nodes (every bottleneck a cut): the search runs, its graph validates and
 * simulates to the time it reports, never slower than the start. */
START_TEST(segments_on_models) {
  static const char *models[] = {"mlp", "cnn", "transformer-block"};
  pcgc_machine m;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_machine_load("dgx-h100", &m, &err), PCGC_OK);
  for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/models/%s.pcg", PCGC_SOURCE_DIR, models[i]);
    pcgc_graph *seq = pcgc_model_load(path, NULL, &err);
    ck_assert_msg(seq && pcgc_graph_infer(seq, &err) == PCGC_OK, "%s: %s", path, err.message);
    pcgc_graph *dp = NULL;
    pcgc_mapping mp;
    ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_DATA_PARALLEL, seq, &m, 8, &dp, &mp, &err), PCGC_OK);
    for (int n = 1; n <= 3; n++) {
      pcgc_joint_options o;
      pcgc_joint_options_default(&o);
      o.time_limit = 0;
      o.budget = 1;
      o.segment_nodes = n;
      pcgc_joint_result r;
      ck_assert_msg(pcgc_joint_search(dp, &mp, 8, 1, &m, rs, &o, &r, &err) == PCGC_OK, "%s: %s", models[i],
                    err.message);
      if (n == 1) ck_assert_msg(r.segments >= 2, "%s not split with one node a segment", models[i]);
      ck_assert(r.time <= r.start_time);
      ck_assert_msg(pcgc_graph_validate(r.graph, &err) == PCGC_OK, "%s: %s", models[i], err.message);
      pcgc_sim_options so;
      pcgc_sim_options_default(&so);
      pcgc_sim_result sr;
      ck_assert_int_eq(pcgc_simulate(r.graph, &r.mapping, &m, &so, &sr, &err), PCGC_OK);
      ck_assert_msg(sr.iteration_time == r.time, "%s: simulates to %g s, reported %g s", models[i],
                    sr.iteration_time, r.time);
      pcgc_sim_result_destroy(&sr);
      pcgc_joint_result_destroy(&r);
    }
    pcgc_mapping_destroy(&mp);
    pcgc_graph_free(dp);
    pcgc_graph_free(seq);
  }
}
END_TEST

/* The trace of a search that improved: one line per rewrite from the start,
 * which applies again to the same graph and to the same strategy at other
 * sizes; steps that no longer apply are errors naming the step. */
START_TEST(trace_replays) {
  pcgc_machine m;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_machine_load("dgx-h100", &m, &err), PCGC_OK);
  pcgc_graph *g = typed(ROUND_TRIPS);
  pcgc_joint_result r;
  run(g, &m, 8, &r);
  ck_assert_int_gt(r.n_trace, 0);
  ck_assert(!r.untraced);
  for (int i = 0; i < r.n_trace; i++)
    ck_assert_msg(strstr(r.trace[i], " at ") || strstr(r.trace[i], " everywhere "), "step %d: %s", i + 1, r.trace[i]);
  pcgc_graph *g2 = replayed(g, &r, &m);
  /* names too: every node of the result is there under its name */
  for (int i = 0; i < r.graph->n_nodes; i++) ck_assert_int_ge(pcgc_graph_find(g2, r.graph->nodes[i].name), 0);
  pcgc_graph_free(g2);
  pcgc_joint_result_destroy(&r);

  /* one expansion: the round trips go by a rule-wide move, "everywhere 2" */
  run(g, &m, 1, &r);
  ck_assert_int_eq(r.n_trace, 1);
  ck_assert_msg(strstr(r.trace[0], " everywhere 2"), "%s", r.trace[0]);
  pcgc_graph_free(replayed(g, &r, &m));

  /* the same strategy at other sizes: the steps apply, no combine is left */
  static const char *const sizes[][2] = {{"[64, 512]", "[32, 256]"}, {"[512, 512]", "[256, 256]"}};
  char *text = strdup(ROUND_TRIPS);
  for (size_t k = 0; k < 2; k++)
    for (char *p; (p = strstr(text, sizes[k][0]));) memcpy(p, sizes[k][1], strlen(sizes[k][1]));
  pcgc_graph *other = typed(text), *g3 = NULL;
  free(text);
  ck_assert_msg(pcgc_joint_replay(other, r.n_trace, (const char *const *)r.trace, &m, rs, &g3, &err) == PCGC_OK, "%s",
                err.message);
  ck_assert_int_eq(count_kind(g3, PCGC_OP_COMBINE), 0);
  ck_assert_int_eq(g3->n_nodes, r.graph->n_nodes);
  pcgc_graph_free(g3);
  pcgc_graph_free(other);

  /* errors name the step and what no longer applies */
  char rule[200];
  snprintf(rule, sizeof rule, "%s", r.trace[0]);
  *strstr(rule, " everywhere") = 0;
  char bad_node[300], too_many[300];
  snprintf(bad_node, sizeof bad_node, "%s at nosuch", rule);
  snprintf(too_many, sizeof too_many, "%s everywhere 3", rule);
  const char *const cases[][2] = {
      {"no_such_rule d=2 at h1", "trace step 1 of 1 (no_such_rule d=2 at h1): the rule library has no rule 'no_such_rule'"},
      {too_many, "matches 2 times, the step applies it 3 times"},
      {"linear at", "expected 'at NODE...' or 'everywhere N'"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const char *line = cases[k][0];
    pcgc_graph *x = (pcgc_graph *)1;
    ck_assert_int_ne(pcgc_joint_replay(g, 1, &line, &m, rs, &x, &err), PCGC_OK);
    ck_assert_ptr_null(x);
    ck_assert_msg(strstr(err.message, cases[k][1]), "%s: %s", line, err.message);
  }
  /* a step after a good one: named as step 2 */
  const char *two[2] = {r.trace[0], bad_node};
  pcgc_graph *x = NULL;
  ck_assert_int_ne(pcgc_joint_replay(g, 2, two, &m, rs, &x, &err), PCGC_OK);
  ck_assert_msg(strstr(err.message, "trace step 2 of 2"), "%s", err.message);
  pcgc_joint_result_destroy(&r);
  pcgc_graph_free(g);
}
END_TEST

/* DLRM (typed) and the DGX H100 it is compiled for in the README. */
static pcgc_graph *dlrm_on_dgx(pcgc_machine *m) {
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_machine_load("dgx-h100", m, &err), PCGC_OK);
  char path[4096];
  snprintf(path, sizeof path, "%s/models/dlrm.pcg", PCGC_SOURCE_DIR);
  pcgc_graph *seq = pcgc_model_load(path, NULL, &err);
  ck_assert_msg(seq && pcgc_graph_infer(seq, &err) == PCGC_OK, "%s", err.message);
  return seq;
}

/* The devices of node v's pieces as a bit set (at most 64 devices). */
static uint64_t devices_of(const pcgc_graph *g, const pcgc_mapping *mp, int v, int D) {
  uint64_t s = 0;
  int64_t P = pcgc_ptensor_pieces(&g->nodes[v].out[0]);
  for (int64_t p = 0; p < P; p++) s |= UINT64_C(1) << pcgc_view_device(mp->view[v], p, D);
  return s;
}

/* compile on a model whose joint search improves on the expert strategy
 * (DLRM on a DGX H100, README): the trace replayed on that strategy, as
 * pcgc_expert_build makes it at the same sizes, gives the compiled graph.
 * The improvement is DLRM's hybrid, reached from the search's second start,
 * data parallel on all 8 GPUs: every table split by columns over a group of
 * its own (embedding_batch_to_columns applied to the four at once, the
 * groups spread over the machine), the MLPs data parallel. Its estimate is
 * about two thirds of the expert strategy's (tensor parallelism, 1.216 ms;
 * the hybrid 809 us). */
START_TEST(trace_of_compile) {
  pcgc_machine m;
  pcgc_error err = {0};
  pcgc_graph *seq = dlrm_on_dgx(&m);
  pcgc_compile_options o;
  pcgc_compile_options_default(&o);
  o.joint.time_limit = 0; /* deterministic */
  pcgc_compile_result r;
  ck_assert_msg(pcgc_compile(seq, &m, &o, &r, &err) == PCGC_OK, "%s", err.message);
  ck_assert(r.joint_ran);
  ck_assert_msg(r.joint.improvements > 0 && r.joint.n_trace > 0, "the joint search did not improve DLRM");
  ck_assert(!r.joint.untraced);
  ck_assert_msg(r.joint_from_dp, "DLRM's rewrites did not come from data parallel");
  ck_assert_int_eq(r.choice.dp, 8);
  ck_assert_int_eq(r.choice.tp, 1);
  ck_assert_int_eq(r.start_choice.tp, 8); /* the expert strategy it was compared with */
  ck_assert_msg(r.sim.iteration_time < 0.75 * r.expert_time, "hybrid %g s against the expert strategy's %g s",
                r.sim.iteration_time, r.expert_time);
  uint64_t used = 0;
  int tables = 0;
  for (int v = 0; v < r.graph->n_nodes; v++) {
    if (r.graph->nodes[v].kind != PCGC_OP_EMBEDDING) continue;
    ck_assert_int_eq(r.graph->nodes[v].out[0].degree[1], 2); /* columns over 2 GPUs */
    uint64_t d = devices_of(r.graph, &r.mapping, v, 8);
    ck_assert_msg((d & used) == 0, "table %s shares GPUs with another", r.graph->nodes[v].name);
    used |= d;
    tables++;
  }
  ck_assert_int_eq(tables, 4);
  ck_assert(used == 0xff);
  pcgc_expert *x = NULL;
  pcgc_graph *g = NULL, *g2 = NULL;
  pcgc_mapping mp;
  ck_assert_int_eq(pcgc_expert_new(seq, &m, NULL, &x, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_expert_build(x, r.choice, &g, &mp, &err), PCGC_OK);
  ck_assert_msg(pcgc_joint_replay(g, r.joint.n_trace, (const char *const *)r.joint.trace, &m, rs, &g2, &err) ==
                    PCGC_OK, "%s", err.message);
  ck_assert(pcgc_graph_hash(g2) == pcgc_graph_hash(r.graph));
  ck_assert(pcgc_graph_hash(g) != pcgc_graph_hash(r.graph));
  pcgc_graph_free(g2);
  pcgc_graph_free(g);
  pcgc_mapping_destroy(&mp);
  pcgc_expert_free(x);
  pcgc_compile_result_destroy(&r);
  pcgc_graph_free(seq);
}
END_TEST

/* Two inception-style modules: towers of conv -> batchnorm -> relu read the
 * module input and meet in a concat. */
static const char *TOWERS =
    "model towers\n"
    "input images: f32[16, 8, 12, 12]\n"
    "input labels: i32[16]\n"
    "block cbr(tensor x, int out, int k = 1, int p = 0) {\n"
    "  c = conv2d(x, out=out, kernel=k, padding=p, bias=false)\n"
    "  n = batchnorm(c)\n"
    "  r = relu(n)\n"
    "  return r\n"
    "}\n"
    "block module(tensor x, int w) {\n"
    "  a = cbr(x, out=w)\n"
    "  b1 = cbr(x, out=w)\n"
    "  b2 = cbr(b1, out=w, k=3, p=1)\n"
    "  c1 = cbr(x, out=w)\n"
    "  c2 = cbr(c1, out=w, k=3, p=1)\n"
    "  c3 = cbr(c2, out=w, k=3, p=1)\n"
    "  pool = pool2d(x, kind=avg, kernel=3, stride=1, padding=1)\n"
    "  d = cbr(pool, out=w)\n"
    "  y = concat(a, b2, c3, d, axis=1)\n"
    "  return y\n"
    "}\n"
    "m1 = module(images, w=8)\n"
    "m2 = module(m1, w=8)\n"
    "g = pool2d(m2, kind=avg, global=true)\n"
    "f = flatten(g)\n"
    "logits = linear(f, out=10)\n"
    "loss = softmax_cross_entropy(logits, labels)\n";

/* The region move (search/branches.c) on data parallelism over a DGX H100's
 * 8 GPUs, with no rule expanded (budget 0): each module's towers narrowed
 * to groups of their own, sized by the cost model (the one-conv tower on 4
 * GPUs, the two-conv one on 2, the three-conv one and the pooled one on a
 * GPU each: a tower on one GPU synchronises no batch-norm statistics), on
 * disjoint GPUs covering the machine; the whole nearly twice as fast (0.71 ms
 * against data parallel's 1.36 ms, whose weights' all-reduces are one bucket);
 * the trace replays to the same graph; lines that do not fit the graph are
 * refused with the reason; and with branches off nothing moves. */
START_TEST(branches_on_towers) {
  pcgc_machine m;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_machine_load("dgx-h100", &m, &err), PCGC_OK);
  pcgc_graph *seq = typed(TOWERS), *g = NULL;
  pcgc_expert *x = NULL;
  pcgc_mapping mp;
  ck_assert_int_eq(pcgc_expert_new(seq, &m, NULL, &x, &err), PCGC_OK);
  ck_assert_msg(pcgc_expert_build(x, (pcgc_expert_choice){.dp = 8, .tp = 1, .pp = 1, .micro = 1}, &g, &mp, &err) ==
                    PCGC_OK, "%s", err.message);
  pcgc_joint_options o;
  pcgc_joint_options_default(&o);
  o.budget = 0;
  o.time_limit = 0;
  pcgc_joint_result r;
  ck_assert_msg(pcgc_joint_search(g, &mp, 8, 1, &m, rs, &o, &r, &err) == PCGC_OK, "%s", err.message);
  ck_assert_int_eq(r.n_trace, 2);
  ck_assert_str_eq(r.trace[0], "@branches 4 2 1 1 at m1.y");
  ck_assert_str_eq(r.trace[1], "@branches 4 2 1 1 at m2.y");
  ck_assert_int_eq(r.improvements, 1);
  ck_assert_msg(r.time < 0.55 * r.start_time, "%g s against data parallel's %g s", r.time, r.start_time);
  const char *mods[] = {"m1", "m2"};
  for (int k = 0; k < 2; k++) {
    uint64_t dev[4];
    const char *tower[] = {"a", "b2", "c3", "d"};
    const int gpus[] = {4, 2, 1, 1};
    for (int i = 0; i < 4; i++) {
      char name[32];
      snprintf(name, sizeof name, "%s.%s.c", mods[k], tower[i]);
      int v = pcgc_graph_find(r.graph, name);
      ck_assert_int_ge(v, 0);
      ck_assert_int_eq(r.graph->nodes[v].out[0].degree[0], gpus[i]);
      dev[i] = devices_of(r.graph, &r.mapping, v, 8);
      ck_assert_int_eq(__builtin_popcountll(dev[i]), gpus[i]);
    }
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < i; j++) ck_assert_msg((dev[i] & dev[j]) == 0, "towers %d and %d share GPUs", i, j);
    ck_assert((dev[0] | dev[1] | dev[2] | dev[3]) == 0xff);
  }
  pcgc_graph_free(replayed(g, &r, &m));
  /* lines that do not fit */
  const char *bad[][2] = {
      {"@branches 4 2 1 at m1.y", "has 4 branches, the step sizes 3"},
      {"@branches 3 2 2 1 at m1.y", "3 devices does not divide its 8"},
      {"@branches 2 2 2 2 at m1.a.r", "does not close branches"},
      {"@branches 2 2 2 2 at nowhere", "no node 'nowhere'"},
      {"@branches 2 x 2 2 at m1.y", "expected @branches DEVICES... at NODE"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    pcgc_graph *g2 = NULL;
    pcgc_error e = {0};
    const char *line = bad[i][0];
    ck_assert_int_ne(pcgc_joint_replay(g, 1, &line, &m, rs, &g2, &e), PCGC_OK);
    ck_assert_msg(strstr(e.message, bad[i][1]), "%s: %s", line, e.message);
    ck_assert(g2 == NULL);
  }
  pcgc_joint_result_destroy(&r);
  o.branches = false;
  ck_assert_int_eq(pcgc_joint_search(g, &mp, 8, 1, &m, rs, &o, &r, &err), PCGC_OK);
  ck_assert_int_eq(r.n_trace, 0);
  ck_assert(pcgc_graph_equal(r.graph, g));
  pcgc_joint_result_destroy(&r);
  pcgc_graph_free(g);
  pcgc_mapping_destroy(&mp);
  pcgc_expert_free(x);
  pcgc_graph_free(seq);
}
END_TEST

/* The search on worker threads chooses what it chooses on one: DLRM on a
 * DGX H100 (the grid, the rule check and the joint search with the DP's
 * views all run on the workers) compiled with 1 and with 3 threads gives
 * the same strategy, time, views, trace and counts (but for the candidates
 * whose build stopped early, and so the ones known to fit: which of the
 * slower ones stop depends on the best time known when they start). */
START_TEST(threads_do_not_change_the_plan) {
  pcgc_machine m;
  pcgc_error err = {0};
  pcgc_graph *seq = dlrm_on_dgx(&m);
  pcgc_compile_result r[2];
  for (int k = 0; k < 2; k++) {
    pcgc_compile_options o;
    pcgc_compile_options_default(&o);
    o.time_limit = 0; /* deterministic */
    o.joint.time_limit = 0;
    o.threads = o.joint.threads = k == 0 ? 1 : 3;
    ck_assert_msg(pcgc_compile(seq, &m, &o, &r[k], &err) == PCGC_OK, "%s", err.message);
  }
  ck_assert(pcgc_expert_choice_equal(&r[0].choice, &r[1].choice));
  ck_assert(pcgc_graph_hash(r[0].graph) == pcgc_graph_hash(r[1].graph));
  ck_assert(pcgc_graph_equal(r[0].graph, r[1].graph));
  ck_assert_int_eq(r[0].mapping.n_nodes, r[1].mapping.n_nodes);
  ck_assert(memcmp(r[0].mapping.view, r[1].mapping.view, (size_t)r[0].mapping.n_nodes * sizeof *r[0].mapping.view) == 0);
  ck_assert(r[0].sim.iteration_time == r[1].sim.iteration_time);
  ck_assert(r[0].expert_time == r[1].expert_time);
  ck_assert_int_eq(r[0].tried, r[1].tried);
  for (int k = 0; k < 2; k++) ck_assert_int_le(r[k].feasible + r[k].stopped, r[k].tried);
  ck_assert(r[0].megatron.time == r[1].megatron.time && r[0].pipeline.time == r[1].pipeline.time &&
            r[0].data_parallel.time == r[1].data_parallel.time);
  ck_assert_int_eq(r[0].rules, r[1].rules);
  ck_assert_int_eq(r[0].joint.expanded, r[1].joint.expanded);
  ck_assert_int_eq(r[0].joint.evaluated, r[1].joint.evaluated);
  ck_assert_int_eq(r[0].joint.duplicates, r[1].joint.duplicates);
  ck_assert_int_eq(r[0].joint.improvements, r[1].joint.improvements);
  ck_assert_msg(r[0].joint.improvements > 0, "the joint search did not improve DLRM");
  ck_assert_int_eq(r[0].joint.n_trace, r[1].joint.n_trace);
  for (int i = 0; i < r[0].joint.n_trace; i++) ck_assert_str_eq(r[0].joint.trace[i], r[1].joint.trace[i]);
  pcgc_compile_result_destroy(&r[0]);
  pcgc_compile_result_destroy(&r[1]);
  pcgc_graph_free(seq);
}
END_TEST

/* The plan's "derivation" keeps the trace: written, read back line by line;
 * a derivation written without one reads back without one. */
START_TEST(derivation_trace) {
  pcgc_error err = {0};
  pcgc_graph *g = typed(ROUND_TRIPS);
  pcgc_mapping mp;
  ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 1}, &err), PCGC_OK);
  pcgc_graph *c = NULL;
  pcgc_mapping cmp;
  ck_assert_int_eq(pcgc_strategy_canonical(g, &mp, &c, &cmp, &err), PCGC_OK);
  char *lines[2] = {"combine_partition_cancel d=4 k=0 everywhere 2", "some_rule d=2 at a%20b c"};
  pcgc_derivation d;
  memset(&d, 0, sizeof d);
  snprintf(d.file, sizeof d.file, "rt.pcg");
  d.loss = -1;
  d.rewrites = 3;
  d.has_trace = true;
  d.n_trace = 2;
  d.trace = lines;
  pcgc_strategy_info info;
  memset(&info, 0, sizeof info);
  snprintf(info.machine, sizeof info.machine, "dgx-h100");
  info.devices = 4;
  info.derivation = &d;
  char path[] = "/tmp/pcgc-test-trace-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_msg(pcgc_strategy_file_write(path, c, &cmp, &info, &err) == PCGC_OK, "%s", err.message);
  pcgc_derivation back;
  ck_assert_msg(pcgc_strategy_file_derivation(path, &back, &err) == PCGC_OK, "%s", err.message);
  ck_assert(back.has_trace);
  ck_assert_int_eq(back.rewrites, 3);
  ck_assert_int_eq(back.n_trace, 2);
  ck_assert_str_eq(back.trace[0], lines[0]);
  ck_assert_str_eq(back.trace[1], lines[1]);
  pcgc_derivation_free(&back);
  ck_assert_ptr_null(back.trace);
  d.has_trace = false;
  ck_assert_int_eq(pcgc_strategy_file_write(path, c, &cmp, &info, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_strategy_file_derivation(path, &back, &err), PCGC_OK);
  ck_assert(!back.has_trace);
  ck_assert_int_eq(back.n_trace, 0);
  pcgc_derivation_free(&back);
  remove(path);
  pcgc_mapping_destroy(&cmp);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(c);
  pcgc_graph_free(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("joint");
  TCase *tc = tcase_create("joint");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, removes_round_trips);
  tcase_add_test(tc, never_worse);
  tcase_add_test(tc, segments);
  tcase_add_test(tc, segments_on_models);
  tcase_add_test(tc, trace_replays);
  tcase_add_test(tc, trace_of_compile);
  tcase_add_test(tc, threads_do_not_change_the_plan);
  tcase_add_test(tc, derivation_trace);
  tcase_add_test(tc, branches_on_towers);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(suite)
