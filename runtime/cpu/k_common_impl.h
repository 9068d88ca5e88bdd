/*
 * k_common_impl.h — private helpers of the CPU kernels: element access in
 * f32 or f64, run-time validation of a kernel call (the non-dense kernels:
 * k_elementwise.c, k_shape.c, k_norm.c, k_loss.c), an n-dim strided loop,
 * and the tight-loop helpers every kernel file uses (KX_FOR and friends).
 *
 * Kernels compute in double. The general paths load and store through
 * kx_get/kx_set/kx_add, so one code path serves f32 and f64; the hot paths
 * are typed loops (the *_impl.h files, included once per dtype) that
 * compute the same expressions in the same order, so every result is the
 * same bit for bit, and every sum is still accumulated in double in order.
 *
 * Validation runs shape inference (pcgc_op_infer) on the buffers' own,
 * local shapes: a kernel then accepts exactly what inference accepts, and a
 * piece of a parallel tensor is checked like a small whole tensor (every op
 * here keeps its piece shapes consistent that way, except reshape, which
 * checks its logical shapes itself).
 */
#ifndef PCGC_RUNTIME_CPU_K_COMMON_IMPL_H
#define PCGC_RUNTIME_CPU_K_COMMON_IMPL_H

#include <stdio.h>
#include <string.h>

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

/* ------------------------------------------------------- validation */

enum {
  KX_ANY_DTYPE = 1u, /* forward only moves bytes: any dtype (f16 too) */
  KX_READS_OUT = 2u, /* backward reads the forward outputs */
  KX_NO_INFER = 4u,  /* the kernel checks shapes itself (reshape) */
};

/* A buffer's type is well formed and it has data. */
static inline pcgc_status kx_check_buf(const pcgc__kargs *k, const pcgc_buf *b, const char *what, int i) {
  if (b->rank < 0 || b->rank > PCGC_MAX_RANK)
    return pcgc__kfail(k, "%s %d has rank %d (0..%d allowed)", what, i, b->rank, PCGC_MAX_RANK);
  if ((unsigned)b->dtype >= PCGC_DTYPE_COUNT) return pcgc__kfail(k, "%s %d has an invalid dtype", what, i);
  for (int d = 0; d < b->rank; d++)
    if (b->dims[d] < 1)
      return pcgc__kfail(k, "%s %d has size %lld in dim %d; sizes must be positive", what, i,
                         (long long)b->dims[d], d);
  if (!b->data) return pcgc__kfail(k, "%s %d has no data", what, i);
  return PCGC_OK;
}

/* Buffer b must have type t (dtype and dims). */
static inline pcgc_status kx_check_type(const pcgc__kargs *k, const pcgc_buf *b, const pcgc_ptensor *t,
                                        const char *what, int i) {
  pcgc_status s = kx_check_buf(k, b, what, i);
  if (s != PCGC_OK) return s;
  bool ok = b->dtype == t->dtype && b->rank == t->rank;
  for (int d = 0; ok && d < b->rank; d++) ok = b->dims[d] == t->dims[d];
  if (ok) return PCGC_OK;
  char s1[128], s2[128];
  return pcgc__kfail(k, "%s %d is %s but must be %s", what, i, KX_FMT(s1, b),
                     kx_fmt(s2, sizeof s2, t->dtype, t->rank, t->dims));
}

/* A piece descriptor must place a buffer inside its logical tensor. */
static inline pcgc_status kx_check_piece(const pcgc__kargs *k, const pcgc_piece *p, const pcgc_buf *b,
                                         const char *what, int i) {
  for (int d = 0; d < b->rank; d++)
    if (p->offset[d] < 0 || p->global[d] < 1 || p->offset[d] + b->dims[d] > p->global[d])
      return pcgc__kfail(k, "the piece of %s %d does not fit its logical tensor: dim %d has %lld "
                         "elements at offset %lld of %lld", what, i, d, (long long)b->dims[d],
                         (long long)p->offset[d], (long long)p->global[d]);
  return PCGC_OK;
}

/* Unsupported dtype: a valid request the CPU kernels cannot do. */
static inline pcgc_status kx_unsupported(const pcgc__kargs *k, pcgc_dtype dt) {
  pcgc__kfail(k, "the CPU kernels compute in f32 and f64, not %s", pcgc_dtype_name(dt));
  if (k->err) k->err->status = PCGC_ERR_UNSUPPORTED;
  return PCGC_ERR_UNSUPPORTED;
}

/* Passes on an inference error (which starts "op: ") as a kernel error. */
static inline pcgc_status kx_infer_fail(const pcgc__kargs *k, const pcgc_error *e) {
  const char *msg = e->message;
  size_t nl = strlen(pcgc_op_name(k->kind));
  if (strncmp(msg, pcgc_op_name(k->kind), nl) == 0 && msg[nl] == ':') msg += nl + 1;
  while (*msg == ' ') msg++;
  return pcgc__kfail(k, "%s", msg);
}

#define KX_TRY(x)                                                                                  \
  do {                                                                                             \
    pcgc_status s_ = (x);                                                                          \
    if (s_ != PCGC_OK) return s_;                                                                  \
  } while (0)

/* Checks a forward (backward = false) or backward call: arity, attributes,
 * that inference accepts the inputs, that out (forward) / dout (backward,
 * and out too with KX_READS_OUT) have the inferred types, that each wanted
 * din has its input's type, and that piece descriptors fit. */
static inline pcgc_status kx_check(const pcgc__kargs *k, bool backward, unsigned flags) {
  if (!k->a) return pcgc__kfail(k, "no attributes given");
  if (k->a->kind != k->kind)
    return pcgc__kfail(k, "the attributes belong to operator '%s'", pcgc_op_name(k->a->kind));
  int lo = pcgc_op_min_inputs(k->kind), hi = pcgc_op_max_inputs(k->kind);
  if (k->n_in < lo || k->n_in > hi || (k->n_in > 0 && !k->in))
    return pcgc__kfail(k, "takes %d to %d inputs, got %d", lo, hi, k->in ? k->n_in : 0);
  int n_out = pcgc_op_num_outputs(k->kind, k->a);
  const pcgc_buf *outs = backward ? k->dout : k->out;
  if (k->n_out != n_out || !outs) return pcgc__kfail(k, "has %d outputs, got %d", n_out, outs ? k->n_out : 0);
  if (backward && (flags & KX_READS_OUT) && !k->out) return pcgc__kfail(k, "backward needs the forward outputs");
  if (backward && !k->din) return pcgc__kfail(k, "no input gradient buffers given");

  pcgc_ptensor tin[PCGC_VARIADIC], tout[PCGC_MAX_INTS];
  for (int i = 0; i < k->n_in; i++) {
    KX_TRY(kx_check_buf(k, &k->in[i], "input", i));
    pcgc_ptensor_init(&tin[i], k->in[i].dtype, k->in[i].rank, k->in[i].dims);
  }
  if (!(flags & KX_NO_INFER)) {
    pcgc_error e;
    pcgc_error_clear(&e);
    if (pcgc_op_infer(k->kind, k->a, k->n_in, tin, tout, &e) != PCGC_OK) return kx_infer_fail(k, &e);
  }
  for (int i = 0; i < k->n_in; i++)
    if (pcgc_dtype_is_float(k->in[i].dtype) && !kx_is_f(k->in[i].dtype) &&
        (backward || !(flags & KX_ANY_DTYPE)))
      return kx_unsupported(k, k->in[i].dtype);
  for (int j = 0; j < n_out; j++) {
    if (!(flags & KX_NO_INFER)) {
      KX_TRY(kx_check_type(k, &outs[j], &tout[j], backward ? "output gradient" : "output", j));
      if (backward && (flags & KX_READS_OUT)) KX_TRY(kx_check_type(k, &k->out[j], &tout[j], "output", j));
    } else {
      KX_TRY(kx_check_buf(k, &outs[j], backward ? "output gradient" : "output", j));
    }
    if (k->ctx->out) KX_TRY(kx_check_piece(k, &k->ctx->out[j], &outs[j], "output", j));
  }
  for (int i = 0; i < k->n_in; i++) {
    if (k->ctx->in) KX_TRY(kx_check_piece(k, &k->ctx->in[i], &k->in[i], "input", i));
    if (!backward || !k->din[i].data || !kx_is_f(k->in[i].dtype)) continue;
    KX_TRY(kx_check_type(k, &k->din[i], &tin[i], "gradient of input", i));
  }
  return PCGC_OK;
}

#endif
