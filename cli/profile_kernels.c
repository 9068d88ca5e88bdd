/*
 * profile_kernels.c — the measuring half of `pcgc profile` (cli/profile.c):
 * times one node's CPU kernels, and the optimizer update of one weight. It
 * speaks runtime/cpu/kernels.h; cli/profile.c speaks search/search.h.
 *
 * Buffers of the input and output shapes are filled with seeded synthetic
 * data (as the reference trainer draws it); one warm-up call, then `repeat`
 * timed calls of forward and of backward; the medians are returned.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "kernels.h"

/* Piece dims of a (sequential) type: its logical dims. */
static void piece_dims(const pcgc_ptensor *t, int64_t *dims) {
  for (int d = 0; d < t->rank; d++) dims[d] = t->dims[d];
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A buffer of type t in f32 (floats) or t's integer dtype. NULL data on OOM. */
static pcgc_buf make_buf(const pcgc_ptensor *t) {
  pcgc_buf b = {.dtype = pcgc_dtype_is_float(t->dtype) ? PCGC_F32 : t->dtype, .rank = t->rank};
  piece_dims(t, b.dims);
  int64_t n = pcgc_buf_numel(&b);
  b.data = calloc((size_t)(n > 0 ? n : 1), pcgc_dtype_size(b.dtype));
  return b;
}

static void zero_buf(pcgc_buf *b) {
  if (b->data) memset(b->data, 0, (size_t)pcgc_buf_numel(b) * pcgc_dtype_size(b->dtype));
}

/* Upper bound of the ids an integer input holds: table rows for embedding,
 * classes (the last dim of input 0) for a loss's labels, else 1. */
static int64_t int_bound(const pcgc_node *n, const pcgc_buf *in) {
  if (n->kind == PCGC_OP_EMBEDDING && n->n_in > 1 && in[1].rank > 0) return in[1].dims[0];
  if (pcgc_op_class_of(n->kind) == PCGC_CLASS_LOSS && in[0].rank > 0) return in[0].dims[in[0].rank - 1];
  return 1;
}

typedef struct bench {
  pcgc_buf in[PCGC_CLI_PROFILE_MAX_INPUTS], din[PCGC_CLI_PROFILE_MAX_INPUTS], out[PCGC_VARIADIC], dout[PCGC_VARIADIC];
} bench;

static void bench_free(bench *b) {
  for (int i = 0; i < PCGC_CLI_PROFILE_MAX_INPUTS; i++) free(b->in[i].data), free(b->din[i].data);
  for (int i = 0; i < PCGC_VARIADIC; i++) free(b->out[i].data), free(b->dout[i].data);
}

pcgc_status pcgc__cli_profile_measure(const pcgc_graph *g, int id, const bool *grad, bool training, int repeat, double *fwd,
                           double *bwd, pcgc_error *err) {
  const pcgc_node *n = &g->nodes[id];
  bench b;
  memset(&b, 0, sizeof b);
  pcgc_status st = PCGC_OK;
  bool has_bwd = false;
  for (int i = 0; i < n->n_in && st == PCGC_OK; i++) {
    const pcgc_ptensor *t = pcgc_graph_ref_type(g, n->in[i]);
    b.in[i] = make_buf(t);
    if (!b.in[i].data) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory profiling '%s'", n->name);
    if (grad[n->in[i].node] && pcgc_dtype_is_float(t->dtype)) {
      b.din[i] = make_buf(t);
      has_bwd = true;
      if (!b.din[i].data) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory profiling '%s'", n->name);
    } else {
      b.din[i] = b.in[i];
      b.din[i].data = NULL;
    }
  }
  for (int i = 0; i < n->n_in && st == PCGC_OK; i++)
    pcgc_cpu_fill_random(&b.in[i], pcgc_dtype_is_float(b.in[i].dtype) ? 0 : int_bound(n, b.in), 1,
                         (uint64_t)(id * 64 + i), NULL);
  for (int j = 0; j < n->n_out && st == PCGC_OK; j++) {
    b.out[j] = make_buf(&n->out[j]);
    b.dout[j] = make_buf(&n->out[j]);
    if (!b.out[j].data || !b.dout[j].data) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory profiling '%s'", n->name);
    else pcgc_cpu_fill_random(&b.dout[j], 0, 2, (uint64_t)(id * 64 + j), NULL);
  }
  pcgc_kernel_ctx ctx = {.seed = 1, .node = pcgc_rng_stream(n->name), .training = training};
  double *ft = calloc((size_t)repeat, sizeof *ft), *bt = calloc((size_t)repeat, sizeof *bt);
  if (st == PCGC_OK && (!ft || !bt)) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory profiling '%s'", n->name);
  /* warm-up (-1), then the timed calls */
  for (int r = -1; r < repeat && st == PCGC_OK; r++) {
    double t0 = now();
    st = pcgc_cpu_forward(n->kind, &n->attrs, n->n_in, b.in, n->n_out, b.out, &ctx, err);
    double t1 = now();
    if (st != PCGC_OK) break;
    if (r >= 0) ft[r] = t1 - t0;
    if (!has_bwd) continue;
    t0 = now();
    for (int i = 0; i < n->n_in; i++) zero_buf(&b.din[i]);
    st = pcgc_cpu_backward(n->kind, &n->attrs, n->n_in, b.in, n->n_out, b.out, b.dout, b.din, &ctx, err);
    t1 = now();
    if (r >= 0) bt[r] = t1 - t0;
  }
  if (st == PCGC_OK) {
    *fwd = median(ft, repeat);
    *bwd = has_bwd ? median(bt, repeat) : 0;
  }
  free(ft);
  free(bt);
  bench_free(&b);
  return st;
}


pcgc_status pcgc__cli_profile_update(const pcgc_ptensor *t, int optimizer, int repeat, double *seconds,
                                     pcgc_error *err) {
  pcgc_buf b[4];
  bool ok = true;
  for (int k = 0; k < 4; k++) {
    b[k] = make_buf(t);
    b[k].dtype = PCGC_F32;
    ok &= b[k].data != NULL;
  }
  double *ts = calloc((size_t)repeat, sizeof *ts);
  pcgc_status st = ok && ts ? PCGC_OK : pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory profiling an update");
  for (int k = 0; k < 2 && st == PCGC_OK; k++) pcgc_cpu_fill_random(&b[k], 0, 1, (uint64_t)(1000 + k), NULL);
  pcgc_optimizer o;
  pcgc_optimizer_default(&o, optimizer == 2 ? PCGC_ADAM : PCGC_SGD);
  if (optimizer == 1) o.momentum = 0.9;
  for (int r = -1; r < repeat && st == PCGC_OK; r++) {
    double t0 = now();
    st = pcgc_cpu_optimizer_step(&o, &b[0], &b[1], &b[2], &b[3], r + 2, err);
    double t1 = now();
    if (r >= 0) ts[r] = t1 - t0;
  }
  if (st == PCGC_OK) *seconds = median(ts, repeat);
  free(ts);
  for (int k = 0; k < 4; k++) free(b[k].data);
  return st;
}
