/*
 * test_kernels_dense.c — the dense CPU kernels (runtime/cpu/k_dense.c):
 * linear, matmul, batch_matmul, conv2d, pool2d, embedding, attention.
 *
 *  - forward values on tiny cases worked out by hand;
 *  - finite-difference gradients in f64 (gradcheck.h) for every op and
 *    attribute variant;
 *  - f32 against f64 on random inputs, forward and backward;
 *  - pieces of a logical tensor (pcgc_kernel_ctx): row-sharded embedding
 *    tables, bags split along their length, attention split by query rows,
 *    batch and heads, spatially split global pooling — piece results must
 *    equal (or add up to) the whole-tensor results;
 *  - attention dropout: deterministic per seed, off when not training;
 *  - run-time errors: mismatched buffers, bad ids, bad dtypes.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "kernels.h"

#include "../common/check_main.h"

/* ---------------------------------------------------------------- helpers */

#define D(...) ((const int64_t[]){__VA_ARGS__})
#define NV(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define V(...) ((const double[]){__VA_ARGS__})
#define GF(...) {.dtype = PCGC_F64, .rank = NV(__VA_ARGS__), .dims = {__VA_ARGS__}}
#define GI(dt, bnd, ...) {.dtype = (dt), .rank = NV(__VA_ARGS__), .dims = {__VA_ARGS__}, .bound = (bnd)}
#define NIN(arr) (int)(sizeof(arr) / sizeof *(arr))

static pcgc_buf newbuf(pcgc_dtype dt, int rank, const int64_t *dims) {
  pcgc_buf b;
  memset(&b, 0, sizeof b);
  b.dtype = dt;
  b.rank = rank;
  for (int i = 0; i < rank; i++) b.dims[i] = dims[i];
  size_t n = (size_t)pcgc_buf_numel(&b) * pcgc_dtype_size(dt);
  b.data = calloc(n ? n : 1, 1);
  ck_assert_ptr_nonnull(b.data);
  return b;
}

static double get(const pcgc_buf *b, int64_t i) {
  switch (b->dtype) {
  case PCGC_F32: return ((const float *)b->data)[i];
  case PCGC_F64: return ((const double *)b->data)[i];
  case PCGC_I32: return ((const int32_t *)b->data)[i];
  default: return (double)((const int64_t *)b->data)[i];
  }
}

static void put(pcgc_buf *b, int64_t i, double v) {
  switch (b->dtype) {
  case PCGC_F32: ((float *)b->data)[i] = (float)v; break;
  case PCGC_F64: ((double *)b->data)[i] = v; break;
  case PCGC_I32: ((int32_t *)b->data)[i] = (int32_t)v; break;
  default: ((int64_t *)b->data)[i] = (int64_t)v; break;
  }
}

static pcgc_buf vals(pcgc_dtype dt, int rank, const int64_t *dims, const double *v) {
  pcgc_buf b = newbuf(dt, rank, dims);
  for (int64_t i = 0; i < pcgc_buf_numel(&b); i++) put(&b, i, v[i]);
  return b;
}

static pcgc_buf randbuf(pcgc_dtype dt, int rank, const int64_t *dims, int64_t bound, uint64_t stream) {
  pcgc_buf b = newbuf(dt, rank, dims);
  pcgc_cpu_fill_random(&b, bound, 7, stream, NULL);
  return b;
}

static pcgc_buf copy_as(const pcgc_buf *src, pcgc_dtype dt) {
  pcgc_buf b = newbuf(dt, src->rank, src->dims);
  for (int64_t i = 0; i < pcgc_buf_numel(&b); i++) put(&b, i, get(src, i));
  return b;
}

/* Contiguous copy of src[..., start:start+len, ...] along `dim`. */
static pcgc_buf slice(const pcgc_buf *src, int dim, int64_t start, int64_t len) {
  pcgc_buf b = newbuf(src->dtype, src->rank, src->dims);
  b.dims[dim] = len;
  free(b.data);
  b = newbuf(src->dtype, src->rank, b.dims);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; d++) outer *= src->dims[d];
  for (int d = dim + 1; d < src->rank; d++) inner *= src->dims[d];
  size_t es = pcgc_dtype_size(src->dtype);
  for (int64_t o = 0; o < outer; o++)
    memcpy((char *)b.data + (size_t)(o * len * inner) * es,
           (const char *)src->data + (size_t)((o * src->dims[dim] + start) * inner) * es, (size_t)(len * inner) * es);
  return b;
}

static void add_into(pcgc_buf *acc, const pcgc_buf *b) {
  for (int64_t i = 0; i < pcgc_buf_numel(acc); i++) put(acc, i, get(acc, i) + get(b, i));
}

static void freebuf(pcgc_buf *b) {
  free(b->data);
  b->data = NULL;
}

static void freebufs(int n, pcgc_buf *b) {
  for (int i = 0; i < n; i++) freebuf(&b[i]);
}

/* max |a - b| / max(1, max |b|) */
static double rel_err(const pcgc_buf *a, const pcgc_buf *b) {
  ck_assert_int_eq(pcgc_buf_numel(a), pcgc_buf_numel(b));
  double m = 1, e = 0;
  for (int64_t i = 0; i < pcgc_buf_numel(b); i++) m = fmax(m, fabs(get(b, i)));
  for (int64_t i = 0; i < pcgc_buf_numel(b); i++) e = fmax(e, fabs(get(a, i) - get(b, i)));
  return e / m;
}

/* Asserts rel_err(a, b) <= tol; the rest is a printf-style description. */
static void assert_close(const pcgc_buf *a, const pcgc_buf *b, double tol, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void assert_close(const pcgc_buf *a, const pcgc_buf *b, double tol, const char *fmt, ...) {
  double e = rel_err(a, b);
  if (e <= tol) return;
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  ck_abort_msg("%s: relative error %g > %g", what, e, tol);
}
#define ASSERT_CLOSE assert_close

static void assert_vals(const pcgc_buf *b, const double *want, double tol) {
  for (int64_t i = 0; i < pcgc_buf_numel(b); i++)
    ck_assert_msg(fabs(get(b, i) - want[i]) <= tol, "element %lld: got %.10g, want %.10g", (long long)i, get(b, i),
                  want[i]);
}

static pcgc_attrs attrs(pcgc_op_kind k) {
  pcgc_attrs a;
  pcgc_attrs_init(&a, k);
  return a;
}

static void seti(pcgc_attrs *a, const char *name, int64_t v) {
  ck_assert_msg(pcgc_attrs_set_int(a, name, v) == PCGC_OK, "set %s", name);
}

static void set2(pcgc_attrs *a, const char *name, int64_t v0, int64_t v1) {
  ck_assert_msg(pcgc_attrs_set_ints(a, name, 2, (int64_t[]){v0, v1}) == PCGC_OK, "set %s", name);
}

static void setf(pcgc_attrs *a, const char *name, double v) {
  ck_assert_msg(pcgc_attrs_set_float(a, name, v) == PCGC_OK, "set %s", name);
}

/* The output buffer inference gives for whole inputs. */
static pcgc_buf out_for(pcgc_op_kind kind, const pcgc_attrs *a, int n, const pcgc_buf *in) {
  pcgc_ptensor t[GC_MAX_IN], o[1];
  for (int i = 0; i < n; i++) pcgc_ptensor_init(&t[i], in[i].dtype, in[i].rank, in[i].dims);
  pcgc_error err;
  pcgc_error_clear(&err);
  ck_assert_msg(pcgc_op_infer(kind, a, n, t, o, &err) == PCGC_OK, "infer: %s", err.message);
  return newbuf(o[0].dtype, o[0].rank, o[0].dims);
}

static void fwd(pcgc_op_kind kind, const pcgc_attrs *a, int n, const pcgc_buf *in, pcgc_buf *out,
                const pcgc_kernel_ctx *ctx) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_status s = pcgc_cpu_forward(kind, a, n, in, 1, out, ctx, &err);
  ck_assert_msg(s == PCGC_OK, "forward: %s", err.message);
}

/* Zeroed gradients for the float inputs, NULL data for the others. */
static void grads_for(int n, const pcgc_buf *in, pcgc_buf *din) {
  for (int i = 0; i < n; i++) {
    din[i] = in[i];
    din[i].data = NULL;
    if (in[i].dtype == PCGC_F32 || in[i].dtype == PCGC_F64) din[i] = newbuf(in[i].dtype, in[i].rank, in[i].dims);
  }
}

static void bwd(pcgc_op_kind kind, const pcgc_attrs *a, int n, const pcgc_buf *in, const pcgc_buf *out,
                const pcgc_buf *dout, pcgc_buf *din, const pcgc_kernel_ctx *ctx) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_status s = pcgc_cpu_backward(kind, a, n, in, 1, out, dout, din, ctx, &err);
  ck_assert_msg(s == PCGC_OK, "backward: %s", err.message);
}

/* Runs forward into an inferred output; returns it. */
static pcgc_buf run(pcgc_op_kind kind, const pcgc_attrs *a, int n, const pcgc_buf *in) {
  pcgc_buf out = out_for(kind, a, n, in);
  fwd(kind, a, n, in, &out, NULL);
  return out;
}

static void gc(pcgc_op_kind kind, const pcgc_attrs *a, int n, const gc_input *gin, const pcgc_kernel_ctx *ctx,
               int64_t max_per_input, const char *what) {
  gc_result r = gradcheck(kind, a, n, gin, ctx, 42, max_per_input);
  ck_assert_msg(r.message[0] == '\0', "%s: %s", what, r.message);
  ck_assert_msg(r.checked > 0, "%s: nothing checked", what);
  ck_assert_msg(r.max_err <= 1e-6, "%s: gradient error %g at input %d element %lld: analytic %.10g, numeric %.10g",
                what, r.max_err, r.worst_input, (long long)r.worst_index, r.analytic, r.numeric);
}

/* pieces: whole tensors unless set */
static pcgc_piece whole_piece(const pcgc_buf *b) {
  pcgc_piece p;
  memset(&p, 0, sizeof p);
  for (int d = 0; d < b->rank; d++) p.global[d] = b->dims[d];
  return p;
}

/* ------------------------------------------------------- forward values */

START_TEST(test_linear_values) {
  pcgc_buf in[3] = {vals(PCGC_F64, 2, D(2, 2), V(1, 2, 3, 4)), vals(PCGC_F64, 2, D(2, 2), V(1, 0, 1, -1)),
                    vals(PCGC_F64, 1, D(2), V(0.5, 1))};
  pcgc_attrs a = attrs(PCGC_OP_LINEAR);
  pcgc_buf y = run(PCGC_OP_LINEAR, &a, 2, in);
  assert_vals(&y, V(3, -2, 7, -4), 0);
  freebuf(&y);
  y = run(PCGC_OP_LINEAR, &a, 3, in);
  assert_vals(&y, V(3.5, -1, 7.5, -3), 0);
  freebuf(&y);
  seti(&a, "act", PCGC_ACT_RELU);
  y = run(PCGC_OP_LINEAR, &a, 3, in);
  assert_vals(&y, V(3.5, 0, 7.5, 0), 0);
  freebuf(&y);
  freebufs(3, in);

  /* the activations on one value: x = 1, w = 1 */
  pcgc_buf one[2] = {vals(PCGC_F64, 1, D(1), V(1)), vals(PCGC_F64, 2, D(1, 1), V(1))};
  const double want[] = {1, 1, 0.8413447460685429, 0.7310585786300049, 0.7615941559557649};
  for (int act = PCGC_ACT_NONE; act <= PCGC_ACT_TANH; act++) {
    a = attrs(PCGC_OP_LINEAR);
    seti(&a, "act", act);
    y = run(PCGC_OP_LINEAR, &a, 2, one);
    ck_assert_msg(fabs(get(&y, 0) - want[act]) < 1e-15, "act %d: %.17g", act, get(&y, 0));
    freebuf(&y);
  }
  freebufs(2, one);
}
END_TEST

START_TEST(test_matmul_bmm_values) {
  pcgc_buf in[2] = {vals(PCGC_F64, 3, D(2, 1, 2), V(1, 2, 3, 4)), vals(PCGC_F64, 2, D(2, 2), V(1, 0, 1, -1))};
  pcgc_attrs a = attrs(PCGC_OP_MATMUL);
  pcgc_buf y = run(PCGC_OP_MATMUL, &a, 2, in);
  ck_assert_int_eq(y.rank, 3);
  assert_vals(&y, V(3, -2, 7, -4), 0);
  freebuf(&y);
  freebufs(2, in);

  pcgc_buf bm[2] = {vals(PCGC_F32, 3, D(1, 2, 2), V(1, 2, 3, 4)), vals(PCGC_F32, 3, D(1, 2, 2), V(5, 6, 7, 8))};
  a = attrs(PCGC_OP_BATCH_MATMUL);
  y = run(PCGC_OP_BATCH_MATMUL, &a, 2, bm);
  assert_vals(&y, V(19, 22, 43, 50), 0);
  freebuf(&y);
  seti(&a, "transpose_b", 1);
  y = run(PCGC_OP_BATCH_MATMUL, &a, 2, bm);
  assert_vals(&y, V(17, 23, 39, 53), 0);
  freebuf(&y);
  freebufs(2, bm);
}
END_TEST

static const double ramp16[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

START_TEST(test_conv2d_values) {
  pcgc_buf in[3] = {vals(PCGC_F64, 4, D(1, 1, 4, 4), ramp16), vals(PCGC_F64, 4, D(1, 1, 3, 3), V(1, 1, 1, 1, 1, 1, 1, 1, 1)),
                    vals(PCGC_F64, 1, D(1), V(1))};
  pcgc_attrs a = attrs(PCGC_OP_CONV2D);
  pcgc_buf y = run(PCGC_OP_CONV2D, &a, 2, in);
  assert_vals(&y, V(54, 63, 90, 99), 0);
  freebuf(&y);
  y = run(PCGC_OP_CONV2D, &a, 3, in);
  assert_vals(&y, V(55, 64, 91, 100), 0);
  freebuf(&y);
  seti(&a, "padding", 1);
  y = run(PCGC_OP_CONV2D, &a, 2, in);
  ck_assert_int_eq(y.dims[2], 4);
  ck_assert_double_eq(get(&y, 0), 14);   /* 1+2+5+6 */
  ck_assert_double_eq(get(&y, 1), 24);   /* 1+2+3+5+6+7 */
  ck_assert_double_eq(get(&y, 15), 54);  /* 11+12+15+16 */
  freebuf(&y);
  seti(&a, "stride", 2);
  y = run(PCGC_OP_CONV2D, &a, 2, in);
  assert_vals(&y, V(14, 30, 57, 99), 0);
  freebuf(&y);
  freebufs(3, in);

  /* two groups: channel 0 (all 1) times 3, channel 1 (all 2) times 5 */
  pcgc_buf gin[2] = {vals(PCGC_F64, 4, D(1, 2, 2, 2), V(1, 1, 1, 1, 2, 2, 2, 2)), vals(PCGC_F64, 4, D(2, 1, 1, 1), V(3, 5))};
  a = attrs(PCGC_OP_CONV2D);
  seti(&a, "groups", 2);
  y = run(PCGC_OP_CONV2D, &a, 2, gin);
  assert_vals(&y, V(3, 3, 3, 3, 10, 10, 10, 10), 0);
  freebuf(&y);
  freebufs(2, gin);

  /* dilation 2: a 2x2 kernel of ones reads x[i][j], x[i][j+2], x[i+2][j], x[i+2][j+2] */
  double r25[25];
  for (int i = 0; i < 25; i++) r25[i] = i + 1;
  pcgc_buf din_[2] = {vals(PCGC_F64, 4, D(1, 1, 5, 5), r25), vals(PCGC_F64, 4, D(1, 1, 2, 2), V(1, 1, 1, 1))};
  a = attrs(PCGC_OP_CONV2D);
  seti(&a, "dilation", 2);
  y = run(PCGC_OP_CONV2D, &a, 2, din_);
  ck_assert_int_eq(y.dims[2], 3);
  ck_assert_double_eq(get(&y, 0), 1 + 3 + 11 + 13);
  ck_assert_double_eq(get(&y, 8), 13 + 15 + 23 + 25);
  freebuf(&y);
  freebufs(2, din_);
}
END_TEST

START_TEST(test_pool2d_values) {
  pcgc_buf x = vals(PCGC_F64, 4, D(1, 1, 4, 4), ramp16);
  pcgc_attrs a = attrs(PCGC_OP_POOL2D);
  seti(&a, "kind", PCGC_POOL_MAX);
  seti(&a, "kernel", 2);
  seti(&a, "stride", 2);
  pcgc_buf y = run(PCGC_OP_POOL2D, &a, 1, &x);
  assert_vals(&y, V(6, 8, 14, 16), 0);
  freebuf(&y);
  seti(&a, "kernel", 3);
  seti(&a, "padding", 1);
  y = run(PCGC_OP_POOL2D, &a, 1, &x);
  assert_vals(&y, V(6, 8, 14, 16), 0);
  freebuf(&y);

  /* average counts the padding: the corner window holds only x[0][0] = 1 */
  a = attrs(PCGC_OP_POOL2D);
  seti(&a, "kind", PCGC_POOL_AVG);
  seti(&a, "kernel", 2);
  seti(&a, "stride", 2);
  seti(&a, "padding", 1);
  y = run(PCGC_OP_POOL2D, &a, 1, &x);
  ck_assert_int_eq(y.dims[2], 3);
  assert_vals(&y, V(0.25, 1.25, 1, 3.5, 8.5, 5, 3.25, 7.25, 4), 1e-15);
  freebuf(&y);

  a = attrs(PCGC_OP_POOL2D);
  seti(&a, "kind", PCGC_POOL_AVG);
  seti(&a, "global", 1);
  y = run(PCGC_OP_POOL2D, &a, 1, &x);
  assert_vals(&y, V(8.5), 1e-15);
  freebuf(&y);
  seti(&a, "kind", PCGC_POOL_MAX);
  y = run(PCGC_OP_POOL2D, &a, 1, &x);
  assert_vals(&y, V(16), 0);
  freebuf(&y);

  /* padding never wins a max: all values negative */
  for (int i = 0; i < 16; i++) put(&x, i, -ramp16[i]);
  a = attrs(PCGC_OP_POOL2D);
  seti(&a, "kind", PCGC_POOL_MAX);
  seti(&a, "kernel", 3);
  seti(&a, "stride", 2);
  seti(&a, "padding", 1);
  y = run(PCGC_OP_POOL2D, &a, 1, &x);
  assert_vals(&y, V(-1, -2, -5, -6), 0);
  freebuf(&y);
  freebuf(&x);

  /* backward of a tie goes to the first maximum */
  x = vals(PCGC_F64, 4, D(1, 1, 2, 2), V(5, 5, 5, 5));
  a = attrs(PCGC_OP_POOL2D);
  seti(&a, "kind", PCGC_POOL_MAX);
  seti(&a, "kernel", 2);
  y = run(PCGC_OP_POOL2D, &a, 1, &x);
  pcgc_buf dy = vals(PCGC_F64, 4, D(1, 1, 1, 1), V(2)), dx = newbuf(PCGC_F64, 4, D(1, 1, 2, 2));
  bwd(PCGC_OP_POOL2D, &a, 1, &x, &y, &dy, &dx, NULL);
  assert_vals(&dx, V(2, 0, 0, 0), 0);
  freebuf(&x);
  freebuf(&y);
  freebuf(&dy);
  freebuf(&dx);
}
END_TEST

START_TEST(test_embedding_values) {
  pcgc_buf tab = vals(PCGC_F64, 2, D(3, 2), V(1, 2, 3, 4, 5, 6));
  pcgc_buf in[2] = {vals(PCGC_I32, 1, D(3), V(2, 0, 2)), tab};
  pcgc_attrs a = attrs(PCGC_OP_EMBEDDING);
  pcgc_buf y = run(PCGC_OP_EMBEDDING, &a, 2, in);
  ck_assert_int_eq(y.rank, 2);
  assert_vals(&y, V(5, 6, 1, 2, 5, 6), 0);
  freebuf(&y);
  freebuf(&in[0]);

  in[0] = vals(PCGC_I64, 0, NULL, V(1)); /* one id: out [D] */
  y = run(PCGC_OP_EMBEDDING, &a, 2, in);
  ck_assert_int_eq(y.rank, 1);
  assert_vals(&y, V(3, 4), 0);
  freebuf(&y);
  freebuf(&in[0]);

  in[0] = vals(PCGC_I64, 2, D(2, 2), V(0, 1, 2, 2));
  seti(&a, "bag", PCGC_BAG_SUM);
  y = run(PCGC_OP_EMBEDDING, &a, 2, in);
  ck_assert_int_eq(y.rank, 2);
  assert_vals(&y, V(4, 6, 10, 12), 0);
  freebuf(&y);
  seti(&a, "bag", PCGC_BAG_MEAN);
  y = run(PCGC_OP_EMBEDDING, &a, 2, in);
  assert_vals(&y, V(2, 3, 5, 6), 0);
  pcgc_buf dy = vals(PCGC_F64, 2, D(2, 2), V(1, 2, 3, 4)), dt = newbuf(PCGC_F64, 2, D(3, 2));
  pcgc_buf din[2] = {{.dtype = PCGC_I64, .rank = 2, .dims = {2, 2}, .data = NULL}, dt};
  bwd(PCGC_OP_EMBEDDING, &a, 2, in, &y, &dy, din, NULL);
  assert_vals(&dt, V(0.5, 1, 0.5, 1, 3, 4), 0); /* row 2 twice in bag 1 */
  freebuf(&y);
  freebuf(&dy);
  freebuf(&dt);
  freebufs(2, in);
}
END_TEST

/* Attention with 1 head: scores q.k = [0, ln 3] give probabilities [1/4, 3/4]. */
START_TEST(test_attention_values) {
  const double ln3 = log(3.0);
  pcgc_buf in[11] = {vals(PCGC_F64, 3, D(1, 1, 1), V(1)),        vals(PCGC_F64, 3, D(1, 2, 1), V(0, ln3)),
                     vals(PCGC_F64, 3, D(1, 2, 1), V(4, 8)),     vals(PCGC_F64, 2, D(1, 1), V(1)),
                     vals(PCGC_F64, 2, D(1, 1), V(1)),           vals(PCGC_F64, 2, D(1, 1), V(1)),
                     vals(PCGC_F64, 2, D(1, 1), V(1)),           vals(PCGC_F64, 1, D(1), V(0)),
                     vals(PCGC_F64, 1, D(1), V(5)),              vals(PCGC_F64, 1, D(1), V(0)),
                     vals(PCGC_F64, 1, D(1), V(1))};
  pcgc_attrs a = attrs(PCGC_OP_ATTENTION);
  seti(&a, "heads", 1);
  pcgc_buf y = run(PCGC_OP_ATTENTION, &a, 7, in);
  assert_vals(&y, V(7), 1e-14);
  freebuf(&y);
  y = run(PCGC_OP_ATTENTION, &a, 11, in); /* bk shifts every score alike; bo adds 1 */
  assert_vals(&y, V(8), 1e-14);
  freebuf(&y);
  freebufs(11, in);

  /* causal: query 0 sees key 0 only */
  pcgc_buf c[7] = {vals(PCGC_F64, 3, D(1, 2, 1), V(1, 1)), vals(PCGC_F64, 3, D(1, 2, 1), V(0, ln3)),
                   vals(PCGC_F64, 3, D(1, 2, 1), V(4, 8)), vals(PCGC_F64, 2, D(1, 1), V(1)),
                   vals(PCGC_F64, 2, D(1, 1), V(1)),       vals(PCGC_F64, 2, D(1, 1), V(1)),
                   vals(PCGC_F64, 2, D(1, 1), V(1))};
  seti(&a, "causal", 1);
  y = run(PCGC_OP_ATTENTION, &a, 7, c);
  assert_vals(&y, V(4, 7), 1e-14);
  freebuf(&y);
  /* the same query 1 as a piece at logical row 1 */
  pcgc_buf q1 = slice(&c[0], 1, 1, 1);
  pcgc_buf cp[7] = {q1, c[1], c[2], c[3], c[4], c[5], c[6]};
  pcgc_piece pieces[7];
  for (int i = 0; i < 7; i++) pieces[i] = whole_piece(&c[i]);
  pieces[0].offset[1] = 1;
  pcgc_kernel_ctx ctx = {pieces, NULL, 0, 0, false, NULL, 0};
  y = newbuf(PCGC_F64, 3, D(1, 1, 1));
  fwd(PCGC_OP_ATTENTION, &a, 7, cp, &y, &ctx);
  assert_vals(&y, V(7), 1e-14);
  freebuf(&y);
  freebuf(&q1);
  freebufs(7, c);

  /* two heads of size 1: head 0 as above, head 1 has equal scores */
  pcgc_buf h[7] = {vals(PCGC_F64, 3, D(1, 1, 2), V(1, 0)),
                   vals(PCGC_F64, 3, D(1, 2, 2), V(0, 0, ln3, 0)),
                   vals(PCGC_F64, 3, D(1, 2, 2), V(4, 2, 8, 6)),
                   vals(PCGC_F64, 2, D(2, 2), V(1, 0, 0, 1)),
                   vals(PCGC_F64, 2, D(2, 2), V(1, 0, 0, 1)),
                   vals(PCGC_F64, 2, D(2, 2), V(1, 0, 0, 1)),
                   vals(PCGC_F64, 2, D(2, 2), V(1, 0, 0, 1))};
  a = attrs(PCGC_OP_ATTENTION);
  seti(&a, "heads", 2);
  y = run(PCGC_OP_ATTENTION, &a, 7, h);
  assert_vals(&y, V(7, 4), 1e-14);
  freebuf(&y);
  freebufs(7, h);

  /* one head of size 4: scores are scaled by 1/sqrt(4), so q = 2 e0 gives ln 3 */
  double eye4[16] = {0};
  for (int i = 0; i < 4; i++) eye4[i * 5] = 1;
  pcgc_buf s[7] = {vals(PCGC_F64, 3, D(1, 1, 4), V(2, 0, 0, 0)),
                   vals(PCGC_F64, 3, D(1, 2, 4), V(0, 0, 0, 0, ln3, 0, 0, 0)),
                   vals(PCGC_F64, 3, D(1, 2, 4), V(4, 0, 0, 0, 8, 0, 0, 0)),
                   vals(PCGC_F64, 2, D(4, 4), eye4),
                   vals(PCGC_F64, 2, D(4, 4), eye4),
                   vals(PCGC_F64, 2, D(4, 4), eye4),
                   vals(PCGC_F64, 2, D(4, 4), eye4)};
  a = attrs(PCGC_OP_ATTENTION);
  seti(&a, "heads", 1);
  y = run(PCGC_OP_ATTENTION, &a, 7, s);
  assert_vals(&y, V(7, 0, 0, 0), 1e-14);
  freebuf(&y);
  freebufs(7, s);
}
END_TEST

/* ------------------------------------------------------------- gradients */

START_TEST(test_linear_grad) {
  int act = _i;
  for (int bias = 0; bias < 2; bias++) {
    pcgc_attrs a = attrs(PCGC_OP_LINEAR);
    seti(&a, "act", act);
    gc_input in[] = {GF(2, 3, 4), GF(4, 5), GF(5)};
    char what[64];
    snprintf(what, sizeof what, "linear act=%d bias=%d", act, bias);
    gc(PCGC_OP_LINEAR, &a, bias ? 3 : 2, in, NULL, 0, what);
    gc_input in2[] = {GF(3), GF(3, 2), GF(2)}; /* rank-1 input */
    gc(PCGC_OP_LINEAR, &a, bias ? 3 : 2, in2, NULL, 0, what);
  }
}
END_TEST

START_TEST(test_matmul_grad) {
  pcgc_attrs a = attrs(PCGC_OP_MATMUL);
  gc_input in[] = {GF(2, 3, 4), GF(4, 5)};
  gc(PCGC_OP_MATMUL, &a, 2, in, NULL, 0, "matmul rank 3");
  gc_input in2[] = {GF(5, 3), GF(3, 2)};
  gc(PCGC_OP_MATMUL, &a, 2, in2, NULL, 0, "matmul rank 2");
}
END_TEST

START_TEST(test_bmm_grad) {
  for (int tb = 0; tb < 2; tb++) {
    pcgc_attrs a = attrs(PCGC_OP_BATCH_MATMUL);
    seti(&a, "transpose_b", tb);
    gc_input r3[] = {GF(2, 3, 4), GF(2, tb ? 5 : 4, tb ? 4 : 5)};
    gc(PCGC_OP_BATCH_MATMUL, &a, 2, r3, NULL, 0, tb ? "bmm rank 3 transpose_b" : "bmm rank 3");
    gc_input r4[] = {GF(2, 2, 3, 4), GF(2, 2, tb ? 3 : 4, tb ? 4 : 3)};
    gc(PCGC_OP_BATCH_MATMUL, &a, 2, r4, NULL, 0, tb ? "bmm rank 4 transpose_b" : "bmm rank 4");
    gc_input r2[] = {GF(3, 2), GF(tb ? 4 : 2, tb ? 2 : 4)};
    gc(PCGC_OP_BATCH_MATMUL, &a, 2, r2, NULL, 0, "bmm rank 2");
  }
}
END_TEST

typedef struct conv_case {
  int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, groups;
  bool bias;
  int act;
  const char *what;
} conv_case;

static const conv_case conv_cases[] = {
    {2, 3, 5, 5, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1, true, PCGC_ACT_NONE, "3x3 stride 1 pad 0"},
    {2, 3, 6, 6, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, true, PCGC_ACT_RELU, "stride 2 pad 1 relu"},
    {2, 3, 6, 6, 4, 3, 3, 2, 2, 0, 0, 1, 1, 1, false, PCGC_ACT_GELU, "stride 2 pad 0 gelu"},
    {1, 2, 7, 7, 3, 3, 3, 1, 1, 1, 1, 2, 2, 1, false, PCGC_ACT_GELU, "dilation 2"},
    {2, 4, 5, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, true, PCGC_ACT_SIGMOID, "groups 2 sigmoid"},
    {2, 4, 5, 5, 4, 3, 3, 2, 2, 1, 1, 1, 1, 4, false, PCGC_ACT_TANH, "depthwise tanh"},
    {1, 4, 5, 5, 8, 3, 3, 1, 1, 0, 0, 1, 1, 4, true, PCGC_ACT_NONE, "depthwise multiplier 2"},
    {2, 4, 4, 4, 3, 1, 1, 1, 1, 0, 0, 1, 1, 1, true, PCGC_ACT_RELU, "pointwise"},
    {2, 4, 4, 4, 6, 1, 1, 1, 1, 0, 0, 1, 1, 2, false, PCGC_ACT_GELU, "pointwise groups 2"},
    {1, 2, 6, 7, 3, 2, 3, 1, 2, 1, 0, 2, 1, 1, true, PCGC_ACT_TANH, "2x3 kernel, mixed stride/pad/dilation"},
    {2, 2, 5, 5, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, true, PCGC_ACT_SIGMOID, "pad 1 sigmoid bias"},
};

static pcgc_attrs conv_attrs(const conv_case *c) {
  pcgc_attrs a = attrs(PCGC_OP_CONV2D);
  set2(&a, "stride", c->sh, c->sw);
  set2(&a, "padding", c->ph, c->pw);
  set2(&a, "dilation", c->dh, c->dw);
  seti(&a, "groups", c->groups);
  seti(&a, "act", c->act);
  return a;
}

START_TEST(test_conv2d_grad) {
  const conv_case *c = &conv_cases[_i];
  pcgc_attrs a = conv_attrs(c);
  gc_input in[] = {GF(c->N, c->C, c->H, c->W), GF(c->O, c->C / c->groups, c->KH, c->KW), GF(c->O)};
  gc(PCGC_OP_CONV2D, &a, c->bias ? 3 : 2, in, NULL, 40, c->what);
}
END_TEST

typedef struct pool_case {
  int kind;
  int64_t k, s, p;
  bool global;
} pool_case;

static const pool_case pool_cases[] = {
    {PCGC_POOL_MAX, 3, 2, 1, false}, {PCGC_POOL_AVG, 3, 2, 1, false}, {PCGC_POOL_MAX, 2, 1, 0, false},
    {PCGC_POOL_AVG, 2, 2, 1, false}, {PCGC_POOL_MAX, 3, 1, 1, false}, {PCGC_POOL_AVG, 3, 3, 0, false},
    {PCGC_POOL_MAX, 1, 1, 0, true},  {PCGC_POOL_AVG, 1, 1, 0, true},
};

START_TEST(test_pool2d_grad) {
  const pool_case *c = &pool_cases[_i];
  pcgc_attrs a = attrs(PCGC_OP_POOL2D);
  seti(&a, "kind", c->kind);
  seti(&a, "kernel", c->k);
  seti(&a, "stride", c->s);
  seti(&a, "padding", c->p);
  seti(&a, "global", c->global);
  gc_input in[] = {GF(2, 3, 6, 5)};
  char what[80];
  snprintf(what, sizeof what, "pool %s k%lld s%lld p%lld global=%d", c->kind == PCGC_POOL_MAX ? "max" : "avg",
           (long long)c->k, (long long)c->s, (long long)c->p, c->global);
  gc(PCGC_OP_POOL2D, &a, 1, in, NULL, 0, what);
}
END_TEST

START_TEST(test_embedding_grad) {
  for (int bag = PCGC_BAG_NONE; bag <= PCGC_BAG_MEAN; bag++) {
    pcgc_attrs a = attrs(PCGC_OP_EMBEDDING);
    seti(&a, "bag", bag);
    gc_input r1[] = {GI(PCGC_I32, 7, 5), GF(7, 3)};
    gc_input r2[] = {GI(PCGC_I64, 7, 2, 4), GF(7, 3)};
    gc_input r3[] = {GI(PCGC_I32, 7, 2, 3, 4), GF(7, 3)};
    char what[64];
    snprintf(what, sizeof what, "embedding bag=%d", bag);
    gc(PCGC_OP_EMBEDDING, &a, 2, r1, NULL, 0, what);
    gc(PCGC_OP_EMBEDDING, &a, 2, r2, NULL, 0, what);
    gc(PCGC_OP_EMBEDDING, &a, 2, r3, NULL, 0, what);
    /* a table piece: rows 3..6 of a 10-row table, ids over all 10 */
    gc_input pc[] = {GI(PCGC_I64, 10, 3, 4), GF(4, 3)};
    pcgc_piece pieces[2];
    memset(pieces, 0, sizeof pieces);
    pieces[0].global[0] = 3, pieces[0].global[1] = 4;
    pieces[1].global[0] = 10, pieces[1].global[1] = 3, pieces[1].offset[0] = 3;
    pcgc_kernel_ctx ctx = {pieces, NULL, 0, 0, false, NULL, 0};
    gc(PCGC_OP_EMBEDDING, &a, 2, pc, &ctx, 0, what);
  }
}
END_TEST

typedef struct attn_case {
  int64_t B, Sq, Sk, Eq, Ek, Ev, E, Eo, heads;
  bool causal, bias;
  double dropout;
  const char *what;
  bool rope; /* rotary embeddings on q and k */
  int64_t F;  /* wk's and wv's columns: 0 for E; fewer for grouped-query attention */
} attn_case;

static int64_t attn_F(const attn_case *t) { return t->F ? t->F : t->E; }

static const attn_case attn_cases[] = {
    {2, 3, 3, 4, 4, 4, 4, 4, 1, false, false, 0, "7 inputs, 1 head", false, 0},
    {2, 3, 5, 3, 4, 5, 4, 6, 2, false, true, 0, "11 inputs, 2 heads, Sq != Sk, Eq/Ek/Ev/Eo differ", false, 0},
    {1, 4, 4, 3, 5, 2, 8, 3, 4, true, true, 0, "causal, 4 heads", false, 0},
    {2, 4, 4, 4, 4, 4, 8, 4, 2, true, false, 0, "causal, 7 inputs", false, 0},
    {2, 2, 5, 3, 2, 4, 6, 2, 1, false, true, 0, "1 head, 11 inputs", false, 0},
    {2, 3, 4, 3, 3, 3, 4, 5, 2, false, true, 0.3, "dropout while training", false, 0},
    {1, 4, 4, 3, 5, 2, 8, 3, 2, true, false, 0, "rope, causal, 2 heads of 4", true, 0},
    {2, 3, 5, 3, 4, 5, 8, 6, 1, false, true, 0, "rope, Sq != Sk, 11 inputs, 1 head of 8", true, 0},
    {2, 4, 4, 3, 5, 2, 8, 3, 4, true, true, 0, "grouped-query: 4 heads of 2 sharing 2, causal, 11 inputs", false, 4},
    {2, 3, 4, 3, 3, 4, 8, 5, 4, false, false, 0.3, "multi-query: 4 heads sharing 1, rope, dropout", true, 2},
};

static void attn_inputs(const attn_case *t, pcgc_buf *in, uint64_t s) {
  int64_t F = attn_F(t);
  const int64_t d[11][3] = {{t->B, t->Sq, t->Eq}, {t->B, t->Sk, t->Ek}, {t->B, t->Sk, t->Ev}, {t->Eq, t->E},
                            {t->Ek, F},           {t->Ev, F},           {t->E, t->Eo},        {t->E},
                            {F},                  {F},                  {t->Eo}};
  for (int i = 0; i < 11; i++) in[i] = randbuf(PCGC_F64, i < 3 ? 3 : i < 7 ? 2 : 1, d[i], 0, s + (uint64_t)i);
}

static pcgc_attrs attn_attrs(const attn_case *c) {
  pcgc_attrs a = attrs(PCGC_OP_ATTENTION);
  seti(&a, "heads", c->heads);
  seti(&a, "causal", c->causal);
  setf(&a, "dropout", c->dropout);
  seti(&a, "rope", c->rope);
  return a;
}

START_TEST(test_attention_grad) {
  const attn_case *c = &attn_cases[_i];
  pcgc_attrs a = attn_attrs(c);
  int64_t F = attn_F(c);
  gc_input in[] = {GF(c->B, c->Sq, c->Eq), GF(c->B, c->Sk, c->Ek), GF(c->B, c->Sk, c->Ev), GF(c->Eq, c->E),
                   GF(c->Ek, F),           GF(c->Ev, F),           GF(c->E, c->Eo),        GF(c->E),
                   GF(F),                  GF(F),                  GF(c->Eo)};
  for (int i = 3; i < 11; i++) in[i].scale = 0.5;
  pcgc_kernel_ctx ctx = {NULL, NULL, 11, 99, c->dropout > 0, NULL, 0};
  gc(PCGC_OP_ATTENTION, &a, c->bias ? 11 : 7, in, &ctx, 30, c->what);
}
END_TEST

/* What forward keeps for backward (pcgc_kernel_ctx.saved, pcgc_op_saved_elems):
 * with it, forward's output and backward's gradients are the same bits as
 * without it (backward computing the projections and context again), in f64
 * and f32, for every attention case; too little room is refused. */
START_TEST(test_attention_saved) {
  const attn_case *c = &attn_cases[_i];
  pcgc_attrs a = attn_attrs(c);
  int n = c->bias ? 11 : 7;
  for (int f32 = 0; f32 < 2; f32++) {
    pcgc_buf in[11];
    attn_inputs(c, in, 500);
    if (f32)
      for (int i = 0; i < 11; i++) {
        pcgc_buf x = copy_as(&in[i], PCGC_F32);
        free(in[i].data);
        in[i] = x;
      }
    const int64_t *dims[11];
    for (int i = 0; i < n; i++) dims[i] = in[i].dims;
    int64_t e = pcgc_op_saved_elems(PCGC_OP_ATTENTION, n, dims);
    ck_assert_int_eq(e, 2 * c->B * c->Sq * c->E + 2 * c->B * c->Sk * c->E);
    size_t es = f32 ? 4 : 8;
    void *room = malloc((size_t)e * es);
    pcgc_kernel_ctx plain = {NULL, NULL, 11, 99, c->dropout > 0, NULL, 0};
    pcgc_kernel_ctx kept = {NULL, NULL, 11, 99, c->dropout > 0, room, e * (int64_t)es};
    pcgc_buf y0 = out_for(PCGC_OP_ATTENTION, &a, n, in), y1 = out_for(PCGC_OP_ATTENTION, &a, n, in);
    fwd(PCGC_OP_ATTENTION, &a, n, in, &y0, &plain);
    fwd(PCGC_OP_ATTENTION, &a, n, in, &y1, &kept);
    ck_assert_msg(memcmp(y0.data, y1.data, (size_t)pcgc_buf_numel(&y0) * es) == 0, "%s: forward differs", c->what);
    pcgc_buf dy = copy_as(&y0, y0.dtype);
    pcgc_cpu_fill_random(&dy, 0, 1, 77, NULL);
    pcgc_buf d0[11], d1[11];
    grads_for(n, in, d0);
    grads_for(n, in, d1);
    bwd(PCGC_OP_ATTENTION, &a, n, in, &y0, &dy, d0, &plain);
    bwd(PCGC_OP_ATTENTION, &a, n, in, &y1, &dy, d1, &kept);
    for (int i = 0; i < n; i++)
      if (d0[i].data)
        ck_assert_msg(memcmp(d0[i].data, d1[i].data, (size_t)pcgc_buf_numel(&d0[i]) * es) == 0,
                      "%s (%s): the gradient of input %d differs with the saved projections", c->what,
                      f32 ? "f32" : "f64", i);
    kept.saved_bytes -= 1;
    pcgc_error err;
    pcgc_error_clear(&err);
    ck_assert_int_eq(pcgc_cpu_forward(PCGC_OP_ATTENTION, &a, n, in, 1, &y1, &kept, &err), PCGC_ERR_INVALID);
    ck_assert_msg(strstr(err.message, "saved for backward"), "%s", err.message);
    for (int i = 0; i < 11; i++) {
      free(in[i].data);
      if (i < n) {
        free(d0[i].data);
        free(d1[i].data);
      }
    }
    free(y0.data);
    free(y1.data);
    free(dy.data);
    free(room);
  }
}
END_TEST

/* ------------------------------------------------------- f32 against f64 */

/* Forward and backward of the same random inputs in f64 and in f32. */
static void agree(pcgc_op_kind kind, const pcgc_attrs *a, int n, pcgc_buf *in64, const char *what) {
  pcgc_buf in32[GC_MAX_IN], din64[GC_MAX_IN], din32[GC_MAX_IN];
  for (int i = 0; i < n; i++) in32[i] = copy_as(&in64[i], in64[i].dtype == PCGC_F64 ? PCGC_F32 : in64[i].dtype);
  pcgc_buf y64 = run(kind, a, n, in64), y32 = run(kind, a, n, in32);
  ASSERT_CLOSE(&y32, &y64, 1e-5, "%s forward", what);
  pcgc_buf dy64 = randbuf(PCGC_F64, y64.rank, y64.dims, 0, 77), dy32 = copy_as(&dy64, PCGC_F32);
  grads_for(n, in64, din64);
  grads_for(n, in32, din32);
  bwd(kind, a, n, in64, &y64, &dy64, din64, NULL);
  bwd(kind, a, n, in32, &y32, &dy32, din32, NULL);
  for (int i = 0; i < n; i++)
    if (din64[i].data) ASSERT_CLOSE(&din32[i], &din64[i], 1e-5, "%s gradient of input %d", what, i);
  freebufs(n, in32);
  freebufs(n, din64);
  freebufs(n, din32);
  freebuf(&y64);
  freebuf(&y32);
  freebuf(&dy64);
  freebuf(&dy32);
}

START_TEST(test_f32_matches_f64) {
  pcgc_attrs a = attrs(PCGC_OP_LINEAR);
  seti(&a, "act", PCGC_ACT_GELU);
  pcgc_buf lin[3] = {randbuf(PCGC_F64, 3, D(3, 5, 16), 0, 1), randbuf(PCGC_F64, 2, D(16, 8), 0, 2),
                     randbuf(PCGC_F64, 1, D(8), 0, 3)};
  agree(PCGC_OP_LINEAR, &a, 3, lin, "linear");
  a = attrs(PCGC_OP_MATMUL);
  agree(PCGC_OP_MATMUL, &a, 2, lin, "matmul");
  freebufs(3, lin);

  a = attrs(PCGC_OP_BATCH_MATMUL);
  seti(&a, "transpose_b", 1);
  pcgc_buf bm[2] = {randbuf(PCGC_F64, 4, D(2, 3, 5, 7), 0, 4), randbuf(PCGC_F64, 4, D(2, 3, 6, 7), 0, 5)};
  agree(PCGC_OP_BATCH_MATMUL, &a, 2, bm, "batch_matmul");
  freebufs(2, bm);

  const conv_case *c = &conv_cases[4];
  a = conv_attrs(c);
  pcgc_buf cv[3] = {randbuf(PCGC_F64, 4, D(c->N, c->C, c->H, c->W), 0, 6),
                    randbuf(PCGC_F64, 4, D(c->O, c->C / c->groups, c->KH, c->KW), 0, 7),
                    randbuf(PCGC_F64, 1, D(c->O), 0, 8)};
  agree(PCGC_OP_CONV2D, &a, 3, cv, "conv2d");
  freebufs(3, cv);

  a = attrs(PCGC_OP_POOL2D);
  seti(&a, "kind", PCGC_POOL_AVG);
  seti(&a, "kernel", 3);
  seti(&a, "stride", 2);
  seti(&a, "padding", 1);
  pcgc_buf px = randbuf(PCGC_F64, 4, D(2, 3, 7, 6), 0, 9);
  agree(PCGC_OP_POOL2D, &a, 1, &px, "avg pool");
  seti(&a, "kind", PCGC_POOL_MAX);
  agree(PCGC_OP_POOL2D, &a, 1, &px, "max pool");
  freebuf(&px);

  a = attrs(PCGC_OP_EMBEDDING);
  seti(&a, "bag", PCGC_BAG_MEAN);
  pcgc_buf em[2] = {randbuf(PCGC_I64, 2, D(4, 5), 9, 10), randbuf(PCGC_F64, 2, D(9, 6), 0, 11)};
  agree(PCGC_OP_EMBEDDING, &a, 2, em, "embedding");
  freebufs(2, em);

  const attn_case *t = &attn_cases[1];
  a = attn_attrs(t);
  pcgc_buf at[11] = {randbuf(PCGC_F64, 3, D(t->B, t->Sq, t->Eq), 0, 12), randbuf(PCGC_F64, 3, D(t->B, t->Sk, t->Ek), 0, 13),
                     randbuf(PCGC_F64, 3, D(t->B, t->Sk, t->Ev), 0, 14), randbuf(PCGC_F64, 2, D(t->Eq, t->E), 0, 15),
                     randbuf(PCGC_F64, 2, D(t->Ek, t->E), 0, 16),        randbuf(PCGC_F64, 2, D(t->Ev, t->E), 0, 17),
                     randbuf(PCGC_F64, 2, D(t->E, t->Eo), 0, 18),        randbuf(PCGC_F64, 1, D(t->E), 0, 19),
                     randbuf(PCGC_F64, 1, D(t->E), 0, 20),               randbuf(PCGC_F64, 1, D(t->E), 0, 21),
                     randbuf(PCGC_F64, 1, D(t->Eo), 0, 22)};
  agree(PCGC_OP_ATTENTION, &a, 11, at, "attention");
  freebufs(11, at);
}
END_TEST

/* Backward ADDS: gradients from buffers pre-filled with c are c more than
 * from zeroed ones. */
static void accumulates(pcgc_op_kind kind, const pcgc_attrs *a, int n, const pcgc_buf *in, const char *what) {
  pcgc_buf y = run(kind, a, n, in), dy = randbuf(PCGC_F64, y.rank, y.dims, 0, 78);
  pcgc_buf d0[GC_MAX_IN], d1[GC_MAX_IN];
  grads_for(n, in, d0);
  grads_for(n, in, d1);
  for (int i = 0; i < n; i++)
    for (int64_t e = 0; d1[i].data && e < pcgc_buf_numel(&d1[i]); e++) put(&d1[i], e, 1.5);
  bwd(kind, a, n, in, &y, &dy, d0, NULL);
  bwd(kind, a, n, in, &y, &dy, d1, NULL);
  for (int i = 0; i < n; i++) {
    if (!d0[i].data) continue;
    for (int64_t e = 0; e < pcgc_buf_numel(&d1[i]); e++) put(&d1[i], e, get(&d1[i], e) - 1.5);
    assert_close(&d1[i], &d0[i], 1e-13, "%s: gradient of input %d does not accumulate", what, i);
  }
  freebufs(n, d0);
  freebufs(n, d1);
  freebuf(&y);
  freebuf(&dy);
}

START_TEST(test_backward_accumulates) {
  pcgc_attrs a = attrs(PCGC_OP_LINEAR);
  seti(&a, "act", PCGC_ACT_GELU);
  pcgc_buf lin[3] = {randbuf(PCGC_F64, 3, D(2, 3, 4), 0, 1), randbuf(PCGC_F64, 2, D(4, 5), 0, 2),
                     randbuf(PCGC_F64, 1, D(5), 0, 3)};
  accumulates(PCGC_OP_LINEAR, &a, 3, lin, "linear");
  a = attrs(PCGC_OP_MATMUL);
  accumulates(PCGC_OP_MATMUL, &a, 2, lin, "matmul");
  freebufs(3, lin);
  for (int tb = 0; tb < 2; tb++) {
    a = attrs(PCGC_OP_BATCH_MATMUL);
    seti(&a, "transpose_b", tb);
    pcgc_buf bm[2] = {randbuf(PCGC_F64, 3, D(3, 2, 4), 0, 4), randbuf(PCGC_F64, 3, D(3, 4, 4), 0, 5)};
    accumulates(PCGC_OP_BATCH_MATMUL, &a, 2, bm, "batch_matmul");
    freebufs(2, bm);
  }
  for (int i = 0; i < 9; i += 4) {
    const conv_case *c = &conv_cases[i == 8 ? 7 : i]; /* 3x3, groups, pointwise */
    a = conv_attrs(c);
    pcgc_buf cv[3] = {randbuf(PCGC_F64, 4, D(c->N, c->C, c->H, c->W), 0, 6),
                      randbuf(PCGC_F64, 4, D(c->O, c->C / c->groups, c->KH, c->KW), 0, 7),
                      randbuf(PCGC_F64, 1, D(c->O), 0, 8)};
    accumulates(PCGC_OP_CONV2D, &a, 3, cv, c->what);
    freebufs(3, cv);
  }
  for (int kind = PCGC_POOL_MAX; kind <= PCGC_POOL_AVG; kind++) {
    a = attrs(PCGC_OP_POOL2D);
    seti(&a, "kind", kind);
    seti(&a, "kernel", 3);
    seti(&a, "stride", 2);
    seti(&a, "padding", 1);
    pcgc_buf px = randbuf(PCGC_F64, 4, D(2, 2, 5, 5), 0, 9);
    accumulates(PCGC_OP_POOL2D, &a, 1, &px, "pool2d");
    freebuf(&px);
  }
  a = attrs(PCGC_OP_EMBEDDING);
  seti(&a, "bag", PCGC_BAG_SUM);
  pcgc_buf em[2] = {randbuf(PCGC_I64, 2, D(4, 3), 5, 10), randbuf(PCGC_F64, 2, D(5, 2), 0, 11)};
  accumulates(PCGC_OP_EMBEDDING, &a, 2, em, "embedding");
  freebufs(2, em);
  const attn_case *t = &attn_cases[2];
  a = attn_attrs(t);
  pcgc_buf at[11];
  attn_inputs(t, at, 12);
  accumulates(PCGC_OP_ATTENTION, &a, 11, at, "attention");
  freebufs(11, at);
}
END_TEST

/* ----------------------------------------------------------------- pieces */

/* A table cut into row pieces gives partial sums that add up to the whole
 * result, and each piece's gradient is its rows of the whole gradient. */
START_TEST(test_embedding_table_pieces) {
  const int64_t V_ = 7, cut = 3;
  for (int bag = PCGC_BAG_NONE; bag <= PCGC_BAG_MEAN; bag++) {
    pcgc_attrs a = attrs(PCGC_OP_EMBEDDING);
    seti(&a, "bag", bag);
    pcgc_buf in[2] = {randbuf(PCGC_I64, 2, D(2, 4), V_, 30 + bag), randbuf(PCGC_F64, 2, D(V_, 3), 0, 31)};
    pcgc_buf y = run(PCGC_OP_EMBEDDING, &a, 2, in);
    pcgc_buf dy = randbuf(PCGC_F64, y.rank, y.dims, 0, 32), din[2];
    grads_for(2, in, din);
    bwd(PCGC_OP_EMBEDDING, &a, 2, in, &y, &dy, din, NULL);
    pcgc_buf sum = newbuf(PCGC_F64, y.rank, y.dims);
    for (int p = 0; p < 2; p++) {
      int64_t r0 = p ? cut : 0, rows = p ? V_ - cut : cut;
      pcgc_buf piece[2] = {in[0], slice(&in[1], 0, r0, rows)}, dpiece[2];
      pcgc_piece pieces[2] = {whole_piece(&in[0]), whole_piece(&in[1])};
      pieces[1].offset[0] = r0;
      pcgc_kernel_ctx ctx = {pieces, NULL, 0, 0, false, NULL, 0};
      pcgc_buf yp = newbuf(PCGC_F64, y.rank, y.dims);
      fwd(PCGC_OP_EMBEDDING, &a, 2, piece, &yp, &ctx);
      add_into(&sum, &yp);
      grads_for(2, piece, dpiece);
      bwd(PCGC_OP_EMBEDDING, &a, 2, piece, &yp, &dy, dpiece, &ctx);
      pcgc_buf want = slice(&din[1], 0, r0, rows);
      ASSERT_CLOSE(&dpiece[1], &want, 1e-15, "bag %d table gradient piece %d", bag, p);
      freebuf(&want);
      freebuf(&yp);
      freebuf(&piece[1]);
      freebuf(&dpiece[1]);
    }
    ASSERT_CLOSE(&sum, &y, 1e-15, "bag %d partial sums", bag);
    freebuf(&sum);
    freebuf(&y);
    freebuf(&dy);
    freebuf(&din[1]);
    freebufs(2, in);
  }
}
END_TEST

/* Bags split along their length: bag=mean divides by the logical length. */
START_TEST(test_embedding_bag_pieces) {
  for (int bag = PCGC_BAG_SUM; bag <= PCGC_BAG_MEAN; bag++) {
    pcgc_attrs a = attrs(PCGC_OP_EMBEDDING);
    seti(&a, "bag", bag);
    pcgc_buf in[2] = {randbuf(PCGC_I32, 2, D(3, 4), 6, 40), randbuf(PCGC_F64, 2, D(6, 2), 0, 41)};
    pcgc_buf y = run(PCGC_OP_EMBEDDING, &a, 2, in);
    pcgc_buf dy = randbuf(PCGC_F64, y.rank, y.dims, 0, 42), din[2];
    grads_for(2, in, din);
    bwd(PCGC_OP_EMBEDDING, &a, 2, in, &y, &dy, din, NULL);
    pcgc_buf sum = newbuf(PCGC_F64, y.rank, y.dims), dsum = newbuf(PCGC_F64, 2, D(6, 2));
    for (int p = 0; p < 2; p++) {
      pcgc_buf piece[2] = {slice(&in[0], 1, 2 * p, 2), in[1]}, dpiece[2];
      pcgc_piece pieces[2] = {whole_piece(&in[0]), whole_piece(&in[1])};
      pieces[0].offset[1] = 2 * p;
      pcgc_kernel_ctx ctx = {pieces, NULL, 0, 0, false, NULL, 0};
      pcgc_buf yp = newbuf(PCGC_F64, y.rank, y.dims);
      fwd(PCGC_OP_EMBEDDING, &a, 2, piece, &yp, &ctx);
      add_into(&sum, &yp);
      grads_for(2, piece, dpiece);
      bwd(PCGC_OP_EMBEDDING, &a, 2, piece, &yp, &dy, dpiece, &ctx);
      add_into(&dsum, &dpiece[1]);
      freebuf(&yp);
      freebuf(&piece[0]);
      freebuf(&dpiece[1]);
    }
    ASSERT_CLOSE(&sum, &y, 1e-15, "bag %d: pieces along the bag", bag);
    ASSERT_CLOSE(&dsum, &din[1], 1e-15, "bag %d: table gradient", bag);
    freebuf(&sum);
    freebuf(&dsum);
    freebuf(&y);
    freebuf(&dy);
    freebuf(&din[1]);
    freebufs(2, in);
  }
}
END_TEST


/* Attention split by query rows and by batch (causal, dropout while
 * training): each piece reproduces its rows of the whole output and of dq;
 * the other gradients add up. */
START_TEST(test_attention_row_pieces) {
  for (int rope = 0; rope < 2; rope++) { /* with rope, a row piece rotates its queries at their own positions */
  const attn_case t = {2, 4, 4, 3, 4, 5, 4, 3, 2, true, true, 0.4, "rows", rope, 0};
  pcgc_attrs a = attn_attrs(&t);
  pcgc_buf in[11], din[11];
  attn_inputs(&t, in, 50);
  pcgc_kernel_ctx ctx = {NULL, NULL, 5, 17, true, NULL, 0};
  pcgc_buf y = out_for(PCGC_OP_ATTENTION, &a, 11, in);
  fwd(PCGC_OP_ATTENTION, &a, 11, in, &y, &ctx);
  pcgc_buf dy = randbuf(PCGC_F64, 3, y.dims, 0, 61);
  grads_for(11, in, din);
  bwd(PCGC_OP_ATTENTION, &a, 11, in, &y, &dy, din, &ctx);

  for (int dim = 0; dim < 2; dim++) { /* dim 1: query rows; dim 0: batch (q, k and v) */
    pcgc_buf sums[11];
    grads_for(11, in, sums);
    for (int p = 0; p < 2; p++) {
      int64_t len = dim ? 2 : 1, start = p * len;
      pcgc_buf piece[11], dpiece[11];
      pcgc_piece pieces[11];
      for (int i = 0; i < 11; i++) {
        piece[i] = in[i];
        pieces[i] = whole_piece(&in[i]);
      }
      for (int i = 0; i < (dim ? 1 : 3); i++) {
        piece[i] = slice(&in[i], dim, start, len);
        pieces[i].offset[dim] = start;
      }
      pcgc_kernel_ctx pctx = {pieces, NULL, 5, 17, true, NULL, 0};
      pcgc_buf yp = slice(&y, dim, start, len), want = slice(&y, dim, start, len);
      memset(yp.data, 0, sizeof(double) * (size_t)pcgc_buf_numel(&yp));
      fwd(PCGC_OP_ATTENTION, &a, 11, piece, &yp, &pctx);
      ASSERT_CLOSE(&yp, &want, 1e-14, "split dim %d piece %d: output", dim, p);
      pcgc_buf dyp = slice(&dy, dim, start, len);
      grads_for(11, piece, dpiece);
      bwd(PCGC_OP_ATTENTION, &a, 11, piece, &yp, &dyp, dpiece, &pctx);
      for (int i = 0; i < 11; i++) {
        if (i < (dim ? 1 : 3)) {
          pcgc_buf w = slice(&din[i], dim, start, len);
          ASSERT_CLOSE(&dpiece[i], &w, 1e-13, "split dim %d piece %d: gradient of input %d", dim, p, i);
          freebuf(&w);
          freebuf(&piece[i]);
        } else {
          add_into(&sums[i], &dpiece[i]);
        }
      }
      freebufs(11, dpiece);
      freebuf(&yp);
      freebuf(&want);
      freebuf(&dyp);
    }
    for (int i = dim ? 1 : 3; i < 11; i++) ASSERT_CLOSE(&sums[i], &din[i], 1e-13, "split dim %d: gradient of input %d", dim, i);
    freebufs(11, sums);
  }
  freebufs(11, din);
  freebufs(11, in);
  freebuf(&y);
  freebuf(&dy);
}
  }
END_TEST

/* Attention split by heads (wq/wk/wv columns, wo rows): the outputs are
 * partial sums; weight gradients are the pieces' slices. */
/* Two pieces of two heads each: multi-head, and grouped-query (4 heads
 * sharing 2 key/value heads: each piece holds one of them). */
static const attn_case head_cases[] = {
    {2, 3, 4, 3, 4, 5, 8, 3, 4, false, false, 0.25, "heads", false, 0},
    {2, 3, 4, 3, 4, 5, 8, 3, 4, false, false, 0.25, "grouped-query heads, rope", true, 4},
};

/* One piece of an op through forward and backward: its output (rank-3
 * dims `od`) added into *ysum, its input gradients (allocated by
 * grads_for) left in dpiece. */
static void piece_pass(pcgc_op_kind kind, const pcgc_attrs *a, int n, const pcgc_buf *piece,
                       const pcgc_kernel_ctx *pctx, const int64_t *od, const pcgc_buf *dy, pcgc_buf *ysum,
                       pcgc_buf *dpiece) {
  pcgc_buf yp = newbuf(PCGC_F64, 3, od);
  fwd(kind, a, n, piece, &yp, pctx);
  add_into(ysum, &yp);
  grads_for(n, piece, dpiece);
  bwd(kind, a, n, piece, &yp, dy, dpiece, pctx);
  freebuf(&yp);
}

START_TEST(test_attention_head_pieces) {
  const attn_case t = head_cases[_i];
  int64_t Fp = attn_F(&t) / 2; /* wk's and wv's columns per piece */
  pcgc_attrs a = attn_attrs(&t);
  pcgc_buf in[11], din[11];
  attn_inputs(&t, in, 70);
  pcgc_kernel_ctx ctx = {NULL, NULL, 3, 23, true, NULL, 0};
  pcgc_buf y = out_for(PCGC_OP_ATTENTION, &a, 7, in);
  fwd(PCGC_OP_ATTENTION, &a, 7, in, &y, &ctx);
  pcgc_buf dy = randbuf(PCGC_F64, 3, y.dims, 0, 81);
  grads_for(7, in, din);
  bwd(PCGC_OP_ATTENTION, &a, 7, in, &y, &dy, din, &ctx);
  pcgc_buf ysum = newbuf(PCGC_F64, 3, y.dims), sums[7];
  grads_for(3, in, sums);
  for (int p = 0; p < 2; p++) { /* heads 2p, 2p+1: columns [4p, 4p+4) */
    pcgc_buf piece[7], dpiece[7];
    pcgc_piece pieces[7];
    for (int i = 0; i < 7; i++) {
      piece[i] = in[i];
      pieces[i] = whole_piece(&in[i]);
    }
    for (int i = 3; i < 7; i++) {
      int dim = i == 6 ? 0 : 1;
      int64_t w = i == 4 || i == 5 ? Fp : 4;
      piece[i] = slice(&in[i], dim, w * p, w);
      pieces[i].offset[dim] = w * p;
    }
    pcgc_kernel_ctx pctx = {pieces, NULL, 3, 23, true, NULL, 0};
    piece_pass(PCGC_OP_ATTENTION, &a, 7, piece, &pctx, y.dims, &dy, &ysum, dpiece);
    for (int i = 0; i < 3; i++) add_into(&sums[i], &dpiece[i]);
    for (int i = 3; i < 7; i++) {
      int64_t wd = i == 4 || i == 5 ? Fp : 4;
      pcgc_buf w = slice(&din[i], i == 6 ? 0 : 1, wd * p, wd);
      ASSERT_CLOSE(&dpiece[i], &w, 1e-13, "%s piece %d: gradient of input %d", t.what, p, i);
      freebuf(&w);
      freebuf(&piece[i]);
    }
    freebufs(7, dpiece);
  }
  ASSERT_CLOSE(&ysum, &y, 1e-13, "partial sums of the output");
  for (int i = 0; i < 3; i++) ASSERT_CLOSE(&sums[i], &din[i], 1e-13, "gradient of input %d", i);
  freebufs(3, sums);
  freebuf(&ysum);
  freebufs(7, din);
  freebufs(11, in);
  freebuf(&y);
  freebuf(&dy);
}
END_TEST

/* Mixture of experts: each expert's product is a linear layer of its own
 * (gradient-checked with a bias and an activation); moe_combine over pieces
 * holding 2 of the 4 experts adds up to the whole (partial sums), and
 * moe_dispatch over pieces holding half the features gives the slices. The
 * slots are those of tests/golden/moe.pcg's routing: 10 choices for 12
 * slots, one dropped (-1). */
START_TEST(test_expert_linear_gradients) {
  for (int act = PCGC_ACT_NONE; act <= PCGC_ACT_GELU; act++) {
    pcgc_attrs a = attrs(PCGC_OP_EXPERT_LINEAR);
    seti(&a, "act", act);
    gc_input in[] = {GF(2, 3, 2, 4), GF(3, 4, 5), GF(3, 5)};
    gc(PCGC_OP_EXPERT_LINEAR, &a, NIN(in), in, NULL, 0, act ? "expert_linear act" : "expert_linear");
    gc(PCGC_OP_EXPERT_LINEAR, &a, 2, in, NULL, 0, "expert_linear without bias");
  }
}
END_TEST

static const double moe_slots[] = {0, 6, 3, 1, 4, 11, 9, 5, 10, 7, 0, 4, 6, -1, 1, 7, 3, 8, 2, 9};

START_TEST(test_moe_pieces) {
  pcgc_buf slot = vals(PCGC_I32, 3, D(2, 5, 2), moe_slots);
  /* combine over expert pieces */
  pcgc_attrs ca = attrs(PCGC_OP_MOE_COMBINE);
  pcgc_buf cin[3] = {randbuf(PCGC_F64, 4, D(2, 4, 3, 6), 0, 301), randbuf(PCGC_F64, 3, D(2, 5, 2), 0, 302), slot};
  pcgc_buf y = run(PCGC_OP_MOE_COMBINE, &ca, 3, cin), dcin[3];
  pcgc_buf dy = randbuf(PCGC_F64, 3, y.dims, 0, 303);
  grads_for(3, cin, dcin);
  bwd(PCGC_OP_MOE_COMBINE, &ca, 3, cin, &y, &dy, dcin, NULL);
  pcgc_buf ysum = newbuf(PCGC_F64, 3, y.dims), gsum = newbuf(PCGC_F64, 3, cin[1].dims);
  for (int p = 0; p < 2; p++) {
    pcgc_buf piece[3] = {slice(&cin[0], 1, 2 * p, 2), cin[1], slot}, dpiece[3];
    pcgc_piece pieces[3] = {whole_piece(&cin[0]), whole_piece(&cin[1]), whole_piece(&slot)};
    pieces[0].offset[1] = 2 * p;
    pcgc_kernel_ctx pctx = {pieces, NULL, 0, 0, false, NULL, 0};
    piece_pass(PCGC_OP_MOE_COMBINE, &ca, 3, piece, &pctx, y.dims, &dy, &ysum, dpiece);
    pcgc_buf want = slice(&dcin[0], 1, 2 * p, 2);
    ASSERT_CLOSE(&dpiece[0], &want, 1e-14, "moe_combine piece %d: gradient of the experts' slots", p);
    add_into(&gsum, &dpiece[1]);
    freebuf(&want);
    freebuf(&dpiece[0]);
    freebuf(&dpiece[1]);
    freebuf(&piece[0]);
  }
  ASSERT_CLOSE(&ysum, &y, 1e-14, "moe_combine: the expert pieces' partial sums");
  ASSERT_CLOSE(&gsum, &dcin[1], 1e-14, "moe_combine: the gates' gradient summed over the pieces");
  /* every routed choice's slot holds its token: spot checks of the whole */
  ck_assert_double_eq_tol(get(&y, 0), get(&cin[1], 0) * get(&cin[0], 0) + get(&cin[1], 1) * get(&cin[0], 6 * 6),
                          1e-14);
  /* dispatch over feature pieces */
  pcgc_attrs da = attrs(PCGC_OP_MOE_DISPATCH);
  seti(&da, "experts", 4);
  seti(&da, "capacity", 3);
  pcgc_buf din_[2] = {randbuf(PCGC_F64, 3, D(2, 5, 6), 0, 304), slot};
  pcgc_buf xs = run(PCGC_OP_MOE_DISPATCH, &da, 2, din_), ddin[2];
  ck_assert_double_eq(get(&xs, 6 * 6 + 1), get(&din_[0], 1)); /* token 0's second choice, slot 6 */
  ck_assert_double_eq(get(&xs, 2 * 6), 0);                   /* slot 2 of group 0 is empty */
  pcgc_buf dxs = randbuf(PCGC_F64, 4, xs.dims, 0, 305);
  grads_for(2, din_, ddin);
  bwd(PCGC_OP_MOE_DISPATCH, &da, 2, din_, &xs, &dxs, ddin, NULL);
  for (int p = 0; p < 2; p++) {
    pcgc_buf piece[2] = {slice(&din_[0], 2, 3 * p, 3), slot}, dpiece[2];
    pcgc_piece pieces[2] = {whole_piece(&din_[0]), whole_piece(&slot)}, opiece = whole_piece(&xs);
    pieces[0].offset[2] = 3 * p;
    opiece.offset[3] = 3 * p;
    pcgc_kernel_ctx pctx = {pieces, &opiece, 0, 0, false, NULL, 0};
    pcgc_buf xp = newbuf(PCGC_F64, 4, D(2, 4, 3, 3)), dxp = slice(&dxs, 3, 3 * p, 3), want = slice(&xs, 3, 3 * p, 3);
    fwd(PCGC_OP_MOE_DISPATCH, &da, 2, piece, &xp, &pctx);
    ASSERT_CLOSE(&xp, &want, 0, "moe_dispatch piece %d", p);
    grads_for(2, piece, dpiece);
    bwd(PCGC_OP_MOE_DISPATCH, &da, 2, piece, &xp, &dxp, dpiece, &pctx);
    pcgc_buf dwant = slice(&ddin[0], 2, 3 * p, 3);
    ASSERT_CLOSE(&dpiece[0], &dwant, 0, "moe_dispatch piece %d: gradient", p);
    freebuf(&dwant);
    freebuf(&dpiece[0]);
    freebuf(&piece[0]);
    freebuf(&xp);
    freebuf(&dxp);
    freebuf(&want);
  }
  /* a slot outside the experts' slots is refused */
  put(&slot, 3, 12);
  pcgc_error err;
  pcgc_error_clear(&err);
  ck_assert_int_ne(pcgc_cpu_forward(PCGC_OP_MOE_DISPATCH, &da, 2, din_, 1, &xs, NULL, &err), PCGC_OK);
  ck_assert_msg(strstr(err.message, "slot 12") != NULL, "%s", err.message);
  freebufs(2, ddin);
  freebuf(&dxs);
  freebuf(&xs);
  freebuf(&din_[0]);
  freebufs(2, dcin);
  freebuf(&cin[0]);
  freebuf(&cin[1]);
  freebuf(&slot);
  freebuf(&y);
  freebuf(&dy);
  freebuf(&ysum);
  freebuf(&gsum);
}
END_TEST

/* Global average pooling over a spatially split input divides by the whole area. */
START_TEST(test_global_pool_pieces) {
  pcgc_attrs a = attrs(PCGC_OP_POOL2D);
  seti(&a, "kind", PCGC_POOL_AVG);
  seti(&a, "global", 1);
  pcgc_buf x = randbuf(PCGC_F64, 4, D(2, 3, 4, 5), 0, 90);
  pcgc_buf y = run(PCGC_OP_POOL2D, &a, 1, &x), sum = newbuf(PCGC_F64, 4, y.dims);
  pcgc_buf dy = randbuf(PCGC_F64, 4, y.dims, 0, 91), dx = newbuf(PCGC_F64, 4, x.dims);
  bwd(PCGC_OP_POOL2D, &a, 1, &x, &y, &dy, &dx, NULL);
  for (int p = 0; p < 2; p++) {
    pcgc_buf xp = slice(&x, 2, 2 * p, 2), yp = newbuf(PCGC_F64, 4, y.dims), dxp = newbuf(PCGC_F64, 4, xp.dims);
    pcgc_piece piece = whole_piece(&x);
    piece.offset[2] = 2 * p;
    pcgc_kernel_ctx ctx = {&piece, NULL, 0, 0, false, NULL, 0};
    fwd(PCGC_OP_POOL2D, &a, 1, &xp, &yp, &ctx);
    add_into(&sum, &yp);
    bwd(PCGC_OP_POOL2D, &a, 1, &xp, &yp, &dy, &dxp, &ctx);
    pcgc_buf want = slice(&dx, 2, 2 * p, 2);
    ASSERT_CLOSE(&dxp, &want, 1e-15, "piece %d gradient", p);
    freebuf(&want);
    freebuf(&xp);
    freebuf(&yp);
    freebuf(&dxp);
  }
  ASSERT_CLOSE(&sum, &y, 1e-15, "partial averages");
  freebuf(&x);
  freebuf(&y);
  freebuf(&sum);
  freebuf(&dy);
  freebuf(&dx);
}
END_TEST

/* ---------------------------------------------------------------- dropout */

START_TEST(test_attention_dropout) {
  const attn_case t = {2, 5, 6, 4, 4, 4, 4, 4, 2, false, true, 0.5, "dropout", false, 0};
  pcgc_attrs a = attn_attrs(&t), a0 = a;
  setf(&a0, "dropout", 0);
  pcgc_buf in[11];
  attn_inputs(&t, in, 100);
  pcgc_buf base = out_for(PCGC_OP_ATTENTION, &a, 11, in);
  pcgc_buf y1 = newbuf(PCGC_F64, 3, base.dims), y2 = newbuf(PCGC_F64, 3, base.dims), y3 = newbuf(PCGC_F64, 3, base.dims);
  fwd(PCGC_OP_ATTENTION, &a0, 11, in, &base, NULL);
  pcgc_kernel_ctx train = {NULL, NULL, 1, 2, true, NULL, 0}, train2 = {NULL, NULL, 9, 2, true, NULL, 0},
                  eval = {NULL, NULL, 1, 2, false, NULL, 0};
  fwd(PCGC_OP_ATTENTION, &a, 11, in, &y1, &train);
  fwd(PCGC_OP_ATTENTION, &a, 11, in, &y2, &train);
  ck_assert_msg(rel_err(&y1, &y2) == 0, "dropout is not deterministic for a seed");
  ck_assert_msg(rel_err(&y1, &base) > 1e-3, "dropout had no effect while training");
  fwd(PCGC_OP_ATTENTION, &a, 11, in, &y2, &train2);
  ck_assert_msg(rel_err(&y1, &y2) > 1e-3, "another seed gave the same mask");
  fwd(PCGC_OP_ATTENTION, &a, 11, in, &y3, &eval);
  ck_assert_msg(rel_err(&y3, &base) == 0, "dropout is active when not training");
  fwd(PCGC_OP_ATTENTION, &a, 11, in, &y3, NULL);
  ck_assert_msg(rel_err(&y3, &base) == 0, "dropout is active without a context");
  fwd(PCGC_OP_ATTENTION, &a0, 11, in, &y3, &train);
  ck_assert_msg(rel_err(&y3, &base) == 0, "dropout=0 changed the output while training");
  freebuf(&base);
  freebuf(&y1);
  freebuf(&y2);
  freebuf(&y3);
  freebufs(11, in);
}
END_TEST

/* ----------------------------------------------------------------- errors */

static void expect_fail(pcgc_op_kind kind, const pcgc_attrs *a, int n, const pcgc_buf *in, pcgc_buf *out,
                        const pcgc_kernel_ctx *ctx, pcgc_status want, const char *s1, const char *s2) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_status s = pcgc_cpu_forward(kind, a, n, in, 1, out, ctx, &err);
  ck_assert_msg(s == want, "%s: status %d, want %d (%s)", pcgc_op_name(kind), s, want, err.message);
  const char *op = pcgc_op_name(kind);
  ck_assert_msg(strncmp(err.message, op, strlen(op)) == 0, "message does not name %s: %s", op, err.message);
  if (s1) ck_assert_msg(strstr(err.message, s1), "message lacks '%s': %s", s1, err.message);
  if (s2) ck_assert_msg(strstr(err.message, s2), "message lacks '%s': %s", s2, err.message);
}

START_TEST(test_shape_errors) {
  pcgc_attrs a = attrs(PCGC_OP_LINEAR);
  pcgc_buf lin[3] = {newbuf(PCGC_F64, 2, D(2, 5)), newbuf(PCGC_F64, 2, D(3, 4)), newbuf(PCGC_F64, 1, D(3))};
  pcgc_buf y = newbuf(PCGC_F64, 2, D(2, 4));
  expect_fail(PCGC_OP_LINEAR, &a, 2, lin, &y, NULL, PCGC_ERR_INVALID, "[2, 5]", "[3, 4]");
  freebuf(&lin[1]);
  lin[1] = newbuf(PCGC_F64, 2, D(5, 4));
  expect_fail(PCGC_OP_LINEAR, &a, 3, lin, &y, NULL, PCGC_ERR_INVALID, "bias f64[3]", "[5, 4]");
  pcgc_buf y2 = newbuf(PCGC_F64, 2, D(2, 3));
  expect_fail(PCGC_OP_LINEAR, &a, 2, lin, &y2, NULL, PCGC_ERR_INVALID, "output is f64[2, 3]", "f64[2, 4]");
  freebuf(&y2);
  pcgc_buf w32 = newbuf(PCGC_F32, 2, D(5, 4));
  pcgc_buf mixed[2] = {lin[0], w32};
  expect_fail(PCGC_OP_LINEAR, &a, 2, mixed, &y, NULL, PCGC_ERR_INVALID, "f32[5, 4]", "f64[2, 5]");
  freebuf(&w32);
  pcgc_buf h[2] = {lin[0], lin[1]};
  h[0].dtype = h[1].dtype = PCGC_F16;
  pcgc_buf yh = y;
  yh.dtype = PCGC_F16;
  expect_fail(PCGC_OP_LINEAR, &a, 2, h, &yh, NULL, PCGC_ERR_UNSUPPORTED, "f16", NULL);
  pcgc_buf nodata[2] = {lin[0], lin[1]};
  nodata[1].data = NULL;
  expect_fail(PCGC_OP_LINEAR, &a, 2, nodata, &y, NULL, PCGC_ERR_INVALID, "no data", NULL);
  pcgc_attrs wrong = attrs(PCGC_OP_MATMUL);
  expect_fail(PCGC_OP_LINEAR, &wrong, 2, lin, &y, NULL, PCGC_ERR_INVALID, "attributes", NULL);
  expect_fail(PCGC_OP_LINEAR, &a, 1, lin, &y, NULL, PCGC_ERR_INVALID, "inputs", NULL);

  /* backward: a gradient buffer of the wrong shape */
  pcgc_buf dy = newbuf(PCGC_F64, 2, D(2, 4)), din[2] = {newbuf(PCGC_F64, 2, D(5, 2)), {0}};
  din[1] = lin[1];
  din[1].data = NULL;
  pcgc_error err;
  pcgc_error_clear(&err);
  ck_assert_int_eq(pcgc_cpu_backward(PCGC_OP_LINEAR, &a, 2, lin, 1, &y, &dy, din, NULL, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "linear") && strstr(err.message, "[5, 2]") && strstr(err.message, "[2, 5]"), "%s",
                err.message);
  freebuf(&din[0]);
  freebuf(&dy);
  freebufs(3, lin);
  freebuf(&y);

  a = attrs(PCGC_OP_MATMUL);
  pcgc_buf mm[2] = {newbuf(PCGC_F32, 3, D(2, 3, 4)), newbuf(PCGC_F32, 2, D(3, 4))};
  y = newbuf(PCGC_F32, 3, D(2, 3, 4));
  expect_fail(PCGC_OP_MATMUL, &a, 2, mm, &y, NULL, PCGC_ERR_INVALID, "[2, 3, 4]", "[3, 4]");
  freebufs(2, mm);
  freebuf(&y);

  a = attrs(PCGC_OP_BATCH_MATMUL);
  pcgc_buf bm[2] = {newbuf(PCGC_F64, 3, D(2, 3, 4)), newbuf(PCGC_F64, 3, D(3, 4, 5))};
  y = newbuf(PCGC_F64, 3, D(2, 3, 5));
  expect_fail(PCGC_OP_BATCH_MATMUL, &a, 2, bm, &y, NULL, PCGC_ERR_INVALID, "[2, 3, 4]", "[3, 4, 5]");
  freebufs(2, bm);
  freebuf(&y);

  a = attrs(PCGC_OP_CONV2D);
  pcgc_buf cv[2] = {newbuf(PCGC_F64, 4, D(1, 3, 5, 5)), newbuf(PCGC_F64, 4, D(4, 2, 3, 3))};
  y = newbuf(PCGC_F64, 4, D(1, 4, 3, 3));
  expect_fail(PCGC_OP_CONV2D, &a, 2, cv, &y, NULL, PCGC_ERR_INVALID, "[1, 3, 5, 5]", "[4, 2, 3, 3]");
  freebuf(&cv[1]);
  cv[1] = newbuf(PCGC_F64, 4, D(4, 3, 7, 7));
  expect_fail(PCGC_OP_CONV2D, &a, 2, cv, &y, NULL, PCGC_ERR_INVALID, "does not fit", NULL);
  freebufs(2, cv);
  freebuf(&y);

  a = attrs(PCGC_OP_POOL2D);
  pcgc_buf px = newbuf(PCGC_F64, 3, D(1, 4, 4));
  y = newbuf(PCGC_F64, 3, D(1, 4, 4));
  expect_fail(PCGC_OP_POOL2D, &a, 1, &px, &y, NULL, PCGC_ERR_INVALID, "rank 4", "[1, 4, 4]");
  freebuf(&px);
  freebuf(&y);

  a = attrs(PCGC_OP_ATTENTION);
  seti(&a, "heads", 2);
  const attn_case t = {1, 2, 3, 4, 4, 4, 4, 4, 2, false, false, 0, "err", false, 0};
  pcgc_buf at[11];
  attn_inputs(&t, at, 110);
  y = newbuf(PCGC_F64, 3, D(1, 2, 4));
  pcgc_buf bad = newbuf(PCGC_F64, 3, D(1, 4, 4)); /* v with 4 positions, k with 3 */
  pcgc_buf keep = at[2];
  at[2] = bad;
  expect_fail(PCGC_OP_ATTENTION, &a, 7, at, &y, NULL, PCGC_ERR_INVALID, "[1, 4, 4]", "[1, 3, 4]");
  at[2] = keep;
  expect_fail(PCGC_OP_ATTENTION, &a, 9, at, &y, NULL, PCGC_ERR_INVALID, "9", NULL);
  seti(&a, "heads", 3);
  expect_fail(PCGC_OP_ATTENTION, &a, 7, at, &y, NULL, PCGC_ERR_INVALID, "heads=3", NULL);
  freebuf(&bad);
  freebufs(11, at);
  freebuf(&y);
}
END_TEST

START_TEST(test_embedding_id_errors) {
  pcgc_attrs a = attrs(PCGC_OP_EMBEDDING);
  pcgc_buf in[2] = {vals(PCGC_I64, 1, D(3), V(1, 9, 0)), newbuf(PCGC_F64, 2, D(4, 2))};
  pcgc_buf y = newbuf(PCGC_F64, 2, D(3, 2));
  expect_fail(PCGC_OP_EMBEDDING, &a, 2, in, &y, NULL, PCGC_ERR_INVALID, "index 9", "[0, 4)");
  put(&in[0], 1, -1);
  expect_fail(PCGC_OP_EMBEDDING, &a, 2, in, &y, NULL, PCGC_ERR_INVALID, "index -1", NULL);
  /* backward checks the ids too */
  pcgc_buf dy = newbuf(PCGC_F64, 2, D(3, 2)), din[2] = {in[0], newbuf(PCGC_F64, 2, D(4, 2))};
  din[0].data = NULL;
  pcgc_error err;
  pcgc_error_clear(&err);
  ck_assert_int_eq(pcgc_cpu_backward(PCGC_OP_EMBEDDING, &a, 2, in, 1, &y, &dy, din, NULL, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "embedding") && strstr(err.message, "-1"), "%s", err.message);
  /* with a table piece, ids range over the logical table */
  put(&in[0], 1, 6);
  pcgc_piece pieces[2] = {whole_piece(&in[0]), whole_piece(&in[1])};
  pieces[1].global[0] = 8;
  pieces[1].offset[0] = 4;
  pcgc_kernel_ctx ctx = {pieces, NULL, 0, 0, false, NULL, 0};
  fwd(PCGC_OP_EMBEDDING, &a, 2, in, &y, &ctx);
  put(&in[0], 1, 8);
  expect_fail(PCGC_OP_EMBEDDING, &a, 2, in, &y, &ctx, PCGC_ERR_INVALID, "index 8", "[0, 8)");
  pieces[1].offset[0] = 5; /* rows 5..8 of 8 */
  put(&in[0], 1, 0);
  expect_fail(PCGC_OP_EMBEDDING, &a, 2, in, &y, &ctx, PCGC_ERR_INVALID, "offset 5", NULL);
  /* float indices */
  pcgc_buf fi[2] = {newbuf(PCGC_F64, 1, D(3)), in[1]};
  expect_fail(PCGC_OP_EMBEDDING, &a, 2, fi, &y, NULL, PCGC_ERR_INVALID, "i32 or i64", NULL);
  freebuf(&fi[0]);
  freebuf(&din[1]);
  freebuf(&dy);
  freebuf(&y);
  freebufs(2, in);
}
END_TEST

/* Empty buffers are computed or refused, never read out of bounds. */
START_TEST(test_empty_buffers) {
  pcgc_attrs a = attrs(PCGC_OP_LINEAR);
  pcgc_buf lin[3] = {newbuf(PCGC_F64, 2, D(2, 0)), newbuf(PCGC_F64, 2, D(0, 3)), vals(PCGC_F64, 1, D(3), V(1, 2, 3))};
  pcgc_buf y = newbuf(PCGC_F64, 2, D(2, 3));
  fwd(PCGC_OP_LINEAR, &a, 3, lin, &y, NULL); /* K = 0: just the bias */
  assert_vals(&y, V(1, 2, 3, 1, 2, 3), 0);
  pcgc_buf dy = vals(PCGC_F64, 2, D(2, 3), V(1, 1, 1, 1, 1, 1)), din[3];
  grads_for(3, lin, din);
  bwd(PCGC_OP_LINEAR, &a, 3, lin, &y, &dy, din, NULL);
  assert_vals(&din[2], V(2, 2, 2), 0);
  freebufs(3, din);
  freebufs(3, lin);
  freebuf(&y);
  freebuf(&dy);

  a = attrs(PCGC_OP_POOL2D);
  seti(&a, "kind", PCGC_POOL_MAX);
  seti(&a, "kernel", 2);
  seti(&a, "padding", 1);
  pcgc_buf px = newbuf(PCGC_F64, 4, D(1, 1, 0, 3));
  y = newbuf(PCGC_F64, 4, D(1, 1, 1, 4));
  expect_fail(PCGC_OP_POOL2D, &a, 1, &px, &y, NULL, PCGC_ERR_INVALID, "empty plane", NULL);
  freebuf(&px);
  freebuf(&y);

  a = attrs(PCGC_OP_ATTENTION);
  seti(&a, "heads", 1);
  const attn_case t = {1, 2, 0, 2, 2, 2, 2, 2, 1, false, false, 0, "empty", false, 0};
  pcgc_buf at[11];
  attn_inputs(&t, at, 120);
  y = newbuf(PCGC_F64, 3, D(1, 2, 2));
  expect_fail(PCGC_OP_ATTENTION, &a, 7, at, &y, NULL, PCGC_ERR_INVALID, "no positions", NULL);
  freebufs(11, at);
  freebuf(&y);
}
END_TEST

/* ------------------------------------- attention with bq, bk, bv but no bo */

/* The 10-input form: projection biases without the output bias, the form a
 * head split uses (its output is a partial sum; bo is added after the reduce). */

/* The 1-head case of test_attention_values: bk shifts every score alike, so
 * without bo the output is 7 (the 11-input form gives 7 + bo = 8). */
START_TEST(test_attention_qkv_bias_values) {
  const double ln3 = log(3.0);
  pcgc_buf in[10] = {vals(PCGC_F64, 3, D(1, 1, 1), V(1)),    vals(PCGC_F64, 3, D(1, 2, 1), V(0, ln3)),
                     vals(PCGC_F64, 3, D(1, 2, 1), V(4, 8)), vals(PCGC_F64, 2, D(1, 1), V(1)),
                     vals(PCGC_F64, 2, D(1, 1), V(1)),       vals(PCGC_F64, 2, D(1, 1), V(1)),
                     vals(PCGC_F64, 2, D(1, 1), V(1)),       vals(PCGC_F64, 1, D(1), V(0)),
                     vals(PCGC_F64, 1, D(1), V(5)),          vals(PCGC_F64, 1, D(1), V(2))};
  pcgc_attrs a = attrs(PCGC_OP_ATTENTION);
  seti(&a, "heads", 1);
  pcgc_buf y = run(PCGC_OP_ATTENTION, &a, 10, in); /* bv = 2 shifts both values: 7 + 2 */
  assert_vals(&y, V(9), 1e-14);
  /* dy = 1: dbv = 1 (the probabilities sum to 1), dbk = 0 (a shift of every score) */
  pcgc_buf dy = vals(PCGC_F64, 3, D(1, 1, 1), V(1)), din[10];
  grads_for(10, in, din);
  bwd(PCGC_OP_ATTENTION, &a, 10, in, &y, &dy, din, NULL);
  assert_vals(&din[9], V(1), 1e-14);
  assert_vals(&din[8], V(0), 1e-14);
  freebufs(10, din);
  freebuf(&dy);
  freebuf(&y);
  freebufs(10, in);
}
END_TEST

/* Finite differences of every input, bq/bk/bv included, for the cases with biases. */
START_TEST(test_attention_qkv_bias_grad) {
  for (size_t t = 0; t < sizeof attn_cases / sizeof *attn_cases; t++) {
    const attn_case *c = &attn_cases[t];
    if (!c->bias) continue;
    pcgc_attrs a = attn_attrs(c);
    gc_input in[] = {GF(c->B, c->Sq, c->Eq), GF(c->B, c->Sk, c->Ek), GF(c->B, c->Sk, c->Ev), GF(c->Eq, c->E),
                     GF(c->Ek, c->E),        GF(c->Ev, c->E),        GF(c->E, c->Eo),        GF(c->E),
                     GF(c->E),               GF(c->E)};
    for (int i = 3; i < 10; i++) in[i].scale = 0.5;
    pcgc_kernel_ctx ctx = {NULL, NULL, 11, 99, c->dropout > 0, NULL, 0};
    char what[160];
    snprintf(what, sizeof what, "10 inputs: %s", c->what);
    gc(PCGC_OP_ATTENTION, &a, 10, in, &ctx, 30, what);
  }
}
END_TEST

/* 10 inputs = 11 inputs less bo, forward and every gradient but bo's; and
 * the f32 kernel agrees with f64, and backward accumulates, as for 7 and 11. */
START_TEST(test_attention_qkv_bias_matches_11) {
  const attn_case *t = &attn_cases[5]; /* Eo != E, dropout while training */
  pcgc_attrs a = attn_attrs(t);
  pcgc_buf in[11], d10[11], d11[11];
  attn_inputs(t, in, 140);
  pcgc_kernel_ctx ctx = {NULL, NULL, 4, 31, true, NULL, 0};
  pcgc_buf y10 = out_for(PCGC_OP_ATTENTION, &a, 10, in), y11 = out_for(PCGC_OP_ATTENTION, &a, 11, in);
  fwd(PCGC_OP_ATTENTION, &a, 10, in, &y10, &ctx);
  fwd(PCGC_OP_ATTENTION, &a, 11, in, &y11, &ctx);
  for (int64_t r = 0; r < t->B * t->Sq; r++)
    for (int64_t j = 0; j < t->Eo; j++) put(&y10, r * t->Eo + j, get(&y10, r * t->Eo + j) + get(&in[10], j));
  ASSERT_CLOSE(&y10, &y11, 1e-14, "10 inputs + bo against 11 inputs");
  pcgc_buf dy = randbuf(PCGC_F64, 3, y11.dims, 0, 141);
  grads_for(11, in, d10);
  grads_for(11, in, d11);
  bwd(PCGC_OP_ATTENTION, &a, 10, in, &y10, &dy, d10, &ctx);
  bwd(PCGC_OP_ATTENTION, &a, 11, in, &y11, &dy, d11, &ctx);
  for (int i = 0; i < 10; i++) ASSERT_CLOSE(&d10[i], &d11[i], 1e-14, "gradient of input %d", i);
  for (int64_t j = 0; j < t->Eo; j++) /* bo's buffer is not an input of the 10-input form */
    ck_assert_double_eq(get(&d10[10], j), 0);
  freebufs(11, d10);
  freebufs(11, d11);
  freebuf(&y10);
  freebuf(&y11);
  freebuf(&dy);
  const attn_case *u = &attn_cases[1];
  a = attn_attrs(u);
  pcgc_buf at[11];
  attn_inputs(u, at, 150);
  agree(PCGC_OP_ATTENTION, &a, 10, at, "attention, 10 inputs");
  accumulates(PCGC_OP_ATTENTION, &a, 10, at, "attention, 10 inputs");
  freebufs(11, at);
  freebufs(11, in);
}
END_TEST

/* Split by heads into 2 pieces (wq/wk/wv and bq/bk/bv by columns, wo by
 * rows; dropout while training): the outputs are partial sums of the whole
 * output, the weight and bias gradients are the pieces' slices, and the
 * q/k/v gradients add up. */
START_TEST(test_attention_qkv_bias_head_pieces) {
  const attn_case t = {2, 3, 4, 3, 4, 5, 8, 3, 4, false, true, 0.25, "heads, 10 inputs, rope", true, 0};
  pcgc_attrs a = attn_attrs(&t);
  pcgc_buf in[11], din[10];
  attn_inputs(&t, in, 160);
  pcgc_kernel_ctx ctx = {NULL, NULL, 3, 23, true, NULL, 0};
  pcgc_buf y = out_for(PCGC_OP_ATTENTION, &a, 10, in);
  fwd(PCGC_OP_ATTENTION, &a, 10, in, &y, &ctx);
  pcgc_buf dy = randbuf(PCGC_F64, 3, y.dims, 0, 161);
  grads_for(10, in, din);
  bwd(PCGC_OP_ATTENTION, &a, 10, in, &y, &dy, din, &ctx);
  pcgc_buf ysum = newbuf(PCGC_F64, 3, y.dims), sums[3];
  grads_for(3, in, sums);
  for (int p = 0; p < 2; p++) { /* heads 2p, 2p+1: columns [4p, 4p+4) */
    pcgc_buf piece[10], dpiece[10];
    pcgc_piece pieces[10];
    for (int i = 0; i < 10; i++) {
      piece[i] = in[i];
      pieces[i] = whole_piece(&in[i]);
    }
    for (int i = 3; i < 10; i++) {
      int dim = i == 6 || i > 6 ? 0 : 1;
      piece[i] = slice(&in[i], dim, 4 * p, 4);
      pieces[i].offset[dim] = 4 * p;
    }
    pcgc_kernel_ctx pctx = {pieces, NULL, 3, 23, true, NULL, 0};
    pcgc_buf yp = newbuf(PCGC_F64, 3, y.dims);
    fwd(PCGC_OP_ATTENTION, &a, 10, piece, &yp, &pctx);
    add_into(&ysum, &yp);
    grads_for(10, piece, dpiece);
    bwd(PCGC_OP_ATTENTION, &a, 10, piece, &yp, &dy, dpiece, &pctx);
    for (int i = 0; i < 3; i++) add_into(&sums[i], &dpiece[i]);
    for (int i = 3; i < 10; i++) {
      pcgc_buf w = slice(&din[i], i == 6 || i > 6 ? 0 : 1, 4 * p, 4);
      ASSERT_CLOSE(&dpiece[i], &w, 1e-13, "piece %d: gradient of input %d", p, i);
      freebuf(&w);
      freebuf(&piece[i]);
    }
    freebufs(10, dpiece);
    freebuf(&yp);
  }
  ASSERT_CLOSE(&ysum, &y, 1e-13, "partial sums of the output");
  for (int i = 0; i < 3; i++) ASSERT_CLOSE(&sums[i], &din[i], 1e-13, "gradient of input %d", i);
  freebufs(3, sums);
  freebuf(&ysum);
  freebufs(10, din);
  freebufs(11, in);
  freebuf(&y);
  freebuf(&dy);
}
END_TEST

START_TEST(test_attention_qkv_bias_errors) {
  const attn_case t = {1, 2, 2, 2, 2, 2, 4, 2, 2, false, true, 0, "errors", false, 0};
  pcgc_attrs a = attn_attrs(&t);
  pcgc_buf in[11];
  attn_inputs(&t, in, 170);
  pcgc_buf y = newbuf(PCGC_F64, 3, D(1, 2, 2));
  for (int n = 8; n <= 9; n++)
    expect_fail(PCGC_OP_ATTENTION, &a, n, in, &y, NULL, PCGC_ERR_INVALID, "takes 7 inputs",
                "10 (plus bq, bk, bv) or 11");
  freebuf(&in[8]);
  in[8] = newbuf(PCGC_F64, 1, D(3)); /* bk must have E = 4 entries */
  expect_fail(PCGC_OP_ATTENTION, &a, 10, in, &y, NULL, PCGC_ERR_INVALID, "f64[3]", NULL);
  freebufs(11, in);
  freebuf(&y);
}
END_TEST

/* ------------------------------------------------------------------ suite */

static Suite *dense_suite(void) {
  Suite *s = suite_create("kernels_dense");
  TCase *tc = tcase_create("forward");
  tcase_add_test(tc, test_linear_values);
  tcase_add_test(tc, test_matmul_bmm_values);
  tcase_add_test(tc, test_conv2d_values);
  tcase_add_test(tc, test_pool2d_values);
  tcase_add_test(tc, test_embedding_values);
  tcase_add_test(tc, test_attention_values);
  suite_add_tcase(s, tc);

  tc = tcase_create("gradients");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_linear_grad, PCGC_ACT_NONE, PCGC_ACT_TANH + 1);
  tcase_add_test(tc, test_matmul_grad);
  tcase_add_test(tc, test_bmm_grad);
  tcase_add_loop_test(tc, test_conv2d_grad, 0, (int)(sizeof conv_cases / sizeof *conv_cases));
  tcase_add_loop_test(tc, test_pool2d_grad, 0, (int)(sizeof pool_cases / sizeof *pool_cases));
  tcase_add_test(tc, test_embedding_grad);
  tcase_add_loop_test(tc, test_attention_grad, 0, (int)(sizeof attn_cases / sizeof *attn_cases));
  tcase_add_loop_test(tc, test_attention_saved, 0, (int)(sizeof attn_cases / sizeof *attn_cases));
  tcase_add_test(tc, test_f32_matches_f64);
  tcase_add_test(tc, test_backward_accumulates);
  suite_add_tcase(s, tc);

  tc = tcase_create("pieces");
  tcase_add_test(tc, test_embedding_table_pieces);
  tcase_add_test(tc, test_embedding_bag_pieces);
  tcase_add_test(tc, test_attention_row_pieces);
  tcase_add_loop_test(tc, test_attention_head_pieces, 0, (int)(sizeof head_cases / sizeof *head_cases));
  tcase_add_test(tc, test_global_pool_pieces);
  tcase_add_test(tc, test_attention_dropout);
  suite_add_tcase(s, tc);

  tc = tcase_create("attention_qkv_bias");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_attention_qkv_bias_values);
  tcase_add_test(tc, test_attention_qkv_bias_grad);
  tcase_add_test(tc, test_attention_qkv_bias_matches_11);
  tcase_add_test(tc, test_attention_qkv_bias_head_pieces);
  tcase_add_test(tc, test_expert_linear_gradients);
  tcase_add_test(tc, test_moe_pieces);
  tcase_add_test(tc, test_attention_qkv_bias_errors);
  suite_add_tcase(s, tc);

  tc = tcase_create("errors");
  tcase_add_test(tc, test_shape_errors);
  tcase_add_test(tc, test_embedding_id_errors);
  tcase_add_test(tc, test_empty_buffers);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(dense_suite)
