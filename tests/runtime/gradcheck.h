/*
 * gradcheck.h — finite-difference gradient checks of the CPU kernels, in f64.
 *
 * For an op with given input shapes: draw random inputs (floats N(0,1) or a
 * custom filler; integers uniform in [0, bound)), run forward, draw a random
 * output gradient dout, run backward, and compare every (or a sample of)
 * input gradient element with the central difference
 *     (sum(f(x + h e_i) * dout) - sum(f(x - h e_i) * dout)) / 2h,
 * h = 1e-6. Returns the worst error as |a - n| / max(1, |a|, |n|).
 * Include it in exactly one test file (static functions).
 */
#ifndef PCGC_TESTS_GRADCHECK_H
#define PCGC_TESTS_GRADCHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#define GC_MAX_IN 12

typedef struct gc_input {
  pcgc_dtype dtype;        /* F64 for float inputs; I32/I64 for indices */
  int rank;
  int64_t dims[PCGC_MAX_RANK];
  int64_t bound;           /* integers: values in [0, bound) */
  bool no_grad;            /* float input whose gradient is not checked */
  double scale;            /* floats: N(0, scale^2); 0 means 1 */
  double shift;            /* floats: added after scaling (e.g. keep away from 0) */
} gc_input;

typedef struct gc_result {
  double max_err;          /* worst relative error over checked elements */
  int worst_input;
  int64_t worst_index;
  double analytic, numeric;
  int64_t checked;
  char message[512];       /* set when something failed outright */
} gc_result;

static int64_t gc_numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  return n;
}

static void *gc_alloc(pcgc_buf *b) {
  size_t n = (size_t)gc_numel(b->rank, b->dims) * pcgc_dtype_size(b->dtype);
  b->data = calloc(n ? n : 1, 1);
  return b->data;
}

/* sum(out_k * dout_k) over all outputs */
static double gc_dot(int n_out, const pcgc_buf *out, const pcgc_buf *dout) {
  double s = 0;
  for (int j = 0; j < n_out; j++) {
    int64_t n = gc_numel(out[j].rank, out[j].dims);
    for (int64_t i = 0; i < n; i++) s += ((double *)out[j].data)[i] * ((double *)dout[j].data)[i];
  }
  return s;
}

/* Runs the check; at most `max_per_input` elements per input are probed
 * (spread evenly), 0 = all. ctx may be NULL. */
static gc_result gradcheck(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const gc_input *gin,
                           const pcgc_kernel_ctx *ctx, uint64_t seed, int64_t max_per_input) {
  gc_result r;
  memset(&r, 0, sizeof r);
  r.worst_input = -1;
  pcgc_buf in[GC_MAX_IN], din[GC_MAX_IN], out[16], out2[16], dout[16];
  pcgc_ptensor tin[GC_MAX_IN], tout[16];
  memset(in, 0, sizeof in);
  memset(din, 0, sizeof din);
  memset(out, 0, sizeof out);
  memset(out2, 0, sizeof out2);
  memset(dout, 0, sizeof dout);
  pcgc_error err;
  pcgc_error_clear(&err);
  for (int i = 0; i < n_in; i++) {
    pcgc_ptensor_init(&tin[i], gin[i].dtype, gin[i].rank, gin[i].dims);
    in[i].dtype = gin[i].dtype;
    in[i].rank = gin[i].rank;
    memcpy(in[i].dims, gin[i].dims, sizeof in[i].dims);
    gc_alloc(&in[i]);
    pcgc_cpu_fill_random(&in[i], gin[i].bound, seed, 1000 + (uint64_t)i, NULL);
    if (in[i].dtype == PCGC_F64) {
      double sc = gin[i].scale ? gin[i].scale : 1;
      int64_t n = gc_numel(in[i].rank, in[i].dims);
      for (int64_t e = 0; e < n; e++) ((double *)in[i].data)[e] = ((double *)in[i].data)[e] * sc + gin[i].shift;
    }
    din[i] = in[i];
    din[i].data = NULL;
    if (in[i].dtype == PCGC_F64 && !gin[i].no_grad) gc_alloc(&din[i]);
  }
  int n_out = pcgc_op_num_outputs(k, a);
  if (pcgc_op_infer(k, a, n_in, tin, tout, &err) != PCGC_OK) {
    snprintf(r.message, sizeof r.message, "infer: %.480s", err.message);
    r.max_err = INFINITY;
    goto done;
  }
  for (int j = 0; j < n_out; j++) {
    out[j].dtype = out2[j].dtype = dout[j].dtype = tout[j].dtype;
    out[j].rank = out2[j].rank = dout[j].rank = tout[j].rank;
    memcpy(out[j].dims, tout[j].dims, sizeof out[j].dims);
    memcpy(out2[j].dims, tout[j].dims, sizeof out[j].dims);
    memcpy(dout[j].dims, tout[j].dims, sizeof out[j].dims);
    gc_alloc(&out[j]);
    gc_alloc(&out2[j]);
    gc_alloc(&dout[j]);
    pcgc_cpu_fill_random(&dout[j], 0, seed, 2000 + (uint64_t)j, NULL);
  }
  if (pcgc_cpu_forward(k, a, n_in, in, n_out, out, ctx, &err) != PCGC_OK ||
      pcgc_cpu_backward(k, a, n_in, in, n_out, out, dout, din, ctx, &err) != PCGC_OK) {
    snprintf(r.message, sizeof r.message, "kernel: %.480s", err.message);
    r.max_err = INFINITY;
    goto done;
  }
  const double h = 1e-6;
  for (int i = 0; i < n_in; i++) {
    if (!din[i].data) continue;
    int64_t n = gc_numel(in[i].rank, in[i].dims);
    int64_t step = (max_per_input > 0 && n > max_per_input) ? n / max_per_input : 1;
    double *x = in[i].data;
    for (int64_t e = 0; e < n; e += step) {
      double keep = x[e];
      x[e] = keep + h;
      pcgc_cpu_forward(k, a, n_in, in, n_out, out2, ctx, &err);
      double fp = gc_dot(n_out, out2, dout);
      x[e] = keep - h;
      pcgc_cpu_forward(k, a, n_in, in, n_out, out2, ctx, &err);
      double fm = gc_dot(n_out, out2, dout);
      x[e] = keep;
      double num = (fp - fm) / (2 * h), ana = ((double *)din[i].data)[e];
      double scale = fmax(1.0, fmax(fabs(num), fabs(ana)));
      double rel = fabs(num - ana) / scale;
      r.checked++;
      if (rel > r.max_err || isnan(rel)) {
        r.max_err = isnan(rel) ? INFINITY : rel;
        r.worst_input = i;
        r.worst_index = e;
        r.analytic = ana;
        r.numeric = num;
      }
    }
  }
done:
  for (int i = 0; i < n_in; i++) {
    free(in[i].data);
    free(din[i].data);
  }
  for (int j = 0; j < 16; j++) {
    free(out[j].data);
    free(out2[j].data);
    free(dout[j].data);
  }
  return r;
}

/* Asserts a gradcheck passes within `tol` and checked something. */
#define GC_ASSERT(res, tol)                                                                          \
  do {                                                                                               \
    gc_result r_ = (res);                                                                            \
    ck_assert_msg(r_.message[0] == '\0', "%s", r_.message);                                          \
    ck_assert_msg(r_.checked > 0, "no gradient element was checked");                                \
    ck_assert_msg(r_.max_err <= (tol), "gradient error %g > %g at input %d element %lld: analytic %.10g vs " \
                  "numeric %.10g", r_.max_err, (double)(tol), r_.worst_input, (long long)r_.worst_index,   \
                  r_.analytic, r_.numeric);                                                           \
  } while (0)

#endif
