/*
 * test_optim.c — the optimizers (runtime/cpu/optim.c) against torch.optim's
 * update rules, worked through by hand for three steps on a 3-element weight.
 *
 * Every case starts from w = [1, -2, 0.5] with zero state and applies the
 * fixed gradients G[0], G[1], G[2]. Step 1 of plain SGD, for instance, is
 * w - 0.1 g = [0.99, -1.98, 0.47]; step 1 of Adam moves every element by lr
 * against the sign of its gradient (m / (1 - b1) = g, v / (1 - b2) = g^2).
 * The later steps were computed with the recurrences at the top of optim.c
 * (in double, by a short script); f32 must agree to single precision.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#include "../common/check_main.h"

static const double W0[3] = {1.0, -2.0, 0.5};
static const double G[3][3] = {{0.1, -0.2, 0.3}, {-0.5, 0.4, 0.0}, {0.2, 0.2, -0.1}};

typedef struct buf3 {
  pcgc_buf b;
  double d[3];
  float f[3];
} buf3;

static void buf3_init(buf3 *x, pcgc_dtype dt, const double *vals) {
  memset(x, 0, sizeof *x);
  x->b.dtype = dt;
  x->b.rank = 1;
  x->b.dims[0] = 3;
  x->b.data = dt == PCGC_F32 ? (void *)x->f : (void *)x->d;
  for (int i = 0; vals && i < 3; i++) {
    x->d[i] = vals[i];
    x->f[i] = (float)vals[i];
  }
}

static double get(const buf3 *x, int i) { return x->b.dtype == PCGC_F32 ? x->f[i] : x->d[i]; }

/* Runs three steps and compares w after each with want[step]. */
static void run3(const pcgc_optimizer *o, pcgc_dtype dt, const double want[3][3], double tol) {
  buf3 w, g, m, v;
  buf3_init(&w, dt, W0);
  buf3_init(&m, dt, NULL);
  buf3_init(&v, dt, NULL);
  for (int t = 0; t < 3; t++) {
    buf3_init(&g, dt, G[t]);
    pcgc_error err;
    pcgc_error_clear(&err);
    pcgc_status s = pcgc_cpu_optimizer_step(o, &w.b, &g.b, &m.b, &v.b, t + 1, &err);
    ck_assert_msg(s == PCGC_OK, "step %d: %s", t + 1, err.message);
    for (int i = 0; i < 3; i++)
      ck_assert_msg(fabs(get(&w, i) - want[t][i]) <= tol, "%s step %d element %d: got %.17g, want %.17g",
                    pcgc_dtype_name(dt), t + 1, i, get(&w, i), want[t][i]);
  }
}

static void run3_both(const pcgc_optimizer *o, const double want[3][3]) {
  run3(o, PCGC_F64, want, 1e-13);
  run3(o, PCGC_F32, want, 2e-6);
}

static pcgc_optimizer sgd(double lr, double momentum, double wd) {
  pcgc_optimizer o;
  pcgc_optimizer_default(&o, PCGC_SGD);
  o.lr = lr;
  o.momentum = momentum;
  o.weight_decay = wd;
  return o;
}

static pcgc_optimizer adam(double lr, double b1, double b2, double eps, double wd) {
  pcgc_optimizer o;
  pcgc_optimizer_default(&o, PCGC_ADAM);
  o.lr = lr;
  o.beta1 = b1;
  o.beta2 = b2;
  o.eps = eps;
  o.weight_decay = wd;
  return o;
}

START_TEST(defaults) {
  pcgc_optimizer o;
  pcgc_optimizer_default(&o, PCGC_SGD);
  ck_assert_int_eq(o.kind, PCGC_SGD);
  ck_assert(o.lr == 0.01 && o.momentum == 0 && o.weight_decay == 0);
  pcgc_optimizer_default(&o, PCGC_ADAM);
  ck_assert_int_eq(o.kind, PCGC_ADAM);
  ck_assert(o.lr == 0.001 && o.beta1 == 0.9 && o.beta2 == 0.999 && o.eps == 1e-8 && o.weight_decay == 0);
}
END_TEST

START_TEST(sgd_plain) {
  static const double want[3][3] = {{0.99, -1.98, 0.47}, {1.04, -2.02, 0.47}, {1.02, -2.04, 0.48}};
  pcgc_optimizer o = sgd(0.1, 0, 0);
  run3_both(&o, want);
}
END_TEST

START_TEST(sgd_weight_decay) {
  /* step 1: g' = g + 0.1 w = [0.2, -0.4, 0.35] */
  static const double want[3][3] = {{0.98, -1.96, 0.465},
                                    {1.0202, -1.9804, 0.46035000000000004},
                                    {0.989998, -1.980596, 0.46574650000000006}};
  pcgc_optimizer o = sgd(0.1, 0, 0.1);
  run3_both(&o, want);
}
END_TEST

START_TEST(sgd_momentum) {
  /* buf = g on step 1, then 0.9 buf + g: step 2 buf = [-0.41, 0.22, 0.27] */
  static const double want[3][3] = {{0.99, -1.98, 0.47},
                                    {1.031, -2.002, 0.44299999999999995},
                                    {1.0478999999999998, -2.0418, 0.42869999999999997}};
  pcgc_optimizer o = sgd(0.1, 0.9, 0);
  run3_both(&o, want);
}
END_TEST

START_TEST(sgd_momentum_weight_decay) {
  static const double want[3][3] = {{0.989, -1.978, 0.46950000000000003},
                                    {1.028111, -1.996222, 0.44158050000000004},
                                    {1.042282789, -2.030625578, 0.4260113695}};
  pcgc_optimizer o = sgd(0.1, 0.9, 0.01);
  run3_both(&o, want);
}
END_TEST

START_TEST(sgd_momentum_state) {
  /* the momentum buffer holds g after step 1 whatever it held before */
  buf3 w, g, m;
  buf3_init(&w, PCGC_F64, W0);
  buf3_init(&g, PCGC_F64, G[0]);
  buf3_init(&m, PCGC_F64, (double[]){7, 7, 7});
  pcgc_optimizer o = sgd(0.1, 0.9, 0);
  ck_assert_int_eq(pcgc_cpu_optimizer_step(&o, &w.b, &g.b, &m.b, NULL, 1, NULL), PCGC_OK);
  for (int i = 0; i < 3; i++) ck_assert(m.d[i] == G[0][i]);
  /* plain SGD needs no state at all */
  o = sgd(0.1, 0, 0);
  ck_assert_int_eq(pcgc_cpu_optimizer_step(&o, &w.b, &g.b, NULL, NULL, 2, NULL), PCGC_OK);
}
END_TEST

START_TEST(adam_default_betas) {
  static const double want[3][3] = {{0.900000009999999, -1.9000000049999997, 0.4000000033333332},
                                    {0.9598354265523341, -1.9366103565460366, 0.33299418107915446},
                                    {0.9795549188742791, -1.9885344363316622, 0.304080646349274}};
  pcgc_optimizer o = adam(0.1, 0.9, 0.999, 1e-8, 0);
  run3_both(&o, want);
}
END_TEST

START_TEST(adam_weight_decay) {
  static const double want[3][3] = {{0.9000000049999998, -1.9000000025, 0.40000000285714277},
                                    {0.937522034544049, -1.87528316883678, 0.32497436528996426},
                                    {0.9273037988393159, -1.857948684170344, 0.2800511707496173}};
  pcgc_optimizer o = adam(0.1, 0.9, 0.999, 1e-8, 0.1);
  run3_both(&o, want);
}
END_TEST

START_TEST(adam_other_betas) {
  /* eps = 1e-3 matters here: step 1 moves by 0.05 |g| / (|g| + 1e-3) */
  static const double want[3][3] = {{0.9504950495049505, -1.9502487562189055, 0.45016611295681064},
                                    {0.9879015332954741, -1.9796504465950187, 0.42309690635680197},
                                    {0.9901670520992802, -2.0156203398217274, 0.42792053977994465}};
  pcgc_optimizer o = adam(0.05, 0.5, 0.6, 1e-3, 0);
  run3_both(&o, want);
}
END_TEST

START_TEST(adam_moments) {
  buf3 w, g, m, v;
  buf3_init(&w, PCGC_F64, W0);
  buf3_init(&g, PCGC_F64, G[0]);
  buf3_init(&m, PCGC_F64, NULL);
  buf3_init(&v, PCGC_F64, NULL);
  pcgc_optimizer o = adam(0.1, 0.9, 0.999, 1e-8, 0);
  ck_assert_int_eq(pcgc_cpu_optimizer_step(&o, &w.b, &g.b, &m.b, &v.b, 1, NULL), PCGC_OK);
  for (int i = 0; i < 3; i++) {
    ck_assert(fabs(m.d[i] - 0.1 * G[0][i]) <= 1e-17);
    ck_assert(fabs(v.d[i] - 0.001 * G[0][i] * G[0][i]) <= 1e-19);
  }
}
END_TEST

/* Runs one step expecting `want` and a message containing `needle`. */
static void expect_fail(const pcgc_optimizer *o, pcgc_buf *w, const pcgc_buf *g, pcgc_buf *m, pcgc_buf *v,
                        int64_t step, pcgc_status want, const char *needle) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_status s = pcgc_cpu_optimizer_step(o, w, g, m, v, step, &err);
  ck_assert_msg(s == want, "status %d, want %d (%s)", (int)s, (int)want, err.message);
  ck_assert_msg(strstr(err.message, needle), "message '%s' lacks '%s'", err.message, needle);
}

START_TEST(errors) {
  buf3 w, g, m, v, g32;
  buf3_init(&w, PCGC_F64, W0);
  buf3_init(&g, PCGC_F64, G[0]);
  buf3_init(&m, PCGC_F64, NULL);
  buf3_init(&v, PCGC_F64, NULL);
  buf3_init(&g32, PCGC_F32, G[0]);
  double before[3];
  memcpy(before, w.d, sizeof before);
  pcgc_optimizer a = adam(0.1, 0.9, 0.999, 1e-8, 0), s = sgd(0.1, 0.9, 0);

  pcgc_buf short_g = g.b;
  short_g.dims[0] = 2;
  expect_fail(&a, &w.b, &short_g, &m.b, &v.b, 1, PCGC_ERR_INVALID, "adam: the gradient is f64[2]");
  expect_fail(&s, &w.b, &g32.b, &m.b, NULL, 1, PCGC_ERR_INVALID, "sgd: the gradient is f32[3]");
  expect_fail(&a, &w.b, &g.b, &m.b, NULL, 1, PCGC_ERR_INVALID, "adam: no second moment");
  expect_fail(&s, &w.b, &g.b, NULL, NULL, 1, PCGC_ERR_INVALID, "sgd: no momentum");
  expect_fail(&a, &w.b, &g.b, &m.b, &v.b, 0, PCGC_ERR_INVALID, "step counts from 1");
  pcgc_optimizer bad = a;
  bad.beta1 = 1;
  expect_fail(&bad, &w.b, &g.b, &m.b, &v.b, 1, PCGC_ERR_INVALID, "betas");
  bad = s;
  bad.lr = -1;
  expect_fail(&bad, &w.b, &g.b, &m.b, NULL, 1, PCGC_ERR_INVALID, "lr");
  bad.kind = (pcgc_optimizer_kind)9;
  expect_fail(&bad, &w.b, &g.b, &m.b, NULL, 1, PCGC_ERR_INVALID, "unknown");
  expect_fail(NULL, &w.b, &g.b, &m.b, NULL, 1, PCGC_ERR_INVALID, "optimizer");
  pcgc_buf h = w.b;
  h.dtype = PCGC_F16;
  expect_fail(&s, &h, &g.b, &m.b, NULL, 1, PCGC_ERR_UNSUPPORTED, "f16");
  pcgc_buf nodata = w.b;
  nodata.data = NULL;
  expect_fail(&s, &nodata, &g.b, &m.b, NULL, 1, PCGC_ERR_INVALID, "weight");
  /* nothing was written by the failed calls */
  ck_assert(memcmp(before, w.d, sizeof before) == 0);
}
END_TEST

static Suite *optim_suite(void) {
  Suite *s = suite_create("optim");
  TCase *tc = tcase_create("sgd");
  tcase_add_test(tc, defaults);
  tcase_add_test(tc, sgd_plain);
  tcase_add_test(tc, sgd_weight_decay);
  tcase_add_test(tc, sgd_momentum);
  tcase_add_test(tc, sgd_momentum_weight_decay);
  tcase_add_test(tc, sgd_momentum_state);
  suite_add_tcase(s, tc);
  tc = tcase_create("adam");
  tcase_add_test(tc, adam_default_betas);
  tcase_add_test(tc, adam_weight_decay);
  tcase_add_test(tc, adam_other_betas);
  tcase_add_test(tc, adam_moments);
  suite_add_tcase(s, tc);
  tc = tcase_create("errors");
  tcase_add_test(tc, errors);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(optim_suite)
