/*
 * match.c — finding the occurrences of a rule instance in a typed PCG.
 *
 * The graph index (built once per graph) holds the consumers of every
 * tensor (node, slot) in CSR form, each as (consumer node, input index) in
 * increasing node order, and the node ids of every op kind.
 *
 * Matching is backtracking over the match-side nodes of the rule in a
 * static order (the plan): the first pattern node is the one whose op kind
 * has the fewest graph nodes, and every next one is adjacent to what is
 * already matched, so that it has few candidates:
 *   - it produces a tensor a matched node reads: the one graph node that
 *     produces the bound tensor (SRC_PRODUCER);
 *   - it reads a bound tensor at argument j: the graph consumers of that
 *     tensor at input j (SRC_CONSUMER; this is what finds two linears that
 *     share only a match input);
 *   - otherwise every graph node of its kind (SRC_ALL).
 * Every rule tensor (match input or node output) is bound to a graph ref
 * the first time a matched node touches it; later touches must agree. A
 * trail undoes the bindings on backtracking. What is cheap and needs no
 * symbol is checked per candidate: op kind, arity, outputs, injectivity,
 * constant attributes (enums, bools, floats, expressions of parameters),
 * input dtypes and ranks, and intermediates (a non-yielded output must have
 * exactly as many graph consumers as the pattern has readers of it, so none
 * is outside the match).
 *
 * Once every pattern node is placed, the remaining constraints (attribute
 * expressions, input dims, ellipses and parallel-type items) are resolved
 * in passes until none makes progress: a bare unbound variable binds, other
 * expressions are evaluated (pcgc__rx_eval) and compared, and one that needs
 * a variable bound later waits for the next pass. Anything still unresolved
 * means no match; then every `where` condition must hold.
 *
 * Nothing is allocated while matching: the plan and the state live on the
 * stack of pcgc_rule_find_matches.
 */
#include <stdlib.h>
#include <string.h>

#include "rules_internal.h"

/* ------------------------------------------------------------ the index */

struct pcgc_graph_index {
  const pcgc_graph *g;
  int n_nodes;
  bool typed;                       /* every node has inferred types */
  int *out_base;                    /* tensor id of (node, 0); n_nodes + 1 entries */
  int *cons_start;                  /* consumers of tensor t: cons[cons_start[t] .. cons_start[t+1]) */
  pcgc_ref *cons;                   /* {consumer node, input index} */
  int kind_start[PCGC_OP_COUNT + 1];
  int *kind_nodes;                  /* node ids grouped by op kind, increasing */
};

void pcgc_graph_index_free(pcgc_graph_index *ix) {
  if (!ix) return;
  free(ix->out_base);
  free(ix->cons_start);
  free(ix->cons);
  free(ix->kind_nodes);
  free(ix);
}

pcgc_graph_index *pcgc_graph_index_new(const pcgc_graph *g, pcgc_error *err) {
  int n = g->n_nodes;
  pcgc_graph_index *ix = calloc(1, sizeof *ix);
  if (!ix) goto nomem;
  ix->g = g;
  ix->n_nodes = n;
  ix->typed = true;
  ix->out_base = malloc(((size_t)n + 1) * sizeof *ix->out_base);
  ix->kind_nodes = malloc(((size_t)n + 1) * sizeof *ix->kind_nodes);
  if (!ix->out_base || !ix->kind_nodes) goto nomem;
  int n_tensors = 0, n_edges = 0;
  for (int i = 0; i < n; i++) {
    const pcgc_node *nd = &g->nodes[i];
    ix->out_base[i] = n_tensors;
    n_tensors += nd->n_out;
    n_edges += nd->n_in;
    if (!nd->typed) ix->typed = false;
    ix->kind_start[nd->kind + 1]++;
  }
  ix->out_base[n] = n_tensors;
  for (int k = 0; k < PCGC_OP_COUNT; k++) ix->kind_start[k + 1] += ix->kind_start[k];
  int fill_kind[PCGC_OP_COUNT];
  memcpy(fill_kind, ix->kind_start, sizeof fill_kind);
  for (int i = 0; i < n; i++) ix->kind_nodes[fill_kind[g->nodes[i].kind]++] = i;

  ix->cons_start = calloc((size_t)n_tensors + 2, sizeof *ix->cons_start);
  ix->cons = malloc(((size_t)n_edges + 1) * sizeof *ix->cons);
  if (!ix->cons_start || !ix->cons) goto nomem;
  for (int i = 0; i < n; i++) {
    const pcgc_node *nd = &g->nodes[i];
    for (int k = 0; k < nd->n_in; k++) {
      pcgc_ref r = nd->in[k];
      if (r.node < 0 || r.node >= n || r.slot < 0 || r.slot >= g->nodes[r.node].n_out) {
        pcgc_error_set(err, PCGC_ERR_GRAPH, "%s '%s': input %d refers to a tensor that does not exist",
                       pcgc_op_name(nd->kind), nd->name, k);
        pcgc_graph_index_free(ix);
        return NULL;
      }
      ix->cons_start[ix->out_base[r.node] + r.slot + 2]++;
    }
  }
  /* counts sit one ahead so that the fill below leaves the starts in place */
  for (int t = 0; t < n_tensors; t++) ix->cons_start[t + 2] += ix->cons_start[t + 1];
  for (int i = 0; i < n; i++) {
    const pcgc_node *nd = &g->nodes[i];
    for (int k = 0; k < nd->n_in; k++) {
      int t = ix->out_base[nd->in[k].node] + nd->in[k].slot;
      ix->cons[ix->cons_start[t + 1]++] = (pcgc_ref){i, k};
    }
  }
  return ix;
nomem:
  pcgc_graph_index_free(ix);
  pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory indexing a graph of %d nodes", n);
  return NULL;
}

static inline int tensor_id(const pcgc_graph_index *ix, pcgc_ref r) { return ix->out_base[r.node] + r.slot; }

static inline int n_consumers(const pcgc_graph_index *ix, pcgc_ref r) {
  int t = tensor_id(ix, r);
  return ix->cons_start[t + 1] - ix->cons_start[t];
}

int pcgc_rules_max_rank(const pcgc_graph *g) {
  int r = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const pcgc_node *n = &g->nodes[i];
    if (!n->typed) continue;
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k].rank > r) r = n->out[k].rank;
  }
  return r;
}

/* ------------------------------------------------------------- the plan */

enum { SRC_ALL, SRC_PRODUCER, SRC_CONSUMER };

/* A constraint left for after the structural match. */
typedef enum { CI_ATTR, CI_DIMS, CI_PITEM } citem_kind;
typedef struct citem {
  uint8_t kind;
  uint8_t a;        /* CI_ATTR: pattern node; else match input */
  uint8_t b;        /* CI_ATTR: index in rnode.attrs; CI_PITEM: index in pitems */
} citem;

#define MAX_ITEMS (PCGC_RULE_MAX_NODES * PCGC_RULE_MAX_ATTRS + PCGC_RULE_MAX_INPUTS * (1 + PCGC_RULE_MAX_PITEMS))

typedef struct mplan {
  int n;                                  /* pattern nodes */
  bool never;                             /* a constant constraint can never hold */
  int order[PCGC_RULE_MAX_NODES];
  uint8_t src[PCGC_RULE_MAX_NODES];       /* per step */
  int src_tensor[PCGC_RULE_MAX_NODES];    /* the bound rule tensor it hangs off */
  int src_index[PCGC_RULE_MAX_NODES];     /* SRC_CONSUMER: argument index */
  uint8_t uses[PCGC_RULE_MAX_TENSORS];    /* pattern arguments reading tensor t */
  bool yielded[PCGC_RULE_MAX_TENSORS];
  /* attributes whose value needs no symbol: checked per candidate */
  bool is_static[PCGC_RULE_MAX_NODES][PCGC_RULE_MAX_ATTRS];
  int64_t static_v[PCGC_RULE_MAX_NODES][PCGC_RULE_MAX_ATTRS][PCGC_MAX_RANK];
  int n_items;
  citem items[MAX_ITEMS];
} mplan;

/* The matcher's state for one instance on one graph. */
typedef struct mstate {
  const pcgc_rule *r;
  const pcgc_rule_inst *ri;
  const pcgc_graph *g;
  const pcgc_graph_index *ix;
  const mplan *plan;
  pcgc_match_fn fn;
  void *ctx;
  int depth;                              /* pattern nodes placed */
  int node_of[PCGC_RULE_MAX_NODES];       /* graph node of pattern node, -1 */
  pcgc_ref bound[PCGC_RULE_MAX_TENSORS];  /* graph tensor of rule tensor, node -1 when unbound */
  int trail[PCGC_RULE_MAX_TENSORS];
  int trail_n;
  rx_env env;                             /* symbols; reset for every structural match */
  int binds;                              /* symbols bound so far (progress of a pass) */
  /* first occurrence of every ellipsis: rule tensor, first dim, length */
  int ell_tensor[PCGC_RULE_MAX_SYMS], ell_start[PCGC_RULE_MAX_SYMS], ell_len[PCGC_RULE_MAX_SYMS];
} mstate;

static const pcgc_ptensor *ms_type_of(void *ctx, int t) {
  const mstate *ms = ctx;
  if (!ms || t < 0 || t >= ms->r->n_tensors || ms->r->tensors[t].side != 0) return NULL;
  pcgc_ref b = ms->bound[t];
  if (b.node < 0) return NULL;
  return &ms->g->nodes[b.node].out[b.slot];
}

static const pcgc_attrs *ms_attrs_of(void *ctx, int t) {
  const mstate *ms = ctx;
  if (!ms || t < 0 || t >= ms->r->n_tensors) return NULL;
  const rtensor *rt = &ms->r->tensors[t];
  if (rt->side != 0 || rt->node < 0 || ms->node_of[rt->node] < 0) return NULL;
  return ms->g->nodes[ms->node_of[rt->node]].attrs;
}

static void env_init(rx_env *env, const pcgc_rule_inst *ri, void *ctx) {
  memset(env, 0, sizeof *env);
  env->rule = ri->rule;
  for (int i = 0; i < ri->rule->n_params && i < PCGC_RULE_MAX_PARAMS; i++) {
    env->sym[i] = ri->params[i];
    env->sym_set[i] = true;
  }
  env->type_of = ms_type_of;
  env->attrs_of = ms_attrs_of;
  env->ctx = ctx;
}

/* Whether attribute constraint ra can be decided without the match; *never
 * when it is constant but can never hold (a division by zero). */
static bool attr_static(const rx_env *env, const rattr *ra, int64_t *v, bool *never) {
  switch (ra->kind) {
  case RV_ENUM: case RV_BOOL: case RV_FLOAT: return true;
  case RV_EXPR: case RV_LIST: break;
  }
  int n = ra->kind == RV_EXPR ? 1 : ra->n;
  for (int j = 0; j < n; j++) {
    int32_t e = ra->kind == RV_EXPR ? ra->expr : ra->list[j];
    rx_result res = pcgc__rx_eval(env, e, &v[j]);
    if (res == RX_UNDEFINED) *never = true;
    if (res != RX_OK) return false;
  }
  return true;
}

static void plan_build(mplan *pl, const pcgc_rule_inst *ri, const pcgc_graph_index *ix) {
  const pcgc_rule *r = ri->rule;
  const rside *ms = &r->match;
  memset(pl, 0, sizeof *pl);
  pl->n = ms->n_nodes;
  for (int y = 0; y < ms->n_yields; y++) pl->yielded[ms->yields[y]] = true;
  for (int p = 0; p < ms->n_nodes; p++)
    for (int i = 0; i < ms->nodes[p].n_args; i++) pl->uses[ms->nodes[p].args[i]]++;

  rx_env env;
  env_init(&env, ri, NULL);
  for (int p = 0; p < ms->n_nodes; p++) {
    const rnode *pn = &ms->nodes[p];
    for (int a = 0; a < pn->n_attrs; a++) {
      pl->is_static[p][a] = attr_static(&env, &pn->attrs[a], pl->static_v[p][a], &pl->never);
      if (!pl->is_static[p][a]) pl->items[pl->n_items++] = (citem){CI_ATTR, (uint8_t)p, (uint8_t)a};
    }
  }
  for (int i = 0; i < r->n_inputs; i++) {
    const rtype *ty = r->tensors[r->inputs[i]].type;
    if (ty->has_shape) pl->items[pl->n_items++] = (citem){CI_DIMS, (uint8_t)i, 0};
    for (int k = 0; k < ty->n_pitems; k++) pl->items[pl->n_items++] = (citem){CI_PITEM, (uint8_t)i, (uint8_t)k};
  }

  /* the order: rarest kind first, then always a neighbour of what is placed */
  bool placed[PCGC_RULE_MAX_NODES] = {0}, bound[PCGC_RULE_MAX_TENSORS] = {0};
  for (int s = 0; s < pl->n; s++) {
    int best = -1, how = SRC_ALL, via = -1, via_index = -1;
    for (int p = 0; p < pl->n && how != SRC_PRODUCER; p++) {
      if (placed[p]) continue;
      const rnode *pn = &ms->nodes[p];
      for (int k = 0; k < pn->n_outs; k++)
        if (pn->outs[k] >= 0 && bound[pn->outs[k]]) {
          best = p, how = SRC_PRODUCER, via = pn->outs[k];
          break;
        }
      for (int j = 0; j < pn->n_args && how == SRC_ALL; j++)
        if (bound[pn->args[j]]) best = p, how = SRC_CONSUMER, via = pn->args[j], via_index = j;
    }
    if (how == SRC_ALL) {
      int fewest = 0;
      for (int p = 0; p < pl->n; p++) {
        if (placed[p]) continue;
        pcgc_op_kind k = ms->nodes[p].op;
        int count = ix->kind_start[k + 1] - ix->kind_start[k];
        if (best < 0 || count < fewest) best = p, fewest = count;
      }
    }
    pl->order[s] = best;
    pl->src[s] = (uint8_t)how;
    pl->src_tensor[s] = via;
    pl->src_index[s] = via_index;
    placed[best] = true;
    const rnode *pn = &ms->nodes[best];
    for (int j = 0; j < pn->n_args; j++) bound[pn->args[j]] = true;
    for (int k = 0; k < pn->n_outs; k++)
      if (pn->outs[k] >= 0) bound[pn->outs[k]] = true;
  }
}

/* ------------------------------------------------- structural matching */

static bool dtype_ok(int want, pcgc_dtype have) {
  switch (want) {
  case RT_DTYPE_ANY: return true;
  case RT_DTYPE_FLOAT: return pcgc_dtype_is_float(have);
  case RT_DTYPE_INT: return !pcgc_dtype_is_float(have);
  default: return want == (int)have;
  }
}

static void unbind_to(mstate *ms, int mark) {
  while (ms->trail_n > mark) ms->bound[ms->trail[--ms->trail_n]].node = -1;
}

/* Binds rule tensor t to graph tensor ref, or checks it agrees. A match
 * input's dtype and rank are checked here, where it is cheap. */
static bool bind(mstate *ms, int t, pcgc_ref ref) {
  pcgc_ref b = ms->bound[t];
  if (b.node >= 0) return b.node == ref.node && b.slot == ref.slot;
  const rtensor *rt = &ms->r->tensors[t];
  if (rt->input >= 0) {
    const pcgc_ptensor *ty = &ms->g->nodes[ref.node].out[ref.slot];
    if (!dtype_ok(rt->type->dtype, ty->dtype)) return false;
    if (rt->type->has_shape &&
        (rt->type->ellipsis_at < 0 ? ty->rank != rt->type->n_dims : ty->rank < rt->type->n_dims))
      return false;
  }
  ms->bound[t] = ref;
  ms->trail[ms->trail_n++] = t;
  return true;
}

static bool static_attrs_ok(const mstate *ms, int p, const pcgc_node *gn) {
  const rnode *pn = &ms->r->match.nodes[p];
  for (int a = 0; a < pn->n_attrs; a++) {
    if (!ms->plan->is_static[p][a]) continue;
    const rattr *ra = &pn->attrs[a];
    const int64_t *sv = ms->plan->static_v[p][a];
    int64_t vi = pcgc_attrs_int_at(gn->attrs, ra->attr);
    double vf = pcgc_attrs_float_at(gn->attrs, ra->attr);
    pcgc_ints l = pcgc_attrs_ints_at(gn->attrs, ra->attr);
    pcgc_attr_type ty = pcgc_op_attr(pn->op, ra->attr)->type;
    bool list = ty == PCGC_ATTR_INTS || ty == PCGC_ATTR_INTS2;
    switch (ra->kind) {
    case RV_ENUM: case RV_BOOL:
      if (list || ty == PCGC_ATTR_FLOAT || vi != ra->ival) return false;
      break;
    case RV_FLOAT:
      if (ty != PCGC_ATTR_FLOAT || vf != ra->f) return false;
      break;
    case RV_EXPR:
      if (ty == PCGC_ATTR_FLOAT) {
        if (vf != (double)sv[0]) return false;
      } else if (!list) {
        if (vi != sv[0]) return false;
      } else {
        for (int j = 0; j < l.n; j++)
          if (l.v[j] != sv[0]) return false;
      }
      break;
    case RV_LIST:
      if (!list || l.n != ra->n) return false;
      for (int j = 0; j < l.n; j++)
        if (l.v[j] != sv[j]) return false;
      break;
    }
  }
  return true;
}

/* Places pattern node p on graph node c; false (nothing bound) if it does not fit. */
static bool place(mstate *ms, int p, int c) {
  const rnode *pn = &ms->r->match.nodes[p];
  const pcgc_node *gn = &ms->g->nodes[c];
  if (gn->kind != pn->op || gn->n_in != pn->n_args || gn->n_out != pn->n_outs) return false;
  for (int s = 0; s < ms->depth; s++)
    if (ms->node_of[ms->plan->order[s]] == c) return false;
  if (!static_attrs_ok(ms, p, gn)) return false;
  for (int k = 0; k < gn->n_out; k++) {
    int t = pn->outs[k];
    if (t >= 0 && ms->plan->yielded[t]) continue;
    if (n_consumers(ms->ix, (pcgc_ref){c, k}) != (t >= 0 ? ms->plan->uses[t] : 0)) return false;
  }
  int mark = ms->trail_n;
  for (int i = 0; i < pn->n_args; i++)
    if (!bind(ms, pn->args[i], gn->in[i])) goto undo;
  for (int k = 0; k < pn->n_outs; k++)
    if (pn->outs[k] >= 0 && !bind(ms, pn->outs[k], (pcgc_ref){c, k})) goto undo;
  ms->node_of[p] = c;
  return true;
undo:
  unbind_to(ms, mark);
  return false;
}

/* ------------------------------------------------------ constraints */

typedef enum { U_OK, U_FAIL, U_WAIT } ures;

/* Expression e against an actual value: binds a bare unbound variable,
 * else evaluates and compares. */
static ures unify(mstate *ms, int32_t e, int64_t actual) {
  int32_t s;
  if (pcgc__rx_is_sym(ms->r, e, &s) && s >= 0 && s < PCGC_RULE_MAX_SYMS && !ms->env.sym_set[s] &&
      ms->r->syms[s].kind == RS_VAR) {
    ms->env.sym[s] = actual;
    ms->env.sym_set[s] = true;
    ms->binds++;
    return U_OK;
  }
  int64_t v;
  switch (pcgc__rx_eval(&ms->env, e, &v)) {
  case RX_OK: return v == actual ? U_OK : U_FAIL;
  case RX_UNBOUND: return U_WAIT;
  case RX_UNDEFINED: break;
  }
  return U_FAIL;
}

static ures worst(ures a, ures b) { return a == U_FAIL || b == U_FAIL ? U_FAIL : a == U_WAIT ? a : b; }

static ures check_attr(mstate *ms, int p, int a) {
  const rnode *pn = &ms->r->match.nodes[p];
  const rattr *ra = &pn->attrs[a];
  const pcgc_attrs *ga = ms->g->nodes[ms->node_of[p]].attrs;
  pcgc_ints l = pcgc_attrs_ints_at(ga, ra->attr);
  pcgc_attr_type ty = pcgc_op_attr(pn->op, ra->attr)->type;
  ures res = U_OK;
  if (ra->kind == RV_LIST) {
    if ((ty != PCGC_ATTR_INTS && ty != PCGC_ATTR_INTS2) || l.n != ra->n) return U_FAIL;
    for (int j = 0; j < l.n && res != U_FAIL; j++) res = worst(res, unify(ms, ra->list[j], l.v[j]));
    return res;
  }
  if (ra->kind != RV_EXPR) return U_FAIL;  /* the constant kinds are static */
  if (ty == PCGC_ATTR_FLOAT) {
    /* only a copy of another match node's float attribute */
    const rx *x = &ms->r->ex[ra->expr];
    if (x->kind != RX_ATTR) return U_FAIL;
    const pcgc_attrs *src = ms_attrs_of(ms, x->tensor);
    if (!src) return U_WAIT;
    return pcgc_attrs_float_at(src, x->attr) == pcgc_attrs_float_at(ga, ra->attr) ? U_OK : U_FAIL;
  }
  if (ty == PCGC_ATTR_INTS || ty == PCGC_ATTR_INTS2) {
    /* a copy of another match node's list attribute compares whole lists */
    const rx *x = &ms->r->ex[ra->expr];
    if (x->kind == RX_ATTR) {
      const pcgc_attrs *src = ms_attrs_of(ms, x->tensor);
      if (!src) return U_WAIT;
      pcgc_attr_type sty = pcgc_op_attr(src->kind, x->attr)->type;
      if (sty == PCGC_ATTR_INTS || sty == PCGC_ATTR_INTS2) {
        pcgc_ints sl = pcgc_attrs_ints_at(src, x->attr);
        if (sl.n != l.n) return U_FAIL;
        for (int j = 0; j < l.n; j++)
          if (sl.v[j] != l.v[j]) return U_FAIL;
        return U_OK;
      }
    }
    for (int j = 0; j < l.n && res != U_FAIL; j++) res = worst(res, unify(ms, ra->expr, l.v[j]));
    return res;
  }
  return unify(ms, ra->expr, pcgc_attrs_int_at(ga, ra->attr));
}

static ures check_dims(mstate *ms, int input) {
  const pcgc_rule *r = ms->r;
  int t = r->inputs[input];
  const rtype *ty = r->tensors[t].type;
  const pcgc_ptensor *T = ms_type_of(ms, t);
  int ell = ty->ellipsis_at < 0 ? 0 : T->rank - ty->n_dims;
  if (ell < 0 || (ty->ellipsis_at < 0 && T->rank != ty->n_dims)) return U_FAIL;
  ures res = U_OK;
  for (int i = 0; i < ty->n_dims && res != U_FAIL; i++) {
    int at = ty->ellipsis_at >= 0 && i >= ty->ellipsis_at ? i + ell : i;
    res = worst(res, unify(ms, ty->dims[i], T->dims[at]));
  }
  int s = ty->ellipsis_sym;
  if (res != U_FAIL && ty->ellipsis_at >= 0 && s >= 0) {
    if (!ms->env.sym_set[s]) {
      ms->env.sym[s] = ell;   /* an ellipsis symbol's value is its length */
      ms->env.sym_set[s] = true;
      ms->ell_tensor[s] = t, ms->ell_start[s] = ty->ellipsis_at, ms->ell_len[s] = ell;
      ms->binds++;
    } else {
      if (ms->ell_len[s] != ell) return U_FAIL;
      const pcgc_ptensor *F = ms_type_of(ms, ms->ell_tensor[s]);
      for (int i = 0; i < ell; i++)
        if (F->dims[ms->ell_start[s] + i] != T->dims[ty->ellipsis_at + i]) return U_FAIL;
    }
  }
  return res;
}

static ures check_pitem(mstate *ms, int input, int k) {
  int t = ms->r->inputs[input];
  const rpitem *it = &ms->r->tensors[t].type->pitems[k];
  const pcgc_ptensor *T = ms_type_of(ms, t);
  switch (it->kind) {
  case RP_DEG: {
    int64_t d;
    switch (pcgc__rx_eval(&ms->env, it->index, &d)) {
    case RX_OK: break;
    case RX_UNBOUND: return U_WAIT;
    case RX_UNDEFINED: return U_FAIL;
    }
    if (d < 0) d += T->rank;
    if (d < 0 || d >= T->rank) return U_FAIL;
    return unify(ms, it->value, T->degree[d]);
  }
  case RP_SUM: return unify(ms, it->value, T->sum);
  case RP_REP: return unify(ms, it->value, T->replica);
  case RP_MICRO: return unify(ms, it->value, T->micro);
  }
  return U_FAIL;
}

/* Every pattern node is placed: resolve what is left, check the
 * conditions and report the match. Returns true to stop. */
static bool finish(mstate *ms) {
  const pcgc_rule *r = ms->r;
  const mplan *pl = ms->plan;
  /* a match input may not be a tensor the match itself computes */
  for (int i = 0; i < r->n_inputs; i++) {
    int node = ms->bound[r->inputs[i]].node;
    for (int p = 0; p < pl->n; p++)
      if (ms->node_of[p] == node) return false;
  }
  env_init(&ms->env, ms->ri, ms);
  uint8_t done[MAX_ITEMS] = {0};
  int left = pl->n_items;
  for (bool progress = true; left > 0 && progress;) {
    int binds = ms->binds;
    progress = false;
    for (int i = 0; i < pl->n_items; i++) {
      if (done[i]) continue;
      const citem *it = &pl->items[i];
      ures res = it->kind == CI_ATTR ? check_attr(ms, it->a, it->b)
                 : it->kind == CI_DIMS ? check_dims(ms, it->a) : check_pitem(ms, it->a, it->b);
      if (res == U_FAIL) return false;
      if (res == U_OK) done[i] = 1, left--, progress = true;
    }
    if (ms->binds != binds) progress = true;
  }
  if (left > 0) return false;
  for (int i = 0; i < r->n_conds; i++) {
    bool holds = false;
    if (pcgc__rc_eval(&ms->env, &r->conds[i], &holds) != RX_OK || !holds) return false;
  }
  pcgc_match m;
  memset(&m, 0, sizeof m);
  m.inst = ms->ri;
  for (int p = 0; p < pl->n; p++) m.nodes[p] = ms->node_of[p];
  for (int i = 0; i < r->n_inputs; i++) m.inputs[i] = ms->bound[r->inputs[i]];
  for (int s = 0; s < r->n_syms; s++) m.sym[s] = ms->env.sym_set[s] ? ms->env.sym[s] : 0;
  return ms->fn(&m, ms->ctx);
}

static bool search(mstate *ms) {
  const mplan *pl = ms->plan;
  if (ms->depth == pl->n) return finish(ms);
  int s = ms->depth, p = pl->order[s];
  const pcgc_graph_index *ix = ms->ix;
  int mark = ms->trail_n;
  bool stop = false;
  switch (pl->src[s]) {
  case SRC_PRODUCER: {
    pcgc_ref b = ms->bound[pl->src_tensor[s]];
    if (place(ms, p, b.node)) {
      ms->depth++;
      stop = search(ms);
      ms->depth--;
    }
    break;
  }
  case SRC_CONSUMER: {
    int t = tensor_id(ix, ms->bound[pl->src_tensor[s]]);
    for (int u = ix->cons_start[t]; u < ix->cons_start[t + 1] && !stop; u++) {
      if (ix->cons[u].slot != pl->src_index[s] || !place(ms, p, ix->cons[u].node)) continue;
      ms->depth++;
      stop = search(ms);
      ms->depth--;
      unbind_to(ms, mark);
    }
    break;
  }
  default: {
    pcgc_op_kind k = ms->r->match.nodes[p].op;
    for (int u = ix->kind_start[k]; u < ix->kind_start[k + 1] && !stop; u++) {
      if (!place(ms, p, ix->kind_nodes[u])) continue;
      ms->depth++;
      stop = search(ms);
      ms->depth--;
      unbind_to(ms, mark);
    }
    break;
  }
  }
  unbind_to(ms, mark);
  ms->node_of[p] = -1;
  return stop;
}

pcgc_status pcgc_rule_find_matches(const pcgc_rule_inst *ri, const pcgc_graph *g, const pcgc_graph_index *ix,
                                   pcgc_match_fn fn, void *ctx, pcgc_error *err) {
  if (!ri || !ri->rule || !g || !ix || !fn)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_rule_find_matches: missing argument");
  if (ix->g != g || ix->n_nodes != g->n_nodes)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "rule '%s': the graph index was built for another graph",
                          ri->rule->name);
  if (!ix->typed)
    return pcgc_error_set(err, PCGC_ERR_TYPE, "rule '%s': the graph is not typed (infer it before matching)",
                          ri->rule->name);
  const pcgc_rule *r = ri->rule;
  if (r->match.n_nodes <= 0 || r->match.n_nodes > PCGC_RULE_MAX_NODES) return PCGC_OK;
  mplan pl;
  plan_build(&pl, ri, ix);
  if (pl.never) return PCGC_OK;
  mstate ms;
  memset(&ms, 0, sizeof ms);
  ms.r = r, ms.ri = ri, ms.g = g, ms.ix = ix, ms.plan = &pl, ms.fn = fn, ms.ctx = ctx;
  for (int p = 0; p < PCGC_RULE_MAX_NODES; p++) ms.node_of[p] = -1;
  for (int t = 0; t < PCGC_RULE_MAX_TENSORS; t++) ms.bound[t] = (pcgc_ref){-1, -1};
  search(&ms);
  return PCGC_OK;
}

typedef struct counter {
  int64_t n, limit;
} counter;

static bool count_one(const pcgc_match *m, void *ctx) {
  counter *c = ctx;
  c->n++;
  return c->limit > 0 && c->n >= c->limit;
}

int64_t pcgc_rule_count_matches(const pcgc_rule_inst *ri, const pcgc_graph *g, const pcgc_graph_index *ix,
                                int64_t limit, pcgc_error *err) {
  counter c = {0, limit};
  pcgc_status s = pcgc_rule_find_matches(ri, g, ix, count_one, &c, err);
  return s != PCGC_OK ? s : c.n;
}
