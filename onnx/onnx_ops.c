/*
 * onnx_ops.c — the operator mapping: one ONNX node becomes pcgc nodes.
 *
 * Each converter reads the node's attributes (with ONNX's defaults for the
 * node's opset), checks that the values are ones pcgc can express (an
 * error names the attribute otherwise), and emits the pcgc operators.
 * Constant operands become weight nodes when they are consumed as tensors,
 * except one-element constants of elementwise arithmetic, which become the
 * `scalar` of scalar_add/sub/mul/div. Two small fusions happen here as
 * well: a Linear's bias (MatMul or Gemm without C followed by an Add of a
 * constant [N]) joins the linear node, and a zero Pad in front of an
 * AveragePool or Conv becomes their padding (pcgc's average pooling counts
 * padded zeros, like count_include_pad=1).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "onnx_internal.h"

#define TRY(x) do { pcgc_status s_ = (x); if (s_ != PCGC_OK) return s_; } while (0)

typedef pcgc_status (*convert_fn)(onnx_ctx *c);

static const char *op(onnx_ctx *c) { return c->cur->op_type; }

static pcgc_status need_in(onnx_ctx *c, int i, onnx_value **v) {
  TRY(pcgc__onnx_input(c, i, v));
  if (!*v) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "%s needs input %d", op(c), i);
  return PCGC_OK;
}

/* The pcgc tensor of input i (a constant becomes a weight). */
static pcgc_status in_ref(onnx_ctx *c, int i, pcgc_ref *r) {
  onnx_value *v;
  TRY(need_in(c, i, &v));
  return pcgc__onnx_tensor_ref(c, v, 0, NULL, r);
}

static const pcgc_ptensor *type_of(onnx_ctx *c, pcgc_ref r) { return pcgc__onnx_type(c, r); }

/* Emits a one-output node and defines output 0 of the ONNX node as it. */
static pcgc_status emit_out(onnx_ctx *c, pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_ref *in) {
  int node;
  TRY(pcgc__onnx_emit(c, k, NULL, a, n_in, in, &node));
  return pcgc__onnx_def_act(c, 0, (pcgc_ref){node, 0});
}

static pcgc_status emit_ref(onnx_ctx *c, pcgc_op_kind k, const char *suffix, const pcgc_attrs *a, int n_in,
                            const pcgc_ref *in, pcgc_ref *out) {
  int node;
  TRY(pcgc__onnx_emit(c, k, suffix, a, n_in, in, &node));
  *out = (pcgc_ref){node, 0};
  return PCGC_OK;
}

static pcgc_status bad_attr(onnx_ctx *c, const char *name, const char *value, const char *why) {
  return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "attribute %s=%s is not supported%s%s", name, value,
                         why ? ": " : "", why ? why : "");
}

/* One-element constant: its value. */
static bool scalar_of(onnx_ctx *c, onnx_value *v, double *out, pcgc_status *s) {
  *s = PCGC_OK;
  if (v->kind != OV_CONST) return false;
  onnx_tensor *t;
  if ((*s = pcgc__onnx_const(c, v, &t)) != PCGC_OK || t->numel != 1) return false;
  *out = pcgc__onnx_get_f(t, 0);
  return true;
}

static int norm_axis(int64_t a, int rank) { return (int)(a < 0 ? a + rank : a); }

static pcgc_status take(onnx_ctx *c, pcgc_ref x, int axis, int64_t start, int64_t count, const char *suffix,
                        pcgc_ref *out);

/* ------------------------------------------------------------ elementwise */

static pcgc_status conv_unary(onnx_ctx *c) {
  static const struct { const char *name; pcgc_op_kind k; } map[] = {
      {"Relu", PCGC_OP_RELU}, {"Sigmoid", PCGC_OP_SIGMOID}, {"Tanh", PCGC_OP_TANH}, {"Exp", PCGC_OP_EXP},
      {"Gelu", PCGC_OP_GELU}, {"Identity", PCGC_OP_IDENTITY}, {"HardSwish", PCGC_OP_HARDSWISH},
      {"HardSigmoid", PCGC_OP_HARDSIGMOID}, {"LeakyRelu", PCGC_OP_LEAKY_RELU},
  };
  pcgc_op_kind k = PCGC_OP_IDENTITY;
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(op(c), map[i].name) == 0) k = map[i].k;
  pcgc_attrs a;
  pcgc_attrs_init(&a, k);
  if (k == PCGC_OP_GELU) {
    const char *approx;
    TRY(pcgc__onnx_attr_string(c, "approximate", "none", &approx));
    if (strcmp(approx, "none") != 0 && strcmp(approx, "tanh") != 0) return bad_attr(c, "approximate", approx, NULL);
    pcgc_attrs_set_int(&a, "approximate", strcmp(approx, "tanh") == 0);
  }
  if (k == PCGC_OP_LEAKY_RELU) {
    double alpha;
    TRY(pcgc__onnx_attr_float(c, "alpha", 0.01, &alpha));
    pcgc_attrs_set_float(&a, "alpha", alpha);
  }
  if (k == PCGC_OP_HARDSIGMOID) { /* ONNX's alpha x + beta, clamped: PyTorch's is alpha 1/6, beta 1/2 */
    double alpha, beta;
    TRY(pcgc__onnx_attr_float(c, "alpha", 0.2, &alpha));
    TRY(pcgc__onnx_attr_float(c, "beta", 0.5, &beta));
    if (fabs(alpha - 1.0 / 6) > 1e-6 || fabs(beta - 0.5) > 1e-6) {
      char v[64];
      snprintf(v, sizeof v, "%g (beta=%g)", alpha, beta);
      return bad_attr(c, "alpha", v, "pcgc's hardsigmoid is PyTorch's, alpha=1/6 and beta=0.5");
    }
  }
  pcgc_ref x;
  TRY(in_ref(c, 0, &x));
  return emit_out(c, k, &a, 1, &x);
}

/* Clip with constant bounds: [0, 6] is relu6 (MobileNet's, as torch exports
 * F.relu6), [0, +inf) relu, no bound at all nothing, anything else clip
 * (an absent bound is clip's default, none). The bounds are attributes
 * below opset 11, constant inputs from it. */
static pcgc_status conv_clip(onnx_ctx *c) {
  double lo = -INFINITY, hi = INFINITY;
  if (c->opset < 11) {
    TRY(pcgc__onnx_attr_float(c, "min", -INFINITY, &lo));
    TRY(pcgc__onnx_attr_float(c, "max", INFINITY, &hi));
  } else {
    for (int i = 1; i <= 2 && (size_t)i < c->cur->n_input; i++) {
      onnx_value *v;
      TRY(pcgc__onnx_input(c, i, &v));
      if (!v) continue; /* an empty name: that bound is absent */
      pcgc_status s;
      double b;
      if (!scalar_of(c, v, &b, &s)) {
        TRY(s);
        pcgc_status st = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Clip's %s bound must be a one-element "
                                         "constant", i == 1 ? "min" : "max");
        pcgc_error_hint(c->err, "pcgc's clip takes its bounds as attributes; a bound computed at run time "
                        "has no pcgc operator");
        return st;
      }
      *(i == 1 ? &lo : &hi) = b;
    }
  }
  if (lo != lo || hi != hi) return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Clip with a NaN bound");
  pcgc_ref x;
  TRY(in_ref(c, 0, &x));
  pcgc_attrs a;
  if (lo == 0 && hi == 6) {
    pcgc_attrs_init(&a, PCGC_OP_RELU6);
    return emit_out(c, PCGC_OP_RELU6, &a, 1, &x);
  }
  if (lo == 0 && hi == INFINITY) {
    pcgc_attrs_init(&a, PCGC_OP_RELU);
    return emit_out(c, PCGC_OP_RELU, &a, 1, &x);
  }
  if (lo == -INFINITY && hi == INFINITY) return emit_out(c, PCGC_OP_IDENTITY, NULL, 1, &x);
  pcgc_attrs_init(&a, PCGC_OP_CLIP);
  if (lo > -INFINITY) pcgc_attrs_set_float(&a, "min", lo);
  if (hi < INFINITY) pcgc_attrs_set_float(&a, "max", hi);
  return emit_out(c, PCGC_OP_CLIP, &a, 1, &x);
}

static pcgc_status emit_scalar(onnx_ctx *c, pcgc_op_kind k, const char *suffix, pcgc_ref x, double s,
                               pcgc_ref *out) {
  pcgc_attrs a;
  pcgc_attrs_init(&a, k);
  pcgc_attrs_set_float(&a, "scalar", s);
  return emit_ref(c, k, suffix, &a, 1, &x, out);
}

static pcgc_status emit_pow(onnx_ctx *c, const char *suffix, pcgc_ref x, double e, pcgc_ref *out) {
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_POW);
  pcgc_attrs_set_float(&a, "exponent", e);
  return emit_ref(c, PCGC_OP_POW, suffix, &a, 1, &x, out);
}

static pcgc_status conv_neg(onnx_ctx *c) {
  pcgc_ref x, y;
  TRY(in_ref(c, 0, &x));
  TRY(emit_scalar(c, PCGC_OP_SCALAR_MUL, NULL, x, -1.0, &y));
  return pcgc__onnx_def_act(c, 0, y);
}

/* Rank of a value (constants: their own; tensors: their type's). */
static int rank_of(onnx_ctx *c, onnx_value *v) {
  if (v->kind == OV_CONST) {
    onnx_tensor *t;
    return pcgc__onnx_const(c, v, &t) == PCGC_OK ? t->rank : 0;
  }
  const pcgc_ptensor *t = type_of(c, v->ref);
  return t ? t->rank : 0;
}

static pcgc_status conv_binary(onnx_ctx *c) {
  static const struct { const char *name; pcgc_op_kind k, scalar; } map[] = {
      {"Add", PCGC_OP_ADD, PCGC_OP_SCALAR_ADD}, {"Sub", PCGC_OP_SUB, PCGC_OP_SCALAR_SUB},
      {"Mul", PCGC_OP_MUL, PCGC_OP_SCALAR_MUL}, {"Div", PCGC_OP_DIV, PCGC_OP_SCALAR_DIV},
  };
  size_t m = 0;
  while (strcmp(op(c), map[m].name) != 0) m++;
  onnx_value *a, *b;
  TRY(need_in(c, 0, &a));
  TRY(need_in(c, 1, &b));
  double v;
  /* x op scalar, scalar op x: a scalar_* node (when it does not raise x's rank) */
  for (int side = 1; side >= 0; side--) {
    onnx_value *k = side ? b : a, *x = side ? a : b;
    pcgc_status s = PCGC_OK;
    if (x->kind == OV_CONST || !scalar_of(c, k, &v, &s) || rank_of(c, k) > rank_of(c, x)) {
      if (s != PCGC_OK) return s;
      continue;
    }
    pcgc_ref xr, y;
    TRY(pcgc__onnx_tensor_ref(c, x, 0, NULL, &xr));
    if (side || map[m].k == PCGC_OP_ADD || map[m].k == PCGC_OP_MUL) {
      TRY(emit_scalar(c, map[m].scalar, NULL, xr, v, &y));
    } else if (map[m].k == PCGC_OP_SUB) { /* s - x = (-x) + s */
      pcgc_ref neg;
      TRY(emit_scalar(c, PCGC_OP_SCALAR_MUL, ".neg", xr, -1.0, &neg));
      TRY(emit_scalar(c, PCGC_OP_SCALAR_ADD, NULL, neg, v, &y));
    } else { /* s / x = pow(x, -1), times s unless it is 1 */
      if (v == 1) {
        TRY(emit_pow(c, NULL, xr, -1, &y));
      } else {
        pcgc_ref r;
        TRY(emit_pow(c, ".reciprocal", xr, -1, &r));
        TRY(emit_scalar(c, PCGC_OP_SCALAR_MUL, NULL, r, v, &y));
      }
    }
    return pcgc__onnx_def_act(c, 0, y);
  }
  pcgc_ref in[2];
  TRY(pcgc__onnx_tensor_ref(c, a, 0, NULL, &in[0]));
  TRY(pcgc__onnx_tensor_ref(c, b, 0, NULL, &in[1]));
  return emit_out(c, map[m].k, NULL, 2, in);
}

/* Pow by a constant: 1 is nothing, 2 a mul of x by itself (what the layer
 * and RMS norm patterns expect), anything else pow; Sqrt is pow 0.5,
 * Reciprocal pow -1. */
static pcgc_status conv_pow(onnx_ctx *c) {
  onnx_value *e;
  pcgc_ref x, in[2], y;
  TRY(in_ref(c, 0, &x));
  double v;
  if (strcmp(op(c), "Sqrt") == 0) {
    v = 0.5;
  } else if (strcmp(op(c), "Reciprocal") == 0) {
    v = -1;
  } else {
    TRY(need_in(c, 1, &e));
    pcgc_status s;
    if (!scalar_of(c, e, &v, &s)) {
      if (s != PCGC_OK) return s;
      s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Pow with a tensor exponent is not supported");
      pcgc_error_hint(c->err, "pcgc's pow raises to a constant exponent (an attribute)");
      return s;
    }
    if (!isfinite(v)) return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Pow with exponent %g is not supported", v);
  }
  if (v == 1) return emit_out(c, PCGC_OP_IDENTITY, NULL, 1, &x);
  if (v == 2) {
    in[0] = in[1] = x;
    return emit_out(c, PCGC_OP_MUL, NULL, 2, in);
  }
  TRY(emit_pow(c, NULL, x, v, &y));
  return pcgc__onnx_def_act(c, 0, y);
}

static pcgc_status conv_softmax(onnx_ctx *c) {
  pcgc_ref x;
  TRY(in_ref(c, 0, &x));
  const pcgc_ptensor *t = type_of(c, x);
  int64_t axis;
  TRY(pcgc__onnx_attr_int(c, "axis", c->opset < 13 ? 1 : -1, &axis));
  if (axis < -t->rank || axis >= t->rank)
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)axis, t->rank);
  int a = norm_axis(axis, t->rank);
  pcgc_op_kind k = strcmp(op(c), "LogSoftmax") == 0 ? PCGC_OP_LOG_SOFTMAX : PCGC_OP_SOFTMAX;
  pcgc_attrs at;
  pcgc_attrs_init(&at, k);
  if (c->opset >= 13 || a == t->rank - 1) {
    pcgc_attrs_set_int(&at, "axis", a == t->rank - 1 ? -1 : a);
    return emit_out(c, k, &at, 1, &x);
  }
  /* opset < 13: softmax over all dims from `axis` on, as one flattened dim */
  pcgc_ref f, sm, y;
  pcgc_attrs fa, ra;
  pcgc_attrs_init(&fa, PCGC_OP_FLATTEN);
  pcgc_attrs_set_int(&fa, "axis", a);
  pcgc_attrs_set_int(&at, "axis", -1);
  pcgc_attrs_init(&ra, PCGC_OP_RESHAPE);
  pcgc_attrs_set_ints(&ra, "shape", t->rank, t->dims);
  TRY(emit_ref(c, PCGC_OP_FLATTEN, ".flat", &fa, 1, &x, &f));
  TRY(emit_ref(c, k, NULL, &at, 1, &f, &sm));
  TRY(emit_ref(c, PCGC_OP_RESHAPE, ".unflat", &ra, 1, &sm, &y));
  return pcgc__onnx_def_act(c, 0, y);
}

static pcgc_status conv_dropout(onnx_ctx *c) {
  pcgc_ref x;
  TRY(in_ref(c, 0, &x));
  double rate = 0.5;
  if (c->opset < 12) {
    TRY(pcgc__onnx_attr_float(c, "ratio", 0.5, &rate));
  } else {
    onnx_value *r;
    pcgc_status s;
    TRY(pcgc__onnx_input(c, 1, &r));
    if (r && !scalar_of(c, r, &rate, &s)) {
      if (s != PCGC_OK) return s;
      return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "the dropout ratio must be a constant");
    }
    rate = pcgc__onnx_nice_float((float)rate);
  }
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_DROPOUT);
  pcgc_attrs_set_float(&a, "rate", rate);
  TRY(emit_out(c, PCGC_OP_DROPOUT, &a, 1, &x));
  return pcgc__onnx_drop_outputs(c, 1, "the dropout mask");
}

/* ------------------------------------------------------------ dense algebra */

/* When `out` (the current node's output) feeds only an Add of a constant
 * [n], that Add is the bias: its ref and the Add's index. */
static pcgc_status find_bias(onnx_ctx *c, const char *out, int64_t n, pcgc_ref *bias, int *add) {
  *add = -1;
  onnx_value *v = pcgc__onnx_value(c, out);
  if (!v || v->n_users != 1 || v->users[0] < 0) return PCGC_OK;
  int u = v->users[0];
  const Onnx__NodeProto *an = c->gp->node[u];
  if (c->fused[u].kind != OF_NONE || strcmp(pcgc__onnx_str(an->op_type), "Add") != 0 ||
      (an->domain && an->domain[0]) || an->n_input != 2)
    return PCGC_OK;
  const char *i0 = pcgc__onnx_str(an->input[0]), *i1 = pcgc__onnx_str(an->input[1]);
  const char *other = strcmp(i0, out) == 0 ? i1 : i0;
  onnx_value *b = pcgc__onnx_value(c, other);
  if (!b || b->kind != OV_CONST || strcmp(other, out) == 0) return PCGC_OK;
  onnx_tensor *t;
  TRY(pcgc__onnx_const(c, b, &t));
  if (t->rank != 1 || t->dims[0] != n || !pcgc__onnx_type_is_float(t->type)) return PCGC_OK;
  TRY(pcgc__onnx_tensor_ref(c, b, 0, NULL, bias));
  *add = u;
  return PCGC_OK;
}

/* linear(x, w [, bias]); a following Add of a constant [N] becomes the bias. */
static pcgc_status emit_linear(onnx_ctx *c, pcgc_ref x, pcgc_ref w, const pcgc_ref *bias) {
  pcgc_ref in[3] = {x, w, {0, 0}};
  int add = -1;
  if (bias) {
    in[2] = *bias;
  } else if (c->cur->n_output >= 1 && c->cur->output[0]) {
    TRY(find_bias(c, c->cur->output[0], type_of(c, w)->dims[1], &in[2], &add));
  }
  pcgc_ref y;
  TRY(emit_ref(c, PCGC_OP_LINEAR, NULL, NULL, bias || add >= 0 ? 3 : 2, in, &y));
  if (add < 0) return pcgc__onnx_def_act(c, 0, y);
  const Onnx__NodeProto *cur = c->cur;
  c->cur = c->gp->node[add];
  c->fused[add].kind = OF_SKIP;
  pcgc_status s = pcgc__onnx_def_act(c, 0, y);
  c->cur = cur;
  return s;
}

/* matmul / batch_matmul of two tensors, following ONNX MatMul's shapes. */
static pcgc_status emit_matmul(onnx_ctx *c, pcgc_ref a, pcgc_ref b, const char *suffix, pcgc_ref *out) {
  const pcgc_ptensor *ta = type_of(c, a), *tb = type_of(c, b);
  pcgc_ref in[2] = {a, b};
  if (tb->rank == 2 && ta->rank >= 1) return emit_ref(c, PCGC_OP_MATMUL, suffix, NULL, 2, in, out);
  if (ta->rank == tb->rank && ta->rank >= 3) return emit_ref(c, PCGC_OP_BATCH_MATMUL, suffix, NULL, 2, in, out);
  pcgc_status s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "MatMul of a rank-%d and a rank-%d tensor is not "
                                  "supported", ta->rank, tb->rank);
  pcgc_error_hint(c->err, "pcgc multiplies [..., K] by [K, N] (matmul) or [..., M, K] by [..., K, N] with equal "
                  "leading dims (batch_matmul)");
  return s;
}

static pcgc_status conv_matmul(onnx_ctx *c) {
  onnx_value *a, *b;
  TRY(need_in(c, 0, &a));
  TRY(need_in(c, 1, &b));
  pcgc_ref ar, br, y;
  TRY(pcgc__onnx_tensor_ref(c, a, 0, NULL, &ar));
  if (b->kind == OV_CONST && rank_of(c, b) == 2 && type_of(c, ar)->rank >= 1) {
    TRY(pcgc__onnx_tensor_ref(c, b, 0, NULL, &br)); /* already [K, N] */
    return emit_linear(c, ar, br, NULL);
  }
  TRY(pcgc__onnx_tensor_ref(c, b, 0, NULL, &br));
  TRY(emit_matmul(c, ar, br, NULL, &y));
  return pcgc__onnx_def_act(c, 0, y);
}

static pcgc_status conv_gemm(onnx_ctx *c) {
  double alpha, beta;
  int64_t ta, tb;
  TRY(pcgc__onnx_attr_float(c, "alpha", 1.0, &alpha));
  TRY(pcgc__onnx_attr_float(c, "beta", 1.0, &beta));
  TRY(pcgc__onnx_attr_int(c, "transA", 0, &ta));
  TRY(pcgc__onnx_attr_int(c, "transB", 0, &tb));
  char buf[32];
  snprintf(buf, sizeof buf, "%g", alpha);
  if (alpha != 1) return bad_attr(c, "alpha", buf, "only 1");
  snprintf(buf, sizeof buf, "%lld", (long long)ta);
  if (ta != 0) return bad_attr(c, "transA", buf, "only 0");
  snprintf(buf, sizeof buf, "%lld", (long long)tb);
  if (tb != 0 && tb != 1) return bad_attr(c, "transB", buf, NULL);
  onnx_value *a, *b, *cv;
  pcgc_ref ar, br, y;
  TRY(need_in(c, 0, &a));
  TRY(need_in(c, 1, &b));
  TRY(pcgc__onnx_input(c, 2, &cv));
  snprintf(buf, sizeof buf, "%g", beta);
  if (cv && beta != 1) return bad_attr(c, "beta", buf, "only 1");
  TRY(pcgc__onnx_tensor_ref(c, a, 0, NULL, &ar));
  if (type_of(c, ar)->rank != 2)
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Gemm's A must have rank 2, not %d", type_of(c, ar)->rank);
  if (b->kind == OV_CONST) { /* linear: the weight in pcgc's [K, N] layout */
    onnx_tensor *t;
    TRY(pcgc__onnx_const(c, b, &t));
    if (t->rank != 2) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Gemm's B must have rank 2, not %d", t->rank);
    if (tb) {
      onnx_tensor *w;
      int node;
      TRY(pcgc__onnx_transpose(c, t, NULL, &w));
      TRY(pcgc__onnx_weight(c, w, w->origin ? w->origin : b->name, 0, NULL, &node));
      br = (pcgc_ref){node, 0};
    } else {
      TRY(pcgc__onnx_tensor_ref(c, b, 0, NULL, &br));
    }
    int64_t n = type_of(c, br)->dims[1];
    onnx_tensor *ct = NULL;
    if (cv && cv->kind == OV_CONST) TRY(pcgc__onnx_const(c, cv, &ct));
    if (!cv) return emit_linear(c, ar, br, NULL);
    if (ct && ct->numel == n && (ct->rank == 1 || (ct->rank == 2 && ct->dims[0] == 1))) {
      pcgc_ref bias;
      TRY(pcgc__onnx_tensor_ref(c, cv, 1, &n, &bias));
      return emit_linear(c, ar, br, &bias);
    }
    pcgc_ref in[2] = {ar, br};
    TRY(emit_ref(c, PCGC_OP_LINEAR, ".linear", NULL, 2, in, &y));
  } else {
    TRY(pcgc__onnx_tensor_ref(c, b, 0, NULL, &br));
    if (tb) {
      pcgc_attrs at;
      pcgc_attrs_init(&at, PCGC_OP_TRANSPOSE);
      pcgc_attrs_set_ints(&at, "perm", 2, (int64_t[]){1, 0});
      TRY(emit_ref(c, PCGC_OP_TRANSPOSE, ".transB", &at, 1, &br, &br));
    }
    TRY(emit_matmul(c, ar, br, cv ? ".matmul" : NULL, &y));
    if (!cv) return pcgc__onnx_def_act(c, 0, y);
  }
  pcgc_ref in[2] = {y, {0, 0}};
  TRY(pcgc__onnx_tensor_ref(c, cv, 0, NULL, &in[1]));
  return emit_out(c, PCGC_OP_ADD, NULL, 2, in);
}

/* --------------------------------------------------------- convolutions */

/* The symmetric padding of a 2-D window op from pads/auto_pad; `in` the
 * input's spatial sizes, `k` the (dilated) window sizes. */
static pcgc_status window_pads(onnx_ctx *c, const int64_t *in, const int64_t *k, const int64_t *stride,
                               int64_t *pad) {
  const char *auto_pad;
  int64_t p[4];
  int n;
  TRY(pcgc__onnx_attr_string(c, "auto_pad", "NOTSET", &auto_pad));
  TRY(pcgc__onnx_attr_ints(c, "pads", 4, p, &n));
  pad[0] = pad[1] = 0;
  if (strcmp(auto_pad, "VALID") == 0) return PCGC_OK;
  if (strcmp(auto_pad, "SAME_UPPER") == 0 || strcmp(auto_pad, "SAME_LOWER") == 0) {
    for (int i = 0; i < 2; i++) {
      int64_t out = (in[i] + stride[i] - 1) / stride[i];
      int64_t total = (out - 1) * stride[i] + k[i] - in[i];
      if (total < 0) total = 0;
      if (total % 2) return bad_attr(c, "auto_pad", auto_pad, "it pads asymmetrically here, and pcgc pads "
                                     "both sides equally");
      pad[i] = total / 2;
    }
    return PCGC_OK;
  }
  if (strcmp(auto_pad, "NOTSET") != 0) return bad_attr(c, "auto_pad", auto_pad, NULL);
  if (n < 0) return PCGC_OK;
  if (n != 4) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "pads has %d values; a 2-D window takes 4", n);
  for (int i = 0; i < 2; i++) {
    if (p[i] != p[i + 2]) {
      char buf[96];
      snprintf(buf, sizeof buf, "[%lld, %lld, %lld, %lld]", (long long)p[0], (long long)p[1], (long long)p[2],
               (long long)p[3]);
      pcgc_status s = bad_attr(c, "pads", buf, "padding must be symmetric (begin == end)");
      pcgc_error_hint(c->err, "pcgc's conv2d and pool2d pad both sides of a dim equally");
      return s;
    }
    if (p[i] < 0) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "negative padding");
    pad[i] = p[i];
  }
  return PCGC_OK;
}

static pcgc_status ints2(onnx_ctx *c, const char *name, int64_t *v) {
  int n;
  v[0] = v[1] = 1;
  TRY(pcgc__onnx_attr_ints(c, name, 2, v, &n));
  if (n >= 0 && n != 2) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "%s must have 2 values, has %d", name, n);
  if (n < 0) v[0] = v[1] = 1;
  return PCGC_OK;
}

/* The data input of a window op, absorbing a folded Pad. */
static pcgc_status window_input(onnx_ctx *c, pcgc_ref *x, int64_t *extra_pad) {
  onnx_value *v;
  TRY(need_in(c, 0, &v));
  extra_pad[0] = extra_pad[1] = 0;
  if (v->kind == OV_PADDED) {
    *x = v->ref;
    extra_pad[0] = v->pad[0];
    extra_pad[1] = v->pad[1];
  } else {
    TRY(pcgc__onnx_tensor_ref(c, v, 0, NULL, x));
  }
  const pcgc_ptensor *t = type_of(c, *x);
  if (t->rank != 4) {
    pcgc_status s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "%s over a rank-%d input is not supported", op(c),
                                    t->rank);
    pcgc_error_hint(c->err, "pcgc has 2-D convolution and pooling only ([N, C, H, W] inputs)");
    return s;
  }
  return PCGC_OK;
}

static pcgc_status conv_conv(onnx_ctx *c) {
  pcgc_ref x, in[3];
  int64_t extra[2], stride[2], dil[2], pad[2], group;
  TRY(window_input(c, &x, extra));
  TRY(in_ref(c, 1, &in[1]));
  onnx_value *bv;
  TRY(pcgc__onnx_input(c, 2, &bv));
  const pcgc_ptensor *xt = type_of(c, x), *wt = type_of(c, in[1]);
  if (wt->rank != 4) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "the weight must have rank 4, not %d", wt->rank);
  TRY(ints2(c, "strides", stride));
  TRY(ints2(c, "dilations", dil));
  TRY(pcgc__onnx_attr_int(c, "group", 1, &group));
  int64_t ks[2], n;
  int nk;
  TRY(pcgc__onnx_attr_ints(c, "kernel_shape", 2, ks, &nk));
  if (nk >= 0 && (nk != 2 || ks[0] != wt->dims[2] || ks[1] != wt->dims[3]))
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "kernel_shape does not match the weight's kernel %lldx%lld",
                           (long long)wt->dims[2], (long long)wt->dims[3]);
  int64_t k[2] = {(wt->dims[2] - 1) * dil[0] + 1, (wt->dims[3] - 1) * dil[1] + 1};
  int64_t size[2] = {xt->dims[2] + 2 * extra[0], xt->dims[3] + 2 * extra[1]};
  TRY(window_pads(c, size, k, stride, pad));
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_CONV2D);
  pcgc_attrs_set_ints(&a, "stride", 2, stride);
  pcgc_attrs_set_ints(&a, "dilation", 2, dil);
  pcgc_attrs_set_ints(&a, "padding", 2, (int64_t[]){pad[0] + extra[0], pad[1] + extra[1]});
  pcgc_attrs_set_int(&a, "groups", group);
  in[0] = x;
  n = 2;
  if (bv) TRY(pcgc__onnx_tensor_ref(c, bv, 0, NULL, &in[n++]));
  return emit_out(c, PCGC_OP_CONV2D, &a, (int)n, in);
}

static pcgc_status conv_pool(onnx_ctx *c) {
  bool is_max = strcmp(op(c), "MaxPool") == 0;
  pcgc_ref x;
  int64_t extra[2], stride[2], dil[2], k[2], pad[2], ceil_mode, include_pad;
  int nk;
  TRY(window_input(c, &x, extra));
  TRY(pcgc__onnx_attr_ints(c, "kernel_shape", 2, k, &nk));
  if (nk != 2) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "kernel_shape must have 2 values");
  TRY(ints2(c, "strides", stride));
  TRY(ints2(c, "dilations", dil));
  if (dil[0] != 1 || dil[1] != 1) return bad_attr(c, "dilations", "!= 1", "pcgc's pooling is not dilated");
  TRY(pcgc__onnx_attr_int(c, "ceil_mode", 0, &ceil_mode));
  TRY(pcgc__onnx_attr_int(c, "count_include_pad", 0, &include_pad));
  const pcgc_ptensor *xt = type_of(c, x);
  int64_t size[2] = {xt->dims[2] + 2 * extra[0], xt->dims[3] + 2 * extra[1]};
  TRY(window_pads(c, size, k, stride, pad));
  if (!is_max && !include_pad && (pad[0] || pad[1])) {
    pcgc_status s = bad_attr(c, "count_include_pad", "0", "with padding, pcgc's average pooling divides by the "
                             "whole window (count_include_pad=1)");
    return s;
  }
  /* ceil_mode=1 where it adds a window: for max pooling, the input's last row (column)
   * repeated as often as that window reaches past the padded input. The window starts
   * inside the input, so it holds that row already and the copies change no maximum; the
   * gradient of a copy flows back to the row through the concat. PyTorch's ceil mode
   * exactly. Average pooling would divide differently: refused. */
  for (int i = 0; i < 2; i++) {
    pad[i] += extra[i];
    int64_t n = type_of(c, x)->dims[2 + i], span = n + 2 * pad[i] - k[i];
    if (!ceil_mode || stride[i] <= 0 || span <= 0 || span % stride[i] == 0) continue;
    int64_t last = span / stride[i] + 1; /* the added window's index */
    int64_t more = last * stride[i] + k[i] - (n + 2 * pad[i]);
    if (!is_max || last * stride[i] - pad[i] > n - 1 || more > PCGC_VARIADIC - 1)
      return bad_attr(c, "ceil_mode", "1", is_max ? "here the added window starts in the padding" :
                      "here it gives a larger output than ceil_mode=0, and pcgc's average pooling has no ceil "
                      "mode");
    pcgc_ref parts[PCGC_VARIADIC];
    parts[0] = x;
    TRY(take(c, x, 2 + i, n - 1, 1, i ? ".lastcol" : ".lastrow", &parts[1]));
    for (int64_t j = 2; j <= more; j++) parts[j] = parts[1];
    pcgc_attrs ca;
    pcgc_attrs_init(&ca, PCGC_OP_CONCAT);
    pcgc_attrs_set_int(&ca, "axis", 2 + i);
    TRY(emit_ref(c, PCGC_OP_CONCAT, i ? ".ceilcols" : ".ceilrows", &ca, (int)more + 1, parts, &x));
  }
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_POOL2D);
  pcgc_attrs_set_int(&a, "kind", is_max ? PCGC_POOL_MAX : PCGC_POOL_AVG);
  pcgc_attrs_set_ints(&a, "kernel", 2, k);
  pcgc_attrs_set_ints(&a, "stride", 2, stride);
  pcgc_attrs_set_ints(&a, "padding", 2, pad);
  TRY(emit_out(c, PCGC_OP_POOL2D, &a, 1, &x));
  return pcgc__onnx_drop_outputs(c, 1, "the max-pool indices");
}

static pcgc_status conv_global_pool(onnx_ctx *c) {
  pcgc_ref x;
  int64_t extra[2];
  TRY(window_input(c, &x, extra));
  if (extra[0] || extra[1]) return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "a padded global pooling");
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_POOL2D);
  pcgc_attrs_set_int(&a, "kind", strcmp(op(c), "GlobalMaxPool") == 0 ? PCGC_POOL_MAX : PCGC_POOL_AVG);
  pcgc_attrs_set_int(&a, "global", 1);
  return emit_out(c, PCGC_OP_POOL2D, &a, 1, &x);
}

/* A zero Pad of H and W feeding only an AveragePool or a Conv: their padding. */
static pcgc_status conv_pad(onnx_ctx *c) {
  pcgc_ref x;
  TRY(in_ref(c, 0, &x));
  const char *mode;
  TRY(pcgc__onnx_attr_string(c, "mode", "constant", &mode));
  if (strcmp(mode, "constant") != 0) return bad_attr(c, "mode", mode, "only constant (zero) padding");
  int64_t p[2 * PCGC_MAX_RANK];
  int n;
  double value = 0;
  if (c->opset < 11) {
    TRY(pcgc__onnx_attr_ints(c, "pads", 2 * PCGC_MAX_RANK, p, &n));
    TRY(pcgc__onnx_attr_float(c, "value", 0, &value));
  } else {
    onnx_value *pv, *vv, *av;
    pcgc_status s;
    TRY(need_in(c, 1, &pv));
    TRY(pcgc__onnx_const_ints(c, pv, "the pads", 2 * PCGC_MAX_RANK, p, &n));
    TRY(pcgc__onnx_input(c, 2, &vv));
    if (vv && !scalar_of(c, vv, &value, &s)) {
      if (s != PCGC_OK) return s;
      return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "the pad value must be a constant");
    }
    TRY(pcgc__onnx_input(c, 3, &av));
    if (av) return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Pad with axes is not supported");
  }
  const pcgc_ptensor *t = type_of(c, x);
  if (n != 2 * t->rank) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "pads has %d values for rank %d", n, t->rank);
  bool zero = true;
  for (int i = 0; i < n; i++) zero &= p[i] == 0;
  if (zero) return emit_out(c, PCGC_OP_IDENTITY, NULL, 1, &x);
  onnx_value *out = pcgc__onnx_value(c, c->cur->n_output ? c->cur->output[0] : NULL);
  const Onnx__NodeProto *user = out && out->n_users == 1 && out->users[0] >= 0 ? c->gp->node[out->users[0]] : NULL;
  const char *uop = user ? pcgc__onnx_str(user->op_type) : "";
  bool fits = t->rank == 4 && value == 0 && p[0] == 0 && p[1] == 0 && p[4] == 0 && p[5] == 0 && p[2] == p[6] &&
              p[3] == p[7] && p[2] >= 0 && p[3] >= 0 && (strcmp(uop, "AveragePool") == 0 || strcmp(uop, "Conv") == 0);
  if (!fits) {
    pcgc_status s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Pad is supported only as symmetric zero padding of "
                                    "H and W feeding one AveragePool or Conv");
    pcgc_error_hint(c->err, "pcgc has no pad operator; such a Pad becomes the padding of the pooling or convolution");
    return s;
  }
  return pcgc__onnx_def_padded(c, 0, x, (int64_t[]){p[2], p[3]});
}

/* --------------------------------------------------------- normalisation */

static pcgc_status conv_batchnorm(onnx_ctx *c) {
  pcgc_ref in[3];
  double eps, mom;
  int64_t spatial;
  TRY(in_ref(c, 0, &in[0]));
  TRY(in_ref(c, 1, &in[1]));
  TRY(in_ref(c, 2, &in[2]));
  TRY(pcgc__onnx_attr_float(c, "epsilon", 1e-5, &eps));
  TRY(pcgc__onnx_attr_float(c, "momentum", 0.9, &mom));
  TRY(pcgc__onnx_attr_int(c, "spatial", 1, &spatial));
  if (!spatial) return bad_attr(c, "spatial", "0", "pcgc normalises per channel");
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_BATCHNORM);
  pcgc_attrs_set_float(&a, "eps", eps);
  /* ONNX: running = running * momentum + batch * (1 - momentum); pcgc (like PyTorch) the other way */
  pcgc_attrs_set_float(&a, "momentum", pcgc__onnx_nice_float((float)(1.0 - mom)));
  TRY(emit_out(c, PCGC_OP_BATCHNORM, &a, 3, in));
  return pcgc__onnx_drop_outputs(c, 1, "a batch-norm statistic");
}

/* layernorm over the last `axes` dims of x, with optional scale and bias
 * constants (pcgc's layernorm takes both or neither, so a lone one becomes
 * a mul or add after it). */
/* Whether constant v can be the layernorm's scale or bias over `dims`. */
static bool fits(onnx_ctx *c, onnx_value *v, int axes, const int64_t *dims) {
  if (v->kind == OV_ACT) return true;
  onnx_tensor *t;
  if (v->kind != OV_CONST || pcgc__onnx_const(c, v, &t) != PCGC_OK || !pcgc__onnx_type_is_float(t->type))
    return false;
  int64_t n = 1;
  for (int d = 0; d < axes; d++) n *= dims[d];
  return t->numel == n;
}

/* layernorm over the last `axes` dims of x, with optional scale and bias
 * (pcgc's layernorm takes both or neither, so a lone one, or one that only
 * broadcasts, becomes a mul or add after it). */
/* Layer (kind LAYERNORM) or RMS normalisation over the last `axes` dims,
 * then the scale and bias (RMS: no bias): the operator's own where they
 * have the normalised dims' shape (layernorm: both), else a broadcasting
 * mul and add after it. */
static pcgc_status emit_norm(onnx_ctx *c, pcgc_op_kind kind, pcgc_ref x, int axes, double eps, onnx_value *scale,
                             onnx_value *bias) {
  const pcgc_ptensor *t = type_of(c, x);
  bool rms = kind == PCGC_OP_RMSNORM;
  if (axes < 1 || axes > t->rank)
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "%s norm over %d dims of a rank-%d tensor", rms ? "RMS" : "layer",
                           axes, t->rank);
  int64_t dims[PCGC_MAX_RANK];
  memcpy(dims, t->dims + (t->rank - axes), (size_t)axes * sizeof *dims);
  pcgc_attrs a;
  pcgc_attrs_init(&a, kind);
  pcgc_attrs_set_int(&a, "axes", axes);
  pcgc_attrs_set_float(&a, "eps", eps);
  pcgc_ref in[3] = {x}, y;
  if (scale && fits(c, scale, axes, dims) && (rms ? !bias : bias && fits(c, bias, axes, dims))) {
    TRY(pcgc__onnx_tensor_ref(c, scale, axes, dims, &in[1]));
    if (!rms) TRY(pcgc__onnx_tensor_ref(c, bias, axes, dims, &in[2]));
    return emit_out(c, kind, &a, rms ? 2 : 3, in);
  }
  if (!scale && !bias) return emit_out(c, kind, &a, 1, in);
  TRY(emit_ref(c, kind, ".norm", &a, 1, in, &y));
  for (int k = 0; k < 2; k++) {
    onnx_value *v = k ? bias : scale;
    if (!v) continue;
    in[0] = y;
    bool f = fits(c, v, axes, dims);
    TRY(pcgc__onnx_tensor_ref(c, v, f ? axes : 0, f ? dims : NULL, &in[1]));
    TRY(emit_ref(c, k ? PCGC_OP_ADD : PCGC_OP_MUL, k || !bias ? NULL : ".scale", NULL, 2, in, &y));
  }
  return pcgc__onnx_def_act(c, 0, y);
}

static pcgc_status conv_layernorm(onnx_ctx *c) {
  pcgc_ref x;
  onnx_value *scale, *bias;
  int64_t axis;
  double eps;
  TRY(in_ref(c, 0, &x));
  TRY(need_in(c, 1, &scale));
  TRY(pcgc__onnx_input(c, 2, &bias));
  TRY(pcgc__onnx_attr_int(c, "axis", -1, &axis));
  TRY(pcgc__onnx_attr_float(c, "epsilon", 1e-5, &eps));
  int r = type_of(c, x)->rank;
  if (axis < -r || axis >= r)
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)axis, r);
  TRY(emit_norm(c, PCGC_OP_LAYERNORM, x, r - norm_axis(axis, r), eps, scale, bias));
  return pcgc__onnx_drop_outputs(c, 1, "a layer-norm statistic");
}

/* Whether constant v is all `want` and was made by the exporter rather
 * than being an initializer (a parameter): the ones and zeros torch writes
 * as the InstanceNormalization scale and bias of a GroupNorm, which would
 * otherwise become weights PyTorch does not have. */
static bool made_constant(onnx_ctx *c, onnx_value *v, double want) {
  onnx_tensor *t;
  if (!v || v->kind != OV_CONST || pcgc__onnx_const(c, v, &t) != PCGC_OK || t->origin) return false;
  for (int64_t i = 0; i < t->numel; i++)
    if (pcgc__onnx_get_f(t, i) != want) return false;
  return true;
}

/* y * scale + bias per channel (dim 1 of y), scale and bias [C] (either may
 * be NULL) broadcast as [C, 1, ...]; an exporter's all-ones scale and
 * all-zeros bias are left out. */
static pcgc_status channel_affine(onnx_ctx *c, pcgc_ref y, onnx_value *scale, onnx_value *bias, pcgc_ref *out) {
  const pcgc_ptensor *t = type_of(c, y);
  int64_t shape[PCGC_MAX_RANK];
  shape[0] = t->dims[1];
  for (int d = 1; d < t->rank - 1; d++) shape[d] = 1;
  for (int k = 0; k < 2; k++) {
    onnx_value *v = k ? bias : scale;
    if (!v || made_constant(c, v, k ? 0 : 1)) continue;
    onnx_tensor *ct = NULL;
    if (v->kind == OV_CONST) TRY(pcgc__onnx_const(c, v, &ct));
    if (!ct || ct->numel != t->dims[1])
      return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "the %s must be a constant of %lld values (one per channel)",
                             k ? "bias" : "scale", (long long)t->dims[1]);
    pcgc_ref in[2] = {y, {0, 0}};
    TRY(pcgc__onnx_tensor_ref(c, v, t->rank - 1, shape, &in[1]));
    TRY(emit_ref(c, k ? PCGC_OP_ADD : PCGC_OP_MUL, k ? ".bias" : ".scale", NULL, 2, in, &y));
  }
  *out = y;
  return PCGC_OK;
}

/* InstanceNormalization: each (sample, channel) normalised over its
 * spatial dims, which is layernorm over the dims from 2 on, then the
 * per-channel scale and bias. torch writes GroupNorm as Reshape([N, G, -1])
 * -> InstanceNormalization (scale ones, bias zeros) -> Reshape -> Mul ->
 * Add, which this turns into reshape, layernorm, reshape, mul, add. */
static pcgc_status conv_instancenorm(onnx_ctx *c) {
  pcgc_ref x, y;
  onnx_value *scale, *bias;
  double eps;
  TRY(in_ref(c, 0, &x));
  TRY(pcgc__onnx_input(c, 1, &scale));
  TRY(pcgc__onnx_input(c, 2, &bias));
  TRY(pcgc__onnx_attr_float(c, "epsilon", 1e-5, &eps));
  int r = type_of(c, x)->rank;
  if (r < 3) {
    pcgc_status s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "InstanceNormalization of a rank-%d input", r);
    pcgc_error_hint(c->err, "the input is [N, C, D1, ...]: at least one dim to normalise over");
    return s;
  }
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_LAYERNORM);
  pcgc_attrs_set_int(&a, "axes", r - 2);
  pcgc_attrs_set_float(&a, "eps", pcgc__onnx_nice_float((float)eps));
  TRY(emit_ref(c, PCGC_OP_LAYERNORM, NULL, &a, 1, &x, &y));
  TRY(channel_affine(c, y, scale, bias, &y));
  return pcgc__onnx_def_act(c, 0, y);
}

/* GroupNormalization (opset 18): reshape to [N, G, rest], layernorm over
 * rest, then the scale and bias: per group ([G], opset 18) before the
 * reshape back, per channel ([C], opset 21) after it. */
static pcgc_status conv_groupnorm(onnx_ctx *c) {
  pcgc_ref x, y;
  onnx_value *scale, *bias;
  double eps;
  int64_t groups;
  TRY(in_ref(c, 0, &x));
  TRY(pcgc__onnx_input(c, 1, &scale));
  TRY(pcgc__onnx_input(c, 2, &bias));
  TRY(pcgc__onnx_attr_float(c, "epsilon", 1e-5, &eps));
  TRY(pcgc__onnx_attr_int(c, "num_groups", 0, &groups));
  const pcgc_ptensor *t = type_of(c, x);
  int r = t->rank;
  int64_t dims[PCGC_MAX_RANK], C = r >= 2 ? t->dims[1] : 0;
  memcpy(dims, t->dims, (size_t)r * sizeof *dims);
  if (r < 3 || groups < 1 || C % groups)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "GroupNormalization of %lld groups over a rank-%d input "
                           "of %lld channels", (long long)groups, r, (long long)C);
  pcgc_attrs ra, la;
  pcgc_attrs_init(&ra, PCGC_OP_RESHAPE);
  pcgc_attrs_set_ints(&ra, "shape", 3, (int64_t[]){dims[0], groups, -1});
  TRY(emit_ref(c, PCGC_OP_RESHAPE, ".groups", &ra, 1, &x, &y));
  pcgc_attrs_init(&la, PCGC_OP_LAYERNORM);
  pcgc_attrs_set_float(&la, "eps", pcgc__onnx_nice_float((float)eps));
  TRY(emit_ref(c, PCGC_OP_LAYERNORM, ".norm", &la, 1, &y, &y));
  onnx_tensor *st = NULL;
  if (scale && scale->kind == OV_CONST) TRY(pcgc__onnx_const(c, scale, &st));
  bool per_group = st && st->numel == groups && groups != C;
  if (per_group) TRY(channel_affine(c, y, scale, bias, &y));
  pcgc_attrs_init(&ra, PCGC_OP_RESHAPE);
  pcgc_attrs_set_ints(&ra, "shape", r, dims);
  TRY(emit_ref(c, PCGC_OP_RESHAPE, per_group ? NULL : ".ungroup", &ra, 1, &y, &y));
  if (!per_group) TRY(channel_affine(c, y, scale, bias, &y));
  return pcgc__onnx_def_act(c, 0, y);
}

/* ---------------------------------------------------------------- masking */

/* Where(cond, x, -inf) (or Where(cond, -inf, x)) with a constant cond that
 * keeps, in every matrix of the last two dims, the elements on and below a
 * diagonal (column <= row + offset): a causal attention mask, as
 * masked_fill(mask, -inf) exports. Returns the offset, or false when cond
 * is not such a mask (*all: it keeps everything). */
static bool causal_offset(const onnx_tensor *cond, bool keep_if, const pcgc_ptensor *x, int64_t *offset, bool *all) {
  int cr = cond->rank, xr = x->rank;
  *all = false;
  if (cr > xr || xr < 2) return false;
  for (int d = 0; d < cr; d++)
    if (cond->dims[d] != 1 && cond->dims[d] != x->dims[xr - cr + d]) return false;
  int64_t M = cr >= 2 ? cond->dims[cr - 2] : 1, N = cr >= 1 ? cond->dims[cr - 1] : 1;
  int64_t kept = 0;
  for (int64_t e = 0; e < cond->numel; e++) kept += (pcgc__onnx_get_i(cond, e) != 0) == keep_if;
  if (kept == cond->numel) {
    *all = true;
    return false;
  }
  if (M != x->dims[xr - 2] || N != x->dims[xr - 1]) return false; /* a mask broadcast over rows or columns */
  /* the offset from the first row that keeps anything (k elements of row
   * i: k - 1 - i), then every element checked against it */
  int64_t off = INT64_MIN;
  for (int64_t i = 0; i < M && off == INT64_MIN; i++) {
    int64_t k = 0;
    for (int64_t j = 0; j < N; j++) k += (pcgc__onnx_get_i(cond, i * N + j) != 0) == keep_if;
    if (k > 0) off = k - 1 - i;
  }
  if (off == INT64_MIN) return false; /* keeps nothing */
  for (int64_t e = 0; e < cond->numel; e++) {
    int64_t i = (e / N) % M, j = e % N;
    if (((pcgc__onnx_get_i(cond, e) != 0) == keep_if) != (j <= i + off)) return false;
  }
  *offset = off;
  return true;
}

static pcgc_status conv_where(onnx_ctx *c) {
  onnx_value *cv, *av, *bv;
  TRY(need_in(c, 0, &cv));
  TRY(need_in(c, 1, &av));
  TRY(need_in(c, 2, &bv));
  pcgc_status s = PCGC_OK;
  double fill = 0;
  bool keep_if = true; /* x where cond is true */
  onnx_value *xv = av, *fv = bv;
  if (av->kind == OV_CONST && bv->kind != OV_CONST) {
    xv = bv, fv = av, keep_if = false;
  }
  const char *why = NULL;
  if (cv->kind != OV_CONST) why = "its condition is computed at run time";
  else if (fv->kind != OV_CONST) why = "it picks between two tensors";
  else if (!scalar_of(c, fv, &fill, &s)) why = "the value it fills with is not a one-element constant";
  else if (fill != -INFINITY) why = "it fills with a value other than -inf";
  TRY(s);
  onnx_tensor *cond = NULL;
  pcgc_ref x;
  int64_t off = 0;
  bool all = false;
  if (!why) {
    TRY(pcgc__onnx_const(c, cv, &cond));
    TRY(pcgc__onnx_tensor_ref(c, xv, 0, NULL, &x));
    if (!causal_offset(cond, keep_if, type_of(c, x), &off, &all) && !all)
      why = "its condition is not a causal mask (kept: column <= row + offset in the last two dims)";
  }
  if (why) {
    s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "this Where is not supported: %s", why);
    pcgc_error_hint(c->err, "pcgc maps Where(constant lower-triangular mask, x, -inf) -- masked_fill(mask, "
                    "float('-inf')) on attention scores -- onto causal_mask; other selections have no pcgc "
                    "operator");
    return s;
  }
  if (all) return pcgc__onnx_def_act(c, 0, x);
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_CAUSAL_MASK);
  pcgc_attrs_set_int(&a, "offset", off);
  return emit_out(c, PCGC_OP_CAUSAL_MASK, &a, 1, &x);
}

/* ---------------------------------------------------------- data movement */

static pcgc_status conv_reshape(onnx_ctx *c) {
  pcgc_ref x;
  TRY(in_ref(c, 0, &x));
  const pcgc_ptensor *t = type_of(c, x);
  int rank;
  int64_t dims[ONNX_MAX_RANK];
  TRY(pcgc__onnx_reshape_dims(c, t->rank, t->dims, &rank, dims));
  pcgc_attrs a;
  if (strcmp(op(c), "Flatten") == 0) {
    int64_t axis;
    TRY(pcgc__onnx_attr_int(c, "axis", 1, &axis));
    pcgc_attrs_init(&a, PCGC_OP_FLATTEN);
    pcgc_attrs_set_int(&a, "axis", axis);
    return emit_out(c, PCGC_OP_FLATTEN, &a, 1, &x);
  }
  if (rank > PCGC_MAX_RANK)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "the result has %d dims; pcgc tensors have at most %d", rank,
                           PCGC_MAX_RANK);
  pcgc_attrs_init(&a, PCGC_OP_RESHAPE);
  pcgc_attrs_set_ints(&a, "shape", rank, dims);
  return emit_out(c, PCGC_OP_RESHAPE, &a, 1, &x);
}

static pcgc_status conv_transpose(onnx_ctx *c) {
  pcgc_ref x;
  TRY(in_ref(c, 0, &x));
  int r = type_of(c, x)->rank, n;
  int64_t perm[ONNX_MAX_RANK];
  TRY(pcgc__onnx_attr_ints(c, "perm", ONNX_MAX_RANK, perm, &n));
  if (n < 0) {
    n = r;
    for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
  }
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_TRANSPOSE);
  pcgc_attrs_set_ints(&a, "perm", n, perm);
  return emit_out(c, PCGC_OP_TRANSPOSE, &a, 1, &x);
}

static pcgc_status conv_concat(onnx_ctx *c) {
  pcgc_ref in[PCGC_VARIADIC];
  int n = 0;
  int64_t axis;
  TRY(pcgc__onnx_attr_int(c, "axis", 0, &axis));
  if (c->cur->n_input > PCGC_VARIADIC)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Concat of %zu tensors; pcgc's concat takes at most %d",
                           c->cur->n_input, PCGC_VARIADIC);
  for (size_t i = 0; i < c->cur->n_input; i++) {
    onnx_value *v;
    TRY(pcgc__onnx_input(c, (int)i, &v));
    if (v) TRY(pcgc__onnx_tensor_ref(c, v, 0, NULL, &in[n++]));
  }
  if (!n) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Concat has no inputs");
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_CONCAT);
  pcgc_attrs_set_int(&a, "axis", axis);
  return emit_out(c, PCGC_OP_CONCAT, &a, n, in);
}

static pcgc_status conv_split(onnx_ctx *c) {
  pcgc_ref x;
  int64_t axis, sizes[PCGC_MAX_INTS];
  TRY(in_ref(c, 0, &x));
  TRY(pcgc__onnx_attr_int(c, "axis", 0, &axis));
  const pcgc_ptensor *t = type_of(c, x);
  int n_out = (int)c->cur->n_output;
  if (axis < -t->rank || axis >= t->rank)
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)axis, t->rank);
  if (n_out > PCGC_MAX_INTS)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Split into %d parts; pcgc's split makes at most %d", n_out,
                           PCGC_MAX_INTS);
  TRY(pcgc__onnx_split_sizes(c, t->dims[norm_axis(axis, t->rank)], n_out, sizes));
  for (int i = 0; i < n_out; i++)
    if (sizes[i] == 0) return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "output %d of the split is empty", i);
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_SPLIT);
  pcgc_attrs_set_int(&a, "axis", axis);
  pcgc_attrs_set_ints(&a, "sizes", n_out, sizes);
  int node;
  TRY(pcgc__onnx_emit(c, PCGC_OP_SPLIT, NULL, &a, 1, &x, &node));
  for (int i = 0; i < n_out; i++) TRY(pcgc__onnx_def_act(c, i, (pcgc_ref){node, i}));
  return PCGC_OK;
}

/* Elements [start, start + count) of dim `axis` of x, as a split output. */
static pcgc_status take(onnx_ctx *c, pcgc_ref x, int axis, int64_t start, int64_t count, const char *suffix,
                        pcgc_ref *out) {
  const pcgc_ptensor *t = type_of(c, x);
  int64_t dim = t->dims[axis], sizes[3];
  if (count <= 0) return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "the result would be empty");
  if (start == 0 && count == dim) {
    *out = x;
    return PCGC_OK;
  }
  int n = 0, piece;
  if (start > 0) sizes[n++] = start;
  piece = n;
  sizes[n++] = count;
  if (start + count < dim) sizes[n++] = dim - start - count;
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_SPLIT);
  pcgc_attrs_set_int(&a, "axis", axis);
  pcgc_attrs_set_ints(&a, "sizes", n, sizes);
  int node;
  TRY(pcgc__onnx_emit(c, PCGC_OP_SPLIT, suffix, &a, 1, &x, &node));
  *out = (pcgc_ref){node, piece};
  return PCGC_OK;
}

static pcgc_status conv_slice(onnx_ctx *c) {
  onnx_value *data;
  pcgc_ref x;
  TRY(need_in(c, 0, &data));
  int64_t start[ONNX_MAX_RANK], count[ONNX_MAX_RANK], step[ONNX_MAX_RANK];
  if (data->kind == OV_CONST) { /* a parameter's rows: a split of the weight, unless strided */
    onnx_tensor *ct;
    TRY(pcgc__onnx_const(c, data, &ct));
    TRY(pcgc__onnx_slice_ranges(c, ct->rank, ct->dims, start, count, step));
    for (int d = 0; d < ct->rank; d++)
      if ((step[d] != 1 && count[d] > 1) || count[d] == 0) return pcgc__onnx_fold(c);
  }
  TRY(pcgc__onnx_tensor_ref(c, data, 0, NULL, &x));
  const pcgc_ptensor *t = type_of(c, x);
  TRY(pcgc__onnx_slice_ranges(c, t->rank, t->dims, start, count, step));
  int rank = t->rank, k = 0;
  for (int d = 0; d < rank; d++) {
    if (start[d] == 0 && count[d] == type_of(c, x)->dims[d]) continue;
    if (step[d] != 1 && count[d] > 1)
      return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Slice with step %lld is not supported (only 1)",
                             (long long)step[d]);
    char suffix[16];
    snprintf(suffix, sizeof suffix, ".%d", k);
    TRY(take(c, x, d, start[d], count[d], k ? suffix : NULL, &x));
    k++;
  }
  if (k == 0) return emit_out(c, PCGC_OP_IDENTITY, NULL, 1, &x);
  return pcgc__onnx_def_act(c, 0, x);
}

static pcgc_status conv_gather(onnx_ctx *c) {
  onnx_value *data, *idx;
  int64_t axis;
  TRY(need_in(c, 0, &data));
  TRY(need_in(c, 1, &idx));
  TRY(pcgc__onnx_attr_int(c, "axis", 0, &axis));
  if (data->kind == OV_CONST && idx->kind != OV_CONST) { /* a table looked up with run-time indices */
    onnx_tensor *t;
    pcgc_ref in[2];
    TRY(pcgc__onnx_const(c, data, &t));
    if (t->rank != 2 || (axis != 0 && axis != -2) || !pcgc__onnx_type_is_float(t->type)) {
      pcgc_status s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Gather from a constant is supported for a 2-D "
                                      "float table along axis 0 (an embedding), not rank %d along axis %lld",
                                      t->rank, (long long)axis);
      return s;
    }
    TRY(pcgc__onnx_tensor_ref(c, idx, 0, NULL, &in[0]));
    TRY(pcgc__onnx_tensor_ref(c, data, 0, NULL, &in[1]));
    return emit_out(c, PCGC_OP_EMBEDDING, NULL, 2, in);
  }
  /* constant indices into a tensor: a split (and a reshape for a scalar index) */
  pcgc_ref x, y;
  TRY(pcgc__onnx_tensor_ref(c, data, 0, NULL, &x));
  const pcgc_ptensor *t = type_of(c, x);
  if (axis < -t->rank || axis >= t->rank)
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)axis, t->rank);
  int a = norm_axis(axis, t->rank);
  onnx_tensor *it = NULL;
  if (idx->kind == OV_CONST) TRY(pcgc__onnx_const(c, idx, &it));
  bool ok = it && pcgc__onnx_type_is_int(it->type) && it->rank <= 1 && it->numel >= 1;
  int64_t dim = t->dims[a], first = 0;
  for (int64_t i = 0; ok && i < it->numel; i++) {
    int64_t v = it->i[i] < 0 ? it->i[i] + dim : it->i[i];
    if (v < 0 || v >= dim) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "index %lld is out of range for size %lld",
                                                  (long long)it->i[i], (long long)dim);
    if (i == 0) first = v;
    ok = v == first + i;
  }
  if (!ok && data->kind == OV_CONST && idx->kind == OV_CONST) return pcgc__onnx_fold(c); /* scattered rows */
  if (!ok) {
    pcgc_status s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Gather of a tensor is supported with constant, "
                                    "consecutive indices only");
    pcgc_error_hint(c->err, "Gather with a constant 2-D table and run-time indices becomes an embedding");
    return s;
  }
  TRY(take(c, x, a, first, it->numel, it->rank == 0 ? ".take" : NULL, &y));
  if (it->rank == 1) return pcgc__onnx_def_act(c, 0, y);
  int64_t dims[PCGC_MAX_RANK];
  int r = 0;
  for (int d = 0; d < t->rank; d++)
    if (d != a) dims[r++] = t->dims[d];
  pcgc_attrs at;
  pcgc_attrs_init(&at, PCGC_OP_RESHAPE);
  pcgc_attrs_set_ints(&at, "shape", r, dims);
  return emit_out(c, PCGC_OP_RESHAPE, &at, 1, &y);
}

static pcgc_status conv_reduce(onnx_ctx *c) {
  pcgc_ref x;
  TRY(in_ref(c, 0, &x));
  int64_t axes[PCGC_MAX_INTS], keep, noop;
  int n;
  TRY(pcgc__onnx_axes(c, 1, PCGC_MAX_INTS, axes, &n));
  TRY(pcgc__onnx_attr_int(c, "keepdims", 1, &keep));
  TRY(pcgc__onnx_attr_int(c, "noop_with_empty_axes", 0, &noop));
  if (n <= 0 && noop) return emit_out(c, PCGC_OP_IDENTITY, NULL, 1, &x);
  if (n <= 0) {
    n = type_of(c, x)->rank;
    for (int i = 0; i < n; i++) axes[i] = i;
  }
  pcgc_op_kind k = strcmp(op(c), "ReduceSum") == 0   ? PCGC_OP_REDUCE_SUM
                   : strcmp(op(c), "ReduceMax") == 0 ? PCGC_OP_REDUCE_MAX
                                                      : PCGC_OP_REDUCE_MEAN;
  pcgc_attrs a;
  pcgc_attrs_init(&a, k);
  pcgc_attrs_set_ints(&a, "dims", n, axes);
  pcgc_attrs_set_int(&a, "keepdims", keep != 0);
  return emit_out(c, k, &a, 1, &x);
}

static pcgc_status conv_cast(onnx_ctx *c) {
  pcgc_ref x;
  int64_t to;
  TRY(in_ref(c, 0, &x));
  TRY(pcgc__onnx_attr_int(c, "to", 0, &to));
  pcgc_dtype dt = type_of(c, x)->dtype;
  bool same = (to == OT_FLOAT && dt == PCGC_F32) || (to == OT_DOUBLE && dt == PCGC_F64) ||
              (to == OT_FLOAT16 && dt == PCGC_F16) || (to == OT_BFLOAT16 && dt == PCGC_BF16) ||
              (pcgc__onnx_type_is_int((int32_t)to) && to != OT_BOOL && !pcgc_dtype_is_float(dt));
  if (!same) {
    pcgc_status s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Cast of a %s tensor to %s is not supported",
                                    pcgc_dtype_name(dt), pcgc__onnx_type_name((int32_t)to));
    pcgc_error_hint(c->err, "pcgc has no cast operator; casts between integer types are kept as they are");
    return s;
  }
  return pcgc__onnx_def_act(c, 0, x); /* same type: nothing to do */
}

/* Expand: dims of size 1 grown to n become a concat of n copies along them
 * (a new leading dim: a reshape first). Exact; meant for the small counts
 * exporters write (a class token expanded to the batch, grouped-query
 * attention's key/value heads repeated for their query heads). */
static pcgc_status conv_expand(onnx_ctx *c) {
  pcgc_ref x;
  onnx_value *sv;
  TRY(in_ref(c, 0, &x));
  TRY(need_in(c, 1, &sv));
  int64_t shape[ONNX_MAX_RANK];
  int n;
  TRY(pcgc__onnx_const_ints(c, sv, "the shape", ONNX_MAX_RANK, shape, &n));
  const pcgc_ptensor *t = type_of(c, x);
  int r = n > t->rank ? n : t->rank;
  int64_t in[PCGC_MAX_RANK], out[PCGC_MAX_RANK];
  if (r > PCGC_MAX_RANK)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "the result has %d dims; pcgc tensors have at most %d", r,
                           PCGC_MAX_RANK);
  bool grows = false;
  for (int d = 0; d < r; d++) {
    int ix = d - (r - t->rank), is = d - (r - n);
    int64_t a = ix >= 0 ? t->dims[ix] : 1, b = is >= 0 ? shape[is] : 1;
    if (a != b && a != 1 && b != 1)
      return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Expand of dim %d from %lld to %lld", d, (long long)a,
                             (long long)b);
    in[d] = a;
    out[d] = a > b ? a : b;
    grows |= out[d] != a;
  }
  if (!grows) return pcgc__onnx_def_act(c, 0, x); /* nothing pcgc sees changes */
  if (r > t->rank) {
    pcgc_attrs ra;
    pcgc_attrs_init(&ra, PCGC_OP_RESHAPE);
    pcgc_attrs_set_ints(&ra, "shape", r, in);
    TRY(emit_ref(c, PCGC_OP_RESHAPE, ".unsqueeze", &ra, 1, &x, &x));
  }
  int last = -1;
  for (int d = 0; d < r; d++)
    if (out[d] != in[d]) last = d;
  for (int d = 0; d < r; d++) {
    if (out[d] == in[d]) continue;
    if (out[d] > PCGC_VARIADIC) {
      pcgc_status s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Expand of dim %d to %lld copies; pcgc repeats a "
                                      "tensor by concatenating at most %d", d, (long long)out[d], PCGC_VARIADIC);
      pcgc_error_hint(c->err, "pcgc broadcasts inside elementwise operators; an Expand that feeds one can "
                      "often be left out of the export");
      return s;
    }
    pcgc_ref copies[PCGC_VARIADIC];
    for (int64_t i = 0; i < out[d]; i++) copies[i] = x;
    pcgc_attrs ca;
    pcgc_attrs_init(&ca, PCGC_OP_CONCAT);
    pcgc_attrs_set_int(&ca, "axis", d);
    char suffix[24];
    snprintf(suffix, sizeof suffix, ".repeat%d", d);
    TRY(emit_ref(c, PCGC_OP_CONCAT, d == last ? NULL : suffix, &ca, (int)out[d], copies, &x));
  }
  return pcgc__onnx_def_act(c, 0, x);
}

/* ------------------------------------------------------------------ fused */

pcgc_status pcgc__onnx_emit_fused(onnx_ctx *c, const onnx_fused *f) {
  onnx_value *xv = pcgc__onnx_value(c, f->x);
  if (!xv || xv->kind == OV_UNDEFINED || xv->kind == OV_DROPPED)
    return pcgc__onnx_fail(c, PCGC_ERR_GRAPH, "input '%.200s' is not defined before this node", f->x);
  /* named after the pattern's scope: "/layers.0/norm1/Add_1" -> "/layers.0/norm1/LayerNormalization" */
  char base[600];
  const char *root = pcgc__onnx_node_name(c->cur), *slash = strrchr(root, '/');
  const char *what = f->kind == OF_GELU     ? "Gelu"
                     : f->kind == OF_SILU    ? "SiLU"
                     : f->kind == OF_RMSNORM ? "RMSNormalization"
                     : f->kind == OF_ROPE    ? "RotaryEmbedding"
                                             : "LayerNormalization";
  if (slash) snprintf(base, sizeof base, "%.*s/%s", (int)(slash - root > 500 ? 500 : slash - root), root, what);
  else snprintf(base, sizeof base, "%.500s", root);
  c->name_base = base;
  pcgc_ref x;
  pcgc_status s = pcgc__onnx_tensor_ref(c, xv, 0, NULL, &x);
  if (s == PCGC_OK && f->kind == OF_GELU) {
    pcgc_attrs a;
    pcgc_attrs_init(&a, PCGC_OP_GELU);
    pcgc_attrs_set_int(&a, "approximate", f->gelu_tanh);
    s = emit_out(c, PCGC_OP_GELU, &a, 1, &x);
  } else if (s == PCGC_OK && f->kind == OF_ROPE) {
    const pcgc_ptensor *t = type_of(c, x);
    int r = t->rank;
    bool halves = r >= 2 && t->dims[r - 1] == f->axes[4];
    for (int k = 0; halves && k < 2; k++) { /* the Slices' ranges, evaluated by now: [h, >= D) and [0, h) */
      const Onnx__NodeProto *sn = c->gp->node[f->axes[2 + k]];
      int64_t v[3], h = f->axes[4] / 2;
      for (int q = 0; q < 3 && halves; q++) {
        int nv;
        onnx_value *sv = pcgc__onnx_value(c, sn->input[1 + q]);
        halves = sv && sv->kind == OV_CONST &&
                 pcgc__onnx_const_ints(c, sv, "a slice bound", 1, &v[q], &nv) == PCGC_OK && nv == 1;
      }
      halves = halves && (v[2] == -1 || v[2] == r - 1) &&
               (k == 0 ? v[0] == h && v[1] >= 2 * h : v[0] == 0 && v[1] == h);
    }
    if (!halves || (f->axes[1] != -1 && f->axes[1] != r - 1) || t->dims[r - 2] != f->axes[0]) {
      s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "these rotary embeddings (from '%.200s') rotate a tensor of "
                          "rank %d along axis %lld with tables of %lld positions; pcgc's rope needs [..., T, D] "
                          "rotated along D, T the tables' positions", f->first, r, (long long)f->axes[1],
                          (long long)f->axes[0]);
    } else {
      pcgc_attrs a;
      pcgc_attrs_init(&a, PCGC_OP_ROPE);
      pcgc_attrs_set_float(&a, "theta", f->eps);
      s = emit_out(c, PCGC_OP_ROPE, &a, 1, &x);
    }
  } else if (s == PCGC_OK && f->kind == OF_SILU) {
    pcgc_attrs a;
    pcgc_attrs_init(&a, PCGC_OP_SILU);
    s = emit_out(c, PCGC_OP_SILU, &a, 1, &x);
  } else if (s == PCGC_OK) {
    /* the reduced axes must be the last ones */
    int r = type_of(c, x)->rank;
    bool seen[ONNX_MAX_RANK] = {false}, ok = f->n_axes >= 1 && f->n_axes <= r;
    for (int i = 0; ok && i < f->n_axes; i++) {
      int a = norm_axis(f->axes[i], r);
      ok = f->axes[i] >= -r && f->axes[i] < r && a >= r - f->n_axes && !seen[a];
      if (ok) seen[a] = true;
    }
    if (!ok) {
      s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "this %s normalisation (from '%.200s') reduces axes that "
                          "are not the last dims", f->kind == OF_RMSNORM ? "RMS" : "layer", f->first);
    } else {
      onnx_value *sc = f->scale ? pcgc__onnx_value(c, f->scale) : NULL;
      onnx_value *bi = f->bias ? pcgc__onnx_value(c, f->bias) : NULL; /* none for RMS */
      s = emit_norm(c, f->kind == OF_RMSNORM ? PCGC_OP_RMSNORM : PCGC_OP_LAYERNORM, x, f->n_axes, f->eps, sc, bi);
    }
  }
  c->name_base = NULL;
  return s;
}

/* ------------------------------------------------------------------ table */

static const struct {
  const char *op;
  convert_fn fn;
} convert_table[] = {
    {"Add", conv_binary}, {"AveragePool", conv_pool}, {"BatchNormalization", conv_batchnorm},
    {"Cast", conv_cast}, {"Clip", conv_clip}, {"Concat", conv_concat}, {"Conv", conv_conv}, {"Div", conv_binary},
    {"Dropout", conv_dropout}, {"Exp", conv_unary}, {"Expand", conv_expand}, {"Flatten", conv_reshape},
    {"Gather", conv_gather}, {"Gelu", conv_unary}, {"Gemm", conv_gemm},
    {"GlobalAveragePool", conv_global_pool}, {"GlobalMaxPool", conv_global_pool},
    {"GroupNormalization", conv_groupnorm}, {"HardSigmoid", conv_unary}, {"HardSwish", conv_unary},
    {"Identity", conv_unary}, {"InstanceNormalization", conv_instancenorm}, {"LayerNormalization", conv_layernorm}, {"LeakyRelu", conv_unary}, {"LogSoftmax", conv_softmax},
    {"MatMul", conv_matmul}, {"MaxPool", conv_pool},
    {"Mul", conv_binary}, {"Neg", conv_neg}, {"Pad", conv_pad}, {"Pow", conv_pow}, {"Reciprocal", conv_pow},
    {"ReduceMax", conv_reduce}, {"ReduceMean", conv_reduce}, {"ReduceSum", conv_reduce}, {"Relu", conv_unary},
    {"Reshape", conv_reshape}, {"Sigmoid", conv_unary}, {"Slice", conv_slice}, {"Softmax", conv_softmax},
    {"Split", conv_split}, {"Sqrt", conv_pow}, {"Squeeze", conv_reshape}, {"Sub", conv_binary},
    {"Tanh", conv_unary}, {"Transpose", conv_transpose}, {"Unsqueeze", conv_reshape}, {"Where", conv_where},
};

pcgc_status pcgc__onnx_unsupported(onnx_ctx *c) {
  const Onnx__NodeProto *n = c->cur;
  pcgc_status s;
  if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
    s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "unsupported operator '%.100s' of domain '%.100s'",
                        pcgc__onnx_str(n->op_type), n->domain);
  else
    s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "unsupported operator '%.100s' (opset %lld)",
                        pcgc__onnx_str(n->op_type), (long long)c->opset);
  if (c->err) {
    char *h = c->err->hint;
    size_t cap = sizeof c->err->hint, len = (size_t)snprintf(h, cap, "supported: ");
    for (size_t i = 0; i < sizeof convert_table / sizeof convert_table[0] && len < cap; i++)
      len += (size_t)snprintf(h + len, cap - len, "%s%s", i ? ", " : "", convert_table[i].op);
    if (len < cap) snprintf(h + len, cap - len, "; Constant and shape arithmetic are evaluated on import");
  }
  return s;
}

pcgc_status pcgc__onnx_convert(onnx_ctx *c) {
  const char *name = pcgc__onnx_str(c->cur->op_type);
  for (size_t i = 0; i < sizeof convert_table / sizeof convert_table[0]; i++)
    if (strcmp(name, convert_table[i].op) == 0) return convert_table[i].fn(c);
  return pcgc__onnx_unsupported(c);
}
