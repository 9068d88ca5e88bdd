/*
 * test_model.c — the model-file reader (pcg/model*.c): every malformed model
 * in tests/data/bad-models fails at the line:col its first line states, with
 * the stated message and a hint; every shipped model in models/ parses,
 * validates and reads back from its canonical text with the same hash;
 * BERT-Large has its published parameter count; blocks, repeat, --set
 * overrides, weight-creating keys and expressions build what the format
 * document says.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/expect_header.h"
#include "pcg.h"

#include "../common/check_main.h"

#ifndef PCGC_SOURCE_DIR
#error "PCGC_SOURCE_DIR must be defined to the source tree"
#endif

/* ------------------------------------------------------------- helpers */

static pcgc_graph *parse(const char *text, pcgc_error *err) {
  return pcgc_model_parse(text, strlen(text), "test.pcg", NULL, err);
}

static pcgc_graph *parse_ok(const char *text) {
  pcgc_error err = {0};
  pcgc_graph *g = parse(text, &err);
  if (!g) pcgc_error_print(stderr, &err);
  ck_assert_msg(g != NULL, "parse failed: %d:%d: %s", err.line, err.col, err.message);
  return g;
}

/* Parses `text`, which must fail at line:col with `msg` in the message and
 * `hint` (if not NULL) in the hint. */
static void expect_error(const char *text, int line, int col, const char *msg, const char *hint) {
  pcgc_error err = {0};
  pcgc_graph *g = parse(text, &err);
  ck_assert_msg(g == NULL, "expected an error containing '%s'", msg);
  ck_assert_int_ne(err.status, PCGC_OK);
  ck_assert_msg(err.line == line && err.col == col, "'%s': expected %d:%d, got %d:%d (%s)", msg, line, col,
                err.line, err.col, err.message);
  ck_assert_msg(strstr(err.message, msg) != NULL, "message '%s' lacks '%s'", err.message, msg);
  ck_assert_str_eq(err.file, "test.pcg");
  ck_assert_msg(err.hint[0] != '\0', "error '%s' has no hint", err.message);
  if (hint) ck_assert_msg(strstr(err.hint, hint) != NULL, "hint '%s' lacks '%s'", err.hint, hint);
}

static const pcgc_node *node(const pcgc_graph *g, const char *name) {
  int id = pcgc_graph_find(g, name);
  ck_assert_msg(id >= 0, "no node '%s'", name);
  return &g->nodes[id];
}

static void assert_shape(const pcgc_graph *g, const char *name, int rank, const int64_t *dims) {
  const pcgc_node *n = node(g, name);
  ck_assert_msg(n->typed, "'%s' is not typed", name);
  ck_assert_msg(n->out[0].rank == rank, "'%s' has rank %d, want %d", name, n->out[0].rank, rank);
  for (int i = 0; i < rank; i++)
    ck_assert_msg(n->out[0].dims[i] == dims[i], "'%s' dim %d is %lld, want %lld", name, i,
                  (long long)n->out[0].dims[i], (long long)dims[i]);
}

#define SHAPE(g, name, ...) \
  assert_shape(g, name, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static void assert_init(const pcgc_graph *g, const char *name, int64_t init, double scale) {
  const pcgc_node *n = node(g, name);
  ck_assert_int_eq(n->kind, PCGC_OP_WEIGHT);
  ck_assert_int_eq(pcgc_attrs_int(n->attrs, "init"), init);
  if (init == PCGC_INIT_UNIFORM || init == PCGC_INIT_NORMAL)
    ck_assert_double_eq_tol(pcgc_attrs_float(n->attrs, "scale"), scale, 1e-12);
}

static int64_t param_count(const pcgc_graph *g) {
  int64_t n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].kind == PCGC_OP_WEIGHT) n += pcgc_ptensor_numel(&g->nodes[i].out[0]);
  return n;
}

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* ------------------------------------------------------ malformed models */

START_TEST(bad_models) {
  const char *dir = PCGC_SOURCE_DIR "/tests/data/bad-models";
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "cannot open %s", dir);
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!has_suffix(e->d_name, ".pcg")) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    int line, col;
    char want[512];
    expect_header(path, e->d_name, &line, &col, want, sizeof want);
    pcgc_error err = {0};
    pcgc_graph *g = pcgc_model_load(path, NULL, &err);
    ck_assert_msg(g == NULL, "%s parsed without error", e->d_name);
    ck_assert_msg(err.line == line && err.col == col, "%s: expected the error at %d:%d, got %d:%d: %s",
                  e->d_name, line, col, err.line, err.col, err.message);
    ck_assert_msg(strstr(err.message, want) != NULL, "%s: message '%s' lacks '%s'", e->d_name, err.message, want);
    ck_assert_msg(err.hint[0] != '\0', "%s: no hint for '%s'", e->d_name, err.message);
    ck_assert_msg(err.source_line[0] != '\0', "%s: no source line", e->d_name);
    ck_assert_msg(strcmp(err.file, path) == 0, "%s: error names file '%s'", e->d_name, err.file);
    count++;
  }
  closedir(d);
  ck_assert_msg(count >= 25, "only %d malformed models in %s", count, dir);
}
END_TEST

/* -------------------------------------------------------- shipped models */

/* Reads `g`'s canonical text back and checks it is the same graph. */
static void check_round_trip(const pcgc_graph *g, const char *name) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_graph_write_text(f, g, &err), PCGC_OK);
  long n = ftell(f);
  ck_assert_int_gt(n, 0);
  char *text = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(text);
  rewind(f);
  ck_assert_int_eq(fread(text, 1, (size_t)n, f), n);
  fclose(f);
  pcgc_graph *h = pcgc_model_parse(text, (size_t)n, name, NULL, &err);
  ck_assert_msg(h != NULL, "%s: canonical text does not parse: %d:%d: %s", name, err.line, err.col, err.message);
  ck_assert_int_eq(h->n_nodes, g->n_nodes);
  ck_assert_msg(pcgc_graph_hash(h) == pcgc_graph_hash(g), "%s: canonical text gives another hash", name);
  ck_assert(pcgc_graph_equal(g, h));
  pcgc_graph_free(h);
  free(text);
}

START_TEST(shipped_models) {
  const char *dir = PCGC_SOURCE_DIR "/models";
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "cannot open %s", dir);
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!has_suffix(e->d_name, ".pcg")) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    pcgc_error err = {0};
    pcgc_graph *g = pcgc_model_load(path, NULL, &err);
    if (!g) pcgc_error_print(stderr, &err);
    ck_assert_msg(g != NULL, "%s: %s", e->d_name, err.message);
    ck_assert_ptr_nonnull(g->name);
    ck_assert_int_eq(pcgc_graph_validate(g, &err), PCGC_OK);
    /* every shipped model trains: it ends in a scalar loss */
    int losses = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      ck_assert(g->nodes[i].typed);
      ck_assert_ptr_eq(g->nodes[i].loc.file, g->file); /* owned by the graph */
      ck_assert_str_eq(g->file, path);
      ck_assert_int_gt(g->nodes[i].loc.line, 0);
      if (pcgc_op_class_of(g->nodes[i].kind) == PCGC_CLASS_LOSS) {
        losses++;
        ck_assert_int_eq(g->nodes[i].out[0].rank, 0);
      }
    }
    ck_assert_msg(losses >= 1, "%s has no loss", e->d_name);
    check_round_trip(g, e->d_name);
    pcgc_graph_free(g);
    count++;
  }
  closedir(d);
  ck_assert_int_ge(count, 4);
}
END_TEST

START_TEST(bert_large_parameters) {
  pcgc_error err = {0};
  pcgc_graph *g = pcgc_model_load(PCGC_SOURCE_DIR "/models/bert-large.pcg", NULL, &err);
  ck_assert_msg(g != NULL, "%s", err.message);
  int64_t params = param_count(g);
  /* BertModel with pooler: 335,141,888; the NSP classifier adds 1024*2 + 2 */
  ck_assert_msg(fabs((double)params - 335e6) <= 0.01 * 335e6, "BERT-Large has %lld parameters", (long long)params);
  ck_assert_int_eq(params, 335141888 + 2050);
  pcgc_graph_stats st;
  ck_assert_int_eq(pcgc_graph_stats_compute(g, &st, &err), PCGC_OK);
  ck_assert_int_eq(st.params, params);
  ck_assert_int_eq(st.count_by_kind[PCGC_OP_ATTENTION], 24);
  ck_assert_int_eq(st.count_by_kind[PCGC_OP_LAYERNORM], 1 + 2 * 24);
  SHAPE(g, "enc.0.attn.wq", 1024, 1024);
  SHAPE(g, "enc.23.up.weight", 1024, 4096);
  SHAPE(g, "enc.23.ln2", 8, 512, 1024);
  SHAPE(g, "word.weight", 30522, 1024);
  SHAPE(g, "pos.weight", 512, 1024);
  SHAPE(g, "seg.weight", 2, 1024);
  SHAPE(g, "pooled", 8, 1024);
  SHAPE(g, "logits", 8, 2);
  ck_assert_int_eq(pcgc_attrs_int(node(g, "pooled")->attrs, "act"), PCGC_ACT_TANH);
  ck_assert_int_lt(pcgc_graph_find(g, "enc.24.ln2"), 0);
  pcgc_graph_free(g);

  /* the batch is a constant: --set B=32 changes activations, not parameters */
  const char *names[] = {"B"}, *values[] = {"32"};
  pcgc_model_options o = {1, names, values};
  g = pcgc_model_load(PCGC_SOURCE_DIR "/models/bert-large.pcg", &o, &err);
  ck_assert_msg(g != NULL, "%s", err.message);
  SHAPE(g, "tokens", 32, 512);
  ck_assert_int_eq(param_count(g), 335141888 + 2050);
  pcgc_graph_free(g);
}
END_TEST

/* ------------------------------------------------------ blocks and repeat */

START_TEST(blocks_and_repeat) {
  pcgc_graph *g = parse_ok("input x: f32[4, 8]\n"
                           "block ff(tensor x, int hidden, int out = hidden / 2) {\n"
                           "  f1 = linear(x, out=hidden, act=relu)\n"
                           "  f2 = linear(f1, out=out)\n"
                           "  return f2\n"
                           "}\n"
                           "h = repeat(4) ff(x, hidden=16, out=8)\n"
                           "y = ff(h, hidden=32)\n"
                           "z = relu(h)\n"
                           "w = identity(h.2.f1.weight)   # a path into an instance\n"
                           "block pair(tensor a, tensor b) {\n"
                           "  s = add(a, b)\n"
                           "  return s, b\n"
                           "}\n"
                           "p, q = repeat(3) pair(z, x)\n");
  SHAPE(g, "h.0.f1.weight", 8, 16);
  SHAPE(g, "h.3.f1.weight", 8, 16);
  SHAPE(g, "h.3.f1.bias", 16);
  SHAPE(g, "h.3.f2.weight", 16, 8);
  SHAPE(g, "h.3.f2", 4, 8);
  ck_assert_int_lt(pcgc_graph_find(g, "h.4.f1"), 0);
  SHAPE(g, "y.f1.weight", 8, 32);
  SHAPE(g, "y.f2.weight", 32, 16); /* default out = hidden / 2 */
  /* instance i+1 reads instance i's result; z reads the last instance */
  const pcgc_node *f1 = node(g, "h.1.f1");
  ck_assert_int_eq(f1->in[0].node, pcgc_graph_find(g, "h.0.f2"));
  ck_assert_int_eq(node(g, "z")->in[0].node, pcgc_graph_find(g, "h.3.f2"));
  ck_assert_int_eq(node(g, "w")->in[0].node, pcgc_graph_find(g, "h.2.f1.weight"));
  /* two tensors chained: s feeds a, b is passed through */
  const pcgc_node *s2 = node(g, "p.2.s");
  ck_assert_int_eq(s2->in[0].node, pcgc_graph_find(g, "p.1.s"));
  ck_assert_int_eq(s2->in[1].node, pcgc_graph_find(g, "x"));
  ck_assert_int_eq(node(g, "h.0.f1")->loc.line, 3);
  ck_assert_int_eq(node(g, "h.0.f1")->loc.col, 8);
  pcgc_graph_free(g);

  /* a repeated operator chains its output into its first input */
  g = parse_ok("input x: f32[2, 8]\nr = repeat(3) linear(x, out=8, act=relu)\ny = tanh(r)\n");
  SHAPE(g, "r.2.weight", 8, 8);
  ck_assert_int_eq(node(g, "r.1")->in[0].node, pcgc_graph_find(g, "r.0"));
  ck_assert_int_eq(node(g, "y")->in[0].node, pcgc_graph_find(g, "r.2"));
  pcgc_graph_free(g);

  /* a weight declared in a block belongs to each instance */
  g = parse_ok("input x: f32[2, 4]\n"
               "block proj(tensor x, int n)\n{\n  weight w: f32[4, n] = uniform(0.1)\n  y = matmul(x, w)\n  return y\n}\n"
               "a = proj(x, n=3)\nb = proj(x, n=5)\n");
  SHAPE(g, "a.w", 4, 3);
  SHAPE(g, "b.w", 4, 5);
  SHAPE(g, "b.y", 2, 5);
  pcgc_graph_free(g);

  /* blocks calling blocks nest their prefixes */
  g = parse_ok("input x: f32[2, 4]\n"
               "block inner(tensor x) { a = linear(x, out=4); return a }\n"
               "block outer(tensor x) {\n  i = repeat(2) inner(x)\n  return i\n}\n"
               "o = repeat(2) outer(x)\n");
  SHAPE(g, "o.1.i.1.a.weight", 4, 4);
  ck_assert_int_eq(g->n_nodes, 1 + 2 * 2 * 3);
  pcgc_graph_free(g);

  /* errors inside an instance say which instance */
  pcgc_error err = {0};
  g = parse("input x: f32[2, 4]\n"
            "block f(tensor x, int n) {\n  a = reshape(x, shape=[n, 3])\n  return a\n}\n"
            "y = f(x, n=2)\n",
            &err);
  ck_assert_ptr_null(g);
  ck_assert_int_eq(err.line, 3);
  ck_assert_int_eq(err.col, 7);
  ck_assert_ptr_nonnull(strstr(err.message, "reshape 'y.a'"));
  ck_assert_ptr_nonnull(strstr(err.message, "instance of block 'f' called at line 6"));
}
END_TEST

/* The builder runs each statement as it is parsed and drops its tree;
 * errors still come as if the whole file were parsed first, and the hints
 * that look ahead still find what comes later. */
START_TEST(errors_as_if_parsed_first) {
  /* a syntax error after an error of building wins */
  expect_error("input x: f32[2]\ny = relu(z)\nw = relu(x\n", 3, 9, "'(' is never closed", NULL);
  expect_error("const A = 1 / 0\nconst B = 2\nconst C = 3 +\n", 3, 14, "expected a number or a name", NULL);
  /* without one, the first error of building */
  expect_error("input x: f32[2]\ny = relu(z)\nw = relu(v)\n", 2, 10, "unknown tensor 'z'", NULL);
  /* what a statement further on defines */
  expect_error("const A = N + 1\nconst N = 2\n", 1, 11, "unknown name 'N'",
               "constant 'N' is defined later, at line 2");
  expect_error("input x: f32[2]\ny = relu(z)\nconst K = 1\nz = relu(x)\n", 2, 10, "unknown tensor 'z'",
               "'z' is defined later, at line 4");
  expect_error("input x: f32[2]\nblock f(tensor a) {\n  b = relu(c)\n  c = relu(a)\n  return b\n}\ny = f(x)\n", 3, 12,
               "unknown tensor 'c'", "'c' is defined later, at line 4");
  expect_error("block f(tensor a) { b = g(a); return b }\nblock g(tensor a) { b = f(a); return b }\n", 1, 25,
               "block 'g' is used before its definition", "blocks 'f' and 'g' call each other");
  /* a block's tree outlives its statement: later statements instantiate it */
  pcgc_graph *g = parse_ok("input x: f32[2, 4]\nblock f(tensor a, int n) { b = linear(a, out=n); return b }\n"
                           "const K = 3\ny = f(x, n=K)\nz = f(y, n=5)\nw = repeat(3) f(z, n=5)\n");
  SHAPE(g, "y.b", 2, 3);
  SHAPE(g, "z.b", 2, 5);
  SHAPE(g, "w.2.b", 2, 5);
  pcgc_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------- overrides */

START_TEST(set_overrides) {
  const char *text = "const B = 64\nconst P = 0.5\ninput x: f32[B, 10]\ny = dropout(x, rate=P)\n";
  const char *names[] = {"B", "P", "B"}, *values[] = {"7", "0.25", "16"};
  pcgc_model_options o = {3, names, values};
  pcgc_error err = {0};
  pcgc_graph *g = pcgc_model_parse(text, strlen(text), "t.pcg", &o, &err);
  ck_assert_msg(g != NULL, "%s", err.message);
  SHAPE(g, "x", 16, 10); /* the last --set of a name wins */
  ck_assert_double_eq(pcgc_attrs_float(node(g, "y")->attrs, "rate"), 0.25);
  pcgc_graph_free(g);

  /* an override of nothing is an error with a suggestion */
  const char *bad[] = {"b"}, *v1[] = {"8"};
  o = (pcgc_model_options){1, bad, v1};
  ck_assert_ptr_null(pcgc_model_parse(text, strlen(text), "t.pcg", &o, &err));
  ck_assert_int_eq(err.status, PCGC_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "no constant 'b'"));
  ck_assert_ptr_nonnull(strstr(err.hint, "did you mean 'B'?"));
  ck_assert_str_eq(err.file, "t.pcg");

  const char *unrelated[] = {"LAYERS"};
  o = (pcgc_model_options){1, unrelated, v1};
  ck_assert_ptr_null(pcgc_model_parse(text, strlen(text), "t.pcg", &o, &err));
  ck_assert_ptr_nonnull(strstr(err.message, "no constant 'LAYERS'"));
  ck_assert_ptr_nonnull(strstr(err.hint, "B, P"));

  /* the overrides are checked before building, after a syntax check */
  const char *broken = "const B = 64\ny = relu(q)\nz = relu(\n";
  ck_assert_ptr_null(pcgc_model_parse(broken, strlen(broken), "t.pcg", &o, &err));
  ck_assert_int_eq(err.status, PCGC_ERR_PARSE);
  ck_assert_int_eq(err.line, 4); /* the open '(' swallows the newline: the end of the file */
  const char *unbuilt = "const B = 64\ny = relu(q)\n";
  ck_assert_ptr_null(pcgc_model_parse(unbuilt, strlen(unbuilt), "t.pcg", &o, &err));
  ck_assert_ptr_nonnull(strstr(err.message, "no constant 'LAYERS'"));

  /* values must be numbers */
  const char *b[] = {"B"}, *v2[] = {"sixteen"};
  o = (pcgc_model_options){1, b, v2};
  ck_assert_ptr_null(pcgc_model_parse(text, strlen(text), "t.pcg", &o, &err));
  ck_assert_ptr_nonnull(strstr(err.message, "is not a number"));

  /* a float override where an int is needed fails where it is used */
  const char *v3[] = {"2.5"};
  o = (pcgc_model_options){1, b, v3};
  ck_assert_ptr_null(pcgc_model_parse(text, strlen(text), "t.pcg", &o, &err));
  ck_assert_int_eq(err.line, 3);
  ck_assert_ptr_nonnull(strstr(err.message, "must be an integer, got 2.5"));
}
END_TEST

/* -------------------------------------------------- weight-creating keys */

START_TEST(weight_creating_keys) {
  pcgc_graph *g = parse_ok("input x: f32[4, 8]\n"
                           "input img: f32[2, 6, 10, 10]\n"
                           "input seq: f32[2, 5, 6, 7]\n"
                           "input idx: i32[2, 5]\n"
                           "input q: f32[2, 5, 8]\n"
                           "input k: f32[2, 7, 12]\n"
                           "input v: f32[2, 7, 6]\n"
                           "l1 = linear(x, out=16)\n"
                           "l2 = linear(x, out=3, bias=false)\n"
                           "c1 = conv2d(img, out=4, kernel=[3, 5], groups=2, bias=false, padding=[1, 2])\n"
                           "c2 = conv2d(img, out=8, kernel=3)\n"
                           "b1 = batchnorm(img)\n"
                           "b2 = batchnorm(img, affine=false)\n"
                           "n1 = layernorm(seq, axes=2)\n"
                           "n2 = layernorm(seq)\n"
                           "r1 = rmsnorm(seq)\n"
                           "r2 = rmsnorm(seq, axes=2, affine=false)\n"
                           "e = embedding(idx, num=100, dim=8)\n"
                           "a1 = attention(q, k, v, heads=2, embed=16)\n"
                           "a2 = attention(q, q, q, heads=4, bias=false)\n");
  SHAPE(g, "l1.weight", 8, 16);
  SHAPE(g, "l1.bias", 16);
  assert_init(g, "l1.weight", PCGC_INIT_UNIFORM, 1 / sqrt(8.0));
  assert_init(g, "l1.bias", PCGC_INIT_UNIFORM, 1 / sqrt(8.0));
  SHAPE(g, "l1", 4, 16);
  ck_assert_int_eq(node(g, "l2")->n_in, 2);
  ck_assert_int_lt(pcgc_graph_find(g, "l2.bias"), 0);

  SHAPE(g, "c1.weight", 4, 3, 3, 5);
  assert_init(g, "c1.weight", PCGC_INIT_UNIFORM, 1 / sqrt(3.0 * 3 * 5));
  ck_assert_int_eq(node(g, "c1")->n_in, 2);
  SHAPE(g, "c1", 2, 4, 10, 10);
  SHAPE(g, "c2.weight", 8, 6, 3, 3);
  SHAPE(g, "c2.bias", 8);
  SHAPE(g, "c2", 2, 8, 8, 8);

  SHAPE(g, "b1.scale", 6);
  SHAPE(g, "b1.bias", 6);
  assert_init(g, "b1.scale", PCGC_INIT_ONES, 0);
  assert_init(g, "b1.bias", PCGC_INIT_ZEROS, 0);
  ck_assert_int_eq(node(g, "b2")->n_in, 1);

  SHAPE(g, "n1.scale", 6, 7);
  SHAPE(g, "n1.bias", 6, 7);
  SHAPE(g, "n2.scale", 7);
  assert_init(g, "n2.scale", PCGC_INIT_ONES, 0);
  SHAPE(g, "r1.scale", 7); /* RMSNorm: a scale, no bias */
  assert_init(g, "r1.scale", PCGC_INIT_ONES, 0);
  ck_assert_int_lt(pcgc_graph_find(g, "r1.bias"), 0);
  ck_assert_int_eq(node(g, "r1")->n_in, 2);
  ck_assert_int_eq(node(g, "r2")->n_in, 1);
  SHAPE(g, "r2", 2, 5, 6, 7);

  SHAPE(g, "e.weight", 100, 8);
  assert_init(g, "e.weight", PCGC_INIT_NORMAL, 1.0);
  SHAPE(g, "e", 2, 5, 8);
  ck_assert_int_eq(node(g, "e.weight")->out[0].dtype, PCGC_F32);

  SHAPE(g, "a1.wq", 8, 16);
  SHAPE(g, "a1.wk", 12, 16);
  SHAPE(g, "a1.wv", 6, 16);
  SHAPE(g, "a1.wo", 16, 16);
  SHAPE(g, "a1.bq", 16);
  SHAPE(g, "a1.bo", 16);
  assert_init(g, "a1.wq", PCGC_INIT_UNIFORM, sqrt(6.0 / (8 + 16)));
  assert_init(g, "a1.wo", PCGC_INIT_UNIFORM, sqrt(6.0 / (2 * 16)));
  assert_init(g, "a1.bk", PCGC_INIT_ZEROS, 0);
  ck_assert_int_eq(node(g, "a1")->n_in, 11);
  SHAPE(g, "a1", 2, 5, 16);
  ck_assert_int_eq(node(g, "a2")->n_in, 7);
  SHAPE(g, "a2.wq", 8, 8);
  pcgc_graph_free(g);

  /* an explicit weight takes its init from the declaration */
  g = parse_ok("weight w1: f32[3] = uniform(0.5)\nweight w2: f16[3] = normal(1e-3)\n"
               "weight w3: f32[2, 2] = zeros\nweight w4: f32[3]\n");
  assert_init(g, "w1", PCGC_INIT_UNIFORM, 0.5);
  assert_init(g, "w2", PCGC_INIT_NORMAL, 1e-3);
  ck_assert_int_eq(node(g, "w2")->out[0].dtype, PCGC_F16);
  assert_init(g, "w3", PCGC_INIT_ZEROS, 0);
  assert_init(g, "w4", PCGC_INIT_NORMAL, 0.02);
  pcgc_graph_free(g);

  /* weights follow the data's dtype */
  g = parse_ok("input x: bf16[2, 4]\ny = linear(x, out=2)\n");
  ck_assert_int_eq(node(g, "y.weight")->out[0].dtype, PCGC_BF16);
  pcgc_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------ expressions */

START_TEST(expressions) {
  pcgc_graph *g = parse_ok("const A = (3 + 4) * 2 - 10 / 5   # 12\n"
                           "const M = 17 % 5                 # 2\n"
                           "const N = -A + 20                # 8\n"
                           "const F = 1.5 * 2                # a float\n"
                           "const G = 1 / 4.0\n"
                           "const E = 2e-3 + .5 + 3.\n"
                           "input x: f32[A, M * N, --1]\n"
                           "a = scalar_mul(x, scalar=F / 4)\n"
                           "b = scalar_add(a, scalar=G)\n"
                           "c = scalar_sub(b, scalar=E)\n"
                           "d = scalar_div(c, scalar=7)      # an int where a float is expected\n"
                           "e = softmax(d, axis=-1)\n"
                           "r = reshape(e, shape=[-1, A * M * N / 24])\n");
  SHAPE(g, "x", 12, 16, 1);
  ck_assert_double_eq(pcgc_attrs_float(node(g, "a")->attrs, "scalar"), 0.75);
  ck_assert_double_eq(pcgc_attrs_float(node(g, "b")->attrs, "scalar"), 0.25);
  ck_assert_double_eq_tol(pcgc_attrs_float(node(g, "c")->attrs, "scalar"), 3.502, 1e-12);
  ck_assert_double_eq(pcgc_attrs_float(node(g, "d")->attrs, "scalar"), 7.0);
  ck_assert_int_eq(pcgc_attrs_int(node(g, "e")->attrs, "axis"), -1);
  SHAPE(g, "r", 24, 8);
  pcgc_graph_free(g);

  /* ints2 take one int (repeated) or two; lists may span lines */
  g = parse_ok("input x: f32[1, 1, 9, 9]\n"
               "p = pool2d(x, kind=avg, kernel=3,\n"
               "           stride=[\n             3, 1\n           ])\n");
  pcgc_ints k = pcgc_attrs_ints(node(g, "p")->attrs, "kernel");
  ck_assert_int_eq(k.n, 2);
  ck_assert_int_eq(k.v[0], 3);
  ck_assert_int_eq(k.v[1], 3);
  SHAPE(g, "p", 1, 1, 3, 7);
  pcgc_graph_free(g);

  expect_error("const X = 10 / 3\n", 1, 11, "division 10 / 3 is not exact", "10.0 / 3");
  expect_error("const X = 7 % 0\n", 1, 11, "modulo by zero", NULL);
  expect_error("const X = 2.5 % 2\n", 1, 11, "'%' needs integers", NULL);
  expect_error("const X = -9223372036854775807 - 2\n", 1, 11, "integer overflow", NULL);
  expect_error("const X = 4611686018427387904 * 2\n", 1, 11, "integer overflow", NULL);
  expect_error("const X = 1e308 * 10\n", 1, 11, "out of range", NULL);
  expect_error("const X = 3 +\n", 1, 14, "expected a number or a name, found end of line", NULL);
  expect_error("const X = true\n", 1, 11, "'true' is not a number", "bool attributes");
}
END_TEST

/* ---------------------------------------------------------------- errors */

START_TEST(error_messages) {
  expect_error("input x: f32[2, 4]\nh = lineer(x, out=3)\n", 2, 5, "unknown operator 'lineer'", "did you mean 'linear'?");
  expect_error("input x: f32[2, 4]\nh = linear(x, outt=3)\n", 2, 15, "linear has no attribute 'outt'",
               "did you mean 'out'?");
  expect_error("input x: f32[2, 4]\nh = linear(x, out=3, act=gelo)\n", 2, 26, "unknown act 'gelo'",
               "did you mean 'gelu'?");
  expect_error("input x: f32[2, 4]\ny = enc(x)\nblock enc(tensor x) { return x }\n", 2, 5,
               "block 'enc' is used before its definition", "define block enc (line 3) before using it");
  expect_error("input tokens: f32[2, 4]\ny = relu(tokns)\n", 2, 10, "unknown tensor 'tokns'",
               "did you mean 'tokens'?");
  expect_error("input x: f32[2, 4]\ny = relu(x)\ny = tanh(x)\n", 3, 1, "'y' is already defined",
               "first defined at line 2, column 1");
  expect_error("input x: f32[2, 4]\nh = linear(x, out=3)\nh.bias = relu(x)\n", 3, 1,
               "tensor 'h.bias' is already defined", NULL);
  expect_error("input x: f32[2, 4]\ny = linear(x, out=5, act=relu\n", 2, 11, "'(' is never closed", "add ')'");
  expect_error("input x: f32[2, 4]\ny = relu(x))\n", 2, 12, "unmatched ')'", NULL);
  expect_error("input x: f32[2, 4]\ny = relu(x) z = relu(x)\n", 2, 13, "expected the end of the statement", "';'");
  expect_error("input x: f32[2, 4]\ny = relu(relu(x))\n", 2, 14, "calls cannot be nested", NULL);
  expect_error("input x: f32[2, 4]\ny = x\n", 2, 6, "expected '(' after 'x'", "identity(x)");
  expect_error("input x: f32[2 4]\n", 1, 16, "expected ',' or ']' in the shape", NULL);
  expect_error("weight w: f32[2] = uniform\n", 1, 27, "needs its bound", NULL);
  expect_error("weight w: f32[2] = unifrom(0.1)\n", 1, 20, "unknown initializer 'unifrom'", "did you mean 'uniform'?");
  expect_error("weight w: f32[2] = normal(-1)\n", 1, 20, "standard deviation of 'w' is negative", NULL);
  expect_error("input x: f32[2, 4]\nblock f(tensor x, int n = 2.5) { return x }\ny = f(x)\n", 2, 27,
               "not an integer", NULL);
  expect_error("block f(tensor x, x) { return x }\n", 1, 19, "expected a parameter", "tensor x");
  expect_error("block f(tensor x) {\n  block g(tensor y) { return y }\n  return x\n}\n", 2, 3,
               "cannot be nested", NULL);
  expect_error("block relu(tensor x) { return x }\n", 1, 7, "has the name of an operator", NULL);
  expect_error("input x: f32[2, 4]\na = concat(x, x, axis=1, axis=0)\n", 2, 26, "attribute 'axis' is given twice", NULL);
  expect_error("input x: f32[2, 4]\na = relu(x, 3)\n", 2, 13, "expected a tensor name or key=value, found number '3'",
               "out=3");
  expect_error("input x: f32[2, 4]\n  a, b = relu(x)\n", 2, 3, "relu gives 1 output, but 2 names are on the left",
               NULL);
  expect_error("input x: f32[2, 4]\na = transpose(x, perm=1)\n", 2, 23, "must be a list such as [0, 1]", NULL);
  expect_error("input x: f32[2, 4]\na = softmax(x, axis=x)\n", 2, 21, "'x' is a tensor, not a number", NULL);
  expect_error("input x: f32[2, 4]\na = pool2d(x, kind=3)\n", 2, 20, "must be one of: max, avg", NULL);
  expect_error("input x: f32[2, 4]\na = dropout(x, rate=fast)\n", 2, 21, "must be a number, got 'fast'", NULL);
  expect_error("input x: f32[2, 4]\na = linear(x, out=4, bias=1)\n", 2, 27, "must be true or false", NULL);
  expect_error("input x: f32[2, 4]\na = linear(x, out=0)\n", 2, 19, "must be positive", NULL);
  expect_error("input x: f32[2, 3, 4, 4]\na = conv2d(x, out=4, kernel=3, groups=2)\n", 2, 5,
               "groups=2 must divide", NULL);
  expect_error("input x: f32[2, 4]\na = layernorm(x, axes=3)\n", 2, 5, "axes=3, but the input has 2 dims", NULL);
  expect_error("input x: f32[2, 4]\na = rmsnorm(x, axes=0)\n", 2, 5, "rmsnorm 'a': axes=0, but the input has 2 dims",
               NULL);
  expect_error("input x: f32[2, 4]\na = embedding(x, num=10)\n", 2, 5, "embedding needs dim=", NULL);
  expect_error("input x: i32[2, 4]\na = linear(x, out=3)\n", 2, 5, "linear 'a'", NULL);
  expect_error("model m\ninput x: f32[2]\nmodel\n", 3, 1, "the model is named twice", "first is at 1:1");
  expect_error("input x: f32[2]\nblock f(tensor a, int n) { return a }\ny = f(x, n=[1])\n", 3, 12,
               "takes a number, not a list", NULL);
  expect_error("input x: f32[2]\nblock f(tensor a) { return a }\ny = f(x, a=x)\n", 3, 10,
               "tensor parameter 'a' is passed by position", NULL);
  expect_error("input x: f32[2]\nblock f(tensor a, tensor b) { return a }\ny = f(x)\n", 3, 5,
               "block 'f' takes 2 tensor arguments, got 1", "a, b");
  expect_error("input x: f32[2]\nblock f(tensor a, int n) { return a }\ny = f(x, n=2.5)\n", 3, 12,
               "parameter 'n' of block 'f' is an int, got 2.5", NULL);
  expect_error("const B = 2\ny = B(x)\n", 2, 5, "'B' is a number, not an operator or block", NULL);
  expect_error("const B = 2\ny = relu(B)\n", 2, 10, "'B' is a number, not a tensor", NULL);
  expect_error("input x: f32[2]\ny = repeat(0) relu(x)\n", 2, 12, "repeat count 0 is out of range", NULL);
  expect_error("input x: f32[2]\na, b = repeat(2) split(x, axis=0, sizes=[1, 1])\n", 2, 15,
               "repeat cannot chain split", NULL);
  expect_error("input x: f32[2]\n}\n", 2, 1, "expected a statement, found '}'", NULL);
  expect_error("input x: f32[2]\n# only a comment: \xce\xbb is fine here\ny = relu(x) \xce\xbb\n", 3, 13,
               "unexpected character U+03BB", NULL);
  expect_error("input x: f32[2]\n# bad \xc3\x28 utf-8\n", 2, 7, "invalid UTF-8 byte 0xC3 in a comment", NULL);
  expect_error("input x: f32[2]\ny = relu(x.)\n", 2, 10, "name 'x.' ends with '.'", NULL);
  expect_error("const X = 3x\n", 1, 11, "malformed number '3x'", NULL);
  expect_error("const X = 1e\n", 1, 11, "malformed number '1e'", "exponent");
  expect_error("const X = \"a\"\n", 1, 11, "unexpected character '\"'", "without quotes");

  /* NUL bytes count even when the caller's length covers them */
  pcgc_error err = {0};
  const char nul[] = "input x: f32[2]\ny = relu(x)\0\n";
  ck_assert_ptr_null(pcgc_model_parse(nul, sizeof nul - 1, "test.pcg", NULL, &err));
  ck_assert_int_eq(err.line, 2);
  ck_assert_int_eq(err.col, 12);
  ck_assert_ptr_nonnull(strstr(err.message, "NUL byte"));

  /* the caller's length is respected: nothing is read past it */
  char *exact = malloc(11);
  memcpy(exact, "input x: f3", 11);
  ck_assert_ptr_null(pcgc_model_parse(exact, 11, "test.pcg", NULL, &err));
  ck_assert_ptr_nonnull(strstr(err.message, "unknown dtype 'f3'"));
  free(exact);

  /* a NULL error report is fine */
  ck_assert_ptr_null(pcgc_model_parse("y = relu(x)", 11, NULL, NULL, NULL));
}
END_TEST

START_TEST(limits) {
  /* deep nesting is refused, not a stack overflow */
  size_t n = 100000;
  char *deep = malloc(2 * n + 32);
  ck_assert_ptr_nonnull(deep);
  strcpy(deep, "const X = ");
  size_t k = strlen(deep);
  memset(deep + k, '(', n);
  deep[k + n] = '\0';
  pcgc_error err = {0};
  ck_assert_ptr_null(pcgc_model_parse(deep, strlen(deep), "test.pcg", NULL, &err));
  ck_assert_ptr_nonnull(strstr(err.message, "nested too deeply"));
  memset(deep + k, '-', n);
  ck_assert_ptr_null(pcgc_model_parse(deep, strlen(deep), "test.pcg", NULL, &err));
  ck_assert_ptr_nonnull(strstr(err.message, "nested too deeply"));
  /* long operator chains too */
  k = strlen("const X = ");
  for (size_t i = 0; i < n; i++) {
    deep[k + 2 * i] = '1';
    deep[k + 2 * i + 1] = '+';
  }
  deep[k + 2 * n - 1] = '\0';
  ck_assert_ptr_null(pcgc_model_parse(deep, strlen(deep), "test.pcg", NULL, &err));
  ck_assert_ptr_nonnull(strstr(err.message, "expression is too long"));
  free(deep);

  /* nested repeats are refused after their first instance */
  expect_error("input x: f32[2]\n"
               "block a(tensor x) { y = relu(x); return y }\n"
               "block b(tensor x) { y = repeat(10000) a(x); return y }\n"
               "z = repeat(10000) b(x)\n",
               4, 12, "would make the model about 100000001 nodes", "lower the repeat count");
  /* ... also when the blocks create nothing */
  expect_error("input x: f32[2]\n"
               "block a(tensor x) { return x }\n"
               "block b(tensor x) { y = repeat(10000) a(x); return y }\n"
               "z = repeat(10000) b(x)\n",
               4, 12, "would run about", NULL);
  /* tensors count too: 7000 splits into 16 are 7000 nodes but 112000 tensors */
  expect_error("input x: f32[4, 32]\n"
               "block a(tensor x) {\n"
               "  s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, sa, sb, sc, sd, se, sf = split(x, axis=1, "
               "sizes=[2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2])\n"
               "  return x\n}\n"
               "z = repeat(7000) a(x)\n",
               6, 12, "would make the model about 112001 tensors", "lower the repeat count");
  /* blocks that each call the one before twice double the graph per level */
  char text[16384];
  k = (size_t)snprintf(text, sizeof text, "input x: f32[2]\nblock b0(tensor x) { y = relu(x); return y }\n");
  for (int i = 1; i <= 17; i++)
    k += (size_t)snprintf(text + k, sizeof text - k,
                          "block b%d(tensor x) {\n  y = b%d(x)\n  z = b%d(y)\n  return z\n}\n", i, i - 1, i - 1);
  snprintf(text + k, sizeof text - k, "out = b17(x)\n");
  ck_assert_ptr_null(parse(text, &err));
  ck_assert_ptr_nonnull(strstr(err.message, "the model has more than 100000 nodes"));
  ck_assert_ptr_nonnull(strstr(err.message, "an instance of block"));
  /* block instances nest at most 64 deep; the chain below is 70 */
  k = (size_t)snprintf(text, sizeof text, "input x: f32[2]\nblock b0(tensor x) { return x }\n");
  for (int i = 1; i < 70; i++)
    k += (size_t)snprintf(text + k, sizeof text - k, "block b%d(tensor x) { y = b%d(x); return y }\n", i, i - 1);
  snprintf(text + k, sizeof text - k, "z = b69(x)\n");
  ck_assert_ptr_null(parse(text, &err));
  ck_assert_ptr_nonnull(strstr(err.message, "nested too deeply"));
  /* large but legal dims, and dims whose bytes overflow */
  pcgc_graph *g = parse_ok("input x: f32[1073741824, 1073741824]\n");
  pcgc_graph_free(g);
  expect_error("input x: f64[1073741824, 1073741824, 8]\n", 1, 10, "too large", NULL);
}
END_TEST

START_TEST(lexical_forms) {
  /* ';' separates statements, CRLF line ends, comments anywhere, a byte-order
   * mark, no final newline, calls spanning lines */
  pcgc_graph *g = parse_ok("\xef\xbb\xbf# model with odd layout\r\n"
                           "model odd.layout.v2 ; const B = 2;;\r\n"
                           "input x: f32[B,\r\n   4]   # trailing comment\r\n"
                           "block f(tensor x,\n        int n = 3,) {  # trailing comma\n"
                           "  y = linear(x,\n             out=n,\n  ); return y }\n"
                           "a = f(x)\n"
                           "b = relu(a)");
  ck_assert_str_eq(g->name, "odd.layout.v2");
  SHAPE(g, "a.y", 2, 3);
  SHAPE(g, "b", 2, 3);
  ck_assert_int_eq(node(g, "b")->loc.line, 11);
  pcgc_graph_free(g);

  /* an empty model is an empty graph */
  g = parse_ok("");
  ck_assert_int_eq(g->n_nodes, 0);
  pcgc_graph_free(g);
  g = parse_ok("# nothing but a comment\n\n");
  ck_assert_int_eq(g->n_nodes, 0);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(read_file) {
  pcgc_error err = {0};
  size_t len = 1;
  ck_assert_ptr_null(pcgc_read_file(PCGC_SOURCE_DIR "/no/such/file.pcg", &len, &err));
  ck_assert_int_eq(err.status, PCGC_ERR_IO);
  ck_assert_int_eq(len, 0);
  ck_assert_ptr_nonnull(strstr(err.message, "cannot open"));
  ck_assert_ptr_null(pcgc_model_load(PCGC_SOURCE_DIR "/models", NULL, &err));
  ck_assert_int_eq(err.status, PCGC_ERR_IO);
  char *text = pcgc_read_file(PCGC_SOURCE_DIR "/models/mlp.pcg", &len, &err);
  ck_assert_ptr_nonnull(text);
  ck_assert_uint_gt(len, 0);
  ck_assert_uint_eq(strlen(text), len);
  free(text);
}
END_TEST

static Suite *model_suite(void) {
  Suite *s = suite_create("model");
  TCase *tc = tcase_create("model");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, bad_models);
  tcase_add_test(tc, shipped_models);
  tcase_add_test(tc, bert_large_parameters);
  tcase_add_test(tc, blocks_and_repeat);
  tcase_add_test(tc, set_overrides);
  tcase_add_test(tc, weight_creating_keys);
  tcase_add_test(tc, expressions);
  tcase_add_test(tc, error_messages);
  tcase_add_test(tc, errors_as_if_parsed_first);
  tcase_add_test(tc, limits);
  tcase_add_test(tc, lexical_forms);
  tcase_add_test(tc, read_file);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(model_suite)
