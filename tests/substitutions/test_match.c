/*
 * test_match.c — matching rule instances in graphs and applying a match:
 * fusion (linear + relu) and its near misses (an attribute that differs, an
 * intermediate read outside), a multi-output merge of two linears sharing
 * their input, a parallelisation rule whose `where` depends on a degree
 * parameter, a rule that removes operators, refusal of rewrites that would
 * make a cycle, variables (binding, disagreement, an expression resolved
 * after a later binding), ellipses, exact counts on BERT-Large,
 * determinism, and that applying leaves the original graph untouched.
 *
 * Rules are parsed from text (pcgc_ruleset_parse), graphs from model text
 * (pcgc_model_parse).
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "rules_internal.h"
#include "substitutions.h"

#include "../common/check_main.h"

#ifndef PCGC_SOURCE_DIR
#define PCGC_SOURCE_DIR "."
#endif

/* ------------------------------------------------------------ helpers */

static pcgc_ruleset *rules(const char *text) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_ruleset *rs = pcgc_ruleset_new();
  ck_assert_ptr_nonnull(rs);
  if (pcgc_ruleset_parse(rs, text, strlen(text), "test.rules", &err) != PCGC_OK)
    ck_abort_msg("rules do not parse: %s:%d:%d: %s", err.file, err.line, err.col, err.message);
  return rs;
}

static const pcgc_rule *rule(const pcgc_ruleset *rs, const char *name) {
  const pcgc_rule *r = pcgc_ruleset_find(rs, name);
  ck_assert_msg(r != NULL, "no rule %s", name);
  return r;
}

static pcgc_rule_inst inst(const pcgc_rule *r, int64_t p0, int64_t p1) {
  pcgc_rule_inst ri;
  memset(&ri, 0, sizeof ri);
  ri.rule = r;
  ri.params[0] = p0;
  ri.params[1] = p1;
  return ri;
}

static pcgc_graph *model(const char *text) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_graph *g = pcgc_model_parse(text, strlen(text), "test.pcg", NULL, &err);
  if (!g) ck_abort_msg("model does not parse: %d:%d: %s", err.line, err.col, err.message);
  return g;
}

static int node(const pcgc_graph *g, const char *name) {
  int id = pcgc_graph_find(g, name);
  ck_assert_msg(id >= 0, "no node %s", name);
  return id;
}

static int sym(const pcgc_rule *r, const char *name) {
  for (int i = 0; i < r->n_syms; i++)
    if (strcmp(r->syms[i].name, name) == 0) return i;
  ck_abort_msg("no symbol %s", name);
  return -1;
}

#define MAX_FOUND 64

typedef struct found {
  int n;
  pcgc_match m[MAX_FOUND];
} found;

static bool collect(const pcgc_match *m, void *ctx) {
  found *f = ctx;
  if (f->n < MAX_FOUND) f->m[f->n] = *m;
  f->n++;
  return false;
}

/* Every match of ri in g (at most MAX_FOUND kept). */
static void find(const pcgc_rule_inst *ri, const pcgc_graph *g, found *f) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_graph_index *ix = pcgc_graph_index_new(g, &err);
  ck_assert_ptr_nonnull(ix);
  memset(f, 0, sizeof *f);
  pcgc_status s = pcgc_rule_find_matches(ri, g, ix, collect, f, &err);
  if (s != PCGC_OK) ck_abort_msg("find_matches failed: %s", err.message);
  int64_t c = pcgc_rule_count_matches(ri, g, ix, 0, &err);
  ck_assert_int_eq(c, f->n);
  pcgc_graph_index_free(ix);
}

static int64_t count(const pcgc_rule_inst *ri, const pcgc_graph *g) {
  found f;
  find(ri, g, &f);
  return f.n;
}

static pcgc_graph *apply_ok(const pcgc_graph *g, const pcgc_match *m) {
  pcgc_error err;
  pcgc_error_clear(&err);
  uint64_t h = pcgc_graph_hash(g);
  pcgc_graph *out = NULL;
  pcgc_status s = pcgc_rule_apply(g, m, &out, &err);
  if (s != PCGC_OK) ck_abort_msg("apply failed (%s): %s", pcgc_status_str(s), err.message);
  ck_assert_ptr_nonnull(out);
  ck_assert_uint_eq(pcgc_graph_hash(g), h);   /* g untouched */
  ck_assert_int_eq(pcgc_graph_validate(out, &err), PCGC_OK);
  return out;
}

static const pcgc_ptensor *type(const pcgc_graph *g, const char *name, int slot) {
  return pcgc_graph_ref_type(g, (pcgc_ref){node(g, name), slot});
}

/* ----------------------------------------------------------------- rules */

static const char *FUSE =
    "# Fuse a linear layer and the ReLU after it.\n"
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

static const char *MLP =
    "model m\n"
    "input x: f32[8, 16]\n"
    "weight w1: f32[16, 32]\n"
    "weight b1: f32[32]\n"
    "weight w2: f32[32, 4]\n"
    "h = linear(x, w1, b1)\n"
    "r = relu(h)\n"
    "o = linear(r, w2)\n"
    "s = sigmoid(o)\n";

START_TEST(fuse_linear_relu) {
  pcgc_ruleset *rs = rules(FUSE);
  pcgc_rule_inst ri = inst(rule(rs, "fuse_linear_relu"), 0, 0);
  pcgc_graph *g = model(MLP);
  found f;
  find(&ri, g, &f);
  ck_assert_int_eq(f.n, 1);
  ck_assert_int_eq(f.m[0].nodes[0], node(g, "h"));
  ck_assert_int_eq(f.m[0].nodes[1], node(g, "r"));
  ck_assert_int_eq(f.m[0].inputs[0].node, node(g, "x"));
  ck_assert_int_eq(f.m[0].inputs[1].node, node(g, "w1"));
  ck_assert_int_eq(f.m[0].inputs[2].node, node(g, "b1"));
  ck_assert_ptr_eq(f.m[0].inst, &ri);

  pcgc_graph *out = apply_ok(g, &f.m[0]);
  ck_assert_int_eq(out->n_nodes, g->n_nodes - 1);
  ck_assert_int_eq(pcgc_graph_find(out, "h"), -1);
  ck_assert_int_eq(pcgc_graph_find(out, "r"), -1);
  int fused = node(out, "h/f");
  ck_assert_int_eq(out->nodes[fused].kind, PCGC_OP_LINEAR);
  ck_assert_int_eq(pcgc_attrs_int(out->nodes[fused].attrs, "act"), PCGC_ACT_RELU);
  ck_assert_int_eq(out->nodes[fused].n_in, 3);
  ck_assert_int_eq(out->nodes[fused].in[0].node, node(out, "x"));
  ck_assert_int_eq(out->nodes[fused].in[2].node, node(out, "b1"));
  ck_assert(pcgc_ptensor_equal(&out->nodes[fused].out[0], type(g, "r", 0)));
  const pcgc_node *o = &out->nodes[node(out, "o")];
  ck_assert_int_eq(o->in[0].node, fused);
  ck_assert_int_eq(o->in[0].slot, 0);
  /* the result matches no more */
  ck_assert_int_eq(count(&ri, out), 0);
  pcgc_graph_free(out);
  pcgc_graph_free(g);
  pcgc_ruleset_free(rs);
}
END_TEST

START_TEST(fuse_near_misses) {
  pcgc_ruleset *rs = rules(FUSE);
  pcgc_rule_inst ri = inst(rule(rs, "fuse_linear_relu"), 0, 0);
  /* the linear already has an activation */
  pcgc_graph *g = model("input x: f32[8, 16]\nweight w: f32[16, 32]\nweight b: f32[32]\n"
                        "h = linear(x, w, b, act=gelu)\nr = relu(h)\n");
  ck_assert_int_eq(count(&ri, g), 0);
  pcgc_graph_free(g);
  /* the linear's output is also read outside the pattern */
  g = model("input x: f32[8, 16]\nweight w: f32[16, 32]\nweight b: f32[32]\n"
            "h = linear(x, w, b)\nr = relu(h)\ns = sigmoid(h)\n");
  ck_assert_int_eq(count(&ri, g), 0);
  pcgc_graph_free(g);
  /* no bias: linear has 2 inputs, the pattern 3 */
  g = model("input x: f32[8, 16]\nweight w: f32[16, 32]\nh = linear(x, w)\nr = relu(h)\n");
  ck_assert_int_eq(count(&ri, g), 0);
  pcgc_graph_free(g);
  /* two occurrences, in node order */
  g = model("input x: f32[8, 16]\nweight w: f32[16, 16]\nweight b: f32[16]\n"
            "h1 = linear(x, w, b)\nr1 = relu(h1)\nh2 = linear(r1, w, b)\nr2 = relu(h2)\n");
  found f;
  find(&ri, g, &f);
  ck_assert_int_eq(f.n, 2);
  ck_assert_int_eq(f.m[0].nodes[0], node(g, "h1"));
  ck_assert_int_eq(f.m[1].nodes[0], node(g, "h2"));
  ck_assert_int_eq(f.m[1].inputs[0].node, node(g, "r1"));
  /* an untyped graph is an error */
  pcgc_graph *u = pcgc_graph_clone(g);
  u->nodes[0].typed = false;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_graph_index *ix = pcgc_graph_index_new(u, &err);
  ck_assert_ptr_nonnull(ix);
  ck_assert_int_eq(pcgc_rule_find_matches(&ri, u, ix, collect, &f, &err), PCGC_ERR_TYPE);
  ck_assert_int_lt(pcgc_rule_count_matches(&ri, u, ix, 0, &err), 0);
  /* an index built for another graph is refused */
  ck_assert_int_eq(pcgc_rule_find_matches(&ri, g, ix, collect, &f, &err), PCGC_ERR_INVALID);
  pcgc_graph_index_free(ix);
  pcgc_graph_free(u);
  pcgc_graph_free(g);
  pcgc_ruleset_free(rs);
}
END_TEST

static const char *MERGE =
    "# Two linears reading the same x become one over the concatenated weights.\n"
    "rule merge_linears {\n"
    "  match {\n"
    "    input x: [B, K], w1: [K, N1], w2: [K, N2];\n"
    "    y1 = linear(x, w1, act=none);\n"
    "    y2 = linear(x, w2, act=none);\n"
    "    yield y1, y2;\n"
    "  }\n"
    "  rewrite {\n"
    "    w = concat(w1, w2, axis=1);\n"
    "    y = linear(x, w);\n"
    "    a, b = split(y, axis=1, sizes=[N1, N2]);\n"
    "    yield a, b;\n"
    "  }\n"
    "}\n"
    "# Two linears sharing a weight become one over the concatenated batch.\n"
    "rule batch_linears {\n"
    "  match {\n"
    "    input x1: [B1, K], x2: [B2, K], w;\n"
    "    y1 = linear(x1, w);\n"
    "    y2 = linear(x2, w);\n"
    "    yield y1, y2;\n"
    "  }\n"
    "  rewrite {\n"
    "    x = concat(x1, x2, axis=0);\n"
    "    y = linear(x, w);\n"
    "    a, b = split(y, axis=0, sizes=[B1, B2]);\n"
    "    yield a, b;\n"
    "  }\n"
    "}\n";

START_TEST(merge_multi_output) {
  pcgc_ruleset *rs = rules(MERGE);
  const pcgc_rule *r = rule(rs, "merge_linears");
  pcgc_rule_inst ri = inst(r, 0, 0);
  pcgc_graph *g = model("input x: f32[4, 8]\nweight wa: f32[8, 16]\nweight wb: f32[8, 24]\n"
                        "p = linear(x, wa)\nq = linear(x, wb)\npr = relu(p)\nqs = sigmoid(q)\n"
                        "t = tanh(q)\n");
  found f;
  find(&ri, g, &f);
  /* both assignments: yields are ordered */
  ck_assert_int_eq(f.n, 2);
  ck_assert_int_eq(f.m[0].nodes[0], node(g, "p"));
  ck_assert_int_eq(f.m[0].nodes[1], node(g, "q"));
  ck_assert_int_eq(f.m[1].nodes[0], node(g, "q"));
  ck_assert_int_eq(f.m[1].nodes[1], node(g, "p"));
  ck_assert_int_eq(f.m[0].sym[sym(r, "B")], 4);
  ck_assert_int_eq(f.m[0].sym[sym(r, "K")], 8);
  ck_assert_int_eq(f.m[0].sym[sym(r, "N1")], 16);
  ck_assert_int_eq(f.m[0].sym[sym(r, "N2")], 24);
  ck_assert_int_eq(f.m[1].sym[sym(r, "N1")], 24);

  pcgc_graph *out = apply_ok(g, &f.m[0]);
  ck_assert_int_eq(out->n_nodes, g->n_nodes - 2 + 3);
  int sp = node(out, "p/a");
  ck_assert_int_eq(out->nodes[sp].kind, PCGC_OP_SPLIT);
  ck_assert_int_eq(out->nodes[sp].n_out, 2);
  const pcgc_node *pr = &out->nodes[node(out, "pr")], *qs = &out->nodes[node(out, "qs")],
                  *t = &out->nodes[node(out, "t")];
  ck_assert_int_eq(pr->in[0].node, sp);
  ck_assert_int_eq(pr->in[0].slot, 0);
  ck_assert_int_eq(qs->in[0].node, sp);
  ck_assert_int_eq(qs->in[0].slot, 1);
  ck_assert_int_eq(t->in[0].slot, 1);
  ck_assert(pcgc_ptensor_equal(&out->nodes[sp].out[1], type(g, "q", 0)));
  int w = node(out, "p/w");
  ck_assert_int_eq(out->nodes[w].kind, PCGC_OP_CONCAT);
  ck_assert_int_eq(out->nodes[w].out[0].dims[1], 40);
  pcgc_graph_free(out);

  /* the other assignment puts q first */
  out = apply_ok(g, &f.m[1]);
  sp = node(out, "q/a");
  ck_assert_int_eq(out->nodes[node(out, "pr")].in[0].slot, 1);
  ck_assert_int_eq(out->nodes[node(out, "qs")].in[0].slot, 0);
  pcgc_graph_free(out);
  pcgc_graph_free(g);
  pcgc_ruleset_free(rs);
}
END_TEST

START_TEST(cycle_refused) {
  pcgc_ruleset *rs = rules(MERGE);
  pcgc_rule_inst ri = inst(rule(rs, "batch_linears"), 0, 0);
  /* independent inputs: fine */
  pcgc_graph *g = model("input x: f32[4, 8]\ninput z: f32[2, 8]\nweight w: f32[8, 8]\n"
                        "p = linear(x, w)\nq = linear(z, w)\ns = add(p, p)\nu = relu(q)\n");
  found f;
  find(&ri, g, &f);
  ck_assert_int_eq(f.n, 2);
  pcgc_graph *out = apply_ok(g, &f.m[0]);
  ck_assert_int_eq(out->nodes[node(out, "p/x")].out[0].dims[0], 6);
  pcgc_graph_free(out);
  pcgc_graph_free(g);

  /* q's input is computed from p's output: merging them would be a cycle */
  g = model("input x: f32[4, 8]\nweight w: f32[8, 8]\n"
            "p = linear(x, w)\nt = relu(p)\nq = linear(t, w)\nu = relu(q)\n");
  find(&ri, g, &f);
  ck_assert_int_eq(f.n, 2);
  uint64_t h = pcgc_graph_hash(g);
  for (int i = 0; i < 2; i++) {
    pcgc_error err;
    pcgc_error_clear(&err);
    pcgc_graph *bad = g;
    ck_assert_int_eq(pcgc_rule_apply(g, &f.m[i], &bad, &err), PCGC_ERR_INVALID);
    ck_assert_ptr_null(bad);
    ck_assert_msg(strstr(err.message, "batch_linears") && strstr(err.message, "cycle"), "%s", err.message);
  }
  ck_assert_uint_eq(pcgc_graph_hash(g), h);
  pcgc_graph_free(g);

  /* q reads p directly: p's output would be both a yield and a match input */
  g = model("input x: f32[4, 8]\nweight w: f32[8, 8]\np = linear(x, w)\nq = linear(p, w)\n");
  ck_assert_int_eq(count(&ri, g), 0);
  pcgc_graph_free(g);
  pcgc_ruleset_free(rs);
}
END_TEST

static const char *PARALLEL =
    "rule partition_linear_batch(d: degree) {\n"
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
    "}\n"
    "rule cancel_partition_combine(k: dim, d: degree) {\n"
    "  match {\n"
    "    input x;\n"
    "    p = partition(x, dim=k, degree=d);\n"
    "    c = combine(p, dim=k, degree=d);\n"
    "    yield c;\n"
    "  }\n"
    "  rewrite { yield x; }\n"
    "}\n";

START_TEST(parallel_degree_param) {
  pcgc_ruleset *rs = rules(PARALLEL);
  const pcgc_rule *r = rule(rs, "partition_linear_batch");
  pcgc_graph *g = model("input x: f32[6, 5, 8]\nweight w: f32[8, 4]\ny = linear(x, w, act=tanh)\nz = relu(y)\n");
  pcgc_rule_inst r2 = inst(r, 2, 0), r3 = inst(r, 3, 0), r4 = inst(r, 4, 0);
  ck_assert_int_eq(count(&r4, g), 0);
  ck_assert_int_eq(count(&r3, g), 1);
  found f;
  find(&r2, g, &f);
  ck_assert_int_eq(f.n, 1);
  ck_assert_int_eq(f.m[0].sym[0], 2);
  ck_assert_int_eq(f.m[0].sym[sym(r, "B")], 6);
  ck_assert_int_eq(f.m[0].sym[sym(r, "R")], 2);   /* an ellipsis is worth its length */
  pcgc_graph *out = apply_ok(g, &f.m[0]);
  ck_assert_int_eq(out->n_nodes, g->n_nodes + 3);
  const pcgc_node *yp = &out->nodes[node(out, "y/yp")];
  ck_assert_int_eq(pcgc_attrs_int(yp->attrs, "act"), PCGC_ACT_TANH);   /* y.* */
  ck_assert_int_eq(yp->out[0].degree[0], 2);
  const pcgc_node *yc = &out->nodes[node(out, "y/yc")];
  ck_assert(pcgc_ptensor_equal(&yc->out[0], type(g, "y", 0)));
  ck_assert_int_eq(out->nodes[node(out, "z")].in[0].node, yc->id);
  /* the parallel linear matches again: shapes are logical, B is still 6 */
  ck_assert_int_eq(count(&r3, out), 1);
  pcgc_graph_free(out);
  pcgc_graph_free(g);
  pcgc_ruleset_free(rs);
}
END_TEST

START_TEST(remove_operators) {
  pcgc_ruleset *rs = rules(PARALLEL);
  const pcgc_rule *r = rule(rs, "cancel_partition_combine");
  pcgc_graph *g = model("input x: f32[8, 4]\nxp = partition(x, dim=0, degree=2)\n"
                        "xc = combine(xp, dim=0, degree=2)\nr = relu(xc)\ns = sigmoid(xc)\n");
  pcgc_rule_inst k0d2 = inst(r, 0, 2), k1d2 = inst(r, 1, 2), k0d4 = inst(r, 0, 4);
  ck_assert_int_eq(count(&k1d2, g), 0);
  ck_assert_int_eq(count(&k0d4, g), 0);
  found f;
  find(&k0d2, g, &f);
  ck_assert_int_eq(f.n, 1);
  pcgc_graph *out = apply_ok(g, &f.m[0]);
  ck_assert_int_eq(out->n_nodes, g->n_nodes - 2);
  int x = node(out, "x");
  ck_assert_int_eq(out->nodes[node(out, "r")].in[0].node, x);
  ck_assert_int_eq(out->nodes[node(out, "s")].in[0].node, x);
  ck_assert_int_eq(pcgc_graph_find(out, "xp"), -1);
  pcgc_graph_free(out);
  pcgc_graph_free(g);
  pcgc_ruleset_free(rs);
}
END_TEST

static const char *VARS =
    "rule bind_linear {\n"
    "  match {\n"
    "    input x: [B, K], w: [K, N];\n"
    "    y = linear(x, w);\n"
    "    yield y;\n"
    "  }\n"
    "  where { B * K * N > 0; }\n"
    "  rewrite { z = linear(x, w, y.*); yield z; }\n"
    "}\n"
    "rule same_shape_add {\n"
    "  match {\n"
    "    input a: f32[B, K], b: f32[B, K];\n"
    "    y = add(a, b);\n"
    "    yield y;\n"
    "  }\n"
    "  rewrite { z = add(b, a); yield z; }\n"
    "}\n"
    "# 2 * K can only be checked once b has bound K.\n"
    "rule late_binding {\n"
    "  match {\n"
    "    input a: [B, 2 * K], b: [B, K];\n"
    "    y = concat(a, b, axis=1);\n"
    "    yield y;\n"
    "  }\n"
    "  rewrite { z = concat(a, b, axis=1); yield z; }\n"
    "}\n"
    "rule same_batch {\n"
    "  match {\n"
    "    input a: [...R, K], b: [...R, K];\n"
    "    y = mul(a, b);\n"
    "    yield y;\n"
    "  }\n"
    "  rewrite { z = mul(b, a); yield z; }\n"
    "}\n";

START_TEST(variables) {
  pcgc_ruleset *rs = rules(VARS);
  const pcgc_rule *r = rule(rs, "bind_linear");
  pcgc_rule_inst ri = inst(r, 0, 0);
  pcgc_graph *g = model("input x: f32[3, 5]\nweight w: f32[5, 7]\ny = linear(x, w)\n");
  found f;
  find(&ri, g, &f);
  ck_assert_int_eq(f.n, 1);
  ck_assert_int_eq(f.m[0].sym[sym(r, "B")], 3);
  ck_assert_int_eq(f.m[0].sym[sym(r, "K")], 5);
  ck_assert_int_eq(f.m[0].sym[sym(r, "N")], 7);
  pcgc_graph_free(g);
  /* rank 3 does not fit [B, K] */
  g = model("input x: f32[2, 3, 5]\nweight w: f32[5, 7]\ny = linear(x, w)\n");
  ck_assert_int_eq(count(&ri, g), 0);
  pcgc_graph_free(g);

  pcgc_rule_inst sa = inst(rule(rs, "same_shape_add"), 0, 0);
  g = model("input a: f32[4, 8]\ninput b: f32[4, 8]\ninput c: f32[4, 1]\ninput e: f32[1, 8]\n"
            "input h: f16[4, 8]\ninput i: f16[4, 8]\n"
            "y1 = add(a, b)\ny2 = add(a, c)\ny3 = add(e, a)\ny4 = add(a, a)\ny5 = add(h, i)\n");
  find(&sa, g, &f);
  /* y2 disagrees on K, y3 on B, y5 is f16 */
  ck_assert_int_eq(f.n, 2);
  ck_assert_int_eq(f.m[0].nodes[0], node(g, "y1"));
  ck_assert_int_eq(f.m[1].nodes[0], node(g, "y4"));   /* two inputs may be one tensor */
  pcgc_graph *out = apply_ok(g, &f.m[1]);
  pcgc_graph_free(out);
  pcgc_graph_free(g);

  pcgc_rule_inst lb = inst(rule(rs, "late_binding"), 0, 0);
  g = model("input a: f32[4, 6]\ninput b: f32[4, 3]\ninput c: f32[4, 5]\n"
            "y1 = concat(a, b, axis=1)\ny2 = concat(c, b, axis=1)\ny3 = concat(a, b, b, axis=1)\n");
  find(&lb, g, &f);
  ck_assert_int_eq(f.n, 1);   /* 5 != 2 * 3; three inputs is not two */
  ck_assert_int_eq(f.m[0].nodes[0], node(g, "y1"));
  ck_assert_int_eq(f.m[0].sym[sym(lb.rule, "K")], 3);
  pcgc_graph_free(g);
  pcgc_ruleset_free(rs);
}
END_TEST

START_TEST(ellipsis) {
  pcgc_ruleset *rs = rules(VARS);
  const pcgc_rule *r = rule(rs, "same_batch");
  pcgc_rule_inst ri = inst(r, 0, 0);
  pcgc_graph *g = model("input a: f32[2, 3, 4]\ninput b: f32[2, 3, 4]\ninput c: f32[3, 4]\n"
                        "input d: f32[1, 3, 4]\ninput e: f32[4]\ninput f: f32[5, 4]\n"
                        "y1 = mul(a, b)\ny2 = mul(a, c)\ny3 = mul(d, a)\ny4 = mul(e, e)\ny5 = mul(f, f)\n"
                        "y6 = mul(c, c)\n");
  found f;
  find(&ri, g, &f);
  /* y2: different ellipsis lengths; y3: same length, different dims */
  ck_assert_int_eq(f.n, 4);
  ck_assert_int_eq(f.m[0].nodes[0], node(g, "y1"));
  ck_assert_int_eq(f.m[0].sym[sym(r, "R")], 2);
  ck_assert_int_eq(f.m[1].nodes[0], node(g, "y4"));
  ck_assert_int_eq(f.m[1].sym[sym(r, "R")], 0);
  ck_assert_int_eq(f.m[2].nodes[0], node(g, "y5"));
  ck_assert_int_eq(f.m[3].nodes[0], node(g, "y6"));
  pcgc_graph_free(g);
  pcgc_ruleset_free(rs);
}
END_TEST

static char *slurp(const char *path) {
  pcgc_error err;
  pcgc_error_clear(&err);
  size_t len;
  char *text = pcgc_read_file(path, &len, &err);
  if (!text) ck_abort_msg("%s: %s", path, err.message);
  return text;
}

START_TEST(bert_counts) {
  /* models/bert-large.pcg: 24 encoder layers, each `ln1 = layernorm(add_a)`,
   * `ln2 = layernorm(add_f)` and `d = dropout(down)` with `down` a plain
   * linear; the embeddings end in `e3 = layernorm(e2)` with e2 an add. */
  pcgc_ruleset *rs = rules(
      "rule add_layernorm {\n"
      "  match { input a, b, s, t; y = add(a, b); n = layernorm(y, s, t); yield n; }\n"
      "  rewrite { z = add(a, b); m = layernorm(z, s, t, n.*); yield m; }\n"
      "}\n"
      "rule linear_dropout {\n"
      "  match { input x, w, b; y = linear(x, w, b, act=none); d = dropout(y); yield d; }\n"
      "  rewrite { z = linear(x, w, b, y.*); e = dropout(z, d.*); yield e; }\n"
      "}\n"
      "rule gelu_linear {\n"
      "  match { input x: [B, S, H], w, b; y = linear(x, w, b, act=gelu); yield y; }\n"
      "  where { H * 4 == size(y, -1); }\n"
      "  rewrite { z = linear(x, w, b, y.*); yield z; }\n"
      "}\n");
  char path[4096];
  snprintf(path, sizeof path, "%s/models/bert-large.pcg", getenv("PCGC_SOURCE_DIR") ? getenv("PCGC_SOURCE_DIR")
                                                                                    : PCGC_SOURCE_DIR);
  char *text = slurp(path);
  pcgc_graph *g = model(text);
  free(text);
  ck_assert_int_eq(pcgc_rules_max_rank(g), 3);
  pcgc_rule_inst al = inst(rule(rs, "add_layernorm"), 0, 0), ld = inst(rule(rs, "linear_dropout"), 0, 0),
                 gl = inst(rule(rs, "gelu_linear"), 0, 0);
  ck_assert_int_eq(count(&al, g), 49);
  ck_assert_int_eq(count(&ld, g), 24);
  ck_assert_int_eq(count(&gl, g), 24);

  /* limits, and determinism: two runs give the same list */
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_graph_index *ix = pcgc_graph_index_new(g, &err);
  ck_assert_int_eq(pcgc_rule_count_matches(&al, g, ix, 5, &err), 5);
  pcgc_graph_index_free(ix);
  found f1, f2;
  find(&al, g, &f1);
  find(&al, g, &f2);
  ck_assert_int_eq(f1.n, f2.n);
  ck_assert_int_eq(memcmp(f1.m, f2.m, sizeof f1.m), 0);
  for (int i = 1; i < f1.n; i++) ck_assert_int_lt(f1.m[i - 1].nodes[1], f1.m[i].nodes[1]);
  /* the rewrite rebuilds the same operators: same hash (names do not
   * count), and the new nodes match again */
  pcgc_graph *out = apply_ok(g, &f1.m[3]);
  ck_assert_int_eq(out->n_nodes, g->n_nodes);
  ck_assert_uint_eq(pcgc_graph_hash(out), pcgc_graph_hash(g));
  ck_assert_int_eq(count(&al, out), 49);
  pcgc_graph_free(out);
  pcgc_graph_free(g);
  pcgc_ruleset_free(rs);
}
END_TEST

START_TEST(apply_type_mismatch) {
  /* a rewrite whose yield has another parallel type is refused */
  pcgc_ruleset *rs = rules(
      "rule lose_combine(d: degree) {\n"
      "  match { input x; p = partition(x, dim=0, degree=d); c = combine(p, dim=0, degree=d); yield c; }\n"
      "  rewrite { q = partition(x, dim=0, degree=d); yield q; }\n"
      "}\n");
  pcgc_rule_inst ri = inst(rule(rs, "lose_combine"), 2, 0);
  pcgc_graph *g = model("input x: f32[8, 4]\nxp = partition(x, dim=0, degree=2)\n"
                        "xc = combine(xp, dim=0, degree=2)\nr = relu(xc)\n");
  found f;
  find(&ri, g, &f);
  ck_assert_int_eq(f.n, 1);
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_graph *out = NULL;
  ck_assert_int_eq(pcgc_rule_apply(g, &f.m[0], &out, &err), PCGC_ERR_TYPE);
  ck_assert_ptr_null(out);
  ck_assert_msg(strstr(err.message, "lose_combine") && strstr(err.message, "yield"), "%s", err.message);
  pcgc_graph_free(g);
  pcgc_ruleset_free(rs);
}
END_TEST

START_TEST(names_unique) {
  /* the derived name is taken: a suffix makes it unique */
  pcgc_ruleset *rs = rules(FUSE);
  pcgc_rule_inst ri = inst(rule(rs, "fuse_linear_relu"), 0, 0);
  pcgc_graph *g = model("input x: f32[8, 16]\nweight w: f32[16, 16]\nweight b: f32[16]\n"
                        "h = linear(x, w, b)\nr = relu(h)\n");
  ck_assert_int_ge(pcgc_graph_add_node(g, PCGC_OP_SIGMOID, "h/f", NULL, 1, (pcgc_ref[]){{node(g, "r"), 0}}), 0);
  pcgc_error err;
  pcgc_error_clear(&err);
  ck_assert_int_eq(pcgc_graph_infer(g, &err), PCGC_OK);
  found f;
  find(&ri, g, &f);
  ck_assert_int_eq(f.n, 1);
  pcgc_graph *out = apply_ok(g, &f.m[0]);
  int n = node(out, "h/f_2");
  ck_assert_int_eq(out->nodes[n].kind, PCGC_OP_LINEAR);
  ck_assert_int_eq(out->nodes[node(out, "h/f")].in[0].node, n);
  pcgc_graph_free(out);
  pcgc_graph_free(g);
  pcgc_ruleset_free(rs);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("match");
  TCase *tc = tcase_create("match");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, fuse_linear_relu);
  tcase_add_test(tc, fuse_near_misses);
  tcase_add_test(tc, merge_multi_output);
  tcase_add_test(tc, cycle_refused);
  tcase_add_test(tc, parallel_degree_param);
  tcase_add_test(tc, remove_operators);
  tcase_add_test(tc, variables);
  tcase_add_test(tc, ellipsis);
  tcase_add_test(tc, bert_counts);
  tcase_add_test(tc, apply_type_mismatch);
  tcase_add_test(tc, names_unique);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(suite)
