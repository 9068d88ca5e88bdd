/*
 * test_cost.c — FLOP, byte and parameter counts of operators (pcg/cost.c).
 *
 * Each case infers the output types with pcgc_op_infer, then checks
 * pcgc_op_cost_of against counts worked out by hand from the conventions at
 * the top of cost.c: a multiply-add is 2 FLOPs, backward of a contraction is
 * twice its forward, elementwise ops count a fixed number of FLOPs per
 * element, bytes are inputs plus outputs forward and twice that backward,
 * parallel operators cost nothing except reduce, views cost nothing. Costs
 * are over logical tensors, so sharding an op leaves them unchanged.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pcg.h"

#include "../common/check_main.h"

/* ---------------------------------------------------------------- helpers */

#define DIMS(...) (int64_t[]){__VA_ARGS__}, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define IN(...) \
  (int)(sizeof((pcgc_ptensor[]){__VA_ARGS__}) / sizeof(pcgc_ptensor)), (pcgc_ptensor[]){__VA_ARGS__}

static pcgc_ptensor ten(pcgc_dtype dt, const int64_t *dims, int rank)
{
  pcgc_ptensor t;
  pcgc_ptensor_init(&t, dt, rank, dims);
  return t;
}
#define F32(...) ten(PCGC_F32, DIMS(__VA_ARGS__))
#define I32(...) ten(PCGC_I32, DIMS(__VA_ARGS__))

static pcgc_ptensor shard(pcgc_ptensor t, int dim, int degree)
{
  t.degree[dim] *= degree;
  return t;
}
static pcgc_ptensor rep(pcgc_ptensor t, int replica)
{
  t.replica = replica;
  return t;
}

static pcgc_attrs attrs(pcgc_op_kind k)
{
  pcgc_attrs a;
  pcgc_attrs_init(&a, k);
  return a;
}
static pcgc_attrs set_int(pcgc_attrs a, const char *name, int64_t v)
{
  ck_assert_msg(pcgc_attrs_set_int(&a, name, v) == PCGC_OK, "set %s", name);
  return a;
}
static pcgc_attrs set_ints_(pcgc_attrs a, const char *name, const int64_t *v, int n)
{
  ck_assert_msg(pcgc_attrs_set_ints(&a, name, n, v) == PCGC_OK, "set %s", name);
  return a;
}
#define set_ints(a, name, ...) set_ints_(a, name, DIMS(__VA_ARGS__))

/* Infers op k on `in` (attributes `a`, defaults when NULL) and returns its
 * cost; `out` (room for 16) receives the output types when not NULL. */
static pcgc_op_cost cost_with(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_ptensor *in,
                              pcgc_ptensor *out)
{
  pcgc_attrs def;
  if (a == NULL) {
    pcgc_attrs_init(&def, k);
    a = &def;
  }
  pcgc_ptensor tmp[16];
  if (out == NULL) out = tmp;
  pcgc_error err = {0};
  pcgc_status st = pcgc_op_infer(k, a, n_in, in, out, &err);
  ck_assert_msg(st == PCGC_OK, "%s: %s", pcgc_op_name(k), err.message);
  pcgc_op_cost c;
  memset(&c, 0xff, sizeof c); /* cost_of must set every field */
  pcgc_op_cost_of(k, a, n_in, in, pcgc_op_num_outputs(k, a), out, &c);
  return c;
}
#define COST(k, a, ...) cost_with(k, a, IN(__VA_ARGS__), NULL)

/* Exact comparison: every count here is a small integer, exact in a double. */
#define EQ(got, want)                                                                            \
  ck_assert_msg((double)(got) == (double)(want), "%s = %.17g, want %.17g", #got, (double)(got), \
                (double)(want))

static void check_zero(int line, const pcgc_op_cost *c)
{
  ck_assert_msg(c->fwd_flops == 0 && c->bwd_flops == 0 && c->fwd_bytes == 0 && c->bwd_bytes == 0 &&
                    c->params == 0,
                "line %d: cost not zero: %g %g %g %g %lld", line, c->fwd_flops, c->bwd_flops, c->fwd_bytes,
                c->bwd_bytes, (long long)c->params);
}
#define ZERO(c) check_zero(__LINE__, &(c))

/* ------------------------------------------------------------ contractions */

START_TEST(test_linear_flops)
{
  const double M = 64, K = 784, N = 256, f = 2 * M * K * N;
  pcgc_op_cost c = COST(PCGC_OP_LINEAR, NULL, F32(64, 784), F32(784, 256));
  EQ(c.fwd_flops, f);
  EQ(c.bwd_flops, 2 * f);
  EQ(c.fwd_bytes, 4 * (M * K + K * N + M * N));
  EQ(c.bwd_bytes, 2 * c.fwd_bytes);
  EQ(c.params, 0);
  /* leading dims multiply into M */
  c = COST(PCGC_OP_LINEAR, NULL, F32(2, 3, 8), F32(8, 5));
  EQ(c.fwd_flops, 2 * 6 * 8 * 5);
  c = COST(PCGC_OP_LINEAR, NULL, F32(8), F32(8, 5));
  EQ(c.fwd_flops, 2 * 8 * 5);
}
END_TEST

START_TEST(test_linear_bias_and_activation_flops)
{
  const double M = 64, K = 784, N = 256, f = 2 * M * K * N;
  pcgc_attrs relu = set_int(attrs(PCGC_OP_LINEAR), "act", PCGC_ACT_RELU);
  pcgc_attrs gelu = set_int(attrs(PCGC_OP_LINEAR), "act", PCGC_ACT_GELU);
  /* forward: the bias adds 1 FLOP per output, relu 1, gelu 8 */
  pcgc_op_cost c = COST(PCGC_OP_LINEAR, &relu, F32(64, 784), F32(784, 256), F32(256));
  EQ(c.fwd_flops, f + 2 * M * N);
  c = COST(PCGC_OP_LINEAR, &gelu, F32(64, 784), F32(784, 256));
  EQ(c.fwd_flops, f + 8 * M * N);
  /* backward of a fused GELU makes the pre-activation again (runtime/cpu/k_dense.c,
   * the CUDA backend alike): one more GEMM */
  EQ(c.bwd_flops, 3 * f + 8 * M * N);
  c = COST(PCGC_OP_LINEAR, NULL, F32(64, 784), F32(784, 256), F32(256));
  EQ(c.fwd_flops, f + M * N);
  EQ(c.fwd_bytes, 4 * (M * K + K * N + N + M * N));
  /* Regression (fixed) (cost.c, dense): backward of y = act(xW + b) is dX and dW (2f),
   * act' (act FLOPs per output) and db, a column sum (1 per output): 2f +
   * (1 + act) * M * N, as conv2d counts it. dense adds the bias term twice
   * (ew already holds it), giving 2f + 3 * M * N here. */
  c = COST(PCGC_OP_LINEAR, &relu, F32(64, 784), F32(784, 256), F32(256));
  EQ(c.bwd_flops, 2 * f + 2 * M * N);
}
END_TEST

START_TEST(test_matmul_and_batch_matmul_flops)
{
  pcgc_op_cost c = COST(PCGC_OP_MATMUL, NULL, F32(3, 4), F32(4, 5));
  EQ(c.fwd_flops, 2 * 3 * 4 * 5);
  EQ(c.bwd_flops, 2 * 2 * 3 * 4 * 5);
  EQ(c.params, 0);
  c = COST(PCGC_OP_BATCH_MATMUL, NULL, F32(2, 4, 8), F32(2, 8, 3));
  EQ(c.fwd_flops, 2 * 2 * 4 * 8 * 3);
  EQ(c.bwd_flops, 2 * c.fwd_flops);
  EQ(c.fwd_bytes, 4 * (2 * 4 * 8 + 2 * 8 * 3 + 2 * 4 * 3));
  pcgc_attrs tb = set_int(attrs(PCGC_OP_BATCH_MATMUL), "transpose_b", 1);
  c = COST(PCGC_OP_BATCH_MATMUL, &tb, F32(2, 4, 8), F32(2, 3, 8));
  EQ(c.fwd_flops, 2 * 2 * 4 * 8 * 3);
}
END_TEST

START_TEST(test_conv2d_flops)
{
  /* 2 * N * O * Ho * Wo * C/g * kh * kw */
  pcgc_attrs a = set_int(set_int(attrs(PCGC_OP_CONV2D), "groups", 2), "padding", 1);
  pcgc_op_cost c = COST(PCGC_OP_CONV2D, &a, F32(2, 6, 8, 8), F32(4, 3, 3, 3));
  const double f = 2.0 * 2 * 4 * 8 * 8 * (6 / 2) * 3 * 3;
  EQ(c.fwd_flops, f);
  EQ(c.bwd_flops, 2 * f);
  EQ(c.fwd_bytes, 4 * (2 * 6 * 8 * 8 + 4 * 3 * 3 * 3 + 2 * 4 * 8 * 8));
  EQ(c.params, 0);
  a = set_int(set_int(set_int(attrs(PCGC_OP_CONV2D), "stride", 2), "padding", 1), "act", PCGC_ACT_RELU);
  c = COST(PCGC_OP_CONV2D, &a, F32(1, 3, 32, 32), F32(8, 3, 3, 3), F32(8));
  const double o = 1 * 8 * 16 * 16, g = 2 * o * 3 * 3 * 3;
  EQ(c.fwd_flops, g + 2 * o);
  EQ(c.bwd_flops, 2 * g + 2 * o);
}
END_TEST

START_TEST(test_attention_flops)
{
  pcgc_ptensor in[7];
  in[0] = in[1] = in[2] = F32(2, 5, 16);
  in[3] = in[4] = in[5] = F32(16, 32);
  in[6] = F32(32, 16);
  pcgc_attrs a = set_int(attrs(PCGC_OP_ATTENTION), "heads", 4);
  pcgc_op_cost c = cost_with(PCGC_OP_ATTENTION, &a, 7, in, NULL);
  ck_assert(c.fwd_flops > 0);
  ck_assert(c.bwd_flops > c.fwd_flops);
  ck_assert(c.fwd_bytes > 0);
  /* B=2 S=5 D=16 E=32 Eo=16 heads=4: projections 2*B*3*S*D*E, scores and
   * context 2*B*S*S*E each, output 2*B*S*E*Eo, softmax 5*B*h*S*S */
  const double B = 2, S = 5, D = 16, E = 32, Eo = 16, h = 4;
  const double f = 2 * B * 3 * S * D * E + 2 * (2 * B * S * S * E) + 2 * B * S * E * Eo;
  EQ(c.fwd_flops, f + 5 * B * h * S * S);
  EQ(c.bwd_flops, 2 * f + 4 * B * h * S * S);
  /* inputs and output, plus the score matrix written and read */
  const double io = 4 * (3 * B * S * D + 3 * D * E + E * Eo + B * S * Eo);
  EQ(c.fwd_bytes, io + 2 * 4 * B * h * S * S);
  /* causal masking does not change the count */
  pcgc_attrs causal = set_int(a, "causal", 1);
  pcgc_op_cost c2 = cost_with(PCGC_OP_ATTENTION, &causal, 7, in, NULL);
  EQ(c2.fwd_flops, c.fwd_flops);
}
END_TEST

/* With biases (10 or 11 inputs) the FLOPs are those of 7 inputs (bias adds
 * are not counted) and the bytes grow by the biases read. */
START_TEST(test_attention_bias_cost)
{
  pcgc_ptensor in[11];
  in[0] = in[1] = in[2] = F32(2, 5, 16);
  in[3] = in[4] = in[5] = F32(16, 32);
  in[6] = F32(32, 16);
  in[7] = in[8] = in[9] = F32(32);
  in[10] = F32(16);
  pcgc_attrs a = set_int(attrs(PCGC_OP_ATTENTION), "heads", 4);
  pcgc_op_cost c7 = cost_with(PCGC_OP_ATTENTION, &a, 7, in, NULL);
  pcgc_op_cost c10 = cost_with(PCGC_OP_ATTENTION, &a, 10, in, NULL);
  pcgc_op_cost c11 = cost_with(PCGC_OP_ATTENTION, &a, 11, in, NULL);
  EQ(c10.fwd_flops, c7.fwd_flops);
  EQ(c10.bwd_flops, c7.bwd_flops);
  EQ(c11.fwd_flops, c7.fwd_flops);
  EQ(c10.fwd_bytes, c7.fwd_bytes + 4 * 3 * 32);
  EQ(c11.fwd_bytes, c10.fwd_bytes + 4 * 16);
  EQ(c10.bwd_bytes, 2 * c10.fwd_bytes);
}
END_TEST

/* -------------------------------------------------------------- the rest */

START_TEST(test_weight_params)
{
  pcgc_attrs w = set_ints(attrs(PCGC_OP_WEIGHT), "shape", 784, 256);
  pcgc_op_cost c = cost_with(PCGC_OP_WEIGHT, &w, 0, NULL, NULL);
  EQ(c.params, 784 * 256);
  EQ(c.fwd_flops, 0);
  w = set_ints(attrs(PCGC_OP_WEIGHT), "shape", 32, 16, 3, 3);
  c = cost_with(PCGC_OP_WEIGHT, &w, 0, NULL, NULL);
  EQ(c.params, 32 * 16 * 3 * 3);
  pcgc_attrs x = set_ints(attrs(PCGC_OP_INPUT), "shape", 64, 784);
  c = cost_with(PCGC_OP_INPUT, &x, 0, NULL, NULL);
  ZERO(c);
}
END_TEST

START_TEST(test_views_cost_nothing)
{
  pcgc_attrs a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", 32, 6);
  pcgc_op_cost c = COST(PCGC_OP_RESHAPE, &a, F32(8, 4, 6));
  ZERO(c);
  c = COST(PCGC_OP_FLATTEN, NULL, F32(8, 4, 6));
  ZERO(c);
  /* a transpose moves data: no FLOPs, but bytes */
  a = set_ints(attrs(PCGC_OP_TRANSPOSE), "perm", 1, 0);
  c = COST(PCGC_OP_TRANSPOSE, &a, F32(8, 6));
  EQ(c.fwd_flops, 0);
  EQ(c.fwd_bytes, 2 * 4 * 48);
}
END_TEST

START_TEST(test_data_movement_bytes)
{
  pcgc_attrs a = set_int(attrs(PCGC_OP_CONCAT), "axis", 1);
  pcgc_op_cost c = COST(PCGC_OP_CONCAT, &a, F32(2, 3), F32(2, 5));
  EQ(c.fwd_flops, 0);
  EQ(c.fwd_bytes, 4 * (6 + 10 + 16));
  EQ(c.bwd_bytes, 2 * c.fwd_bytes);
  a = set_ints(set_int(attrs(PCGC_OP_SPLIT), "axis", 1), "sizes", 3, 5);
  c = COST(PCGC_OP_SPLIT, &a, F32(2, 8));
  EQ(c.fwd_flops, 0);
  EQ(c.fwd_bytes, 4 * (16 + 6 + 10));
}
END_TEST

START_TEST(test_parallel_ops_cost)
{
  /* reduce adds `degree` partial sums: numel * (degree - 1) */
  pcgc_attrs r = set_int(attrs(PCGC_OP_REDUCE), "degree", 4);
  pcgc_ptensor x = F32(8, 16);
  x.sum = 4;
  pcgc_op_cost c = COST(PCGC_OP_REDUCE, &r, x);
  EQ(c.fwd_flops, 128 * 3);
  EQ(c.bwd_flops, 0);
  EQ(c.fwd_bytes, 4 * 128 * 5);
  EQ(c.params, 0);
  r = set_int(attrs(PCGC_OP_REDUCE), "degree", 2);
  c = COST(PCGC_OP_REDUCE, &r, x);
  EQ(c.fwd_flops, 128);
  /* the others only move data, which the search's cost model prices */
  pcgc_attrs p = set_int(set_int(attrs(PCGC_OP_PARTITION), "dim", 0), "degree", 2);
  c = COST(PCGC_OP_PARTITION, &p, F32(8, 16));
  ZERO(c);
  p = set_int(set_int(attrs(PCGC_OP_COMBINE), "dim", 0), "degree", 2);
  c = COST(PCGC_OP_COMBINE, &p, shard(F32(8, 16), 0, 2));
  ZERO(c);
  p = set_int(attrs(PCGC_OP_REPLICATE), "degree", 2);
  c = COST(PCGC_OP_REPLICATE, &p, F32(8, 16));
  ZERO(c);
  p = set_int(set_int(attrs(PCGC_OP_PIPELINE), "dim", 0), "degree", 2);
  c = COST(PCGC_OP_PIPELINE, &p, F32(8, 16));
  ZERO(c);
}
END_TEST

START_TEST(test_elementwise_flops)
{
  static const struct {
    pcgc_op_kind k;
    double fwd, bwd; /* per element */
  } cases[] = {
      {PCGC_OP_RELU, 1, 1},       {PCGC_OP_GELU, 8, 8},       {PCGC_OP_SIGMOID, 4, 4},   {PCGC_OP_SILU, 5, 5},
      {PCGC_OP_RELU6, 1, 1},      {PCGC_OP_HARDSIGMOID, 3, 3}, {PCGC_OP_HARDSWISH, 4, 4}, {PCGC_OP_LEAKY_RELU, 1, 1},
      {PCGC_OP_TANH, 4, 4},       {PCGC_OP_EXP, 4, 4},        {PCGC_OP_IDENTITY, 0, 0},
      {PCGC_OP_SCALAR_MUL, 1, 1}, {PCGC_OP_DROPOUT, 2, 2},    {PCGC_OP_SOFTMAX, 5, 4},
      {PCGC_OP_LOG_SOFTMAX, 5, 4}, {PCGC_OP_POW, 4, 4},       {PCGC_OP_CLIP, 2, 2},      {PCGC_OP_CAUSAL_MASK, 1, 1}, {PCGC_OP_ROPE, 3, 3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pcgc_attrs a = attrs(cases[i].k);
    if (pcgc_op_attr_index(cases[i].k, "scalar") >= 0)
      ck_assert_int_eq(pcgc_attrs_set_float(&a, "scalar", 3.0), PCGC_OK);
    if (cases[i].k == PCGC_OP_POW) ck_assert_int_eq(pcgc_attrs_set_float(&a, "exponent", 0.5), PCGC_OK);
    pcgc_op_cost c = COST(cases[i].k, &a, F32(8, 6));
    ck_assert_msg(c.fwd_flops == cases[i].fwd * 48, "%s fwd %g", pcgc_op_name(cases[i].k), c.fwd_flops);
    ck_assert_msg(c.bwd_flops == cases[i].bwd * 48, "%s bwd %g", pcgc_op_name(cases[i].k), c.bwd_flops);
    ck_assert_msg(c.fwd_bytes == 2 * 4 * 48, "%s bytes %g", pcgc_op_name(cases[i].k), c.fwd_bytes);
  }
  /* binary ops count the broadcast output */
  pcgc_op_cost c = COST(PCGC_OP_ADD, NULL, F32(8, 16), F32(16));
  EQ(c.fwd_flops, 128);
  EQ(c.bwd_flops, 128);
  EQ(c.fwd_bytes, 4 * (128 + 16 + 128));
  c = COST(PCGC_OP_MUL, NULL, F32(8, 16), F32(8, 16));
  EQ(c.fwd_flops, 128);
  EQ(c.bwd_flops, 256);
}
END_TEST

START_TEST(test_norm_pool_reduce_flops)
{
  pcgc_op_cost c = COST(PCGC_OP_BATCHNORM, NULL, F32(8, 16, 4, 4), F32(16), F32(16));
  EQ(c.fwd_flops, 5 * 2048);
  EQ(c.bwd_flops, 8 * 2048);
  c = COST(PCGC_OP_LAYERNORM, NULL, F32(4, 32));
  EQ(c.fwd_flops, 5 * 128);
  pcgc_attrs p = set_int(attrs(PCGC_OP_POOL2D), "kind", PCGC_POOL_MAX);
  p = set_int(set_int(p, "kernel", 2), "stride", 2);
  c = COST(PCGC_OP_POOL2D, &p, F32(1, 3, 8, 8));
  EQ(c.fwd_flops, 1 * 3 * 4 * 4 * 2 * 2);
  EQ(c.bwd_flops, c.fwd_flops);
  p = set_int(set_int(attrs(PCGC_OP_POOL2D), "kind", PCGC_POOL_AVG), "global", 1);
  c = COST(PCGC_OP_POOL2D, &p, F32(2, 4, 7, 7));
  EQ(c.fwd_flops, 2 * 4 * 49);
  pcgc_attrs r = set_ints(attrs(PCGC_OP_REDUCE_SUM), "dims", 1);
  c = COST(PCGC_OP_REDUCE_SUM, &r, F32(8, 16));
  EQ(c.fwd_flops, 128);
  EQ(c.bwd_flops, 0);
}
END_TEST

START_TEST(test_embedding_and_loss_flops)
{
  /* a gather: no FLOPs; backward scatter-adds rows x D */
  pcgc_op_cost c = COST(PCGC_OP_EMBEDDING, NULL, I32(8, 4), F32(100, 16));
  EQ(c.fwd_flops, 0);
  EQ(c.bwd_flops, 32 * 16);
  EQ(c.fwd_bytes, 4 * 32 + 4 * 32 * 16 + 4 * 32 * 16);
  pcgc_attrs bag = set_int(attrs(PCGC_OP_EMBEDDING), "bag", PCGC_BAG_SUM);
  c = COST(PCGC_OP_EMBEDDING, &bag, I32(8, 4), F32(100, 16));
  EQ(c.fwd_flops, 32 * 16);
  c = COST(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, F32(8, 10), I32(8));
  EQ(c.fwd_flops, 6 * 80);
  EQ(c.bwd_flops, 3 * 80);
  c = COST(PCGC_OP_MSE, NULL, F32(8, 4), F32(8, 4));
  EQ(c.fwd_flops, 3 * 32);
  EQ(c.bwd_flops, 3 * 32);
}
END_TEST

START_TEST(test_costs_ignore_sharding)
{
  /* costs are over logical tensors: a data-parallel linear costs the same */
  pcgc_op_cost seq = COST(PCGC_OP_LINEAR, NULL, F32(64, 784), F32(784, 256));
  pcgc_op_cost dp = COST(PCGC_OP_LINEAR, NULL, shard(F32(64, 784), 0, 4), rep(F32(784, 256), 4));
  EQ(dp.fwd_flops, seq.fwd_flops);
  EQ(dp.bwd_flops, seq.bwd_flops);
  EQ(dp.fwd_bytes, seq.fwd_bytes);
  pcgc_op_cost rp = COST(PCGC_OP_LINEAR, NULL, shard(F32(64, 784), 1, 2), shard(F32(784, 256), 0, 2));
  EQ(rp.fwd_flops, seq.fwd_flops);
}
END_TEST

START_TEST(test_unknown_op_costs_nothing)
{
  pcgc_attrs a = attrs(PCGC_OP_RELU);
  pcgc_op_cost c;
  memset(&c, 0xff, sizeof c);
  pcgc_op_cost_of(PCGC_OP_COUNT, &a, 0, NULL, 0, NULL, &c);
  ZERO(c);
}
END_TEST

static Suite *cost_suite(void)
{
  Suite *s = suite_create("cost");
  TCase *tc = tcase_create("cost");
  tcase_add_test(tc, test_linear_flops);
  tcase_add_test(tc, test_linear_bias_and_activation_flops);
  tcase_add_test(tc, test_matmul_and_batch_matmul_flops);
  tcase_add_test(tc, test_conv2d_flops);
  tcase_add_test(tc, test_attention_flops);
  tcase_add_test(tc, test_attention_bias_cost);
  tcase_add_test(tc, test_weight_params);
  tcase_add_test(tc, test_views_cost_nothing);
  tcase_add_test(tc, test_data_movement_bytes);
  tcase_add_test(tc, test_parallel_ops_cost);
  tcase_add_test(tc, test_elementwise_flops);
  tcase_add_test(tc, test_norm_pool_reduce_flops);
  tcase_add_test(tc, test_embedding_and_loss_flops);
  tcase_add_test(tc, test_costs_ignore_sharding);
  tcase_add_test(tc, test_unknown_op_costs_nothing);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(cost_suite)
