/*
 * apply.c — rewriting one match of a rule instance into a new graph.
 *
 * The new graph holds every node of g outside the match, in g's order and
 * with their names, attributes, output names, locations and values, then
 * one node per rewrite node, in the rule's order (the graph allows forward
 * references, so a surviving node may read a rewrite node added after it).
 * Edges are remapped through one table: a surviving node keeps its place; a
 * match yield is replaced by the rewrite yield of the same position (a
 * rewrite node's output, or a match input for rules that remove operators).
 * Rewrite attributes come from pcgc__rnode_attrs with every symbol of the
 * match set and the match's graph nodes behind `y.*` and `y.KEY`.
 *
 * Then the result is checked: a cycle (a match input computed from a match
 * yield) is PCGC_ERR_INVALID; a rewrite that does not infer, or a yield
 * whose type differs from the tensor it replaces, is PCGC_ERR_TYPE.
 */
#include <stdlib.h>
#include <string.h>

#include "rules_internal.h"

/* What the rewrite's expressions see of the match in g. */
typedef struct actx {
  const pcgc_graph *g;
  const pcgc_match *m;
} actx;

static const pcgc_ptensor *a_type_of(void *ctx, int t) {
  const actx *a = ctx;
  const pcgc_rule *r = a->m->inst->rule;
  if (t < 0 || t >= r->n_tensors || r->tensors[t].side != 0) return NULL;
  const rtensor *rt = &r->tensors[t];
  if (rt->input >= 0) return pcgc_graph_ref_type(a->g, a->m->inputs[rt->input]);
  if (rt->node < 0) return NULL;
  return pcgc_graph_ref_type(a->g, (pcgc_ref){a->m->nodes[rt->node], rt->slot});
}

static const pcgc_attrs *a_attrs_of(void *ctx, int t) {
  const actx *a = ctx;
  const pcgc_rule *r = a->m->inst->rule;
  if (t < 0 || t >= r->n_tensors || r->tensors[t].side != 0 || r->tensors[t].node < 0) return NULL;
  return a->g->nodes[a->m->nodes[r->tensors[t].node]].attrs;
}

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* Scratch of one rewrite, freed together. */
typedef struct apply_tmp {
  int *new_id;        /* g node -> new graph node, -1 for matched nodes */
  int *order;         /* topological order of the new graph */
  pcgc_ref *in;       /* inputs of the node being added */
} apply_tmp;

/* The new-graph tensor that replaces match tensor t (a match input, or a
 * rewrite tensor): where rewrite yields and rewrite arguments point. */
static pcgc_ref rewrite_ref(const pcgc_rule *r, const pcgc_match *m, const int *new_id, int first_new, int t) {
  const rtensor *rt = &r->tensors[t];
  if (rt->side == 0 && rt->input >= 0) {
    pcgc_ref in = m->inputs[rt->input];
    return (pcgc_ref){new_id[in.node], in.slot};
  }
  if (rt->side == 1 && rt->node >= 0) return (pcgc_ref){first_new + rt->node, rt->slot};
  return (pcgc_ref){-1, -1};
}

/* Unique name "<base>/<tensor>" (or with a suffix) for a new node. */
static void new_name(const pcgc_graph *ng, const char *base, const char *tensor, char *buf, size_t n) {
  snprintf(buf, n, "%.400s/%.100s", base, tensor);
  for (int k = 2; pcgc_graph_find(ng, buf) >= 0; k++) snprintf(buf, n, "%.400s/%.100s_%d", base, tensor, k);
}

/* Builds the rewritten graph (untyped). Errors other than out of memory
 * are PCGC_ERR_INVALID: a malformed match. */
static pcgc_status build(const pcgc_graph *g, const pcgc_match *m, apply_tmp *tmp, pcgc_graph *ng,
                         pcgc_ref *yield_to, pcgc_error *err) {
  const pcgc_rule *r = m->inst->rule;
  const char *rn = r->name;
  int n = g->n_nodes;
  for (int i = 0; i < n; i++) tmp->new_id[i] = 0;
  for (int p = 0; p < r->match.n_nodes; p++) {
    int c = m->nodes[p];
    if (c < 0 || c >= n || tmp->new_id[c] < 0)
      return pcgc_error_set(err, PCGC_ERR_INVALID, "rule '%s': the match names node %d out of range or twice",
                            rn, c);
    tmp->new_id[c] = -1;
  }
  int survivors = 0;
  for (int i = 0; i < n; i++)
    if (tmp->new_id[i] == 0) tmp->new_id[i] = survivors++;
  for (int i = 0; i < r->n_inputs; i++) {
    pcgc_ref in = m->inputs[i];
    if (in.node < 0 || in.node >= n || in.slot < 0 || in.slot >= g->nodes[in.node].n_out)
      return pcgc_error_set(err, PCGC_ERR_INVALID, "rule '%s': match input %d is not a tensor of the graph", rn, i);
    if (tmp->new_id[in.node] < 0)
      return pcgc_error_set(err, PCGC_ERR_INVALID, "rule '%s': match input '%s' is computed by the match itself "
                            "(the result would have a cycle)", rn, r->tensors[r->inputs[i]].name);
  }
  if (r->match.n_yields != r->rewrite.n_yields)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "rule '%s': %d match yields but %d rewrite yields", rn,
                          r->match.n_yields, r->rewrite.n_yields);
  for (int y = 0; y < r->rewrite.n_yields; y++) {
    const rtensor *mt = &r->tensors[r->match.yields[y]];
    if (mt->side != 0 || mt->node < 0)
      return pcgc_error_set(err, PCGC_ERR_INVALID, "rule '%s': match yield '%s' is not computed by the match",
                            rn, mt->name);
    yield_to[y] = rewrite_ref(r, m, tmp->new_id, survivors, r->rewrite.yields[y]);
    if (yield_to[y].node < 0)
      return pcgc_error_set(err, PCGC_ERR_INVALID, "rule '%s': rewrite yield %d is neither a match input nor a "
                            "rewrite tensor", rn, y);
  }

  /* surviving nodes, reading rewrite yields where they read match yields */
  for (int i = 0; i < n; i++) {
    if (tmp->new_id[i] < 0) continue;
    const pcgc_node *nd = &g->nodes[i];
    for (int k = 0; k < nd->n_in; k++) {
      pcgc_ref in = nd->in[k];
      if (tmp->new_id[in.node] >= 0) {
        tmp->in[k] = (pcgc_ref){tmp->new_id[in.node], in.slot};
        continue;
      }
      int y = 0;
      while (y < r->match.n_yields) {
        const rtensor *mt = &r->tensors[r->match.yields[y]];
        if (m->nodes[mt->node] == in.node && mt->slot == in.slot) break;
        y++;
      }
      if (y == r->match.n_yields)
        return pcgc_error_set(err, PCGC_ERR_INVALID, "rule '%s': %s '%s' reads an intermediate tensor of the match",
                              rn, pcgc_op_name(nd->kind), nd->name);
      tmp->in[k] = yield_to[y];
    }
    int id = pcgc_graph_copy_node(ng, g, nd->id, NULL, tmp->in);
    pcgc_status s = id < 0 ? (pcgc_status)id : PCGC_OK;
    if (s != PCGC_OK)
      return pcgc_error_set(err, s == PCGC_ERR_NOMEM ? s : PCGC_ERR_INVALID, "rule '%s': cannot copy node '%s'",
                            rn, nd->name);
  }

  /* rewrite nodes */
  actx ac = {g, m};
  rx_env env;
  memset(&env, 0, sizeof env);
  env.rule = r;
  memcpy(env.sym, m->sym, sizeof env.sym);
  for (int s = 0; s < PCGC_RULE_MAX_SYMS; s++) env.sym_set[s] = true;
  env.type_of = a_type_of;
  env.attrs_of = a_attrs_of;
  env.ctx = &ac;
  const char *base = g->nodes[m->nodes[0]].name;
  for (int q = 0; q < r->rewrite.n_nodes; q++) {
    const rnode *rn_ = &r->rewrite.nodes[q];
    pcgc_attrs a;
    pcgc_status s = pcgc__rnode_attrs(&env, rn_, &a, err);
    if (s != PCGC_OK) return s;
    for (int j = 0; j < rn_->n_args; j++) {
      tmp->in[j] = rewrite_ref(r, m, tmp->new_id, survivors, rn_->args[j]);
      if (tmp->in[j].node < 0)
        return pcgc_error_set(err, PCGC_ERR_INVALID, "rule '%s': rewrite %s reads '%s', which is not a match input "
                              "or an earlier rewrite tensor", rn, pcgc_op_name(rn_->op),
                              r->tensors[rn_->args[j]].name);
    }
    int t0 = rn_->n_outs > 0 ? rn_->outs[0] : -1;
    char name[600];
    new_name(ng, base, t0 >= 0 ? r->tensors[t0].name : pcgc_op_name(rn_->op), name, sizeof name);
    int id = pcgc_graph_add_node(ng, rn_->op, name, &a, rn_->n_args, tmp->in);
    if (id < 0)
      return pcgc_error_set(err, id == PCGC_ERR_NOMEM ? PCGC_ERR_NOMEM : PCGC_ERR_INVALID,
                            "rule '%s': cannot add rewrite %s '%s'", rn, pcgc_op_name(rn_->op), name);
    if (ng->nodes[id].n_out != rn_->n_outs)
      return pcgc_error_set(err, PCGC_ERR_TYPE, "rule '%s': rewrite %s '%s' has %d outputs but the rule names %d",
                            rn, pcgc_op_name(rn_->op), name, ng->nodes[id].n_out, rn_->n_outs);
  }
  return PCGC_OK;
}

pcgc_status pcgc_rule_apply(const pcgc_graph *g, const pcgc_match *m, pcgc_graph **out, pcgc_error *err) {
  *out = NULL;
  if (!g || !m || !m->inst || !m->inst->rule)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_rule_apply: missing argument");
  const pcgc_rule *r = m->inst->rule;
  if (r->match.n_nodes <= 0)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "rule '%s' matches no operator", r->name);
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].typed)
      return pcgc_error_set(err, PCGC_ERR_TYPE, "rule '%s': the graph is not typed (infer it first)", r->name);
  size_t n = (size_t)g->n_nodes, max_in = PCGC_VARIADIC;
  apply_tmp tmp = {malloc(n * sizeof(int)), malloc((n + PCGC_RULE_MAX_NODES) * sizeof(int)),
                   malloc(max_in * sizeof(pcgc_ref))};
  pcgc_graph *ng = pcgc_graph_new();
  pcgc_status s = PCGC_OK;
  if (!tmp.new_id || !tmp.order || !tmp.in || !ng || pcgc_graph_reserve(ng, g->n_nodes + PCGC_RULE_MAX_NODES) ||
      (g->name && !(ng->name = dupstr(g->name))) ||
      (g->file && !(ng->file = dupstr(g->file)))) {
    s = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory applying rule '%s'", r->name);
    goto fail;
  }
  pcgc_ref yield_to[PCGC_RULE_MAX_YIELDS];
  s = build(g, m, &tmp, ng, yield_to, err);
  if (s != PCGC_OK) goto fail;

  pcgc_error e2;
  pcgc_error_clear(&e2);
  s = pcgc_graph_topo_order(ng, tmp.order, &e2);
  if (s == PCGC_ERR_NOMEM) {
    s = pcgc_error_set(err, s, "out of memory applying rule '%s'", r->name);
    goto fail;
  }
  if (s != PCGC_OK) {
    s = pcgc_error_set(err, PCGC_ERR_INVALID, "rule '%s' at '%s': the result would have a cycle (%s)", r->name,
                       g->nodes[m->nodes[0]].name, e2.message);
    goto fail;
  }
  /* the surviving nodes keep their types (what they read is unchanged or a
   * rewrite yield, checked below to keep its type); the rewrite's nodes are
   * inferred, in topological order */
  for (int i = 0; i < g->n_nodes; i++) {
    if (tmp.new_id[i] < 0) continue;
    pcgc_node *x = &ng->nodes[tmp.new_id[i]];
    for (int k = 0; k < x->n_out; k++) x->out[k] = g->nodes[i].out[k];
    x->typed = true;
  }
  for (int k = 0; s == PCGC_OK && k < ng->n_nodes; k++)
    if (!ng->nodes[tmp.order[k]].typed) s = pcgc_graph_infer_node(ng, tmp.order[k], &e2);
  if (s != PCGC_OK) {
    s = pcgc_error_set(err, s == PCGC_ERR_NOMEM ? s : PCGC_ERR_TYPE,
                       "rule '%s' at '%s': the rewrite does not type-check: %s", r->name,
                       g->nodes[m->nodes[0]].name, e2.message);
    goto fail;
  }
  for (int y = 0; y < r->match.n_yields; y++) {
    const rtensor *mt = &r->tensors[r->match.yields[y]];
    const pcgc_ptensor *was = pcgc_graph_ref_type(g, (pcgc_ref){m->nodes[mt->node], mt->slot});
    const pcgc_ptensor *now = pcgc_graph_ref_type(ng, yield_to[y]);
    if (!pcgc_ptensor_equal(was, now)) {
      char t1[200], t2[200];
      pcgc_ptensor_format(t1, sizeof t1, was);
      pcgc_ptensor_format(t2, sizeof t2, now);
      s = pcgc_error_set(err, PCGC_ERR_TYPE, "rule '%s' at '%s': yield %d ('%s') was %s but the rewrite gives %s",
                         r->name, g->nodes[m->nodes[0]].name, y, mt->name, t1, t2);
      goto fail;
    }
  }
  free(tmp.new_id);
  free(tmp.order);
  free(tmp.in);
  *out = ng;
  return PCGC_OK;
fail:
  free(tmp.new_id);
  free(tmp.order);
  free(tmp.in);
  pcgc_graph_free(ng);
  return s;
}
