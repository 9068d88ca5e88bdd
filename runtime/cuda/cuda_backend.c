/*
 * cuda_backend.c — probing the CUDA stack from plain C.
 *
 * Library versions are read first, since they need no GPU: a machine with the
 * toolkit but no device (a build box, CI) still gets a useful report. Only
 * with a device are the cuBLAS and cuDNN handles created, which is where a
 * broken driver/library combination shows up.
 */
#include "cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include <stdarg.h>
#include <stdio.h>

const char *pcgc_cuda_strerror(int status) {
  switch (status) {
#define PCGC_CUDA__MSG(name, value, msg) \
  case PCGC_CUDA_##name:                 \
    return msg;
    PCGC_CUDA_STATUS_LIST(PCGC_CUDA__MSG)
#undef PCGC_CUDA__MSG
  default:
    return "unknown status";
  }
}

int pcgc_cuda_device_count(char *err, size_t err_n) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (err != NULL && err_n > 0)
      snprintf(err, err_n, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
               ? PCGC_CUDA_ERR_NODEVICE
               : PCGC_CUDA_ERR_RUNTIME;
  }
  return count;
}

/* A bounded string builder: appends with snprintf semantics, never overflows,
 * keeps buf NUL-terminated. */
typedef struct report {
  char *buf;
  size_t n, len;
} report;

static void appendf(report *r, const char *fmt, ...) {
  va_list ap;
  int w;
  if (r->n == 0 || r->len >= r->n - 1) return;
  va_start(ap, fmt);
  w = vsnprintf(r->buf + r->len, r->n - r->len, fmt, ap);
  va_end(ap);
  if (w < 0) return;
  r->len += (size_t)w;
  if (r->len > r->n - 1) r->len = r->n - 1;
}

/* CUDA encodes versions as 1000*major + 10*minor (13000 = 13.0). */
static void append_cuda_version(report *r, const char *what, int v) {
  if (v == 0)
    appendf(r, "%s none", what);
  else
    appendf(r, "%s %d.%d", what, v / 1000, (v % 1000) / 10);
}

static int probe_handles(report *r) {
  cublasHandle_t blas = NULL;
  cudnnHandle_t dnn = NULL;
  cublasStatus_t bs;
  cudnnStatus_t ds;
  int v = 0;

  if (cudaSetDevice(0) != cudaSuccess) {
    appendf(r, "cudaSetDevice(0) failed\n");
    return PCGC_CUDA_ERR_RUNTIME;
  }
  bs = cublasCreate(&blas);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    appendf(r, "cublasCreate: %s\n", cublasGetStatusString(bs));
    return PCGC_CUDA_ERR_CUBLAS;
  }
  cublasGetVersion(blas, &v);
  appendf(r, "cuBLAS handle: ok (version %d)\n", v);
  cublasDestroy(blas);

  ds = cudnnCreate(&dnn);
  if (ds != CUDNN_STATUS_SUCCESS) {
    appendf(r, "cudnnCreate: %s\n", cudnnGetErrorString(ds));
    return PCGC_CUDA_ERR_CUDNN;
  }
  appendf(r, "cuDNN handle: ok\n");
  cudnnDestroy(dnn);
  return PCGC_CUDA_OK;
}

int pcgc_cuda_probe(char *buf, size_t n) {
  report r = {buf, n, 0};
  int rt = 0, drv = 0, nccl = 0, count = 0;
  int bmaj = 0, bmin = 0, bpatch = 0;
  size_t dnn = cudnnGetVersion();
  cudaError_t e;

  if (n > 0) buf[0] = '\0';

  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv); /* 0 when no driver is installed */
  append_cuda_version(&r, "CUDA runtime", rt);
  append_cuda_version(&r, ", driver", drv);
  appendf(&r, "\n");

  cublasGetProperty(MAJOR_VERSION, &bmaj);
  cublasGetProperty(MINOR_VERSION, &bmin);
  cublasGetProperty(PATCH_LEVEL, &bpatch);
  appendf(&r, "cuBLAS %d.%d.%d\n", bmaj, bmin, bpatch);

  appendf(&r, "cuDNN header %d, library %zu\n", CUDNN_VERSION, dnn);

  if (ncclGetVersion(&nccl) == ncclSuccess)
    appendf(&r, "NCCL header %d, library %d\n", NCCL_VERSION_CODE, nccl);
  else
    appendf(&r, "NCCL header %d, library: ncclGetVersion failed\n", NCCL_VERSION_CODE);

  e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    appendf(&r, "devices: none (cudaGetDeviceCount: %s)\n", cudaGetErrorString(e));
    return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
               ? PCGC_CUDA_ERR_NODEVICE
               : PCGC_CUDA_ERR_RUNTIME;
  }
  appendf(&r, "devices: %d\n", count);
  if (count == 0) return PCGC_CUDA_ERR_NODEVICE;
  for (int i = 0; i < count; i++) {
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
      appendf(&r, "  device %d: cudaGetDeviceProperties failed\n", i);
      continue;
    }
    appendf(&r, "  device %d: %s, sm_%d%d, %.1f GiB, %d SMs\n", i, p.name, p.major,
            p.minor, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
            p.multiProcessorCount);
  }
  return probe_handles(&r);
}
