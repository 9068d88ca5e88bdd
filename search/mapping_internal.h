/*
 * mapping_internal.h — private to device mapping. search/mapping.c builds
 * the problem (candidate views, their node terms and device sets, the pair
 * matrices of the edges, all memoised by content) and checks memory;
 * search/mapping_sp.c decomposes the graph series-parallel and runs the DP
 * over the decomposition (search.h, "Device mapping", defines the cost).
 */
#ifndef PCGC_SEARCH_MAPPING_INTERNAL_H
#define PCGC_SEARCH_MAPPING_INTERNAL_H

#include <stdint.h>

#include "search.h"

/* A computed node: its candidate views and their terms. */
typedef struct pcgc__vnode {
  int K;                                       /* candidates; 0 for a resident node */
  pcgc_view cand[PCGC_VIEWS_MAX_CANDIDATES];
  double unary[PCGC_VIEWS_MAX_CANDIDATES];     /* its node term under each */
  double extra[PCGC_VIEWS_MAX_CANDIDATES];     /* added while solving only (the cut edges of
                                                  the fallback); never part of the cost */
  uint64_t mask[PCGC_VIEWS_MAX_CANDIDATES];    /* device groups its pieces occupy */
  int fixed;                                   /* the one candidate allowed, -1: any */
} pcgc__vnode;

/* Every read of consumer dst from producer src, costed per pair of their
 * candidates: cost[ks * K(dst) + kd]. */
typedef struct pcgc__vedge {
  int src, dst;
  const double *cost;
} pcgc__vedge;

typedef struct pcgc__vprob {
  int n;                  /* nodes of the graph */
  const int *order, *pos; /* topological order, and each node's position in it */
  const bool *res;        /* resident nodes take no view and no part */
  pcgc__vnode *nd;        /* [n] */
  pcgc__vedge *e;         /* every edge between computed nodes, by consumer in order */
  int n_e;
} pcgc__vprob;

/* The series-parallel decomposition of a problem's graph (mapping_sp.c). */
typedef struct pcgc__sp pcgc__sp;

typedef struct pcgc__sp_stats {
  int masks_max;          /* most device sets kept for one pair of end views */
  int64_t masks_dropped;  /* device sets dropped at the cap */
} pcgc__sp_stats;

/* Decomposes P's graph (its computed nodes and edges); edges are cut, as
 * search.h describes, until it is series-parallel. Depends on the graph
 * only, not on candidates or costs. */
pcgc_status pcgc__sp_build(const pcgc__vprob *P, pcgc__sp **out, pcgc_error *err);
void pcgc__sp_free(pcgc__sp *S);
int pcgc__sp_parts(const pcgc__sp *S);
int pcgc__sp_cut_edges(const pcgc__sp *S);

/* The candidate of every computed node (choice[node]) minimising the cost
 * plus the nodes' `extra` terms; with cut edges, the cut edges' producers
 * are fixed to their views in the optimum without those edges first (the
 * fallback). P's fixed and extra are restored on return. *value: the
 * minimum the DP found, extra terms included. */
pcgc_status pcgc__sp_solve(const pcgc__sp *S, pcgc__vprob *P, int max_masks, int *choice, double *value,
                           pcgc__sp_stats *st, pcgc_error *err);

/* The cost of candidates `choice` (cut edges summed, extra terms left out). */
double pcgc__sp_eval(const pcgc__sp *S, const pcgc__vprob *P, const int *choice);

#endif /* PCGC_SEARCH_MAPPING_INTERNAL_H */
