/*
 * test_fastmath.c — the vectorised f32 exp and erf of runtime/cpu/k_fastmath.h
 * against libm in double, over dense grids: exp to 2e-7 relative on
 * [-87, 88.7], 0 below, infinity above; erf to 4e-7 absolute on [-10, 10];
 * GELU and its derivative (the f32 kernels' arithmetic) to 1e-6 absolute
 * plus 1e-6 relative; NaN in, NaN out.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>

#include "k_fastmath.h"

#include "../common/check_main.h"

START_TEST(exp_accuracy) {
  double worst = 0, at = 0;
  for (int i = 0; i <= 2000000; i++) {
    float v = (float)(-87.0 + (88.72 - -87.0) * i / 2000000.0);
    double want = exp((double)v), got = kx_exp_f32(v), rel = fabs(got - want) / want;
    if (rel > worst) worst = rel, at = v;
  }
  ck_assert_msg(worst <= 2e-7, "exp: relative error %.3g at %.9g", worst, at);
  ck_assert(kx_exp_f32(0.0f) == 1.0f);
  ck_assert(kx_exp_f32(-100.0f) == 0.0f);
  ck_assert(kx_exp_f32(-INFINITY) == 0.0f);
  ck_assert(isinf(kx_exp_f32(89.0f)) && kx_exp_f32(89.0f) > 0);
  ck_assert(isinf(kx_exp_f32(INFINITY)));
  ck_assert(isnan(kx_exp_f32(NAN)));
}
END_TEST

START_TEST(erf_accuracy) {
  double worst = 0, at = 0;
  for (int i = 0; i <= 2000000; i++) {
    float x = (float)(-10.0 + 20.0 * i / 2000000.0);
    double err = fabs((double)kx_erf_f32(x) - erf((double)x));
    if (err > worst) worst = err, at = x;
  }
  ck_assert_msg(worst <= 4e-7, "erf: absolute error %.3g at %.9g", worst, at);
  ck_assert(kx_erf_f32(0.0f) == 0.0f);
  ck_assert(kx_erf_f32(INFINITY) == 1.0f && kx_erf_f32(-INFINITY) == -1.0f);
  ck_assert(isnan(kx_erf_f32(NAN)));
  ck_assert(kx_erf_f32(-1.5f) == -kx_erf_f32(1.5f)); /* odd */
}
END_TEST

START_TEST(gelu_accuracy) {
  double worst_f = 0, worst_b = 0, at_f = 0, at_b = 0;
  for (int i = 0; i <= 400000; i++) {
    float x = (float)(-12.0 + 24.0 * i / 400000.0);
    double xd = x, cdf = 0.5 * (1 + erf(xd / sqrt(2.0)));
    double f = xd * cdf, b = cdf + xd * exp(-0.5 * xd * xd) / 2.5066282746310002;
    double ef = fabs(kx_gelu_f32(x) - f) / (1e-6 + 1e-6 * fabs(f));
    double eb = fabs(kx_gelu_grad_f32(x) - b) / (1e-6 + 1e-6 * fabs(b));
    if (ef > worst_f) worst_f = ef, at_f = x;
    if (eb > worst_b) worst_b = eb, at_b = x;
  }
  ck_assert_msg(worst_f <= 1, "gelu: error %.3g x (1e-6 + 1e-6 |y|) at %.9g", worst_f, at_f);
  ck_assert_msg(worst_b <= 1, "gelu': error %.3g x (1e-6 + 1e-6 |y|) at %.9g", worst_b, at_b);
  ck_assert(isnan(kx_gelu_f32(NAN)) && isnan(kx_gelu_grad_f32(NAN)));
  ck_assert(kx_gelu_f32(0.0f) == 0.0f && kx_gelu_grad_f32(0.0f) == 0.5f);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("fastmath");
  TCase *tc = tcase_create("fastmath");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, exp_accuracy);
  tcase_add_test(tc, erf_accuracy);
  tcase_add_test(tc, gelu_accuracy);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(suite)
