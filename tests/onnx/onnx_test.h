/*
 * onnx_test.h — what test_onnx.c and test_onnx_torch.c share: reading the
 * sidecars that tests/onnx/export_models.py writes (MODEL.json, raw f32
 * files), and the three checks every exported model gets:
 *
 *   check_params   pcgc_graph_stats_compute's parameter count equals
 *                  PyTorch's sum of p.numel() over named_parameters(),
 *                  exactly;
 *   check_ops      the pcgc operator counts agree with the ONNX node counts
 *                  (the mapping is spelled out at check_ops);
 *   check_forward  (models with an input/output pair) the reference
 *                  interpreter's f64 forward pass, from the imported
 *                  weights and PyTorch's input, gives PyTorch's output to
 *                  1e-4 relative to the output's largest magnitude;
 *   check_values   (models with MODEL.init.f32) every initializer is a
 *                  weight of the same name holding its floats, or their
 *                  transpose where pcgc's layout is ONNX's transposed;
 *   check_value_sums  (any model) every initializer that is a PyTorch
 *                  parameter is a weight of its name whose values have the
 *                  initializer's sum.
 *
 * Static functions only: each test program includes it once.
 */
#ifndef PCGC_TESTS_ONNX_TEST_H
#define PCGC_TESTS_ONNX_TEST_H

#ifndef _XOPEN_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <cJSON.h>
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_import.h"
#include "pcg.h"
#include "reference.h"

#ifndef PCGC_SOURCE_DIR
#error "PCGC_SOURCE_DIR must be defined to the source tree"
#endif

#define FORWARD_TOL 1e-4

/* ---------------------------------------------------------------- sidecar */

#define SIDE_MAX_OPS 64

typedef struct side_init {
  char name[128];
  int rank;
  int64_t dims[PCGC_MAX_RANK];
  int64_t offset, numel;   /* in elements of MODEL.init.f32 (offset -1: not there) */
  bool transposed;         /* B of a Gemm transB=1: pcgc holds it transposed */
  bool parameter;          /* one of PyTorch's named_parameters() */
  double sum, sum_abs;     /* of its values, in float64 */
} side_init;

typedef struct model_side {
  char dir[1024], model[64];
  int64_t opset, parameters, buffers, batchnorm_layers, layernorm_layers, groupnorm_layers, silu_layers;
  int n_ops;
  char op_type[SIDE_MAX_OPS][48];
  int op_count[SIDE_MAX_OPS];
  char input_name[128], output_name[128];
  /* io: present for the small models */
  bool has_io;
  int64_t io_batch;
  int in_rank, out_rank;
  int64_t in_dims[PCGC_MAX_RANK], out_dims[PCGC_MAX_RANK];
  char input_file[128], output_file[128], init_file[128];
  int n_inits;
  side_init *inits;        /* every float initializer (malloc'd: side_free) */
  int64_t parameter_tensors;
} model_side;

static void side_free(model_side *s) {
  free(s->inits);
  s->inits = NULL;
}

static int64_t json_int(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  ck_assert_msg(cJSON_IsNumber(v), "sidecar: '%s' is not a number", key);
  return (int64_t)v->valuedouble;
}

static void json_str(const cJSON *o, const char *key, char *out, size_t n) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  ck_assert_msg(cJSON_IsString(v), "sidecar: '%s' is not a string", key);
  snprintf(out, n, "%s", v->valuestring);
}

static int json_dims(const cJSON *arr, int64_t *dims) {
  ck_assert_msg(cJSON_IsArray(arr), "sidecar: dims are not an array");
  int n = cJSON_GetArraySize(arr);
  ck_assert_int_le(n, PCGC_MAX_RANK);
  for (int i = 0; i < n; i++) {
    const cJSON *d = cJSON_GetArrayItem(arr, i);
    dims[i] = cJSON_IsNumber(d) ? (int64_t)d->valuedouble : -1; /* "batch" -> -1 */
  }
  return n;
}

/* Reads DIR/MODEL.json. */
static void side_load(const char *dir, const char *model, model_side *s) {
  memset(s, 0, sizeof *s);
  snprintf(s->dir, sizeof s->dir, "%s", dir);
  snprintf(s->model, sizeof s->model, "%s", model);
  char path[1200];
  snprintf(path, sizeof path, "%s/%s.json", dir, model);
  pcgc_error err = {0};
  size_t len;
  char *text = pcgc_read_file(path, &len, &err);
  ck_assert_msg(text != NULL, "%s: %s", path, err.message);
  cJSON *j = cJSON_ParseWithLength(text, len);
  free(text);
  ck_assert_msg(j != NULL, "%s is not JSON", path);
  s->opset = json_int(j, "opset");
  s->parameters = json_int(j, "parameters");
  s->buffers = json_int(j, "buffers");
  s->batchnorm_layers = json_int(j, "batchnorm_layers");
  s->layernorm_layers = json_int(j, "layernorm_layers");
  /* sidecars written before SiLU was imported do not count it: none there */
  s->silu_layers = cJSON_GetObjectItemCaseSensitive(j, "silu_layers") ? json_int(j, "silu_layers") : 0;
  s->groupnorm_layers = cJSON_GetObjectItemCaseSensitive(j, "groupnorm_layers") ? json_int(j, "groupnorm_layers") : 0;
  const cJSON *ops = cJSON_GetObjectItemCaseSensitive(j, "onnx_nodes"), *op;
  ck_assert(cJSON_IsObject(ops));
  cJSON_ArrayForEach(op, ops) {
    ck_assert_int_lt(s->n_ops, SIDE_MAX_OPS);
    snprintf(s->op_type[s->n_ops], sizeof s->op_type[0], "%s", op->string);
    s->op_count[s->n_ops++] = (int)op->valuedouble;
  }
  json_str(cJSON_GetObjectItemCaseSensitive(j, "input"), "name", s->input_name, sizeof s->input_name);
  json_str(cJSON_GetObjectItemCaseSensitive(j, "output"), "name", s->output_name, sizeof s->output_name);
  const cJSON *io = cJSON_GetObjectItemCaseSensitive(j, "io");
  if (io) {
    s->has_io = true;
    s->io_batch = json_int(io, "batch");
    s->in_rank = json_dims(cJSON_GetObjectItemCaseSensitive(io, "input_shape"), s->in_dims);
    s->out_rank = json_dims(cJSON_GetObjectItemCaseSensitive(io, "output_shape"), s->out_dims);
    json_str(io, "input_file", s->input_file, sizeof s->input_file);
    json_str(io, "output_file", s->output_file, sizeof s->output_file);
    json_str(io, "init_file", s->init_file, sizeof s->init_file);
  }
  s->parameter_tensors = json_int(j, "parameter_tensors");
  const cJSON *inits = cJSON_GetObjectItemCaseSensitive(j, "initializers"), *it;
  ck_assert_msg(cJSON_IsArray(inits), "sidecar: no initializers");
  s->inits = calloc((size_t)cJSON_GetArraySize(inits) + 1, sizeof *s->inits);
  ck_assert_ptr_nonnull(s->inits);
  cJSON_ArrayForEach(it, inits) {
    side_init *si = &s->inits[s->n_inits++];
    json_str(it, "name", si->name, sizeof si->name);
    si->rank = json_dims(cJSON_GetObjectItemCaseSensitive(it, "dims"), si->dims);
    si->offset = cJSON_GetObjectItemCaseSensitive(it, "offset") ? json_int(it, "offset") : -1;
    si->transposed = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "transposed"));
    si->parameter = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "parameter"));
    si->sum = cJSON_GetObjectItemCaseSensitive(it, "sum")->valuedouble;
    si->sum_abs = cJSON_GetObjectItemCaseSensitive(it, "sum_abs")->valuedouble;
    si->numel = 1;
    for (int d = 0; d < si->rank; d++) si->numel *= si->dims[d];
  }
  cJSON_Delete(j);
}

/* Count of ONNX nodes of `op_type` (0 if none). */
static int side_ops(const model_side *s, const char *op_type) {
  for (int i = 0; i < s->n_ops; i++)
    if (strcmp(s->op_type[i], op_type) == 0) return s->op_count[i];
  return 0;
}

/* Reads exactly n little-endian f32 values from DIR/FILE (caller frees). */
static float *read_f32(const char *dir, const char *file, int64_t n) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  ck_assert_ptr_nonnull(v);
  size_t got = fread(v, sizeof *v, (size_t)n, f);
  int extra = fgetc(f);
  fclose(f);
  ck_assert_msg(got == (size_t)n && extra == EOF, "%s: expected exactly %lld floats", path, (long long)n);
  return v;
}

static pcgc_graph *load_model(const model_side *s, int64_t batch) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s.onnx", s->dir, s->model);
  pcgc_onnx_options o = {.batch = batch};
  pcgc_error err = {0};
  pcgc_graph *g = pcgc_onnx_load(path, &o, &err);
  if (!g) pcgc_error_print(stderr, &err);
  ck_assert_msg(g != NULL, "%s: %s (hint: %s)", path, err.message, err.hint);
  return g;
}

/* ----------------------------------------------------------------- checks */

static int kind_count(const pcgc_graph *g, pcgc_op_kind k) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i].kind == k;
  return n;
}

/* Nodes of kind k whose `act` attribute is `act` (linear, conv2d). */
static int fused_act_count(const pcgc_graph *g, pcgc_op_kind k, int64_t act) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].kind == k && pcgc_attrs_int(g->nodes[i].attrs, "act") == act) n++;
  return n;
}

static void check_params(const pcgc_graph *g, const model_side *s) {
  pcgc_graph_stats st;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_graph_stats_compute(g, &st, &err), PCGC_OK);
  fprintf(stderr, "%-16s parameters: pcgc %lld, PyTorch %lld\n", s->model, (long long)st.params,
          (long long)s->parameters);
  ck_assert_msg(st.params == s->parameters, "%s: pcgc counts %lld parameters, PyTorch %lld (ONNX buffers: %lld)",
                s->model, (long long)st.params, (long long)s->parameters, (long long)s->buffers);
  ck_assert_int_eq(st.count_by_kind[PCGC_OP_INPUT], 1);
}

#define OPS_EQ(g, s, what, got, want)                                                                       \
  ck_assert_msg((got) == (want), "%s: %s: pcgc has %d, the ONNX file implies %d", (s)->model, what, (int)(got), \
                (int)(want))

/*
 * The operator mapping asserted for every model (docs/onnx.md has the
 * full table):
 *
 *   conv2d                 == Conv
 *   batchnorm              == BatchNormalization == PyTorch's BatchNorm layers
 *   pool2d                 == MaxPool + AveragePool + GlobalAveragePool
 *   linear + matmul + batch_matmul == Gemm + MatMul
 *                          (a Gemm is a linear; a MatMul by a constant is a
 *                          linear, its bias Add folded in; a MatMul of two
 *                          activations is a matmul or batch_matmul)
 *   relu + act=relu fused into linear/conv2d == Relu
 *   tanh + act=tanh fused                    == Tanh
 *   gelu                   == Gelu + Erf (below opset 20 torch writes GELU
 *                          as x * 0.5 * (1 + Erf(x / sqrt 2)): one Erf each)
 *   softmax                == Softmax
 *   layernorm              == PyTorch's LayerNorm, GroupNorm and InstanceNorm
 *                          layers (GroupNorm exports as an InstanceNormalization
 *                          between Reshapes: one layernorm each); LayerNorm: one
 *                          LayerNormalization each from opset 17; below,
 *                          a ReduceMean/Sub/Pow/Sqrt/Div chain the importer
 *                          recognises); == LayerNormalization from opset 17
 *   concat                 == Concat nodes on activations (all-constant
 *                          Concats of shape arithmetic are evaluated away):
 *                          Concat when the model has no Shape nodes
 *   flatten + reshape      >= Flatten (a Flatten may be a reshape)
 *   no weight without a value; no node of a parallel operator or a loss
 */
static void check_ops(const pcgc_graph *g, const model_side *s) {
  char line[1024];
  int k = snprintf(line, sizeof line, "%-16s %d pcgc nodes:", s->model, g->n_nodes);
  for (int op = 0; op < PCGC_OP_COUNT && k < (int)sizeof line; op++)
    if (kind_count(g, (pcgc_op_kind)op))
      k += snprintf(line + k, sizeof line - (size_t)k, " %s %d", pcgc_op_name((pcgc_op_kind)op),
                    kind_count(g, (pcgc_op_kind)op));
  fprintf(stderr, "%s\n", line);
  OPS_EQ(g, s, "conv2d vs Conv", kind_count(g, PCGC_OP_CONV2D), side_ops(s, "Conv"));
  OPS_EQ(g, s, "batchnorm vs BatchNormalization", kind_count(g, PCGC_OP_BATCHNORM),
         side_ops(s, "BatchNormalization"));
  OPS_EQ(g, s, "batchnorm vs BatchNorm layers", kind_count(g, PCGC_OP_BATCHNORM), (int)s->batchnorm_layers);
  OPS_EQ(g, s, "pool2d vs MaxPool+AveragePool+GlobalAveragePool", kind_count(g, PCGC_OP_POOL2D),
         side_ops(s, "MaxPool") + side_ops(s, "AveragePool") + side_ops(s, "GlobalAveragePool"));
  OPS_EQ(g, s, "linear+matmul+batch_matmul vs Gemm+MatMul",
         kind_count(g, PCGC_OP_LINEAR) + kind_count(g, PCGC_OP_MATMUL) + kind_count(g, PCGC_OP_BATCH_MATMUL),
         side_ops(s, "Gemm") + side_ops(s, "MatMul"));
  OPS_EQ(g, s, "relu (standalone + fused) vs Relu",
         kind_count(g, PCGC_OP_RELU) + fused_act_count(g, PCGC_OP_LINEAR, PCGC_ACT_RELU) +
             fused_act_count(g, PCGC_OP_CONV2D, PCGC_ACT_RELU),
         side_ops(s, "Relu"));
  OPS_EQ(g, s, "tanh (standalone + fused) vs Tanh",
         kind_count(g, PCGC_OP_TANH) + fused_act_count(g, PCGC_OP_LINEAR, PCGC_ACT_TANH) +
             fused_act_count(g, PCGC_OP_CONV2D, PCGC_ACT_TANH),
         side_ops(s, "Tanh"));
  OPS_EQ(g, s, "softmax vs Softmax", kind_count(g, PCGC_OP_SOFTMAX), side_ops(s, "Softmax"));
  OPS_EQ(g, s, "gelu vs Gelu+Erf", kind_count(g, PCGC_OP_GELU), side_ops(s, "Gelu") + side_ops(s, "Erf"));
  OPS_EQ(g, s, "log_softmax vs LogSoftmax", kind_count(g, PCGC_OP_LOG_SOFTMAX), side_ops(s, "LogSoftmax"));
  OPS_EQ(g, s, "reduce_max vs ReduceMax", kind_count(g, PCGC_OP_REDUCE_MAX), side_ops(s, "ReduceMax"));
  ck_assert_msg(kind_count(g, PCGC_OP_CAUSAL_MASK) <= side_ops(s, "Where"), "%s: more causal_mask nodes than Where",
                s->model);
  ck_assert_msg(kind_count(g, PCGC_OP_ROPE) <= side_ops(s, "Neg"), "%s: more rope nodes than Neg (rotate_half)",
                s->model);
  OPS_EQ(g, s, "layernorm vs LayerNorm, GroupNorm and InstanceNorm layers", kind_count(g, PCGC_OP_LAYERNORM),
         (int)(s->layernorm_layers + s->groupnorm_layers));
  OPS_EQ(g, s, "silu vs SiLU layers", kind_count(g, PCGC_OP_SILU), (int)s->silu_layers);
  OPS_EQ(g, s, "sigmoid + silu vs Sigmoid", kind_count(g, PCGC_OP_SIGMOID) + kind_count(g, PCGC_OP_SILU),
         side_ops(s, "Sigmoid"));
  if (s->opset >= 17)
    OPS_EQ(g, s, "layernorm vs LayerNormalization + InstanceNormalization", kind_count(g, PCGC_OP_LAYERNORM),
           side_ops(s, "LayerNormalization") + side_ops(s, "InstanceNormalization"));
  if (side_ops(s, "Shape") == 0)
    OPS_EQ(g, s, "concat vs Concat", kind_count(g, PCGC_OP_CONCAT), side_ops(s, "Concat"));
  ck_assert_msg(kind_count(g, PCGC_OP_FLATTEN) + kind_count(g, PCGC_OP_RESHAPE) >= side_ops(s, "Flatten"),
                "%s: fewer flatten/reshape nodes than Flatten", s->model);
  for (int i = 0; i < g->n_nodes; i++) {
    const pcgc_node *n = &g->nodes[i];
    pcgc_op_class cl = pcgc_op_class_of(n->kind);
    ck_assert_msg(cl == PCGC_CLASS_SOURCE || cl == PCGC_CLASS_COMPUTE, "%s: node '%s' is a %s", s->model,
                  n->name, pcgc_op_name(n->kind));
    if (n->kind == PCGC_OP_WEIGHT) ck_assert_msg(n->value != NULL, "%s: weight '%s' has no value", s->model, n->name);
    ck_assert_msg(n->typed, "%s: node '%s' is not typed", s->model, n->name);
  }
}

/* The one node whose output nobody reads (the model's output). */
static int sink_node(const pcgc_graph *g) {
  bool *used = calloc((size_t)g->n_nodes, 1);
  ck_assert_ptr_nonnull(used);
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) used[g->nodes[i].in[k].node] = true;
  int sink = -1, n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!used[i] && pcgc_op_class_of(g->nodes[i].kind) != PCGC_CLASS_SOURCE) {
      sink = i;
      n++;
    }
  free(used);
  ck_assert_msg(n == 1, "the graph has %d sinks, expected 1", n);
  return sink;
}

static void assert_dims(const pcgc_ptensor *t, int rank, const int64_t *dims, const char *what) {
  char buf[160];
  pcgc_ptensor_format(buf, sizeof buf, t);
  ck_assert_msg(t->rank == rank, "%s: type %s, expected rank %d", what, buf, rank);
  for (int d = 0; d < rank; d++)
    ck_assert_msg(t->dims[d] == dims[d], "%s: type %s, dim %d expected %lld", what, buf, d, (long long)dims[d]);
}

/* Appends `target` (an input of the output's type) and `loss =
 * mse(output, target)`, the one loss the interpreter needs. */
static void append_loss(pcgc_graph *g, int out) {
  pcgc_error err = {0};
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_INPUT);
  const pcgc_ptensor *t = &g->nodes[out].out[0];
  ck_assert_int_eq(pcgc_attrs_set_ints(&a, "shape", t->rank, t->dims), PCGC_OK);
  int target = pcgc_graph_add_node(g, PCGC_OP_INPUT, "target", &a, 0, NULL);
  ck_assert_int_ge(target, 0);
  ck_assert_int_eq(pcgc_graph_infer_node(g, target, &err), PCGC_OK);
  pcgc_attrs_init(&a, PCGC_OP_MSE);
  int loss = pcgc_graph_add_node(g, PCGC_OP_MSE, "loss", &a, 2, (pcgc_ref[]){{out, 0}, {target, 0}});
  ck_assert_int_ge(loss, 0);
  ck_assert_msg(pcgc_graph_infer_node(g, loss, &err) == PCGC_OK, "mse: %s", err.message);
}

/* max_i |got_i - want_i| / max_i |want_i| */
static double rel_error(const double *got, const float *want, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs(got[i] - (double)want[i]);
    if (!(e <= num)) num = e; /* NaN sticks */
    if (fabs((double)want[i]) > den) den = fabs((double)want[i]);
  }
  return num / (den > 0 ? den : 1);
}

/* Imports the model at the io batch, appends a loss, runs the reference
 * forward in f64 from PyTorch's input, and compares the output. */
static void check_forward(const model_side *s) {
  ck_assert(s->has_io);
  pcgc_graph *g = load_model(s, s->io_batch);
  int in = pcgc_graph_find(g, s->input_name);
  ck_assert_msg(in >= 0, "%s: no input node '%s'", s->model, s->input_name);
  assert_dims(&g->nodes[in].out[0], s->in_rank, s->in_dims, "model input");
  int out = sink_node(g);
  assert_dims(&g->nodes[out].out[0], s->out_rank, s->out_dims, "model output");
  char out_name[256];
  snprintf(out_name, sizeof out_name, "%s", g->nodes[out].name);
  append_loss(g, out);

  int64_t n_in = pcgc_ptensor_numel(&g->nodes[in].out[0]);
  int64_t n_out = pcgc_ptensor_numel(&g->nodes[out].out[0]);
  float *x = read_f32(s->dir, s->input_file, n_in);
  float *want = read_f32(s->dir, s->output_file, n_out);
  double *got = malloc((size_t)n_out * sizeof *got);
  ck_assert_ptr_nonnull(got);

  pcgc_ref_options o;
  pcgc_ref_options_default(&o);
  o.dtype = PCGC_F64;
  o.training = false;
  pcgc_error err = {0};
  pcgc_reference *r = pcgc_ref_new(g, &o, &err);
  ck_assert_msg(r != NULL, "%s: pcgc_ref_new: %s", s->model, err.message);
  ck_assert_int_eq(pcgc_ref_set(r, s->input_name, PCGC_F32, x, n_in, &err), PCGC_OK);
  double loss;
  ck_assert_msg(pcgc_ref_forward(r, &loss, &err) == PCGC_OK, "%s: forward: %s", s->model, err.message);
  ck_assert_int_eq(pcgc_ref_get(r, out_name, PCGC_F64, got, n_out, &err), PCGC_OK);
  double e = rel_error(got, want, n_out);
  fprintf(stderr, "%-16s forward (f64) vs PyTorch: max error %.3g of the output's scale (%lld values)\n",
          s->model, e, (long long)n_out);
  ck_assert_msg(e <= FORWARD_TOL, "%s: output '%s' differs from PyTorch's by %.3g (tolerance %g)", s->model,
                out_name, e, FORWARD_TOL);
  pcgc_ref_free(r);
  free(x);
  free(want);
  free(got);
  pcgc_graph_free(g);
}

/* The initializer's pcgc name: bytes other than [A-Za-z0-9_.] become '_'
 * (onnx/ sanitizes names for the model format; the initializers of the
 * committed models only need this much). */
static void pcgc_name_of(const char *onnx_name, char *out, size_t n) {
  size_t k = 0;
  for (; onnx_name[k] && k + 1 < n; k++) {
    char ch = onnx_name[k];
    bool word = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                ch == '.';
    out[k] = word ? ch : '_';
  }
  out[k] = '\0';
}

/* The weight node the importer made from initializer `si`. */
static const pcgc_node *init_weight(const model_side *s, const pcgc_graph *g, const side_init *si) {
  char name[256];
  pcgc_name_of(si->name, name, sizeof name);
  int id = pcgc_graph_find(g, name);
  ck_assert_msg(id >= 0, "%s: no weight '%s' for initializer '%s'", s->model, name, si->name);
  const pcgc_node *n = &g->nodes[id];
  ck_assert_msg(n->kind == PCGC_OP_WEIGHT, "%s: '%s' is a %s, not a weight", s->model, name, pcgc_op_name(n->kind));
  ck_assert_msg(n->value != NULL, "%s: weight '%s' has no value", s->model, name);
  ck_assert_int_eq(pcgc_ptensor_numel(&n->out[0]), si->numel);
  return n;
}

/* Every float initializer of a small model (values in MODEL.init.f32) is a
 * weight of the same name holding its floats exactly: in the same shape,
 * or, for the B of a Gemm with transB=1 ("transposed" in the sidecar), as
 * the transposed matrix. */
static void check_values(const model_side *s, const pcgc_graph *g) {
  ck_assert_int_gt(s->n_inits, 0);
  ck_assert_msg(s->init_file[0], "%s has no init file", s->model);
  int64_t total = s->inits[s->n_inits - 1].offset + s->inits[s->n_inits - 1].numel;
  float *all = read_f32(s->dir, s->init_file, total);
  for (int k = 0; k < s->n_inits; k++) {
    const side_init *si = &s->inits[k];
    const float *want = all + si->offset;
    const pcgc_node *n = init_weight(s, g, si);
    int64_t want_dims[PCGC_MAX_RANK];
    for (int d = 0; d < si->rank; d++) want_dims[d] = si->dims[si->transposed ? si->rank - 1 - d : d];
    ck_assert_msg(!si->transposed || si->rank == 2, "%s: transposed '%s' is not 2-D", s->model, n->name);
    /* a per-channel scale or bias ([C], as InstanceNormalization takes it) is
     * held as [C, 1, ...] to broadcast over the spatial dims */
    int rank = n->out[0].rank > si->rank && !si->transposed ? n->out[0].rank : si->rank;
    for (int d = si->rank; d < rank; d++) want_dims[d] = 1;
    assert_dims(&n->out[0], rank, want_dims, n->name);
    int64_t rows = si->transposed ? si->dims[0] : 1, cols = si->transposed ? si->dims[1] : si->numel;
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++) {
        float got = si->transposed ? n->value[j * rows + i] : n->value[j];
        ck_assert_msg(got == want[i * cols + j], "%s: weight '%s' holds %.9g where the initializer%s has %.9g "
                      "(element %lld, %lld)", s->model, n->name, got, si->transposed ? " (transposed)" : "",
                      want[i * cols + j], (long long)i, (long long)j);
      }
  }
  free(all);
}

/* Every initializer that is a PyTorch parameter is a weight of its name
 * with its element count and the same sum of values (any model: a sum
 * does not depend on the layout, and needs no copy of the values).
 * Returns how many were checked. */
static int check_value_sums(const model_side *s, const pcgc_graph *g) {
  int checked = 0;
  for (int k = 0; k < s->n_inits; k++) {
    const side_init *si = &s->inits[k];
    if (!si->parameter) continue;
    const pcgc_node *n = init_weight(s, g, si);
    double sum = 0;
    for (int64_t e = 0; e < si->numel; e++) sum += n->value[e];
    ck_assert_msg(fabs(sum - si->sum) <= 1e-9 * si->sum_abs + 1e-300, "%s: weight '%s' sums to %.17g, the "
                  "initializer to %.17g", s->model, n->name, sum, si->sum);
    checked++;
  }
  return checked;
}

#endif
