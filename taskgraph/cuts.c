/*
 * cuts.c — a graph cut at bottleneck tensors (taskgraph.h): what both
 * the segmented joint search (segment.c: segments searched one by one) and
 * recomputation (the simulator and codegen: units made again in backward)
 * stand on, so the simulator does not depend on the joint search.
 *
 * In the topological order, a cut after position i is crossed by the
 * tensors of computed (non-resident) nodes at or before i that are read
 * after i. A cut crossed by exactly one tensor, not a partial sum, is a
 * bottleneck. Walking the order, a segment closes at the first bottleneck
 * once it holds `target` computed nodes; a last segment under half that
 * joins the one before. Resident nodes (sources and the parallel ops that
 * only distribute them) belong to the one segment that reads their
 * component; a component read by several segments stays outside every one.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "taskgraph.h"

void pcgc_cuts_free(pcgc_cuts *P) {
  free(P->order);
  free(P->pos);
  free(P->res);
  free(P->seg);
  free(P->out);
}

static int find_root(int *uf, int x) {
  while (uf[x] != x) x = uf[x] = uf[uf[x]];
  return x;
}

/* Position of the last reader of each (node, slot) tensor, -1 when unread;
 * last[off[node] + slot]. */
static int *last_readers(const pcgc_cuts *P, int **off_out) {
  const pcgc_graph *g = P->g;
  int *off = malloc((size_t)(P->n + 1) * sizeof *off);
  if (!off) return NULL;
  off[0] = 0;
  for (int i = 0; i < P->n; i++) off[i + 1] = off[i] + g->nodes[i].n_out;
  int *last = malloc((size_t)(off[P->n] ? off[P->n] : 1) * sizeof *last);
  if (!last) {
    free(off);
    return NULL;
  }
  for (int k = 0; k < off[P->n]; k++) last[k] = -1;
  for (int i = 0; i < P->n; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      pcgc_ref in = g->nodes[i].in[k];
      int *l = &last[off[in.node] + in.slot];
      if (P->pos[i] > *l) *l = P->pos[i];
    }
  *off_out = off;
  return last;
}

/* The one tensor crossing the cut after position i. */
static pcgc_ref crossing(const pcgc_cuts *P, const int *off, const int *last, int i) {
  for (int x = 0; x < P->n; x++) {
    if (P->res[x] || P->pos[x] > i) continue;
    for (int s = 0; s < P->g->nodes[x].n_out; s++)
      if (last[off[x] + s] > i) return (pcgc_ref){x, s};
  }
  return (pcgc_ref){-1, -1};
}

/* The cuts and the resident nodes' segments, with segments of `target`
 * computed nodes (<= 0: the square root of their number). False on out of memory; P->n_seg < 2 when
 * there is nothing to split. */
bool pcgc_cuts_build(pcgc_cuts *P, const pcgc_graph *g, int target) {
  memset(P, 0, sizeof *P);
  P->g = g;
  P->n = g->n_nodes;
  size_t n = (size_t)(P->n ? P->n : 1);
  P->order = malloc(n * sizeof *P->order);
  P->pos = malloc(n * sizeof *P->pos);
  P->res = calloc(n, sizeof *P->res);
  P->seg = malloc(n * sizeof *P->seg);
  P->out = malloc(n * sizeof *P->out);
  int *delta = calloc(n + 1, sizeof *delta), *uf = malloc(n * sizeof *uf), *comp_seg = malloc(n * sizeof *comp_seg);
  int *off = NULL, *last = NULL;
  bool ok = P->order && P->pos && P->res && P->seg && P->out && delta && uf && comp_seg &&
            pcgc_graph_topo_order(g, P->order, NULL) == PCGC_OK;
  bool *wonly = ok ? calloc(n, sizeof *wonly) : NULL; /* computed from weights alone */
  ok = ok && wonly;
  if (ok) pcgc_resident_nodes(g, P->order, P->res);
  for (int k = 0; ok && k < P->n; k++) {
    const pcgc_node *x = &g->nodes[P->order[k]];
    pcgc_op_class c = pcgc_op_class_of(x->kind);
    P->pos[x->id] = k;
    wonly[x->id] = x->kind == PCGC_OP_WEIGHT || (x->n_in > 0 && c != PCGC_CLASS_SOURCE && c != PCGC_CLASS_LOSS);
    for (int j = 0; j < x->n_in; j++) wonly[x->id] = wonly[x->id] && wonly[x->in[j].node];
    P->res[x->id] = P->res[x->id] || wonly[x->id];
    P->seg[x->id] = -1;
  }
  free(wonly);
  if (ok && !(last = last_readers(P, &off))) ok = false;
  /* crossing counts: tensor (x, s) is alive after positions pos[x] .. last - 1 */
  int computed = 0;
  for (int x = 0; ok && x < P->n; x++) {
    if (P->res[x]) continue;
    computed++;
    for (int s = 0; s < g->nodes[x].n_out; s++)
      if (last[off[x] + s] > P->pos[x]) {
        delta[P->pos[x]]++;
        delta[last[off[x] + s]]--;
      }
  }
  if (target <= 0) target = (int)ceil(sqrt((double)computed)); /* recomputation units */
  if (target < 1) target = 1;
  if (ok && computed >= 2 * target) {
    int alive = 0, size = 0, seg = 0, seen = 0;
    for (int k = 0; k < P->n; k++) {
      int x = P->order[k];
      alive += delta[k];
      if (P->res[x]) continue;
      P->seg[x] = seg;
      size++;
      seen++;
      if (alive != 1 || size < target || seen == computed) continue;
      pcgc_ref c = crossing(P, off, last, k);
      if (c.node < 0 || g->nodes[c.node].out[c.slot].sum != 1) continue;
      P->out[seg++] = c;
      size = 0;
    }
    /* the last segment is the rest; too small, it joins the one before */
    if (size < target / 2 && seg > 0) {
      for (int x = 0; x < P->n; x++)
        if (P->seg[x] == seg) P->seg[x] = seg - 1;
      seg--;
    }
    P->out[seg] = (pcgc_ref){-1, -1};
    P->n_seg = seg + 1;
  }
  /* step 2: resident components, owned by their only reading segment */
  for (int x = 0; ok && x < P->n; x++) {
    uf[x] = x;
    comp_seg[x] = -1;
  }
  for (int x = 0; ok && P->n_seg >= 2 && x < P->n; x++)
    if (P->res[x])
      for (int k = 0; k < g->nodes[x].n_in; k++) uf[find_root(uf, x)] = find_root(uf, g->nodes[x].in[k].node);
  for (int x = 0; ok && P->n_seg >= 2 && x < P->n; x++) {
    if (P->res[x]) continue;
    for (int k = 0; k < g->nodes[x].n_in; k++) {
      int u = g->nodes[x].in[k].node;
      if (!P->res[u]) continue;
      int *cs = &comp_seg[find_root(uf, u)];
      *cs = *cs == -1 || *cs == P->seg[x] ? P->seg[x] : -2;
    }
  }
  for (int x = 0; ok && P->n_seg >= 2 && x < P->n; x++)
    if (P->res[x]) P->seg[x] = comp_seg[find_root(uf, x)] >= 0 ? comp_seg[find_root(uf, x)] : -1;
  free(delta);
  free(uf);
  free(comp_seg);
  free(off);
  free(last);
  return ok;
}

int *pcgc_checkpoint_units(const pcgc_graph *g, int *n_units, bool **checkpoint) {
  pcgc_cuts P;
  *checkpoint = NULL;
  /* units of about sqrt(n) computed nodes: about sqrt(n) checkpoints kept
   * and one unit of sqrt(n) recomputed at a time (Chen et al., 2016) */
  if (!pcgc_cuts_build(&P, g, 0)) {
    pcgc_cuts_free(&P);
    return NULL;
  }
  int *unit = P.seg;
  bool *ck = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *ck);
  if (!ck) {
    pcgc_cuts_free(&P);
    return NULL;
  }
  P.seg = NULL;
  if (P.n_seg < 2) { /* no bottleneck: one unit of every computed node */
    for (int x = 0; x < g->n_nodes; x++) unit[x] = P.res[x] ? -1 : 0;
    P.n_seg = 1;
  }
  for (int k = 0; k + 1 < P.n_seg; k++) ck[P.out[k].node] = true;
  *n_units = P.n_seg;
  *checkpoint = ck;
  pcgc_cuts_free(&P);
  return unit;
}

pcgc_status pcgc_recomputed_nodes(const pcgc_graph *g, bool *recomputed, pcgc_error *err) {
  int n_units = 0;
  bool *ck = NULL;
  int *unit = pcgc_checkpoint_units(g, &n_units, &ck);
  if (!unit) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory cutting the graph into recomputation units");
  for (int x = 0; x < g->n_nodes; x++) {
    const pcgc_node *n = &g->nodes[x];
    bool kernel = pcgc_cost_efficiency(n->kind)->kernel && pcgc_op_class_of(n->kind) != PCGC_CLASS_LOSS;
    recomputed[x] = kernel && unit[x] >= 0 && !ck[x];
  }
  free(unit);
  free(ck);
  return PCGC_OK;
}

