/*
 * mapping_sp.c — device mapping's DP over a series-parallel decomposition
 * of the graph (search.h, "Device mapping", defines the cost it minimises;
 * mapping.c builds the candidates and terms it works on).
 *
 * Decomposition. Vertices: the computed nodes, a virtual source (before
 * every node that reads no computed node) and sink (after every node no
 * computed node reads); a part per (producer, consumer) edge. Reductions,
 * until one part joins source and sink:
 *   series    a node with one part in (a -> v) and one out (v -> b): the
 *             part a -> b made of both and v;
 *   parallel  parts with the same ends: one group, whose branches are
 *             folded left in the order of their first node (a bare edge
 *             first) when it is costed.
 * Nodes are tried in topological order, again whenever a reduction changes
 * their degree. A graph that is not series-parallel gets stuck: then the
 * earliest node with two parts in loses its edge from its latest producer
 * (a cut; the producer goes to the sink when that was its last reader) and
 * the reduction starts over. An out-tree is series-parallel, so this ends.
 *
 * DP. Per part and per pair of views of its two ends, the Pareto set of
 * (device set, cost) over the views of its interior: no entry has both a
 * subset of another's devices and a cost as low. An edge: its pair matrix,
 * no devices. Series: every view of the middle node, costs summed and sets
 * joined. Parallel fold: every pair of entries, max when their sets are
 * disjoint, else sum. Both are monotone in cost and set, so a dominated
 * entry never completes to a better whole: the DP is exact while no set
 * outgrows max_masks entries (past that the costliest go, counted). Each
 * entry points back at the entries it came from, which gives the views.
 * Device sets only matter to parallel folds: a part no fold above looks
 * into keeps one entry per cell, the cheapest (so a chain, or a branch
 * beside a bare edge, as a transformer's residual, costs K² per node).
 */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mapping_internal.h"

enum { PART_EDGE, PART_SERIES, PART_PAR };

typedef struct part {
  int kind;
  int from, to;       /* vertices: node ids; n is the source, n + 1 the sink */
  int a, b;           /* series: the parts before and after mid; parallel: the fold so far, the next branch */
  int mid;            /* series: the node between them */
  int edge;           /* PART_EDGE: index in P->e; -1: a bare link from the source or to the sink */
  int key;            /* topological position of its first interior node, -1: none */
  int *br, nbr, cbr;  /* a parallel group, until folded: its branches */
} part;

typedef struct ilist {
  int *v;
  int n, cap;
} ilist;

struct pcgc__sp {
  int n;
  part *p;
  int np, cp;
  ilist order;  /* parts, each after the parts it is made of; the root last */
  bool *need;   /* [np] its device set matters to some parallel fold above it */
  int root;     /* -1: no computed node */
  bool *cut;    /* [P->n_e] edges cut to make the graph series-parallel */
  int n_cut;
};

static bool ipush(ilist *l, int x) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 4;
    int *v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return false;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = x;
  return true;
}

static void iremove(ilist *l, int x) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i] == x) {
      l->v[i] = l->v[--l->n];
      return;
    }
  assert(!"part not in list");
}

static int key_min(int a, int b) { return a < 0 ? b : b < 0 ? a : a < b ? a : b; }

static int part_new(pcgc__sp *S, part p) {
  if (S->np == S->cp) {
    int cap = S->cp ? 2 * S->cp : 64;
    part *q = realloc(S->p, (size_t)cap * sizeof *q);
    if (!q) return -1;
    S->p = q;
    S->cp = cap;
  }
  S->p[S->np] = p;
  return S->np++;
}

/* ------------------------------------------------------- reduction */

typedef struct red {
  const pcgc__vprob *P;
  ilist *in, *out;  /* [n + 2] live parts at each vertex */
  ilist fin;        /* parts in the order they stop changing */
  ilist queue;
  int qh;
  bool *done;       /* nodes reduced away */
  bool nomem;
} red;

static void enqueue(pcgc__sp *S, red *R, int v) {
  if (v < S->n && !R->done[v] && !ipush(&R->queue, v)) R->nomem = true;
}

static void fin(red *R, int x) {
  if (!ipush(&R->fin, x)) R->nomem = true;
}

/* Adds part q to the graph, joining a part with the same ends into a
 * parallel group. */
static void attach(pcgc__sp *S, red *R, int q) {
  int from = S->p[q].from, to = S->p[q].to;
  ilist *o = &R->out[from];
  for (int i = 0; i < o->n; i++) {
    int g = o->v[i];
    if (S->p[g].to != to) continue;
    if (!S->p[g].br) { /* a group in g's place, with g and q as its branches */
      int G = part_new(S, (part){.kind = PART_PAR, .from = from, .to = to, .edge = -1, .key = -1});
      if (G < 0) {
        R->nomem = true;
        return;
      }
      int *br = malloc(4 * sizeof *br);
      if (!br) {
        R->nomem = true;
        return;
      }
      br[0] = g;
      S->p[G].br = br;
      S->p[G].nbr = 1;
      S->p[G].cbr = 4;
      S->p[G].key = S->p[g].key;
      o->v[i] = G;
      iremove(&R->in[to], g);
      ipush(&R->in[to], G); /* cannot fail: g's slot was just freed */
      fin(R, g);
      g = G;
    }
    part *X = &S->p[g];
    if (X->nbr == X->cbr) {
      int *br = realloc(X->br, (size_t)(2 * X->cbr) * sizeof *br);
      if (!br) {
        R->nomem = true;
        return;
      }
      X->br = br;
      X->cbr *= 2;
    }
    X->br[X->nbr++] = q;
    X->key = key_min(X->key, S->p[q].key);
    fin(R, q);
    return;
  }
  if (!ipush(o, q) || !ipush(&R->in[to], q)) R->nomem = true;
}

static void series(pcgc__sp *S, red *R, int v) {
  int l = R->in[v].v[0], r = R->out[v].v[0];
  int from = S->p[l].from, to = S->p[r].to;
  iremove(&R->out[from], l);
  iremove(&R->in[to], r);
  R->in[v].n = R->out[v].n = 0;
  R->done[v] = true;
  int key = S->p[l].key >= 0 ? S->p[l].key : R->P->pos[v]; /* l's interior precedes v, r's follows it */
  int q = part_new(S, (part){.kind = PART_SERIES, .from = from, .to = to, .a = l, .b = r, .mid = v, .edge = -1,
                             .key = key});
  if (q < 0) {
    R->nomem = true;
    return;
  }
  fin(R, l);
  fin(R, r);
  attach(S, R, q);
  enqueue(S, R, from);
  enqueue(S, R, to);
}

static void reset(pcgc__sp *S, red *R) {
  for (int i = 0; i < S->np; i++) free(S->p[i].br);
  S->np = 0;
  for (int v = 0; v < S->n + 2; v++) R->in[v].n = R->out[v].n = 0;
  memset(R->done, 0, (size_t)S->n * sizeof *R->done);
  R->fin.n = R->queue.n = R->qh = 0;
  S->root = -1;
}

static void link(pcgc__sp *S, red *R, int from, int to, int edge) {
  int q = part_new(S, (part){.kind = PART_EDGE, .from = from, .to = to, .edge = edge, .key = -1});
  if (q < 0) R->nomem = true;
  else attach(S, R, q);
}

/* One pass of reductions from the (uncut) edges. Returns -1 when it ends
 * in one part, else the node to cut an edge into. */
static int reduce(pcgc__sp *S, red *R) {
  const pcgc__vprob *P = R->P;
  int n = S->n;
  reset(S, R);
  for (int i = 0; i < P->n_e && !R->nomem; i++)
    if (!S->cut[i]) link(S, R, P->e[i].src, P->e[i].dst, i);
  int nodes = 0;
  for (int k = 0; k < n && !R->nomem; k++) {
    int x = P->order[k];
    if (P->res[x]) continue;
    nodes++;
    if (R->in[x].n == 0) link(S, R, n, x, -1);
  }
  for (int k = 0; k < n && !R->nomem; k++) {
    int x = P->order[k];
    if (!P->res[x] && R->out[x].n == 0) link(S, R, x, n + 1, -1);
    if (!P->res[x]) enqueue(S, R, x);
  }
  while (R->qh < R->queue.n && !R->nomem) {
    int v = R->queue.v[R->qh++];
    if (!R->done[v] && R->in[v].n == 1 && R->out[v].n == 1) series(S, R, v);
  }
  if (R->nomem || nodes == 0) return -1;
  for (int k = 0; k < n; k++) {
    int x = P->order[k];
    if (!P->res[x] && !R->done[x] && R->in[x].n >= 2) return x;
  }
  assert(R->out[n].n == 1 && S->p[R->out[n].v[0]].to == n + 1);
  S->root = R->out[n].v[0];
  return -1;
}

/* Cuts b's edge from its latest producer. */
static void cut_one(pcgc__sp *S, const pcgc__vprob *P, int b) {
  int best = -1;
  for (int i = 0; i < P->n_e; i++)
    if (!S->cut[i] && P->e[i].dst == b && (best < 0 || P->pos[P->e[i].src] > P->pos[P->e[best].src])) best = i;
  assert(best >= 0);
  S->cut[best] = true;
  S->n_cut++;
}

/* Folds group x: its branches by first node, as a chain of binary
 * parallel parts of which x is the last. */
static bool fold(pcgc__sp *S, int x) {
  part *X = &S->p[x];
  int *br = X->br, nbr = X->nbr;
  for (int i = 1; i < nbr; i++) /* insertion sort by key (keys differ; -1, a bare edge, first) */
    for (int j = i; j > 0 && S->p[br[j]].key < S->p[br[j - 1]].key; j--) {
      int t = br[j];
      br[j] = br[j - 1];
      br[j - 1] = t;
    }
  int acc = br[0], from = X->from, to = X->to;
  for (int i = 1; i < nbr - 1; i++) {
    int y = part_new(S, (part){.kind = PART_PAR, .from = from, .to = to, .a = acc, .b = br[i], .edge = -1,
                               .key = S->p[x].key});
    if (y < 0 || !ipush(&S->order, y)) return false;
    acc = y;
  }
  X = &S->p[x];
  X->a = acc;
  X->b = br[nbr - 1];
  X->br = NULL;
  free(br);
  return ipush(&S->order, x);
}

/* Which parts' device sets matter: the operands of a parallel fold whose
 * other operand has nodes inside (a bare edge has no devices, so a branch
 * beside one overlaps it anyway), the parts of such, and those of a part
 * whose set matters. The DP keeps one entry, the cheapest, elsewhere. */
static bool find_need(pcgc__sp *S) {
  bool *inside = calloc((size_t)(S->np ? S->np : 1), sizeof *inside);
  S->need = calloc((size_t)(S->np ? S->np : 1), sizeof *S->need);
  if (!inside || !S->need) {
    free(inside);
    return false;
  }
  for (int i = 0; i < S->order.n; i++) {
    const part *X = &S->p[S->order.v[i]];
    inside[S->order.v[i]] = X->kind == PART_SERIES || (X->kind == PART_PAR && (inside[X->a] || inside[X->b]));
  }
  for (int i = S->order.n - 1; i >= 0; i--) { /* parents first */
    int x = S->order.v[i];
    const part *X = &S->p[x];
    if (X->kind == PART_SERIES) S->need[X->a] = S->need[X->b] = S->need[x];
    if (X->kind == PART_PAR) {
      S->need[X->a] = S->need[x] || inside[X->b];
      S->need[X->b] = S->need[x] || inside[X->a];
    }
  }
  free(inside);
  return true;
}

static bool finish(pcgc__sp *S, red *R) {
  if (S->root >= 0 && !ipush(&R->fin, S->root)) return false;
  for (int i = 0; i < R->fin.n; i++) {
    int x = R->fin.v[i];
    if (S->p[x].br ? !fold(S, x) : !ipush(&S->order, x)) return false;
  }
  return find_need(S);
}

pcgc_status pcgc__sp_build(const pcgc__vprob *P, pcgc__sp **out, pcgc_error *err) {
  *out = NULL;
  pcgc__sp *S = calloc(1, sizeof *S);
  red R = {.P = P};
  size_t nv = (size_t)P->n + 2;
  if (S) {
    S->n = P->n;
    S->root = -1;
    S->cut = calloc((size_t)(P->n_e ? P->n_e : 1), sizeof *S->cut);
  }
  R.in = calloc(nv, sizeof *R.in);
  R.out = calloc(nv, sizeof *R.out);
  R.done = calloc(nv, sizeof *R.done);
  bool ok = S && S->cut && R.in && R.out && R.done;
  while (ok) {
    int b = reduce(S, &R);
    if (R.nomem || b < 0) break;
    cut_one(S, P, b);
  }
  ok = ok && !R.nomem && finish(S, &R);
  for (size_t v = 0; R.in && v < nv; v++) free(R.in[v].v);
  for (size_t v = 0; R.out && v < nv; v++) free(R.out[v].v);
  free(R.in);
  free(R.out);
  free(R.done);
  free(R.fin.v);
  free(R.queue.v);
  if (!ok) {
    pcgc__sp_free(S);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  }
  *out = S;
  return PCGC_OK;
}

void pcgc__sp_free(pcgc__sp *S) {
  if (!S) return;
  for (int i = 0; i < S->np; i++) free(S->p[i].br);
  free(S->p);
  free(S->order.v);
  free(S->need);
  free(S->cut);
  free(S);
}

int pcgc__sp_parts(const pcgc__sp *S) { return S ? S->np : 0; }
int pcgc__sp_cut_edges(const pcgc__sp *S) { return S ? S->n_cut : 0; }

/* ----------------------------------------------------------- the DP */

/* A (device set, cost) entry; a, b: the entries it came from in the
 * cells of its two parts; k: a series part's middle view. */
typedef struct pent {
  uint64_t mask;
  double cost;
  int32_t a, b, k;
} pent;

/* Entries of a part per pair of end views: cell ka * kt + kb holds
 * e[off[c] .. off[c + 1]). */
typedef struct ptab {
  int kf, kt;
  int *off;
  pent *e;
  int ne, ce;
} ptab;

typedef struct dp {
  const pcgc__sp *S;
  const pcgc__vprob *P;
  int cap;           /* max entries per cell */
  ptab *t;           /* [S->np] */
  pent *scratch;     /* [cap] */
  pcgc__sp_stats *st;
} dp;

static int vk(const dp *D, int v) { return v >= D->S->n ? 1 : D->P->nd[v].K; }

static bool allowed(const dp *D, int v, int k) { return v >= D->S->n || D->P->nd[v].fixed < 0 || D->P->nd[v].fixed == k; }

static bool subset(uint64_t a, uint64_t b) { return (a & ~b) == 0; }

/* Adds x to the Pareto set L[0..*n) of at most cap entries; to a single
 * cheapest entry when no device set matters (`one`). */
static void pareto_add(dp *D, pent *L, int *n, pent x, bool one) {
  if (one) {
    x.mask = 0;
    if (*n == 0 || x.cost < L[0].cost) L[0] = x;
    *n = 1;
    return;
  }
  for (int i = 0; i < *n; i++)
    if (subset(L[i].mask, x.mask) && L[i].cost <= x.cost) return;
  int w = 0;
  for (int i = 0; i < *n; i++)
    if (!(subset(x.mask, L[i].mask) && x.cost <= L[i].cost)) L[w++] = L[i];
  *n = w;
  if (w < D->cap) {
    L[(*n)++] = x;
    return;
  }
  int worst = 0;
  for (int i = 1; i < w; i++)
    if (L[i].cost > L[worst].cost) worst = i;
  D->st->masks_dropped++;
  if (x.cost < L[worst].cost) L[worst] = x;
}

static const pent *cell(const ptab *T, int ka, int kb, int *n) {
  int c = ka * T->kt + kb;
  *n = T->off[c + 1] - T->off[c];
  return T->e + T->off[c];
}

/* The entries of one cell of part x into L. */
static void fill(dp *D, int x, int ka, int kb, pent *L, int *n) {
  const part *X = &D->S->p[x];
  bool one = !D->S->need[x];
  *n = 0;
  switch (X->kind) {
  case PART_EDGE: {
    double c = X->edge < 0 ? 0 : D->P->e[X->edge].cost[ka * vk(D, X->to) + kb];
    L[(*n)++] = (pent){0, c, 0, 0, 0};
    break;
  }
  case PART_SERIES: {
    const pcgc__vnode *M = &D->P->nd[X->mid];
    for (int kv = 0; kv < M->K; kv++) {
      if (!allowed(D, X->mid, kv)) continue;
      int n1, n2;
      const pent *l = cell(&D->t[X->a], ka, kv, &n1), *r = cell(&D->t[X->b], kv, kb, &n2);
      double u = M->unary[kv] + M->extra[kv];
      for (int i = 0; i < n1; i++)
        for (int j = 0; j < n2; j++)
          pareto_add(D, L, n, (pent){l[i].mask | r[j].mask | M->mask[kv], l[i].cost + u + r[j].cost, i, j, kv},
                     one);
    }
    break;
  }
  case PART_PAR: {
    int n1, n2;
    const pent *l = cell(&D->t[X->a], ka, kb, &n1), *r = cell(&D->t[X->b], ka, kb, &n2);
    for (int i = 0; i < n1; i++)
      for (int j = 0; j < n2; j++) {
        bool apart = (l[i].mask & r[j].mask) == 0;
        double c = apart ? fmax(l[i].cost, r[j].cost) : l[i].cost + r[j].cost;
        pareto_add(D, L, n, (pent){l[i].mask | r[j].mask, c, i, j, 0}, one);
      }
    break;
  }
  }
}

static bool tab_compute(dp *D, int x) {
  const part *X = &D->S->p[x];
  ptab *T = &D->t[x];
  T->kf = vk(D, X->from);
  T->kt = vk(D, X->to);
  int cells = T->kf * T->kt;
  T->off = malloc((size_t)(cells + 1) * sizeof *T->off);
  if (!T->off) return false;
  for (int ka = 0; ka < T->kf; ka++)
    for (int kb = 0; kb < T->kt; kb++) {
      int n = 0;
      if (allowed(D, X->from, ka) && allowed(D, X->to, kb)) fill(D, x, ka, kb, D->scratch, &n);
      if (n > D->st->masks_max) D->st->masks_max = n;
      T->off[ka * T->kt + kb] = T->ne;
      if (n == 0) continue;
      if (T->ne + n > T->ce) {
        int ce = T->ce ? T->ce : cells;
        while (ce < T->ne + n) ce *= 2;
        pent *e = realloc(T->e, (size_t)ce * sizeof *e);
        if (!e) return false;
        T->e = e;
        T->ce = ce;
      }
      memcpy(T->e + T->ne, D->scratch, (size_t)n * sizeof *T->e);
      T->ne += n;
    }
  T->off[cells] = T->ne;
  return true;
}

/* The views behind entry i of the root's one cell. */
static bool backtrack(const dp *D, int best, int *choice) {
  int *stack = malloc((size_t)D->S->np * 4 * sizeof *stack), sp = 0;
  if (!stack) return false;
#define PUSH(x, ka, kb, i) (stack[sp++] = (x), stack[sp++] = (ka), stack[sp++] = (kb), stack[sp++] = (i))
  PUSH(D->S->root, 0, 0, best);
  while (sp > 0) {
    sp -= 4;
    int x = stack[sp], ka = stack[sp + 1], kb = stack[sp + 2], i = stack[sp + 3];
    const part *X = &D->S->p[x];
    int n;
    const pent *E = cell(&D->t[x], ka, kb, &n) + i;
    if (X->kind == PART_SERIES) {
      choice[X->mid] = E->k;
      PUSH(X->a, ka, E->k, E->a);
      PUSH(X->b, E->k, kb, E->b);
    } else if (X->kind == PART_PAR) {
      PUSH(X->a, ka, kb, E->a);
      PUSH(X->b, ka, kb, E->b);
    }
  }
#undef PUSH
  free(stack);
  return true;
}

static pcgc_status run(const pcgc__sp *S, const pcgc__vprob *P, int cap, int *choice, double *value,
                       pcgc__sp_stats *st, pcgc_error *err) {
  for (int v = 0; v < P->n; v++) choice[v] = -1;
  *value = 0;
  if (S->root < 0) return PCGC_OK;
  dp D = {.S = S, .P = P, .cap = cap, .st = st};
  D.t = calloc((size_t)S->np, sizeof *D.t);
  D.scratch = malloc((size_t)cap * sizeof *D.scratch);
  bool ok = D.t && D.scratch;
  for (int i = 0; i < S->order.n && ok; i++) ok = tab_compute(&D, S->order.v[i]);
  if (ok) {
    int n, best = 0;
    const pent *E = cell(&D.t[S->root], 0, 0, &n);
    assert(n > 0); /* every node has an allowed view */
    for (int i = 1; i < n; i++)
      if (E[i].cost < E[best].cost) best = i;
    *value = E[best].cost;
    ok = backtrack(&D, best, choice);
  }
  for (int i = 0; D.t && i < S->np; i++) {
    free(D.t[i].off);
    free(D.t[i].e);
  }
  free(D.t);
  free(D.scratch);
  return ok ? PCGC_OK : pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
}

pcgc_status pcgc__sp_solve(const pcgc__sp *S, pcgc__vprob *P, int max_masks, int *choice, double *value,
                           pcgc__sp_stats *st, pcgc_error *err) {
  int cap = max_masks > 0 ? max_masks : 1;
  pcgc_status s = run(S, P, cap, choice, value, st, err);
  if (s != PCGC_OK || S->n_cut == 0) return s;
  /* the fallback: each cut edge's producer keeps its view of the optimum
   * without cut edges, which makes the edge a term of its consumer alone */
  pcgc__vnode *saved = malloc((size_t)P->n * sizeof *saved);
  if (!saved) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  memcpy(saved, P->nd, (size_t)P->n * sizeof *saved);
  for (int i = 0; i < P->n_e; i++)
    if (S->cut[i] && P->nd[P->e[i].src].fixed < 0) P->nd[P->e[i].src].fixed = choice[P->e[i].src];
  for (int i = 0; i < P->n_e; i++) {
    if (!S->cut[i]) continue;
    const pcgc__vedge *E = &P->e[i];
    pcgc__vnode *B = &P->nd[E->dst];
    for (int kb = 0; kb < B->K; kb++) B->extra[kb] += E->cost[P->nd[E->src].fixed * B->K + kb];
  }
  s = run(S, P, cap, choice, value, st, err);
  memcpy(P->nd, saved, (size_t)P->n * sizeof *saved);
  free(saved);
  return s;
}

double pcgc__sp_eval(const pcgc__sp *S, const pcgc__vprob *P, const int *choice) {
  double total = 0;
  for (int i = 0; i < P->n_e; i++)
    if (S->cut[i]) total += P->e[i].cost[choice[P->e[i].src] * P->nd[P->e[i].dst].K + choice[P->e[i].dst]];
  if (S->root < 0) return total;
  double *cost = malloc((size_t)S->np * sizeof *cost);
  uint64_t *mask = malloc((size_t)S->np * sizeof *mask);
  if (!cost || !mask) {
    free(cost);
    free(mask);
    return NAN;
  }
  for (int i = 0; i < S->order.n; i++) {
    int x = S->order.v[i];
    const part *X = &S->p[x];
    switch (X->kind) {
    case PART_EDGE:
      mask[x] = 0;
      cost[x] = X->edge < 0 ? 0 : P->e[X->edge].cost[choice[X->from] * P->nd[X->to].K + choice[X->to]];
      break;
    case PART_SERIES: {
      const pcgc__vnode *M = &P->nd[X->mid];
      mask[x] = mask[X->a] | mask[X->b] | M->mask[choice[X->mid]];
      cost[x] = cost[X->a] + M->unary[choice[X->mid]] + cost[X->b];
      break;
    }
    case PART_PAR:
      mask[x] = mask[X->a] | mask[X->b];
      cost[x] = (mask[X->a] & mask[X->b]) == 0 ? fmax(cost[X->a], cost[X->b]) : cost[X->a] + cost[X->b];
      break;
    }
  }
  total += cost[S->root];
  free(cost);
  free(mask);
  return total;
}
