/*
 * test_onnx_torch.c — the ONNX importer on models exported from PyTorch at
 * test time. tests/onnx/export_models.py writes into a temporary folder,
 * with their sidecars: an MLP, a small CNN, a TransformerEncoder (opset
 * 17), the same with GELU at opset 14 (LayerNorm and GELU decomposed into
 * elementwise chains the importer must recognise), a model of many small
 * operators at opset 11, a LLaMA-style SwiGLU block (SiLU exported as
 * Sigmoid + Mul), the operators of issue 16 at opset 17 (ops17: grouped
 * and depthwise convolutions, Clip, GroupNorm, InstanceNorm, Pow, Sqrt,
 * Reciprocal, ReduceMax, LogSoftmax, Gather, ...), a two-layer LLaMA-style
 * decoder (RoPE, grouped-query causal attention, SwiGLU), and torchvision's resnet18, resnext50_32x4d and
 * inception_v3 (weights=None). Each is imported and checked as in
 * onnx_test.h: the parameter count equals PyTorch's exactly, the operator
 * counts match the ONNX node counts, every weight holds its initializer's
 * values (exactly for the small models, by the sum of its values for
 * every parameter of the big ones), the eight small models reproduce
 * PyTorch's output through the reference interpreter (f64, 1e-4
 * relative), and the dynamic batch sizes inputs and outputs. The
 * torchvision models (also mobilenet_v2: ReLU6 exported as Clip;
 * mobilenet_v3_small: HardSwish, HardSigmoid) agree with torchvision's
 * published forward costs.
 *
 * Needs /usr/bin/python3 with torch, torchvision and onnx; exits 77
 * (skipped) without them. The exports take ~20 s and ~250 MB of disk.
 */
#define _XOPEN_SOURCE 700 /* nftw, mkdtemp */
#include "onnx_test.h"

#include <ftw.h>
#include <unistd.h>

#ifndef PYTHON
#define PYTHON "/usr/bin/python3" /* Debian's, where python3-torch installs torch */
#endif

static char g_dir[512];   /* the export folder, made by main() */

static const char *const MODELS[] = {"mlp",          "cnn",          "transformer",     "transformer_gelu", "ops",
                                     "swiglu",       "ops17",        "decoder",         "resnet18",
                                     "resnext50_32x4d", "inception_v3", "mobilenet_v2", "mobilenet_v3_small"};
#define N_MODELS ((int)(sizeof MODELS / sizeof MODELS[0]))
#define N_SMALL 8   /* the first eight have an input/output pair */

START_TEST(test_counts) {
  model_side s;
  side_load(g_dir, MODELS[_i], &s);
  pcgc_graph *g = load_model(&s, 2);
  check_params(g, &s);
  check_ops(g, &s);
  /* the torchvision models keep every parameter under its own name (the
   * transformers' projection weights are folded into onnx::MatMul_N) */
  int checked = check_value_sums(&s, g);
  if (_i >= N_SMALL) ck_assert_int_eq(checked, (int)s.parameter_tensors);
  pcgc_error err = {0};
  ck_assert_msg(pcgc_graph_validate(g, &err) == PCGC_OK, "%s: %s", s.model, err.message);
  pcgc_graph_free(g);
  side_free(&s);
}
END_TEST

START_TEST(test_forward) {
  model_side s;
  side_load(g_dir, MODELS[_i], &s);
  check_forward(&s);
  side_free(&s);
}
END_TEST

START_TEST(test_values) {
  model_side s;
  side_load(g_dir, MODELS[_i], &s);
  pcgc_graph *g = load_model(&s, 1);
  check_values(&s, g);
  pcgc_graph_free(g);
  side_free(&s);
}
END_TEST

/* Batch 3: the input is [3, ...] and so is the output (N_CLASSES = 1000). */
START_TEST(test_batch) {
  model_side s;
  side_load(g_dir, MODELS[_i], &s);
  pcgc_graph *g = load_model(&s, 3);
  int in = pcgc_graph_find(g, s.input_name);
  ck_assert_msg(in >= 0, "no input '%s'", s.input_name);
  ck_assert_int_eq(g->nodes[in].out[0].dims[0], 3);
  const pcgc_ptensor *out = &g->nodes[sink_node(g)].out[0];
  ck_assert_int_eq(out->dims[0], 3);
  if (_i >= N_SMALL) {
    ck_assert_int_eq(out->rank, 2);
    ck_assert_int_eq(out->dims[1], 1000);
  }
  pcgc_graph_free(g);
  side_free(&s);
}
END_TEST

/* Forward FLOPs per image against torchvision's published cost (the
 * weights' documentation from torchvision 0.15 lists "GFLOPS", counting
 * multiply-adds: 1.81 for resnet18, 4.23 for resnext50_32x4d, 5.71 for
 * inception_v3 at 299x299). pcgc counts a
 * multiply-add as 2 FLOPs and adds the elementwise work of batch norms,
 * ReLUs, additions and pooling, which is under 2%: a wrong stride,
 * padding or group count would be far outside the 3% allowed. */
START_TEST(test_flops) {
  /* MobileNets: 0.30 and 0.06 GMAC published; their depthwise convolutions
   * are cheap, so batch norms and activations are ~7% of pcgc's count */
  static const double gmacs[] = {1.81, 4.23, 5.71, 0.30, 0.06}, tol[] = {0.03, 0.03, 0.03, 0.10, 0.10};
  model_side s;
  side_load(g_dir, MODELS[N_SMALL + _i], &s);
  pcgc_graph *g = load_model(&s, 1);
  pcgc_graph_stats st;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_graph_stats_compute(g, &st, &err), PCGC_OK);
  double want = 2e9 * gmacs[_i];
  fprintf(stderr, "%-16s forward %.3f GFLOP per image, torchvision %.2f GMAC x 2 = %.2f\n", s.model,
          st.fwd_flops / 1e9, gmacs[_i], want / 1e9);
  ck_assert_msg(fabs(st.fwd_flops / want - 1) < tol[_i], "%s: %.4g forward FLOPs, expected about %.4g", s.model,
                st.fwd_flops, want);
  pcgc_graph_free(g);
  side_free(&s);
}
END_TEST

static Suite *torch_suite(void) {
  Suite *s = suite_create("onnx_torch");
  TCase *tc = tcase_create("exported");
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_counts, 0, N_MODELS);
  tcase_add_loop_test(tc, test_forward, 0, N_SMALL);
  tcase_add_loop_test(tc, test_values, 0, N_SMALL);
  tcase_add_loop_test(tc, test_batch, 0, N_MODELS);
  tcase_add_loop_test(tc, test_flops, 0, N_MODELS - N_SMALL);
  suite_add_tcase(s, tc);
  return s;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

int main(void) {
  if (system(PYTHON " -c 'import torch, torchvision, onnx' >/dev/null 2>&1") != 0) {
    printf("skipped: " PYTHON " cannot import torch, torchvision and onnx\n");
    return 77;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/pcgc-onnx-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) {
    perror(g_dir);
    return EXIT_FAILURE;
  }
  char cmd[1024];
  snprintf(cmd, sizeof cmd, PYTHON " '%s/tests/onnx/export_models.py' '%s'", PCGC_SOURCE_DIR, g_dir);
  int rc = system(cmd);
  int failed = 1;
  if (rc != 0) {
    fprintf(stderr, "export_models.py failed (status %d): %s\n", rc, cmd);
  } else {
    SRunner *sr = srunner_create(torch_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
  }
  nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
