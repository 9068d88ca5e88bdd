/*
 * k_elementwise.c — CPU kernels of the elementwise families: `unary`
 * (activations, exp, identity, scalar arithmetic, dropout) and `binary`
 * (add, sub, mul, div with NumPy broadcasting).
 *
 * Values are computed in double and stored in the buffers' dtype (f32 or
 * f64). Dropout keeps element e iff pcgc_rng_uniform(seed, node, logical flat
 * index of e) >= rate, so a piece reproduces its part of the whole mask.
 * Binary backward sums the output gradient over broadcast dims: the loop
 * visits the output with the operand's broadcast dims innermost, so every
 * operand element's gradient is one contiguous run, summed in double.
 */
#include <math.h>

#include "k_common_impl.h"

/* ------------------------------------------------------------------ unary */

static double scalar_attr(const pcgc__kargs *k) {
  switch (k->kind) {
  case PCGC_OP_SCALAR_ADD:
  case PCGC_OP_SCALAR_SUB:
  case PCGC_OP_SCALAR_MUL:
  case PCGC_OP_SCALAR_DIV: return pcgc_attrs_float(k->a, "scalar");
  case PCGC_OP_GELU: return pcgc_attrs_int(k->a, "approximate") ? 1 : 0; /* 1: the tanh form */
  default: return 0;
  }
}

#define SQRT1_2 0.70710678118654752440      /* 1/sqrt(2) */
#define INV_SQRT_2PI 0.39894228040143267794 /* 1/sqrt(2 pi) */

static double gelu(double x) { return 0.5 * x * (1 + erf(x * SQRT1_2)); }

/* PyTorch's gelu(approximate='tanh'): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
#define SQRT_2_PI 0.79788456080286535588 /* sqrt(2/pi) */
static double gelu_tanh(double x) { return 0.5 * x * (1 + tanh(SQRT_2_PI * (x + 0.044715 * x * x * x))); }

static double gelu_tanh_grad(double x) {
  double t = tanh(SQRT_2_PI * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * SQRT_2_PI * (1 + 3 * 0.044715 * x * x);
}

static double sigmoid(double x) {
  if (x >= 0) return 1 / (1 + exp(-x));
  double e = exp(x);
  return e / (1 + e);
}

static double unary_fwd(pcgc_op_kind kind, double x, double s) {
  switch (kind) {
  case PCGC_OP_RELU: return x < 0 ? 0 : x; /* NaN propagates, as in PyTorch */
  case PCGC_OP_GELU: return s != 0 ? gelu_tanh(x) : gelu(x);
  case PCGC_OP_SIGMOID: return sigmoid(x);
  case PCGC_OP_TANH: return tanh(x);
  case PCGC_OP_EXP: return exp(x);
  case PCGC_OP_SCALAR_ADD: return x + s;
  case PCGC_OP_SCALAR_SUB: return x - s;
  case PCGC_OP_SCALAR_MUL: return x * s;
  case PCGC_OP_SCALAR_DIV: return x / s;
  default: return x; /* identity, inactive dropout */
  }
}

/* d unary / dx at x */
static double unary_grad(pcgc_op_kind kind, double x, double s) {
  switch (kind) {
  case PCGC_OP_RELU: return x > 0 ? 1 : 0;
  case PCGC_OP_GELU: /* exact: Phi(x) + x phi(x) */
    if (s != 0) return gelu_tanh_grad(x);
    return 0.5 * (1 + erf(x * SQRT1_2)) + x * exp(-0.5 * x * x) * INV_SQRT_2PI;
  case PCGC_OP_SIGMOID: {
    double y = sigmoid(x);
    return y * (1 - y);
  }
  case PCGC_OP_TANH: {
    double y = tanh(x);
    return 1 - y * y;
  }
  case PCGC_OP_EXP: return exp(x);
  case PCGC_OP_SCALAR_MUL: return s;
  case PCGC_OP_SCALAR_DIV: return 1 / s;
  default: return 1;
  }
}

/* Dropout is active when training with rate > 0; *scale = 1/(1-rate). */
static bool dropout_on(const pcgc__kargs *k, double *rate, double *scale) {
  *rate = pcgc_attrs_float(k->a, "rate");
  *scale = 1 / (1 - *rate);
  return k->ctx->training && *rate > 0;
}

/* Loop over the local elements of `b` (the output or its gradient) whose
 * first offset is the local flat index and second the logical flat index. */
static kx_iter dropout_iter(const pcgc__kargs *k, const pcgc_buf *b) {
  kx_iter it;
  memset(&it, 0, sizeof it);
  it.rank = b->rank;
  memcpy(it.dims, b->dims, sizeof it.dims);
  kx_strides(b->rank, b->dims, it.st[0]);
  if (k->ctx->out) {
    const pcgc_piece *p = &k->ctx->out[0];
    kx_strides(b->rank, p->global, it.st[1]);
    for (int d = 0; d < b->rank; d++) it.off[1] += p->offset[d] * it.st[1][d];
  } else {
    memcpy(it.st[1], it.st[0], sizeof it.st[1]);
  }
  return it;
}

static bool dropout_keep(const pcgc__kargs *k, double rate, int64_t logical) {
  return pcgc_rng_uniform(k->ctx->seed, k->ctx->node, (uint64_t)logical) >= rate;
}

pcgc_status pcgc__cpu_fwd_unary(const pcgc__kargs *k) {
  KX_TRY(kx_check(k, false, k->kind == PCGC_OP_IDENTITY ? KX_ANY_DTYPE : 0));
  const pcgc_buf *x = &k->in[0];
  pcgc_buf *y = &k->out[0];
  int64_t n = pcgc_buf_numel(x);
  double rate, scale;
  if (k->kind == PCGC_OP_IDENTITY ||
      (k->kind == PCGC_OP_DROPOUT && !dropout_on(k, &rate, &scale))) {
    memmove(y->data, x->data, (size_t)n * pcgc_dtype_size(x->dtype));
    return PCGC_OK;
  }
  if (k->kind == PCGC_OP_DROPOUT) {
    kx_iter it = dropout_iter(k, y);
    for (int64_t i = 0; i < n; i++, kx_iter_next(&it))
      kx_set(y, it.off[0], dropout_keep(k, rate, it.off[1]) ? kx_get(x, it.off[0]) * scale : 0);
    return PCGC_OK;
  }
  double s = scalar_attr(k);
  for (int64_t i = 0; i < n; i++) kx_set(y, i, unary_fwd(k->kind, kx_get(x, i), s));
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_unary(const pcgc__kargs *k) {
  KX_TRY(kx_check(k, true, 0));
  const pcgc_buf *x = &k->in[0], *dy = &k->dout[0];
  pcgc_buf *dx = &k->din[0];
  if (!kx_want(dx) || !kx_is_f(x->dtype)) return PCGC_OK;
  int64_t n = pcgc_buf_numel(x);
  double rate, scale;
  if (k->kind == PCGC_OP_DROPOUT && dropout_on(k, &rate, &scale)) {
    kx_iter it = dropout_iter(k, dy);
    for (int64_t i = 0; i < n; i++, kx_iter_next(&it))
      if (dropout_keep(k, rate, it.off[1])) kx_add(dx, it.off[0], kx_get(dy, it.off[0]) * scale);
    return PCGC_OK;
  }
  double s = scalar_attr(k);
  for (int64_t i = 0; i < n; i++) kx_add(dx, i, kx_get(dy, i) * unary_grad(k->kind, kx_get(x, i), s));
  return PCGC_OK;
}

/* ----------------------------------------------------------------- binary */

static double binary_fwd(pcgc_op_kind kind, double a, double b) {
  switch (kind) {
  case PCGC_OP_ADD: return a + b;
  case PCGC_OP_SUB: return a - b;
  case PCGC_OP_MUL: return a * b;
  default: return a / b;
  }
}

/* dy * d(a op b)/d(operand) for operand 0 (a) or 1 (b) */
static double binary_grad(pcgc_op_kind kind, int operand, double dy, double a, double b) {
  switch (kind) {
  case PCGC_OP_ADD: return dy;
  case PCGC_OP_SUB: return operand ? -dy : dy;
  case PCGC_OP_MUL: return operand ? dy * a : dy * b;
  default: return operand ? -dy * a / (b * b) : dy / b;
  }
}

/* Strides of operand `x` broadcast to the output shape `y` (0 where x has
 * size 1 or no dim at all). */
static void broadcast_strides(const pcgc_buf *x, const pcgc_buf *y, int64_t *st) {
  int64_t xs[PCGC_MAX_RANK];
  kx_strides(x->rank, x->dims, xs);
  for (int d = 0; d < y->rank; d++) {
    int dx = d - (y->rank - x->rank);
    st[d] = dx >= 0 && x->dims[dx] > 1 ? xs[dx] : 0;
  }
}

static bool same_dims(const pcgc_buf *a, const pcgc_buf *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

pcgc_status pcgc__cpu_fwd_binary(const pcgc__kargs *k) {
  KX_TRY(kx_check(k, false, 0));
  const pcgc_buf *a = &k->in[0], *b = &k->in[1];
  pcgc_buf *y = &k->out[0];
  int64_t n = pcgc_buf_numel(y);
  if (same_dims(a, b)) {
    for (int64_t i = 0; i < n; i++) kx_set(y, i, binary_fwd(k->kind, kx_get(a, i), kx_get(b, i)));
    return PCGC_OK;
  }
  kx_iter it;
  memset(&it, 0, sizeof it);
  it.rank = y->rank;
  memcpy(it.dims, y->dims, sizeof it.dims);
  broadcast_strides(a, y, it.st[0]);
  broadcast_strides(b, y, it.st[1]);
  for (int64_t i = 0; i < n; i++, kx_iter_next(&it))
    kx_set(y, i, binary_fwd(k->kind, kx_get(a, it.off[0]), kx_get(b, it.off[1])));
  return PCGC_OK;
}

/* Adds the gradient of operand `j` (0 = a, 1 = b) into din[j]. */
static void binary_bwd_operand(const pcgc__kargs *k, int j) {
  const pcgc_buf *a = &k->in[0], *b = &k->in[1], *dy = &k->dout[0];
  pcgc_buf *dx = &k->din[j];
  const pcgc_buf *x = &k->in[j];
  int64_t st[3][PCGC_MAX_RANK];
  kx_strides(dy->rank, dy->dims, st[0]);
  broadcast_strides(a, dy, st[1]);
  broadcast_strides(b, dy, st[2]);
  /* order the dims: x's own dims first, the ones x is broadcast along last */
  int order[PCGC_MAX_RANK], r = 0;
  int64_t inner = 1;
  for (int pass = 0; pass < 2; pass++)
    for (int d = 0; d < dy->rank; d++) {
      int xd = d - (dy->rank - x->rank);
      bool bcast = dy->dims[d] > 1 && (xd < 0 || x->dims[xd] == 1);
      if (bcast != (pass == 1)) continue;
      order[r++] = d;
      if (bcast) inner *= dy->dims[d];
    }
  kx_iter it;
  memset(&it, 0, sizeof it);
  it.rank = r;
  for (int p = 0; p < r; p++) {
    it.dims[p] = dy->dims[order[p]];
    for (int s = 0; s < 3; s++) it.st[s][p] = st[s][order[p]];
  }
  int64_t blocks = pcgc_buf_numel(dy) / inner;
  for (int64_t blk = 0; blk < blocks; blk++) {
    int64_t dst = it.off[1 + j];
    double acc = 0;
    for (int64_t e = 0; e < inner; e++, kx_iter_next(&it))
      acc += binary_grad(k->kind, j, kx_get(dy, it.off[0]), kx_get(a, it.off[1]), kx_get(b, it.off[2]));
    kx_add(dx, dst, acc);
  }
}

pcgc_status pcgc__cpu_bwd_binary(const pcgc__kargs *k) {
  KX_TRY(kx_check(k, true, 0));
  for (int j = 0; j < 2; j++)
    if (kx_want(&k->din[j])) binary_bwd_operand(k, j);
  return PCGC_OK;
}
