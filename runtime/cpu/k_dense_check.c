/*
 * k_dense_check.c — checks and geometry of the dense families, shared by
 * the CPU kernels (k_dense.c) and the CUDA kernels (cu_dense.cu); see
 * k_dense_check.h.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "k_check.h"
#include "k_dense_check.h"

#define TRY(x)                     \
  do {                             \
    pcgc_status s_ = (x);          \
    if (s_ != PCGC_OK) return s_;  \
  } while (0)

pcgc__kd_shape pcgc__kd_shp(const pcgc_buf *b) {
  pcgc__kd_shape r;
  const char *dn = (unsigned)b->dtype < PCGC_DTYPE_COUNT ? pcgc_dtype_name(b->dtype) : "?";
  int n = snprintf(r.s, sizeof r.s, "%s[", dn);
  for (int d = 0; d < b->rank && d < PCGC_MAX_RANK && n < (int)sizeof r.s; d++)
    n += snprintf(r.s + n, sizeof r.s - (size_t)n, "%s%lld", d ? ", " : "", (long long)b->dims[d]);
  if (n < (int)sizeof r.s) snprintf(r.s + n, sizeof r.s - (size_t)n, "]");
  return r;
}
#define shp pcgc__kd_shp

static const char *slot(pcgc_op_kind kind, int i) {
  static const char *const lin[] = {"input", "weight", "bias"};
  static const char *const two[] = {"a", "b"};
  static const char *const emb[] = {"indices", "table"};
  static const char *const att[] = {"q", "k", "v", "wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo"};
  switch (kind) {
  case PCGC_OP_LINEAR:
  case PCGC_OP_CONV2D: return i < 3 ? lin[i] : "?";
  case PCGC_OP_MATMUL:
  case PCGC_OP_BATCH_MATMUL: return i < 2 ? two[i] : "?";
  case PCGC_OP_EMBEDDING: return i < 2 ? emb[i] : "?";
  case PCGC_OP_ATTENTION: return i < 11 ? att[i] : "?";
  default: return "input";
  }
}

static pcgc_status buf_ok(const pcgc__kargs *k, const pcgc_buf *b, const char *what) {
  if (b->rank < 0 || b->rank > PCGC_MAX_RANK) return pcgc__kfail(k, "%s has invalid rank %d", what, b->rank);
  if ((unsigned)b->dtype >= PCGC_DTYPE_COUNT) return pcgc__kfail(k, "%s has invalid dtype %d", what, (int)b->dtype);
  int64_t n = 1;
  for (int d = 0; d < b->rank; d++) {
    if (b->dims[d] < 0) return pcgc__kfail(k, "%s has a negative dim: %s", what, shp(b).s);
    if (b->dims[d] && n > INT64_MAX / b->dims[d]) return pcgc__kfail(k, "%s is too large: %s", what, shp(b).s);
    n *= b->dims[d];
  }
  if (n > 0 && !b->data) return pcgc__kfail(k, "%s %s has no data", what, shp(b).s);
  return PCGC_OK;
}

static bool same_shape(const pcgc_buf *a, const pcgc_buf *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* The first float input's dtype must be one the backend computes in. */
static pcgc_status float_dtype(const pcgc__kargs *k, int first, bool f32_only) {
  pcgc_dtype dt = k->in[first].dtype;
  const char *name = slot(k->kind, first);
  if (f32_only) {
    if (dt == PCGC_F64 || dt == PCGC_F16 || dt == PCGC_BF16)
      return pcgc__kfail_st(k, PCGC_ERR_UNSUPPORTED, "%s is %s; the CUDA kernels compute in f32", name,
                            shp(&k->in[first]).s);
    if (dt != PCGC_F32) return pcgc__kfail(k, "%s must be f32, got %s", name, shp(&k->in[first]).s);
    return PCGC_OK;
  }
  if (dt == PCGC_F16 || dt == PCGC_BF16)
    return pcgc__kfail_st(k, PCGC_ERR_UNSUPPORTED, "%s is %s; the CPU kernels compute in f32 or f64", name,
                          pcgc_dtype_name(dt));
  if (dt != PCGC_F32 && dt != PCGC_F64)
    return pcgc__kfail(k, "%s must be f32 or f64, got %s", name, shp(&k->in[first]).s);
  return PCGC_OK;
}

pcgc_status pcgc__kd_prepare(const pcgc__kargs *k, bool bwd, bool f32_only, pcgc_dtype *dt) {
  if (!k->a || k->a->kind != k->kind) return pcgc__kfail(k, "the attributes belong to another operator");
  int lo = pcgc_op_min_inputs(k->kind), hi = pcgc_op_max_inputs(k->kind);
  if (k->n_in < lo || k->n_in > hi || !k->in)
    return pcgc__kfail(k, "takes %d to %d inputs, got %d", lo, hi, k->n_in);
  if (k->n_out != 1 || !k->out) return pcgc__kfail(k, "has one output, got %d", k->n_out);
  for (int i = 0; i < k->n_in; i++) TRY(buf_ok(k, &k->in[i], slot(k->kind, i)));
  TRY(buf_ok(k, &k->out[0], "output"));
  if (bwd) {
    if (!k->dout || !k->din) return pcgc__kfail(k, "backward needs the output gradient and the input gradients");
    TRY(buf_ok(k, &k->dout[0], "output gradient"));
    if (!same_shape(&k->dout[0], &k->out[0]))
      return pcgc__kfail(k, "output gradient is %s but the output is %s", shp(&k->dout[0]).s, shp(&k->out[0]).s);
    for (int i = 0; i < k->n_in; i++) {
      if (!k->din[i].data) continue;
      TRY(buf_ok(k, &k->din[i], "gradient"));
      if (!same_shape(&k->din[i], &k->in[i]))
        return pcgc__kfail(k, "the gradient of %s is %s but %s is %s", slot(k->kind, i), shp(&k->din[i]).s,
                           slot(k->kind, i), shp(&k->in[i]).s);
    }
  }
  int first = k->kind == PCGC_OP_EMBEDDING ? 1 : 0; /* the first float input */
  TRY(float_dtype(k, first, f32_only));
  *dt = k->in[first].dtype;
  for (int i = first + 1; i < k->n_in; i++)
    if (k->in[i].dtype != *dt)
      return pcgc__kfail(k, "%s is %s but %s is %s", slot(k->kind, i), shp(&k->in[i]).s, slot(k->kind, first),
                         shp(&k->in[first]).s);
  if (k->out[0].dtype != *dt)
    return pcgc__kfail(k, "output is %s but %s is %s", shp(&k->out[0]).s, slot(k->kind, first),
                       shp(&k->in[first]).s);
  return PCGC_OK;
}

pcgc_status pcgc__kd_need_out(const pcgc__kargs *k, int rank, const int64_t *dims) {
  pcgc_buf want = k->out[0];
  want.rank = rank;
  memset(want.dims, 0, sizeof want.dims);
  memcpy(want.dims, dims, sizeof *dims * (size_t)rank);
  if (!same_shape(&want, &k->out[0]))
    return pcgc__kfail(k, "output is %s but the inputs give %s", shp(&k->out[0]).s, shp(&want).s);
  return PCGC_OK;
}

pcgc_status pcgc__kd_need_out_at(const pcgc__kargs *k, int at, int64_t n) {
  int64_t dims[PCGC_MAX_RANK];
  memcpy(dims, k->in[0].dims, sizeof dims);
  dims[at] = n;
  return pcgc__kd_need_out(k, at + 1, dims);
}

static pcgc_status need_rank(const pcgc__kargs *k, int i, int lo, int hi) {
  const pcgc_buf *b = &k->in[i];
  if (b->rank >= lo && b->rank <= hi) return PCGC_OK;
  if (lo == hi) return pcgc__kfail(k, "%s must have rank %d, got %s", slot(k->kind, i), lo, shp(b).s);
  return pcgc__kfail(k, "%s must have rank %d to %d, got %s", slot(k->kind, i), lo, hi, shp(b).s);
}

/* Input j's dim dj must equal input i's dim di. */
static pcgc_status need_match(const pcgc__kargs *k, int j, int dj, int i, int di) {
  if (k->in[j].dims[dj] == k->in[i].dims[di]) return PCGC_OK;
  return pcgc__kfail(k, "%s %s does not fit %s %s: its dim %d must be %lld", slot(k->kind, j), shp(&k->in[j]).s,
                     slot(k->kind, i), shp(&k->in[i]).s, dj, (long long)k->in[i].dims[di]);
}

static pcgc_status act_attr(const pcgc__kargs *k, int *act) {
  *act = k->kind == PCGC_OP_MATMUL ? PCGC_ACT_NONE : (int)pcgc_attrs_int(k->a, "act");
  if (*act < PCGC_ACT_NONE || *act > PCGC_ACT_TANH) return pcgc__kfail(k, "unknown activation %d", *act);
  return PCGC_OK;
}

/* --------------------------------------------------------- linear, matmul */

pcgc_status pcgc__kd_dense_geo(const pcgc__kargs *k, dense_geo *g) {
  const pcgc_buf *x = &k->in[0], *w = &k->in[1];
  TRY(need_rank(k, 0, 1, PCGC_MAX_RANK));
  TRY(need_rank(k, 1, 2, 2));
  int r = x->rank;
  TRY(need_match(k, 1, 0, 0, r - 1));
  g->rows = kx_prod(x->dims, 0, r - 1);
  g->K = w->dims[0];
  g->N = w->dims[1];
  g->bias = k->n_in == 3;
  if (g->bias) {
    TRY(need_rank(k, 2, 1, 1));
    TRY(need_match(k, 2, 0, 1, 1));
  }
  return act_attr(k, &g->act);
}

/* ----------------------------------------------------------- batch_matmul */

pcgc_status pcgc__kd_bmm_geo(const pcgc__kargs *k, bmm_geo *g) {
  const pcgc_buf *a = &k->in[0], *b = &k->in[1];
  TRY(need_rank(k, 0, 2, PCGC_MAX_RANK));
  TRY(need_rank(k, 1, a->rank, a->rank));
  int r = a->rank;
  g->tb = pcgc_attrs_int(k->a, "transpose_b") != 0;
  for (int d = 0; d < r - 2; d++) TRY(need_match(k, 1, d, 0, d));
  TRY(need_match(k, 1, g->tb ? r - 1 : r - 2, 0, r - 1));
  g->batch = kx_prod(a->dims, 0, r - 2);
  g->M = a->dims[r - 2];
  g->K = a->dims[r - 1];
  g->N = b->dims[g->tb ? r - 2 : r - 1];
  return PCGC_OK;
}

/* ----------------------------------------------------------------- conv2d */

pcgc_status pcgc__kd_conv_geo(const pcgc__kargs *k, conv_geo *g) {
  const pcgc_buf *x = &k->in[0], *w = &k->in[1];
  TRY(need_rank(k, 0, 4, 4));
  TRY(need_rank(k, 1, 4, 4));
  pcgc_ints st = pcgc_attrs_ints(k->a, "stride"), pad = pcgc_attrs_ints(k->a, "padding"),
            dil = pcgc_attrs_ints(k->a, "dilation");
  g->sh = st.v[0], g->sw = st.v[1], g->ph = pad.v[0], g->pw = pad.v[1], g->dh = dil.v[0], g->dw = dil.v[1];
  if (g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->ph < 0 || g->pw < 0)
    return pcgc__kfail(k, "stride and dilation must be at least 1 and padding not negative");
  g->groups = pcgc_attrs_int(k->a, "groups");
  TRY(act_attr(k, &g->act));
  g->N = x->dims[0], g->C = x->dims[1], g->H = x->dims[2], g->W = x->dims[3];
  g->O = w->dims[0], g->KH = w->dims[2], g->KW = w->dims[3];
  if (g->groups < 1 || g->C % g->groups || g->O % g->groups)
    return pcgc__kfail(k, "groups=%lld must divide the channels of input %s and weight %s", (long long)g->groups,
                       shp(x).s, shp(w).s);
  g->Cg = g->C / g->groups;
  g->Og = g->O / g->groups;
  if (w->dims[1] != g->Cg)
    return pcgc__kfail(k, "weight %s does not fit input %s with groups=%lld: its dim 1 must be %lld", shp(w).s,
                       shp(x).s, (long long)g->groups, (long long)g->Cg);
  if (g->KH < 1 || g->KW < 1 || g->H + 2 * g->ph < g->dh * (g->KH - 1) + 1 ||
      g->W + 2 * g->pw < g->dw * (g->KW - 1) + 1)
    return pcgc__kfail(k, "weight %s does not fit input %s (padding %lldx%lld, dilation %lldx%lld)", shp(w).s,
                       shp(x).s, (long long)g->ph, (long long)g->pw, (long long)g->dh, (long long)g->dw);
  g->OH = (g->H + 2 * g->ph - g->dh * (g->KH - 1) - 1) / g->sh + 1;
  g->OW = (g->W + 2 * g->pw - g->dw * (g->KW - 1) - 1) / g->sw + 1;
  g->bias = k->n_in == 3;
  if (g->bias) {
    TRY(need_rank(k, 2, 1, 1));
    TRY(need_match(k, 2, 0, 1, 0));
  }
  g->ckk = g->Cg * g->KH * g->KW;
  g->ohw = g->OH * g->OW;
  g->pointwise = g->KH == 1 && g->KW == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
  g->direct = g->N > 0 && g->C > 0 && g->H > 0 && g->W > 0 && g->O > 0;
  return PCGC_OK;
}

/* ----------------------------------------------------------------- pool2d */

pcgc_status pcgc__kd_pool_geo(const pcgc__kargs *k, pool_geo *g) {
  const pcgc_buf *x = &k->in[0];
  TRY(need_rank(k, 0, 4, 4));
  int64_t kind = pcgc_attrs_int(k->a, "kind");
  if (kind != PCGC_POOL_MAX && kind != PCGC_POOL_AVG) return pcgc__kfail(k, "unknown pooling kind %lld", (long long)kind);
  g->is_max = kind == PCGC_POOL_MAX;
  g->NC = x->dims[0] * x->dims[1];
  g->H = x->dims[2], g->W = x->dims[3];
  if (g->NC > 0 && (g->H < 1 || g->W < 1)) return pcgc__kfail(k, "input %s has an empty plane", shp(x).s);
  if (pcgc_attrs_int(k->a, "global")) {
    pcgc_piece p = pcgc__in_piece(k, 0);
    g->KH = g->H, g->KW = g->W, g->sh = g->sw = 1, g->ph = g->pw = 0, g->OH = g->OW = 1;
    if (p.global[2] < g->H || p.global[3] < g->W)
      return pcgc__kfail(k, "input piece %s is larger than its logical plane %lldx%lld", shp(x).s,
                         (long long)p.global[2], (long long)p.global[3]);
    g->div = (double)p.global[2] * (double)p.global[3]; /* logical area: pieces add up */
  } else {
    pcgc_ints kk = pcgc_attrs_ints(k->a, "kernel"), st = pcgc_attrs_ints(k->a, "stride"),
              pad = pcgc_attrs_ints(k->a, "padding");
    g->KH = kk.v[0], g->KW = kk.v[1], g->sh = st.v[0], g->sw = st.v[1], g->ph = pad.v[0], g->pw = pad.v[1];
    if (g->KH < 1 || g->KW < 1 || g->sh < 1 || g->sw < 1 || g->ph < 0 || g->pw < 0 || 2 * g->ph > g->KH ||
        2 * g->pw > g->KW)
      return pcgc__kfail(k, "kernel and stride must be at least 1, padding not negative and at most half the kernel");
    if (g->H + 2 * g->ph < g->KH || g->W + 2 * g->pw < g->KW)
      return pcgc__kfail(k, "the %lldx%lld window does not fit input %s", (long long)g->KH, (long long)g->KW,
                         shp(x).s);
    g->OH = (g->H + 2 * g->ph - g->KH) / g->sh + 1;
    g->OW = (g->W + 2 * g->pw - g->KW) / g->sw + 1;
    g->div = (double)(g->KH * g->KW); /* count_include_pad */
  }
  return pcgc__kd_need_out(k, 4, (int64_t[]){x->dims[0], x->dims[1], g->OH, g->OW});
}

/* -------------------------------------------------------------- embedding */

pcgc_status pcgc__kd_emb_geo(const pcgc__kargs *k, emb_geo *g, int *keep) {
  const pcgc_buf *idx = &k->in[0], *tab = &k->in[1];
  if (idx->dtype != PCGC_I32 && idx->dtype != PCGC_I64)
    return pcgc__kfail(k, "indices must be i32 or i64, got %s", shp(idx).s);
  TRY(need_rank(k, 1, 2, 2));
  int bag = (int)pcgc_attrs_int(k->a, "bag");
  if (bag < PCGC_BAG_NONE || bag > PCGC_BAG_MEAN) return pcgc__kfail(k, "unknown bag mode %d", bag);
  int r = idx->rank;
  if (bag != PCGC_BAG_NONE) TRY(need_rank(k, 0, 1, PCGC_MAX_RANK));
  else TRY(need_rank(k, 0, 0, PCGC_MAX_RANK - 1));
  *keep = bag != PCGC_BAG_NONE ? r - 1 : r;
  g->L = bag != PCGC_BAG_NONE ? idx->dims[r - 1] : 1;
  g->n_bags = kx_prod(idx->dims, 0, *keep);
  g->D = tab->dims[1];
  g->rows = tab->dims[0];
  pcgc_piece tp = pcgc__in_piece(k, 1);
  g->row0 = tp.offset[0];
  g->V = tp.global[0];
  if (g->row0 < 0 || g->row0 + g->rows > g->V)
    return pcgc__kfail(k, "table piece %s at row offset %lld does not fit a logical table of %lld rows", shp(tab).s,
                       (long long)g->row0, (long long)g->V);
  g->scale = 1;
  if (bag == PCGC_BAG_MEAN) {
    int64_t len = pcgc__in_piece(k, 0).global[r - 1]; /* logical bag length: pieces add up */
    g->scale = len > 0 ? 1.0 / (double)len : 0;
  }
  return PCGC_OK;
}

/* -------------------------------------------------------------- attention */

pcgc_status pcgc__kd_attn_geo(const pcgc__kargs *k, attn_geo *g) {
  if (k->n_in != 7 && k->n_in != 10 && k->n_in != 11)
    return pcgc__kfail(k, "takes 7 inputs (q, k, v, wq, wk, wv, wo), 10 (plus bq, bk, bv) or 11 (plus bq, bk, bv, bo), "
                       "got %d", k->n_in);
  const pcgc_buf *in = k->in;
  for (int i = 0; i < 3; i++) TRY(need_rank(k, i, 3, 3));
  for (int i = 3; i < 7; i++) TRY(need_rank(k, i, 2, 2));
  TRY(need_match(k, 1, 0, 0, 0));     /* batch */
  TRY(need_match(k, 2, 0, 0, 0));
  TRY(need_match(k, 2, 1, 1, 1));     /* key length */
  TRY(need_match(k, 3, 0, 0, 2));     /* wq [Eq, E] */
  TRY(need_match(k, 4, 0, 1, 2));     /* wk [Ek, E] */
  TRY(need_match(k, 5, 0, 2, 2));     /* wv [Ev, E] */
  TRY(need_match(k, 5, 1, 4, 1));     /* wk, wv [., F] */
  TRY(need_match(k, 6, 0, 3, 1));     /* wo [E, Eo] */
  g->bias = k->n_in >= 10;
  g->bias_o = k->n_in == 11;
  if (g->bias) {
    for (int i = 7; i < k->n_in; i++) TRY(need_rank(k, i, 1, 1));
    TRY(need_match(k, 7, 0, 3, 1));
    for (int i = 8; i < 10; i++) TRY(need_match(k, i, 0, 4, 1));
  }
  if (g->bias_o) TRY(need_match(k, 10, 0, 6, 1));
  g->B = in[0].dims[0], g->Sq = in[0].dims[1], g->Sk = in[1].dims[1];
  g->Eq = in[0].dims[2], g->Ek = in[1].dims[2], g->Ev = in[2].dims[2];
  g->E = in[3].dims[1], g->F = in[4].dims[1], g->Eo = in[6].dims[1];
  if (g->Sk < 1) return pcgc__kfail(k, "k %s has no positions to attend to", shp(&in[1]).s);
  g->heads = pcgc_attrs_int(k->a, "heads");
  g->causal = pcgc_attrs_int(k->a, "causal") != 0;
  g->rope = pcgc_attrs_int(k->a, "rope") != 0;
  g->theta = pcgc_attrs_float(k->a, "rope_theta");
  g->p = pcgc_attrs_float(k->a, "dropout");
  if (!(g->p >= 0 && g->p < 1)) return pcgc__kfail(k, "dropout must be in [0, 1), got %g", g->p);
  /* heads may be split across pieces: the head size comes from the logical width */
  pcgc_piece pw = pcgc__in_piece(k, 3), pq = pcgc__in_piece(k, 0);
  int64_t Eg = pw.global[1];
  if (g->heads < 1 || Eg < 1 || Eg % g->heads)
    return pcgc__kfail(k, "heads=%lld must divide the projection size %lld", (long long)g->heads, (long long)Eg);
  g->hd = Eg / g->heads;
  if (g->E % g->hd || pw.offset[1] % g->hd || pw.offset[1] < 0 || pw.offset[1] + g->E > Eg)
    return pcgc__kfail(k, "wq piece %s at column %lld does not hold whole heads of size %lld", shp(&in[3]).s,
                       (long long)pw.offset[1], (long long)g->hd);
  g->nh = g->E / g->hd;
  g->h0 = pw.offset[1] / g->hd;
  /* grouped-query attention: the k/v heads of this piece serve its query heads */
  pcgc_piece pk = pcgc__in_piece(k, 4);
  int64_t Fg = pk.global[1], kv = Fg / g->hd;
  if (Fg % g->hd || kv < 1 || g->heads % kv)
    return pcgc__kfail(k, "wk's %lld columns are not a number of key/value heads of size %lld dividing heads=%lld",
                       (long long)Fg, (long long)g->hd, (long long)g->heads);
  g->group = g->heads / kv;
  if (g->nh % g->group || g->h0 % g->group || g->F != g->nh / g->group * g->hd ||
      pk.offset[1] != g->h0 / g->group * g->hd)
    return pcgc__kfail(k, "wk piece %s at column %lld does not hold the key/value heads of query heads [%lld, %lld) "
                       "(%lld query heads per key/value head)", shp(&in[4]).s, (long long)pk.offset[1],
                       (long long)g->h0, (long long)(g->h0 + g->nh), (long long)g->group);
  g->Sq_g = pq.global[1];
  g->b0 = pq.offset[0];
  g->q0 = pq.offset[1];
  if (g->q0 < 0 || g->q0 + g->Sq > g->Sq_g || g->b0 < 0)
    return pcgc__kfail(k, "q piece %s at offset %lld does not fit a logical length of %lld", shp(&in[0]).s,
                       (long long)g->q0, (long long)g->Sq_g);
  if (g->causal && g->Sq_g != g->Sk)
    return pcgc__kfail(k, "a causal mask needs equal query and key lengths (%lld vs %lld)", (long long)g->Sq_g,
                       (long long)g->Sk);
  if (g->rope && (g->hd % 2 || !(g->theta > 1)))
    return pcgc__kfail(k, "rotary embeddings need an even head size and rope_theta > 1 (head size %lld, rope_theta %g)",
                       (long long)g->hd, g->theta);
  g->scale = 1.0 / sqrt((double)g->hd);
  g->dropout_on = k->ctx->training && g->p > 0;
  g->key = pcgc__rng_key(k->ctx->seed, k->ctx->node);
  g->thr = pcgc__rng_threshold(g->p);
  g->bc = g->hc = 1; /* CUDA sets its score chunks after this */
  return PCGC_OK;
}
