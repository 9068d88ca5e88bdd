/*
 * backend.h — what differs between the runtime's backends: kernels, memory
 * and where communication buffers live. The step loop (exec.c), its buffer
 * plan, schedules, recomputation, checkpoints, data and fault handling are
 * shared; a backend only supplies the operations below on its memory.
 *
 *   - cpu: buffers are host memory, kernels are runtime/cpu's (OpenBLAS);
 *   - cuda: buffers are device memory of one GPU, kernels are runtime/cuda's
 *     (cuBLAS, cuDNN, our own), all on one stream; MPI messages go through
 *     host staging (download before a send or collective, upload after).
 *
 *     pcgc_backend be;
 *     if (pcgc_backend_open(&be, "cuda", local_rank, &err) != PCGC_OK) ...;
 *     o.backend = &be;            // pcgc_run_options
 *     pcgc_run(g, p, &o, &r, &err);
 *     pcgc_backend_close(&be);
 */
#ifndef PCGC_RUNTIME_BACKEND_H
#define PCGC_RUNTIME_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "codegen.h"
#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pcgc_backend pcgc_backend;
struct pcgc_backend {
  const char *name;       /* "cpu", "cuda" */
  bool host;              /* buffers are host memory: no copies around MPI */
  void *ctx;
  char desc[256];         /* "CPU (OpenBLAS)", "NVIDIA H100 ... (device 0, ...)" */
  void *(*alloc)(pcgc_backend *b, size_t bytes, pcgc_error *err);
  void (*release)(pcgc_backend *b, void *p);
  pcgc_status (*zero)(pcgc_backend *b, void *p, size_t bytes, pcgc_error *err);
  /* buffers p[0 .. n) cleared at once (one launch); NULL: zero() each */
  pcgc_status (*zero_list)(pcgc_backend *b, int n, void *const *p, const size_t *bytes, pcgc_error *err);
  pcgc_status (*upload)(pcgc_backend *b, void *dst, const void *host, size_t bytes, pcgc_error *err);
  /* waits for every earlier operation */
  pcgc_status (*download)(pcgc_backend *b, void *host, const void *src, size_t bytes, pcgc_error *err);
  /* dst (+)= src over box x, both described by their place in the logical
   * tensor; their dtypes may differ between f32 and bf16 (converted to
   * nearest even; a bf16 sum is taken in f32) */
  pcgc_status (*move)(pcgc_backend *b, const pcgc_plan_buf *D, void *dd, const pcgc_plan_buf *S, const void *sd,
                      const pcgc_box *x, bool add, pcgc_error *err);
  /* dst[i] = src[i] (+= where add[i]; add NULL: none) over box x[i] for
   * i < n (at most PCGC_PACK_MAX), each pair of one dtype, adding only f32,
   * in one launch: a packed run of sends, an unpacked run of receives
   * (exec.c). NULL: move() each */
  pcgc_status (*move_list)(pcgc_backend *b, int n, const pcgc_plan_buf *D, void *const *dd,
                           const pcgc_plan_buf *const *S, const void *const *sd, const pcgc_box *x, const bool *add,
                           pcgc_error *err);
  pcgc_status (*forward)(pcgc_backend *b, pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_buf *in,
                         int n_out, pcgc_buf *out, const pcgc_kernel_ctx *ctx, pcgc_error *err);
  pcgc_status (*backward)(pcgc_backend *b, pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_buf *in,
                          int n_out, const pcgc_buf *out, const pcgc_buf *dout, pcgc_buf *din,
                          const pcgc_kernel_ctx *ctx, pcgc_error *err);
  /* sharded batch norm: s = [sum, sumsq, dsum, dxsum] of C doubles each, in
   * the backend's memory; the stats steps add this piece's sums into s. With
   * act=relu (a fused batchnorm + relu) apply writes max(y, 0) and the backward
   * steps take dy where the normalised x * scale + bias is positive, 0 elsewhere
   * (recomputed from x, s, scale and bias: no output is read) */
  pcgc_status (*bn_stats)(pcgc_backend *b, const pcgc_buf *x, double *s, pcgc_error *err);
  pcgc_status (*bn_apply)(pcgc_backend *b, const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *scale,
                          const pcgc_buf *bias, const double *s, double count, pcgc_buf *y, pcgc_error *err);
  pcgc_status (*bn_bwd_stats)(pcgc_backend *b, const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *scale,
                              const pcgc_buf *bias, const pcgc_buf *dy, double *s, double count, pcgc_error *err);
  pcgc_status (*bn_bwd_apply)(pcgc_backend *b, const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *scale,
                              const pcgc_buf *bias, const pcgc_buf *dy, const double *s, double count, pcgc_buf *dx,
                              pcgc_buf *dscale, pcgc_buf *dbias, pcgc_error *err);
  pcgc_status (*update)(pcgc_backend *b, const pcgc_optimizer *o, pcgc_buf *w, const pcgc_buf *g, pcgc_buf *m,
                        pcgc_buf *v, int64_t step, pcgc_error *err);
  /* Kernel workspace (NULL where a backend needs none): measure(true), every
   * kernel of the program called once, measure(false) sizes the workspace,
   * freeze() forbids growing it (the step loop allocates nothing). */
  void (*measure)(pcgc_backend *b, bool on);
  pcgc_status (*reserve)(pcgc_backend *b, pcgc_error *err);
  void (*freeze)(pcgc_backend *b);
  size_t (*workspace)(const pcgc_backend *b);
  pcgc_status (*sync)(pcgc_backend *b, pcgc_error *err);
  void (*close)(pcgc_backend *b);

  /* Arithmetic of GEMMs and convolutions: "f32", "tf32", "bf16" (NULL: f32 only). */
  pcgc_status (*set_precision)(pcgc_backend *b, const char *precision, pcgc_error *err);

  /* Communication on the backend's own memory (NULL: the runtime stages
   * messages through host MPI). Communicators: one member makes the id
   * (comm_id_bytes long), the runtime sends it to the others over MPI,
   * every member opens it. The semantics are cuda_kernels.h's NCCL section;
   * a send's buffer stays untouched until sync. */
  size_t comm_id_bytes;
  pcgc_status (*comm_id)(pcgc_backend *b, void *id, pcgc_error *err);
  pcgc_status (*comm_open)(pcgc_backend *b, const void *id, int n, int rank, void **comm, pcgc_error *err);
  void (*comm_close)(pcgc_backend *b, void *comm);
  pcgc_status (*comm_slots)(pcgc_backend *b, int n, pcgc_error *err);
  pcgc_status (*allreduce)(pcgc_backend *b, void *comm, void *buf, int64_t n, pcgc_dtype t, pcgc_error *err);
  pcgc_status (*allreduce_start)(pcgc_backend *b, void *comm, void *buf, int64_t n, pcgc_dtype t, int slot,
                                 pcgc_error *err);
  /* non-blocking: buf is the members' slabs (counts[j] elements of member j, in order); out
   * receives this member's sum (out = its own slab of buf: in place, the others left undefined) */
  pcgc_status (*reduce_scatter_start)(pcgc_backend *b, void *comm, void *buf, void *out, const int64_t *counts,
                                      pcgc_dtype t, int slot, pcgc_error *err);
  pcgc_status (*comm_wait)(pcgc_backend *b, int slot, pcgc_error *err);
  pcgc_status (*broadcast)(pcgc_backend *b, void *comm, void *buf, int64_t n, pcgc_dtype t, int root, pcgc_error *err);
  pcgc_status (*reduce)(pcgc_backend *b, void *comm, void *buf, int64_t n, pcgc_dtype t, int root, pcgc_error *err);
  pcgc_status (*send)(pcgc_backend *b, void *comm, const void *buf, int64_t n, pcgc_dtype t, int peer,
                      pcgc_error *err);
  pcgc_status (*recv)(pcgc_backend *b, void *comm, void *buf, int64_t n, pcgc_dtype t, int peer, pcgc_error *err);
  /* Marks slot `slot` (of comm_slots) at the end of the send just issued on
   * comm: comm_wait(slot) then waits for that send alone, before its buffer
   * is written again. */
  pcgc_status (*send_mark)(pcgc_backend *b, void *comm, int slot, pcgc_error *err);
};

/* name "cpu" or "cuda"; device: the GPU of this process (cuda). Errors: an
 * unknown name, a pcgc built without CUDA, no usable GPU (each with a hint). */
pcgc_status pcgc_backend_open(pcgc_backend *b, const char *name, int device, pcgc_error *err);
void pcgc_backend_close(pcgc_backend *b);
/* How many devices of the backend this node has (cpu: 1), or a negative
 * status with a message (cuda: not built, no driver, no GPU). */
int pcgc_backend_devices(const char *name, pcgc_error *err);

/* Whether this build has the backend (cuda needs the toolkit at build time). */
bool pcgc_backend_built(const char *name);

/* dst (+)= src over box x in host memory (the CPU backend's move): the
 * runtime also uses it to stage whole tensors, checkpoints and data. */
void pcgc_box_move_host(const pcgc_plan_buf *D, void *dd, const pcgc_plan_buf *S, const void *sd, const pcgc_box *x,
                        bool add);

#ifdef __cplusplus
}
#endif
#endif
