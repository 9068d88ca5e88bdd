/*
 * cu_comm.cu — NCCL communicators of the CUDA backend (cuda_kernels.h's
 * NCCL section): ids, opening and closing, all-reduce (blocking and
 * started/waited through slots), broadcast, reduce, send and receive.
 *
 * Every communicator has its own stream and two events. An operation is
 * queued on the communicator's stream behind an event recorded on the compute
 * stream (`ready`), so it reads what the compute stream wrote before it; a
 * blocking operation then records `done` on the communicator's stream and
 * the compute stream waits for it. Reusing the two events is safe: a stream
 * waits for the event's record as it stood when cudaStreamWaitEvent was
 * called, and each record is waited for at once. A started all-reduce marks
 * its end with its slot's event instead, which comm_wait puts in front of the
 * compute stream; a send marks nothing (pcgc_cuda_sync waits for it). A
 * two-member communicator exchanges one message while it is opened, so that
 * no later send or receive waits on the host for its peer (see preconnect).
 *
 * pcgc_cuda_sync with communicators open polls every stream and NCCL's
 * asynchronous error of each communicator: a communicator NCCL reports
 * failed (a peer gone, a network error) is aborted, which ends its kernels,
 * so the streams drain and the caller gets a message instead of a hang.
 */
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"

static_assert(sizeof(ncclUniqueId) == PCGC_CUDA_COMM_ID_BYTES, "PCGC_CUDA_COMM_ID_BYTES is not NCCL's id size");

struct pcgc_cuda_comm {
  ncclComm_t nc;             /* NULL once aborted after an asynchronous error */
  cudaStream_t stream;       /* this communicator's operations, in issue order */
  cudaEvent_t ready;         /* the compute stream's work before an operation */
  cudaEvent_t done;          /* the end of a blocking operation */
  int n, rank;
};

/* ------------------------------------------------------------- errors */

static pcgc_status cuda_fail(pcgc_error *err, cudaError_t e, const char *op, const char *what) {
  return pcgc_error_set(err, e == cudaErrorMemoryAllocation ? PCGC_ERR_NOMEM : PCGC_ERR_IO, "CUDA: %s: %s: %s", op,
                        what, cudaGetErrorString(e));
}

/* "NCCL: op: <result> (<NCCL's last error>)". The last error may be older
 * than this call, so it comes second. */
static pcgc_status nccl_fail(pcgc_error *err, ncclComm_t nc, ncclResult_t r, const char *op) {
  const char *last = ncclGetLastError(nc);
  bool has_last = last && *last;
  pcgc_status st = r == ncclInvalidArgument || r == ncclInvalidUsage ? PCGC_ERR_INVALID : PCGC_ERR_IO;
  pcgc_error_set(err, st, "NCCL: %s: %s%s%.600s%s", op, ncclGetErrorString(r), has_last ? " (" : "",
                 has_last ? last : "", has_last ? ")" : "");
  pcgc_error_hint(err, "NCCL_DEBUG=WARN makes NCCL print why on every rank");
  return st;
}

static bool nccl_type(pcgc_dtype t, ncclDataType_t *out) {
  switch (t) {
  case PCGC_F32: *out = ncclFloat32; return true;
  case PCGC_F64: *out = ncclFloat64; return true;
  case PCGC_BF16: *out = ncclBfloat16; return true;
  case PCGC_I32: *out = ncclInt32; return true;
  case PCGC_I64: *out = ncclInt64; return true;
  default: return false;
  }
}

/* The checks every operation shares; *nt is the buffer's NCCL type. */
static pcgc_status check_op(const pcgc_cuda *cu, const pcgc_cuda_comm *c, const void *buf, int64_t n, pcgc_dtype t,
                            const char *op, ncclDataType_t *nt, pcgc_error *err) {
  if (!cu || !c) return pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: %s: no context or communicator", op);
  if (!c->nc)
    return pcgc_error_set(err, PCGC_ERR_IO, "NCCL: %s: the communicator was aborted after an earlier failure", op);
  if (!nccl_type(t, nt))
    return pcgc_error_set(err, PCGC_ERR_UNSUPPORTED,
                          "NCCL: %s of %s: only f32, f64, bf16, i32 and i64 are supported", op,
                          pcgc_dtype_name(t));
  if (n < 0) return pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: %s of %lld elements", op, (long long)n);
  if (n > 0 && !buf) return pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: %s: no buffer", op);
  return PCGC_OK;
}

static pcgc_status check_rank(const pcgc_cuda_comm *c, int r, const char *what, const char *op, pcgc_error *err) {
  if (r >= 0 && r < c->n) return PCGC_OK;
  return pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: %s: %s %d is not a rank of a communicator of %d", op, what, r,
                        c->n);
}

static pcgc_status check_slot(const pcgc_cuda *cu, int slot, const char *op, pcgc_error *err) {
  if (slot >= 0 && slot < cu->n_slots) return PCGC_OK;
  return pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: %s: slot %d does not exist (%d made by pcgc_cuda_comm_slots)",
                        op, slot, cu->n_slots);
}

/* ------------------------------------------------------------ ordering */

/* the communicator's stream waits for the compute stream's work so far */
static pcgc_status after_compute(pcgc_cuda *cu, pcgc_cuda_comm *c, const char *op, pcgc_error *err) {
  cudaError_t e = cudaEventRecord(c->ready, cu->stream);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(c->stream, c->ready, 0);
  return e == cudaSuccess ? PCGC_OK : cuda_fail(err, e, op, "ordering after the compute stream");
}

/* `ev` marks the end of the communicator's work so far; the compute stream
 * waits for it unless hold is false */
static pcgc_status mark_end(pcgc_cuda *cu, pcgc_cuda_comm *c, cudaEvent_t ev, bool hold, const char *op,
                            pcgc_error *err) {
  cudaError_t e = cudaEventRecord(ev, c->stream);
  if (e == cudaSuccess && hold) e = cudaStreamWaitEvent(cu->stream, ev, 0);
  return e == cudaSuccess ? PCGC_OK : cuda_fail(err, e, op, "ordering the compute stream after it");
}

/* NCCL's verdict on a communicator whose stream is still busy; a failed one
 * is aborted so that its kernels end. */
static pcgc_status watch(pcgc_cuda_comm *c, const char *op, pcgc_error *err) {
  if (!c->nc) return PCGC_OK;
  ncclResult_t a = ncclSuccess, r = ncclCommGetAsyncError(c->nc, &a);
  if (r != ncclSuccess) return nccl_fail(err, c->nc, r, op);
  if (a == ncclSuccess || a == ncclInProgress) return PCGC_OK;
  pcgc_status st = nccl_fail(err, c->nc, a, op);
  ncclCommAbort(c->nc);
  c->nc = NULL;
  return st;
}

/* waits for one stream, watching c (may be NULL) while it is busy */
static pcgc_status drain(cudaStream_t s, pcgc_cuda_comm *c, const char *op, pcgc_error *err) {
  for (;;) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return PCGC_OK;
    if (e != cudaErrorNotReady) return cuda_fail(err, e, op, "running a stream");
    if (c) {
      pcgc_status st = watch(c, op, err);
      if (st) return st;
    }
    sched_yield();
  }
}

pcgc_status pcgc__cu_comm_sync(pcgc_cuda *cu, pcgc_error *err) {
  /* The compute stream may wait for any communicator, and a communicator for
   * the compute stream: poll them all until every one is idle. */
  for (;;) {
    bool busy = false;
    pcgc_status st = PCGC_OK;
    for (int i = 0; i < cu->n_comms; i++) {
      pcgc_cuda_comm *c = cu->comms[i];
      cudaError_t e = cudaStreamQuery(c->stream);
      if (e == cudaErrorNotReady) busy = true;
      else if (e != cudaSuccess) return cuda_fail(err, e, "waiting for a communicator", "running its stream");
      if ((st = watch(c, "waiting for a communicator", err)) != PCGC_OK) return st;
    }
    cudaError_t e = cudaStreamQuery(cu->stream);
    if (e == cudaErrorNotReady) busy = true;
    else if (e != cudaSuccess) return cuda_fail(err, e, "synchronising", "running the device's stream");
    if (!busy) return PCGC_OK;
    sched_yield();
  }
}

/* ------------------------------------------------------- communicators */

/* NCCL connects a pair for sends and receives on its first message, inside
 * the host call, which returns only when the peer's call has joined it. The
 * runtime sends on one communicator before it receives on the other, and
 * so does its peer: the first messages would each wait for the other's
 * second. One grouped exchange with the peer while opening (a collective
 * moment anyway) makes both directions' connections up front. */
static pcgc_status preconnect(pcgc_cuda_comm *c, const char *op, pcgc_error *err) {
  int32_t *scratch = NULL; /* [0] sent, [1] received */
  int peer = 1 - c->rank;
  cudaError_t e = cudaMalloc((void **)&scratch, 2 * sizeof *scratch);
  if (e != cudaSuccess) return cuda_fail(err, e, op, "allocating the first message");
  pcgc_status st = PCGC_OK;
  if ((e = cudaMemsetAsync(scratch, 0, 2 * sizeof *scratch, c->stream)) != cudaSuccess) {
    st = cuda_fail(err, e, op, "preparing the first message");
  } else {
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess) {
      ncclResult_t rs = ncclSend(scratch, 1, ncclInt32, peer, c->nc, c->stream);
      ncclResult_t rr = ncclRecv(scratch + 1, 1, ncclInt32, peer, c->nc, c->stream);
      r = ncclGroupEnd(); /* every ncclGroupStart needs its end */
      r = rs != ncclSuccess ? rs : rr != ncclSuccess ? rr : r;
    }
    if (r != ncclSuccess) st = nccl_fail(err, c->nc, r, op);
  }
  if (st == PCGC_OK) st = drain(c->stream, c, op, err);
  else cudaStreamSynchronize(c->stream);
  cudaFree(scratch);
  return st;
}

pcgc_status pcgc_cuda_comm_id(void *id, pcgc_error *err) {
  if (!id) return pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: making a communicator id: no buffer");
  ncclUniqueId uid;
  ncclResult_t r = ncclGetUniqueId(&uid);
  if (r != ncclSuccess) return nccl_fail(err, NULL, r, "making a communicator id");
  memcpy(id, &uid, sizeof uid);
  return PCGC_OK;
}

pcgc_status pcgc_cuda_comm_open(pcgc_cuda *cu, const void *id, int n, int rank, pcgc_cuda_comm **out,
                                pcgc_error *err) {
  static const char op[] = "opening a communicator";
  if (out) *out = NULL;
  if (!cu || !id || !out) return pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: %s: missing argument", op);
  if (n < 1 || rank < 0 || rank >= n)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: %s: rank %d of %d members", op, rank, n);
  /* Local resources first: after ncclCommInitRank the other members hold a
   * communicator with us in it. */
  if (cu->n_comms == cu->cap_comms) {
    int cap = cu->cap_comms ? 2 * cu->cap_comms : 8;
    pcgc_cuda_comm **a = (pcgc_cuda_comm **)realloc(cu->comms, (size_t)cap * sizeof *a);
    if (!a) return pcgc_error_set(err, PCGC_ERR_NOMEM, "NCCL: %s: out of memory", op);
    cu->comms = a;
    cu->cap_comms = cap;
  }
  pcgc_cuda_comm *c = (pcgc_cuda_comm *)calloc(1, sizeof *c);
  if (!c) return pcgc_error_set(err, PCGC_ERR_NOMEM, "NCCL: %s: out of memory", op);
  c->n = n;
  c->rank = rank;
  pcgc_status st;
  cudaError_t e = cudaSetDevice(cu->device); /* NCCL binds the communicator to the current device */
  if (e != cudaSuccess) {
    st = cuda_fail(err, e, op, "selecting the device");
    goto fail_comm;
  }
  if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
    st = cuda_fail(err, e, op, "creating its stream");
    goto fail_comm;
  }
  if ((e = cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming)) != cudaSuccess) {
    st = cuda_fail(err, e, op, "creating an event");
    goto fail_stream;
  }
  if ((e = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming)) != cudaSuccess) {
    st = cuda_fail(err, e, op, "creating an event");
    goto fail_ready;
  }
  {
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclResult_t r = ncclCommInitRank(&c->nc, n, uid, rank);
    if (r != ncclSuccess) {
      st = nccl_fail(err, NULL, r, op);
      c->nc = NULL;
      goto fail_done;
    }
  }
  if (n == 2 && (st = preconnect(c, op, err)) != PCGC_OK) {
    if (c->nc) ncclCommAbort(c->nc);
    goto fail_done;
  }
  cu->comms[cu->n_comms++] = c;
  *out = c;
  return PCGC_OK;

fail_done:
  cudaEventDestroy(c->done);
fail_ready:
  cudaEventDestroy(c->ready);
fail_stream:
  cudaStreamDestroy(c->stream);
fail_comm:
  free(c);
  return st;
}

void pcgc_cuda_comm_close(pcgc_cuda *cu, pcgc_cuda_comm *c) {
  if (!c) return;
  if (cu) {
    cudaSetDevice(cu->device);
    for (int i = 0; i < cu->n_comms; i++)
      if (cu->comms[i] == c) {
        cu->comms[i] = cu->comms[--cu->n_comms];
        break;
      }
  }
  pcgc_error ignored;
  drain(c->stream, c, "closing a communicator", &ignored); /* a failure aborts it */
  if (c->nc) {
    /* Finalize flushes NCCL's own work; a communicator it cannot finish is aborted. */
    if (ncclCommFinalize(c->nc) == ncclSuccess) ncclCommDestroy(c->nc);
    else ncclCommAbort(c->nc);
  }
  cudaEventDestroy(c->done);
  cudaEventDestroy(c->ready);
  cudaStreamDestroy(c->stream);
  free(c);
}

static void free_slots(pcgc_cuda *cu) {
  for (int i = 0; i < cu->n_slots; i++) cudaEventDestroy(cu->slot_done[i]);
  free(cu->slot_done);
  cu->slot_done = NULL;
  cu->n_slots = 0;
}

void pcgc__cu_comm_close_all(pcgc_cuda *cu) {
  while (cu->n_comms > 0) pcgc_cuda_comm_close(cu, cu->comms[cu->n_comms - 1]);
  free(cu->comms);
  cu->comms = NULL;
  cu->cap_comms = 0;
  free_slots(cu);
}

pcgc_status pcgc_cuda_comm_slots(pcgc_cuda *cu, int n, pcgc_error *err) {
  static const char op[] = "making all-reduce slots";
  if (!cu || n < 0) return pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: %s: %d slots", op, n);
  cudaError_t e = cudaSetDevice(cu->device);
  if (e != cudaSuccess) return cuda_fail(err, e, op, "selecting the device");
  cudaEvent_t *ev = (cudaEvent_t *)calloc(n ? (size_t)n : 1, sizeof *ev);
  if (!ev) return pcgc_error_set(err, PCGC_ERR_NOMEM, "NCCL: %s: out of memory", op);
  for (int i = 0; i < n; i++)
    if ((e = cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming)) != cudaSuccess) {
      while (i-- > 0) cudaEventDestroy(ev[i]);
      free(ev);
      return cuda_fail(err, e, op, "creating an event");
    }
  /* a slot never recorded is complete: waiting for it is free */
  free_slots(cu);
  cu->slot_done = ev;
  cu->n_slots = n;
  return PCGC_OK;
}

/* ---------------------------------------------------------- operations */

pcgc_status pcgc_cuda_allreduce(pcgc_cuda *cu, pcgc_cuda_comm *c, void *buf, int64_t n, pcgc_dtype t,
                                pcgc_error *err) {
  static const char op[] = "all-reduce";
  ncclDataType_t nt = ncclFloat32;
  pcgc_status st = check_op(cu, c, buf, n, t, op, &nt, err);
  if (st || n == 0) return st;
  if ((st = after_compute(cu, c, op, err))) return st;
  ncclResult_t r = ncclAllReduce(buf, buf, (size_t)n, nt, ncclSum, c->nc, c->stream);
  if (r != ncclSuccess) return nccl_fail(err, c->nc, r, op);
  return mark_end(cu, c, c->done, true, op, err);
}

pcgc_status pcgc_cuda_allreduce_start(pcgc_cuda *cu, pcgc_cuda_comm *c, void *buf, int64_t n, pcgc_dtype t, int slot,
                                      pcgc_error *err) {
  static const char op[] = "starting an all-reduce";
  ncclDataType_t nt = ncclFloat32;
  pcgc_status st = check_op(cu, c, buf, n, t, op, &nt, err);
  if (st || (st = check_slot(cu, slot, op, err))) return st;
  if (n == 0) { /* nothing to wait for: the slot marks the compute stream's present */
    cudaError_t e = cudaEventRecord(cu->slot_done[slot], cu->stream);
    return e == cudaSuccess ? PCGC_OK : cuda_fail(err, e, op, "recording its slot");
  }
  if ((st = after_compute(cu, c, op, err))) return st;
  ncclResult_t r = ncclAllReduce(buf, buf, (size_t)n, nt, ncclSum, c->nc, c->stream);
  if (r != ncclSuccess) return nccl_fail(err, c->nc, r, op);
  return mark_end(cu, c, cu->slot_done[slot], false, op, err);
}

pcgc_status pcgc_cuda_reduce_scatter_start(pcgc_cuda *cu, pcgc_cuda_comm *c, void *buf, void *out,
                                           const int64_t *counts, pcgc_dtype t, int slot, pcgc_error *err) {
  static const char op[] = "starting a reduce-scatter";
  ncclDataType_t nt = ncclFloat32;
  int64_t total = 0;
  bool equal = true;
  for (int j = 0; c && counts && j < c->n; j++) {
    if (counts[j] < 0) return pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: %s: slab %d of %lld elements", op, j,
                                             (long long)counts[j]);
    total += counts[j];
    equal &= counts[j] == counts[0];
  }
  if (c && !counts) return pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: %s: no slab counts", op);
  if (c && counts && counts[c->rank] > 0 && !out) return pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: %s: no output", op);
  pcgc_status st = check_op(cu, c, buf, total, t, op, &nt, err);
  if (st || (st = check_slot(cu, slot, op, err))) return st;
  if (total == 0) {
    cudaError_t e = cudaEventRecord(cu->slot_done[slot], cu->stream);
    return e == cudaSuccess ? PCGC_OK : cuda_fail(err, e, op, "recording its slot");
  }
  if ((st = after_compute(cu, c, op, err))) return st;
  size_t es = (size_t)pcgc_dtype_size(t);
  char *b = (char *)buf;
  ncclResult_t r;
  if (equal) { /* in place when out is this member's slab of b */
    r = ncclReduceScatter(b, out, (size_t)counts[0], nt, ncclSum, c->nc, c->stream);
  } else { /* slab j to member j; the root's receive buffer is out (the others' is not read) */
    r = ncclGroupStart();
    size_t at = 0;
    for (int j = 0; r == ncclSuccess && j < c->n; j++) {
      if (counts[j] > 0)
        r = ncclReduce(b + at * es, j == c->rank ? out : b + at * es, (size_t)counts[j], nt, ncclSum, j, c->nc,
                       c->stream);
      at += (size_t)counts[j];
    }
    ncclResult_t e = ncclGroupEnd();
    if (r == ncclSuccess) r = e;
  }
  if (r != ncclSuccess) return nccl_fail(err, c->nc, r, op);
  return mark_end(cu, c, cu->slot_done[slot], false, op, err);
}

pcgc_status pcgc_cuda_comm_wait(pcgc_cuda *cu, int slot, pcgc_error *err) {
  static const char op[] = "waiting for an all-reduce";
  if (!cu) return pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: %s: no context", op);
  pcgc_status st = check_slot(cu, slot, op, err);
  if (st) return st;
  cudaError_t e = cudaStreamWaitEvent(cu->stream, cu->slot_done[slot], 0);
  return e == cudaSuccess ? PCGC_OK : cuda_fail(err, e, op, "ordering the compute stream after it");
}

pcgc_status pcgc_cuda_broadcast(pcgc_cuda *cu, pcgc_cuda_comm *c, void *buf, int64_t n, pcgc_dtype t, int root,
                                pcgc_error *err) {
  static const char op[] = "broadcast";
  ncclDataType_t nt = ncclFloat32;
  pcgc_status st = check_op(cu, c, buf, n, t, op, &nt, err);
  if (st || (st = check_rank(c, root, "root", op, err)) || n == 0) return st;
  if ((st = after_compute(cu, c, op, err))) return st;
  ncclResult_t r = ncclBroadcast(buf, buf, (size_t)n, nt, root, c->nc, c->stream);
  if (r != ncclSuccess) return nccl_fail(err, c->nc, r, op);
  return mark_end(cu, c, c->done, true, op, err);
}

pcgc_status pcgc_cuda_reduce(pcgc_cuda *cu, pcgc_cuda_comm *c, void *buf, int64_t n, pcgc_dtype t, int root,
                             pcgc_error *err) {
  static const char op[] = "reduce";
  ncclDataType_t nt = ncclFloat32;
  pcgc_status st = check_op(cu, c, buf, n, t, op, &nt, err);
  if (st || (st = check_rank(c, root, "root", op, err)) || n == 0) return st;
  if ((st = after_compute(cu, c, op, err))) return st;
  /* in place; NCCL writes only the root's buffer */
  ncclResult_t r = ncclReduce(buf, buf, (size_t)n, nt, ncclSum, root, c->nc, c->stream);
  if (r != ncclSuccess) return nccl_fail(err, c->nc, r, op);
  return mark_end(cu, c, c->done, true, op, err);
}

/* A message to oneself needs the send and the receive in one NCCL group,
 * which these one-call operations cannot form: refused rather than hung. */
static pcgc_status check_peer(const pcgc_cuda_comm *c, int peer, const char *op, pcgc_error *err) {
  pcgc_status st = check_rank(c, peer, "peer", op, err);
  if (st == PCGC_OK && peer == c->rank)
    st = pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: %s: peer %d is this member itself", op, peer);
  return st;
}

pcgc_status pcgc_cuda_send(pcgc_cuda *cu, pcgc_cuda_comm *c, const void *buf, int64_t n, pcgc_dtype t, int peer,
                           pcgc_error *err) {
  static const char op[] = "send";
  ncclDataType_t nt = ncclFloat32;
  pcgc_status st = check_op(cu, c, buf, n, t, op, &nt, err);
  if (st || (st = check_peer(c, peer, op, err)) || n == 0) return st;
  if ((st = after_compute(cu, c, op, err))) return st;
  /* the compute stream goes on: pcgc_cuda_sync waits for the send */
  ncclResult_t r = ncclSend(buf, (size_t)n, nt, peer, c->nc, c->stream);
  return r == ncclSuccess ? PCGC_OK : nccl_fail(err, c->nc, r, op);
}

pcgc_status pcgc_cuda_send_mark(pcgc_cuda *cu, pcgc_cuda_comm *c, int slot, pcgc_error *err) {
  static const char op[] = "marking a send";
  pcgc_status st = check_slot(cu, slot, op, err);
  if (st) return st;
  if (!c) return pcgc_error_set(err, PCGC_ERR_INVALID, "NCCL: %s: no communicator", op);
  return mark_end(cu, c, cu->slot_done[slot], false, op, err);
}

pcgc_status pcgc_cuda_recv(pcgc_cuda *cu, pcgc_cuda_comm *c, void *buf, int64_t n, pcgc_dtype t, int peer,
                           pcgc_error *err) {
  static const char op[] = "receive";
  ncclDataType_t nt = ncclFloat32;
  pcgc_status st = check_op(cu, c, buf, n, t, op, &nt, err);
  if (st || (st = check_peer(c, peer, op, err)) || n == 0) return st;
  if ((st = after_compute(cu, c, op, err))) return st;
  ncclResult_t r = ncclRecv(buf, (size_t)n, nt, peer, c->nc, c->stream);
  if (r != ncclSuccess) return nccl_fail(err, c->nc, r, op);
  return mark_end(cu, c, c->done, true, op, err);
}
