/*
 * test_golden.c — agreement of the reference interpreter with PyTorch.
 *
 * For each model of tests/golden (mlp, cnn, transformer, embbag,
 * embbag_mean, decoder) and each dtype (f64, f32), the golden file MODEL.DTYPE.bin
 * (written by gen_golden.py from PyTorch 1.13) holds the initial weights,
 * the inputs and PyTorch's results. The test loads MODEL.pcg, runs the
 * interpreter in that dtype with dropout off, sets every weight and input
 * from the file, and compares:
 *   - forward: the loss and every named tensor (fwd/...);
 *   - backward: the gradient of every weight, float input and intermediate
 *     tensor (grad/...);
 *   - a fresh run of 3 SGD steps (lr 0.1, momentum 0.9, weight decay 0.01)
 *     and another of 3 Adam steps (lr 0.01, weight decay 0.01), the same
 *     batch each step: every weight afterwards and each step's loss
 *     (sgd3/..., adam3/...).
 *
 * Error measure, per tensor: max_i |got_i - want_i| / max(max_i |want_i|,
 * 1e-2), i.e. relative to the tensor's own scale; the floor keeps tensors
 * that vanish identically (the gradient of a conv bias before a batch norm,
 * of the attention key bias) from comparing rounding noise. Tolerances per
 * group are in TOL below (README.md gives the errors measured). Every
 * mismatch prints the tensor, the worst element (flat index and
 * coordinates), got and expected; the test fails if any tensor is over its
 * tolerance. A line per model and dtype reports the worst error per group.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "pcg.h"
#include "reference.h"

#include "../common/check_main.h"

#ifndef PCGC_SOURCE_DIR
#error "PCGC_SOURCE_DIR must be defined to the source tree"
#endif

#define GOLDEN_DIR PCGC_SOURCE_DIR "/tests/golden"

static const char *const MODELS[] = {"mlp", "cnn", "transformer", "embbag", "embbag_mean", "decoder", "moe"};
#define N_MODELS ((int)(sizeof MODELS / sizeof MODELS[0]))

enum { G_FWD, G_GRAD, G_SGD, G_ADAM, G_COUNT };
static const char *const GROUP_NAME[G_COUNT] = {"fwd", "grad", "sgd3", "adam3"};

/* Tolerances of the error measure above, by dtype (f64, f32) and group.
 * f64: PyTorch and pcgc differ only in summation order, errors ~1e-14;
 * 1e-9 leaves room for any valid order of operations and still catches
 * a wrong constant such as a halved layernorm eps (~1e-6). f32: the f32
 * PyTorch run and pcgc's f32 run each round at ~6e-8 relative; the
 * differences measured stay below 1e-6 for forward, gradients and SGD,
 * and below 7e-6 for Adam, whose normalised step amplifies the rounding
 * noise of near-zero gradients (cnn's conv1.bias, whose gradient vanishes
 * under the batch norm, so only the weight decay moves it). Each
 * tolerance is >= 10x what was measured (README.md); a wrong formula (a
 * missing scale, a transpose, a wrong reduction) gives errors of 1e-3 or
 * more. */
static const double TOL[2][G_COUNT] = {
    /* f64 */ {1e-9, 1e-9, 1e-9, 1e-9},
    /* f32 */ {1e-5, 2e-5, 2e-5, 1e-4},
};
#define SCALE_FLOOR 1e-2

typedef struct run_ctx {
  const char *model, *dtname;
  int dt;                       /* 0 f64, 1 f32 */
  pcgc_dtype dtype;
  const golden_file *gf;
  const pcgc_graph *g;
  double worst[G_COUNT];
  char worst_name[G_COUNT][160];
  int compared[G_COUNT];
  int failures;
  char first_failure[1024];
} run_ctx;

/* ------------------------------------------------------------- helpers */

static const golden_tensor *need(const run_ctx *c, const char *name) {
  const golden_tensor *t = golden_find(c->gf, name);
  ck_assert_msg(t != NULL, "%s.%s.bin: no tensor '%s'", c->model, c->dtname, name);
  return t;
}

static void coords_str(char *buf, size_t n, const golden_tensor *t, int64_t i) {
  int64_t idx[GOLDEN_MAX_RANK];
  for (int d = t->rank - 1; d >= 0; d--) {
    idx[d] = t->dims[d] ? i % t->dims[d] : 0;
    i = t->dims[d] ? i / t->dims[d] : 0;
  }
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < t->rank && k < n; d++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)idx[d]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* Compares `got` (n doubles) with golden tensor `want`; records the error
 * in the group's statistics and any failure. */
static void compare(run_ctx *c, int group, const golden_tensor *want, const double *got, int64_t n) {
  ck_assert_msg(n == want->n, "%s %s: '%s' has %lld elements, golden %lld", c->model, c->dtname, want->name,
                (long long)n, (long long)want->n);
  double scale = SCALE_FLOOR;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(golden_at(want, i)));
  double worst = 0;
  int64_t wi = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs(got[i] - golden_at(want, i)) / scale;
    if (!(e <= worst)) { /* also takes NaN */
      worst = isnan(e) ? INFINITY : e;
      wi = i;
      if (isinf(worst)) break;
    }
  }
  c->compared[group]++;
  if (worst >= c->worst[group]) {
    c->worst[group] = worst;
    snprintf(c->worst_name[group], sizeof c->worst_name[group], "%s", want->name);
  }
  double tol = TOL[c->dt][group];
  if (worst <= tol) return;
  char at[128];
  coords_str(at, sizeof at, want, wi);
  char msg[1024];
  snprintf(msg, sizeof msg,
           "%s %s: %s mismatch at index %lld %s: got %.10g, expected %.10g (error %.3g of scale %.3g, "
           "tolerance %.1g)",
           c->model, c->dtname, want->name, (long long)wi, at, got[wi], golden_at(want, wi), worst, scale, tol);
  fprintf(stderr, "%s\n", msg);
  if (c->failures++ == 0) snprintf(c->first_failure, sizeof c->first_failure, "%s", msg);
}

static pcgc_dtype to_pcgc(golden_dtype d) {
  return d == GOLDEN_F32 ? PCGC_F32 : d == GOLDEN_F64 ? PCGC_F64 : PCGC_I32;
}

/* Every weight and input of the graph has its init/ or input/ tensor of the
 * same shape, and every init/ and input/ tensor names one. */
static void check_sources(const run_ctx *c) {
  const pcgc_graph *g = c->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const pcgc_node *nd = &g->nodes[i];
    if (nd->kind != PCGC_OP_WEIGHT && nd->kind != PCGC_OP_INPUT) continue;
    char name[1100];
    snprintf(name, sizeof name, "%s/%s", nd->kind == PCGC_OP_WEIGHT ? "init" : "input", nd->name);
    const golden_tensor *t = need(c, name);
    const pcgc_ptensor *p = &nd->out[0];
    bool same = t->rank == p->rank;
    for (int d = 0; same && d < p->rank; d++) same = t->dims[d] == p->dims[d];
    ck_assert_msg(same, "%s %s: golden '%s' has another shape than the model's %s", c->model, c->dtname, name,
                  nd->name);
    /* floats in the run's dtype, so that the f32 run starts from exactly
     * the f32 PyTorch run's values; indices i32 */
    golden_dtype want = !pcgc_dtype_is_float(p->dtype) ? GOLDEN_I32 : c->dt == 0 ? GOLDEN_F64 : GOLDEN_F32;
    ck_assert_msg(t->dtype == want, "%s %s: golden '%s' is %s, expected %s", c->model, c->dtname, name,
                  golden_dtype_name(t->dtype), golden_dtype_name(want));
  }
  for (int i = 0; i < c->gf->count; i++) {
    const char *n = c->gf->t[i].name;
    bool init = strncmp(n, "init/", 5) == 0, input = strncmp(n, "input/", 6) == 0;
    if (!init && !input) continue;
    int id = pcgc_graph_find(g, strchr(n, '/') + 1);
    ck_assert_msg(id >= 0 && g->nodes[id].kind == (init ? PCGC_OP_WEIGHT : PCGC_OP_INPUT),
                  "%s %s: golden '%s' names no %s of the model", c->model, c->dtname, n, init ? "weight" : "input");
  }
}

/* A run with every weight and input set from the golden file. */
static pcgc_reference *session(const run_ctx *c, const pcgc_optimizer *opt) {
  pcgc_ref_options o;
  pcgc_ref_options_default(&o);
  o.dtype = c->dtype;
  o.training = false;
  if (opt) o.opt = *opt;
  pcgc_error err = {0};
  pcgc_reference *r = pcgc_ref_new(c->g, &o, &err);
  ck_assert_msg(r != NULL, "%s %s: pcgc_ref_new: %s", c->model, c->dtname, err.message);
  for (int i = 0; i < c->gf->count; i++) {
    const golden_tensor *t = &c->gf->t[i];
    const char *n = t->name;
    if (strncmp(n, "init/", 5) != 0 && strncmp(n, "input/", 6) != 0) continue;
    pcgc_status st = pcgc_ref_set(r, strchr(n, '/') + 1, to_pcgc(t->dtype), t->data, t->n, &err);
    ck_assert_msg(st == PCGC_OK, "%s %s: pcgc_ref_set '%s': %s", c->model, c->dtname, n, err.message);
  }
  return r;
}

static double *get(const run_ctx *c, pcgc_reference *r, const char *name, int64_t n, bool grad) {
  double *buf = malloc((size_t)(n ? n : 1) * sizeof *buf);
  ck_assert_ptr_nonnull(buf);
  pcgc_error err = {0};
  pcgc_status st = grad ? pcgc_ref_get_grad(r, name, PCGC_F64, buf, n, &err)
                        : pcgc_ref_get(r, name, PCGC_F64, buf, n, &err);
  ck_assert_msg(st == PCGC_OK, "%s %s: %s '%s': %s", c->model, c->dtname, grad ? "pcgc_ref_get_grad" : "pcgc_ref_get",
                name, err.message);
  return buf;
}

/* Compares every golden tensor "PREFIX/NAME" with NAME read from `r`. */
static void compare_all(run_ctx *c, pcgc_reference *r, const char *prefix, int group, bool grad, const char *skip) {
  size_t pl = strlen(prefix);
  for (int i = 0; i < c->gf->count; i++) {
    const golden_tensor *t = &c->gf->t[i];
    if (strncmp(t->name, prefix, pl) != 0 || t->name[pl] != '/') continue;
    const char *name = t->name + pl + 1;
    if (skip && strcmp(name, skip) == 0) continue;
    double *got = get(c, r, name, t->n, grad);
    compare(c, group, t, got, t->n);
    free(got);
  }
}

static void train(run_ctx *c, pcgc_optimizer_kind kind) {
  const char *tag = kind == PCGC_SGD ? "sgd3" : "adam3";
  int group = kind == PCGC_SGD ? G_SGD : G_ADAM;
  pcgc_optimizer opt;
  pcgc_optimizer_default(&opt, kind);
  if (kind == PCGC_SGD) {
    const golden_tensor *m = need(c, "meta/sgd");
    ck_assert_int_eq(m->n, 3);
    opt.lr = golden_at(m, 0);
    opt.momentum = golden_at(m, 1);
    opt.weight_decay = golden_at(m, 2);
  } else {
    const golden_tensor *m = need(c, "meta/adam");
    ck_assert_int_eq(m->n, 5);
    opt.lr = golden_at(m, 0);
    opt.beta1 = golden_at(m, 1);
    opt.beta2 = golden_at(m, 2);
    opt.eps = golden_at(m, 3);
    opt.weight_decay = golden_at(m, 4);
  }
  char name[64];
  snprintf(name, sizeof name, "%s/loss", tag);
  const golden_tensor *want_loss = need(c, name);
  pcgc_reference *r = session(c, &opt);
  double losses[16];
  ck_assert_int_le(want_loss->n, 16);
  for (int64_t s = 0; s < want_loss->n; s++) {
    pcgc_error err = {0};
    pcgc_status st = pcgc_ref_train_step(r, &losses[s], &err);
    ck_assert_msg(st == PCGC_OK, "%s %s: %s step %lld: %s", c->model, c->dtname, tag, (long long)s + 1, err.message);
  }
  compare(c, group, want_loss, losses, want_loss->n);
  compare_all(c, r, tag, group, false, "loss");
  pcgc_ref_free(r);
}

/* ---------------------------------------------------------------- tests */

START_TEST(test_agreement) {
  int model = _i / 2, dt = _i % 2;
  run_ctx *c = calloc(1, sizeof *c);
  ck_assert_ptr_nonnull(c);
  c->model = MODELS[model];
  c->dt = dt;
  c->dtname = dt == 0 ? "f64" : "f32";
  c->dtype = dt == 0 ? PCGC_F64 : PCGC_F32;

  char path[1024];
  golden_file gf;
  snprintf(path, sizeof path, "%s/%s.%s.bin", GOLDEN_DIR, c->model, c->dtname);
  ck_assert_msg(golden_load(path, &gf) == 0, "%s", gf.error);
  c->gf = &gf;
  pcgc_error err = {0};
  snprintf(path, sizeof path, "%s/%s.pcg", GOLDEN_DIR, c->model);
  pcgc_graph *g = pcgc_model_load(path, NULL, &err);
  if (!g) pcgc_error_print(stderr, &err);
  ck_assert_msg(g != NULL, "%s: %s", path, err.message);
  c->g = g;
  check_sources(c);
  for (int i = 0; i < gf.count; i++) {
    const char *n = gf.t[i].name;
    bool known = false;
    for (const char *const *p = (const char *const[]){"meta/", "init/", "input/", "fwd/", "grad/", "sgd3/", "adam3/",
                                                      NULL};
         *p; p++)
      known = known || strncmp(n, *p, strlen(*p)) == 0;
    ck_assert_msg(known, "%s: tensor '%s' has an unknown prefix", path, n);
  }

  /* forward and backward */
  pcgc_reference *r = session(c, NULL);
  double loss;
  pcgc_status st = pcgc_ref_forward(r, &loss, &err);
  ck_assert_msg(st == PCGC_OK, "%s %s: pcgc_ref_forward: %s", c->model, c->dtname, err.message);
  compare(c, G_FWD, need(c, "fwd/loss"), &loss, 1);
  compare_all(c, r, "fwd", G_FWD, false, "loss");
  st = pcgc_ref_backward(r, &err);
  ck_assert_msg(st == PCGC_OK, "%s %s: pcgc_ref_backward: %s", c->model, c->dtname, err.message);
  compare_all(c, r, "grad", G_GRAD, true, NULL);
  pcgc_ref_free(r);

  /* optimizers, each from the initial weights */
  train(c, PCGC_SGD);
  train(c, PCGC_ADAM);

  printf("golden %-11s %s:", c->model, c->dtname);
  for (int k = 0; k < G_COUNT; k++)
    printf("  %s %.2e (%d tensors, worst %s)", GROUP_NAME[k], c->worst[k], c->compared[k], c->worst_name[k]);
  printf("\n");
  fflush(stdout);
  int failures = c->failures;
  char first[1024];
  snprintf(first, sizeof first, "%s", c->first_failure);
  pcgc_graph_free(g);
  golden_free(&gf);
  free(c);
  ck_assert_msg(failures == 0, "%d tensors over tolerance; first: %s", failures, first);
}
END_TEST

/* The reader: every truncation of a real file is an error saying so, and
 * other damage is named. */
START_TEST(test_reader_rejects_bad_files) {
  char path[1024];
  snprintf(path, sizeof path, "%s/embbag.f32.bin", GOLDEN_DIR);
  FILE *fp = fopen(path, "rb");
  ck_assert_msg(fp != NULL, "cannot open %s", path);
  static unsigned char buf[1 << 16];
  size_t len = fread(buf, 1, sizeof buf, fp);
  fclose(fp);
  ck_assert_uint_lt(len, sizeof buf);

  golden_file f;
  ck_assert_msg(golden_parse(buf, len, "x", &f) == 0, "%s", f.error);
  ck_assert_int_gt(f.count, 10);
  const golden_tensor *t = golden_find(&f, "input/ids");
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(t->dtype, GOLDEN_I32);
  ck_assert_int_eq(t->rank, 2);
  ck_assert_int_eq(t->dims[0], 8);
  ck_assert_int_eq(t->dims[1], 5);
  ck_assert_ptr_null(golden_find(&f, "no/such"));
  golden_free(&f);

  for (size_t n = 0; n < len; n++) {
    unsigned char *cut = malloc(n ? n : 1); /* exact size: ASan sees any overread */
    memcpy(cut, buf, n);
    int rc = golden_parse(cut, n, "cut", &f);
    free(cut);
    ck_assert_msg(rc != 0, "a file cut to %zu bytes was accepted", n);
    ck_assert_msg(strstr(f.error, "truncated") != NULL, "cut to %zu bytes: '%s'", n, f.error);
    ck_assert_ptr_null(f.t);
  }

  unsigned char *bad = malloc(len + 1);
  memcpy(bad, buf, len);
  bad[0] = 'X';
  ck_assert_int_ne(golden_parse(bad, len, "m", &f), 0);
  ck_assert_str_eq(f.error, "m: byte 0: not a golden tensor file (magic is not \"PCGT\")");
  memcpy(bad, buf, len);
  bad[4] = 2;
  ck_assert_int_ne(golden_parse(bad, len, "v", &f), 0);
  ck_assert_str_eq(f.error, "v: byte 8: version 2, this reader knows version 1");
  memcpy(bad, buf, len);
  bad[len] = 0;
  ck_assert_int_ne(golden_parse(bad, len + 1, "t", &f), 0);
  ck_assert_msg(strstr(f.error, "1 trailing bytes") != NULL, "%s", f.error);
  /* first tensor: name length at 12, name from 16; its dtype follows */
  uint32_t nl = (uint32_t)golden__le(buf + 12, 4);
  memcpy(bad, buf, len);
  bad[16 + nl] = 9;
  ck_assert_int_ne(golden_parse(bad, len, "d", &f), 0);
  ck_assert_msg(strstr(f.error, "unknown dtype 9") != NULL, "%s", f.error);
  memcpy(bad, buf, len);
  bad[12] = bad[13] = bad[14] = bad[15] = 0;
  ck_assert_int_ne(golden_parse(bad, len, "z", &f), 0);
  ck_assert_msg(strstr(f.error, "name length 0") != NULL, "%s", f.error);
  free(bad);

  /* a duplicate name, and a negative dim, in hand-made files */
  static const unsigned char dup[] = {'P', 'C', 'G', 'T', 1, 0, 0, 0, 2, 0, 0, 0,
                                      1, 0, 0, 0, 'a', 2, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0,
                                      1, 0, 0, 0, 'a', 2, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0};
  ck_assert_int_ne(golden_parse(dup, sizeof dup, "dup", &f), 0);
  ck_assert_msg(strstr(f.error, "duplicate name 'a'") != NULL, "%s", f.error);
  static const unsigned char neg[] = {'P', 'C', 'G', 'T', 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 'a', 0, 0, 0, 0,
                                      1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  ck_assert_int_ne(golden_parse(neg, sizeof neg, "neg", &f), 0);
  ck_assert_msg(strstr(f.error, "dim 0 is negative") != NULL, "%s", f.error);
  ck_assert_int_ne(golden_load(GOLDEN_DIR "/no-such-file.bin", &f), 0);
  ck_assert_msg(strstr(f.error, "cannot open") != NULL, "%s", f.error);
}
END_TEST

static Suite *golden_suite(void) {
  Suite *s = suite_create("golden");
  TCase *tc = tcase_create("pytorch");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_reader_rejects_bad_files);
  tcase_add_loop_test(tc, test_agreement, 0, 2 * N_MODELS);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(golden_suite)
