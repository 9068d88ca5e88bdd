/*
 * bench_timing.h — the clock and the medians the benchmarks share: seconds
 * on the monotonic clock, and a sample sorted in place or reduced to its
 * median (the mean of the two middle values of an even count).
 */
#ifndef PCGC_BENCH_TIMING_H
#define PCGC_BENCH_TIMING_H

#include <stdlib.h>
#include <time.h>

static inline double bench_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* v[0..n) in increasing order */
static inline void bench_sort(double *v, int n) { qsort(v, (size_t)n, sizeof *v, bench_cmp_double); }

/* the median of v[0..n), n >= 1 (v is sorted on return) */
static inline double bench_median(double *v, int n) {
  bench_sort(v, n);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
