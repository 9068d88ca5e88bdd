/*
 * test_rng.c — counter-based random numbers, weight initialisation and
 * synthetic data (runtime/cpu/rng.c).
 *
 * A value is a pure function of (seed, stream, counter): the tests check
 * determinism, ranges, the moments of uniform and normal draws over 1e5
 * samples (loose bounds, many standard errors wide), and that a piece of a
 * weight or data tensor draws exactly its slice of the whole tensor.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#include "../common/check_main.h"

#define N_DRAWS 100000

START_TEST(deterministic) {
  for (uint64_t c = 0; c < 100; c++) {
    ck_assert(pcgc_rng_u64(1, 2, c) == pcgc_rng_u64(1, 2, c));
    ck_assert(pcgc_rng_uniform(5, 6, c) == pcgc_rng_uniform(5, 6, c));
    ck_assert(pcgc_rng_normal(5, 6, c) == pcgc_rng_normal(5, 6, c));
  }
  /* seed, stream and counter each change the value */
  int same_seed = 0, same_stream = 0, same_counter = 0;
  for (uint64_t c = 0; c < 1000; c++) {
    uint64_t v = pcgc_rng_u64(1, 2, c);
    same_seed += v == pcgc_rng_u64(2, 2, c);
    same_stream += v == pcgc_rng_u64(1, 3, c);
    same_counter += v == pcgc_rng_u64(1, 2, c + 1);
  }
  ck_assert_int_eq(same_seed, 0);
  ck_assert_int_eq(same_stream, 0);
  ck_assert_int_eq(same_counter, 0);

  ck_assert(pcgc_rng_stream("fc1.w") == pcgc_rng_stream("fc1.w"));
  ck_assert(pcgc_rng_stream("fc1.w") != pcgc_rng_stream("fc2.w"));
  ck_assert(pcgc_rng_stream("") != pcgc_rng_stream("a"));
}
END_TEST

START_TEST(uniform_moments) {
  double sum = 0, sumsq = 0, lo = 1, hi = 0;
  int buckets[10] = {0};
  for (uint64_t c = 0; c < N_DRAWS; c++) {
    double u = pcgc_rng_uniform(42, 7, c);
    ck_assert_msg(u >= 0 && u < 1, "draw %llu is %.17g", (unsigned long long)c, u);
    sum += u;
    sumsq += u * u;
    lo = fmin(lo, u);
    hi = fmax(hi, u);
    buckets[(int)(u * 10)]++;
  }
  double mean = sum / N_DRAWS, var = sumsq / N_DRAWS - mean * mean;
  ck_assert_msg(fabs(mean - 0.5) < 0.01, "mean %g", mean);
  ck_assert_msg(fabs(var - 1.0 / 12) < 0.005, "variance %g", var);
  ck_assert(lo < 1e-3 && hi > 1 - 1e-3);
  for (int b = 0; b < 10; b++) ck_assert_msg(abs(buckets[b] - N_DRAWS / 10) < 600, "bucket %d has %d", b, buckets[b]);
}
END_TEST

START_TEST(normal_moments) {
  double sum = 0, sumsq = 0, sum4 = 0;
  int beyond2 = 0;
  for (uint64_t c = 0; c < N_DRAWS; c++) {
    double z = pcgc_rng_normal(42, 8, c);
    ck_assert(isfinite(z));
    sum += z;
    sumsq += z * z;
    sum4 += z * z * z * z;
    beyond2 += fabs(z) > 2;
  }
  double mean = sum / N_DRAWS, var = sumsq / N_DRAWS - mean * mean;
  ck_assert_msg(fabs(mean) < 0.02, "mean %g", mean);
  ck_assert_msg(fabs(var - 1) < 0.03, "variance %g", var);
  ck_assert_msg(fabs(sum4 / N_DRAWS - 3) < 0.2, "fourth moment %g", sum4 / N_DRAWS); /* a normal, not uniform */
  ck_assert_msg(abs(beyond2 - 4550) < 400, "%d draws beyond 2 sigma", beyond2);   /* 4.55% */
}
END_TEST

/* ---------------------------------------------------------------- pieces */

static pcgc_buf buf(pcgc_dtype dt, int64_t d0, int64_t d1) {
  pcgc_buf b;
  memset(&b, 0, sizeof b);
  b.dtype = dt;
  b.rank = 2;
  b.dims[0] = d0;
  b.dims[1] = d1;
  b.data = calloc((size_t)(d0 * d1), pcgc_dtype_size(dt));
  ck_assert_ptr_nonnull(b.data);
  return b;
}

/* The [2, 3] piece at (1, 2) of a [4, 6] tensor equals that slice, byte for byte. */
static void check_piece(pcgc_dtype dt, void (*draw)(pcgc_buf *, const pcgc_piece *, void *), void *arg) {
  pcgc_buf whole = buf(dt, 4, 6), part = buf(dt, 2, 3);
  pcgc_piece p = {{4, 6}, {1, 2}};
  draw(&whole, NULL, arg);
  draw(&part, &p, arg);
  size_t es = pcgc_dtype_size(dt);
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 3; c++)
      ck_assert_msg(memcmp((char *)part.data + (size_t)(r * 3 + c) * es,
                           (char *)whole.data + (size_t)((1 + r) * 6 + 2 + c) * es, es) == 0,
                    "%s piece element (%d, %d) differs from the whole tensor", pcgc_dtype_name(dt), r, c);
  free(whole.data);
  free(part.data);
}

static void draw_init(pcgc_buf *b, const pcgc_piece *p, void *arg) {
  pcgc_cpu_init_weight(b, *(pcgc_init *)arg, 0.5, 3, 9, p);
}

static void draw_data(pcgc_buf *b, const pcgc_piece *p, void *arg) {
  pcgc_cpu_fill_random(b, *(int64_t *)arg, 3, 10, p);
}

START_TEST(init_weight_piece_is_slice) {
  for (int init = PCGC_INIT_ZEROS; init <= PCGC_INIT_NORMAL; init++) {
    pcgc_init i = (pcgc_init)init;
    check_piece(PCGC_F64, draw_init, &i);
    check_piece(PCGC_F32, draw_init, &i);
  }
  int64_t bound = 5;
  check_piece(PCGC_F64, draw_data, &bound);
  check_piece(PCGC_I32, draw_data, &bound);
  check_piece(PCGC_I64, draw_data, &bound);
}
END_TEST

START_TEST(init_weight_values) {
  pcgc_buf w = buf(PCGC_F64, 100, 100);
  double *v = w.data;
  pcgc_cpu_init_weight(&w, PCGC_INIT_ONES, 0.5, 1, 1, NULL);
  for (int i = 0; i < 10000; i++) ck_assert(v[i] == 1);
  pcgc_cpu_init_weight(&w, PCGC_INIT_ZEROS, 0.5, 1, 1, NULL);
  for (int i = 0; i < 10000; i++) ck_assert(v[i] == 0);
  /* uniform(s) is in [-s, s) */
  double sum = 0, lo = 1, hi = -1;
  pcgc_cpu_init_weight(&w, PCGC_INIT_UNIFORM, 0.5, 1, 1, NULL);
  for (int i = 0; i < 10000; i++) {
    ck_assert(v[i] >= -0.5 && v[i] < 0.5);
    sum += v[i];
    lo = fmin(lo, v[i]);
    hi = fmax(hi, v[i]);
  }
  ck_assert(fabs(sum / 10000) < 0.02 && lo < -0.49 && hi > 0.49);
  /* normal(s) has standard deviation s */
  double sq = 0;
  pcgc_cpu_init_weight(&w, PCGC_INIT_NORMAL, 0.02, 1, 1, NULL);
  for (int i = 0; i < 10000; i++) sq += v[i] * v[i];
  ck_assert_msg(fabs(sqrt(sq / 10000) - 0.02) < 0.001, "std %g", sqrt(sq / 10000));
  /* integers are uniform in [0, bound) */
  pcgc_buf l = buf(PCGC_I32, 100, 100);
  int seen[7] = {0};
  pcgc_cpu_fill_random(&l, 7, 1, 2, NULL);
  for (int i = 0; i < 10000; i++) {
    int32_t x = ((int32_t *)l.data)[i];
    ck_assert(x >= 0 && x < 7);
    seen[x]++;
  }
  for (int c = 0; c < 7; c++) ck_assert_msg(abs(seen[c] - 10000 / 7) < 200, "class %d drawn %d times", c, seen[c]);
  free(w.data);
  free(l.data);
}
END_TEST

static Suite *rng_suite(void) {
  Suite *s = suite_create("rng");
  TCase *tc = tcase_create("draws");
  tcase_add_test(tc, deterministic);
  tcase_add_test(tc, uniform_moments);
  tcase_add_test(tc, normal_moments);
  suite_add_tcase(s, tc);
  tc = tcase_create("tensors");
  tcase_add_test(tc, init_weight_piece_is_slice);
  tcase_add_test(tc, init_weight_values);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(rng_suite)
