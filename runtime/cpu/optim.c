/*
 * optim.c — the optimizers, with the update rules of torch.optim:
 *
 *   SGD   g' = g + wd w
 *         momentum: buf = g' on step 1, else momentum buf + g' (dampening 0,
 *         no Nesterov); w -= lr buf.  Without momentum: w -= lr g'.
 *   Adam  g' = g + wd w (L2, not AdamW); m = b1 m + (1-b1) g';
 *         v = b2 v + (1-b2) g'^2;
 *         w -= (lr / (1-b1^t)) m / (sqrt(v) / sqrt(1-b2^t) + eps)  (no amsgrad)
 *
 * Each element is updated in double and stored back in the buffers' dtype,
 * by a loop per rule and dtype that gcc vectorises.
 */
#include <math.h>

#include "k_common_impl.h"

void pcgc_optimizer_default(pcgc_optimizer *o, pcgc_optimizer_kind kind) {
  memset(o, 0, sizeof *o);
  o->kind = kind;
  o->lr = kind == PCGC_ADAM ? 1e-3 : 1e-2;
  o->beta1 = 0.9;
  o->beta2 = 0.999;
  o->eps = 1e-8;
}

/* b (the state or gradient buffer `what`) must be shaped and typed like w. */
static pcgc_status like_w(const char *opt, const pcgc_buf *w, const pcgc_buf *b, const char *what,
                          pcgc_error *err) {
  if (!b || !b->data) return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: no %s buffer given", opt, what);
  bool ok = b->dtype == w->dtype && b->rank == w->rank;
  for (int d = 0; ok && d < w->rank; d++) ok = b->dims[d] == w->dims[d];
  if (ok) return PCGC_OK;
  char s1[128], s2[128];
  return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: the %s is %s but the weight is %s", opt, what,
                        (unsigned)b->rank <= PCGC_MAX_RANK ? KX_FMT(s1, b) : "malformed",
                        KX_FMT(s2, w));
}

static pcgc_status check_step(const pcgc_optimizer *o, const pcgc_buf *w, const pcgc_buf *g,
                              const pcgc_buf *m, const pcgc_buf *v, int64_t step, pcgc_error *err) {
  const char *opt = o->kind == PCGC_ADAM ? "adam" : "sgd";
  if (!w || !w->data || w->rank < 0 || w->rank > PCGC_MAX_RANK)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: no weight buffer given", opt);
  if (!kx_is_f(w->dtype))
    return pcgc_error_set(err, (unsigned)w->dtype < PCGC_DTYPE_COUNT && pcgc_dtype_is_float(w->dtype)
                                   ? PCGC_ERR_UNSUPPORTED : PCGC_ERR_INVALID,
                          "%s: weights must be f32 or f64, got %s", opt,
                          (unsigned)w->dtype < PCGC_DTYPE_COUNT ? pcgc_dtype_name(w->dtype) : "?");
  if (step < 1) return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: step counts from 1, got %lld", opt, (long long)step);
  if (!(o->lr >= 0) || !(o->weight_decay >= 0))
    return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: lr and weight_decay must not be negative (%g, %g)", opt,
                          o->lr, o->weight_decay);
  KX_TRY(like_w(opt, w, g, "gradient", err));
  if (o->kind == PCGC_SGD) {
    if (!(o->momentum >= 0))
      return pcgc_error_set(err, PCGC_ERR_INVALID, "sgd: momentum must not be negative, got %g", o->momentum);
    if (o->momentum != 0) KX_TRY(like_w(opt, w, m, "momentum", err));
    return PCGC_OK;
  }
  if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1) || !(o->eps >= 0))
    return pcgc_error_set(err, PCGC_ERR_INVALID, "adam: betas must be in [0, 1) and eps not negative "
                          "(beta1 %g, beta2 %g, eps %g)", o->beta1, o->beta2, o->eps);
  KX_TRY(like_w(opt, w, m, "first moment", err));
  KX_TRY(like_w(opt, w, v, "second moment", err));
  return PCGC_OK;
}

/* The updates, one loop per rule and dtype (REAL the buffers' type), each
 * element in double as the header says; restrict: the buffers are distinct
 * (checked below, else the loops run without the promise). */
#define OPT_LOOPS(REAL, SFX, RESTRICT)                                                                   \
  static void sgd_##SFX(int64_t n, double lr, double wd, REAL *RESTRICT w, const REAL *RESTRICT g) {     \
    KX_FOR(i, n, {                                                                                       \
      double wi = w[i], gi = (double)g[i] + wd * wi;                                                     \
      w[i] = (REAL)(wi - lr * gi);                                                                       \
    });                                                                                                  \
  }                                                                                                      \
  static void momentum_##SFX(int64_t n, double lr, double wd, double mu, bool first, REAL *RESTRICT w,   \
                             const REAL *RESTRICT g, REAL *RESTRICT m) {                                 \
    if (first)                                                                                           \
      KX_FOR(i, n, {                                                                                     \
        double wi = w[i], gi = (double)g[i] + wd * wi;                                                   \
        m[i] = (REAL)gi;                                                                                 \
        w[i] = (REAL)(wi - lr * gi);                                                                     \
      });                                                                                                \
    else                                                                                                 \
      KX_FOR(i, n, {                                                                                     \
        double wi = w[i], gi = (double)g[i] + wd * wi;                                                   \
        gi = mu * (double)m[i] + gi;                                                                     \
        m[i] = (REAL)gi;                                                                                 \
        w[i] = (REAL)(wi - lr * gi);                                                                     \
      });                                                                                                \
  }                                                                                                      \
  static void adam_##SFX(int64_t n, double wd, double b1, double b2, double step_size, double bc2_sqrt,  \
                         double eps, REAL *RESTRICT w, const REAL *RESTRICT g, REAL *RESTRICT m,         \
                         REAL *RESTRICT v) {                                                             \
    KX_FOR(i, n, {                                                                                       \
      double wi = w[i], gi = (double)g[i] + wd * wi;                                                     \
      double mi = b1 * (double)m[i] + (1 - b1) * gi, vi = b2 * (double)v[i] + (1 - b2) * gi * gi;        \
      m[i] = (REAL)mi;                                                                                   \
      v[i] = (REAL)vi;                                                                                   \
      w[i] = (REAL)(wi - step_size * mi / (sqrt(vi) / bc2_sqrt + eps));                                  \
    });                                                                                                  \
  }
OPT_LOOPS(float, f32, restrict)
OPT_LOOPS(double, f64, restrict)
OPT_LOOPS(float, f32_alias, )
OPT_LOOPS(double, f64_alias, )
#undef OPT_LOOPS

/* One rule's loop for the dtype, restrict where the buffers are distinct. */
#define OPT_CALL(rule, fast, ...)                                                                        \
  do {                                                                                                   \
    if (w->dtype == PCGC_F32) (fast ? rule##_f32 : rule##_f32_alias)(__VA_ARGS__);                       \
    else (fast ? rule##_f64 : rule##_f64_alias)(__VA_ARGS__);                                            \
  } while (0)

pcgc_status pcgc_cpu_optimizer_step(const pcgc_optimizer *o, pcgc_buf *w, const pcgc_buf *g,
                                    pcgc_buf *m, pcgc_buf *v, int64_t step, pcgc_error *err) {
  if (!o) return pcgc_error_set(err, PCGC_ERR_INVALID, "optimizer: none given");
  if (o->kind != PCGC_SGD && o->kind != PCGC_ADAM)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "optimizer: unknown kind %d", (int)o->kind);
  KX_TRY(check_step(o, w, g, m, v, step, err));
  int64_t n = pcgc_buf_numel(w);
  double lr = o->lr, wd = o->weight_decay;
  if (o->kind == PCGC_SGD) {
    double mu = o->momentum;
    if (mu == 0) {
      OPT_CALL(sgd, kx_disjoint(w, g), n, lr, wd, w->data, g->data);
      return PCGC_OK;
    }
    bool fast = kx_disjoint(w, g) && kx_disjoint(w, m) && kx_disjoint(g, m);
    OPT_CALL(momentum, fast, n, lr, wd, mu, step == 1, w->data, g->data, m->data);
    return PCGC_OK;
  }
  double b1 = o->beta1, b2 = o->beta2;
  double step_size = lr / (1 - pow(b1, (double)step)), bc2_sqrt = sqrt(1 - pow(b2, (double)step));
  bool fast = kx_disjoint(w, g) && kx_disjoint(w, m) && kx_disjoint(w, v) && kx_disjoint(g, m) &&
              kx_disjoint(g, v) && kx_disjoint(m, v);
  OPT_CALL(adam, fast, n, wd, b1, b2, step_size, bc2_sqrt, o->eps, w->data, g->data, m->data, v->data);
  return PCGC_OK;
}
