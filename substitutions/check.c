/*
 * check.c — soundness of a rule by execution (docs/rules.md, "Checks").
 *
 * For every binding of the rule's parameters (degrees from the options,
 * dims 0..3) the checker draws instances: values for the match variables
 * and ellipses, shapes for inputs the rule leaves unshaped, from small sets
 * (a deterministic generator, so a failure reproduces). A draw is an
 * instance when the match side, built as a graph, type-checks and every
 * condition holds. Inputs with parallel-type constraints are built from
 * sequential sources by parallel operators (a partial sum by a linear over
 * a partitioned contraction dim). The rewrite side is built on the same
 * inputs; it must type-check and give yields of the same types. Both run in
 * the reference interpreter in f64 on random nonzero small integers, forward
 * and then backward from random small-integer yield gradients, and every
 * yield and every source's gradient must agree (relative 1e-9).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "rules_internal.h"

#define MAX_SRC (3 * PCGC_RULE_MAX_INPUTS)

/* One instance being built: symbol values, and per side the graph and the
 * graph node of every rule tensor. */
typedef struct side_graph {
  pcgc_graph *g;
  pcgc_ref of[PCGC_RULE_MAX_TENSORS];   /* graph tensor of each rule tensor (this side + inputs) */
  int node_of[PCGC_RULE_MAX_NODES];     /* graph node of each rule node of this side */
} side_graph;

typedef struct inst {
  const pcgc_rule *r;
  rx_env env;
  int64_t ell[PCGC_RULE_MAX_SYMS][PCGC_MAX_RANK];  /* dims of each ellipsis */
  int ell_n[PCGC_RULE_MAX_SYMS];
  side_graph m, w;                      /* match, rewrite */
  side_graph *cur;                      /* what the env callbacks read */
  int n_src;                            /* sequential sources (inputs and helpers) */
  char src[MAX_SRC][64];
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
  /* match tensors are read from the match graph, whichever side is built */
  side_graph *sg = r->tensors[t].side == 0 ? &I->m : I->cur;
  if (!sg->g || sg->of[t].node < 0 || sg->of[t].node >= sg->g->n_nodes) return NULL;
  const pcgc_node *n = &sg->g->nodes[sg->of[t].node];
  return n->typed ? &n->out[sg->of[t].slot] : NULL;
}

static const pcgc_attrs *cb_attrs(void *ctx, int t) {
  inst *I = ctx;
  const pcgc_rule *r = I->r;
  if (t < 0 || t >= r->n_tensors || r->tensors[t].side != 0 || r->tensors[t].node < 0) return NULL;
  int gn = I->m.node_of[r->tensors[t].node];
  return I->m.g && gn >= 0 && gn < I->m.g->n_nodes ? &I->m.g->nodes[gn].attrs : NULL;
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

/* The sequential shape of match input i for this draw; false if it cannot
 * be computed (an expression undefined). */
static bool input_shape(inst *I, int i, uint64_t *rs, int *rank, int64_t *dims, bool draw) {
  const pcgc_rule *r = I->r;
  const rtype *ty = &r->tensors[r->inputs[i]].type;
  static const int64_t small[] = {1, 2, 3, 4, 6, 8};
  if (!ty->has_shape) {
    if (!draw) return true;
    *rank = 1 + (int)(rng_next(rs) % 4);
    for (int d = 0; d < *rank; d++) dims[d] = pick(rs, small, 6);
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
  const rtype *ty = &t->type;
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

/* Runs both sides on one seed; on a difference writes why into msg. */
static run_result run_seed(inst *I, uint64_t seed, char *msg, size_t msg_n) {
  const pcgc_rule *r = I->r;
  pcgc_ref_options o;
  pcgc_ref_options_default(&o);
  o.dtype = PCGC_F64;
  o.training = false;
  o.allow_no_loss = true;
  o.seed = seed;
  pcgc_error e1 = {0}, e2 = {0};
  pcgc_reference *A = pcgc_ref_new(I->m.g, &o, &e1), *B = A ? pcgc_ref_new(I->w.g, &o, &e2) : NULL;
  run_result res = RUN_AGREE;
  double *buf[3] = {NULL, NULL, NULL};
  if (!A || !B) {
    res = (A ? e2.status : e1.status) == PCGC_ERR_NOMEM ? RUN_NOMEM : RUN_SKIP;
    if (res == RUN_SKIP && A) {
      snprintf(msg, msg_n, "the rewrite side cannot run: %s", e2.message);
      res = RUN_DIFFER;
    }
    goto done;
  }
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
        int64_t v = (int64_t)(rng_next(&rs) % 8);
        buf[0][k] = (double)(v < 4 ? v - 4 : v - 3); /* -4..-1, 1..4: never 0 */
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
  pcgc_ref_free(A);
  pcgc_ref_free(B);
  return res;
}

void pcgc_check_options_default(pcgc_check_options *o) {
  memset(o, 0, sizeof *o);
  o->seeds = 3;
  o->instances = 3;
  o->degrees[0] = 1;
  o->degrees[1] = 2;
  o->degrees[2] = 4;
  o->n_degrees = 3;
  o->max_tries = 400;
}

typedef enum draw_result { DRAW_NONE, DRAW_OK, DRAW_FAIL, DRAW_NOMEM } draw_result;

/* One draw: values for the variables, both graphs built. DRAW_NONE when
 * the draw is not an instance; DRAW_FAIL (message in msg) when it is and the
 * rewrite side is wrong. */
static draw_result draw(inst *I, uint64_t *rs, char *msg, size_t msg_n) {
  const pcgc_rule *r = I->r;
  static const int64_t sizes[] = {1, 2, 3, 4, 6, 8, 12}, small_dims[] = {1, 2, 3, 4};
  for (int s = r->n_params; s < r->n_syms; s++) {
    if (r->syms[s].kind == RS_ELLIPSIS) {
      I->ell_n[s] = (int)(rng_next(rs) % 3);
      for (int k = 0; k < I->ell_n[s]; k++) I->ell[s][k] = pick(rs, small_dims, 4);
    } else {
      I->env.sym[s] = pick(rs, sizes, 7);
      if (rng_next(rs) % 4 == 0) I->env.sym[s] = (int64_t)(rng_next(rs) % 4); /* small ones for axes */
    }
    I->env.sym_set[s] = true;
  }
  side_free(&I->m);
  side_free(&I->w);
  I->n_src = 0;
  if (!(I->m.g = pcgc_graph_new()) || !(I->w.g = pcgc_graph_new())) return DRAW_NOMEM;
  int rank[PCGC_RULE_MAX_INPUTS];
  int64_t dims[PCGC_RULE_MAX_INPUTS][PCGC_MAX_RANK];
  for (int i = 0; i < r->n_inputs; i++) {
    if (!input_shape(I, i, rs, &rank[i], dims[i], true)) return DRAW_NONE;
    pcgc_dtype dt = input_dtype(&r->tensors[r->inputs[i]].type);
    if (!build_input(I, &I->m, i, rank[i], dims[i], dt)) return DRAW_NONE;
  }
  pcgc_error err = {0};
  if (!build_side(I, &I->m, &r->match, 0, rs, &err)) return DRAW_NONE;
  if (pcgc_graph_infer(I->m.g, &err) != PCGC_OK) return DRAW_NONE;
  I->cur = &I->m;
  for (int c = 0; c < r->n_conds; c++) {
    bool holds = false;
    if (pcgc__rc_eval(&I->env, &r->conds[c], &holds) != RX_OK || !holds) return DRAW_NONE;
  }
  /* the rewrite, on the same inputs */
  int n_src = I->n_src;
  for (int i = 0; i < r->n_inputs; i++) {
    pcgc_dtype dt = input_dtype(&r->tensors[r->inputs[i]].type);
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

pcgc_status pcgc_rule_check(const pcgc_rule *r, const pcgc_check_options *opt, pcgc_check_result *res,
                            pcgc_error *err) {
  pcgc_check_options o;
  if (opt) o = *opt;
  else pcgc_check_options_default(&o);
  memset(res, 0, sizeof *res);
  res->ok = true;
  inst *I = calloc(1, sizeof *I);
  if (!I) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory checking rule '%s'", r->name);
  I->r = r;
  I->env.rule = r;
  I->env.type_of = cb_type;
  I->env.attrs_of = cb_attrs;
  I->env.ctx = I;
  side_init(&I->m);
  side_init(&I->w);
  pcgc_status st = PCGC_OK;
  int np = r->n_params, idx[PCGC_RULE_MAX_PARAMS] = {0}, len[PCGC_RULE_MAX_PARAMS];
  for (int p = 0; p < np; p++) len[p] = r->syms[p].kind == RS_DEGREE ? o.n_degrees : 4;
  int bindings = 0, found_any = 0;
  uint64_t rs = 0x5eed;
  for (const char *c = r->name; *c; c++) rs = rs * 131 + (uint8_t)*c;
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
    if (keep) {
      bindings++;
      int found = 0;
      uint64_t seen[64];
      int n_seen = 0;
      for (int t = 0; t < o.max_tries && found < o.instances && res->ok; t++) {
        char msg[sizeof res->message];
        draw_result d = draw(I, &rs, msg, sizeof msg);
        if (d == DRAW_NOMEM) {
          st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory checking rule '%s'", r->name);
          break;
        }
        if (d == DRAW_FAIL) {
          res->ok = false;
          snprintf(res->message, sizeof res->message, "%s", msg);
          break;
        }
        if (d != DRAW_OK) continue;
        /* a new instance? (same symbol values and input shapes = same instance) */
        uint64_t h = 1469598103934665603ull;
        for (int s = 0; s < r->n_syms; s++) {
          h = (h ^ (uint64_t)I->env.sym[s]) * 1099511628211ull;
          for (int k = 0; k < I->ell_n[s]; k++) h = (h ^ (uint64_t)I->ell[s][k]) * 1099511628211ull;
        }
        for (int s = 0; s < I->n_src; s++) {
          const pcgc_ptensor *tt = &I->m.g->nodes[pcgc_graph_find(I->m.g, I->src[s])].out[0];
          for (int k = 0; k < tt->rank; k++) h = (h ^ (uint64_t)tt->dims[k]) * 1099511628211ull;
        }
        bool dup = false;
        for (int k = 0; k < n_seen; k++) dup |= seen[k] == h;
        if (dup) continue;
        if (n_seen < 64) seen[n_seen++] = h;
        found++;
        res->instances++;
        char inst_text[512];
        describe(I, inst_text, sizeof inst_text);
        int ran = 0;
        (void)msg;
        for (int s = 1; ran < o.seeds && s <= 4 * o.seeds && res->ok; s++) {
          char rmsg[1400];
          run_result rr = run_seed(I, (uint64_t)s, rmsg, sizeof rmsg);
          if (rr == RUN_NOMEM) {
            st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory checking rule '%s'", r->name);
            break;
          }
          if (rr == RUN_SKIP) continue;
          ran++;
          res->executions++;
          if (rr == RUN_DIFFER) {
            res->ok = false;
            snprintf(res->message, sizeof res->message, "instance %s: %.1400s", inst_text, rmsg);
          }
        }
        if (o.log) fprintf(o.log, "  %s: instance %s: %d seeds %s\n", r->name, inst_text, ran, res->ok ? "agree" : "DIFFER");
        if (st != PCGC_OK) break;
        if (ran == 0 && res->ok) { /* the match side never ran (it overflows): not an instance after all */
          found--;
          res->instances--;
        }
      }
      found_any += found;
    }
    if (!res->ok || st != PCGC_OK) break;
    int p = np - 1;
    while (p >= 0 && ++idx[p] == len[p]) idx[p--] = 0;
    if (p < 0) break;
  }
  if (st == PCGC_OK && res->ok && found_any == 0) {
    res->ok = false;
    snprintf(res->message, sizeof res->message,
             "no instance found: in %d tries for each of %d parameter bindings no draw type-checked on the match side "
             "and met the conditions; give the inputs shapes, or check the conditions can hold",
             o.max_tries, bindings);
  }
  side_free(&I->m);
  side_free(&I->w);
  free(I);
  return st;
}

pcgc_status pcgc_ruleset_verify(pcgc_ruleset *rs, const pcgc_check_options *o, bool allow_unsound, FILE *report,
                                int *n_unsound, int64_t *n_executions, pcgc_error *err) {
  int bad = 0;
  for (int i = 0; i < pcgc_ruleset_size(rs);) {
    const pcgc_rule *r = pcgc_ruleset_rule(rs, i);
    pcgc_check_result res;
    pcgc_status st = pcgc_rule_check(r, o, &res, err);
    if (st != PCGC_OK) return st;
    if (n_executions) *n_executions += res.executions;
    if (report) {
      if (res.ok)
        fprintf(report, "ok       %-40s %3d instances, %4d runs  (%s:%d)\n", r->name, res.instances, res.executions,
                r->loc.file ? r->loc.file : "?", r->loc.line);
      else
        fprintf(report, "UNSOUND  %-40s (%s:%d)\n         %s\n", r->name, r->loc.file ? r->loc.file : "?", r->loc.line,
                res.message);
    }
    if (!res.ok) {
      bad++;
      if (!allow_unsound) {
        pcgc_ruleset_remove(rs, i);
        continue;
      }
    }
    i++;
  }
  if (n_unsound) *n_unsound = bad;
  return PCGC_OK;
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
