/*
 * cuts_internal.h — private to search/: a graph cut at bottleneck tensors
 * into segments (cuts.c), for the segmented joint search and for
 * activation recomputation's units.
 */
#ifndef PCGC_SEARCH_CUTS_INTERNAL_H
#define PCGC_SEARCH_CUTS_INTERNAL_H

#include "search.h"

typedef struct pcgc__cuts {
  const pcgc_graph *g;
  int n;
  int *order, *pos;     /* topological order, and each node's position in it */
  bool *res;            /* resident, or computed from weights alone */
  int *seg;             /* node -> segment, -1: outside every segment */
  int n_seg;
  pcgc_ref *out;        /* per segment: the tensor it hands on ({-1, -1}: none) */
} pcgc__cuts;

/* Cuts g into segments of about `target` computed nodes (0: about sqrt(n)
 * of its n). false on out of memory; P is to be freed either way. */
bool pcgc__cuts_build(pcgc__cuts *P, const pcgc_graph *g, int target);
void pcgc__cuts_free(pcgc__cuts *P);

/* The recomputation units of g (for the simulator; pcgc_recomputed_nodes
 * for codegen): g cut at bottleneck tensors into segments of about sqrt(n)
 * of its n computed nodes. Returns unit[node] (-1: resident, or computed
 * from weights alone and read in several units), *n_units, and
 * (*checkpoint)[node]: its output is the one tensor crossing a cut. One unit
 * when there is no bottleneck. NULL on out of memory; the caller frees both. */
int *pcgc__checkpoint_units(const pcgc_graph *g, int *n_units, bool **checkpoint);

#endif
