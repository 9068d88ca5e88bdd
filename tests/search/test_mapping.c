/*
 * test_mapping.c — device mapping by dynamic programming (search/mapping.c,
 * search/mapping_sp.c):
 *   - on a chain, a diamond and a graph with long skip edges (series-
 *     parallel; 4 devices, 2 nodes of 2), the DP's cost equals the minimum
 *     of a brute force over every combination of the candidate views, and
 *     pcgc_views_cost of the views it returns equals its own optimum; on a
 *     graph that is not series-parallel (a bridge), one edge is cut and the
 *     result lies between the brute force and the greedy;
 *   - the cost's definition by hand: two parallel branches on disjoint
 *     devices cost the slower one, on shared devices both;
 *   - a fork/join where splitting the machine wins (the DP puts the two
 *     branches on disjoint halves) and one where it does not (the branches
 *     read a big tensor, so they stay on its devices);
 *   - memory per device by hand, and as a hard constraint: the
 *     cost-optimal split overfills a device, the DP takes the cheapest
 *     split that fits (by brute force);
 *   - the memo: a second call, and a call on the same graph with other
 *     names and node ids, compute nothing;
 *   - a chain crafted so the greedy's local choice costs more than the DP's;
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
  ck_assert_int_eq(pcgc_views_replace(g, g, &all, 4, t, m, NULL, out, &err), PCGC_OK);
  pcgc_mapping_destroy(&all);
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)) + 1e-15; }

/* A node's term with its pieces on distinct devices: fwd + bwd. */
static double term(const pcgc_graph *g, const pcgc_machine *m, const char *name) {
  pcgc_op_time t;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_cost_node_time(m, g, pcgc_graph_find(g, name), &t, &err), PCGC_OK);
  return t.fwd + t.bwd;
}

static pcgc_view view_of(const pcgc_graph *g, const pcgc_mapping *mp, const char *name) {
  int id = pcgc_graph_find(g, name);
  ck_assert_int_ge(id, 0);
  return mp->view[id];
}

static void set_view(const pcgc_graph *g, pcgc_mapping *mp, const char *name, int start, int stride) {
  int id = pcgc_graph_find(g, name);
  ck_assert_int_ge(id, 0);
  mp->view[id] = (pcgc_view){start, stride};
}

/* The least pcgc_views_cost over every combination of candidate views
 * (from `init` for resident nodes) whose fullest device holds at most
 * `cap` bytes (pcgc_views_memory, Adam); the views into best if not NULL. */
static double brute_force(const pcgc_graph *g, const pcgc_mapping *init, const pcgc_machine *m, int t, double cap,
                          long *combos, pcgc_mapping *best_views) {
  int n = g->n_nodes;
  pcgc_view(*cand)[PCGC_VIEWS_MAX_CANDIDATES] = calloc((size_t)n, sizeof *cand);
  int *K = calloc((size_t)n, sizeof *K), *idx = calloc((size_t)n, sizeof *idx);
  ck_assert(cand && K && idx);
  *combos = 1;
  for (int i = 0; i < n; i++) {
    K[i] = pcgc_views_candidates(g, init, i, 4, t, m, cand[i]);
    if (K[i] > 0) *combos *= K[i];
  }
  ck_assert_int_le(*combos, 20000);
  pcgc_error err = {0};
  pcgc_mapping mp;
  ck_assert_int_eq(pcgc_mapping_init(&mp, n, (pcgc_view){0, 1}, &err), PCGC_OK);
  memcpy(mp.view, init->view, (size_t)n * sizeof *mp.view);
  if (best_views) ck_assert_int_eq(pcgc_mapping_init(best_views, n, (pcgc_view){0, 1}, &err), PCGC_OK);
  double best = INFINITY;
  for (;;) {
    for (int i = 0; i < n; i++)
      if (K[i] > 0) mp.view[i] = cand[i][idx[i]];
    double c = pcgc_views_cost(g, &mp, m, &err);
    ck_assert_msg(!isnan(c), "%s", err.message);
    if (c < best && (isinf(cap) || pcgc_views_memory(g, &mp, m, PCGC_OPTIM_ADAM, NULL, &err) <= cap)) {
      best = c;
      if (best_views) memcpy(best_views->view, mp.view, (size_t)n * sizeof *mp.view);
    }
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

/* DP against brute force (exact on series-parallel graphs) and greedy. */
static void check_graph(const char *name, const char *text, int cut_edges) {
  pcgc_machine m = two_by_two();
  pcgc_graph *g = typed(text);
  pcgc_mapping gr, dp;
  greedy(g, &m, 2, &gr);
  pcgc_error err = {0};
  pcgc_views_dp_stats s;
  ck_assert_msg(pcgc_views_dp(g, &gr, 4, 2, &m, NULL, &dp, &s, &err) == PCGC_OK, "%s", err.message);
  double cg = pcgc_views_cost(g, &gr, &m, &err), cd = pcgc_views_cost(g, &dp, &m, &err);
  long combos;
  double bf = brute_force(g, &gr, &m, 2, INFINITY, &combos, NULL);
  ck_assert(near(cg, s.cost_init));
  ck_assert(near(cd, s.cost));
  ck_assert(cd <= cg);
  ck_assert(bf <= cd * (1 + 1e-12));
  ck_assert_int_ge(s.nodes, 3);
  ck_assert_int_le(s.candidates_max, PCGC_VIEWS_MAX_CANDIDATES);
  ck_assert_int_eq(s.cut_edges, cut_edges);
  ck_assert_int_eq(s.masks_dropped, 0);
  ck_assert_int_eq(s.memory_fixes, 0); /* 16 GiB: nothing overfills */
  if (!s.kept_init) ck_assert(near(s.dp_cost, cd)); /* the DP's optimum is what its views cost */
  if (cut_edges == 0) ck_assert_msg(near(cd, bf), "%s: dp %.9g, brute force %.9g", name, cd, bf);
  printf("%-10s %ld combinations: brute force %.3f us, dp %.3f us (gap %.2f%%), greedy %.3f us; "
         "%d nodes, <= %d candidates, %d parts, %d cut edges, <= %d device sets, memo %lld/%lld\n",
         name, combos, bf * 1e6, cd * 1e6, (cd / bf - 1) * 100, cg * 1e6, s.nodes, s.candidates_max, s.parts,
         s.cut_edges, s.masks_max, (long long)s.memo_hits, (long long)(s.memo_hits + s.memo_misses));
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

/* a -> b, a -> c, b -> c, b -> d, c -> d: not series-parallel (the bridge
 * b -> c); c, the first node stuck with two parts in, loses b -> c. */
static const char *BRIDGE = "model bridge\n"
                            "input x: f32[64, 256]\n"
                            "input t: f32[64, 256]\n"
                            "xp = partition(x, dim=0, degree=2)\n"
                            "tp = partition(t, dim=0, degree=2)\n"
                            "a = relu(xp)\n"
                            "b = partition(a, dim=1, degree=2)\n"
                            "b2 = relu(b)\n"
                            "b3 = combine(b2, dim=1, degree=2)\n"
                            "c = add(a, b3)\n"
                            "d = add(b3, c)\n"
                            "loss = mse(d, tp)\n";

START_TEST(chain_exact) { check_graph("chain", CHAIN, 0); }
END_TEST

START_TEST(diamond_exact) { check_graph("diamond", DIAMOND, 0); }
END_TEST

START_TEST(skip_edges_exact) { check_graph("skip", SKIP, 0); }
END_TEST

START_TEST(bridge_fallback) { check_graph("bridge", BRIDGE, 1); }
END_TEST

/* ------------------------------------------------- parallel branches */

/* a forks into b1 (a cheap relu) and b2 (a linear, 1024 x 1024 weight),
 * joined by j: pieces of 32 x 1024 f32 (128 KiB), 2 of each node. */
static const char *SPLIT = "model split\n"
                           "input x: f32[64, 1024]\n"
                           "input t: f32[64, 1024]\n"
                           "weight w: f32[1024, 1024]\n"
                           "xp = partition(x, dim=0, degree=2)\n"
                           "tp = partition(t, dim=0, degree=2)\n"
                           "wr = replicate(w, degree=2)\n"
                           "a = relu(xp)\n"
                           "b1 = relu(a)\n"
                           "b2 = linear(a, wr)\n"
                           "j = add(b1, b2)\n"
                           "loss = mse(j, tp)\n";

/* The same fork over 8 MiB pieces: moving one costs more than both
 * branches compute. */
static const char *BIG = "model big\n"
                         "input x: f32[64, 65536]\n"
                         "input t: f32[64, 65536]\n"
                         "xp = partition(x, dim=0, degree=2)\n"
                         "tp = partition(t, dim=0, degree=2)\n"
                         "a = relu(xp)\n"
                         "b1 = relu(a)\n"
                         "b2 = sigmoid(a)\n"
                         "j = add(b1, b2)\n"
                         "loss = mse(j, tp)\n";

static const char *FORK[] = {"a", "b1", "b2", "j", "loss"};

/* Every computed node of SPLIT or BIG on devices {start, start + 1}. */
static void place_all(const pcgc_graph *g, pcgc_mapping *mp, int start) {
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_mapping_init(mp, g->n_nodes, (pcgc_view){0, 1}, &err), PCGC_OK);
  for (int i = 0; i < 5; i++) set_view(g, mp, FORK[i], start, 1);
}

/* Both pieces of a 32 x 1024 f32 tensor moved within the node. */
static double move2(const pcgc_machine *m, double bytes) { return 2 * pcgc_comm_p2p_time(m, true, 1, bytes); }

START_TEST(cost_by_hand) {
  pcgc_machine m = one_by_four();
  pcgc_graph *g = typed(SPLIT);
  pcgc_error err = {0};
  double ta = term(g, &m, "a"), t1 = term(g, &m, "b1"), t2 = term(g, &m, "b2"), tj = term(g, &m, "j"),
         tl = term(g, &m, "loss"), mv = move2(&m, 32.0 * 1024 * 4);
  ck_assert(t2 > t1 + 2 * mv); /* so b1 is the branch to send away */
  pcgc_mapping mp;
  place_all(g, &mp, 0);
  /* one set of devices: the branches serialise */
  ck_assert(near(pcgc_views_cost(g, &mp, &m, &err), ta + t1 + t2 + tj + tl));
  /* b1 on the other half: the branches overlap, b1's moves to and from it included */
  set_view(g, &mp, "b1", 2, 1);
  ck_assert(near(pcgc_views_cost(g, &mp, &m, &err), ta + fmax(t1 + 2 * mv, t2) + tj + tl));
  /* b1 on devices 0, 2 shares device 0 with b2: a sum again (a piece moved each way) */
  set_view(g, &mp, "b1", 0, 2);
  ck_assert(near(pcgc_views_cost(g, &mp, &m, &err), ta + t1 + mv + t2 + tj + tl));
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
}
END_TEST

/* bf16 storage (options.bf16): the DP moves and keeps activations at
 * bf16's bytes, as the simulator does; the same views cost less. */
START_TEST(bf16_moves_half) {
  pcgc_machine m = one_by_four();
  pcgc_graph *g = typed(SPLIT);
  pcgc_error err = {0};
  double ta = term(g, &m, "a"), t1 = term(g, &m, "b1"), t2 = term(g, &m, "b2"), tj = term(g, &m, "j"),
         tl = term(g, &m, "loss"), mv = move2(&m, 32.0 * 1024 * 4), mv16 = move2(&m, 32.0 * 1024 * 2);
  ck_assert(mv16 < mv);
  pcgc_mapping mp, out;
  place_all(g, &mp, 0);
  set_view(g, &mp, "b1", 0, 2); /* shares device 0 with b2: a piece moved each way */
  pcgc_views_dp_options o;
  pcgc_views_dp_options_default(&o);
  pcgc_views_dp_stats s;
  ck_assert_msg(pcgc_views_dp(g, &mp, 4, 1, &m, &o, &out, &s, &err) == PCGC_OK, "%s", err.message);
  ck_assert_msg(near(s.cost_init, ta + t1 + mv + t2 + tj + tl), "f32: %.9g", s.cost_init);
  pcgc_mapping_destroy(&out);
  o.bf16 = true;
  ck_assert_msg(pcgc_views_dp(g, &mp, 4, 1, &m, &o, &out, &s, &err) == PCGC_OK, "%s", err.message);
  ck_assert_msg(near(s.cost_init, ta + t1 + mv16 + t2 + tj + tl), "bf16: %.9g, want %.9g", s.cost_init,
                ta + t1 + mv16 + t2 + tj + tl);
  pcgc_mapping_destroy(&out);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
}
END_TEST

/* The DP's views of a fork graph against the brute force; returns the
 * DP's cost. */
static double fork_dp(const pcgc_graph *g, const pcgc_machine *m, pcgc_mapping *dp, pcgc_views_dp_stats *s) {
  pcgc_mapping gr;
  greedy(g, m, 1, &gr);
  pcgc_error err = {0};
  ck_assert_msg(pcgc_views_dp(g, &gr, 4, 1, m, NULL, dp, s, &err) == PCGC_OK, "%s", err.message);
  long combos;
  double bf = brute_force(g, &gr, m, 1, INFINITY, &combos, NULL);
  ck_assert_msg(near(s->cost, bf), "dp %.9g, brute force %.9g", s->cost, bf);
  ck_assert_int_eq(s->cut_edges, 0);
  printf("%s: %ld combinations, greedy %.3f us, dp %.3f us\n", g->name, combos, s->cost_init * 1e6, s->cost * 1e6);
  pcgc_mapping_destroy(&gr);
  return s->cost;
}

/* Splitting wins: a, b2 and j on one half, b1 on the other (which half
 * is a tie). */
START_TEST(split_branches) {
  pcgc_machine m = one_by_four();
  pcgc_graph *g = typed(SPLIT);
  pcgc_mapping dp;
  pcgc_views_dp_stats s;
  double cost = fork_dp(g, &m, &dp, &s);
  pcgc_view a = view_of(g, &dp, "a");
  ck_assert(a.start == 0 || a.start == 2);
  ck_assert_int_eq(a.stride, 1);
  const char *same[] = {"b2", "j", "loss"};
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(view_of(g, &dp, same[i]).start, a.start);
    ck_assert_int_eq(view_of(g, &dp, same[i]).stride, 1);
  }
  ck_assert_int_eq(view_of(g, &dp, "b1").start, 2 - a.start);
  ck_assert_int_eq(view_of(g, &dp, "b1").stride, 1);
  double mv = move2(&m, 32.0 * 1024 * 4);
  ck_assert(near(cost, term(g, &m, "a") + fmax(term(g, &m, "b1") + 2 * mv, term(g, &m, "b2")) + term(g, &m, "j") +
                           term(g, &m, "loss")));
  ck_assert(!s.kept_init);
  ck_assert(s.cost < s.cost_init);
  ck_assert_int_ge(s.masks_max, 2); /* both halves kept for the parallel fold */
  pcgc_mapping_destroy(&dp);
  pcgc_graph_free(g);
}
END_TEST

/* Moving an 8 MiB piece costs more than a branch: one set of devices,
 * the branches' terms summed. */
START_TEST(no_split_big_tensor) {
  pcgc_machine m = one_by_four();
  pcgc_graph *g = typed(BIG);
  pcgc_mapping dp;
  pcgc_views_dp_stats s;
  double cost = fork_dp(g, &m, &dp, &s);
  pcgc_view a = view_of(g, &dp, "a");
  for (int i = 1; i < 5; i++) {
    ck_assert_int_eq(view_of(g, &dp, FORK[i]).start, a.start);
    ck_assert_int_eq(view_of(g, &dp, FORK[i]).stride, a.stride);
  }
  double sum = 0;
  for (int i = 0; i < 5; i++) sum += term(g, &m, FORK[i]);
  ck_assert(near(cost, sum));
  ck_assert(2 * move2(&m, 32.0 * 65536 * 4) > term(g, &m, "b1")); /* why: one move each way outweighs a branch */
  pcgc_mapping_destroy(&dp);
  pcgc_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------ memory */

static const double PIECE = 32.0 * 1024 * 4, WEIGHT = 1024.0 * 1024 * 4;

START_TEST(memory_by_hand) {
  pcgc_machine m = one_by_four();
  pcgc_graph *g = typed(SPLIT);
  pcgc_error err = {0};
  pcgc_mapping mp;
  place_all(g, &mp, 0);
  double dev[4];
  /* devices 0 and 1: the weight (with its gradient and Adam's two moments),
   * outputs of a, b1, b2, j, the pieces of x and t read */
  double mx = pcgc_views_memory(g, &mp, &m, PCGC_OPTIM_ADAM, dev, &err);
  ck_assert(near(dev[0], 4 * WEIGHT + 6 * PIECE));
  ck_assert(near(dev[1], dev[0]));
  ck_assert(dev[2] == 0 && dev[3] == 0);
  ck_assert(near(mx, dev[0]));
  ck_assert(near(pcgc_views_memory(g, &mp, &m, PCGC_OPTIM_SGD, NULL, &err), 2 * WEIGHT + 6 * PIECE));
  /* b2 on devices 2, 3: the weight goes with it, and each side receives a
   * piece of the other's (a's on 2 and 3, b2's on 0 and 1) */
  set_view(g, &mp, "b2", 2, 1);
  pcgc_views_memory(g, &mp, &m, PCGC_OPTIM_ADAM, dev, &err);
  ck_assert(near(dev[0], 6 * PIECE));
  ck_assert(near(dev[2], 4 * WEIGHT + 2 * PIECE));
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
}
END_TEST

/* With room for the weight and 4 pieces, the cost-optimal split (b2 with
 * a and j: the weight and 6 pieces on devices 0, 1) overfills. The best
 * views that fit (brute force) put a and b2 on one half (the weight and 3
 * pieces: a's and b2's outputs, x's piece) and b1, j and the loss on the
 * other (5 pieces: b1's and j's outputs, a's and b2's received, t's). */
START_TEST(memory_hard_constraint) {
  pcgc_machine m = one_by_four();
  pcgc_graph *g = typed(SPLIT);
  pcgc_error err = {0};
  pcgc_mapping gr, dp, t;
  pcgc_views_dp_stats s;
  greedy(g, &m, 1, &gr);
  ck_assert_int_eq(pcgc_views_dp(g, &gr, 4, 1, &m, NULL, &t, &s, &err), PCGC_OK);
  double free_cost = s.cost;
  ck_assert(near(s.memory, 4 * WEIGHT + 6 * PIECE));
  ck_assert(near(pcgc_views_cost(g, &t, &m, &err), free_cost));
  m.device.memory = 4 * WEIGHT + 4 * PIECE;
  double cap = pcgc_machine_usable_memory(&m);
  ck_assert(pcgc_views_memory(g, &t, &m, PCGC_OPTIM_ADAM, NULL, &err) > cap); /* the optimum overfills */
  ck_assert(pcgc_views_memory(g, &gr, &m, PCGC_OPTIM_ADAM, NULL, &err) > cap); /* so does the greedy */
  ck_assert_msg(pcgc_views_dp(g, &gr, 4, 1, &m, NULL, &dp, &s, &err) == PCGC_OK, "%s", err.message);
  ck_assert(near(s.memory, 4 * WEIGHT + 3 * PIECE));
  ck_assert(s.memory <= cap);
  ck_assert(near(pcgc_views_memory(g, &dp, &m, PCGC_OPTIM_ADAM, NULL, &err), s.memory));
  ck_assert_int_ge(s.memory_fixes, 1);
  ck_assert(!s.kept_init && !s.memory_kept_init);
  pcgc_view a = view_of(g, &dp, "a");
  ck_assert(a.start == 0 || a.start == 2);
  ck_assert_int_eq(a.stride, 1);
  ck_assert_int_eq(view_of(g, &dp, "b2").start, a.start);
  const char *other[] = {"b1", "j", "loss"};
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(view_of(g, &dp, other[i]).start, 2 - a.start);
    ck_assert_int_eq(view_of(g, &dp, other[i]).stride, 1);
  }
  long combos;
  double bf = brute_force(g, &gr, &m, 1, cap, &combos, NULL);
  ck_assert_msg(near(s.cost, bf), "dp %.9g, brute force within memory %.9g", s.cost, bf);
  ck_assert(s.cost > free_cost);
  /* by hand: each branch moves a tensor once (a to b1, b2 to j) */
  double mv = move2(&m, PIECE);
  ck_assert(near(s.cost, term(g, &m, "a") + fmax(term(g, &m, "b1"), term(g, &m, "b2")) + mv + term(g, &m, "j") +
                             term(g, &m, "loss")));
  printf("memory: unconstrained %.3f us, within %.0f bytes %.3f us (%d nodes fixed, %d moves)\n", free_cost * 1e6,
         cap, s.cost * 1e6, s.memory_fixes, s.memory_moves);
  pcgc_mapping_destroy(&dp);
  /* room for a piece only: nothing fits, the repair is not tried, and the
   * cheaper views win */
  m.device.memory = PIECE;
  ck_assert_int_eq(pcgc_views_dp(g, &gr, 4, 1, &m, NULL, &dp, &s, &err), PCGC_OK);
  ck_assert_int_eq(s.memory_fixes, 0);
  ck_assert(near(s.cost, free_cost));
  ck_assert(near(s.memory, 4 * WEIGHT + 6 * PIECE));
  pcgc_mapping_destroy(&t);
  pcgc_mapping_destroy(&gr);
  pcgc_mapping_destroy(&dp);
  pcgc_graph_free(g);
}
END_TEST

/* -------------------------------------------------------------- memo */

/* CHAIN with other names, an unread input declared first (other node
 * ids): the same content. */
static const char *CHAIN_RENAMED = "model chain2\n"
                                   "input unused: f32[8]\n"
                                   "input t: f32[64, 256]\n"
                                   "input x: f32[64, 256]\n"
                                   "tq = partition(t, dim=0, degree=2)\n"
                                   "xq = partition(x, dim=1, degree=2)\n"
                                   "n1 = relu(xq)\n"
                                   "n2 = partition(n1, dim=0, degree=2)\n"
                                   "n3 = relu(n2)\n"
                                   "n4 = combine(n3, dim=1, degree=2)\n"
                                   "n5 = relu(n4)\n"
                                   "l = mse(n5, tq)\n";

START_TEST(memo_shared) {
  pcgc_machine m = two_by_two();
  pcgc_graph *g = typed(CHAIN), *h = typed(CHAIN_RENAMED);
  pcgc_error err = {0};
  pcgc_views_memo *memo = NULL;
  ck_assert_int_eq(pcgc_views_memo_new(&memo, &err), PCGC_OK);
  pcgc_views_dp_options o;
  pcgc_views_dp_options_default(&o);
  ck_assert_int_eq(o.optimizer, PCGC_OPTIM_ADAM);
  o.memo = memo;
  pcgc_mapping gr, gh, d1, d2, d3;
  greedy(g, &m, 2, &gr);
  greedy(h, &m, 2, &gh);
  pcgc_views_dp_stats s1, s2, s3;
  ck_assert_int_eq(pcgc_views_dp(g, &gr, 4, 2, &m, &o, &d1, &s1, &err), PCGC_OK);
  /* 6 computed nodes and 5 edges between them, no two alike */
  ck_assert_int_eq(s1.memo_misses, 11);
  ck_assert_int_eq(s1.memo_hits, 0);
  ck_assert_int_eq(pcgc_views_dp(g, &gr, 4, 2, &m, &o, &d2, &s2, &err), PCGC_OK);
  ck_assert_int_eq(s2.memo_misses, 0);
  ck_assert_int_eq(s2.memo_hits, 11);
  ck_assert_int_eq(pcgc_views_dp(h, &gh, 4, 2, &m, &o, &d3, &s3, &err), PCGC_OK);
  ck_assert_int_eq(s3.memo_misses, 0);
  ck_assert_int_eq(s3.memo_hits, 11);
  ck_assert(s1.cost == s2.cost && s1.cost == s3.cost);
  for (int i = 0; i < g->n_nodes; i++) ck_assert(!memcmp(&d1.view[i], &d2.view[i], sizeof d1.view[i]));
  const char *gn[] = {"a", "b", "c", "d", "e", "loss"}, *hn[] = {"n1", "n2", "n3", "n4", "n5", "l"};
  for (int i = 0; i < 6; i++) {
    pcgc_view a = view_of(g, &d1, gn[i]), b = view_of(h, &d3, hn[i]);
    ck_assert(a.start == b.start && a.stride == b.stride);
  }
  pcgc_views_memo_stats ms = pcgc_views_memo_get_stats(memo);
  ck_assert_int_eq(ms.hits, 22);
  ck_assert_int_eq(ms.misses, 11);
  ck_assert_int_eq(ms.nodes, 6);
  ck_assert_int_eq(ms.matrices, 5);
  ck_assert(ms.bytes > 0);
  pcgc_views_memo_stats none = pcgc_views_memo_get_stats(NULL);
  ck_assert_int_eq(none.hits + none.misses + none.nodes, 0);
  pcgc_views_memo_free(memo);
  pcgc_views_memo_free(NULL);
  pcgc_mapping_destroy(&gr);
  pcgc_mapping_destroy(&gh);
  pcgc_mapping_destroy(&d1);
  pcgc_mapping_destroy(&d2);
  pcgc_mapping_destroy(&d3);
  pcgc_graph_free(g);
  pcgc_graph_free(h);
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
  ck_assert_int_eq(pcgc_views_dp(g, &gr, 4, 1, &m, NULL, &dp, &s, &err), PCGC_OK);
  ck_assert(!s.kept_init);
  ck_assert(s.cost < s.cost_init);
  ck_assert_int_eq(dp.view[a].start, 0);
  ck_assert_int_eq(dp.view[a].stride, 1);
  /* one piece of c (32 x 128 f32) fewer moved */
  double piece = 32.0 * 128 * 4;
  ck_assert(near(s.cost_init - s.cost, pcgc_comm_p2p_time(&m, true, 1, piece)));
  long combos;
  ck_assert(near(brute_force(g, &gr, &m, 1, INFINITY, &combos, NULL), s.cost));
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
        pcgc_expert_choice c = {b, t, s, s > 1 ? s * f : 1, PCGC_SCHEDULE_GPIPE, false, false};
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
        ck_assert_int_eq(pcgc_views_dp(pg, &mp, b * t, t, m, NULL, &dp, &st, &e), PCGC_OK);
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
  tcase_add_test(tc, skip_edges_exact);
  tcase_add_test(tc, bridge_fallback);
  tcase_add_test(tc, cost_by_hand);
  tcase_add_test(tc, bf16_moves_half);
  tcase_add_test(tc, split_branches);
  tcase_add_test(tc, no_split_big_tensor);
  tcase_add_test(tc, memory_by_hand);
  tcase_add_test(tc, memory_hard_constraint);
  tcase_add_test(tc, memo_shared);
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
