/*
 * test_cuda_smoke.c — does the CUDA stack this build linked against work?
 *
 * Without a GPU (or driver) it prints the probe report and exits 77, which
 * ctest counts as skipped. With one, the probe must succeed (cuBLAS and cuDNN
 * handles) and the axpy kernel must produce exact values: every input is a
 * small multiple of 1/4, so a*x + y is exactly representable in float and
 * fused or unfused arithmetic gives the same bits.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuda_backend.h"

#define SKIP 77

static int check_axpy(size_t n, float a) {
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  char err[256] = "";
  size_t bad = 0;
  int rc;

  if (x == NULL || y == NULL) {
    fprintf(stderr, "FAIL: out of host memory\n");
    free(x);
    free(y);
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    x[i] = (float)(i % 1000) - 500.0f;   /* -500 .. 499 */
    y[i] = (float)(i % 7) * 0.25f;       /* 0 .. 1.5 */
  }
  rc = pcgc_cuda_axpy(n, a, x, y, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "FAIL: pcgc_cuda_axpy(n=%zu): %s (%s)\n", n,
            pcgc_cuda_strerror(rc), err);
    free(x);
    free(y);
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    float want = a * ((float)(i % 1000) - 500.0f) + (float)(i % 7) * 0.25f;
    if (y[i] != want) {
      if (bad < 5)
        fprintf(stderr, "FAIL: y[%zu] = %.9g, want %.9g\n", i, (double)y[i],
                (double)want);
      bad++;
    }
  }
  free(x);
  free(y);
  if (bad) {
    fprintf(stderr, "FAIL: axpy n=%zu: %zu wrong values\n", n, bad);
    return 1;
  }
  printf("axpy n=%zu a=%g: all values exact\n", n, (double)a);
  return 0;
}

int main(void) {
  char report[4096], err[256] = "";
  int ndev = pcgc_cuda_device_count(err, sizeof err);
  int rc = pcgc_cuda_probe(report, sizeof report);
  int failed = 0;

  fputs(report, stdout);
  if (ndev <= 0) {
    printf("SKIP: no CUDA device (%s)\n",
           ndev < 0 ? err : "cudaGetDeviceCount reported 0 devices");
    return SKIP;
  }
  if (rc != 0) {
    fprintf(stderr, "FAIL: pcgc_cuda_probe: %s\n", pcgc_cuda_strerror(rc));
    return EXIT_FAILURE;
  }
  if (pcgc_cuda_axpy(4, 1.0f, NULL, NULL, NULL, 0) != PCGC_CUDA_ERR_INVALID) {
    fprintf(stderr, "FAIL: pcgc_cuda_axpy accepted NULL arrays\n");
    failed = 1;
  }
  failed |= check_axpy((size_t)1 << 20, 1.5f);
  failed |= check_axpy(1000003, -0.75f); /* not a multiple of the block size */
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
