/*
 * bench_gpu.c — achieved TFLOP/s of the CUDA backend's GEMMs and
 * convolutions (runtime/cuda) on the zoo's main shapes, in each math mode of
 * pcgc_cuda_set_math (f32, TF32, bf16 operands with f32 accumulation).
 *
 *   bench_gpu [--repeat N] [--only TEXT]
 *
 * Each case fills its inputs with seeded uniform data on the device; a
 * measuring pass over every case sizes the workspace, which is then frozen
 * (as in the runtime's step loop); each case then runs 3 warm-up calls and
 * N timed calls (default 20) of forward and of backward (every input's
 * gradient), each call synchronised, and prints
 * the median in milliseconds and the TFLOP/s that makes: a linear x[M,K] by
 * w[K,N] counts 2MKN forward and 4MKN backward (dx and dw), a convolution
 * 2 N O Ho Wo (C/groups) KH KW forward and twice that backward. Percentages
 * are of the datasheet's dense peak where the device is an H100 or H200 (SXM:
 * 67 f32, 495 TF32, 989 bf16 TFLOP/s), otherwise left out. Storage stays f32
 * in every mode, so the bf16 rows include the conversion of the operands.
 * Exit 77 without a GPU.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_timing.h"
#include "cuda_kernels.h"

#define SKIP 77
#define MAX_IN 3

typedef struct bench_case {
  const char *name;
  pcgc_op_kind kind;
  int n_in;
  int rank[MAX_IN];
  int64_t dims[MAX_IN][PCGC_MAX_RANK];
  int64_t stride, pad; /* conv2d */
  int64_t groups;
  double flops_fwd; /* filled in */
} bench_case;

/* tokens: BERT-Large B 8 x S 512; GPT-3 2.7B 1 x 2048; LLaMA-3 8B 1 x 4096 */
static bench_case cases[] = {
    {"linear bert-large qkv 4096x1024x3072", PCGC_OP_LINEAR, 2, {2, 2}, {{4096, 1024}, {1024, 3072}}, 0, 0, 1, 0},
    {"linear bert-large ffn-up 4096x1024x4096", PCGC_OP_LINEAR, 2, {2, 2}, {{4096, 1024}, {1024, 4096}}, 0, 0, 1, 0},
    {"linear bert-large ffn-down 4096x4096x1024", PCGC_OP_LINEAR, 2, {2, 2}, {{4096, 4096}, {4096, 1024}}, 0, 0, 1, 0},
    {"linear gpt-3-2.7b ffn-up 2048x2560x10240", PCGC_OP_LINEAR, 2, {2, 2}, {{2048, 2560}, {2560, 10240}}, 0, 0, 1, 0},
    {"linear llama-8b ffn-up 4096x4096x14336", PCGC_OP_LINEAR, 2, {2, 2}, {{4096, 4096}, {4096, 14336}}, 0, 0, 1, 0},
    {"linear 8192^3", PCGC_OP_LINEAR, 2, {2, 2}, {{8192, 8192}, {8192, 8192}}, 0, 0, 1, 0},
    {"batch_matmul bert-large scores 128x512x64x512", PCGC_OP_BATCH_MATMUL, 2, {3, 3},
     {{128, 512, 64}, {128, 64, 512}}, 0, 0, 1, 0},
    {"conv2d cnn 32x32x16x16 -> 64 3x3", PCGC_OP_CONV2D, 2, {4, 4}, {{32, 32, 16, 16}, {64, 32, 3, 3}}, 1, 1, 1, 0},
    {"conv2d resnet 64x256x14x14 -> 256 3x3", PCGC_OP_CONV2D, 2, {4, 4}, {{64, 256, 14, 14}, {256, 256, 3, 3}}, 1, 1,
     1, 0},
    {"conv2d inception 64x768x17x17 -> 192 1x1", PCGC_OP_CONV2D, 2, {4, 4}, {{64, 768, 17, 17}, {192, 768, 1, 1}}, 1,
     0, 1, 0},
    {"conv2d stem 64x3x224x224 -> 64 7x7/2", PCGC_OP_CONV2D, 2, {4, 4}, {{64, 3, 224, 224}, {64, 3, 7, 7}}, 2, 3, 1,
     0},
    {"conv2d resnext 64x128x28x28 -> 128 3x3 g32", PCGC_OP_CONV2D, 2, {4, 4}, {{64, 128, 28, 28}, {128, 4, 3, 3}}, 1,
     1, 32, 0},
};

static int64_t numel(int rank, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= d[i];
  return n;
}

static pcgc_cuda *cu;

static void die(const char *what, const pcgc_error *err) {
  fprintf(stderr, "bench_gpu: %s: %s\n", what, err ? err->message : "out of memory");
  exit(EXIT_FAILURE);
}

static pcgc_buf dev_buf(int rank, const int64_t *dims, uint64_t *seed) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_buf b;
  memset(&b, 0, sizeof b);
  b.dtype = PCGC_F32;
  b.rank = rank;
  memcpy(b.dims, dims, (size_t)rank * sizeof *dims);
  size_t n = (size_t)numel(rank, dims);
  float *h = malloc(n * sizeof *h);
  if (!h) die("host allocation", NULL);
  for (size_t i = 0; i < n; i++) { /* xorshift, uniform in [-1, 1) */
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    h[i] = (float)((double)(*seed >> 11) * 0x1.0p-52 - 1.0);
  }
  b.data = pcgc_cuda_alloc(cu, n * sizeof *h, &err);
  if (!b.data) die("device allocation", &err);
  if (pcgc_cuda_upload(cu, b.data, h, n * sizeof *h, &err) != PCGC_OK) die("upload", &err);
  free(h);
  return b;
}

/* median milliseconds of `repeat` calls of forward (bwd false) or backward */
static double time_op(const bench_case *c, const pcgc_attrs *a, pcgc_buf *in, pcgc_buf *out, pcgc_buf *din,
                      pcgc_buf *dout, bool bwd, int repeat) {
  pcgc_error err;
  pcgc_error_clear(&err);
  double *t = malloc((size_t)repeat * sizeof *t);
  if (!t) die("host allocation", NULL);
  for (int r = 0; r < repeat; r++) {
    if (pcgc_cuda_sync(cu, &err) != PCGC_OK) die("sync", &err);
    double t0 = bench_now();
    pcgc_status s = bwd ? pcgc_cuda_backward(cu, c->kind, a, c->n_in, in, 1, out, dout, din, NULL, &err)
                        : pcgc_cuda_forward(cu, c->kind, a, c->n_in, in, 1, out, NULL, &err);
    if (s != PCGC_OK) die(c->name, &err);
    if (pcgc_cuda_sync(cu, &err) != PCGC_OK) die("sync", &err);
    t[r] = 1e3 * (bench_now() - t0);
  }
  double med = bench_median(t, repeat);
  free(t);
  return med;
}

int main(int argc, char **argv) {
  int repeat = 20;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
      repeat = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      fprintf(stderr, "usage: bench_gpu [--repeat N] [--only TEXT]\n");
      return strcmp(argv[i], "--help") == 0 ? EXIT_SUCCESS : 2;
    }
  }
  if (repeat < 1) repeat = 1;
  pcgc_error err;
  pcgc_error_clear(&err);
  cu = pcgc_cuda_open(0, &err);
  if (!cu) {
    printf("SKIP: %s\n", err.message);
    return SKIP;
  }
  const char *dev = pcgc_cuda_describe(cu);
  bool hopper = strstr(dev, "H100") || strstr(dev, "H200");
  static const double peak[3] = {67, 495, 989}; /* f32, TF32, bf16 dense, H100 SXM datasheet */
  static const char *math_name[3] = {"f32", "tf32", "bf16"};
  printf("device: %s; median of %d calls%s\n", dev, repeat,
         hopper ? "; % of the datasheet's dense peak (67 / 495 / 989 TFLOP/s)" : "");
  printf("%-46s %-5s %9s %8s %6s %9s %8s %6s\n", "case", "math", "fwd ms", "TFLOP/s", "%peak", "bwd ms", "TFLOP/s",
         "%peak");
  /* every case's buffers, then one measuring pass over all of them (each
   * math), then the workspace is reserved and frozen: timed calls run once */
  enum { N_CASES = sizeof cases / sizeof cases[0] };
  static pcgc_attrs attrs[N_CASES];
  static pcgc_buf in[N_CASES][MAX_IN], din[N_CASES][MAX_IN], out[N_CASES], dout[N_CASES];
  uint64_t seed = 0x9e3779b97f4a7c15ULL;
  for (size_t i = 0; i < N_CASES; i++) {
    bench_case *c = &cases[i];
    if (only && !strstr(c->name, only)) continue;
    pcgc_attrs *a = &attrs[i];
    pcgc_attrs_init(a, c->kind);
    if (c->kind == PCGC_OP_CONV2D) {
      int64_t st[2] = {c->stride, c->stride}, pd[2] = {c->pad, c->pad};
      if (pcgc_attrs_set_ints(a, "stride", 2, st) != PCGC_OK || pcgc_attrs_set_ints(a, "padding", 2, pd) != PCGC_OK ||
          pcgc_attrs_set_int(a, "groups", c->groups) != PCGC_OK)
        die("conv2d attributes", NULL);
    }
    pcgc_ptensor tin[MAX_IN], tout[1];
    for (int j = 0; j < c->n_in; j++) pcgc_ptensor_init(&tin[j], PCGC_F32, c->rank[j], c->dims[j]);
    if (pcgc_op_infer(c->kind, a, c->n_in, tin, tout, &err) != PCGC_OK) die(c->name, &err);
    const int64_t *od = tout[0].dims;
    if (c->kind == PCGC_OP_CONV2D) {
      const int64_t *w = c->dims[1];
      c->flops_fwd = 2.0 * (double)numel(tout[0].rank, od) * (double)(w[1] * w[2] * w[3]);
    } else { /* out [.., M, N] from x [.., M, K] */
      int64_t k = c->dims[0][c->rank[0] - 1];
      c->flops_fwd = 2.0 * (double)numel(tout[0].rank, od) * (double)k;
    }
    for (int j = 0; j < c->n_in; j++) {
      in[i][j] = dev_buf(c->rank[j], c->dims[j], &seed);
      din[i][j] = dev_buf(c->rank[j], c->dims[j], &seed);
    }
    out[i] = dev_buf(tout[0].rank, od, &seed);
    dout[i] = dev_buf(tout[0].rank, od, &seed);
    pcgc_cuda_measure(cu, true);
    for (int m = 0; m < 3; m++) {
      pcgc_cuda_set_math(cu, (pcgc_cuda_math)m);
      if (pcgc_cuda_forward(cu, c->kind, a, c->n_in, in[i], 1, &out[i], NULL, &err) != PCGC_OK ||
          pcgc_cuda_backward(cu, c->kind, a, c->n_in, in[i], 1, &out[i], &dout[i], din[i], NULL, &err) != PCGC_OK)
        die(c->name, &err);
    }
    pcgc_cuda_measure(cu, false);
  }
  if (pcgc_cuda_reserve(cu, &err) != PCGC_OK) die("workspace", &err);
  pcgc_cuda_freeze(cu);
  printf("workspace %.1f MiB\n", (double)pcgc_cuda_workspace_bytes(cu) / (1 << 20));
  for (size_t i = 0; i < N_CASES; i++) {
    bench_case *c = &cases[i];
    if (only && !strstr(c->name, only)) continue;
    for (int m = 0; m < 3; m++) {
      pcgc_cuda_set_math(cu, (pcgc_cuda_math)m);
      double f = time_op(c, &attrs[i], in[i], &out[i], din[i], &dout[i], false, 3); /* warm-up */
      double b = time_op(c, &attrs[i], in[i], &out[i], din[i], &dout[i], true, 3);
      f = time_op(c, &attrs[i], in[i], &out[i], din[i], &dout[i], false, repeat);
      b = time_op(c, &attrs[i], in[i], &out[i], din[i], &dout[i], true, repeat);
      double ft = c->flops_fwd / (f * 1e-3) / 1e12, bt = 2 * c->flops_fwd / (b * 1e-3) / 1e12;
      char fp[16] = "", bp[16] = "";
      if (hopper) {
        snprintf(fp, sizeof fp, "%.0f%%", 100 * ft / peak[m]);
        snprintf(bp, sizeof bp, "%.0f%%", 100 * bt / peak[m]);
      }
      printf("%-46s %-5s %9.3f %8.1f %6s %9.3f %8.1f %6s\n", m ? "" : c->name, math_name[m], f, ft, fp, b, bt, bp);
      fflush(stdout);
    }
    for (int j = 0; j < c->n_in; j++) {
      pcgc_cuda_free(cu, in[i][j].data);
      pcgc_cuda_free(cu, din[i][j].data);
    }
    pcgc_cuda_free(cu, out[i].data);
    pcgc_cuda_free(cu, dout[i].data);
  }
  pcgc_cuda_set_math(cu, PCGC_CUDA_MATH_F32);
  pcgc_cuda_close(cu);
  return EXIT_SUCCESS;
}
