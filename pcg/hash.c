/*
 * hash.c — the canonical hash of a graph and exact structural equality.
 *
 * Hash: every node gets a label (op, attributes, output types). Colours
 * start from two linear-time passes — the hash of everything a node depends
 * on (inputs in slot order), then of everything that depends on it (sorted
 * consumers) — and are refined Weisfeiler-Lehman style: a node's colour
 * combines its colour, its inputs' colours in slot order (with the output
 * slot read), and the sorted multiset of its consumers' colours (with the
 * slot they read into), for up to 8 rounds, until the number of distinct
 * colours stops growing. The
 * graph hash is XXH3 over the sorted colours: it ignores node ids and
 * names, so creation order does not matter, and it changes with any change
 * of op, attribute, type, edge or input slot (up to hash collisions and the
 * rare graphs WL refinement cannot tell apart, for which the search falls
 * back on pcgc_graph_equal).
 *
 * Equality: an isomorphism search. Nodes of `a` are visited in topological
 * order and matched to unused nodes of `b` with the same colour, op,
 * attributes, types and already-matched inputs (same slots); backtracking
 * covers ties between symmetric nodes.
 */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "internal.h"

/* Incremental hashing of small values. */
typedef struct hbuf {
  XXH3_state_t *st;
} hbuf;

static void put(hbuf *h, const void *p, size_t n) { XXH3_64bits_update(h->st, p, n); }
static void put64(hbuf *h, uint64_t v) { put(h, &v, sizeof v); }

static void put_type(hbuf *h, const pcgc_ptensor *t) {
  put64(h, (uint64_t)t->dtype);
  put64(h, (uint64_t)t->rank);
  for (int i = 0; i < t->rank; i++) {
    put64(h, (uint64_t)t->dims[i]);
    put64(h, (uint64_t)t->degree[i]);
  }
  put64(h, (uint64_t)t->sum);
  put64(h, (uint64_t)t->replica);
  put64(h, (uint64_t)t->micro);
  put64(h, (uint64_t)(t->micro > 1 ? t->micro_dim : -1));
}

static void put_attrs(hbuf *h, const pcgc_attrs *a) {
  int n = pcgc_op_num_attrs(a->kind);
  for (int i = 0; i < n; i++) {
    const pcgc_attr_desc *d = pcgc_op_attr(a->kind, i);
    put64(h, (uint64_t)d->type);
    if (!pcgc__attr_matters(a, i)) continue;
    switch (d->type) {
    case PCGC_ATTR_FLOAT: {
      double f = pcgc_attrs_float_at(a, i);
      if (f == 0) f = 0.0; /* -0.0 and 0.0 hash alike, as they compare equal */
      put(h, &f, sizeof f);
      break;
    }
    case PCGC_ATTR_INTS:
    case PCGC_ATTR_INTS2: {
      pcgc_ints l = pcgc_attrs_ints_at(a, i);
      put64(h, (uint64_t)l.n);
      for (int k = 0; k < l.n; k++) put64(h, (uint64_t)l.v[k]);
      break;
    }
    default: put64(h, (uint64_t)pcgc_attrs_int_at(a, i));
    }
  }
}

static uint64_t node_label(hbuf *h, const pcgc_graph *g, int i) {
  const pcgc_node *n = &g->nodes[i];
  XXH3_64bits_reset(h->st);
  put64(h, (uint64_t)n->kind);
  put64(h, (uint64_t)n->n_in);
  put64(h, (uint64_t)n->n_out);
  put_attrs(h, n->attrs);
  for (int k = 0; k < n->n_out; k++) put_type(h, &n->out[k]);
  return XXH3_64bits_digest(h->st);
}

static int cmp_u64(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return a < b ? -1 : a > b;
}

static int count_distinct(uint64_t *sorted, int n) {
  int d = n > 0;
  for (int i = 1; i < n; i++) d += sorted[i] != sorted[i - 1];
  return d;
}

/* Consumers of each node in CSR form: for node p, entries [start[p],
 * start[p+1]) hold (consumer id, input slot k, output slot read). */
typedef struct users {
  int *start;
  int *who, *k, *slot;
} users;

static bool users_build(const pcgc_graph *g, users *u) {
  int n = g->n_nodes, total = 0;
  for (int i = 0; i < n; i++) total += g->nodes[i].n_in;
  u->start = calloc((size_t)n + 1, sizeof *u->start);
  u->who = malloc((size_t)(total + 1) * sizeof *u->who);
  u->k = malloc((size_t)(total + 1) * sizeof *u->k);
  u->slot = malloc((size_t)(total + 1) * sizeof *u->slot);
  int *fill = calloc((size_t)n + 1, sizeof *fill);
  if (!u->start || !u->who || !u->k || !u->slot || !fill) {
    free(fill);
    return false;
  }
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) u->start[g->nodes[i].in[k].node + 1]++;
  for (int i = 0; i < n; i++) u->start[i + 1] += u->start[i];
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      pcgc_ref r = g->nodes[i].in[k];
      int at = u->start[r.node] + fill[r.node]++;
      u->who[at] = i;
      u->k[at] = k;
      u->slot[at] = r.slot;
    }
  free(fill);
  return true;
}

static void users_free(users *u) {
  free(u->start);
  free(u->who);
  free(u->k);
  free(u->slot);
}

/* Computes the refined colour of every node. Returns false on out of
 * memory or a structurally broken graph (bad refs). */
static bool colours(const pcgc_graph *g, uint64_t *col) {
  int n = g->n_nodes;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      pcgc_ref r = g->nodes[i].in[k];
      if (r.node < 0 || r.node >= n || r.slot < 0 || r.slot >= g->nodes[r.node].n_out) return false;
    }
  hbuf h = {XXH3_createState()};
  users u = {0};
  uint64_t *next = malloc((size_t)(n + 1) * sizeof *next), *sorted = malloc((size_t)(n + 1) * sizeof *sorted);
  uint64_t *tmp = NULL;
  int max_deg = 0;
  bool ok = h.st && next && sorted && users_build(g, &u);
  if (ok) {
    for (int i = 0; i < n; i++)
      if (u.start[i + 1] - u.start[i] > max_deg) max_deg = u.start[i + 1] - u.start[i];
    ok = (tmp = malloc((size_t)(max_deg + 1) * sizeof *tmp)) != NULL;
  }
  int *order = ok ? malloc((size_t)(n + 1) * sizeof *order) : NULL;
  uint64_t *up = ok ? malloc((size_t)(n + 1) * sizeof *up) : NULL;
  ok = ok && order && up;
  if (ok) {
    for (int i = 0; i < n; i++) col[i] = node_label(&h, g, i);
    /* Seed with two linear-time passes, so that colours see the whole graph
     * without one refinement round per hop: up[i] hashes i's label with its
     * inputs' up in slot order (everything i depends on), then the colour
     * adds the sorted consumers' colours in reverse topological order
     * (everything that depends on i). */
    if (pcgc_graph_topo_order(g, order, NULL) == PCGC_OK) {
      for (int k = 0; k < n; k++) {
        int i = order[k];
        const pcgc_node *nd = &g->nodes[i];
        XXH3_64bits_reset(h.st);
        put64(&h, col[i]);
        for (int s = 0; s < nd->n_in; s++) {
          put64(&h, up[nd->in[s].node]);
          put64(&h, (uint64_t)nd->in[s].slot);
        }
        up[i] = XXH3_64bits_digest(h.st);
      }
      for (int k = n - 1; k >= 0; k--) {
        int i = order[k], m = 0;
        for (int e = u.start[i]; e < u.start[i + 1]; e++) {
          XXH64_hash_t parts[3] = {next[u.who[e]], (uint64_t)u.k[e], (uint64_t)u.slot[e]};
          tmp[m++] = XXH3_64bits(parts, sizeof parts);
        }
        qsort(tmp, (size_t)m, sizeof *tmp, cmp_u64);
        XXH3_64bits_reset(h.st);
        put64(&h, up[i]);
        put(&h, tmp, (size_t)m * sizeof *tmp);
        next[i] = XXH3_64bits_digest(h.st);
      }
      memcpy(col, next, (size_t)n * sizeof *col);
    }
    memcpy(sorted, col, (size_t)n * sizeof *col);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_u64);
    int distinct = count_distinct(sorted, n);
    /* then Weisfeiler-Lehman rounds, which tell apart nodes the passes
     * cannot (symmetric wiring); stop as soon as nothing splits */
    for (int round = 0; round < 8; round++) {
      for (int i = 0; i < n; i++) {
        const pcgc_node *nd = &g->nodes[i];
        XXH3_64bits_reset(h.st);
        put64(&h, col[i]);
        for (int k = 0; k < nd->n_in; k++) {
          put64(&h, col[nd->in[k].node]);
          put64(&h, (uint64_t)nd->in[k].slot);
        }
        int m = 0;
        for (int e = u.start[i]; e < u.start[i + 1]; e++) {
          XXH64_hash_t parts[3] = {col[u.who[e]], (uint64_t)u.k[e], (uint64_t)u.slot[e]};
          tmp[m++] = XXH3_64bits(parts, sizeof parts);
        }
        qsort(tmp, (size_t)m, sizeof *tmp, cmp_u64);
        put64(&h, (uint64_t)m);
        put(&h, tmp, (size_t)m * sizeof *tmp);
        next[i] = XXH3_64bits_digest(h.st);
      }
      memcpy(col, next, (size_t)n * sizeof *col);
      memcpy(sorted, col, (size_t)n * sizeof *col);
      qsort(sorted, (size_t)n, sizeof *sorted, cmp_u64);
      int d = count_distinct(sorted, n);
      if (d <= distinct && round > 0) break;
      distinct = d;
    }
  }
  free(order);
  free(up);
  users_free(&u);
  XXH3_freeState(h.st);
  free(next);
  free(sorted);
  free(tmp);
  return ok;
}

uint64_t pcgc_graph_hash(const pcgc_graph *g) {
  int n = g->n_nodes;
  uint64_t *col = malloc((size_t)(n + 1) * sizeof *col);
  if (!col || !colours(g, col)) {
    free(col);
    return 0;
  }
  qsort(col, (size_t)n, sizeof *col, cmp_u64);
  uint64_t h = XXH3_64bits_withSeed(col, (size_t)n * sizeof *col, (uint64_t)n);
  free(col);
  return h;
}

/* ------------------------------------------------------------ equality */

typedef struct eqctx {
  const pcgc_graph *a, *b;
  const uint64_t *ca, *cb;
  int *map;       /* a node -> b node */
  bool *used;     /* b node taken */
  int *bsorted;   /* b's node ids sorted by colour */
} eqctx;

typedef struct keyed {
  uint64_t colour;
  int id;
} keyed;

static int cmp_keyed(const void *x, const void *y) {
  const keyed *a = x, *b = y;
  if (a->colour != b->colour) return a->colour < b->colour ? -1 : 1;
  return a->id - b->id;
}

static bool feasible(const eqctx *e, int ia, int ib) {
  const pcgc_node *na = &e->a->nodes[ia], *nb = &e->b->nodes[ib];
  if (e->used[ib] || e->ca[ia] != e->cb[ib]) return false;
  if (na->kind != nb->kind || na->n_in != nb->n_in || na->n_out != nb->n_out) return false;
  if (!pcgc_attrs_equal(na->attrs, nb->attrs)) return false;
  for (int k = 0; k < na->n_out; k++)
    if (!pcgc_ptensor_equal(&na->out[k], &nb->out[k])) return false;
  for (int k = 0; k < na->n_in; k++)
    if (e->map[na->in[k].node] != nb->in[k].node || na->in[k].slot != nb->in[k].slot) return false;
  return true;
}

bool pcgc_graph_equal(const pcgc_graph *a, const pcgc_graph *b) { return pcgc_graph_isomorphism(a, b, NULL); }

bool pcgc_graph_isomorphism(const pcgc_graph *a, const pcgc_graph *b, int *out) {
  int n = a->n_nodes;
  if (n != b->n_nodes) return false;
  if (n == 0) return true;
  bool result = false;
  uint64_t *ca = malloc((size_t)n * sizeof *ca), *cb = malloc((size_t)n * sizeof *cb);
  int *order = malloc((size_t)n * sizeof *order), *map = malloc((size_t)n * sizeof *map);
  int *bs = malloc((size_t)n * sizeof *bs), *cand = malloc((size_t)n * sizeof *cand);
  bool *used = calloc((size_t)n, sizeof *used);
  if (!ca || !cb || !order || !map || !bs || !cand || !used) goto done;
  if (!colours(a, ca) || !colours(b, cb)) goto done;
  if (pcgc_graph_topo_order(a, order, NULL) != PCGC_OK) goto done;
  keyed *ks = malloc((size_t)n * sizeof *ks);
  if (!ks) goto done;
  for (int i = 0; i < n; i++) {
    ks[i] = (keyed){cb[i], i};
    map[i] = -1;
  }
  qsort(ks, (size_t)n, sizeof *ks, cmp_keyed);
  for (int i = 0; i < n; i++) bs[i] = ks[i].id;
  free(ks);
  eqctx e = {a, b, ca, cb, map, used, bs};
  /* iterative backtracking over a's topological order; cand[pos] is the
   * position in bs of the current candidate for order[pos] */
  long budget = 50L * 1000 * 1000;
  int pos = 0;
  cand[0] = -1;
  while (pos >= 0 && pos < n && budget-- > 0) {
    int ia = order[pos];
    if (cand[pos] >= 0) {
      used[map[ia]] = false;
      map[ia] = -1;
    }
    /* first position in bs with colour ca[ia] */
    int lo = 0, hi = n;
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      if (cb[bs[mid]] < ca[ia]) lo = mid + 1;
      else hi = mid;
    }
    int c = cand[pos] >= 0 ? cand[pos] + 1 : lo;
    while (c < n && cb[bs[c]] == ca[ia] && !feasible(&e, ia, bs[c])) c++;
    if (c < n && cb[bs[c]] == ca[ia]) {
      cand[pos] = c;
      map[ia] = bs[c];
      used[bs[c]] = true;
      if (++pos < n) cand[pos] = -1;
    } else {
      pos--;
    }
  }
  result = pos == n;
  if (result && out) memcpy(out, map, (size_t)n * sizeof *map);
done:
  free(ca); free(cb); free(order); free(map); free(bs); free(cand); free(used);
  return result;
}
