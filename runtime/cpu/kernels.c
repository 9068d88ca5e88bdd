/*
 * kernels.c — dispatch of pcgc_cpu_forward/backward to the per-family
 * kernels (named after ops.def's `fn` column), and the non-kernels: sources
 * and parallel operators are executed by the interpreter, not here.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels_internal.h"

static pcgc_status vfail(const pcgc__kargs *k, pcgc_status st, const char *fmt, va_list ap) {
  if (!k->err) return st;
  char msg[900];
  vsnprintf(msg, sizeof msg, fmt, ap);
  return pcgc_error_set(k->err, st, "%s: %s", pcgc_op_name(k->kind), msg);
}

pcgc_status pcgc__kfail(const pcgc__kargs *k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pcgc_status st = vfail(k, PCGC_ERR_INVALID, fmt, ap);
  va_end(ap);
  return st;
}

pcgc_status pcgc__kfail_st(const pcgc__kargs *k, pcgc_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  st = vfail(k, st, fmt, ap);
  va_end(ap);
  return st;
}

static pcgc_piece whole(const pcgc_buf *b) {
  pcgc_piece p;
  memset(&p, 0, sizeof p);
  for (int d = 0; d < b->rank; d++) p.global[d] = b->dims[d];
  return p;
}

pcgc_piece pcgc__in_piece(const pcgc__kargs *k, int i) {
  return k->ctx->in ? k->ctx->in[i] : whole(&k->in[i]);
}

pcgc_piece pcgc__out_piece(const pcgc__kargs *k, int i) {
  return k->ctx->out ? k->ctx->out[i] : whole(&k->out[i]);
}

double pcgc__loss_count(const pcgc__kargs *k, int i) {
  if (pcgc_attrs_int(k->a, "reduction") == PCGC_REDUCTION_SUM) return 1;
  pcgc_piece p = pcgc__in_piece(k, i);
  double n = 1;
  for (int d = 0; d < k->in[i].rank; d++) n *= (double)p.global[d];
  return n;
}

/* Sources and parallel operators are not kernels. */
#define NOT_A_KERNEL(fn)                                                                       \
  pcgc_status pcgc__cpu_fwd_##fn(const pcgc__kargs *k) {                                       \
    return pcgc__kfail(k, "not a kernel: the interpreter executes this operator itself");      \
  }                                                                                            \
  pcgc_status pcgc__cpu_bwd_##fn(const pcgc__kargs *k) { return pcgc__cpu_fwd_##fn(k); }
PCGC__NOT_KERNELS(NOT_A_KERNEL)

typedef pcgc_status (*kfn)(const pcgc__kargs *);
static const kfn fwd_table[PCGC_OP_COUNT] = {
#define PCGC_OP(id, name, fn, min_in, max_in, n_out, schema) [PCGC_OP_##id] = pcgc__cpu_fwd_##fn,
#include "ops.def"
#undef PCGC_OP
};
static const kfn bwd_table[PCGC_OP_COUNT] = {
#define PCGC_OP(id, name, fn, min_in, max_in, n_out, schema) [PCGC_OP_##id] = pcgc__cpu_bwd_##fn,
#include "ops.def"
#undef PCGC_OP
};

static const pcgc_kernel_ctx default_ctx = {NULL, NULL, 0, 0, false, NULL, 0};

pcgc_status pcgc_cpu_forward(pcgc_op_kind kind, const pcgc_attrs *a, int n_in, const pcgc_buf *in,
                             int n_out, pcgc_buf *out, const pcgc_kernel_ctx *ctx, pcgc_error *err) {
  if ((unsigned)kind >= PCGC_OP_COUNT)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "unknown operator kind %d", (int)kind);
  pcgc__kargs k = {kind, a, n_in, in, n_out, out, NULL, NULL, ctx ? ctx : &default_ctx, err};
  return fwd_table[kind](&k);
}

pcgc_status pcgc_cpu_backward(pcgc_op_kind kind, const pcgc_attrs *a, int n_in, const pcgc_buf *in,
                              int n_out, const pcgc_buf *out, const pcgc_buf *dout, pcgc_buf *din,
                              const pcgc_kernel_ctx *ctx, pcgc_error *err) {
  if ((unsigned)kind >= PCGC_OP_COUNT)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "unknown operator kind %d", (int)kind);
  pcgc__kargs k = {kind, a, n_in, in, n_out, (pcgc_buf *)out, dout, din, ctx ? ctx : &default_ctx, err};
  return bwd_table[kind](&k);
}
