/*
 * k_loss.c — CPU kernels of the losses: softmax_cross_entropy (`xent`) and
 * mean squared error (`mse`). Each writes a rank-0 buffer.
 *
 * Cross entropy of logits [..., C] and integer labels [...] is, per label
 * position, logsumexp(row) - row[label], with the maximum subtracted before
 * exponentiating; its gradient is softmax(row) - onehot(label). With
 * reduction=mean both losses divide by the *logical* count (label positions,
 * resp. elements) from the piece descriptors, so the losses of the pieces
 * of a sharded batch add up to the loss of the whole batch. Sums are in
 * double.
 */
#include <math.h>

#include "k_common_impl.h"

/* ----------------------------------------------------- cross entropy */

static pcgc_status check_labels(const pcgc__kargs *k, int64_t C) {
  const pcgc_buf *lab = &k->in[1];
  int64_t n = pcgc_buf_numel(lab);
  for (int64_t p = 0; p < n; p++) {
    int64_t c = kx_geti(lab, p);
    if (c < 0 || c >= C)
      return pcgc__kfail(k, "label %lld at position %lld is not a class id in [0, %lld)", (long long)c,
                         (long long)p, (long long)C);
  }
  return PCGC_OK;
}

/* log(sum(exp(row))) of the C logits at `base`, computed around the max */
static double row_lse(const pcgc_buf *x, int64_t base, int64_t C) {
  double m = -INFINITY, s = 0;
  for (int64_t c = 0; c < C; c++) m = fmax(m, kx_get(x, base + c));
  for (int64_t c = 0; c < C; c++) s += exp(kx_get(x, base + c) - m);
  return m + log(s);
}

pcgc_status pcgc__cpu_fwd_xent(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, 0));
  const pcgc_buf *x = &k->in[0], *lab = &k->in[1];
  int64_t C = x->dims[x->rank - 1], P = pcgc_buf_numel(lab);
  KX_TRY(check_labels(k, C));
  double loss = 0;
  for (int64_t p = 0; p < P; p++) {
    loss += row_lse(x, p * C, C) - kx_get(x, p * C + kx_geti(lab, p));
  }
  kx_set(&k->out[0], 0, loss / pcgc__loss_count(k, 1));
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_xent(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, 0));
  const pcgc_buf *x = &k->in[0], *lab = &k->in[1];
  pcgc_buf *dx = &k->din[0];
  int64_t C = x->dims[x->rank - 1], P = pcgc_buf_numel(lab);
  KX_TRY(check_labels(k, C));
  if (!kx_want(dx)) return PCGC_OK;
  double g = kx_get(&k->dout[0], 0) / pcgc__loss_count(k, 1);
  for (int64_t p = 0; p < P; p++) {
    double lse = row_lse(x, p * C, C);
    int64_t y = kx_geti(lab, p);
    for (int64_t c = 0; c < C; c++)
      kx_add(dx, p * C + c, g * (exp(kx_get(x, p * C + c) - lse) - (c == y ? 1 : 0)));
  }
  return PCGC_OK;
}

/* ----------------------------------------------------- squared error */

/* sum of (p - t)^2 in order; dp += g (p - t); one loop per dtype */
#define MSE_LOOPS(REAL, SFX)                                                                             \
  static double mse_sum_##SFX(int64_t n, const REAL *restrict p, const REAL *restrict t) {              \
    double loss = 0;                                                                                     \
    for (int64_t i = 0; i < n; i++) {                                                                    \
      double d = (double)p[i] - (double)t[i];                                                            \
      loss += d * d;                                                                                     \
    }                                                                                                    \
    return loss;                                                                                         \
  }                                                                                                      \
  static void mse_grad_##SFX(int64_t n, double g, const REAL *restrict p, const REAL *restrict t,       \
                             REAL *restrict dp) {                                                        \
    KX_FOR(i, n, dp[i] += (REAL)(g * ((double)p[i] - (double)t[i])));                                    \
  }
MSE_LOOPS(float, f32)
MSE_LOOPS(double, f64)
#undef MSE_LOOPS

pcgc_status pcgc__cpu_fwd_mse(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, 0));
  const pcgc_buf *p = &k->in[0], *t = &k->in[1];
  int64_t n = pcgc_buf_numel(p);
  double loss = p->dtype == PCGC_F32 ? mse_sum_f32(n, p->data, t->data) : mse_sum_f64(n, p->data, t->data);
  kx_set(&k->out[0], 0, loss / pcgc__loss_count(k, 0));
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_mse(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, 0));
  const pcgc_buf *p = &k->in[0], *t = &k->in[1];
  pcgc_buf *dp = kx_want(&k->din[0]) ? &k->din[0] : NULL, *dt = kx_want(&k->din[1]) ? &k->din[1] : NULL;
  double g = 2 * kx_get(&k->dout[0], 0) / pcgc__loss_count(k, 0);
  int64_t n = pcgc_buf_numel(p);
  /* the loop for dp alone where it overlaps no input; a wanted dt (a target
   * that takes a gradient, which training data does not) keeps the loop of
   * both, whose -d gcc would turn into a subtraction in a vector loop */
  if (dp && !dt && kx_disjoint(dp, p) && kx_disjoint(dp, t)) {
    if (p->dtype == PCGC_F32) mse_grad_f32(n, g, p->data, t->data, dp->data);
    else mse_grad_f64(n, g, p->data, t->data, dp->data);
    return PCGC_OK;
  }
  for (int64_t i = 0; i < n; i++) {
    double d = g * (kx_get(p, i) - kx_get(t, i));
    if (dp) kx_add(dp, i, d);
    if (dt) kx_add(dt, i, -d);
  }
  return PCGC_OK;
}
