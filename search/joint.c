/*
 * joint.c — the core of the rule-driven joint search (search.h, "Joint
 * search"; the entry point, pcgc_joint_search, is segment.c's): best-first
 * over rewritten parallel graphs, each costed by the simulator with views
 * re-placed after the rewrite.
 *
 *   1. The start (the expert strategy compile found) is simulated and put
 *      in a min-heap keyed by predicted iteration time (ties: the order
 *      graphs were made, so the search is deterministic).
 *   2. Pop the cheapest graph; stop when it costs more than alpha x the
 *      best found, when `budget` graphs have been expanded, or at the time
 *      limit. Expanding: every match of every rule instance (degrees: the
 *      machine's; dims: below the graph's largest rank), in instance order,
 *      is applied alone; before those, every instance that matches twice or
 *      more is applied everywhere it matches (rule-wide moves, which reach
 *      every layer in one step and are few); a result whose canonical hash (pcgc_graph_hash) was seen
 *      is a duplicate (equality is checked against the graphs still held;
 *      a graph dropped earlier is known by its hash alone); the rest get
 *      views (pcgc_views_replace; a rule-wide move also with each
 *      application's operators spread over its own share of the devices,
 *      try_spread) and a simulation. Out of memory or slower
 *      than alpha x best: dropped. Otherwise pushed; faster than the best:
 *      the new best.
 * Data parallel and the expert strategies are where the search starts, so
 * its result is never worse than they are.
 *
 * Every graph carries its trace: the rewrites that made it from the start,
 * one line each (joint_trace.c writes and replays them); the best's is the
 * result's, so the same rewrites can be applied again at other sizes.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "joint_internal.h"
#include "search.h"
#include "substitutions.h"

typedef struct cand {
  pcgc_graph *g;
  pcgc_mapping mp;
  double cost;
  int64_t seq;
  uint64_t hash;   /* pcgc_graph_hash(g), computed once */
  char *trace;     /* the rewrites from the start, '\n'-joined (NULL: none) */
} cand;

typedef struct seen {
  uint64_t hash;
  UT_hash_handle hh;
} seen;

/* A rewrite waiting for its simulation: costed with the others of its batch
 * on worker threads, then taken in the order the rewrites were made. */
typedef struct pend {
  cand c;
  const pcgc_rule_inst *ri;
  bool wide;
  int *group;       /* a rule-wide move's: per node of c.g, the application that made it (-1: none) */
  int n_groups;
  bool slower, dp_changed, skipped;
  bool refused;     /* its views could not be placed */
  pcgc_status st;
  pcgc_error err;
} pend;

typedef struct search {
  const pcgc_machine *m;
  const pcgc_joint_options *o;
  pcgc__joint_accept accept;   /* NULL: every graph */
  void *accept_ctx;
  int block, t;
  cand *heap;
  int n_heap, cap_heap;
  int64_t seq;
  seen *seen;
  cand best;
  cand alt[PCGC_JOINT_ALTS]; /* the next fastest after the best, fastest first (pcgc_joint_result.alt) */
  int n_alt;
  pcgc_joint_result *r;
  double t0;
  /* the graph being expanded, and the matches of one instance */
  const cand *cur;
  pcgc_match *matches;     /* of every instance, in instance order */
  int n_matches, cap_matches, inst_first;
  /* rewrites made and not yet costed */
  pend *pend;
  int n_pend, cap_pend;
  double bound;   /* of the batch being costed: its simulations give up past it (0: never) */
} search;

void pcgc_joint_options_default(pcgc_joint_options *o) {
  memset(o, 0, sizeof *o);
  o->budget = 4;
  o->alpha = 1.05;
  o->time_limit = 30;
  o->branches = true;
  o->alts = PCGC_JOINT_ALTS;
  o->max_matches = 64;
  o->max_held = 32;
  o->segment_nodes = 40;
  o->views_dp = true;
  o->threads = pcgc_threads_default();
}

void pcgc_joint_result_add_counts(pcgc_joint_result *into, const pcgc_joint_result *from) {
  into->expanded += from->expanded;
  into->evaluated += from->evaluated;
  into->duplicates += from->duplicates;
  into->refused += from->refused;
  into->wide += from->wide;
  into->dropped += from->dropped;
  into->dp_better += from->dp_better;
  into->seconds += from->seconds;
  into->alike_hits += from->alike_hits;
  into->alike_misses += from->alike_misses;
  into->budget_hit |= from->budget_hit;
  into->time_hit |= from->time_hit;
  into->exhausted |= from->exhausted;
}

void pcgc_joint_result_destroy(pcgc_joint_result *r) {
  if (!r) return;
  pcgc_graph_free(r->graph);
  pcgc_mapping_destroy(&r->mapping);
  pcgc__trace_free(r);
  pcgc__joint_alts_free(r);
  memset(r, 0, sizeof *r);
}

static bool less(const cand *a, const cand *b) { return a->cost < b->cost || (a->cost == b->cost && a->seq < b->seq); }

static void heap_fix(search *S, int i);

static bool heap_push(search *S, cand c) {
  if (S->n_heap == S->cap_heap) {
    int cap = S->cap_heap ? 2 * S->cap_heap : 64;
    cand *h = realloc(S->heap, (size_t)cap * sizeof *h);
    if (!h) return false;
    S->heap = h;
    S->cap_heap = cap;
  }
  S->heap[S->n_heap++] = c;
  heap_fix(S, S->n_heap - 1);
  return true;
}

/* Restores the heap order around index i after its entry changed. */
static void heap_fix(search *S, int i) {
  if (i >= S->n_heap) return;
  while (i > 0 && less(&S->heap[i], &S->heap[(i - 1) / 2])) {
    cand t = S->heap[i];
    S->heap[i] = S->heap[(i - 1) / 2];
    S->heap[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < S->n_heap && less(&S->heap[l], &S->heap[m])) m = l;
    if (r < S->n_heap && less(&S->heap[r], &S->heap[m])) m = r;
    if (m == i) break;
    cand t = S->heap[i];
    S->heap[i] = S->heap[m];
    S->heap[m] = t;
    i = m;
  }
}

static cand heap_pop(search *S) {
  cand top = S->heap[0];
  S->heap[0] = S->heap[--S->n_heap];
  heap_fix(S, 0);
  return top;
}

static void cand_free(cand *c) {
  pcgc_graph_free(c->g);
  pcgc_mapping_destroy(&c->mp);
  free(c->trace);
  c->g = NULL;
  c->trace = NULL;
}

/* Is g a graph seen before? Its hash decides, except that where graphs
 * with that hash are still held (in the heap, the best, the one being
 * expanded) equality does: a hash shared by different graphs is then a
 * collision, not a duplicate. A graph dropped earlier is known by its hash
 * alone. */
static bool already_seen(search *S, const pcgc_graph *g, uint64_t h) {
  seen *e;
  HASH_FIND(hh, S->seen, &h, sizeof h, e);
  if (!e) return false;
  bool held = false;
  const cand *others[2] = {&S->best, S->cur};
  for (int i = 0; i < S->n_heap + 2; i++) {
    const cand *x = i < S->n_heap ? &S->heap[i] : others[i - S->n_heap];
    if (!x || !x->g || x->hash != h) continue;
    if (pcgc_graph_equal(x->g, g)) return true;
    held = true;
  }
  return !held;
}

static bool remember(search *S, uint64_t h) {
  seen *e;
  HASH_FIND(hh, S->seen, &h, sizeof h, e);
  if (e) return true;
  if (!(e = calloc(1, sizeof *e))) return false;
  e->hash = h;
  HASH_ADD(hh, S->seen, hash, sizeof e->hash, e);
  return true;
}

/* How candidates are simulated: the search's options, no trace. */
static pcgc_sim_options sim_options(const pcgc_joint_options *o) {
  pcgc_sim_options so;
  if (o->sim) so = *o->sim;
  else pcgc_sim_options_default(&so);
  so.trace_path = NULL;
  return so;
}

/* The cost the search compares: INFINITY for a device out of memory. */
static double cost_of_result(const pcgc_sim_result *sr) { return sr->oom_devices ? INFINITY : sr->iteration_time; }

/* Simulated iteration time of g with mp; INFINITY when a device is out of
 * memory or the simulation fails. */
static double cost_of(search *S, const pcgc_graph *g, const pcgc_mapping *mp) {
  return pcgc__joint_cost(g, mp, S->m, S->o);
}

double pcgc__joint_cost(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m,
                        const pcgc_joint_options *o) {
  pcgc_sim_options so = sim_options(o);
  pcgc_sim_result sr;
  pcgc_error e = {0};
  if (pcgc_simulate(g, mp, m, &so, &sr, &e) != PCGC_OK) return INFINITY;
  double t = cost_of_result(&sr);
  pcgc_sim_result_destroy(&sr);
  return t;
}

/* A rule-wide move's rewrites spread over the block (joint.c's top
 * comment): the nodes application i made, where they have no more pieces
 * than a share of the block's devices, moved to the i-th share of it,
 * packed (stride 1) or spread over the share (stride share / pieces: on a
 * machine whose nodes share their links, a table's gatherers on many nodes
 * rather than two). The greedy places every application's nodes next to
 * the same producers, so DLRM's tables, split by columns, all landed on the
 * same devices; the DP's cost adds parallel branches that overlap anywhere
 * (the data-parallel tail of each table does), so it cannot tell either.
 * The fastest that simulates faster is kept (*sr then is its result). */
static pcgc_status try_spread(const search *S, cand *c, const int *group, int n_groups, const pcgc_sim_options *so,
                              pcgc_sim_result *sr, pcgc_error *err) {
  int B = S->block, w = B / n_groups, D = pcgc_machine_num_devices(S->m);
  if (w < 1) return PCGC_OK;
  /* resident nodes (sources and what only distributes them) go where their readers are */
  int n = c->g->n_nodes;
  int *order = malloc((size_t)(n ? n : 1) * sizeof *order);
  bool *res = calloc((size_t)(n ? n : 1), sizeof *res);
  if (!order || !res || pcgc_graph_topo_order(c->g, order, NULL) != PCGC_OK) {
    free(order);
    free(res);
    return PCGC_OK; /* not spread (a failed topological order cannot happen on a typed graph) */
  }
  pcgc_resident_nodes(c->g, order, res);
  free(order);
  for (int spread = 0; spread < 2; spread++) {
    pcgc_mapping sp;
    pcgc_error e = {0};
    if (pcgc_mapping_init(&sp, c->mp.n_nodes, (pcgc_view){0, 1}, &e) != PCGC_OK) {
      free(res);
      return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
    }
    memcpy(sp.view, c->mp.view, (size_t)c->mp.n_nodes * sizeof *sp.view);
    bool moved = false, strided = false;
    for (int v = 0; v < n && v < c->mp.n_nodes; v++) {
      if (group[v] < 0 || res[v]) continue;
      int64_t P = pcgc_ptensor_pieces(&c->g->nodes[v].out[0]);
      pcgc_view nv = {sp.view[v].start / B * B + group[v] % n_groups * w, spread && P > 1 ? (int)(w / P) : 1};
      if (nv.stride < 1) nv.stride = 1;
      strided |= nv.stride > 1;
      if (P > w || nv.start >= D || (nv.start == sp.view[v].start && (P == 1 || sp.view[v].stride == nv.stride)))
        continue;
      sp.view[v] = nv;
      moved = true;
    }
    pcgc_sim_result r2;
    memset(&r2, 0, sizeof r2);
    pcgc_sim_options o2 = *so;
    if (isfinite(sr->iteration_time) && !sr->oom_devices &&
        (o2.give_up_after <= 0 || sr->iteration_time < o2.give_up_after))
      o2.give_up_after = sr->iteration_time;
    if (moved && (!spread || strided) && pcgc_simulate(c->g, &sp, S->m, &o2, &r2, &e) == PCGC_OK &&
        !r2.stopped_building && !r2.gave_up && cost_of_result(&r2) < cost_of_result(sr)) {
      pcgc_mapping t = c->mp;
      c->mp = sp;
      sp = t;
      pcgc_sim_result tr = *sr;
      *sr = r2;
      r2 = tr;
    }
    pcgc_sim_result_destroy(&r2);
    pcgc_mapping_destroy(&sp);
  }
  free(res);
  return PCGC_OK;
}

/* Candidate c's cost with its views, which the DP's replace where they
 * simulate better (o->views_dp). Only running out of memory is an error.
 * A candidate slower than alpha x the best is dropped whatever its time,
 * so its simulations stop at `bound` (that, at the batch's start; 0: never)
 * (INFINITY; *slower set). Runs on worker threads: touches only c. */
static pcgc_status cost_candidate(const search *S, cand *c, const int *group, int n_groups, double bound,
                                  bool *slower, bool *changed, pcgc_error *err) {
  pcgc_sim_options so = sim_options(S->o);
  so.give_up_after = bound;
  pcgc_sim_result sr;
  pcgc_error e = {0};
  c->cost = INFINITY;
  *slower = false;
  *changed = false;
  if (pcgc_simulate(c->g, &c->mp, S->m, &so, &sr, &e) != PCGC_OK) return PCGC_OK;
  pcgc_status st = PCGC_OK;
  if (group && n_groups > 1) st = try_spread(S, c, group, n_groups, &so, &sr, err);
  if (st == PCGC_OK && S->o->views_dp)
    st = pcgc_views_dp_if_better(c->g, S->block, S->t, S->m, &so, S->o->memo, &c->mp, &sr, changed, err);
  c->cost = cost_of_result(&sr);
  *slower = sr.gave_up && !sr.oom_devices;
  pcgc_sim_result_destroy(&sr);
  return st;
}

static bool collect(const pcgc_match *m, void *ctx) {
  search *S = ctx;
  if (S->n_matches == S->cap_matches) {
    int cap = S->cap_matches ? 2 * S->cap_matches : 64;
    pcgc_match *v = realloc(S->matches, (size_t)cap * sizeof *v);
    if (!v) return true;
    S->matches = v;
    S->cap_matches = cap;
  }
  S->matches[S->n_matches++] = *m;
  return S->o->max_matches > 0 && S->n_matches - S->inst_first >= S->o->max_matches;
}

static bool out_of_time(const search *S) { return S->o->time_limit > 0 && pcgc_now() - S->t0 > S->o->time_limit; }

static void report(const search *S) {
  if (!S->o->progress) return;
  pcgc_joint_progress p = {.expanded = S->r->expanded, .evaluated = S->r->evaluated, .start = S->r->start_time,
                           .best = S->best.cost};
  S->o->progress(S->o->progress_ctx, &p);
}

static pcgc_status flush(search *S, pcgc_error *err);

/* More pieces than devices: several pieces of one tensor share a device,
 * which only costs (and grows the simulation without bound). */
static bool too_many_pieces(const search *S, const pcgc_graph *g) {
  int D = pcgc_machine_num_devices(S->m);
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_out; k++)
      if (pcgc_ptensor_pieces(&g->nodes[i].out[k]) > D) return true;
  return false;
}

/* A rewritten graph g2 (owned) of S->cur, made by the trace lines `step`
 * (owned; NULL: out of memory): dropped as a duplicate, or given views and
 * simulated, kept when within alpha of the best. */
static pcgc_status consider(search *S, const pcgc_rule_inst *ri, pcgc_graph *g2, bool wide, char *step, uint64_t h,
                            int *group, int n_groups, pcgc_error *err) {
  pcgc_joint_result *r = S->r;
  if (!step) {
    pcgc_graph_free(g2);
    free(group);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
  }
  if (already_seen(S, g2, h)) {
    r->duplicates++;
    pcgc_graph_free(g2);
    free(step);
    free(group);
    return PCGC_OK;
  }
  if (!remember(S, h)) {
    pcgc_graph_free(g2);
    free(step);
    free(group);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
  }
  if (S->accept && !S->accept(S->accept_ctx, g2)) {
    r->refused++;
    pcgc_graph_free(g2);
    free(step);
    free(group);
    return PCGC_OK;
  }
  if (too_many_pieces(S, g2)) {
    r->refused++;
    pcgc_graph_free(g2);
    free(step);
    free(group);
    return PCGC_OK;
  }
  cand c = {.g = g2, .seq = S->seq++, .hash = h, .trace = pcgc__trace_join(S->cur->trace, step)};
  free(step);
  if (!c.trace) {
    cand_free(&c);
    free(group);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
  }
  if (S->n_pend == S->cap_pend) {
    int cap = S->cap_pend ? 2 * S->cap_pend : 16;
    pend *v = realloc(S->pend, (size_t)cap * sizeof *v);
    if (!v) {
      cand_free(&c);
      free(group);
      return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
    }
    S->pend = v;
    S->cap_pend = cap;
  }
  S->pend[S->n_pend++] = (pend){.c = c, .ri = ri, .wide = wide, .group = group, .n_groups = n_groups};
  /* a batch per few rewrites a thread: the time limit and alpha x the best
   * are checked between batches */
  int batch = S->o->threads > 1 ? 4 * S->o->threads : 1;
  return S->n_pend >= batch ? flush(S, err) : PCGC_OK;
}

static void cost_one(void *ctx, int i, int worker) {
  (void)worker;
  search *S = ctx;
  pend *p = &S->pend[i];
  if (out_of_time(S)) {
    p->skipped = true;
    return;
  }
  /* its views, re-placed from the graph expanded (S->cur, unchanged while
   * the batch runs) */
  pcgc_error e = {0};
  if (pcgc_views_replace(p->c.g, S->cur->g, &S->cur->mp, S->block, S->t, S->m, S->o->memo, &p->c.mp, &e) != PCGC_OK) {
    p->refused = true;
    return;
  }
  p->st = cost_candidate(S, &p->c, p->group, p->n_groups, S->bound, &p->slower, &p->dp_changed, &p->err);
}

void pcgc__joint_alts_free(pcgc_joint_result *r) {
  for (int i = 0; i < r->n_alt; i++) {
    pcgc_graph_free(r->alt[i].graph);
    pcgc_mapping_destroy(&r->alt[i].mapping);
    free(r->alt[i].trace);
  }
  memset(r->alt, 0, sizeof r->alt);
  r->n_alt = 0;
}

/* A graph the search kept (c: a rewrite, not the start) offered as a
 * runner-up: in S->alt when it is among the fastest PCGC_JOINT_ALTS
 * besides the best. own: c is S's to keep or free; else it is copied when
 * it goes in. Out of memory: no runner-up, nothing else lost. */
static void offer_alt(search *S, cand *c, bool own) {
  int most = S->o->alts < PCGC_JOINT_ALTS ? S->o->alts : PCGC_JOINT_ALTS;
  bool in = c->trace && most > 0 && (S->n_alt < most || less(c, &S->alt[S->n_alt - 1]));
  cand k = {0};
  if (in && own) {
    k = *c;
  } else if (in) {
    k = (cand){pcgc_graph_clone(c->g), {0}, c->cost, c->seq, c->hash, strdup(c->trace)};
    if (!k.g || !k.trace || pcgc_mapping_init(&k.mp, c->mp.n_nodes, (pcgc_view){0, 1}, NULL) != PCGC_OK) {
      pcgc_graph_free(k.g);
      free(k.trace);
      return;
    }
    memcpy(k.mp.view, c->mp.view, (size_t)c->mp.n_nodes * sizeof *k.mp.view);
  } else {
    if (own) cand_free(c);
    return;
  }
  if (S->n_alt == most) cand_free(&S->alt[--S->n_alt]);
  int i = S->n_alt++;
  for (; i > 0 && less(&k, &S->alt[i - 1]); i--) S->alt[i] = S->alt[i - 1];
  S->alt[i] = k;
}

/* A costed rewrite p taken (in the order rewrites were made): kept when
 * within alpha of the best, the new best when faster. */
static pcgc_status take(search *S, pend *p, pcgc_error *err) {
  pcgc_joint_result *r = S->r;
  pcgc_error e = {0};
  cand c = p->c;
  const pcgc_rule_inst *ri = p->ri;
  bool wide = p->wide;
  r->dp_better += p->dp_changed;
  r->evaluated++;
  if (r->evaluated % 32 == 0) report(S);
  r->wide += wide;
  /* slower than alpha x the best taken so far: dropped, as a search on one
   * thread would have (its bound was that best's) */
  bool slower = p->slower || (isfinite(c.cost) && c.cost > S->o->alpha * S->best.cost);
  if (S->o->log) { /* the rule, its step of the trace (degrees, where), and its time where known */
    const char *step = c.trace ? strrchr(c.trace, '\n') : NULL;
    step = step ? step + 1 : c.trace ? c.trace : "";
    while (*step == ' ') step++;
    fprintf(S->o->log, "  %-36s%s %s", pcgc_rule_name(ri->rule), wide ? " (everywhere)" : "",
            !isfinite(c.cost) && !slower ? "out of memory" : slower ? "slower than alpha x the best" : "");
    if (isfinite(c.cost) && !p->slower) fprintf(S->o->log, " %.6g ms", c.cost * 1e3);
    fprintf(S->o->log, " [%.120s]\n", step);
  }
  if (!isfinite(c.cost) || slower) {
    cand_free(&c);
    return PCGC_OK;
  }
  if (c.cost < S->best.cost) {
    /* the best keeps its own copy: heap entries are freed when expanded */
    pcgc_graph *bg = pcgc_graph_clone(c.g);
    char *bt = strdup(c.trace);
    pcgc_mapping bm;
    if (!bg || !bt || pcgc_mapping_init(&bm, c.mp.n_nodes, (pcgc_view){0, 1}, &e) != PCGC_OK) {
      pcgc_graph_free(bg);
      free(bt);
      cand_free(&c);
      return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
    }
    memcpy(bm.view, c.mp.view, (size_t)c.mp.n_nodes * sizeof *bm.view);
    cand old = S->best;
    S->best = (cand){bg, bm, c.cost, c.seq, c.hash, bt};
    offer_alt(S, &old, true); /* the best until now: the first runner-up */
    r->improvements++;
    snprintf(r->last_rule, sizeof r->last_rule, "%s%s", pcgc_rule_name(ri->rule), wide ? " (everywhere)" : "");
  } else {
    offer_alt(S, &c, false);
  }
  if (S->o->max_held > 0 && S->n_heap >= S->o->max_held) {
    /* the heap is full: the new graph replaces the worst held one, or goes */
    int w = 0;
    for (int i = 1; i < S->n_heap; i++)
      if (less(&S->heap[w], &S->heap[i])) w = i;
    r->dropped++;
    if (!less(&c, &S->heap[w])) {
      cand_free(&c);
      return PCGC_OK;
    }
    cand_free(&S->heap[w]);
    S->heap[w] = S->heap[--S->n_heap];
    heap_fix(S, w);
  }
  if (!heap_push(S, c)) {
    cand_free(&c);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
  }
  return PCGC_OK;
}

/* The rewrites waiting (S->pend) costed on worker threads, then taken in
 * order. Their simulations give up past alpha x the best at the batch's
 * start, which is no less than the best when each is taken: what a search
 * on one thread keeps, this keeps. */
static pcgc_status flush(search *S, pcgc_error *err) {
  S->bound = isfinite(S->best.cost) && S->best.cost > 0 ? S->o->alpha * S->best.cost : 0;
  pcgc_parallel_run(S->n_pend, S->o->threads, cost_one, S);
  pcgc_status st = PCGC_OK;
  for (int i = 0; i < S->n_pend; i++) {
    pend *p = &S->pend[i];
    free(p->group);
    p->group = NULL;
    if (st == PCGC_OK && p->st != PCGC_OK) {
      if (err) *err = p->err;
      st = p->st;
    }
    S->r->refused += st == PCGC_OK && !p->skipped && p->refused;
    if (st != PCGC_OK || p->skipped || p->refused) cand_free(&p->c);
    else st = take(S, p, err);
  }
  S->n_pend = 0;
  return st;
}

static bool first_only(const pcgc_match *m, void *ctx) {
  *(pcgc_match *)ctx = *m;
  return true;
}

/* Names of the nodes of g2 that g does not have, appended to *names. */
static bool new_names(const pcgc_graph *g, const pcgc_graph *g2, int app, char ***names, int **apps, int *n,
                      int *cap) {
  for (int v = 0; v < g2->n_nodes; v++) {
    if (pcgc_graph_find(g, g2->nodes[v].name) >= 0) continue;
    if (*n == *cap) {
      int c2 = *cap ? 2 * *cap : 64;
      char **nn = realloc(*names, (size_t)c2 * sizeof *nn);
      if (nn) *names = nn;
      int *na = nn ? realloc(*apps, (size_t)c2 * sizeof *na) : NULL;
      if (na) *apps = na;
      if (!nn || !na) return false;
      *cap = c2;
    }
    if (!((*names)[*n] = strdup(g2->nodes[v].name))) return false;
    (*apps)[(*n)++] = app;
  }
  return true;
}

/* The rule applied everywhere it matches: the first match of the graph
 * rewritten, again and again, at most `limit` times (a rule whose rewrite
 * matches itself stops there). NULL when fewer than two applied. *step:
 * its trace, "everywhere N", or with `singles` one line per match applied
 * (the segmented search translates those into the whole graph's names);
 * NULL on out of memory. *group (owned; NULL on out of memory): per node of
 * the result, the application that made it (0, 1, ...; -1: none), for
 * try_spread; *n_groups the applications. */
static pcgc_graph *apply_everywhere(const pcgc_graph *g0, const pcgc_rule_inst *ri, int limit, bool singles,
                                    char **step, int **group, int *n_groups, pcgc_error *err) {
  pcgc_graph *g = pcgc_graph_clone(g0);
  int applied = 0;
  char *lines = NULL;
  bool nomem = false;
  char **names = NULL;
  int *apps = NULL, n_names = 0, cap_names = 0;
  *group = NULL;
  *n_groups = 0;
  for (int k = 0; g && k < limit; k++) {
    pcgc_graph_index *ix = pcgc_graph_index_new(g, err);
    pcgc_match m;
    m.inst = NULL;
    if (!ix || pcgc_rule_find_matches(ri, g, ix, first_only, &m, err) != PCGC_OK || !m.inst) {
      pcgc_graph_index_free(ix);
      break;
    }
    pcgc_graph_index_free(ix);
    pcgc_graph *g2 = NULL;
    pcgc_error e = {0};
    if (pcgc_rule_apply(g, &m, &g2, &e) != PCGC_OK) break;
    if (singles) {
      char *line = pcgc__trace_step(ri, g, &m, 0), *all = line ? pcgc__trace_join(lines, line) : NULL;
      free(line);
      free(lines);
      lines = all;
      nomem |= !all;
    }
    nomem |= !new_names(g, g2, applied, &names, &apps, &n_names, &cap_names);
    pcgc_graph_free(g);
    g = g2;
    applied++;
  }
  if (applied >= 2 && !nomem && (*group = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof **group))) {
    for (int v = 0; v < g->n_nodes; v++) (*group)[v] = -1;
    for (int i = 0; i < n_names; i++) { /* a later application may have consumed an earlier one's nodes */
      int v = pcgc_graph_find(g, names[i]);
      if (v >= 0) (*group)[v] = apps[i];
    }
    *n_groups = applied;
  }
  nomem |= applied >= 2 && !*group;
  for (int i = 0; i < n_names; i++) free(names[i]);
  free(names);
  free(apps);
  if (applied < 2) {
    pcgc_graph_free(g);
    free(lines);
    return NULL;
  }
  *step = nomem ? NULL : singles ? lines : pcgc__trace_step(ri, NULL, NULL, applied);
  if (nomem || !singles) free(lines);
  if (nomem) {
    free(*group);
    *group = NULL;
  }
  return g;
}

/* ------------------------------------------------------ expansion
 * Expanding S->cur makes one rewrite per job: first every instance applied
 * everywhere it matches (when it matches twice or more: a move across all
 * the layers at once), then every match of every instance alone. Jobs run
 * in chunks on worker threads (the rewriting), and their graphs are then
 * considered in job order (duplicates, views; costed in batches). */

typedef struct job {
  const pcgc_rule_inst *ri;
  int match;              /* index in S->matches; -1: the rule-wide move */
  pcgc_graph *g;          /* the rewrite (NULL: none) */
  char *step;
  uint64_t hash;          /* pcgc_graph_hash(g) */
  int *group, n_groups;   /* the rule-wide move's applications (apply_everywhere) */
  bool refused, nomem;
} job;

typedef struct expansion {
  search *S;
  const pcgc_graph_index *ix;
  job *jobs;
} expansion;

static void make_one(void *ctx, int i, int worker) {
  (void)worker;
  expansion *X = ctx;
  search *S = X->S;
  job *j = &X->jobs[i];
  pcgc_error e = {0};
  if (out_of_time(S)) return;
  if (j->match < 0) {
    if (pcgc_rule_count_matches(j->ri, S->cur->g, X->ix, 2, &e) < 2) return;
    j->g = apply_everywhere(S->cur->g, j->ri, S->o->max_matches > 0 ? 4 * S->o->max_matches : 256, S->accept != NULL,
                            &j->step, &j->group, &j->n_groups, &e);
    j->nomem = j->g && !j->step;
    if (j->g) j->hash = pcgc_graph_hash(j->g);
    return;
  }
  const pcgc_match *m = &S->matches[j->match];
  if (pcgc_rule_apply(S->cur->g, m, &j->g, &e) != PCGC_OK) {
    j->g = NULL;
    j->nomem = e.status == PCGC_ERR_NOMEM;
    j->refused = !j->nomem;
    return;
  }
  j->step = pcgc__trace_step(j->ri, S->cur->g, m, 0);
  j->nomem = !j->step;
  j->hash = pcgc_graph_hash(j->g);
}

/* Every rewrite of S->cur made and considered (the last batch is left in
 * S->pend for the caller's flush). */
static pcgc_status expand(search *S, const pcgc_rule_inst *insts, int n_insts, const pcgc_graph_index *ix,
                          pcgc_error *err) {
  pcgc_status st = PCGC_OK;
  S->n_matches = 0;
  for (int i = 0; i < n_insts && st == PCGC_OK; i++) { /* each match names its instance (inst) */
    S->inst_first = S->n_matches;
    st = pcgc_rule_find_matches(&insts[i], S->cur->g, ix, collect, S, err);
  }
  int n_jobs = n_insts + S->n_matches;
  int chunk = S->o->threads > 1 ? 8 * S->o->threads : 1;
  job *jobs = st == PCGC_OK ? calloc((size_t)chunk, sizeof *jobs) : NULL;
  if (st == PCGC_OK && !jobs) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
  expansion X = {S, ix, jobs};
  pcgc_joint_result *r = S->r;
  for (int first = 0; first < n_jobs && st == PCGC_OK && !out_of_time(S); first += chunk) {
    int n = n_jobs - first < chunk ? n_jobs - first : chunk;
    for (int k = 0; k < n; k++) {
      int j = first + k;
      jobs[k] = j < n_insts ? (job){.ri = &insts[j], .match = -1}
                            : (job){.ri = S->matches[j - n_insts].inst, .match = j - n_insts};
    }
    pcgc_parallel_run(n, S->o->threads, make_one, &X);
    for (int k = 0; k < n; k++) {
      job *j = &jobs[k];
      if (st == PCGC_OK && j->nomem) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
      if (st != PCGC_OK) {
        pcgc_graph_free(j->g);
        free(j->step);
        free(j->group);
        continue;
      }
      r->refused += j->refused;
      if (j->g) st = consider(S, j->ri, j->g, j->match < 0, j->step, j->hash, j->group, j->n_groups, err); /* takes g, step, group */
      else free(j->group);
    }
  }
  free(jobs);
  return st;
}

pcgc_status pcgc__joint_run(const pcgc_graph *start, const pcgc_mapping *start_mp, int block, int t,
                            const pcgc_machine *m, const pcgc_rule_inst *insts, int n_insts,
                            const pcgc_joint_options *opt, pcgc__joint_accept accept, void *accept_ctx,
                            pcgc_joint_result *r, pcgc_error *err) {
  memset(r, 0, sizeof *r);
  pcgc_joint_options o = *opt;
  if (o.alpha < 1) o.alpha = 1;
  search S = {.m = m, .o = &o, .accept = accept, .accept_ctx = accept_ctx, .block = block, .t = t, .r = r,
              .t0 = pcgc_now()};
  pcgc_status st = PCGC_OK;
  r->instances = n_insts;
  uint64_t h0 = pcgc_graph_hash(start);
  cand c0 = {.g = pcgc_graph_clone(start), .seq = S.seq++, .hash = h0};
  pcgc_mapping bm;
  if (!c0.g || pcgc_mapping_init(&c0.mp, start_mp->n_nodes, (pcgc_view){0, 1}, err) != PCGC_OK) {
    pcgc_graph_free(c0.g);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory starting the search");
  }
  memcpy(c0.mp.view, start_mp->view, (size_t)start_mp->n_nodes * sizeof *c0.mp.view);
  c0.cost = cost_of(&S, c0.g, &c0.mp);
  r->start_time = c0.cost;
  S.best = (cand){pcgc_graph_clone(start), {0}, c0.cost, c0.seq, h0, NULL};
  if (!S.best.g || pcgc_mapping_init(&bm, start_mp->n_nodes, (pcgc_view){0, 1}, err) != PCGC_OK ||
      !remember(&S, h0) || !heap_push(&S, c0)) {
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory starting the search");
    goto done;
  }
  memcpy(bm.view, start_mp->view, (size_t)start_mp->n_nodes * sizeof *bm.view);
  S.best.mp = bm;
  while (S.n_heap > 0 && st == PCGC_OK) {
    if (r->expanded >= o.budget) {
      r->budget_hit = true;
      break;
    }
    if (out_of_time(&S)) {
      r->time_hit = true;
      break;
    }
    cand cur = heap_pop(&S);
    if (cur.cost > o.alpha * S.best.cost) {
      cand_free(&cur);
      r->exhausted = true;
      break;
    }
    S.cur = &cur;
    r->expanded++;
    pcgc_graph_index *ix = pcgc_graph_index_new(cur.g, err);
    if (!ix) st = err ? err->status : PCGC_ERR_NOMEM;
    /* rule-wide moves first (few, and each reaches every layer), then single matches */
    if (st == PCGC_OK) st = expand(&S, insts, n_insts, ix, err);
    /* before S.cur goes: the rewrites of it not yet costed */
    if (st == PCGC_OK) st = flush(&S, err);
    for (int i = 0; i < S.n_pend; i++) {
      cand_free(&S.pend[i].c);
      free(S.pend[i].group);
    }
    S.n_pend = 0;
    if (out_of_time(&S)) r->time_hit = true;
    report(&S);
    pcgc_graph_index_free(ix);
    S.cur = NULL;
    cand_free(&cur);
  }
  if (st == PCGC_OK && S.n_heap == 0 && !r->budget_hit && !r->time_hit) r->exhausted = true;
done:
  while (S.n_heap > 0) {
    cand c = heap_pop(&S);
    cand_free(&c);
  }
  free(S.heap);
  free(S.matches);
  free(S.pend);
  seen *e, *tmp;
  HASH_ITER(hh, S.seen, e, tmp) {
    HASH_DEL(S.seen, e);
    free(e);
  }
  r->seconds = pcgc_now() - S.t0;
  if (st == PCGC_OK && pcgc__trace_split(S.best.trace, r) != PCGC_OK) {
    pcgc__trace_free(r);
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
  }
  if (st == PCGC_OK) {
    r->graph = S.best.g;
    r->mapping = S.best.mp;
    r->time = S.best.cost;
    free(S.best.trace);
    for (int i = 0; i < S.n_alt; i++)
      r->alt[r->n_alt++] = (pcgc_joint_alt){S.alt[i].g, S.alt[i].mp, S.alt[i].cost, S.alt[i].trace};
  } else {
    cand_free(&S.best);
    for (int i = 0; i < S.n_alt; i++) cand_free(&S.alt[i]);
  }
  return st;
}
