/*
 * rules_validate.c — the static checks of rules (docs/rules.md, "Checks")
 * other than syntax:
 *
 *   names, while parsing: a new name is not a keyword, `_` or taken (names
 *     are single-assignment across the rule, tensors and symbols alike); a
 *     tensor read is defined, and is one that place may read (the rewrite
 *     never reads a match intermediate; NAME.* and NAME.KEY need a match
 *     node's output; a match yields outputs of its nodes);
 *   nodes, after their arguments: the outputs fit the operator (split: one
 *     per size), not every output is `_`, a rewrite node has its required
 *     attributes;
 *   after the match: every variable has a bare occurrence there (a dim, a
 *     parallel item's value, an attribute or list entry that is just the
 *     name): the matcher binds variables only from those, so one that
 *     appears only inside expressions (K*2) could never get a value;
 *   after the rule: every parameter is used; every match input is read by a
 *     match node; every named output of a match node is read by a later match
 *     node or yielded; every rewrite tensor is read or yielded. These are
 *     reported in source order: parameters, then tensors as defined.
 */
#define _POSIX_C_SOURCE 200809L /* strndup */
#include <stdlib.h>
#include <string.h>

#include "rules_parse.h"

typedef pcgc__rparser parser;

/* ---------------------------------------------------------------- names */

int pcgc__rp_find_tensor(const pcgc_rule *r, const char *s) {
  for (int i = 0; i < r->n_tensors; i++)
    if (strcmp(r->tensors[i].name, s) == 0) return i;
  return -1;
}
int pcgc__rp_find_sym(const pcgc_rule *r, const char *s) {
  for (int i = 0; i < r->n_syms; i++)
    if (strcmp(r->syms[i].name, s) == 0) return i;
  return -1;
}

const char *pcgc__rp_sym_kind_name(rsym_kind k) {
  switch (k) {
  case RS_DEGREE: return "a degree parameter";
  case RS_DIM: return "a dim parameter";
  case RS_VAR: return "a variable";
  case RS_ELLIPSIS: return "an ellipsis name ('...')";
  }
  return "a symbol";
}

static const char *tensor_kind_name(const rtensor *t) {
  if (t->input >= 0) return "an input of the match";
  return t->side == 0 ? "a tensor of the match" : "a tensor of the rewrite";
}

/* A new name for a tensor or symbol: not a keyword, not `_`, not taken. */
pcgc_status pcgc__rp_check_new_name(parser *P, const pcgc__rtok *t, const char *what) {
  if (t->kind != PCGC__RT_NAME)
    return pcgc__rp_expected(P, what, "names start with a letter or _, then letters, digits and _");
  if (is_keyword(P, t)) {
    FAIL(P, t, "'%.*s' is a keyword and cannot be used as %s", t->sp.len, text(P, t), what);
    return pcgc__rp_hint(P, "choose another name, e.g. '%.*s_'", t->sp.len, text(P, t));
  }
  if (is_under(P, t)) {
    FAIL(P, t, "'_' cannot be used as %s", what);
    return pcgc__rp_hint(P, "'_' only ignores an output of a node: a, _ = split(x, ...)");
  }
  const char *s = TOKSTR(P, t);
  int k = pcgc__rp_find_tensor(P->r, s);
  if (k >= 0) {
    FAIL(P, t, "name '%s' is already defined", s);
    return pcgc__rp_hint(P, "it was defined at %d:%d as %s; names are single-assignment", P->r->tensors[k].loc.line,
                         P->r->tensors[k].loc.col, tensor_kind_name(&P->r->tensors[k]));
  }
  if ((k = pcgc__rp_find_sym(P->r, s)) >= 0) {
    FAIL(P, t, "name '%s' is already defined", s);
    return pcgc__rp_hint(P, "it was defined at %d:%d as %s; names are single-assignment", P->r->syms[k].loc.line,
                         P->r->syms[k].loc.col, pcgc__rp_sym_kind_name(P->r->syms[k].kind));
  }
  return PCGC_OK;
}

pcgc_status pcgc__rp_add_sym(parser *P, const pcgc__rtok *t, rsym_kind kind, int32_t *out) {
  pcgc_rule *r = P->r;
  if (r->n_syms == PCGC_RULE_MAX_SYMS) {
    FAIL(P, t, "too many symbols in rule '%s' (at most %d parameters, variables and '...' names)", r->name,
         PCGC_RULE_MAX_SYMS);
    return pcgc__rp_hint(P, "split the rule");
  }
  rsym *y = &r->syms[r->n_syms];
  if (!(y->name = strndup(text(P, t), (size_t)t->sp.len))) return pcgc__rp_oom(P);
  y->kind = kind;
  y->loc = loc_of(P, t);
  *out = r->n_syms++;
  return PCGC_OK;
}

pcgc_status pcgc__rp_add_tensor(parser *P, const pcgc__rtok *t, int side, int node, int slot, int32_t *out) {
  pcgc_rule *r = P->r;
  if (r->n_tensors == PCGC_RULE_MAX_TENSORS) {
    FAIL(P, t, "too many tensors in rule '%s' (at most %d)", r->name, PCGC_RULE_MAX_TENSORS);
    return pcgc__rp_hint(P, "split the rule");
  }
  rtensor *x = &r->tensors[r->n_tensors];
  memset(x, 0, sizeof *x);
  if (!(x->name = strndup(text(P, t), (size_t)t->sp.len))) return pcgc__rp_oom(P);
  x->loc = loc_of(P, t);
  x->side = side;
  x->node = node;
  x->slot = slot;
  x->input = -1;
  x->type = &pcgc__rtype_any;
  *out = r->n_tensors++;
  return PCGC_OK;
}

/* Did-you-mean over the tensors (of the given sides) and symbols of r. */
const char *pcgc__rp_suggest_name(const parser *P, const char *s, bool tensors, bool syms) {
  pcgc__suggest sg;
  pcgc__suggest_init(&sg, s);
  for (int i = 0; tensors && i < P->r->n_tensors; i++) pcgc__suggest_add(&sg, P->r->tensors[i].name);
  for (int i = 0; syms && i < P->r->n_syms; i++)
    if (P->r->syms[i].kind != RS_ELLIPSIS) pcgc__suggest_add(&sg, P->r->syms[i].name);
  return pcgc__suggest_best(&sg);
}

/* A tensor read by name: a node argument, a yield, NAME.* and NAME.KEY, the
 * argument of rank() and size(). `use` says which: 'a' argument, 'y' yield,
 * 'c' attribute copy or NAME.KEY, 's' rank/size. */
pcgc_status pcgc__rp_ref_tensor(parser *P, const pcgc__rtok *t, int use, int32_t *out) {
  if (t->kind != PCGC__RT_NAME)
    return pcgc__rp_expected(P, "a tensor name", "tensors are named by the inputs and nodes");
  const char *s = TOKSTR(P, t);
  if (is_keyword(P, t)) {
    FAIL(P, t, "'%s' is a keyword, not a tensor", s);
    return pcgc__rp_hint(P, "tensors are named by 'input' declarations and node outputs");
  }
  if (is_under(P, t)) {
    FAIL(P, t, "'_' cannot be read");
    return pcgc__rp_hint(P, "'_' ignores an output; name the output to use it");
  }
  int k = pcgc__rp_find_tensor(P->r, s);
  if (k < 0) {
    int y = pcgc__rp_find_sym(P->r, s);
    if (y >= 0) {
      FAIL(P, t, "'%s' is %s, not a tensor", s, pcgc__rp_sym_kind_name(P->r->syms[y].kind));
      return pcgc__rp_hint(P, "tensors are named by 'input' declarations and node outputs");
    }
    FAIL(P, t, "unknown tensor '%s'", s);
    const char *best = pcgc__rp_suggest_name(P, s, true, false);
    if (best) return pcgc__rp_hint(P, "did you mean '%s'?", best);
    return pcgc__rp_hint(P, "a tensor must be declared with 'input' or computed by an earlier node");
  }
  const rtensor *x = &P->r->tensors[k];
  if (use == 'c' && (x->side != 0 || x->node < 0)) {
    FAIL(P, t, "'%s' is %s, not the output of a match node", s, tensor_kind_name(x));
    return pcgc__rp_hint(P, "'%s.*' and '%s.KEY' read the attributes of the match node that computes '%s'", s, s, s);
  }
  if (use == 's' && x->side != 0) {
    FAIL(P, t, "'%s' is computed by the rewrite; rank() and size() apply to tensors of the match", s);
    return pcgc__rp_hint(P, "the rewrite's types are not known when its attributes are computed");
  }
  if ((use == 'a' || use == 'y') && P->side == SIDE_REWRITE && x->side == 0 && x->input < 0) {
    FAIL(P, t, "the rewrite cannot read '%s', an intermediate of the match", s);
    return pcgc__rp_hint(P, "rewrite nodes read match inputs and tensors the rewrite computed before; the match's "
                            "tensors are removed");
  }
  if (use == 'y' && P->side == SIDE_MATCH && x->input >= 0) {
    FAIL(P, t, "a match must yield outputs of its operators; '%s' is an input", s);
    return pcgc__rp_hint(P, "yield the tensors the pattern computes");
  }
  *out = k;
  return PCGC_OK;
}

/* The hint for an unknown attribute key of op: did-you-mean, or the list. */
pcgc_status pcgc__rp_attr_key_hint(const parser *P, pcgc_op_kind op, const char *key) {
  pcgc__suggest sg;
  pcgc__suggest_init(&sg, key);
  char names[256] = "";
  size_t len = 0;
  for (int i = 0; i < pcgc_op_num_attrs(op) && len < sizeof names - 32; i++) {
    pcgc__suggest_add(&sg, pcgc_op_attr(op, i)->name);
    len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", pcgc_op_attr(op, i)->name);
  }
  if (pcgc__suggest_best(&sg)) return pcgc__rp_hint(P, "did you mean '%s'?", pcgc__suggest_best(&sg));
  if (!names[0]) return pcgc__rp_hint(P, "%s has no attributes", pcgc_op_name(op));
  return pcgc__rp_hint(P, "the attributes of %s: %s", pcgc_op_name(op), names);
}

/* ---------------------------------------------------------------- nodes */

/* Output count, split's sizes, and (rewrite) required attributes. */
pcgc_status pcgc__rp_check_node(parser *P, rnode *nd, const pcgc__rtok *op_tok, const int *out_tok) {
  const char *op = pcgc_op_name(nd->op);
  int want = -1;
  const char *why = "";
  if (nd->op != PCGC_OP_SPLIT) {
    want = pcgc_op_num_outputs(nd->op, NULL);
  } else {
    int sizes = pcgc_op_attr_index(nd->op, "sizes");
    for (int i = 0; i < nd->n_attrs; i++)
      if (nd->attrs[i].attr == sizes && nd->attrs[i].kind == RV_LIST) want = nd->attrs[i].n, why = " (one per size)";
    if (want < 0 && nd->copy_from >= 0) {
      bool overridden = false;
      for (int i = 0; i < nd->n_attrs; i++) overridden |= nd->attrs[i].attr == sizes;
      if (!overridden) {
        want = P->r->match.nodes[P->r->tensors[nd->copy_from].node].n_outs;
        why = " (as many as the split it copies)";
      }
    }
  }
  if (want >= 0 && nd->n_outs != want) {
    const pcgc__rtok *t = tok_at(P, out_tok[nd->n_outs > want ? want : 0]);
    FAIL(P, t, "%s has %d output%s%s, but %d name%s given", op, want, want == 1 ? "" : "s", why, nd->n_outs,
         nd->n_outs == 1 ? " is" : "s are");
    return pcgc__rp_hint(P, "name each output once; '_' ignores one");
  }
  bool any = false;
  for (int i = 0; i < nd->n_outs; i++) any |= nd->outs[i] >= 0;
  if (!any) {
    FAIL(P, op_tok, "every output of this %s node is '_'", op);
    return pcgc__rp_hint(P, "a node must compute a tensor that is read or yielded");
  }
  if (P->side != SIDE_REWRITE || nd->copy_from >= 0) return PCGC_OK;
  for (int a = 0; a < pcgc_op_num_attrs(nd->op); a++) {
    if (!pcgc_op_attr(nd->op, a)->required) continue;
    bool given = false;
    for (int i = 0; i < nd->n_attrs; i++) given |= nd->attrs[i].attr == a;
    if (!given) {
      FAIL(P, op_tok, "%s needs attribute '%s'", op, pcgc_op_attr(nd->op, a)->name);
      return pcgc__rp_hint(P, "give it as %s=..., or copy a match node's attributes with NAME.*",
                           pcgc_op_attr(nd->op, a)->name);
    }
  }
  return PCGC_OK;
}

/* ------------------------------------------------------- match and rule */

static bool is_bare_sym(const pcgc_rule *r, int32_t e, int32_t *sym) {
  if (e < 0 || e >= r->n_ex || r->ex[e].kind != RX_SYM) return false;
  *sym = r->ex[e].sym;
  return true;
}

pcgc_status pcgc__rules_validate_match(const pcgc__src *src, const pcgc_rule *r) {
  bool bound[PCGC_RULE_MAX_SYMS] = {false};
  int32_t y;
  for (int i = 0; i < r->n_inputs; i++) {
    const rtype *ty = r->tensors[r->inputs[i]].type;
    for (int d = 0; d < ty->n_dims; d++)
      if (is_bare_sym(r, ty->dims[d], &y)) bound[y] = true;
    for (int k = 0; k < ty->n_pitems; k++)
      if (is_bare_sym(r, ty->pitems[k].value, &y)) bound[y] = true;
  }
  for (int n = 0; n < r->match.n_nodes; n++) {
    const rnode *nd = &r->match.nodes[n];
    for (int a = 0; a < nd->n_attrs; a++) {
      const rattr *ra = &nd->attrs[a];
      if (ra->kind == RV_EXPR && is_bare_sym(r, ra->expr, &y)) bound[y] = true;
      for (int k = 0; ra->kind == RV_LIST && k < ra->n; k++)
        if (is_bare_sym(r, ra->list[k], &y)) bound[y] = true;
    }
  }
  for (int i = r->n_params; i < r->n_syms; i++) {
    const rsym *s = &r->syms[i];
    if (s->kind != RS_VAR || bound[i]) continue;
    pcgc__rules_fail(src, s->loc, (int)strlen(s->name),
                     "variable '%s' cannot be bound: it appears only inside an expression", s->name);
    pcgc_error_hint(src->err,
                    "the match binds a variable where it stands alone: a dim [%s], an item sum=%s, an "
                    "attribute axis=%s; bind it once that way, or use a new name and a where condition",
                    s->name, s->name, s->name);
    return PCGC_ERR_PARSE;
  }
  return PCGC_OK;
}

pcgc_status pcgc__rules_validate(const pcgc__src *src, const pcgc_rule *r) {
  bool used[PCGC_RULE_MAX_SYMS] = {false};
  for (int e = 0; e < r->n_ex; e++)
    if (r->ex[e].kind == RX_SYM && r->ex[e].sym >= 0 && r->ex[e].sym < r->n_syms) used[r->ex[e].sym] = true;
  for (int i = 0; i < r->n_params; i++) {
    if (used[i]) continue;
    const rsym *s = &r->syms[i];
    pcgc__rules_fail(src, s->loc, (int)strlen(s->name), "parameter '%s' is never used", s->name);
    pcgc_error_hint(src->err, "use it in the match, the where block or the rewrite, or remove it");
    return PCGC_ERR_PARSE;
  }

  /* who reads each tensor: match nodes, match yields, rewrite nodes and yields */
  bool read_match[PCGC_RULE_MAX_TENSORS] = {false}, read_rewrite[PCGC_RULE_MAX_TENSORS] = {false};
  const rside *sides[2] = {&r->match, &r->rewrite};
  for (int sd = 0; sd < 2; sd++) {
    bool *read = sd == 0 ? read_match : read_rewrite;
    for (int n = 0; n < sides[sd]->n_nodes; n++)
      for (int a = 0; a < sides[sd]->nodes[n].n_args; a++) read[sides[sd]->nodes[n].args[a]] = true;
    for (int k = 0; k < sides[sd]->n_yields; k++) read[sides[sd]->yields[k]] = true;
  }
  /* match yields are read as such; an input counts only as a match node's argument */
  for (int i = 0; i < r->n_tensors; i++) {
    const rtensor *t = &r->tensors[i];
    int len = (int)strlen(t->name);
    if (t->input >= 0) {
      bool arg = false;
      for (int n = 0; n < r->match.n_nodes; n++)
        for (int a = 0; a < r->match.nodes[n].n_args; a++) arg |= r->match.nodes[n].args[a] == i;
      if (arg) continue;
      pcgc__rules_fail(src, t->loc, len, "input '%s' is not read by any node of the match", t->name);
      pcgc_error_hint(src->err, "declare only the tensors the pattern's operators read");
      return PCGC_ERR_PARSE;
    }
    if (t->side == 0 && !read_match[i]) {
      pcgc__rules_fail(src, t->loc, len, "'%s' is computed by the match but neither read nor yielded", t->name);
      pcgc_error_hint(src->err, "yield it, read it in a later match node, or write '_' to ignore the output");
      return PCGC_ERR_PARSE;
    }
    if (t->side == 1 && !read_rewrite[i]) {
      pcgc__rules_fail(src, t->loc, len, "'%s' is computed by the rewrite but neither read nor yielded", t->name);
      pcgc_error_hint(src->err, "yield it, read it in a later rewrite node, or write '_' to ignore the output");
      return PCGC_ERR_PARSE;
    }
  }
  return PCGC_OK;
}
