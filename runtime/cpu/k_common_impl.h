/*
 * k_common_impl.h — private helpers of the CPU kernels: element access in
 * f32 or f64, an n-dim strided loop, and the tight-loop helpers every
 * kernel file uses (KX_FOR and friends). The validation of a call
 * (pcgc__kcheck) is in k_check.h, shared with the CUDA kernels.
 *
 * Kernels compute in double. The general paths load and store through
 * kx_get/kx_set/kx_add, so one code path serves f32 and f64; the hot paths
 * are typed loops (the *_impl.h files, included once per dtype) that
 * compute the same expressions in the same order, so every result is the
 * same bit for bit, and every sum is still accumulated in double in order.
 */
#ifndef PCGC_RUNTIME_CPU_K_COMMON_IMPL_H
#define PCGC_RUNTIME_CPU_K_COMMON_IMPL_H

#include <stdio.h>
#include <string.h>

#include "k_check.h"
#include "kernels_internal.h"

/* ------------------------------------------------------- element access */

static inline bool kx_is_f(pcgc_dtype t) { return t == PCGC_F32 || t == PCGC_F64; }

static inline double kx_get(const pcgc_buf *b, int64_t i) {
  return b->dtype == PCGC_F32 ? (double)((const float *)b->data)[i] : ((const double *)b->data)[i];
}

static inline void kx_set(pcgc_buf *b, int64_t i, double v) {
  if (b->dtype == PCGC_F32) ((float *)b->data)[i] = (float)v;
  else ((double *)b->data)[i] = v;
}

static inline void kx_add(pcgc_buf *b, int64_t i, double v) {
  if (b->dtype == PCGC_F32) ((float *)b->data)[i] += (float)v;
  else ((double *)b->data)[i] += v;
}

/* Integer element (class labels). */
static inline int64_t kx_geti(const pcgc_buf *b, int64_t i) {
  return b->dtype == PCGC_I32 ? (int64_t)((const int32_t *)b->data)[i] : ((const int64_t *)b->data)[i];
}

/* A gradient buffer that is wanted (and can hold one). */
static inline bool kx_want(const pcgc_buf *din) { return din && din->data && kx_is_f(din->dtype); }

/* ------------------------------------------------------- tight loops
 * The fast kernels work on typed restrict pointers, one loop per op and
 * dtype. KX_FOR(i, n, body) runs body for i = 0 .. n-1 as blocks of 16
 * iterations, then blocks of 4, then one at a time: a loop whose trip count
 * is a constant is one that gcc -O2 vectorises (its cost model at -O2 takes
 * only loops that need no scalar epilogue), where the pointers are restrict,
 * and the blocks of 4 keep short rows (a pooled 8x8 plane) off the scalar
 * path. Bodies carry no sums across iterations, so the order in which the
 * elements are computed changes no result. KX_INLINE bodies are
 * instantiated with constant arguments (the op, strides, window sizes),
 * which folds their switches and loops away. */
#define KX_FOR(i, n, ...)                                                                            \
  do {                                                                                               \
    int64_t i##_n_ = (n), i##_0_ = 0;                                                                \
    for (; i##_0_ + 16 <= i##_n_; i##_0_ += 16)                                                      \
      for (int64_t i##_j_ = 0; i##_j_ < 16; i##_j_++) {                                              \
        int64_t i = i##_0_ + i##_j_;                                                                 \
        __VA_ARGS__;                                                                                 \
      }                                                                                              \
    for (; i##_0_ + 4 <= i##_n_; i##_0_ += 4)                                                        \
      for (int64_t i##_j_ = 0; i##_j_ < 4; i##_j_++) {                                               \
        int64_t i = i##_0_ + i##_j_;                                                                 \
        __VA_ARGS__;                                                                                 \
      }                                                                                              \
    for (int64_t i = i##_0_; i < i##_n_; i++) {                                                      \
      __VA_ARGS__;                                                                                   \
    }                                                                                                \
  } while (0)
#define KX_INLINE static inline __attribute__((always_inline))

/* fn##_f32(...) or fn##_f64(...) by a float dtype. */
#define KX_BY_DTYPE(dt, fn, ...) ((dt) == PCGC_F32 ? fn##_f32(__VA_ARGS__) : fn##_f64(__VA_ARGS__))

/* Whether two buffers share no byte: the restrict loops need it (the
 * interpreter and the runtime never pass overlapping buffers, but the API
 * does not forbid it, so overlapping calls take the plain loops). */
static inline bool kx_disjoint(const pcgc_buf *a, const pcgc_buf *b) {
  if (!a->data || !b->data) return true;
  uintptr_t pa = (uintptr_t)a->data, pb = (uintptr_t)b->data;
  size_t na = (size_t)pcgc_buf_numel(a) * pcgc_dtype_size(a->dtype);
  size_t nb = (size_t)pcgc_buf_numel(b) * pcgc_dtype_size(b->dtype);
  return pa + na <= pb || pb + nb <= pa;
}

/* ------------------------------------------------------- n-dim loop
 * Visits every index of `dims` in row-major order, carrying up to three
 * flat offsets, each with its own strides (a stride of 0 broadcasts). */
typedef struct kx_iter {
  int rank;
  int64_t dims[PCGC_MAX_RANK];
  int64_t st[3][PCGC_MAX_RANK];
  int64_t idx[PCGC_MAX_RANK];
  int64_t off[3];
} kx_iter;

static inline void kx_iter_next(kx_iter *it) {
  for (int d = it->rank - 1; d >= 0; d--) {
    for (int j = 0; j < 3; j++) it->off[j] += it->st[j][d];
    if (++it->idx[d] < it->dims[d]) return;
    for (int j = 0; j < 3; j++) it->off[j] -= it->st[j][d] * it->dims[d];
    it->idx[d] = 0;
  }
}

/* The loop `it` (at its first step) moved to step i, for a parallel chunk
 * that starts there. */
static inline kx_iter kx_iter_at(kx_iter it, int64_t i) {
  for (int d = it.rank - 1; d >= 0; d--) {
    int64_t q = i % it.dims[d];
    i /= it.dims[d];
    it.idx[d] = q;
    for (int j = 0; j < 3; j++) it.off[j] += q * it.st[j][d];
  }
  return it;
}

/* The grain of the parallel loop for loops with a libm call or a random
 * draw per element: chunks of fewer elements are not worth a thread. Loops
 * of a few operations an element are bound by memory and stay on one
 * thread: on two cores a second thread made relu and add slower. */
#define KX_GRAIN_LIBM ((int64_t)1 << 12)

#endif
