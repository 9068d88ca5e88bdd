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

/* ------------------------------------------------ trace (joint_trace.c) */

/* The trace line (search.h, pcgc_joint_replay) of match m of ri in g, or,
 * m NULL, of ri applied everywhere wide_n times. malloc'd; NULL: out of memory. */
char *pcgc__trace_step(const pcgc_rule_inst *ri, const pcgc_graph *g, const pcgc_match *m, int wide_n);
/* a, '\n', b (either may be NULL or empty): malloc'd; NULL: out of memory. */
char *pcgc__trace_join(const char *a, const char *b);
/* Lines of a '\n'-joined trace into r->trace (r->n_trace set even when
 * out of memory stops it, so pcgc__trace_free frees what was made). */
pcgc_status pcgc__trace_split(const char *joined, pcgc_joint_result *r);
void pcgc__trace_free(pcgc_joint_result *r);
/* frees r's runner-ups (pcgc_joint_result.alt) */
void pcgc__joint_alts_free(pcgc_joint_result *r);
/* A single-match line with every node name mapped by fn (a rule-wide line
 * unchanged): malloc'd; NULL on out of memory or a malformed line. */
char *pcgc__trace_rename(const char *line, void (*fn)(void *ctx, const char *name, char *buf, size_t n), void *ctx);
/* pcgc_joint_replay over instances already made. */
pcgc_status pcgc__joint_replay(const pcgc_graph *start, int n_steps, const char *const *steps,
                               const pcgc_rule_inst *insts, int n_insts, pcgc_graph **out, pcgc_error *err);

/* branches.c: the region move. pcgc__branches_narrow narrows the fork-join
 * regions of g (views mp) where the cost model says so: *out (NULL: none),
 * its views, and its trace lines, one per region, "@branches S... at JOIN"
 * (all owned by the caller). pcgc__branches_apply narrows the region closed
 * by node `join` of *g to size[i] devices per branch (a line replayed; *g
 * replaced; why: what is wrong on failure). */
#define PCGC__BRANCHES_STEP "@branches"
pcgc_status pcgc__branches_narrow(const pcgc_machine *m, const pcgc_graph *g, const pcgc_mapping *mp,
                                  pcgc_graph **out, pcgc_mapping *out_mp, char ***lines, int *n_lines,
                                  pcgc_error *err);
pcgc_status pcgc__branches_apply(pcgc_graph **g, const char *join, int k, const int *size, char *why, size_t why_n);

#endif
