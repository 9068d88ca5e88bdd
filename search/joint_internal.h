/*
 * joint_internal.h — private to the joint search: the best-first core
 * (joint.c) and the split at bottleneck tensors (segment.c) that runs the
 * core once per distinct segment.
 */
#ifndef PCGC_SEARCH_JOINT_INTERNAL_H
#define PCGC_SEARCH_JOINT_INTERNAL_H

#include "search.h"
#include "substitutions.h"

/* Whether a rewritten graph may be kept (segment.c: its stubs are intact). */
typedef bool (*pcgc__joint_accept)(void *ctx, const pcgc_graph *g);

/* The best-first search of pcgc_joint_search over the given instances, on
 * the whole of `start`; graphs that `accept` refuses count as refused. */
pcgc_status pcgc__joint_run(const pcgc_graph *start, const pcgc_mapping *start_mp, int block, int t,
                            const pcgc_machine *m, const pcgc_rule_inst *insts, int n_insts,
                            const pcgc_joint_options *o, pcgc__joint_accept accept, void *accept_ctx,
                            pcgc_joint_result *r, pcgc_error *err);

/* The simulated iteration time the search compares (INFINITY: out of memory
 * or not simulable). */
double pcgc__joint_cost(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m,
                        const pcgc_joint_options *o);

/* The segmented search: *done false (and r untouched) when the graph has
 * too few computed nodes or bottlenecks to split, so the caller searches it
 * whole. */
pcgc_status pcgc__joint_segmented(const pcgc_graph *start, const pcgc_mapping *start_mp, int block, int t,
                                  const pcgc_machine *m, const pcgc_rule_inst *insts, int n_insts,
                                  const pcgc_joint_options *o, pcgc_joint_result *r, bool *done, pcgc_error *err);

#endif
