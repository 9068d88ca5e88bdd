/*
 * cu_core.cu — the CUDA backend's context, device memory, box moves, the
 * workspace and the dispatch of pcgc_cuda_forward/backward to the family
 * functions (one per ops.def `fn`, in cu_dense.cu, cu_elementwise.cu,
 * cu_shape.cu, cu_loss.cu, cu_norm.cu).
 *
 * Before pcgc_cuda_freeze each kernel call runs its family function twice:
 * measuring (it only asks for workspace), then for real once the workspace
 * is large enough, growing it on demand. After it (the runtime's step loop,
 * whose kernels were all measured first) a call runs once, and one that
 * needs more than the workspace fails: the step loop never allocates.
 */
#include <stdio.h>
#include <string.h>

#include <cuda_bf16.h>

#include "cu_internal.h"

static pcgc_status cuda_fail(pcgc_error *err, cudaError_t e, const char *what) {
  return pcgc_error_set(err, e == cudaErrorMemoryAllocation ? PCGC_ERR_NOMEM : PCGC_ERR_IO, "CUDA: %s: %s", what,
                        cudaGetErrorString(e));
}

pcgc_cuda *pcgc_cuda_open(int device, pcgc_error *err) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "no usable CUDA device: %s",
                   e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
    pcgc_error_hint(err, "run the plan on CPU processes with --backend cpu, or on a machine with NVIDIA GPUs");
    return NULL;
  }
  if (device < 0 || device >= n) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "CUDA device %d does not exist (this node has %d)", device, n);
    return NULL;
  }
  pcgc_cuda *cu = (pcgc_cuda *)calloc(1, sizeof *cu);
  if (!cu) {
    pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    return NULL;
  }
  cu->device = device;
  cudaDeviceProp prop;
  if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess ||
      (e = cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking)) != cudaSuccess) {
    cuda_fail(err, e, "opening the device");
    free(cu);
    return NULL;
  }
  snprintf(cu->desc, sizeof cu->desc, "%.200s (device %d, sm_%d%d, %.1f GiB)", prop.name, device, prop.major, prop.minor,
           (double)prop.totalGlobalMem / (1 << 30));
  if (cublasCreate(&cu->blas) != CUBLAS_STATUS_SUCCESS) {
    pcgc_error_set(err, PCGC_ERR_IO, "cuBLAS: cannot create a handle on %s", cu->desc);
    cudaStreamDestroy(cu->stream);
    free(cu);
    return NULL;
  }
  cublasSetStream(cu->blas, cu->stream);
  cublasSetMathMode(cu->blas, CUBLAS_DEFAULT_MATH); /* no TF32: f32 results match the CPU's */
  /* cuBLAS's workspace from us, once (NVIDIA suggests 32 MiB on Hopper), so
   * that no GEMM in the step loop makes cuBLAS allocate */
  const size_t blas_ws = (size_t)32 << 20;
  if (cudaMalloc(&cu->blas_ws, blas_ws) != cudaSuccess ||
      cublasSetWorkspace(cu->blas, cu->blas_ws, blas_ws) != CUBLAS_STATUS_SUCCESS) {
    pcgc_error_set(err, PCGC_ERR_NOMEM, "cuBLAS: cannot set up its 32 MiB workspace on %s", cu->desc);
    cudaFree(cu->blas_ws);
    cublasDestroy(cu->blas);
    cudaStreamDestroy(cu->stream);
    free(cu);
    return NULL;
  }
  cudnnStatus_t ds = cudnnCreate(&cu->dnn);
  if (ds != CUDNN_STATUS_SUCCESS) {
    pcgc_error_set(err, PCGC_ERR_IO, "cuDNN: cannot create a handle on %s: %s", cu->desc, cudnnGetErrorString(ds));
    cublasDestroy(cu->blas);
    cudaStreamDestroy(cu->stream);
    free(cu);
    return NULL;
  }
  cudnnSetStream(cu->dnn, cu->stream);
  return cu;
}

void pcgc_cuda_close(pcgc_cuda *cu) {
  if (!cu) return;
  cudaSetDevice(cu->device);
  pcgc_cuda_sync(cu, NULL);
  pcgc__cu_comm_close_all(cu);
  cudaFree(cu->ws);
  cudnnDestroy(cu->dnn);
  cublasDestroy(cu->blas);
  cudaFree(cu->blas_ws);
  cudaStreamDestroy(cu->stream);
  free(cu);
}

const char *pcgc_cuda_describe(const pcgc_cuda *cu) { return cu->desc; }

/* cu_dense.cu reads it at every GEMM and convolution; the cuBLAS handle keeps
 * CUBLAS_DEFAULT_MATH throughout (TF32 and BF16 are asked for per call). */
void pcgc_cuda_set_math(pcgc_cuda *cu, pcgc_cuda_math m) { cu->math = (int)m; }

/* ------------------------------------------------------------ memory */

void *pcgc_cuda_alloc(pcgc_cuda *cu, size_t bytes, pcgc_error *err) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
  if (e != cudaSuccess) {
    pcgc_error_set(err, PCGC_ERR_NOMEM, "CUDA: cannot allocate %.1f MiB on %s: %s", (double)bytes / (1 << 20),
                   cu->desc, cudaGetErrorString(e));
    return NULL;
  }
  return p;
}

void pcgc_cuda_free(pcgc_cuda *cu, void *p) {
  (void)cu;
  if (p) cudaFree(p);
}

pcgc_status pcgc_cuda_zero(pcgc_cuda *cu, void *p, size_t bytes, pcgc_error *err) {
  cudaError_t e = cudaMemsetAsync(p, 0, bytes, cu->stream);
  return e == cudaSuccess ? PCGC_OK : cuda_fail(err, e, "zeroing a buffer");
}

/* Several buffers cleared by one kernel: their pointers and sizes travel in
 * the launch's parameters (PCGC_ZERO_MAX of them), block row y clears
 * buffer y, in 16-byte words where its size and address allow. */
typedef struct zero_list_args {
  char *p[PCGC_CUDA_ZERO_MAX];
  size_t n[PCGC_CUDA_ZERO_MAX];
} zero_list_args;

__global__ void zero_list_kernel(zero_list_args a) {
  char *p = a.p[blockIdx.y];
  size_t n = a.n[blockIdx.y];
  size_t stride = (size_t)gridDim.x * blockDim.x, i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (((uintptr_t)p & 15) == 0) {
    size_t words = n / 16;
    for (size_t k = i; k < words; k += stride) reinterpret_cast<int4 *>(p)[k] = make_int4(0, 0, 0, 0);
    for (size_t k = words * 16 + i; k < n; k += stride) p[k] = 0;
  } else {
    for (size_t k = i; k < n; k += stride) p[k] = 0;
  }
}

pcgc_status pcgc_cuda_zero_list(pcgc_cuda *cu, int n, void *const *p, const size_t *bytes, pcgc_error *err) {
  for (int at = 0; at < n; at += PCGC_CUDA_ZERO_MAX) {
    zero_list_args a;
    int k = n - at < PCGC_CUDA_ZERO_MAX ? n - at : PCGC_CUDA_ZERO_MAX;
    size_t most = 0;
    for (int i = 0; i < k; i++) {
      a.p[i] = (char *)p[at + i];
      a.n[i] = bytes[at + i];
      if (a.n[i] > most) most = a.n[i];
    }
    if (most == 0) continue;
    size_t blocks = (most / 16 + 255) / 256;
    if (blocks < 1) blocks = 1;
    if (blocks > 1024) blocks = 1024;
    zero_list_kernel<<<dim3((unsigned)blocks, (unsigned)k), 256, 0, cu->stream>>>(a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_fail(err, e, "zeroing buffers");
  }
  return PCGC_OK;
}

pcgc_status pcgc_cuda_upload(pcgc_cuda *cu, void *dev, const void *host, size_t bytes, pcgc_error *err) {
  /* synchronous with respect to the host buffer: the caller may reuse it at once */
  cudaError_t e = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, cu->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream);
  return e == cudaSuccess ? PCGC_OK : cuda_fail(err, e, "copying to the device");
}

pcgc_status pcgc_cuda_download(pcgc_cuda *cu, void *host, const void *dev, size_t bytes, pcgc_error *err) {
  cudaError_t e = cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, cu->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream);
  return e == cudaSuccess ? PCGC_OK : cuda_fail(err, e, "copying from the device");
}

/* With communicators open, the compute stream and theirs wait for one
 * another: cu_comm.cu polls them all and NCCL's errors. */
pcgc_status pcgc_cuda_sync(pcgc_cuda *cu, pcgc_error *err) {
  if (cu->n_comms > 0) return pcgc__cu_comm_sync(cu, err);
  cudaError_t e = cudaStreamSynchronize(cu->stream);
  return e == cudaSuccess ? PCGC_OK : cuda_fail(err, e, "running the device's stream");
}

/* Box moves: one thread per element of the box, dims collapsed to rank <= 6. */
typedef struct move_geom {
  int rank;
  int64_t len[PCGC_MAX_RANK];
  int64_t dstride[PCGC_MAX_RANK], sstride[PCGC_MAX_RANK];
  int64_t dbase, sbase, n;
} move_geom;

/* Element i of the box: its offsets in dst and src. */
__device__ __forceinline__ void box_at(const move_geom &g, int64_t i, int64_t *di, int64_t *si) {
  int64_t r = i, a = g.dbase, b = g.sbase;
  for (int k = g.rank - 1; k >= 0; k--) {
    int64_t c = r % g.len[k];
    r /= g.len[k];
    a += c * g.dstride[k];
    b += c * g.sstride[k];
  }
  *di = a;
  *si = b;
}

template <typename T, bool ADD>
__global__ void move_kernel(move_geom g, T *__restrict__ d, const T *__restrict__ s) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += stride) {
    int64_t di, si;
    box_at(g, i, &di, &si);
    if (ADD) d[di] += s[si];
    else d[di] = s[si];
  }
}

/* f32 <-> bf16 and bf16 sums: each element through f32, rounded to nearest even. */
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename D, typename S, bool ADD>
__global__ void convert_kernel(move_geom g, D *__restrict__ d, const S *__restrict__ s) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += stride) {
    int64_t di, si;
    box_at(g, i, &di, &si);
    float v = to_f32(s[si]);
    d[di] = from_f32<D>(ADD ? to_f32(d[di]) + v : v);
  }
}

/* The same over one contiguous run of n elements (a whole buffer widened or
 * rounded back, exec.c's bf16 storage): no index arithmetic, two elements a
 * thread and step where both runs are aligned for it. */
template <typename D, typename S> struct pair_of;
template <> struct pair_of<float, __nv_bfloat16> { typedef float2 d; typedef __nv_bfloat162 s; };
template <> struct pair_of<__nv_bfloat16, float> { typedef __nv_bfloat162 d; typedef float2 s; };
template <> struct pair_of<__nv_bfloat16, __nv_bfloat16> { typedef __nv_bfloat162 d; typedef __nv_bfloat162 s; };

__device__ __forceinline__ float2 to_f32x2(float2 x) { return x; }
__device__ __forceinline__ float2 to_f32x2(__nv_bfloat162 x) { return __bfloat1622float2(x); }
template <typename T> __device__ __forceinline__ T from_f32x2(float2 x);
template <> __device__ __forceinline__ float2 from_f32x2<float2>(float2 x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat162 from_f32x2<__nv_bfloat162>(float2 x) { return __float22bfloat162_rn(x); }

template <typename D, typename S, bool ADD>
__global__ void convert_flat_kernel(int64_t n, bool pairs, D *__restrict__ d, const S *__restrict__ s) {
  int64_t gs = (int64_t)gridDim.x * blockDim.x, i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (pairs) {
    typedef typename pair_of<D, S>::d D2;
    typedef typename pair_of<D, S>::s S2;
    D2 *d2 = (D2 *)d;
    const S2 *s2 = (const S2 *)s;
    for (int64_t i = i0; i < n / 2; i += gs) {
      float2 v = to_f32x2(s2[i]);
      if (ADD) {
        float2 a = to_f32x2(d2[i]);
        v.x += a.x;
        v.y += a.y;
      }
      d2[i] = from_f32x2<D2>(v);
    }
    if (n % 2 && i0 == 0) {
      float v = to_f32(s[n - 1]);
      d[n - 1] = from_f32<D>(ADD ? to_f32(d[n - 1]) + v : v);
    }
    return;
  }
  for (int64_t i = i0; i < n; i += gs) {
    float v = to_f32(s[i]);
    d[i] = from_f32<D>(ADD ? to_f32(d[i]) + v : v);
  }
}

template <typename D, typename S, bool ADD>
static void convert_launch(cudaStream_t stream, const move_geom &g, bool flat, void *dst, const void *src) {
  D *d = (D *)dst;
  const S *s = (const S *)src;
  if (flat) {
    d += g.dbase;
    s += g.sbase;
    bool pairs = (uintptr_t)d % (2 * sizeof(D)) == 0 && (uintptr_t)s % (2 * sizeof(S)) == 0;
    convert_flat_kernel<D, S, ADD><<<pcgc__cu_blocks(pairs ? (g.n + 1) / 2 : g.n), PCGC_CU_THREADS, 0, stream>>>(
        g.n, pairs, d, s);
  } else {
    convert_kernel<D, S, ADD><<<pcgc__cu_blocks(g.n), PCGC_CU_THREADS, 0, stream>>>(g, d, s);
  }
}

/* The box (lo, len) of dst (dims ddims from doff) and src (sdims, soff). */
static move_geom geom_of(int rank, const int64_t *ddims, const int64_t *doff, const int64_t *sdims,
                         const int64_t *soff, const int64_t *lo, const int64_t *len) {
  move_geom g;
  memset(&g, 0, sizeof g);
  g.rank = rank;
  g.n = 1;
  int64_t ds = 1, ss = 1;
  for (int k = rank - 1; k >= 0; k--) {
    g.len[k] = len[k];
    g.dstride[k] = ds;
    g.sstride[k] = ss;
    g.dbase += (lo[k] - doff[k]) * ds;
    g.sbase += (lo[k] - soff[k]) * ss;
    ds *= ddims[k];
    ss *= sdims[k];
    g.n *= len[k];
  }
  return g;
}

/* Several boxes moved by one kernel (a packed run of sends, an unpacked
 * run of receives): their geometries and pointers travel in the launch's
 * parameters, block row y moves box y, elements of es bytes (es 0: f32
 * elements added). */
typedef struct move_list_args {
  move_geom g[PCGC_CUDA_MOVE_MAX];
  char *d[PCGC_CUDA_MOVE_MAX];
  const char *s[PCGC_CUDA_MOVE_MAX];
  int es[PCGC_CUDA_MOVE_MAX];
} move_list_args;
/* 32 boxes take about 6 KiB of parameters: CUDA 12.1 and later pass up to
 * 32,764 bytes to a kernel on Volta and newer (sm_70+; we build for sm_90). */
static_assert(CUDART_VERSION >= 12010, "move_list's parameters need CUDA 12.1 or later (over 4 KiB)");
static_assert(sizeof(move_list_args) <= 32764, "a launch's parameters hold at most 32,764 bytes");

__global__ void move_list_kernel(move_list_args a) {
  const move_geom &g = a.g[blockIdx.y];
  char *d = a.d[blockIdx.y];
  const char *s = a.s[blockIdx.y];
  int es = a.es[blockIdx.y];
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += stride) {
    int64_t di, si;
    box_at(g, i, &di, &si);
    if (es == 0) reinterpret_cast<float *>(d)[di] += reinterpret_cast<const float *>(s)[si];
    else if (es == 8) reinterpret_cast<int64_t *>(d)[di] = reinterpret_cast<const int64_t *>(s)[si];
    else if (es == 4) reinterpret_cast<int32_t *>(d)[di] = reinterpret_cast<const int32_t *>(s)[si];
    else if (es == 2) reinterpret_cast<int16_t *>(d)[di] = reinterpret_cast<const int16_t *>(s)[si];
    else d[di] = s[si];
  }
}

pcgc_status pcgc_cuda_move_list(pcgc_cuda *cu, int n, const pcgc_cuda_box_move *m, pcgc_error *err) {
  for (int at = 0; at < n; at += PCGC_CUDA_MOVE_MAX) {
    move_list_args a;
    memset(&a, 0, sizeof a);
    int k = n - at < PCGC_CUDA_MOVE_MAX ? n - at : PCGC_CUDA_MOVE_MAX;
    int64_t most = 0;
    for (int i = 0; i < k; i++) {
      const pcgc_cuda_box_move *x = &m[at + i];
      if (x->rank < 0 || x->rank > PCGC_MAX_RANK)
        return pcgc_error_set(err, PCGC_ERR_INVALID, "moving a box of rank %d (0 to %d)", x->rank, PCGC_MAX_RANK);
      a.g[i] = geom_of(x->rank, x->ddims, x->doff, x->sdims, x->soff, x->lo, x->len);
      a.d[i] = (char *)x->dst;
      a.s[i] = (const char *)x->src;
      if (x->add && x->t != PCGC_F32)
        return pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "adding a box of %s in a list (f32 only)",
                              pcgc_dtype_name(x->t));
      a.es[i] = x->add ? 0 : (int)pcgc_dtype_size(x->t);
      if (a.g[i].n > most) most = a.g[i].n;
    }
    if (most <= 0) continue;
    move_list_kernel<<<dim3(pcgc__cu_blocks(most), (unsigned)k), PCGC_CU_THREADS, 0, cu->stream>>>(a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_fail(err, e, "moving boxes");
  }
  return PCGC_OK;
}

pcgc_status pcgc_cuda_move(pcgc_cuda *cu, pcgc_dtype t, pcgc_dtype st, int rank, void *dst, const int64_t *ddims,
                           const int64_t *doff, const void *src, const int64_t *sdims, const int64_t *soff,
                           const int64_t *lo, const int64_t *len, bool add, pcgc_error *err) {
  move_geom g = geom_of(rank, ddims, doff, sdims, soff, lo, len);
  if (g.n <= 0) return PCGC_OK;
  size_t es = pcgc_dtype_size(t);
  if (rank == 0) g.rank = 0;
  /* a contiguous run in both */
  bool contiguous = true;
  for (int k = 1; k < rank; k++)
    if (len[k] != ddims[k] || len[k] != sdims[k]) contiguous = false;
  if (t != st || (add && t == PCGC_BF16)) {
    typedef __nv_bfloat16 bf;
    bool flat = contiguous || rank <= 1;
    if (t == PCGC_F32 && st == PCGC_BF16) {
      if (add) convert_launch<float, bf, true>(cu->stream, g, flat, dst, src);
      else convert_launch<float, bf, false>(cu->stream, g, flat, dst, src);
    } else if (t == PCGC_BF16 && st == PCGC_F32) {
      if (add) convert_launch<bf, float, true>(cu->stream, g, flat, dst, src);
      else convert_launch<bf, float, false>(cu->stream, g, flat, dst, src);
    } else if (t == PCGC_BF16 && st == PCGC_BF16) {
      convert_launch<bf, bf, true>(cu->stream, g, flat, dst, src);
    } else {
      return pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "moving a box of %s into one of %s is not supported",
                            pcgc_dtype_name(st), pcgc_dtype_name(t));
    }
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? PCGC_OK : cuda_fail(err, e, "converting a box");
  }
  if (!add && (contiguous || rank <= 1)) {
    cudaError_t e = cudaMemcpyAsync((char *)dst + g.dbase * es, (const char *)src + g.sbase * es, (size_t)g.n * es,
                                    cudaMemcpyDeviceToDevice, cu->stream);
    return e == cudaSuccess ? PCGC_OK : cuda_fail(err, e, "moving a box");
  }
  unsigned blocks = pcgc__cu_blocks(g.n);
  if (add && t == PCGC_F32) move_kernel<float, true><<<blocks, PCGC_CU_THREADS, 0, cu->stream>>>(g, (float *)dst, (const float *)src);
  else if (add && t == PCGC_F64)
    move_kernel<double, true><<<blocks, PCGC_CU_THREADS, 0, cu->stream>>>(g, (double *)dst, (const double *)src);
  else if (add)
    return pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "adding boxes of %s is not supported", pcgc_dtype_name(t));
  else if (es == 8)
    move_kernel<int64_t, false><<<blocks, PCGC_CU_THREADS, 0, cu->stream>>>(g, (int64_t *)dst, (const int64_t *)src);
  else if (es == 4)
    move_kernel<int32_t, false><<<blocks, PCGC_CU_THREADS, 0, cu->stream>>>(g, (int32_t *)dst, (const int32_t *)src);
  else if (es == 2)
    move_kernel<int16_t, false><<<blocks, PCGC_CU_THREADS, 0, cu->stream>>>(g, (int16_t *)dst, (const int16_t *)src);
  else
    move_kernel<int8_t, false><<<blocks, PCGC_CU_THREADS, 0, cu->stream>>>(g, (int8_t *)dst, (const int8_t *)src);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? PCGC_OK : cuda_fail(err, e, "moving a box");
}

/* ---------------------------------------------------------- workspace */

void pcgc_cuda_measure(pcgc_cuda *cu, bool on) { cu->measuring = on; }

pcgc_status pcgc_cuda_reserve(pcgc_cuda *cu, pcgc_error *err) {
  if (cu->ws_need <= cu->ws_cap) return PCGC_OK;
  if (cu->frozen)
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "CUDA: a kernel needs %zu bytes of workspace; %zu were planned",
                          cu->ws_need, cu->ws_cap);
  cudaError_t e = cudaStreamSynchronize(cu->stream);
  if (e != cudaSuccess) return cuda_fail(err, e, "growing the workspace");
  cudaFree(cu->ws);
  cu->ws = NULL;
  cu->ws_cap = 0;
  size_t want = (cu->ws_need + 4095) & ~(size_t)4095;
  if ((e = cudaMalloc((void **)&cu->ws, want)) != cudaSuccess) return cuda_fail(err, e, "allocating the workspace");
  cu->ws_cap = want;
  /* cuBLAS takes its own workspace from ours from now on */
  return PCGC_OK;
}

void pcgc_cuda_freeze(pcgc_cuda *cu) { cu->frozen = true; }

size_t pcgc_cuda_workspace_bytes(const pcgc_cuda *cu) { return cu->ws_cap; }

void *pcgc__cu_scratch(const pcgc__cukargs *k, size_t bytes) {
  pcgc_cuda *cu = k->cu;
  size_t at = (cu->ws_used + 255) & ~(size_t)255;
  cu->ws_used = at + (bytes ? bytes : 1);
  if (cu->measuring) {
    if (cu->ws_used > cu->ws_need) cu->ws_need = cu->ws_used;
    return NULL;
  }
  if (cu->ws_used > cu->ws_cap) { /* the dispatcher reserved the measured need: a kernel asked for more */
    pcgc_error_set(k->err, PCGC_ERR_NOMEM, "%s: asked for more workspace than it measured (%zu > %zu bytes)",
                   pcgc_op_name(k->kind), cu->ws_used, cu->ws_cap);
    return NULL;
  }
  return cu->ws + at;
}

/* ------------------------------------------------------------- errors */

pcgc_status pcgc__cu_check(const pcgc__cukargs *k, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return PCGC_OK;
  return pcgc__kfail_st(k, e == cudaErrorMemoryAllocation ? PCGC_ERR_NOMEM : PCGC_ERR_IO, "%s: %s", what,
                        cudaGetErrorString(e));
}

pcgc_status pcgc__cu_check_blas(const pcgc__cukargs *k, cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return PCGC_OK;
  return pcgc__kfail_st(k, PCGC_ERR_IO, "%s: cuBLAS status %d (%s)", what, (int)s, cublasGetStatusString(s));
}

pcgc_status pcgc__cu_check_dnn(const pcgc__cukargs *k, cudnnStatus_t s, const char *what) {
  if (s == CUDNN_STATUS_SUCCESS) return PCGC_OK;
  return pcgc__kfail_st(k, PCGC_ERR_IO, "%s: %s", what, cudnnGetErrorString(s));
}

/* ----------------------------------------------------------- dispatch */

#define NOT_A_KERNEL(fn)                                                                        \
  pcgc_status pcgc__cu_fwd_##fn(const pcgc__cukargs *k) {                                      \
    return pcgc__kfail(k, "not a kernel: the runtime executes this operator itself");          \
  }                                                                                             \
  pcgc_status pcgc__cu_bwd_##fn(const pcgc__cukargs *k) { return pcgc__cu_fwd_##fn(k); }
PCGC__NOT_KERNELS(NOT_A_KERNEL)

typedef pcgc_status (*cukfn)(const pcgc__cukargs *);
static const cukfn fwd_table[PCGC_OP_COUNT] = {
#define PCGC_OP(id, name, fn, min_in, max_in, n_out, schema) pcgc__cu_fwd_##fn,
#include "ops.def"
#undef PCGC_OP
};
static const cukfn bwd_table[PCGC_OP_COUNT] = {
#define PCGC_OP(id, name, fn, min_in, max_in, n_out, schema) pcgc__cu_bwd_##fn,
#include "ops.def"
#undef PCGC_OP
};

static const pcgc_kernel_ctx default_ctx = {NULL, NULL, 0, 0, false, NULL, 0};

/* measure, reserve, run */
static pcgc_status run_family(cukfn f, pcgc__cukargs *k) {
  pcgc_cuda *cu = k->cu;
  if (cu->frozen && !cu->measuring) { /* the step loop: the workspace was sized for every kernel of the
                                         program, so one pass (a kernel asking more fails in scratch) */
    cu->ws_used = 0;
    return f(k);
  }
  bool outer = cu->measuring; /* the runtime's measuring pass: record only */
  cu->ws_used = 0;
  cu->measuring = true;
  pcgc_status st = f(k);
  cu->measuring = outer;
  if (st != PCGC_OK || outer) return st;
  if ((st = pcgc_cuda_reserve(cu, k->err)) != PCGC_OK) return st;
  cu->ws_used = 0;
  return f(k);
}

pcgc_status pcgc_cuda_forward(pcgc_cuda *cu, pcgc_op_kind kind, const pcgc_attrs *a, int n_in, const pcgc_buf *in,
                              int n_out, pcgc_buf *out, const pcgc_kernel_ctx *ctx, pcgc_error *err) {
  if ((unsigned)kind >= PCGC_OP_COUNT)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "unknown operator kind %d", (int)kind);
  pcgc__cukargs k = {{kind, a, n_in, in, n_out, out, NULL, NULL, ctx ? ctx : &default_ctx, err}, cu};
  return run_family(fwd_table[kind], &k);
}

pcgc_status pcgc_cuda_backward(pcgc_cuda *cu, pcgc_op_kind kind, const pcgc_attrs *a, int n_in, const pcgc_buf *in,
                               int n_out, const pcgc_buf *out, const pcgc_buf *dout, pcgc_buf *din,
                               const pcgc_kernel_ctx *ctx, pcgc_error *err) {
  if ((unsigned)kind >= PCGC_OP_COUNT)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "unknown operator kind %d", (int)kind);
  pcgc__cukargs k = {{kind, a, n_in, in, n_out, (pcgc_buf *)out, dout, din, ctx ? ctx : &default_ctx, err}, cu};
  return run_family(bwd_table[kind], &k);
}
