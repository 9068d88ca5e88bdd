/*
 * test_parse.c — the rule-file reader (substitutions/rules_*.c, ruleset.c):
 * the parsed form of every construct of docs/rules.md (symbols and their
 * kinds, input types, nodes with their arguments, outputs and attribute
 * values, NAME.* copies, yields, conditions with their params_only flag,
 * expression trees with accurate source spans), the rule-set API (multi-rule
 * files, find, remove, parameters, load_dir in name order, rule names unique
 * across files, all-or-nothing loading), the shipped rules, every malformed
 * file of tests/data/bad-rules failing where its first line says, and the
 * limits (refused with a message, never a crash).
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/expect_header.h"
#include "rules_internal.h"
#include "substitutions.h"

#include "../common/check_main.h"

#ifndef PCGC_SOURCE_DIR
#error "PCGC_SOURCE_DIR must be defined to the source tree"
#endif

/* ------------------------------------------------------------- helpers */

static pcgc_ruleset *parse_ok(const char *text) {
  pcgc_error err = {0};
  pcgc_ruleset *rs = pcgc_ruleset_new();
  ck_assert_ptr_nonnull(rs);
  if (pcgc_ruleset_parse(rs, text, strlen(text), "test.rules", &err) != PCGC_OK) {
    pcgc_error_print(stderr, &err);
    ck_abort_msg("rules do not parse: %d:%d: %s", err.line, err.col, err.message);
  }
  return rs;
}

/* Parses `text`, which must fail at line:col with `msg` in the message and
 * `hint` (if not NULL) in the hint, adding nothing to a fresh set. Reports
 * every mismatch on stderr and counts them in `mismatches`, so that one run
 * shows them all. */
static int mismatches;
static void expect_error(const char *text, int line, int col, const char *msg, const char *hint) {
  pcgc_error err = {0};
  pcgc_ruleset *rs = pcgc_ruleset_new();
  pcgc_status s = pcgc_ruleset_parse(rs, text, strlen(text), "test.rules", &err);
  bool ok = s != PCGC_OK && pcgc_ruleset_size(rs) == 0 && err.line == line && err.col == col &&
            strstr(err.message, msg) && strcmp(err.file, "test.rules") == 0 && err.hint[0] &&
            (!hint || strstr(err.hint, hint));
  if (!ok) {
    fprintf(stderr, "expected %d:%d '%s' (hint '%s'), got status %d at %d:%d: '%s' (hint '%s')\n", line, col, msg,
            hint ? hint : "", s, err.line, err.col, err.message, err.hint);
    mismatches++;
  }
  pcgc_ruleset_free(rs);
}

/* Parses `text`, which must fail with `msg` somewhere in the message. */
static void expect_refused(const char *text, const char *msg) {
  pcgc_error err = {0};
  pcgc_ruleset *rs = pcgc_ruleset_new();
  ck_assert_int_ne(pcgc_ruleset_parse(rs, text, strlen(text), "test.rules", &err), PCGC_OK);
  ck_assert_msg(strstr(err.message, msg) != NULL, "message '%s' lacks '%s'", err.message, msg);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 0);
  pcgc_ruleset_free(rs);
}

static const pcgc_rule *rule(const pcgc_ruleset *rs, const char *name) {
  const pcgc_rule *r = pcgc_ruleset_find(rs, name);
  ck_assert_msg(r != NULL, "no rule %s", name);
  return r;
}

static int tensor(const pcgc_rule *r, const char *name) {
  for (int i = 0; i < r->n_tensors; i++)
    if (strcmp(r->tensors[i].name, name) == 0) return i;
  ck_abort_msg("no tensor %s", name);
  return -1;
}

static int sym(const pcgc_rule *r, const char *name) {
  for (int i = 0; i < r->n_syms; i++)
    if (strcmp(r->syms[i].name, name) == 0) return i;
  ck_abort_msg("no symbol %s", name);
  return -1;
}

static int attr_index(pcgc_op_kind op, const char *name) {
  int a = pcgc_op_attr_index(op, name);
  ck_assert_msg(a >= 0, "%s has no attribute %s", pcgc_op_name(op), name);
  return a;
}

/* The attribute `name` given on node n, or NULL. */
static const rattr *attr(const rnode *n, const char *name) {
  int a = attr_index(n->op, name);
  for (int i = 0; i < n->n_attrs; i++)
    if (n->attrs[i].attr == a) return &n->attrs[i];
  return NULL;
}

/* Expression e in prefix form, independent of expr.c: "(% B d)", "size(x -1)". */
static void fmt(const pcgc_rule *r, int32_t e, char *buf, size_t n) {
  ck_assert_msg(e >= 0 && e < r->n_ex, "expression %d out of range", e);
  const rx *x = &r->ex[e];
  char a[256] = "", b[256] = "";
  static const char ops[] = {[RX_ADD] = '+', [RX_SUB] = '-', [RX_MUL] = '*', [RX_DIV] = '/', [RX_MOD] = '%'};
  switch (x->kind) {
  case RX_INT: snprintf(buf, n, "%lld", (long long)x->v); break;
  case RX_SYM: snprintf(buf, n, "%s", r->syms[x->sym].name); break;
  case RX_ATTR: snprintf(buf, n, "%s.%d", r->tensors[x->tensor].name, x->attr); break;
  case RX_ATTR_AT:
    fmt(r, x->a, a, sizeof a);
    snprintf(buf, n, "%s.%d[%s]", r->tensors[x->tensor].name, x->attr, a);
    break;
  case RX_RANK: snprintf(buf, n, "rank(%s)", r->tensors[x->tensor].name); break;
  case RX_SIZE:
    fmt(r, x->a, a, sizeof a);
    snprintf(buf, n, "size(%s %s)", r->tensors[x->tensor].name, a);
    break;
  case RX_NEG:
    fmt(r, x->a, a, sizeof a);
    snprintf(buf, n, "(- %s)", a);
    break;
  default:
    fmt(r, x->a, a, sizeof a);
    fmt(r, x->b, b, sizeof b);
    snprintf(buf, n, "(%c %s %s)", ops[x->kind], a, b);
  }
}

static void assert_expr(const pcgc_rule *r, int32_t e, const char *want) {
  char buf[512];
  fmt(r, e, buf, sizeof buf);
  ck_assert_msg(strcmp(buf, want) == 0, "expression is %s, expected %s", buf, want);
}

static void assert_loc(pcgc_srcloc loc, int len, int line, int col, int want_len) {
  ck_assert_msg(loc.line == line && loc.col == col && len == want_len, "span %d:%d+%d, expected %d:%d+%d", loc.line,
                loc.col, len, line, col, want_len);
}

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* ------------------------------------------------------ the parsed form */

static const char *fusion_text = "# Fuse a linear layer and the ReLU after it.\n"
                                 "rule fuse_linear_relu {\n"
                                 "  match {\n"
                                 "    input x, w, b;\n"
                                 "    y = linear(x, w, b, act=none);\n"
                                 "    r = relu(y);\n"
                                 "    yield r;\n"
                                 "  }\n"
                                 "  rewrite {\n"
                                 "    f = linear(x, w, b, y.*, act=relu);\n"
                                 "    yield f;\n"
                                 "  }\n"
                                 "}\n";

START_TEST(fusion_rule) {
  pcgc_ruleset *rs = parse_ok(fusion_text);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 1);
  const pcgc_rule *r = rule(rs, "fuse_linear_relu");
  ck_assert_ptr_eq(pcgc_ruleset_rule(rs, 0), r);
  ck_assert_str_eq(pcgc_rule_name(r), "fuse_linear_relu");
  ck_assert_str_eq(pcgc_rule_loc(r).file, "test.rules");
  ck_assert_int_eq(pcgc_rule_loc(r).line, 2);
  ck_assert_int_eq(pcgc_rule_loc(r).col, 6);
  ck_assert_int_eq(pcgc_rule_num_params(r), 0);
  ck_assert_int_eq(r->n_syms, 0);
  ck_assert_int_eq(r->n_conds, 0);
  /* tensors: the inputs, the match outputs, the rewrite output, in order */
  ck_assert_int_eq(r->n_tensors, 6);
  const char *names[] = {"x", "w", "b", "y", "r", "f"};
  for (int i = 0; i < 6; i++) ck_assert_str_eq(r->tensors[i].name, names[i]);
  ck_assert_int_eq(r->n_inputs, 3);
  for (int i = 0; i < 3; i++) {
    const rtensor *t = &r->tensors[r->inputs[i]];
    ck_assert_int_eq(r->inputs[i], i);
    ck_assert_int_eq(t->input, i);
    ck_assert_int_eq(t->node, -1);
    ck_assert_int_eq(t->side, 0);
    ck_assert_int_eq(t->type->dtype, RT_DTYPE_ANY);
    ck_assert(!t->type->has_shape);
    ck_assert_int_eq(t->type->ellipsis_at, -1);
    ck_assert_int_eq(t->type->n_pitems, 0);
  }
  const rtensor *y = &r->tensors[3], *rr = &r->tensors[4], *f = &r->tensors[5];
  ck_assert(y->side == 0 && y->node == 0 && y->slot == 0 && y->input == -1);
  ck_assert(rr->side == 0 && rr->node == 1 && rr->slot == 0);
  ck_assert(f->side == 1 && f->node == 0 && f->slot == 0 && f->input == -1);
  ck_assert_int_eq(y->loc.line, 5);
  ck_assert_int_eq(y->loc.col, 5);

  ck_assert_int_eq(r->match.n_nodes, 2);
  const rnode *lin = &r->match.nodes[0], *relu = &r->match.nodes[1];
  ck_assert_int_eq(lin->op, PCGC_OP_LINEAR);
  ck_assert_int_eq(lin->n_args, 3);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(lin->args[i], i);
  ck_assert_int_eq(lin->n_outs, 1);
  ck_assert_int_eq(lin->outs[0], 3);
  ck_assert_int_eq(lin->copy_from, -1);
  assert_loc(lin->loc, lin->len, 5, 9, 6);
  ck_assert_int_eq(lin->n_attrs, 1);
  const rattr *act = attr(lin, "act");
  ck_assert_ptr_nonnull(act);
  ck_assert_int_eq(act->kind, RV_ENUM);
  ck_assert_int_eq(act->ival, PCGC_ACT_NONE);
  assert_loc(act->loc, act->len, 5, 25, 8);
  ck_assert_int_eq(relu->op, PCGC_OP_RELU);
  ck_assert_int_eq(relu->n_args, 1);
  ck_assert_int_eq(relu->args[0], 3);
  ck_assert_int_eq(relu->n_attrs, 0);
  ck_assert_int_eq(r->match.n_yields, 1);
  ck_assert_int_eq(r->match.yields[0], 4);
  ck_assert_int_eq(r->match.yield_loc.line, 7);

  ck_assert_int_eq(r->rewrite.n_nodes, 1);
  const rnode *fl = &r->rewrite.nodes[0];
  ck_assert_int_eq(fl->op, PCGC_OP_LINEAR);
  ck_assert_int_eq(fl->n_args, 3);
  ck_assert_int_eq(fl->copy_from, 3);
  ck_assert_int_eq(fl->n_attrs, 1);
  ck_assert_int_eq(attr(fl, "act")->kind, RV_ENUM);
  ck_assert_int_eq(attr(fl, "act")->ival, PCGC_ACT_RELU);
  ck_assert_int_eq(r->rewrite.n_yields, 1);
  ck_assert_int_eq(r->rewrite.yields[0], 5);
  pcgc_ruleset_free(rs);
}
END_TEST

START_TEST(parallel_rule) {
  pcgc_ruleset *rs = parse_ok("rule partition_linear_batch(d: degree) {\n"
                              "  match {\n"
                              "    input x: [B, ...R], w;\n"
                              "    y = linear(x, w);\n"
                              "    yield y;\n"
                              "  }\n"
                              "  where { B % d == 0; }\n"
                              "  rewrite {\n"
                              "    xp = partition(x, dim=0, degree=d);\n"
                              "    wr = replicate(w, degree=d);\n"
                              "    yp = linear(xp, wr, y.*);\n"
                              "    yc = combine(yp, dim=0, degree=d);\n"
                              "    yield yc;\n"
                              "  }\n"
                              "}\n");
  const pcgc_rule *r = rule(rs, "partition_linear_batch");
  ck_assert_int_eq(pcgc_rule_num_params(r), 1);
  ck_assert_str_eq(pcgc_rule_param_name(r, 0), "d");
  ck_assert(pcgc_rule_param_is_degree(r, 0));
  ck_assert_ptr_null(pcgc_rule_param_name(r, 1));
  /* params first, then variables and ellipses in order of appearance */
  ck_assert_int_eq(r->n_params, 1);
  ck_assert_int_eq(r->n_syms, 3);
  ck_assert_int_eq(sym(r, "d"), 0);
  ck_assert_int_eq(r->syms[0].kind, RS_DEGREE);
  ck_assert_int_eq(sym(r, "B"), 1);
  ck_assert_int_eq(r->syms[1].kind, RS_VAR);
  ck_assert_int_eq(r->syms[1].loc.line, 3);
  ck_assert_int_eq(r->syms[1].loc.col, 15);
  ck_assert_int_eq(sym(r, "R"), 2);
  ck_assert_int_eq(r->syms[2].kind, RS_ELLIPSIS);

  const rtype *tx = r->tensors[tensor(r, "x")].type;
  ck_assert(tx->has_shape);
  ck_assert_int_eq(tx->n_dims, 1);
  assert_expr(r, tx->dims[0], "B");
  ck_assert_int_eq(tx->ellipsis_at, 1);
  ck_assert_int_eq(tx->ellipsis_sym, 2);
  ck_assert(!r->tensors[tensor(r, "w")].type->has_shape);

  ck_assert_int_eq(r->n_conds, 1);
  const rcond *c = &r->conds[0];
  ck_assert_int_eq(c->op, RC_EQ);
  assert_expr(r, c->a, "(% B d)");
  assert_expr(r, c->b, "0");
  ck_assert(!c->params_only);
  assert_loc(c->loc, c->len, 7, 11, 10);

  ck_assert_int_eq(r->rewrite.n_nodes, 4);
  const rnode *p = &r->rewrite.nodes[0];
  ck_assert_int_eq(p->op, PCGC_OP_PARTITION);
  ck_assert_int_eq(p->args[0], tensor(r, "x"));
  ck_assert_int_eq(attr(p, "dim")->kind, RV_EXPR);
  assert_expr(r, attr(p, "dim")->expr, "0");
  assert_expr(r, attr(p, "degree")->expr, "d");
  const rnode *yp = &r->rewrite.nodes[2];
  ck_assert_int_eq(yp->args[0], tensor(r, "xp"));
  ck_assert_int_eq(yp->args[1], tensor(r, "wr"));
  ck_assert_int_eq(yp->copy_from, tensor(r, "y"));
  ck_assert_int_eq(yp->n_attrs, 0);
  ck_assert_int_eq(r->rewrite.yields[0], tensor(r, "yc"));
  ck_assert_int_eq(r->tensors[tensor(r, "yc")].side, 1);
  ck_assert_int_eq(r->tensors[tensor(r, "yc")].node, 3);
  pcgc_ruleset_free(rs);
}
END_TEST

START_TEST(types_and_items) {
  pcgc_ruleset *rs = parse_ok("rule t(d: degree, k: dim) {\n"
                              "  match {\n"
                              "    input a: f32[N, ...R, M]{deg[k]=d, sum=S, rep=1, micro=U},\n"
                              "          b: float, c: int[], e: i64{rep=P}, g: [...R, N * 2], h: bf16;\n"
                              "    y = concat(a, b, c, e, g, h, axis=-1);\n"
                              "    yield y;\n"
                              "  }\n"
                              "  where { S + P >= 2; }\n"
                              "  rewrite { yield a; }\n"
                              "}\n");
  const pcgc_rule *r = rule(rs, "t");
  ck_assert_int_eq(r->n_params, 2);
  ck_assert_int_eq(r->syms[1].kind, RS_DIM);
  ck_assert(!pcgc_rule_param_is_degree(r, 1));
  ck_assert_str_eq(pcgc_rule_param_name(r, 1), "k");
  /* N R M S U P in order of first appearance after the parameters */
  const char *order[] = {"d", "k", "N", "R", "M", "S", "U", "P"};
  ck_assert_int_eq(r->n_syms, 8);
  for (int i = 0; i < 8; i++) ck_assert_str_eq(r->syms[i].name, order[i]);
  ck_assert_int_eq(r->syms[3].kind, RS_ELLIPSIS);

  const rtype *ta = r->tensors[tensor(r, "a")].type;
  ck_assert_int_eq(ta->dtype, PCGC_F32);
  ck_assert_int_eq(ta->n_dims, 2);
  ck_assert_int_eq(ta->ellipsis_at, 1);
  ck_assert_int_eq(ta->ellipsis_sym, 3);
  assert_expr(r, ta->dims[0], "N");
  assert_expr(r, ta->dims[1], "M");
  ck_assert_int_eq(ta->n_pitems, 4);
  ck_assert_int_eq(ta->pitems[0].kind, RP_DEG);
  assert_expr(r, ta->pitems[0].index, "k");
  assert_expr(r, ta->pitems[0].value, "d");
  ck_assert_int_eq(ta->pitems[1].kind, RP_SUM);
  ck_assert_int_eq(ta->pitems[1].index, -1);
  assert_expr(r, ta->pitems[1].value, "S");
  ck_assert_int_eq(ta->pitems[2].kind, RP_REP);
  assert_expr(r, ta->pitems[2].value, "1");
  ck_assert_int_eq(ta->pitems[3].kind, RP_MICRO);
  assert_expr(r, ta->pitems[3].value, "U");
  ck_assert_int_eq(ta->pitems[3].loc.line, 3);
  ck_assert_int_eq(ta->pitems[3].loc.col, 54);

  const rtype *tb = r->tensors[tensor(r, "b")].type;
  ck_assert_int_eq(tb->dtype, RT_DTYPE_FLOAT);
  ck_assert(!tb->has_shape);
  const rtype *tc = r->tensors[tensor(r, "c")].type;
  ck_assert_int_eq(tc->dtype, RT_DTYPE_INT);
  ck_assert(tc->has_shape);
  ck_assert_int_eq(tc->n_dims, 0);
  ck_assert_int_eq(tc->ellipsis_at, -1);
  const rtype *te = r->tensors[tensor(r, "e")].type;
  ck_assert_int_eq(te->dtype, PCGC_I64);
  ck_assert(!te->has_shape);
  ck_assert_int_eq(te->n_pitems, 1);
  const rtype *tg = r->tensors[tensor(r, "g")].type;
  ck_assert_int_eq(tg->dtype, RT_DTYPE_ANY);
  ck_assert_int_eq(tg->ellipsis_at, 0);
  ck_assert_int_eq(tg->ellipsis_sym, 3); /* the same ...R */
  assert_expr(r, tg->dims[0], "(* N 2)");
  ck_assert_int_eq(r->tensors[tensor(r, "h")].type->dtype, PCGC_BF16);

  const rnode *cc = &r->match.nodes[0];
  ck_assert_int_eq(cc->n_args, 6);
  assert_expr(r, attr(cc, "axis")->expr, "(- 1)");
  ck_assert(!r->conds[0].params_only);
  /* a rewrite that only yields a match input */
  ck_assert_int_eq(r->rewrite.n_nodes, 0);
  ck_assert_int_eq(r->rewrite.yields[0], tensor(r, "a"));
  pcgc_ruleset_free(rs);
}
END_TEST

START_TEST(attribute_values) {
  pcgc_ruleset *rs = parse_ok("rule conv {\n"
                              "  match {\n"
                              "    input x, w;\n"
                              "    y = conv2d(x, w, stride=2, padding=[p, q], act=relu, groups=G);\n"
                              "    z = conv2d(y, w, stride=y.stride, dilation=y.stride[1], act=y.act);\n"
                              "    yield z;\n"
                              "  }\n"
                              "  rewrite {\n"
                              "    t = conv2d(x, w, z.*, padding=[p + 1, q * G - 1], stride=y.stride);\n"
                              "    yield t;\n"
                              "  }\n"
                              "}\n"
                              "rule scalars {\n"
                              "  match {\n"
                              "    input x, a, b;\n"
                              "    s = scalar_mul(x, scalar=-1.5);\n"
                              "    u = dropout(s, rate=0);\n"
                              "    m = batch_matmul(a, b, transpose_b=true);\n"
                              "    g = gelu(u, approximate=false);\n"
                              "    yield g, m;\n"
                              "  }\n"
                              "  rewrite {\n"
                              "    s2 = scalar_mul(x, scalar=s.scalar);\n"
                              "    g2 = gelu(s2, approximate=g.approximate);\n"
                              "    m2 = batch_matmul(a, b, transpose_b=m.transpose_b);\n"
                              "    yield g2, m2;\n"
                              "  }\n"
                              "}\n"
                              "rule boolvar {\n"
                              "  match { input x; g = gelu(x, approximate=c); yield g; }\n"
                              "  where { c == 0; }\n"
                              "  rewrite { g2 = gelu(x, approximate=c); yield g2; }\n"
                              "}\n"
                              "rule splits {\n"
                              "  match {\n"
                              "    input x;\n"
                              "    a, _, c = split(x, axis=0, sizes=[H, H, H]);\n"
                              "    s = add(a, c);\n"
                              "    yield s;\n"
                              "  }\n"
                              "  rewrite {\n"
                              "    t1, _ = split(x, axis=0, sizes=[H, 2 * H]);\n"
                              "    u1, u2 = split(t1, a.*, sizes=[H, H]);\n"
                              "    v = mul(u1, u2);\n"
                              "    yield v;\n"
                              "  }\n"
                              "}\n");
  ck_assert_int_eq(pcgc_ruleset_size(rs), 4);
  ck_assert_str_eq(pcgc_rule_name(pcgc_ruleset_rule(rs, 3)), "splits");

  const pcgc_rule *r = rule(rs, "conv");
  const rnode *y = &r->match.nodes[0], *z = &r->match.nodes[1];
  ck_assert_int_eq(attr(y, "stride")->kind, RV_EXPR);
  assert_expr(r, attr(y, "stride")->expr, "2");
  const rattr *pad = attr(y, "padding");
  ck_assert_int_eq(pad->kind, RV_LIST);
  ck_assert_int_eq(pad->n, 2);
  assert_expr(r, pad->list[0], "p");
  assert_expr(r, pad->list[1], "q");
  ck_assert_int_eq(attr(y, "act")->kind, RV_ENUM);
  ck_assert_int_eq(attr(y, "act")->ival, PCGC_ACT_RELU);
  assert_expr(r, attr(y, "groups")->expr, "G");
  ck_assert_int_eq(r->syms[sym(r, "G")].kind, RS_VAR);
  ck_assert_ptr_null(attr(y, "dilation"));
  int yi = tensor(r, "y");
  int stride = attr_index(PCGC_OP_CONV2D, "stride");
  const rx *cp = &r->ex[attr(z, "stride")->expr];
  ck_assert_int_eq(cp->kind, RX_ATTR); /* a whole-list copy */
  ck_assert_int_eq(cp->tensor, yi);
  ck_assert_int_eq(cp->attr, stride);
  char want[64];
  snprintf(want, sizeof want, "y.%d[1]", stride);
  assert_expr(r, attr(z, "dilation")->expr, want);
  const rx *ac = &r->ex[attr(z, "act")->expr];
  ck_assert_int_eq(attr(z, "act")->kind, RV_EXPR);
  ck_assert_int_eq(ac->kind, RX_ATTR);
  ck_assert_int_eq(ac->attr, attr_index(PCGC_OP_CONV2D, "act"));
  const rnode *t = &r->rewrite.nodes[0];
  ck_assert_int_eq(t->copy_from, tensor(r, "z"));
  ck_assert_int_eq(t->n_attrs, 2);
  assert_expr(r, attr(t, "padding")->list[0], "(+ p 1)");
  assert_expr(r, attr(t, "padding")->list[1], "(- (* q G) 1)");

  r = rule(rs, "scalars");
  const rnode *s = &r->match.nodes[0];
  ck_assert_int_eq(attr(s, "scalar")->kind, RV_FLOAT);
  ck_assert(attr(s, "scalar")->f == -1.5);
  ck_assert_int_eq(attr(&r->match.nodes[1], "rate")->kind, RV_FLOAT);
  ck_assert(attr(&r->match.nodes[1], "rate")->f == 0.0);
  ck_assert_int_eq(attr(&r->match.nodes[2], "transpose_b")->kind, RV_BOOL);
  ck_assert_int_eq(attr(&r->match.nodes[2], "transpose_b")->ival, 1);
  ck_assert_int_eq(attr(&r->match.nodes[3], "approximate")->ival, 0);
  for (int i = 0; i < 3; i++) {
    const rattr *a = &r->rewrite.nodes[i].attrs[0];
    ck_assert_int_eq(a->kind, RV_EXPR);
    ck_assert_int_eq(r->ex[a->expr].kind, RX_ATTR);
  }
  ck_assert_int_eq(r->ex[r->rewrite.nodes[0].attrs[0].expr].tensor, tensor(r, "s"));
  ck_assert_int_eq(r->match.n_yields, 2);
  ck_assert_int_eq(r->rewrite.n_yields, 2);

  /* a bool attribute bound to a variable (0 or 1) in the match, read in the rewrite */
  r = rule(rs, "boolvar");
  ck_assert_int_eq(r->syms[sym(r, "c")].kind, RS_VAR);
  ck_assert_int_eq(attr(&r->match.nodes[0], "approximate")->kind, RV_EXPR);
  assert_expr(r, attr(&r->match.nodes[0], "approximate")->expr, "c");
  ck_assert_int_eq(attr(&r->rewrite.nodes[0], "approximate")->kind, RV_EXPR);
  assert_expr(r, attr(&r->rewrite.nodes[0], "approximate")->expr, "c");

  r = rule(rs, "splits");
  const rnode *sp = &r->match.nodes[0];
  ck_assert_int_eq(sp->n_outs, 3);
  ck_assert_int_eq(sp->outs[0], tensor(r, "a"));
  ck_assert_int_eq(sp->outs[1], -1);
  ck_assert_int_eq(sp->outs[2], tensor(r, "c"));
  ck_assert_int_eq(r->tensors[tensor(r, "c")].slot, 2);
  ck_assert_int_eq(attr(sp, "sizes")->n, 3);
  ck_assert_int_eq(r->rewrite.nodes[0].outs[1], -1);
  ck_assert_int_eq(r->rewrite.nodes[1].copy_from, tensor(r, "a"));
  ck_assert_int_eq(r->rewrite.nodes[1].n_outs, 2);
  pcgc_ruleset_free(rs);
}
END_TEST

START_TEST(conditions) {
  pcgc_ruleset *rs = parse_ok("rule w(d: degree, k: dim) {\n"
                              "  match {\n"
                              "    input x, f;\n"
                              "    y = conv2d(x, f, groups=G);\n"
                              "    yield y;\n"
                              "  }\n"
                              "  where {\n"
                              "    k < rank(x);\n"
                              "    d >= 2;\n"
                              "    size(x, -1) % d == 0;\n"
                              "    y.stride[0] != (G - 1) * -d;\n"
                              "    d * 2 <= 8 / (1 + 1);\n"
                              "    y.groups > 1;\n"
                              "    size(y, k) == size(f, 0);\n"
                              "  }\n"
                              "  rewrite { t = conv2d(x, f, y.*); yield t; }\n"
                              "}\n");
  const pcgc_rule *r = rule(rs, "w");
  ck_assert_int_eq(r->n_conds, 7);
  const rc_op ops[] = {RC_LT, RC_GE, RC_EQ, RC_NE, RC_LE, RC_GT, RC_EQ};
  const bool params_only[] = {false, true, false, false, true, false, false};
  for (int i = 0; i < 7; i++) {
    ck_assert_int_eq(r->conds[i].op, ops[i]);
    ck_assert_msg(r->conds[i].params_only == params_only[i], "condition %d: params_only", i);
  }
  assert_expr(r, r->conds[0].a, "k");
  assert_expr(r, r->conds[0].b, "rank(x)");
  assert_expr(r, r->conds[2].a, "(% size(x (- 1)) d)");
  char want[128];
  snprintf(want, sizeof want, "y.%d[0]", attr_index(PCGC_OP_CONV2D, "stride"));
  assert_expr(r, r->conds[3].a, want);
  assert_expr(r, r->conds[3].b, "(* (- G 1) (- d))");
  assert_expr(r, r->conds[4].b, "(/ 8 (+ 1 1))");
  snprintf(want, sizeof want, "y.%d", attr_index(PCGC_OP_CONV2D, "groups"));
  assert_expr(r, r->conds[5].a, want);
  assert_expr(r, r->conds[6].b, "size(f 0)");
  /* a condition's span covers its source text, parentheses included
   * (expressions keep no position: 16 bytes each, issue 17) */
  assert_loc(r->conds[2].loc, r->conds[2].len, 10, 5, 20);
  assert_loc(r->conds[3].loc, r->conds[3].len, 11, 5, 27);
  ck_assert_uint_le(sizeof(rx), 16);
  pcgc_ruleset_free(rs);
}
END_TEST

/* A variable first seen inside an expression binds where it later stands alone. */
START_TEST(late_binding) {
  pcgc_ruleset *rs = parse_ok("rule v {\n"
                              "  match {\n"
                              "    input x: [K * 2, M], w: [M, K];\n"
                              "    y = matmul(x, w);\n"
                              "    yield y;\n"
                              "  }\n"
                              "  rewrite { t = matmul(x, w); u = reshape(t, shape=[K * 2, K]); yield u; }\n"
                              "}\n");
  const pcgc_rule *r = rule(rs, "v");
  int k = sym(r, "K");
  ck_assert_int_eq(r->syms[k].kind, RS_VAR);
  ck_assert_int_eq(r->syms[k].loc.line, 3);
  ck_assert_int_eq(r->syms[k].loc.col, 15);
  const rtype *tw = r->tensors[tensor(r, "w")].type;
  assert_expr(r, tw->dims[1], "K");
  assert_expr(r, r->tensors[tensor(r, "x")].type->dims[0], "(* K 2)");
  const rattr *shape = attr(&r->rewrite.nodes[1], "shape");
  ck_assert_int_eq(shape->kind, RV_LIST);
  assert_expr(r, shape->list[0], "(* K 2)");
  assert_expr(r, shape->list[1], "K");
  pcgc_ruleset_free(rs);
}
END_TEST

START_TEST(shipped_rules) {
  pcgc_error err = {0};
  pcgc_ruleset *rs = pcgc_ruleset_new();
  if (pcgc_ruleset_load_dir(rs, PCGC_SOURCE_DIR "/rules", &err) != PCGC_OK) {
    pcgc_error_print(stderr, &err);
    ck_abort_msg("shipped rules do not load: %s", err.message);
  }
  ck_assert_int_gt(pcgc_ruleset_size(rs), 0);
  for (int i = 0; i < pcgc_ruleset_size(rs); i++) {
    const pcgc_rule *r = pcgc_ruleset_rule(rs, i);
    ck_assert_int_eq(r->match.n_yields, r->rewrite.n_yields);
    ck_assert_int_gt(r->match.n_nodes, 0);
    ck_assert(has_suffix(r->loc.file, ".rules"));
    ck_assert_ptr_eq(pcgc_ruleset_find(rs, r->name), r);
  }
  pcgc_ruleset_free(rs);
}
END_TEST

/* ------------------------------------------------------------ the set */

static const char *three_rules =
    "rule one { match { input x; y = relu(x); yield y; } rewrite { t = relu(x); yield t; } }\n"
    "rule two(k: dim, d: degree) {\n"
    "  match { input x: [...R]; y = tanh(x); yield y; }\n"
    "  where { k < rank(x); d > 1; }\n"
    "  rewrite { t = tanh(x); yield t; }\n"
    "}\n"
    "rule three { match { input x; y = exp(x); yield y; } rewrite { t = exp(x); yield t; } }\n";

START_TEST(set_api) {
  pcgc_ruleset *rs = parse_ok(three_rules);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 3);
  ck_assert_str_eq(pcgc_rule_name(pcgc_ruleset_rule(rs, 0)), "one");
  ck_assert_str_eq(pcgc_rule_name(pcgc_ruleset_rule(rs, 1)), "two");
  ck_assert_str_eq(pcgc_rule_name(pcgc_ruleset_rule(rs, 2)), "three");
  ck_assert_ptr_null(pcgc_ruleset_rule(rs, 3));
  ck_assert_ptr_null(pcgc_ruleset_rule(rs, -1));
  ck_assert_ptr_null(pcgc_ruleset_find(rs, "four"));
  const pcgc_rule *two = rule(rs, "two");
  ck_assert_int_eq(pcgc_rule_num_params(two), 2);
  ck_assert_str_eq(pcgc_rule_param_name(two, 0), "k");
  ck_assert(!pcgc_rule_param_is_degree(two, 0));
  ck_assert(pcgc_rule_param_is_degree(two, 1));
  ck_assert_int_eq(pcgc_rule_loc(two).line, 2);
  ck_assert(!two->conds[0].params_only);
  ck_assert(two->conds[1].params_only);

  pcgc_ruleset_remove(rs, 1);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 2);
  ck_assert_ptr_null(pcgc_ruleset_find(rs, "two"));
  ck_assert_str_eq(pcgc_rule_name(pcgc_ruleset_rule(rs, 1)), "three");
  pcgc_ruleset_remove(rs, 7); /* out of range: nothing */
  ck_assert_int_eq(pcgc_ruleset_size(rs), 2);

  /* a removed rule's name may be used again */
  const char *again = "rule two { match { input x; y = relu(x); yield y; } rewrite { yield x; } }";
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_ruleset_parse(rs, again, strlen(again), "again.rules", &err), PCGC_OK);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 3);
  ck_assert_str_eq(pcgc_rule_loc(rule(rs, "two")).file, "again.rules");
  pcgc_ruleset_free(rs);

  /* NULL-tolerant accessors; an empty text is no rule */
  pcgc_ruleset_free(NULL);
  ck_assert_int_eq(pcgc_ruleset_size(NULL), 0);
  ck_assert_ptr_null(pcgc_ruleset_find(NULL, "x"));
  ck_assert_ptr_null(pcgc_rule_name(NULL));
  ck_assert_int_eq(pcgc_rule_num_params(NULL), 0);
  rs = pcgc_ruleset_new();
  ck_assert_int_eq(pcgc_ruleset_parse(rs, "", 0, NULL, NULL), PCGC_OK);
  ck_assert_int_eq(pcgc_ruleset_parse(rs, "# only a comment\n\n", 18, "c.rules", NULL), PCGC_OK);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 0);
  ck_assert_int_ne(pcgc_ruleset_parse(rs, "rule", 4, "c.rules", NULL), PCGC_OK);
  pcgc_ruleset_free(rs);
}
END_TEST

START_TEST(duplicate_names_across_texts) {
  pcgc_ruleset *rs = pcgc_ruleset_new();
  pcgc_error err = {0};
  const char *a = "\nrule same { match { input x; y = relu(x); yield y; } rewrite { yield x; } }\n";
  const char *b = "rule other { match { input x; y = tanh(x); yield y; } rewrite { yield x; } }\n"
                  "rule same { match { input x; y = exp(x); yield y; } rewrite { yield x; } }\n";
  ck_assert_int_eq(pcgc_ruleset_parse(rs, a, strlen(a), "one.rules", &err), PCGC_OK);
  ck_assert_int_eq(pcgc_ruleset_parse(rs, b, strlen(b), "two.rules", &err), PCGC_ERR_PARSE);
  ck_assert_str_eq(err.file, "two.rules");
  ck_assert_int_eq(err.line, 2);
  ck_assert_int_eq(err.col, 6);
  ck_assert_msg(strstr(err.message, "rule 'same' is already defined at one.rules:2:6"), "%s", err.message);
  ck_assert_str_eq(err.source_line, "rule same { match { input x; y = exp(x); yield y; } rewrite { yield x; } }");
  /* all or nothing: 'other' was not added */
  ck_assert_int_eq(pcgc_ruleset_size(rs), 1);
  ck_assert_ptr_null(pcgc_ruleset_find(rs, "other"));
  pcgc_ruleset_free(rs);
}
END_TEST

static void write_file(const char *dir, const char *name, const char *text) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
      remove_tree(path);
    else
      remove(path);
  }
  closedir(d);
  rmdir(dir);
}

START_TEST(load_dir) {
  char dir[] = "/tmp/pcgc_rules_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  pcgc_error err = {0};
  pcgc_ruleset *rs = pcgc_ruleset_new();
  /* an empty directory: no rules, no error */
  ck_assert_int_eq(pcgc_ruleset_load_dir(rs, dir, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 0);

  write_file(dir, "b.rules", "rule b1 { match { input x; y = relu(x); yield y; } rewrite { yield x; } }\n");
  write_file(dir, "a.rules",
             "rule a1 { match { input x; y = tanh(x); yield y; } rewrite { yield x; } }\n"
             "rule a2 { match { input x; y = exp(x); yield y; } rewrite { yield x; } }\n");
  write_file(dir, "c.txt", "not rules");
  write_file(dir, ".hidden.rules", "not rules either");
  char sub[4096];
  snprintf(sub, sizeof sub, "%s/d.rules", dir);
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  ck_assert_int_eq(pcgc_ruleset_load_dir(rs, dir, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 3);
  ck_assert_str_eq(pcgc_rule_name(pcgc_ruleset_rule(rs, 0)), "a1");
  ck_assert_str_eq(pcgc_rule_name(pcgc_ruleset_rule(rs, 1)), "a2");
  ck_assert_str_eq(pcgc_rule_name(pcgc_ruleset_rule(rs, 2)), "b1");
  ck_assert(has_suffix(pcgc_rule_loc(pcgc_ruleset_rule(rs, 0)).file, "/a.rules"));
  ck_assert(has_suffix(pcgc_rule_loc(pcgc_ruleset_rule(rs, 2)).file, "/b.rules"));
  ck_assert_int_eq(pcgc_rule_loc(pcgc_ruleset_rule(rs, 1)).line, 2);

  /* loading it again: every name is taken, the first file fails, nothing is added */
  ck_assert_int_eq(pcgc_ruleset_load_dir(rs, dir, &err), PCGC_ERR_PARSE);
  ck_assert(has_suffix(err.file, "/a.rules"));
  ck_assert_msg(strstr(err.message, "rule 'a1' is already defined at"), "%s", err.message);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 3);
  pcgc_ruleset_free(rs);

  /* a bad file late in the order: the files before it are not kept either */
  write_file(dir, "e.rules", "rule e1 { match { input x; y = relu(x) yield y; } rewrite { yield x; } }\n");
  rs = pcgc_ruleset_new();
  ck_assert_int_eq(pcgc_ruleset_load_dir(rs, dir, &err), PCGC_ERR_PARSE);
  ck_assert(has_suffix(err.file, "/e.rules"));
  ck_assert_int_eq(err.line, 1);
  ck_assert_int_eq(err.col, 39);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 0);
  pcgc_ruleset_free(rs);
  remove_tree(dir);

  /* a directory that does not exist */
  rs = pcgc_ruleset_new();
  ck_assert_int_eq(pcgc_ruleset_load_dir(rs, dir, &err), PCGC_ERR_IO);
  ck_assert_msg(strstr(err.message, dir) != NULL, "%s", err.message);
  ck_assert_int_eq(pcgc_ruleset_load_file(rs, "/nonexistent/x.rules", &err), PCGC_ERR_IO);
  pcgc_ruleset_free(rs);
}
END_TEST

/* ------------------------------------------------------------- errors */

START_TEST(bad_rules) {
  const char *dir = PCGC_SOURCE_DIR "/tests/data/bad-rules";
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "cannot open %s", dir);
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!has_suffix(e->d_name, ".rules")) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    int line, col;
    char want[512];
    expect_header(path, e->d_name, &line, &col, want, sizeof want);
    pcgc_error err = {0};
    pcgc_ruleset *rs = pcgc_ruleset_new();
    pcgc_status s = pcgc_ruleset_load_file(rs, path, &err);
    ck_assert_msg(s != PCGC_OK, "%s parsed without error", e->d_name);
    ck_assert_msg(err.line == line && err.col == col, "%s: expected the error at %d:%d, got %d:%d: %s", e->d_name, line,
                  col, err.line, err.col, err.message);
    ck_assert_msg(strstr(err.message, want) != NULL, "%s: message '%s' lacks '%s'", e->d_name, err.message, want);
    ck_assert_msg(err.hint[0] != '\0', "%s: no hint for '%s'", e->d_name, err.message);
    ck_assert_msg(err.source_line[0] != '\0', "%s: no source line", e->d_name);
    ck_assert_msg(strcmp(err.file, path) == 0, "%s: error names file '%s'", e->d_name, err.file);
    ck_assert_int_eq(pcgc_ruleset_size(rs), 0);
    pcgc_ruleset_free(rs);
    count++;
  }
  closedir(d);
  ck_assert_msg(count >= 24, "only %d malformed rule files in %s", count, dir);
}
END_TEST

/* Hints, did-you-mean and positions of errors not in the corpus. */
START_TEST(error_messages) {
  const char *head = "rule r {\n  match {\n    input x, w;\n";
  mismatches = 0;
  char buf[1024];
#define WITH(body) (snprintf(buf, sizeof buf, "%s%s", head, body), buf)
  expect_error(WITH("    y = lienar(x, w);\n    yield y;\n  }\n  rewrite { yield x; }\n}\n"), 4, 9,
               "unknown operator 'lienar'", "did you mean 'linear'?");
  expect_error(WITH("    y = linear(x, w, acts=relu);\n    yield y;\n  }\n  rewrite { yield x; }\n}\n"), 4, 22,
               "linear has no attribute 'acts'", "did you mean 'act'?");
  expect_error(WITH("    y = relu(x, w);\n    yield y;\n  }\n  rewrite { yield x; }\n}\n"), 4, 17,
               "too many tensor arguments for relu (it takes 1)", NULL);
  expect_error(WITH("    y = relu(x, act=relu);\n    yield y;\n  }\n  rewrite { yield x; }\n}\n"), 4, 17,
               "relu has no attribute 'act'", "relu has no attributes");
  expect_error(WITH("    y = linear(x, w, act=rleu);\n    yield y;\n  }\n  rewrite { yield x; }\n}\n"), 4, 26,
               "unknown act value 'rleu'", "did you mean 'relu'?");
  expect_error(WITH("    y = linear(x, w);\n    z = relu(yy);\n    yield z;\n  }\n  rewrite { yield x; }\n}\n"), 5, 14,
               "unknown tensor 'yy'", "did you mean 'y'?");
  expect_error(WITH("    y = linear(x, w, act=y.act);\n    yield y;\n  }\n  rewrite { yield x; }\n}\n"), 4, 26,
               "unknown tensor 'y'", NULL);
  expect_error(WITH("    y = linear(act=none, x, w);\n    yield y;\n  }\n  rewrite { yield x; }\n}\n"), 4, 26,
               "tensor argument 'x' after attributes", NULL);
  expect_error(
      WITH("    y = linear(x, w);\n    yield y;\n  }\n  rewrite { t = linear(x, w, act=y.actt); yield t; }\n}\n"), 7,
      36, "which has no attribute 'actt'", "did you mean 'act'?");
  expect_error(
      WITH("    y = linear(x, w);\n    yield y;\n  }\n  rewrite { t = linear(x, w, act=y.act + 1); yield t; }\n}\n"), 7,
      40, "a copied enum attribute stands alone", NULL);
  expect_error(WITH("    y = concat(x, w, axis=[1, 2]);\n    yield y;\n  }\n  rewrite { yield x; }\n}\n"), 4, 27,
               "takes one integer, not a list", NULL);
  expect_error(WITH("    y = concat(x, w, axis=true);\n    yield y;\n  }\n  rewrite { yield x; }\n}\n"), 4, 27,
               "takes an integer, not keyword 'true'", NULL);
  expect_error(WITH("    y = scalar_mul(x, scalar=k);\n    yield y;\n  }\n  rewrite { yield x; }\n}\n"), 4, 30,
               "takes a number, not 'k'", NULL);
  expect_error(WITH("    y = scalar_mul(x, scalar=1.5);\n    yield y;\n  }\n"
                    "  rewrite { t = gelu(x, approximate=y.scalar); yield t; }\n}\n"),
               7, 39, "their types differ", NULL);
  expect_error(
      WITH("    y = linear(x, w);\n    yield y;\n  }\n  rewrite { t = linear(x, w, act=relu, y.*); yield t; }\n}\n"), 7,
      40, "'y.*' after attributes", NULL);
  expect_error(WITH("    y = linear(x, w);\n    yield y;\n  }\n  rewrite { t = relu(x, x.); yield t; }\n}\n"), 7, 27,
               "expected '*' after '.', found ')'", NULL);
  expect_error(WITH("    y = gelu(x, approximate=ture);\n    yield y;\n  }\n  rewrite { yield x; }\n}\n"), 4, 29,
               "attribute 'approximate' of gelu takes true or false, not 'ture'", "did you mean 'true'?");
  expect_error(WITH("    y = gelu(x, approximate=c + 1);\n    yield y;\n  }\n  rewrite { yield x; }\n}\n"), 4, 31,
               "a bool attribute takes true, false, a variable or a copy; found '+'", NULL);
  expect_error(WITH("    y = gelu(x);\n    yield y;\n  }\n  rewrite { t = gelu(x, approximate=c); yield t; }\n}\n"), 7,
               37, "'c' is not bound", NULL);
  expect_error(
      WITH("    y = linear(x, w);\n    yield y;\n  }\n  rewrite { t = linear(x, w, y.*, y.*); yield t; }\n}\n"), 7, 35,
      "at most once", NULL);
  expect_error(WITH("    y = linear(x, w);\n    yield y, y;\n  }\n  rewrite { yield x, x; }\n}\n"), 5, 14,
               "'y' is yielded twice", NULL);
  expect_error(WITH("    y = linear(x, w);\n    yield y;\n    z = relu(y);\n  }\n  rewrite { yield x; }\n}\n"), 6, 5,
               "expected '}' after the match's yield", NULL);
  expect_error(WITH("    y = linear(x, w);\n    yield y;\n  }\n  rewrite { input q; yield x; }\n}\n"), 7, 13,
               "'input' in the rewrite", NULL);
  expect_error(WITH("    y = linear(x, w);\n    yield y;\n  }\n  rewrite { t = relu(x); yield t; }\n  extra\n}\n"), 8,
               3, "expected '}' to close the rule, found 'extra'", NULL);
  expect_error(WITH("    y = linear(x, w);\n    yield y;\n  }\n  rewrite { t = split(x, axis=0); yield t; }\n}\n"), 7,
               17, "split needs attribute 'sizes'", NULL);
  expect_error(WITH("    y = linear(x, w);\n    _ = relu(y);\n    yield y;\n  }\n  rewrite { yield x; }\n}\n"), 5, 9,
               "every output of this relu node is '_'", NULL);
  expect_error(WITH("    y = linear(x, w);\n    yield y;\n  }\n  rewrite { t = relu(x); yield _; }\n}\n"), 7, 32,
               "'_' cannot be read", NULL);
  expect_error(WITH("    y = linear(x, w);\n    yield y;\n  }\n  where { size(t, 0) > 1; }\n"
                    "  rewrite { t = relu(x); yield t; }\n}\n"),
               7, 16, "unknown tensor 't'", NULL);
  expect_error(
      WITH("    y = linear(x, w);\n    yield y;\n  }\n  rewrite { t = relu(x); u = relu(t, t.*); yield u; }\n}\n"), 7,
      38, "'t' is a tensor of the rewrite, not the output of a match node", NULL);
  expect_error(WITH("    y = linear(x, w);\n    yield y;\n  }\n  rewrite { t = relu(x); u = reshape(t, shape=[size(t, "
                    "0)]); yield u; }\n}\n"),
               7, 53, "computed by the rewrite; rank() and size() apply to tensors of the match", NULL);
  expect_error(WITH("    y = linear(x, w);\n    yield y;\n  }\n  where { x > 1; }\n  rewrite { yield x; }\n}\n"), 7, 11,
               "'x' is a tensor, not a number", NULL);
  expect_error(WITH("    y = linear(x, w);\n    yield y;\n  }\n  where { foo(x) > 1; }\n  rewrite { yield x; }\n}\n"),
               7, 11, "'foo' is not a function", NULL);
  expect_error(
      WITH("    y = linear(x, w);\n    yield y;\n  }\n  where { rank(x) > 1.5; }\n  rewrite { yield x; }\n}\n"), 7, 21,
      "a float cannot appear in an expression", NULL);
  expect_error(WITH("    y = linear(x, w);\n    yield y;\n  }\n  where { y.act.x > 1; }\n  rewrite { yield x; }\n}\n"),
               7, 16, "expected a comparison", NULL);
  expect_error(WITH("    y = linear(x, w);\n    yield y;\n  }\n  where { y.act[0] > 1; }\n  rewrite { yield x; }\n}\n"),
               7, 16, "attribute 'act' of linear is not a list", NULL);
  expect_error(WITH("    y = batchnorm(x);\n    yield y;\n  }\n  where { y.eps > 1; }\n  rewrite { yield x; }\n}\n"), 7,
               13, "'eps' is a float attribute", NULL);
  expect_error("rule r(d: degree) {\n  match { input x: [...d]; y = relu(x); yield y; }\n  rewrite { yield x; }\n}\n",
               2, 24, "'d' is already a degree parameter", NULL);
  expect_error("rule r {\n  match { input x: [...R], w: [R]; y = add(x, w); yield y; }\n  rewrite { yield x; }\n}\n", 2,
               32, "'R' stands for a list of dims", NULL);
  expect_error("rule r {\n  match { input x: [B], B; y = add(x, B); yield y; }\n  rewrite { yield x; }\n}\n", 2, 25,
               "name 'B' is already defined", "as a variable");
  expect_error("rule r {\n  match { input x: [B]; y = relu(x); yield y; }\n  rewrite { B = relu(x); yield B; }\n}\n", 3,
               13, "name 'B' is already defined", NULL);
  expect_error("rule r {\n  match { input x: [B]{sum=1, sum=2}; y = relu(x); yield y; }\n  rewrite { yield x; }\n}\n",
               2, 31, "parallel item 'sum' is given twice", NULL);
  expect_error("rule r {\n  match { input x: {summ=1}; y = relu(x); yield y; }\n  rewrite { yield x; }\n}\n", 2, 21,
               "unknown parallel-type item 'summ'", "did you mean 'sum'?");
  expect_error("rule r {\n  match { input x: ; y = relu(x); yield y; }\n  rewrite { yield x; }\n}\n", 2, 20,
               "expected a type after ':'", NULL);
  expect_error("rule r {\n  match { input x y; z = relu(x); yield z; }\n  rewrite { yield x; }\n}\n", 2, 19,
               "expected ',' or ';' after the input", NULL);
  expect_error("rule r\n  match { input x; y = relu(x); yield y; }\n}\n", 2, 3,
               "expected '(' or '{' after the rule name, found keyword 'match'", NULL);
  expect_error("rule r { where { } }\n", 1, 10, "expected 'match', found keyword 'where'", NULL);
  expect_error("rules r { }\n", 1, 1, "expected 'rule', found 'rules'", NULL);
  expect_error("rule match { }\n", 1, 6, "'match' is a keyword and cannot be used as a rule name", NULL);
  expect_error("rule r() { }\n", 1, 8, "expected a parameter name, found ')'", NULL);
  expect_error("rule r(d degree) { }\n", 1, 10, "expected ':' after the parameter name", NULL);
  expect_error("rule r {\n  match { input x; y = relu(x); yield y; }\n  where { 1 < 2 }\n  rewrite { yield x; }\n}\n",
               3, 16, "expected ';' after the condition, found '}'", NULL);
  expect_error("rule r {\n  match { input x; y = relu(x); yield y; }\n  rewrite { y2 = relu(x);\n", 3, 11,
               "'{' of the rewrite is never closed", NULL);
  expect_error("rule r {\n  match { input x: [(B; y = relu(x); yield y; }\n  rewrite { yield x; }\n}\n", 2, 23,
               "expected ')', found ';'", NULL);
  expect_error("rule r {\n  match { input x: [2x]; y = relu(x); yield y; }\n  rewrite { yield x; }\n}\n", 2, 21,
               "malformed number '2x'", NULL);
  expect_error(
      "rule r {\n  match { input x: [99999999999999999999]; y = relu(x); yield y; }\n  rewrite { yield x; }\n}\n", 2,
      21, "integer '99999999999999999999' is too large", NULL);
  expect_error("rule r {\n  match { input x: [B] ; y = relu(x); yield y; }\n  rewrite { yield x; }\n}\n\x01", 5, 1,
               "control character 0x01", NULL);
  expect_error(
      "rule r {\n  match { input x; y = relu(x); yield y; } # caf\xc3\xa9\n  rewrite { yield x; } \xc3\xa9\n}\n", 3, 24,
      "unexpected byte 0xC3", NULL);
  expect_error(
      "rule r {\n  match { input x; y = relu(x); yield y; }\n  where { rank(x) => 1; }\n  rewrite { yield x; }\n}\n", 3,
      19, "expected a comparison, found '='", "compare with '=='");
  expect_error(
      "rule r {\n  match { input x; y = relu(x); yield y; }\n  where { rank(x) & 1; }\n  rewrite { yield x; }\n}\n", 3,
      19, "unexpected character '&'", NULL);
#undef WITH
  ck_assert_msg(mismatches == 0, "%d errors differ from what is expected (listed on stderr)", mismatches);
}
END_TEST

/* Comments, CRLF line ends, a byte-order mark, tabs and no final newline. */
START_TEST(lexical_forms) {
  pcgc_ruleset *rs = parse_ok("\xEF\xBB\xBF# comment with bytes \xff\xfe\r\n"
                              "rule r{match{input\tx:f32[B,...R]{sum=1};y=relu(x);yield y;}\r\n"
                              "  where{B>=1;B<=1000;B!=3;}rewrite{yield x;}}");
  const pcgc_rule *r = rule(rs, "r");
  ck_assert_int_eq(r->loc.line, 2);
  ck_assert_int_eq(r->loc.col, 6);
  ck_assert_int_eq(r->n_conds, 3);
  ck_assert_int_eq(r->conds[2].op, RC_NE);
  assert_loc(r->conds[1].loc, r->conds[1].len, 3, 14, 7);
  pcgc_ruleset_free(rs);
  /* a BOM does not shift columns */
  mismatches = 0;
  expect_error("\xEF\xBB\xBFrule 1", 1, 6, "expected a rule name after 'rule', found number '1'", NULL);
  ck_assert_int_eq(mismatches, 0);
}
END_TEST

/* Every limit is refused with a message. */
START_TEST(limits) {
  size_t cap = 1 << 16;
  char *t = malloc(cap);
  ck_assert_ptr_nonnull(t);
  size_t n;
#define PUT(...) (n += (size_t)snprintf(t + n, cap - n, __VA_ARGS__))
  /* 17 match nodes */
  n = 0;
  PUT("rule r { match { input x0;");
  for (int i = 1; i <= 17; i++) PUT(" x%d = relu(x%d);", i, i - 1);
  PUT(" yield x17; } rewrite { yield x0; } }");
  expect_refused(t, "too many nodes in the match (at most 16)");
  /* 17 inputs */
  n = 0;
  PUT("rule r { match { input a0");
  for (int i = 1; i < 17; i++) PUT(", a%d", i);
  PUT("; y = concat(a0, axis=0); yield y; } rewrite { yield a0; } }");
  expect_refused(t, "too many inputs (at most 16)");
  /* 13 tensor arguments of concat */
  n = 0;
  PUT("rule r { match { input a; y = concat(a");
  for (int i = 1; i < 13; i++) PUT(", a");
  PUT(", axis=0); yield y; } rewrite { yield a; } }");
  expect_refused(t, "too many tensor arguments (at most 12 in a rule)");
  /* 33 symbols */
  n = 0;
  PUT("rule r { match { input a: [S0, S1, S2, S3, S4, S5], b: [S6, S7, S8, S9, S10, S11], c: [S12, S13, S14, S15, "
      "S16, S17], d: [S18, S19, S20, S21, S22, S23], e: [S24, S25, S26, S27, S28, S29], f: [S30, S31, S32]; "
      "y = concat(a, b, c, d, e, f, axis=0); yield y; } rewrite { yield a; } }");
  expect_refused(t, "too many symbols in rule 'r' (at most 32");
  /* 7 dims, 9 yields, 9 outputs, 5 parameters, 33 conditions, 9 items */
  expect_refused("rule r { match { input a: [1, 2, 3, 4, 5, 6, 7]; y = relu(a); yield y; } rewrite { yield a; } }",
                 "a shape has at most 6 dims");
  n = 0;
  PUT("rule r { match { input a; ");
  for (int i = 0; i < 9; i++) PUT("y%d = relu(a); ", i);
  PUT("yield y0, y1, y2, y3, y4, y5, y6, y7, y8; } rewrite { yield a; } }");
  expect_refused(t, "too many yields (at most 8)");
  expect_refused("rule r { match { input a; a0, a1, a2, a3, a4, a5, a6, a7, a8 = split(a, axis=0); yield a0; } "
                 "rewrite { yield a; } }",
                 "too many outputs (at most 8)");
  expect_refused("rule r(a: dim, b: dim, c: dim, d: dim, e: dim) { }", "too many parameters (at most 4)");
  n = 0;
  PUT("rule r { match { input a: [B]; y = relu(a); yield y; } where {");
  for (int i = 0; i < 33; i++) PUT(" B > %d;", i);
  PUT(" } rewrite { yield a; } }");
  expect_refused(t, "too many conditions (at most 32)");
  expect_refused("rule r { match { input a: {deg[0]=1, deg[1]=1, deg[2]=1, deg[3]=1, deg[4]=1, deg[5]=1, sum=1, rep=1, "
                 "micro=1}; y = relu(a); yield y; } rewrite { yield a; } }",
                 "too many parallel-type items (at most 8)");
  expect_refused(
      "rule r { match { input a; y = transpose(a, perm=[0, 1, 2, 3, 4, 5, 6]); yield y; } rewrite { yield a; } }",
      "too many entries in 'perm' (at most 6 in a rule)");
  /* nesting, expression height, long names */
  n = 0;
  PUT("rule r { match { input a: [");
  for (int i = 0; i < 100; i++) PUT("(");
  PUT("B");
  for (int i = 0; i < 100; i++) PUT(")");
  PUT("]; y = relu(a); yield y; } rewrite { yield a; } }");
  expect_refused(t, "expression is nested too deeply");
  n = 0;
  PUT("rule r { match { input a: [B]; y = relu(a); yield y; } where { B");
  for (int i = 0; i < 100; i++) PUT(" - 1");
  PUT(" > 0; } rewrite { yield a; } }");
  expect_refused(t, "expression is too long");
  n = 0;
  PUT("rule r { match { input a: [B]; y = relu(a); yield y; } where { B > ");
  for (int i = 0; i < 100; i++) PUT("-");
  PUT("1; } rewrite { yield a; } }");
  expect_refused(t, "expression is nested too deeply");
  n = 0;
  PUT("rule ");
  for (int i = 0; i < 65; i++) PUT("n");
  PUT(" { }");
  expect_refused(t, "name is too long (65 characters; at most 64)");
  /* many rules in one text, each at the limits that are fine */
  n = 0;
  for (int i = 0; i < 200; i++)
    PUT("rule r%d(d: degree) { match { input a: [B, ...R]; y = relu(a); yield y; } where { B %% d == 0; } "
        "rewrite { p = partition(a, dim=0, degree=d); q = relu(p); c = combine(q, dim=0, degree=d); yield c; } }\n",
        i);
  pcgc_ruleset *rs = parse_ok(t);
  ck_assert_int_eq(pcgc_ruleset_size(rs), 200);
  pcgc_ruleset_free(rs);
#undef PUT
  free(t);
}
END_TEST

static Suite *parse_suite(void) {
  Suite *s = suite_create("parse");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, fusion_rule);
  tcase_add_test(tc, parallel_rule);
  tcase_add_test(tc, types_and_items);
  tcase_add_test(tc, attribute_values);
  tcase_add_test(tc, conditions);
  tcase_add_test(tc, late_binding);
  tcase_add_test(tc, shipped_rules);
  tcase_add_test(tc, set_api);
  tcase_add_test(tc, duplicate_names_across_texts);
  tcase_add_test(tc, load_dir);
  tcase_add_test(tc, bad_rules);
  tcase_add_test(tc, error_messages);
  tcase_add_test(tc, lexical_forms);
  tcase_add_test(tc, limits);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(parse_suite)
