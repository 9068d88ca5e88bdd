/*
 * k_dense_impl.h — the arithmetic of the dense kernels (k_dense.c) for one
 * float type. k_dense.c includes it twice, defining before each:
 *   REAL       float or double
 *   SFX(name)  name##_f32 or name##_f64
 *   GEMM       cblas_sgemm or cblas_dgemm
 *   RX(fn)     the libm function of that type (expf or exp, ...)
 *   UREAL      the unsigned integer of REAL's width
 * Buffers arrive checked (shapes, dtypes, ids in range): these functions
 * only compute. Backward ADDS into every wanted input gradient.
 */

/* C = alpha op(A) op(B) + beta C, row-major; empty products handled here
 * because BLAS rejects zero leading dimensions. */
static void SFX(gemm)(bool ta, bool tb, int64_t m, int64_t n, int64_t kk, REAL alpha, const REAL *A, int64_t lda,
                      const REAL *B, int64_t ldb, REAL beta, REAL *C, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (kk <= 0) {
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) C[i * ldc + j] = beta == 0 ? 0 : beta * C[i * ldc + j];
    return;
  }
  GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)kk, alpha,
       A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* y[n] = act(y[n]) in place, one loop per activation. */
static void SFX(act_apply)(int act, int64_t n, REAL *restrict y) {
  switch (act) {
  case PCGC_ACT_RELU: KX_FOR(i, n, REAL z = y[i]; y[i] = z < 0 ? 0 : z); break; /* NaN propagates, as in PyTorch */
  case PCGC_ACT_GELU:
    if (sizeof(REAL) == 4) { /* the unfused f32 GELU's arithmetic (k_fastmath.h), vectorised */
      KX_FOR(i, n, y[i] = (REAL)kx_gelu_f32((float)y[i]));
      break;
    }
    for (int64_t i = 0; i < n; i++) {
      REAL z = y[i];
      y[i] = (REAL)0.5 * z * (1 + RX(erf)(z * (REAL)0.70710678118654752440));
    }
    break;
  case PCGC_ACT_SIGMOID:
    for (int64_t i = 0; i < n; i++) y[i] = 1 / (1 + RX(exp)(-y[i]));
    break;
  case PCGC_ACT_TANH:
    for (int64_t i = 0; i < n; i++) y[i] = RX(tanh)(y[i]);
    break;
  default: break;
  }
}

/* dz = dy * act'(.): from the output y for relu, sigmoid and tanh; for GELU
 * dz must hold the pre-activation on entry. */
static void SFX(act_bwd)(int act, int64_t n, const REAL *restrict dy, const REAL *restrict y, REAL *restrict dz) {
  switch (act) {
  case PCGC_ACT_RELU: KX_FOR(i, n, dz[i] = y[i] > 0 ? dy[i] : 0); break;
  case PCGC_ACT_SIGMOID: KX_FOR(i, n, dz[i] = dy[i] * y[i] * (1 - y[i])); break;
  case PCGC_ACT_TANH: KX_FOR(i, n, dz[i] = dy[i] * (1 - y[i] * y[i])); break;
  case PCGC_ACT_GELU:
    if (sizeof(REAL) == 4) {
      KX_FOR(i, n, dz[i] = (REAL)((float)dy[i] * kx_gelu_grad_f32((float)dz[i])));
      break;
    }
    for (int64_t i = 0; i < n; i++) {
      REAL z = dz[i];
      REAL cdf = (REAL)0.5 * (1 + RX(erf)(z * (REAL)0.70710678118654752440));
      REAL pdf = RX(exp)((REAL)-0.5 * z * z) * (REAL)0.39894228040143267794;
      dz[i] = dy[i] * (cdf + z * pdf);
    }
    break;
  default:
    memcpy(dz, dy, sizeof *dz * (size_t)n);
    break;
  }
}

/* y[n] += c */
static void SFX(add_const)(int64_t n, REAL c, REAL *restrict y) { KX_FOR(i, n, y[i] += c); }

/* y[rows, n] += bias (per column), then the activation, in place, row by row. */
static void SFX(bias_act)(int64_t rows, int64_t n, const REAL *restrict b, int act, REAL *restrict y) {
  if (!b && act == PCGC_ACT_NONE) return;
  for (int64_t r = 0; r < rows; r++) {
    REAL *yr = y + r * n;
    if (b) KX_FOR(j, n, yr[j] += b[j]);
    SFX(act_apply)(act, n, yr);
  }
}

/* db[n] += column sums of dz[rows, n], each column summed in row order */
static void SFX(colsum_add)(int64_t rows, int64_t n, const REAL *restrict dz, REAL *restrict db) {
  for (int64_t r = 0; r < rows; r++) {
    const REAL *dr = dz + r * n;
    KX_FOR(j, n, db[j] += dr[j]);
  }
}

/* *acc += x[0] + ... in order, in a register (the same additions as adding
 * into *acc one by one) */
static void SFX(sum_into)(int64_t n, const REAL *restrict x, REAL *restrict acc) {
  REAL s = *acc;
  for (int64_t i = 0; i < n; i++) s += x[i];
  *acc = s;
}

/* ------------------------------------------------------ linear, matmul */

static pcgc_status SFX(dense_fwd)(const pcgc__kargs *k, const dense_geo *g) {
  const REAL *x = k->in[0].data, *w = k->in[1].data, *b = g->bias ? k->in[2].data : NULL;
  REAL *y = k->out[0].data;
  SFX(gemm)(false, false, g->rows, g->N, g->K, 1, x, g->K, w, g->N, 0, y, g->N); /* (rows,N) */
  SFX(bias_act)(g->rows, g->N, b, g->act, y);
  return PCGC_OK;
}

static pcgc_status SFX(dense_bwd)(const pcgc__kargs *k, const dense_geo *g) {
  const REAL *x = k->in[0].data, *w = k->in[1].data, *b = g->bias ? k->in[2].data : NULL;
  const REAL *y = k->out[0].data, *dy = k->dout[0].data;
  REAL *dx = k->din[0].data, *dw = k->din[1].data, *db = g->bias ? k->din[2].data : NULL;
  REAL *scratch = NULL;
  const REAL *dz = dy;
  if (g->act != PCGC_ACT_NONE) {
    scratch = kalloc(k, g->rows * g->N, sizeof(REAL));
    if (!scratch) return PCGC_ERR_NOMEM;
    if (g->act == PCGC_ACT_GELU) { /* GELU' needs the pre-activation: recompute it */
      SFX(gemm)(false, false, g->rows, g->N, g->K, 1, x, g->K, w, g->N, 0, scratch, g->N);
      SFX(bias_act)(g->rows, g->N, b, PCGC_ACT_NONE, scratch);
    }
    SFX(act_bwd)(g->act, g->rows * g->N, dy, y, scratch);
    dz = scratch;
  }
  if (dx) SFX(gemm)(false, true, g->rows, g->K, g->N, 1, dz, g->N, w, g->N, 1, dx, g->K); /* dz w^T */
  if (dw) SFX(gemm)(true, false, g->K, g->N, g->rows, 1, x, g->K, dz, g->N, 1, dw, g->N); /* x^T dz */
  if (db) SFX(colsum_add)(g->rows, g->N, dz, db);
  free(scratch);
  return PCGC_OK;
}

/* ---------------------------------------------------------- batch_matmul */

static pcgc_status SFX(bmm_fwd)(const pcgc__kargs *k, const bmm_geo *g) {
  const REAL *a = k->in[0].data, *b = k->in[1].data;
  REAL *c = k->out[0].data;
  for (int64_t i = 0; i < g->batch; i++)
    SFX(gemm)(false, g->tb, g->M, g->N, g->K, 1, a + i * g->M * g->K, g->K, b + i * g->K * g->N, g->tb ? g->K : g->N,
              0, c + i * g->M * g->N, g->N);
  return PCGC_OK;
}

static pcgc_status SFX(bmm_bwd)(const pcgc__kargs *k, const bmm_geo *g) {
  const REAL *a = k->in[0].data, *b = k->in[1].data, *dc = k->dout[0].data;
  REAL *da = k->din[0].data, *db = k->din[1].data;
  int64_t M = g->M, K = g->K, N = g->N;
  for (int64_t i = 0; i < g->batch; i++) {
    const REAL *ai = a + i * M * K, *bi = b + i * K * N, *dci = dc + i * M * N;
    if (da) { /* da = dc b^T, or dc b when b is [N, K] */
      if (g->tb) SFX(gemm)(false, false, M, K, N, 1, dci, N, bi, K, 1, da + i * M * K, K);
      else SFX(gemm)(false, true, M, K, N, 1, dci, N, bi, N, 1, da + i * M * K, K);
    }
    if (db) { /* db = a^T dc [K, N], or dc^T a [N, K] */
      if (g->tb) SFX(gemm)(true, false, N, K, M, 1, dci, N, ai, K, 1, db + i * K * N, K);
      else SFX(gemm)(true, false, K, N, M, 1, ai, K, dci, N, 1, db + i * K * N, N);
    }
  }
  return PCGC_OK;
}

/* ----------------------------------------------------------------- conv2d */

/* Outputs ow of a row whose input column ow * sw - pw + kj * dw lies in
 * [0, W): [*lo, *hi). */
static void SFX(conv_cols)(const conv_geo *g, int64_t kj, int64_t *lo, int64_t *hi) {
  int64_t first = g->pw - kj * g->dw; /* ow * sw >= first */
  *lo = first <= 0 ? 0 : (first + g->sw - 1) / g->sw;
  int64_t last = g->W - 1 + g->pw - kj * g->dw; /* ow * sw <= last */
  *hi = last < 0 ? 0 : last / g->sw + 1;
  if (*hi > g->OW) *hi = g->OW;
  if (*lo > *hi) *lo = *hi;
}

/* col[Cg*KH*KW, OH*OW] from one group's channels x[Cg, H, W]; zeros where a
 * window reaches into the padding. */
static void SFX(im2col)(const conv_geo *g, const REAL *restrict x, REAL *restrict col) {
  for (int64_t kj = 0; kj < g->KW; kj++) {
    int64_t lo, hi;
    SFX(conv_cols)(g, kj, &lo, &hi);
    int64_t c0 = lo * g->sw - g->pw + kj * g->dw; /* input column of output lo */
    for (int64_t c = 0; c < g->Cg; c++)
      for (int64_t ki = 0; ki < g->KH; ki++) {
        REAL *row = col + ((c * g->KH + ki) * g->KW + kj) * g->ohw;
        for (int64_t oh = 0; oh < g->OH; oh++) {
          REAL *r = row + oh * g->OW;
          int64_t ih = oh * g->sh - g->ph + ki * g->dh;
          if (ih < 0 || ih >= g->H) {
            memset(r, 0, sizeof *r * (size_t)g->OW);
            continue;
          }
          const REAL *xr = x + (c * g->H + ih) * g->W + c0;
          for (int64_t ow = 0; ow < lo; ow++) r[ow] = 0;
          if (g->sw == 1) memcpy(r + lo, xr, sizeof *r * (size_t)(hi - lo));
          else
            for (int64_t ow = lo; ow < hi; ow++) r[ow] = xr[(ow - lo) * g->sw];
          for (int64_t ow = hi; ow < g->OW; ow++) r[ow] = 0;
        }
      }
  }
}

/* dx[Cg, H, W] += the columns scattered back (the adjoint of im2col), in
 * the order of im2col's loops: channel, kernel row, kernel column, output
 * row, output column. */
static void SFX(col2im)(const conv_geo *g, const REAL *restrict col, REAL *restrict dx) {
  for (int64_t c = 0; c < g->Cg; c++)
    for (int64_t ki = 0; ki < g->KH; ki++)
      for (int64_t kj = 0; kj < g->KW; kj++) {
        int64_t lo, hi;
        SFX(conv_cols)(g, kj, &lo, &hi);
        int64_t c0 = lo * g->sw - g->pw + kj * g->dw;
        const REAL *row = col + ((c * g->KH + ki) * g->KW + kj) * g->ohw;
        for (int64_t oh = 0; oh < g->OH; oh++) {
          int64_t ih = oh * g->sh - g->ph + ki * g->dh;
          if (ih < 0 || ih >= g->H) continue;
          const REAL *r = row + oh * g->OW + lo;
          REAL *dr = dx + (c * g->H + ih) * g->W + c0;
          if (g->sw == 1) KX_FOR(i, hi - lo, dr[i] += r[i]);
          else
            for (int64_t i = 0; i < hi - lo; i++) dr[i * g->sw] += r[i];
        }
      }
}

/* z[O, OH*OW] of image xn (no bias, no activation), group by group. */
static void SFX(conv_image)(const conv_geo *g, const REAL *xn, const REAL *w, REAL *col, REAL *z) {
  for (int64_t gi = 0; gi < g->groups; gi++) {
    const REAL *xg = xn + gi * g->Cg * g->H * g->W, *cp = xg;
    if (!g->pointwise) {
      SFX(im2col)(g, xg, col);
      cp = col;
    }
    SFX(gemm)(false, false, g->Og, g->ohw, g->ckk, 1, w + gi * g->Og * g->ckk, g->ckk, cp, g->ohw, 0,
              z + gi * g->Og * g->ohw, g->ohw);
  }
}

static pcgc_status SFX(conv_fwd)(const pcgc__kargs *k, const conv_geo *g) {
  const REAL *x = k->in[0].data, *w = k->in[1].data, *b = g->bias ? k->in[2].data : NULL;
  REAL *y = k->out[0].data;
  REAL *col = NULL;
  if (!g->pointwise && !(col = kalloc(k, g->ckk * g->ohw, sizeof(REAL)))) return PCGC_ERR_NOMEM;
  for (int64_t n = 0; n < g->N; n++) {
    REAL *yn = y + n * g->O * g->ohw; /* (O, OH*OW) */
    SFX(conv_image)(g, x + n * g->C * g->H * g->W, w, col, yn);
    for (int64_t o = 0; o < g->O; o++) {
      REAL *yo = yn + o * g->ohw;
      if (b) SFX(add_const)(g->ohw, b[o], yo);
      SFX(act_apply)(g->act, g->ohw, yo);
    }
  }
  free(col);
  return PCGC_OK;
}

static pcgc_status SFX(conv_bwd)(const pcgc__kargs *k, const conv_geo *g) {
  const REAL *x = k->in[0].data, *w = k->in[1].data, *b = g->bias ? k->in[2].data : NULL;
  const REAL *y = k->out[0].data, *dy = k->dout[0].data;
  REAL *dx = k->din[0].data, *dw = k->din[1].data, *db = g->bias ? k->din[2].data : NULL;
  bool need_col = !g->pointwise && (dw || g->act == PCGC_ACT_GELU), need_dcol = !g->pointwise && dx;
  int64_t csz = g->ckk * g->ohw, osz = g->O * g->ohw;
  REAL *buf = kalloc(k, (need_col ? csz : 0) + (need_dcol ? csz : 0) + (g->act != PCGC_ACT_NONE ? osz : 0),
                     sizeof(REAL));
  if (!buf) return PCGC_ERR_NOMEM;
  REAL *col = need_col ? buf : NULL, *dcol = need_dcol ? buf + (need_col ? csz : 0) : NULL;
  REAL *dzbuf = g->act != PCGC_ACT_NONE ? buf + (need_col ? csz : 0) + (need_dcol ? csz : 0) : NULL;
  for (int64_t n = 0; n < g->N; n++) {
    const REAL *xn = x + n * g->C * g->H * g->W, *dz = dy + n * osz; /* (O, OH*OW) */
    if (dzbuf) {
      if (g->act == PCGC_ACT_GELU) { /* recompute the pre-activation */
        SFX(conv_image)(g, xn, w, col, dzbuf);
        for (int64_t o = 0; b && o < g->O; o++) SFX(add_const)(g->ohw, b[o], dzbuf + o * g->ohw);
      }
      SFX(act_bwd)(g->act, osz, dz, y + n * osz, dzbuf);
      dz = dzbuf;
    }
    if (db)
      for (int64_t o = 0; o < g->O; o++) SFX(sum_into)(g->ohw, dz + o * g->ohw, db + o);
    for (int64_t gi = 0; gi < g->groups; gi++) {
      const REAL *xg = xn + gi * g->Cg * g->H * g->W, *dzg = dz + gi * g->Og * g->ohw;
      const REAL *wg = w + gi * g->Og * g->ckk;
      if (dw) { /* dw_g += dz_g col^T */
        const REAL *cp = xg;
        if (!g->pointwise) {
          SFX(im2col)(g, xg, col);
          cp = col;
        }
        SFX(gemm)(false, true, g->Og, g->ckk, g->ohw, 1, dzg, g->ohw, cp, g->ohw, 1, dw + gi * g->Og * g->ckk, g->ckk);
      }
      if (dx) { /* dcol = w_g^T dz_g, scattered back */
        REAL *dxg = dx + n * g->C * g->H * g->W + gi * g->Cg * g->H * g->W;
        if (g->pointwise) {
          SFX(gemm)(true, false, g->ckk, g->ohw, g->Og, 1, wg, g->ckk, dzg, g->ohw, 1, dxg, g->ohw);
        } else {
          SFX(gemm)(true, false, g->ckk, g->ohw, g->Og, 1, wg, g->ckk, dzg, g->ohw, 0, dcol, g->ohw);
          SFX(col2im)(g, dcol, dxg);
        }
      }
    }
  }
  free(buf);
  return PCGC_OK;
}

/* ----------------------------------------------------------------- pool2d */

/* Max pooling picks, per window, the first maximum in row-major window
 * order, NaN winning (as PyTorch; a later NaN over an earlier one) and
 * padding never; forward writes its value, backward adds dy to it. The two
 * helpers below are that rule without a data-dependent branch: the value
 * as a max (maxss) and a NaN select, the choice as an integer mask. */
KX_INLINE REAL SFX(pool_max)(REAL v, REAL m) {
  m = v > m ? v : m;
  return v != v ? v : m;
}
KX_INLINE int64_t SFX(pool_pick)(REAL v, REAL m, int64_t c, int64_t k) {
  int64_t t = (v > m) | (v != v);
  return c + ((k - c) & -t);
}

/* The pick of window rows [hs, he) x columns [ws, we) of plane x[H, W]:
 * returns its offset in the plane, *val its value. */
static int64_t SFX(maxpool_window)(const REAL *x, int64_t W, int64_t hs, int64_t he, int64_t ws, int64_t we,
                                   REAL *val) {
  int64_t best = hs * W + ws;
  REAL m = x[best];
  for (int64_t ih = hs; ih < he; ih++)
    for (int64_t iw = ws; iw < we; iw++) {
      REAL v = x[ih * W + iw];
      best = SFX(pool_pick)(v, m, best, ih * W + iw);
      m = SFX(pool_max)(v, m);
    }
  *val = m;
  return best;
}

/* n whole windows kh x kw, stride sw along the row, the first at x (rows W
 * apart): y[i] their maxima, or (y NULL) e[i] the offset of each pick from
 * its window's start. Constant kh, kw, sw unroll the window, and the loop
 * over the windows vectorises. */
KX_INLINE void SFX(maxpool_run)(int64_t kh, int64_t kw, int64_t sw, int64_t n, const REAL *restrict x, int64_t W,
                                REAL *restrict y, int32_t *restrict e) {
  /* the window's first element is visited twice: as the start and in the
   * loop, where it changes nothing (it is not greater than itself, and a NaN
   * picks itself again) */
  if (y) {
    KX_FOR(i, n, {
      const REAL *w = x + i * sw;
      REAL m = w[0];
      _Pragma("GCC unroll 9") for (int64_t a = 0; a < kh; a++)
        _Pragma("GCC unroll 9") for (int64_t b = 0; b < kw; b++) m = SFX(pool_max)(w[a * W + b], m);
      y[i] = m;
    });
  } else {
    KX_FOR(i, n, {
      const REAL *w = x + i * sw;
      REAL m = w[0];
      int32_t c = 0;
      _Pragma("GCC unroll 9") for (int64_t a = 0; a < kh; a++)
        _Pragma("GCC unroll 9") for (int64_t b = 0; b < kw; b++) {
          REAL v = w[a * W + b];
          c = (int32_t)SFX(pool_pick)(v, m, c, a * W + b);
          m = SFX(pool_max)(v, m);
        }
      e[i] = c;
    });
  }
}

/* n whole windows summed in REAL in row-major window order, times inv. */
KX_INLINE void SFX(avgpool_run)(int64_t kh, int64_t kw, int64_t sw, int64_t n, const REAL *restrict x, int64_t W,
                                REAL *restrict y, REAL inv) {
  KX_FOR(i, n, {
    const REAL *w = x + i * sw;
    REAL s = 0;
    _Pragma("GCC unroll 9") for (int64_t a = 0; a < kh; a++)
      _Pragma("GCC unroll 9") for (int64_t b = 0; b < kw; b++) s += w[a * W + b];
    y[i] = s * inv;
  });
}

/* The runs above for the windows of the zoo (2x2 stride 2, 3x3 stride 1
 * and 2) with constant shapes; any other window with the same loops. */
static void SFX(pool_run)(const pool_geo *g, int64_t n, const REAL *restrict x, REAL *restrict y,
                          int32_t *restrict e, REAL inv) {
  int64_t kh = g->KH, kw = g->KW, sw = g->sw, W = g->W;
#define POOL_RUN(KH_, KW_, SW_)                                                  \
  do {                                                                           \
    if (g->is_max) SFX(maxpool_run)(KH_, KW_, SW_, n, x, W, y, e);               \
    else SFX(avgpool_run)(KH_, KW_, SW_, n, x, W, y, inv);                        \
  } while (0)
  if (kh == 2 && kw == 2 && sw == 2) POOL_RUN(2, 2, 2);
  else if (kh == 3 && kw == 3 && sw == 1) POOL_RUN(3, 3, 1);
  else if (kh == 3 && kw == 3 && sw == 2) POOL_RUN(3, 3, 2);
  else POOL_RUN(kh, kw, sw);
#undef POOL_RUN
}

#define POOL_CHUNK 256

/* Forward of one plane x[H, W] into y[OH, OW] (y NULL: backward of max
 * pooling, adding dy[OH, OW] into dx at the picks, in output order). A row
 * of outputs is its clipped windows at both ends, one at a time, and the
 * whole windows between them as runs. */
static void SFX(pool_plane)(const pool_geo *g, const REAL *x, REAL *y, const REAL *dy, REAL *dx, REAL inv) {
  int64_t lo, hi;
  pool_inner_cols(g, &lo, &hi);
  if ((g->KH - 1) * g->W + g->KW > INT32_MAX) lo = hi = 0; /* picks past int32: one window at a time */
  int32_t e[POOL_CHUNK];
  for (int64_t oh = 0; oh < g->OH; oh++) {
    int64_t hs, he;
    pool_span(oh, g->sh, g->ph, g->KH, g->H, &hs, &he);
    int64_t a = lo, b = hi;
    if (he - hs != g->KH) a = b = g->OW; /* clipped rows: every window one at a time */
    for (int64_t ow = 0; ow < g->OW; ow++) {
      if (ow == a && a < b) { /* whole windows [a, b) */
        for (int64_t o = a; o < b; o += POOL_CHUNK) {
          int64_t n = b - o < POOL_CHUNK ? b - o : POOL_CHUNK, c0 = o * g->sw - g->pw;
          const REAL *xw = x + hs * g->W + c0;
          if (y) {
            SFX(pool_run)(g, n, xw, y + oh * g->OW + o, NULL, inv);
            continue;
          }
          SFX(pool_run)(g, n, xw, NULL, e, inv);
          REAL *dxw = dx + hs * g->W + c0;
          const REAL *dyo = dy + oh * g->OW + o;
          for (int64_t i = 0; i < n; i++) dxw[i * g->sw + e[i]] += dyo[i];
        }
        ow = b - 1;
        continue;
      }
      int64_t ws, we;
      pool_span(ow, g->sw, g->pw, g->KW, g->W, &ws, &we);
      if (g->is_max) {
        REAL v;
        int64_t at = SFX(maxpool_window)(x, g->W, hs, he, ws, we, &v);
        if (y) y[oh * g->OW + ow] = v;
        else dx[at] += dy[oh * g->OW + ow];
      } else {
        REAL s = 0;
        for (int64_t ih = hs; ih < he; ih++)
          for (int64_t iw = ws; iw < we; iw++) s += x[ih * g->W + iw];
        y[oh * g->OW + ow] = s * inv;
      }
    }
  }
}

/* Backward of average pooling: dx += dy * (1/div) over each clipped window,
 * every dx element receiving its terms in (oh, ow) order as windows are
 * visited in row-major order. Windows that overlap along a row at stride 1
 * (3x3 stride 1, say) go row by row of dx: the row is copied into a padded
 * scratch row where window column kj of output ow sits at ow + kj, the
 * outputs whose windows hold the row are added in oh order and, within one
 * oh, by kj from last to first (so that ow rises for every element), each
 * pass one vectorised loop over the outputs; then the row is copied back.
 * Other windows are added one at a time. */
#define POOL_ROW 4096
static void SFX(avgpool_plane_bwd)(const pool_geo *g, const REAL *restrict dy, REAL *restrict dx, REAL inv) {
  int64_t len = (g->OW - 1) + g->KW;
  if (len < g->pw + g->W) len = g->pw + g->W;
  if (g->sw != 1 || g->KW == 1 || g->OW == 1 || len > POOL_ROW) {
    for (int64_t oh = 0; oh < g->OH; oh++) {
      int64_t hs, he;
      pool_span(oh, g->sh, g->ph, g->KH, g->H, &hs, &he);
      for (int64_t ow = 0; ow < g->OW; ow++) {
        int64_t ws, we;
        pool_span(ow, g->sw, g->pw, g->KW, g->W, &ws, &we);
        REAL d = dy[oh * g->OW + ow];
        for (int64_t ih = hs; ih < he; ih++) {
          REAL *xr = dx + ih * g->W;
          for (int64_t iw = ws; iw < we; iw++) xr[iw] += d * inv;
        }
      }
    }
    return;
  }
  REAL row[POOL_ROW];
  memset(row, 0, sizeof *row * (size_t)len);
  for (int64_t ih = 0; ih < g->H; ih++) {
    /* outputs oh with oh*sh - ph <= ih < oh*sh - ph + KH */
    int64_t lo = ih + g->ph - g->KH + 1, hi = (ih + g->ph) / g->sh;
    lo = lo <= 0 ? 0 : (lo + g->sh - 1) / g->sh;
    if (hi > g->OH - 1) hi = g->OH - 1;
    if (lo > hi) continue;
    REAL *xr = dx + ih * g->W;
    memcpy(row + g->pw, xr, sizeof *xr * (size_t)g->W);
    for (int64_t oh = lo; oh <= hi; oh++) {
      const REAL *d = dy + oh * g->OW;
      for (int64_t kj = g->KW - 1; kj >= 0; kj--) {
        REAL *p = row + kj;
        KX_FOR(ow, g->OW, p[ow] += d[ow] * inv);
      }
    }
    memcpy(xr, row + g->pw, sizeof *xr * (size_t)g->W);
  }
}

/* Sums of whole planes (global pooling, or a window that is the plane), four
 * planes at a time so that four sums' additions overlap; each sum is in
 * row-major order. */
static void SFX(plane_sums)(int64_t planes, int64_t n, const REAL *restrict x, REAL *restrict y, REAL inv) {
  int64_t c = 0;
  for (; c + 4 <= planes; c += 4) {
    const REAL *x0 = x + c * n, *x1 = x0 + n, *x2 = x1 + n, *x3 = x2 + n;
    REAL s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t i = 0; i < n; i++) {
      s0 += x0[i];
      s1 += x1[i];
      s2 += x2[i];
      s3 += x3[i];
    }
    y[c] = s0 * inv, y[c + 1] = s1 * inv, y[c + 2] = s2 * inv, y[c + 3] = s3 * inv;
  }
  for (; c < planes; c++) {
    REAL s = 0;
    for (int64_t i = 0; i < n; i++) s += x[c * n + i];
    y[c] = s * inv;
  }
}

/* dx[planes, n] += dy[plane] * inv: backward of plane_sums */
static void SFX(plane_sums_bwd)(int64_t planes, int64_t n, const REAL *restrict dy, REAL *restrict dx, REAL inv) {
  for (int64_t c = 0; c < planes; c++) {
    REAL d = dy[c] * inv, *xc = dx + c * n;
    KX_FOR(i, n, xc[i] += d);
  }
}

static bool SFX(pool_is_plane)(const pool_geo *g) {
  return !g->is_max && g->OH == 1 && g->OW == 1 && g->KH == g->H && g->KW == g->W && g->ph == 0 && g->pw == 0;
}

static void SFX(pool_fwd)(const pcgc__kargs *k, const pool_geo *g) {
  const REAL *x = k->in[0].data;
  REAL *y = k->out[0].data;
  REAL inv = (REAL)(1 / g->div);
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
  if (SFX(pool_is_plane)(g)) {
    SFX(plane_sums)(g->NC, hw, x, y, inv);
    return;
  }
  for (int64_t c = 0; c < g->NC; c++) SFX(pool_plane)(g, x + c * hw, y + c * ohw, NULL, NULL, inv);
}

static void SFX(pool_bwd)(const pcgc__kargs *k, const pool_geo *g) {
  const REAL *x = k->in[0].data, *dy = k->dout[0].data;
  REAL *dx = k->din[0].data;
  REAL inv = (REAL)(1 / g->div);
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
  if (SFX(pool_is_plane)(g)) {
    SFX(plane_sums_bwd)(g->NC, hw, dy, dx, inv);
    return;
  }
  for (int64_t c = 0; c < g->NC; c++) {
    if (g->is_max) SFX(pool_plane)(g, x + c * hw, NULL, dy + c * ohw, dx + c * hw, inv);
    else SFX(avgpool_plane_bwd)(g, dy + c * ohw, dx + c * hw, inv);
  }
}

/* -------------------------------------------------------------- embedding */

static void SFX(emb_fwd)(const pcgc__kargs *k, const emb_geo *g) {
  const pcgc_buf *idx = &k->in[0];
  const REAL *t = k->in[1].data;
  REAL *y = k->out[0].data;
  REAL s = (REAL)g->scale;
  for (int64_t bag = 0; bag < g->n_bags; bag++) {
    REAL *yb = y + bag * g->D;
    for (int64_t d = 0; d < g->D; d++) yb[d] = 0;
    for (int64_t l = 0; l < g->L; l++) {
      int64_t r = get_id(idx, bag * g->L + l) - g->row0;
      if (r < 0 || r >= g->rows) continue; /* another piece's row */
      for (int64_t d = 0; d < g->D; d++) yb[d] += t[r * g->D + d];
    }
    if (s != 1)
      for (int64_t d = 0; d < g->D; d++) yb[d] *= s;
  }
}

static void SFX(emb_bwd)(const pcgc__kargs *k, const emb_geo *g) {
  const pcgc_buf *idx = &k->in[0];
  const REAL *dy = k->dout[0].data;
  REAL *dt = k->din[1].data;
  REAL s = (REAL)g->scale;
  for (int64_t bag = 0; bag < g->n_bags; bag++) {
    const REAL *dyb = dy + bag * g->D;
    for (int64_t l = 0; l < g->L; l++) {
      int64_t r = get_id(idx, bag * g->L + l) - g->row0;
      if (r < 0 || r >= g->rows) continue;
      for (int64_t d = 0; d < g->D; d++) dt[r * g->D + d] += dyb[d] * s;
    }
  }
}

/* -------------------------------------------------------------- attention */

/* P[Sq, Sk] = softmax over keys of (Q_h K_h^T) * scale for batch b, local
 * head h, with the causal mask on logical query positions. Not dropped out. */
/* Rotary embeddings in place on projected rows X [B * S, E] (this piece's
 * heads), positions from the table cs (rope_table): each head's halves
 * (x1, x2) become (x1 cos - x2 sin, x2 cos + x1 sin) (the rotate-half form of
 * Hugging Face's LLaMA); `inverse` rotates back (the transpose), which takes
 * gradients with respect to the rotated rows to the unrotated ones. */
static void SFX(attn_rope)(const attn_geo *g, int64_t S, const double *cs, bool inverse, REAL *X) {
  int64_t half = g->hd / 2;
  double sgn = inverse ? -1.0 : 1.0;
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t s = 0; s < S; s++) {
      const double *t = cs + 2 * s * half;
      for (int64_t h = 0; h < g->nh; h++) {
        REAL *x = X + (b * S + s) * g->E + h * g->hd;
        for (int64_t i = 0; i < half; i++) {
          double c = t[2 * i], sn = sgn * t[2 * i + 1], x1 = x[i], x2 = x[i + half];
          x[i] = (REAL)(x1 * c - x2 * sn);
          x[i + half] = (REAL)(x2 * c + x1 * sn);
        }
      }
    }
}

static void SFX(attn_probs)(const attn_geo *g, int64_t b, int64_t h, const REAL *Qp, const REAL *Kp, REAL *P) {
  const REAL *Qh = Qp + b * g->Sq * g->E + h * g->hd, *Kh = Kp + b * g->Sk * g->E + h * g->hd;
  SFX(gemm)(false, true, g->Sq, g->Sk, g->hd, (REAL)g->scale, Qh, g->E, Kh, g->E, 0, P, g->Sk);
  for (int64_t i = 0; i < g->Sq; i++) {
    REAL *restrict row = P + i * g->Sk;
    int64_t lim = g->causal ? g->q0 + i + 1 : g->Sk; /* keys j < lim are visible */
    if (lim > g->Sk) lim = g->Sk;
    REAL mx = row[0], sum = 0;
    for (int64_t j = 1; j < lim; j++) mx = row[j] > mx ? row[j] : mx;
    for (int64_t j = 0; j < lim; j++) sum += row[j] = RX(exp)(row[j] - mx);
    KX_FOR(j, lim, row[j] /= sum);
    for (int64_t j = lim; j < g->Sk; j++) row[j] = 0;
  }
}

/* v where kept, else +0 (through the bits: the draw decides, so a branch
 * would mispredict) */
KX_INLINE REAL SFX(kept_or_0)(bool kept, REAL v) {
  UREAL bits;
  memcpy(&bits, &v, sizeof bits);
  bits &= (UREAL)0 - (UREAL)kept;
  memcpy(&v, &bits, sizeof v);
  return v;
}

/* Pd = P with dropout applied (kept entries scaled by 1/(1-p)). */
static void SFX(attn_dropout)(const attn_geo *g, int64_t b, int64_t h, const REAL *restrict P, REAL *restrict Pd) {
  REAL keep = (REAL)(1 / (1 - g->p));
  for (int64_t i = 0; i < g->Sq; i++) {
    uint64_t c = attn_row(g, b, h, i);
    const REAL *pr = P + i * g->Sk;
    REAL *dr = Pd + i * g->Sk;
    for (int64_t j = 0; j < g->Sk; j++)
      dr[j] = SFX(kept_or_0)((pcgc__rng_u64_at(g->key, c + (uint64_t)j) >> 11) >= g->thr, pr[j] * keep);
  }
}

/* Y[rows, n] = X[rows, m] W[m, n] + b */
static void SFX(proj)(int64_t rows, int64_t m, int64_t n, const REAL *X, const REAL *W, const REAL *b, REAL *Y) {
  SFX(gemm)(false, false, rows, n, m, 1, X, m, W, n, 0, Y, n);
  SFX(bias_act)(rows, n, b, PCGC_ACT_NONE, Y);
}

/* Gradients of Y = X W + b given dY: dX += dY W^T, dW += X^T dY, db += sum dY. */
static void SFX(proj_bwd)(int64_t rows, int64_t m, int64_t n, const REAL *X, const REAL *W, const REAL *dY,
                          REAL *dX, REAL *dW, REAL *db) {
  if (dX) SFX(gemm)(false, true, rows, m, n, 1, dY, n, W, n, 1, dX, m);
  if (dW) SFX(gemm)(true, false, m, n, rows, 1, X, m, dY, n, 1, dW, n);
  if (db) SFX(colsum_add)(rows, n, dY, db);
}

/* Grouped-query attention: the k/v projections X [rows, F] (F = nh/group
 * heads of hd) as one column block per query head, Y [rows, E]: query head h
 * reads k/v head h / group. */
static void SFX(kv_expand)(const attn_geo *g, int64_t rows, const REAL *restrict X, REAL *restrict Y) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t h = 0; h < g->nh; h++)
      memcpy(Y + r * g->E + h * g->hd, X + r * g->F + h / g->group * g->hd, sizeof *Y * (size_t)g->hd);
}

/* The gradient of kv_expand: each k/v head's columns sum those of its
 * group's query heads, in head order. */
static void SFX(kv_fold)(const attn_geo *g, int64_t rows, const REAL *restrict Y, REAL *restrict X) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < g->F / g->hd; j++) {
      REAL *restrict x = X + r * g->F + j * g->hd;
      const REAL *y = Y + r * g->E + j * g->group * g->hd;
      memcpy(x, y, sizeof *x * (size_t)g->hd);
      for (int64_t t = 1; t < g->group; t++) KX_FOR(d, g->hd, x[d] += y[t * g->hd + d]);
    }
}

/* K or V projected (Y [rows, E], a block per query head): one GEMM into Y,
 * or for grouped-query attention into the scratch X [rows, F] and expanded. */
static void SFX(kv_proj)(const attn_geo *g, int64_t rows, int64_t m, const REAL *In, const REAL *W, const REAL *b,
                         REAL *X, REAL *Y) {
  if (g->group == 1) {
    SFX(proj)(rows, m, g->E, In, W, b, Y);
    return;
  }
  SFX(proj)(rows, m, g->F, In, W, b, X);
  SFX(kv_expand)(g, rows, X, Y);
}

/* What forward keeps for backward (pcgc_kernel_ctx.saved): Qp [B*Sq, E]
 * (rotated), Kp and Vp [B*Sk, E] (expanded), the context Cx [B*Sq, E]; *sv
 * NULL when the caller gave no room. Too little room is an error. */
static pcgc_status SFX(attn_saved)(const pcgc__kargs *k, const attn_geo *g, REAL **sv) {
  int64_t n = 2 * g->B * g->Sq * g->E + 2 * g->B * g->Sk * g->E;
  *sv = k->ctx->saved;
  if (*sv && k->ctx->saved_bytes < n * (int64_t)sizeof(REAL))
    return pcgc_error_set(k->err, PCGC_ERR_INVALID, "attention: %lld bytes saved for backward, %lld needed",
                          (long long)k->ctx->saved_bytes, (long long)(n * (int64_t)sizeof(REAL)));
  return PCGC_OK;
}

static pcgc_status SFX(attn_fwd)(const pcgc__kargs *k, const attn_geo *g) {
  const pcgc_buf *in = k->in;
  const REAL *bq = g->bias ? in[7].data : NULL, *bk = g->bias ? in[8].data : NULL;
  const REAL *bv = g->bias ? in[9].data : NULL, *bo = g->bias_o ? in[10].data : NULL;
  int64_t nq = g->B * g->Sq * g->E, nk = g->B * g->Sk * g->E, np = g->Sq * g->Sk;
  int64_t nkc = g->group > 1 ? g->B * g->Sk * g->F : 0; /* grouped k/v before expansion */
  REAL *sv;
  pcgc_status sst = SFX(attn_saved)(k, g, &sv);
  if (sst) return sst;
  REAL *buf = kalloc(k, (sv ? 0 : 2 * nq + 2 * nk) + 2 * np + nkc, sizeof(REAL));
  if (!buf) return PCGC_ERR_NOMEM;
  REAL *Qp = sv ? sv : buf, *Kp = Qp + nq, *Vp = Kp + nk, *Cx = Vp + nk;
  REAL *P = sv ? buf : Cx + nq, *Pd = P + np, *KVc = Pd + np;
  SFX(proj)(g->B * g->Sq, g->Eq, g->E, in[0].data, in[3].data, bq, Qp);            /* (B*Sq, E) */
  SFX(kv_proj)(g, g->B * g->Sk, g->Ek, in[1].data, in[4].data, bk, KVc, Kp); /* (B*Sk, E) */
  SFX(kv_proj)(g, g->B * g->Sk, g->Ev, in[2].data, in[5].data, bv, KVc, Vp);
  if (g->rope) { /* queries at their logical positions q0 + i, keys (whole) at j */
    double *cq = rope_table(k, g, g->q0, g->Sq), *ck = cq ? rope_table(k, g, 0, g->Sk) : NULL;
    if (!ck) {
      free(cq);
      free(buf);
      return PCGC_ERR_NOMEM;
    }
    SFX(attn_rope)(g, g->Sq, cq, false, Qp);
    SFX(attn_rope)(g, g->Sk, ck, false, Kp);
    free(cq);
    free(ck);
  }
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t h = 0; h < g->nh; h++) {
      SFX(attn_probs)(g, b, h, Qp, Kp, P); /* (Sq, Sk) */
      const REAL *Pu = P;
      if (g->dropout_on) {
        SFX(attn_dropout)(g, b, h, P, Pd);
        Pu = Pd;
      }
      SFX(gemm)(false, false, g->Sq, g->hd, g->Sk, 1, Pu, g->Sk, Vp + b * g->Sk * g->E + h * g->hd, g->E, 0,
                Cx + b * g->Sq * g->E + h * g->hd, g->E);
    }
  SFX(proj)(g->B * g->Sq, g->E, g->Eo, Cx, in[6].data, bo, k->out[0].data); /* (B*Sq, Eo) */
  free(buf);
  return PCGC_OK;
}

static pcgc_status SFX(attn_bwd)(const pcgc__kargs *k, const attn_geo *g) {
  const pcgc_buf *in = k->in, *din = k->din;
  const REAL *bq = g->bias ? in[7].data : NULL, *bk = g->bias ? in[8].data : NULL;
  const REAL *bv = g->bias ? in[9].data : NULL;
  const REAL *dy = k->dout[0].data;
  REAL *dbias[4] = {NULL, NULL, NULL, NULL};
  for (int i = 0; g->bias && i < 3; i++) dbias[i] = din[7 + i].data;
  if (g->bias_o) dbias[3] = din[10].data;
  bool want_q = din[0].data || din[3].data || dbias[0], want_k = din[1].data || din[4].data || dbias[1];
  bool want_v = din[2].data || din[5].data || dbias[2];
  int64_t nq = g->B * g->Sq * g->E, nk = g->B * g->Sk * g->E, np = g->Sq * g->Sk;
  int64_t nkc = g->group > 1 ? g->B * g->Sk * g->F : 0; /* grouped k/v before expansion, and dK, dV folded */
  REAL *sv; /* forward's Qp, Kp, Vp and Cx, or NULL: computed again */
  pcgc_status sst = SFX(attn_saved)(k, g, &sv);
  if (sst) return sst;
  REAL *buf = kalloc(k, (sv ? 0 : 2 * nq + 2 * nk) + 2 * nq + 2 * nk + 3 * np + 2 * nkc, sizeof(REAL));
  if (!buf) return PCGC_ERR_NOMEM;
  REAL *Qp = sv ? sv : buf, *Kp = Qp + nq, *Vp = Kp + nk, *Cx = Vp + nk;
  REAL *dC = sv ? buf : Cx + nq, *dQ = dC + nq, *dK = dQ + nq, *dV = dK + nk;
  REAL *P = dV + nk, *Pd = P + np, *dP = Pd + np, *dKc = dP + np, *dVc = dKc + nkc;
  memset(dQ, 0, sizeof *dQ * (size_t)nq);
  memset(dK, 0, sizeof *dK * (size_t)(2 * nk)); /* dK, dV */
  if (!sv) {
    SFX(proj)(g->B * g->Sq, g->Eq, g->E, in[0].data, in[3].data, bq, Qp);
    SFX(kv_proj)(g, g->B * g->Sk, g->Ek, in[1].data, in[4].data, bk, dKc, Kp); /* dKc: scratch until the fold */
    SFX(kv_proj)(g, g->B * g->Sk, g->Ev, in[2].data, in[5].data, bv, dKc, Vp);
  }
  double *cq = NULL, *ck = NULL; /* rope: the rotations, applied to Qp and Kp and undone on dQ and dK */
  if (g->rope) {
    if (!(cq = rope_table(k, g, g->q0, g->Sq)) || !(ck = rope_table(k, g, 0, g->Sk))) {
      free(cq);
      free(buf);
      return PCGC_ERR_NOMEM;
    }
    if (!sv) { /* saved ones are rotated already */
      SFX(attn_rope)(g, g->Sq, cq, false, Qp);
      SFX(attn_rope)(g, g->Sk, ck, false, Kp);
    }
  }
  /* output projection: dC = dy wo^T (B*Sq, E) */
  SFX(gemm)(false, true, g->B * g->Sq, g->E, g->Eo, 1, dy, g->Eo, in[6].data, g->Eo, 0, dC, g->E);
  REAL keep = (REAL)(1 / (1 - g->p));
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t h = 0; h < g->nh; h++) {
      int64_t oq = b * g->Sq * g->E + h * g->hd, ok = b * g->Sk * g->E + h * g->hd;
      SFX(attn_probs)(g, b, h, Qp, Kp, P);
      const REAL *Pu = P;
      if (g->dropout_on) {
        SFX(attn_dropout)(g, b, h, P, Pd);
        Pu = Pd;
      }
      if (din[6].data && !sv) /* the context, for dwo */
        SFX(gemm)(false, false, g->Sq, g->hd, g->Sk, 1, Pu, g->Sk, Vp + ok, g->E, 0, Cx + oq, g->E);
      if (want_v) /* dV_h += Pd^T dC_h */
        SFX(gemm)(true, false, g->Sk, g->hd, g->Sq, 1, Pu, g->Sk, dC + oq, g->E, 1, dV + ok, g->E);
      if (!want_q && !want_k) continue;
      /* dPd = dC_h V_h^T (Sq, Sk), through dropout, then softmax: dS = P (dP - rowsum(dP P)) */
      SFX(gemm)(false, true, g->Sq, g->Sk, g->hd, 1, dC + oq, g->E, Vp + ok, g->E, 0, dP, g->Sk);
      for (int64_t i = 0; i < g->Sq; i++) {
        REAL *restrict dr = dP + i * g->Sk;
        const REAL *restrict pr = P + i * g->Sk;
        if (g->dropout_on) {
          uint64_t c = attn_row(g, b, h, i);
          for (int64_t j = 0; j < g->Sk; j++)
            dr[j] = SFX(kept_or_0)((pcgc__rng_u64_at(g->key, c + (uint64_t)j) >> 11) >= g->thr, dr[j] * keep);
        }
        REAL dot = 0;
        for (int64_t j = 0; j < g->Sk; j++) dot += dr[j] * pr[j];
        REAL sc = (REAL)g->scale;
        KX_FOR(j, g->Sk, dr[j] = pr[j] * (dr[j] - dot) * sc);
      }
      if (want_q) /* dQ_h += dS K_h */
        SFX(gemm)(false, false, g->Sq, g->hd, g->Sk, 1, dP, g->Sk, Kp + ok, g->E, 1, dQ + oq, g->E);
      if (want_k) /* dK_h += dS^T Q_h */
        SFX(gemm)(true, false, g->Sk, g->hd, g->Sq, 1, dP, g->Sk, Qp + oq, g->E, 1, dK + ok, g->E);
    }
  if (g->rope) {
    if (want_q) SFX(attn_rope)(g, g->Sq, cq, true, dQ);
    if (want_k) SFX(attn_rope)(g, g->Sk, ck, true, dK);
    free(cq);
    free(ck);
  }
  SFX(proj_bwd)(g->B * g->Sq, g->E, g->Eo, Cx, in[6].data, dy, NULL, din[6].data, dbias[3]);
  if (want_q) SFX(proj_bwd)(g->B * g->Sq, g->Eq, g->E, in[0].data, in[3].data, dQ, din[0].data, din[3].data, dbias[0]);
  if (g->group > 1) { /* the gradients of the shared k/v heads */
    if (want_k) SFX(kv_fold)(g, g->B * g->Sk, dK, dKc);
    if (want_v) SFX(kv_fold)(g, g->B * g->Sk, dV, dVc);
    dK = dKc, dV = dVc;
  }
  if (want_k) SFX(proj_bwd)(g->B * g->Sk, g->Ek, g->F, in[1].data, in[4].data, dK, din[1].data, din[4].data, dbias[1]);
  if (want_v) SFX(proj_bwd)(g->B * g->Sk, g->Ev, g->F, in[2].data, in[5].data, dV, din[2].data, din[5].data, dbias[2]);
  free(buf);
  return PCGC_OK;
}

#undef REAL
#undef SFX
#undef GEMM
#undef RX
#undef UREAL
