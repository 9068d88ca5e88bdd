/*
 * k_dense_check.h — the checks and geometry of the dense families (linear,
 * matmul, batch_matmul, conv2d, pool2d, embedding, attention), shared by
 * the CPU kernels (k_dense.c) and the CUDA kernels (runtime/cuda/
 * cu_dense.cu): each family's buffers are checked against each other (the
 * shapes inference accepts, on a piece's local dims) and turned into a
 * dtype-free geometry. Only descriptors, attributes and pieces are read,
 * never the data.
 *
 * A family's check is pcgc__kd_prepare, then pcgc__kd_<family>_geo, then
 * whatever the backend adds (the sizes its BLAS takes, the embedding's
 * index range on the CPU), then the output's shape (pcgc__kd_need_out*),
 * in that order on both backends, so both report the same first error.
 * pool2d's geometry checks its output too.
 */
#ifndef PCGC_RUNTIME_CPU_K_DENSE_CHECK_H
#define PCGC_RUNTIME_CPU_K_DENSE_CHECK_H

#include "kernels_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dense_geo { /* linear, matmul: y[rows, N] = x[rows, K] w[K, N] (+ b) */
  int64_t rows, K, N;
  bool bias;
  int act;
} dense_geo;

typedef struct bmm_geo { /* batch x ([M, K] by [K, N] or [N, K]) */
  int64_t batch, M, K, N;
  bool tb;
} bmm_geo;

typedef struct conv_geo {
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t groups, Cg, Og;
  int64_t ckk, ohw;      /* rows (Cg*KH*KW) and columns (OH*OW) of one group's im2col matrix */
  bool bias, pointwise;  /* pointwise: 1x1, stride 1, no padding: x is its own im2col */
  bool direct;           /* x and w not empty (CUDA runs cuDNN only then; else the convolution is 0) */
  int act;
} conv_geo;

typedef struct pool_geo { /* global pooling is a window of the whole (local) plane */
  int64_t NC, H, W, OH, OW, KH, KW, sh, sw, ph, pw;
  bool is_max;
  double div;            /* divisor of the window sum for averages */
} pool_geo;

typedef struct emb_geo {
  int64_t n_bags, L, D;  /* bag none: n_bags = number of ids, L = 1 */
  int64_t rows, row0, V; /* the table piece holds logical rows [row0, row0 + rows) of V */
  double scale;          /* 1, or 1 / logical bag length for bag=mean */
} emb_geo;

typedef struct attn_geo {
  int64_t B, Sq, Sk, Eq, Ek, Ev, E, Eo; /* local sizes; E = this piece's projection width */
  int64_t F, group;                     /* grouped-query attention: this piece's k/v projection width
                                         * (F = nh / group * hd); each k/v head serves `group` query
                                         * heads (heads / kv_heads; 1 for multi-head attention) */
  int64_t hd, nh;                       /* head size, heads in this piece */
  int64_t heads, Sq_g, b0, q0, h0;      /* logical head count, query length, offsets */
  int64_t bc, hc;                       /* CUDA: batch entries and heads per score chunk */
  bool bias, bias_o;                    /* bq/bk/bv (10 or 11 inputs), bo (11) */
  bool causal, dropout_on, rope;
  double p, scale, theta;               /* theta: rope's base (rope_theta) */
  uint64_t key, thr;                    /* dropout: pcgc__rng_key(seed, node), pcgc__rng_threshold(p) */
} attn_geo;

/* "f32[2, 3]" */
typedef struct pcgc__kd_shape {
  char s[160];
} pcgc__kd_shape;
pcgc__kd_shape pcgc__kd_shp(const pcgc_buf *b);

/* Arity, attributes, well-formed buffers, one float dtype (*dt) for the
 * inputs and the output; for backward also dout and din against out and in.
 * f32_only: the backend computes in f32 only (CUDA), else in f32 and f64. */
pcgc_status pcgc__kd_prepare(const pcgc__kargs *k, bool bwd, bool f32_only, pcgc_dtype *dt);

/* The output must be the inputs' dtype and [dims]. */
pcgc_status pcgc__kd_need_out(const pcgc__kargs *k, int rank, const int64_t *dims);
/* The output must be input 0's dims[0 .. at) followed by n. */
pcgc_status pcgc__kd_need_out_at(const pcgc__kargs *k, int at, int64_t n);

/* Each geometry, up to what the backend adds; the output is checked by the
 * caller (pcgc__kd_need_out_at(k, x->rank - 1, g->N) for linear, matmul and
 * batch_matmul; *keep and g->D for embedding), except pool2d's. */
pcgc_status pcgc__kd_dense_geo(const pcgc__kargs *k, dense_geo *g);
pcgc_status pcgc__kd_bmm_geo(const pcgc__kargs *k, bmm_geo *g);
pcgc_status pcgc__kd_conv_geo(const pcgc__kargs *k, conv_geo *g);
pcgc_status pcgc__kd_pool_geo(const pcgc__kargs *k, pool_geo *g);
pcgc_status pcgc__kd_emb_geo(const pcgc__kargs *k, emb_geo *g, int *keep);
pcgc_status pcgc__kd_attn_geo(const pcgc__kargs *k, attn_geo *g);

#ifdef __cplusplus
}
#endif

#endif
