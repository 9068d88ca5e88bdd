/*
 * test_infer.c — shape inference (pcg/infer.c), called directly through
 * pcgc_op_infer on hand-built pcgc_ptensor inputs. Parallel types and
 * pipelines are in test_infer_parallel.c.
 *
 * Two groups, one TCase each:
 *  - table:      every op in ops.def has a schema that parses, the arity and
 *                attribute checks common to all ops, and a plausible
 *                sequential instance of every op that infers;
 *  - sequential: output shapes of every op family, and the illegal shapes
 *                with the messages and hints users see.
 *
 * Expected values are worked out by hand from the rules, not read back from
 * the implementation. Assertions that exposed a bug in infer.c are kept under
 * a "Regression (fixed)" comment.
 */
#include "infer_helpers.h"

#include "../common/check_main.h"

/* --------------------------------------------------------------- op table */

/* A small legal sequential instance of op k: sets *a and in[], returns n_in.
 * Hand-written per op, so it is checked against the op count. */
_Static_assert(PCGC_OP_COUNT == 58, "add the new op to plausible() in test_infer.c");

static int plausible(pcgc_op_kind k, pcgc_attrs *a, pcgc_ptensor *in)
{
  *a = attrs(k);
  switch (k) {
  case PCGC_OP_INPUT:
  case PCGC_OP_WEIGHT: *a = set_ints(*a, "shape", 4, 8); return 0;
  case PCGC_OP_LINEAR:
  case PCGC_OP_MATMUL: in[0] = F32(4, 8); in[1] = F32(8, 3); return 2;
  case PCGC_OP_BATCH_MATMUL: in[0] = F32(2, 4, 8); in[1] = F32(2, 8, 3); return 2;
  case PCGC_OP_CONV2D: in[0] = F32(1, 3, 8, 8); in[1] = F32(4, 3, 3, 3); return 2;
  case PCGC_OP_POOL2D: *a = set_int(*a, "kind", PCGC_POOL_MAX); in[0] = F32(1, 3, 8, 8); return 1;
  case PCGC_OP_BATCHNORM: in[0] = F32(2, 3, 4, 4); in[1] = F32(3); in[2] = F32(3); return 3;
  case PCGC_OP_LAYERNORM: in[0] = F32(2, 5, 8); in[1] = F32(8); in[2] = F32(8); return 3;
  case PCGC_OP_RMSNORM: in[0] = F32(2, 5, 8); in[1] = F32(8); return 2;
  case PCGC_OP_EMBEDDING: in[0] = I32(4, 6); in[1] = F32(100, 8); return 2;
  case PCGC_OP_SCALAR_ADD:
  case PCGC_OP_SCALAR_SUB:
  case PCGC_OP_SCALAR_MUL:
  case PCGC_OP_SCALAR_DIV: *a = set_float(*a, "scalar", 2.0); /* fall through */
  case PCGC_OP_RELU:
  case PCGC_OP_GELU:
  case PCGC_OP_SIGMOID:
  case PCGC_OP_SILU:
  case PCGC_OP_RELU6:
  case PCGC_OP_HARDSIGMOID:
  case PCGC_OP_HARDSWISH:
  case PCGC_OP_LEAKY_RELU:
  case PCGC_OP_TANH:
  case PCGC_OP_EXP:
  case PCGC_OP_IDENTITY:
  case PCGC_OP_DROPOUT:
  case PCGC_OP_SOFTMAX:
  case PCGC_OP_LOG_SOFTMAX:
  case PCGC_OP_CLIP:
  case PCGC_OP_CAUSAL_MASK:
  case PCGC_OP_ROPE:
  case PCGC_OP_FLATTEN: in[0] = F32(4, 6); return 1;
  case PCGC_OP_POW: *a = set_float(*a, "exponent", 0.5); in[0] = F32(4, 6); return 1;
  case PCGC_OP_ADD:
  case PCGC_OP_SUB:
  case PCGC_OP_MUL:
  case PCGC_OP_DIV: in[0] = F32(4, 6); in[1] = F32(6); return 2;
  case PCGC_OP_CONCAT: *a = set_int(*a, "axis", 1); in[0] = F32(4, 6); in[1] = F32(4, 2); return 2;
  case PCGC_OP_SPLIT:
    *a = set_int(*a, "axis", 1);
    *a = set_ints(*a, "sizes", 2, 4);
    in[0] = F32(4, 6);
    return 1;
  case PCGC_OP_RESHAPE: *a = set_ints(*a, "shape", 24); in[0] = F32(4, 6); return 1;
  case PCGC_OP_TRANSPOSE: *a = set_ints(*a, "perm", 1, 0); in[0] = F32(4, 6); return 1;
  case PCGC_OP_REDUCE_SUM:
  case PCGC_OP_REDUCE_MEAN:
  case PCGC_OP_REDUCE_MAX: *a = set_ints(*a, "dims", 1); in[0] = F32(4, 6); return 1;
  case PCGC_OP_ATTENTION:
    *a = set_int(*a, "heads", 2);
    in[0] = in[1] = in[2] = F32(2, 5, 8);
    in[3] = in[4] = in[5] = F32(8, 8);
    in[6] = F32(8, 8);
    return 7;
  case PCGC_OP_MOE_ROUTE: *a = set_int(*a, "capacity", 3); in[0] = F32(2, 5, 4); return 1;
  case PCGC_OP_MOE_DISPATCH:
    *a = set_int(*a, "experts", 4);
    *a = set_int(*a, "capacity", 3);
    in[0] = F32(2, 5, 8);
    in[1] = I32(2, 5, 2);
    return 2;
  case PCGC_OP_EXPERT_LINEAR: in[0] = F32(2, 4, 3, 8); in[1] = F32(4, 8, 6); in[2] = F32(4, 6); return 3;
  case PCGC_OP_MOE_COMBINE: in[0] = F32(2, 4, 3, 6); in[1] = F32(2, 5, 2); in[2] = I32(2, 5, 2); return 3;
  case PCGC_OP_SOFTMAX_CROSS_ENTROPY: in[0] = F32(4, 10); in[1] = I32(4); return 2;
  case PCGC_OP_MSE: in[0] = F32(4, 3); in[1] = F32(4, 3); return 2;
  case PCGC_OP_PARTITION:
  case PCGC_OP_COMBINE:
  case PCGC_OP_PIPELINE:
  case PCGC_OP_UNPIPELINE: *a = par(k, 0, 1); in[0] = F32(4, 6); return 1;
  case PCGC_OP_REPLICATE:
  case PCGC_OP_REDUCE: *a = par(k, -1, 1); in[0] = F32(4, 6); return 1;
  case PCGC_OP_COUNT: break;
  }
  ck_abort_msg("no plausible instance for op %d", (int)k);
  return 0;
}

START_TEST(test_every_op_has_a_parsing_schema)
{
  for (int k = 0; k < PCGC_OP_COUNT; k++) {
    const char *name = pcgc_op_name((pcgc_op_kind)k);
    ck_assert_ptr_nonnull(name);
    ck_assert_msg(name[0] != '\0', "op %d has no name", k);
    ck_assert_int_eq(pcgc_op_from_name(name), k);
    ck_assert_msg(pcgc_op_min_inputs(k) <= pcgc_op_max_inputs(k), "%s arity", name);
    int n = pcgc_op_num_attrs(k);
    ck_assert_msg(n >= 0 && n <= PCGC_MAX_ATTRS, "%s has %d attributes", name, n);
    for (int i = 0; i < n; i++) {
      const pcgc_attr_desc *d = pcgc_op_attr(k, i);
      ck_assert_ptr_nonnull(d);
      ck_assert_msg(d->name && d->name[0], "%s attribute %d unnamed", name, i);
      ck_assert_int_eq(pcgc_op_attr_index(k, d->name), i);
      if (d->type == PCGC_ATTR_ENUM && !d->required)
        ck_assert_msg(pcgc_enum_value_name(d->enum_type, d->def_i) != NULL, "%s.%s default", name, d->name);
    }
    ck_assert_ptr_null(pcgc_op_attr(k, n));
    /* parallel operators and only they have a backward pair */
    bool is_par = pcgc_op_class_of(k) == PCGC_CLASS_PARALLEL;
    ck_assert_msg((pcgc_op_backward_pair(k) >= 0) == is_par, "%s backward pair", name);
    if (is_par) ck_assert_int_eq(pcgc_op_backward_pair(pcgc_op_backward_pair(k)), k);
  }
  ck_assert_int_eq(pcgc_op_from_name("no_such_op"), -1);
}
END_TEST

START_TEST(test_every_op_infers_a_plausible_instance)
{
  for (int k = 0; k < PCGC_OP_COUNT; k++) {
    pcgc_attrs a;
    pcgc_ptensor in[PCGC_VARIADIC];
    int n = plausible(k, &a, in);
    ck_assert_int_ge(n, pcgc_op_min_inputs(k));
    ck_assert_int_le(n, pcgc_op_max_inputs(k));
    ck_assert_msg(pcgc_attrs_check(&a, NULL) == PCGC_OK, "%s attrs", pcgc_op_name(k));
    result r = infer_with(k, &a, n, in);
    ck_assert_msg(r.s == PCGC_OK, "%s: %s", pcgc_op_name(k), r.err.message);
    for (int j = 0; j < r.n_out; j++) {
      ck_assert_msg(pcgc_ptensor_is_sequential(&r.out[j]), "%s output %d is not sequential",
                    pcgc_op_name(k), j);
      ck_assert_msg(r.out[j].micro_dim == -1, "%s micro_dim", pcgc_op_name(k));
      for (int d = 0; d < r.out[j].rank; d++)
        ck_assert_msg(r.out[j].dims[d] >= 1, "%s output %d dim %d", pcgc_op_name(k), j, d);
    }
    /* its cost is defined: finite, non-negative, parameters only for weights */
    pcgc_op_cost cost;
    pcgc_op_cost_of(k, &a, n, in, r.n_out, r.out, &cost);
    const double v[] = {cost.fwd_flops, cost.bwd_flops, cost.fwd_bytes, cost.bwd_bytes};
    for (int i = 0; i < 4; i++)
      ck_assert_msg(isfinite(v[i]) && v[i] >= 0, "%s cost field %d is %g", pcgc_op_name(k), i, v[i]);
    ck_assert_msg((cost.params > 0) == (k == PCGC_OP_WEIGHT), "%s params %lld", pcgc_op_name(k),
                  (long long)cost.params);
    /* the same instance without an error report must give the same answer */
    pcgc_ptensor out2[PCGC_MAX_INTS];
    ck_assert_int_eq(pcgc_op_infer(k, &a, n, in, out2, NULL), PCGC_OK);
    for (int j = 0; j < r.n_out; j++) ck_assert(pcgc_ptensor_equal(&r.out[j], &out2[j]));
  }
}
END_TEST

START_TEST(test_every_op_rejects_wrong_arity)
{
  for (int k = 0; k < PCGC_OP_COUNT; k++) {
    pcgc_attrs a;
    pcgc_ptensor in[PCGC_VARIADIC + 1];
    plausible(k, &a, in);
    for (int i = 0; i <= PCGC_VARIADIC; i++) in[i] = F32(4, 6);
    int lo = pcgc_op_min_inputs(k), hi = pcgc_op_max_inputs(k);
    if (lo > 0) {
      result r = infer_with(k, &a, lo - 1, in);
      ck_assert_msg(r.s == PCGC_ERR_TYPE, "%s with %d inputs", pcgc_op_name(k), lo - 1);
      ck_assert_msg(strstr(r.err.message, "takes") != NULL, "%s: %s", pcgc_op_name(k), r.err.message);
    }
    if (hi < PCGC_VARIADIC) {
      result r = infer_with(k, &a, hi + 1, in);
      ck_assert_msg(r.s == PCGC_ERR_TYPE, "%s with %d inputs", pcgc_op_name(k), hi + 1);
      ck_assert_msg(strstr(r.err.message, "inputs, got") != NULL || strstr(r.err.message, "input, got"),
                    "%s: %s", pcgc_op_name(k), r.err.message);
    }
  }
}
END_TEST

START_TEST(test_every_required_attribute_is_enforced)
{
  for (int k = 0; k < PCGC_OP_COUNT; k++) {
    for (int i = 0; i < pcgc_op_num_attrs(k); i++) {
      const pcgc_attr_desc *d = pcgc_op_attr(k, i);
      if (!d->required) continue;
      pcgc_attrs a;
      pcgc_ptensor in[PCGC_VARIADIC];
      int n = plausible(k, &a, in);
      a.set[i] = false;
      result r = infer_with(k, &a, n, in);
      ck_assert_msg(r.s == PCGC_ERR_INVALID, "%s without %s: %s", pcgc_op_name(k), d->name,
                    pcgc_status_str(r.s));
      ck_assert_msg(strstr(r.err.message, d->name) != NULL, "%s: %s", pcgc_op_name(k), r.err.message);
    }
  }
}
END_TEST

START_TEST(test_arity_messages)
{
  pcgc_attrs a = attrs(PCGC_OP_LINEAR);
  result r = INFER(PCGC_OP_LINEAR, &a, F32(4, 8));
  FAILS(r, PCGC_ERR_TYPE, "linear: takes 2 to 3 inputs, got 1", NULL);
  r = INFER(PCGC_OP_RELU, NULL, F32(4), F32(4));
  FAILS(r, PCGC_ERR_TYPE, "relu: takes 1 input, got 2", NULL);
  r = INFER(PCGC_OP_MATMUL, NULL, F32(4, 8), F32(8, 2), F32(2));
  FAILS(r, PCGC_ERR_TYPE, "takes 2 inputs, got 3", NULL);
}
END_TEST

START_TEST(test_missing_concat_axis_is_invalid)
{
  pcgc_attrs a = attrs(PCGC_OP_CONCAT);
  result r = INFER(PCGC_OP_CONCAT, &a, F32(2, 3), F32(2, 3));
  FAILS(r, PCGC_ERR_INVALID, "axis", "axis=");
  ck_assert_str_eq(r.err.message, "concat: missing required attribute 'axis'");
}
END_TEST

START_TEST(test_attrs_of_another_op_are_invalid)
{
  pcgc_attrs a = attrs(PCGC_OP_RELU);
  result r = INFER(PCGC_OP_GELU, &a, F32(4));
  FAILS(r, PCGC_ERR_INVALID, "belong to operator 'relu'", NULL);
}
END_TEST

START_TEST(test_malformed_input_types_are_rejected)
{
  result r = INFER(PCGC_OP_RELU, NULL, shard(F32(8, 6), 0, 3));
  FAILS(r, PCGC_ERR_TYPE, "dim 0 (size 8) has invalid shard degree 3", NULL);
  r = INFER(PCGC_OP_RELU, NULL, psum(F32(8), 0));
  FAILS(r, PCGC_ERR_TYPE, "degree below 1", NULL);
  r = INFER(PCGC_OP_RELU, NULL, rep(F32(8), 0));
  FAILS(r, PCGC_ERR_TYPE, "degree below 1", NULL);
  /* without an error report the status still comes back */
  ck_assert_int_eq(pcgc_op_infer(PCGC_OP_RELU, &(pcgc_attrs){.kind = PCGC_OP_RELU}, IN(psum(F32(8), 0)),
                                 r.out, NULL),
                   PCGC_ERR_TYPE);
}
END_TEST

/* ------------------------------------------------- sequential: sources */

START_TEST(test_input_and_weight_shapes)
{
  pcgc_attrs a = set_int(set_ints(attrs(PCGC_OP_INPUT), "shape", 64, 784), "dtype", PCGC_I64);
  result r = infer_with(PCGC_OP_INPUT, &a, 0, NULL);
  OK(r);
  SHAPE(r.out[0], PCGC_I64, 64, 784);
  SEQ(r.out[0]);
  a = set_ints(attrs(PCGC_OP_WEIGHT), "shape", 784, 256);
  r = infer_with(PCGC_OP_WEIGHT, &a, 0, NULL);
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 784, 256);
  a = set_ints(attrs(PCGC_OP_INPUT), "shape", 4, 0);
  r = infer_with(PCGC_OP_INPUT, &a, 0, NULL);
  FAILS(r, PCGC_ERR_TYPE, "dim 1 has size 0", NULL);
  a = set_int(set_ints(attrs(PCGC_OP_WEIGHT), "shape", 4), "dtype", PCGC_I32);
  r = infer_with(PCGC_OP_WEIGHT, &a, 0, NULL);
  FAILS(r, PCGC_ERR_TYPE, "a weight must be floating point", NULL);
}
END_TEST

/* ---------------------------------------------- sequential: dense algebra */

START_TEST(test_linear_shapes)
{
  result r = INFER(PCGC_OP_LINEAR, NULL, F32(64, 784), F32(784, 256));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 64, 256);
  SEQ(r.out[0]);
  pcgc_attrs a = set_int(attrs(PCGC_OP_LINEAR), "act", PCGC_ACT_GELU);
  r = INFER(PCGC_OP_LINEAR, &a, F32(64, 784), F32(784, 256), F32(256));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 64, 256);
  r = INFER(PCGC_OP_LINEAR, NULL, F16(2, 3, 8), F16(8, 5));
  OK(r);
  SHAPE(r.out[0], PCGC_F16, 2, 3, 5);
  r = INFER(PCGC_OP_LINEAR, NULL, F32(8), F32(8, 5));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 5);
}
END_TEST

START_TEST(test_linear_shape_errors)
{
  result r = INFER(PCGC_OP_LINEAR, NULL, F32(64, 100), F32(784, 256));
  FAILS(r, PCGC_ERR_TYPE, "input has 100 features", "the weight must be [100, N]");
  r = INFER(PCGC_OP_LINEAR, NULL, F32(64, 784), F32(784, 256), F32(255));
  FAILS(r, PCGC_ERR_TYPE, "bias size is 255 but must be 256", NULL);
  r = INFER(PCGC_OP_LINEAR, NULL, F32(64, 784), F32(784, 256, 1));
  FAILS(r, PCGC_ERR_TYPE, "weight must have rank 2", NULL);
  r = INFER(PCGC_OP_LINEAR, NULL, I32(64, 784), F32(784, 256));
  FAILS(r, PCGC_ERR_TYPE, "input must be a floating-point tensor, got i32", NULL);
  r = INFER(PCGC_OP_LINEAR, NULL, F16(64, 784), F32(784, 256));
  FAILS(r, PCGC_ERR_TYPE, "input is f16 but weight is f32", NULL);
  ck_assert_msg(strncmp(r.err.message, "linear: ", 8) == 0, "no op prefix: %s", r.err.message);
}
END_TEST

START_TEST(test_matmul_shapes)
{
  result r = INFER(PCGC_OP_MATMUL, NULL, F32(3, 4), F32(4, 5));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 3, 5);
  r = INFER(PCGC_OP_MATMUL, NULL, F32(2, 3, 4), F32(4, 7));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 3, 7);
  r = INFER(PCGC_OP_MATMUL, NULL, F32(3, 4), F32(5, 7));
  FAILS(r, PCGC_ERR_TYPE, "input has 4 features", NULL);
}
END_TEST

START_TEST(test_batch_matmul_shapes)
{
  result r = INFER(PCGC_OP_BATCH_MATMUL, NULL, F32(2, 3, 4, 5), F32(2, 3, 5, 6));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 3, 4, 6);
  SEQ(r.out[0]);
  pcgc_attrs tb = set_int(attrs(PCGC_OP_BATCH_MATMUL), "transpose_b", 1);
  r = INFER(PCGC_OP_BATCH_MATMUL, &tb, F32(2, 3, 4, 5), F32(2, 3, 6, 5));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 3, 4, 6);
  r = INFER(PCGC_OP_BATCH_MATMUL, NULL, F32(4, 5), F32(5, 2));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 4, 2);
}
END_TEST

START_TEST(test_batch_matmul_shape_errors)
{
  result r = INFER(PCGC_OP_BATCH_MATMUL, NULL, F32(2, 4, 5), F32(2, 4, 6));
  FAILS(r, PCGC_ERR_TYPE, "a has 5 columns but b has 4 rows", "[..., M, K] by [..., K, N]");
  pcgc_attrs tb = set_int(attrs(PCGC_OP_BATCH_MATMUL), "transpose_b", 1);
  r = INFER(PCGC_OP_BATCH_MATMUL, &tb, F32(2, 4, 5), F32(2, 5, 6));
  FAILS(r, PCGC_ERR_TYPE, "columns (transpose_b=true)", "[..., N, K]");
  r = INFER(PCGC_OP_BATCH_MATMUL, NULL, F32(2, 4, 5), F32(3, 5, 6));
  FAILS(r, PCGC_ERR_TYPE, "batch dim 0 differs: 2 in a, 3 in b", NULL);
  r = INFER(PCGC_OP_BATCH_MATMUL, NULL, F32(2, 4, 5), F32(5, 6));
  FAILS(r, PCGC_ERR_TYPE, "b must have rank 3", NULL);
}
END_TEST

/* ------------------------------------------------ sequential: convolution */

START_TEST(test_conv2d_shapes)
{
  result r = INFER(PCGC_OP_CONV2D, NULL, F32(1, 3, 32, 32), F32(8, 3, 3, 3));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 1, 8, 30, 30);
  SEQ(r.out[0]);
  pcgc_attrs a = set_int(set_int(attrs(PCGC_OP_CONV2D), "stride", 2), "padding", 1);
  r = INFER(PCGC_OP_CONV2D, &a, F32(1, 3, 32, 32), F32(8, 3, 3, 3), F32(8));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 1, 8, 16, 16); /* (32 + 2 - 3) / 2 + 1 */
  a = set_int(attrs(PCGC_OP_CONV2D), "dilation", 2);
  r = INFER(PCGC_OP_CONV2D, &a, F32(1, 3, 32, 32), F32(8, 3, 3, 3));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 1, 8, 28, 28); /* 32 - 2*2 */
  a = set_ints(attrs(PCGC_OP_CONV2D), "stride", 2, 1);
  r = INFER(PCGC_OP_CONV2D, &a, F32(1, 3, 32, 32), F32(8, 3, 3, 3));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 1, 8, 15, 30);
  a = set_ints(attrs(PCGC_OP_CONV2D), "padding", 0, 2);
  r = INFER(PCGC_OP_CONV2D, &a, F32(1, 3, 10, 10), F32(8, 3, 5, 5));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 1, 8, 6, 10);
}
END_TEST

START_TEST(test_conv2d_groups_and_depthwise)
{
  pcgc_attrs a = set_int(attrs(PCGC_OP_CONV2D), "groups", 3);
  result r = INFER(PCGC_OP_CONV2D, &a, F32(2, 6, 8, 8), F32(9, 2, 3, 3));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 9, 6, 6);
  a = set_int(set_int(attrs(PCGC_OP_CONV2D), "groups", 6), "padding", 1);
  r = INFER(PCGC_OP_CONV2D, &a, F32(2, 6, 8, 8), F32(6, 1, 3, 3), F32(6));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 6, 8, 8);
}
END_TEST

START_TEST(test_conv2d_shape_errors)
{
  result r = INFER(PCGC_OP_CONV2D, NULL, F32(1, 16, 8, 8), F32(32, 8, 3, 3));
  FAILS(r, PCGC_ERR_TYPE, "the weight has 8 input channels per group but the input has 16",
        "[O, 16, kh, kw]");
  pcgc_attrs a = set_int(attrs(PCGC_OP_CONV2D), "groups", 4);
  r = INFER(PCGC_OP_CONV2D, &a, F32(1, 6, 8, 8), F32(8, 2, 3, 3));
  FAILS(r, PCGC_ERR_TYPE, "groups=4 must divide the input channels (6)", NULL);
  r = INFER(PCGC_OP_CONV2D, NULL, F32(1, 3, 2, 2), F32(8, 3, 3, 3));
  FAILS(r, PCGC_ERR_TYPE, "does not fit", NULL);
  /* a window larger than the padded input does not fit whatever the stride
   * (C division would round the negative size up to one output) */
  a = set_int(attrs(PCGC_OP_CONV2D), "stride", 2);
  r = INFER(PCGC_OP_CONV2D, &a, F32(1, 3, 2, 2), F32(8, 3, 3, 3));
  FAILS(r, PCGC_ERR_TYPE, "does not fit", NULL);
  r = INFER(PCGC_OP_CONV2D, NULL, F32(1, 3, 8, 8), F32(8, 3, 3, 3), F32(4));
  FAILS(r, PCGC_ERR_TYPE, "bias size is 4 but must be 8", NULL);
  r = INFER(PCGC_OP_CONV2D, NULL, F32(3, 8, 8), F32(8, 3, 3, 3));
  FAILS(r, PCGC_ERR_TYPE, "input must have rank 4", NULL);
  a = set_int(attrs(PCGC_OP_CONV2D), "stride", 0);
  r = INFER(PCGC_OP_CONV2D, &a, F32(1, 3, 8, 8), F32(8, 3, 3, 3));
  FAILS(r, PCGC_ERR_TYPE, "stride must be at least 1", NULL);
}
END_TEST

/* pool2d of the given kind, square kernel and stride, no padding */

START_TEST(test_pool2d_shapes)
{
  pcgc_attrs a = set_int(pool(PCGC_POOL_MAX, 3, 2), "padding", 1);
  result r = INFER(PCGC_OP_POOL2D, &a, F32(1, 3, 32, 32));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 1, 3, 16, 16);
  a = pool(PCGC_POOL_AVG, 2, 2);
  r = INFER(PCGC_OP_POOL2D, &a, F32(1, 3, 32, 32));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 1, 3, 16, 16);
  a = set_int(set_int(attrs(PCGC_OP_POOL2D), "kind", PCGC_POOL_AVG), "global", 1);
  r = INFER(PCGC_OP_POOL2D, &a, F32(2, 64, 7, 7));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 64, 1, 1);
  SEQ(r.out[0]);
  a = set_int(set_int(attrs(PCGC_OP_POOL2D), "kind", PCGC_POOL_MAX), "global", 1);
  r = INFER(PCGC_OP_POOL2D, &a, F32(2, 64, 7, 5));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 64, 1, 1);
}
END_TEST

START_TEST(test_pool2d_errors)
{
  pcgc_attrs a = set_int(pool(PCGC_POOL_MAX, 2, 1), "padding", 2);
  result r = INFER(PCGC_OP_POOL2D, &a, F32(1, 3, 8, 8));
  FAILS(r, PCGC_ERR_TYPE, "padding 2 is more than half the kernel 2", NULL);
  a = pool(PCGC_POOL_MAX, 9, 1);
  r = INFER(PCGC_OP_POOL2D, &a, F32(1, 3, 8, 8));
  FAILS(r, PCGC_ERR_TYPE, "the 9x9 window does not fit the 8x8 input", NULL);
  a = pool(PCGC_POOL_MAX, 3, 2);
  r = INFER(PCGC_OP_POOL2D, &a, F32(1, 3, 2, 2));
  FAILS(r, PCGC_ERR_TYPE, "the 3x3 window does not fit the 2x2 input", NULL);
  a = set_int(attrs(PCGC_OP_POOL2D), "kind", PCGC_POOL_MAX);
  r = INFER(PCGC_OP_POOL2D, &a, F32(3, 8, 8));
  FAILS(r, PCGC_ERR_TYPE, "rank 4", NULL);
  r = INFER(PCGC_OP_POOL2D, NULL, F32(1, 3, 8, 8)); /* kind is required */
  FAILS(r, PCGC_ERR_INVALID, "'kind'", NULL);
}
END_TEST

/* ---------------------------------------------- sequential: normalisation */

START_TEST(test_batchnorm_shapes)
{
  result r = INFER(PCGC_OP_BATCHNORM, NULL, F32(8, 16, 4, 4), F32(16), F32(16));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 16, 4, 4);
  SEQ(r.out[0]);
  r = INFER(PCGC_OP_BATCHNORM, NULL, F32(8, 16));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 16);
  r = INFER(PCGC_OP_BATCHNORM, NULL, F32(8, 16, 4, 4), F32(16));
  FAILS(r, PCGC_ERR_TYPE, "optionally both scale and bias", NULL);
  r = INFER(PCGC_OP_BATCHNORM, NULL, F32(8, 16, 4, 4), F32(8), F32(8));
  FAILS(r, PCGC_ERR_TYPE, "scale size (the channel count) is 8 but must be 16", NULL);
  pcgc_attrs a = set_float(attrs(PCGC_OP_BATCHNORM), "momentum", 1.5);
  r = INFER(PCGC_OP_BATCHNORM, &a, F32(8, 16));
  FAILS(r, PCGC_ERR_TYPE, "momentum must be in [0, 1]", NULL);
  a = set_int(attrs(PCGC_OP_BATCHNORM), "act", PCGC_ACT_RELU); /* a fused relu keeps the shape */
  r = INFER(PCGC_OP_BATCHNORM, &a, F32(8, 16, 4, 4), F32(16), F32(16));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 16, 4, 4);
  a = set_int(attrs(PCGC_OP_BATCHNORM), "act", PCGC_ACT_GELU);
  r = INFER(PCGC_OP_BATCHNORM, &a, F32(8, 16));
  FAILS(r, PCGC_ERR_TYPE, "act=gelu is not fused into a batchnorm", NULL);
}
END_TEST

START_TEST(test_layernorm_shapes)
{
  result r = INFER(PCGC_OP_LAYERNORM, NULL, F32(2, 5, 8), F32(8), F32(8));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 5, 8);
  SEQ(r.out[0]);
  pcgc_attrs a = set_int(attrs(PCGC_OP_LAYERNORM), "axes", 2);
  r = INFER(PCGC_OP_LAYERNORM, &a, F32(2, 5, 8), F32(5, 8), F32(5, 8));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 5, 8);
  r = INFER(PCGC_OP_LAYERNORM, &a, F32(2, 5, 8), F32(8), F32(8));
  FAILS(r, PCGC_ERR_TYPE, "scale must have rank 2", NULL);
  r = INFER(PCGC_OP_LAYERNORM, NULL, F32(2, 5, 8), F32(7), F32(7));
  FAILS(r, PCGC_ERR_TYPE, "must match the last 1 dims of the input", NULL);
  a = set_int(attrs(PCGC_OP_LAYERNORM), "axes", 4);
  r = INFER(PCGC_OP_LAYERNORM, &a, F32(2, 5, 8));
  FAILS(r, PCGC_ERR_TYPE, "axes=4 must be between 1 and the input rank 3", NULL);
}
END_TEST

/* -------------------------------------------------- sequential: embedding */

START_TEST(test_embedding_shapes)
{
  result r = INFER(PCGC_OP_EMBEDDING, NULL, I32(8, 4), F32(100, 16));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 4, 16);
  SEQ(r.out[0]);
  pcgc_attrs sum = set_int(attrs(PCGC_OP_EMBEDDING), "bag", PCGC_BAG_SUM);
  pcgc_attrs mean = set_int(attrs(PCGC_OP_EMBEDDING), "bag", PCGC_BAG_MEAN);
  r = INFER(PCGC_OP_EMBEDDING, &sum, I32(8, 4), F32(100, 16));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 8, 16);
  r = INFER(PCGC_OP_EMBEDDING, &mean, I64(8, 4), F16(100, 16));
  OK(r);
  SHAPE(r.out[0], PCGC_F16, 8, 16);
  r = INFER(PCGC_OP_EMBEDDING, NULL, I32(2, 3, 4), F32(100, 16));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 3, 4, 16);
  r = INFER(PCGC_OP_EMBEDDING, &sum, I32(2, 3, 4), F32(100, 16));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 3, 16);
  r = INFER(PCGC_OP_EMBEDDING, &sum, I32(5), F32(100, 16));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 16);
}
END_TEST

START_TEST(test_embedding_errors)
{
  result r = INFER(PCGC_OP_EMBEDDING, NULL, F32(8, 4), F32(100, 16));
  FAILS(r, PCGC_ERR_TYPE, "indices must be integers (i32 or i64), got f32", "i32");
  r = INFER(PCGC_OP_EMBEDDING, NULL, I32(8, 4), F32(100, 16, 2));
  FAILS(r, PCGC_ERR_TYPE, "table must have rank 2", NULL);
  r = INFER(PCGC_OP_EMBEDDING, NULL, I32(8, 4), I32(100, 16));
  FAILS(r, PCGC_ERR_TYPE, "table must be a floating-point tensor", NULL);
}
END_TEST

/* ------------------------------------------------ sequential: elementwise */


START_TEST(test_unary_ops_keep_shape_and_dtype)
{
  for (int i = 0; i < N_UNARY; i++) {
    pcgc_attrs a = unary_attrs(unary_ops[i]);
    result r = INFER(unary_ops[i], &a, F16(3, 5, 7));
    ck_assert_msg(r.s == PCGC_OK, "%s: %s", pcgc_op_name(unary_ops[i]), r.err.message);
    SHAPE(r.out[0], PCGC_F16, 3, 5, 7);
    SEQ(r.out[0]);
  }
}
END_TEST

START_TEST(test_unary_errors)
{
  result r = INFER(PCGC_OP_RELU, NULL, I32(4));
  FAILS(r, PCGC_ERR_TYPE, "input must be a floating-point tensor, got i32", NULL);
  r = INFER(PCGC_OP_IDENTITY, NULL, I32(4)); /* identity moves any dtype */
  OK(r);
  SHAPE(r.out[0], PCGC_I32, 4);
  pcgc_attrs a = set_float(attrs(PCGC_OP_SCALAR_DIV), "scalar", 0.0);
  r = INFER(PCGC_OP_SCALAR_DIV, &a, F32(4));
  FAILS(r, PCGC_ERR_TYPE, "division by zero", NULL);
  a = set_float(attrs(PCGC_OP_DROPOUT), "rate", 1.0);
  r = INFER(PCGC_OP_DROPOUT, &a, F32(4));
  FAILS(r, PCGC_ERR_TYPE, "rate must be in [0, 1)", NULL);
  r = INFER(PCGC_OP_SCALAR_MUL, NULL, F32(4)); /* scalar is required */
  FAILS(r, PCGC_ERR_INVALID, "'scalar'", NULL);
}
END_TEST

START_TEST(test_binary_broadcasting)
{
  static const pcgc_op_kind ops[] = {PCGC_OP_ADD, PCGC_OP_SUB, PCGC_OP_MUL, PCGC_OP_DIV};
  for (int i = 0; i < 4; i++) {
    result r = INFER(ops[i], NULL, F32(8, 16), F32(8, 16));
    OK(r);
    SHAPE(r.out[0], PCGC_F32, 8, 16);
    SEQ(r.out[0]);
    r = INFER(ops[i], NULL, F32(8, 16), F32(16));
    OK(r);
    SHAPE(r.out[0], PCGC_F32, 8, 16);
  }
  result r = INFER(PCGC_OP_ADD, NULL, F32(4, 1, 6), F32(5, 1));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 4, 5, 6);
  r = INFER(PCGC_OP_MUL, NULL, F32(1), F32(3, 2));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 3, 2);
  r = INFER(PCGC_OP_SUB, NULL, F32(3, 4), F32(2, 3, 4)); /* rank mismatch, longer b */
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 3, 4);
  r = INFER(PCGC_OP_DIV, NULL, F32(2, 1, 4), F32(1, 3, 1));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 3, 4);
}
END_TEST

START_TEST(test_binary_errors)
{
  result r = INFER(PCGC_OP_ADD, NULL, F32(8, 16), F32(8, 15));
  FAILS(r, PCGC_ERR_TYPE, "do not broadcast: dim 1 is 16 vs 15", "equal or 1");
  r = INFER(PCGC_OP_ADD, NULL, F32(2, 3, 4), F32(2, 4));
  FAILS(r, PCGC_ERR_TYPE, "do not broadcast", NULL);
  r = INFER(PCGC_OP_MUL, NULL, F32(4), F16(4));
  FAILS(r, PCGC_ERR_TYPE, "a is f32 but b is f16", NULL);
  r = INFER(PCGC_OP_ADD, NULL, I32(4), I32(4));
  FAILS(r, PCGC_ERR_TYPE, "floating-point", NULL);
}
END_TEST

/* --------------------------------------------- sequential: data movement */

START_TEST(test_concat_shapes)
{
  pcgc_attrs a = set_int(attrs(PCGC_OP_CONCAT), "axis", 1);
  result r = INFER(PCGC_OP_CONCAT, &a, F32(2, 3), F32(2, 4), F32(2, 5));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 12);
  SEQ(r.out[0]);
  a = set_int(attrs(PCGC_OP_CONCAT), "axis", -1);
  r = INFER(PCGC_OP_CONCAT, &a, F32(2, 3), F32(2, 4), F32(2, 5));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 12);
  a = set_int(attrs(PCGC_OP_CONCAT), "axis", 0);
  r = INFER(PCGC_OP_CONCAT, &a, F32(1, 3), F32(2, 3), F32(3, 3));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 6, 3);
  r = INFER(PCGC_OP_CONCAT, &a, F32(5, 3));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 5, 3);
}
END_TEST

START_TEST(test_concat_errors)
{
  pcgc_attrs a = set_int(attrs(PCGC_OP_CONCAT), "axis", 1);
  result r = INFER(PCGC_OP_CONCAT, &a, F32(2, 3), F32(3, 4));
  FAILS(r, PCGC_ERR_TYPE, "all dims but the axis (1) must match", NULL);
  r = INFER(PCGC_OP_CONCAT, &a, F32(2, 3), F32(2, 3, 1));
  FAILS(r, PCGC_ERR_TYPE, "input 1 has rank 3 but input 0 has rank 2", NULL);
  r = INFER(PCGC_OP_CONCAT, &a, F32(2, 3), F16(2, 3));
  FAILS(r, PCGC_ERR_TYPE, "is f16", NULL);
  a = set_int(attrs(PCGC_OP_CONCAT), "axis", 2);
  r = INFER(PCGC_OP_CONCAT, &a, F32(2, 3), F32(2, 3));
  FAILS(r, PCGC_ERR_TYPE, "axis 2 is out of range for a rank-2 tensor", "use 0..1");
  a = set_int(attrs(PCGC_OP_CONCAT), "axis", -3);
  r = INFER(PCGC_OP_CONCAT, &a, F32(2, 3), F32(2, 3));
  FAILS(r, PCGC_ERR_TYPE, "axis -3 is out of range", NULL);
}
END_TEST

START_TEST(test_split_shapes)
{
  pcgc_attrs a = set_ints(set_int(attrs(PCGC_OP_SPLIT), "axis", 1), "sizes", 3, 7);
  ck_assert_int_eq(pcgc_op_num_outputs(PCGC_OP_SPLIT, &a), 2);
  result r = INFER(PCGC_OP_SPLIT, &a, F32(2, 10));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 3);
  SHAPE(r.out[1], PCGC_F32, 2, 7);
  SEQ(r.out[1]);
  a = set_ints(set_int(attrs(PCGC_OP_SPLIT), "axis", -2), "sizes", 1, 2, 3);
  ck_assert_int_eq(pcgc_op_num_outputs(PCGC_OP_SPLIT, &a), 3);
  r = INFER(PCGC_OP_SPLIT, &a, F32(6, 4));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 1, 4);
  SHAPE(r.out[1], PCGC_F32, 2, 4);
  SHAPE(r.out[2], PCGC_F32, 3, 4);
}
END_TEST

START_TEST(test_split_errors)
{
  pcgc_attrs a = set_ints(set_int(attrs(PCGC_OP_SPLIT), "axis", 1), "sizes", 3, 3);
  result r = INFER(PCGC_OP_SPLIT, &a, F32(2, 10));
  FAILS(r, PCGC_ERR_TYPE, "sizes add up to 6 but dim 1 has size 10", "add up to the size");
  a = set_ints(set_int(attrs(PCGC_OP_SPLIT), "axis", 1), "sizes", 10, 0);
  r = INFER(PCGC_OP_SPLIT, &a, F32(2, 10));
  FAILS(r, PCGC_ERR_TYPE, "sizes must be positive", NULL);
  a = set_ints(set_int(attrs(PCGC_OP_SPLIT), "axis", 2), "sizes", 1, 1);
  r = INFER(PCGC_OP_SPLIT, &a, F32(2, 2));
  FAILS(r, PCGC_ERR_TYPE, "axis 2 is out of range", NULL);
}
END_TEST

START_TEST(test_reshape_shapes)
{
  pcgc_attrs a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", 6, 4);
  result r = INFER(PCGC_OP_RESHAPE, &a, F32(2, 3, 4));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 6, 4);
  SEQ(r.out[0]);
  a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", -1, 4);
  r = INFER(PCGC_OP_RESHAPE, &a, F32(2, 3, 4));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 6, 4);
  a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", 2, -1, 2);
  r = INFER(PCGC_OP_RESHAPE, &a, I64(2, 3, 4));
  OK(r);
  SHAPE(r.out[0], PCGC_I64, 2, 6, 2);
  a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", -1);
  r = INFER(PCGC_OP_RESHAPE, &a, F32(2, 3, 4));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 24);
}
END_TEST

START_TEST(test_reshape_errors)
{
  pcgc_attrs a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", 5, 5);
  result r = INFER(PCGC_OP_RESHAPE, &a, F32(2, 3, 4));
  FAILS(r, PCGC_ERR_TYPE, "the new shape has 25 elements but the input f32[2, 3, 4] has 24", "-1");
  a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", -1, -1);
  r = INFER(PCGC_OP_RESHAPE, &a, F32(2, 3, 4));
  FAILS(r, PCGC_ERR_TYPE, "only one dim of the shape may be -1", NULL);
  a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", -1, 5);
  r = INFER(PCGC_OP_RESHAPE, &a, F32(2, 3, 4));
  FAILS(r, PCGC_ERR_TYPE, "cannot infer the -1 dim: 24 elements are not divisible by 5", NULL);
  a = set_ints(attrs(PCGC_OP_RESHAPE), "shape", 0, 24);
  r = INFER(PCGC_OP_RESHAPE, &a, F32(2, 3, 4));
  FAILS(r, PCGC_ERR_TYPE, "sizes must be positive", NULL);
}
END_TEST

START_TEST(test_transpose_shapes)
{
  pcgc_attrs a = set_ints(attrs(PCGC_OP_TRANSPOSE), "perm", 2, 0, 1);
  result r = INFER(PCGC_OP_TRANSPOSE, &a, F32(2, 3, 4));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 4, 2, 3);
  SEQ(r.out[0]);
  a = set_ints(attrs(PCGC_OP_TRANSPOSE), "perm", 0, 2, 1, 3);
  r = INFER(PCGC_OP_TRANSPOSE, &a, F32(2, 3, 4, 5));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 4, 3, 5);
  a = set_ints(attrs(PCGC_OP_TRANSPOSE), "perm", -1, 0, 1);
  r = INFER(PCGC_OP_TRANSPOSE, &a, F32(2, 3, 4));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 4, 2, 3);
}
END_TEST

START_TEST(test_transpose_errors)
{
  pcgc_attrs a = set_ints(attrs(PCGC_OP_TRANSPOSE), "perm", 1, 0);
  result r = INFER(PCGC_OP_TRANSPOSE, &a, F32(2, 3, 4));
  FAILS(r, PCGC_ERR_TYPE, "perm has 2 entries but the input has rank 3", "perm lists every dim once");
  a = set_ints(attrs(PCGC_OP_TRANSPOSE), "perm", 0, 0, 1);
  r = INFER(PCGC_OP_TRANSPOSE, &a, F32(2, 3, 4));
  FAILS(r, PCGC_ERR_TYPE, "perm lists dim 0 twice", NULL);
  a = set_ints(attrs(PCGC_OP_TRANSPOSE), "perm", 0, 1, 3);
  r = INFER(PCGC_OP_TRANSPOSE, &a, F32(2, 3, 4));
  FAILS(r, PCGC_ERR_TYPE, "perm entry 3 is out of range for a rank-3 tensor", NULL);
}
END_TEST

START_TEST(test_flatten_shapes)
{
  result r = INFER(PCGC_OP_FLATTEN, NULL, F32(2, 3, 4, 5)); /* axis=1 */
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 60);
  SEQ(r.out[0]);
  pcgc_attrs a = set_int(attrs(PCGC_OP_FLATTEN), "axis", 0);
  r = INFER(PCGC_OP_FLATTEN, &a, F32(2, 3, 4, 5));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 1, 120);
  a = set_int(attrs(PCGC_OP_FLATTEN), "axis", 2);
  r = INFER(PCGC_OP_FLATTEN, &a, F32(2, 3, 4, 5));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 6, 20);
  a = set_int(attrs(PCGC_OP_FLATTEN), "axis", 4);
  r = INFER(PCGC_OP_FLATTEN, &a, F32(2, 3, 4, 5));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 120, 1);
  a = set_int(attrs(PCGC_OP_FLATTEN), "axis", -1);
  r = INFER(PCGC_OP_FLATTEN, &a, F32(2, 3, 4, 5));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 24, 5);
  a = set_int(attrs(PCGC_OP_FLATTEN), "axis", 5);
  r = INFER(PCGC_OP_FLATTEN, &a, F32(2, 3, 4, 5));
  FAILS(r, PCGC_ERR_TYPE, "axis 5 is out of range for a rank-4 tensor", NULL);
}
END_TEST

/* -------------------------------------- sequential: softmax, reductions */

START_TEST(test_softmax_shapes)
{
  result r = INFER(PCGC_OP_SOFTMAX, NULL, F32(4, 10));
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 4, 10);
  SEQ(r.out[0]);
  pcgc_attrs a = set_int(attrs(PCGC_OP_SOFTMAX), "axis", 0);
  r = INFER(PCGC_OP_SOFTMAX, &a, F32(4, 10));
  OK(r);
  a = set_int(attrs(PCGC_OP_SOFTMAX), "axis", 2);
  r = INFER(PCGC_OP_SOFTMAX, &a, F32(4, 10));
  FAILS(r, PCGC_ERR_TYPE, "axis 2 is out of range for a rank-2 tensor", "use 0..1, or -1..-2");
  r = INFER(PCGC_OP_SOFTMAX, NULL, I32(4, 10));
  FAILS(r, PCGC_ERR_TYPE, "floating-point", NULL);
}
END_TEST

START_TEST(test_reduce_shapes)
{
  static const pcgc_op_kind ops[] = {PCGC_OP_REDUCE_SUM, PCGC_OP_REDUCE_MEAN};
  for (int i = 0; i < 2; i++) {
    pcgc_attrs a = set_ints(attrs(ops[i]), "dims", 1);
    result r = INFER(ops[i], &a, F32(2, 3, 4));
    OK(r);
    SHAPE(r.out[0], PCGC_F32, 2, 4);
    SEQ(r.out[0]);
    a = set_int(set_ints(attrs(ops[i]), "dims", 1), "keepdims", 1);
    r = INFER(ops[i], &a, F32(2, 3, 4));
    OK(r);
    SHAPE(r.out[0], PCGC_F32, 2, 1, 4);
    a = set_ints(attrs(ops[i]), "dims", 0, 2);
    r = INFER(ops[i], &a, F32(2, 3, 4));
    OK(r);
    SHAPE(r.out[0], PCGC_F32, 3);
    a = set_int(set_ints(attrs(ops[i]), "dims", 2, 0), "keepdims", 1);
    r = INFER(ops[i], &a, F32(2, 3, 4));
    OK(r);
    SHAPE(r.out[0], PCGC_F32, 1, 3, 1);
    a = set_ints(attrs(ops[i]), "dims", -1);
    r = INFER(ops[i], &a, F32(2, 3, 4));
    OK(r);
    SHAPE(r.out[0], PCGC_F32, 2, 3);
    a = set_ints(attrs(ops[i]), "dims", 0, 1, 2);
    r = INFER(ops[i], &a, F32(2, 3, 4));
    OK(r);
    SCALAR(r.out[0], PCGC_F32);
  }
}
END_TEST

START_TEST(test_reduce_errors)
{
  pcgc_attrs a = set_ints(attrs(PCGC_OP_REDUCE_SUM), "dims", 1, -2);
  result r = INFER(PCGC_OP_REDUCE_SUM, &a, F32(2, 3, 4));
  FAILS(r, PCGC_ERR_TYPE, "dims lists dim 1 twice", NULL);
  a = set_ints_(attrs(PCGC_OP_REDUCE_SUM), "dims", NULL, 0);
  r = INFER(PCGC_OP_REDUCE_SUM, &a, F32(2, 3, 4));
  FAILS(r, PCGC_ERR_TYPE, "at least one dim", NULL);
  a = set_ints(attrs(PCGC_OP_REDUCE_MEAN), "dims", 3);
  r = INFER(PCGC_OP_REDUCE_MEAN, &a, F32(2, 3, 4));
  FAILS(r, PCGC_ERR_TYPE, "dims entry 3 is out of range", NULL);
}
END_TEST

/* -------------------------------------------------- sequential: attention */

/* q k v [2, 5, 16], wq wk wv [16, 32], wo [32, 16] (+ biases [32] x3, [16]) */

START_TEST(test_attention_shapes)
{
  pcgc_ptensor in[11];
  pcgc_attrs a = attn_attrs(4, false);
  result r = infer_with(PCGC_OP_ATTENTION, &a, attn_inputs(in, false), in);
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 5, 16);
  SEQ(r.out[0]);
  a = attn_attrs(4, true);
  r = infer_with(PCGC_OP_ATTENTION, &a, attn_inputs(in, true), in);
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 5, 16);
  /* cross-attention: 7 keys, 24 output features */
  attn_inputs(in, false);
  in[1] = in[2] = F32(2, 7, 16);
  in[6] = F32(32, 24);
  a = attn_attrs(8, false);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 5, 24);
}
END_TEST

START_TEST(test_attention_errors)
{
  pcgc_ptensor in[11];
  pcgc_attrs a = attn_attrs(5, false);
  result r = infer_with(PCGC_OP_ATTENTION, &a, attn_inputs(in, false), in);
  FAILS(r, PCGC_ERR_TYPE, "heads=5 must divide the projection size 32", NULL);
  a = attn_attrs(4, true);
  attn_inputs(in, false);
  in[1] = in[2] = F32(2, 7, 16);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  FAILS(r, PCGC_ERR_TYPE, "a causal mask needs equal query and key lengths (5 vs 7)", NULL);
  a = attn_attrs(4, false);
  r = infer_with(PCGC_OP_ATTENTION, &a, attn_inputs(in, true) - 3, in);
  FAILS(r, PCGC_ERR_TYPE, "attention takes 7 inputs", NULL);
  attn_inputs(in, false);
  in[4] = in[5] = F32(16, 24);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  FAILS(r, PCGC_ERR_TYPE, "wk and wv project to 24 features, which is not a number of key/value heads of size 8",
        "kv_heads * 8 columns");
  attn_inputs(in, false);
  in[5] = F32(16, 16);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  FAILS(r, PCGC_ERR_TYPE, "wv dim 1 (wk's projection size) is 16 but must be 32", NULL);
  attn_inputs(in, false);
  in[2] = F32(2, 6, 16);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  FAILS(r, PCGC_ERR_TYPE, "k and v must have the same sequence length", NULL);
  r = infer_with(PCGC_OP_ATTENTION, NULL, attn_inputs(in, false), in); /* heads required */
  FAILS(r, PCGC_ERR_INVALID, "'heads'", NULL);
}
END_TEST

/* Grouped-query attention: wk and wv [16, F], F = kv_heads * 8 for 4 heads
 * of 8; the key/value biases follow F. */
START_TEST(test_attention_grouped_query)
{
  pcgc_ptensor in[11];
  pcgc_attrs a = attn_attrs(4, true);
  for (int64_t F = 8; F <= 16; F += 8) { /* 1 (multi-query) and 2 key/value heads */
    attn_inputs(in, true);
    in[4] = in[5] = F32(16, F);
    in[8] = in[9] = F32(F);
    result r = infer_with(PCGC_OP_ATTENTION, &a, 11, in);
    OK(r);
    SHAPE(r.out[0], PCGC_F32, 2, 5, 16);
    pcgc_op_cost c;
    pcgc_op_cost_of(PCGC_OP_ATTENTION, &a, 11, in, 1, r.out, &c);
    /* projections 2*B*S*16*(32 + 2F), scores and context 2*2*B*S*S*32, output 2*B*S*32*16 */
    double want = 2.0 * 10 * 16 * (32 + 2 * F) + 4.0 * 10 * 5 * 32 + 2.0 * 10 * 32 * 16 + 5.0 * 2 * 4 * 5 * 5;
    ck_assert_double_eq_tol(c.fwd_flops, want, 1e-6);
  }
  attn_inputs(in, true);
  in[4] = in[5] = F32(16, 16);
  result r = infer_with(PCGC_OP_ATTENTION, &a, 11, in); /* bk, bv still [32] */
  FAILS(r, PCGC_ERR_TYPE, "bk size (wk's and wv's columns) is 32 but must be 16", NULL);
  attn_inputs(in, false);
  in[4] = in[5] = F32(16, 24); /* 3 key/value heads do not divide 4 */
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  FAILS(r, PCGC_ERR_TYPE, "not a number of key/value heads of size 8 (E/heads = 32/4) that divides heads=4", NULL);
}
END_TEST

/* 10 inputs: bq, bk, bv without bo (the form a head split uses) */
START_TEST(test_attention_qkv_bias_shapes)
{
  pcgc_ptensor in[11];
  attn_inputs(in, true);
  pcgc_attrs a = attn_attrs(4, true);
  result r = infer_with(PCGC_OP_ATTENTION, &a, 10, in);
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 5, 16);
  SEQ(r.out[0]);
  /* cross-attention with Eo != E: the biases follow E, not Eo */
  in[1] = in[2] = F32(2, 7, 16);
  in[6] = F32(32, 24);
  a = attn_attrs(8, false);
  r = infer_with(PCGC_OP_ATTENTION, &a, 10, in);
  OK(r);
  SHAPE(r.out[0], PCGC_F32, 2, 5, 24);
  /* f64 throughout */
  for (int i = 0; i < 3; i++) in[i] = ten(PCGC_F64, DIMS(2, 5, 16));
  for (int i = 3; i < 6; i++) in[i] = ten(PCGC_F64, DIMS(16, 32));
  in[6] = ten(PCGC_F64, DIMS(32, 16));
  for (int i = 7; i < 10; i++) in[i] = ten(PCGC_F64, DIMS(32));
  r = infer_with(PCGC_OP_ATTENTION, &a, 10, in);
  OK(r);
  SHAPE(r.out[0], PCGC_F64, 2, 5, 16);
}
END_TEST

START_TEST(test_attention_qkv_bias_errors)
{
  pcgc_ptensor in[11];
  pcgc_attrs a = attn_attrs(4, false);
  attn_inputs(in, true);
  in[8] = F32(16); /* bk follows the projection size E = 32 */
  result r = infer_with(PCGC_OP_ATTENTION, &a, 10, in);
  FAILS(r, PCGC_ERR_TYPE, "bk size (wk's and wv's columns) is 16 but must be 32", NULL);
  attn_inputs(in, true);
  in[9] = F32(1, 32);
  r = infer_with(PCGC_OP_ATTENTION, &a, 10, in);
  FAILS(r, PCGC_ERR_TYPE, "bv must have rank 1, got f32[1, 32]", NULL);
  attn_inputs(in, true);
  in[7] = ten(PCGC_F64, DIMS(32));
  r = infer_with(PCGC_OP_ATTENTION, &a, 10, in);
  FAILS(r, PCGC_ERR_TYPE, "q is f32 but bq is f64", NULL);
  /* 8 and 9 inputs are neither form; the message lists the three */
  attn_inputs(in, true);
  for (int n = 8; n <= 9; n++) {
    r = infer_with(PCGC_OP_ATTENTION, &a, n, in);
    FAILS(r, PCGC_ERR_TYPE, "attention takes 7 inputs (q, k, v, wq, wk, wv, wo), 10 (plus bq, bk, bv) or 11", NULL);
  }
  /* 11 inputs still check bo against the output features */
  in[10] = F32(32);
  r = infer_with(PCGC_OP_ATTENTION, &a, 11, in);
  FAILS(r, PCGC_ERR_TYPE, "bo size is 32 but must be 16", NULL);
}
END_TEST

/* ----------------------------------------------------- sequential: losses */

START_TEST(test_loss_shapes)
{
  result r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, F32(8, 10), I32(8));
  OK(r);
  SCALAR(r.out[0], PCGC_F32);
  SEQ(r.out[0]);
  r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, F16(2, 5, 10), I64(2, 5));
  OK(r);
  SCALAR(r.out[0], PCGC_F16);
  pcgc_attrs a = set_int(attrs(PCGC_OP_MSE), "reduction", PCGC_REDUCTION_SUM);
  r = INFER(PCGC_OP_MSE, &a, F32(8, 4), F32(8, 4));
  OK(r);
  SCALAR(r.out[0], PCGC_F32);
  SEQ(r.out[0]);
}
END_TEST

START_TEST(test_loss_errors)
{
  result r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, F32(8, 10), F32(8));
  FAILS(r, PCGC_ERR_TYPE, "labels must be integer class ids, got f32", "i32");
  r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, F32(8, 10), I32(7));
  FAILS(r, PCGC_ERR_TYPE, "must have the logits' shape", NULL);
  r = INFER(PCGC_OP_SOFTMAX_CROSS_ENTROPY, NULL, F32(8, 10), I32(8, 10));
  FAILS(r, PCGC_ERR_TYPE, "without the class dim", NULL);
  r = INFER(PCGC_OP_MSE, NULL, F32(8, 4), F32(8, 5));
  FAILS(r, PCGC_ERR_TYPE, "prediction f32[8, 4] and target f32[8, 5] must have the same shape", NULL);
  r = INFER(PCGC_OP_MSE, NULL, F32(8, 4), F16(8, 4));
  FAILS(r, PCGC_ERR_TYPE, "prediction is f32 but target is f16", NULL);
}
END_TEST

/* ------------------------------------------------------------------ main */

static Suite *infer_suite(void)
{
  Suite *s = suite_create("infer");

  TCase *tc = tcase_create("table");
  tcase_add_test(tc, test_every_op_has_a_parsing_schema);
  tcase_add_test(tc, test_every_op_infers_a_plausible_instance);
  tcase_add_test(tc, test_every_op_rejects_wrong_arity);
  tcase_add_test(tc, test_every_required_attribute_is_enforced);
  tcase_add_test(tc, test_arity_messages);
  tcase_add_test(tc, test_missing_concat_axis_is_invalid);
  tcase_add_test(tc, test_attrs_of_another_op_are_invalid);
  tcase_add_test(tc, test_malformed_input_types_are_rejected);
  suite_add_tcase(s, tc);

  tc = tcase_create("sequential");
  tcase_add_test(tc, test_input_and_weight_shapes);
  tcase_add_test(tc, test_linear_shapes);
  tcase_add_test(tc, test_linear_shape_errors);
  tcase_add_test(tc, test_matmul_shapes);
  tcase_add_test(tc, test_batch_matmul_shapes);
  tcase_add_test(tc, test_batch_matmul_shape_errors);
  tcase_add_test(tc, test_conv2d_shapes);
  tcase_add_test(tc, test_conv2d_groups_and_depthwise);
  tcase_add_test(tc, test_conv2d_shape_errors);
  tcase_add_test(tc, test_pool2d_shapes);
  tcase_add_test(tc, test_pool2d_errors);
  tcase_add_test(tc, test_batchnorm_shapes);
  tcase_add_test(tc, test_layernorm_shapes);
  tcase_add_test(tc, test_embedding_shapes);
  tcase_add_test(tc, test_embedding_errors);
  tcase_add_test(tc, test_unary_ops_keep_shape_and_dtype);
  tcase_add_test(tc, test_unary_errors);
  tcase_add_test(tc, test_binary_broadcasting);
  tcase_add_test(tc, test_binary_errors);
  tcase_add_test(tc, test_concat_shapes);
  tcase_add_test(tc, test_concat_errors);
  tcase_add_test(tc, test_split_shapes);
  tcase_add_test(tc, test_split_errors);
  tcase_add_test(tc, test_reshape_shapes);
  tcase_add_test(tc, test_reshape_errors);
  tcase_add_test(tc, test_transpose_shapes);
  tcase_add_test(tc, test_transpose_errors);
  tcase_add_test(tc, test_flatten_shapes);
  tcase_add_test(tc, test_softmax_shapes);
  tcase_add_test(tc, test_reduce_shapes);
  tcase_add_test(tc, test_reduce_errors);
  tcase_add_test(tc, test_attention_shapes);
  tcase_add_test(tc, test_attention_errors);
  tcase_add_test(tc, test_attention_grouped_query);
  tcase_add_test(tc, test_attention_qkv_bias_shapes);
  tcase_add_test(tc, test_attention_qkv_bias_errors);
  tcase_add_test(tc, test_loss_shapes);
  tcase_add_test(tc, test_loss_errors);
  suite_add_tcase(s, tc);

  return s;
}

PCGC_CHECK_MAIN(infer_suite)
