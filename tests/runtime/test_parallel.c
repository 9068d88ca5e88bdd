/*
 * test_parallel.c — parallel = sequential. Hand-built parallel versions of
 * the MLP, CNN, transformer block and embedding-bag models
 * (tests/data/parallel/ — data parallel x4, tensor parallel x2,
 * reduction parallel, attention split by heads, spatial and channel
 * partitions of convolutions, embedding tables sharded by rows and by
 * columns, pipelines of micro-batches) are trained for 3 steps in the
 * reference interpreter, with their operators running piece by piece, and
 * must give the same loss at every step and the same weights afterwards as
 * the sequential graph. Weights and synthetic data are drawn from (seed,
 * name), so both graphs start from identical values.
 *
 * Tolerances (relative to max(1, |value|)): f64 1e-9 — only summation
 * order differs, but a conv bias followed by batch norm has a gradient that
 * is zero up to rounding, and 3 momentum steps turn that rounding into
 * ~3e-10; f32 3e-5 after 3 steps. A wrong piece mapping gives errors of
 * 1e-2 and more.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

static pcgc_graph *load(const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/tests/data/parallel/%s", PCGC_SOURCE_DIR, name);
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_graph *g = pcgc_model_load(path, NULL, &err);
  if (!g) ck_abort_msg("%s: %s", path, err.message);
  return g;
}

typedef struct run {
  double loss[3];
} run;

/* Trains `g` for 3 steps; returns the run's session (caller frees). */
static pcgc_reference *train(const pcgc_graph *g, pcgc_dtype dt, pcgc_optimizer_kind opt, run *out) {
  pcgc_ref_options o;
  pcgc_ref_options_default(&o);
  o.dtype = dt;
  o.seed = 7;
  pcgc_optimizer_default(&o.opt, opt);
  if (opt == PCGC_SGD) {
    o.opt.lr = 0.1;
    o.opt.momentum = 0.9;
    o.opt.weight_decay = 0.01;
  } else {
    o.opt.lr = 0.01;
  }
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_reference *r = pcgc_ref_new(g, &o, &err);
  if (!r) ck_abort_msg("pcgc_ref_new: %s", err.message);
  for (int s = 0; s < 3; s++)
    if (pcgc_ref_train_step(r, &out->loss[s], &err) != PCGC_OK) ck_abort_msg("step %d: %s", s + 1, err.message);
  return r;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(1.0, fmax(fabs(a), fabs(b))); }

static void compare(const char *seq_file, const char *par_file, pcgc_dtype dt, pcgc_optimizer_kind opt) {
  double tol = dt == PCGC_F64 ? 1e-9 : 3e-5;
  pcgc_graph *gs = load(seq_file), *gp = load(par_file);
  run rs, rp;
  pcgc_reference *s = train(gs, dt, opt, &rs), *p = train(gp, dt, opt, &rp);
  for (int k = 0; k < 3; k++)
    ck_assert_msg(rel(rs.loss[k], rp.loss[k]) <= tol, "%s vs %s (%s): loss at step %d: %.12g vs %.12g", seq_file,
                  par_file, pcgc_dtype_name(dt), k + 1, rs.loss[k], rp.loss[k]);
  /* the loss must actually move, or the comparison proves little */
  ck_assert_msg(rs.loss[2] != rs.loss[0], "%s: training did not change the loss", seq_file);
  int weights = 0;
  for (int i = 0; i < gs->n_nodes; i++) {
    const pcgc_node *n = &gs->nodes[i];
    if (n->kind != PCGC_OP_WEIGHT) continue;
    ck_assert_msg(pcgc_graph_find(gp, n->name) >= 0, "%s has no weight '%s'", par_file, n->name);
    int64_t numel = pcgc_ptensor_numel(&n->out[0]);
    double *a = malloc((size_t)numel * sizeof *a), *b = malloc((size_t)numel * sizeof *b);
    pcgc_error err;
    ck_assert_int_eq(pcgc_ref_get(s, n->name, PCGC_F64, a, numel, &err), PCGC_OK);
    ck_assert_int_eq(pcgc_ref_get(p, n->name, PCGC_F64, b, numel, &err), PCGC_OK);
    for (int64_t e = 0; e < numel; e++)
      ck_assert_msg(rel(a[e], b[e]) <= tol, "%s vs %s (%s): weight %s[%lld] after 3 steps: %.12g vs %.12g", seq_file,
                    par_file, pcgc_dtype_name(dt), n->name, (long long)e, a[e], b[e]);
    free(a);
    free(b);
    weights++;
  }
  ck_assert_int_ge(weights, 4);
  pcgc_ref_free(s);
  pcgc_ref_free(p);
  pcgc_graph_free(gs);
  pcgc_graph_free(gp);
}

#define PAIR(test, seq, par)                                  \
  START_TEST(test) {                                          \
    compare(seq, par, PCGC_F64, PCGC_SGD);                    \
    compare(seq, par, PCGC_F32, PCGC_SGD);                    \
    compare(seq, par, PCGC_F64, PCGC_ADAM);                   \
  }                                                           \
  END_TEST

PAIR(test_mlp_data_parallel_4, "mlp.pcg", "mlp-dp4.pcg")
PAIR(test_mlp_tensor_parallel_2, "mlp.pcg", "mlp-tp2.pcg")
PAIR(test_mlp_reduction_parallel_2, "mlp.pcg", "mlp-reduction2.pcg")
PAIR(test_mlp_pipeline_4, "mlp.pcg", "mlp-pipe4.pcg")
PAIR(test_mlp_dp2_pipeline_2, "mlp.pcg", "mlp-dp2-pipe2.pcg")
PAIR(test_cnn_data_parallel_4, "cnn.pcg", "cnn-dp4.pcg")
PAIR(test_cnn_spatial_2, "cnn.pcg", "cnn-spatial2.pcg")
PAIR(test_cnn_channel_2, "cnn.pcg", "cnn-channel2.pcg")
PAIR(test_transformer_heads_and_megatron_mlp_2, "transformer.pcg", "transformer-tp2.pcg")
PAIR(test_embbag_rows_2, "embbag.pcg", "embbag-rows2.pcg")
PAIR(test_embbag_cols_2, "embbag.pcg", "embbag-cols2.pcg")
/* biased causal attention with dropout split by heads in its 10-input form
 * (bo after the reduce), and a Megatron MLP around a separate gelu op */
PAIR(test_transformer_bias_heads_and_gelu_mlp_2, "transformer-bias.pcg", "transformer-bias-tp2.pcg")

/* A parallel tensor really is held as pieces: the data-parallel MLP's first
 * layer output is 4 shards whose reassembly equals the sequential tensor. */
START_TEST(test_pieces_reassemble) {
  pcgc_graph *gs = load("mlp.pcg"), *gp = load("mlp-dp4.pcg");
  pcgc_ref_options o;
  pcgc_ref_options_default(&o);
  o.dtype = PCGC_F64;
  pcgc_error err;
  pcgc_reference *s = pcgc_ref_new(gs, &o, &err), *p = pcgc_ref_new(gp, &o, &err);
  ck_assert_ptr_nonnull(s);
  ck_assert_ptr_nonnull(p);
  double ls, lp;
  ck_assert_int_eq(pcgc_ref_forward(s, &ls, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_ref_forward(p, &lp, &err), PCGC_OK);
  double a[8 * 32], b[8 * 32];
  ck_assert_int_eq(pcgc_ref_get(s, "h1", PCGC_F64, a, 8 * 32, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_ref_get(p, "h1", PCGC_F64, b, 8 * 32, &err), PCGC_OK);
  for (int e = 0; e < 8 * 32; e++) ck_assert_double_eq_tol(a[e], b[e], 1e-12);
  ck_assert_double_eq_tol(ls, lp, 1e-12);
  ck_assert(ls > 0);
  /* wrong element count is an error, not a crash */
  ck_assert_int_eq(pcgc_ref_get(p, "h1", PCGC_F64, b, 7, &err), PCGC_ERR_INVALID);
  ck_assert_int_eq(pcgc_ref_get(p, "nope", PCGC_F64, b, 7, &err), PCGC_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "no tensor named 'nope'"));
  pcgc_ref_free(s);
  pcgc_ref_free(p);
  pcgc_graph_free(gs);
  pcgc_graph_free(gp);
}
END_TEST

int main(void) {
  Suite *s = suite_create("parallel");
  TCase *tc = tcase_create("parallel");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_mlp_data_parallel_4);
  tcase_add_test(tc, test_mlp_tensor_parallel_2);
  tcase_add_test(tc, test_mlp_reduction_parallel_2);
  tcase_add_test(tc, test_mlp_pipeline_4);
  tcase_add_test(tc, test_mlp_dp2_pipeline_2);
  tcase_add_test(tc, test_cnn_data_parallel_4);
  tcase_add_test(tc, test_cnn_spatial_2);
  tcase_add_test(tc, test_cnn_channel_2);
  tcase_add_test(tc, test_transformer_heads_and_megatron_mlp_2);
  tcase_add_test(tc, test_embbag_rows_2);
  tcase_add_test(tc, test_embbag_cols_2);
  tcase_add_test(tc, test_transformer_bias_heads_and_gelu_mlp_2);
  tcase_add_test(tc, test_pieces_reassemble);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
