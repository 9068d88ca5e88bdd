/*
 * kernels_internal.h — what the kernel files of runtime/cpu share: the
 * argument bundle, the per-family entry points named after ops.def's `fn`
 * column, and small helpers.
 */
#ifndef PCGC_RUNTIME_CPU_KERNELS_INTERNAL_H
#define PCGC_RUNTIME_CPU_KERNELS_INTERNAL_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA backend's argument bundle (runtime/cuda/cu_internal.h) derives
 * from this one, so the validation and geometry of k_check.c and
 * k_dense_check.c serve both backends. */
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

/* The families of ops.def that are not kernels (sources and parallel
 * operators: the interpreter or the runtime executes them), for each
 * backend's stubs: PCGC__NOT_KERNELS(X) is X(fn) for each. */
#define PCGC__NOT_KERNELS(X) X(source) X(partition) X(combine) X(replicate) X(reduce_p) X(pipeline) X(unpipeline)

/* The piece descriptor of input i / output i (whole-tensor default filled
 * from the buffer when the context has none). */
pcgc_piece pcgc__in_piece(const pcgc__kargs *k, int i);
pcgc_piece pcgc__out_piece(const pcgc__kargs *k, int i);

/* The losses' divisor: 1 for reduction=sum; for mean, the logical element
 * count of input i (so the losses of the pieces of a sharded batch add up). */
double pcgc__loss_count(const pcgc__kargs *k, int i);

/* pcgc_rng_u64 in two halves (rng.c defines it through these), for loops
 * that draw many counters of one (seed, stream): the key once, then one mix
 * per counter. pcgc__rng_uniform_at(pcgc__rng_key(s, t), c) equals
 * pcgc_rng_uniform(s, t, c) bit for bit. */
static inline uint64_t pcgc__rng_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static inline uint64_t pcgc__rng_key(uint64_t seed, uint64_t stream) {
  return pcgc__rng_mix(pcgc__rng_mix(seed + 0x9e3779b97f4a7c15ULL) ^ (stream + 0x6a09e667f3bcc909ULL));
}
static inline uint64_t pcgc__rng_u64_at(uint64_t key, uint64_t counter) {
  return pcgc__rng_mix(key ^ (counter * 0x9e3779b97f4a7c15ULL + 0xbb67ae8584caa73bULL));
}
static inline double pcgc__rng_uniform_at(uint64_t key, uint64_t counter) {
  return (double)(pcgc__rng_u64_at(key, counter) >> 11) * 0x1.0p-53;
}

/* Keep tests of dropout without the conversion to double: for p < 1,
 * pcgc__rng_uniform_at(key, c) >= p iff (pcgc__rng_u64_at(key, c) >> 11) >=
 * pcgc__rng_threshold(p), the smallest m with m * 2^-53 >= p (p * 2^53 and
 * m * 2^-53 are exact, so m * 2^-53 >= p iff m >= p * 2^53). p >= 1 or NaN
 * gives 2^53, which no draw reaches: a uniform is below 1, and no
 * comparison with NaN holds. */
static inline uint64_t pcgc__rng_threshold(double p) {
  if (!(p < 1)) return (uint64_t)1 << 53;
  if (!(p > 0)) return 0;
  double s = p * 0x1.0p53;
  uint64_t m = (uint64_t)s;
  return (double)m < s ? m + 1 : m;
}

/* The parallel loop (k_parallel.c): fn(arg, lo, hi) over contiguous chunks
 * of [0, n), one per BLAS thread but none smaller than `grain`; the chunks
 * depend on n and the thread count only. The caller's work must give the
 * same results however it is cut (no sum across the cut). */
typedef void (*pcgc__range_fn)(void *arg, int64_t lo, int64_t hi);
void pcgc__parallel_for(int64_t n, int64_t grain, pcgc__range_fn fn, void *arg);

/* Error helpers: "op: message" into k->err, status PCGC_ERR_INVALID (or `st`). */
pcgc_status pcgc__kfail(const pcgc__kargs *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
pcgc_status pcgc__kfail_st(const pcgc__kargs *k, pcgc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif
