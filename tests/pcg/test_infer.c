/*
 * test_infer.c — shape and parallel-type inference (pcg/infer.c), called
 * directly through pcgc_op_infer on hand-built pcgc_ptensor inputs.
 *
 * Four groups, one TCase each:
 *  - table:      every op in ops.def has a schema that parses, the arity and
 *                attribute checks common to all ops, and a plausible
 *                sequential instance of every op that infers;
 *  - sequential: output shapes of every op family, and the illegal shapes
 *                with the messages and hints users see;
 *  - parallel:   the degree algebra of DESIGN.md ("The PCG") op by op —
 *                which shardings are legal, which give partial sums (sum
 *                degree), which replicas an input needs — and the illegal
 *                shardings with their messages and hints;
 *  - pipeline:   the parallel operators themselves and micro-batches flowing
 *                through ordinary operators.
 *
 * Expected values are worked out by hand from the rules, not read back from
 * the implementation. Assertions that expose a bug in infer.c are kept under
 * a "Regression (fixed)" comment.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pcg.h"

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
#define F16(...) ten(PCGC_F16, DIMS(__VA_ARGS__))
#define I32(...) ten(PCGC_I32, DIMS(__VA_ARGS__))
#define I64(...) ten(PCGC_I64, DIMS(__VA_ARGS__))

/* Degree modifiers: each returns a copy with one more kind of parallelism. */
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
static pcgc_ptensor psum(pcgc_ptensor t, int sum)
{
  t.sum = sum;
  return t;
}
static pcgc_ptensor piped(pcgc_ptensor t, int micro, int dim)
{
  t.micro = micro;
  t.micro_dim = dim;
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
  ck_assert_msg(pcgc_attrs_set_int(&a, name, v) == PCGC_OK, "set %s.%s", pcgc_op_name(a.kind), name);
  return a;
}
static pcgc_attrs set_float(pcgc_attrs a, const char *name, double v)
{
  ck_assert_msg(pcgc_attrs_set_float(&a, name, v) == PCGC_OK, "set %s.%s", pcgc_op_name(a.kind), name);
  return a;
}
static pcgc_attrs set_ints_(pcgc_attrs a, const char *name, const int64_t *v, int n)
{
  ck_assert_msg(pcgc_attrs_set_ints(&a, name, n, v) == PCGC_OK, "set %s.%s", pcgc_op_name(a.kind), name);
  return a;
}
#define set_ints(a, name, ...) set_ints_(a, name, DIMS(__VA_ARGS__))

/* Attributes of the parallel operators: dim < 0 for replicate/reduce. */
static pcgc_attrs par(pcgc_op_kind k, int dim, int degree)
{
  pcgc_attrs a = attrs(k);
  if (dim >= 0 || k == PCGC_OP_PARTITION || k == PCGC_OP_COMBINE || k == PCGC_OP_PIPELINE ||
      k == PCGC_OP_UNPIPELINE)
    a = set_int(a, "dim", dim);
  return set_int(a, "degree", degree);
}

typedef struct result {
  pcgc_status s;
  pcgc_error err;
  int n_out;
  pcgc_ptensor out[PCGC_MAX_INTS];
} result;

/* Runs inference; `a` NULL means the op's default attributes. */
static result infer_with(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_ptensor *in)
{
  result r;
  memset(&r, 0, sizeof r);
  pcgc_attrs def;
  if (a == NULL) {
    pcgc_attrs_init(&def, k);
    a = &def;
  }
  r.n_out = pcgc_op_num_outputs(k, a);
  ck_assert_int_le(r.n_out, PCGC_MAX_INTS);
  r.s = pcgc_op_infer(k, a, n_in, in, r.out, &r.err);
  return r;
}
#define INFER(k, a, ...) infer_with(k, a, IN(__VA_ARGS__))

#define OK(r)                                                                                     \
  ck_assert_msg((r).s == PCGC_OK, "expected success, got %s: %s [hint: %s]", pcgc_status_str((r).s), \
                (r).err.message, (r).err.hint)

static void check_fail(int line, const result *r, pcgc_status st, const char *msg, const char *hint)
{
  char t[256] = "";
  if (r->s == PCGC_OK) pcgc_ptensor_format(t, sizeof t, &r->out[0]);
  ck_assert_msg(r->s == st, "line %d: expected %s, got %s (%s%s)", line, pcgc_status_str(st),
                pcgc_status_str(r->s), r->err.message, t);
  ck_assert_msg(r->err.status == st, "line %d: err.status %d", line, r->err.status);
  if (msg)
    ck_assert_msg(strstr(r->err.message, msg) != NULL, "line %d: message \"%s\" lacks \"%s\"", line,
                  r->err.message, msg);
  if (hint)
    ck_assert_msg(strstr(r->err.hint, hint) != NULL, "line %d: hint \"%s\" lacks \"%s\"", line,
                  r->err.hint, hint);
}
#define FAILS(r, st, msg, hint) check_fail(__LINE__, &(r), st, msg, hint)

static void check_shape(int line, const pcgc_ptensor *t, pcgc_dtype dt, const int64_t *dims, int rank)
{
  char s[256];
  pcgc_ptensor_format(s, sizeof s, t);
  ck_assert_msg(t->dtype == dt, "line %d: dtype of %s, want %s", line, s, pcgc_dtype_name(dt));
  ck_assert_msg(t->rank == rank, "line %d: rank of %s, want %d", line, s, rank);
  for (int i = 0; i < rank; i++)
    ck_assert_msg(t->dims[i] == dims[i], "line %d: dim %d of %s, want %lld", line, i, s, (long long)dims[i]);
}
#define SHAPE(t, dt, ...) check_shape(__LINE__, &(t), dt, DIMS(__VA_ARGS__))
#define SCALAR(t, dt) check_shape(__LINE__, &(t), dt, NULL, 0)

static void check_degrees(int line, const pcgc_ptensor *t, const int64_t *deg, int rank)
{
  char s[256];
  pcgc_ptensor_format(s, sizeof s, t);
  ck_assert_msg(t->rank == rank, "line %d: rank of %s, want %d", line, s, rank);
  for (int i = 0; i < rank; i++)
    ck_assert_msg(t->degree[i] == deg[i], "line %d: degree[%d] of %s, want %lld", line, i, s,
                  (long long)deg[i]);
}
#define DEG(t, ...) check_degrees(__LINE__, &(t), DIMS(__VA_ARGS__))

static void check_par(int line, const pcgc_ptensor *t, int sum, int replica, int micro, int micro_dim)
{
  char s[256];
  pcgc_ptensor_format(s, sizeof s, t);
  ck_assert_msg(t->sum == sum, "line %d: sum of %s, want %d", line, s, sum);
  ck_assert_msg(t->replica == replica, "line %d: replica of %s, want %d", line, s, replica);
  ck_assert_msg(t->micro == micro, "line %d: micro of %s, want %d", line, s, micro);
  ck_assert_msg(t->micro_dim == micro_dim, "line %d: micro_dim of %s, want %d", line, s, micro_dim);
}
/* sum, replica, micro, micro_dim */
#define PAR(t, sum, rep, micro, mdim) check_par(__LINE__, &(t), sum, rep, micro, mdim)
#define SEQ(t)                                                                   \
  do {                                                                           \
    ck_assert_msg(pcgc_ptensor_pieces(&(t)) == 1, "line %d: not one piece", __LINE__); \
    PAR(t, 1, 1, 1, -1);                                                         \
  } while (0)

/* --------------------------------------------------------------- op table */

/* A small legal sequential instance of op k: sets *a and in[], returns n_in.
 * Hand-written per op, so it is checked against the op count. */
_Static_assert(PCGC_OP_COUNT == 42, "add the new op to plausible() in test_infer.c");

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
  case PCGC_OP_EMBEDDING: in[0] = I32(4, 6); in[1] = F32(100, 8); return 2;
  case PCGC_OP_SCALAR_ADD:
  case PCGC_OP_SCALAR_SUB:
  case PCGC_OP_SCALAR_MUL:
  case PCGC_OP_SCALAR_DIV: *a = set_float(*a, "scalar", 2.0); /* fall through */
  case PCGC_OP_RELU:
  case PCGC_OP_GELU:
  case PCGC_OP_SIGMOID:
  case PCGC_OP_TANH:
  case PCGC_OP_EXP:
  case PCGC_OP_IDENTITY:
  case PCGC_OP_DROPOUT:
  case PCGC_OP_SOFTMAX:
  case PCGC_OP_FLATTEN: in[0] = F32(4, 6); return 1;
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
  case PCGC_OP_REDUCE_MEAN: *a = set_ints(*a, "dims", 1); in[0] = F32(4, 6); return 1;
  case PCGC_OP_ATTENTION:
    *a = set_int(*a, "heads", 2);
    in[0] = in[1] = in[2] = F32(2, 5, 8);
    in[3] = in[4] = in[5] = F32(8, 8);
    in[6] = F32(8, 8);
    return 7;
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
static pcgc_attrs pool(pcgc_pool_kind kind, int kernel, int stride)
{
  return set_int(set_int(set_int(attrs(PCGC_OP_POOL2D), "kind", kind), "kernel", kernel), "stride", stride);
}

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

static const pcgc_op_kind unary_ops[] = {
    PCGC_OP_RELU,       PCGC_OP_GELU,       PCGC_OP_SIGMOID,    PCGC_OP_TANH,
    PCGC_OP_EXP,        PCGC_OP_IDENTITY,   PCGC_OP_SCALAR_ADD, PCGC_OP_SCALAR_SUB,
    PCGC_OP_SCALAR_MUL, PCGC_OP_SCALAR_DIV, PCGC_OP_DROPOUT,
};
#define N_UNARY (int)(sizeof unary_ops / sizeof unary_ops[0])

/* Attributes of a unary op, with scalar=2 where it has one. */
static pcgc_attrs unary_attrs(pcgc_op_kind k)
{
  pcgc_attrs a = attrs(k);
  if (pcgc_op_attr_index(k, "scalar") >= 0) a = set_float(a, "scalar", 2.0);
  return a;
}

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
static int attn_inputs(pcgc_ptensor *in, bool bias)
{
  in[0] = in[1] = in[2] = F32(2, 5, 16);
  in[3] = in[4] = in[5] = F32(16, 32);
  in[6] = F32(32, 16);
  if (!bias) return 7;
  in[7] = in[8] = in[9] = F32(32);
  in[10] = F32(16);
  return 11;
}

static pcgc_attrs attn_attrs(int heads, bool causal)
{
  return set_int(set_int(attrs(PCGC_OP_ATTENTION), "heads", heads), "causal", causal);
}

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
  in[4] = F32(16, 24);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  FAILS(r, PCGC_ERR_TYPE, "wk dim 1 (projection size) is 24 but must be 32", NULL);
  attn_inputs(in, false);
  in[2] = F32(2, 6, 16);
  r = infer_with(PCGC_OP_ATTENTION, &a, 7, in);
  FAILS(r, PCGC_ERR_TYPE, "k and v must have the same sequence length", NULL);
  r = infer_with(PCGC_OP_ATTENTION, NULL, attn_inputs(in, false), in); /* heads required */
  FAILS(r, PCGC_ERR_INVALID, "'heads'", NULL);
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
  tcase_add_test(tc, test_loss_shapes);
  tcase_add_test(tc, test_loss_errors);
  suite_add_tcase(s, tc);

  tc = tcase_create("parallel");
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
  tcase_add_test(tc, test_attention_by_heads);
  tcase_add_test(tc, test_attention_by_batch_and_query);
  tcase_add_test(tc, test_attention_parallel_errors);
  tcase_add_test(tc, test_attention_sharded_output_bias);
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

int main(void)
{
  SRunner *sr = srunner_create(infer_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
