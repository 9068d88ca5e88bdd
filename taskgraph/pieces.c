/*
 * pieces.c — which pieces each piece of an iteration reads (taskgraph.h):
 * resident nodes, the closed-form piece map of ordinary ops, every read of
 * a node, and the cells a relayout moves.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "taskgraph.h"

/* ------------------------------------------------------------- boxes */

pcgc_dtype pcgc_value_dtype(const pcgc_graph *g, int node, int slot, bool bf16) {
  const pcgc_node *n = &g->nodes[node];
  pcgc_dtype t = n->out[slot].dtype;
  if (!bf16 || !pcgc_dtype_is_float(t)) return pcgc_stored_dtype(t);
  while (pcgc_op_class_of(n->kind) == PCGC_CLASS_PARALLEL && n->n_in > 0) n = &g->nodes[n->in[0].node];
  pcgc_op_class c = pcgc_op_class_of(n->kind);
  return c == PCGC_CLASS_SOURCE || c == PCGC_CLASS_LOSS ? pcgc_stored_dtype(t) : PCGC_BF16;
}

double pcgc_value_scale(const pcgc_graph *g, int node, int slot, bool bf16) {
  pcgc_dtype t = g->nodes[node].out[slot].dtype;
  return (double)pcgc_dtype_size(pcgc_value_dtype(g, node, slot, bf16)) / (double)pcgc_dtype_size(t);
}

void pcgc_piece_box(const pcgc_ptensor *t, int64_t q, int mu, pcgc_box *b) {
  int64_t c[PCGC_MAX_RANK], s, r;
  pcgc_piece_coords(t, q, c, &s, &r);
  int m = t->micro > 1 ? t->micro : 1;
  b->rank = t->rank;
  for (int d = 0; d < t->rank; d++) {
    int64_t len = t->dims[d] / t->degree[d];
    int64_t lo = c[d] * len;
    if (m > 1 && d == t->micro_dim) {
      len /= m;
      lo += mu * len;
    }
    b->lo[d] = lo;
    b->len[d] = len;
  }
}

bool pcgc_bn_synced(const pcgc_node *n) {
  if (n->kind != PCGC_OP_BATCHNORM) return false;
  const pcgc_ptensor *o = &n->out[0];
  for (int d = 0; d < o->rank; d++)
    if (d != 1 && o->degree[d] > 1) return true;
  return false;
}

int64_t pcgc_bn_group(const pcgc_ptensor *o, int64_t p) {
  int64_t c[PCGC_MAX_RANK], s, r;
  pcgc_piece_coords(o, p, c, &s, &r);
  return c[1] * o->replica + r;
}

/* ---------------------------------------------------------- resident */

void pcgc_resident_nodes(const pcgc_graph *g, const int *order, bool *res) {
  for (int k = 0; k < g->n_nodes; k++) {
    const pcgc_node *n = &g->nodes[order[k]];
    pcgc_op_class c = pcgc_op_class_of(n->kind);
    res[n->id] = c == PCGC_CLASS_SOURCE || (c == PCGC_CLASS_PARALLEL && res[n->in[0].node]);
  }
}

/* The piece-to-piece map of an ordinary op in closed form. By pcg.h's axis
 * maps, the input piece that output piece p = (c, s, r) reads is linear in
 * the shard coordinates c and the replica index r, plus a term of the sum
 * index s alone (the sum index splits over contraction and sum axes):
 *     in_piece(p) = sum_j c_j W[j] + G[s] + r
 * so rank + sum calls of pcgc_op_piece_inputs give every piece. The form is
 * checked against the direct call on the corner pieces (tests compare every
 * piece); small ops, and any disagreement, use one call per piece. */
bool pcgc_piece_map_build(pcgc_piece_map *pm, const pcgc_node *n, const pcgc_ptensor *tin, bool always) {
  const pcgc_ptensor *o = &n->out[0];
  int ni = n->n_in, rank = o->rank;
  int64_t P = pcgc_ptensor_pieces(o), calls = rank + o->sum + 2, c[PCGC_MAX_RANK] = {0};
  if (!always && P <= 4 * calls) return false;
  if (pm->gcap < (int64_t)o->sum * ni) {
    int64_t *g = realloc(pm->g, (size_t)o->sum * (size_t)ni * sizeof *g);
    if (!g) return false;
    pm->g = g;
    pm->gcap = (int64_t)o->sum * ni;
  }
  int64_t got[PCGC_VARIADIC];
  pcgc_error e;
  for (int64_t s = 0; s < o->sum; s++)
    if (pcgc_op_piece_inputs(n->kind, n->attrs, ni, tin, o, pcgc_piece_index(o, c, s, 0), pm->g + s * ni, &e))
      return false;
  for (int j = 0; j < rank; j++) {
    c[j] = 1;
    if (o->degree[j] > 1 &&
        pcgc_op_piece_inputs(n->kind, n->attrs, ni, tin, o, pcgc_piece_index(o, c, 0, 0), pm->w[j], &e))
      return false;
    for (int i = 0; i < ni; i++) pm->w[j][i] = o->degree[j] > 1 ? pm->w[j][i] - pm->g[i] : 0;
    c[j] = 0;
  }
  for (int k = 0; k <= rank; k++) { /* corners: each coordinate at its largest, then all of them */
    for (int j = 0; j < rank; j++) c[j] = k == rank || j == k ? o->degree[j] - 1 : 0;
    int64_t p = pcgc_piece_index(o, c, o->sum - 1, o->replica - 1), want[PCGC_VARIADIC];
    if (pcgc_op_piece_inputs(n->kind, n->attrs, ni, tin, o, p, got, &e)) return false;
    pcgc_piece_map_apply(pm, n, p, want);
    for (int i = 0; i < ni; i++)
      if (want[i] != got[i]) return false;
  }
  return true;
}

void pcgc_piece_map_apply(const pcgc_piece_map *pm, const pcgc_node *n, int64_t p, int64_t *in_piece) {
  const pcgc_ptensor *o = &n->out[0];
  int64_t c[PCGC_MAX_RANK], s, r;
  pcgc_piece_coords(o, p, c, &s, &r);
  for (int i = 0; i < n->n_in; i++) {
    int64_t q = pm->g[s * n->n_in + i] + r;
    for (int j = 0; j < o->rank; j++) q += c[j] * pm->w[j][i];
    in_piece[i] = q;
  }
}

/* ------------------------------------------------------------ reads */

/* Every (piece, input piece) pair of node n (taskgraph.h). */
pcgc_status pcgc_piece_reads(const pcgc_graph *g, const pcgc_node *n, const bool *skip, pcgc_piece_map *pm,
                             pcgc_read_fn fn, void *ctx, pcgc_error *err) {
  const pcgc_ptensor *to = &n->out[0];
  int64_t P = pcgc_ptensor_pieces(to);
  if (pcgc_op_class_of(n->kind) != PCGC_CLASS_PARALLEL) {
    pcgc_ptensor tin[PCGC_VARIADIC];
    double bytes[PCGC_VARIADIC];
    bool any = false;
    for (int i = 0; i < n->n_in; i++) {
      tin[i] = *pcgc_graph_ref_type(g, n->in[i]);
      bytes[i] = pcgc_cost_piece_bytes(&tin[i]);
      any |= !skip || !skip[n->in[i].node];
    }
    if (!any) return PCGC_OK;
    bool closed = pcgc_piece_map_build(pm, n, tin, true);
    int64_t q[PCGC_VARIADIC];
    for (int64_t p = 0; p < P; p++) {
      if (closed) {
        pcgc_piece_map_apply(pm, n, p, q);
      } else {
        pcgc_status st = pcgc_op_piece_inputs(n->kind, n->attrs, n->n_in, tin, to, p, q, err);
        if (st != PCGC_OK) return st;
      }
      for (int i = 0; i < n->n_in; i++)
        if ((!skip || !skip[n->in[i].node]) && !fn(ctx, p, i, q[i], bytes[i]))
          return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    }
    return PCGC_OK;
  }
  const pcgc_ptensor *ti = pcgc_graph_ref_type(g, n->in[0]);
  if (skip && skip[n->in[0].node]) return PCGC_OK;
  int64_t d = n->kind == PCGC_OP_PIPELINE || n->kind == PCGC_OP_UNPIPELINE ? 1 : pcgc_attrs_int(n->attrs, "degree");
  int dim = n->kind == PCGC_OP_REPLICATE || n->kind == PCGC_OP_REDUCE ? -1 : (int)pcgc_attrs_int(n->attrs, "dim");
  double ob = pcgc_cost_piece_bytes(to), ib = pcgc_cost_piece_bytes(ti);
  for (int64_t p = 0; p < P; p++) {
    int64_t c[PCGC_MAX_RANK], s, r;
    pcgc_piece_coords(to, p, c, &s, &r);
    bool ok = true;
    switch (n->kind) {
    case PCGC_OP_PARTITION:
      c[dim] /= d;
      ok = fn(ctx, p, 0, pcgc_piece_index(ti, c, s, r), ob);
      break;
    case PCGC_OP_COMBINE: {
      int64_t c0 = c[dim];
      for (int64_t j = 0; j < d && ok; j++) {
        c[dim] = c0 * d + j;
        ok = fn(ctx, p, 0, pcgc_piece_index(ti, c, s, r), ib);
      }
      break;
    }
    case PCGC_OP_REPLICATE: ok = fn(ctx, p, 0, pcgc_piece_index(ti, c, s, r / d), ib); break;
    case PCGC_OP_REDUCE:
      for (int64_t j = 0; j < d && ok; j++) ok = fn(ctx, p, 0, pcgc_piece_index(ti, c, s * d + j, r), ob);
      break;
    default: ok = fn(ctx, p, 0, pcgc_piece_index(ti, c, s, r), ob); break;
    }
    if (!ok) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  }
  return PCGC_OK;
}

typedef struct reads_ctx {
  pcgc_reads *R;
  const pcgc_node *n;
} reads_ctx;

static bool push_read(void *ctx, int64_t p, int slot, int64_t q, double bytes) {
  reads_ctx *c = ctx;
  pcgc_reads *R = c->R;
  if (R->n == R->cap) {
    int64_t cap = R->cap ? 2 * R->cap : 256;
    pcgc_read *r = realloc(R->r, (size_t)cap * sizeof *r);
    if (!r) return false;
    R->r = r;
    R->cap = cap;
  }
  R->r[R->n++] = (pcgc_read){p, c->n->in[slot].node, slot, q, bytes};
  return true;
}

/* Every (piece, producer piece) pair node n reads from non-resident
 * producers, into R (taskgraph.h). */
pcgc_status pcgc_collect_reads(pcgc_reads *R, const pcgc_graph *g, const bool *res, const pcgc_node *n,
                                pcgc_error *err) {
  R->n = 0;
  reads_ctx c = {R, n};
  return pcgc_piece_reads(g, n, res, &R->pm, push_read, &c, err);
}

void pcgc_reads_destroy(pcgc_reads *R) {
  free(R->r);
  free(R->pm.g);
  memset(R, 0, sizeof *R);
}


/* ---------------------------------------------------------- relayouts */

/* Cells of tensor t along dim d: its shards, each cut into m micro-batch
 * slices on the pipelined dim. Cell index c*m + mu is monotone in offset. */
static int64_t cells(const pcgc_ptensor *t, int m, int d) {
  return (int64_t)t->degree[d] * (m > 1 && d == t->micro_dim ? m : 1);
}

/* The input cells overlapping output slice (p, mu) (taskgraph.h): along
 * each dim the range of input cells the slice's interval meets, walked as
 * an odometer, so the work is the number of cells, not of input pieces. */
void pcgc_relayout_cells(const pcgc_graph *g, const pcgc_node *n, pcgc_ref src, int64_t p, int mu, pcgc_cell_fn fn,
                         void *ctx) {
  const pcgc_ptensor *to = &n->out[0], *ti = pcgc_graph_ref_type(g, src);
  int mo = to->micro > 1 ? to->micro : 1, mi = ti->micro > 1 ? ti->micro : 1, r = to->rank;
  double es = (double)pcgc_dtype_size(to->dtype);
  int64_t c[PCGC_MAX_RANK], s, rr, lo[PCGC_MAX_RANK], hi[PCGC_MAX_RANK], a[PCGC_MAX_RANK], e[PCGC_MAX_RANK],
      size_i[PCGC_MAX_RANK], cur[PCGC_MAX_RANK];
  pcgc_piece_coords(to, p, c, &s, &rr);
  for (int d = 0; d < r; d++) {
    bool md = mo > 1 && d == to->micro_dim;
    int64_t size_o = to->dims[d] / cells(to, mo, d);
    lo[d] = (c[d] * (md ? mo : 1) + (md ? mu : 0)) * size_o;
    hi[d] = lo[d] + size_o;
    size_i[d] = ti->dims[d] / cells(ti, mi, d);
    a[d] = cur[d] = lo[d] / size_i[d];
    e[d] = (hi[d] - 1) / size_i[d];
  }
  for (;;) {
    int64_t ci[PCGC_MAX_RANK];
    int mui = mi > 1 && mo > 1 ? mu : 0;
    pcgc_box part = {.rank = r};
    double bytes = es;
    for (int d = 0; d < r; d++) {
      int64_t l = cur[d] * size_i[d], h = l + size_i[d];
      part.lo[d] = l > lo[d] ? l : lo[d];
      part.len[d] = (h < hi[d] ? h : hi[d]) - part.lo[d];
      bytes *= (double)part.len[d];
      bool md = mi > 1 && d == ti->micro_dim;
      ci[d] = md ? cur[d] / mi : cur[d];
      if (md) mui = (int)(cur[d] % mi);
    }
    if (!fn(ctx, pcgc_piece_index(ti, ci, s, rr), mui, &part, bytes)) return;
    int d = r - 1;
    while (d >= 0 && cur[d] == e[d]) {
      cur[d] = a[d];
      d--;
    }
    if (d < 0) return;
    cur[d]++;
  }
}

static bool cell_append(void *ctx, int64_t q, int mi, const pcgc_box *part, double bytes) {
  pcgc_cell_list *L = ctx;
  if (L->n == L->cap) {
    int64_t cap = L->cap ? 2 * L->cap : 16;
    pcgc_cell *c = realloc(L->c, (size_t)cap * sizeof *c);
    if (!c) return !(L->oom = true);
    L->c = c;
    L->cap = cap;
  }
  L->c[L->n++] = (pcgc_cell){q, mi, *part, bytes};
  return true;
}

void pcgc_relayout_cell_list(const pcgc_graph *g, const pcgc_node *n, pcgc_ref src, int64_t p, int mu,
                             pcgc_cell_list *L) {
  pcgc_relayout_cells(g, n, src, p, mu, cell_append, L);
}

/* How many inputs of g's nodes read r, counting up to `most`; *who (where
 * given): the node of the last one counted. */
static int readers_of(const pcgc_graph *g, pcgc_ref r, int most, int *who) {
  int readers = 0;
  for (int v = 0; v < g->n_nodes && readers < most; v++)
    for (int i = 0; i < g->nodes[v].n_in; i++)
      if (g->nodes[v].in[i].node == r.node && g->nodes[v].in[i].slot == r.slot) {
        readers++;
        if (who) *who = v;
      }
  return readers;
}

static bool one_slice(const pcgc_ptensor *t) { return t && t->micro <= 1; }

bool pcgc_relayout_through(const pcgc_graph *g, const pcgc_node *n) {
  if (n->kind != PCGC_OP_PARTITION || n->n_in != 1 || n->n_out != 1) return false;
  const pcgc_ptensor *ti = pcgc_graph_ref_type(g, n->in[0]);
  if (!one_slice(ti) || !one_slice(&n->out[0]) || ti->rank != n->out[0].rank) return false;
  int v = -1;
  if (readers_of(g, (pcgc_ref){n->id, 0}, 2, &v) != 1) return false;
  const pcgc_node *r = &g->nodes[v];
  return (r->kind == PCGC_OP_PARTITION || r->kind == PCGC_OP_COMBINE) && r->n_in == 1 && r->n_out == 1 &&
         one_slice(&r->out[0]);
}

pcgc_ref pcgc_relayout_source(const pcgc_graph *g, const pcgc_node *n) {
  pcgc_ref r = n->in[0];
  while (r.node >= 0 && r.node < g->n_nodes && pcgc_relayout_through(g, &g->nodes[r.node])) r = g->nodes[r.node].in[0];
  return r;
}

bool pcgc_relayout_grad_sets(const pcgc_graph *g, const pcgc_node *n) {
  if ((n->kind != PCGC_OP_PARTITION && n->kind != PCGC_OP_COMBINE && n->kind != PCGC_OP_PIPELINE &&
       n->kind != PCGC_OP_UNPIPELINE) ||
      n->n_in != 1 || n->n_out != 1)
    return false;
  pcgc_ref src = pcgc_relayout_source(g, n);
  const pcgc_ptensor *to = &n->out[0], *ti = pcgc_graph_ref_type(g, src);
  if (!ti || ti->sum != 1 || to->sum != 1 || ti->replica != 1 || to->replica != 1) return false;
  int mo = to->micro > 1 ? to->micro : 1, mi = ti->micro > 1 ? ti->micro : 1;
  if (mi > 1 && mo > 1 && (mi != mo || ti->micro_dim != to->micro_dim)) return false;
  if (ti->rank != to->rank) return false;
  for (int d = 0; d < to->rank; d++) /* slices of equal size that tile the tensor (no remainder left out) */
    if (ti->dims[d] != to->dims[d] || ti->dims[d] % cells(ti, mi, d) || to->dims[d] % cells(to, mo, d)) return false;
  return pcgc_graph_readers(g, src, 2) == 1;
}

int pcgc_graph_readers(const pcgc_graph *g, pcgc_ref r, int most) { return readers_of(g, r, most, NULL); }
