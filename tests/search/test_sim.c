/*
 * test_sim.c — the execution simulator (search/sim.c) and the baseline
 * strategies (search/strategy.c), against numbers computed by hand:
 *   - data parallel, one linear layer, one node: the iteration is the
 *     device's compute plus the ring all-reduce of the weight gradient, to
 *     1e-9; with two layers the first all-reduce hides behind the last
 *     backward, and without overlap nothing hides;
 *   - pipelines of s stages x m micro-batches: forward (s-1)t + m(t+l), the
 *     textbook (m+s-1)/m of the ideal, the whole GPipe iteration by hand;
 *     1F1B keeps s-k micro-batches of activations on stage k; with several
 *     operators per stage, GPipe and 1F1B both take (m+s-1) stage times,
 *     each device running one micro-batch through its operators at a time
 *     (the order read back from the trace);
 *   - sequential on one device: the iteration is the sum of every task;
 *   - bounds on every hand-built parallel graph and baseline: the critical
 *     path and the busiest device below the iteration, the sum of all task
 *     times above it;
 *   - data movement of the parallel operators: relayouts, broadcast and
 *     reduce collectives, point-to-point reduce with its add;
 *   - memory: data parallel keeps weights, gradients and state whole and
 *     1/N of the activations; out of memory is flagged;
 *   - the closed-form piece map agrees with pcgc_op_piece_inputs on every
 *     piece; the trace is valid JSON; errors name what is wrong.
 */
#define _POSIX_C_SOURCE 200809L
#include <cJSON.h>
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "search.h"
#include "search.h"

#include "../common/toy_machine.h"

#ifndef PCGC_SOURCE_DIR
#error "PCGC_SOURCE_DIR must be defined to the source tree"
#endif

/* ------------------------------------------------------------- helpers */

#define close_to(got, want, rel) close_to_at(got, want, rel, __FILE__, __LINE__)
static void close_to_at(double got, double want, double rel, const char *file, int line) {
  ck_assert_msg(fabs(got - want) <= rel * fabs(want) + 1e-18, "%s:%d: got %.17g, want %.17g (rel %.3g)", file, line,
                got, want, want != 0 ? fabs(got - want) / fabs(want) : fabs(got));
}

static pcgc_machine preset(const char *name) {
  pcgc_machine m;
  pcgc_error err = {0};
  ck_assert_msg(pcgc_machine_load(name, &m, &err) == PCGC_OK, "%s: %s", name, err.message);
  return m;
}

static pcgc_graph *model_text(const char *text) {
  pcgc_error err = {0};
  pcgc_graph *g = pcgc_model_parse(text, strlen(text), "inline.pcg", NULL, &err);
  ck_assert_msg(g != NULL, "%s:%d:%d: %s", err.file, err.line, err.col, err.message);
  return g;
}

static pcgc_graph *model_file(const char *rel, const char *batch) {
  pcgc_error err = {0};
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", PCGC_SOURCE_DIR, rel);
  const char *names[] = {"B"}, *values[] = {batch};
  pcgc_model_options o = {batch ? 1 : 0, names, values};
  pcgc_graph *g = pcgc_model_load(path, &o, &err);
  ck_assert_msg(g != NULL, "%s: %s", path, err.message);
  return g;
}

static int node(const pcgc_graph *g, const char *name) {
  int id = pcgc_graph_find(g, name);
  ck_assert_msg(id >= 0, "no node '%s'", name);
  return id;
}

static pcgc_op_time node_time(const pcgc_machine *m, const pcgc_graph *g, const char *name) {
  pcgc_op_time t;
  pcgc_error err = {0};
  ck_assert_msg(pcgc_cost_node_time(m, g, node(g, name), &t, &err) == PCGC_OK, "%s", err.message);
  return t;
}

static pcgc_sim_result simulate(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m,
                                const pcgc_sim_options *o) {
  pcgc_sim_result r;
  pcgc_error err = {0};
  pcgc_status st = pcgc_simulate(g, mp, m, o, &r, &err);
  ck_assert_msg(st == PCGC_OK, "simulate: %s (%s)", err.message, err.hint);
  return r;
}

/* Baseline s of g on n devices of m (0: all), simulated with o (NULL: defaults). */
static pcgc_sim_result baseline(const pcgc_graph *g, pcgc_strategy s, const pcgc_machine *m, int n,
                                const pcgc_sim_options *o) {
  pcgc_graph *pg;
  pcgc_mapping mp;
  pcgc_error err = {0};
  ck_assert_msg(pcgc_strategy_build(s, g, m, n, &pg, &mp, &err) == PCGC_OK, "%s", err.message);
  pcgc_sim_result r = simulate(pg, &mp, m, o);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  return r;
}

/* What every simulation must satisfy: the critical path and the busiest
 * device below the iteration, the sum of all task times above it. */
static void check_bounds(const char *what, const pcgc_sim_result *r) {
  ck_assert_msg(r->critical_path <= r->iteration_time * (1 + 1e-12), "%s: critical path %g > iteration %g", what,
                r->critical_path, r->iteration_time);
  ck_assert_msg(r->compute_max <= r->iteration_time * (1 + 1e-12), "%s: busiest device %g > iteration %g", what,
                r->compute_max, r->iteration_time);
  ck_assert_msg(r->iteration_time <= r->task_time * (1 + 1e-12), "%s: iteration %g > sum of tasks %g", what,
                r->iteration_time, r->task_time);
  ck_assert_msg(r->forward_time <= r->iteration_time, "%s: forward after the end", what);
  ck_assert_msg(r->iteration_time > 0 && isfinite(r->iteration_time), "%s: iteration %g", what, r->iteration_time);
  for (int d = 0; d < r->n_devices; d++)
    ck_assert_msg(r->device[d].idle >= -1e-15 && isfinite(r->device[d].memory.total), "%s: device %d", what, d);
}

static pcgc_sim_options opts(void) {
  pcgc_sim_options o;
  pcgc_sim_options_default(&o);
  return o;
}

/* simulate() with a Chrome trace written to a new temporary file, whose
 * name lands in path (a mkstemp template, "/tmp/...-XXXXXX") */
static pcgc_sim_result simulate_traced(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m,
                                       char *path) {
  int fd = mkstemp(path);
  ck_assert(fd >= 0);
  close(fd);
  pcgc_sim_options o = opts();
  o.trace_path = path;
  return simulate(g, mp, m, &o);
}

/* Adam on n f32 elements: 12 FLOPs, 7 element reads and writes each, on the vector units. */
static double adam_time(const pcgc_machine *m, double n) {
  double peak = m->device.flops[PCGC_F32] * (m->device.kind == PCGC_DEVICE_CPU ? 0.1 : 0.5);
  double tc = 12 * n / peak, tm = 7 * 4 * n / m->device.memory_bandwidth;
  return (tc > tm ? tc : tm) + m->device.launch_overhead;
}

/* Zeroing n bytes (a program zeroes every gradient buffer once a step
 * before it accumulates; the estimate charges it to the backward that
 * first adds into it, a weight's to its update): written once over the
 * memory bandwidth, plus a launch. */
static double zero_time(const pcgc_machine *m, double bytes) {
  return bytes / m->device.memory_bandwidth + m->device.launch_overhead;
}

/* ----------------------------------------------------- data parallel */

static const char *one_linear =
    "model one_linear\n"
    "const B = 64\n"
    "input x: f32[B, 1024]\n"
    "input t: f32[B, 1024]\n"
    "weight w: f32[1024, 1024] = uniform(0.03)\n"
    "y = linear(x, w)\n"
    "loss = mse(y, t)\n";

START_TEST(dp_one_linear_by_hand) {
  pcgc_machine m = toy_machine(4, "16 GiB");
  pcgc_graph *g = model_text(one_linear);
  pcgc_graph *pg;
  pcgc_mapping mp;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_DATA_PARALLEL, g, &m, 0, &pg, &mp, &err), PCGC_OK);
  /* the linear on one device: 16 rows of the batch */
  double F = 2.0 * 16 * 1024 * 1024, bytes = 4.0 * (16 * 1024 + 1024 * 1024 + 16 * 1024);
  double fwd = fmax(F / (10e12 * 0.7), bytes / 1e12) + 5e-6, bwd = fmax(2 * F / (10e12 * 0.7), 2 * bytes / 1e12) + 5e-6;
  pcgc_op_time lin = node_time(&m, pg, "y"), loss = node_time(&m, pg, "loss");
  close_to(lin.fwd, fwd, 1e-12);
  close_to(lin.bwd, bwd, 1e-12);
  /* ring all-reduce of the 4 MiB gradient over 4 devices (the ring beats the tree above 4αβ = 400 kB) */
  double n = 4.0 * 1024 * 1024, ar = 2 * 3 * 1e-6 + 2.0 * 3 / 4 * n / 100e9;
  close_to(pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, (pcgc_comm_group){1, 4, 1}, n), ar, 1e-12);
  double opt = adam_time(&m, 1024.0 * 1024);
  /* zeroed: y's gradient before the loss's backward adds into it, w's before the linear's; the
   * two zeroings lie a kernel apart and share one launch (codegen's hoist_zeros; the simulator
   * charges the launch to the first it makes, the linear's) */
  double zy = zero_time(&m, 4.0 * 16 * 1024) - 5e-6, zw = zero_time(&m, 4.0 * 1024 * 1024);
  close_to(zw, pcgc_cost_fill_time(&m, 4.0 * 1024 * 1024), 1e-15);
  double compute = fwd + loss.fwd + loss.bwd + zy + bwd + opt + zw;

  pcgc_sim_options o = opts();
  pcgc_sim_result r = simulate(pg, &mp, &m, &o);
  /* nothing overlaps: forward, backward, all-reduce, update, one after another */
  close_to(r.iteration_time, compute + ar, 1e-9);
  close_to(r.forward_time, fwd + loss.fwd, 1e-9);
  close_to(r.critical_path, r.iteration_time, 1e-9);
  for (int d = 0; d < 4; d++) {
    close_to(r.device[d].compute, compute, 1e-9);
    close_to(r.device[d].idle, ar, 1e-9);
  }
  ck_assert_int_eq(r.n_devices, 4);
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_FORWARD], 8);
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_BACKWARD], 8);
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_COLLECTIVE], 1);
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_OPTIMIZER], 4);
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_TRANSFER], 0);
  close_to(r.bytes_intra, 2.0 * 3 * n, 1e-12); /* ring: 2(p-1) n over the node */
  ck_assert(r.bytes_inter == 0);
  /* SGD: the same with a cheaper update */
  o.optimizer = PCGC_OPTIM_SGD;
  pcgc_sim_result s = simulate(pg, &mp, &m, &o);
  double sgd = fmax(2 * n / 4 / (10e12 * 0.5), 3 * n / 1e12) + 5e-6;
  close_to(s.iteration_time, compute - opt + sgd + ar, 1e-9);
  close_to(s.device[0].memory.optimizer, 0, 0);
  pcgc_sim_result_destroy(&s);
  pcgc_sim_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  pcgc_graph_free(g);
}
END_TEST

static const char *two_linear =
    "model two_linear\n"
    "const B = 64\n"
    "input x: f32[B, 1024]\n"
    "input t: f32[B, 1024]\n"
    "weight w1: f32[1024, 1024] = uniform(0.03)\n"
    "weight w2: f32[1024, 1024] = uniform(0.03)\n"
    "h = linear(x, w1)\n"
    "y = linear(h, w2)\n"
    "loss = mse(y, t)\n";

START_TEST(dp_overlap_by_hand) {
  pcgc_machine m = toy_machine(4, "16 GiB");
  pcgc_graph *g = model_text(two_linear);
  pcgc_graph *pg;
  pcgc_mapping mp;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_DATA_PARALLEL, g, &m, 0, &pg, &mp, &err), PCGC_OK);
  pcgc_op_time h = node_time(&m, pg, "h"), y = node_time(&m, pg, "y"), loss = node_time(&m, pg, "loss");
  double n = 4.0 * 1024 * 1024, ar = pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, (pcgc_comm_group){1, 4, 1}, n);
  /* y's and h's gradients are zeroed by the backward that first adds into them (w2's gradient
   * with h's), h's backward zeroes w1's alone; the three lie within a few kernels and share one
   * launch, which the simulator charges to the first it makes (h's, w1's alone); an update pays
   * for its gradient's zeroing by the byte */
  double u = adam_time(&m, 1024.0 * 1024) + n / 1e12, launch = 5e-6, za = zero_time(&m, 4.0 * 16 * 1024) - launch;
  double t1 = h.fwd + y.fwd + loss.fwd + loss.bwd + za + y.bwd + za; /* w2's gradient is ready */
  double compute = t1 + launch + h.bwd + 2 * u;
  ck_assert(ar > launch + h.bwd); /* so the second all-reduce waits for the link, not for h's backward */

  pcgc_sim_options o = opts();
  pcgc_sim_result r = simulate(pg, &mp, &m, &o);
  /* w2's all-reduce runs beside h's backward; w1's follows it on the link once w2's bytes are
   * through (w2's latency holds no port) */
  double lat = pcgc_comm_latency(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, (pcgc_comm_group){1, 4, 1}, ar);
  ck_assert(lat > 0 && lat < ar / 10);
  close_to(r.iteration_time, t1 + 2 * ar - lat + u, 1e-9);
  close_to(r.device[0].compute, compute, 1e-9);
  ck_assert(r.iteration_time < compute + 2 * ar);
  ck_assert(r.iteration_time >= r.critical_path);
  ck_assert(r.iteration_time >= r.compute_max);

  o.overlap = false; /* communication holds the compute streams: nothing hides */
  pcgc_sim_result s = simulate(pg, &mp, &m, &o);
  close_to(s.iteration_time, compute + 2 * ar, 1e-9);
  ck_assert(r.iteration_time < s.iteration_time);
  close_to(s.critical_path, r.critical_path, 1e-12); /* contention does not change the chains */
  pcgc_sim_result_destroy(&s);
  pcgc_sim_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  pcgc_graph_free(g);
}
END_TEST

/* --------------------------------------------------------- pipelines */

/* 4 linear stages on devices 0..3, the loss with the last; links so fast
 * that transfers take ~1e-13 s, no launch overhead. */
static pcgc_graph *pipeline_model(int m) {
  char text[2048];
  snprintf(text, sizeof text,
           "model pipe\nconst B = 512\nconst H = 2048\n"
           "input x: f32[B, H]\ninput t: f32[B, H]\n"
           "weight w0: f32[H, H] = uniform(0.02)\nweight w1: f32[H, H] = uniform(0.02)\n"
           "weight w2: f32[H, H] = uniform(0.02)\nweight w3: f32[H, H] = uniform(0.02)\n"
           "xm = pipeline(x, dim=0, degree=%d)\ntm = pipeline(t, dim=0, degree=%d)\n"
           "h0 = linear(xm, w0)\nh1 = linear(h0, w1)\nh2 = linear(h1, w2)\nh3 = linear(h2, w3)\n"
           "loss = mse(h3, tm)\n",
           m, m);
  return model_text(text);
}

/* m items through a line of n stations, each taking them in order, station k
 * busy P[k] per item: the last leaves after sum(P) + (m - 1) max(P). */
static double line_time(const double *P, int n, int m) {
  double sum = 0, most = 0;
  for (int k = 0; k < n; k++) {
    sum += P[k];
    if (P[k] > most) most = P[k];
  }
  return sum + (m - 1) * most;
}

static pcgc_mapping pipeline_mapping(const pcgc_graph *g) {
  pcgc_mapping mp;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 0}, &err), PCGC_OK);
  const char *stage[] = {"h0", "h1", "h2", "h3"};
  for (int k = 0; k < 4; k++) mp.view[node(g, stage[k])] = (pcgc_view){k, 0};
  mp.view[node(g, "loss")] = (pcgc_view){3, 0};
  return mp;
}

static const char *fast_links =
    "name fast4\nnodes 1\ndevices_per_node 4\ndevice.flops.f32 10 TFLOP/s\ndevice.memory 64 GiB\n"
    "device.memory_bandwidth 1 TB/s\nintra.bandwidth 1000000 TB/s\nintra.latency 0 us\n";

START_TEST(pipeline_gpipe_by_hand) {
  pcgc_machine mach = machine_text(fast_links);
  const int s = 4;
  int ms[] = {4, 8, 16};
  double prev_bubble = 1;
  for (int k = 0; k < 3; k++) {
    int m = ms[k];
    pcgc_graph *g = pipeline_model(m);
    pcgc_mapping mp = pipeline_mapping(g);
    pcgc_op_time st = node_time(&mach, g, "h1"), l = node_time(&mach, g, "loss");
    double u = adam_time(&mach, 2048.0 * 2048);
    for (int i = 0; i < 4; i++) { /* equal stages */
      char name[8];
      snprintf(name, sizeof name, "h%d", i);
      close_to(node_time(&mach, g, name).fwd, st.fwd, 0);
    }
    ck_assert(l.fwd < 0.03 * st.fwd);
    pcgc_sim_options o = opts();
    pcgc_sim_result r = simulate(g, &mp, &mach, &o);
    ck_assert_int_eq(r.stages, s);
    ck_assert_int_eq(r.micro_batches, m);
    ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_FORWARD], 5 * m);
    ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_TRANSFER], 2 * 3 * m); /* activations forward, gradients back */
    /* a line of s stations that take every micro-batch in turn, each station k busy P_k per
     * micro-batch, ends after sum(P) + (m-1) max(P). Forward, a stage sends a whole
     * micro-batch of h straight from its buffer (no staging copy) and the next receives it
     * in place; the last adds the loss. The last stage is the bottleneck, busy from (s-1)t
     * on: (s-1)t + m(t + l). */
    double h = 4.0 * (512 / m) * 2048;
    double ca = pcgc_cost_copy_time(&mach, h, true);
    double P[4] = {st.fwd, st.fwd, st.fwd, st.fwd + l.fwd};
    double F = line_time(P, s, m);
    close_to(r.forward_time, F, 1e-6);
    /* textbook: (m+s-1)/m of the ideal m·t, bubble fraction (s-1)/(m+s-1), with the
     * bottleneck stage's time for t (the loss adds its few %) */
    double most = P[1] > P[3] ? P[1] : P[3];
    close_to(r.forward_time / (m * most), (double)(m + s - 1) / m, 0.03);
    double bubble = 1 - m * most / r.forward_time;
    close_to(bubble, (double)(s - 1) / (m + s - 1), 0.03);
    ck_assert(bubble < prev_bubble);
    prev_bubble = bubble;
    /* GPipe backward: the loss's backward for every micro-batch, then the stages' backward
     * pipeline; each first zeroes the gradient it adds into (one micro-batch of h: the last
     * stage's own h3, every stage but the first the h it received), an update its weight's */
    double z = zero_time(&mach, 4.0 * (512 / m) * 2048), zw = zero_time(&mach, 4.0 * 2048 * 2048);
    /* the line again, from the last stage: it sends each micro-batch's gradient of h2 after
     * its backward (from its buffer), the others unpack what they receive by adding it into
     * the gradient (ca); with ca = 0, m(l.bwd + z + t + z) + (s-2)(t + z) + t */
    double Q[4] = {l.bwd + 2 * z + st.bwd, ca + st.bwd + z, ca + st.bwd + z, ca + st.bwd};
    double B = line_time(Q, s, m);
    close_to(r.iteration_time, F + B + u + zw, 1e-6);
    ck_assert(r.critical_path <= r.iteration_time);
    pcgc_sim_result_destroy(&r);
    pcgc_mapping_destroy(&mp);
    pcgc_graph_free(g);
  }
}
END_TEST

START_TEST(pipeline_1f1b) {
  pcgc_machine mach = machine_text(fast_links);
  const int s = 4, m = 8;
  pcgc_graph *g = pipeline_model(m);
  pcgc_mapping mp = pipeline_mapping(g);
  pcgc_sim_options o = opts();
  pcgc_sim_result gp = simulate(g, &mp, &mach, &o);
  o.schedule = PCGC_SCHEDULE_1F1B;
  pcgc_sim_result fb = simulate(g, &mp, &mach, &o);
  ck_assert_int_eq(fb.schedule, PCGC_SCHEDULE_1F1B);
  ck_assert_int_eq(fb.stages, s);
  /* the same work, no GPipe join; stage k holds s-k micro-batches of activations, not m */
  ck_assert_int_eq(fb.n_tasks, gp.n_tasks - 1);
  close_to(fb.task_time, gp.task_time, 1e-12);
  for (int d = 0; d < s; d++) {
    close_to(fb.device[d].memory.activations, gp.device[d].memory.activations * (s - d) / m, 1e-12);
    close_to(fb.device[d].memory.weights, gp.device[d].memory.weights, 0);
  }
  /* the bubble is the same (m+s-1 slots); the interleaving costs at most a little */
  close_to(fb.iteration_time, gp.iteration_time, 0.05);
  ck_assert(fb.iteration_time >= fb.critical_path);
  ck_assert(fb.iteration_time >= fb.compute_max);
  pcgc_sim_result_destroy(&fb);
  pcgc_sim_result_destroy(&gp);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
}
END_TEST

/* 2 stages of 3 equal linears each (h0-h2 on device 0, h3-h5 and the loss
 * on device 1): all m micro-batches of a stage's first linear are ready at
 * once, so the order in which a device takes its ready tasks decides when
 * the next stage can start. */
static pcgc_graph *pipeline_model_deep(int m) {
  char text[2048];
  int n = snprintf(text, sizeof text, "model pipe_deep\nconst B = 512\nconst H = 2048\n"
                                      "input x: f32[B, H]\ninput t: f32[B, H]\n");
  for (int i = 0; i < 6; i++) n += snprintf(text + n, sizeof text - (size_t)n, "weight w%d: f32[H, H] = uniform(0.02)\n", i);
  n += snprintf(text + n, sizeof text - (size_t)n,
                "xm = pipeline(x, dim=0, degree=%d)\ntm = pipeline(t, dim=0, degree=%d)\nh0 = linear(xm, w0)\n", m, m);
  for (int i = 1; i < 6; i++) n += snprintf(text + n, sizeof text - (size_t)n, "h%d = linear(h%d, w%d)\n", i, i - 1, i);
  snprintf(text + n, sizeof text - (size_t)n, "loss = mse(h5, tm)\n");
  return model_text(text);
}

static pcgc_mapping pipeline_mapping_deep(const pcgc_graph *g) {
  pcgc_mapping mp;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 0}, &err), PCGC_OK);
  for (int i = 0; i < 6; i++) {
    char name[8];
    snprintf(name, sizeof name, "h%d", i);
    mp.view[node(g, name)] = (pcgc_view){i / 3, 0};
  }
  mp.view[node(g, "loss")] = (pcgc_view){1, 0};
  return mp;
}

typedef struct traced {
  double ts;
  char label[16];
} traced;

static int cmp_traced(const void *a, const void *b) {
  double x = ((const traced *)a)->ts, y = ((const traced *)b)->ts;
  return (x > y) - (x < y);
}

/* The compute tasks of device `dev` in the order they start, from a Chrome
 * trace: "F<micro>:<node>" forward, "B<micro>:<node>" backward,
 * "U:<weight>" update, space-separated (staging copies left out). Caller frees. */
static char *compute_order(const char *path, int dev) {
  size_t len;
  pcgc_error err = {0};
  char *json = pcgc_read_file(path, &len, &err);
  ck_assert_msg(json != NULL, "%s", err.message);
  cJSON *root = cJSON_Parse(json), *e;
  ck_assert(root != NULL);
  int n = 0, cap = cJSON_GetArraySize(cJSON_GetObjectItem(root, "traceEvents"));
  traced *ev = malloc((size_t)(cap ? cap : 1) * sizeof *ev);
  ck_assert(ev != NULL);
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents")) {
    const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
    if (strcmp(ph, "X") != 0 || cJSON_GetNumberValue(cJSON_GetObjectItem(e, "pid")) != dev ||
        cJSON_GetNumberValue(cJSON_GetObjectItem(e, "tid")) != 0)
      continue;
    const char *cat = cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat"));
    if (strcmp(cat, "staging") == 0) continue; /* a message's copies: not the kernels' order */
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
    int mu = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "micro_batch"));
    ev[n].ts = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "ts"));
    if (strcmp(cat, "optimizer") == 0) snprintf(ev[n].label, sizeof ev[n].label, "U:%s", name);
    else snprintf(ev[n].label, sizeof ev[n].label, "%c%d:%s", strcmp(cat, "backward") == 0 ? 'B' : 'F', mu, name);
    n++;
  }
  qsort(ev, (size_t)n, sizeof *ev, cmp_traced); /* starts are distinct: one stream, positive durations */
  char *out = calloc((size_t)n * sizeof ev->label + 1, 1);
  ck_assert(out != NULL);
  for (int i = 0; i < n; i++) {
    if (i) strcat(out, " ");
    strcat(out, ev[i].label);
  }
  free(ev);
  cJSON_Delete(root);
  free(json);
  return out;
}

/* Appends micro-batch mu's forward ('F') or backward ('B') pass over
 * h<first>..h<last> (backward from last down to first) to buf. */
static void pass(char *buf, size_t size, char dir, int mu, int first, int last) {
  for (int i = 0; i <= last - first; i++) {
    size_t n = strlen(buf);
    snprintf(buf + n, size - n, "%s%c%d:h%d", n ? " " : "", dir, mu, dir == 'F' ? first + i : last - i);
  }
}

START_TEST(pipeline_several_ops_per_stage) {
  pcgc_machine mach = machine_text(fast_links);
  const int s = 2;
  int ms[] = {4, 8};
  for (int k = 0; k < 2; k++) {
    int m = ms[k];
    pcgc_graph *g = pipeline_model_deep(m);
    pcgc_mapping mp = pipeline_mapping_deep(g);
    pcgc_op_time lin = node_time(&mach, g, "h0"), l = node_time(&mach, g, "loss");
    for (int i = 1; i < 6; i++) { /* equal linears */
      char name[8];
      snprintf(name, sizeof name, "h%d", i);
      close_to(node_time(&mach, g, name).fwd, lin.fwd, 0);
      close_to(node_time(&mach, g, name).bwd, lin.bwd, 0);
    }
    double u = adam_time(&mach, 2048.0 * 2048);
    double Tf = 3 * lin.fwd, Tb = 3 * lin.bwd; /* one micro-batch through one stage */
    /* by hand: stage 1 (the loss's stage, the slower by l) is busy from the
     * moment micro-batch 0 leaves stage 0 (Tf) to its last backward, m(Tf +
     * l.fwd + l.bwd + Tb) later; stage 0 then runs the last backward (Tb)
     * and its three updates. GPipe and 1F1B both keep stage 1 busy, so this
     * holds for both: (m + s - 1)(Tf + Tb), the textbook pipeline, plus the
     * loss on the bottleneck stage and the updates at the end. Every message
     * is a whole piece, sent straight from its buffer; stage 1 receives each
     * micro-batch's h2 in place, and stage 0 unpacks the last gradient by
     * adding it in (ca) before its last backward. */
    double hb = 4.0 * (512 / m) * 2048;
    double ca = pcgc_cost_copy_time(&mach, hb, true);
    double want = (m + s - 1) * (Tf + Tb) + m * (l.fwd + l.bwd) + 3 * u + ca;
    /* and the zeroing of gradients (a micro-batch of h, z, before the
     * backward that first adds into it): on stage 1 those of h5, h4, h3 and
     * the received h2 every micro-batch, on stage 0 those of h1 and h0 in the
     * last backward; each update zeroes its weight's (zw) */
    double z = zero_time(&mach, 4.0 * (512 / m) * 2048), zw = zero_time(&mach, 4.0 * 2048 * 2048);
    double zeroing = m * 4 * z + 2 * z + 3 * zw;
    /* What the discipline before this one (first come, first served) gave
     * under GPipe, at best: it ran a stage op by op (every micro-batch of
     * h0 is ready at 0, so all of them, then h1's, then h2's), so stage 1
     * could start only when h2's micro-batch 0 ended, (2m + 1) forwards in;
     * it then ran all its work, op by op as well, ending on h3's backward of
     * the last micro-batch, after which stage 0 still ran h2..h0 backward
     * and at least w0's update. */
    double op_major = (2 * m + 1) * lin.fwd + m * (Tf + Tb + l.fwd + l.bwd) + Tb + u;
    ck_assert(want < op_major);
    /* the loss is under 1% of a stage's micro-batch: iteration minus the
     * updates is the textbook (m + s - 1)(Tf + Tb) to within 1% */
    ck_assert(l.fwd + l.bwd < 0.01 * (Tf + Tb));
    for (int f1b = 0; f1b < 2; f1b++) {
      char path[] = "/tmp/pcgc-pipe-XXXXXX";
      int fd = mkstemp(path);
      ck_assert(fd >= 0);
      close(fd);
      pcgc_sim_options o = opts();
      o.schedule = f1b ? PCGC_SCHEDULE_1F1B : PCGC_SCHEDULE_GPIPE;
      o.trace_path = path;
      pcgc_sim_result r = simulate(g, &mp, &mach, &o);
      ck_assert_int_eq(r.stages, s);
      ck_assert_int_eq(r.micro_batches, m);
      close_to(r.iteration_time, want + zeroing, 1e-6); /* transfers take ~1e-13 s, their staging not */
      close_to(r.iteration_time - 3 * u - zeroing, (m + s - 1) * (Tf + Tb), 0.01);
      if (!f1b) { /* the forward pass: stage 0 fills in Tf, stage 1 (with the loss) then runs every micro-batch */
        close_to(r.forward_time, Tf + m * (Tf + l.fwd), 1e-6);
        ck_assert(r.iteration_time < op_major);
      }
      check_bounds(f1b ? "deep pipeline, 1f1b" : "deep pipeline, gpipe", &r);

      /* stage 0 takes one micro-batch through all its linears at a time.
       * GPipe: every forward micro-batch, then every backward one in order.
       * 1F1B: at most s - 0 = 2 micro-batches in flight; a forward the
       * limit allows goes before a backward. Updates last, as their
       * gradients complete (h2's first, h0's last). */
      char want_order[1024] = "";
      if (!f1b) {
        for (int mu = 0; mu < m; mu++) pass(want_order, sizeof want_order, 'F', mu, 0, 2);
        for (int mu = 0; mu < m; mu++) pass(want_order, sizeof want_order, 'B', mu, 0, 2);
      } else {
        pass(want_order, sizeof want_order, 'F', 0, 0, 2);
        for (int mu = 1; mu < m; mu++) {
          pass(want_order, sizeof want_order, 'F', mu, 0, 2);
          pass(want_order, sizeof want_order, 'B', mu - 1, 0, 2);
        }
        pass(want_order, sizeof want_order, 'B', m - 1, 0, 2);
      }
      strcat(want_order, " U:w2 U:w1 U:w0");
      char *got = compute_order(path, 0);
      ck_assert_msg(strcmp(got, want_order) == 0, "m=%d %s, device 0 ran\n  %s\nwant\n  %s", m,
                    f1b ? "1f1b" : "gpipe", got, want_order);
      free(got);
      remove(path);
      pcgc_sim_result_destroy(&r);
    }
    pcgc_mapping_destroy(&mp);
    pcgc_graph_free(g);
  }
}
END_TEST

/* -------------------------------------------------------- sequential */

START_TEST(sequential_is_the_sum_of_its_tasks) {
  const char *models[] = {"models/mlp.pcg", "models/cnn.pcg", "models/transformer-block.pcg"};
  pcgc_machine m = preset("dgx-h100");
  for (int k = 0; k < 3; k++) {
    pcgc_graph *g = model_file(models[k], NULL);
    double want = 0;
    /* carries[i]: node i's output has a gradient (a weight, or computed from
     * one); zeroed[i]: that gradient was zeroed already (once a step, before
     * the first backward that adds into it) */
    bool *carries = calloc((size_t)g->n_nodes, sizeof *carries), *zeroed = calloc((size_t)g->n_nodes, sizeof *zeroed);
    ck_assert(carries && zeroed);
    int since = 1 << 20; /* backward kernels since the last zeroing that paid a launch (none yet) */
    double far = 0;      /* bytes of the zeroings that shared it from farther than PCGC_ZERO_HOIST */
    for (int i = 0; i < g->n_nodes; i++) {
      const pcgc_node *x = &g->nodes[i];
      pcgc_op_class c = pcgc_op_class_of(x->kind);
      if (c == PCGC_CLASS_COMPUTE || c == PCGC_CLASS_LOSS) {
        pcgc_op_time t = node_time(&m, g, x->name);
        bool grad = false; /* backward where a weight's gradient flows through */
        for (int j = 0; j < x->n_in; j++) {
          const pcgc_node *in = &g->nodes[x->in[j].node];
          grad |= in->kind == PCGC_OP_WEIGHT || pcgc_op_class_of(in->kind) == PCGC_CLASS_COMPUTE;
          carries[i] |= carries[x->in[j].node];
        }
        carries[i] &= pcgc_dtype_is_float(x->out[0].dtype);
        want += t.fwd + (grad ? t.bwd : 0);
        /* one launch zeroes what the backward adds into: its inputs' gradients not zeroed yet,
         * and its weights' (their bytes are the updates') */
        double zb = 0, wb = 0;
        bool weights = false;
        for (int j = 0; grad && j < x->n_in; j++) {
          const pcgc_node *in = &g->nodes[x->in[j].node];
          bool w = in->kind == PCGC_OP_WEIGHT && pcgc_dtype_is_float(in->out[0].dtype);
          weights |= w;
          if (w) wb += 4.0 * (double)pcgc_ptensor_numel(&in->out[0]);
          if (in->kind == PCGC_OP_WEIGHT || !carries[in->id] || zeroed[in->id]) continue;
          zeroed[in->id] = true;
          zb += 4.0 * (double)pcgc_ptensor_numel(&in->out[x->in[j].slot]);
        }
        /* a zeroing within PCGC_ZERO_HOIST backward kernels of the last that paid a launch shares
         * it; from farther too while the bytes so shared (weights' gradients included) stay
         * within PCGC_ZERO_HOIST_BYTES */
        double z = zb > 0 ? zero_time(&m, zb) : weights ? m.device.launch_overhead : 0;
        bool beyond = since > PCGC_ZERO_HOIST, first = since >= 1 << 19;
        if (z > 0 && !first && (!beyond || far + zb + wb <= PCGC_ZERO_HOIST_BYTES)) {
          z -= m.device.launch_overhead;
          if (beyond) far += zb + wb;
        } else if (z > 0) {
          since = 0;
          far = 0;
        }
        since += grad;
        want += z;
      } else if (x->kind == PCGC_OP_WEIGHT) {
        carries[i] = pcgc_dtype_is_float(x->out[0].dtype);
        double n = (double)pcgc_ptensor_numel(&x->out[0]);
        want += adam_time(&m, n) + 4.0 * n / m.device.memory_bandwidth;
      }
    }
    free(carries);
    free(zeroed);
    pcgc_sim_result r = baseline(g, PCGC_STRATEGY_SEQUENTIAL, &m, 0, NULL);
    close_to(r.iteration_time, want, 1e-9);
    close_to(r.task_time, want, 1e-9);
    close_to(r.device[0].compute, want, 1e-9);
    close_to(r.device[0].idle, 0, 0);
    ck_assert_int_eq(r.n_devices, 8);
    ck_assert_int_eq(r.used_devices, 1); /* the summaries are over device 0 alone */
    close_to(r.compute_min, want, 1e-9);
    for (int d = 1; d < r.n_devices; d++) ck_assert(r.device[d].compute == 0 && r.device[d].memory.total == 0);
    ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_TRANSFER] + r.tasks_by_kind[PCGC_TASK_COLLECTIVE], 0);
    ck_assert(r.bytes_intra == 0 && r.bytes_inter == 0);
    pcgc_sim_result_destroy(&r);
    pcgc_graph_free(g);
  }
}
END_TEST

/* Activation recomputation on one device, by hand from the units: the
 * iteration takes the recomputed kernels' forward time more, and their
 * outputs count once, for the largest unit, instead of all together. */
START_TEST(recompute_by_hand) {
  const char *models[] = {"models/mlp.pcg", "models/cnn.pcg", "models/transformer-block.pcg"};
  pcgc_machine m = preset("dgx-h100");
  for (int k = 0; k < 3; k++) {
    pcgc_graph *g = model_file(models[k], NULL), *pg;
    pcgc_mapping mp;
    pcgc_error err = {0};
    ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_SEQUENTIAL, g, &m, 0, &pg, &mp, &err), PCGC_OK);
    int n_units = 0;
    bool *ckpt = NULL;
    int *unit = pcgc_checkpoint_units(pg, &n_units, &ckpt);
    ck_assert_ptr_nonnull(unit);
    /* the MLP's 5 computed nodes make one unit of sqrt(5) rounded up: all
     * recomputed, at once, for no memory saved */
    ck_assert_msg(k == 0 ? n_units == 1 : n_units >= 2, "%s: %d units", models[k], n_units);
    double dt = 0, dropped = 0, *work = calloc((size_t)n_units, sizeof *work);
    int recomputed = 0;
    for (int i = 0; i < pg->n_nodes; i++) {
      const pcgc_node *x = &pg->nodes[i];
      if (!pcgc_cost_efficiency(x->kind)->kernel || pcgc_op_class_of(x->kind) == PCGC_CLASS_LOSS) continue;
      if (unit[i] < 0 || ckpt[i]) continue;
      double bytes = 0;
      for (int j = 0; j < x->n_out; j++) bytes += pcgc_cost_piece_bytes(&x->out[j]);
      bool grad = false;
      for (int j = 0; j < x->n_in; j++) {
        const pcgc_node *in = &pg->nodes[x->in[j].node];
        grad |= in->kind == PCGC_OP_WEIGHT || pcgc_op_class_of(in->kind) == PCGC_CLASS_COMPUTE;
      }
      if (grad) dt += node_time(&m, pg, x->name).fwd;
      dropped += bytes;
      work[unit[i]] += bytes;
      recomputed++;
    }
    ck_assert_msg(recomputed > 0, "%s: nothing recomputed", models[k]);
    double wmax = 0;
    for (int u = 0; u < n_units; u++) wmax = work[u] > wmax ? work[u] : wmax;
    pcgc_sim_options o = opts();
    pcgc_sim_result r0 = simulate(pg, &mp, &m, &o);
    o.recompute = true;
    pcgc_sim_result r1 = simulate(pg, &mp, &m, &o);
    ck_assert(r1.recompute && !r0.recompute);
    close_to(r1.iteration_time, r0.iteration_time + dt, 1e-9);
    close_to(r1.device[0].memory.activations, r0.device[0].memory.activations - dropped + wmax, 1e-9);
    if (n_units >= 2) ck_assert(r1.device[0].memory.activations < r0.device[0].memory.activations);
    pcgc_sim_result_destroy(&r0);
    pcgc_sim_result_destroy(&r1);
    free(work);
    free(unit);
    free(ckpt);
    pcgc_mapping_destroy(&mp);
    pcgc_graph_free(pg);
    pcgc_graph_free(g);
  }
}
END_TEST

/* ------------------------------------------------------------ bounds */

START_TEST(bounds_on_parallel_graphs) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/tests/data/parallel", PCGC_SOURCE_DIR);
  DIR *dp = opendir(dir);
  ck_assert(dp != NULL);
  pcgc_machine m = preset("dgx-h100");
  int count = 0;
  struct dirent *e;
  while ((e = readdir(dp)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".pcg") != 0) continue;
    char rel[512];
    snprintf(rel, sizeof rel, "tests/data/parallel/%s", e->d_name);
    pcgc_graph *g = model_file(rel, NULL);
    pcgc_mapping mp;
    pcgc_error err = {0};
    ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 1}, &err), PCGC_OK);
    for (int v = 0; v < 4; v++) {
      pcgc_sim_options o = opts();
      o.overlap = v & 1;
      o.schedule = v & 2 ? PCGC_SCHEDULE_1F1B : PCGC_SCHEDULE_GPIPE;
      pcgc_sim_result r = simulate(g, &mp, &m, &o);
      check_bounds(e->d_name, &r);
      pcgc_sim_result_destroy(&r);
    }
    pcgc_mapping_destroy(&mp);
    pcgc_graph_free(g);
    count++;
  }
  closedir(dp);
  ck_assert_int_ge(count, 15);
}
END_TEST

START_TEST(bounds_on_baselines) {
  struct {
    const char *model, *batch, *machine;
  } cases[] = {
      {"models/mlp.pcg", "64", "dgx-h100"},          {"models/cnn.pcg", "32", "dgx-h100"},
      {"models/transformer-block.pcg", "64", "h100-4x8"}, {"models/mlp.pcg", "192", "summit-v100"},
      {"models/bert-large.pcg", "16", "dgx-h100"},   {"models/cnn.pcg", "64", "k80-16x4"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    pcgc_graph *g = model_file(cases[k].model, cases[k].batch);
    pcgc_machine m = preset(cases[k].machine);
    pcgc_sim_options o = opts();
    pcgc_sim_result seq = baseline(g, PCGC_STRATEGY_SEQUENTIAL, &m, 0, &o);
    pcgc_sim_result dp = baseline(g, PCGC_STRATEGY_DATA_PARALLEL, &m, 0, &o);
    o.overlap = false;
    pcgc_sim_result dp_serial = baseline(g, PCGC_STRATEGY_DATA_PARALLEL, &m, 0, &o);
    check_bounds(cases[k].model, &seq);
    check_bounds(cases[k].model, &dp);
    check_bounds(cases[k].model, &dp_serial);
    ck_assert_msg(dp.iteration_time <= dp_serial.iteration_time, "%s on %s: overlap made it slower", cases[k].model,
                  cases[k].machine);
    /* every device does 1/N of the forward and backward work, plus a whole update */
    ck_assert(dp.compute_max < seq.compute_max);
    close_to(dp.compute_min, dp.compute_max, 1e-9);
    ck_assert_int_eq(dp.used_devices, pcgc_machine_num_devices(&m));
    ck_assert_int_eq(dp.tasks_by_kind[PCGC_TASK_TRANSFER], 0);
    ck_assert(m.nodes == 1 ? dp.bytes_inter == 0 : dp.bytes_inter > 0);
    pcgc_sim_result_destroy(&seq);
    pcgc_sim_result_destroy(&dp);
    pcgc_sim_result_destroy(&dp_serial);
    pcgc_graph_free(g);
  }
}
END_TEST

/* ------------------------------------------------- parallel operators */

/* a data-parallel linear on devices 0-1 (by their views), combined, split
 * by columns over 4, combined again; the loss comes after */
#define RELAYOUT_CHAIN                                                                     \
  "model relayout\n"                                                                      \
  "input x: f32[8, 16]\ninput t: f32[8, 32]\n"                                            \
  "weight w: f32[16, 32] = uniform(0.2)\n"                                                \
  "xp = partition(x, dim=0, degree=2)\nwr = replicate(w, degree=2)\n"                     \
  "h = linear(xp, wr)\n"                                                                  \
  "r = combine(h, dim=0, degree=2)\n"                                                     \
  "p = partition(r, dim=1, degree=4)\n"                                                   \
  "a = relu(p)\n"                                                                         \
  "c = combine(a, dim=1, degree=4)\n"

/* A device with two forward tasks ready at once starts the one with the
 * longer path to the step's end: b feeds a chain of three relus on device
 * 1, a only the loss. Declared first or second, b goes first, so the step
 * takes as long either way; in declaration order (as before) a first
 * delayed device 1's chain by a's time. */
START_TEST(longest_path_first) {
  pcgc_machine m = toy_machine(2, "16 GiB");
  double step[2], a_fwd = 0;
  for (int k = 0; k < 2; k++) {
    char text[1024];
    snprintf(text, sizeof text,
             "model lrp\ninput x: f32[256, 4096]\ninput y: f32[256, 4096]\ninput t: f32[256, 4096]\n"
             "%s\n%s\nc = relu(b)\nd = relu(c)\ne = relu(d)\ns = add(a, e)\nloss = mse(s, t)\n",
             k ? "b = relu(y)" : "a = relu(x)", k ? "a = relu(x)" : "b = relu(y)");
    pcgc_graph *g = model_text(text);
    pcgc_mapping mp;
    pcgc_error err = {0};
    ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 0}, &err), PCGC_OK);
    mp.view[node(g, "c")] = mp.view[node(g, "d")] = mp.view[node(g, "e")] = (pcgc_view){1, 0};
    pcgc_sim_result r = simulate(g, &mp, &m, NULL);
    step[k] = r.iteration_time;
    a_fwd = node_time(&m, g, "a").fwd;
    pcgc_sim_result_destroy(&r);
    pcgc_mapping_destroy(&mp);
    pcgc_graph_free(g);
  }
  printf("longest path first: step %g s declared first, %g s second (a's forward %g s)\n", step[0], step[1], a_fwd);
  close_to(step[0], step[1], 1e-12);
}
END_TEST

START_TEST(relayout_transfers) {
  /* a data-parallel linear on devices 0-1, combined on device 2, split by
   * columns over 0-3, combined again on device 0 */
  pcgc_graph *g = model_text(RELAYOUT_CHAIN
                             "loss = mse(c, t)\n");
  pcgc_machine m = toy_machine(4, "16 GiB");
  pcgc_mapping mp;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 1}, &err), PCGC_OK);
  mp.view[node(g, "r")] = (pcgc_view){2, 0};
  mp.view[node(g, "c")] = (pcgc_view){0, 0};
  mp.view[node(g, "loss")] = (pcgc_view){0, 0};
  pcgc_sim_result r = simulate(g, &mp, &m, NULL);
  /* forward: 2 halves of h (512 B) to device 2; 3 column quarters of r (256 B) to 0, 1, 3; 3 of a back to 0.
   * backward: the same in reverse. w is all-reduced between devices 0 and 1. */
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_TRANSFER], 16);
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_COLLECTIVE], 1);
  close_to(r.bytes_intra, 2 * (2 * 512.0 + 6 * 256.0) + 2 * 1 * 16 * 32 * 4.0, 1e-12);
  /* device 2 receives both halves of h and computes a's third quarter (its quarter of r is a view) */
  close_to(r.device[2].memory.activations, 2 * 512.0 + 256.0, 1e-12);
  /* device 1 keeps its half of x and of h, a received quarter of r, its quarter of a */
  close_to(r.device[1].memory.activations, 4 * 16 * 4.0 + 512.0 + 256.0 + 256.0, 1e-12);
  check_bounds("relayout", &r);
  pcgc_sim_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
}
END_TEST

/* Device 0 hands three column quarters of a tensor to devices 1-3: not
 * runs of its piece, its three messages pack into staging with one launch
 * (the first pays it, the others their bytes), and they queue on its out
 * port for their bytes alone, their latencies overlapping (codegen's packed
 * SENDs, the program's messages). Messages whose bytes take less than their
 * latency slip in: all three leave at once. (Row quarters would go straight
 * from the piece, unstaged.) */
START_TEST(scatter_packs_and_overlaps) {
  for (int big = 1; big >= 0; big--) {
    int w = big ? 65536 : 1024; /* a quarter: 512 KiB, 5.2 us at 100 GB/s; or 8 KiB, 82 ns (latency 1 us) */
    char text[512];
    snprintf(text, sizeof text,
             "model scatter\ninput x: f32[8, %d]\ninput t: f32[8, %d]\n"
             "h = relu(x)\np = partition(h, dim=1, degree=4)\na = relu(p)\n"
             "c = combine(a, dim=1, degree=4)\nloss = mse(c, t)\n", w, w);
    pcgc_graph *g = model_text(text);
    pcgc_machine m = toy_machine(4, "16 GiB");
    pcgc_mapping mp;
    pcgc_error err = {0};
    ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 0}, &err), PCGC_OK);
    mp.view[node(g, "p")] = mp.view[node(g, "a")] = (pcgc_view){0, 1};
    char path[] = "/tmp/pcgc-scatter-XXXXXX";
    pcgc_sim_result r = simulate_traced(g, &mp, &m, path);
    size_t len = 0;
    char *json = pcgc_read_file(path, &len, &err);
    ck_assert_msg(json != NULL, "%s", err.message);
    cJSON *root = cJSON_Parse(json), *e;
    ck_assert(root != NULL);
    double bytes = 2 * w * 4.0, stage[4] = {0}, sent[4] = {0};
    int n_stage = 0, n_sent = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents")) {
      const char *cat = cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat")), *name = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
      if (!cat || !name || cJSON_GetNumberValue(cJSON_GetObjectItem(e, "pid")) != 0) continue;
      double ts = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "ts")) * 1e-6, dur = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "dur")) * 1e-6;
      if (strcmp(cat, "staging") == 0 && strcmp(name, "p") == 0 && n_stage < 4) stage[n_stage++] = dur;
      if (strcmp(cat, "transfer") == 0 && strncmp(name, "send p -> ", 10) == 0 && n_sent < 4) sent[n_sent++] = ts;
    }
    ck_assert_int_eq(n_stage, 3);
    ck_assert_int_eq(n_sent, 3);
    close_to(stage[0], pcgc_cost_copy_time(&m, bytes, false), 1e-9);
    close_to(stage[1], pcgc_cost_copy_time(&m, bytes, false) - 5e-6, 1e-9);
    close_to(stage[2], pcgc_cost_copy_time(&m, bytes, false) - 5e-6, 1e-9);
    /* each leaves once the one before has held the port for its bytes (not its 1 us latency) */
    for (int i = 0; i < 3 && big; i++)
      for (int j = 0; j < 3; j++)
        if (sent[j] > sent[i]) ck_assert_msg(sent[j] - sent[i] >= bytes / 100e9 * (1 - 1e-9), "%g %g", sent[i], sent[j]);
    double first = fmin(sent[0], fmin(sent[1], sent[2])), last = fmax(sent[0], fmax(sent[1], sent[2]));
    if (big) close_to(last - first, 2 * bytes / 100e9, 1e-9);
    else /* latency-bound: each leaves as its staging ends, not waiting for the port */
      close_to(last - first, stage[1] + stage[2], 1e-9);
    cJSON_Delete(root);
    free(json);
    remove(path);
    pcgc_sim_result_destroy(&r);
    pcgc_mapping_destroy(&mp);
    pcgc_graph_free(g);
  }
}
END_TEST

/* A relayout that is its input's only reader sets its input's gradient
 * (no zeroing, no adding); one whose input has another reader adds. */
START_TEST(relayout_gradient_set_where_alone) {
  pcgc_graph *g = model_text(RELAYOUT_CHAIN
                             "q = partition(c, dim=0, degree=2)\n"
                             "b = relu(q)\n"
                             "e = add(c, c)\n"
                             "bc = combine(b, dim=0, degree=2)\n"
                             "s = add(bc, e)\n"
                             "loss = mse(s, t)\n");
  ck_assert(pcgc_relayout_grad_sets(g, &g->nodes[node(g, "r")]));
  ck_assert(pcgc_relayout_grad_sets(g, &g->nodes[node(g, "p")]));
  ck_assert(pcgc_relayout_grad_sets(g, &g->nodes[node(g, "bc")]));
  ck_assert(!pcgc_relayout_grad_sets(g, &g->nodes[node(g, "q")])); /* c is also read (twice) by e */
  ck_assert(pcgc_relayout_grad_sets(g, &g->nodes[node(g, "c")]));
  ck_assert(!pcgc_relayout_grad_sets(g, &g->nodes[node(g, "h")])); /* not a relayout */
  pcgc_graph_free(g);
}
END_TEST

START_TEST(replicate_and_reduce_collectives) {
  pcgc_machine m = toy_machine(4, "16 GiB");
  pcgc_error err = {0};
  /* an activation on device 0 copied to 4 devices: a broadcast; its gradient comes back by a reduce */
  pcgc_graph *g = model_text("model bcast\n"
                             "input x: f32[64, 256]\ninput t: f32[64, 256]\n"
                             "weight w: f32[256, 256] = uniform(0.1)\n"
                             "h = linear(x, w)\n"
                             "hr = replicate(h, degree=4)\ntr = replicate(t, degree=4)\n"
                             "a = relu(hr)\n"
                             "loss = mse(a, tr)\n");
  pcgc_mapping mp;
  ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 1}, &err), PCGC_OK);
  pcgc_sim_result r = simulate(g, &mp, &m, NULL);
  double n = 64 * 256 * 4.0;
  pcgc_comm_group all = {1, 4, 1};
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_COLLECTIVE], 2);
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_TRANSFER], 0);
  /* each holds its members' streams while they stage the box in and out again, as the program's do */
  double bc = pcgc_comm_time(&m, PCGC_COLL_BROADCAST, PCGC_ALGO_AUTO, all, n) + 2 * pcgc_cost_copy_time(&m, n, false);
  double red = pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, all, n) + 2 * pcgc_cost_copy_time(&m, n, false);
  pcgc_op_time h = node_time(&m, g, "h"), a = node_time(&m, g, "a"), l = node_time(&m, g, "loss");
  close_to(r.forward_time, h.fwd + bc + a.fwd + l.fwd, 1e-9);
  /* the backward of the loss and of a each zero the gradient they add into (a's, hr's copy:
   * n bytes on every device), a kernel apart: one launch, charged to a's (the first made); the
   * update zeroes w's */
  close_to(r.iteration_time, h.fwd + bc + a.fwd + l.fwd + l.bwd + zero_time(&m, n) - 5e-6 + a.bwd + zero_time(&m, n) +
           red + h.bwd + adam_time(&m, 256 * 256) + zero_time(&m, 256 * 256 * 4.0), 1e-9);
  close_to(r.bytes_intra, 3 * n + 2 * 3 * n, 1e-12); /* broadcast (p-1)n, reduce as all-reduce 2(p-1)n */
  pcgc_sim_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);

  /* partial sums on 4 devices reduced onto device 0: one reduce collective, the gradient back by broadcast */
  g = model_text("model red4\n"
                 "input x: f32[64, 256]\ninput t: f32[64, 128]\n"
                 "weight w: f32[256, 128] = uniform(0.1)\n"
                 "xk = partition(x, dim=1, degree=4)\nwk = partition(w, dim=0, degree=4)\n"
                 "p = linear(xk, wk)\n"
                 "s = reduce(p, degree=4)\n"
                 "loss = mse(s, t)\n");
  ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 1}, &err), PCGC_OK);
  r = simulate(g, &mp, &m, NULL);
  n = 64 * 128 * 4.0;
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_COLLECTIVE], 2);
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_ADD], 0);
  pcgc_op_time p = node_time(&m, g, "p");
  l = node_time(&m, g, "loss");
  red = pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, all, n) + 2 * pcgc_cost_copy_time(&m, n, false);
  bc = pcgc_comm_time(&m, PCGC_COLL_BROADCAST, PCGC_ALGO_AUTO, all, n) + 2 * pcgc_cost_copy_time(&m, n, false);
  close_to(r.forward_time, p.fwd + red + l.fwd, 1e-9);
  /* each device updates its quarter of w: no all-reduce; on device 0 the loss's zeroing of s's
   * gradient and p's of its quarter of w's (the last term) lie a kernel apart: one launch */
  close_to(r.iteration_time, p.fwd + red + l.fwd + l.bwd + zero_time(&m, n) - 5e-6 + bc + p.bwd +
           adam_time(&m, 64 * 128) + zero_time(&m, 64 * 128 * 4.0), 1e-9);
  for (int d = 0; d < 4; d++) close_to(r.device[d].memory.weights, 64 * 128 * 4.0, 0);
  pcgc_sim_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(reduce_point_to_point) {
  /* Megatron's MLP (mlp-tp2): two partial sums on devices 0 and 1, reduced on device 0 */
  pcgc_graph *g = model_file("tests/data/parallel/mlp-tp2.pcg", NULL);
  pcgc_machine m = toy_machine(2, "16 GiB");
  pcgc_mapping mp;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 1}, &err), PCGC_OK);
  pcgc_sim_result r = simulate(g, &mp, &m, NULL);
  double n = 8 * 32 * 4.0;
  /* device 1's partial sum comes over (1 transfer), an add sums the two; the gradient goes back (1 transfer) */
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_TRANSFER], 2);
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_ADD], 1);
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_COLLECTIVE], 0); /* every weight piece lives on one device */
  close_to(r.bytes_intra, 2 * n, 1e-12);
  /* staging as codegen's program holds it: the largest message a device receives (device 1
   * the sum's gradient, device 0 the partial sum); what each sends, a whole piece (the
   * partial sum, the gradient), goes straight from its buffer, unstaged */
  ck_assert(r.device[1].memory.comm == n);
  ck_assert(r.device[0].memory.comm == n);
  pcgc_sim_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------ memory */

START_TEST(dp_memory) {
  pcgc_graph *g = model_file("models/mlp.pcg", "64");
  pcgc_machine m = preset("dgx-h100");
  pcgc_sim_result seq = baseline(g, PCGC_STRATEGY_SEQUENTIAL, &m, 0, NULL);
  pcgc_sim_result dp = baseline(g, PCGC_STRATEGY_DATA_PARALLEL, &m, 0, NULL);
  pcgc_graph_stats st;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_graph_stats_compute(g, &st, &err), PCGC_OK);
  const pcgc_memory *s = &seq.device[0].memory;
  close_to(s->weights, st.param_bytes, 0);
  close_to(s->gradients, st.param_bytes, 0);
  close_to(s->optimizer, 2 * st.param_bytes, 0); /* Adam */
  ck_assert(s->workspace > 0);
  for (int d = 0; d < 8; d++) {
    const pcgc_memory *x = &dp.device[d].memory;
    close_to(x->weights, s->weights, 0);
    close_to(x->gradients, s->gradients, 0);
    close_to(x->optimizer, s->optimizer, 0);
    close_to(x->activations, s->activations / 8, 1e-12);
    close_to(x->comm, 0, 0); /* all-reduces work in place */
    /* the backward piece holding the most gradients: an eighth of the batch */
    close_to(x->workspace, s->workspace / 8, 1e-12);
    close_to(x->total, x->weights + x->gradients + x->optimizer + s->activations / 8 + s->workspace / 8, 1e-12);
    ck_assert(!dp.device[d].oom);
  }
  close_to(dp.capacity, 79.0 * 1024 * 1024 * 1024, 0);
  ck_assert_int_eq(dp.oom_devices, 0);
  pcgc_sim_result_destroy(&seq);
  pcgc_sim_result_destroy(&dp);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(out_of_memory) {
  pcgc_graph *g = model_file("models/bert-large.pcg", "8");
  /* 335 M parameters with Adam need 5 GiB before any activation: not on a 4 GiB device */
  pcgc_machine small = toy_machine(1, "4 GiB");
  pcgc_sim_result r = baseline(g, PCGC_STRATEGY_SEQUENTIAL, &small, 0, NULL);
  ck_assert_int_eq(r.oom_devices, 1);
  ck_assert(r.device[0].oom);
  ck_assert(r.device[0].memory.total > 4.0 * 1024 * 1024 * 1024);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  pcgc_sim_report(f, &r, &small, "bert_large: sequential");
  fclose(f);
  ck_assert_msg(strstr(text, "OUT OF MEMORY  1 of 1 device need more than 4 GiB"), "%s", text);
  free(text);
  pcgc_sim_result_destroy(&r);
  /* with SGD and a 16 GiB device it fits */
  pcgc_machine big = toy_machine(1, "16 GiB");
  pcgc_sim_options o = opts();
  o.optimizer = PCGC_OPTIM_SGD;
  r = baseline(g, PCGC_STRATEGY_SEQUENTIAL, &big, 0, &o);
  ck_assert_int_eq(r.oom_devices, 0);
  pcgc_sim_result_destroy(&r);
  pcgc_graph_free(g);
}
END_TEST

/* A search's bound (options.give_up_after): below the iteration time the
 * event loop stops there (infinite time, gave_up, memory complete); below
 * the busiest device's own work the build stops first (stopped_building,
 * fewer tasks made); at or above the iteration time the result is the
 * unbounded one. */
START_TEST(give_up_after_the_bound) {
  pcgc_graph *g = model_file("models/transformer-block.pcg", NULL);
  pcgc_machine m = preset("p100-4x4"); /* slow links: the step ends on the gradient all-reduces */
  pcgc_sim_options o = opts();
  pcgc_sim_result full = baseline(g, PCGC_STRATEGY_DATA_PARALLEL, &m, 8, &o);
  ck_assert(isfinite(full.iteration_time) && full.iteration_time > 0 && !full.gave_up);
  ck_assert(full.compute_max < 0.9 * full.iteration_time);
  o.give_up_after = 0.5 * (full.compute_max + full.iteration_time);
  pcgc_sim_result cut = baseline(g, PCGC_STRATEGY_DATA_PARALLEL, &m, 8, &o);
  ck_assert(cut.gave_up && !cut.stopped_building && isinf(cut.iteration_time));
  ck_assert(cut.critical_path < full.iteration_time); /* the loop stopped early */
  ck_assert_int_eq(cut.n_tasks, full.n_tasks);
  for (int d = 0; d < m.nodes * m.devices_per_node; d++)
    ck_assert(cut.device[d].memory.total == full.device[d].memory.total);
  pcgc_sim_result_destroy(&cut);
  o.give_up_after = 0.5 * full.compute_max;
  cut = baseline(g, PCGC_STRATEGY_DATA_PARALLEL, &m, 8, &o);
  ck_assert(cut.gave_up && cut.stopped_building && isinf(cut.iteration_time));
  ck_assert_int_lt(cut.n_tasks, full.n_tasks);
  ck_assert(cut.critical_path > o.give_up_after && cut.critical_path <= full.compute_max);
  ck_assert_int_eq(cut.oom_devices, 0);
  pcgc_sim_result_destroy(&cut);
  o.give_up_after = full.iteration_time;
  cut = baseline(g, PCGC_STRATEGY_DATA_PARALLEL, &m, 8, &o);
  ck_assert(!cut.gave_up && cut.iteration_time == full.iteration_time && cut.task_time == full.task_time);
  pcgc_sim_result_destroy(&cut);
  pcgc_sim_result_destroy(&full);
  pcgc_graph_free(g);
}
END_TEST

/* -------------------------------------------------------- piece maps */

static void check_piece_maps(const char *what, const pcgc_graph *g) {
  pcgc_piece_map pm = {0};
  for (int i = 0; i < g->n_nodes; i++) {
    const pcgc_node *x = &g->nodes[i];
    pcgc_op_class c = pcgc_op_class_of(x->kind);
    if (c != PCGC_CLASS_COMPUTE && c != PCGC_CLASS_LOSS) continue;
    pcgc_ptensor tin[PCGC_VARIADIC];
    for (int k = 0; k < x->n_in; k++) tin[k] = *pcgc_graph_ref_type(g, x->in[k]);
    ck_assert_msg(pcgc_piece_map_build(&pm, x, tin, true), "%s: %s: no closed form", what, x->name);
    int64_t P = pcgc_ptensor_pieces(&x->out[0]), want[PCGC_VARIADIC], got[PCGC_VARIADIC];
    for (int64_t p = 0; p < P; p++) {
      pcgc_error err = {0};
      ck_assert_int_eq(pcgc_op_piece_inputs(x->kind, x->attrs, x->n_in, tin, &x->out[0], p, want, &err), PCGC_OK);
      pcgc_piece_map_apply(&pm, x, p, got);
      for (int k = 0; k < x->n_in; k++)
        ck_assert_msg(got[k] == want[k], "%s: %s piece %lld input %d: %lld, want %lld", what, x->name, (long long)p,
                      k, (long long)got[k], (long long)want[k]);
    }
  }
  free(pm.g);
}

START_TEST(piece_map_closed_form) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/tests/data/parallel", PCGC_SOURCE_DIR);
  DIR *dp = opendir(dir);
  ck_assert(dp != NULL);
  struct dirent *e;
  while ((e = readdir(dp)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".pcg") != 0) continue;
    char rel[512];
    snprintf(rel, sizeof rel, "tests/data/parallel/%s", e->d_name);
    pcgc_graph *g = model_file(rel, NULL);
    check_piece_maps(e->d_name, g);
    pcgc_graph_free(g);
  }
  closedir(dp);
  const char *models[] = {"models/mlp.pcg", "models/cnn.pcg", "models/transformer-block.pcg", "models/bert-large.pcg"};
  pcgc_machine m = preset("dgx-h100");
  for (int k = 0; k < 4; k++) {
    pcgc_graph *g = model_file(models[k], "16"), *pg;
    pcgc_mapping mp;
    pcgc_error err = {0};
    ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_DATA_PARALLEL, g, &m, 0, &pg, &mp, &err), PCGC_OK);
    check_piece_maps(models[k], pg);
    pcgc_mapping_destroy(&mp);
    pcgc_graph_free(pg);
    pcgc_graph_free(g);
  }
}
END_TEST

/* ---------------------------------------------------- strategies, errors */

START_TEST(data_parallel_graph) {
  pcgc_graph *g = model_file("models/mlp.pcg", "64"), *pg;
  pcgc_machine m = preset("dgx-h100");
  pcgc_mapping mp;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_DATA_PARALLEL, g, &m, 4, &pg, &mp, &err), PCGC_OK);
  ck_assert_int_eq(mp.n_nodes, pg->n_nodes);
  int parts = 0, reps = 0;
  for (int i = 0; i < pg->n_nodes; i++) {
    const pcgc_node *x = &pg->nodes[i];
    ck_assert(mp.view[i].start == 0 && mp.view[i].stride == 1);
    parts += x->kind == PCGC_OP_PARTITION;
    reps += x->kind == PCGC_OP_REPLICATE;
    if (pcgc_op_class_of(x->kind) == PCGC_CLASS_COMPUTE) ck_assert_int_eq(x->out[0].degree[0], 4);
    if (pcgc_op_class_of(x->kind) == PCGC_CLASS_LOSS) ck_assert_int_eq(x->out[0].sum, 4);
  }
  ck_assert_int_eq(parts, 2);  /* x, labels */
  ck_assert_int_eq(reps, 6);   /* 3 weights, 3 biases */
  ck_assert_int_eq(pcgc_graph_validate(pg, &err), PCGC_OK);
  ck_assert_str_eq(pcgc_strategy_name(PCGC_STRATEGY_DATA_PARALLEL), "data-parallel");
  ck_assert_int_eq(pcgc_strategy_from_name("sequential"), PCGC_STRATEGY_SEQUENTIAL);
  ck_assert_int_eq(pcgc_strategy_from_name("pipeline"), -1);
  ck_assert_int_eq(pcgc_schedule_from_name("1f1b"), PCGC_SCHEDULE_1F1B);
  ck_assert_int_eq(pcgc_optimizer_from_name("momentum"), PCGC_OPTIM_MOMENTUM);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(errors) {
  pcgc_machine m = preset("dgx-h100");
  pcgc_graph *g = model_file("models/mlp.pcg", "12"), *pg;
  pcgc_mapping mp;
  pcgc_error err = {0};
  /* a batch the devices do not divide */
  ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_DATA_PARALLEL, g, &m, 0, &pg, &mp, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "data parallelism over 8 devices needs the batch (dim 0 of input 'x', size 12)"),
                "%s", err.message);
  ck_assert_msg(strstr(err.hint, "multiple of 8"), "%s", err.hint);
  ck_assert(pg == NULL);
  /* more devices than the machine has */
  ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_DATA_PARALLEL, g, &m, 16, &pg, &mp, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "16 devices asked for, but machine 'dgx-h100' has 8"), "%s", err.message);
  /* an unknown strategy */
  FILE *devnull = fopen("/dev/null", "w");
  ck_assert_int_eq(pcgc_simulate_strategy(g, "tensor-parallel", &m, 0, NULL, devnull, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "unknown strategy 'tensor-parallel'"), "%s", err.message);
  ck_assert_int_eq(pcgc_simulate_strategy(g, "data-parallel", &m, 4, NULL, devnull, &err), PCGC_OK);
  fclose(devnull);
  pcgc_graph_free(g);
  /* a graph that is already parallel */
  g = model_file("tests/data/parallel/mlp-dp4.pcg", NULL);
  ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_SEQUENTIAL, g, &m, 0, &pg, &mp, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "needs a sequential model, but it has partition 'xp'"), "%s", err.message);
  /* views off the machine, a mapping of the wrong size */
  ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 1}, &err), PCGC_OK);
  mp.view[node(g, "h1")] = (pcgc_view){8, 1};
  pcgc_sim_result r;
  ck_assert_int_eq(pcgc_simulate(g, &mp, &m, NULL, &r, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "linear 'h1' has view {start 8, stride 1}, outside the 8 devices of 'dgx-h100'"),
                "%s", err.message);
  ck_assert(r.device == NULL);
  pcgc_sim_options bad = opts();
  bad.schedule = PCGC_SCHEDULE_COUNT;
  ck_assert_int_eq(pcgc_simulate(g, &mp, &m, &bad, &r, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "bad options"), "%s", err.message);
  mp.n_nodes--;
  ck_assert_int_eq(pcgc_simulate(g, &mp, &m, NULL, &r, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "the mapping has"), "%s", err.message);
  mp.n_nodes++;
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
  /* no loss */
  g = model_text("model noloss\ninput x: f32[4, 4]\nweight w: f32[4, 4] = ones\ny = linear(x, w)\n");
  ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 0}, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_simulate(g, &mp, &m, NULL, &r, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "no loss"), "%s", err.message);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
  /* a machine without the link a transfer needs */
  pcgc_machine two = machine_text("nodes 2\ndevices_per_node 1\ndevice.flops.f32 1 TFLOP/s\ndevice.memory 1 GiB\n"
                                  "device.memory_bandwidth 100 GB/s\ninter.bandwidth 1 GB/s\ninter.latency 5 us\n");
  two.inter.bandwidth = 0;
  g = model_file("tests/data/parallel/mlp-tp2.pcg", NULL);
  ck_assert_int_eq(pcgc_mapping_init(&mp, g->n_nodes, (pcgc_view){0, 1}, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_simulate(g, &mp, &two, NULL, &r, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "cannot carry a transfer between devices"), "%s", err.message);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
}
END_TEST

/* ------------------------------------------------------ report, trace */

START_TEST(report_and_trace) {
  pcgc_graph *g = model_file("models/mlp.pcg", "64"), *pg;
  pcgc_machine m = preset("h100-4x8");
  pcgc_mapping mp;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_DATA_PARALLEL, g, &m, 0, &pg, &mp, &err), PCGC_OK);
  char path[] = "/tmp/pcgc-trace-XXXXXX";
  pcgc_sim_result r = simulate_traced(pg, &mp, &m, path);
  pcgc_sim_options o = opts();
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  pcgc_sim_report(f, &r, &m, "mlp: data-parallel on 32 devices");
  fclose(f);
  const char *want[] = {"mlp: data-parallel on 32 devices\n", "  machine        h100-4x8: 4 nodes x 8 devices; optimizer adam\n",
                        "  iteration      ", "  compute        min ", "  idle           min ",
                        " between nodes\n", "  memory         max ", "  tasks          ", " collective; ",
                        "  simulated in   "};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) ck_assert_msg(strstr(text, want[i]), "no '%s' in\n%s", want[i], text);
  ck_assert(!strstr(text, "OUT OF MEMORY"));
  free(text);

  char *json = pcgc_read_file(path, &len, &err);
  ck_assert_msg(json != NULL, "%s", err.message);
  cJSON *root = cJSON_Parse(json);
  ck_assert(root != NULL);
  cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  ck_assert(cJSON_IsArray(ev));
  int64_t x = 0, meta = 0, coll = 0;
  cJSON *e;
  cJSON_ArrayForEach(e, ev) {
    const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
    ck_assert(ph != NULL);
    if (strcmp(ph, "M") == 0) meta++;
    if (strcmp(ph, "X") != 0) continue;
    x++;
    double ts = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "ts")), dur = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "dur"));
    ck_assert(ts >= 0 && dur >= 0 && ts + dur <= r.iteration_time * 1e6 * (1 + 1e-9));
    const char *cat = cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat"));
    if (strcmp(cat, "collective") == 0) {
      coll++;
      ck_assert(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "devices")) == 32);
    }
  }
  ck_assert_int_eq(x, r.n_tasks - r.tasks_by_kind[PCGC_TASK_JOIN]);
  ck_assert_int_eq(meta, 3 * 32);
  ck_assert_int_eq(coll, 1); /* the MLP's 6 weights (65 KiB) in one gradient bucket */
  cJSON_Delete(root);
  free(json);
  char tmp[sizeof path + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  ck_assert(access(tmp, F_OK) != 0); /* renamed away */
  remove(path);
  /* an unwritable path: an I/O error, no result */
  o.trace_path = "/nonexistent-dir/trace.json";
  pcgc_sim_result bad;
  ck_assert_int_eq(pcgc_simulate(pg, &mp, &m, &o, &bad, &err), PCGC_ERR_IO);
  ck_assert_msg(strstr(err.message, "cannot write the trace '/nonexistent-dir/trace.json.tmp'"), "%s", err.message);
  pcgc_sim_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  pcgc_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------- speed */

START_TEST(speed_bert_large_summit) {
  pcgc_graph *g = model_file("models/bert-large.pcg", "192"), *pg;
  pcgc_machine m = preset("summit-v100");
  pcgc_mapping mp;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_DATA_PARALLEL, g, &m, 0, &pg, &mp, &err), PCGC_OK);
  pcgc_sim_result r = simulate(pg, &mp, &m, NULL);
  ck_assert_int_eq(r.n_devices, 192);
  /* one all-reduce per gradient bucket: 393 weights; a bucket holds at most 4 MiB, so each
   * projection's weight (4 or 16 MiB) is alone and the biases and norms between them share one */
  ck_assert_int_eq(r.tasks_by_kind[PCGC_TASK_COLLECTIVE], 220);
  ck_assert_int_eq(r.oom_devices, 0);
  check_bounds("bert-large", &r);
  double wall = r.build_seconds + r.run_seconds;
  fprintf(stderr, "bert-large data-parallel on summit-v100: %lld tasks simulated in %.1f ms (%.3g tasks/s)\n",
          (long long)r.n_tasks, 1e3 * wall, (double)r.n_tasks / wall);
  ck_assert_msg(wall < 5.0, "%.3f s", wall); /* a sanity bound, also under ASan: bench_sim measures */
  pcgc_sim_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  pcgc_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------- suite */

static Suite *suite(void) {
  Suite *s = suite_create("sim");
  TCase *tc = tcase_create("by hand");
  tcase_add_test(tc, dp_one_linear_by_hand);
  tcase_add_test(tc, dp_overlap_by_hand);
  tcase_add_test(tc, pipeline_gpipe_by_hand);
  tcase_add_test(tc, pipeline_1f1b);
  tcase_add_test(tc, pipeline_several_ops_per_stage);
  tcase_add_test(tc, sequential_is_the_sum_of_its_tasks);
  tcase_add_test(tc, recompute_by_hand);
  tcase_add_test(tc, longest_path_first);
  tcase_add_test(tc, relayout_transfers);
  tcase_add_test(tc, relayout_gradient_set_where_alone);
  tcase_add_test(tc, scatter_packs_and_overlaps);
  tcase_add_test(tc, replicate_and_reduce_collectives);
  tcase_add_test(tc, reduce_point_to_point);
  suite_add_tcase(s, tc);
  tc = tcase_create("properties");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, bounds_on_parallel_graphs);
  tcase_add_test(tc, bounds_on_baselines);
  tcase_add_test(tc, dp_memory);
  tcase_add_test(tc, out_of_memory);
  tcase_add_test(tc, give_up_after_the_bound);
  tcase_add_test(tc, piece_map_closed_form);
  suite_add_tcase(s, tc);
  tc = tcase_create("interface");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, data_parallel_graph);
  tcase_add_test(tc, errors);
  tcase_add_test(tc, report_and_trace);
  tcase_add_test(tc, speed_bert_large_summit);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
