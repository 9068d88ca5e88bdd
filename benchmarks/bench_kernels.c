/*
 * bench_kernels.c — speed of the CPU kernels (runtime/cpu) outside BLAS:
 * elementwise ops, dropout, pooling, normalisation, softmax, the losses,
 * attention and the optimizer updates, on the shapes of models/cnn.pcg and
 * models/transformer-block.pcg.
 *
 *   bench_kernels [--repeat N] [--only TEXT] [--f64] [--hash]
 *
 * Each case fills its inputs and output gradient with seeded N(0, 1) data,
 * makes one warm-up call, then times N calls (default 20) of forward and of
 * backward (every float input's gradient wanted, zeroed before each call)
 * and prints the median in microseconds and in nanoseconds per element of
 * the largest input. --only runs the cases whose name contains TEXT; --f64
 * runs them in double. --hash also prints an XXH3 hash of the forward output
 * and of every input gradient after one clean forward and backward: two
 * builds that print the same hashes computed bit-identical results.
 * Attention weights are N(0, 1/fan-in) (as initialised), the rest N(0, 1).
 * Run it with OPENBLAS_NUM_THREADS=1 for one-thread numbers.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bench_timing.h"
#include "kernels.h"

#define MAX_IN 11

typedef struct bench_case {
  const char *name;
  pcgc_op_kind kind;     /* PCGC_OP_COUNT: an optimizer update (opt below) */
  int n_in;
  int rank[MAX_IN];
  int64_t dims[MAX_IN][PCGC_MAX_RANK];
  bool training;
  int opt;               /* 0 sgd, 1 sgd with momentum, 2 adam */
  void (*set)(pcgc_attrs *a);
} bench_case;

static void set_gelu_tanh(pcgc_attrs *a) { pcgc_attrs_set_int(a, "approximate", 1); }
static void set_scalar(pcgc_attrs *a) { pcgc_attrs_set_float(a, "scalar", 0.37); }
static void set_dropout(pcgc_attrs *a) { pcgc_attrs_set_float(a, "rate", 0.1); }
static void set_pool(pcgc_attrs *a, int kind, int64_t k, int64_t s, int64_t p) {
  pcgc_attrs_set_int(a, "kind", kind);
  pcgc_attrs_set_ints(a, "kernel", 2, (int64_t[]){k, k});
  pcgc_attrs_set_ints(a, "stride", 2, (int64_t[]){s, s});
  pcgc_attrs_set_ints(a, "padding", 2, (int64_t[]){p, p});
}
static void set_maxpool2(pcgc_attrs *a) { set_pool(a, PCGC_POOL_MAX, 2, 2, 0); }
static void set_maxpool3(pcgc_attrs *a) { set_pool(a, PCGC_POOL_MAX, 3, 2, 1); }
static void set_avgpool2(pcgc_attrs *a) { set_pool(a, PCGC_POOL_AVG, 2, 2, 0); }
static void set_avgpool3(pcgc_attrs *a) { set_pool(a, PCGC_POOL_AVG, 3, 1, 1); }
static void set_gap(pcgc_attrs *a) {
  pcgc_attrs_set_int(a, "kind", PCGC_POOL_AVG);
  pcgc_attrs_set_int(a, "global", 1);
}
static void set_heads(pcgc_attrs *a) { pcgc_attrs_set_int(a, "heads", 8); }
static void set_heads_drop(pcgc_attrs *a) {
  pcgc_attrs_set_int(a, "heads", 8);
  pcgc_attrs_set_float(a, "dropout", 0.1);
}
static void set_reduce(pcgc_attrs *a) { pcgc_attrs_set_ints(a, "dims", 1, (int64_t[]){0}); }
static void set_conv(pcgc_attrs *a) {
  pcgc_attrs_set_ints(a, "padding", 2, (int64_t[]){1, 1});
}

#define T1M {32, 32, 32, 32}   /* the CNN's first stage: 1M elements */
#define TBSE {16, 128, 512}    /* the transformer block's activations: 1M */
#define TFFN {16, 128, 2048}   /* its FFN hidden layer: 4M */

static const bench_case cases[] = {
    {"relu 1M", PCGC_OP_RELU, 1, {4}, {T1M}, false, 0, NULL},
    {"gelu 4M", PCGC_OP_GELU, 1, {3}, {TFFN}, false, 0, NULL},
    {"gelu-tanh 4M", PCGC_OP_GELU, 1, {3}, {TFFN}, false, 0, set_gelu_tanh},
    {"sigmoid 1M", PCGC_OP_SIGMOID, 1, {3}, {TBSE}, false, 0, NULL},
    {"silu 1M", PCGC_OP_SILU, 1, {3}, {TBSE}, false, 0, NULL},
    {"tanh 1M", PCGC_OP_TANH, 1, {3}, {TBSE}, false, 0, NULL},
    {"exp 1M", PCGC_OP_EXP, 1, {3}, {TBSE}, false, 0, NULL},
    {"scalar_mul 1M", PCGC_OP_SCALAR_MUL, 1, {3}, {TBSE}, false, 0, set_scalar},
    {"dropout 1M", PCGC_OP_DROPOUT, 1, {3}, {TBSE}, true, 0, set_dropout},
    {"dropout-off 1M", PCGC_OP_DROPOUT, 1, {3}, {TBSE}, false, 0, set_dropout},
    {"add 1M", PCGC_OP_ADD, 2, {3, 3}, {TBSE, TBSE}, false, 0, NULL},
    {"add-row 1M", PCGC_OP_ADD, 2, {3, 1}, {TBSE, {512}}, false, 0, NULL},
    {"add-col 1M", PCGC_OP_ADD, 2, {3, 3}, {TBSE, {16, 128, 1}}, false, 0, NULL},
    {"add-scalar 1M", PCGC_OP_ADD, 2, {3, 0}, {TBSE, {0}}, false, 0, NULL},
    {"mul 1M", PCGC_OP_MUL, 2, {3, 3}, {TBSE, TBSE}, false, 0, NULL},
    {"div 1M", PCGC_OP_DIV, 2, {3, 3}, {TBSE, TBSE}, false, 0, NULL},
    {"maxpool2 1M", PCGC_OP_POOL2D, 1, {4}, {T1M}, false, 0, set_maxpool2},
    {"maxpool2 512K", PCGC_OP_POOL2D, 1, {4}, {{32, 64, 16, 16}}, false, 0, set_maxpool2},
    {"maxpool3s2p1 1M", PCGC_OP_POOL2D, 1, {4}, {T1M}, false, 0, set_maxpool3},
    {"avgpool2 1M", PCGC_OP_POOL2D, 1, {4}, {T1M}, false, 0, set_avgpool2},
    {"avgpool3s1p1 1M", PCGC_OP_POOL2D, 1, {4}, {T1M}, false, 0, set_avgpool3},
    {"globalavg 1M", PCGC_OP_POOL2D, 1, {4}, {{32, 256, 8, 16}}, false, 0, set_gap},
    {"batchnorm 1M", PCGC_OP_BATCHNORM, 3, {4, 1, 1}, {T1M, {32}, {32}}, false, 0, NULL},
    {"layernorm 1M", PCGC_OP_LAYERNORM, 3, {3, 1, 1}, {TBSE, {512}, {512}}, false, 0, NULL},
    {"softmax 2M", PCGC_OP_SOFTMAX, 1, {2}, {{16384, 128}}, false, 0, NULL},
    {"reduce_sum 1M", PCGC_OP_REDUCE_SUM, 1, {3}, {TBSE}, false, 0, set_reduce},
    {"mse 1M", PCGC_OP_MSE, 2, {3, 3}, {TBSE, TBSE}, false, 0, NULL},
    {"conv2d cnn.s2", PCGC_OP_CONV2D, 2, {4, 4}, {{32, 32, 16, 16}, {64, 32, 3, 3}}, false, 0, set_conv},
    {"attention 1M", PCGC_OP_ATTENTION, 11, {3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1},
     {TBSE, TBSE, TBSE, {512, 512}, {512, 512}, {512, 512}, {512, 512}, {512}, {512}, {512}, {512}}, false, 0,
     set_heads},
    {"attention-drop 1M", PCGC_OP_ATTENTION, 11, {3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1},
     {TBSE, TBSE, TBSE, {512, 512}, {512, 512}, {512, 512}, {512, 512}, {512}, {512}, {512}, {512}}, true, 0,
     set_heads_drop},
    {"sgd 1M", PCGC_OP_COUNT, 1, {2}, {{4096, 256}}, false, 0, NULL},
    {"momentum 1M", PCGC_OP_COUNT, 1, {2}, {{4096, 256}}, false, 1, NULL},
    {"adam 1M", PCGC_OP_COUNT, 1, {2}, {{4096, 256}}, false, 2, NULL},
};

static size_t nbytes(const pcgc_buf *b) { return (size_t)pcgc_buf_numel(b) * pcgc_dtype_size(b->dtype); }

static pcgc_buf mkbuf(pcgc_dtype dt, int rank, const int64_t *dims) {
  pcgc_buf b;
  memset(&b, 0, sizeof b);
  b.dtype = dt;
  b.rank = rank;
  memcpy(b.dims, dims, sizeof *dims * (size_t)rank);
  b.data = calloc(nbytes(&b) ? nbytes(&b) : 1, 1);
  if (!b.data) {
    fprintf(stderr, "bench_kernels: out of memory\n");
    exit(1);
  }
  return b;
}

/* Attention weights N(0, 1/fan_in), as models initialise them: scores
 * then stay in the range training sees. */
static void scale_by(pcgc_buf *b, double s) {
  for (int64_t i = 0; i < pcgc_buf_numel(b); i++) {
    if (b->dtype == PCGC_F32) ((float *)b->data)[i] *= (float)s;
    else ((double *)b->data)[i] *= s;
  }
}

static void zero(pcgc_buf *b) {
  if (b->data) memset(b->data, 0, nbytes(b));
}

static void hash_print(const char *what, const pcgc_buf *b) {
  if (b->data) printf("  %-8s %016llx\n", what, (unsigned long long)XXH3_64bits(b->data, nbytes(b)));
}

static int run_optimizer(const bench_case *c, pcgc_dtype dt, int repeat, bool hash) {
  pcgc_buf w = mkbuf(dt, c->rank[0], c->dims[0]), g = mkbuf(dt, c->rank[0], c->dims[0]);
  pcgc_buf m = mkbuf(dt, c->rank[0], c->dims[0]), v = mkbuf(dt, c->rank[0], c->dims[0]);
  pcgc_cpu_fill_random(&w, 0, 1, 1, NULL);
  pcgc_cpu_fill_random(&g, 0, 1, 2, NULL);
  pcgc_optimizer o;
  pcgc_optimizer_default(&o, c->opt == 2 ? PCGC_ADAM : PCGC_SGD);
  if (c->opt == 1) o.momentum = 0.9;
  o.weight_decay = 1e-4;
  pcgc_error err;
  pcgc_error_clear(&err);
  double *t = calloc((size_t)repeat, sizeof *t);
  int rc = 0;
  for (int r = -1; r < repeat; r++) {
    double t0 = bench_now();
    if (pcgc_cpu_optimizer_step(&o, &w, &g, &m, &v, r + 2, &err) != PCGC_OK) {
      fprintf(stderr, "%s: %s\n", c->name, err.message);
      rc = 1;
      break;
    }
    if (r >= 0) t[r] = bench_now() - t0;
  }
  if (!rc) {
    double n = (double)pcgc_buf_numel(&w), f = bench_median(t, repeat);
    printf("%-20s fwd %10.1f us %6.2f ns/el\n", c->name, f * 1e6, f * 1e9 / n);
    if (hash) {
      hash_print("w", &w);
      hash_print("m", &m);
      hash_print("v", &v);
    }
  }
  free(t);
  free(w.data), free(g.data), free(m.data), free(v.data);
  return rc;
}

static int run_case(const bench_case *c, pcgc_dtype dt, int repeat, bool hash) {
  if (c->kind == PCGC_OP_COUNT) return run_optimizer(c, dt, repeat, hash);
  pcgc_attrs a;
  pcgc_attrs_init(&a, c->kind);
  if (c->set) c->set(&a);
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_ptensor tin[MAX_IN], tout[4];
  pcgc_buf in[MAX_IN], din[MAX_IN], out[1], dout[1];
  for (int i = 0; i < c->n_in; i++) pcgc_ptensor_init(&tin[i], dt, c->rank[i], c->dims[i]);
  if (pcgc_op_infer(c->kind, &a, c->n_in, tin, tout, &err) != PCGC_OK) {
    fprintf(stderr, "%s: %s\n", c->name, err.message);
    return 1;
  }
  int64_t most = 0;
  for (int i = 0; i < c->n_in; i++) {
    in[i] = mkbuf(dt, c->rank[i], c->dims[i]);
    din[i] = mkbuf(dt, c->rank[i], c->dims[i]);
    pcgc_cpu_fill_random(&in[i], 0, 1, (uint64_t)i, NULL);
    if (c->kind == PCGC_OP_ATTENTION && i >= 3) scale_by(&in[i], 1 / sqrt((double)c->dims[i][0])); /* weights */
    if (pcgc_buf_numel(&in[i]) > most) most = pcgc_buf_numel(&in[i]);
  }
  out[0] = mkbuf(dt, tout[0].rank, tout[0].dims);
  dout[0] = mkbuf(dt, tout[0].rank, tout[0].dims);
  pcgc_cpu_fill_random(&dout[0], 0, 2, 0, NULL);
  pcgc_kernel_ctx ctx = {NULL, NULL, 1, pcgc_rng_stream(c->name), c->training, NULL, 0};
  double *ft = calloc((size_t)repeat, sizeof *ft), *bt = calloc((size_t)repeat, sizeof *bt);
  int rc = 0;
  for (int r = -2; r < repeat && !rc; r++) { /* -2: the clean call that is hashed, -1: warm-up */
    if (r == -2) zero(&out[0]);
    double t0 = bench_now();
    if (pcgc_cpu_forward(c->kind, &a, c->n_in, in, 1, out, &ctx, &err) != PCGC_OK) rc = 1;
    double t1 = bench_now();
    for (int i = 0; i < c->n_in && !rc; i++) zero(&din[i]);
    double t2 = bench_now();
    if (!rc && pcgc_cpu_backward(c->kind, &a, c->n_in, in, 1, out, dout, din, &ctx, &err) != PCGC_OK) rc = 1;
    double t3 = bench_now();
    if (r >= 0) ft[r] = t1 - t0, bt[r] = t3 - t2;
    if (r == -2 && hash && !rc) {
      printf("%s\n", c->name);
      hash_print("out", &out[0]);
      for (int i = 0; i < c->n_in; i++) {
        char what[16];
        snprintf(what, sizeof what, "din%d", i);
        hash_print(what, &din[i]);
      }
    }
  }
  if (rc) {
    fprintf(stderr, "%s: %s\n", c->name, err.message);
  } else {
    double f = bench_median(ft, repeat), b = bench_median(bt, repeat);
    printf("%-20s fwd %10.1f us %6.2f ns/el   bwd %10.1f us %6.2f ns/el\n", c->name, f * 1e6,
           f * 1e9 / (double)most, b * 1e6, b * 1e9 / (double)most);
  }
  free(ft), free(bt);
  for (int i = 0; i < c->n_in; i++) free(in[i].data), free(din[i].data);
  free(out[0].data), free(dout[0].data);
  return rc;
}

int main(int argc, char **argv) {
  int repeat = 20;
  const char *only = NULL;
  bool hash = false;
  pcgc_dtype dt = PCGC_F32;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) repeat = atoi(argv[++i]);
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    else if (strcmp(argv[i], "--f64") == 0) dt = PCGC_F64;
    else if (strcmp(argv[i], "--hash") == 0) hash = true;
    else {
      fprintf(stderr, "usage: bench_kernels [--repeat N] [--only TEXT] [--f64] [--hash]\n");
      return 2;
    }
  }
  if (repeat < 1) repeat = 1;
  printf("CPU kernels, %s, median of %d calls\n", pcgc_dtype_name(dt), repeat);
  int rc = 0;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    if (!only || strstr(cases[i].name, only)) rc |= run_case(&cases[i], dt, repeat, hash);
  return rc;
}
