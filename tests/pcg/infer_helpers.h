/*
 * infer_helpers.h — what test_infer.c and test_infer_parallel.c share:
 * building parallel tensor types and attributes, running pcgc_op_infer,
 * and asserting shapes, degrees and error messages with the caller's line.
 */
#ifndef PCGC_TESTS_INFER_HELPERS_H
#define PCGC_TESTS_INFER_HELPERS_H

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

static inline pcgc_ptensor ten(pcgc_dtype dt, const int64_t *dims, int rank)
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
static inline pcgc_ptensor shard(pcgc_ptensor t, int dim, int degree)
{
  t.degree[dim] *= degree;
  return t;
}
static inline pcgc_ptensor rep(pcgc_ptensor t, int replica)
{
  t.replica = replica;
  return t;
}
static inline pcgc_ptensor psum(pcgc_ptensor t, int sum)
{
  t.sum = sum;
  return t;
}
static inline pcgc_ptensor piped(pcgc_ptensor t, int micro, int dim)
{
  t.micro = micro;
  t.micro_dim = dim;
  return t;
}

static inline pcgc_attrs attrs(pcgc_op_kind k)
{
  pcgc_attrs a;
  pcgc_attrs_init(&a, k);
  return a;
}
static inline pcgc_attrs set_int(pcgc_attrs a, const char *name, int64_t v)
{
  ck_assert_msg(pcgc_attrs_set_int(&a, name, v) == PCGC_OK, "set %s.%s", pcgc_op_name(a.kind), name);
  return a;
}
static inline pcgc_attrs set_float(pcgc_attrs a, const char *name, double v)
{
  ck_assert_msg(pcgc_attrs_set_float(&a, name, v) == PCGC_OK, "set %s.%s", pcgc_op_name(a.kind), name);
  return a;
}
static inline pcgc_attrs set_ints_(pcgc_attrs a, const char *name, const int64_t *v, int n)
{
  ck_assert_msg(pcgc_attrs_set_ints(&a, name, n, v) == PCGC_OK, "set %s.%s", pcgc_op_name(a.kind), name);
  return a;
}
#define set_ints(a, name, ...) set_ints_(a, name, DIMS(__VA_ARGS__))

/* Attributes of the parallel operators: dim < 0 for replicate/reduce. */
static inline pcgc_attrs par(pcgc_op_kind k, int dim, int degree)
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
static inline result infer_with(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_ptensor *in)
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

static inline void check_fail(int line, const result *r, pcgc_status st, const char *msg, const char *hint)
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

static inline void check_shape(int line, const pcgc_ptensor *t, pcgc_dtype dt, const int64_t *dims, int rank)
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

static inline void check_degrees(int line, const pcgc_ptensor *t, const int64_t *deg, int rank)
{
  char s[256];
  pcgc_ptensor_format(s, sizeof s, t);
  ck_assert_msg(t->rank == rank, "line %d: rank of %s, want %d", line, s, rank);
  for (int i = 0; i < rank; i++)
    ck_assert_msg(t->degree[i] == deg[i], "line %d: degree[%d] of %s, want %lld", line, i, s,
                  (long long)deg[i]);
}
#define DEG(t, ...) check_degrees(__LINE__, &(t), DIMS(__VA_ARGS__))

static inline void check_par(int line, const pcgc_ptensor *t, int sum, int replica, int micro, int micro_dim)
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


static inline pcgc_attrs pool(pcgc_pool_kind kind, int kernel, int stride)
{
  return set_int(set_int(set_int(attrs(PCGC_OP_POOL2D), "kind", kind), "kernel", kernel), "stride", stride);
}

static const pcgc_op_kind unary_ops[] __attribute__((unused)) = {
    PCGC_OP_RELU,       PCGC_OP_GELU,       PCGC_OP_SIGMOID,    PCGC_OP_SILU,       PCGC_OP_RELU6,      PCGC_OP_HARDSIGMOID, PCGC_OP_HARDSWISH, PCGC_OP_LEAKY_RELU, PCGC_OP_TANH,
    PCGC_OP_EXP,        PCGC_OP_IDENTITY,   PCGC_OP_SCALAR_ADD, PCGC_OP_SCALAR_SUB,
    PCGC_OP_SCALAR_MUL, PCGC_OP_SCALAR_DIV, PCGC_OP_DROPOUT,    PCGC_OP_POW,        PCGC_OP_CLIP,
};
#define N_UNARY (int)(sizeof unary_ops / sizeof unary_ops[0])

/* Attributes of a unary op, with scalar=2 where it has one (pow: exponent 0.5). */
static inline pcgc_attrs unary_attrs(pcgc_op_kind k)
{
  pcgc_attrs a = attrs(k);
  if (pcgc_op_attr_index(k, "scalar") >= 0) a = set_float(a, "scalar", 2.0);
  if (k == PCGC_OP_POW) a = set_float(a, "exponent", 0.5);
  return a;
}

static inline int attn_inputs(pcgc_ptensor *in, bool bias)
{
  in[0] = in[1] = in[2] = F32(2, 5, 16);
  in[3] = in[4] = in[5] = F32(16, 32);
  in[6] = F32(32, 16);
  if (!bias) return 7;
  in[7] = in[8] = in[9] = F32(32);
  in[10] = F32(16);
  return 11;
}

static inline pcgc_attrs attn_attrs(int heads, bool causal)
{
  return set_int(set_int(attrs(PCGC_OP_ATTENTION), "heads", heads), "causal", causal);
}

#endif
