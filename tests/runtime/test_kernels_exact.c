/*
 * test_kernels_exact.c — the tight loops of the CPU kernels (vectorised
 * elementwise ops, broadcast runs, dropout, pooling) against their
 * definitions written out one element at a time, bit for bit.
 *
 * The kernels compute each value with the same operations in the same order
 * as the definitions below (f32 GELU: k_fastmath.h's float arithmetic), whatever loop, block or thread computes it, so
 * equality is exact: bitwise (memcmp) except where a NaN goes through
 * arithmetic, whose sign and payload IEEE leaves to the compiler's choice of
 * operand order (there every NaN compares equal). Inputs mix N(0, 1) values,
 * ties, signed zeros, NaN and infinities; gradient buffers start non-zero
 * (-0.0 included), since backward adds into them. Shapes are drawn at random
 * from a fixed seed: odd sizes, broadcast dims, windows with padding and
 * every stride, so the blocked loops' tails and the windows at the edges of
 * a plane are all visited.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "k_fastmath.h"
#include "kernels.h"

#include "../common/check_main.h"

/* ---------------------------------------------------------------- helpers */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static int64_t draw(int64_t lo, int64_t hi) { return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1)); }
static double unif(void) { return (double)(next_u64() >> 11) * 0x1.0p-53; }

static pcgc_buf mk(pcgc_dtype dt, int rank, const int64_t *dims) {
  pcgc_buf b;
  memset(&b, 0, sizeof b);
  b.dtype = dt;
  b.rank = rank;
  for (int d = 0; d < rank; d++) b.dims[d] = dims[d];
  size_t n = (size_t)pcgc_buf_numel(&b) * pcgc_dtype_size(dt);
  b.data = calloc(n ? n : 1, 1);
  ck_assert_ptr_nonnull(b.data);
  return b;
}

static double get(const pcgc_buf *b, int64_t i) {
  return b->dtype == PCGC_F32 ? (double)((const float *)b->data)[i] : ((const double *)b->data)[i];
}
static void set(pcgc_buf *b, int64_t i, double v) {
  if (b->dtype == PCGC_F32) ((float *)b->data)[i] = (float)v;
  else ((double *)b->data)[i] = v;
}
static void add(pcgc_buf *b, int64_t i, double v) {
  if (b->dtype == PCGC_F32) ((float *)b->data)[i] += (float)v;
  else ((double *)b->data)[i] += v;
}

/* Values: 0 N(0, 1); 1 ties (-2..2, zeros of both signs); 2 N(0, 1) with
 * a NaN, an infinity or a signed zero now and then. */
static void fill(pcgc_buf *b, int kind) {
  static const double special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0};
  for (int64_t i = 0; i < pcgc_buf_numel(b); i++) {
    double v = sqrt(-2 * log(unif() + 1e-300)) * cos(6.283185307179586 * unif());
    if (kind == 1) {
      int64_t q = draw(-2, 2);
      v = q ? (double)q : next_u64() & 1 ? -0.0 : 0.0;
    } else if (kind == 2 && unif() < 0.08) {
      v = special[next_u64() % 6];
    }
    set(b, i, v);
  }
}

/* Same bits, or (nan_equal) both NaN. */
static void expect_same(const pcgc_buf *got, const pcgc_buf *want, bool nan_equal, const char *what) {
  int64_t n = pcgc_buf_numel(got);
  size_t es = pcgc_dtype_size(got->dtype);
  for (int64_t i = 0; i < n; i++) {
    const char *g = (const char *)got->data + (size_t)i * es, *w = (const char *)want->data + (size_t)i * es;
    if (memcmp(g, w, es) == 0) continue;
    double a = get(got, i), b = get(want, i);
    if (nan_equal && isnan(a) && isnan(b)) continue;
    ck_abort_msg("%s: element %lld is %a, the definition gives %a", what, (long long)i, a, b);
  }
}

static pcgc_buf copy_of(const pcgc_buf *b) {
  pcgc_buf c = mk(b->dtype, b->rank, b->dims);
  memcpy(c.data, b->data, (size_t)pcgc_buf_numel(b) * pcgc_dtype_size(b->dtype));
  return c;
}

static const pcgc_dtype dtypes[2] = {PCGC_F32, PCGC_F64};

/* ------------------------------------------------------------------ unary */

static double ref_unary(pcgc_op_kind k, double x, double s, bool grad) {
  switch (k) {
  case PCGC_OP_RELU: return grad ? (x > 0 ? 1 : 0) : (x < 0 ? 0 : x);
  case PCGC_OP_GELU:
    return grad ? 0.5 * (1 + erf(x * 0.70710678118654752440)) + x * exp(-0.5 * x * x) * 0.39894228040143267794
                : 0.5 * x * (1 + erf(x * 0.70710678118654752440));
  case PCGC_OP_SIGMOID: {
    double y = x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
    return grad ? y * (1 - y) : y;
  }
  case PCGC_OP_SILU: {
    double y = x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
    return grad ? y * (1 + x * (1 - y)) : x * y;
  }
  case PCGC_OP_RELU6: return grad ? (x > 0 && x < 6 ? 1 : 0) : (x < 0 ? 0 : x > 6 ? 6 : x);
  case PCGC_OP_HARDSIGMOID: return grad ? (x > -3 && x < 3 ? 1.0 / 6 : 0) : (x <= -3 ? 0 : x >= 3 ? 1 : x / 6 + 0.5);
  case PCGC_OP_HARDSWISH:
    return grad ? (x < -3 ? 0 : x > 3 ? 1 : (2 * x + 3) / 6) : (x <= -3 ? x * 0.0 : x >= 3 ? x : x * (x + 3) / 6);
  case PCGC_OP_LEAKY_RELU: return grad ? (x > 0 ? 1 : s) : (x < 0 ? s * x : x);
  case PCGC_OP_TANH: return grad ? 1 - tanh(x) * tanh(x) : tanh(x);
  case PCGC_OP_EXP: return exp(x);
  case PCGC_OP_POW: return grad ? 3 * (x * x) : x * x * x; /* exponent 3 */
  case PCGC_OP_CLIP: return grad ? (x >= -0.5 && x <= 0.7 ? 1 : 0) : (x < -0.5 ? -0.5 : x > 0.7 ? 0.7 : x);
  case PCGC_OP_SCALAR_ADD: return grad ? 1 : x + s;
  case PCGC_OP_SCALAR_MUL: return grad ? s : x * s;
  default: return grad ? 1 / s : x / s; /* scalar_div */
  }
}

START_TEST(unary_matches_definition) {
  static const pcgc_op_kind ks[] = {PCGC_OP_RELU,       PCGC_OP_GELU,       PCGC_OP_SIGMOID,   PCGC_OP_SILU, PCGC_OP_RELU6,
                                    PCGC_OP_HARDSIGMOID, PCGC_OP_HARDSWISH, PCGC_OP_LEAKY_RELU, PCGC_OP_TANH,
                                    PCGC_OP_EXP,        PCGC_OP_SCALAR_ADD, PCGC_OP_SCALAR_MUL, PCGC_OP_SCALAR_DIV,
                                    PCGC_OP_POW,        PCGC_OP_CLIP};
  for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
    for (int t = 0; t < 2; t++)
      for (int rep = 0; rep < 6; rep++) {
        pcgc_op_kind k = ks[ki];
        pcgc_attrs a;
        pcgc_attrs_init(&a, k);
        double s = 0;
        if (k == PCGC_OP_LEAKY_RELU) {
          s = 0.05 + 0.3 * unif();
          pcgc_attrs_set_float(&a, "alpha", s);
        }
        if (k == PCGC_OP_POW) pcgc_attrs_set_float(&a, "exponent", 3);
        if (k == PCGC_OP_CLIP) {
          pcgc_attrs_set_float(&a, "min", -0.5);
          pcgc_attrs_set_float(&a, "max", 0.7);
        }
        if (k == PCGC_OP_SCALAR_ADD || k == PCGC_OP_SCALAR_MUL || k == PCGC_OP_SCALAR_DIV) {
          s = 0.25 + 3 * unif();
          pcgc_attrs_set_float(&a, "scalar", s);
        }
        int64_t dims[2] = {draw(1, 9), draw(1, 70)};
        pcgc_buf x = mk(dtypes[t], 2, dims), y = mk(dtypes[t], 2, dims), dy = mk(dtypes[t], 2, dims);
        pcgc_buf dx = mk(dtypes[t], 2, dims);
        fill(&x, rep % 3), fill(&dy, 0), fill(&dx, 1);
        pcgc_buf want_y = copy_of(&y), want_dx = copy_of(&dx);
        for (int64_t i = 0; i < pcgc_buf_numel(&x); i++) {
          set(&want_y, i, ref_unary(k, get(&x, i), s, false));
          add(&want_dx, i, get(&dy, i) * ref_unary(k, get(&x, i), s, true));
          if (k == PCGC_OP_GELU && dtypes[t] == PCGC_F32) { /* f32 GELU computes in float (k_fastmath.h) */
            float xf = (float)get(&x, i), p = (float)get(&dy, i) * kx_gelu_grad_f32(xf);
            set(&want_y, i, kx_gelu_f32(xf));
            set(&want_dx, i, get(&dx, i));
            add(&want_dx, i, p);
          }
        }
        ck_assert_int_eq(pcgc_cpu_forward(k, &a, 1, &x, 1, &y, NULL, NULL), PCGC_OK);
        ck_assert_int_eq(pcgc_cpu_backward(k, &a, 1, &x, 1, &y, &dy, &dx, NULL, NULL), PCGC_OK);
        expect_same(&y, &want_y, true, pcgc_op_name(k));
        expect_same(&dx, &want_dx, true, pcgc_op_name(k));
        free(x.data), free(y.data), free(dy.data), free(dx.data), free(want_y.data), free(want_dx.data);
      }
}
END_TEST

/* ---------------------------------------------------------------- dropout */

/* Kept iff pcgc_rng_uniform(seed, node, logical flat index) >= rate; kept
 * outputs x / (1 - rate), dropped ones +0; backward adds nothing where
 * dropped (a -0.0 in dx stays -0.0). */
START_TEST(dropout_matches_definition) {
  for (int t = 0; t < 2; t++)
    for (int rep = 0; rep < 20; rep++) {
      pcgc_attrs a;
      pcgc_attrs_init(&a, PCGC_OP_DROPOUT);
      double rate = rep == 0 ? 0.999 : unif();
      pcgc_attrs_set_float(&a, "rate", rate);
      int rank = (int)draw(1, 4);
      int64_t dims[PCGC_MAX_RANK];
      pcgc_piece p;
      memset(&p, 0, sizeof p);
      for (int d = 0; d < rank; d++) {
        p.global[d] = draw(1, 12);
        dims[d] = draw(1, p.global[d]);
        p.offset[d] = draw(0, p.global[d] - dims[d]);
      }
      pcgc_kernel_ctx ctx = {&p, &p, 11, 4242 + (uint64_t)rep, true, NULL, 0};
      pcgc_buf x = mk(dtypes[t], rank, dims), y = mk(dtypes[t], rank, dims), dy = mk(dtypes[t], rank, dims);
      pcgc_buf dx = mk(dtypes[t], rank, dims);
      fill(&x, 2), fill(&dy, 0), fill(&dx, 1);
      pcgc_buf want_y = copy_of(&y), want_dx = copy_of(&dx);
      double scale = 1 / (1 - rate);
      for (int64_t i = 0; i < pcgc_buf_numel(&x); i++) {
        uint64_t logical = 0;
        for (int64_t d = 0, r = i, div = pcgc_buf_numel(&x); d < rank; d++) {
          div /= dims[d];
          logical = logical * (uint64_t)p.global[d] + (uint64_t)(r / div + p.offset[d]);
          r %= div;
        }
        bool keep = pcgc_rng_uniform(ctx.seed, ctx.node, logical) >= rate;
        set(&want_y, i, keep ? get(&x, i) * scale : 0);
        if (keep) add(&want_dx, i, get(&dy, i) * scale);
      }
      ck_assert_int_eq(pcgc_cpu_forward(PCGC_OP_DROPOUT, &a, 1, &x, 1, &y, &ctx, NULL), PCGC_OK);
      ck_assert_int_eq(pcgc_cpu_backward(PCGC_OP_DROPOUT, &a, 1, &x, 1, &y, &dy, &dx, &ctx, NULL), PCGC_OK);
      expect_same(&y, &want_y, true, "dropout");
      expect_same(&dx, &want_dx, false, "dropout backward");
      free(x.data), free(y.data), free(dy.data), free(dx.data), free(want_y.data), free(want_dx.data);
    }
}
END_TEST

/* ----------------------------------------------------------------- binary */

static double ref_binary(pcgc_op_kind k, double a, double b) {
  return k == PCGC_OP_ADD ? a + b : k == PCGC_OP_SUB ? a - b : k == PCGC_OP_MUL ? a * b : a / b;
}
static double ref_grad(pcgc_op_kind k, int j, double dy, double a, double b) {
  switch (k) {
  case PCGC_OP_ADD: return dy;
  case PCGC_OP_SUB: return j ? -dy : dy;
  case PCGC_OP_MUL: return j ? dy * a : dy * b;
  default: return j ? -dy * a / (b * b) : dy / b;
  }
}

/* Flat index in operand x (right-aligned, size-1 dims broadcast) of output
 * index idx[]. */
static int64_t bcast_index(const pcgc_buf *x, int ry, const int64_t *idx) {
  int64_t f = 0;
  for (int d = 0; d < x->rank; d++) f = f * x->dims[d] + (x->dims[d] == 1 ? 0 : idx[ry - x->rank + d]);
  return f;
}

/* Output element i: each operand's value; backward sums each operand
 * element's terms in double in the output's row-major order, then adds. */
START_TEST(binary_matches_definition) {
  static const pcgc_op_kind ks[] = {PCGC_OP_ADD, PCGC_OP_SUB, PCGC_OP_MUL, PCGC_OP_DIV};
  for (int ki = 0; ki < 4; ki++)
    for (int t = 0; t < 2; t++)
      for (int rep = 0; rep < 25; rep++) {
        pcgc_op_kind k = ks[ki];
        int ry = (int)draw(0, 4);
        int64_t y_dims[PCGC_MAX_RANK];
        for (int d = 0; d < ry; d++) y_dims[d] = draw(1, 7);
        if (ry) y_dims[ry - 1] = draw(1, 40);
        int rank[2];
        int64_t dims[2][PCGC_MAX_RANK];
        for (int j = 0; j < 2; j++) {
          rank[j] = rep % 5 == 0 ? ry : (int)draw(0, ry);
          for (int d = 0; d < rank[j]; d++) {
            int64_t yd = y_dims[ry - rank[j] + d];
            dims[j][d] = rep % 5 != 0 && next_u64() % 3 == 0 ? 1 : yd;
          }
        }
        /* the output is what the operands broadcast to (a subset of y_dims) */
        pcgc_ptensor tin[2], tout;
        for (int j = 0; j < 2; j++) pcgc_ptensor_init(&tin[j], dtypes[t], rank[j], dims[j]);
        pcgc_attrs a;
        pcgc_attrs_init(&a, k);
        ck_assert_int_eq(pcgc_op_infer(k, &a, 2, tin, &tout, NULL), PCGC_OK);
        ry = tout.rank;
        memcpy(y_dims, tout.dims, sizeof y_dims);
        pcgc_buf in[2] = {mk(dtypes[t], rank[0], dims[0]), mk(dtypes[t], rank[1], dims[1])};
        pcgc_buf din[2] = {mk(dtypes[t], rank[0], dims[0]), mk(dtypes[t], rank[1], dims[1])};
        fill(&in[0], 1), fill(&in[1], 0), fill(&din[0], 1), fill(&din[1], 1);
        pcgc_buf y = mk(dtypes[t], ry, y_dims), dy = mk(dtypes[t], ry, y_dims);
        fill(&dy, 1);
        pcgc_buf want_y = copy_of(&y), want_din[2] = {copy_of(&din[0]), copy_of(&din[1])};
        double *acc[2];
        for (int j = 0; j < 2; j++) acc[j] = calloc((size_t)pcgc_buf_numel(&in[j]), sizeof(double));
        int64_t idx[PCGC_MAX_RANK] = {0};
        for (int64_t i = 0; i < pcgc_buf_numel(&y); i++) {
          int64_t ia = bcast_index(&in[0], ry, idx), ib = bcast_index(&in[1], ry, idx);
          double va = get(&in[0], ia), vb = get(&in[1], ib);
          set(&want_y, i, ref_binary(k, va, vb));
          acc[0][ia] += ref_grad(k, 0, get(&dy, i), va, vb);
          acc[1][ib] += ref_grad(k, 1, get(&dy, i), va, vb);
          for (int d = ry - 1; d >= 0 && ++idx[d] == y_dims[d]; d--) idx[d] = 0;
        }
        for (int j = 0; j < 2; j++)
          for (int64_t e = 0; e < pcgc_buf_numel(&in[j]); e++) add(&want_din[j], e, acc[j][e]);
        ck_assert_int_eq(pcgc_cpu_forward(k, &a, 2, in, 1, &y, NULL, NULL), PCGC_OK);
        ck_assert_int_eq(pcgc_cpu_backward(k, &a, 2, in, 1, &y, &dy, din, NULL, NULL), PCGC_OK);
        expect_same(&y, &want_y, true, pcgc_op_name(k));
        expect_same(&din[0], &want_din[0], true, "gradient of a");
        expect_same(&din[1], &want_din[1], true, "gradient of b");
        for (int j = 0; j < 2; j++) free(in[j].data), free(din[j].data), free(want_din[j].data), free(acc[j]);
        free(y.data), free(dy.data), free(want_y.data);
      }
}
END_TEST

/* ----------------------------------------------------------------- pool2d */

/* Max: the first maximum of the window inside the plane in row-major
 * order, a NaN winning over everything before it; avg: the window's
 * elements inside the plane summed in the buffer's type in row-major order,
 * times 1/(kernel area, or plane area for global pooling); backward in
 * (oh, ow) order. */
START_TEST(pool2d_matches_definition) {
  for (int t = 0; t < 2; t++)
    for (int rep = 0; rep < 150; rep++) {
      bool is_max = rep & 1;
      int64_t kh = draw(1, 4), kw = draw(1, 4), sh = draw(1, 3), sw = draw(1, 3);
      if (rep % 6 < 2) kh = kw = sh = sw = 2; /* the CNN's pooling */
      if (rep % 6 == 2) kh = kw = 3, sh = sw = draw(1, 2);
      int64_t ph = draw(0, kh / 2), pw = draw(0, kw / 2);
      int64_t H = draw(kh, 12), W = draw(kw, rep % 10 == 0 ? 70 : 12), NC = draw(1, 6);
      pcgc_attrs a;
      pcgc_attrs_init(&a, PCGC_OP_POOL2D);
      pcgc_attrs_set_int(&a, "kind", is_max ? PCGC_POOL_MAX : PCGC_POOL_AVG);
      if (rep % 10 == 5) { /* global: the window is the plane */
        pcgc_attrs_set_int(&a, "global", 1);
        kh = H, kw = W, sh = sw = 1, ph = pw = 0;
      } else {
        pcgc_attrs_set_ints(&a, "kernel", 2, (int64_t[]){kh, kw});
        pcgc_attrs_set_ints(&a, "stride", 2, (int64_t[]){sh, sw});
        pcgc_attrs_set_ints(&a, "padding", 2, (int64_t[]){ph, pw});
      }
      int64_t OH = (H + 2 * ph - kh) / sh + 1, OW = (W + 2 * pw - kw) / sw + 1;
      pcgc_buf x = mk(dtypes[t], 4, (int64_t[]){1, NC, H, W}), dx = mk(dtypes[t], 4, (int64_t[]){1, NC, H, W});
      pcgc_buf y = mk(dtypes[t], 4, (int64_t[]){1, NC, OH, OW}), dy = mk(dtypes[t], 4, (int64_t[]){1, NC, OH, OW});
      fill(&x, rep % 3), fill(&dx, 1), fill(&dy, 0);
      pcgc_buf want_y = copy_of(&y), want_dx = copy_of(&dx);
      bool f32 = dtypes[t] == PCGC_F32;
      double inv = f32 ? (double)(float)(1.0 / (double)(kh * kw)) : 1.0 / (double)(kh * kw);
      for (int64_t c = 0; c < NC; c++)
        for (int64_t oh = 0; oh < OH; oh++)
          for (int64_t ow = 0; ow < OW; ow++) {
            int64_t o = (c * OH + oh) * OW + ow, best = -1;
            double s = 0;
            for (int64_t ih = oh * sh - ph; ih < oh * sh - ph + kh; ih++)
              for (int64_t iw = ow * sw - pw; iw < ow * sw - pw + kw; iw++) {
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                int64_t e = (c * H + ih) * W + iw;
                double v = get(&x, e);
                if (best < 0 || v > get(&x, best) || isnan(v)) best = e;
                s = f32 ? (double)((float)s + (float)v) : s + v;
              }
            if (is_max) {
              set(&want_y, o, get(&x, best));
              add(&want_dx, best, get(&dy, o));
              continue;
            }
            set(&want_y, o, f32 ? (double)((float)s * (float)inv) : s * inv);
            double d = f32 ? (double)((float)get(&dy, o) * (float)inv) : get(&dy, o) * inv;
            for (int64_t ih = oh * sh - ph; ih < oh * sh - ph + kh; ih++)
              for (int64_t iw = ow * sw - pw; iw < ow * sw - pw + kw; iw++)
                if (ih >= 0 && ih < H && iw >= 0 && iw < W) add(&want_dx, (c * H + ih) * W + iw, d);
          }
      ck_assert_int_eq(pcgc_cpu_forward(PCGC_OP_POOL2D, &a, 1, &x, 1, &y, NULL, NULL), PCGC_OK);
      ck_assert_int_eq(pcgc_cpu_backward(PCGC_OP_POOL2D, &a, 1, &x, 1, &y, &dy, &dx, NULL, NULL), PCGC_OK);
      /* max pooling moves values: every bit; averages sum NaNs: NaN for NaN */
      expect_same(&y, &want_y, !is_max, is_max ? "max pooling" : "average pooling");
      expect_same(&dx, &want_dx, !is_max, is_max ? "max pooling backward" : "average pooling backward");
      free(x.data), free(dx.data), free(y.data), free(dy.data), free(want_y.data), free(want_dx.data);
    }
}
END_TEST

static Suite *exact_suite(void) {
  Suite *s = suite_create("kernels_exact");
  TCase *tc = tcase_create("definitions");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, unary_matches_definition);
  tcase_add_test(tc, dropout_matches_definition);
  tcase_add_test(tc, binary_matches_definition);
  tcase_add_test(tc, pool2d_matches_definition);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(exact_suite)
