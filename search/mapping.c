/*
 * mapping.c — device mapping by dynamic programming (search.h, "Device
 * mapping", defines the cost, the memory and the decomposition): every
 * computed node's view chosen jointly.
 *
 * Problem. Per node, up to PCGC_VIEWS_MAX_CANDIDATES views inside its stage
 * block (pcgc_views_candidates); per (node, view) a node term and the set
 * of device groups the pieces occupy; per (producer, consumer) edge a pair
 * matrix over their candidates. The DP itself runs over a series-parallel
 * decomposition of the graph (mapping_sp.c).
 *
 * Memo. What a node's terms need — the time of one piece and the list of
 * input pieces each piece reads — depends on its content (op, attributes,
 * input and output types, the machine), not on which graph holds it, so it
 * is memoised by an XXH3-128 of that content; a pair matrix by the
 * consumer's content, the input slot and both candidate lists. The
 * repeated layers of a transformer then cost one entry per distinct layer
 * node, and the candidates of pcgc_compile (one memo for all of them)
 * share what their graphs have in common. The costs of init and of the
 * result come from the same terms, not from a second pass over the graph.
 *
 * Memory. The DP minimises time; memory per device (search.h) is measured
 * on its result. When that overfills a device, a node is fixed to the
 * candidate that moves the most bytes off the overfull devices, and the DP
 * re-solves the rest around it; again until the views fit (MEMORY_FIXES
 * nodes at most, while the fixes cut the overflow fast enough to finish in
 * time). The DP then tends to pile the rest onto the devices the fixed
 * node left, so single moves of the fixed nodes and their neighbours
 * follow that lower the cost and keep the views fitting (MEMORY_MOVES at
 * most). Penalties on the DP's node terms do not work: a linear penalty
 * makes every node flee the full devices together, and the whole graph
 * fits no better elsewhere. Not tried when a node's piece alone outgrows a
 * device, or the devices the candidates use hold less, together, than the
 * result needs. Moves are estimated by a node's bytes per piece and
 * measured before they are made.
 */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>
#include <xxhash.h>

#include "mapping_internal.h"

#define MAX_K PCGC_VIEWS_MAX_CANDIDATES
#define MAX_MASKS 4      /* device sets per pair of end views, by default */
#define MEMORY_FIXES 8   /* nodes the memory repair fixes, at most */
#define MEMORY_MOVES 16  /* and moves it makes once the views fit (of fixed nodes and their neighbours) */

/* ------------------------------------------------------- cost terms */

/* One read of a node's piece p: `bytes` of piece q of input `slot`. */
typedef pcgc__vread vread;

static int home(pcgc_view v, int64_t p, int D) { return pcgc_view_device(v, p, D); }

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

/* The device group of device d: itself on up to 64 devices. */
static int group_of(int d, int D) { return D <= 64 ? d : (int)((int64_t)d * 64 / D); }

static uint64_t devices_of(pcgc_view v, int64_t P, int D) {
  uint64_t m = 0;
  for (int64_t p = 0; p < P && p < D; p++) m |= UINT64_C(1) << group_of(home(v, p, D), D);
  return m;
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

/* Seconds to move reads r[0..n) of a consumer under views vd (its own)
 * and vs (the producer's), each of its bytes times `sc` (vscale). */
static double move_time(const pcgc_machine *m, int D, const vread *r, int64_t n, pcgc_view vd, pcgc_view vs,
                        double sc) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    int a = home(vd, r[i].p, D), b = home(vs, r[i].q, D);
    if (a != b)
      s += pcgc_comm_p2p_time(m, pcgc_machine_node_of(m, a) == pcgc_machine_node_of(m, b), 1, r[i].bytes * sc);
  }
  return s;
}

static bool *find_resident(const pcgc_graph *g, const int *order) {
  bool *res = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *res);
  if (res) pcgc_resident_nodes(g, order, res);
  return res;
}

/* ------------------------------------------------------- candidates */

/* Does v keep P pieces on distinct devices of [base, base + B)? */
static bool view_fits(pcgc_view v, int64_t P, int base, int B) {
  if (v.start < base || v.start >= base + B) return false;
  if (P <= 1) return true;
  return v.stride >= 1 && v.start + (P - 1) * (int64_t)v.stride < base + B;
}

/* Do a and b put pieces 0..P) on the same devices? home(v, p) is
 * (p stride + start) mod D for p < D: two such sequences agree everywhere
 * once they agree at 0 and (for P > 1) at 1, which is O(1) where a walk over
 * the pieces cost O(P) (14% of a 1,024-device search's CPU). */
static bool same_place(pcgc_view a, pcgc_view b, int64_t P, int D) {
  if (P <= 0 || D <= 0) return true;
  if (home(a, 0, D) != home(b, 0, D)) return false;
  return P == 1 || D == 1 || home(a, 1, D) == home(b, 1, D);
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

/* ------------------------------------------------------------- memo */

/* What a node's terms depend on, by content. */
typedef struct mnode {
  XXH128_hash_t key;
  double time;         /* fwd + bwd of one piece of one micro-batch */
  vread *r;            /* every read, by input slot: slot i's are r[off[i] .. off[i + 1]) */
  int64_t *off;
  UT_hash_handle hh;
} mnode;

/* A pair matrix: [ks][kd]. */
typedef struct mpair {
  XXH128_hash_t key;
  double *cost;
  UT_hash_handle hh;
} mpair;

struct pcgc_views_memo {
  pthread_mutex_t lock;  /* the search's worker threads share one memo */
  mnode *nodes;
  mpair *pairs;
  int64_t hits, misses;
  size_t bytes;
};

pcgc_status pcgc_views_memo_new(pcgc_views_memo **out, pcgc_error *err) {
  if (!out) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_views_memo_new: bad argument");
  *out = calloc(1, sizeof **out);
  if (!*out) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  pthread_mutex_init(&(*out)->lock, NULL);
  return PCGC_OK;
}

void pcgc_views_memo_free(pcgc_views_memo *memo) {
  if (!memo) return;
  mnode *n, *tn;
  HASH_ITER(hh, memo->nodes, n, tn) {
    HASH_DEL(memo->nodes, n);
    free(n->r);
    free(n->off);
    free(n);
  }
  mpair *p, *tp;
  HASH_ITER(hh, memo->pairs, p, tp) {
    HASH_DEL(memo->pairs, p);
    free(p->cost);
    free(p);
  }
  pthread_mutex_destroy(&memo->lock);
  free(memo);
}

pcgc_views_memo_stats pcgc_views_memo_get_stats(const pcgc_views_memo *memo) {
  pcgc_views_memo_stats s = {0};
  if (!memo) return s;
  pthread_mutex_lock((pthread_mutex_t *)&memo->lock);
  s.hits = memo->hits;
  s.misses = memo->misses;
  s.nodes = HASH_COUNT(memo->nodes);
  s.matrices = HASH_COUNT(memo->pairs);
  s.bytes = memo->bytes;
  pthread_mutex_unlock((pthread_mutex_t *)&memo->lock);
  return s;
}

/* Content keys: fields written one by one (structs have padding). */
#define KEY_MAX (8 + PCGC_MAX_ATTRS * (3 + PCGC_MAX_INTS) + 2 * PCGC_VARIADIC * (6 + 2 * PCGC_MAX_RANK))

typedef struct keybuf {
  int64_t v[KEY_MAX];
  int n;
} keybuf;

static void kput(keybuf *k, int64_t x) {
  assert(k->n < KEY_MAX);
  k->v[k->n++] = x;
}

static void kput_f(keybuf *k, double f) {
  int64_t x;
  memcpy(&x, &f, sizeof x);
  kput(k, x);
}

static void kput_hash(keybuf *k, XXH128_hash_t h) {
  kput(k, (int64_t)h.low64);
  kput(k, (int64_t)h.high64);
}

static void kput_type(keybuf *k, const pcgc_ptensor *t) {
  kput(k, t->dtype);
  kput(k, t->rank);
  for (int d = 0; d < t->rank; d++) {
    kput(k, t->dims[d]);
    kput(k, t->degree[d]);
  }
  kput(k, t->sum);
  kput(k, t->replica);
  kput(k, t->micro);
  kput(k, t->micro_dim);
}

static XXH128_hash_t kdigest(const keybuf *k) { return XXH3_128bits(k->v, (size_t)k->n * sizeof *k->v); }

static XXH128_hash_t node_key(const pcgc_graph *g, const pcgc_node *n, XXH128_hash_t machine) {
  keybuf k;
  k.n = 0;
  kput_hash(&k, machine);
  kput(&k, n->kind);
  for (int i = 0; i < pcgc_op_num_attrs(n->kind); i++) {
    pcgc_ints l = pcgc_attrs_ints_at(n->attrs, i);
    kput(&k, pcgc_attrs_int_at(n->attrs, i)); /* a float's bits: .i and .f share them */
    kput(&k, l.n);
    for (int j = 0; j < l.n; j++) kput(&k, l.v[j]);
  }
  kput(&k, n->n_in);
  for (int i = 0; i < n->n_in; i++) kput_type(&k, pcgc_graph_ref_type(g, n->in[i]));
  kput(&k, n->n_out);
  for (int i = 0; i < n->n_out; i++) kput_type(&k, &n->out[i]);
  return kdigest(&k);
}

static void kput_link(keybuf *k, const pcgc_link *l) {
  kput_f(k, l->bandwidth);
  kput_f(k, l->latency);
  kput(k, l->shared);
}

/* Everything of m that times pieces and transfers. */
static XXH128_hash_t machine_key(const pcgc_machine *m) {
  keybuf k;
  k.n = 0;
  kput(&k, m->nodes);
  kput(&k, m->devices_per_node);
  kput(&k, m->device.kind);
  for (int i = 0; i < PCGC_DTYPE_COUNT; i++) kput_f(&k, m->device.flops[i]);
  kput_f(&k, m->device.memory_bandwidth);
  kput_f(&k, m->device.launch_overhead);
  kput_link(&k, &m->intra);
  kput_link(&k, &m->inter);
  return kdigest(&k);
}

typedef struct vreads {
  vread *r;
  int64_t n, cap;
} vreads;

static bool push_vread(void *ctx, int64_t p, int slot, int64_t q, double bytes) {
  vreads *V = ctx;
  if (V->n == V->cap) {
    int64_t cap = V->cap ? 2 * V->cap : 256;
    vread *r = realloc(V->r, (size_t)cap * sizeof *r);
    if (!r) return false;
    V->r = r;
    V->cap = cap;
  }
  V->r[V->n++] = (vread){p, q, slot, bytes};
  return true;
}

/* A new entry for node n: its piece time and its reads, grouped by slot
 * (a counting sort keeps each slot's reads in piece order). */
static mnode *node_compute(const pcgc_graph *g, const pcgc_node *n, const pcgc_machine *m, pcgc_piece_map *pm,
                           pcgc_error *err) {
  mnode *e = calloc(1, sizeof *e);
  vreads V = {0};
  int64_t *off = calloc((size_t)n->n_in + 1, sizeof *off);
  vread *r = NULL;
  pcgc_status st = e && off ? PCGC_OK : pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  if (st == PCGC_OK) st = piece_time(g, n, m, &e->time, err);
  if (st == PCGC_OK) st = pcgc_piece_reads(g, n, NULL, pm, push_vread, &V, err);
  if (st == PCGC_OK && !(r = malloc((size_t)(V.n ? V.n : 1) * sizeof *r)))
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  if (st != PCGC_OK) {
    free(e);
    free(off);
    free(V.r);
    return NULL;
  }
  for (int64_t i = 0; i < V.n; i++) off[V.r[i].slot + 1]++;
  for (int i = 0; i < n->n_in; i++) off[i + 1] += off[i];
  int64_t *at = calloc((size_t)n->n_in + 1, sizeof *at);
  if (!at) {
    free(e);
    free(off);
    free(V.r);
    free(r);
    pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    return NULL;
  }
  memcpy(at, off, (size_t)n->n_in * sizeof *at);
  for (int64_t i = 0; i < V.n; i++) r[at[V.r[i].slot]++] = V.r[i];
  free(at);
  free(V.r);
  e->r = r;
  e->off = off;
  return e;
}

/* ---------------------------------------------------------- problem */

typedef struct vbuild {
  pcgc__vprob P;
  const pcgc_graph *g;
  const pcgc_machine *m;
  int D;
  int *order, *pos;
  bool *res;
  bool *weight;             /* resident and from a float weight */
  int *readers;             /* (computed consumer, slot) pairs that read the node */
  const mnode **mn;         /* [n] computed nodes' entries, owned by the memo */
  pcgc_views_memo *memo;
  bool bf16;                /* bf16 storage (vscale) */
  int64_t hits, misses;     /* this build's lookups of the memo */
  XXH128_hash_t machine;
  pcgc_piece_map pm;
  double **own;             /* summed matrices (a producer read through two slots) */
  int n_own;
  int cap_e;
} vbuild;

static void build_free(vbuild *B) {
  free(B->order);
  free(B->pos);
  free(B->res);
  free(B->weight);
  free(B->readers);
  free(B->mn);
  free(B->P.nd);
  free(B->P.e);
  free(B->pm.g);
  for (int i = 0; i < B->n_own; i++) free(B->own[i]);
  free(B->own);
  memset(B, 0, sizeof *B);
}

/* Node n's entry in memo M (made and added on a miss; *hit says which). */
static const mnode *memo_node(pcgc_views_memo *M, const pcgc_graph *g, const pcgc_node *n, const pcgc_machine *m,
                              XXH128_hash_t machine, pcgc_piece_map *pm, bool *hit, pcgc_error *err) {
  XXH128_hash_t key = node_key(g, n, machine);
  mnode *e, *had;
  pthread_mutex_lock(&M->lock);
  HASH_FIND(hh, M->nodes, &key, sizeof key, e);
  if (e) M->hits++;
  pthread_mutex_unlock(&M->lock);
  *hit = e != NULL;
  if (e) return e;
  if (!(e = node_compute(g, n, m, pm, err))) return NULL;
  e->key = key;
  pthread_mutex_lock(&M->lock);
  HASH_FIND(hh, M->nodes, &key, sizeof key, had); /* another thread's, made meanwhile */
  if (!had) {
    HASH_ADD(hh, M->nodes, key, sizeof key, e);
    M->misses++;
    M->bytes += sizeof *e + (size_t)e->off[n->n_in] * sizeof *e->r + (size_t)(n->n_in + 1) * sizeof *e->off;
  }
  pthread_mutex_unlock(&M->lock);
  if (had) {
    free(e->r);
    free(e->off);
    free(e);
    return had;
  }
  return e;
}

static const mnode *node_get(vbuild *B, const pcgc_node *n, pcgc_error *err) {
  bool hit = false;
  const mnode *e = memo_node(B->memo, B->g, n, B->m, B->machine, &B->pm, &hit, err);
  B->hits += e && hit;
  B->misses += e && !hit;
  return e;
}

pcgc_status pcgc__views_memo_reads(pcgc_views_memo *M, const pcgc_graph *g, const pcgc_node *n, const pcgc_machine *m,
                                   const pcgc__vread **r, const int64_t **off, pcgc_error *err) {
  pcgc_piece_map pm = {0};
  bool hit;
  const mnode *x = memo_node(M, g, n, m, machine_key(m), &pm, &hit, err);
  free(pm.g);
  if (!x) return err && err->status != PCGC_OK ? err->status : PCGC_ERR_NOMEM;
  *r = x->r;
  *off = x->off;
  return PCGC_OK;
}

/* The bytes of value `in` as stored over the bytes of its type: 1/2 for
 * an activation under bf16 storage (pcgc_value_dtype), else 1. The memo
 * keeps reads at their type's bytes; this scales them where used. */
static double vscale(const vbuild *B, pcgc_ref in) {
  return B->bf16 ? pcgc_value_scale(B->g, in.node, in.slot, true) : 1;
}

/* The pair matrix of consumer x's input `slot` (from producer s). */
static const double *pair_get(vbuild *B, const pcgc_node *x, int slot) {
  const pcgc__vnode *S = &B->P.nd[x->in[slot].node], *N = &B->P.nd[x->id];
  const mnode *M = B->mn[x->id];
  keybuf k;
  k.n = 0;
  double sc = vscale(B, x->in[slot]);
  kput_hash(&k, M->key);
  kput(&k, slot);
  kput_f(&k, sc);
  kput(&k, S->K);
  for (int a = 0; a < S->K; a++) kput(&k, (int64_t)S->cand[a].start << 32 | (uint32_t)S->cand[a].stride);
  kput(&k, N->K);
  for (int b = 0; b < N->K; b++) kput(&k, (int64_t)N->cand[b].start << 32 | (uint32_t)N->cand[b].stride);
  XXH128_hash_t key = kdigest(&k);
  pcgc_views_memo *Mm = B->memo;
  mpair *e, *had;
  pthread_mutex_lock(&Mm->lock);
  HASH_FIND(hh, Mm->pairs, &key, sizeof key, e);
  if (e) Mm->hits++;
  pthread_mutex_unlock(&Mm->lock);
  B->hits += e != NULL;
  B->misses += e == NULL;
  if (e) return e->cost;
  double *c = malloc((size_t)(S->K * N->K) * sizeof *c);
  if (!c || !(e = malloc(sizeof *e))) {
    free(c);
    return NULL;
  }
  const vread *r = M->r + M->off[slot];
  int64_t n = M->off[slot + 1] - M->off[slot];
  double mul = micro_of(x);
  for (int a = 0; a < S->K; a++)
    for (int b = 0; b < N->K; b++) c[a * N->K + b] = mul * move_time(B->m, B->D, r, n, N->cand[b], S->cand[a], sc);
  *e = (mpair){.key = key, .cost = c};
  pthread_mutex_lock(&Mm->lock);
  HASH_FIND(hh, Mm->pairs, &key, sizeof key, had); /* another thread's, made meanwhile */
  if (!had) {
    HASH_ADD(hh, Mm->pairs, key, sizeof key, e);
    Mm->misses++;
    Mm->bytes += sizeof *e + (size_t)(S->K * N->K) * sizeof *c;
  }
  pthread_mutex_unlock(&Mm->lock);
  if (had) {
    free(c);
    free(e);
    return had->cost;
  }
  return c;
}

static bool edge_push(vbuild *B, pcgc__vedge e) {
  if (B->P.n_e == B->cap_e) {
    int cap = B->cap_e ? 2 * B->cap_e : 256;
    pcgc__vedge *p = realloc(B->P.e, (size_t)cap * sizeof *p);
    if (!p) return false;
    B->P.e = p;
    B->cap_e = cap;
  }
  B->P.e[B->P.n_e++] = e;
  return true;
}

/* x's edge from src: the pair matrix of the slot reading it, or the sum
 * over the slots when it reads src more than once. */
static pcgc_status edge_add(vbuild *B, const pcgc_node *x, int slot, pcgc_error *err) {
  int src = x->in[slot].node;
  const double *c = pair_get(B, x, slot);
  double *sum = NULL;
  int size = B->P.nd[src].K * B->P.nd[x->id].K;
  for (int j = slot + 1; j < x->n_in && c; j++) {
    if (x->in[j].node != src) continue;
    if (!sum) {
      double **own = realloc(B->own, (size_t)(B->n_own + 1) * sizeof *own);
      if (!own || !(sum = malloc((size_t)size * sizeof *sum))) {
        if (own) B->own = own;
        return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
      }
      B->own = own;
      B->own[B->n_own++] = sum;
      memcpy(sum, c, (size_t)size * sizeof *sum);
    }
    const double *cj = pair_get(B, x, j);
    if (!cj) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    for (int i = 0; i < size; i++) sum[i] += cj[i];
  }
  if (!c || !edge_push(B, (pcgc__vedge){src, x->id, sum ? sum : c}))
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  return PCGC_OK;
}

/* Node x's candidates (only view[x] when `single`) and their terms. */
static pcgc_status node_add(vbuild *B, const pcgc_node *x, const pcgc_view *view, int block, int t, bool single,
                            pcgc_error *err) {
  pcgc__vnode *N = &B->P.nd[x->id];
  if (!(B->mn[x->id] = node_get(B, x, err))) return err ? err->status : PCGC_ERR_NOMEM;
  N->fixed = -1;
  if (single) {
    N->K = 1;
    N->cand[0] = view[x->id];
  } else {
    N->K = candidates(B->g, B->res, view, x, block, t, B->m, N->cand);
  }
  int64_t P = pcgc_ptensor_pieces(&x->out[0]);
  double mul = micro_of(x) * B->mn[x->id]->time;
  for (int c = 0; c < N->K; c++) {
    N->unary[c] = mul * (double)max_load(N->cand[c], P, B->D);
    N->extra[c] = 0;
    N->mask[c] = devices_of(N->cand[c], P, B->D);
  }
  for (int i = 0; i < x->n_in; i++) {
    int src = x->in[i].node;
    bool seen = B->res[src];
    for (int j = 0; j < i && !seen; j++) seen = x->in[j].node == src;
    if (seen) continue;
    pcgc_status st = edge_add(B, x, i, err);
    if (st != PCGC_OK) return st;
  }
  return PCGC_OK;
}

/* The problem of g's views: candidates around `view` in blocks of `block`
 * devices, or only `view` itself when `single`. */
static pcgc_status build(vbuild *B, const pcgc_graph *g, const pcgc_machine *m, pcgc_views_memo *memo,
                         const pcgc_view *view, int block, int t, bool single, bool bf16, pcgc_error *err) {
  memset(B, 0, sizeof *B);
  B->bf16 = bf16;
  int n = g->n_nodes;
  size_t nn = (size_t)(n ? n : 1);
  B->g = g;
  B->m = m;
  B->D = pcgc_machine_num_devices(m);
  B->memo = memo;
  B->machine = machine_key(m);
  B->order = malloc(nn * sizeof *B->order);
  B->pos = malloc(nn * sizeof *B->pos);
  B->weight = calloc(nn, sizeof *B->weight);
  B->readers = calloc(nn, sizeof *B->readers);
  B->mn = calloc(nn, sizeof *B->mn);
  B->P.nd = calloc(nn, sizeof *B->P.nd);
  if (!B->order || !B->pos || !B->weight || !B->readers || !B->mn || !B->P.nd)
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  pcgc_status st = pcgc_graph_topo_order(g, B->order, err);
  if (st != PCGC_OK) return st;
  if (!(B->res = find_resident(g, B->order))) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  B->P = (pcgc__vprob){.n = n, .order = B->order, .pos = B->pos, .res = B->res, .nd = B->P.nd};
  for (int k = 0; k < n; k++) {
    const pcgc_node *x = &g->nodes[B->order[k]];
    B->pos[x->id] = k;
    if (B->res[x->id] && pcgc_op_class_of(x->kind) == PCGC_CLASS_SOURCE)
      B->weight[x->id] = x->kind == PCGC_OP_WEIGHT && pcgc_dtype_is_float(x->out[0].dtype);
    else if (B->res[x->id])
      B->weight[x->id] = B->weight[x->in[0].node];
    else
      for (int i = 0; i < x->n_in; i++) B->readers[x->in[i].node]++;
  }
  for (int k = 0; k < n && st == PCGC_OK; k++) {
    const pcgc_node *x = &g->nodes[B->order[k]];
    if (!B->res[x->id]) st = node_add(B, x, view, block < 1 ? 1 : block, t, single, err);
  }
  return st;
}

/* ----------------------------------------------------------- memory */

/* A set of (producer and slot, piece, device) triples (uthash), its
 * entries taken from blocks that never move. */
typedef struct seen_e {
  uint64_t key[2];
  UT_hash_handle hh;
} seen_e;

typedef struct seen_block {
  struct seen_block *next;
  int n;
  seen_e e[1024];
} seen_block;

typedef struct pset {
  seen_e *set;
  seen_block *blocks;
  bool nomem;
} pset;

/* True when (a, b) was not in the set. */
static bool pset_add(pset *s, uint64_t a, uint64_t b) {
  uint64_t key[2] = {a, b};
  seen_e *e;
  HASH_FIND(hh, s->set, key, sizeof key, e);
  if (e || s->nomem) return false;
  if (!s->blocks || s->blocks->n == 1024) {
    seen_block *k = malloc(sizeof *k);
    if (!k) {
      s->nomem = true;
      return false;
    }
    k->next = s->blocks;
    k->n = 0;
    s->blocks = k;
  }
  e = &s->blocks->e[s->blocks->n++];
  memcpy(e->key, key, sizeof key);
  HASH_ADD(hh, s->set, key, sizeof e->key, e);
  return true;
}

static void pset_free(pset *s) {
  HASH_CLEAR(hh, s->set);
  while (s->blocks) {
    seen_block *k = s->blocks;
    s->blocks = k->next;
    free(k);
  }
}

static double out_kept(const vbuild *B, const pcgc_node *x) {
  if (!pcgc_cost_efficiency(x->kind)->kernel || pcgc_op_class_of(x->kind) == PCGC_CLASS_LOSS) return 0;
  double b = 0;
  for (int k = 0; k < x->n_out; k++) b += pcgc_cost_piece_bytes(&x->out[k]) * vscale(B, (pcgc_ref){x->id, k});
  return b;
}

/* Weight (w) and activation (a) bytes node x puts on each device under
 * views `view`, pieces already counted on a device skipped. */
static void node_memory(const vbuild *B, const pcgc_node *x, const pcgc_view *view, pset *seen, double *w, double *a) {
  int D = B->D, mx = micro_of(x);
  pcgc_view v = view[x->id];
  int64_t P = pcgc_ptensor_pieces(&x->out[0]);
  double kept = out_kept(B, x) * mx;
  for (int64_t p = 0; p < P && kept > 0; p++) a[home(v, p, D)] += kept;
  bool relayout = pcgc_op_class_of(x->kind) == PCGC_CLASS_PARALLEL, spread = max_load(v, P, D) == 1;
  const mnode *M = B->mn[x->id];
  for (int slot = 0; slot < x->n_in; slot++) {
    pcgc_ref in = x->in[slot];
    const vread *r = M->r + M->off[slot], *end = M->r + M->off[slot + 1];
    /* x's pieces on distinct devices and the only reader: nothing to share */
    bool alone = spread && B->readers[in.node] == 1;
    uint64_t who = ((uint64_t)(uint32_t)in.node << 8 | (uint8_t)in.slot) << 24;
    double ms = micro_of(&B->g->nodes[in.node]) * vscale(B, in); /* (1 for sources) */
    if (B->res[in.node] && B->weight[in.node]) {
      int64_t rep = pcgc_graph_ref_type(B->g, in)->replica;
      for (; r < end; r++) {
        int d = home(v, r->p, D);
        if (alone || pset_add(seen, who | (uint64_t)d, (uint64_t)(r->q / (rep > 0 ? rep : 1)))) w[d] += r->bytes;
      }
    } else if (B->res[in.node]) {
      for (; r < end; r++) {
        int d = home(v, r->p, D);
        if (alone || pset_add(seen, who | (uint64_t)d, (uint64_t)r->q)) a[d] += r->bytes * ms;
      }
    } else {
      for (; r < end; r++) {
        int d = home(v, r->p, D);
        if (home(view[in.node], r->q, D) == d) continue;
        if (relayout) a[d] += r->bytes * mx * vscale(B, in); /* each output piece receives its own part */
        else if (alone || pset_add(seen, who | (uint64_t)d, (uint64_t)r->q)) a[d] += r->bytes * ms;
      }
    }
  }
}

/* The largest memory of a device under views `view` (search.h); per
 * device into per_dev[0..D) when not NULL. NAN when memory runs out. */
static double memory_of(const vbuild *B, const pcgc_view *view, pcgc_optim_kind opt, double *per_dev) {
  int D = B->D;
  double *w = calloc((size_t)D, sizeof *w), *a = calloc((size_t)D, sizeof *a);
  pset seen = {0};
  for (int v = 0; v < B->P.n && w && a; v++)
    if (!B->res[v]) node_memory(B, &B->g->nodes[v], view, &seen, w, a);
  pset_free(&seen);
  if (!w || !a || seen.nomem) {
    free(w);
    free(a);
    return NAN;
  }
  double mx = 0;
  for (int d = 0; d < D; d++) {
    double t = pcgc_cost_memory(opt, w[d], a[d], 0).total;
    if (per_dev) per_dev[d] = t;
    if (t > mx) mx = t;
  }
  free(w);
  free(a);
  return mx;
}

/* Bytes per piece of node x, roughly (no sharing between pieces or with
 * other nodes, nothing received): what moving a piece of x moves, for the
 * memory repair's estimates. */
static double piece_bytes_of(const vbuild *B, const pcgc_node *x, pcgc_optim_kind opt) {
  const mnode *M = B->mn[x->id];
  int64_t P = pcgc_ptensor_pieces(&x->out[0]);
  double per_w = pcgc_cost_memory(opt, 1, 0, 0).total, b = out_kept(B, x) * micro_of(x) * (double)P;
  for (int64_t i = 0; i < M->off[x->n_in]; i++) {
    int src = x->in[M->r[i].slot].node;
    if (B->res[src]) b += M->r[i].bytes * (B->weight[src] ? per_w : micro_of(&B->g->nodes[src]));
  }
  return b / (double)(P > 0 ? P : 1);
}

/* ------------------------------------------------------------ solve */

static void views_of(const vbuild *B, const int *choice, pcgc_view *view) {
  for (int v = 0; v < B->P.n; v++)
    if (!B->res[v]) view[v] = B->P.nd[v].cand[choice[v]];
}

/* Init's view of every computed node among its candidates; false when one
 * is not there. */
static bool locate(const vbuild *B, const pcgc_view *init, int *choice) {
  for (int v = 0; v < B->P.n; v++) {
    if (B->res[v]) continue;
    const pcgc__vnode *N = &B->P.nd[v];
    int64_t P = pcgc_ptensor_pieces(&B->g->nodes[v].out[0]);
    choice[v] = -1;
    for (int c = 0; c < N->K && choice[v] < 0; c++)
      if (same_place(N->cand[c], init[v], P, B->D)) choice[v] = c;
    if (choice[v] < 0) return false;
  }
  return true;
}

typedef struct outcome {
  pcgc_view *view;
  double cost, memory;
} outcome;

/* The memory repair: from the DP's views, one node at a time is fixed to
 * the candidate that moves the most bytes off the overfull devices (less
 * what it pushes past capacity elsewhere; by its bytes per piece), and the
 * DP re-solves the rest around it, until the views fit. */
typedef struct repair {
  vbuild *B;
  const pcgc__sp *S;
  pcgc_optim_kind opt;
  double cap;
  int *choice;
  pcgc_view *view;
  double *mem, *bpp; /* [D] measured memory now; [n] bytes per piece */
} repair;

static double fullest(const double *mem, int D) {
  double m = 0;
  for (int d = 0; d < D; d++) m = fmax(m, mem[d]);
  return m;
}

/* est: the memory with node x on candidate c, by its bytes per piece. */
static void estimate(const repair *R, int x, int c, double *est) {
  const pcgc__vnode *N = &R->B->P.nd[x];
  int D = R->B->D;
  int64_t P = pcgc_ptensor_pieces(&R->B->g->nodes[x].out[0]);
  memcpy(est, R->mem, (size_t)D * sizeof *est);
  for (int64_t p = 0; p < P; p++) {
    est[home(N->cand[R->choice[x]], p, D)] -= R->bpp[x];
    est[home(N->cand[c], p, D)] += R->bpp[x];
  }
}

/* Bytes a move (to memory est) takes off the overfull devices, less what
 * it pushes past capacity on the others. */
static double relief(const repair *R, const double *est) {
  double r = 0;
  for (int d = 0; d < R->B->D; d++) r += R->mem[d] > R->cap ? R->mem[d] - est[d] : -fmax(0, est[d] - R->cap);
  return r;
}

/* The node and candidate of most relief (ties: the cheaper), -1 if none
 * relieves. */
static int pick(const repair *R, int *cand, double *est) {
  int best = -1;
  double most = 0, cheapest = INFINITY;
  for (int x = 0; x < R->B->P.n; x++) {
    const pcgc__vnode *N = &R->B->P.nd[x];
    if (R->B->res[x] || N->fixed >= 0) continue;
    for (int c = 0; c < N->K; c++) {
      if (c == R->choice[x]) continue;
      estimate(R, x, c, est);
      double r = relief(R, est);
      if (r <= 0 || r < most) continue;
      int was = R->choice[x];
      R->choice[x] = c;
      double cost = pcgc__sp_eval(R->S, &R->B->P, R->choice);
      R->choice[x] = was;
      if (r > most || cost < cheapest) {
        best = x;
        *cand = c;
        most = r;
        cheapest = cost;
      }
    }
  }
  return best;
}

typedef struct move {
  int x, c;
  double cost;
} move;

static int by_cost(const void *a, const void *b) {
  const move *x = a, *y = b;
  return x->cost < y->cost ? -1 : x->cost > y->cost;
}

/* Once the views fit: single moves of a node in `near` that lower the
 * cost and keep the views fitting, the cheapest first (of those whose
 * estimate fits, up to 8 measured a step), while any does. */
static pcgc_status lower_cost(repair *R, const bool *near, move *list, double *est, int *moves) {
  int D = R->B->D;
  double now = pcgc__sp_eval(R->S, &R->B->P, R->choice), *mem = est + D;
  while (*moves < MEMORY_MOVES) {
    int n = 0;
    for (int x = 0; x < R->B->P.n; x++)
      for (int c = 0; near[x] && c < R->B->P.nd[x].K; c++) {
        if (c == R->choice[x]) continue;
        int was = R->choice[x];
        R->choice[x] = c;
        double cost = pcgc__sp_eval(R->S, &R->B->P, R->choice);
        R->choice[x] = was;
        if (!(cost < now)) continue;
        estimate(R, x, c, est);
        if (fullest(est, D) <= R->cap) list[n++] = (move){x, c, cost};
      }
    qsort(list, (size_t)n, sizeof *list, by_cost);
    int made = -1;
    for (int i = 0; i < n && i < 8 && made < 0; i++) {
      int x = list[i].x, was = R->choice[x];
      R->view[x] = R->B->P.nd[x].cand[list[i].c];
      double m = memory_of(R->B, R->view, R->opt, mem);
      if (isnan(m)) return PCGC_ERR_NOMEM;
      if (m <= R->cap) made = i;
      else R->view[x] = R->B->P.nd[x].cand[was];
    }
    if (made < 0) return PCGC_OK;
    R->choice[list[made].x] = list[made].c;
    memcpy(R->mem, mem, (size_t)D * sizeof *mem);
    now = list[made].cost;
    (*moves)++;
  }
  return PCGC_OK;
}

/* The fixed nodes and their computed producers and consumers: where the
 * DP's views around the fixes may be improved. */
static void mark_near(const vbuild *B, bool *near) {
  for (int i = 0; i < B->P.n_e; i++) {
    const pcgc__vedge *e = &B->P.e[i];
    bool s = B->P.nd[e->src].fixed >= 0, d = B->P.nd[e->dst].fixed >= 0;
    near[e->src] |= s || d;
    near[e->dst] |= s || d;
  }
  for (int v = 0; v < B->P.n; v++) near[v] |= B->P.nd[v].fixed >= 0;
}

/* Fixes nodes (pick) and re-solves until the views fit or a fix does not
 * cut the overflow. */
static pcgc_status fix_nodes(repair *R, const pcgc__sp *S, int max_masks, double *est, pcgc_views_dp_stats *stats,
                             pcgc_error *err) {
  int D = R->B->D;
  double over = INFINITY;
  int stuck = 0;
  while (fullest(R->mem, D) > R->cap && stats->memory_fixes < MEMORY_FIXES) {
    double now = 0;
    for (int d = 0; d < D; d++) now += fmax(0, R->mem[d] - R->cap);
    /* a fix can leave the overflow as it was (the DP moves the rest onto
     * the devices it freed) and the next one cut it; stop after two such,
     * or when the fixes left, cutting as much as the last, would not do */
    stuck = now < over ? 0 : stuck + 1;
    if (stuck == 2 || (now < over && over < INFINITY && (over - now) * (MEMORY_FIXES - stats->memory_fixes) < now))
      return PCGC_OK;
    over = fmin(over, now);
    int c, x = pick(R, &c, est);
    if (x < 0) return PCGC_OK;
    R->B->P.nd[x].fixed = c;
    stats->memory_fixes++;
    double value;
    pcgc__sp_stats ss = {0};
    pcgc_status st = pcgc__sp_solve(S, &R->B->P, max_masks, R->choice, &value, &ss, err);
    if (st != PCGC_OK) return st;
    views_of(R->B, R->choice, R->view);
    if (isnan(memory_of(R->B, R->view, R->opt, R->mem))) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  }
  return PCGC_OK;
}

/* Into *fit (its memory stays above capacity when no views fit). */
static pcgc_status memory_repair(vbuild *B, const pcgc__sp *S, const pcgc_views_dp_options *o, int *choice,
                                 const double *per_dev, outcome *fit, pcgc_views_dp_stats *stats, pcgc_error *err) {
  int D = B->D, n = B->P.n, moves = 0;
  for (int v = 0; v < n; v++) moves += B->res[v] ? 0 : B->P.nd[v].K;
  repair R = {.B = B, .S = S, .opt = o->optimizer, .cap = pcgc_machine_usable_memory(B->m), .choice = choice,
              .view = fit->view};
  R.mem = malloc((size_t)D * sizeof *R.mem);
  R.bpp = calloc((size_t)(n ? n : 1), sizeof *R.bpp);
  double *est = malloc(2 * (size_t)D * sizeof *est); /* a move's estimate; a measured memory */
  bool *near = calloc((size_t)(n ? n : 1), sizeof *near);
  move *list = malloc((size_t)(moves ? moves : 1) * sizeof *list);
  pcgc_status st = R.mem && R.bpp && est && near && list ? PCGC_OK : pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  if (st == PCGC_OK) {
    memcpy(R.mem, per_dev, (size_t)D * sizeof *R.mem);
    for (int v = 0; v < n; v++)
      if (!B->res[v]) R.bpp[v] = piece_bytes_of(B, &B->g->nodes[v], o->optimizer);
    st = fix_nodes(&R, S, o->max_masks, est, stats, err);
  }
  mark_near(B, near);
  for (int v = 0; v < n; v++) B->P.nd[v].fixed = -1;
  if (st == PCGC_OK && fullest(R.mem, D) <= R.cap) {
    moves = 0;
    if ((st = lower_cost(&R, near, list, est, &moves)) != PCGC_OK) pcgc_error_set(err, st, "out of memory");
    stats->memory_moves = moves;
    fit->memory = fullest(R.mem, D);
    fit->cost = pcgc__sp_eval(S, &B->P, choice);
  }
  free(R.mem);
  free(R.bpp);
  free(est);
  free(near);
  free(list);
  return st;
}

/* ------------------------------------------------------------------ API */

void pcgc_views_dp_options_default(pcgc_views_dp_options *o) {
  memset(o, 0, sizeof *o);
  o->optimizer = PCGC_OPTIM_ADAM;
  o->max_masks = MAX_MASKS;
}

/* The cost of views mp, and the largest memory of a device (per device
 * into per_dev when not NULL). */
static pcgc_status evaluate(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m, pcgc_optim_kind opt,
                            bool bf16, double *cost, double *memory, double *per_dev, pcgc_error *err) {
  if (!g || !mp || !m || mp->n_nodes < g->n_nodes) return pcgc_error_set(err, PCGC_ERR_INVALID, "bad argument");
  pcgc_views_memo *memo = NULL;
  vbuild B;
  memset(&B, 0, sizeof B);
  pcgc__sp *S = NULL;
  pcgc_status st = pcgc_views_memo_new(&memo, err);
  if (st == PCGC_OK) st = build(&B, g, m, memo, mp->view, 1, 1, true, bf16, err);
  if (st == PCGC_OK && cost) {
    int *choice = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *choice); /* every node's one candidate */
    if (!choice) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    if (st == PCGC_OK) st = pcgc__sp_build(&B.P, &S, err);
    if (st == PCGC_OK) *cost = pcgc__sp_eval(S, &B.P, choice);
    if (st == PCGC_OK && isnan(*cost)) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    free(choice);
  }
  if (st == PCGC_OK && memory) {
    *memory = memory_of(&B, mp->view, opt, per_dev);
    if (isnan(*memory)) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  }
  pcgc__sp_free(S);
  build_free(&B);
  pcgc_views_memo_free(memo);
  return st;
}

double pcgc_views_cost(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m, pcgc_error *err) {
  double c = NAN;
  if (evaluate(g, mp, m, PCGC_OPTIM_ADAM, false, &c, NULL, NULL, err) != PCGC_OK) return NAN;
  return c;
}

double pcgc_views_memory(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m, pcgc_optim_kind opt,
                         double *per_device, pcgc_error *err) {
  double mx = NAN;
  if (evaluate(g, mp, m, opt, false, NULL, &mx, per_device, err) != PCGC_OK) return NAN;
  return mx;
}

/* The cost and memory of init: from the problem's terms when its views
 * are among the candidates, else by a separate evaluation. */
static pcgc_status init_terms(vbuild *B, const pcgc__sp *S, const pcgc_mapping *init, pcgc_optim_kind opt, int *choice,
                              outcome *r, pcgc_error *err) {
  if (locate(B, init->view, choice)) r->cost = pcgc__sp_eval(S, &B->P, choice);
  else if (evaluate(B->g, init, B->m, opt, B->bf16, &r->cost, NULL, NULL, err) != PCGC_OK)
    return err ? err->status : PCGC_ERR_NOMEM;
  r->memory = memory_of(B, init->view, opt, NULL);
  return isnan(r->cost) || isnan(r->memory) ? pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory") : PCGC_OK;
}

/* The DP's views (into r->view), their cost and memory (init's terms in
 * `in` when they are init's views). */
static pcgc_status optimum(vbuild *B, const pcgc__sp *S, const pcgc_views_dp_options *o, const pcgc_view *init,
                           const outcome *in, int *choice, outcome *r, pcgc_views_dp_stats *stats, pcgc_error *err) {
  pcgc__sp_stats ss = {0};
  pcgc_status st = pcgc__sp_solve(S, &B->P, o->max_masks, choice, &stats->dp_cost, &ss, err);
  if (st != PCGC_OK) return st;
  stats->masks_max = ss.masks_max;
  stats->masks_dropped = ss.masks_dropped;
  views_of(B, choice, r->view);
  bool same = true;
  for (int v = 0; v < B->P.n && same; v++)
    same = B->res[v] || same_place(r->view[v], init[v], pcgc_ptensor_pieces(&B->g->nodes[v].out[0]), B->D);
  if (same) {
    r->cost = in->cost;
    r->memory = in->memory;
    return PCGC_OK;
  }
  r->cost = pcgc__sp_eval(S, &B->P, choice);
  r->memory = memory_of(B, r->view, o->optimizer, NULL);
  return isnan(r->cost) || isnan(r->memory) ? pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory") : PCGC_OK;
}

/* Views that fit are out of reach: a node's piece alone needs more than a
 * device holds, or the devices any candidate uses hold less together than
 * the views need (roughly: weights copied to more devices than now are
 * not counted). The memory repair is not tried then. */
static bool hopeless(const vbuild *B, const double *per_dev, double cap, pcgc_optim_kind opt) {
  bool *used = calloc((size_t)B->D, sizeof *used);
  if (!used) return true;
  for (int v = 0; v < B->P.n; v++) {
    if (B->res[v]) continue;
    if (piece_bytes_of(B, &B->g->nodes[v], opt) > cap) {
      free(used);
      return true;
    }
    const pcgc__vnode *N = &B->P.nd[v];
    int64_t P = pcgc_ptensor_pieces(&B->g->nodes[v].out[0]);
    for (int c = 0; c < N->K; c++)
      for (int64_t p = 0; p < P && p < B->D; p++) used[home(N->cand[c], p, B->D)] = true;
  }
  double sum = 0, room = 0;
  for (int d = 0; d < B->D; d++) {
    sum += per_dev[d];
    room += used[d] ? cap : 0;
  }
  free(used);
  return sum > room;
}

/* Fitting beats overfilling; then the cheaper, init on ties. */
static bool better(const outcome *a, const outcome *init, double cap) {
  bool fa = a->memory <= cap, fi = init->memory <= cap;
  return fa != fi ? fa : a->cost < init->cost;
}

static pcgc_status views_dp(vbuild *B, const pcgc_mapping *init, const pcgc_views_dp_options *o, pcgc_mapping *out,
                            pcgc_views_dp_stats *stats, pcgc_error *err) {
  int n = B->g->n_nodes, D = B->D;
  double cap = pcgc_machine_usable_memory(B->m);
  size_t nn = (size_t)(n ? n : 1);
  pcgc__sp *S = NULL;
  int *choice = malloc(nn * sizeof *choice);
  double *per_dev = malloc((size_t)D * sizeof *per_dev);
  outcome in = {0}, dp = {.view = out->view}, fit = {.view = malloc(nn * sizeof *fit.view), .memory = INFINITY};
  pcgc_status st = choice && per_dev && fit.view ? PCGC_OK : pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  if (st == PCGC_OK) st = pcgc__sp_build(&B->P, &S, err);
  if (st == PCGC_OK) {
    stats->parts = pcgc__sp_parts(S);
    stats->cut_edges = pcgc__sp_cut_edges(S);
    st = init_terms(B, S, init, o->optimizer, choice, &in, err);
  }
  if (st == PCGC_OK) st = optimum(B, S, o, init->view, &in, choice, &dp, stats, err);
  if (st == PCGC_OK && dp.memory > cap && isnan(memory_of(B, out->view, o->optimizer, per_dev))) /* per device */
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  if (st == PCGC_OK && dp.memory > cap && !hopeless(B, per_dev, cap, o->optimizer)) {
    memcpy(fit.view, out->view, (size_t)n * sizeof *fit.view);
    st = memory_repair(B, S, o, choice, per_dev, &fit, stats, err);
    if (st == PCGC_OK && fit.memory <= cap) {
      memcpy(out->view, fit.view, (size_t)n * sizeof *out->view);
      dp.cost = fit.cost;
      dp.memory = fit.memory;
    }
  }
  if (st == PCGC_OK) {
    stats->cost_init = in.cost;
    stats->memory_init = in.memory;
    stats->kept_init = !better(&dp, &in, cap);
    stats->memory_kept_init = stats->kept_init && dp.memory > cap && in.memory <= cap;
    if (stats->kept_init) {
      memcpy(out->view, init->view, (size_t)n * sizeof *out->view);
      dp = in;
    }
    stats->cost = dp.cost;
    stats->memory = dp.memory;
  }
  pcgc__sp_free(S);
  free(choice);
  free(per_dev);
  free(fit.view);
  return st;
}

pcgc_status pcgc_views_dp(const pcgc_graph *g, const pcgc_mapping *init, int block, int t, const pcgc_machine *m,
                          const pcgc_views_dp_options *o, pcgc_mapping *out, pcgc_views_dp_stats *stats,
                          pcgc_error *err) {
  if (out) memset(out, 0, sizeof *out);
  pcgc_views_dp_stats dummy;
  if (!stats) stats = &dummy;
  memset(stats, 0, sizeof *stats);
  if (!g || !init || !m || !out || init->n_nodes < g->n_nodes)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_views_dp: bad argument");
  pcgc_views_dp_options def;
  pcgc_views_dp_options_default(&def);
  if (!o) o = &def;
  pcgc_views_memo *memo = o->memo;
  pcgc_status st = memo ? PCGC_OK : pcgc_views_memo_new(&memo, err);
  if (st == PCGC_OK) st = pcgc_mapping_init(out, g->n_nodes, (pcgc_view){0, 1}, err);
  if (st != PCGC_OK) {
    if (!o->memo) pcgc_views_memo_free(memo);
    return st;
  }
  memcpy(out->view, init->view, (size_t)g->n_nodes * sizeof *out->view);
  vbuild B;
  st = build(&B, g, m, memo, init->view, block < 1 ? 1 : block, t, false, o->bf16, err);
  for (int v = 0; v < g->n_nodes && st == PCGC_OK; v++) {
    if (B.res[v]) continue;
    stats->nodes++;
    if (B.P.nd[v].K > stats->candidates_max) stats->candidates_max = B.P.nd[v].K;
  }
  stats->capacity = pcgc_machine_usable_memory(m);
  if (st == PCGC_OK) st = views_dp(&B, init, o, out, stats, err);
  stats->memo_hits = B.hits;
  stats->memo_misses = B.misses;
  build_free(&B);
  if (!o->memo) pcgc_views_memo_free(memo);
  if (st != PCGC_OK) pcgc_mapping_destroy(out);
  return st;
}

pcgc_status pcgc_views_dp_if_better(const pcgc_graph *g, int block, int t, const pcgc_machine *m,
                                    const pcgc_sim_options *so, pcgc_views_memo *memo, pcgc_mapping *mp,
                                    pcgc_sim_result *sr, bool *changed, pcgc_error *err) {
  *changed = false;
  pcgc_views_dp_options o;
  pcgc_views_dp_options_default(&o);
  o.optimizer = so->optimizer;
  o.bf16 = so->bf16;
  o.memo = memo;
  pcgc_mapping dp;
  pcgc_views_dp_stats ds;
  pcgc_error e;
  pcgc_error_clear(&e);
  pcgc_status st = pcgc_views_dp(g, mp, block, t, m, &o, &dp, &ds, &e);
  if (st != PCGC_OK) return st == PCGC_ERR_NOMEM ? pcgc_error_set(err, st, "%s", e.message) : PCGC_OK;
  pcgc_sim_result r2;
  memset(&r2, 0, sizeof r2);
  /* where the views given fit, the DP's are taken only if faster: their
   * simulation may stop once it is not */
  pcgc_sim_options so2 = *so;
  if (sr->oom_devices == 0 && isfinite(sr->iteration_time) &&
      (so2.give_up_after <= 0 || sr->iteration_time < so2.give_up_after))
    so2.give_up_after = sr->iteration_time;
  if (!ds.kept_init && (st = pcgc_simulate(g, &dp, m, &so2, &r2, &e)) == PCGC_OK && !r2.stopped_building) {
    bool fit1 = sr->oom_devices == 0, fit2 = r2.oom_devices == 0;
    if ((fit2 && !fit1) || (fit2 == fit1 && r2.iteration_time < sr->iteration_time)) {
      pcgc_mapping tm = *mp;
      *mp = dp;
      dp = tm;
      pcgc_sim_result tr = *sr;
      *sr = r2;
      r2 = tr;
      *changed = true;
    }
  }
  pcgc_sim_result_destroy(&r2);
  pcgc_mapping_destroy(&dp);
  return st == PCGC_ERR_NOMEM ? pcgc_error_set(err, st, "%s", e.message) : PCGC_OK;
}
