/*
 * graph.c — the PCG container: nodes with typed attributes, edges by input
 * slot, multi-output nodes, topological order (Kahn's algorithm with ties
 * broken by node id, so the order is deterministic), whole-graph inference,
 * validation and the totals that `pcgc check` prints.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#include "internal.h"

/* A graph's private tables: its node names (ids + 1, keyed by name), and
 * the distinct attribute sets its nodes point to (open addressing, at most
 * 80% full), so a chain of 100,000 relus keeps one set, not 100,000 (issue
 * 17: a graph's memory against its text). */
typedef struct pcgc__graph_tables {
  pcgc__index ids;    /* node id + 1, by name */
  pcgc__index attrs;  /* pcgc_attrs pointers (owned), by their bytes */
} pcgc__graph_tables;

pcgc_graph *pcgc_graph_new(void) { return calloc(1, sizeof(pcgc_graph)); }

pcgc_status pcgc_graph_reserve(pcgc_graph *g, int n) {
  if (!g || n <= g->cap) return PCGC_OK;
  pcgc_node *nodes = realloc(g->nodes, (size_t)n * sizeof *nodes);
  if (!nodes) return PCGC_ERR_NOMEM;
  g->nodes = nodes;
  g->cap = n;
  return PCGC_OK;
}

/* A node's own memory is one block at n->out: its output types, its output
 * name pointers, its inputs and its name (out_names[0] unless renamed); a
 * renamed output's name is allocated on its own. */
static void node_destroy(pcgc_node *n) {
  free(n->value);
  if (n->out_names)
    for (int i = 0; i < n->n_out; i++)
      if (n->out_names[i] != n->name) free(n->out_names[i]);
  free(n->out);
}

static void tables_free(pcgc__graph_tables *t) {
  if (!t) return;
  for (size_t i = 0; i < t->attrs.cap; i++) free((void *)t->attrs.slot[i]);
  pcgc__index_free(&t->attrs);
  pcgc__index_free(&t->ids);
  free(t);
}

void pcgc_graph_free(pcgc_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n_nodes; i++) node_destroy(&g->nodes[i]);
  tables_free(g->tables);
  free(g->nodes);
  free(g->name);
  free(g->file);
  free(g);
}

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static pcgc__key node_name(const void *g, uintptr_t v) {
  return pcgc__key_str(((const pcgc_graph *)g)->nodes[v - 1].name);
}

static pcgc__key attrs_bytes(const void *ctx, uintptr_t v) { return (pcgc__key){(const void *)v, sizeof(pcgc_attrs)}; }

int pcgc_graph_find(const pcgc_graph *g, const char *name) {
  return g->tables ? (int)pcgc__index_find(&g->tables->ids, pcgc__key_str(name), node_name, g) - 1 : -1;
}

static pcgc__graph_tables *tables_of(pcgc_graph *g) {
  if (!g->tables) g->tables = calloc(1, sizeof *g->tables);
  return g->tables;
}

/* Adds node id's name, known to be new. */
static pcgc_status index_add(pcgc_graph *g, int id) {
  pcgc__graph_tables *t = tables_of(g);
  return t ? pcgc__index_add(&t->ids, (uintptr_t)id + 1, node_name, g) : PCGC_ERR_NOMEM;
}

/* The graph's copy of *a: one per distinct byte pattern. NULL on out of
 * memory. */
static const pcgc_attrs *attrs_intern(pcgc_graph *g, const pcgc_attrs *a) {
  pcgc__graph_tables *t = tables_of(g);
  if (!t) return NULL;
  const pcgc_attrs *have = (const pcgc_attrs *)pcgc__index_find(&t->attrs, (pcgc__key){a, sizeof *a}, attrs_bytes, NULL);
  if (have) return have;
  pcgc_attrs *c = malloc(sizeof *c);
  if (!c) return NULL;
  memcpy(c, a, sizeof *c);
  if (pcgc__index_add(&t->attrs, (uintptr_t)c, attrs_bytes, NULL) != PCGC_OK) {
    free(c);
    return NULL;
  }
  return c;
}

int pcgc_graph_add_node(pcgc_graph *g, pcgc_op_kind kind, const char *name, const pcgc_attrs *attrs,
                        int n_in, const pcgc_ref *in) {
  if ((unsigned)kind >= PCGC_OP_COUNT || n_in < 0 || n_in > PCGC_VARIADIC || (n_in && !in))
    return PCGC_ERR_INVALID;
  if (attrs && attrs->kind != kind) return PCGC_ERR_INVALID;
  if (g->n_nodes == g->cap) {
    int cap = g->cap ? g->cap + g->cap / 2 : 16; /* by half: less room unused at the end */
    pcgc_node *nodes = realloc(g->nodes, (size_t)cap * sizeof *nodes);
    if (!nodes) return PCGC_ERR_NOMEM;
    g->nodes = nodes;
    g->cap = cap;
  }
  int id = g->n_nodes;
  pcgc_node *n = &g->nodes[id];
  memset(n, 0, sizeof *n);
  n->id = id;
  n->kind = kind;
  pcgc_attrs defaults;
  if (!attrs) {
    pcgc_attrs_init(&defaults, kind);
    attrs = &defaults;
  }
  char auto_name[64];
  if (!name) {
    snprintf(auto_name, sizeof auto_name, "%s_%d", pcgc_op_name(kind), id);
    name = auto_name;
  }
  if (pcgc_graph_find(g, name) >= 0) return PCGC_ERR_INVALID; /* names are unique */
  if (!(n->attrs = attrs_intern(g, attrs))) return PCGC_ERR_NOMEM;
  int n_out = pcgc_op_num_outputs(kind, n->attrs);
  size_t ln = strlen(name) + 1, at_names = (size_t)n_out * sizeof *n->out,
         at_in = at_names + (size_t)n_out * sizeof *n->out_names, at_name = at_in + (size_t)n_in * sizeof *n->in;
  char *block = calloc(1, at_name + ln);
  if (!block) return PCGC_ERR_NOMEM;
  n->n_out = (int16_t)n_out;
  n->out = (pcgc_ptensor *)block;
  n->out_names = (char **)(block + at_names);
  n->in = n_in ? (pcgc_ref *)(block + at_in) : NULL;
  n->name = memcpy(block + at_name, name, ln);
  bool ok = true;
  for (int i = 0; ok && i < n->n_out; i++) {
    char buf[600];
    if (i > 0) snprintf(buf, sizeof buf, "%.500s.%d", name, i);
    ok = (n->out_names[i] = i == 0 ? n->name : dupstr(buf)) != NULL;
  }
  if (!ok || index_add(g, id) != PCGC_OK) {
    node_destroy(n);
    return PCGC_ERR_NOMEM;
  }
  n->n_in = (int16_t)n_in;
  if (n_in) memcpy(n->in, in, (size_t)n_in * sizeof *in);
  g->n_nodes++;
  return id;
}

pcgc_status pcgc_graph_set_output_name(pcgc_graph *g, int node, int slot, const char *name) {
  if (node < 0 || node >= g->n_nodes) return PCGC_ERR_INVALID;
  pcgc_node *n = &g->nodes[node];
  if (slot < 0 || slot >= n->n_out) return PCGC_ERR_INVALID;
  char *d = dupstr(name);
  if (!d) return PCGC_ERR_NOMEM;
  if (n->out_names[slot] != n->name) free(n->out_names[slot]);
  n->out_names[slot] = d;
  return PCGC_OK;
}

pcgc_status pcgc_graph_set_attrs(pcgc_graph *g, int node, const pcgc_attrs *a) {
  if (node < 0 || node >= g->n_nodes || !a) return PCGC_ERR_INVALID;
  pcgc_node *n = &g->nodes[node];
  if (a->kind != n->kind || pcgc_op_num_outputs(n->kind, a) != n->n_out) return PCGC_ERR_INVALID;
  const pcgc_attrs *c = attrs_intern(g, a);
  if (!c) return PCGC_ERR_NOMEM;
  n->attrs = c;
  n->typed = false;
  return PCGC_OK;
}

pcgc_status pcgc_graph_set_value(pcgc_graph *g, int node, const float *data, int64_t n) {
  if (node < 0 || node >= g->n_nodes || g->nodes[node].kind != PCGC_OP_WEIGHT || n < 0 || (n && !data))
    return PCGC_ERR_INVALID;
  pcgc_node *w = &g->nodes[node];
  pcgc_ints shape = pcgc_attrs_ints(w->attrs, "shape");
  int64_t numel = 1;
  for (int i = 0; i < shape.n; i++) numel *= shape.v[i];
  if (n != numel) return PCGC_ERR_INVALID;
  float *copy = malloc((size_t)(n ? n : 1) * sizeof *copy);
  if (!copy) return PCGC_ERR_NOMEM;
  if (n) memcpy(copy, data, (size_t)n * sizeof *copy);
  free(w->value);
  w->value = copy;
  return PCGC_OK;
}

int pcgc_graph_copy_node(pcgc_graph *dst, const pcgc_graph *src, int node, const char *name, const pcgc_ref *in) {
  const pcgc_node *n = &src->nodes[node];
  if (!name) name = n->name;
  int id = pcgc_graph_add_node(dst, n->kind, name, n->attrs, n->n_in, in ? in : n->in);
  if (id < 0) return id;
  pcgc_node *m = &dst->nodes[id];
  size_t ln = strlen(n->name);
  for (int k = 1; k < n->n_out && k < m->n_out; k++) {
    const char *o = n->out_names[k];
    char buf[1200];
    if (name == n->name || strcmp(name, n->name) == 0) snprintf(buf, sizeof buf, "%s", o);
    else if (strncmp(o, n->name, ln) == 0 && o[ln] == '.') snprintf(buf, sizeof buf, "%.600s%.500s", name, o + ln);
    else continue; /* a renamed copy of a custom output name would clash: keep the default */
    if (strcmp(buf, m->out_names[k]) != 0) {
      pcgc_status s = pcgc_graph_set_output_name(dst, id, k, buf);
      if (s != PCGC_OK) return s;
    }
  }
  m->loc = n->loc;
  if (src->file && n->loc.file == src->file) m->loc.file = dst->file;
  if (n->value) {
    pcgc_ints shape = pcgc_attrs_ints(n->attrs, "shape");
    int64_t numel = 1;
    for (int k = 0; k < shape.n; k++) numel *= shape.v[k];
    pcgc_status s = pcgc_graph_set_value(dst, id, n->value, numel);
    if (s != PCGC_OK) return s;
  }
  return id;
}

pcgc_graph *pcgc_graph_clone(const pcgc_graph *g) {
  pcgc_graph *c = pcgc_graph_new();
  if (!c) return NULL;
  if (pcgc_graph_reserve(c, g->n_nodes) != PCGC_OK) goto fail; /* every node at once, not by doubling */
  if (g->name && !(c->name = dupstr(g->name))) goto fail;
  if (g->file && !(c->file = dupstr(g->file))) goto fail;
  for (int i = 0; i < g->n_nodes; i++) {
    const pcgc_node *n = &g->nodes[i];
    int id = pcgc_graph_copy_node(c, g, i, NULL, NULL);
    if (id < 0) goto fail;
    pcgc_node *m = &c->nodes[id];
    if (m->n_out == n->n_out) memcpy(m->out, n->out, (size_t)n->n_out * sizeof *n->out);
    m->typed = n->typed;
  }
  return c;
fail:
  pcgc_graph_free(c);
  return NULL;
}

const pcgc_ptensor *pcgc_graph_ref_type(const pcgc_graph *g, pcgc_ref r) {
  if (r.node < 0 || r.node >= g->n_nodes) return NULL;
  const pcgc_node *n = &g->nodes[r.node];
  if (r.slot < 0 || r.slot >= n->n_out || !n->typed) return NULL;
  return &n->out[r.slot];
}

/* Points an error at the node's definition in its model file, if known. */
static void at_node(pcgc_error *err, const pcgc_node *n) {
  if (err && n->loc.file) {
    pcgc_srcloc loc = n->loc;
    char msg[sizeof err->message], hint[sizeof err->hint];
    memcpy(msg, err->message, sizeof msg);
    memcpy(hint, err->hint, sizeof hint);
    pcgc_error_at(err, loc, 0, NULL, 0);
    memcpy(err->message, msg, sizeof msg);
    memcpy(err->hint, hint, sizeof hint);
  }
}

/* Structural checks of node i's inputs: arity, existing nodes and slots. */
static pcgc_status check_edges(const pcgc_graph *g, int i, pcgc_error *err) {
  const pcgc_node *n = &g->nodes[i];
  int lo = pcgc_op_min_inputs(n->kind), hi = pcgc_op_max_inputs(n->kind);
  if (n->n_in < lo || n->n_in > hi) {
    pcgc_error_set(err, PCGC_ERR_GRAPH, "%s '%s' has %d inputs but takes %d to %d",
                   pcgc_op_name(n->kind), n->name, n->n_in, lo, hi);
    at_node(err, n);
    return PCGC_ERR_GRAPH;
  }
  for (int k = 0; k < n->n_in; k++) {
    pcgc_ref r = n->in[k];
    if (r.node < 0 || r.node >= g->n_nodes) {
      pcgc_error_set(err, PCGC_ERR_GRAPH, "%s '%s': input %d refers to node %d, which does not exist "
                     "(dangling input)", pcgc_op_name(n->kind), n->name, k, r.node);
      at_node(err, n);
      return PCGC_ERR_GRAPH;
    }
    const pcgc_node *p = &g->nodes[r.node];
    if (r.slot < 0 || r.slot >= p->n_out) {
      pcgc_error_set(err, PCGC_ERR_GRAPH, "%s '%s': input %d reads output %d of '%s', which has %d output%s",
                     pcgc_op_name(n->kind), n->name, k, r.slot, p->name, p->n_out, p->n_out == 1 ? "" : "s");
      at_node(err, n);
      return PCGC_ERR_GRAPH;
    }
  }
  return PCGC_OK;
}

pcgc_status pcgc_graph_topo_order(const pcgc_graph *g, int *order, pcgc_error *err) {
  int n = g->n_nodes;
  if (n <= 0) return PCGC_OK;
  for (int i = 0; i < n; i++) {
    pcgc_status s = check_edges(g, i, err);
    if (s != PCGC_OK) return s;
  }
  /* consumers in CSR form, and in-degrees */
  int *indeg = calloc((size_t)n, sizeof *indeg), *start = calloc((size_t)n + 1, sizeof *start);
  int total = 0;
  for (int i = 0; i < n; i++) total += g->nodes[i].n_in;
  int *users = malloc((size_t)(total ? total : 1) * sizeof *users);
  int *heap = malloc((size_t)n * sizeof *heap);
  if (!indeg || !start || !users || !heap) {
    free(indeg); free(start); free(users); free(heap);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory ordering %d nodes", n);
  }
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) start[g->nodes[i].in[k].node + 1]++;
  for (int i = 0; i < n; i++) start[i + 1] += start[i];
  int *fill = calloc((size_t)n, sizeof *fill);
  if (!fill) {
    free(indeg); free(start); free(users); free(heap);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory ordering %d nodes", n);
  }
  for (int i = 0; i < n; i++) {
    indeg[i] = g->nodes[i].n_in;
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int p = g->nodes[i].in[k].node;
      users[start[p] + fill[p]++] = i;
    }
  }
  free(fill);
  /* Kahn's algorithm with a min-heap on node id */
  int hn = 0, done = 0;
#define HEAP_PUSH(x) do { int j_ = hn++; heap[j_] = (x); \
    while (j_ > 0 && heap[(j_ - 1) / 2] > heap[j_]) { int t_ = heap[j_]; heap[j_] = heap[(j_ - 1) / 2]; \
      heap[(j_ - 1) / 2] = t_; j_ = (j_ - 1) / 2; } } while (0)
  for (int i = 0; i < n; i++)
    if (indeg[i] == 0) HEAP_PUSH(i);
  while (hn > 0) {
    int v = heap[0];
    heap[0] = heap[--hn];
    for (int j = 0;;) {
      int l = 2 * j + 1, r = l + 1, m = j;
      if (l < hn && heap[l] < heap[m]) m = l;
      if (r < hn && heap[r] < heap[m]) m = r;
      if (m == j) break;
      int t = heap[j]; heap[j] = heap[m]; heap[m] = t;
      j = m;
    }
    order[done++] = v;
    for (int u = start[v]; u < start[v + 1]; u++)
      if (--indeg[users[u]] == 0) HEAP_PUSH(users[u]);
  }
#undef HEAP_PUSH
  pcgc_status s = PCGC_OK;
  if (done < n) {
    int bad = 0;
    while (bad < n && indeg[bad] == 0) bad++;
    const pcgc_node *b = &g->nodes[bad < n ? bad : 0];
    pcgc_error_set(err, PCGC_ERR_GRAPH, "the graph has a cycle through %s '%s' (%d nodes are on or "
                   "after cycles)", pcgc_op_name(b->kind), b->name, n - done);
    at_node(err, b);
    s = PCGC_ERR_GRAPH;
  }
  free(indeg); free(start); free(users); free(heap);
  return s;
}

pcgc_status pcgc_graph_infer_node(pcgc_graph *g, int id, pcgc_error *err) {
  if (id < 0 || id >= g->n_nodes)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "no node %d", id);
  pcgc_status s = check_edges(g, id, err);
  if (s != PCGC_OK) return s;
  pcgc_node *n = &g->nodes[id];
  pcgc_ptensor in[PCGC_VARIADIC];
  for (int k = 0; k < n->n_in; k++) {
    const pcgc_ptensor *t = pcgc_graph_ref_type(g, n->in[k]);
    if (!t) {
      pcgc_error_set(err, PCGC_ERR_GRAPH, "%s '%s': input %d ('%s') has no type yet",
                     pcgc_op_name(n->kind), n->name, k, g->nodes[n->in[k].node].name);
      at_node(err, n);
      return PCGC_ERR_GRAPH;
    }
    in[k] = *t;
  }
  if (pcgc_op_num_outputs(n->kind, n->attrs) != n->n_out) {
    pcgc_error_set(err, PCGC_ERR_GRAPH, "%s '%s' has %d outputs but its attributes give %d",
                   pcgc_op_name(n->kind), n->name, n->n_out, pcgc_op_num_outputs(n->kind, n->attrs));
    at_node(err, n);
    return PCGC_ERR_GRAPH;
  }
  s = pcgc__op_infer_named(n->kind, n->name, n->attrs, n->n_in, in, n->out, err);
  n->typed = s == PCGC_OK;
  if (s != PCGC_OK) at_node(err, n);
  return s;
}

pcgc_status pcgc_graph_infer(pcgc_graph *g, pcgc_error *err) {
  int *order = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *order);
  if (!order) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  pcgc_status s = pcgc_graph_topo_order(g, order, err);
  for (int i = 0; i < g->n_nodes; i++) g->nodes[i].typed = false;
  for (int i = 0; s == PCGC_OK && i < g->n_nodes; i++) s = pcgc_graph_infer_node(g, order[i], err);
  free(order);
  return s;
}

/* Every node's recorded types are what inference gives from its inputs'
 * recorded types, node by node in topological order: by induction from the
 * sources, what inferring the whole graph afresh would give. No copy of the
 * graph is made (it doubled the memory of loading a model; issue 17). */
pcgc_status pcgc_graph_validate(const pcgc_graph *g, pcgc_error *err) {
  /* names must be unique: the index holds the first node of each name */
  for (int i = 0; i < g->n_nodes; i++)
    if (pcgc_graph_find(g, g->nodes[i].name) != i)
      return pcgc_error_set(err, PCGC_ERR_GRAPH, "two nodes are named '%s'", g->nodes[i].name);
  int most = 1;
  for (int i = 0; i < g->n_nodes; i++) most = g->nodes[i].n_out > most ? g->nodes[i].n_out : most;
  int *order = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *order);
  pcgc_ptensor *got = malloc((size_t)most * sizeof *got);
  pcgc_status s = order && got ? pcgc_graph_topo_order(g, order, err) : pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  for (int j = 0; s == PCGC_OK && j < g->n_nodes; j++) {
    const pcgc_node *n = &g->nodes[order[j]];
    if ((s = check_edges(g, order[j], err))) break;
    pcgc_ptensor in[PCGC_VARIADIC];
    for (int k = 0; k < n->n_in; k++) in[k] = g->nodes[n->in[k].node].out[n->in[k].slot]; /* typed: checked before */
    if (pcgc_op_num_outputs(n->kind, n->attrs) != n->n_out) {
      s = pcgc_error_set(err, PCGC_ERR_GRAPH, "%s '%s' has %d outputs but its attributes give %d",
                         pcgc_op_name(n->kind), n->name, n->n_out, pcgc_op_num_outputs(n->kind, n->attrs));
      at_node(err, n);
      break;
    }
    if ((s = pcgc__op_infer_named(n->kind, n->name, n->attrs, n->n_in, in, got, err))) {
      at_node(err, n);
      break;
    }
    if (!n->typed) {
      s = pcgc_error_set(err, PCGC_ERR_TYPE, "%s '%s' has no inferred type", pcgc_op_name(n->kind), n->name);
      break;
    }
    for (int k = 0; k < n->n_out; k++)
      if (!pcgc_ptensor_equal(&n->out[k], &got[k])) {
        char t1[160], t2[160];
        pcgc_ptensor_format(t1, sizeof t1, &n->out[k]);
        pcgc_ptensor_format(t2, sizeof t2, &got[k]);
        s = pcgc_error_set(err, PCGC_ERR_TYPE, "%s '%s': output %d is recorded as %s but its inputs give %s "
                           "(type mismatch)", pcgc_op_name(n->kind), n->name, k, t1, t2);
        at_node(err, n);
        break;
      }
  }
  free(order);
  free(got);
  return s;
}

pcgc_status pcgc_graph_stats_compute(const pcgc_graph *g, pcgc_graph_stats *st, pcgc_error *err) {
  memset(st, 0, sizeof *st);
  st->n_nodes = g->n_nodes;
  for (int i = 0; i < g->n_nodes; i++) {
    const pcgc_node *n = &g->nodes[i];
    if (!n->typed)
      return pcgc_error_set(err, PCGC_ERR_TYPE, "%s '%s' has no type: infer the graph first",
                            pcgc_op_name(n->kind), n->name);
    st->count_by_kind[n->kind]++;
    pcgc_ptensor in[PCGC_VARIADIC];
    for (int k = 0; k < n->n_in; k++) in[k] = *pcgc_graph_ref_type(g, n->in[k]);
    pcgc_op_cost cost;
    pcgc_op_cost_of(n->kind, n->attrs, n->n_in, in, n->n_out, n->out, &cost);
    st->params += cost.params;
    if (n->kind == PCGC_OP_WEIGHT) st->param_bytes += (double)pcgc_ptensor_bytes(&n->out[0]);
    if (n->kind == PCGC_OP_INPUT) st->input_bytes += (double)pcgc_ptensor_bytes(&n->out[0]);
    st->fwd_flops += cost.fwd_flops;
    st->bwd_flops += cost.bwd_flops;
    pcgc_op_class cls = pcgc_op_class_of(n->kind);
    if (cls == PCGC_CLASS_COMPUTE || cls == PCGC_CLASS_LOSS)
      for (int k = 0; k < n->n_out; k++) st->activation_bytes += (double)pcgc_ptensor_bytes(&n->out[k]);
  }
  return PCGC_OK;
}

/* ------------------------------------------------------------ add a loss */

pcgc_status pcgc_graph_add_loss(pcgc_graph *g, pcgc_op_kind kind, pcgc_error *err) {
  if (kind != PCGC_OP_SOFTMAX_CROSS_ENTROPY && kind != PCGC_OP_MSE)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "a loss is softmax_cross_entropy or mse, not %s", pcgc_op_name(kind));
  pcgc_status st = pcgc_graph_infer(g, err);
  if (st != PCGC_OK) return st;
  int n = g->n_nodes;
  bool *read = calloc((size_t)(n ? n : 1) * PCGC_VARIADIC, sizeof *read); /* [node][slot] */
  if (!read) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) {
    const pcgc_node *x = &g->nodes[i];
    if (pcgc_op_class_of(x->kind) == PCGC_CLASS_LOSS) {
      free(read);
      pcgc_error_set(err, PCGC_ERR_INVALID, "the model already has a loss, '%s' (%s)", x->name, pcgc_op_name(x->kind));
      pcgc_error_hint(err, "leave out the loss option; training uses the model's own loss");
      return PCGC_ERR_INVALID;
    }
    for (int k = 0; k < x->n_in; k++)
      if (x->in[k].slot < PCGC_VARIADIC) read[(size_t)x->in[k].node * PCGC_VARIADIC + (size_t)x->in[k].slot] = true;
  }
  pcgc_ref out = {-1, -1};
  int found = 0;
  char names[512] = "";
  for (int i = 0; i < n; i++) {
    const pcgc_node *x = &g->nodes[i];
    if (pcgc_op_class_of(x->kind) == PCGC_CLASS_SOURCE) continue;
    /* outputs are the nodes nothing reads: the unread pieces of a split
     * whose other pieces are read are dead ends, not outputs */
    bool sink = true;
    for (int k = 0; k < x->n_out && k < PCGC_VARIADIC; k++) sink = sink && !read[(size_t)i * PCGC_VARIADIC + (size_t)k];
    for (int k = 0; sink && k < x->n_out && k < PCGC_VARIADIC; k++) {
      if (!pcgc_dtype_is_float(x->out[k].dtype)) continue;
      if (found++ == 0) out = (pcgc_ref){i, k};
      size_t l = strlen(names);
      snprintf(names + l, sizeof names - l, "%s'%s'", l ? ", " : "", x->out_names[k]);
    }
  }
  free(read);
  if (found != 1) {
    if (found) pcgc_error_set(err, PCGC_ERR_INVALID, "the model has %d outputs (%s); a loss needs exactly one", found, names);
    else pcgc_error_set(err, PCGC_ERR_INVALID, "the model has no floating-point output a loss could read");
    pcgc_error_hint(err, "write the model in the model format with its loss (docs/model-format.md)");
    return PCGC_ERR_INVALID;
  }
  const pcgc_ptensor *t = &g->nodes[out.node].out[out.slot];
  if (kind == PCGC_OP_SOFTMAX_CROSS_ENTROPY && t->rank < 1)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "output '%s' is a scalar; cross entropy needs class scores",
                          g->nodes[out.node].out_names[out.slot]);
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_INPUT);
  int rank = kind == PCGC_OP_MSE ? t->rank : t->rank - 1;
  if (pcgc_attrs_set_ints(&a, "shape", rank, t->dims) != PCGC_OK)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "cannot make labels for output '%s'", g->nodes[out.node].name);
  pcgc_attrs_set_int(&a, "dtype", kind == PCGC_OP_MSE ? t->dtype : PCGC_I32);
  char lname[64] = "labels", loss[64] = "loss";
  for (int v = 1; pcgc_graph_find(g, lname) >= 0; v++) snprintf(lname, sizeof lname, "labels_%d", v);
  for (int v = 1; pcgc_graph_find(g, loss) >= 0; v++) snprintf(loss, sizeof loss, "loss_%d", v);
  int li = pcgc_graph_add_node(g, PCGC_OP_INPUT, lname, &a, 0, NULL);
  if (li < 0) return pcgc_error_set(err, (pcgc_status)li, "cannot add the labels input");
  pcgc_attrs_init(&a, kind);
  pcgc_ref in[2] = {out, {li, 0}};
  int id = pcgc_graph_add_node(g, kind, loss, &a, 2, in);
  if (id < 0) return pcgc_error_set(err, (pcgc_status)id, "cannot add the loss");
  return pcgc_graph_infer(g, err);
}
