/*
 * axes.c — the axis map of every ordinary operator (see pcg.h): which
 * input dims follow which output dims, which are contracted into partial
 * sums, and which partial sums pass through. It mirrors the parallel-type
 * rules of pcg/infer.c; pcgc_op_piece_inputs cross-checks the two (the
 * product of the contraction and sum axes must equal the inferred sum
 * degree, and each input's free axes its replica degree).
 */
#include <string.h>

#include "pcg.h"

static void none(pcgc_axmap *m, int n_in) {
  for (int i = 0; i < n_in; i++) {
    for (int d = 0; d < PCGC_MAX_RANK; d++) m->dim[i][d] = PCGC_AX_NONE;
    m->sum[i] = PCGC_AX_NONE;
  }
}

/* input i: dims map one-to-one onto the output's */
static void same(pcgc_axmap *m, int i, int rank) {
  for (int d = 0; d < rank; d++) m->dim[i][d] = PCGC_AX_OUT(d);
}

/* The reshape rule of infer.c: input dim i goes to the output dim that
 * starts at the same flat offset (skipping unit dims). */
static void reshape_map(pcgc_axmap *m, const pcgc_ptensor *x, const pcgc_ptensor *o) {
  for (int i = 0; i < x->rank; i++) {
    if (x->degree[i] == 1) continue;
    int64_t pre = 1, opre = 1;
    for (int k = 0; k < i; k++) pre *= x->dims[k];
    int j = 0;
    while (j < o->rank && opre < pre) opre *= o->dims[j++];
    while (j < o->rank && opre == pre && o->dims[j] == 1) j++;
    if (j < o->rank) m->dim[0][i] = PCGC_AX_OUT(j);
  }
}

pcgc_status pcgc_op_axes(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_ptensor *in,
                       const pcgc_ptensor *out, pcgc_axmap *m, pcgc_error *err) {
  none(m, n_in);
  const pcgc_ptensor *x = &in[0];
  int r = x->rank;
  switch (k) {
  case PCGC_OP_LINEAR:
  case PCGC_OP_MATMUL:
    for (int d = 0; d < r - 1; d++) m->dim[0][d] = PCGC_AX_OUT(d);
    m->dim[0][r - 1] = PCGC_AX_CON(0);
    m->sum[0] = PCGC_AX_SUM(0);
    m->dim[1][0] = PCGC_AX_CON(0);
    m->dim[1][1] = PCGC_AX_OUT(r - 1);
    if (n_in == 3) m->dim[2][0] = PCGC_AX_OUT(r - 1);
    return PCGC_OK;
  case PCGC_OP_BATCH_MATMUL: {
    bool tb = pcgc_attrs_int(a, "transpose_b") != 0;
    for (int d = 0; d < r - 2; d++) m->dim[0][d] = m->dim[1][d] = PCGC_AX_OUT(d);
    m->dim[0][r - 2] = PCGC_AX_OUT(r - 2);
    m->dim[0][r - 1] = PCGC_AX_CON(0);
    m->dim[1][tb ? r - 1 : r - 2] = PCGC_AX_CON(0);
    m->dim[1][tb ? r - 2 : r - 1] = PCGC_AX_OUT(r - 1);
    m->sum[0] = PCGC_AX_SUM(0);
    m->sum[1] = PCGC_AX_SUM(1);
    return PCGC_OK;
  }
  case PCGC_OP_CONV2D: {
    bool grouped = pcgc_attrs_int(a, "groups") > 1;
    m->dim[0][0] = PCGC_AX_OUT(0);
    m->dim[0][1] = grouped ? PCGC_AX_OUT(1) : PCGC_AX_CON(0);
    m->dim[0][2] = PCGC_AX_OUT(2);
    m->dim[0][3] = PCGC_AX_OUT(3);
    m->sum[0] = PCGC_AX_SUM(0);
    m->dim[1][0] = PCGC_AX_OUT(1);
    m->dim[1][1] = grouped ? PCGC_AX_NONE : PCGC_AX_CON(0);
    if (n_in == 3) m->dim[2][0] = PCGC_AX_OUT(1);
    return PCGC_OK;
  }
  case PCGC_OP_POOL2D:
    m->dim[0][0] = PCGC_AX_OUT(0);
    m->dim[0][1] = PCGC_AX_OUT(1);
    if (pcgc_attrs_int(a, "global")) {
      m->dim[0][2] = PCGC_AX_CON(0);
      m->dim[0][3] = PCGC_AX_CON(1);
    } else {
      m->dim[0][2] = PCGC_AX_OUT(2);
      m->dim[0][3] = PCGC_AX_OUT(3);
    }
    m->sum[0] = PCGC_AX_SUM(0);
    return PCGC_OK;
  case PCGC_OP_BATCHNORM:
    same(m, 0, r);
    for (int i = 1; i < n_in; i++) m->dim[i][0] = PCGC_AX_OUT(1);
    return PCGC_OK;
  case PCGC_OP_LAYERNORM:
  case PCGC_OP_RMSNORM: {
    same(m, 0, r);
    int axes = (int)pcgc_attrs_int(a, "axes");
    for (int i = 1; i < n_in; i++)
      for (int d = 0; d < axes; d++) m->dim[i][d] = PCGC_AX_OUT(r - axes + d);
    return PCGC_OK;
  }
  case PCGC_OP_EMBEDDING: {
    bool bag = pcgc_attrs_int(a, "bag") != PCGC_BAG_NONE;
    int keep = bag ? r - 1 : r;
    for (int d = 0; d < keep; d++) m->dim[0][d] = PCGC_AX_OUT(d);
    if (bag) m->dim[0][r - 1] = PCGC_AX_CON(1);
    m->dim[1][0] = PCGC_AX_CON(0);
    m->dim[1][1] = PCGC_AX_OUT(keep);
    return PCGC_OK;
  }
  case PCGC_OP_MOE_ROUTE:
    m->dim[0][0] = PCGC_AX_OUT(0);
    return PCGC_OK;
  case PCGC_OP_MOE_DISPATCH:
    m->dim[0][0] = m->dim[1][0] = PCGC_AX_OUT(0);
    m->dim[0][2] = PCGC_AX_OUT(3);
    return PCGC_OK;
  case PCGC_OP_EXPERT_LINEAR:
    for (int d = 0; d < 3; d++) m->dim[0][d] = PCGC_AX_OUT(d);
    m->dim[0][3] = PCGC_AX_CON(0);
    m->sum[0] = PCGC_AX_SUM(0);
    m->dim[1][0] = PCGC_AX_OUT(1);
    m->dim[1][1] = PCGC_AX_CON(0);
    m->dim[1][2] = PCGC_AX_OUT(3);
    if (n_in == 3) {
      m->dim[2][0] = PCGC_AX_OUT(1);
      m->dim[2][1] = PCGC_AX_OUT(3);
    }
    return PCGC_OK;
  case PCGC_OP_MOE_COMBINE:
    /* a piece holding some experts adds only their slots */
    m->dim[0][0] = m->dim[1][0] = m->dim[2][0] = PCGC_AX_OUT(0);
    m->dim[0][1] = PCGC_AX_CON(0);
    m->dim[0][3] = PCGC_AX_OUT(2);
    m->sum[0] = PCGC_AX_SUM(0);
    return PCGC_OK;
  case PCGC_OP_ADD:
  case PCGC_OP_SUB:
  case PCGC_OP_MUL:
  case PCGC_OP_DIV:
    for (int i = 0; i < 2; i++) {
      const pcgc_ptensor *t = &in[i];
      for (int d = 0; d < t->rank; d++) {
        int j = d + (out->rank - t->rank);
        if (t->dims[d] == out->dims[j]) m->dim[i][d] = PCGC_AX_OUT(j);
      }
    }
    /* add/sub pair their partial sums one to one; mul/div let one through */
    m->sum[0] = PCGC_AX_SUM(0);
    m->sum[1] = (k == PCGC_OP_ADD || k == PCGC_OP_SUB) ? PCGC_AX_SUM(0) : PCGC_AX_SUM(1);
    return PCGC_OK;
  case PCGC_OP_CONCAT:
    for (int i = 0; i < n_in; i++) {
      same(m, i, r);
      m->sum[i] = PCGC_AX_SUM(0);
    }
    return PCGC_OK;
  case PCGC_OP_RESHAPE:
  case PCGC_OP_FLATTEN:
    reshape_map(m, x, out);
    m->sum[0] = PCGC_AX_SUM(0);
    return PCGC_OK;
  case PCGC_OP_TRANSPOSE: {
    pcgc_ints p = pcgc_attrs_ints(a, "perm");
    for (int i = 0; i < r; i++) {
      int64_t src = p.v[i] < 0 ? p.v[i] + r : p.v[i];
      m->dim[0][src] = PCGC_AX_OUT(i);
    }
    m->sum[0] = PCGC_AX_SUM(0);
    return PCGC_OK;
  }
  case PCGC_OP_REDUCE_SUM:
  case PCGC_OP_REDUCE_MEAN:
  case PCGC_OP_REDUCE_MAX: { /* reduce_max: its reduced dims are never sharded (infer.c) */
    pcgc_ints dl = pcgc_attrs_ints(a, "dims");
    bool keep = pcgc_attrs_int(a, "keepdims") != 0, red[PCGC_MAX_RANK] = {false};
    for (int i = 0; i < dl.n; i++) red[dl.v[i] < 0 ? dl.v[i] + r : dl.v[i]] = true;
    int j = 0, c = 0;
    for (int d = 0; d < r; d++) {
      if (red[d]) {
        m->dim[0][d] = PCGC_AX_CON(c++);
        if (keep) j++;
      } else {
        m->dim[0][d] = PCGC_AX_OUT(j++);
      }
    }
    m->sum[0] = PCGC_AX_SUM(0);
    return PCGC_OK;
  }
  case PCGC_OP_ATTENTION:
    for (int i = 0; i < 3; i++) m->dim[i][0] = PCGC_AX_OUT(0);
    m->dim[0][1] = PCGC_AX_OUT(1);
    for (int i = 3; i < 6; i++) m->dim[i][1] = PCGC_AX_CON(0);
    m->dim[6][0] = PCGC_AX_CON(0);
    for (int i = 7; i < 10 && i < n_in; i++) m->dim[i][0] = PCGC_AX_CON(0);
    return PCGC_OK;
  case PCGC_OP_SOFTMAX_CROSS_ENTROPY:
    for (int d = 0; d < r - 1; d++) m->dim[0][d] = m->dim[1][d] = PCGC_AX_CON(d);
    return PCGC_OK;
  case PCGC_OP_MSE:
    for (int d = 0; d < r; d++) m->dim[0][d] = m->dim[1][d] = PCGC_AX_CON(d);
    return PCGC_OK;
  default:
    if (pcgc_op_class_of(k) == PCGC_CLASS_COMPUTE && n_in == 1) {
      /* unary, dropout, split, softmax: every dim follows the output's */
      same(m, 0, r);
      m->sum[0] = PCGC_AX_SUM(0);
      return PCGC_OK;
    }
    return pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "%s: the reference interpreter has no axis map for it",
                          pcgc_op_name(k));
  }
}

/* -------------------------------------------------------- pieces */

/* p's digit of base k (and p's quotient left in *p); no division for k 1,
 * the usual degree (a search's views walk every piece's coordinates). */
static inline int64_t digit(int64_t *p, int64_t k) {
  if (k == 1) return 0;
  int64_t q = *p / k, x = *p - q * k;
  *p = q;
  return x;
}

void pcgc_piece_coords(const pcgc_ptensor *t, int64_t p, int64_t *c, int64_t *s, int64_t *r) {
  *r = digit(&p, t->replica);
  *s = digit(&p, t->sum);
  for (int d = t->rank - 1; d >= 0; d--) c[d] = digit(&p, t->degree[d]);
}

int64_t pcgc_piece_index(const pcgc_ptensor *t, const int64_t *c, int64_t s, int64_t r) {
  int64_t p = 0;
  for (int d = 0; d < t->rank; d++) p = p * t->degree[d] + c[d];
  return (p * t->sum + s) * t->replica + r;
}

pcgc_status pcgc_op_piece_inputs(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_ptensor *in,
                                 const pcgc_ptensor *o, int64_t p, int64_t *in_piece, pcgc_error *err) {
  pcgc_axmap map;
  pcgc_status st = pcgc_op_axes(k, a, n_in, in, o, &map, err);
  if (st != PCGC_OK) return st;
  int64_t deg[PCGC_AX_COUNT];
  for (int x = 0; x < PCGC_AX_COUNT; x++) deg[x] = 1;
  for (int j = 0; j < o->rank; j++) deg[PCGC_AX_OUT(j)] = o->degree[j];
  for (int i = 0; i < n_in; i++) {
    for (int d = 0; d < in[i].rank; d++) {
      int x = map.dim[i][d];
      if (x >= PCGC_AX_CON(0) && in[i].degree[d] > deg[x]) deg[x] = in[i].degree[d];
    }
    int x = map.sum[i];
    if (x != PCGC_AX_NONE && in[i].sum > deg[x]) deg[x] = in[i].sum;
  }
  int64_t oc[PCGC_MAX_RANK], os, orr, val[PCGC_AX_COUNT] = {0}, prod = 1;
  pcgc_piece_coords(o, p, oc, &os, &orr);
  for (int j = 0; j < o->rank; j++) val[PCGC_AX_OUT(j)] = oc[j];
  for (int x = PCGC_AX_COUNT - 1; x >= PCGC_AX_CON(0); x--)
    if (deg[x] > 1) {
      val[x] = os % deg[x];
      os /= deg[x];
      prod *= deg[x];
    }
  if (prod != o->sum)
    return pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "%s: the axis map gives %lld partial sums but inference "
                          "gives %d (internal error)", pcgc_op_name(k), (long long)prod, o->sum);
  for (int i = 0; i < n_in; i++) {
    const pcgc_ptensor *t = &in[i];
    bool used[PCGC_AX_COUNT] = {false};
    int64_t c[PCGC_MAX_RANK], s = 0;
    for (int d = 0; d < t->rank; d++) {
      int x = map.dim[i][d];
      c[d] = 0;
      if (x != PCGC_AX_NONE && t->degree[d] > 1) {
        c[d] = val[x];
        used[x] = true;
      }
    }
    if (map.sum[i] != PCGC_AX_NONE && t->sum > 1) {
      s = val[map.sum[i]];
      used[map.sum[i]] = true;
    }
    int64_t r = 0, span = 1;
    for (int x = 0; x < PCGC_AX_COUNT; x++)
      if (!used[x] && deg[x] > 1) {
        r = r * deg[x] + val[x];
        span *= deg[x];
      }
    r = r * o->replica + orr;
    span *= o->replica;
    if (span != t->replica)
      return pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "%s: input %d has replica degree %d but the axis map "
                            "expects %lld (internal error)", pcgc_op_name(k), i, t->replica, (long long)span);
    in_piece[i] = pcgc_piece_index(t, c, s, r);
  }
  return PCGC_OK;
}

bool pcgc_op_saves(pcgc_op_kind k) { return k == PCGC_OP_ATTENTION; }

pcgc_dtype pcgc_op_saved_dtype(pcgc_dtype out) { return out == PCGC_F64 ? PCGC_F64 : PCGC_F32; }

int64_t pcgc_op_saved_elems(pcgc_op_kind k, int n_in, const int64_t *const *in_dims) {
  if (!pcgc_op_saves(k) || n_in < 7 || !in_dims) return 0;
  int64_t B = in_dims[0][0], Sq = in_dims[0][1], Sk = in_dims[1][1], E = in_dims[3][1];
  return 2 * B * Sq * E + 2 * B * Sk * E;
}
