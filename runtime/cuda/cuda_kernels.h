/*
 * cuda_kernels.h — the CUDA backend's kernels and device memory, in plain C.
 *
 * The same contract as the CPU kernels (runtime/cpu/kernels.h), on device
 * memory: a pcgc_buf's `data` is a device pointer; forward writes every
 * output; backward ADDS each input's gradient into din[i] (skipped where
 * din[i].data == NULL); a kernel on a piece uses pcgc_kernel_ctx exactly as
 * the CPU kernel does (embedding row offsets, logical means, dropout masks
 * drawn from logical indices with the same counter-based generator, causal
 * attention by logical positions). Floating-point tensors are F32; indices
 * I32 or I64. Any other dtype is refused with a message naming the operator.
 *
 * Everything runs in order on the context's one stream. No call allocates
 * device memory once pcgc_cuda_freeze() has been called: kernels take their
 * temporary memory from the context's workspace, which grows (only) before
 * that, so the runtime runs every instruction once in a measuring pass
 * (pcgc_cuda_measure) and freezes before the first step.
 *
 *     pcgc_cuda *cu = pcgc_cuda_open(0, &err);
 *     float *x = pcgc_cuda_alloc(cu, n * 4, &err);
 *     pcgc_cuda_upload(cu, x, host, n * 4, &err);
 *     pcgc_cuda_forward(cu, PCGC_OP_RELU, &attrs, 1, &in, 1, &out, NULL, &err);
 *     pcgc_cuda_download(cu, host, y, n * 4, &err);  // waits for the stream
 *     pcgc_cuda_close(cu);
 */
#ifndef PCGC_CUDA_KERNELS_H
#define PCGC_CUDA_KERNELS_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pcgc_cuda pcgc_cuda;

/* Opens device `device` (cudaSetDevice), creates its stream, cuBLAS and
 * cuDNN handles. NULL with a message when there is no such device. */
pcgc_cuda *pcgc_cuda_open(int device, pcgc_error *err);
void pcgc_cuda_close(pcgc_cuda *cu);
/* "NVIDIA H100 80GB HBM3 (device 0, sm_90, 79.2 GiB)" */
const char *pcgc_cuda_describe(const pcgc_cuda *cu);

/* ------------------------------------------------------------ memory */
void *pcgc_cuda_alloc(pcgc_cuda *cu, size_t bytes, pcgc_error *err);  /* 256-byte aligned */
void pcgc_cuda_free(pcgc_cuda *cu, void *p);
pcgc_status pcgc_cuda_zero(pcgc_cuda *cu, void *p, size_t bytes, pcgc_error *err);
/* buffers p[0 .. n) of bytes[i] each cleared, PCGC_CUDA_ZERO_MAX per kernel launch */
#define PCGC_CUDA_ZERO_MAX 32
pcgc_status pcgc_cuda_zero_list(pcgc_cuda *cu, int n, void *const *p, const size_t *bytes, pcgc_error *err);
pcgc_status pcgc_cuda_upload(pcgc_cuda *cu, void *dev, const void *host, size_t bytes, pcgc_error *err);
/* Waits for the stream, then copies: the host sees every earlier kernel's result. */
pcgc_status pcgc_cuda_download(pcgc_cuda *cu, void *host, const void *dev, size_t bytes, pcgc_error *err);
pcgc_status pcgc_cuda_sync(pcgc_cuda *cu, pcgc_error *err);
/* dst (+)= src over the box (lo, len) of a logical tensor of `rank` dims;
 * dst and src are row-major blocks of dims ddims/sdims starting at logical
 * index doff/soff; dst's elements of type t, src's of st. Types differ only
 * between F32 and BF16 (converted, to nearest even). add: F32, F64, BF16
 * (summed in f32). */
pcgc_status pcgc_cuda_move(pcgc_cuda *cu, pcgc_dtype t, pcgc_dtype st, int rank, void *dst, const int64_t *ddims,
                           const int64_t *doff, const void *src, const int64_t *sdims, const int64_t *soff,
                           const int64_t *lo, const int64_t *len, bool add, pcgc_error *err);

/* One box of pcgc_cuda_move_list: as pcgc_cuda_move's arguments, dst and
 * src both of type t, set, or added where `add` (F32 only). */
typedef struct pcgc_cuda_box_move {
  pcgc_dtype t;
  int rank;
  void *dst;
  const void *src;
  const int64_t *ddims, *doff, *sdims, *soff, *lo, *len;
  bool add;
} pcgc_cuda_box_move;
/* The most boxes one launch of pcgc_cuda_move_list moves. */
#define PCGC_CUDA_MOVE_MAX 32
/* Moves boxes m[0 .. n) in one launch per PCGC_CUDA_MOVE_MAX of them. */
pcgc_status pcgc_cuda_move_list(pcgc_cuda *cu, int n, const pcgc_cuda_box_move *m, pcgc_error *err);

/* ---------------------------------------------------------- workspace
 * measure(true): following kernel calls only record the workspace they would
 * take (nothing runs); measure(false) grows the workspace to the largest
 * recorded need. freeze(): from now on a kernel that needs more fails
 * instead of allocating. */
void pcgc_cuda_measure(pcgc_cuda *cu, bool on);
pcgc_status pcgc_cuda_reserve(pcgc_cuda *cu, pcgc_error *err); /* grows to the recorded need */
void pcgc_cuda_freeze(pcgc_cuda *cu);
size_t pcgc_cuda_workspace_bytes(const pcgc_cuda *cu);

/* ----------------------------------------------------------- kernels */
pcgc_status pcgc_cuda_forward(pcgc_cuda *cu, pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_buf *in,
                              int n_out, pcgc_buf *out, const pcgc_kernel_ctx *ctx, pcgc_error *err);
pcgc_status pcgc_cuda_backward(pcgc_cuda *cu, pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_buf *in,
                               int n_out, const pcgc_buf *out, const pcgc_buf *dout, pcgc_buf *din,
                               const pcgc_kernel_ctx *ctx, pcgc_error *err);

/* Batch norm over a sharded batch (act=relu fused as backend.h says), as
 * kernels.h's split entry points, with
 * the statistics in device memory (f64): s[0,C) sum, s[C,2C) sumsq,
 * s[2C,3C) dsum, s[3C,4C) dxsum; C = x's dims[1]. stats and bwd_stats ADD
 * this piece's sums into s. */
pcgc_status pcgc_cuda_batchnorm_stats(pcgc_cuda *cu, const pcgc_buf *x, double *s, pcgc_error *err);
pcgc_status pcgc_cuda_batchnorm_apply(pcgc_cuda *cu, const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *scale,
                                      const pcgc_buf *bias, const double *s, double count, pcgc_buf *y,
                                      pcgc_error *err);
pcgc_status pcgc_cuda_batchnorm_bwd_stats(pcgc_cuda *cu, const pcgc_attrs *a, const pcgc_buf *x,
                                          const pcgc_buf *scale, const pcgc_buf *bias, const pcgc_buf *dy, double *s,
                                          double count, pcgc_error *err);
pcgc_status pcgc_cuda_batchnorm_bwd_apply(pcgc_cuda *cu, const pcgc_attrs *a, const pcgc_buf *x,
                                          const pcgc_buf *scale, const pcgc_buf *bias, const pcgc_buf *dy,
                                          const double *s, double count, pcgc_buf *dx, pcgc_buf *dscale,
                                          pcgc_buf *dbias, pcgc_error *err);

/* One optimizer update, pcgc_cpu_optimizer_step's semantics (m, v may be NULL). */
pcgc_status pcgc_cuda_optimizer_step(pcgc_cuda *cu, const pcgc_optimizer *o, pcgc_buf *w, const pcgc_buf *g,
                                     pcgc_buf *m, pcgc_buf *v, int64_t step, pcgc_error *err);

/* -------------------------------------------------------- precision
 * The arithmetic of GEMMs (linear, matmul, batch matmul, attention's
 * products) and convolutions. F32 (default): plain f32, results match the CPU
 * to rounding. TF32: tensor cores with TF32 inputs, f32 accumulation and
 * storage. BF16: operands rounded to bf16, products accumulated in f32, f32
 * results; every other kernel, the weights and the optimizer state stay f32. */
typedef enum pcgc_cuda_math { PCGC_CUDA_MATH_F32, PCGC_CUDA_MATH_TF32, PCGC_CUDA_MATH_BF16 } pcgc_cuda_math;
void pcgc_cuda_set_math(pcgc_cuda *cu, pcgc_cuda_math m);

/* ------------------------------------------------------------- NCCL
 * Communicators are bootstrapped by the caller: one member makes the id
 * (pcgc_cuda_comm_id), the caller sends its PCGC_CUDA_COMM_ID_BYTES bytes to
 * the other members (over MPI), and every member opens the communicator with
 * its rank in it (a collective call: it returns when all members joined).
 * Each communicator has its own stream; every operation on it is queued
 * there after the compute stream's work so far (an event), so the
 * operations of one communicator run in the order they were issued, which
 * the runtime keeps the same on every member. Blocking operations make the
 * compute stream wait for their end; a send never holds the compute stream
 * (its buffer must stay untouched until pcgc_cuda_sync, which also waits for
 * every communicator's stream). Sums in place; F32, F64, I32, I64. */
#define PCGC_CUDA_COMM_ID_BYTES 128
typedef struct pcgc_cuda_comm pcgc_cuda_comm;
pcgc_status pcgc_cuda_comm_id(void *id, pcgc_error *err);
pcgc_status pcgc_cuda_comm_open(pcgc_cuda *cu, const void *id, int n, int rank, pcgc_cuda_comm **out,
                                pcgc_error *err);
void pcgc_cuda_comm_close(pcgc_cuda *cu, pcgc_cuda_comm *c);
/* n non-blocking all-reduce slots (events), made once before the first step */
pcgc_status pcgc_cuda_comm_slots(pcgc_cuda *cu, int n, pcgc_error *err);
pcgc_status pcgc_cuda_allreduce(pcgc_cuda *cu, pcgc_cuda_comm *c, void *buf, int64_t n, pcgc_dtype t, pcgc_error *err);
/* the same without the compute stream waiting: slot's event marks the end */
pcgc_status pcgc_cuda_allreduce_start(pcgc_cuda *cu, pcgc_cuda_comm *c, void *buf, int64_t n, pcgc_dtype t, int slot,
                                      pcgc_error *err);
/* A non-blocking reduce-scatter (slot as allreduce_start's): buf holds
 * n = c's size slabs, member j's counts[j] elements after those of the
 * members before it; out (this member's own slab of buf: in place, its
 * other slabs then undefined; or a buffer of its own) receives the
 * members' sum of this member's slab. Equal slabs: one ncclReduceScatter;
 * uneven ones: a group of ncclReduce, slab j to member j. */
pcgc_status pcgc_cuda_reduce_scatter_start(pcgc_cuda *cu, pcgc_cuda_comm *c, void *buf, void *out,
                                           const int64_t *counts, pcgc_dtype t, int slot, pcgc_error *err);
/* the compute stream waits for slot's all-reduce */
pcgc_status pcgc_cuda_comm_wait(pcgc_cuda *cu, int slot, pcgc_error *err);
pcgc_status pcgc_cuda_broadcast(pcgc_cuda *cu, pcgc_cuda_comm *c, void *buf, int64_t n, pcgc_dtype t, int root,
                                pcgc_error *err);
/* the sum of every member's buf into root's buf */
pcgc_status pcgc_cuda_reduce(pcgc_cuda *cu, pcgc_cuda_comm *c, void *buf, int64_t n, pcgc_dtype t, int root,
                             pcgc_error *err);
/* point to point: peer is a rank of c (the runtime opens one two-member
 * communicator per direction, so a direction's messages keep their order) */
/* Records slot `slot` (pcgc_cuda_comm_slots) at the end of what c's stream
 * has been given so far (a send just issued), so that pcgc_cuda_comm_wait on
 * it makes the compute stream wait for that send alone. */
pcgc_status pcgc_cuda_send_mark(pcgc_cuda *cu, pcgc_cuda_comm *c, int slot, pcgc_error *err);
pcgc_status pcgc_cuda_send(pcgc_cuda *cu, pcgc_cuda_comm *c, const void *buf, int64_t n, pcgc_dtype t, int peer,
                           pcgc_error *err);
pcgc_status pcgc_cuda_recv(pcgc_cuda *cu, pcgc_cuda_comm *c, void *buf, int64_t n, pcgc_dtype t, int peer,
                           pcgc_error *err);

#ifdef __cplusplus
}
#endif
#endif
