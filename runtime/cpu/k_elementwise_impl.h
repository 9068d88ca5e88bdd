/*
 * k_elementwise_impl.h — the loops of the elementwise kernels
 * (k_elementwise.c) for one storage type. k_elementwise.c includes it twice,
 * defining before each:
 *   REAL       float or double (the buffers' dtype)
 *   SFX(name)  name##_f32 or name##_f64
 *   UREAL      the unsigned integer of REAL's width
 * Every value is computed in double, exactly as the scalar helpers of
 * k_elementwise.c define it, and rounded to REAL when stored; but where
 * KX_F32 (REAL is float) GELU's erf form computes in float
 * (k_fastmath.h), so that its loops vectorise. Each op has a
 * loop of its own; the `_fast` entry points take restrict pointers (their
 * output overlaps no input) so gcc vectorises the simple ones, the `_alias`
 * ones run the same loops for overlapping buffers in element order.
 */

/* ------------------------------------------------------------------ unary */

KX_INLINE void SFX(unary_fwd_loop)(pcgc_op_kind kind, double s, double s2, int64_t n, const REAL *x, REAL *y) {
  switch (kind) {
  case PCGC_OP_RELU:
    KX_FOR(i, n, double v = x[i]; y[i] = (REAL)(v < 0 ? 0 : v)); /* NaN propagates, as in PyTorch */
    break;
  case PCGC_OP_GELU:
    if (s != 0)
      for (int64_t i = 0; i < n; i++) y[i] = (REAL)gelu_tanh(x[i]);
    else if (KX_F32)
      KX_FOR(i, n, y[i] = (REAL)kx_gelu_f32((float)x[i]));
    else
      for (int64_t i = 0; i < n; i++) y[i] = (REAL)gelu(x[i]);
    break;
  case PCGC_OP_SIGMOID:
    for (int64_t i = 0; i < n; i++) y[i] = (REAL)sigmoid(x[i]);
    break;
  case PCGC_OP_SILU:
    for (int64_t i = 0; i < n; i++) y[i] = (REAL)silu(x[i]);
    break;
  case PCGC_OP_RELU6: KX_FOR(i, n, y[i] = (REAL)relu6(x[i])); break;
  case PCGC_OP_LEAKY_RELU: KX_FOR(i, n, double v = x[i]; y[i] = (REAL)(v < 0 ? s * v : v)); break;
  case PCGC_OP_HARDSIGMOID: KX_FOR(i, n, y[i] = (REAL)hardsigmoid(x[i])); break;
  case PCGC_OP_HARDSWISH: KX_FOR(i, n, y[i] = (REAL)hardswish(x[i])); break;
  case PCGC_OP_POW:
    for (int64_t i = 0; i < n; i++) y[i] = (REAL)pow_exact(x[i], s);
    break;
  case PCGC_OP_CLIP: KX_FOR(i, n, y[i] = (REAL)clip(x[i], s, s2)); break;
  case PCGC_OP_TANH:
    for (int64_t i = 0; i < n; i++) y[i] = (REAL)tanh(x[i]);
    break;
  case PCGC_OP_EXP:
    for (int64_t i = 0; i < n; i++) y[i] = (REAL)exp(x[i]);
    break;
  case PCGC_OP_SCALAR_ADD: KX_FOR(i, n, y[i] = (REAL)((double)x[i] + s)); break;
  case PCGC_OP_SCALAR_SUB: KX_FOR(i, n, y[i] = (REAL)((double)x[i] - s)); break;
  case PCGC_OP_SCALAR_MUL: KX_FOR(i, n, y[i] = (REAL)((double)x[i] * s)); break;
  case PCGC_OP_SCALAR_DIV: KX_FOR(i, n, y[i] = (REAL)((double)x[i] / s)); break;
  default: KX_FOR(i, n, y[i] = x[i]); break; /* identity */
  }
}

/* dx += dy * (d unary / dx at x) */
KX_INLINE void SFX(unary_bwd_loop)(pcgc_op_kind kind, double s, double s2, int64_t n, const REAL *x, const REAL *dy,
                                   REAL *dx) {
  switch (kind) {
  case PCGC_OP_RELU:
    KX_FOR(i, n, double v = x[i]; double d = v > 0 ? 1.0 : 0.0; dx[i] += (REAL)((double)dy[i] * d));
    break;
  case PCGC_OP_GELU:
    if (s != 0)
      for (int64_t i = 0; i < n; i++) dx[i] += (REAL)((double)dy[i] * gelu_tanh_grad(x[i]));
    else if (KX_F32)
      KX_FOR(i, n, dx[i] += (REAL)((float)dy[i] * kx_gelu_grad_f32((float)x[i])));
    else
      for (int64_t i = 0; i < n; i++) dx[i] += (REAL)((double)dy[i] * gelu_grad(x[i]));
    break;
  case PCGC_OP_SIGMOID:
    for (int64_t i = 0; i < n; i++) {
      double y = sigmoid(x[i]);
      dx[i] += (REAL)((double)dy[i] * (y * (1 - y)));
    }
    break;
  case PCGC_OP_SILU:
    for (int64_t i = 0; i < n; i++) dx[i] += (REAL)((double)dy[i] * silu_grad(x[i]));
    break;
  case PCGC_OP_RELU6: KX_FOR(i, n, dx[i] += (REAL)((double)dy[i] * relu6_grad(x[i]))); break;
  case PCGC_OP_LEAKY_RELU: /* torch: the slope alpha at 0 and below */
    KX_FOR(i, n, double v = x[i]; dx[i] += (REAL)((double)dy[i] * (v > 0 ? 1.0 : s)));
    break;
  case PCGC_OP_HARDSIGMOID: KX_FOR(i, n, dx[i] += (REAL)((double)dy[i] * hardsigmoid_grad(x[i]))); break;
  case PCGC_OP_HARDSWISH: KX_FOR(i, n, dx[i] += (REAL)((double)dy[i] * hardswish_grad(x[i]))); break;
  case PCGC_OP_POW:
    for (int64_t i = 0; i < n; i++) dx[i] += (REAL)((double)dy[i] * pow_grad(x[i], s));
    break;
  case PCGC_OP_CLIP: KX_FOR(i, n, dx[i] += (REAL)((double)dy[i] * clip_grad(x[i], s, s2))); break;
  case PCGC_OP_TANH:
    for (int64_t i = 0; i < n; i++) {
      double y = tanh(x[i]);
      dx[i] += (REAL)((double)dy[i] * (1 - y * y));
    }
    break;
  case PCGC_OP_EXP:
    for (int64_t i = 0; i < n; i++) dx[i] += (REAL)((double)dy[i] * exp(x[i]));
    break;
  case PCGC_OP_SCALAR_MUL: KX_FOR(i, n, dx[i] += (REAL)((double)dy[i] * s)); break;
  case PCGC_OP_SCALAR_DIV: {
    double r = 1 / s;
    KX_FOR(i, n, dx[i] += (REAL)((double)dy[i] * r));
    break;
  }
  default: KX_FOR(i, n, dx[i] += (REAL)((double)dy[i] * 1.0)); break; /* identity, scalar add/sub, dropout off */
  }
}

static void SFX(unary_fwd_fast)(pcgc_op_kind kind, double s, double s2, int64_t n, const REAL *restrict x, REAL *restrict y) {
  SFX(unary_fwd_loop)(kind, s, s2, n, x, y);
}
static void SFX(unary_fwd_alias)(pcgc_op_kind kind, double s, double s2, int64_t n, const REAL *x, REAL *y) {
  SFX(unary_fwd_loop)(kind, s, s2, n, x, y);
}
static void SFX(unary_bwd_fast)(pcgc_op_kind kind, double s, double s2, int64_t n, const REAL *restrict x,
                                const REAL *restrict dy, REAL *restrict dx) {
  SFX(unary_bwd_loop)(kind, s, s2, n, x, dy, dx);
}
static void SFX(unary_bwd_alias)(pcgc_op_kind kind, double s, double s2, int64_t n, const REAL *x, const REAL *dy, REAL *dx) {
  SFX(unary_bwd_loop)(kind, s, s2, n, x, dy, dx);
}

/* v where keep, else `other` (its bits): a select through the bits, which
 * gcc does not turn back into a branch (a draw decides, so it would
 * mispredict). */
KX_INLINE REAL SFX(pick_bits)(bool keep, REAL v, UREAL other) {
  UREAL b;
  memcpy(&b, &v, sizeof b);
  UREAL m = (UREAL)0 - (UREAL)keep;
  b = (b & m) | (other & ~m);
  memcpy(&v, &b, sizeof v);
  return v;
}

/* Dropout over `rows` runs of `len` elements: local offset it->off[0],
 * logical flat index it->off[1] (consecutive within a run); an element is
 * kept where its draw >> 11 reaches `keep` (pcgc__rng_threshold(rate)).
 * Dropped outputs are +0; a dropped gradient adds -0.0, which leaves every
 * value as it is (-0.0 included), in place of no add. */
static void SFX(dropout_fwd)(kx_iter it, int64_t rows, int64_t len, uint64_t key, uint64_t keep, double scale,
                             const REAL *x, REAL *y) {
  for (int64_t r = 0; r < rows; r++, kx_iter_next(&it)) {
    const REAL *xr = x + it.off[0];
    REAL *yr = y + it.off[0];
    uint64_t c = (uint64_t)it.off[1];
    for (int64_t j = 0; j < len; j++) {
      bool kept = (pcgc__rng_u64_at(key, c + (uint64_t)j) >> 11) >= keep;
      yr[j] = SFX(pick_bits)(kept, (REAL)((double)xr[j] * scale), 0);
    }
  }
}

static void SFX(dropout_bwd)(kx_iter it, int64_t rows, int64_t len, uint64_t key, uint64_t keep, double scale,
                             const REAL *dy, REAL *dx) {
  REAL nz = (REAL)-0.0;
  UREAL nzb;
  memcpy(&nzb, &nz, sizeof nzb);
  for (int64_t r = 0; r < rows; r++, kx_iter_next(&it)) {
    const REAL *dr = dy + it.off[0];
    REAL *xr = dx + it.off[0];
    uint64_t c = (uint64_t)it.off[1];
    for (int64_t j = 0; j < len; j++) {
      bool kept = (pcgc__rng_u64_at(key, c + (uint64_t)j) >> 11) >= keep;
      xr[j] += SFX(pick_bits)(kept, (REAL)((double)dr[j] * scale), nzb);
    }
  }
}

/* ----------------------------------------------------------------- binary
 * A run: n output elements with operand strides sa, sb in {0, 1}. */

KX_INLINE void SFX(bin_run)(int op, int64_t n, const REAL *a, int sa, const REAL *b, int sb, REAL *y) {
  KX_FOR(i, n, y[i] = (REAL)ew_binary(op, a[i * sa], b[i * sb]));
}

static void SFX(bin_fwd_fast)(int op, int64_t n, const REAL *restrict a, int sa, const REAL *restrict b, int sb,
                              REAL *restrict y) {
  switch (op * 4 + sa * 2 + sb) { /* constant op and strides: one loop each */
#define EW_CASE(o, x, z)                        \
  case o * 4 + x * 2 + z:                       \
    SFX(bin_run)(o, n, a, x, b, z, y);          \
    break;
    EW_CASE(0, 0, 0) EW_CASE(0, 0, 1) EW_CASE(0, 1, 0) EW_CASE(0, 1, 1)
    EW_CASE(1, 0, 0) EW_CASE(1, 0, 1) EW_CASE(1, 1, 0) EW_CASE(1, 1, 1)
    EW_CASE(2, 0, 0) EW_CASE(2, 0, 1) EW_CASE(2, 1, 0) EW_CASE(2, 1, 1)
    EW_CASE(3, 0, 0) EW_CASE(3, 0, 1) EW_CASE(3, 1, 0) EW_CASE(3, 1, 1)
#undef EW_CASE
  }
}

static void SFX(bin_fwd_alias)(int op, int64_t n, const REAL *a, int sa, const REAL *b, int sb, REAL *y) {
  SFX(bin_run)(op, n, a, sa, b, sb, y);
}

/* The gradient of operand j over a run, added to dx[i] (dx has the run's
 * shape) as 0 + g, the way a sum of one term starts. */
KX_INLINE void SFX(bgrad_run)(int op, int j, int64_t n, const REAL *dy, const REAL *a, int sa, const REAL *b, int sb,
                              REAL *dx) {
  KX_FOR(i, n, dx[i] += (REAL)(0.0 + ew_grad(op, j, dy[i], a[i * sa], b[i * sb])));
}

static void SFX(bgrad_fast)(int op, int j, int64_t n, const REAL *restrict dy, const REAL *restrict a, int sa,
                            const REAL *restrict b, int sb, REAL *restrict dx) {
  switch ((op * 2 + j) * 4 + sa * 2 + sb) {
#define EW_CASE(o, jj)                                                 \
  case ((o * 2 + jj) * 4 + 0): SFX(bgrad_run)(o, jj, n, dy, a, 0, b, 0, dx); break; \
  case ((o * 2 + jj) * 4 + 1): SFX(bgrad_run)(o, jj, n, dy, a, 0, b, 1, dx); break; \
  case ((o * 2 + jj) * 4 + 2): SFX(bgrad_run)(o, jj, n, dy, a, 1, b, 0, dx); break; \
  case ((o * 2 + jj) * 4 + 3): SFX(bgrad_run)(o, jj, n, dy, a, 1, b, 1, dx); break;
    EW_CASE(0, 0) EW_CASE(0, 1) EW_CASE(1, 0) EW_CASE(1, 1)
    EW_CASE(2, 0) EW_CASE(2, 1) EW_CASE(3, 0) EW_CASE(3, 1)
#undef EW_CASE
  }
}

static void SFX(bgrad_alias)(int op, int j, int64_t n, const REAL *dy, const REAL *a, int sa, const REAL *b, int sb,
                             REAL *dx) {
  SFX(bgrad_run)(op, j, n, dy, a, sa, b, sb, dx);
}

/* The gradient of a broadcast operand j over a run, summed in double into
 * acc: acc[i] += g (xs = 1) or acc[0] += g in run order (xs = 0). */
KX_INLINE void SFX(bgrad_acc_run)(int op, int j, int64_t n, const REAL *dy, const REAL *a, int sa, const REAL *b,
                                  int sb, int xs, double *acc) {
  if (xs) {
    KX_FOR(i, n, acc[i] += ew_grad(op, j, dy[i], a[i * sa], b[i * sb]));
  } else {
    double s = acc[0];
    for (int64_t i = 0; i < n; i++) s += ew_grad(op, j, dy[i], a[i * sa], b[i * sb]);
    acc[0] = s;
  }
}

static void SFX(bgrad_acc)(int op, int j, int64_t n, const REAL *restrict dy, const REAL *restrict a, int sa,
                           const REAL *restrict b, int sb, int xs, double *restrict acc) {
  switch (op * 2 + j) {
#define EW_CASE(o, jj) \
  case o * 2 + jj: SFX(bgrad_acc_run)(o, jj, n, dy, a, sa, b, sb, xs, acc); break;
    EW_CASE(0, 0) EW_CASE(0, 1) EW_CASE(1, 0) EW_CASE(1, 1)
    EW_CASE(2, 0) EW_CASE(2, 1) EW_CASE(3, 0) EW_CASE(3, 1)
#undef EW_CASE
  }
}

/* dx[i] += acc[i] */
static void SFX(acc_add)(int64_t n, const double *restrict acc, REAL *restrict dx) {
  KX_FOR(i, n, dx[i] += (REAL)acc[i]);
}

#undef REAL
#undef SFX
#undef UREAL
#undef KX_F32
