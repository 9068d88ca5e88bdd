/*
 * mapping.c — device mapping by dynamic programming (search.h, "Device
 * mapping"): every computed node's view chosen jointly, minimising
 *
 *   cost = Σ nodes  (fwd + bwd time of one piece) × micro × (most pieces on one device)
 *        + Σ edges  Σ reads of a producer piece on another device than the
 *                   consumer piece: micro × p2p time (latency + bytes / link
 *                   bandwidth, intra or inter node)
 *
 * (sources and parallel ops that only distribute them are resident: placed
 * by their readers, they neither cost nor are chosen).
 *
 * Problem. Per node, up to PCGC_VIEWS_MAX_CANDIDATES views inside its stage
 * block (pcgc_views_candidates); a unary term per (node, view) and a pair
 * matrix per (producer, consumer) edge over their candidates. Read lists
 * are collected once per node; pair matrices are memoised by XXH3 of the
 * edge's reads and both candidate lists, so the repeated layers of a
 * transformer cost one matrix per distinct layer edge, not one per layer.
 *
 * Algorithm: a frontier DP over the topological order. The frontier is the
 * set of nodes already placed whose outputs are still read later; the state
 * is the views of the frontier (mixed radix), the value the least cost of
 * everything placed so far. Placing node v: every (state, view of v) pair,
 * plus v's unary term and its edges from the frontier; then nodes whose
 * last reader is v leave the frontier (minimum over their views, with a
 * back pointer). On a chain, or at any bottleneck of a series-parallel
 * graph, the frontier is one node: O(n K²). A diamond keeps its fork node
 * in the frontier until the join: K² states.
 *
 * Non-series-parallel fallback: when the frontier would exceed
 * max_states states (default 256: two nodes of 16 candidates) or 7 nodes,
 * its oldest node is fixed
 * to the view it has in the cheapest state so far (the states that disagree
 * are dropped), which makes the rest decomposable instead of failing; the
 * result is then no longer guaranteed optimal (stats->fallbacks counts
 * them). The initial views (the greedy's) are costed too and kept when the
 * DP does not beat them, so the result never costs more than they do.
 *
 * Memory: views only concentrate pieces in this model, and candidates keep
 * a node's pieces on distinct devices, so the cost has no memory term.
 */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>
#include <xxhash.h>

#include "search.h"
#include "sim_internal.h"

#define MAX_K PCGC_VIEWS_MAX_CANDIDATES
#define MAX_STATES 256 /* frontier states kept between steps, by default */

/* ------------------------------------------------------------ reads */


static bool rpush(pcgc__reads *R, const bool *res, int64_t p, int src, int64_t q, double bytes) {
  if (res[src]) return true;
  if (R->n == R->cap) {
    int64_t cap = R->cap ? 2 * R->cap : 256;
    pcgc__read *r = realloc(R->r, (size_t)cap * sizeof *r);
    if (!r) return false;
    R->r = r;
    R->cap = cap;
  }
  R->r[R->n++] = (pcgc__read){p, src, q, bytes};
  return true;
}

/* Every (piece, producer piece) pair node n reads from non-resident
 * producers, into R (sim_internal.h). */
pcgc_status pcgc__collect_reads(pcgc__reads *R, const pcgc_graph *g, const bool *res, const pcgc_node *n,
                                pcgc_error *err) {
  const pcgc_ptensor *to = &n->out[0];
  int64_t P = pcgc_ptensor_pieces(to);
  R->n = 0;
  if (pcgc_op_class_of(n->kind) != PCGC_CLASS_PARALLEL) {
    pcgc_ptensor tin[PCGC_VARIADIC];
    double bytes[PCGC_VARIADIC];
    bool any = false;
    for (int i = 0; i < n->n_in; i++) {
      tin[i] = *pcgc_graph_ref_type(g, n->in[i]);
      bytes[i] = pcgc_cost_piece_bytes(&tin[i]);
      any |= !res[n->in[i].node];
    }
    if (!any) return PCGC_OK;
    bool closed = pcgc__piece_map_build(&R->pm, n, tin, true);
    int64_t q[PCGC_VARIADIC];
    for (int64_t p = 0; p < P; p++) {
      if (closed) {
        pcgc__piece_map_apply(&R->pm, n, p, q);
      } else {
        pcgc_status st = pcgc_op_piece_inputs(n->kind, &n->attrs, n->n_in, tin, to, p, q, err);
        if (st != PCGC_OK) return st;
      }
      for (int i = 0; i < n->n_in; i++)
        if (!rpush(R, res, p, n->in[i].node, q[i], bytes[i]))
          return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    }
    return PCGC_OK;
  }
  const pcgc_ptensor *ti = pcgc_graph_ref_type(g, n->in[0]);
  int src = n->in[0].node;
  if (res[src]) return PCGC_OK;
  int64_t d = n->kind == PCGC_OP_PIPELINE || n->kind == PCGC_OP_UNPIPELINE ? 1 : pcgc_attrs_int(&n->attrs, "degree");
  int dim = n->kind == PCGC_OP_REPLICATE || n->kind == PCGC_OP_REDUCE ? -1 : (int)pcgc_attrs_int(&n->attrs, "dim");
  double ob = pcgc_cost_piece_bytes(to), ib = pcgc_cost_piece_bytes(ti);
  for (int64_t p = 0; p < P; p++) {
    int64_t c[PCGC_MAX_RANK], s, r;
    pcgc_piece_coords(to, p, c, &s, &r);
    bool ok = true;
    switch (n->kind) {
    case PCGC_OP_PARTITION:
      c[dim] /= d;
      ok = rpush(R, res, p, src, pcgc_piece_index(ti, c, s, r), ob);
      break;
    case PCGC_OP_COMBINE: {
      int64_t c0 = c[dim];
      for (int64_t j = 0; j < d && ok; j++) {
        c[dim] = c0 * d + j;
        ok = rpush(R, res, p, src, pcgc_piece_index(ti, c, s, r), ib);
      }
      break;
    }
    case PCGC_OP_REPLICATE: ok = rpush(R, res, p, src, pcgc_piece_index(ti, c, s, r / d), ib); break;
    case PCGC_OP_REDUCE:
      for (int64_t j = 0; j < d && ok; j++) ok = rpush(R, res, p, src, pcgc_piece_index(ti, c, s * d + j, r), ob);
      break;
    default: ok = rpush(R, res, p, src, pcgc_piece_index(ti, c, s, r), ob); break;
    }
    if (!ok) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  }
  return PCGC_OK;
}

void pcgc__reads_destroy(pcgc__reads *R) {
  free(R->r);
  free(R->pm.g);
  memset(R, 0, sizeof *R);
}

/* ------------------------------------------------------- cost terms */

static int home(pcgc_view v, int64_t p, int D) { return (int)(((p % D) * (v.stride % D) + v.start) % D); }

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Most pieces of P on one device: p·stride mod D cycles with period
 * D / gcd(stride, D). */
static int64_t max_load(pcgc_view v, int64_t P, int D) {
  int64_t s = v.stride % D, period = s == 0 ? 1 : D / gcd64(s, D);
  return (P + period - 1) / period;
}

static int micro_of(const pcgc_node *n) { return n->out[0].micro > 1 ? n->out[0].micro : 1; }

/* fwd + bwd of one piece of one micro-batch (0 for parallel ops). */
static pcgc_status piece_time(const pcgc_graph *g, const pcgc_node *n, const pcgc_machine *m, double *t,
                              pcgc_error *err) {
  *t = 0;
  if (pcgc_op_class_of(n->kind) == PCGC_CLASS_PARALLEL) return PCGC_OK;
  pcgc_op_time ot;
  pcgc_status st = pcgc_cost_node_time(m, g, n->id, &ot, err);
  if (st == PCGC_OK) *t = ot.fwd + ot.bwd;
  return st;
}

/* Seconds to move the reads r[0..n) of a consumer under views vd (its own)
 * and vs (the producer's). */
static double move_time(const pcgc_machine *m, int D, const pcgc__read *r, int64_t n, pcgc_view vd, pcgc_view vs) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    int a = home(vd, r[i].p, D), b = home(vs, r[i].q, D);
    if (a != b)
      s += pcgc_comm_p2p_time(m, pcgc_machine_node_of(m, a) == pcgc_machine_node_of(m, b), 1, r[i].bytes);
  }
  return s;
}

static bool *find_resident(const pcgc_graph *g, const int *order) {
  bool *res = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *res);
  for (int k = 0; res && k < g->n_nodes; k++) {
    const pcgc_node *n = &g->nodes[order[k]];
    pcgc_op_class c = pcgc_op_class_of(n->kind);
    res[n->id] = c == PCGC_CLASS_SOURCE || (c == PCGC_CLASS_PARALLEL && res[n->in[0].node]);
  }
  return res;
}

double pcgc_views_cost(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m, pcgc_error *err) {
  if (!g || !mp || !m || mp->n_nodes < g->n_nodes) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_views_cost: bad argument");
    return NAN;
  }
  int n = g->n_nodes, D = pcgc_machine_num_devices(m);
  int *order = malloc((size_t)(n ? n : 1) * sizeof *order);
  bool *res = NULL;
  pcgc__reads R = {0};
  double cost = 0;
  pcgc_status st = order ? pcgc_graph_topo_order(g, order, err) : pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  if (st == PCGC_OK && !(res = find_resident(g, order))) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  for (int k = 0; k < n && st == PCGC_OK; k++) {
    const pcgc_node *x = &g->nodes[order[k]];
    if (res[x->id]) continue;
    double t;
    if ((st = piece_time(g, x, m, &t, err)) != PCGC_OK || (st = pcgc__collect_reads(&R, g, res, x, err)) != PCGC_OK) break;
    pcgc_view v = mp->view[x->id];
    double c = t * (double)max_load(v, pcgc_ptensor_pieces(&x->out[0]), D);
    for (int64_t i = 0; i < R.n; i++) c += move_time(m, D, &R.r[i], 1, v, mp->view[R.r[i].src]);
    cost += c * micro_of(x);
  }
  free(order);
  free(res);
  free(R.r);
  free(R.pm.g);
  return st == PCGC_OK ? cost : NAN;
}

/* ------------------------------------------------------- candidates */

/* Does v keep P pieces on distinct devices of [base, base + B)? */
static bool view_fits(pcgc_view v, int64_t P, int base, int B) {
  if (v.start < base || v.start >= base + B) return false;
  if (P <= 1) return true;
  return v.stride >= 1 && v.start + (P - 1) * (int64_t)v.stride < base + B;
}

static bool same_place(pcgc_view a, pcgc_view b, int64_t P, int D) {
  for (int64_t p = 0; p < P && p < D; p++)
    if (home(a, p, D) != home(b, p, D)) return false;
  return true;
}

static void cand_add(pcgc_view *out, int *nc, pcgc_view v, int64_t P, int base, int B, int D, bool force) {
  if (*nc >= MAX_K || (!force && !view_fits(v, P, base, B))) return;
  for (int i = 0; i < *nc; i++)
    if (same_place(out[i], v, P, D)) return;
  out[(*nc)++] = v;
}

/* The greedy's candidates (expert.c), in its order, then every producer's
 * current view, then starts at multiples of P in the block with strides
 * {1, B/P, t, devices per node}. */
static int candidates(const pcgc_graph *g, const bool *res, const pcgc_view *init, const pcgc_node *n, int B, int t,
                      const pcgc_machine *m, pcgc_view *out) {
  int D = pcgc_machine_num_devices(m), nc = 0;
  int base = init[n->id].start / B * B;
  int64_t P = pcgc_ptensor_pieces(&n->out[0]);
  bool even = P <= B && B % P == 0;
  cand_add(out, &nc, even ? (pcgc_view){base, (int)(B / P)} : (pcgc_view){base, 1}, P, base, B, D, true);
  cand_add(out, &nc, init[n->id], P, base, B, D, false);
  for (int i = 0; i < n->n_in; i++)
    if (!res[n->in[i].node]) cand_add(out, &nc, init[n->in[i].node], P, base, B, D, false);
  cand_add(out, &nc, (pcgc_view){base, 1}, P, base, B, D, false);
  if (t > 1) cand_add(out, &nc, (pcgc_view){base, t}, P, base, B, D, false);
  int strides[4] = {1, even ? (int)(B / P) : 1, t, m->devices_per_node};
  for (int64_t s0 = base; s0 < base + B && P <= B; s0 += P)
    for (int k = 0; k < 4; k++) cand_add(out, &nc, (pcgc_view){(int)s0, strides[k] > 0 ? strides[k] : 1}, P, base, B, D, false);
  return nc;
}

int pcgc_views_candidates(const pcgc_graph *g, const pcgc_mapping *init, int node, int block, int t,
                          const pcgc_machine *m, pcgc_view *out) {
  if (!g || !init || !m || !out || node < 0 || node >= g->n_nodes || init->n_nodes < g->n_nodes) return 0;
  int *order = malloc((size_t)g->n_nodes * sizeof *order);
  bool *res = NULL;
  int nc = 0;
  if (order && pcgc_graph_topo_order(g, order, NULL) == PCGC_OK && (res = find_resident(g, order)) && !res[node])
    nc = candidates(g, res, init->view, &g->nodes[node], block < 1 ? 1 : block, t, m, out);
  free(order);
  free(res);
  return nc;
}

/* ------------------------------------------------------------ problem */

/* Pair matrices memoised by content: the edge's reads and both candidate
 * lists. */
typedef struct memo {
  uint64_t key;
  int ks, kd;
  double *cost;   /* [ks][kd] */
  struct memo *spill;
  UT_hash_handle hh;
} memo;

typedef struct medge {
  int src;            /* producer node id */
  const double *cost; /* [K src][K dst], owned by the memo */
} medge;

typedef struct mnode {
  int K;
  pcgc_view cand[MAX_K];
  double unary[MAX_K];
  int e_off, n_e;     /* incoming edges */
  int last;           /* position of its last reader in the order (-1: none) */
  int fixed;          /* candidate it was fixed to by the fallback, -1 */
} mnode;

typedef struct mprob {
  const pcgc_graph *g;
  const pcgc_machine *m;
  int D;
  int *order, *pos;   /* pos: position in order */
  bool *res;
  mnode *nd;
  medge *e;
  int n_e, cap_e;
  memo *memo;
  memo *spill;       /* matrices whose key collided, not cached */
  int max_states;
  pcgc_views_dp_stats *stats;
} mprob;

static void prob_free(mprob *P) {
  memo *it, *tmp;
  HASH_ITER(hh, P->memo, it, tmp) {
    HASH_DEL(P->memo, it);
    free(it->cost);
    free(it);
  }
  while (P->spill) {
    it = P->spill;
    P->spill = it->spill;
    free(it->cost);
    free(it);
  }
  free(P->order);
  free(P->pos);
  free(P->res);
  free(P->nd);
  free(P->e);
}

static int cmp_read(const void *a, const void *b) {
  const pcgc__read *x = a, *y = b;
  if (x->src != y->src) return x->src < y->src ? -1 : 1;
  if (x->p != y->p) return x->p < y->p ? -1 : 1;
  return x->q < y->q ? -1 : x->q > y->q;
}

/* The pair matrix of reads r[0..n) (one producer) between the producer's
 * candidates and the consumer's, looked up in the memo or computed. */
static const double *pair_matrix(mprob *P, const mnode *s, const mnode *d, const pcgc__read *r, int64_t n, double mul) {
  XXH3_state_t *h = XXH3_createState();
  if (!h) return NULL;
  XXH3_64bits_reset(h);
  for (int64_t i = 0; i < n; i++) {
    int64_t pq[2] = {r[i].p, r[i].q};
    XXH3_64bits_update(h, pq, sizeof pq);
    XXH3_64bits_update(h, &r[i].bytes, sizeof r[i].bytes);
  }
  XXH3_64bits_update(h, &mul, sizeof mul);
  XXH3_64bits_update(h, s->cand, (size_t)s->K * sizeof *s->cand);
  XXH3_64bits_update(h, d->cand, (size_t)d->K * sizeof *d->cand);
  uint64_t key = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  memo *e;
  HASH_FIND(hh, P->memo, &key, sizeof key, e);
  if (e && e->ks == s->K && e->kd == d->K) {
    P->stats->memo_hits++;
    return e->cost;
  }
  double *c = malloc((size_t)(s->K * d->K) * sizeof *c);
  memo *mo = malloc(sizeof *mo);
  if (!c || !mo) {
    free(c);
    free(mo);
    return NULL;
  }
  for (int a = 0; a < s->K; a++)
    for (int b = 0; b < d->K; b++) c[a * d->K + b] = mul * move_time(P->m, P->D, r, n, d->cand[b], s->cand[a]);
  P->stats->memo_misses++;
  *mo = (memo){.key = key, .ks = s->K, .kd = d->K, .cost = c};
  if (e) { /* same key, other sizes: a collision; kept aside, uncached */
    mo->spill = P->spill;
    P->spill = mo;
  } else {
    HASH_ADD(hh, P->memo, key, sizeof key, mo);
  }
  return c;
}

static pcgc_status prob_build(mprob *P, const pcgc_graph *g, const pcgc_view *init, int B, int t, pcgc_error *err) {
  int n = g->n_nodes;
  size_t nn = (size_t)(n ? n : 1);
  P->order = malloc(nn * sizeof *P->order);
  P->pos = malloc(nn * sizeof *P->pos);
  P->nd = calloc(nn, sizeof *P->nd);
  if (!P->order || !P->pos || !P->nd) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  pcgc_status st = pcgc_graph_topo_order(g, P->order, err);
  if (st != PCGC_OK) return st;
  if (!(P->res = find_resident(g, P->order))) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  for (int k = 0; k < n; k++) {
    P->pos[P->order[k]] = k;
    P->nd[k].last = -1;
    P->nd[k].fixed = -1;
  }
  pcgc__reads R = {0};
  for (int k = 0; k < n && st == PCGC_OK; k++) {
    const pcgc_node *x = &g->nodes[P->order[k]];
    mnode *N = &P->nd[x->id];
    N->e_off = P->n_e;
    if (P->res[x->id]) continue;
    N->K = candidates(g, P->res, init, x, B, t, P->m, N->cand);
    if (N->K > P->stats->candidates_max) P->stats->candidates_max = N->K;
    P->stats->nodes++;
    double tp;
    int64_t pieces = pcgc_ptensor_pieces(&x->out[0]);
    double mul = micro_of(x);
    if ((st = piece_time(g, x, P->m, &tp, err)) != PCGC_OK) break;
    for (int c = 0; c < N->K; c++) N->unary[c] = mul * tp * (double)max_load(N->cand[c], pieces, P->D);
    if ((st = pcgc__collect_reads(&R, g, P->res, x, err)) != PCGC_OK) break;
    if (R.n > 1) qsort(R.r, (size_t)R.n, sizeof *R.r, cmp_read);
    for (int64_t i = 0; i < R.n;) {
      int64_t j = i;
      while (j < R.n && R.r[j].src == R.r[i].src) j++;
      int src = R.r[i].src;
      if (P->n_e == P->cap_e) {
        int cap = P->cap_e ? 2 * P->cap_e : 256;
        medge *e = realloc(P->e, (size_t)cap * sizeof *e);
        if (!e) {
          st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
          break;
        }
        P->e = e;
        P->cap_e = cap;
      }
      const double *c = pair_matrix(P, &P->nd[src], N, R.r + i, j - i, mul);
      if (!c) {
        st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
        break;
      }
      P->e[P->n_e++] = (medge){src, c};
      N->n_e++;
      if (P->nd[src].last < k) P->nd[src].last = k;
      i = j;
    }
  }
  free(R.r);
  free(R.pm.g);
  return st;
}

/* ---------------------------------------------------------------- DP */

/* One step of the DP, for back-tracking: the frontier before it (node ids,
 * radix = their K), and per state after it, the state before and the view
 * chosen for the placed node (-1 for a fallback step, which places none). */
typedef struct mstep {
  int node;          /* placed node, -1: fallback */
  int n_old;
  int old[8];
  int *prev, *kv;    /* [states after] */
} mstep;

typedef struct frontier {
  int n;
  int id[8];
  int states;
  double *val;
} frontier;

static int states_of(const mprob *P, const int *ids, int n) {
  int s = 1;
  for (int i = 0; i < n; i++) s *= P->nd[ids[i]].K;
  return s;
}

static pcgc_status push_step(mstep **steps, int *n, int *cap, mstep s, pcgc_error *err) {
  if (*n == *cap) {
    int c = *cap ? 2 * *cap : 64;
    mstep *p = realloc(*steps, (size_t)c * sizeof *p);
    if (!p) {
      free(s.prev);
      free(s.kv);
      return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    }
    *steps = p;
    *cap = c;
  }
  (*steps)[(*n)++] = s;
  return PCGC_OK;
}

/* The fallback: fix frontier node j to its view in the cheapest state. */
static pcgc_status fix_oldest(mprob *P, frontier *F, mstep **steps, int *ns, int *cs, pcgc_error *err) {
  int j = 0, best = 0;
  for (int s = 1; s < F->states; s++)
    if (F->val[s] < F->val[best]) best = s;
  int k = best % P->nd[F->id[j]].K; /* node j = 0 is the lowest digit */
  P->nd[F->id[j]].fixed = k;
  mstep st = {.node = -1, .n_old = F->n};
  memcpy(st.old, F->id, sizeof F->id);
  int Kj = P->nd[F->id[j]].K, S2 = F->states / Kj;
  st.prev = malloc((size_t)S2 * sizeof *st.prev);
  st.kv = malloc((size_t)S2 * sizeof *st.kv);
  double *val = malloc((size_t)S2 * sizeof *val);
  if (!st.prev || !st.kv || !val) {
    free(st.prev);
    free(st.kv);
    free(val);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  }
  for (int s2 = 0; s2 < S2; s2++) { /* node j is digit 0: old state = s2 * Kj + k */
    st.prev[s2] = s2 * Kj + k;
    st.kv[s2] = -1;
    val[s2] = F->val[s2 * Kj + k];
  }
  free(F->val);
  F->val = val;
  F->states = S2;
  memmove(F->id, F->id + 1, (size_t)(F->n - 1) * sizeof *F->id);
  F->n--;
  P->stats->fallbacks++;
  return push_step(steps, ns, cs, st, err);
}

/* Places node v at position k: the new frontier is F + v minus the nodes
 * v reads last (and v itself if nothing reads it later). */
static pcgc_status place(mprob *P, frontier *F, int v, int k, mstep **steps, int *ns, int *cs, pcgc_error *err) {
  const mnode *N = &P->nd[v];
  int nn = 0, nid[9];
  for (int i = 0; i < F->n; i++)
    if (P->nd[F->id[i]].last > k) nid[nn++] = F->id[i];
  if (N->last > k) nid[nn++] = v;
  int S2 = states_of(P, nid, nn);
  mstep st = {.node = v, .n_old = F->n};
  memcpy(st.old, F->id, sizeof F->id);
  st.prev = malloc((size_t)S2 * sizeof *st.prev);
  st.kv = malloc((size_t)S2 * sizeof *st.kv);
  double *val = malloc((size_t)S2 * sizeof *val);
  if (!st.prev || !st.kv || !val) {
    free(st.prev);
    free(st.kv);
    free(val);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  }
  for (int s = 0; s < S2; s++) val[s] = INFINITY, st.prev[s] = 0, st.kv[s] = 0;
  /* where each edge's producer sits: frontier digit, or fixed */
  int fpos[PCGC_VARIADIC];
  for (int e = 0; e < N->n_e; e++) {
    fpos[e] = -1;
    for (int i = 0; i < F->n; i++)
      if (F->id[i] == P->e[N->e_off + e].src) fpos[e] = i;
  }
  int dig[9];
  for (int s = 0; s < F->states; s++) {
    for (int i = 0, r = s; i < F->n; i++) {
      dig[i] = r % P->nd[F->id[i]].K;
      r /= P->nd[F->id[i]].K;
    }
    for (int kv = 0; kv < N->K; kv++) {
      double c = F->val[s] + N->unary[kv];
      for (int e = 0; e < N->n_e; e++) {
        const medge *E = &P->e[N->e_off + e];
        /* a producer leaves the frontier after its last reader, or fixed */
        int ks = fpos[e] >= 0 ? dig[fpos[e]] : P->nd[E->src].fixed;
        assert(ks >= 0);
        c += E->cost[ks * N->K + kv];
      }
      int s2 = 0, mul = 1;
      for (int i = 0, j = 0; i < nn; i++) {
        int d;
        if (nid[i] == v) d = kv;
        else {
          while (F->id[j] != nid[i]) j++;
          d = dig[j];
        }
        s2 += d * mul;
        mul *= P->nd[nid[i]].K;
      }
      if (c < val[s2]) {
        val[s2] = c;
        st.prev[s2] = s;
        st.kv[s2] = kv;
      }
    }
  }
  free(F->val);
  F->val = val;
  F->states = S2;
  F->n = nn;
  memcpy(F->id, nid, (size_t)nn * sizeof *nid);
  if (S2 > P->stats->max_states) P->stats->max_states = S2;
  return push_step(steps, ns, cs, st, err);
}

static pcgc_status run_dp(mprob *P, pcgc_view *out, double *best, pcgc_error *err) {
  const pcgc_graph *g = P->g;
  frontier F = {.n = 0, .states = 1, .val = malloc(sizeof(double))};
  mstep *steps = NULL;
  int ns = 0, cs = 0;
  pcgc_status st = F.val ? PCGC_OK : pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  if (F.val) F.val[0] = 0;
  for (int k = 0; k < g->n_nodes && st == PCGC_OK; k++) {
    int v = P->order[k];
    if (P->res[v]) continue;
    /* the frontier after this step must stay within MAX_STATES states (and
     * 7 nodes): fix its oldest nodes until it does */
    for (;;) {
      int nid[9], nn = 0;
      for (int i = 0; i < F.n; i++)
        if (P->nd[F.id[i]].last > k) nid[nn++] = F.id[i];
      if (P->nd[v].last > k) nid[nn++] = v;
      if ((states_of(P, nid, nn) <= P->max_states && nn <= 7) || F.n == 0) break;
      if ((st = fix_oldest(P, &F, &steps, &ns, &cs, err)) != PCGC_OK) break;
    }
    if (st == PCGC_OK) st = place(P, &F, v, k, &steps, &ns, &cs, err);
  }
  if (st == PCGC_OK) {
    /* every node has left the frontier: one state */
    *best = F.val[0];
    int s = 0;
    for (int i = ns - 1; i >= 0; i--) {
      const mstep *S = &steps[i];
      if (S->node >= 0) out[S->node] = P->nd[S->node].cand[S->kv[s]];
      int so = S->prev[s];
      for (int j = 0, r = so; j < S->n_old; j++) {
        const mnode *N = &P->nd[S->old[j]];
        out[S->old[j]] = N->cand[r % N->K];
        r /= N->K;
      }
      s = so;
    }
  }
  for (int i = 0; i < ns; i++) {
    free(steps[i].prev);
    free(steps[i].kv);
  }
  free(steps);
  free(F.val);
  return st;
}

pcgc_status pcgc_views_dp(const pcgc_graph *g, const pcgc_mapping *init, int block, int t, const pcgc_machine *m,
                          int max_states, pcgc_mapping *out, pcgc_views_dp_stats *stats, pcgc_error *err) {
  if (out) memset(out, 0, sizeof *out);
  pcgc_views_dp_stats dummy;
  if (!stats) stats = &dummy;
  memset(stats, 0, sizeof *stats);
  if (!g || !init || !m || !out || init->n_nodes < g->n_nodes)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_views_dp: bad argument");
  mprob P = {.g = g, .m = m, .D = pcgc_machine_num_devices(m), .stats = stats,
             .max_states = max_states > 0 ? max_states : MAX_STATES};
  pcgc_status st = pcgc_mapping_init(out, g->n_nodes, (pcgc_view){0, 1}, err);
  if (st == PCGC_OK) {
    memcpy(out->view, init->view, (size_t)g->n_nodes * sizeof *out->view);
    st = prob_build(&P, g, init->view, block < 1 ? 1 : block, t, err);
  }
  double dp = INFINITY;
  if (st == PCGC_OK) st = run_dp(&P, out->view, &dp, err);
  prob_free(&P);
  if (st == PCGC_OK) {
    stats->cost_init = pcgc_views_cost(g, init, m, err);
    stats->cost = pcgc_views_cost(g, out, m, err);
    if (isnan(stats->cost_init) || isnan(stats->cost)) st = err ? err->status : PCGC_ERR_INVALID;
    else if (!(stats->cost < stats->cost_init)) { /* the DP did not beat the initial views: keep them */
      memcpy(out->view, init->view, (size_t)g->n_nodes * sizeof *out->view);
      stats->cost = stats->cost_init;
      stats->kept_init = true;
    }
    stats->dp_cost = dp;
  }
  if (st != PCGC_OK) pcgc_mapping_destroy(out);
  return st;
}
