/*
 * codegen_internal.h — private to codegen/: the task graph lower.c builds
 * and schedule.c orders, buffers and all.
 */
#ifndef PCGC_CODEGEN_INTERNAL_H
#define PCGC_CODEGEN_INTERNAL_H

#include <xxhash.h>

#include "codegen.h"

/* uthash's default (Jenkins) hash left the buffer table's chains hundreds
 * long on a 64-device program (a quarter of the lowering's time walking
 * them); XXH3 spreads the keys. */
#undef HASH_FUNCTION
#define HASH_FUNCTION(keyptr, keylen, hashv) ((hashv) = (unsigned)XXH3_64bits((keyptr), (size_t)(keylen)))
#include "uthash.h"

enum { CG_FWD, CG_BWD, CG_UPD };

/* Reads and writes of a buffer so far, in creation order. */
typedef struct cg_acc {
  int writer;          /* last task that wrote it (-1: none) */
  int *readers;        /* tasks that read it since */
  int64_t n_readers, cap_readers;
  bool zeroed;         /* gradient-like: zeroed in this step already */
} cg_acc;

typedef struct cg_dev {
  pcgc_plan_buf *buf;
  cg_acc *acc;
  int64_t n_buf, cap_buf, cap_acc;
  pcgc_ins *ins;       /* in creation order */
  int64_t n_ins, cap_ins;
  int *args;
  int64_t n_args, cap_args;
  pcgc_box *boxes;     /* each distinct box once (instructions of every micro-batch share them) */
  int64_t n_boxes, cap_boxes;
  int32_t *box_slot;   /* open addressing over boxes by content: index + 1 (0: empty) */
  int64_t n_slots;     /* a power of two, at least twice n_boxes */
  int n_requests;
} cg_dev;

typedef struct cg_task {
  int64_t slot, order; /* priority: smaller first */
  int32_t first_em, n_em;
  int8_t phase;
  bool compute;        /* a kernel (1F1B joins look for these) */
  bool priority_now;   /* scheduled as soon as ready (a gradient all-reduce's start, a send) */
  bool allreduce;      /* a gradient all-reduce's start (schedule.c orders the updates by them) */
  int node, micro;
} cg_task;

typedef struct cg_emit {
  int dev;
  int32_t ins;  /* index in its device's creation-order list */
  int task;
} cg_emit;

typedef struct cg_edge {
  int a, b;
} cg_edge;

typedef struct cg_pair {
  int64_t key;
  int count;
  int32_t *recv_at;  /* schedule.c: the global position of the receive of each tag */
  UT_hash_handle hh;
} cg_pair;

typedef struct cg_group {
  int *devs;  /* sorted; the key */
  int n, id;
  UT_hash_handle hh;
} cg_group;

struct bent;
struct hbox;
struct zshard;

typedef struct cg {
  const pcgc_graph *g;
  const pcgc_mapping *mp;
  int D;
  pcgc_codegen_options o;
  pcgc_error *err;
  pcgc_status st;      /* sticky */
  int *order, *topo;
  bool *resident, *needg, *reach;
  bool *recomp;        /* recomputation: outputs made again before backward (NULL: none) */
  int64_t n_recomputed;
  int8_t *pipe_pos;    /* 0: before any pipelined op, 1: pipelined, 2: after */
  int *stage;          /* per device, -1: no pipelined op */
  int stages, M, loss;
  int64_t *tf, *tb;    /* [stage][micro] idealised start times */
  int64_t slot_max;
  cg_dev *dv;
  struct bent *bufs;   /* open addressing over buffer keys (lower.c): bufs_cap slots, a power of two */
  int64_t bufs_n, bufs_cap;
  /* per node, its VIEW_GRAD and STAGE_GRAD buffers (bkeys), in creation
   * order: backward visits them without probing every (device, piece) */
  struct cg_keys *gkeys;        /* [2 * n_nodes]: 2 node + (role == STAGE_GRAD) */
  struct hbox *boxes;
  struct zshard *zero;  /* options.zero: the slab each holder of a sharded cell updates (lower.c) */
  cg_pair *pairs;
  int max_tag;
  cg_group *groups;
  int n_groups;
  cg_task *t;
  int64_t nt, cap_t;
  cg_emit *em;
  int64_t nem, cap_em;
  cg_edge *e;
  int64_t ne, cap_e;
  /* context of the tasks being created */
  int phase, ctx_phase_save, ctx_node, ctx_micro;
  int64_t ctx_piece;
  /* an ordinary op's backward piece being lowered: the gradients of its
   * outputs on device gate_dev; the zeroing and recomputation it needs wait
   * for them (lower.c, gate) */
  int gate_dev, n_gate;
  int gate[PCGC_VARIADIC];
  /* the gradient buffers a backward piece (on device zdev) adds into,
   * zeroed by one ZERO instruction before it (lower.c, touch; -1: none) */
  int zdev, n_zpend;
  int zpend[PCGC_ZERO_MAX];
  /* gradient buckets (pcgc_grad_buckets): every weight cell all-reduced, in
   * the order weight_cells meets them; a bucket of several cells is lowered
   * as one all-reduce when its last cell is (lower.c, sync_cell) */
  struct cg_cell *cells;
  int64_t n_cells, cap_cells;
  int *cell_first;      /* [n_nodes]: a weight's first cell (-1: none) */
  int *cell_next;       /* [n_nodes]: the next of its cells sync_cell meets */
  int *bucket;          /* [n_cells] */
  int *bstart, *bmem;   /* bucket b's cells: bmem[bstart[b] .. bstart[b + 1]) */
  int *bucket_left;     /* [n_buckets]: cells not yet lowered */
  int n_buckets;
} cg;

/* A weight cell that its holders all-reduce: its members, whether it may
 * share a bucket. */
typedef struct cg_cell {
  int src, ng;
  int *grp;
  pcgc_box box;
  double bytes;
  bool bucketable;
} cg_cell;

typedef struct cg_keys {
  struct bkey *k;
  int64_t n, cap;
} cg_keys;

int pcgc__cg_home(const cg *C, int node, int64_t p);
/* Buffers an instruction reads (rd) and writes (wr); kernels' extra written
 * buffers are not included (the lowering passes them). */
int pcgc__cg_ins_access(const pcgc_ins *I, const int *args, int *rd, int *nrd, int *wr, int *nwr);
/* Orders the task graph into streams, plans memory: the program (schedule.c). */
pcgc_status pcgc__cg_schedule(cg *C, pcgc_program **out);

#endif
