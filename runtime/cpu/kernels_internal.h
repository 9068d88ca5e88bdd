/*
 * kernels_internal.h — what the kernel files of runtime/cpu share: the
 * argument bundle, the per-family entry points named after ops.def's `fn`
 * column, and small helpers.
 */
#ifndef PCGC_RUNTIME_CPU_KERNELS_INTERNAL_H
#define PCGC_RUNTIME_CPU_KERNELS_INTERNAL_H

#include "kernels.h"

typedef struct pcgc__kargs {
  pcgc_op_kind kind;
  const pcgc_attrs *a;
  int n_in;
  const pcgc_buf *in;
  int n_out;
  pcgc_buf *out;           /* forward: written; backward: read only */
  const pcgc_buf *dout;    /* backward only */
  pcgc_buf *din;           /* backward only: gradients are added */
  const pcgc_kernel_ctx *ctx; /* never NULL here: the dispatcher supplies a default */
  pcgc_error *err;
} pcgc__kargs;

/* One forward and one backward function per ops.def family. */
#define PCGC_OP(id, name, fn, min_in, max_in, n_out, schema) \
  pcgc_status pcgc__cpu_fwd_##fn(const pcgc__kargs *k);      \
  pcgc_status pcgc__cpu_bwd_##fn(const pcgc__kargs *k);
#include "ops.def"
#undef PCGC_OP

/* The piece descriptor of input i / output i (whole-tensor default filled
 * from the buffer when the context has none). */
pcgc_piece pcgc__in_piece(const pcgc__kargs *k, int i);
pcgc_piece pcgc__out_piece(const pcgc__kargs *k, int i);

/* Error helper: "op: message". */
pcgc_status pcgc__kfail(const pcgc__kargs *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
