/*
 * cu_norm.cu — batch and layer normalisation on the GPU (f32 storage), the
 * whole-tensor families and the split batch-norm entry points, with the
 * meaning of runtime/cpu/k_norm.c: training-mode statistics, biased
 * variance, eps inside the square root, scale 1 and bias 0 where absent,
 * backward adding into din. Batch norm's act=relu fuses a following relu:
 * y = max(bn(x), 0), and the backward takes dy only where bn(x) =
 * (x - mean) * scale * invstd + bias, recomputed as the forward computes it,
 * is positive (the output is not read).
 *
 * Every statistic and sum is accumulated in double, as on the CPU, but as a
 * tree instead of a chain: the order depends on the shape only, so results
 * are reproducible run to run (no atomics). The per-element expressions use
 * the _rn intrinsics, which nvcc never fuses into an fma, so they round as
 * the CPU's do.
 *
 *   batch norm, x [N, C, S]: element (n, c, s) at (n*C + c)*S + s.
 *     bn_sums: grid (C, P); block (c, p) sums every P-th run of 256 of
 *     channel c's N*S elements -> part[c*P + p]; bn_finish adds the P parts
 *     of a channel in order. Then a per-channel kernel turns the sums into
 *     coefficients, and one elementwise kernel applies them. act=relu changes
 *     no launch: the mask sits in bn_sums (BWD) and in the apply and dx
 *     kernels, a template parameter so act=none compiles as before.
 *   layer norm, x [R, n] (n = the last `axes` dims): one block per row
 *     (two passes, mean then squared deviations, like the CPU); dscale and
 *     dbias are column sums over rows: grid (columns, P row chunks) -> parts,
 *     then the P parts of each column in order.
 */
#include <string.h>

#include "cu_internal.h"
#include "k_check.h"

#define NM_TRY(x)                     \
  do {                                \
    pcgc_status s_ = (x);             \
    if (s_ != PCGC_OK) return s_;     \
  } while (0)

/* ----------------------------------------------------------- device helpers */

__device__ static inline double nadd(double a, double b) { return __dadd_rn(a, b); }
__device__ static inline double nsub(double a, double b) { return __dsub_rn(a, b); }
__device__ static inline double nmul(double a, double b) { return __dmul_rn(a, b); }
__device__ static inline double ndiv(double a, double b) { return __ddiv_rn(a, b); }

/* mean and 1/sqrt(var + eps) of a channel from its sums (k_norm.c bn_moments) */
__device__ static inline void bn_moments(double sum, double sumsq, double count, double eps, double *mean,
                                         double *invstd) {
  *mean = ndiv(sum, count);
  double var = fmax(nsub(ndiv(sumsq, count), nmul(*mean, *mean)), 0.0);
  *invstd = ndiv(1.0, __dsqrt_rn(nadd(var, eps)));
}

/* The two sums (a, b) over the block, returned to every thread.
 * blockDim.x is a multiple of 32, at most 1024. */
__device__ static double2 block_sum2(double a, double b) {
  __shared__ double2 sh[33];
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) sh[w] = make_double2(a, b);
  __syncthreads();
  if (w == 0) {
    a = lane < nw ? sh[lane].x : 0.0;
    b = lane < nw ? sh[lane].y : 0.0;
    for (int o = 16; o > 0; o >>= 1) {
      a += __shfl_down_sync(0xffffffffu, a, o);
      b += __shfl_down_sync(0xffffffffu, b, o);
    }
    if (lane == 0) sh[32] = make_double2(a, b);
  }
  __syncthreads();
  /* a later call writes sh[w] only after its own first barrier, which every
   * thread reaches after reading sh[32] here; warp 0 is done with sh[0..31]
   * before the barrier above */
  return sh[32];
}

/* ------------------------------------------------------------ batch norm */

typedef struct bn_dims {
  int64_t N, C, S;
} bn_dims;

/* part[c*P + p] = (sum x, sum x^2), or with BWD (sum g, sum g*xhat) from
 * the statistics st (sum [C], sumsq [C]): g = dy, with RELU dy where
 * (x - mean) * g + b > 0 (g = scale * invstd, b = bias; scale and bias are
 * read only with RELU) */
template <bool BWD, bool RELU>
__global__ void bn_sums(bn_dims d, const float *x, const float *dy, const double *st, const float *scale,
                        const float *bias, double count, double eps, double2 *part) {
  static_assert(BWD || !RELU, "the relu mask is a backward's");
  int64_t c = blockIdx.x, P = gridDim.y, M = d.N * d.S;
  double mean = 0, invstd = 0, mg = 0, mb = 0, s1 = 0, s2 = 0;
  if (BWD) bn_moments(st[c], st[d.C + c], count, eps, &mean, &invstd);
  if (RELU) {
    mg = nmul(scale ? (double)scale[c] : 1.0, invstd);
    mb = bias ? (double)bias[c] : 0.0;
  }
  for (int64_t e = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; e < M; e += P * blockDim.x) {
    int64_t n = e / d.S, i = (n * d.C + c) * d.S + (e - n * d.S);
    double v = x[i];
    if (BWD) {
      double g = RELU && !(nadd(nmul(nsub(v, mean), mg), mb) > 0) ? 0.0 : (double)dy[i];
      s1 = nadd(s1, g);
      s2 = nadd(s2, nmul(nmul(g, nsub(v, mean)), invstd));
    } else {
      s1 = nadd(s1, v);
      s2 = nadd(s2, nmul(v, v));
    }
  }
  double2 t = block_sum2(s1, s2);
  if (threadIdx.x == 0) part[c * P + blockIdx.y] = t;
}

/* a[c] (+)= sum of part[c*P + p].x, b[c] (+)= sum of .y, p in order */
__global__ void bn_finish(int64_t C, int P, const double2 *part, double *a, double *b, bool add) {
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
    double s1 = 0, s2 = 0;
    for (int p = 0; p < P; p++) {
      s1 = nadd(s1, part[c * P + p].x);
      s2 = nadd(s2, part[c * P + p].y);
    }
    a[c] = add ? nadd(a[c], s1) : s1;
    b[c] = add ? nadd(b[c], s2) : s2;
  }
}

/* coef[3c..3c+2] = mean, g = scale * invstd, b = bias (k_norm.c bn_chan_apply) */
__global__ void bn_fwd_coef(int64_t C, const double *st, double count, double eps, const float *scale,
                            const float *bias, double *coef) {
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
    double mean, invstd;
    bn_moments(st[c], st[C + c], count, eps, &mean, &invstd);
    coef[3 * c] = mean;
    coef[3 * c + 1] = nmul(scale ? (double)scale[c] : 1.0, invstd);
    coef[3 * c + 2] = bias ? (double)bias[c] : 0.0;
  }
}

/* y = (x - mean) * g + b; with RELU max(y, 0), NaN passing (as the CPU) */
template <bool RELU>
__global__ void bn_fwd_apply(bn_dims d, const float *x, const double *coef, float *y) {
  int64_t n = d.N * d.C * d.S;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = (i / d.S) % d.C;
    double v = nadd(nmul(nsub((double)x[i], coef[3 * c]), coef[3 * c + 1]), coef[3 * c + 2]);
    y[i] = (float)(RELU && v < 0.0 ? 0.0 : v);
  }
}

/* Coefficients per channel of the backward's dx: 5, and with RELU a 6th. */
#define BN_BWD_K(relu) ((relu) ? 6 : 5)

/* coef[K*c ..] = mean, invstd, g = scale * invstd, dsum/count, dxsum/count
 * (and with RELU b = bias, for the mask) from st = sum, sumsq, dsum, dxsum
 * (C each) */
template <bool RELU>
__global__ void bn_bwd_coef(int64_t C, const double *st, double count, double eps, const float *scale,
                            const float *bias, double *coef) {
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
    double mean, invstd, *k = coef + BN_BWD_K(RELU) * c;
    bn_moments(st[c], st[C + c], count, eps, &mean, &invstd);
    k[0] = mean;
    k[1] = invstd;
    k[2] = nmul(scale ? (double)scale[c] : 1.0, invstd);
    k[3] = ndiv(st[2 * C + c], count);
    k[4] = ndiv(st[3 * C + c], count);
    if (RELU) k[5] = bias ? (double)bias[c] : 0.0;
  }
}

/* dx += g * (dy' - mdy - xhat * mdx); dy' = dy, with RELU dy where
 * (x - mean) * g + b > 0 and 0 elsewhere */
template <bool RELU>
__global__ void bn_bwd_dx(bn_dims d, const float *x, const float *dy, const double *coef, float *dx) {
  int64_t n = d.N * d.C * d.S;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const double *k = coef + BN_BWD_K(RELU) * ((i / d.S) % d.C);
    double xc = nsub((double)x[i], k[0]), xhat = nmul(xc, k[1]);
    double g = RELU && !(nadd(nmul(xc, k[2]), k[5]) > 0) ? 0.0 : (double)dy[i];
    dx[i] += (float)nmul(k[2], nsub(nsub(g, k[3]), nmul(xhat, k[4])));
  }
}

/* dscale[c] += ls2[c], dbias[c] += ls1[c] (each where wanted) */
__global__ void add_grads(int64_t C, const double *ls1, const double *ls2, float *dscale, float *dbias) {
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
    if (dscale) dscale[c] += (float)ls2[c];
    if (dbias) dbias[c] += (float)ls1[c];
  }
}

/* ------------------------------------------------------------- layer norm */

/* Block-wide mean and invstd of row xr [n]: the mean, then the squared
 * deviations from it (k_norm_impl.h ln_stats); without centring (RMS norm,
 * rms_stats) the mean is 0 and invstd is 1 / sqrt(mean(x^2) + eps). */
__device__ static void ln_row_stats(int64_t n, double eps, bool centred, const float *xr, double *mean,
                                    double *invstd) {
  double s = 0;
  for (int64_t j = threadIdx.x; centred && j < n; j += blockDim.x) s = nadd(s, (double)xr[j]);
  double m = centred ? ndiv(block_sum2(s, 0).x, (double)n) : 0.0, q = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    double e = nsub((double)xr[j], m);
    q = nadd(q, nmul(e, e));
  }
  *mean = m;
  *invstd = ndiv(1.0, __dsqrt_rn(nadd(ndiv(block_sum2(q, 0).x, (double)n), eps)));
}

/* y = (x - mean) * invstd * scale + bias, one block per row */
__global__ void ln_fwd(int64_t R, int64_t n, double eps, bool centred, const float *x, const float *scale,
                       const float *bias, float *y) {
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    double mean, invstd;
    ln_row_stats(n, eps, centred, xr, &mean, &invstd);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      double sc = scale ? (double)scale[j] : 1.0, b = bias ? (double)bias[j] : 0.0;
      if (centred) yr[j] = (float)nadd(nmul(nmul(nsub((double)xr[j], mean), invstd), sc), b);
      else yr[j] = (float)(scale ? nmul(nmul((double)xr[j], invstd), sc) : nmul((double)xr[j], invstd)); /* rms_apply */
    }
  }
}

/* Per row: (mean, invstd) into rowst (if given) and, if dx is given,
 * dx += invstd * (g - m1 - xhat * m2), g = dy * scale, m1 = mean(g),
 * m2 = mean(g * xhat) (k_norm_impl.h ln_bwd_means, ln_bwd_dx). */
__global__ void ln_bwd_rows(int64_t R, int64_t n, double eps, bool centred, const float *x, const float *dy,
                            const float *scale, float *dx, double2 *rowst) {
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const float *xr = x + r * n, *dr = dy + r * n;
    double mean, invstd;
    ln_row_stats(n, eps, centred, xr, &mean, &invstd);
    if (rowst && threadIdx.x == 0) rowst[r] = make_double2(mean, invstd);
    if (!dx) continue;
    double s1 = 0, s2 = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      double g = nmul((double)dr[j], scale ? (double)scale[j] : 1.0);
      s1 = nadd(s1, g);
      s2 = nadd(s2, nmul(nmul(g, nsub((double)xr[j], mean)), invstd));
    }
    double2 t = block_sum2(s1, s2);
    double m1 = centred ? ndiv(t.x, (double)n) : 0.0, m2 = ndiv(t.y, (double)n);
    float *gr = dx + r * n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      double g = nmul((double)dr[j], scale ? (double)scale[j] : 1.0);
      double xhat = nmul(nsub((double)xr[j], mean), invstd);
      gr[j] += (float)nmul(invstd, nsub(nsub(g, m1), nmul(xhat, m2)));
    }
  }
}

/* part[p*n + j] = (sum of dy * xhat, sum of dy) over column j of rows
 * [p*chunk, (p+1)*chunk) */
__global__ void ln_cols(int64_t R, int64_t n, int64_t chunk, const float *x, const float *dy, const double2 *rowst,
                        double2 *part) {
  int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, p = blockIdx.y;
  if (j >= n) return;
  int64_t r1 = (p + 1) * chunk < R ? (p + 1) * chunk : R;
  double as = 0, ab = 0;
  for (int64_t r = p * chunk; r < r1; r++) {
    double d = dy[r * n + j];
    as = nadd(as, nmul(nmul(d, nsub((double)x[r * n + j], rowst[r].x)), rowst[r].y));
    ab = nadd(ab, d);
  }
  part[p * n + j] = make_double2(as, ab);
}

/* dscale[j] += sum of part[p*n + j].x, dbias[j] += of .y, p in order */
__global__ void ln_cols_finish(int64_t n, int P, const double2 *part, float *dscale, float *dbias) {
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
    double as = 0, ab = 0;
    for (int p = 0; p < P; p++) {
      as = nadd(as, part[p * n + j].x);
      ab = nadd(ab, part[p * n + j].y);
    }
    if (dscale) dscale[j] += (float)as;
    if (dbias) dbias[j] += (float)ab;
  }
}

/* ------------------------------------------------------------ host helpers */

static int64_t numel(const pcgc_buf *b) {
  int64_t n = 1;
  for (int d = 0; d < b->rank; d++) n *= b->dims[d];
  return n;
}

static bool same_dims(const pcgc_buf *a, const pcgc_buf *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* A wanted gradient buffer (the CPU's kx_want). */
static bool want(const pcgc_buf *b) { return b && b->data; }

static const float *fdata(const pcgc_buf *b) { return b && b->data ? (const float *)b->data : NULL; }

/* "f32[2, 3]" */
static const char *fmt_buf(char *s, size_t n, const pcgc_buf *b) {
  const char *name = (unsigned)b->dtype < PCGC_DTYPE_COUNT ? pcgc_dtype_name(b->dtype) : "?";
  int w = snprintf(s, n, "%s[", name);
  for (int d = 0; d < b->rank && w > 0 && (size_t)w < n; d++)
    w += snprintf(s + w, n - (size_t)w, d ? ", %lld" : "%lld", (long long)b->dims[d]);
  if (w > 0 && (size_t)w < n) snprintf(s + w, n - (size_t)w, "]");
  return s;
}

/* b is a well-formed f32 buffer with data */
static pcgc_status check_f32(const pcgc__cukargs *k, const pcgc_buf *b, const char *what, int i) {
  if (!b->data) return pcgc__kfail(k, "%s %d has no data", what, i);
  if (b->rank < 0 || b->rank > PCGC_MAX_RANK)
    return pcgc__kfail(k, "%s %d has rank %d (0..%d allowed)", what, i, b->rank, PCGC_MAX_RANK);
  if (b->dtype != PCGC_F32) {
    bool fl = (unsigned)b->dtype < PCGC_DTYPE_COUNT && pcgc_dtype_is_float(b->dtype);
    return pcgc__kfail_st(k, fl ? PCGC_ERR_UNSUPPORTED : PCGC_ERR_INVALID,
                          "%s %d is %s: the CUDA kernels compute in f32", what, i,
                          (unsigned)b->dtype < PCGC_DTYPE_COUNT ? pcgc_dtype_name(b->dtype) : "an invalid dtype");
  }
  return PCGC_OK;
}

/* b (f32) must be shaped like ref */
static pcgc_status check_like(const pcgc__cukargs *k, const pcgc_buf *b, const pcgc_buf *ref, const char *what,
                              int i) {
  NM_TRY(check_f32(k, b, what, i));
  if (same_dims(b, ref)) return PCGC_OK;
  char s1[128], s2[128];
  return pcgc__kfail(k, "%s %d is %s but must be %s", what, i, fmt_buf(s1, sizeof s1, b),
                     fmt_buf(s2, sizeof s2, ref));
}

/* A family call: attributes, arity, f32 inputs that inference accepts, the
 * output (forward) or output gradient (backward) and every wanted input
 * gradient shaped like their tensors. */
static pcgc_status norm_check(const pcgc__cukargs *k, bool backward) {
  if (!k->a) return pcgc__kfail(k, "no attributes given");
  if (k->a->kind != k->kind) return pcgc__kfail(k, "the attributes belong to operator '%s'", pcgc_op_name(k->a->kind));
  int with = k->kind == PCGC_OP_RMSNORM ? 2 : 3; /* rmsnorm: a scale, no bias */
  if ((k->n_in != 1 && k->n_in != with) || !k->in)
    return pcgc__kfail(k, "takes an input and optionally %s, got %d inputs",
                       with == 2 ? "a scale" : "both scale and bias", k->in ? k->n_in : 0);
  const pcgc_buf *outs = backward ? k->dout : k->out;
  if (k->n_out != 1 || !outs) return pcgc__kfail(k, "has 1 output, got %d", outs ? k->n_out : 0);
  if (backward && !k->din) return pcgc__kfail(k, "no input gradient buffers given");
  pcgc_ptensor tin[3], tout[1];
  for (int i = 0; i < k->n_in; i++) {
    NM_TRY(check_f32(k, &k->in[i], "input", i));
    for (int d = 0; d < k->in[i].rank; d++)
      if (k->in[i].dims[d] < 1)
        return pcgc__kfail(k, "input %d has size %lld in dim %d; sizes must be positive", i,
                           (long long)k->in[i].dims[d], d);
    pcgc_ptensor_init(&tin[i], k->in[i].dtype, k->in[i].rank, k->in[i].dims);
  }
  pcgc_error e;
  pcgc_error_clear(&e);
  if (pcgc_op_infer(k->kind, k->a, k->n_in, tin, tout, &e) != PCGC_OK) return pcgc__kinfer_fail(k, &e);
  NM_TRY(check_like(k, &outs[0], &k->in[0], backward ? "output gradient" : "output", 0));
  for (int i = 0; backward && i < k->n_in; i++)
    if (want(&k->din[i])) NM_TRY(check_like(k, &k->din[i], &k->in[i], "gradient of input", i));
  return PCGC_OK;
}

template <class T>
static pcgc_status take(const pcgc__cukargs *k, T **p, int64_t count) {
  *p = (T *)pcgc__cu_scratch(k, (size_t)count * sizeof(T));
  return *p || pcgc__cu_measuring(k) ? PCGC_OK : PCGC_ERR_NOMEM;
}

static unsigned grid_of(int64_t n) { return pcgc__cu_blocks(n); }

static bn_dims bn_dims_of(const pcgc_buf *x) {
  bn_dims d = {x->dims[0], x->dims[1], 1};
  for (int i = 2; i < x->rank; i++) d.S *= x->dims[i];
  return d;
}

/* Blocks per channel of the batch-norm sums: about 16 elements a thread. */
static int bn_parts(bn_dims d) {
  int64_t p = (d.N * d.S + PCGC_CU_THREADS * 16 - 1) / (PCGC_CU_THREADS * 16);
  return (int)(p < 1 ? 1 : p > 1024 ? 1024 : p);
}

/* act=relu (a batchnorm fused with a relu) or none; the others are refused. */
static pcgc_status bn_relu(const pcgc__cukargs *k, bool *relu) {
  int64_t act = pcgc_attrs_int(k->a, "act");
  *relu = act == PCGC_ACT_RELU;
  if (act == PCGC_ACT_NONE || *relu) return PCGC_OK;
  const char *name = pcgc_enum_value_name(PCGC_ENUM_ACT, act);
  return pcgc__kfail(k, "act=%s: a batchnorm fuses only act=none or act=relu", name ? name : "?");
}

/* What the backward's g is: dy, or with relu dy masked where bn(x) <= 0
 * (bn(x) from the statistics and these scale and bias, either NULL). */
typedef struct bn_grad {
  const pcgc_buf *dy, *scale, *bias;
  bool relu;
} bn_grad;

/* The per-channel sums of x (with g: of g and g * xhat given st) into a and
 * b, set or added, through the parts in `part` (C * bn_parts doubles2). */
static pcgc_status bn_reduce(const pcgc__cukargs *k, const pcgc_buf *x, const bn_grad *g, const double *st,
                             double count, double eps, double2 *part, double *a, double *b, bool add) {
  bn_dims d = bn_dims_of(x);
  int P = bn_parts(d);
  dim3 grid((unsigned)d.C, (unsigned)P);
  cudaStream_t s = k->cu->stream;
  if (!g)
    bn_sums<false, false><<<grid, PCGC_CU_THREADS, 0, s>>>(d, fdata(x), NULL, NULL, NULL, NULL, count, eps, part);
  else if (!g->relu)
    bn_sums<true, false><<<grid, PCGC_CU_THREADS, 0, s>>>(d, fdata(x), fdata(g->dy), st, NULL, NULL, count, eps,
                                                          part);
  else
    bn_sums<true, true><<<grid, PCGC_CU_THREADS, 0, s>>>(d, fdata(x), fdata(g->dy), st, fdata(g->scale),
                                                         fdata(g->bias), count, eps, part);
  NM_TRY(pcgc__cu_launched(k, "batch-norm sums"));
  bn_finish<<<grid_of(d.C), PCGC_CU_THREADS, 0, s>>>(d.C, P, part, a, b, add);
  return pcgc__cu_launched(k, "batch-norm sums");
}

static pcgc_status bn_apply(const pcgc__cukargs *k, bool relu, const pcgc_buf *x, const pcgc_buf *scale,
                            const pcgc_buf *bias, const double *st, double count, double eps, double *coef,
                            pcgc_buf *y) {
  bn_dims d = bn_dims_of(x);
  cudaStream_t s = k->cu->stream;
  bn_fwd_coef<<<grid_of(d.C), PCGC_CU_THREADS, 0, s>>>(d.C, st, count, eps, fdata(scale), fdata(bias), coef);
  NM_TRY(pcgc__cu_launched(k, "batch-norm coefficients"));
  if (relu) bn_fwd_apply<true><<<grid_of(numel(x)), PCGC_CU_THREADS, 0, s>>>(d, fdata(x), coef, (float *)y->data);
  else bn_fwd_apply<false><<<grid_of(numel(x)), PCGC_CU_THREADS, 0, s>>>(d, fdata(x), coef, (float *)y->data);
  return pcgc__cu_launched(k, "batch-norm apply");
}

/* dx from st = sum, sumsq, dsum, dxsum (C each); coef holds
 * BN_BWD_K(g->relu) * C doubles */
static pcgc_status bn_dx(const pcgc__cukargs *k, const pcgc_buf *x, const bn_grad *g, const double *st, double count,
                         double eps, double *coef, pcgc_buf *dx) {
  bn_dims d = bn_dims_of(x);
  cudaStream_t s = k->cu->stream;
  unsigned gc = grid_of(d.C), gx = grid_of(numel(x));
  const float *sc = fdata(g->scale);
  if (g->relu) bn_bwd_coef<true><<<gc, PCGC_CU_THREADS, 0, s>>>(d.C, st, count, eps, sc, fdata(g->bias), coef);
  else bn_bwd_coef<false><<<gc, PCGC_CU_THREADS, 0, s>>>(d.C, st, count, eps, sc, NULL, coef);
  NM_TRY(pcgc__cu_launched(k, "batch-norm coefficients"));
  if (g->relu) bn_bwd_dx<true><<<gx, PCGC_CU_THREADS, 0, s>>>(d, fdata(x), fdata(g->dy), coef, (float *)dx->data);
  else bn_bwd_dx<false><<<gx, PCGC_CU_THREADS, 0, s>>>(d, fdata(x), fdata(g->dy), coef, (float *)dx->data);
  return pcgc__cu_launched(k, "batch-norm dx");
}

static pcgc_status bn_add_grads(const pcgc__cukargs *k, int64_t C, const double *ls1, const double *ls2,
                                pcgc_buf *dscale, pcgc_buf *dbias) {
  add_grads<<<grid_of(C), PCGC_CU_THREADS, 0, k->cu->stream>>>(
      C, ls1, ls2, want(dscale) ? (float *)dscale->data : NULL, want(dbias) ? (float *)dbias->data : NULL);
  return pcgc__cu_launched(k, "batch-norm scale and bias gradients");
}

/* ------------------------------------------------------ batch norm family */

pcgc_status pcgc__cu_fwd_batchnorm(const pcgc__cukargs *k) {
  NM_TRY(norm_check(k, false));
  NM_TRY(pcgc__kcheck_whole_batch(k, "pcgc_cuda"));
  const pcgc_buf *x = &k->in[0];
  const pcgc_buf *scale = k->n_in == 3 ? &k->in[1] : NULL, *bias = k->n_in == 3 ? &k->in[2] : NULL;
  bool relu;
  NM_TRY(bn_relu(k, &relu));
  bn_dims d = bn_dims_of(x);
  double2 *part;
  double *st, *coef;
  NM_TRY(take(k, &part, d.C * bn_parts(d)));
  NM_TRY(take(k, &st, 2 * d.C));
  NM_TRY(take(k, &coef, 3 * d.C));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  double eps = pcgc_attrs_float(k->a, "eps"), count = (double)(d.N * d.S);
  NM_TRY(bn_reduce(k, x, NULL, NULL, count, eps, part, st, st + d.C, false));
  return bn_apply(k, relu, x, scale, bias, st, count, eps, coef, &k->out[0]);
}

pcgc_status pcgc__cu_bwd_batchnorm(const pcgc__cukargs *k) {
  NM_TRY(norm_check(k, true));
  NM_TRY(pcgc__kcheck_whole_batch(k, "pcgc_cuda"));
  const pcgc_buf *x = &k->in[0], *dy = &k->dout[0];
  pcgc_buf *dx = &k->din[0], *dscale = k->n_in == 3 ? &k->din[1] : NULL, *dbias = k->n_in == 3 ? &k->din[2] : NULL;
  bn_grad g = {dy, k->n_in == 3 ? &k->in[1] : NULL, k->n_in == 3 ? &k->in[2] : NULL, false};
  NM_TRY(bn_relu(k, &g.relu));
  bool want_dx = want(dx), want_sb = want(dscale) || want(dbias);
  if (!want_dx && !want_sb) return PCGC_OK;
  bn_dims d = bn_dims_of(x);
  double2 *part;
  double *st, *coef;
  NM_TRY(take(k, &part, d.C * bn_parts(d)));
  NM_TRY(take(k, &st, 4 * d.C));
  NM_TRY(take(k, &coef, BN_BWD_K(g.relu) * d.C));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  double eps = pcgc_attrs_float(k->a, "eps"), count = (double)(d.N * d.S);
  NM_TRY(bn_reduce(k, x, NULL, NULL, count, eps, part, st, st + d.C, false));
  NM_TRY(bn_reduce(k, x, &g, st, count, eps, part, st + 2 * d.C, st + 3 * d.C, false));
  if (want_dx) NM_TRY(bn_dx(k, x, &g, st, count, eps, coef, dx));
  /* the whole batch: this piece's shares are the sums themselves */
  if (want_sb) NM_TRY(bn_add_grads(k, d.C, st + 2 * d.C, st + 3 * d.C, dscale, dbias));
  return PCGC_OK;
}

/* ----------------------------------------------- batch norm over pieces
 * Called directly, not through the dispatcher: each measures its workspace,
 * reserves it and runs, as the dispatcher does with a family function (only
 * measures when the runtime is measuring). */

typedef pcgc_status (*bn_step_fn)(const pcgc__cukargs *k, void *arg);

static pcgc_status bn_run(pcgc_cuda *cu, const pcgc_attrs *a, pcgc_error *err, bn_step_fn f, void *arg) {
  static const pcgc_kernel_ctx ctx = {NULL, NULL, 0, 0, false, NULL, 0};
  pcgc__cukargs k;
  memset(&k, 0, sizeof k);
  k.cu = cu;
  k.kind = PCGC_OP_BATCHNORM;
  k.a = a;
  k.ctx = &ctx;
  k.err = err;
  if (!cu) return pcgc_error_set(err, PCGC_ERR_INVALID, "batchnorm: no CUDA context given");
  if (a && a->kind != PCGC_OP_BATCHNORM)
    return pcgc__kfail(&k, "the attributes belong to operator '%s'", pcgc_op_name(a->kind));
  bool outer = cu->measuring;
  cu->ws_used = 0;
  cu->measuring = true;
  pcgc_status st = f(&k, arg);
  cu->measuring = outer;
  if (st != PCGC_OK || outer) return st;
  NM_TRY(pcgc_cuda_reserve(cu, err));
  cu->ws_used = 0;
  return f(&k, arg);
}

typedef struct bn_call {
  const pcgc_buf *x, *scale, *bias, *dy;
  pcgc_buf *y, *dx, *dscale, *dbias;
  double *s;
  const double *cs;
  double count;
} bn_call;

/* x an f32 [N, C, ...]; other (if given) shaped like it */
static pcgc_status bn_check(const pcgc__cukargs *k, const bn_call *c, const pcgc_buf *other, const char *what) {
  if (!c->x) return pcgc__kfail(k, "no input given");
  NM_TRY(check_f32(k, c->x, "input", 0));
  if (c->x->rank < 2) return pcgc__kfail(k, "the input must be [N, C, ...], got rank %d", c->x->rank);
  for (int d = 0; d < c->x->rank; d++)
    if (c->x->dims[d] < 1) return pcgc__kfail(k, "input 0 has size %lld in dim %d", (long long)c->x->dims[d], d);
  if (other) NM_TRY(check_like(k, other, c->x, what, 0));
  if (!(c->s || c->cs)) return pcgc__kfail(k, "no statistics given");
  return PCGC_OK;
}

/* scale / bias / their gradients, where given, are f32 [C] */
static pcgc_status bn_check_chan(const pcgc__cukargs *k, const pcgc_buf *b, const char *what) {
  if (!want(b)) return PCGC_OK;
  NM_TRY(check_f32(k, b, what, 0));
  if (b->rank != 1 || b->dims[0] != k->in[0].dims[1]) {
    char s1[128];
    return pcgc__kfail(k, "%s is %s but must be f32[%lld] (the channel count)", what, fmt_buf(s1, sizeof s1, b),
                       (long long)k->in[0].dims[1]);
  }
  return PCGC_OK;
}

static pcgc_status stats_step(const pcgc__cukargs *k, void *arg) {
  const bn_call *c = (const bn_call *)arg;
  NM_TRY(bn_check(k, c, NULL, NULL));
  bn_dims d = bn_dims_of(c->x);
  double2 *part;
  NM_TRY(take(k, &part, d.C * bn_parts(d)));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  return bn_reduce(k, c->x, NULL, NULL, 1, 1, part, c->s, c->s + d.C, true);
}

pcgc_status pcgc_cuda_batchnorm_stats(pcgc_cuda *cu, const pcgc_buf *x, double *s, pcgc_error *err) {
  bn_call c;
  memset(&c, 0, sizeof c);
  c.x = x;
  c.s = s;
  return bn_run(cu, NULL, err, stats_step, &c);
}

static pcgc_status apply_step(const pcgc__cukargs *k, void *arg) {
  const bn_call *c = (const bn_call *)arg;
  NM_TRY(bn_check(k, c, c->y, "output"));
  pcgc__cukargs kk = *k;
  kk.in = c->x; /* for bn_check_chan */
  NM_TRY(bn_check_chan(&kk, c->scale, "scale"));
  NM_TRY(bn_check_chan(&kk, c->bias, "bias"));
  if (!k->a) return pcgc__kfail(k, "no attributes given");
  bool relu;
  NM_TRY(bn_relu(k, &relu));
  if (!(c->count > 0)) return pcgc__kfail(k, "the element count per channel must be positive, got %g", c->count);
  double *coef;
  NM_TRY(take(k, &coef, 3 * c->x->dims[1]));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  return bn_apply(k, relu, c->x, c->scale, c->bias, c->cs, c->count, pcgc_attrs_float(k->a, "eps"), coef, c->y);
}

pcgc_status pcgc_cuda_batchnorm_apply(pcgc_cuda *cu, const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *scale,
                                      const pcgc_buf *bias, const double *s, double count, pcgc_buf *y,
                                      pcgc_error *err) {
  bn_call c;
  memset(&c, 0, sizeof c);
  c.x = x;
  c.scale = scale;
  c.bias = bias;
  c.cs = s;
  c.count = count;
  c.y = y;
  if (!y) return pcgc_error_set(err, PCGC_ERR_INVALID, "batchnorm: no output given");
  return bn_run(cu, a, err, apply_step, &c);
}

static pcgc_status bwd_stats_step(const pcgc__cukargs *k, void *arg) {
  const bn_call *c = (const bn_call *)arg;
  NM_TRY(bn_check(k, c, c->dy, "output gradient"));
  pcgc__cukargs kk = *k;
  kk.in = c->x;
  NM_TRY(bn_check_chan(&kk, c->scale, "scale"));
  NM_TRY(bn_check_chan(&kk, c->bias, "bias"));
  if (!k->a) return pcgc__kfail(k, "no attributes given");
  bn_grad g = {c->dy, c->scale, c->bias, false};
  NM_TRY(bn_relu(k, &g.relu));
  if (!(c->count > 0)) return pcgc__kfail(k, "the element count per channel must be positive, got %g", c->count);
  bn_dims d = bn_dims_of(c->x);
  double2 *part;
  NM_TRY(take(k, &part, d.C * bn_parts(d)));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  return bn_reduce(k, c->x, &g, c->s, c->count, pcgc_attrs_float(k->a, "eps"), part, c->s + 2 * d.C,
                   c->s + 3 * d.C, true);
}

pcgc_status pcgc_cuda_batchnorm_bwd_stats(pcgc_cuda *cu, const pcgc_attrs *a, const pcgc_buf *x,
                                          const pcgc_buf *scale, const pcgc_buf *bias, const pcgc_buf *dy, double *s,
                                          double count, pcgc_error *err) {
  bn_call c;
  memset(&c, 0, sizeof c);
  c.x = x;
  c.scale = scale;
  c.bias = bias;
  c.dy = dy;
  c.s = s;
  c.count = count;
  if (!dy) return pcgc_error_set(err, PCGC_ERR_INVALID, "batchnorm: no output gradient given");
  return bn_run(cu, a, err, bwd_stats_step, &c);
}

static pcgc_status bwd_apply_step(const pcgc__cukargs *k, void *arg) {
  const bn_call *c = (const bn_call *)arg;
  NM_TRY(bn_check(k, c, c->dy, "output gradient"));
  pcgc__cukargs kk = *k;
  kk.in = c->x;
  NM_TRY(bn_check_chan(&kk, c->scale, "scale"));
  NM_TRY(bn_check_chan(&kk, c->bias, "bias"));
  NM_TRY(bn_check_chan(&kk, c->dscale, "scale gradient"));
  NM_TRY(bn_check_chan(&kk, c->dbias, "bias gradient"));
  if (want(c->dx)) NM_TRY(check_like(k, c->dx, c->x, "gradient of input", 0));
  if (!k->a) return pcgc__kfail(k, "no attributes given");
  bn_grad g = {c->dy, c->scale, c->bias, false};
  NM_TRY(bn_relu(k, &g.relu));
  if (!(c->count > 0)) return pcgc__kfail(k, "the element count per channel must be positive, got %g", c->count);
  bool want_dx = want(c->dx), want_sb = want(c->dscale) || want(c->dbias);
  bn_dims d = bn_dims_of(c->x);
  double2 *part = NULL;
  double *coef = NULL, *ls = NULL;
  if (want_dx) NM_TRY(take(k, &coef, BN_BWD_K(g.relu) * d.C));
  if (want_sb) {
    NM_TRY(take(k, &part, d.C * bn_parts(d)));
    NM_TRY(take(k, &ls, 2 * d.C));
  }
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  double eps = pcgc_attrs_float(k->a, "eps");
  if (want_dx) NM_TRY(bn_dx(k, c->x, &g, c->cs, c->count, eps, coef, c->dx));
  if (!want_sb) return PCGC_OK;
  /* this piece's shares: its own sums of g and g * xhat */
  NM_TRY(bn_reduce(k, c->x, &g, c->cs, c->count, eps, part, ls, ls + d.C, false));
  return bn_add_grads(k, d.C, ls, ls + d.C, c->dscale, c->dbias);
}

pcgc_status pcgc_cuda_batchnorm_bwd_apply(pcgc_cuda *cu, const pcgc_attrs *a, const pcgc_buf *x,
                                          const pcgc_buf *scale, const pcgc_buf *bias, const pcgc_buf *dy,
                                          const double *s, double count, pcgc_buf *dx, pcgc_buf *dscale,
                                          pcgc_buf *dbias, pcgc_error *err) {
  bn_call c;
  memset(&c, 0, sizeof c);
  c.x = x;
  c.scale = scale;
  c.bias = bias;
  c.dy = dy;
  c.cs = s;
  c.count = count;
  c.dx = dx;
  c.dscale = dscale;
  c.dbias = dbias;
  if (!dy) return pcgc_error_set(err, PCGC_ERR_INVALID, "batchnorm: no output gradient given");
  return bn_run(cu, a, err, bwd_apply_step, &c);
}

/* ------------------------------------------------------ layer norm family */

typedef struct ln_dims {
  int64_t R, n;
} ln_dims;

static ln_dims ln_dims_of(const pcgc__cukargs *k) {
  const pcgc_buf *x = &k->in[0];
  int first = x->rank - (int)pcgc_attrs_int(k->a, "axes");
  ln_dims d = {1, 1};
  for (int i = 0; i < x->rank; i++) *(i < first ? &d.R : &d.n) *= x->dims[i];
  return d;
}

/* Threads of a row's block: a multiple of 32, no more than the row needs. */
static unsigned ln_threads(int64_t n) {
  int64_t t = (n + 31) / 32 * 32;
  return (unsigned)(t > PCGC_CU_THREADS ? PCGC_CU_THREADS : t);
}

static unsigned ln_rows_grid(int64_t R) { return (unsigned)(R < (1 << 20) ? R : (1 << 20)); }

pcgc_status pcgc__cu_fwd_layernorm(const pcgc__cukargs *k) {
  NM_TRY(norm_check(k, false));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  ln_dims d = ln_dims_of(k);
  const pcgc_buf *scale = k->n_in == 3 ? &k->in[1] : NULL, *bias = k->n_in == 3 ? &k->in[2] : NULL;
  ln_fwd<<<ln_rows_grid(d.R), ln_threads(d.n), 0, k->cu->stream>>>(d.R, d.n, pcgc_attrs_float(k->a, "eps"), true,
                                                                     fdata(&k->in[0]), fdata(scale), fdata(bias),
                                                                     (float *)k->out[0].data);
  return pcgc__cu_launched(k, "layer norm");
}

/* Row chunks of the column sums: enough blocks to fill the device. */
static int ln_parts(ln_dims d) {
  int64_t p = ((int64_t)1 << 17) / d.n;
  if (p > d.R) p = d.R;
  return (int)(p < 1 ? 1 : p > 4096 ? 4096 : p);
}

/* Layer norm's backward; RMS norm's (no centring, no bias) when k is an rmsnorm. */
pcgc_status pcgc__cu_bwd_layernorm(const pcgc__cukargs *k) {
  NM_TRY(norm_check(k, true));
  bool centred = k->kind != PCGC_OP_RMSNORM;
  const pcgc_buf *x = &k->in[0], *dy = &k->dout[0];
  const pcgc_buf *scale = k->n_in > 1 ? &k->in[1] : NULL;
  pcgc_buf *dx = &k->din[0], *dscale = k->n_in > 1 ? &k->din[1] : NULL, *dbias = k->n_in == 3 ? &k->din[2] : NULL;
  bool want_dx = want(dx), want_cols = want(dscale) || want(dbias);
  if (!want_dx && !want_cols) return PCGC_OK;
  ln_dims d = ln_dims_of(k);
  int P = ln_parts(d);
  double2 *rowst = NULL, *part = NULL;
  if (want_cols) {
    NM_TRY(take(k, &rowst, d.R));
    NM_TRY(take(k, &part, (int64_t)P * d.n));
  }
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  cudaStream_t s = k->cu->stream;
  ln_bwd_rows<<<ln_rows_grid(d.R), ln_threads(d.n), 0, s>>>(d.R, d.n, pcgc_attrs_float(k->a, "eps"), centred,
                                                            fdata(x), fdata(dy), fdata(scale),
                                                            want_dx ? (float *)dx->data : NULL, rowst);
  NM_TRY(pcgc__cu_launched(k, "layer norm backward"));
  if (!want_cols) return PCGC_OK;
  int64_t chunk = (d.R + P - 1) / P;
  dim3 grid((unsigned)((d.n + PCGC_CU_THREADS - 1) / PCGC_CU_THREADS), (unsigned)P);
  ln_cols<<<grid, PCGC_CU_THREADS, 0, s>>>(d.R, d.n, chunk, fdata(x), fdata(dy), rowst, part);
  NM_TRY(pcgc__cu_launched(k, "layer norm scale and bias gradients"));
  ln_cols_finish<<<grid_of(d.n), PCGC_CU_THREADS, 0, s>>>(d.n, P, part, want(dscale) ? (float *)dscale->data : NULL,
                                                          want(dbias) ? (float *)dbias->data : NULL);
  return pcgc__cu_launched(k, "layer norm scale and bias gradients");
}

/* ---------------------------------------------------------------- RMS norm */

pcgc_status pcgc__cu_fwd_rmsnorm(const pcgc__cukargs *k) {
  NM_TRY(norm_check(k, false));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  ln_dims d = ln_dims_of(k);
  const pcgc_buf *scale = k->n_in == 2 ? &k->in[1] : NULL;
  ln_fwd<<<ln_rows_grid(d.R), ln_threads(d.n), 0, k->cu->stream>>>(d.R, d.n, pcgc_attrs_float(k->a, "eps"), false,
                                                                     fdata(&k->in[0]), fdata(scale), NULL,
                                                                     (float *)k->out[0].data);
  return pcgc__cu_launched(k, "RMS norm");
}

pcgc_status pcgc__cu_bwd_rmsnorm(const pcgc__cukargs *k) { return pcgc__cu_bwd_layernorm(k); }
