/*
 * k_moe.c — CPU kernels of mixture-of-experts routing: moe_route,
 * moe_dispatch and moe_combine (expert_linear, a GEMM per expert, is in
 * k_dense.c). f32 and f64; arithmetic in double.
 *
 * Layout (GShard's): G groups of S tokens; X experts with C slots each per
 * group; a token's k choices hold slot ids e * C + c, or -1 where expert e
 * was full.
 *
 * moe_route, per token: its top-k logits (ties to the lower expert, in
 * descending order), gate = softmax over those k (Mixtral's renormalised
 * top-k), then the slots: first choices of the group's tokens in token
 * order take their experts' slots first, then second choices, and so on
 * (GShard's priority), so what a full expert drops is a later choice.
 * Backward adds, besides the gates' softmax Jacobian, the gradient of
 * aux * the load-balancing loss of Switch/Mixtral:
 *     L = mean over groups of  X * sum_e (n_e / S) * (mean_t p_te)
 * with p_t = softmax over all X logits of token t, and n_e the tokens whose
 * top-k holds e (whether or not e had room). n_e is a count, so
 * dL/dp_te = X * n_e / (G * S^2), then softmax's Jacobian. aux * L is
 * added to the loss the runtime and the reference report
 * (pcgc_cpu_moe_aux_loss, per piece), as PyTorch's loss + aux * aux_loss.
 *
 * A piece of moe_route holds whole groups; moe_dispatch's and
 * moe_combine's pieces may hold some features, and moe_combine's some
 * experts (it then adds only their slots: a partial sum).
 */
#include <math.h>
#include <stdlib.h>

#include "k_common_impl.h"

#define TRY(x)                    \
  do {                            \
    pcgc_status s_ = (x);         \
    if (s_ != PCGC_OK) return s_; \
  } while (0)

/* The k choices of a token's X logits at `l`, best first; ties go to the
 * lower expert. */
static void top_k(const pcgc_buf *lb, int64_t base, int64_t X, int64_t k, int64_t *ch) {
  for (int64_t j = 0; j < k; j++) {
    int64_t best = -1;
    double bv = 0;
    for (int64_t e = 0; e < X; e++) {
      bool taken = false;
      for (int64_t i = 0; i < j && !taken; i++) taken = ch[i] == e;
      if (taken) continue;
      double v = kx_get(lb, base + e);
      if (best < 0 || v > bv || (isnan(v) && !isnan(bv))) {
        best = e;
        bv = v;
      }
    }
    ch[j] = best;
  }
}

typedef struct route_geo {
  int64_t G, S, X, k, C, G_all;
  double aux;
} route_geo;

static void route_geometry(const pcgc__kargs *k, route_geo *g) {
  const pcgc_buf *l = &k->in[0];
  g->G = l->dims[0];
  g->S = l->dims[1];
  g->X = l->dims[2];
  g->k = pcgc_attrs_int(k->a, "k");
  g->C = pcgc_attrs_int(k->a, "capacity");
  g->aux = pcgc_attrs_float(k->a, "aux");
  g->G_all = pcgc__in_piece(k, 0).global[0];
}

/* Every token's choices of group gi into ch[S * k]. */
static void group_choices(const pcgc_buf *l, const route_geo *g, int64_t gi, int64_t *ch) {
  for (int64_t t = 0; t < g->S; t++) top_k(l, (gi * g->S + t) * g->X, g->X, g->k, ch + t * g->k);
}

pcgc_status pcgc__cpu_fwd_moe_route(const pcgc__kargs *k) {
  TRY(pcgc__kcheck(k, false, 0));
  route_geo g;
  route_geometry(k, &g);
  const pcgc_buf *l = &k->in[0];
  pcgc_buf *gate = &k->out[0], *slot = &k->out[1];
  int64_t *ch = malloc((size_t)(g.S * g.k + g.X) * sizeof *ch);
  if (!ch) return pcgc__kfail_st(k, PCGC_ERR_NOMEM, "out of memory");
  int64_t *fill = ch + g.S * g.k;
  for (int64_t gi = 0; gi < g.G; gi++) {
    group_choices(l, &g, gi, ch);
    for (int64_t t = 0; t < g.S; t++) {
      int64_t row = (gi * g.S + t) * g.X, o = (gi * g.S + t) * g.k;
      double m = kx_get(l, row + ch[t * g.k]), z = 0;
      for (int64_t j = 0; j < g.k; j++) z += exp(kx_get(l, row + ch[t * g.k + j]) - m);
      for (int64_t j = 0; j < g.k; j++) kx_set(gate, o + j, exp(kx_get(l, row + ch[t * g.k + j]) - m) / z);
    }
    for (int64_t e = 0; e < g.X; e++) fill[e] = 0;
    int32_t *sl = (int32_t *)slot->data + gi * g.S * g.k;
    for (int64_t j = 0; j < g.k; j++)
      for (int64_t t = 0; t < g.S; t++) {
        int64_t e = ch[t * g.k + j];
        sl[t * g.k + j] = fill[e] < g.C ? (int32_t)(e * g.C + fill[e]++) : -1;
      }
  }
  free(ch);
  return PCGC_OK;
}

double pcgc_cpu_moe_aux_loss(const pcgc_buf *l, int64_t k, double aux, int64_t G_all) {
  if (!(aux > 0) || l->rank != 3 || G_all < 1 || k < 1) return 0;
  route_geo g = {l->dims[0], l->dims[1], l->dims[2], k, 0, G_all, aux};
  if (g.S < 1 || g.X < 1 || k > g.X) return 0;
  int64_t *ch = malloc((size_t)(g.S * g.k) * sizeof *ch);
  double *w = malloc((size_t)(3 * g.X) * sizeof *w);
  if (!ch || !w) {
    free(ch);
    free(w);
    return NAN; /* out of memory: the reported loss says so */
  }
  double *n = w, *pm = w + g.X, *p = pm + g.X, total = 0;
  for (int64_t gi = 0; gi < g.G; gi++) {
    group_choices(l, &g, gi, ch);
    for (int64_t e = 0; e < g.X; e++) n[e] = pm[e] = 0;
    for (int64_t i = 0; i < g.S * g.k; i++) n[ch[i]] += 1;
    for (int64_t t = 0; t < g.S; t++) {
      int64_t row = (gi * g.S + t) * g.X;
      double mx = -INFINITY, zs = 0;
      for (int64_t e = 0; e < g.X; e++) mx = fmax(mx, kx_get(l, row + e));
      for (int64_t e = 0; e < g.X; e++) zs += p[e] = exp(kx_get(l, row + e) - mx);
      for (int64_t e = 0; e < g.X; e++) pm[e] += p[e] / zs;
    }
    double L = 0; /* X * sum_e (n_e / S) * mean_t p_te */
    for (int64_t e = 0; e < g.X; e++) L += (n[e] / (double)g.S) * (pm[e] / (double)g.S);
    total += (double)g.X * L;
  }
  free(ch);
  free(w);
  return aux * total / (double)G_all;
}

pcgc_status pcgc__cpu_bwd_moe_route(const pcgc__kargs *k) {
  TRY(pcgc__kcheck(k, true, 0));
  pcgc_buf *dl = &k->din[0];
  if (!kx_want(dl)) return PCGC_OK;
  route_geo g;
  route_geometry(k, &g);
  const pcgc_buf *l = &k->in[0], *dgate = &k->dout[0];
  int64_t *ch = malloc((size_t)(g.S * g.k) * sizeof *ch);
  double *w = malloc((size_t)(2 * g.X + g.k) * sizeof *w);
  if (!ch || !w) {
    free(ch);
    free(w);
    return pcgc__kfail_st(k, PCGC_ERR_NOMEM, "out of memory");
  }
  double *a = w, *p = w + g.X, *gk = p + g.X;
  for (int64_t gi = 0; gi < g.G; gi++) {
    group_choices(l, &g, gi, ch);
    /* the load-balancing term's weight per expert: aux * X * n_e / (G S^2) */
    for (int64_t e = 0; e < g.X; e++) a[e] = 0;
    if (g.aux > 0)
      for (int64_t i = 0; i < g.S * g.k; i++) a[ch[i]] += 1;
    double scale = g.aux * (double)g.X / ((double)g.G_all * (double)g.S * (double)g.S);
    for (int64_t t = 0; t < g.S; t++) {
      int64_t row = (gi * g.S + t) * g.X, o = (gi * g.S + t) * g.k;
      /* the gates: softmax over the chosen logits */
      double m = kx_get(l, row + ch[t * g.k]), z = 0, v = 0;
      for (int64_t j = 0; j < g.k; j++) z += gk[j] = exp(kx_get(l, row + ch[t * g.k + j]) - m);
      for (int64_t j = 0; j < g.k; j++) {
        gk[j] /= z;
        v += gk[j] * kx_get(dgate, o + j);
      }
      for (int64_t j = 0; j < g.k; j++)
        kx_add(dl, row + ch[t * g.k + j], gk[j] * (kx_get(dgate, o + j) - v));
      if (g.aux <= 0) continue;
      /* the balancing term: softmax over all the logits */
      double mx = -INFINITY, zs = 0, u = 0;
      for (int64_t e = 0; e < g.X; e++) mx = fmax(mx, kx_get(l, row + e));
      for (int64_t e = 0; e < g.X; e++) zs += p[e] = exp(kx_get(l, row + e) - mx);
      for (int64_t e = 0; e < g.X; e++) {
        p[e] /= zs;
        u += p[e] * a[e] * scale;
      }
      for (int64_t e = 0; e < g.X; e++) kx_add(dl, row + e, p[e] * (a[e] * scale - u));
    }
  }
  free(ch);
  free(w);
  return PCGC_OK;
}

/* ------------------------------------------------ dispatch and combine */

/* The slots of a piece: [lo, hi) of the logical slot ids, and the
 * geometry of the dispatched tensor's piece. */
typedef struct slot_geo {
  int64_t G, S, k;      /* groups (local), tokens, choices */
  int64_t X, C, N;      /* local experts, slots per expert, local features */
  int64_t x0;           /* first logical expert of the piece */
  int64_t all;          /* logical slot ids: X_all * C */
} slot_geo;

static pcgc_status check_slots(const pcgc__kargs *k, const pcgc_buf *s, int64_t all) {
  int64_t n = pcgc_buf_numel(s);
  for (int64_t i = 0; i < n; i++) {
    int64_t v = kx_geti(s, i);
    if (v < -1 || v >= all)
      return pcgc__kfail(k, "slot %lld (element %lld) is neither -1 nor a slot id in [0, %lld)", (long long)v,
                         (long long)i, (long long)all);
  }
  return PCGC_OK;
}

/* the dispatched tensor's piece d[G, X, C, N] (placed by pd) against slot[G, S, k] */
static void slot_geometry(const pcgc_buf *d, pcgc_piece pd, const pcgc_buf *s, slot_geo *g) {
  g->G = s->dims[0];
  g->S = s->dims[1];
  g->k = s->dims[2];
  g->X = d->dims[1];
  g->C = d->dims[2];
  g->N = d->dims[3];
  g->x0 = pd.offset[1];
  g->all = pd.global[1] * g->C;
}

/* For each routed (token, choice) of the piece: fn(group, token, choice, local slot row). */
#define FOR_ROUTED(g, s, ...)                                                          \
  for (int64_t gi = 0; gi < (g).G; gi++)                                              \
    for (int64_t t = 0; t < (g).S; t++)                                               \
      for (int64_t j = 0; j < (g).k; j++) {                                           \
        int64_t id_ = kx_geti((s), (gi * (g).S + t) * (g).k + j) - (g).x0 * (g).C;    \
        if (id_ < 0 || id_ >= (g).X * (g).C) continue;                                \
        int64_t tok = gi * (g).S + t, ch = tok * (g).k + j, row = gi * (g).X * (g).C + id_; \
        (void)ch; /* dispatch reads no gate */                                        \
        __VA_ARGS__                                                                   \
      }

/* Dispatch writes each slot once: a slot id twice in a group (slots that
 * are not moe_route's) would lose a token in forward but not in backward. */
static pcgc_status check_unique(const pcgc__kargs *k, const pcgc_buf *s, const slot_geo *g) {
  unsigned char *seen = calloc((size_t)g->all, 1);
  if (!seen) return pcgc__kfail_st(k, PCGC_ERR_NOMEM, "out of memory");
  pcgc_status st = PCGC_OK;
  for (int64_t gi = 0; gi < g->G && !st; gi++) {
    memset(seen, 0, (size_t)g->all);
    for (int64_t i = gi * g->S * g->k; i < (gi + 1) * g->S * g->k && !st; i++) {
      int64_t v = kx_geti(s, i);
      if (v < 0) continue;
      if (seen[v]) st = pcgc__kfail(k, "slot %lld is taken twice in group %lld; moe_route gives each slot once",
                                    (long long)v, (long long)gi);
      seen[v] = 1;
    }
  }
  free(seen);
  return st;
}

pcgc_status pcgc__cpu_fwd_moe_dispatch(const pcgc__kargs *k) {
  TRY(pcgc__kcheck(k, false, 0));
  const pcgc_buf *x = &k->in[0], *s = &k->in[1];
  pcgc_buf *y = &k->out[0];
  slot_geo g;
  slot_geometry(y, pcgc__out_piece(k, 0), s, &g);
  TRY(check_slots(k, s, g.all));
  TRY(check_unique(k, s, &g));
  memset(y->data, 0, (size_t)pcgc_buf_numel(y) * pcgc_dtype_size(y->dtype));
  FOR_ROUTED(g, s, {
    for (int64_t n = 0; n < g.N; n++) kx_set(y, row * g.N + n, kx_get(x, tok * g.N + n));
  })
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_moe_dispatch(const pcgc__kargs *k) {
  TRY(pcgc__kcheck(k, true, 0));
  const pcgc_buf *s = &k->in[1], *dy = &k->dout[0];
  pcgc_buf *dx = &k->din[0];
  if (!kx_want(dx)) return PCGC_OK;
  slot_geo g;
  slot_geometry(dy, pcgc__out_piece(k, 0), s, &g);
  TRY(check_slots(k, s, g.all));
  FOR_ROUTED(g, s, {
    for (int64_t n = 0; n < g.N; n++) kx_add(dx, tok * g.N + n, kx_get(dy, row * g.N + n));
  })
  return PCGC_OK;
}

pcgc_status pcgc__cpu_fwd_moe_combine(const pcgc__kargs *k) {
  TRY(pcgc__kcheck(k, false, 0));
  const pcgc_buf *y = &k->in[0], *gate = &k->in[1], *s = &k->in[2];
  pcgc_buf *o = &k->out[0];
  slot_geo g;
  slot_geometry(y, pcgc__in_piece(k, 0), s, &g);
  TRY(check_slots(k, s, g.all));
  memset(o->data, 0, (size_t)pcgc_buf_numel(o) * pcgc_dtype_size(o->dtype));
  FOR_ROUTED(g, s, {
    double w = kx_get(gate, ch);
    for (int64_t n = 0; n < g.N; n++) kx_add(o, tok * g.N + n, w * kx_get(y, row * g.N + n));
  })
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_moe_combine(const pcgc__kargs *k) {
  TRY(pcgc__kcheck(k, true, 0));
  const pcgc_buf *y = &k->in[0], *gate = &k->in[1], *s = &k->in[2], *dout = &k->dout[0];
  pcgc_buf *dy = kx_want(&k->din[0]) ? &k->din[0] : NULL, *dg = kx_want(&k->din[1]) ? &k->din[1] : NULL;
  slot_geo g;
  slot_geometry(y, pcgc__in_piece(k, 0), s, &g);
  TRY(check_slots(k, s, g.all));
  FOR_ROUTED(g, s, {
    double w = kx_get(gate, ch), dot = 0;
    for (int64_t n = 0; n < g.N; n++) {
      double d = kx_get(dout, tok * g.N + n);
      if (dy) kx_add(dy, row * g.N + n, w * d);
      dot += d * kx_get(y, row * g.N + n);
    }
    if (dg) kx_add(dg, ch, dot);
  })
  return PCGC_OK;
}
