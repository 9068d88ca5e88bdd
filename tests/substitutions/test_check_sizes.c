/*
 * test_check_sizes.c — the checker covers the integer size space
 * (substitutions/check.c, issue 17):
 *   - two wrong rules the old small-set checker (sizes from {1, 2, 3, 4, 6,
 *     8, 12}) reported sound are refused: halves of N as N / 2 and N / 2
 *     (wrong only at odd N, and the rule asks N >= 4), and a head of
 *     ceil(N / 10) rows computed as N / 10 + 1 (wrong only where N / 10
 *     changes); the failure names the instance's classes;
 *   - their correct versions pass, covering odd sizes above 4, primes, both
 *     sides of the `where` bound, both sides of each division's steps, random
 *     values and random combinations; a partition of an unshaped input covers
 *     the steps of size(x, k) % d;
 *   - the budget bounds the instances, a seed reproduces them, the verbose
 *     log ends each rule with a summary of its classes;
 *   - attributes the match leaves open are tried at other values ("attr")
 *     and rules with a dropout run in training mode ("training"), where a
 *     dropout moved with y.* draws the matched node's mask.
 */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "substitutions.h"

#include "../common/check_main.h"

#define CLS(c) (1u << (c))

static pcgc_check_result check_with(const char *text, const pcgc_check_options *o) {
  pcgc_ruleset *rs = pcgc_ruleset_new();
  pcgc_error err = {0};
  ck_assert_msg(pcgc_ruleset_parse(rs, text, strlen(text), "test.rules", &err) == PCGC_OK, "%d:%d: %s", err.line,
                err.col, err.message);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 1);
  pcgc_check_result res;
  ck_assert_int_eq(pcgc_rule_check(pcgc_ruleset_rule(rs, 0), o, &res, &err), PCGC_OK);
  pcgc_ruleset_free(rs);
  return res;
}

static pcgc_check_result check1(const char *text) { return check_with(text, NULL); }

static void assert_classes(const pcgc_check_result *r, unsigned want) {
  char have[256], need[256];
  pcgc_check_classes_format(have, sizeof have, r->classes);
  pcgc_check_classes_format(need, sizeof need, want);
  ck_assert_msg((r->classes & want) == want, "classes covered: %s; wanted at least: %s", have, need);
}

/* The halves of a split: N / 2 twice is wrong for every odd N, but with
 * N >= 4 the old checker only ever drew 4, 6, 8 or 12. */
static const char *HALVES_WRONG =
    "rule relu_halves_odd {\n"
    "  match { input x: [N, C]; y = relu(x); yield y; }\n"
    "  where { N >= 4; }\n"
    "  rewrite { a, b = split(x, axis=0, sizes=[N / 2, N / 2]); ra = relu(a); rb = relu(b);\n"
    "            c = concat(ra, rb, axis=0); yield c; }\n"
    "}\n";
static const char *HALVES_RIGHT =
    "rule relu_halves {\n"
    "  match { input x: [N, C]; y = relu(x); yield y; }\n"
    "  where { N >= 4; }\n"
    "  rewrite { a, b = split(x, axis=0, sizes=[N - N / 2, N / 2]); ra = relu(a); rb = relu(b);\n"
    "            c = concat(ra, rb, axis=0); yield c; }\n"
    "}\n";

/* ceil(N / 10) as N / 10 + 1: one row too many exactly when 10 divides N,
 * which no size of the old set did. */
static const char *CEIL_WRONG =
    "rule relu_head_ceil_wrong {\n"
    "  match { input x: [N, C]; h, t = split(x, axis=0, sizes=[(N + 9) / 10, N - (N + 9) / 10]);\n"
    "          r = relu(h); yield r, t; }\n"
    "  rewrite { h2, t2 = split(x, axis=0, sizes=[N / 10 + 1, N - N / 10 - 1]); r2 = relu(h2); yield r2, t2; }\n"
    "}\n";
static const char *CEIL_RIGHT =
    "rule relu_head_ceil {\n"
    "  match { input x: [N, C]; h, t = split(x, axis=0, sizes=[(N + 9) / 10, N - (N + 9) / 10]);\n"
    "          r = relu(h); yield r, t; }\n"
    "  rewrite { h2, t2 = split(x, axis=0, sizes=[(N - 1) / 10 + 1, N - (N - 1) / 10 - 1]); r2 = relu(h2);\n"
    "            yield r2, t2; }\n"
    "}\n";

START_TEST(odd_sizes_above_four) {
  pcgc_check_result r = check1(HALVES_WRONG);
  ck_assert_msg(!r.ok, "expected unsound");
  ck_assert_msg(strstr(r.message, "the match type-checks but the rewrite does not"), "%s", r.message);
  ck_assert_msg(strstr(r.message, "sizes add up to"), "%s", r.message);
  ck_assert_msg(strstr(r.message, "odd>4"), "the failing instance is an odd size above 4: %s", r.message);
  ck_assert(r.classes & CLS(PCGC_CHECK_ODD_GT4));

  r = check1(HALVES_RIGHT);
  ck_assert_msg(r.ok, "expected sound, got: %s", r.message);
  /* N = 4 is the bound, 5 just above it; 3 (just below) fails the condition */
  assert_classes(&r, CLS(PCGC_CHECK_BASE) | CLS(PCGC_CHECK_EVEN) | CLS(PCGC_CHECK_ODD) | CLS(PCGC_CHECK_ODD_GT4) |
                         CLS(PCGC_CHECK_PRIME) | CLS(PCGC_CHECK_BOUND) | CLS(PCGC_CHECK_BOUND_ABOVE) |
                         CLS(PCGC_CHECK_DIV) | CLS(PCGC_CHECK_RANDOM) | CLS(PCGC_CHECK_MIXED));
  ck_assert(!(r.classes & CLS(PCGC_CHECK_BOUND_BELOW))); /* N = 3 is refused by the condition, never run */
  ck_assert_int_eq(r.bindings, 1);
  ck_assert_int_eq(r.instances, 24); /* the default budget, one binding */
  ck_assert_int_eq(r.executions, 3 * r.instances);
}
END_TEST

START_TEST(division_steps) {
  pcgc_check_result r = check1(CEIL_WRONG);
  ck_assert_msg(!r.ok, "expected unsound");
  ck_assert_msg(strstr(r.message, "by the match but") && strstr(r.message, "by the rewrite"), "%s", r.message);
  ck_assert_msg(strstr(r.message, "div-change"), "the failing instance is at a division's step: %s", r.message);

  r = check1(CEIL_RIGHT);
  ck_assert_msg(r.ok, "expected sound, got: %s", r.message);
  assert_classes(&r, CLS(PCGC_CHECK_DIV_BELOW) | CLS(PCGC_CHECK_DIV) | CLS(PCGC_CHECK_DIV_ABOVE) |
                         CLS(PCGC_CHECK_ODD_GT4) | CLS(PCGC_CHECK_PRIME));
  ck_assert_int_gt(r.class_instances[PCGC_CHECK_DIV], 0);
}
END_TEST

START_TEST(unshaped_partition) {
  /* the dims of an input without a shape are sizes too: size(x, k) % d steps */
  pcgc_check_result r = check1("rule part_relu(d: degree, k: dim) {\n"
                               "  match { input x; y = relu(x); yield y; }\n"
                               "  where { k < rank(x); size(x, k) % d == 0; }\n"
                               "  rewrite { p = partition(x, dim=k, degree=d); q = relu(p);\n"
                               "            c = combine(q, dim=k, degree=d); yield c; }\n"
                               "}\n");
  ck_assert_msg(r.ok, "expected sound, got: %s", r.message);
  ck_assert_int_eq(r.bindings, 12); /* degrees 1, 2, 4 x dims 0..3 */
  ck_assert_int_ge(r.instances, 24);
  assert_classes(&r, CLS(PCGC_CHECK_BASE) | CLS(PCGC_CHECK_ODD_GT4) | CLS(PCGC_CHECK_PRIME) | CLS(PCGC_CHECK_DIV) |
                         CLS(PCGC_CHECK_RANDOM));
}
END_TEST

START_TEST(budget_and_seed) {
  pcgc_check_options o;
  pcgc_check_options_default(&o);
  ck_assert_int_eq(o.budget, 24);
  ck_assert_int_eq(o.instances, 3);
  o.budget = 1;
  o.instances = 1;
  pcgc_check_result r = check_with(HALVES_RIGHT, &o);
  ck_assert_msg(r.ok, "%s", r.message);
  ck_assert_int_eq(r.instances, 1);
  ck_assert(r.classes & CLS(PCGC_CHECK_BASE));
  /* the budget is shared by the bindings, each getting at least `instances` */
  const char *part = "rule part_rows(d: degree) {\n"
                     "  match { input x: [A, C]; y = relu(x); yield y; }\n"
                     "  where { A % d == 0; }\n"
                     "  rewrite { p = partition(x, dim=0, degree=d); q = relu(p); c = combine(q, dim=0, degree=d);\n"
                     "            yield c; }\n"
                     "}\n";
  pcgc_check_options_default(&o);
  o.budget = 12;
  r = check_with(part, &o);
  ck_assert_msg(r.ok, "%s", r.message);
  ck_assert_int_eq(r.bindings, 3);
  ck_assert_int_eq(r.instances, 12);
  /* the same seed, the same instances; another seed, other draws */
  pcgc_check_options_default(&o);
  pcgc_check_result a = check_with(CEIL_RIGHT, &o), b = check_with(CEIL_RIGHT, &o);
  ck_assert(a.ok && b.ok);
  ck_assert_int_eq(a.instances, b.instances);
  ck_assert_int_eq(a.classes, b.classes);
  ck_assert_mem_eq(a.class_instances, b.class_instances, sizeof a.class_instances);
  o.seed = 12345;
  pcgc_check_result c = check_with(CEIL_WRONG, &o);
  ck_assert_msg(!c.ok, "another seed still finds the step");
}
END_TEST

START_TEST(class_names_and_log) {
  ck_assert_str_eq(pcgc_check_class_name(PCGC_CHECK_ODD_GT4), "odd>4");
  ck_assert_str_eq(pcgc_check_class_name(PCGC_CHECK_BOUND_BELOW), "where-bound-1");
  ck_assert_str_eq(pcgc_check_class_name(PCGC_CHECK_DIV_ABOVE), "div-change+1");
  ck_assert_str_eq(pcgc_check_class_name(PCGC_CHECK_N_CLASSES), "?");
  char buf[64];
  int n = pcgc_check_classes_format(buf, sizeof buf, CLS(PCGC_CHECK_PRIME) | CLS(PCGC_CHECK_ODD) | CLS(PCGC_CHECK_DIV));
  ck_assert_str_eq(buf, "odd, prime, div-change");
  ck_assert_int_eq(n, (int)strlen("odd, prime, div-change"));
  char small[8];
  ck_assert_int_eq(pcgc_check_classes_format(small, sizeof small, CLS(PCGC_CHECK_PRIME) | CLS(PCGC_CHECK_ODD)), 10);
  ck_assert_str_eq(small, "odd, pr");
  ck_assert_int_eq(pcgc_check_classes_format(buf, sizeof buf, 0), 0);
  ck_assert_str_eq(buf, "");

  /* verbose: a line per instance with its classes, then the rule's summary */
  char *text = NULL;
  size_t len = 0;
  FILE *log = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(log);
  pcgc_check_options o;
  pcgc_check_options_default(&o);
  o.log = log;
  pcgc_check_result r = check_with(HALVES_RIGHT, &o);
  fclose(log);
  ck_assert(r.ok);
  ck_assert_msg(strstr(text, "  relu_halves: instance N=") != NULL, "%s", text);
  ck_assert_msg(strstr(text, "3 seeds agree [base,") != NULL, "%s", text);
  char want[128];
  snprintf(want, sizeof want, "  relu_halves: %d instances over 1 bindings (budget 24), %d runs; classes: base, even, odd",
           r.instances, r.executions);
  ck_assert_msg(strstr(text, want) != NULL, "wanted '%s' in:\n%s", want, text);
  free(text);
}
END_TEST

/* Open attributes and training mode: the sound rules cover classes "attr"
 * and "training"; a rewrite dropout with a stream of its own, or one that
 * pins a copied attribute, is refused, and the message names the instance's
 * attribute values and mode. */
static const char *DROPOUT_PARTITION =
    "rule partition_dropout(d: degree, k: dim) {\n"
    "  match { input x: float; y = dropout(x); yield y; }\n"
    "  where { k < rank(x); size(x, k) % d == 0; }\n"
    "  rewrite { xp = partition(x, dim=k, degree=d); yp = dropout(xp, y.*); yc = combine(yp, dim=k, degree=d);\n"
    "            yield yc; }\n"
    "}\n";
static const char *DROPOUT_OWN_STREAM =
    "rule partition_dropout_own(d: degree, k: dim) {\n"
    "  match { input x: float; y = dropout(x); yield y; }\n"
    "  where { k < rank(x); size(x, k) % d == 0; }\n"
    "  rewrite { xp = partition(x, dim=k, degree=d); yp = dropout(xp, rate=y.rate);\n"
    "            yc = combine(yp, dim=k, degree=d); yield yc; }\n"
    "}\n";
static const char *DROPOUT_RATE_PINNED =
    "rule partition_dropout_half(d: degree, k: dim) {\n"
    "  match { input x: float; y = dropout(x); yield y; }\n"
    "  where { k < rank(x); size(x, k) % d == 0; }\n"
    "  rewrite { xp = partition(x, dim=k, degree=d); yp = dropout(xp, y.*, rate=0.5);\n"
    "            yc = combine(yp, dim=k, degree=d); yield yc; }\n"
    "}\n";
static const char *POOL_PIPELINE =
    "rule pipeline_pool2d(m: degree) {\n"
    "  match { input x: [N, C, H, W]; y = pool2d(x, kind=avg); yield y; }\n"
    "  where { N % m == 0; }\n"
    "  rewrite { xm = pipeline(x, dim=0, degree=m); ym = pool2d(xm, y.*); yu = unpipeline(ym, dim=0, degree=m);\n"
    "            yield yu; }\n"
    "}\n";
static const char *POOL_STRIDE_SWAPPED =
    "rule pipeline_pool2d_swapped(m: degree) {\n"
    "  match { input x: [N, C, H, W]; y = pool2d(x, kind=avg); yield y; }\n"
    "  where { N % m == 0; }\n"
    "  rewrite { xm = pipeline(x, dim=0, degree=m); ym = pool2d(xm, y.*, kernel=[y.kernel[1], y.kernel[0]]);\n"
    "            yu = unpipeline(ym, dim=0, degree=m); yield yu; }\n"
    "}\n";

START_TEST(open_attributes_and_training) {
  pcgc_check_result r = check1(DROPOUT_PARTITION);
  ck_assert_msg(r.ok, "a dropout moved with y.* draws the matched mask: %s", r.message);
  assert_classes(&r, CLS(PCGC_CHECK_ATTR) | CLS(PCGC_CHECK_TRAINING));
  ck_assert_int_gt(r.class_instances[PCGC_CHECK_ATTR], 0);

  r = check1(DROPOUT_OWN_STREAM);
  ck_assert_msg(!r.ok, "a dropout of its own draws another mask");
  ck_assert_msg(strstr(r.message, "training: "), "%s", r.message);

  r = check1(DROPOUT_RATE_PINNED);
  ck_assert_msg(!r.ok, "rate 0.5 for every matched rate");
  ck_assert_msg(strstr(r.message, "y.rate=0.25"), "the instance names its rate: %s", r.message);
  ck_assert_msg(strstr(r.message, "attr"), "%s", r.message);

  r = check1(POOL_PIPELINE);
  ck_assert_msg(r.ok, "%s", r.message);
  assert_classes(&r, CLS(PCGC_CHECK_ATTR));
  ck_assert(!(r.classes & CLS(PCGC_CHECK_TRAINING)));

  r = check1(POOL_STRIDE_SWAPPED);
  ck_assert_msg(!r.ok, "kernel 2x1 and 1x2 differ");
  ck_assert_msg(strstr(r.message, "y.kernel=[2, 1]"), "%s", r.message);
  ck_assert_str_eq(pcgc_check_class_name(PCGC_CHECK_ATTR), "attr");
  ck_assert_str_eq(pcgc_check_class_name(PCGC_CHECK_TRAINING), "training");
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("check_sizes");
  TCase *tc = tcase_create("check_sizes");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, odd_sizes_above_four);
  tcase_add_test(tc, division_steps);
  tcase_add_test(tc, unshaped_partition);
  tcase_add_test(tc, budget_and_seed);
  tcase_add_test(tc, class_names_and_log);
  tcase_add_test(tc, open_attributes_and_training);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(suite)
