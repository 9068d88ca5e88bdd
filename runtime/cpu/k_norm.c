/*
 * k_norm.c — CPU kernels of softmax and log_softmax, reductions (reduce_sum, reduce_mean,
 * reduce_max)
 * and normalisation (batchnorm, layernorm), plus the batch-norm entry points
 * for a batch sharded over pieces.
 *
 * Every statistic and sum is accumulated in double, each in a fixed order.
 * Softmax subtracts the maximum before exponentiating. A reduction visits
 * its input with the reduced dims innermost, so each output element is one
 * contiguous run. Batch norm works channel by channel (training-mode
 * statistics over every dim but 1, biased variance from the sums of x and
 * x^2): the whole-tensor kernels call the same channel-group functions as
 * the split entry points, so the two agree bit for bit. Layer norm
 * normalises each row of the last `axes` dims with two passes (mean, then
 * squared deviations); RMS norm is layer norm without centring or bias (one
 * pass of squares), its backward layer norm's with the mean 0. The typed loops are in k_norm_impl.h: sums of
 * NORM_G channels or rows side by side (each still in its own order), the
 * rest one vectorised loop per channel or row.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>

#include "k_common_impl.h"

/* x [N, C, S...] as [N, C, S] (batch norm) */
typedef struct bn_shape {
  int64_t N, C, S;
} bn_shape;

/* Channels (batch norm) and rows (layer norm) whose sums run side by side. */
#define NORM_G 4

#define REAL float
#define SFX(name) name##_f32
#include "k_norm_impl.h"
#define REAL double
#define SFX(name) name##_f64
#include "k_norm_impl.h"

/* ---------------------------------------------------------------- softmax */

/* x viewed as [outer, n, inner] around the softmax axis. */
typedef struct axis_view {
  int64_t outer, n, inner;
} axis_view;

static axis_view view_axis(const pcgc_buf *x, int64_t axis) {
  int a = (int)(axis < 0 ? axis + x->rank : axis);
  return (axis_view){kx_prod(x->dims, 0, a), x->dims[a], kx_prod(x->dims, a + 1, x->rank)};
}

/* log_softmax: (x - max) - log(sum(exp(x - max))) along the axis, and its
 * backward from the output, dx = dy - exp(y) sum(dy). One loop for both
 * dtypes (through kx_get/kx_set): no model spends its time here. The
 * element reads come before the writes of each line, so y may alias x. */
/* The maximum of one line along the axis and the sum of exp(x - max). */
static void line_max_sum(const pcgc_buf *x, int64_t base, axis_view v, double *mx, double *sum) {
  *mx = -INFINITY;
  *sum = 0;
  for (int64_t j = 0; j < v.n; j++) *mx = fmax(*mx, kx_get(x, base + j * v.inner));
  for (int64_t j = 0; j < v.n; j++) *sum += exp(kx_get(x, base + j * v.inner) - *mx);
}

static void log_softmax_fwd(const pcgc_buf *x, pcgc_buf *y, axis_view v) {
  for (int64_t o = 0; o < v.outer; o++)
    for (int64_t t = 0; t < v.inner; t++) {
      int64_t base = o * v.n * v.inner + t;
      double mx, sum;
      line_max_sum(x, base, v, &mx, &sum);
      double ls = log(sum);
      for (int64_t j = 0; j < v.n; j++) kx_set(y, base + j * v.inner, (kx_get(x, base + j * v.inner) - mx) - ls);
    }
}

static void log_softmax_bwd(const pcgc_buf *y, const pcgc_buf *dy, pcgc_buf *dx, axis_view v) {
  for (int64_t o = 0; o < v.outer; o++)
    for (int64_t t = 0; t < v.inner; t++) {
      int64_t base = o * v.n * v.inner + t;
      double sum = 0;
      for (int64_t j = 0; j < v.n; j++) sum += kx_get(dy, base + j * v.inner);
      for (int64_t j = 0; j < v.n; j++) {
        int64_t i = base + j * v.inner;
        kx_add(dx, i, kx_get(dy, i) - exp(kx_get(y, i)) * sum);
      }
    }
}

pcgc_status pcgc__cpu_fwd_softmax(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, 0));
  const pcgc_buf *x = &k->in[0];
  pcgc_buf *y = &k->out[0];
  axis_view v = view_axis(x, pcgc_attrs_int(k->a, "axis"));
  if (k->kind == PCGC_OP_LOG_SOFTMAX) {
    log_softmax_fwd(x, y, v);
    return PCGC_OK;
  }
  if (v.inner == 1 && kx_disjoint(x, y)) {
    double row[4096]; /* the exponentials of a row, computed once */
    KX_BY_DTYPE(x->dtype, softmax_rows, v.outer, v.n, x->data, y->data, v.n <= 4096 ? row : NULL);
    return PCGC_OK;
  }
  for (int64_t o = 0; o < v.outer; o++)
    for (int64_t t = 0; t < v.inner; t++) {
      int64_t base = o * v.n * v.inner + t;
      double mx, sum;
      line_max_sum(x, base, v, &mx, &sum);
      for (int64_t j = 0; j < v.n; j++)
        kx_set(y, base + j * v.inner, exp(kx_get(x, base + j * v.inner) - mx) / sum);
    }
  return PCGC_OK;
}

/* dx = y * (dy - sum(y * dy)) along the axis, from the forward output y. */
pcgc_status pcgc__cpu_bwd_softmax(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, KX_READS_OUT));
  const pcgc_buf *y = &k->out[0], *dy = &k->dout[0];
  pcgc_buf *dx = &k->din[0];
  if (!kx_want(dx)) return PCGC_OK;
  axis_view v = view_axis(y, pcgc_attrs_int(k->a, "axis"));
  if (k->kind == PCGC_OP_LOG_SOFTMAX) {
    log_softmax_bwd(y, dy, dx, v);
    return PCGC_OK;
  }
  if (v.inner == 1 && kx_disjoint(dx, y) && kx_disjoint(dx, dy)) {
    KX_BY_DTYPE(y->dtype, softmax_rows_bwd, v.outer, v.n, y->data, dy->data, dx->data);
    return PCGC_OK;
  }
  for (int64_t o = 0; o < v.outer; o++)
    for (int64_t t = 0; t < v.inner; t++) {
      int64_t base = o * v.n * v.inner + t;
      double dot = 0;
      for (int64_t j = 0; j < v.n; j++) dot += kx_get(y, base + j * v.inner) * kx_get(dy, base + j * v.inner);
      for (int64_t j = 0; j < v.n; j++) {
        int64_t i = base + j * v.inner;
        kx_add(dx, i, kx_get(y, i) * (kx_get(dy, i) - dot));
      }
    }
  return PCGC_OK;
}

/* ------------------------------------------------------------- reductions */

/* A loop over the input x with offsets (input, output) and the reduced dims
 * innermost; *inner is the number of elements each output sums and *scale
 * 1 for a sum, 1/(logical count of the reduced dims) for a mean. */
static kx_iter reduce_iter(const pcgc__kargs *k, const pcgc_buf *x, int64_t *inner, double *scale) {
  pcgc_ints dl = pcgc_attrs_ints(k->a, "dims");
  bool red[PCGC_MAX_RANK] = {false};
  for (int i = 0; i < dl.n; i++) red[dl.v[i] < 0 ? dl.v[i] + x->rank : dl.v[i]] = true;
  pcgc_piece p = pcgc__in_piece(k, 0);
  int64_t xs[PCGC_MAX_RANK], ys[PCGC_MAX_RANK], s = 1;
  kx_strides(x->rank, x->dims, xs);
  for (int d = x->rank - 1; d >= 0; d--) {
    ys[d] = red[d] ? 0 : s;
    if (!red[d]) s *= x->dims[d];
  }
  kx_iter it;
  memset(&it, 0, sizeof it);
  *inner = 1;
  double count = 1;
  for (int pass = 0; pass < 2; pass++)
    for (int d = 0; d < x->rank; d++) {
      if (red[d] != (pass == 1)) continue;
      it.dims[it.rank] = x->dims[d];
      it.st[0][it.rank] = xs[d];
      it.st[1][it.rank++] = ys[d];
      if (red[d]) {
        *inner *= x->dims[d];
        count *= (double)p.global[d];
      }
    }
  *scale = k->kind == PCGC_OP_REDUCE_MEAN ? 1 / count : 1;
  return it;
}

pcgc_status pcgc__cpu_fwd_reduce(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, 0));
  const pcgc_buf *x = &k->in[0];
  pcgc_buf *y = &k->out[0];
  int64_t inner;
  double scale;
  kx_iter it = reduce_iter(k, x, &inner, &scale);
  int64_t blocks = pcgc_buf_numel(x) / inner;
  if (k->kind == PCGC_OP_REDUCE_MAX) {
    for (int64_t b = 0; b < blocks; b++) {
      int64_t dst = it.off[1];
      double mx = -INFINITY;
      for (int64_t e = 0; e < inner; e++, kx_iter_next(&it)) {
        double v = kx_get(x, it.off[0]);
        if (v > mx || v != v) mx = v; /* NaN sticks, as in torch.amax */
        if (mx != mx) { for (e++, kx_iter_next(&it); e < inner; e++) kx_iter_next(&it); break; }
      }
      kx_set(y, dst, mx);
    }
    return PCGC_OK;
  }
  for (int64_t b = 0; b < blocks; b++) {
    int64_t dst = it.off[1];
    double acc = 0;
    for (int64_t e = 0; e < inner; e++, kx_iter_next(&it)) acc += kx_get(x, it.off[0]);
    kx_set(y, dst, acc * scale);
  }
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_reduce(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, k->kind == PCGC_OP_REDUCE_MAX ? KX_READS_OUT : 0));
  pcgc_buf *dx = &k->din[0];
  if (!kx_want(dx)) return PCGC_OK;
  const pcgc_buf *dy = &k->dout[0];
  int64_t inner;
  double scale;
  kx_iter it = reduce_iter(k, &k->in[0], &inner, &scale);
  int64_t n = pcgc_buf_numel(&k->in[0]);
  if (k->kind == PCGC_OP_REDUCE_MAX) { /* torch.amax: the gradient shared evenly by the maxima */
    const pcgc_buf *x = &k->in[0], *y = &k->out[0];
    for (int64_t b = 0; b < n / inner; b++) {
      kx_iter start = it;
      double mx = kx_get(y, it.off[1]), ties = 0;
      for (int64_t e = 0; e < inner; e++, kx_iter_next(&it)) ties += kx_get(x, it.off[0]) == mx;
      if (ties == 0) continue;
      double g = kx_get(dy, start.off[1]) / ties;
      it = start;
      for (int64_t e = 0; e < inner; e++, kx_iter_next(&it))
        if (kx_get(x, it.off[0]) == mx) kx_add(dx, it.off[0], g);
    }
    return PCGC_OK;
  }
  for (int64_t i = 0; i < n; i++, kx_iter_next(&it)) kx_add(dx, it.off[0], kx_get(dy, it.off[1]) * scale);
  return PCGC_OK;
}

/* ------------------------------------------------------------- batch norm
 * x is [N, C, S...]; element (n, c, s) of the flattened [N, C, S] sits at
 * (n * C + c) * S + s. The channel-group functions below (their loops in
 * k_norm_impl.h) are the only place the arithmetic happens. */

static bn_shape bn_shape_of(const pcgc_buf *x) {
  return (bn_shape){x->dims[0], x->dims[1], kx_prod(x->dims, 2, x->rank)};
}

/* mean and 1/sqrt(var + eps) of a channel from its sums */
static void bn_moments(double sum, double sumsq, double count, double eps, double *mean, double *invstd) {
  *mean = sum / count;
  double var = fmax(sumsq / count - *mean * *mean, 0);
  *invstd = 1 / sqrt(var + eps);
}

static double opt_get(const pcgc_buf *b, int64_t c, double dflt) {
  return b && b->data ? kx_get(b, c) : dflt;
}

/* The groups of NORM_G of C channels (rows): [c0, c0 + nc), the last one
 * shorter where NORM_G does not divide C. */
#define FOR_GROUPS(c0, nc, C)                                        \
  for (int64_t c0 = 0, nc = (C) < NORM_G ? (C) : NORM_G; c0 < (C); \
       c0 += NORM_G, nc = (C) - c0 < NORM_G ? (C) - c0 : NORM_G)

static void bn_group_stats(const pcgc_buf *x, int64_t c0, int nc, double *sum, double *sumsq) {
  KX_BY_DTYPE(x->dtype, bn_stats, bn_shape_of(x), x->data, c0, nc, sum, sumsq);
}

/* The fused relu (act=relu): apply writes max(y, 0), backward passes dy on
 * only where y > 0, y recomputed from x. */
static bool bn_relu(const pcgc_attrs *a) { return pcgc_attrs_int(a, "act") == PCGC_ACT_RELU; }

static void bn_chan_apply(double eps, bool relu, const pcgc_buf *x, const pcgc_buf *scale, const pcgc_buf *bias,
                          int64_t c, double sum, double sumsq, double count, pcgc_buf *y) {
  double mean, invstd;
  bn_moments(sum, sumsq, count, eps, &mean, &invstd);
  double g = opt_get(scale, c, 1) * invstd, b = opt_get(bias, c, 0);
  KX_BY_DTYPE(x->dtype, bn_apply, bn_shape_of(x), x->data, c, mean, g, b, relu, y->data);
}

/* A channel group's statistics and, with a fused relu, the coefficients of
 * its y = (x - mean) * mg + mb (mg, mb NULL without) */
typedef struct bn_group {
  double mean[NORM_G], invstd[NORM_G], g[NORM_G], b[NORM_G];
  const double *mg, *mb;
} bn_group;

static void bn_group_init(bn_group *G, double eps, bool relu, const pcgc_buf *scale, const pcgc_buf *bias,
                          int64_t c0, int nc, const double *sum, const double *sumsq, double count) {
  for (int k = 0; k < nc; k++) {
    bn_moments(sum[k], sumsq[k], count, eps, &G->mean[k], &G->invstd[k]);
    G->g[k] = opt_get(scale, c0 + k, 1) * G->invstd[k];
    G->b[k] = opt_get(bias, c0 + k, 0);
  }
  G->mg = relu ? G->g : NULL;
  G->mb = relu ? G->b : NULL;
}

/* sum(dy) and sum(dy * xhat) of channels [c0, c0 + nc) over x's elements */
static void bn_group_bwd_stats(const bn_group *G, const pcgc_buf *x, const pcgc_buf *dy, int64_t c0, int nc,
                               double *dsum, double *dxsum) {
  KX_BY_DTYPE(x->dtype, bn_bwd_stats, bn_shape_of(x), x->data, dy->data, c0, nc, G->mean, G->invstd, G->mg, G->mb,
              dsum, dxsum);
}

/* dx = scale * invstd * (dy - dsum/count - xhat * dxsum/count) over channels
 * [c0, c0 + nc), and this piece's share of dscale and dbias */
static void bn_group_bwd_apply(const bn_group *G, const pcgc_buf *x, const pcgc_buf *dy, int64_t c0, int nc,
                               double count, const double *dsum, const double *dxsum, pcgc_buf *dx,
                               pcgc_buf *dscale, pcgc_buf *dbias) {
  bn_shape sh = bn_shape_of(x);
  if (kx_want(dx))
    for (int k = 0; k < nc; k++) {
      double mdy = dsum[k] / count, mdx = dxsum[k] / count;
      KX_BY_DTYPE(x->dtype, bn_bwd_dx, sh, x->data, dy->data, c0 + k, G->mean[k], G->invstd[k], G->g[k], mdy, mdx,
                  G->mg != NULL, G->b[k], dx->data);
    }
  if (!kx_want(dscale) && !kx_want(dbias)) return;
  double ls1[NORM_G], ls2[NORM_G];
  KX_BY_DTYPE(x->dtype, bn_bwd_shares, sh, x->data, dy->data, c0, nc, G->mean, G->invstd, G->mg, G->mb, ls1, ls2);
  for (int k = 0; k < nc; k++) {
    if (kx_want(dscale)) kx_add(dscale, c0 + k, ls2[k]);
    if (kx_want(dbias)) kx_add(dbias, c0 + k, ls1[k]);
  }
}

/* The split entry points return nothing: the interpreter checked the call
 * through the whole-tensor types, so a bad one is a programming error. */
static void bn_assert(const pcgc_buf *x, const pcgc_buf *other) {
  assert(x && x->data && x->rank >= 2 && kx_is_f(x->dtype));
  assert(!other || (other->data && other->dtype == x->dtype && pcgc_buf_numel(other) == pcgc_buf_numel(x)));
  (void)x;
  (void)other;
}

void pcgc_cpu_batchnorm_stats(const pcgc_buf *x, double *sum, double *sumsq) {
  bn_assert(x, NULL);
  FOR_GROUPS(c0, nc, x->dims[1]) bn_group_stats(x, c0, (int)nc, sum + c0, sumsq + c0);
}

void pcgc_cpu_batchnorm_apply(const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *scale,
                              const pcgc_buf *bias, const double *sum, const double *sumsq,
                              double count, pcgc_buf *y) {
  bn_assert(x, y);
  double eps = pcgc_attrs_float(a, "eps");
  bool relu = bn_relu(a);
  for (int64_t c = 0; c < x->dims[1]; c++) bn_chan_apply(eps, relu, x, scale, bias, c, sum[c], sumsq[c], count, y);
}

void pcgc_cpu_batchnorm_bwd_stats(const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *scale,
                                  const pcgc_buf *bias, const pcgc_buf *dy, const double *sum,
                                  const double *sumsq, double count, double *dsum, double *dxsum) {
  bn_assert(x, dy);
  double eps = pcgc_attrs_float(a, "eps");
  bool relu = bn_relu(a);
  bn_group G;
  FOR_GROUPS(c0, nc, x->dims[1]) {
    bn_group_init(&G, eps, relu, scale, bias, c0, (int)nc, sum + c0, sumsq + c0, count);
    bn_group_bwd_stats(&G, x, dy, c0, (int)nc, dsum + c0, dxsum + c0);
  }
}

void pcgc_cpu_batchnorm_bwd_apply(const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *scale,
                                  const pcgc_buf *bias, const pcgc_buf *dy, const double *sum, const double *sumsq,
                                  double count, const double *dsum, const double *dxsum,
                                  pcgc_buf *dx, pcgc_buf *dscale, pcgc_buf *dbias) {
  bn_assert(x, dy);
  double eps = pcgc_attrs_float(a, "eps");
  bool relu = bn_relu(a);
  bn_group G;
  FOR_GROUPS(c0, nc, x->dims[1]) {
    bn_group_init(&G, eps, relu, scale, bias, c0, (int)nc, sum + c0, sumsq + c0, count);
    bn_group_bwd_apply(&G, x, dy, c0, (int)nc, count, dsum + c0, dxsum + c0, dx, dscale, dbias);
  }
}

pcgc_status pcgc__cpu_fwd_batchnorm(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, 0));
  KX_TRY(pcgc__kcheck_whole_batch(k, "pcgc_cpu"));
  const pcgc_buf *x = &k->in[0];
  const pcgc_buf *scale = k->n_in == 3 ? &k->in[1] : NULL, *bias = k->n_in == 3 ? &k->in[2] : NULL;
  double eps = pcgc_attrs_float(k->a, "eps"), count = (double)(pcgc_buf_numel(x) / x->dims[1]);
  bool relu = bn_relu(k->a);
  FOR_GROUPS(c0, nc, x->dims[1]) {
    double sum[NORM_G], sumsq[NORM_G];
    bn_group_stats(x, c0, (int)nc, sum, sumsq);
    for (int j = 0; j < nc; j++)
      bn_chan_apply(eps, relu, x, scale, bias, c0 + j, sum[j], sumsq[j], count, &k->out[0]);
  }
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_batchnorm(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, 0));
  KX_TRY(pcgc__kcheck_whole_batch(k, "pcgc_cpu"));
  const pcgc_buf *x = &k->in[0], *dy = &k->dout[0];
  const pcgc_buf *scale = k->n_in == 3 ? &k->in[1] : NULL, *bias = k->n_in == 3 ? &k->in[2] : NULL;
  pcgc_buf *dscale = k->n_in == 3 ? &k->din[1] : NULL, *dbias = k->n_in == 3 ? &k->din[2] : NULL;
  double eps = pcgc_attrs_float(k->a, "eps"), count = (double)(pcgc_buf_numel(x) / x->dims[1]);
  bool relu = bn_relu(k->a);
  bn_group G;
  FOR_GROUPS(c0, nc, x->dims[1]) {
    double sum[NORM_G], sumsq[NORM_G], dsum[NORM_G], dxsum[NORM_G];
    bn_group_stats(x, c0, (int)nc, sum, sumsq);
    bn_group_init(&G, eps, relu, scale, bias, c0, (int)nc, sum, sumsq, count);
    bn_group_bwd_stats(&G, x, dy, c0, (int)nc, dsum, dxsum);
    bn_group_bwd_apply(&G, x, dy, c0, (int)nc, count, dsum, dxsum, &k->din[0], dscale, dbias);
  }
  return PCGC_OK;
}

/* ------------------------------------------------------------- layer norm */

typedef struct ln_view {
  int64_t rows, n;
  double eps;
  const pcgc_buf *scale, *bias;
} ln_view;

static ln_view ln_view_of(const pcgc__kargs *k) {
  const pcgc_buf *x = &k->in[0];
  int first = x->rank - (int)pcgc_attrs_int(k->a, "axes");
  return (ln_view){kx_prod(x->dims, 0, first), kx_prod(x->dims, first, x->rank), pcgc_attrs_float(k->a, "eps"),
                   k->n_in == 3 ? &k->in[1] : NULL, k->n_in == 3 ? &k->in[2] : NULL};
}

static const void *opt_data(const pcgc_buf *b) { return b ? b->data : NULL; }

/* The address of element i of b. */
static void *elem(const pcgc_buf *b, int64_t i) { return (char *)b->data + (size_t)i * pcgc_dtype_size(b->dtype); }


pcgc_status pcgc__cpu_fwd_layernorm(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, 0));
  const pcgc_buf *x = &k->in[0];
  pcgc_buf *y = &k->out[0];
  ln_view v = ln_view_of(k);
  FOR_GROUPS(r0, nr, v.rows) {
    double mean[NORM_G], invstd[NORM_G];
    KX_BY_DTYPE(x->dtype, ln_stats, v.n, v.eps, x->data, r0, (int)nr, mean, invstd);
    for (int j = 0; j < nr; j++) {
      int64_t o = (r0 + j) * v.n;
      KX_BY_DTYPE(x->dtype, ln_apply, v.n, elem(x, o), mean[j], invstd[j], opt_data(v.scale), opt_data(v.bias),
               elem(y, o));
    }
  }
  return PCGC_OK;
}

/* Zeroed column sums for the scale and bias gradients: 2 n doubles, in
 * `small` (room for 2 * cap) when they fit; NULL with an error set when out
 * of memory. */
static double *cols_scratch(const pcgc__kargs *k, int64_t n, double *small, int64_t cap) {
  double *as = n <= cap ? small : malloc((size_t)n * 2 * sizeof *as);
  if (!as) {
    pcgc_error_set(k->err, PCGC_ERR_NOMEM, "%s: out of memory (%zu bytes of scratch)", pcgc_op_name(k->kind),
                   (size_t)n * 2 * sizeof *as);
    return NULL;
  }
  memset(as, 0, (size_t)n * 2 * sizeof *as);
  return as;
}

/* dx = invstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale;
 * dscale += sum over rows of dy * xhat, dbias += sum over rows of dy, each
 * column summed in double in row order. */
pcgc_status pcgc__cpu_bwd_layernorm(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, 0));
  const pcgc_buf *x = &k->in[0], *dy = &k->dout[0];
  pcgc_buf *dx = &k->din[0];
  pcgc_buf *dscale = k->n_in == 3 ? &k->din[1] : NULL, *dbias = k->n_in == 3 ? &k->din[2] : NULL;
  ln_view v = ln_view_of(k);
  bool want_dx = kx_want(dx), want_cols = kx_want(dscale) || kx_want(dbias);
  if (!want_dx && !want_cols) return PCGC_OK;
  double small[2 * 1024], *as = NULL, *ab = NULL;
  if (want_cols && !(as = cols_scratch(k, v.n, small, 1024))) return PCGC_ERR_NOMEM;
  if (as) ab = as + v.n;
  const void *scale = opt_data(v.scale);
  FOR_GROUPS(r0, nr, v.rows) {
    double mean[NORM_G], invstd[NORM_G], m1[NORM_G], m2[NORM_G];
    KX_BY_DTYPE(x->dtype, ln_stats, v.n, v.eps, x->data, r0, (int)nr, mean, invstd);
    if (want_dx) {
      KX_BY_DTYPE(x->dtype, ln_bwd_means, v.n, x->data, dy->data, scale, r0, (int)nr, mean, invstd, m1, m2);
      for (int j = 0; j < nr; j++) {
        int64_t o = (r0 + j) * v.n;
        KX_BY_DTYPE(x->dtype, ln_bwd_dx, v.n, elem(x, o), elem(dy, o), scale, mean[j], invstd[j], m1[j], m2[j],
                 elem(dx, o));
      }
    }
    for (int j = 0; want_cols && j < nr; j++) {
      int64_t o = (r0 + j) * v.n;
      KX_BY_DTYPE(x->dtype, ln_bwd_cols, v.n, elem(x, o), elem(dy, o), mean[j], invstd[j], as, ab);
    }
  }
  if (want_cols) {
    for (int64_t j = 0; j < v.n; j++) {
      if (kx_want(dscale)) kx_add(dscale, j, as[j]);
      if (kx_want(dbias)) kx_add(dbias, j, ab[j]);
    }
    if (as != small) free(as);
  }
  return PCGC_OK;
}

/* --------------------------------------------------------------- RMS norm */

/* y = x / sqrt(mean(x^2) + eps) [* scale] over the last `axes` dims */
pcgc_status pcgc__cpu_fwd_rmsnorm(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, 0));
  const pcgc_buf *x = &k->in[0];
  pcgc_buf *y = &k->out[0];
  ln_view v = ln_view_of(k);
  const void *scale = k->n_in == 2 ? k->in[1].data : NULL;
  FOR_GROUPS(r0, nr, v.rows) {
    double invrms[NORM_G];
    KX_BY_DTYPE(x->dtype, rms_stats, v.n, v.eps, x->data, r0, (int)nr, invrms);
    for (int j = 0; j < nr; j++) {
      int64_t o = (r0 + j) * v.n;
      KX_BY_DTYPE(x->dtype, rms_apply, v.n, elem(x, o), invrms[j], scale, elem(y, o));
    }
  }
  return PCGC_OK;
}

/* dx = invrms * (g - xhat * mean(g * xhat)), g = dy * scale, xhat = x * invrms;
 * dscale += sum over rows of dy * xhat: layer norm's backward with mean 0 */
pcgc_status pcgc__cpu_bwd_rmsnorm(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, 0));
  const pcgc_buf *x = &k->in[0], *dy = &k->dout[0];
  pcgc_buf *dx = &k->din[0], *dscale = k->n_in == 2 ? &k->din[1] : NULL;
  ln_view v = ln_view_of(k);
  bool want_dx = kx_want(dx), want_cols = kx_want(dscale);
  if (!want_dx && !want_cols) return PCGC_OK;
  double small[2 * 1024], *as = NULL, *ab = NULL;
  if (want_cols && !(as = cols_scratch(k, v.n, small, 1024))) return PCGC_ERR_NOMEM;
  if (as) ab = as + v.n;
  const void *scale = k->n_in == 2 ? k->in[1].data : NULL;
  FOR_GROUPS(r0, nr, v.rows) {
    double zero[NORM_G] = {0}, invrms[NORM_G], m1[NORM_G], m2[NORM_G];
    KX_BY_DTYPE(x->dtype, rms_stats, v.n, v.eps, x->data, r0, (int)nr, invrms);
    if (want_dx) {
      KX_BY_DTYPE(x->dtype, ln_bwd_means, v.n, x->data, dy->data, scale, r0, (int)nr, zero, invrms, m1, m2);
      for (int j = 0; j < nr; j++) {
        int64_t o = (r0 + j) * v.n;
        KX_BY_DTYPE(x->dtype, ln_bwd_dx, v.n, elem(x, o), elem(dy, o), scale, 0.0, invrms[j], 0.0, m2[j], elem(dx, o));
      }
    }
    for (int j = 0; want_cols && j < nr; j++) {
      int64_t o = (r0 + j) * v.n;
      KX_BY_DTYPE(x->dtype, ln_bwd_cols, v.n, elem(x, o), elem(dy, o), 0.0, invrms[j], as, ab);
    }
  }
  if (want_cols) {
    for (int64_t j = 0; j < v.n; j++) kx_add(dscale, j, as[j]);
    if (as != small) free(as);
  }
  return PCGC_OK;
}
