/*
 * rules_parse.c — recursive-descent parser of rule files: tokens from
 * rules_lex.c in, struct pcgc_rule (rules_internal.h) out, one function per
 * rule of the grammar in docs/rules.md.
 *
 * Names are resolved while reading, since what a name means depends on what
 * came before it: in the match, a name that is neither a parameter nor known
 * becomes a new variable (RS_VAR) where it first occurs; in `where` and the
 * rewrite it must already be bound. Operators, attribute keys and value types
 * come from the op table (pcg/ops.def), so arity and attribute types are
 * checked here; name, node, match and rule checks are in rules_validate.c.
 *
 * Expression nesting and height are bounded (PCGC__RULES_MAX_DEPTH) so that
 * nothing that walks an expression can exhaust the stack. The first error
 * stops the parse.
 */
#define _POSIX_C_SOURCE 200809L /* strndup */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "rules_parse.h"

typedef pcgc__rparser parser;

/* The value names of every enum (act, pool, bag, ...), for type errors. */
static bool is_enum_word(const char *s) {
  for (int e = 1; e < PCGC_ENUM_COUNT; e++)
    if (pcgc_enum_value_from_name((pcgc_enum_type)e, s) >= 0) return true;
  return false;
}

/* --------------------------------------------------------- expressions */

static pcgc_status new_rx(parser *P, rx_kind kind, const pcgc__rtok *t, int32_t *out) {
  pcgc_rule *r = P->r;
  if (r->n_ex >= PCGC__RULES_MAX_EXPRS) {
    FAIL(P, t, "rule '%s' has too many expressions (at most %d)", r->name, PCGC__RULES_MAX_EXPRS);
    return pcgc__rp_hint(P, "split the rule");
  }
  int32_t e = pcgc__rx_new(r, kind);
  if (e < 0) return pcgc__rp_oom(P);
  if (r->n_ex > P->cap_ex) {
    int cap = P->cap_ex ? P->cap_ex * 2 : 64;
    while (cap < r->n_ex) cap *= 2;
    int *h = realloc(P->height, (size_t)cap * sizeof *h);
    if (!h) return pcgc__rp_oom(P);
    P->height = h;
    P->cap_ex = cap;
  }
  P->height[e] = 1;
  *out = e;
  return PCGC_OK;
}

/* The where block's expressions by content (open addressing; a rule holds
 * at most PCGC__RULES_MAX_EXPRS, so never more than half full). */
#define SAME_CAP (2 * PCGC__RULES_MAX_EXPRS)
_Static_assert(PCGC__RULES_MAX_EXPRS < (1 << 16), "an index fits below the generation");

/* Starts (on) or ends sharing expressions within one where block. */
static pcgc_status same_scope(parser *P, bool on) {
  P->same_on = false;
  if (!on) return PCGC_OK;
  if (!P->same && !(P->same = calloc(SAME_CAP, sizeof *P->same))) return pcgc__rp_oom(P);
  if (++P->same_gen == 1u << 16) { /* every stamp used: start over */
    memset(P->same, 0, SAME_CAP * sizeof *P->same);
    P->same_gen = 1;
  }
  P->same_on = true;
  return PCGC_OK;
}

/* In a where block, an expression just completed (the newest of the rule)
 * that equals one made before in the block is dropped for it: `N*M+N*M+...`
 * kept one expression a byte of its text (issue 17). Only conditions share, so no
 * expression of a shape or an attribute is ever shared, and what reads a
 * condition walks its tree (params_only, the checker's expr_has_div), not a
 * range of indices. Expressions are values (nothing writes one once made),
 * so evaluating a shared one gives the same. */
static pcgc_status intern_rx(parser *P, int32_t *e) {
  pcgc_rule *r = P->r;
  if (!P->same_on || *e != r->n_ex - 1) return PCGC_OK;
  const rx *x = &r->ex[*e];
  uint32_t i = (uint32_t)XXH3_64bits(x, sizeof *x) & (SAME_CAP - 1);
  for (; P->same[i] >> 16 == P->same_gen; i = (i + 1) & (SAME_CAP - 1)) {
    int32_t o = (int32_t)(P->same[i] & 0xFFFF) - 1;
    if (memcmp(&r->ex[o], x, sizeof *x) == 0) {
      *e = o;
      r->n_ex--;
      return PCGC_OK;
    }
  }
  P->same[i] = P->same_gen << 16 | (uint32_t)(*e + 1);
  return PCGC_OK;
}

/* Sets the tree height of e (t: where to report a tree too high). */
static pcgc_status set_height(parser *P, int32_t e, int h, const pcgc__rtok *t) {
  P->height[e] = h;
  if (h <= PCGC__RULES_MAX_DEPTH) return PCGC_OK;
  FAIL(P, t, "expression is too long (more than %d operators deep)", PCGC__RULES_MAX_DEPTH);
  return pcgc__rp_hint(P, "simplify the expression");
}

_Static_assert(sizeof(rx) <= 8, "rule expressions stay small (issue 17)");
_Static_assert(PCGC__RULES_MAX_EXPRS <= (1 << 12), "operands are 13-bit signed indices (rx.a, rx.b)");

static pcgc_status parse_expr(parser *P, int32_t *out);

/* NAME "." KEY [ "[" expr "]" ] in an integer expression. */
static pcgc_status parse_attr_ref(parser *P, int32_t *out) {
  const pcgc__rtok *t = peek(P);
  int32_t tensor;
  pcgc_status s = pcgc__rp_ref_tensor(P, t, 'c', &tensor);
  if (s) return s;
  advance(P);
  advance(P); /* '.' */
  const pcgc__rtok *k = peek(P);
  if (k->kind != PCGC__RT_NAME)
    return pcgc__rp_expected(P, "an attribute name after '.'", "write NAME.KEY, e.g. y.axis");
  const rnode *nd = &P->r->match.nodes[P->r->tensors[tensor].node];
  const char *key = TOKSTR(P, k);
  int a = pcgc_op_attr_index(nd->op, key);
  if (a < 0) {
    FAIL(P, k, "'%s' is computed by %s, which has no attribute '%s'", P->r->tensors[tensor].name, pcgc_op_name(nd->op),
         key);
    return pcgc__rp_attr_key_hint(P, nd->op, key);
  }
  advance(P);
  const pcgc_attr_desc *d = pcgc_op_attr(nd->op, a);
  /* a list without an index is a number when its entries are equal, or
   * (as a whole attribute value) a copy of the list */
  bool list = d->type == PCGC_ATTR_INTS || d->type == PCGC_ATTR_INTS2;
  bool at = list && is_p(peek(P), '[');
  int32_t e;
  if ((s = new_rx(P, at ? RX_ATTR_AT : RX_ATTR, t, &e))) return s;
  P->r->ex[e].tensor = tensor;
  P->r->ex[e].attr = a;
  if (d->type == PCGC_ATTR_FLOAT) {
    FAIL(P, k, "'%s' is a float attribute; it can only be copied whole into a float attribute", key);
    return pcgc__rp_hint(P, "expressions are integers: write scalar=%s.%s on its own", P->r->tensors[tensor].name, key);
  }
  if (at) {
    if ((s = pcgc__rp_open(P, NULL))) return s;
    int32_t idx;
    if ((s = parse_expr(P, &idx))) return s;
    if (!is_p(peek(P), ']')) return pcgc__rp_expected(P, "']'", "an index is written y.KEY[i]");
    pcgc__rp_close(P);
    P->r->ex[e].a = (int16_t)idx;
    if ((s = set_height(P, e, P->height[idx] + 1, t))) return s;
  } else if (!list && is_p(peek(P), '[')) {
    FAIL(P, peek(P), "attribute '%s' of %s is not a list", key, pcgc_op_name(nd->op));
    return pcgc__rp_hint(P, "only ints attributes (stride, sizes, perm, ...) take an index");
  }
  *out = e;
  return PCGC_OK;
}

/* "rank" "(" NAME ")" | "size" "(" NAME "," expr ")" */
static pcgc_status parse_rank_size(parser *P, int32_t *out) {
  const pcgc__rtok *t = advance(P);
  bool size = is_kw(P, t, "size");
  if (!is_p(peek(P), '('))
    return pcgc__rp_expected(P, size ? "'(' after 'size'" : "'(' after 'rank'",
                             size ? "size(x, k) is dim k of tensor x" : "rank(x) is the rank of tensor x");
  pcgc_status s = pcgc__rp_open(P, NULL);
  int32_t e, tensor;
  if (s || (s = pcgc__rp_ref_tensor(P, peek(P), 's', &tensor))) return s;
  advance(P);
  if ((s = new_rx(P, size ? RX_SIZE : RX_RANK, t, &e))) return s;
  P->r->ex[e].tensor = tensor;
  if (size) {
    if ((s = pcgc__rp_expect_p(P, ',', "',' after the tensor of size()", "size(x, k) is dim k of tensor x"))) return s;
    int32_t k;
    if ((s = parse_expr(P, &k))) return s;
    P->r->ex[e].a = (int16_t)k;
    if ((s = set_height(P, e, P->height[k] + 1, t))) return s;
  }
  if (!is_p(peek(P), ')'))
    return pcgc__rp_expected(P, "')'", size ? "size(x, k) is dim k of tensor x" : "rank(x) is the rank of tensor x");
  pcgc__rp_close(P);
  *out = e;
  return PCGC_OK;
}

/* A bare name in an expression: a symbol; in the match a new variable. */
static pcgc_status parse_name(parser *P, int32_t *out) {
  const pcgc__rtok *t = peek(P);
  const char *s = TOKSTR(P, t);
  pcgc_status st;
  if (is_under(P, t)) {
    FAIL(P, t, "'_' cannot appear in an expression");
    return pcgc__rp_hint(P, "'_' only ignores an output of a node; name a dim to leave it free: [B, N]");
  }
  int32_t y = pcgc__rp_find_sym(P->r, s);
  if (y >= 0 && P->r->syms[y].kind == RS_ELLIPSIS) {
    FAIL(P, t, "'%s' stands for a list of dims ('...%s'), not a number", s, s);
    return pcgc__rp_hint(P, "name the dims you need: [B, ...R, N]");
  }
  if (y < 0) {
    int k = pcgc__rp_find_tensor(P->r, s);
    if (k >= 0) {
      FAIL(P, t, "'%s' is a tensor, not a number", s);
      return pcgc__rp_hint(P, "use size(%s, k), rank(%s) or %s.KEY for numbers about it", s, s, s);
    }
    if (P->side != SIDE_MATCH) {
      FAIL(P, t, "'%s' is not bound", s);
      const char *best = pcgc__rp_suggest_name(P, s, false, true);
      if (best) return pcgc__rp_hint(P, "did you mean '%s'?", best);
      return pcgc__rp_hint(P, "a name in %s must be a parameter or a variable bound by the match",
                           P->side == SIDE_WHERE ? "'where'" : "the rewrite");
    }
    if ((st = pcgc__rp_add_sym(P, t, RS_VAR, &y))) return st;
  }
  int32_t e;
  if ((st = new_rx(P, RX_SYM, t, &e))) return st;
  P->r->ex[e].sym = y;
  advance(P);
  *out = e;
  return intern_rx(P, out);
}

/* atom = INT | NAME | NAME "." KEY [ "[" expr "]" ] | rank(...) | size(...) | "(" expr ")" */
static pcgc_status parse_atom(parser *P, int32_t *out) {
  const pcgc__rtok *t = peek(P);
  pcgc_status s;
  if (t->kind == PCGC__RT_INT) {
    if (t->i > INT32_MAX) {
      FAIL(P, t, "integer %lld is too large for an expression (at most %d)", (long long)t->i, INT32_MAX);
      return pcgc__rp_hint(P, "rule expressions compute sizes, dims and degrees; no constant is that large");
    }
    if ((s = new_rx(P, RX_INT, t, out))) return s;
    P->r->ex[*out].v = (int32_t)t->i;
    advance(P);
    return intern_rx(P, out);
  }
  if (t->kind == PCGC__RT_FLOAT) {
    FAIL(P, t, "a float cannot appear in an expression");
    return pcgc__rp_hint(P, "expressions are integers; floats are values of float attributes: scalar=0.5");
  }
  if (is_p(t, '(')) {
    if (++P->depth > PCGC__RULES_MAX_DEPTH) {
      FAIL(P, t, "expression is nested too deeply (more than %d levels)", PCGC__RULES_MAX_DEPTH);
      return pcgc__rp_hint(P, "simplify the expression");
    }
    if ((s = pcgc__rp_open(P, NULL)) || (s = parse_expr(P, out))) return s;
    if (!is_p(peek(P), ')')) return pcgc__rp_expected(P, "')'", "check the parentheses");
    pcgc__rp_close(P);
    P->depth--;
    return PCGC_OK;
  }
  if (is_kw(P, t, "rank") || is_kw(P, t, "size")) return parse_rank_size(P, out);
  if (t->kind == PCGC__RT_NAME && is_keyword(P, t)) {
    FAIL(P, t, "keyword '%.*s' cannot appear in an expression", t->sp.len, text(P, t));
    if (is_kw(P, t, "true") || is_kw(P, t, "false"))
      return pcgc__rp_hint(P, "true and false are values of bool attributes: causal=true");
    return pcgc__rp_hint(P, "rename the parameter or variable");
  }
  if (t->kind == PCGC__RT_NAME && is_p(peek2(P), '.')) return parse_attr_ref(P, out);
  if (t->kind == PCGC__RT_NAME && is_p(peek2(P), '(')) {
    FAIL(P, t, "'%.*s' is not a function", t->sp.len, text(P, t));
    return pcgc__rp_hint(P, "the functions are rank(x) and size(x, k)");
  }
  if (t->kind == PCGC__RT_NAME) return parse_name(P, out);
  return pcgc__rp_expected(P, "an expression",
                           "an expression is built from integers, names, y.KEY, rank(x), size(x, k), "
                           "+ - * / %% and parentheses");
}

/* unary = "-" unary | atom */
static pcgc_status parse_unary(parser *P, int32_t *out) {
  const pcgc__rtok *t = peek(P);
  if (!is_p(t, '-')) return parse_atom(P, out);
  if (++P->depth > PCGC__RULES_MAX_DEPTH) {
    FAIL(P, t, "expression is nested too deeply (more than %d levels)", PCGC__RULES_MAX_DEPTH);
    return pcgc__rp_hint(P, "simplify the expression");
  }
  advance(P);
  int32_t a, e;
  pcgc_status s = parse_unary(P, &a);
  if (s || (s = new_rx(P, RX_NEG, t, &e))) return s;
  P->depth--;
  P->r->ex[e].a = (int16_t)a;
  if ((s = set_height(P, e, P->height[a] + 1, t))) return s;
  *out = e;
  return intern_rx(P, out);
}

static pcgc_status make_bin(parser *P, const pcgc__rtok *op, int32_t l, int32_t r, int32_t *out) {
  rx_kind k = op->p == '+' ? RX_ADD : op->p == '-' ? RX_SUB : op->p == '*' ? RX_MUL : op->p == '/' ? RX_DIV : RX_MOD;
  int32_t e;
  pcgc_status s = new_rx(P, k, op, &e);
  if (s) return s;
  rx *x = &P->r->ex[e];
  x->a = (int16_t)l;
  x->b = (int16_t)r;
  if ((s = set_height(P, e, (P->height[l] > P->height[r] ? P->height[l] : P->height[r]) + 1, op))) return s;
  *out = e;
  return intern_rx(P, out);
}

/* term = unary { ("*" | "/" | "%") unary } */
static pcgc_status parse_term(parser *P, int32_t *out) {
  pcgc_status s = parse_unary(P, out);
  while (s == PCGC_OK && (is_p(peek(P), '*') || is_p(peek(P), '/') || is_p(peek(P), '%'))) {
    const pcgc__rtok *op = advance(P);
    int32_t r;
    if ((s = parse_unary(P, &r)) == PCGC_OK) s = make_bin(P, op, *out, r, out);
  }
  return s;
}

/* expr = term { ("+" | "-") term } */
static pcgc_status parse_expr(parser *P, int32_t *out) {
  pcgc_status s = parse_term(P, out);
  while (s == PCGC_OK && (is_p(peek(P), '+') || is_p(peek(P), '-'))) {
    const pcgc__rtok *op = advance(P);
    int32_t r;
    if ((s = parse_term(P, &r)) == PCGC_OK) s = make_bin(P, op, *out, r, out);
  }
  return s;
}

/* An expression that starts a whole value: refuses bools, floats and enum
 * words first, with a message about the attribute's type. */
static pcgc_status parse_int_value(parser *P, const char *op, const pcgc_attr_desc *d, int32_t *out) {
  const pcgc__rtok *t = peek(P);
  const char *what = d->type == PCGC_ATTR_INT ? "an integer" : "integers";
  if (is_kw(P, t, "true") || is_kw(P, t, "false") || t->kind == PCGC__RT_FLOAT ||
      (is_p(t, '-') && peek2(P)->kind == PCGC__RT_FLOAT)) {
    FAIL(P, t, "attribute '%s' of %s takes %s, not %s", d->name, op, what, DESC(t));
    return pcgc__rp_hint(P, "write %s=2 or an integer expression", d->name);
  }
  if (is_name(P, t) && !is_p(peek2(P), '.') && !is_p(peek2(P), '(') && pcgc__rp_find_sym(P->r, TOKSTR(P, t)) < 0 &&
      pcgc__rp_find_tensor(P->r, TOKSTR(P, t)) < 0 && is_enum_word(TOKSTR(P, t))) {
    FAIL(P, t, "attribute '%s' of %s takes %s, not '%s'", d->name, op, what, TOKSTR(P, t));
    return pcgc__rp_hint(P, "'%s' is a value of an enum attribute such as act or kind", TOKSTR(P, t));
  }
  return parse_expr(P, out);
}

/* ------------------------------------------------------------- nodes */

/* NAME "." KEY standing alone as the value of an enum, bool or float
 * attribute: a copy of the same-typed attribute of a match node. */
static pcgc_status parse_copy_value(parser *P, const char *op, const pcgc_attr_desc *d, int32_t *out) {
  const pcgc__rtok *t = peek(P);
  int32_t tensor;
  pcgc_status s = pcgc__rp_ref_tensor(P, t, 'c', &tensor);
  if (s) return s;
  advance(P);
  advance(P); /* '.' */
  const pcgc__rtok *k = peek(P);
  if (k->kind != PCGC__RT_NAME)
    return pcgc__rp_expected(P, "an attribute name after '.'", "write NAME.KEY, e.g. y.act");
  pcgc_op_kind src_op = P->r->match.nodes[P->r->tensors[tensor].node].op;
  int a = pcgc_op_attr_index(src_op, TOKSTR(P, k));
  if (a < 0) {
    FAIL(P, k, "'%s' is computed by %s, which has no attribute '%s'", P->r->tensors[tensor].name, pcgc_op_name(src_op),
         TOKSTR(P, k));
    return pcgc__rp_attr_key_hint(P, src_op, TOKSTR(P, k));
  }
  const pcgc_attr_desc *sd = pcgc_op_attr(src_op, a);
  if (sd->type != d->type || sd->enum_type != d->enum_type) {
    FAIL(P, k, "attribute '%s' of %s cannot take '%s' of %s: their types differ", d->name, op, sd->name,
         pcgc_op_name(src_op));
    return pcgc__rp_hint(P, "an enum, bool or float attribute copies an attribute of the same type");
  }
  advance(P);
  if ((s = new_rx(P, RX_ATTR, t, out))) return s;
  P->r->ex[*out].tensor = tensor;
  P->r->ex[*out].attr = a;
  if (!is_p(peek(P), ',') && !is_p(peek(P), ')')) {
    FAIL(P, peek(P), "a copied %s attribute stands alone; found %s after it",
         d->type == PCGC_ATTR_FLOAT  ? "float"
         : d->type == PCGC_ATTR_BOOL ? "bool"
                                     : "enum",
         DESC(peek(P)));
    return pcgc__rp_hint(P, "write %s=%s.%s, or a literal value", d->name, P->r->tensors[tensor].name, sd->name);
  }
  return PCGC_OK;
}

/* KEY "=" value, for attribute d of op. */
static pcgc_status parse_attr_value(parser *P, pcgc_op_kind opk, const pcgc_attr_desc *d, rattr *ra) {
  const char *op = pcgc_op_name(opk);
  const pcgc__rtok *t = peek(P);
  bool copy = is_name(P, t) && is_p(peek2(P), '.');
  pcgc_status s;
  switch (d->type) {
  case PCGC_ATTR_INT:
  case PCGC_ATTR_INTS:
  case PCGC_ATTR_INTS2:
    if (!is_p(t, '[')) {
      ra->kind = RV_EXPR;
      return parse_int_value(P, op, d, &ra->expr);
    }
    if (d->type == PCGC_ATTR_INT) {
      FAIL(P, t, "attribute '%s' of %s takes one integer, not a list", d->name, op);
      return pcgc__rp_hint(P, "write %s=1", d->name);
    }
    ra->kind = RV_LIST;
    if ((s = pcgc__rp_open(P, NULL))) return s;
    while (!is_p(peek(P), ']')) {
      if (ra->n == PCGC_MAX_RANK) {
        FAIL(P, peek(P), "too many entries in '%s' (at most %d in a rule)", d->name, PCGC_MAX_RANK);
        return pcgc__rp_hint(P, "tensors have at most %d dims", PCGC_MAX_RANK);
      }
      if ((s = parse_int_value(P, op, d, &ra->list[ra->n++]))) return s;
      if (is_p(peek(P), ','))
        advance(P);
      else if (!is_p(peek(P), ']'))
        return pcgc__rp_expected(P, "',' or ']'", "separate the entries with ','");
    }
    if (d->type == PCGC_ATTR_INTS2 && ra->n != 2) {
      FAIL(P, peek(P), "attribute '%s' of %s takes 2 values, not %d", d->name, op, ra->n);
      return pcgc__rp_hint(P, "write %s=[a, b], or %s=a for both", d->name, d->name);
    }
    pcgc__rp_close(P);
    return PCGC_OK;
  case PCGC_ATTR_BOOL:
    if (copy) {
      ra->kind = RV_EXPR;
      return parse_copy_value(P, op, d, &ra->expr);
    }
    if (is_name(P, t) && !is_under(P, t) && !is_p(peek2(P), '(')) {
      /* a variable (0 or 1): bound here in the match, read in the rewrite */
      pcgc__suggest sg;
      pcgc__suggest_init(&sg, TOKSTR(P, t));
      pcgc__suggest_add(&sg, "true");
      pcgc__suggest_add(&sg, "false");
      if (pcgc__suggest_best(&sg) && pcgc__rp_find_sym(P->r, TOKSTR(P, t)) < 0) {
        FAIL(P, t, "attribute '%s' of %s takes true or false, not '%s'", d->name, op, TOKSTR(P, t));
        return pcgc__rp_hint(P, "did you mean '%s'?", pcgc__suggest_best(&sg));
      }
      ra->kind = RV_EXPR;
      s = parse_name(P, &ra->expr);
      if (s == PCGC_OK && !is_p(peek(P), ',') && !is_p(peek(P), ')')) {
        FAIL(P, peek(P), "a bool attribute takes true, false, a variable or a copy; found %s", DESC(peek(P)));
        return pcgc__rp_hint(P, "bool values are not computed: write %s=%s on its own", d->name, TOKSTR(P, t));
      }
      return s;
    }
    if (!is_kw(P, t, "true") && !is_kw(P, t, "false")) {
      FAIL(P, t, "attribute '%s' of %s takes true or false, not %s", d->name, op, DESC(t));
      return pcgc__rp_hint(P, "write %s=true, %s=false, a variable, or copy one: %s=y.%s", d->name, d->name, d->name,
                           d->name);
    }
    ra->kind = RV_BOOL;
    ra->ival = is_kw(P, t, "true");
    advance(P);
    return PCGC_OK;
  case PCGC_ATTR_FLOAT: {
    if (copy) {
      ra->kind = RV_EXPR;
      return parse_copy_value(P, op, d, &ra->expr);
    }
    bool neg = is_p(t, '-');
    const pcgc__rtok *v = neg ? peek2(P) : t;
    if (v->kind != PCGC__RT_FLOAT && v->kind != PCGC__RT_INT) {
      FAIL(P, t, "attribute '%s' of %s takes a number, not %s", d->name, op, DESC(t));
      return pcgc__rp_hint(P, "write %s=0.5 or %s=-2, or copy one: %s=y.%s", d->name, d->name, d->name, d->name);
    }
    ra->kind = RV_FLOAT;
    ra->f = v->kind == PCGC__RT_FLOAT ? v->f : (double)v->i;
    if (neg) ra->f = -ra->f, advance(P);
    advance(P);
    return PCGC_OK;
  }
  case PCGC_ATTR_ENUM: {
    if (copy) {
      ra->kind = RV_EXPR;
      return parse_copy_value(P, op, d, &ra->expr);
    }
    char values[256] = "";
    size_t k = 0;
    for (int i = 0; pcgc_enum_value_name(d->enum_type, i) && k < sizeof values - 32; i++)
      k +=
          (size_t)snprintf(values + k, sizeof values - k, "%s%s", i ? ", " : "", pcgc_enum_value_name(d->enum_type, i));
    if (t->kind != PCGC__RT_NAME) {
      FAIL(P, t, "attribute '%s' of %s takes an enum value (%s), not %s", d->name, op, values, DESC(t));
      return pcgc__rp_hint(P, "write %s=%s", d->name, pcgc_enum_value_name(d->enum_type, 0));
    }
    int v = pcgc_enum_value_from_name(d->enum_type, TOKSTR(P, t));
    if (v < 0) {
      FAIL(P, t, "unknown %s value '%s' for attribute '%s' of %s", pcgc_enum_type_name(d->enum_type), TOKSTR(P, t),
           d->name, op);
      pcgc__suggest sg;
      pcgc__suggest_init(&sg, TOKSTR(P, t));
      for (int i = 0; pcgc_enum_value_name(d->enum_type, i); i++)
        pcgc__suggest_add(&sg, pcgc_enum_value_name(d->enum_type, i));
      if (pcgc__suggest_best(&sg))
        return pcgc__rp_hint(P, "did you mean '%s'? values: %s", pcgc__suggest_best(&sg), values);
      return pcgc__rp_hint(P, "values: %s", values);
    }
    ra->kind = RV_ENUM;
    ra->ival = v;
    advance(P);
    return PCGC_OK;
  }
  }
  return PCGC_OK;
}

/* An attribute of node nd: KEY "=" value. */
static pcgc_status parse_attr(parser *P, rnode *nd) {
  const pcgc__rtok *k = peek(P);
  const char *op = pcgc_op_name(nd->op);
  const char *key = TOKSTR(P, k);
  int a = pcgc_op_attr_index(nd->op, key);
  if (a < 0) {
    FAIL(P, k, "%s has no attribute '%s'", op, key);
    return pcgc__rp_attr_key_hint(P, nd->op, key);
  }
  for (int i = 0; i < nd->n_attrs; i++)
    if (nd->attrs[i].attr == a) {
      FAIL(P, k, "attribute '%s' is given twice", key);
      return pcgc__rp_hint(P, "it was first given at %d:%d; keep one", nd->attrs[i].loc.line, nd->attrs[i].loc.col);
    }
  if (nd->n_attrs == PCGC_RULE_MAX_ATTRS) {
    FAIL(P, k, "too many attributes (at most %d)", PCGC_RULE_MAX_ATTRS);
    return pcgc__rp_hint(P, "no operator has that many");
  }
  rattr *ra = &nd->attrs[nd->n_attrs];
  memset(ra, 0, sizeof *ra);
  ra->attr = a;
  ra->expr = -1;
  ra->loc = loc_of(P, k);
  advance(P);
  advance(P); /* '=' */
  pcgc_status s = parse_attr_value(P, nd->op, pcgc_op_attr(nd->op, a), ra);
  if (s) return s;
  ra->len = prev_end(P) - k->sp.off;
  nd->n_attrs++;
  return PCGC_OK;
}

/* NAME ".*": copy every attribute of the match node computing NAME. */
static pcgc_status parse_copy(parser *P, rnode *nd) {
  const pcgc__rtok *t = peek(P);
  const char *s = TOKSTR(P, t);
  if (!is_p(tok_at(P, P->pos + 2), '*')) {
    advance(P), advance(P);
    return pcgc__rp_expected(P, "'*' after '.'",
                             "NAME.* copies every attribute of a match node; attributes are KEY=value");
  }
  if (P->side == SIDE_MATCH) {
    FAIL(P, t, "'%s.*' is only allowed in the rewrite", s);
    return pcgc__rp_hint(P, "a match node constrains attributes with KEY=value or KEY=%s.KEY", s);
  }
  if (nd->copy_from >= 0) {
    FAIL(P, t, "a node copies attributes with NAME.* at most once");
    return pcgc__rp_hint(P, "keep one, and give the other attributes as KEY=value");
  }
  if (nd->n_attrs > 0) {
    FAIL(P, t, "'%s.*' after attributes", s);
    return pcgc__rp_hint(P, "write NAME.* before the attributes that override it");
  }
  int32_t tensor;
  pcgc_status st = pcgc__rp_ref_tensor(P, t, 'c', &tensor);
  if (st) return st;
  pcgc_op_kind src = P->r->match.nodes[P->r->tensors[tensor].node].op;
  if (src != nd->op) {
    FAIL(P, t, "'%s.*' copies the attributes of %s, but this node is %s", s, pcgc_op_name(src), pcgc_op_name(nd->op));
    return pcgc__rp_hint(P, "NAME.* copies from a match node of the same operator; give the attributes as KEY=value");
  }
  nd->copy_from = tensor;
  advance(P), advance(P), advance(P);
  return PCGC_OK;
}

static void arity_text(pcgc_op_kind op, char *buf, size_t n) {
  int lo = pcgc_op_min_inputs(op), hi = pcgc_op_max_inputs(op);
  if (hi == PCGC_VARIADIC)
    snprintf(buf, n, "at least %d", lo);
  else if (lo == hi)
    snprintf(buf, n, "%d", lo);
  else
    snprintf(buf, n, "%d to %d", lo, hi);
}

/* "(" [ arg { "," arg } ] ")" */
static pcgc_status parse_args(parser *P, rnode *nd) {
  const char *op = pcgc_op_name(nd->op);
  char arity[32];
  arity_text(nd->op, arity, sizeof arity);
  pcgc_status s = pcgc__rp_open(P, NULL);
  if (s) return s;
  while (!is_p(peek(P), ')')) {
    const pcgc__rtok *t = peek(P);
    if (t->kind == PCGC__RT_NAME && is_p(peek2(P), '=')) {
      if ((s = parse_attr(P, nd))) return s;
    } else if (is_name(P, t) && is_p(peek2(P), '.')) {
      if ((s = parse_copy(P, nd))) return s;
    } else if (t->kind == PCGC__RT_NAME) {
      if (nd->n_attrs > 0 || nd->copy_from >= 0) {
        FAIL(P, t, "tensor argument '%.*s' after attributes", t->sp.len, text(P, t));
        return pcgc__rp_hint(P, "write the tensor arguments first, then NAME.*, then KEY=value attributes");
      }
      int hi = pcgc_op_max_inputs(nd->op);
      if (nd->n_args >= hi) {
        FAIL(P, t, "too many tensor arguments for %s (it takes %s)", op, arity);
        return pcgc__rp_hint(P, "attributes are written KEY=value");
      }
      if (nd->n_args == PCGC_RULE_MAX_ARGS) {
        FAIL(P, t, "too many tensor arguments (at most %d in a rule)", PCGC_RULE_MAX_ARGS);
        return pcgc__rp_hint(P, "split the node");
      }
      if ((s = pcgc__rp_ref_tensor(P, t, 'a', &nd->args[nd->n_args]))) return s;
      nd->n_args++;
      advance(P);
    } else {
      return pcgc__rp_expected(P, "a tensor name, NAME.* or KEY=value",
                               "arguments are tensors, then NAME.*, then KEY=value");
    }
    if (is_p(peek(P), ','))
      advance(P);
    else if (!is_p(peek(P), ')'))
      return pcgc__rp_expected(P, "',' or ')'", "separate the arguments with ','");
  }
  const pcgc__rtok *close = peek(P);
  pcgc__rp_close(P);
  if (nd->n_args < pcgc_op_min_inputs(nd->op)) {
    FAIL(P, close, "too few tensor arguments for %s: %d given, it takes %s", op, nd->n_args, arity);
    return pcgc__rp_hint(P, "pass the tensors first: y = %s(x, ...)", op);
  }
  return PCGC_OK;
}

/* node = outs "=" OP "(" args ")" ";" */
static pcgc_status parse_node(parser *P, rside *side) {
  int out_tok[PCGC_RULE_MAX_OUTS];
  int n_outs = 0;
  pcgc_status s;
  const char *where = P->side == SIDE_MATCH ? "match" : "rewrite";
  for (;;) {
    const pcgc__rtok *t = peek(P);
    if (!is_under(P, t) && (s = pcgc__rp_check_new_name(P, t, "an output name"))) return s;
    for (int i = 0; i < n_outs && !is_under(P, t); i++)
      if (tok_at(P, out_tok[i])->sp.len == t->sp.len &&
          memcmp(text(P, tok_at(P, out_tok[i])), text(P, t), (size_t)t->sp.len) == 0) {
        FAIL(P, t, "'%s' appears twice on the left of '='", TOKSTR(P, t));
        return pcgc__rp_hint(P, "give each output its own name");
      }
    if (n_outs == PCGC_RULE_MAX_OUTS) {
      FAIL(P, t, "too many outputs (at most %d)", PCGC_RULE_MAX_OUTS);
      return pcgc__rp_hint(P, "split the node");
    }
    out_tok[n_outs++] = P->pos;
    advance(P);
    if (!is_p(peek(P), ',')) break;
    advance(P);
  }
  const pcgc__rtok *t = peek(P);
  if (!is_p(t, '=')) {
    const pcgc__rtok *first = tok_at(P, out_tok[0]);
    if (n_outs == 1 && t->kind == PCGC__RT_NAME) {
      pcgc__suggest sg;
      pcgc__suggest_init(&sg, TOKSTR(P, first));
      pcgc__suggest_add(&sg, "input");
      pcgc__suggest_add(&sg, "yield");
      if (pcgc__suggest_best(&sg)) {
        FAIL(P, first, "unknown statement '%s'", TOKSTR(P, first));
        return pcgc__rp_hint(P, "did you mean '%s'?", pcgc__suggest_best(&sg));
      }
    }
    return pcgc__rp_expected(P, "'=' after the output names", "a node is written NAME = op(tensors..., KEY=value);");
  }
  advance(P);
  const pcgc__rtok *op_tok = peek(P);
  if (op_tok->kind != PCGC__RT_NAME)
    return pcgc__rp_expected(P, "an operator after '='", "a node is written NAME = op(tensors..., KEY=value);");
  int op = pcgc_op_from_name(TOKSTR(P, op_tok));
  if (op < 0) {
    FAIL(P, op_tok, "unknown operator '%s'", TOKSTR(P, op_tok));
    pcgc__suggest sg;
    pcgc__suggest_init(&sg, TOKSTR(P, op_tok));
    for (int i = 0; i < PCGC_OP_COUNT; i++)
      if (pcgc_op_class_of((pcgc_op_kind)i) != PCGC_CLASS_SOURCE) pcgc__suggest_add(&sg, pcgc_op_name((pcgc_op_kind)i));
    if (pcgc__suggest_best(&sg)) return pcgc__rp_hint(P, "did you mean '%s'?", pcgc__suggest_best(&sg));
    return pcgc__rp_hint(P, "operators are those of pcg/ops.def: linear, relu, add, partition, ...");
  }
  if (pcgc_op_class_of((pcgc_op_kind)op) == PCGC_CLASS_SOURCE) {
    FAIL(P, op_tok, "'%s' nodes cannot appear in a rule", TOKSTR(P, op_tok));
    return pcgc__rp_hint(P, "tensors from outside the pattern (weights too) are declared in the match: input x, w;");
  }
  if (side->n_nodes == PCGC_RULE_MAX_NODES) {
    FAIL(P, op_tok, "too many nodes in the %s (at most %d)", where, PCGC_RULE_MAX_NODES);
    return pcgc__rp_hint(P, "split the rule");
  }
  rnode *nd = &side->nodes[side->n_nodes];
  memset(nd, 0, sizeof *nd);
  int sd = side == &P->r->rewrite;
  nd->args = P->scratch->args[sd][side->n_nodes];
  nd->attrs = P->scratch->attrs[sd][side->n_nodes];
  nd->outs = P->scratch->outs[sd][side->n_nodes];
  nd->op = (pcgc_op_kind)op;
  nd->copy_from = -1;
  nd->loc = loc_of(P, op_tok);
  nd->len = op_tok->sp.len;
  nd->n_outs = n_outs;
  for (int i = 0; i < n_outs; i++) nd->outs[i] = is_under(P, tok_at(P, out_tok[i])) ? -1 : 0;
  advance(P);
  if (!is_p(peek(P), '('))
    return pcgc__rp_expected(P, "'(' after the operator", "a node is written NAME = op(tensors..., KEY=value);");
  if ((s = parse_args(P, nd)) || (s = pcgc__rp_check_node(P, nd, op_tok, out_tok))) return s;
  if ((s = pcgc__rp_expect_semi(P, "the node"))) return s;
  int node = side->n_nodes++;
  for (int i = 0; i < n_outs; i++) {
    if (nd->outs[i] < 0) continue;
    const pcgc__rtok *o = tok_at(P, out_tok[i]);
    if ((s = pcgc__rp_check_new_name(P, o, "an output name")) ||
        (s = pcgc__rp_add_tensor(P, o, P->side == SIDE_REWRITE, node, i, &nd->outs[i])))
      return s;
  }
  return PCGC_OK;
}

/* ------------------------------------------------------------- match */

/* shape = "[" [ dimpat { "," dimpat } ] "]" */
static pcgc_status parse_shape(parser *P, rtype *ty) {
  pcgc_status s = pcgc__rp_open(P, NULL);
  ty->has_shape = true;
  while (s == PCGC_OK && !is_p(peek(P), ']')) {
    const pcgc__rtok *t = peek(P);
    if (is_p(t, PCGC__RP_ELLIPSIS)) {
      if (ty->ellipsis_at >= 0) {
        FAIL(P, t, "a shape has at most one '...'");
        return pcgc__rp_hint(P, "'...NAME' stands for any number of dims; name the others: [B, ...R, N]");
      }
      advance(P);
      const pcgc__rtok *n = peek(P);
      if (!is_name(P, n) || is_under(P, n))
        return pcgc__rp_expected(P, "a name after '...'", "'...R' names the dims it stands for");
      int32_t y = pcgc__rp_find_sym(P->r, TOKSTR(P, n));
      if (y >= 0 && P->r->syms[y].kind != RS_ELLIPSIS) {
        FAIL(P, n, "'%s' is already %s; '...%s' needs a name of its own", TOKSTR(P, n),
             pcgc__rp_sym_kind_name(P->r->syms[y].kind), TOKSTR(P, n));
        return pcgc__rp_hint(P, "a second '...R' in another shape means the same dims");
      }
      if (y < 0 &&
          ((s = pcgc__rp_check_new_name(P, n, "a '...' name")) || (s = pcgc__rp_add_sym(P, n, RS_ELLIPSIS, &y))))
        return s;
      ty->ellipsis_at = ty->n_dims;
      ty->ellipsis_sym = y;
      advance(P);
    } else {
      if (ty->n_dims == PCGC_MAX_RANK) {
        FAIL(P, t, "a shape has at most %d dims", PCGC_MAX_RANK);
        return pcgc__rp_hint(P, "'...R' stands for any number of dims");
      }
      if ((s = parse_expr(P, &ty->dims[ty->n_dims]))) return s;
      ty->n_dims++;
    }
    if (is_p(peek(P), ','))
      advance(P);
    else if (!is_p(peek(P), ']'))
      return pcgc__rp_expected(P, "',' or ']' in the shape", "a shape is written [B, N] or [B, ...R]");
  }
  if (s == PCGC_OK) pcgc__rp_close(P);
  return s;
}

/* "{" pitem { "," pitem } "}" */
static pcgc_status parse_pitems(parser *P, rtype *ty) {
  static const char *const items[] = {"deg", "sum", "rep", "micro"};
  pcgc_status s = pcgc__rp_open(P, NULL);
  while (s == PCGC_OK && !is_p(peek(P), '}')) {
    const pcgc__rtok *t = peek(P);
    int kind = -1;
    for (int i = 0; i < 4; i++)
      if (is_kw(P, t, items[i])) kind = i;
    if (kind < 0) {
      if (t->kind != PCGC__RT_NAME)
        return pcgc__rp_expected(P, "a parallel-type item", "items: deg[k]=..., sum=..., rep=..., micro=...");
      FAIL(P, t, "unknown parallel-type item '%s'", TOKSTR(P, t));
      pcgc__suggest sg;
      pcgc__suggest_init(&sg, TOKSTR(P, t));
      for (int i = 0; i < 4; i++) pcgc__suggest_add(&sg, items[i]);
      if (pcgc__suggest_best(&sg)) return pcgc__rp_hint(P, "did you mean '%s'?", pcgc__suggest_best(&sg));
      return pcgc__rp_hint(P, "items: deg[k]=..., sum=..., rep=..., micro=...");
    }
    for (int i = 0; kind != RP_DEG && i < ty->n_pitems; i++)
      if (ty->pitems[i].kind == (rpitem_kind)kind) {
        FAIL(P, t, "parallel item '%s' is given twice", items[kind]);
        return pcgc__rp_hint(P, "keep one");
      }
    if (ty->n_pitems == PCGC_RULE_MAX_PITEMS) {
      FAIL(P, t, "too many parallel-type items (at most %d)", PCGC_RULE_MAX_PITEMS);
      return pcgc__rp_hint(P, "an input has one deg[] per dim, sum, rep and micro");
    }
    rpitem *it = &ty->pitems[ty->n_pitems];
    it->kind = (rpitem_kind)kind;
    it->index = -1;
    it->loc = loc_of(P, t);
    advance(P);
    if (kind == RP_DEG) {
      if (!is_p(peek(P), '[')) return pcgc__rp_expected(P, "'[' after 'deg'", "deg[k]=d is the shard degree of dim k");
      if ((s = pcgc__rp_open(P, NULL)) || (s = parse_expr(P, &it->index))) return s;
      if (!is_p(peek(P), ']')) return pcgc__rp_expected(P, "']'", "deg[k]=d is the shard degree of dim k");
      pcgc__rp_close(P);
    }
    if ((s = pcgc__rp_expect_p(P, '=', "'=' after the item", "items are written deg[0]=d, sum=1, rep=r, micro=m")))
      return s;
    if ((s = parse_expr(P, &it->value))) return s;
    ty->n_pitems++;
    if (is_p(peek(P), ','))
      advance(P);
    else if (!is_p(peek(P), '}'))
      return pcgc__rp_expected(P, "',' or '}' after the item", "separate the items with ','");
  }
  if (s == PCGC_OK) pcgc__rp_close(P);
  return s;
}

/* type = [ DTYPE ] [ shape ] [ pitems ] */
static pcgc_status parse_type(parser *P, rtype *ty) {
  const pcgc__rtok *t = peek(P);
  pcgc_status s;
  if (t->kind == PCGC__RT_NAME) {
    const char *name = TOKSTR(P, t);
    int dt = pcgc_dtype_from_name(name);
    if (strcmp(name, "float") == 0)
      dt = RT_DTYPE_FLOAT;
    else if (strcmp(name, "int") == 0)
      dt = RT_DTYPE_INT;
    else if (dt < 0) {
      FAIL(P, t, "unknown dtype '%s'", name);
      pcgc__suggest sg;
      pcgc__suggest_init(&sg, name);
      for (int i = 0; i < PCGC_DTYPE_COUNT; i++) pcgc__suggest_add(&sg, pcgc_dtype_name((pcgc_dtype)i));
      pcgc__suggest_add(&sg, "float");
      pcgc__suggest_add(&sg, "int");
      if (pcgc__suggest_best(&sg)) return pcgc__rp_hint(P, "did you mean '%s'?", pcgc__suggest_best(&sg));
      return pcgc__rp_hint(P, "dtypes: f32 f16 bf16 f64 i32 i64, float (any float), int (any integer)");
    }
    ty->dtype = dt;
    advance(P);
  } else if (!is_p(t, '[') && !is_p(t, '{')) {
    return pcgc__rp_expected(P, "a type after ':'",
                             "a type is a dtype, a shape and parallel items, each optional: f32[B, ...R]{sum=1}");
  }
  if (is_p(peek(P), '[') && (s = parse_shape(P, ty))) return s;
  if (is_p(peek(P), '{') && (s = parse_pitems(P, ty))) return s;
  return PCGC_OK;
}

/* inputs = "input" decl { "," decl } ";" */
static pcgc_status parse_inputs(parser *P) {
  pcgc_rule *r = P->r;
  advance(P);
  pcgc_status s;
  for (;;) {
    const pcgc__rtok *t = peek(P);
    if ((s = pcgc__rp_check_new_name(P, t, "an input name"))) return s;
    if (r->n_inputs == PCGC_RULE_MAX_INPUTS) {
      FAIL(P, t, "too many inputs (at most %d)", PCGC_RULE_MAX_INPUTS);
      return pcgc__rp_hint(P, "split the rule");
    }
    advance(P);
    rtype ty = {.dtype = RT_DTYPE_ANY, .ellipsis_at = -1, .ellipsis_sym = -1, .pitems = P->scratch->pitems[r->n_inputs]};
    if (is_p(peek(P), ':')) {
      advance(P);
      if ((s = parse_type(P, &ty))) return s;
      if ((s = pcgc__rp_check_new_name(P, t, "an input name"))) return s; /* the type may have taken the name */
    }
    int32_t k;
    if ((s = pcgc__rp_add_tensor(P, t, 0, -1, 0, &k))) return s;
    r->tensors[k].input = r->n_inputs;
    P->scratch->types[r->n_inputs] = ty;
    r->tensors[k].type = &P->scratch->types[r->n_inputs];
    r->inputs[r->n_inputs++] = k;
    if (!is_p(peek(P), ',')) break;
    advance(P);
  }
  if (peek(P)->kind == PCGC__RT_NAME || is_p(peek(P), '[') || is_p(peek(P), '{'))
    return pcgc__rp_expected(P, "',' or ';' after the input", "inputs are written: input x: f32[B, N], w;");
  return pcgc__rp_expect_semi(P, "the inputs");
}

/* yield = "yield" NAME { "," NAME } ";" */
static pcgc_status parse_yield(parser *P, rside *side) {
  const pcgc__rtok *kw = advance(P);
  side->yield_loc = loc_of(P, kw);
  pcgc_status s;
  for (;;) {
    const pcgc__rtok *t = peek(P);
    if (side->n_yields == PCGC_RULE_MAX_YIELDS) {
      FAIL(P, t, "too many yields (at most %d)", PCGC_RULE_MAX_YIELDS);
      return pcgc__rp_hint(P, "split the rule");
    }
    int32_t k;
    if ((s = pcgc__rp_ref_tensor(P, t, 'y', &k))) return s;
    for (int i = 0; P->side == SIDE_MATCH && i < side->n_yields; i++)
      if (side->yields[i] == k) {
        FAIL(P, t, "'%s' is yielded twice", P->r->tensors[k].name);
        return pcgc__rp_hint(P, "yield each tensor once");
      }
    side->yields[side->n_yields++] = k;
    advance(P);
    if (!is_p(peek(P), ',')) break;
    advance(P);
  }
  if ((s = pcgc__rp_expect_semi(P, "the yield"))) return s;
  const rside *m = &P->r->match;
  if (P->side == SIDE_REWRITE && side->n_yields != m->n_yields) {
    FAIL(P, kw, "the rewrite yields %d tensor%s, but the match yields %d", side->n_yields,
         side->n_yields == 1 ? "" : "s", m->n_yields);
    return pcgc__rp_hint(P, "the i-th rewrite yield replaces the i-th match yield; the lists have the same length");
  }
  return PCGC_OK;
}

/* match = "match" "{" { inputs | node } yield "}"; the same for the rewrite. */
static pcgc_status parse_side(parser *P, int which) {
  bool match = which == SIDE_MATCH;
  rside *side = match ? &P->r->match : &P->r->rewrite;
  P->side = which;
  pcgc_status s = PCGC_OK;
  if (!is_p(peek(P), '{'))
    return pcgc__rp_expected(P, match ? "'{' after 'match'" : "'{' after 'rewrite'",
                             "write match { ... } and rewrite { ... }");
  if ((s = pcgc__rp_open(P, match ? "the match" : "the rewrite"))) return s;
  for (;;) {
    const pcgc__rtok *t = peek(P);
    if (is_p(t, '}')) {
      FAIL(P, t, "the %s has no 'yield'", match ? "match" : "rewrite");
      return pcgc__rp_hint(P, "end it with 'yield NAME;', naming the tensors it gives back");
    } else if (is_kw(P, t, "input")) {
      if (!match) {
        FAIL(P, t, "'input' in the rewrite");
        return pcgc__rp_hint(P, "inputs are declared in the match; the rewrite reads them by name");
      }
      if ((s = parse_inputs(P))) return s;
    } else if (is_kw(P, t, "yield")) {
      if ((s = parse_yield(P, side))) return s;
      if (!is_p(peek(P), '}'))
        return pcgc__rp_expected(P, match ? "'}' after the match's yield" : "'}' after the rewrite's yield",
                                 "'yield' is the last statement of its block");
      pcgc__rp_close(P);
      return match ? pcgc__rules_validate_match(P->src, P->r) : PCGC_OK;
    } else if (t->kind == PCGC__RT_NAME && !is_keyword(P, t)) {
      if ((s = parse_node(P, side))) return s;
    } else if (t->kind == PCGC__RT_NAME && (is_p(peek2(P), '=') || is_p(peek2(P), ','))) {
      return pcgc__rp_check_new_name(P, t, "a tensor name");
    } else {
      return pcgc__rp_expected(P, match ? "'input', a node or 'yield'" : "a node or 'yield'",
                               "a node is written NAME = op(tensors..., KEY=value);");
    }
  }
}

/* Whether expression e reads parameters and constants alone. */
static bool params_only(const pcgc_rule *r, int32_t e) {
  if (e < 0) return true;
  const rx *x = &r->ex[e];
  if (x->kind == RX_ATTR || x->kind == RX_ATTR_AT || x->kind == RX_RANK || x->kind == RX_SIZE ||
      (x->kind == RX_SYM && x->sym >= r->n_params))
    return false;
  return params_only(r, x->a) && params_only(r, x->b);
}

/* where = "where" "{" { cond ";" } "}" */
static pcgc_status parse_where(parser *P) {
  pcgc_rule *r = P->r;
  P->side = SIDE_WHERE;
  advance(P);
  if (!is_p(peek(P), '{'))
    return pcgc__rp_expected(P, "'{' after 'where'", "conditions are written where { B %% d == 0; }");
  pcgc_status s = pcgc__rp_open(P, "the where block");
  if (s == PCGC_OK) s = same_scope(P, true);
  while (s == PCGC_OK && !is_p(peek(P), '}')) {
    const pcgc__rtok *t = peek(P);
    if (r->n_conds == PCGC_RULE_MAX_CONDS) {
      FAIL(P, t, "too many conditions (at most %d)", PCGC_RULE_MAX_CONDS);
      return pcgc__rp_hint(P, "split the rule");
    }
    rcond *c = &r->conds[r->n_conds];
    c->loc = loc_of(P, t);
    if ((s = parse_expr(P, &c->a))) return s;
    const pcgc__rtok *op = peek(P);
    switch (op->kind == PCGC__RT_PUNCT ? op->p : 0) {
    case PCGC__RP_EQ: c->op = RC_EQ; break;
    case PCGC__RP_NE: c->op = RC_NE; break;
    case '<': c->op = RC_LT; break;
    case PCGC__RP_LE: c->op = RC_LE; break;
    case '>': c->op = RC_GT; break;
    case PCGC__RP_GE: c->op = RC_GE; break;
    default:
      if (is_p(op, '=')) {
        FAIL(P, op, "expected a comparison, found '='");
        return pcgc__rp_hint(P, "compare with '==': B %% d == 0");
      }
      return pcgc__rp_expected(P, "a comparison (== != < <= > >=)", "a condition is written A == B, A < B, ...");
    }
    advance(P);
    if ((s = parse_expr(P, &c->b))) return s;
    c->len = prev_end(P) - t->sp.off;
    if ((s = pcgc__rp_expect_semi(P, "the condition"))) return s;
    /* decided at instantiation when only parameters are involved */
    c->params_only = params_only(r, c->a) && params_only(r, c->b);
    r->n_conds++;
  }
  same_scope(P, false);
  if (s == PCGC_OK) pcgc__rp_close(P);
  return s;
}

/* ------------------------------------------------------------- rules */

/* "(" param { "," param } ")" with param = NAME ":" ("degree" | "dim") */
static pcgc_status parse_params(parser *P) {
  pcgc_rule *r = P->r;
  pcgc_status s = pcgc__rp_open(P, NULL);
  for (;;) {
    const pcgc__rtok *t = peek(P);
    if (s) return s;
    if (t->kind == PCGC__RT_NAME && !is_keyword(P, t) && !is_under(P, t) && pcgc__rp_find_sym(r, TOKSTR(P, t)) >= 0) {
      FAIL(P, t, "parameter '%s' is declared twice", TOKSTR(P, t));
      return pcgc__rp_hint(P, "rename one of them");
    }
    if ((s = pcgc__rp_check_new_name(P, t, "a parameter name"))) return s;
    if (r->n_params == PCGC_RULE_MAX_PARAMS) {
      FAIL(P, t, "too many parameters (at most %d)", PCGC_RULE_MAX_PARAMS);
      return pcgc__rp_hint(P, "split the rule");
    }
    advance(P);
    if ((s = pcgc__rp_expect_p(P, ':', "':' after the parameter name", "parameters are written (d: degree, k: dim)")))
      return s;
    const pcgc__rtok *k = peek(P);
    rsym_kind kind;
    if (is_kw(P, k, "degree"))
      kind = RS_DEGREE;
    else if (is_kw(P, k, "dim"))
      kind = RS_DIM;
    else if (k->kind != PCGC__RT_NAME)
      return pcgc__rp_expected(P, "'degree' or 'dim'", "parameters are written (d: degree, k: dim)");
    else {
      FAIL(P, k, "unknown parameter sort '%s'", TOKSTR(P, k));
      pcgc__suggest sg;
      pcgc__suggest_init(&sg, TOKSTR(P, k));
      pcgc__suggest_add(&sg, "degree");
      pcgc__suggest_add(&sg, "dim");
      if (pcgc__suggest_best(&sg))
        return pcgc__rp_hint(P, "did you mean '%s'? a parameter is a degree or a dim", pcgc__suggest_best(&sg));
      return pcgc__rp_hint(P, "a parameter is a degree (d: degree) or a dim (k: dim)");
    }
    int32_t y;
    if ((s = pcgc__rp_add_sym(P, t, kind, &y))) return s;
    r->n_params++;
    advance(P);
    if (is_p(peek(P), ')')) break;
    if ((s = pcgc__rp_expect_p(P, ',', "',' or ')' after the parameter", "parameters are written (d: degree, k: dim)")))
      return s;
  }
  pcgc__rp_close(P);
  return PCGC_OK;
}

static const pcgc_rule *find_rule(const parser *P, const char *name) {
  const pcgc_rule *r = P->rs ? pcgc_ruleset_find(P->rs, name) : NULL;
  return r ? r : pcgc__rule_index_find(P->names, name);
}

/* rule = "rule" NAME [ params ] "{" match [ where ] rewrite "}" */
static pcgc_status parse_rule(parser *P) {
  /* no token before the rule is looked at again (keep one, as a guard) */
  pcgc__tokwin_drop(P->win, P->pos - 1);
  advance(P);
  const pcgc__rtok *t = peek(P);
  if (t->kind != PCGC__RT_NAME)
    return pcgc__rp_expected(P, "a rule name after 'rule'", "a rule is written rule NAME { ... }");
  if (is_keyword(P, t)) {
    FAIL(P, t, "'%s' is a keyword and cannot be used as a rule name", TOKSTR(P, t));
    return pcgc__rp_hint(P, "choose another name, e.g. '%s_'", TOKSTR(P, t));
  }
  const pcgc_rule *prev = find_rule(P, TOKSTR(P, t));
  if (prev) {
    FAIL(P, t, "rule '%s' is already defined at %s:%d:%d", prev->name, prev->loc.file ? prev->loc.file : "?",
         prev->loc.line, prev->loc.col);
    return pcgc__rp_hint(P, "rule names are unique across every rules file; rename one");
  }
  if (pcgc_ruleset_size(P->rs) + P->n_rules >= PCGC__RULES_MAX_RULES) {
    FAIL(P, t, "too many rules (at most %d in a rule set)", PCGC__RULES_MAX_RULES);
    return pcgc__rp_hint(P, "load fewer rules files");
  }
  pcgc__rule_scratch *S = P->scratch;
  if (!S && !(S = P->scratch = malloc(sizeof *S))) return pcgc__rp_oom(P);
  memset(S, 0, sizeof *S);
  pcgc_rule *r = calloc(1, sizeof *r);
  if (!r || !(r->name = strndup(text(P, t), (size_t)t->sp.len))) {
    free(r);
    return pcgc__rp_oom(P);
  }
  r->syms = S->syms;
  r->inputs = S->inputs;
  r->tensors = S->tensors;
  r->match.nodes = S->nodes[0];
  r->match.yields = S->yields[0];
  r->rewrite.nodes = S->nodes[1];
  r->rewrite.yields = S->yields[1];
  r->conds = S->conds;
  r->loc = loc_of(P, t);
  P->r = r;
  P->n_open = 0;
  P->depth = 0;
  same_scope(P, false);
  advance(P);
  pcgc_status s = PCGC_OK;
  if (is_p(peek(P), '(')) s = parse_params(P);
  if (s == PCGC_OK && !is_p(peek(P), '{'))
    s = pcgc__rp_expected(P, r->n_params ? "'{' after the parameters" : "'(' or '{' after the rule name",
                          "a rule is written rule NAME(d: degree) { match { ... } rewrite { ... } }");
  if (s == PCGC_OK) s = pcgc__rp_open(P, "the rule");
  if (s == PCGC_OK && !is_kw(P, peek(P), "match"))
    s = pcgc__rp_expected(P, "'match'", "a rule starts with its pattern: match { input x; y = relu(x); yield y; }");
  if (s == PCGC_OK) advance(P), s = parse_side(P, SIDE_MATCH);
  if (s == PCGC_OK && is_kw(P, peek(P), "where")) s = parse_where(P);
  if (s == PCGC_OK && !is_kw(P, peek(P), "rewrite")) {
    if (is_p(peek(P), '}')) {
      FAIL(P, peek(P), "rule '%s' has no rewrite", r->name);
      s = pcgc__rp_hint(P, "after the match (and where), write rewrite { ...; yield ...; }");
    } else {
      s = pcgc__rp_expected(P, r->n_conds || P->side == SIDE_WHERE ? "'rewrite'" : "'where' or 'rewrite'",
                            "a rule is match { ... } [where { ... }] rewrite { ... }");
    }
  }
  if (s == PCGC_OK) advance(P), s = parse_side(P, SIDE_REWRITE);
  if (s == PCGC_OK && !is_p(peek(P), '}'))
    s = pcgc__rp_expected(P, "'}' to close the rule", "a rule ends after its rewrite block");
  if (s == PCGC_OK) pcgc__rp_close(P), s = pcgc__rules_validate(P->src, r);
  if (s == PCGC_OK) {
    /* the finished rule, sized to fit */
    pcgc_rule *q = pcgc__rule_pack(r);
    if (!q) {
      s = pcgc__rp_oom(P);
    } else {
      pcgc__rule_free(r);
      P->r = r = q;
    }
  }
  if (s == PCGC_OK && P->n_rules == P->cap_rules) {
    int cap = P->cap_rules ? P->cap_rules * 2 : 8;
    pcgc_rule **v = realloc(P->rules, (size_t)cap * sizeof *v);
    if (!v)
      s = pcgc__rp_oom(P);
    else
      P->rules = v, P->cap_rules = cap;
  }
  if (s == PCGC_OK && pcgc__rule_index_add(&P->names, r) != PCGC_OK) s = pcgc__rp_oom(P);
  if (s != PCGC_OK) {
    pcgc__rule_free(r);
    P->r = NULL;
    return s;
  }
  P->rules[P->n_rules++] = r;
  P->r = NULL;
  return PCGC_OK;
}

static pcgc_status lex_next(void *lexer, void *tok) { return pcgc__rules_lex_next(lexer, tok); }

pcgc_status pcgc__rules_parse(const pcgc__src *src, const pcgc_ruleset *rs, pcgc_rule ***out, int *n_out) {
  *out = NULL;
  *n_out = 0;
  pcgc_status s = pcgc__rules_lex_check(src);
  if (s != PCGC_OK) return s;
  static const pcgc__rtok eof = {.kind = PCGC__RT_EOF};
  pcgc__rules_lexer lexer;
  pcgc__rules_lex_init(&lexer, src);
  pcgc__tokwin win;
  pcgc__tokwin_init(&win, sizeof(pcgc__rtok), lex_next, &lexer, &eof);
  parser state = {.src = src, .win = &win, .rs = rs};
  parser *P = &state;
  while (s == PCGC_OK && peek(P)->kind != PCGC__RT_EOF) {
    if (is_kw(P, peek(P), "rule"))
      s = parse_rule(P);
    else
      s = pcgc__rp_expected(P, "'rule'", "a rules file holds rules: rule NAME { match { ... } rewrite { ... } }");
  }
  /* the lexer already read the text once, so only memory can fail it */
  assert(win.status == PCGC_OK || win.status == PCGC_ERR_NOMEM);
  if (win.status != PCGC_OK) s = pcgc__rp_oom(P);
  pcgc__tokwin_free(&win);
  free(P->height);
  free(P->same);
  free(P->scratch);
  pcgc__rule_index_clear(&P->names);
  if (s != PCGC_OK) {
    for (int i = 0; i < P->n_rules; i++) pcgc__rule_free(P->rules[i]);
    free(P->rules);
    return s;
  }
  *out = P->rules;
  *n_out = P->n_rules;
  return PCGC_OK;
}
