/*
 * test_library.c — the shipped rule library (rules/) on small models, one
 * rule per family: fusion, algebraic, parallelisation (data, Megatron-style
 * tensor, reduction), simplification of parallel operators. For each, a
 * model where it must match (the exact number of matches) and a near miss
 * where it must not; every match is applied, and the rewritten model
 * computes the same loss and the same weight gradients as the original in
 * the reference interpreter (f64), which is what "no rule may change what a
 * model computes" means for a whole model.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "library_helpers.h"

#include "../common/check_main.h"


static pcgc_graph *model(const char *text) {
  pcgc_error err = {0};
  pcgc_graph *g = pcgc_model_parse(text, strlen(text), "inline.pcg", NULL, &err);
  ck_assert_msg(g != NULL, "%d:%d: %s", err.line, err.col, err.message);
  ck_assert_int_eq(pcgc_graph_infer(g, &err), PCGC_OK);
  return g;
}

typedef struct collect {
  pcgc_match m[64];
  int n;
} collect;

static bool on_match(const pcgc_match *m, void *ctx) {
  collect *c = ctx;
  if (c->n < 64) c->m[c->n++] = *m;
  return false;
}


/* Instance of `rule` with these parameters; its matches in g (expected
 * `want`); each applied and compared numerically with g. */
static void expect_matches(const pcgc_graph *g, const char *rule, const int64_t *params, int want) {
  const pcgc_rule *r = pcgc_ruleset_find(lib, rule);
  ck_assert_msg(r != NULL, "the library has no rule '%s'", rule);
  pcgc_rule_inst ri;
  memset(&ri, 0, sizeof ri);
  ri.rule = r;
  for (int p = 0; p < pcgc_rule_num_params(r); p++) ri.params[p] = params[p];
  pcgc_error err = {0};
  pcgc_graph_index *ix = pcgc_graph_index_new(g, &err);
  ck_assert(ix != NULL);
  static collect c;
  c.n = 0;
  ck_assert_int_eq(pcgc_rule_find_matches(&ri, g, ix, on_match, &c, &err), PCGC_OK);
  ck_assert_msg(c.n == want, "%s: %d matches, expected %d", rule, c.n, want);
  static double g0[1 << 16], g1[1 << 16];
  double l0, l1;
  int64_t n0, n1;
  if (c.n) run(g, &l0, g0, 1 << 16, &n0);
  for (int i = 0; i < c.n; i++) {
    pcgc_graph *out = NULL;
    ck_assert_msg(pcgc_rule_apply(g, &c.m[i], &out, &err) == PCGC_OK, "%s: %s", rule, err.message);
    run(out, &l1, g1, 1 << 16, &n1);
    ck_assert_msg(fabs(l0 - l1) <= 1e-9 * fmax(1, fabs(l0)), "%s changed the loss: %.17g -> %.17g", rule, l0, l1);
    ck_assert_int_eq(n0, n1);
    for (int64_t k = 0; k < n0; k++)
      ck_assert_msg(fabs(g0[k] - g1[k]) <= 1e-9 * fmax(1, fabs(g0[k])), "%s changed a weight gradient", rule);
    pcgc_graph_free(out);
  }
  pcgc_graph_index_free(ix);
}

static const char *MLP =
    "model m\n"
    "input x: f32[8, 6]\n"
    "input t: f32[8, 4]\n"
    "h = linear(x, out=12)\n"
    "r = relu(h)\n"
    "y = linear(r, out=4)\n"
    "loss = mse(y, t)\n";

START_TEST(fusion) {
  pcgc_graph *g = model(MLP);
  const int64_t none[1] = {0};
  expect_matches(g, "fuse_linear_bias_relu", none, 1);
  expect_matches(g, "fuse_linear_bias_gelu", none, 0); /* near miss: relu, not gelu */
  pcgc_graph_free(g);
  /* near miss: the linear's output is also read elsewhere */
  g = model("model m\ninput x: f32[8, 6]\ninput t: f32[8, 12]\n"
            "h = linear(x, out=12)\nr = relu(h)\ns = add(r, h)\nloss = mse(s, t)\n");
  expect_matches(g, "fuse_linear_bias_relu", none, 0);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(algebraic) {
  const int64_t none[1] = {0};
  pcgc_graph *g = model("model m\ninput x: f32[8, 6]\ninput t: f32[8, 5]\n"
                        "a = linear(x, out=3)\nb = linear(x, out=5)\nc = linear(a, out=5)\n"
                        "s = add(b, c)\nloss = mse(s, t)\n");
  expect_matches(g, "merge_linear_bias_pair", none, 2); /* (a, b) and (b, a) */
  pcgc_graph_free(g);
  /* near miss: the two linears read different tensors */
  g = model("model m\ninput x: f32[8, 6]\ninput z: f32[8, 6]\ninput t: f32[8, 5]\n"
            "a = linear(x, out=5)\nb = linear(z, out=5)\ns = add(a, b)\nloss = mse(s, t)\n");
  expect_matches(g, "merge_linear_bias_pair", none, 0);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(parallelisation) {
  pcgc_graph *g = model(MLP);
  const int64_t d2k0[2] = {2, 0}, d3k0[2] = {3, 0}, d4[1] = {4}, d5[1] = {5};
  expect_matches(g, "partition_linear_bias_batch", d2k0, 2);   /* both linears, batch 8 / 2 */
  expect_matches(g, "partition_linear_bias_batch", d3k0, 0);   /* near miss: 8 % 3 != 0 */
  expect_matches(g, "megatron_mlp_bias", d4, 0);               /* near miss: relu between them */
  expect_matches(g, "partition_relu", d2k0, 1);
  pcgc_graph_free(g);
  g = model("model m\ninput x: f32[8, 6]\ninput t: f32[8, 4]\n"
            "h = linear(x, out=12, act=relu)\ny = linear(h, out=4)\nloss = mse(y, t)\n");
  expect_matches(g, "megatron_mlp_bias", d4, 1);               /* hidden 12 split 4 ways */
  expect_matches(g, "megatron_mlp_bias", d5, 0);               /* near miss: 12 % 5 != 0 */
  pcgc_graph_free(g);
}
END_TEST

START_TEST(simplification) {
  const int64_t d2k0[2] = {2, 0}, d2k1[2] = {2, 1};
  pcgc_graph *g = model("model m\ninput x: f32[8, 6]\ninput t: f32[8, 6]\n"
                        "p = partition(x, dim=0, degree=2)\nr = relu(p)\nc = combine(r, dim=0, degree=2)\n"
                        "q = partition(c, dim=0, degree=2)\ns = relu(q)\ne = combine(s, dim=0, degree=2)\n"
                        "loss = mse(e, t)\n");
  expect_matches(g, "combine_partition_cancel", d2k0, 1);
  expect_matches(g, "combine_partition_cancel", d2k1, 0); /* near miss: another dim */
  expect_matches(g, "relu_combine_sink", d2k0, 0);         /* relu reads the partition, not a combine */
  pcgc_graph_free(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("library");
  TCase *tc = tcase_create("families");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, load_library, free_library);
  tcase_add_test(tc, fusion);
  tcase_add_test(tc, algebraic);
  tcase_add_test(tc, parallelisation);
  tcase_add_test(tc, simplification);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(suite)
