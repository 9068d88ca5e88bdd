/*
 * test_reference.c — the reference interpreter's contract beyond numbers:
 * bad input is reported with the operator's name (NaN/Inf, impossible
 * parallel types, shape mismatches at run time), misuse of the API is an
 * error, runs are deterministic per seed, and dropout in a data-parallel
 * graph draws the same mask as the sequential one.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

static pcgc_graph *parse(const char *text, pcgc_error *err) {
  return pcgc_model_parse(text, strlen(text), "test.pcg", NULL, err);
}

static const char *MLP =
    "const B = 4\n"
    "input x: f32[B, 6]\n"
    "input labels: i32[B]\n"
    "h = linear(x, out=8, act=relu)\n"
    "d = dropout(h, rate=0.5)\n"
    "logits = linear(d, out=3)\n"
    "loss = softmax_cross_entropy(logits, labels)\n";

static pcgc_reference *session(const pcgc_graph *g, uint64_t seed, pcgc_dtype dt) {
  pcgc_ref_options o;
  pcgc_ref_options_default(&o);
  o.seed = seed;
  o.dtype = dt;
  pcgc_error err;
  pcgc_reference *r = pcgc_ref_new(g, &o, &err);
  if (!r) ck_abort_msg("pcgc_ref_new: %s", err.message);
  return r;
}

START_TEST(test_nan_names_the_operator) {
  pcgc_error err;
  pcgc_graph *g = parse(MLP, &err);
  ck_assert_ptr_nonnull(g);
  pcgc_reference *r = session(g, 1, PCGC_F32);
  float w[6 * 8];
  for (int i = 0; i < 6 * 8; i++) w[i] = 0.1f;
  w[5] = NAN;
  ck_assert_int_eq(pcgc_ref_set(r, "h.weight", PCGC_F32, w, 6 * 8, &err), PCGC_OK);
  double loss;
  ck_assert_int_eq(pcgc_ref_forward(r, &loss, &err), PCGC_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "linear 'h' produced NaN or Inf"));
  /* an Inf input is caught at the first operator too */
  w[5] = 0.1f;
  ck_assert_int_eq(pcgc_ref_set(r, "h.weight", PCGC_F32, w, 6 * 8, &err), PCGC_OK);
  float x[4 * 6] = {0};
  x[3] = INFINITY;
  ck_assert_int_eq(pcgc_ref_set(r, "x", PCGC_F32, x, 4 * 6, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_ref_forward(r, &loss, &err), PCGC_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "'h'"));
  pcgc_ref_free(r);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_divergence_is_reported) {
  pcgc_error err;
  pcgc_graph *g = parse(MLP, &err);
  pcgc_ref_options o;
  pcgc_ref_options_default(&o);
  o.opt.lr = 1e30; /* guaranteed to blow up */
  pcgc_reference *r = pcgc_ref_new(g, &o, &err);
  ck_assert_ptr_nonnull(r);
  pcgc_status st = PCGC_OK;
  double loss;
  for (int i = 0; i < 5 && st == PCGC_OK; i++) st = pcgc_ref_train_step(r, &loss, &err);
  ck_assert_int_eq(st, PCGC_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "produced NaN or Inf"));
  ck_assert_ptr_nonnull(strstr(err.hint, "learning rate"));
  pcgc_ref_free(r);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_impossible_parallel_type_names_operator) {
  pcgc_error err;
  /* relu of partial sums: rejected while the graph is built, naming the op */
  pcgc_graph *g = parse("input x: f32[4, 6]\n"
                        "weight w: f32[6, 8]\n"
                        "xp = partition(x, dim=1, degree=2)\n"
                        "wp = partition(w, dim=0, degree=2)\n"
                        "p = matmul(xp, wp)\n"
                        "r = relu(p)\n",
                        &err);
  ck_assert_ptr_null(g);
  ck_assert_int_eq(err.line, 6);
  ck_assert_ptr_nonnull(strstr(err.message, "relu 'r'"));
  ck_assert_ptr_nonnull(strstr(err.message, "partial sum"));
  ck_assert_ptr_nonnull(strstr(err.hint, "reduce"));
}
END_TEST

START_TEST(test_runtime_shape_mismatch_names_operator) {
  /* a kernel given buffers that do not fit reports, it does not crash */
  float x[2 * 3] = {0}, w[4 * 5] = {0}, y[2 * 5];
  pcgc_buf in[2] = {{PCGC_F32, 2, {2, 3}, x}, {PCGC_F32, 2, {4, 5}, w}};
  pcgc_buf out = {PCGC_F32, 2, {2, 5}, y};
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_LINEAR);
  pcgc_error err;
  pcgc_error_clear(&err);
  ck_assert_int_ne(pcgc_cpu_forward(PCGC_OP_LINEAR, &a, 2, in, 1, &out, NULL, &err), PCGC_OK);
  ck_assert_ptr_nonnull(strstr(err.message, "linear"));
  /* parallel operators are not kernels */
  pcgc_attrs_init(&a, PCGC_OP_REPLICATE);
  ck_assert_int_ne(pcgc_cpu_forward(PCGC_OP_REPLICATE, &a, 1, in, 1, &out, NULL, &err), PCGC_OK);
  ck_assert_ptr_nonnull(strstr(err.message, "replicate"));
}
END_TEST

START_TEST(test_loss_requirements) {
  pcgc_error err;
  pcgc_graph *g = parse("input x: f32[4, 6]\nh = linear(x, out=3)\n", &err);
  ck_assert_ptr_nonnull(g);
  ck_assert_ptr_null(pcgc_ref_new(g, NULL, &err));
  ck_assert_ptr_nonnull(strstr(err.message, "no loss"));
  pcgc_graph_free(g);
  g = parse("input x: f32[4, 3]\ninput t: f32[4, 3]\nl1 = mse(x, t)\nl2 = mse(t, x)\n", &err);
  ck_assert_ptr_nonnull(g);
  ck_assert_ptr_null(pcgc_ref_new(g, NULL, &err));
  ck_assert_ptr_nonnull(strstr(err.message, "two losses"));
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_api_misuse) {
  pcgc_error err;
  pcgc_graph *g = parse(MLP, &err);
  pcgc_reference *r = session(g, 1, PCGC_F64);
  double buf[64];
  ck_assert_int_eq(pcgc_ref_backward(r, &err), PCGC_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "forward"));
  ck_assert_int_eq(pcgc_ref_update(r, &err), PCGC_ERR_INVALID);
  ck_assert_int_eq(pcgc_ref_get_grad(r, "h", PCGC_F64, buf, 32, &err), PCGC_ERR_INVALID);
  ck_assert_int_eq(pcgc_ref_set(r, "h", PCGC_F64, buf, 32, &err), PCGC_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "only inputs and weights"));
  ck_assert_int_eq(pcgc_ref_set(r, "x", PCGC_F64, buf, 5, &err), PCGC_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "24 elements"));
  double loss;
  ck_assert_int_eq(pcgc_ref_forward(r, &loss, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_ref_backward(r, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_ref_get_grad(r, "labels", PCGC_F64, buf, 4, &err), PCGC_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "integer"));
  pcgc_ref_options o;
  pcgc_ref_options_default(&o);
  o.dtype = PCGC_I32;
  ck_assert_ptr_null(pcgc_ref_new(g, &o, &err));
  pcgc_ref_free(r);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_deterministic_per_seed) {
  pcgc_error err;
  pcgc_graph *g = parse(MLP, &err);
  double l[3][4];
  uint64_t seeds[3] = {5, 5, 6};
  for (int k = 0; k < 3; k++) {
    pcgc_reference *r = session(g, seeds[k], PCGC_F32);
    for (int s = 0; s < 4; s++) ck_assert_int_eq(pcgc_ref_train_step(r, &l[k][s], &err), PCGC_OK);
    pcgc_ref_free(r);
  }
  for (int s = 0; s < 4; s++) ck_assert(l[0][s] == l[1][s]);
  ck_assert(l[0][0] != l[2][0]);
  ck_assert(l[0][3] < l[0][0]);
  pcgc_graph_free(g);
}
END_TEST

/* Dropout draws its mask from logical positions: the data-parallel graph
 * drops exactly the elements the sequential one drops. */
START_TEST(test_dropout_mask_is_the_same_in_parallel) {
  const char *seq = "const B = 8\ninput x: f32[B, 6]\ninput labels: i32[B]\n"
                    "weight w: f32[6, 3] = uniform(0.5)\n"
                    "d = dropout(x, rate=0.5)\n"
                    "logits = linear(d, w)\n"
                    "loss = softmax_cross_entropy(logits, labels)\n";
  const char *par = "const B = 8\ninput x: f32[B, 6]\ninput labels: i32[B]\n"
                    "weight w: f32[6, 3] = uniform(0.5)\n"
                    "xp = partition(x, dim=0, degree=4)\n"
                    "lp = partition(labels, dim=0, degree=4)\n"
                    "wr = replicate(w, degree=4)\n"
                    "d = dropout(xp, rate=0.5)\n"
                    "logits = linear(d, wr)\n"
                    "loss = softmax_cross_entropy(logits, lp)\n";
  pcgc_error err;
  pcgc_graph *gs = parse(seq, &err), *gp = parse(par, &err);
  ck_assert_ptr_nonnull(gs);
  ck_assert_ptr_nonnull(gp);
  pcgc_reference *rs = session(gs, 3, PCGC_F64), *rp = session(gp, 3, PCGC_F64);
  double ls, lp, a[48], b[48];
  ck_assert_int_eq(pcgc_ref_forward(rs, &ls, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_ref_forward(rp, &lp, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_ref_get(rs, "d", PCGC_F64, a, 48, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_ref_get(rp, "d", PCGC_F64, b, 48, &err), PCGC_OK);
  int zeros = 0;
  for (int i = 0; i < 48; i++) {
    ck_assert_double_eq_tol(a[i], b[i], 1e-15);
    zeros += a[i] == 0;
  }
  ck_assert_int_gt(zeros, 10); /* about half are dropped */
  ck_assert_int_lt(zeros, 38);
  ck_assert_double_eq_tol(ls, lp, 1e-12);
  pcgc_ref_free(rs);
  pcgc_ref_free(rp);
  pcgc_graph_free(gs);
  pcgc_graph_free(gp);
}
END_TEST

int main(void) {
  Suite *s = suite_create("reference");
  TCase *tc = tcase_create("reference");
  tcase_add_test(tc, test_nan_names_the_operator);
  tcase_add_test(tc, test_divergence_is_reported);
  tcase_add_test(tc, test_impossible_parallel_type_names_operator);
  tcase_add_test(tc, test_runtime_shape_mismatch_names_operator);
  tcase_add_test(tc, test_loss_requirements);
  tcase_add_test(tc, test_api_misuse);
  tcase_add_test(tc, test_deterministic_per_seed);
  tcase_add_test(tc, test_dropout_mask_is_the_same_in_parallel);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
