/*
 * test_text.c — the canonical text form and the DOT drawing (pcg/text.c,
 * pcg/dot.c).
 *
 * The oracle for the text form is the parser: writing a graph, parsing the
 * text and comparing gives the same hash and pcgc_graph_equal, and writing
 * the re-parsed graph gives byte-identical text. That is checked for every
 * shipped model and for hand-built graphs that reach what models do not:
 * multi-output split, variadic concat, every parallel operator, awkward
 * floats, negative axes and names that need sanitizing. DOT output is checked
 * for its shapes and labels, and by Graphviz itself when /usr/bin/dot exists.
 */
#define _POSIX_C_SOURCE 200809L

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pcg.h"

#include "../common/check_main.h"

#ifndef PCGC_SOURCE_DIR
#error "PCGC_SOURCE_DIR must be defined (the source tree, as a string literal)"
#endif

/* ---------------------------------------------------------------- helpers */

#define DIMS(...) (int64_t[]){__VA_ARGS__}, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define REFS(...) (int)(sizeof((pcgc_ref[]){__VA_ARGS__}) / sizeof(pcgc_ref)), (pcgc_ref[]){__VA_ARGS__}

static pcgc_ref R(int node) { return (pcgc_ref){node, 0}; }
static pcgc_ref RS(int node, int slot) { return (pcgc_ref){node, slot}; }

static int add_input(pcgc_graph *g, const char *name, pcgc_dtype dt, const int64_t *dims,
                     int rank)
{
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_INPUT);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "shape", rank, dims), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "dtype", dt), PCGC_OK);
  int id = pcgc_graph_add_node(g, PCGC_OP_INPUT, name, &a, 0, NULL);
  ck_assert_int_ge(id, 0);
  return id;
}

static int add_weight(pcgc_graph *g, const char *name, const int64_t *dims, int rank,
                      pcgc_init init, double scale)
{
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_WEIGHT);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "shape", rank, dims), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "init", init), PCGC_OK);
  if (init == PCGC_INIT_UNIFORM || init == PCGC_INIT_NORMAL) {
    ck_assert_int_eq(pcgc_attrs_set_float(&a, "scale", scale), PCGC_OK);
  }
  int id = pcgc_graph_add_node(g, PCGC_OP_WEIGHT, name, &a, 0, NULL);
  ck_assert_int_ge(id, 0);
  return id;
}

/* Adds op k with attributes `a` (defaults when NULL). */
static int add_op(pcgc_graph *g, pcgc_op_kind k, const char *name, const pcgc_attrs *a,
                  int n_in, const pcgc_ref *in)
{
  pcgc_attrs def;
  if (a == NULL) {
    pcgc_attrs_init(&def, k);
    a = &def;
  }
  int id = pcgc_graph_add_node(g, k, name, a, n_in, in);
  ck_assert_msg(id >= 0, "adding %s '%s' failed: %d", pcgc_op_name(k), name, id);
  return id;
}

/* Adds a parallel operator: dim < 0 for replicate/reduce (no dim). */
static int add_par(pcgc_graph *g, pcgc_op_kind k, const char *name, int in, int dim, int degree)
{
  pcgc_attrs a;
  pcgc_attrs_init(&a, k);
  if (dim >= 0) ck_assert_int_eq(pcgc_attrs_set_int(&a, "dim", dim), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "degree", degree), PCGC_OK);
  return add_op(g, k, name, &a, REFS(R(in)));
}

static void infer_ok(pcgc_graph *g)
{
  pcgc_error err = {0};
  pcgc_status st = pcgc_graph_infer(g, &err);
  if (st != PCGC_OK) pcgc_error_print(stderr, &err);
  ck_assert_msg(st == PCGC_OK, "inference failed: %s", err.message);
}

/* The canonical text of g, NUL-terminated (caller frees). */
static char *graph_text(const pcgc_graph *g, size_t *len)
{
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  ck_assert_ptr_nonnull(f);
  pcgc_error err = {0};
  pcgc_status st = pcgc_graph_write_text(f, g, &err);
  ck_assert_msg(st == PCGC_OK, "write_text failed: %s", err.message);
  ck_assert_int_eq(fclose(f), 0);
  if (len != NULL) *len = n;
  return buf;
}

static char *graph_dot(const pcgc_graph *g)
{
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  ck_assert_ptr_nonnull(f);
  pcgc_error err = {0};
  pcgc_status st = pcgc_graph_write_dot(f, g, &err);
  ck_assert_msg(st == PCGC_OK, "write_dot failed: %s", err.message);
  ck_assert_int_eq(fclose(f), 0);
  return buf;
}

/* Parses text written for g; aborts the test with the error and the text. */
static pcgc_graph *parse_text(const char *text, size_t len, const char *what)
{
  pcgc_error err = {0};
  pcgc_graph *back = pcgc_model_parse(text, len, what, NULL, &err);
  if (back == NULL) {
    pcgc_error_print(stderr, &err);
    fprintf(stderr, "--- canonical text of %s ---\n%s---\n", what, text);
  }
  ck_assert_msg(back != NULL, "%s: canonical text does not parse: %s", what, err.message);
  return back;
}

/* Writes g, parses the text back and checks: same hash, equal graphs, and
 * writing the re-parsed graph gives the same bytes. Returns the text and,
 * if `back_out` is given, the re-parsed graph (caller frees both). */
static char *round_trip(const pcgc_graph *g, const char *what, pcgc_graph **back_out)
{
  size_t len;
  char *text = graph_text(g, &len);
  pcgc_graph *back = parse_text(text, len, what);
  if (pcgc_graph_hash(g) != pcgc_graph_hash(back) || !pcgc_graph_equal(g, back)) {
    fprintf(stderr, "--- canonical text of %s ---\n%s---\n", what, text);
  }
  ck_assert_msg(pcgc_graph_hash(g) == pcgc_graph_hash(back), "%s: hash changed", what);
  ck_assert_msg(pcgc_graph_equal(g, back), "%s: re-parsed graph differs", what);
  char *again = graph_text(back, NULL);
  if (strcmp(text, again) != 0) {
    fprintf(stderr, "--- first ---\n%s--- second ---\n%s---\n", text, again);
  }
  ck_assert_msg(strcmp(text, again) == 0, "%s: canonical text is not idempotent", what);
  free(again);
  if (back_out != NULL) {
    *back_out = back;
  } else {
    pcgc_graph_free(back);
  }
  return text;
}

static bool same_double(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* ------------------------------------------------------------- test graphs */

/* Data movement, norms, convolutions, attention, awkward floats and negative
 * axes: every attribute type and most op families. */
static pcgc_graph *build_mixed(void)
{
  pcgc_graph *g = pcgc_graph_new();
  ck_assert_ptr_nonnull(g);
  pcgc_attrs a;

  int x = add_input(g, "x", PCGC_F32, DIMS(8, 12));
  int tgt = add_input(g, "target", PCGC_F32, DIMS(12, 1));

  /* split into three (default output names) and concat in another order */
  pcgc_attrs_init(&a, PCGC_OP_SPLIT);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "axis", -1), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "sizes", 3, (int64_t[]){2, 4, 6}), PCGC_OK);
  int s = add_op(g, PCGC_OP_SPLIT, "s", &a, REFS(R(x)));
  pcgc_attrs_init(&a, PCGC_OP_CONCAT);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "axis", -1), PCGC_OK);
  int c = add_op(g, PCGC_OP_CONCAT, "c", &a, REFS(RS(s, 2), RS(s, 0), RS(s, 1)));

  /* a two-way split with a named second output */
  pcgc_attrs_init(&a, PCGC_OP_SPLIT);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "axis", 0), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "sizes", 2, (int64_t[]){3, 5}), PCGC_OK);
  int top = add_op(g, PCGC_OP_SPLIT, "top", &a, REFS(R(c)));
  ck_assert_int_eq(pcgc_graph_set_output_name(g, top, 1, "bottom"), PCGC_OK);
  pcgc_attrs_init(&a, PCGC_OP_CONCAT);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "axis", 0), PCGC_OK);
  int c2 = add_op(g, PCGC_OP_CONCAT, "c2", &a, REFS(RS(top, 1), RS(top, 0)));

  pcgc_attrs_init(&a, PCGC_OP_SCALAR_MUL);
  ck_assert_int_eq(pcgc_attrs_set_float(&a, "scalar", 1.0 / 3.0), PCGC_OK);
  int m = add_op(g, PCGC_OP_SCALAR_MUL, "third", &a, REFS(R(c2)));
  pcgc_attrs_init(&a, PCGC_OP_DROPOUT);
  ck_assert_int_eq(pcgc_attrs_set_float(&a, "rate", 0.1), PCGC_OK);
  int d = add_op(g, PCGC_OP_DROPOUT, "drop", &a, REFS(R(m)));
  pcgc_attrs_init(&a, PCGC_OP_LAYERNORM);
  ck_assert_int_eq(pcgc_attrs_set_float(&a, "eps", 1e-05), PCGC_OK);
  int ln = add_op(g, PCGC_OP_LAYERNORM, "ln", &a, REFS(R(d)));
  pcgc_attrs_init(&a, PCGC_OP_SCALAR_ADD);
  ck_assert_int_eq(pcgc_attrs_set_float(&a, "scalar", -2.5e-7), PCGC_OK);
  int sa = add_op(g, PCGC_OP_SCALAR_ADD, "shift", &a, REFS(R(ln)));
  pcgc_attrs_init(&a, PCGC_OP_SCALAR_DIV);
  ck_assert_int_eq(pcgc_attrs_set_float(&a, "scalar", 1e20), PCGC_OK);
  int sd = add_op(g, PCGC_OP_SCALAR_DIV, "big", &a, REFS(R(sa)));
  pcgc_attrs_init(&a, PCGC_OP_SCALAR_SUB);
  ck_assert_int_eq(pcgc_attrs_set_float(&a, "scalar", 0.1 + 0.2), PCGC_OK);
  int ss = add_op(g, PCGC_OP_SCALAR_SUB, "sub", &a, REFS(R(sd)));
  pcgc_attrs_init(&a, PCGC_OP_SCALAR_ADD);
  ck_assert_int_eq(pcgc_attrs_set_float(&a, "scalar", 2.0), PCGC_OK);
  int two = add_op(g, PCGC_OP_SCALAR_ADD, "two", &a, REFS(R(ss)));
  pcgc_attrs_init(&a, PCGC_OP_SCALAR_MUL);
  ck_assert_int_eq(pcgc_attrs_set_float(&a, "scalar", -0.0), PCGC_OK);
  add_op(g, PCGC_OP_SCALAR_MUL, "negzero", &a, REFS(R(two)));
  pcgc_attrs_init(&a, PCGC_OP_SCALAR_MUL);
  ck_assert_int_eq(pcgc_attrs_set_float(&a, "scalar", 4.9406564584124654e-324), PCGC_OK);
  add_op(g, PCGC_OP_SCALAR_MUL, "tiny", &a, REFS(R(two)));
  pcgc_attrs_init(&a, PCGC_OP_SOFTMAX);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "axis", -1), PCGC_OK);
  int sm = add_op(g, PCGC_OP_SOFTMAX, "sm", &a, REFS(R(two)));
  pcgc_attrs_init(&a, PCGC_OP_TRANSPOSE);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "perm", 2, (int64_t[]){-1, 0}), PCGC_OK);
  int t = add_op(g, PCGC_OP_TRANSPOSE, "t", &a, REFS(R(sm)));
  pcgc_attrs_init(&a, PCGC_OP_REDUCE_SUM);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "dims", 1, (int64_t[]){-1}), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "keepdims", 1), PCGC_OK);
  int r = add_op(g, PCGC_OP_REDUCE_SUM, "r", &a, REFS(R(t)));
  pcgc_attrs_init(&a, PCGC_OP_MSE);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "reduction", PCGC_REDUCTION_SUM), PCGC_OK);
  add_op(g, PCGC_OP_MSE, "loss", &a, REFS(R(r), R(tgt)));

  /* linear with an explicit bias, every weight init */
  int w = add_weight(g, "lin.weight", DIMS(12, 6), PCGC_INIT_UNIFORM, 1.0 / sqrt(12.0));
  int b = add_weight(g, "lin.bias", DIMS(6), PCGC_INIT_ZEROS, 0);
  pcgc_attrs_init(&a, PCGC_OP_LINEAR);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "act", PCGC_ACT_GELU), PCGC_OK);
  add_op(g, PCGC_OP_LINEAR, "lin", &a, REFS(R(x), R(w), R(b)));

  /* conv2d + pool2d, batchnorm with and without weights */
  int img = add_input(g, "img", PCGC_F32, DIMS(2, 3, 4, 4));
  int cw = add_weight(g, "conv.weight", DIMS(5, 3, 3, 3), PCGC_INIT_NORMAL, 0.05);
  pcgc_attrs_init(&a, PCGC_OP_CONV2D);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "stride", 2, (int64_t[]){2, 1}), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "padding", 2, (int64_t[]){1, 1}), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "act", PCGC_ACT_RELU), PCGC_OK);
  int conv = add_op(g, PCGC_OP_CONV2D, "conv", &a, REFS(R(img), R(cw)));
  pcgc_attrs_init(&a, PCGC_OP_POOL2D);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "kind", PCGC_POOL_MAX), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "kernel", 2, (int64_t[]){2, 2}), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "stride", 2, (int64_t[]){2, 2}), PCGC_OK);
  add_op(g, PCGC_OP_POOL2D, "pool", &a, REFS(R(conv)));
  int bs = add_weight(g, "bn.scale", DIMS(3), PCGC_INIT_ONES, 0);
  int bb = add_weight(g, "bn.bias", DIMS(3), PCGC_INIT_ZEROS, 0);
  pcgc_attrs_init(&a, PCGC_OP_BATCHNORM);
  ck_assert_int_eq(pcgc_attrs_set_float(&a, "eps", 1e-3), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_float(&a, "momentum", 0.01), PCGC_OK);
  add_op(g, PCGC_OP_BATCHNORM, "bn", &a, REFS(R(img), R(bs), R(bb)));
  add_op(g, PCGC_OP_BATCHNORM, "bn_plain", NULL, REFS(R(img)));

  /* embedding with a bag, attention with every weight */
  int idx = add_input(g, "idx", PCGC_I32, DIMS(8, 5));
  int table = add_weight(g, "emb.weight", DIMS(100, 16), PCGC_INIT_NORMAL, 1.0);
  pcgc_attrs_init(&a, PCGC_OP_EMBEDDING);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "bag", PCGC_BAG_MEAN), PCGC_OK);
  add_op(g, PCGC_OP_EMBEDDING, "emb", &a, REFS(R(idx), R(table)));
  int q = add_input(g, "q", PCGC_F32, DIMS(2, 4, 16));
  int wq = add_weight(g, "att.wq", DIMS(16, 16), PCGC_INIT_UNIFORM, sqrt(6.0 / 32.0));
  int wk = add_weight(g, "att.wk", DIMS(16, 16), PCGC_INIT_UNIFORM, sqrt(6.0 / 32.0));
  int wv = add_weight(g, "att.wv", DIMS(16, 16), PCGC_INIT_UNIFORM, sqrt(6.0 / 32.0));
  int wo = add_weight(g, "att.wo", DIMS(16, 16), PCGC_INIT_UNIFORM, sqrt(6.0 / 32.0));
  pcgc_attrs_init(&a, PCGC_OP_ATTENTION);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "heads", 4), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "causal", 1), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_float(&a, "dropout", 0.1), PCGC_OK);
  add_op(g, PCGC_OP_ATTENTION, "att", &a, REFS(R(q), R(q), R(q), R(wq), R(wk), R(wv), R(wo)));

  infer_ok(g);
  return g;
}

/* A two-layer MLP with every parallel operator: data-parallel first layer
 * (partition the batch, replicate the weight), a combine, a reduction-dim
 * partition of the second layer (partial sums) and its reduce, and a
 * pipelined activation. */
static pcgc_graph *build_parallel(void)
{
  pcgc_graph *g = pcgc_graph_new();
  ck_assert_ptr_nonnull(g);
  pcgc_attrs a;

  int x = add_input(g, "x", PCGC_F32, DIMS(64, 784));
  int labels = add_input(g, "labels", PCGC_I32, DIMS(64));
  int w1 = add_weight(g, "w1", DIMS(784, 256), PCGC_INIT_UNIFORM, 1.0 / 28.0);
  int xp = add_par(g, PCGC_OP_PARTITION, "xp", x, 0, 4);
  int w1r = add_par(g, PCGC_OP_REPLICATE, "w1r", w1, -1, 4);
  pcgc_attrs_init(&a, PCGC_OP_LINEAR);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "act", PCGC_ACT_RELU), PCGC_OK);
  int h = add_op(g, PCGC_OP_LINEAR, "h", &a, REFS(R(xp), R(w1r)));
  int hc = add_par(g, PCGC_OP_COMBINE, "hc", h, 0, 4);

  int w2 = add_weight(g, "w2", DIMS(256, 10), PCGC_INIT_NORMAL, 0.02);
  int hk = add_par(g, PCGC_OP_PARTITION, "hk", hc, 1, 2);
  int w2p = add_par(g, PCGC_OP_PARTITION, "w2p", w2, 0, 2);
  int y = add_op(g, PCGC_OP_MATMUL, "y", NULL, REFS(R(hk), R(w2p)));
  int yr = add_par(g, PCGC_OP_REDUCE, "yr", y, -1, 2);

  int yp = add_par(g, PCGC_OP_PIPELINE, "yp", yr, 0, 4);
  int ya = add_op(g, PCGC_OP_RELU, "ya", NULL, REFS(R(yp)));
  int yu = add_par(g, PCGC_OP_UNPIPELINE, "yu", ya, 0, 4);
  add_op(g, PCGC_OP_SOFTMAX_CROSS_ENTROPY, "loss", NULL, REFS(R(yu), R(labels)));

  infer_ok(g);
  return g;
}

/* ------------------------------------------------------------------ tests */

static int compare_strings(const void *a, const void *b)
{
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

START_TEST(test_models_round_trip)
{
  const char *dir_path = PCGC_SOURCE_DIR "/models";
  DIR *dir = opendir(dir_path);
  ck_assert_msg(dir != NULL, "cannot open %s", dir_path);
  char *names[256];
  int n = 0;
  struct dirent *de;
  while ((de = readdir(dir)) != NULL && n < 256) {
    size_t len = strlen(de->d_name);
    if (len > 4 && strcmp(de->d_name + len - 4, ".pcg") == 0) {
      names[n] = malloc(len + 1);
      ck_assert_ptr_nonnull(names[n]);
      memcpy(names[n], de->d_name, len + 1);
      n++;
    }
  }
  closedir(dir);
  qsort(names, (size_t)n, sizeof names[0], compare_strings);
  ck_assert_msg(n >= 4, "expected at least 4 models in %s, found %d", dir_path, n);

  for (int i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir_path, names[i]);
    pcgc_error err = {0};
    pcgc_graph *g = pcgc_model_load(path, NULL, &err);
    if (g == NULL) pcgc_error_print(stderr, &err);
    ck_assert_msg(g != NULL, "%s does not load: %s", path, err.message);
    char *text = round_trip(g, names[i], NULL);
    /* the canonical form declares every weight explicitly */
    ck_assert_ptr_nonnull(strstr(text, "# pcgc canonical form; parse with pcgc\n"));
    int n_weights = 0;
    for (int v = 0; v < g->n_nodes; v++) n_weights += g->nodes[v].kind == PCGC_OP_WEIGHT;
    int n_decls = 0;
    for (const char *p = text; (p = strstr(p, "\nweight ")) != NULL; p++) n_decls++;
    ck_assert_int_eq(n_decls, n_weights);
    free(text);
    pcgc_graph_free(g);
    free(names[i]);
  }
}
END_TEST

START_TEST(test_golden_text)
{
  pcgc_graph *g = pcgc_graph_new();
  ck_assert_ptr_nonnull(g);
  g->name = malloc(5);
  ck_assert_ptr_nonnull(g->name);
  memcpy(g->name, "tiny", 5);
  int x = add_input(g, "x", PCGC_F32, DIMS(2, 3));
  int w = add_weight(g, "w", DIMS(3, 4), PCGC_INIT_UNIFORM, 0.5);
  int b = add_weight(g, "b", DIMS(4), PCGC_INIT_ZEROS, 0);
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_LINEAR);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "act", PCGC_ACT_RELU), PCGC_OK);
  int y = add_op(g, PCGC_OP_LINEAR, "y", &a, REFS(R(x), R(w), R(b)));
  int lab = add_input(g, "lab", PCGC_I32, DIMS(2));
  add_op(g, PCGC_OP_SOFTMAX_CROSS_ENTROPY, "loss", NULL, REFS(R(y), R(lab)));
  infer_ok(g);

  char *text = round_trip(g, "tiny", NULL);
  ck_assert_str_eq(text, "# pcgc canonical form; parse with pcgc\n"
                         "model tiny\n"
                         "\n"
                         "input x: f32[2, 3]\n"
                         "input lab: i32[2]\n"
                         "\n"
                         "weight w: f32[3, 4] = uniform(0.5)\n"
                         "weight b: f32[4] = zeros\n"
                         "y = linear(x, w, b, act=relu)\n"
                         "loss = softmax_cross_entropy(y, lab, reduction=mean)\n");
  free(text);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_mixed_round_trip)
{
  pcgc_graph *g = build_mixed();
  pcgc_graph *back = NULL;
  char *text = round_trip(g, "mixed", &back);

  /* multi-output names, variadic concat in slot order, negative axes */
  ck_assert_ptr_nonnull(strstr(text, "\ns, s.1, s.2 = split(x, axis=-1, sizes=[2, 4, 6])\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nc = concat(s.2, s, s.1, axis=-1)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\ntop, bottom = split(c, axis=0, sizes=[3, 5])\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nc2 = concat(bottom, top, axis=0)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nt = transpose(sm, perm=[-1, 0])\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nr = reduce_sum(t, dims=[-1], keepdims=true)\n"));
  /* floats: shortest exact spelling, always a float literal */
  ck_assert_ptr_nonnull(strstr(text, "\nthird = scalar_mul(c2, scalar=0.3333333333333333)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\ndrop = dropout(third, rate=0.1)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nln = layernorm(drop, axes=1, eps=1e-05, affine=false)\n"));
  ck_assert_ptr_nonnull(strstr(text, "scalar=-2.5e-07)"));
  ck_assert_ptr_nonnull(strstr(text, "scalar=1e20)"));
  ck_assert_ptr_nonnull(strstr(text, "scalar=0.30000000000000004)"));
  ck_assert_ptr_nonnull(strstr(text, "\ntwo = scalar_add(sub, scalar=2.0)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nnegzero = scalar_mul(two, scalar=-0.0)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\ntiny = scalar_mul(two, scalar=5e-324)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nloss = mse(r, target, reduction=sum)\n"));
  /* weights and every attribute in schema order */
  ck_assert_ptr_nonnull(strstr(text, "\nweight lin.weight: f32[12, 6] = uniform(0.2886751345948129)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nweight lin.bias: f32[6] = zeros\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nweight bn.scale: f32[3] = ones\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nweight emb.weight: f32[100, 16] = normal(1.0)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nlin = linear(x, lin.weight, lin.bias, act=gelu)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nconv = conv2d(img, conv.weight, stride=[2, 1], padding=[1, 1], "
                                     "dilation=[1, 1], groups=1, act=relu)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\npool = pool2d(conv, kind=max, kernel=[2, 2], stride=[2, 2], "
                                     "padding=[0, 0], global=false)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nbn = batchnorm(img, bn.scale, bn.bias, eps=0.001, momentum=0.01, act=none)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nbn_plain = batchnorm(img, eps=1e-05, momentum=0.1, act=none, affine=false)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nemb = embedding(idx, emb.weight, bag=mean)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\natt = attention(q, q, q, att.wq, att.wk, att.wv, att.wo, "
                                     "heads=4, causal=true, dropout=0.1, rope=false, rope_theta=1e04)\n"));

  /* the values themselves come back bit for bit */
  static const struct {
    const char *node, *attr;
    double value;
  } floats[] = {
      {"third", "scalar", 1.0 / 3.0}, {"drop", "rate", 0.1},     {"ln", "eps", 1e-05},
      {"shift", "scalar", -2.5e-7},   {"big", "scalar", 1e20},   {"sub", "scalar", 0.1 + 0.2},
      {"bn", "momentum", 0.01},       {"att", "dropout", 0.1},     {"negzero", "scalar", -0.0},
      {"tiny", "scalar", 4.9406564584124654e-324},
  };
  for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
    int v = pcgc_graph_find(back, floats[i].node);
    ck_assert_msg(v >= 0, "node %s missing after the round trip", floats[i].node);
    double got = pcgc_attrs_float(back->nodes[v].attrs, floats[i].attr);
    ck_assert_msg(same_double(got, floats[i].value), "%s.%s: %.17g != %.17g", floats[i].node,
                  floats[i].attr, got, floats[i].value);
  }
  int w = pcgc_graph_find(back, "lin.weight");
  ck_assert_int_ge(w, 0);
  ck_assert(same_double(pcgc_attrs_float(back->nodes[w].attrs, "scale"), 1.0 / sqrt(12.0)));
  ck_assert_int_eq(pcgc_attrs_int(back->nodes[w].attrs, "init"), PCGC_INIT_UNIFORM);

  free(text);
  pcgc_graph_free(back);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_parallel_round_trip)
{
  pcgc_graph *g = build_parallel();
  pcgc_graph *back = NULL;
  char *text = round_trip(g, "parallel", &back);
  ck_assert_ptr_nonnull(strstr(text, "\nxp = partition(x, dim=0, degree=4)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nw1r = replicate(w1, degree=4)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nh = linear(xp, w1r, act=relu)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nhc = combine(h, dim=0, degree=4)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\ny = matmul(hk, w2p)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nyr = reduce(y, degree=2)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nyp = pipeline(yr, dim=0, degree=4)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nyu = unpipeline(ya, dim=0, degree=4)\n"));

  /* the parallel types come back through inference */
  int y = pcgc_graph_find(back, "y");
  ck_assert_int_ge(y, 0);
  ck_assert_int_eq(back->nodes[y].out[0].sum, 2);
  int h = pcgc_graph_find(back, "h");
  ck_assert_int_ge(h, 0);
  ck_assert_int_eq(back->nodes[h].out[0].degree[0], 4);
  int yp = pcgc_graph_find(back, "yp");
  ck_assert_int_ge(yp, 0);
  ck_assert_int_eq(back->nodes[yp].out[0].micro, 4);
  free(text);
  pcgc_graph_free(back);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_names_sanitized)
{
  pcgc_graph *g = pcgc_graph_new();
  ck_assert_ptr_nonnull(g);
  g->name = malloc(16);
  ck_assert_ptr_nonnull(g->name);
  memcpy(g->name, "my model-v2", 12);

  int x = add_input(g, "my input", PCGC_F32, DIMS(4, 8));
  int w = add_weight(g, "model", DIMS(8, 8), PCGC_INIT_NORMAL, 0.02);
  int w2 = add_weight(g, "2x", DIMS(8, 8), PCGC_INIT_NORMAL, 0.02);
  int l1 = add_op(g, PCGC_OP_MATMUL, "a-b", NULL, REFS(R(x), R(w)));
  int l2 = add_op(g, PCGC_OP_MATMUL, "a_b", NULL, REFS(R(l1), R(w2)));
  int l3 = add_op(g, PCGC_OP_TANH, "x..y", NULL, REFS(R(l2)));
  int l4 = add_op(g, PCGC_OP_RELU, "\xc3\xbcn\xc3\xaf", NULL, REFS(R(l3)));
  int l5 = add_op(g, PCGC_OP_SIGMOID, "input_", NULL, REFS(R(l4)));
  int l6 = add_op(g, PCGC_OP_EXP, "input", NULL, REFS(R(l5)));
  int l7 = add_op(g, PCGC_OP_RELU, "relu", NULL, REFS(R(l6)));
  int l8 = add_op(g, PCGC_OP_IDENTITY, "trailing.", NULL, REFS(R(l7)));
  int l9 = add_op(g, PCGC_OP_IDENTITY, "0.5", NULL, REFS(R(l8)));
  int l10 = add_op(g, PCGC_OP_GELU, "f32", NULL, REFS(R(l9)));
  int l11 = add_op(g, PCGC_OP_IDENTITY, "enc.3.attn", NULL, REFS(R(l10)));
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_SPLIT);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "axis", 1), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "sizes", 2, (int64_t[]){4, 4}), PCGC_OK);
  int sp = add_op(g, PCGC_OP_SPLIT, "parts", &a, REFS(R(l11)));
  ck_assert_int_eq(pcgc_graph_set_output_name(g, sp, 1, "second half"), PCGC_OK);
  add_op(g, PCGC_OP_ADD, "sum", NULL, REFS(RS(sp, 0), RS(sp, 1)));
  infer_ok(g);

  pcgc_graph *back = NULL;
  char *text = round_trip(g, "names", &back);
  ck_assert_ptr_nonnull(strstr(text, "\nmodel my_model_v2\n"));
  ck_assert_ptr_nonnull(strstr(text, "\ninput my_input: f32[4, 8]\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nweight model_: f32[8, 8] = normal(0.02)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nweight _2x: f32[8, 8] = normal(0.02)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\na_b_2 = matmul(my_input, model_)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\na_b = matmul(a_b_2, _2x)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nx._.y = tanh(a_b)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\n__n__ = relu(x._.y)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\ninput_ = sigmoid(__n__)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\ninput__2 = exp(input_)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nrelu = relu(input__2)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\ntrailing._ = identity(relu)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\n_0.5 = identity(trailing._)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nf32 = gelu(_0.5, approximate=false)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nenc.3.attn = identity(f32)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nparts, second_half = split(enc.3.attn, axis=1, sizes=[4, 4])\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nsum = add(parts, second_half)\n"));
  ck_assert_int_ge(pcgc_graph_find(back, "a_b_2"), 0);
  ck_assert_int_ge(pcgc_graph_find(back, "input__2"), 0);
  free(text);
  pcgc_graph_free(back);
  pcgc_graph_free(g);
}
END_TEST

/* Valid names are kept even when a sanitized name would want them; two
 * outputs that share a name are told apart. */
START_TEST(test_names_collide)
{
  pcgc_graph *g = pcgc_graph_new();
  ck_assert_ptr_nonnull(g);
  int x = add_input(g, "x", PCGC_F32, DIMS(4, 6));
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_SPLIT);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "axis", 1), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "sizes", 2, (int64_t[]){3, 3}), PCGC_OK);
  int s = add_op(g, PCGC_OP_SPLIT, "s", &a, REFS(R(x)));
  /* a node named like the split's second output */
  int t = add_op(g, PCGC_OP_RELU, "s.1", NULL, REFS(RS(s, 1)));
  int z = add_op(g, PCGC_OP_ADD, "z", NULL, REFS(RS(s, 0), R(t)));
  /* names longer than the parser reads (256) are cut to 240 bytes */
  char long1[301], long2[302], want[1024];
  memset(long1, 'a', 300);
  long1[300] = '\0';
  memset(long2, 'a', 301);
  long2[301] = '\0';
  int l1 = add_op(g, PCGC_OP_RELU, long1, NULL, REFS(R(z)));
  add_op(g, PCGC_OP_TANH, long2, NULL, REFS(R(l1)));
  infer_ok(g);

  char *text = round_trip(g, "collide", NULL);
  ck_assert_ptr_nonnull(strstr(text, "\ns, s.1 = split(x, axis=1, sizes=[3, 3])\n"));
  ck_assert_ptr_nonnull(strstr(text, "\ns.1_2 = relu(s.1)\n"));
  ck_assert_ptr_nonnull(strstr(text, "\nz = add(s, s.1_2)\n"));
  snprintf(want, sizeof want, "\n%.240s = relu(z)\n%.240s_2 = tanh(%.240s)\n", long1, long1, long1);
  ck_assert_ptr_nonnull(strstr(text, want));
  free(text);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(test_text_errors)
{
  pcgc_graph *g = pcgc_graph_new();
  ck_assert_ptr_nonnull(g);
  int x = add_input(g, "x", PCGC_F32, DIMS(2));
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_SCALAR_MUL);
  ck_assert_int_eq(pcgc_attrs_set_float(&a, "scalar", NAN), PCGC_OK);
  add_op(g, PCGC_OP_SCALAR_MUL, "nan", &a, REFS(R(x)));

  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  ck_assert_ptr_nonnull(f);
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_graph_write_text(f, g, &err), PCGC_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "nan"));
  ck_assert_ptr_nonnull(strstr(err.message, "cannot express"));
  fclose(f);
  free(buf);
  pcgc_graph_free(g);

  /* a cycle cannot be written as text, but can be drawn */
  g = pcgc_graph_new();
  ck_assert_ptr_nonnull(g);
  add_op(g, PCGC_OP_ADD, "loop", NULL, REFS(R(0), R(1)));
  add_op(g, PCGC_OP_RELU, "back", NULL, REFS(R(0)));
  buf = NULL;
  f = open_memstream(&buf, &n);
  ck_assert_ptr_nonnull(f);
  pcgc_error_clear(&err);
  ck_assert_int_eq(pcgc_graph_write_text(f, g, &err), PCGC_ERR_GRAPH);
  pcgc_error_clear(&err);
  ck_assert_int_eq(pcgc_graph_write_dot(f, g, &err), PCGC_OK);
  ck_assert_int_eq(fclose(f), 0);
  ck_assert_ptr_nonnull(strstr(buf, "  n1 -> n0 [label=\"1\"];\n  n0 -> n1;\n"));
  free(buf);
  pcgc_graph_free(g);

  /* a full disk is an I/O error, for both writers */
  f = fopen("/dev/full", "w");
  if (f != NULL) {
    g = build_parallel();
    pcgc_error_clear(&err);
    ck_assert_int_eq(pcgc_graph_write_text(f, g, &err), PCGC_ERR_IO);
    ck_assert_int_eq(err.status, PCGC_ERR_IO);
    clearerr(f);
    pcgc_error_clear(&err);
    ck_assert_int_eq(pcgc_graph_write_dot(f, g, &err), PCGC_ERR_IO);
    fclose(f);
    pcgc_graph_free(g);
  }
}
END_TEST

/* Runs `dot -Tsvg` on the text; true when Graphviz accepts it. */
static bool dot_accepts(const char *dot_text)
{
  char path[] = "/tmp/pcgc_test_dot_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  FILE *f = fdopen(fd, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_ge(fputs(dot_text, f), 0);
  ck_assert_int_eq(fclose(f), 0);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "/usr/bin/dot -Tsvg %s -o /dev/null 2>&1", path);
  int rc = system(cmd);
  unlink(path);
  return rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

START_TEST(test_dot_parallel)
{
  pcgc_graph *g = build_parallel();
  /* a name that needs escaping, and a multi-output node */
  int yu = pcgc_graph_find(g, "yu");
  ck_assert_int_ge(yu, 0);
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_SPLIT);
  ck_assert_int_eq(pcgc_attrs_set_int(&a, "axis", 1), PCGC_OK);
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "sizes", 2, (int64_t[]){4, 6}), PCGC_OK);
  int sp = add_op(g, PCGC_OP_SPLIT, "halves", &a, REFS(R(yu)));
  add_op(g, PCGC_OP_IDENTITY, "q\"uote\\back", NULL, REFS(RS(sp, 1)));
  infer_ok(g);

  char *dot = graph_dot(g);
  ck_assert_ptr_nonnull(strstr(dot, "digraph pcg {\n"));
  /* sources, compute, loss and every parallel kind look different */
  ck_assert_ptr_nonnull(strstr(dot, "shape=invhouse, style=\"filled\", fillcolor=\"#cfe2f3\", label=\"x\\ninput\\nf32[64, 784]\""));
  ck_assert_ptr_nonnull(strstr(dot, "shape=cylinder, style=\"filled\", fillcolor=\"#fff2cc\", label=\"w1\\nweight\\nf32[784, 256]\""));
  ck_assert_ptr_nonnull(strstr(dot, "shape=box, style=\"rounded,filled\", fillcolor=\"#ffffff\", label=\"h\\nlinear\\n"));
  ck_assert_ptr_nonnull(strstr(dot, "shape=octagon, style=\"filled\", fillcolor=\"#f4cccc\", label=\"loss\\nsoftmax_cross_entropy\\n"));
  ck_assert_ptr_nonnull(strstr(dot, "shape=hexagon, style=\"filled,bold\", fillcolor=\"#9fc5e8\", label=\"xp\\npartition(dim=0, degree=4)\\n"));
  ck_assert_ptr_nonnull(strstr(dot, "fillcolor=\"#b6d7a8\", label=\"hc\\ncombine(dim=0, degree=4)\\n"));
  ck_assert_ptr_nonnull(strstr(dot, "fillcolor=\"#ffd966\", label=\"w1r\\nreplicate(degree=4)\\n"));
  ck_assert_ptr_nonnull(strstr(dot, "fillcolor=\"#f6b26b\", label=\"yr\\nreduce(degree=2)\\n"));
  ck_assert_ptr_nonnull(strstr(dot, "fillcolor=\"#b4a7d6\", label=\"yp\\npipeline(dim=0, degree=4)\\n"));
  ck_assert_ptr_nonnull(strstr(dot, "fillcolor=\"#d5a6bd\", label=\"yu\\nunpipeline(dim=0, degree=4)\\n"));

  /* parallel types in the labels: the partitioned batch, the partial sums */
  char want[512], type[256];
  int xp = pcgc_graph_find(g, "xp");
  pcgc_ptensor_format(type, sizeof type, &g->nodes[xp].out[0]);
  ck_assert_ptr_nonnull(strstr(type, "64/4"));
  snprintf(want, sizeof want, "label=\"xp\\npartition(dim=0, degree=4)\\n%s\"", type);
  ck_assert_ptr_nonnull(strstr(dot, want));
  int y = pcgc_graph_find(g, "y");
  pcgc_ptensor_format(type, sizeof type, &g->nodes[y].out[0]);
  ck_assert_ptr_nonnull(strstr(type, "sum=2"));
  snprintf(want, sizeof want, "label=\"y\\nmatmul\\n%s\"", type);
  ck_assert_ptr_nonnull(strstr(dot, want));

  /* edges: slot labels on multi-input ops only, output names on multi-output */
  int h = pcgc_graph_find(g, "h"), w1r = pcgc_graph_find(g, "w1r");
  snprintf(want, sizeof want, "  n%d -> n%d [label=\"0\"];\n  n%d -> n%d [label=\"1\"];\n", xp, h,
           w1r, h);
  ck_assert_ptr_nonnull(strstr(dot, want));
  int hc = pcgc_graph_find(g, "hc");
  snprintf(want, sizeof want, "  n%d -> n%d;\n", h, hc);
  ck_assert_ptr_nonnull(strstr(dot, want));
  ck_assert_ptr_nonnull(strstr(dot, "[taillabel=\"halves.1\"];\n"));
  ck_assert_ptr_nonnull(strstr(dot, "halves.1: f32[64, 6]"));

  /* quotes and backslashes escaped */
  ck_assert_ptr_nonnull(strstr(dot, "label=\"q\\\"uote\\\\back\\nidentity\\n"));

  if (access("/usr/bin/dot", X_OK) == 0) {
    ck_assert_msg(dot_accepts(dot), "dot -Tsvg rejects:\n%s", dot);
  }
  free(dot);
  pcgc_graph_free(g);
}
END_TEST

/* Every shipped model draws, and Graphviz accepts it. */
START_TEST(test_dot_models)
{
  const char *dir_path = PCGC_SOURCE_DIR "/models";
  DIR *dir = opendir(dir_path);
  ck_assert_msg(dir != NULL, "cannot open %s", dir_path);
  struct dirent *de;
  bool have_dot = access("/usr/bin/dot", X_OK) == 0;
  int n = 0;
  while ((de = readdir(dir)) != NULL) {
    size_t len = strlen(de->d_name);
    if (len <= 4 || strcmp(de->d_name + len - 4, ".pcg") != 0) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir_path, de->d_name);
    pcgc_error err = {0};
    pcgc_graph *g = pcgc_model_load(path, NULL, &err);
    ck_assert_msg(g != NULL, "%s does not load: %s", path, err.message);
    char *dot = graph_dot(g);
    if (have_dot && n < 2) ck_assert_msg(dot_accepts(dot), "dot -Tsvg rejects %s", path);
    free(dot);
    pcgc_graph_free(g);
    n++;
  }
  closedir(dir);
  ck_assert_int_ge(n, 4);
}
END_TEST

static Suite *text_suite(void)
{
  Suite *s = suite_create("text");
  TCase *tc = tcase_create("text");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_golden_text);
  tcase_add_test(tc, test_mixed_round_trip);
  tcase_add_test(tc, test_parallel_round_trip);
  tcase_add_test(tc, test_names_sanitized);
  tcase_add_test(tc, test_names_collide);
  tcase_add_test(tc, test_text_errors);
  tcase_add_test(tc, test_models_round_trip);
  tcase_add_test(tc, test_dot_parallel);
  tcase_add_test(tc, test_dot_models);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(text_suite)
