/*
 * test_profile.c — the profile database (search/profile.c) and its use by
 * the simulator:
 *   - entries written with pcgc_profile_write load back equal, are found by
 *     their key and not by a key that differs in op, attributes, dtype or a
 *     shape; adding an existing key replaces its times;
 *   - keys of graph nodes use piece shapes;
 *   - malformed JSON, a wrong format tag and a bad entry are PCGC_ERR_PARSE
 *     with a message naming the file; a missing file is PCGC_ERR_IO;
 *   - with --profile (pcgc_sim_options.profile) a one-op model's simulated
 *     time moves from the roofline to the profiled value, exactly; so does
 *     a weight's optimizer update, and only for its own optimizer.
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

  pcgc_op_time t = {0, 0};
  ck_assert(pcgc_profile_node_time(q, g, y, &t));
  ck_assert(t.fwd == 1.25e-3 && t.bwd == 2.5e-3);
  ck_assert(!pcgc_profile_node_time(q, g, pcgc_graph_find(g, "loss"), &t));
  ck_assert(!pcgc_profile_node_time(NULL, g, y, &t));

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
  expect_parse_error("{\"format\": \"pcgc-profile\", \"version\": 2, \"machine\": \"m\", \"entries\": []}", "version", 0);
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

  /* an entry for other shapes does not apply */
  pcgc_profile *q = pcgc_profile_new("cpu-local");
  e.dims[0][0] = 9;
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
  ck_assert(pcgc_profile_update_time(p, PCGC_OPTIM_SGD, &g->nodes[w].out[0], &sec) && sec == 6e-3);
  ck_assert(!pcgc_profile_update_time(p, PCGC_OPTIM_ADAM, &g->nodes[w].out[0], &sec));

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
  ck_assert(pcgc_profile_update_time(r, PCGC_OPTIM_ADAM, &g->nodes[w].out[0], &sec) && sec == 5e-3);
  unlink(path);
  pcgc_profile_free(r);
  pcgc_profile_free(q);
  pcgc_profile_free(p);
  pcgc_graph_free(g);
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
