/*
 * cu_elementwise.cu — CUDA kernels of the elementwise families: `unary`
 * (activations, exp, pow, clip, identity, scalar arithmetic, dropout),
 * `binary` (add, sub, mul, div with NumPy broadcasting), `mask`
 * (causal_mask) and `rope`, k_elementwise.c on the GPU.
 *
 * Every value is the CPU's expression in double, rounded to f32 once when
 * stored (see cu_common_impl.h for what can still differ: CUDA's erf, tanh
 * and exp against glibc's, in the last bits of a double). Unary kernels are
 * grid-stride loops, one instantiation per op. Dropout keeps element e iff
 * draw(seed, node, logical flat index of e) >> 11 reaches
 * pcgc__rng_threshold(rate), the logical index coming from the output's
 * piece descriptor, so a piece draws its part of the sequential mask.
 * Binary ops map each output index to its operands' offsets through a
 * collapsed index map (equal shapes: one dim, no division). The gradient
 * of an operand that is not broadcast is added element by element; that of
 * a broadcast operand is, per operand element, the double sum of its terms
 * over the broadcast dims (a deterministic segmented sum, cu_common_impl.h),
 * then one add into din. No kernel here takes workspace except that sum
 * when an operand has few elements (its partial sums: at most about
 * 1024 + 8 * nx doubles).
 */
#include <float.h>
#include <math.h>

#include "cu_common_impl.h"

namespace {

/* ------------------------------------------------------------------ unary */

#define SQRT1_2 0.70710678118654752440      /* 1/sqrt(2) */
#define INV_SQRT_2PI 0.39894228040143267794 /* 1/sqrt(2 pi) */
#define SQRT_2_PI 0.79788456080286535588    /* sqrt(2/pi) */

/* The unary ops, numbered for the kernels' template argument. */
enum { U_RELU, U_GELU, U_GELU_TANH, U_SIGMOID, U_SILU, U_RELU6, U_HSIG, U_HSWISH, U_LEAKY, U_TANH, U_EXP, U_ADD, U_SUB,
       U_MUL, U_DIV, U_POW, U_CLIP, U_ONE };

__device__ __forceinline__ double d_gelu(double x) { return 0.5 * x * (1 + erf(x * SQRT1_2)); }

__device__ __forceinline__ double d_gelu_tanh(double x) {
  return 0.5 * x * (1 + tanh(SQRT_2_PI * (x + cux_mul(cux_mul(cux_mul(0.044715, x), x), x))));
}

__device__ __forceinline__ double d_gelu_tanh_grad(double x) {
  double t = tanh(SQRT_2_PI * (x + cux_mul(cux_mul(cux_mul(0.044715, x), x), x)));
  return cux_mul(0.5, 1 + t) +
         cux_mul(0.5 * x * (1 - cux_mul(t, t)) * SQRT_2_PI, 1 + cux_mul(cux_mul(3 * 0.044715, x), x));
}

__device__ __forceinline__ double d_gelu_grad(double x) { /* Phi(x) + x phi(x) */
  return cux_mul(0.5, 1 + erf(x * SQRT1_2)) + cux_mul(x * exp(-0.5 * x * x), INV_SQRT_2PI);
}

__device__ __forceinline__ double d_sigmoid(double x) {
  double e = exp(x >= 0 ? -x : x);
  return x >= 0 ? 1 / (1 + e) : e / (1 + e);
}

/* x^p as the CPU's pow_exact: sqrt and products for the common exponents */
__device__ __forceinline__ double d_pow(double x, double p) {
  if (p == 1) return x;
  if (p == 2) return cux_mul(x, x);
  if (p == 3) return cux_mul(cux_mul(x, x), x);
  if (p == 0.5) return sqrt(x);
  if (p == -1) return 1 / x;
  if (p == -0.5) return 1 / sqrt(x);
  return pow(x, p);
}

/* s2: the second attribute (clip's max) */
template <int OP>
__device__ __forceinline__ double unary_fwd(double x, double s, double s2) {
  switch (OP) {
  case U_RELU: return x < 0 ? 0 : x; /* NaN propagates */
  case U_GELU: return d_gelu(x);
  case U_GELU_TANH: return d_gelu_tanh(x);
  case U_SIGMOID: return d_sigmoid(x);
  case U_SILU: return x * d_sigmoid(x);
  case U_RELU6: return x < 0 ? 0 : x > 6 ? 6 : x; /* NaN propagates */
  case U_LEAKY: return x < 0 ? s * x : x;
  case U_HSIG: return x <= -3 ? 0 : x >= 3 ? 1 : __dadd_rn(x / 6, 0.5);
  case U_HSWISH: return x <= -3 ? x * 0.0 : x >= 3 ? x : cux_mul(x, x + 3) / 6;
  case U_TANH: return tanh(x);
  case U_EXP: return exp(x);
  case U_ADD: return x + s;
  case U_SUB: return x - s;
  case U_MUL: return x * s;
  case U_DIV: return x / s;
  case U_POW: return d_pow(x, s);
  case U_CLIP: return x != x ? x : x < s ? (s > s2 ? s2 : s) : x > s2 ? s2 : x;
  default: return x;
  }
}

/* dy * (d op / dx at x); s is 1/scalar for U_DIV */
template <int OP>
__device__ __forceinline__ double unary_bwd(double x, double dy, double s, double s2) {
  switch (OP) {
  case U_RELU: return dy * (x > 0 ? 1.0 : 0.0);
  case U_GELU: return dy * d_gelu_grad(x);
  case U_GELU_TANH: return dy * d_gelu_tanh_grad(x);
  case U_SIGMOID: {
    double y = d_sigmoid(x);
    return dy * (y * (1 - y));
  }
  case U_RELU6: return dy * (x > 0 && x < 6 ? 1.0 : 0.0);
  case U_LEAKY: return dy * (x > 0 ? 1.0 : s);
  case U_HSIG: return dy * (x > -3 && x < 3 ? 1.0 / 6 : 0.0);
  case U_HSWISH: return dy * (x < -3 ? 0.0 : x > 3 ? 1.0 : (2 * x + 3) / 6);
  case U_SILU: {
    double y = d_sigmoid(x);
    return dy * (y * (1 + x * (1 - y)));
  }
  case U_TANH: {
    double y = tanh(x);
    return dy * (1 - cux_mul(y, y));
  }
  case U_EXP: return dy * exp(x);
  case U_MUL:
  case U_DIV: return dy * s;
  case U_POW: return dy * (s == 0 ? 0.0 : s == 1 ? 1.0 : s * d_pow(x, s - 1));
  case U_CLIP: return dy * (x >= s && x <= s2 ? 1.0 : 0.0);
  default: return dy * 1.0; /* identity, scalar add/sub, dropout off */
  }
}

template <int OP>
__global__ void unary_fwd_kernel(int64_t n, double s, double s2, const float *x, float *y) {
  CUX_FOR(i, n) y[i] = (float)unary_fwd<OP>((double)x[i], s, s2);
}

template <int OP>
__global__ void unary_bwd_kernel(int64_t n, double s, double s2, const float *x, const float *dy, float *dx) {
  CUX_FOR(i, n) dx[i] += (float)unary_bwd<OP>((double)x[i], (double)dy[i], s, s2);
}

/* clip's bounds: +-DBL_MAX (the defaults) is no bound */
static double clip_bound(double b) { return b >= DBL_MAX ? INFINITY : b <= -DBL_MAX ? -INFINITY : b; }

static int unary_op(const pcgc__cukargs *k, double *s, double *s2) {
  *s = *s2 = 0;
  switch (k->kind) {
  case PCGC_OP_RELU: return U_RELU;
  case PCGC_OP_GELU: return pcgc_attrs_int(k->a, "approximate") ? U_GELU_TANH : U_GELU;
  case PCGC_OP_SIGMOID: return U_SIGMOID;
  case PCGC_OP_SILU: return U_SILU;
  case PCGC_OP_RELU6: return U_RELU6;
  case PCGC_OP_LEAKY_RELU: *s = pcgc_attrs_float(k->a, "alpha"); return U_LEAKY;
  case PCGC_OP_HARDSIGMOID: return U_HSIG;
  case PCGC_OP_HARDSWISH: return U_HSWISH;
  case PCGC_OP_TANH: return U_TANH;
  case PCGC_OP_EXP: return U_EXP;
  case PCGC_OP_SCALAR_ADD: *s = pcgc_attrs_float(k->a, "scalar"); return U_ADD;
  case PCGC_OP_SCALAR_SUB: *s = pcgc_attrs_float(k->a, "scalar"); return U_SUB;
  case PCGC_OP_SCALAR_MUL: *s = pcgc_attrs_float(k->a, "scalar"); return U_MUL;
  case PCGC_OP_SCALAR_DIV: *s = pcgc_attrs_float(k->a, "scalar"); return U_DIV;
  case PCGC_OP_POW: *s = pcgc_attrs_float(k->a, "exponent"); return U_POW;
  case PCGC_OP_CLIP:
    *s = clip_bound(pcgc_attrs_float(k->a, "min"));
    *s2 = clip_bound(pcgc_attrs_float(k->a, "max"));
    return U_CLIP;
  default: return U_ONE;
  }
}

#define UNARY_CASES(X)                                                                              \
  X(U_RELU) X(U_GELU) X(U_GELU_TANH) X(U_SIGMOID) X(U_SILU) X(U_RELU6) X(U_HSIG) X(U_HSWISH) X(U_LEAKY) X(U_TANH) X(U_EXP) X(U_ADD) X(U_SUB) X(U_MUL) \
  X(U_DIV) X(U_POW) X(U_CLIP) X(U_ONE)

/* ---------------------------------------------------------------- dropout */

/* Dropout is active when training with rate > 0; *scale = 1/(1-rate). */
static bool dropout_on(const pcgc__cukargs *k, double *rate, double *scale) {
  *rate = pcgc_attrs_float(k->a, "rate");
  *scale = 1 / (1 - *rate);
  return k->ctx->training && *rate > 0;
}

/* The map from the local index of `b` (the output or its gradient) to its
 * logical flat index (offset 0, plus *base), as dropout_rows on the CPU. */
static cux_nd dropout_map(const pcgc__cukargs *k, const pcgc_buf *b, int64_t *base) {
  int64_t ls[PCGC_MAX_RANK], gs[PCGC_MAX_RANK];
  kx_strides(b->rank, b->dims, ls);
  *base = 0;
  if (k->ctx->out) {
    const pcgc_piece *p = &k->ctx->out[0];
    kx_strides(b->rank, p->global, gs);
    for (int d = 0; d < b->rank; d++) *base += p->offset[d] * gs[d];
  } else {
    memcpy(gs, ls, sizeof gs);
  }
  cux_nd g;
  memset(&g, 0, sizeof g);
  for (int d = 0; d < b->rank; d++) cux_nd_push(&g, b->dims[d], gs[d], ls[d], 0);
  cux_nd_collapse(&g);
  return g;
}

/* y = kept ? (float)(x * scale) : +0; backward: dx += (float)(dy * scale)
 * where kept (the CPU adds -0.0 elsewhere, which changes no value). */
template <bool BWD>
__global__ void dropout_kernel(int64_t n, cux_nd g, int64_t base, uint64_t key, uint64_t keep, double scale,
                               const float *src, float *dst) {
  CUX_FOR(i, n) {
    int64_t off[3] = {base, 0, 0};
    cux_nd_at(g, i, off);
    bool kept = (pcgc__curng_u64_at(key, (uint64_t)off[0]) >> 11) >= keep;
    float v = (float)((double)src[i] * scale);
    if (BWD) {
      if (kept) dst[i] += v;
    } else {
      dst[i] = kept ? v : 0.0f;
    }
  }
}

static pcgc_status dropout_run(const pcgc__cukargs *k, bool bwd, double rate, double scale, const pcgc_buf *src,
                               pcgc_buf *dst) {
  int64_t base, n = pcgc_buf_numel(src);
  cux_nd g = dropout_map(k, src, &base);
  uint64_t key = pcgc__curng_key(k->ctx->seed, k->ctx->node), keep = pcgc__rng_threshold(rate);
  const float *s = (const float *)src->data;
  float *d = (float *)dst->data;
  if (bwd) dropout_kernel<true><<<CUX_GRID(n)>>>(n, g, base, key, keep, scale, s, d);
  else dropout_kernel<false><<<CUX_GRID(n)>>>(n, g, base, key, keep, scale, s, d);
  return pcgc__cu_launched(k, "dropout");
}

} /* namespace */

pcgc_status pcgc__cu_fwd_unary(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, false, 0));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  const pcgc_buf *x = &k->in[0];
  pcgc_buf *y = &k->out[0];
  int64_t n = pcgc_buf_numel(x);
  double rate, scale;
  if (k->kind == PCGC_OP_IDENTITY || (k->kind == PCGC_OP_DROPOUT && !dropout_on(k, &rate, &scale))) {
    if (y->data == x->data) return PCGC_OK;
    return pcgc__cu_check(k, cudaMemcpyAsync(y->data, x->data, (size_t)n * pcgc_dtype_size(x->dtype),
                                             cudaMemcpyDeviceToDevice, k->cu->stream), "copy");
  }
  if (k->kind == PCGC_OP_DROPOUT) return dropout_run(k, false, rate, scale, x, y);
  double s, s2;
  int op = unary_op(k, &s, &s2);
  const float *xp = (const float *)x->data;
  float *yp = (float *)y->data;
  switch (op) {
#define FWD_CASE(o) \
  case o: unary_fwd_kernel<o><<<CUX_GRID(n)>>>(n, s, s2, xp, yp); break;
    UNARY_CASES(FWD_CASE)
#undef FWD_CASE
  }
  return pcgc__cu_launched(k, "unary forward");
}

pcgc_status pcgc__cu_bwd_unary(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, true, 0));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  const pcgc_buf *x = &k->in[0], *dy = &k->dout[0];
  pcgc_buf *dx = &k->din[0];
  if (!cux_want(dx) || x->dtype != PCGC_F32) return PCGC_OK;
  int64_t n = pcgc_buf_numel(x);
  double rate, scale;
  if (k->kind == PCGC_OP_DROPOUT && dropout_on(k, &rate, &scale)) return dropout_run(k, true, rate, scale, dy, dx);
  double s, s2;
  int op = unary_op(k, &s, &s2);
  if (op == U_DIV) s = 1 / s; /* the CPU multiplies by r = 1/s */
  const float *xp = (const float *)x->data, *dp = (const float *)dy->data;
  float *gp = (float *)dx->data;
  switch (op) {
#define BWD_CASE(o) \
  case o: unary_bwd_kernel<o><<<CUX_GRID(n)>>>(n, s, s2, xp, dp, gp); break;
    UNARY_CASES(BWD_CASE)
#undef BWD_CASE
  }
  return pcgc__cu_launched(k, "unary backward");
}

/* ----------------------------------------------------------------- binary */

namespace {

enum { EW_ADD, EW_SUB, EW_MUL, EW_DIV };

__device__ __forceinline__ double ew_binary(int op, double a, double b) {
  switch (op) {
  case EW_ADD: return a + b;
  case EW_SUB: return a - b;
  case EW_MUL: return a * b;
  default: return a / b;
  }
}

/* dy * d(a op b)/d(operand j) */
__device__ __forceinline__ double ew_grad(int op, int j, double dy, double a, double b) {
  switch (op) {
  case EW_ADD: return dy;
  case EW_SUB: return j ? -dy : dy;
  case EW_MUL: return j ? cux_mul(dy, a) : cux_mul(dy, b);
  default: return j ? cux_mul(-dy, a) / cux_mul(b, b) : dy / b;
  }
}

static int binary_op(pcgc_op_kind kind) {
  switch (kind) {
  case PCGC_OP_ADD: return EW_ADD;
  case PCGC_OP_SUB: return EW_SUB;
  case PCGC_OP_MUL: return EW_MUL;
  default: return EW_DIV;
  }
}

/* The output y's index space with offsets (y, a, b), collapsed. */
static cux_nd binary_map(const pcgc_buf *y, const pcgc_buf *a, const pcgc_buf *b) {
  int64_t st[3][PCGC_MAX_RANK];
  kx_strides(y->rank, y->dims, st[0]);
  kx_broadcast_strides(a, y, st[1]);
  kx_broadcast_strides(b, y, st[2]);
  cux_nd g;
  memset(&g, 0, sizeof g);
  for (int d = 0; d < y->rank; d++) cux_nd_push(&g, y->dims[d], st[0][d], st[1][d], st[2][d]);
  cux_nd_collapse(&g);
  return g;
}

template <int OP>
__global__ void binary_fwd_kernel(int64_t n, cux_nd g, const float *a, const float *b, float *y) {
  CUX_FOR(i, n) {
    int64_t off[3] = {0, 0, 0};
    cux_nd_at(g, i, off);
    y[i] = (float)ew_binary(OP, (double)a[off[1]], (double)b[off[2]]);
  }
}

/* An operand that is not broadcast: dx[i] += (float)(0.0 + g), the way the
 * CPU starts a sum of one term. */
template <int OP, int J>
__global__ void binary_bwd_kernel(int64_t n, cux_nd g, const float *dy, const float *a, const float *b, float *dx) {
  CUX_FOR(i, n) {
    int64_t off[3] = {0, 0, 0};
    cux_nd_at(g, i, off);
    dx[i] += (float)__dadd_rn(0.0, ew_grad(OP, J, (double)dy[i], (double)a[off[1]], (double)b[off[2]]));
  }
}

/* A broadcast operand: the terms of its element e, then dx[e] += sum. */
struct bgrad_sum {
  int op, j;
  const float *dy, *a, *b;
  float *dx;
  __device__ double term(int64_t oy, int64_t oa, int64_t ob) const {
    return ew_grad(op, j, (double)dy[oy], (double)a[oa], (double)b[ob]);
  }
  __device__ void done(int64_t e, double s) const { dx[e] += (float)s; }
};

/* The sum plan of broadcast operand j: outer = the dims where it is not
 * broadcast (its own elements in row-major order), inner = the dims where
 * it is (its terms in dy's row-major order); offsets (dy, a, b). */
static cux_seg bgrad_plan(const pcgc__cukargs *k, int j) {
  const pcgc_buf *a = &k->in[0], *b = &k->in[1], *dy = &k->dout[0];
  int64_t st[3][PCGC_MAX_RANK];
  kx_strides(dy->rank, dy->dims, st[0]);
  kx_broadcast_strides(a, dy, st[1]);
  kx_broadcast_strides(b, dy, st[2]);
  cux_seg g;
  memset(&g, 0, sizeof g);
  for (int d = 0; d < dy->rank; d++)
    cux_nd_push(st[1 + j][d] ? &g.outer : &g.inner, dy->dims[d], st[0][d], st[1][d], st[2][d]);
  cux_seg_plan(&g);
  return g;
}

} /* namespace */

pcgc_status pcgc__cu_fwd_binary(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, false, 0));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  const pcgc_buf *a = &k->in[0], *b = &k->in[1];
  pcgc_buf *y = &k->out[0];
  int64_t n = pcgc_buf_numel(y);
  cux_nd g = binary_map(y, a, b);
  const float *ap = (const float *)a->data, *bp = (const float *)b->data;
  float *yp = (float *)y->data;
  switch (binary_op(k->kind)) {
  case EW_ADD: binary_fwd_kernel<EW_ADD><<<CUX_GRID(n)>>>(n, g, ap, bp, yp); break;
  case EW_SUB: binary_fwd_kernel<EW_SUB><<<CUX_GRID(n)>>>(n, g, ap, bp, yp); break;
  case EW_MUL: binary_fwd_kernel<EW_MUL><<<CUX_GRID(n)>>>(n, g, ap, bp, yp); break;
  default: binary_fwd_kernel<EW_DIV><<<CUX_GRID(n)>>>(n, g, ap, bp, yp); break;
  }
  return pcgc__cu_launched(k, "binary forward");
}

pcgc_status pcgc__cu_bwd_binary(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, true, 0));
  const pcgc_buf *a = &k->in[0], *b = &k->in[1], *dy = &k->dout[0];
  int64_t n = pcgc_buf_numel(dy);
  bool want[2], bcast[2];
  cux_seg plan[2];
  void *part[2] = {NULL, NULL};
  for (int j = 0; j < 2; j++) {
    want[j] = cux_want(&k->din[j]);
    bcast[j] = want[j] && pcgc_buf_numel(&k->in[j]) != n;
    if (bcast[j]) {
      plan[j] = bgrad_plan(k, j);
      CUX_SCRATCH(k, part[j], cux_seg_bytes(&plan[j]));
    }
  }
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  int op = binary_op(k->kind);
  const float *ap = (const float *)a->data, *bp = (const float *)b->data, *dp = (const float *)dy->data;
  for (int j = 0; j < 2; j++) {
    if (!want[j]) continue;
    float *gp = (float *)k->din[j].data;
    if (bcast[j]) {
      bgrad_sum f = {op, j, dp, ap, bp, gp};
      CUX_TRY(cux_seg_run(k, &plan[j], f, (double *)part[j]));
      continue;
    }
    /* not broadcast: din[j] has dy's layout */
    cux_nd g = binary_map(dy, a, b);
    switch (op * 2 + j) {
#define BWD_CASE(o, jj) \
  case o * 2 + jj: binary_bwd_kernel<o, jj><<<CUX_GRID(n)>>>(n, g, dp, ap, bp, gp); break;
      BWD_CASE(EW_ADD, 0) BWD_CASE(EW_ADD, 1) BWD_CASE(EW_SUB, 0) BWD_CASE(EW_SUB, 1)
      BWD_CASE(EW_MUL, 0) BWD_CASE(EW_MUL, 1) BWD_CASE(EW_DIV, 0) BWD_CASE(EW_DIV, 1)
#undef BWD_CASE
    }
    CUX_LAUNCHED(k, "binary backward");
  }
  return PCGC_OK;
}

/* ------------------------------------------------------------ causal mask */

namespace {

/* element e of [mats, M, N]: masked (-inf) where column > row + offset;
 * backward adds dy where the element was kept */
template <bool BWD>
__global__ void causal_kernel(int64_t n, int64_t M, int64_t N, int64_t off, const float *src, float *dst) {
  CUX_FOR(e, n) {
    int64_t j = e % N, i = (e / N) % M;
    bool masked = j > i + off;
    if (BWD) {
      if (!masked) dst[e] += src[e];
    } else {
      dst[e] = masked ? -INFINITY : src[e];
    }
  }
}

} /* namespace */

/* The last two dims are never sharded (infer.c): local indices are the
 * logical ones. */
pcgc_status pcgc__cu_fwd_mask(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, false, 0));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  const pcgc_buf *x = &k->in[0];
  int64_t n = pcgc_buf_numel(x), M = x->dims[x->rank - 2], N = x->dims[x->rank - 1];
  causal_kernel<false><<<CUX_GRID(n)>>>(n, M, N, pcgc_attrs_int(k->a, "offset"), (const float *)x->data,
                                        (float *)k->out[0].data);
  return pcgc__cu_launched(k, "causal_mask forward");
}

pcgc_status pcgc__cu_bwd_mask(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, true, 0));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  pcgc_buf *dx = &k->din[0];
  if (!cux_want(dx)) return PCGC_OK;
  const pcgc_buf *dy = &k->dout[0];
  int64_t n = pcgc_buf_numel(dy), M = dy->dims[dy->rank - 2], N = dy->dims[dy->rank - 1];
  causal_kernel<true><<<CUX_GRID(n)>>>(n, M, N, pcgc_attrs_int(k->a, "offset"), (const float *)dy->data,
                                       (float *)dx->data);
  return pcgc__cu_launched(k, "causal_mask backward");
}

/* ------------------------------------------------------------------ rope */

namespace {

/* one thread per pair (i, i + D/2) of row t of a matrix of [mats, T, D]:
 * the CPU's rotation, its angle in double; backward rotates back and adds */
template <bool BWD>
__global__ void rope_kernel(int64_t pairs, int64_t T, int64_t D, double theta, const float *src, float *dst) {
  int64_t h = D / 2;
  CUX_FOR(p, pairs) {
    int64_t i = p % h, t = (p / h) % T, e = (p / h) * D + i;
    double a = (double)t * pow(theta, -2.0 * (double)i / (double)D), cs = cos(a), sn = BWD ? -sin(a) : sin(a);
    double x1 = (double)src[e], x2 = (double)src[e + h];
    double y1 = cux_mul(x1, cs) - cux_mul(x2, sn), y2 = cux_mul(x2, cs) + cux_mul(x1, sn);
    if (BWD) {
      dst[e] += (float)y1;
      dst[e + h] += (float)y2;
    } else {
      dst[e] = (float)y1;
      dst[e + h] = (float)y2;
    }
  }
}

} /* namespace */

pcgc_status pcgc__cu_fwd_rope(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, false, 0));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  const pcgc_buf *x = &k->in[0];
  int64_t T = x->dims[x->rank - 2], D = x->dims[x->rank - 1], pairs = pcgc_buf_numel(x) / 2;
  rope_kernel<false><<<CUX_GRID(pairs)>>>(pairs, T, D, pcgc_attrs_float(k->a, "theta"), (const float *)x->data,
                                          (float *)k->out[0].data);
  return pcgc__cu_launched(k, "rope forward");
}

pcgc_status pcgc__cu_bwd_rope(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, true, 0));
  if (pcgc__cu_measuring(k) || !cux_want(&k->din[0])) return PCGC_OK;
  const pcgc_buf *dy = &k->dout[0];
  int64_t T = dy->dims[dy->rank - 2], D = dy->dims[dy->rank - 1], pairs = pcgc_buf_numel(dy) / 2;
  rope_kernel<true><<<CUX_GRID(pairs)>>>(pairs, T, D, pcgc_attrs_float(k->a, "theta"), (const float *)dy->data,
                                         (float *)k->din[0].data);
  return pcgc__cu_launched(k, "rope backward");
}
