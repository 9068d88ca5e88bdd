/*
 * sim.c — the execution simulator (search.h, "Simulator"): the task graph of
 * one training iteration of a mapped parallel graph, run event by event.
 *
 * Building. One pass over the graph in topological order. Each ordinary op
 * gets a block of forward task ids (one per output piece and micro-batch)
 * and a block of backward ids; each parallel op that moves real data gets
 * two blocks of joins (zero-time bookkeeping tasks: "this piece is
 * assembled", "its gradient is complete"). Since a node only refers to its
 * producers, which come earlier, every id it needs exists; dependencies are
 * appended to one edge list and become successor lists (counting sort) at
 * the end. Transfers and collectives are appended as they are found, each
 * with the link ports it holds. Weights are handled last: the reads of each
 * weight element are grouped (counting sort on the piece) into the devices
 * that keep a copy, which then all-reduce the gradient and update.
 *
 * Running. Resources are each device's compute stream and, per link class,
 * an out port and an in port per device, or per node where the machine
 * says the link is shared. A task is ready when its last predecessor ends;
 * ready tasks leave a min-heap in order of ready time (ties by id, which is
 * topological order). A transfer or collective then starts at the later of
 * its ready time and the moment every port it holds is free: first come,
 * first served, like NCCL channels. A compute task joins its device's queue
 * instead; once nothing more becomes ready at the current instant, each
 * free device with queued tasks starts the one of smallest rank: forward
 * before backward, the oldest micro-batch first, forward tasks in
 * topological order and backward ones in reverse, optimizer updates last.
 * So a pipeline stage takes micro-batch 0 through all its operators and
 * sends it on before it starts micro-batch 1 (first come, first served ran
 * every micro-batch of a stage's first operator first, since they are all
 * ready at once, and the next stage started late); GPipe's backward goes
 * micro-batch by micro-batch; under 1F1B a forward the in-flight limit
 * allows goes before a waiting backward, Megatron's steady state. A device
 * busy with tasks queued waits in a second heap, keyed by when it comes
 * free. Links keep first come, first served: a collective holds the ports
 * of every member at once, so ranking per port would hold some while
 * waiting for others, and the compute streams emit communication in rank
 * order anyway. Ready times never fall below the current instant; the
 * whole is O((tasks + edges) log tasks), the queues living in one array
 * sized for every compute task. The critical path (no contention) is
 * carried along the same pass.
 *
 * Errors inside the builder are sticky (sim.st): helpers become no-ops
 * returning task 0, and the build checks once at the end.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uthash.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "search.h"

/* ------------------------------------------------------------ the state */

/* What the builder knows about one node. */
typedef struct snode {
  int64_t P;         /* pieces of each output */
  int m;             /* micro-batch slices of each output (1 unless pipelined) */
  bool resident;     /* a source, or a parallel op whose input is resident */
  bool weight;       /* resident and from a float weight: gradients and an update */
  bool grad;         /* its outputs carry a gradient */
  bool reach;        /* a path to the loss */
  bool has_bwd;      /* ordinary op with backward tasks */
  int32_t fwd, bwd;  /* ordinary: first forward/backward task; parallel: first forward/gradient
                        join; -1: none */
  int64_t ts;        /* first tensor-slice id of its outputs */
  int64_t P0;        /* pieces that have tasks: P, or those of copy 0 (options.copies_alike) */
  int32_t *cix;      /* copies_alike: piece -> its task slot among the P0, -1 off copy 0; NULL: the piece */
  int32_t *dev;      /* not resident: piece -> its device (home), worked out once (dev_index) */
  int topo;          /* position in topological order */
  pcgc_op_time t;    /* ordinary: one task's times */
} snode;

/* A forward transfer of a tensor slice to a device, and its gradient's way back. */
typedef struct hent {
  uint64_t key;      /* tensor slice * devices + device + 1; 0: empty */
  int32_t fwd, bwd;
} hent;

/* One read of a weight piece: the element group `key`, the reading device and its backward task. */
typedef struct wrec {
  int64_t key;
  int32_t dev, bwd, node, fwd;
} wrec;

typedef struct sim {
  const pcgc_graph *g;
  const pcgc_machine *m;
  const pcgc_mapping *mp;
  pcgc_sim_options o;
  pcgc_error *err;
  pcgc_status st;
  int D, dpn, n_nodes_m;  /* devices, devices per node, machine nodes */
  int n_res, r_io, r_ii, r_eo, r_ei;
  snode *nd;
  int *order;
  int loss;
  int mb_max;              /* largest micro-batch count of any op */
  int prof[PCGC_PROFILE_SOURCE_COUNT];  /* o.profile: kernels (nodes) and updates (weight pieces) */
  int uprof[PCGC_PROFILE_SOURCE_COUNT]; /* by where their times came from */
  pcgc_tasks T;
  int32_t *ef, *et;        /* edges */
  int64_t ne, cape;
  hent *h;
  int64_t hcap, hn;
  uint8_t *shr;            /* per forward task of a piece: 1 lies in another's bytes, 2 holds another's (share) */
  int64_t shr_cap;
  wrec *w;
  int64_t nw, capw;
  int64_t n_ts;            /* tensor slices */
  double *act, *act_mb, *wbytes, *comm; /* [D] memory; comm: the largest message a device receives */
  double *obytes;                       /* [D] the weight bytes whose optimizer state a device keeps
                                           (wbytes, less the slabs others update under options.zero) */
  double *gbytes, *gfull, *gbig;        /* [D] ZeRO-2 (options.zero, one micro-batch): the gradient
                                           bytes kept (wbytes less the slabs others sum), and of the
                                           split cells the full bytes and the most one op's backward
                                           adds into, of which a few are in flight at once
                                           (device_memory) */
  double *gop;                          /* [n_nodes] ZeRO-2: the full bytes of the split cells each
                                           op's backward adds into (over its devices: a bound) */
  double *wfull, *wbig;                 /* [D] ZeRO-3: of the split cells the full bytes, and the most
                                           one op reads, gathered while it runs (device_memory) */
  double *sendsum;                      /* [D] bytes a device sends per step */
  /* send staging (codegen.h: a send's bytes are free once it is received):
   * per device the node whose sends are being made, their bytes and the
   * micro-batches they span, and the most of one node's sends per
   * micro-batch seen so far */
  int32_t *send_node, *send_mb;
  double *send_run, *send_peak;
  /* packing (codegen.h, pcgc_send_pack_run): per device and phase the
   * (node, phase, micro-batch) of the last message packed and how many of
   * its run so far: the next one of the same packs with them, without a
   * launch of its own; likewise the messages it unpacks and its local
   * copies among them (pcgc_recv_unpack_run). [4 D], slots by pack_slot */
  int64_t *pack_key;
  int32_t *pack_n;
  /* zeroing (codegen's hoist_zeros): per device the backward kernels made
   * since the last zeroing charged a launch (INT32_MAX / 2: none yet); one
   * within PCGC_ZERO_HOIST of it joins that launch, and one farther while
   * the bytes so joined stay within PCGC_ZERO_HOIST_BYTES (zfar) */
  int32_t *zrun;
  double *zfar; /* [D] the bytes of the zeroings that joined it from farther (PCGC_ZERO_HOIST_BYTES) */
  double *gmax;                         /* [D] the most gradient bytes one backward piece holds */
  /* [D] the time of the tasks made so far that hold a device's compute
   * stream (its kernels, and the broadcasts and reduces it takes part in):
   * the stream runs them one at a time, so the iteration takes at least
   * the largest; past options.give_up_after the build stops (busy_max) */
  double *busy, busy_max;
  uint8_t *zeroed;                      /* [n_ts]: the gradient of a tensor slice on its home device is
                                           zeroed already (once per step, as the program does) */
  bool coll_in_place;                   /* the collective being made reduces in place (no staging) */
  bool coll_hold;                       /* the all-reduce being made holds its members' streams (batch norm) */
  /* recompute: per node its unit (-1: none) and whether it is a checkpoint;
   * work[d * n_units + u]: what unit u keeps on device d for one micro-batch */
  int *unit;
  bool *ckpt;
  int n_units;
  double *work;
  double bytes_intra, bytes_inter;
  int32_t *stamp;          /* [max(n_res, D, machine nodes)] */
  int32_t stamp_gen;
  int32_t *ncount;         /* [machine nodes] */
  int32_t *grp;            /* [D + 1] scratch device list */
  int32_t *first_fwd;      /* [D * mb_max]: 1F1B, a device's first forward task of each micro-batch */
  int32_t *first_bwd;      /* [D * mb_max]: the backward of its first op with one (the last to run) */
  pcgc_piece_map pm;      /* of the op being built */
  int *first_topo;         /* [D]: topological position of the first pipelined op a device runs */
  int *last_topo;          /* [D]: of the last */
  bool copy0;              /* options.copies_alike in force: tasks of copy 0 only */
  int reps, rstride;       /* its copies: options.replicas, options.replica_stride */
  bool crossed;            /* copy0, and a task of copy 0 reads one of another copy: build all */
  double inner_coll;       /* copy0: time of the collectives within copy 0 (every copy runs its own) */
  int32_t *cix_pool;       /* the snodes' cix arrays */
  int32_t *dev_pool;       /* the snodes' dev arrays */
  int32_t *cpy;            /* device -> its copy, for cpy_R copies of stride cpy_st (copy_table) */
  int cpy_R, cpy_st;
} sim;

static pcgc_status fail_nomem(sim *S) {
  if (S->st == PCGC_OK) S->st = pcgc_error_set(S->err, PCGC_ERR_NOMEM, "out of memory building the task graph");
  return S->st;
}

static int32_t next_stamp(sim *S) {
  if (++S->stamp_gen == INT32_MAX) {
    int n = S->n_res > S->D ? S->n_res : S->D;
    if (S->n_nodes_m > n) n = S->n_nodes_m;
    memset(S->stamp, 0, (size_t)n * sizeof *S->stamp);
    S->stamp_gen = 1;
  }
  return S->stamp_gen;
}

/* ------------------------------------------------------------- tasks */

/* Room for `need` tasks: PCGC_OK, PCGC_ERR_NOMEM, or PCGC_ERR_UNSUPPORTED
 * past 2^31 tasks (ids are int32). Sets no error text. */
static pcgc_status tasks_reserve(pcgc_tasks *T, int64_t need) {
  if (need <= T->cap) return PCGC_OK;
  if (need >= INT32_MAX) return PCGC_ERR_UNSUPPORTED;
  int64_t cap = T->cap ? T->cap : 4096;
  while (cap < need) cap *= 2;
  if (cap >= INT32_MAX) cap = INT32_MAX - 1;
#define GROW(p)                                                  \
  do {                                                           \
    void *q_ = realloc(T->p, (size_t)cap * sizeof *T->p);        \
    if (!q_) return PCGC_ERR_NOMEM;                              \
    T->p = q_;                                                   \
  } while (0)
  GROW(dur);
  GROW(kind);
  GROW(phase);
  GROW(coll);
  GROW(dev);
  GROW(peer);
  GROW(node);
  GROW(piece);
  GROW(micro);
  GROW(res_off);
  GROW(res_n);
  GROW(bytes);
  GROW(lat);
#undef GROW
  T->cap = (int32_t)cap;
  return PCGC_OK;
}

static bool tasks_grow(sim *S, int64_t need) {
  pcgc_status st = tasks_reserve(&S->T, need);
  if (st == PCGC_ERR_NOMEM) fail_nomem(S);
  else if (st != PCGC_OK && S->st == PCGC_OK)
    S->st = pcgc_error_set(S->err, st, "the task graph would have more than 2^31 tasks");
  return st == PCGC_OK;
}

/* Appends `count` tasks of one kind; returns the first id (0 after an error). */
static int32_t task_add(sim *S, int64_t count, pcgc_task_kind kind, int phase, int node) {
  pcgc_tasks *T = &S->T;
  if (S->st || !tasks_grow(S, (int64_t)T->n + count)) return 0;
  int32_t base = T->n;
  for (int32_t t = base; t < base + count; t++) {
    T->dur[t] = 0;
    T->kind[t] = (uint8_t)kind;
    T->phase[t] = (uint8_t)phase;
    T->coll[t] = 0;
    T->dev[t] = 0;
    T->peer[t] = -1;
    T->node[t] = node;
    T->piece[t] = -1;
    T->micro[t] = 0;
    T->res_off[t] = 0;
    T->res_n[t] = 0;
    T->bytes[t] = 0;
    T->lat[t] = 0;
  }
  T->n = (int32_t)(base + count);
  return base;
}

static void edge(sim *S, int32_t a, int32_t b) {
  if (S->st) return;
  if (S->ne == S->cape) {
    int64_t cap = S->cape ? 2 * S->cape : 8192;
    int32_t *f = realloc(S->ef, (size_t)cap * sizeof *f);
    if (f) S->ef = f;
    int32_t *t = f ? realloc(S->et, (size_t)cap * sizeof *t) : NULL;
    if (!t) {
      fail_nomem(S);
      return;
    }
    S->et = t;
    S->cape = cap;
  }
  S->ef[S->ne] = a;
  S->et[S->ne++] = b;
}

static void res_push(sim *S, int32_t r) {
  pcgc_tasks *T = &S->T;
  if (S->st) return;
  if (S->stamp[r] == S->stamp_gen) return; /* already held by this task */
  S->stamp[r] = S->stamp_gen;
  if (T->n_res == T->cap_res) {
    int64_t cap = T->cap_res ? 2 * T->cap_res : 8192;
    int32_t *p = realloc(T->res, (size_t)cap * sizeof *p);
    if (!p) {
      fail_nomem(S);
      return;
    }
    T->res = p;
    T->cap_res = cap;
  }
  T->res[T->n_res++] = r;
}

enum { PORT_INTRA_OUT, PORT_INTRA_IN, PORT_INTER_OUT, PORT_INTER_IN };

/* The resource id of a link port of device d: one per device, or one per
 * node when the machine says that link class is shared. */
static int32_t port(const sim *S, int which, int d) {
  bool intra = which == PORT_INTRA_OUT || which == PORT_INTRA_IN;
  int x = (intra ? S->m->intra.shared : S->m->inter.shared) ? d / S->dpn : d;
  switch (which) {
  case PORT_INTRA_OUT: return S->r_io + x;
  case PORT_INTRA_IN: return S->r_ii + x;
  case PORT_INTER_OUT: return S->r_eo + x;
  default: return S->r_ei + x;
  }
}

static void set_piece(sim *S, int32_t t, int dev, int64_t piece, int micro) {
  if (S->st) return;
  S->T.dev[t] = dev;
  S->T.piece[t] = piece > INT32_MAX ? INT32_MAX : (int32_t)piece;
  S->T.micro[t] = micro;
}

static void comm_infinite(sim *S, int32_t t, const char *what) {
  if (S->st || isfinite(S->T.dur[t])) return;
  S->st = pcgc_error_set(S->err, PCGC_ERR_INVALID, "machine '%s' cannot carry a %s between devices %d and %d",
                         S->m->name, what, S->T.dev[t], S->T.peer[t]);
  pcgc_error_hint(S->err, "give the machine file the intra.bandwidth / inter.bandwidth it needs");
}

/* The copy of device d when the devices form `reps` copies of `stride`
 * devices in each block of reps × stride (options.replicas). */
static int copy_of(int d, int reps, int stride) { return d % (reps * stride) / stride; }

/* Task time that holds device d's compute stream (S->busy). */
static void hold(sim *S, int d, double dur) {
  S->busy[d] += dur;
  if (S->busy[d] > S->busy_max) S->busy_max = S->busy[d];
}

/* A copy of `bytes` on device X that holds its stream (add: into a sum):
 * PCGC_TASK_ADD, the program's COPY, or PCGC_TASK_STAGE, a message's. */
static int32_t copy_task(sim *S, pcgc_task_kind kind, int phase, int node, int64_t p, int mu, int X, double bytes,
                         bool add) {
  int32_t t = task_add(S, 1, kind, phase, node);
  if (S->st) return t;
  set_piece(S, t, X, p, mu);
  S->T.dur[t] = pcgc_cost_copy_time(S->m, bytes, add);
  hold(S, X, S->T.dur[t]);
  return t;
}

/* The message of a transfer (transfer() stages it): the link's ports. */
static int32_t transfer_task(sim *S, int phase, int node, int64_t piece, int micro, int a, int b, double bytes,
                             bool staged) {
  int32_t t = task_add(S, 1, PCGC_TASK_TRANSFER, phase, node);
  if (S->st) return 0;
  pcgc_tasks *T = &S->T;
  bool same = a / S->dpn == b / S->dpn;
  set_piece(S, t, a, piece, micro);
  T->peer[t] = b;
  T->bytes[t] = bytes;
  T->dur[t] = pcgc_comm_p2p_time(S->m, same, 1, bytes);
  T->lat[t] = pcgc_comm_p2p_latency(S->m, same, T->dur[t]);
  if (staged) { /* staging (see device_memory), */
    S->sendsum[a] += bytes;
    if (S->send_node[a] != node) {
      S->send_node[a] = node;
      S->send_run[a] = 0;
      S->send_mb[a] = 1;
    }
    S->send_run[a] += bytes;
    if (micro + 1 > S->send_mb[a]) S->send_mb[a] = micro + 1;
    if (S->send_run[a] / S->send_mb[a] > S->send_peak[a]) S->send_peak[a] = S->send_run[a] / S->send_mb[a];
  }
  if (bytes > S->comm[b]) S->comm[b] = bytes; /* and the largest message received */
  T->res_off[t] = (int32_t)T->n_res;
  next_stamp(S);
  res_push(S, port(S, same ? PORT_INTRA_OUT : PORT_INTER_OUT, a));
  res_push(S, port(S, same ? PORT_INTRA_IN : PORT_INTER_IN, b));
  if (!S->o.overlap) {
    res_push(S, a);
    res_push(S, b);
    hold(S, a, T->dur[t]);
    hold(S, b, T->dur[t]);
  }
  T->res_n[t] = (int32_t)(T->n_res - T->res_off[t]);
  double copies = S->copy0 ? S->reps : 1; /* copy0: every copy makes it */
  if (same) S->bytes_intra += copies * bytes;
  else S->bytes_inter += copies * bytes;
  comm_infinite(S, t, "transfer");
  return t;
}

/* A message's tasks: what must precede it points at `in`, what waits for
 * it follows `out`. */
typedef struct xfer {
  int32_t in, out;
} xfer;

/* The slot of pack_key a device's staging copies take: by phase, packing sends or unpacking
 * receives (a relayout's forward and backward copies on one device, generated side by side,
 * run apart in time and never share a launch). */
static int64_t pack_slot(const sim *S, int phase, bool unpack, int dev) {
  return (phase == PCGC_PHASE_BACKWARD ? 2 * (int64_t)S->D : 0) + (unpack ? S->D : 0) + dev;
}

/* The run a relayout's staging copies on one device share: its node, phase and micro-batch. */
static int64_t pack_key_of(int node, int phase, int micro) {
  return (int64_t)node << 32 | (int64_t)phase << 28 | (micro & 0xfffffff);
}

/* Staging copy t on device X (slot k of pack_key) joins the run of the one
 * before it of the same key (a run's first pays the launch), or starts one. */
static void pack(sim *S, int32_t t, int X, int64_t k, int64_t key) {
  if (!S->st && S->pack_key[k] == key && S->pack_n[k] < PCGC_PACK_MAX) { /* packed with the messages before it */
    double l = S->m->device.launch_overhead, d = S->T.dur[t] > l ? S->T.dur[t] - l : 0;
    hold(S, X, d - S->T.dur[t]);
    S->T.dur[t] = d;
    S->pack_n[k]++;
  } else {
    S->pack_key[k] = key;
    S->pack_n[k] = 1;
  }
}

/* A point-to-point transfer of `bytes` from device a to device b, staged
 * as the program stages it: a's stream packs the bytes into its send
 * buffer, the message, b's stream unpacks them (adding them in backward,
 * where the program receives into a gradient with +=). `from`: the bytes
 * are a contiguous run of a's piece, which the program sends straight from
 * it, without packing (codegen's sends_done). `direct`: the message sets a
 * contiguous run of its destination (a whole piece, or a slice of one along
 * its outermost split dim), which the program receives in place, without
 * unpacking (pcgc_recv_in_place); in backward only a relayout's gradient
 * that it sets (pcgc_relayout_grad_sets). */
static xfer transfer(sim *S, int phase, int node, int64_t piece, int micro, int a, int b, double bytes, bool from,
                     bool direct) {
  int64_t key = pack_key_of(node, phase, micro);
  int32_t pk = -1;
  if (!from) {
    pk = copy_task(S, PCGC_TASK_STAGE, phase, node, piece, micro, a, bytes, false);
    pack(S, pk, a, pack_slot(S, phase, false, a), key);
  }
  int32_t t = transfer_task(S, phase, node, piece, micro, a, b, bytes, !from);
  if (from) pk = t;
  else edge(S, pk, t);
  if (direct) return (xfer){pk, t};
  bool add = phase == PCGC_PHASE_BACKWARD;
  int32_t up = copy_task(S, PCGC_TASK_STAGE, phase, node, piece, micro, b, bytes, add);
  if (add && S->o.bf16) S->pack_key[pack_slot(S, phase, true, b)] = -1; /* a bf16 sum is unpacked alone */
  else pack(S, up, b, pack_slot(S, phase, true, b), key);
  edge(S, t, up);
  return (xfer){pk, up};
}

/* A gradient's synchronisation (an all-reduce, or ZeRO's reduce-scatter):
 * the collective kinds that may run beside the computation. */
static inline bool grad_sync(int coll) { return coll == PCGC_COLL_ALL_REDUCE || coll == PCGC_COLL_REDUCE_SCATTER; }

/* A collective over devices devs[0..n) (distinct). PCGC_COLL_REDUCE is
 * timed as an all-reduce; bytes moved are the ring algorithm's: an
 * all-reduce over p devices on G nodes sends 2(p-G)·n within nodes and
 * 2(G-1)·n between them, a broadcast half of that. */
static int32_t collective(sim *S, int phase, int node, int64_t piece, int micro, int coll, int n,
                          const int32_t *devs, double bytes) {
  int32_t t = task_add(S, 1, PCGC_TASK_COLLECTIVE, phase, node);
  if (S->st) return 0;
  pcgc_tasks *T = &S->T;
  int32_t gen = next_stamp(S);
  pcgc_comm_group grp = {0, 0, 1};
  for (int i = 0; i < n; i++) {
    int nd = devs[i] / S->dpn;
    if (S->stamp[nd] != gen) {
      S->stamp[nd] = gen;
      S->ncount[nd] = 0;
      grp.nodes++;
    }
    if (++S->ncount[nd] > grp.per_node) grp.per_node = S->ncount[nd];
  }
  pcgc_collective c = coll == PCGC_COLL_REDUCE ? PCGC_COLL_ALL_REDUCE : (pcgc_collective)coll;
  int first = devs[0]; /* with replicas: a member of copy 0 where one is, so that copy runs it */
  for (int i = 0; S->o.replicas > 1 && S->o.replica_stride > 0 && i < n; i++)
    if (copy_of(devs[i], S->o.replicas, S->o.replica_stride) == 0) {
      first = devs[i];
      break;
    }
  set_piece(S, t, first, piece, micro);
  T->coll[t] = (uint8_t)coll;
  T->peer[t] = n;
  T->bytes[t] = bytes;
  T->dur[t] = pcgc_comm_time(S->m, c, S->o.algo, grp, bytes);
  T->lat[t] = pcgc_comm_latency(S->m, c, S->o.algo, grp, T->dur[t]);
  for (int i = 0; !S->coll_in_place && i < n; i++) /* staged through the largest-message buffer */
    if (bytes > S->comm[devs[i]]) S->comm[devs[i]] = bytes;
  /* on a CPU machine the ranks' own cores do an all-reduce's copies and sums (the
   * runtime's progress calls): it holds their streams too, as codegen/predict.c has it */
  bool holds = !S->o.overlap || !grad_sync(coll) || S->coll_hold || S->m->device.kind == PCGC_DEVICE_CPU;
  /* one that holds its members' streams holds them while they copy the box
   * into the staging buffer and out again, as the program's members do */
  if (holds && !S->coll_in_place && isfinite(T->dur[t])) T->dur[t] += 2 * pcgc_cost_copy_time(S->m, bytes, false);
  T->res_off[t] = (int32_t)T->n_res;
  next_stamp(S);
  for (int i = 0; i < n; i++) {
    if (grp.per_node > 1) {
      res_push(S, port(S, PORT_INTRA_OUT, devs[i]));
      res_push(S, port(S, PORT_INTRA_IN, devs[i]));
    }
    if (grp.nodes > 1) {
      res_push(S, port(S, PORT_INTER_OUT, devs[i]));
      res_push(S, port(S, PORT_INTER_IN, devs[i]));
    }
    /* a broadcast or reduce of a replicate or reduce operator holds its
     * members' streams, as the program's BCAST and REDUCE do (the next
     * instruction waits for them); only the gradient all-reduce runs
     * beside the computation */
    if (holds) {
      res_push(S, devs[i]);
      hold(S, devs[i], T->dur[t]);
    }
  }
  T->res_n[t] = (int32_t)(T->n_res - T->res_off[t]);
  /* copy0: a collective within copy 0 stands for one in every copy */
  bool inner = S->copy0;
  for (int i = 0; inner && i < n; i++) inner = copy_of(devs[i], S->reps, S->rstride) == 0;
  if (inner) S->inner_coll += T->dur[t];
  double k = pcgc_collective_passes(c) * (inner ? S->reps : 1);
  S->bytes_intra += k * (n - grp.nodes) * bytes;
  S->bytes_inter += k * (grp.nodes - 1) * bytes;
  comm_infinite(S, t, pcgc_collective_name(c));
  return t;
}

/* ------------------------------------------------------ transfers table */

static hent *hash_get(sim *S, int64_t ts, int dev, bool *fresh) {
  *fresh = false;
  if (S->st) return NULL;
  if (2 * (S->hn + 1) > S->hcap) {
    int64_t cap = S->hcap ? 2 * S->hcap : 1024;
    hent *h = calloc((size_t)cap, sizeof *h);
    if (!h) return fail_nomem(S), NULL;
    for (int64_t i = 0; i < S->hcap; i++) {
      if (!S->h[i].key) continue;
      uint64_t j = (S->h[i].key * 0x9E3779B97F4A7C15ull) & (uint64_t)(cap - 1);
      while (h[j].key) j = (j + 1) & (uint64_t)(cap - 1);
      h[j] = S->h[i];
    }
    free(S->h);
    S->h = h;
    S->hcap = cap;
  }
  uint64_t key = (uint64_t)ts * (uint64_t)S->D + (uint64_t)dev + 1;
  uint64_t j = (key * 0x9E3779B97F4A7C15ull) & (uint64_t)(S->hcap - 1);
  while (S->h[j].key && S->h[j].key != key) j = (j + 1) & (uint64_t)(S->hcap - 1);
  if (!S->h[j].key) {
    S->h[j].key = key;
    S->h[j].fwd = S->h[j].bwd = -1;
    S->hn++;
    *fresh = true;
  }
  return &S->h[j];
}

/* ------------------------------------------------------------- helpers */

/* The device of piece p of node `node`: pcgc_view_device, with one
 * division instead of three where p, the stride and the start are already
 * reduced (nearly always; the build asks for every read). */
static int home(const sim *S, int node, int64_t p) {
  const snode *N = &S->nd[node];
  if (N->dev && (uint64_t)p < (uint64_t)N->P) return N->dev[p];
  pcgc_view v = S->mp->view[node];
  int64_t D = S->D;
  if ((uint64_t)p < (uint64_t)D && (uint32_t)v.stride < (uint64_t)D && (uint32_t)v.start < (uint64_t)D)
    return (int)((p * v.stride + v.start) % D);
  return pcgc_view_device(v, p, S->D);
}

static void keep(sim *S, int dev, bool micro, double bytes) {
  if (micro) S->act_mb[dev] += bytes;
  else S->act[dev] += bytes;
}

/* The forward-ready task and the gradient sink of slice (q, mu) of a
 * non-resident node's outputs. */
/* The task slot of piece q of node N: q itself, or (copy0) its index among
 * copy 0's pieces, -1 when it is on another copy. */
static int64_t slot_of(const snode *N, int64_t q) { return N->cix ? N->cix[q] : q; }

/* A piece of another copy read by one of copy 0: its tasks do not exist. */
static int32_t crossed(sim *S) {
  S->crossed = true;
  return -1;
}

static int32_t fready(sim *S, int node, int64_t q, int mu) {
  const snode *N = &S->nd[node];
  int64_t c = slot_of(N, q);
  return c < 0 ? crossed(S) : (int32_t)(N->fwd + (int64_t)mu * N->P0 + c);
}
static int32_t gsink(sim *S, int node, int64_t q, int mu) {
  const snode *N = &S->nd[node];
  if (N->bwd < 0) return -1;
  int64_t c = slot_of(N, q);
  return c < 0 ? crossed(S) : (int32_t)(N->bwd + (int64_t)mu * N->P0 + c);
}

/* Slice mu of an input with `m` slices, read by micro-batch mu of its consumer. */
static int in_mu(int m, int mu) { return m > 1 ? mu : 0; }

/* ----------------------------------------------------- ordinary ops */

static void weight_read(sim *S, int node, int64_t box, int dev, int32_t fwd, int32_t bwd) {
  if (S->st) return;
  if (S->nw == S->capw) {
    int64_t cap = S->capw ? 2 * S->capw : 1024;
    wrec *w = realloc(S->w, (size_t)cap * sizeof *w);
    if (!w) {
      fail_nomem(S);
      return;
    }
    S->w = w;
    S->capw = cap;
  }
  S->w[S->nw++] = (wrec){S->nd[node].ts + box, dev, bwd, node, fwd};
}

/* The bytes of value (node, slot) of `bytes` as the program stores it, and its gradient: bf16 under
 * bf16 storage (pcgc_value_dtype). Activations kept, moved and zeroed are
 * counted so; weights and data in pcgc_stored_dtype. */
static double value_bytes(const sim *S, int node, int slot, double bytes) {
  return bytes * pcgc_value_scale(S->g, node, slot, S->o.bf16);
}

/* Task f (backward b, or -1) of micro-batch mu on device X reads piece q of
 * input i (on device Y unless resident), of `bytes` as stored (value_bytes).
 * Returns the bytes X zeroes of the gradient buffer b adds into, the first
 * time one is needed in the step (the program zeroes every gradient once
 * before it accumulates: the producer's on its device, and a received
 * value's where it was received); a weight's gradient bytes are its
 * update's (update_dur). */
static double read_input(sim *S, const pcgc_node *n, int i, int64_t q, int Y, int mu, int X, int32_t f, int32_t b,
                         double bytes) {
  pcgc_ref r = n->in[i];
  const snode *I = &S->nd[r.node];
  const pcgc_ptensor *t = &S->g->nodes[r.node].out[r.slot];
  int mi = in_mu(I->m, mu);
  int64_t ts = I->ts + ((int64_t)r.slot * I->m + mi) * I->P + q;
  bool fresh;
  if (I->resident) {
    if (I->weight) { /* sum degree 1: the replicas of one shard are pieces q / replica */
      weight_read(S, r.node, q / t->replica, X, f, b);
    } else {
      hash_get(S, ts, X, &fresh); /* data: loaded where it is read, kept for backward */
      if (fresh) keep(S, X, I->m > 1, bytes);
    }
    return 0;
  }
  int32_t fr = fready(S, r.node, q, mi), gs = b >= 0 && I->grad ? gsink(S, r.node, q, mi) : -1;
  double zero = 0;
  if (gs >= 0 && !S->zeroed[ts]) { /* the producer's gradient, on its device */
    S->zeroed[ts] = 1;
    if (Y == X) zero = bytes;
  }
  if (Y == X) {
    edge(S, fr, f);
    if (gs >= 0) edge(S, b, gs);
    return zero;
  }
  hent *e = hash_get(S, ts, X, &fresh);
  if (!e) return 0;
  if (fresh) {
    xfer x = transfer(S, PCGC_PHASE_FORWARD, r.node, q, mi, Y, X, bytes, true, true); /* a whole piece */
    e->fwd = x.out;
    edge(S, fr, x.in);
    keep(S, X, I->m > 1, bytes);
  }
  edge(S, e->fwd, f);
  if (gs >= 0) { /* the gradients of X's readers, summed on X, go back once */
    if (e->bwd < 0) { /* summed in a buffer zeroed on X first */
      zero += bytes;
      xfer x = transfer(S, PCGC_PHASE_BACKWARD, r.node, q, mi, X, Y, bytes, true, false); /* (transfer() leaves the table alone) */
      e->bwd = x.in;
      edge(S, x.out, gs);
    }
    edge(S, b, e->bwd);
  }
  return zero;
}

/* What one piece of ordinary node n costs per micro-batch: its inputs'
 * piece bytes as stored (value_bytes), its outputs', and the time of its
 * forward and backward task (the kernel's, the widening of its bf16
 * arguments around it, and under recomputation the forward again before
 * the backward). */
typedef struct otimes {
  double in_bytes[PCGC_VARIADIC];
  double out_bytes, widen, fwd, bwd;
  double saved;        /* kept for its backward besides its outputs (CPU machines: codegen's SAVED) */
  bool kept, recomputed;
} otimes;

static void ordinary_times(const sim *S, const pcgc_node *n, otimes *o) {
  const snode *N = &S->nd[n->id];
  for (int i = 0; i < n->n_in; i++)
    o->in_bytes[i] = value_bytes(S, n->in[i].node, n->in[i].slot, pcgc_cost_piece_bytes(pcgc_graph_ref_type(S->g, n->in[i])));
  o->kept = pcgc_cost_efficiency(n->kind)->kernel && pcgc_op_class_of(n->kind) != PCGC_CLASS_LOSS;
  /* recomputed: its outputs are not kept but made again before its backward */
  o->recomputed = S->o.recompute && o->kept && S->unit[n->id] >= 0 && !S->ckpt[n->id];
  double bf_in = 0, bf_out = 0; /* bf16 storage: the bytes of its bf16 arguments */
  o->out_bytes = 0;
  for (int k = 0; k < n->n_out; k++) {
    double b = value_bytes(S, n->id, k, pcgc_cost_piece_bytes(&n->out[k]));
    o->out_bytes += b;
    if (pcgc_value_dtype(S->g, n->id, k, S->o.bf16) == PCGC_BF16) bf_out += b;
  }
  for (int i = 0; i < n->n_in; i++)
    if (!S->nd[n->in[i].node].resident && pcgc_value_dtype(S->g, n->in[i].node, n->in[i].slot, S->o.bf16) == PCGC_BF16)
      bf_in += o->in_bytes[i];
  /* the runtime widens them into f32 copies around each kernel (the copies
   * of a backward piece's inputs, outputs and both gradients at once) and
   * rounds what it wrote back: forward once each, backward its outputs and
   * inputs with their gradients, added into twice (codegen/predict.c too) */
  o->widen = 4 * (bf_in + bf_out);
  /* on CPU machines codegen keeps what the piece's backward would compute again
   * (save_for_backward, pcgc_op_saved_elems), as long as its outputs */
  o->saved = 0;
  if (o->kept && S->m->device.kind == PCGC_DEVICE_CPU && pcgc_op_saves(n->kind)) {
    int64_t dims[PCGC_VARIADIC][PCGC_MAX_RANK];
    const int64_t *dp[PCGC_VARIADIC];
    for (int i = 0; i < n->n_in; i++) {
      pcgc_profile_piece_dims(pcgc_graph_ref_type(S->g, n->in[i]), dims[i]);
      dp[i] = dims[i];
    }
    o->saved = (double)pcgc_op_saved_elems(n->kind, n->n_in, dp) * (double)pcgc_dtype_size(pcgc_op_saved_dtype(n->out[0].dtype));
  }
  o->fwd = N->t.fwd + pcgc_cost_widen_time(S->m, bf_in + bf_out);
  o->bwd = N->t.bwd + pcgc_cost_widen_time(S->m, 3 * bf_in + 2 * bf_out) + (o->recomputed ? o->fwd : 0);
}

/* Before anything is built, a lower bound of the busiest device's stream
 * (S->busy_max once built): each device's kernels alone, as gen_ordinary
 * holds them (the zeroing, adds and communication that also hold a stream
 * left out). A search's bound below it stops the build before it starts,
 * where it would stop later anyway. */
static double kernel_busy_max(sim *S) {
  double most = 0;
  otimes o;
  for (int i = 0; i < S->g->n_nodes; i++) {
    const pcgc_node *n = &S->g->nodes[i];
    const snode *N = &S->nd[i];
    if (N->resident || pcgc_op_class_of(n->kind) == PCGC_CLASS_PARALLEL) continue;
    ordinary_times(S, n, &o);
    double per = (o.fwd + (N->has_bwd ? o.bwd : 0)) * N->m;
    for (int64_t p = 0; p < N->P; p++) S->busy[N->dev[p]] += per;
  }
  for (int d = 0; d < S->D; d++) {
    if (S->busy[d] > most) most = S->busy[d];
    S->busy[d] = 0;
  }
  return most;
}

/* Synced batch norm (pcgc_bn_synced): per channel group and micro-batch,
 * the all-reduce of its statistics over the group's devices, forward
 * between the stats tasks (fs0) and the apply tasks (N->fwd), backward
 * between N->bwd and the apply tasks ba0; blocking and in place (no staging), as the program's
 * ALLREDUCE of a region of the statistics buffer. */
static void bn_sync(sim *S, const pcgc_node *n, int32_t fs0, int32_t ba0) {
  const snode *N = &S->nd[n->id];
  const pcgc_ptensor *o = &n->out[0];
  int64_t groups = (int64_t)o->degree[1] * o->replica;
  double bytes = 2.0 * sizeof(double) * (double)(o->dims[1] / o->degree[1]);
  int64_t P = N->P, *by = malloc((size_t)(P + groups + 1) * sizeof *by), *at = by + P;
  if (!by) {
    fail_nomem(S);
    return;
  }
  /* the pieces of each group, in piece order: by[at[g] .. at[g + 1]) */
  for (int64_t g = 0; g <= groups; g++) at[g] = 0;
  for (int64_t p = 0; p < P; p++) at[pcgc_bn_group(o, p) + 1]++;
  for (int64_t g = 0; g < groups; g++) at[g + 1] += at[g];
  for (int64_t p = 0; p < P; p++) by[at[pcgc_bn_group(o, p)]++] = p;
  for (int64_t g = groups; g > 0; g--) at[g] = at[g - 1];
  at[0] = 0;
  S->coll_hold = S->coll_in_place = true; /* in the statistics' scratch, where they lie (codegen) */
  for (int64_t g = 0; g < groups && !S->st; g++) {
    int nd = 0;
    int32_t gen = next_stamp(S);
    for (int64_t k = at[g]; k < at[g + 1]; k++) {
      int X = home(S, n->id, by[k]);
      if (S->stamp[X] != gen) {
        S->stamp[X] = gen;
        S->grp[nd++] = X;
      }
    }
    if (nd < 2) continue;
    for (int mu = 0; mu < N->m && !S->st; mu++) {
      int32_t co = collective(S, PCGC_PHASE_FORWARD, n->id, by[at[g]], mu, PCGC_COLL_ALL_REDUCE, nd, S->grp, bytes);
      int32_t cb = ba0 >= 0 ? collective(S, PCGC_PHASE_BACKWARD, n->id, by[at[g]], mu, PCGC_COLL_ALL_REDUCE, nd,
                                         S->grp, bytes)
                            : -1;
      for (int64_t k = at[g]; k < at[g + 1]; k++) {
        int64_t c = slot_of(N, by[k]);
        if (c < 0) continue; /* another copy's piece */
        int64_t t = (int64_t)mu * N->P0 + c;
        edge(S, (int32_t)(fs0 + t), co);
        edge(S, co, (int32_t)(N->fwd + t));
        if (cb >= 0) {
          edge(S, (int32_t)(N->bwd + t), cb);
          edge(S, cb, (int32_t)(ba0 + t));
        }
      }
    }
  }
  S->coll_hold = S->coll_in_place = false;
  free(by);
}

static void gen_ordinary(sim *S, const pcgc_node *n) {
  snode *N = &S->nd[n->id];
  pcgc_ptensor tin[PCGC_VARIADIC];
  otimes ot;
  ordinary_times(S, n, &ot);
  const double *in_bytes = ot.in_bytes;
  for (int i = 0; i < n->n_in; i++) tin[i] = *pcgc_graph_ref_type(S->g, n->in[i]);
  int64_t P = N->P, P0 = N->P0;
  int mb = N->m;
  N->fwd = task_add(S, P0 * mb, PCGC_TASK_FORWARD, PCGC_PHASE_FORWARD, n->id);
  N->bwd = N->has_bwd ? task_add(S, P0 * mb, PCGC_TASK_BACKWARD, PCGC_PHASE_BACKWARD, n->id) : -1;
  if (S->st) return;
  bool kept = ot.kept, recomputed = ot.recomputed;
  double out_bytes = ot.out_bytes, widen = ot.widen, fwd_time = ot.fwd, bwd_time = ot.bwd;
  const pcgc_ptensor *o = &n->out[0];
  /* synced batch norm: each half of the kernel a task of its own (stats,
   * then apply; backward stats, then apply), the group's all-reduce
   * between them (bn_sync); inputs are read by the first forward half and
   * their gradients made by the second backward half */
  bool bn = pcgc_bn_synced(n);
  int32_t fs0 = bn ? task_add(S, P0 * mb, PCGC_TASK_FORWARD, PCGC_PHASE_FORWARD, n->id) : -1;
  int32_t ba0 = bn && N->has_bwd ? task_add(S, P0 * mb, PCGC_TASK_BACKWARD, PCGC_PHASE_BACKWARD, n->id) : -1;
  if (S->st) return;
  bool closed = pcgc_piece_map_build(&S->pm, n, tin, false);
  int64_t inp[PCGC_VARIADIC];
  for (int64_t p = 0; p < P && !S->st; p++) {
    int64_t c = slot_of(N, p);
    if (c < 0) continue; /* another copy's piece */
    if (closed) {
      pcgc_piece_map_apply(&S->pm, n, p, inp);
    } else {
      pcgc_status st = pcgc_op_piece_inputs(n->kind, n->attrs, n->n_in, tin, o, p, inp, S->err);
      if (st != PCGC_OK) {
        S->st = st;
        return;
      }
    }
    int X = home(S, n->id, p), Y[PCGC_VARIADIC];
    for (int i = 0; i < n->n_in; i++) Y[i] = S->nd[n->in[i].node].resident ? -1 : home(S, n->in[i].node, inp[i]);
    if (N->has_bwd) { /* its backward holds its outputs' gradients and makes its inputs' */
      double gb = out_bytes + widen;
      for (int i = 0; i < n->n_in; i++)
        if (!S->nd[n->in[i].node].weight) gb += in_bytes[i];
      if (gb > S->gmax[X]) S->gmax[X] = gb;
    }
    for (int mu = 0; mu < mb; mu++) {
      int32_t f = (int32_t)(N->fwd + (int64_t)mu * P0 + c), b = -1;
      int32_t fr = f, br = -1; /* the tasks that read the inputs and make their gradients */
      set_piece(S, f, X, p, mu);
      S->T.dur[f] = bn ? fwd_time / 2 : fwd_time;
      hold(S, X, fwd_time);
      if (bn) {
        fr = (int32_t)(fs0 + (int64_t)mu * P0 + c);
        set_piece(S, fr, X, p, mu);
        S->T.dur[fr] = fwd_time / 2;
        edge(S, fr, f);
      }
      if (N->has_bwd) {
        b = br = (int32_t)(N->bwd + (int64_t)mu * P0 + c);
        set_piece(S, b, X, p, mu);
        S->T.dur[b] = bn ? bwd_time / 2 : bwd_time;
        hold(S, X, bwd_time);
        edge(S, f, b);
        if (bn) {
          br = (int32_t)(ba0 + (int64_t)mu * P0 + c);
          set_piece(S, br, X, p, mu);
          S->T.dur[br] = bwd_time / 2;
          edge(S, b, br);
        }
      }
      if (kept && recomputed) {
        if (mu == 0) S->work[(int64_t)X * S->n_units + S->unit[n->id]] += out_bytes + ot.saved;
      } else if (kept) {
        keep(S, X, mb > 1, out_bytes + ot.saved);
      }
      if (mb > 1) {
        int64_t k = (int64_t)X * S->mb_max + mu;
        if (S->first_fwd[k] < 0) S->first_fwd[k] = f;
        if (S->first_bwd[k] < 0) S->first_bwd[k] = b;
        if (S->first_topo[X] < 0) S->first_topo[X] = N->topo;
        if (N->topo > S->last_topo[X]) S->last_topo[X] = N->topo;
      }
      /* the program zeroes what this backward adds into with one launch (codegen's zero_flush):
       * its inputs' gradients, and in its first micro-batch its weights' */
      double zb = 0;
      bool wz = false;
      double wzb = 0; /* the bytes of the weights' gradients zeroed with them */
      for (int i = 0; i < n->n_in; i++) {
        zb += read_input(S, n, i, inp[i], Y[i], mu, X, fr, br, in_bytes[i]);
        const snode *W = &S->nd[n->in[i].node];
        bool w = mu == 0 && W->resident && W->weight && W->grad;
        wz = wz || w;
        if (w) wzb += in_bytes[i];
      }
      double zero = br < 0 ? 0 : zb > 0 ? pcgc_cost_fill_time(S->m, zb) : wz ? S->m->device.launch_overhead : 0;
      if (br >= 0 && !S->st) {
        bool far = S->zrun[X] > PCGC_ZERO_HOIST, first = S->zrun[X] >= INT32_MAX / 4; /* no zeroing before */
        if (zero > 0 && !first && (!far || S->zfar[X] + zb + wzb <= PCGC_ZERO_HOIST_BYTES)) {
          double l = S->m->device.launch_overhead; /* joins the launch of a zeroing before it */
          zero = zero > l ? zero - l : 0;
          if (far) S->zfar[X] += zb + wzb;
        } else if (zero > 0) {
          S->zrun[X] = 0;
          S->zfar[X] = 0;
        }
        S->zrun[X] += bn ? 2 : 1;
        if (zero > 0) {
          S->T.dur[br] += zero;
          hold(S, X, zero);
        }
      }
    }
  }
  if (bn) bn_sync(S, n, fs0, ba0);
}

/* ----------------------------------------------------- parallel ops */

/* A local copy the program does not run (codegen's alias_copies): one piece
 * copied whole into a run of another (SHARE_INTO), or a whole piece out of a
 * run of another (SHARE_OUT), lies in the other's bytes. A piece lies in one
 * other at most and then holds none; share() marks the two pieces (by their
 * forward tasks) where that holds. */
enum { SHARE_NONE, SHARE_INTO, SHARE_OUT };

static bool share(sim *S, int32_t child, int32_t parent) {
  int64_t need = (child > parent ? child : parent) + 1;
  if (S->st || child < 0 || parent < 0) return false;
  if (need > S->shr_cap) {
    int64_t cap = S->shr_cap ? S->shr_cap : 1024;
    while (cap < need) cap *= 2;
    uint8_t *r = realloc(S->shr, (size_t)cap);
    if (!r) {
      S->st = PCGC_ERR_NOMEM;
      return false;
    }
    memset(r + S->shr_cap, 0, (size_t)(cap - S->shr_cap));
    S->shr = r;
    S->shr_cap = cap;
  }
  if (S->shr[child] || (S->shr[parent] & 1)) return false;
  S->shr[child] = 1;
  S->shr[parent] |= 2;
  return true;
}

/* Output slice (fj forward join, gj gradient join or -1) on device X
 * receives `bytes` of input slice (q, mi) of node `src`: copied where both
 * are on X (as the program stores them; not at all where `shares` says the
 * two can share bytes), else a transfer. from: the forward message is a run
 * of the input slice, sent straight from it; direct: it lands in place (and
 * the gradient goes back straight from the output's); sets: the gradient goes back into the input's without adding
 * (pcgc_relayout_grad_sets), direct_back: in place. */
static void move(sim *S, int node, int64_t p, int mu, int X, int32_t fj, int32_t gj, int src, int64_t q, int mi,
                 double bytes, bool from, bool direct, bool sets, bool direct_back, int shares) {
  int Y = home(S, src, q);
  int32_t fr = fready(S, src, q, mi), gs = gj >= 0 ? gsink(S, src, q, mi) : -1;
  bytes = value_bytes(S, node, 0, bytes);
  if (Y == X && shares != SHARE_NONE && share(S, shares == SHARE_INTO ? fr : fj, shares == SHARE_INTO ? fj : fr)) {
    edge(S, fr, fj);
    if (gs < 0) return;
    if (sets) { /* the gradient shares bytes too */
      edge(S, gj, gs);
      return;
    }
    int32_t cb = copy_task(S, PCGC_TASK_ADD, PCGC_PHASE_BACKWARD, node, p, mu, X, bytes, true);
    edge(S, gj, cb);
    edge(S, cb, gs);
    return;
  }
  if (Y == X) { /* a local copy: it joins the run unpacking the relayout's messages on X (codegen's
                 * pcgc_recv_unpack_run moves the COPYs among its RECVs by the same launch) */
    double stored = bytes;
    int32_t cp = copy_task(S, PCGC_TASK_ADD, PCGC_PHASE_FORWARD, node, p, mu, X, stored, false);
    pack(S, cp, X, pack_slot(S, PCGC_PHASE_FORWARD, true, X), pack_key_of(node, PCGC_PHASE_FORWARD, mu));
    edge(S, fr, cp);
    edge(S, cp, fj);
    if (gs >= 0) {
      int32_t cb = copy_task(S, PCGC_TASK_ADD, PCGC_PHASE_BACKWARD, node, p, mu, X, stored, !sets);
      int64_t k = pack_slot(S, PCGC_PHASE_BACKWARD, true, X);
      if (!sets && S->o.bf16) S->pack_key[k] = -1; /* a bf16 sum is moved alone */
      else pack(S, cb, X, k, pack_key_of(node, PCGC_PHASE_BACKWARD, mu));
      edge(S, gj, cb);
      edge(S, cb, gs);
    }
    return;
  }
  xfer tr = transfer(S, PCGC_PHASE_FORWARD, node, p, mu, Y, X, bytes, from && !S->nd[src].resident, direct);
  edge(S, fr, tr.in);
  edge(S, tr.out, fj);
  keep(S, X, S->nd[node].m > 1, bytes);
  if (gs >= 0) {
    xfer gt = transfer(S, PCGC_PHASE_BACKWARD, node, p, mu, X, Y, bytes, direct, sets && direct_back);
    edge(S, gj, gt.in);
    edge(S, gt.out, gs);
  }
}

/* partition, combine, pipeline, unpipeline: every output slice receives the
 * overlapping parts of the input slices with the same sum and replica index
 * (pcgc_relayout_cells, codegen's copies and messages too). */
typedef struct relayout_ctx {
  sim *S;
  const pcgc_node *n;
  pcgc_ref src; /* pcgc_relayout_source */
  int64_t p;
  int mu, X;
  int32_t fj, gj;
  bool sets;  /* pcgc_relayout_grad_sets */
} relayout_ctx;

static bool relayout_cell(void *ctx, int64_t q, int mi, const pcgc_box *part, double bytes) {
  relayout_ctx *R = ctx;
  /* the output slice's buffer, and backward the input slice's gradient:
   * received in place where the part is a run of it */
  pcgc_box slice, in;
  pcgc_piece_box(&R->n->out[0], R->p, R->mu, &slice);
  pcgc_piece_box(pcgc_graph_ref_type(R->S->g, R->src), q, mi, &in);
  bool from = pcgc_box_contiguous_in(part, &in, NULL), back = R->sets && R->gj >= 0 && from;
  bool direct = pcgc_box_contiguous_in(part, &slice, NULL);
  int shares = direct && pcgc_box_equal(part, &in)                                     ? SHARE_INTO
               : pcgc_box_equal(part, &slice) && pcgc_box_contiguous_in(part, &in, NULL) ? SHARE_OUT
                                                                                          : SHARE_NONE;
  move(R->S, R->n->id, R->p, R->mu, R->X, R->fj, R->gj, R->src.node, q, mi, bytes, from, direct, R->sets, back, shares);
  return true;
}

static void gen_relayout(sim *S, const pcgc_node *n) {
  if (pcgc_relayout_through(S->g, n)) return; /* its reader moves its cells */
  const snode *N = &S->nd[n->id];
  bool sets = N->bwd >= 0 && pcgc_relayout_grad_sets(S->g, n); /* (its reader scan only where a gradient comes back) */
  pcgc_ref src = pcgc_relayout_source(S->g, n);
  for (int mu = 0; mu < N->m && !S->st; mu++)
    for (int64_t p = 0; p < N->P; p++) {
      if (slot_of(N, p) < 0) continue; /* another copy's piece */
      relayout_ctx R = {S, n, src, p, mu, home(S, n->id, p), fready(S, n->id, p, mu), gsink(S, n->id, p, mu), sets};
      pcgc_relayout_cells(S->g, n, src, p, mu, relayout_cell, &R);
    }
}

/* replicate: each input piece goes to the devices of its d copies, as
 * pcgc_fan_move_of says (codegen moves it so). Where n is its input's only
 * reader and no copy of a piece stays on the piece's device, the summed
 * gradient that comes back is the piece's whole gradient: the program's
 * first contribution sets it (codegen's first_sets), in place. */
static void gen_replicate(sim *S, const pcgc_node *n, pcgc_fan *F) {
  const snode *N = &S->nd[n->id], *I = &S->nd[n->in[0].node];
  const pcgc_ptensor *ti = pcgc_graph_ref_type(S->g, n->in[0]);
  int src = n->in[0].node;
  bool alone = N->bwd >= 0 && !I->resident && pcgc_graph_readers(S->g, n->in[0], 2) == 1;
  double bytes = value_bytes(S, n->id, 0, pcgc_cost_piece_bytes(ti));
  for (int mu = 0; mu < N->m && !S->st; mu++)
    for (int64_t q = 0; q < I->P; q++) {
      pcgc_fan_at(F, S->g, S->mp, n, q);
      if (slot_of(I, q) < 0) { /* another copy's piece: its copies too, or the copies cross */
        for (int64_t j = 0; j < F->d && !S->crossed; j++)
          if (slot_of(N, F->wide[j]) >= 0) crossed(S);
        continue;
      }
      int Y = F->narrow, mi = in_mu(I->m, mu);
      int32_t fr = fready(S, src, q, mi), gs = gsink(S, src, q, mi);
      xfer fwd = {fr, fr}, bwd = {-1, -1};
      bool sets = alone;
      for (int64_t j = 0; j < F->d && sets; j++) sets = F->wdev[j] != Y;
      switch (pcgc_fan_move_of(F, true, false)) { /* (backward: the same move, mirrored) */
      case PCGC_FAN_LOCAL: break;
      case PCGC_FAN_MESSAGE:
        fwd = transfer(S, PCGC_PHASE_FORWARD, n->id, q, mu, Y, F->grp[1], bytes, true, true); /* a whole piece */
        if (N->bwd >= 0) bwd = transfer(S, PCGC_PHASE_BACKWARD, n->id, q, mu, F->grp[1], Y, bytes, true, sets);
        break;
      case PCGC_FAN_COLLECTIVE: {
        int32_t cf = collective(S, PCGC_PHASE_FORWARD, n->id, q, mu, PCGC_COLL_BROADCAST, F->n_grp, F->grp, bytes);
        fwd = (xfer){cf, cf};
        if (N->bwd >= 0) {
          int32_t cb = collective(S, PCGC_PHASE_BACKWARD, n->id, q, mu, PCGC_COLL_REDUCE, F->n_grp, F->grp, bytes);
          bwd = (xfer){cb, cb};
        }
        break;
      }
      case PCGC_FAN_RELAY: { /* to the first copy's device, which broadcasts; sums come back so */
        xfer x = transfer(S, PCGC_PHASE_FORWARD, n->id, q, mu, Y, F->dev[0], bytes, true, true);
        int32_t cf = collective(S, PCGC_PHASE_FORWARD, n->id, q, mu, PCGC_COLL_BROADCAST, F->n_dev, F->dev, bytes);
        edge(S, x.out, cf);
        fwd = (xfer){x.in, cf};
        if (N->bwd >= 0) {
          int32_t cb = collective(S, PCGC_PHASE_BACKWARD, n->id, q, mu, PCGC_COLL_REDUCE, F->n_dev, F->dev, bytes);
          xfer y = transfer(S, PCGC_PHASE_BACKWARD, n->id, q, mu, F->dev[0], Y, bytes, true, sets);
          edge(S, cb, y.in);
          bwd = (xfer){cb, y.out};
        }
        break;
      }
      }
      if (fwd.in != fr) edge(S, fr, fwd.in);
      if (bwd.out >= 0) edge(S, bwd.out, gs);
      for (int i = 1; i < F->n_grp; i++) keep(S, F->grp[i], N->m > 1, bytes);
      for (int64_t j = 0; j < F->d; j++) {
        int64_t p = F->wide[j];
        bool local = F->wdev[j] == Y;
        edge(S, local ? fr : fwd.out, fready(S, n->id, p, mu));
        if (N->bwd >= 0) edge(S, gsink(S, n->id, p, mu), local ? gs : bwd.in);
      }
    }
}

/* reduce: each output piece adds the d partial sums that map onto it, as
 * pcgc_fan_move_of says (codegen moves them so). */
static void gen_reduce(sim *S, const pcgc_node *n, pcgc_fan *F) {
  const snode *N = &S->nd[n->id], *I = &S->nd[n->in[0].node];
  const pcgc_ptensor *to = &n->out[0];
  int src = n->in[0].node;
  double bytes = value_bytes(S, n->id, 0, pcgc_cost_piece_bytes(to)),
         es = (double)pcgc_dtype_size(pcgc_value_dtype(S->g, n->id, 0, S->o.bf16));
  for (int mu = 0; mu < N->m && !S->st; mu++)
    for (int64_t p = 0; p < N->P; p++) {
      if (slot_of(N, p) < 0) continue; /* another copy's piece (its partial sums are fready's to check) */
      pcgc_fan_at(F, S->g, S->mp, n, p);
      int X = F->narrow, mi = in_mu(I->m, mu);
      int32_t fj = fready(S, n->id, p, mu), gj = gsink(S, n->id, p, mu);
      keep(S, X, N->m > 1, bytes);
      pcgc_fan_move fm = pcgc_fan_move_of(F, false, false);
      if (fm == PCGC_FAN_COLLECTIVE || fm == PCGC_FAN_RELAY) {
        /* one reduce collective (RELAY: among the partial sums' devices, the
         * first sending the sum on); the gradient goes back by broadcast */
        bool relay = fm == PCGC_FAN_RELAY;
        int32_t co = collective(S, PCGC_PHASE_FORWARD, n->id, p, mu, PCGC_COLL_REDUCE, relay ? F->n_dev : F->n_grp,
                                relay ? F->dev : F->grp, bytes);
        if (relay) {
          xfer x = transfer(S, PCGC_PHASE_FORWARD, n->id, p, mu, F->dev[0], X, bytes, true, false);
          edge(S, co, x.in);
          edge(S, x.out, fj);
        } else {
          edge(S, co, fj);
        }
        int32_t bc = gj >= 0 ? collective(S, PCGC_PHASE_BACKWARD, n->id, p, mu, PCGC_COLL_BROADCAST, F->n_grp, F->grp, bytes)
                             : -1;
        if (bc >= 0) edge(S, gj, bc);
        for (int64_t j = 0; j < F->d; j++) {
          int64_t q = F->wide[j];
          edge(S, fready(S, src, q, mi), co);
          if (bc >= 0) edge(S, F->wdev[j] == X ? gj : bc, gsink(S, src, q, mi));
        }
        continue;
      }
      /* at most one other device: its partial sums, summed there, come in
       * one message; an add task sums on X */
      int32_t sink = fj;
      int64_t adds = F->d - 1;
      if (adds > 0) {
        double add_time = pcgc_cost_roofline(S->m, PCGC_OP_ADD, to->dtype, (double)adds * bytes / es,
                                             (double)(adds + 2) * bytes); /* d - 1 adds over d + 1 pieces' bytes */
        sink = task_add(S, 1, PCGC_TASK_ADD, PCGC_PHASE_FORWARD, n->id);
        set_piece(S, sink, X, p, mu);
        if (!S->st) S->T.dur[sink] = add_time;
        hold(S, X, add_time);
        edge(S, sink, fj);
      }
      xfer in = {-1, -1}, gt = {-1, -1};
      if (fm == PCGC_FAN_MESSAGE) {
        in = transfer(S, PCGC_PHASE_FORWARD, n->id, p, mu, F->grp[1], X, bytes, true, false);
        edge(S, in.out, sink);
        if (gj >= 0) {
          gt = transfer(S, PCGC_PHASE_BACKWARD, n->id, p, mu, X, F->grp[1], bytes, true, false);
          edge(S, gj, gt.in);
        }
      }
      for (int64_t j = 0; j < F->d; j++) {
        int64_t q = F->wide[j];
        bool local = F->wdev[j] == X;
        edge(S, fready(S, src, q, mi), local ? sink : in.in);
        if (gj >= 0) edge(S, local ? gj : gt.out, gsink(S, src, q, mi));
      }
    }
}

static void gen_parallel(sim *S, const pcgc_node *n, pcgc_fan *fan) {
  snode *N = &S->nd[n->id];
  int64_t cnt = N->P0 * N->m;
  N->fwd = task_add(S, cnt, PCGC_TASK_JOIN, PCGC_PHASE_FORWARD, n->id);
  N->bwd = N->grad && N->reach ? task_add(S, cnt, PCGC_TASK_JOIN, PCGC_PHASE_BACKWARD, n->id) : -1;
  for (int mu = 0; mu < N->m && !S->st; mu++)
    for (int64_t p = 0; p < N->P; p++) {
      if (slot_of(N, p) < 0) continue;
      int X = home(S, n->id, p);
      set_piece(S, fready(S, n->id, p, mu), X, p, mu);
      if (N->bwd >= 0) set_piece(S, gsink(S, n->id, p, mu), X, p, mu);
    }
  if (S->st) return;
  switch (n->kind) {
  case PCGC_OP_REPLICATE: gen_replicate(S, n, fan); break;
  case PCGC_OP_REDUCE: gen_reduce(S, n, fan); break;
  default: gen_relayout(S, n); break;
  }
}

/* ---------------------------------------------------------- weights */

/* Weight synchronisation as codegen lowers it (pcgc_weight_sync_cells):
 * each device that reads a weight keeps the box of it its pieces read and
 * updates that box; devices sharing a cell of the weight all-reduce its
 * gradient after the last backward task there that reads it. */
typedef struct wsync {
  sim *S;
  int src;                  /* the weight */
  const wrec *r;            /* its reads, by device */
  const pcgc_box *rbox;     /* each read's box */
  int64_t nr;
  const int64_t *first;     /* per holder: its first read */
  const int *hidx;          /* [D]: a holder's index */
  const int32_t *ut;        /* per holder: its update task (-1: none) */
  double esize;
  const pcgc_box *hbox;     /* per holder: its box */
  pcgc_dtype sd;            /* the weight's stored dtype */
  struct gbuckets *B;       /* the cells that may share an all-reduce, pending */
  int order;                /* the weight's pcgc_weight_grad_order key */
} wsync;

/* An update of box b of a weight stored in sd, and the zeroing of `fill` bytes of its gradient
 * (their bandwidth: the launch is its first backward's, read_input). */
static double update_dur(sim *S, pcgc_dtype sd, const pcgc_box *b, double fill) {
  pcgc_ptensor u;
  pcgc_ptensor_init(&u, sd, b->rank, b->len);
  pcgc_op_cost uc = pcgc_cost_update(S->o.optimizer, &u);
  double tu = pcgc_cost_roofline(S->m, PCGC_OP_MUL, u.dtype, uc.fwd_flops, uc.fwd_bytes);
  if (S->o.profile) S->uprof[pcgc_profile_update_time(S->o.profile, S->m, S->o.optimizer, &u, &tu)]++;
  return tu + (fill > 0 ? fill / S->m->device.memory_bandwidth : 0);
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* options.zero: whether the n members of a cell (grp[0..ng) of them built,
 * copy 0's under copy0) each hold it whole and split it into slabs. */
static bool zero_splits(wsync *W, const pcgc_box *cell, const int *grp, int ng, int n) {
  pcgc_box sh;
  if (!W->S->o.zero || !pcgc_zero_shard(cell, n, 0, &sh)) return false;
  for (int k = 0; k < ng; k++)
    if (!pcgc_box_equal(&W->hbox[W->hidx[grp[k]]], cell)) return false;
  return true;
}

/* Then each sums its slab of the gradient (the reduce-scatter sync_cell
 * makes in place of the all-reduce), updates that slab alone (and keeps
 * state for it), and they all-gather, as codegen's sync_cell, zero_split
 * and lower_updates have it. */
static void zero_cell(wsync *W, const pcgc_box *cell, const int *grp, int ng, const int32_t *g, int n) {
  sim *S = W->S;
  pcgc_box sh;
  double whole = (double)pcgc_box_elems(cell) * W->esize;
  double group = whole; /* ZeRO-2: the op whose backward adds into it, and what it adds into so far */
  for (int64_t j = W->first[W->hidx[grp[0]]]; S->o.zero >= 2 && j < W->nr && W->r[j].dev == grp[0]; j++) {
    int32_t op = W->r[j].bwd >= 0 ? S->T.node[W->r[j].bwd] : -1;
    if (op < 0 || op >= S->g->n_nodes) continue;
    group = S->gop[op] += whole;
    break;
  }
  int32_t *by = malloc((size_t)n * sizeof *by); /* member j: the j-th smallest device */
  if (!by) {
    fail_nomem(S);
    return;
  }
  memcpy(by, g, (size_t)n * sizeof *by);
  qsort(by, (size_t)n, sizeof *by, cmp_i32);
  for (int j = 0; j < n; j++) {
    pcgc_zero_shard(cell, n, j, &sh);
    double cut = whole - (double)pcgc_box_elems(&sh) * W->esize;
    S->obytes[by[j]] -= cut;
    if (S->o.zero >= 3 && S->mb_max <= 1) { /* ZeRO-3 (one micro-batch): the slab kept, the cell gathered while its op runs */
      S->wbytes[by[j]] -= cut;
      S->wfull[by[j]] += whole;
      if (group > S->wbig[by[j]]) S->wbig[by[j]] = group;
    }
    if (S->o.zero < 2 || S->mb_max > 1) continue;
    /* ZeRO-2: the full gradient lives from its backward to its slab's copy (codegen) */
    S->gbytes[by[j]] -= whole;
    S->gbytes[by[j]] += whole - cut;
    S->gfull[by[j]] += whole;
    if (group > S->gbig[by[j]]) S->gbig[by[j]] = group;
  }
  for (int k = 0; k < ng; k++) {
    int32_t u = W->ut[W->hidx[grp[k]]];
    const int32_t *at = bsearch(&grp[k], by, (size_t)n, sizeof *by, cmp_i32);
    if (u < 0 || !at) continue;
    pcgc_zero_shard(cell, n, (int)(at - by), &sh);
    S->T.dur[u] = update_dur(S, W->sd, &sh, whole);
  }
  free(by);
  S->coll_in_place = true; /* in the weight itself */
  if (S->o.zero >= 3 && S->mb_max <= 1) { /* ZeRO-3: gathered before the first read in forward, and again in backward */
    int32_t af = collective(S, PCGC_PHASE_FORWARD, W->src, 0, 0, PCGC_COLL_ALL_GATHER, n, g, whole);
    int32_t ab = collective(S, PCGC_PHASE_BACKWARD, W->src, 0, 0, PCGC_COLL_ALL_GATHER, n, g, whole);
    S->coll_in_place = false;
    if (S->st) return;
    double in = pcgc_cost_copy_time(S->m, whole / n, false); /* each member's slab into the cell first */
    S->T.dur[af] += in;
    S->T.dur[ab] += in;
    for (int k = 0; k < n; k++) hold(S, g[k], 2 * in);
    for (int k = 0; !S->st && k < ng; k++)
      for (int64_t j = W->first[W->hidx[grp[k]]]; j < W->nr && W->r[j].dev == grp[k] && !S->st; j++) {
        pcgc_box x;
        if (!pcgc_box_intersect(&W->rbox[j], cell, &x)) continue;
        if (W->r[j].fwd >= 0) edge(S, af, W->r[j].fwd);
        if (W->r[j].bwd >= 0) edge(S, ab, W->r[j].bwd);
      }
    return;
  }
  int32_t ag = collective(S, PCGC_PHASE_UPDATE, W->src, 0, 0, PCGC_COLL_ALL_GATHER, n, g, whole);
  S->coll_in_place = false;
  for (int k = 0; !S->st && k < ng; k++)
    if (W->ut[W->hidx[grp[k]]] >= 0) edge(S, W->ut[W->hidx[grp[k]]], ag);
}

/* Cells whose all-reduce may be bucketed (pcgc_grad_buckets), made into
 * collectives once every weight's cells are known (gen_buckets). Per
 * cell, its members, the backward tasks that add into it and the updates
 * that wait for it, as ranges of three pools. */
typedef struct gpend {
  int64_t g, b, nb, u, nu;
} gpend;

typedef struct gbuckets {
  pcgc_grad_cell *c;
  gpend *at;
  int64_t n, cap, cap_at;
  int32_t *grp, *bwd, *upd;
  int64_t ng, nb, nu, cap_g, cap_b, cap_u;
} gbuckets;

static bool grow(void **p, int64_t *cap, int64_t need, size_t size) {
  if (need <= *cap) return true;
  int64_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, (size_t)c * size);
  if (!q) return false;
  *p = q;
  *cap = c;
  return true;
}

static void gbuckets_free(gbuckets *B) {
  free(B->c);
  free(B->at);
  free(B->grp);
  free(B->bwd);
  free(B->upd);
}

/* Whether every member holds the cell whole: its gradient buffer is the
 * cell, reduced in place, and may share a bucket. */
static bool held_whole(const wsync *W, const pcgc_box *cell, const int *grp, int ng) {
  for (int k = 0; k < ng; k++)
    if (!pcgc_box_equal(&W->hbox[W->hidx[grp[k]]], cell)) return false;
  return true;
}

/* A bucketable cell whose gradient is wanted, kept for gen_buckets. */
static void pend_cell(wsync *W, const pcgc_box *cell, const int *grp, int ng) {
  sim *S = W->S;
  gbuckets *B = W->B;
  int n = ng * (S->copy0 ? S->reps : 1);
  if (!grow((void **)&B->c, &B->cap, B->n + 1, sizeof *B->c) ||
      !grow((void **)&B->at, &B->cap_at, B->n + 1, sizeof *B->at) ||
      !grow((void **)&B->grp, &B->cap_g, B->ng + n, sizeof *B->grp) ||
      !grow((void **)&B->upd, &B->cap_u, B->nu + ng, sizeof *B->upd)) {
    fail_nomem(S);
    return;
  }
  gpend at = {B->ng, B->nb, 0, B->nu, 0};
  for (int k = 0; k < ng; k++)
    for (int64_t j = W->first[W->hidx[grp[k]]]; j < W->nr && W->r[j].dev == grp[k]; j++) {
      pcgc_box x;
      if (W->r[j].bwd < 0 || !pcgc_box_intersect(&W->rbox[j], cell, &x)) continue;
      if (!grow((void **)&B->bwd, &B->cap_b, B->nb + 1, sizeof *B->bwd)) {
        fail_nomem(S);
        return;
      }
      B->bwd[B->nb++] = W->r[j].bwd;
    }
  if (!(at.nb = B->nb - at.b)) return; /* no gradient wanted: no all-reduce */
  for (int h = 0; h < ng; h++) B->grp[B->ng++] = grp[h];
  for (int h = 0; S->copy0 && h < ng; h++)
    for (int c = 1; c < S->reps; c++) B->grp[B->ng++] = grp[h] + c * S->rstride;
  for (int k = 0; k < ng; k++)
    if (W->ut[W->hidx[grp[k]]] >= 0) B->upd[B->nu++] = W->ut[W->hidx[grp[k]]];
  at.nu = B->nu - at.u;
  B->at[B->n] = at;
  B->c[B->n++] = (pcgc_grad_cell){W->src, W->order, n, NULL, (double)pcgc_box_elems(cell) * W->esize, true};
}

/* The pending cells' buckets: one in-place all-reduce each, after every
 * backward task that adds into one of its cells, before their updates. */
static void gen_buckets(sim *S, gbuckets *B) {
  if (S->st || !B->n) return;
  int n = (int)B->n;
  int *bucket = malloc((size_t)n * sizeof *bucket), *ord = malloc((size_t)n * sizeof *ord);
  int *off = malloc(((size_t)n + 1) * sizeof *off); /* nb <= n */
  double *elems = calloc((size_t)S->D, sizeof *elems);
  int32_t *lead = malloc((size_t)S->D * sizeof *lead);
  for (int i = 0; i < n; i++) B->c[i].grp = B->grp + B->at[i].g;
  int nb = bucket && ord && off && elems && lead ? pcgc_grad_buckets(n, B->c, bucket) : -1;
  if (nb < 0 || !pcgc_grad_bucket_cells(n, bucket, nb, off, ord)) fail_nomem(S);
  /* each bucket's collective: its first cell's members, the cells' bytes as they lie in the
   * program's arena, after every backward task adding into one of them, before their updates */
  for (int k = 0; !S->st && k < nb; k++) {
    const pcgc_grad_cell *c = &B->c[ord[off[k]]];
    double bytes = c->bytes;
    for (int x = off[k] + 1; x < off[k + 1]; x++) bytes += pcgc_bucket_bytes(B->c[ord[x]].bytes);
    S->coll_in_place = true;
    int32_t t = collective(S, PCGC_PHASE_BACKWARD, c->weight, 0, 0, PCGC_COLL_ALL_REDUCE, c->ng, c->grp, bytes);
    S->coll_in_place = false;
    for (int x = off[k]; !S->st && x < off[k + 1]; x++) {
      const gpend *at = &B->at[ord[x]];
      for (int64_t j = at->b; j < at->b + at->nb; j++) edge(S, B->bwd[j], t);
      for (int64_t j = at->u; j < at->u + at->nu; j++) edge(S, t, B->upd[j]);
    }
    if (off[k + 1] - off[k] < 2) continue;
    /* several cells: each member updates their weights in one step, which its first update
     * task stands for (their bytes and the zeroing of their gradients); the others take no time */
    for (int x = off[k]; x < off[k + 1]; x++) {
      const gpend *at = &B->at[ord[x]];
      for (int64_t j = at->u; j < at->u + at->nu; j++) {
        int32_t u = B->upd[j];
        int d = S->T.dev[u];
        if (elems[d] == 0) lead[d] = u;
        elems[d] += B->c[ord[x]].bytes / 4;
        S->T.dur[u] = 0;
      }
    }
    for (int x = off[k]; x < off[k + 1]; x++) {
      const gpend *at = &B->at[ord[x]];
      for (int64_t j = at->u; j < at->u + at->nu; j++) {
        int d = S->T.dev[B->upd[j]];
        if (elems[d] == 0) continue;
        pcgc_box one = {1, {0}, {(int64_t)elems[d]}};
        S->T.dur[lead[d]] = update_dur(S, PCGC_F32, &one, 4 * elems[d]);
        elems[d] = 0;
      }
    }
  }
  free(bucket);
  free(ord);
  free(off);
  free(elems);
  free(lead);
}

static bool sync_cell(void *ctx, const pcgc_box *cell, const int *grp, int ng) {
  wsync *W = ctx;
  sim *S = W->S;
  int32_t ar = -1; /* made at the first read of the cell whose gradient is needed */
  bool split = false;
  if (W->B && held_whole(W, cell, grp, ng) &&
      !zero_splits(W, cell, grp, ng, ng * (S->copy0 ? S->reps : 1))) { /* all-reduced in a bucket */
    pend_cell(W, cell, grp, ng);
    return !S->st;
  }
  for (int k = 0; k < ng; k++) /* the holders' reads of the cell */
    for (int64_t j = W->first[W->hidx[grp[k]]]; j < W->nr && W->r[j].dev == grp[k]; j++) {
      pcgc_box x;
      if (W->r[j].bwd < 0 || !pcgc_box_intersect(&W->rbox[j], cell, &x)) continue;
      if (ar < 0) {
        int32_t *g = S->grp;
        int n = 0;
        for (int h = 0; h < ng; h++) g[n++] = grp[h];
        if (S->copy0) /* only copy 0 read it: its copies' devices hold it too */
          for (int h = 0; h < ng; h++)
            for (int c = 1; c < S->reps; c++) g[n++] = grp[h] + c * S->rstride;
        S->coll_in_place = true; /* a whole gradient: reduced where it lies (codegen) */
        split = zero_splits(W, cell, grp, ng, n); /* each member sums one slab */
        ar = collective(S, PCGC_PHASE_BACKWARD, W->src, 0, 0, split ? PCGC_COLL_REDUCE_SCATTER : PCGC_COLL_ALL_REDUCE,
                        n, g, (double)pcgc_box_elems(cell) * W->esize);
        S->coll_in_place = false;
        if (S->st) return false;
      }
      edge(S, W->r[j].bwd, ar);
    }
  for (int k = 0; ar >= 0 && k < ng; k++)
    if (W->ut[W->hidx[grp[k]]] >= 0) edge(S, ar, W->ut[W->hidx[grp[k]]]);
  if (ar >= 0 && split && !S->st) {
    int32_t *g = S->grp;
    int n = 0;
    for (int h = 0; h < ng; h++) g[n++] = grp[h];
    for (int h = 0; S->copy0 && h < ng; h++)
      for (int c = 1; c < S->reps; c++) g[n++] = grp[h] + c * S->rstride;
    zero_cell(W, cell, grp, ng, g, n);
  }
  return !S->st;
}

static void gen_weights(sim *S) {
  if (S->st || !S->nw) return;
  const pcgc_graph *g = S->g;
  int D = S->D;
  int64_t nw = S->nw, K = g->n_nodes > D ? g->n_nodes : D;
  wrec *r = malloc((size_t)nw * sizeof *r), *tmp = malloc((size_t)nw * sizeof *tmp);
  pcgc_box *rbox = malloc((size_t)nw * sizeof *rbox), *hbox = malloc((size_t)D * sizeof *hbox);
  int32_t *ut = malloc((size_t)D * sizeof *ut);
  int *hold = malloc((size_t)D * sizeof *hold), *hidx = malloc((size_t)D * sizeof *hidx);
  int64_t *first = malloc((size_t)D * sizeof *first), *cnt = malloc(((size_t)K + 1) * sizeof *cnt);
  int *gorder = malloc((size_t)g->n_nodes * sizeof *gorder);
  gbuckets B = {0};
  if (!r || !tmp || !rbox || !hbox || !ut || !hold || !hidx || !first || !cnt || !gorder) {
    fail_nomem(S);
    goto out;
  }
  pcgc_weight_grad_order(g, S->order, gorder);
  for (int64_t i = 0; i < nw; i++) { /* each read: its weight and shard */
    tmp[i] = S->w[i];
    int src = pcgc_source_of(g, tmp[i].node);
    tmp[i].key = ((int64_t)src << 32) | (tmp[i].key - S->nd[tmp[i].node].ts);
  }
  /* by weight, then device, in the order they were read: two stable counting sorts */
  memset(cnt, 0, ((size_t)D + 1) * sizeof *cnt);
  for (int64_t i = 0; i < nw; i++) cnt[tmp[i].dev + 1]++;
  for (int d = 0; d < D; d++) cnt[d + 1] += cnt[d];
  for (int64_t i = 0; i < nw; i++) r[cnt[tmp[i].dev]++] = tmp[i];
  memset(cnt, 0, ((size_t)g->n_nodes + 1) * sizeof *cnt);
  for (int64_t i = 0; i < nw; i++) cnt[(r[i].key >> 32) + 1]++;
  for (int k = 0; k < g->n_nodes; k++) cnt[k + 1] += cnt[k];
  for (int64_t i = 0; i < nw; i++) tmp[cnt[r[i].key >> 32]++] = r[i];
  wrec *sw = r;
  r = tmp;
  tmp = sw;
  for (int64_t i = 0; i < nw; i++) { /* each read's box (micro-batches repeat the last one) */
    if (i > 0 && r[i].node == r[i - 1].node && r[i].key == r[i - 1].key) {
      rbox[i] = rbox[i - 1];
      continue;
    }
    const pcgc_ptensor *t = &g->nodes[r[i].node].out[0];
    pcgc_piece_box(t, (r[i].key & 0xffffffff) * t->replica, 0, &rbox[i]);
  }
  for (int64_t i = 0; i < S->nw && !S->st;) {
    int src = (int)(r[i].key >> 32), nh = 0;
    int64_t j = i;
    for (; j < S->nw && (int)(r[j].key >> 32) == src; j++) { /* the holders and their boxes */
      if (nh == 0 || hold[nh - 1] != r[j].dev) {
        hidx[r[j].dev] = nh;
        hold[nh] = r[j].dev;
        first[nh] = j - i;
        hbox[nh++] = rbox[j];
      } else {
        pcgc_box_union(&hbox[nh - 1], &rbox[j]);
      }
    }
    const pcgc_ptensor *w = &g->nodes[src].out[0];
    pcgc_dtype sd = pcgc_stored_dtype(w->dtype);
    double es = (double)pcgc_dtype_size(sd);
    /* each holder keeps its box, zeroes its gradient and updates it after
     * its backward tasks and the all-reduces of the cells it shares */
    for (int k = 0; k < nh && !S->st; k++) {
      double bytes = (double)pcgc_box_elems(&hbox[k]) * es;
      S->wbytes[hold[k]] += bytes;
      S->obytes[hold[k]] += bytes;
      S->gbytes[hold[k]] += bytes;
      for (int c = 1; S->copy0 && c < S->reps; c++) {
        S->wbytes[hold[k] + c * S->rstride] += bytes;
        S->obytes[hold[k] + c * S->rstride] += bytes;
        S->gbytes[hold[k] + c * S->rstride] += bytes;
      }
      ut[k] = -1; /* made at its first read whose gradient is needed */
      for (int64_t e = i + first[k]; e < j && r[e].dev == hold[k] && !S->st; e++) {
        if (r[e].bwd < 0) continue;
        if (ut[k] < 0) {
          double tu = update_dur(S, sd, &hbox[k], bytes); /* and zeroing the gradient first */
          ut[k] = task_add(S, 1, PCGC_TASK_OPTIMIZER, PCGC_PHASE_UPDATE, src);
          if (S->st) break;
          set_piece(S, ut[k], hold[k], 0, 0);
          S->T.dur[ut[k]] = tu;
        }
        edge(S, r[e].bwd, ut[k]);
      }
    }
    wsync W = {S, src, r + i, rbox + i, j - i, first, hidx, ut, es, hbox, sd, &B, gorder[src]};
    bool oom;
    if (!S->st) pcgc_weight_sync_cells(w->rank, nh, hold, hbox, S->copy0 && S->reps > 1 ? 1 : 2, sync_cell, &W, &oom);
    if (!S->st && oom) fail_nomem(S);
    i = j;
  }
  gen_buckets(S, &B);
out:
  gbuckets_free(&B);
  free(gorder);
  free(r);
  free(tmp);
  free(cnt);
  free(rbox);
  free(hbox);
  free(ut);
  free(hold);
  free(hidx);
  free(first);
}

/* ---------------------------------------------------------- schedules */

/* Devices' pipeline stages (pcgc_pipeline_stages over the span of the
 * pipelined ops each runs). `tmp` has room for D ints. */
static int pipeline_stages(const sim *S, int *stage, int *tmp) {
  return pcgc_pipeline_stages(S->D, S->first_topo, S->last_topo, stage, tmp);
}

/* Where the loss is pipelined: GPipe puts every forward micro-batch before
 * any backward one (a join between the loss's forward and backward tasks);
 * 1F1B lets a device of stage k (of s) start micro-batch i's forward only
 * after micro-batch i-(s-k)'s backward has left it. */
static void gen_schedule(sim *S, const int *stage, int stages) {
  const snode *L = &S->nd[S->loss];
  if (S->st || L->m <= 1 || L->bwd < 0) return;
  int64_t n = L->P0 * L->m;
  if (S->o.schedule == PCGC_SCHEDULE_GPIPE) {
    int32_t j = task_add(S, 1, PCGC_TASK_JOIN, PCGC_PHASE_FORWARD, S->loss);
    for (int64_t i = 0; i < n; i++) {
      edge(S, L->fwd + (int32_t)i, j);
      edge(S, j, L->bwd + (int32_t)i);
    }
    return;
  }
  for (int d = 0; d < S->D && !S->st; d++) {
    if (stage[d] < 0) continue;
    int w = stages - stage[d];
    for (int mu = w; mu < S->mb_max; mu++) {
      int32_t f = S->first_fwd[(int64_t)d * S->mb_max + mu], b = S->first_bwd[(int64_t)d * S->mb_max + mu - w];
      if (f >= 0 && b >= 0) edge(S, b, f);
    }
  }
}

/* ------------------------------------------------------------ analysis */

static pcgc_status analyse(sim *S) {
  const pcgc_graph *g = S->g;
  int n = g->n_nodes;
  pcgc_status st = pcgc_graph_topo_order(g, S->order, S->err);
  if (st != PCGC_OK) return st;
  S->loss = -1;
  S->mb_max = 1;
  for (int k = 0; k < n; k++) {
    const pcgc_node *x = &g->nodes[S->order[k]];
    snode *N = &S->nd[x->id];
    N->topo = k;
    N->fwd = N->bwd = -1;
    if (!x->typed) {
      pcgc_error_set(S->err, PCGC_ERR_TYPE, "%s '%s' has no type", pcgc_op_name(x->kind), x->name);
      pcgc_error_hint(S->err, "infer the graph (pcgc_graph_infer) before simulating it");
      return PCGC_ERR_TYPE;
    }
    N->P = N->P0 = pcgc_ptensor_pieces(&x->out[0]);
    N->cix = NULL;
    N->m = x->out[0].micro > 1 ? x->out[0].micro : 1;
    for (int j = 1; j < x->n_out; j++)
      if (pcgc_ptensor_pieces(&x->out[j]) != N->P || (x->out[j].micro > 1 ? x->out[j].micro : 1) != N->m)
        return pcgc_error_set(S->err, PCGC_ERR_UNSUPPORTED,
                              "%s '%s': its outputs are split into different numbers of pieces",
                              pcgc_op_name(x->kind), x->name);
    if (N->m > S->mb_max) S->mb_max = N->m;
    N->ts = S->n_ts;
    S->n_ts += (int64_t)x->n_out * N->P * N->m;
    pcgc_op_class cls = pcgc_op_class_of(x->kind);
    const pcgc_view *v = &S->mp->view[x->id];
    if (cls != PCGC_CLASS_SOURCE && (v->start < 0 || v->start >= S->D || v->stride < 0)) {
      pcgc_error_set(S->err, PCGC_ERR_INVALID, "%s '%s' has view {start %d, stride %d}, outside the %d devices of '%s'",
                     pcgc_op_name(x->kind), x->name, v->start, v->stride, S->D, S->m->name);
      pcgc_error_hint(S->err, "a view needs 0 <= start < %d and stride >= 0", S->D);
      return PCGC_ERR_INVALID;
    }
    if (cls == PCGC_CLASS_SOURCE) {
      N->resident = true;
      N->weight = N->grad = x->kind == PCGC_OP_WEIGHT && pcgc_dtype_is_float(x->out[0].dtype);
    } else if (cls == PCGC_CLASS_PARALLEL) {
      const snode *I = &S->nd[x->in[0].node];
      N->resident = I->resident;
      N->weight = I->weight;
      N->grad = I->grad;
    } else {
      bool any = false, flt = false;
      for (int i = 0; i < x->n_in; i++) any |= S->nd[x->in[i].node].grad;
      for (int j = 0; j < x->n_out; j++) flt |= pcgc_dtype_is_float(x->out[j].dtype);
      N->grad = any && flt;
      N->has_bwd = any; /* and reach, below */
      if ((st = pcgc_cost_node_time(S->m, g, x->id, &N->t, S->err)) != PCGC_OK) return st;
      if (S->o.profile) { /* measured, or estimated from a measured kernel of its kind */
        pcgc_profile_source src = pcgc_profile_node_time(S->o.profile, S->m, g, x->id, &N->t);
        if (pcgc_cost_efficiency(x->kind)->kernel) S->prof[src]++;
      }
      if (cls == PCGC_CLASS_LOSS) {
        if (S->loss >= 0) {
          pcgc_error_set(S->err, PCGC_ERR_INVALID, "the graph has two losses, '%s' and '%s'; training needs exactly one",
                         g->nodes[S->loss].name, x->name);
          pcgc_error_hint(S->err, "add them into one scalar, or remove one");
          return PCGC_ERR_INVALID;
        }
        S->loss = x->id;
      }
    }
  }
  if (S->loss < 0) {
    pcgc_error_set(S->err, PCGC_ERR_INVALID, "the graph has no loss; a training iteration needs one");
    pcgc_error_hint(S->err, "end the model with softmax_cross_entropy(...) or mse(...)");
    return PCGC_ERR_INVALID;
  }
  /* reach: a path to the loss (reverse topological order) */
  S->nd[S->loss].reach = true;
  for (int k = n - 1; k >= 0; k--) {
    const pcgc_node *x = &g->nodes[S->order[k]];
    if (!S->nd[x->id].reach) continue;
    for (int i = 0; i < x->n_in; i++) S->nd[x->in[i].node].reach = true;
  }
  for (int i = 0; i < n; i++) S->nd[i].has_bwd = S->nd[i].has_bwd && S->nd[i].reach;
  return PCGC_OK;
}

/* ----------------------------------------------------------- event loop */

/* Min-heaps of events keyed by (time, id): tasks by ready time, devices
 * with queued tasks by the time they come free. Keys sit in the entries so
 * sifting touches no other array. */
typedef struct hitem {
  double key;
  int32_t id;
} hitem;

/* a before b; without branches (the order of ready times is what the
 * branch predictor cannot learn) */
static inline bool hless(hitem a, hitem b) { return (a.key < b.key) | ((a.key == b.key) & (a.id < b.id)); }

static void heap_push(hitem *h, int64_t *n, hitem x) {
  int64_t i = (*n)++;
  while (i > 0) {
    int64_t p = (i - 1) / 2;
    if (!hless(x, h[p])) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = x;
}

/* Floyd's pop: the hole goes down to a leaf by the smaller child, one
 * comparison a level, and the last entry rises from there (not far: it
 * came from the bottom). (time, id) keys are distinct, so the entries come
 * out in the same order as from any other heap. */
static hitem heap_pop(hitem *h, int64_t *n) {
  hitem top = h[0], x = h[--*n];
  int64_t i = 0, m = *n;
  for (int64_t c = 1; c < m; c = 2 * i + 1) {
    if (c + 1 < m) c += hless(h[c + 1], h[c]);
    h[i] = h[c];
    i = c;
  }
  while (i > 0) {
    int64_t p = (i - 1) / 2;
    if (!hless(x, h[p])) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = x;
  return top;
}

/* What the event loop reads and writes of one task, in one 64-byte record:
 * a task popped touches its own record and its successors', where the
 * pcgc_tasks arrays and the loop's own state would take a cache line each
 * (at 10^5-10^6 tasks they miss). Start times go to T->start only for a
 * trace. */
typedef struct rtask {
  double dur;
  double ready, cp;  /* earliest start; critical path to its start */
  int64_t succ;      /* its successors: succ[succ .. succ + nsucc) */
  int32_t nsucc;
  int32_t indeg;     /* predecessors not yet done */
  int32_t dev, micro;
  int32_t res_off, res_n;
  uint32_t after;    /* the longest path from its start to the step's end, as a rank: 0 the longest */
  uint8_t kind, phase;
  bool bg;           /* a gradient all-reduce (or ZeRO's reduce-scatter) on link ports only: runs beside
                        the computation */
} rtask;

/* A forward or backward task's rank in its device's queue, smallest
 * first: forward before backward; then the micro-batch, oldest first; then
 * the longest path from the task to the step's end, longest first (`after`,
 * RANK_AFTER_BITS of it: codegen's longest-remaining-path order, so a
 * table's lookup that feeds the all-to-all goes before the MLP beside it);
 * then forward tasks in id order and backward ones in reverse id order. Ids
 * are allocated node by node in topological order, so these are the orders
 * of the forward and the backward schedule. The id (or its complement)
 * fills the low 31 bits, so the rank alone names the task:
 *     bit 62 backward | bits 51..61 micro-batch | bits 31..50 after | bits 0..30 id
 * (micro-batches past 2047 share the last slot). */
#define RANK_AFTER_BITS 20
static inline uint64_t rank_of(const rtask *x, int32_t t) {
  if (x->kind == PCGC_TASK_STAGE) /* first: a message leaves, or its reader may start; earlier micro-batches first */
    return (uint64_t)x->micro << 31 | (uint64_t)t;
  uint64_t bwd = x->phase == PCGC_PHASE_BACKWARD;
  uint64_t pos = bwd ? (uint64_t)(INT32_MAX - t) : (uint64_t)t;
  uint64_t mu = x->micro < 2047 ? (uint64_t)x->micro : 2047;
  return 1ull << 63 | bwd << 62 | mu << 51 | (uint64_t)x->after << 31 | pos;
}

static inline int32_t rank_task(uint64_t k) {
  int32_t pos = (int32_t)(k & INT32_MAX);
  return k >> 62 & 1 ? INT32_MAX - pos : pos;
}

/* A device's ready compute tasks, in its slice [off, end) of one array
 * sized for every compute task: forward and backward tasks in a min-heap of
 * ranks growing from the front (n of them), optimizer updates (which
 * nothing waits for, so they come after everything else) in a FIFO growing
 * from the back (pushed un, popped uh). Together they never outgrow the
 * slice. */
typedef struct devq {
  int32_t off, end, n, un, uh;
  bool armed; /* the device has a wake-up pending: in `todo` or in the wake heap */
} devq;

static void devq_push(uint64_t *q, devq *d, const rtask *x, int32_t t) {
  if (x->phase == PCGC_PHASE_UPDATE) {
    q[d->end - 1 - d->un++] = (uint64_t)t;
    return;
  }
  uint64_t k = rank_of(x, t), *h = q + d->off;
  int32_t i = d->n++;
  while (i > 0) {
    int32_t p = (i - 1) / 2;
    if (h[p] <= k) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = k;
}

static int32_t devq_pop(uint64_t *q, devq *d) {
  if (!d->n) return (int32_t)q[d->end - 1 - d->uh++];
  uint64_t *h = q + d->off, top = h[0], x = h[--d->n];
  int32_t i = 0, n = d->n;
  for (;;) {
    int32_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && h[c + 1] < h[c]) c++;
    if (x <= h[c]) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = x;
  return rank_task(top);
}

static inline bool devq_empty(const devq *d) { return !d->n && d->uh == d->un; }

/* Whether the task graph is alike in every copy of (reps, stride): no
 * transfer crosses copies, and every device's compute and transfer tasks
 * match its copy-0 counterpart's in number, total time and an order-free
 * hash of what each is (node, kind, phase, micro-batch, the receiver's
 * offset). */
/* Whether R copies at stride st (device d in copy (d / st) % R) leave no
 * shared link (a node's port, machine.intra/inter.shared) to two copies'
 * own messages: on a machine without shared links; where every node holds
 * one copy's devices alone (st a multiple of the node's devices), whatever
 * is shared; or where every copy lies within one node and only the
 * inter-node link is shared (a copy's messages stay on its node's unshared
 * links). Collectives across the copies are one task over all their members
 * either way, holding the same ports. Then copy 0 simulated alone is what
 * simulating every copy gives. */
static bool copies_apart(const sim *S, int R, int st) {
  const pcgc_machine *m = S->m;
  if (!m->intra.shared && !m->inter.shared) return true;
  if (st % S->dpn == 0) return true;
  return !m->intra.shared && S->dpn % st == 0 && (int64_t)R * st == S->D;
}

static bool copies_alike(const sim *S, int reps, int stride, double *load, int64_t *count, uint64_t *sig) {
  const pcgc_tasks *T = &S->T;
  int D = S->D;
  memset(load, 0, (size_t)D * sizeof *load);
  memset(count, 0, (size_t)D * sizeof *count);
  memset(sig, 0, (size_t)D * sizeof *sig);
  for (int32_t t = 0; t < T->n; t++) {
    int k = T->kind[t], d = T->dev[t];
    if (k == PCGC_TASK_TRANSFER && (copy_of(d, reps, stride) != 0) != (copy_of(T->peer[t], reps, stride) != 0))
      return false;
    if (pcgc_task_is_compute(k) || k == PCGC_TASK_TRANSFER) {
      uint64_t x = (uint64_t)(uint32_t)T->node[t] << 32 ^ (uint64_t)k << 24 ^ (uint64_t)T->phase[t] << 16 ^
                   (uint64_t)(uint32_t)T->micro[t];
      if (k == PCGC_TASK_TRANSFER) x ^= (uint64_t)(uint32_t)(T->peer[t] - d) * 0x9e3779b97f4a7c15ull;
      x += 0x9e3779b97f4a7c15ull;
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
      sig[d] += x ^ (x >> 31);
      load[d] += T->dur[t];
      count[d]++;
    }
  }
  for (int d = 0; d < D; d++) {
    int c = d - copy_of(d, reps, stride) * stride;
    if (count[d] != count[c] || sig[d] != sig[c] || fabs(load[d] - load[c]) > 1e-9 * (load[c] > 0 ? load[c] : 1))
      return false;
  }
  return true;
}

/* Under options.replicas, which tasks the event loop may leave out: those
 * of copies other than 0 (a collective runs on a copy-0 member where it has
 * one). The copies tried are the hint's, then pairs of them, fours, ... (a
 * rewrite that splits an operator over two copies keeps the pairs alike);
 * the first alike one whose copies contend for no shared port
 * (copies_apart) is used (*reps, *stride). NULL (run everything) without
 * the hint, when no grouping is alike, or out of memory. */
static uint8_t *symmetric_drop(const sim *S, int *reps, int *stride) {
  const pcgc_tasks *T = &S->T;
  int D = S->D, R = S->o.replicas, st = S->o.replica_stride;
  if (R < 2 || st < 1 || T->n < 1) return NULL;
  double *load = malloc((size_t)D * sizeof *load);
  int64_t *count = malloc((size_t)D * sizeof *count);
  uint64_t *sig = malloc((size_t)D * sizeof *sig);
  bool ok = false;
  while (load && count && sig && !(ok = copies_apart(S, R, st) && copies_alike(S, R, st, load, count, sig)) &&
         R % 2 == 0 && R >= 4) {
    R /= 2; /* pairs of copies, in blocks of the same size */
    st *= 2;
  }
  free(load);
  free(count);
  free(sig);
  uint8_t *drop = ok ? malloc((size_t)T->n) : NULL;
  for (int32_t t = 0; drop && t < T->n; t++) drop[t] = copy_of(T->dev[t], R, st) != 0;
  *reps = R;
  *stride = st;
  return drop;
}

/* Each task's `after` (rank_of): the longest path of durations from its
 * start to the step's end (no contention), over a topological order of the
 * tasks that run, scaled so the longest is 0 and none RANK_AFTER_BITS. */
static pcgc_status rank_paths(rtask *rt, const int32_t *succ, const uint8_t *drop, int32_t n) {
  int32_t *ord = malloc((size_t)(n ? n : 1) * sizeof *ord), *deg = malloc((size_t)(n ? n : 1) * sizeof *deg);
  double *len = malloc((size_t)(n ? n : 1) * sizeof *len);
  if (!ord || !deg || !len) {
    free(ord);
    free(deg);
    free(len);
    return PCGC_ERR_NOMEM;
  }
  int32_t head = 0, tail = 0;
  for (int32_t t = 0; t < n; t++) {
    deg[t] = rt[t].indeg;
    if (!(drop && drop[t]) && !deg[t]) ord[tail++] = t;
  }
  while (head < tail) {
    int32_t t = ord[head++];
    for (int64_t i = rt[t].succ, e = rt[t].succ + rt[t].nsucc; i < e; i++)
      if (--deg[succ[i]] == 0) ord[tail++] = succ[i];
  }
  double most = 0;
  for (int32_t k = tail - 1; k >= 0; k--) {
    int32_t t = ord[k];
    double m = 0;
    for (int64_t i = rt[t].succ, e = rt[t].succ + rt[t].nsucc; i < e; i++)
      if (len[succ[i]] > m) m = len[succ[i]];
    len[t] = m + rt[t].dur;
    if (len[t] > most) most = len[t];
  }
  double top = (double)((1u << RANK_AFTER_BITS) - 1);
  for (int32_t k = 0; k < tail; k++) {
    int32_t t = ord[k];
    rt[t].after = most > 0 ? (uint32_t)((most - len[t]) / most * top) : 0;
  }
  free(ord);
  free(deg);
  free(len);
  return PCGC_OK;
}

static pcgc_status run(sim *S, pcgc_sim_result *r) {
  pcgc_tasks *T = &S->T;
  int32_t n = T->n;
  int D = S->D;
  int64_t ne = S->ne;
  int32_t *succ = malloc((size_t)(ne ? ne : 1) * sizeof *succ);
  int64_t *off = calloc((size_t)n + 1, sizeof *off);
  int32_t *indeg = calloc((size_t)(n ? n : 1), sizeof *indeg);
  hitem *heap = malloc((size_t)(n ? n : 1) * sizeof *heap), *wake = malloc((size_t)D * sizeof *wake);
  rtask *rt = malloc((size_t)(n ? n : 1) * sizeof *rt);
  double *free_at = calloc((size_t)S->n_res, sizeof *free_at);
  double *fg_at = calloc((size_t)S->n_res, sizeof *fg_at); /* ports: when messages may pass background all-reduces */
  devq *dq = calloc((size_t)D, sizeof *dq);
  uint64_t *q = malloc((size_t)(n ? n : 1) * sizeof *q);
  int *todo = malloc((size_t)D * sizeof *todo);
  bool trace = S->o.trace_path != NULL;
  if (trace) T->start = calloc((size_t)(n ? n : 1), sizeof *T->start);
  uint8_t *drop = NULL;
  pcgc_status st = PCGC_OK;
  if (!succ || !off || !indeg || !rt || !heap || !wake || !free_at || !fg_at || !dq || !q || !todo ||
      (trace && !T->start)) {
    st = pcgc_error_set(S->err, PCGC_ERR_NOMEM, "out of memory running the simulation");
    goto done;
  }
  /* replicas: the tasks of copy 0 and the collectives it takes part in run;
   * the copies' tasks are left out (drop[t]) */
  int reps = 1, stride = 1;
  if (!S->copy0) drop = symmetric_drop(S, &reps, &stride);
  int64_t n_run = n;
  for (int32_t t = 0; drop && t < n; t++) n_run -= drop[t];
  /* successor lists in edge order (a counting sort), counted in compact
   * arrays: the records are too wide to take every edge's increments */
  for (int64_t e = 0; e < ne; e++) {
    if (drop && (drop[S->ef[e]] || drop[S->et[e]])) continue;
    off[S->ef[e] + 1]++;
    indeg[S->et[e]]++;
  }
  for (int32_t t = 0; t < n; t++) off[t + 1] += off[t];
  for (int64_t e = 0; e < ne; e++)
    if (!drop || !(drop[S->ef[e]] || drop[S->et[e]])) succ[off[S->ef[e]]++] = S->et[e];
  for (int32_t t = n; t > 0; t--) off[t] = off[t - 1];
  off[0] = 0;
  int64_t hn = 0, wn = 0, done = 0;
  int ntodo = 0;
  for (int32_t t = 0; t < n; t++) { /* the records; the tasks ready at 0; room in the device queues */
    rtask *x = &rt[t];
    int k = T->kind[t];
    *x = (rtask){.dur = T->dur[t],
                 .succ = off[t],
                 .nsucc = (int32_t)(off[t + 1] - off[t]),
                 .indeg = indeg[t],
                 .dev = T->dev[t],
                 .micro = T->micro[t],
                 .res_off = T->res_off[t],
                 .res_n = T->res_n[t],
                 .kind = (uint8_t)k,
                 .phase = T->phase[t]};
    if (k == PCGC_TASK_COLLECTIVE && grad_sync(T->coll[t])) {
      const int32_t *rs = T->res + x->res_off;
      x->bg = true;
      for (int i = 0; i < x->res_n; i++) x->bg &= rs[i] >= D;
    }
    if (drop && drop[t]) continue;
    if (!x->indeg) heap_push(heap, &hn, (hitem){0, t});
    if (pcgc_task_is_compute(k)) dq[x->dev].end++;
  }
  for (int d = 0, o = 0; d < D; d++) {
    dq[d].off = o;
    o = dq[d].end += o;
  }
  if ((st = rank_paths(rt, succ, drop, n)) != PCGC_OK) {
    pcgc_error_set(S->err, st, "out of memory ranking the simulation's tasks");
    goto done;
  }
  double now = 0, end_all = 0, fwd_end = 0, crit = 0, total = 0;
  for (;;) {
    int32_t t;
    double s = now;
    if (hn && heap[0].key <= now) { /* a task is ready */
      t = heap_pop(heap, &hn).id;
      const rtask *x = &rt[t];
      int k = x->kind;
      if (pcgc_task_is_compute(k)) { /* into its device's queue */
        int dev = x->dev;
        devq_push(q, &dq[dev], x, t);
        if (!dq[dev].armed) {
          dq[dev].armed = true;
          if (free_at[dev] > now) heap_push(wake, &wn, (hitem){free_at[dev], dev});
          else todo[ntodo++] = dev;
        }
        continue;
      }
      if (k != PCGC_TASK_JOIN) { /* communication: first come, first served on every port it holds */
        const int32_t *rs = T->res + x->res_off;
        bool bg = x->bg, slips = pcgc_comm_slips_in(x->dur, T->lat[t]); /* latency-bound: waits for no port */
        for (int i = 0; i < x->res_n; i++) {
          double f = bg || rs[i] < D ? free_at[rs[i]] : fg_at[rs[i]];
          if (f > s && (rs[i] < D || !slips)) s = f;
        }
        /* it holds its ports for its bytes, its latency follows (arrival); a stream it holds, throughout */
        for (int i = 0; i < x->res_n; i++) {
          double e2 = s + x->dur - (rs[i] < D ? 0 : T->lat[t]);
          if (free_at[rs[i]] < e2) free_at[rs[i]] = e2;
          if (!bg && fg_at[rs[i]] < e2) fg_at[rs[i]] = e2;
        }
      }
    } else if (wn && wake[0].key <= now) { /* a device with tasks waiting comes free */
      todo[ntodo++] = (int)heap_pop(wake, &wn).id;
      continue;
    } else if (ntodo) { /* nothing else becomes ready now: a free device starts its best task */
      int dev = todo[--ntodo];
      if (free_at[dev] > now) { /* communication took the stream meanwhile (no overlap) */
        heap_push(wake, &wn, (hitem){free_at[dev], dev});
        continue;
      }
      t = devq_pop(q, &dq[dev]);
      free_at[dev] = s + rt[t].dur;
      r->device[dev].compute += rt[t].dur;
      if (!devq_empty(&dq[dev])) heap_push(wake, &wn, (hitem){free_at[dev], dev});
      else dq[dev].armed = false;
    } else if (hn || wn) {
      now = !wn || (hn && heap[0].key <= wake[0].key) ? heap[0].key : wake[0].key;
      if (S->o.give_up_after > 0 && now > S->o.give_up_after) { /* slower than the bound: no need to finish */
        r->gave_up = true;
        break;
      }
      continue;
    } else {
      break;
    }
    const rtask *x = &rt[t];
    double d = x->dur, e = s + d, ce = x->cp + d;
    if (trace) T->start[t] = s;
    total += d;
    if (e > end_all) end_all = e;
    if (x->phase == PCGC_PHASE_FORWARD && e > fwd_end) fwd_end = e;
    if (ce > crit) crit = ce;
    for (int64_t i = x->succ, end = x->succ + x->nsucc; i < end; i++) {
      rtask *y = &rt[succ[i]];
      if (y->ready < e) y->ready = e;
      if (y->cp < ce) y->cp = ce;
      if (--y->indeg == 0) heap_push(heap, &hn, (hitem){y->ready, succ[i]});
    }
    done++;
  }
  if (r->gave_up) {
    r->iteration_time = r->forward_time = INFINITY;
    r->critical_path = crit;
    r->task_time = total;
    goto done;
  }
  if (done != n_run) {
    st = pcgc_error_set(S->err, PCGC_ERR_GRAPH, "the task graph has a cycle: %lld of %lld tasks never became ready "
                        "(internal error)", (long long)(n_run - done), (long long)n_run);
    goto done;
  }
  if (drop) { /* each copy as its first: device loads (start times stay 0) */
    for (int32_t t = 0; t < n; t++)
      if (drop[t]) total += T->dur[t];
    for (int d = 0; d < D; d++)
      if (copy_of(d, reps, stride)) r->device[d].compute = r->device[d - copy_of(d, reps, stride) * stride].compute;
    r->symmetric = true;
  }
  if (S->copy0) { /* only copy 0 was built: the others are its copies */
    double own = S->inner_coll; /* what every copy runs of its own */
    for (int32_t t = 0; t < n; t++)
      if (T->kind[t] != PCGC_TASK_COLLECTIVE) own += T->dur[t];
    total += (S->reps - 1) * own;
    for (int d = 0; d < D; d++)
      if (copy_of(d, S->reps, S->rstride))
        r->device[d].compute = r->device[d - copy_of(d, S->reps, S->rstride) * S->rstride].compute;
    r->symmetric = true;
  }
  r->iteration_time = end_all;
  r->forward_time = fwd_end;
  r->critical_path = crit;
  r->task_time = total;
done:
  free(drop);
  free(succ);
  free(off);
  free(indeg);
  free(rt);
  free(heap);
  free(wake);
  free(free_at);
  free(fg_at);
  free(dq);
  free(q);
  free(todo);
  return st;
}

/* ------------------------------------------------------------- driver */

/* Device d's memory: weights with their gradients and optimizer state,
 * activations kept for backward (of the micro-batches in flight: all under
 * GPipe, at most the stages still ahead under 1F1B), the largest recomputed
 * unit, the gradients of the backward piece that holds the most (its
 * outputs' and its inputs', one micro-batch: a language model's logits
 * and their gradient live together there), staging. A program frees a
 * send's staging once the message has been received, which its schedule
 * does soon after the send; what a device holds at once is taken as two
 * micro-batches' worth of the node that sends the most (the forward message
 * of one micro-batch beside the backward one of another, under 1F1B), at
 * most all it sends. */
static pcgc_memory device_memory(const sim *S, int d, const int *stage, int stages, bool f1b) {
  double act = S->act[d], mb = S->mb_max;
  if (S->act_mb[d] > 0) {
    double inflight = mb;
    if (f1b && stage[d] >= 0 && stages - stage[d] < mb) inflight = stages - stage[d];
    act += S->act_mb[d] * inflight / mb;
  }
  double wmax = 0; /* recompute: the largest unit, one micro-batch of it at a time */
  for (int u = 0; S->work && u < S->n_units; u++)
    if (S->work[(int64_t)d * S->n_units + u] > wmax) wmax = S->work[(int64_t)d * S->n_units + u];
  double staging = 2 * S->send_peak[d] < S->sendsum[d] ? 2 * S->send_peak[d] : S->sendsum[d];
  pcgc_memory r = pcgc_cost_memory(S->o.optimizer, S->wbytes[d], act + wmax, S->comm[d] + staging);
  /* ZeRO-2: the slabs, and of the full gradients those in flight: the ones the backward being run
   * adds into, and two ops' whose reduce-scatters have not been waited for (a WAIT comes after
   * the next op's starts), taken as three of the op that adds into the most */
  double gr = S->gbytes[d] + fmin(3 * S->gbig[d], S->gfull[d]);
  r.total += gr - r.gradients;
  r.gradients = gr;
  /* ZeRO-3: the slabs (wbytes), and the cells gathered for the op being run (the program gathers
   * an op's weights right before it, and they die with its last read) */
  double wt = S->wbytes[d] + fmin(S->wbig[d], S->wfull[d]);
  r.total += wt - r.weights;
  r.weights = wt;
  double opt = pcgc_cost_memory(S->o.optimizer, S->obytes[d], 0, 0).optimizer; /* less under options.zero */
  r.total += opt - r.optimizer;
  r.optimizer = opt;
  r.workspace = S->gmax[d];
  r.total += r.workspace;
  return r;
}

static void sim_free(sim *S) {
  pcgc_tasks_release(&S->T);
  free(S->nd);
  free(S->order);
  free(S->ef);
  free(S->et);
  free(S->h);
  free(S->shr);
  free(S->w);
  free(S->act);
  free(S->act_mb);
  free(S->unit);
  free(S->ckpt);
  free(S->work);
  free(S->wbytes);
  free(S->obytes);
  free(S->gbytes);
  free(S->gfull);
  free(S->gbig);
  free(S->gop);
  free(S->wfull);
  free(S->wbig);
  free(S->comm);
  free(S->sendsum);
  free(S->send_node);
  free(S->pack_key);
  free(S->pack_n);
  free(S->zrun);
  free(S->zfar);
  free(S->send_mb);
  free(S->send_run);
  free(S->send_peak);
  free(S->gmax);
  free(S->busy);
  free(S->zeroed);
  free(S->stamp);
  free(S->ncount);
  free(S->grp);
  free(S->first_fwd);
  free(S->first_bwd);
  free(S->first_topo);
  free(S->last_topo);
  free(S->cix_pool);
  free(S->dev_pool);
  free(S->cpy);
  free(S->pm.g);
}

/* The pieces of the nodes that are not resident. */
static int64_t computed_pieces(const sim *S) {
  int64_t total = 0;
  for (int i = 0; i < S->g->n_nodes; i++)
    if (!S->nd[i].resident) total += S->nd[i].P;
  return total;
}

/* Each non-resident node's piece -> device (snode.dev): the loops over
 * every piece of a 1,024-device graph (the copies' checks, the kernels'
 * bound) spent most of a simulation dividing. */
static pcgc_status dev_index(sim *S) {
  int64_t total = computed_pieces(S);
  if (!(S->dev_pool = malloc((size_t)(total ? total : 1) * sizeof *S->dev_pool))) return fail_nomem(S);
  int64_t off = 0;
  for (int i = 0; i < S->g->n_nodes; i++) {
    snode *N = &S->nd[i];
    if (N->resident) continue;
    N->dev = S->dev_pool + off;
    off += N->P;
    pcgc_view_devices(S->mp->view[i], N->P, S->D, N->dev);
  }
  return PCGC_OK;
}

/* sim.cpy: each device's copy among R copies of stride st (copy_of). */
static const int32_t *copy_table(sim *S, int R, int st) {
  if (S->cpy && S->cpy_R == R && S->cpy_st == st) return S->cpy;
  if (!S->cpy && !(S->cpy = malloc((size_t)S->D * sizeof *S->cpy))) return NULL;
  for (int d = 0; d < S->D; d++) S->cpy[d] = copy_of(d, R, st);
  S->cpy_R = R;
  S->cpy_st = st;
  return S->cpy;
}

/* options.copies_alike: each non-resident node's pieces on copy 0, and the
 * slot of each among them (sim.cix). */
static pcgc_status copy0_index(sim *S) {
  int64_t total = computed_pieces(S);
  const int32_t *cpy = copy_table(S, S->reps, S->rstride);
  if (!cpy || !(S->cix_pool = malloc((size_t)(total ? total : 1) * sizeof *S->cix_pool))) return fail_nomem(S);
  int64_t off = 0;
  for (int i = 0; i < S->g->n_nodes; i++) {
    snode *N = &S->nd[i];
    if (N->resident) continue;
    N->cix = S->cix_pool + off;
    off += N->P;
    int32_t k = 0;
    for (int64_t p = 0; p < N->P; p++) N->cix[p] = cpy[N->dev[p]] ? -1 : k++;
    N->P0 = k;
  }
  return PCGC_OK;
}

/* ------------------------------------------------- copies built alike */

/* Whether the copies of (R, st) are alike by construction, so that copy 0
 * built alone (options.copies_alike) gives what building every copy would:
 * options.replicas without copies_alike, as the joint search simulates the
 * rewrites of a strategy the expert grid laid out alike. Per non-resident
 * node the pieces on each copy, in index order, pair off one to one with
 * copy 0's (as many on every copy, each on its partner's device moved by
 * k * st), and paired pieces read paired pieces: of a non-resident input
 * the ones at the same place in their copies (for a relayout the same
 * cells: micro-batch and bytes too); of a weight the same elements; of
 * other resident data pieces in one map, one to one. A rewrite that
 * spreads an operator over copies fails it, and every copy is built. */
/* A sparse map of non-negative keys to values: open addressing, linear
 * probing, key -1 empty; kv holds key and value pairs. Sized by what is put
 * in it (a copy's reads), not by copies x pieces. */
typedef struct pmap {
  int64_t *kv;
  int64_t cap, n;
} pmap;

static int64_t pmap_slot(const pmap *m, int64_t key) {
  uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15u;
  int64_t i = (int64_t)(h >> 32) & (m->cap - 1);
  while (m->kv[2 * i] != key && m->kv[2 * i] >= 0) i = (i + 1) & (m->cap - 1);
  return i;
}

static int64_t pmap_get(const pmap *m, int64_t key) {
  if (!m->cap) return -1;
  int64_t i = pmap_slot(m, key);
  return m->kv[2 * i] == key ? m->kv[2 * i + 1] : -1;
}

static bool pmap_put(pmap *m, int64_t key, int64_t val) {
  if (2 * (m->n + 1) > m->cap) {
    pmap g = {malloc(2 * (size_t)(m->cap ? 2 * m->cap : 64) * sizeof *g.kv), m->cap ? 2 * m->cap : 64, 0};
    if (!g.kv) return false;
    for (int64_t i = 0; i < 2 * g.cap; i++) g.kv[i] = -1;
    for (int64_t i = 0; i < m->cap; i++)
      if (m->kv[2 * i] >= 0) {
        int64_t j = pmap_slot(&g, m->kv[2 * i]);
        g.kv[2 * j] = m->kv[2 * i];
        g.kv[2 * j + 1] = m->kv[2 * i + 1];
        g.n++;
      }
    free(m->kv);
    *m = g;
  }
  int64_t i = pmap_slot(m, key);
  if (m->kv[2 * i] < 0) m->n++;
  m->kv[2 * i] = key;
  m->kv[2 * i + 1] = val;
  return true;
}

typedef struct alike {
  sim *S;
  int R, st;
  int64_t *base;   /* [n_nodes]: each node's first entry in pos/cpy */
  int32_t *pos;    /* a piece's place among its copy's pieces */
  int32_t *cpy;    /* its copy */
  int64_t *first;  /* [n_nodes]: each node's first entry in l0 */
  int64_t *l0;     /* copy 0's pieces in index order */
  struct pmap *dmap; /* [n_nodes]: resident data, per copy piece of copy 0 -> piece of copy k, then the inverse */
  pcgc_reads rd;   /* the node's reads (pcgc_collect_reads), in piece order */
  int64_t *at;     /* [most pieces + 1]: each piece's first read */
} alike;

static bool pair_read(alike *A, int k, int node, int64_t q0, int64_t q) {
  sim *S = A->S;
  const snode *I = &S->nd[node];
  if (!I->resident) {
    int64_t b = A->base[node];
    return A->cpy[b + q0] == 0 && A->cpy[b + q] == k && A->pos[b + q0] == A->pos[b + q];
  }
  if (I->weight) {
    int64_t rep = S->g->nodes[node].out[0].replica;
    return q0 / rep == q / rep;
  }
  int64_t P = I->P, fk = (int64_t)k * P + q0, bk = ((int64_t)A->R + k) * P + q;
  pmap *m = &A->dmap[node];
  int64_t fw = pmap_get(m, fk), bw = pmap_get(m, bk);
  if (fw < 0 && bw < 0) return pmap_put(m, fk, q) && pmap_put(m, bk, q0);
  return fw == q && bw == q0;
}

/* Paired pieces of node n read paired pieces: a relayout's cells per
 * micro-batch slice (pcgc_relayout_cells), other nodes' reads listed by
 * pcgc_collect_reads (an ordinary op's piece map, a replicate's piece, a
 * reduce's partial sums), the same input slot at the same place. */
static bool pair_node(alike *A, const pcgc_node *n, pcgc_cell_list *C0, pcgc_cell_list *Ck) {
  sim *S = A->S;
  const snode *N = &S->nd[n->id];
  int64_t b = A->base[n->id];
  bool relayout = pcgc_op_class_of(n->kind) == PCGC_CLASS_PARALLEL && n->kind != PCGC_OP_REPLICATE &&
                  n->kind != PCGC_OP_REDUCE;
  if (relayout && pcgc_relayout_through(S->g, n)) return true; /* its reader's cells are paired */
  pcgc_ref src = relayout ? pcgc_relayout_source(S->g, n) : n->in[0];
  if (!relayout) {
    if (pcgc_collect_reads(&A->rd, S->g, NULL, n, NULL) != PCGC_OK) return false;
    for (int64_t p = 0; p <= N->P; p++) A->at[p] = 0;
    for (int64_t j = 0; j < A->rd.n; j++) A->at[A->rd.r[j].p + 1]++;
    for (int64_t p = 0; p < N->P; p++) A->at[p + 1] += A->at[p];
  }
  for (int64_t p = 0; p < N->P; p++) {
    int k = A->cpy[b + p];
    if (k == 0) continue;
    int64_t p0 = A->l0[A->first[n->id] + A->pos[b + p]];
    if (!relayout) {
      const pcgc_read *r0 = A->rd.r + A->at[p0], *rk = A->rd.r + A->at[p];
      if (A->at[p0 + 1] - A->at[p0] != A->at[p + 1] - A->at[p]) return false;
      for (int64_t j = 0; j < A->at[p + 1] - A->at[p]; j++)
        if (r0[j].slot != rk[j].slot || !pair_read(A, k, rk[j].src, r0[j].q, rk[j].q)) return false;
      continue;
    }
    for (int mu = 0; mu < N->m; mu++) {
      C0->n = Ck->n = 0;
      pcgc_relayout_cell_list(S->g, n, src, p0, mu, C0);
      pcgc_relayout_cell_list(S->g, n, src, p, mu, Ck);
      if (C0->oom || Ck->oom || C0->n != Ck->n) return false;
      for (int64_t j = 0; j < C0->n; j++)
        if (C0->c[j].mi != Ck->c[j].mi || C0->c[j].bytes != Ck->c[j].bytes ||
            !pair_read(A, k, src.node, C0->c[j].q, Ck->c[j].q))
          return false;
    }
  }
  return true;
}

/* ------------------------------------------ operators found alike (memo) */

typedef struct amemo {
  XXH128_hash_t key;
  UT_hash_handle hh;
} amemo;

struct pcgc_sim_memo {
  pthread_mutex_t lock;  /* a search's worker threads share one */
  amemo *set;
  int64_t hits, misses;
};

pcgc_status pcgc_sim_memo_new(pcgc_sim_memo **out, pcgc_error *err) {
  if (!out) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_sim_memo_new: bad argument");
  if (!(*out = calloc(1, sizeof **out))) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  pthread_mutex_init(&(*out)->lock, NULL);
  return PCGC_OK;
}

void pcgc_sim_memo_free(pcgc_sim_memo *memo) {
  if (!memo) return;
  amemo *e, *t;
  HASH_ITER(hh, memo->set, e, t) {
    HASH_DEL(memo->set, e);
    free(e);
  }
  pthread_mutex_destroy(&memo->lock);
  free(memo);
}

void pcgc_sim_memo_stats(const pcgc_sim_memo *memo, int64_t *hits, int64_t *misses) {
  *hits = *misses = 0;
  if (!memo) return;
  pthread_mutex_lock((pthread_mutex_t *)&memo->lock);
  *hits = memo->hits;
  *misses = memo->misses;
  pthread_mutex_unlock((pthread_mutex_t *)&memo->lock);
}

static void h64(XXH3_state_t *h, int64_t x) { XXH3_128bits_update(h, &x, sizeof x); }

static void h_type(XXH3_state_t *h, const pcgc_ptensor *t) {
  int64_t v[4 + 2 * PCGC_MAX_RANK + 4];
  int k = 0;
  v[k++] = t->dtype;
  v[k++] = t->rank;
  for (int d = 0; d < t->rank; d++) {
    v[k++] = t->dims[d];
    v[k++] = t->degree[d];
  }
  v[k++] = t->sum;
  v[k++] = t->replica;
  v[k++] = t->micro;
  v[k++] = t->micro_dim;
  XXH3_128bits_update(h, v, (size_t)k * sizeof *v);
}

static void h_place(XXH3_state_t *h, const sim *S, int node) {
  const snode *N = &S->nd[node];
  h64(h, S->mp->view[node].start);
  h64(h, S->mp->view[node].stride);
  h64(h, N->P);
  h64(h, N->m);
  h64(h, (int64_t)N->resident << 1 | N->weight);
}

/* What pair_node's answer for n under A depends on; false where it also
 * depends on other nodes' reads (a resident input that is no weight: the
 * pairing of its pieces is shared by its readers, A.dmap). */
static bool alike_key(const alike *A, const pcgc_node *n, XXH128_hash_t *key) {
  const sim *S = A->S;
  for (int i = 0; i < n->n_in; i++) {
    const snode *I = &S->nd[n->in[i].node];
    if (I->resident && !I->weight) return false;
  }
  XXH3_state_t h;
  XXH3_128bits_reset(&h);
  h64(&h, A->R);
  h64(&h, A->st);
  h64(&h, S->D);
  h64(&h, n->kind);
  for (int i = 0; i < pcgc_op_num_attrs(n->kind); i++) {
    pcgc_ints l = pcgc_attrs_ints_at(n->attrs, i);
    h64(&h, pcgc_attrs_int_at(n->attrs, i)); /* a float's bits: .i and .f share them */
    h64(&h, l.n);
    XXH3_128bits_update(&h, l.v, (size_t)l.n * sizeof *l.v);
  }
  h_place(&h, S, n->id);
  h64(&h, n->n_out);
  for (int i = 0; i < n->n_out; i++) h_type(&h, &n->out[i]);
  h64(&h, n->n_in);
  for (int i = 0; i < n->n_in; i++) {
    h64(&h, n->in[i].slot);
    h_type(&h, pcgc_graph_ref_type(S->g, n->in[i]));
    h_place(&h, S, n->in[i].node);
  }
  *key = XXH3_128bits_digest(&h);
  return true;
}

static bool memo_has(pcgc_sim_memo *memo, XXH128_hash_t key) {
  amemo *e;
  pthread_mutex_lock(&memo->lock);
  HASH_FIND(hh, memo->set, &key, sizeof key, e);
  if (e) memo->hits++;
  else memo->misses++;
  pthread_mutex_unlock(&memo->lock);
  return e != NULL;
}

static void memo_add(pcgc_sim_memo *memo, XXH128_hash_t key) {
  amemo *e = malloc(sizeof *e), *old;
  if (!e) return; /* only a lost shortcut */
  e->key = key;
  pthread_mutex_lock(&memo->lock);
  HASH_FIND(hh, memo->set, &key, sizeof key, old);
  if (old) free(e);
  else HASH_ADD(hh, memo->set, key, sizeof key, e);
  pthread_mutex_unlock(&memo->lock);
}

static bool copies_built_alike(sim *S, int R, int st) {
  const pcgc_graph *g = S->g;
  int n = g->n_nodes;
  int64_t total = 0, most = 1;
  for (int i = 0; i < n; i++)
    if (!S->nd[i].resident) {
      total += S->nd[i].P;
      if (S->nd[i].P > most) most = S->nd[i].P;
    }
  alike A = {.S = S, .R = R, .st = st};
  A.base = malloc((size_t)n * sizeof *A.base);
  A.first = malloc((size_t)n * sizeof *A.first);
  A.pos = malloc((size_t)(total ? total : 1) * sizeof *A.pos);
  A.cpy = malloc((size_t)(total ? total : 1) * sizeof *A.cpy);
  A.l0 = malloc((size_t)(total ? total : 1) * sizeof *A.l0);
  A.dmap = calloc((size_t)n, sizeof *A.dmap);
  A.at = malloc((size_t)(most + 1) * sizeof *A.at);
  int32_t *count = calloc((size_t)R, sizeof *count);
  pcgc_cell_list C0 = {0}, Ck = {0};
  const int32_t *cpy = copy_table(S, R, st);
  bool ok = A.base && A.first && A.pos && A.cpy && A.l0 && A.dmap && A.at && count && cpy;
  /* the pieces of each copy, paired by their place */
  int64_t b = 0, f = 0;
  for (int i = 0; ok && i < n; i++) {
    const snode *N = &S->nd[i];
    A.base[i] = b;
    A.first[i] = f;
    if (N->resident) continue;
    memset(count, 0, (size_t)R * sizeof *count);
    const int32_t *dev = N->dev;
    for (int64_t p = 0; p < N->P; p++) {
      int k = cpy[dev[p]];
      A.cpy[b + p] = k;
      A.pos[b + p] = count[k]++;
      if (k == 0) A.l0[f + A.pos[b + p]] = p;
    }
    for (int k = 1; ok && k < R; k++) ok = count[k] == count[0];
    for (int64_t p = 0; ok && p < N->P; p++) {
      int k = A.cpy[b + p];
      ok = dev[p] - k * st == dev[A.l0[f + A.pos[b + p]]];
    }
    b += N->P;
    f += count[0];
  }
  /* paired pieces read paired pieces */
  for (int i = 0; ok && i < n; i++) {
    if (S->nd[i].resident) continue;
    XXH128_hash_t key;
    bool keyed = S->o.memo && alike_key(&A, &g->nodes[i], &key);
    if (keyed && memo_has(S->o.memo, key)) continue;
    ok = pair_node(&A, &g->nodes[i], &C0, &Ck);
    if (ok && keyed) memo_add(S->o.memo, key);
  }
  for (int i = 0; A.dmap && i < n; i++) free(A.dmap[i].kv);
  free(A.dmap);
  free(A.base);
  free(A.first);
  free(A.pos);
  free(A.cpy);
  free(A.l0);
  free(A.at);
  pcgc_reads_destroy(&A.rd);
  free(count);
  free(C0.c);
  free(Ck.c);
  return ok;
}

/* copies_alike: what the other copies' devices hold is what copy 0's do */
static void copy0_spread(sim *S) {
  for (int d = 0; d < S->D; d++) {
    int k = copy_of(d, S->reps, S->rstride);
    if (!k) continue;
    int c = d - k * S->rstride;
    S->act[d] = S->act[c];
    S->act_mb[d] = S->act_mb[c];
    S->comm[d] = S->comm[c];
    S->sendsum[d] = S->sendsum[c];
    S->send_peak[d] = S->send_peak[c];
    S->gmax[d] = S->gmax[c];
    S->first_topo[d] = S->first_topo[c];
    S->last_topo[d] = S->last_topo[c];
    if (S->work)
      memcpy(S->work + (int64_t)d * S->n_units, S->work + (int64_t)c * S->n_units, (size_t)S->n_units * sizeof *S->work);
  }
}

static pcgc_status simulate(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m,
                            const pcgc_sim_options *o, bool check_alike, pcgc_sim_result *r, pcgc_error *err);

pcgc_status pcgc_simulate(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m,
                          const pcgc_sim_options *o, pcgc_sim_result *r, pcgc_error *err) {
  return simulate(g, mp, m, o, true, r, err);
}

/* check_alike: under options.replicas alone, build copy 0 alone where the
 * copies are built alike (copies_built_alike); false once copy 0 read
 * another copy's piece after all. */
static pcgc_status simulate(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m,
                            const pcgc_sim_options *o, bool check_alike, pcgc_sim_result *r, pcgc_error *err) {
  if (r) memset(r, 0, sizeof *r);
  if (!g || !mp || !m || !r)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_simulate: graph, mapping, machine and result are required");
  if (mp->n_nodes != g->n_nodes) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "the mapping has %d views for a graph of %d nodes", mp->n_nodes, g->n_nodes);
    pcgc_error_hint(err, "map the graph it was made for, one view per node");
    return PCGC_ERR_INVALID;
  }
  if (o && ((unsigned)o->optimizer > PCGC_OPTIM_ADAM || (unsigned)o->schedule >= PCGC_SCHEDULE_COUNT ||
            (unsigned)o->algo >= PCGC_ALGO_COUNT))
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_simulate: bad options (optimizer %d, schedule %d, algorithm %d)",
                          (int)o->optimizer, (int)o->schedule, (int)o->algo);
  double t0 = pcgc_now();
  sim S_, *S = &S_;
  memset(S, 0, sizeof *S);
  S->g = g;
  S->m = m;
  S->mp = mp;
  if (o) S->o = *o;
  else pcgc_sim_options_default(&S->o);
  S->err = err;
  S->D = pcgc_machine_num_devices(m);
  S->dpn = m->devices_per_node > 0 ? m->devices_per_node : 1;
  S->n_nodes_m = m->nodes > 0 ? m->nodes : 1;
  if (S->D < 1) return pcgc_error_set(err, PCGC_ERR_INVALID, "machine '%s' has no devices", m->name);
  int D = S->D, ni = m->intra.shared ? S->n_nodes_m : D, ne = m->inter.shared ? S->n_nodes_m : D;
  S->r_io = D;
  S->r_ii = D + ni;
  S->r_eo = D + 2 * ni;
  S->r_ei = D + 2 * ni + ne;
  S->n_res = D + 2 * ni + 2 * ne;
  int nstamp = S->n_res > S->n_nodes_m ? S->n_res : S->n_nodes_m;
  int n = g->n_nodes;
  S->nd = calloc((size_t)(n ? n : 1), sizeof *S->nd);
  S->order = malloc((size_t)(n ? n : 1) * sizeof *S->order);
  S->act = calloc((size_t)D, sizeof *S->act);
  S->act_mb = calloc((size_t)D, sizeof *S->act_mb);
  S->wbytes = calloc((size_t)D, sizeof *S->wbytes);
  S->obytes = calloc((size_t)D, sizeof *S->obytes);
  S->gbytes = calloc((size_t)D, sizeof *S->gbytes);
  S->gfull = calloc((size_t)D, sizeof *S->gfull);
  S->gbig = calloc((size_t)D, sizeof *S->gbig);
  S->gop = calloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1), sizeof *S->gop);
  S->wfull = calloc((size_t)D, sizeof *S->wfull);
  S->wbig = calloc((size_t)D, sizeof *S->wbig);
  S->comm = calloc((size_t)D, sizeof *S->comm);
  S->sendsum = calloc((size_t)D, sizeof *S->sendsum);
  S->send_node = malloc((size_t)D * sizeof *S->send_node);
  S->send_mb = calloc((size_t)D, sizeof *S->send_mb);
  S->send_run = calloc((size_t)D, sizeof *S->send_run);
  S->send_peak = calloc((size_t)D, sizeof *S->send_peak);
  S->pack_key = malloc(4 * (size_t)D * sizeof *S->pack_key);
  S->pack_n = calloc(4 * (size_t)D, sizeof *S->pack_n);
  S->zrun = malloc((size_t)D * sizeof *S->zrun);
  S->zfar = calloc((size_t)D, sizeof *S->zfar);
  S->gmax = calloc((size_t)D, sizeof *S->gmax);
  S->busy = calloc((size_t)D, sizeof *S->busy);
  S->stamp = calloc((size_t)nstamp, sizeof *S->stamp);
  S->ncount = calloc((size_t)S->n_nodes_m, sizeof *S->ncount);
  S->grp = malloc(((size_t)D + 1) * sizeof *S->grp);
  S->first_topo = malloc((size_t)D * sizeof *S->first_topo);
  S->last_topo = malloc((size_t)D * sizeof *S->last_topo);
  r->device = calloc((size_t)D, sizeof *r->device);
  pcgc_status st = PCGC_OK;
  int *stage = NULL;
  pcgc_fan fan = {0};
  if (!S->nd || !S->order || !S->act || !S->act_mb || !S->wbytes || !S->obytes || !S->gbytes || !S->gfull || !S->gbig || !S->gop || !S->wfull || !S->wbig || !S->comm || !S->sendsum || !S->send_node || !S->send_mb || !S->send_run ||
      !S->send_peak || !S->pack_key || !S->pack_n || !S->zrun || !S->zfar || !S->gmax || !S->stamp || !S->ncount ||
      !S->grp || !S->first_topo || !S->last_topo || !r->device || !tasks_grow(S, 4096)) {
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    goto out;
  }
  for (int d = 0; d < D; d++) {
    S->first_topo[d] = S->last_topo[d] = S->send_node[d] = -1;
    for (int k = 0; k < 4; k++) S->pack_key[(int64_t)k * D + d] = -1;
    S->zrun[d] = INT32_MAX / 2;
  }
  if ((st = analyse(S)) != PCGC_OK || (st = dev_index(S)) != PCGC_OK) goto out;
  S->reps = S->o.replicas;
  S->rstride = S->o.replica_stride;
  bool can = S->reps > 1 && S->rstride > 0 && D % (S->reps * S->rstride) == 0;
  S->copy0 = S->o.copies_alike && can && copies_apart(S, S->reps, S->rstride);
  if (can && !S->copy0 && check_alike) /* the copies, then pairs of them, fours, ... (symmetric_drop's order) */
    for (int R = S->reps, st = S->rstride;; R /= 2, st *= 2) {
      if (copies_apart(S, R, st) && copies_built_alike(S, R, st)) {
        S->copy0 = true;
        S->reps = R;
        S->rstride = st;
        break;
      }
      if (R % 2 || R < 4) break;
    }
  if (S->copy0 && (st = copy0_index(S)) != PCGC_OK) goto out;
  if (S->o.recompute && (!(S->unit = pcgc_checkpoint_units(g, &S->n_units, &S->ckpt)) ||
                         !(S->work = calloc((size_t)D * (size_t)S->n_units, sizeof *S->work)))) {
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    goto out;
  }
  S->first_fwd = malloc((size_t)D * (size_t)S->mb_max * sizeof *S->first_fwd);
  S->first_bwd = malloc((size_t)D * (size_t)S->mb_max * sizeof *S->first_bwd);
  stage = malloc(2 * (size_t)D * sizeof *stage); /* stages, then scratch */
  /* the largest degree of a replicate or reduce sizes the fans */
  int64_t maxdeg = 1;
  for (int i = 0; i < n; i++)
    if (g->nodes[i].kind == PCGC_OP_REPLICATE || g->nodes[i].kind == PCGC_OP_REDUCE) {
      int64_t dg = pcgc_attrs_int(g->nodes[i].attrs, "degree");
      if (dg > maxdeg) maxdeg = dg;
    }
  pcgc_status fst = pcgc_fan_init(&fan, maxdeg, D, NULL);
  S->zeroed = calloc((size_t)(S->n_ts ? S->n_ts : 1), 1);
  if (!S->first_fwd || !S->first_bwd || !stage || fst || !S->zeroed) {
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    goto out;
  }
  for (int64_t i = 0; i < (int64_t)D * S->mb_max; i++) S->first_fwd[i] = S->first_bwd[i] = -1;
  { /* room for the usual graph up front: two tasks per piece and micro-batch
     * built, plus updates, twice over for the transfers, joins and
     * collectives between them (growing copies every array) */
    int64_t est = 1024;
    for (int i = 0; i < n; i++)
      est += S->nd[i].resident ? (S->nd[i].weight ? S->nd[i].P : 0) : 2 * S->nd[i].P0 * S->nd[i].m;
    if (est < INT32_MAX / 4 && tasks_reserve(&S->T, 2 * est) == PCGC_OK) {
      int32_t *f = malloc((size_t)(4 * est) * sizeof *f), *t = malloc((size_t)(4 * est) * sizeof *t);
      int32_t *res = malloc((size_t)(2 * est) * sizeof *res);
      if (f && t && res) {
        S->ef = f;
        S->et = t;
        S->cape = 4 * est;
        S->T.res = res;
        S->T.cap_res = 2 * est;
      } else {
        free(f);
        free(t);
        free(res);
      }
    }
  } /* a failed reservation only means growing later */
  /* slower than the bound already: no schedule finishes before the busiest
   * stream (its kernels alone tell before anything is built) */
  bool stopped = false;
  if (S->o.give_up_after > 0) {
    double lb = kernel_busy_max(S);
    if (lb > S->o.give_up_after * (1 + 1e-9)) {
      S->busy_max = lb;
      stopped = true;
    }
  }
  for (int k = 0; k < n && !S->st && !stopped; k++) {
    const pcgc_node *x = &g->nodes[S->order[k]];
    pcgc_op_class cls = pcgc_op_class_of(x->kind);
    if (S->nd[x->id].resident) continue;
    if (cls == PCGC_CLASS_PARALLEL) gen_parallel(S, x, &fan);
    else gen_ordinary(S, x);
    stopped = S->o.give_up_after > 0 && S->busy_max > S->o.give_up_after;
  }
  if (!S->st && stopped) {
    r->n_devices = D;
    r->n_tasks = S->T.n;
    r->n_edges = S->ne;
    r->capacity = pcgc_machine_usable_memory(m);
    r->iteration_time = r->forward_time = INFINITY;
    r->critical_path = r->task_time = S->busy_max;
    r->gave_up = r->stopped_building = true;
    r->build_seconds = pcgc_now() - t0;
    goto out;
  }
  if (!S->st && S->crossed) { /* a task of copy 0 reads another copy's: build every copy */
    pcgc_sim_options all = S->o;
    all.copies_alike = false;
    free(stage);
    pcgc_fan_destroy(&fan);
    sim_free(S);
    free(r->device);
    memset(r, 0, sizeof *r);
    return simulate(g, mp, m, &all, false, r, err);
  }
  gen_weights(S);
  if (S->copy0) copy0_spread(S);
  int stages = 1;
  for (int d = 0; d < D; d++) stage[d] = -1;
  if (S->mb_max > 1) stages = pipeline_stages(S, stage, stage + D);
  gen_schedule(S, stage, stages);
  if ((st = S->st) != PCGC_OK) goto out;
  double t1 = pcgc_now();
  bool f1b = S->o.schedule == PCGC_SCHEDULE_1F1B && S->nd[S->loss].m > 1;
  bool skip = false; /* out of memory, and its time not wanted */
  for (int d = 0; S->o.oom_skips_run && d < D && !skip; d++)
    skip = device_memory(S, d, stage, stages, f1b).total > pcgc_machine_usable_memory(m);
  if (skip) r->iteration_time = INFINITY;
  else if ((st = run(S, r)) != PCGC_OK) goto out;
  double t2 = pcgc_now();

  /* results */
  pcgc_tasks *T = &S->T;
  r->n_devices = D;
  r->n_tasks = T->n;
  r->n_edges = S->ne;
  for (int32_t t = 0; t < T->n; t++) r->tasks_by_kind[T->kind[t]]++;
  r->bytes_intra = S->bytes_intra;
  r->bytes_inter = S->bytes_inter;
  r->capacity = pcgc_machine_usable_memory(m);
  r->stages = stages;
  r->micro_batches = S->mb_max;
  r->optimizer = S->o.optimizer;
  r->schedule = S->o.schedule;
  r->recompute = S->o.recompute;
  r->profiled = S->o.profile != NULL;
  for (int k = 0; k < PCGC_PROFILE_SOURCE_COUNT; k++) {
    r->profile_kernels[k] = S->prof[k];
    r->profile_updates[k] = S->uprof[k];
  }
  for (int d = 0; d < D; d++) {
    pcgc_sim_device *dv = &r->device[d];
    dv->idle = r->iteration_time - dv->compute;
    dv->memory = device_memory(S, d, stage, stages, f1b);
    dv->oom = dv->memory.total > r->capacity;
    r->oom_devices += dv->oom;
    r->used_devices += dv->compute > 0 || dv->memory.total > 0;
  }
  r->compute_min = INFINITY;
  for (int d = 0; d < D; d++) { /* over the devices used; all of them if none is */
    const pcgc_sim_device *dv = &r->device[d];
    if (r->used_devices && !(dv->compute > 0 || dv->memory.total > 0)) continue;
    if (dv->compute < r->compute_min) r->compute_min = dv->compute;
    if (dv->compute > r->compute_max) r->compute_max = dv->compute;
    r->compute_mean += dv->compute / (r->used_devices ? r->used_devices : D);
  }
  if (S->o.trace_path && (st = pcgc_tasks_write_trace(S->o.trace_path, g, m, T, err)) != PCGC_OK) goto out;
  r->build_seconds = t1 - t0;
  r->run_seconds = t2 - t1;
out:
  free(stage);
  pcgc_fan_destroy(&fan);
  sim_free(S);
  if (st != PCGC_OK) {
    free(r->device);
    memset(r, 0, sizeof *r);
  }
  return st;
}
