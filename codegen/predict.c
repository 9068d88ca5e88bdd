/*
 * predict.c — the simulator of a program (codegen.h, pcgc_program_simulate):
 * one training step predicted from the instruction streams pcgc run
 * executes, in their order, so that what is predicted is what runs.
 *
 * Every device runs its stream in order on one compute stream, as the
 * runtime does (runtime/exec.c). Kernels take the cost model's time of
 * their node's piece (pcgc_cost_node_time, or a profile database's
 * measured time through pcgc_profile_node_time: the same numbers the
 * search's simulator uses); copies, zeroing and the staging a message
 * needs take their bytes over the device's memory bandwidth; updates take
 * pcgc_cost_update's (or the profile's) time of the weight box.
 * Communication follows the runtime's semantics:
 *   - SEND copies its box into a staging buffer and goes on (non-blocking);
 *     consecutive SENDs pack in one launch (pcgc_send_pack_run: the first
 *     pays the launch, the others their bytes); where its planned staging
 *     overlaps an earlier send's, it first waits until that message has
 *     arrived (the runtime completes that send; a packed run, for all of
 *     its sends' at its first); the message holds the sender's out port
 *     and the receiver's in port of the link between them for its bytes
 *     over the bandwidth, first come, first served, and arrives the link's
 *     latency later (pcgc_comm_p2p_time in all): messages to different
 *     peers overlap their latencies, as the runtime's sends do (MPI_Isend,
 *     or NCCL on a communicator and stream per pair of devices). Messages
 *     between the same two devices follow one another (one stream): one
 *     leaves once the one before it has arrived. A latency-bound message
 *     (its bytes take no longer than its latency: pcgc_comm_slips_in)
 *     waits for no port: links interleave it with the packets of the
 *     messages already on them;
 *   - RECV waits until its message has arrived, then copies it in (nothing
 *     where it set a contiguous run of its buffer: received in place);
 *   - BCAST, REDUCE, ALLREDUCE wait until every member of the group has
 *     reached the collective (members meet a group's collectives in one
 *     order: codegen's schedule guarantees it), then take pcgc_comm_time
 *     (a reduce timed as an all-reduce, like the search's simulator) on the
 *     ports of every member: it holds them for that time less its latency
 *     (pcgc_comm_latency), which follows, and a latency-bound one (a batch
 *     norm's statistics) waits for no port, as a message;
 *   - ALLREDUCE_START (and REDUCESCATTER_START) joins the collective and goes on; WAIT blocks until
 *     it is done (progress is assumed to be asynchronous); one over a whole
 *     buffer runs in place, without the staging copies. Such a background
 *     all-reduce waits for every message and collective before it on its
 *     ports, but a message or blocking collective passes it (port_fg: links
 *     interleave it with short messages; it is not slowed), as in the
 *     search's simulator.
 * The loop always advances the device whose clock is smallest (a min-heap
 * of (clock, device)), so messages and collectives claim ports roughly in
 * the order of time. A device that must wait leaves the heap until the
 * message or the collective it waits for completes. If no device can move
 * and some stream is unfinished, the program deadlocks: an error names the
 * device and its instruction (codegen's ordering is meant to exclude this,
 * and the tests check that it does).
 *
 * The critical path is the same run with every link port free: no
 * contention, the streams' order kept.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen.h"
#include "uthash.h"

/* The link ports a message or collective holds (search/sim.c's model). */
enum { P_INTRA_OUT, P_INTRA_IN, P_INTER_OUT, P_INTER_IN, P_KINDS };

typedef struct msg {
  int64_t key;  /* (from * D + to) << 24 | tag; pairs: from * D + to */
  double arrive;
  UT_hash_handle hh;
} msg;

/* One collective of a group: who has reached it, and when it ends. */
typedef struct rdv {
  int arrived;
  double t_max;
  double start, end;  /* end < 0: not all members have arrived */
  uint8_t coll;       /* pcgc_collective, for the trace */
  double bytes;
} rdv;

typedef struct dstate {
  int pc;
  double clock;
  int wait;         /* W_* */
  int64_t wkey;     /* the message or rendezvous it waits for */
  int32_t joined;   /* rendezvous joined at the current instruction (-1: none) */
} dstate;

enum { W_NONE, W_MSG, W_RDV, W_DONE };

typedef struct hitem {
  double t;
  int dev;
} hitem;

typedef struct psim {
  const pcgc_program *p;
  const pcgc_graph *g;
  const pcgc_machine *m;
  const pcgc_sim_options *o;
  bool contention;
  bool cpu_hold;     /* a CPU machine: an all-reduce holds its members' streams (its cores do its work) */
  int D, dpn;
  dstate *ds;
  hitem *heap;
  int hn;
  double *port_free; /* [P_KINDS * D] */
  double *port_fg;   /* [P_KINDS * D]: when messages and blocking collectives may pass background all-reduces */
  msg *msgs;
  msg *pairs;        /* per pair of devices that exchanged messages: the last one's arrival */
  /* rendezvous: per group a list by sequence number; per device and group its next sequence */
  rdv *rv;
  int64_t n_rv, cap_rv;
  int64_t **grp_rv;  /* [n_groups]: rendezvous ids by sequence */
  int64_t *grp_n, *grp_cap;
  int32_t *seq;      /* [D * n_groups] */
  int32_t **slot_rv; /* [D][n_requests]: the rendezvous a START's slot refers to */
  pcgc_op_time *nt;  /* [n_nodes] kernel times, computed on first use */
  bool *nt_done;
  int prof[PCGC_PROFILE_SOURCE_COUNT], uprof[PCGC_PROFILE_SOURCE_COUNT];
  double *busy;      /* [D] */
  /* send staging, per device: each send's arrival, sends issued */
  double **s_arrive;
  int32_t *n_sent;
  int32_t *pack_left; /* sends of the packed run still to come */
  int32_t *unpack_end; /* the instruction after the run of RECVs received with its first */
  int **dn_k;          /* per device: its sends from their buffers, by send_done */
  int32_t *dn_n, *dn_next;
  double fwd_end, task_time, bytes_intra, bytes_inter;
  int64_t n_msgs;
  /* o->trace_path: one task per instruction (device d's at ins_off[d] + pc) */
  pcgc_tasks *tr;
  int64_t *ins_off;
  int32_t *tr_rv;    /* collectives: their rendezvous */
  pcgc_error *err;
} psim;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------ heap */

static bool hless(hitem a, hitem b) { return a.t < b.t || (a.t == b.t && a.dev < b.dev); }

static void hpush(psim *S, int dev, double t) {
  int i = S->hn++;
  hitem x = {t, dev};
  while (i > 0) {
    int q = (i - 1) / 2;
    if (!hless(x, S->heap[q])) break;
    S->heap[i] = S->heap[q];
    i = q;
  }
  S->heap[i] = x;
}

static hitem hpop(psim *S) {
  hitem top = S->heap[0], x = S->heap[--S->hn];
  int i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= S->hn) break;
    if (c + 1 < S->hn && hless(S->heap[c + 1], S->heap[c])) c++;
    if (!hless(S->heap[c], x)) break;
    S->heap[i] = S->heap[c];
    i = c;
  }
  if (S->hn) S->heap[i] = x;
  return top;
}

/* ----------------------------------------------------------------- costs */

static int64_t box_numel(const pcgc_box *b) {
  int64_t n = 1;
  for (int d = 0; d < b->rank; d++) n *= b->len[d];
  return n;
}

/* Bytes of the region an instruction names: its box, else buffer `b` whole. */
static double region_bytes(const pcgc_device_program *P, const pcgc_ins *I, int b) {
  int64_t at, span;
  if (b < 0 && pcgc_allreduce_span(P, I, &at, &span)) return (double)span; /* a gradient bucket */
  if (b < 0) return 0;
  const pcgc_plan_buf *B = &P->buf[b];
  if (I->box < 0) return (double)B->bytes;
  return (double)box_numel(&P->boxes[I->box]) * (double)pcgc_dtype_size(B->dtype);
}

/* Moving `bytes` through memory once (read and write: 2x; adding: 3x). */
static double mem_time(const psim *S, double bytes, bool add) { return pcgc_cost_copy_time(S->m, bytes, add); }

/* Writing `bytes` once (zeroing). */
static double fill_time(const psim *S, double bytes) { return pcgc_cost_fill_time(S->m, bytes); }

static pcgc_status node_time(psim *S, int node, pcgc_op_time *t) {
  if (node < 0 || node >= S->g->n_nodes)
    return pcgc_error_set(S->err, PCGC_ERR_INVALID, "the program names node %d of a graph of %d nodes", node,
                          S->g->n_nodes);
  if (!S->nt_done[node]) {
    pcgc_status st = pcgc_cost_node_time(S->m, S->g, node, &S->nt[node], S->err);
    if (st != PCGC_OK) return st;
    if (S->o->profile) {
      pcgc_profile_source src = pcgc_profile_node_time(S->o->profile, S->m, S->g, node, &S->nt[node]);
      /* once per node: the time is kept for both runs (the critical path's comes first) */
      if (pcgc_cost_efficiency(S->g->nodes[node].kind)->kernel) S->prof[src]++;
    }
    S->nt_done[node] = true;
  }
  *t = S->nt[node];
  return PCGC_OK;
}

static double update_time(psim *S, const pcgc_device_program *P, const pcgc_ins *I) {
  pcgc_ptensor t; /* with a box (ZeRO-1): that slab; a bucket's: the span of its weights */
  int64_t at[4], span;
  if (I->dst < 0 && pcgc_update_spans(P, I, at, &span)) {
    int64_t e = span / (int64_t)sizeof(float);
    pcgc_ptensor_init(&t, PCGC_F32, 1, &e);
  } else {
    const pcgc_plan_buf *B = &P->buf[I->dst];
    pcgc_ptensor_init(&t, B->dtype, B->rank, I->box >= 0 ? P->boxes[I->box].len : B->dims);
  }
  pcgc_op_cost uc = pcgc_cost_update(S->o->optimizer, &t);
  double tu = pcgc_cost_roofline(S->m, PCGC_OP_MUL, t.dtype, uc.fwd_flops, uc.fwd_bytes);
  if (S->o->profile) {
    pcgc_profile_source src = pcgc_profile_update_time(S->o->profile, S->m, S->o->optimizer, &t, &tu);
    if (S->contention) S->uprof[src]++;
  }
  return tu;
}

static int port(const psim *S, int which, int d) {
  bool intra = which == P_INTRA_OUT || which == P_INTRA_IN;
  int x = (intra ? S->m->intra.shared : S->m->inter.shared) ? d / S->dpn * S->dpn : d;
  return which * S->D + x;
}

/* The earliest a message may start at or after t on the ports it holds
 * (t itself where it slips in: pcgc_comm_slips_in), and marks them busy
 * until start + dur. */
static double claim(psim *S, const int *ports, int n, double t, double dur, bool slips) {
  if (!S->contention) return t;
  for (int i = 0; i < n && !slips; i++)
    if (S->port_fg[ports[i]] > t) t = S->port_fg[ports[i]];
  for (int i = 0; i < n; i++) {
    if (S->port_free[ports[i]] < t + dur) S->port_free[ports[i]] = t + dur;
    if (S->port_fg[ports[i]] < t + dur) S->port_fg[ports[i]] = t + dur;
  }
  return t;
}

/* ---------------------------------------------------------- rendezvous */

static int64_t rdv_get(psim *S, int group, int32_t seq) {
  while (S->grp_n[group] <= seq) {
    if (S->n_rv == S->cap_rv) {
      int64_t cap = S->cap_rv ? 2 * S->cap_rv : 256;
      rdv *r = realloc(S->rv, (size_t)cap * sizeof *r);
      if (!r) return -1;
      S->rv = r;
      S->cap_rv = cap;
    }
    if (S->grp_n[group] == S->grp_cap[group]) {
      int64_t cap = S->grp_cap[group] ? 2 * S->grp_cap[group] : 16;
      int64_t *l = realloc(S->grp_rv[group], (size_t)cap * sizeof *l);
      if (!l) return -1;
      S->grp_rv[group] = l;
      S->grp_cap[group] = cap;
    }
    S->rv[S->n_rv] = (rdv){0, 0, 0, -1, 0, 0};
    S->grp_rv[group][S->grp_n[group]++] = S->n_rv++;
  }
  return S->grp_rv[group][seq];
}

/* A collective completes: its time on the members' ports, then every
 * member waiting on it moves again. */
static void rdv_complete(psim *S, int64_t id, int group, pcgc_collective c, double bytes, bool bg) {
  const pcgc_program *p = S->p;
  const int *devs = p->group_dev + p->group_off[group];
  int n = p->group_off[group + 1] - p->group_off[group];
  pcgc_comm_group grp = pcgc_comm_group_of(S->m, n, devs);
  double dur = pcgc_comm_time(S->m, c, S->o->algo, grp, bytes), lat = pcgc_comm_latency(S->m, c, S->o->algo, grp, dur);
  bool slips = pcgc_comm_slips_in(dur, lat);
  double t = S->rv[id].t_max;
  if (S->contention) {
    /* it starts once every port it uses (intra within nodes, inter across them) of every
     * member is free (at once where it slips in), and holds them all for its bytes; its
     * latency follows */
    for (int pass = 0; pass < 2; pass++)
      for (int i = 0; i < n; i++)
        for (int k = 0; k < P_KINDS; k++) {
          if (!(k < P_INTER_OUT ? grp.per_node > 1 : grp.nodes > 1)) continue;
          double *f = &S->port_free[port(S, k, devs[i])], *g = &S->port_fg[port(S, k, devs[i])];
          double w = bg ? *f : *g;
          if (pass == 0 && w > t && !slips) t = w;
          if (pass == 1) {
            if (*f < t + dur - lat) *f = t + dur - lat;
            if (!bg && *g < t + dur - lat) *g = t + dur - lat;
          }
        }
    double k = pcgc_collective_passes(c);
    S->bytes_intra += k * (n - grp.nodes) * bytes;
    S->bytes_inter += k * (grp.nodes - 1) * bytes;
    S->task_time += dur;
  }
  S->rv[id].start = t;
  S->rv[id].end = t + dur;
  S->rv[id].coll = (uint8_t)c;
  S->rv[id].bytes = bytes;
  for (int i = 0; i < n; i++) {
    dstate *x = &S->ds[devs[i]];
    if (x->wait == W_RDV && x->wkey == id) {
      x->wait = W_NONE;
      hpush(S, devs[i], x->clock > t + dur ? x->clock : t + dur);
    }
  }
}

/* ------------------------------------------------------------- one step */

/* The simulator's task kind an instruction counts as in the report. */
static pcgc_task_kind task_kind(int k) {
  switch ((pcgc_ins_kind)k) {
  case PCGC_INS_FORWARD:
  case PCGC_INS_BN_STATS:
  case PCGC_INS_BN_APPLY: return PCGC_TASK_FORWARD;
  case PCGC_INS_BACKWARD:
  case PCGC_INS_BN_BWD_STATS:
  case PCGC_INS_BN_BWD_APPLY: return PCGC_TASK_BACKWARD;
  case PCGC_INS_UPDATE: return PCGC_TASK_OPTIMIZER;
  case PCGC_INS_SEND: return PCGC_TASK_TRANSFER;
  case PCGC_INS_BCAST:
  case PCGC_INS_REDUCE:
  case PCGC_INS_ALLREDUCE:
  case PCGC_INS_ALLREDUCE_START:
  case PCGC_INS_ALLGATHER:
  case PCGC_INS_REDUCESCATTER_START: return PCGC_TASK_COLLECTIVE;
  case PCGC_INS_RECV:
  case PCGC_INS_WAIT: return PCGC_TASK_JOIN;
  default: return PCGC_TASK_ADD; /* copies, zeroing, seeds, losses */
  }
}

/* Task i of a trace stands for instruction I of device d of p: kernels,
 * copies and updates on the compute stream, SENDs and collectives on the
 * links, a RECV or WAIT as the copy that follows it. */
static void trace_fill(pcgc_tasks *T, int64_t i, int d, const pcgc_program *p, const pcgc_ins *I, double start,
                       double dur) {
  pcgc_task_kind k = task_kind(I->kind);
  if (k == PCGC_TASK_JOIN) k = PCGC_TASK_ADD;
  T->kind[i] = (uint8_t)k;
  T->phase[i] = k == PCGC_TASK_BACKWARD ? PCGC_PHASE_BACKWARD : k == PCGC_TASK_OPTIMIZER ? PCGC_PHASE_UPDATE : PCGC_PHASE_FORWARD;
  T->dev[i] = d;
  T->peer[i] = I->peer;
  T->coll[i] = 0;
  if (k == PCGC_TASK_COLLECTIVE) {
    T->coll[i] = I->kind == PCGC_INS_REDUCE      ? PCGC_COLL_REDUCE
               : I->kind == PCGC_INS_BCAST     ? PCGC_COLL_BROADCAST
               : I->kind == PCGC_INS_ALLGATHER ? PCGC_COLL_ALL_GATHER
               : I->kind == PCGC_INS_REDUCESCATTER_START ? PCGC_COLL_REDUCE_SCATTER
                                               : PCGC_COLL_ALL_REDUCE;
    T->peer[i] = I->peer >= 0 && I->peer < p->n_groups ? p->group_off[I->peer + 1] - p->group_off[I->peer] : 0;
  }
  T->node[i] = I->node;
  T->piece[i] = I->piece > INT32_MAX ? INT32_MAX : (int32_t)I->piece;
  T->micro[i] = I->micro;
  T->start[i] = start;
  T->dur[i] = dur;
  int b = I->kind == PCGC_INS_SEND ? I->src : I->dst >= 0 ? I->dst : I->src;
  T->bytes[i] = k == PCGC_TASK_TRANSFER || k == PCGC_TASK_COLLECTIVE ? region_bytes(&p->dev[d], I, b) : 0;
}

/* The simulation's trace: a SEND drawn as its message on the link (its
 * staging is not drawn); a collective's time on the links is filled in once
 * every member has reached it (trace_write). */
static void trace_ins(psim *S, int d, const pcgc_ins *I, double at, double dur, double wire_start, double wire,
                      int64_t rvid) {
  int64_t i = S->ins_off[d] + S->ds[d].pc;
  bool send = I->kind == PCGC_INS_SEND;
  trace_fill(S->tr, i, d, S->p, I, send ? wire_start : at, send ? wire : dur);
  S->tr_rv[i] = (int32_t)rvid;
}

/* bf16 storage: a kernel's bf16 arguments widened into f32 before it runs
 * and what it wrote rounded back after (runtime/exec.c): inputs, outputs
 * read by backward and output gradients once, the gradients it adds into
 * twice, forward's outputs once. */
static double widen_time(const psim *S, const pcgc_device_program *P, const pcgc_ins *I) {
  if (!S->p->bf16) return 0;
  const pcgc_node *n = &S->g->nodes[I->node];
  double bytes = 0;
  for (int j = 0; j < I->n_args; j++) {
    int b = P->args[I->args + j];
    if (b < 0 || P->buf[b].dtype != PCGC_BF16) continue;
    bool din = I->kind == PCGC_INS_BACKWARD && j >= n->n_in + 2 * n->n_out;
    bytes += (din ? 2 : 1) * (double)P->buf[b].bytes;
  }
  return pcgc_cost_widen_time(S->m, bytes);
}

/* Runs instruction pc of device d at its clock; false when it must wait. */
static pcgc_status step(psim *S, int d, bool *moved) {
  const pcgc_device_program *P = &S->p->dev[d];
  dstate *x = &S->ds[d];
  const pcgc_ins *I = &P->ins[x->pc];
  double dur = 0, wire_start = 0, wire = 0; /* SEND: the message on the link */
  int64_t rvid = -1;                          /* collectives: the rendezvous */
  pcgc_op_time t = {0, 0};
  pcgc_status st;
  *moved = true;
  for (; S->dn_next[d] < S->dn_n[d] && P->send_done[S->dn_k[d][S->dn_next[d]]] <= x->pc; S->dn_next[d]++) {
    int k = S->dn_k[d][S->dn_next[d]]; /* a send from its buffer completes: the runtime waits for it */
    if (k >= S->n_sent[d])
      return pcgc_error_set(S->err, PCGC_ERR_INVALID, "device %d completes send %d at instruction %d, before it is made",
                            d, k + 1, x->pc);
    if (S->s_arrive[d][k] > x->clock) x->clock = S->s_arrive[d][k];
  }
  switch ((pcgc_ins_kind)I->kind) {
  case PCGC_INS_FORWARD:
  case PCGC_INS_BACKWARD:
  case PCGC_INS_BN_STATS:
  case PCGC_INS_BN_APPLY:
  case PCGC_INS_BN_BWD_STATS:
  case PCGC_INS_BN_BWD_APPLY: {
    if ((st = node_time(S, I->node, &t)) != PCGC_OK) return st;
    bool fwd = I->kind == PCGC_INS_FORWARD || I->kind == PCGC_INS_BN_STATS || I->kind == PCGC_INS_BN_APPLY;
    dur = fwd ? t.fwd : t.bwd;
    if (I->kind != PCGC_INS_FORWARD && I->kind != PCGC_INS_BACKWARD) dur /= 2; /* statistics, then applying them */
    dur += widen_time(S, P, I);
    const pcgc_node *n = &S->g->nodes[I->node]; /* its last output: RECOMPUTE where it runs again */
    int lo = n->n_in + n->n_out - 1;
    bool recompute = I->kind == PCGC_INS_FORWARD && lo >= 0 && lo < I->n_args && P->args[I->args + lo] >= 0 &&
                     P->buf[P->args[I->args + lo]].role == PCGC_BUF_RECOMPUTE;
    if (fwd && !recompute && x->clock + dur > S->fwd_end) S->fwd_end = x->clock + dur;
    break;
  }
  case PCGC_INS_ZERO: { /* one launch, for one buffer or a list */
    double bytes = I->dst >= 0 ? (double)P->buf[I->dst].bytes : 0;
    for (int i = 0; I->dst < 0 && i < I->n_args; i++) bytes += (double)P->buf[P->args[I->args + i]].bytes;
    dur = fill_time(S, bytes);
    break;
  }
  case PCGC_INS_SEED: /* into a kept buffer: written once, before the first step */
    dur = I->dst >= 0 && P->buf[I->dst].persistent ? 0 : mem_time(S, 4, false);
    break;
  case PCGC_INS_LOSS: break; /* read once the step is done */
  case PCGC_INS_UPDATE: dur = update_time(S, P, I); break;
  case PCGC_INS_SEND: {
    double bytes = region_bytes(P, I, I->src);
    int k = S->n_sent[d]++;
    if (k >= P->n_sends)
      return pcgc_error_set(S->err, PCGC_ERR_INVALID, "device %d sends more than the %d messages it plans", d,
                            P->n_sends);
    dur = mem_time(S, bytes, false);
    if (P->send_done && P->send_done[k] >= 0) { /* straight from its buffer: nothing to pack */
      dur = 0;
    } else if (S->pack_left[d] > 0) { /* packed with the run's first: no launch of its own */
      S->pack_left[d]--;
      dur = dur > S->m->device.launch_overhead ? dur - S->m->device.launch_overhead : 0;
    } else { /* a run's first: it completes the messages whose bytes the run's staging held */
      int run = pcgc_send_pack_run(P, x->pc, k);
      S->pack_left[d] = run > 1 ? run - 1 : 0;
      for (int i = k; i < k + (run > 1 ? run : 1); i++)
        for (int w = P->send_wait_off[i]; w < P->send_wait_off[i + 1]; w++) {
          int j = P->send_wait[w];
          if (j >= 0 && j < k && S->s_arrive[d][j] > x->clock) x->clock = S->s_arrive[d][j];
        }
    }
    bool same = d / S->dpn == I->peer / S->dpn;
    int ports[2] = {port(S, same ? P_INTRA_OUT : P_INTER_OUT, d), port(S, same ? P_INTRA_IN : P_INTER_IN, I->peer)};
    double tt = pcgc_comm_p2p_time(S->m, same, 1, bytes), lat = pcgc_comm_p2p_latency(S->m, same, tt);
    int64_t pk = (int64_t)d * S->D + I->peer;
    msg *pr = NULL;
    HASH_FIND(hh, S->pairs, &pk, sizeof pk, pr);
    double leave = x->clock + dur;
    if (pr && pr->arrive > leave) leave = pr->arrive; /* the pair's stream: after the message before it */
    double s0 = claim(S, ports, 2, leave, tt - lat, pcgc_comm_slips_in(tt, lat));
    if (!pr) {
      if (!(pr = malloc(sizeof *pr))) return pcgc_error_set(S->err, PCGC_ERR_NOMEM, "out of memory");
      pr->key = pk;
      HASH_ADD(hh, S->pairs, key, sizeof pr->key, pr);
    }
    pr->arrive = s0 + tt;
    msg *e = malloc(sizeof *e);
    if (!e) return pcgc_error_set(S->err, PCGC_ERR_NOMEM, "out of memory");
    e->key = ((int64_t)d * S->D + I->peer) << 24 | (int64_t)(I->tag & 0xffffff);
    e->arrive = s0 + tt;
    S->s_arrive[d][k] = e->arrive;
    wire_start = s0;
    wire = tt;
    HASH_ADD(hh, S->msgs, key, sizeof e->key, e);
    if (S->contention) {
      S->n_msgs++;
      S->task_time += tt;
      if (same) S->bytes_intra += bytes;
      else S->bytes_inter += bytes;
    }
    dstate *r = &S->ds[I->peer];
    if (r->wait == W_MSG && r->wkey == e->key) {
      r->wait = W_NONE;
      hpush(S, I->peer, r->clock > e->arrive ? r->clock : e->arrive);
    }
    break;
  }
  case PCGC_INS_COPY: /* in a run of receives: moved by its unpacking; leading one: as a RECV leading it */
    if (x->pc < S->unpack_end[d]) break;
    if (pcgc_recv_unpack_run(P, x->pc, NULL, NULL) < 2) {
      dur = mem_time(S, region_bytes(P, I, I->dst), I->add);
      break;
    }
    /* fall through */
  case PCGC_INS_RECV: {
    if (x->pc < S->unpack_end[d]) break; /* received and unpacked with its run's first */
    int run = pcgc_recv_unpack_run(P, x->pc, NULL, NULL), n = run > 1 ? run : 1;
    msg *e[PCGC_PACK_MAX];
    for (int i = 0; i < n; i++) { /* a run waits for all of its messages, then unpacks them in one launch */
      const pcgc_ins *J = &P->ins[x->pc + i];
      e[i] = NULL;
      if (J->kind == PCGC_INS_COPY) continue; /* a local piece, moved by the same launch */
      int64_t key = ((int64_t)J->peer * S->D + d) << 24 | (int64_t)(J->tag & 0xffffff);
      HASH_FIND(hh, S->msgs, &key, sizeof key, e[i]);
      if (!e[i]) {
        x->wait = W_MSG;
        x->wkey = key;
        *moved = false;
        return PCGC_OK;
      }
    }
    double l = S->m->device.launch_overhead;
    for (int i = 0; i < n; i++) {
      const pcgc_ins *J = &P->ins[x->pc + i];
      if (e[i]) {
        if (e[i]->arrive > x->clock) x->clock = e[i]->arrive;
        HASH_DEL(S->msgs, e[i]);
        free(e[i]);
      }
      int64_t at;
      double u = J->kind == PCGC_INS_RECV && pcgc_recv_in_place(P, J, &at) ? 0
                 : mem_time(S, region_bytes(P, J, J->dst), J->add); /* else unpacked, or copied */
      dur += i == 0 ? u : u > l ? u - l : 0;
    }
    if (n > 1) S->unpack_end[d] = x->pc + n;
    break;
  }
  case PCGC_INS_BCAST:
  case PCGC_INS_REDUCE:
  case PCGC_INS_ALLREDUCE:
  case PCGC_INS_ALLREDUCE_START:
  case PCGC_INS_ALLGATHER:
  case PCGC_INS_REDUCESCATTER_START: {
    bool start = I->kind == PCGC_INS_ALLREDUCE_START || I->kind == PCGC_INS_REDUCESCATTER_START;
    int b = I->src >= 0 && I->kind != PCGC_INS_ALLGATHER ? I->src : I->dst, grp = I->peer;
    if (grp < 0 || grp >= S->p->n_groups)
      return pcgc_error_set(S->err, PCGC_ERR_INVALID, "device %d instruction %d names group %d of %d", d, x->pc, grp,
                            S->p->n_groups);
    /* an all-gather runs on its buffer in place (ZeRO-3: after its slab is copied in) */
    double bytes = region_bytes(P, I, b),
           stage = I->kind == PCGC_INS_ALLGATHER ? I->src >= 0 ? mem_time(S, region_bytes(P, I, I->src), false) : 0
                   : pcgc_allreduce_in_place(P, I) ? 0 : mem_time(S, bytes, false);
    int64_t id = x->joined;
    if (id < 0) { /* reaching it: stage the box in, then join */
      id = rdv_get(S, grp, S->seq[(int64_t)d * S->p->n_groups + grp]++);
      if (id < 0) return pcgc_error_set(S->err, PCGC_ERR_NOMEM, "out of memory");
      x->joined = (int32_t)id;
      x->clock += stage;
      S->busy[d] += stage;
      rdv *r = &S->rv[id];
      if (x->clock > r->t_max) r->t_max = x->clock;
      int n = S->p->group_off[grp + 1] - S->p->group_off[grp];
      if (++r->arrived == n) {
        pcgc_collective c = I->kind == PCGC_INS_BCAST       ? PCGC_COLL_BROADCAST
                            : I->kind == PCGC_INS_ALLGATHER ? PCGC_COLL_ALL_GATHER
                            : I->kind == PCGC_INS_REDUCESCATTER_START ? PCGC_COLL_REDUCE_SCATTER
                                                            : PCGC_COLL_ALL_REDUCE;
        rdv_complete(S, id, grp, c, bytes, start && !S->cpu_hold);
      }
    }
    rvid = id;
    if (start) {
      if (I->tag < 0 || I->tag >= P->n_requests)
        return pcgc_error_set(S->err, PCGC_ERR_INVALID, "device %d instruction %d names request slot %d of %d", d,
                              x->pc, I->tag, P->n_requests);
      S->slot_rv[d][I->tag] = (int32_t)id;
      if (!S->cpu_hold) {
        x->joined = -1;
        break;
      }
      /* on a CPU machine the ranks' own cores copy and sum the all-reduce's data (the
       * runtime's progress calls between instructions do it): no core is left to overlap it
       * with, so it holds each member's stream as a blocking one does */
    }
    if (S->rv[id].end < 0) {
      x->wait = W_RDV;
      x->wkey = id;
      *moved = false;
      return PCGC_OK;
    }
    x->joined = -1;
    if (S->rv[id].end > x->clock) x->clock = S->rv[id].end;
    dur = I->dst >= 0 && I->kind != PCGC_INS_ALLGATHER ? stage : 0; /* and out again */
    break;
  }
  case PCGC_INS_WAIT: {
    int32_t id = I->tag >= 0 && I->tag < P->n_requests ? S->slot_rv[d][I->tag] : -1;
    if (id < 0)
      return pcgc_error_set(S->err, PCGC_ERR_INVALID, "device %d instruction %d waits on request slot %d, which no "
                            "all-reduce started", d, x->pc, I->tag);
    if (S->rv[id].end < 0) {
      x->wait = W_RDV;
      x->wkey = id;
      *moved = false;
      return PCGC_OK;
    }
    if (S->rv[id].end > x->clock) x->clock = S->rv[id].end;
    dur = pcgc_allreduce_in_place(P, I) ? 0 : mem_time(S, region_bytes(P, I, I->dst), false); /* unstaged */
    break;
  }
  case PCGC_INS_KIND_COUNT: break;
  }
  if (S->contention && S->tr) trace_ins(S, d, I, x->clock, dur, wire_start, wire, rvid);
  x->clock += dur;
  S->busy[d] += dur;
  if (S->contention) S->task_time += dur;
  x->pc++;
  return PCGC_OK;
}

/* Runs every stream to its end; the step's time in *end. */
static pcgc_status run(psim *S, double *end) {
  const pcgc_program *p = S->p;
  for (int d = 0; d < S->D; d++) {
    S->ds[d] = (dstate){0, 0, W_NONE, 0, -1};
    hpush(S, d, 0);
  }
  pcgc_status st = PCGC_OK;
  while (S->hn && st == PCGC_OK) {
    hitem h = hpop(S);
    dstate *x = &S->ds[h.dev];
    if (h.t > x->clock) x->clock = h.t;
    if (x->pc >= p->dev[h.dev].n_ins) {
      x->wait = W_DONE;
      continue;
    }
    bool moved;
    st = step(S, h.dev, &moved);
    if (st == PCGC_OK && moved) hpush(S, h.dev, x->clock);
  }
  if (st != PCGC_OK) return st;
  *end = 0;
  for (int d = 0; d < S->D; d++) {
    const dstate *x = &S->ds[d];
    if (x->wait != W_DONE) {
      const pcgc_ins *I = &p->dev[d].ins[x->pc];
      pcgc_error_set(S->err, PCGC_ERR_INVALID, "the program deadlocks: device %d waits forever at instruction %d (%s "
                     "of node %d) with every other device blocked or done", d, x->pc,
                     pcgc_ins_kind_name((pcgc_ins_kind)I->kind), I->node);
      pcgc_error_hint(S->err, "this is a codegen bug: please report the plan");
      return PCGC_ERR_INVALID;
    }
    if (x->clock > *end) *end = x->clock;
  }
  for (int64_t i = 0; i < S->n_rv; i++) /* non-blocking collectives nobody waited for */
    if (S->rv[i].end > *end) *end = S->rv[i].end;
  return PCGC_OK;
}

static void free_msgs(msg **h) {
  msg *e, *tmp;
  HASH_ITER(hh, *h, e, tmp) {
    HASH_DEL(*h, e);
    free(e);
  }
}

static void reset(psim *S) {
  free_msgs(&S->msgs);
  free_msgs(&S->pairs);
  for (int k = 0; k < S->p->n_groups; k++) S->grp_n[k] = 0;
  S->n_rv = 0;
  memset(S->seq, 0, (size_t)S->D * (size_t)(S->p->n_groups ? S->p->n_groups : 1) * sizeof *S->seq);
  for (int d = 0; d < S->D; d++)
    for (int k = 0; k < S->p->dev[d].n_requests; k++) S->slot_rv[d][k] = -1;
  for (int d = 0; d < S->D; d++) S->busy[d] = 0;
  for (int d = 0; d < S->D; d++) S->n_sent[d] = S->pack_left[d] = S->unpack_end[d] = S->dn_next[d] = 0;
  for (int i = 0; i < P_KINDS * S->D; i++) S->port_free[i] = S->port_fg[i] = 0;
  S->hn = 0;
}

static void tasks_free(pcgc_tasks *T);

static void psim_free(psim *S) {
  free_msgs(&S->msgs);
  free_msgs(&S->pairs);
  free(S->ds);
  free(S->heap);
  free(S->port_free);
  free(S->port_fg);
  free(S->rv);
  for (int k = 0; S->grp_rv && k < S->p->n_groups; k++) free(S->grp_rv[k]);
  free(S->grp_rv);
  free(S->grp_n);
  free(S->grp_cap);
  free(S->seq);
  for (int d = 0; S->slot_rv && d < S->D; d++) free(S->slot_rv[d]);
  free(S->slot_rv);
  for (int d = 0; S->s_arrive && d < S->D; d++) free(S->s_arrive[d]);
  free(S->s_arrive);
  free(S->n_sent);
  free(S->pack_left);
  free(S->unpack_end);
  for (int d = 0; S->dn_k && d < S->D; d++) free(S->dn_k[d]);
  free(S->dn_k);
  free(S->dn_n);
  free(S->dn_next);
  free(S->nt);
  free(S->nt_done);
  free(S->busy);
  free(S->ins_off);
  free(S->tr_rv);
  tasks_free(S->tr);
}

static void tasks_free(pcgc_tasks *T) {
  if (!T) return;
  pcgc_tasks_release(T);
  free(T);
}

/* Room for a trace of every instruction of p, device d's at off[d] + pc
 * (off: D + 1 entries). */
static pcgc_tasks *tasks_new(const pcgc_program *p, int64_t *off) {
  int64_t n = 0;
  for (int d = 0; d < p->n_devices; d++) {
    off[d] = n;
    n += p->dev[d].n_ins;
  }
  off[p->n_devices] = n;
  pcgc_tasks *T = n <= INT32_MAX ? calloc(1, sizeof *T) : NULL;
  if (!T) return NULL;
  size_t k = (size_t)(n ? n : 1);
  T->n = (int32_t)n;
  T->dur = malloc(k * sizeof *T->dur);
  T->kind = malloc(k * sizeof *T->kind);
  T->phase = malloc(k * sizeof *T->phase);
  T->coll = calloc(k, sizeof *T->coll);
  T->dev = malloc(k * sizeof *T->dev);
  T->peer = malloc(k * sizeof *T->peer);
  T->node = malloc(k * sizeof *T->node);
  T->piece = malloc(k * sizeof *T->piece);
  T->micro = malloc(k * sizeof *T->micro);
  T->bytes = malloc(k * sizeof *T->bytes);
  T->start = malloc(k * sizeof *T->start);
  if (T->dur && T->kind && T->phase && T->coll && T->dev && T->peer && T->node && T->piece && T->micro && T->bytes &&
      T->start)
    return T;
  tasks_free(T);
  return NULL;
}

/* o->trace_path: room for one task per instruction. */
static bool trace_alloc(psim *S) {
  if (!(S->ins_off = malloc(((size_t)S->D + 1) * sizeof *S->ins_off))) return false;
  if (!(S->tr = tasks_new(S->p, S->ins_off))) return false;
  return (S->tr_rv = malloc((size_t)(S->tr->n ? S->tr->n : 1) * sizeof *S->tr_rv)) != NULL;
}

/* Collectives take their rendezvous' time on the links; then the file. */
static pcgc_status trace_write(psim *S) {
  pcgc_tasks *T = S->tr;
  for (int d = 0; d < S->D; d++)
    for (int pc = 0; pc < S->p->dev[d].n_ins; pc++) {
      int64_t i = S->ins_off[d] + pc;
      if (T->kind[i] != PCGC_TASK_COLLECTIVE || S->tr_rv[i] < 0) continue;
      const rdv *r = &S->rv[S->tr_rv[i]];
      T->start[i] = r->start;
      T->dur[i] = r->end - r->start;
    }
  return pcgc_tasks_write_trace(S->o->trace_path, S->g, S->m, T, S->err);
}

/* What a device's buffers hold, by role. */
static pcgc_memory program_memory(const pcgc_device_program *P, const pcgc_graph *g) {
  pcgc_memory mm = {0};
  for (int b = 0; b < P->n_buf; b++) {
    const pcgc_plan_buf *B = &P->buf[b];
    bool weight = B->node >= 0 && B->node < g->n_nodes && g->nodes[B->node].kind == PCGC_OP_WEIGHT;
    if (B->role == PCGC_BUF_SOURCE && weight) mm.weights += (double)B->bytes;
    else if (B->role == PCGC_BUF_SOURCE_GRAD) mm.gradients += (double)B->bytes;
    else if (B->role == PCGC_BUF_OPT_M || B->role == PCGC_BUF_OPT_V) mm.optimizer += (double)B->bytes;
  }
  double arena = (double)P->arena_bytes;
  mm.activations = arena - mm.weights - mm.gradients - mm.optimizer;
  if (mm.activations < 0) mm.activations = 0;
  mm.comm = (double)P->send_bytes + (double)P->max_message_bytes + (double)P->request_bytes;
  mm.activations += (double)P->widen_bytes; /* bf16 storage: the kernels' widening workspace */
  mm.total = arena + mm.comm + (double)P->widen_bytes;
  return mm;
}

pcgc_status pcgc_program_simulate(const pcgc_program *p, const pcgc_graph *g, const pcgc_machine *m,
                                  const pcgc_sim_options *o, pcgc_sim_result *r, pcgc_error *err) {
  if (r) memset(r, 0, sizeof *r);
  if (!p || !g || !m || !r)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_program_simulate: program, graph, machine and result are required");
  int D = p->n_devices;
  if (D < 1 || D > pcgc_machine_num_devices(m)) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "the program runs on %d devices; machine '%s' has %d", D, m->name,
                   pcgc_machine_num_devices(m));
    pcgc_error_hint(err, "simulate it on a machine with at least as many devices");
    return PCGC_ERR_INVALID;
  }
  pcgc_sim_options od;
  if (!o) {
    pcgc_sim_options_default(&od);
    o = &od;
  }
  double t0 = now();
  psim S_, *S = &S_;
  memset(S, 0, sizeof *S);
  S->p = p;
  S->g = g;
  S->m = m;
  S->o = o;
  S->err = err;
  S->D = D;
  S->dpn = m->devices_per_node > 0 ? m->devices_per_node : 1;
  S->cpu_hold = m->device.kind == PCGC_DEVICE_CPU;
  int G = p->n_groups;
  S->ds = calloc((size_t)D, sizeof *S->ds);
  S->heap = malloc((size_t)D * sizeof *S->heap);
  S->port_free = calloc((size_t)P_KINDS * (size_t)D, sizeof *S->port_free);
  S->port_fg = calloc((size_t)P_KINDS * (size_t)D, sizeof *S->port_fg);
  S->grp_rv = calloc((size_t)(G ? G : 1), sizeof *S->grp_rv);
  S->grp_n = calloc((size_t)(G ? G : 1), sizeof *S->grp_n);
  S->grp_cap = calloc((size_t)(G ? G : 1), sizeof *S->grp_cap);
  S->seq = calloc((size_t)D * (size_t)(G ? G : 1), sizeof *S->seq);
  S->slot_rv = calloc((size_t)D, sizeof *S->slot_rv);
  S->nt = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *S->nt);
  S->nt_done = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *S->nt_done);
  S->busy = calloc((size_t)D, sizeof *S->busy);
  S->s_arrive = calloc((size_t)D, sizeof *S->s_arrive);
  S->n_sent = calloc((size_t)D, sizeof *S->n_sent);
  S->pack_left = calloc((size_t)D, sizeof *S->pack_left);
  S->unpack_end = calloc((size_t)D, sizeof *S->unpack_end);
  S->dn_k = calloc((size_t)D, sizeof *S->dn_k);
  S->dn_n = calloc((size_t)D, sizeof *S->dn_n);
  S->dn_next = calloc((size_t)D, sizeof *S->dn_next);
  r->device = calloc((size_t)pcgc_machine_num_devices(m), sizeof *r->device);
  pcgc_status st = PCGC_OK;
  if (!S->ds || !S->heap || !S->port_free || !S->port_fg || !S->grp_rv || !S->grp_n || !S->grp_cap || !S->seq || !S->slot_rv ||
      !S->nt || !S->nt_done || !S->busy || !S->s_arrive || !S->n_sent || !S->pack_left || !S->unpack_end || !S->dn_k || !S->dn_n || !S->dn_next || !r->device) {
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    goto out;
  }
  for (int d = 0; d < D; d++)
    if (!(S->slot_rv[d] = malloc((size_t)(p->dev[d].n_requests + 1) * sizeof **S->slot_rv)) ||
        !(S->s_arrive[d] = malloc((size_t)(p->dev[d].n_sends + 1) * sizeof **S->s_arrive)) ||
        !(S->dn_k[d] = malloc((size_t)(p->dev[d].n_sends + 1) * sizeof **S->dn_k))) {
      st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
      goto out;
    }
  for (int d = 0; d < D; d++) S->dn_n[d] = pcgc_sends_done_order(&p->dev[d], S->dn_k[d]); /* in the order they complete */
  double free_end = 0, end = 0;
  S->contention = false; /* the critical path first: every port free */
  reset(S);
  if ((st = run(S, &free_end)) != PCGC_OK) goto out;
  S->contention = true;
  S->fwd_end = 0;
  reset(S);
  if (o->trace_path && !trace_alloc(S)) {
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory for the trace");
    goto out;
  }
  if ((st = run(S, &end)) != PCGC_OK) goto out;
  if (o->trace_path && (st = trace_write(S)) != PCGC_OK) goto out;

  int Dm = pcgc_machine_num_devices(m);
  r->iteration_time = end;
  r->forward_time = S->fwd_end;
  r->critical_path = free_end;
  r->task_time = S->task_time;
  r->bytes_intra = S->bytes_intra;
  r->bytes_inter = S->bytes_inter;
  r->capacity = pcgc_machine_usable_memory(m);
  r->n_devices = Dm;
  r->stages = p->stages > 0 ? p->stages : 1;
  r->micro_batches = p->micro > 0 ? p->micro : 1;
  r->optimizer = o->optimizer;
  r->schedule = p->schedule;
  r->recompute = p->recompute;
  r->profiled = o->profile != NULL;
  memcpy(r->profile_kernels, S->prof, sizeof S->prof);
  memcpy(r->profile_updates, S->uprof, sizeof S->uprof);
  r->compute_min = INFINITY;
  for (int d = 0; d < Dm; d++) {
    pcgc_sim_device *dv = &r->device[d];
    if (d < D) {
      dv->compute = S->busy[d];
      dv->memory = program_memory(&p->dev[d], g);
      r->n_tasks += p->dev[d].n_ins;
      for (int i = 0; i < p->dev[d].n_ins; i++) r->tasks_by_kind[task_kind(p->dev[d].ins[i].kind)]++;
    }
    dv->idle = end - dv->compute;
    dv->oom = dv->memory.total > r->capacity;
    r->oom_devices += dv->oom;
    bool used = dv->compute > 0 || dv->memory.total > 0;
    r->used_devices += used;
    if (!used) continue;
    if (dv->compute < r->compute_min) r->compute_min = dv->compute;
    if (dv->compute > r->compute_max) r->compute_max = dv->compute;
  }
  for (int d = 0; d < Dm; d++)
    if (r->device[d].compute > 0 || r->device[d].memory.total > 0) r->compute_mean += r->device[d].compute / r->used_devices;
  if (!r->used_devices) r->compute_min = 0;
  r->n_edges = S->n_msgs + S->n_rv;
  r->program = true;
  r->run_seconds = now() - t0;
out:
  psim_free(S);
  if (st != PCGC_OK) {
    free(r->device);
    memset(r, 0, sizeof *r);
  }
  return st;
}

pcgc_status pcgc_program_trace_write(const char *path, const pcgc_program *p, const pcgc_graph *g,
                                     const double *start, const double *dur, pcgc_error *err) {
  if (!path || !p || !g || !start || !dur)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_program_trace_write: every argument is required");
  int64_t *off = malloc(((size_t)p->n_devices + 1) * sizeof *off);
  pcgc_tasks *T = off ? tasks_new(p, off) : NULL;
  if (!T) {
    free(off);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory for the trace");
  }
  for (int d = 0; d < p->n_devices; d++)
    for (int pc = 0; pc < p->dev[d].n_ins; pc++)
      trace_fill(T, off[d] + pc, d, p, &p->dev[d].ins[pc], start[off[d] + pc], dur[off[d] + pc]);
  pcgc_machine m; /* the writer names devices by node: one node of them all */
  memset(&m, 0, sizeof m);
  snprintf(m.name, sizeof m.name, "run");
  m.nodes = 1;
  m.devices_per_node = p->n_devices;
  pcgc_status st = pcgc_tasks_write_trace(path, g, &m, T, err);
  tasks_free(T);
  free(off);
  return st;
}
