/*
 * cu_loss.cu — CUDA kernels of the losses, softmax_cross_entropy (`xent`)
 * and mean squared error (`mse`), k_loss.c on the GPU. Each writes a rank-0
 * f32 buffer.
 *
 * Cross entropy of logits [..., C] and i32 or i64 labels [...] is, per
 * label position (a row), logsumexp(row) - row[label], the maximum
 * subtracted before exponentiating; its gradient is softmax(row) -
 * onehot(label), times dout / count. Rows of up to 32 classes take one
 * thread each (the CPU's order of the sum over the row), longer rows one
 * warp (a fixed butterfly). The row losses go to the workspace in double,
 * then one segmented sum (cu_common_impl.h) adds them and writes
 * sum / count. With reduction=mean, count is the *logical* number of label
 * positions (resp. elements for mse) from the piece descriptors, so the
 * losses of the pieces of a sharded batch add up to the loss of the batch;
 * with reduction=sum it is 1. Sums are in double.
 *
 * The CPU refuses a label outside [0, C) with an error; here the labels are
 * in device memory and checking them would need a synchronisation, so such
 * a row's loss and gradient are NaN instead (the loss of the call is NaN).
 *
 * Workspace: xent forward, P doubles (P label positions) plus the sum's
 * partials; mse forward, the sum's partials only (about 1024 doubles for a
 * large tensor); backward takes none.
 */
#include <math.h>

#include "cu_common_impl.h"

namespace {

__device__ __forceinline__ double quiet_nan() { return __longlong_as_double(0x7ff8000000000000LL); }

/* ----------------------------------------------------- cross entropy */

/* log(sum(exp(row))) of one row, by one thread, in the CPU's order */
__device__ double row_lse_thread(const float *xr, int64_t C) {
  double m = -INFINITY, s = 0;
  for (int64_t c = 0; c < C; c++) m = fmax(m, (double)xr[c]);
  for (int64_t c = 0; c < C; c++) s += exp((double)xr[c] - m);
  return m + log(s);
}

/* the same by a warp; every lane returns the same value */
__device__ double row_lse_warp(const float *xr, int64_t C, int lane) {
  double m = -INFINITY, s = 0;
  for (int64_t c = lane; c < C; c += 32) m = fmax(m, (double)xr[c]);
  m = cux_warp_max(m);
  for (int64_t c = lane; c < C; c += 32) s += exp((double)xr[c] - m);
  return m + log(cux_warp_sum(s));
}

#define WARP_ROWS(r, rows)                                                                             \
  for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < (rows);                  \
       r += ((int64_t)gridDim.x * blockDim.x) >> 5)

/* loss[p] = lse(row p) - row p [label p] */
template <class L, bool WARP>
__global__ void xent_rows_kernel(int64_t P, int64_t C, const float *x, const L *lab, double *loss) {
  if (WARP) {
    int lane = (int)(threadIdx.x & 31);
    WARP_ROWS(p, P) {
      double lse = row_lse_warp(x + p * C, C, lane);
      int64_t y = (int64_t)lab[p];
      if (lane == 0) loss[p] = y >= 0 && y < C ? lse - (double)x[p * C + y] : quiet_nan();
    }
  } else {
    CUX_FOR(p, P) {
      double lse = row_lse_thread(x + p * C, C);
      int64_t y = (int64_t)lab[p];
      loss[p] = y >= 0 && y < C ? lse - (double)x[p * C + y] : quiet_nan();
    }
  }
}

/* dx[p, c] += (float)(g * (exp(x[p, c] - lse) - (c == label))), g = dout / count */
template <class L, bool WARP>
__global__ void xent_bwd_kernel(int64_t P, int64_t C, double count, const float *x, const L *lab, const float *dout,
                                float *dx) {
  double g = (double)dout[0] / count;
  int lane = WARP ? (int)(threadIdx.x & 31) : 0;
  int64_t first = WARP ? ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5
                       : (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int64_t step = WARP ? ((int64_t)gridDim.x * blockDim.x) >> 5 : (int64_t)gridDim.x * blockDim.x;
  for (int64_t p = first; p < P; p += step) {
    const float *xr = x + p * C;
    float *gr = dx + p * C;
    double lse = WARP ? row_lse_warp(xr, C, lane) : row_lse_thread(xr, C);
    int64_t y = (int64_t)lab[p];
    if (y < 0 || y >= C) lse = quiet_nan(); /* the CPU refuses such a label */
    for (int64_t c = lane; c < C; c += WARP ? 32 : 1)
      gr[c] += (float)(g * (exp((double)xr[c] - lse) - (c == y ? 1 : 0)));
  }
}

struct xent_sum_f {
  double count;
  const double *loss;
  float *out;
  __device__ double term(int64_t o, int64_t, int64_t) const { return loss[o]; }
  __device__ void done(int64_t, double s) const { out[0] = (float)(s / count); }
};

/* The sum of P values at stride 1 into one output. */
static cux_seg sum_plan(int64_t P) {
  cux_seg g;
  memset(&g, 0, sizeof g);
  cux_nd_push(&g.inner, P, 1, 0, 0);
  cux_seg_plan(&g);
  return g;
}

static bool rows_by_warp(int64_t C) { return C > 32; }

} /* namespace */

pcgc_status pcgc__cu_fwd_xent(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, false, 0));
  const pcgc_buf *x = &k->in[0], *lab = &k->in[1];
  int64_t C = x->dims[x->rank - 1], P = pcgc_buf_numel(lab);
  cux_seg g = sum_plan(P);
  void *loss, *part;
  CUX_SCRATCH(k, loss, (size_t)P * sizeof(double));
  CUX_SCRATCH(k, part, cux_seg_bytes(&g));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  const float *xp = (const float *)x->data;
  double *lp = (double *)loss;
  cudaStream_t st = k->cu->stream;
  bool warp = rows_by_warp(C), l64 = lab->dtype == PCGC_I64;
  unsigned blocks = warp ? pcgc__cu_blocks(P * 32) : pcgc__cu_blocks(P);
  if (l64 && warp) xent_rows_kernel<int64_t, true><<<blocks, PCGC_CU_THREADS, 0, st>>>(P, C, xp, (const int64_t *)lab->data, lp);
  else if (l64) xent_rows_kernel<int64_t, false><<<blocks, PCGC_CU_THREADS, 0, st>>>(P, C, xp, (const int64_t *)lab->data, lp);
  else if (warp) xent_rows_kernel<int32_t, true><<<blocks, PCGC_CU_THREADS, 0, st>>>(P, C, xp, (const int32_t *)lab->data, lp);
  else xent_rows_kernel<int32_t, false><<<blocks, PCGC_CU_THREADS, 0, st>>>(P, C, xp, (const int32_t *)lab->data, lp);
  CUX_LAUNCHED(k, "cross entropy rows");
  xent_sum_f f = {pcgc__loss_count(k, 1), lp, (float *)k->out[0].data};
  return cux_seg_run(k, &g, f, (double *)part);
}

pcgc_status pcgc__cu_bwd_xent(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, true, 0));
  if (pcgc__cu_measuring(k) || !cux_want(&k->din[0])) return PCGC_OK;
  const pcgc_buf *x = &k->in[0], *lab = &k->in[1];
  int64_t C = x->dims[x->rank - 1], P = pcgc_buf_numel(lab);
  double count = pcgc__loss_count(k, 1);
  const float *xp = (const float *)x->data, *dp = (const float *)k->dout[0].data;
  float *gp = (float *)k->din[0].data;
  cudaStream_t st = k->cu->stream;
  bool warp = rows_by_warp(C), l64 = lab->dtype == PCGC_I64;
  unsigned blocks = warp ? pcgc__cu_blocks(P * 32) : pcgc__cu_blocks(P);
  if (l64 && warp)
    xent_bwd_kernel<int64_t, true><<<blocks, PCGC_CU_THREADS, 0, st>>>(P, C, count, xp, (const int64_t *)lab->data, dp, gp);
  else if (l64)
    xent_bwd_kernel<int64_t, false><<<blocks, PCGC_CU_THREADS, 0, st>>>(P, C, count, xp, (const int64_t *)lab->data, dp, gp);
  else if (warp)
    xent_bwd_kernel<int32_t, true><<<blocks, PCGC_CU_THREADS, 0, st>>>(P, C, count, xp, (const int32_t *)lab->data, dp, gp);
  else
    xent_bwd_kernel<int32_t, false><<<blocks, PCGC_CU_THREADS, 0, st>>>(P, C, count, xp, (const int32_t *)lab->data, dp, gp);
  return pcgc__cu_launched(k, "cross entropy backward");
}

/* ----------------------------------------------------- squared error */

namespace {

struct mse_sum_f {
  double count;
  const float *p, *t;
  float *out;
  __device__ double term(int64_t o, int64_t, int64_t) const {
    double d = (double)p[o] - (double)t[o];
    return cux_mul(d, d);
  }
  __device__ void done(int64_t, double s) const { out[0] = (float)(s / count); }
};

/* d = g (p - t), g = 2 dout / count; dp += d, dt -= d where wanted */
__global__ void mse_bwd_kernel(int64_t n, double count, const float *p, const float *t, const float *dout, float *dp,
                               float *dt) {
  double g = 2 * (double)dout[0] / count;
  CUX_FOR(i, n) {
    double d = g * ((double)p[i] - (double)t[i]);
    if (dp) dp[i] += (float)d;
    if (dt) dt[i] += (float)-d;
  }
}

} /* namespace */

pcgc_status pcgc__cu_fwd_mse(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, false, 0));
  const pcgc_buf *p = &k->in[0], *t = &k->in[1];
  cux_seg g = sum_plan(pcgc_buf_numel(p));
  void *part;
  CUX_SCRATCH(k, part, cux_seg_bytes(&g));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  mse_sum_f f = {pcgc__loss_count(k, 0), (const float *)p->data, (const float *)t->data, (float *)k->out[0].data};
  return cux_seg_run(k, &g, f, (double *)part);
}

pcgc_status pcgc__cu_bwd_mse(const pcgc__cukargs *k) {
  CUX_TRY(cux_check(k, true, 0));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  bool wp = cux_want(&k->din[0]), wt = cux_want(&k->din[1]);
  if (!wp && !wt) return PCGC_OK;
  const pcgc_buf *p = &k->in[0], *t = &k->in[1];
  int64_t n = pcgc_buf_numel(p);
  mse_bwd_kernel<<<CUX_GRID(n)>>>(n, pcgc__loss_count(k, 0), (const float *)p->data, (const float *)t->data,
                                  (const float *)k->dout[0].data, wp ? (float *)k->din[0].data : NULL,
                                  wt ? (float *)k->din[1].data : NULL);
  return pcgc__cu_launched(k, "mse backward");
}
