/*
 * k_elementwise.c — CPU kernels of the elementwise families: `unary`
 * (activations, exp, pow, clip, identity, scalar arithmetic, dropout),
 * `binary` (add, sub, mul, div with NumPy broadcasting), `mask`
 * (causal_mask) and `rope`.
 *
 * Values are computed in double and stored in the buffers' dtype (f32 or
 * f64), but for the erf form of GELU on f32, which computes in float with
 * the vectorised exp and erf of k_fastmath.h (a libm erf in double per
 * element made it 16% of a transformer block's step). Each op runs a loop of its own per dtype (k_elementwise_impl.h);
 * the ops with a libm call per element (gelu, sigmoid, tanh, exp) split
 * large tensors over the BLAS threads (k_parallel.c), which changes no
 * result: every element is computed the same way on any thread.
 * Dropout keeps element e iff pcgc_rng_uniform(seed, node, logical flat
 * index of e) >= rate, so a piece reproduces its part of the whole mask.
 * Binary ops walk the output as runs (binary_runs): dims of size 1 dropped,
 * contiguous neighbours merged, so that each operand is either contiguous
 * or constant along a run (same shapes: one run; a row or a scalar
 * broadcast: runs of the row). Binary backward sums the output gradient over
 * broadcast dims in double, each operand element's terms in the output's
 * row-major order (the order does not depend on the layout of the loops).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "k_common_impl.h"
#include "k_fastmath.h"

/* ------------------------------------------------------------------ unary */

/* clip's bounds: +-DBL_MAX (the defaults) is no bound, so that infinities
 * pass unchanged */
static double clip_bound(double b) { return b >= DBL_MAX ? INFINITY : b <= -DBL_MAX ? -INFINITY : b; }

static double scalar_attr(const pcgc__kargs *k) {
  switch (k->kind) {
  case PCGC_OP_SCALAR_ADD:
  case PCGC_OP_SCALAR_SUB:
  case PCGC_OP_SCALAR_MUL:
  case PCGC_OP_SCALAR_DIV: return pcgc_attrs_float(k->a, "scalar");
  case PCGC_OP_GELU: return pcgc_attrs_int(k->a, "approximate") ? 1 : 0; /* 1: the tanh form */
  case PCGC_OP_LEAKY_RELU: return pcgc_attrs_float(k->a, "alpha");
  case PCGC_OP_POW: return pcgc_attrs_float(k->a, "exponent");
  case PCGC_OP_CLIP: return clip_bound(pcgc_attrs_float(k->a, "min"));
  default: return 0;
  }
}

/* The second attribute of a unary op: clip's max. */
static double scalar2_attr(const pcgc__kargs *k) {
  return k->kind == PCGC_OP_CLIP ? clip_bound(pcgc_attrs_float(k->a, "max")) : 0;
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

static double gelu_grad(double x) { /* exact: Phi(x) + x phi(x) */
  return 0.5 * (1 + erf(x * SQRT1_2)) + x * exp(-0.5 * x * x) * INV_SQRT_2PI;
}

/* 1/(1+exp(-x)) without overflow: one exp of -|x| (of x itself where x is
 * NaN), then the form for the sign; no branch for the loops to mispredict. */
static double sigmoid(double x) {
  double e = exp(x >= 0 ? -x : x);
  return x >= 0 ? 1 / (1 + e) : e / (1 + e);
}

/* x sigmoid(x), and its derivative sigmoid(x) (1 + x (1 - sigmoid(x))) */
static double silu(double x) { return x * sigmoid(x); }
static double silu_grad(double x) {
  double y = sigmoid(x);
  return y * (1 + x * (1 - y));
}

/* The piecewise-linear activations of MobileNets, as PyTorch defines them
 * (F.relu6, F.hardsigmoid, F.hardswish) with their derivatives: hardsigmoid
 * passes gradient strictly inside (-3, 3), hardswish is (2x + 3) / 6 on
 * [-3, 3]; relu6's derivative is 1 strictly inside (0, 6). NaN propagates. */
static double relu6(double x) { return x < 0 ? 0 : x > 6 ? 6 : x; }
static double relu6_grad(double x) { return x > 0 && x < 6 ? 1 : 0; }
static double hardsigmoid(double x) { return x <= -3 ? 0 : x >= 3 ? 1 : x / 6 + 0.5; }
static double hardsigmoid_grad(double x) { return x > -3 && x < 3 ? 1.0 / 6 : 0; }
static double hardswish(double x) { return x <= -3 ? x * 0.0 : x >= 3 ? x : x * (x + 3) / 6; } /* -0 as torch */
static double hardswish_grad(double x) { return x < -3 ? 0 : x > 3 ? 1 : (2 * x + 3) / 6; }

/* x^p, exactly rounded where a cheaper form is (sqrt for 0.5, products for
 * small integers), libm's pow otherwise; its derivative p x^(p-1), 0 for
 * p = 0 (PyTorch's pow_backward). */
static double pow_exact(double x, double p) {
  if (p == 1) return x;
  if (p == 2) return x * x;
  if (p == 3) return x * x * x;
  if (p == 0.5) return sqrt(x);
  if (p == -1) return 1 / x;
  if (p == -0.5) return 1 / sqrt(x);
  return pow(x, p);
}
static double pow_grad(double x, double p) { return p == 0 ? 0 : p == 1 ? 1 : p * pow_exact(x, p - 1); }

/* min(max(x, lo), hi) as torch.clamp (hi wins where lo > hi, NaN
 * propagates); the gradient passes where lo <= x <= hi (clamp_backward). */
static double clip(double x, double lo, double hi) { return x != x ? x : x < lo ? (lo > hi ? hi : lo) : x > hi ? hi : x; }
static double clip_grad(double x, double lo, double hi) { return x >= lo && x <= hi ? 1 : 0; }

/* Dropout is active when training with rate > 0; *scale = 1/(1-rate). */
static bool dropout_on(const pcgc__kargs *k, double *rate, double *scale) {
  *rate = pcgc_attrs_float(k->a, "rate");
  *scale = 1 / (1 - *rate);
  return k->ctx->training && *rate > 0;
}

/* The runs of `b` (the output or its gradient) for dropout: one per index of
 * the leading dims, each the last dim, contiguous both locally (offset 0)
 * and in the logical tensor (offset 1, the logical flat index). */
static kx_iter dropout_rows(const pcgc__kargs *k, const pcgc_buf *b, int64_t *rows, int64_t *len) {
  kx_iter it;
  memset(&it, 0, sizeof it);
  int64_t st[2][PCGC_MAX_RANK];
  kx_strides(b->rank, b->dims, st[0]);
  if (k->ctx->out) {
    const pcgc_piece *p = &k->ctx->out[0];
    kx_strides(b->rank, p->global, st[1]);
    for (int d = 0; d < b->rank; d++) it.off[1] += p->offset[d] * st[1][d];
  } else {
    memcpy(st[1], st[0], sizeof st[1]);
  }
  it.rank = b->rank > 0 ? b->rank - 1 : 0;
  for (int d = 0; d < it.rank; d++) {
    it.dims[d] = b->dims[d];
    it.st[0][d] = st[0][d];
    it.st[1][d] = st[1][d];
  }
  *len = b->rank > 0 ? b->dims[b->rank - 1] : 1;
  *rows = pcgc_buf_numel(b) / *len;
  return it;
}

/* The binary ops, numbered for the loops' constant arguments. */
enum { EW_ADD, EW_SUB, EW_MUL, EW_DIV };

static inline double ew_binary(int op, double a, double b) {
  switch (op) {
  case EW_ADD: return a + b;
  case EW_SUB: return a - b;
  case EW_MUL: return a * b;
  default: return a / b;
  }
}

/* dy * d(a op b)/d(operand) for operand j: 0 (a) or 1 (b) */
static inline double ew_grad(int op, int j, double dy, double a, double b) {
  switch (op) {
  case EW_ADD: return dy;
  case EW_SUB: return j ? -dy : dy;
  case EW_MUL: return j ? dy * a : dy * b;
  default: return j ? -dy * a / (b * b) : dy / b;
  }
}

#define REAL float
#define UREAL uint32_t
#define SFX(name) name##_f32
#define KX_F32 1
#include "k_elementwise_impl.h"
#define KX_F32 0
#define REAL double
#define UREAL uint64_t
#define SFX(name) name##_f64
#include "k_elementwise_impl.h"

/* A unary call cut for the parallel loop: elements [lo, hi). */
typedef struct unary_job {
  pcgc_op_kind kind;
  double s, s2;
  bool f32, fast;
  const void *x, *dy; /* dy: backward only */
  void *y;            /* the output, or dx */
} unary_job;

static void unary_fwd_range(void *p, int64_t lo, int64_t hi) {
  const unary_job *j = p;
  if (j->f32)
    (j->fast ? unary_fwd_fast_f32 : unary_fwd_alias_f32)(j->kind, j->s, j->s2, hi - lo, (const float *)j->x + lo,
                                                          (float *)j->y + lo);
  else
    (j->fast ? unary_fwd_fast_f64 : unary_fwd_alias_f64)(j->kind, j->s, j->s2, hi - lo, (const double *)j->x + lo,
                                                          (double *)j->y + lo);
}

static void unary_bwd_range(void *p, int64_t lo, int64_t hi) {
  const unary_job *j = p;
  if (j->f32)
    (j->fast ? unary_bwd_fast_f32 : unary_bwd_alias_f32)(j->kind, j->s, j->s2, hi - lo, (const float *)j->x + lo,
                                                          (const float *)j->dy + lo, (float *)j->y + lo);
  else
    (j->fast ? unary_bwd_fast_f64 : unary_bwd_alias_f64)(j->kind, j->s, j->s2, hi - lo, (const double *)j->x + lo,
                                                          (const double *)j->dy + lo, (double *)j->y + lo);
}

/* Elements per thread: the ops with a libm call an element run on the BLAS
 * threads, the others (bound by memory) and overlapping buffers in one
 * piece, in element order. */
static int64_t unary_grain(pcgc_op_kind kind, bool fast, int64_t n) {
  bool libm = kind == PCGC_OP_GELU || kind == PCGC_OP_SIGMOID || kind == PCGC_OP_SILU || kind == PCGC_OP_TANH ||
              kind == PCGC_OP_EXP || kind == PCGC_OP_POW;
  return fast && libm ? KX_GRAIN_LIBM : n;
}

/* Dropout over runs [lo, hi) of dropout_rows. */
typedef struct dropout_job {
  kx_iter it;
  int64_t len;
  uint64_t key, keep;
  double scale;
  bool f32, bwd;
  const void *src; /* x, or dy */
  void *dst;       /* y, or dx */
} dropout_job;

static void dropout_range(void *p, int64_t lo, int64_t hi) {
  const dropout_job *j = p;
  kx_iter it = kx_iter_at(j->it, lo);
  if (j->f32) (j->bwd ? dropout_bwd_f32 : dropout_fwd_f32)(it, hi - lo, j->len, j->key, j->keep, j->scale, j->src, j->dst);
  else (j->bwd ? dropout_bwd_f64 : dropout_fwd_f64)(it, hi - lo, j->len, j->key, j->keep, j->scale, j->src, j->dst);
}

static void dropout_run(const pcgc__kargs *k, bool bwd, double rate, double scale, const pcgc_buf *src,
                        pcgc_buf *dst) {
  dropout_job j;
  int64_t rows;
  j.it = dropout_rows(k, src, &rows, &j.len);
  j.key = pcgc__rng_key(k->ctx->seed, k->ctx->node);
  j.keep = pcgc__rng_threshold(rate);
  j.scale = scale;
  j.f32 = src->dtype == PCGC_F32;
  j.bwd = bwd;
  j.src = src->data;
  j.dst = dst->data;
  dropout_range(&j, 0, rows); /* one thread: a second one did not pay on two busy cores */
}

pcgc_status pcgc__cpu_fwd_unary(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, k->kind == PCGC_OP_IDENTITY ? KX_ANY_DTYPE : 0));
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
    dropout_run(k, false, rate, scale, x, y);
    return PCGC_OK;
  }
  unary_job j = {k->kind, scalar_attr(k), scalar2_attr(k), x->dtype == PCGC_F32, kx_disjoint(x, y), x->data, NULL, y->data};
  pcgc__parallel_for(n, unary_grain(k->kind, j.fast, n), unary_fwd_range, &j);
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_unary(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, 0));
  const pcgc_buf *x = &k->in[0], *dy = &k->dout[0];
  pcgc_buf *dx = &k->din[0];
  if (!kx_want(dx) || !kx_is_f(x->dtype)) return PCGC_OK;
  int64_t n = pcgc_buf_numel(x);
  double rate, scale;
  if (k->kind == PCGC_OP_DROPOUT && dropout_on(k, &rate, &scale)) {
    dropout_run(k, true, rate, scale, dy, dx);
    return PCGC_OK;
  }
  unary_job j = {k->kind, scalar_attr(k), scalar2_attr(k), x->dtype == PCGC_F32, kx_disjoint(dx, x) && kx_disjoint(dx, dy),
                 x->data, dy->data, dx->data};
  pcgc__parallel_for(n, unary_grain(k->kind, j.fast, n), unary_bwd_range, &j);
  return PCGC_OK;
}

/* ----------------------------------------------------------------- binary */

/* The output y (or its gradient) as runs for a, b: dims of size 1 dropped
 * and neighbours merged where all three are contiguous across them, the
 * last merged dim is the run (*len elements, operand strides *sa, *sb in
 * {0, 1}); the returned loop visits the *runs runs in row-major order with
 * offsets y, a, b. Element order is y's row-major order throughout. */
static kx_iter binary_runs(const pcgc_buf *y, const pcgc_buf *a, const pcgc_buf *b, int64_t *runs, int64_t *len,
                           int *sa, int *sb) {
  int64_t st[3][PCGC_MAX_RANK], dims[PCGC_MAX_RANK], ms[3][PCGC_MAX_RANK];
  kx_strides(y->rank, y->dims, st[0]);
  kx_broadcast_strides(a, y, st[1]);
  kx_broadcast_strides(b, y, st[2]);
  int r = 0; /* merged dims, innermost first */
  for (int d = y->rank - 1; d >= 0; d--) {
    if (y->dims[d] == 1) continue;
    bool merge = r > 0;
    for (int j = 0; j < 3 && merge; j++) merge = st[j][d] == ms[j][r - 1] * dims[r - 1];
    if (merge) {
      dims[r - 1] *= y->dims[d];
      continue;
    }
    dims[r] = y->dims[d];
    for (int j = 0; j < 3; j++) ms[j][r] = st[j][d];
    r++;
  }
  kx_iter it;
  memset(&it, 0, sizeof it);
  if (r == 0) { /* one element */
    *runs = *len = 1;
    *sa = *sb = 0;
    return it;
  }
  *len = dims[0];
  *sa = (int)ms[1][0];
  *sb = (int)ms[2][0];
  it.rank = r - 1;
  for (int p = 0; p < it.rank; p++) { /* outer dims, outermost first */
    it.dims[p] = dims[r - 1 - p];
    for (int j = 0; j < 3; j++) it.st[j][p] = ms[j][r - 1 - p];
  }
  *runs = pcgc_buf_numel(y) / *len;
  return it;
}

static int binary_op(pcgc_op_kind kind) {
  switch (kind) {
  case PCGC_OP_ADD: return EW_ADD;
  case PCGC_OP_SUB: return EW_SUB;
  case PCGC_OP_MUL: return EW_MUL;
  default: return EW_DIV;
  }
}

/* A binary call over elements [lo, hi) of the output in row-major order,
 * as pieces of the runs of binary_runs (a range, so that the loop could be
 * cut for threads; it is bound by memory and runs on one). */
typedef struct binary_job {
  kx_iter it; /* at the first run */
  int64_t len;
  int op, j, sa, sb; /* j: the operand whose gradient backward adds */
  bool f32, fast;
  size_t es;
  const char *a, *b, *dy; /* dy: backward only */
  char *y;                /* the output, or din[j] (laid out like dy) */
} binary_job;

static void binary_range(void *p, int64_t lo, int64_t hi, bool bwd) {
  const binary_job *jb = p;
  int64_t e = lo % jb->len;
  kx_iter it = kx_iter_at(jb->it, lo / jb->len);
  size_t es = jb->es;
  while (lo < hi) {
    int64_t m = jb->len - e < hi - lo ? jb->len - e : hi - lo;
    const char *pa = jb->a + (size_t)(it.off[1] + e * jb->sa) * es, *pb = jb->b + (size_t)(it.off[2] + e * jb->sb) * es;
    size_t o = (size_t)(it.off[0] + e) * es;
    if (!bwd && jb->f32)
      (jb->fast ? bin_fwd_fast_f32 : bin_fwd_alias_f32)(jb->op, m, (const float *)pa, jb->sa, (const float *)pb,
                                                         jb->sb, (float *)(jb->y + o));
    else if (!bwd)
      (jb->fast ? bin_fwd_fast_f64 : bin_fwd_alias_f64)(jb->op, m, (const double *)pa, jb->sa, (const double *)pb,
                                                         jb->sb, (double *)(jb->y + o));
    else if (jb->f32)
      (jb->fast ? bgrad_fast_f32 : bgrad_alias_f32)(jb->op, jb->j, m, (const float *)(jb->dy + o), (const float *)pa,
                                                     jb->sa, (const float *)pb, jb->sb, (float *)(jb->y + o));
    else
      (jb->fast ? bgrad_fast_f64 : bgrad_alias_f64)(jb->op, jb->j, m, (const double *)(jb->dy + o),
                                                     (const double *)pa, jb->sa, (const double *)pb, jb->sb,
                                                     (double *)(jb->y + o));
    lo += m;
    e = 0;
    kx_iter_next(&it);
  }
}

static void binary_fwd_range(void *p, int64_t lo, int64_t hi) { binary_range(p, lo, hi, false); }
static void binary_bwd_range(void *p, int64_t lo, int64_t hi) { binary_range(p, lo, hi, true); }

static binary_job binary_job_of(const pcgc__kargs *k, const pcgc_buf *y, int64_t *runs) {
  binary_job jb;
  memset(&jb, 0, sizeof jb);
  const pcgc_buf *a = &k->in[0], *b = &k->in[1];
  jb.it = binary_runs(y, a, b, runs, &jb.len, &jb.sa, &jb.sb);
  jb.op = binary_op(k->kind);
  jb.f32 = y->dtype == PCGC_F32;
  jb.es = pcgc_dtype_size(y->dtype);
  jb.a = a->data;
  jb.b = b->data;
  return jb;
}

pcgc_status pcgc__cpu_fwd_binary(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, 0));
  const pcgc_buf *a = &k->in[0], *b = &k->in[1];
  pcgc_buf *y = &k->out[0];
  int64_t runs, n = pcgc_buf_numel(y);
  binary_job jb = binary_job_of(k, y, &runs);
  jb.fast = kx_disjoint(y, a) && kx_disjoint(y, b);
  jb.y = y->data;
  binary_fwd_range(&jb, 0, n); /* bound by memory: one thread */
  return PCGC_OK;
}

/* Adds the gradient of operand `j` (0 = a, 1 = b) into din[j]. Each element
 * of the operand gets the double sum, in dy's row-major order, of its terms
 * (one term where it is not broadcast), then one add into din[j]. */
static pcgc_status binary_bwd_operand(const pcgc__kargs *k, int j) {
  const pcgc_buf *a = &k->in[0], *b = &k->in[1], *dy = &k->dout[0];
  pcgc_buf *dx = &k->din[j];
  int64_t runs, n = pcgc_buf_numel(dy), nx = pcgc_buf_numel(&k->in[j]);
  binary_job jb = binary_job_of(k, dy, &runs);
  jb.j = j;
  if (nx == n) { /* not broadcast: dx has dy's layout */
    jb.fast = kx_disjoint(dx, dy) && kx_disjoint(dx, a) && kx_disjoint(dx, b);
    jb.dy = dy->data;
    jb.y = dx->data;
    binary_bwd_range(&jb, 0, n);
    return PCGC_OK;
  }
  /* broadcast: the sums run across the runs, in one piece */
  double small[1024], *acc = nx <= 1024 ? small : malloc((size_t)nx * sizeof *acc);
  if (!acc)
    return pcgc_error_set(k->err, PCGC_ERR_NOMEM, "%s: out of memory (%zu bytes of scratch)",
                          pcgc_op_name(k->kind), (size_t)nx * sizeof *acc);
  memset(acc, 0, (size_t)nx * sizeof *acc);
  int xs = j ? jb.sb : jb.sa;
  kx_iter it = jb.it;
  size_t es = jb.es;
  for (int64_t r = 0; r < runs; r++, kx_iter_next(&it)) {
    const char *pd = (const char *)dy->data + (size_t)it.off[0] * es;
    const char *pa = jb.a + (size_t)it.off[1] * es, *pb = jb.b + (size_t)it.off[2] * es;
    double *pacc = acc + it.off[1 + j];
    if (jb.f32)
      bgrad_acc_f32(jb.op, j, jb.len, (const float *)pd, (const float *)pa, jb.sa, (const float *)pb, jb.sb, xs,
                    pacc);
    else
      bgrad_acc_f64(jb.op, j, jb.len, (const double *)pd, (const double *)pa, jb.sa, (const double *)pb, jb.sb, xs,
                    pacc);
  }
  if (jb.f32) acc_add_f32(nx, acc, dx->data);
  else acc_add_f64(nx, acc, dx->data);
  if (acc != small) free(acc);
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_binary(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, 0));
  for (int j = 0; j < 2; j++)
    if (kx_want(&k->din[j])) KX_TRY(binary_bwd_operand(k, j));
  return PCGC_OK;
}

/* ------------------------------------------------------------ causal mask */

/* x as [rows of M x N matrices]: element (i, j) of each matrix is masked
 * where j > i + offset. The last two dims are never sharded (infer.c), so
 * a piece's local indices are the logical ones. y may alias x. */
static void causal_run(const pcgc__kargs *k, const pcgc_buf *src, pcgc_buf *dst, bool bwd) {
  int r = src->rank;
  int64_t M = src->dims[r - 2], N = src->dims[r - 1], mats = pcgc_buf_numel(src) / (M * N);
  int64_t off = pcgc_attrs_int(k->a, "offset");
  for (int64_t m = 0; m < mats; m++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        int64_t e = (m * M + i) * N + j;
        bool masked = j > i + off;
        if (bwd) {
          if (!masked) kx_add(dst, e, kx_get(src, e));
        } else {
          kx_set(dst, e, masked ? -INFINITY : kx_get(src, e));
        }
      }
}

pcgc_status pcgc__cpu_fwd_mask(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, 0));
  causal_run(k, &k->in[0], &k->out[0], false);
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_mask(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, 0));
  pcgc_buf *dx = &k->din[0];
  if (!kx_want(dx)) return PCGC_OK;
  causal_run(k, &k->dout[0], dx, true);
  return PCGC_OK;
}

/* ------------------------------------------------------------------ rope */

/* x [..., T, D]: row t rotates each pair (i, i + D/2) by t theta^(-2i/D),
 * the angles in double as the attention kernel's rope_table; backward
 * rotates the gradient back. T and D are never sharded (infer.c). Each
 * pair is read before it is written, so y may alias x. */
static void rope_run(const pcgc__kargs *k, const pcgc_buf *src, pcgc_buf *dst, bool bwd) {
  int r = src->rank;
  int64_t T = src->dims[r - 2], D = src->dims[r - 1], h = D / 2, mats = pcgc_buf_numel(src) / (T * D);
  double theta = pcgc_attrs_float(k->a, "theta");
  for (int64_t i = 0; i < h; i++) {
    double inv = pow(theta, -2.0 * (double)i / (double)D);
    for (int64_t t = 0; t < T; t++) {
      double a = (double)t * inv, cs = cos(a), sn = bwd ? -sin(a) : sin(a);
      for (int64_t m = 0; m < mats; m++) {
        int64_t e = (m * T + t) * D + i;
        double x1 = kx_get(src, e), x2 = kx_get(src, e + h);
        if (bwd) {
          kx_add(dst, e, x1 * cs - x2 * sn);
          kx_add(dst, e + h, x2 * cs + x1 * sn);
        } else {
          kx_set(dst, e, x1 * cs - x2 * sn);
          kx_set(dst, e + h, x2 * cs + x1 * sn);
        }
      }
    }
  }
}

pcgc_status pcgc__cpu_fwd_rope(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, 0));
  rope_run(k, &k->in[0], &k->out[0], false);
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_rope(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, 0));
  if (!kx_want(&k->din[0])) return PCGC_OK;
  rope_run(k, &k->dout[0], &k->din[0], true);
  return PCGC_OK;
}
