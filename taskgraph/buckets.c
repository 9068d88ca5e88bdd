/*
 * buckets.c — gradient buckets (taskgraph.h, pcgc_grad_buckets): the
 * cells that the same devices all-reduce, summed together in one
 * all-reduce, for the simulator and codegen alike.
 */
#include <stdlib.h>
#include <string.h>

#include "taskgraph.h"

void pcgc_weight_grad_order(const pcgc_graph *g, const int *order, int *key) {
  for (int i = 0; i < g->n_nodes; i++) key[i] = -1;
  for (int k = 0; k < g->n_nodes; k++) {
    const pcgc_node *n = &g->nodes[order[k]];
    if (pcgc_op_class_of(n->kind) == PCGC_CLASS_PARALLEL) continue;
    for (int i = 0; i < n->n_in; i++) {
      int s = pcgc_source_of(g, n->in[i].node);
      if (g->nodes[s].kind == PCGC_OP_WEIGHT && key[s] < 0) key[s] = k;
    }
  }
}

typedef struct cell_ref {
  int i;          /* the cell */
  int order, weight;
} cell_ref;

static int by_backward(const void *a, const void *b) {
  const cell_ref *x = a, *y = b;
  if (x->order != y->order) return x->order > y->order ? -1 : 1; /* backward finishes the latest first */
  if (x->weight != y->weight) return x->weight > y->weight ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* A group's open bucket: its members sorted, what it holds so far. */
typedef struct open_bucket {
  int *devs, n;
  uint64_t hash;
  int id;         /* -1: none open */
  int cells;
  double bytes;
} open_bucket;

static uint64_t devs_hash(const int *d, int n) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
  for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)d[i]) * 1099511628211ull;
  return h;
}

int pcgc_grad_buckets(int n, const pcgc_grad_cell *cells, int *bucket) {
  if (n <= 0) return 0;
  cell_ref *ref = malloc((size_t)n * sizeof *ref);
  int64_t slots = 16;
  while (slots < 2 * (int64_t)n) slots *= 2;
  open_bucket *tab = calloc((size_t)slots, sizeof *tab);
  int nb = 0;
  int maxg = 1;
  for (int i = 0; i < n; i++)
    if (cells[i].ng > maxg) maxg = cells[i].ng;
  int *sorted = malloc((size_t)maxg * sizeof *sorted);
  if (!ref || !tab || !sorted) {
    nb = -1;
    goto done;
  }
  for (int i = 0; i < n; i++) ref[i] = (cell_ref){i, cells[i].order, cells[i].weight};
  qsort(ref, (size_t)n, sizeof *ref, by_backward);
  for (int k = 0; k < n; k++) {
    const pcgc_grad_cell *c = &cells[ref[k].i];
    if (!c->bucketable || c->ng < 2) {
      bucket[ref[k].i] = nb++;
      continue;
    }
    memcpy(sorted, c->grp, (size_t)c->ng * sizeof *sorted);
    qsort(sorted, (size_t)c->ng, sizeof *sorted, cmp_int);
    uint64_t h = devs_hash(sorted, c->ng);
    int64_t s = (int64_t)(h & (uint64_t)(slots - 1));
    while (tab[s].devs && !(tab[s].hash == h && tab[s].n == c->ng &&
                            !memcmp(tab[s].devs, sorted, (size_t)c->ng * sizeof *sorted)))
      s = (s + 1) & (slots - 1);
    open_bucket *o = &tab[s];
    if (!o->devs) { /* the group's first cell */
      if (!(o->devs = malloc((size_t)c->ng * sizeof *o->devs))) {
        nb = -1;
        goto done;
      }
      memcpy(o->devs, sorted, (size_t)c->ng * sizeof *sorted);
      o->n = c->ng;
      o->hash = h;
      o->id = -1;
    }
    double b = pcgc_bucket_bytes(c->bytes);
    if (o->id < 0 || o->cells >= PCGC_BUCKET_MAX || o->bytes + b > PCGC_BUCKET_BYTES) { /* a new bucket */
      o->id = nb++;
      o->cells = 0;
      o->bytes = 0;
    }
    o->cells++;
    o->bytes += b;
    bucket[ref[k].i] = o->id;
  }
done:
  for (int64_t s = 0; tab && s < slots; s++) free(tab[s].devs);
  free(tab);
  free(ref);
  free(sorted);
  return nb;
}

bool pcgc_grad_bucket_cells(int n, const int *bucket, int nb, int *off, int *ord) {
  int *fill = calloc((size_t)nb + 1, sizeof *fill);
  if (!fill) return false;
  for (int k = 0; k <= nb; k++) off[k] = 0;
  for (int i = 0; i < n; i++) off[bucket[i] + 1]++;
  for (int k = 0; k < nb; k++) off[k + 1] += off[k];
  for (int i = 0; i < n; i++) ord[off[bucket[i]] + fill[bucket[i]]++] = i;
  free(fill);
  return true;
}
