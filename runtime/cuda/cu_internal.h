/*
 * cu_internal.h — what the .cu files of the CUDA backend share (C++ only):
 * the context, the kernel argument bundle, one forward and one backward
 * function per ops.def family, the workspace, error helpers, the device
 * copy of the counter-based generator and launch helpers.
 *
 * Rules for a family function (pcgc__cu_fwd_<fn>, pcgc__cu_bwd_<fn>):
 *   1. validate arguments (dtypes, shapes) and fail with pcgc__kfail;
 *   2. take every temporary it needs with pcgc__cu_scratch (all of them,
 *      before anything runs);
 *   3. if pcgc__cu_measuring(k): return PCGC_OK — the dispatcher calls every
 *      family twice, first measuring the workspace, then for real;
 *   4. launch on k->cu->stream (cuBLAS and cuDNN handles are bound to it);
 *      never cudaMalloc, never synchronise.
 */
#ifndef PCGC_CU_INTERNAL_H
#define PCGC_CU_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdint.h>

#include "cuda_kernels.h"
#include "kernels_internal.h"

struct pcgc_cuda {
  int device;
  cudaStream_t stream;   /* the compute stream: kernels, copies, blocking receives */
  int math;              /* pcgc_cuda_math of GEMMs and convolutions (default F32) */
  void *gemm_room;       /* BF16: the running family's workspace for bf16 GEMM operands (cu_dense.cu) */
  int64_t gemm_room_n;   /* its size in bf16 elements */
  cudaEvent_t *slot_done;/* per non-blocking all-reduce slot: its end (pcgc_cuda_comm_slots) */
  int n_slots;
  struct pcgc_cuda_comm **comms; /* every open communicator (each has its own stream), for sync */
  int n_comms, cap_comms;
  cublasHandle_t blas;
  cudnnHandle_t dnn;
  char *ws;              /* workspace */
  void *blas_ws;         /* cuBLAS's workspace, ours (allocated at open, not by cuBLAS in a step) */
  size_t ws_cap, ws_used, ws_need;
  bool measuring, frozen;
  char desc[256];
};

/* The CPU kernels' argument bundle (kernels_internal.h) and the context:
 * a pcgc__cukargs is a pcgc__kargs, so the checks and geometry that the
 * CPU kernels share with these (k_check.h, k_dense_check.h), the error
 * helpers pcgc__kfail/pcgc__kfail_st and the pieces pcgc__in_piece/
 * pcgc__out_piece take it as it is. */
struct pcgc__cukargs : pcgc__kargs {
  pcgc_cuda *cu;
};

#define PCGC_OP(id, name, fn, min_in, max_in, n_out, schema) \
  pcgc_status pcgc__cu_fwd_##fn(const pcgc__cukargs *k);     \
  pcgc_status pcgc__cu_bwd_##fn(const pcgc__cukargs *k);
#include "ops.def"
#undef PCGC_OP

/* A temporary of `bytes` (256-byte aligned) valid until the family function
 * returns; NULL while measuring. Fails (NULL and a message in k->err, status
 * PCGC_ERR_NOMEM) only when the workspace is frozen and too small. */
void *pcgc__cu_scratch(const pcgc__cukargs *k, size_t bytes);
static inline bool pcgc__cu_measuring(const pcgc__cukargs *k) { return k->cu->measuring; }

/* "op: message" into k->err: pcgc__kfail (status PCGC_ERR_INVALID) and
 * pcgc__kfail_st (kernels_internal.h). */
/* Checks after a launch or library call: PCGC_OK, or "op: what: <library's message>". */
pcgc_status pcgc__cu_check(const pcgc__cukargs *k, cudaError_t e, const char *what);
pcgc_status pcgc__cu_check_blas(const pcgc__cukargs *k, cublasStatus_t s, const char *what);
pcgc_status pcgc__cu_check_dnn(const pcgc__cukargs *k, cudnnStatus_t s, const char *what);
/* The last launch's error (cudaGetLastError) as above. */
static inline pcgc_status pcgc__cu_launched(const pcgc__cukargs *k, const char *what) {
  return pcgc__cu_check(k, cudaGetLastError(), what);
}

/* cu_comm.cu, for cu_core.cu: pcgc_cuda_sync while communicators are open
 * (every stream, aborting a communicator NCCL reports failed), and
 * pcgc_cuda_close's teardown of the communicators and all-reduce slots. */
pcgc_status pcgc__cu_comm_sync(pcgc_cuda *cu, pcgc_error *err);
void pcgc__cu_comm_close_all(pcgc_cuda *cu);

/* Grid for a grid-stride loop over n elements (256 threads per block). */
static inline unsigned pcgc__cu_blocks(int64_t n) {
  int64_t b = (n + 255) / 256;
  return (unsigned)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}
#define PCGC_CU_THREADS 256

/* The CPU's counter-based generator (kernels_internal.h), bit for bit. */
__host__ __device__ static inline uint64_t pcgc__curng_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
__host__ __device__ static inline uint64_t pcgc__curng_key(uint64_t seed, uint64_t stream) {
  return pcgc__curng_mix(pcgc__curng_mix(seed + 0x9e3779b97f4a7c15ULL) ^ (stream + 0x6a09e667f3bcc909ULL));
}
__host__ __device__ static inline uint64_t pcgc__curng_u64_at(uint64_t key, uint64_t counter) {
  return pcgc__curng_mix(key ^ (counter * 0x9e3779b97f4a7c15ULL + 0xbb67ae8584caa73bULL));
}
/* keep element c iff pcgc__curng_u64_at(key, c) >> 11 >= threshold, with
 * threshold = pcgc__rng_threshold(p) (kernels_internal.h; on the host). */

#endif
