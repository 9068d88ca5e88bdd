/*
 * k_dense.c — CPU kernels of the dense families: linear, matmul,
 * batch_matmul, conv2d, pool2d, embedding and attention; forward and
 * backward, f32 and f64.
 *
 * This file checks the buffers against each other (the shapes inference
 * accepts, on a piece's local dims) and turns them into a dtype-free
 * geometry per op, both with k_dense_check.c (shared with the CUDA kernels),
 * and dispatches on the dtype. The arithmetic is in k_dense_impl.h,
 * compiled once per float type. Every matrix product is a row-major BLAS
 * GEMM: linear and matmul one GEMM over the flattened leading dims,
 * batch_matmul one per batch entry, conv2d im2col plus one GEMM per image and
 * group, attention GEMMs for the projections and for each head's scores and
 * context.
 *
 * Backward recomputes what forward did not keep rather than asking the caller
 * for more: the pre-activation for a fused GELU (one more GEMM) and the
 * attention probabilities (one more score GEMM and softmax per head).
 *
 * Scratch (im2col columns, attention projections) is malloc'ed per call and
 * freed before returning; an allocation failure returns PCGC_ERR_NOMEM.
 *
 * Attention dropout: the keep/drop decision for probability element
 * (b, h, i, j) — batch b, head h, query i, key j, all LOGICAL indices — is
 *     pcgc_rng_uniform(ctx->seed, ctx->node, ((b * heads + h) * Sq + i) * Sk + j) >= dropout
 * (heads, Sq, Sk logical sizes), i.e. the counter is the row-major flat index
 * of the logical [B, heads, Sq, Sk] probability tensor, so a piece sharded by
 * batch, query rows or heads draws exactly its part of the sequential mask.
 * Kept probabilities are scaled by 1 / (1 - dropout), as in PyTorch.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "k_common_impl.h"
#include "k_dense_check.h"
#include "k_fastmath.h"

#define TRY(x)                     \
  do {                             \
    pcgc_status s_ = (x);          \
    if (s_ != PCGC_OK) return s_;  \
  } while (0)

static int64_t get_id(const pcgc_buf *b, int64_t i) {
  return b->dtype == PCGC_I32 ? (int64_t)((const int32_t *)b->data)[i] : ((const int64_t *)b->data)[i];
}

/* The dropout counter of probability (b, h, i, 0) (local indices); key j of
 * that row is kept iff (pcgc__rng_u64_at(g->key, row + j) >> 11) >= g->thr,
 * i.e. pcgc_rng_uniform(seed, node, row + j) >= p. */
static uint64_t attn_row(const attn_geo *g, int64_t b, int64_t h, int64_t i) {
  return (((uint64_t)(g->b0 + b) * (uint64_t)g->heads + (uint64_t)(g->h0 + h)) * (uint64_t)g->Sq_g +
          (uint64_t)(g->q0 + i)) * (uint64_t)g->Sk;
}

/* The window of output o along one dim clipped to the plane: [*lo, *hi). */
static inline void pool_span(int64_t o, int64_t stride, int64_t pad, int64_t k, int64_t n, int64_t *lo, int64_t *hi) {
  int64_t s = o * stride - pad;
  *lo = s < 0 ? 0 : s;
  *hi = s + k < n ? s + k : n;
}

/* Outputs [*lo, *hi) of a row whose windows lie inside the columns. */
static void pool_inner_cols(const pool_geo *g, int64_t *lo, int64_t *hi) {
  *lo = (g->pw + g->sw - 1) / g->sw;                       /* ow * sw >= pw */
  *hi = g->W + g->pw < g->KW ? 0 : (g->W + g->pw - g->KW) / g->sw + 1; /* ow * sw - pw + KW <= W */
  if (*hi > g->OW) *hi = g->OW;
  if (*lo > *hi) *lo = *hi;
}

/* Scratch: n elements of `size` bytes (at least one), or NULL with an error set. */
static void *kalloc(const pcgc__kargs *k, int64_t n, size_t size) {
  if (n < 1) n = 1;
  if ((uint64_t)n > SIZE_MAX / size) {
    pcgc_error_set(k->err, PCGC_ERR_NOMEM, "%s: scratch of %lld elements is too large", pcgc_op_name(k->kind),
                   (long long)n);
    return NULL;
  }
  void *p = malloc((size_t)n * size);
  if (!p)
    pcgc_error_set(k->err, PCGC_ERR_NOMEM, "%s: out of memory (%zu bytes of scratch)", pcgc_op_name(k->kind),
                   (size_t)n * size);
  return p;
}

/* Rotary embeddings: cs[2 * (s * half + i)] = cos, [.. + 1] = sin of
 * (p0 + s) * theta^(-2i / hd) for positions s < S, i < half = hd / 2, in
 * double; NULL with an error set when out of memory. */
static double *rope_table(const pcgc__kargs *k, const attn_geo *g, int64_t p0, int64_t S) {
  int64_t half = g->hd / 2;
  double *cs = kalloc(k, 2 * S * half, sizeof *cs);
  if (!cs) return NULL;
  for (int64_t i = 0; i < half; i++) {
    double inv = pow(g->theta, -2.0 * (double)i / (double)g->hd);
    for (int64_t s = 0; s < S; s++) {
      double a = (double)(p0 + s) * inv;
      cs[2 * (s * half + i)] = cos(a);
      cs[2 * (s * half + i) + 1] = sin(a);
    }
  }
  return cs;
}

/* The arithmetic, once per float type. */
#define REAL float
#define UREAL uint32_t
#define SFX(name) name##_f32
#define GEMM cblas_sgemm
#define RX(fn) fn##f
#include "k_dense_impl.h"
#define REAL double
#define UREAL uint64_t
#define SFX(name) name##_f64
#define GEMM cblas_dgemm
#define RX(fn) fn
#include "k_dense_impl.h"

/* ---------------------------------------------------- checks
 * The checks and geometry are k_dense_check.c's, shared with the CUDA
 * kernels; the CPU adds BLAS's int sizes and the embedding's index range. */

/* BLAS takes int sizes. */
static pcgc_status blas_fits(const pcgc__kargs *k, int n, const int64_t *v) {
  for (int i = 0; i < n; i++)
    if (v[i] > INT_MAX) return pcgc__kfail(k, "a matrix dimension of %lld is too large for BLAS", (long long)v[i]);
  return PCGC_OK;
}

/* --------------------------------------------------------- linear, matmul */

static pcgc_status dense_check(const pcgc__kargs *k, dense_geo *g) {
  TRY(pcgc__kd_dense_geo(k, g));
  TRY(blas_fits(k, 3, (int64_t[]){g->rows, g->K, g->N}));
  return pcgc__kd_need_out_at(k, k->in[0].rank - 1, g->N);
}

static pcgc_status dense_kernel(const pcgc__kargs *k, bool bwd) {
  pcgc_dtype dt;
  dense_geo g;
  TRY(pcgc__kd_prepare(k, bwd, false, &dt));
  TRY(dense_check(k, &g));
  return bwd ? KX_BY_DTYPE(dt, dense_bwd, k, &g) : KX_BY_DTYPE(dt, dense_fwd, k, &g);
}

pcgc_status pcgc__cpu_fwd_linear(const pcgc__kargs *k) { return dense_kernel(k, false); }
pcgc_status pcgc__cpu_bwd_linear(const pcgc__kargs *k) { return dense_kernel(k, true); }
pcgc_status pcgc__cpu_fwd_matmul(const pcgc__kargs *k) { return dense_kernel(k, false); }
pcgc_status pcgc__cpu_bwd_matmul(const pcgc__kargs *k) { return dense_kernel(k, true); }

/* ----------------------------------------------------------- batch_matmul */

static pcgc_status bmm_check(const pcgc__kargs *k, bmm_geo *g) {
  TRY(pcgc__kd_bmm_geo(k, g));
  TRY(blas_fits(k, 3, (int64_t[]){g->M, g->K, g->N}));
  return pcgc__kd_need_out_at(k, k->in[0].rank - 1, g->N);
}

static pcgc_status bmm_kernel(const pcgc__kargs *k, bool bwd) {
  pcgc_dtype dt;
  bmm_geo g;
  TRY(pcgc__kd_prepare(k, bwd, false, &dt));
  TRY(bmm_check(k, &g));
  return bwd ? KX_BY_DTYPE(dt, bmm_bwd, k, &g) : KX_BY_DTYPE(dt, bmm_fwd, k, &g);
}

pcgc_status pcgc__cpu_fwd_bmm(const pcgc__kargs *k) { return bmm_kernel(k, false); }
pcgc_status pcgc__cpu_bwd_bmm(const pcgc__kargs *k) { return bmm_kernel(k, true); }

/* ----------------------------------------------------------------- conv2d */

static pcgc_status conv_check(const pcgc__kargs *k, conv_geo *g) {
  TRY(pcgc__kd_conv_geo(k, g));
  TRY(blas_fits(k, 3, (int64_t[]){g->ckk, g->ohw, g->Og}));
  return pcgc__kd_need_out(k, 4, (int64_t[]){g->N, g->O, g->OH, g->OW});
}

static pcgc_status conv_kernel(const pcgc__kargs *k, bool bwd) {
  pcgc_dtype dt;
  conv_geo g;
  TRY(pcgc__kd_prepare(k, bwd, false, &dt));
  TRY(conv_check(k, &g));
  return bwd ? KX_BY_DTYPE(dt, conv_bwd, k, &g) : KX_BY_DTYPE(dt, conv_fwd, k, &g);
}

pcgc_status pcgc__cpu_fwd_conv2d(const pcgc__kargs *k) { return conv_kernel(k, false); }
pcgc_status pcgc__cpu_bwd_conv2d(const pcgc__kargs *k) { return conv_kernel(k, true); }

/* ----------------------------------------------------------------- pool2d */


static pcgc_status pool_kernel(const pcgc__kargs *k, bool bwd) {
  pcgc_dtype dt;
  pool_geo g;
  TRY(pcgc__kd_prepare(k, bwd, false, &dt));
  TRY(pcgc__kd_pool_geo(k, &g));
  if (bwd) {
    if (k->din[0].data) KX_BY_DTYPE(dt, pool_bwd, k, &g);
  } else {
    KX_BY_DTYPE(dt, pool_fwd, k, &g);
  }
  return PCGC_OK;
}

pcgc_status pcgc__cpu_fwd_pool2d(const pcgc__kargs *k) { return pool_kernel(k, false); }
pcgc_status pcgc__cpu_bwd_pool2d(const pcgc__kargs *k) { return pool_kernel(k, true); }

/* -------------------------------------------------------------- embedding */

static pcgc_status emb_check(const pcgc__kargs *k, emb_geo *g) {
  const pcgc_buf *idx = &k->in[0];
  int keep;
  TRY(pcgc__kd_emb_geo(k, g, &keep));
  TRY(pcgc__kd_need_out_at(k, keep, g->D));
  int64_t n = pcgc_buf_numel(idx);
  for (int64_t i = 0; i < n; i++) {
    int64_t id = get_id(idx, i);
    if (id < 0 || id >= g->V)
      return pcgc__kfail(k, "index %lld (element %lld of indices %s) is outside the table's rows [0, %lld)",
                         (long long)id, (long long)i, pcgc__kd_shp(idx).s, (long long)g->V);
  }
  return PCGC_OK;
}

static pcgc_status emb_kernel(const pcgc__kargs *k, bool bwd) {
  pcgc_dtype dt;
  emb_geo g;
  TRY(pcgc__kd_prepare(k, bwd, false, &dt));
  TRY(emb_check(k, &g));
  if (bwd) {
    if (k->din[1].data) KX_BY_DTYPE(dt, emb_bwd, k, &g);
  } else {
    KX_BY_DTYPE(dt, emb_fwd, k, &g);
  }
  return PCGC_OK;
}

pcgc_status pcgc__cpu_fwd_embedding(const pcgc__kargs *k) { return emb_kernel(k, false); }
pcgc_status pcgc__cpu_bwd_embedding(const pcgc__kargs *k) { return emb_kernel(k, true); }

/* -------------------------------------------------------------- attention */

static pcgc_status attn_check(const pcgc__kargs *k, attn_geo *g) {
  TRY(pcgc__kd_attn_geo(k, g));
  TRY(blas_fits(k, 9, (int64_t[]){g->B * g->Sq, g->B * g->Sk, g->Sq, g->Sk, g->Eq, g->Ek, g->Ev, g->E, g->Eo}));
  return pcgc__kd_need_out(k, 3, (int64_t[]){g->B, g->Sq, g->Eo});
}

static pcgc_status attn_kernel(const pcgc__kargs *k, bool bwd) {
  pcgc_dtype dt;
  attn_geo g;
  TRY(pcgc__kd_prepare(k, bwd, false, &dt));
  TRY(attn_check(k, &g));
  return bwd ? KX_BY_DTYPE(dt, attn_bwd, k, &g) : KX_BY_DTYPE(dt, attn_fwd, k, &g);
}

pcgc_status pcgc__cpu_fwd_attention(const pcgc__kargs *k) { return attn_kernel(k, false); }
pcgc_status pcgc__cpu_bwd_attention(const pcgc__kargs *k) { return attn_kernel(k, true); }

/* ---------------------------------------------------------- expert_linear */

/* x[G, X, C, M] w[X, M, N] (b[X, N]): the linear kernel once per (group,
 * expert) on that expert's slots, rows C of x's block by w[e]. */
static pcgc_status expert_kernel(const pcgc__kargs *k, bool bwd) {
  TRY(pcgc__kcheck(k, bwd, 0));
  const pcgc_buf *x = &k->in[0], *w = &k->in[1];
  pcgc_dtype dt = x->dtype;
  int64_t G = x->dims[0], X = x->dims[1], C = x->dims[2], M = x->dims[3], N = w->dims[2];
  TRY(blas_fits(k, 3, (int64_t[]){C, M, N}));
  bool bias = k->n_in == 3;
  dense_geo g = {C, M, N, bias, (int)pcgc_attrs_int(k->a, "act")};
  size_t es = pcgc_dtype_size(dt);
  pcgc_attrs la;
  pcgc_attrs_init(&la, PCGC_OP_LINEAR);
  pcgc_attrs_set_int(&la, "act", g.act);
  for (int64_t gi = 0; gi < G; gi++)
    for (int64_t e = 0; e < X; e++) {
      /* the (gi, e) blocks as the buffers of one linear call */
      int64_t xo = ((gi * X + e) * C) * M, yo = ((gi * X + e) * C) * N;
      pcgc_buf in[3], out, dout, din[3];
      in[0] = (pcgc_buf){dt, 2, {C, M}, (char *)x->data + xo * es};
      in[1] = (pcgc_buf){dt, 2, {M, N}, (char *)w->data + e * M * N * es};
      if (bias) in[2] = (pcgc_buf){dt, 1, {N}, (char *)k->in[2].data + e * N * es};
      out = (pcgc_buf){dt, 2, {C, N}, (char *)k->out[0].data + yo * es};
      pcgc__kargs sub = {PCGC_OP_LINEAR, &la, k->n_in, in, 1, &out, NULL, NULL, k->ctx, k->err};
      if (bwd) {
        dout = (pcgc_buf){dt, 2, {C, N}, (char *)k->dout[0].data + yo * es};
        din[0] = in[0], din[1] = in[1];
        din[0].data = kx_want(&k->din[0]) ? (char *)k->din[0].data + xo * es : NULL;
        din[1].data = kx_want(&k->din[1]) ? (char *)k->din[1].data + e * M * N * es : NULL;
        if (bias) {
          din[2] = in[2];
          din[2].data = kx_want(&k->din[2]) ? (char *)k->din[2].data + e * N * es : NULL;
        }
        sub.dout = &dout;
        sub.din = din;
        TRY(KX_BY_DTYPE(dt, dense_bwd, &sub, &g));
      } else {
        TRY(KX_BY_DTYPE(dt, dense_fwd, &sub, &g));
      }
    }
  return PCGC_OK;
}

pcgc_status pcgc__cpu_fwd_expert_linear(const pcgc__kargs *k) { return expert_kernel(k, false); }
pcgc_status pcgc__cpu_bwd_expert_linear(const pcgc__kargs *k) { return expert_kernel(k, true); }
