/*
 * views.c — greedy view placement (search.h, pcgc_views_place and
 * pcgc_views_replace): the expert strategies' views, and a rewritten
 * graph's views re-placed from its predecessor's, without the DP. Each
 * computed node, in topological order, takes of a few candidate views
 * inside its stage's block the one that moves the fewest bytes of what it
 * reads.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "search.h"

/* One read of the node being placed: piece p reads `bytes` held by device
 * `from` (its producer's piece, where that was placed). */
typedef struct gread {
  int64_t p;
  int src, from;
  double bytes;
} gread;

typedef struct vctx {
  const pcgc_graph *g;
  const bool *res;
  pcgc_view *view;
  int D;
  int32_t **dev;    /* [node]: the device of each piece of a placed computed node */
  gread *r;         /* the reads of the node being placed */
  int64_t n, cap;
  int32_t *cdev;    /* scratch: a candidate view's device of each piece */
  int64_t cap_cdev;
  pcgc_reads R;     /* without a memo: the reads, collected */
} vctx;

static bool read_push(vctx *V, int64_t p, int src, int64_t q, double bytes) {
  if (V->n == V->cap) {
    int64_t cap = V->cap ? 2 * V->cap : 1024;
    gread *r = realloc(V->r, (size_t)cap * sizeof *r);
    if (!r) return false;
    V->r = r;
    V->cap = cap;
  }
  int from = V->dev[src] ? V->dev[src][q] : pcgc_view_device(V->view[src], q, V->D);
  V->r[V->n++] = (gread){p, src, from, bytes};
  return true;
}

/* Node n's reads of computed producers, from the memo or collected. */
static pcgc_status node_reads(vctx *V, const pcgc_node *n, const pcgc_machine *m, pcgc_views_memo *memo,
                              pcgc_error *err) {
  V->n = 0;
  if (memo) {
    const pcgc__vread *r;
    const int64_t *off;
    pcgc_status st = pcgc__views_memo_reads(memo, V->g, n, m, &r, &off, err);
    for (int i = 0; i < n->n_in && st == PCGC_OK; i++) {
      int src = n->in[i].node;
      if (V->res[src]) continue;
      for (int64_t j = off[i]; j < off[i + 1]; j++)
        if (!read_push(V, r[j].p, src, r[j].q, r[j].bytes)) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    }
    return st;
  }
  pcgc_status st = pcgc_collect_reads(&V->R, V->g, V->res, n, err);
  for (int64_t j = 0; j < V->R.n && st == PCGC_OK; j++)
    if (!read_push(V, V->R.r[j].p, V->R.r[j].src, V->R.r[j].q, V->R.r[j].bytes))
      st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  return st;
}

/* Bytes of the reads that v places away from what they read. */
static double view_cost(vctx *V, pcgc_view v, int64_t P) {
  pcgc_view_devices(v, P, V->D, V->cdev);
  double moved = 0;
  for (int64_t i = 0; i < V->n; i++) {
    const gread *r = &V->r[i];
    if (V->cdev[r->p] != r->from) moved += r->bytes;
  }
  return moved;
}

/* Does v keep P pieces on distinct devices of [base, base + B)? */
static bool view_fits(pcgc_view v, int64_t P, int base, int B) {
  if (v.start < base || v.start >= base + B) return false;
  if (P <= 1) return true;
  return v.stride >= 1 && v.start + (P - 1) * (int64_t)v.stride < base + B;
}

/* Greedy placement (search.h, pcgc_views_place). */
pcgc_status pcgc_views_place(const pcgc_graph *pg, const int *order, const bool *res, const int *stage, int B, int t,
                             const pcgc_machine *m, pcgc_views_memo *memo, pcgc_view *view, pcgc_error *err) {
  int D = pcgc_machine_num_devices(m);
  vctx V = {.g = pg, .res = res, .view = view, .D = D};
  pcgc_status st = (V.dev = calloc((size_t)(pg->n_nodes ? pg->n_nodes : 1), sizeof *V.dev))
                       ? PCGC_OK
                       : pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  for (int k = 0; k < pg->n_nodes && st == PCGC_OK; k++) {
    const pcgc_node *n = &pg->nodes[order[k]];
    int base = stage[n->id] * B;
    view[n->id] = (pcgc_view){base, 1};
    if (res[n->id]) continue;
    int64_t P = pcgc_ptensor_pieces(&n->out[0]);
    if (P > V.cap_cdev) {
      int32_t *c = realloc(V.cdev, (size_t)P * sizeof *c);
      if (!c) {
        st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
        break;
      }
      V.cdev = c;
      V.cap_cdev = P;
    }
    pcgc_view cand[4];
    int nc = 0;
    cand[nc++] = P <= B && B % P == 0 ? (pcgc_view){base, (int)(B / P)} : (pcgc_view){base, 1};
    if ((st = node_reads(&V, n, m, memo, err)) != PCGC_OK) break;
    double best_b = -1;
    int main_src = -1;
    for (int i = 0; i < n->n_in; i++) { /* the producer read most */
      int src = n->in[i].node;
      if (res[src]) continue;
      double b = 0;
      for (int64_t j = 0; j < V.n; j++)
        if (V.r[j].src == src) b += V.r[j].bytes;
      if (b > best_b) {
        best_b = b;
        main_src = src;
      }
    }
    if (main_src >= 0) cand[nc++] = view[main_src];
    cand[nc++] = (pcgc_view){base, 1};
    if (t > 1) cand[nc++] = (pcgc_view){base, t};
    int best = 0;
    double best_cost = INFINITY;
    for (int c = 0; c < nc; c++) {
      if (c > 0 && !view_fits(cand[c], P, base, B)) continue;
      bool dup = false;
      for (int e = 0; e < c; e++) dup |= cand[e].start == cand[c].start && cand[e].stride == cand[c].stride;
      if (dup) continue;
      double cost = view_cost(&V, cand[c], P);
      if (cost < best_cost) {
        best_cost = cost;
        best = c;
      }
    }
    view[n->id] = cand[best];
    if (!(V.dev[n->id] = malloc((size_t)(P ? P : 1) * sizeof **V.dev))) {
      st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
      break;
    }
    pcgc_view_devices(view[n->id], P, D, V.dev[n->id]);
  }
  for (int i = 0; V.dev && i < pg->n_nodes; i++) free(V.dev[i]);
  free(V.dev);
  free(V.r);
  free(V.cdev);
  pcgc_reads_destroy(&V.R);
  return st;
}

/* Views for g, a rewrite of prev (whose views are prev_mp): each node keeps
 * the stage of the node of prev with its name, or with its name's first
 * '/'-part (rewrite nodes are "<anchor>/<tensor>"), never less than its
 * producers'; then the greedy placement within blocks of `block` devices. */
pcgc_status pcgc_views_replace(const pcgc_graph *g, const pcgc_graph *prev, const pcgc_mapping *prev_mp, int block,
                               int t, const pcgc_machine *m, pcgc_views_memo *memo, pcgc_mapping *out,
                               pcgc_error *err) {
  memset(out, 0, sizeof *out);
  int n = g->n_nodes;
  if (block < 1) block = 1;
  int *order = malloc((size_t)(n ? n : 1) * sizeof *order), *stage = calloc((size_t)(n ? n : 1), sizeof *stage);
  bool *res = calloc((size_t)(n ? n : 1), sizeof *res);
  pcgc_status st = order && stage && res ? pcgc_graph_topo_order(g, order, err)
                                         : pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  if (st == PCGC_OK) {
    pcgc_resident_nodes(g, order, res);
    for (int k = 0; k < n; k++) {
      const pcgc_node *x = &g->nodes[order[k]];
      int id = pcgc_graph_find(prev, x->name), sg = 0;
      const char *slash = strchr(x->name, '/');
      if (id < 0 && slash && slash - x->name < 256) {
        char base[256];
        memcpy(base, x->name, (size_t)(slash - x->name));
        base[slash - x->name] = '\0';
        id = pcgc_graph_find(prev, base);
      }
      if (id >= 0 && id < prev_mp->n_nodes) sg = prev_mp->view[id].start / block;
      for (int i = 0; i < x->n_in; i++)
        if (!res[x->in[i].node] && stage[x->in[i].node] > sg) sg = stage[x->in[i].node];
      stage[x->id] = res[x->id] ? 0 : sg;
    }
    st = pcgc_mapping_init(out, n, (pcgc_view){0, 1}, err);
  }
  if (st == PCGC_OK) st = pcgc_views_place(g, order, res, stage, block, t, m, memo, out->view, err);
  if (st != PCGC_OK) pcgc_mapping_destroy(out);
  free(order);
  free(stage);
  free(res);
  return st;
}
