/*
 * backend.c — the runtime's backends (backend.h): the CPU backend over
 * runtime/cpu, and the CUDA backend over runtime/cuda where the build has
 * it. This is the one place that tests PCGC_HAVE_CUDA.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#ifdef PCGC_HAVE_CUDA
#include "cuda_backend.h"
#include "cuda_kernels.h"
/* a packed run of sends or unpacked run of receives is one launch, as the prediction charges it */
_Static_assert(PCGC_CUDA_MOVE_MAX >= PCGC_PACK_MAX, "one move_list launch must hold a whole pack run");
#endif

/* One contiguous run of n elements: d (+)= s, converting between f32 and
 * bf16 where the two differ (a bf16 sum is taken in f32 and rounded). */
static void run_move(pcgc_dtype dt, char *dp, pcgc_dtype st, const char *sp, int64_t n, bool add) {
  if (dt == st && !add) {
    memcpy(dp, sp, (size_t)n * pcgc_dtype_size(dt));
  } else if (dt == PCGC_F64 && st == PCGC_F64) {
    double *a = (double *)dp;
    const double *b = (const double *)sp;
    for (int64_t i = 0; i < n; i++) a[i] += b[i];
  } else if (dt == PCGC_F32 && st == PCGC_F32) {
    float *a = (float *)dp;
    const float *b = (const float *)sp;
    for (int64_t i = 0; i < n; i++) a[i] += b[i];
  } else if (dt == PCGC_F32) { /* from bf16 */
    float *a = (float *)dp;
    const uint16_t *b = (const uint16_t *)sp;
    for (int64_t i = 0; i < n; i++) a[i] = (add ? a[i] : 0.0f) + pcgc_f32_from_bf16(b[i]);
  } else if (st == PCGC_F32) { /* bf16 from f32 */
    uint16_t *a = (uint16_t *)dp;
    const float *b = (const float *)sp;
    for (int64_t i = 0; i < n; i++) a[i] = pcgc_bf16_from_f32((add ? pcgc_f32_from_bf16(a[i]) : 0.0f) + b[i]);
  } else { /* bf16 += bf16 */
    uint16_t *a = (uint16_t *)dp;
    const uint16_t *b = (const uint16_t *)sp;
    for (int64_t i = 0; i < n; i++) a[i] = pcgc_bf16_from_f32(pcgc_f32_from_bf16(a[i]) + pcgc_f32_from_bf16(b[i]));
  }
}

void pcgc_box_move_host(const pcgc_plan_buf *D, void *dd_, const pcgc_plan_buf *S, const void *sd_, const pcgc_box *x,
                        bool add) {
  char *dd = dd_;
  const char *sd = sd_;
  int r = x->rank;
  size_t es = pcgc_dtype_size(D->dtype), ss = pcgc_dtype_size(S->dtype);
  int64_t inner = r ? x->len[r - 1] : 1, outer = 1;
  for (int d = 0; d + 1 < r; d++) outer *= x->len[d];
  int64_t idx[PCGC_MAX_RANK] = {0};
  for (int64_t o = 0; o < outer; o++) {
    int64_t di = 0, si = 0;
    for (int d = 0; d < r; d++) {
      int64_t at = x->lo[d] + (d + 1 < r ? idx[d] : 0);
      di = di * D->dims[d] + (at - D->offset[d]);
      si = si * S->dims[d] + (at - S->offset[d]);
    }
    run_move(D->dtype, dd + di * (int64_t)es, S->dtype, sd + si * (int64_t)ss, inner, add);
    for (int d = r - 2; d >= 0; d--) {
      if (++idx[d] < x->len[d]) break;
      idx[d] = 0;
    }
  }
}

/* ---------------------------------------------------------------- cpu */

static void *cpu_alloc(pcgc_backend *b, size_t bytes, pcgc_error *err) {
  (void)b;
  void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63 ? (bytes + 63) & ~(size_t)63 : 64);
  if (!p) pcgc_error_set(err, PCGC_ERR_NOMEM, "cannot allocate %.1f MiB", (double)bytes / (1 << 20));
  return p;
}
static void cpu_release(pcgc_backend *b, void *p) {
  (void)b;
  free(p);
}
static pcgc_status cpu_zero(pcgc_backend *b, void *p, size_t n, pcgc_error *err) {
  memset(p, 0, n);
  return PCGC_OK;
}
static pcgc_status cpu_copy(pcgc_backend *b, void *dst, const void *src, size_t n, pcgc_error *err) {
  if (dst != src) memcpy(dst, src, n);
  return PCGC_OK;
}
static pcgc_status cpu_move(pcgc_backend *b, const pcgc_plan_buf *D, void *dd, const pcgc_plan_buf *S, const void *sd,
                            const pcgc_box *x, bool add, pcgc_error *err) {
  pcgc_box_move_host(D, dd, S, sd, x, add);
  return PCGC_OK;
}
static pcgc_status cpu_forward(pcgc_backend *b, pcgc_op_kind k, const pcgc_attrs *a, int ni, const pcgc_buf *in,
                               int no, pcgc_buf *out, const pcgc_kernel_ctx *ctx, pcgc_error *err) {
  return pcgc_cpu_forward(k, a, ni, in, no, out, ctx, err);
}
static pcgc_status cpu_backward(pcgc_backend *b, pcgc_op_kind k, const pcgc_attrs *a, int ni, const pcgc_buf *in,
                                int no, const pcgc_buf *out, const pcgc_buf *dout, pcgc_buf *din,
                                const pcgc_kernel_ctx *ctx, pcgc_error *err) {
  return pcgc_cpu_backward(k, a, ni, in, no, out, dout, din, ctx, err);
}

#define BN_MAX 4096
static pcgc_status bn_check(const pcgc_buf *x, pcgc_error *err) {
  if (x->rank >= 2 && x->dims[1] <= BN_MAX) return PCGC_OK;
  return pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "batchnorm: more than %d channels per piece", BN_MAX);
}
static pcgc_status cpu_bn_stats(pcgc_backend *b, const pcgc_buf *x, double *s, pcgc_error *err) {
  double t1[BN_MAX], t2[BN_MAX];
  pcgc_status st = bn_check(x, err);
  if (st) return st;
  int64_t C = x->dims[1];
  pcgc_cpu_batchnorm_stats(x, t1, t2);
  for (int64_t c = 0; c < C; c++) {
    s[c] += t1[c];
    s[C + c] += t2[c];
  }
  return PCGC_OK;
}
static pcgc_status cpu_bn_apply(pcgc_backend *b, const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *sc,
                                const pcgc_buf *bi, const double *s, double count, pcgc_buf *y, pcgc_error *err) {
  pcgc_cpu_batchnorm_apply(a, x, sc, bi, s, s + x->dims[1], count, y);
  return PCGC_OK;
}
static pcgc_status cpu_bn_bwd_stats(pcgc_backend *b, const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *sc,
                                    const pcgc_buf *bi, const pcgc_buf *dy, double *s, double count, pcgc_error *err) {
  double t1[BN_MAX], t2[BN_MAX];
  pcgc_status st = bn_check(x, err);
  if (st) return st;
  int64_t C = x->dims[1];
  pcgc_cpu_batchnorm_bwd_stats(a, x, sc, bi, dy, s, s + C, count, t1, t2);
  for (int64_t c = 0; c < C; c++) {
    s[2 * C + c] += t1[c];
    s[3 * C + c] += t2[c];
  }
  return PCGC_OK;
}
static pcgc_status cpu_bn_bwd_apply(pcgc_backend *b, const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *sc,
                                    const pcgc_buf *bi, const pcgc_buf *dy, const double *s, double count,
                                    pcgc_buf *dx, pcgc_buf *dsc, pcgc_buf *dbi, pcgc_error *err) {
  int64_t C = x->dims[1];
  pcgc_cpu_batchnorm_bwd_apply(a, x, sc, bi, dy, s, s + C, count, s + 2 * C, s + 3 * C, dx, dsc, dbi);
  return PCGC_OK;
}
static pcgc_status cpu_update(pcgc_backend *b, const pcgc_optimizer *o, pcgc_buf *w, const pcgc_buf *g, pcgc_buf *m,
                              pcgc_buf *v, int64_t step, pcgc_error *err) {
  return pcgc_cpu_optimizer_step(o, w, g, m, v, step, err);
}
static pcgc_status cpu_sync(pcgc_backend *b, pcgc_error *err) { return PCGC_OK; }
static void cpu_close(pcgc_backend *b) {}

static void open_cpu(pcgc_backend *b) {
  b->name = "cpu";
  b->host = true;
  snprintf(b->desc, sizeof b->desc, "CPU (OpenBLAS)");
  b->alloc = cpu_alloc;
  b->release = cpu_release;
  b->zero = cpu_zero;
  b->upload = cpu_copy;
  b->download = cpu_copy;
  b->move = cpu_move;
  b->forward = cpu_forward;
  b->backward = cpu_backward;
  b->bn_stats = cpu_bn_stats;
  b->bn_apply = cpu_bn_apply;
  b->bn_bwd_stats = cpu_bn_bwd_stats;
  b->bn_bwd_apply = cpu_bn_bwd_apply;
  b->update = cpu_update;
  b->sync = cpu_sync;
  b->close = cpu_close;
}

/* --------------------------------------------------------------- cuda */
#ifdef PCGC_HAVE_CUDA
#define CU(b) ((pcgc_cuda *)(b)->ctx)
static void *cu_alloc(pcgc_backend *b, size_t bytes, pcgc_error *err) { return pcgc_cuda_alloc(CU(b), bytes, err); }
static void cu_release(pcgc_backend *b, void *p) { pcgc_cuda_free(CU(b), p); }
static pcgc_status cu_zero(pcgc_backend *b, void *p, size_t n, pcgc_error *err) { return pcgc_cuda_zero(CU(b), p, n, err); }
static pcgc_status cu_zero_list(pcgc_backend *b, int n, void *const *p, const size_t *bytes, pcgc_error *err) {
  return pcgc_cuda_zero_list(CU(b), n, p, bytes, err);
}
static pcgc_status cu_upload(pcgc_backend *b, void *d, const void *h, size_t n, pcgc_error *err) {
  return pcgc_cuda_upload(CU(b), d, h, n, err);
}
static pcgc_status cu_download(pcgc_backend *b, void *h, const void *d, size_t n, pcgc_error *err) {
  return pcgc_cuda_download(CU(b), h, d, n, err);
}
static pcgc_status cu_move(pcgc_backend *b, const pcgc_plan_buf *D, void *dd, const pcgc_plan_buf *S, const void *sd,
                           const pcgc_box *x, bool add, pcgc_error *err) {
  return pcgc_cuda_move(CU(b), D->dtype, S->dtype, x->rank, dd, D->dims, D->offset, sd, S->dims, S->offset, x->lo, x->len, add,
                        err);
}
static pcgc_status cu_move_list(pcgc_backend *b, int n, const pcgc_plan_buf *D, void *const *dd,
                                const pcgc_plan_buf *const *S, const void *const *sd, const pcgc_box *x, const bool *add,
                                pcgc_error *err) {
  pcgc_cuda_box_move m[PCGC_PACK_MAX];
  if (n < 0 || n > PCGC_PACK_MAX)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "moving %d boxes at once (at most %d)", n, PCGC_PACK_MAX);
  for (int i = 0; i < n; i++) {
    if (D[i].dtype != S[i]->dtype)
      return pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "a packed box of %s into one of %s",
                            pcgc_dtype_name(S[i]->dtype), pcgc_dtype_name(D[i].dtype));
    m[i] = (pcgc_cuda_box_move){D[i].dtype, x[i].rank, dd[i], sd[i], D[i].dims, D[i].offset, S[i]->dims,
                                S[i]->offset, x[i].lo, x[i].len, add && add[i]};
  }
  return pcgc_cuda_move_list(CU(b), n, m, err);
}
static pcgc_status cu_forward(pcgc_backend *b, pcgc_op_kind k, const pcgc_attrs *a, int ni, const pcgc_buf *in,
                              int no, pcgc_buf *out, const pcgc_kernel_ctx *ctx, pcgc_error *err) {
  return pcgc_cuda_forward(CU(b), k, a, ni, in, no, out, ctx, err);
}
static pcgc_status cu_backward(pcgc_backend *b, pcgc_op_kind k, const pcgc_attrs *a, int ni, const pcgc_buf *in,
                               int no, const pcgc_buf *out, const pcgc_buf *dout, pcgc_buf *din,
                               const pcgc_kernel_ctx *ctx, pcgc_error *err) {
  return pcgc_cuda_backward(CU(b), k, a, ni, in, no, out, dout, din, ctx, err);
}
static pcgc_status cu_bn_stats(pcgc_backend *b, const pcgc_buf *x, double *s, pcgc_error *err) {
  return pcgc_cuda_batchnorm_stats(CU(b), x, s, err);
}
static pcgc_status cu_bn_apply(pcgc_backend *b, const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *sc,
                               const pcgc_buf *bi, const double *s, double count, pcgc_buf *y, pcgc_error *err) {
  return pcgc_cuda_batchnorm_apply(CU(b), a, x, sc, bi, s, count, y, err);
}
static pcgc_status cu_bn_bwd_stats(pcgc_backend *b, const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *sc,
                                   const pcgc_buf *bi, const pcgc_buf *dy, double *s, double count, pcgc_error *err) {
  return pcgc_cuda_batchnorm_bwd_stats(CU(b), a, x, sc, bi, dy, s, count, err);
}
static pcgc_status cu_bn_bwd_apply(pcgc_backend *b, const pcgc_attrs *a, const pcgc_buf *x, const pcgc_buf *sc,
                                   const pcgc_buf *bi, const pcgc_buf *dy, const double *s, double count,
                                   pcgc_buf *dx, pcgc_buf *dsc, pcgc_buf *dbi, pcgc_error *err) {
  return pcgc_cuda_batchnorm_bwd_apply(CU(b), a, x, sc, bi, dy, s, count, dx, dsc, dbi, err);
}
static pcgc_status cu_update(pcgc_backend *b, const pcgc_optimizer *o, pcgc_buf *w, const pcgc_buf *g, pcgc_buf *m,
                             pcgc_buf *v, int64_t step, pcgc_error *err) {
  return pcgc_cuda_optimizer_step(CU(b), o, w, g, m, v, step, err);
}
static void cu_measure(pcgc_backend *b, bool on) { pcgc_cuda_measure(CU(b), on); }
static pcgc_status cu_reserve(pcgc_backend *b, pcgc_error *err) { return pcgc_cuda_reserve(CU(b), err); }
static void cu_freeze(pcgc_backend *b) { pcgc_cuda_freeze(CU(b)); }
static size_t cu_workspace(const pcgc_backend *b) { return pcgc_cuda_workspace_bytes((const pcgc_cuda *)b->ctx); }
static pcgc_status cu_sync(pcgc_backend *b, pcgc_error *err) { return pcgc_cuda_sync(CU(b), err); }
static pcgc_status cu_set_precision(pcgc_backend *b, const char *p, pcgc_error *err) {
  pcgc_cuda_math m = strcmp(p, "f32") == 0 ? PCGC_CUDA_MATH_F32 : strcmp(p, "tf32") == 0 ? PCGC_CUDA_MATH_TF32
                     : strcmp(p, "bf16") == 0 ? PCGC_CUDA_MATH_BF16 : (pcgc_cuda_math)-1;
  if ((int)m < 0) return pcgc_error_set(err, PCGC_ERR_INVALID, "unknown precision '%s' (f32, tf32, bf16)", p);
  pcgc_cuda_set_math(CU(b), m);
  return PCGC_OK;
}
/* communicators: the runtime's void * is a pcgc_cuda_comm * */
#define COMM(c) ((pcgc_cuda_comm *)(c))
static pcgc_status cu_comm_id(pcgc_backend *b, void *id, pcgc_error *err) { return pcgc_cuda_comm_id(id, err); }
static pcgc_status cu_comm_open(pcgc_backend *b, const void *id, int n, int rank, void **comm, pcgc_error *err) {
  pcgc_cuda_comm *c = NULL;
  pcgc_status st = pcgc_cuda_comm_open(CU(b), id, n, rank, &c, err);
  *comm = c;
  return st;
}
static void cu_comm_close(pcgc_backend *b, void *comm) { pcgc_cuda_comm_close(CU(b), COMM(comm)); }
static pcgc_status cu_comm_slots(pcgc_backend *b, int n, pcgc_error *err) { return pcgc_cuda_comm_slots(CU(b), n, err); }
static pcgc_status cu_allreduce(pcgc_backend *b, void *comm, void *buf, int64_t n, pcgc_dtype t, pcgc_error *err) {
  return pcgc_cuda_allreduce(CU(b), COMM(comm), buf, n, t, err);
}
static pcgc_status cu_allreduce_start(pcgc_backend *b, void *comm, void *buf, int64_t n, pcgc_dtype t, int slot,
                                      pcgc_error *err) {
  return pcgc_cuda_allreduce_start(CU(b), COMM(comm), buf, n, t, slot, err);
}
static pcgc_status cu_reduce_scatter_start(pcgc_backend *b, void *comm, void *buf, void *out, const int64_t *counts,
                                           pcgc_dtype t, int slot, pcgc_error *err) {
  return pcgc_cuda_reduce_scatter_start(CU(b), COMM(comm), buf, out, counts, t, slot, err);
}
static pcgc_status cu_comm_wait(pcgc_backend *b, int slot, pcgc_error *err) { return pcgc_cuda_comm_wait(CU(b), slot, err); }
static pcgc_status cu_broadcast(pcgc_backend *b, void *comm, void *buf, int64_t n, pcgc_dtype t, int root,
                                pcgc_error *err) {
  return pcgc_cuda_broadcast(CU(b), COMM(comm), buf, n, t, root, err);
}
static pcgc_status cu_reduce(pcgc_backend *b, void *comm, void *buf, int64_t n, pcgc_dtype t, int root,
                             pcgc_error *err) {
  return pcgc_cuda_reduce(CU(b), COMM(comm), buf, n, t, root, err);
}
static pcgc_status cu_send(pcgc_backend *b, void *comm, const void *buf, int64_t n, pcgc_dtype t, int peer,
                           pcgc_error *err) {
  return pcgc_cuda_send(CU(b), COMM(comm), buf, n, t, peer, err);
}
static pcgc_status cu_send_mark(pcgc_backend *b, void *comm, int slot, pcgc_error *err) {
  return pcgc_cuda_send_mark(CU(b), COMM(comm), slot, err);
}
static pcgc_status cu_recv(pcgc_backend *b, void *comm, void *buf, int64_t n, pcgc_dtype t, int peer,
                           pcgc_error *err) {
  return pcgc_cuda_recv(CU(b), COMM(comm), buf, n, t, peer, err);
}
static void cu_close(pcgc_backend *b) {
  pcgc_cuda_close(CU(b));
  b->ctx = NULL;
}

static pcgc_status open_cuda(pcgc_backend *b, int device, pcgc_error *err) {
  pcgc_cuda *cu = pcgc_cuda_open(device, err);
  if (!cu) return err ? err->status : PCGC_ERR_UNSUPPORTED;
  b->name = "cuda";
  b->host = false;
  b->ctx = cu;
  snprintf(b->desc, sizeof b->desc, "%s", pcgc_cuda_describe(cu));
  b->alloc = cu_alloc;
  b->release = cu_release;
  b->zero = cu_zero;
  b->zero_list = cu_zero_list;
  b->upload = cu_upload;
  b->download = cu_download;
  b->move = cu_move;
  b->move_list = cu_move_list;
  b->forward = cu_forward;
  b->backward = cu_backward;
  b->bn_stats = cu_bn_stats;
  b->bn_apply = cu_bn_apply;
  b->bn_bwd_stats = cu_bn_bwd_stats;
  b->bn_bwd_apply = cu_bn_bwd_apply;
  b->update = cu_update;
  b->measure = cu_measure;
  b->reserve = cu_reserve;
  b->freeze = cu_freeze;
  b->workspace = cu_workspace;
  b->sync = cu_sync;
  b->close = cu_close;
  b->comm_id_bytes = PCGC_CUDA_COMM_ID_BYTES;
  b->comm_id = cu_comm_id;
  b->comm_open = cu_comm_open;
  b->comm_close = cu_comm_close;
  b->comm_slots = cu_comm_slots;
  b->allreduce = cu_allreduce;
  b->allreduce_start = cu_allreduce_start;
  b->reduce_scatter_start = cu_reduce_scatter_start;
  b->comm_wait = cu_comm_wait;
  b->broadcast = cu_broadcast;
  b->reduce = cu_reduce;
  b->send = cu_send;
  b->send_mark = cu_send_mark;
  b->recv = cu_recv;
  b->set_precision = cu_set_precision;
  return PCGC_OK;
}
#endif

int pcgc_backend_devices(const char *name, pcgc_error *err) {
  if (strcmp(name, "cpu") == 0) return 1;
#ifdef PCGC_HAVE_CUDA
  if (strcmp(name, "cuda") == 0) {
    char msg[256] = "";
    int n = pcgc_cuda_device_count(msg, sizeof msg);
    if (n > 0) return n;
    pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "no usable CUDA device on this node%s%s", n < 0 ? ": " : " (the driver reports none)", n < 0 ? msg : "");
    pcgc_error_hint(err, "run it on a node with NVIDIA GPUs, or on CPU processes with --backend cpu");
    return PCGC_ERR_UNSUPPORTED;
  }
#endif
  pcgc_backend b;
  pcgc_status st = pcgc_backend_open(&b, name, 0, err); /* its message */
  return st ? st : PCGC_ERR_INVALID;
}

bool pcgc_backend_built(const char *name) {
  if (strcmp(name, "cpu") == 0) return true;
#ifdef PCGC_HAVE_CUDA
  if (strcmp(name, "cuda") == 0) return true;
#endif
  return false;
}

pcgc_status pcgc_backend_open(pcgc_backend *b, const char *name, int device, pcgc_error *err) {
  memset(b, 0, sizeof *b);
  if (strcmp(name, "cpu") == 0) {
    open_cpu(b);
    return PCGC_OK;
  }
  if (strcmp(name, "cuda") == 0) {
#ifdef PCGC_HAVE_CUDA
    return open_cuda(b, device, err);
#else
    pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "this pcgc was built without the CUDA backend");
    pcgc_error_hint(err, "build it where the CUDA toolkit, cuDNN and NCCL are installed (cmake finds them in "
                         "/usr/local/cuda), or run the plan on CPU processes with --backend cpu");
    return PCGC_ERR_UNSUPPORTED;
#endif
  }
  pcgc_error_set(err, PCGC_ERR_INVALID, "unknown backend '%s'", name);
  pcgc_error_hint(err, "the backends are cpu and cuda");
  return PCGC_ERR_INVALID;
}

void pcgc_backend_close(pcgc_backend *b) {
  if (b && b->close) b->close(b);
}
