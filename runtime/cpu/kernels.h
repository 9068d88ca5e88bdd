/*
 * kernels.h — CPU kernels: forward and backward of every ordinary PCG
 * operator, in f32 and f64, plus initialisation, synthetic data and the
 * optimizers. The reference interpreter (runtime/reference) and the CPU
 * backend both call these; they are the numerical oracle of pcgc.
 *
 * Tensors are dense row-major buffers (pcgc_buf). A kernel may run on a
 * *piece* of a logical tensor (one shard of a parallel tensor): the optional
 * pcgc_kernel_ctx says where each piece sits in its logical tensor, which a
 * few kernels need:
 *   - embedding: a table piece holds rows [offset[0], offset[0]+dims[0]) of
 *     the logical table; other ids contribute zero (partial sums);
 *   - means (reduce_mean, bag=mean, global average pooling, the losses with
 *     reduction=mean) divide by the *logical* count, so pieces add up;
 *   - dropout draws its mask from the logical element index, so every piece
 *     reproduces its part of the sequential mask;
 *   - attention with causal=true masks by logical query/key positions; a
 *     piece of a head-split attention takes the head size from the logical
 *     projection width (ctx->in[3].global[1] / heads) and its first head
 *     from its column offset; attention dropout keeps probability (b, h, i, j)
 *     iff pcgc_rng_uniform(seed, node, ((b*heads + h)*Sq + i)*Sk + j) >= p,
 *     all indices logical (every backend must draw the same mask).
 * Batch normalisation over a sharded batch needs statistics of the whole
 * batch: the interpreter uses the split entry points below for that case.
 *
 * Conventions:
 *   - Within one op every floating-point tensor has the same dtype, F32 or
 *     F64; indices (embedding ids, class labels) are I32 or I64.
 *   - Forward writes every output buffer completely.
 *   - Backward ADDS each input's gradient into din[i] (callers zero them
 *     first); din[i].data == NULL means that gradient is not wanted (integer
 *     inputs never get one). Backward may read the forward inputs and outputs.
 *   - Weight layouts: linear/matmul weight [K, N] (y = x W + b); conv2d
 *     [O, C/groups, kh, kw]; attention wq [Eq, E], wk [Ek, E], wv [Ev, E],
 *     wo [E, Eo]. Semantics follow PyTorch: GELU is the erf form, variance in
 *     normalisation is biased, average pooling counts padding
 *     (count_include_pad), attention scales scores by 1/sqrt(E/heads).
 *   - Errors (shape mismatch at run time, unsupported dtype, an index out of
 *     range) return a status with a message naming the operator.
 */
#ifndef PCGC_RUNTIME_CPU_KERNELS_H
#define PCGC_RUNTIME_CPU_KERNELS_H

#include "pcg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pcgc_buf {
  pcgc_dtype dtype;               /* F32, F64, I32 or I64 */
  int rank;
  int64_t dims[PCGC_MAX_RANK];    /* dims of this buffer (a piece: its local dims) */
  void *data;                     /* row-major, contiguous */
} pcgc_buf;

int64_t pcgc_buf_numel(const pcgc_buf *b);

/* Threads of one kernel call (OpenBLAS's and the parallel loops'): sets n
 * (n >= 1) and returns what it was. Callers that run kernels on several
 * threads of their own (the rule checker) set 1 meanwhile. */
int pcgc_cpu_set_threads(int n);

/* Where a piece sits in its logical tensor. */
typedef struct pcgc_piece {
  int64_t global[PCGC_MAX_RANK];  /* logical dims */
  int64_t offset[PCGC_MAX_RANK];  /* first logical index of the piece in each dim */
} pcgc_piece;

typedef struct pcgc_kernel_ctx {
  const pcgc_piece *in;   /* one per input, or NULL: every input is whole */
  const pcgc_piece *out;  /* one per output, or NULL: every output is whole */
  uint64_t seed;          /* run seed (dropout) */
  uint64_t node;          /* stable id of the node (dropout stream), e.g. a hash of its name */
  bool training;          /* dropout is active only when training */
  void *saved;            /* NULL, or pcgc_op_saved_elems (pcg.h) elements of the compute dtype:
                             forward writes what backward would otherwise compute again, backward
                             of the same piece, inputs and step reads it (attention) */
  int64_t saved_bytes;
} pcgc_kernel_ctx;

/* Forward of op `k` (any op of class COMPUTE or LOSS). `ctx` may be NULL
 * (whole tensors, not training, seed 0). */
pcgc_status pcgc_cpu_forward(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_buf *in,
                             int n_out, pcgc_buf *out, const pcgc_kernel_ctx *ctx, pcgc_error *err);

/* moe_route's load-balancing loss (k_moe.c states it), the share of the
 * groups whose logits a piece holds: `logits` [G, S, X] on the host (f32 or
 * f64), the route's k and aux, G_all the groups of the whole tensor; the
 * shares of all pieces sum to aux * the loss. The runtime and the reference
 * add it to the loss they report (its gradient is moe_route's backward's). */
double pcgc_cpu_moe_aux_loss(const pcgc_buf *logits, int64_t k, double aux, int64_t G_all);

/* Backward: given dout (one per output, same shapes as out), adds the
 * gradient of each input into din[i] (skipped where din[i].data == NULL). */
pcgc_status pcgc_cpu_backward(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_buf *in,
                              int n_out, const pcgc_buf *out, const pcgc_buf *dout, pcgc_buf *din,
                              const pcgc_kernel_ctx *ctx, pcgc_error *err);

/* ------------------------------------------ batch norm over pieces
 * For a batch sharded across pieces: (1) each piece computes per-channel
 * partial sums; (2) the caller adds them over all pieces that hold the same
 * channels; (3) each piece normalises with the global statistics.
 * sum/sumsq/dsum/dxsum are arrays of C doubles (C = the piece's channels);
 * count is the logical number of elements per channel. */
void pcgc_cpu_batchnorm_stats(const pcgc_buf *x, double *sum, double *sumsq);
void pcgc_cpu_batchnorm_apply(const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *scale,
                              const pcgc_buf *bias, const double *sum, const double *sumsq,
                              double count, pcgc_buf *y);
/* backward, step 1: per-channel sums of dy and of dy * xhat over this piece.
 * With act=relu (batchnorm fused with a relu: apply writes max(y, 0)), dy
 * counts only where y = xhat * scale + bias > 0, in both backward steps;
 * scale and bias may be NULL (affine=false) */
void pcgc_cpu_batchnorm_bwd_stats(const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *scale,
                                  const pcgc_buf *bias, const pcgc_buf *dy, const double *sum,
                                  const double *sumsq, double count, double *dsum, double *dxsum);
/* backward, step 2: adds dx (and, where wanted, this piece's share of dscale
 * and dbias) given the global dsum/dxsum */
void pcgc_cpu_batchnorm_bwd_apply(const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *scale,
                                  const pcgc_buf *bias, const pcgc_buf *dy, const double *sum, const double *sumsq,
                                  double count, const double *dsum, const double *dxsum,
                                  pcgc_buf *dx, pcgc_buf *dscale, pcgc_buf *dbias);

/* --------------------------------------------------- random numbers
 * Counter-based: the value at (seed, stream, counter) is a pure function, so
 * any piece of a tensor draws its part without drawing the rest. */
uint64_t pcgc_rng_u64(uint64_t seed, uint64_t stream, uint64_t counter);
double pcgc_rng_uniform(uint64_t seed, uint64_t stream, uint64_t counter);  /* [0, 1) */
double pcgc_rng_normal(uint64_t seed, uint64_t stream, uint64_t counter);   /* N(0, 1) */
/* A stable 64-bit id for a name (node names -> rng streams). */
uint64_t pcgc_rng_stream(const char *name);

/* Fills a piece of a weight by its init attribute (zeros, ones, uniform(s),
 * normal(s)): element with logical flat index i draws counter i of stream
 * `stream`. `piece` may be NULL (whole tensor). */
void pcgc_cpu_init_weight(pcgc_buf *w, pcgc_init init, double scale, uint64_t seed, uint64_t stream,
                          const pcgc_piece *piece);
/* Synthetic data: floats N(0,1); integers uniform in [0, bound). */
void pcgc_cpu_fill_random(pcgc_buf *b, int64_t bound, uint64_t seed, uint64_t stream,
                          const pcgc_piece *piece);

/* -------------------------------------------------------- optimizers */

typedef enum pcgc_optimizer_kind { PCGC_SGD, PCGC_ADAM } pcgc_optimizer_kind;

typedef struct pcgc_optimizer {
  pcgc_optimizer_kind kind;
  double lr;
  double momentum;      /* SGD (0 = plain SGD) */
  double weight_decay;  /* L2, added to the gradient as in PyTorch */
  double beta1, beta2, eps; /* Adam */
} pcgc_optimizer;

/* Defaults: SGD lr 0.01, momentum 0; Adam lr 0.001, betas 0.9/0.999, eps 1e-8. */
void pcgc_optimizer_default(pcgc_optimizer *o, pcgc_optimizer_kind kind);

/* One update of w from its gradient g, PyTorch semantics. State buffers m
 * (SGD momentum / Adam first moment) and v (Adam second moment) have w's
 * shape and start at zero; `step` counts from 1. */
pcgc_status pcgc_cpu_optimizer_step(const pcgc_optimizer *o, pcgc_buf *w, const pcgc_buf *g,
                                    pcgc_buf *m, pcgc_buf *v, int64_t step, pcgc_error *err);

#ifdef __cplusplus
}
#endif
#endif
