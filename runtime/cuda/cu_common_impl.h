/*
 * cu_common_impl.h — private helpers of the CUDA kernels of the non-dense
 * families (cu_elementwise.cu, cu_shape.cu, cu_loss.cu), the counterpart of
 * runtime/cpu/k_common_impl.h: validation of a call (runtime/cpu/
 * k_check.h's, which the CPU kernels use too), n-dim index maps, and one
 * deterministic segmented sum that serves every reduction (reduce_sum
 * and reduce_mean, the gradient of a broadcast operand, the losses).
 *
 * Numbers. As on the CPU, every value is computed in double from the f32
 * inputs and rounded once when stored, and every sum is accumulated in
 * double. Expressions are written in the CPU's order; a product that feeds
 * an addition goes through cux_mul (__dmul_rn), which nvcc never contracts
 * into a fused multiply-add, so each such step rounds as the CPU's does
 * (gcc on x86-64 does not contract without -mfma). Two things still differ
 * from the CPU: CUDA's exp, log, tanh and erf are within an ulp or two of
 * glibc's in double, and a sum over more than a few dozen terms is added as
 * a tree instead of left to right. Both change the double result in its
 * last bits only, so an f32 result differs in rare rounding cases. Every
 * kernel here is deterministic: no atomics, fixed reduction trees.
 *
 * Index maps (cux_nd): a row-major index space of up to PCGC_MAX_RANK dims
 * carrying three element offsets, each with its own strides (stride 0
 * broadcasts). cux_nd_collapse drops dims of size 1 and merges neighbours
 * that are contiguous for all three offsets, so the common cases (equal
 * shapes, a row broadcast) become one or two dims and few divisions.
 *
 * Segmented sums (cux_seg): output e in [0, nx) is the sum over t in [0, m)
 * of f.term(offsets of e in `outer` + offsets of t in `inner`), passed to
 * f.done(e, sum). Three plans, by shape:
 *   thread: m <= 32: one thread per output adds its terms in order, exactly
 *           the CPU's order;
 *   warp:   nx >= 4096: one block of 32 threads per output, a fixed tree;
 *   block:  otherwise: blocks of 256 threads, S blocks per output over
 *           chunks of its terms (S > 1 when there are few outputs), each a
 *           fixed tree into S partial sums in the workspace, which a second
 *           kernel adds in order.
 * The plan depends on the shapes only, so the measuring pass asks for the
 * same workspace as the real one.
 */
#ifndef PCGC_CU_COMMON_IMPL_H
#define PCGC_CU_COMMON_IMPL_H

#include <stdio.h>
#include <string.h>

#include "cu_internal.h"
#include "k_check.h"

/* ------------------------------------------------------------ arithmetic */

/* a * b rounded, never fused with a following addition */
__device__ __forceinline__ double cux_mul(double a, double b) { return __dmul_rn(a, b); }

/* Element counts, products and strides of shapes: pcgc_buf_numel,
 * kx_prod and kx_strides (k_check.h), as on the CPU. */

/* A gradient that is wanted: validation has given it its input's type, and
 * integer inputs never get one. */
static inline bool cux_want(const pcgc_buf *din) { return din && din->data && din->dtype == PCGC_F32; }

/* ------------------------------------------------------------ validation */

/* The validation is the CPU kernels' (k_check.h), on device buffers (only
 * their descriptors are read), with every floating-point tensor f32
 * (anything else: unsupported); inference has already limited integer
 * tensors to where they belong. */
enum {
  CUX_READS_OUT = KX_READS_OUT, /* backward reads the forward outputs */
  CUX_NO_INFER = KX_NO_INFER,   /* the kernel checks shapes itself (reshape) */
};

#define CUX_TRY(x) KX_TRY(x)

static inline pcgc_status cux_check(const pcgc__cukargs *k, bool backward, unsigned flags) {
  return pcgc__kcheck(k, backward, flags | KX_F32_ONLY);
}

/* The workspace: NULL while measuring (the caller returns first) and, when
 * frozen and too small, PCGC_ERR_NOMEM with the message in k->err. */
#define CUX_SCRATCH(k, p, bytes)                                                                   \
  do {                                                                                             \
    size_t b_ = (bytes);                                                                           \
    (p) = b_ ? pcgc__cu_scratch(k, b_) : NULL;                                                     \
    if (b_ && !(p) && !pcgc__cu_measuring(k)) return PCGC_ERR_NOMEM;                               \
  } while (0)

#define CUX_LAUNCHED(k, what) CUX_TRY(pcgc__cu_launched(k, what))

/* ------------------------------------------------------------ index maps */

typedef struct cux_nd {
  int r;
  int64_t dims[PCGC_MAX_RANK];
  int64_t st[3][PCGC_MAX_RANK];
} cux_nd;

/* Appends a dim (outer to inner) with its three strides. */
static inline void cux_nd_push(cux_nd *g, int64_t dim, int64_t s0, int64_t s1, int64_t s2) {
  g->dims[g->r] = dim;
  g->st[0][g->r] = s0;
  g->st[1][g->r] = s1;
  g->st[2][g->r] = s2;
  g->r++;
}

/* Drops dims of size 1 and merges a dim into its outer neighbour where that
 * one's strides are the inner's times its size for all three offsets. The
 * row-major order of the visited elements does not change. */
static inline void cux_nd_collapse(cux_nd *g) {
  cux_nd o;
  memset(&o, 0, sizeof o);
  for (int d = 0; d < g->r; d++) {
    if (g->dims[d] == 1) continue;
    int l = o.r - 1;
    bool merge = l >= 0;
    for (int s = 0; s < 3 && merge; s++) merge = o.st[s][l] == g->st[s][d] * g->dims[d];
    if (merge) {
      o.dims[l] *= g->dims[d];
      for (int s = 0; s < 3; s++) o.st[s][l] = g->st[s][d];
    } else {
      cux_nd_push(&o, g->dims[d], g->st[0][d], g->st[1][d], g->st[2][d]);
    }
  }
  *g = o;
}

/* The three offsets of row-major index i (added to off[]). The loops are
 * unrolled so that the arrays stay in parameter space and registers. */
__device__ __forceinline__ void cux_nd_at(const cux_nd &g, int64_t i, int64_t off[3]) {
#pragma unroll
  for (int d = PCGC_MAX_RANK - 1; d >= 0; d--) {
    if (d >= g.r) continue;
    int64_t q = i;
    if (d > 0) {
      q = i % g.dims[d];
      i /= g.dims[d];
    }
    off[0] += q * g.st[0][d];
    off[1] += q * g.st[1][d];
    off[2] += q * g.st[2][d];
  }
}

/* Launch configuration of a grid-stride loop over n elements. */
#define CUX_GRID(n) pcgc__cu_blocks(n), PCGC_CU_THREADS, 0, k->cu->stream
#define CUX_FOR(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* ------------------------------------------------------------ segmented sums */

enum { CUX_SEG_THREAD, CUX_SEG_WARP, CUX_SEG_BLOCK };

typedef struct cux_seg {
  cux_nd outer, inner; /* outputs and terms, each collapsed */
  int64_t nx, m;       /* outputs, terms per output */
  int plan;
  int64_t S, chunk;    /* block plan: blocks per output, terms per block */
} cux_seg;

#define CUX_SEG_BLOCK_THREADS 256

/* Sets nx, m and the plan from outer and inner (not yet collapsed). */
static inline void cux_seg_plan(cux_seg *g) {
  g->nx = 1;
  g->m = 1;
  for (int d = 0; d < g->outer.r; d++) g->nx *= g->outer.dims[d];
  for (int d = 0; d < g->inner.r; d++) g->m *= g->inner.dims[d];
  cux_nd_collapse(&g->outer);
  cux_nd_collapse(&g->inner);
  g->S = 1;
  g->chunk = g->m;
  if (g->m <= 32) {
    g->plan = CUX_SEG_THREAD;
  } else if (g->nx >= 4096) {
    g->plan = CUX_SEG_WARP;
  } else {
    g->plan = CUX_SEG_BLOCK;
    /* about 1024 blocks in all, none with fewer than 2048 terms */
    int64_t want = (1024 + g->nx - 1) / g->nx, most = (g->m + 2047) / 2048;
    g->S = want < most ? want : most;
    if (g->S < 1) g->S = 1;
    g->chunk = (g->m + g->S - 1) / g->S;
    g->S = (g->m + g->chunk - 1) / g->chunk; /* no empty chunk */
  }
}

/* Workspace bytes of the plan (partial sums of the block plan). */
static inline size_t cux_seg_bytes(const cux_seg *g) {
  return g->plan == CUX_SEG_BLOCK && g->S > 1 ? (size_t)(g->nx * g->S) * sizeof(double) : 0;
}

template <class F>
__global__ void cux_seg_thread_kernel(cux_nd outer, cux_nd inner, int64_t nx, int64_t m, F f) {
  CUX_FOR(e, nx) {
    int64_t base[3] = {0, 0, 0};
    cux_nd_at(outer, e, base);
    int64_t off[3] = {base[0], base[1], base[2]}, idx[PCGC_MAX_RANK] = {0};
    double acc = 0;
    for (int64_t t = 0; t < m; t++) {
      acc += f.term(off[0], off[1], off[2]);
#pragma unroll
      for (int d = PCGC_MAX_RANK - 1; d >= 0; d--) { /* the next term, row-major */
        if (d >= inner.r) continue;
        off[0] += inner.st[0][d];
        off[1] += inner.st[1][d];
        off[2] += inner.st[2][d];
        if (++idx[d] < inner.dims[d]) break;
        off[0] -= inner.st[0][d] * inner.dims[d];
        off[1] -= inner.st[1][d] * inner.dims[d];
        off[2] -= inner.st[2][d] * inner.dims[d];
        idx[d] = 0;
      }
    }
    f.done(e, acc);
  }
}

/* Block b of nx * S: output b / S, terms of chunk b % S; a fixed tree over
 * the block's threads, then f.done or the partial sum part[b]. */
template <int BS, class F>
__global__ void __launch_bounds__(BS) cux_seg_block_kernel(cux_nd outer, cux_nd inner, int64_t nx, int64_t m,
                                                           int64_t S, int64_t chunk, F f, double *part) {
  __shared__ double sh[BS];
  int tid = (int)threadIdx.x;
  for (int64_t b = blockIdx.x; b < nx * S; b += gridDim.x) {
    int64_t e = b / S, t0 = (b % S) * chunk, t1 = t0 + chunk < m ? t0 + chunk : m;
    int64_t base[3] = {0, 0, 0};
    cux_nd_at(outer, e, base);
    double acc = 0;
    for (int64_t t = t0 + tid; t < t1; t += BS) {
      int64_t off[3] = {base[0], base[1], base[2]};
      cux_nd_at(inner, t, off);
      acc += f.term(off[0], off[1], off[2]);
    }
    sh[tid] = acc;
    __syncthreads();
#pragma unroll
    for (int w = BS / 2; w > 0; w >>= 1) {
      if (tid < w) sh[tid] += sh[tid + w];
      __syncthreads();
    }
    if (tid == 0) {
      if (part) part[b] = sh[0];
      else f.done(e, sh[0]);
    }
    __syncthreads(); /* sh is reused by the next block of the loop */
  }
}

/* The S partial sums of each output, added in order. */
template <class F>
__global__ void cux_seg_finish_kernel(int64_t nx, int64_t S, const double *part, F f) {
  CUX_FOR(e, nx) {
    double acc = 0;
    for (int64_t s = 0; s < S; s++) acc += part[e * S + s];
    f.done(e, acc);
  }
}

/* Runs a planned sum; part: cux_seg_bytes of workspace (or NULL where 0). */
template <class F>
static pcgc_status cux_seg_run(const pcgc__cukargs *k, const cux_seg *g, F f, double *part) {
  cudaStream_t st = k->cu->stream;
  switch (g->plan) {
  case CUX_SEG_THREAD:
    cux_seg_thread_kernel<F><<<pcgc__cu_blocks(g->nx), PCGC_CU_THREADS, 0, st>>>(g->outer, g->inner, g->nx, g->m, f);
    return pcgc__cu_launched(k, "segmented sum");
  case CUX_SEG_WARP: {
    int64_t nb = g->nx < 65535 * 8 ? g->nx : 65535 * 8;
    cux_seg_block_kernel<32, F><<<(unsigned)nb, 32, 0, st>>>(g->outer, g->inner, g->nx, g->m, 1, g->m, f, NULL);
    return pcgc__cu_launched(k, "segmented sum");
  }
  default: {
    int64_t nb = g->nx * g->S < 65535 * 8 ? g->nx * g->S : 65535 * 8;
    bool two = g->S > 1;
    cux_seg_block_kernel<CUX_SEG_BLOCK_THREADS, F><<<(unsigned)nb, CUX_SEG_BLOCK_THREADS, 0, st>>>(
        g->outer, g->inner, g->nx, g->m, g->S, g->chunk, f, two ? part : NULL);
    CUX_LAUNCHED(k, "segmented sum");
    if (!two) return PCGC_OK;
    cux_seg_finish_kernel<F><<<pcgc__cu_blocks(g->nx), PCGC_CU_THREADS, 0, st>>>(g->nx, g->S, part, f);
    return pcgc__cu_launched(k, "segmented sum (partials)");
  }
  }
}

/* ------------------------------------------------------------ warp helpers */

__device__ __forceinline__ double cux_warp_sum(double v) {
  /* a butterfly: lanes i and i^m add the same two values, so every lane
   * ends with the same bits */
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

__device__ __forceinline__ double cux_warp_max(double v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

#endif
