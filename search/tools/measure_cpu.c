/*
 * measure_cpu.c — measures what machines/cpu-local.machine states about the
 * CPU it runs on, and prints it as machine-file lines:
 *
 *   f32, f64 peak   cblas_sgemm / cblas_dgemm on square matrices (2048, 4096),
 *                   best of 5 after a warm-up, with 1 and with all threads
 *   memory bw       a STREAM-style triad a[i] = b[i] + s*c[i] over 256 MiB
 *                   arrays (12 bytes an element), best of 5, 1 and all threads
 *
 * It is not part of the build (it needs OpenBLAS and pthreads):
 *   gcc -O3 -march=native search/tools/measure_cpu.c -o measure_cpu -lopenblas -lpthread
 *   ./measure_cpu
 * The launch overhead comes from `pcgc train` on a long chain of tiny ops
 * (machines/cpu-local.machine says how); memory from /proc/meminfo.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

extern void openblas_set_num_threads(int);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double gemm_rate(int threads, int n, int f64) {
  openblas_set_num_threads(threads);
  size_t sz = (size_t)n * (size_t)n, es = f64 ? 8 : 4;
  void *a = malloc(sz * es), *b = malloc(sz * es), *c = calloc(sz, es);
  if (!a || !b || !c) return 0;
  for (size_t i = 0; i < sz; i++) {
    if (f64) {
      ((double *)a)[i] = 1.0 / (double)(i % 7 + 1);
      ((double *)b)[i] = 1.0 / (double)(i % 5 + 1);
    } else {
      ((float *)a)[i] = 1.0f / (float)(i % 7 + 1);
      ((float *)b)[i] = 1.0f / (float)(i % 5 + 1);
    }
  }
  double best = 1e30;
  for (int r = 0; r < 6; r++) {
    double t = now();
    if (f64)
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    t = now() - t;
    if (r > 0 && t < best) best = t; /* r = 0 warms up */
  }
  free(a), free(b), free(c);
  return 2.0 * n * (double)n * n / best;
}

#define N (64L << 20)
static float *A, *B, *C;
typedef struct {
  long lo, hi;
} range;

static void *triad(void *p) {
  range *r = p;
  for (long i = r->lo; i < r->hi; i++) A[i] = B[i] + 1.5f * C[i];
  return NULL;
}

static double triad_rate(int threads) {
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    pthread_t th[64];
    range rg[64];
    double t = now();
    for (int i = 0; i < threads; i++) {
      rg[i] = (range){N * i / threads, N * (i + 1) / threads};
      pthread_create(&th[i], NULL, triad, &rg[i]);
    }
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    t = now() - t;
    if (t < best) best = t;
  }
  return 12.0 * N / best;
}

int main(void) {
  int cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 1) cpus = 1;
  if (cpus > 64) cpus = 64;
  double f32 = 0, f64 = 0;
  for (int t = 1; t <= cpus; t = t == cpus ? cpus + 1 : (t * 2 > cpus ? cpus : t * 2)) {
    for (int n = 2048; n <= 4096; n *= 2) {
      double r = gemm_rate(t, n, 0);
      printf("# sgemm n=%d threads=%d: %.1f GFLOP/s\n", n, t, r / 1e9);
      if (r > f32) f32 = r;
    }
    double r = gemm_rate(t, 2048, 1);
    printf("# dgemm n=2048 threads=%d: %.1f GFLOP/s\n", t, r / 1e9);
    if (r > f64) f64 = r;
  }
  A = malloc(N * sizeof *A), B = malloc(N * sizeof *B), C = malloc(N * sizeof *C);
  if (!A || !B || !C) return 1;
  for (long i = 0; i < N; i++) A[i] = 0, B[i] = 1, C[i] = 2;
  double bw = 0;
  for (int t = 1; t <= cpus; t = t == cpus ? cpus + 1 : (t * 2 > cpus ? cpus : t * 2)) {
    double r = triad_rate(t);
    printf("# triad threads=%d: %.1f GB/s\n", t, r / 1e9);
    if (r > bw) bw = r;
  }
  printf("device.flops.f32 %.0f GFLOP/s\n", f32 / 1e9);
  printf("device.flops.f64 %.0f GFLOP/s\n", f64 / 1e9);
  printf("device.memory_bandwidth %.0f GB/s\n", bw / 1e9);
  return 0;
}
