/*
 * test_library_megatron.c — the Megatron rules for attention with biases
 * (megatron_self_attention_biases, megatron_attention_biases: split by heads
 * in attention's 10-input form, bo added after the reduce) and for MLPs with
 * a separate activation op (megatron_mlp_gelu_op and the bias-free
 * *_op_no_bias rules).
 *
 *  - they match every layer of the zoo's BERT-Large (24 biased
 *    self-attentions, fused-GELU MLPs that megatron_mlp_bias already covers)
 *    and GPT-3 2.7B (32 biased causal self-attentions, 32 up -> gelu -> down
 *    MLPs) at the tensor-parallel degree 8 of a DGX, and not where the heads
 *    or the hidden width do not divide;
 *  - on a small GPT-style block with non-zero biases every match, applied,
 *    gives the same loss and weight gradients in the reference interpreter
 *    (f64) as the original.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "library_helpers.h"


static pcgc_graph *model_text(const char *text) {
  pcgc_error err = {0};
  pcgc_graph *g = pcgc_model_parse(text, strlen(text), "inline.pcg", NULL, &err);
  ck_assert_msg(g != NULL, "%d:%d: %s", err.line, err.col, err.message);
  ck_assert_int_eq(pcgc_graph_infer(g, &err), PCGC_OK);
  return g;
}

static pcgc_graph *model_file(const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/models/%s", PCGC_SOURCE_DIR, name);
  pcgc_error err = {0};
  pcgc_graph *g = pcgc_model_load(path, NULL, &err);
  ck_assert_msg(g != NULL, "%s: %s", path, err.message);
  return g;
}

#define MAX_MATCHES 64

typedef struct collect {
  pcgc_rule_inst ri; /* the matches point at it */
  pcgc_match m[MAX_MATCHES];
  int n;             /* all matches, also those past MAX_MATCHES */
} collect;

static bool on_match(const pcgc_match *m, void *ctx) {
  collect *c = ctx;
  if (c->n < MAX_MATCHES) c->m[c->n] = *m;
  c->n++;
  return false;
}

/* Matches of `rule` with degree d in g. */
static int find(const pcgc_graph *g, const char *rule, int64_t d, collect *c) {
  const pcgc_rule *r = pcgc_ruleset_find(lib, rule);
  ck_assert_msg(r != NULL, "the library has no rule '%s'", rule);
  ck_assert_int_eq(pcgc_rule_num_params(r), 1);
  memset(&c->ri, 0, sizeof c->ri);
  c->ri.rule = r;
  c->ri.params[0] = d;
  pcgc_error err = {0};
  pcgc_graph_index *ix = pcgc_graph_index_new(g, &err);
  ck_assert(ix != NULL);
  c->n = 0;
  ck_assert_msg(pcgc_rule_find_matches(&c->ri, g, ix, on_match, c, &err) == PCGC_OK, "%s: %s", rule, err.message);
  pcgc_graph_index_free(ix);
  return c->n;
}

static void expect_count(const pcgc_graph *g, const char *rule, int64_t d, int want) {
  static collect c;
  int n = find(g, rule, d, &c);
  ck_assert_msg(n == want, "%s(d=%lld) on %s: %d matches, expected %d", rule, (long long)d, g->name, n, want);
}


/* `want` matches of rule(d) in g, each applied and compared with g numerically. */
static void expect_sound_matches(const pcgc_graph *g, const char *rule, int64_t d, int want) {
  static collect c;
  int n = find(g, rule, d, &c);
  ck_assert_msg(n == want, "%s(d=%lld): %d matches, expected %d", rule, (long long)d, n, want);
  ck_assert_int_le(n, MAX_MATCHES);
  static double g0[1 << 14], g1[1 << 14];
  double l0 = 0, l1;
  int64_t n0 = 0, n1;
  if (n) run(g, &l0, g0, 1 << 14, &n0);
  for (int i = 0; i < n; i++) {
    pcgc_graph *out = NULL;
    pcgc_error err = {0};
    ck_assert_msg(pcgc_rule_apply(g, &c.m[i], &out, &err) == PCGC_OK, "%s: %s", rule, err.message);
    run(out, &l1, g1, 1 << 14, &n1);
    ck_assert_msg(fabs(l0 - l1) <= 1e-9 * fmax(1, fabs(l0)), "%s changed the loss: %.17g -> %.17g", rule, l0, l1);
    ck_assert_int_eq(n0, n1);
    for (int64_t k = 0; k < n0; k++)
      ck_assert_msg(fabs(g0[k] - g1[k]) <= 1e-9 * fmax(1, fabs(g0[k])), "%s changed weight gradient %lld: %g -> %g",
                    rule, (long long)k, g0[k], g1[k]);
    pcgc_graph_free(out);
  }
}

START_TEST(bert_large) {
  pcgc_graph *g = model_file("bert-large.pcg");
  expect_count(g, "megatron_self_attention_biases", 8, 24);  /* 16 heads */
  expect_count(g, "megatron_attention_biases", 8, 24);       /* q = k = v binds too */
  expect_count(g, "megatron_self_attention_biases", 32, 0);  /* near miss: 16 % 32 */
  expect_count(g, "megatron_self_attention_bias", 8, 0);     /* its attention has bo inside */
  expect_count(g, "megatron_mlp_bias", 8, 25);               /* 24 fused-GELU MLPs + pooler -> classifier */
  expect_count(g, "megatron_mlp_gelu_op", 8, 0);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(gpt_3b) {
  pcgc_graph *g = model_file("gpt-3b.pcg");
  expect_count(g, "megatron_self_attention_biases", 8, 32);  /* 32 causal heads */
  expect_count(g, "megatron_self_attention_biases", 64, 0);  /* near miss: 32 % 64 */
  expect_count(g, "megatron_mlp_gelu_op", 8, 32);            /* up -> gelu(approximate) -> down */
  expect_count(g, "megatron_mlp_gelu_op", 3, 0);             /* near miss: 10240 % 3 */
  expect_count(g, "megatron_mlp_bias", 8, 0);                /* near miss: the gelu op between */
  expect_count(g, "megatron_mlp_gelu_op_no_bias", 8, 0);     /* near miss: the linears have biases */
  pcgc_graph_free(g);
}
END_TEST

/* One pre-LN GPT block with explicit, non-zero biases (the model format's
 * attention creates zero biases, which would hide a misplaced one). */
static const char *GPT_BLOCK =
    "model gpt_block\n"
    "input x: f32[2, 4, 8]\n"
    "input t: f32[2, 4, 8]\n"
    "weight wq: f32[8, 8] = uniform(0.4)\n"
    "weight wk: f32[8, 8] = uniform(0.4)\n"
    "weight wv: f32[8, 8] = uniform(0.4)\n"
    "weight wo: f32[8, 8] = uniform(0.4)\n"
    "weight bq: f32[8] = uniform(0.3)\n"
    "weight bk: f32[8] = uniform(0.3)\n"
    "weight bv: f32[8] = uniform(0.3)\n"
    "weight bo: f32[8] = uniform(0.3)\n"
    "weight w1: f32[8, 12] = uniform(0.4)\n"
    "weight b1: f32[12] = uniform(0.3)\n"
    "weight w2: f32[12, 8] = uniform(0.4)\n"
    "weight b2: f32[8] = uniform(0.3)\n"
    "n = layernorm(x)\n"
    "a = attention(n, n, n, wq, wk, wv, wo, bq, bk, bv, bo, heads=4, causal=true, dropout=0.1)\n"
    "r = add(x, a)\n"
    "up = linear(r, w1, b1)\n"
    "g = gelu(up, approximate=true)\n"
    "down = linear(g, w2, b2)\n"
    "loss = mse(down, t)\n";

START_TEST(small_block_numerics) {
  pcgc_graph *g = model_text(GPT_BLOCK);
  expect_sound_matches(g, "megatron_self_attention_biases", 2, 1);
  expect_sound_matches(g, "megatron_self_attention_biases", 4, 1);
  expect_sound_matches(g, "megatron_self_attention_biases", 8, 0); /* near miss: 4 heads */
  expect_sound_matches(g, "megatron_attention_biases", 2, 1);
  expect_sound_matches(g, "megatron_mlp_gelu_op", 2, 1);
  expect_sound_matches(g, "megatron_mlp_gelu_op", 4, 1);
  expect_sound_matches(g, "megatron_mlp_gelu_op", 5, 0);           /* near miss: 12 % 5 */
  pcgc_graph_free(g);
  /* the bias-free MLPs with a separate activation op */
  g = model_text("model m\ninput x: f32[6, 8]\ninput t: f32[6, 4]\n"
                 "weight w1: f32[8, 12] = uniform(0.4)\nweight w2: f32[12, 4] = uniform(0.4)\n"
                 "weight w3: f32[4, 12] = uniform(0.4)\nweight w4: f32[12, 4] = uniform(0.4)\n"
                 "h = linear(x, w1)\nr = relu(h)\ny = linear(r, w2)\n"
                 "h2 = linear(y, w3)\ng = gelu(h2)\ny2 = linear(g, w4)\nloss = mse(y2, t)\n");
  expect_sound_matches(g, "megatron_mlp_relu_op_no_bias", 2, 1);
  expect_sound_matches(g, "megatron_mlp_gelu_op_no_bias", 3, 1);
  expect_sound_matches(g, "megatron_mlp_gelu_op", 2, 0);           /* near miss: no biases */
  pcgc_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("library_megatron");
  TCase *tc = tcase_create("megatron");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, load_library, free_library);
  tcase_add_test(tc, bert_large);
  tcase_add_test(tc, gpt_3b);
  tcase_add_test(tc, small_block_numerics);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
