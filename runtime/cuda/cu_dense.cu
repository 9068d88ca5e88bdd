/*
 * cu_dense.cu — CUDA kernels of the dense families: linear, matmul,
 * batch_matmul, conv2d, pool2d, embedding and attention; forward and
 * backward, f32. runtime/cpu/k_dense.c is the reference: the same checks,
 * the same geometry, the same formulas.
 *
 * Matrix products are cuBLAS GEMMs in the context's precision (cu->math,
 * pcgc_cuda_set_math): SGEMMs with plain f32 math by default (no TF32), TF32
 * tensor cores, or bf16 copies of the operands with f32 accumulation (see
 * gemmb). cuBLAS is column-major and a row-major matrix is its column-major
 * transpose, so a row-major C = op(A) op(B) is computed as
 * C^T = op(B)^T op(A)^T: the operands swap and so do m and n. conv2d is
 * cuDNN's convolution with FMA math (TF32 tensor-op math in the TF32 and
 * BF16 modes) and the first deterministic algorithm of the v7 heuristics
 * (or a fixed deterministic one); bias and fused activation are one
 * elementwise kernel.
 * Pooling and embedding are hand-written gathers that add the same terms in
 * the same order as the CPU, so their results are bit-identical; embedding's
 * backward sorts the ids stably (CUB radix sort) so each table row adds its
 * gradients in id order. Attention composes strided-batched GEMMs with row
 * kernels (softmax with causal mask and dropout; softmax backward), a chunk
 * of batch entries at a time so the score tensors stay bounded.
 *
 * No reduction uses atomics: bias gradients reduce over fixed chunks in a
 * fixed tree, so every result is the same from run to run.
 */
#include <cub/cub.cuh>
#include <cuda_bf16.h>
#include <initializer_list>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cu_internal.h"
#include "k_check.h"
#include "k_dense_check.h"

#define TRY(x)                    \
  do {                            \
    pcgc_status s_ = (x);         \
    if (s_ != PCGC_OK) return s_; \
  } while (0)

/* Largest score chunk of attention, in floats per buffer (P, Pd, dP). */
#define ATTN_CHUNK ((int64_t)1 << 24)
/* cuDNN algorithms needing more workspace than this are passed over. */
#define CONV_WS_MAX ((size_t)1 << 30)

/* ---------------------------------------------------- checks
 * The checks and geometry are the CPU kernels' (runtime/cpu/
 * k_dense_check.c), with every float tensor f32; cuBLAS's and cuDNN's int
 * sizes and embedding's 32-bit sort keys are checked here. */

static pcgc_status prepare(const pcgc__cukargs *k, bool bwd) {
  pcgc_dtype dt;
  return pcgc__kd_prepare(k, bwd, true, &dt);
}

static pcgc_status need_out(const pcgc__cukargs *k, int rank, std::initializer_list<int64_t> dims) {
  return pcgc__kd_need_out(k, rank, dims.begin());
}

/* cuBLAS and cuDNN take int sizes. */
static pcgc_status int_fits(const pcgc__cukargs *k, std::initializer_list<int64_t> v) {
  for (int64_t x : v)
    if (x > INT_MAX) return pcgc__kfail(k, "a dimension of %lld is too large for cuBLAS/cuDNN", (long long)x);
  return PCGC_OK;
}

/* ------------------------------------------------------------ workspace */

/* n elements of T from the workspace into *p (NULL when n is 0, and while
 * measuring). */
template <typename T> static pcgc_status take(const pcgc__cukargs *k, int64_t n, T **p) {
  *p = NULL;
  if (n <= 0) return PCGC_OK;
  if ((uint64_t)n > SIZE_MAX / sizeof(T))
    return pcgc__kfail_st(k, PCGC_ERR_NOMEM, "scratch of %lld elements is too large", (long long)n);
  *p = (T *)pcgc__cu_scratch(k, (size_t)n * sizeof(T));
  if (!*p && !pcgc__cu_measuring(k)) return PCGC_ERR_NOMEM; /* the message is in k->err */
  return PCGC_OK;
}

/* ------------------------------------------------------------- cuBLAS
 * Every GEMM is a gemmb, in the context's precision:
 *   F32   cublasSgemm(StridedBatched) with CUBLAS_DEFAULT_MATH: f32 FMAs,
 *         the CPU's results to rounding;
 *   TF32  cublasGemm(StridedBatched)Ex on the f32 operands with
 *         CUBLAS_COMPUTE_32F_FAST_TF32: tensor cores read the operands as
 *         TF32 (10-bit mantissa) and accumulate in f32;
 *   BF16  the operands rounded to nearest bf16 (7-bit mantissa), packed into
 *         the family's GEMM room, then cublasGemm(StridedBatched)Ex with bf16
 *         A and B, f32 C and CUBLAS_COMPUTE_32F (f32 accumulation).
 * alpha and beta keep their meaning in every mode (backward adds into din).
 * The room is workspace, so a family that runs GEMMs takes it with gemm_room
 * before its measuring return, as large as its largest GEMM's copies
 * (gemm_elems); its GEMMs reuse it one after another on the stream. */

static bool bf16_math(const pcgc__cukargs *k) { return k->cu->math == PCGC_CUDA_MATH_BF16; }

/* bf16 elements of the copies of op(A)[m, kk] and op(B)[kk, n], count times;
 * B starts 256 bytes aligned, as cuBLAS's tensor-op kernels like it. */
static int64_t gemm_elems(int64_t m, int64_t n, int64_t kk, int64_t count) {
  if (m <= 0 || n <= 0 || kk <= 0 || count <= 0) return 0;
  return (count * m * kk + 127) / 128 * 128 + count * kk * n;
}

/* The family's GEMM room: the largest of `need` (gemm_elems of each of its
 * GEMMs) in BF16 mode, none otherwise. Every GEMM family calls it, so no
 * family sees another's room. */
static pcgc_status gemm_room(const pcgc__cukargs *k, std::initializer_list<int64_t> need) {
  pcgc_cuda *cu = k->cu;
  cu->gemm_room = NULL;
  cu->gemm_room_n = 0;
  int64_t n = 0;
  for (int64_t x : need) n = x > n ? x : n;
  if (!bf16_math(k) || n == 0) return PCGC_OK;
  __nv_bfloat16 *p;
  TRY(take(k, n, &p));
  cu->gemm_room = p;
  cu->gemm_room_n = n;
  return PCGC_OK;
}

static pcgc_status blas_ready(const pcgc__cukargs *k) {
  TRY(pcgc__cu_check_blas(k, cublasSetMathMode(k->cu->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
  return pcgc__cu_check_blas(k, cublasSetPointerMode(k->cu->blas, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
}

/* Index arithmetic of the elementwise kernels below runs in I: 32-bit where
 * the element count allows (a 64-bit division or remainder costs several
 * times a 32-bit one on the GPU, and these kernels divide per element).
 * Up to 2^31 elements, so that a grid-stride step past the end (at most
 * the grid's threads, far below 2^31) cannot wrap around 2^32. */
static bool fits_u32(int64_t n) { return n >= 0 && n <= (int64_t)INT32_MAX; }

/* C_i[m, n] = 0 at C + i * sc, rows ldc apart, i < count. */
template <typename I>
static __global__ void zero_blocks_kernel(I count, I m, I n, float *__restrict__ C, int64_t ldc, int64_t sc) {
  I total = count * m * n, stride = (I)gridDim.x * blockDim.x;
  for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    I b = i / (m * n), r = i / n % m, c = i % n;
    C[(int64_t)b * sc + (int64_t)r * ldc + c] = 0;
  }
}

/* dst[i][r][c] = bf16(src[i * stride + r * ld + c]), rounded to nearest, for
 * i < count, r < rows, c < cols: a packed copy. */
template <typename I>
static __global__ void to_bf16_kernel(I count, I rows, I cols, const float *__restrict__ src, int64_t ld,
                                      int64_t stride, __nv_bfloat16 *__restrict__ dst) {
  I total = count * rows * cols, gs = (I)gridDim.x * blockDim.x;
  for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gs) {
    I b = i / (rows * cols), r = i / cols % rows, c = i % cols;
    dst[i] = __float2bfloat16_rn(src[(int64_t)b * stride + (int64_t)r * ld + c]);
  }
}

/* The same of a contiguous source, two elements per thread and step
 * (src 8-byte and dst 4-byte aligned; the odd last one alone). */
static __global__ void to_bf16_flat_kernel(int64_t n, const float *__restrict__ src, __nv_bfloat16 *__restrict__ dst) {
  int64_t pairs = n / 2, gs = (int64_t)gridDim.x * blockDim.x;
  const float2 *s2 = (const float2 *)src;
  __nv_bfloat162 *d2 = (__nv_bfloat162 *)dst;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < pairs; i += gs)
    d2[i] = __float22bfloat162_rn(s2[i]);
  if (n % 2 && blockIdx.x == 0 && threadIdx.x == 0) dst[n - 1] = __float2bfloat16_rn(src[n - 1]);
}

static pcgc_status to_bf16(const pcgc__cukargs *k, int64_t count, int64_t rows, int64_t cols, const float *src,
                           int64_t ld, int64_t stride, __nv_bfloat16 *dst) {
  int64_t n = count * rows * cols;
  if (n <= 0) return PCGC_OK;
  cudaStream_t st = k->cu->stream;
  bool flat = ld == cols && (count == 1 || stride == rows * cols) && (uintptr_t)src % 8 == 0 && (uintptr_t)dst % 4 == 0;
  if (flat) to_bf16_flat_kernel<<<pcgc__cu_blocks((n + 1) / 2), PCGC_CU_THREADS, 0, st>>>(n, src, dst);
  else if (fits_u32(n))
    to_bf16_kernel<uint32_t><<<pcgc__cu_blocks(n), PCGC_CU_THREADS, 0, st>>>((uint32_t)count, (uint32_t)rows,
                                                                              (uint32_t)cols, src, ld, stride, dst);
  else to_bf16_kernel<int64_t><<<pcgc__cu_blocks(n), PCGC_CU_THREADS, 0, st>>>(count, rows, cols, src, ld, stride, dst);
  return pcgc__cu_launched(k, "rounding GEMM operands to bf16");
}

/* gemmb's BF16 mode: A and B (as stored: row-major, op() applied by cuBLAS)
 * packed into the room as bf16, then one GEMM with f32 accumulation into
 * the f32 C. Arguments as gemmb's, already checked. */
static pcgc_status gemmb_bf16(const pcgc__cukargs *k, bool ta, bool tb, int64_t m, int64_t n, int64_t kk,
                              float alpha, const float *A, int64_t lda, int64_t sa, const float *B, int64_t ldb,
                              int64_t sb, float beta, float *C, int64_t ldc, int64_t sc, int64_t count) {
  int64_t ra = ta ? kk : m, ca = ta ? m : kk, rb = tb ? n : kk, cb = tb ? kk : n; /* stored rows, columns */
  int64_t need = gemm_elems(m, n, kk, count);
  if (!k->cu->gemm_room || need > k->cu->gemm_room_n)
    return pcgc__kfail(k, "internal: a bf16 GEMM needs %lld elements of room, the kernel took %lld", (long long)need,
                       (long long)k->cu->gemm_room_n);
  __nv_bfloat16 *Ah = (__nv_bfloat16 *)k->cu->gemm_room;
  __nv_bfloat16 *Bh = Ah + (count * ra * ca + 127) / 128 * 128;
  TRY(to_bf16(k, count, ra, ca, A, lda, sa, Ah));
  TRY(to_bf16(k, count, rb, cb, B, ldb, sb, Bh));
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (count == 1)
    return pcgc__cu_check_blas(k,
                               cublasGemmEx(k->cu->blas, ob, oa, (int)n, (int)m, (int)kk, &alpha, Bh, CUDA_R_16BF,
                                            (int)cb, Ah, CUDA_R_16BF, (int)ca, &beta, C, CUDA_R_32F, (int)ldc,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                               "cublasGemmEx (bf16)");
  return pcgc__cu_check_blas(k,
                             cublasGemmStridedBatchedEx(k->cu->blas, ob, oa, (int)n, (int)m, (int)kk, &alpha, Bh,
                                                        CUDA_R_16BF, (int)cb, rb * cb, Ah, CUDA_R_16BF, (int)ca,
                                                        ra * ca, &beta, C, CUDA_R_32F, (int)ldc, sc, (int)count,
                                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                             "cublasGemmStridedBatchedEx (bf16)");
}

/* Row-major C_i = alpha op(A_i) op(B_i) + beta C_i for i < count, with
 * X_i = X + i * sx; beta is 0 or 1. An empty inner dimension gives beta C.
 * In the context's precision (above). */
static pcgc_status gemmb(const pcgc__cukargs *k, bool ta, bool tb, int64_t m, int64_t n, int64_t kk, float alpha,
                         const float *A, int64_t lda, int64_t sa, const float *B, int64_t ldb, int64_t sb, float beta,
                         float *C, int64_t ldc, int64_t sc, int64_t count) {
  if (m <= 0 || n <= 0 || count <= 0) return PCGC_OK;
  if (kk <= 0) {
    if (beta != 0) return PCGC_OK;
    if (fits_u32(count * m * n))
      zero_blocks_kernel<uint32_t><<<pcgc__cu_blocks(count * m * n), PCGC_CU_THREADS, 0, k->cu->stream>>>(
          (uint32_t)count, (uint32_t)m, (uint32_t)n, C, ldc, sc);
    else
      zero_blocks_kernel<int64_t><<<pcgc__cu_blocks(count * m * n), PCGC_CU_THREADS, 0, k->cu->stream>>>(count, m, n,
                                                                                                        C, ldc, sc);
    return pcgc__cu_launched(k, "zero");
  }
  TRY(int_fits(k, {m, n, kk, lda, ldb, ldc, count}));
  if (bf16_math(k)) return gemmb_bf16(k, ta, tb, m, n, kk, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, count);
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (k->cu->math == PCGC_CUDA_MATH_TF32) {
    if (count == 1)
      return pcgc__cu_check_blas(k,
                                 cublasGemmEx(k->cu->blas, ob, oa, (int)n, (int)m, (int)kk, &alpha, B, CUDA_R_32F,
                                              (int)ldb, A, CUDA_R_32F, (int)lda, &beta, C, CUDA_R_32F, (int)ldc,
                                              CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
                                 "cublasGemmEx (tf32)");
    return pcgc__cu_check_blas(k,
                               cublasGemmStridedBatchedEx(k->cu->blas, ob, oa, (int)n, (int)m, (int)kk, &alpha, B,
                                                          CUDA_R_32F, (int)ldb, sb, A, CUDA_R_32F, (int)lda, sa,
                                                          &beta, C, CUDA_R_32F, (int)ldc, sc, (int)count,
                                                          CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
                               "cublasGemmStridedBatchedEx (tf32)");
  }
  if (count == 1)
    return pcgc__cu_check_blas(k,
                               cublasSgemm(k->cu->blas, ob, oa, (int)n, (int)m, (int)kk, &alpha, B, (int)ldb, A,
                                           (int)lda, &beta, C, (int)ldc),
                               "cublasSgemm");
  return pcgc__cu_check_blas(k,
                             cublasSgemmStridedBatched(k->cu->blas, ob, oa, (int)n, (int)m, (int)kk, &alpha, B,
                                                       (int)ldb, sb, A, (int)lda, sa, &beta, C, (int)ldc, sc,
                                                       (int)count),
                             "cublasSgemmStridedBatched");
}

static pcgc_status gemm(const pcgc__cukargs *k, bool ta, bool tb, int64_t m, int64_t n, int64_t kk, float alpha,
                        const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  return gemmb(k, ta, tb, m, n, kk, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

/* --------------------------------------------- activations and biases */

static __device__ __forceinline__ float act_fwd(int act, float z) {
  switch (act) {
  case PCGC_ACT_RELU: return z < 0 ? 0.0f : z; /* NaN propagates */
  case PCGC_ACT_GELU: return 0.5f * z * (1 + erff(z * 0.70710678118654752440f));
  case PCGC_ACT_SIGMOID: return 1 / (1 + expf(-z));
  case PCGC_ACT_TANH: return tanhf(z);
  default: return z;
  }
}

/* y[i] = act(y[i] + b[(i / inner) % C]) (b may be NULL) */
template <typename I>
static __global__ void bias_act_kernel(I n, I C, I inner, const float *__restrict__ b, int act, float *__restrict__ y) {
  I stride = (I)gridDim.x * blockDim.x;
  for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float v = y[i];
    if (b) v += b[i / inner % C];
    y[i] = act_fwd(act, v);
  }
}

static pcgc_status bias_act(const pcgc__cukargs *k, int64_t n, int64_t C, int64_t inner, const float *b, int act,
                            float *y) {
  if (n <= 0 || (!b && act == PCGC_ACT_NONE)) return PCGC_OK;
  if (fits_u32(n))
    bias_act_kernel<uint32_t><<<pcgc__cu_blocks(n), PCGC_CU_THREADS, 0, k->cu->stream>>>(
        (uint32_t)n, (uint32_t)C, (uint32_t)inner, b, act, y);
  else bias_act_kernel<int64_t><<<pcgc__cu_blocks(n), PCGC_CU_THREADS, 0, k->cu->stream>>>(n, C, inner, b, act, y);
  return pcgc__cu_launched(k, "bias and activation");
}

/* dz = dy * act'(.): from the output y for relu, sigmoid and tanh; for GELU
 * dz holds the pre-activation on entry. */
static __global__ void act_bwd_kernel(int64_t n, int act, const float *__restrict__ dy, const float *__restrict__ y,
                                      float *__restrict__ dz) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float d = dy[i];
    switch (act) {
    case PCGC_ACT_RELU: dz[i] = y[i] > 0 ? d : 0.0f; break;
    case PCGC_ACT_SIGMOID: dz[i] = d * y[i] * (1 - y[i]); break;
    case PCGC_ACT_TANH: dz[i] = d * (1 - y[i] * y[i]); break;
    case PCGC_ACT_GELU: {
      float z = dz[i];
      float cdf = 0.5f * (1 + erff(z * 0.70710678118654752440f));
      float pdf = expf(-0.5f * z * z) * 0.39894228040143267794f;
      dz[i] = d * (cdf + z * pdf);
      break;
    }
    default: dz[i] = d; break;
    }
  }
}

static pcgc_status act_bwd(const pcgc__cukargs *k, int act, int64_t n, const float *dy, const float *y, float *dz) {
  if (n <= 0) return PCGC_OK;
  act_bwd_kernel<<<pcgc__cu_blocks(n), PCGC_CU_THREADS, 0, k->cu->stream>>>(n, act, dy, y, dz);
  return pcgc__cu_launched(k, "activation backward");
}

/* ------------------------------------------------------------ reductions
 * db[c] += sum over a < A, p < P of src[(a * C + c) * P + p]: the bias
 * gradient of linear (P = 1: columns of a row-major matrix) and of conv2d
 * (channels of NCHW). The (a, p) range of each channel is cut into a fixed
 * number of chunks; each chunk's sum goes to part[chunk * C + c], and a last
 * kernel adds the chunk sums in order. Deterministic; not the CPU's order. */

static int64_t red_chunks(int64_t A, int64_t C, int64_t P) {
  int64_t per = A * P, n;
  if (C < 1 || per < 1) return 1;
  if (P == 1) { /* one thread per (chunk, column): 64k threads, 16 rows each at least */
    int64_t want = (65536 + C - 1) / C, most = (A + 15) / 16;
    n = want < most ? want : most;
  } else { /* one block per (channel, chunk): 512 blocks, 4096 elements each at least */
    int64_t want = (512 + C - 1) / C, most = (per + 4095) / 4096;
    n = want < most ? want : most;
  }
  return n < 1 ? 1 : n > 1024 ? 1024 : n;
}

/* The scratch floats red_add needs. */
static int64_t red_scratch(int64_t A, int64_t C, int64_t P) {
  int64_t n = red_chunks(A, C, P);
  return n > 1 ? n * C : 0;
}

static __device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

static __device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* The block's sum (or max), returned to every thread; blockDim.x a multiple
 * of 32. Every warp reduces the same partials in the same order. */
static __device__ float block_sum(float v) {
  __shared__ float sh[32];
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads(); /* sh is free again after an earlier call */
  if (lane == 0) sh[w] = v;
  __syncthreads();
  return warp_sum(lane < nw ? sh[lane] : 0.0f);
}

static __device__ float block_max(float v) {
  __shared__ float sh[32];
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  return warp_max(lane < nw ? sh[lane] : -INFINITY);
}

/* P == 1: thread (chunk, c) sums rows [chunk * L, chunk * L + L) of column c. */
static __global__ void colsum_kernel(int64_t A, int64_t C, int64_t chunks, int64_t L, const float *__restrict__ src,
                                     float *__restrict__ out, bool add) {
  int64_t total = chunks * C, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t ch = i / C, c = i % C, a1 = (ch + 1) * L < A ? (ch + 1) * L : A;
    float s = 0;
    for (int64_t a = ch * L; a < a1; a++) s += src[a * C + c];
    if (add) out[c] += s;
    else out[ch * C + c] = s;
  }
}

/* Block (c, chunk) sums elements [chunk * L, chunk * L + L) of channel c's
 * A * P elements. */
static __global__ void chansum_kernel(int64_t A, int64_t C, int64_t P, int64_t L, const float *__restrict__ src,
                                      float *__restrict__ out, bool add) {
  int64_t c = blockIdx.x, ch = blockIdx.y, per = A * P;
  int64_t e0 = ch * L, e1 = e0 + L < per ? e0 + L : per;
  float s = 0;
  for (int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) s += src[(e / P * C + c) * P + e % P];
  s = block_sum(s);
  if (threadIdx.x == 0) {
    if (add) out[c] += s;
    else out[ch * C + c] = s;
  }
}

static __global__ void chunksum_kernel(int64_t chunks, int64_t C, const float *__restrict__ part,
                                       float *__restrict__ db) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += stride) {
    float s = 0;
    for (int64_t ch = 0; ch < chunks; ch++) s += part[ch * C + c];
    db[c] += s;
  }
}

/* db[C] += the sums above; part: red_scratch(A, C, P) floats. */
static pcgc_status red_add(const pcgc__cukargs *k, int64_t A, int64_t C, int64_t P, const float *src, float *part,
                           float *db) {
  if (A * P <= 0 || C <= 0) return PCGC_OK;
  int64_t chunks = red_chunks(A, C, P);
  bool direct = chunks == 1;
  float *out = direct ? db : part;
  cudaStream_t st = k->cu->stream;
  if (P == 1) {
    int64_t L = (A + chunks - 1) / chunks;
    colsum_kernel<<<pcgc__cu_blocks(chunks * C), PCGC_CU_THREADS, 0, st>>>(A, C, chunks, L, src, out, direct);
  } else {
    if (C > INT_MAX) return pcgc__kfail(k, "%lld channels are too many", (long long)C);
    int64_t L = (A * P + chunks - 1) / chunks;
    chansum_kernel<<<dim3((unsigned)C, (unsigned)chunks), PCGC_CU_THREADS, 0, st>>>(A, C, P, L, src, out, direct);
  }
  TRY(pcgc__cu_launched(k, "bias gradient"));
  if (direct) return PCGC_OK;
  chunksum_kernel<<<pcgc__cu_blocks(C), PCGC_CU_THREADS, 0, st>>>(chunks, C, part, db);
  return pcgc__cu_launched(k, "bias gradient");
}

/* --------------------------------------------------------- linear, matmul */

static pcgc_status dense_check(const pcgc__cukargs *k, dense_geo *g) {
  TRY(pcgc__kd_dense_geo(k, g));
  TRY(int_fits(k, {g->rows, g->K, g->N}));
  return pcgc__kd_need_out_at(k, k->in[0].rank - 1, g->N);
}

static pcgc_status dense_fwd(const pcgc__cukargs *k) {
  dense_geo g;
  TRY(prepare(k, false));
  TRY(dense_check(k, &g));
  TRY(gemm_room(k, {gemm_elems(g.rows, g.N, g.K, 1)}));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  const float *x = (const float *)k->in[0].data, *w = (const float *)k->in[1].data;
  const float *b = g.bias ? (const float *)k->in[2].data : NULL;
  float *y = (float *)k->out[0].data;
  TRY(blas_ready(k));
  TRY(gemm(k, false, false, g.rows, g.N, g.K, 1, x, g.K, w, g.N, 0, y, g.N)); /* (rows, N) */
  return bias_act(k, g.rows * g.N, g.N, 1, b, g.act, y);
}

static pcgc_status dense_bwd(const pcgc__cukargs *k) {
  dense_geo g;
  TRY(prepare(k, true));
  TRY(dense_check(k, &g));
  const float *x = (const float *)k->in[0].data, *w = (const float *)k->in[1].data;
  const float *b = g.bias ? (const float *)k->in[2].data : NULL;
  const float *y = (const float *)k->out[0].data, *dy = (const float *)k->dout[0].data;
  float *dx = (float *)k->din[0].data, *dw = (float *)k->din[1].data;
  float *db = g.bias ? (float *)k->din[2].data : NULL;
  float *dz = NULL, *part = NULL;
  if (g.act != PCGC_ACT_NONE && (dx || dw || db)) TRY(take(k, g.rows * g.N, &dz));
  if (db) TRY(take(k, red_scratch(g.rows, g.N, 1), &part));
  TRY(gemm_room(k, {g.act == PCGC_ACT_GELU ? gemm_elems(g.rows, g.N, g.K, 1) : 0,
                    dx ? gemm_elems(g.rows, g.K, g.N, 1) : 0, dw ? gemm_elems(g.K, g.N, g.rows, 1) : 0}));
  if (pcgc__cu_measuring(k) || !(dx || dw || db)) return PCGC_OK;
  TRY(blas_ready(k));
  const float *dzp = dy;
  if (g.act != PCGC_ACT_NONE) {
    if (g.act == PCGC_ACT_GELU) { /* GELU' needs the pre-activation: recompute it */
      TRY(gemm(k, false, false, g.rows, g.N, g.K, 1, x, g.K, w, g.N, 0, dz, g.N));
      TRY(bias_act(k, g.rows * g.N, g.N, 1, b, PCGC_ACT_NONE, dz));
    }
    TRY(act_bwd(k, g.act, g.rows * g.N, dy, y, dz));
    dzp = dz;
  }
  if (dx) TRY(gemm(k, false, true, g.rows, g.K, g.N, 1, dzp, g.N, w, g.N, 1, dx, g.K)); /* dz w^T */
  if (dw) TRY(gemm(k, true, false, g.K, g.N, g.rows, 1, x, g.K, dzp, g.N, 1, dw, g.N)); /* x^T dz */
  if (db) TRY(red_add(k, g.rows, g.N, 1, dzp, part, db));
  return PCGC_OK;
}

pcgc_status pcgc__cu_fwd_linear(const pcgc__cukargs *k) { return dense_fwd(k); }
pcgc_status pcgc__cu_bwd_linear(const pcgc__cukargs *k) { return dense_bwd(k); }
pcgc_status pcgc__cu_fwd_matmul(const pcgc__cukargs *k) { return dense_fwd(k); }
pcgc_status pcgc__cu_bwd_matmul(const pcgc__cukargs *k) { return dense_bwd(k); }

/* ----------------------------------------------------------- batch_matmul */

static pcgc_status bmm_check(const pcgc__cukargs *k, bmm_geo *g) {
  TRY(pcgc__kd_bmm_geo(k, g));
  TRY(int_fits(k, {g->M, g->K, g->N, g->batch}));
  return pcgc__kd_need_out_at(k, k->in[0].rank - 1, g->N);
}

pcgc_status pcgc__cu_fwd_bmm(const pcgc__cukargs *k) {
  bmm_geo g;
  TRY(prepare(k, false));
  TRY(bmm_check(k, &g));
  TRY(gemm_room(k, {gemm_elems(g.M, g.N, g.K, g.batch)}));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  const float *a = (const float *)k->in[0].data, *b = (const float *)k->in[1].data;
  int64_t M = g.M, K = g.K, N = g.N;
  TRY(blas_ready(k));
  return gemmb(k, false, g.tb, M, N, K, 1, a, K, M * K, b, g.tb ? K : N, K * N, 0, (float *)k->out[0].data, N, M * N,
               g.batch);
}

pcgc_status pcgc__cu_bwd_bmm(const pcgc__cukargs *k) {
  bmm_geo g;
  TRY(prepare(k, true));
  TRY(bmm_check(k, &g));
  const float *a = (const float *)k->in[0].data, *b = (const float *)k->in[1].data;
  const float *dc = (const float *)k->dout[0].data;
  float *da = (float *)k->din[0].data, *db = (float *)k->din[1].data;
  int64_t M = g.M, K = g.K, N = g.N, n = g.batch;
  int64_t room_db = !db ? 0 : g.tb ? gemm_elems(N, K, M, n) : gemm_elems(K, N, M, n); /* [N, K] or [K, N] */
  TRY(gemm_room(k, {da ? gemm_elems(M, K, N, n) : 0, room_db}));
  if (pcgc__cu_measuring(k) || (!da && !db)) return PCGC_OK;
  TRY(blas_ready(k));
  if (da) { /* da = dc b^T, or dc b when b is [N, K] */
    if (g.tb) TRY(gemmb(k, false, false, M, K, N, 1, dc, N, M * N, b, K, K * N, 1, da, K, M * K, n));
    else TRY(gemmb(k, false, true, M, K, N, 1, dc, N, M * N, b, N, K * N, 1, da, K, M * K, n));
  }
  if (db) { /* db = a^T dc [K, N], or dc^T a [N, K] */
    if (g.tb) TRY(gemmb(k, true, false, N, K, M, 1, dc, N, M * N, a, K, M * K, 1, db, K, K * N, n));
    else TRY(gemmb(k, true, false, K, N, M, 1, a, K, M * K, dc, N, M * N, 1, db, N, K * N, n));
  }
  return PCGC_OK;
}

/* ----------------------------------------------------------------- conv2d */

static pcgc_status conv_check(const pcgc__cukargs *k, conv_geo *g) {
  TRY(pcgc__kd_conv_geo(k, g));
  TRY(int_fits(k, {g->N, g->C, g->H, g->W, g->O, g->KH, g->KW, g->OH, g->OW, g->sh, g->sw, g->ph,
                                        g->pw, g->dh, g->dw, g->groups}));
  return need_out(k, 4, {g->N, g->O, g->OH, g->OW});
}

static pcgc_status dnn(const pcgc__cukargs *k, cudnnStatus_t s, const char *what) {
  return pcgc__cu_check_dnn(k, s, what);
}

/* cuDNN's descriptors of one convolution, destroyed on every way out. */
struct conv_dnn {
  cudnnTensorDescriptor_t x = NULL, y = NULL;
  cudnnFilterDescriptor_t w = NULL;
  cudnnConvolutionDescriptor_t c = NULL;
  conv_dnn() = default;
  conv_dnn(const conv_dnn &) = delete;
  conv_dnn &operator=(const conv_dnn &) = delete;
  ~conv_dnn() {
    if (c) cudnnDestroyConvolutionDescriptor(c);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

/* The convolutions' math in the context's precision. F32: FMA math, no
 * TF32 tensor cores, so results stay f32 like the CPU's. TF32 and BF16:
 * CUDNN_DEFAULT_MATH, which cuDNN documents as permitting TF32 tensor-core
 * operations on f32 tensors (Ampere on), and the heuristics' algorithms may
 * bring CUDNN_TENSOR_OP_MATH (pick_algo); never
 * CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, which would down-convert the f32
 * tensors to f16 (5-bit exponent: overflow past 65504). So BF16 convolutions
 * run in TF32, a little more precise than asked: true bf16 would need bf16
 * copies of x, w and dy in the workspace and bf16 descriptors. */
static cudnnMathType_t base_math(const pcgc__cukargs *k) {
  return k->cu->math == PCGC_CUDA_MATH_F32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
}

static pcgc_status conv_math(const pcgc__cukargs *k, const conv_dnn *d, cudnnMathType_t mt) {
  return dnn(k, cudnnSetConvolutionMathType(d->c, mt), "cudnnSetConvolutionMathType");
}

static pcgc_status conv_setup(const pcgc__cukargs *k, const conv_geo *g, conv_dnn *d) {
  TRY(dnn(k, cudnnCreateTensorDescriptor(&d->x), "cudnnCreateTensorDescriptor"));
  TRY(dnn(k, cudnnCreateTensorDescriptor(&d->y), "cudnnCreateTensorDescriptor"));
  TRY(dnn(k, cudnnCreateFilterDescriptor(&d->w), "cudnnCreateFilterDescriptor"));
  TRY(dnn(k, cudnnCreateConvolutionDescriptor(&d->c), "cudnnCreateConvolutionDescriptor"));
  TRY(dnn(k,
          cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)g->N, (int)g->C, (int)g->H,
                                     (int)g->W),
          "cudnnSetTensor4dDescriptor (input)"));
  TRY(dnn(k,
          cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)g->N, (int)g->O, (int)g->OH,
                                     (int)g->OW),
          "cudnnSetTensor4dDescriptor (output)"));
  TRY(dnn(k,
          cudnnSetFilter4dDescriptor(d->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)g->O, (int)g->Cg, (int)g->KH,
                                     (int)g->KW),
          "cudnnSetFilter4dDescriptor"));
  TRY(dnn(k,
          cudnnSetConvolution2dDescriptor(d->c, (int)g->ph, (int)g->pw, (int)g->sh, (int)g->sw, (int)g->dh, (int)g->dw,
                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "cudnnSetConvolution2dDescriptor"));
  TRY(dnn(k, cudnnSetConvolutionGroupCount(d->c, (int)g->groups), "cudnnSetConvolutionGroupCount"));
  TRY(conv_math(k, d, base_math(k)));
  int n, c, h, w;
  TRY(dnn(k, cudnnGetConvolution2dForwardOutputDim(d->c, d->x, d->w, &n, &c, &h, &w),
          "cudnnGetConvolution2dForwardOutputDim"));
  if (n != g->N || c != g->O || h != g->OH || w != g->OW)
    return pcgc__kfail(k, "cuDNN gives an output of [%d, %d, %d, %d], expected [%lld, %lld, %lld, %lld]", n, c, h, w,
                       (long long)g->N, (long long)g->O, (long long)g->OH, (long long)g->OW);
  return PCGC_OK;
}

/* The first heuristic result that succeeds, is deterministic, fits
 * CONV_WS_MAX and uses math the context's precision allows: no tensor-op
 * math in F32, TF32 tensor ops (CUDNN_TENSOR_OP_MATH on f32 tensors) in TF32
 * and BF16, f16 down-conversion never (base_math); -1 if none. The
 * heuristics do not time anything, so the measuring and the real call pick
 * the same. */
template <typename Perf> static int pick_algo(const pcgc__cukargs *k, const Perf *perf, int n) {
  bool tensor_ok = k->cu->math != PCGC_CUDA_MATH_F32;
  for (int i = 0; i < n; i++) {
    const Perf &p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC || p.memory > CONV_WS_MAX) continue;
    if (p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION || (p.mathType == CUDNN_TENSOR_OP_MATH && !tensor_ok))
      continue;
    return i;
  }
  return -1;
}

/* The math to run the picked algorithm with: the heuristics' own in TF32
 * and BF16 (an algorithm runs with the descriptor's math type), the
 * descriptor's FMA math in F32, as before precision modes. */
template <typename Perf> static cudnnMathType_t picked_math(const pcgc__cukargs *k, const Perf *perf, int i) {
  return i >= 0 && k->cu->math != PCGC_CUDA_MATH_F32 ? perf[i].mathType : base_math(k);
}

/* The heuristics' choice per convolution geometry, precision and direction,
 * remembered: asking cuDNN costs host time on every call (a CNN step calls
 * each convolution's three directions twice: measuring, then running). One
 * process drives one device, so the table is the process's. */
typedef struct algo_memo {
  int64_t key[17];
  int dir, algo;
  cudnnMathType_t math;
  size_t ws;
} algo_memo;
#define ALGO_MEMO 128
static algo_memo memo[ALGO_MEMO];
static int n_memo;

static void memo_key(const pcgc__cukargs *k, const conv_geo *g, int64_t *key) {
  /* the precision too: each mode has its own picks (pick_algo) */
  const int64_t v[17] = {g->N,  g->C,  g->H,  g->W,  g->O,  g->KH, g->KW,  g->OH,     g->OW,
                         g->sh, g->sw, g->ph, g->pw, g->dh, g->dw, g->groups, k->cu->math};
  memcpy(key, v, sizeof v);
}

static const algo_memo *memo_find(const pcgc__cukargs *k, const conv_geo *g, int dir) {
  int64_t key[17];
  memo_key(k, g, key);
  for (int i = 0; i < n_memo; i++)
    if (memo[i].dir == dir && memcmp(memo[i].key, key, sizeof key) == 0) return &memo[i];
  return NULL;
}

static void memo_add(const pcgc__cukargs *k, const conv_geo *g, int dir, int algo, cudnnMathType_t math,
                     size_t ws) {
  algo_memo *m = &memo[n_memo < ALGO_MEMO ? n_memo++ : (dir + (int)g->N + (int)g->C) % ALGO_MEMO];
  memo_key(k, g, m->key);
  m->dir = dir;
  m->algo = algo;
  m->math = math;
  m->ws = ws;
}

/* The algorithms of the three directions: the choice, the math to run it
 * with (set on the descriptor before every cuDNN call: the directions share
 * one) and its workspace. */
static pcgc_status fwd_algo(const pcgc__cukargs *k, const conv_geo *g, const conv_dnn *d,
                            cudnnConvolutionFwdAlgo_t *algo, cudnnMathType_t *mt, size_t *ws) {
  const algo_memo *m = memo_find(k, g, 0);
  if (m) {
    *algo = (cudnnConvolutionFwdAlgo_t)m->algo;
    *mt = m->math;
    *ws = m->ws;
    return PCGC_OK;
  }
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int n = 0;
  TRY(dnn(k,
          cudnnGetConvolutionForwardAlgorithm_v7(k->cu->dnn, d->x, d->w, d->c, d->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                 &n, perf),
          "cudnnGetConvolutionForwardAlgorithm_v7"));
  int i = pick_algo(k, perf, n);
  *algo = i >= 0 ? perf[i].algo : CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  *mt = picked_math(k, perf, i);
  TRY(conv_math(k, d, *mt));
  TRY(dnn(k, cudnnGetConvolutionForwardWorkspaceSize(k->cu->dnn, d->x, d->w, d->c, d->y, *algo, ws),
          "cudnnGetConvolutionForwardWorkspaceSize"));
  memo_add(k, g, 0, (int)*algo, *mt, *ws);
  return PCGC_OK;
}

static pcgc_status bwd_data_algo(const pcgc__cukargs *k, const conv_geo *g, const conv_dnn *d,
                                 cudnnConvolutionBwdDataAlgo_t *algo, cudnnMathType_t *mt, size_t *ws) {
  const algo_memo *m = memo_find(k, g, 1);
  if (m) {
    *algo = (cudnnConvolutionBwdDataAlgo_t)m->algo;
    *mt = m->math;
    *ws = m->ws;
    return PCGC_OK;
  }
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int n = 0;
  TRY(dnn(k,
          cudnnGetConvolutionBackwardDataAlgorithm_v7(k->cu->dnn, d->w, d->y, d->c, d->x,
                                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf),
          "cudnnGetConvolutionBackwardDataAlgorithm_v7"));
  int i = pick_algo(k, perf, n);
  *algo = i >= 0 ? perf[i].algo : CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  *mt = picked_math(k, perf, i);
  TRY(conv_math(k, d, *mt));
  TRY(dnn(k, cudnnGetConvolutionBackwardDataWorkspaceSize(k->cu->dnn, d->w, d->y, d->c, d->x, *algo, ws),
          "cudnnGetConvolutionBackwardDataWorkspaceSize"));
  memo_add(k, g, 1, (int)*algo, *mt, *ws);
  return PCGC_OK;
}

static pcgc_status bwd_filter_algo(const pcgc__cukargs *k, const conv_geo *g, const conv_dnn *d,
                                   cudnnConvolutionBwdFilterAlgo_t *algo, cudnnMathType_t *mt, size_t *ws) {
  const algo_memo *m = memo_find(k, g, 2);
  if (m) {
    *algo = (cudnnConvolutionBwdFilterAlgo_t)m->algo;
    *mt = m->math;
    *ws = m->ws;
    return PCGC_OK;
  }
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int n = 0;
  TRY(dnn(k,
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(k->cu->dnn, d->x, d->y, d->c, d->w,
                                                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf),
          "cudnnGetConvolutionBackwardFilterAlgorithm_v7"));
  int i = pick_algo(k, perf, n);
  *algo = i >= 0 ? perf[i].algo : CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  *mt = picked_math(k, perf, i);
  TRY(conv_math(k, d, *mt));
  TRY(dnn(k, cudnnGetConvolutionBackwardFilterWorkspaceSize(k->cu->dnn, d->x, d->y, d->c, d->w, *algo, ws),
          "cudnnGetConvolutionBackwardFilterWorkspaceSize"));
  memo_add(k, g, 2, (int)*algo, *mt, *ws);
  return PCGC_OK;
}

/* z = the convolution of x by w (no bias, no activation); zeros when x is
 * empty (every window in the padding). */
static pcgc_status conv_z(const pcgc__cukargs *k, const conv_geo *g, const conv_dnn *d, cudnnConvolutionFwdAlgo_t algo,
                          cudnnMathType_t mt, void *ws, size_t wsb, float *z) {
  if (!g->direct)
    return pcgc__cu_check(k, cudaMemsetAsync(z, 0, sizeof(float) * (size_t)(g->N * g->O * g->ohw), k->cu->stream),
                          "cudaMemsetAsync");
  TRY(conv_math(k, d, mt));
  const float one = 1, zero = 0;
  return dnn(k,
             cudnnConvolutionForward(k->cu->dnn, &one, d->x, k->in[0].data, d->w, k->in[1].data, d->c, algo, ws, wsb,
                                     &zero, d->y, z),
             "cudnnConvolutionForward");
}

pcgc_status pcgc__cu_fwd_conv2d(const pcgc__cukargs *k) {
  conv_geo g;
  TRY(prepare(k, false));
  TRY(conv_check(k, &g));
  if (g.N * g.O == 0) return PCGC_OK; /* an empty output */
  conv_dnn d;
  cudnnConvolutionFwdAlgo_t fa = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnMathType_t fm = base_math(k);
  size_t wsb = 0;
  if (g.direct) {
    TRY(conv_setup(k, &g, &d));
    TRY(fwd_algo(k, &g, &d, &fa, &fm, &wsb));
  }
  char *ws;
  TRY(take(k, (int64_t)wsb, &ws));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  float *y = (float *)k->out[0].data;
  TRY(conv_z(k, &g, &d, fa, fm, ws, wsb, y));
  return bias_act(k, g.N * g.O * g.ohw, g.O, g.ohw, g.bias ? (const float *)k->in[2].data : NULL, g.act, y);
}

pcgc_status pcgc__cu_bwd_conv2d(const pcgc__cukargs *k) {
  conv_geo g;
  TRY(prepare(k, true));
  TRY(conv_check(k, &g));
  const float *b = g.bias ? (const float *)k->in[2].data : NULL;
  const float *y = (const float *)k->out[0].data, *dy = (const float *)k->dout[0].data;
  float *dx = (float *)k->din[0].data, *dw = (float *)k->din[1].data;
  float *db = g.bias ? (float *)k->din[2].data : NULL;
  if (g.N * g.O == 0 || !(dx || dw || db)) return PCGC_OK; /* nothing flows back */
  int64_t osz = g.N * g.O * g.ohw;
  conv_dnn d;
  cudnnConvolutionFwdAlgo_t fa = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t da = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t fla = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  cudnnMathType_t fm = base_math(k), dm = fm, flm = fm;
  size_t wsb = 0, s = 0;
  if (g.direct) { /* (without it dx and dw are empty) */
    TRY(conv_setup(k, &g, &d));
    if (g.act == PCGC_ACT_GELU) {
      TRY(fwd_algo(k, &g, &d, &fa, &fm, &s));
      wsb = s > wsb ? s : wsb;
    }
    if (dx) {
      TRY(bwd_data_algo(k, &g, &d, &da, &dm, &s));
      wsb = s > wsb ? s : wsb;
    }
    if (dw) {
      TRY(bwd_filter_algo(k, &g, &d, &fla, &flm, &s));
      wsb = s > wsb ? s : wsb;
    }
  }
  char *ws;
  float *dz = NULL, *part = NULL;
  TRY(take(k, (int64_t)wsb, &ws)); /* one workspace: the calls run one after another */
  if (g.act != PCGC_ACT_NONE) TRY(take(k, osz, &dz));
  if (db) TRY(take(k, red_scratch(g.N, g.O, g.ohw), &part));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  const float *dzp = dy;
  if (dz) {
    if (g.act == PCGC_ACT_GELU) { /* recompute the pre-activation */
      TRY(conv_z(k, &g, &d, fa, fm, ws, wsb, dz));
      TRY(bias_act(k, osz, g.O, g.ohw, b, PCGC_ACT_NONE, dz));
    }
    TRY(act_bwd(k, g.act, osz, dy, y, dz));
    dzp = dz;
  }
  if (db) TRY(red_add(k, g.N, g.O, g.ohw, dzp, part, db));
  if (!g.direct) return PCGC_OK;
  const float one = 1;
  if (dx) {
    TRY(conv_math(k, &d, dm));
    TRY(dnn(k,
            cudnnConvolutionBackwardData(k->cu->dnn, &one, d.w, k->in[1].data, d.y, dzp, d.c, da, ws, wsb, &one, d.x,
                                         dx),
            "cudnnConvolutionBackwardData"));
  }
  if (dw) {
    TRY(conv_math(k, &d, flm));
    TRY(dnn(k,
            cudnnConvolutionBackwardFilter(k->cu->dnn, &one, d.x, k->in[0].data, d.y, dzp, d.c, fla, ws, wsb, &one,
                                           d.w, dw),
            "cudnnConvolutionBackwardFilter"));
  }
  return PCGC_OK;
}

/* ----------------------------------------------------------------- pool2d
 * Max pooling picks, per window, the first maximum in row-major window
 * order, a NaN winning (a later NaN over an earlier one), padding never:
 * the CPU's rule, step for step. Backward gathers: each input element adds
 * its terms in (oh, ow) order, as the CPU's loops do, so every result is the
 * CPU's bit for bit (products are __fmul_rn so that no FMA merges them). */


/* The window of output o along one dim clipped to the plane: [*lo, *hi). */
static __device__ __forceinline__ void pool_span(int64_t o, int64_t stride, int64_t pad, int64_t kk, int64_t n,
                                                 int64_t *lo, int64_t *hi) {
  int64_t s = o * stride - pad;
  *lo = s < 0 ? 0 : s;
  *hi = s + kk < n ? s + kk : n;
}

/* The pick of window rows [hs, he) x columns [ws, we) of plane x[H, W]:
 * its offset in the plane; *val its value. */
static __device__ int64_t max_pick(const float *__restrict__ x, int64_t W, int64_t hs, int64_t he, int64_t ws,
                                   int64_t we, float *val) {
  int64_t best = hs * W + ws;
  float m = x[best];
  for (int64_t ih = hs; ih < he; ih++)
    for (int64_t iw = ws; iw < we; iw++) {
      float v = x[ih * W + iw];
      if (v > m || v != v) best = ih * W + iw;
      m = v > m ? v : m;
      m = v != v ? v : m;
    }
  *val = m;
  return best;
}

/* One thread per output (plane, oh, ow). */
static __global__ void pool_fwd_kernel(pool_geo g, float inv, const float *__restrict__ x, float *__restrict__ y) {
  int64_t ohw = g.OH * g.OW, total = g.NC * ohw, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t c = i / ohw, oh = i / g.OW % g.OH, ow = i % g.OW, hs, he, ws, we;
    const float *xp = x + c * g.H * g.W;
    pool_span(oh, g.sh, g.ph, g.KH, g.H, &hs, &he);
    pool_span(ow, g.sw, g.pw, g.KW, g.W, &ws, &we);
    if (g.is_max) {
      float v;
      max_pick(xp, g.W, hs, he, ws, we, &v);
      y[i] = v;
    } else {
      float s = 0;
      for (int64_t ih = hs; ih < he; ih++)
        for (int64_t iw = ws; iw < we; iw++) s += xp[ih * g.W + iw];
      y[i] = s * inv;
    }
  }
}

/* Max pooling backward when no two windows share an element: one thread
 * per output adds dy at its pick (no element is written twice). */
static __global__ void maxpool_scatter_kernel(pool_geo g, const float *__restrict__ x, const float *__restrict__ dy,
                                              float *__restrict__ dx) {
  int64_t ohw = g.OH * g.OW, total = g.NC * ohw, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t c = i / ohw, oh = i / g.OW % g.OH, ow = i % g.OW, hs, he, ws, we;
    pool_span(oh, g.sh, g.ph, g.KH, g.H, &hs, &he);
    pool_span(ow, g.sw, g.pw, g.KW, g.W, &ws, &we);
    float v;
    int64_t at = max_pick(x + c * g.H * g.W, g.W, hs, he, ws, we, &v);
    dx[c * g.H * g.W + at] += dy[i];
  }
}

/* Outputs [*lo, *hi] along one dim whose windows hold input index i. */
static __device__ __forceinline__ void pool_outs(int64_t i, int64_t stride, int64_t pad, int64_t kk, int64_t n_out,
                                                 int64_t *lo, int64_t *hi) {
  int64_t l = i + pad - kk + 1; /* o * stride - pad + kk > i */
  *lo = l <= 0 ? 0 : (l + stride - 1) / stride;
  *hi = (i + pad) / stride; /* o * stride - pad <= i */
  if (*hi > n_out - 1) *hi = n_out - 1;
}

/* One thread per input element: dx += each window's share, in (oh, ow)
 * order; for max pooling a window's share is dy where it picked this
 * element. */
static __global__ void pool_gather_kernel(pool_geo g, float inv, const float *__restrict__ x,
                                          const float *__restrict__ dy, float *__restrict__ dx) {
  int64_t hw = g.H * g.W, total = g.NC * hw, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t c = i / hw, at = i % hw, ih = at / g.W, iw = at % g.W;
    int64_t oh0, oh1, ow0, ow1;
    pool_outs(ih, g.sh, g.ph, g.KH, g.OH, &oh0, &oh1);
    pool_outs(iw, g.sw, g.pw, g.KW, g.OW, &ow0, &ow1);
    if (oh0 > oh1 || ow0 > ow1) continue;
    const float *dyp = dy + c * g.OH * g.OW, *xp = x + c * hw;
    float acc = dx[i];
    for (int64_t oh = oh0; oh <= oh1; oh++)
      for (int64_t ow = ow0; ow <= ow1; ow++) {
        float d = dyp[oh * g.OW + ow];
        if (g.is_max) {
          int64_t hs, he, ws, we;
          float v;
          pool_span(oh, g.sh, g.ph, g.KH, g.H, &hs, &he);
          pool_span(ow, g.sw, g.pw, g.KW, g.W, &ws, &we);
          if (max_pick(xp, g.W, hs, he, ws, we, &v) == at) acc += d;
        } else {
          acc += __fmul_rn(d, inv);
        }
      }
    dx[i] = acc;
  }
}

pcgc_status pcgc__cu_fwd_pool2d(const pcgc__cukargs *k) {
  pool_geo g;
  TRY(prepare(k, false));
  TRY(pcgc__kd_pool_geo(k, &g));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  int64_t n = g.NC * g.OH * g.OW;
  if (n == 0) return PCGC_OK;
  pool_fwd_kernel<<<pcgc__cu_blocks(n), PCGC_CU_THREADS, 0, k->cu->stream>>>(
      g, (float)(1 / g.div), (const float *)k->in[0].data, (float *)k->out[0].data);
  return pcgc__cu_launched(k, "pool2d forward");
}

pcgc_status pcgc__cu_bwd_pool2d(const pcgc__cukargs *k) {
  pool_geo g;
  TRY(prepare(k, true));
  TRY(pcgc__kd_pool_geo(k, &g));
  float *dx = (float *)k->din[0].data;
  if (pcgc__cu_measuring(k) || !dx || g.NC * g.OH * g.OW == 0) return PCGC_OK;
  const float *x = (const float *)k->in[0].data, *dy = (const float *)k->dout[0].data;
  bool disjoint = (g.OH == 1 || g.sh >= g.KH) && (g.OW == 1 || g.sw >= g.KW);
  if (g.is_max && disjoint) {
    int64_t n = g.NC * g.OH * g.OW;
    maxpool_scatter_kernel<<<pcgc__cu_blocks(n), PCGC_CU_THREADS, 0, k->cu->stream>>>(g, x, dy, dx);
  } else {
    int64_t n = g.NC * g.H * g.W;
    pool_gather_kernel<<<pcgc__cu_blocks(n), PCGC_CU_THREADS, 0, k->cu->stream>>>(g, (float)(1 / g.div), x, dy, dx);
  }
  return pcgc__cu_launched(k, "pool2d backward");
}

/* -------------------------------------------------------------- embedding */

static pcgc_status emb_check(const pcgc__cukargs *k, emb_geo *g) {
  const pcgc_buf *idx = &k->in[0], *tab = &k->in[1];
  int keep;
  TRY(pcgc__kd_emb_geo(k, g, &keep));
  /* the backward's sort keys and positions are 32-bit */
  if (g->rows >= INT32_MAX || g->n_bags * g->L >= INT32_MAX)
    return pcgc__kfail(k, "indices %s or table %s too large (2^31 ids or rows at most)", pcgc__kd_shp(idx).s,
                       pcgc__kd_shp(tab).s);
  return pcgc__kd_need_out_at(k, keep, g->D);
}

/* One thread per (bag, d): the bag's rows of this piece added in order,
 * then scaled (when s != 1), as the CPU. */
template <typename I>
static __global__ void emb_fwd_kernel(emb_geo g, float s, const I *__restrict__ ids, const float *__restrict__ t,
                                      float *__restrict__ y) {
  int64_t total = g.n_bags * g.D, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t bag = i / g.D, d = i % g.D;
    float acc = 0;
    for (int64_t l = 0; l < g.L; l++) {
      int64_t r = (int64_t)ids[bag * g.L + l] - g.row0;
      if (r < 0 || r >= g.rows) continue; /* another piece's row */
      acc += t[r * g.D + d];
    }
    if (s != 1) acc *= s;
    y[i] = acc;
  }
}

/* Sort keys: the local row of id i, or `rows` when another piece holds it. */
template <typename I>
static __global__ void emb_keys_kernel(int64_t n, int64_t rows, int64_t row0, const I *__restrict__ ids,
                                       uint32_t *__restrict__ keys, uint32_t *__restrict__ pos) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t r = (int64_t)ids[i] - row0;
    keys[i] = (uint32_t)(r < 0 || r >= rows ? rows : r);
    pos[i] = (uint32_t)i;
  }
}

/* After the stable sort, thread (p, d) at the first id p of each run of
 * equal rows adds the run's gradients into the row, in id order. */
static __global__ void emb_bwd_kernel(int64_t n, int64_t L, int64_t D, int64_t rows, float s,
                                      const uint32_t *__restrict__ keys, const uint32_t *__restrict__ pos,
                                      const float *__restrict__ dy, float *__restrict__ dt) {
  int64_t total = n * D, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t p = i / D, d = i % D;
    uint32_t r = keys[p];
    if (r == (uint32_t)rows || (p > 0 && keys[p - 1] == r)) continue;
    float acc = dt[(int64_t)r * D + d];
    for (int64_t q = p; q < n && keys[q] == r; q++) acc += __fmul_rn(dy[(int64_t)pos[q] / L * D + d], s);
    dt[(int64_t)r * D + d] = acc;
  }
}

pcgc_status pcgc__cu_fwd_embedding(const pcgc__cukargs *k) {
  emb_geo g;
  TRY(prepare(k, false));
  TRY(emb_check(k, &g));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  int64_t n = g.n_bags * g.D;
  if (n == 0) return PCGC_OK;
  unsigned nb = pcgc__cu_blocks(n);
  const float *t = (const float *)k->in[1].data;
  float *y = (float *)k->out[0].data;
  float s = (float)g.scale;
  if (k->in[0].dtype == PCGC_I32)
    emb_fwd_kernel<int32_t><<<nb, PCGC_CU_THREADS, 0, k->cu->stream>>>(g, s, (const int32_t *)k->in[0].data, t, y);
  else emb_fwd_kernel<int64_t><<<nb, PCGC_CU_THREADS, 0, k->cu->stream>>>(g, s, (const int64_t *)k->in[0].data, t, y);
  return pcgc__cu_launched(k, "embedding forward");
}

pcgc_status pcgc__cu_bwd_embedding(const pcgc__cukargs *k) {
  emb_geo g;
  TRY(prepare(k, true));
  TRY(emb_check(k, &g));
  float *dt = (float *)k->din[1].data;
  int64_t n = g.n_bags * g.L;
  if (!dt || n == 0 || g.D == 0) return PCGC_OK;
  int end_bit = 1; /* keys are at most `rows` */
  while (end_bit < 32 && ((int64_t)1 << end_bit) <= g.rows) end_bit++;
  size_t sort_bytes = 0;
  TRY(pcgc__cu_check(k,
                     cub::DeviceRadixSort::SortPairs(NULL, sort_bytes, (const uint32_t *)NULL, (uint32_t *)NULL,
                                                     (const uint32_t *)NULL, (uint32_t *)NULL, (int)n, 0, end_bit,
                                                     k->cu->stream),
                     "cub::DeviceRadixSort::SortPairs (size)"));
  uint32_t *keys, *pos; /* [4n]: keys, positions, sorted keys, sorted positions */
  char *sort_ws;
  TRY(take(k, 4 * n, &keys));
  TRY(take(k, (int64_t)(sort_bytes ? sort_bytes : 1), &sort_ws));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  pos = keys + n;
  uint32_t *skeys = keys + 2 * n, *spos = keys + 3 * n;
  cudaStream_t st = k->cu->stream;
  if (k->in[0].dtype == PCGC_I32)
    emb_keys_kernel<int32_t><<<pcgc__cu_blocks(n), PCGC_CU_THREADS, 0, st>>>(n, g.rows, g.row0,
                                                                              (const int32_t *)k->in[0].data, keys, pos);
  else
    emb_keys_kernel<int64_t><<<pcgc__cu_blocks(n), PCGC_CU_THREADS, 0, st>>>(n, g.rows, g.row0,
                                                                              (const int64_t *)k->in[0].data, keys, pos);
  TRY(pcgc__cu_launched(k, "embedding backward (keys)"));
  /* stable: ids of one row keep their order, the CPU's order of additions */
  TRY(pcgc__cu_check(k,
                     cub::DeviceRadixSort::SortPairs(sort_ws, sort_bytes, (const uint32_t *)keys, skeys,
                                                     (const uint32_t *)pos, spos, (int)n, 0, end_bit, st),
                     "cub::DeviceRadixSort::SortPairs"));
  emb_bwd_kernel<<<pcgc__cu_blocks(n * g.D), PCGC_CU_THREADS, 0, st>>>(n, g.L, g.D, g.rows, (float)g.scale, skeys,
                                                                        spos, (const float *)k->dout[0].data, dt);
  return pcgc__cu_launched(k, "embedding backward");
}

/* -------------------------------------------------------------- attention
 * Projections are GEMMs over all rows; scores, softmax and the context run
 * a chunk of g->bc batch entries at a time: S[bc, nh, Sq, Sk] = scale Q K^T
 * per (b, h) as strided-batched GEMMs (batched over heads, or over batch
 * entries when those are fewer), a row kernel for the causal softmax and the
 * dropout mask, and the context GEMMs. Backward recomputes the probabilities
 * as the CPU does. Dropout keeps probability (b, h, i, j) iff
 *     pcgc__curng_u64_at(key, ((b*heads + h)*Sq + i)*Sk + j) >> 11 >= thr
 * with logical indices (kernels.h), kept values scaled by 1 / (1 - p). */

static pcgc_status attn_check(const pcgc__cukargs *k, attn_geo *g) {
  TRY(pcgc__kd_attn_geo(k, g));
  /* score chunks: several batch entries of all heads, or heads of one entry */
  int64_t ss = g->Sq * g->Sk;
  g->bc = 1, g->hc = g->nh;
  if (g->nh * ss <= ATTN_CHUNK) g->bc = g->nh * ss > 0 ? ATTN_CHUNK / (g->nh * ss) : g->B;
  else g->hc = ATTN_CHUNK / ss;
  if (g->bc > g->B) g->bc = g->B;
  if (g->bc < 1) g->bc = 1;
  if (g->hc < 1) g->hc = 1;
  TRY(int_fits(k, {g->B * g->Sq, g->B * g->Sk, g->Sq, g->Sk, g->Eq, g->Ek, g->Ev, g->E, g->Eo,
                                         g->nh, g->bc, g->hc}));
  return need_out(k, 3, {g->B, g->Sq, g->Eo});
}

/* Where the rows of a score chunk sit: row r = (bl * nh + h) * Sq + i. */
typedef struct attn_rows {
  int64_t nh, Sq, Sk, b_first; /* nh: the chunk's heads; b_first: logical batch index of its first entry */
  int64_t heads, h0, Sq_g, q0; /* h0: logical index of the chunk's first head */
  bool causal, drop;
  uint64_t key, thr;
  float keep, scale;
} attn_rows;

/* The chunk of nh heads from local head h of local batch entry b on. */
static attn_rows rows_of(const attn_geo *g, int64_t b, int64_t h, int64_t nh) {
  attn_rows r;
  r.nh = nh, r.Sq = g->Sq, r.Sk = g->Sk, r.b_first = g->b0 + b;
  r.heads = g->heads, r.h0 = g->h0 + h, r.Sq_g = g->Sq_g, r.q0 = g->q0;
  r.causal = g->causal, r.drop = g->dropout_on;
  r.key = g->key, r.thr = g->thr;
  r.keep = (float)(1 / (1 - g->p));
  r.scale = (float)g->scale;
  return r;
}

/* The dropout counter of (row r, key 0). */
static __device__ __forceinline__ uint64_t drop_row(const attn_rows &a, int64_t r) {
  int64_t bl = r / (a.nh * a.Sq), h = r / a.Sq % a.nh, i = r % a.Sq;
  return (((uint64_t)(a.b_first + bl) * (uint64_t)a.heads + (uint64_t)(a.h0 + h)) * (uint64_t)a.Sq_g +
          (uint64_t)(a.q0 + i)) *
         (uint64_t)a.Sk;
}

static __device__ __forceinline__ bool kept(const attn_rows &a, uint64_t c) {
  return (pcgc__curng_u64_at(a.key, c) >> 11) >= a.thr;
}

/* One block per row of P: softmax over the visible keys (j < q0 + i + 1
 * when causal), zeros beyond; with dropout also Pd = P masked and scaled.
 * (The max ignores NaN scores, where the CPU's keeps a leading one: both
 * then give NaN rows.) */
static __global__ void attn_softmax_kernel(attn_rows a, int64_t n_rows, float *__restrict__ P, float *__restrict__ Pd) {
  for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    float *row = P + r * a.Sk;
    int64_t lim = a.Sk;
    if (a.causal) {
      int64_t q = a.q0 + r % a.Sq + 1;
      lim = q < a.Sk ? q : a.Sk;
    }
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < lim; j += blockDim.x) mx = fmaxf(mx, row[j]);
    mx = block_max(mx);
    float s = 0;
    for (int64_t j = threadIdx.x; j < lim; j += blockDim.x) {
      float e = expf(row[j] - mx);
      row[j] = e;
      s += e;
    }
    s = block_sum(s);
    uint64_t c0 = Pd ? drop_row(a, r) : 0; /* once per row: its divisions are 64-bit */
    for (int64_t j = threadIdx.x; j < a.Sk; j += blockDim.x) {
      float v = j < lim ? row[j] / s : 0.0f; /* each thread rereads only what it wrote */
      row[j] = v;
      if (Pd) Pd[r * a.Sk + j] = kept(a, c0 + (uint64_t)j) ? v * a.keep : 0.0f;
    }
  }
}

/* One block per row: dP through the dropout mask, then through softmax:
 * dS = P (dP - sum_j dP P) * scale, in place. */
static __global__ void attn_softmax_bwd_kernel(attn_rows a, int64_t n_rows, const float *__restrict__ P,
                                               float *__restrict__ dP) {
  for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
    float *dr = dP + r * a.Sk;
    const float *pr = P + r * a.Sk;
    float dot = 0;
    uint64_t c0 = a.drop ? drop_row(a, r) : 0;
    for (int64_t j = threadIdx.x; j < a.Sk; j += blockDim.x) {
      float d = dr[j];
      if (a.drop) d = kept(a, c0 + (uint64_t)j) ? d * a.keep : 0.0f;
      dr[j] = d;
      dot += d * pr[j];
    }
    dot = block_sum(dot);
    for (int64_t j = threadIdx.x; j < a.Sk; j += blockDim.x) dr[j] = pr[j] * (dr[j] - dot) * a.scale;
  }
}

static unsigned row_threads(int64_t Sk) {
  int64_t t = Sk < 256 ? (Sk + 31) / 32 * 32 : 256;
  return (unsigned)(t < 32 ? 32 : t);
}

static unsigned row_blocks(int64_t n_rows) { return (unsigned)(n_rows < (1 << 20) ? n_rows : (1 << 20)); }

/* The same two kernels with one warp per row, for rows of at most 32 K
 * keys: each lane holds its K elements in registers, so a row is read once
 * and written once (the block kernels above pass over it three times and
 * synchronise the block twice; they were 24 of BERT-Large's 120 ms). */
template <int K>
static __global__ void attn_softmax_warp_kernel(attn_rows a, int64_t n_rows, float *__restrict__ P,
                                                float *__restrict__ Pd) {
  int lane = threadIdx.x & 31;
  int64_t step = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < n_rows; r += step) {
    float *row = P + r * a.Sk;
    int64_t lim = a.Sk;
    if (a.causal) {
      int64_t q = a.q0 + r % a.Sq + 1;
      lim = q < a.Sk ? q : a.Sk;
    }
    float v[K], mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < K; k++) {
      int64_t j = lane + 32 * k;
      v[k] = j < lim ? row[j] : -INFINITY;
      mx = fmaxf(mx, v[k]);
    }
    mx = warp_max(mx);
    float s = 0;
#pragma unroll
    for (int k = 0; k < K; k++) {
      int64_t j = lane + 32 * k;
      v[k] = j < lim ? expf(v[k] - mx) : 0.0f;
      s += v[k];
    }
    s = warp_sum(s);
    uint64_t c0 = Pd ? drop_row(a, r) : 0;
#pragma unroll
    for (int k = 0; k < K; k++) {
      int64_t j = lane + 32 * k;
      if (j >= a.Sk) break;
      float p = j < lim ? v[k] / s : 0.0f;
      row[j] = p;
      if (Pd) Pd[r * a.Sk + j] = kept(a, c0 + (uint64_t)j) ? p * a.keep : 0.0f;
    }
  }
}

template <int K>
static __global__ void attn_softmax_bwd_warp_kernel(attn_rows a, int64_t n_rows, const float *__restrict__ P,
                                                    float *__restrict__ dP) {
  int lane = threadIdx.x & 31;
  int64_t step = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < n_rows; r += step) {
    float *dr = dP + r * a.Sk;
    const float *pr = P + r * a.Sk;
    float d[K], p[K], dot = 0;
    uint64_t c0 = a.drop ? drop_row(a, r) : 0;
#pragma unroll
    for (int k = 0; k < K; k++) {
      int64_t j = lane + 32 * k;
      d[k] = j < a.Sk ? dr[j] : 0.0f;
      p[k] = j < a.Sk ? pr[j] : 0.0f;
      if (a.drop && j < a.Sk) d[k] = kept(a, c0 + (uint64_t)j) ? d[k] * a.keep : 0.0f;
      dot += d[k] * p[k];
    }
    dot = warp_sum(dot);
#pragma unroll
    for (int k = 0; k < K; k++) {
      int64_t j = lane + 32 * k;
      if (j < a.Sk) dr[j] = p[k] * (d[k] - dot) * a.scale;
    }
  }
}

/* Launches the softmax (bwd: its backward) over n_rows rows: a warp per row
 * up to 1024 keys, else a block per row. */
static pcgc_status softmax_rows(const pcgc__cukargs *k, const attn_rows &a, int64_t n_rows, bool bwd, float *P,
                                float *Pd, float *dP) {
  if (n_rows == 0) return PCGC_OK;
  cudaStream_t st = k->cu->stream;
  if (a.Sk <= 1024) {
    int64_t blocks64 = (n_rows + 7) / 8;
    unsigned blocks = (unsigned)(blocks64 < (1 << 20) ? blocks64 : (1 << 20));
#define PCGC_SOFTMAX_WARP(KK)                                                         \
  if (bwd) attn_softmax_bwd_warp_kernel<KK><<<blocks, 256, 0, st>>>(a, n_rows, P, dP); \
  else attn_softmax_warp_kernel<KK><<<blocks, 256, 0, st>>>(a, n_rows, P, Pd);
    if (a.Sk <= 32) { PCGC_SOFTMAX_WARP(1) }
    else if (a.Sk <= 64) { PCGC_SOFTMAX_WARP(2) }
    else if (a.Sk <= 128) { PCGC_SOFTMAX_WARP(4) }
    else if (a.Sk <= 256) { PCGC_SOFTMAX_WARP(8) }
    else if (a.Sk <= 512) { PCGC_SOFTMAX_WARP(16) }
    else { PCGC_SOFTMAX_WARP(32) }
#undef PCGC_SOFTMAX_WARP
  } else if (bwd) {
    attn_softmax_bwd_kernel<<<row_blocks(n_rows), row_threads(a.Sk), 0, st>>>(a, n_rows, P, dP);
  } else {
    attn_softmax_kernel<<<row_blocks(n_rows), row_threads(a.Sk), 0, st>>>(a, n_rows, P, Pd);
  }
  return pcgc__cu_launched(k, bwd ? "attention softmax backward" : "attention softmax");
}


/* One GEMM per (b, h) of nb batch entries and nh heads, operand X of (b, h)
 * at X + b * xb + h * xh: strided batches over the heads, or over the batch
 * entries when those are fewer. */
static pcgc_status gemm_bh(const pcgc__cukargs *k, bool ta, bool tb, int64_t m, int64_t n, int64_t kk, float alpha,
                           const float *A, int64_t lda, int64_t ab, int64_t ah, const float *B, int64_t ldb, int64_t bb,
                           int64_t bh, float beta, float *C, int64_t ldc, int64_t cb, int64_t ch, int64_t nb,
                           int64_t nh) {
  if (nb <= nh) {
    for (int64_t b = 0; b < nb; b++)
      TRY(gemmb(k, ta, tb, m, n, kk, alpha, A + b * ab, lda, ah, B + b * bb, ldb, bh, beta, C + b * cb, ldc, ch, nh));
  } else {
    for (int64_t h = 0; h < nh; h++)
      TRY(gemmb(k, ta, tb, m, n, kk, alpha, A + h * ah, lda, ab, B + h * bh, ldb, bb, beta, C + h * ch, ldc, cb, nb));
  }
  return PCGC_OK;
}

/* gemm_elems of the largest GEMM of a projection Y[rows, n] = X[rows, m] W[m, n]:
 * Y itself, or (backward) dX = dY W^T and dW = X^T dY. */
static int64_t proj_elems(int64_t rows, int64_t m, int64_t n, bool bwd) {
  int64_t e = gemm_elems(rows, n, m, 1);
  if (!bwd) return e;
  int64_t dx = gemm_elems(rows, m, n, 1), dw = gemm_elems(m, n, rows, 1);
  e = dx > e ? dx : e;
  return dw > e ? dw : e;
}

/* ... of the per-head GEMMs of a score chunk: gemm_bh batches at most
 * max(bc, hc) of them in one call. S and dP are (Sq, hd) by (hd, Sk); the
 * context and dQ (Sq, Sk) by (Sk, hd); dV and dK (Sk, Sq) by (Sq, hd). */
static int64_t heads_elems(const attn_geo *g, bool bwd) {
  int64_t c = g->bc > g->hc ? g->bc : g->hc;
  int64_t s = gemm_elems(g->Sq, g->Sk, g->hd, c), x = gemm_elems(g->Sq, g->hd, g->Sk, c);
  int64_t e = s > x ? s : x, v = bwd ? gemm_elems(g->Sk, g->hd, g->Sq, c) : 0;
  return v > e ? v : e;
}

/* Y[rows, n] = X[rows, m] W[m, n] (+ b) */
static pcgc_status proj(const pcgc__cukargs *k, int64_t rows, int64_t m, int64_t n, const void *X, const void *W,
                        const void *b, float *Y) {
  TRY(gemm(k, false, false, rows, n, m, 1, (const float *)X, m, (const float *)W, n, 0, Y, n));
  return bias_act(k, rows * n, n, 1, (const float *)b, PCGC_ACT_NONE, Y);
}

/* Gradients of Y = X W + b given dY: dX += dY W^T, dW += X^T dY, db += sum dY. */
static pcgc_status proj_bwd(const pcgc__cukargs *k, int64_t rows, int64_t m, int64_t n, const void *X, const void *W,
                            const float *dY, void *dX, void *dW, void *db, float *part) {
  if (dX) TRY(gemm(k, false, true, rows, m, n, 1, dY, n, (const float *)W, n, 1, (float *)dX, m));
  if (dW) TRY(gemm(k, true, false, m, n, rows, 1, (const float *)X, m, dY, n, 1, (float *)dW, n));
  if (db) TRY(red_add(k, rows, n, 1, dY, part, (float *)db));
  return PCGC_OK;
}

/* S = scale Q K^T for batch entries [b, b + nb) and local heads [h, h + nh),
 * then the softmax rows: P (and Pd) hold the chunk's [nb, nh, Sq, Sk]
 * probabilities. */
static pcgc_status attn_probs(const pcgc__cukargs *k, const attn_geo *g, int64_t b, int64_t nb, int64_t h, int64_t nh,
                              const float *Qp, const float *Kp, float *P, float *Pd) {
  int64_t Sq = g->Sq, Sk = g->Sk, E = g->E, hd = g->hd, ss = Sq * Sk;
  TRY(gemm_bh(k, false, true, Sq, Sk, hd, (float)g->scale, Qp + b * Sq * E + h * hd, E, Sq * E, hd,
              Kp + b * Sk * E + h * hd, E, Sk * E, hd, 0, P, Sk, nh * ss, ss, nb, nh));
  return softmax_rows(k, rows_of(g, b, h, nh), nb * nh * Sq, false, P, g->dropout_on ? Pd : NULL, NULL);
}

/* Rotary embeddings in place on projected rows X [B * S, E] of nh heads of
 * hd (k_dense_impl.h attn_rope): position p0 + s rotates the pairs
 * (i, i + hd/2) by (p0 + s) theta^(-2i/hd); `inverse` rotates back. In
 * double, without contraction, as the CPU computes it. */
static __global__ void rope_kernel(int64_t B, int64_t S, int64_t E, int64_t nh, int64_t hd, int64_t p0, double theta,
                                   bool inverse, float *X) {
  int64_t half = hd / 2;
  int64_t n = B * S * nh * half;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
    int64_t i = t % half, r = t / half, h = r % nh, bs = r / nh, s = bs % S;
    double a = __dmul_rn((double)(p0 + s), pow(theta, -2.0 * (double)i / (double)hd));
    double c = cos(a), sn = inverse ? -sin(a) : sin(a);
    float *x = X + bs * E + h * hd;
    double x1 = x[i], x2 = x[i + half];
    x[i] = (float)__dadd_rn(__dmul_rn(x1, c), -__dmul_rn(x2, sn));
    x[i + half] = (float)__dadd_rn(__dmul_rn(x2, c), __dmul_rn(x1, sn));
  }
}

static pcgc_status attn_rope(const pcgc__cukargs *k, const attn_geo *g, int64_t S, int64_t p0, bool inverse, float *X) {
  int64_t n = g->B * S * g->nh * (g->hd / 2);
  if (n < 1) return PCGC_OK;
  rope_kernel<<<pcgc__cu_blocks(n), PCGC_CU_THREADS, 0, k->cu->stream>>>(g->B, S, g->E, g->nh, g->hd, p0, g->theta,
                                                                         inverse, X);
  return pcgc__cu_launched(k, "attention rotary embeddings");
}

/* Grouped-query attention (k_dense_impl.h kv_expand, kv_fold): k/v
 * projections X [rows, F] as a block per query head Y [rows, E], and the
 * gradient back, each k/v head summing its group's heads in head order. */
static __global__ void kv_expand_kernel(int64_t rows, int64_t E, int64_t F, int64_t hd, int64_t group,
                                        const float *__restrict__ X, float *__restrict__ Y) {
  int64_t n = rows * E;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = t / E, c = t % E;
    Y[t] = X[r * F + c / hd / group * hd + c % hd];
  }
}

static __global__ void kv_fold_kernel(int64_t rows, int64_t E, int64_t F, int64_t hd, int64_t group,
                                      const float *__restrict__ Y, float *__restrict__ X) {
  int64_t n = rows * F;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = t / F, c = t % F;
    const float *y = Y + r * E + c / hd * group * hd + c % hd;
    float acc = y[0];
    for (int64_t i = 1; i < group; i++) acc += y[i * hd];
    X[t] = acc;
  }
}

/* K or V projected into Y [rows, E]: directly, or for grouped-query
 * attention into X [rows, F] and expanded. */
static pcgc_status kv_proj(const pcgc__cukargs *k, const attn_geo *g, int64_t rows, int64_t m, const void *In,
                           const void *W, const void *b, float *X, float *Y) {
  if (g->group == 1) return proj(k, rows, m, g->E, In, W, b, Y);
  TRY(proj(k, rows, m, g->F, In, W, b, X));
  if (rows * g->E < 1) return PCGC_OK;
  kv_expand_kernel<<<pcgc__cu_blocks(rows * g->E), PCGC_CU_THREADS, 0, k->cu->stream>>>(rows, g->E, g->F, g->hd, g->group, X, Y);
  return pcgc__cu_launched(k, "attention k/v head expansion");
}

static pcgc_status kv_fold(const pcgc__cukargs *k, const attn_geo *g, int64_t rows, const float *Y, float *X) {
  if (rows * g->F < 1) return PCGC_OK;
  kv_fold_kernel<<<pcgc__cu_blocks(rows * g->F), PCGC_CU_THREADS, 0, k->cu->stream>>>(rows, g->E, g->F, g->hd, g->group, Y, X);
  return pcgc__cu_launched(k, "attention k/v head gradients");
}

pcgc_status pcgc__cu_fwd_attention(const pcgc__cukargs *k) {
  attn_geo g;
  TRY(prepare(k, false));
  TRY(attn_check(k, &g));
  const pcgc_buf *in = k->in;
  const void *bq = g.bias ? in[7].data : NULL, *bk = g.bias ? in[8].data : NULL;
  const void *bv = g.bias ? in[9].data : NULL, *bo = g.bias_o ? in[10].data : NULL;
  int64_t nq = g.B * g.Sq * g.E, nk = g.B * g.Sk * g.E, np = g.bc * g.hc * g.Sq * g.Sk;
  float *Qp, *Cx, *Kp, *Vp, *P, *Pd = NULL, *KVc = NULL;
  TRY(take(k, nq, &Qp));
  TRY(take(k, nq, &Cx));
  TRY(take(k, nk, &Kp));
  TRY(take(k, nk, &Vp));
  TRY(take(k, np, &P));
  if (g.dropout_on) TRY(take(k, np, &Pd));
  if (g.group > 1) TRY(take(k, g.B * g.Sk * g.F, &KVc));
  TRY(gemm_room(k, {proj_elems(g.B * g.Sq, g.Eq, g.E, false), proj_elems(g.B * g.Sk, g.Ek, g.F, false),
                    proj_elems(g.B * g.Sk, g.Ev, g.F, false), proj_elems(g.B * g.Sq, g.E, g.Eo, false),
                    heads_elems(&g, false)}));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  TRY(blas_ready(k));
  int64_t Sq = g.Sq, Sk = g.Sk, E = g.E, hd = g.hd, ss = Sq * Sk;
  TRY(proj(k, g.B * Sq, g.Eq, E, in[0].data, in[3].data, bq, Qp)); /* (B*Sq, E) */
  TRY(kv_proj(k, &g, g.B * Sk, g.Ek, in[1].data, in[4].data, bk, KVc, Kp)); /* (B*Sk, E) */
  TRY(kv_proj(k, &g, g.B * Sk, g.Ev, in[2].data, in[5].data, bv, KVc, Vp));
  if (g.rope) { /* queries at their logical positions q0 + i, keys (whole) at j */
    TRY(attn_rope(k, &g, Sq, g.q0, false, Qp));
    TRY(attn_rope(k, &g, Sk, 0, false, Kp));
  }
  for (int64_t b = 0; b < g.B; b += g.bc)
    for (int64_t h = 0; h < g.nh; h += g.hc) {
      int64_t nb = g.B - b < g.bc ? g.B - b : g.bc, nh = g.nh - h < g.hc ? g.nh - h : g.hc;
      int64_t oq = b * Sq * E + h * hd, ok = b * Sk * E + h * hd;
      TRY(attn_probs(k, &g, b, nb, h, nh, Qp, Kp, P, Pd)); /* (nb, nh, Sq, Sk) */
      const float *Pu = g.dropout_on ? Pd : P;
      TRY(gemm_bh(k, false, false, Sq, hd, Sk, 1, Pu, Sk, nh * ss, ss, Vp + ok, E, Sk * E, hd, 0, Cx + oq, E, Sq * E,
                  hd, nb, nh));
    }
  return proj(k, g.B * Sq, E, g.Eo, Cx, in[6].data, bo, (float *)k->out[0].data); /* (B*Sq, Eo) */
}

/* The backward's intermediates (NULL where not wanted). */
typedef struct attn_bufs {
  float *Qp, *Kp, *Vp, *Cx, *dC, *dQ, *dK, *dV; /* (B*Sq or B*Sk, E) */
  float *KVc, *dKc, *dVc;                       /* grouped-query attention: (B*Sk, F) */
  float *P, *Pd, *dP;                           /* one chunk's (nb, nh, Sq, Sk) */
} attn_bufs;

/* Backward through scores, softmax and context for batch entries
 * [b, b + nb) and local heads [h, h + nh): the chunk's part of Cx (for dwo),
 * dV, dQ and dK. Each (b, h) block of those is written once (beta 0). */
static pcgc_status attn_bwd_chunk(const pcgc__cukargs *k, const attn_geo *g, const attn_bufs *u, int64_t b,
                                  int64_t nb, int64_t h, int64_t nh) {
  int64_t Sq = g->Sq, Sk = g->Sk, E = g->E, hd = g->hd, ss = Sq * Sk, bs = nh * ss;
  int64_t oq = b * Sq * E + h * hd, ok = b * Sk * E + h * hd;
  TRY(attn_probs(k, g, b, nb, h, nh, u->Qp, u->Kp, u->P, u->Pd));
  const float *Pu = g->dropout_on ? u->Pd : u->P;
  if (u->Cx) /* the context, for dwo */
    TRY(gemm_bh(k, false, false, Sq, hd, Sk, 1, Pu, Sk, bs, ss, u->Vp + ok, E, Sk * E, hd, 0, u->Cx + oq, E, Sq * E,
                hd, nb, nh));
  if (u->dV) /* dV_h = Pd^T dC_h */
    TRY(gemm_bh(k, true, false, Sk, hd, Sq, 1, Pu, Sk, bs, ss, u->dC + oq, E, Sq * E, hd, 0, u->dV + ok, E, Sk * E, hd,
                nb, nh));
  if (!u->dQ && !u->dK) return PCGC_OK;
  /* dPd = dC_h V_h^T (Sq, Sk), then back through dropout and softmax */
  TRY(gemm_bh(k, false, true, Sq, Sk, hd, 1, u->dC + oq, E, Sq * E, hd, u->Vp + ok, E, Sk * E, hd, 0, u->dP, Sk, bs,
              ss, nb, nh));
  TRY(softmax_rows(k, rows_of(g, b, h, nh), nb * nh * Sq, true, u->P, NULL, u->dP));
  if (u->dQ) /* dQ_h = dS K_h */
    TRY(gemm_bh(k, false, false, Sq, hd, Sk, 1, u->dP, Sk, bs, ss, u->Kp + ok, E, Sk * E, hd, 0, u->dQ + oq, E, Sq * E,
                hd, nb, nh));
  if (u->dK) /* dK_h = dS^T Q_h */
    TRY(gemm_bh(k, true, false, Sk, hd, Sq, 1, u->dP, Sk, bs, ss, u->Qp + oq, E, Sq * E, hd, 0, u->dK + ok, E, Sk * E,
                hd, nb, nh));
  return PCGC_OK;
}

pcgc_status pcgc__cu_bwd_attention(const pcgc__cukargs *k) {
  attn_geo g;
  TRY(prepare(k, true));
  TRY(attn_check(k, &g));
  const pcgc_buf *in = k->in, *din = k->din;
  const void *bq = g.bias ? in[7].data : NULL, *bk = g.bias ? in[8].data : NULL;
  const void *bv = g.bias ? in[9].data : NULL;
  const float *dy = (const float *)k->dout[0].data;
  void *dbias[4] = {NULL, NULL, NULL, NULL};
  for (int i = 0; g.bias && i < 3; i++) dbias[i] = din[7 + i].data;
  if (g.bias_o) dbias[3] = din[10].data;
  bool want_q = din[0].data || din[3].data || dbias[0], want_k = din[1].data || din[4].data || dbias[1];
  bool want_v = din[2].data || din[5].data || dbias[2], want_o = din[6].data != NULL;
  bool want_p = want_q || want_k || want_v || want_o; /* the probabilities are needed */
  int64_t E = g.E, rq = g.B * g.Sq, rk = g.B * g.Sk;
  int64_t nq = rq * E, nk = rk * E, np = g.bc * g.hc * g.Sq * g.Sk;
  attn_bufs u;
  memset(&u, 0, sizeof u);
  float *part;
  if (want_p) {
    TRY(take(k, nq, &u.Qp));
    TRY(take(k, nk, &u.Kp));
    TRY(take(k, nk, &u.Vp));
    TRY(take(k, np, &u.P));
    if (g.dropout_on) TRY(take(k, np, &u.Pd));
  }
  if (want_o) TRY(take(k, nq, &u.Cx));
  if (want_q || want_k || want_v) TRY(take(k, nq, &u.dC));
  if (want_q || want_k) TRY(take(k, np, &u.dP));
  if (want_q) TRY(take(k, nq, &u.dQ));
  if (want_k) TRY(take(k, nk, &u.dK));
  if (want_v) TRY(take(k, nk, &u.dV));
  if (g.group > 1) {
    int64_t nkc = rk * g.F;
    if (want_p) TRY(take(k, nkc, &u.KVc));
    if (want_k) TRY(take(k, nkc, &u.dKc));
    if (want_v) TRY(take(k, nkc, &u.dVc));
  }
  int64_t npart = 0, s; /* one partial-sum buffer for the bias gradients, used one after another */
  if (dbias[3] && (s = red_scratch(rq, g.Eo, 1)) > npart) npart = s;
  if (dbias[0] && (s = red_scratch(rq, E, 1)) > npart) npart = s;
  if ((dbias[1] || dbias[2]) && (s = red_scratch(rk, g.F, 1)) > npart) npart = s;
  TRY(take(k, npart, &part));
  TRY(gemm_room(k, {proj_elems(rq, g.Eq, E, true), proj_elems(rk, g.Ek, g.F, true), proj_elems(rk, g.Ev, g.F, true),
                    proj_elems(rq, E, g.Eo, true), heads_elems(&g, true)}));
  if (pcgc__cu_measuring(k) || !(want_p || dbias[3])) return PCGC_OK;
  TRY(blas_ready(k));
  if (want_p) {
    TRY(proj(k, rq, g.Eq, E, in[0].data, in[3].data, bq, u.Qp));
    TRY(kv_proj(k, &g, rk, g.Ek, in[1].data, in[4].data, bk, u.KVc, u.Kp));
    TRY(kv_proj(k, &g, rk, g.Ev, in[2].data, in[5].data, bv, u.KVc, u.Vp));
    if (g.rope) {
      TRY(attn_rope(k, &g, g.Sq, g.q0, false, u.Qp));
      TRY(attn_rope(k, &g, g.Sk, 0, false, u.Kp));
    }
  }
  if (u.dC) /* output projection: dC = dy wo^T (B*Sq, E) */
    TRY(gemm(k, false, true, rq, E, g.Eo, 1, dy, g.Eo, (const float *)in[6].data, g.Eo, 0, u.dC, E));
  for (int64_t b = 0; want_p && b < g.B; b += g.bc)
    for (int64_t h = 0; h < g.nh; h += g.hc)
      TRY(attn_bwd_chunk(k, &g, &u, b, g.B - b < g.bc ? g.B - b : g.bc, h, g.nh - h < g.hc ? g.nh - h : g.hc));
  if (g.rope && u.dQ) TRY(attn_rope(k, &g, g.Sq, g.q0, true, u.dQ)); /* back to the unrotated projections */
  if (g.rope && u.dK) TRY(attn_rope(k, &g, g.Sk, 0, true, u.dK));
  TRY(proj_bwd(k, rq, E, g.Eo, u.Cx, in[6].data, dy, NULL, din[6].data, dbias[3], part));
  if (want_q) TRY(proj_bwd(k, rq, g.Eq, E, in[0].data, in[3].data, u.dQ, din[0].data, din[3].data, dbias[0], part));
  float *dK = u.dK, *dV = u.dV;
  if (g.group > 1) { /* the gradients of the shared k/v heads */
    if (want_k) TRY(kv_fold(k, &g, rk, u.dK, dK = u.dKc));
    if (want_v) TRY(kv_fold(k, &g, rk, u.dV, dV = u.dVc));
  }
  if (want_k) TRY(proj_bwd(k, rk, g.Ek, g.F, in[1].data, in[4].data, dK, din[1].data, din[4].data, dbias[1], part));
  if (want_v) TRY(proj_bwd(k, rk, g.Ev, g.F, in[2].data, in[5].data, dV, din[2].data, din[5].data, dbias[2], part));
  return PCGC_OK;
}

/* ---------------------------------------------------------- expert_linear
 * x[G, X, C, M] w[X, M, N] (b[X, N]): per group one strided-batched GEMM over
 * the experts (expert e's C slots by w[e]); the bias and activation as
 * linear's; the bias gradient summed over groups and slots per (e, n). */

/* y[((g X + e) C + c) N + n] = act(y + b[e N + n]) */
static __global__ void expert_bias_act_kernel(int64_t total, int64_t X, int64_t C, int64_t N,
                                              const float *__restrict__ b, int act, float *__restrict__ y) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    float v = y[i];
    if (b) v += b[(i / (C * N)) % X * N + i % N];
    y[i] = act_fwd(act, v);
  }
}

/* db[e N + n] += sum over g, c of dz (one thread per (e, n), in order) */
static __global__ void expert_bias_grad_kernel(int64_t G, int64_t X, int64_t C, int64_t N,
                                               const float *__restrict__ dz, float *__restrict__ db) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < X * N; i += stride) {
    int64_t e = i / N, n = i % N;
    float s = 0;
    for (int64_t g = 0; g < G; g++)
      for (int64_t c = 0; c < C; c++) s += dz[((g * X + e) * C + c) * N + n];
    db[i] += s;
  }
}

typedef struct expert_geo {
  int64_t G, X, C, M, N;
  bool bias;
  int act;
} expert_geo;

static pcgc_status expert_check(const pcgc__cukargs *k, bool bwd, expert_geo *g) {
  TRY(pcgc__kcheck(k, bwd, KX_F32_ONLY));
  const pcgc_buf *x = &k->in[0], *w = &k->in[1];
  *g = (expert_geo){x->dims[0], x->dims[1], x->dims[2], x->dims[3], w->dims[2], k->n_in == 3,
                    (int)pcgc_attrs_int(k->a, "act")};
  return int_fits(k, {g->G, g->X, g->C, g->M, g->N});
}

static pcgc_status expert_bias_act(const pcgc__cukargs *k, const expert_geo *g, const float *b, int act, float *y) {
  int64_t total = g->G * g->X * g->C * g->N;
  if (total <= 0 || (!b && act == PCGC_ACT_NONE)) return PCGC_OK;
  expert_bias_act_kernel<<<pcgc__cu_blocks(total), PCGC_CU_THREADS, 0, k->cu->stream>>>(total, g->X, g->C, g->N, b,
                                                                                         act, y);
  return pcgc__cu_launched(k, "expert bias and activation");
}

/* y_g = x_g w for every group g: X products of [C, M] by [M, N] */
static pcgc_status expert_products(const pcgc__cukargs *k, const expert_geo *g, const float *x, const float *w,
                                   float *y) {
  for (int64_t gi = 0; gi < g->G; gi++)
    TRY(gemmb(k, false, false, g->C, g->N, g->M, 1, x + gi * g->X * g->C * g->M, g->M, g->C * g->M, w, g->N,
              g->M * g->N, 0, y + gi * g->X * g->C * g->N, g->N, g->C * g->N, g->X));
  return PCGC_OK;
}

pcgc_status pcgc__cu_fwd_expert_linear(const pcgc__cukargs *k) {
  expert_geo g;
  TRY(expert_check(k, false, &g));
  TRY(gemm_room(k, {gemm_elems(g.C, g.N, g.M, g.X)}));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  const float *b = g.bias ? (const float *)k->in[2].data : NULL;
  float *y = (float *)k->out[0].data;
  TRY(blas_ready(k));
  TRY(expert_products(k, &g, (const float *)k->in[0].data, (const float *)k->in[1].data, y));
  return expert_bias_act(k, &g, b, g.act, y);
}

pcgc_status pcgc__cu_bwd_expert_linear(const pcgc__cukargs *k) {
  expert_geo g;
  TRY(expert_check(k, true, &g));
  const float *x = (const float *)k->in[0].data, *w = (const float *)k->in[1].data;
  const float *b = g.bias ? (const float *)k->in[2].data : NULL;
  const float *y = (const float *)k->out[0].data, *dy = (const float *)k->dout[0].data;
  float *dx = (float *)k->din[0].data, *dw = (float *)k->din[1].data;
  float *db = g.bias ? (float *)k->din[2].data : NULL;
  float *dz = NULL;
  int64_t ny = g.G * g.X * g.C * g.N;
  if (g.act != PCGC_ACT_NONE && (dx || dw || db)) TRY(take(k, ny, &dz));
  TRY(gemm_room(k, {g.act == PCGC_ACT_GELU ? gemm_elems(g.C, g.N, g.M, g.X) : 0,
                    dx ? gemm_elems(g.C, g.M, g.N, g.X) : 0, dw ? gemm_elems(g.M, g.N, g.C, g.X) : 0}));
  if (pcgc__cu_measuring(k) || !(dx || dw || db)) return PCGC_OK;
  TRY(blas_ready(k));
  const float *dzp = dy;
  if (g.act != PCGC_ACT_NONE) {
    if (g.act == PCGC_ACT_GELU) { /* GELU' needs the pre-activation: recompute it */
      TRY(expert_products(k, &g, x, w, dz));
      TRY(expert_bias_act(k, &g, b, PCGC_ACT_NONE, dz));
    }
    TRY(act_bwd(k, g.act, ny, dy, y, dz));
    dzp = dz;
  }
  for (int64_t gi = 0; gi < g.G; gi++) {
    const float *xg = x + gi * g.X * g.C * g.M, *dzg = dzp + gi * g.X * g.C * g.N;
    if (dx) /* dx_e = dz_e w_e^T */
      TRY(gemmb(k, false, true, g.C, g.M, g.N, 1, dzg, g.N, g.C * g.N, w, g.N, g.M * g.N, 1,
                dx + gi * g.X * g.C * g.M, g.M, g.C * g.M, g.X));
    if (dw) /* dw_e += x_e^T dz_e */
      TRY(gemmb(k, true, false, g.M, g.N, g.C, 1, xg, g.M, g.C * g.M, dzg, g.N, g.C * g.N, 1, dw, g.N, g.M * g.N,
                g.X));
  }
  if (db) {
    expert_bias_grad_kernel<<<pcgc__cu_blocks(g.X * g.N), PCGC_CU_THREADS, 0, k->cu->stream>>>(g.G, g.X, g.C, g.N,
                                                                                                dzp, db);
    TRY(pcgc__cu_launched(k, "expert bias gradient"));
  }
  return PCGC_OK;
}
