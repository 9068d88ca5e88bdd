/*
 * profile_kernels.c — the measuring half of `pcgc profile` (cli/profile.c):
 * times one node's kernels, and the optimizer update of one weight, on the
 * CPU or on a backend's device (runtime/backend.h: the CUDA backend for GPU
 * machines, where each timed call ends by waiting for the device). It
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

#include "backend.h"
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

static bool use_mean;

void pcgc__cli_profile_use_mean(bool mean) { use_mean = mean; }

/* The median of v, or (pcgc__cli_profile_use_mean) its mean. */
static double median(double *v, int n) {
  if (use_mean) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    return n > 0 ? sum / n : 0;
  }
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

/* The slot ids of moe_dispatch's and moe_combine's routing input: a group's
 * choices take the slots in order, unique as moe_route's are, and -1 (a
 * dropped choice) past the last slot. */
static void fill_slots(const pcgc_node *n, pcgc_buf *in) {
  int si = n->kind == PCGC_OP_MOE_DISPATCH ? 1 : n->kind == PCGC_OP_MOE_COMBINE ? 2 : -1;
  if (si < 0 || in[si].rank != 3 || in[si].dtype != PCGC_I32) return;
  int64_t slots = n->kind == PCGC_OP_MOE_DISPATCH
                      ? pcgc_attrs_int(n->attrs, "experts") * pcgc_attrs_int(n->attrs, "capacity")
                      : in[0].dims[1] * in[0].dims[2];
  int64_t per = in[si].dims[1] * in[si].dims[2];
  int32_t *v = in[si].data;
  for (int64_t i = 0; i < pcgc_buf_numel(&in[si]); i++) v[i] = i % per < slots ? (int32_t)(i % per) : -1;
}

typedef struct bench {
  pcgc_buf in[PCGC_CLI_PROFILE_MAX_INPUTS], din[PCGC_CLI_PROFILE_MAX_INPUTS], out[PCGC_VARIADIC], dout[PCGC_VARIADIC];
} bench;

static void bench_free(bench *b) {
  for (int i = 0; i < PCGC_CLI_PROFILE_MAX_INPUTS; i++) free(b->in[i].data), free(b->din[i].data);
  for (int i = 0; i < PCGC_VARIADIC; i++) free(b->out[i].data), free(b->dout[i].data);
}

/* A device backend's copy of host buffer h (contents uploaded); NULL data: none. */
static pcgc_status dev_copy(pcgc_backend *be, const pcgc_buf *h, pcgc_buf *d, pcgc_error *err) {
  *d = *h;
  if (!h->data) return PCGC_OK;
  size_t bytes = (size_t)pcgc_buf_numel(h) * pcgc_dtype_size(h->dtype);
  if (!(d->data = be->alloc(be, bytes, err))) return PCGC_ERR_NOMEM;
  return be->upload(be, d->data, h->data, bytes, err);
}

static void dev_free(pcgc_backend *be, bench *d) {
  for (int i = 0; i < PCGC_CLI_PROFILE_MAX_INPUTS; i++) be->release(be, d->in[i].data), be->release(be, d->din[i].data);
  for (int i = 0; i < PCGC_VARIADIC; i++) be->release(be, d->out[i].data), be->release(be, d->dout[i].data);
}

static pcgc_status dev_zero_buf(pcgc_backend *be, pcgc_buf *b, pcgc_error *err) {
  if (!b->data) return PCGC_OK;
  return be->zero(be, b->data, (size_t)pcgc_buf_numel(b) * pcgc_dtype_size(b->dtype), err);
}

pcgc_status pcgc__cli_profile_measure(const pcgc_graph *g, int id, const bool *grad, bool training, int repeat,
                                      pcgc_backend *be, double *fwd, double *bwd, pcgc_error *err) {
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
  if (st == PCGC_OK) fill_slots(n, b.in);
  for (int j = 0; j < n->n_out && st == PCGC_OK; j++) {
    b.out[j] = make_buf(&n->out[j]);
    b.dout[j] = make_buf(&n->out[j]);
    if (!b.out[j].data || !b.dout[j].data) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory profiling '%s'", n->name);
    else pcgc_cpu_fill_random(&b.dout[j], 0, 2, (uint64_t)(id * 64 + j), NULL);
  }
  pcgc_kernel_ctx ctx = {.seed = 1, .node = pcgc_rng_stream(n->name), .training = training};
  /* on the CPU, as CPU plans run it: what forward keeps for backward (codegen's SAVED buffer) */
  void *saved = NULL;
  if (!(be && !be->host) && st == PCGC_OK && pcgc_op_saves(n->kind)) {
    const int64_t *dims[PCGC_VARIADIC];
    for (int i = 0; i < n->n_in; i++) dims[i] = b.in[i].dims;
    int64_t e = pcgc_op_saved_elems(n->kind, n->n_in, dims);
    size_t es = pcgc_dtype_size(pcgc_op_saved_dtype(n->out[0].dtype));
    if (e > 0 && !(saved = malloc((size_t)e * es))) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory profiling '%s'", n->name);
    ctx.saved = saved;
    ctx.saved_bytes = e > 0 ? e * (int64_t)es : 0;
  }
  double *ft = calloc((size_t)repeat, sizeof *ft), *bt = calloc((size_t)repeat, sizeof *bt);
  if (st == PCGC_OK && (!ft || !bt)) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory profiling '%s'", n->name);
  bool dev = be && !be->host;
  bench d; /* the device's copies (dev), else the host's buffers */
  memset(&d, 0, sizeof d);
  if (!dev) d = b;
  for (int i = 0; dev && i < n->n_in && st == PCGC_OK; i++)
    if (!(st = dev_copy(be, &b.in[i], &d.in[i], err))) st = dev_copy(be, &b.din[i], &d.din[i], err);
  for (int j = 0; dev && j < n->n_out && st == PCGC_OK; j++)
    if (!(st = dev_copy(be, &b.out[j], &d.out[j], err))) st = dev_copy(be, &b.dout[j], &d.dout[j], err);
  /* warm-up (-1), then the timed calls */
  for (int r = -1; r < repeat && st == PCGC_OK; r++) {
    if (dev && (st = be->sync(be, err))) break;
    double t0 = now();
    st = dev ? be->forward(be, n->kind, n->attrs, n->n_in, d.in, n->n_out, d.out, &ctx, err)
             : pcgc_cpu_forward(n->kind, n->attrs, n->n_in, b.in, n->n_out, b.out, &ctx, err);
    if (dev && st == PCGC_OK) st = be->sync(be, err);
    double t1 = now();
    if (st != PCGC_OK) break;
    if (r >= 0) ft[r] = t1 - t0;
    if (!has_bwd) continue;
    for (int i = 0; i < n->n_in && st == PCGC_OK; i++)
      if (dev) st = dev_zero_buf(be, &d.din[i], err);
      else zero_buf(&b.din[i]);
    if (dev && st == PCGC_OK) st = be->sync(be, err);
    t0 = now();
    if (st == PCGC_OK)
      st = dev ? be->backward(be, n->kind, n->attrs, n->n_in, d.in, n->n_out, d.out, d.dout, d.din, &ctx, err)
               : pcgc_cpu_backward(n->kind, n->attrs, n->n_in, b.in, n->n_out, b.out, b.dout, b.din, &ctx, err);
    if (dev && st == PCGC_OK) st = be->sync(be, err);
    t1 = now();
    if (r >= 0) bt[r] = t1 - t0;
  }
  if (dev) dev_free(be, &d);
  if (st == PCGC_OK) {
    *fwd = median(ft, repeat);
    *bwd = has_bwd ? median(bt, repeat) : 0;
  }
  free(ft);
  free(bt);
  free(saved);
  bench_free(&b);
  return st;
}


pcgc_status pcgc__cli_profile_update(const pcgc_ptensor *t, int optimizer, int repeat, pcgc_backend *be,
                                     double *seconds, pcgc_error *err) {
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
  bool dev = be && !be->host;
  pcgc_buf d[4];
  memset(d, 0, sizeof d);
  for (int k = 0; k < 4 && st == PCGC_OK; k++) {
    d[k] = b[k];
    if (dev) st = dev_copy(be, &b[k], &d[k], err);
  }
  for (int r = -1; r < repeat && st == PCGC_OK; r++) {
    if (dev && (st = be->sync(be, err))) break;
    double t0 = now();
    st = dev ? be->update(be, &o, &d[0], &d[1], &d[2], &d[3], r + 2, err)
             : pcgc_cpu_optimizer_step(&o, &b[0], &b[1], &b[2], &b[3], r + 2, err);
    if (dev && st == PCGC_OK) st = be->sync(be, err);
    double t1 = now();
    if (r >= 0) ts[r] = t1 - t0;
  }
  for (int k = 0; dev && k < 4; k++) be->release(be, d[k].data);
  if (st == PCGC_OK) *seconds = median(ts, repeat);
  free(ts);
  for (int k = 0; k < 4; k++) free(b[k].data);
  return st;
}
