/*
 * exec.c — the CPU backend's executor: one rank runs its device's stream of
 * a program (runtime.h) with the runtime/cpu kernels and Open MPI.
 *
 * Communication: a SEND packs its box into the send staging at the offset
 * codegen planned for it and starts MPI_Isend; before that it completes the
 * earlier sends whose staging it reuses (codegen.h, "Send staging": their
 * receives come first in the order every stream follows, so this cannot
 * deadlock), and the rest complete at the end of the step; a RECV is a blocking
 * MPI_Recv into the receive staging, then unpacked (set or added). BCAST,
 * REDUCE and ALLREDUCE pack into the same staging and run the MPI collective
 * on the group's communicator (created once, before the first step);
 * ALLREDUCE_START over a whole buffer (a weight's gradient) starts
 * MPI_Iallreduce (or NCCL's) on the buffer itself and WAIT completes it, so
 * gradients are never held twice (from a GPU through MPI, by way of a host
 * mirror); a region of a buffer is packed into its request's own staging and
 * unpacked by the WAIT (pcgc_allreduce_in_place). The order of the streams
 * (codegen/schedule.c) guarantees that this cannot deadlock. Open MPI
 * advances non-blocking collectives only inside MPI calls, so between
 * instructions the oldest open all-reduce is tested (progress()): the
 * gradients' all-reduces run while backward computes, not at their WAITs.
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "checkpoint.h"
#include "ctl.h"
#include "npy.h"
#include "reference.h"
#include "runtime.h"

void pcgc_run_options_default(pcgc_run_options *o) {
  memset(o, 0, sizeof *o);
  o->steps = 3;
  o->seed = 1;
  o->training = true;
  pcgc_optimizer_default(&o->opt, PCGC_SGD);
  o->tolerance = 1e-4;
}

typedef struct rt {
  const pcgc_graph *g;
  const pcgc_program *p;
  const pcgc_device_program *P;
  const pcgc_run_options *o;
  pcgc_error *err;
  int rank;
  pcgc_backend *be, cpu;  /* be: the run's backend (cpu: the default, when the options name none) */
  bool mpi;               /* MPI is initialised (a one-device plan, or a TCP control plane, runs without) */
  pcgc_ctl *ctl, own_ctl; /* how the ranks agree (ctl.h): the options', else own_ctl */
  char *arena, *send_stage, *recv_stage, **req_stage;  /* the backend's memory */
  char *send_h, *recv_h, **req_h; /* their host mirrors (the same pointers on the CPU backend) */
  char *host_tmp;         /* one buffer's bytes on the host (GPU backends) */
  char *widen;            /* bf16 storage: f32 copies of a kernel's bf16 arguments (the backend's memory) */
  MPI_Op bf16_sum;        /* MPI's sum of bf16 elements (MPI has no bf16 type) */
  bool have_bf16_sum;
  MPI_Request *sends, *reqs;
  int *pend, n_pend;      /* request slots of the all-reduces started and not yet waited for (host MPI) */
  struct rs_slot *rs;     /* per request slot: a reduce-scatter's slabs (n 0: an all-reduce's slot) */
  int n_sends;            /* SENDs issued this step: sends[k] is the k-th's request */
  int packed;             /* SENDs of this step whose boxes are in staging already (a packed run's) */
  int unpacked;           /* instructions before it: RECVs received and unpacked with their run's first */
  int *dn, dn_n, dn_next; /* the sends straight from their buffers, by send_done; the next to complete */
  bool seeded;            /* this process ran a step: the kept seeds hold their values */
  char *direct_h;         /* GPU backends through host MPI: those sends' host copies, each its own */
  int64_t *direct_at;     /* [n_sends]: send k's offset in direct_h (a copy lives until its send completes) */
  MPI_Comm *comm;      /* per group: its communicator, or MPI_COMM_NULL where not a member */
  bool dev_comm;       /* messages through the backend's communicators (NCCL), not host MPI */
  void **dcomm;        /* per group: the backend's communicator (NULL where not a member) */
  void **to, **from;   /* per device: the two-member communicator of messages to / from it */
  bool fault_no_allreduce; /* PCGC_TEST_FAULT=skip-allreduce: a deliberately wrong runtime for
                              tests of --check and pcgc verify (all-reduces leave data alone) */
  double loss;
  int64_t step;
  pcgc_npy **data;     /* --data: per node, its open .npy file (inputs only) */
  int64_t batches;     /* whole batches the files hold */
  char *data_tmp;      /* rows read before they are cut to a box */
  char *data_raw;      /* their bytes as the file holds them */
} rt;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static MPI_Datatype mpi_type(pcgc_dtype t) {
  switch (t) {
  case PCGC_F64: return MPI_DOUBLE;
  case PCGC_I32: return MPI_INT32_T;
  case PCGC_I64: return MPI_INT64_T;
  case PCGC_BF16: return MPI_UINT16_T; /* carried as its bits; summed by bf16_sum */
  default: return MPI_FLOAT;
  }
}

/* a += b elementwise in bf16: each sum in f32, rounded to nearest even (as NCCL's) */
static void bf16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++) b[i] = pcgc_bf16_from_f32(pcgc_f32_from_bf16(a[i]) + pcgc_f32_from_bf16(b[i]));
}

static MPI_Op sum_op(const rt *R, pcgc_dtype t) { return t == PCGC_BF16 ? R->bf16_sum : MPI_SUM; }

static void *data_of(const rt *R, int b) { return b >= 0 ? R->arena + R->P->buf[b].addr : NULL; }


static pcgc_buf kbuf(const rt *R, int b) {
  pcgc_buf k;
  memset(&k, 0, sizeof k);
  if (b < 0) return k;
  const pcgc_plan_buf *B = &R->P->buf[b];
  k.dtype = B->dtype;
  k.rank = B->rank;
  memcpy(k.dims, B->dims, sizeof k.dims);
  k.data = data_of(R, b);
  return k;
}

/* The kernel view of region x of buffer b, which must be contiguous in it
 * (a slab along its first dim longer than 1). */
static pcgc_status slab(const rt *R, int b, const pcgc_box *x, pcgc_buf *k) {
  const pcgc_plan_buf *B = &R->P->buf[b];
  int64_t off = 0, stride = 1;
  int cut = -1; /* the last dim x does not span whole: every dim before it has length 1 in x */
  for (int d = B->rank - 1; d >= 0; d--) {
    int64_t lo = x->lo[d] - B->offset[d];
    if (lo < 0 || x->len[d] < 1 || lo + x->len[d] > B->dims[d])
      return pcgc_error_set(R->err, PCGC_ERR_INVALID, "a slab outside its buffer (dim %d)", d);
    if (x->len[d] != B->dims[d] && cut < 0) cut = d;
    off += lo * stride;
    stride *= B->dims[d];
  }
  for (int d = 0; d < cut; d++)
    if (x->len[d] != 1)
      return pcgc_error_set(R->err, PCGC_ERR_INVALID, "a region that is not contiguous in its buffer (dim %d)", d);
  k->rank = B->rank;
  memcpy(k->dims, x->len, sizeof k->dims);
  k->data = (char *)k->data + off * (int64_t)pcgc_dtype_size(B->dtype);
  return PCGC_OK;
}

static pcgc_piece kpiece(const rt *R, int b) {
  pcgc_piece q;
  memset(&q, 0, sizeof q);
  if (b < 0) return q;
  const pcgc_plan_buf *B = &R->P->buf[b];
  const pcgc_ptensor *t = &R->g->nodes[B->node].out[B->slot];
  for (int d = 0; d < B->rank; d++) {
    q.global[d] = t->dims[d];
    q.offset[d] = B->offset[d];
  }
  return q;
}

/* dst (+)= src over box x in host memory. */

/* Host memory holding buffer b: the buffer itself on the CPU backend, else
 * R->host_tmp, filled with the buffer's contents when `fetch`. */
static void *host_of(rt *R, int b, bool fetch, pcgc_status *st) {
  *st = PCGC_OK;
  if (R->be->host) return data_of(R, b);
  if (fetch) *st = R->be->download(R->be, R->host_tmp, data_of(R, b), (size_t)R->P->buf[b].bytes, R->err);
  return R->host_tmp;
}

/* After host_of(R, b, ...) was written: the backend's buffer gets it. */
static pcgc_status host_done(rt *R, int b) {
  if (R->be->host) return PCGC_OK;
  return R->be->upload(R->be, data_of(R, b), R->host_tmp, (size_t)R->P->buf[b].bytes, R->err);
}

/* Staging between the backend's memory and MPI's host buffers. */
static pcgc_status to_host(rt *R, char *h, const char *d, int64_t bytes) {
  return R->be->host || bytes <= 0 ? PCGC_OK : R->be->download(R->be, h, d, (size_t)bytes, R->err);
}
static pcgc_status from_host(rt *R, char *d, const char *h, int64_t bytes) {
  return R->be->host || bytes <= 0 ? PCGC_OK : R->be->upload(R->be, d, h, (size_t)bytes, R->err);
}

/* The whole logical tensor of type t, held contiguously in f32. */
static pcgc_plan_buf whole_desc(const pcgc_ptensor *t) {
  pcgc_plan_buf w;
  memset(&w, 0, sizeof w);
  w.dtype = PCGC_F32;
  w.rank = t->rank;
  memcpy(w.dims, t->dims, sizeof w.dims);
  return w;
}

/* A contiguous staging area holding exactly box x. */
static pcgc_plan_buf stage_desc(const pcgc_box *x, pcgc_dtype t) {
  pcgc_plan_buf s;
  memset(&s, 0, sizeof s);
  s.dtype = t;
  s.rank = x->rank;
  for (int d = 0; d < x->rank; d++) {
    s.dims[d] = x->len[d];
    s.offset[d] = x->lo[d];
  }
  return s;
}

static int64_t box_numel(const pcgc_box *x) {
  int64_t n = 1;
  for (int d = 0; d < x->rank; d++) n *= x->len[d];
  return n;
}

static pcgc_box region(const rt *R, const pcgc_ins *I, int b) {
  pcgc_box x;
  if (I->box >= 0) return R->P->boxes[I->box];
  pcgc_plan_buf_box(&R->P->buf[b], &x);
  return x;
}

static pcgc_status mpi_fail(rt *R, int rc, const char *what, const pcgc_ins *I) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, s, &n);
  return pcgc_error_set(R->err, PCGC_ERR_IO, "rank %d: %s for '%s' failed: %s", R->rank, what,
                        I->node >= 0 ? R->g->nodes[I->node].name : "-", s);
}

static int group_index(const rt *R, int grp, int dev) {
  for (int k = R->p->group_off[grp]; k < R->p->group_off[grp + 1]; k++)
    if (R->p->group_dev[k] == dev) return k - R->p->group_off[grp];
  return -1;
}

/* A reduce-scatter's request slot: the group's n slabs of the buffer
 * (pcgc_zero_shard), counts and offsets in elements, and this member's. */
typedef struct rs_slot {
  int n, me;
  bool equal;
  int *cnt, *at;     /* [n] each (MPI's arguments: kept until the request completes) */
  int64_t *cnt64;    /* [n]: the backend's */
} rs_slot;

/* Slab j of buffer B over n members (pcgc_zero_shard) is cnt[j] elements at
 * at[j]; equal: all of one size. */
static pcgc_status zero_slabs(rt *R, const pcgc_plan_buf *B, int n, int *cnt, int *at, bool *equal) {
  pcgc_box whole, sh;
  pcgc_plan_buf_box(B, &whole);
  *equal = true;
  for (int j = 0; j < n; j++) {
    if (!pcgc_zero_shard(&whole, n, j, &sh) || box_numel(&sh) > INT_MAX)
      return pcgc_error_set(R->err, PCGC_ERR_INVALID, "a collective of '%s' over %d devices that do not split it",
                            R->g->nodes[B->node].name, n);
    cnt[j] = (int)box_numel(&sh);
    at[j] = j ? at[j - 1] + cnt[j - 1] : 0;
    *equal &= cnt[j] == cnt[0];
  }
  return PCGC_OK;
}

/* A router's load-balancing term joins the step's loss (as the reference
 * reports it): its piece's share, once per group (replica 0, not a
 * recomputation), from its logits (buffer `logits`) on the host. */
static pcgc_status route_aux(rt *R, const pcgc_node *n, const pcgc_ins *I, int logits, const pcgc_buf *seen,
                             int out0) {
  double aux = pcgc_attrs_float(n->attrs, "aux");
  int64_t c[PCGC_MAX_RANK], s, r;
  pcgc_piece_coords(&n->out[0], I->piece, c, &s, &r);
  if (!(aux > 0) || s != 0 || r != 0 || R->P->buf[out0].role == PCGC_BUF_RECOMPUTE) return PCGC_OK;
  pcgc_status st = PCGC_OK;
  pcgc_buf l = kbuf(R, logits);
  if (seen->dtype != l.dtype) { /* bf16 logits: the kernel's f32 copy */
    l = *seen;
    if (!R->be->host) {
      st = R->be->download(R->be, R->host_tmp, seen->data, (size_t)pcgc_buf_numel(seen) * 4, R->err);
      l.data = R->host_tmp;
    }
  } else {
    l.data = host_of(R, logits, true, &st);
  }
  if (st) return st;
  R->loss += pcgc_cpu_moe_aux_loss(&l, pcgc_attrs_int(n->attrs, "k"), aux,
                                   pcgc_graph_ref_type(R->g, n->in[0])->dims[0]);
  return PCGC_OK;
}

/* bf16 storage: a kernel computes in f32 on copies of its bf16 arguments
 * in the widening workspace (codegen's widen_bytes), and what it wrote is
 * rounded back into the bf16 buffers after. A buffer named twice is
 * widened once, so two gradients added into one buffer both land. */
typedef struct widening {
  int n, buf[2 * PCGC_VARIADIC + 2 * PCGC_MAX_INTS];
  char *at[2 * PCGC_VARIADIC + 2 * PCGC_MAX_INTS];
  bool back[2 * PCGC_VARIADIC + 2 * PCGC_MAX_INTS];
  int64_t used;
} widening;

/* Buffer b and its f32 copy at w: the copy widened from b (to_f32), or
 * rounded back into b. */
static pcgc_status convert_copy(rt *R, int b, char *w, bool to_f32) {
  const pcgc_plan_buf *B = &R->P->buf[b];
  pcgc_plan_buf F = *B;
  F.dtype = PCGC_F32;
  pcgc_box x;
  pcgc_plan_buf_box(B, &x);
  return to_f32 ? R->be->move(R->be, &F, w, B, data_of(R, b), &x, false, R->err)
                : R->be->move(R->be, B, data_of(R, b), &F, w, &x, false, R->err);
}

/* k (buffer b's kernel view) reads an f32 copy when b is bf16; fetch: the
 * copy starts with b's values (else the kernel only writes it); back: the
 * copy is rounded into b after the kernel. */
static pcgc_status widen(rt *R, widening *W, int b, pcgc_buf *k, bool fetch, bool back) {
  if (b < 0 || R->P->buf[b].dtype != PCGC_BF16) return PCGC_OK;
  const pcgc_plan_buf *B = &R->P->buf[b];
  for (int i = 0; i < W->n; i++)
    if (W->buf[i] == b) {
      k->data = W->at[i];
      k->dtype = PCGC_F32;
      W->back[i] |= back;
      return PCGC_OK;
    }
  int64_t bytes = pcgc_widened_bytes(B);
  if (W->used + bytes > R->P->widen_bytes || W->n == (int)(sizeof W->buf / sizeof *W->buf))
    return pcgc_error_set(R->err, PCGC_ERR_INVALID, "a kernel of '%s' widens more than the %lld bytes planned",
                          R->g->nodes[B->node].name, (long long)R->P->widen_bytes);
  char *w = R->widen + W->used;
  W->used += bytes;
  W->buf[W->n] = b;
  W->at[W->n] = w;
  W->back[W->n++] = back;
  k->data = w;
  k->dtype = PCGC_F32;
  return fetch ? convert_copy(R, b, w, true) : PCGC_OK;
}

/* The kernel's results, rounded back into their bf16 buffers. */
static pcgc_status narrow(rt *R, const widening *W) {
  pcgc_status st = PCGC_OK;
  for (int i = 0; i < W->n && !st; i++)
    if (W->back[i]) st = convert_copy(R, W->buf[i], W->at[i], false);
  return st;
}

static pcgc_status kernel(rt *R, const pcgc_ins *I) {
  const pcgc_node *n = &R->g->nodes[I->node];
  const int *a = R->P->args + I->args;
  int ni = n->n_in, no = n->n_out;
  pcgc_buf in[PCGC_VARIADIC], out[PCGC_MAX_INTS], dout[PCGC_MAX_INTS], din[PCGC_VARIADIC];
  pcgc_piece pin[PCGC_VARIADIC], pout[PCGC_MAX_INTS];
  pcgc_ptensor tin[PCGC_VARIADIC];
  for (int i = 0; i < ni; i++) {
    in[i] = kbuf(R, a[i]);
    pin[i] = kpiece(R, a[i]);
    tin[i] = *pcgc_graph_ref_type(R->g, n->in[i]);
  }
  for (int j = 0; j < no; j++) {
    out[j] = kbuf(R, a[ni + j]);
    pout[j] = kpiece(R, a[ni + j]);
  }
  pcgc_attrs attrs = *n->attrs;
  pcgc_ref_localize(n->kind, &attrs, tin, ni, in, no, out);
  pcgc_kernel_ctx ctx = {pin, pout, R->o->seed, pcgc_rng_stream(n->name), R->o->training, NULL, 0};
  /* a last argument past the kernel's: what forward keeps for backward (pcgc_op_saved_elems) */
  int nk = I->kind == PCGC_INS_FORWARD ? ni + no : 2 * ni + 2 * no;
  if (I->n_args > nk && a[nk] >= 0) {
    pcgc_buf sv = kbuf(R, a[nk]);
    ctx.saved = sv.data;
    ctx.saved_bytes = R->P->buf[a[nk]].bytes;
  }
  pcgc_backend *be = R->be;
  widening W;
  W.n = 0;
  W.used = 0;
  pcgc_status st = PCGC_OK;
  bool fwd = I->kind == PCGC_INS_FORWARD;
  for (int i = 0; i < ni && !st; i++) st = widen(R, &W, a[i], &in[i], true, false);
  for (int j = 0; j < no && !st; j++) st = widen(R, &W, a[ni + j], &out[j], !fwd, fwd);
  if (st) return st;
  if (fwd) {
    st = be->forward(be, n->kind, &attrs, ni, in, no, out, &ctx, R->err);
    if (st == PCGC_OK && n->kind == PCGC_OP_MOE_ROUTE) st = route_aux(R, n, I, a[0], &in[0], a[ni]);
    return st ? st : narrow(R, &W);
  }
  for (int j = 0; j < no && !st; j++) {
    dout[j] = kbuf(R, a[ni + no + j]);
    st = widen(R, &W, a[ni + no + j], &dout[j], true, false);
  }
  for (int i = 0; i < ni && !st; i++) {
    int b = a[ni + 2 * no + i];
    din[i] = b >= 0 ? kbuf(R, b) : in[i];
    if (b < 0) din[i].data = NULL;
    else st = widen(R, &W, b, &din[i], true, true); /* backward adds into din */
  }
  if (!st) st = be->backward(be, n->kind, &attrs, ni, in, no, out, dout, din, &ctx, R->err);
  return st ? st : narrow(R, &W);
}

static pcgc_status batchnorm(rt *R, const pcgc_ins *I) {
  const pcgc_node *n = &R->g->nodes[I->node];
  const int *a = R->P->args + I->args;
  const pcgc_ptensor *o = &n->out[0];
  double count = (double)pcgc_ptensor_numel(o) / (double)o->dims[1];
  pcgc_buf x = kbuf(R, a[0]);
  pcgc_backend *be = R->be;
  widening W;
  W.n = 0;
  W.used = 0;
  pcgc_status st = widen(R, &W, a[0], &x, true, false);
  if (st) return st;
  switch ((pcgc_ins_kind)I->kind) {
  case PCGC_INS_BN_STATS: return be->bn_stats(be, &x, data_of(R, a[1]), R->err);
  case PCGC_INS_BN_APPLY: {
    pcgc_buf sc = kbuf(R, a[1]), bi = kbuf(R, a[2]), y = kbuf(R, a[3]);
    if (!(st = widen(R, &W, a[3], &y, false, true)))
      st = be->bn_apply(be, n->attrs, &x, a[1] >= 0 ? &sc : NULL, a[2] >= 0 ? &bi : NULL, data_of(R, a[4]), count,
                        &y, R->err);
    return st ? st : narrow(R, &W);
  }
  case PCGC_INS_BN_BWD_STATS: { /* x dy scratch scale bias */
    pcgc_buf dy = kbuf(R, a[1]), sc = kbuf(R, a[3]), bi = kbuf(R, a[4]);
    if ((st = widen(R, &W, a[1], &dy, true, false))) return st;
    return be->bn_bwd_stats(be, n->attrs, &x, a[3] >= 0 ? &sc : NULL, a[4] >= 0 ? &bi : NULL, &dy,
                            data_of(R, a[2]), count, R->err);
  }
  default: { /* x scale dy dx dscale dbias scratch bias */
    pcgc_buf sc = kbuf(R, a[1]), dy = kbuf(R, a[2]), dx = kbuf(R, a[3]), dsc = kbuf(R, a[4]), dbi = kbuf(R, a[5]);
    pcgc_buf bi = kbuf(R, a[7]);
    if (!(st = widen(R, &W, a[2], &dy, true, false)) && !(st = widen(R, &W, a[3], &dx, true, true)))
      st = be->bn_bwd_apply(be, n->attrs, &x, a[1] >= 0 ? &sc : NULL, a[7] >= 0 ? &bi : NULL, &dy,
                            data_of(R, a[6]), count, a[3] >= 0 ? &dx : NULL, a[4] >= 0 ? &dsc : NULL,
                            a[5] >= 0 ? &dbi : NULL, R->err);
    return st ? st : narrow(R, &W);
  }
  }
}

/* The step's losses (its LOSS instructions' buffers, which live to the
 * step's end), read once the step is done: on a GPU one download each after
 * the step's last kernel, not a wait in its middle. */
static pcgc_status read_losses(rt *R) {
  const pcgc_device_program *P = R->P;
  for (int i = 0; i < P->n_ins; i++) {
    const pcgc_ins *I = &P->ins[i];
    if (I->kind != PCGC_INS_LOSS || I->src < 0) continue;
    pcgc_buf b = kbuf(R, I->src);
    double v[1] = {0};
    float f[1] = {0};
    bool f64 = b.dtype == PCGC_F64;
    pcgc_status st = R->be->download(R->be, f64 ? (void *)v : (void *)f, b.data, f64 ? sizeof v : sizeof f, R->err);
    if (st) return st;
    R->loss += f64 ? v[0] : f[0];
  }
  return PCGC_OK;
}

/* Completes the step's j-th send. */
static pcgc_status complete_send(rt *R, int j) {
  if (R->dev_comm) return R->be->comm_wait(R->be, R->P->n_requests + j, R->err);
  int rc = MPI_Wait(&R->sends[j], MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS)
    return pcgc_error_set(R->err, PCGC_ERR_IO, "completing send %d of the step failed (MPI error %d)", j + 1, rc);
  return PCGC_OK;
}

/* Completes the sends whose staging the k-th SEND is about to write again
 * (the program's send_wait list). */
static pcgc_status settle_sends(rt *R, int k) {
  const pcgc_device_program *P = R->P;
  for (int w = P->send_wait_off[k]; w < P->send_wait_off[k + 1]; w++) {
    int j = P->send_wait[w];
    if (j < 0 || j >= k)
      return pcgc_error_set(R->err, PCGC_ERR_INVALID, "send %d waits for send %d, which is not earlier", k + 1, j + 1);
    pcgc_status st = complete_send(R, j);
    if (st) return st;
  }
  return PCGC_OK;
}

/* The sends straight from their buffers that complete before instruction i
 * (send_done), in that order: R->dn lists them, dn_next the next. */
static pcgc_status sends_done_before(rt *R, int i) {
  const pcgc_device_program *P = R->P;
  for (; R->dn_next < R->dn_n && P->send_done[R->dn[R->dn_next]] <= i; R->dn_next++) {
    int k = R->dn[R->dn_next];
    if (k >= R->n_sends)
      return pcgc_error_set(R->err, PCGC_ERR_INVALID, "send %d completes at instruction %d, before it is made", k + 1, i);
    pcgc_status st = complete_send(R, k);
    if (st) return st;
  }
  return PCGC_OK;
}

/* The run of consecutive SENDs that starts at instruction pc, the step's
 * k-th (pcgc_send_pack_run): completes the sends whose staging bytes the
 * run reuses, then packs every box of the run into its staging at once (one
 * launch where the backend has move_list), as the prediction charges. */
static pcgc_status pack_sends(rt *R, int pc, int k) {
  const pcgc_device_program *P = R->P;
  pcgc_backend *be = R->be;
  int n = pcgc_send_pack_run(P, pc, k);
  if (n < 1) n = 1;
  pcgc_plan_buf sd[PCGC_PACK_MAX];
  const pcgc_plan_buf *src[PCGC_PACK_MAX];
  const void *sp[PCGC_PACK_MAX];
  void *dp[PCGC_PACK_MAX];
  pcgc_box x[PCGC_PACK_MAX];
  pcgc_status st = PCGC_OK;
  for (int i = 0; i < n && !st; i++) {
    const pcgc_ins *I = &P->ins[pc + i];
    x[i] = region(R, I, I->src);
    src[i] = &P->buf[I->src];
    sd[i] = stage_desc(&x[i], src[i]->dtype);
    sp[i] = data_of(R, I->src);
    int64_t bytes = box_numel(&x[i]) * (int64_t)pcgc_dtype_size(src[i]->dtype), at = P->send_off[k + i];
    if (at < 0 || at + bytes > P->send_bytes)
      return pcgc_error_set(R->err, PCGC_ERR_INVALID, "send %d's staging [%lld, %lld) lies outside the %lld planned",
                            k + i + 1, (long long)at, (long long)(at + bytes), (long long)P->send_bytes);
    dp[i] = R->send_stage + at;
    st = settle_sends(R, k + i);
  }
  if (!st && n > 1 && be->move_list) st = be->move_list(be, n, sd, dp, src, sp, x, NULL, R->err);
  else
    for (int i = 0; i < n && !st; i++) st = be->move(be, &sd[i], dp[i], src[i], sp[i], &x[i], false, R->err);
  if (!st) R->packed = k + n;
  return st;
}

/* The box a COPY moves: its own, or the overlap of its two buffers (empty
 * where they have none). */
static pcgc_box copy_box(rt *R, const pcgc_ins *I) {
  pcgc_box x = region(R, I, I->dst), s, o;
  if (I->box >= 0) return x;
  pcgc_plan_buf_box(&R->P->buf[I->src], &s);
  if (pcgc_box_intersect(&x, &s, &o)) return o;
  for (int d = 0; d < x.rank; d++) x.len[d] = 0;
  return x;
}

/* The run of RECVs that unpack starting at instruction pc
 * (pcgc_recv_unpack_run, n of them): every message received into the
 * receive staging back to back, in the run's order, then all unpacked at
 * once (one launch where the backend has move_list), with the run's local
 * COPYs, as the prediction charges. */
static pcgc_status unpack_recvs(rt *R, int pc, int n) {
  const pcgc_device_program *P = R->P;
  pcgc_backend *be = R->be;
  int64_t off[PCGC_PACK_MAX], total = 0;
  if (pcgc_recv_unpack_run(P, pc, off, &total) != n || total > P->max_message_bytes)
    return pcgc_error_set(R->err, PCGC_ERR_INVALID, "a run of %d receives needs %lld bytes of staging, %lld planned", n,
                          (long long)total, (long long)P->max_message_bytes);
  pcgc_plan_buf dst[PCGC_PACK_MAX], sd[PCGC_PACK_MAX];
  const pcgc_plan_buf *src[PCGC_PACK_MAX];
  const void *sp[PCGC_PACK_MAX];
  void *dp[PCGC_PACK_MAX];
  pcgc_box x[PCGC_PACK_MAX];
  bool add[PCGC_PACK_MAX];
  pcgc_status st = PCGC_OK;
  for (int i = 0; i < n && !st; i++) {
    const pcgc_ins *I = &P->ins[pc + i];
    if (I->kind == PCGC_INS_COPY) { /* a local piece, moved by the same launch */
      x[i] = copy_box(R, I);
      dst[i] = P->buf[I->dst];
      src[i] = &P->buf[I->src];
      sp[i] = data_of(R, I->src);
      dp[i] = data_of(R, I->dst);
      add[i] = I->add;
      continue;
    }
    x[i] = region(R, I, I->dst);
    dst[i] = P->buf[I->dst];
    sd[i] = stage_desc(&x[i], dst[i].dtype);
    src[i] = &sd[i];
    sp[i] = R->recv_stage + off[i];
    dp[i] = data_of(R, I->dst);
    add[i] = I->add;
    int64_t k = box_numel(&x[i]);
    if (R->dev_comm) {
      st = be->recv(be, R->from[I->peer], R->recv_stage + off[i], k, dst[i].dtype, 0, R->err);
      continue;
    }
    int rc = MPI_Recv(R->recv_h + off[i], (int)k, mpi_type(dst[i].dtype), I->peer, I->tag, MPI_COMM_WORLD,
                      MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(R, rc, "receive", I);
    st = from_host(R, R->recv_stage + off[i], R->recv_h + off[i], k * (int64_t)pcgc_dtype_size(dst[i].dtype));
  }
  if (!st && n > 1 && be->move_list) st = be->move_list(be, n, dst, dp, src, sp, x, add, R->err);
  else
    for (int i = 0; i < n && !st; i++) st = be->move(be, &dst[i], dp[i], src[i], sp[i], &x[i], add[i], R->err);
  if (!st) R->unpacked = pc + n;
  return st;
}

/* Open MPI advances a non-blocking collective only inside MPI calls (no
 * progress thread): between instructions, a test of the oldest all-reduce
 * still open moves every one of them (and the sends) on, so they run while
 * backward computes instead of all at their WAITs. */
static void progress(rt *R) {
  if (!R->n_pend) return;
  int done = 0;
  if (MPI_Test(&R->reqs[R->pend[0]], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
    memmove(R->pend, R->pend + 1, (size_t)(R->n_pend - 1) * sizeof *R->pend);
    R->n_pend--;
  }
}

/* MPI_Iallreduce of host buffer h (n elements of t) over I's group into
 * request slot I->tag, kept open for progress() until its WAIT. */
static pcgc_status iallreduce(rt *R, const pcgc_ins *I, void *h, int64_t n, pcgc_dtype t) {
  int rc = MPI_Iallreduce(MPI_IN_PLACE, h, (int)n, mpi_type(t), sum_op(R, t), R->comm[I->peer], &R->reqs[I->tag]);
  if (rc != MPI_SUCCESS) return mpi_fail(R, rc, "all-reduce", I);
  R->pend[R->n_pend++] = I->tag;
  return PCGC_OK;
}

static pcgc_status exec_one(rt *R, const pcgc_ins *I) {
  const pcgc_device_program *P = R->P;
  pcgc_backend *be = R->be;
  pcgc_status st = PCGC_OK;
  int rc = MPI_SUCCESS;
  switch ((pcgc_ins_kind)I->kind) {
  case PCGC_INS_FORWARD:
  case PCGC_INS_BACKWARD: return kernel(R, I);
  case PCGC_INS_BN_STATS:
  case PCGC_INS_BN_APPLY:
  case PCGC_INS_BN_BWD_STATS:
  case PCGC_INS_BN_BWD_APPLY: return batchnorm(R, I);
  case PCGC_INS_COPY: {
    int pc = (int)(I - P->ins), run;
    if (pc < R->unpacked) return PCGC_OK; /* moved with the receives of its run */
    if ((run = pcgc_recv_unpack_run(P, pc, NULL, NULL)) > 1) return unpack_recvs(R, pc, run); /* it leads one */
    pcgc_box x = copy_box(R, I);
    return be->move(be, &P->buf[I->dst], data_of(R, I->dst), &P->buf[I->src], data_of(R, I->src), &x, I->add, R->err);
  }
  case PCGC_INS_ZERO: {
    if (I->dst >= 0) return be->zero(be, data_of(R, I->dst), (size_t)P->buf[I->dst].bytes, R->err);
    void *p[PCGC_ZERO_MAX];
    size_t bytes[PCGC_ZERO_MAX];
    int n = I->n_args;
    if (n < 1 || n > PCGC_ZERO_MAX)
      return pcgc_error_set(R->err, PCGC_ERR_INVALID, "a ZERO instruction lists %d buffers (1 to %d)", n,
                            PCGC_ZERO_MAX);
    for (int i = 0; i < n; i++) {
      int b = P->args[I->args + i];
      p[i] = data_of(R, b);
      bytes[i] = (size_t)P->buf[b].bytes;
    }
    if (be->zero_list) return be->zero_list(be, n, p, bytes, R->err);
    for (int i = 0; i < n; i++) {
      pcgc_status st = be->zero(be, p[i], bytes[i], R->err);
      if (st != PCGC_OK) return st;
    }
    return PCGC_OK;
  }
  case PCGC_INS_SEED: { /* a kept seed holds its value from the first step on */
    float one = (float)I->tag;
    if (R->seeded && P->buf[I->dst].persistent) return PCGC_OK;
    return be->upload(be, data_of(R, I->dst), &one, sizeof one, R->err);
  }
  case PCGC_INS_LOSS: return PCGC_OK; /* read once the step is done (read_losses) */
  case PCGC_INS_SEND: {
    pcgc_box x = region(R, I, I->src);
    const pcgc_plan_buf *S = &P->buf[I->src];
    int64_t n = box_numel(&x), bytes = n * (int64_t)pcgc_dtype_size(S->dtype);
    int k = R->n_sends;
    if (k >= P->n_sends)
      return pcgc_error_set(R->err, PCGC_ERR_INVALID, "send %d of a stream that plans %d", k + 1, P->n_sends);
    if (P->send_done && P->send_done[k] >= 0) { /* straight from its buffer (a contiguous run of it) */
      pcgc_box whole;
      int64_t first;
      pcgc_plan_buf_box(S, &whole);
      if (!pcgc_box_contiguous_in(&x, &whole, &first))
        return pcgc_error_set(R->err, PCGC_ERR_INVALID, "send %d from its buffer is no contiguous run of it", k + 1);
      char *from = (char *)data_of(R, I->src) + first * (int64_t)pcgc_dtype_size(S->dtype);
      R->sends[k] = MPI_REQUEST_NULL;
      R->n_sends++;
      if (R->dev_comm) {
        if ((st = be->send(be, R->to[I->peer], from, n, S->dtype, 1, R->err))) return st;
        return be->send_mark(be, R->to[I->peer], P->n_requests + k, R->err);
      }
      if (!be->host) { /* through host MPI: a host copy of its own, which lives until the send completes */
        char *h = R->direct_h + R->direct_at[k];
        if ((st = to_host(R, h, from, bytes))) return st;
        from = h;
      }
      rc = MPI_Isend(from, (int)n, mpi_type(S->dtype), I->peer, I->tag, MPI_COMM_WORLD, &R->sends[k]);
      return rc == MPI_SUCCESS ? PCGC_OK : mpi_fail(R, rc, "send", I);
    }
    /* pack_sends checked its staging (send_off) when it packed the run */
    if (k >= R->packed && (st = pack_sends(R, (int)(I - P->ins), k))) return st;
    char *buf = R->send_stage + P->send_off[k], *h = R->send_h + P->send_off[k];
    R->sends[k] = MPI_REQUEST_NULL;
    R->n_sends++;
    if (R->dev_comm) {
      if ((st = be->send(be, R->to[I->peer], buf, n, S->dtype, 1, R->err))) return st;
      return be->send_mark(be, R->to[I->peer], P->n_requests + k, R->err);
    }
    if ((st = to_host(R, h, buf, bytes))) return st;
    rc = MPI_Isend(h, (int)n, mpi_type(S->dtype), I->peer, I->tag, MPI_COMM_WORLD, &R->sends[k]);
    return rc == MPI_SUCCESS ? PCGC_OK : mpi_fail(R, rc, "send", I);
  }
  case PCGC_INS_RECV: {
    pcgc_box x = region(R, I, I->dst);
    const pcgc_plan_buf *D = &P->buf[I->dst];
    pcgc_plan_buf sd = stage_desc(&x, D->dtype);
    int64_t n = box_numel(&x), at;
    int pc = (int)(I - P->ins), run;
    if (pc < R->unpacked) return PCGC_OK; /* received with its run's first */
    if ((run = pcgc_recv_unpack_run(P, pc, NULL, NULL)) > 1) return unpack_recvs(R, pc, run);
    if (pcgc_recv_in_place(P, I, &at)) { /* a contiguous run of dst, set: the message lands there */
      char *to = (char *)data_of(R, I->dst) + at;
      if (R->dev_comm) return be->recv(be, R->from[I->peer], to, n, D->dtype, 0, R->err);
      rc = MPI_Recv(be->host ? to : R->recv_h, (int)n, mpi_type(D->dtype), I->peer, I->tag, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return mpi_fail(R, rc, "receive", I);
      return be->host ? PCGC_OK : from_host(R, to, R->recv_h, n * (int64_t)pcgc_dtype_size(D->dtype));
    }
    if (R->dev_comm) {
      if ((st = be->recv(be, R->from[I->peer], R->recv_stage, n, D->dtype, 0, R->err))) return st;
      return be->move(be, D, data_of(R, I->dst), &sd, R->recv_stage, &x, I->add, R->err);
    }
    rc = MPI_Recv(R->recv_h, (int)n, mpi_type(D->dtype), I->peer, I->tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(R, rc, "receive", I);
    if ((st = from_host(R, R->recv_stage, R->recv_h, n * (int64_t)pcgc_dtype_size(D->dtype)))) return st;
    return be->move(be, D, data_of(R, I->dst), &sd, R->recv_stage, &x, I->add, R->err);
  }
  case PCGC_INS_BCAST: {
    int b = I->src >= 0 ? I->src : I->dst;
    pcgc_box x = region(R, I, b);
    const pcgc_plan_buf *B = &P->buf[b];
    pcgc_plan_buf sd = stage_desc(&x, B->dtype);
    int64_t n = box_numel(&x), bytes = n * (int64_t)pcgc_dtype_size(B->dtype);
    if (R->dev_comm) {
      if ((I->src >= 0 && (st = be->move(be, &sd, R->recv_stage, B, data_of(R, b), &x, false, R->err))) ||
          (st = be->broadcast(be, R->dcomm[I->peer], R->recv_stage, n, B->dtype, group_index(R, I->peer, I->root),
                              R->err)))
        return st;
      return I->dst >= 0 ? be->move(be, B, data_of(R, b), &sd, R->recv_stage, &x, I->add, R->err) : PCGC_OK;
    }
    if (I->src >= 0 && ((st = be->move(be, &sd, R->recv_stage, B, data_of(R, b), &x, false, R->err)) ||
                        (st = to_host(R, R->recv_h, R->recv_stage, bytes))))
      return st;
    rc = MPI_Bcast(R->recv_h, (int)n, mpi_type(B->dtype), group_index(R, I->peer, I->root), R->comm[I->peer]);
    if (rc != MPI_SUCCESS) return mpi_fail(R, rc, "broadcast", I);
    if (I->dst >= 0 && ((st = from_host(R, R->recv_stage, R->recv_h, bytes)) ||
                        (st = be->move(be, B, data_of(R, b), &sd, R->recv_stage, &x, I->add, R->err))))
      return st;
    return PCGC_OK;
  }
  case PCGC_INS_REDUCE: {
    int b = I->src >= 0 ? I->src : I->dst;
    pcgc_box x = region(R, I, b);
    pcgc_dtype t = P->buf[b].dtype;
    pcgc_plan_buf sd = stage_desc(&x, t);
    int64_t n = box_numel(&x), bytes = n * (int64_t)pcgc_dtype_size(t);
    if (R->dev_comm) {
      bool root = I->root == R->rank;
      if ((st = I->src >= 0 ? be->move(be, &sd, R->recv_stage, &P->buf[I->src], data_of(R, I->src), &x, false, R->err)
                            : be->zero(be, R->recv_stage, (size_t)bytes, R->err)) ||
          (st = be->reduce(be, R->dcomm[I->peer], R->recv_stage, n, t, group_index(R, I->peer, I->root), R->err)))
        return st;
      return root ? be->move(be, &P->buf[I->dst], data_of(R, I->dst), &sd, R->recv_stage, &x, I->add, R->err) : PCGC_OK;
    }
    if (I->src >= 0) {
      if ((st = be->move(be, &sd, R->recv_stage, &P->buf[I->src], data_of(R, I->src), &x, false, R->err)) ||
          (st = to_host(R, R->recv_h, R->recv_stage, bytes)))
        return st;
    } else {
      memset(R->recv_h, 0, (size_t)bytes);
    }
    bool root = I->root == R->rank;
    int ri = group_index(R, I->peer, I->root);
    rc = root ? MPI_Reduce(MPI_IN_PLACE, R->recv_h, (int)n, mpi_type(t), sum_op(R, t), ri, R->comm[I->peer])
              : MPI_Reduce(R->recv_h, NULL, (int)n, mpi_type(t), sum_op(R, t), ri, R->comm[I->peer]);
    if (rc != MPI_SUCCESS) return mpi_fail(R, rc, "reduce", I);
    if (root && ((st = from_host(R, R->recv_stage, R->recv_h, bytes)) ||
                 (st = be->move(be, &P->buf[I->dst], data_of(R, I->dst), &sd, R->recv_stage, &x, I->add, R->err))))
      return st;
    return PCGC_OK;
  }
  case PCGC_INS_ALLREDUCE:
  case PCGC_INS_ALLREDUCE_START: {
    if (R->fault_no_allreduce) return PCGC_OK;
    int64_t at, span;
    if (I->kind == PCGC_INS_ALLREDUCE_START && pcgc_allreduce_span(P, I, &at, &span)) { /* a gradient bucket */
      char *data = R->arena + at;
      int64_t n = span / (int64_t)pcgc_dtype_size(PCGC_F32);
      if (R->dev_comm) return be->allreduce_start(be, R->dcomm[I->peer], data, n, PCGC_F32, I->tag, R->err);
      char *h = be->host ? data : R->req_h[I->tag];
      if ((st = to_host(R, h, data, span))) return st;
      return iallreduce(R, I, h, n, PCGC_F32);
    }
    pcgc_box x = region(R, I, I->dst);
    const pcgc_plan_buf *D = &P->buf[I->dst];
    pcgc_plan_buf sd = stage_desc(&x, D->dtype);
    bool now_ = I->kind == PCGC_INS_ALLREDUCE;
    if (!now_ && pcgc_allreduce_in_place(P, I)) { /* the whole buffer: reduced where it lies */
      int64_t n = box_numel(&x), bytes = n * (int64_t)pcgc_dtype_size(D->dtype);
      char *data = data_of(R, I->dst);
      if (R->dev_comm) return be->allreduce_start(be, R->dcomm[I->peer], data, n, D->dtype, I->tag, R->err);
      char *h = be->host ? data : R->req_h[I->tag];
      if ((st = to_host(R, h, data, bytes))) return st;
      return iallreduce(R, I, h, n, D->dtype);
    }
    if (now_ && pcgc_allreduce_in_place(P, I)) { /* one contiguous run of the buffer: reduced where it lies */
      int64_t n = box_numel(&x), bytes = n * (int64_t)pcgc_dtype_size(D->dtype);
      char *data = (char *)data_of(R, I->dst) + pcgc_allreduce_at(P, I), *h = be->host ? data : R->recv_h;
      if (R->dev_comm) return be->allreduce(be, R->dcomm[I->peer], data, n, D->dtype, R->err);
      if ((st = to_host(R, h, data, bytes))) return st;
      rc = MPI_Allreduce(MPI_IN_PLACE, h, (int)n, mpi_type(D->dtype), sum_op(R, D->dtype), R->comm[I->peer]);
      if (rc != MPI_SUCCESS) return mpi_fail(R, rc, "all-reduce", I);
      return from_host(R, data, h, bytes);
    }
    char *stage = now_ ? R->recv_stage : R->req_stage[I->tag], *h = now_ ? R->recv_h : R->req_h[I->tag];
    int64_t n = box_numel(&x), bytes = n * (int64_t)pcgc_dtype_size(D->dtype);
    if ((st = be->move(be, &sd, stage, D, data_of(R, I->dst), &x, false, R->err))) return st;
    if (R->dev_comm && now_)
      return (st = be->allreduce(be, R->dcomm[I->peer], stage, n, D->dtype, R->err))
                 ? st : be->move(be, D, data_of(R, I->dst), &sd, stage, &x, false, R->err);
    if (R->dev_comm) return be->allreduce_start(be, R->dcomm[I->peer], stage, n, D->dtype, I->tag, R->err);
    if ((st = to_host(R, h, stage, bytes))) return st;
    if (now_) {
      rc = MPI_Allreduce(MPI_IN_PLACE, h, (int)n, mpi_type(D->dtype), sum_op(R, D->dtype), R->comm[I->peer]);
      if (rc != MPI_SUCCESS) return mpi_fail(R, rc, "all-reduce", I);
      if ((st = from_host(R, stage, h, bytes))) return st;
      return be->move(be, D, data_of(R, I->dst), &sd, stage, &x, false, R->err);
    }
    return iallreduce(R, I, h, n, D->dtype);
  }
  case PCGC_INS_REDUCESCATTER_START: { /* slab `me` of the cell becomes the group's sum */
    if (R->fault_no_allreduce) return PCGC_OK;
    int cb = I->src >= 0 ? I->src : I->dst; /* the cell: the full gradient (ZeRO-2: src, the sum to dst) */
    const pcgc_plan_buf *B = &P->buf[cb];
    const rs_slot *Q = &R->rs[I->tag];
    char *data = data_of(R, cb), *out = data_of(R, I->dst);
    int64_t es = (int64_t)pcgc_dtype_size(B->dtype);
    if (R->dev_comm) /* in place: into the cell's own slab */
      return be->reduce_scatter_start(be, R->dcomm[I->peer], data, I->src >= 0 ? out : data + Q->at[Q->me] * es,
                                      Q->cnt64, B->dtype, I->tag, R->err);
    char *h = be->host ? data : R->req_h[I->tag];
    if ((st = to_host(R, h, data, B->bytes))) return st;
    /* in place, MPI leaves this member's sum at the start of h: its WAIT moves it to the slab; out
     * of place it goes to dst (from a GPU: to the host mirror's end, which the WAIT uploads) */
    void *sb = I->src >= 0 ? h : MPI_IN_PLACE, *rb = I->src < 0 ? h : be->host ? out : h + B->bytes;
    rc = Q->equal ? MPI_Ireduce_scatter_block(sb, rb, Q->cnt[0], mpi_type(B->dtype), sum_op(R, B->dtype),
                                              R->comm[I->peer], &R->reqs[I->tag])
                  : MPI_Ireduce_scatter(sb, rb, Q->cnt, mpi_type(B->dtype), sum_op(R, B->dtype), R->comm[I->peer],
                                        &R->reqs[I->tag]);
    if (rc != MPI_SUCCESS) return mpi_fail(R, rc, "reduce-scatter", I);
    R->pend[R->n_pend++] = I->tag;
    return PCGC_OK;
  }
  case PCGC_INS_WAIT: {
    if (R->fault_no_allreduce) return PCGC_OK;
    for (int k = 0; k < R->n_pend; k++) /* no longer progressed between instructions */
      if (R->pend[k] == I->tag) {
        memmove(R->pend + k, R->pend + k + 1, (size_t)(R->n_pend - k - 1) * sizeof *R->pend);
        R->n_pend--;
        break;
      }
    if (R->rs[I->tag].n) { /* a reduce-scatter: this member's sum to its slab */
      const rs_slot *Q = &R->rs[I->tag];
      if (R->dev_comm) return be->comm_wait(be, I->tag, R->err);
      rc = MPI_Wait(&R->reqs[I->tag], MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return mpi_fail(R, rc, "reduce-scatter", I);
      int64_t es = (int64_t)pcgc_dtype_size(P->buf[I->dst].dtype);
      char *data = data_of(R, I->dst);
      if (I->src >= 0) /* out of place (ZeRO-2): MPI wrote dst, or the host mirror's end */
        return be->host ? PCGC_OK
                        : from_host(R, data, R->req_h[I->tag] + P->buf[I->src].bytes, (int64_t)Q->cnt[Q->me] * es);
      if (be->host) {
        memmove(data + (int64_t)Q->at[Q->me] * es, data, (size_t)((int64_t)Q->cnt[Q->me] * es));
        return PCGC_OK;
      }
      return from_host(R, data + (int64_t)Q->at[Q->me] * es, R->req_h[I->tag], (int64_t)Q->cnt[Q->me] * es);
    }
    if (pcgc_allreduce_in_place(P, I)) {
      if (R->dev_comm) return be->comm_wait(be, I->tag, R->err);
      rc = MPI_Wait(&R->reqs[I->tag], MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return mpi_fail(R, rc, "all-reduce", I);
      int64_t at, span;
      if (pcgc_allreduce_span(P, I, &at, &span)) return from_host(R, R->arena + at, R->req_h[I->tag], span);
      pcgc_box x = region(R, I, I->dst);
      return from_host(R, data_of(R, I->dst), R->req_h[I->tag], box_numel(&x) * (int64_t)pcgc_dtype_size(P->buf[I->dst].dtype));
    }
    if (R->dev_comm) {
      pcgc_box x = region(R, I, I->dst);
      pcgc_plan_buf sd = stage_desc(&x, P->buf[I->dst].dtype);
      if ((st = be->comm_wait(be, I->tag, R->err))) return st;
      return be->move(be, &P->buf[I->dst], data_of(R, I->dst), &sd, R->req_stage[I->tag], &x, false, R->err);
    }
    rc = MPI_Wait(&R->reqs[I->tag], MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(R, rc, "all-reduce", I);
    /* a WAIT names the buffer and box of its START */
    pcgc_box x = region(R, I, I->dst);
    pcgc_plan_buf sd = stage_desc(&x, P->buf[I->dst].dtype);
    if ((st = from_host(R, R->req_stage[I->tag], R->req_h[I->tag], box_numel(&x) * (int64_t)pcgc_dtype_size(sd.dtype))))
      return st;
    return be->move(be, &P->buf[I->dst], data_of(R, I->dst), &sd, R->req_stage[I->tag], &x, false, R->err);
  }
  case PCGC_INS_UPDATE: {
    const int *a = P->args + I->args;
    if (I->dst < 0) { /* a gradient bucket's weights: one step over the spans of them */
      int64_t at[4], span;
      if (!pcgc_update_spans(P, I, at, &span))
        return pcgc_error_set(R->err, PCGC_ERR_INVALID, "a bucket's update whose weights, gradients and state do "
                              "not lie back to back alike in the arena (the program was not planned by this "
                              "pcgc's codegen)");
      pcgc_buf k[4];
      for (int q = 0; q < 4; q++) {
        memset(&k[q], 0, sizeof k[q]);
        k[q].dtype = PCGC_F32;
        k[q].rank = 1;
        k[q].dims[0] = span / (int64_t)sizeof(float);
        k[q].data = at[q] >= 0 ? R->arena + at[q] : NULL;
      }
      return be->update(be, &R->o->opt, &k[0], &k[1], at[2] >= 0 ? &k[2] : NULL, at[3] >= 0 ? &k[3] : NULL, R->step,
                        R->err);
    }
    pcgc_buf w = kbuf(R, I->dst), gr = kbuf(R, I->src), m = kbuf(R, a[0]), v = kbuf(R, a[1]);
    if (I->box >= 0) { /* ZeRO-1: a slab of the weight and its gradient, contiguous in both */
      pcgc_box x = region(R, I, I->dst);
      if ((st = slab(R, I->dst, &x, &w)) || (st = slab(R, I->src, &x, &gr))) return st;
    }
    return be->update(be, &R->o->opt, &w, &gr, a[0] >= 0 ? &m : NULL, a[1] >= 0 ? &v : NULL, R->step, R->err);
  }
  case PCGC_INS_ALLGATHER: { /* slab j (pcgc_zero_shard) from the group's j-th member, in place */
    const pcgc_plan_buf *B = &P->buf[I->dst];
    int n = R->p->group_off[I->peer + 1] - R->p->group_off[I->peer];
    int64_t es = (int64_t)pcgc_dtype_size(B->dtype);
    char *data = data_of(R, I->dst);
    if (I->src >= 0) { /* ZeRO-3: this member's slab, kept apart, into its place in the cell first */
      pcgc_box x;
      pcgc_plan_buf_box(&P->buf[I->src], &x);
      if ((st = be->move(be, B, data, &P->buf[I->src], data_of(R, I->src), &x, false, R->err))) return st;
    }
    int *cnt = malloc(2 * (size_t)(n > 0 ? n : 1) * sizeof *cnt), *at = cnt ? cnt + n : NULL;
    if (!cnt) return pcgc_error_set(R->err, PCGC_ERR_NOMEM, "out of memory");
    bool equal = true;
    st = zero_slabs(R, B, n, cnt, at, &equal);
    for (int j = 0; R->dev_comm && j < n && !st; j++)
      st = be->broadcast(be, R->dcomm[I->peer], data + (int64_t)at[j] * es, cnt[j], B->dtype, j, R->err);
    if (R->dev_comm || st) {
      free(cnt);
      return st;
    }
    char *h = be->host ? data : malloc((size_t)B->bytes);
    if (!h) {
      free(cnt);
      return pcgc_error_set(R->err, PCGC_ERR_NOMEM, "out of host memory for an all-gather of %lld bytes",
                            (long long)B->bytes);
    }
    if (!(st = to_host(R, h, data, B->bytes))) {
      MPI_Datatype ty = mpi_type(B->dtype);
      rc = equal ? MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, cnt[0], ty, R->comm[I->peer])
                 : MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, cnt, at, ty, R->comm[I->peer]);
      st = rc != MPI_SUCCESS ? mpi_fail(R, rc, "all-gather", I) : from_host(R, data, h, B->bytes);
    }
    if (h != data) free(h);
    free(cnt);
    return st;
  }
  default: return pcgc_error_set(R->err, PCGC_ERR_INVALID, "unknown instruction kind %d", I->kind);
  }
}

/* Weights and data: each rank initialises exactly its boxes, as the reference would. */
static pcgc_status init_sources(rt *R) {
  const pcgc_device_program *P = R->P;
  pcgc_status st = PCGC_OK;
  for (int b = 0; b < P->n_buf && !st; b++) {
    const pcgc_plan_buf *B = &P->buf[b];
    if (B->role != PCGC_BUF_SOURCE) continue;
    const pcgc_node *n = &R->g->nodes[B->node];
    pcgc_buf k = kbuf(R, b);
    k.data = host_of(R, b, false, &st);
    pcgc_piece q = kpiece(R, b);
    uint64_t stream = pcgc_rng_stream(n->name);
    if (n->kind == PCGC_OP_WEIGHT && n->value) {
      pcgc_plan_buf whole = whole_desc(&n->out[0]);
      pcgc_box x;
      pcgc_plan_buf_box(B, &x);
      pcgc_box_move_host(B, k.data, &whole, (const char *)n->value, &x, false);
    } else if (n->kind == PCGC_OP_WEIGHT) {
      pcgc_cpu_init_weight(&k, (pcgc_init)pcgc_attrs_int(n->attrs, "init"), pcgc_attrs_float(n->attrs, "scale"),
                           R->o->seed, stream, &q);
    } else {
      int64_t bound = pcgc_dtype_is_float(n->out[0].dtype) ? 0 : pcgc_ref_data_bound(R->g, n->id);
      pcgc_cpu_fill_random(&k, bound, R->o->seed, stream, &q);
    }
    st = host_done(R, b);
  }
  return st;
}

/* Where this rank is, for the step timeout's message: signal-safe globals. */
static volatile sig_atomic_t g_step_rank = -1, g_step = 0, g_ins = -1, g_kind = -1, g_peer = -1;
static double g_timeout;
static char **g_group_text; /* per group: "devices 0, 1, 2, 3", made before the first step */
static int g_n_groups;

static void on_alarm(int sig) {
  (void)sig;
  char msg[400];
  int k = g_kind, n;
  const char *what = k == PCGC_INS_RECV ? "receiving from device" : k == PCGC_INS_SEND ? "sending to device"
                     : k == PCGC_INS_WAIT || k == PCGC_INS_BCAST || k == PCGC_INS_REDUCE || k == PCGC_INS_ALLREDUCE ||
                               k == PCGC_INS_ALLGATHER || k == PCGC_INS_REDUCESCATTER_START
                         ? "in a collective of group" : NULL;
  int gp = g_peer;
  if (k == PCGC_INS_KIND_COUNT) /* after the stream: completing sends, summing the loss */
    n = snprintf(msg, sizeof msg,
                 "pcgc run: error: rank %d: step %d waited more than %g s for the other ranks to finish the step "
                 "(its sends, the loss sum over all devices): one of their processes died or hangs. Aborting the "
                 "job.\n",
                 (int)g_step_rank, (int)g_step, g_timeout);
  else if (what && k != PCGC_INS_RECV && k != PCGC_INS_SEND)
    n = snprintf(msg, sizeof msg,
                 "pcgc run: error: rank %d: step %d waited more than %g s at instruction %d, in a collective of "
                 "%s: one of their processes died or hangs. Aborting the job.\n",
                 (int)g_step_rank, (int)g_step, g_timeout, (int)g_ins,
                 gp >= 0 && gp < g_n_groups && g_group_text && g_group_text[gp] ? g_group_text[gp] : "a group");
  else if (what)
    n = snprintf(msg, sizeof msg,
                 "pcgc run: error: rank %d: step %d waited more than %g s at instruction %d, %s %d: that device's "
                 "process died or hangs. Aborting the job.\n",
                 (int)g_step_rank, (int)g_step, g_timeout, (int)g_ins, what, (int)g_peer);
  else
    n = snprintf(msg, sizeof msg,
                 "pcgc run: error: rank %d: step %d took more than %g s (at instruction %d); another rank died or "
                 "hangs, or the step needs a longer --step-timeout. Aborting the job.\n",
                 (int)g_step_rank, (int)g_step, g_timeout, (int)g_ins);
  if (n > 0) {
    ssize_t w = write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
    (void)w;
  }
  _exit(5);
}

/* This rank's buffer of weight `node`'s `role` (-1: none) and the box of it
 * whose values are right after the step: all of it, except for a gradient,
 * which is the buffer its update reads (ZeRO-2: the slab's own, the full one
 * is gone) and, where that update is split (ZeRO), the slab it reads (the
 * reduce-scatter summed that slab alone). */
static int held_of(const rt *R, int node, pcgc_buf_role role, pcgc_box *x) {
  const pcgc_device_program *P = R->P;
  int b = -1;
  for (int i = 0; role == PCGC_BUF_SOURCE_GRAD && i < P->n_ins; i++) {
    const pcgc_ins *I = &P->ins[i];
    if (I->kind != PCGC_INS_UPDATE || I->src < 0 || P->buf[I->src].node != node) continue;
    pcgc_plan_buf_box(&P->buf[I->src], x);
    if (I->box >= 0) *x = P->boxes[I->box];
    return I->src;
  }
  for (int i = 0; i < P->n_buf && b < 0; i++)
    if (P->buf[i].role == role && P->buf[i].node == node) b = i;
  if (b >= 0) pcgc_plan_buf_box(&P->buf[b], x);
  return b;
}

/* Rank 0 assembles the logical value of weight `node`'s buffer of `role`
 * (SOURCE: the weight; OPT_M, OPT_V: its optimizer state; SOURCE_GRAD: its
 * gradient) from every rank's boxes (held_of). Every rank calls it. */
static pcgc_status gather_weight(rt *R, int node, pcgc_buf_role role, float *whole) {
  const pcgc_ptensor *t = &R->g->nodes[node].out[0];
  int nranks = R->p->n_devices;
  for (int r = 0; r < nranks; r++) {
    /* rank r sends its box of node, if any; ranks learn from their own program */
    if (R->rank == r) {
      pcgc_box x;
      int b = held_of(R, node, role, &x), has = b >= 0;
      if (r == 0) {
        if (has && whole) {
          pcgc_plan_buf W = whole_desc(t);
          pcgc_status st;
          const void *h = host_of(R, b, true, &st);
          if (st) return st;
          pcgc_box_move_host(&W, (char *)whole, &R->P->buf[b], h, &x, false);
        }
      } else {
        pcgc_status st = pcgc_ctl_send0(R->ctl, &has, sizeof has, R->err);
        if (!st && has) {
          int64_t box[2 * PCGC_MAX_RANK] = {0}, n = 1;
          for (int d = 0; d < t->rank; d++) {
            box[d] = x.lo[d];
            box[PCGC_MAX_RANK + d] = x.len[d];
            n *= x.len[d];
          }
          st = pcgc_ctl_send0(R->ctl, box, sizeof box, R->err);
          pcgc_buf k = {0};
          k.data = st ? NULL : (void *)host_of(R, b, true, &st);
          if (!st) st = slab(R, b, &x, &k); /* contiguous in the buffer */
          /* the box's floats, as rank 0 counts them from it */
          if (!st) st = pcgc_ctl_send0(R->ctl, k.data, (size_t)n * sizeof(float), R->err);
        }
        if (st) return st; /* rank 0 then waits: the caller aborts the job */
      }
    } else if (R->rank == 0) {
      int has = 0;
      pcgc_status st = pcgc_ctl_recv(R->ctl, r, &has, sizeof has, R->err);
      if (st) return st;
      if (!has) continue;
      int64_t box[2 * PCGC_MAX_RANK];
      if ((st = pcgc_ctl_recv(R->ctl, r, box, sizeof box, R->err))) return st;
      pcgc_plan_buf B;
      memset(&B, 0, sizeof B);
      B.dtype = PCGC_F32;
      B.rank = t->rank;
      int64_t n = 1;
      for (int d = 0; d < t->rank; d++) {
        B.offset[d] = box[d];
        B.dims[d] = box[PCGC_MAX_RANK + d];
        n *= B.dims[d];
      }
      float *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
      if (!tmp) return pcgc_error_set(R->err, PCGC_ERR_NOMEM, "out of memory gathering weights");
      if ((st = pcgc_ctl_recv(R->ctl, r, tmp, (size_t)n * sizeof *tmp, R->err))) {
        free(tmp);
        return st;
      }
      pcgc_plan_buf W = whole_desc(t);
      pcgc_box x;
      pcgc_plan_buf_box(&B, &x);
      if (whole) pcgc_box_move_host(&W, (char *)whole, &B, (const char *)tmp, &x, false);
      free(tmp);
    }
  }
  return PCGC_OK;
}

static pcgc_status ref_step_data(rt *R, pcgc_reference *ref, int64_t s);

/* The operator that reads node w first ("linear 'h1'"), looking through
 * the parallel operators that distribute it, for messages. */
static void reader_of(const pcgc_graph *g, int w, char *buf, size_t n) {
  for (int hops = 0; hops < 16; hops++) {
    int next = -1;
    for (int i = 0; i < g->n_nodes && next < 0; i++)
      for (int j = 0; j < g->nodes[i].n_in; j++)
        if (g->nodes[i].in[j].node == w) {
          next = i;
          break;
        }
    if (next < 0) break;
    if (pcgc_op_class_of(g->nodes[next].kind) != PCGC_CLASS_PARALLEL) {
      snprintf(buf, n, "%s '%s'", pcgc_op_name(g->nodes[next].kind), g->nodes[next].name);
      return;
    }
    w = next;
  }
  snprintf(buf, n, "no operator");
}

/* --check-report: the largest differences per weight, and the first weight
 * beyond tolerance in the model's order with the operator that reads it. */
static void report_check(rt *R, const pcgc_run_result *res, const double *wd, const double *gd, int n_w,
                         int first_bad) {
  const pcgc_graph *g = R->g;
  if (gd) {
    double worst = 0;
    int at = -1;
    for (int i = 0; i < g->n_nodes; i++)
      if (g->nodes[i].kind == PCGC_OP_WEIGHT && (at < 0 || gd[i] > worst)) worst = gd[at = i];
    if (at >= 0)
      printf("check: the last step's gradients of %d weights differ by at most %.2e (%s), a tenth of the "
             "relative difference: gradients get 10x the tolerance\n", n_w, worst, g->nodes[at].name);
  }
  printf("check: losses of %d steps differ by at most %.2e; %d weights, the largest relative differences:\n",
         R->o->steps, res->max_loss_diff, n_w);
  bool *shown = calloc((size_t)g->n_nodes + 1, sizeof *shown);
  for (int k = 0; shown && k < 8 && k < n_w; k++) {
    int best = -1;
    for (int i = 0; i < g->n_nodes; i++)
      if (g->nodes[i].kind == PCGC_OP_WEIGHT && !shown[i] && (best < 0 || wd[i] > wd[best])) best = i;
    if (best < 0) break;
    shown[best] = true;
    char r[256];
    reader_of(g, best, r, sizeof r);
    printf("  %10.2e  %-32s read by %s%s\n", wd[best], g->nodes[best].name, r,
           wd[best] > R->o->tolerance ? "  MISMATCH" : "");
  }
  free(shown);
  if (first_bad >= 0) {
    char r[256];
    reader_of(g, first_bad, r, sizeof r);
    bool grad = gd && gd[first_bad] > R->o->tolerance;
    printf("first difference in the model's order: %s '%s' (read by %s) differs by %.2e > %g\n",
           grad ? "the gradient of weight" : "weight", g->nodes[first_bad].name, r,
           grad ? gd[first_bad] : wd[first_bad], R->o->tolerance);
  } else if (res->max_loss_diff > R->o->tolerance) {
    printf("first difference: the loss (%.2e > %g); every weight is within tolerance\n", res->max_loss_diff,
           R->o->tolerance);
  }
  fflush(stdout);
}

double pcgc_check_weight_diff(const float *want, const float *got, int64_t n, double slack) {
  double scale = 1e-6, worst = 0;
  for (int64_t e = 0; e < n; e++) scale = fmax(scale, fabs(want[e]));
  for (int64_t e = 0; e < n; e++) worst = fmax(worst, fmax(0, fabs((double)want[e] - got[e]) - slack) / scale);
  return worst;
}

double pcgc_check_grad_diff(const float *want, const float *got, int64_t n, double gmax) {
  double scale = 1e-3 * gmax, worst = 0;
  for (int64_t e = 0; e < n; e++) scale = fmax(scale, fabs(want[e]));
  for (int64_t e = 0; e < n; e++) worst = fmax(worst, fabs((double)want[e] - got[e]));
  return (scale > 0 ? worst / scale : worst) / 10;
}

/* Rank 0: the reference interpreter on the same graph and options; compares
 * losses and final weights (and, given grads, the last step's gradients). */
static pcgc_status check_against_reference(rt *R, pcgc_run_result *res, float **weights, float **grads) {
  pcgc_ref_options ro;
  pcgc_ref_options_default(&ro);
  ro.seed = R->o->seed;
  ro.training = R->o->training;
  ro.opt = R->o->opt;
  pcgc_reference *ref = pcgc_ref_new(R->g, &ro, R->err);
  if (!ref) return R->err->status;
  pcgc_status st = PCGC_OK;
  res->max_loss_diff = 0;
  for (int s = 0; s < R->o->steps && st == PCGC_OK; s++) {
    double l;
    if (R->data) st = ref_step_data(R, ref, s + 1);
    if (st == PCGC_OK) st = pcgc_ref_train_step(ref, &l, R->err);
    if (st || s >= 64 || s < res->first_step) continue; /* a resumed run compares its own steps */
    double d = fabs(l - res->loss[s]) / fmax(fabs(l), 1e-6);
    if (d > res->max_loss_diff) res->max_loss_diff = d;
  }
  res->max_weight_diff = 0;
  int n_w = 0, first_bad = -1;
  double *wd = calloc((size_t)R->g->n_nodes + 1, sizeof *wd); /* per weight node: its difference */
  if (!wd) st = PCGC_ERR_NOMEM;
  for (int i = 0; i < R->g->n_nodes && st == PCGC_OK; i++) {
    const pcgc_node *n = &R->g->nodes[i];
    if (n->kind != PCGC_OP_WEIGHT || !weights[i]) continue;
    int64_t N = pcgc_ptensor_numel(&n->out[0]);
    float *want = malloc((size_t)(N ? N : 1) * sizeof *want);
    if (!want) {
      st = PCGC_ERR_NOMEM;
      break;
    }
    st = pcgc_ref_get(ref, n->name, PCGC_F32, want, N, R->err);
    /* Adam divides by the gradient's own size, so rounding noise in a gradient
     * that is zero in exact arithmetic (a key bias under softmax, a dead unit)
     * becomes a whole step of lr: such elements may differ by one step each */
    double slack = R->o->opt.kind == PCGC_ADAM ? 2 * R->o->opt.lr * R->o->steps : 0;
    double worst = st == PCGC_OK ? pcgc_check_weight_diff(want, weights[i], N, slack) : 0;
    if (worst > res->max_weight_diff) {
      res->max_weight_diff = worst;
      snprintf(res->worst_tensor, sizeof res->worst_tensor, "%s", n->name);
    }
    wd[i] = worst;
    n_w++;
    if (worst > R->o->tolerance && first_bad < 0) first_bad = i;
    free(want);
  }
  /* gradients of the last step: a gradient that is zero in exact arithmetic
   * (a key bias under softmax) is rounding noise on both sides, so each is
   * measured against at least 1e-3 of the largest gradient of the model */
  double *gd = grads && st == PCGC_OK ? calloc((size_t)R->g->n_nodes + 1, sizeof *gd) : NULL;
  double gmax = 0;
  float **want = gd ? calloc((size_t)R->g->n_nodes + 1, sizeof *want) : NULL;
  for (int i = 0; want && i < R->g->n_nodes && st == PCGC_OK; i++) {
    const pcgc_node *n = &R->g->nodes[i];
    if (n->kind != PCGC_OP_WEIGHT || !grads[i]) continue;
    int64_t N = pcgc_ptensor_numel(&n->out[0]);
    if (!(want[i] = malloc((size_t)(N ? N : 1) * sizeof **want))) {
      st = PCGC_ERR_NOMEM;
      break;
    }
    st = pcgc_ref_get_grad(ref, n->name, PCGC_F32, want[i], N, R->err);
    for (int64_t e = 0; e < N && st == PCGC_OK; e++) gmax = fmax(gmax, fabs(want[i][e]));
  }
  for (int i = 0; want && i < R->g->n_nodes && st == PCGC_OK; i++) {
    if (!want[i]) continue;
    int64_t N = pcgc_ptensor_numel(&R->g->nodes[i].out[0]);
    /* against 10x the tolerance: a gradient is a sum over devices and
     * micro-batches, where f32 reassociation shows more than in the weight
     * it moves by lr (reported in the same units as the weights) */
    gd[i] = pcgc_check_grad_diff(want[i], grads[i], N, gmax);
    if (gd[i] > R->o->tolerance && (first_bad < 0 || i < first_bad)) first_bad = i;
    if (gd[i] > res->max_weight_diff) {
      res->max_weight_diff = gd[i];
      snprintf(res->worst_tensor, sizeof res->worst_tensor, "gradient of %s", R->g->nodes[i].name);
    }
  }
  for (int i = 0; want && i < R->g->n_nodes; i++) free(want[i]);
  free(want);
  if (st == PCGC_OK && R->o->check_report) report_check(R, res, wd, gd, n_w, first_bad);
  free(gd);
  free(wd);
  pcgc_ref_free(ref);
  res->checked = true;
  res->check_ok = st == PCGC_OK && res->max_loss_diff <= R->o->tolerance && res->max_weight_diff <= R->o->tolerance;
  return st;
}

/* ---------------------------------------------------------------- data */

static pcgc_status open_data(const pcgc_graph *g, const char *dir, pcgc_npy **files, int64_t *batches,
                             pcgc_error *err) {
  int64_t nb = INT64_MAX;
  for (int i = 0; i < g->n_nodes; i++) {
    const pcgc_node *n = &g->nodes[i];
    if (n->kind != PCGC_OP_INPUT) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.npy", dir, n->name);
    pcgc_npy f;
    pcgc_status st = pcgc_npy_open(path, &f, err);
    if (st == PCGC_ERR_IO) pcgc_error_hint(err, "--data DIR needs DIR/NAME.npy for every input of the model");
    if (st == PCGC_OK) st = pcgc_npy_check(&f, n->name, &n->out[0], err);
    if (st != PCGC_OK || !files) pcgc_npy_close(&f); /* kept open for the step loop only */
    if (st != PCGC_OK) return st;
    if (f.shape[0] / n->out[0].dims[0] < nb) nb = f.shape[0] / n->out[0].dims[0];
    if (files && !(files[i] = malloc(sizeof f))) {
      pcgc_npy_close(&f);
      return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    }
    if (files) *files[i] = f;
  }
  if (nb == INT64_MAX) return pcgc_error_set(err, PCGC_ERR_INVALID, "the model has no data input to read from %s", dir);
  if (batches) *batches = nb;
  return PCGC_OK;
}

pcgc_status pcgc_run_check_data(const pcgc_graph *g, const char *dir, int64_t *batches, pcgc_error *err) {
  return open_data(g, dir, NULL, batches, err);
}

/* The rows of `batch` that buffer B of input `node` holds, into B's box. */
static pcgc_status load_batch_box(rt *R, int b, int64_t batch) {
  const pcgc_plan_buf *B = &R->P->buf[b];
  const pcgc_node *n = &R->g->nodes[B->node];
  const pcgc_npy *f = R->data[B->node];
  const pcgc_ptensor *t = &n->out[0];
  pcgc_plan_buf T = *B; /* the whole rows B's box lies in */
  for (int d = 1; d < t->rank; d++) {
    T.offset[d] = 0;
    T.dims[d] = t->dims[d];
  }
  int64_t row0 = batch * t->dims[0] + B->offset[0];
  pcgc_status st = pcgc_npy_read_rows(f, row0, B->dims[0], B->dtype, pcgc_ref_data_bound(R->g, B->node), R->data_tmp,
                                      R->data_raw, R->err);
  if (st != PCGC_OK) return st;
  pcgc_box x;
  pcgc_plan_buf_box(B, &x);
  void *h = host_of(R, b, false, &st);
  pcgc_box_move_host(B, h, &T, R->data_tmp, &x, false);
  return host_done(R, b);
}

static pcgc_status setup_data(rt *R) {
  if (!(R->data = calloc((size_t)R->g->n_nodes + 1, sizeof *R->data)))
    return pcgc_error_set(R->err, PCGC_ERR_NOMEM, "out of memory");
  pcgc_status st = open_data(R->g, R->o->data_dir, R->data, &R->batches, R->err);
  size_t most = 8;
  for (int b = 0; b < R->P->n_buf && st == PCGC_OK; b++) {
    const pcgc_plan_buf *B = &R->P->buf[b];
    if (B->role != PCGC_BUF_SOURCE || R->g->nodes[B->node].kind != PCGC_OP_INPUT) continue;
    size_t k = (size_t)(B->dims[0] * R->data[B->node]->row_elems) * 8;
    if (k > most) most = k;
  }
  if (st == PCGC_OK && (!(R->data_tmp = malloc(most)) || !(R->data_raw = malloc(most))))
    st = pcgc_error_set(R->err, PCGC_ERR_NOMEM, "out of memory");
  return st;
}

/* Before step s (from 1): every input box this rank keeps gets batch (s-1) mod batches. */
static pcgc_status load_step_data(rt *R, int64_t s) {
  for (int b = 0; b < R->P->n_buf; b++) {
    const pcgc_plan_buf *B = &R->P->buf[b];
    if (B->role != PCGC_BUF_SOURCE || R->g->nodes[B->node].kind != PCGC_OP_INPUT) continue;
    pcgc_status st = load_batch_box(R, b, (s - 1) % R->batches);
    if (st != PCGC_OK) return st;
  }
  return PCGC_OK;
}

/* The reference's inputs for step s: the whole batch. */
static pcgc_status ref_step_data(rt *R, pcgc_reference *ref, int64_t s) {
  for (int i = 0; i < R->g->n_nodes; i++) {
    const pcgc_node *n = &R->g->nodes[i];
    if (n->kind != PCGC_OP_INPUT) continue;
    const pcgc_ptensor *t = &n->out[0];
    int64_t N = pcgc_ptensor_numel(t);
    pcgc_dtype dt = pcgc_dtype_is_float(t->dtype) ? PCGC_F32 : PCGC_I64;
    void *buf = malloc((size_t)(N ? N : 1) * 8);
    if (!buf) return pcgc_error_set(R->err, PCGC_ERR_NOMEM, "out of memory");
    pcgc_status st = pcgc_npy_read_rows(R->data[i], ((s - 1) % R->batches) * t->dims[0], t->dims[0], dt,
                                        pcgc_ref_data_bound(R->g, i), buf, NULL, R->err);
    if (st == PCGC_OK) st = pcgc_ref_set(ref, n->name, dt, buf, N, R->err);
    free(buf);
    if (st != PCGC_OK) return st;
  }
  return PCGC_OK;
}

/* ---------------------------------------------------------- checkpoints */

/* Optimizer state per weight the run keeps: 1 (plain SGD), 2 (+ m), 3 (+ m, v). */
static int ckpt_states(const pcgc_optimizer *o) { return o->kind == PCGC_ADAM ? 3 : o->momentum > 0 ? 2 : 1; }

static const char *ckpt_optimizer(const pcgc_optimizer *o) {
  return o->kind == PCGC_ADAM ? "adam" : o->momentum > 0 ? "momentum" : "sgd";
}

/* Every rank: the logical weights and state after `step` steps, gathered on
 * rank 0 and written there atomically. */
static pcgc_status save_checkpoint(rt *R, int64_t step, char *path, size_t path_size) {
  int nw = 0, states = ckpt_states(&R->o->opt);
  for (int i = 0; i < R->g->n_nodes; i++) nw += R->g->nodes[i].kind == PCGC_OP_WEIGHT;
  pcgc_checkpoint *c = R->rank == 0 ? pcgc_checkpoint_new(nw) : NULL;
  pcgc_status st = R->rank == 0 && !c ? pcgc_error_set(R->err, PCGC_ERR_NOMEM, "out of memory for a checkpoint") : PCGC_OK;
  if (c) {
    snprintf(c->model, sizeof c->model, "%s", R->g->name ? R->g->name : "-");
    snprintf(c->optimizer, sizeof c->optimizer, "%s", ckpt_optimizer(&R->o->opt));
    c->step = step;
    c->seed = R->o->seed;
  }
  static const pcgc_buf_role roles[3] = {PCGC_BUF_SOURCE, PCGC_BUF_OPT_M, PCGC_BUF_OPT_V};
  for (int i = 0, k = 0; i < R->g->n_nodes; i++) {
    const pcgc_node *n = &R->g->nodes[i];
    if (n->kind != PCGC_OP_WEIGHT) continue;
    if (c && st == PCGC_OK) st = pcgc_checkpoint_tensor_init(c, k, n->name, n->out[0].rank, n->out[0].dims, states, R->err);
    for (int s = 0; s < states; s++) { /* every rank takes part, whatever rank 0's status */
      pcgc_status s2 = gather_weight(R, i, roles[s], c && st == PCGC_OK ? c->t[k].data[s] : NULL);
      if (s2 && !st) st = s2;
    }
    k++;
  }
  if (c && st == PCGC_OK) st = pcgc_checkpoint_save(R->o->checkpoint_dir, c, path, path_size, R->err);
  pcgc_checkpoint_free(c);
  int bad = st != PCGC_OK;
  pcgc_status bst = pcgc_ctl_bcast(R->ctl, &bad, sizeof bad, R->err); /* a failed save stops every rank */
  if (bst && !st) return bst;
  if (bad && st == PCGC_OK)
    st = pcgc_error_set(R->err, PCGC_ERR_IO, "rank 0 could not write the checkpoint (see its message)");
  return st;
}

/* Every rank: reads the newest checkpoint of the directory and keeps its own
 * boxes of each weight and its state; *step is the steps it had trained. */
static pcgc_status load_checkpoint(rt *R, int64_t *step) {
  char path[4096];
  pcgc_checkpoint *c = NULL;
  pcgc_status st = pcgc_checkpoint_latest(R->o->checkpoint_dir, path, sizeof path, R->err);
  if (st == PCGC_OK) st = pcgc_checkpoint_read(path, &c, R->err);
  if (st != PCGC_OK) return st;
  int states = ckpt_states(&R->o->opt);
  if (strcmp(c->optimizer, ckpt_optimizer(&R->o->opt)) != 0) {
    pcgc_error_set(R->err, PCGC_ERR_INVALID, "%s holds the state of %s, but this run trains with %s", path,
                   c->optimizer, ckpt_optimizer(&R->o->opt));
    pcgc_error_hint(R->err, "resume with --optimizer %s (and the same --momentum), as the run that wrote it",
                    c->optimizer);
    st = PCGC_ERR_INVALID;
  }
  static const pcgc_buf_role roles[3] = {PCGC_BUF_SOURCE, PCGC_BUF_OPT_M, PCGC_BUF_OPT_V};
  for (int i = 0; i < R->g->n_nodes && st == PCGC_OK; i++) {
    const pcgc_node *n = &R->g->nodes[i];
    if (n->kind != PCGC_OP_WEIGHT) continue;
    const pcgc_ckpt_tensor *t = pcgc_checkpoint_find(c, n->name);
    bool same = t && t->rank == n->out[0].rank;
    for (int d = 0; same && d < t->rank; d++) same = t->dims[d] == n->out[0].dims[d];
    if (!same) {
      pcgc_error_set(R->err, PCGC_ERR_INVALID, "%s %s weight '%s' of model '%s'%s", path,
                     t ? "has another shape for" : "has no", n->name, R->g->name ? R->g->name : "model",
                     strcmp(c->model, R->g->name ? R->g->name : "-") ? " (it was written for another model)" : "");
      pcgc_error_hint(R->err, "a checkpoint loads into any plan of the same model and sizes (--set values)");
      st = PCGC_ERR_INVALID;
      break;
    }
    pcgc_plan_buf W = whole_desc(&n->out[0]);
    for (int b = 0; b < R->P->n_buf; b++) {
      const pcgc_plan_buf *B = &R->P->buf[b];
      if (B->node != i) continue;
      for (int s = 0; s < states && st == PCGC_OK; s++)
        if (B->role == roles[s]) {
          pcgc_box x;
          pcgc_plan_buf_box(B, &x);
          void *h = host_of(R, b, false, &st);
          pcgc_box_move_host(B, h, &W, (const char *)t->data[s], &x, false);
          st = host_done(R, b);
        }
    }
  }
  if (st == PCGC_OK && R->rank == 0 && c->seed != R->o->seed)
    fprintf(stderr, "pcgc run: warning: %s was trained with seed %llu, this run draws data with seed %llu: the "
                    "resumed run will not repeat the original\n",
            path, (unsigned long long)c->seed, (unsigned long long)R->o->seed);
  if (st == PCGC_OK) *step = c->step;
  pcgc_checkpoint_free(c);
  return st;
}

/* --trace: every rank's (start, duration) pairs of the last step gathered
 * on rank 0, which writes the trace. */
static pcgc_status write_trace(rt *R, const double *tr) {
  const pcgc_program *p = R->p;
  int D = p->n_devices;
  int64_t total = 0;
  for (int d = 0; d < D; d++) total += p->dev[d].n_ins;
  double *all = NULL, *start = NULL, *dur = NULL;
  size_t *counts = NULL;
  pcgc_status st = PCGC_OK;
  if (R->rank == 0) {
    all = malloc(2 * (size_t)(total ? total : 1) * sizeof *all);
    start = malloc((size_t)(total ? total : 1) * sizeof *start);
    dur = malloc((size_t)(total ? total : 1) * sizeof *dur);
    counts = malloc((size_t)D * sizeof *counts);
    if (!all || !start || !dur || !counts) st = PCGC_ERR_NOMEM;
    for (int d = 0; !st && d < D; d++) counts[d] = 2 * (size_t)p->dev[d].n_ins * sizeof *all;
  }
  /* rank 0 out of memory leaves the gather: the caller ends the job */
  if (!st) st = pcgc_ctl_gather(R->ctl, tr, 2 * (size_t)R->P->n_ins * sizeof *tr, all, counts, R->err);
  if (R->rank == 0 && !st) {
    for (int64_t i = 0; i < total; i++) {
      start[i] = all[2 * i];
      dur[i] = all[2 * i + 1];
    }
    st = pcgc_program_trace_write(R->o->trace_path, p, R->g, start, dur, R->err);
  } else if (R->rank == 0 && st == PCGC_ERR_NOMEM) {
    st = pcgc_error_set(R->err, PCGC_ERR_NOMEM, "out of memory for the trace");
  }
  free(all);
  free(start);
  free(dur);
  free(counts);
  return st;
}

static pcgc_status finish(rt *R, pcgc_run_result *res) {
  int n = R->g->n_nodes;
  float **w = calloc((size_t)(n ? n : 1), sizeof *w);
  if (!w) return pcgc_error_set(R->err, PCGC_ERR_NOMEM, "out of memory");
  pcgc_status st = PCGC_OK;
  FILE *f = NULL;
  if (R->rank == 0 && R->o->save_weights) {
    f = fopen(R->o->save_weights, "wb");
    if (!f) st = pcgc_error_set(R->err, PCGC_ERR_IO, "cannot write '%s'", R->o->save_weights);
  }
  /* --check-report also compares the last step's weight gradients (zeroed
   * only before their first use in a step, so still there) */
  float **gw = R->o->check && R->o->check_report ? calloc((size_t)(n ? n : 1), sizeof *gw) : NULL;
  if (R->o->check && R->o->check_report && !gw) st = PCGC_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    const pcgc_node *x = &R->g->nodes[i];
    if (x->kind != PCGC_OP_WEIGHT) continue;
    int64_t N = pcgc_ptensor_numel(&x->out[0]);
    if (R->rank == 0) {
      w[i] = calloc((size_t)(N ? N : 1), sizeof **w);
      if (!w[i]) st = PCGC_ERR_NOMEM;
      if (gw && !(gw[i] = calloc((size_t)(N ? N : 1), sizeof **gw))) st = PCGC_ERR_NOMEM;
    }
    pcgc_status s2 = gather_weight(R, i, PCGC_BUF_SOURCE, w[i]);
    if (s2) st = s2;
    if (gw && (s2 = gather_weight(R, i, PCGC_BUF_SOURCE_GRAD, gw[i]))) st = s2;
    if (f && w[i]) fwrite(w[i], sizeof **w, (size_t)N, f);
  }
  if (f && fclose(f) != 0 && !st) st = pcgc_error_set(R->err, PCGC_ERR_IO, "cannot write '%s'", R->o->save_weights);
  if (R->rank == 0 && R->o->check && !st) st = check_against_reference(R, res, w, gw);
  for (int i = 0; i < n; i++) {
    free(w[i]);
    if (gw) free(gw[i]);
  }
  free(w);
  free(gw);
  return st;
}

/* The backend's communicators (NCCL): one per group, and one two-member
 * communicator per direction in which messages go (device s sends to r).
 * Every id is made by its owner (a group's first member, a direction's
 * sender) before any is opened, gathered on rank 0 and handed to the ranks
 * that open it, over the control plane (MPI or TCP); then each rank opens its
 * communicators in one global order (groups, then directions by (s, r)), so
 * that members meet. Collectives of a group and messages of a direction then
 * keep the program's order on their own streams. */
static pcgc_status open_device_comms(rt *R) {
  const pcgc_program *p = R->p;
  pcgc_backend *be = R->be;
  pcgc_status st = PCGC_OK;
  int N = p->n_devices, G = p->n_groups, me = R->rank;
  size_t idb = be->comm_id_bytes;
  R->dcomm = calloc((size_t)G + 1, sizeof *R->dcomm);
  R->to = calloc((size_t)N, sizeof *R->to);
  R->from = calloc((size_t)N, sizeof *R->from);
  bool *pair = calloc((size_t)N * (size_t)N, sizeof *pair);
  int *pairs = NULL; /* the directions, s * N + r, in order */
  int n_pairs = 0;
  for (int d = 0; pair && d < N; d++) /* every device's program is known to every rank */
    for (int i = 0; i < p->dev[d].n_ins; i++)
      if (p->dev[d].ins[i].kind == PCGC_INS_SEND) pair[(size_t)d * (size_t)N + (size_t)p->dev[d].ins[i].peer] = true;
  for (size_t x = 0; pair && x < (size_t)N * (size_t)N; x++) n_pairs += pair[x];
  int slots = G + n_pairs;
  pairs = malloc((size_t)(n_pairs + 1) * sizeof *pairs);
  int *pos = malloc((size_t)(slots + 1) * sizeof *pos); /* a slot's place among its owner's ids */
  size_t *made = calloc((size_t)N, sizeof *made), *need = calloc((size_t)N, sizeof *need);
  if (!R->dcomm || !R->to || !R->from || !pair || !pairs || !pos || !made || !need) {
    st = pcgc_error_set(R->err, PCGC_ERR_NOMEM, "out of memory");
    goto out;
  }
  for (size_t x = 0, k = 0; x < (size_t)N * (size_t)N; x++)
    if (pair[x]) pairs[k++] = (int)x;
  for (int k = 0; k < G; k++) {
    pos[k] = (int)made[p->group_dev[p->group_off[k]]]++;
    for (int j = p->group_off[k]; j < p->group_off[k + 1]; j++) need[p->group_dev[j]]++;
  }
  for (int k = 0; k < n_pairs; k++) {
    int s = pairs[k] / N, r = pairs[k] % N;
    pos[G + k] = (int)made[s]++;
    need[s]++, need[r]++;
  }
  /* my ids, after a word that says whether all were made */
  char *mine = calloc(1, sizeof(int) + made[me] * idb + 1), *got = calloc(1, sizeof(int) + need[me] * idb + 1);
  char *all = NULL, *out = NULL;
  size_t *cnt = NULL, *cnt2 = NULL;
  if (!mine || !got) st = pcgc_error_set(R->err, PCGC_ERR_NOMEM, "out of memory");
  int ok = 1;
  for (int k = 0, n = 0; !st && ok && k < slots; k++) {
    int owner = k < G ? p->group_dev[p->group_off[k]] : pairs[k - G] / N;
    if (owner == me) ok = be->comm_id(be, mine + sizeof(int) + (size_t)n++ * idb, R->err) == PCGC_OK;
  }
  memcpy(mine, &ok, sizeof ok);
  if (me == 0 && !st) {
    cnt = malloc((size_t)N * sizeof *cnt), cnt2 = malloc((size_t)N * sizeof *cnt2);
    size_t t1 = 0, t2 = 0;
    for (int r = 0; cnt && cnt2 && r < N; r++) {
      t1 += cnt[r] = sizeof(int) + made[r] * idb;
      t2 += cnt2[r] = sizeof(int) + need[r] * idb;
    }
    if (!cnt || !cnt2 || !(all = malloc(t1 + 1)) || !(out = malloc(t2 + 1)))
      st = pcgc_error_set(R->err, PCGC_ERR_NOMEM, "out of memory for %d communicator ids", slots);
  }
  /* rank 0 out of memory leaves: the caller ends the job */
  if (!st) st = pcgc_ctl_gather(R->ctl, mine, sizeof(int) + made[me] * idb, all, cnt, R->err);
  if (me == 0 && !st) { /* each rank's ids, in slot order, after whether every rank made its own */
    size_t *base = malloc((size_t)N * sizeof *base), *at = malloc((size_t)N * sizeof *at);
    if (!base || !at) st = pcgc_error_set(R->err, PCGC_ERR_NOMEM, "out of memory");
    int all_ok = 1, bad = -1;
    for (size_t r = 0, o1 = 0, o2 = 0; !st && r < (size_t)N; r++) {
      base[r] = o1, at[r] = o2 + sizeof(int);
      int okr;
      memcpy(&okr, all + o1, sizeof okr);
      if (!okr && bad < 0) bad = (int)r;
      all_ok &= okr;
      o1 += cnt[r], o2 += cnt2[r];
    }
    for (int k = 0; !st && k < slots; k++) {
      int owner = k < G ? p->group_dev[p->group_off[k]] : pairs[k - G] / N;
      const char *id = all + base[owner] + sizeof(int) + (size_t)pos[k] * idb;
      if (k < G) {
        for (int j = p->group_off[k]; j < p->group_off[k + 1]; j++) {
          int m = p->group_dev[j];
          memcpy(out + at[m], id, idb), at[m] += idb;
        }
      } else {
        int s = pairs[k - G] / N, r = pairs[k - G] % N;
        memcpy(out + at[s], id, idb), at[s] += idb;
        memcpy(out + at[r], id, idb), at[r] += idb;
      }
    }
    for (size_t r = 0, o2 = 0; !st && r < (size_t)N; o2 += cnt2[r], r++) memcpy(out + o2, &all_ok, sizeof all_ok);
    if (!st && !all_ok && me != bad) fprintf(stderr, "pcgc run: device %d could not make a communicator id\n", bad);
    free(base);
    free(at);
  }
  if (!st) st = pcgc_ctl_scatter(R->ctl, out, cnt2, got, sizeof(int) + need[me] * idb, R->err);
  int all_ok = 0;
  if (!st) memcpy(&all_ok, got, sizeof all_ok);
  if (!st && !all_ok)
    st = ok ? pcgc_error_set(R->err, PCGC_ERR_IO, "another device could not make a communicator id") : PCGC_ERR_IO;
  for (int k = 0, n = 0; !st && k < slots; k++) {
    const char *id = got + sizeof(int) + (size_t)n * idb;
    if (k < G) {
      int at = group_index(R, k, me);
      if (at < 0) continue;
      n++;
      st = be->comm_open(be, id, p->group_off[k + 1] - p->group_off[k], at, &R->dcomm[k], R->err);
    } else {
      int s = pairs[k - G] / N, r = pairs[k - G] % N;
      if (me != s && me != r) continue;
      n++;
      st = me == s ? be->comm_open(be, id, 2, 0, &R->to[r], R->err) : be->comm_open(be, id, 2, 1, &R->from[s], R->err);
    }
  }
  free(mine);
  free(got);
  free(all);
  free(out);
  free(cnt);
  free(cnt2);
out:
  free(pair);
  free(pairs);
  free(pos);
  free(made);
  free(need);
  if (!st && !be->send_mark)
    st = pcgc_error_set(R->err, PCGC_ERR_UNSUPPORTED, "backend %s cannot mark its sends", be->desc);
  /* slots: the non-blocking all-reduces', then one per send of the step */
  if (!st && R->P->n_requests + R->P->n_sends)
    st = be->comm_slots(be, R->P->n_requests + R->P->n_sends, R->err);
  if (!st) R->dev_comm = true;
  return st;
}

pcgc_status pcgc_run(const pcgc_graph *g, const pcgc_program *p, const pcgc_run_options *o, pcgc_run_result *res,
                     pcgc_error *err) {
  memset(res, 0, sizeof *res);
  rt R;
  memset(&R, 0, sizeof R);
  R.g = g;
  R.p = p;
  R.o = o;
  R.err = err;
  int size = 1, *slot_group = NULL, inited = 0;
  double *tr = NULL; /* --trace: the last step's (start, duration) per instruction */
  MPI_Initialized(&inited);
  R.mpi = inited != 0;
  const char *fault = getenv("PCGC_TEST_FAULT");
  R.fault_no_allreduce = fault && strcmp(fault, "skip-allreduce") == 0;
  if (o->backend) {
    R.be = o->backend;
  } else {
    pcgc_backend_open(&R.cpu, "cpu", 0, err);
    R.be = &R.cpu;
  }
  pcgc_backend *be = R.be;
  R.ctl = o->ctl ? o->ctl : &R.own_ctl;
  if (!o->ctl && R.mpi && pcgc_ctl_init_mpi(&R.own_ctl, err) != PCGC_OK) {
    if (be == &R.cpu) pcgc_backend_close(&R.cpu);
    return err->status;
  } else if (!o->ctl && !R.mpi) {
    pcgc_ctl_init_solo(&R.own_ctl);
  }
  R.rank = R.ctl->rank;
  size = R.ctl->size;
  if (size != p->n_devices) {
    if (R.ctl == &R.own_ctl) pcgc_ctl_destroy(&R.own_ctl);
    if (be == &R.cpu) pcgc_backend_close(&R.cpu);
    pcgc_error_set(err, PCGC_ERR_INVALID, "the plan is for %d devices but %d processes run it", p->n_devices, size);
    pcgc_error_hint(err, "start it with mpirun -np %d, or let `pcgc run` start the processes itself", p->n_devices);
    return PCGC_ERR_INVALID;
  }
  R.P = &p->dev[R.rank];
  const pcgc_device_program *P = R.P;
  int *tag_ub = NULL, flag = 0;
  if (R.mpi) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  }
  pcgc_status st = PCGC_OK;
  int64_t most = 64; /* the largest buffer: host staging of one buffer */
  for (int b = 0; b < P->n_buf; b++)
    if (P->buf[b].bytes > most) most = P->buf[b].bytes;
  R.sends = malloc((size_t)(P->n_sends + 1) * sizeof *R.sends);
  R.dn = malloc((size_t)(P->n_sends + 1) * sizeof *R.dn);
  if (R.dn) R.dn_n = pcgc_sends_done_order(P, R.dn); /* (the others complete at the step's end: MPI_Waitall) */
  if (!be->host && P->send_done) { /* GPU sends from their buffers through host MPI: their host copies */
    int64_t at = 0;
    if (!(R.direct_at = malloc((size_t)(P->n_sends + 1) * sizeof *R.direct_at))) {
      st = pcgc_error_set(err, PCGC_ERR_NOMEM, "rank %d: out of memory", R.rank);
      goto done;
    }
    for (int i = 0, k = 0; i < P->n_ins && k < P->n_sends; i++) {
      if (P->ins[i].kind != PCGC_INS_SEND) continue;
      pcgc_box x = region(&R, &P->ins[i], P->ins[i].src);
      R.direct_at[k] = at;
      if (P->send_done[k++] >= 0) at += (box_numel(&x) * (int64_t)pcgc_dtype_size(P->buf[P->ins[i].src].dtype) + 63) / 64 * 64;
    }
    if (at > 0 && !(R.direct_h = malloc((size_t)at))) {
      st = pcgc_error_set(err, PCGC_ERR_NOMEM, "rank %d: out of host memory for %lld bytes of sends", R.rank,
                          (long long)at);
      goto done;
    }
  }
  R.reqs = malloc((size_t)(P->n_requests + 1) * sizeof *R.reqs);
  R.pend = malloc((size_t)(P->n_requests + 1) * sizeof *R.pend);
  R.req_stage = calloc((size_t)P->n_requests + 1, sizeof *R.req_stage);
  R.req_h = calloc((size_t)P->n_requests + 1, sizeof *R.req_h);
  R.rs = calloc((size_t)P->n_requests + 1, sizeof *R.rs);
  R.comm = malloc((size_t)(p->n_groups + 1) * sizeof *R.comm);
  if (!R.sends || !R.dn || !R.reqs || !R.pend || !R.req_stage || !R.req_h || !R.rs || !R.comm) {
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "rank %d: out of memory", R.rank);
    goto done;
  }
  for (int k = 0; k < p->n_groups; k++) R.comm[k] = MPI_COMM_NULL;
  if (!(R.arena = be->alloc(be, (size_t)P->arena_bytes, err)) ||
      !(R.send_stage = be->alloc(be, (size_t)P->send_bytes + 64, err)) ||
      !(R.recv_stage = be->alloc(be, (size_t)P->max_message_bytes + 64, err))) {
    pcgc_error_set(err, PCGC_ERR_NOMEM, "rank %d: cannot allocate the plan's %lld-byte arena on %s: %.300s", R.rank,
                   (long long)P->arena_bytes, be->desc, err->message);
    st = PCGC_ERR_NOMEM;
    goto done;
  }
  if (P->widen_bytes > 0 && !(R.widen = be->alloc(be, (size_t)P->widen_bytes + 64, err))) {
    st = PCGC_ERR_NOMEM;
    goto done;
  }
  if (most < P->widen_bytes) most = P->widen_bytes; /* a router's widened logits, on the host */
  if (R.mpi && !(R.have_bf16_sum = MPI_Op_create(bf16_sum_fn, 1, &R.bf16_sum) == MPI_SUCCESS)) {
    st = pcgc_error_set(err, PCGC_ERR_IO, "rank %d: cannot create MPI's bf16 sum", R.rank);
    goto done;
  }
  if (be->host) {
    R.send_h = R.send_stage;
    R.recv_h = R.recv_stage;
  } else if (!(R.send_h = malloc((size_t)P->send_bytes + 64)) ||
             !(R.recv_h = malloc((size_t)P->max_message_bytes + 64)) || !(R.host_tmp = malloc((size_t)most))) {
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "rank %d: out of host memory for staging", R.rank);
    goto done;
  }
  if ((st = be->zero(be, R.arena, (size_t)P->arena_bytes, err))) goto done;
  /* messages and collectives through the backend's communicators (NCCL) */
  bool dev = o->device_comm && be->comm_open && p->p2p_in_order && size > 1;
  for (int i = 0; i < P->n_ins && !st; i++) {
    const pcgc_ins *I = &P->ins[i];
    if (I->kind == PCGC_INS_REDUCESCATTER_START && I->tag >= 0 && I->tag < P->n_requests && I->dst >= 0 &&
        I->peer >= 0 && I->peer < p->n_groups) { /* its slabs; from a GPU through MPI, a whole host mirror */
      rs_slot *Q = &R.rs[I->tag];
      int n = p->group_off[I->peer + 1] - p->group_off[I->peer];
      Q->me = group_index(&R, I->peer, R.rank);
      Q->cnt = malloc(2 * (size_t)(n > 0 ? n : 1) * sizeof *Q->cnt);
      Q->cnt64 = malloc((size_t)(n > 0 ? n : 1) * sizeof *Q->cnt64);
      if (!Q->cnt || !Q->cnt64) {
        st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
      } else {
        Q->at = Q->cnt + n;
        st = zero_slabs(&R, &P->buf[I->src >= 0 ? I->src : I->dst], n, Q->cnt, Q->at, &Q->equal);
        for (int j = 0; j < n; j++) Q->cnt64[j] = Q->cnt[j];
        Q->n = st || Q->me < 0 ? 0 : n;
        if (!st && Q->me < 0) st = pcgc_error_set(err, PCGC_ERR_INVALID, "rank %d: a reduce-scatter of a group it is "
                                                  "not in", R.rank);
      }
      /* from a GPU through MPI: the cell, then (out of place) this member's sum */
      size_t hb = (size_t)P->buf[I->src >= 0 ? I->src : I->dst].bytes + (I->src >= 0 ? (size_t)P->buf[I->dst].bytes : 0);
      if (!st && I->src >= 0 && P->buf[I->dst].bytes != (int64_t)Q->cnt[Q->me] * (int64_t)pcgc_dtype_size(P->buf[I->dst].dtype))
        st = pcgc_error_set(err, PCGC_ERR_INVALID, "rank %d: a reduce-scatter into a buffer that is not its slab", R.rank);
      if (!st && !be->host && !(R.req_h[I->tag] = malloc(hb + 8)))
        st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    }
    int64_t at, span, ats[4];
    bool bucket = I->kind == PCGC_INS_ALLREDUCE_START && I->dst < 0;
    if (I->kind == PCGC_INS_UPDATE && I->dst < 0 && !pcgc_update_spans(P, I, ats, &span))
      st = pcgc_error_set(err, PCGC_ERR_INVALID, "instruction %d: a gradient bucket's update whose weights, "
                          "gradients and state do not lie back to back alike in the arena (the program was not "
                          "planned by this pcgc's codegen)", i);
    if (bucket && !(I->tag >= 0 && I->tag < P->n_requests && pcgc_allreduce_span(P, I, &at, &span)))
      st = pcgc_error_set(err, PCGC_ERR_INVALID, "instruction %d: a gradient bucket's all-reduce whose buffers do "
                          "not lie back to back as persistent f32 buffers of the arena (the program was not "
                          "planned by this pcgc's codegen)", i);
    else if (I->kind == PCGC_INS_ALLREDUCE_START) {
      /* a whole buffer is reduced where it lies (through MPI from a GPU, by
       * way of a host mirror); a region through a staging of its own; a
       * bucket over the span of its buffers */
      size_t bytes = bucket ? (size_t)span + 8 : 0;
      if (!bucket) {
        pcgc_box x = R.P->boxes[I->box];
        bytes = (size_t)(box_numel(&x) * (int64_t)pcgc_dtype_size(P->buf[I->dst].dtype)) + 8;
      }
      bool in_place = pcgc_allreduce_in_place(P, I);
      if (!in_place && !(R.req_stage[I->tag] = be->alloc(be, bytes, err))) st = PCGC_ERR_NOMEM;
      else if (be->host) R.req_h[I->tag] = R.req_stage[I->tag];
      else if (!(R.req_h[I->tag] = malloc(bytes))) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    }
    if ((I->kind == PCGC_INS_SEND || I->kind == PCGC_INS_RECV) && flag && tag_ub && I->tag > *tag_ub)
      st = pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "the plan needs message tag %d; this MPI allows %d", I->tag,
                          *tag_ub);
    bool talks = I->kind == PCGC_INS_SEND || I->kind == PCGC_INS_RECV || I->kind == PCGC_INS_BCAST ||
                 I->kind == PCGC_INS_REDUCE || I->kind == PCGC_INS_ALLREDUCE || I->kind == PCGC_INS_ALLREDUCE_START ||
                 I->kind == PCGC_INS_ALLGATHER || I->kind == PCGC_INS_REDUCESCATTER_START;
    if (talks && !R.mpi && !dev && !st) {
      st = pcgc_error_set(err, PCGC_ERR_INVALID, "instruction %d (%s) communicates, but MPI is not initialised%s", i,
                          pcgc_ins_kind_name((pcgc_ins_kind)I->kind),
                          R.ctl->kind != PCGC_CTL_TCP ? ""
                          : !o->device_comm || !be->comm_open ? " and the backend has no communicators of its own"
                                                              : " and NCCL cannot carry this program's messages");
      if (R.ctl->kind == PCGC_CTL_TCP)
        pcgc_error_hint(err, "%s", !o->device_comm || !be->comm_open
                                       ? "a run without MPI (PCGC_RENDEZVOUS) sends through NCCL, one GPU per "
                                         "process; run CPU plans under mpirun, or `pcgc run PLAN` without a launcher"
                                       : "this program receives some messages in another order than they are sent, "
                                         "which NCCL cannot match: run it under mpirun");
    }
  }
  /* one communicator per group, created in group order by its members only */
  for (int k = 0; k < p->n_groups && R.mpi; k++) {
    if (group_index(&R, k, R.rank) < 0) continue;
    MPI_Group world, grp;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, p->group_off[k + 1] - p->group_off[k], p->group_dev + p->group_off[k], &grp);
    int rc = MPI_Comm_create_group(MPI_COMM_WORLD, grp, k, &R.comm[k]);
    MPI_Group_free(&grp);
    MPI_Group_free(&world);
    if (rc != MPI_SUCCESS && !st) st = pcgc_error_set(err, PCGC_ERR_IO, "rank %d: creating the communicator of group %d failed", R.rank, k);
  }
  if (!st && o->device_comm && R.mpi && be->comm_open && !p->p2p_in_order && R.rank == 0 && !o->quiet)
    fprintf(stderr, "pcgc run: this program receives some messages in another order than they are sent, which "
                    "NCCL cannot match: messages and collectives go through host MPI\n");
  if (!st && dev) st = open_device_comms(&R);
  /* kernel workspace: every kernel measured once, then fixed for the step loop */
  if (!st && be->measure) {
    be->measure(be, true);
    for (int i = 0; i < P->n_ins && !st; i++)
      if (P->ins[i].kind == PCGC_INS_FORWARD || P->ins[i].kind == PCGC_INS_BACKWARD) st = kernel(&R, &P->ins[i]);
    be->measure(be, false);
    if (!st) st = be->reserve(be, err);
    be->freeze(be);
  }
  if (st) goto done;
  st = init_sources(&R);
  if (o->data_dir && !st) st = setup_data(&R);
  if (st) goto done;
  int64_t first = 0; /* steps already trained (a resumed checkpoint's) */
  if (o->resume && o->checkpoint_dir) st = load_checkpoint(&R, &first);
  res->first_step = (int)first;
  if (st) goto done;
  g_step_rank = R.rank;
  g_timeout = o->step_timeout;
  slot_group = calloc((size_t)P->n_requests + 1, sizeof *slot_group); /* a WAIT's group: its START's */
  g_group_text = calloc((size_t)p->n_groups + 1, sizeof *g_group_text);
  g_n_groups = p->n_groups;
  for (int i = 0; slot_group && i < P->n_ins; i++)
    if (P->ins[i].kind == PCGC_INS_ALLREDUCE_START || P->ins[i].kind == PCGC_INS_REDUCESCATTER_START)
      slot_group[P->ins[i].tag] = P->ins[i].peer;
  for (int k = 0; g_group_text && k < p->n_groups; k++) {
    if (!(g_group_text[k] = malloc(96))) continue;
    int used = snprintf(g_group_text[k], 96, "devices");
    for (int j = p->group_off[k]; j < p->group_off[k + 1] && used < 80; j++)
      used += snprintf(g_group_text[k] + used, (size_t)(96 - used), "%s %d", j > p->group_off[k] ? "," : "",
                       p->group_dev[j]);
    if (used >= 80) snprintf(g_group_text[k] + 80, 16, ", ...");
  }
  if (o->step_timeout > 0) signal(SIGALRM, on_alarm);
  /* --trace: the last step's instruction times, allocated before the loop */
  if (o->trace_path) tr = malloc(2 * (size_t)(P->n_ins ? P->n_ins : 1) * sizeof *tr);
  if (o->trace_path && !tr) {
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory for the trace");
    goto done;
  }
  double t0 = now();
  res->step_seconds_min = INFINITY;
  for (int s = (int)first; s < o->steps && !st; s++) {
    bool traced = tr && s == o->steps - 1;
    if (traced && (st = pcgc_ctl_barrier(R.ctl, err))) break; /* the ranks start the traced step together */
    double ts = now();
    if (o->step_timeout > 0) alarm((unsigned)ceil(o->step_timeout));
    R.step = s + 1;
    R.loss = 0;
    R.n_sends = R.packed = R.unpacked = R.dn_next = 0;
    g_step = s + 1;
    if (R.data) st = load_step_data(&R, s + 1);
    for (int i = 0; i < P->n_ins && !st; i++) {
      g_ins = i;
      g_kind = P->ins[i].kind;
      g_peer = P->ins[i].kind == PCGC_INS_WAIT && slot_group ? slot_group[P->ins[i].tag] : P->ins[i].peer;
      double ti = traced ? now() : 0;
      st = sends_done_before(&R, i);
      if (!st) st = exec_one(&R, &P->ins[i]);
      if (!st && R.mpi && !R.dev_comm) progress(&R);
      if (traced) {
        if (!st) st = be->sync(be, err);
        tr[2 * i] = ti - ts;
        tr[2 * i + 1] = now() - ti;
      }
      if (st && err && !strstr(err->message, "rank ")) {
        char tmp[sizeof err->message];
        snprintf(tmp, sizeof tmp, "rank %d, step %d, instruction %d (%s): %.900s", R.rank, s + 1, i,
                 pcgc_ins_kind_name((pcgc_ins_kind)P->ins[i].kind), err->message);
        memcpy(err->message, tmp, sizeof tmp);
      }
    }
    if (st) break;
    g_ins = P->n_ins;
    g_kind = PCGC_INS_KIND_COUNT;
    if (R.n_sends && R.mpi) MPI_Waitall(R.n_sends, R.sends, MPI_STATUSES_IGNORE);
    if ((st = be->sync(be, err))) break;
    R.seeded = true;
    if ((st = read_losses(&R))) break;
    double total = R.loss;
    if ((st = pcgc_ctl_sum(R.ctl, R.loss, &total, err))) break;
    if (o->step_timeout > 0) alarm(0);
    double dt = now() - ts;
    if (dt < res->step_seconds_min) res->step_seconds_min = dt;
    if (R.rank == 0) {
      if (!isfinite(total)) {
        st = pcgc_error_set(err, PCGC_ERR_INVALID, "step %d: the loss is %g", s + 1, total);
        pcgc_error_hint(err, "lower the learning rate");
        break;
      }
      if (s < 64) res->loss[s] = total;
      res->last_loss = total;
      if (!o->quiet) {
        printf("step %4d  loss %.6f  (%.1f ms)\n", s + 1, total, 1e3 * dt);
        fflush(stdout);
      }
    }
    res->steps = s + 1;
    if (o->checkpoint_dir && o->checkpoint_every > 0 && ((s + 1) % o->checkpoint_every == 0 || s + 1 == o->steps)) {
      char path[4096] = "";
      st = save_checkpoint(&R, s + 1, path, sizeof path);
      if (!st && R.rank == 0 && !o->quiet) {
        printf("           checkpoint %s\n", path);
        fflush(stdout);
      }
    }
  }
  res->seconds = now() - t0;
  /* every rank gathers the weights even when rank 0 failed to write the trace */
  pcgc_status trace_st = !st && tr ? write_trace(&R, tr) : PCGC_OK;
  if (!st) st = finish(&R, res);
  if (!st) st = trace_st;
done:
  free(tr);
  if (o->step_timeout > 0) alarm(0);
  if (g_group_text)
    for (int k = 0; k < g_n_groups; k++) free(g_group_text[k]);
  free(g_group_text);
  g_group_text = NULL;
  g_n_groups = 0;
  free(slot_group);
  for (int i = 0; R.data && i < g->n_nodes; i++) {
    pcgc_npy_close(R.data[i]);
    free(R.data[i]);
  }
  free(R.data);
  free(R.data_tmp);
  free(R.data_raw);
  for (int k = 0; R.dcomm && k < p->n_groups; k++)
    if (R.dcomm[k]) be->comm_close(be, R.dcomm[k]);
  for (int d = 0; R.to && d < p->n_devices; d++) {
    if (R.to[d]) be->comm_close(be, R.to[d]);
    if (R.from[d]) be->comm_close(be, R.from[d]);
  }
  free(R.dcomm);
  free(R.to);
  free(R.from);
  if (R.comm && R.mpi)
    for (int k = 0; k < p->n_groups; k++)
      if (R.comm[k] != MPI_COMM_NULL) MPI_Comm_free(&R.comm[k]);
  for (int k = 0; R.req_stage && k < P->n_requests; k++) {
    be->release(be, R.req_stage[k]);
    if (!be->host) free(R.req_h[k]);
  }
  for (int k = 0; R.rs && k < P->n_requests; k++) {
    free(R.rs[k].cnt);
    free(R.rs[k].cnt64);
  }
  free(R.rs);
  free(R.req_stage);
  free(R.req_h);
  free(R.reqs);
  free(R.pend);
  free(R.sends);
  free(R.dn);
  free(R.direct_h);
  free(R.direct_at);
  free(R.comm);
  be->release(be, R.arena);
  be->release(be, R.send_stage);
  be->release(be, R.recv_stage);
  if (R.widen) be->release(be, R.widen);
  if (R.have_bf16_sum) MPI_Op_free(&R.bf16_sum);
  if (!be->host) {
    free(R.send_h);
    free(R.recv_h);
  }
  free(R.host_tmp);
  if (R.ctl == &R.own_ctl) pcgc_ctl_destroy(&R.own_ctl);
  if (be == &R.cpu) pcgc_backend_close(&R.cpu);
  return st;
}
