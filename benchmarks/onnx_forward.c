/*
 * onnx_forward.c — one forward pass of an ONNX model through pcgc's
 * reference interpreter, for comparing against another framework's output
 * (benchmarks/onnx_torchvision.py).
 *
 *   build/onnx_forward MODEL.onnx BATCH INPUT.f32 OUTPUT.f64
 *
 * Imports MODEL at batch BATCH (as `pcgc check --batch` does), reads the
 * one graph input from INPUT (raw little-endian float32, row-major, exactly
 * the input's element count), runs the forward pass in f64 in eval mode
 * (dropout off) and writes the one output as raw float64 to OUTPUT. Prints
 * the output's name and shape. Exit codes: 0 ok, 1 the model or the run
 * failed (the message on stderr), 2 usage, 3 I/O.
 */
#include <stdio.h>
#include <stdlib.h>

#include "onnx_import.h"
#include "reference.h"

static int fail(const pcgc_error *err, const char *what) {
  fprintf(stderr, "onnx_forward: %s: %s\n", what, err->message);
  if (err->hint[0]) fprintf(stderr, "hint: %s\n", err->hint);
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s MODEL.onnx BATCH INPUT.f32 OUTPUT.f64\n", argv[0]);
    return 2;
  }
  pcgc_onnx_options o = {.batch = atoll(argv[2])};
  pcgc_error err = {0};
  pcgc_graph *g = pcgc_onnx_load(argv[1], &o, &err);
  if (!g) return fail(&err, argv[1]);
  /* the one input, and the one operator output nobody reads */
  int in = -1, out = -1, n_in = 0, n_out = 0;
  char *used = calloc((size_t)g->n_nodes, 1);
  if (!used) return 3;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) used[g->nodes[i].in[k].node] = 1;
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].kind == PCGC_OP_INPUT) in = i, n_in++;
    else if (!used[i] && pcgc_op_class_of(g->nodes[i].kind) != PCGC_CLASS_SOURCE) out = i, n_out++;
  }
  free(used);
  if (n_in != 1 || n_out != 1) {
    fprintf(stderr, "onnx_forward: the model has %d inputs and %d outputs; this tool runs one of each\n", n_in,
            n_out);
    return 1;
  }
  int64_t nx = pcgc_ptensor_numel(&g->nodes[in].out[0]), ny = pcgc_ptensor_numel(&g->nodes[out].out[0]);
  float *x = malloc((size_t)nx * sizeof *x);
  double *y = malloc((size_t)ny * sizeof *y);
  FILE *f = fopen(argv[3], "rb");
  if (!x || !y || !f || fread(x, sizeof *x, (size_t)nx, f) != (size_t)nx) {
    fprintf(stderr, "onnx_forward: cannot read %lld floats from %s\n", (long long)nx, argv[3]);
    return 3;
  }
  fclose(f);
  pcgc_ref_options ro;
  pcgc_ref_options_default(&ro);
  ro.dtype = PCGC_F64;
  ro.training = false;
  ro.allow_no_loss = true;
  pcgc_reference *r = pcgc_ref_new(g, &ro, &err);
  if (!r) return fail(&err, "pcgc_ref_new");
  double loss;
  if (pcgc_ref_set(r, g->nodes[in].name, PCGC_F32, x, nx, &err) != PCGC_OK) return fail(&err, "input");
  if (pcgc_ref_forward(r, &loss, &err) != PCGC_OK) return fail(&err, "forward");
  if (pcgc_ref_get(r, g->nodes[out].name, PCGC_F64, y, ny, &err) != PCGC_OK) return fail(&err, "output");
  f = fopen(argv[4], "wb");
  if (!f || fwrite(y, sizeof *y, (size_t)ny, f) != (size_t)ny || fclose(f) != 0) {
    fprintf(stderr, "onnx_forward: cannot write %s\n", argv[4]);
    return 3;
  }
  char shape[256];
  pcgc_ptensor_format(shape, sizeof shape, &g->nodes[out].out[0]);
  printf("%s %s\n", g->nodes[out].name, shape);
  pcgc_ref_free(r);
  pcgc_graph_free(g);
  free(x);
  free(y);
  return 0;
}
