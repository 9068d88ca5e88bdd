/*
 * k_check.h — run-time validation of a kernel call that the CPU kernels
 * (k_elementwise.c, k_shape.c, k_norm.c, k_loss.c) and the CUDA kernels of
 * the same families (runtime/cuda) share: one copy of the checks, so both
 * backends accept the same calls and report the same messages.
 *
 * Validation runs shape inference (pcgc_op_infer) on the buffers' own,
 * local shapes: a kernel then accepts exactly what inference accepts, and a
 * piece of a parallel tensor is checked like a small whole tensor (every op
 * here keeps its piece shapes consistent that way, except reshape, which
 * checks its logical shapes itself). Only the descriptors are read, never
 * the data, so device buffers are checked the same way.
 *
 * Also here: the shape helpers both backends use (kx_prod, kx_strides,
 * kx_broadcast_strides, kx_fmt).
 *
 * The backends differ in the float dtypes they compute in: the CPU in f32
 * and f64, CUDA in f32 only (KX_F32_ONLY); any other float dtype is a valid
 * request the backend cannot do (PCGC_ERR_UNSUPPORTED).
 */
#ifndef PCGC_RUNTIME_CPU_K_CHECK_H
#define PCGC_RUNTIME_CPU_K_CHECK_H

#include <stdio.h>

#include "kernels_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  KX_ANY_DTYPE = 1u, /* forward only moves bytes: any dtype (f16 too); CPU only */
  KX_READS_OUT = 2u, /* backward reads the forward outputs */
  KX_NO_INFER = 4u,  /* the kernel checks shapes itself (reshape) */
  KX_F32_ONLY = 8u,  /* the backend computes in f32 only (CUDA); else f32 and f64 (CPU) */
};

/* Checks a forward (backward = false) or backward call: arity, attributes,
 * that inference accepts the inputs, that out (forward) / dout (backward,
 * and out too with KX_READS_OUT) have the inferred types, that each wanted
 * din has its input's type, and that piece descriptors fit. */
pcgc_status pcgc__kcheck(const pcgc__kargs *k, bool backward, unsigned flags);

/* Reshape's `shape` attribute is logical, so a piece is checked against it
 * through the piece descriptors: the logical input must reshape to the
 * logical output y, and the piece must hold as many elements as its input.
 * (pcgc__kcheck with KX_NO_INFER first.) */
pcgc_status pcgc__kcheck_reshape(const pcgc__kargs *k, const pcgc_buf *y);

/* Batch normalisation's whole-tensor kernels see every element of their
 * channels: a piece may split the channels, but a piece of the batch (or of
 * any other dim) needs the statistics of the other pieces, which only the
 * split entry points (api: "pcgc_cpu" or "pcgc_cuda", then
 * _batchnorm_stats/apply) can combine. */
pcgc_status pcgc__kcheck_whole_batch(const pcgc__kargs *k, const char *api);

/* Passes on an inference error (which starts "op: ") as a kernel error. */
pcgc_status pcgc__kinfer_fail(const pcgc__kargs *k, const pcgc_error *e);

/* The product of dims[from .. to). */
static inline int64_t kx_prod(const int64_t *dims, int from, int to) {
  int64_t p = 1;
  for (int d = from; d < to; d++) p *= dims[d];
  return p;
}

/* Row-major strides of a shape. */
static inline void kx_strides(int rank, const int64_t *dims, int64_t *st) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    st[d] = s;
    s *= dims[d];
  }
}

/* Strides of operand `x` broadcast to the output shape `y` (0 where x has
 * size 1 or no dim at all). */
static inline void kx_broadcast_strides(const pcgc_buf *x, const pcgc_buf *y, int64_t *st) {
  int64_t xs[PCGC_MAX_RANK];
  kx_strides(x->rank, x->dims, xs);
  for (int d = 0; d < y->rank; d++) {
    int dx = d - (y->rank - x->rank);
    st[d] = dx >= 0 && x->dims[dx] > 1 ? xs[dx] : 0;
  }
}

/* "f32[2, 3]" */
static inline const char *kx_fmt(char *buf, size_t n, pcgc_dtype dt, int rank, const int64_t *dims) {
  const char *name = pcgc_dtype_name(dt);
  int w = snprintf(buf, n, "%s[", name ? name : "?");
  for (int d = 0; d < rank && w > 0 && (size_t)w < n; d++)
    w += snprintf(buf + w, n - (size_t)w, d ? ", %lld" : "%lld", (long long)dims[d]);
  if (w > 0 && (size_t)w < n) snprintf(buf + w, n - (size_t)w, "]");
  return buf;
}
#define KX_FMT(s, b) kx_fmt(s, sizeof s, (b)->dtype, (b)->rank, (b)->dims)

#define KX_TRY(x)                                                                                  \
  do {                                                                                             \
    pcgc_status s_ = (x);                                                                          \
    if (s_ != PCGC_OK) return s_;                                                                  \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif
