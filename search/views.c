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

typedef struct vctx {
  const pcgc_graph *g;
  const bool *res;
  pcgc_view *view;
  int D;
  pcgc_reads R;   /* the reads of the node being placed */
} vctx;

static int home(const pcgc_view *v, int64_t p, int D) { return pcgc_view_device(*v, p, D); }

static double view_cost(const vctx *V, pcgc_view v) {
  double moved = 0;
  for (int64_t i = 0; i < V->R.n; i++) {
    const pcgc_read *r = &V->R.r[i];
    if (home(&v, r->p, V->D) != home(&V->view[r->src], r->q, V->D)) moved += r->bytes;
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
                             int D, pcgc_view *view, pcgc_error *err) {
  vctx V = {.g = pg, .res = res, .view = view, .D = D};
  pcgc_status st = PCGC_OK;
  for (int k = 0; k < pg->n_nodes && st == PCGC_OK; k++) {
    const pcgc_node *n = &pg->nodes[order[k]];
    int base = stage[n->id] * B;
    view[n->id] = (pcgc_view){base, 1};
    if (res[n->id]) continue;
    int64_t P = pcgc_ptensor_pieces(&n->out[0]);
    pcgc_view cand[4];
    int nc = 0;
    cand[nc++] = P <= B && B % P == 0 ? (pcgc_view){base, (int)(B / P)} : (pcgc_view){base, 1};
    if ((st = pcgc_collect_reads(&V.R, pg, res, n, err)) != PCGC_OK) break;
    double best_b = -1;
    int main_src = -1;
    for (int i = 0; i < n->n_in; i++) { /* the producer read most */
      int src = n->in[i].node;
      if (res[src]) continue;
      double b = 0;
      for (int64_t j = 0; j < V.R.n; j++)
        if (V.R.r[j].src == src) b += V.R.r[j].bytes;
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
      double cost = view_cost(&V, cand[c]);
      if (cost < best_cost) {
        best_cost = cost;
        best = c;
      }
    }
    view[n->id] = cand[best];
  }
  pcgc_reads_destroy(&V.R);
  return st;
}

/* Views for g, a rewrite of prev (whose views are prev_mp): each node keeps
 * the stage of the node of prev with its name, or with its name's first
 * '/'-part (rewrite nodes are "<anchor>/<tensor>"), never less than its
 * producers'; then the greedy placement within blocks of `block` devices. */
pcgc_status pcgc_views_replace(const pcgc_graph *g, const pcgc_graph *prev, const pcgc_mapping *prev_mp, int block,
                               int t, const pcgc_machine *m, pcgc_mapping *out, pcgc_error *err) {
  memset(out, 0, sizeof *out);
  int n = g->n_nodes, D = pcgc_machine_num_devices(m);
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
  if (st == PCGC_OK) st = pcgc_views_place(g, order, res, stage, block, t, D, out->view, err);
  if (st != PCGC_OK) pcgc_mapping_destroy(out);
  free(order);
  free(stage);
  free(res);
  return st;
}
