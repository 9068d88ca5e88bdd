/*
 * test_cuda_ops.c — every CUDA kernel against the CPU reference.
 *
 * For every kernel op of pcg/ops.def (class COMPUTE and LOSS) and the
 * attribute variants that take different code paths: random f32 inputs
 * (fixed seed) run through pcgc_cpu_forward and pcgc_cuda_forward; then a
 * random dout through both backwards into zeroed gradients (on the device
 * zeroed there), and every output and every input gradient is compared.
 * Then the split batch-norm entry points against pcgc_cpu_batchnorm_*, and
 * the optimizers against pcgc_cpu_optimizer_step over 3 steps.
 *
 * The error of a tensor is max |cuda - cpu| / max |cpu| (NaN or a shape
 * mismatch counts as infinite); each case has a bound by the kind of
 * arithmetic: 1e-5 where each element is a short expression or a sum in
 * double, 1e-4 where f32 GEMMs add up many products (linear, matmul, conv,
 * attention). The GEMM-class cases then run again in the reduced precisions
 * of pcgc_cuda_set_math, TF32 and BF16, against the same f32 CPU results,
 * with the bounds of `precisions` below (their labels start "tf32"/"bf16").
 * One line per case:
 *
 *     op case fwd <maxrel> bwd <maxrel> ok|FAIL
 *
 * Exit 0 when every case passes, 1 otherwise, 77 (skipped) without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"

#define SKIP 77
#define MAX_IN 11
#define MAX_OUT 8

#define TOL_EW 1e-5   /* elementwise, data movement, norms, reductions, losses */
#define TOL_GEMM 1e-4 /* linear, matmul, conv, attention */

/* Reduced precisions of GEMMs and convolutions, against the f32 CPU.
 * Rounding an operand to TF32 (10-bit mantissa) perturbs it by up to 2^-11
 * = 4.9e-4 relative (2^-10 where the hardware truncates), to bf16 (7-bit
 * mantissa) by up to 2^-8 = 3.9e-3. A product then errs by about twice
 * that, and a sum of K products with random signs by about sqrt(K) times
 * the product's error, as does the sum itself, so the error over max |ref|
 * stays near the unit roundoff, growing only where GEMMs chain (attention:
 * projections, scores, softmax, context, output; its backward five deep).
 * A model of these cases in double with the operands rounded to nearest
 * (3 seeds) gave, TF32 / bf16: one GEMM (K 65 and 144) 3e-4 / 2.6e-3;
 * attention forward 7e-4 / 5e-3, backward 1.5e-3 / 8e-3. Bounds with a
 * margin of 3 (TF32, leaving room for truncation) and 5: */
#define TOL_TF32 5e-3
#define TOL_BF16 4e-2

/* A precision of the GEMM-class cases. floor: each gradient is measured
 * against at least floor times the case's largest gradient (run_case_to):
 * a gradient that is zero in exact arithmetic (attention's key bias) is the
 * rounding noise of its terms, about the unit roundoff times the size of
 * the other gradients, so the floor grows with the roundoff: 1e-2 leaves f32
 * noise far below 1e-4; in the model above it left the key bias at 8e-3
 * (TF32) and 4.8e-2 (bf16), past the bounds, and 1e-1 leaves it below
 * 1e-3 and 8e-3. */
typedef struct precision {
  pcgc_cuda_math math;
  const char *name;
  double tol, floor;
} precision;

static const precision precisions[] = {
    {PCGC_CUDA_MATH_F32, "f32", TOL_GEMM, 1e-2},
    {PCGC_CUDA_MATH_TF32, "tf32", TOL_TF32, 1e-1},
    {PCGC_CUDA_MATH_BF16, "bf16", TOL_BF16, 1e-1},
};
static const precision *prec = &precisions[0]; /* the one under test */

#define DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

static pcgc_cuda *cu;
static int n_cases, n_failed;

/* ---------------------------------------------------------------- memory
 * What a case allocates (device memory, and host memory from the moment
 * run_case_to starts: outputs, gradients, downloads) is freed when it ends.
 * The inputs a test made before are not: a test may pass them to the next
 * case too. They are freed at exit. */

static void **host_mem;
static int n_host, cap_host, case_mark;
static void *dev_mem[256];
static int n_dev;

static void die(const char *what, const pcgc_error *err) {
  fprintf(stderr, "FAIL: %s: %s\n", what, err ? err->message : "out of memory");
  exit(EXIT_FAILURE);
}

static void *halloc(size_t bytes) {
  if (n_host == cap_host) {
    void **m = realloc(host_mem, (size_t)(cap_host = cap_host ? 2 * cap_host : 256) * sizeof *m);
    if (!m) die("host allocation", NULL);
    host_mem = m;
  }
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) die("host allocation", NULL);
  return host_mem[n_host++] = p;
}

static void free_case(void) {
  for (int i = case_mark; i < n_host; i++) free(host_mem[i]);
  for (int i = 0; i < n_dev; i++) pcgc_cuda_free(cu, dev_mem[i]);
  n_host = case_mark;
  n_dev = 0;
}

static void free_all(void) {
  case_mark = 0;
  free_case();
  free(host_mem);
}

static int64_t numel(const pcgc_buf *b) {
  int64_t n = 1;
  for (int d = 0; d < b->rank; d++) n *= b->dims[d];
  return n;
}

static size_t nbytes(const pcgc_buf *b) { return (size_t)numel(b) * pcgc_dtype_size(b->dtype); }

static bool is_f(pcgc_dtype t) { return t == PCGC_F32 || t == PCGC_F64; }

/* ----------------------------------------------------------- random data */

static uint64_t rng = 0x2545f4914f6cdd1dULL;

static uint64_t next_u64(void) { /* splitmix64 */
  uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static double uniform(double lo, double hi) { return lo + (hi - lo) * (double)(next_u64() >> 11) * 0x1.0p-53; }

static pcgc_buf hbuf(pcgc_dtype t, int rank, const int64_t *dims) {
  pcgc_buf b;
  memset(&b, 0, sizeof b);
  b.dtype = t;
  b.rank = rank;
  for (int d = 0; d < rank; d++) b.dims[d] = dims[d];
  b.data = halloc(nbytes(&b));
  return b;
}

/* f32 uniform in [lo, hi) */
static pcgc_buf frange(double lo, double hi, int rank, const int64_t *dims) {
  pcgc_buf b = hbuf(PCGC_F32, rank, dims);
  for (int64_t i = 0; i < numel(&b); i++) ((float *)b.data)[i] = (float)uniform(lo, hi);
  return b;
}

static pcgc_buf frand(int rank, const int64_t *dims) { return frange(-1, 1, rank, dims); }

/* integers uniform in [0, bound) */
static pcgc_buf irand(pcgc_dtype t, int64_t bound, int rank, const int64_t *dims) {
  pcgc_buf b = hbuf(t, rank, dims);
  for (int64_t i = 0; i < numel(&b); i++) {
    int64_t v = (int64_t)(next_u64() % (uint64_t)bound);
    if (t == PCGC_I32) ((int32_t *)b.data)[i] = (int32_t)v;
    else ((int64_t *)b.data)[i] = v;
  }
  return b;
}

/* ---------------------------------------------------------------- device */

static void *dalloc(size_t bytes) {
  pcgc_error err;
  pcgc_error_clear(&err);
  void *p = pcgc_cuda_alloc(cu, bytes ? bytes : 1, &err);
  if (!p || n_dev == 256) die("pcgc_cuda_alloc", &err);
  return dev_mem[n_dev++] = p;
}

/* A device copy of h (h.data NULL: a buffer without data). */
static pcgc_buf to_dev(const pcgc_buf *h) {
  pcgc_buf d = *h;
  if (!h->data) return d;
  pcgc_error err;
  pcgc_error_clear(&err);
  d.data = dalloc(nbytes(h));
  if (pcgc_cuda_upload(cu, d.data, h->data, nbytes(h), &err) != PCGC_OK) die("pcgc_cuda_upload", &err);
  return d;
}

/* A zeroed device buffer shaped like h. */
static pcgc_buf dev_zero(const pcgc_buf *h) {
  pcgc_buf d = *h;
  pcgc_error err;
  pcgc_error_clear(&err);
  d.data = dalloc(nbytes(h));
  if (pcgc_cuda_zero(cu, d.data, nbytes(h), &err) != PCGC_OK) die("pcgc_cuda_zero", &err);
  return d;
}

/* A host copy of device buffer d. */
static pcgc_buf to_host(const pcgc_buf *d) {
  pcgc_buf h = *d;
  pcgc_error err;
  pcgc_error_clear(&err);
  h.data = halloc(nbytes(d));
  if (pcgc_cuda_download(cu, h.data, d->data, nbytes(d), &err) != PCGC_OK) die("pcgc_cuda_download", &err);
  return h;
}

/* ------------------------------------------------------------ comparison */

static double get(const pcgc_buf *b, int64_t i) {
  switch (b->dtype) {
  case PCGC_F32: return ((const float *)b->data)[i];
  case PCGC_I32: return ((const int32_t *)b->data)[i]; /* moe_route's slots */
  case PCGC_I64: return (double)((const int64_t *)b->data)[i];
  default: return ((const double *)b->data)[i];
  }
}

/* max |got - want| / max(max |want|, floor) over the finite values; INFINITY on
 * NaN or an infinity in one and not the other, or differing shapes */
static double maxrel_floor(const pcgc_buf *want, const pcgc_buf *got, double floor) {
  if (want->dtype != got->dtype || numel(want) != numel(got)) return INFINITY;
  double scale = floor, diff = 0;
  for (int64_t i = 0; i < numel(want); i++) {
    double w = get(want, i), g = get(got, i);
    if (isnan(w) != isnan(g)) return INFINITY;
    if (isnan(w)) continue;
    if (isinf(w) || isinf(g)) { /* causal_mask's -inf: equal or wrong */
      if (w != g) return INFINITY;
      continue;
    }
    scale = fmax(scale, fabs(w));
    diff = fmax(diff, fabs(g - w));
  }
  return diff == 0 ? 0 : scale > 0 ? diff / scale : INFINITY;
}

static double maxrel(const pcgc_buf *want, const pcgc_buf *got) { return maxrel_floor(want, got, 0); }

static double maxabs(const pcgc_buf *b) {
  double m = 0;
  for (int64_t i = 0; i < numel(b); i++)
    if (!isnan(get(b, i))) m = fmax(m, fabs(get(b, i)));
  return m;
}

/* One line per case; NaN: not measured ("-"). */
static void report(const char *op, const char *what, double fwd, double bwd, double tol, const char *note) {
  bool ok = !note && (isnan(fwd) || fwd <= tol) && (isnan(bwd) || bwd <= tol);
  char f[32], b[32];
  snprintf(f, sizeof f, isnan(fwd) ? "-" : "%.2e", fwd);
  snprintf(b, sizeof b, isnan(bwd) ? "-" : "%.2e", bwd);
  printf("%-22s %-48s fwd %-8s bwd %-8s %s%s%s\n", op, what, f, b, ok ? "ok" : "FAIL", note ? ": " : "",
         note ? note : "");
  n_cases++;
  if (!ok) n_failed++;
}

/* ------------------------------------------------------------- one case */

/* Forward and backward of op k on host inputs `in` into outputs of types
 * tout, CPU against CUDA. */
static void run_case_to(pcgc_op_kind k, const pcgc_attrs *a, const char *what, int n_in, const pcgc_buf *in,
                        const pcgc_kernel_ctx *ctx, double tol, int n_out, const pcgc_ptensor *tout) {
  case_mark = n_host; /* the inputs stay for the next case */
  const char *op = pcgc_op_name(k);
  char note[1200], label[160];
  if (prec->math != PCGC_CUDA_MATH_F32) { /* the reduced-precision runs say so */
    snprintf(label, sizeof label, "%s %s", prec->name, what);
    what = label;
  }
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_buf out[MAX_OUT], dout[MAX_OUT], din[MAX_IN];
  pcgc_buf d_in[MAX_IN], d_out[MAX_OUT], d_dout[MAX_OUT], d_din[MAX_IN];
  for (int j = 0; j < n_out; j++) {
    out[j] = hbuf(tout[j].dtype, tout[j].rank, tout[j].dims);
    d_out[j] = dev_zero(&out[j]);
    /* an integer output (moe_route's slots) takes no gradient: zeros */
    dout[j] = is_f(tout[j].dtype) ? frand(out[j].rank, out[j].dims) : hbuf(tout[j].dtype, out[j].rank, out[j].dims);
    d_dout[j] = to_dev(&dout[j]);
  }
  for (int i = 0; i < n_in; i++) {
    d_in[i] = to_dev(&in[i]);
    din[i] = in[i];
    din[i].data = NULL; /* integer inputs get no gradient */
    d_din[i] = din[i];
    if (is_f(in[i].dtype)) {
      din[i] = hbuf(in[i].dtype, in[i].rank, in[i].dims);
      d_din[i] = dev_zero(&din[i]);
    }
  }

  double fwd = 0, bwd = 0;
  const char *stage = "cpu forward";
  if (pcgc_cpu_forward(k, a, n_in, in, n_out, out, ctx, &err) != PCGC_OK) goto fail;
  stage = "cuda forward";
  if (pcgc_cuda_forward(cu, k, a, n_in, d_in, n_out, d_out, ctx, &err) != PCGC_OK) goto fail;
  for (int j = 0; j < n_out; j++) {
    pcgc_buf got = to_host(&d_out[j]);
    fwd = fmax(fwd, maxrel(&out[j], &got));
  }
  /* each backend's backward reads its own forward outputs; in TF32 and BF16
   * the GPU's backward reads the CPU's, since a rounded output can cross an
   * activation's kink (relu's sign) and change the mask, which no tolerance
   * on the arithmetic describes */
  for (int j = 0; j < n_out && prec->math != PCGC_CUDA_MATH_F32; j++)
    if (pcgc_cuda_upload(cu, d_out[j].data, out[j].data,
                         (size_t)numel(&out[j]) * pcgc_dtype_size(out[j].dtype), &err) != PCGC_OK)
      goto fail;
  stage = "cpu backward";
  if (pcgc_cpu_backward(k, a, n_in, in, n_out, out, dout, din, ctx, &err) != PCGC_OK) goto fail;
  stage = "cuda backward";
  if (pcgc_cuda_backward(cu, k, a, n_in, d_in, n_out, d_out, d_dout, d_din, ctx, &err) != PCGC_OK) goto fail;
  /* A gradient that is zero in exact arithmetic (attention's key bias: softmax
   * ignores a constant added to a row) is rounding noise on both backends:
   * every gradient is measured against at least prec->floor (1e-2 in f32)
   * of the case's largest. */
  double largest = 0;
  for (int i = 0; i < n_in; i++)
    if (din[i].data) largest = fmax(largest, maxabs(&din[i]));
  for (int i = 0; i < n_in; i++) {
    if (!din[i].data) continue;
    pcgc_buf got = to_host(&d_din[i]);
    double r = maxrel_floor(&din[i], &got, prec->floor * largest);
    if (r > tol && bwd <= tol) fprintf(stderr, "  %s %s: gradient of input %d off by %.3g\n", op, what, i, r);
    bwd = fmax(bwd, r);
  }
  report(op, what, fwd, bwd, tol, NULL);
  free_case();
  return;

fail:
  snprintf(note, sizeof note, "%s: %s", stage, err.message);
  report(op, what, fwd, INFINITY, tol, note);
  free_case();
}

/* run_case_to with the output types inference gives for the inputs' own
 * (local) shapes */
static void run_case(pcgc_op_kind k, const pcgc_attrs *a, const char *what, int n_in, const pcgc_buf *in,
                     const pcgc_kernel_ctx *ctx, double tol) {
  case_mark = n_host; /* the inputs stay for the next case */
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_ptensor tin[MAX_IN], tout[MAX_OUT];
  for (int i = 0; i < n_in; i++) pcgc_ptensor_init(&tin[i], in[i].dtype, in[i].rank, in[i].dims);
  int n_out = pcgc_op_num_outputs(k, a);
  if (n_out > MAX_OUT || pcgc_op_infer(k, a, n_in, tin, tout, &err) != PCGC_OK) {
    char note[1200];
    snprintf(note, sizeof note, "test setup: inference: %s", err.message);
    report(pcgc_op_name(k), what, INFINITY, INFINITY, tol, note);
    free_case();
    return;
  }
  run_case_to(k, a, what, n_in, in, ctx, tol, n_out, tout);
}

/* ------------------------------------------------------------ attributes */

static pcgc_attrs attrs(pcgc_op_kind k) {
  pcgc_attrs a;
  pcgc_attrs_init(&a, k);
  return a;
}

static void must(pcgc_status s, const pcgc_attrs *a, const char *name) {
  if (s == PCGC_OK) return;
  fprintf(stderr, "FAIL: test setup: cannot set attribute %s of %s\n", name, pcgc_op_name(a->kind));
  exit(EXIT_FAILURE);
}
static void seti(pcgc_attrs *a, const char *name, int64_t v) { must(pcgc_attrs_set_int(a, name, v), a, name); }
static void setf(pcgc_attrs *a, const char *name, double v) { must(pcgc_attrs_set_float(a, name, v), a, name); }
static void setn(pcgc_attrs *a, const char *name, int n, const int64_t *v) {
  must(pcgc_attrs_set_ints(a, name, n, v), a, name);
}

static pcgc_piece whole_piece(const pcgc_buf *b) {
  pcgc_piece p;
  memset(&p, 0, sizeof p);
  for (int d = 0; d < b->rank; d++) p.global[d] = b->dims[d];
  return p;
}

/* ----------------------------------------------------------- dense ops */

static const char *act_names[] = {"none", "relu", "gelu", "sigmoid", "tanh"};

static void test_linear(void) {
  for (int act = PCGC_ACT_NONE; act <= PCGC_ACT_TANH; act++)
    for (int bias = 0; bias < 2; bias++) {
      if (!bias && act != PCGC_ACT_NONE && act != PCGC_ACT_RELU) continue;
      pcgc_attrs a = attrs(PCGC_OP_LINEAR);
      seti(&a, "act", act);
      pcgc_buf in[3] = {frand(DIMS(3, 5, 16)), frand(DIMS(16, 24)), frand(DIMS(24))};
      char what[64];
      snprintf(what, sizeof what, "x[3,5,16] w[16,24]%s act=%s", bias ? " b" : "", act_names[act]);
      run_case(PCGC_OP_LINEAR, &a, what, bias ? 3 : 2, in, NULL, prec->tol);
    }
  pcgc_attrs a = attrs(PCGC_OP_LINEAR);
  pcgc_buf in[3] = {frand(DIMS(37, 65)), frand(DIMS(65, 33)), frand(DIMS(33))};
  run_case(PCGC_OP_LINEAR, &a, "x[37,65] w[65,33] b (odd sizes)", 3, in, NULL, prec->tol);
}

static void test_matmul(void) {
  pcgc_attrs a = attrs(PCGC_OP_MATMUL);
  pcgc_buf in[2] = {frand(DIMS(4, 6, 10)), frand(DIMS(10, 7))};
  run_case(PCGC_OP_MATMUL, &a, "a[4,6,10] b[10,7]", 2, in, NULL, prec->tol);
  pcgc_buf in2[2] = {frand(DIMS(5, 12)), frand(DIMS(12, 9))};
  run_case(PCGC_OP_MATMUL, &a, "a[5,12] b[12,9]", 2, in2, NULL, prec->tol);

  for (int tb = 0; tb < 2; tb++) {
    a = attrs(PCGC_OP_BATCH_MATMUL);
    seti(&a, "transpose_b", tb);
    pcgc_buf b4[2] = {frand(DIMS(2, 3, 5, 7)), tb ? frand(DIMS(2, 3, 6, 7)) : frand(DIMS(2, 3, 7, 6))};
    run_case(PCGC_OP_BATCH_MATMUL, &a, tb ? "a[2,3,5,7] b[2,3,6,7] transpose_b" : "a[2,3,5,7] b[2,3,7,6]", 2, b4,
             NULL, prec->tol);
    pcgc_buf b3[2] = {frand(DIMS(4, 9, 16)), tb ? frand(DIMS(4, 11, 16)) : frand(DIMS(4, 16, 11))};
    run_case(PCGC_OP_BATCH_MATMUL, &a, tb ? "a[4,9,16] b[4,11,16] transpose_b" : "a[4,9,16] b[4,16,11]", 2, b3,
             NULL, prec->tol);
    pcgc_buf b2[2] = {frand(DIMS(6, 5)), tb ? frand(DIMS(3, 5)) : frand(DIMS(5, 3))};
    run_case(PCGC_OP_BATCH_MATMUL, &a, tb ? "a[6,5] b[3,5] transpose_b" : "a[6,5] b[5,3]", 2, b2, NULL, prec->tol);
  }
}

typedef struct conv_case {
  int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, groups;
  bool bias;
  int act;
  const char *what;
} conv_case;

static const conv_case conv_cases[] = {
    {2, 3, 8, 8, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1, false, PCGC_ACT_NONE, "3x3"},
    {2, 3, 9, 9, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, true, PCGC_ACT_NONE, "stride 2 pad 1 bias"},
    {2, 3, 6, 6, 4, 3, 3, 2, 2, 0, 0, 1, 1, 1, false, PCGC_ACT_GELU, "stride 2 gelu"},
    {1, 4, 10, 10, 4, 3, 3, 1, 1, 2, 2, 2, 2, 1, true, PCGC_ACT_RELU, "dilation 2 pad 2 bias relu"},
    {2, 4, 7, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, true, PCGC_ACT_SIGMOID, "groups 2 pad 1 bias sigmoid"},
    {2, 4, 6, 6, 4, 3, 3, 2, 1, 1, 1, 1, 1, 4, false, PCGC_ACT_TANH, "depthwise stride (2,1) tanh"},
    {1, 4, 5, 5, 8, 3, 3, 1, 1, 0, 0, 1, 1, 4, true, PCGC_ACT_NONE, "depthwise multiplier 2 bias"},
    {2, 8, 4, 4, 5, 1, 1, 1, 1, 0, 0, 1, 1, 1, true, PCGC_ACT_RELU, "pointwise bias relu"},
    {1, 2, 6, 7, 3, 2, 3, 1, 2, 1, 0, 2, 1, 1, true, PCGC_ACT_TANH, "2x3 kernel, mixed stride/pad/dilation"},
    {2, 16, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, true, PCGC_ACT_RELU, "16->32 channels 12x12 pad 1 bias relu"},
};

static void test_conv2d(void) {
  for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
    const conv_case *c = &conv_cases[i];
    pcgc_attrs a = attrs(PCGC_OP_CONV2D);
    setn(&a, "stride", DIMS(c->sh, c->sw));
    setn(&a, "padding", DIMS(c->ph, c->pw));
    setn(&a, "dilation", DIMS(c->dh, c->dw));
    seti(&a, "groups", c->groups);
    seti(&a, "act", c->act);
    pcgc_buf in[3] = {frand(DIMS(c->N, c->C, c->H, c->W)), frand(DIMS(c->O, c->C / c->groups, c->KH, c->KW)),
                      frand(DIMS(c->O))};
    run_case(PCGC_OP_CONV2D, &a, c->what, c->bias ? 3 : 2, in, NULL, prec->tol);
  }
}

static void test_pool2d(void) {
  static const struct {
    int kind;
    int64_t k, s, p;
    bool global;
    int64_t H;
    const char *what;
  } cases[] = {
      {PCGC_POOL_MAX, 2, 2, 0, false, 8, "max k2 s2"},
      {PCGC_POOL_MAX, 3, 2, 1, false, 9, "max k3 s2 p1"},
      {PCGC_POOL_MAX, 3, 1, 1, false, 6, "max k3 s1 p1"},
      {PCGC_POOL_AVG, 2, 2, 0, false, 8, "avg k2 s2"},
      {PCGC_POOL_AVG, 3, 1, 1, false, 7, "avg k3 s1 p1 (padding counted)"},
      {PCGC_POOL_AVG, 3, 2, 1, false, 9, "avg k3 s2 p1"},
      {PCGC_POOL_AVG, 1, 1, 0, true, 7, "global avg"},
      {PCGC_POOL_MAX, 1, 1, 0, true, 7, "global max"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pcgc_attrs a = attrs(PCGC_OP_POOL2D);
    seti(&a, "kind", cases[i].kind);
    seti(&a, "kernel", cases[i].k);
    seti(&a, "stride", cases[i].s);
    seti(&a, "padding", cases[i].p);
    seti(&a, "global", cases[i].global);
    pcgc_buf x = frand(DIMS(2, 3, cases[i].H, cases[i].H + 1));
    run_case(PCGC_OP_POOL2D, &a, cases[i].what, 1, &x, NULL, TOL_EW);
  }
}

/* ------------------------------------------------------- normalisation */

static void test_batchnorm(void) {
  pcgc_attrs a = attrs(PCGC_OP_BATCHNORM);
  pcgc_buf in[3] = {frange(-2, 3, DIMS(4, 3, 5, 5)), frange(0.5, 1.5, DIMS(3)), frand(DIMS(3))};
  run_case(PCGC_OP_BATCHNORM, &a, "x[4,3,5,5] scale bias", 3, in, NULL, TOL_EW);
  pcgc_buf x2 = frange(-1, 2, DIMS(8, 6));
  run_case(PCGC_OP_BATCHNORM, &a, "x[8,6] (rank 2) no scale/bias", 1, &x2, NULL, TOL_EW);
  pcgc_buf in3[3] = {frand(DIMS(2, 5, 3, 4, 2)), frand(DIMS(5)), frand(DIMS(5))};
  run_case(PCGC_OP_BATCHNORM, &a, "x[2,5,3,4,2] (rank 5) scale bias", 3, in3, NULL, TOL_EW);
  pcgc_buf in4[3] = {frand(DIMS(16, 7, 33, 31)), frand(DIMS(7)), frand(DIMS(7))};
  run_case(PCGC_OP_BATCHNORM, &a, "x[16,7,33,31] scale bias (many blocks)", 3, in4, NULL, TOL_EW);
  setf(&a, "eps", 1e-3);
  pcgc_buf in5[3] = {frange(-0.01, 0.01, DIMS(3, 4, 6)), frand(DIMS(4)), frand(DIMS(4))};
  run_case(PCGC_OP_BATCHNORM, &a, "x[3,4,6] small values eps=1e-3", 3, in5, NULL, TOL_EW);
  /* a piece that holds channels 2..4 of 6: the statistics are still whole */
  a = attrs(PCGC_OP_BATCHNORM);
  pcgc_buf in6[3] = {frand(DIMS(4, 3, 5)), frand(DIMS(3)), frand(DIMS(3))};
  pcgc_piece p[3] = {whole_piece(&in6[0]), whole_piece(&in6[1]), whole_piece(&in6[2])};
  p[0].global[1] = 6, p[0].offset[1] = 2;
  p[1].global[0] = p[2].global[0] = 6, p[1].offset[0] = p[2].offset[0] = 2;
  pcgc_kernel_ctx ctx = {p, NULL, 0, 0, false, NULL, 0};
  run_case(PCGC_OP_BATCHNORM, &a, "channel piece [4,3/6,5]", 3, in6, &ctx, TOL_EW);
  /* act=relu: bn(x) takes both signs (a centred x; random bias, or none),
   * so the mask of the backward cuts every channel */
  seti(&a, "act", PCGC_ACT_RELU);
  run_case(PCGC_OP_BATCHNORM, &a, "act=relu x[4,3,5,5] scale bias", 3, in, NULL, TOL_EW);
  run_case(PCGC_OP_BATCHNORM, &a, "act=relu x[8,6] no scale/bias", 1, &x2, NULL, TOL_EW);
  run_case(PCGC_OP_BATCHNORM, &a, "act=relu x[16,7,33,31] scale bias (many blocks)", 3, in4, NULL, TOL_EW);
}

static void test_layernorm(void) {
  pcgc_attrs a = attrs(PCGC_OP_LAYERNORM);
  pcgc_buf in[3] = {frange(-1, 2, DIMS(4, 7, 16)), frange(0.5, 1.5, DIMS(16)), frand(DIMS(16))};
  run_case(PCGC_OP_LAYERNORM, &a, "x[4,7,16] axes=1 scale bias", 3, in, NULL, TOL_EW);
  pcgc_buf x2 = frand(DIMS(6, 33));
  run_case(PCGC_OP_LAYERNORM, &a, "x[6,33] axes=1 no scale/bias", 1, &x2, NULL, TOL_EW);
  pcgc_buf in3[3] = {frand(DIMS(2, 300)), frand(DIMS(300)), frand(DIMS(300))};
  run_case(PCGC_OP_LAYERNORM, &a, "x[2,300] rows longer than a block", 3, in3, NULL, TOL_EW);
  pcgc_buf in4[3] = {frand(DIMS(300, 24)), frand(DIMS(24)), frand(DIMS(24))};
  run_case(PCGC_OP_LAYERNORM, &a, "x[300,24] many rows", 3, in4, NULL, TOL_EW);
  seti(&a, "axes", 2);
  setf(&a, "eps", 1e-3);
  pcgc_buf in5[3] = {frand(DIMS(3, 5, 6)), frand(DIMS(5, 6)), frand(DIMS(5, 6))};
  run_case(PCGC_OP_LAYERNORM, &a, "x[3,5,6] axes=2 eps=1e-3 scale bias", 3, in5, NULL, TOL_EW);
  seti(&a, "axes", 3);
  pcgc_buf x6 = frand(DIMS(2, 3, 4));
  run_case(PCGC_OP_LAYERNORM, &a, "x[2,3,4] axes=3 (one row)", 1, &x6, NULL, TOL_EW);
}

static void test_rmsnorm(void) {
  pcgc_attrs a = attrs(PCGC_OP_RMSNORM);
  pcgc_buf in[2] = {frange(-1, 2, DIMS(4, 7, 16)), frange(0.5, 1.5, DIMS(16))};
  run_case(PCGC_OP_RMSNORM, &a, "x[4,7,16] axes=1 scale", 2, in, NULL, TOL_EW);
  pcgc_buf x2 = frand(DIMS(6, 33));
  run_case(PCGC_OP_RMSNORM, &a, "x[6,33] axes=1 no scale", 1, &x2, NULL, TOL_EW);
  pcgc_buf in3[2] = {frand(DIMS(2, 300)), frand(DIMS(300))};
  run_case(PCGC_OP_RMSNORM, &a, "x[2,300] rows longer than a block", 2, in3, NULL, TOL_EW);
  pcgc_buf in4[2] = {frand(DIMS(300, 24)), frand(DIMS(24))};
  run_case(PCGC_OP_RMSNORM, &a, "x[300,24] many rows", 2, in4, NULL, TOL_EW);
  seti(&a, "axes", 2);
  setf(&a, "eps", 1e-3);
  pcgc_buf in5[2] = {frand(DIMS(3, 5, 6)), frand(DIMS(5, 6))};
  run_case(PCGC_OP_RMSNORM, &a, "x[3,5,6] axes=2 eps=1e-3 scale", 2, in5, NULL, TOL_EW);
}

/* ------------------------------------------------------ mixture of experts */

/* the slots of tests/golden/moe.pcg's routing: 2 groups of 5 tokens, 2
 * choices each, 4 experts of 3 slots, one choice dropped */
static pcgc_buf moe_slots(void) {
  static const int32_t v[] = {0, 6, 3, 1, 4, 11, 9, 5, 10, 7, 0, 4, 6, -1, 1, 7, 3, 8, 2, 9};
  pcgc_buf b = hbuf(PCGC_I32, DIMS(2, 5, 2));
  memcpy(b.data, v, sizeof v);
  return b;
}

static void test_moe(void) {
  pcgc_attrs r = attrs(PCGC_OP_MOE_ROUTE);
  seti(&r, "capacity", 3);
  setf(&r, "aux", 0.1);
  pcgc_buf l = frand(DIMS(2, 5, 4));
  run_case(PCGC_OP_MOE_ROUTE, &r, "logits[2,5,4] k=2 capacity=3 aux=0.1", 1, &l, NULL, TOL_EW);
  seti(&r, "k", 3);
  seti(&r, "capacity", 40);
  pcgc_buf l2 = frand(DIMS(3, 64, 8));
  run_case(PCGC_OP_MOE_ROUTE, &r, "logits[3,64,8] k=3 capacity=40", 1, &l2, NULL, TOL_EW);
  pcgc_attrs d = attrs(PCGC_OP_MOE_DISPATCH);
  seti(&d, "experts", 4);
  seti(&d, "capacity", 3);
  pcgc_buf din_[2] = {frand(DIMS(2, 5, 6)), moe_slots()};
  run_case(PCGC_OP_MOE_DISPATCH, &d, "x[2,5,6] into [2,4,3,6]", 2, din_, NULL, TOL_EW);
  pcgc_attrs x = attrs(PCGC_OP_EXPERT_LINEAR);
  pcgc_buf xin[3] = {frand(DIMS(2, 4, 3, 8)), frand(DIMS(4, 8, 6)), frand(DIMS(4, 6))};
  run_case(PCGC_OP_EXPERT_LINEAR, &x, "x[2,4,3,8] w[4,8,6]", 2, xin, NULL, TOL_GEMM);
  seti(&x, "act", PCGC_ACT_GELU);
  run_case(PCGC_OP_EXPERT_LINEAR, &x, "x[2,4,3,8] w[4,8,6] b[4,6] gelu", 3, xin, NULL, TOL_GEMM);
  pcgc_attrs c = attrs(PCGC_OP_MOE_COMBINE);
  pcgc_buf cin[3] = {frand(DIMS(2, 4, 3, 6)), frand(DIMS(2, 5, 2)), moe_slots()};
  run_case(PCGC_OP_MOE_COMBINE, &c, "y[2,4,3,6] gate[2,5,2]", 3, cin, NULL, TOL_EW);
}

/* ------------------------------------------------------------ embedding */

static const char *bag_names[] = {"none", "sum", "mean"};

static void test_embedding(void) {
  for (int bag = PCGC_BAG_NONE; bag <= PCGC_BAG_MEAN; bag++) {
    pcgc_attrs a = attrs(PCGC_OP_EMBEDDING);
    seti(&a, "bag", bag);
    char what[80];
    pcgc_buf r1[2] = {irand(PCGC_I32, 11, DIMS(7, 5)), frand(DIMS(11, 6))};
    snprintf(what, sizeof what, "bag=%s i32 ids[7,5] table[11,6]", bag_names[bag]);
    run_case(PCGC_OP_EMBEDDING, &a, what, 2, r1, NULL, TOL_EW);
    pcgc_buf r2[2] = {irand(PCGC_I64, 9, DIMS(2, 3, 4)), frand(DIMS(9, 5))};
    snprintf(what, sizeof what, "bag=%s i64 ids[2,3,4] table[9,5]", bag_names[bag]);
    run_case(PCGC_OP_EMBEDDING, &a, what, 2, r2, NULL, TOL_EW);
    /* a table piece: rows 3..6 of a 10-row table, ids over all 10 */
    pcgc_buf r3[2] = {irand(PCGC_I64, 10, DIMS(3, 4)), frand(DIMS(4, 3))};
    pcgc_piece p[2] = {whole_piece(&r3[0]), whole_piece(&r3[1])};
    p[1].global[0] = 10, p[1].offset[0] = 3;
    pcgc_kernel_ctx ctx = {p, NULL, 0, 0, false, NULL, 0};
    snprintf(what, sizeof what, "bag=%s i64 ids[3,4] table rows 3..6 of 10", bag_names[bag]);
    run_case(PCGC_OP_EMBEDDING, &a, what, 2, r3, &ctx, TOL_EW);
    pcgc_buf r4[2] = {irand(PCGC_I32, 10, DIMS(5, 2)), frand(DIMS(5, 4))};
    pcgc_piece q[2] = {whole_piece(&r4[0]), whole_piece(&r4[1])};
    q[1].global[0] = 10, q[1].offset[0] = 5;
    pcgc_kernel_ctx ctx2 = {q, NULL, 0, 0, false, NULL, 0};
    snprintf(what, sizeof what, "bag=%s i32 ids[5,2] table rows 5..9 of 10", bag_names[bag]);
    run_case(PCGC_OP_EMBEDDING, &a, what, 2, r4, &ctx2, TOL_EW);
  }
}

/* ---------------------------------------------------------- elementwise */

static void test_unary(void) {
  static const struct {
    pcgc_op_kind k;
    const char *attr;
    double v;
    const char *what;
  } cases[] = {
      {PCGC_OP_RELU, NULL, 0, "x[4,5,6]"},
      {PCGC_OP_GELU, NULL, 0, "erf form"},
      {PCGC_OP_GELU, "approximate", 1, "tanh form"},
      {PCGC_OP_SIGMOID, NULL, 0, "x[4,5,6]"},
      {PCGC_OP_SILU, NULL, 0, "x[4,5,6]"},
      {PCGC_OP_RELU6, NULL, 0, "x[4,5,6]"},
      {PCGC_OP_HARDSIGMOID, NULL, 0, "x[4,5,6]"},
      {PCGC_OP_HARDSWISH, NULL, 0, "x[4,5,6]"},
      {PCGC_OP_LEAKY_RELU, "alpha", 0.2, "alpha=0.2"},
      {PCGC_OP_TANH, NULL, 0, "x[4,5,6]"},
      {PCGC_OP_EXP, NULL, 0, "x[4,5,6]"},
      {PCGC_OP_IDENTITY, NULL, 0, "x[4,5,6]"},
      {PCGC_OP_SCALAR_ADD, "scalar", 1.5, "scalar=1.5"},
      {PCGC_OP_SCALAR_SUB, "scalar", -0.75, "scalar=-0.75"},
      {PCGC_OP_SCALAR_MUL, "scalar", -2.5, "scalar=-2.5"},
      {PCGC_OP_SCALAR_DIV, "scalar", 3, "scalar=3"},
      {PCGC_OP_DROPOUT, "rate", 0.3, "rate=0.3 not training (identity)"},
      {PCGC_OP_POW, "exponent", 3, "exponent=3"},
      {PCGC_OP_POW, "exponent", 2, "exponent=2"},
      {PCGC_OP_CLIP, "min", -1.25, "min=-1.25 (no max)"},
      {PCGC_OP_CLIP, "max", 0.5, "max=0.5 (no min)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pcgc_attrs a = attrs(cases[i].k);
    if (cases[i].attr && strcmp(cases[i].attr, "approximate") == 0) seti(&a, "approximate", 1);
    else if (cases[i].attr) setf(&a, cases[i].attr, cases[i].v);
    pcgc_buf x = frange(-3, 3, DIMS(4, 5, 6));
    run_case(cases[i].k, &a, cases[i].what, 1, &x, NULL, TOL_EW);
  }
  /* pow's fractional exponents on positive inputs; clip with both bounds */
  static const double exps[] = {0.5, -0.5, -1, 1.7};
  for (size_t i = 0; i < sizeof exps / sizeof exps[0]; i++) {
    pcgc_attrs p = attrs(PCGC_OP_POW);
    setf(&p, "exponent", exps[i]);
    char what[48];
    snprintf(what, sizeof what, "exponent=%g x in [0.5, 3]", exps[i]);
    pcgc_buf xp = frange(0.5, 3, DIMS(4, 5, 6));
    run_case(PCGC_OP_POW, &p, what, 1, &xp, NULL, TOL_EW);
  }
  pcgc_attrs c = attrs(PCGC_OP_CLIP);
  setf(&c, "min", -1), setf(&c, "max", 2);
  pcgc_buf xc = frange(-3, 3, DIMS(4, 5, 6));
  run_case(PCGC_OP_CLIP, &c, "min=-1 max=2", 1, &xc, NULL, TOL_EW);
  pcgc_attrs mk_ = attrs(PCGC_OP_CAUSAL_MASK);
  pcgc_buf xm = frand(DIMS(2, 3, 5, 7));
  run_case(PCGC_OP_CAUSAL_MASK, &mk_, "[2,3,5,7] offset 0", 1, &xm, NULL, TOL_EW);
  seti(&mk_, "offset", 2);
  run_case(PCGC_OP_CAUSAL_MASK, &mk_, "[2,3,5,7] offset 2", 1, &xm, NULL, TOL_EW);
  pcgc_attrs ro = attrs(PCGC_OP_ROPE);
  pcgc_buf xr = frand(DIMS(2, 3, 5, 8));
  run_case(PCGC_OP_ROPE, &ro, "[2,3,5,8] theta 10000", 1, &xr, NULL, TOL_EW);

  pcgc_attrs a = attrs(PCGC_OP_RELU);
  pcgc_buf big = frand(DIMS(1000003));
  run_case(PCGC_OP_RELU, &a, "x[1000003] (grid-stride)", 1, &big, NULL, TOL_EW);

  /* dropout while training: the mask is drawn from logical indices */
  a = attrs(PCGC_OP_DROPOUT);
  setf(&a, "rate", 0.3);
  pcgc_kernel_ctx train = {NULL, NULL, 7, 42, true, NULL, 0};
  pcgc_buf x = frand(DIMS(8, 10));
  run_case(PCGC_OP_DROPOUT, &a, "rate=0.3 training x[8,10]", 1, &x, &train, TOL_EW);
  pcgc_buf xp = frand(DIMS(3, 4));
  pcgc_piece p = whole_piece(&xp);
  p.global[0] = 8, p.global[1] = 10, p.offset[0] = 4, p.offset[1] = 5;
  pcgc_kernel_ctx piece = {&p, &p, 7, 42, true, NULL, 0};
  run_case(PCGC_OP_DROPOUT, &a, "rate=0.3 training piece [3,4] at (4,5) of [8,10]", 1, &xp, &piece, TOL_EW);
  setf(&a, "rate", 0.0);
  pcgc_buf x0 = frand(DIMS(5, 7));
  run_case(PCGC_OP_DROPOUT, &a, "rate=0 training", 1, &x0, &train, TOL_EW);
}

static void test_binary(void) {
  static const pcgc_op_kind ops[] = {PCGC_OP_ADD, PCGC_OP_SUB, PCGC_OP_MUL, PCGC_OP_DIV};
  for (int o = 0; o < 4; o++) {
    pcgc_attrs a = attrs(ops[o]);
    bool div = ops[o] == PCGC_OP_DIV;
    /* divisors away from zero */
    double lo = div ? 0.5 : -1, hi = div ? 2 : 1;
    pcgc_buf s[2] = {frand(DIMS(4, 5, 6)), frange(lo, hi, DIMS(4, 5, 6))};
    run_case(ops[o], &a, "[4,5,6] and [4,5,6]", 2, s, NULL, TOL_EW);
    pcgc_buf b1[2] = {frand(DIMS(4, 1, 6)), frange(lo, hi, DIMS(5, 1))};
    run_case(ops[o], &a, "[4,1,6] and [5,1] -> [4,5,6]", 2, b1, NULL, TOL_EW);
    pcgc_buf b2[2] = {frand(DIMS(3, 4)), frange(lo, hi, DIMS(4))};
    run_case(ops[o], &a, "[3,4] and [4]", 2, b2, NULL, TOL_EW);
    pcgc_buf b3[2] = {frand(DIMS(1, 7)), frange(lo, hi, DIMS(2, 3, 1))};
    run_case(ops[o], &a, "[1,7] and [2,3,1] -> [2,3,7]", 2, b3, NULL, TOL_EW);
    pcgc_buf b4[2] = {frand(DIMS(2, 3)), frange(lo, hi, DIMS(1))};
    run_case(ops[o], &a, "[2,3] and [1]", 2, b4, NULL, TOL_EW);
  }
}

/* ------------------------------------------------------- data movement */

static void test_shape(void) {
  pcgc_attrs a = attrs(PCGC_OP_CONCAT);
  seti(&a, "axis", 1);
  pcgc_buf c1[3] = {frand(DIMS(2, 3, 4)), frand(DIMS(2, 5, 4)), frand(DIMS(2, 1, 4))};
  run_case(PCGC_OP_CONCAT, &a, "axis=1 of 3 inputs", 3, c1, NULL, TOL_EW);
  seti(&a, "axis", 0);
  pcgc_buf c2[2] = {frand(DIMS(2, 6)), frand(DIMS(3, 6))};
  run_case(PCGC_OP_CONCAT, &a, "axis=0 of 2 inputs", 2, c2, NULL, TOL_EW);
  seti(&a, "axis", 2);
  pcgc_buf c3[2] = {frand(DIMS(2, 3, 4)), frand(DIMS(2, 3, 2))};
  run_case(PCGC_OP_CONCAT, &a, "axis=2 (last)", 2, c3, NULL, TOL_EW);
  pcgc_buf c4 = frand(DIMS(2, 3, 4));
  run_case(PCGC_OP_CONCAT, &a, "one input", 1, &c4, NULL, TOL_EW);

  a = attrs(PCGC_OP_SPLIT);
  seti(&a, "axis", 1);
  setn(&a, "sizes", DIMS(2, 3, 1));
  pcgc_buf s1 = frand(DIMS(3, 6, 4));
  run_case(PCGC_OP_SPLIT, &a, "axis=1 sizes 2,3,1", 1, &s1, NULL, TOL_EW);
  seti(&a, "axis", 0);
  setn(&a, "sizes", DIMS(1, 2));
  pcgc_buf s2 = frand(DIMS(3, 5));
  run_case(PCGC_OP_SPLIT, &a, "axis=0 sizes 1,2", 1, &s2, NULL, TOL_EW);
  seti(&a, "axis", 2);
  setn(&a, "sizes", DIMS(3, 1));
  pcgc_buf s3 = frand(DIMS(2, 3, 4));
  run_case(PCGC_OP_SPLIT, &a, "axis=2 (last) sizes 3,1", 1, &s3, NULL, TOL_EW);

  a = attrs(PCGC_OP_RESHAPE);
  setn(&a, "shape", DIMS(4, -1));
  pcgc_buf r1 = frand(DIMS(2, 3, 4));
  run_case(PCGC_OP_RESHAPE, &a, "[2,3,4] -> [4,-1]", 1, &r1, NULL, TOL_EW);
  setn(&a, "shape", DIMS(3, 2, 2, 5));
  pcgc_buf r2 = frand(DIMS(6, 10));
  run_case(PCGC_OP_RESHAPE, &a, "[6,10] -> [3,2,2,5]", 1, &r2, NULL, TOL_EW);

  a = attrs(PCGC_OP_TRANSPOSE);
  setn(&a, "perm", DIMS(2, 0, 1));
  pcgc_buf t1 = frand(DIMS(2, 3, 4));
  run_case(PCGC_OP_TRANSPOSE, &a, "[2,3,4] perm 2,0,1", 1, &t1, NULL, TOL_EW);
  setn(&a, "perm", DIMS(0, 2, 1, 3));
  pcgc_buf t2 = frand(DIMS(2, 3, 4, 5));
  run_case(PCGC_OP_TRANSPOSE, &a, "[2,3,4,5] perm 0,2,1,3", 1, &t2, NULL, TOL_EW);
  setn(&a, "perm", DIMS(1, 0));
  pcgc_buf t3 = frand(DIMS(33, 65));
  run_case(PCGC_OP_TRANSPOSE, &a, "[33,65] perm 1,0", 1, &t3, NULL, TOL_EW);

  a = attrs(PCGC_OP_FLATTEN);
  pcgc_buf f1 = frand(DIMS(2, 3, 4, 5));
  run_case(PCGC_OP_FLATTEN, &a, "[2,3,4,5] axis=1", 1, &f1, NULL, TOL_EW);
  seti(&a, "axis", 2);
  pcgc_buf f2 = frand(DIMS(2, 3, 4, 5));
  run_case(PCGC_OP_FLATTEN, &a, "[2,3,4,5] axis=2", 1, &f2, NULL, TOL_EW);
}

/* --------------------------------------------- softmax and reductions */

static void test_reduce(void) {
  pcgc_attrs a = attrs(PCGC_OP_SOFTMAX);
  pcgc_buf x1 = frange(-4, 4, DIMS(4, 7, 9));
  run_case(PCGC_OP_SOFTMAX, &a, "[4,7,9] axis=-1", 1, &x1, NULL, TOL_EW);
  seti(&a, "axis", 1);
  pcgc_buf x2 = frange(-4, 4, DIMS(3, 5, 4));
  run_case(PCGC_OP_SOFTMAX, &a, "[3,5,4] axis=1 (not innermost)", 1, &x2, NULL, TOL_EW);
  seti(&a, "axis", -1);
  pcgc_buf x3 = frange(-4, 4, DIMS(3, 1000));
  run_case(PCGC_OP_SOFTMAX, &a, "[3,1000] axis=-1 (long rows)", 1, &x3, NULL, TOL_EW);
  a = attrs(PCGC_OP_LOG_SOFTMAX);
  run_case(PCGC_OP_LOG_SOFTMAX, &a, "[4,7,9] axis=-1", 1, &x1, NULL, TOL_EW);
  seti(&a, "axis", 1);
  run_case(PCGC_OP_LOG_SOFTMAX, &a, "[3,5,4] axis=1 (not innermost)", 1, &x2, NULL, TOL_EW);
  a = attrs(PCGC_OP_REDUCE_MAX);
  setn(&a, "dims", DIMS(1));
  pcgc_buf m1 = frand(DIMS(3, 4, 5));
  run_case(PCGC_OP_REDUCE_MAX, &a, "[3,4,5] dims 1", 1, &m1, NULL, TOL_EW);
  setn(&a, "dims", DIMS(0, 2));
  seti(&a, "keepdims", 1);
  run_case(PCGC_OP_REDUCE_MAX, &a, "[3,4,5] dims 0,2 keepdims", 1, &m1, NULL, TOL_EW);

  for (int mean = 0; mean < 2; mean++) {
    pcgc_op_kind k = mean ? PCGC_OP_REDUCE_MEAN : PCGC_OP_REDUCE_SUM;
    a = attrs(k);
    setn(&a, "dims", DIMS(1));
    pcgc_buf r1 = frand(DIMS(3, 4, 5));
    run_case(k, &a, "[3,4,5] dims 1", 1, &r1, NULL, TOL_EW);
    setn(&a, "dims", DIMS(0, 2));
    seti(&a, "keepdims", 1);
    pcgc_buf r2 = frand(DIMS(3, 4, 5));
    run_case(k, &a, "[3,4,5] dims 0,2 keepdims", 1, &r2, NULL, TOL_EW);
    setn(&a, "dims", DIMS(-1));
    pcgc_buf r3 = frand(DIMS(6, 7));
    run_case(k, &a, "[6,7] dims -1 keepdims", 1, &r3, NULL, TOL_EW);
    setn(&a, "dims", DIMS(0, 1, 2));
    seti(&a, "keepdims", 0);
    pcgc_buf r4 = frand(DIMS(2, 3, 4));
    run_case(k, &a, "[2,3,4] all dims", 1, &r4, NULL, TOL_EW);
  }
  /* a piece of the batch: the mean divides by the logical count */
  a = attrs(PCGC_OP_REDUCE_MEAN);
  setn(&a, "dims", DIMS(0));
  pcgc_buf rp = frand(DIMS(2, 4, 5));
  pcgc_piece p = whole_piece(&rp);
  p.global[0] = 6, p.offset[0] = 2;
  pcgc_kernel_ctx ctx = {&p, NULL, 0, 0, false, NULL, 0};
  run_case(PCGC_OP_REDUCE_MEAN, &a, "piece [2/6,4,5] dims 0", 1, &rp, &ctx, TOL_EW);
}

/* ------------------------------------------------------------ attention */

typedef struct attn_case {
  int64_t B, Sq, Sk, Eq, Ek, Ev, E, Eo, heads;
  bool causal, bias;
  double dropout;
  const char *what;
  bool rope; /* rotary embeddings on q and k */
  int64_t F;  /* wk's and wv's columns: 0 for E; fewer for grouped-query attention */
} attn_case;

static const attn_case attn_cases[] = {
    {2, 3, 3, 4, 4, 4, 4, 4, 1, false, false, 0, "7 inputs, 1 head", false, 0},
    {2, 3, 5, 3, 4, 5, 4, 6, 2, false, true, 0, "biases, 2 heads, Sq != Sk, Eq/Ek/Ev/Eo differ", false, 0},
    {1, 4, 4, 3, 5, 2, 8, 3, 4, true, true, 0, "causal, biases, 4 heads", false, 0},
    {2, 4, 4, 4, 4, 4, 8, 4, 2, true, false, 0, "causal, 7 inputs", false, 0},
    {2, 3, 4, 3, 3, 3, 4, 5, 2, false, true, 0.3, "dropout 0.3 training, biases", false, 0},
    {2, 5, 5, 8, 8, 8, 8, 8, 2, true, false, 0.2, "causal, dropout 0.2 training", false, 0},
    {2, 16, 16, 32, 32, 32, 32, 32, 4, true, true, 0, "causal, biases, 16x16, 4 heads", false, 0},
    {1, 4, 4, 3, 5, 2, 8, 3, 2, true, false, 0, "rope, causal, 2 heads of 4", true, 0},
    {2, 3, 5, 3, 4, 5, 8, 6, 1, false, true, 0, "rope, Sq != Sk, biases, 1 head of 8", true, 0},
    {2, 4, 4, 3, 5, 2, 8, 3, 4, true, true, 0, "grouped-query: 4 heads sharing 2, causal, biases", false, 4},
    {2, 16, 16, 32, 32, 32, 32, 32, 8, true, false, 0.2, "grouped-query: 8 heads sharing 2, rope, dropout", true, 8},
    {2, 3, 4, 3, 3, 4, 8, 5, 4, false, false, 0, "multi-query: 4 heads sharing 1, rope", true, 2},
    /* rows longer than a warp: 3, 10 and 19 keys a lane, and a block per row beyond 1024 keys */
    {1, 70, 70, 8, 8, 8, 8, 8, 2, true, true, 0.1, "causal, dropout 0.1, biases, 70 keys", false, 0},
    {1, 12, 300, 8, 8, 8, 8, 8, 2, false, false, 0.1, "dropout 0.1, 300 keys", false, 0},
    {1, 6, 600, 4, 4, 4, 4, 4, 1, false, true, 0, "biases, 600 keys", false, 0},
    {1, 3, 1100, 4, 4, 4, 4, 4, 1, false, false, 0.1, "dropout 0.1, 1100 keys", false, 0},
};

static void attn_inputs(const attn_case *t, pcgc_buf *in) {
  int64_t F = t->F ? t->F : t->E;
  in[0] = frand(DIMS(t->B, t->Sq, t->Eq));
  in[1] = frand(DIMS(t->B, t->Sk, t->Ek));
  in[2] = frand(DIMS(t->B, t->Sk, t->Ev));
  in[3] = frange(-0.5, 0.5, DIMS(t->Eq, t->E));
  in[4] = frange(-0.5, 0.5, DIMS(t->Ek, F));
  in[5] = frange(-0.5, 0.5, DIMS(t->Ev, F));
  in[6] = frange(-0.5, 0.5, DIMS(t->E, t->Eo));
  in[7] = frange(-0.5, 0.5, DIMS(t->E));
  in[8] = frange(-0.5, 0.5, DIMS(F));
  in[9] = frange(-0.5, 0.5, DIMS(F));
  in[10] = frange(-0.5, 0.5, DIMS(t->Eo));
}

static pcgc_attrs attn_attrs(const attn_case *c) {
  pcgc_attrs a = attrs(PCGC_OP_ATTENTION);
  seti(&a, "heads", c->heads);
  seti(&a, "causal", c->causal);
  setf(&a, "dropout", c->dropout);
  seti(&a, "rope", c->rope);
  return a;
}

static void test_attention(void) {
  for (size_t i = 0; i < sizeof attn_cases / sizeof attn_cases[0]; i++) {
    const attn_case *c = &attn_cases[i];
    pcgc_attrs a = attn_attrs(c);
    pcgc_buf in[MAX_IN];
    attn_inputs(c, in);
    pcgc_kernel_ctx ctx = {NULL, NULL, 11, 99, c->dropout > 0, NULL, 0};
    run_case(PCGC_OP_ATTENTION, &a, c->what, c->bias ? 11 : 7, in, &ctx, prec->tol);
  }
  /* query rows 2..3 of 4 (causal masks by logical position), dropout by
   * logical indices */
  const attn_case t = {2, 4, 4, 3, 4, 5, 4, 3, 2, true, true, 0.4, "rows", true, 0}; /* rope at positions 2..3 */
  pcgc_attrs a = attn_attrs(&t);
  pcgc_buf in[MAX_IN];
  attn_inputs(&t, in);
  in[0] = frand(DIMS(2, 2, 3));
  pcgc_piece p[MAX_IN];
  for (int i = 0; i < MAX_IN; i++) p[i] = whole_piece(&in[i]);
  p[0].global[1] = 4, p[0].offset[1] = 2;
  pcgc_kernel_ctx ctx = {p, NULL, 5, 17, true, NULL, 0};
  pcgc_ptensor rows_out; /* inference of local shapes refuses a causal Sq != Sk */
  pcgc_ptensor_init(&rows_out, PCGC_F32, 3, (int64_t[]){2, 2, 3});
  run_case_to(PCGC_OP_ATTENTION, &a, "causal, dropout 0.4, rope, query rows 2..3 of 4", 11, in, &ctx, prec->tol, 1,
              &rows_out);
  /* heads 2..3 of 4: wq columns 4..7 of 8, wo rows 4..7, and wk/wv columns 4..7 of 8, or
   * (grouped-query, 2 key/value heads) key/value head 1 of 2: columns 2..3 of 4 */
  static const attn_case hc[] = {
      {2, 3, 4, 3, 4, 5, 8, 3, 4, false, false, 0.25, "dropout 0.25, heads 2..3 of 4 (a head piece)", false, 0},
      {2, 3, 4, 3, 4, 5, 8, 3, 4, false, false, 0.25,
       "dropout 0.25, rope, grouped-query heads 2..3 of 4 (key/value head 1 of 2)", true, 4},
  };
  for (size_t c = 0; c < sizeof hc / sizeof *hc; c++) {
    const attn_case *h = &hc[c];
    int64_t kvw = (h->F ? h->F : h->E) / 2; /* wk/wv columns per piece */
    a = attn_attrs(h);
    attn_inputs(h, in);
    in[3] = frange(-0.5, 0.5, DIMS(3, 4));
    in[4] = frange(-0.5, 0.5, DIMS(4, kvw));
    in[5] = frange(-0.5, 0.5, DIMS(5, kvw));
    in[6] = frange(-0.5, 0.5, DIMS(4, 3));
    for (int i = 0; i < 7; i++) p[i] = whole_piece(&in[i]);
    for (int i = 3; i < 7; i++) {
      int dim = i == 6 ? 0 : 1;
      int64_t w = i == 4 || i == 5 ? kvw : 4;
      p[i].global[dim] = 2 * w, p[i].offset[dim] = w;
    }
    pcgc_kernel_ctx hctx = {p, NULL, 3, 23, true, NULL, 0};
    /* the output [B, Sq, Eo]; inference of local shapes would take the
     * piece's 4 columns for all 4 heads (head size 1, which rope refuses) */
    pcgc_ptensor head_out;
    pcgc_ptensor_init(&head_out, PCGC_F32, 3, (int64_t[]){h->B, h->Sq, 3});
    run_case_to(PCGC_OP_ATTENTION, &a, h->what, 7, in, &hctx, prec->tol, 1, &head_out);
  }
}

/* --------------------------------------------------------------- losses */

static void test_losses(void) {
  static const char *red[] = {"mean", "sum"};
  for (int r = PCGC_REDUCTION_MEAN; r <= PCGC_REDUCTION_SUM; r++)
    for (int i64 = 0; i64 < 2; i64++) {
      pcgc_attrs a = attrs(PCGC_OP_SOFTMAX_CROSS_ENTROPY);
      seti(&a, "reduction", r);
      pcgc_dtype lt = i64 ? PCGC_I64 : PCGC_I32;
      char what[80];
      pcgc_buf in[2] = {frange(-3, 3, DIMS(6, 10)), irand(lt, 10, DIMS(6))};
      snprintf(what, sizeof what, "logits[6,10] %s labels reduction=%s", i64 ? "i64" : "i32", red[r]);
      run_case(PCGC_OP_SOFTMAX_CROSS_ENTROPY, &a, what, 2, in, NULL, TOL_EW);
      pcgc_buf in3[2] = {frange(-3, 3, DIMS(2, 3, 7)), irand(lt, 7, DIMS(2, 3))};
      snprintf(what, sizeof what, "logits[2,3,7] %s labels reduction=%s", i64 ? "i64" : "i32", red[r]);
      run_case(PCGC_OP_SOFTMAX_CROSS_ENTROPY, &a, what, 2, in3, NULL, TOL_EW);
    }
  pcgc_attrs a = attrs(PCGC_OP_SOFTMAX_CROSS_ENTROPY);
  pcgc_buf xp[2] = {frange(-3, 3, DIMS(3, 10)), irand(PCGC_I32, 10, DIMS(3))};
  pcgc_piece p[2] = {whole_piece(&xp[0]), whole_piece(&xp[1])};
  p[0].global[0] = p[1].global[0] = 8, p[0].offset[0] = p[1].offset[0] = 4;
  pcgc_kernel_ctx ctx = {p, NULL, 0, 0, false, NULL, 0};
  run_case(PCGC_OP_SOFTMAX_CROSS_ENTROPY, &a, "batch piece [3/8,10] reduction=mean", 2, xp, &ctx, TOL_EW);

  for (int r = PCGC_REDUCTION_MEAN; r <= PCGC_REDUCTION_SUM; r++) {
    a = attrs(PCGC_OP_MSE);
    seti(&a, "reduction", r);
    char what[80];
    pcgc_buf in[2] = {frand(DIMS(4, 5)), frand(DIMS(4, 5))};
    snprintf(what, sizeof what, "[4,5] reduction=%s", red[r]);
    run_case(PCGC_OP_MSE, &a, what, 2, in, NULL, TOL_EW);
    pcgc_buf in3[2] = {frand(DIMS(3, 2, 4)), frand(DIMS(3, 2, 4))};
    snprintf(what, sizeof what, "[3,2,4] reduction=%s", red[r]);
    run_case(PCGC_OP_MSE, &a, what, 2, in3, NULL, TOL_EW);
  }
  a = attrs(PCGC_OP_MSE);
  pcgc_buf mp[2] = {frand(DIMS(2, 5)), frand(DIMS(2, 5))};
  pcgc_piece q[2] = {whole_piece(&mp[0]), whole_piece(&mp[1])};
  q[0].global[0] = q[1].global[0] = 6, q[0].offset[0] = q[1].offset[0] = 2;
  pcgc_kernel_ctx qctx = {q, NULL, 0, 0, false, NULL, 0};
  run_case(PCGC_OP_MSE, &a, "batch piece [2/6,5] reduction=mean", 2, mp, &qctx, TOL_EW);
}

/* ------------------------------------------- batch norm over pieces */

static pcgc_buf rows(const pcgc_buf *b, int64_t from, int64_t n) { /* rows [from, from+n) of dim 0 */
  pcgc_buf r = *b;
  r.dims[0] = n;
  r.data = (char *)b->data + (size_t)from * (nbytes(b) / (size_t)b->dims[0]);
  return r;
}

static pcgc_buf f64buf(double *v, int64_t n) {
  pcgc_buf b;
  memset(&b, 0, sizeof b);
  b.dtype = PCGC_F64;
  b.rank = 1;
  b.dims[0] = n;
  b.data = v;
  return b;
}

/* x [6, C, S] in pieces of 2, 3 and 1 rows: the CPU sums each piece's
 * statistics by hand, the CUDA calls add them into s. With relu (act=relu)
 * bn(x) takes both signs: x is centred near 0 and bias random, or absent. */
static void test_batchnorm_split(bool affine, bool relu) {
  const char *op = "batchnorm split";
  char what[80], note[1200];
  const int64_t N = 6, C = 5, pieces[3][2] = {{0, 2}, {2, 3}, {5, 1}};
  pcgc_attrs a = attrs(PCGC_OP_BATCHNORM);
  if (relu) seti(&a, "act", PCGC_ACT_RELU);
  pcgc_buf x = frange(-1, 2, DIMS(N, C, 3, 4)), dy = frand(DIMS(N, C, 3, 4));
  pcgc_buf scale = frange(0.5, 1.5, DIMS(C)), bias = frand(DIMS(C));
  double count = (double)(N * 12);
  pcgc_buf y = hbuf(PCGC_F32, x.rank, x.dims), dx = hbuf(PCGC_F32, x.rank, x.dims);
  pcgc_buf dscale = hbuf(PCGC_F32, 1, scale.dims), dbias = hbuf(PCGC_F32, 1, bias.dims);
  double *s = halloc(4 * C * sizeof *s), *tmp = halloc(2 * C * sizeof *tmp);
  pcgc_error err;
  pcgc_error_clear(&err);

  /* device pieces */
  pcgc_buf dxs[3], ddys[3], dys_[3], ddx[3];
  for (int p = 0; p < 3; p++) {
    pcgc_buf xp = rows(&x, pieces[p][0], pieces[p][1]), yp = rows(&dy, pieces[p][0], pieces[p][1]);
    dxs[p] = to_dev(&xp);
    ddys[p] = to_dev(&yp);
    dys_[p] = dev_zero(&xp);
    ddx[p] = dev_zero(&xp);
  }
  pcgc_buf d_scale = to_dev(&scale), d_bias = to_dev(&bias), d_dscale = dev_zero(&dscale), d_dbias = dev_zero(&dbias);
  double *ds = dalloc(4 * C * sizeof(double));
  if (pcgc_cuda_zero(cu, ds, 4 * C * sizeof(double), &err) != PCGC_OK) die("pcgc_cuda_zero", &err);
  const pcgc_buf *sc = affine ? &scale : NULL, *bi = affine ? &bias : NULL;
  const pcgc_buf *dsc = affine ? &d_scale : NULL, *dbi = affine ? &d_bias : NULL;
  pcgc_buf *gsc = affine ? &dscale : NULL, *gbi = affine ? &dbias : NULL;
  pcgc_buf *dgsc = affine ? &d_dscale : NULL, *dgbi = affine ? &d_dbias : NULL;
  char aff[40];
  snprintf(aff, sizeof aff, "%s%s", relu ? "act=relu, " : "", affine ? "scale bias" : "no scale/bias");

  /* 1. statistics */
  for (int p = 0; p < 3; p++) {
    pcgc_buf xp = rows(&x, pieces[p][0], pieces[p][1]);
    pcgc_cpu_batchnorm_stats(&xp, tmp, tmp + C);
    for (int c = 0; c < 2 * C; c++) s[c] += tmp[c];
    if (pcgc_cuda_batchnorm_stats(cu, &dxs[p], ds, &err) != PCGC_OK) goto fail;
  }
  pcgc_buf got = hbuf(PCGC_F64, 1, (int64_t[]){4 * C});
  if (pcgc_cuda_download(cu, got.data, ds, 4 * C * sizeof(double), &err) != PCGC_OK) goto fail;
  pcgc_buf want = f64buf(s, 2 * C), got2 = f64buf(got.data, 2 * C);
  snprintf(what, sizeof what, "stats x[6=2+3+1,5,3,4] (sum, sumsq)");
  report(op, what, maxrel(&want, &got2), NAN, 1e-10, NULL);

  /* 2. apply with the global statistics */
  for (int p = 0; p < 3; p++) {
    pcgc_buf xp = rows(&x, pieces[p][0], pieces[p][1]), yp = rows(&y, pieces[p][0], pieces[p][1]);
    pcgc_cpu_batchnorm_apply(&a, &xp, sc, bi, s, s + C, count, &yp);
    if (pcgc_cuda_batchnorm_apply(cu, &a, &dxs[p], dsc, dbi, ds, count, &dys_[p], &err) != PCGC_OK) goto fail;
  }
  double r = 0;
  for (int p = 0; p < 3; p++) {
    pcgc_buf yp = rows(&y, pieces[p][0], pieces[p][1]), g = to_host(&dys_[p]);
    r = fmax(r, maxrel(&yp, &g));
  }
  snprintf(what, sizeof what, "apply, %s", aff);
  report(op, what, r, NAN, TOL_EW, NULL);

  /* 3. backward statistics */
  for (int p = 0; p < 3; p++) {
    pcgc_buf xp = rows(&x, pieces[p][0], pieces[p][1]), gp = rows(&dy, pieces[p][0], pieces[p][1]);
    pcgc_cpu_batchnorm_bwd_stats(&a, &xp, sc, bi, &gp, s, s + C, count, tmp, tmp + C);
    for (int c = 0; c < 2 * C; c++) s[2 * C + c] += tmp[c];
    if (pcgc_cuda_batchnorm_bwd_stats(cu, &a, &dxs[p], dsc, dbi, &ddys[p], ds, count, &err) != PCGC_OK) goto fail;
  }
  if (pcgc_cuda_download(cu, got.data, ds, 4 * C * sizeof(double), &err) != PCGC_OK) goto fail;
  want = f64buf(s + 2 * C, 2 * C);
  got2 = f64buf((double *)got.data + 2 * C, 2 * C);
  snprintf(what, sizeof what, "bwd_stats (dsum, dxsum), %s", aff);
  report(op, what, NAN, maxrel(&want, &got2), 1e-10, NULL);

  /* 4. backward: dx per piece, dscale and dbias added over the pieces */
  for (int p = 0; p < 3; p++) {
    pcgc_buf xp = rows(&x, pieces[p][0], pieces[p][1]), gp = rows(&dy, pieces[p][0], pieces[p][1]);
    pcgc_buf dxp = rows(&dx, pieces[p][0], pieces[p][1]);
    pcgc_cpu_batchnorm_bwd_apply(&a, &xp, sc, bi, &gp, s, s + C, count, s + 2 * C, s + 3 * C, &dxp, gsc, gbi);
    if (pcgc_cuda_batchnorm_bwd_apply(cu, &a, &dxs[p], dsc, dbi, &ddys[p], ds, count, &ddx[p], dgsc, dgbi, &err) !=
        PCGC_OK)
      goto fail;
  }
  r = 0;
  for (int p = 0; p < 3; p++) {
    pcgc_buf dxp = rows(&dx, pieces[p][0], pieces[p][1]), g = to_host(&ddx[p]);
    r = fmax(r, maxrel(&dxp, &g));
  }
  if (affine) {
    pcgc_buf g1 = to_host(&d_dscale), g2 = to_host(&d_dbias);
    r = fmax(r, fmax(maxrel(&dscale, &g1), maxrel(&dbias, &g2)));
  }
  snprintf(what, sizeof what, "bwd_apply (dx%s), %s", affine ? ", dscale, dbias" : "", aff);
  report(op, what, NAN, r, TOL_EW, NULL);
  free_case();
  return;

fail:
  snprintf(note, sizeof note, "%s", err.message);
  report(op, aff, INFINITY, INFINITY, TOL_EW, note);
  free_case();
}

/* ----------------------------------------------------------- optimizers */

static void test_optimizer(const char *what, const pcgc_optimizer *o) {
  char note[1200];
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_buf w = frand(DIMS(1037)), m = hbuf(PCGC_F32, 1, w.dims), v = hbuf(PCGC_F32, 1, w.dims);
  pcgc_buf d_w = to_dev(&w), d_m = dev_zero(&m), d_v = dev_zero(&v);
  for (int64_t step = 1; step <= 3; step++) {
    pcgc_buf g = frand(DIMS(1037)), d_g = to_dev(&g);
    pcgc_buf *mm = o->kind == PCGC_ADAM || o->momentum != 0 ? &m : NULL, *vv = o->kind == PCGC_ADAM ? &v : NULL;
    pcgc_buf *dm = mm ? &d_m : NULL, *dv = vv ? &d_v : NULL;
    if (pcgc_cpu_optimizer_step(o, &w, &g, mm, vv, step, &err) != PCGC_OK ||
        pcgc_cuda_optimizer_step(cu, o, &d_w, &d_g, dm, dv, step, &err) != PCGC_OK) {
      snprintf(note, sizeof note, "%s", err.message);
      report("optimizer", what, INFINITY, INFINITY, 1e-6, note);
      free_case();
      return;
    }
    pcgc_buf gw = to_host(&d_w);
    double rs = 0;
    if (mm) {
      pcgc_buf gm = to_host(&d_m);
      rs = maxrel(&m, &gm);
    }
    if (vv) {
      pcgc_buf gv = to_host(&d_v);
      rs = fmax(rs, maxrel(&v, &gv));
    }
    char line[96];
    snprintf(line, sizeof line, "%s, step %lld (fwd: w, bwd: state)", what, (long long)step);
    report("optimizer", line, maxrel(&w, &gw), mm ? rs : NAN, 1e-6, NULL);
  }
  free_case();
}

static void test_optimizers(void) {
  pcgc_optimizer o;
  pcgc_optimizer_default(&o, PCGC_SGD);
  o.lr = 0.1;
  test_optimizer("sgd lr=0.1", &o);
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  test_optimizer("sgd momentum=0.9 weight_decay=0.01", &o);
  pcgc_optimizer_default(&o, PCGC_ADAM);
  o.lr = 0.01;
  test_optimizer("adam lr=0.01", &o);
  o.weight_decay = 0.05;
  test_optimizer("adam lr=0.01 weight_decay=0.05", &o);
}

/* A backward piece's gradients zeroed by one kernel (codegen's list ZERO):
 * buffers of odd sizes and addresses, more than one launch holds, each
 * cleared to its last byte and not one byte past it. */
static void test_zero_list(void) {
  pcgc_error err;
  pcgc_error_clear(&err);
  enum { N = PCGC_CUDA_ZERO_MAX + 5, GUARD = 64 };
  size_t total = 0, bytes[N], off[N];
  for (int i = 0; i < N; i++) {
    bytes[i] = i == 3 ? 0 : (size_t)(i * 977 % 5003) + (size_t)i % 3; /* one empty, odd lengths */
    off[i] = total + (size_t)(i % 5);                                 /* some not 16-byte aligned */
    total = off[i] + bytes[i] + GUARD;
  }
  unsigned char *d = dalloc(total), *h = halloc(total);
  memset(h, 0xa5, total);
  void *p[N];
  for (int i = 0; i < N; i++) p[i] = d + off[i];
  pcgc_status st = pcgc_cuda_upload(cu, d, h, total, &err);
  if (!st) st = pcgc_cuda_zero_list(cu, N, p, bytes, &err);
  if (!st) st = pcgc_cuda_download(cu, h, d, total, &err);
  if (st) die("pcgc_cuda_zero_list", &err);
  int64_t bad = 0;
  for (size_t k = 0, i = 0; k < total; k++) {
    while (i + 1 < N && k >= off[i + 1]) i++;
    bool in = k >= off[i] && k < off[i] + bytes[i];
    bad += h[k] != (in ? 0 : 0xa5);
  }
  char what[96];
  snprintf(what, sizeof what, "%d buffers, %zu bytes with guards", (int)N, total);
  report("zero_list", what, (double)bad, NAN, 0, NULL); /* fwd: bytes wrong */
  free_case();
}

/* A packed run of sends (exec.c's pack_sends): boxes of several shapes and
 * element sizes moved by one list launch (more than one launch holds) into
 * contiguous staging, each equal to the same box moved on the host, and
 * nothing written past its end. */
static void test_move_list(void) {
  pcgc_error err;
  pcgc_error_clear(&err);
  enum { N = PCGC_CUDA_MOVE_MAX + 3 };
  int64_t sdims[N][3], soff[N][3], lo[N][3], len[N][3];
  pcgc_cuda_box_move m[N];
  size_t sat[N], dat[N], stotal = 0, dtotal = 0;
  pcgc_dtype types[3] = {PCGC_F32, PCGC_I64, PCGC_BF16};
  for (int i = 0; i < N; i++) {
    pcgc_dtype t = types[i % 3];
    size_t es = pcgc_dtype_size(t);
    sdims[i][0] = 3 + i % 4, sdims[i][1] = 5 + i % 7, sdims[i][2] = 2 + i % 5;
    for (int k = 0; k < 3; k++) {
      soff[i][k] = k == 0 ? 10 : 0; /* the source buffer starts at logical row 10 */
      lo[i][k] = soff[i][k] + (k == 0 ? i % 2 : k == 1 ? i % 3 : 0);
      len[i][k] = sdims[i][k] - (lo[i][k] - soff[i][k]) - (k == 2 && sdims[i][2] > 2 ? 1 : 0);
    }
    if (i == 5) len[i][1] = 0; /* an empty box */
    int64_t sn = sdims[i][0] * sdims[i][1] * sdims[i][2], dn = len[i][0] * len[i][1] * len[i][2];
    sat[i] = stotal;
    stotal += ((size_t)sn * es + 15) / 16 * 16 + 64;
    dat[i] = dtotal;
    dtotal += ((size_t)dn * es + 15) / 16 * 16 + 64; /* aligned as staging is, a guard after each box */
  }
  unsigned char *hs = halloc(stotal), *hd = halloc(dtotal), *want = halloc(dtotal);
  for (size_t k = 0; k < stotal; k++) hs[k] = (unsigned char)(k * 131 + 7);
  memset(hd, 0x5a, dtotal);
  memcpy(want, hd, dtotal);
  unsigned char *ds = dalloc(stotal), *dd = dalloc(dtotal);
  for (int i = 0; i < N; i++) { /* the same boxes moved on the host, element by element */
    size_t es = pcgc_dtype_size(types[i % 3]);
    int64_t at = 0;
    for (int64_t r = 0; r < len[i][0]; r++)
      for (int64_t c = 0; c < len[i][1]; c++)
        for (int64_t z = 0; z < len[i][2]; z++, at++) {
          int64_t sr = lo[i][0] + r - soff[i][0], sc = lo[i][1] + c - soff[i][1], sz = lo[i][2] + z - soff[i][2];
          int64_t si = (sr * sdims[i][1] + sc) * sdims[i][2] + sz;
          memcpy(want + dat[i] + (size_t)at * es, hs + sat[i] + (size_t)si * es, es);
        }
    m[i] = (pcgc_cuda_box_move){types[i % 3], 3, dd + dat[i], ds + sat[i], len[i], lo[i], sdims[i], soff[i], lo[i],
                                len[i], false};
  }
  pcgc_status st = pcgc_cuda_upload(cu, ds, hs, stotal, &err);
  if (!st) st = pcgc_cuda_upload(cu, dd, hd, dtotal, &err);
  if (!st) st = pcgc_cuda_move_list(cu, N, m, &err);
  if (!st) st = pcgc_cuda_download(cu, hd, dd, dtotal, &err);
  if (st) die("pcgc_cuda_move_list", &err);
  int64_t bad = 0;
  for (size_t k = 0; k < dtotal; k++) bad += hd[k] != want[k];
  char what[96];
  snprintf(what, sizeof what, "%d boxes of f32, i64, bf16 into staging, %zu bytes with guards", (int)N, dtotal);
  report("move_list", what, (double)bad, NAN, 0, NULL); /* fwd: bytes wrong */
  free_case();
}

/* A list that adds f32 boxes (an unpacked run of receives that add, exec.c)
 * beside one that sets: rows of a [4, 6] f32 destination, each box from a
 * staging of its own. */
static void test_move_list_add(void) {
  pcgc_error err;
  pcgc_error_clear(&err);
  int64_t ddims[2] = {4, 6}, doff[2] = {0, 0}, sdims[3][2], soff[3][2], lo[3][2], len[3][2];
  float hd[24], hs[3][12], want[24];
  for (int i = 0; i < 24; i++) hd[i] = want[i] = (float)i;
  pcgc_cuda_box_move m[3];
  float *ds[3], *dd = dalloc(sizeof hd);
  for (int b = 0; b < 3; b++) { /* box b: rows b .. b + 1 of columns 0..5 (b 2: row 3 only) */
    int rows = b == 2 ? 1 : 2, r0 = b == 2 ? 3 : b == 1 ? 1 : 0;
    sdims[b][0] = rows, sdims[b][1] = 6, soff[b][0] = r0, soff[b][1] = 0;
    lo[b][0] = r0, lo[b][1] = 0, len[b][0] = rows, len[b][1] = 6;
    for (int k = 0; k < rows * 6; k++) hs[b][k] = 100.0f * (float)(b + 1) + (float)k;
    ds[b] = dalloc(sizeof hs[b]);
    bool add = b != 1;
    for (int k = 0; k < rows * 6; k++) want[r0 * 6 + k] = add ? want[r0 * 6 + k] + hs[b][k] : hs[b][k];
    m[b] = (pcgc_cuda_box_move){PCGC_F32, 2, dd, ds[b], ddims, doff, sdims[b], soff[b], lo[b], len[b], add};
  }
  /* boxes 0 and 1 meet in row 1: box 1 alone, after box 0 and 2 */
  pcgc_status st = pcgc_cuda_upload(cu, dd, hd, sizeof hd, &err);
  for (int b = 0; b < 3 && !st; b++) st = pcgc_cuda_upload(cu, ds[b], hs[b], sizeof hs[b], &err);
  pcgc_cuda_box_move two[2] = {m[0], m[2]};
  if (!st) st = pcgc_cuda_move_list(cu, 2, two, &err);
  if (!st) st = pcgc_cuda_move_list(cu, 1, &m[1], &err);
  if (!st) st = pcgc_cuda_download(cu, hd, dd, sizeof hd, &err);
  if (st) die("pcgc_cuda_move_list (add)", &err);
  double bad = 0;
  for (int i = 0; i < 24; i++) bad += hd[i] != want[i];
  report("move_list", "f32 boxes added and set", bad, NAN, 0, NULL);
  pcgc_cuda_box_move wrong = m[0];
  wrong.t = PCGC_I64;
  if (pcgc_cuda_move_list(cu, 1, &wrong, &err) != PCGC_ERR_UNSUPPORTED) report("move_list", "i64 add refused", 1, NAN, 0, NULL);
  free_case();
}

/* ----------------------------------------------------------------- main */

/* Box moves between f32 and bf16 (bf16 storage, exec.c's widening): the
 * GPU rounds to nearest even exactly as the host's pcgc_bf16_from_f32, a
 * bf16 sum is taken in f32, and a sub-box lands where its offsets say. */
static void test_convert(void) {
  pcgc_error err;
  pcgc_error_clear(&err);
  int64_t dims[2] = {37, 63}, n = dims[0] * dims[1], zero[2] = {0, 0}; /* odd: a last element alone */
  pcgc_buf x = frange(-300, 300, 2, dims), dx = to_dev(&x);
  uint16_t *b16 = dalloc((size_t)n * 2), *c16 = dalloc((size_t)n * 2), *h = halloc((size_t)n * 2);
  float *y = dalloc((size_t)n * 4), *hy = halloc((size_t)n * 4);
  pcgc_status st = pcgc_cuda_move(cu, PCGC_BF16, PCGC_F32, 2, b16, dims, zero, dx.data, dims, zero, zero, dims, false, &err);
  if (!st) st = pcgc_cuda_download(cu, h, b16, (size_t)n * 2, &err);
  const float *xv = x.data;
  int64_t bad = 0;
  for (int64_t i = 0; !st && i < n; i++) bad += h[i] != pcgc_bf16_from_f32(xv[i]);
  /* c16 = b16 over the box rows 3..20, cols 8..40, then c16 += b16 there: exactly twice */
  int64_t lo[2] = {3, 8}, len[2] = {17, 32};
  if (!st) st = pcgc_cuda_zero(cu, c16, (size_t)n * 2, &err);
  if (!st) st = pcgc_cuda_move(cu, PCGC_BF16, PCGC_BF16, 2, c16, dims, zero, b16, dims, zero, lo, len, false, &err);
  if (!st) st = pcgc_cuda_move(cu, PCGC_BF16, PCGC_BF16, 2, c16, dims, zero, b16, dims, zero, lo, len, true, &err);
  /* y = 0; y += c16 (widened): 2 x(rounded) in the box, 0 elsewhere */
  if (!st) st = pcgc_cuda_zero(cu, y, (size_t)n * 4, &err);
  if (!st) st = pcgc_cuda_move(cu, PCGC_F32, PCGC_BF16, 2, y, dims, zero, c16, dims, zero, zero, dims, true, &err);
  if (!st) st = pcgc_cuda_download(cu, hy, y, (size_t)n * 4, &err);
  for (int64_t i = 0; !st && i < n; i++) {
    int64_t r = i / dims[1], c = i % dims[1];
    bool in = r >= lo[0] && r < lo[0] + len[0] && c >= lo[1] && c < lo[1] + len[1];
    float want = in ? 2 * pcgc_f32_from_bf16(pcgc_bf16_from_f32(xv[i])) : 0;
    bad += hy[i] != want;
  }
  if (st) die("pcgc_cuda_move (bf16)", &err);
  char what[96];
  snprintf(what, sizeof what, "f32->bf16, bf16 box += bf16, f32 += bf16, %lld x %lld", (long long)dims[0],
           (long long)dims[1]);
  report("move (bf16)", what, (double)bad, NAN, 0, NULL); /* fwd: elements that differ */
  free_case();
}

int main(void) {
  pcgc_error err;
  pcgc_error_clear(&err);
  cu = pcgc_cuda_open(0, &err);
  if (!cu) {
    printf("SKIP: %s\n", err.message);
    return SKIP;
  }
  printf("device: %s\n", pcgc_cuda_describe(cu));
  test_linear();
  test_matmul();
  test_conv2d();
  test_pool2d();
  test_batchnorm();
  test_layernorm();
  test_rmsnorm();
  test_embedding();
  test_unary();
  test_binary();
  test_shape();
  test_reduce();
  test_attention();
  test_moe();
  test_losses();
  for (int relu = 0; relu < 2; relu++) {
    test_batchnorm_split(true, relu);
    test_batchnorm_split(false, relu);
  }
  test_optimizers();
  test_convert();
  test_zero_list();
  test_move_list();
  test_move_list_add();
  /* the GEMM-class cases again in each reduced precision, then back to f32 */
  for (size_t p = 1; p < sizeof precisions / sizeof precisions[0]; p++) {
    prec = &precisions[p];
    pcgc_cuda_set_math(cu, prec->math);
    test_linear();
    test_matmul();
    test_conv2d();
    test_attention();
  }
  prec = &precisions[0];
  pcgc_cuda_set_math(cu, PCGC_CUDA_MATH_F32);
  pcgc_cuda_close(cu);
  free_all();
  printf("%d cases, %d failed\n", n_cases, n_failed);
  return n_failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
