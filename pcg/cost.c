/*
 * cost.c — FLOP, byte and parameter counts of every operator, forward and
 * backward, over the logical (whole) tensors. The search divides them among
 * pieces; `pcgc check` sums them per iteration.
 *
 * Conventions: a multiply-add is 2 FLOPs. Backward of a contraction is two
 * contractions of the same size (input gradient and weight gradient), so
 * twice the forward. Elementwise ops count a documented number of FLOPs per
 * element (`ew` below): relu 1, gelu 8 (tanh form), sigmoid 4, tanh 4, exp 4.
 * Bytes are what the kernels read and write: inputs plus outputs forward;
 * backward reads the saved tensors and the output gradient and writes input
 * gradients (about twice forward). Parallel operators do no arithmetic (their
 * communication is costed by the search's cost model), except reduce, which
 * adds its partial sums. Reshape and flatten are views: no bytes.
 */
#include <string.h>

#include "pcg.h"

typedef struct cctx {
  pcgc_op_kind kind;
  const pcgc_attrs *a;
  int n_in;
  const pcgc_ptensor *in;
  int n_out;
  const pcgc_ptensor *out;
  pcgc_op_cost *c;
} cctx;

static double numel(const pcgc_ptensor *t) { return (double)pcgc_ptensor_numel(t); }
static double bytes(const pcgc_ptensor *t) { return (double)pcgc_ptensor_bytes(t); }

static double io_bytes(const cctx *x) {
  double b = 0;
  for (int i = 0; i < x->n_in; i++) b += bytes(&x->in[i]);
  for (int i = 0; i < x->n_out; i++) b += bytes(&x->out[i]);
  return b;
}

/* Forward FLOPs f; backward = bwd_ratio * f; bytes from the tensors. */
static void set(cctx *x, double f, double bwd_ratio) {
  x->c->fwd_flops = f;
  x->c->bwd_flops = f * bwd_ratio;
  x->c->fwd_bytes = io_bytes(x);
  x->c->bwd_bytes = 2 * x->c->fwd_bytes;
}

static double act_flops(int act) {
  switch (act) {
  case PCGC_ACT_RELU: return 1;
  case PCGC_ACT_GELU: return 8;
  case PCGC_ACT_SIGMOID:
  case PCGC_ACT_TANH: return 4;
  default: return 0;
  }
}

static void cost_source(cctx *x) {
  if (x->kind == PCGC_OP_WEIGHT) x->c->params = pcgc_ptensor_numel(&x->out[0]);
}

static void dense(cctx *x, int act) {
  const pcgc_ptensor *in = &x->in[0], *w = &x->in[1];
  double m = numel(in) / (double)in->dims[in->rank - 1], k = (double)w->dims[0], n = (double)w->dims[1];
  double f = 2 * m * k * n;
  double ew = (x->n_in == 3 ? 1 : 0) + act_flops(act);
  set(x, f + ew * m * n, 2);
  x->c->bwd_flops = 2 * f + ew * m * n; /* dX, dW; act' and db (1 per output) */
  if (act == PCGC_ACT_GELU) x->c->bwd_flops += f; /* the kernels recompute the pre-activation */
}

static void cost_linear(cctx *x) { dense(x, (int)pcgc_attrs_int(x->a, "act")); }
static void cost_matmul(cctx *x) { dense(x, PCGC_ACT_NONE); }

static void cost_bmm(cctx *x) {
  const pcgc_ptensor *a = &x->in[0], *o = &x->out[0];
  double k = (double)a->dims[a->rank - 1];
  set(x, 2 * numel(o) * k, 2);
}

static void cost_conv2d(cctx *x) {
  const pcgc_ptensor *w = &x->in[1], *o = &x->out[0];
  double per_out = (double)w->dims[1] * (double)w->dims[2] * (double)w->dims[3];
  double f = 2 * numel(o) * per_out;
  double ew = (x->n_in == 3 ? 1 : 0) + act_flops((int)pcgc_attrs_int(x->a, "act"));
  set(x, f + ew * numel(o), 2);
  x->c->bwd_flops = 2 * f + ew * numel(o);
  if (pcgc_attrs_int(x->a, "act") == PCGC_ACT_GELU) x->c->bwd_flops += f; /* as for linear */
}

static void cost_pool2d(cctx *x) {
  pcgc_ints k = pcgc_attrs_ints(x->a, "kernel");
  double win = pcgc_attrs_int(x->a, "global") ? (double)x->in[0].dims[2] * (double)x->in[0].dims[3]
                                              : (double)(k.v[0] * k.v[1]);
  set(x, numel(&x->out[0]) * win, 1);
}

/* mean, variance, normalise, scale and shift: ~5 FLOPs an element forward,
 * ~8 backward; a fused relu one more each way, and no bytes (the backward
 * recomputes its mask from x, which it reads anyway) */
static void cost_batchnorm(cctx *x) {
  double relu = pcgc_attrs_int(x->a, "act") == PCGC_ACT_RELU;
  set(x, (5 + relu) * numel(&x->in[0]), (8.0 + relu) / (5 + relu));
}
static void cost_layernorm(cctx *x) { set(x, 5 * numel(&x->in[0]), 8.0 / 5); }
/* square and sum, scale by the row's factor and the weight: ~4 forward, ~6 backward */
static void cost_rmsnorm(cctx *x) { set(x, 4 * numel(&x->in[0]), 6.0 / 4); }

static void cost_embedding(cctx *x) {
  /* a gather; bags add the looked-up rows; backward scatter-adds */
  const pcgc_ptensor *idx = &x->in[0], *tab = &x->in[1];
  double rows = numel(idx), d = (double)tab->dims[1];
  double f = pcgc_attrs_int(x->a, "bag") != PCGC_BAG_NONE ? rows * d : 0;
  x->c->fwd_flops = f;
  x->c->bwd_flops = rows * d;
  x->c->fwd_bytes = bytes(idx) + rows * d * (double)pcgc_dtype_size(tab->dtype) + bytes(&x->out[0]);
  x->c->bwd_bytes = 2 * x->c->fwd_bytes;
}

static void cost_unary(cctx *x) {
  double ew;
  switch (x->kind) {
  case PCGC_OP_GELU: ew = 8; break;
  case PCGC_OP_SILU: ew = 5; break; /* a sigmoid and a product */
  case PCGC_OP_HARDSIGMOID: ew = 3; break; /* add, clamp, scale */
  case PCGC_OP_HARDSWISH: ew = 4; break;
  case PCGC_OP_SIGMOID:
  case PCGC_OP_TANH:
  case PCGC_OP_EXP: ew = 4; break;
  case PCGC_OP_IDENTITY: ew = 0; break;
  case PCGC_OP_DROPOUT: ew = 2; break; /* compare with the mask, scale */
  case PCGC_OP_CLIP: ew = 2; break;    /* two comparisons */
  case PCGC_OP_POW: ew = 4; break;     /* a libm pow (sqrt, or products, for the common exponents) */
  default: ew = 1;
  }
  set(x, ew * numel(&x->out[0]), 1);
}

static void cost_binary(cctx *x) {
  set(x, numel(&x->out[0]), x->kind == PCGC_OP_ADD || x->kind == PCGC_OP_SUB ? 1 : 2);
}

static void cost_move(cctx *x) { set(x, 0, 0); }
static void cost_concat(cctx *x) { cost_move(x); }
static void cost_split(cctx *x) { cost_move(x); }
static void cost_transpose(cctx *x) { cost_move(x); }

static void cost_view(cctx *x) { (void)x; } /* reshape, flatten: no data moves */
static void cost_reshape(cctx *x) { cost_view(x); }
static void cost_flatten(cctx *x) { cost_view(x); }

static void cost_softmax(cctx *x) { set(x, 5 * numel(&x->in[0]), 4.0 / 5); }
static void cost_reduce(cctx *x) { set(x, numel(&x->in[0]), 0); }
static void cost_mask(cctx *x) { set(x, numel(&x->in[0]), 1); } /* a comparison an element */
static void cost_rope(cctx *x) { set(x, 3 * numel(&x->in[0]), 1); } /* two products and a sum */

/* Any arity (7, 10 or 11 inputs): the bias adds (B*Sq*E + 2*B*Sk*F, and
 * B*Sq*Eo for bo) are not counted, a fraction 1/Eq of the projections; the
 * biases' bytes are, through io_bytes. */
static void cost_attention(cctx *x) {
  const pcgc_ptensor *q = &x->in[0], *k = &x->in[1], *v = &x->in[2], *wq = &x->in[3], *wo = &x->in[6];
  double B = (double)q->dims[0], Sq = (double)q->dims[1], Sk = (double)k->dims[1];
  double E = (double)wq->dims[1], F = (double)x->in[4].dims[1], Eo = (double)wo->dims[1];
  double heads = (double)pcgc_attrs_int(x->a, "heads");
  /* k and v project to F = kv_heads * head size (grouped-query attention) */
  double proj = 2 * B * (Sq * (double)q->dims[2] * E + (Sk * (double)k->dims[2] + Sk * (double)v->dims[2]) * F);
  double scores = 2 * B * Sq * Sk * E, context = scores, out = 2 * B * Sq * E * Eo;
  double softmax = 5 * B * heads * Sq * Sk;
  double f = proj + scores + context + out;
  x->c->fwd_flops = f + softmax;
  x->c->bwd_flops = 2 * f + 4 * B * heads * Sq * Sk;
  /* the score matrix is written and read once per direction */
  double sb = B * heads * Sq * Sk * (double)pcgc_dtype_size(q->dtype);
  x->c->fwd_bytes = io_bytes(x) + 2 * sb;
  x->c->bwd_bytes = 2 * x->c->fwd_bytes;
}

/* The router: a softmax over each token's X logits and a top-k (about X
 * comparisons per choice); backward, the two softmaxes' Jacobians. */
static void cost_moe_route(cctx *x) {
  const pcgc_ptensor *l = &x->in[0];
  double k = (double)pcgc_attrs_int(x->a, "k");
  set(x, (5 + k) * numel(l), 6.0 / (5 + k));
}
/* a gather of the routed tokens; backward scatter-adds them */
static void cost_moe_dispatch(cctx *x) {
  set(x, 0, 0);
  x->c->bwd_flops = numel(&x->out[0]);
}
static void cost_expert_linear(cctx *x) {
  const pcgc_ptensor *in = &x->in[0], *o = &x->out[0];
  double f = 2 * numel(o) * (double)in->dims[3];
  double ew = (x->n_in == 3 ? 1 : 0) + act_flops((int)pcgc_attrs_int(x->a, "act"));
  set(x, f + ew * numel(o), 2);
  x->c->bwd_flops = 2 * f + ew * numel(o);
  if (pcgc_attrs_int(x->a, "act") == PCGC_ACT_GELU) x->c->bwd_flops += f; /* as for linear */
}
/* k slots read and added per output element; backward: dy and the gates' dots */
static void cost_moe_combine(cctx *x) {
  double k = (double)x->in[1].dims[2];
  set(x, 2 * k * numel(&x->out[0]), 2);
}

static void cost_xent(cctx *x) { set(x, 6 * numel(&x->in[0]), 0.5); }
static void cost_mse(cctx *x) { set(x, 3 * numel(&x->in[0]), 1); }

static void cost_partition(cctx *x) { (void)x; }
static void cost_combine(cctx *x) { (void)x; }
static void cost_replicate(cctx *x) { (void)x; }
static void cost_pipeline(cctx *x) { (void)x; }
static void cost_unpipeline(cctx *x) { (void)x; }
static void cost_reduce_p(cctx *x) {
  /* adding `degree` partial sums; backward is a replicate */
  double d = (double)pcgc_attrs_int(x->a, "degree");
  x->c->fwd_flops = numel(&x->out[0]) * (d - 1);
  x->c->fwd_bytes = bytes(&x->out[0]) * (d + 1);
}

typedef void (*cost_fn)(cctx *);
static const cost_fn cost_table[PCGC_OP_COUNT] = {
#define PCGC_OP(id, name, fn, min_in, max_in, n_out, schema) [PCGC_OP_##id] = cost_##fn,
#include "ops.def"
#undef PCGC_OP
};

void pcgc_op_cost_of(pcgc_op_kind kind, const pcgc_attrs *a, int n_in, const pcgc_ptensor *in, int n_out,
                     const pcgc_ptensor *out, pcgc_op_cost *cost) {
  memset(cost, 0, sizeof *cost);
  if ((unsigned)kind >= PCGC_OP_COUNT) return;
  cctx x = {kind, a, n_in, in, n_out, out, cost};
  cost_table[kind](&x);
}
