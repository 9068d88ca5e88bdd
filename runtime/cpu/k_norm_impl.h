/*
 * k_norm_impl.h — the loops of batch and layer normalisation (k_norm.c)
 * for one storage type. k_norm.c includes it twice, defining before each:
 *   REAL       float or double (the buffers' dtype)
 *   SFX(name)  name##_f32 or name##_f64
 * Arithmetic in double, as k_norm.c describes it. A sum in double is a
 * chain of dependent additions that no loop may reorder, so the loops that
 * sum run NORM_G channels (rows) side by side, one chain each: the chains
 * overlap in the pipeline and every sum keeps its order. Loops without sums
 * (normalising, dx) run one channel (row) at a time and vectorise.
 */

/* ---------------------------------------------------------------- softmax
 * Over rows of n contiguous elements (the axis innermost). */

/* y = exp(x - max) / sum, e[n] a scratch row of the exponentials (or NULL:
 * each computed twice, as the sum and as the output need it) */
static void SFX(softmax_rows)(int64_t rows, int64_t n, const REAL *restrict x, REAL *restrict y, double *restrict e) {
  for (int64_t r = 0; r < rows; r++) {
    const REAL *xr = x + r * n;
    REAL *yr = y + r * n;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; j++) mx = fmax(mx, xr[j]);
    if (e) {
      for (int64_t j = 0; j < n; j++) sum += e[j] = exp(xr[j] - mx);
      KX_FOR(j, n, yr[j] = (REAL)(e[j] / sum));
    } else {
      for (int64_t j = 0; j < n; j++) sum += exp(xr[j] - mx);
      for (int64_t j = 0; j < n; j++) yr[j] = (REAL)(exp(xr[j] - mx) / sum);
    }
  }
}

/* dx += y * (dy - sum(y * dy)) */
static void SFX(softmax_rows_bwd)(int64_t rows, int64_t n, const REAL *restrict y, const REAL *restrict dy,
                                  REAL *restrict dx) {
  for (int64_t r = 0; r < rows; r++) {
    const REAL *yr = y + r * n, *dr = dy + r * n;
    REAL *xr = dx + r * n;
    double dot = 0;
    for (int64_t j = 0; j < n; j++) dot += (double)yr[j] * (double)dr[j];
    KX_FOR(j, n, xr[j] += (REAL)((double)yr[j] * ((double)dr[j] - dot)));
  }
}

/* ------------------------------------------------------------- batch norm
 * Channels c0 .. c0+nc-1 (nc <= NORM_G) of x [N, C, S]: element (n, c, s)
 * at (n * C + c) * S + s. */

/* sum[k], sumsq[k]: sums of x and x^2 over channel c0 + k */
static void SFX(bn_stats)(bn_shape sh, const REAL *restrict x, int64_t c0, int nc, double *sum, double *sumsq) {
  double s1[NORM_G] = {0}, s2[NORM_G] = {0};
  for (int64_t n = 0; n < sh.N; n++) {
    const REAL *xn = x + (n * sh.C + c0) * sh.S;
    if (nc == NORM_G) {
      for (int64_t i = 0; i < sh.S; i++)
        _Pragma("GCC unroll 4") for (int k = 0; k < NORM_G; k++) {
          double v = xn[k * sh.S + i];
          s1[k] += v;
          s2[k] += v * v;
        }
    } else {
      for (int k = 0; k < nc; k++)
        for (int64_t i = 0; i < sh.S; i++) {
          double v = xn[k * sh.S + i];
          s1[k] += v;
          s2[k] += v * v;
        }
    }
  }
  for (int k = 0; k < nc; k++) sum[k] = s1[k], sumsq[k] = s2[k];
}

/* y = (x - mean) * g + b over channel c (g = scale * invstd); with relu,
 * max(y, 0) (NaN propagates, as in PyTorch) */
static void SFX(bn_apply)(bn_shape sh, const REAL *restrict x, int64_t c, double mean, double g, double b, bool relu,
                          REAL *restrict y) {
  for (int64_t n = 0; n < sh.N; n++) {
    int64_t o = (n * sh.C + c) * sh.S;
    const REAL *xn = x + o;
    REAL *yn = y + o;
    if (relu) KX_FOR(i, sh.S, double v = ((double)xn[i] - mean) * g + b; yn[i] = (REAL)(v < 0 ? 0 : v));
    else KX_FOR(i, sh.S, yn[i] = (REAL)(((double)xn[i] - mean) * g + b));
  }
}

/* The gradient a fused relu passes on: dy where the normalised value
 * (x - m) * g + b (as bn_apply computes it) is positive; mg NULL: no relu */
#define BN_DY(d, xv, k, m, mg, mb) ((mg) && !(((double)(xv) - (m)[k]) * (mg)[k] + (mb)[k] > 0) ? 0.0 : (double)(d))

/* dsum[k] = sum of dy, dxsum[k] = sum of dy * (x - mean) * invstd over
 * channel c0 + k */
static void SFX(bn_bwd_stats)(bn_shape sh, const REAL *restrict x, const REAL *restrict dy, int64_t c0, int nc,
                              const double *mean, const double *invstd, const double *mg, const double *mb,
                              double *dsum, double *dxsum) {
  double s1[NORM_G] = {0}, s2[NORM_G] = {0}, m[NORM_G] = {0}, r[NORM_G] = {0};
  for (int k = 0; k < nc; k++) m[k] = mean[k], r[k] = invstd[k];
  for (int64_t n = 0; n < sh.N; n++) {
    int64_t o = (n * sh.C + c0) * sh.S;
    const REAL *xn = x + o, *dn = dy + o;
    if (nc == NORM_G) {
      for (int64_t i = 0; i < sh.S; i++)
        _Pragma("GCC unroll 4") for (int k = 0; k < NORM_G; k++) {
          double g = BN_DY(dn[k * sh.S + i], xn[k * sh.S + i], k, m, mg, mb);
          s1[k] += g;
          s2[k] += g * ((double)xn[k * sh.S + i] - m[k]) * r[k];
        }
    } else {
      for (int k = 0; k < nc; k++)
        for (int64_t i = 0; i < sh.S; i++) {
          double g = BN_DY(dn[k * sh.S + i], xn[k * sh.S + i], k, m, mg, mb);
          s1[k] += g;
          s2[k] += g * ((double)xn[k * sh.S + i] - m[k]) * r[k];
        }
    }
  }
  for (int k = 0; k < nc; k++) dsum[k] = s1[k], dxsum[k] = s2[k];
}

/* ls1[k] = sum of dy, ls2[k] = sum of dy * xhat (xhat = (x - mean) * invstd)
 * over channel c0 + k: this piece's share of dbias and dscale */
static void SFX(bn_bwd_shares)(bn_shape sh, const REAL *restrict x, const REAL *restrict dy, int64_t c0, int nc,
                               const double *mean, const double *invstd, const double *mg, const double *mb,
                               double *ls1, double *ls2) {
  double s1[NORM_G] = {0}, s2[NORM_G] = {0}, m[NORM_G] = {0}, r[NORM_G] = {0};
  for (int k = 0; k < nc; k++) m[k] = mean[k], r[k] = invstd[k];
  for (int64_t n = 0; n < sh.N; n++) {
    int64_t o = (n * sh.C + c0) * sh.S;
    const REAL *xn = x + o, *dn = dy + o;
    if (nc == NORM_G) {
      for (int64_t i = 0; i < sh.S; i++)
        _Pragma("GCC unroll 4") for (int k = 0; k < NORM_G; k++) {
          double d = BN_DY(dn[k * sh.S + i], xn[k * sh.S + i], k, m, mg, mb);
          s1[k] += d;
          s2[k] += d * (((double)xn[k * sh.S + i] - m[k]) * r[k]);
        }
    } else {
      for (int k = 0; k < nc; k++)
        for (int64_t i = 0; i < sh.S; i++) {
          double d = BN_DY(dn[k * sh.S + i], xn[k * sh.S + i], k, m, mg, mb);
          s1[k] += d;
          s2[k] += d * (((double)xn[k * sh.S + i] - m[k]) * r[k]);
        }
    }
  }
  for (int k = 0; k < nc; k++) ls1[k] = s1[k], ls2[k] = s2[k];
}

/* dx += g * (dy - mdy - xhat * mdx) over channel c; with relu, dy only
 * where (x - mean) * g + b > 0 */
static void SFX(bn_bwd_dx)(bn_shape sh, const REAL *restrict x, const REAL *restrict dy, int64_t c, double mean,
                           double invstd, double g, double mdy, double mdx, bool relu, double b, REAL *restrict dx) {
  for (int64_t n = 0; n < sh.N; n++) {
    int64_t o = (n * sh.C + c) * sh.S;
    const REAL *xn = x + o, *dn = dy + o;
    REAL *gn = dx + o;
    if (relu)
      KX_FOR(i, sh.S, {
        double xc = (double)xn[i] - mean, d = xc * g + b > 0 ? (double)dn[i] : 0.0, xhat = xc * invstd;
        gn[i] += (REAL)(g * (d - mdy - xhat * mdx));
      });
    else
      KX_FOR(i, sh.S, {
        double d = dn[i], xhat = ((double)xn[i] - mean) * invstd;
        gn[i] += (REAL)(g * (d - mdy - xhat * mdx));
      });
  }
}

/* ------------------------------------------------------------- layer norm
 * Rows r0 .. r0+nr-1 (nr <= NORM_G) of x [rows, n]. */

/* mean[k] and invstd[k] of row r0 + k: the mean, then the squared
 * deviations from it, each summed in order */
static void SFX(ln_stats)(int64_t n, double eps, const REAL *restrict x, int64_t r0, int nr, double *mean,
                          double *invstd) {
  const REAL *xr = x + r0 * n;
  double s[NORM_G] = {0}, q[NORM_G] = {0}, m[NORM_G] = {0};
  if (nr == NORM_G) {
    for (int64_t j = 0; j < n; j++)
      _Pragma("GCC unroll 4") for (int k = 0; k < NORM_G; k++) s[k] += xr[k * n + j];
  } else {
    for (int k = 0; k < nr; k++)
      for (int64_t j = 0; j < n; j++) s[k] += xr[k * n + j];
  }
  for (int k = 0; k < nr; k++) m[k] = s[k] / (double)n;
  if (nr == NORM_G) {
    for (int64_t j = 0; j < n; j++)
      _Pragma("GCC unroll 4") for (int k = 0; k < NORM_G; k++) {
        double d = xr[k * n + j] - m[k];
        q[k] += d * d;
      }
  } else {
    for (int k = 0; k < nr; k++)
      for (int64_t j = 0; j < n; j++) {
        double d = xr[k * n + j] - m[k];
        q[k] += d * d;
      }
  }
  for (int k = 0; k < nr; k++) {
    mean[k] = m[k];
    invstd[k] = 1 / sqrt(q[k] / (double)n + eps);
  }
}

/* y = (x - mean) * invstd * scale + bias over one row (scale 1 and bias 0
 * where absent, which are still multiplied and added: x + 0 turns -0 into 0) */
static void SFX(ln_apply)(int64_t n, const REAL *restrict x, double mean, double invstd, const REAL *restrict scale,
                          const REAL *restrict bias, REAL *restrict y) {
  if (scale && bias) KX_FOR(j, n, y[j] = (REAL)(((double)x[j] - mean) * invstd * (double)scale[j] + (double)bias[j]));
  else KX_FOR(j, n, y[j] = (REAL)(((double)x[j] - mean) * invstd * 1.0 + 0.0));
}

/* m1[k], m2[k]: means of g and of g * (x - mean) * invstd over row r0 + k,
 * g = dy * scale */
static void SFX(ln_bwd_means)(int64_t n, const REAL *restrict x, const REAL *restrict dy, const REAL *restrict scale,
                              int64_t r0, int nr, const double *mean, const double *invstd, double *m1,
                              double *m2) {
  const REAL *xr = x + r0 * n, *dr = dy + r0 * n;
  double s1[NORM_G] = {0}, s2[NORM_G] = {0}, m[NORM_G] = {0}, r[NORM_G] = {0};
  for (int k = 0; k < nr; k++) m[k] = mean[k], r[k] = invstd[k];
  if (nr == NORM_G) {
    for (int64_t j = 0; j < n; j++) {
      double sc = scale ? (double)scale[j] : 1.0;
      _Pragma("GCC unroll 4") for (int k = 0; k < NORM_G; k++) {
        double g = (double)dr[k * n + j] * sc;
        s1[k] += g;
        s2[k] += g * ((double)xr[k * n + j] - m[k]) * r[k];
      }
    }
  } else {
    for (int k = 0; k < nr; k++)
      for (int64_t j = 0; j < n; j++) {
        double g = (double)dr[k * n + j] * (scale ? (double)scale[j] : 1.0);
        s1[k] += g;
        s2[k] += g * ((double)xr[k * n + j] - m[k]) * r[k];
      }
  }
  for (int k = 0; k < nr; k++) m1[k] = s1[k] / (double)n, m2[k] = s2[k] / (double)n;
}

/* dx += invstd * (g - m1 - xhat * m2) over one row */
static void SFX(ln_bwd_dx)(int64_t n, const REAL *restrict x, const REAL *restrict dy, const REAL *restrict scale,
                           double mean, double invstd, double m1, double m2, REAL *restrict dx) {
  if (scale)
    KX_FOR(j, n, {
      double g = (double)dy[j] * (double)scale[j], xhat = ((double)x[j] - mean) * invstd;
      dx[j] += (REAL)(invstd * (g - m1 - xhat * m2));
    });
  else
    KX_FOR(j, n, {
      double g = (double)dy[j] * 1.0, xhat = ((double)x[j] - mean) * invstd;
      dx[j] += (REAL)(invstd * (g - m1 - xhat * m2));
    });
}

/* as[j] += dy * (x - mean) * invstd, ab[j] += dy over one row */
static void SFX(ln_bwd_cols)(int64_t n, const REAL *restrict x, const REAL *restrict dy, double mean, double invstd,
                             double *restrict as, double *restrict ab) {
  KX_FOR(j, n, {
    double d = dy[j];
    as[j] += d * ((double)x[j] - mean) * invstd;
    ab[j] += d;
  });
}

/* ---------------------------------------------------------------- RMS norm
 * Layer norm without centring: its backward is layer norm's with mean 0 and
 * m1 0 (ln_bwd_means, ln_bwd_dx, ln_bwd_cols); only the statistics and the
 * forward differ. */

/* invrms[k] = 1 / sqrt(mean(x^2) + eps) of row r0 + k, summed in order */
static void SFX(rms_stats)(int64_t n, double eps, const REAL *restrict x, int64_t r0, int nr, double *invrms) {
  const REAL *xr = x + r0 * n;
  double q[NORM_G] = {0};
  if (nr == NORM_G) {
    for (int64_t j = 0; j < n; j++)
      _Pragma("GCC unroll 4") for (int k = 0; k < NORM_G; k++) {
        double v = xr[k * n + j];
        q[k] += v * v;
      }
  } else {
    for (int k = 0; k < nr; k++)
      for (int64_t j = 0; j < n; j++) {
        double v = xr[k * n + j];
        q[k] += v * v;
      }
  }
  for (int k = 0; k < nr; k++) invrms[k] = 1 / sqrt(q[k] / (double)n + eps);
}

/* y = x * invrms * scale over one row (scale 1 where absent) */
static void SFX(rms_apply)(int64_t n, const REAL *restrict x, double invrms, const REAL *restrict scale,
                           REAL *restrict y) {
  if (scale) KX_FOR(j, n, y[j] = (REAL)((double)x[j] * invrms * (double)scale[j]));
  else KX_FOR(j, n, y[j] = (REAL)((double)x[j] * invrms));
}

#undef REAL
#undef SFX
