/*
 * test_graph.c — graphs: construction, topological order, validation
 * (cycles, dangling inputs, type mismatches), the canonical hash
 * (independent of creation order and names, sensitive to every attribute,
 * edge, slot and type) and exact structural equality.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "pcg.h"

/* ------------------------------------------------------------ helpers */

static int input(pcgc_graph *g, const char *name, int rank, const int64_t *dims, pcgc_dtype dt) {
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_INPUT);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "shape", rank, dims), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "dtype", dt), PCGC_OK);
  return pcgc_graph_add_node(g, PCGC_OP_INPUT, name, &a, 0, NULL);
}

static int weight(pcgc_graph *g, const char *name, int rank, const int64_t *dims) {
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_WEIGHT);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "shape", rank, dims), PCGC_OK);
  return pcgc_graph_add_node(g, PCGC_OP_WEIGHT, name, &a, 0, NULL);
}

static int op1(pcgc_graph *g, pcgc_op_kind k, const char *name, int x) {
  return pcgc_graph_add_node(g, k, name, NULL, 1, (pcgc_ref[]){{x, 0}});
}

static int op2(pcgc_graph *g, pcgc_op_kind k, const char *name, int x, int y) {
  return pcgc_graph_add_node(g, k, name, NULL, 2, (pcgc_ref[]){{x, 0}, {y, 0}});
}

static int linear(pcgc_graph *g, const char *name, int x, int w, int b, int act) {
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_LINEAR);
  pcgc_attrs_set_int(&a, "act", act);
  pcgc_ref in[3] = {{x, 0}, {w, 0}, {b, 0}};
  return pcgc_graph_add_node(g, PCGC_OP_LINEAR, name, &a, b >= 0 ? 3 : 2, in);
}

static void infer_ok(pcgc_graph *g) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_status s = pcgc_graph_infer(g, &err);
  if (s != PCGC_OK) ck_abort_msg("inference failed: %s", err.message);
}

/* A 2-layer MLP with loss, built in one of two node orders. */
static pcgc_graph *mlp(bool reversed, const char *prefix) {
  pcgc_graph *g = pcgc_graph_new();
  char n[8][32];
  const char *base[8] = {"x", "labels", "w1", "b1", "w2", "h", "logits", "loss"};
  for (int i = 0; i < 8; i++) snprintf(n[i], sizeof n[i], "%s%s", prefix, base[i]);
  int x, y, w1, b1, w2;
  if (!reversed) {
    x = input(g, n[0], 2, (int64_t[]){32, 64}, PCGC_F32);
    y = input(g, n[1], 1, (int64_t[]){32}, PCGC_I32);
    w1 = weight(g, n[2], 2, (int64_t[]){64, 128});
    b1 = weight(g, n[3], 1, (int64_t[]){128});
    w2 = weight(g, n[4], 2, (int64_t[]){128, 10});
  } else {
    w2 = weight(g, n[4], 2, (int64_t[]){128, 10});
    b1 = weight(g, n[3], 1, (int64_t[]){128});
    w1 = weight(g, n[2], 2, (int64_t[]){64, 128});
    y = input(g, n[1], 1, (int64_t[]){32}, PCGC_I32);
    x = input(g, n[0], 2, (int64_t[]){32, 64}, PCGC_F32);
  }
  int h = linear(g, n[5], x, w1, b1, PCGC_ACT_RELU);
  int lg = linear(g, n[6], h, w2, -1, PCGC_ACT_NONE);
  op2(g, PCGC_OP_SOFTMAX_CROSS_ENTROPY, n[7], lg, y);
  infer_ok(g);
  return g;
}

/* --------------------------------------------------------------- tests */

START_TEST(test_build_and_types) {
  pcgc_graph *g = mlp(false, "");
  ck_assert_int_eq(g->n_nodes, 8);
  int h = pcgc_graph_find(g, "h");
  ck_assert_int_ge(h, 0);
  ck_assert_int_eq(g->nodes[h].out[0].rank, 2);
  ck_assert_int_eq(g->nodes[h].out[0].dims[0], 32);
  ck_assert_int_eq(g->nodes[h].out[0].dims[1], 128);
  int loss = pcgc_graph_find(g, "loss");
  ck_assert_int_eq(g->nodes[loss].out[0].rank, 0);
  ck_assert_int_eq(pcgc_graph_find(g, "nope"), -1);
  /* names are unique */
  ck_assert_int_lt(input(g, "x", 1, (int64_t[]){3}, PCGC_F32), 0);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_topo_order) {
  pcgc_graph *g = mlp(true, "");
  int order[8], pos[8];
  ck_assert_int_eq(pcgc_graph_topo_order(g, order, NULL), PCGC_OK);
  for (int i = 0; i < 8; i++) pos[order[i]] = i;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) ck_assert_int_lt(pos[g->nodes[i].in[k].node], pos[i]);
  /* ties broken by id: the five sources come first, in id order */
  for (int i = 0; i < 5; i++) ck_assert_int_eq(order[i], i);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_cycle_detected) {
  pcgc_graph *g = pcgc_graph_new();
  int x = input(g, "x", 1, (int64_t[]){4}, PCGC_F32);
  int a = op2(g, PCGC_OP_ADD, "a", x, x);
  int b = op1(g, PCGC_OP_RELU, "b", a);
  g->nodes[a].in[1] = (pcgc_ref){b, 0}; /* a <- b <- a */
  pcgc_error err;
  pcgc_error_clear(&err);
  ck_assert_int_eq(pcgc_graph_infer(g, &err), PCGC_ERR_GRAPH);
  ck_assert_ptr_nonnull(strstr(err.message, "cycle"));
  ck_assert_int_eq(pcgc_graph_validate(g, &err), PCGC_ERR_GRAPH);
  ck_assert_ptr_nonnull(strstr(err.message, "cycle"));
  ck_assert_uint_eq(pcgc_graph_hash(g), pcgc_graph_hash(g)); /* defined, no crash */
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_dangling_and_bad_slot) {
  pcgc_graph *g = pcgc_graph_new();
  int x = input(g, "x", 1, (int64_t[]){4}, PCGC_F32);
  int r = pcgc_graph_add_node(g, PCGC_OP_RELU, "r", NULL, 1, (pcgc_ref[]){{7, 0}});
  pcgc_error err;
  pcgc_error_clear(&err);
  ck_assert_int_eq(pcgc_graph_validate(g, &err), PCGC_ERR_GRAPH);
  ck_assert_ptr_nonnull(strstr(err.message, "dangling"));
  ck_assert_ptr_nonnull(strstr(err.message, "'r'"));
  g->nodes[r].in[0] = (pcgc_ref){x, 1};
  ck_assert_int_eq(pcgc_graph_validate(g, &err), PCGC_ERR_GRAPH);
  ck_assert_ptr_nonnull(strstr(err.message, "reads output 1 of 'x'"));
  g->nodes[r].in[0] = (pcgc_ref){x, 0};
  ck_assert_int_eq(pcgc_graph_validate(g, &err), PCGC_ERR_TYPE); /* not inferred yet */
  infer_ok(g);
  ck_assert_int_eq(pcgc_graph_validate(g, &err), PCGC_OK);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_wrong_arity_in_graph) {
  pcgc_graph *g = pcgc_graph_new();
  int x = input(g, "x", 1, (int64_t[]){4}, PCGC_F32);
  op2(g, PCGC_OP_RELU, "r", x, x);
  pcgc_error err;
  pcgc_error_clear(&err);
  ck_assert_int_eq(pcgc_graph_infer(g, &err), PCGC_ERR_GRAPH);
  ck_assert_ptr_nonnull(strstr(err.message, "has 2 inputs but takes 1 to 1"));
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_type_mismatch_detected) {
  pcgc_graph *g = mlp(false, "");
  pcgc_error err;
  pcgc_error_clear(&err);
  ck_assert_int_eq(pcgc_graph_validate(g, &err), PCGC_OK);
  int h = pcgc_graph_find(g, "h");
  g->nodes[h].out[0].dims[1] = 99; /* a stale or tampered type */
  ck_assert_int_eq(pcgc_graph_validate(g, &err), PCGC_ERR_TYPE);
  ck_assert_ptr_nonnull(strstr(err.message, "type mismatch"));
  ck_assert_ptr_nonnull(strstr(err.message, "f32[32, 99]"));
  ck_assert_ptr_nonnull(strstr(err.message, "f32[32, 128]"));
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_type_error_names_node) {
  pcgc_graph *g = pcgc_graph_new();
  int x = input(g, "x", 2, (int64_t[]){8, 16}, PCGC_F32);
  int w = weight(g, "fc.weight", 2, (int64_t[]){32, 4});
  linear(g, "fc", x, w, -1, PCGC_ACT_NONE);
  pcgc_error err;
  pcgc_error_clear(&err);
  ck_assert_int_eq(pcgc_graph_infer(g, &err), PCGC_ERR_TYPE);
  ck_assert_ptr_nonnull(strstr(err.message, "linear 'fc':"));
  ck_assert_ptr_nonnull(strstr(err.message, "16 features"));
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_hash_independent_of_order_and_names) {
  pcgc_graph *a = mlp(false, ""), *b = mlp(true, ""), *c = mlp(false, "renamed_");
  ck_assert_uint_eq(pcgc_graph_hash(a), pcgc_graph_hash(b));
  ck_assert_uint_eq(pcgc_graph_hash(a), pcgc_graph_hash(c));
  ck_assert_uint_ne(pcgc_graph_hash(a), 0);
  ck_assert(pcgc_graph_equal(a, b));
  ck_assert(pcgc_graph_equal(b, a));
  ck_assert(pcgc_graph_equal(a, c));
  pcgc_graph_free(a);
  pcgc_graph_free(b);
  pcgc_graph_free(c);
}
END_TEST

START_TEST(test_clone_is_deep_and_equal) {
  pcgc_graph *a = mlp(false, "");
  pcgc_graph *c = pcgc_graph_clone(a);
  ck_assert_ptr_nonnull(c);
  ck_assert_uint_eq(pcgc_graph_hash(a), pcgc_graph_hash(c));
  ck_assert(pcgc_graph_equal(a, c));
  int h = pcgc_graph_find(c, "h");
  pcgc_attrs ha = *c->nodes[h].attrs;
  pcgc_attrs_set_int(&ha, "act", PCGC_ACT_GELU);
  ck_assert_int_eq(pcgc_graph_set_attrs(c, h, &ha), PCGC_OK);
  ck_assert(c->nodes[h].attrs != a->nodes[h].attrs);
  ck_assert_int_eq((int)pcgc_attrs_int(a->nodes[h].attrs, "act"), PCGC_ACT_RELU);
  ck_assert_uint_ne(pcgc_graph_hash(a), pcgc_graph_hash(c));
  ck_assert(!pcgc_graph_equal(a, c));
  pcgc_graph_free(a);
  pcgc_graph_free(c);
}
END_TEST

/* Changes attribute i of `a` to a different valid value. */
static void mutate(pcgc_attrs *a, int i) {
  const pcgc_attr_desc *d = pcgc_op_attr(a->kind, i);
  int64_t *l = a->ints + a->off[i];
  switch (d->type) {
  case PCGC_ATTR_INT: a->val[i].i += 1; break;
  case PCGC_ATTR_BOOL: a->val[i].i = !a->val[i].i; break;
  case PCGC_ATTR_FLOAT: a->val[i].f = a->val[i].f * 2 + 0.25; break;
  case PCGC_ATTR_ENUM:
    a->val[i].i = pcgc_enum_value_name(d->enum_type, a->val[i].i + 1) ? a->val[i].i + 1 : 0;
    break;
  case PCGC_ATTR_INTS2: l[1] += 1; break;
  case PCGC_ATTR_INTS:
    if (a->n[i] < PCGC_MAX_INTS) l[a->n[i]++] = 3;
    else l[0]++;
    break;
  }
}

/* For every op and every attribute: a one-op graph's hash changes when that
 * attribute changes, and equality sees it. */
START_TEST(test_hash_sensitive_to_every_attribute) {
  int checked = 0;
  for (int k = 0; k < PCGC_OP_COUNT; k++) {
    int n_attrs = pcgc_op_num_attrs((pcgc_op_kind)k);
    for (int i = 0; i < n_attrs; i++) {
      pcgc_graph *g[2];
      for (int v = 0; v < 2; v++) {
        g[v] = pcgc_graph_new();
        pcgc_attrs a;
        pcgc_attrs_init(&a, (pcgc_op_kind)k);
        if (v == 1) mutate(&a, i);
        int n_in = pcgc_op_min_inputs((pcgc_op_kind)k);
        pcgc_ref in[16];
        for (int j = 0; j < n_in; j++) {
          char nm[16];
          snprintf(nm, sizeof nm, "in%d", j);
          in[j] = (pcgc_ref){input(g[v], nm, 1, (int64_t[]){4}, PCGC_F32), 0};
        }
        ck_assert_int_ge(pcgc_graph_add_node(g[v], (pcgc_op_kind)k, "op", &a, n_in, in), 0);
      }
      if (pcgc_graph_hash(g[0]) == pcgc_graph_hash(g[1]))
        ck_abort_msg("hash ignores attribute '%s' of %s", pcgc_op_attr((pcgc_op_kind)k, i)->name,
                     pcgc_op_name((pcgc_op_kind)k));
      ck_assert_msg(!pcgc_graph_equal(g[0], g[1]), "equality ignores %s.%s", pcgc_op_name((pcgc_op_kind)k),
                    pcgc_op_attr((pcgc_op_kind)k, i)->name);
      pcgc_graph_free(g[0]);
      pcgc_graph_free(g[1]);
      checked++;
    }
  }
  ck_assert_int_ge(checked, 40);
}
END_TEST

/* The scale of a zeros/ones weight is not part of what it computes: it is
 * ignored by hash and equality (the text form cannot even write it). */
START_TEST(test_scale_ignored_for_constant_init) {
  pcgc_graph *g[2];
  for (int v = 0; v < 2; v++) {
    g[v] = pcgc_graph_new();
    pcgc_attrs a;
    pcgc_attrs_init(&a, PCGC_OP_WEIGHT);
    pcgc_attrs_set_ints(&a, "shape", 1, (int64_t[]){4});
    pcgc_attrs_set_int(&a, "init", PCGC_INIT_ONES);
    pcgc_attrs_set_float(&a, "scale", v ? 0.5 : 0.02);
    pcgc_graph_add_node(g[v], PCGC_OP_WEIGHT, "w", &a, 0, NULL);
    infer_ok(g[v]);
  }
  ck_assert_uint_eq(pcgc_graph_hash(g[0]), pcgc_graph_hash(g[1]));
  ck_assert(pcgc_graph_equal(g[0], g[1]));
  /* for a random init the scale matters */
  for (int v = 0; v < 2; v++) {
    pcgc_attrs w0 = *g[v]->nodes[0].attrs;
    pcgc_attrs_set_int(&w0, "init", PCGC_INIT_UNIFORM);
    ck_assert_int_eq(pcgc_graph_set_attrs(g[v], 0, &w0), PCGC_OK);
    infer_ok(g[v]);
  }
  ck_assert_uint_ne(pcgc_graph_hash(g[0]), pcgc_graph_hash(g[1]));
  ck_assert(!pcgc_graph_equal(g[0], g[1]));
  pcgc_graph_free(g[0]);
  pcgc_graph_free(g[1]);
}
END_TEST

START_TEST(test_hash_sensitive_to_op_kind) {
  uint64_t seen[PCGC_OP_COUNT];
  int n = 0;
  static const pcgc_op_kind unary[] = {PCGC_OP_RELU, PCGC_OP_GELU, PCGC_OP_SIGMOID, PCGC_OP_SILU, PCGC_OP_RELU6,
                                       PCGC_OP_HARDSIGMOID, PCGC_OP_HARDSWISH, PCGC_OP_LEAKY_RELU, PCGC_OP_TANH,
                                       PCGC_OP_EXP, PCGC_OP_IDENTITY, PCGC_OP_CLIP, PCGC_OP_LOG_SOFTMAX};
  for (size_t i = 0; i < sizeof unary / sizeof *unary; i++) {
    pcgc_graph *g = pcgc_graph_new();
    int x = input(g, "x", 1, (int64_t[]){4}, PCGC_F32);
    op1(g, unary[i], "u", x);
    infer_ok(g);
    seen[n] = pcgc_graph_hash(g);
    for (int j = 0; j < n; j++) ck_assert_uint_ne(seen[j], seen[n]);
    n++;
    pcgc_graph_free(g);
  }
}
END_TEST

START_TEST(test_hash_sensitive_to_input_slot) {
  pcgc_graph *g[2];
  for (int v = 0; v < 2; v++) {
    g[v] = pcgc_graph_new();
    int a = input(g[v], "a", 1, (int64_t[]){4}, PCGC_F32);
    int b = op1(g[v], PCGC_OP_RELU, "b", a);
    if (v == 0) op2(g[v], PCGC_OP_SUB, "s", a, b);
    else op2(g[v], PCGC_OP_SUB, "s", b, a);
    infer_ok(g[v]);
  }
  ck_assert_uint_ne(pcgc_graph_hash(g[0]), pcgc_graph_hash(g[1]));
  ck_assert(!pcgc_graph_equal(g[0], g[1]));
  pcgc_graph_free(g[0]);
  pcgc_graph_free(g[1]);
}
END_TEST

START_TEST(test_hash_sensitive_to_output_slot) {
  pcgc_graph *g[2];
  for (int v = 0; v < 2; v++) {
    g[v] = pcgc_graph_new();
    int x = input(g[v], "x", 2, (int64_t[]){4, 6}, PCGC_F32);
    pcgc_attrs a;
    pcgc_attrs_init(&a, PCGC_OP_SPLIT);
    pcgc_attrs_set_int(&a, "axis", 1);
    pcgc_attrs_set_ints(&a, "sizes", 2, (int64_t[]){3, 3});
    int s = pcgc_graph_add_node(g[v], PCGC_OP_SPLIT, "s", &a, 1, (pcgc_ref[]){{x, 0}});
    int r = pcgc_graph_add_node(g[v], PCGC_OP_RELU, "r", NULL, 1, (pcgc_ref[]){{s, 0}});
    pcgc_graph_add_node(g[v], PCGC_OP_ADD, "sum", NULL, 2, (pcgc_ref[]){{r, 0}, {s, v}});
    infer_ok(g[v]);
  }
  ck_assert_uint_ne(pcgc_graph_hash(g[0]), pcgc_graph_hash(g[1]));
  ck_assert(!pcgc_graph_equal(g[0], g[1]));
  pcgc_graph_free(g[0]);
  pcgc_graph_free(g[1]);
}
END_TEST

START_TEST(test_hash_sensitive_to_sharing) {
  /* one relu used twice vs two identical relus */
  pcgc_graph *g[2];
  for (int v = 0; v < 2; v++) {
    g[v] = pcgc_graph_new();
    int x = input(g[v], "x", 1, (int64_t[]){4}, PCGC_F32);
    int r1 = op1(g[v], PCGC_OP_RELU, "r1", x);
    int r2 = v ? op1(g[v], PCGC_OP_RELU, "r2", x) : r1;
    op2(g[v], PCGC_OP_ADD, "s", r1, r2);
    infer_ok(g[v]);
  }
  ck_assert_uint_ne(pcgc_graph_hash(g[0]), pcgc_graph_hash(g[1]));
  ck_assert(!pcgc_graph_equal(g[0], g[1]));
  pcgc_graph_free(g[0]);
  pcgc_graph_free(g[1]);
}
END_TEST

START_TEST(test_hash_sensitive_to_wiring_of_symmetric_nodes) {
  /* r1,r2 identical relus of x. Graph 0: s1 = r1*r1, s2 = r2*r2.
   * Graph 1: s1 = r1*r2, s2 = r1*r2. Same multiset of nodes and of one-hop
   * signatures; only the wiring differs. */
  pcgc_graph *g[2];
  for (int v = 0; v < 2; v++) {
    g[v] = pcgc_graph_new();
    int x = input(g[v], "x", 1, (int64_t[]){4}, PCGC_F32);
    int r1 = op1(g[v], PCGC_OP_RELU, "r1", x), r2 = op1(g[v], PCGC_OP_RELU, "r2", x);
    int s1 = v ? op2(g[v], PCGC_OP_MUL, "s1", r1, r2) : op2(g[v], PCGC_OP_MUL, "s1", r1, r1);
    int s2 = v ? op2(g[v], PCGC_OP_MUL, "s2", r1, r2) : op2(g[v], PCGC_OP_MUL, "s2", r2, r2);
    op2(g[v], PCGC_OP_ADD, "t", s1, s2);
    infer_ok(g[v]);
  }
  ck_assert_uint_ne(pcgc_graph_hash(g[0]), pcgc_graph_hash(g[1]));
  ck_assert(!pcgc_graph_equal(g[0], g[1]));
  pcgc_graph_free(g[0]);
  pcgc_graph_free(g[1]);
}
END_TEST

START_TEST(test_hash_sensitive_to_parallel_types) {
  /* same op sequence, different degrees */
  pcgc_graph *g[2];
  for (int v = 0; v < 2; v++) {
    g[v] = pcgc_graph_new();
    int x = input(g[v], "x", 2, (int64_t[]){8, 8}, PCGC_F32);
    pcgc_attrs a;
    pcgc_attrs_init(&a, PCGC_OP_PARTITION);
    pcgc_attrs_set_int(&a, "dim", 0);
    pcgc_attrs_set_int(&a, "degree", v ? 4 : 2);
    int p = pcgc_graph_add_node(g[v], PCGC_OP_PARTITION, "p", &a, 1, (pcgc_ref[]){{x, 0}});
    op1(g[v], PCGC_OP_RELU, "r", p);
    infer_ok(g[v]);
  }
  ck_assert_int_eq(g[1]->nodes[2].out[0].degree[0], 4);
  ck_assert_uint_ne(pcgc_graph_hash(g[0]), pcgc_graph_hash(g[1]));
  ck_assert(!pcgc_graph_equal(g[0], g[1]));
  pcgc_graph_free(g[0]);
  pcgc_graph_free(g[1]);
}
END_TEST

START_TEST(test_hash_sensitive_to_extra_node_and_shape) {
  pcgc_graph *a = mlp(false, ""), *b = mlp(false, "");
  int loss = pcgc_graph_find(b, "loss");
  op1(b, PCGC_OP_IDENTITY, "extra", loss);
  infer_ok(b);
  ck_assert_uint_ne(pcgc_graph_hash(a), pcgc_graph_hash(b));
  ck_assert(!pcgc_graph_equal(a, b));
  pcgc_graph_free(b);
  b = mlp(false, "");
  pcgc_attrs xa = *b->nodes[pcgc_graph_find(b, "x")].attrs, la = *b->nodes[pcgc_graph_find(b, "labels")].attrs;
  pcgc_attrs_set_ints(&xa, "shape", 2, (int64_t[]){16, 64});
  pcgc_attrs_set_ints(&la, "shape", 1, (int64_t[]){16});
  ck_assert_int_eq(pcgc_graph_set_attrs(b, pcgc_graph_find(b, "x"), &xa), PCGC_OK);
  ck_assert_int_eq(pcgc_graph_set_attrs(b, pcgc_graph_find(b, "labels"), &la), PCGC_OK);
  infer_ok(b);
  ck_assert_uint_ne(pcgc_graph_hash(a), pcgc_graph_hash(b));
  pcgc_graph_free(a);
  pcgc_graph_free(b);
}
END_TEST

START_TEST(test_equal_with_symmetric_branches) {
  /* two identical branches: equality must find the isomorphism whichever way
   * the nodes were created */
  pcgc_graph *g[2];
  for (int v = 0; v < 2; v++) {
    g[v] = pcgc_graph_new();
    int x = input(g[v], "x", 2, (int64_t[]){4, 8}, PCGC_F32);
    int w1 = weight(g[v], v ? "wb" : "wa", 2, (int64_t[]){8, 8});
    int w2 = weight(g[v], v ? "wa" : "wb", 2, (int64_t[]){8, 8});
    int l1 = linear(g[v], "l1", x, w1, -1, PCGC_ACT_NONE);
    int l2 = linear(g[v], "l2", x, w2, -1, PCGC_ACT_NONE);
    int r = op1(g[v], PCGC_OP_RELU, "r", v ? l2 : l1);
    op2(g[v], PCGC_OP_ADD, "s", r, v ? l1 : l2);
    infer_ok(g[v]);
  }
  ck_assert_uint_eq(pcgc_graph_hash(g[0]), pcgc_graph_hash(g[1]));
  ck_assert(pcgc_graph_equal(g[0], g[1]));
  pcgc_graph_free(g[0]);
  pcgc_graph_free(g[1]);
}
END_TEST

START_TEST(test_stats_of_mlp) {
  pcgc_graph *g = mlp(false, "");
  pcgc_graph_stats st;
  ck_assert_int_eq(pcgc_graph_stats_compute(g, &st, NULL), PCGC_OK);
  ck_assert_int_eq(st.params, 64 * 128 + 128 + 128 * 10);
  ck_assert_int_eq(st.count_by_kind[PCGC_OP_LINEAR], 2);
  ck_assert_int_eq(st.count_by_kind[PCGC_OP_WEIGHT], 3);
  /* linear 1: 2*32*64*128 + 32*128 (bias) + 32*128 (relu); linear 2: 2*32*128*10;
   * cross-entropy: 6 per logit */
  double fwd = 2.0 * 32 * 64 * 128 + 2.0 * 32 * 128 + 2.0 * 32 * 128 * 10 + 6.0 * 32 * 10;
  ck_assert_double_eq_tol(st.fwd_flops, fwd, 0.5);
  ck_assert_double_eq_tol(st.param_bytes, 4.0 * (64 * 128 + 128 + 128 * 10), 0.5);
  /* h [32,128] + logits [32,10] + loss scalar, f32 */
  ck_assert_double_eq_tol(st.activation_bytes, 4.0 * (32 * 128 + 32 * 10 + 1), 0.5);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_backward_pairs) {
  ck_assert_int_eq(pcgc_op_backward_pair(PCGC_OP_PARTITION), PCGC_OP_COMBINE);
  ck_assert_int_eq(pcgc_op_backward_pair(PCGC_OP_COMBINE), PCGC_OP_PARTITION);
  ck_assert_int_eq(pcgc_op_backward_pair(PCGC_OP_REPLICATE), PCGC_OP_REDUCE);
  ck_assert_int_eq(pcgc_op_backward_pair(PCGC_OP_REDUCE), PCGC_OP_REPLICATE);
  ck_assert_int_eq(pcgc_op_backward_pair(PCGC_OP_PIPELINE), PCGC_OP_UNPIPELINE);
  ck_assert_int_eq(pcgc_op_backward_pair(PCGC_OP_UNPIPELINE), PCGC_OP_PIPELINE);
  ck_assert_int_eq(pcgc_op_backward_pair(PCGC_OP_LINEAR), -1);
  /* every parallel op has a pair, and pairing is an involution */
  for (int k = 0; k < PCGC_OP_COUNT; k++) {
    int p = pcgc_op_backward_pair((pcgc_op_kind)k);
    bool par = pcgc_op_class_of((pcgc_op_kind)k) == PCGC_CLASS_PARALLEL;
    ck_assert_int_eq(p >= 0, par);
    if (p >= 0) ck_assert_int_eq(pcgc_op_backward_pair((pcgc_op_kind)p), k);
  }
}
END_TEST

/* A data-parallel MLP step and its backward-paired operators type-check
 * the way DESIGN.md says: replicate's backward (reduce) brings the weight
 * gradient's sum degree back to 1. */
START_TEST(test_backward_pair_types_invert) {
  pcgc_ptensor w;
  pcgc_ptensor_init(&w, PCGC_F32, 2, (int64_t[]){64, 128});
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_REPLICATE);
  pcgc_attrs_set_int(&a, "degree", 4);
  pcgc_ptensor wr, grad, back;
  ck_assert_int_eq(pcgc_op_infer(PCGC_OP_REPLICATE, &a, 1, &w, &wr, NULL), PCGC_OK);
  ck_assert_int_eq(wr.replica, 4);
  /* the gradient of a replicated tensor arrives as 4 partial sums */
  grad = w;
  grad.sum = 4;
  pcgc_attrs b;
  pcgc_attrs_init(&b, (pcgc_op_kind)pcgc_op_backward_pair(PCGC_OP_REPLICATE));
  pcgc_attrs_set_int(&b, "degree", 4);
  ck_assert_int_eq(pcgc_op_infer(b.kind, &b, 1, &grad, &back, NULL), PCGC_OK);
  ck_assert(pcgc_ptensor_equal(&back, &w));
  /* partition's backward is combine with the same attributes */
  pcgc_attrs_init(&a, PCGC_OP_PARTITION);
  pcgc_attrs_set_int(&a, "dim", 1);
  pcgc_attrs_set_int(&a, "degree", 2);
  pcgc_ptensor p;
  ck_assert_int_eq(pcgc_op_infer(PCGC_OP_PARTITION, &a, 1, &w, &p, NULL), PCGC_OK);
  pcgc_attrs c = a;
  c.kind = (pcgc_op_kind)pcgc_op_backward_pair(PCGC_OP_PARTITION);
  ck_assert_int_eq(pcgc_op_infer(c.kind, &c, 1, &p, &back, NULL), PCGC_OK);
  ck_assert(pcgc_ptensor_equal(&back, &w));
}
END_TEST

START_TEST(test_ptensor_format) {
  pcgc_ptensor t;
  pcgc_ptensor_init(&t, PCGC_F32, 2, (int64_t[]){64, 256});
  char buf[128];
  pcgc_ptensor_format(buf, sizeof buf, &t);
  ck_assert_str_eq(buf, "f32[64, 256]");
  t.degree[0] = 4;
  t.sum = 2;
  t.replica = 3;
  t.micro = 2;
  t.micro_dim = 0;
  pcgc_ptensor_format(buf, sizeof buf, &t);
  ck_assert_str_eq(buf, "f32[64/4, 256]{sum=2, rep=3, micro=2@0}");
  ck_assert_int_eq(pcgc_ptensor_pieces(&t), 24);
  ck_assert_int_eq(pcgc_ptensor_numel(&t), 64 * 256);
  ck_assert_int_eq((int)pcgc_ptensor_bytes(&t), 64 * 256 * 4);
  pcgc_ptensor_init(&t, PCGC_I32, 0, NULL);
  pcgc_ptensor_format(buf, sizeof buf, &t);
  ck_assert_str_eq(buf, "i32[]");
  ck_assert_int_eq(pcgc_ptensor_numel(&t), 1);
}
END_TEST

/* Attributes are a small plain value (graphs are copied for every rewrite
 * the search tries) that still holds every attribute of every op at once,
 * lists at their longest, without one overwriting another. */
START_TEST(test_attrs_compact) {
  ck_assert_uint_le(sizeof(pcgc_attrs), 200);
  ck_assert_uint_le(sizeof(pcgc_node), 96); /* the attributes are shared, by pointer */
  for (int k = 0; k < PCGC_OP_COUNT; k++) {
    pcgc_attrs a;
    pcgc_attrs_init(&a, (pcgc_op_kind)k);
    int na = pcgc_op_num_attrs((pcgc_op_kind)k);
    for (int i = 0; i < na; i++) {
      const pcgc_attr_desc *d = pcgc_op_attr((pcgc_op_kind)k, i);
      int64_t list[PCGC_MAX_INTS];
      int n = d->type == PCGC_ATTR_INTS ? PCGC_MAX_INTS : 2;
      for (int j = 0; j < n; j++) list[j] = 1000 * (i + 1) + j;
      pcgc_status st;
      switch (d->type) {
      case PCGC_ATTR_INTS:
      case PCGC_ATTR_INTS2: st = pcgc_attrs_set_ints(&a, d->name, n, list); break;
      case PCGC_ATTR_FLOAT: st = pcgc_attrs_set_float(&a, d->name, 0.5 + i); break;
      case PCGC_ATTR_INT: st = pcgc_attrs_set_int(&a, d->name, -7 - i); break;
      default: st = pcgc_attrs_set_int(&a, d->name, 1); break; /* bool, enum */
      }
      ck_assert_int_eq(st, PCGC_OK);
    }
    ck_assert_int_eq(pcgc_attrs_check(&a, NULL), PCGC_OK);
    pcgc_attrs b = a; /* a copy reads the same */
    ck_assert(pcgc_attrs_equal(&a, &b));
    for (int i = 0; i < na; i++) {
      const pcgc_attr_desc *d = pcgc_op_attr((pcgc_op_kind)k, i);
      pcgc_ints l = pcgc_attrs_ints(&b, d->name);
      ck_assert(b.set[i]);
      switch (d->type) {
      case PCGC_ATTR_INTS:
      case PCGC_ATTR_INTS2:
        ck_assert_int_eq(l.n, d->type == PCGC_ATTR_INTS ? PCGC_MAX_INTS : 2);
        for (int j = 0; j < l.n; j++) ck_assert_int_eq(l.v[j], 1000 * (i + 1) + j);
        ck_assert_ptr_eq(pcgc_attrs_ints_at(&b, i).v, l.v);
        break;
      case PCGC_ATTR_FLOAT: ck_assert_double_eq(pcgc_attrs_float(&b, d->name), 0.5 + i); break;
      case PCGC_ATTR_INT: ck_assert_int_eq(pcgc_attrs_int(&b, d->name), -7 - i); break;
      default: ck_assert_int_eq(pcgc_attrs_int_at(&b, i), 1); break;
      }
    }
  }
  /* the longest list of weight (shape) beside its three scalars */
  pcgc_attrs w;
  pcgc_attrs_init(&w, PCGC_OP_WEIGHT);
  int64_t shape[PCGC_MAX_INTS + 1];
  for (int j = 0; j <= PCGC_MAX_INTS; j++) shape[j] = j + 1;
  ck_assert_int_eq(pcgc_attrs_set_ints(&w, "shape", PCGC_MAX_INTS + 1, shape), PCGC_ERR_INVALID);
  ck_assert_int_eq(pcgc_attrs_set_ints(&w, "shape", PCGC_MAX_INTS, shape), PCGC_OK);
  char buf[256];
  pcgc_attr_format(buf, sizeof buf, &w, pcgc_op_attr_index(PCGC_OP_WEIGHT, "shape"));
  ck_assert_str_eq(buf, "shape=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]");
  pcgc_attr_format(buf, sizeof buf, &w, pcgc_op_attr_index(PCGC_OP_WEIGHT, "scale"));
  ck_assert_str_eq(buf, "scale=0.02");
}
END_TEST

START_TEST(test_attr_api) {
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_CONV2D);
  pcgc_ints st = pcgc_attrs_ints(&a, "stride");
  ck_assert_int_eq(st.n, 2);
  ck_assert_int_eq(st.v[0], 1);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "stride", 2), PCGC_OK); /* scalar fills both */
  ck_assert_int_eq(pcgc_attrs_ints(&a, "stride").v[1], 2);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "nonexistent", 2), PCGC_ERR_INVALID);
  ck_assert_int_eq(pcgc_attrs_set_float(&a, "groups", 2.5), PCGC_ERR_INVALID);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "padding", 3, (int64_t[]){1, 2, 3}), PCGC_ERR_INVALID);
  char buf[64];
  pcgc_attr_format(buf, sizeof buf, &a, pcgc_op_attr_index(PCGC_OP_CONV2D, "stride"));
  ck_assert_str_eq(buf, "stride=[2, 2]");
  pcgc_attr_format(buf, sizeof buf, &a, pcgc_op_attr_index(PCGC_OP_CONV2D, "act"));
  ck_assert_str_eq(buf, "act=none");
  pcgc_attrs_init(&a, PCGC_OP_LAYERNORM);
  pcgc_attr_format(buf, sizeof buf, &a, pcgc_op_attr_index(PCGC_OP_LAYERNORM, "eps"));
  ck_assert_str_eq(buf, "eps=1e-05");
  pcgc_attrs_init(&a, PCGC_OP_CONCAT);
  pcgc_error err;
  pcgc_error_clear(&err);
  ck_assert_int_eq(pcgc_attrs_check(&a, &err), PCGC_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "missing required attribute 'axis'"));
  ck_assert_int_eq(pcgc_op_from_name("batch_matmul"), PCGC_OP_BATCH_MATMUL);
  ck_assert_int_eq(pcgc_op_from_name("lineer"), -1);
  ck_assert_int_eq(pcgc_enum_value_from_name(PCGC_ENUM_ACT, "gelu"), PCGC_ACT_GELU);
  ck_assert_str_eq(pcgc_enum_value_name(PCGC_ENUM_POOL, PCGC_POOL_AVG), "avg");
  ck_assert_ptr_null(pcgc_enum_value_name(PCGC_ENUM_POOL, 2));
  ck_assert_int_eq(pcgc_dtype_from_name("bf16"), PCGC_BF16);
  ck_assert_int_eq((int)pcgc_dtype_size(PCGC_BF16), 2);
}
END_TEST

START_TEST(test_error_print_format) {
  pcgc_error err;
  const char *src = "const B = 4\nh = lineer(x, out=10)\n";
  pcgc_error_set(&err, PCGC_ERR_PARSE, "unknown operator '%s'", "lineer");
  pcgc_error_at(&err, (pcgc_srcloc){"m.pcg", 2, 5}, 6, src, strlen(src));
  pcgc_error_hint(&err, "did you mean '%s'?", "linear");
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  pcgc_error_print(f, &err);
  fclose(f);
  ck_assert_str_eq(out, "m.pcg:2:5: error: unknown operator 'lineer'\n"
                        " 2 | h = lineer(x, out=10)\n"
                        "   |     ^~~~~~\n"
                        "hint: did you mean 'linear'?\n");
  free(out);
}
END_TEST

static pcgc_graph *parse(const char *text) {
  pcgc_error err = {0};
  pcgc_graph *g = pcgc_model_parse(text, strlen(text), "inline.pcg", NULL, &err);
  ck_assert_msg(g != NULL, "%s", err.message);
  return g;
}

/* A loss added to an inference graph: class ids for cross entropy, the
 * output's type for mse; refused where it is ambiguous or already there. */
START_TEST(test_add_loss) {
  pcgc_error err = {0};
  pcgc_graph *g = parse("input x: f32[4, 8]\nweight w: f32[8, 3]\ny = matmul(x, w)\n");
  ck_assert_int_eq(pcgc_graph_add_loss(g, PCGC_OP_SOFTMAX_CROSS_ENTROPY, &err), PCGC_OK);
  int l = pcgc_graph_find(g, "labels"), loss = pcgc_graph_find(g, "loss");
  ck_assert(l >= 0 && loss >= 0);
  ck_assert_int_eq(g->nodes[l].out[0].dtype, PCGC_I32);
  ck_assert_int_eq(g->nodes[l].out[0].rank, 1);
  ck_assert_int_eq(g->nodes[l].out[0].dims[0], 4);
  ck_assert_int_eq(g->nodes[loss].kind, PCGC_OP_SOFTMAX_CROSS_ENTROPY);
  ck_assert_int_eq(g->nodes[loss].in[0].node, pcgc_graph_find(g, "y"));
  ck_assert_int_eq(pcgc_graph_validate(g, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_graph_add_loss(g, PCGC_OP_MSE, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "already has a loss, 'loss'") != NULL, "%s", err.message);
  pcgc_graph_free(g);

  /* mse: labels of the output's type; a name already taken gets a suffix */
  g = parse("input labels: f32[4, 8]\ny = relu(labels)\n");
  ck_assert_int_eq(pcgc_graph_add_loss(g, PCGC_OP_MSE, &err), PCGC_OK);
  l = pcgc_graph_find(g, "labels_1");
  ck_assert(l >= 0);
  ck_assert(pcgc_ptensor_equal(&g->nodes[l].out[0], &g->nodes[pcgc_graph_find(g, "y")].out[0]));
  pcgc_graph_free(g);

  /* two outputs: which one is meant is not known */
  g = parse("input x: f32[4, 8]\na = relu(x)\nb = tanh(x)\n");
  ck_assert_int_eq(pcgc_graph_add_loss(g, PCGC_OP_MSE, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "2 outputs ('a', 'b')") != NULL, "%s", err.message);
  ck_assert_int_eq(pcgc_graph_add_loss(g, PCGC_OP_RELU, &err), PCGC_ERR_INVALID);
  pcgc_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("graph");
  TCase *tc = tcase_create("graph");
  tcase_add_test(tc, test_add_loss);
  tcase_add_test(tc, test_build_and_types);
  tcase_add_test(tc, test_topo_order);
  tcase_add_test(tc, test_cycle_detected);
  tcase_add_test(tc, test_dangling_and_bad_slot);
  tcase_add_test(tc, test_wrong_arity_in_graph);
  tcase_add_test(tc, test_type_mismatch_detected);
  tcase_add_test(tc, test_type_error_names_node);
  tcase_add_test(tc, test_hash_independent_of_order_and_names);
  tcase_add_test(tc, test_clone_is_deep_and_equal);
  tcase_add_test(tc, test_hash_sensitive_to_every_attribute);
  tcase_add_test(tc, test_hash_sensitive_to_op_kind);
  tcase_add_test(tc, test_scale_ignored_for_constant_init);
  tcase_add_test(tc, test_hash_sensitive_to_input_slot);
  tcase_add_test(tc, test_hash_sensitive_to_output_slot);
  tcase_add_test(tc, test_hash_sensitive_to_sharing);
  tcase_add_test(tc, test_hash_sensitive_to_wiring_of_symmetric_nodes);
  tcase_add_test(tc, test_hash_sensitive_to_parallel_types);
  tcase_add_test(tc, test_hash_sensitive_to_extra_node_and_shape);
  tcase_add_test(tc, test_equal_with_symmetric_branches);
  tcase_add_test(tc, test_stats_of_mlp);
  tcase_add_test(tc, test_backward_pairs);
  tcase_add_test(tc, test_backward_pair_types_invert);
  tcase_add_test(tc, test_ptensor_format);
  tcase_add_test(tc, test_attr_api);
  tcase_add_test(tc, test_attrs_compact);
  tcase_add_test(tc, test_error_print_format);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
