/*
 * sync.c — how data moves where one piece meets many: a replicate's or
 * reduce's fan, and the cells of a weight whose gradients are all-reduced.
 * The simulator (search/sim.c) and codegen (codegen/lower.c) both take
 * these decisions from here, so the estimate times the movements the
 * program makes.
 */
#include <stdlib.h>
#include <string.h>

#include "taskgraph.h"

/* ------------------------------------------------------------------ boxes */

bool pcgc_box_intersect(const pcgc_box *a, const pcgc_box *b, pcgc_box *out) {
  out->rank = a->rank;
  for (int d = 0; d < a->rank; d++) {
    int64_t lo = a->lo[d] > b->lo[d] ? a->lo[d] : b->lo[d];
    int64_t e1 = a->lo[d] + a->len[d], e2 = b->lo[d] + b->len[d];
    int64_t hi = e1 < e2 ? e1 : e2;
    if (hi <= lo) return false;
    out->lo[d] = lo;
    out->len[d] = hi - lo;
  }
  return true;
}

void pcgc_box_union(pcgc_box *a, const pcgc_box *b) {
  for (int d = 0; d < a->rank; d++) {
    int64_t lo = a->lo[d] < b->lo[d] ? a->lo[d] : b->lo[d];
    int64_t e1 = a->lo[d] + a->len[d], e2 = b->lo[d] + b->len[d];
    a->lo[d] = lo;
    a->len[d] = (e1 > e2 ? e1 : e2) - lo;
  }
}

bool pcgc_box_equal(const pcgc_box *a, const pcgc_box *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->lo[d] != b->lo[d] || a->len[d] != b->len[d]) return false;
  return true;
}

bool pcgc_box_contiguous_in(const pcgc_box *x, const pcgc_box *in, int64_t *first) {
  if (x->rank != in->rank) return false;
  int64_t at = 0;
  bool full = true; /* every dim inside the current one is whole */
  for (int d = 0; d < x->rank; d++) {
    if (x->lo[d] < in->lo[d] || x->lo[d] + x->len[d] > in->lo[d] + in->len[d]) return false;
    at = at * in->len[d] + (x->lo[d] - in->lo[d]);
  }
  for (int d = x->rank - 1; d >= 0; d--) { /* whole dims innermost, then one partial, then ones */
    if (!full && x->len[d] != 1) return false;
    if (x->len[d] != in->len[d]) full = false;
  }
  if (first) *first = at;
  return true;
}

int64_t pcgc_box_elems(const pcgc_box *b) {
  int64_t e = 1;
  for (int d = 0; d < b->rank; d++) e *= b->len[d];
  return e;
}

/* ------------------------------------------------------------------- fans */

pcgc_status pcgc_fan_init(pcgc_fan *f, int64_t max_degree, int D, pcgc_error *err) {
  memset(f, 0, sizeof *f);
  int64_t d = max_degree < 1 ? 1 : max_degree;
  f->cap = d;
  f->D = D;
  f->wide = malloc((size_t)d * sizeof *f->wide);
  f->wdev = malloc((size_t)d * sizeof *f->wdev);
  f->member = malloc((size_t)d * sizeof *f->member);
  f->dev = malloc((size_t)d * sizeof *f->dev);
  f->grp = malloc(((size_t)d + 1) * sizeof *f->grp);
  f->stamp = calloc((size_t)D, sizeof *f->stamp);
  f->at = malloc((size_t)D * sizeof *f->at);
  if (!f->wide || !f->wdev || !f->member || !f->dev || !f->grp || !f->stamp || !f->at) {
    pcgc_fan_destroy(f);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory for a fan of %lld pieces", (long long)d);
  }
  return PCGC_OK;
}

void pcgc_fan_destroy(pcgc_fan *f) {
  free(f->wide);
  free(f->wdev);
  free(f->member);
  free(f->dev);
  free(f->grp);
  free(f->stamp);
  free(f->at);
  memset(f, 0, sizeof *f);
}

void pcgc_fan_at(pcgc_fan *f, const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_node *n, int64_t q) {
  bool rep = n->kind == PCGC_OP_REPLICATE;
  const pcgc_ptensor *ti = pcgc_graph_ref_type(g, n->in[0]), *to = &n->out[0];
  const pcgc_ptensor *narrow = rep ? ti : to, *wide = rep ? to : ti;
  int nnode = rep ? n->in[0].node : n->id, wnode = rep ? n->id : n->in[0].node;
  int64_t c[PCGC_MAX_RANK], s, r, d = pcgc_attrs_int(n->attrs, "degree");
  if (d > f->cap) d = f->cap; /* (the caller sized f for every fan it builds) */
  f->d = d;
  pcgc_piece_coords(narrow, q, c, &s, &r);
  f->narrow = pcgc_view_device(mp->view[nnode], q, f->D);
  /* stamp[X] == gen: device X seen, at[X] its index in dev[] */
  if (++f->gen == 0x3fffffff) {
    memset(f->stamp, 0, (size_t)f->D * sizeof *f->stamp);
    f->gen = 1;
  }
  f->n_dev = 0;
  f->narrow_member = false;
  for (int64_t j = 0; j < d; j++) {
    int64_t p = rep ? pcgc_piece_index(wide, c, s, r * d + j) : pcgc_piece_index(wide, c, s * d + j, r);
    int X = pcgc_view_device(mp->view[wnode], p, f->D);
    f->wide[j] = p;
    f->wdev[j] = X;
    if (f->stamp[X] != f->gen) {
      f->stamp[X] = f->gen;
      f->at[X] = f->n_dev;
      f->dev[f->n_dev++] = X;
      if (X == f->narrow) f->narrow_member = true;
    }
    f->member[j] = f->at[X];
  }
  f->grp[0] = f->narrow;
  f->n_grp = 1;
  for (int k = 0; k < f->n_dev; k++)
    if (f->dev[k] != f->narrow) f->grp[f->n_grp++] = f->dev[k];
}

pcgc_fan_move pcgc_fan_move_of(const pcgc_fan *f, bool spread, bool add) {
  int others = f->n_grp - 1;
  if (others == 0) return PCGC_FAN_LOCAL;
  if (others == 1) return PCGC_FAN_MESSAGE;
  if (!f->narrow_member && !(spread && add)) return PCGC_FAN_RELAY;
  return PCGC_FAN_COLLECTIVE;
}

/* ------------------------------------------------------ weight gradients */

static int cmp64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

bool pcgc_weight_sync_cells(int rank, int nh, const int *hold, const pcgc_box *box, int min_group, pcgc_sync_fn fn,
                            void *ctx, bool *oom) {
  *oom = false;
  if (nh < min_group || nh < 1) return true;
  int64_t *cuts = malloc((size_t)(2 * nh + 1) * PCGC_MAX_RANK * sizeof *cuts);
  int *grp = malloc((size_t)nh * sizeof *grp);
  if (!cuts || !grp) {
    free(cuts);
    free(grp);
    *oom = true;
    return false;
  }
  int ncut[PCGC_MAX_RANK], stride = 2 * nh + 1;
  for (int d = 0; d < rank; d++) { /* every holder's boundaries, sorted, once each */
    int64_t *cd = cuts + (int64_t)d * stride;
    int k = 0;
    for (int i = 0; i < nh; i++) {
      cd[k++] = box[i].lo[d];
      cd[k++] = box[i].lo[d] + box[i].len[d];
    }
    qsort(cd, (size_t)k, sizeof *cd, cmp64);
    int u = 0;
    for (int i = 0; i < k; i++)
      if (u == 0 || cd[i] != cd[u - 1]) cd[u++] = cd[i];
    ncut[d] = u;
  }
  int idx[PCGC_MAX_RANK] = {0};
  bool go = true;
  for (;;) { /* every cell, the last dim fastest (a scalar weight: one cell) */
    pcgc_box cell = {.rank = rank};
    for (int d = 0; d < rank; d++) {
      const int64_t *cd = cuts + (int64_t)d * stride;
      cell.lo[d] = cd[idx[d]];
      cell.len[d] = cd[idx[d] + 1] - cd[idx[d]];
    }
    int ng = 0;
    for (int i = 0; i < nh; i++) {
      pcgc_box x;
      if (pcgc_box_intersect(&box[i], &cell, &x) && pcgc_box_equal(&x, &cell)) grp[ng++] = hold[i];
    }
    if (ng >= min_group && ng > 0 && !fn(ctx, &cell, grp, ng)) {
      go = false;
      break;
    }
    int d = rank - 1;
    while (d >= 0 && idx[d] + 2 >= ncut[d]) idx[d--] = 0;
    if (d < 0) break;
    idx[d]++;
  }
  free(cuts);
  free(grp);
  return go;
}

bool pcgc_zero_shard(const pcgc_box *cell, int n, int j, pcgc_box *out) {
  if (n < 2 || j < 0 || j >= n) return false;
  int d = 0;
  while (d < cell->rank && cell->len[d] == 1) d++;
  if (d >= cell->rank || cell->len[d] < n) return false;
  int64_t a = (int64_t)j * cell->len[d] / n, b = (int64_t)(j + 1) * cell->len[d] / n;
  *out = *cell;
  out->lo[d] = cell->lo[d] + a;
  out->len[d] = b - a;
  return true;
}
