/*
 * cu_shape.cu — CUDA kernels of data movement (concat, split, reshape,
 * flatten, transpose), softmax, log_softmax and the reductions (reduce_sum,
 * reduce_mean, reduce_max): k_shape.c and the softmax/reduce part of k_norm.c
 * on the GPU. log_softmax and reduce_max take one thread per row or output
 * (no model spends its time in them).
 *
 * Forward of data movement moves 4- or 8-byte elements (f32, i32, i64);
 * backward adds the moved gradient (f32). Concat and split view a tensor as
 * [outer, axis, inner], one kernel per part; reshape and flatten are one
 * copy of the buffer; transpose maps each output index to the input's
 * permuted strides (a bijection, so backward adds without conflicts).
 *
 * Softmax views x as [outer, n, inner] around its axis. Rows with the axis
 * innermost (inner == 1) and n > 32 take one warp each: max, then the sum
 * of exp(x - max) in double across the lanes (a fixed butterfly), then
 * exp(x - max) / sum; everything else (a strided axis, short rows) takes one
 * thread per row, which sums in the CPU's order. Backward is
 * dx += y * (dy - sum(y * dy)) with the same layout.
 *
 * A reduction is a segmented sum (cu_common_impl.h): outputs are the kept
 * dims, terms the reduced dims in row-major order; reduce_mean multiplies
 * by 1 / (the logical count of the reduced dims) from the piece descriptor,
 * so pieces add up to the mean of the whole tensor. Workspace: only the
 * partial sums of a reduction to few outputs (at most about 1024 + 8 * nx
 * doubles); nothing else here takes any.
 */
#include <math.h>

#include "cu_common_impl.h"

namespace {

/* Resolves a possibly negative axis (inference has checked the range). */
static int axis_of(const pcgc__cukargs *k, int rank) {
  int64_t a = pcgc_attrs_int(k->a, "axis");
  return (int)(a < 0 ? a + rank : a);
}

__global__ void add_kernel(int64_t n, const float *src, float *dst) {
  CUX_FOR(i, n) dst[i] += src[i];
}

/* dst (f32, n elements) += src */
static pcgc_status add_all(const pcgc__cukargs *k, int64_t n, const void *src, void *dst) {
  add_kernel<<<CUX_GRID(n)>>>(n, (const float *)src, (float *)dst);
  return pcgc__cu_launched(k, "add");
}

static pcgc_status copy_all(const pcgc__cukargs *k, const pcgc_buf *src, pcgc_buf *dst) {
  if (dst->data == src->data) return PCGC_OK;
  size_t bytes = (size_t)pcgc_buf_numel(src) * pcgc_dtype_size(src->dtype);
  return pcgc__cu_check(k, cudaMemcpyAsync(dst->data, src->data, bytes, cudaMemcpyDeviceToDevice, k->cu->stream),
                        "copy");
}

/* ------------------------------------------------------ concat and split */

/* Element i of a part [outer, n_p, inner] is element
 * (i / run) * wrow + wpos + i % run of the whole [outer, N, inner]
 * (run = n_p * inner, wrow = N * inner, wpos = pos_p * inner). */
enum { G_TO_WHOLE, G_TO_PART, G_ADD_WHOLE, G_ADD_PART };

template <class T, int MODE>
__global__ void gather_kernel(int64_t n, int64_t run, int64_t wrow, int64_t wpos, T *whole, T *part) {
  CUX_FOR(i, n) {
    int64_t w = (i / run) * wrow + wpos + i % run;
    switch (MODE) {
    case G_TO_WHOLE: whole[w] = part[i]; break;
    case G_TO_PART: part[i] = whole[w]; break;
    case G_ADD_WHOLE: whole[w] += part[i]; break;
    default: part[i] += whole[w]; break;
    }
  }
}

/* The CPU's gather(): parts with data NULL are skipped. */
static pcgc_status gather(const pcgc__cukargs *k, const pcgc_buf *whole, int n_parts, const pcgc_buf *parts,
                          int axis, bool to_whole, bool add) {
  int64_t inner = kx_prod(whole->dims, axis + 1, whole->rank), N = whole->dims[axis];
  int64_t outer = kx_prod(whole->dims, 0, axis);
  size_t es = pcgc_dtype_size(whole->dtype);
  int64_t pos = 0;
  for (int p = 0; p < n_parts; p++) {
    int64_t np = parts[p].dims[axis], run = np * inner, n = outer * run, wpos = pos * inner;
    pos += np;
    if (!parts[p].data) continue;
    if (add) {
      float *w = (float *)whole->data, *q = (float *)parts[p].data;
      if (to_whole) gather_kernel<float, G_ADD_WHOLE><<<CUX_GRID(n)>>>(n, run, N * inner, wpos, w, q);
      else gather_kernel<float, G_ADD_PART><<<CUX_GRID(n)>>>(n, run, N * inner, wpos, w, q);
    } else if (es == 4) {
      uint32_t *w = (uint32_t *)whole->data, *q = (uint32_t *)parts[p].data;
      if (to_whole) gather_kernel<uint32_t, G_TO_WHOLE><<<CUX_GRID(n)>>>(n, run, N * inner, wpos, w, q);
      else gather_kernel<uint32_t, G_TO_PART><<<CUX_GRID(n)>>>(n, run, N * inner, wpos, w, q);
    } else {
      uint64_t *w = (uint64_t *)whole->data, *q = (uint64_t *)parts[p].data;
      if (to_whole) gather_kernel<uint64_t, G_TO_WHOLE><<<CUX_GRID(n)>>>(n, run, N * inner, wpos, w, q);
      else gather_kernel<uint64_t, G_TO_PART><<<CUX_GRID(n)>>>(n, run, N * inner, wpos, w, q);
    }
    CUX_LAUNCHED(k, add ? "gather (add)" : "gather");
  }
  return PCGC_OK;
}

} /* namespace */

pcgc_status pcgc__cu_fwd_concat(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, false, 0));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  return gather(k, &k->out[0], k->n_in, k->in, axis_of(k, k->out[0].rank), true, false);
}

pcgc_status pcgc__cu_bwd_concat(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, true, 0));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  pcgc_buf parts[PCGC_VARIADIC];
  for (int i = 0; i < k->n_in; i++) {
    parts[i] = k->in[i];
    parts[i].data = cux_want(&k->din[i]) ? k->din[i].data : NULL;
  }
  return gather(k, &k->dout[0], k->n_in, parts, axis_of(k, k->dout[0].rank), false, true);
}

pcgc_status pcgc__cu_fwd_split(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, false, 0));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  return gather(k, &k->in[0], k->n_out, k->out, axis_of(k, k->in[0].rank), false, false);
}

pcgc_status pcgc__cu_bwd_split(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, true, 0));
  if (pcgc__cu_measuring(k) || !cux_want(&k->din[0])) return PCGC_OK;
  return gather(k, &k->din[0], k->n_out, k->dout, axis_of(k, k->in[0].rank), true, true);
}

/* ---------------------------------------------------- reshape, flatten */

pcgc_status pcgc__cu_fwd_reshape(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, false, CUX_NO_INFER));
  CUX_TRY(pcgc__kcheck_reshape(k, &k->out[0]));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  return copy_all(k, &k->in[0], &k->out[0]);
}

pcgc_status pcgc__cu_bwd_reshape(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, true, CUX_NO_INFER));
  CUX_TRY(pcgc__kcheck_reshape(k, &k->dout[0]));
  if (pcgc__cu_measuring(k) || !cux_want(&k->din[0])) return PCGC_OK;
  return add_all(k, pcgc_buf_numel(&k->in[0]), k->dout[0].data, k->din[0].data);
}

pcgc_status pcgc__cu_fwd_flatten(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, false, 0));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  return copy_all(k, &k->in[0], &k->out[0]);
}

pcgc_status pcgc__cu_bwd_flatten(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, true, 0));
  if (pcgc__cu_measuring(k) || !cux_want(&k->din[0])) return PCGC_OK;
  return add_all(k, pcgc_buf_numel(&k->in[0]), k->dout[0].data, k->din[0].data);
}

/* ------------------------------------------------------------ transpose */

namespace {

/* The output y's index space with offsets (y, x): out dim i is input dim
 * perm[i]. */
static cux_nd transpose_map(const pcgc__cukargs *k, const pcgc_buf *x, const pcgc_buf *y) {
  pcgc_ints perm = pcgc_attrs_ints(k->a, "perm");
  int64_t xs[PCGC_MAX_RANK], ys[PCGC_MAX_RANK];
  kx_strides(x->rank, x->dims, xs);
  kx_strides(y->rank, y->dims, ys);
  cux_nd g;
  memset(&g, 0, sizeof g);
  for (int i = 0; i < y->rank; i++) {
    int64_t p = perm.v[i] < 0 ? perm.v[i] + x->rank : perm.v[i];
    cux_nd_push(&g, y->dims[i], ys[i], xs[p], 0);
  }
  cux_nd_collapse(&g);
  return g;
}

template <class T>
__global__ void transpose_kernel(int64_t n, cux_nd g, const T *x, T *y) {
  CUX_FOR(i, n) {
    int64_t off[3] = {0, 0, 0};
    cux_nd_at(g, i, off);
    y[i] = x[off[1]];
  }
}

__global__ void transpose_bwd_kernel(int64_t n, cux_nd g, const float *dy, float *dx) {
  CUX_FOR(i, n) {
    int64_t off[3] = {0, 0, 0};
    cux_nd_at(g, i, off);
    dx[off[1]] += dy[i];
  }
}

} /* namespace */

pcgc_status pcgc__cu_fwd_transpose(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, false, 0));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  const pcgc_buf *x = &k->in[0];
  pcgc_buf *y = &k->out[0];
  cux_nd g = transpose_map(k, x, y);
  int64_t n = pcgc_buf_numel(y);
  if (pcgc_dtype_size(x->dtype) == 4)
    transpose_kernel<uint32_t><<<CUX_GRID(n)>>>(n, g, (const uint32_t *)x->data, (uint32_t *)y->data);
  else
    transpose_kernel<uint64_t><<<CUX_GRID(n)>>>(n, g, (const uint64_t *)x->data, (uint64_t *)y->data);
  return pcgc__cu_launched(k, "transpose");
}

pcgc_status pcgc__cu_bwd_transpose(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, true, 0));
  if (pcgc__cu_measuring(k) || !cux_want(&k->din[0])) return PCGC_OK;
  const pcgc_buf *dy = &k->dout[0];
  cux_nd g = transpose_map(k, &k->in[0], dy);
  int64_t n = pcgc_buf_numel(dy);
  transpose_bwd_kernel<<<CUX_GRID(n)>>>(n, g, (const float *)dy->data, (float *)k->din[0].data);
  return pcgc__cu_launched(k, "transpose backward");
}

/* ---------------------------------------------------------------- softmax */

namespace {

/* x viewed as [outer, n, inner] around the softmax axis. */
typedef struct axis_view {
  int64_t outer, n, inner;
} axis_view;

static axis_view view_axis(const pcgc_buf *x, int64_t axis) {
  int a = (int)(axis < 0 ? axis + x->rank : axis);
  axis_view v = {kx_prod(x->dims, 0, a), x->dims[a], kx_prod(x->dims, a + 1, x->rank)};
  return v;
}

/* Whether rows take a warp each (else a thread each, in the CPU's order). */
static bool by_warp(axis_view v) { return v.inner == 1 && v.n > 32; }

/* The maximum of the line at `base` (stride `inner`) and the sum of exp(x - max), in double. */
static __device__ void col_max_sum(const float *x, int64_t base, int64_t n, int64_t inner, double *mx, double *sum) {
  *mx = -INFINITY;
  *sum = 0;
  for (int64_t j = 0; j < n; j++) *mx = fmax(*mx, (double)x[base + j * inner]);
  for (int64_t j = 0; j < n; j++) *sum += exp((double)x[base + j * inner] - *mx);
}

/* Rows at `base` with stride `inner`, one thread each (column c = o * inner + t). */
__global__ void softmax_cols_kernel(int64_t cols, int64_t n, int64_t inner, const float *x, float *y) {
  CUX_FOR(c, cols) {
    int64_t base = (c / inner) * n * inner + c % inner;
    double mx, sum;
    col_max_sum(x, base, n, inner, &mx, &sum);
    for (int64_t j = 0; j < n; j++) y[base + j * inner] = (float)(exp((double)x[base + j * inner] - mx) / sum);
  }
}

__global__ void softmax_cols_bwd_kernel(int64_t cols, int64_t n, int64_t inner, const float *y, const float *dy,
                                        float *dx) {
  CUX_FOR(c, cols) {
    int64_t base = (c / inner) * n * inner + c % inner;
    double dot = 0;
    for (int64_t j = 0; j < n; j++) dot += cux_mul((double)y[base + j * inner], (double)dy[base + j * inner]);
    for (int64_t j = 0; j < n; j++) {
      int64_t i = base + j * inner;
      dx[i] += (float)((double)y[i] * ((double)dy[i] - dot));
    }
  }
}

/* Warp w of the grid-stride loop over rows; every lane of a warp runs the
 * same rows, so the shuffles see the whole warp. */
#define WARP_ROWS(r, rows)                                                                             \
  for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < (rows);                  \
       r += ((int64_t)gridDim.x * blockDim.x) >> 5)

__global__ void softmax_rows_kernel(int64_t rows, int64_t n, const float *x, float *y) {
  int lane = (int)(threadIdx.x & 31);
  WARP_ROWS(r, rows) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = lane; j < n; j += 32) mx = fmax(mx, (double)xr[j]);
    mx = cux_warp_max(mx);
    for (int64_t j = lane; j < n; j += 32) sum += exp((double)xr[j] - mx);
    sum = cux_warp_sum(sum);
    for (int64_t j = lane; j < n; j += 32) yr[j] = (float)(exp((double)xr[j] - mx) / sum);
  }
}

__global__ void softmax_rows_bwd_kernel(int64_t rows, int64_t n, const float *y, const float *dy, float *dx) {
  int lane = (int)(threadIdx.x & 31);
  WARP_ROWS(r, rows) {
    const float *yr = y + r * n, *dr = dy + r * n;
    float *xr = dx + r * n;
    double dot = 0;
    for (int64_t j = lane; j < n; j += 32) dot += cux_mul((double)yr[j], (double)dr[j]);
    dot = cux_warp_sum(dot);
    for (int64_t j = lane; j < n; j += 32) xr[j] += (float)((double)yr[j] * ((double)dr[j] - dot));
  }
}

/* log_softmax, one thread per row (column c = o * inner + t): y = (x - max)
 * - log(sum(exp(x - max))) in double, as the CPU; backward
 * dx += dy - exp(y) * sum(dy). */
__global__ void log_softmax_cols_kernel(int64_t cols, int64_t n, int64_t inner, const float *x, float *y) {
  CUX_FOR(c, cols) {
    int64_t base = (c / inner) * n * inner + c % inner;
    double mx, sum;
    col_max_sum(x, base, n, inner, &mx, &sum);
    double ls = log(sum);
    for (int64_t j = 0; j < n; j++) y[base + j * inner] = (float)(((double)x[base + j * inner] - mx) - ls);
  }
}

__global__ void log_softmax_cols_bwd_kernel(int64_t cols, int64_t n, int64_t inner, const float *y, const float *dy,
                                            float *dx) {
  CUX_FOR(c, cols) {
    int64_t base = (c / inner) * n * inner + c % inner;
    double sum = 0;
    for (int64_t j = 0; j < n; j++) sum += (double)dy[base + j * inner];
    for (int64_t j = 0; j < n; j++) {
      int64_t i = base + j * inner;
      dx[i] += (float)((double)dy[i] - cux_mul(exp((double)y[i]), sum));
    }
  }
}

/* Blocks for one warp per row. */
static unsigned warp_blocks(int64_t rows) { return pcgc__cu_blocks(rows * 32); }

} /* namespace */

pcgc_status pcgc__cu_fwd_softmax(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, false, 0));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  const pcgc_buf *x = &k->in[0];
  pcgc_buf *y = &k->out[0];
  axis_view v = view_axis(x, pcgc_attrs_int(k->a, "axis"));
  const float *xp = (const float *)x->data;
  float *yp = (float *)y->data;
  if (k->kind == PCGC_OP_LOG_SOFTMAX) {
    int64_t cols = v.outer * v.inner;
    log_softmax_cols_kernel<<<CUX_GRID(cols)>>>(cols, v.n, v.inner, xp, yp);
    return pcgc__cu_launched(k, "log_softmax");
  }
  if (by_warp(v)) {
    softmax_rows_kernel<<<warp_blocks(v.outer), PCGC_CU_THREADS, 0, k->cu->stream>>>(v.outer, v.n, xp, yp);
  } else {
    int64_t cols = v.outer * v.inner;
    softmax_cols_kernel<<<CUX_GRID(cols)>>>(cols, v.n, v.inner, xp, yp);
  }
  return pcgc__cu_launched(k, "softmax");
}

/* dx += y * (dy - sum(y * dy)) along the axis, from the forward output y. */
pcgc_status pcgc__cu_bwd_softmax(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, true, CUX_READS_OUT));
  if (pcgc__cu_measuring(k) || !cux_want(&k->din[0])) return PCGC_OK;
  const pcgc_buf *y = &k->out[0], *dy = &k->dout[0];
  axis_view v = view_axis(y, pcgc_attrs_int(k->a, "axis"));
  const float *yp = (const float *)y->data, *dp = (const float *)dy->data;
  float *gp = (float *)k->din[0].data;
  if (k->kind == PCGC_OP_LOG_SOFTMAX) {
    int64_t cols = v.outer * v.inner;
    log_softmax_cols_bwd_kernel<<<CUX_GRID(cols)>>>(cols, v.n, v.inner, yp, dp, gp);
    return pcgc__cu_launched(k, "log_softmax backward");
  }
  if (by_warp(v)) {
    softmax_rows_bwd_kernel<<<warp_blocks(v.outer), PCGC_CU_THREADS, 0, k->cu->stream>>>(v.outer, v.n, yp, dp, gp);
  } else {
    int64_t cols = v.outer * v.inner;
    softmax_cols_bwd_kernel<<<CUX_GRID(cols)>>>(cols, v.n, v.inner, yp, dp, gp);
  }
  return pcgc__cu_launched(k, "softmax backward");
}

/* ------------------------------------------------------------- reductions */

namespace {

struct reduce_sum_f {
  double scale;
  const float *x;
  float *y;
  __device__ double term(int64_t ox, int64_t, int64_t) const { return (double)x[ox]; }
  __device__ void done(int64_t e, double s) const { y[e] = (float)(s * scale); }
};

/* The reduced dims of x, and the scale: 1 for a sum, 1 / (the logical count
 * of the reduced dims) for a mean. */
static double reduce_dims(const pcgc__cukargs *k, const pcgc_buf *x, bool *red) {
  pcgc_ints dl = pcgc_attrs_ints(k->a, "dims");
  for (int d = 0; d < PCGC_MAX_RANK; d++) red[d] = false;
  for (int i = 0; i < dl.n; i++) red[dl.v[i] < 0 ? dl.v[i] + x->rank : dl.v[i]] = true;
  pcgc_piece p = pcgc__in_piece(k, 0);
  double count = 1;
  for (int d = 0; d < x->rank; d++)
    if (red[d]) count *= (double)p.global[d];
  return k->kind == PCGC_OP_REDUCE_MEAN ? 1 / count : 1;
}

/* dx[i] += (float)(dy[at i] * scale); offset 0 of g walks dy */
__global__ void reduce_bwd_kernel(int64_t n, cux_nd g, double scale, const float *dy, float *dx) {
  CUX_FOR(i, n) {
    int64_t off[3] = {0, 0, 0};
    cux_nd_at(g, i, off);
    dx[i] += (float)((double)dy[off[0]] * scale);
  }
}

/* reduce_max, one thread per output: the kept dims of x in `outer`, the
 * reduced ones in `inner` (offset 0: x's strides). Backward shares dy
 * evenly among the elements equal to the maximum (torch.amax); each x
 * element belongs to one output, so the adds do not conflict. */
template <bool BWD>
__global__ void reduce_max_kernel(int64_t nx, int64_t m, cux_nd outer, cux_nd inner, const float *x, const float *y,
                                  const float *dy, float *out) {
  CUX_FOR(e, nx) {
    int64_t base[3] = {0, 0, 0};
    cux_nd_at(outer, e, base);
    if (!BWD) {
      double mx = -INFINITY;
      for (int64_t t = 0; t < m; t++) {
        int64_t off[3] = {base[0], 0, 0};
        cux_nd_at(inner, t, off);
        double v = (double)x[off[0]];
        if (v > mx || v != v) mx = v;
        if (mx != mx) break;
      }
      out[e] = (float)mx;
    } else {
      double mx = (double)y[e], ties = 0;
      for (int64_t t = 0; t < m; t++) {
        int64_t off[3] = {base[0], 0, 0};
        cux_nd_at(inner, t, off);
        ties += (double)x[off[0]] == mx;
      }
      if (ties == 0) continue;
      float g = (float)((double)dy[e] / ties);
      for (int64_t t = 0; t < m; t++) {
        int64_t off[3] = {base[0], 0, 0};
        cux_nd_at(inner, t, off);
        if ((double)x[off[0]] == mx) out[off[0]] += g;
      }
    }
  }
}

static pcgc_status reduce_max_run(const pcgc__cukargs *k, bool bwd) {
  const pcgc_buf *x = &k->in[0];
  bool red[PCGC_MAX_RANK];
  reduce_dims(k, x, red);
  int64_t xs[PCGC_MAX_RANK], nx = 1, m = 1;
  kx_strides(x->rank, x->dims, xs);
  cux_nd outer, inner;
  memset(&outer, 0, sizeof outer);
  memset(&inner, 0, sizeof inner);
  for (int d = 0; d < x->rank; d++) {
    cux_nd_push(red[d] ? &inner : &outer, x->dims[d], xs[d], 0, 0);
    *(red[d] ? &m : &nx) *= x->dims[d];
  }
  cux_nd_collapse(&outer);
  cux_nd_collapse(&inner);
  const float *xp = (const float *)x->data, *yp = (const float *)k->out[0].data;
  if (bwd)
    reduce_max_kernel<true><<<CUX_GRID(nx)>>>(nx, m, outer, inner, xp, yp, (const float *)k->dout[0].data,
                                              (float *)k->din[0].data);
  else
    reduce_max_kernel<false><<<CUX_GRID(nx)>>>(nx, m, outer, inner, xp, NULL, NULL, (float *)k->out[0].data);
  return pcgc__cu_launched(k, bwd ? "reduce_max backward" : "reduce_max");
}

} /* namespace */

pcgc_status pcgc__cu_fwd_reduce(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, false, 0));
  if (k->kind == PCGC_OP_REDUCE_MAX) return pcgc__cu_measuring(k) ? PCGC_OK : reduce_max_run(k, false);
  const pcgc_buf *x = &k->in[0];
  bool red[PCGC_MAX_RANK];
  double scale = reduce_dims(k, x, red);
  int64_t xs[PCGC_MAX_RANK];
  kx_strides(x->rank, x->dims, xs);
  cux_seg g;
  memset(&g, 0, sizeof g);
  for (int d = 0; d < x->rank; d++) cux_nd_push(red[d] ? &g.inner : &g.outer, x->dims[d], xs[d], 0, 0);
  cux_seg_plan(&g);
  void *part;
  CUX_SCRATCH(k, part, cux_seg_bytes(&g));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  reduce_sum_f f = {scale, (const float *)x->data, (float *)k->out[0].data};
  return cux_seg_run(k, &g, f, (double *)part);
}

pcgc_status pcgc__cu_bwd_reduce(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, true, k->kind == PCGC_OP_REDUCE_MAX ? CUX_READS_OUT : 0));
  if (pcgc__cu_measuring(k) || !cux_want(&k->din[0])) return PCGC_OK;
  if (k->kind == PCGC_OP_REDUCE_MAX) return reduce_max_run(k, true);
  const pcgc_buf *x = &k->in[0];
  bool red[PCGC_MAX_RANK];
  double scale = reduce_dims(k, x, red);
  /* strides of dy over x's dims: 0 along the reduced ones */
  int64_t ys[PCGC_MAX_RANK], s = 1;
  for (int d = x->rank - 1; d >= 0; d--) {
    ys[d] = red[d] ? 0 : s;
    if (!red[d]) s *= x->dims[d];
  }
  int64_t xs[PCGC_MAX_RANK];
  kx_strides(x->rank, x->dims, xs);
  cux_nd g;
  memset(&g, 0, sizeof g);
  for (int d = 0; d < x->rank; d++) cux_nd_push(&g, x->dims[d], ys[d], xs[d], 0);
  cux_nd_collapse(&g);
  int64_t n = pcgc_buf_numel(x);
  reduce_bwd_kernel<<<CUX_GRID(n)>>>(n, g, scale, (const float *)k->dout[0].data, (float *)k->din[0].data);
  return pcgc__cu_launched(k, "reduce backward");
}
