/*
 * test_kernels_ew.c — CPU kernels of the elementwise, data-movement,
 * normalisation, reduction and loss families (runtime/cpu/k_elementwise.c,
 * k_shape.c, k_norm.c, k_loss.c).
 *
 * For every op and attribute variant: a finite-difference gradient check in
 * f64 (gradcheck.h), exact forward values on tiny cases worked out by hand,
 * and agreement of f32 with f64. Then the piece semantics the interpreter
 * relies on: a dropout piece reproduces its part of the whole mask, means
 * and losses over pieces add up to the whole, the batch-norm split path
 * equals the whole-tensor kernels; and run-time errors name the operator.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "kernels.h"

/* ---------------------------------------------------------------- helpers */

#define DIMS(...) (int64_t[]){__VA_ARGS__}, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define VALS(...) (double[]){__VA_ARGS__}
#define COUNT(T, ...) (int)(sizeof((T[]){__VA_ARGS__}) / sizeof(T))

/* Buffers a test allocates are freed by the teardown fixture. */
static void *tracked[512];
static int n_tracked;

static void *track(void *p) {
  ck_assert_ptr_nonnull(p);
  ck_assert_int_lt(n_tracked, 512);
  tracked[n_tracked++] = p;
  return p;
}

static void free_all(void) {
  for (int i = 0; i < n_tracked; i++) free(tracked[i]);
  n_tracked = 0;
}

/* Attribute builders; they also build the case table before any test runs,
 * so a bad attribute aborts instead of failing an assertion. */
static void must(pcgc_status s, const pcgc_attrs *a, const char *name) {
  if (s == PCGC_OK) return;
  fprintf(stderr, "cannot set attribute %s of %s\n", name, pcgc_op_name(a->kind));
  abort();
}
static pcgc_attrs attrs(pcgc_op_kind k) {
  pcgc_attrs a;
  pcgc_attrs_init(&a, k);
  return a;
}
static pcgc_attrs with_int(pcgc_attrs a, const char *name, int64_t v) {
  must(pcgc_attrs_set_int(&a, name, v), &a, name);
  return a;
}
static pcgc_attrs with_float(pcgc_attrs a, const char *name, double v) {
  must(pcgc_attrs_set_float(&a, name, v), &a, name);
  return a;
}
static pcgc_attrs with_ints_(pcgc_attrs a, const char *name, const int64_t *v, int n) {
  must(pcgc_attrs_set_ints(&a, name, n, v), &a, name);
  return a;
}
/* a pointer to default attributes of op k */
#define AP(k) ((pcgc_attrs[1]){attrs(k)})
#define WITH_INTS(a, name, ...) with_ints_(a, name, DIMS(__VA_ARGS__))

/* A zeroed buffer; `vals` (may be NULL) fills a float buffer. */
static pcgc_buf mk(pcgc_dtype dt, const double *vals, const int64_t *dims, int rank) {
  pcgc_buf b;
  memset(&b, 0, sizeof b);
  b.dtype = dt;
  b.rank = rank;
  for (int d = 0; d < rank; d++) b.dims[d] = dims[d];
  int64_t n = pcgc_buf_numel(&b);
  b.data = track(calloc((size_t)n, pcgc_dtype_size(dt)));
  for (int64_t i = 0; vals && i < n; i++) {
    if (dt == PCGC_F32) ((float *)b.data)[i] = (float)vals[i];
    else if (dt == PCGC_F64) ((double *)b.data)[i] = vals[i];
    else if (dt == PCGC_I32) ((int32_t *)b.data)[i] = (int32_t)vals[i];
    else ((int64_t *)b.data)[i] = (int64_t)vals[i];
  }
  return b;
}
#define F64(vals, ...) mk(PCGC_F64, vals, DIMS(__VA_ARGS__))
#define I32(vals, ...) mk(PCGC_I32, vals, DIMS(__VA_ARGS__))
static pcgc_buf scalar64(void) { return mk(PCGC_F64, NULL, NULL, 0); }

static double at(const pcgc_buf *b, int64_t i) {
  return b->dtype == PCGC_F32 ? ((float *)b->data)[i] : ((double *)b->data)[i];
}

/* A zeroed buffer shaped like b (same dtype unless dt >= 0). */
static pcgc_buf like(const pcgc_buf *b, int dt) {
  return mk(dt >= 0 ? (pcgc_dtype)dt : b->dtype, NULL, b->dims, b->rank);
}

/* Allocates the outputs inference gives for these inputs; returns their count. */
static int outs_for(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_buf *in, pcgc_buf *out) {
  pcgc_ptensor tin[16], tout[16];
  for (int i = 0; i < n_in; i++) pcgc_ptensor_init(&tin[i], in[i].dtype, in[i].rank, in[i].dims);
  pcgc_error err;
  pcgc_error_clear(&err);
  ck_assert_msg(pcgc_op_infer(k, a, n_in, tin, tout, &err) == PCGC_OK, "%s", err.message);
  int n = pcgc_op_num_outputs(k, a);
  for (int j = 0; j < n; j++) out[j] = mk(tout[j].dtype, NULL, tout[j].dims, tout[j].rank);
  return n;
}

static void forward_ok(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_buf *in, int n_out,
                       pcgc_buf *out, const pcgc_kernel_ctx *ctx) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_status s = pcgc_cpu_forward(k, a, n_in, in, n_out, out, ctx, &err);
  ck_assert_msg(s == PCGC_OK, "%s forward: %s", pcgc_op_name(k), err.message);
}

static void backward_ok(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_buf *in, int n_out,
                        const pcgc_buf *out, const pcgc_buf *dout, pcgc_buf *din, const pcgc_kernel_ctx *ctx) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_status s = pcgc_cpu_backward(k, a, n_in, in, n_out, out, dout, din, ctx, &err);
  ck_assert_msg(s == PCGC_OK, "%s backward: %s", pcgc_op_name(k), err.message);
}

/* Runs forward of a one-output op on whole tensors and compares with `want`. */
static void expect_fwd(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_buf *in, const double *want,
                       double tol) {
  pcgc_buf out[16];
  int n_out = outs_for(k, a, n_in, in, out);
  forward_ok(k, a, n_in, in, n_out, out, NULL);
  int64_t n = pcgc_buf_numel(&out[0]);
  for (int64_t i = 0; i < n; i++)
    ck_assert_msg(at(&out[0], i) == want[i] || fabs(at(&out[0], i) - want[i]) <= tol,
                  "%s element %lld: got %.17g, want %.17g",
                  pcgc_op_name(k), (long long)i, at(&out[0], i), want[i]);
}

static void expect_vals(const pcgc_buf *b, const double *want, double tol) {
  int64_t n = pcgc_buf_numel(b);
  for (int64_t i = 0; i < n; i++)
    ck_assert_msg(at(b, i) == want[i] || fabs(at(b, i) - want[i]) <= tol, "element %lld: got %.17g, want %.17g",
                  (long long)i, at(b, i),
                  want[i]);
}

/* Inputs of gradient checks (gradcheck.h): f64 N(0, 1) unless shifted. */
#define GC_TOL 1e-6

static gc_input gf_(const int64_t *dims, int rank) {
  gc_input g;
  memset(&g, 0, sizeof g);
  g.dtype = PCGC_F64;
  g.rank = rank;
  for (int d = 0; d < rank; d++) g.dims[d] = dims[d];
  return g;
}
#define GF(...) gf_(DIMS(__VA_ARGS__))
static gc_input gscalar(void) { return gf_(NULL, 0); }
static gc_input gshift(gc_input g, double scale, double shift) {
  g.scale = scale;
  g.shift = shift;
  return g;
}
static gc_input glabels_(pcgc_dtype dt, int64_t bound, const int64_t *dims, int rank) {
  gc_input g = gf_(dims, rank);
  g.dtype = dt;
  g.bound = bound;
  return g;
}
#define GLABELS(dt, bound, ...) glabels_(dt, bound, DIMS(__VA_ARGS__))

/* A buffer holding the block [off, off + dims) of a whole float buffer. */
static pcgc_buf slice(const pcgc_buf *whole, const int64_t *off, const int64_t *dims) {
  pcgc_buf p = mk(whole->dtype, NULL, dims, whole->rank);
  int64_t n = pcgc_buf_numel(&p);
  for (int64_t i = 0; i < n; i++) {
    int64_t rem = i, g = 0, idx[PCGC_MAX_RANK];
    for (int d = whole->rank - 1; d >= 0; d--) {
      idx[d] = rem % dims[d];
      rem /= dims[d];
    }
    for (int d = 0; d < whole->rank; d++) g = g * whole->dims[d] + off[d] + idx[d];
    size_t es = pcgc_dtype_size(whole->dtype);
    memcpy((char *)p.data + (size_t)i * es, (const char *)whole->data + (size_t)g * es, es);
  }
  return p;
}

static void fill(pcgc_buf *b, uint64_t stream) { pcgc_cpu_fill_random(b, 0, 99, stream, NULL); }

static pcgc_piece piece_(const int64_t *global, const int64_t *offset, int rank) {
  pcgc_piece p;
  memset(&p, 0, sizeof p);
  for (int d = 0; d < rank; d++) {
    p.global[d] = global[d];
    p.offset[d] = offset[d];
  }
  return p;
}

/* ------------------------------------------------------------ case table
 * Every op and attribute variant, shared by the gradient checks and the
 * f32/f64 agreement (one loop test each, so every case reports alone). */

typedef struct op_case {
  char what[96];
  pcgc_op_kind k;
  pcgc_attrs a;
  const pcgc_kernel_ctx *ctx;
  int n_in;
  gc_input g[3];
} op_case;

#define MAX_CASES 256
static op_case cases[MAX_CASES];
static int n_cases;

static const pcgc_kernel_ctx train_ctx = {NULL, NULL, 42, 7, true, NULL, 0};
static const pcgc_kernel_ctx eval_ctx = {NULL, NULL, 42, 7, false, NULL, 0};

static void add_case(pcgc_op_kind k, pcgc_attrs a, const pcgc_kernel_ctx *ctx, int n_in, const gc_input *g,
                     const char *what) {
  if (n_cases == MAX_CASES) abort();
  op_case *c = &cases[n_cases++];
  snprintf(c->what, sizeof c->what, "%s %s", pcgc_op_name(k), what);
  c->k = k;
  c->a = a;
  c->ctx = ctx;
  c->n_in = n_in;
  memcpy(c->g, g, (size_t)n_in * sizeof *g);
}
#define CASE(k, a, what, ...) add_case(k, a, NULL, COUNT(gc_input, __VA_ARGS__), (gc_input[]){__VA_ARGS__}, what)

static pcgc_attrs unary_attrs(pcgc_op_kind k) {
  pcgc_attrs a = attrs(k);
  switch (k) {
  case PCGC_OP_SCALAR_ADD: return with_float(a, "scalar", 2.5);
  case PCGC_OP_SCALAR_SUB: return with_float(a, "scalar", -1.5);
  case PCGC_OP_SCALAR_MUL: return with_float(a, "scalar", 0.7);
  case PCGC_OP_SCALAR_DIV: return with_float(a, "scalar", -3);
  case PCGC_OP_DROPOUT: return with_float(a, "rate", 0.3);
  case PCGC_OP_POW: return with_float(a, "exponent", 3);
  case PCGC_OP_CLIP: return with_float(with_float(a, "min", -0.3), "max", 0.4);
  default: return a;
  }
}

static void build_cases(void) {
  char what[64];
  /* unary; relu also on inputs kept to one side of its kink */
  for (int k = PCGC_OP_RELU; k <= PCGC_OP_DROPOUT; k++) {
    pcgc_attrs a = unary_attrs((pcgc_op_kind)k);
    const pcgc_kernel_ctx *ctx = k == PCGC_OP_DROPOUT ? &train_ctx : NULL;
    add_case((pcgc_op_kind)k, a, ctx, 1, (gc_input[]){GF(3, 4)}, "[3, 4]");
    add_case((pcgc_op_kind)k, a, ctx, 1, (gc_input[]){gscalar()}, "rank 0");
    add_case((pcgc_op_kind)k, a, ctx, 1, (gc_input[]){gshift(GF(2, 1, 3), 0.2, 0.5)}, "[2, 1, 3] positive");
    add_case((pcgc_op_kind)k, a, ctx, 1, (gc_input[]){gshift(GF(2, 1, 3), 0.2, -0.5)}, "[2, 1, 3] negative");
  }
  add_case(PCGC_OP_GELU, with_int(attrs(PCGC_OP_GELU), "approximate", 1), NULL, 1, (gc_input[]){GF(3, 4)},
           "approximate=true (tanh form)");
  /* pow's other exponents on positive inputs; clip bounded on one side */
  static const double exps[] = {0.5, -0.5, -1, 2, 2.5, 1, 0};
  for (size_t e = 0; e < sizeof exps / sizeof exps[0]; e++) {
    snprintf(what, sizeof what, "exponent %g", exps[e]);
    add_case(PCGC_OP_POW, with_float(attrs(PCGC_OP_POW), "exponent", exps[e]), NULL, 1,
             (gc_input[]){gshift(GF(3, 4), 0.3, 1.5)}, what);
  }
  add_case(PCGC_OP_CLIP, with_float(attrs(PCGC_OP_CLIP), "min", 0.1), NULL, 1, (gc_input[]){GF(3, 4)}, "min only");
  add_case(PCGC_OP_CLIP, with_float(attrs(PCGC_OP_CLIP), "max", -0.2), NULL, 1, (gc_input[]){GF(3, 4)}, "max only");
  add_case(PCGC_OP_DROPOUT, unary_attrs(PCGC_OP_DROPOUT), &eval_ctx, 1, (gc_input[]){GF(4, 5)}, "not training");
  add_case(PCGC_OP_DROPOUT, with_float(attrs(PCGC_OP_DROPOUT), "rate", 0), &train_ctx, 1, (gc_input[]){GF(4, 5)}, "rate 0");
  add_case(PCGC_OP_DROPOUT, with_float(attrs(PCGC_OP_DROPOUT), "rate", 0.8), &train_ctx, 1, (gc_input[]){GF(6, 5)},
           "rate 0.8");

  /* binary with broadcasting; denominators positive and away from 0 */
  for (int k = PCGC_OP_ADD; k <= PCGC_OP_DIV; k++) {
    pcgc_attrs a = attrs((pcgc_op_kind)k);
    double sc = k == PCGC_OP_DIV ? 0.3 : 0, sh = k == PCGC_OP_DIV ? 2 : 0;
    CASE((pcgc_op_kind)k, a, "same shape", GF(3, 4), gshift(GF(3, 4), sc, sh));
    CASE((pcgc_op_kind)k, a, "[3, 4] by [4]", GF(3, 4), gshift(GF(4), sc, sh));
    CASE((pcgc_op_kind)k, a, "[4] by [3, 4]", GF(4), gshift(GF(3, 4), sc, sh));
    CASE((pcgc_op_kind)k, a, "[3, 1] by [1, 4]", GF(3, 1), gshift(GF(1, 4), sc, sh));
    CASE((pcgc_op_kind)k, a, "[2, 3, 4] by [3, 1]", GF(2, 3, 4), gshift(GF(3, 1), sc, sh));
    CASE((pcgc_op_kind)k, a, "[2, 1, 4] by [3, 1]", GF(2, 1, 4), gshift(GF(3, 1), sc, sh));
    CASE((pcgc_op_kind)k, a, "[3, 4] by scalar", GF(3, 4), gshift(gscalar(), sc, sh));
    CASE((pcgc_op_kind)k, a, "scalar by [2, 3]", gscalar(), gshift(GF(2, 3), sc, sh));
  }

  /* data movement */
  CASE(PCGC_OP_CONCAT, with_int(attrs(PCGC_OP_CONCAT), "axis", 0), "axis 0", GF(1, 3), GF(2, 3), GF(3, 3));
  CASE(PCGC_OP_CONCAT, with_int(attrs(PCGC_OP_CONCAT), "axis", -1), "axis -1", GF(2, 3, 1), GF(2, 3, 2),
       GF(2, 3, 4));
  CASE(PCGC_OP_CONCAT, with_int(attrs(PCGC_OP_CONCAT), "axis", 1), "axis 1", GF(2, 1, 2), GF(2, 3, 2),
       GF(2, 2, 2));
  pcgc_attrs a = WITH_INTS(with_int(attrs(PCGC_OP_SPLIT), "axis", 1), "sizes", 1, 2, 3);
  CASE(PCGC_OP_SPLIT, a, "axis 1 sizes [1, 2, 3]", GF(2, 6, 2));
  a = WITH_INTS(with_int(attrs(PCGC_OP_SPLIT), "axis", -1), "sizes", 3, 1);
  CASE(PCGC_OP_SPLIT, a, "axis -1 sizes [3, 1]", GF(3, 4));
  a = WITH_INTS(with_int(attrs(PCGC_OP_SPLIT), "axis", 0), "sizes", 2, 1);
  CASE(PCGC_OP_SPLIT, a, "axis 0 sizes [2, 1]", GF(3, 2));
  CASE(PCGC_OP_RESHAPE, WITH_INTS(attrs(PCGC_OP_RESHAPE), "shape", -1, 6), "[-1, 6]", GF(2, 3, 4));
  CASE(PCGC_OP_RESHAPE, WITH_INTS(attrs(PCGC_OP_RESHAPE), "shape", 4, -1, 2), "[4, -1, 2]", GF(2, 3, 4));
  CASE(PCGC_OP_RESHAPE, WITH_INTS(attrs(PCGC_OP_RESHAPE), "shape", 24), "[24]", GF(2, 3, 4));
  CASE(PCGC_OP_TRANSPOSE, WITH_INTS(attrs(PCGC_OP_TRANSPOSE), "perm", 2, 0, 1), "perm [2, 0, 1]", GF(2, 3, 4));
  CASE(PCGC_OP_TRANSPOSE, WITH_INTS(attrs(PCGC_OP_TRANSPOSE), "perm", 1, 0), "perm [1, 0]", GF(3, 5));
  CASE(PCGC_OP_TRANSPOSE, WITH_INTS(attrs(PCGC_OP_TRANSPOSE), "perm", 0, -1, 1), "perm [0, -1, 1]",
       GF(2, 3, 4));
  for (int ax = -1; ax <= 3; ax++) {
    snprintf(what, sizeof what, "axis %d", ax);
    CASE(PCGC_OP_FLATTEN, with_int(attrs(PCGC_OP_FLATTEN), "axis", ax), what, GF(2, 3, 4));
  }

  /* softmax and reductions */
  for (int ax = -1; ax <= 2; ax++) {
    snprintf(what, sizeof what, "axis %d", ax);
    CASE(PCGC_OP_SOFTMAX, with_int(attrs(PCGC_OP_SOFTMAX), "axis", ax), what, GF(2, 3, 4));
  }
  CASE(PCGC_OP_SOFTMAX, attrs(PCGC_OP_SOFTMAX), "rank 1", GF(5));
  for (int ax = -1; ax <= 2; ax++) {
    snprintf(what, sizeof what, "axis %d", ax);
    CASE(PCGC_OP_LOG_SOFTMAX, with_int(attrs(PCGC_OP_LOG_SOFTMAX), "axis", ax), what, GF(2, 3, 4));
  }
  CASE(PCGC_OP_LOG_SOFTMAX, attrs(PCGC_OP_LOG_SOFTMAX), "rank 1", GF(5));
  CASE(PCGC_OP_ROPE, attrs(PCGC_OP_ROPE), "[2, 3, 5, 4]", GF(2, 3, 5, 4));
  CASE(PCGC_OP_ROPE, with_float(attrs(PCGC_OP_ROPE), "theta", 7.5), "theta 7.5 [6, 8]", GF(6, 8));
  static const int64_t dimsets[][4] = {{1, 0}, {2, 1, 2}, {1, -1}, {2, 0, 2}, {3, 0, 1, 2}};
  for (int k = PCGC_OP_REDUCE_SUM; k <= PCGC_OP_REDUCE_MAX; k++)
    for (int keep = 0; keep < 2; keep++)
      for (size_t s = 0; s < sizeof dimsets / sizeof dimsets[0]; s++) {
        a = with_ints_(attrs((pcgc_op_kind)k), "dims", &dimsets[s][1], (int)dimsets[s][0]);
        a = with_int(a, "keepdims", keep);
        snprintf(what, sizeof what, "%d dims from %lld, keepdims=%d", (int)dimsets[s][0],
                 (long long)dimsets[s][1], keep);
        CASE((pcgc_op_kind)k, a, what, GF(2, 3, 4));
      }

  /* normalisation */
  a = attrs(PCGC_OP_BATCHNORM);
  CASE(PCGC_OP_BATCHNORM, a, "rank 2", GF(6, 3));
  CASE(PCGC_OP_BATCHNORM, a, "rank 2 affine", GF(6, 3), GF(3), GF(3));
  CASE(PCGC_OP_BATCHNORM, a, "rank 4", GF(2, 3, 2, 2));
  CASE(PCGC_OP_BATCHNORM, a, "rank 4 affine", GF(2, 3, 2, 2), GF(3), GF(3));
  CASE(PCGC_OP_BATCHNORM, with_float(a, "eps", 0.1), "rank 3 affine eps 0.1", GF(3, 2, 4), GF(2), GF(2));
  a = with_int(attrs(PCGC_OP_LAYERNORM), "axes", 1);
  CASE(PCGC_OP_LAYERNORM, a, "axes 1", GF(2, 3, 4));
  CASE(PCGC_OP_LAYERNORM, a, "axes 1 affine", GF(2, 3, 4), GF(4), GF(4));
  a = with_int(attrs(PCGC_OP_LAYERNORM), "axes", 2);
  CASE(PCGC_OP_LAYERNORM, a, "axes 2", GF(2, 3, 4));
  CASE(PCGC_OP_LAYERNORM, a, "axes 2 affine", GF(2, 3, 4), GF(3, 4), GF(3, 4));
  a = with_float(with_int(attrs(PCGC_OP_LAYERNORM), "axes", 3), "eps", 1e-3);
  CASE(PCGC_OP_LAYERNORM, a, "axes 3 affine eps 1e-3", GF(2, 3, 4), GF(2, 3, 4), GF(2, 3, 4));
  a = with_int(attrs(PCGC_OP_RMSNORM), "axes", 1);
  CASE(PCGC_OP_RMSNORM, a, "axes 1", GF(2, 3, 4));
  CASE(PCGC_OP_RMSNORM, a, "axes 1 scale", GF(2, 3, 4), GF(4));
  a = with_int(attrs(PCGC_OP_RMSNORM), "axes", 2);
  CASE(PCGC_OP_RMSNORM, a, "axes 2 scale", GF(2, 3, 4), GF(3, 4));
  a = with_float(with_int(attrs(PCGC_OP_RMSNORM), "axes", 3), "eps", 1e-3);
  CASE(PCGC_OP_RMSNORM, a, "axes 3 scale eps 1e-3", GF(2, 3, 4), GF(2, 3, 4));
  /* wide rows: the column sums' scratch beyond the stack's 1024 */
  CASE(PCGC_OP_RMSNORM, attrs(PCGC_OP_RMSNORM), "wide rows scale", GF(2, 1100), GF(1100));

  /* losses */
  for (int red = PCGC_REDUCTION_MEAN; red <= PCGC_REDUCTION_SUM; red++) {
    const char *r = red == PCGC_REDUCTION_MEAN ? "mean" : "sum";
    a = with_int(attrs(PCGC_OP_SOFTMAX_CROSS_ENTROPY), "reduction", red);
    snprintf(what, sizeof what, "[N, C] i32 labels %s", r);
    CASE(PCGC_OP_SOFTMAX_CROSS_ENTROPY, a, what, GF(4, 5), GLABELS(PCGC_I32, 5, 4));
    snprintf(what, sizeof what, "[B, S, C] i64 labels %s", r);
    CASE(PCGC_OP_SOFTMAX_CROSS_ENTROPY, a, what, GF(2, 3, 5), GLABELS(PCGC_I64, 5, 2, 3));
    snprintf(what, sizeof what, "[C] %s", r);
    CASE(PCGC_OP_SOFTMAX_CROSS_ENTROPY, a, what, GF(5), glabels_(PCGC_I32, 5, NULL, 0));
    a = with_int(attrs(PCGC_OP_MSE), "reduction", red);
    snprintf(what, sizeof what, "[3, 4] %s", r);
    CASE(PCGC_OP_MSE, a, what, GF(3, 4), GF(3, 4));
    snprintf(what, sizeof what, "rank 0 %s", r);
    CASE(PCGC_OP_MSE, a, what, gscalar(), gscalar());
  }
}

START_TEST(grad_case) {
  const op_case *c = &cases[_i];
  gc_result r = gradcheck(c->k, &c->a, c->n_in, c->g, c->ctx, 11, 0);
  ck_assert_msg(r.message[0] == '\0', "%s: %s", c->what, r.message);
  ck_assert_msg(r.checked > 0, "%s: nothing checked", c->what);
  ck_assert_msg(r.max_err <= GC_TOL, "%s: gradient error %g at input %d element %lld: analytic %.10g vs numeric %.10g",
                c->what, r.max_err, r.worst_input, (long long)r.worst_index, r.analytic, r.numeric);
}
END_TEST

/* f32 against f64 on the same (f32-representable) inputs, forward and backward. */
START_TEST(f32_agrees_case) {
  const op_case *c = &cases[_i];
  pcgc_buf in64[3], in32[3], din64[3], din32[3], out64[16], out32[16], dy64[16], dy32[16];
  for (int i = 0; i < c->n_in; i++) {
    const gc_input *g = &c->g[i];
    in64[i] = mk(g->dtype, NULL, g->dims, g->rank);
    pcgc_cpu_fill_random(&in64[i], g->bound, 5, 100 + (uint64_t)i, NULL);
    if (g->dtype != PCGC_F64) {
      in32[i] = in64[i];
      din64[i] = din32[i] = in64[i];
      din64[i].data = din32[i].data = NULL;
      continue;
    }
    in32[i] = like(&in64[i], PCGC_F32);
    double *v = in64[i].data;
    for (int64_t e = 0; e < pcgc_buf_numel(&in64[i]); e++) {
      v[e] = (double)(float)(v[e] * (g->scale != 0 ? g->scale : 1) + g->shift);
      ((float *)in32[i].data)[e] = (float)v[e];
    }
    din64[i] = like(&in64[i], -1);
    din32[i] = like(&in32[i], -1);
  }
  int n_out = outs_for(c->k, &c->a, c->n_in, in64, out64);
  for (int j = 0; j < n_out; j++) {
    out32[j] = like(&out64[j], PCGC_F32);
    dy64[j] = like(&out64[j], -1);
    dy32[j] = like(&out64[j], PCGC_F32);
    fill(&dy64[j], 200 + (uint64_t)j);
    for (int64_t e = 0; e < pcgc_buf_numel(&dy64[j]); e++) {
      double *v = dy64[j].data;
      v[e] = (double)(float)v[e];
      ((float *)dy32[j].data)[e] = (float)v[e];
    }
  }
  forward_ok(c->k, &c->a, c->n_in, in64, n_out, out64, c->ctx);
  forward_ok(c->k, &c->a, c->n_in, in32, n_out, out32, c->ctx);
  backward_ok(c->k, &c->a, c->n_in, in64, n_out, out64, dy64, din64, c->ctx);
  backward_ok(c->k, &c->a, c->n_in, in32, n_out, out32, dy32, din32, c->ctx);
  for (int j = 0; j < n_out; j++)
    for (int64_t e = 0; e < pcgc_buf_numel(&out64[j]); e++) {
      double w = at(&out64[j], e), g = at(&out32[j], e);
      ck_assert_msg(fabs(w - g) <= 1e-5 * fmax(1, fabs(w)), "%s: output %d element %lld: f32 %.9g vs f64 %.9g",
                    c->what, j, (long long)e, g, w);
    }
  for (int i = 0; i < c->n_in; i++) {
    if (!din64[i].data) continue;
    for (int64_t e = 0; e < pcgc_buf_numel(&din64[i]); e++) {
      double w = at(&din64[i], e), g = at(&din32[i], e);
      ck_assert_msg(fabs(w - g) <= 1e-4 * fmax(1, fabs(w)), "%s: gradient of input %d element %lld: f32 %.9g vs f64 %.9g",
                    c->what, i, (long long)e, g, w);
    }
  }
}
END_TEST

/* ------------------------------------------------- exact forward values */

START_TEST(values_unary) {
  pcgc_buf x = F64(VALS(-1, 0, 2), 3);
  expect_fwd(PCGC_OP_RELU, AP(PCGC_OP_RELU), 1, &x, VALS(0, 0, 2), 0);
  expect_fwd(PCGC_OP_GELU, AP(PCGC_OP_GELU), 1, &x,
             VALS(-0.15865525393145707, 0, 1.9544997361036416), 1e-15);
  /* torch.nn.functional.gelu(x, approximate='tanh') */
  pcgc_attrs tanh_gelu = with_int(attrs(PCGC_OP_GELU), "approximate", 1);
  expect_fwd(PCGC_OP_GELU, &tanh_gelu, 1, &x, VALS(-0.15880800939172324, 0, 1.954597694087775), 1e-15);
  expect_fwd(PCGC_OP_SIGMOID, AP(PCGC_OP_SIGMOID), 1, &x,
             VALS(0.2689414213699951, 0.5, 0.8807970779778823), 1e-15);
  /* torch.nn.functional.relu6, hardsigmoid, hardswish at and around their kinks */
  pcgc_buf xk = F64(VALS(-4, -3, -1, 0, 2, 3, 7), 7);
  expect_fwd(PCGC_OP_RELU6, AP(PCGC_OP_RELU6), 1, &xk, VALS(0, 0, 0, 0, 2, 3, 6), 0);
  pcgc_attrs leaky = attrs(PCGC_OP_LEAKY_RELU); /* alpha 0.01, torch's default */
  expect_fwd(PCGC_OP_LEAKY_RELU, &leaky, 1, &xk, VALS(-0.04, -0.03, -0.01, 0, 2, 3, 7), 1e-15);
  expect_fwd(PCGC_OP_HARDSIGMOID, AP(PCGC_OP_HARDSIGMOID), 1, &xk,
             VALS(0, 0, 0.3333333333333333, 0.5, 0.8333333333333334, 1, 1), 1e-15);
  expect_fwd(PCGC_OP_HARDSWISH, AP(PCGC_OP_HARDSWISH), 1, &xk,
             VALS(-0.0, -0.0, -0.3333333333333333, 0, 1.6666666666666667, 3, 7), 1e-15);
  /* torch.clamp(min=-1.5, max=2.5), clamp(min=-1.5), torch.pow, torch.sqrt, torch.rsqrt, torch.reciprocal */
  pcgc_attrs clip = with_float(with_float(attrs(PCGC_OP_CLIP), "min", -1.5), "max", 2.5);
  expect_fwd(PCGC_OP_CLIP, &clip, 1, &xk, VALS(-1.5, -1.5, -1, 0, 2, 2.5, 2.5), 0);
  clip = with_float(attrs(PCGC_OP_CLIP), "min", -1.5);
  pcgc_buf xinf = F64(VALS(-INFINITY, -1, INFINITY), 3);
  expect_fwd(PCGC_OP_CLIP, &clip, 1, &xinf, VALS(-1.5, -1, INFINITY), 0);
  pcgc_buf xp = F64(VALS(0.25, 4, 9), 3);
  expect_fwd(PCGC_OP_POW, (pcgc_attrs[1]){with_float(attrs(PCGC_OP_POW), "exponent", 0.5)}, 1, &xp, VALS(0.5, 2, 3), 0);
  expect_fwd(PCGC_OP_POW, (pcgc_attrs[1]){with_float(attrs(PCGC_OP_POW), "exponent", -0.5)}, 1, &xp,
             VALS(2, 0.5, 1.0 / 3), 0);
  expect_fwd(PCGC_OP_POW, (pcgc_attrs[1]){with_float(attrs(PCGC_OP_POW), "exponent", -1)}, 1, &xp,
             VALS(4, 0.25, 1.0 / 9), 0);
  expect_fwd(PCGC_OP_POW, (pcgc_attrs[1]){with_float(attrs(PCGC_OP_POW), "exponent", 1.5)}, 1, &xp,
             VALS(0.125, 8, 27), 1e-15);
  expect_fwd(PCGC_OP_POW, (pcgc_attrs[1]){with_float(attrs(PCGC_OP_POW), "exponent", 3)}, 1, &x, VALS(-1, 0, 8), 0);
  /* torch.nn.functional.silu */
  expect_fwd(PCGC_OP_SILU, AP(PCGC_OP_SILU), 1, &x, VALS(-0.2689414213699951, 0, 1.7615941559557646), 1e-15);
  expect_fwd(PCGC_OP_TANH, AP(PCGC_OP_TANH), 1, &x,
             VALS(-0.7615941559557649, 0, 0.9640275800758169), 1e-15);
  expect_fwd(PCGC_OP_EXP, AP(PCGC_OP_EXP), 1, &x, VALS(0.36787944117144233, 1, 7.38905609893065),
             1e-14);
  expect_fwd(PCGC_OP_IDENTITY, AP(PCGC_OP_IDENTITY), 1, &x, VALS(-1, 0, 2), 0);
  pcgc_attrs a = unary_attrs(PCGC_OP_SCALAR_ADD);
  expect_fwd(PCGC_OP_SCALAR_ADD, &a, 1, &x, VALS(1.5, 2.5, 4.5), 0);
  a = unary_attrs(PCGC_OP_SCALAR_SUB);
  expect_fwd(PCGC_OP_SCALAR_SUB, &a, 1, &x, VALS(0.5, 1.5, 3.5), 0);
  a = unary_attrs(PCGC_OP_SCALAR_MUL);
  expect_fwd(PCGC_OP_SCALAR_MUL, &a, 1, &x, VALS(-0.7, 0, 1.4), 1e-15);
  a = unary_attrs(PCGC_OP_SCALAR_DIV);
  expect_fwd(PCGC_OP_SCALAR_DIV, &a, 1, &x, VALS(1.0 / 3, 0, -2.0 / 3), 1e-15);
  /* dropout outside training is the identity */
  a = unary_attrs(PCGC_OP_DROPOUT);
  expect_fwd(PCGC_OP_DROPOUT, &a, 1, &x, VALS(-1, 0, 2), 0);

  /* identity moves any dtype */
  pcgc_buf xi = I32(VALS(7, -3, 2147483647), 3), yi = like(&xi, -1);
  a = attrs(PCGC_OP_IDENTITY);
  forward_ok(PCGC_OP_IDENTITY, &a, 1, &xi, 1, &yi, NULL);
  ck_assert_int_eq(((int32_t *)yi.data)[2], 2147483647);
  ck_assert_int_eq(((int32_t *)yi.data)[1], -3);
  pcgc_buf dyi = like(&xi, -1), dxi = like(&xi, -1);
  backward_ok(PCGC_OP_IDENTITY, &a, 1, &xi, 1, &yi, &dyi, &dxi, NULL);
}
END_TEST

START_TEST(values_binary) {
  pcgc_buf in[2] = {F64(VALS(1, 2, 3, 4, 5, 6), 2, 3), F64(VALS(10, 20, 40), 3)};
  pcgc_attrs a = attrs(PCGC_OP_ADD);
  expect_fwd(PCGC_OP_ADD, &a, 2, in, VALS(11, 22, 43, 14, 25, 46), 0);
  a = attrs(PCGC_OP_SUB);
  expect_fwd(PCGC_OP_SUB, &a, 2, in, VALS(-9, -18, -37, -6, -15, -34), 0);
  a = attrs(PCGC_OP_MUL);
  expect_fwd(PCGC_OP_MUL, &a, 2, in, VALS(10, 40, 120, 40, 100, 240), 0);
  a = attrs(PCGC_OP_DIV);
  expect_fwd(PCGC_OP_DIV, &a, 2, in, VALS(0.1, 0.1, 0.075, 0.4, 0.25, 0.15), 1e-16);
  pcgc_buf outer[2] = {F64(VALS(1, 2), 2, 1), F64(VALS(10, 20, 40), 1, 3)};
  a = attrs(PCGC_OP_ADD);
  expect_fwd(PCGC_OP_ADD, &a, 2, outer, VALS(11, 21, 41, 12, 22, 42), 0);
  pcgc_buf sc[2] = {scalar64(), F64(VALS(1, 2), 2)};
  ((double *)sc[0].data)[0] = 6;
  a = attrs(PCGC_OP_DIV);
  expect_fwd(PCGC_OP_DIV, &a, 2, sc, VALS(6, 3), 0);

  /* backward sums over the broadcast dims: d(a*b)/db = column sums of a */
  a = attrs(PCGC_OP_MUL);
  pcgc_buf y = F64(NULL, 2, 3), dy = F64(VALS(1, 1, 1, 1, 1, 1), 2, 3);
  pcgc_buf din[2] = {F64(NULL, 2, 3), F64(VALS(100, 100, 100), 3)};
  forward_ok(PCGC_OP_MUL, &a, 2, in, 1, &y, NULL);
  backward_ok(PCGC_OP_MUL, &a, 2, in, 1, &y, &dy, din, NULL);
  expect_vals(&din[1], VALS(105, 107, 109), 0); /* added to what was there */
  expect_vals(&din[0], VALS(10, 20, 40, 10, 20, 40), 0);
}
END_TEST

START_TEST(values_movement) {
  pcgc_attrs a = with_int(attrs(PCGC_OP_CONCAT), "axis", 0);
  pcgc_buf c0[2] = {F64(VALS(1, 2), 1, 2), F64(VALS(3, 4, 5, 6), 2, 2)};
  expect_fwd(PCGC_OP_CONCAT, &a, 2, c0, VALS(1, 2, 3, 4, 5, 6), 0);
  a = with_int(attrs(PCGC_OP_CONCAT), "axis", -1);
  pcgc_buf c1[2] = {F64(VALS(1, 2), 2, 1), F64(VALS(3, 4, 5, 6), 2, 2)};
  expect_fwd(PCGC_OP_CONCAT, &a, 2, c1, VALS(1, 3, 4, 2, 5, 6), 0);

  a = WITH_INTS(with_int(attrs(PCGC_OP_SPLIT), "axis", 1), "sizes", 1, 2);
  pcgc_buf x = F64(VALS(1, 2, 3, 4, 5, 6), 2, 3), parts[2] = {F64(NULL, 2, 1), F64(NULL, 2, 2)};
  forward_ok(PCGC_OP_SPLIT, &a, 1, &x, 2, parts, NULL);
  expect_vals(&parts[0], VALS(1, 4), 0);
  expect_vals(&parts[1], VALS(2, 3, 5, 6), 0);

  a = WITH_INTS(attrs(PCGC_OP_RESHAPE), "shape", 3, -1);
  pcgc_buf r = F64(NULL, 3, 2);
  forward_ok(PCGC_OP_RESHAPE, &a, 1, &x, 1, &r, NULL);
  expect_vals(&r, VALS(1, 2, 3, 4, 5, 6), 0);

  a = WITH_INTS(attrs(PCGC_OP_TRANSPOSE), "perm", 1, 0);
  expect_fwd(PCGC_OP_TRANSPOSE, &a, 1, &x, VALS(1, 4, 2, 5, 3, 6), 0);
  pcgc_buf x3 = F64(VALS(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), 2, 3, 2);
  a = WITH_INTS(attrs(PCGC_OP_TRANSPOSE), "perm", 2, 0, 1); /* y[k][i][j] = x[i][j][k] */
  expect_fwd(PCGC_OP_TRANSPOSE, &a, 1, &x3, VALS(0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11), 0);

  a = with_int(attrs(PCGC_OP_FLATTEN), "axis", 2);
  pcgc_buf f = F64(NULL, 6, 2);
  forward_ok(PCGC_OP_FLATTEN, &a, 1, &x3, 1, &f, NULL);
  expect_vals(&f, VALS(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), 0);

  /* data movement forwards moves integers too */
  pcgc_buf xi = I32(VALS(1, 2, 3, 4, 5, 6), 2, 3), yi = I32(NULL, 3, 2);
  a = WITH_INTS(attrs(PCGC_OP_TRANSPOSE), "perm", 1, 0);
  forward_ok(PCGC_OP_TRANSPOSE, &a, 1, &xi, 1, &yi, NULL);
  ck_assert_int_eq(((int32_t *)yi.data)[1], 4);
  ck_assert_int_eq(((int32_t *)yi.data)[5], 6);
}
END_TEST

START_TEST(values_softmax_reduce) {
  pcgc_attrs a = attrs(PCGC_OP_SOFTMAX);
  pcgc_buf x = F64(VALS(0, log(2), log(3)), 1, 3);
  expect_fwd(PCGC_OP_SOFTMAX, &a, 1, &x, VALS(1.0 / 6, 1.0 / 3, 0.5), 1e-16);
  a = with_int(attrs(PCGC_OP_SOFTMAX), "axis", 0);
  pcgc_buf xc = F64(VALS(0, log(3)), 2, 1);
  expect_fwd(PCGC_OP_SOFTMAX, &a, 1, &xc, VALS(0.25, 0.75), 1e-16);
  /* large logits do not overflow */
  pcgc_buf big = F64(VALS(1000, 1000), 2);
  a = attrs(PCGC_OP_SOFTMAX);
  expect_fwd(PCGC_OP_SOFTMAX, &a, 1, &big, VALS(0.5, 0.5), 0);

  pcgc_buf m = F64(VALS(1, 2, 3, 4, 5, 6), 2, 3);
  a = WITH_INTS(attrs(PCGC_OP_REDUCE_SUM), "dims", 0);
  expect_fwd(PCGC_OP_REDUCE_SUM, &a, 1, &m, VALS(5, 7, 9), 0);
  a = with_int(WITH_INTS(attrs(PCGC_OP_REDUCE_MEAN), "dims", 1), "keepdims", 1);
  pcgc_buf y = F64(NULL, 2, 1);
  forward_ok(PCGC_OP_REDUCE_MEAN, &a, 1, &m, 1, &y, NULL);
  expect_vals(&y, VALS(2, 5), 0);
  a = WITH_INTS(attrs(PCGC_OP_REDUCE_SUM), "dims", 0, 1);
  pcgc_buf s = scalar64();
  forward_ok(PCGC_OP_REDUCE_SUM, &a, 1, &m, 1, &s, NULL);
  expect_vals(&s, VALS(21), 0);
  a = WITH_INTS(attrs(PCGC_OP_REDUCE_MEAN), "dims", -1);
  expect_fwd(PCGC_OP_REDUCE_MEAN, &a, 1, &m, VALS(2, 5), 0);

  /* torch.nn.functional.log_softmax([1, 2, 3]); large values do not overflow */
  pcgc_buf r = F64(VALS(1, 2, 3), 3);
  expect_fwd(PCGC_OP_LOG_SOFTMAX, AP(PCGC_OP_LOG_SOFTMAX), 1, &r,
             VALS(-2.4076059644443806, -1.4076059644443804, -0.4076059644443804), 1e-15);
  expect_fwd(PCGC_OP_LOG_SOFTMAX, AP(PCGC_OP_LOG_SOFTMAX), 1, &big, VALS(-0.69314718055994531, -0.69314718055994531), 1e-15);

  /* reduce_max (torch.amax): the gradient of tied maxima is shared evenly */
  pcgc_buf t = F64(VALS(1, 7, 7, 4, -2, 0), 2, 3);
  a = WITH_INTS(attrs(PCGC_OP_REDUCE_MAX), "dims", 1);
  expect_fwd(PCGC_OP_REDUCE_MAX, &a, 1, &t, VALS(7, 4), 0);
  a = WITH_INTS(attrs(PCGC_OP_REDUCE_MAX), "dims", 0);
  expect_fwd(PCGC_OP_REDUCE_MAX, &a, 1, &t, VALS(4, 7, 7), 0);
  a = WITH_INTS(attrs(PCGC_OP_REDUCE_MAX), "dims", 1);
  pcgc_buf mx = F64(NULL, 2), dmx = F64(VALS(1, 3), 2), dt = F64(NULL, 2, 3);
  forward_ok(PCGC_OP_REDUCE_MAX, &a, 1, &t, 1, &mx, NULL);
  backward_ok(PCGC_OP_REDUCE_MAX, &a, 1, &t, 1, &mx, &dmx, &dt, NULL);
  expect_vals(&dt, VALS(0, 0.5, 0.5, 3, 0, 0), 0);
}
END_TEST

/* causal_mask: -inf where column > row + offset, over the last two dims of
 * every matrix; its gradient passes where the input does. (Not in the
 * gradient-check table: -inf outputs have no finite difference.) */
/* rope against Hugging Face's LLaMA form in torch (f64): x * cos + rotate_half(x) * sin */
START_TEST(values_rope) {
  pcgc_buf x = F64(VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12), 3, 4);
  expect_fwd(PCGC_OP_ROPE, AP(PCGC_OP_ROPE), 1, &x,
             VALS(1.0, 2.0, 3.0, 4.0, -3.1887853643145765, 5.919701335826659, 7.9894710651164615, 8.059599003338322,
                  -13.747593224006781, 9.758016066345782, 3.6060616394125686, 12.197586746932263),
             1e-14);
}
END_TEST

START_TEST(values_causal_mask) {
  pcgc_buf x = F64(VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12), 2, 2, 3);
  const double I = INFINITY;
  expect_fwd(PCGC_OP_CAUSAL_MASK, AP(PCGC_OP_CAUSAL_MASK), 1, &x, VALS(1, -I, -I, 4, 5, -I, 7, -I, -I, 10, 11, -I), 0);
  pcgc_attrs a = with_int(attrs(PCGC_OP_CAUSAL_MASK), "offset", 1);
  expect_fwd(PCGC_OP_CAUSAL_MASK, &a, 1, &x, VALS(1, 2, -I, 4, 5, 6, 7, 8, -I, 10, 11, 12), 0);
  a = with_int(attrs(PCGC_OP_CAUSAL_MASK), "offset", -1);
  expect_fwd(PCGC_OP_CAUSAL_MASK, &a, 1, &x, VALS(-I, -I, -I, 4, -I, -I, -I, -I, -I, 10, -I, -I), 0);
  pcgc_buf y = F64(NULL, 2, 2, 3), dy = F64(VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12), 2, 2, 3);
  pcgc_buf dx = F64(VALS(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1), 2, 2, 3);
  a = attrs(PCGC_OP_CAUSAL_MASK);
  forward_ok(PCGC_OP_CAUSAL_MASK, &a, 1, &x, 1, &y, NULL);
  backward_ok(PCGC_OP_CAUSAL_MASK, &a, 1, &x, 1, &y, &dy, &dx, NULL); /* accumulates */
  expect_vals(&dx, VALS(2, 1, 1, 5, 6, 1, 8, 1, 1, 11, 12, 1), 0);
  pcgc_buf f32 = mk(PCGC_F32, VALS(1, 2, 3, 4), DIMS(2, 2));
  expect_fwd(PCGC_OP_CAUSAL_MASK, &a, 1, &f32, VALS(1, -I, 3, 4), 0);
}
END_TEST

START_TEST(values_norm) {
  double r = 1 / sqrt(1 + 1e-5);
  pcgc_attrs a = attrs(PCGC_OP_BATCHNORM);
  pcgc_buf x = F64(VALS(1, 3), 2, 1);
  expect_fwd(PCGC_OP_BATCHNORM, &a, 1, &x, VALS(-r, r), 1e-15);
  pcgc_buf xa[3] = {x, F64(VALS(2), 1), F64(VALS(0.5), 1)};
  expect_fwd(PCGC_OP_BATCHNORM, &a, 3, xa, VALS(0.5 - 2 * r, 0.5 + 2 * r), 1e-15);
  /* [N=2, C=1, H=2, W=1]: one channel over 1, 2, 3, 6: mean 3, variance 3.5 */
  pcgc_buf x4 = F64(VALS(1, 2, 3, 6), 2, 1, 2, 1);
  double q = 1 / sqrt(3.5 + 1e-5);
  expect_fwd(PCGC_OP_BATCHNORM, &a, 1, &x4, VALS(-2 * q, -q, 0, 3 * q), 1e-15);

  /* x / sqrt(mean(x^2) + 1e-5) [* scale], computed with torch */
  a = attrs(PCGC_OP_RMSNORM);
  pcgc_buf rm = F64(VALS(1, 3, 2, 2), 2, 2);
  expect_fwd(PCGC_OP_RMSNORM, &a, 1, &rm,
             VALS(0.4472131482870333, 1.3416394448610998, 0.9999987500023437, 0.9999987500023437), 1e-15);
  pcgc_buf rms[2] = {rm, F64(VALS(2, 3), 2)};
  expect_fwd(PCGC_OP_RMSNORM, &a, 2, rms,
             VALS(0.8944262965740666, 4.024918334583299, 1.9999975000046875, 2.9999962500070314), 1e-15);

  a = attrs(PCGC_OP_LAYERNORM);
  pcgc_buf l = F64(VALS(1, 3, 2, 2), 2, 2);
  expect_fwd(PCGC_OP_LAYERNORM, &a, 1, &l, VALS(-r, r, 0, 0), 1e-15);
  pcgc_buf la[3] = {l, F64(VALS(2, 3), 2), F64(VALS(1, 1), 2)};
  expect_fwd(PCGC_OP_LAYERNORM, &a, 3, la, VALS(1 - 2 * r, 1 + 3 * r, 1, 1), 1e-15);
  a = with_int(attrs(PCGC_OP_LAYERNORM), "axes", 2);
  pcgc_buf l2 = F64(VALS(1, 2, 3, 6), 1, 2, 2);
  expect_fwd(PCGC_OP_LAYERNORM, &a, 1, &l2, VALS(-2 * q, -q, 0, 3 * q), 1e-15);
}
END_TEST

START_TEST(values_losses) {
  pcgc_attrs a = attrs(PCGC_OP_SOFTMAX_CROSS_ENTROPY);
  pcgc_buf in[2] = {F64(VALS(0, 0, 0, log(3)), 2, 2), I32(VALS(1, 0), 2)};
  pcgc_buf loss = scalar64(), one = scalar64();
  ((double *)one.data)[0] = 1;
  forward_ok(PCGC_OP_SOFTMAX_CROSS_ENTROPY, &a, 2, in, 1, &loss, NULL);
  ck_assert_int_eq(loss.rank, 0);
  expect_vals(&loss, VALS(log(8) / 2), 1e-15); /* (ln 2 + ln 4) / 2 */
  pcgc_buf din[2] = {F64(NULL, 2, 2), in[1]};
  din[1].data = NULL;
  backward_ok(PCGC_OP_SOFTMAX_CROSS_ENTROPY, &a, 2, in, 1, &loss, &one, din, NULL);
  expect_vals(&din[0], VALS(0.25, -0.25, -0.375, 0.375), 1e-15);
  a = with_int(attrs(PCGC_OP_SOFTMAX_CROSS_ENTROPY), "reduction", PCGC_REDUCTION_SUM);
  forward_ok(PCGC_OP_SOFTMAX_CROSS_ENTROPY, &a, 2, in, 1, &loss, NULL);
  expect_vals(&loss, VALS(log(8)), 1e-15);

  a = attrs(PCGC_OP_MSE);
  pcgc_buf p[2] = {F64(VALS(1, 2), 2), F64(VALS(0, 0.5), 2)};
  forward_ok(PCGC_OP_MSE, &a, 2, p, 1, &loss, NULL);
  expect_vals(&loss, VALS(1.625), 0);
  pcgc_buf dp[2] = {F64(NULL, 2), F64(NULL, 2)};
  backward_ok(PCGC_OP_MSE, &a, 2, p, 1, &loss, &one, dp, NULL);
  expect_vals(&dp[0], VALS(1, 1.5), 0); /* 2 (p - t) / 2 */
  expect_vals(&dp[1], VALS(-1, -1.5), 0);
  a = with_int(attrs(PCGC_OP_MSE), "reduction", PCGC_REDUCTION_SUM);
  forward_ok(PCGC_OP_MSE, &a, 2, p, 1, &loss, NULL);
  expect_vals(&loss, VALS(3.25), 0);
}
END_TEST

/* ---------------------------------------------------------------- pieces */

START_TEST(dropout_piece_matches_whole) {
  pcgc_attrs a = unary_attrs(PCGC_OP_DROPOUT);
  pcgc_buf x = F64(NULL, 8, 10), y = like(&x, -1), dy = like(&x, -1), dx = like(&x, -1);
  fill(&x, 1);
  fill(&dy, 2);
  forward_ok(PCGC_OP_DROPOUT, &a, 1, &x, 1, &y, &train_ctx);
  backward_ok(PCGC_OP_DROPOUT, &a, 1, &x, 1, &y, &dy, &dx, &train_ctx);
  int64_t off[2] = {3, 4}, dims[2] = {4, 5};
  pcgc_piece pin = piece_(x.dims, off, 2), pout = pin;
  pcgc_kernel_ctx ctx = {&pin, &pout, 42, 7, true, NULL, 0};
  pcgc_buf xp = slice(&x, off, dims), yp = like(&xp, -1), dyp = slice(&dy, off, dims), dxp = like(&xp, -1);
  forward_ok(PCGC_OP_DROPOUT, &a, 1, &xp, 1, &yp, &ctx);
  backward_ok(PCGC_OP_DROPOUT, &a, 1, &xp, 1, &yp, &dyp, &dxp, &ctx);
  pcgc_buf ys = slice(&y, off, dims), dxs = slice(&dx, off, dims);
  int zeros = 0;
  for (int64_t i = 0; i < 20; i++) {
    ck_assert_msg(at(&yp, i) == at(&ys, i), "element %lld: piece %.17g vs whole %.17g", (long long)i, at(&yp, i),
                  at(&ys, i));
    ck_assert(at(&dxp, i) == at(&dxs, i));
    zeros += at(&yp, i) == 0;
  }
  ck_assert_msg(zeros > 0 && zeros < 20, "the piece should hold kept and dropped elements (%d dropped)", zeros);
  /* the whole mask: kept elements scaled by 1/(1-rate), about 30% dropped */
  pcgc_buf big = F64(NULL, 100, 100), yb = like(&big, -1);
  for (int64_t i = 0; i < 10000; i++) ((double *)big.data)[i] = 1 + (double)(i % 7);
  forward_ok(PCGC_OP_DROPOUT, &a, 1, &big, 1, &yb, &train_ctx);
  int dropped = 0;
  for (int64_t i = 0; i < 10000; i++) {
    double v = at(&yb, i);
    if (v == 0) dropped++;
    else ck_assert(v == at(&big, i) * (1 / (1 - 0.3)));
  }
  ck_assert_msg(dropped > 2700 && dropped < 3300, "%d of 10000 dropped at rate 0.3", dropped);
  /* another node draws another mask */
  pcgc_kernel_ctx other = train_ctx;
  other.node = 8;
  pcgc_buf yo = like(&big, -1);
  forward_ok(PCGC_OP_DROPOUT, &a, 1, &big, 1, &yo, &other);
  ck_assert(memcmp(yo.data, yb.data, 10000 * sizeof(double)) != 0);
}
END_TEST

/* Splits dim 0 of [4, ...] inputs into two pieces of 2 rows, runs each
 * piece with its descriptor and returns the pieces' outputs. */
static void run_row_pieces(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_buf *in, const pcgc_buf *out,
                           pcgc_buf *piece_out /* [2] */, pcgc_buf *piece_dx /* [2] */) {
  for (int p = 0; p < 2; p++) {
    pcgc_buf pin[2];
    pcgc_piece pd[2], po;
    for (int i = 0; i < n_in; i++) {
      int64_t off[PCGC_MAX_RANK] = {2 * p}, dims[PCGC_MAX_RANK];
      memcpy(dims, in[i].dims, sizeof dims);
      dims[0] = 2;
      pin[i] = slice(&in[i], off, dims);
      pd[i] = piece_(in[i].dims, off, in[i].rank);
    }
    int64_t zero[PCGC_MAX_RANK] = {0};
    po = piece_(out->dims, zero, out->rank);
    pcgc_kernel_ctx ctx = {pd, &po, 0, 0, false, NULL, 0};
    piece_out[p] = like(out, -1);
    forward_ok(k, a, n_in, pin, 1, &piece_out[p], &ctx);
    pcgc_buf one = like(out, -1), din[2];
    for (int64_t e = 0; e < pcgc_buf_numel(&one); e++) ((double *)one.data)[e] = 1;
    for (int i = 0; i < n_in; i++) {
      din[i] = pin[i];
      din[i].data = NULL;
    }
    piece_dx[p] = like(&pin[0], -1);
    din[0] = piece_dx[p];
    backward_ok(k, a, n_in, pin, 1, &piece_out[p], &one, din, &ctx);
  }
}

/* Pieces of the batch are partial sums of a mean or a loss: they add up to
 * the whole, and each piece's gradient is its slice of the whole gradient. */
static void check_row_pieces(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_buf *in) {
  pcgc_buf out[1], dx = like(&in[0], -1), one, din[2], po[2], pdx[2];
  outs_for(k, a, n_in, in, out);
  forward_ok(k, a, n_in, in, 1, out, NULL);
  one = like(&out[0], -1);
  for (int64_t e = 0; e < pcgc_buf_numel(&one); e++) ((double *)one.data)[e] = 1;
  for (int i = 0; i < n_in; i++) {
    din[i] = in[i];
    din[i].data = NULL;
  }
  din[0] = dx;
  backward_ok(k, a, n_in, in, 1, out, &one, din, NULL);
  run_row_pieces(k, a, n_in, in, &out[0], po, pdx);
  for (int64_t e = 0; e < pcgc_buf_numel(&out[0]); e++)
    ck_assert_msg(fabs(at(&po[0], e) + at(&po[1], e) - at(&out[0], e)) <= 1e-13, "%s: element %lld: pieces %.17g + "
                  "%.17g, whole %.17g", pcgc_op_name(k), (long long)e, at(&po[0], e), at(&po[1], e), at(&out[0], e));
  int64_t per = pcgc_buf_numel(&pdx[0]);
  for (int p = 0; p < 2; p++)
    for (int64_t e = 0; e < per; e++)
      ck_assert_msg(fabs(at(&pdx[p], e) - at(&dx, p * per + e)) <= 1e-15, "%s: gradient of piece %d element %lld",
                    pcgc_op_name(k), p, (long long)e);
}

START_TEST(pieces_add_up) {
  pcgc_buf x = F64(NULL, 4, 3, 2);
  fill(&x, 3);
  pcgc_attrs a = WITH_INTS(attrs(PCGC_OP_REDUCE_MEAN), "dims", 0);
  check_row_pieces(PCGC_OP_REDUCE_MEAN, &a, 1, &x);
  a = with_int(WITH_INTS(attrs(PCGC_OP_REDUCE_MEAN), "dims", 0, 2), "keepdims", 1);
  check_row_pieces(PCGC_OP_REDUCE_MEAN, &a, 1, &x);
  a = WITH_INTS(attrs(PCGC_OP_REDUCE_SUM), "dims", 2, 0, 1);
  check_row_pieces(PCGC_OP_REDUCE_SUM, &a, 1, &x);

  pcgc_buf xent[2] = {F64(NULL, 4, 5), I32(VALS(0, 4, 2, 2), 4)};
  fill(&xent[0], 4);
  pcgc_buf xent3[2] = {F64(NULL, 4, 2, 5), mk(PCGC_I64, VALS(1, 0, 4, 3, 2, 2, 0, 1), DIMS(4, 2))};
  fill(&xent3[0], 5);
  pcgc_buf mse[2] = {F64(NULL, 4, 3), F64(NULL, 4, 3)};
  fill(&mse[0], 6);
  fill(&mse[1], 7);
  for (int red = PCGC_REDUCTION_MEAN; red <= PCGC_REDUCTION_SUM; red++) {
    a = with_int(attrs(PCGC_OP_SOFTMAX_CROSS_ENTROPY), "reduction", red);
    check_row_pieces(PCGC_OP_SOFTMAX_CROSS_ENTROPY, &a, 2, xent);
    check_row_pieces(PCGC_OP_SOFTMAX_CROSS_ENTROPY, &a, 2, xent3);
    a = with_int(attrs(PCGC_OP_MSE), "reduction", red);
    check_row_pieces(PCGC_OP_MSE, &a, 2, mse);
  }
}
END_TEST

/* reshape's shape attribute is logical: a piece checks it through its
 * descriptors. */
START_TEST(reshape_piece) {
  pcgc_attrs a = WITH_INTS(attrs(PCGC_OP_RESHAPE), "shape", 4, 2, 3);
  pcgc_buf x = F64(NULL, 2, 6), y = F64(NULL, 2, 2, 3);
  fill(&x, 8);
  pcgc_piece pin = piece_((int64_t[]){4, 6}, (int64_t[]){2, 0}, 2);
  pcgc_piece pout = piece_((int64_t[]){4, 2, 3}, (int64_t[]){2, 0, 0}, 3);
  pcgc_kernel_ctx ctx = {&pin, &pout, 0, 0, false, NULL, 0};
  forward_ok(PCGC_OP_RESHAPE, &a, 1, &x, 1, &y, &ctx);
  ck_assert(memcmp(x.data, y.data, 12 * sizeof(double)) == 0);
  pcgc_error err;
  pcgc_error_clear(&err);
  ck_assert_int_eq(pcgc_cpu_forward(PCGC_OP_RESHAPE, &a, 1, &x, 1, &y, NULL, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "reshape:") && strstr(err.message, "24 elements"), "%s", err.message);
  pout.global[0] = 2;
  pout.global[1] = 4;
  ck_assert_int_eq(pcgc_cpu_forward(PCGC_OP_RESHAPE, &a, 1, &x, 1, &y, &ctx, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "reshape:"), "%s", err.message);
}
END_TEST

/* ------------------------------------------------------------- batch norm */

/* _i: act=none, then act=relu (the fused relu) */
START_TEST(batchnorm_split_path) {
  pcgc_attrs a = with_int(attrs(PCGC_OP_BATCHNORM), "act", _i ? PCGC_ACT_RELU : PCGC_ACT_NONE);
  pcgc_buf in[3] = {F64(NULL, 4, 3, 2, 2), F64(VALS(0.5, 1.5, -2), 3), F64(VALS(0.1, 0.2, 0.3), 3)};
  fill(&in[0], 9);
  pcgc_buf y = like(&in[0], -1), dy = like(&in[0], -1);
  fill(&dy, 10);
  pcgc_buf din[3] = {like(&in[0], -1), like(&in[1], -1), like(&in[2], -1)};
  forward_ok(PCGC_OP_BATCHNORM, &a, 3, in, 1, &y, NULL);
  backward_ok(PCGC_OP_BATCHNORM, &a, 3, in, 1, &y, &dy, din, NULL);

  /* one piece holding everything gives the whole-tensor result exactly */
  double sum[3], sumsq[3], dsum[3], dxsum[3];
  pcgc_buf y1 = like(&y, -1), dx1 = like(&y, -1), ds1 = like(&in[1], -1), db1 = like(&in[2], -1);
  pcgc_cpu_batchnorm_stats(&in[0], sum, sumsq);
  pcgc_cpu_batchnorm_apply(&a, &in[0], &in[1], &in[2], sum, sumsq, 16, &y1);
  pcgc_cpu_batchnorm_bwd_stats(&a, &in[0], &in[1], &in[2], &dy, sum, sumsq, 16, dsum, dxsum);
  pcgc_cpu_batchnorm_bwd_apply(&a, &in[0], &in[1], &in[2], &dy, sum, sumsq, 16, dsum, dxsum, &dx1, &ds1, &db1);
  ck_assert(memcmp(y1.data, y.data, 48 * sizeof(double)) == 0);
  ck_assert(memcmp(dx1.data, din[0].data, 48 * sizeof(double)) == 0);
  ck_assert(memcmp(ds1.data, din[1].data, 3 * sizeof(double)) == 0);
  ck_assert(memcmp(db1.data, din[2].data, 3 * sizeof(double)) == 0);

  /* two pieces of the batch, statistics summed between the steps */
  int64_t pdims[4] = {2, 3, 2, 2};
  pcgc_buf xp[2], dyp[2], yp[2], dxp[2];
  pcgc_buf ds = like(&in[1], -1), db = like(&in[2], -1);
  double s[2][3], q[2][3], gs[3], gq[3], d1[2][3], d2[2][3], gd1[3], gd2[3];
  for (int p = 0; p < 2; p++) {
    int64_t off[4] = {2 * p, 0, 0, 0};
    xp[p] = slice(&in[0], off, pdims);
    dyp[p] = slice(&dy, off, pdims);
    yp[p] = like(&xp[p], -1);
    dxp[p] = like(&xp[p], -1);
    pcgc_cpu_batchnorm_stats(&xp[p], s[p], q[p]);
  }
  for (int c = 0; c < 3; c++) {
    gs[c] = s[0][c] + s[1][c];
    gq[c] = q[0][c] + q[1][c];
  }
  for (int p = 0; p < 2; p++) {
    pcgc_cpu_batchnorm_apply(&a, &xp[p], &in[1], &in[2], gs, gq, 16, &yp[p]);
    pcgc_cpu_batchnorm_bwd_stats(&a, &xp[p], &in[1], &in[2], &dyp[p], gs, gq, 16, d1[p], d2[p]);
  }
  for (int c = 0; c < 3; c++) {
    gd1[c] = d1[0][c] + d1[1][c];
    gd2[c] = d2[0][c] + d2[1][c];
  }
  for (int p = 0; p < 2; p++)
    pcgc_cpu_batchnorm_bwd_apply(&a, &xp[p], &in[1], &in[2], &dyp[p], gs, gq, 16, gd1, gd2, &dxp[p], &ds, &db);
  for (int p = 0; p < 2; p++)
    for (int64_t e = 0; e < 24; e++) {
      ck_assert_msg(fabs(at(&yp[p], e) - at(&y, 24 * p + e)) <= 1e-12, "y piece %d element %lld", p, (long long)e);
      ck_assert_msg(fabs(at(&dxp[p], e) - at(&din[0], 24 * p + e)) <= 1e-12, "dx piece %d element %lld", p,
                    (long long)e);
    }
  for (int c = 0; c < 3; c++) {
    ck_assert(fabs(at(&ds, c) - at(&din[1], c)) <= 1e-12);
    ck_assert(fabs(at(&db, c) - at(&din[2], c)) <= 1e-12);
  }
}
END_TEST

/* batchnorm act=relu is batchnorm, then relu: forward, and backward into x,
 * scale and bias, with and without scale and bias */
START_TEST(batchnorm_relu_fused) {
  pcgc_attrs a = attrs(PCGC_OP_BATCHNORM), af = with_int(a, "act", PCGC_ACT_RELU), ar = attrs(PCGC_OP_RELU);
  for (int n_in = 1; n_in <= 3; n_in += 2) {
    pcgc_buf in[3] = {F64(NULL, 4, 3, 2, 2), F64(VALS(0.5, 1.5, -2), 3), F64(VALS(0.1, -0.2, 0.3), 3)};
    fill(&in[0], 11);
    pcgc_buf y = like(&in[0], -1), r = like(&in[0], -1), yf = like(&in[0], -1), dy = like(&in[0], -1);
    fill(&dy, 12);
    pcgc_buf din[3] = {like(&in[0], -1), like(&in[1], -1), like(&in[2], -1)};
    pcgc_buf dinf[3] = {like(&in[0], -1), like(&in[1], -1), like(&in[2], -1)}, dr = like(&in[0], -1);
    forward_ok(PCGC_OP_BATCHNORM, &a, n_in, in, 1, &y, NULL);
    forward_ok(PCGC_OP_RELU, &ar, 1, &y, 1, &r, NULL);
    backward_ok(PCGC_OP_RELU, &ar, 1, &y, 1, &r, &dy, &dr, NULL);
    backward_ok(PCGC_OP_BATCHNORM, &a, n_in, in, 1, &y, &dr, din, NULL);
    forward_ok(PCGC_OP_BATCHNORM, &af, n_in, in, 1, &yf, NULL);
    backward_ok(PCGC_OP_BATCHNORM, &af, n_in, in, 1, &yf, &dy, dinf, NULL);
    int zeros = 0;
    for (int64_t e = 0; e < 48; e++) {
      zeros += at(&yf, e) == 0;
      ck_assert_msg(at(&yf, e) == at(&r, e), "y element %lld: %g, unfused %g", (long long)e, at(&yf, e), at(&r, e));
      ck_assert_msg(fabs(at(&dinf[0], e) - at(&din[0], e)) <= 1e-12, "dx element %lld", (long long)e);
    }
    ck_assert_msg(zeros > 8 && zeros < 40, "the relu clips %d of 48", zeros); /* both sides of 0 are tested */
    for (int c = 0; n_in == 3 && c < 3; c++) {
      ck_assert(fabs(at(&dinf[1], c) - at(&din[1], c)) <= 1e-12);
      ck_assert(fabs(at(&dinf[2], c) - at(&din[2], c)) <= 1e-12);
    }
  }
}
END_TEST

/* ----------------------------------------------------------------- errors */

/* Runs forward expecting status `want` and a message containing each of
 * the NULL-terminated strings. */
static void expect_error(pcgc_status s, pcgc_status want, const pcgc_error *err, const char *const *needles) {
  ck_assert_msg(s == want, "status %d, want %d (%s)", (int)s, (int)want, err->message);
  ck_assert_int_eq(err->status, want);
  for (; *needles; needles++)
    ck_assert_msg(strstr(err->message, *needles), "message '%s' lacks '%s'", err->message, *needles);
}
#define EXPECT_ERROR(call, want, ...)                                                                   \
  do {                                                                                                 \
    pcgc_error e_;                                                                                     \
    pcgc_error_clear(&e_);                                                                             \
    pcgc_error *err = &e_;                                                                             \
    pcgc_status s_ = (call);                                                                           \
    expect_error(s_, want, &e_, (const char *const[]){__VA_ARGS__, NULL});                            \
  } while (0)

START_TEST(errors_name_the_op) {
  pcgc_attrs a = attrs(PCGC_OP_SOFTMAX_CROSS_ENTROPY);
  pcgc_buf in[2] = {F64(NULL, 2, 3), I32(VALS(1, 7), 2)}, loss = scalar64(), one = scalar64();
  pcgc_buf din[2] = {F64(NULL, 2, 3), in[1]};
  din[1].data = NULL;
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_SOFTMAX_CROSS_ENTROPY, &a, 2, in, 1, &loss, NULL, err), PCGC_ERR_INVALID,
               "softmax_cross_entropy:", "label 7", "[0, 3)");
  EXPECT_ERROR(pcgc_cpu_backward(PCGC_OP_SOFTMAX_CROSS_ENTROPY, &a, 2, in, 1, &loss, &one, din, NULL, err),
               PCGC_ERR_INVALID, "softmax_cross_entropy:", "label 7");
  ((int32_t *)in[1].data)[1] = -1;
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_SOFTMAX_CROSS_ENTROPY, &a, 2, in, 1, &loss, NULL, err), PCGC_ERR_INVALID,
               "softmax_cross_entropy:", "label -1");
  pcgc_buf flabels[2] = {in[0], F64(NULL, 2)};
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_SOFTMAX_CROSS_ENTROPY, &a, 2, flabels, 1, &loss, NULL, err),
               PCGC_ERR_INVALID, "softmax_cross_entropy:", "labels");

  /* output of the wrong shape */
  a = attrs(PCGC_OP_ADD);
  pcgc_buf ab[2] = {F64(NULL, 2, 3), F64(NULL, 2, 3)}, bad = F64(NULL, 3, 2), good = F64(NULL, 2, 3);
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_ADD, &a, 2, ab, 1, &bad, NULL, err), PCGC_ERR_INVALID, "add:",
               "f64[3, 2]", "f64[2, 3]");
  /* inputs that do not broadcast */
  pcgc_buf nb[2] = {F64(NULL, 2, 3), F64(NULL, 4)};
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_ADD, &a, 2, nb, 1, &good, NULL, err), PCGC_ERR_INVALID, "add:",
               "broadcast");
  /* output dtype */
  pcgc_buf g32 = mk(PCGC_F32, NULL, DIMS(2, 3));
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_ADD, &a, 2, ab, 1, &g32, NULL, err), PCGC_ERR_INVALID, "add:", "f32[2, 3]");
  /* gradient buffer of the wrong shape */
  pcgc_buf dab[2] = {F64(NULL, 2, 3), F64(NULL, 3)};
  EXPECT_ERROR(pcgc_cpu_backward(PCGC_OP_ADD, &a, 2, ab, 1, &good, &good, dab, NULL, err), PCGC_ERR_INVALID,
               "add:", "gradient of input 1");
  a = attrs(PCGC_OP_MSE);
  pcgc_buf mm[2] = {F64(NULL, 3), F64(NULL, 4)};
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_MSE, &a, 2, mm, 1, &loss, NULL, err), PCGC_ERR_INVALID, "mse:",
               "same shape");

  /* f16 is a valid type the CPU kernels do not compute in; identity moves it */
  a = attrs(PCGC_OP_RELU);
  pcgc_buf h = mk(PCGC_F16, NULL, DIMS(4)), hy = like(&h, -1);
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_RELU, &a, 1, &h, 1, &hy, NULL, err), PCGC_ERR_UNSUPPORTED, "relu:", "f16");
  a = attrs(PCGC_OP_IDENTITY);
  forward_ok(PCGC_OP_IDENTITY, &a, 1, &h, 1, &hy, NULL);

  /* malformed calls fail instead of crashing */
  a = attrs(PCGC_OP_RELU);
  pcgc_buf x = F64(NULL, 4), y = F64(NULL, 4), nodata = x;
  nodata.data = NULL;
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_RELU, &a, 1, &nodata, 1, &y, NULL, err), PCGC_ERR_INVALID, "relu:",
               "no data");
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_RELU, &a, 1, &x, 1, &nodata, NULL, err), PCGC_ERR_INVALID, "relu:",
               "no data");
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_RELU, NULL, 1, &x, 1, &y, NULL, err), PCGC_ERR_INVALID, "relu:");
  pcgc_attrs other = attrs(PCGC_OP_TANH);
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_RELU, &other, 1, &x, 1, &y, NULL, err), PCGC_ERR_INVALID, "relu:", "tanh");
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_RELU, &a, 2, &x, 1, &y, NULL, err), PCGC_ERR_INVALID, "relu:");
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_RELU, &a, 1, &x, 0, NULL, NULL, err), PCGC_ERR_INVALID, "relu:");
  pcgc_buf dx = F64(NULL, 4);
  EXPECT_ERROR(pcgc_cpu_backward(PCGC_OP_RELU, &a, 1, &x, 1, &y, NULL, &dx, NULL, err), PCGC_ERR_INVALID, "relu:");
  a = attrs(PCGC_OP_SOFTMAX);
  EXPECT_ERROR(pcgc_cpu_backward(PCGC_OP_SOFTMAX, &a, 1, &x, 1, NULL, &y, &dx, NULL, err), PCGC_ERR_INVALID,
               "softmax:", "forward outputs");
  a = with_int(attrs(PCGC_OP_SOFTMAX), "axis", 3);
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_SOFTMAX, &a, 1, &x, 1, &y, NULL, err), PCGC_ERR_INVALID, "softmax:",
               "axis 3");
  a = WITH_INTS(with_int(attrs(PCGC_OP_SPLIT), "axis", 0), "sizes", 1, 3);
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_SPLIT, &a, 1, &x, 1, &y, NULL, err), PCGC_ERR_INVALID, "split:",
               "2 outputs");
  a = attrs(PCGC_OP_BATCHNORM);
  pcgc_buf bn[2] = {F64(NULL, 2, 3), F64(NULL, 3)}, bny = F64(NULL, 2, 3);
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_BATCHNORM, &a, 2, bn, 1, &bny, NULL, err), PCGC_ERR_INVALID,
               "batchnorm:", "scale and bias");
  /* the whole-tensor batch norm cannot see the rest of a split batch */
  pcgc_piece half[3] = {piece_((int64_t[]){4, 3}, (int64_t[]){2, 0}, 2), piece_((int64_t[]){3}, (int64_t[]){0}, 1),
                        piece_((int64_t[]){3}, (int64_t[]){0}, 1)};
  pcgc_kernel_ctx bctx = {half, NULL, 0, 0, false, NULL, 0};
  a = attrs(PCGC_OP_BATCHNORM);
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_BATCHNORM, &a, 1, bn, 1, &bny, &bctx, err), PCGC_ERR_INVALID,
               "batchnorm:", "pcgc_cpu_batchnorm_stats");
  pcgc_buf dbn[1] = {F64(NULL, 2, 3)};
  EXPECT_ERROR(pcgc_cpu_backward(PCGC_OP_BATCHNORM, &a, 1, bn, 1, &bny, &bny, dbn, &bctx, err), PCGC_ERR_INVALID,
               "batchnorm:", "dim 0");
  half[0] = piece_((int64_t[]){2, 6}, (int64_t[]){0, 3}, 2); /* split channels: fine */
  forward_ok(PCGC_OP_BATCHNORM, &a, 1, bn, 1, &bny, &bctx);
  /* a piece that does not fit its logical tensor */
  a = unary_attrs(PCGC_OP_DROPOUT);
  pcgc_piece bad_piece = piece_((int64_t[]){4}, (int64_t[]){2}, 1);
  pcgc_kernel_ctx ctx = {NULL, &bad_piece, 1, 1, true, NULL, 0};
  EXPECT_ERROR(pcgc_cpu_forward(PCGC_OP_DROPOUT, &a, 1, &x, 1, &y, &ctx, err), PCGC_ERR_INVALID, "dropout:",
               "piece");
  /* without an error report the status still comes back */
  a = attrs(PCGC_OP_RELU);
  ck_assert_int_eq(pcgc_cpu_forward(PCGC_OP_RELU, &a, 1, &nodata, 1, &y, NULL, NULL), PCGC_ERR_INVALID);
}
END_TEST

/* ------------------------------------------------------------------ main */

static Suite *kernels_ew_suite(void) {
  Suite *s = suite_create("kernels_ew");
  TCase *tc = tcase_create("gradcheck");
  tcase_add_checked_fixture(tc, NULL, free_all);
  tcase_add_loop_test(tc, grad_case, 0, n_cases);
  suite_add_tcase(s, tc);
  tc = tcase_create("f32_vs_f64");
  tcase_add_checked_fixture(tc, NULL, free_all);
  tcase_add_loop_test(tc, f32_agrees_case, 0, n_cases);
  suite_add_tcase(s, tc);
  tc = tcase_create("values");
  tcase_add_checked_fixture(tc, NULL, free_all);
  tcase_add_test(tc, values_unary);
  tcase_add_test(tc, values_binary);
  tcase_add_test(tc, values_movement);
  tcase_add_test(tc, values_softmax_reduce);
  tcase_add_test(tc, values_causal_mask);
  tcase_add_test(tc, values_rope);
  tcase_add_test(tc, values_norm);
  tcase_add_test(tc, values_losses);
  suite_add_tcase(s, tc);
  tc = tcase_create("pieces");
  tcase_add_checked_fixture(tc, NULL, free_all);
  tcase_add_test(tc, dropout_piece_matches_whole);
  tcase_add_test(tc, pieces_add_up);
  tcase_add_test(tc, reshape_piece);
  tcase_add_loop_test(tc, batchnorm_split_path, 0, 2);
  tcase_add_test(tc, batchnorm_relu_fused);
  suite_add_tcase(s, tc);
  tc = tcase_create("errors");
  tcase_add_checked_fixture(tc, NULL, free_all);
  tcase_add_test(tc, errors_name_the_op);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  build_cases();
  SRunner *sr = srunner_create(kernels_ew_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
