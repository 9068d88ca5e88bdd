/*
 * lower.c — builds the task graph of one training step of a mapped parallel
 * graph (codegen.h says what each part of the graph becomes) and hands it
 * to schedule.c, which orders it into per-device streams.
 *
 * Tasks are created in a sequential order that is itself a correct program
 * (forward in topological order, micro-batch by micro-batch; backward in
 * reverse; gradient synchronisation; updates). Each task is one or more
 * instructions (a collective: one per member device); their buffer reads
 * and writes give the edges (read after write, write after read, write after
 * write) of the task graph, so any order that respects the edges computes
 * the same values. Send -> receive edges and the 1F1B edges are added
 * explicitly. Gradient buffers are zeroed by a task created just before the
 * first task that adds into them.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "codegen_internal.h"
#include "uthash.h"

/* --------------------------------------------------------- small helpers */

static void *grow(void *p, int64_t *cap, int64_t need, size_t size) {
  if (need <= *cap) return p;
  int64_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *q = realloc(p, (size_t)c * size);
  if (q) *cap = c;
  return q;
}

#define GROW(cg, arr, cap, need)                                                  \
  do {                                                                            \
    void *q_ = grow((arr), &(cap), (need), sizeof *(arr));                        \
    if (!q_) {                                                                    \
      (cg)->st = PCGC_ERR_NOMEM;                                                  \
    } else {                                                                      \
      (arr) = q_;                                                                 \
    }                                                                             \
  } while (0)

int pcgc__cg_home(const cg *C, int node, int64_t p) {
  return pcgc_view_device(C->mp->view[node], p, C->D);
}

static int value_m(const pcgc_ptensor *t) { return t->micro > 1 ? t->micro : 1; }

/* --------------------------------------------------------------- buffers */

typedef struct bkey { /* hashed as bytes: no padding (unused is zeroed) */
  int dev, role, node, slot, micro, unused;
  int64_t piece;
} bkey;

typedef struct bent {
  bkey k;
  int id;      /* -1: an empty slot */
} bent;

static bkey mkkey(int dev, int role, int node, int slot, int64_t piece, int micro) {
  bkey k;
  memset(&k, 0, sizeof k);
  k.dev = dev;
  k.role = role;
  k.node = node;
  k.slot = slot;
  k.piece = piece;
  k.micro = micro;
  return k;
}

static uint64_t bkey_hash(const bkey *k) { return XXH3_64bits(k, sizeof *k); }

static bool bkey_equal(const bkey *a, const bkey *b) { return memcmp(a, b, sizeof *a) == 0; }

/* The slot of key k: where it is, or the empty one it would take. */
static int64_t bmap_slot(const cg *C, const bkey *k) {
  uint64_t mask = (uint64_t)C->bufs_cap - 1, i = bkey_hash(k) & mask;
  while (C->bufs[i].id >= 0 && !bkey_equal(&C->bufs[i].k, k)) i = (i + 1) & mask;
  return (int64_t)i;
}

static int buf_find(cg *C, bkey k) {
  if (!C->bufs_cap) return -1;
  return C->bufs[bmap_slot(C, &k)].id;
}

/* Key k (not present) names buffer id. */
static bool bmap_put(cg *C, bkey k, int id) {
  if (2 * (C->bufs_n + 1) > C->bufs_cap) {
    int64_t cap = C->bufs_cap ? 2 * C->bufs_cap : 1024;
    bent *old = C->bufs, *t = malloc((size_t)cap * sizeof *t);
    if (!t) return false;
    for (int64_t i = 0; i < cap; i++) t[i].id = -1;
    int64_t oc = C->bufs_cap;
    C->bufs = t;
    C->bufs_cap = cap;
    for (int64_t i = 0; i < oc; i++)
      if (old[i].id >= 0) C->bufs[bmap_slot(C, &old[i].k)] = old[i];
    free(old);
  }
  int64_t i = bmap_slot(C, &k);
  C->bufs[i].k = k;
  C->bufs[i].id = id;
  C->bufs_n++;
  return true;
}

/* A new buffer on device k.dev holding box b of a tensor of dtype t. */
static int buf_add(cg *C, bkey k, pcgc_dtype t, const pcgc_box *b, bool persistent) {
  if (C->st) return -1;
  cg_dev *V = &C->dv[k.dev];
  GROW(C, V->buf, V->cap_buf, V->n_buf + 1);
  GROW(C, V->acc, V->cap_acc, V->n_buf + 1);
  if (C->st) return -1;
  pcgc_plan_buf *B = &V->buf[V->n_buf];
  memset(B, 0, sizeof *B);
  B->role = (uint8_t)k.role;
  B->dtype = t;
  B->node = k.node;
  B->slot = k.slot;
  B->piece = k.piece;
  B->micro = k.micro;
  B->rank = b->rank;
  int64_t n = 1;
  for (int d = 0; d < b->rank; d++) {
    B->dims[d] = b->len[d];
    B->offset[d] = b->lo[d];
    n *= b->len[d];
  }
  B->bytes = n * (int64_t)pcgc_dtype_size(t);
  B->first = B->last = -1;
  B->alias = -1;
  B->persistent = persistent;
  memset(&V->acc[V->n_buf], 0, sizeof V->acc[V->n_buf]);
  V->acc[V->n_buf].writer = -1;
  int id = (int)V->n_buf++;
  if (!bmap_put(C, k, id)) {
    C->st = PCGC_ERR_NOMEM;
    return -1;
  }
  if ((k.role == PCGC_BUF_VIEW_GRAD || k.role == PCGC_BUF_STAGE_GRAD) && C->gkeys) {
    cg_keys *L = &C->gkeys[2 * k.node + (k.role == PCGC_BUF_STAGE_GRAD)];
    GROW(C, L->k, L->cap, L->n + 1);
    if (C->st) return -1;
    L->k[L->n++] = k;
  }
  return id;
}

/* Key k names buffer `id` too (a replicate's copy on its source's device is
 * that source's buffer: nothing is copied or held twice). */
static int buf_alias(cg *C, bkey k, int id) {
  int have = buf_find(C, k);
  if (have >= 0 || C->st || id < 0) return have;
  if (!bmap_put(C, k, id)) {
    C->st = PCGC_ERR_NOMEM;
    return -1;
  }
  return id;
}

/* Gradient-staging keys in the order backward visits them: device, slot,
 * micro-batch, piece. */
static int by_visit(const void *a, const void *b) {
  const bkey *x = a, *y = b;
  if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
  if (x->slot != y->slot) return x->slot < y->slot ? -1 : 1;
  if (x->micro != y->micro) return x->micro < y->micro ? -1 : 1;
  return (x->piece > y->piece) - (x->piece < y->piece);
}

/* Node's VIEW_GRAD (stage false) or STAGE_GRAD buffers, sorted by by_visit. */
static cg_keys *grad_keys(cg *C, int node, bool stage) {
  cg_keys *L = &C->gkeys[2 * node + stage];
  if (L->n > 1) qsort(L->k, (size_t)L->n, sizeof *L->k, by_visit);
  return L;
}

/* How value (node, slot) and its gradient are stored (pcgc_value_dtype). */
static pcgc_dtype vdtype(const cg *C, int node, int slot) { return pcgc_value_dtype(C->g, node, slot, C->o.bf16); }

/* The buffer of piece (q, mu) of value (node, slot) on its device, role VALUE or GRAD. */
static int value_buf(cg *C, int role, int node, int slot, int64_t q, int mu, int dev) {
  bkey k = mkkey(dev, role, node, slot, q, mu);
  int id = buf_find(C, k);
  if (id >= 0) return id;
  const pcgc_ptensor *t = &C->g->nodes[node].out[slot];
  pcgc_box b;
  pcgc_piece_box(t, q, mu, &b);
  return buf_add(C, k, vdtype(C, node, slot), &b, false);
}

static int scratch_buf(cg *C, int node, int64_t key, int mu, int dev, pcgc_dtype t, const pcgc_box *b) {
  bkey k = mkkey(dev, PCGC_BUF_SCRATCH, node, 0, key, mu);
  int id = buf_find(C, k);
  return id >= 0 ? id : buf_add(C, k, t, b, false);
}

/* save_for_backward: node n's SAVED buffer for piece (q, mu) on dev, sized
 * by the dims of its kernel's input buffers args[0..n_in); -1 when the op
 * keeps nothing or saving is off. */
static int saved_buf(cg *C, const pcgc_node *n, int64_t q, int mu, int dev, const int *args) {
  if (!C->o.save_for_backward || C->st || !pcgc_op_saves(n->kind)) return -1;
  const int64_t *dims[PCGC_VARIADIC];
  for (int i = 0; i < n->n_in; i++) {
    if (args[i] < 0) return -1;
    dims[i] = C->dv[dev].buf[args[i]].dims;
  }
  int64_t e = pcgc_op_saved_elems(n->kind, n->n_in, dims);
  if (e <= 0) return -1;
  bkey k = mkkey(dev, PCGC_BUF_SAVED, n->id, 0, q, mu);
  int id = buf_find(C, k);
  if (id >= 0) return id;
  pcgc_box b = {1, {0}, {e}};
  return buf_add(C, k, pcgc_op_saved_dtype(n->out[0].dtype), &b, false);
}

/* ----------------------------------------------------------------- tasks */

static int64_t slot_of(const cg *C, int dev, int phase, int node, int mu);

/* Starts a task in the current context (phase, node, micro-batch, sub-order). */
static int task_begin(cg *C, int sub) {
  if (C->st) return -1;
  GROW(C, C->t, C->cap_t, C->nt + 1);
  if (C->st) return -1;
  cg_task *T = &C->t[C->nt];
  memset(T, 0, sizeof *T);
  T->first_em = (int32_t)C->nem;
  T->phase = (int8_t)C->phase;
  T->node = C->ctx_node;
  T->micro = C->ctx_micro;
  int topo = C->ctx_node >= 0 ? C->topo[C->ctx_node] : 0;
  int64_t ord = C->phase == CG_BWD ? (int64_t)(C->g->n_nodes - topo) : topo;
  T->order = ord * 16 + sub;
  T->slot = LLONG_MIN; /* set from the first instruction's device */
  return C->nt++;
}

static void edge(cg *C, int a, int b) {
  if (C->st || a < 0 || b < 0 || a == b) return;
  GROW(C, C->e, C->cap_e, C->ne + 1);
  if (C->st) return;
  C->e[C->ne].a = a;
  C->e[C->ne].b = b;
  C->ne++;
}

static void access_read(cg *C, int task, int dev, int buf) {
  cg_acc *A = &C->dv[dev].acc[buf];
  edge(C, A->writer, task);
  if (A->n_readers && A->readers[A->n_readers - 1] == task) return;
  GROW(C, A->readers, A->cap_readers, A->n_readers + 1);
  if (!C->st) A->readers[A->n_readers++] = task;
}

static void access_write(cg *C, int task, int dev, int buf) {
  cg_acc *A = &C->dv[dev].acc[buf];
  edge(C, A->writer, task);
  for (int64_t i = 0; i < A->n_readers; i++) edge(C, A->readers[i], task);
  A->n_readers = 0;
  A->writer = task;
}

static uint64_t box_hash(const pcgc_box *b) {
  size_t n = (size_t)b->rank * sizeof *b->lo;
  return XXH3_64bits_withSeed(b->len, n, XXH3_64bits_withSeed(b->lo, n, (uint64_t)b->rank));
}

static bool box_same(const pcgc_box *a, const pcgc_box *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->lo[d] != b->lo[d] || a->len[d] != b->len[d]) return false;
  return true;
}

/* Index of box b in V->boxes, added when new: a device's instructions
 * name few distinct boxes (the same piece region in every micro-batch). */
static int box_intern(cg *C, cg_dev *V, const pcgc_box *b) {
  if (2 * (V->n_boxes + 1) > V->n_slots) { /* grow the table and place every box again */
    int64_t n = V->n_slots ? 2 * V->n_slots : 64;
    int32_t *t = calloc((size_t)n, sizeof *t);
    if (!t) {
      C->st = PCGC_ERR_NOMEM;
      return -1;
    }
    for (int64_t i = 0; i < V->n_boxes; i++) {
      uint64_t k = box_hash(&V->boxes[i]) & (uint64_t)(n - 1);
      while (t[k]) k = (k + 1) & (uint64_t)(n - 1);
      t[k] = (int32_t)(i + 1);
    }
    free(V->box_slot);
    V->box_slot = t;
    V->n_slots = n;
  }
  uint64_t k = box_hash(b) & (uint64_t)(V->n_slots - 1);
  for (; V->box_slot[k]; k = (k + 1) & (uint64_t)(V->n_slots - 1))
    if (box_same(&V->boxes[V->box_slot[k] - 1], b)) return V->box_slot[k] - 1;
  GROW(C, V->boxes, V->cap_boxes, V->n_boxes + 1);
  if (C->st) return -1;
  pcgc_box *nb = &V->boxes[V->n_boxes];
  memset(nb, 0, sizeof *nb); /* unused dims zero: boxes compare and hash as bytes elsewhere */
  nb->rank = b->rank;
  for (int d = 0; d < b->rank; d++) {
    nb->lo[d] = b->lo[d];
    nb->len[d] = b->len[d];
  }
  V->box_slot[k] = (int32_t)(V->n_boxes + 1);
  return (int)V->n_boxes++;
}

/* Adds instruction I (args[0..n_args) copied into the device's pool) on
 * device dev to task `task`; extra_w: more buffers it writes (kernels). */
static int emit(cg *C, int task, int dev, pcgc_ins I, const int *args, int n_args, const pcgc_box *box,
                const int *extra_w, int n_extra) {
  if (C->st || task < 0) return -1;
  cg_dev *V = &C->dv[dev];
  if (n_args) {
    GROW(C, V->args, V->cap_args, V->n_args + n_args);
    if (C->st) return -1;
    memcpy(V->args + V->n_args, args, (size_t)n_args * sizeof *args);
    I.args = (int)V->n_args;
    I.n_args = n_args;
    V->n_args += n_args;
  } else {
    I.args = I.n_args = 0;
  }
  I.box = box ? box_intern(C, V, box) : -1;
  if (C->st) return -1;
  GROW(C, V->ins, V->cap_ins, V->n_ins + 1);
  GROW(C, C->em, C->cap_em, C->nem + 1);
  if (C->st) return -1;
  V->ins[V->n_ins] = I;
  C->em[C->nem].dev = dev;
  C->em[C->nem].ins = (int32_t)V->n_ins++;
  C->em[C->nem].task = task;
  C->nem++;
  cg_task *T = &C->t[task];
  T->n_em++;
  if (T->slot == LLONG_MIN) T->slot = slot_of(C, dev, T->phase, T->node, T->micro);
  int rd[PCGC_VARIADIC * 4 + 8], wr[PCGC_VARIADIC * 2 + 8], nr, nw;
  pcgc__cg_ins_access(&I, V->args, rd, &nr, wr, &nw);
  for (int i = 0; i < nr; i++) access_read(C, task, dev, rd[i]);
  for (int i = 0; i < nw; i++) access_write(C, task, dev, wr[i]);
  for (int i = 0; i < n_extra; i++)
    if (extra_w[i] >= 0) access_write(C, task, dev, extra_w[i]);
  return 0;
}

static pcgc_ins ins_new(cg *C, pcgc_ins_kind k) {
  pcgc_ins I;
  memset(&I, 0, sizeof I);
  I.kind = (uint8_t)k;
  I.node = C->ctx_node;
  I.piece = C->ctx_piece;
  I.micro = C->ctx_micro;
  I.dst = I.src = I.peer = I.root = -1;
  I.box = -1;
  return I;
}

/* One-instruction tasks. */
static int t_copy(cg *C, int dev, int dst, int src, const pcgc_box *box, bool add, int sub) {
  int t = task_begin(C, sub);
  pcgc_ins I = ins_new(C, PCGC_INS_COPY);
  I.dst = dst;
  I.src = src;
  I.add = add;
  emit(C, t, dev, I, NULL, 0, box, NULL, 0);
  return t;
}

/* Work that only a backward piece needs (zeroing the gradients it adds
 * into, recomputing what it reads) is ready long before it: the global
 * schedule would run it early (a pipeline stage, while it waits for its
 * gradient from the next stage, would recompute and zero every layer's
 * buffers at once, and hold them all). It waits for the gradients of that
 * piece's outputs instead: just in time. */
static void gate(cg *C, int task, int dev, const int *bufs, int n) {
  if (C->st || task < 0 || dev != C->gate_dev) return;
  for (int k = 0; k < C->n_gate; k++) {
    bool own = C->gate[k] < 0;
    for (int i = 0; i < n && !own; i++) own = C->gate[k] == bufs[i];
    if (!own) edge(C, C->dv[dev].acc[C->gate[k]].writer, task);
  }
}

static int t_zero(cg *C, int dev, int dst, int sub) {
  int t = task_begin(C, sub);
  pcgc_ins I = ins_new(C, PCGC_INS_ZERO);
  I.dst = dst;
  emit(C, t, dev, I, NULL, 0, NULL, NULL, 0);
  gate(C, t, dev, &dst, 1);
  return t;
}

/* The zeroing a backward piece needs, pending since zero_begin: one ZERO
 * instruction, one launch, for all of its buffers. */
static void zero_flush(cg *C, int sub) {
  int n = C->n_zpend, dev = C->zdev;
  C->n_zpend = 0;
  if (C->st || n == 0) return;
  if (n == 1) {
    t_zero(C, dev, C->zpend[0], sub);
    return;
  }
  int t = task_begin(C, sub);
  pcgc_ins I = ins_new(C, PCGC_INS_ZERO);
  emit(C, t, dev, I, C->zpend, n, NULL, NULL, 0);
  gate(C, t, dev, C->zpend, n);
}

/* From here to zero_end, the gradients touched on device dev are zeroed
 * together (zero_end emits them, before the backward piece's own task). */
static void zero_begin(cg *C, int dev) {
  C->n_zpend = 0;
  C->zdev = dev;
}

static void zero_end(cg *C, int sub) {
  zero_flush(C, sub);
  C->zdev = -1;
}

/* A gradient-like buffer (added into): zeroed before its first use in the step. */
static void touch(cg *C, int dev, int buf, int sub) {
  if (C->st || buf < 0) return;
  cg_acc *A = &C->dv[dev].acc[buf];
  if (A->zeroed) return;
  A->zeroed = true;
  if (dev != C->zdev) {
    t_zero(C, dev, buf, sub);
    return;
  }
  if (C->n_zpend == PCGC_ZERO_MAX) zero_flush(C, sub);
  C->zpend[C->n_zpend++] = buf;
}

static int next_tag(cg *C, int from, int to) {
  int64_t key = (int64_t)from * C->D + to;
  cg_pair *e = NULL;
  HASH_FIND(hh, C->pairs, &key, sizeof key, e);
  if (!e) {
    e = calloc(1, sizeof *e);
    if (!e) {
      C->st = PCGC_ERR_NOMEM;
      return 0;
    }
    e->key = key;
    HASH_ADD(hh, C->pairs, key, sizeof e->key, e);
  }
  if (e->count + 1 > C->max_tag) C->max_tag = e->count + 1;
  return e->count++;
}

/* src (on `from`) over box -> dst (on `to`); returns the receive task. */
static int t_sendrecv(cg *C, int from, int src, int to, int dst, const pcgc_box *box, bool add) {
  int tag = next_tag(C, from, to);
  int ts = task_begin(C, 12);
  if (ts >= 0) C->t[ts].priority_now = true; /* a message leaves as soon as it is ready: its reader may wait */
  pcgc_ins S = ins_new(C, PCGC_INS_SEND);
  S.src = src;
  S.peer = to;
  S.tag = tag;
  emit(C, ts, from, S, NULL, 0, box, NULL, 0);
  int tr = task_begin(C, 1);
  pcgc_ins R = ins_new(C, PCGC_INS_RECV);
  R.dst = dst;
  R.peer = from;
  R.tag = tag;
  R.add = add;
  emit(C, tr, to, R, NULL, 0, box, NULL, 0);
  edge(C, ts, tr);
  return tr;
}

/* The id of the device set devs[0..n) (any order, no repeats). */
static int group_id(cg *C, const int *devs, int n) {
  int *s = malloc((size_t)n * sizeof *s);
  if (!s) {
    C->st = PCGC_ERR_NOMEM;
    return -1;
  }
  memcpy(s, devs, (size_t)n * sizeof *s);
  for (int i = 1; i < n; i++) /* insertion sort: groups are small */
    for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
      int x = s[j];
      s[j] = s[j - 1];
      s[j - 1] = x;
    }
  cg_group *e = NULL;
  HASH_FIND(hh, C->groups, s, (size_t)n * sizeof *s, e);
  if (e) {
    free(s);
    return e->id;
  }
  e = calloc(1, sizeof *e);
  if (!e) {
    free(s);
    C->st = PCGC_ERR_NOMEM;
    return -1;
  }
  e->devs = s;
  e->n = n;
  e->id = C->n_groups++;
  HASH_ADD_KEYPTR(hh, C->groups, e->devs, (size_t)n * sizeof *s, e);
  return e->id;
}

/* ------------------------------------------------------------ priorities */

/* Micro-batch slot of a task of `phase` on device dev for node's micro-batch mu. */
static int64_t slot_of(const cg *C, int dev, int phase, int node, int mu) {
  int64_t M = C->M, T = C->slot_max;
  if (phase == CG_UPD) return 4 * T + 8;
  if (node < 0) return phase == CG_FWD ? -1 : 4 * T + 4;
  int pos = C->pipe_pos[node];
  if (phase == CG_FWD) {
    if (pos == 0) return -1;
    if (pos == 2) return 2 * T + 1;
  } else {
    if (pos == 2) return 2 * T + 1;
    if (pos == 0) return 4 * T + 4;
  }
  int st = C->stage[dev] >= 0 ? C->stage[dev] : 0;
  if (mu < 0) mu = 0;
  if (mu >= M) mu = (int)M - 1;
  const int64_t *tab = phase == CG_FWD ? C->tf : C->tb;
  return 2 * tab[(int64_t)st * M + mu];
}

/* Idealised 1F1B (or GPipe) timing of s stages and M micro-batches, unit
 * times: the start of each stage's forward and backward of each micro-batch,
 * used as priorities so that the list schedule interleaves like the
 * simulator's order. */
static pcgc_status pipeline_slots(cg *C) {
  int S = C->stages > 0 ? C->stages : 1, M = C->M;
  C->tf = calloc((size_t)S * (size_t)M, sizeof *C->tf);
  C->tb = calloc((size_t)S * (size_t)M, sizeof *C->tb);
  if (!C->tf || !C->tb) return PCGC_ERR_NOMEM;
  if (C->o.schedule != PCGC_SCHEDULE_1F1B || M <= 1) {
    for (int k = 0; k < S; k++)
      for (int i = 0; i < M; i++) {
        C->tf[k * M + i] = i;
        C->tb[k * M + i] = M + i;
      }
    C->slot_max = 2 * M;
    return PCGC_OK;
  }
  /* per stage the 1F1B sequence, then earliest start times by relaxation */
  int64_t *seq = malloc((size_t)S * 2 * (size_t)M * sizeof *seq); /* +i+1: forward i, -(i+1): backward i */
  if (!seq) return PCGC_ERR_NOMEM;
  for (int k = 0; k < S; k++) {
    int w = S - k < M ? S - k : M, n = 0;
    int64_t *q = seq + (int64_t)k * 2 * M;
    for (int i = 0; i < w; i++) q[n++] = i + 1;
    for (int i = 0; i < M; i++) {
      q[n++] = -(i + 1);
      if (i + w < M) q[n++] = i + w + 1;
    }
  }
  for (int64_t i = 0; i < (int64_t)S * M; i++) C->tf[i] = C->tb[i] = 0;
  for (int iter = 0; iter < 4 * S * M + 4; iter++) {
    bool changed = false;
    for (int k = 0; k < S; k++) {
      int64_t t = 0;
      const int64_t *q = seq + (int64_t)k * 2 * M;
      for (int j = 0; j < 2 * M; j++) {
        int64_t x = q[j], ready = t;
        if (x > 0) {
          int i = (int)x - 1;
          if (k > 0 && C->tf[(k - 1) * M + i] + 1 > ready) ready = C->tf[(k - 1) * M + i] + 1;
          if (C->tf[k * M + i] != ready) changed = true;
          C->tf[k * M + i] = ready;
        } else {
          int i = (int)(-x) - 1;
          if (k + 1 < S && C->tb[(k + 1) * M + i] + 1 > ready) ready = C->tb[(k + 1) * M + i] + 1;
          if (C->tf[k * M + i] + 1 > ready) ready = C->tf[k * M + i] + 1;
          if (C->tb[k * M + i] != ready) changed = true;
          C->tb[k * M + i] = ready;
        }
        t = ready + 1;
      }
    }
    if (!changed) break;
  }
  int64_t mx = 0;
  for (int64_t i = 0; i < (int64_t)S * M; i++) {
    if (C->tf[i] > mx) mx = C->tf[i];
    if (C->tb[i] > mx) mx = C->tb[i];
  }
  C->slot_max = mx + 1;
  free(seq);
  return PCGC_OK;
}

/* --------------------------------------------------------- resident data */

typedef struct hbox {
  int64_t key; /* src * D + dev */
  pcgc_box box;
  UT_hash_handle hh;
} hbox;

static void need_box(cg *C, int src, int dev, const pcgc_box *b) {
  int64_t key = (int64_t)src * C->D + dev;
  hbox *e = NULL;
  HASH_FIND(hh, C->boxes, &key, sizeof key, e);
  if (e) {
    pcgc_box_union(&e->box, b);
    return;
  }
  e = calloc(1, sizeof *e);
  if (!e) {
    C->st = PCGC_ERR_NOMEM;
    return;
  }
  e->key = key;
  e->box = *b;
  HASH_ADD(hh, C->boxes, key, sizeof e->key, e);
}

static const pcgc_box *held_box(const cg *C, int src, int dev) {
  int64_t key = (int64_t)src * C->D + dev;
  hbox *e = NULL;
  HASH_FIND(hh, C->boxes, &key, sizeof key, e);
  return e ? &e->box : NULL;
}

/* ZeRO-3 where the step has one micro-batch (as ZeRO-2's gradients): with
 * more, a weight gathered once per phase would live across every
 * micro-batch of it, and gathered per micro-batch would move its bytes that
 * many times more; such a step shards the optimizer state alone (ZeRO-1). */
static bool zero3(const cg *C) { return C->o.zero >= 3 && C->M <= 1; }

/* options.zero: device `key % D` updates slab `box` of weight `key / D`
 * and all-gathers it with the other members[0..n) of its cell (ascending;
 * the first member's entry owns the array). */
typedef struct zshard {
  int64_t key;
  pcgc_box box;
  int gid, n, j;
  int gs;       /* ZeRO-2 (one micro-batch): the slab's gradient buffer, which the full one's
                   reduce-scattered slab is copied into (-1: the update reads the full one) */
  int *members;
  UT_hash_handle hh;
} zshard;

static zshard *zshard_of(const cg *C, int src, int dev) {
  int64_t key = (int64_t)src * C->D + dev;
  zshard *z = NULL;
  HASH_FIND(hh, C->zero, &key, sizeof key, z);
  return z;
}

static int source_buf(cg *C, int src, int dev, int role) {
  bkey k = mkkey(dev, role, src, 0, -1, 0);
  int id = buf_find(C, k);
  if (id >= 0) return id;
  const pcgc_box *b = held_box(C, src, dev);
  if (!b) {
    C->st = pcgc_error_set(C->err, PCGC_ERR_INVALID, "codegen: device %d keeps no box of '%s' (internal error)", dev,
                           C->g->nodes[src].name);
    return -1;
  }
  if (role == PCGC_BUF_SOURCE && zero3(C)) { /* ZeRO-3: the slab alone is kept */
    const zshard *z = zshard_of(C, src, dev);
    if (z) b = &z->box;
  }
  pcgc_dtype t = role == PCGC_BUF_SOURCE ? pcgc_stored_dtype(C->g->nodes[src].out[0].dtype) : PCGC_F32;
  return buf_add(C, k, t, b, true);
}

/* What a kernel on dev reads of weight (or input) src: its box, or under
 * ZeRO-3, where dev keeps a slab of a sharded cell, the cell all-gathered
 * from the members' slabs into a buffer of this phase alone, before the
 * first read of the phase (forward, backward). The gather is one task over
 * the group, ordered as the read that needs it; in backward it waits for
 * the reading piece's output gradients (gate), as recomputation does. */
static int weight_buf(cg *C, int src, int dev) {
  const zshard *z = zero3(C) ? zshard_of(C, src, dev) : NULL;
  if (!z) return source_buf(C, src, dev, PCGC_BUF_SOURCE);
  int ph = C->phase == CG_BWD;
  int id = buf_find(C, mkkey(dev, PCGC_BUF_GATHER, src, 0, -1, ph));
  if (id >= 0 || C->st) return id;
  pcgc_dtype t = pcgc_stored_dtype(C->g->nodes[src].out[0].dtype);
  int tk = task_begin(C, 0);
  for (int j = 0; j < z->n && !C->st; j++) {
    int M = z->members[j];
    pcgc_ins I = ins_new(C, PCGC_INS_ALLGATHER);
    I.node = src;
    I.piece = -1;
    I.micro = 0;
    I.src = source_buf(C, src, M, PCGC_BUF_SOURCE);
    I.dst = buf_add(C, mkkey(M, PCGC_BUF_GATHER, src, 0, -1, ph), t, held_box(C, src, M), false);
    I.peer = z->gid;
    if (M == dev) id = I.dst;
    emit(C, tk, M, I, NULL, 0, NULL, NULL, 0);
  }
  if (ph) gate(C, tk, dev, NULL, 0);
  return C->st ? -1 : id;
}

/* Input piece (q, mi) of value r, read on device X: the buffer to read. */
static int read_piece(cg *C, pcgc_ref r, int64_t q, int mi, int X) {
  if (C->st) return -1;
  const pcgc_ptensor *t = &C->g->nodes[r.node].out[r.slot];
  pcgc_box b;
  pcgc_piece_box(t, q, mi, &b);
  if (C->resident[r.node]) {
    int src = pcgc_source_of(C->g, r.node);
    int S = weight_buf(C, src, X);
    if (S < 0) return -1;
    pcgc_box hb;
    pcgc_plan_buf_box(&C->dv[X].buf[S], &hb);
    if (pcgc_box_equal(&hb, &b)) return S;
    bkey k = mkkey(X, PCGC_BUF_VIEW, r.node, r.slot, q, mi);
    int id = buf_find(C, k);
    if (id >= 0) return id;
    id = buf_add(C, k, pcgc_stored_dtype(t->dtype), &b, false);
    t_copy(C, X, id, S, &b, false, 2);
    return id;
  }
  int Y = pcgc__cg_home(C, r.node, q);
  int V = value_buf(C, PCGC_BUF_VALUE, r.node, r.slot, q, mi, Y);
  if (Y == X) return V;
  bkey k = mkkey(X, PCGC_BUF_STAGE, r.node, r.slot, q, mi);
  int id = buf_find(C, k);
  if (id >= 0) return id;
  id = buf_add(C, k, vdtype(C, r.node, r.slot), &b, false);
  t_sendrecv(C, Y, V, X, id, &b, false);
  return id;
}

/* The gradient buffer matching a buffer that read_piece returned (-1: none wanted). */
static int grad_of(cg *C, pcgc_ref r, int64_t q, int mi, int X, int buf) {
  if (C->st || buf < 0 || !C->needg[r.node]) return -1;
  const pcgc_plan_buf *B = &C->dv[X].buf[buf];
  const pcgc_ptensor *t = &C->g->nodes[r.node].out[r.slot];
  if (!pcgc_dtype_is_float(t->dtype)) return -1;
  int id = -1;
  switch ((pcgc_buf_role)B->role) {
  case PCGC_BUF_SOURCE:
  case PCGC_BUF_GATHER: id = source_buf(C, B->node, X, PCGC_BUF_SOURCE_GRAD); break;
  case PCGC_BUF_VIEW:
  case PCGC_BUF_STAGE: {
    int role = B->role == PCGC_BUF_VIEW ? PCGC_BUF_VIEW_GRAD : PCGC_BUF_STAGE_GRAD;
    bkey k = mkkey(X, role, r.node, r.slot, q, mi);
    id = buf_find(C, k);
    if (id < 0) {
      pcgc_box b;
      pcgc_plan_buf_box(B, &b);
      id = buf_add(C, k, role == PCGC_BUF_VIEW_GRAD ? PCGC_F32 : vdtype(C, r.node, r.slot), &b, false);
    }
    break;
  }
  default: id = value_buf(C, PCGC_BUF_GRAD, r.node, r.slot, q, mi, X); break;
  }
  return id;
}

/* ------------------------------------------------------- ordinary ops */

static pcgc_status piece_inputs(cg *C, const pcgc_node *n, int64_t p, int64_t *inp) {
  pcgc_ptensor tin[PCGC_VARIADIC];
  for (int i = 0; i < n->n_in; i++) tin[i] = *pcgc_graph_ref_type(C->g, n->in[i]);
  return pcgc_op_piece_inputs(n->kind, n->attrs, n->n_in, tin, &n->out[0], p, inp, C->err);
}

static int op_micro(const cg *C, const pcgc_node *n) {
  int m = 1;
  for (int i = 0; i < n->n_in; i++) {
    int k = value_m(pcgc_graph_ref_type(C->g, n->in[i]));
    if (k > m) m = k;
  }
  return m;
}

static int in_mu(const cg *C, pcgc_ref r, int mu) { return value_m(pcgc_graph_ref_type(C->g, r)) > 1 ? mu : 0; }

static int out_mu(const pcgc_node *n, int j, int mu) { return value_m(&n->out[j]) > 1 ? mu : 0; }

static void lower_ordinary_fwd(cg *C, const pcgc_node *n) {
  int64_t P = pcgc_ptensor_pieces(&n->out[0]), inp[PCGC_VARIADIC];
  int m = op_micro(C, n);
  bool loss = pcgc_op_class_of(n->kind) == PCGC_CLASS_LOSS;
  int args[PCGC_VARIADIC + PCGC_MAX_INTS + 1]; /* + the SAVED buffer */
  for (int mu = 0; mu < m && !C->st; mu++)
    for (int64_t p = 0; p < P && !C->st; p++) {
      if ((C->st = piece_inputs(C, n, p, inp))) return;
      int X = pcgc__cg_home(C, n->id, p);
      C->ctx_node = n->id;
      C->ctx_piece = p;
      C->ctx_micro = mu;
      for (int i = 0; i < n->n_in; i++) args[i] = read_piece(C, n->in[i], inp[i], in_mu(C, n->in[i], mu), X);
      for (int j = 0; j < n->n_out; j++)
        args[n->n_in + j] = value_buf(C, PCGC_BUF_VALUE, n->id, j, p, out_mu(n, j, mu), X);
      /* a recomputed piece keeps it from its recomputation instead (recomp_buf) */
      int sv = C->recomp && C->recomp[n->id] ? -1 : saved_buf(C, n, p, out_mu(n, 0, mu), X, args);
      args[n->n_in + n->n_out] = sv;
      int t = task_begin(C, 4);
      pcgc_ins I = ins_new(C, PCGC_INS_FORWARD);
      emit(C, t, X, I, args, n->n_in + n->n_out + (sv >= 0), NULL, args + n->n_in, n->n_out + (sv >= 0));
      C->t[t].compute = true;
      if (loss) {
        int64_t c[PCGC_MAX_RANK], s, r;
        pcgc_piece_coords(&n->out[0], p, c, &s, &r);
        if (r == 0) {
          int tl = task_begin(C, 5);
          pcgc_ins L = ins_new(C, PCGC_INS_LOSS);
          L.src = args[n->n_in];
          emit(C, tl, X, L, NULL, 0, NULL, NULL, 0);
        }
      }
    }
}

/* Recomputation: piece (q, mu) of output `slot` of recomputed node `node`
 * on its device X, made again by the piece's FORWARD into RECOMPUTE buffers
 * (once per step), its recomputed inputs on X first. */
static int read_bwd(cg *C, pcgc_ref r, int64_t q, int mi, int X);

static int recomp_buf(cg *C, int node, int slot, int64_t q, int mu, int X) {
  int id = buf_find(C, mkkey(X, PCGC_BUF_RECOMPUTE, node, slot, q, mu));
  if (id >= 0 || C->st) return id;
  const pcgc_node *n = &C->g->nodes[node];
  int64_t inp[PCGC_VARIADIC];
  int args[PCGC_VARIADIC + PCGC_MAX_INTS + 1]; /* + the SAVED buffer */
  if ((C->st = piece_inputs(C, n, q, inp))) return -1;
  for (int i = 0; i < n->n_in; i++) args[i] = read_bwd(C, n->in[i], inp[i], in_mu(C, n->in[i], mu), X);
  for (int j = 0; j < n->n_out; j++) {
    pcgc_box b;
    int om = out_mu(n, j, mu);
    pcgc_piece_box(&n->out[j], q, om, &b);
    args[n->n_in + j] = buf_add(C, mkkey(X, PCGC_BUF_RECOMPUTE, node, j, q, om), vdtype(C, node, j), &b, false);
  }
  int sv = saved_buf(C, n, q, out_mu(n, 0, mu), X, args);
  args[n->n_in + n->n_out] = sv;
  int t = task_begin(C, 1); /* in the context of the backward that needs it */
  pcgc_ins I = ins_new(C, PCGC_INS_FORWARD);
  I.node = node;
  I.piece = q;
  I.micro = mu;
  emit(C, t, X, I, args, n->n_in + n->n_out + (sv >= 0), NULL, args + n->n_in, n->n_out + (sv >= 0));
  gate(C, t, X, NULL, 0);
  if (t >= 0) C->t[t].compute = true;
  C->n_recomputed++;
  return C->st ? -1 : args[n->n_in + slot];
}

static int read_bwd(cg *C, pcgc_ref r, int64_t q, int mi, int X) {
  if (C->recomp && C->recomp[r.node] && pcgc__cg_home(C, r.node, q) == X)
    return recomp_buf(C, r.node, r.slot, q, mi, X);
  const pcgc_node *n = &C->g->nodes[r.node];
  if (C->recomp && n->kind == PCGC_OP_REPLICATE && !C->resident[r.node]) {
    /* a replica on its source's device is that source (lower_fan): where
     * the source is recomputed, so is it */
    const pcgc_ptensor *ti = pcgc_graph_ref_type(C->g, n->in[0]);
    int64_t c[PCGC_MAX_RANK], s, rr, d = pcgc_attrs_int(n->attrs, "degree");
    pcgc_piece_coords(&n->out[0], q, c, &s, &rr);
    int64_t qs = pcgc_piece_index(ti, c, s, rr / d);
    pcgc_ref src = n->in[0];
    if (C->recomp[src.node] && pcgc__cg_home(C, src.node, qs) == X && pcgc__cg_home(C, r.node, q) == X)
      return recomp_buf(C, src.node, src.slot, qs, in_mu(C, src, mi), X);
  }
  return read_piece(C, r, q, mi, X);
}

static void lower_ordinary_bwd(cg *C, const pcgc_node *n) {
  int64_t P = pcgc_ptensor_pieces(&n->out[0]), inp[PCGC_VARIADIC];
  int m = op_micro(C, n);
  bool loss = pcgc_op_class_of(n->kind) == PCGC_CLASS_LOSS;
  int args[2 * PCGC_VARIADIC + 2 * PCGC_MAX_INTS + 1]; /* + the SAVED buffer */
  int ni = n->n_in, no = n->n_out;
  for (int mu = 0; mu < m && !C->st; mu++)
    for (int64_t p = 0; p < P && !C->st; p++) {
      if ((C->st = piece_inputs(C, n, p, inp))) return;
      int X = pcgc__cg_home(C, n->id, p);
      C->ctx_node = n->id;
      C->ctx_piece = p;
      C->ctx_micro = mu;
      C->gate_dev = X;
      C->n_gate = loss ? 0 : no;
      for (int j = 0; j < C->n_gate; j++) C->gate[j] = value_buf(C, PCGC_BUF_GRAD, n->id, j, p, out_mu(n, j, mu), X);
      zero_begin(C, X);
      for (int i = 0; i < ni; i++) {
        int mi = in_mu(C, n->in[i], mu);
        args[i] = read_bwd(C, n->in[i], inp[i], mi, X);
        args[ni + 2 * no + i] = grad_of(C, n->in[i], inp[i], mi, X, args[i]);
        touch(C, X, args[ni + 2 * no + i], 3);
      }
      for (int j = 0; j < no; j++) {
        int om = out_mu(n, j, mu);
        args[ni + j] = C->recomp && C->recomp[n->id] ? recomp_buf(C, n->id, j, p, om, X)
                                                     : value_buf(C, PCGC_BUF_VALUE, n->id, j, p, om, X);
        args[ni + no + j] = value_buf(C, PCGC_BUF_GRAD, n->id, j, p, om, X);
        if (loss) {
          C->dv[X].acc[args[ni + no + j]].zeroed = true;
          int64_t c[PCGC_MAX_RANK], s, r;
          pcgc_piece_coords(&n->out[0], p, c, &s, &r);
          int ts = task_begin(C, 2);
          pcgc_ins S = ins_new(C, PCGC_INS_SEED);
          S.dst = args[ni + no + j];
          S.tag = r == 0 ? 1 : 0;
          /* the same value every step: kept, so that the runtime writes it once, before the first */
          C->dv[X].buf[S.dst].persistent = true;
          emit(C, ts, X, S, NULL, 0, NULL, NULL, 0);
        } else {
          touch(C, X, args[ni + no + j], 3); /* an output nobody read still needs a zero gradient */
        }
      }
      zero_end(C, 3);
      /* what the piece's forward kept (its recomputation's, where recomputed) */
      int sv = C->o.save_for_backward && pcgc_op_saves(n->kind)
                   ? buf_find(C, mkkey(X, PCGC_BUF_SAVED, n->id, 0, p, out_mu(n, 0, mu)))
                   : -1;
      args[2 * ni + 2 * no] = sv;
      int t = task_begin(C, 4);
      pcgc_ins I = ins_new(C, PCGC_INS_BACKWARD);
      emit(C, t, X, I, args, 2 * ni + 2 * no + (sv >= 0), NULL, args + ni + 2 * no, ni);
      C->t[t].compute = true;
      C->n_gate = 0;
    }
}

/* Sharded batch norm: statistics summed over the pieces of a channel group. */
static void lower_bn(cg *C, const pcgc_node *n, bool backward) {
  const pcgc_ptensor *o = &n->out[0];
  int64_t P = pcgc_ptensor_pieces(o), inp[PCGC_VARIADIC];
  int64_t Cc = o->dims[1] / o->degree[1];
  if (op_micro(C, n) > 1) {
    C->st = pcgc_error_set(C->err, PCGC_ERR_UNSUPPORTED,
                           "batchnorm '%s' is sharded over its batch and pipelined: not supported by the runtime",
                           n->name);
    return;
  }
  int64_t groups = (int64_t)o->degree[1] * o->replica;
  int *devs = malloc((size_t)(P > 0 ? P : 1) * sizeof *devs);
  if (!devs) {
    C->st = PCGC_ERR_NOMEM;
    return;
  }
  pcgc_box sb = {1, {0}, {4 * Cc}};
  for (int64_t g = 0; g < groups && !C->st; g++) {
    /* the devices of the group's pieces */
    int nd = 0;
    for (int64_t p = 0; p < P; p++) {
      if (pcgc_bn_group(o, p) != g) continue;
      int X = pcgc__cg_home(C, n->id, p);
      bool seen = false;
      for (int k = 0; k < nd; k++) seen |= devs[k] == X;
      if (!seen) devs[nd++] = X;
    }
    int grp = nd > 1 ? group_id(C, devs, nd) : -1;
    for (int pass = 0; pass < 3 && !C->st; pass++) {
      if (pass == 1) { /* the group's sum */
        if (nd > 1) {
          C->ctx_node = n->id;
          C->ctx_piece = -1;
          C->ctx_micro = 0;
          int t = task_begin(C, 5);
          pcgc_box half = {1, {backward ? 2 * Cc : 0}, {2 * Cc}};
          for (int k = 0; k < nd; k++) {
            pcgc_ins I = ins_new(C, PCGC_INS_ALLREDUCE);
            I.dst = scratch_buf(C, n->id, g, 0, devs[k], PCGC_F64, &sb);
            I.peer = grp;
            emit(C, t, devs[k], I, NULL, 0, &half, NULL, 0);
          }
        }
        continue;
      }
      for (int64_t p = 0; p < P && !C->st; p++) {
        if (pcgc_bn_group(o, p) != g) continue;
        if ((C->st = piece_inputs(C, n, p, inp))) break;
        int X = pcgc__cg_home(C, n->id, p);
        C->ctx_node = n->id;
        C->ctx_piece = p;
        C->ctx_micro = 0;
        bool fresh = buf_find(C, mkkey(X, PCGC_BUF_SCRATCH, n->id, 0, g, 0)) < 0;
        int scr = scratch_buf(C, n->id, g, 0, X, PCGC_F64, &sb);
        if (fresh) t_zero(C, X, scr, 3);
        int x = read_piece(C, n->in[0], inp[0], 0, X);
        int sc = n->n_in == 3 ? read_piece(C, n->in[1], inp[1], 0, X) : -1;
        int bi = n->n_in == 3 ? read_piece(C, n->in[2], inp[2], 0, X) : -1;
        int y = value_buf(C, PCGC_BUF_VALUE, n->id, 0, p, 0, X);
        if (!backward) {
          int t = task_begin(C, pass == 0 ? 4 : 6);
          if (t < 0) break;
          C->t[t].compute = true;
          pcgc_ins I = ins_new(C, pass == 0 ? PCGC_INS_BN_STATS : PCGC_INS_BN_APPLY);
          if (pass == 0) {
            int a[2] = {x, scr};
            I.dst = scr;
            emit(C, t, X, I, a, 2, NULL, NULL, 0);
          } else {
            int a[5] = {x, sc, bi, y, scr};
            I.dst = y;
            emit(C, t, X, I, a, 5, NULL, NULL, 0);
          }
          continue;
        }
        int dy = value_buf(C, PCGC_BUF_GRAD, n->id, 0, p, 0, X);
        touch(C, X, dy, 3);
        if (pass == 0) {
          int t = task_begin(C, 4);
          if (t < 0) break;
          C->t[t].compute = true;
          pcgc_ins I = ins_new(C, PCGC_INS_BN_BWD_STATS);
          int a[5] = {x, dy, scr, sc, bi};
          I.dst = scr;
          emit(C, t, X, I, a, 5, NULL, NULL, 0);
          continue;
        }
        int dx = grad_of(C, n->in[0], inp[0], 0, X, x);
        int dsc = n->n_in == 3 ? grad_of(C, n->in[1], inp[1], 0, X, sc) : -1;
        int dbi = n->n_in == 3 ? grad_of(C, n->in[2], inp[2], 0, X, bi) : -1;
        zero_begin(C, X);
        touch(C, X, dx, 3);
        touch(C, X, dsc, 3);
        touch(C, X, dbi, 3);
        zero_end(C, 3);
        int t = task_begin(C, 6);
        if (t < 0) break;
        C->t[t].compute = true;
        pcgc_ins I = ins_new(C, PCGC_INS_BN_BWD_APPLY);
        int a[8] = {x, sc, dy, dx, dsc, dbi, scr, bi};
        int w[3] = {dx, dsc, dbi};
        emit(C, t, X, I, a, 8, NULL, w, 3);
      }
    }
  }
  free(devs);
}

/* ------------------------------------------------------- parallel ops */

/* partition, combine, pipeline, unpipeline: the cells pcgc_relayout_cells
 * names (the simulator's transfers), copied or sent, in the order of their
 * input micro-batch slice and piece. */
static int by_slice(const void *a, const void *b) {
  const pcgc_cell *x = a, *y = b;
  if (x->mi != y->mi) return x->mi < y->mi ? -1 : 1;
  return (x->q > y->q) - (x->q < y->q);
}

static void lower_relayout(cg *C, const pcgc_node *n, bool backward) {
  if (pcgc_relayout_through(C->g, n)) return; /* its reader moves its cells */
  const pcgc_ptensor *to = &n->out[0];
  pcgc_ref from = pcgc_relayout_source(C->g, n);
  int mo = value_m(to), src = from.node, slot = from.slot;
  int64_t Po = pcgc_ptensor_pieces(to);
  /* backward: set the input's gradient where nothing else adds into it (no zeroing) */
  bool add = backward && !pcgc_relayout_grad_sets(C->g, n);
  pcgc_cell_list L = {0};
  for (int mu = 0; mu < mo && !C->st; mu++)
    for (int64_t p = 0; p < Po && !C->st; p++) {
      int X = pcgc__cg_home(C, n->id, p);
      C->ctx_node = n->id;
      C->ctx_piece = p;
      C->ctx_micro = mu;
      int out = value_buf(C, backward ? PCGC_BUF_GRAD : PCGC_BUF_VALUE, n->id, 0, p, mu, X);
      if (backward) touch(C, X, out, 3);
      L.n = 0;
      pcgc_relayout_cell_list(C->g, n, from, p, mu, &L);
      if (L.oom) {
        C->st = PCGC_ERR_NOMEM;
        break;
      }
      qsort(L.c, (size_t)L.n, sizeof *L.c, by_slice);
      for (int64_t k = 0; k < L.n && !C->st; k++) {
        int64_t q = L.c[k].q;
        int ui = L.c[k].mi;
        const pcgc_box *x = &L.c[k].part;
        int Y = pcgc__cg_home(C, src, q);
        if (!backward) {
          int in = value_buf(C, PCGC_BUF_VALUE, src, slot, q, ui, Y);
          if (Y == X) t_copy(C, X, out, in, x, false, 2);
          else t_sendrecv(C, Y, in, X, out, x, false);
        } else if (C->needg[src]) {
          int gin = value_buf(C, PCGC_BUF_GRAD, src, slot, q, ui, Y);
          if (add) touch(C, Y, gin, 3);
          else if (gin >= 0) C->dv[Y].acc[gin].zeroed = true; /* set whole here: its reader must not zero it */
          if (Y == X) t_copy(C, X, gin, out, x, add, 6);
          else t_sendrecv(C, X, out, Y, gin, x, add);
        }
      }
    }
  free(L.c);
}

/* The buffers of one device of a fan (pcgc_fan.dev[k]): bufs[0..n). */
typedef struct member {
  int dev;
  int n;
  int *bufs;
  int io;  /* spread: the buffer it receives into; gather_sum: the buffer of its sum */
} member;

/* One buffer holding the sum of a member's buffers (itself when it has one). */
static int member_sum(cg *C, const member *m, int node, int64_t key, int mu, pcgc_dtype t, const pcgc_box *b) {
  if (m->n == 1) return m->bufs[0];
  int s = scratch_buf(C, node, key, mu, m->dev, t, b);
  for (int i = 0; i < m->n; i++) t_copy(C, m->dev, s, m->bufs[i], NULL, i > 0, 2);
  return s;
}

/* Sends value/gradient `srcbuf` on the fan's narrow device Y to every member
 * (ms[k]: the fan's dev[k]) as pcgc_fan_move_of says: COPY into local
 * targets, SEND/RECV to one device, BCAST to more (RELAY: one message to
 * the first member, which broadcasts to the rest); on a member with several
 * targets, the first receives and the rest copy from it. add: into the
 * targets (gradients). */
static void spread(cg *C, const pcgc_fan *F, pcgc_fan_move mv, int srcbuf, member *ms, bool add, int node,
                   int64_t key, int mu, const pcgc_box *box) {
  int Y = F->narrow, nm = F->n_dev;
  for (int i = 0; i < nm; i++) {
    if (ms[i].dev == Y) {
      for (int k = 0; k < ms[i].n; k++)
        if (ms[i].bufs[k] != srcbuf) t_copy(C, Y, ms[i].bufs[k], srcbuf, NULL, add, 2);
      continue;
    }
    /* with add and several targets, receive into scratch then add to each */
    ms[i].io = add && ms[i].n > 1 ? scratch_buf(C, node, key, mu, ms[i].dev, PCGC_F32, box) : ms[i].bufs[0];
  }
  int root = Y, rsrc = srcbuf;
  const int *gdevs = F->grp;
  int ng = F->n_grp;
  if (mv == PCGC_FAN_RELAY) {
    t_sendrecv(C, Y, srcbuf, ms[0].dev, ms[0].io, box, false);
    root = ms[0].dev;
    rsrc = ms[0].io;
    gdevs = F->dev;
    ng = F->n_dev;
  }
  if (mv == PCGC_FAN_MESSAGE) {
    for (int i = 0; i < nm; i++)
      if (ms[i].dev != Y) {
        bool into_scratch = add && ms[i].n > 1;
        t_sendrecv(C, Y, srcbuf, ms[i].dev, ms[i].io, box, add && !into_scratch);
      }
  } else if (mv == PCGC_FAN_COLLECTIVE || mv == PCGC_FAN_RELAY) {
    int grp = group_id(C, gdevs, ng);
    int t = task_begin(C, 8);
    pcgc_ins I = ins_new(C, PCGC_INS_BCAST);
    I.peer = grp;
    I.root = root;
    I.src = rsrc;
    emit(C, t, root, I, NULL, 0, box, NULL, 0);
    for (int i = 0; i < nm; i++) {
      if (ms[i].dev == Y || ms[i].dev == root) continue;
      bool into_scratch = add && ms[i].n > 1;
      pcgc_ins R = ins_new(C, PCGC_INS_BCAST);
      R.peer = grp;
      R.root = root;
      R.dst = ms[i].io;
      R.add = add && !into_scratch;
      emit(C, t, ms[i].dev, R, NULL, 0, box, NULL, 0);
    }
  }
  for (int i = 0; i < nm; i++) {
    if (ms[i].dev == Y) continue;
    for (int k = add && ms[i].n > 1 ? 0 : 1; k < ms[i].n; k++) t_copy(C, ms[i].dev, ms[i].bufs[k], ms[i].io, NULL, add, 2);
  }
}

/* Sums every member's buffers into `dst` on the fan's narrow device X as
 * pcgc_fan_move_of says: local ones copied (the first sets unless add), one
 * other device point to point, more by a REDUCE collective (RELAY: the
 * members reduce to the first of them, which sends the sum on). */
static void gather_sum(cg *C, const pcgc_fan *F, pcgc_fan_move mv, int dst, member *ms, bool add, int node,
                       int64_t key, int mu, pcgc_dtype t, const pcgc_box *box) {
  int X = F->narrow, nm = F->n_dev, local = F->narrow_member ? F->at[X] : -1;
  bool set = !add;
  if (mv == PCGC_FAN_LOCAL || mv == PCGC_FAN_MESSAGE) {
    for (int k = 0; local >= 0 && k < ms[local].n; k++) {
      t_copy(C, X, dst, ms[local].bufs[k], NULL, !set, 2);
      set = false;
    }
    for (int i = 0; mv == PCGC_FAN_MESSAGE && i < nm; i++)
      if (ms[i].dev != X) {
        int s = member_sum(C, &ms[i], node, key, mu, t, box);
        t_sendrecv(C, ms[i].dev, s, X, dst, box, !set);
      }
    return;
  }
  /* COLLECTIVE: over X and the others, rooted at X (F->grp's order);
   * RELAY: over the members, rooted at the first, into its own scratch
   * (slot 1: member_sum's, slot 0, may be a source) */
  const int *devs = mv == PCGC_FAN_RELAY ? F->dev : F->grp;
  int nd = mv == PCGC_FAN_RELAY ? F->n_dev : F->n_grp;
  for (int i = 0; i < nd; i++) { /* each member's sum first: the reduce reads them */
    member *M = &ms[F->at[devs[i]]];
    M->io = member_sum(C, M, node, key, mu, t, box);
  }
  int root = devs[0], rdst = dst;
  if (mv == PCGC_FAN_RELAY) {
    bkey sk = mkkey(root, PCGC_BUF_SCRATCH, node, 1, key, mu);
    if ((rdst = buf_find(C, sk)) < 0) rdst = buf_add(C, sk, t, box, false);
  }
  int grp = group_id(C, devs, nd);
  int tk = task_begin(C, 8);
  for (int i = 0; i < nd; i++) {
    pcgc_ins I = ins_new(C, PCGC_INS_REDUCE);
    I.peer = grp;
    I.root = root;
    I.src = ms[F->at[devs[i]]].io;
    if (i == 0) {
      I.dst = rdst;
      I.add = add && mv == PCGC_FAN_COLLECTIVE;
    }
    emit(C, tk, devs[i], I, NULL, 0, box, NULL, 0);
  }
  if (mv == PCGC_FAN_RELAY) t_sendrecv(C, root, rdst, X, dst, box, add);
}

/* replicate and reduce: each piece on the narrow side and the d pieces it
 * fans out to or in from (pcgc_fan). Data flows narrow -> wide in
 * replicate's forward and reduce's backward (spread), wide -> narrow
 * otherwise (gather_sum). */
static void lower_fan(cg *C, const pcgc_node *n, bool backward) {
  bool rep = n->kind == PCGC_OP_REPLICATE;
  const pcgc_ptensor *to = &n->out[0], *ti = pcgc_graph_ref_type(C->g, n->in[0]);
  const pcgc_ptensor *narrow = rep ? ti : to, *wide = rep ? to : ti;
  int m = value_m(to), src = n->in[0].node, slot = n->in[0].slot;
  int nnode = rep ? src : n->id, nslot = rep ? slot : 0, wnode = rep ? n->id : src, wslot = rep ? 0 : slot;
  int nm_mu = value_m(narrow) > 1, wm_mu = value_m(wide) > 1;
  int64_t P = pcgc_ptensor_pieces(narrow);
  bool to_wide = rep != backward;
  if (backward && !C->needg[src]) return;
  pcgc_fan F;
  if ((C->st = pcgc_fan_init(&F, pcgc_attrs_int(n->attrs, "degree"), C->D, C->err))) return;
  member *ms = malloc((size_t)F.cap * sizeof *ms);
  int *bufs = malloc((size_t)F.cap * sizeof *bufs), *wb = malloc((size_t)F.cap * sizeof *wb);
  if (!ms || !bufs || !wb) C->st = PCGC_ERR_NOMEM;
  int role = backward ? PCGC_BUF_GRAD : PCGC_BUF_VALUE;
  for (int mu = 0; mu < m && !C->st; mu++)
    for (int64_t q = 0; q < P && !C->st; q++) {
      pcgc_fan_at(&F, C->g, C->mp, n, q);
      int Y = F.narrow, ymu = nm_mu ? mu : 0, wmu = wm_mu ? mu : 0;
      C->ctx_node = n->id;
      C->ctx_piece = q;
      C->ctx_micro = mu;
      pcgc_box box;
      pcgc_piece_box(narrow, q, ymu, &box);
      int one = value_buf(C, role, nnode, nslot, q, ymu, Y);
      if (backward) touch(C, Y, one, 3);
      for (int k = 0; k < F.n_dev; k++) ms[k] = (member){F.dev[k], 0, NULL, -1};
      for (int64_t j = 0; j < F.d; j++) {
        int X = F.wdev[j];
        /* a replica on its source's device is the source itself */
        wb[j] = rep && !backward && X == Y ? buf_alias(C, mkkey(X, role, wnode, wslot, F.wide[j], wmu), one)
                                           : value_buf(C, role, wnode, wslot, F.wide[j], wmu, X);
        if (backward) touch(C, X, wb[j], 3);
        ms[F.member[j]].n++;
      }
      /* each member's buffers, in the order of the wide pieces */
      for (int k = 0, at = 0; k < F.n_dev; k++) {
        ms[k].bufs = bufs + at;
        at += ms[k].n;
        ms[k].n = 0;
      }
      for (int64_t j = 0; j < F.d; j++) {
        member *M = &ms[F.member[j]];
        M->bufs[M->n++] = wb[j];
      }
      pcgc_fan_move mv = pcgc_fan_move_of(&F, to_wide, backward);
      if (to_wide) spread(C, &F, mv, one, ms, backward, n->id, q, mu, &box);
      else gather_sum(C, &F, mv, one, ms, backward, n->id, q, mu, vdtype(C, nnode, nslot), &box);
    }
  free(ms);
  free(bufs);
  free(wb);
  pcgc_fan_destroy(&F);
}

/* --------------------------------------------------------------- weights */

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* options.zero: the members of a cell that each hold exactly it split its
 * update (pcgc_zero_shard); member j is the j-th smallest device. */
static bool zero_splits(cg *C, int src, const pcgc_box *cell, const int *grp, int ng) {
  pcgc_box sh;
  if (!C->o.zero || !pcgc_zero_shard(cell, ng, 0, &sh)) return false;
  for (int i = 0; i < ng; i++) {
    const pcgc_box *b = held_box(C, src, grp[i]);
    if (!b || !pcgc_box_equal(b, cell)) return false;
  }
  return true;
}

static void zero_split(cg *C, int src, const pcgc_box *cell, const int *grp, int ng, int gid) {
  int *mem = malloc((size_t)ng * sizeof *mem);
  if (!mem) {
    C->st = PCGC_ERR_NOMEM;
    return;
  }
  memcpy(mem, grp, (size_t)ng * sizeof *mem);
  qsort(mem, (size_t)ng, sizeof *mem, cmp_int);
  for (int j = 0; j < ng; j++) {
    zshard *z = calloc(1, sizeof *z);
    if (!z) {
      if (j == 0) free(mem);
      C->st = PCGC_ERR_NOMEM;
      return;
    }
    z->key = (int64_t)src * C->D + mem[j];
    pcgc_zero_shard(cell, ng, j, &z->box);
    z->gid = gid;
    z->n = ng;
    z->j = j;
    z->gs = -1;
    z->members = mem;
    HASH_ADD(hh, C->zero, key, sizeof z->key, z);
  }
}

/* One cell of weight src's gradient, held by grp[0..ng): a non-blocking
 * all-reduce, waited for in the update phase; with options.zero, where the
 * members split the cell's update, a reduce-scatter of the slabs instead.
 * ZeRO-2 (a step of one micro-batch, whose gradients are whole once their
 * backward is done): the reduce-scatter sums the slab out of the full
 * gradient into a buffer of the slab alone, and the full gradient lives only
 * until the WAIT, which the schedule moves up to the device's next
 * all-reduce or reduce-scatter start (schedule.c, early_waits): each device
 * keeps its slabs and a few full gradients in flight instead of every full
 * gradient. */
typedef struct sync_ctx {
  cg *C;
  int src;
} sync_ctx;

/* A gradient bucket of several cells, once its last is lowered: one
 * non-blocking all-reduce per member over the cells' gradient buffers (in
 * the bucket's order: the memory plan lays them so), one WAIT before the
 * updates. */
static void sync_bucket(cg *C, int b) {
  const int *mem = C->bmem + C->bstart[b];
  int k = C->bstart[b + 1] - C->bstart[b];
  const cg_cell *c0 = &C->cells[mem[0]];
  int gid = group_id(C, c0->grp, c0->ng);
  int *args = malloc((size_t)k * sizeof *args);
  if (!args) {
    C->st = PCGC_ERR_NOMEM;
    return;
  }
  int tk = task_begin(C, 14);
  if (tk >= 0) C->t[tk].priority_now = C->t[tk].allreduce = true;
  for (int i = 0; i < c0->ng && !C->st; i++) {
    int X = c0->grp[i];
    for (int j = 0; j < k; j++) args[j] = source_buf(C, C->cells[mem[j]].src, X, PCGC_BUF_SOURCE_GRAD);
    pcgc_ins I = ins_new(C, PCGC_INS_ALLREDUCE_START);
    I.peer = gid;
    I.tag = C->dv[X].n_requests++;
    emit(C, tk, X, I, args, k, NULL, NULL, 0);
  }
  C->ctx_phase_save = C->phase;
  C->phase = CG_UPD;
  int tw = task_begin(C, 0);
  for (int i = 0; i < c0->ng && !C->st; i++) {
    int X = c0->grp[i];
    for (int j = 0; j < k; j++) args[j] = source_buf(C, C->cells[mem[j]].src, X, PCGC_BUF_SOURCE_GRAD);
    pcgc_ins W = ins_new(C, PCGC_INS_WAIT);
    W.tag = C->dv[X].n_requests - 1;
    emit(C, tw, X, W, args, k, NULL, NULL, 0);
  }
  edge(C, tk, tw);
  C->phase = C->ctx_phase_save;
  free(args);
}

static bool sync_cell(void *ctx, const pcgc_box *cell, const int *grp, int ng) {
  sync_ctx *X = ctx;
  cg *C = X->C;
  int src = X->src;
  int ci = C->cell_first && C->cell_first[src] >= 0 ? C->cell_next[src]++ : -1; /* as find_cells met it */
  if (ci >= 0 && ci < C->n_cells && C->cells[ci].src == src) {
    int b = C->bucket[ci];
    if (C->bstart[b + 1] - C->bstart[b] > 1) { /* a bucket's: lowered with its last cell */
      if (--C->bucket_left[b] == 0) sync_bucket(C, b);
      return !C->st;
    }
  }
  int gid = group_id(C, grp, ng);
  int tk = task_begin(C, 14);
  C->t[tk].priority_now = C->t[tk].allreduce = true;
  bool split = zero_splits(C, src, cell, grp, ng), shard_grad = split && C->o.zero >= 2 && C->M <= 1;
  if (split && !C->st && !zshard_of(C, src, grp[0])) zero_split(C, src, cell, grp, ng, gid); /* ZeRO-3: split already */
  for (int i = 0; i < ng && !C->st; i++) {
    cg_dev *V = &C->dv[grp[i]];
    pcgc_ins I = ins_new(C, split ? PCGC_INS_REDUCESCATTER_START : PCGC_INS_ALLREDUCE_START);
    I.dst = source_buf(C, src, grp[i], PCGC_BUF_SOURCE_GRAD);
    zshard *z = shard_grad ? zshard_of(C, src, grp[i]) : NULL;
    if (z) { /* ZeRO-2: from the full gradient, which lives until the WAIT, into the slab's own buffer */
      V->buf[I.dst].persistent = false;
      I.src = I.dst;
      I.dst = z->gs = buf_add(C, mkkey(grp[i], PCGC_BUF_SOURCE_GRAD, src, 1, -1, 0), PCGC_F32, &z->box, true);
    }
    I.peer = gid;
    I.tag = V->n_requests++;
    emit(C, tk, grp[i], I, NULL, 0, cell, NULL, 0);
  }
  C->ctx_phase_save = C->phase;
  C->phase = CG_UPD;
  int tw = task_begin(C, 0);
  for (int i = 0; i < ng && !C->st; i++) {
    cg_dev *V = &C->dv[grp[i]];
    pcgc_ins W = ins_new(C, PCGC_INS_WAIT);
    W.dst = source_buf(C, src, grp[i], PCGC_BUF_SOURCE_GRAD);
    zshard *z = shard_grad ? zshard_of(C, src, grp[i]) : NULL;
    if (z) { /* as its START names them */
      W.src = W.dst;
      W.dst = z->gs;
    }
    W.tag = V->n_requests - 1;
    emit(C, tw, grp[i], W, NULL, 0, cell, NULL, 0);
  }
  edge(C, tk, tw);
  C->phase = C->ctx_phase_save;
  return !C->st;
}

/* Calls cell(ctx, ...) for each cell of weight src its holders share
 * (pcgc_weight_sync_cells); with `grads`, zeroes each holder's gradient first. */
static void weight_cells(cg *C, int src, bool grads, bool (*cell)(void *, const pcgc_box *, const int *, int)) {
  const pcgc_ptensor *t = &C->g->nodes[src].out[0];
  int *hold = malloc((size_t)C->D * sizeof *hold), nh = 0;
  pcgc_box *boxes = malloc((size_t)C->D * sizeof *boxes);
  if (!hold || !boxes) {
    free(hold);
    free(boxes);
    C->st = PCGC_ERR_NOMEM;
    return;
  }
  for (int X = 0; X < C->D; X++) {
    const pcgc_box *b = held_box(C, src, X);
    if (!b) continue;
    hold[nh] = X;
    boxes[nh++] = *b;
    if (grads) touch(C, X, source_buf(C, src, X, PCGC_BUF_SOURCE_GRAD), 3);
  }
  sync_ctx ctx = {C, src};
  bool oom;
  pcgc_weight_sync_cells(t->rank, nh, hold, boxes, 2, cell, &ctx, &oom);
  if (oom) C->st = PCGC_ERR_NOMEM;
  free(hold);
  free(boxes);
}

/* The devices that keep a box of weight `src` all-reduce each cell they
 * share, non-blocking (a bucket's cells together). */
static void lower_weight_sync(cg *C, int src) { weight_cells(C, src, true, sync_cell); }

/* find_cells: each cell as weight_cells meets it, whether it may share a
 * bucket (every member holds it whole, ZeRO does not split it). */
static bool note_cell(void *ctx, const pcgc_box *cell, const int *grp, int ng) {
  sync_ctx *X = ctx;
  cg *C = X->C;
  GROW(C, C->cells, C->cap_cells, C->n_cells + 1);
  int *g = C->st ? NULL : malloc((size_t)ng * sizeof *g);
  if (!g) {
    C->st = PCGC_ERR_NOMEM;
    return false;
  }
  memcpy(g, grp, (size_t)ng * sizeof *g);
  bool whole = !zero_splits(C, X->src, cell, grp, ng);
  for (int i = 0; i < ng && whole; i++) {
    const pcgc_box *b = held_box(C, X->src, grp[i]);
    whole = b && pcgc_box_equal(b, cell);
  }
  C->cells[C->n_cells++] = (cg_cell){X->src, ng, g, *cell, (double)pcgc_box_elems(cell) * 4, whole};
  return true;
}

/* Every weight cell its holders all-reduce, and its gradient bucket
 * (pcgc_grad_buckets: the simulator's own), before backward is lowered. */
static void find_cells(cg *C) {
  int n = C->g->n_nodes;
  C->cell_first = malloc((size_t)(n ? n : 1) * sizeof *C->cell_first);
  C->cell_next = malloc((size_t)(n ? n : 1) * sizeof *C->cell_next);
  int *key = malloc((size_t)(n ? n : 1) * sizeof *key);
  if (!C->cell_first || !C->cell_next || !key) {
    free(key);
    C->st = PCGC_ERR_NOMEM;
    return;
  }
  for (int i = 0; i < n; i++) C->cell_first[i] = C->cell_next[i] = -1;
  for (int k = 0; k < n && !C->st; k++) {
    const pcgc_node *w = &C->g->nodes[C->order[k]];
    if (w->kind != PCGC_OP_WEIGHT || !C->needg[w->id]) continue;
    C->cell_first[w->id] = C->cell_next[w->id] = (int)C->n_cells;
    weight_cells(C, w->id, false, note_cell);
  }
  pcgc_weight_grad_order(C->g, C->order, key);
  pcgc_grad_cell *gc = malloc((size_t)(C->n_cells ? C->n_cells : 1) * sizeof *gc);
  C->bucket = malloc((size_t)(C->n_cells ? C->n_cells : 1) * sizeof *C->bucket);
  if (!gc || !C->bucket || C->st) {
    free(key);
    free(gc);
    if (!C->st) C->st = PCGC_ERR_NOMEM;
    return;
  }
  for (int64_t i = 0; i < C->n_cells; i++) {
    const cg_cell *c = &C->cells[i];
    gc[i] = (pcgc_grad_cell){c->src, key[c->src], c->ng, c->grp, c->bytes, c->bucketable};
  }
  int nb = pcgc_grad_buckets((int)C->n_cells, gc, C->bucket);
  free(key);
  free(gc);
  C->bstart = malloc(((size_t)(nb > 0 ? nb : 0) + 1) * sizeof *C->bstart);
  C->bmem = malloc((size_t)(C->n_cells ? C->n_cells : 1) * sizeof *C->bmem);
  C->bucket_left = malloc((size_t)(nb > 0 ? nb : 1) * sizeof *C->bucket_left);
  if (nb < 0 || !C->bstart || !C->bmem || !C->bucket_left ||
      !pcgc_grad_bucket_cells((int)C->n_cells, C->bucket, nb, C->bstart, C->bmem)) {
    C->st = PCGC_ERR_NOMEM;
    return;
  }
  C->n_buckets = nb;
  for (int b = 0; b < nb; b++) C->bucket_left[b] = C->bstart[b + 1] - C->bstart[b];
}

/* ZeRO-3: the cells each weight's holders split, decided before forward
 * reads them (sync_cell finds them made). */
static bool shard_cell(void *ctx, const pcgc_box *cell, const int *grp, int ng) {
  sync_ctx *X = ctx;
  if (zero_splits(X->C, X->src, cell, grp, ng) && !X->C->st)
    zero_split(X->C, X->src, cell, grp, ng, group_id(X->C, grp, ng));
  return !X->C->st;
}

static void zero3_shards(cg *C) {
  for (int i = 0; i < C->g->n_nodes && !C->st; i++)
    if (C->g->nodes[i].kind == PCGC_OP_WEIGHT && C->needg[i]) weight_cells(C, i, false, shard_cell);
}

/* The bucket of several cells that device X's cell of weight src is in (-1: none). */
static int bucket_of(const cg *C, int src, int X) {
  if (!C->cell_first || C->cell_first[src] < 0) return -1;
  for (int64_t i = C->cell_first[src]; i < C->n_cells && C->cells[i].src == src; i++) {
    int b = C->bucket[i];
    if (C->bstart[b + 1] - C->bstart[b] < 2) continue;
    for (int j = 0; j < C->cells[i].ng; j++)
      if (C->cells[i].grp[j] == X) return b;
  }
  return -1;
}

/* A bucket's weights updated by one step on each member: args their
 * weights, gradients, m and v, in the bucket's order (the memory plan lays
 * each list back to back alike). */
static void update_bucket(cg *C, int b) {
  const int *mem = C->bmem + C->bstart[b];
  int k = C->bstart[b + 1] - C->bstart[b];
  const cg_cell *c0 = &C->cells[mem[0]];
  int *a = malloc(4 * (size_t)k * sizeof *a);
  if (!a) {
    C->st = PCGC_ERR_NOMEM;
    return;
  }
  for (int i = 0; i < c0->ng && !C->st; i++) {
    int X = c0->grp[i];
    for (int j = 0; j < k; j++) {
      int src = C->cells[mem[j]].src;
      a[j] = source_buf(C, src, X, PCGC_BUF_SOURCE);
      a[k + j] = source_buf(C, src, X, PCGC_BUF_SOURCE_GRAD);
      a[2 * k + j] = C->o.optimizer == PCGC_OPTIM_SGD ? -1 : source_buf(C, src, X, PCGC_BUF_OPT_M);
      a[3 * k + j] = C->o.optimizer != PCGC_OPTIM_ADAM ? -1 : source_buf(C, src, X, PCGC_BUF_OPT_V);
    }
    int t = task_begin(C, 4);
    if (t >= 0) C->t[t].compute = true;
    pcgc_ins I = ins_new(C, PCGC_INS_UPDATE);
    emit(C, t, X, I, a, 4 * k, NULL, NULL, 0);
  }
  free(a);
}

static void lower_updates(cg *C) {
  C->phase = CG_UPD;
  for (int k = 0; k < C->g->n_nodes && !C->st; k++) {
    const pcgc_node *n = &C->g->nodes[C->order[k]];
    if (n->kind != PCGC_OP_WEIGHT || !C->needg[n->id]) continue;
    for (int X = 0; X < C->D && !C->st; X++) {
      if (!held_box(C, n->id, X)) continue;
      int b = bucket_of(C, n->id, X);
      if (b >= 0) { /* with its bucket's, at the first of them */
        if (C->bucket_left[b] > 0) {
          C->st = pcgc_error_set(C->err, PCGC_ERR_GRAPH, "codegen: the gradient bucket of weight '%s' was never "
                                 "all-reduced (internal error)", n->name);
          return;
        }
        if (C->bucket_left[b] == 0) {
          C->ctx_node = n->id;
          C->ctx_piece = -1;
          C->ctx_micro = 0;
          C->bucket_left[b] = -1;
          update_bucket(C, b);
        }
        continue;
      }
      C->ctx_node = n->id;
      C->ctx_piece = -1;
      C->ctx_micro = 0;
      int w = source_buf(C, n->id, X, PCGC_BUF_SOURCE);
      int gw = source_buf(C, n->id, X, PCGC_BUF_SOURCE_GRAD);
      zshard *z = C->zero ? zshard_of(C, n->id, X) : NULL;
      int a[2] = {-1, -1};
      for (int k = 0; k < 2; k++) {
        int role = k ? PCGC_BUF_OPT_V : PCGC_BUF_OPT_M;
        if (k ? C->o.optimizer != PCGC_OPTIM_ADAM : C->o.optimizer == PCGC_OPTIM_SGD) continue;
        /* sharded: state for the slab alone */
        a[k] = z ? buf_add(C, mkkey(X, role, n->id, 0, -1, 0), PCGC_F32, &z->box, true) : source_buf(C, n->id, X, role);
      }
      int t = task_begin(C, 4);
      C->t[t].compute = true;
      pcgc_ins I = ins_new(C, PCGC_INS_UPDATE);
      I.dst = w;
      I.src = z && z->gs >= 0 ? z->gs : gw; /* ZeRO-2: the slab's own gradient buffer */
      emit(C, t, X, I, a, 2, z ? &z->box : NULL, a, 2);
    }
    /* sharded cells: every member's updated slab to the others (ZeRO-3: the next reads gather it) */
    for (int X = 0; C->zero && !zero3(C) && X < C->D && !C->st; X++) {
      zshard *z = zshard_of(C, n->id, X);
      if (!z || z->j != 0) continue;
      int t = task_begin(C, 5);
      for (int j = 0; j < z->n; j++) {
        pcgc_ins I = ins_new(C, PCGC_INS_ALLGATHER);
        I.dst = source_buf(C, n->id, z->members[j], PCGC_BUF_SOURCE);
        I.peer = z->gid;
        emit(C, t, z->members[j], I, NULL, 0, NULL, NULL, 0);
      }
    }
  }
}

/* ---------------------------------------------------------------- driver */

static pcgc_status analyse(cg *C) {
  const pcgc_graph *g = C->g;
  int n = g->n_nodes;
  C->order = malloc((size_t)(n ? n : 1) * sizeof *C->order);
  C->topo = malloc((size_t)(n ? n : 1) * sizeof *C->topo);
  C->resident = calloc((size_t)(n ? n : 1), sizeof *C->resident);
  C->needg = calloc((size_t)(n ? n : 1), sizeof *C->needg);
  C->reach = calloc((size_t)(n ? n : 1), sizeof *C->reach);
  C->pipe_pos = calloc((size_t)(n ? n : 1), sizeof *C->pipe_pos);
  C->gkeys = calloc((size_t)(2 * n + 1), sizeof *C->gkeys);
  C->stage = malloc((size_t)C->D * sizeof *C->stage);
  int *first = malloc(2 * (size_t)C->D * sizeof *first), *last = first ? first + C->D : NULL;
  if (!C->order || !C->topo || !C->resident || !C->needg || !C->reach || !C->pipe_pos || !C->gkeys || !C->stage ||
      !first) {
    free(first);
    return PCGC_ERR_NOMEM;
  }
  pcgc_status st = pcgc_graph_topo_order(g, C->order, C->err);
  if (st) {
    free(first);
    return st;
  }
  for (int k = 0; k < n; k++) C->topo[C->order[k]] = k;
  pcgc_resident_nodes(g, C->order, C->resident);
  C->loss = -1;
  for (int k = 0; k < n; k++) {
    const pcgc_node *x = &g->nodes[C->order[k]];
    if (!x->typed) {
      free(first);
      return pcgc_error_set(C->err, PCGC_ERR_TYPE, "%s '%s' has no type: infer the graph first",
                            pcgc_op_name(x->kind), x->name);
    }
    if (pcgc_op_class_of(x->kind) == PCGC_CLASS_LOSS) {
      if (C->loss >= 0) {
        free(first);
        return pcgc_error_set(C->err, PCGC_ERR_INVALID, "the graph has two losses, '%s' and '%s'; a plan needs one",
                              g->nodes[C->loss].name, x->name);
      }
      C->loss = x->id;
    }
    bool ng = x->kind == PCGC_OP_WEIGHT, after = false;
    for (int i = 0; i < x->n_in; i++) {
      ng |= C->needg[x->in[i].node];
      after |= C->pipe_pos[x->in[i].node] != 0;
    }
    C->needg[x->id] = ng && pcgc_dtype_is_float(x->out[0].dtype);
    bool piped = value_m(&x->out[0]) > 1;
    C->pipe_pos[x->id] = (int8_t)(piped ? 1 : after ? 2 : 0);
    if (value_m(&x->out[0]) > C->M) C->M = value_m(&x->out[0]);
  }
  if (C->loss < 0) {
    free(first);
    pcgc_error_set(C->err, PCGC_ERR_INVALID, "the graph has no loss; a training plan needs one");
    pcgc_error_hint(C->err, "end the model with softmax_cross_entropy(...) or mse(...)");
    return PCGC_ERR_INVALID;
  }
  C->reach[C->loss] = true;
  for (int k = n - 1; k >= 0; k--) {
    const pcgc_node *x = &g->nodes[C->order[k]];
    if (!C->reach[x->id]) continue;
    for (int i = 0; i < x->n_in; i++) C->reach[x->in[i].node] = true;
  }
  for (int k = 0; k < n; k++) C->needg[k] = C->needg[k] && C->reach[k];
  /* pipeline stages: the span of pipelined ops each device runs */
  for (int d = 0; d < C->D; d++) first[d] = INT_MAX;
  for (int k = 0; k < n; k++) {
    const pcgc_node *x = &g->nodes[C->order[k]];
    if (C->resident[x->id] || value_m(&x->out[0]) <= 1) continue;
    if (pcgc_op_class_of(x->kind) == PCGC_CLASS_PARALLEL) continue;
    int64_t P = pcgc_ptensor_pieces(&x->out[0]);
    for (int64_t p = 0; p < P; p++) {
      int X = pcgc__cg_home(C, x->id, p);
      if (first[X] == INT_MAX) first[X] = k;
      last[X] = k;
    }
  }
  /* a device's stage: its span of pipelined ops among the others' (the
   * simulator's rule: pcgc_pipeline_stages) */
  int *tmp = malloc((size_t)C->D * sizeof *tmp);
  if (!tmp) {
    free(first);
    return PCGC_ERR_NOMEM;
  }
  for (int d = 0; d < C->D; d++)
    if (first[d] == INT_MAX) first[d] = last[d] = -1;
  C->stages = pcgc_pipeline_stages(C->D, first, last, C->stage, tmp);
  free(tmp);
  free(first);
  if (C->o.recompute) { /* the simulator's choice, less what is not one FORWARD per piece */
    if (!(C->recomp = calloc((size_t)(n ? n : 1), sizeof *C->recomp))) return PCGC_ERR_NOMEM;
    if ((st = pcgc_recomputed_nodes(g, C->recomp, C->err)) != PCGC_OK) return st;
    for (int k = 0; k < n; k++) {
      const pcgc_node *x = &g->nodes[k];
      bool one_micro = false; /* its micro-batches are its outputs' */
      for (int j = 0; j < x->n_out; j++) one_micro |= value_m(&x->out[j]) != op_micro(C, x);
      if (C->resident[k] || pcgc_bn_synced(x) || one_micro || !C->reach[k]) C->recomp[k] = false;
    }
  }
  return PCGC_OK;
}

/* The resident boxes each device keeps: what its kernels read. */
static void find_boxes(cg *C) {
  const pcgc_graph *g = C->g;
  int64_t inp[PCGC_VARIADIC];
  for (int k = 0; k < g->n_nodes && !C->st; k++) {
    const pcgc_node *n = &g->nodes[C->order[k]];
    if (C->resident[n->id] || pcgc_op_class_of(n->kind) == PCGC_CLASS_PARALLEL) continue;
    bool any = false;
    for (int i = 0; i < n->n_in; i++) any |= C->resident[n->in[i].node];
    if (!any) continue;
    int64_t P = pcgc_ptensor_pieces(&n->out[0]);
    int m = op_micro(C, n);
    for (int64_t p = 0; p < P && !C->st; p++) {
      if ((C->st = piece_inputs(C, n, p, inp))) return;
      int X = pcgc__cg_home(C, n->id, p);
      for (int i = 0; i < n->n_in; i++) {
        if (!C->resident[n->in[i].node]) continue;
        const pcgc_ptensor *t = pcgc_graph_ref_type(g, n->in[i]);
        for (int mu = 0; mu < m; mu++) {
          pcgc_box b;
          pcgc_piece_box(t, inp[i], in_mu(C, n->in[i], mu), &b);
          need_box(C, pcgc_source_of(C->g, n->in[i].node), X, &b);
          if (value_m(t) <= 1) break;
        }
      }
    }
  }
}

/* 1F1B: micro-batch i's forward on a device of stage k waits for micro-batch
 * i-(s-k)'s backward there: a join per (device, i) that every pipelined
 * backward kernel of micro-batch i-w on the device precedes and every
 * forward kernel of micro-batch i follows. */
static void one_f_one_b(cg *C) {
  if (C->o.schedule != PCGC_SCHEDULE_1F1B || C->M <= 1) return;
  int M = C->M;
  int64_t nt = C->nt;
  int *join = malloc((size_t)C->D * (size_t)M * sizeof *join);
  if (!join) {
    C->st = PCGC_ERR_NOMEM;
    return;
  }
  C->phase = CG_FWD;
  C->ctx_node = -1;
  for (int d = 0; d < C->D; d++)
    for (int i = 0; i < M; i++) {
      int w = C->stage[d] < 0 ? M : C->stages - C->stage[d];
      join[d * M + i] = -1;
      if (i < w || C->st) continue;
      join[d * M + i] = task_begin(C, 0);
      if (join[d * M + i] >= 0) C->t[join[d * M + i]].slot = 0;
    }
  for (int64_t t = 0; t < nt && !C->st; t++) {
    const cg_task *T = &C->t[t];
    if (!T->compute || T->n_em != 1 || T->node < 0 || C->pipe_pos[T->node] != 1) continue;
    int d = C->em[T->first_em].dev;
    if (C->stage[d] < 0) continue;
    int w = C->stages - C->stage[d];
    if (T->phase == CG_BWD && T->micro + w < M) edge(C, (int)t, join[d * M + T->micro + w]);
    if (T->phase == CG_FWD && T->micro < M) edge(C, join[d * M + T->micro], (int)t);
  }
  free(join);
}

static void free_cg(cg *C) {
  free(C->bufs);
  hbox *h, *ht;
  HASH_ITER(hh, C->boxes, h, ht) {
    HASH_DEL(C->boxes, h);
    free(h);
  }
  zshard *z, *zt;
  HASH_ITER(hh, C->zero, z, zt) {
    HASH_DEL(C->zero, z);
    if (z->j == 0) free(z->members);
    free(z);
  }
  cg_pair *pp, *pt;
  HASH_ITER(hh, C->pairs, pp, pt) {
    HASH_DEL(C->pairs, pp);
    free(pp->recv_at);
    free(pp);
  }
  cg_group *gg, *gt;
  HASH_ITER(hh, C->groups, gg, gt) {
    HASH_DEL(C->groups, gg);
    free(gg->devs);
    free(gg);
  }
  if (C->dv)
    for (int d = 0; d < C->D; d++) {
      cg_dev *V = &C->dv[d];
      for (int64_t b = 0; b < V->n_buf; b++) free(V->acc[b].readers);
      free(V->acc);
      free(V->buf);
      free(V->ins);
      free(V->args);
      free(V->boxes);
      free(V->box_slot);
    }
  free(C->dv);
  free(C->t);
  free(C->e);
  free(C->em);
  for (int64_t i = 0; i < C->n_cells; i++) free(C->cells[i].grp);
  free(C->cells);
  free(C->cell_first);
  free(C->cell_next);
  free(C->bucket);
  free(C->bstart);
  free(C->bmem);
  free(C->bucket_left);
  free(C->order);
  free(C->topo);
  free(C->resident);
  free(C->needg);
  free(C->reach);
  for (int i = 0; C->gkeys && i < 2 * C->g->n_nodes; i++) free(C->gkeys[i].k);
  free(C->gkeys);
  free(C->recomp);
  free(C->pipe_pos);
  free(C->stage);
  free(C->tf);
  free(C->tb);
}

void pcgc_codegen_options_default(pcgc_codegen_options *o) {
  memset(o, 0, sizeof *o);
  o->schedule = PCGC_SCHEDULE_GPIPE;
  o->optimizer = PCGC_OPTIM_ADAM;
  o->threads = pcgc_threads_default();
  o->sends_in_place = true;
  o->hoist_work = true;
}

pcgc_status pcgc_codegen(const pcgc_graph *g, const pcgc_mapping *mp, int n_devices, const pcgc_codegen_options *o,
                         pcgc_program **out, pcgc_error *err) {
  *out = NULL;
  if (!g || !mp || n_devices < 1 || mp->n_nodes != g->n_nodes)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "codegen needs a graph, one view per node and at least one device");
  for (int i = 0; i < g->n_nodes; i++) {
    pcgc_view v = mp->view[i];
    if (v.start < 0 || v.start >= n_devices || v.stride < 0)
      return pcgc_error_set(err, PCGC_ERR_INVALID, "node '%s' has view (start %d, stride %d) outside %d devices",
                            g->nodes[i].name, v.start, v.stride, n_devices);
  }
  cg C;
  memset(&C, 0, sizeof C);
  C.g = g;
  C.mp = mp;
  C.D = n_devices;
  C.err = err;
  C.M = 1;
  if (o) C.o = *o;
  else pcgc_codegen_options_default(&C.o);
  C.ctx_node = -1;
  C.zdev = -1;
  C.dv = calloc((size_t)n_devices, sizeof *C.dv);
  pcgc_status st = C.dv ? analyse(&C) : PCGC_ERR_NOMEM;
  if (!st) st = pipeline_slots(&C);
  if (!st) {
    find_boxes(&C);
    if (zero3(&C) && !C.st) zero3_shards(&C);
    if (!C.st) find_cells(&C);
    st = C.st;
  }
  /* forward */
  C.phase = CG_FWD;
  for (int k = 0; k < g->n_nodes && !st && !C.st; k++) {
    const pcgc_node *n = &g->nodes[C.order[k]];
    if (C.resident[n->id]) continue;
    pcgc_op_class cls = pcgc_op_class_of(n->kind);
    if (cls == PCGC_CLASS_PARALLEL) {
      if (n->kind == PCGC_OP_REPLICATE || n->kind == PCGC_OP_REDUCE) lower_fan(&C, n, false);
      else lower_relayout(&C, n, false);
    } else if (pcgc_bn_synced(n)) {
      lower_bn(&C, n, false);
    } else {
      lower_ordinary_fwd(&C, n);
    }
  }
  /* backward, then each weight's gradient synchronisation as soon as its last reader is done */
  C.phase = CG_BWD;
  for (int k = g->n_nodes - 1; k >= 0 && !st && !C.st; k--) {
    const pcgc_node *n = &g->nodes[C.order[k]];
    C.ctx_node = n->id;
    C.ctx_piece = -1;
    C.ctx_micro = 0;
    if (!C.reach[n->id]) continue;
    pcgc_op_class cls = pcgc_op_class_of(n->kind);
    if (C.resident[n->id]) {
      /* views' gradients into the source box's */
      int src = pcgc_source_of(C.g, n->id);
      cg_keys *L = grad_keys(&C, n->id, false);
      for (int64_t i = 0, S = -2, X = -1, n0 = L->n; i < n0 && C.needg[n->id]; i++) {
        bkey k = L->k[i];
        int vg = buf_find(&C, k);
        if (k.dev != X) X = k.dev, S = -2;
        if (S == -2) S = source_buf(&C, src, k.dev, PCGC_BUF_SOURCE_GRAD);
        touch(&C, k.dev, (int)S, 3);
        t_copy(&C, k.dev, (int)S, vg, NULL, true, 6);
      }
      if (n->kind == PCGC_OP_WEIGHT && C.needg[n->id]) lower_weight_sync(&C, n->id);
      continue;
    }
    /* staged copies of this node's pieces: their gradients go home first */
    if (C.needg[n->id]) {
      cg_keys *L = grad_keys(&C, n->id, true);
      for (int64_t i = 0, n0 = L->n; i < n0; i++) {
        bkey k = L->k[i];
        int sg = buf_find(&C, k), X = k.dev;
        int Y = pcgc__cg_home(&C, n->id, k.piece);
        int gb = value_buf(&C, PCGC_BUF_GRAD, n->id, k.slot, k.piece, k.micro, Y);
        C.ctx_piece = k.piece;
        C.ctx_micro = k.micro;
        touch(&C, Y, gb, 3);
        pcgc_box b;
        pcgc_plan_buf_box(&C.dv[X].buf[sg], &b);
        t_sendrecv(&C, X, sg, Y, gb, &b, true);
      }
    }
    if (cls == PCGC_CLASS_PARALLEL) {
      if (!C.needg[n->id]) continue;
      if (n->kind == PCGC_OP_REPLICATE || n->kind == PCGC_OP_REDUCE) lower_fan(&C, n, true);
      else lower_relayout(&C, n, true);
    } else {
      bool any = false;
      for (int i = 0; i < n->n_in; i++) any |= C.needg[n->in[i].node];
      if (!any) continue;
      if (pcgc_bn_synced(n)) lower_bn(&C, n, true);
      else lower_ordinary_bwd(&C, n);
    }
  }
  if (!st && !C.st) lower_updates(&C);
  if (!st && !C.st) one_f_one_b(&C);
  if (!st) st = C.st;
  if (st && err && !err->message[0]) pcgc_error_set(err, st, "codegen failed (%s)", st == PCGC_ERR_NOMEM ? "out of memory" : "internal error");
  pcgc_program *p = NULL;
  if (!st) st = pcgc__cg_schedule(&C, &p);
  free_cg(&C);
  if (st) {
    pcgc_program_free(p);
    return st;
  }
  p->recompute = C.o.recompute;
  p->zero = C.o.zero;
  p->bf16 = C.o.bf16;
  p->recomputed_pieces = C.n_recomputed;
  *out = p;
  return PCGC_OK;
}
