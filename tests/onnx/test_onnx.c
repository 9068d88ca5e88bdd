/*
 * test_onnx.c — the ONNX importer (onnx/) on committed files; needs no torch.
 *
 *   - tests/onnx/models/{mlp,cnn,transformer,ops}.onnx, exported from PyTorch
 *     by export_models.py: the parameter count equals PyTorch's exactly,
 *     the operator counts match the ONNX node counts (onnx_test.h), and
 *     the reference interpreter's f64 forward pass from the imported
 *     weights reproduces PyTorch's output to 1e-4;
 *   - the symbolic batch takes opts->batch (default 1) in inputs, outputs
 *     and the shape arithmetic of the transformer;
 *   - every weight carries its initializer's values (transposed where the
 *     pcgc layout is the transpose of ONNX's: Gemm transB=1);
 *   - external data beside the model reads the same values; without a
 *     folder it is an error;
 *   - every file of tests/data/bad-onnx fails with the status, message
 *     and hint substrings of its .expect file (make_bad_onnx.py documents
 *     the format) and names the file; an unsupported operator's
 *     error names the node, the op type and the opset, and its hint lists
 *     the supported operators;
 *   - every truncation and every single-byte change of mlp.onnx and
 *     cnn.onnx either imports to a valid graph or fails with a message (no
 *     crash; CI runs this under ASan).
 */
#include "onnx_test.h"

#include <dirent.h>

#include "../common/check_main.h"

#define MODELS_DIR PCGC_SOURCE_DIR "/tests/onnx/models"
#define BAD_DIR PCGC_SOURCE_DIR "/tests/data/bad-onnx"

static const char *const MODELS[] = {"mlp", "cnn", "transformer", "ops", "ops17", "decoder"};
#define N_MODELS ((int)(sizeof MODELS / sizeof MODELS[0]))

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static char *read_all(const char *path, size_t *len) {
  pcgc_error err = {0};
  char *data = pcgc_read_file(path, len, &err);
  ck_assert_msg(data != NULL, "%s: %s", path, err.message);
  return data;
}

/* ------------------------------------------------------- committed models */

START_TEST(test_model_counts) {
  model_side s;
  side_load(MODELS_DIR, MODELS[_i], &s);
  pcgc_graph *g = load_model(&s, 2);
  check_params(g, &s);
  check_ops(g, &s);
  ck_assert_int_gt(check_value_sums(&s, g), 0);
  pcgc_error err = {0};
  ck_assert_msg(pcgc_graph_validate(g, &err) == PCGC_OK, "%s: %s", s.model, err.message);
  pcgc_graph_free(g);
  side_free(&s);
}
END_TEST

START_TEST(test_model_forward) {
  model_side s;
  side_load(MODELS_DIR, MODELS[_i], &s);
  check_forward(&s);
  side_free(&s);
}
END_TEST

/* A few exact facts about the small models, beyond the counts. */
START_TEST(test_mlp_structure) {
  model_side s;
  side_load(MODELS_DIR, "mlp", &s);
  pcgc_graph *g = load_model(&s, 4);
  /* Gemm, Gemm, Gemm: three linears with bias; Relu and Tanh */
  ck_assert_int_eq(kind_count(g, PCGC_OP_LINEAR), 3);
  ck_assert_int_eq(kind_count(g, PCGC_OP_WEIGHT), 6);
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].kind == PCGC_OP_LINEAR) ck_assert_int_eq(g->nodes[i].n_in, 3);
  int w = pcgc_graph_find(g, "fc1.weight");
  ck_assert_msg(w >= 0, "no weight 'fc1.weight'");
  /* pcgc's linear takes w [K, N]: nn.Linear(16, 32)'s weight, transposed */
  assert_dims(&g->nodes[w].out[0], 2, (int64_t[]){16, 32}, "fc1.weight");
  assert_dims(&g->nodes[sink_node(g)].out[0], 2, (int64_t[]){4, 10}, "output");
  pcgc_graph_free(g);
  side_free(&s);
}
END_TEST

/* ------------------------------------------------------------------ batch */

static int64_t input_batch(const pcgc_graph *g, const char *name) {
  int id = pcgc_graph_find(g, name);
  ck_assert_msg(id >= 0, "no input '%s'", name);
  return g->nodes[id].out[0].dims[0];
}

START_TEST(test_batch) {
  model_side s;
  side_load(MODELS_DIR, MODELS[_i], &s);
  char path[1200];
  snprintf(path, sizeof path, "%s/%s.onnx", s.dir, s.model);
  pcgc_error err = {0};
  /* no options, and batch 0: the symbolic batch is 1 */
  pcgc_graph *g = pcgc_onnx_load(path, NULL, &err);
  ck_assert_msg(g != NULL, "%s", err.message);
  ck_assert_int_eq(input_batch(g, s.input_name), 1);
  ck_assert_int_eq(g->nodes[sink_node(g)].out[0].dims[0], 1);
  pcgc_graph_stats st1;
  ck_assert_int_eq(pcgc_graph_stats_compute(g, &st1, &err), PCGC_OK);
  pcgc_graph_free(g);
  g = pcgc_onnx_load(path, &(pcgc_onnx_options){.batch = 0}, &err);
  ck_assert_ptr_nonnull(g);
  ck_assert_int_eq(input_batch(g, s.input_name), 1);
  pcgc_graph_free(g);
  /* batch 3 and 64: the input, the output and every FLOP scale with it */
  int64_t batches[] = {3, 64};
  for (int k = 0; k < 2; k++) {
    g = load_model(&s, batches[k]);
    ck_assert_int_eq(input_batch(g, s.input_name), batches[k]);
    const pcgc_ptensor *out = &g->nodes[sink_node(g)].out[0];
    ck_assert_int_eq(out->dims[0], batches[k]);
    ck_assert_int_eq(out->rank, s.out_rank);
    for (int d = 1; d < out->rank; d++) ck_assert_int_eq(out->dims[d], s.out_dims[d]);
    pcgc_graph_stats st;
    ck_assert_int_eq(pcgc_graph_stats_compute(g, &st, &err), PCGC_OK);
    ck_assert_int_eq(st.params, st1.params);
    ck_assert_msg(fabs(st.fwd_flops - (double)batches[k] * st1.fwd_flops) <= 1e-9 * st.fwd_flops,
                  "%s: forward FLOPs at batch %lld are %g, %lld x batch 1's %g", s.model, (long long)batches[k],
                  st.fwd_flops, (long long)batches[k], st1.fwd_flops);
    ck_assert_msg(fabs(st.input_bytes - (double)batches[k] * st1.input_bytes) < 0.5, "input bytes");
    pcgc_graph_free(g);
  }
  side_free(&s);
}
END_TEST

/* ----------------------------------------------------------------- values */

START_TEST(test_values) {
  model_side s;
  side_load(MODELS_DIR, MODELS[_i], &s);
  pcgc_graph *g = load_model(&s, 2);
  check_values(&s, g);
  pcgc_graph_free(g);
  side_free(&s);
}
END_TEST

/* ---------------------------------------------------------- external data */

START_TEST(test_external_data) {
  pcgc_error err = {0};
  pcgc_onnx_options o = {.batch = 2};
  pcgc_graph *a = pcgc_onnx_load(MODELS_DIR "/mlp.onnx", &o, &err);
  ck_assert_ptr_nonnull(a);
  pcgc_graph *b = pcgc_onnx_load(MODELS_DIR "/mlp_external.onnx", &o, &err);
  ck_assert_msg(b != NULL, "%s", err.message);
  ck_assert(pcgc_graph_equal(a, b));
  ck_assert_uint_eq(pcgc_graph_hash(a), pcgc_graph_hash(b));
  int weights = 0;
  for (int i = 0; i < a->n_nodes; i++) {
    const pcgc_node *na = &a->nodes[i];
    if (na->kind != PCGC_OP_WEIGHT) continue;
    int j = pcgc_graph_find(b, na->name);
    ck_assert_msg(j >= 0, "external: no weight '%s'", na->name);
    const pcgc_node *nb = &b->nodes[j];
    ck_assert_ptr_nonnull(nb->value);
    int64_t n = pcgc_ptensor_numel(&na->out[0]);
    ck_assert_int_eq(pcgc_ptensor_numel(&nb->out[0]), n);
    ck_assert_msg(memcmp(na->value, nb->value, (size_t)n * sizeof(float)) == 0, "'%s' differs", na->name);
    weights++;
  }
  ck_assert_int_eq(weights, 6);
  pcgc_graph_free(b);

  /* in memory: with the folder it reads the data file; without, an error */
  size_t len;
  char *bytes = read_all(MODELS_DIR "/mlp_external.onnx", &len);
  b = pcgc_onnx_parse(bytes, len, "mlp_external.onnx", MODELS_DIR, &o, &err);
  ck_assert_msg(b != NULL, "%s", err.message);
  ck_assert(pcgc_graph_equal(a, b));
  pcgc_graph_free(b);
  pcgc_error_clear(&err);
  b = pcgc_onnx_parse(bytes, len, "mlp_external.onnx", NULL, &o, &err);
  ck_assert_ptr_null(b);
  ck_assert_int_ne(err.status, PCGC_OK);
  ck_assert_msg(strstr(err.message, "'fc1.weight'") != NULL, "message '%s' does not name the tensor", err.message);
  ck_assert_msg(strstr(err.message, "mlp_external.data") != NULL, "message '%s' does not name the file",
                err.message);
  ck_assert_str_eq(err.file, "mlp_external.onnx");
  free(bytes);
  pcgc_graph_free(a);
}
END_TEST

/* ------------------------------------------------------ parse == load */

START_TEST(test_parse_equals_load) {
  for (int m = 0; m < N_MODELS; m++) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.onnx", MODELS_DIR, MODELS[m]);
    size_t len;
    char *bytes = read_all(path, &len);
    pcgc_error err = {0};
    pcgc_onnx_options o = {.batch = 5};
    pcgc_graph *a = pcgc_onnx_load(path, &o, &err);
    pcgc_graph *b = pcgc_onnx_parse(bytes, len, "x.onnx", NULL, &o, &err);
    ck_assert_ptr_nonnull(a);
    ck_assert_msg(b != NULL, "%s: %s", MODELS[m], err.message);
    ck_assert_int_eq(a->n_nodes, b->n_nodes);
    ck_assert_uint_eq(pcgc_graph_hash(a), pcgc_graph_hash(b));
    /* the import is deterministic, names included */
    for (int i = 0; i < a->n_nodes; i++) ck_assert_str_eq(a->nodes[i].name, b->nodes[i].name);
    /* the canonical text reads back to the same graph */
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(pcgc_graph_write_text(f, a, &err), PCGC_OK);
    long n = ftell(f);
    rewind(f);
    char *text = malloc((size_t)n + 1);
    ck_assert_int_eq(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = '\0';
    fclose(f);
    pcgc_graph *c = pcgc_model_parse(text, (size_t)n, "show.pcg", NULL, &err);
    ck_assert_msg(c != NULL, "%s: the canonical text does not parse: %s", MODELS[m], err.message);
    ck_assert_uint_eq(pcgc_graph_hash(a), pcgc_graph_hash(c));
    free(text);
    pcgc_graph_free(c);
    pcgc_graph_free(b);
    pcgc_graph_free(a);
    free(bytes);
  }
}
END_TEST

START_TEST(test_is_onnx_path) {
  ck_assert(pcgc_onnx_is_onnx_path("model.onnx"));
  ck_assert(pcgc_onnx_is_onnx_path("/a/b.c/model.onnx"));
  ck_assert(pcgc_onnx_is_onnx_path("MODEL.ONNX"));
  ck_assert(!pcgc_onnx_is_onnx_path("model.pcg"));
  ck_assert(!pcgc_onnx_is_onnx_path("onnx"));
  ck_assert(!pcgc_onnx_is_onnx_path("model.onnx.pcg"));
  ck_assert(!pcgc_onnx_is_onnx_path(""));
  ck_assert(!pcgc_onnx_is_onnx_path(NULL));
}
END_TEST

/* -------------------------------------------------------- malformed files */

typedef struct expectation {
  char status[256];
  int n_msg, n_hint;
  char msg[8][256], hint[8][256];
} expectation;

static void read_expect(const char *path, expectation *x) {
  memset(x, 0, sizeof *x);
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  char line[256];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = '\0';
    if (!line[0] || line[0] == '#') continue;
    if (strncmp(line, "status: ", 8) == 0) {
      snprintf(x->status, sizeof x->status, "%s", line + 8);
    } else if (strncmp(line, "message: ", 9) == 0) {
      ck_assert_int_lt(x->n_msg, 8);
      snprintf(x->msg[x->n_msg++], sizeof x->msg[0], "%s", line + 9);
    } else if (strncmp(line, "hint: ", 6) == 0) {
      ck_assert_int_lt(x->n_hint, 8);
      snprintf(x->hint[x->n_hint++], sizeof x->hint[0], "%s", line + 6);
    } else {
      ck_abort_msg("%s: bad line '%s'", path, line);
    }
  }
  fclose(f);
  ck_assert_msg(x->status[0] && x->n_msg > 0, "%s: needs a status and a message line", path);
}

START_TEST(test_bad_files) {
  DIR *d = opendir(BAD_DIR);
  ck_assert_msg(d != NULL, "cannot open %s", BAD_DIR);
  int count = 0, failures = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!has_suffix(e->d_name, ".onnx")) continue;
    char path[1200], xpath[1200];
    snprintf(path, sizeof path, "%s/%s", BAD_DIR, e->d_name);
    snprintf(xpath, sizeof xpath, "%.*s.expect", (int)(strlen(path) - 5), path);
    expectation x;
    read_expect(xpath, &x);
    pcgc_error err = {0};
    pcgc_graph *g = pcgc_onnx_load(path, &(pcgc_onnx_options){.batch = 2}, &err);
    char why[1024] = "";
    if (g) {
      snprintf(why, sizeof why, "imported without error");
      pcgc_graph_free(g);
    } else if (strcmp(pcgc_status_str(err.status), x.status) != 0) {
      snprintf(why, sizeof why, "status '%s', expected '%s'", pcgc_status_str(err.status), x.status);
    } else if (strcmp(err.file, path) != 0) {
      snprintf(why, sizeof why, "the error names file '%s'", err.file);
    }
    for (int k = 0; !why[0] && k < x.n_msg; k++)
      if (!strstr(err.message, x.msg[k])) snprintf(why, sizeof why, "message lacks '%s'", x.msg[k]);
    for (int k = 0; !why[0] && k < x.n_hint; k++)
      if (!strstr(err.hint, x.hint[k])) snprintf(why, sizeof why, "hint lacks '%s'", x.hint[k]);
    if (why[0]) {
      fprintf(stderr, "%s: %s\n  got: %s: %s\n  hint: %s\n", e->d_name, why, pcgc_status_str(err.status),
              err.message, err.hint);
      failures++;
    }
    count++;
  }
  closedir(d);
  ck_assert_msg(count >= 10, "only %d malformed files in %s", count, BAD_DIR);
  ck_assert_msg(failures == 0, "%d of %d malformed files fail differently from their .expect", failures, count);
}
END_TEST

/* The unsupported-operator error, spelled out. */
START_TEST(test_unsupported_op_message) {
  pcgc_error err = {0};
  const char *path = BAD_DIR "/unsupported-op-einsum.onnx";
  ck_assert_ptr_null(pcgc_onnx_load(path, NULL, &err));
  ck_assert_int_eq(err.status, PCGC_ERR_UNSUPPORTED);
  ck_assert_str_eq(err.file, path);
  ck_assert_msg(strstr(err.message, "'mix'"), "no node name in '%s'", err.message);
  ck_assert_msg(strstr(err.message, "Einsum"), "no op type in '%s'", err.message);
  ck_assert_msg(strstr(err.message, "opset 14"), "no opset in '%s'", err.message);
  /* the hint lists what is supported, e.g. every op the models above use */
  static const char *const listed[] = {"Add", "AveragePool", "BatchNormalization", "Concat", "Conv", "Flatten",
                                       "Gemm", "GlobalAveragePool", "LayerNormalization", "MatMul", "MaxPool",
                                       "Relu", "Reshape", "Softmax", "Tanh", "Transpose"};
  for (size_t i = 0; i < sizeof listed / sizeof listed[0]; i++)
    ck_assert_msg(strstr(err.hint, listed[i]), "hint '%s' does not list %s", err.hint, listed[i]);
  ck_assert_msg(!strstr(err.hint, "Einsum"), "hint lists Einsum as supported");
  /* printing it names the file */
  char buf[4096] = "";
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  ck_assert_ptr_nonnull(f);
  pcgc_error_print(f, &err);
  fclose(f);
  ck_assert_msg(strstr(buf, "unsupported-op-einsum.onnx"), "printed: %s", buf);
}
END_TEST

/* ------------------------------------------------------------ robustness */

/* Imports `len` bytes; either a valid graph or an error with a message. */
static void import_any(const char *bytes, size_t len, const char *what, size_t at) {
  pcgc_error err = {0};
  pcgc_graph *g = pcgc_onnx_parse(bytes, len, "mut.onnx", NULL, &(pcgc_onnx_options){.batch = 2}, &err);
  if (g) {
    ck_assert_msg(pcgc_graph_validate(g, &err) == PCGC_OK, "%s at %zu: invalid graph: %s", what, at, err.message);
    pcgc_graph_free(g);
  } else {
    ck_assert_msg(err.status != PCGC_OK && err.message[0], "%s at %zu: NULL without an error", what, at);
  }
}

START_TEST(test_truncations_and_byte_flips) {
  for (int m = 0; m < 2; m++) { /* mlp, cnn */
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.onnx", MODELS_DIR, MODELS[m]);
    size_t len;
    char *bytes = read_all(path, &len);
    for (size_t n = 0; n < len; n++) import_any(bytes, n, "truncation", n);
    /* every byte set to 0 and 0xff and with its top and bottom bit flipped */
    for (size_t i = 0; i < len; i++) {
      unsigned char orig = (unsigned char)bytes[i];
      const unsigned char to[] = {0x00, 0xff, orig ^ 0x80, orig ^ 0x01};
      for (size_t k = 0; k < sizeof to; k++) {
        if (to[k] == orig) continue;
        bytes[i] = (char)to[k];
        import_any(bytes, len, "byte change", i);
      }
      bytes[i] = (char)orig;
    }
    free(bytes);
  }
}
END_TEST

static Suite *onnx_suite(void) {
  Suite *s = suite_create("onnx");
  TCase *tc = tcase_create("models");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_model_counts, 0, N_MODELS);
  tcase_add_loop_test(tc, test_model_forward, 0, N_MODELS);
  tcase_add_test(tc, test_mlp_structure);
  tcase_add_loop_test(tc, test_batch, 0, N_MODELS);
  tcase_add_loop_test(tc, test_values, 0, N_MODELS);
  tcase_add_test(tc, test_external_data);
  tcase_add_test(tc, test_parse_equals_load);
  tcase_add_test(tc, test_is_onnx_path);
  suite_add_tcase(s, tc);
  tc = tcase_create("errors");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_bad_files);
  tcase_add_test(tc, test_unsupported_op_message);
  tcase_add_test(tc, test_truncations_and_byte_flips);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(onnx_suite)
