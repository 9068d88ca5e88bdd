/*
 * test_profile.c — the profile database (cost/profile.c) and its use by
 * the simulator:
 *   - entries written with pcgc_profile_write load back equal, are found by
 *     their key and not by a key that differs in op, attributes, dtype or a
 *     shape; adding an existing key replaces its times;
 *   - keys of graph nodes use piece shapes;
 *   - malformed JSON, a wrong format tag and a bad entry are PCGC_ERR_PARSE
 *     with a message naming the file; a missing file is PCGC_ERR_IO;
 *   - with --profile (pcgc_sim_options.profile) a one-op model's simulated
 *     time moves from the roofline to the profiled value, exactly; so does
 *     a weight's optimizer update, and only for its own optimizer;
 *   - the device record: one thread's share of a machine, its round trip,
 *     version 1 files without it, malformed records;
 *   - times carried between devices: L + (t - L) × R_m / R_p, on a CPU at
 *     most at the rates measured; a kernel nobody
 *     measured (a tensor-parallel slice, an update of a slice) estimated
 *     from the nearest measured kernel of its kind, by rank (attributes,
 *     shapes, entry order), and the simulator's counts of each;
 *   - measured links (profile --links): the fit recovers the latency and
 *     bandwidth that made its points, links write and load back, malformed
 *     ones are refused by what is wrong, and applied to a machine the
 *     measured all-reduce times replace the model's for exactly that group.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "search.h"

static pcgc_graph *model_text(const char *text) {
  pcgc_error err = {0};
  pcgc_graph *g = pcgc_model_parse(text, strlen(text), "inline.pcg", NULL, &err);
  ck_assert_msg(g != NULL, "%s:%d:%d: %s", err.file, err.line, err.col, err.message);
  return g;
}

static const char *ONE_OP =
    "model one\n"
    "input x: f32[8, 16]\n"
    "input t: f32[8, 4]\n"
    "y = linear(x, out=4, act=relu)\n"
    "loss = mse(y, t)\n";

static void temp_path(char *buf, size_t n) {
  snprintf(buf, n, "/tmp/pcgc_test_profile_%ld_XXXXXX", (long)getpid());
  int fd = mkstemp(buf);
  ck_assert(fd >= 0);
  close(fd);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert(f != NULL);
  fputs(text, f);
  fclose(f);
}

START_TEST(write_load_find) {
  pcgc_graph *g = model_text(ONE_OP);
  int y = pcgc_graph_find(g, "y");
  pcgc_error err = {0};
  pcgc_profile_entry key;
  ck_assert_int_eq(pcgc_profile_key(g, y, &key, &err), PCGC_OK);
  ck_assert_int_eq(key.kind, PCGC_OP_LINEAR);
  ck_assert_int_eq(key.dtype, PCGC_F32);
  ck_assert_int_eq(key.n_in, 3);
  ck_assert_int_eq(key.rank[0], 2);
  ck_assert(key.dims[0][0] == 8 && key.dims[0][1] == 16);
  ck_assert(key.dims[1][0] == 16 && key.dims[1][1] == 4); /* weight [K, N] */
  ck_assert_msg(strstr(key.attrs, "act=relu") != NULL, "attrs '%s'", key.attrs);

  pcgc_profile *p = pcgc_profile_new("cpu-local");
  pcgc_profile_entry e = key;
  e.fwd = 1.5e-3;
  e.bwd = 2.5e-3;
  ck_assert_int_eq(pcgc_profile_add(p, &e, &err), PCGC_OK);
  pcgc_profile_entry other = key;
  other.dims[0][0] = 16; /* another batch: another entry */
  other.fwd = 3e-3;
  other.bwd = 4e-3;
  ck_assert_int_eq(pcgc_profile_add(p, &other, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_profile_size(p), 2);
  e.fwd = 1.25e-3; /* same key: replaces */
  ck_assert_int_eq(pcgc_profile_add(p, &e, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_profile_size(p), 2);

  char path[256];
  temp_path(path, sizeof path);
  ck_assert_int_eq(pcgc_profile_write(p, path, &err), PCGC_OK);
  pcgc_profile *q = NULL;
  ck_assert_msg(pcgc_profile_load(path, &q, &err) == PCGC_OK, "%s", err.message);
  ck_assert_str_eq(pcgc_profile_machine(q), "cpu-local");
  ck_assert_int_eq(pcgc_profile_size(q), 2);
  const pcgc_profile_entry *f = pcgc_profile_find(q, &key);
  ck_assert(f != NULL);
  ck_assert(f->fwd == 1.25e-3 && f->bwd == 2.5e-3); /* %.17g round trip */
  ck_assert_str_eq(f->attrs, key.attrs);
  f = pcgc_profile_find(q, &other);
  ck_assert(f != NULL && f->fwd == 3e-3 && f->bwd == 4e-3);

  pcgc_profile_entry miss = key;
  snprintf(miss.attrs, sizeof miss.attrs, "act=gelu");
  ck_assert(pcgc_profile_find(q, &miss) == NULL);
  miss = key;
  miss.dtype = PCGC_F64;
  ck_assert(pcgc_profile_find(q, &miss) == NULL);
  miss = key;
  miss.kind = PCGC_OP_MATMUL;
  ck_assert(pcgc_profile_find(q, &miss) == NULL);
  miss = key;
  miss.dims[1][1] = 5;
  ck_assert(pcgc_profile_find(q, &miss) == NULL);

  pcgc_machine m;
  ck_assert_int_eq(pcgc_machine_load("cpu-local", &m, &err), PCGC_OK);
  pcgc_op_time t = {0, 0};
  ck_assert_int_eq(pcgc_profile_node_time(q, &m, g, y, &t), PCGC_PROFILE_MEASURED); /* no device: as measured */
  ck_assert(t.fwd == 1.25e-3 && t.bwd == 2.5e-3);
  ck_assert_int_eq(pcgc_profile_node_time(q, &m, g, pcgc_graph_find(g, "loss"), &t), PCGC_PROFILE_NONE);
  ck_assert_int_eq(pcgc_profile_node_time(NULL, &m, g, y, &t), PCGC_PROFILE_NONE);

  unlink(path);
  pcgc_profile_free(p);
  pcgc_profile_free(q);
  pcgc_profile_free(NULL);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(piece_dims) {
  pcgc_ptensor t;
  int64_t dims[] = {64, 30, 7}, got[PCGC_MAX_RANK];
  pcgc_ptensor_init(&t, PCGC_F32, 3, dims);
  t.degree[0] = 4;
  t.degree[1] = 4; /* 30 / 4 rounds up */
  t.micro = 2;
  t.micro_dim = 0;
  pcgc_profile_piece_dims(&t, got);
  ck_assert(got[0] == 8 && got[1] == 8 && got[2] == 7);
}
END_TEST

static void expect_parse_error(const char *text, const char *want, int line) {
  char path[256];
  temp_path(path, sizeof path);
  write_file(path, text);
  pcgc_error err = {0};
  pcgc_profile *p = (pcgc_profile *)1;
  ck_assert_int_eq(pcgc_profile_load(path, &p, &err), PCGC_ERR_PARSE);
  ck_assert(p == NULL);
  ck_assert_msg(strstr(err.message, want) != NULL, "message '%s' lacks '%s'", err.message, want);
  ck_assert_str_eq(err.file, path); /* printed as path:line:col: error: ... */
  ck_assert_int_eq(err.line, line);
  unlink(path);
}

START_TEST(malformed) {
  expect_parse_error("{\"format\": \"pcgc-profile\", \"version\": 1,\n \"machine\": ", "malformed JSON", 2);
  expect_parse_error("[1, 2]", "not a profile database", 0);
  expect_parse_error("{\"format\": \"pcgc-profile\", \"version\": 3, \"machine\": \"m\", \"entries\": []}", "version", 0);
  expect_parse_error("{\"format\": \"pcgc-profile\", \"version\": 2, \"machine\": \"m\", \"entries\": []}",
                     "version 2 needs \"device\"", 0);
  expect_parse_error("{\"format\": \"pcgc-profile\", \"version\": 2, \"machine\": \"m\", \"device\": {\"kind\": "
                     "\"cpu\", \"threads\": 0, \"cores\": 2, \"flops\": {\"f32\": 1e9}, \"memory_bandwidth\": 1e9}, "
                     "\"entries\": []}",
                     "\"device\" must be null or", 0);
  expect_parse_error("{\"format\": \"pcgc-profile\", \"version\": 2, \"machine\": \"m\", \"device\": {\"kind\": "
                     "\"cpu\", \"threads\": 1, \"cores\": 2, \"flops\": {\"f16\": 1e9}, \"memory_bandwidth\": 1e9}, "
                     "\"entries\": []}",
                     "\"device\" must be null or", 0);
  expect_parse_error("{\"format\": \"pcgc-profile\", \"version\": 1, \"machine\": \"m\", \"entries\": "
                     "[{\"op\": \"linaer\", \"attrs\": \"\", \"inputs\": [], \"dtype\": \"f32\", \"forward\": 1, "
                     "\"backward\": 1}]}",
                     "entry 0: \"op\" must name an operator", 0);
  expect_parse_error("{\"format\": \"pcgc-profile\", \"version\": 1, \"machine\": \"m\", \"entries\": "
                     "[{\"op\": \"relu\", \"attrs\": \"\", \"inputs\": [[2, -1]], \"dtype\": \"f32\", \"forward\": 1, "
                     "\"backward\": 1}]}",
                     "entry 0: sizes must be non-negative integers", 0);
  expect_parse_error("{\"format\": \"pcgc-profile\", \"version\": 1, \"machine\": \"m\", \"entries\": "
                     "[{\"op\": \"relu\", \"attrs\": \"\", \"inputs\": [[2]], \"dtype\": \"f32\", \"forward\": -1, "
                     "\"backward\": 1}]}",
                     "\"forward\" and \"backward\" must be seconds >= 0", 0);
  pcgc_error err = {0};
  pcgc_profile *p = NULL;
  ck_assert_int_eq(pcgc_profile_load("/nonexistent/pcgc.json", &p, &err), PCGC_ERR_IO);
  ck_assert(strstr(err.message, "/nonexistent/pcgc.json") != NULL);
}
END_TEST

static double iteration(const pcgc_graph *g, const pcgc_machine *m, const pcgc_profile *p) {
  pcgc_error err = {0};
  pcgc_graph *pg = NULL;
  pcgc_mapping mp;
  ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_SEQUENTIAL, g, m, 0, &pg, &mp, &err), PCGC_OK);
  pcgc_sim_options o;
  pcgc_sim_options_default(&o);
  o.optimizer = PCGC_OPTIM_SGD;
  o.profile = p;
  pcgc_sim_result r;
  ck_assert_msg(pcgc_simulate(pg, &mp, m, &o, &r, &err) == PCGC_OK, "%s", err.message);
  double t = r.iteration_time;
  pcgc_sim_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  return t;
}

START_TEST(simulate_uses_profile) {
  pcgc_graph *g = model_text(ONE_OP);
  pcgc_error err = {0};
  pcgc_machine m;
  ck_assert_int_eq(pcgc_machine_load("cpu-local", &m, &err), PCGC_OK);
  int y = pcgc_graph_find(g, "y");
  pcgc_op_time roof;
  ck_assert_int_eq(pcgc_cost_node_time(&m, g, y, &roof, &err), PCGC_OK);
  double base = iteration(g, &m, NULL);

  pcgc_profile *p = pcgc_profile_new("cpu-local");
  pcgc_profile_entry e;
  ck_assert_int_eq(pcgc_profile_key(g, y, &e, &err), PCGC_OK);
  e.fwd = 7e-3;
  e.bwd = 11e-3;
  ck_assert_int_eq(pcgc_profile_add(p, &e, &err), PCGC_OK);
  double prof = iteration(g, &m, p);
  /* sequential: the iteration is the sum of its tasks, so the linear's two
   * tasks change from the roofline to the profiled times and nothing else */
  double want = base - (roof.fwd + roof.bwd) + 18e-3;
  ck_assert_msg(fabs(prof - want) <= 1e-12, "got %.17g, want %.17g", prof, want);
  ck_assert(fabs(iteration(g, &m, NULL) - base) == 0); /* NULL: today's behaviour */

  /* an entry of another op kind does not apply */
  pcgc_profile *q = pcgc_profile_new("cpu-local");
  e.kind = PCGC_OP_MATMUL;
  ck_assert_int_eq(pcgc_profile_add(q, &e, &err), PCGC_OK);
  ck_assert(iteration(g, &m, q) == base);
  pcgc_profile_free(p);
  pcgc_profile_free(q);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(simulate_uses_update_profile) {
  pcgc_graph *g = model_text(ONE_OP);
  pcgc_error err = {0};
  pcgc_machine m;
  ck_assert_int_eq(pcgc_machine_load("cpu-local", &m, &err), PCGC_OK);
  int w = pcgc_graph_find(g, "y.weight");
  ck_assert_int_ge(w, 0);
  pcgc_profile *p = pcgc_profile_new("cpu-local");
  pcgc_profile_entry e;
  /* the bias's update measured too (else it is estimated from the weight's) */
  pcgc_profile_update_key(PCGC_OPTIM_SGD, &g->nodes[pcgc_graph_find(g, "y.bias")].out[0], &e);
  e.fwd = 1e-6;
  ck_assert_int_eq(pcgc_profile_add(p, &e, &err), PCGC_OK);
  pcgc_profile_update_key(PCGC_OPTIM_SGD, &g->nodes[w].out[0], &e);
  ck_assert_str_eq(e.attrs, "optimizer=sgd");
  ck_assert_int_eq(e.dims[0][0], 16);
  ck_assert_int_eq(e.dims[0][1], 4);
  e.fwd = 5e-3;
  ck_assert_int_eq(pcgc_profile_add(p, &e, &err), PCGC_OK);
  double t5 = iteration(g, &m, p);
  e.fwd = 6e-3;
  ck_assert_int_eq(pcgc_profile_add(p, &e, &err), PCGC_OK); /* replaces */
  double t6 = iteration(g, &m, p);
  ck_assert_msg(fabs(t6 - t5 - 1e-3) <= 1e-12, "update 5 ms -> 6 ms moved the iteration by %.17g", t6 - t5);
  ck_assert(t5 > 5e-3);
  double sec = 0;
  ck_assert(pcgc_profile_update_time(p, &m, PCGC_OPTIM_SGD, &g->nodes[w].out[0], &sec) == PCGC_PROFILE_MEASURED &&
            sec == 6e-3);
  ck_assert_int_eq(pcgc_profile_update_time(p, &m, PCGC_OPTIM_ADAM, &g->nodes[w].out[0], &sec), PCGC_PROFILE_NONE);

  /* an Adam entry does not apply to an SGD simulation; it round-trips */
  pcgc_profile *q = pcgc_profile_new("cpu-local");
  pcgc_profile_update_key(PCGC_OPTIM_ADAM, &g->nodes[w].out[0], &e);
  e.fwd = 5e-3;
  ck_assert_int_eq(pcgc_profile_add(q, &e, &err), PCGC_OK);
  ck_assert(iteration(g, &m, q) == iteration(g, &m, NULL));
  char path[256];
  temp_path(path, sizeof path);
  ck_assert_int_eq(pcgc_profile_write(q, path, &err), PCGC_OK);
  pcgc_profile *r = NULL;
  ck_assert_int_eq(pcgc_profile_load(path, &r, &err), PCGC_OK);
  ck_assert(pcgc_profile_update_time(r, &m, PCGC_OPTIM_ADAM, &g->nodes[w].out[0], &sec) == PCGC_PROFILE_MEASURED &&
            sec == 5e-3);
  unlink(path);
  pcgc_profile_free(r);
  pcgc_profile_free(q);
  pcgc_profile_free(p);
  pcgc_graph_free(g);
}
END_TEST


/* m with its rates × f and launch overhead `launch`; with launch 0,
 * pcgc_cost_node_time gives R, the roofline without launch. */
static pcgc_machine scaled(const pcgc_machine *m, double f, double launch) {
  pcgc_machine s = *m;
  for (int t = 0; t < PCGC_DTYPE_COUNT; t++) s.device.flops[t] *= f;
  s.device.memory_bandwidth *= f;
  s.device.launch_overhead = launch;
  return s;
}

/* A machine whose device has the rates of profile device d. */
static pcgc_machine as_device(const pcgc_machine *m, const pcgc_profile_device *d, double launch) {
  pcgc_machine s = *m;
  for (int t = 0; t < PCGC_DTYPE_COUNT; t++) s.device.flops[t] = d->flops[t];
  s.device.memory_bandwidth = d->memory_bandwidth;
  s.device.launch_overhead = launch;
  return s;
}

static bool close_to(double got, double want) { return fabs(got - want) <= 1e-12 * fabs(want) + 1e-18; }

START_TEST(thread_device) {
  pcgc_error err = {0};
  pcgc_machine local, four;
  ck_assert_int_eq(pcgc_machine_load("cpu-local", &local, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_machine_load("cpu-4", &four, &err), PCGC_OK);
  /* one thread of the 2 cores: half of cpu-local's one device, twice a cpu-4 device */
  pcgc_profile_device d = pcgc_profile_thread_device(&local, 1, 2);
  ck_assert_int_eq(d.kind, PCGC_DEVICE_CPU);
  ck_assert_int_eq(d.threads, 1);
  ck_assert_int_eq(d.cores, 2);
  ck_assert(d.flops[PCGC_F32] == 105e9 && d.flops[PCGC_F64] == 52.5e9 && d.memory_bandwidth == 19e9);
  pcgc_profile_device d4 = pcgc_profile_thread_device(&four, 1, 2);
  ck_assert(d4.flops[PCGC_F32] == 104e9 && d4.memory_bandwidth == 19e9);
  pcgc_profile_device both = pcgc_profile_thread_device(&local, 2, 2), many = pcgc_profile_thread_device(&local, 8, 2);
  ck_assert(both.flops[PCGC_F32] == 210e9 && both.memory_bandwidth == 38e9);
  ck_assert(many.threads == 2 && many.flops[PCGC_F32] == 210e9); /* no more threads than cores */

  /* the record round-trips; version 1 and null have none */
  pcgc_profile *p = pcgc_profile_new("cpu-local");
  ck_assert(pcgc_profile_device_of(p) == NULL);
  pcgc_profile_set_device(p, &d);
  char path[256];
  temp_path(path, sizeof path);
  ck_assert_int_eq(pcgc_profile_write(p, path, &err), PCGC_OK);
  pcgc_profile *q = NULL;
  ck_assert_msg(pcgc_profile_load(path, &q, &err) == PCGC_OK, "%s", err.message);
  const pcgc_profile_device *e = pcgc_profile_device_of(q);
  ck_assert(e != NULL);
  ck_assert(e->kind == d.kind && e->threads == 1 && e->cores == 2 && e->memory_bandwidth == d.memory_bandwidth);
  for (int t = 0; t < PCGC_DTYPE_COUNT; t++) ck_assert(e->flops[t] == d.flops[t]);
  pcgc_profile_free(q);
  pcgc_profile_set_device(p, NULL);
  ck_assert_int_eq(pcgc_profile_write(p, path, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_profile_load(path, &q, &err), PCGC_OK);
  ck_assert(pcgc_profile_device_of(q) == NULL);
  pcgc_profile_free(q);
  const char *v1 = "{\"format\": \"pcgc-profile\", \"version\": 1, \"machine\": \"cpu-local\", \"entries\": []}";
  ck_assert_int_eq(pcgc_profile_parse(v1, strlen(v1), "v1.json", &q, &err), PCGC_OK);
  ck_assert(pcgc_profile_device_of(q) == NULL);
  pcgc_profile_free(q);
  const char *f32only = "{\"format\": \"pcgc-profile\", \"version\": 2, \"machine\": \"x\", \"device\": {\"kind\": \"cpu\", "
                        "\"threads\": 1, \"cores\": 4, \"flops\": {\"f32\": 2e9}, \"memory_bandwidth\": 3e9}, \"entries\": []}";
  ck_assert_int_eq(pcgc_profile_parse(f32only, strlen(f32only), "x.json", &q, &err), PCGC_OK);
  e = pcgc_profile_device_of(q);
  ck_assert(e && e->cores == 4 && e->flops[PCGC_F64] == 2e9 && e->flops[PCGC_I32] == 2e9); /* as f32 */
  pcgc_profile_free(q);
  unlink(path);
  pcgc_profile_free(p);
}
END_TEST

START_TEST(carried_between_devices) {
  pcgc_graph *g = model_text(ONE_OP);
  pcgc_error err = {0};
  pcgc_machine local;
  ck_assert_int_eq(pcgc_machine_load("cpu-local", &local, &err), PCGC_OK);
  int y = pcgc_graph_find(g, "y"), loss = pcgc_graph_find(g, "loss");
  pcgc_profile *p = pcgc_profile_new("cpu-local");
  pcgc_profile_device d = pcgc_profile_thread_device(&local, 1, 2); /* 105 GFLOP/s, 19 GB/s */
  pcgc_profile_set_device(p, &d);
  pcgc_profile_entry e;
  ck_assert_int_eq(pcgc_profile_key(g, y, &e, &err), PCGC_OK);
  e.fwd = 7e-3;
  e.bwd = 11e-3;
  ck_assert_int_eq(pcgc_profile_add(p, &e, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_profile_key(g, loss, &e, &err), PCGC_OK);
  e.fwd = 2e-3;
  e.bwd = 3e-3;
  ck_assert_int_eq(pcgc_profile_add(p, &e, &err), PCGC_OK);
  pcgc_op_time rp, rm, t;
  pcgc_machine from = as_device(&local, &d, 0);
  ck_assert_int_eq(pcgc_cost_node_time(&from, g, y, &rp, &err), PCGC_OK);

  /* on the device it was measured as (cpu-2's): exactly as measured */
  pcgc_machine same = as_device(&local, &d, local.device.launch_overhead);
  ck_assert_int_eq(pcgc_profile_node_time(p, &same, g, y, &t), PCGC_PROFILE_MEASURED);
  ck_assert(t.fwd == 7e-3 && t.bwd == 11e-3);

  /* half a core (cpu-4: a quarter of the node): the rooflines double, compute- or memory-bound */
  pcgc_machine quarter = scaled(&local, 0.25, local.device.launch_overhead), q0 = scaled(&local, 0.25, 0);
  double L = quarter.device.launch_overhead;
  ck_assert_int_eq(pcgc_cost_node_time(&q0, g, y, &rm, &err), PCGC_OK);
  ck_assert(close_to(rm.fwd, 2 * rp.fwd) && close_to(rm.bwd, 2 * rp.bwd));
  ck_assert_int_eq(pcgc_profile_node_time(p, &quarter, g, y, &t), PCGC_PROFILE_MEASURED);
  ck_assert_msg(close_to(t.fwd, L + (7e-3 - L) * rm.fwd / rp.fwd), "fwd %.17g", t.fwd);
  ck_assert(close_to(t.bwd, L + (11e-3 - L) * rm.bwd / rp.bwd));
  ck_assert(close_to(t.fwd, 2 * 7e-3 - L));
  ck_assert_int_eq(pcgc_profile_node_time(p, &quarter, g, loss, &t), PCGC_PROFILE_MEASURED); /* a vector op alike */
  ck_assert(close_to(t.fwd, 2 * 2e-3 - L) && close_to(t.bwd, 2 * 3e-3 - L));

  /* the whole 2-core CPU (cpu-local, one process with 2 BLAS threads): no
   * faster than measured on one core (how BLAS would use the second core
   * depends on the shapes) */
  ck_assert_int_eq(pcgc_profile_node_time(p, &local, g, y, &t), PCGC_PROFILE_MEASURED);
  ck_assert(t.fwd == 7e-3 && t.bwd == 11e-3);
  ck_assert_int_eq(pcgc_profile_node_time(p, &local, g, loss, &t), PCGC_PROFILE_MEASURED);
  ck_assert(t.fwd == 2e-3 && t.bwd == 3e-3);

  /* measured with 2 threads as the whole CPU: exact there, 4 times as long
   * on half a core */
  pcgc_profile_device d2 = pcgc_profile_thread_device(&local, 2, 2);
  pcgc_profile_set_device(p, &d2);
  ck_assert_int_eq(pcgc_profile_node_time(p, &local, g, y, &t), PCGC_PROFILE_MEASURED);
  ck_assert(t.fwd == 7e-3 && t.bwd == 11e-3);
  ck_assert_int_eq(pcgc_profile_node_time(p, &local, g, loss, &t), PCGC_PROFILE_MEASURED);
  ck_assert(t.fwd == 2e-3 && t.bwd == 3e-3);
  ck_assert_int_eq(pcgc_profile_node_time(p, &quarter, g, y, &t), PCGC_PROFILE_MEASURED);
  ck_assert(close_to(t.fwd, 4 * 7e-3 - 3 * quarter.device.launch_overhead));
  ck_assert_int_eq(pcgc_profile_node_time(p, &quarter, g, loss, &t), PCGC_PROFILE_MEASURED);
  ck_assert(close_to(t.fwd, 4 * 2e-3 - 3 * quarter.device.launch_overhead));

  /* updates follow the same rule */
  pcgc_profile_set_device(p, &d);
  int w = pcgc_graph_find(g, "y.weight");
  pcgc_profile_update_key(PCGC_OPTIM_SGD, &g->nodes[w].out[0], &e);
  e.fwd = 5e-3;
  ck_assert_int_eq(pcgc_profile_add(p, &e, &err), PCGC_OK);
  double sec = 0;
  ck_assert_int_eq(pcgc_profile_update_time(p, &quarter, PCGC_OPTIM_SGD, &g->nodes[w].out[0], &sec),
                   PCGC_PROFILE_MEASURED);
  ck_assert(close_to(sec, 2 * 5e-3 - quarter.device.launch_overhead));
  ck_assert_int_eq(pcgc_profile_update_time(p, &local, PCGC_OPTIM_SGD, &g->nodes[w].out[0], &sec),
                   PCGC_PROFILE_MEASURED);
  ck_assert(sec == 5e-3);
  pcgc_profile_free(p);
  pcgc_graph_free(g);
}
END_TEST

/* A GPU profile measured in TF32 (`pcgc profile --precision tf32`): a TF32
 * plan takes its times as measured; an f32 plan's GEMM is slower by the
 * rooflines' ratio (the tensor cores' rate over the f32 units'), a bf16
 * plan's faster. */
START_TEST(gpu_precision) {
  pcgc_graph *g = model_text("model big\n"
                             "input x: f32[4096, 1024]\n"
                             "input t: f32[4096, 4096]\n"
                             "y = linear(x, out=4096)\n"
                             "loss = mse(y, t)\n");
  pcgc_error err = {0};
  pcgc_machine h100;
  ck_assert_int_eq(pcgc_machine_load("dgx-h100", &h100, &err), PCGC_OK);
  int y = pcgc_graph_find(g, "y");
  pcgc_profile *p = pcgc_profile_new("dgx-h100");
  pcgc_profile_device d = pcgc_profile_gpu_device(&h100, PCGC_PREC_TF32);
  ck_assert(d.kind == PCGC_DEVICE_GPU && d.threads == 1 && d.cores == 1);
  ck_assert(d.flops[PCGC_F32] == h100.device.flops[PCGC_BF16] / 2); /* TF32: half the bf16 tensor rate */
  ck_assert(d.memory_bandwidth == h100.device.memory_bandwidth);
  pcgc_profile_device f = pcgc_profile_gpu_device(&h100, PCGC_PREC_F32);
  ck_assert(f.flops[PCGC_F32] == h100.device.flops[PCGC_F32]);
  pcgc_profile_set_device(p, &d);
  pcgc_profile_entry e;
  ck_assert_int_eq(pcgc_profile_key(g, y, &e, &err), PCGC_OK);
  e.fwd = 0.12e-3;
  e.bwd = 0.25e-3;
  ck_assert_int_eq(pcgc_profile_add(p, &e, &err), PCGC_OK);

  pcgc_op_time t, r32, rtf;
  pcgc_machine tf32 = h100, bf16 = h100;
  pcgc_machine_set_precision(&tf32, PCGC_PREC_TF32);
  pcgc_machine_set_precision(&bf16, PCGC_PREC_BF16);
  ck_assert_int_eq(pcgc_profile_node_time(p, &tf32, g, y, &t), PCGC_PROFILE_MEASURED);
  ck_assert(t.fwd == 0.12e-3 && t.bwd == 0.25e-3);

  /* f32: L + (t - L) x the rooflines' ratio, compute-bound at both rates */
  pcgc_machine z32 = h100, ztf = tf32;
  z32.device.launch_overhead = ztf.device.launch_overhead = 0;
  ck_assert_int_eq(pcgc_cost_node_time(&z32, g, y, &r32, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_cost_node_time(&ztf, g, y, &rtf, &err), PCGC_OK);
  double ratio = h100.device.flops[PCGC_BF16] / 2 / h100.device.flops[PCGC_F32];
  ck_assert_msg(close_to(r32.fwd / rtf.fwd, ratio), "f32/tf32 roofline %.6g, rates %.6g", r32.fwd / rtf.fwd, ratio);
  double L = h100.device.launch_overhead;
  ck_assert_int_eq(pcgc_profile_node_time(p, &h100, g, y, &t), PCGC_PROFILE_MEASURED);
  ck_assert_msg(close_to(t.fwd, L + (0.12e-3 - L) * ratio), "f32 fwd %.6g", t.fwd);
  ck_assert(close_to(t.bwd, L + (0.25e-3 - L) * r32.bwd / rtf.bwd));
  /* bf16: twice TF32's rate */
  ck_assert_int_eq(pcgc_profile_node_time(p, &bf16, g, y, &t), PCGC_PROFILE_MEASURED);
  ck_assert_msg(close_to(t.fwd, L + (0.12e-3 - L) / 2), "bf16 fwd %.6g", t.fwd);
  pcgc_profile_free(p);
  pcgc_graph_free(g);
}
END_TEST

static const char *SLICE = /* ONE_OP's linear as a tensor-parallel slice would be: half its outputs */
    "model slice\n"
    "input x: f32[8, 16]\n"
    "input t: f32[8, 2]\n"
    "y = linear(x, out=2, act=relu)\n"
    "loss = mse(y, t)\n";

START_TEST(nearest_kernel) {
  pcgc_graph *g = model_text(ONE_OP), *s = model_text(SLICE);
  pcgc_error err = {0};
  pcgc_machine m;
  ck_assert_int_eq(pcgc_machine_load("cpu-local", &m, &err), PCGC_OK);
  pcgc_machine m0 = scaled(&m, 1, 0);
  double L = m.device.launch_overhead;
  int y = pcgc_graph_find(g, "y"), ys = pcgc_graph_find(s, "y");
  pcgc_profile *p = pcgc_profile_new("cpu-local"); /* no device record: measured on m */
  pcgc_profile_entry e, four;
  ck_assert_int_eq(pcgc_profile_key(g, y, &four, &err), PCGC_OK);
  four.fwd = 7e-3;
  four.bwd = 11e-3;
  ck_assert_int_eq(pcgc_profile_add(p, &four, &err), PCGC_OK);

  /* the slice takes the measured kernel's slowdown over its roofline */
  pcgc_op_time rk, rx, t;
  ck_assert_int_eq(pcgc_cost_node_time(&m0, g, y, &rk, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_cost_node_time(&m0, s, ys, &rx, &err), PCGC_OK);
  ck_assert(rx.fwd < rk.fwd);
  ck_assert_int_eq(pcgc_profile_node_time(p, &m, s, ys, &t), PCGC_PROFILE_NEAREST);
  pcgc_op_time want = {L + (7e-3 - L) * rx.fwd / rk.fwd, L + (11e-3 - L) * rx.bwd / rk.bwd};
  ck_assert_msg(close_to(t.fwd, want.fwd) && close_to(t.bwd, want.bwd), "%.17g %.17g", t.fwd, t.bwd);

  /* rank: other attributes after the same ones, however close their shapes */
  ck_assert_int_eq(pcgc_profile_key(s, ys, &e, &err), PCGC_OK);
  snprintf(e.attrs, sizeof e.attrs, "act=none");
  e.fwd = e.bwd = 1;
  ck_assert_int_eq(pcgc_profile_add(p, &e, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_profile_node_time(p, &m, s, ys, &t), PCGC_PROFILE_NEAREST);
  ck_assert(close_to(t.fwd, want.fwd));
  /* then closer shapes; a tie goes to the earlier entry */
  e = four;
  e.dims[1][1] = e.dims[2][0] = 8; /* out=8: twice as far */
  e.fwd = e.bwd = 2;
  ck_assert_int_eq(pcgc_profile_add(p, &e, &err), PCGC_OK);
  e.dims[1][1] = e.dims[2][0] = 1; /* out=1: as far as out=4, later */
  ck_assert_int_eq(pcgc_profile_add(p, &e, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_profile_node_time(p, &m, s, ys, &t), PCGC_PROFILE_NEAREST);
  ck_assert(close_to(t.fwd, want.fwd));
  /* its own entry beats them all */
  ck_assert_int_eq(pcgc_profile_key(s, ys, &e, &err), PCGC_OK);
  e.fwd = 3e-3;
  e.bwd = 4e-3;
  ck_assert_int_eq(pcgc_profile_add(p, &e, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_profile_node_time(p, &m, s, ys, &t), PCGC_PROFILE_MEASURED);
  ck_assert(t.fwd == 3e-3 && t.bwd == 4e-3);
  /* nothing of the kind: the roofline stays */
  ck_assert_int_eq(pcgc_profile_node_time(p, &m, s, pcgc_graph_find(s, "loss"), &t), PCGC_PROFILE_NONE);

  /* the update of a slice of a weight, from the update measured of the whole */
  pcgc_profile *u = pcgc_profile_new("cpu-local");
  int w = pcgc_graph_find(g, "y.weight"), ws = pcgc_graph_find(s, "y.weight");
  pcgc_profile_update_key(PCGC_OPTIM_SGD, &g->nodes[w].out[0], &e);
  e.fwd = 5e-3;
  ck_assert_int_eq(pcgc_profile_add(u, &e, &err), PCGC_OK);
  pcgc_op_cost ck = pcgc_cost_update(PCGC_OPTIM_SGD, &g->nodes[w].out[0]),
               cx = pcgc_cost_update(PCGC_OPTIM_SGD, &s->nodes[ws].out[0]);
  double rku = pcgc_cost_roofline(&m0, PCGC_OP_MUL, PCGC_F32, ck.fwd_flops, ck.fwd_bytes),
         rxu = pcgc_cost_roofline(&m0, PCGC_OP_MUL, PCGC_F32, cx.fwd_flops, cx.fwd_bytes);
  ck_assert(close_to(rxu, rku / 2)); /* half the bytes, memory-bound */
  double sec = 0;
  ck_assert_int_eq(pcgc_profile_update_time(u, &m, PCGC_OPTIM_SGD, &s->nodes[ws].out[0], &sec), PCGC_PROFILE_NEAREST);
  ck_assert_msg(close_to(sec, L + (5e-3 - L) / 2), "%.17g", sec);
  ck_assert_int_eq(pcgc_profile_update_time(u, &m, PCGC_OPTIM_ADAM, &s->nodes[ws].out[0], &sec), PCGC_PROFILE_NONE);

  /* the simulator counts where its times came from */
  pcgc_graph *pg = NULL;
  pcgc_mapping mp;
  ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_SEQUENTIAL, s, &m, 0, &pg, &mp, &err), PCGC_OK);
  pcgc_sim_options o;
  pcgc_sim_options_default(&o);
  o.optimizer = PCGC_OPTIM_SGD;
  o.profile = u;
  pcgc_sim_result r;
  ck_assert_int_eq(pcgc_simulate(pg, &mp, &m, &o, &r, &err), PCGC_OK);
  ck_assert(r.profiled);
  ck_assert_int_eq(r.profile_kernels[PCGC_PROFILE_NONE], 2); /* linear, mse: no kernel of theirs measured */
  ck_assert_int_eq(r.profile_kernels[PCGC_PROFILE_MEASURED] + r.profile_kernels[PCGC_PROFILE_NEAREST], 0);
  ck_assert_int_eq(r.profile_updates[PCGC_PROFILE_NEAREST], 2); /* the weight's and the bias's */
  pcgc_sim_result_destroy(&r);
  o.profile = NULL;
  ck_assert_int_eq(pcgc_simulate(pg, &mp, &m, &o, &r, &err), PCGC_OK);
  ck_assert(!r.profiled && r.profile_updates[PCGC_PROFILE_NEAREST] == 0);
  pcgc_sim_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  pcgc_profile_free(u);
  pcgc_profile_free(p);
  pcgc_graph_free(s);
  pcgc_graph_free(g);
}
END_TEST

/* Points made by a known link: the fit finds it again; written and loaded
 * back it is the same; applied to cpu-4 its all-reduces over 4 devices take
 * the measured times (log-log between sizes), other groups the fitted link. */
START_TEST(links) {
  pcgc_error err = {0};
  pcgc_machine m;
  ck_assert_int_eq(pcgc_machine_load("cpu-4", &m, &err), PCGC_OK);
  pcgc_link truth = {3e9, 4e-6, true};
  pcgc_profile_link l = {.devices = 4};
  for (double b = 8; b <= 16777216; b *= 8, l.n_points++) {
    l.bytes[l.n_points] = b;
    l.seconds[l.n_points] = pcgc_profile_link_time(&m, &truth, 4, b);
  }
  double worst = 1;
  ck_assert_int_eq(pcgc_profile_fit_link(&m, &l, &worst, &err), PCGC_OK);
  ck_assert_msg(fabs(l.link.bandwidth / 3e9 - 1) < 1e-3 && fabs(l.link.latency / 4e-6 - 1) < 1e-3,
                "fitted %g B/s %g s", l.link.bandwidth, l.link.latency);
  ck_assert(worst < 1e-3 && l.link.shared);
  /* messages, where measured, are what the link is fitted to: latency + n / bandwidth */
  pcgc_profile_link ml = l;
  for (double b = 8; b <= 16777216; b *= 16, ml.n_msg++) {
    ml.msg_bytes[ml.n_msg] = b;
    ml.msg_seconds[ml.n_msg] = 2e-6 + b / 7e9;
  }
  ck_assert_int_eq(pcgc_profile_fit_link(&m, &ml, &worst, &err), PCGC_OK);
  ck_assert_msg(fabs(ml.link.bandwidth / 7e9 - 1) < 1e-3 && fabs(ml.link.latency / 2e-6 - 1) < 1e-3,
                "fitted to messages: %g B/s %g s", ml.link.bandwidth, ml.link.latency);
  ck_assert(worst < 1e-3);
  /* bad points */
  pcgc_profile_link one = l;
  one.n_points = 1;
  ck_assert_int_eq(pcgc_profile_fit_link(&m, &one, NULL, &err), PCGC_ERR_INVALID);
  one = l;
  one.seconds[2] = 0;
  ck_assert_int_eq(pcgc_profile_fit_link(&m, &one, NULL, &err), PCGC_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "not positive"));
  /* a measured curve unlike alpha-beta: 1 ms at 1 MiB, 10 ms at 4 MiB */
  l.n_points = 3;
  l.bytes[0] = 1024, l.bytes[1] = 1048576, l.bytes[2] = 4194304;
  l.seconds[0] = 20e-6, l.seconds[1] = 1e-3, l.seconds[2] = 10e-3;
  ck_assert_int_eq(pcgc_profile_fit_link(&m, &l, &worst, &err), PCGC_OK);
  ck_assert(worst > 0.1);
  l.n_msg = 2;
  l.msg_bytes[0] = 8, l.msg_bytes[1] = 65536;
  l.msg_seconds[0] = 1e-6, l.msg_seconds[1] = 2e-5;
  pcgc_profile *p = pcgc_profile_new("cpu-4");
  ck_assert_int_eq(pcgc_profile_add_link(p, &l, &err), PCGC_OK);
  pcgc_profile_link two = l;
  two.devices = 2;
  ck_assert_int_eq(pcgc_profile_add_link(p, &two, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_profile_add_link(p, &l, &err), PCGC_OK); /* replaces */
  ck_assert_int_eq(pcgc_profile_n_links(p), 2);
  char path[] = "/tmp/pcgc_links_XXXXXX";
  int fd = mkstemp(path);
  ck_assert(fd >= 0);
  close(fd);
  ck_assert_int_eq(pcgc_profile_write(p, path, &err), PCGC_OK);
  pcgc_profile *q = NULL;
  ck_assert_msg(pcgc_profile_load(path, &q, &err) == PCGC_OK, "%s", err.message);
  unlink(path);
  ck_assert_int_eq(pcgc_profile_n_links(q), 2);
  const pcgc_profile_link *r = pcgc_profile_link_for(q, &m);
  ck_assert_ptr_nonnull(r);
  ck_assert_int_eq(r->devices, 4);
  ck_assert_int_eq(r->n_points, 3);
  ck_assert(fabs(r->link.bandwidth / l.link.bandwidth - 1) < 1e-12 && fabs(r->link.latency / l.link.latency - 1) < 1e-12);
  ck_assert(r->link.shared);
  ck_assert(r->bytes[2] == 4194304 && r->seconds[1] == 1e-3);
  ck_assert(r->n_msg == 2 && r->msg_bytes[1] == 65536 && r->msg_seconds[0] == 1e-6);
  /* applied: all-reduces over the 4 devices take the measured times */
  pcgc_machine a = m;
  ck_assert_ptr_eq(pcgc_profile_apply_link(q, &a), r);
  pcgc_comm_group all = {1, 4, 1}, pair = {1, 2, 1};
  ck_assert_double_eq_tol(pcgc_comm_time(&a, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, all, 1048576), 1e-3, 1e-12);
  ck_assert_double_eq_tol(pcgc_comm_time(&a, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, all, 2097152), sqrt(10) * 1e-3, 1e-9);
  ck_assert_double_eq_tol(pcgc_comm_time(&a, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, all, 8388608), 20e-3, 1e-9);
  ck_assert_double_eq_tol(pcgc_comm_time(&a, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, all, 8), 20e-6, 1e-12);
  /* two devices, or another collective: the fitted link, not the curve */
  pcgc_machine fitted = m;
  fitted.intra = r->link;
  ck_assert_double_eq_tol(pcgc_comm_time(&a, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, pair, 1048576),
                          pcgc_comm_time(&fitted, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, pair, 1048576), 1e-15);
  ck_assert_double_eq_tol(pcgc_comm_time(&a, PCGC_COLL_ALL_GATHER, PCGC_ALGO_AUTO, all, 1048576),
                          pcgc_comm_time(&fitted, PCGC_COLL_ALL_GATHER, PCGC_ALGO_AUTO, all, 1048576), 1e-15);
  /* a machine of 8 per node has no link measured among 8 */
  pcgc_machine eight;
  ck_assert_int_eq(pcgc_machine_load("cpu-8", &eight, &err), PCGC_OK);
  pcgc_link before = eight.intra;
  ck_assert_ptr_null(pcgc_profile_apply_link(q, &eight));
  ck_assert(eight.intra.bandwidth == before.bandwidth && eight.allreduce.n_points == 0);
  pcgc_profile_free(q);
  pcgc_profile_free(p);
  /* malformed links, each by what is wrong */
  const char *head = "{\"format\": \"pcgc-profile\", \"version\": 2, \"machine\": \"cpu-4\", \"device\": null, "
                     "\"entries\": [], \"links\": ";
  const struct {
    const char *links, *says;
  } bad[] = {
      {"{}", "\"links\" must be an array"},
      {"[{\"devices\": 1, \"bandwidth\": 1e9, \"latency\": 0, \"shared\": true, \"points\": []}]", "\"devices\""},
      {"[{\"devices\": 2, \"bandwidth\": 0, \"latency\": 0, \"shared\": true, \"points\": []}]", "\"bandwidth\""},
      {"[{\"devices\": 2, \"bandwidth\": 1e9, \"latency\": -1, \"shared\": true, \"points\": []}]", "\"latency\""},
      {"[{\"devices\": 2, \"bandwidth\": 1e9, \"latency\": 0, \"shared\": 1, \"points\": []}]", "\"shared\""},
      {"[{\"devices\": 2, \"bandwidth\": 1e9, \"latency\": 0, \"shared\": true, \"points\": [[8]]}]", "point 0"},
      {"[{\"devices\": 2, \"bandwidth\": 1e9, \"latency\": 0, \"shared\": true, \"points\": [[8, 0]]}]", "point 0"},
      {"[{\"devices\": 2, \"bandwidth\": 1e9, \"latency\": 0, \"shared\": true, \"points\": [], \"messages\": 3}]",
       "\"messages\" must be an array"},
      {"[{\"devices\": 2, \"bandwidth\": 1e9, \"latency\": 0, \"shared\": true, \"points\": [], "
       "\"messages\": [[8, 1e-6], [-1, 1]]}]",
       "message 1 must be"},
      {"[{\"devices\": 2, \"bandwidth\": 1e9, \"latency\": 0, \"shared\": true, \"points\": []}, "
       "{\"devices\": 2, \"bandwidth\": 1e9, \"latency\": 0, \"shared\": true, \"points\": []}]",
       "a second link of 2"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[1024];
    snprintf(text, sizeof text, "%s%s}", head, bad[i].links);
    pcgc_profile *x = NULL;
    ck_assert_int_eq(pcgc_profile_parse(text, strlen(text), "links.json", &x, &err), PCGC_ERR_PARSE);
    ck_assert_msg(strstr(err.message, bad[i].says), "case %zu: %s", i, err.message);
    ck_assert_ptr_null(x);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("profile");
  TCase *tc = tcase_create("database");
  tcase_add_test(tc, write_load_find);
  tcase_add_test(tc, piece_dims);
  tcase_add_test(tc, malformed);
  tcase_add_test(tc, simulate_uses_profile);
  tcase_add_test(tc, simulate_uses_update_profile);
  tcase_add_test(tc, thread_device);
  tcase_add_test(tc, carried_between_devices);
  tcase_add_test(tc, gpu_precision);
  tcase_add_test(tc, nearest_kernel);
  tcase_add_test(tc, links);
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
