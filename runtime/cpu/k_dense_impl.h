/*
 * k_dense_impl.h — the arithmetic of the dense kernels (k_dense.c) for one
 * float type. k_dense.c includes it twice, defining before each:
 *   REAL       float or double
 *   SFX(name)  name##_f32 or name##_f64
 *   GEMM       cblas_sgemm or cblas_dgemm
 *   RX(fn)     the libm function of that type (expf or exp, ...)
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

static inline REAL SFX(act)(int act, REAL z) {
  switch (act) {
  case PCGC_ACT_RELU: return z < 0 ? 0 : z; /* NaN propagates, as in PyTorch */
  case PCGC_ACT_GELU: return (REAL)0.5 * z * (1 + RX(erf)(z * (REAL)0.70710678118654752440));
  case PCGC_ACT_SIGMOID: return 1 / (1 + RX(exp)(-z));
  case PCGC_ACT_TANH: return RX(tanh)(z);
  default: return z;
  }
}

/* dz = dy * act'(.): from the output y for relu, sigmoid and tanh; for GELU
 * dz must hold the pre-activation on entry. */
static void SFX(act_bwd)(int act, int64_t n, const REAL *dy, const REAL *y, REAL *dz) {
  switch (act) {
  case PCGC_ACT_RELU:
    for (int64_t i = 0; i < n; i++) dz[i] = y[i] > 0 ? dy[i] : 0;
    break;
  case PCGC_ACT_SIGMOID:
    for (int64_t i = 0; i < n; i++) dz[i] = dy[i] * y[i] * (1 - y[i]);
    break;
  case PCGC_ACT_TANH:
    for (int64_t i = 0; i < n; i++) dz[i] = dy[i] * (1 - y[i] * y[i]);
    break;
  case PCGC_ACT_GELU:
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

/* y[rows, n] += bias (per column), then the activation, in place. */
static void SFX(bias_act)(int64_t rows, int64_t n, const REAL *b, int act, REAL *y) {
  if (!b && act == PCGC_ACT_NONE) return;
  for (int64_t r = 0; r < rows; r++) {
    REAL *yr = y + r * n;
    if (b)
      for (int64_t j = 0; j < n; j++) yr[j] += b[j];
    if (act != PCGC_ACT_NONE)
      for (int64_t j = 0; j < n; j++) yr[j] = SFX(act)(act, yr[j]);
  }
}

/* db[n] += column sums of dz[rows, n] */
static void SFX(colsum_add)(int64_t rows, int64_t n, const REAL *dz, REAL *db) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < n; j++) db[j] += dz[r * n + j];
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

/* col[Cg*KH*KW, OH*OW] from one group's channels x[Cg, H, W]; zeros where a
 * window reaches into the padding. */
static void SFX(im2col)(const conv_geo *g, const REAL *x, REAL *col) {
  for (int64_t c = 0; c < g->Cg; c++)
    for (int64_t ki = 0; ki < g->KH; ki++)
      for (int64_t kj = 0; kj < g->KW; kj++) {
        REAL *row = col + ((c * g->KH + ki) * g->KW + kj) * g->ohw;
        for (int64_t oh = 0; oh < g->OH; oh++) {
          REAL *r = row + oh * g->OW;
          int64_t ih = oh * g->sh - g->ph + ki * g->dh;
          if (ih < 0 || ih >= g->H) {
            memset(r, 0, sizeof *r * (size_t)g->OW);
            continue;
          }
          const REAL *xr = x + (c * g->H + ih) * g->W;
          for (int64_t ow = 0; ow < g->OW; ow++) {
            int64_t iw = ow * g->sw - g->pw + kj * g->dw;
            r[ow] = iw >= 0 && iw < g->W ? xr[iw] : 0;
          }
        }
      }
}

/* dx[Cg, H, W] += the columns scattered back (the adjoint of im2col). */
static void SFX(col2im)(const conv_geo *g, const REAL *col, REAL *dx) {
  for (int64_t c = 0; c < g->Cg; c++)
    for (int64_t ki = 0; ki < g->KH; ki++)
      for (int64_t kj = 0; kj < g->KW; kj++) {
        const REAL *row = col + ((c * g->KH + ki) * g->KW + kj) * g->ohw;
        for (int64_t oh = 0; oh < g->OH; oh++) {
          int64_t ih = oh * g->sh - g->ph + ki * g->dh;
          if (ih < 0 || ih >= g->H) continue;
          const REAL *r = row + oh * g->OW;
          REAL *dr = dx + (c * g->H + ih) * g->W;
          for (int64_t ow = 0; ow < g->OW; ow++) {
            int64_t iw = ow * g->sw - g->pw + kj * g->dw;
            if (iw >= 0 && iw < g->W) dr[iw] += r[ow];
          }
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
      if (b)
        for (int64_t p = 0; p < g->ohw; p++) yo[p] += b[o];
      if (g->act != PCGC_ACT_NONE)
        for (int64_t p = 0; p < g->ohw; p++) yo[p] = SFX(act)(g->act, yo[p]);
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
        for (int64_t o = 0; b && o < g->O; o++)
          for (int64_t p = 0; p < g->ohw; p++) dzbuf[o * g->ohw + p] += b[o];
      }
      SFX(act_bwd)(g->act, osz, dz, y + n * osz, dzbuf);
      dz = dzbuf;
    }
    if (db)
      for (int64_t o = 0; o < g->O; o++)
        for (int64_t p = 0; p < g->ohw; p++) db[o] += dz[o * g->ohw + p];
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

/* Index in the plane x[H, W] of the max of window (oh, ow): the first
 * maximum, NaN winning (as PyTorch); padding never wins. */
static int64_t SFX(pool_argmax)(const pool_geo *g, const REAL *x, int64_t oh, int64_t ow) {
  int64_t h0 = oh * g->sh - g->ph, w0 = ow * g->sw - g->pw;
  int64_t hs = h0 < 0 ? 0 : h0, ws = w0 < 0 ? 0 : w0;
  int64_t he = h0 + g->KH < g->H ? h0 + g->KH : g->H, we = w0 + g->KW < g->W ? w0 + g->KW : g->W;
  int64_t best = hs * g->W + ws;
  for (int64_t ih = hs; ih < he; ih++)
    for (int64_t iw = ws; iw < we; iw++) {
      REAL v = x[ih * g->W + iw];
      if (v > x[best] || isnan(v)) best = ih * g->W + iw;
    }
  return best;
}

static void SFX(pool_fwd)(const pcgc__kargs *k, const pool_geo *g) {
  const REAL *x = k->in[0].data;
  REAL *y = k->out[0].data;
  REAL inv = (REAL)(1 / g->div);
  for (int64_t c = 0; c < g->NC; c++) {
    const REAL *xc = x + c * g->H * g->W;
    REAL *yc = y + c * g->OH * g->OW;
    for (int64_t oh = 0; oh < g->OH; oh++)
      for (int64_t ow = 0; ow < g->OW; ow++) {
        if (g->is_max) {
          yc[oh * g->OW + ow] = xc[SFX(pool_argmax)(g, xc, oh, ow)];
          continue;
        }
        int64_t h0 = oh * g->sh - g->ph, w0 = ow * g->sw - g->pw;
        REAL s = 0;
        for (int64_t ih = h0 < 0 ? 0 : h0; ih < h0 + g->KH && ih < g->H; ih++)
          for (int64_t iw = w0 < 0 ? 0 : w0; iw < w0 + g->KW && iw < g->W; iw++) s += xc[ih * g->W + iw];
        yc[oh * g->OW + ow] = s * inv;
      }
  }
}

static void SFX(pool_bwd)(const pcgc__kargs *k, const pool_geo *g) {
  const REAL *x = k->in[0].data, *dy = k->dout[0].data;
  REAL *dx = k->din[0].data;
  REAL inv = (REAL)(1 / g->div);
  for (int64_t c = 0; c < g->NC; c++) {
    const REAL *xc = x + c * g->H * g->W, *dyc = dy + c * g->OH * g->OW;
    REAL *dxc = dx + c * g->H * g->W;
    for (int64_t oh = 0; oh < g->OH; oh++)
      for (int64_t ow = 0; ow < g->OW; ow++) {
        REAL d = dyc[oh * g->OW + ow];
        if (g->is_max) {
          dxc[SFX(pool_argmax)(g, xc, oh, ow)] += d;
          continue;
        }
        int64_t h0 = oh * g->sh - g->ph, w0 = ow * g->sw - g->pw;
        for (int64_t ih = h0 < 0 ? 0 : h0; ih < h0 + g->KH && ih < g->H; ih++)
          for (int64_t iw = w0 < 0 ? 0 : w0; iw < w0 + g->KW && iw < g->W; iw++) dxc[ih * g->W + iw] += d * inv;
      }
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
static void SFX(attn_probs)(const attn_geo *g, int64_t b, int64_t h, const REAL *Qp, const REAL *Kp, REAL *P) {
  const REAL *Qh = Qp + b * g->Sq * g->E + h * g->hd, *Kh = Kp + b * g->Sk * g->E + h * g->hd;
  SFX(gemm)(false, true, g->Sq, g->Sk, g->hd, (REAL)g->scale, Qh, g->E, Kh, g->E, 0, P, g->Sk);
  for (int64_t i = 0; i < g->Sq; i++) {
    REAL *row = P + i * g->Sk;
    int64_t lim = g->causal ? g->q0 + i + 1 : g->Sk; /* keys j < lim are visible */
    if (lim > g->Sk) lim = g->Sk;
    REAL mx = row[0], sum = 0;
    for (int64_t j = 1; j < lim; j++) mx = row[j] > mx ? row[j] : mx;
    for (int64_t j = 0; j < lim; j++) sum += row[j] = RX(exp)(row[j] - mx);
    for (int64_t j = 0; j < lim; j++) row[j] /= sum;
    for (int64_t j = lim; j < g->Sk; j++) row[j] = 0;
  }
}

/* Pd = P with dropout applied (kept entries scaled by 1/(1-p)). */
static void SFX(attn_dropout)(const attn_geo *g, int64_t b, int64_t h, const REAL *P, REAL *Pd) {
  REAL keep = (REAL)(1 / (1 - g->p));
  for (int64_t i = 0; i < g->Sq; i++)
    for (int64_t j = 0; j < g->Sk; j++)
      Pd[i * g->Sk + j] = attn_keep(g, b, h, i, j) ? P[i * g->Sk + j] * keep : 0;
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

static pcgc_status SFX(attn_fwd)(const pcgc__kargs *k, const attn_geo *g) {
  const pcgc_buf *in = k->in;
  const REAL *bq = g->bias ? in[7].data : NULL, *bk = g->bias ? in[8].data : NULL;
  const REAL *bv = g->bias ? in[9].data : NULL, *bo = g->bias_o ? in[10].data : NULL;
  int64_t nq = g->B * g->Sq * g->E, nk = g->B * g->Sk * g->E, np = g->Sq * g->Sk;
  REAL *buf = kalloc(k, 2 * nq + 2 * nk + 2 * np, sizeof(REAL));
  if (!buf) return PCGC_ERR_NOMEM;
  REAL *Qp = buf, *Cx = Qp + nq, *Kp = Cx + nq, *Vp = Kp + nk, *P = Vp + nk, *Pd = P + np;
  SFX(proj)(g->B * g->Sq, g->Eq, g->E, in[0].data, in[3].data, bq, Qp); /* (B*Sq, E) */
  SFX(proj)(g->B * g->Sk, g->Ek, g->E, in[1].data, in[4].data, bk, Kp); /* (B*Sk, E) */
  SFX(proj)(g->B * g->Sk, g->Ev, g->E, in[2].data, in[5].data, bv, Vp);
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
  REAL *buf = kalloc(k, 4 * nq + 4 * nk + 3 * np, sizeof(REAL));
  if (!buf) return PCGC_ERR_NOMEM;
  REAL *Qp = buf, *Cx = Qp + nq, *dC = Cx + nq, *dQ = dC + nq;
  REAL *Kp = dQ + nq, *Vp = Kp + nk, *dK = Vp + nk, *dV = dK + nk;
  REAL *P = dV + nk, *Pd = P + np, *dP = Pd + np;
  memset(dQ, 0, sizeof *dQ * (size_t)nq);
  memset(dK, 0, sizeof *dK * (size_t)(2 * nk)); /* dK, dV */
  SFX(proj)(g->B * g->Sq, g->Eq, g->E, in[0].data, in[3].data, bq, Qp);
  SFX(proj)(g->B * g->Sk, g->Ek, g->E, in[1].data, in[4].data, bk, Kp);
  SFX(proj)(g->B * g->Sk, g->Ev, g->E, in[2].data, in[5].data, bv, Vp);
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
      if (din[6].data) /* the context, for dwo */
        SFX(gemm)(false, false, g->Sq, g->hd, g->Sk, 1, Pu, g->Sk, Vp + ok, g->E, 0, Cx + oq, g->E);
      if (want_v) /* dV_h += Pd^T dC_h */
        SFX(gemm)(true, false, g->Sk, g->hd, g->Sq, 1, Pu, g->Sk, dC + oq, g->E, 1, dV + ok, g->E);
      if (!want_q && !want_k) continue;
      /* dPd = dC_h V_h^T (Sq, Sk), through dropout, then softmax: dS = P (dP - rowsum(dP P)) */
      SFX(gemm)(false, true, g->Sq, g->Sk, g->hd, 1, dC + oq, g->E, Vp + ok, g->E, 0, dP, g->Sk);
      for (int64_t i = 0; i < g->Sq; i++) {
        REAL *dr = dP + i * g->Sk;
        const REAL *pr = P + i * g->Sk;
        if (g->dropout_on)
          for (int64_t j = 0; j < g->Sk; j++) dr[j] = attn_keep(g, b, h, i, j) ? dr[j] * keep : 0;
        REAL dot = 0;
        for (int64_t j = 0; j < g->Sk; j++) dot += dr[j] * pr[j];
        for (int64_t j = 0; j < g->Sk; j++) dr[j] = pr[j] * (dr[j] - dot) * (REAL)g->scale;
      }
      if (want_q) /* dQ_h += dS K_h */
        SFX(gemm)(false, false, g->Sq, g->hd, g->Sk, 1, dP, g->Sk, Kp + ok, g->E, 1, dQ + oq, g->E);
      if (want_k) /* dK_h += dS^T Q_h */
        SFX(gemm)(true, false, g->Sk, g->hd, g->Sq, 1, dP, g->Sk, Qp + oq, g->E, 1, dK + ok, g->E);
    }
  SFX(proj_bwd)(g->B * g->Sq, g->E, g->Eo, Cx, in[6].data, dy, NULL, din[6].data, dbias[3]);
  if (want_q) SFX(proj_bwd)(g->B * g->Sq, g->Eq, g->E, in[0].data, in[3].data, dQ, din[0].data, din[3].data, dbias[0]);
  if (want_k) SFX(proj_bwd)(g->B * g->Sk, g->Ek, g->E, in[1].data, in[4].data, dK, din[1].data, din[4].data, dbias[1]);
  if (want_v) SFX(proj_bwd)(g->B * g->Sk, g->Ev, g->E, in[2].data, in[5].data, dV, din[2].data, din[5].data, dbias[2]);
  free(buf);
  return PCGC_OK;
}

#undef REAL
#undef SFX
#undef GEMM
#undef RX
