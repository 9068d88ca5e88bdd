/*
 * test_check.c — soundness checking by execution (substitutions/check.c):
 *   - sound rules pass with instances and executions counted: a fusion, a
 *     partition with its combine, a rule over partial-sum inputs, a
 *     multi-output merge;
 *   - plausible wrong rules fail with the instance, the seed and the first
 *     differing element: linear+sigmoid fused as linear+relu, a combine on
 *     the wrong dim, a scalar added to each partial sum;
 *   - a rewrite that does not type-check where the match does (a missing
 *     divisibility condition), yields of another parallel type, and rules
 *     with no instance at all are failures too;
 *   - pcgc_ruleset_verify removes unsound rules unless allowed;
 *   - instantiation counts degree x dim bindings and drops the ones a
 *     parameter-only condition rules out.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "substitutions.h"

#include "../common/check_main.h"

static pcgc_ruleset *parse(const char *text) {
  pcgc_ruleset *rs = pcgc_ruleset_new();
  pcgc_error err = {0};
  ck_assert_msg(pcgc_ruleset_parse(rs, text, strlen(text), "test.rules", &err) == PCGC_OK, "%d:%d: %s", err.line,
                err.col, err.message);
  return rs;
}

static pcgc_check_result check1(const char *text) {
  pcgc_ruleset *rs = parse(text);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 1);
  pcgc_check_result res;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_rule_check(pcgc_ruleset_rule(rs, 0), NULL, &res, &err), PCGC_OK);
  pcgc_ruleset_free(rs);
  return res;
}

#define SOUND(text)                                                                   \
  do {                                                                                \
    pcgc_check_result r_ = check1(text);                                              \
    ck_assert_msg(r_.ok, "expected sound, got: %s", r_.message);                      \
    ck_assert_int_gt(r_.instances, 0);                                                \
    ck_assert_int_ge(r_.executions, r_.instances);                                    \
  } while (0)

#define UNSOUND(text, want)                                                           \
  do {                                                                                \
    pcgc_check_result r_ = check1(text);                                              \
    ck_assert_msg(!r_.ok, "expected unsound");                                        \
    ck_assert_msg(strstr(r_.message, want) != NULL, "message lacks '%s': %s", want, r_.message); \
  } while (0)

static const char *FUSE_RELU =
    "rule fuse {\n"
    "  match { input x: [B, K], w: [K, N], b: [N]; y = linear(x, w, b, act=none); r = relu(y); yield r; }\n"
    "  rewrite { f = linear(x, w, b, y.*, act=relu); yield f; }\n"
    "}\n";

START_TEST(sound_rules) {
  SOUND(FUSE_RELU);
  SOUND("rule part_relu(d: degree, k: dim) {\n"
        "  match { input x; y = relu(x); yield y; }\n"
        "  where { k < rank(x); size(x, k) % d == 0; }\n"
        "  rewrite { p = partition(x, dim=k, degree=d); q = relu(p); c = combine(q, dim=k, degree=d); yield c; }\n"
        "}\n");
  /* partial sums: scaling commutes with the reduce */
  SOUND("rule scale_reduce(d: degree) {\n"
        "  match { input x: [A, C] {sum=d}; r = reduce(x, degree=d); m = scalar_mul(r, scalar=3); yield m; }\n"
        "  rewrite { m2 = scalar_mul(x, scalar=3); r2 = reduce(m2, degree=d); yield r2; }\n"
        "}\n");
  /* two linears reading one x become one linear and a split */
  SOUND("rule merge {\n"
        "  match { input x: [B, K], w1: [K, N1], w2: [K, N2];\n"
        "          y1 = linear(x, w1, act=none); y2 = linear(x, w2, act=none); yield y1, y2; }\n"
        "  rewrite { w = concat(w1, w2, axis=1); y = linear(x, w); z1, z2 = split(y, axis=1, sizes=[N1, N2]);\n"
        "            yield z1, z2; }\n"
        "}\n");
}
END_TEST

START_TEST(wrong_rules) {
  UNSOUND("rule fuse_sigmoid_as_relu {\n"
          "  match { input x: [B, K], w: [K, N]; y = linear(x, w, act=none); r = sigmoid(y); yield r; }\n"
          "  rewrite { f = linear(x, w, y.*, act=relu); yield f; }\n"
          "}\n",
          "differs at [");
  pcgc_check_result r = check1("rule fuse_sigmoid_as_relu {\n"
                               "  match { input x: [B, K], w: [K, N]; y = linear(x, w, act=none); r = sigmoid(y); yield r; }\n"
                               "  rewrite { f = linear(x, w, y.*, act=relu); yield f; }\n"
                               "}\n");
  ck_assert_msg(strstr(r.message, "instance B=") && strstr(r.message, "seed "), "%s", r.message);
  /* the combine joins the other dim: inference refuses it for every instance */
  UNSOUND("rule wrong_dim(d: degree) {\n"
          "  match { input x: [A, A]; y = relu(x); yield y; }\n"
          "  where { A % d == 0; d > 1; }\n"
          "  rewrite { p = partition(x, dim=0, degree=d); q = relu(p); c = combine(q, dim=1, degree=d); yield c; }\n"
          "}\n",
          "combine 'c'");
  /* a transpose of a square tensor dropped: right types, wrong values */
  UNSOUND("rule drop_square_transpose {\n"
          "  match { input x: [A, A]; t = transpose(x, perm=[1, 0]); r = relu(t); yield r; }\n"
          "  rewrite { r2 = relu(x); yield r2; }\n"
          "}\n",
          "differs at [");
  /* adding a scalar to every partial sum adds it d times */
  UNSOUND("rule shift_reduce(d: degree) {\n"
          "  match { input x: [A, C] {sum=d}; r = reduce(x, degree=d); m = scalar_add(r, scalar=1); yield m; }\n"
          "  where { d > 1; }\n"
          "  rewrite { m2 = scalar_add(x, scalar=1); r2 = reduce(m2, degree=d); yield r2; }\n"
          "}\n",
          "instance d=");
}
END_TEST

START_TEST(type_failures) {
  /* no divisibility condition: the partition is illegal for some instance */
  UNSOUND("rule part_no_cond(d: degree) {\n"
          "  match { input x: [A, C]; y = relu(x); yield y; }\n"
          "  rewrite { p = partition(x, dim=0, degree=d); q = relu(p); c = combine(q, dim=0, degree=d); yield c; }\n"
          "}\n",
          "the match type-checks but the rewrite does not");
  /* the rewrite forgets the combine: its yield is sharded */
  UNSOUND("rule no_combine(d: degree) {\n"
          "  match { input x: [A, C]; y = relu(x); yield y; }\n"
          "  where { A % d == 0; d > 1; }\n"
          "  rewrite { p = partition(x, dim=0, degree=d); q = relu(p); yield q; }\n"
          "}\n",
          "has type");
  UNSOUND("rule never(d: degree) {\n"
          "  match { input x; y = relu(x); yield y; }\n"
          "  where { d > 100; }\n"
          "  rewrite { z = relu(x); yield z; }\n"
          "}\n",
          "no instance found");
}
END_TEST

START_TEST(verify_removes_unsound) {
  char text[2048];
  snprintf(text, sizeof text,
           "%s"
           "rule bad {\n"
           "  match { input x: [B, K], w: [K, N]; y = linear(x, w, act=none); r = tanh(y); yield r; }\n"
           "  rewrite { f = linear(x, w, y.*, act=sigmoid); yield f; }\n"
           "}\n",
           FUSE_RELU);
  pcgc_ruleset *rs = parse(text);
  pcgc_error err = {0};
  int unsound = -1;
  int64_t runs = 0;
  ck_assert_int_eq(pcgc_ruleset_verify(rs, NULL, true, NULL, &unsound, &runs, &err), PCGC_OK);
  ck_assert_int_eq(unsound, 1);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 2); /* allowed: kept */
  ck_assert_int_gt(runs, 0);
  ck_assert_int_eq(pcgc_ruleset_verify(rs, NULL, false, NULL, &unsound, NULL, &err), PCGC_OK);
  ck_assert_int_eq(unsound, 1);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 1);
  ck_assert_str_eq(pcgc_rule_name(pcgc_ruleset_rule(rs, 0)), "fuse");
  pcgc_ruleset_free(rs);
}
END_TEST

START_TEST(instantiation) {
  int64_t deg[16];
  ck_assert_int_eq(pcgc_rules_machine_degrees(8, deg, 16), 3);
  ck_assert(deg[0] == 2 && deg[1] == 4 && deg[2] == 8);
  ck_assert_int_eq(pcgc_rules_machine_degrees(12, deg, 16), 5); /* 2 3 4 6 12 */
  ck_assert_int_eq(pcgc_rules_machine_degrees(1, deg, 16), 0);
  pcgc_ruleset *rs = parse("rule a(d: degree, k: dim) {\n"
                           "  match { input x; y = relu(x); yield y; }\n"
                           "  where { k < rank(x); size(x, k) % d == 0; }\n"
                           "  rewrite { p = partition(x, dim=k, degree=d); q = relu(p); c = combine(q, dim=k, degree=d); yield c; }\n"
                           "}\n"
                           "rule b(d: degree) {\n"
                           "  match { input x; y = relu(x); yield y; }\n"
                           "  where { d <= 4; }\n"
                           "  rewrite { r = replicate(x, degree=d); q = relu(r); s = reduce(q, degree=d); yield s; }\n"
                           "}\n"
                           "rule c {\n"
                           "  match { input x; y = identity(x); yield y; }\n"
                           "  rewrite { yield x; }\n"
                           "}\n");
  pcgc_rule_inst *ri = NULL;
  int n = 0;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_ruleset_instantiate(rs, deg, pcgc_rules_machine_degrees(8, deg, 16), 4, &ri, &n, &err),
                   PCGC_OK);
  /* a: 3 degrees x 4 dims; b: degrees 2 and 4 (d <= 4); c: one */
  ck_assert_int_eq(n, 12 + 2 + 1);
  ck_assert_int_eq(ri[0].params[0], 2);
  ck_assert_int_eq(ri[0].params[1], 0);
  ck_assert_int_eq(ri[11].params[0], 8);
  ck_assert_int_eq(ri[11].params[1], 3);
  ck_assert_int_eq(ri[13].params[0], 4);
  free(ri);
  pcgc_ruleset_free(rs);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("check");
  TCase *tc = tcase_create("check");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, sound_rules);
  tcase_add_test(tc, wrong_rules);
  tcase_add_test(tc, type_failures);
  tcase_add_test(tc, verify_removes_unsound);
  tcase_add_test(tc, instantiation);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(suite)
