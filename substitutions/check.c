/*
 * check.c — soundness of a rule by execution (docs/rules.md, "Checks").
 *
 * For every binding of the rule's parameters (degrees from the options,
 * dims 0..3) the checker chooses instances: values for the match variables,
 * ellipsis dims and the shapes of inputs the rule leaves unshaped. An
 * instance is a choice for which the match side, built as a graph,
 * type-checks and every condition holds. The choices cover the integer
 * size space (see "the size space" below): a base instance from a small
 * set, then for each size its odd, even and prime values, the values around
 * every bound of a condition and around every step of a `/` or `%` of the
 * rule, and a seeded random value up to 64, each with the other sizes at
 * the base, then seeded random combinations, as far as a per-rule budget
 * goes (deterministic: the generator is seeded by the rule's name). A
 * value the conditions refuse is retried with the base repaired toward them
 * (repair), then redrawn. A variable bound only by an attribute (causal=c)
 * takes its other value in every binding, and such a value, or an open
 * attribute's, that type inference refuses is retried with the refused
 * node's input sizes made equal in pairs (unify: causal needs S == T). Bindings whose degrees are all above 1 take their
 * base at ellipses of 1, 2, 3, 0 dims and unshaped ranks 3, 4, 2, 1 in turn
 * (dims computed from rank() differ only at some ranks).
 * Attributes the match leaves open are built at their defaults and, in
 * instances of class "attr", at other values (see attr_values), set
 * together in rounds and alone; a conv/pool pair or a causal flag counts as
 * run only where it shows (attr_visible). Inputs
 * with parallel-type constraints are built from sequential sources by
 * parallel operators (a partial sum by a linear over a partitioned
 * contraction dim). The rewrite side is built on the same inputs; it must
 * type-check and give yields of the same types. Both run in the reference
 * interpreter in f64 on random nonzero integers in [-4, 4] ([-8, 8] where an op
 * has a kink past 4, as relu6), forward and then
 * backward from random small-integer yield gradients, and every yield and
 * every source's gradient must agree (relative 1e-9). A rule with a dropout
 * (or an attention) runs in training mode too: a rewrite dropout that
 * copies a matched one with y.* takes the matched node's name, so it draws
 * the same mask wherever its elements sit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "rules_internal.h"

#define MAX_SRC (3 * PCGC_RULE_MAX_INPUTS)
#define MAX_ASLOTS 32  /* attributes the match leaves open */
#define MAX_AVALS 6    /* values tried for one of them besides its default */

/* A value an open attribute is tried at: i (INT, BOOL, ENUM), f (FLOAT) or
 * the pair (INTS2). */
typedef struct aval {
  int64_t i;
  double f;
  int64_t pair[2];
} aval;

/* An attribute of a match node that the match leaves open (neither given
 * nor bound to a variable): built at its default, and at the values of
 * vals[] in the instances of class "attr". */
typedef struct aslot {
  int node, attr;        /* match node, index in its op's schema */
  int n_vals;
  aval vals[MAX_AVALS];
  unsigned covered;      /* values (bit v-1 for vals[v-1]) run in this rule */
  int fails;             /* tries of a value alone that gave no instance */
} aslot;

/* One instance being built: symbol values, and per side the graph and the
 * graph node of every rule tensor. */
typedef struct side_graph {
  pcgc_graph *g;
  pcgc_ref of[PCGC_RULE_MAX_TENSORS];   /* graph tensor of each rule tensor (this side + inputs) */
  int node_of[PCGC_RULE_MAX_NODES];     /* graph node of each rule node of this side */
} side_graph;

/* The free choices of one instance: a value for every match variable, the
 * dims of every ellipsis, the shape of every input the rule leaves unshaped. */
typedef struct assign {
  int64_t sym[PCGC_RULE_MAX_SYMS];
  int ell_n[PCGC_RULE_MAX_SYMS];
  int64_t ell[PCGC_RULE_MAX_SYMS][PCGC_MAX_RANK];
  int rank[PCGC_RULE_MAX_INPUTS];
  int64_t dims[PCGC_RULE_MAX_INPUTS][PCGC_MAX_RANK];
  uint8_t av[MAX_ASLOTS];               /* value of each open attribute: 0 its default, v vals[v-1] */
} assign;

typedef struct inst {
  const pcgc_rule *r;
  rx_env env;
  int64_t ell[PCGC_RULE_MAX_SYMS][PCGC_MAX_RANK];  /* dims of each ellipsis */
  int ell_n[PCGC_RULE_MAX_SYMS];
  const assign *A;                      /* the instance being built or scanned */
  side_graph m, w;                      /* match, rewrite */
  side_graph *cur;                      /* what the env callbacks read */
  int n_src;                            /* sequential sources (inputs and helpers) */
  char src[MAX_SRC][64];
  int n_aslots;
  aslot aslots[MAX_ASLOTS];
  bool training;                        /* the rule has a dropout (or attention): run in training mode too */
  int64_t span;                         /* float inputs are drawn from -span..-1, 1..span */
  bool refused;                         /* the last draw's match side was refused by type inference */
  /* scanning the size space: input types computed from A alone, no graph */
  bool fake;
  bool fake_ok[PCGC_RULE_MAX_INPUTS];
  pcgc_ptensor fake_t[PCGC_RULE_MAX_INPUTS];
} inst;

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int64_t pick(uint64_t *s, const int64_t *set, int n) { return set[rng_next(s) % (uint64_t)n]; }

static const pcgc_ptensor *cb_type(void *ctx, int t) {
  inst *I = ctx;
  const pcgc_rule *r = I->r;
  if (t < 0 || t >= r->n_tensors) return NULL;
  if (I->fake) {
    int in = r->tensors[t].input;
    return r->tensors[t].side == 0 && in >= 0 && in < r->n_inputs && I->fake_ok[in] ? &I->fake_t[in] : NULL;
  }
  /* match tensors are read from the match graph, whichever side is built */
  side_graph *sg = r->tensors[t].side == 0 ? &I->m : I->cur;
  if (!sg->g || sg->of[t].node < 0 || sg->of[t].node >= sg->g->n_nodes) return NULL;
  const pcgc_node *n = &sg->g->nodes[sg->of[t].node];
  return n->typed ? &n->out[sg->of[t].slot] : NULL;
}

static const pcgc_attrs *cb_attrs(void *ctx, int t) {
  inst *I = ctx;
  const pcgc_rule *r = I->r;
  if (I->fake || t < 0 || t >= r->n_tensors || r->tensors[t].side != 0 || r->tensors[t].node < 0) return NULL;
  int gn = I->m.node_of[r->tensors[t].node];
  return I->m.g && gn >= 0 && gn < I->m.g->n_nodes ? I->m.g->nodes[gn].attrs : NULL;
}

static void side_init(side_graph *sg) {
  sg->g = NULL;
  for (int i = 0; i < PCGC_RULE_MAX_TENSORS; i++) sg->of[i] = (pcgc_ref){-1, 0};
  for (int i = 0; i < PCGC_RULE_MAX_NODES; i++) sg->node_of[i] = -1;
}

static void side_free(side_graph *sg) {
  pcgc_graph_free(sg->g);
  side_init(sg);
}

static int add(pcgc_graph *g, pcgc_op_kind k, const char *name, const pcgc_attrs *a, int n_in, const pcgc_ref *in) {
  return pcgc_graph_add_node(g, k, name, a, n_in, in);
}

static int add_par(pcgc_graph *g, pcgc_op_kind k, const char *name, int in, int dim, int64_t degree) {
  pcgc_attrs a;
  pcgc_attrs_init(&a, k);
  if (k != PCGC_OP_REPLICATE && k != PCGC_OP_REDUCE) pcgc_attrs_set_int(&a, "dim", dim);
  pcgc_attrs_set_int(&a, "degree", degree);
  pcgc_ref r = {in, 0};
  return add(g, k, name, &a, 1, &r);
}

static int add_source(inst *I, pcgc_graph *g, const char *name, pcgc_dtype dt, int rank, const int64_t *dims) {
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_INPUT);
  pcgc_attrs_set_ints(&a, "shape", rank, dims);
  pcgc_attrs_set_int(&a, "dtype", dt);
  int id = add(g, PCGC_OP_INPUT, name, &a, 0, NULL);
  if (id >= 0 && g == I->m.g && I->n_src < MAX_SRC) snprintf(I->src[I->n_src++], sizeof I->src[0], "%s", name);
  return id;
}

/* The sequential shape of match input i for this instance; false if it
 * cannot be computed (an expression undefined) or a dim is outside 1..64. */
static bool input_shape(inst *I, int i, int *rank, int64_t *dims) {
  const pcgc_rule *r = I->r;
  const rtype *ty = r->tensors[r->inputs[i]].type;
  if (!ty->has_shape) {
    *rank = I->A->rank[i];
    for (int d = 0; d < *rank; d++) {
      if (I->A->dims[i][d] < 1 || I->A->dims[i][d] > 64) return false;
      dims[d] = I->A->dims[i][d];
    }
    return true;
  }
  int n = 0;
  for (int d = 0; d <= ty->n_dims; d++) {
    if (d == ty->ellipsis_at && ty->ellipsis_sym >= 0) {
      int s = ty->ellipsis_sym;
      for (int k = 0; k < I->ell_n[s]; k++) {
        if (n >= PCGC_MAX_RANK) return false;
        dims[n++] = I->ell[s][k];
      }
    }
    if (d == ty->n_dims) break;
    int64_t v;
    if (n >= PCGC_MAX_RANK || pcgc__rx_eval(&I->env, ty->dims[d], &v) != RX_OK || v < 1 || v > 64) return false;
    dims[n++] = v;
  }
  *rank = n;
  return true;
}

static int64_t item(inst *I, const rtype *ty, rpitem_kind k, int rank, int dim, bool *ok) {
  int64_t v = 1;
  for (int p = 0; p < ty->n_pitems; p++) {
    const rpitem *it = &ty->pitems[p];
    if (it->kind != k) continue;
    if (k == RP_DEG) {
      int64_t d;
      if (pcgc__rx_eval(&I->env, it->index, &d) != RX_OK) {
        *ok = false;
        continue;
      }
      if (d < 0) d += rank;
      if (d != dim) continue;
    }
    if (pcgc__rx_eval(&I->env, it->value, &v) != RX_OK || v < 1 || v > 64) *ok = false;
  }
  return v;
}

/* Builds match input i into sg's graph: a sequential source, then the
 * parallel operators its type constraint asks for. */
static bool build_input(inst *I, side_graph *sg, int i, int rank, const int64_t *dims, pcgc_dtype dt) {
  const pcgc_rule *r = I->r;
  const rtensor *t = &r->tensors[r->inputs[i]];
  const rtype *ty = t->type;
  bool ok = true;
  int64_t sum = item(I, ty, RP_SUM, rank, -1, &ok), rep = item(I, ty, RP_REP, rank, -1, &ok),
          micro = item(I, ty, RP_MICRO, rank, -1, &ok);
  if (!ok) return false;
  char name[96];
  int cur;
  if (sum > 1) {
    /* a partial sum of the tensor's shape: a[..., sum] @ b[sum, last] with the
     * contraction dim split sum ways */
    if (rank < 1 || !pcgc_dtype_is_float(dt)) return false;
    int64_t ad[PCGC_MAX_RANK], bd[2] = {sum, dims[rank - 1]};
    memcpy(ad, dims, (size_t)rank * sizeof *ad);
    ad[rank - 1] = sum;
    snprintf(name, sizeof name, "%s~a", t->name);
    int a = add_source(I, sg->g, name, dt, rank, ad);
    snprintf(name, sizeof name, "%s~b", t->name);
    int b = add_source(I, sg->g, name, dt, 2, bd);
    snprintf(name, sizeof name, "%s~ap", t->name);
    int ap = add_par(sg->g, PCGC_OP_PARTITION, name, a, rank - 1, sum);
    snprintf(name, sizeof name, "%s~bp", t->name);
    int bp = add_par(sg->g, PCGC_OP_PARTITION, name, b, 0, sum);
    pcgc_attrs la;
    pcgc_attrs_init(&la, PCGC_OP_MATMUL);
    pcgc_ref in[2] = {{ap, 0}, {bp, 0}};
    snprintf(name, sizeof name, "%s~s", t->name);
    cur = add(sg->g, PCGC_OP_MATMUL, name, &la, 2, in);
  } else {
    snprintf(name, sizeof name, "%s~in", t->name);
    cur = add_source(I, sg->g, name, dt, rank, dims);
  }
  int step = 0;
  for (int d = 0; d < rank && cur >= 0; d++) {
    int64_t deg = item(I, ty, RP_DEG, rank, d, &ok);
    if (!ok) return false;
    if (deg <= 1) continue;
    snprintf(name, sizeof name, "%s~%d", t->name, step++);
    cur = add_par(sg->g, PCGC_OP_PARTITION, name, cur, d, deg);
  }
  if (rep > 1 && cur >= 0) {
    snprintf(name, sizeof name, "%s~%d", t->name, step++);
    cur = add_par(sg->g, PCGC_OP_REPLICATE, name, cur, 0, rep);
  }
  if (micro > 1 && cur >= 0) {
    if (rank < 1) return false;
    snprintf(name, sizeof name, "%s~%d", t->name, step++);
    cur = add_par(sg->g, PCGC_OP_PIPELINE, name, cur, 0, micro);
  }
  if (cur < 0) return false;
  /* the tensor the rule calls t->name: an identity would change nothing
   * logically but add a node; instead the last node is found by ref */
  sg->of[r->inputs[i]] = (pcgc_ref){cur, 0};
  return true;
}

static pcgc_dtype input_dtype(const rtype *ty) {
  if (ty->dtype >= 0) return (pcgc_dtype)ty->dtype;
  return ty->dtype == RT_DTYPE_INT ? PCGC_I32 : PCGC_F32;
}

/* Builds the nodes of one side into sg (inputs already there). false with a
 * message in err when a node cannot be built (attributes). */
static bool build_side(inst *I, side_graph *sg, const rside *sd, int side, uint64_t *rs, pcgc_error *err) {
  const pcgc_rule *r = I->r;
  I->cur = sg;
  for (int k = 0; k < sd->n_nodes; k++) {
    const rnode *n = &sd->nodes[k];
    pcgc_attrs a;
    if (side == 0) {
      /* a match node may leave a required number open (scalar_mul's
       * scalar, concat's axis): draw one */
      static const double floats[] = {2, 3, -2, 0.5};
      if (pcgc__rnode_attrs_partial(&I->env, n, &a, err) != PCGC_OK) return false;
      for (int i = 0; i < pcgc_op_num_attrs(n->op); i++) {
        const pcgc_attr_desc *d = pcgc_op_attr(n->op, i);
        if (!d->required || a.set[i]) continue;
        if (d->type == PCGC_ATTR_FLOAT) pcgc_attrs_set_float(&a, d->name, floats[rng_next(rs) % 4]);
        else if (d->type == PCGC_ATTR_INT) pcgc_attrs_set_int(&a, d->name, (int64_t)(rng_next(rs) % 4));
        else if (d->type == PCGC_ATTR_ENUM || d->type == PCGC_ATTR_BOOL) pcgc_attrs_set_int(&a, d->name, 0);
      }
      /* the open attributes this instance sets to another value */
      for (int j = 0; j < I->n_aslots; j++) {
        const aslot *as = &I->aslots[j];
        if (as->node != k || !I->A->av[j]) continue;
        const aval *v = &as->vals[I->A->av[j] - 1];
        const pcgc_attr_desc *d = pcgc_op_attr(n->op, as->attr);
        if (d->type == PCGC_ATTR_FLOAT) pcgc_attrs_set_float(&a, d->name, v->f);
        else if (d->type == PCGC_ATTR_INTS2) pcgc_attrs_set_ints(&a, d->name, 2, v->pair);
        else pcgc_attrs_set_int(&a, d->name, v->i);
        /* rope's base shows only with rope on: an open rope goes on with it */
        if (n->op == PCGC_OP_ATTENTION && !strcmp(pcgc_op_attr(n->op, as->attr)->name, "rope_theta")) {
          int ri = pcgc_op_attr_index(n->op, "rope");
          bool open = true;
          for (int q = 0; q < n->n_attrs && open; q++) open = n->attrs[q].attr != ri;
          if (open) pcgc_attrs_set_int(&a, "rope", 1);
        }
      }
      if (pcgc_attrs_check(&a, err) != PCGC_OK) return false;
    } else if (pcgc__rnode_attrs(&I->env, n, &a, err) != PCGC_OK) {
      return false;
    }
    pcgc_ref in[PCGC_RULE_MAX_ARGS];
    for (int j = 0; j < n->n_args; j++) in[j] = sg->of[n->args[j]];
    char name[96];
    int first = -1;
    for (int j = 0; j < n->n_outs && first < 0; j++)
      if (n->outs[j] >= 0) first = n->outs[j];
    if (first >= 0) snprintf(name, sizeof name, "%s", r->tensors[first].name);
    else snprintf(name, sizeof name, "_%c%d", side ? 'w' : 'm', k);
    /* dropout masks are keyed by the node's name (its random stream) and
     * the logical element index: a rewrite dropout or attention that copies
     * a matched one's attributes (y.*) is that node moved, so it draws from
     * the same stream (the rewrite is its own graph: the name is free) */
    if (side == 1 && n->copy_from >= 0 && (n->op == PCGC_OP_DROPOUT || n->op == PCGC_OP_ATTENTION)) {
      const rtensor *mt = &r->tensors[n->copy_from];
      int mn = mt->side == 0 && mt->node >= 0 ? I->m.node_of[mt->node] : -1;
      if (mn >= 0 && pcgc_graph_find(sg->g, I->m.g->nodes[mn].name) < 0)
        snprintf(name, sizeof name, "%s", I->m.g->nodes[mn].name);
    }
    int id = add(sg->g, n->op, name, &a, n->n_args, in);
    if (id < 0) {
      pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
      return false;
    }
    sg->node_of[k] = id;
    for (int j = 0; j < n->n_outs; j++) {
      char on[112];
      if (n->outs[j] >= 0) {
        sg->of[n->outs[j]] = (pcgc_ref){id, j};
        snprintf(on, sizeof on, "%s", r->tensors[n->outs[j]].name);
      } else {
        snprintf(on, sizeof on, "%s.%d", name, j);
      }
      if (j > 0 && pcgc_graph_set_output_name(sg->g, id, j, on) != PCGC_OK) {
        pcgc_error_set(err, PCGC_ERR_INVALID, "cannot name output %d of '%s'", j, name);
        return false;
      }
    }
  }
  return true;
}

/* The name by which the reference finds graph tensor ref. */
static const char *ref_name(const pcgc_graph *g, pcgc_ref ref) { return g->nodes[ref.node].out_names[ref.slot]; }

/* Describes the instance: parameters and variables. */
static void describe(const inst *I, char *buf, size_t n) {
  const pcgc_rule *r = I->r;
  size_t used = 0;
  buf[0] = '\0';
  for (int s = 0; s < r->n_syms && used + 1 < n; s++) {
    int w;
    if (r->syms[s].kind == RS_ELLIPSIS) {
      w = snprintf(buf + used, n - used, "%s...%s=[", used ? ", " : "", r->syms[s].name);
      if (w > 0) used += (size_t)w;
      for (int k = 0; k < I->ell_n[s] && used + 1 < n; k++) {
        w = snprintf(buf + used, n - used, "%s%lld", k ? ", " : "", (long long)I->ell[s][k]);
        if (w > 0) used += (size_t)w;
      }
      w = snprintf(buf + used, n - used, "]");
    } else {
      w = snprintf(buf + used, n - used, "%s%s=%lld", used ? ", " : "", r->syms[s].name, (long long)I->env.sym[s]);
    }
    if (w > 0) used += (size_t)w;
    if (used >= n) used = n - 1;
  }
  for (int j = 0; j < I->n_aslots && I->A && used + 1 < n; j++) {
    const aslot *as = &I->aslots[j];
    int gn = I->m.node_of[as->node];
    if (!I->A->av[j] || !I->m.g || gn < 0) continue;
    char kv[96];
    pcgc_attr_format(kv, sizeof kv, I->m.g->nodes[gn].attrs, as->attr);
    int w = snprintf(buf + used, n - used, "%s%s.%s", used ? ", " : "", I->m.g->nodes[gn].name, kv);
    if (w > 0) used += (size_t)w;
    if (used >= n) used = n - 1;
  }
}

static void coords(const pcgc_ptensor *t, int64_t e, char *buf, size_t n) {
  int64_t c[PCGC_MAX_RANK];
  for (int d = t->rank - 1; d >= 0; d--) {
    c[d] = t->dims[d] ? e % t->dims[d] : 0;
    e = t->dims[d] ? e / t->dims[d] : 0;
  }
  size_t used = 0;
  buf[0] = '\0';
  for (int d = 0; d < t->rank && used + 1 < n; d++) {
    int w = snprintf(buf + used, n - used, "%s%lld", d ? ", " : "", (long long)c[d]);
    if (w > 0) used += (size_t)w;
  }
}

static bool close_enough(double a, double b) {
  if (isnan(a) || isnan(b)) return false;
  double m = fmax(1.0, fmax(fabs(a), fabs(b)));
  return fabs(a - b) <= 1e-9 * m;
}

typedef enum run_result { RUN_AGREE, RUN_SKIP, RUN_DIFFER, RUN_NOMEM } run_result;

/* Both sides prepared for the reference interpreter, once per instance
 * (every seed sets all the sources and runs forward and backward anew).
 * RUN_SKIP when the match side cannot run, RUN_DIFFER (msg) when only the
 * rewrite cannot. */
static run_result prepare_runs(inst *I, bool training, uint64_t seed, pcgc_reference **A, pcgc_reference **B,
                               char *msg, size_t msg_n) {
  pcgc_ref_options o;
  pcgc_ref_options_default(&o);
  o.dtype = PCGC_F64;
  o.training = training;
  o.allow_no_loss = true;
  o.seed = seed; /* dropout masks */
  pcgc_error e1 = {0}, e2 = {0};
  *A = pcgc_ref_new(I->m.g, &o, &e1);
  *B = *A ? pcgc_ref_new(I->w.g, &o, &e2) : NULL;
  if (*A && *B) return RUN_AGREE;
  run_result res = (*A ? e2.status : e1.status) == PCGC_ERR_NOMEM ? RUN_NOMEM : RUN_SKIP;
  if (res == RUN_SKIP && *A) {
    snprintf(msg, msg_n, "the rewrite side cannot run: %s", e2.message);
    res = RUN_DIFFER;
  }
  pcgc_ref_free(*A);
  pcgc_ref_free(*B);
  *A = *B = NULL;
  return res;
}

/* Runs both sides on one seed; on a difference writes why into msg. */
static run_result run_seed(inst *I, pcgc_reference *A, pcgc_reference *B, uint64_t seed, char *msg, size_t msg_n) {
  const pcgc_rule *r = I->r;
  run_result res = RUN_AGREE;
  double *buf[3] = {NULL, NULL, NULL};
  uint64_t rs = seed * 0x2545F4914F6CDD1Dull + 77;
  /* the same values into both sides' sources */
  for (int s = 0; s < I->n_src && res == RUN_AGREE; s++) {
    int id = pcgc_graph_find(I->m.g, I->src[s]);
    const pcgc_ptensor *t = &I->m.g->nodes[id].out[0];
    int64_t n = pcgc_ptensor_numel(t);
    free(buf[0]);
    buf[0] = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!buf[0]) {
      res = RUN_NOMEM;
      break;
    }
    int64_t bound = 4; /* integer ids: small enough for any table or class count built here */
    for (int k = 0; k < I->m.g->n_nodes; k++) {
      const pcgc_node *c = &I->m.g->nodes[k];
      for (int j = 0; j < c->n_in; j++)
        if (c->in[j].node == id && !pcgc_dtype_is_float(t->dtype)) {
          const pcgc_ptensor *o0 = j + 1 < c->n_in ? pcgc_graph_ref_type(I->m.g, c->in[j + 1]) : NULL;
          if (c->kind == PCGC_OP_EMBEDDING && o0 && o0->rank > 0 && o0->dims[0] < bound) bound = o0->dims[0];
          const pcgc_ptensor *x0 = j > 0 ? pcgc_graph_ref_type(I->m.g, c->in[0]) : NULL;
          if (pcgc_op_class_of(c->kind) == PCGC_CLASS_LOSS && x0 && x0->rank > 0 && x0->dims[x0->rank - 1] < bound)
            bound = x0->dims[x0->rank - 1];
        }
    }
    for (int64_t k = 0; k < n; k++) {
      if (pcgc_dtype_is_float(t->dtype)) {
        int64_t v = (int64_t)(rng_next(&rs) % (uint64_t)(2 * I->span));
        buf[0][k] = (double)(v < I->span ? v - I->span : v - I->span + 1); /* never 0 */
      } else {
        buf[0][k] = (double)(rng_next(&rs) % (uint64_t)(bound > 0 ? bound : 1));
      }
    }
    pcgc_error e = {0};
    if (pcgc_ref_set(A, I->src[s], PCGC_F64, buf[0], n, &e) != PCGC_OK ||
        pcgc_ref_set(B, I->src[s], PCGC_F64, buf[0], n, &e) != PCGC_OK) {
      snprintf(msg, msg_n, "cannot set input '%s': %s", I->src[s], e.message);
      res = RUN_DIFFER;
    }
  }
  if (res != RUN_AGREE) goto done;
  pcgc_error e = {0};
  if (pcgc_ref_forward(A, NULL, &e) != PCGC_OK) {
    res = e.status == PCGC_ERR_NOMEM ? RUN_NOMEM : RUN_SKIP; /* the match side itself overflows: another seed */
    goto done;
  }
  if (pcgc_ref_forward(B, NULL, &e) != PCGC_OK) {
    snprintf(msg, msg_n, "seed %llu: the rewrite side fails where the match side runs: %s", (unsigned long long)seed,
             e.message);
    res = RUN_DIFFER;
    goto done;
  }
  /* yields: values, then seeded gradients */
  const char *yn_m[PCGC_RULE_MAX_YIELDS], *yn_w[PCGC_RULE_MAX_YIELDS];
  const void *gs[PCGC_RULE_MAX_YIELDS];
  double *gbuf[PCGC_RULE_MAX_YIELDS] = {NULL};
  int ng = 0;
  for (int y = 0; y < r->match.n_yields && res == RUN_AGREE; y++) {
    pcgc_ref rm = I->m.of[r->match.yields[y]], rw = I->w.of[r->rewrite.yields[y]];
    const pcgc_ptensor *t = pcgc_graph_ref_type(I->m.g, rm);
    int64_t n = pcgc_ptensor_numel(t);
    free(buf[1]);
    free(buf[2]);
    buf[1] = malloc((size_t)(n ? n : 1) * sizeof(double));
    buf[2] = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!buf[1] || !buf[2]) {
      res = RUN_NOMEM;
      break;
    }
    if (pcgc_ref_get(A, ref_name(I->m.g, rm), PCGC_F64, buf[1], n, &e) != PCGC_OK ||
        pcgc_ref_get(B, ref_name(I->w.g, rw), PCGC_F64, buf[2], n, &e) != PCGC_OK) {
      snprintf(msg, msg_n, "cannot read yield %d: %s", y + 1, e.message);
      res = RUN_DIFFER;
      break;
    }
    for (int64_t k = 0; k < n; k++)
      if (!close_enough(buf[1][k], buf[2][k])) {
        char at[128];
        coords(t, k, at, sizeof at);
        snprintf(msg, msg_n, "seed %llu: yield %d ('%s' / '%s') differs at [%s]: %.17g by the match, %.17g by the rewrite",
                 (unsigned long long)seed, y + 1, r->tensors[r->match.yields[y]].name,
                 r->tensors[r->rewrite.yields[y]].name, at, buf[1][k], buf[2][k]);
        res = RUN_DIFFER;
        break;
      }
    if (res != RUN_AGREE || !pcgc_dtype_is_float(t->dtype)) continue;
    gbuf[ng] = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!gbuf[ng]) {
      res = RUN_NOMEM;
      break;
    }
    for (int64_t k = 0; k < n; k++) gbuf[ng][k] = (double)((int64_t)(rng_next(&rs) % 9) - 4);
    yn_m[ng] = ref_name(I->m.g, rm);
    yn_w[ng] = ref_name(I->w.g, rw);
    gs[ng] = gbuf[ng];
    ng++;
  }
  if (res == RUN_AGREE && ng > 0) {
    if (pcgc_ref_backward_from(A, ng, yn_m, PCGC_F64, gs, &e) != PCGC_OK) {
      res = e.status == PCGC_ERR_NOMEM ? RUN_NOMEM : RUN_SKIP;
    } else if (pcgc_ref_backward_from(B, ng, yn_w, PCGC_F64, gs, &e) != PCGC_OK) {
      snprintf(msg, msg_n, "seed %llu: the rewrite side's backward fails: %s", (unsigned long long)seed, e.message);
      res = RUN_DIFFER;
    }
    for (int s = 0; s < I->n_src && res == RUN_AGREE; s++) {
      int id = pcgc_graph_find(I->m.g, I->src[s]);
      const pcgc_ptensor *t = &I->m.g->nodes[id].out[0];
      if (!pcgc_dtype_is_float(t->dtype)) continue;
      int64_t n = pcgc_ptensor_numel(t);
      free(buf[1]);
      free(buf[2]);
      buf[1] = malloc((size_t)(n ? n : 1) * sizeof(double));
      buf[2] = malloc((size_t)(n ? n : 1) * sizeof(double));
      if (!buf[1] || !buf[2]) {
        res = RUN_NOMEM;
        break;
      }
      if (pcgc_ref_get_grad(A, I->src[s], PCGC_F64, buf[1], n, &e) != PCGC_OK ||
          pcgc_ref_get_grad(B, I->src[s], PCGC_F64, buf[2], n, &e) != PCGC_OK) {
        snprintf(msg, msg_n, "cannot read the gradient of '%s': %s", I->src[s], e.message);
        res = RUN_DIFFER;
        break;
      }
      for (int64_t k = 0; k < n; k++)
        if (!close_enough(buf[1][k], buf[2][k])) {
          char at[128];
          coords(t, k, at, sizeof at);
          snprintf(msg, msg_n,
                   "seed %llu: the gradient of input '%s' differs at [%s]: %.17g by the match, %.17g by the rewrite",
                   (unsigned long long)seed, I->src[s], at, buf[1][k], buf[2][k]);
          res = RUN_DIFFER;
          break;
        }
    }
  }
  for (int k = 0; k < ng; k++) free(gbuf[k]);
done:
  for (int k = 0; k < 3; k++) free(buf[k]);
  return res;
}

void pcgc_check_options_default(pcgc_check_options *o) {
  memset(o, 0, sizeof *o);
  o->seeds = 3;
  o->instances = 3;
  o->budget = 24;
  o->degrees[0] = 1;
  o->degrees[1] = 2;
  o->degrees[2] = 4;
  o->n_degrees = 3;
  o->max_tries = 400;
  o->threads = pcgc_threads_default();
}

/* ------------------------------------------------------- instance classes */

#define CLS(c) (1u << (c))

static const char *const class_names[PCGC_CHECK_N_CLASSES] = {
    [PCGC_CHECK_BASE] = "base",
    [PCGC_CHECK_EVEN] = "even",
    [PCGC_CHECK_ODD] = "odd",
    [PCGC_CHECK_ODD_GT4] = "odd>4",
    [PCGC_CHECK_PRIME] = "prime",
    [PCGC_CHECK_BOUND_BELOW] = "where-bound-1",
    [PCGC_CHECK_BOUND] = "where-bound",
    [PCGC_CHECK_BOUND_ABOVE] = "where-bound+1",
    [PCGC_CHECK_DIV_BELOW] = "div-change-1",
    [PCGC_CHECK_DIV] = "div-change",
    [PCGC_CHECK_DIV_ABOVE] = "div-change+1",
    [PCGC_CHECK_RANDOM] = "random",
    [PCGC_CHECK_MIXED] = "mixed",
    [PCGC_CHECK_ATTR] = "attr",
    [PCGC_CHECK_TRAINING] = "training",
};
_Static_assert(sizeof class_names / sizeof class_names[0] == PCGC_CHECK_N_CLASSES, "a name for every class");

const char *pcgc_check_class_name(pcgc_check_class c) {
  return c >= 0 && c < PCGC_CHECK_N_CLASSES ? class_names[c] : "?";
}

int pcgc_check_classes_format(char *buf, size_t n, unsigned classes) {
  int want = 0;
  if (buf && n) buf[0] = '\0';
  for (int c = 0; c < PCGC_CHECK_N_CLASSES; c++) {
    if (!(classes & CLS(c))) continue;
    size_t used = (size_t)want < n ? (size_t)want : n;
    int w = snprintf(buf && used < n ? buf + used : NULL, buf && used < n ? n - used : 0, "%s%s", want ? ", " : "",
                     class_names[c]);
    if (w > 0) want += w;
  }
  return want;
}

/* ---------------------------------------------------------- the size space
 *
 * A slot is one integer the checker chooses: a match variable, a dim of an
 * ellipsis, a dim of an input without a shape. For each parameter binding
 * the checker first draws a base instance (the old small-set generator),
 * then scans every slot over lo..SCAN_MAX with the others at the base,
 * evaluating the rule's conditions and every `/` and `%` of the rule on
 * input types computed from the sizes alone (no graph): the roots of
 * a - b for each condition a op b mark where-bound values, the steps of
 * each quotient mark div-change values. Candidates are those, a few odd,
 * even and prime values and a seeded random one; a candidate that covers a
 * class this slot has not covered yet in the rule is tried with the others
 * at the base (then with them redrawn, if the conditions or the types
 * refuse it), and what the budget leaves goes to seeded random
 * combinations of candidates. */

#define MAX_SLOTS 96
#define SCAN_MAX 64
#define MAX_MARKS 40
#define MAX_DIVS 32
#define MAX_CANDS 56
#define NUMEL_CAP (1 << 15)  /* elements of all match tensors: keeps an instance cheap to run */

typedef enum slot_kind { SLOT_VAR, SLOT_ELL, SLOT_DIM } slot_kind;

typedef struct slot {
  slot_kind kind;
  int a, k;              /* VAR: symbol a; ELL: dim k of ellipsis a; DIM: dim k of unshaped input a */
  int64_t lo;            /* smallest value: 1 for sizes, -2 for attribute variables (axes) */
  unsigned covered;      /* classes its values have covered so far in this rule */
  /* this binding: */
  int n_marks;
  int64_t mark_v[MAX_MARKS];
  unsigned mark_cls[MAX_MARKS];
  int n_cands;
  int64_t cand[MAX_CANDS];
  bool tried[MAX_CANDS];
  int64_t random_v;      /* the seeded random value of this binding */
} slot;

typedef struct space {
  int n_slots;
  slot slots[MAX_SLOTS];
  int n_divs;
  int32_t divs[MAX_DIVS];             /* every `/` and `%` expression of the rule */
  bool cond_div[PCGC_RULE_MAX_CONDS]; /* the condition contains one */
  bool div_seen[MAX_DIVS];            /* evaluable on some scanned value */
  int64_t f[PCGC_RULE_MAX_CONDS][SCAN_MAX + 4];
  bool fv[PCGC_RULE_MAX_CONDS][SCAN_MAX + 4];
  int64_t q[MAX_DIVS][SCAN_MAX + 4];
  bool qv[MAX_DIVS][SCAN_MAX + 4];
} space;

static bool expr_has_div(const pcgc_rule *r, int32_t e, int depth) {
  if (e < 0 || e >= r->n_ex || depth > 64) return false;
  const rx *x = &r->ex[e];
  if (x->kind == RX_DIV || x->kind == RX_MOD) return true;
  return expr_has_div(r, x->a, depth + 1) || expr_has_div(r, x->b, depth + 1);
}

static void expr_syms(const pcgc_rule *r, int32_t e, bool *mask, int depth) {
  if (e < 0 || e >= r->n_ex || depth > 64) return;
  const rx *x = &r->ex[e];
  if (x->kind == RX_SYM && x->sym >= 0 && x->sym < PCGC_RULE_MAX_SYMS) mask[x->sym] = true;
  expr_syms(r, x->a, mask, depth + 1);
  expr_syms(r, x->b, mask, depth + 1);
}

static bool is_prime(int64_t v) {
  if (v < 2) return false;
  for (int64_t d = 2; d * d <= v; d++)
    if (v % d == 0) return false;
  return true;
}

static int64_t *slot_val(assign *A, const slot *sl) {
  switch (sl->kind) {
  case SLOT_VAR: return &A->sym[sl->a];
  case SLOT_ELL: return &A->ell[sl->a][sl->k];
  default: return &A->dims[sl->a][sl->k];
  }
}

static bool slot_active(const pcgc_rule *r, const assign *A, const slot *sl) {
  switch (sl->kind) {
  case SLOT_VAR: return true;
  case SLOT_ELL: return sl->k < A->ell_n[sl->a];
  default: return !r->tensors[r->inputs[sl->a]].type->has_shape && sl->k < A->rank[sl->a];
  }
}

static void add_slot(space *sp, slot_kind kind, int a, int k, int64_t lo) {
  if (sp->n_slots >= MAX_SLOTS) return;
  slot *sl = &sp->slots[sp->n_slots++];
  memset(sl, 0, sizeof *sl);
  sl->kind = kind;
  sl->a = a;
  sl->k = k;
  sl->lo = lo;
}

static void space_init(space *sp, const pcgc_rule *r) {
  memset(sp, 0, sizeof *sp);
  /* a variable that sizes an input (a dim expression, a parallel item) is a
   * size: >= 1; one bound only by an attribute may be 0 or negative */
  bool sized[PCGC_RULE_MAX_SYMS] = {false};
  for (int i = 0; i < r->n_inputs; i++) {
    const rtype *ty = r->tensors[r->inputs[i]].type;
    for (int d = 0; ty->has_shape && d < ty->n_dims; d++) expr_syms(r, ty->dims[d], sized, 0);
    for (int p = 0; p < ty->n_pitems; p++) expr_syms(r, ty->pitems[p].value, sized, 0);
  }
  for (int s = r->n_params; s < r->n_syms; s++) {
    if (r->syms[s].kind == RS_ELLIPSIS)
      for (int k = 0; k < 2; k++) add_slot(sp, SLOT_ELL, s, k, 1);
    else
      add_slot(sp, SLOT_VAR, s, 0, sized[s] ? 1 : -2);
  }
  for (int i = 0; i < r->n_inputs; i++)
    if (!r->tensors[r->inputs[i]].type->has_shape)
      for (int k = 0; k < 4; k++) add_slot(sp, SLOT_DIM, i, k, 1);
  for (int e = 0; e < r->n_ex && sp->n_divs < MAX_DIVS; e++)
    if (r->ex[e].kind == RX_DIV || r->ex[e].kind == RX_MOD) sp->divs[sp->n_divs++] = e;
  for (int c = 0; c < r->n_conds; c++)
    sp->cond_div[c] = expr_has_div(r, r->conds[c].a, 0) || expr_has_div(r, r->conds[c].b, 0);
}

/* The values an open attribute is tried at besides its default: every
 * other enum value, the other bool, one other float (twice a default above
 * 1, which is a base such as rope_theta), an int one above and
 * one below, a pair one above, both entries or only the first (stride 2,2
 * and 2,1; padding 1,1 and 1,0; kernel 2,2 and 2,1: the uneven one tells
 * the two spatial dims apart).
 * Type inference refuses what an instance cannot take (a kernel larger than
 * the input, groups 0). */
static int attr_values(const pcgc_attr_desc *d, aval *out) {
  int n = 0;
  int64_t def = d->required ? 0 : d->def_i;
  memset(out, 0, MAX_AVALS * sizeof *out);
  switch (d->type) {
  case PCGC_ATTR_BOOL: out[n++].i = !def; break;
  case PCGC_ATTR_ENUM:
    for (int64_t v = 0; pcgc_enum_value_name(d->enum_type, v) && n < MAX_AVALS; v++)
      if (v != def) out[n++].i = v;
    break;
  case PCGC_ATTR_FLOAT: /* a base above 1 (rope_theta) stays above it: twice it */
    if (!d->required) out[n++].f = d->def_f > 1 ? 2 * d->def_f : d->def_f != 0.25 ? 0.25 : 0.5;
    break;
  case PCGC_ATTR_INT:
    if (!d->required) {
      out[n++].i = def + 1;
      out[n++].i = def - 1;
    }
    break;
  case PCGC_ATTR_INTS2:
    for (int k = 0; k <= 1; k++) {
      out[n].pair[0] = def + 1;
      out[n++].pair[1] = def + 1 - k;
    }
    break;
  default: break; /* lists (shape, perm, dims) are required: the match gives them */
  }
  return n;
}

/* The open attributes of the match (those no `KEY=...` of the match node
 * constrains), and whether the rule needs training mode. */
static void attr_slots_init(inst *I) {
  const pcgc_rule *r = I->r;
  I->n_aslots = 0;
  for (int k = 0; k < r->match.n_nodes; k++) {
    const rnode *n = &r->match.nodes[k];
    for (int i = 0; i < pcgc_op_num_attrs(n->op) && I->n_aslots < MAX_ASLOTS; i++) {
      bool given = false;
      for (int q = 0; q < n->n_attrs && !given; q++) given = n->attrs[q].attr == i;
      if (given) continue;
      aslot *as = &I->aslots[I->n_aslots];
      memset(as, 0, sizeof *as);
      as->node = k;
      as->attr = i;
      as->n_vals = attr_values(pcgc_op_attr(n->op, i), as->vals);
      if (as->n_vals > 0) I->n_aslots++;
    }
  }
  I->training = false;
  I->span = 4;
  for (int side = 0; side < 2; side++) {
    const rside *sd = side ? &r->rewrite : &r->match;
    for (int k = 0; k < sd->n_nodes; k++) {
      int op = sd->nodes[k].op;
      if (op == PCGC_OP_DROPOUT || op == PCGC_OP_ATTENTION) I->training = true;
      /* a kink past 4 (relu6's at 6; clip's anywhere): inputs reach past it,
       * so that relu and relu6 are told apart; elsewhere small values keep
       * softmaxes and exponentials well conditioned */
      if (op == PCGC_OP_RELU || op == PCGC_OP_RELU6 || op == PCGC_OP_CLIP || op == PCGC_OP_HARDSWISH ||
          op == PCGC_OP_HARDSIGMOID || op == PCGC_OP_LEAKY_RELU)
        I->span = 8;
    }
  }
}

/* Sets the environment's variables and ellipses from A. */
static void use_assign(inst *I, const assign *A) {
  const pcgc_rule *r = I->r;
  I->A = A;
  for (int s = r->n_params; s < r->n_syms; s++) {
    if (r->syms[s].kind == RS_ELLIPSIS) {
      I->ell_n[s] = A->ell_n[s];
      memcpy(I->ell[s], A->ell[s], sizeof I->ell[s]);
    } else {
      I->env.sym[s] = A->sym[s];
    }
    I->env.sym_set[s] = true;
  }
}

/* The old generator: sizes from {1, 2, 3, 4, 6, 8, 12} (a quarter of the
 * variables from 0..3, for axes), 0 to 2 ellipsis dims from 1..4, unshaped
 * inputs of rank 1..4 with dims from {1, 2, 3, 4, 6, 8}. With keep_shape,
 * ellipsis lengths and unshaped ranks stay those of *A. */
static void random_assign(const pcgc_rule *r, uint64_t *rs, assign *A, bool keep_shape) {
  static const int64_t sizes[] = {1, 2, 3, 4, 6, 8, 12}, small_dims[] = {1, 2, 3, 4}, small[] = {1, 2, 3, 4, 6, 8};
  for (int s = r->n_params; s < r->n_syms; s++) {
    if (r->syms[s].kind == RS_ELLIPSIS) {
      if (!keep_shape) A->ell_n[s] = (int)(rng_next(rs) % 3);
      for (int k = 0; k < A->ell_n[s]; k++) A->ell[s][k] = pick(rs, small_dims, 4);
    } else {
      A->sym[s] = pick(rs, sizes, 7);
      if (rng_next(rs) % 4 == 0) A->sym[s] = (int64_t)(rng_next(rs) % 4);
    }
  }
  for (int i = 0; i < r->n_inputs; i++) {
    if (r->tensors[r->inputs[i]].type->has_shape) continue;
    if (!keep_shape) A->rank[i] = 1 + (int)(rng_next(rs) % 4);
    for (int d = 0; d < A->rank[i]; d++) A->dims[i][d] = pick(rs, small, 6);
  }
}

/* The classes a value of sl covers in this binding. */
static unsigned value_classes(const slot *sl, int64_t v) {
  unsigned c = 0;
  if (v >= 1) {
    c |= v % 2 ? CLS(PCGC_CHECK_ODD) : CLS(PCGC_CHECK_EVEN);
    if (v % 2 && v > 4) c |= CLS(PCGC_CHECK_ODD_GT4);
    if (is_prime(v)) c |= CLS(PCGC_CHECK_PRIME);
  }
  if (v <= 0 && sl->lo < 1) c |= CLS(PCGC_CHECK_ATTR); /* a variable bound by an attribute: 0 (false, the first axis) */
  for (int m = 0; m < sl->n_marks; m++)
    if (sl->mark_v[m] == v) c |= sl->mark_cls[m];
  if (v == sl->random_v) c |= CLS(PCGC_CHECK_RANDOM);
  return c;
}

static void add_mark(slot *sl, int64_t v, unsigned cls) {
  if (v < sl->lo || v > SCAN_MAX) return;
  for (int m = 0; m < sl->n_marks; m++)
    if (sl->mark_v[m] == v) {
      sl->mark_cls[m] |= cls;
      return;
    }
  if (sl->n_marks >= MAX_MARKS) return;
  sl->mark_v[sl->n_marks] = v;
  sl->mark_cls[sl->n_marks++] = cls;
}

/* Input types from the sizes alone, for conditions and divisions. */
static void fake_types(inst *I) {
  const pcgc_rule *r = I->r;
  for (int i = 0; i < r->n_inputs; i++) {
    int rank = 0;
    int64_t dims[PCGC_MAX_RANK];
    I->fake_ok[i] = input_shape(I, i, &rank, dims);
    if (I->fake_ok[i]) pcgc_ptensor_init(&I->fake_t[i], input_dtype(r->tensors[r->inputs[i]].type), rank, dims);
  }
}

/* Marks the where-bound and div-change values of every active slot, for the
 * parameters in I->env and the base instance A0. */
static void scan_space(inst *I, space *sp, const assign *A0) {
  const pcgc_rule *r = I->r;
  assign A;
  memset(sp->div_seen, 0, sizeof sp->div_seen);
  I->fake = true;
  for (int j = 0; j < sp->n_slots; j++) {
    slot *sl = &sp->slots[j];
    sl->n_marks = 0;
    if (!slot_active(r, A0, sl)) continue;
    int n = (int)(SCAN_MAX - sl->lo + 1);
    for (int i = 0; i < n; i++) {
      A = *A0;
      *slot_val(&A, sl) = sl->lo + i;
      use_assign(I, &A);
      fake_types(I);
      for (int c = 0; c < r->n_conds; c++) {
        int64_t a, b;
        sp->fv[c][i] = !r->conds[c].params_only && !sp->cond_div[c] && pcgc__rx_eval(&I->env, r->conds[c].a, &a) == RX_OK &&
                       pcgc__rx_eval(&I->env, r->conds[c].b, &b) == RX_OK;
        if (sp->fv[c][i]) sp->f[c][i] = a - b;
      }
      for (int k = 0; k < sp->n_divs; k++) {
        const rx *x = &r->ex[sp->divs[k]];
        int64_t a, b;
        sp->qv[k][i] = pcgc__rx_eval(&I->env, x->a, &a) == RX_OK && pcgc__rx_eval(&I->env, x->b, &b) == RX_OK && b != 0 &&
                       b != 1 && b != -1 && a != INT64_MIN;
        if (sp->qv[k][i]) {
          sp->q[k][i] = a / b;
          sp->div_seen[k] = true;
        }
      }
    }
    /* roots of a - b: the bound itself, or the two values around a root
     * between integers */
    for (int c = 0; c < r->n_conds; c++) {
      bool varies = false;
      for (int i = 1; i < n && !varies; i++) varies = sp->fv[c][i] && sp->fv[c][i - 1] && sp->f[c][i] != sp->f[c][i - 1];
      if (!varies) continue;
      int roots = 0;
      for (int i = 0; i < n && roots < 2; i++) {
        if (!sp->fv[c][i]) continue;
        int64_t v = sl->lo + i;
        if (sp->f[c][i] == 0) {
          add_mark(sl, v - 1, CLS(PCGC_CHECK_BOUND_BELOW));
          add_mark(sl, v, CLS(PCGC_CHECK_BOUND));
          add_mark(sl, v + 1, CLS(PCGC_CHECK_BOUND_ABOVE));
          roots++;
        } else if (i > 0 && sp->fv[c][i - 1] && sp->f[c][i - 1] != 0 && (sp->f[c][i - 1] < 0) != (sp->f[c][i] < 0)) {
          add_mark(sl, v - 1, CLS(PCGC_CHECK_BOUND_BELOW));
          add_mark(sl, v, CLS(PCGC_CHECK_BOUND_ABOVE));
          roots++;
        }
      }
    }
    /* steps of each quotient: the first three */
    for (int k = 0; k < sp->n_divs; k++) {
      int steps = 0;
      for (int i = 1; i < n && steps < 3; i++) {
        if (!sp->qv[k][i] || !sp->qv[k][i - 1] || sp->q[k][i] == sp->q[k][i - 1]) continue;
        int64_t v = sl->lo + i;
        add_mark(sl, v - 1, CLS(PCGC_CHECK_DIV_BELOW));
        add_mark(sl, v, CLS(PCGC_CHECK_DIV));
        add_mark(sl, v + 1, CLS(PCGC_CHECK_DIV_ABOVE));
        steps++;
      }
    }
  }
  /* a division whose dividend is no size of an input (the size of an
   * intermediate): multiples of its divisor for every size */
  use_assign(I, A0);
  fake_types(I);
  for (int k = 0; k < sp->n_divs; k++) {
    int64_t m;
    if (sp->div_seen[k] || pcgc__rx_eval(&I->env, r->ex[sp->divs[k]].b, &m) != RX_OK || m < 2 || m > SCAN_MAX) continue;
    for (int j = 0; j < sp->n_slots; j++) {
      slot *sl = &sp->slots[j];
      if (sl->lo < 1 || !slot_active(r, A0, sl)) continue;
      for (int64_t t = m; t <= 2 * m; t += m) {
        add_mark(sl, t - 1, CLS(PCGC_CHECK_DIV_BELOW));
        add_mark(sl, t, CLS(PCGC_CHECK_DIV));
        add_mark(sl, t + 1, CLS(PCGC_CHECK_DIV_ABOVE));
      }
    }
  }
  I->fake = false;
}

/* Candidate values of every active slot for this binding. */
static void make_candidates(const pcgc_rule *r, space *sp, const assign *A0, uint64_t *rs) {
  static const int64_t fixed[] = {3, 5, 6, 7, 0};
  for (int j = 0; j < sp->n_slots; j++) {
    slot *sl = &sp->slots[j];
    sl->n_cands = 0;
    sl->random_v = INT64_MIN;
    if (!slot_active(r, A0, sl)) continue;
    int64_t lo = sl->lo > 1 ? sl->lo : 1;
    sl->random_v = lo + (int64_t)(rng_next(rs) % (uint64_t)(SCAN_MAX - lo + 1));
    int64_t base = *slot_val((assign *)A0, sl);
    int64_t vals[MAX_CANDS];
    int n = 0;
    for (size_t f = 0; f < sizeof fixed / sizeof fixed[0] && n < MAX_CANDS; f++) vals[n++] = fixed[f];
    if (sl->lo < 1) vals[n++] = 1; /* a variable bound by an attribute: true (causal=c), the second axis */
    for (int m = 0; m < sl->n_marks && n < MAX_CANDS; m++) vals[n++] = sl->mark_v[m];
    if (n < MAX_CANDS) vals[n++] = sl->random_v;
    for (int i = 0; i < n; i++) {
      bool dup = vals[i] == base || vals[i] < sl->lo || vals[i] > SCAN_MAX;
      for (int k = 0; k < sl->n_cands && !dup; k++) dup = sl->cand[k] == vals[i];
      if (!dup) {
        sl->tried[sl->n_cands] = false;
        sl->cand[sl->n_cands++] = vals[i];
      }
    }
  }
}

static int popcount(unsigned v) {
  int n = 0;
  for (; v; v &= v - 1) n++;
  return n;
}

/* The untried candidate that covers the most classes its slot has not
 * covered yet (ties: the earliest slot, the earliest candidate); false when
 * none covers anything new. */
static bool next_candidate(const pcgc_rule *r, const space *sp, const assign *A0, int *js, int *ks) {
  int best = 0;
  for (int j = 0; j < sp->n_slots; j++) {
    const slot *sl = &sp->slots[j];
    if (!slot_active(r, A0, sl)) continue;
    for (int k = 0; k < sl->n_cands; k++) {
      if (sl->tried[k]) continue;
      int gain = popcount(value_classes(sl, sl->cand[k]) & ~sl->covered);
      if (gain > best) {
        best = gain;
        *js = j;
        *ks = k;
      }
    }
  }
  return best > 0;
}

typedef enum draw_result { DRAW_NONE, DRAW_OK, DRAW_FAIL, DRAW_NOMEM } draw_result;

/* Builds instance A: both graphs. DRAW_NONE when it is not an instance (the
 * match does not type-check, a condition fails, it is too large); DRAW_FAIL
 * (message in msg) when it is and the rewrite side is wrong. */
/* Whether A can be an instance as far as the sizes alone tell: the inputs'
 * shapes, their size, and the conditions that read only sizes of inputs
 * (most draws end here, without a graph). */
static bool sizes_pass(inst *I, const assign *A) {
  const pcgc_rule *r = I->r;
  use_assign(I, A);
  I->fake = true;
  fake_types(I);
  bool ok = true;
  int64_t in_numel = 0;
  for (int i = 0; i < r->n_inputs && ok; i++) {
    ok = I->fake_ok[i];
    if (ok) in_numel += pcgc_ptensor_numel(&I->fake_t[i]);
  }
  if (in_numel > NUMEL_CAP) ok = false;
  for (int c = 0; c < r->n_conds && ok; c++) {
    bool holds = true;
    if (pcgc__rc_eval(&I->env, &r->conds[c], &holds) == RX_OK && !holds) ok = false;
  }
  I->fake = false;
  return ok;
}

/* How far A is from passing sizes_pass: the inputs without a shape or too
 * large and the conditions that fail, and how far off those conditions are
 * (|a - b|, which a step toward the bound lessens). */
static int conflicts(inst *I, const assign *A, int64_t *off) {
  const pcgc_rule *r = I->r;
  use_assign(I, A);
  I->fake = true;
  fake_types(I);
  int n = 0;
  int64_t in_numel = 0;
  *off = 0;
  for (int i = 0; i < r->n_inputs; i++) {
    if (!I->fake_ok[i]) n += 4;
    else in_numel += pcgc_ptensor_numel(&I->fake_t[i]);
  }
  n += in_numel > NUMEL_CAP;
  for (int c = 0; c < r->n_conds; c++) {
    bool holds = true;
    int64_t a, b;
    if (pcgc__rc_eval(&I->env, &r->conds[c], &holds) != RX_OK || holds) continue;
    n++;
    if (pcgc__rx_eval(&I->env, r->conds[c].a, &a) == RX_OK && pcgc__rx_eval(&I->env, r->conds[c].b, &b) == RX_OK)
      *off += a > b ? a - b : b - a;
  }
  I->fake = false;
  return n;
}

/* Moves A toward the conditions with slot `fixed` kept: a few steps, each
 * setting the one size (1..12, 16, 24, 32) that leaves the fewest conflicts
 * (then the least off); a kernel of 5 under `e * (P - 1) + 1 <= s` gets
 * e = 1 and a stride to match, where redrawing every size rarely does. */
static bool repair(inst *I, const space *sp, assign *A, int fixed) {
  static const int64_t vals[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 24, 32};
  const pcgc_rule *r = I->r;
  for (int step = 0; step < 6; step++) {
    int64_t off;
    int n = conflicts(I, A, &off);
    if (n == 0) return true;
    int best_n = n, bj = -1;
    int64_t best_off = off, bv = 0;
    for (int j = 0; j < sp->n_slots; j++) {
      const slot *sl = &sp->slots[j];
      if (j == fixed || !slot_active(r, A, sl)) continue;
      int64_t keep = *slot_val(A, sl);
      for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
        if (vals[k] == keep) continue;
        *slot_val(A, sl) = vals[k];
        int64_t o2;
        int n2 = conflicts(I, A, &o2);
        if (n2 < best_n || (n2 == best_n && o2 < best_off)) {
          best_n = n2;
          best_off = o2;
          bj = j;
          bv = vals[k];
        }
      }
      *slot_val(A, sl) = keep;
    }
    if (bj < 0) return false;
    *slot_val(A, &sp->slots[bj]) = bv;
  }
  int64_t off;
  return conflicts(I, A, &off) == 0;
}

static draw_result try_assign(inst *I, const assign *A, uint64_t *rs, char *msg, size_t msg_n) {
  const pcgc_rule *r = I->r;
  I->refused = false;
  if (!sizes_pass(I, A)) return DRAW_NONE;
  side_free(&I->m);
  side_free(&I->w);
  I->n_src = 0;
  if (!(I->m.g = pcgc_graph_new()) || !(I->w.g = pcgc_graph_new())) return DRAW_NOMEM;
  int rank[PCGC_RULE_MAX_INPUTS];
  int64_t dims[PCGC_RULE_MAX_INPUTS][PCGC_MAX_RANK];
  for (int i = 0; i < r->n_inputs; i++) {
    if (!input_shape(I, i, &rank[i], dims[i])) return DRAW_NONE;
    pcgc_dtype dt = input_dtype(r->tensors[r->inputs[i]].type);
    if (!build_input(I, &I->m, i, rank[i], dims[i], dt)) return DRAW_NONE;
  }
  pcgc_error err = {0};
  if (!build_side(I, &I->m, &r->match, 0, rs, &err)) return DRAW_NONE;
  if (pcgc_graph_infer(I->m.g, &err) != PCGC_OK) {
    I->refused = true;
    return DRAW_NONE;
  }
  int64_t total = 0;
  for (int k = 0; k < I->m.g->n_nodes; k++)
    for (int j = 0; j < I->m.g->nodes[k].n_out; j++) total += pcgc_ptensor_numel(&I->m.g->nodes[k].out[j]);
  if (total > NUMEL_CAP) return DRAW_NONE;
  I->cur = &I->m;
  for (int c = 0; c < r->n_conds; c++) {
    bool holds = false;
    if (pcgc__rc_eval(&I->env, &r->conds[c], &holds) != RX_OK || !holds) return DRAW_NONE;
  }
  /* the rewrite, on the same inputs */
  int n_src = I->n_src;
  for (int i = 0; i < r->n_inputs; i++) {
    pcgc_dtype dt = input_dtype(r->tensors[r->inputs[i]].type);
    if (!build_input(I, &I->w, i, rank[i], dims[i], dt)) return DRAW_NONE;
  }
  I->n_src = n_src;
  char inst_text[512];
  describe(I, inst_text, sizeof inst_text);
  if (!build_side(I, &I->w, &r->rewrite, 1, rs, &err)) {
    snprintf(msg, msg_n, "instance %s: the rewrite cannot be built: %s", inst_text, err.message);
    return DRAW_FAIL;
  }
  if (pcgc_graph_infer(I->w.g, &err) != PCGC_OK) {
    snprintf(msg, msg_n, "instance %s: the match type-checks but the rewrite does not: %s", inst_text, err.message);
    return DRAW_FAIL;
  }
  for (int y = 0; y < r->match.n_yields; y++) {
    const pcgc_ptensor *a = pcgc_graph_ref_type(I->m.g, I->m.of[r->match.yields[y]]);
    const pcgc_ptensor *b = pcgc_graph_ref_type(I->w.g, I->w.of[r->rewrite.yields[y]]);
    if (!a || !b || !pcgc_ptensor_equal(a, b)) {
      char ta[160] = "?", tb[160] = "?";
      if (a) pcgc_ptensor_format(ta, sizeof ta, a);
      if (b) pcgc_ptensor_format(tb, sizeof tb, b);
      snprintf(msg, msg_n, "instance %s: yield %d has type %s by the match but %s by the rewrite", inst_text, y + 1, ta,
               tb);
      return DRAW_FAIL;
    }
  }
  return DRAW_OK;
}

/* The dims of the inputs of the match node that type inference refused in
 * the last draw (the first node without a type whose inputs all have one);
 * how many, at most max. */
static int refused_dims(const inst *I, int64_t *vals, int max) {
  const pcgc_graph *g = I->m.g;
  int n = 0;
  for (int k = 0; g && k < g->n_nodes; k++) {
    const pcgc_node *nd = &g->nodes[k];
    bool ready = !nd->typed;
    for (int j = 0; j < nd->n_in && ready; j++) ready = pcgc_graph_ref_type(g, nd->in[j]) != NULL;
    if (!ready) continue;
    for (int j = 0; j < nd->n_in; j++) {
      const pcgc_ptensor *t = pcgc_graph_ref_type(g, nd->in[j]);
      for (int d = 0; d < t->rank && n < max; d++) vals[n++] = t->dims[d];
    }
    break;
  }
  return n;
}

static bool among(const int64_t *vals, int n, int64_t v) {
  for (int k = 0; k < n; k++)
    if (vals[k] == v) return true;
  return false;
}

/* Called after a draw whose match side type inference refused (I->refused):
 * makes the refused shapes agree. An attribute value that constrains sizes
 * the rule's conditions do not (a causal attention needs as many keys as
 * queries, S == T) is refused on most draws; here each pair of sizes whose
 * values are dims of the refused node's inputs is set equal (the smaller to
 * the larger first, so that a mask over more than one query shows), slot
 * `fixed` kept, and the first pair that makes A an instance is kept.
 * Deterministic: the pairs in slot order. */
static bool unify(inst *I, const space *sp, assign *A, int fixed, uint64_t *rs) {
  const pcgc_rule *r = I->r;
  int64_t vals[4 * PCGC_VARIADIC];
  int nv = refused_dims(I, vals, (int)(sizeof vals / sizeof vals[0]));
  if (nv == 0) return false;
  char m[256];
  for (int i = 0; i < sp->n_slots; i++) {
    const slot *si = &sp->slots[i];
    if (si->lo < 1 || !slot_active(r, A, si) || !among(vals, nv, *slot_val(A, si))) continue;
    for (int j = i + 1; j < sp->n_slots; j++) {
      const slot *sj = &sp->slots[j];
      if (sj->lo < 1 || !slot_active(r, A, sj)) continue;
      int64_t vi = *slot_val(A, si), vj = *slot_val(A, sj);
      if (vi == vj || !among(vals, nv, vj)) continue;
      for (int dir = 0; dir < 2; dir++) {
        bool to_j = (dir == 0) == (vj > vi); /* set slot i to vj */
        int set = to_j ? i : j;
        if (set == fixed) continue;
        assign B = *A;
        *slot_val(&B, &sp->slots[set]) = to_j ? vj : vi;
        if (!sizes_pass(I, &B) || try_assign(I, &B, rs, m, sizeof m) == DRAW_NONE) continue;
        *A = B;
        return true;
      }
    }
  }
  return false;
}

/* The first attention of the match graph g with rotary embeddings on whose
 * head size is odd (type inference refuses it) or below 4 (rope's base
 * then shows nothing: the one frequency pair turns by base^0), and the
 * dims of its inputs in vals (how many, at most max); 0 if none. */
static int small_rope_head(const pcgc_graph *g, int64_t *vals, int max) {
  for (int k = 0; g && k < g->n_nodes; k++) {
    const pcgc_node *nd = &g->nodes[k];
    if (nd->kind != PCGC_OP_ATTENTION || !pcgc_attrs_int(nd->attrs, "rope") || nd->n_in < 4) continue;
    const pcgc_ptensor *wq = pcgc_graph_ref_type(g, nd->in[3]);
    int64_t heads = pcgc_attrs_int(nd->attrs, "heads");
    if (!wq || wq->rank != 2 || heads < 1) continue;
    int64_t head = wq->dims[1] / heads;
    if (head % 2 == 0 && head >= 4) continue;
    /* the projection sizes first (they set the head sizes), then every dim */
    const pcgc_ptensor *wk = nd->n_in > 4 ? pcgc_graph_ref_type(g, nd->in[4]) : NULL;
    int n = 0;
    if (max >= 2) {
      vals[n++] = wq->dims[1];
      vals[n++] = wk && wk->rank == 2 ? wk->dims[1] : wq->dims[1];
    }
    for (int j = 0; j < nd->n_in; j++) {
      const pcgc_ptensor *t = pcgc_graph_ref_type(g, nd->in[j]);
      for (int d = 0; t && d < t->rank && n < max; d++) vals[n++] = t->dims[d];
    }
    return n;
  }
  return 0;
}

/* Rotary embeddings need even head sizes (q's and the keys'), and show
 * their base only from head size 4: sizes the draws seldom give together
 * with a rule's conditions, so an open rope (or its base) would rarely run
 * and a rewrite that turns it off would pass. When A's match graph (the
 * last built) has such an attention, the sizes among the dims of its
 * inputs are multiplied: those equal to a projection size (q's, the keys')
 * by 2 then 4, all of them by 4 then 2 (head sizes grow, the heads stay),
 * then one at a time by 2, slot `fixed` kept; the first that
 * makes A an instance (with a head size that shows rope, where A's was
 * accepted already) is kept. */
static bool rope_sizes(inst *I, const space *sp, assign *A, int fixed, uint64_t *rs) {
  const pcgc_rule *r = I->r;
  int64_t vals[4 * PCGC_VARIADIC];
  int nv = small_rope_head(I->m.g, vals, (int)(sizeof vals / sizeof vals[0]));
  if (nv == 0) return false;
  bool refused = I->refused;
  char m[256];
  int all = 0;
  /* -4, -3: the projection sizes times 2, times 4; -2, -1: every dim times
   * 4, times 2; then each alone times 2 */
  for (int one = -4; one < sp->n_slots && (one < 0 || all > 1); one++) {
    assign B = *A;
    int changed = 0;
    const int64_t *pick_from = one < -2 ? vals : vals + 2;
    int n_pick = one < -2 ? 2 : nv - 2;
    for (int i = 0; i < sp->n_slots; i++) {
      const slot *si = &sp->slots[i];
      if ((one >= 0 && i != one) || i == fixed || si->lo < 1 || !slot_active(r, A, si) ||
          !among(pick_from, n_pick, *slot_val(A, si)))
        continue;
      *slot_val(&B, si) *= one == -4 ? 2 : one == -3 || one == -2 ? 4 : 2;
      changed++;
    }
    if (one == -1) all = changed;
    if (!changed || !sizes_pass(I, &B) || try_assign(I, &B, rs, m, sizeof m) == DRAW_NONE) continue;
    int64_t again[4 * PCGC_VARIADIC];
    if (!refused && small_rope_head(I->m.g, again, (int)(sizeof again / sizeof again[0]))) continue;
    *A = B;
    return true;
  }
  return false;
}

static bool match_has(const pcgc_rule *r, pcgc_op_kind op) {
  for (int k = 0; k < r->match.n_nodes; k++)
    if (r->match.nodes[k].op == op) return true;
  return false;
}

/* A draw, and when type inference refuses its match side, the same draw
 * with the refused shapes made to agree (unify); with rotary embeddings on,
 * sizes that show them (rope_sizes): A is updated. */
static draw_result try_agree(inst *I, const space *sp, assign *A, int fixed, uint64_t *rs, char *msg, size_t msg_n) {
  draw_result d = try_assign(I, A, rs, msg, msg_n);
  if (d == DRAW_NOMEM) return d;
  /* a rope head to grow, told from A's graph before unify's draws replace it */
  int64_t dims[4 * PCGC_VARIADIC];
  bool rope = (d != DRAW_NONE || I->refused) && match_has(I->r, PCGC_OP_ATTENTION) &&
              small_rope_head(I->m.g, dims, (int)(sizeof dims / sizeof dims[0])) > 0;
  if (d == DRAW_NONE && I->refused && unify(I, sp, A, fixed, rs)) return try_assign(I, A, rs, msg, msg_n);
  if (!rope) return d;
  if (d == DRAW_NONE) d = try_assign(I, A, rs, msg, msg_n); /* A's graph again */
  if (rope_sizes(I, sp, A, fixed, rs)) d = try_assign(I, A, rs, msg, msg_n);
  return d;
}

/* Whether the value open attribute j has in the instance just built can be
 * told apart from its neighbours: a conv2d's or pool2d's stride, padding,
 * dilation or kernel pair shows nothing of a swap or a shift of one entry on
 * a square plane or under a 1x1 kernel (dilation has no effect, the swap is
 * the same pair), nor under a global pool; a causal mask nothing over
 * sequences of one. Such a value counts as run only in an instance with
 * planes H != W and a kernel above 1x1 (a dilation: above 1 both ways), or
 * queries and keys above 1. */
static bool attr_visible(const inst *I, int j) {
  const aslot *as = &I->aslots[j];
  const rnode *rn = &I->r->match.nodes[as->node];
  const char *an = pcgc_op_attr(rn->op, as->attr)->name;
  bool causal = rn->op == PCGC_OP_ATTENTION && !strcmp(an, "causal");
  if (rn->op == PCGC_OP_ATTENTION && (!strcmp(an, "rope") || !strcmp(an, "rope_theta"))) {
    /* rotary embeddings show only where some position is past 0 (position
     * 0 rotates by nothing); their base only where they are on */
    int gn = I->m.node_of[as->node];
    if (!I->m.g || gn < 0) return false;
    const pcgc_node *n = &I->m.g->nodes[gn];
    const pcgc_ptensor *q = n->n_in > 0 ? pcgc_graph_ref_type(I->m.g, n->in[0]) : NULL;
    bool on = !strcmp(an, "rope") || pcgc_attrs_int(n->attrs, "rope");
    if (!on || !q || q->rank < 2 || q->dims[q->rank - 2] < 2) return false;
    /* the base shows only past the first frequency pair, which turns by
     * base^0 = 1 whatever it is: head size 4 and up (rope_sizes) */
    const pcgc_ptensor *wq = n->n_in > 3 ? pcgc_graph_ref_type(I->m.g, n->in[3]) : NULL;
    int64_t heads = pcgc_attrs_int(n->attrs, "heads");
    if (!wq || wq->rank != 2 || heads < 1 || wq->dims[1] / heads < 4) return false;
    /* rope turned on shows the default base too (a rewrite that changes it
     * differs there): only with that base */
    int ti = pcgc_op_attr_index(PCGC_OP_ATTENTION, "rope_theta");
    return strcmp(an, "rope") || ti < 0 || pcgc_attrs_float_at(n->attrs, ti) == pcgc_op_attr(PCGC_OP_ATTENTION, ti)->def_f;
  }
  if (!causal &&
      ((rn->op != PCGC_OP_CONV2D && rn->op != PCGC_OP_POOL2D) || pcgc_op_attr(rn->op, as->attr)->type != PCGC_ATTR_INTS2))
    return true;
  int gn = I->m.node_of[as->node];
  if (!I->m.g || gn < 0) return false;
  const pcgc_node *n = &I->m.g->nodes[gn];
  const pcgc_ptensor *x = n->n_in > 0 ? pcgc_graph_ref_type(I->m.g, n->in[0]) : NULL;
  if (causal) { /* a mask over one query or one key hides nothing */
    const pcgc_ptensor *k = n->n_in > 1 ? pcgc_graph_ref_type(I->m.g, n->in[1]) : NULL;
    return x && k && x->rank >= 2 && k->rank >= 2 && x->dims[x->rank - 2] > 1 && k->dims[k->rank - 2] > 1;
  }
  if (!x || x->rank != 4 || x->dims[2] == x->dims[3]) return false;
  int64_t kh = 1, kw = 1;
  if (rn->op == PCGC_OP_CONV2D) {
    const pcgc_ptensor *w = n->n_in > 1 ? pcgc_graph_ref_type(I->m.g, n->in[1]) : NULL;
    if (!w || w->rank != 4) return false;
    kh = w->dims[2];
    kw = w->dims[3];
  } else {
    pcgc_ints k = pcgc_attrs_ints(n->attrs, "kernel");
    if (pcgc_attrs_int(n->attrs, "global")) return false;
    kh = k.v[0];
    kw = k.v[1];
  }
  if (!strcmp(pcgc_op_attr(rn->op, as->attr)->name, "dilation")) return kh > 1 && kw > 1; /* each entry shows */
  return kh > 1 || kw > 1;
}

/* The state of one rule's check. */
typedef struct checker {
  inst *I;
  space *sp;
  const pcgc_check_options *o;
  pcgc_check_result *res;
  pcgc_error *err;
  pcgc_status st;
  uint64_t rs;
  int n_seen;
  uint64_t seen[512];    /* instances of this binding (hashes) */
  int n_pool;
  assign pool[16];       /* instances of earlier bindings: the first bases tried */
  int round;             /* attribute rounds so far in this rule */
  int want_visible;      /* an open attribute whose value must show (attr_visible) for an instance to run, or -1 */
  int n_wide;            /* bindings so far with every degree above 1 */
  unsigned wide_done;    /* the shapes (ell_t, rank_t) run in those bindings */
} checker;

typedef enum tried { TRY_NONE, TRY_RAN, TRY_STOP } tried;

static void credit(pcgc_check_result *res, unsigned cls) {
  res->instances++;
  res->classes |= cls;
  for (int c = 0; c < PCGC_CHECK_N_CLASSES; c++)
    if (cls & CLS(c)) res->class_instances[c]++;
}

/* Tries instance A; when it is one, new and the match side runs, runs every
 * seed and credits its classes (extra: classes from how it was chosen).
 * TRY_STOP when the rule failed or the check cannot go on. */
static tried try_instance(checker *C, const assign *A, unsigned extra) {
  inst *I = C->I;
  const pcgc_rule *r = I->r;
  pcgc_check_result *res = C->res;
  char msg[sizeof res->message];
  draw_result d = try_assign(I, A, &C->rs, msg, sizeof msg);
  if (d == DRAW_NOMEM) {
    C->st = pcgc_error_set(C->err, PCGC_ERR_NOMEM, "out of memory checking rule '%s'", r->name);
    return TRY_STOP;
  }
  if (d == DRAW_NONE) return TRY_NONE;
  if (d == DRAW_OK && C->want_visible >= 0 && !attr_visible(I, C->want_visible)) return TRY_NONE;
  unsigned cls = extra;
  for (int j = 0; j < I->n_aslots; j++)
    if (A->av[j]) cls |= CLS(PCGC_CHECK_ATTR);
  if (I->training) cls |= CLS(PCGC_CHECK_TRAINING);
  for (int j = 0; j < C->sp->n_slots; j++)
    if (slot_active(r, A, &C->sp->slots[j])) cls |= value_classes(&C->sp->slots[j], *slot_val((assign *)A, &C->sp->slots[j]));
  char cls_text[256];
  pcgc_check_classes_format(cls_text, sizeof cls_text, cls);
  if (d == DRAW_FAIL) {
    res->ok = false;
    snprintf(res->message, sizeof res->message, "%.1700s (%.300s)", msg, cls_text);
    credit(res, cls);
    return TRY_STOP;
  }
  /* a new instance? (same symbol values and input shapes = same instance) */
  uint64_t h = 1469598103934665603ull;
  for (int s = 0; s < r->n_syms; s++) {
    h = (h ^ (uint64_t)I->env.sym[s]) * 1099511628211ull;
    for (int k = 0; k < I->ell_n[s]; k++) h = (h ^ (uint64_t)I->ell[s][k]) * 1099511628211ull;
  }
  for (int j = 0; j < I->n_aslots; j++) h = (h ^ A->av[j]) * 1099511628211ull;
  for (int s = 0; s < I->n_src; s++) {
    const pcgc_ptensor *tt = &I->m.g->nodes[pcgc_graph_find(I->m.g, I->src[s])].out[0];
    for (int k = 0; k < tt->rank; k++) h = (h ^ (uint64_t)tt->dims[k]) * 1099511628211ull;
  }
  for (int k = 0; k < C->n_seen; k++)
    if (C->seen[k] == h) return TRY_NONE;
  if (C->n_seen < (int)(sizeof C->seen / sizeof C->seen[0])) C->seen[C->n_seen++] = h;
  char inst_text[512];
  describe(I, inst_text, sizeof inst_text);
  /* the seeds; a rule with a dropout runs them in training mode, where
   * equal programs draw equal masks (the dropout seed varies by instance),
   * and one more in inference mode, where dropout is the identity */
  int ran = 0;
  char rmsg[1400];
  run_result rr = RUN_AGREE;
  for (int mode = 0; mode < (I->training ? 2 : 1) && rr != RUN_NOMEM && res->ok; mode++) {
    bool training = I->training && mode == 0;
    const char *mode_text = !I->training ? "" : training ? "training: " : "inference: ";
    int want = mode == 0 ? C->o->seeds : 1, got = 0;
    pcgc_reference *RA, *RB;
    rr = prepare_runs(I, training, 1 + (uint64_t)res->instances, &RA, &RB, rmsg, sizeof rmsg);
    if (rr == RUN_DIFFER) {
      ran++;
      res->executions++;
      res->ok = false;
      snprintf(res->message, sizeof res->message, "instance %s (%s): %s%.1250s", inst_text, cls_text, mode_text, rmsg);
    }
    for (int s = 1; rr == RUN_AGREE && got < want && s <= 4 * want && res->ok; s++) {
      run_result q = run_seed(I, RA, RB, (uint64_t)s, rmsg, sizeof rmsg);
      if (q == RUN_NOMEM) {
        rr = RUN_NOMEM;
        break;
      }
      if (q == RUN_SKIP) continue;
      got++;
      ran++;
      res->executions++;
      if (q == RUN_DIFFER) {
        res->ok = false;
        snprintf(res->message, sizeof res->message, "instance %s (%s): %s%.1250s", inst_text, cls_text, mode_text,
                 rmsg);
      }
    }
    pcgc_ref_free(RA);
    pcgc_ref_free(RB);
  }
  if (rr == RUN_NOMEM) {
    C->st = pcgc_error_set(C->err, PCGC_ERR_NOMEM, "out of memory checking rule '%s'", r->name);
    return TRY_STOP;
  }
  if (C->o->log)
    fprintf(C->o->log, "  %s: instance %s: %d seeds %s [%s]\n", r->name, inst_text, ran, res->ok ? "agree" : "DIFFER",
            cls_text);
  if (ran == 0 && res->ok) return TRY_NONE; /* the match side never ran (it overflows): not an instance after all */
  credit(res, cls);
  if (!res->ok) return TRY_STOP;
  if (C->n_pool < (int)(sizeof C->pool / sizeof C->pool[0])) {
    C->pool[C->n_pool] = *A;
    memset(C->pool[C->n_pool++].av, 0, sizeof A->av); /* bases have default attributes */
  }
  for (int j = 0; j < I->n_aslots; j++)
    if (A->av[j] && attr_visible(I, j)) I->aslots[j].covered |= 1u << (A->av[j] - 1);
  for (int j = 0; j < C->sp->n_slots; j++) {
    slot *sl = &C->sp->slots[j];
    if (slot_active(r, A, sl)) sl->covered |= value_classes(sl, *slot_val((assign *)A, sl));
  }
  return TRY_RAN;
}

/* Shapes tried in turn in bindings whose degrees are all above 1: dims of
 * every ellipsis, rank of every input the rule leaves unshaped. */
static const int ell_t[4] = {1, 2, 3, 0}, rank_t[4] = {3, 4, 2, 1};

/* The instances of one parameter binding (parameters in I->env): a base
 * instance, the slots' candidates, seeded random combinations; at most cap.
 * Returns how many ran. */
static int check_binding(checker *C, int cap) {
  inst *I = C->I;
  const pcgc_rule *r = I->r;
  space *sp = C->sp;
  const pcgc_check_options *o = C->o;
  C->n_seen = 0;
  assign A0, A;
  memset(&A0, 0, sizeof A0);
  int found = 0, tries = 0;
  tried t = TRY_NONE;
  for (int j = 0; j < sp->n_slots; j++) { /* no marks until this binding's scan */
    sp->slots[j].n_marks = 0;
    sp->slots[j].random_v = INT64_MIN;
  }
  /* in a binding whose degrees are all above 1 (where a partition or a
   * combine on a wrong dim shows), a base of another rank: ellipses of 1, 2,
   * 3, 0 dims and unshaped inputs of rank 3, 4, 2, 1 in turn, so that a dim
   * computed from rank() (`rank(x) - 1` against `1 - rank(x)`, which agree
   * on ranks 1 and 2) is run at ranks where wrong formulas differ */
  bool wide = false;
  for (int s = r->n_params; s < r->n_syms && !wide; s++) wide = r->syms[s].kind == RS_ELLIPSIS;
  for (int i = 0; i < r->n_inputs && !wide; i++) wide = !r->tensors[r->inputs[i]].type->has_shape;
  for (int p = 0; p < r->n_params; p++)
    if (r->syms[p].kind == RS_DEGREE && I->env.sym[p] < 2) wide = false;
  if (wide) {
    /* the first target not yet run in this rule, as the base; with room in
     * the binding (a rule of one binding), the other targets after it */
    int max_shapes = 1 + cap / 8;
    for (int n_shapes = 0, q = 0; q < 4 && n_shapes < max_shapes && found < cap && tries < o->max_tries; q++) {
      int w = (C->n_wide + q) % 4;
      if (C->wide_done & (1u << w)) continue;
      assign B;
      memset(&B, 0, sizeof B);
      bool ran = false;
      for (int p = 0, real = 0; !ran && p < C->n_pool + 400 && real < 40 && tries < o->max_tries; p++) {
        if (p < C->n_pool) B = C->pool[p];
        else random_assign(r, &C->rs, &B, false);
        for (int s = r->n_params; s < r->n_syms; s++)
          if (r->syms[s].kind == RS_ELLIPSIS) B.ell_n[s] = ell_t[w];
        for (int i = 0; i < r->n_inputs; i++)
          if (!r->tensors[r->inputs[i]].type->has_shape) B.rank[i] = rank_t[w];
        if (p >= C->n_pool) random_assign(r, &C->rs, &B, true);
        else if (memcmp(&B, &C->pool[p], sizeof B)) continue; /* a pool base of another shape */
        if (!sizes_pass(I, &B)) continue;
        tries++;
        real++;
        if ((t = try_instance(C, &B, found ? 0 : CLS(PCGC_CHECK_BASE))) == TRY_STOP) return found;
        ran = t == TRY_RAN;
      }
      n_shapes++;
      if (!ran) continue;
      C->wide_done |= 1u << w;
      if (!found) A0 = B;
      found++;
    }
    C->n_wide++;
    if (C->wide_done == 15) C->wide_done = 0; /* every shape run: round again */
  }
  /* the base: an instance of an earlier binding if one is an instance of
   * this one (rules whose instances are rare draws, a reshape's shape), else
   * the first draw that is */
  for (int p = 0; found == 0 && p < C->n_pool && tries < o->max_tries; p++) {
    tries++;
    A0 = C->pool[p];
    if ((t = try_instance(C, &A0, CLS(PCGC_CHECK_BASE))) == TRY_STOP) return found;
    if (t == TRY_RAN) found++;
  }
  while (found == 0 && tries < o->max_tries) {
    tries++;
    random_assign(r, &C->rs, &A0, false);
    if ((t = try_instance(C, &A0, CLS(PCGC_CHECK_BASE))) == TRY_STOP) return found;
    if (t == TRY_RAN) found++;
  }
  if (found == 0) return 0;
  /* a variable bound only by an attribute (causal=c, an axis) at its other
   * value in every binding: 1 where the base has 0, else 0, the sizes made
   * to agree where type inference refuses it (causal with S != T) */
  for (int j = 0; j < sp->n_slots && found < cap && tries < o->max_tries; j++) {
    slot *sl = &sp->slots[j];
    if (sl->kind != SLOT_VAR || sl->lo >= 1) continue;
    A = A0;
    *slot_val(&A, sl) = *slot_val(&A0, sl) ? 0 : 1;
    tries++;
    char m[256];
    if (try_agree(I, sp, &A, j, &C->rs, m, sizeof m) == DRAW_NONE) continue;
    if ((t = try_instance(C, &A, 0)) == TRY_STOP) return found;
    if (t == TRY_RAN) found++;
  }
  /* the open attributes: rounds that set each to another value or its
   * default (the first round of the rule every one to its first other
   * value, later ones a seeded random combination, odd ones on redrawn
   * sizes; a binding with room for every round runs them all, else one),
   * then each value no round has run yet alone */
  int n_rounds = 0;
  for (int a = 0; a < I->n_aslots; a++)
    if (I->aslots[a].n_vals + 1 > n_rounds) n_rounds = I->aslots[a].n_vals + 1;
  if (n_rounds > 1 && cap < 2 * n_rounds + 2) n_rounds = 1;
  for (int q = 0; q < n_rounds && found < cap && tries < o->max_tries; q++, C->round++) {
    /* greedily, one attribute at a time: a value the sizes so far refuse
     * (groups 2 on one channel, causal with unequal lengths) gets redrawn
     * sizes, or stays at its default */
    A = A0;
    for (int rep = 0; rep < 3 && C->round % 2; rep++) { /* odd rounds: other sizes (a kernel above 1) */
      assign B = A0;
      random_assign(r, &C->rs, &B, true);
      char m[256];
      tries++;
      if (try_assign(I, &B, &C->rs, m, sizeof m) == DRAW_OK) {
        A = B;
        break;
      }
    }
    bool any = false;
    for (int i = 0; i < I->n_aslots && tries < o->max_tries; i++) {
      int a = (i + C->round) % I->n_aslots;
      int v = C->round == 0 || I->n_aslots == 1 ? 1 + C->round % I->aslots[a].n_vals
                                                 : (int)(rng_next(&C->rs) % (uint64_t)(I->aslots[a].n_vals + 1));
      if (!v) continue;
      A.av[a] = (uint8_t)v;
      int ok = 0;
      for (int rep = 0; rep < 6 && !ok && tries < o->max_tries; rep++) {
        assign B = A;
        if (rep > 0) random_assign(r, &C->rs, &B, true);
        tries++;
        char m[256];
        draw_result d = rep == 0 ? try_agree(I, sp, &B, -1, &C->rs, m, sizeof m) : try_assign(I, &B, &C->rs, m, sizeof m);
        if (d == DRAW_NOMEM) {
          C->st = pcgc_error_set(C->err, PCGC_ERR_NOMEM, "out of memory checking rule '%s'", r->name);
          return found;
        }
        if (d != DRAW_NONE) {
          ok = 1;
          A = B;
        }
      }
      if (!ok) A.av[a] = 0;
      any |= ok;
    }
    if (!any) continue;
    tries++;
    if ((t = try_instance(C, &A, 0)) == TRY_STOP) return found;
    if (t == TRY_RAN) found++;
  }
  /* a value alone: at the base, at the sizes of earlier instances, on
   * redrawn sizes, every third try with the other open attributes redrawn
   * too (a padding needs a kernel above 1); it must show
   * (attr_visible: a swapped stride pair on a square plane does not). Draws
   * the sizes alone refuse cost no graph and count apart. */
  int alone = 0;
  int max_alone = 1 + cap / 4;
  for (int a = 0; a < I->n_aslots && found < cap && alone < max_alone; a++) {
    aslot *as = &I->aslots[a];
    for (int v = 1; v <= as->n_vals && found < cap && alone < max_alone && as->fails < 8 && tries < o->max_tries; v++) {
      if (as->covered & (1u << (v - 1))) continue;
      t = TRY_NONE;
      for (int rep = 0, real = 0; rep < 64 && real < 16 && tries < o->max_tries; rep++) {
        A = A0;
        if (rep > 0 && rep <= C->n_pool) A = C->pool[rep - 1]; /* sizes that made instances */
        else if (rep > 0) random_assign(r, &C->rs, &A, true);
        for (int b = 0; b < I->n_aslots && rep % 3 == 2; b++)
          A.av[b] = rng_next(&C->rs) % 2 ? 0 : (uint8_t)(1 + rng_next(&C->rs) % (uint64_t)I->aslots[b].n_vals);
        A.av[a] = (uint8_t)v;
        if (!sizes_pass(I, &A)) continue;
        if (rep == 0) { /* the base with the refused shapes made to agree */
          char m[256];
          tries++;
          try_agree(I, sp, &A, -1, &C->rs, m, sizeof m);
        }
        tries++;
        real++;
        C->want_visible = a;
        t = try_instance(C, &A, 0);
        C->want_visible = -1;
        if (t == TRY_STOP) return found;
        if (t == TRY_RAN) {
          found++;
          alone++;
          break;
        }
      }
      as->fails += t != TRY_RAN;
    }
  }
  scan_space(I, sp, &A0);
  make_candidates(r, sp, &A0, &C->rs);
  /* one slot at a time, the others at the base or, when that is no
   * instance, redrawn (shapes kept) */
  int j = -1, k = -1;
  while (found < cap && tries < o->max_tries && next_candidate(r, sp, &A0, &j, &k)) {
    slot *sl = &sp->slots[j];
    sl->tried[k] = true;
    for (int rep = 0, real = 0; rep < 32 && real < 4 && tries < o->max_tries; rep++) {
      A = A0;
      if (rep > 1) random_assign(r, &C->rs, &A, true);
      *slot_val(&A, sl) = sl->cand[k];
      if (rep == 1 && !repair(I, sp, &A, j)) continue; /* the base, moved toward the conditions */
      if (!sizes_pass(I, &A)) continue;                /* cheap: no graph */
      if (rep == 1 && sl->lo < 1) { /* an attribute's value: the refused shapes made to agree */
        char m[256];
        tries++;
        try_agree(I, sp, &A, j, &C->rs, m, sizeof m);
      }
      tries++;
      real++;
      if ((t = try_instance(C, &A, 0)) == TRY_STOP) return found;
      if (t == TRY_RAN) {
        found++;
        break;
      }
    }
  }
  /* seeded random combinations: each size from its candidates or the old set */
  while (found < cap && tries < o->max_tries) {
    tries++;
    A = A0;
    random_assign(r, &C->rs, &A, rng_next(&C->rs) % 2 == 0);
    for (int q = 0; q < sp->n_slots; q++) {
      slot *sl = &sp->slots[q];
      if (!slot_active(r, &A, sl) || sl->n_cands == 0 || rng_next(&C->rs) % 2) continue;
      *slot_val(&A, sl) = sl->cand[rng_next(&C->rs) % (uint64_t)sl->n_cands];
    }
    for (int a = 0; a < I->n_aslots; a++)
      A.av[a] = rng_next(&C->rs) % 2 ? 0 : (uint8_t)(1 + rng_next(&C->rs) % (uint64_t)I->aslots[a].n_vals);
    if ((t = try_instance(C, &A, CLS(PCGC_CHECK_MIXED))) == TRY_STOP) return found;
    if (t == TRY_RAN) found++;
  }
  return found;
}

pcgc_status pcgc_rule_check(const pcgc_rule *r, const pcgc_check_options *opt, pcgc_check_result *res,
                            pcgc_error *err) {
  pcgc_check_options o;
  if (opt) o = *opt;
  else pcgc_check_options_default(&o);
  if (o.instances < 1) o.instances = 1;
  memset(res, 0, sizeof *res);
  res->ok = true;
  inst *I = calloc(1, sizeof *I);
  space *sp = calloc(1, sizeof *sp);
  if (!I || !sp) {
    free(I);
    free(sp);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory checking rule '%s'", r->name);
  }
  I->r = r;
  I->env.rule = r;
  I->env.type_of = cb_type;
  I->env.attrs_of = cb_attrs;
  I->env.ctx = I;
  side_init(&I->m);
  side_init(&I->w);
  space_init(sp, r);
  attr_slots_init(I);
  checker C = {.I = I, .sp = sp, .o = &o, .res = res, .err = err, .st = PCGC_OK, .rs = 0x5eed ^ o.seed, .want_visible = -1};
  for (const char *c = r->name; *c; c++) C.rs = C.rs * 131 + (uint8_t)*c;
  int np = r->n_params, idx[PCGC_RULE_MAX_PARAMS] = {0}, len[PCGC_RULE_MAX_PARAMS];
  for (int p = 0; p < np; p++) len[p] = r->syms[p].kind == RS_DEGREE ? o.n_degrees : 4;
  /* two passes over the bindings: count the ones the parameter-only
   * conditions keep (to share the budget), then check them */
  int bindings = 0, found_any = 0;
  for (int pass = 0; pass < 2 && res->ok && C.st == PCGC_OK; pass++) {
    int cap = o.instances;
    if (pass == 1 && bindings > 0 && (o.budget + bindings - 1) / bindings > cap) cap = (o.budget + bindings - 1) / bindings;
    memset(idx, 0, sizeof idx);
    for (;;) {
      for (int p = 0; p < np; p++) {
        I->env.sym[p] = r->syms[p].kind == RS_DEGREE ? o.degrees[idx[p]] : idx[p];
        I->env.sym_set[p] = true;
      }
      bool keep = true;
      for (int c = 0; c < r->n_conds && keep; c++) {
        bool holds = true;
        if (r->conds[c].params_only && pcgc__rc_eval(&I->env, &r->conds[c], &holds) == RX_OK && !holds) keep = false;
      }
      if (keep && pass == 0) bindings++;
      if (keep && pass == 1) {
        int found = check_binding(&C, cap);
        found_any += found;
        res->bindings += found > 0;
      }
      if (!res->ok || C.st != PCGC_OK) break;
      int p = np - 1;
      while (p >= 0 && ++idx[p] == len[p]) idx[p--] = 0;
      if (p < 0) break;
    }
  }
  if (C.st == PCGC_OK && res->ok && found_any == 0) {
    res->ok = false;
    snprintf(res->message, sizeof res->message,
             "no instance found: in %d tries for each of %d parameter bindings no draw type-checked on the match side "
             "and met the conditions; give the inputs shapes, or check the conditions can hold",
             o.max_tries, bindings);
  }
  if (o.log && C.st == PCGC_OK) {
    char cls_text[256];
    pcgc_check_classes_format(cls_text, sizeof cls_text, res->classes);
    fprintf(o.log, "  %s: %d instances over %d bindings (budget %d), %d runs; classes: %s\n", r->name, res->instances,
            res->bindings, o.budget, res->executions, cls_text[0] ? cls_text : "none");
  }
  side_free(&I->m);
  side_free(&I->w);
  free(I);
  free(sp);
  return C.st;
}

typedef struct verify_job {
  const pcgc_ruleset *rs;
  const pcgc_check_options *o;
  pcgc_check_result *res;
  pcgc_status *st;
  pcgc_error *err;
} verify_job;

static void verify_one(void *ctx, int i, int worker) {
  (void)worker;
  verify_job *j = ctx;
  j->st[i] = pcgc_rule_check(pcgc_ruleset_rule(j->rs, i), j->o, &j->res[i], &j->err[i]);
}

pcgc_status pcgc_ruleset_verify(pcgc_ruleset *rs, const pcgc_check_options *o, bool allow_unsound, FILE *report,
                                int *n_unsound, int64_t *n_executions, pcgc_error *err) {
  pcgc_check_options def;
  if (!o) {
    pcgc_check_options_default(&def);
    o = &def;
  }
  int n = pcgc_ruleset_size(rs);
  /* every rule checked (on worker threads), then reported and removed in order */
  pcgc_check_result *res = n ? calloc((size_t)n, sizeof *res) : NULL;
  pcgc_status *sts = n ? calloc((size_t)n, sizeof *sts) : NULL;
  pcgc_error *errs = n ? calloc((size_t)n, sizeof *errs) : NULL;
  if (n && (!res || !sts || !errs)) {
    free(res);
    free(sts);
    free(errs);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory checking the rules");
  }
  verify_job j = {rs, o, res, sts, errs};
  int workers = o->log ? 1 : o->threads;
  /* the rules' instances are small: one kernel thread each, no BLAS threads
   * idling beside the workers */
  int kt = workers > 1 ? pcgc_cpu_set_threads(1) : 0;
  pcgc_parallel_run(n, workers, verify_one, &j);
  if (workers > 1) pcgc_cpu_set_threads(kt);
  pcgc_status st = PCGC_OK;
  for (int i = 0; i < n; i++)
    if (sts[i] != PCGC_OK) {
      if (err) *err = errs[i];
      st = sts[i];
      break;
    }
  int bad = 0;
  for (int i = 0; i < n && st == PCGC_OK; i++) {
    const pcgc_rule *r = pcgc_ruleset_rule(rs, i);
    if (n_executions) *n_executions += res[i].executions;
    if (report) {
      if (res[i].ok)
        fprintf(report, "ok       %-40s %3d instances, %4d runs  (%s:%d)\n", r->name, res[i].instances,
                res[i].executions, r->loc.file ? r->loc.file : "?", r->loc.line);
      else
        fprintf(report, "UNSOUND  %-40s (%s:%d)\n         %s\n", r->name, r->loc.file ? r->loc.file : "?",
                r->loc.line, res[i].message);
    }
    bad += !res[i].ok;
  }
  for (int i = n - 1; i >= 0 && st == PCGC_OK && !allow_unsound; i--) /* from the end: indices stay valid */
    if (!res[i].ok) pcgc_ruleset_remove(rs, i);
  free(res);
  free(sts);
  free(errs);
  if (st == PCGC_OK && n_unsound) *n_unsound = bad;
  return st;
}

const char *pcgc_rules_default_dir(void) {
  const char *env = getenv("PCGC_RULES_DIR");
  if (env && env[0]) return env;
#if defined(PCGC_SOURCE_DIR)
  return PCGC_SOURCE_DIR "/rules";
#else
  return "rules";
#endif
}
