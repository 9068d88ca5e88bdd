/*
 * expr.c — evaluating rule expressions and conditions, and computing a rule
 * node's attributes, against an rx_env (rules_internal.h). The matcher
 * evaluates against a graph occurrence, the checker against the graphs it
 * builds, instantiation against parameters alone: the environment's
 * callbacks supply tensor types and match-node attributes, and anything not
 * known yet is RX_UNBOUND rather than an error, so callers can resolve
 * constraints in any order.
 */
#include <stdio.h>
#include <string.h>

#include "rules_internal.h"

static const pcgc_ptensor *type_of(const rx_env *env, int32_t t) {
  return env->type_of ? env->type_of(env->ctx, t) : NULL;
}

static const pcgc_attrs *attrs_of(const rx_env *env, int32_t t) {
  return env->attrs_of ? env->attrs_of(env->ctx, t) : NULL;
}

/* The attributes whose value x->attr (schema order) an RX_ATTR/RX_ATTR_AT
 * expression reads, or NULL. */
static const pcgc_attrs *attr_source(const rx_env *env, const rx *x) {
  const pcgc_attrs *a = attrs_of(env, x->tensor);
  if (!a || x->attr < 0 || x->attr >= pcgc_op_num_attrs(a->kind)) return NULL;
  return a;
}

rx_result pcgc__rx_eval(const rx_env *env, int32_t e, int64_t *out) {
  const pcgc_rule *r = env->rule;
  if (e < 0 || e >= r->n_ex) return RX_UNDEFINED;
  const rx *x = &r->ex[e];
  int64_t a = 0, b = 0;
  rx_result ra = RX_OK, rb = RX_OK;
  switch (x->kind) {
  case RX_INT:
    *out = x->v;
    return RX_OK;
  case RX_SYM:
    if (x->sym < 0 || x->sym >= PCGC_RULE_MAX_SYMS || !env->sym_set[x->sym]) return RX_UNBOUND;
    *out = env->sym[x->sym];
    return RX_OK;
  case RX_ATTR: {
    const pcgc_attrs *at = attr_source(env, x);
    if (!at) return RX_UNBOUND;
    pcgc_attr_type ty = pcgc_op_attr(at->kind, x->attr)->type;
    if (ty == PCGC_ATTR_FLOAT) return RX_UNDEFINED; /* only copied whole, never computed with */
    if (ty == PCGC_ATTR_INTS || ty == PCGC_ATTR_INTS2) {
      /* a list used as a number: only when all its entries are equal */
      pcgc_ints l = pcgc_attrs_ints_at(at, x->attr);
      if (l.n < 1) return RX_UNDEFINED;
      for (int i = 1; i < l.n; i++)
        if (l.v[i] != l.v[0]) return RX_UNDEFINED;
      *out = l.v[0];
      return RX_OK;
    }
    *out = pcgc_attrs_int_at(at, x->attr);
    return RX_OK;
  }
  case RX_ATTR_AT: {
    const pcgc_attrs *at = attr_source(env, x);
    if (!at) return RX_UNBOUND;
    if ((ra = pcgc__rx_eval(env, x->a, &a)) != RX_OK) return ra;
    pcgc_ints l = pcgc_attrs_ints_at(at, x->attr);
    if (a < 0) a += l.n;
    if (a < 0 || a >= l.n) return RX_UNDEFINED;
    *out = l.v[a];
    return RX_OK;
  }
  case RX_RANK: {
    const pcgc_ptensor *t = type_of(env, x->tensor);
    if (!t) return RX_UNBOUND;
    *out = t->rank;
    return RX_OK;
  }
  case RX_SIZE: {
    const pcgc_ptensor *t = type_of(env, x->tensor);
    if ((ra = pcgc__rx_eval(env, x->a, &a)) != RX_OK) return ra;
    if (!t) return RX_UNBOUND;
    if (a < 0) a += t->rank;
    if (a < 0 || a >= t->rank) return RX_UNDEFINED;
    *out = t->dims[a];
    return RX_OK;
  }
  case RX_NEG:
    if ((ra = pcgc__rx_eval(env, x->a, &a)) != RX_OK) return ra;
    *out = -a;
    return RX_OK;
  default:
    break;
  }
  ra = pcgc__rx_eval(env, x->a, &a);
  rb = pcgc__rx_eval(env, x->b, &b);
  if (ra == RX_UNDEFINED || rb == RX_UNDEFINED) return RX_UNDEFINED;
  if (ra != RX_OK || rb != RX_OK) return RX_UNBOUND;
  switch (x->kind) {
  case RX_ADD: *out = (int64_t)((uint64_t)a + (uint64_t)b); return RX_OK;
  case RX_SUB: *out = (int64_t)((uint64_t)a - (uint64_t)b); return RX_OK;
  case RX_MUL: *out = (int64_t)((uint64_t)a * (uint64_t)b); return RX_OK;
  case RX_DIV:
  case RX_MOD:
    if (b == 0 || (a == INT64_MIN && b == -1)) return RX_UNDEFINED;
    *out = x->kind == RX_DIV ? a / b : a % b;
    return RX_OK;
  default:
    return RX_UNDEFINED;
  }
}

rx_result pcgc__rc_eval(const rx_env *env, const rcond *c, bool *holds) {
  int64_t a, b;
  rx_result ra = pcgc__rx_eval(env, c->a, &a), rb = pcgc__rx_eval(env, c->b, &b);
  if (ra == RX_UNDEFINED || rb == RX_UNDEFINED) {
    *holds = false;
    return RX_OK; /* a division by zero or an index out of range: false */
  }
  if (ra != RX_OK || rb != RX_OK) return RX_UNBOUND;
  switch (c->op) {
  case RC_EQ: *holds = a == b; break;
  case RC_NE: *holds = a != b; break;
  case RC_LT: *holds = a < b; break;
  case RC_LE: *holds = a <= b; break;
  case RC_GT: *holds = a > b; break;
  case RC_GE: *holds = a >= b; break;
  default: return RX_UNDEFINED;
  }
  return RX_OK;
}

bool pcgc__rx_is_sym(const pcgc_rule *r, int32_t e, int32_t *sym) {
  if (e < 0 || e >= r->n_ex || r->ex[e].kind != RX_SYM) return false;
  if (sym) *sym = r->ex[e].sym;
  return true;
}

/* ------------------------------------------------------------- format */

typedef struct sbuf {
  char *p;
  size_t n, used;
} sbuf;

static void put(sbuf *s, const char *fmt, const char *a, long long v) {
  if (s->used >= s->n) return;
  int w = a ? snprintf(s->p + s->used, s->n - s->used, fmt, a) : snprintf(s->p + s->used, s->n - s->used, fmt, v);
  if (w > 0) s->used += (size_t)w;
  if (s->used >= s->n) s->used = s->n - 1;
}

static int prec(rx_kind k) {
  switch (k) {
  case RX_ADD:
  case RX_SUB: return 1;
  case RX_MUL:
  case RX_DIV:
  case RX_MOD: return 2;
  default: return 3;
  }
}

static void fmt(const pcgc_rule *r, int32_t e, sbuf *s, int depth) {
  if (e < 0 || e >= r->n_ex || depth > 64) {
    put(s, "%s", "?", 0);
    return;
  }
  const rx *x = &r->ex[e];
  const char *tn = x->tensor >= 0 && x->tensor < r->n_tensors ? r->tensors[x->tensor].name : "?";
  switch (x->kind) {
  case RX_INT: put(s, "%lld", NULL, (long long)x->v); return;
  case RX_SYM: put(s, "%s", x->sym >= 0 && x->sym < r->n_syms ? r->syms[x->sym].name : "?", 0); return;
  case RX_ATTR:
  case RX_ATTR_AT: {
    const char *key = "?";
    int pn = x->tensor >= 0 && x->tensor < r->n_tensors ? r->tensors[x->tensor].node : -1;
    const rside *sd = x->tensor >= 0 && x->tensor < r->n_tensors && r->tensors[x->tensor].side ? &r->rewrite : &r->match;
    if (pn >= 0 && pn < sd->n_nodes && x->attr >= 0 && x->attr < pcgc_op_num_attrs(sd->nodes[pn].op))
      key = pcgc_op_attr(sd->nodes[pn].op, x->attr)->name;
    put(s, "%s.", tn, 0);
    put(s, "%s", key, 0);
    if (x->kind == RX_ATTR_AT) {
      put(s, "%s", "[", 0);
      fmt(r, x->a, s, depth + 1);
      put(s, "%s", "]", 0);
    }
    return;
  }
  case RX_RANK: put(s, "rank(%s)", tn, 0); return;
  case RX_SIZE:
    put(s, "size(%s, ", tn, 0);
    fmt(r, x->a, s, depth + 1);
    put(s, "%s", ")", 0);
    return;
  case RX_NEG:
    put(s, "%s", "-", 0);
    fmt(r, x->a, s, depth + 1);
    return;
  default: break;
  }
  static const char *ops[] = {[RX_ADD] = " + ", [RX_SUB] = " - ", [RX_MUL] = " * ", [RX_DIV] = " / ",
                              [RX_MOD] = " % "};
  bool pa = x->a >= 0 && x->a < r->n_ex && prec(r->ex[x->a].kind) < prec(x->kind);
  bool pb = x->b >= 0 && x->b < r->n_ex && prec(r->ex[x->b].kind) <= prec(x->kind) && prec(r->ex[x->b].kind) < 3;
  if (pa) put(s, "%s", "(", 0);
  fmt(r, x->a, s, depth + 1);
  if (pa) put(s, "%s", ")", 0);
  put(s, "%s", ops[x->kind], 0);
  if (pb) put(s, "%s", "(", 0);
  fmt(r, x->b, s, depth + 1);
  if (pb) put(s, "%s", ")", 0);
}

void pcgc__rx_format(const pcgc_rule *r, int32_t e, char *buf, size_t n) {
  if (!buf || !n) return;
  buf[0] = '\0';
  sbuf s = {buf, n, 0};
  fmt(r, e, &s, 0);
}

/* ---------------------------------------------------------- attributes */

static pcgc_status attr_error(const rx_env *env, const rnode *n, const rattr *at, const char *what,
                              pcgc_error *err) {
  pcgc_error_set(err, PCGC_ERR_INVALID, "rule '%s': %s '%s' of %s: %s", env->rule->name,
                 "attribute", pcgc_op_attr(n->op, at->attr)->name, pcgc_op_name(n->op), what);
  pcgc_error_at(err, at->loc, at->len, NULL, 0);
  return PCGC_ERR_INVALID;
}

pcgc_status pcgc__rnode_attrs(const rx_env *env, const rnode *n, pcgc_attrs *a, pcgc_error *err) {
  pcgc_status st = pcgc__rnode_attrs_partial(env, n, a, err);
  return st == PCGC_OK ? pcgc_attrs_check(a, err) : st;
}

pcgc_status pcgc__rnode_attrs_partial(const rx_env *env, const rnode *n, pcgc_attrs *a, pcgc_error *err) {
  pcgc_attrs_init(a, n->op);
  if (n->copy_from >= 0) {
    const pcgc_attrs *src = attrs_of(env, n->copy_from);
    if (!src || src->kind != n->op)
      return pcgc_error_set(err, PCGC_ERR_INVALID, "rule '%s': %s.* does not name a %s of the match",
                            env->rule->name, env->rule->tensors[n->copy_from].name, pcgc_op_name(n->op));
    *a = *src;
  }
  for (int i = 0; i < n->n_attrs; i++) {
    const rattr *at = &n->attrs[i];
    const pcgc_attr_desc *d = pcgc_op_attr(n->op, at->attr);
    if (!d) return attr_error(env, n, at, "no such attribute", err);
    pcgc_status st = PCGC_OK;
    int64_t v = 0, list[PCGC_MAX_RANK];
    switch (at->kind) {
    case RV_ENUM:
    case RV_BOOL:
      st = pcgc_attrs_set_int(a, d->name, at->ival);
      break;
    case RV_FLOAT:
      st = pcgc_attrs_set_float(a, d->name, at->f);
      break;
    case RV_LIST:
      for (int k = 0; k < at->n && k < PCGC_MAX_RANK; k++) {
        rx_result rr = pcgc__rx_eval(env, at->list[k], &list[k]);
        if (rr != RX_OK) return attr_error(env, n, at, rr == RX_UNBOUND ? "an element is not bound" : "an element is undefined", err);
      }
      st = pcgc_attrs_set_ints(a, d->name, at->n, list);
      break;
    case RV_EXPR: {
      const rx *x = at->expr >= 0 && at->expr < env->rule->n_ex ? &env->rule->ex[at->expr] : NULL;
      if (x && x->kind == RX_ATTR && (d->type == PCGC_ATTR_FLOAT || d->type == PCGC_ATTR_ENUM || d->type == PCGC_ATTR_BOOL ||
                                      d->type == PCGC_ATTR_INTS || d->type == PCGC_ATTR_INTS2)) {
        /* a whole-attribute copy: y.KEY */
        const pcgc_attrs *sa = attr_source(env, x);
        if (!sa) return attr_error(env, n, at, "the attribute it copies is not known", err);
        const pcgc_attr_desc *sd = pcgc_op_attr(sa->kind, x->attr);
        pcgc_ints sl = pcgc_attrs_ints_at(sa, x->attr);
        if (sd->type == PCGC_ATTR_FLOAT) st = pcgc_attrs_set_float(a, d->name, pcgc_attrs_float_at(sa, x->attr));
        else if (sd->type == PCGC_ATTR_INTS || sd->type == PCGC_ATTR_INTS2) st = pcgc_attrs_set_ints(a, d->name, sl.n, sl.v);
        else st = pcgc_attrs_set_int(a, d->name, pcgc_attrs_int_at(sa, x->attr));
        break;
      }
      rx_result rr = pcgc__rx_eval(env, at->expr, &v);
      if (rr != RX_OK) return attr_error(env, n, at, rr == RX_UNBOUND ? "its value is not bound" : "its value is undefined", err);
      if (d->type == PCGC_ATTR_INTS || d->type == PCGC_ATTR_INTS2) {
        int cnt = d->type == PCGC_ATTR_INTS2 ? 2 : 1;
        for (int k = 0; k < cnt; k++) list[k] = v;
        st = pcgc_attrs_set_ints(a, d->name, cnt, list);
      } else if (d->type == PCGC_ATTR_FLOAT) {
        st = pcgc_attrs_set_float(a, d->name, (double)v);
      } else {
        st = pcgc_attrs_set_int(a, d->name, v);
      }
      break;
    }
    }
    if (st != PCGC_OK) return attr_error(env, n, at, "the value does not fit the attribute", err);
  }
  return PCGC_OK;
}
