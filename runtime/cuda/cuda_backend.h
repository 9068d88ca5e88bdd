/*
 * cuda_backend.h — the plain-C face of pcgc's CUDA backend.
 *
 * Nothing outside runtime/cuda/ includes a CUDA header: everything the rest
 * of pcgc needs from the GPU goes through functions declared here, which take
 * and return plain C types. The .cu files implement them with extern "C"
 * linkage. This header is only usable when the build found CUDA
 * (PCGC_HAVE_CUDA is defined for code that links pcgc_cuda).
 *
 * This header is the probe: it checks that the toolkit, cuBLAS, cuDNN and NCCL
 * load and that a kernel runs. The backend's kernels and memory are in
 * cuda_kernels.h; the runtime reaches them through runtime/backend.h.
 *
 * Example:
 *
 *     char report[2048];
 *     int rc = pcgc_cuda_probe(report, sizeof report);
 *     fputs(report, stdout);
 *     if (rc == PCGC_CUDA_ERR_NODEVICE) ... no GPU here: skip ...
 *
 * Functions return 0 (PCGC_CUDA_OK) or a negative pcgc_cuda_status; the
 * ones that take `err`/`err_n` leave a message there (err may be NULL).
 */
#ifndef PCGC_CUDA_BACKEND_H
#define PCGC_CUDA_BACKEND_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message): the one list of statuses and their messages. */
#define PCGC_CUDA_STATUS_LIST(X)                                              \
  X(OK, 0, "success")                                                         \
  X(ERR_NODEVICE, -1, "no usable CUDA device (none present, or no driver)")   \
  X(ERR_RUNTIME, -2, "CUDA runtime call failed")                              \
  X(ERR_CUBLAS, -3, "cuBLAS call failed")                                     \
  X(ERR_CUDNN, -4, "cuDNN call failed")                                       \
  X(ERR_NCCL, -5, "NCCL call failed")                                         \
  X(ERR_INVALID, -6, "invalid argument")                                      \
  X(ERR_NOMEM, -7, "out of memory")

typedef enum pcgc_cuda_status {
#define PCGC_CUDA__ENUM(name, value, msg) PCGC_CUDA_##name = value,
  PCGC_CUDA_STATUS_LIST(PCGC_CUDA__ENUM)
#undef PCGC_CUDA__ENUM
} pcgc_cuda_status;

/* A static message for a pcgc_cuda_status; "unknown status" otherwise. */
const char *pcgc_cuda_strerror(int status);

/* Number of CUDA devices (>= 0), or a negative status when the runtime cannot
 * tell (e.g. no driver), with cudaGetErrorString's text in err. */
int pcgc_cuda_device_count(char *err, size_t err_n);

/* y[i] = a * x[i] + y[i] for i < n, on device 0. x and y are host arrays:
 * the function allocates device buffers, copies, launches the kernel, copies
 * y back and frees. A test of the toolchain, not a fast path. */
int pcgc_cuda_axpy(size_t n, float a, const float *x, float *y,
                   char *err, size_t err_n);

/* Writes a human-readable report to buf (always NUL-terminated when n > 0):
 * CUDA runtime and driver versions, cuBLAS, cuDNN (header and library), NCCL,
 * and the devices. When a device is present it also creates and destroys a
 * cuBLAS and a cuDNN handle on device 0. Returns 0 when all of that worked,
 * PCGC_CUDA_ERR_NODEVICE when there is no GPU, or another negative status. */
int pcgc_cuda_probe(char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* PCGC_CUDA_BACKEND_H */
