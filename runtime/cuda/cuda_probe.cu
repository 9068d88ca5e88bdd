/*
 * cuda_probe.cu — the smallest real kernel pcgc ships: y = a*x + y.
 *
 * It proves that nvcc, the chosen architecture (CMAKE_CUDA_ARCHITECTURES) and
 * the CUDA runtime work together: device buffers are allocated, filled, the
 * kernel runs as a grid-stride loop (any n, bounded grid), and the result is
 * copied back. Exposed to C through cuda_backend.h.
 */
#include <cuda_runtime.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda_backend.h"

__global__ void pcgc_axpy_kernel(size_t n, float a, const float *__restrict__ x,
                                 float *__restrict__ y) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = a * x[i] + y[i];
}

static void set_err(char *err, size_t err_n, const char *fmt, ...) {
  if (err == NULL || err_n == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_n, fmt, ap);
  va_end(ap);
}

static int status_of(cudaError_t e) {
  switch (e) {
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver:
    return PCGC_CUDA_ERR_NODEVICE;
  case cudaErrorMemoryAllocation:
    return PCGC_CUDA_ERR_NOMEM;
  default:
    return PCGC_CUDA_ERR_RUNTIME;
  }
}

extern "C" int pcgc_cuda_axpy(size_t n, float a, const float *x, float *y,
                              char *err, size_t err_n) {
  const int threads = 256;
  const size_t max_blocks = 65535;
  float *dx = NULL, *dy = NULL;
  const char *what = NULL;
  cudaError_t e = cudaSuccess;
  size_t bytes, blocks;

  if (n == 0) return PCGC_CUDA_OK;
  if (x == NULL || y == NULL || n > SIZE_MAX / sizeof(float)) {
    set_err(err, err_n, "pcgc_cuda_axpy: invalid argument");
    return PCGC_CUDA_ERR_INVALID;
  }
  bytes = n * sizeof(float);
  blocks = (n + threads - 1) / threads;
  if (blocks > max_blocks) blocks = max_blocks;

  what = "cudaMalloc(x)";
  if ((e = cudaMalloc((void **)&dx, bytes)) != cudaSuccess) goto fail;
  what = "cudaMalloc(y)";
  if ((e = cudaMalloc((void **)&dy, bytes)) != cudaSuccess) goto fail;
  what = "cudaMemcpy(x, host to device)";
  if ((e = cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice)) != cudaSuccess) goto fail;
  what = "cudaMemcpy(y, host to device)";
  if ((e = cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice)) != cudaSuccess) goto fail;
  pcgc_axpy_kernel<<<(unsigned)blocks, threads>>>(n, a, dx, dy);
  what = "kernel launch";
  if ((e = cudaGetLastError()) != cudaSuccess) goto fail;
  what = "cudaMemcpy(y, device to host)";  /* synchronises with the kernel */
  if ((e = cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost)) != cudaSuccess) goto fail;
  cudaFree(dy);
  cudaFree(dx);
  return PCGC_CUDA_OK;

fail:
  set_err(err, err_n, "%s: %s", what, cudaGetErrorString(e));
  cudaFree(dy);  /* cudaFree(NULL) is a no-op */
  cudaFree(dx);
  return status_of(e);
}
