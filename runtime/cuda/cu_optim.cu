/*
 * cu_optim.cu — the optimizers on the GPU, with the update rules of
 * runtime/cpu/optim.c (torch.optim's SGD with momentum and L2 weight decay,
 * Adam with bias correction). One elementwise kernel per rule; each element
 * is updated in double in the CPU's order of operations, with the _rn
 * intrinsics (never fused into an fma), and stored back as f32, so the
 * results equal the CPU's bit for bit. The bias-correction factors are
 * computed on the host exactly as the CPU computes them.
 */
#include <math.h>

#include "cu_internal.h"

__device__ static inline double oadd(double a, double b) { return __dadd_rn(a, b); }
__device__ static inline double osub(double a, double b) { return __dsub_rn(a, b); }
__device__ static inline double omul(double a, double b) { return __dmul_rn(a, b); }

#define FOR_ELEMS(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* The buffers may alias (as on the CPU, where that takes the plain loop):
 * each element reads all its operands before writing any. */
__global__ void sgd_step(int64_t n, double lr, double wd, float *w, const float *g) {
  FOR_ELEMS(i, n) {
    double wi = w[i], gi = oadd((double)g[i], omul(wd, wi));
    w[i] = (float)osub(wi, omul(lr, gi));
  }
}

__global__ void momentum_step(int64_t n, double lr, double wd, double mu, bool first, float *w, const float *g,
                              float *m) {
  FOR_ELEMS(i, n) {
    double wi = w[i], gi = oadd((double)g[i], omul(wd, wi));
    if (!first) gi = oadd(omul(mu, (double)m[i]), gi);
    m[i] = (float)gi;
    w[i] = (float)osub(wi, omul(lr, gi));
  }
}

__global__ void adam_step(int64_t n, double wd, double b1, double b2, double step_size, double bc2_sqrt, double eps,
                          float *w, const float *g, float *m, float *v) {
  FOR_ELEMS(i, n) {
    double wi = w[i], gi = oadd((double)g[i], omul(wd, wi));
    double mi = oadd(omul(b1, (double)m[i]), omul(1 - b1, gi));
    double vi = oadd(omul(b2, (double)v[i]), omul(omul(1 - b2, gi), gi));
    m[i] = (float)mi;
    v[i] = (float)vi;
    w[i] = (float)osub(wi, __ddiv_rn(omul(step_size, mi), oadd(__ddiv_rn(__dsqrt_rn(vi), bc2_sqrt), eps)));
  }
}

#define OPT_TRY(x)                \
  do {                            \
    pcgc_status s_ = (x);         \
    if (s_ != PCGC_OK) return s_; \
  } while (0)

static const char *dtype_str(pcgc_dtype t) { return (unsigned)t < PCGC_DTYPE_COUNT ? pcgc_dtype_name(t) : "?"; }

/* b (the state or gradient buffer `what`) must be shaped and typed like w. */
static pcgc_status like_w(const char *opt, const pcgc_buf *w, const pcgc_buf *b, const char *what, pcgc_error *err) {
  if (!b || !b->data) return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: no %s buffer given", opt, what);
  bool ok = b->dtype == w->dtype && b->rank == w->rank;
  for (int d = 0; ok && d < w->rank; d++) ok = b->dims[d] == w->dims[d];
  if (ok) return PCGC_OK;
  return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: the %s (%s, rank %d) is not shaped like the weight (%s, rank %d)",
                        opt, what, dtype_str(b->dtype), b->rank, dtype_str(w->dtype), w->rank);
}

/* optim.c's check_step, with f32 the only weight type */
static pcgc_status check_step(const pcgc_optimizer *o, const pcgc_buf *w, const pcgc_buf *g, const pcgc_buf *m,
                              const pcgc_buf *v, int64_t step, pcgc_error *err) {
  const char *opt = o->kind == PCGC_ADAM ? "adam" : "sgd";
  if (!w || !w->data || w->rank < 0 || w->rank > PCGC_MAX_RANK)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: no weight buffer given", opt);
  if (w->dtype != PCGC_F32)
    return pcgc_error_set(err, (unsigned)w->dtype < PCGC_DTYPE_COUNT && pcgc_dtype_is_float(w->dtype)
                                   ? PCGC_ERR_UNSUPPORTED : PCGC_ERR_INVALID,
                          "%s: the CUDA optimizers update f32 weights, got %s", opt, dtype_str(w->dtype));
  for (int d = 0; d < w->rank; d++)
    if (w->dims[d] < 1)
      return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: the weight has size %lld in dim %d", opt,
                            (long long)w->dims[d], d);
  if (step < 1) return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: step counts from 1, got %lld", opt, (long long)step);
  if (!(o->lr >= 0) || !(o->weight_decay >= 0))
    return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: lr and weight_decay must not be negative (%g, %g)", opt, o->lr,
                          o->weight_decay);
  OPT_TRY(like_w(opt, w, g, "gradient", err));
  if (o->kind == PCGC_SGD) {
    if (!(o->momentum >= 0))
      return pcgc_error_set(err, PCGC_ERR_INVALID, "sgd: momentum must not be negative, got %g", o->momentum);
    if (o->momentum != 0) OPT_TRY(like_w(opt, w, m, "momentum", err));
    return PCGC_OK;
  }
  if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1) || !(o->eps >= 0))
    return pcgc_error_set(err, PCGC_ERR_INVALID,
                          "adam: betas must be in [0, 1) and eps not negative (beta1 %g, beta2 %g, eps %g)", o->beta1,
                          o->beta2, o->eps);
  OPT_TRY(like_w(opt, w, m, "first moment", err));
  OPT_TRY(like_w(opt, w, v, "second moment", err));
  return PCGC_OK;
}

pcgc_status pcgc_cuda_optimizer_step(pcgc_cuda *cu, const pcgc_optimizer *o, pcgc_buf *w, const pcgc_buf *g,
                                     pcgc_buf *m, pcgc_buf *v, int64_t step, pcgc_error *err) {
  if (!cu) return pcgc_error_set(err, PCGC_ERR_INVALID, "optimizer: no CUDA context given");
  if (!o) return pcgc_error_set(err, PCGC_ERR_INVALID, "optimizer: none given");
  if (o->kind != PCGC_SGD && o->kind != PCGC_ADAM)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "optimizer: unknown kind %d", (int)o->kind);
  OPT_TRY(check_step(o, w, g, m, v, step, err));
  if (cu->measuring) return PCGC_OK;
  int64_t n = 1;
  for (int d = 0; d < w->rank; d++) n *= w->dims[d];
  unsigned blocks = pcgc__cu_blocks(n);
  float *wd_ = (float *)w->data;
  const float *gd = (const float *)g->data;
  double lr = o->lr, wd = o->weight_decay;
  if (o->kind == PCGC_SGD && o->momentum == 0) {
    sgd_step<<<blocks, PCGC_CU_THREADS, 0, cu->stream>>>(n, lr, wd, wd_, gd);
  } else if (o->kind == PCGC_SGD) {
    momentum_step<<<blocks, PCGC_CU_THREADS, 0, cu->stream>>>(n, lr, wd, o->momentum, step == 1, wd_, gd,
                                                              (float *)m->data);
  } else {
    double b1 = o->beta1, b2 = o->beta2;
    double step_size = lr / (1 - pow(b1, (double)step)), bc2_sqrt = sqrt(1 - pow(b2, (double)step));
    adam_step<<<blocks, PCGC_CU_THREADS, 0, cu->stream>>>(n, wd, b1, b2, step_size, bc2_sqrt, o->eps, wd_, gd,
                                                          (float *)m->data, (float *)v->data);
  }
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return PCGC_OK;
  return pcgc_error_set(err, e == cudaErrorMemoryAllocation ? PCGC_ERR_NOMEM : PCGC_ERR_IO, "%s: kernel launch: %s",
                        o->kind == PCGC_ADAM ? "adam" : "sgd", cudaGetErrorString(e));
}
