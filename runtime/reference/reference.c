/*
 * reference.c — the reference interpreter (see reference.h for what it is).
 *
 * Values: every node output is a `value`: its parallel type and m x P
 * buffers (P pieces, each held as m micro-batches when pipelined), laid out
 * as pieces.h describes, plus gradient buffers of the same layout.
 *
 * Parallel operators move data between layouts with one primitive,
 * `transfer`: copy (or add) the intersection of two pieces' boxes in the
 * logical tensor. Partition, combine, pipeline and unpipeline transfer every
 * overlapping pair of pieces with equal (sum, replica) index; replicate
 * copies, reduce adds groups of partial sums. Their backward is the same
 * movement in reverse, adding into the gradient.
 *
 * Ordinary operators run once per output piece (and micro-batch): the op's
 * axis map (pcgc_op_piece_inputs, pcg/axes.c) finds each input piece; the kernel gets the pieces' logical positions (pcgc_kernel_ctx).
 * Batch norm over a sharded batch adds its per-channel statistics across the
 * pieces of one channel group before normalising (synchronised batch norm).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pieces.h"
#include "reference.h"

typedef struct value {
  pcgc_ptensor t;   /* logical type */
  int m;            /* micro-batches held (1 unless pipelined) */
  int64_t P;        /* pieces */
  pcgc_buf *b;      /* [m * P]: piece p of micro-batch mu at mu * P + p */
  pcgc_buf *g;      /* gradients, same layout; NULL for integer tensors */
} value;

struct pcgc_reference {
  const pcgc_graph *g;
  pcgc_ref_options o;
  int *order;
  value **val;      /* val[node][slot] */
  int loss;
  double aux_loss;  /* this forward's moe_route balancing terms (pcgc_cpu_moe_aux_loss) */
  pcgc_buf *opt_m, *opt_v; /* per node, for weights */
  int64_t step;
  bool have_forward, have_backward;
};

void pcgc_ref_options_default(pcgc_ref_options *o) {
  memset(o, 0, sizeof *o);
  o->dtype = PCGC_F32;
  o->seed = 1;
  o->training = true;
  pcgc_optimizer_default(&o->opt, PCGC_SGD);
}

/* ------------------------------------------------------------- layout */

static int64_t local_dim(const value *v, int d) {
  int64_t n = v->t.dims[d] / v->t.degree[d];
  if (v->m > 1 && d == v->t.micro_dim) n /= v->m;
  return n;
}

static pcgc_piece piece_of(const value *v, int64_t p, int mu) {
  pcgc_piece q;
  memset(&q, 0, sizeof q);
  int64_t c[PCGC_MAX_RANK], s, r;
  pcgc_piece_coords(&v->t, p, c, &s, &r);
  for (int d = 0; d < v->t.rank; d++) {
    q.global[d] = v->t.dims[d];
    q.offset[d] = c[d] * (v->t.dims[d] / v->t.degree[d]);
    if (v->m > 1 && d == v->t.micro_dim) q.offset[d] += mu * local_dim(v, d);
  }
  return q;
}

static bool is_float(pcgc_dtype t) { return pcgc_dtype_is_float(t); }

static pcgc_status value_alloc(value *v, const pcgc_ptensor *t, pcgc_dtype storage, pcgc_error *err) {
  v->t = *t;
  v->m = t->micro > 1 ? t->micro : 1;
  v->P = pcgc_ptensor_pieces(t);
  int64_t n = v->m * v->P;
  v->b = calloc((size_t)n, sizeof *v->b);
  v->g = is_float(storage) ? calloc((size_t)n, sizeof *v->g) : NULL;
  if (!v->b || (is_float(storage) && !v->g)) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  for (int64_t i = 0; i < n; i++) {
    pcgc_buf *b = &v->b[i];
    b->dtype = storage;
    b->rank = t->rank;
    for (int d = 0; d < t->rank; d++) b->dims[d] = local_dim(v, d);
    size_t bytes = (size_t)pcgc_buf_numel(b) * pcgc_dtype_size(storage);
    b->data = calloc(bytes ? bytes : 1, 1);
    if (!b->data) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory allocating a %zu-byte piece", bytes);
    if (v->g) {
      v->g[i] = *b;
      v->g[i].data = calloc(bytes ? bytes : 1, 1);
      if (!v->g[i].data) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    }
  }
  return PCGC_OK;
}

static void value_free(value *v) {
  if (!v) return;
  int64_t n = v->m * v->P;
  for (int64_t i = 0; v->b && i < n; i++) free(v->b[i].data);
  for (int64_t i = 0; v->g && i < n; i++) free(v->g[i].data);
  free(v->b);
  free(v->g);
}

static void zero(pcgc_buf *b) {
  memset(b->data, 0, (size_t)pcgc_buf_numel(b) * pcgc_dtype_size(b->dtype));
}

static double get_elem(const pcgc_buf *b, int64_t i) {
  switch (b->dtype) {
  case PCGC_F32: return ((const float *)b->data)[i];
  case PCGC_F64: return ((const double *)b->data)[i];
  case PCGC_I32: return ((const int32_t *)b->data)[i];
  case PCGC_I64: return (double)((const int64_t *)b->data)[i];
  default: return 0;
  }
}

static void set_elem(pcgc_buf *b, int64_t i, double x) {
  switch (b->dtype) {
  case PCGC_F32: ((float *)b->data)[i] = (float)x; break;
  case PCGC_F64: ((double *)b->data)[i] = x; break;
  case PCGC_I32: ((int32_t *)b->data)[i] = (int32_t)x; break;
  case PCGC_I64: ((int64_t *)b->data)[i] = (int64_t)x; break;
  default: break;
  }
}

/* One row of a transfer: n elements from src[si..] into dst[di..], copied
 * or added. Same-type rows are copied or added in their type (a float sum
 * rounded once from double, as the element-wise path does). */
static void transfer_row(pcgc_buf *dst, int64_t di, const pcgc_buf *src, int64_t si, int64_t n, bool add) {
  if (dst->dtype == src->dtype && dst->dtype == PCGC_F32) {
    float *d = (float *)dst->data + di;
    const float *s = (const float *)src->data + si;
    if (!add) memcpy(d, s, (size_t)n * sizeof *d);
    else
      for (int64_t i = 0; i < n; i++) d[i] = (float)((double)d[i] + (double)s[i]);
    return;
  }
  if (dst->dtype == src->dtype && dst->dtype == PCGC_F64) {
    double *d = (double *)dst->data + di;
    const double *s = (const double *)src->data + si;
    if (!add) memcpy(d, s, (size_t)n * sizeof *d);
    else
      for (int64_t i = 0; i < n; i++) d[i] += s[i];
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    double x = get_elem(src, si + i);
    set_elem(dst, di + i, add ? get_elem(dst, di + i) + x : x);
  }
}

/* Copies (add=false) or adds (add=true) the part of src that overlaps dst,
 * both given with their positions in the same logical tensor: row by row
 * along the last dim. */
static void transfer(pcgc_buf *dst, const pcgc_piece *dp, const pcgc_buf *src, const pcgc_piece *sp, bool add) {
  int r = dst->rank;
  int64_t lo[PCGC_MAX_RANK] = {0}, len[PCGC_MAX_RANK] = {0};
  for (int d = 0; d < r; d++) {
    int64_t a = dp->offset[d] > sp->offset[d] ? dp->offset[d] : sp->offset[d];
    int64_t e1 = dp->offset[d] + dst->dims[d], e2 = sp->offset[d] + src->dims[d];
    int64_t b = e1 < e2 ? e1 : e2;
    if (b <= a) return;
    lo[d] = a;
    len[d] = b - a;
  }
  if (r == 0) {
    transfer_row(dst, 0, src, 0, 1, add);
    return;
  }
  int64_t idx[PCGC_MAX_RANK] = {0}, rows = 1, row = len[r - 1];
  for (int d = 0; d < r - 1; d++) rows *= len[d];
  for (int64_t n = 0; n < rows; n++) {
    int64_t di = 0, si = 0;
    for (int d = 0; d < r; d++) {
      di = di * dst->dims[d] + (lo[d] + idx[d] - dp->offset[d]);
      si = si * src->dims[d] + (lo[d] + idx[d] - sp->offset[d]);
    }
    transfer_row(dst, di, src, si, row, add);
    for (int d = r - 2; d >= 0; d--) {
      if (++idx[d] < len[d]) break;
      idx[d] = 0;
    }
  }
}

/* --------------------------------------------------- parallel operators */

/* Moves data between two layouts of the same logical tensor: every piece
 * of `to` receives the overlapping parts of the pieces of `from` with the
 * same sum and replica index. backward: from the gradient of `to` into the
 * gradient of `from`. */
static void relayout(value *from, value *to, bool backward) {
  for (int64_t i = 0; i < to->m * to->P; i++) {
    int mu_t = (int)(i / to->P);
    int64_t pt = i % to->P, ct[PCGC_MAX_RANK], st, rt;
    pcgc_piece_coords(&to->t, pt, ct, &st, &rt);
    pcgc_piece qt = piece_of(to, pt, mu_t);
    for (int64_t j = 0; j < from->m * from->P; j++) {
      int mu_f = (int)(j / from->P);
      int64_t pf = j % from->P, cf[PCGC_MAX_RANK], sf, rf;
      pcgc_piece_coords(&from->t, pf, cf, &sf, &rf);
      if (sf != st || rf != rt) continue;
      pcgc_piece qf = piece_of(from, pf, mu_f);
      if (backward) transfer(&from->g[j], &qf, &to->g[i], &qt, true);
      else transfer(&to->b[i], &qt, &from->b[j], &qf, false);
    }
  }
}

static pcgc_status run_parallel(const pcgc_node *n, value *x, value *y, bool backward) {
  int64_t d = pcgc_attrs_int(n->attrs, "degree");
  switch (n->kind) {
  case PCGC_OP_PARTITION:
  case PCGC_OP_COMBINE:
  case PCGC_OP_PIPELINE:
  case PCGC_OP_UNPIPELINE:
    relayout(x, y, backward);
    return PCGC_OK;
  case PCGC_OP_REPLICATE:
  case PCGC_OP_REDUCE: {
    bool rep = n->kind == PCGC_OP_REPLICATE;
    /* replicate: output copy r' comes from input copy r'/d.
     * reduce: output partial sum s' adds input partial sums s'*d .. s'*d+d-1. */
    for (int mu = 0; mu < y->m; mu++)
      for (int64_t p = 0; p < y->P; p++) {
        int64_t c[PCGC_MAX_RANK], s, r;
        pcgc_piece_coords(&y->t, p, c, &s, &r);
        pcgc_piece q = piece_of(y, p, mu);
        pcgc_buf *yb = &y->b[mu * y->P + p], *yg = y->g ? &y->g[mu * y->P + p] : NULL;
        if (!backward && !rep) zero(yb);
        for (int64_t j = 0; j < (rep ? 1 : d); j++) {
          int64_t src = rep ? pcgc_piece_index(&x->t, c, s, r / d) : pcgc_piece_index(&x->t, c, s * d + j, r);
          pcgc_buf *xb = &x->b[mu * x->P + src], *xg = x->g ? &x->g[mu * x->P + src] : NULL;
          if (!backward) transfer(yb, &q, xb, &q, !rep);
          else if (xg && yg) transfer(xg, &q, yg, &q, true);
        }
      }
    return PCGC_OK;
  }
  default:
    return PCGC_ERR_UNSUPPORTED;
  }
}

/* ------------------------------------------------- ordinary operators */

static const value *input_value(const pcgc_reference *R, const pcgc_node *n, int i) {
  return &R->val[n->in[i].node][n->in[i].slot];
}

/* Kernel arguments of one grid point: input/output buffers and pieces. */
typedef struct call {
  pcgc_buf in[PCGC_VARIADIC], din[PCGC_VARIADIC], out[PCGC_MAX_INTS], dout[PCGC_MAX_INTS];
  pcgc_piece pin[PCGC_VARIADIC], pout[PCGC_MAX_INTS];
  pcgc_attrs attrs;
  pcgc_kernel_ctx ctx;
} call;

static void call_setup(pcgc_reference *R, const pcgc_node *n, const pcgc_ptensor *tin, const int64_t *in_piece,
                       int64_t p, int mu, call *c) {
  for (int i = 0; i < n->n_in; i++) {
    const value *v = input_value(R, n, i);
    int vm = v->m > 1 ? mu : 0;
    c->in[i] = v->b[vm * v->P + in_piece[i]];
    c->din[i] = v->g ? v->g[vm * v->P + in_piece[i]] : c->in[i];
    if (!v->g) c->din[i].data = NULL;
    c->pin[i] = piece_of(v, in_piece[i], vm);
  }
  for (int j = 0; j < n->n_out; j++) {
    value *v = &R->val[n->id][j];
    int vm = v->m > 1 ? mu : 0;
    c->out[j] = v->b[vm * v->P + p];
    c->dout[j] = v->g ? v->g[vm * v->P + p] : c->out[j];
    c->pout[j] = piece_of(v, p, vm);
  }
  c->attrs = *n->attrs;
  pcgc__localize(n->kind, &c->attrs, tin, n->n_in, c->in, n->n_out, c->out);
  c->ctx.in = c->pin;
  c->ctx.out = c->pout;
  c->ctx.seed = R->o.seed;
  c->ctx.node = pcgc_rng_stream(n->name);
  c->ctx.training = R->o.training;
  c->ctx.saved = NULL; /* backward computes again what forward would keep */
  c->ctx.saved_bytes = 0;
}

static int op_micro(const pcgc_reference *R, const pcgc_node *n) {
  int m = 1;
  for (int i = 0; i < n->n_in; i++)
    if (input_value(R, n, i)->m > m) m = input_value(R, n, i)->m;
  return m;
}

/* Channel group of a batch-norm piece: pieces that hold the same channels
 * (and are the same replica) normalise with shared statistics. */
static int64_t bn_group(const pcgc_ptensor *o, int64_t p) {
  int64_t c[PCGC_MAX_RANK], s, r;
  pcgc_piece_coords(o, p, c, &s, &r);
  return c[1] * o->replica + r;
}

static bool bn_sharded(const pcgc_node *n) {
  const pcgc_ptensor *o = &n->out[0];
  for (int d = 0; d < o->rank; d++)
    if (d != 1 && o->degree[d] > 1) return true;
  return false;
}

static pcgc_status run_batchnorm(pcgc_reference *R, const pcgc_node *n, const pcgc_ptensor *tin, bool backward,
                                 pcgc_error *err) {
  const pcgc_ptensor *o = &n->out[0];
  int64_t P = pcgc_ptensor_pieces(o), groups = (int64_t)o->degree[1] * o->replica;
  int64_t C = o->dims[1] / o->degree[1];
  double count = (double)pcgc_ptensor_numel(o) / (double)o->dims[1];
  double *sum = calloc((size_t)(groups * C * 4), sizeof *sum);
  call *c = malloc(sizeof *c);
  if (!sum || !c) {
    free(sum);
    free(c);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  }
  double *sumsq = sum + groups * C, *dsum = sumsq + groups * C, *dxsum = dsum + groups * C;
  pcgc_status st = PCGC_OK;
  int64_t in_piece[PCGC_VARIADIC];
  double tmp1[4096], tmp2[4096];
  if (C > 4096) st = pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "batchnorm '%s': more than 4096 channels per piece", n->name);
  for (int pass = 0; st == PCGC_OK && pass < (backward ? 3 : 2); pass++)
    for (int64_t p = 0; st == PCGC_OK && p < P; p++) {
      st = pcgc_op_piece_inputs(n->kind, n->attrs, n->n_in, tin, &n->out[0], p, in_piece, err);
      if (st != PCGC_OK) break;
      call_setup(R, n, tin, in_piece, p, 0, c);
      int64_t g = bn_group(o, p);
      double *S = sum + g * C, *Q = sumsq + g * C, *DS = dsum + g * C, *DX = dxsum + g * C;
      const pcgc_buf *scale = n->n_in == 3 ? &c->in[1] : NULL, *bias = n->n_in == 3 ? &c->in[2] : NULL;
      if (pass == 0) {
        pcgc_cpu_batchnorm_stats(&c->in[0], tmp1, tmp2);
        for (int64_t k = 0; k < C; k++) {
          S[k] += tmp1[k];
          Q[k] += tmp2[k];
        }
      } else if (pass == 1 && !backward) {
        pcgc_cpu_batchnorm_apply(n->attrs, &c->in[0], scale, bias, S, Q, count, &c->out[0]);
      } else if (pass == 1) {
        pcgc_cpu_batchnorm_bwd_stats(n->attrs, &c->in[0], scale, bias, &c->dout[0], S, Q, count, tmp1, tmp2);
        for (int64_t k = 0; k < C; k++) {
          DS[k] += tmp1[k];
          DX[k] += tmp2[k];
        }
      } else {
        pcgc_cpu_batchnorm_bwd_apply(n->attrs, &c->in[0], scale, bias, &c->dout[0], S, Q, count, DS, DX,
                                     &c->din[0], n->n_in == 3 ? &c->din[1] : NULL,
                                     n->n_in == 3 ? &c->din[2] : NULL);
      }
    }
  free(sum);
  free(c);
  return st;
}

static pcgc_status run_ordinary(pcgc_reference *R, const pcgc_node *n, bool backward, pcgc_error *err) {
  pcgc_ptensor tin[PCGC_VARIADIC];
  for (int i = 0; i < n->n_in; i++) tin[i] = input_value(R, n, i)->t;
  pcgc_status st = PCGC_OK;
  if (n->kind == PCGC_OP_BATCHNORM && bn_sharded(n)) return run_batchnorm(R, n, tin, backward, err);
  int64_t P = pcgc_ptensor_pieces(&n->out[0]), in_piece[PCGC_VARIADIC];
  int m = op_micro(R, n);
  call *c = malloc(sizeof *c);
  if (!c) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  for (int mu = 0; st == PCGC_OK && mu < m; mu++)
    for (int64_t p = 0; st == PCGC_OK && p < P; p++) {
      st = pcgc_op_piece_inputs(n->kind, n->attrs, n->n_in, tin, &n->out[0], p, in_piece, err);
      if (st != PCGC_OK) break;
      call_setup(R, n, tin, in_piece, p, mu, c);
      if (!backward) {
        st = pcgc_cpu_forward(n->kind, &c->attrs, n->n_in, c->in, n->n_out, c->out, &c->ctx, err);
        int64_t oc[PCGC_MAX_RANK], os, orr;
        pcgc_piece_coords(&n->out[0], p, oc, &os, &orr);
        if (st == PCGC_OK && n->kind == PCGC_OP_MOE_ROUTE && orr == 0 && os == 0) /* once per group */
          R->aux_loss += pcgc_cpu_moe_aux_loss(&c->in[0], pcgc_attrs_int(n->attrs, "k"),
                                               pcgc_attrs_float(n->attrs, "aux"), tin[0].dims[0]);
      } else
        st = pcgc_cpu_backward(n->kind, &c->attrs, n->n_in, c->in, n->n_out, c->out, c->dout, c->din,
                               &c->ctx, err);
    }
  free(c);
  if (st != PCGC_OK && err && !strstr(err->message, n->name)) {
    char tmp[sizeof err->message];
    snprintf(tmp, sizeof tmp, "%s '%.200s': %.800s", pcgc_op_name(n->kind), n->name, err->message);
    memcpy(err->message, tmp, sizeof tmp);
  }
  return st;
}

/* -------------------------------------------------------------- setup */

/* Bound of synthetic integer data: the rows of the table or the classes of
 * the loss it feeds (following parallel operators). */
int64_t pcgc_ref_data_bound(const pcgc_graph *g, int node) {
  for (int i = 0; i < g->n_nodes; i++) {
    const pcgc_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++) {
      if (n->in[k].node != node) continue;
      if (pcgc_op_class_of(n->kind) == PCGC_CLASS_PARALLEL) {
        int64_t b = pcgc_ref_data_bound(g, i);
        if (b > 0) return b;
      } else if (n->kind == PCGC_OP_EMBEDDING && k == 0) {
        return pcgc_graph_ref_type(g, n->in[1])->dims[0];
      } else if (n->kind == PCGC_OP_SOFTMAX_CROSS_ENTROPY && k == 1) {
        const pcgc_ptensor *t = pcgc_graph_ref_type(g, n->in[0]);
        return t->dims[t->rank - 1];
      }
    }
  }
  return 0;
}

void pcgc_ref_free(pcgc_reference *r) {
  if (!r) return;
  if (r->val)
    for (int i = 0; i < r->g->n_nodes; i++) {
      if (!r->val[i]) continue;
      for (int k = 0; k < r->g->nodes[i].n_out; k++) value_free(&r->val[i][k]);
      free(r->val[i]);
    }
  if (r->opt_m)
    for (int i = 0; i < r->g->n_nodes; i++) {
      free(r->opt_m[i].data);
      free(r->opt_v[i].data);
    }
  free(r->opt_m);
  free(r->opt_v);
  free(r->val);
  free(r->order);
  free(r);
}

pcgc_reference *pcgc_ref_new(const pcgc_graph *g, const pcgc_ref_options *o, pcgc_error *err) {
  pcgc_reference *r = calloc(1, sizeof *r);
  if (!r) {
    pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    return NULL;
  }
  r->g = g;
  if (o) r->o = *o;
  else pcgc_ref_options_default(&r->o);
  if (r->o.dtype != PCGC_F32 && r->o.dtype != PCGC_F64) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "the reference interpreter computes in f32 or f64, not %s",
                   pcgc_dtype_name(r->o.dtype));
    goto fail;
  }
  r->loss = -1;
  r->order = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *r->order);
  r->val = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *r->val);
  r->opt_m = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *r->opt_m);
  r->opt_v = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *r->opt_v);
  if (!r->order || !r->val || !r->opt_m || !r->opt_v) {
    pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    goto fail;
  }
  if (pcgc_graph_topo_order(g, r->order, err) != PCGC_OK) goto fail;
  for (int i = 0; i < g->n_nodes; i++) {
    const pcgc_node *n = &g->nodes[i];
    if (!n->typed) {
      pcgc_error_set(err, PCGC_ERR_TYPE, "%s '%s' has no type: infer the graph first", pcgc_op_name(n->kind), n->name);
      goto fail;
    }
    if (pcgc_op_class_of(n->kind) == PCGC_CLASS_LOSS) {
      if (r->loss >= 0) {
        pcgc_error_set(err, PCGC_ERR_INVALID, "the graph has two losses, '%s' and '%s'; training needs exactly one",
                       g->nodes[r->loss].name, n->name);
        pcgc_error_hint(err, "add them into one scalar, or remove one");
        goto fail;
      }
      r->loss = i;
    }
    r->val[i] = calloc((size_t)n->n_out, sizeof **r->val);
    if (!r->val[i]) {
      pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
      goto fail;
    }
    for (int k = 0; k < n->n_out; k++) {
      pcgc_dtype st = is_float(n->out[k].dtype) ? r->o.dtype : n->out[k].dtype;
      if (value_alloc(&r->val[i][k], &n->out[k], st, err) != PCGC_OK) goto fail;
    }
    value *v = &r->val[i][0];
    uint64_t stream = pcgc_rng_stream(n->name);
    if (n->kind == PCGC_OP_WEIGHT) {
      if (n->value) { /* imported with values */
        pcgc_buf src = {PCGC_F32, 0, {0}, n->value};
        for (int64_t e = 0; e < pcgc_buf_numel(&v->b[0]); e++) set_elem(&v->b[0], e, get_elem(&src, e));
      } else {
        pcgc_cpu_init_weight(&v->b[0], (pcgc_init)pcgc_attrs_int(n->attrs, "init"),
                             pcgc_attrs_float(n->attrs, "scale"), r->o.seed, stream, NULL);
      }
      for (int b = 0; b < 2; b++) {
        pcgc_buf *s = b ? &r->opt_v[i] : &r->opt_m[i];
        *s = v->b[0];
        size_t bytes = (size_t)pcgc_buf_numel(s) * pcgc_dtype_size(s->dtype);
        if (!(s->data = calloc(bytes ? bytes : 1, 1))) {
          pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
          goto fail;
        }
      }
    } else if (n->kind == PCGC_OP_INPUT) {
      pcgc_cpu_fill_random(&v->b[0], is_float(n->out[0].dtype) ? 0 : pcgc_ref_data_bound(g, i), r->o.seed, stream, NULL);
    }
  }
  if (r->loss < 0 && !r->o.allow_no_loss) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "the graph has no loss; training needs one");
    pcgc_error_hint(err, "end the model with softmax_cross_entropy(...) or mse(...)");
    goto fail;
  }
  return r;
fail:
  pcgc_ref_free(r);
  return NULL;
}

int pcgc_ref_loss_node(const pcgc_reference *r) { return r->loss; }

/* ------------------------------------------------------------- running */

static bool all_finite(const value *v) {
  if (!is_float(v->b[0].dtype)) return true;
  for (int64_t i = 0; i < v->m * v->P; i++) {
    int64_t n = pcgc_buf_numel(&v->b[i]);
    for (int64_t e = 0; e < n; e++)
      if (!isfinite(get_elem(&v->b[i], e))) return false;
  }
  return true;
}

pcgc_status pcgc_ref_forward(pcgc_reference *r, double *loss, pcgc_error *err) {
  const pcgc_graph *g = r->g;
  r->aux_loss = 0;
  for (int k = 0; k < g->n_nodes; k++) {
    const pcgc_node *n = &g->nodes[r->order[k]];
    pcgc_op_class cls = pcgc_op_class_of(n->kind);
    pcgc_status st = PCGC_OK;
    if (cls == PCGC_CLASS_SOURCE) continue;
    if (cls == PCGC_CLASS_PARALLEL) {
      value *x = (value *)input_value(r, n, 0);
      st = run_parallel(n, x, &r->val[n->id][0], false);
    } else {
      st = run_ordinary(r, n, false, err);
    }
    if (st != PCGC_OK) return st;
    for (int j = 0; j < n->n_out && n->kind != PCGC_OP_CAUSAL_MASK; j++) /* its -inf is the point */
      if (!all_finite(&r->val[n->id][j])) {
        pcgc_error_set(err, PCGC_ERR_INVALID, "%s '%s' produced NaN or Inf; the loss cannot be computed",
                       pcgc_op_name(n->kind), n->name);
        pcgc_error_hint(err, "check its inputs and attributes, or lower the learning rate if training diverged");
        return PCGC_ERR_INVALID;
      }
  }
  double total = r->aux_loss; /* the balancing terms of mixture-of-experts routers, then the loss */
  const value *lv = r->loss >= 0 ? &r->val[r->loss][0] : NULL;
  for (int64_t i = 0; lv && i < lv->m * lv->P; i++) {
    int64_t c[PCGC_MAX_RANK], s, rr;
    pcgc_piece_coords(&lv->t, i % lv->P, c, &s, &rr);
    if (rr == 0) total += get_elem(&lv->b[i], 0);
  }
  if (loss) *loss = total;
  r->have_forward = true;
  r->have_backward = false;
  return PCGC_OK;
}

static void zero_grads(pcgc_reference *r) {
  const pcgc_graph *g = r->g;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_out; k++) {
      value *v = &r->val[i][k];
      for (int64_t j = 0; v->g && j < v->m * v->P; j++) zero(&v->g[j]);
    }
}

/* Every node's backward, in reverse topological order, from the seeded gradients. */
static pcgc_status run_backward(pcgc_reference *r, pcgc_error *err) {
  const pcgc_graph *g = r->g;
  for (int k = g->n_nodes - 1; k >= 0; k--) {
    const pcgc_node *n = &g->nodes[r->order[k]];
    pcgc_op_class cls = pcgc_op_class_of(n->kind);
    pcgc_status st = PCGC_OK;
    if (cls == PCGC_CLASS_SOURCE) continue;
    if (cls == PCGC_CLASS_PARALLEL) {
      value *x = (value *)input_value(r, n, 0);
      if (x->g) st = run_parallel(n, x, &r->val[n->id][0], true);
    } else {
      st = run_ordinary(r, n, true, err);
    }
    if (st != PCGC_OK) return st;
  }
  r->have_backward = true;
  return PCGC_OK;
}

pcgc_status pcgc_ref_backward(pcgc_reference *r, pcgc_error *err) {
  if (!r->have_forward) return pcgc_error_set(err, PCGC_ERR_INVALID, "backward needs a forward pass first");
  if (r->loss < 0)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "the graph has no loss: use pcgc_ref_backward_from");
  zero_grads(r);
  value *lv = &r->val[r->loss][0];
  for (int64_t i = 0; i < lv->m * lv->P; i++) {
    int64_t c[PCGC_MAX_RANK], s, rr;
    pcgc_piece_coords(&lv->t, i % lv->P, c, &s, &rr);
    set_elem(&lv->g[i], 0, rr == 0 ? 1.0 : 0.0); /* d loss / d (partial sum) = 1, once */
  }
  return run_backward(r, err);
}

static value *find_value(pcgc_reference *r, const char *name, pcgc_error *err);

pcgc_status pcgc_ref_backward_from(pcgc_reference *r, int n, const char *const *names, pcgc_dtype dtype,
                                   const void *const *grads, pcgc_error *err) {
  if (!r->have_forward) return pcgc_error_set(err, PCGC_ERR_INVALID, "backward needs a forward pass first");
  zero_grads(r);
  for (int k = 0; k < n; k++) {
    value *v = find_value(r, names[k], err);
    if (!v) return err ? err->status : PCGC_ERR_INVALID;
    if (!v->g) return pcgc_error_set(err, PCGC_ERR_INVALID, "'%s' is an integer tensor: it has no gradient", names[k]);
    /* the whole logical gradient, placed as the pieces hold it: every
     * partial sum gets all of its region (the loss depends on their sum),
     * replica 0 gets it and the other copies nothing (their gradients add up
     * in replicate's backward), micro-batches their slices */
    pcgc_buf whole = {dtype, v->t.rank, {0}, (void *)grads[k]};
    pcgc_piece wp;
    memset(&wp, 0, sizeof wp);
    for (int d = 0; d < v->t.rank; d++) whole.dims[d] = wp.global[d] = v->t.dims[d];
    for (int64_t i = 0; i < v->m * v->P; i++) {
      int64_t p = i % v->P, c[PCGC_MAX_RANK], s, rr;
      pcgc_piece_coords(&v->t, p, c, &s, &rr);
      if (rr != 0) continue;
      pcgc_piece q = piece_of(v, p, (int)(i / v->P));
      transfer(&v->g[i], &q, &whole, &wp, false);
    }
  }
  return run_backward(r, err);
}

pcgc_status pcgc_ref_update(pcgc_reference *r, pcgc_error *err) {
  if (!r->have_backward) return pcgc_error_set(err, PCGC_ERR_INVALID, "an update needs a backward pass first");
  r->step++;
  for (int i = 0; i < r->g->n_nodes; i++) {
    if (r->g->nodes[i].kind != PCGC_OP_WEIGHT) continue;
    value *v = &r->val[i][0];
    pcgc_status st = pcgc_cpu_optimizer_step(&r->o.opt, &v->b[0], &v->g[0], &r->opt_m[i], &r->opt_v[i], r->step, err);
    if (st != PCGC_OK) return st;
  }
  r->have_backward = false;
  return PCGC_OK;
}

pcgc_status pcgc_ref_train_step(pcgc_reference *r, double *loss, pcgc_error *err) {
  pcgc_status st = pcgc_ref_forward(r, loss, err);
  if (st == PCGC_OK) st = pcgc_ref_backward(r, err);
  if (st == PCGC_OK) st = pcgc_ref_update(r, err);
  return st;
}

/* ------------------------------------------------------- set and get */

static value *find_value(pcgc_reference *r, const char *name, pcgc_error *err) {
  int id = pcgc_graph_find(r->g, name);
  if (id >= 0) return &r->val[id][0];
  for (int i = 0; i < r->g->n_nodes; i++)
    for (int k = 1; k < r->g->nodes[i].n_out; k++)
      if (strcmp(r->g->nodes[i].out_names[k], name) == 0) return &r->val[i][k];
  pcgc_error_set(err, PCGC_ERR_INVALID, "no tensor named '%s' in the graph", name);
  return NULL;
}

static pcgc_status gather(value *v, bool grad, pcgc_dtype dtype, void *data, int64_t n, const char *name,
                          pcgc_error *err) {
  int64_t numel = pcgc_ptensor_numel(&v->t);
  if (n != numel)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "'%s' has %lld elements, not %lld", name, (long long)numel,
                          (long long)n);
  if (grad && !v->g) return pcgc_error_set(err, PCGC_ERR_INVALID, "'%s' is an integer tensor: it has no gradient", name);
  pcgc_buf whole = {PCGC_F64, v->t.rank, {0}, calloc((size_t)(numel ? numel : 1), sizeof(double))};
  if (!whole.data) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  pcgc_piece wp;
  memset(&wp, 0, sizeof wp);
  for (int d = 0; d < v->t.rank; d++) whole.dims[d] = wp.global[d] = v->t.dims[d];
  for (int64_t i = 0; i < v->m * v->P; i++) {
    int64_t p = i % v->P, c[PCGC_MAX_RANK], s, rr;
    pcgc_piece_coords(&v->t, p, c, &s, &rr);
    if (rr != 0) continue;
    pcgc_piece q = piece_of(v, p, (int)(i / v->P));
    transfer(&whole, &wp, grad ? &v->g[i] : &v->b[i], &q, true);
  }
  pcgc_buf out = {dtype, v->t.rank, {0}, data};
  memcpy(out.dims, whole.dims, sizeof out.dims);
  for (int64_t e = 0; e < numel; e++) set_elem(&out, e, get_elem(&whole, e));
  free(whole.data);
  return PCGC_OK;
}

pcgc_status pcgc_ref_get(pcgc_reference *r, const char *name, pcgc_dtype dtype, void *data, int64_t n, pcgc_error *err) {
  value *v = find_value(r, name, err);
  return v ? gather(v, false, dtype, data, n, name, err) : PCGC_ERR_INVALID;
}

pcgc_status pcgc_ref_get_grad(pcgc_reference *r, const char *name, pcgc_dtype dtype, void *data, int64_t n,
                              pcgc_error *err) {
  value *v = find_value(r, name, err);
  if (!v) return PCGC_ERR_INVALID;
  if (!r->have_backward && r->step == 0)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "no gradients yet: run backward first");
  return gather(v, true, dtype, data, n, name, err);
}

pcgc_status pcgc_ref_set(pcgc_reference *r, const char *name, pcgc_dtype dtype, const void *data, int64_t n,
                         pcgc_error *err) {
  int id = pcgc_graph_find(r->g, name);
  if (id < 0) return pcgc_error_set(err, PCGC_ERR_INVALID, "no tensor named '%s' in the graph", name);
  if (pcgc_op_class_of(r->g->nodes[id].kind) != PCGC_CLASS_SOURCE)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "'%s' is computed by %s; only inputs and weights can be set", name,
                          pcgc_op_name(r->g->nodes[id].kind));
  value *v = &r->val[id][0];
  int64_t numel = pcgc_ptensor_numel(&v->t);
  if (n != numel)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "'%s' has %lld elements, not %lld", name, (long long)numel,
                          (long long)n);
  pcgc_buf src = {dtype, 0, {0}, (void *)data};
  for (int64_t e = 0; e < numel; e++) set_elem(&v->b[0], e, get_elem(&src, e));
  r->have_forward = r->have_backward = false;
  return PCGC_OK;
}

void pcgc_ref_localize(pcgc_op_kind k, pcgc_attrs *a, const pcgc_ptensor *in_t, int n_in, const pcgc_buf *in, int n_out,
                       const pcgc_buf *out) {
  pcgc__localize(k, a, in_t, n_in, in, n_out, out);
}
