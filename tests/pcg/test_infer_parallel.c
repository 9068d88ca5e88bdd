/*
 * test_infer_parallel.c — parallel-type inference (pcg/infer.c):
 *  - parallel:   the degree algebra of DESIGN.md ("The PCG") op by op —
 *                which shardings are legal, which give partial sums (sum
 *                degree), which replicas an input needs — and the illegal
 *                shardings with their messages and hints;
 *  - pipeline:   the parallel operators themselves and micro-batches flowing
 *                through ordinary operators.
 *
 * Expected values are worked out by hand from the rules, not read back from
 * the implementation. Assertions that exposed a bug in infer.c are kept under
 * a "Regression (fixed)" comment.
 */
#include "infer_helpers.h"

#include "../common/check_main.h"

/* ============================================================ parallel */

START_TEST(test_linear_data_parallel)
{
  result r = INFER(PCGC_OP_LINEAR, NULL, shard(F32(64, 784), 0, 4), rep(F32(784, 256), 4));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 64, 256);
  DEG(r.out[0], 4, 1);
  PAR(r.out[0], 1, 1, 1, -1);
  /* with a bias replicated like the weight and an activation */
  pcgc_attrs a = set_int(attrs(PCGC_OP_LINEAR), "act", PCGC_ACT_RELU);
  r = INFER(PCGC_OP_LINEAR, &a, shard(F32(64, 784), 0, 4), rep(F32(784, 256), 4), rep(F32(256), 4));
  OK(r);
  DEG(r.out[0], 4, 1);
  PAR(r.out[0], 1, 1, 1, -1);
}
END_TEST

START_TEST(test_linear_tensor_parallel_column)
{
  result r = INFER(PCGC_OP_LINEAR, NULL, rep(F32(64, 784), 2), shard(F32(784, 256), 1, 2));
  OK(r);
  DEG(r.out[0], 1, 2);
  PAR(r.out[0], 1, 1, 1, -1);
  pcgc_attrs a = set_int(attrs(PCGC_OP_LINEAR), "act", PCGC_ACT_GELU);
  r = INFER(PCGC_OP_LINEAR, &a, rep(F32(4, 8, 16), 2), shard(F32(16, 32), 1, 2), shard(F32(32), 0, 2));
  OK(r);
  DEG(r.out[0], 1, 1, 2);
  PAR(r.out[0], 1, 1, 1, -1);
}
END_TEST

START_TEST(test_linear_row_parallel_gives_partial_sums)
{
  result r = INFER(PCGC_OP_LINEAR, NULL, shard(F32(64, 784), 1, 2), shard(F32(784, 256), 0, 2));
  OK(r);
  DEG(r.out[0], 1, 1);
  PAR(r.out[0], 2, 1, 1, -1);
  /* a linear map of partial sums is a partial sum (of the same degree) */
  r = INFER(PCGC_OP_MATMUL, NULL, psum(F32(64, 256), 2), rep(F32(256, 10), 2));
  OK(r);
  PAR(r.out[0], 2, 1, 1, -1);
}
END_TEST

START_TEST(test_linear_combined_2x2)
{
  result r = INFER(PCGC_OP_LINEAR, NULL, rep(shard(F32(64, 784), 0, 2), 2), rep(shard(F32(784, 256), 1, 2), 2));
  OK(r);
  DEG(r.out[0], 2, 2);
  PAR(r.out[0], 1, 1, 1, -1);
  /* data x row: sample dim 2 ways, K 2 ways */
  r = INFER(PCGC_OP_LINEAR, NULL, shard(shard(F32(64, 784), 0, 2), 1, 2), rep(shard(F32(784, 256), 0, 2), 2));
  OK(r);
  DEG(r.out[0], 2, 1);
  PAR(r.out[0], 2, 1, 1, -1);
  /* all replicated: the output stays replicated */
  r = INFER(PCGC_OP_LINEAR, NULL, rep(F32(64, 784), 2), rep(F32(784, 256), 2));
  OK(r);
  DEG(r.out[0], 1, 1);
  PAR(r.out[0], 1, 2, 1, -1);
}
END_TEST

START_TEST(test_linear_parallel_errors)
{
  pcgc_attrs relu = set_int(attrs(PCGC_OP_LINEAR), "act", PCGC_ACT_RELU);
  result r = INFER(PCGC_OP_LINEAR, &relu, shard(F32(64, 784), 1, 2), shard(F32(784, 256), 0, 2));
  FAILS(r, PCGC_ERR_TYPE, "relu of a partial sum is not the partial sum of relu", "act=none");
  r = INFER(PCGC_OP_LINEAR, NULL, shard(F32(64, 784), 1, 2), shard(F32(784, 256), 0, 2), rep(F32(256), 2));
  FAILS(r, PCGC_ERR_TYPE, "so the bias would be added 2 times", "add it after reduce()");
  r = INFER(PCGC_OP_LINEAR, NULL, shard(F32(64, 784), 1, 2), F32(784, 256));
  FAILS(r, PCGC_ERR_TYPE, "contraction dim is split 2 ways in the input but 1 ways in the weight",
        "by the same degree");
  r = INFER(PCGC_OP_LINEAR, NULL, shard(F32(64, 784), 0, 4), F32(784, 256));
  FAILS(r, PCGC_ERR_TYPE, "weight has replica degree 1, but this sharding needs 4",
        "insert replicate(degree=4) on the weight");
  r = INFER(PCGC_OP_LINEAR, NULL, F32(64, 784), shard(F32(784, 256), 1, 2));
  FAILS(r, PCGC_ERR_TYPE, "input has replica degree 1", "insert replicate(degree=2) on the input");
  r = INFER(PCGC_OP_LINEAR, NULL, shard(F32(64, 784), 0, 2), rep(F32(784, 256), 4));
  FAILS(r, PCGC_ERR_TYPE, "weight has replica degree 4, but this sharding needs 2",
        "replicated 2 times more than its consumers are split");
  r = INFER(PCGC_OP_LINEAR, NULL, F32(64, 784), psum(F32(784, 256), 2));
  FAILS(r, PCGC_ERR_TYPE, "a weight must be whole", "reduce(degree=2)");
  r = INFER(PCGC_OP_LINEAR, NULL, rep(F32(64, 784), 2), shard(F32(784, 256), 1, 2), F32(256));
  FAILS(r, PCGC_ERR_TYPE, "the bias is split 1 ways but the output features 2 ways", NULL);
}
END_TEST

START_TEST(test_batch_matmul_parallel)
{
  /* batch dims split alike */
  result r = INFER(PCGC_OP_BATCH_MATMUL, NULL, shard(F32(4, 8, 16), 0, 2), shard(F32(4, 16, 6), 0, 2));
  OK(r);
  DEG(r.out[0], 2, 1, 1);
  PAR(r.out[0], 1, 1, 1, -1);
  /* contraction split: partial sums */
  r = INFER(PCGC_OP_BATCH_MATMUL, NULL, shard(F32(4, 8, 16), 2, 2), shard(F32(4, 16, 6), 1, 2));
  OK(r);
  PAR(r.out[0], 2, 1, 1, -1);
  /* M split, b replicated */
  r = INFER(PCGC_OP_BATCH_MATMUL, NULL, shard(F32(4, 8, 16), 1, 2), rep(F32(4, 16, 6), 2));
  OK(r);
  DEG(r.out[0], 1, 2, 1);
  /* N split with transpose_b: b's dim 1 is N */
  pcgc_attrs tb = set_int(attrs(PCGC_OP_BATCH_MATMUL), "transpose_b", 1);
  r = INFER(PCGC_OP_BATCH_MATMUL, &tb, rep(F32(4, 8, 16), 2), shard(F32(4, 6, 16), 1, 2));
  OK(r);
  DEG(r.out[0], 1, 1, 2);
  PAR(r.out[0], 1, 1, 1, -1);
  r = INFER(PCGC_OP_BATCH_MATMUL, NULL, psum(F32(4, 8, 16), 2), psum(F32(4, 16, 6), 2));
  FAILS(r, PCGC_ERR_TYPE, "both a and b are partial sums", NULL);
  r = INFER(PCGC_OP_BATCH_MATMUL, NULL, shard(F32(4, 8, 16), 0, 2), F32(4, 16, 6));
  FAILS(r, PCGC_ERR_TYPE, "batch dim 0 is split 2 ways in a but 1 ways in b", NULL);
}
END_TEST

/* x [8, 16, 32, 32], w [32, 16, 3, 3], padding 1 */
static pcgc_attrs conv_pad1(void) { return set_int(attrs(PCGC_OP_CONV2D), "padding", 1); }

START_TEST(test_conv2d_sample_parallel)
{
  pcgc_attrs a = conv_pad1();
  result r = INFER(PCGC_OP_CONV2D, &a, shard(F32(8, 16, 32, 32), 0, 2), rep(F32(32, 16, 3, 3), 2));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 32, 32, 32);
  DEG(r.out[0], 2, 1, 1, 1);
  PAR(r.out[0], 1, 1, 1, -1);
}
END_TEST

START_TEST(test_conv2d_channel_out_parallel)
{
  pcgc_attrs a = set_int(conv_pad1(), "act", PCGC_ACT_RELU);
  result r = INFER(PCGC_OP_CONV2D, &a, rep(F32(8, 16, 32, 32), 2), shard(F32(32, 16, 3, 3), 0, 2),
                   shard(F32(32), 0, 2));
  OK(r);
  DEG(r.out[0], 1, 2, 1, 1);
  PAR(r.out[0], 1, 1, 1, -1);
}
END_TEST

START_TEST(test_conv2d_channel_in_gives_partial_sums)
{
  pcgc_attrs a = conv_pad1();
  result r = INFER(PCGC_OP_CONV2D, &a, shard(F32(8, 16, 32, 32), 1, 2), shard(F32(32, 16, 3, 3), 1, 2));
  OK(r);
  DEG(r.out[0], 1, 1, 1, 1);
  PAR(r.out[0], 2, 1, 1, -1);
  a = set_int(conv_pad1(), "act", PCGC_ACT_RELU);
  r = INFER(PCGC_OP_CONV2D, &a, shard(F32(8, 16, 32, 32), 1, 2), shard(F32(32, 16, 3, 3), 1, 2));
  FAILS(r, PCGC_ERR_TYPE, "an activation of a partial sum is not a partial sum", "act=none");
  r = INFER(PCGC_OP_CONV2D, &a, shard(F32(8, 16, 32, 32), 1, 2), F32(32, 16, 3, 3));
  FAILS(r, PCGC_ERR_TYPE, "input channels are split 2 ways in the input but 1 ways in the weight", NULL);
}
END_TEST

START_TEST(test_conv2d_grouped_channel_parallel)
{
  pcgc_attrs a = set_int(conv_pad1(), "groups", 4);
  result r = INFER(PCGC_OP_CONV2D, &a, shard(F32(8, 16, 8, 8), 1, 2), shard(F32(16, 4, 3, 3), 0, 2));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 16, 8, 8);
  DEG(r.out[0], 1, 2, 1, 1);
  PAR(r.out[0], 1, 1, 1, -1);
  /* depthwise, channels 4 ways: no partial sums */
  a = set_int(conv_pad1(), "groups", 8);
  r = INFER(PCGC_OP_CONV2D, &a, shard(F32(2, 8, 8, 8), 1, 4), shard(F32(8, 1, 3, 3), 0, 4));
  OK(r);
  DEG(r.out[0], 1, 4, 1, 1);
  PAR(r.out[0], 1, 1, 1, -1);
  a = set_int(conv_pad1(), "groups", 4);
  r = INFER(PCGC_OP_CONV2D, &a, shard(F32(8, 16, 8, 8), 1, 2), shard(F32(16, 4, 3, 3), 0, 4));
  FAILS(r, PCGC_ERR_TYPE, "input channels split 2 ways must match output channels split 4 ways",
        "shard the weight's dim 0 by 2");
}
END_TEST

START_TEST(test_conv2d_spatial_sharding)
{
  /* 1x1 kernel: no window straddles a cut */
  result r = INFER(PCGC_OP_CONV2D, NULL, shard(F32(2, 4, 8, 8), 2, 2), rep(F32(6, 4, 1, 1), 2));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 6, 8, 8);
  DEG(r.out[0], 1, 1, 2, 1);
  PAR(r.out[0], 1, 1, 1, -1);
  /* kernel == stride, no padding */
  pcgc_attrs a = set_int(attrs(PCGC_OP_CONV2D), "stride", 2);
  r = INFER(PCGC_OP_CONV2D, &a, shard(F32(2, 4, 8, 8), 3, 2), rep(F32(6, 4, 2, 2), 2));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 6, 4, 4);
  DEG(r.out[0], 1, 1, 1, 2);
  a = conv_pad1();
  r = INFER(PCGC_OP_CONV2D, &a, shard(F32(8, 16, 32, 32), 2, 2), rep(F32(32, 16, 3, 3), 2));
  FAILS(r, PCGC_ERR_TYPE, "spatial dim 2 is split 2 ways", "halo");
  r = INFER(PCGC_OP_CONV2D, &a, F32(8, 16, 32, 32), shard(F32(32, 16, 3, 3), 2, 3));
  FAILS(r, PCGC_ERR_TYPE, "kernel dims cannot be sharded", "combine(dim=2, degree=3)");
}
END_TEST

START_TEST(test_pool2d_parallel)
{
  pcgc_attrs a = pool(PCGC_POOL_MAX, 2, 2);
  result r = INFER(PCGC_OP_POOL2D, &a, shard(shard(F32(2, 4, 8, 8), 2, 2), 0, 2));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 4, 4, 4);
  DEG(r.out[0], 2, 1, 2, 1);
  PAR(r.out[0], 1, 1, 1, -1);
  pcgc_attrs k3 = pool(PCGC_POOL_MAX, 3, 1);
  r = INFER(PCGC_OP_POOL2D, &k3, shard(F32(2, 4, 8, 8), 3, 2));
  FAILS(r, PCGC_ERR_TYPE, "spatial dim 3 is split 2 ways", "halo");
  r = INFER(PCGC_OP_POOL2D, &a, psum(F32(2, 4, 8, 8), 2));
  FAILS(r, PCGC_ERR_TYPE, "max of partial sums is not a partial sum", "reduce(degree=2)");
  /* average pooling is linear: partial sums and channel shards pass */
  pcgc_attrs avg = pool(PCGC_POOL_AVG, 2, 2);
  r = INFER(PCGC_OP_POOL2D, &avg, rep(shard(psum(F32(2, 4, 8, 8), 2), 1, 2), 3));
  OK(r);
  DEG(r.out[0], 1, 2, 1, 1);
  PAR(r.out[0], 2, 3, 1, -1);
}
END_TEST

START_TEST(test_global_pool_parallel)
{
  pcgc_attrs avg = set_int(set_int(attrs(PCGC_OP_POOL2D), "kind", PCGC_POOL_AVG), "global", 1);
  result r = INFER(PCGC_OP_POOL2D, &avg, shard(shard(shard(F32(4, 8, 6, 6), 2, 2), 3, 3), 0, 2));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 4, 8, 1, 1);
  DEG(r.out[0], 2, 1, 1, 1);
  PAR(r.out[0], 6, 1, 1, -1);
  pcgc_attrs max = set_int(set_int(attrs(PCGC_OP_POOL2D), "kind", PCGC_POOL_MAX), "global", 1);
  r = INFER(PCGC_OP_POOL2D, &max, shard(F32(4, 8, 6, 6), 2, 2));
  FAILS(r, PCGC_ERR_TYPE, "global max pooling over a spatially sharded input", "combine the spatial dims");
  r = INFER(PCGC_OP_POOL2D, &max, shard(F32(4, 8, 6, 6), 1, 2));
  OK(r);
  DEG(r.out[0], 1, 2, 1, 1);
  PAR(r.out[0], 1, 1, 1, -1);
}
END_TEST

START_TEST(test_batchnorm_parallel)
{
  /* batch and spatial sharded: scale and bias replicated over the 4 pieces */
  result r = INFER(PCGC_OP_BATCHNORM, NULL, shard(shard(F32(8, 16, 4, 4), 0, 2), 2, 2), rep(F32(16), 4),
                   rep(F32(16), 4));
  OK(r);
  DEG(r.out[0], 2, 1, 2, 1);
  PAR(r.out[0], 1, 1, 1, -1);
  /* channel sharded: scale and bias split alike */
  r = INFER(PCGC_OP_BATCHNORM, NULL, shard(F32(8, 16, 4, 4), 1, 2), shard(F32(16), 0, 2), shard(F32(16), 0, 2));
  OK(r);
  DEG(r.out[0], 1, 2, 1, 1);
  r = INFER(PCGC_OP_BATCHNORM, NULL, shard(F32(8, 16, 4, 4), 0, 4), F32(16), F32(16));
  FAILS(r, PCGC_ERR_TYPE, "scale has replica degree 1, but this sharding needs 4",
        "replicate(degree=4) on the scale");
  r = INFER(PCGC_OP_BATCHNORM, NULL, shard(F32(8, 16, 4, 4), 1, 2), rep(F32(16), 2), rep(F32(16), 2));
  FAILS(r, PCGC_ERR_TYPE, "scale is split 1 ways but the channels 2 ways", NULL);
  r = INFER(PCGC_OP_BATCHNORM, NULL, psum(F32(8, 16), 2));
  FAILS(r, PCGC_ERR_TYPE, "normalisation of a partial sum", "reduce(degree=2)");
}
END_TEST

START_TEST(test_layernorm_parallel)
{
  result r = INFER(PCGC_OP_LAYERNORM, NULL, shard(shard(F32(4, 6, 8), 0, 2), 1, 3), rep(F32(8), 6),
                   rep(F32(8), 6));
  OK(r);
  DEG(r.out[0], 2, 3, 1);
  PAR(r.out[0], 1, 1, 1, -1);
  r = INFER(PCGC_OP_LAYERNORM, NULL, shard(F32(4, 6, 8), 2, 2));
  FAILS(r, PCGC_ERR_TYPE, "input dim 2 is sharded 2 ways, but layernorm normalises over it",
        "combine(dim=2, degree=2)");
  pcgc_attrs a = set_int(attrs(PCGC_OP_LAYERNORM), "axes", 2);
  r = INFER(PCGC_OP_LAYERNORM, &a, shard(F32(4, 6, 8), 1, 2));
  FAILS(r, PCGC_ERR_TYPE, "input dim 1 is sharded 2 ways", NULL);
  r = INFER(PCGC_OP_LAYERNORM, NULL, psum(F32(4, 6, 8), 2));
  FAILS(r, PCGC_ERR_TYPE, "partial sum", "insert reduce(degree=2)");
  r = INFER(PCGC_OP_LAYERNORM, NULL, shard(F32(4, 6, 8), 0, 2), F32(8), F32(8));
  FAILS(r, PCGC_ERR_TYPE, "scale has replica degree 1, but this sharding needs 2", "replicate(degree=2)");
}
END_TEST

START_TEST(test_embedding_parallel)
{
  /* row-sharded table: each piece returns zeros for ids it lacks */
  result r = INFER(PCGC_OP_EMBEDDING, NULL, rep(I32(8, 4), 2), shard(F32(100, 16), 0, 2));
  OK(r);
  DEG(r.out[0], 1, 1, 1);
  PAR(r.out[0], 2, 1, 1, -1);
  /* column-sharded table: the feature dim is split */
  r = INFER(PCGC_OP_EMBEDDING, NULL, rep(I32(8, 4), 2), shard(F32(100, 16), 1, 2));
  OK(r);
  DEG(r.out[0], 1, 1, 2);
  PAR(r.out[0], 1, 1, 1, -1);
  /* batch-sharded indices, replicated table */
  r = INFER(PCGC_OP_EMBEDDING, NULL, shard(I32(8, 4), 0, 2), rep(F32(100, 16), 2));
  OK(r);
  DEG(r.out[0], 2, 1, 1);
  /* bag over a sharded bag dim: each piece sums its share */
  pcgc_attrs sum = set_int(attrs(PCGC_OP_EMBEDDING), "bag", PCGC_BAG_SUM);
  r = INFER(PCGC_OP_EMBEDDING, &sum, shard(I32(8, 4), 1, 2), rep(F32(100, 16), 2));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 16);
  DEG(r.out[0], 1, 1);
  PAR(r.out[0], 2, 1, 1, -1);
  r = INFER(PCGC_OP_EMBEDDING, NULL, I32(8, 4), shard(F32(100, 16), 0, 2));
  FAILS(r, PCGC_ERR_TYPE, "indices has replica degree 1", "replicate(degree=2) on the indices");
  r = INFER(PCGC_OP_EMBEDDING, NULL, shard(I32(8, 4), 0, 2), F32(100, 16));
  FAILS(r, PCGC_ERR_TYPE, "table has replica degree 1, but this sharding needs 2", NULL);
}
END_TEST

START_TEST(test_unary_parallel)
{
  /* every unary op passes shard degrees and replicas through */
  for (int i = 0; i < N_UNARY; i++) {
    pcgc_attrs a = unary_attrs(unary_ops[i]);
    result r = INFER(unary_ops[i], &a, rep(shard(shard(F32(8, 6), 0, 2), 1, 3), 2));
    ck_assert_msg(r.s == PCGC_OK, "%s: %s", pcgc_op_name(unary_ops[i]), r.err.message);
    DEG(r.out[0], 2, 3);
    PAR(r.out[0], 1, 2, 1, -1);
  }
  /* linear unary ops pass partial sums; the rest need reduce() first */
  for (int i = 0; i < N_UNARY; i++) {
    pcgc_op_kind k = unary_ops[i];
    pcgc_attrs a = unary_attrs(k);
    result r = INFER(k, &a, psum(F32(8, 6), 2));
    bool linear = k == PCGC_OP_IDENTITY || k == PCGC_OP_SCALAR_MUL || k == PCGC_OP_SCALAR_DIV ||
                  k == PCGC_OP_DROPOUT;
    if (linear) {
      ck_assert_msg(r.s == PCGC_OK, "%s: %s", pcgc_op_name(k), r.err.message);
      PAR(r.out[0], 2, 1, 1, -1);
    } else {
      ck_assert_msg(r.s == PCGC_ERR_TYPE, "%s of a partial sum accepted", pcgc_op_name(k));
      ck_assert_msg(strstr(r.err.message, "partial sum"), "%s: %s", pcgc_op_name(k), r.err.message);
      ck_assert_msg(strstr(r.err.hint, "reduce(degree=2)"), "%s hint: %s", pcgc_op_name(k), r.err.hint);
    }
  }
  result r = INFER(PCGC_OP_GELU, NULL, psum(F32(8, 6), 4));
  FAILS(r, PCGC_ERR_TYPE, "gelu of a partial sum is not the partial sum of gelu", "insert reduce(degree=4)");
}
END_TEST

START_TEST(test_binary_parallel)
{
  result r = INFER(PCGC_OP_ADD, NULL, psum(F32(8, 16), 2), psum(F32(8, 16), 2));
  OK(r);
  PAR(r.out[0], 2, 1, 1, -1);
  r = INFER(PCGC_OP_SUB, NULL, shard(F32(8, 16), 1, 2), shard(F32(8, 16), 1, 2));
  OK(r);
  DEG(r.out[0], 1, 2);
  PAR(r.out[0], 1, 1, 1, -1);
  /* product of a partial sum and a whole (replicated) tensor */
  r = INFER(PCGC_OP_MUL, NULL, psum(F32(8, 16), 2), rep(F32(8, 16), 2));
  OK(r);
  PAR(r.out[0], 2, 1, 1, -1);
  r = INFER(PCGC_OP_DIV, NULL, psum(F32(8, 16), 2), rep(F32(16), 2));
  OK(r);
  PAR(r.out[0], 2, 1, 1, -1);
  /* broadcast add of a replicated bias to a sample-sharded tensor */
  r = INFER(PCGC_OP_ADD, NULL, shard(F32(8, 16), 0, 4), rep(F32(16), 4));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 16);
  DEG(r.out[0], 4, 1);
  PAR(r.out[0], 1, 1, 1, -1);
  /* broadcast along a size-1 dim that the other input shards */
  r = INFER(PCGC_OP_MUL, NULL, shard(F32(8, 16), 1, 2), rep(F32(8, 1), 2));
  OK(r);
  DEG(r.out[0], 1, 2);
  /* both replicated: output replicated */
  r = INFER(PCGC_OP_ADD, NULL, rep(F32(4), 3), rep(F32(4), 3));
  OK(r);
  PAR(r.out[0], 1, 3, 1, -1);
}
END_TEST

START_TEST(test_binary_parallel_errors)
{
  result r = INFER(PCGC_OP_ADD, NULL, psum(F32(8, 16), 2), rep(F32(8, 16), 2));
  FAILS(r, PCGC_ERR_TYPE, "a has sum degree 2 and b has 1", "reduce()");
  r = INFER(PCGC_OP_ADD, NULL, psum(F32(8, 16), 2), psum(F32(8, 16), 4));
  FAILS(r, PCGC_ERR_TYPE, "a has sum degree 2 and b has 4", NULL);
  r = INFER(PCGC_OP_MUL, NULL, psum(F32(8, 16), 2), psum(F32(8, 16), 2));
  FAILS(r, PCGC_ERR_TYPE, "both inputs are partial sums", NULL);
  r = INFER(PCGC_OP_DIV, NULL, rep(F32(8, 16), 2), psum(F32(8, 16), 2));
  FAILS(r, PCGC_ERR_TYPE, "dividing by a partial sum is not linear", "reduce(degree=2)");
  r = INFER(PCGC_OP_ADD, NULL, shard(F32(8, 16), 0, 4), F32(16));
  FAILS(r, PCGC_ERR_TYPE, "a arrives as 4 pieces and b as 1", "replicate()");
  r = INFER(PCGC_OP_ADD, NULL, shard(F32(8, 16), 0, 2), rep(F32(8, 16), 2));
  FAILS(r, PCGC_ERR_TYPE, "dim 0 is split 2 ways in a but 1 ways in b", NULL);
}
END_TEST

START_TEST(test_concat_split_parallel)
{
  pcgc_attrs a = set_int(attrs(PCGC_OP_CONCAT), "axis", 1);
  result r = INFER(PCGC_OP_CONCAT, &a, rep(shard(F32(4, 3), 0, 2), 2), rep(shard(F32(4, 5), 0, 2), 2),
                   rep(shard(F32(4, 1), 0, 2), 2));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 4, 9);
  DEG(r.out[0], 2, 1);
  PAR(r.out[0], 1, 2, 1, -1);
  r = INFER(PCGC_OP_CONCAT, &a, psum(F32(4, 3), 2), psum(F32(4, 5), 2));
  OK(r);
  PAR(r.out[0], 2, 1, 1, -1);
  r = INFER(PCGC_OP_CONCAT, &a, shard(F32(4, 4), 1, 2), shard(F32(4, 4), 1, 2));
  FAILS(r, PCGC_ERR_TYPE, "concatenating along a sharded dim would interleave the pieces", "combine(dim=1");
  r = INFER(PCGC_OP_CONCAT, &a, shard(F32(4, 3), 0, 2), F32(4, 5));
  FAILS(r, PCGC_ERR_TYPE, "dim 0 is split 1 ways in input 1 but 2 ways in input 0", NULL);
  r = INFER(PCGC_OP_CONCAT, &a, psum(F32(4, 3), 2), rep(F32(4, 5), 2));
  FAILS(r, PCGC_ERR_TYPE, "sum/replica degrees", NULL);

  pcgc_attrs s = set_ints(set_int(attrs(PCGC_OP_SPLIT), "axis", 1), "sizes", 3, 7);
  r = INFER(PCGC_OP_SPLIT, &s, psum(shard(F32(4, 10), 0, 2), 3));
  OK(r);
  DEG(r.out[0], 2, 1);
  DEG(r.out[1], 2, 1);
  PAR(r.out[0], 3, 1, 1, -1);
  PAR(r.out[1], 3, 1, 1, -1);
  r = INFER(PCGC_OP_SPLIT, &s, shard(F32(4, 10), 1, 2));
  FAILS(r, PCGC_ERR_TYPE, "splitting along a sharded dim does not follow the cuts", "combine(dim=1, degree=2)");
}
END_TEST

START_TEST(test_reshape_keeps_outer_shard)
{
  pcgc_attrs a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", 32, 6);
  result r = INFER(PCGC_OP_RESHAPE, &a, shard(F32(8, 4, 6), 0, 2));
  OK(r);
  DEG(r.out[0], 2, 1);
  PAR(r.out[0], 1, 1, 1, -1);
  a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", 8, 4, 6);
  r = INFER(PCGC_OP_RESHAPE, &a, shard(F32(32, 6), 0, 2));
  OK(r);
  DEG(r.out[0], 2, 1, 1);
  /* inner dim: [4, 12] dim 1 split 2 ways is [4, 6|6]; as [4, 6, 2] that is dim 1 */
  a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", 4, 6, 2);
  r = INFER(PCGC_OP_RESHAPE, &a, shard(F32(4, 12), 1, 2));
  OK(r);
  DEG(r.out[0], 1, 2, 1);
  a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", 4, 3, 4);
  r = INFER(PCGC_OP_RESHAPE, &a, shard(F32(4, 12), 1, 3));
  OK(r);
  DEG(r.out[0], 1, 3, 1);
  /* ... but 2 pieces of 6 are not blocks of [3, 4]'s dim 0 (size 3) */
  r = INFER(PCGC_OP_RESHAPE, &a, shard(F32(4, 12), 1, 2));
  FAILS(r, PCGC_ERR_TYPE, "not contiguous blocks", NULL);
  /* an inner sharded dim that stays innermost */
  a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", 32, 6);
  r = INFER(PCGC_OP_RESHAPE, &a, rep(psum(shard(F32(8, 4, 6), 2, 2), 2), 3));
  OK(r);
  DEG(r.out[0], 1, 2);
  PAR(r.out[0], 2, 3, 1, -1);
}
END_TEST

START_TEST(test_reshape_breaking_contiguity_fails)
{
  pcgc_attrs a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", 32, 6);
  result r = INFER(PCGC_OP_RESHAPE, &a, shard(F32(8, 4, 6), 1, 2));
  FAILS(r, PCGC_ERR_TYPE, "dim 1 is split 2 ways, and its pieces are not contiguous blocks",
        "combine(dim=1) before reshaping");
  a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", 48);
  r = INFER(PCGC_OP_RESHAPE, &a, shard(F32(8, 6), 1, 2));
  FAILS(r, PCGC_ERR_TYPE, "not contiguous", NULL);
}
END_TEST

START_TEST(test_reshape_unit_dims_before_shard)
{
  /* Regression (fixed): reshape_degrees (pcg/infer.c) does not skip size-1 output dims at
   * the shard's flat offset: [4, 12] dim 1 x2 -> [4, 1, 12] should map the
   * shard to output dim 2 (same pieces: 4 rows of 6|6), but it lands on the
   * size-1 dim 1 and fails "not contiguous blocks". */
  pcgc_attrs a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", 4, 1, 12);
  result r = INFER(PCGC_OP_RESHAPE, &a, shard(F32(4, 12), 1, 2));
  OK(r);
  DEG(r.out[0], 1, 1, 2);
  /* sharded dim 0 with a unit dim after it is fine today */
  r = INFER(PCGC_OP_RESHAPE, &a, shard(F32(4, 12), 0, 2));
  OK(r);
  DEG(r.out[0], 2, 1, 1);
}
END_TEST

START_TEST(test_flatten_parallel)
{
  result r = INFER(PCGC_OP_FLATTEN, NULL, shard(F32(8, 3, 4), 0, 2));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 12);
  DEG(r.out[0], 2, 1);
  pcgc_attrs a = set_int(attrs(PCGC_OP_FLATTEN), "axis", 2);
  r = INFER(PCGC_OP_FLATTEN, &a, psum(shard(F32(8, 3, 4), 2, 2), 2));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 24, 4);
  DEG(r.out[0], 1, 2);
  PAR(r.out[0], 2, 1, 1, -1);
  /* dim 1 is the outermost of the flattened group: its pieces stay contiguous */
  r = INFER(PCGC_OP_FLATTEN, NULL, shard(F32(8, 3, 4), 1, 3));
  OK(r);
  DEG(r.out[0], 1, 3);
  /* dim 2 is not: [8, 3, 4/2] pieces interleave in [8, 12] */
  r = INFER(PCGC_OP_FLATTEN, NULL, shard(F32(8, 3, 4), 2, 2));
  FAILS(r, PCGC_ERR_TYPE, "dim 2 is split 2 ways, and its pieces are not contiguous", "combine(dim=2)");
  /* Regression (fixed): flatten(axis=0) of a dim-0-sharded tensor gives [1, numel]; the
   * shard belongs on dim 1 (same flat pieces) but reshape_degrees puts it on
   * the size-1 dim 0 and fails. Same root cause as the reshape unit-dim bug. */
  a = set_int(attrs(PCGC_OP_FLATTEN), "axis", 0);
  r = INFER(PCGC_OP_FLATTEN, &a, shard(F32(8, 3, 4), 0, 2));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 1, 96);
  DEG(r.out[0], 1, 2);
}
END_TEST

START_TEST(test_transpose_permutes_degrees)
{
  pcgc_attrs a = set_ints(attrs(PCGC_OP_TRANSPOSE), "perm", 2, 0, 1);
  result r = INFER(PCGC_OP_TRANSPOSE, &a, rep(psum(shard(shard(F32(2, 3, 4), 0, 2), 2, 4), 2), 3));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 4, 2, 3);
  DEG(r.out[0], 4, 2, 1);
  PAR(r.out[0], 2, 3, 1, -1);
}
END_TEST

START_TEST(test_softmax_parallel)
{
  result r = INFER(PCGC_OP_SOFTMAX, NULL, rep(shard(F32(8, 10), 0, 2), 2));
  OK(r);
  DEG(r.out[0], 2, 1);
  PAR(r.out[0], 1, 2, 1, -1);
  r = INFER(PCGC_OP_SOFTMAX, NULL, shard(F32(8, 10), 1, 2));
  FAILS(r, PCGC_ERR_TYPE, "input dim 1 is sharded 2 ways, but softmax normalises along it",
        "combine(dim=1, degree=2)");
  pcgc_attrs a = set_int(attrs(PCGC_OP_SOFTMAX), "axis", 0);
  r = INFER(PCGC_OP_SOFTMAX, &a, shard(F32(8, 10), 0, 2));
  FAILS(r, PCGC_ERR_TYPE, "softmax normalises along it", NULL);
  r = INFER(PCGC_OP_SOFTMAX, NULL, psum(F32(8, 10), 2));
  FAILS(r, PCGC_ERR_TYPE, "softmax of a partial sum is not a partial sum", "reduce(degree=2)");
}
END_TEST

START_TEST(test_reduce_parallel)
{
  pcgc_attrs a = set_ints(attrs(PCGC_OP_REDUCE_SUM), "dims", 1);
  result r = INFER(PCGC_OP_REDUCE_SUM, &a, shard(F32(8, 16), 1, 4));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8);
  DEG(r.out[0], 1);
  PAR(r.out[0], 4, 1, 1, -1);
  r = INFER(PCGC_OP_REDUCE_SUM, &a, rep(shard(F32(8, 16), 0, 2), 3));
  OK(r);
  DEG(r.out[0], 2);
  PAR(r.out[0], 1, 3, 1, -1);
  pcgc_attrs m = set_int(set_ints(attrs(PCGC_OP_REDUCE_MEAN), "dims", 0, 2), "keepdims", 1);
  r = INFER(PCGC_OP_REDUCE_MEAN, &m, psum(shard(shard(F32(4, 6, 8), 0, 2), 2, 2), 3));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 1, 6, 1);
  DEG(r.out[0], 1, 1, 1);
  PAR(r.out[0], 12, 1, 1, -1);
  /* reduce_max: the maximum of pieces is not a sum of them */
  pcgc_attrs x = set_ints(attrs(PCGC_OP_REDUCE_MAX), "dims", 1);
  r = INFER(PCGC_OP_REDUCE_MAX, &x, rep(shard(F32(8, 16), 0, 2), 3));
  OK(r);
  DEG(r.out[0], 2);
  PAR(r.out[0], 1, 3, 1, -1);
  r = INFER(PCGC_OP_REDUCE_MAX, &x, shard(F32(8, 16), 1, 4));
  FAILS(r, PCGC_ERR_TYPE, "input dim 1 is sharded 4 ways, but reduce_max takes the maximum over it",
        "combine(dim=1, degree=4)");
  r = INFER(PCGC_OP_REDUCE_MAX, &x, psum(F32(8, 16), 2));
  FAILS(r, PCGC_ERR_TYPE, "the maximum of a partial sum is not a partial sum", "reduce(degree=2)");
}
END_TEST

START_TEST(test_log_softmax_and_mask_parallel)
{
  result r = INFER(PCGC_OP_LOG_SOFTMAX, NULL, rep(shard(F32(8, 10), 0, 2), 2));
  OK(r);
  DEG(r.out[0], 2, 1);
  r = INFER(PCGC_OP_LOG_SOFTMAX, NULL, shard(F32(8, 10), 1, 2));
  FAILS(r, PCGC_ERR_TYPE, "input dim 1 is sharded 2 ways, but log_softmax normalises along it", NULL);
  r = INFER(PCGC_OP_LOG_SOFTMAX, NULL, psum(F32(8, 10), 2));
  FAILS(r, PCGC_ERR_TYPE, "log_softmax of a partial sum is not a partial sum", "reduce(degree=2)");
  /* causal_mask: batch and heads may be split, rows and columns not */
  r = INFER(PCGC_OP_CAUSAL_MASK, NULL, rep(shard(shard(F32(4, 6, 5, 5), 0, 2), 1, 3), 2));
  OK(r);
  DEG(r.out[0], 2, 3, 1, 1);
  PAR(r.out[0], 1, 2, 1, -1);
  r = INFER(PCGC_OP_CAUSAL_MASK, NULL, shard(F32(4, 5, 5), 1, 5));
  FAILS(r, PCGC_ERR_TYPE, "input dim 1 is sharded 5 ways, but the mask depends on the row index", NULL);
  r = INFER(PCGC_OP_CAUSAL_MASK, NULL, shard(F32(4, 5, 5), 2, 5));
  FAILS(r, PCGC_ERR_TYPE, "the mask depends on the column index", NULL);
  r = INFER(PCGC_OP_CAUSAL_MASK, NULL, psum(F32(5, 5), 2));
  FAILS(r, PCGC_ERR_TYPE, "masking a partial sum", "reduce(degree=2)");
  r = INFER(PCGC_OP_CAUSAL_MASK, NULL, F32(5));
  FAILS(r, PCGC_ERR_TYPE, "at least 2 dims", NULL);
  /* rope: linear, so partial sums pass; positions and features whole */
  r = INFER(PCGC_OP_ROPE, NULL, psum(shard(F32(4, 2, 6, 8), 1, 2), 3));
  OK(r);
  DEG(r.out[0], 1, 2, 1, 1);
  PAR(r.out[0], 3, 1, 1, -1);
  r = INFER(PCGC_OP_ROPE, NULL, shard(F32(4, 6, 8), 1, 2));
  FAILS(r, PCGC_ERR_TYPE, "rope rotates by the position along it", NULL);
  r = INFER(PCGC_OP_ROPE, NULL, shard(F32(4, 6, 8), 2, 2));
  FAILS(r, PCGC_ERR_TYPE, "rope pairs its two halves", NULL);
  r = INFER(PCGC_OP_ROPE, NULL, F32(4, 6, 7));
  FAILS(r, PCGC_ERR_TYPE, "must be even", NULL);
}
END_TEST

START_TEST(test_attention_by_heads)
{
  pcgc_ptensor in[11];
  attn_inputs(in, false);
  for (int i = 0; i < 3; i++) in[i] = rep(in[i], 2);
  for (int i = 3; i < 6; i++) in[i] = shard(in[i], 1, 2);
  in[6] = shard(in[6], 0, 2);
  pcgc_attrs a = attn_attrs(4, true);
  result r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 5, 16);
  DEG(r.out[0], 1, 1, 1);
  PAR(r.out[0], 2, 1, 1, -1);
  /* heads split differently in wk */
  in[4] = F32(16, 32);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  FAILS(r, PCGC_ERR_TYPE, "wq, wk and wv must be split the same way by heads", NULL);
  /* wo not split like the heads */
  attn_inputs(in, false);
  for (int i = 0; i < 3; i++) in[i] = rep(in[i], 2);
  for (int i = 3; i < 6; i++) in[i] = shard(in[i], 1, 2);
  in[6] = rep(in[6], 2);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  FAILS(r, PCGC_ERR_TYPE, "wo's dim 0 must be split like the heads (2 ways), got 1", NULL);
  /* grouped-query: 4 heads sharing 2 key/value heads (wk, wv [16, 16]) split 2 ways, not 4 */
  attn_inputs(in, false);
  in[4] = in[5] = F32(16, 16);
  for (int d = 2; d <= 4; d += 2) {
    pcgc_ptensor g[7];
    for (int i = 0; i < 3; i++) g[i] = rep(in[i], d);
    for (int i = 3; i < 6; i++) g[i] = shard(in[i], 1, d);
    g[6] = shard(in[6], 0, d);
    r = infer_with(PCGC_OP_ATTENTION, &a, 7, g);
    if (d == 2) {
      OK(r);
      PAR(r.out[0], 2, 1, 1, -1);
    } else {
      FAILS(r, PCGC_ERR_TYPE, "4 heads (2 key/value heads) cannot be split 4 ways", "divides both heads=4");
    }
  }
}
END_TEST

START_TEST(test_attention_by_batch_and_query)
{
  pcgc_ptensor in[11];
  int n = attn_inputs(in, true);
  for (int i = 0; i < 3; i++) in[i] = shard(in[i], 0, 2);
  for (int i = 3; i < n; i++) in[i] = rep(in[i], 2);
  pcgc_attrs a = attn_attrs(4, false);
  result r = infer_with(PCGC_OP_ATTENTION, &a, n, in);
  OK(r);
  DEG(r.out[0], 2, 1, 1);
  PAR(r.out[0], 1, 1, 1, -1);
  /* query sequence split: keys and values replicated */
  attn_inputs(in, false);
  in[0] = shard(in[0], 1, 5);
  in[1] = rep(in[1], 5);
  in[2] = rep(in[2], 5);
  for (int i = 3; i < 7; i++) in[i] = rep(in[i], 5);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  OK(r);
  DEG(r.out[0], 1, 5, 1);
  PAR(r.out[0], 1, 1, 1, -1);
}
END_TEST

START_TEST(test_attention_parallel_errors)
{
  pcgc_ptensor in[11];
  int n = attn_inputs(in, true);
  for (int i = 0; i < 3; i++) in[i] = rep(in[i], 2);
  for (int i = 3; i < 6; i++) in[i] = shard(in[i], 1, 2);
  in[6] = shard(in[6], 0, 2);
  for (int i = 7; i < 10; i++) in[i] = shard(in[i], 0, 2);
  pcgc_attrs a = attn_attrs(4, false);
  result r = infer_with(PCGC_OP_ATTENTION, &a, n, in);
  FAILS(r, PCGC_ERR_TYPE, "the output bias bo would be added 2 times", "add bo after reduce()");
  /* keys sharded along the sequence */
  attn_inputs(in, false);
  in[1] = shard(in[1], 1, 5);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  FAILS(r, PCGC_ERR_TYPE, "every query needs all keys", "combine(dim=1, degree=5)");
  /* feature dim of q sharded */
  attn_inputs(in, false);
  in[0] = shard(in[0], 2, 2);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  FAILS(r, PCGC_ERR_TYPE, "q dim 2 is sharded 2 ways", NULL);
  /* 3 heads cannot be split 2 ways (E = 24) */
  attn_inputs(in, false);
  for (int i = 0; i < 3; i++) in[i] = rep(in[i], 2);
  for (int i = 3; i < 6; i++) in[i] = shard(F32(16, 24), 1, 2);
  in[6] = shard(F32(24, 16), 0, 2);
  pcgc_attrs a3 = attn_attrs(3, false);
  r = infer_with(PCGC_OP_ATTENTION, &a3, 7, in);
  FAILS(r, PCGC_ERR_TYPE, "3 heads cannot be split 2 ways", "divides heads=3");
  /* partial-sum query */
  attn_inputs(in, false);
  in[0] = psum(in[0], 2);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  FAILS(r, PCGC_ERR_TYPE, "attention is not linear in its inputs", "reduce(degree=2)");
}
END_TEST

START_TEST(test_attention_sharded_output_bias)
{
  /* Regression (fixed): infer_attention (pcg/infer.c) never checks bo's shard degree. bo is
   * added to output features, which attention never splits (wo's dim 1 must
   * be whole), so a sharded bo must be rejected; today bo [16] split 2 ways
   * with replica 1 is accepted and the output claims 1 piece while bo
   * arrives as 2. */
  pcgc_ptensor in[11];
  int n = attn_inputs(in, true);
  in[10] = shard(in[10], 0, 2);
  pcgc_attrs a = attn_attrs(4, false);
  result r = infer_with(PCGC_OP_ATTENTION, &a, n, in);
  FAILS(r, PCGC_ERR_TYPE, "bo", NULL);
  (void)r;
}
END_TEST

/* 10 inputs (bq, bk, bv, no bo) split by heads: the biases are split like
 * wq/wk/wv's dim 1 and the output is a partial sum of the head split's degree,
 * which is fine since no bias is added to it inside the op. */
START_TEST(test_attention_qkv_bias_by_heads)
{
  pcgc_ptensor in[11];
  pcgc_attrs a = attn_attrs(4, true);
  for (int d = 2; d <= 4; d += 2) {
    attn_inputs(in, true);
    for (int i = 0; i < 3; i++) in[i] = rep(in[i], d);
    for (int i = 3; i < 6; i++) in[i] = shard(in[i], 1, d);
    in[6] = shard(in[6], 0, d);
    for (int i = 7; i < 10; i++) in[i] = shard(in[i], 0, d);
    result r = infer_with(PCGC_OP_ATTENTION, &a, 10, in);
    OK(r);
    SHAPE(r.out[0], PCGC_F32, 2, 5, 16);
    DEG(r.out[0], 1, 1, 1);
    PAR(r.out[0], d, 1, 1, -1);
  }
  /* heads x batch: 2 x 2, weights and biases replicated over the batch shards */
  attn_inputs(in, true);
  for (int i = 0; i < 3; i++) in[i] = rep(shard(in[i], 0, 2), 2);
  for (int i = 3; i < 6; i++) in[i] = rep(shard(in[i], 1, 2), 2);
  in[6] = rep(shard(in[6], 0, 2), 2);
  for (int i = 7; i < 10; i++) in[i] = rep(shard(in[i], 0, 2), 2);
  result r = infer_with(PCGC_OP_ATTENTION, &a, 10, in);
  OK(r);
  DEG(r.out[0], 2, 1, 1);
  PAR(r.out[0], 2, 1, 1, -1);
  /* unsplit biases with split heads */
  attn_inputs(in, true);
  for (int i = 0; i < 3; i++) in[i] = rep(in[i], 2);
  for (int i = 3; i < 6; i++) in[i] = shard(in[i], 1, 2);
  in[6] = shard(in[6], 0, 2);
  in[7] = shard(in[7], 0, 2);
  in[8] = rep(in[8], 2);
  in[9] = shard(in[9], 0, 2);
  r = infer_with(PCGC_OP_ATTENTION, &a, 10, in);
  FAILS(r, PCGC_ERR_TYPE, "bk must be split like the heads (2 ways)", NULL);
  /* a split bias with whole heads */
  attn_inputs(in, true);
  in[9] = shard(in[9], 0, 2);
  r = infer_with(PCGC_OP_ATTENTION, &a, 10, in);
  FAILS(r, PCGC_ERR_TYPE, "bv must be split like the heads (1 ways)", NULL);
  /* with bo (11 inputs) the same head split is still refused */
  attn_inputs(in, true);
  for (int i = 0; i < 3; i++) in[i] = rep(in[i], 2);
  for (int i = 3; i < 6; i++) in[i] = shard(in[i], 1, 2);
  in[6] = shard(in[6], 0, 2);
  for (int i = 7; i < 10; i++) in[i] = shard(in[i], 0, 2);
  in[10] = rep(in[10], 2);
  r = infer_with(PCGC_OP_ATTENTION, &a, 11, in);
  FAILS(r, PCGC_ERR_TYPE, "the output bias bo would be added 2 times", "10 inputs");
}
END_TEST

START_TEST(test_cross_entropy_parallel)
{
  result r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, shard(F32(8, 10), 0, 4), shard(I32(8), 0, 4));
  OK(r);
  SCALAR(r.out[0], PCGC_F32);
  PAR(r.out[0], 4, 1, 1, -1);
  r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, rep(shard(shard(F32(4, 6, 10), 0, 2), 1, 3), 2),
            rep(shard(shard(I32(4, 6), 0, 2), 1, 3), 2));
  OK(r);
  PAR(r.out[0], 6, 2, 1, -1);
  r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, shard(F32(8, 10), 1, 2), rep(I32(8), 2));
  FAILS(r, PCGC_ERR_TYPE, "softmax normalises over the classes", "combine(dim=1, degree=2)");
  r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, shard(F32(8, 10), 0, 2), I32(8));
  FAILS(r, PCGC_ERR_TYPE, "dim 0 is split 2 ways in the logits but 1 ways in the labels", NULL);
  r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, psum(F32(8, 10), 2), I32(8));
  FAILS(r, PCGC_ERR_TYPE, "logits is a partial sum", "reduce(degree=2)");
  r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, rep(F32(8, 10), 2), I32(8));
  FAILS(r, PCGC_ERR_TYPE, "replica degrees 2 and 1", NULL);
}
END_TEST

START_TEST(test_mse_parallel)
{
  result r = INFER(PCGC_OP_MSE, NULL, shard(shard(F32(8, 4), 0, 2), 1, 2), shard(shard(F32(8, 4), 0, 2), 1, 2));
  OK(r);
  SCALAR(r.out[0], PCGC_F32);
  PAR(r.out[0], 4, 1, 1, -1);
  r = INFER(PCGC_OP_MSE, NULL, shard(F32(8, 4), 0, 2), F32(8, 4));
  FAILS(r, PCGC_ERR_TYPE, "dim 0 is split 2 ways in the prediction but 1 ways in the target", NULL);
  r = INFER(PCGC_OP_MSE, NULL, F32(8, 4), psum(F32(8, 4), 2));
  FAILS(r, PCGC_ERR_TYPE, "the square of a partial sum", "reduce(degree=2)");
}
END_TEST

START_TEST(test_cross_entropy_partial_sum_labels)
{
  /* Regression (fixed): infer_xent (pcg/infer.c) checks that the logits are whole but not
   * the labels: integer class ids given as 2 partial sums are accepted. */
  result r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, F32(8, 10), psum(I32(8), 2));
  FAILS(r, PCGC_ERR_TYPE, "labels is a partial sum", "reduce(degree=2)");
  (void)r;
}
END_TEST

START_TEST(test_axis_of_a_scalar)
{
  pcgc_ptensor s;
  pcgc_ptensor_init(&s, PCGC_F32, 0, NULL);
  result r = INFER(PCGC_OP_SOFTMAX, NULL, s);
  FAILS(r, PCGC_ERR_TYPE, "axis -1 is out of range for a rank-0 tensor", NULL);
  /* Regression (fixed): norm_axis (pcg/infer.c) hints "use 0..-1, or -1..-0 to count from
   * the end" for a rank-0 tensor, which has no valid axis at all. */
  ck_assert_msg(strstr(r.err.hint, "0..-1") == NULL, "hint: %s", r.err.hint);
}
END_TEST

/* ======================================== parallel operators, pipelines */

START_TEST(test_partition_and_combine)
{
  pcgc_attrs p = par(PCGC_OP_PARTITION, 0, 4);
  result r = INFER(PCGC_OP_PARTITION, &p, psum(rep(F32(8, 16), 3), 2));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 16);
  DEG(r.out[0], 4, 1);
  PAR(r.out[0], 2, 3, 1, -1);
  p = par(PCGC_OP_PARTITION, -1, 2);
  r = INFER(PCGC_OP_PARTITION, &p, shard(F32(8, 16), 1, 4));
  OK(r);
  DEG(r.out[0], 1, 8);
  p = par(PCGC_OP_PARTITION, 0, 3);
  r = INFER(PCGC_OP_PARTITION, &p, F32(10, 16));
  FAILS(r, PCGC_ERR_TYPE, "dim 0 has size 10, which cannot be cut into 3 equal pieces", "divides 10");
  p = par(PCGC_OP_PARTITION, 0, 3);
  r = INFER(PCGC_OP_PARTITION, &p, shard(F32(8, 16), 0, 2));
  FAILS(r, PCGC_ERR_TYPE, "cannot be cut into 6 equal pieces", "divides 4");
  p = par(PCGC_OP_PARTITION, 2, 2);
  r = INFER(PCGC_OP_PARTITION, &p, F32(8, 16));
  FAILS(r, PCGC_ERR_TYPE, "dim 2 is out of range", NULL);
  p = par(PCGC_OP_PARTITION, 0, 0);
  r = INFER(PCGC_OP_PARTITION, &p, F32(8, 16));
  FAILS(r, PCGC_ERR_TYPE, "degree must be between 1 and 2^20, got 0", NULL);

  pcgc_attrs c = par(PCGC_OP_COMBINE, 0, 2);
  r = INFER(PCGC_OP_COMBINE, &c, rep(shard(F32(8, 16), 0, 4), 2));
  OK(r);
  DEG(r.out[0], 2, 1);
  PAR(r.out[0], 1, 2, 1, -1);
  c = par(PCGC_OP_COMBINE, 0, 3);
  r = INFER(PCGC_OP_COMBINE, &c, shard(F32(8, 16), 0, 4));
  FAILS(r, PCGC_ERR_TYPE, "dim 0 is split 4 ways, which cannot be combined by 3",
        "must divide the dim's current shard degree 4");
  c = par(PCGC_OP_COMBINE, 1, 2);
  r = INFER(PCGC_OP_COMBINE, &c, shard(F32(8, 16), 0, 4));
  FAILS(r, PCGC_ERR_TYPE, "dim 1 is split 1 ways", NULL);
}
END_TEST

START_TEST(test_replicate_and_reduce)
{
  pcgc_attrs a = par(PCGC_OP_REPLICATE, -1, 3);
  result r = INFER(PCGC_OP_REPLICATE, &a, rep(shard(F32(8, 16), 0, 2), 2));
  OK(r);
  DEG(r.out[0], 2, 1);
  PAR(r.out[0], 1, 6, 1, -1);
  a = par(PCGC_OP_REDUCE, -1, 2);
  r = INFER(PCGC_OP_REDUCE, &a, shard(psum(F32(8, 16), 4), 1, 2));
  OK(r);
  DEG(r.out[0], 1, 2);
  PAR(r.out[0], 2, 1, 1, -1);
  a = par(PCGC_OP_REDUCE, -1, 4);
  r = INFER(PCGC_OP_REDUCE, &a, psum(F32(8, 16), 4));
  OK(r);
  SEQ(r.out[0]);
  a = par(PCGC_OP_REDUCE, -1, 3);
  r = INFER(PCGC_OP_REDUCE, &a, psum(F32(8, 16), 4));
  FAILS(r, PCGC_ERR_TYPE, "the input has sum degree 4, which cannot be reduced by 3",
        "must divide the sum degree 4");
  a = par(PCGC_OP_REDUCE, -1, 2);
  r = INFER(PCGC_OP_REDUCE, &a, F32(8, 16));
  FAILS(r, PCGC_ERR_TYPE, "sum degree 1", NULL);
}
END_TEST

START_TEST(test_pipeline_and_unpipeline)
{
  pcgc_attrs p = par(PCGC_OP_PIPELINE, 0, 4);
  result r = INFER(PCGC_OP_PIPELINE, &p, F32(8, 16));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 16);
  DEG(r.out[0], 1, 1);
  PAR(r.out[0], 1, 1, 4, 0);
  /* a sharded dim can be pipelined when pieces and micro-batches both fit */
  r = INFER(PCGC_OP_PIPELINE, &p, shard(F32(8, 16), 0, 2));
  OK(r);
  DEG(r.out[0], 2, 1);
  PAR(r.out[0], 1, 1, 4, 0);
  p = par(PCGC_OP_PIPELINE, 0, 8);
  r = INFER(PCGC_OP_PIPELINE, &p, shard(F32(8, 16), 0, 2));
  FAILS(r, PCGC_ERR_TYPE, "cannot be cut into 8 micro-batches", NULL);
  p = par(PCGC_OP_PIPELINE, 1, 2);
  r = INFER(PCGC_OP_PIPELINE, &p, piped(F32(8, 16), 4, 0));
  FAILS(r, PCGC_ERR_TYPE, "already pipelined (4 micro-batches on dim 0)", "unpipeline it first");
  p = par(PCGC_OP_PIPELINE, 1, 1);
  r = INFER(PCGC_OP_PIPELINE, &p, F32(8, 16));
  OK(r);
  PAR(r.out[0], 1, 1, 1, -1);

  pcgc_attrs u = par(PCGC_OP_UNPIPELINE, 0, 4);
  r = INFER(PCGC_OP_UNPIPELINE, &u, piped(shard(F32(8, 16), 1, 2), 4, 0));
  OK(r);
  DEG(r.out[0], 1, 2);
  PAR(r.out[0], 1, 1, 1, -1);
  u = par(PCGC_OP_UNPIPELINE, 0, 2);
  r = INFER(PCGC_OP_UNPIPELINE, &u, piped(F32(8, 16), 4, 0));
  FAILS(r, PCGC_ERR_TYPE, "the input has 4 micro-batches on dim 0, not 2 on dim 0",
        "mirror the pipeline it closes");
  u = par(PCGC_OP_UNPIPELINE, 1, 4);
  r = INFER(PCGC_OP_UNPIPELINE, &u, piped(F32(8, 16), 4, 0));
  FAILS(r, PCGC_ERR_TYPE, "not 4 on dim 1", NULL);
  u = par(PCGC_OP_UNPIPELINE, 0, 4);
  r = INFER(PCGC_OP_UNPIPELINE, &u, F32(8, 16));
  FAILS(r, PCGC_ERR_TYPE, "the input has 1 micro-batches", NULL);
}
END_TEST

START_TEST(test_parallel_ops_carry_micro_batches)
{
  pcgc_attrs p = par(PCGC_OP_PARTITION, 0, 2);
  result r = INFER(PCGC_OP_PARTITION, &p, piped(F32(8, 16), 4, 0));
  OK(r);
  DEG(r.out[0], 2, 1);
  PAR(r.out[0], 1, 1, 4, 0);
  /* 4 micro-batches x 4 shards of 8 rows do not fit */
  p = par(PCGC_OP_PARTITION, 0, 4);
  r = INFER(PCGC_OP_PARTITION, &p, piped(F32(8, 16), 4, 0));
  FAILS(r, PCGC_ERR_TYPE, "cannot be cut into 16 equal pieces", NULL);
  pcgc_attrs rp = par(PCGC_OP_REPLICATE, -1, 2);
  r = INFER(PCGC_OP_REPLICATE, &rp, piped(F32(8, 16), 4, 0));
  OK(r);
  PAR(r.out[0], 1, 2, 4, 0);
  pcgc_attrs rd = par(PCGC_OP_REDUCE, -1, 2);
  r = INFER(PCGC_OP_REDUCE, &rd, piped(psum(F32(8, 16), 2), 4, 1));
  OK(r);
  PAR(r.out[0], 1, 1, 4, 1);
}
END_TEST

START_TEST(test_ops_on_pipelined_inputs)
{
  /* linear: pipelined x, whole weight used by every micro-batch */
  result r = INFER(PCGC_OP_LINEAR, NULL, piped(F32(8, 16), 2, 0), F32(16, 4));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 4);
  DEG(r.out[0], 1, 1);
  PAR(r.out[0], 1, 1, 2, 0);
  r = INFER(PCGC_OP_LINEAR, NULL, piped(shard(F32(4, 8, 16), 0, 2), 2, 1), rep(F32(16, 4), 2));
  OK(r);
  DEG(r.out[0], 2, 1, 1);
  PAR(r.out[0], 1, 1, 2, 1);
  r = INFER(PCGC_OP_RELU, NULL, piped(F32(8, 16), 4, 0));
  OK(r);
  PAR(r.out[0], 1, 1, 4, 0);
  /* softmax along the other axis is fine */
  r = INFER(PCGC_OP_SOFTMAX, NULL, piped(F32(8, 16), 2, 0));
  OK(r);
  PAR(r.out[0], 1, 1, 2, 0);
  /* bias broadcast over the micro-batches */
  r = INFER(PCGC_OP_ADD, NULL, piped(F32(8, 16), 2, 0), F32(16));
  OK(r);
  PAR(r.out[0], 1, 1, 2, 0);
  /* the pipelined dim moves with transpose and survives reshape */
  pcgc_attrs t = set_ints(attrs(PCGC_OP_TRANSPOSE), "perm", 1, 0, 2);
  r = INFER(PCGC_OP_TRANSPOSE, &t, piped(F32(8, 4, 6), 2, 0));
  OK(r);
  PAR(r.out[0], 1, 1, 2, 1);
  pcgc_attrs rs = set_ints(attrs(PCGC_OP_RESHAPE), "shape", 32, 6);
  r = INFER(PCGC_OP_RESHAPE, &rs, piped(F32(8, 4, 6), 2, 0));
  OK(r);
  PAR(r.out[0], 1, 1, 2, 0);
}
END_TEST

START_TEST(test_losses_on_pipelined_inputs)
{
  result r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, piped(F32(8, 10), 4, 0), piped(I32(8), 4, 0));
  OK(r);
  SCALAR(r.out[0], PCGC_F32);
  PAR(r.out[0], 1, 1, 4, -1);
  r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, piped(shard(F32(8, 10), 0, 2), 2, 0),
            piped(shard(I32(8), 0, 2), 2, 0));
  OK(r);
  PAR(r.out[0], 2, 1, 2, -1);
  r = INFER(PCGC_OP_MSE, NULL, piped(F32(8, 4), 2, 0), piped(F32(8, 4), 2, 0));
  OK(r);
  SCALAR(r.out[0], PCGC_F32);
  PAR(r.out[0], 1, 1, 2, -1);
  /* labels not pipelined like the logits */
  r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, piped(F32(8, 10), 4, 0), I32(8));
  FAILS(r, PCGC_ERR_TYPE, "cannot pipeline through this operator", "unpipeline before this operator");
}
END_TEST

START_TEST(test_pipelining_errors)
{
  pcgc_attrs a = set_int(attrs(PCGC_OP_SOFTMAX), "axis", 0);
  result r = INFER(PCGC_OP_SOFTMAX, &a, piped(F32(8, 16), 2, 0));
  FAILS(r, PCGC_ERR_TYPE, "cannot pipeline", "unpipeline before this operator");
  ck_assert_msg(strstr(r.err.message, "softmax normalises along it"), "no reason: %s", r.err.message);
  r = INFER(PCGC_OP_ADD, NULL, piped(F32(8, 16), 2, 0), piped(F32(8, 16), 4, 0));
  FAILS(r, PCGC_ERR_TYPE, "different numbers of micro-batches", NULL);
  pcgc_attrs red = set_ints(attrs(PCGC_OP_REDUCE_SUM), "dims", 0);
  r = INFER(PCGC_OP_REDUCE_SUM, &red, piped(F32(8, 16), 2, 0));
  FAILS(r, PCGC_ERR_TYPE, "does not keep the micro-batch dim", "unpipeline before this operator");
  r = INFER(PCGC_OP_LAYERNORM, NULL, piped(F32(8, 16), 2, 1));
  FAILS(r, PCGC_ERR_TYPE, "cannot pipeline", NULL);
  /* a pipelined operand must be pipelined on the dim it meets */
  r = INFER(PCGC_OP_ADD, NULL, piped(F32(8, 16), 2, 0), F32(8, 16));
  FAILS(r, PCGC_ERR_TYPE, "cannot pipeline", NULL);
  /* the accumulated loss is not an ordinary pipelined tensor */
  pcgc_attrs m = set_float(attrs(PCGC_OP_SCALAR_MUL), "scalar", 0.5);
  pcgc_ptensor loss;
  pcgc_ptensor_init(&loss, PCGC_F32, 0, NULL);
  r = INFER(PCGC_OP_SCALAR_MUL, &m, piped(loss, 4, -1));
  FAILS(r, PCGC_ERR_TYPE, "a loss summed over micro-batches", "compute the loss on an unpipelined tensor");
}
END_TEST

START_TEST(test_more_ops_on_pipelined_inputs)
{
  result r = INFER(PCGC_OP_CONV2D, NULL, piped(F32(8, 3, 8, 8), 2, 0), F32(4, 3, 3, 3));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 4, 6, 6);
  PAR(r.out[0], 1, 1, 2, 0);
  r = INFER(PCGC_OP_EMBEDDING, NULL, piped(I32(8, 4), 4, 0), F32(100, 16));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 4, 16);
  PAR(r.out[0], 1, 1, 4, 0);
  pcgc_ptensor in[11];
  attn_inputs(in, false);
  for (int i = 0; i < 3; i++) in[i] = piped(F32(4, 5, 16), 2, 0);
  pcgc_attrs a = attn_attrs(4, true);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  OK(r);
  DEG(r.out[0], 1, 1, 1);
  PAR(r.out[0], 1, 1, 2, 0);
  /* only q pipelined: k and v would have to be too */
  in[1] = in[2] = F32(4, 5, 16);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  FAILS(r, PCGC_ERR_TYPE, "cannot pipeline", NULL);
  /* multi-output split keeps the micro-batches on every output */
  pcgc_attrs s = set_ints(set_int(attrs(PCGC_OP_SPLIT), "axis", 1), "sizes", 3, 7);
  r = INFER(PCGC_OP_SPLIT, &s, piped(F32(8, 10), 2, 0));
  OK(r);
  PAR(r.out[0], 1, 1, 2, 0);
  PAR(r.out[1], 1, 1, 2, 0);
  /* ... but splitting or concatenating along the micro dim does not */
  s = set_ints(set_int(attrs(PCGC_OP_SPLIT), "axis", 0), "sizes", 4, 4);
  r = INFER(PCGC_OP_SPLIT, &s, piped(F32(8, 10), 2, 0));
  FAILS(r, PCGC_ERR_TYPE, "cannot pipeline", NULL);
  pcgc_attrs c = set_int(attrs(PCGC_OP_CONCAT), "axis", 1);
  r = INFER(PCGC_OP_CONCAT, &c, piped(F32(8, 3), 2, 0), piped(F32(8, 5), 2, 0));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 8);
  PAR(r.out[0], 1, 1, 2, 0);
  c = set_int(attrs(PCGC_OP_CONCAT), "axis", 0);
  r = INFER(PCGC_OP_CONCAT, &c, piped(F32(8, 3), 2, 0), piped(F32(8, 3), 2, 0));
  FAILS(r, PCGC_ERR_TYPE, "cannot pipeline", NULL);
}
END_TEST

START_TEST(test_batchnorm_pipelined_on_batch)
{
  /* Channel-wise statistics over a sample-sharded input are legal because
   * the pieces synchronise them (infer_batchnorm's comment); micro-batches
   * run one after another in time, so each would be normalised with its own
   * statistics and the result differs from the unpipelined graph.
   * Regression (fixed): infer_pipelined folds micro-batches into shards, so batchnorm
   * accepts x pipelined on dim 0 (f32[8, 16, 4, 4]{micro=2@0}). */
  result r = INFER(PCGC_OP_BATCHNORM, NULL, piped(F32(8, 16, 4, 4), 2, 0), F32(16), F32(16));
  FAILS(r, PCGC_ERR_TYPE, "cannot pipeline", "unpipeline before this operator");
  /* layernorm normalises each sample on its own: pipelining the batch is fine */
  r = INFER(PCGC_OP_LAYERNORM, NULL, piped(F32(8, 16), 2, 0), F32(16), F32(16));
  OK(r);
  PAR(r.out[0], 1, 1, 2, 0);
}
END_TEST

START_TEST(test_micro_dim_out_of_range)
{
  /* micro_dim past the rank (a malformed input) is rejected today only
   * because no output dim grows, with a misleading message. */
  result r = INFER(PCGC_OP_RELU, NULL, piped(F32(8, 16), 2, 3));
  ck_assert_int_eq(r.s, PCGC_ERR_TYPE);
  /* Regression (fixed): check_input (pcg/infer.c) does not validate micro_dim; with
   * micro_dim >= PCGC_MAX_RANK, infer_pipelined indexes degree[micro_dim]
   * out of bounds (UBSan: "index 7 out of bounds for type 'int32_t [6]'",
   * infer.c:1231), scribbling on the folded copy's sum/replica. The call
   * itself is disabled: under ENABLE_SANITIZERS it aborts. */
  FAILS(r, PCGC_ERR_TYPE, "micro", NULL);
  ck_assert_msg(strstr(r.err.message, "keep the micro-batch dim") == NULL, "%s", r.err.message);
  r = INFER(PCGC_OP_RELU, NULL, piped(F32(8, 16), 2, 7));
  FAILS(r, PCGC_ERR_TYPE, "micro", NULL);
}
END_TEST

/* ------------------------------------------------------------------ main */

static Suite *infer_parallel_suite(void)
{
  Suite *s = suite_create("infer_parallel");

  TCase *tc = tcase_create("parallel");
  tcase_add_test(tc, test_linear_data_parallel);
  tcase_add_test(tc, test_linear_tensor_parallel_column);
  tcase_add_test(tc, test_linear_row_parallel_gives_partial_sums);
  tcase_add_test(tc, test_linear_combined_2x2);
  tcase_add_test(tc, test_linear_parallel_errors);
  tcase_add_test(tc, test_batch_matmul_parallel);
  tcase_add_test(tc, test_conv2d_sample_parallel);
  tcase_add_test(tc, test_conv2d_channel_out_parallel);
  tcase_add_test(tc, test_conv2d_channel_in_gives_partial_sums);
  tcase_add_test(tc, test_conv2d_grouped_channel_parallel);
  tcase_add_test(tc, test_conv2d_spatial_sharding);
  tcase_add_test(tc, test_pool2d_parallel);
  tcase_add_test(tc, test_global_pool_parallel);
  tcase_add_test(tc, test_batchnorm_parallel);
  tcase_add_test(tc, test_layernorm_parallel);
  tcase_add_test(tc, test_embedding_parallel);
  tcase_add_test(tc, test_unary_parallel);
  tcase_add_test(tc, test_binary_parallel);
  tcase_add_test(tc, test_binary_parallel_errors);
  tcase_add_test(tc, test_concat_split_parallel);
  tcase_add_test(tc, test_reshape_keeps_outer_shard);
  tcase_add_test(tc, test_reshape_breaking_contiguity_fails);
  tcase_add_test(tc, test_reshape_unit_dims_before_shard);
  tcase_add_test(tc, test_flatten_parallel);
  tcase_add_test(tc, test_transpose_permutes_degrees);
  tcase_add_test(tc, test_softmax_parallel);
  tcase_add_test(tc, test_reduce_parallel);
  tcase_add_test(tc, test_log_softmax_and_mask_parallel);
  tcase_add_test(tc, test_attention_by_heads);
  tcase_add_test(tc, test_attention_by_batch_and_query);
  tcase_add_test(tc, test_attention_parallel_errors);
  tcase_add_test(tc, test_attention_sharded_output_bias);
  tcase_add_test(tc, test_attention_qkv_bias_by_heads);
  tcase_add_test(tc, test_cross_entropy_parallel);
  tcase_add_test(tc, test_mse_parallel);
  tcase_add_test(tc, test_cross_entropy_partial_sum_labels);
  tcase_add_test(tc, test_axis_of_a_scalar);
  suite_add_tcase(s, tc);

  tc = tcase_create("pipeline");
  tcase_add_test(tc, test_partition_and_combine);
  tcase_add_test(tc, test_replicate_and_reduce);
  tcase_add_test(tc, test_pipeline_and_unpipeline);
  tcase_add_test(tc, test_parallel_ops_carry_micro_batches);
  tcase_add_test(tc, test_ops_on_pipelined_inputs);
  tcase_add_test(tc, test_losses_on_pipelined_inputs);
  tcase_add_test(tc, test_pipelining_errors);
  tcase_add_test(tc, test_more_ops_on_pipelined_inputs);
  tcase_add_test(tc, test_batchnorm_pipelined_on_batch);
  tcase_add_test(tc, test_micro_dim_out_of_range);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(infer_parallel_suite)
