/*
 * schedule.c — orders the task graph lower.c built into one stream per
 * device, plans each device's memory, and prints programs.
 *
 * Order: one global list schedule (Kahn's algorithm with a min-heap on the
 * priority: gradient all-reduces and sends as soon as ready, then micro-batch slot,
 * then (options.order 1) the longest path of tasks to the step's end, then
 * topological position, then creation order). Each device's stream is
 * its projection of that global order, which is what makes a plan
 * deadlock-free (codegen.h); a RECV then moves down past the device's own
 * sends (sink_recvs), which keeps it so. The step's last slot, each weight's WAIT and
 * UPDATE, goes in the order the all-reduces started (each task after the
 * latest all-reduce it depends on: `after`), so a device updates a weight
 * as soon as its gradient is summed instead of waiting, in weight order,
 * for one whose all-reduce started last; updates that wait for none first.
 *
 * Memory: each buffer is live from the first to the last instruction of the
 * step that uses it; persistent buffers (weights, gradients, state, data)
 * always. Greedy first fit, largest first, at 64-byte alignment.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "codegen_internal.h"

typedef struct hitem {
  int64_t a, b;
  int id;
} hitem;

static bool hless(const hitem *x, const hitem *y) {
  if (x->a != y->a) return x->a < y->a;
  if (x->b != y->b) return x->b < y->b;
  return x->id < y->id;
}

static void hpush(hitem *h, int64_t *n, hitem x) {
  int64_t i = (*n)++;
  h[i] = x;
  while (i > 0) {
    int64_t p = (i - 1) / 2;
    if (!hless(&h[i], &h[p])) break;
    hitem t = h[i];
    h[i] = h[p];
    h[p] = t;
    i = p;
  }
}

static hitem hpop(hitem *h, int64_t *n) {
  hitem top = h[0];
  h[0] = h[--(*n)];
  int64_t i = 0;
  for (;;) {
    int64_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < *n && hless(&h[l], &h[m])) m = l;
    if (r < *n && hless(&h[r], &h[m])) m = r;
    if (m == i) break;
    hitem t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
  return top;
}

static hitem key_of(const cg *C, int t, const int64_t *after, const int32_t *lvl) {
  const cg_task *T = &C->t[t];
  hitem h;
  h.a = T->priority_now ? LLONG_MIN : T->slot;
  h.b = T->phase == CG_UPD ? after[t] << 32 | T->order
        : lvl ? (int64_t)(INT32_MAX - lvl[t]) << 32 | T->order : T->order;
  h.id = t;
  return h;
}

/* options.order 1: per task, the longest path of tasks from it to the
 * step's end (a kernel 4, any other task 1), over the edges succ[off[t] ..
 * off[t + 1]) with in-degrees indeg (not changed); NULL when out of memory. */
static int32_t *longest_paths(const cg *C, const int64_t *off, const int *succ, const int *indeg) {
  int64_t nt = C->nt, qn = 0;
  int32_t *lvl = calloc((size_t)(nt ? nt : 1), sizeof *lvl);
  int *q = malloc((size_t)(nt ? nt : 1) * sizeof *q), *deg = malloc((size_t)(nt ? nt : 1) * sizeof *deg);
  if (!lvl || !q || !deg) {
    free(lvl);
    lvl = NULL;
  } else { /* a topological order, then the paths from its end backwards */
    memcpy(deg, indeg, (size_t)nt * sizeof *deg);
    for (int64_t t = 0; t < nt; t++)
      if (!deg[t]) q[qn++] = (int)t;
    for (int64_t i = 0; i < qn; i++)
      for (int64_t k = off[q[i]]; k < off[q[i] + 1]; k++)
        if (--deg[succ[k]] == 0) q[qn++] = succ[k];
    for (int64_t i = qn - 1; i >= 0; i--) {
      int32_t m = 0;
      for (int64_t k = off[q[i]]; k < off[q[i] + 1]; k++)
        if (lvl[succ[k]] > m) m = lvl[succ[k]];
      lvl[q[i]] = m + (C->t[q[i]].compute ? 4 : 1);
    }
  }
  free(q);
  free(deg);
  return lvl;
}

static int64_t align64(int64_t x) { return (x + 63) & ~(int64_t)63; }

/* Every buffer an instruction touches. */
static int touched(const pcgc_ins *I, const int *args, int *out) {
  int rd[PCGC_VARIADIC * 4 + 8], wr[PCGC_VARIADIC * 2 + 8], nr, nw, n = 0;
  pcgc__cg_ins_access(I, args, rd, &nr, wr, &nw);
  for (int i = 0; i < nr; i++) out[n++] = rd[i];
  for (int i = 0; i < nw; i++) out[n++] = wr[i];
  for (int i = 0; i < I->n_args; i++)
    if (args[I->args + i] >= 0) out[n++] = args[I->args + i];
  return n;
}

/* Whether an instruction of kind k runs a kernel of its node (forward,
 * backward, a batch norm's halves). */
static bool is_kernel(int k) {
  return k == PCGC_INS_FORWARD || k == PCGC_INS_BACKWARD || k == PCGC_INS_BN_STATS || k == PCGC_INS_BN_APPLY ||
         k == PCGC_INS_BN_BWD_STATS || k == PCGC_INS_BN_BWD_APPLY;
}

typedef struct placed {
  int64_t lo, hi;   /* bytes */
  int first, last;  /* instructions */
} placed;

static int by_lo(const void *a, const void *b) {
  int64_t x = ((const placed *)a)->lo, y = ((const placed *)b)->lo;
  return (x > y) - (x < y);
}

/* Each buffer's lifetime: the first and last instruction that touches it. */
static void lifetimes(pcgc_device_program *P) {
  int tb[PCGC_VARIADIC * 8 + 32];
  for (int i = 0; i < P->n_ins; i++) {
    int k = touched(&P->ins[i], P->args, tb);
    for (int j = 0; j < k; j++) {
      pcgc_plan_buf *B = &P->buf[tb[j]];
      if (B->first < 0) B->first = i;
      B->last = i;
    }
  }
  for (int i = 0; i < P->n_ins; i++) /* a loss: read once the step is done */
    if (P->ins[i].kind == PCGC_INS_LOSS && P->ins[i].src >= 0) P->buf[P->ins[i].src].last = P->n_ins - 1;
  for (int i = 0, k = 0; P->send_done && i < P->n_ins; i++) { /* one sent straight from it: until it completes */
    const pcgc_ins *I = &P->ins[i];
    if (I->kind != PCGC_INS_SEND || k >= P->n_sends) continue;
    int done = P->send_done[k++];
    pcgc_plan_buf *B = &P->buf[I->src];
    if (done >= 0 && done - 1 > B->last) B->last = done - 1 < P->n_ins ? done - 1 : P->n_ins - 1;
  }
  for (int b = 0; b < P->n_buf; b++) { /* a buffer lives while its views do (alias_copies) */
    const pcgc_plan_buf *V = &P->buf[b];
    if (V->alias < 0 || V->first < 0) continue;
    pcgc_plan_buf *B = &P->buf[V->alias];
    if (B->first < 0 || V->first < B->first) B->first = V->first;
    if (V->last > B->last) B->last = V->last;
  }
}

/* What plan_memory reads of a device's buffers: sizes, persistence and
 * lifetimes. Devices alike in all of it (the data-parallel copies of a
 * strategy) get the same placement, computed once. */
static bool is_bucket(const pcgc_ins *I) {
  return (I->kind == PCGC_INS_ALLREDUCE_START || I->kind == PCGC_INS_WAIT || I->kind == PCGC_INS_UPDATE) &&
         I->dst < 0 && I->n_args > 0 && (I->kind != PCGC_INS_UPDATE || I->n_args % 4 == 0);
}

/* Buffers b[0..n) lying back to back (64-byte aligned) as persistent f32
 * buffers: the offset of the first and the span's bytes. */
static bool list_span(const pcgc_device_program *P, const int *b, int n, int64_t *at, int64_t *bytes) {
  int64_t a = 0, end = 0;
  for (int j = 0; j < n; j++) {
    if (b[j] < 0 || b[j] >= P->n_buf) return false;
    const pcgc_plan_buf *B = &P->buf[b[j]];
    if (!B->persistent || B->dtype != PCGC_F32 || (j > 0 && B->addr != end)) return false;
    if (j == 0) a = B->addr;
    end = B->addr + (j == n - 1 ? B->bytes : align64(B->bytes));
  }
  *at = a;
  *bytes = end - a;
  return n > 0;
}

/* plan_memory: the buffers of list b[0..n) not yet placed, back to back from *off. */
static void place_list(pcgc_device_program *P, const int *b, int n, int64_t *off) {
  for (int j = 0; j < n; j++) {
    if (b[j] < 0) continue;
    pcgc_plan_buf *B = &P->buf[b[j]];
    if (!B->persistent || B->addr >= 0) continue; /* not a bucket's: the spans' checks say so */
    B->addr = *off;
    *off += align64(B->bytes);
  }
}

/* ... and the buffers of its gradient buckets, which plan_memory lays back
 * to back in the order of their starts. */
static uint64_t layout_hash(const pcgc_device_program *P) {
  XXH3_state_t *s = XXH3_createState();
  if (!s) return 0;
  XXH3_64bits_reset(s);
  XXH3_64bits_update(s, &P->n_ins, sizeof P->n_ins);
  for (int b = 0; b < P->n_buf; b++) {
    const pcgc_plan_buf *B = &P->buf[b];
    int64_t v[6] = {B->bytes, B->persistent, B->first, B->last, B->alias, B->alias_at};
    XXH3_64bits_update(s, v, sizeof v);
  }
  for (int i = 0; i < P->n_ins; i++)
    if (P->ins[i].kind != PCGC_INS_WAIT && is_bucket(&P->ins[i]))
      XXH3_64bits_update(s, P->args + P->ins[i].args, (size_t)P->ins[i].n_args * sizeof *P->args);
  uint64_t h = XXH3_64bits_digest(s);
  XXH3_freeState(s);
  return h;
}

static bool same_layout(const pcgc_device_program *a, const pcgc_device_program *b) {
  if (a->n_ins != b->n_ins || a->n_buf != b->n_buf) return false;
  for (int i = 0; i < a->n_buf; i++) {
    const pcgc_plan_buf *x = &a->buf[i], *y = &b->buf[i];
    if (x->bytes != y->bytes || x->persistent != y->persistent || x->first != y->first || x->last != y->last ||
        x->alias != y->alias || x->alias_at != y->alias_at)
      return false;
  }
  for (int i = 0; i < a->n_ins; i++) {
    const pcgc_ins *x = &a->ins[i], *y = &b->ins[i];
    bool bx = x->kind != PCGC_INS_WAIT && is_bucket(x), by = y->kind != PCGC_INS_WAIT && is_bucket(y);
    if (bx != by || (bx && (x->n_args != y->n_args ||
                            memcmp(a->args + x->args, b->args + y->args, (size_t)x->n_args * sizeof *a->args))))
      return false;
  }
  return true;
}

/* P takes the placement of `like`, whose layout is the same. */
static void copy_layout(pcgc_device_program *P, const pcgc_device_program *like) {
  for (int b = 0; b < P->n_buf; b++) P->buf[b].addr = like->buf[b].addr;
  P->arena_bytes = like->arena_bytes;
  P->persistent_bytes = like->persistent_bytes;
  P->peak_bytes = like->peak_bytes;
  P->unplanned_bytes = like->unplanned_bytes;
}

/* Greedy first fit: each of the m spans (largest first; pl and live have
 * room for m) at the lowest offset >= base that overlaps no span placed
 * before it and live at the same time (inclusive instruction ranges);
 * at[id] gets its offset. Returns the top. */
typedef struct span {
  int64_t bytes;
  int first, last, id;
} span;

static int by_span_size(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* The placed spans live at the same time as a new one are found through
 * blocks of the instruction axis: each placed span is listed in the blocks
 * its lifetime covers, so a query reads the few blocks of its own lifetime
 * instead of every span placed (quadratic in a device's buffers: LLaMA-3
 * 70B's 1F1B stages hold tens of thousands). Blocks are sized so that the
 * lists hold about 32 entries per span. */
typedef struct tblocks {
  int64_t blk;          /* instructions per block */
  int nblk;
  int *off, *cnt;       /* block b's entries: ent[off[b] .. off[b] + cnt[b]) */
  int *ent;             /* indices into the placed array */
  int *stamp;           /* [m]: the query that last saw placed span k (dedup) */
} tblocks;

static bool tblocks_init(tblocks *T, const span *sp, int m) {
  memset(T, 0, sizeof *T);
  int64_t len = 0, end = 1;
  for (int i = 0; i < m; i++) {
    len += sp[i].last - sp[i].first + 1;
    if (sp[i].last + 1 > end) end = sp[i].last + 1;
  }
  T->blk = m ? (len + 32 * (int64_t)m - 1) / (32 * (int64_t)m) : 1;
  if (T->blk < 1) T->blk = 1;
  T->nblk = (int)((end + T->blk - 1) / T->blk);
  T->off = calloc((size_t)T->nblk + 1, sizeof *T->off);
  T->cnt = calloc((size_t)T->nblk + 1, sizeof *T->cnt);
  T->stamp = malloc((size_t)(m ? m : 1) * sizeof *T->stamp);
  if (!T->off || !T->cnt || !T->stamp) return false;
  for (int i = 0; i < m; i++) /* room: every span's blocks, counted before any is placed */
    for (int64_t b = sp[i].first / T->blk; b <= sp[i].last / T->blk; b++) T->off[b + 1]++;
  for (int b = 0; b < T->nblk; b++) T->off[b + 1] += T->off[b];
  int64_t total = T->off[T->nblk];
  T->ent = malloc((size_t)(total ? total : 1) * sizeof *T->ent);
  for (int i = 0; i < m; i++) T->stamp[i] = -1;
  return T->ent != NULL;
}

static void tblocks_free(tblocks *T) {
  free(T->off);
  free(T->cnt);
  free(T->ent);
  free(T->stamp);
}

static int64_t first_fit(span *sp, int m, int64_t base, int64_t *at_of, placed *pl, placed *live) {
  qsort(sp, (size_t)m, sizeof *sp, by_span_size);
  tblocks T;
  bool fast = tblocks_init(&T, sp, m);
  int64_t top = base;
  for (int i = 0; i < m; i++) {
    int64_t size = align64(sp[i].bytes ? sp[i].bytes : 1), at = base;
    /* sweep the placements live at the same time by their start, stepping
     * past each that overlaps, until a gap holds the span (the result does
     * not depend on how those placements are ordered among equal starts) */
    int nl = 0;
    if (fast) {
      for (int64_t b = sp[i].first / T.blk; b <= sp[i].last / T.blk; b++)
        for (int e = 0; e < T.cnt[b]; e++) {
          int k = T.ent[T.off[b] + e];
          if (T.stamp[k] == i) continue;
          T.stamp[k] = i;
          if (!(pl[k].last < sp[i].first || pl[k].first > sp[i].last)) live[nl++] = pl[k];
        }
    } else {
      for (int k = 0; k < i; k++)
        if (!(pl[k].last < sp[i].first || pl[k].first > sp[i].last)) live[nl++] = pl[k];
    }
    qsort(live, (size_t)nl, sizeof *live, by_lo);
    for (int k = 0; k < nl && live[k].lo < at + size; k++)
      if (live[k].hi > at) at = live[k].hi;
    at_of[sp[i].id] = at;
    pl[i] = (placed){at, at + size, sp[i].first, sp[i].last};
    if (at + size > top) top = at + size;
    if (fast)
      for (int64_t b = sp[i].first / T.blk; b <= sp[i].last / T.blk; b++) T.ent[T.off[b] + T.cnt[b]++] = i;
  }
  tblocks_free(&T);
  return top;
}

/* Places the buffers (lifetimes known) in one arena. */
static pcgc_status plan_memory(pcgc_device_program *P) {
  int n = P->n_buf;
  span *idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
  placed *pl = malloc((size_t)(n ? n : 1) * sizeof *pl), *live = malloc((size_t)(n ? n : 1) * sizeof *live);
  int64_t *at = malloc((size_t)(n ? n : 1) * sizeof *at);
  if (!idx || !pl || !live || !at) {
    free(idx);
    free(pl);
    free(live);
    free(at);
    return PCGC_ERR_NOMEM;
  }
  int64_t off = 0;
  int m = 0;
  P->unplanned_bytes = 0;
  /* persistent buffers first: each gradient bucket's back to back, in its order (one
   * all-reduce spans them: pcgc_allreduce_span), then the others in order */
  for (int b = 0; b < n; b++) P->buf[b].addr = -1;
  for (int i = 0; i < P->n_ins; i++) {
    const pcgc_ins *I = &P->ins[i];
    if (!is_bucket(I) || I->kind == PCGC_INS_WAIT) continue;
    int k = I->kind == PCGC_INS_UPDATE ? I->n_args / 4 : I->n_args; /* an update: weights, gradients, m, v */
    for (int q = 0; q < I->n_args / k; q++) place_list(P, P->args + I->args + q * k, k, &off);
  }
  for (int b = 0; b < n; b++) {
    pcgc_plan_buf *B = &P->buf[b];
    if (B->alias >= 0) continue; /* placed with the buffer it lies in, below */
    P->unplanned_bytes += B->bytes;
    if (B->persistent) {
      if (B->addr >= 0) continue;
      B->addr = off;
      off += align64(B->bytes);
    } else if (B->first >= 0) {
      idx[m++] = (span){B->bytes, B->first, B->last, b};
    } else {
      B->addr = 0; /* never used */
    }
  }
  P->persistent_bytes = off;
  P->arena_bytes = first_fit(idx, m, off, at, pl, live);
  for (int i = 0; i < m; i++) P->buf[idx[i].id].addr = at[idx[i].id];
  for (int b = 0; b < n; b++)
    if (P->buf[b].alias >= 0) P->buf[b].addr = P->buf[P->buf[b].alias].addr + P->buf[b].alias_at;
  free(at);
  /* peak: live bytes at each instruction */
  int64_t *delta = calloc((size_t)P->n_ins + 1, sizeof *delta);
  if (!delta) {
    free(idx);
    free(pl);
    free(live);
    return PCGC_ERR_NOMEM;
  }
  for (int i = 0; i < m; i++) {
    const pcgc_plan_buf *B = &P->buf[idx[i].id];
    delta[B->first] += B->bytes;
    delta[B->last + 1] -= B->bytes;
  }
  int64_t now = 0, peak = 0;
  for (int i = 0; i <= P->n_ins; i++) {
    now += delta[i];
    if (now > peak) peak = now;
  }
  P->peak_bytes = P->persistent_bytes + peak;
  free(delta);
  free(idx);
  free(pl);
  free(live);
  return PCGC_OK;
}

static uint64_t digest(const pcgc_program *p) {
  XXH64_state_t *s = XXH64_createState();
  if (!s) return 0;
  XXH64_reset(s, 0x70636763);
  for (int d = 0; d < p->n_devices; d++) {
    const pcgc_device_program *P = &p->dev[d];
    for (int i = 0; i < P->n_ins; i++) {
      const pcgc_ins *I = &P->ins[i];
      /* a box by its content (below), not its index: boxes are shared */
      int64_t v[12] = {I->kind, I->add, I->node, I->piece, I->micro, I->dst, I->src, I->peer, I->root, I->tag, I->n_args,
                       I->box >= 0};
      XXH64_update(s, v, sizeof v);
      if (I->n_args) XXH64_update(s, P->args + I->args, (size_t)I->n_args * sizeof *P->args);
      if (I->box >= 0) {
        const pcgc_box *b = &P->boxes[I->box];
        XXH64_update(s, &b->rank, sizeof b->rank);
        XXH64_update(s, b->lo, (size_t)b->rank * sizeof *b->lo);
        XXH64_update(s, b->len, (size_t)b->rank * sizeof *b->len);
      }
    }
    if (P->n_sends) XXH64_update(s, P->send_off, (size_t)P->n_sends * sizeof *P->send_off);
    if (P->n_sends && P->send_done) XXH64_update(s, P->send_done, (size_t)P->n_sends * sizeof *P->send_done);
    for (int b = 0; b < P->n_buf; b++) {
      const pcgc_plan_buf *B = &P->buf[b];
      int64_t v[9] = {B->role, B->dtype, B->node, B->slot, B->piece, B->micro, B->rank, B->bytes, B->addr};
      XXH64_update(s, v, sizeof v);
      XXH64_update(s, B->dims, (size_t)B->rank * sizeof *B->dims);
      XXH64_update(s, B->offset, (size_t)B->rank * sizeof *B->offset);
    }
  }
  XXH64_update(s, p->group_off, (size_t)(p->n_groups + 1) * sizeof *p->group_off);
  XXH64_update(s, p->group_dev, (size_t)p->group_off[p->n_groups] * sizeof *p->group_dev);
  uint64_t h = XXH64_digest(s);
  XXH64_freeState(s);
  return h;
}

static int64_t box_bytes(const pcgc_box *b, pcgc_dtype t) {
  int64_t n = 1;
  for (int d = 0; d < b->rank; d++) n *= b->len[d];
  return n * (int64_t)pcgc_dtype_size(t);
}

static cg_pair *pair_of(const cg *C, int from, int to) {
  int64_t key = (int64_t)from * C->D + to;
  cg_pair *e = NULL;
  HASH_FIND(hh, C->pairs, &key, sizeof key, e);
  return e;
}

/* Each message's receive: its position in the global order (gp: of every
 * instruction of each device's stream, pos its creation index). */
static pcgc_status receive_positions(cg *C, int32_t *const *pos, int32_t *const *gp) {
  for (int e = 0; e < C->D; e++) {
    const cg_dev *V = &C->dv[e];
    for (int64_t j = 0; j < V->n_ins; j++) {
      const pcgc_ins *I = &V->ins[pos[e][j]];
      if (I->kind != PCGC_INS_RECV) continue;
      cg_pair *pr = pair_of(C, I->peer, e);
      if (!pr || I->tag < 0 || I->tag >= pr->count)
        return pcgc_error_set(C->err, PCGC_ERR_GRAPH, "codegen: device %d receives tag %d from device %d, which "
                              "sends no such message", e, I->tag, I->peer);
      if (!pr->recv_at && !(pr->recv_at = malloc((size_t)pr->count * sizeof *pr->recv_at))) return PCGC_ERR_NOMEM;
      pr->recv_at[I->tag] = gp[e][j];
    }
  }
  return PCGC_OK;
}

/* Which sends each SEND completes before it packs (codegen.h): the pending
 * ones whose bytes it reuses, so the runtime and the prediction only follow
 * the lists. sp: the sends' spans (any order; id = ordinal). */
static pcgc_status send_waits(pcgc_device_program *P, const span *sp, int m, int n) {
  int64_t *end = malloc((size_t)(n ? n : 1) * sizeof *end);
  int *pend = malloc((size_t)(n ? n : 1) * sizeof *pend), np = 0, nw = 0, cap = n;
  P->send_wait_off = malloc((size_t)(n + 1) * sizeof *P->send_wait_off);
  P->send_wait = malloc((size_t)(cap ? cap : 1) * sizeof *P->send_wait);
  if (!end || !pend || !P->send_wait_off || !P->send_wait) {
    free(end);
    free(pend);
    return PCGC_ERR_NOMEM;
  }
  for (int k = 0; k < n; k++) end[k] = -1; /* a send from its buffer holds no staging */
  for (int i = 0; i < m; i++) end[sp[i].id] = P->send_off[sp[i].id] + sp[i].bytes;
  for (int k = 0; k < n; k++) {
    P->send_wait_off[k] = nw;
    for (int i = 0; i < np;) {
      int j = pend[i];
      if (end[j] <= P->send_off[k] || P->send_off[j] >= end[k]) {
        i++;
        continue;
      }
      /* each send is completed at most once: nw stays below n */
      P->send_wait[nw++] = j;
      pend[i] = pend[--np];
    }
    pend[np++] = k;
  }
  P->send_wait_off[n] = nw;
  free(end);
  free(pend);
  return PCGC_OK;
}

/* Send staging (codegen.h): the k-th SEND of device d holds its bytes from
 * its instruction until the last one before the first whose global
 * position comes after its receive's; offsets by first fit. */
static pcgc_status plan_sends(const cg *C, pcgc_device_program *P, int d, const int32_t *gpos, int32_t *last_recv,
                              bool *in_order, pcgc_error *err) {
  int n = 0;
  for (int i = 0; i < P->n_ins; i++) n += P->ins[i].kind == PCGC_INS_SEND;
  P->n_sends = n;
  P->send_bytes = 0;
  P->send_off = malloc((size_t)(n ? n : 1) * sizeof *P->send_off);
  P->send_done = malloc((size_t)(n ? n : 1) * sizeof *P->send_done);
  span *sp = malloc((size_t)(n ? n : 1) * sizeof *sp);
  placed *pl = malloc((size_t)(n ? n : 1) * sizeof *pl), *live = malloc((size_t)(n ? n : 1) * sizeof *live);
  int *last_write = malloc((size_t)(P->n_buf ? P->n_buf : 1) * sizeof *last_write), m = 0;
  pcgc_status st = PCGC_OK;
  if (!P->send_off || !P->send_done || !sp || !pl || !live || !last_write) {
    st = PCGC_ERR_NOMEM;
    goto out;
  }
  for (int b = 0; b < P->n_buf; b++) last_write[b] = -1;
  for (int i = 0; i < P->n_ins; i++) { /* each buffer's last writer */
    int rd[PCGC_VARIADIC * 4 + 8], wr[PCGC_VARIADIC * 2 + 8], nr, nw;
    pcgc__cg_ins_access(&P->ins[i], P->args, rd, &nr, wr, &nw);
    for (int j = 0; j < nw; j++) last_write[wr[j]] = i;
  }
  for (int i = 0, k = 0; i < P->n_ins; i++) {
    const pcgc_ins *I = &P->ins[i];
    if (I->kind != PCGC_INS_SEND) continue;
    const cg_pair *pr = pair_of(C, d, I->peer);
    if (!pr || !pr->recv_at || I->tag < 0 || I->tag >= pr->count) {
      st = pcgc_error_set(err, PCGC_ERR_GRAPH, "codegen: device %d sends tag %d to device %d, which never "
                          "receives it", d, I->tag, I->peer);
      goto out;
    }
    int32_t g = pr->recv_at[I->tag];
    if (g < last_recv[I->peer]) *in_order = false; /* a later message to that peer is received first */
    last_recv[I->peer] = g;
    int lo = i + 1, hi = P->n_ins; /* the first instruction after i placed after the receive */
    while (lo < hi) {
      int mid = lo + (hi - lo) / 2;
      if (gpos[mid] > g) hi = mid;
      else lo = mid + 1;
    }
    const pcgc_plan_buf *B = &P->buf[I->src];
    pcgc_box whole, x;
    pcgc_plan_buf_box(B, &whole);
    x = I->box >= 0 ? P->boxes[I->box] : whole;
    int64_t first;
    if (C->o.sends_in_place && !B->persistent && last_write[I->src] < i && pcgc_box_contiguous_in(&x, &whole, &first)) {
      P->send_off[k] = -1; /* straight from its buffer; completed at send_done (sends_done) */
      P->send_done[k++] = P->n_ins;
      continue;
    }
    P->send_done[k] = -1;
    sp[m++] = (span){I->box >= 0 ? box_bytes(&P->boxes[I->box], B->dtype) : B->bytes, i, lo - 1, k};
    k++;
  }
  {
    int64_t *off = malloc((size_t)(n ? n : 1) * sizeof *off);
    if (!off) {
      st = PCGC_ERR_NOMEM;
      goto out;
    }
    P->send_bytes = first_fit(sp, m, 0, off, pl, live);
    for (int i = 0; i < m; i++) P->send_off[sp[i].id] = off[sp[i].id];
    free(off);
  }
  st = send_waits(P, sp, m, n);
out:
  free(last_write);
  free(sp);
  free(pl);
  free(live);
  return st;
}

/* A RECV moves down its stream past the device's own SENDs that follow it
 * (and the kernels, copies and zeroings between them), so that a device
 * hands its messages on before it waits for one: in the global order a
 * message's RECV sits where its SEND became ready, often before the
 * receiver's own sends (DLRM's readers that also gather a table waited on
 * another reader's gradient before sending theirs, and gatherers waited on
 * each other in a chain). It passes nothing that names its buffer, and no
 * instruction that may block but a SEND whose staging waits (send_wait)
 * are all for messages received before the RECV in the global order, and
 * lands right after the last SEND it passes. So what other devices wait for
 * from this one happens no later than before, and between the RECV's old
 * and new places the device waits only for receives that come earlier in
 * the global order, whose progress cannot hang on this RECV (not even where
 * a send completes only once its receive is posted: MPI's rendezvous,
 * NCCL): no deadlock can arise, and RECVs keep their order. Runs after
 * plan_sends; gp moves alike (the RECV takes the position of the SEND it
 * follows). */
static pcgc_status sink_recvs(const cg *C, pcgc_device_program *P, int d, int32_t *gp, int32_t *g0) {
  int n = P->n_ins, tb[PCGC_VARIADIC * 8 + 32];
  int *ord = malloc((size_t)(n ? n : 1) * sizeof *ord);
  int32_t *rg = malloc((size_t)(P->n_sends ? P->n_sends : 1) * sizeof *rg); /* send k's receive, global */
  if (!ord || !rg) {
    free(ord);
    free(rg);
    return PCGC_ERR_NOMEM;
  }
  for (int i = 0, k = 0; i < n; i++) {
    const pcgc_ins *I = &P->ins[i];
    ord[i] = -1;
    if (I->kind != PCGC_INS_SEND || k >= P->n_sends) continue;
    const cg_pair *pr = pair_of(C, d, I->peer);
    rg[k] = pr && pr->recv_at && I->tag >= 0 && I->tag < pr->count ? pr->recv_at[I->tag] : INT32_MAX;
    ord[i] = k++;
  }
  for (int i = n - 1; i >= 0; i--) {
    pcgc_ins R = P->ins[i];
    if (R.kind != PCGC_INS_RECV) continue;
    int to = -1;
    for (int j = i + 1; j < n; j++) {
      const pcgc_ins *I = &P->ins[j];
      bool send = I->kind == PCGC_INS_SEND && ord[j] >= 0;
      for (int w = send ? P->send_wait_off[ord[j]] : 0; send && w < P->send_wait_off[ord[j] + 1]; w++)
        send = rg[P->send_wait[w]] < gp[i];
      bool local = is_kernel(I->kind) || I->kind == PCGC_INS_COPY || I->kind == PCGC_INS_ZERO, named = false;
      if (!send && !local) break;
      int k = touched(I, P->args, tb);
      for (int t = 0; t < k && !named; t++) named = tb[t] == R.dst;
      if (named) break;
      if (send) to = j;
    }
    if (to < 0) continue;
    int32_t g = gp[to], r0 = g0[i];
    memmove(&P->ins[i], &P->ins[i + 1], (size_t)(to - i) * sizeof *P->ins);
    memmove(&gp[i], &gp[i + 1], (size_t)(to - i) * sizeof *gp);
    memmove(&g0[i], &g0[i + 1], (size_t)(to - i) * sizeof *g0);
    g0[to] = r0;
    memmove(&ord[i], &ord[i + 1], (size_t)(to - i) * sizeof *ord);
    P->ins[to] = R;
    gp[to] = g;
    ord[to] = -1;
  }
  free(ord);
  free(rg);
  return PCGC_OK;
}

/* The per-device steps of pcgc__cg_schedule, run on worker threads. */
typedef struct dev_job {
  cg *C;
  pcgc_program *p;
  int32_t **pos, **gp;
  uint64_t *lay;
  pcgc_status *st;     /* per device */
  pcgc_error *err;     /* per device */
  bool *in_order;      /* per device: its messages to each peer are received in order */
  int *like;           /* per device: an earlier device of the same layout (-1: none) */
  int *plan;           /* devices whose memory is planned (the rest copy a like's) */
} dev_job;

/* Local work ahead of receives: a kernel or a zeroing moves up past the run
 * of messages just before it, and past the copies and zeroings among them it
 * has nothing to do with, to just before a RECV of the run (or before the
 * copies right above that RECV, which then join its run of unpacking:
 * pcgc_recv_unpack_run), where it touches
 * nothing the messages it passes write, and writes nothing they read. The
 * global list schedule sends as soon as ready, so a device would otherwise
 * wait for messages before its own work that needs none. The run is of
 * RECVs; for a forward kernel also of SENDs that pass on what a RECV of the
 * run brought (a relay: an embedding table's lookup no longer waits behind
 * the relays of another table's); a zeroing also passes the start of a
 * non-blocking collective (a table's gradient cleared while its device
 * waits for the gradient's pieces, not after). Backward work and zeroings
 * stay behind relays, which lead to the tables' updates at the step's end:
 * a gatherer's MLP backward moved ahead of the rows' gradients it passes on
 * delayed them (DLRM on summit-v100 304.3 -> 308.5 us), as a table
 * gradient's zeroing did. The move is another valid global order (what it
 * reads all comes before it, and kernels, zeroings and copies wait for
 * nothing), so the plan stays deadlock-free; gp moves alike (it takes the
 * position of the RECV it goes before). */
static pcgc_status hoist_work(pcgc_device_program *P, int32_t *gp) {
  int *pend = malloc((size_t)(P->n_ins ? P->n_ins : 1) * sizeof *pend);
  if (!pend) return PCGC_ERR_NOMEM;
  for (int i = 1; i < P->n_ins; i++) {
    pcgc_ins K = P->ins[i];
    if (!is_kernel(K.kind) && K.kind != PCGC_INS_ZERO) continue;
    bool relays = K.kind == PCGC_INS_FORWARD || K.kind == PCGC_INS_BN_STATS || K.kind == PCGC_INS_BN_APPLY;
    int rd[PCGC_VARIADIC * 8 + 32], wr[PCGC_VARIADIC * 8 + 32], nr, nw, np = 0, best = -1;
    pcgc__cg_ins_access(&K, P->args, rd, &nr, wr, &nw);
    for (int j = i - 1; j >= 0; j--) {
      const pcgc_ins *J = &P->ins[j];
      bool passes = J->kind == PCGC_INS_RECV || (J->kind == PCGC_INS_SEND && relays) || J->kind == PCGC_INS_COPY ||
                    J->kind == PCGC_INS_ZERO || (J->kind == PCGC_INS_ALLREDUCE_START && K.kind == PCGC_INS_ZERO);
      if (!passes) break;
      /* K may not touch what J writes, nor write what J reads */
      int jr[PCGC_VARIADIC * 8 + 32], jw[PCGC_VARIADIC * 8 + 32], njr, njw;
      bool clash = false;
      pcgc__cg_ins_access(J, P->args, jr, &njr, jw, &njw);
      for (int a = 0; a < njw && !clash; a++) {
        for (int t = 0; t < nr && !clash; t++) clash = rd[t] == jw[a];
        for (int t = 0; t < nw && !clash; t++) clash = wr[t] == jw[a];
      }
      for (int a = 0; a < njr && !clash; a++)
        for (int t = 0; t < nw && !clash; t++) clash = wr[t] == jr[a];
      if (clash) break;
      if (J->kind == PCGC_INS_COPY && best >= 0 && !np) best = j; /* the copy then meets the receives below */
      if (J->kind == PCGC_INS_COPY || J->kind == PCGC_INS_ZERO || J->kind == PCGC_INS_ALLREDUCE_START) continue;
      if (J->kind == PCGC_INS_SEND) {
        pend[np++] = J->src; /* to be brought by a RECV above it */
        continue;
      }
      for (int t = 0; t < np;)
        if (pend[t] == J->dst) pend[t] = pend[--np];
        else t++;
      if (!np) best = j;
    }
    if (best < 0) continue;
    int32_t g = gp[best];
    memmove(&P->ins[best + 1], &P->ins[best], (size_t)(i - best) * sizeof *P->ins);
    memmove(&gp[best + 1], &gp[best], (size_t)(i - best) * sizeof *gp);
    P->ins[best] = K;
    gp[best] = g;
  }
  free(pend);
  return PCGC_OK;
}

static int root_of(const pcgc_device_program *P, int b) { return P->buf[b].alias >= 0 ? P->buf[b].alias : b; }

/* A zeroing moves up its stream to join the run of zeroings before it, so
 * that merge_zeros clears them with one launch, where no instruction between
 * touches its buffers, at most PCGC_ZERO_HOIST kernels lie between (or, from
 * farther, the bytes of the zeroings joined so stay within
 * PCGC_ZERO_HOIST_BYTES), and the run holds at most PCGC_ZERO_MAX buffers.
 * Its buffers then live from there: a few kernels longer (the memory plan
 * follows the lifetimes). gp, the global positions, moves alike (the zeroing
 * takes the run's). */
static pcgc_status hoist_zeros(pcgc_device_program *P, int32_t *gp) {
  int *stamp = malloc((size_t)(P->n_buf ? P->n_buf : 1) * sizeof *stamp);
  if (!stamp) return PCGC_ERR_NOMEM;
  for (int b = 0; b < P->n_buf; b++) stamp[b] = -1;
  int tb[PCGC_VARIADIC * 8 + 32];
  int epoch = 0, run_end = -1, run_n = 0, kernels = 0;
  int64_t run_far = 0; /* the bytes of the zeroings joined from farther than PCGC_ZERO_HOIST */
  for (int i = 0; i < P->n_ins; i++) {
    pcgc_ins I = P->ins[i];
    if (I.kind != PCGC_INS_ZERO) {
      int k = touched(&I, P->args, tb);
      for (int j = 0; j < k; j++) stamp[tb[j]] = epoch;
      kernels += is_kernel(I.kind);
      continue;
    }
    int c = I.dst >= 0 ? 1 : I.n_args;
    if (run_end == i - 1 && run_n + c <= PCGC_ZERO_MAX) { /* next to the run already */
      run_end = i;
      run_n += c;
      continue;
    }
    int64_t held = 0;
    for (int j = 0; j < c; j++) {
      int b = I.dst >= 0 ? I.dst : P->args[I.args + j];
      if (b >= 0) held += P->buf[b].bytes;
    }
    bool far = kernels > PCGC_ZERO_HOIST;
    bool free_between = run_end >= 0 && run_end < i - 1 && (!far || run_far + held <= PCGC_ZERO_HOIST_BYTES) &&
                        run_n + c <= PCGC_ZERO_MAX;
    for (int j = 0; free_between && j < c; j++) {
      int b = I.dst >= 0 ? I.dst : P->args[I.args + j];
      free_between = b < 0 || stamp[b] != epoch;
    }
    if (!free_between) { /* a new run starts here */
      epoch++;
      run_end = i;
      run_n = c;
      kernels = 0;
      run_far = 0;
      continue;
    }
    if (far) run_far += held;
    int32_t g = gp[run_end];
    memmove(&P->ins[run_end + 2], &P->ins[run_end + 1], (size_t)(i - run_end - 1) * sizeof *P->ins);
    memmove(&gp[run_end + 2], &gp[run_end + 1], (size_t)(i - run_end - 1) * sizeof *gp);
    P->ins[++run_end] = I;
    gp[run_end] = g;
    run_n += c;
  }
  free(stamp);
  return PCGC_OK;
}

/* Device d's stream in the global order, its sends, lifetimes and layout hash. */
/* Zeroing instructions next to each other in the stream clear their buffers
 * with one launch: a run of them becomes one list ZERO (at most
 * PCGC_ZERO_MAX buffers). gp, the global positions, is compacted alike. */
static pcgc_status merge_zeros(pcgc_device_program *P, int32_t *gp) {
  int total = 0;
  for (int i = 0; i < P->n_ins; i++)
    if (P->ins[i].kind == PCGC_INS_ZERO) total += P->ins[i].dst >= 0 ? 1 : P->ins[i].n_args;
  if (!total) return PCGC_OK;
  int *a = realloc(P->args, ((size_t)P->n_args + (size_t)total) * sizeof *a);
  if (!a) return PCGC_ERR_NOMEM;
  P->args = a;
  int o = 0;
  for (int i = 0; i < P->n_ins;) {
    pcgc_ins I = P->ins[i];
    int j = i, n = 0;
    while (j < P->n_ins && P->ins[j].kind == PCGC_INS_ZERO) {
      int c = P->ins[j].dst >= 0 ? 1 : P->ins[j].n_args;
      if (n + c > PCGC_ZERO_MAX) break;
      n += c;
      j++;
    }
    if (j - i < 2) { /* no run: as it is */
      gp[o] = gp[i];
      P->ins[o++] = I;
      i++;
      continue;
    }
    int at = P->n_args;
    for (int k = i; k < j; k++) {
      const pcgc_ins *Z = &P->ins[k];
      if (Z->dst >= 0) P->args[P->n_args++] = Z->dst;
      for (int m = 0; Z->dst < 0 && m < Z->n_args; m++) P->args[P->n_args++] = P->args[Z->args + m];
    }
    I.dst = -1;
    I.box = -1;
    I.args = at;
    I.n_args = P->n_args - at;
    gp[o] = gp[i];
    P->ins[o++] = I;
    i = j;
  }
  P->n_ins = o;
  return PCGC_OK;
}

/* ------------------------------------------------ local copies as views
 *
 * A relayout's piece that stays on its device is a COPY between two of its
 * buffers. Where the copy moves one buffer whole into a contiguous run of the
 * other, the two can share those bytes instead (alias_copies): the smaller
 * one lies inside the larger at the run's offset and the COPY goes. Into
 * (the source whole into a run of the destination: a device's own samples in
 * a tower's input), the source is written where the destination wants it;
 * out of (the destination whole out of a run of the source: a tower's output
 * piece for the concat), the destination is a view of the source. Sound when
 * nothing else reads or writes the shared bytes differently than the copy
 * would have left them:
 *   into: before the copy, the destination is touched only outside the run;
 *         after it, it is written only outside the run; the source is not
 *         written after it;
 *   out of: the destination is only read, after the copy; the source's run
 *         is not written after it.
 * A buffer shares bytes with one other at most in one role: a view
 * (`alias`) has no views of its own, and the views of one buffer lie on
 * disjoint runs of it. Offsets keep the arena's 64-byte alignment. */

/* The region a COPY moves: its box, else the overlap of its two buffers (as the runtime reads it). */
static bool copy_region(const pcgc_device_program *P, const pcgc_ins *I, pcgc_box *x) {
  if (I->box >= 0) {
    *x = P->boxes[I->box];
    return true;
  }
  pcgc_box d, s;
  pcgc_plan_buf_box(&P->buf[I->dst], &d);
  pcgc_plan_buf_box(&P->buf[I->src], &s);
  return pcgc_box_intersect(&d, &s, x);
}

/* The box of buffer b that instruction J touches where that is a box of it
 * (a copy's, a message's), else false: J touches all of b. */
static bool access_box(const pcgc_device_program *P, const pcgc_ins *J, int b, pcgc_box *x) {
  if (J->kind == PCGC_INS_COPY && J->src != J->dst && (J->src == b || J->dst == b)) return copy_region(P, J, x);
  if (J->box >= 0 && ((J->kind == PCGC_INS_RECV && J->dst == b && J->src != b) || (J->kind == PCGC_INS_SEND && J->src == b))) {
    *x = P->boxes[J->box];
    return true;
  }
  return false;
}

static bool boxes_meet(const pcgc_box *a, const pcgc_box *b) {
  pcgc_box o;
  return pcgc_box_intersect(a, b, &o);
}

static bool ins_writes(const pcgc_device_program *P, const pcgc_ins *J, int b) {
  int rd[PCGC_VARIADIC * 4 + 8], wr[PCGC_VARIADIC * 2 + 8], nr, nw;
  pcgc__cg_ins_access(J, P->args, rd, &nr, wr, &nw);
  for (int i = 0; i < nw; i++)
    if (wr[i] == b) return true;
  return false;
}

/* Whether the copy c of region x may make `child` share the bytes of `parent`
 * (into: child is the copy's source). use[b] lists the instructions that touch b. */
static bool may_alias(const pcgc_device_program *P, const int *use_off, const int *use, const bool *gone, int c,
                      const pcgc_box *x, int child, int parent, bool into) {
  for (int k = use_off[parent]; k < use_off[parent + 1]; k++) {
    int j = use[k];
    if (j == c || gone[j]) continue;
    const pcgc_ins *J = &P->ins[j];
    pcgc_box y;
    if (access_box(P, J, parent, &y) && !boxes_meet(&y, x)) continue; /* outside the run */
    if (j < c ? !into : !ins_writes(P, J, parent)) continue; /* out of: made before the copy; read after it */
    return false;
  }
  for (int k = use_off[child]; k < use_off[child + 1]; k++) {
    int j = use[k];
    if (j == c || gone[j]) continue;
    if (into ? j > c && ins_writes(P, &P->ins[j], child) : j < c || ins_writes(P, &P->ins[j], child)) return false;
  }
  return true;
}

/* Drops the instructions gone[i] names from the stream (and their counts);
 * gp and g0, the global positions now and before sink_recvs, are compacted
 * alike. */
static void drop_gone(pcgc_device_program *P, int32_t *gp, int32_t *g0, const bool *gone) {
  int o = 0;
  for (int i = 0; i < P->n_ins; i++) {
    if (gone[i]) {
      P->count_by_kind[P->ins[i].kind]--;
      continue;
    }
    gp[o] = gp[i];
    g0[o] = g0[i];
    P->ins[o++] = P->ins[i];
  }
  P->n_ins = o;
}

/* A buffer zeroed only to be added into: where the first instruction after
 * its ZERO that touches it is a RECV or COPY adding into all of it (a
 * gradient's first contribution, received or local), that one sets the
 * buffer instead and the ZERO leaves it out (first_sets). A RECV that sets a
 * whole buffer is then received in place, without staging or unpacking.
 * gp, the global positions, is compacted with the stream. */
static pcgc_status first_sets(pcgc_device_program *P, int32_t *gp, int32_t *g0) {
  int nb = P->n_buf, n = P->n_ins;
  int *next = malloc((size_t)(nb ? nb : 1) * sizeof *next); /* per buffer: the next instruction touching it */
  bool *gone = calloc((size_t)(n ? n : 1), sizeof *gone), gone_any = false;
  if (!next || !gone) {
    free(next);
    free(gone);
    return PCGC_ERR_NOMEM;
  }
  int tb[PCGC_VARIADIC * 8 + 32];
  for (int b = 0; b < nb; b++) next[b] = -1;
  for (int i = n - 1; i >= 0; i--) {
    pcgc_ins *I = &P->ins[i];
    if (I->kind == PCGC_INS_ZERO) {
      int c = I->dst >= 0 ? 1 : I->n_args, kept = 0;
      for (int j = 0; j < c; j++) {
        int b = I->dst >= 0 ? I->dst : P->args[I->args + j], t = b >= 0 ? next[b] : -1;
        pcgc_ins *T = t >= 0 ? &P->ins[t] : NULL;
        pcgc_box whole, x;
        bool sets = false;
        if (T && T->add && T->dst == b && T->src != b && (T->kind == PCGC_INS_RECV || T->kind == PCGC_INS_COPY)) {
          pcgc_plan_buf_box(&P->buf[b], &whole);
          x = whole;
          if (T->kind == PCGC_INS_COPY ? copy_region(P, T, &x) : T->box >= 0 ? (x = P->boxes[T->box], true) : true)
            sets = pcgc_box_equal(&x, &whole);
        }
        if (sets) {
          T->add = false;
          continue;
        }
        if (I->dst < 0) P->args[I->args + kept] = b;
        kept++;
      }
      if (I->dst < 0) I->n_args = kept;
      if (!kept) {
        gone[i] = gone_any = true;
        continue;
      }
    }
    int k = touched(I, P->args, tb);
    for (int j = 0; j < k; j++) next[tb[j]] = i;
  }
  if (gone_any) drop_gone(P, gp, g0, gone);
  free(next);
  free(gone);
  return PCGC_OK;
}

static pcgc_status alias_copies(pcgc_device_program *P, int32_t *gp, int32_t *g0) {
  int nb = P->n_buf, n = P->n_ins, copies = 0;
  for (int i = 0; i < n; i++) copies += P->ins[i].kind == PCGC_INS_COPY;
  if (!copies) return PCGC_OK;
  int tb[PCGC_VARIADIC * 8 + 32];
  int *use_off = calloc((size_t)nb + 1, sizeof *use_off), *stamp = malloc((size_t)(nb ? nb : 1) * sizeof *stamp);
  int *kids = malloc((size_t)(nb ? nb : 1) * sizeof *kids), *next = malloc((size_t)(nb ? nb : 1) * sizeof *next);
  bool *gone = calloc((size_t)(n ? n : 1), sizeof *gone);
  int *use = NULL;
  pcgc_status st = PCGC_ERR_NOMEM;
  if (!use_off || !stamp || !kids || !next || !gone) goto out;
  for (int b = 0; b < nb; b++) stamp[b] = kids[b] = next[b] = -1;
  for (int pass = 0; pass < 2; pass++) { /* count, then fill: each instruction once per buffer */
    for (int i = 0; i < n; i++) {
      int k = touched(&P->ins[i], P->args, tb);
      for (int j = 0; j < k; j++) {
        if (stamp[tb[j]] == i + pass * n) continue;
        stamp[tb[j]] = i + pass * n;
        if (pass == 0) use_off[tb[j] + 1]++;
        else use[use_off[tb[j]]++] = i;
      }
    }
    if (pass == 0) {
      for (int b = 0; b < nb; b++) use_off[b + 1] += use_off[b];
      if (!(use = malloc((size_t)(use_off[nb] ? use_off[nb] : 1) * sizeof *use))) goto out;
    } else {
      for (int b = nb; b > 0; b--) use_off[b] = use_off[b - 1];
      use_off[0] = 0;
    }
  }
  for (int c = 0; c < n; c++) {
    const pcgc_ins *I = &P->ins[c];
    if (I->kind != PCGC_INS_COPY || I->add || I->src < 0 || I->dst < 0 || I->src == I->dst) continue;
    const pcgc_plan_buf *S = &P->buf[I->src], *D = &P->buf[I->dst];
    if (S->persistent || D->persistent || S->dtype != D->dtype || S->role == PCGC_BUF_SCRATCH ||
        D->role == PCGC_BUF_SCRATCH)
      continue;
    pcgc_box x, sw, dw;
    int64_t first;
    if (!copy_region(P, I, &x)) continue;
    pcgc_plan_buf_box(S, &sw);
    pcgc_plan_buf_box(D, &dw);
    int child, parent;
    bool into;
    if (pcgc_box_equal(&x, &sw) && pcgc_box_contiguous_in(&x, &dw, &first)) {
      child = I->src, parent = I->dst, into = true;
    } else if (pcgc_box_equal(&x, &dw) && pcgc_box_contiguous_in(&x, &sw, &first)) {
      child = I->dst, parent = I->src, into = false;
    } else {
      continue;
    }
    int64_t at = first * (int64_t)pcgc_dtype_size(S->dtype), end = at + P->buf[child].bytes;
    if (at % 64 || P->buf[child].alias >= 0 || kids[child] >= 0 || P->buf[parent].alias >= 0) continue;
    bool clash = false;
    for (int v = kids[parent]; v >= 0 && !clash; v = next[v])
      clash = P->buf[v].alias_at < end && at < P->buf[v].alias_at + P->buf[v].bytes;
    if (clash || !may_alias(P, use_off, use, gone, c, &x, child, parent, into)) continue;
    P->buf[child].alias = parent;
    P->buf[child].alias_at = at;
    next[child] = kids[parent];
    kids[parent] = child;
    gone[c] = true;
  }
  drop_gone(P, gp, g0, gone);
  st = PCGC_OK;
out:
  free(use_off);
  free(use);
  free(stamp);
  free(kids);
  free(next);
  free(gone);
  return st;
}

/* Where each send straight from its buffer completes (send_done): at the
 * first instruction from which on every instruction of the stream was placed
 * after the message's receive in the global order (g0: the positions before
 * sink_recvs moved receives down). Waiting there cannot deadlock: everything
 * this device contributes to the global order up to the receive is done by
 * then, and the receiver reaches its RECV on such things alone. */
static pcgc_status sends_done(const cg *C, pcgc_device_program *P, int d, const int32_t *g0) {
  int n = P->n_ins;
  int32_t *suf = malloc(((size_t)n + 1) * sizeof *suf); /* the least position from j on */
  if (!suf) return PCGC_ERR_NOMEM;
  suf[n] = INT32_MAX;
  for (int j = n - 1; j >= 0; j--) suf[j] = g0[j] < suf[j + 1] ? g0[j] : suf[j + 1];
  for (int i = 0, k = 0; i < n && k < P->n_sends; i++) {
    const pcgc_ins *I = &P->ins[i];
    if (I->kind != PCGC_INS_SEND) continue;
    if (P->send_done[k] >= 0) {
      const cg_pair *pr = pair_of(C, d, I->peer);
      int32_t g = pr && pr->recv_at && I->tag >= 0 && I->tag < pr->count ? pr->recv_at[I->tag] : INT32_MAX;
      int lo = i + 1, hi = n;
      while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (suf[mid] > g) hi = mid;
        else lo = mid + 1;
      }
      P->send_done[k] = lo;
    }
    k++;
  }
  free(suf);
  return PCGC_OK;
}

static void dev_stream(void *ctx, int d, int worker) {
  (void)worker;
  dev_job *J = ctx;
  cg *C = J->C;
  cg_dev *V = &C->dv[d];
  pcgc_device_program *P = &J->p->dev[d];
  J->in_order[d] = true;
  P->n_ins = (int)V->n_ins;
  P->n_buf = (int)V->n_buf;
  P->n_args = (int)V->n_args;
  P->n_box = (int)V->n_boxes;
  P->n_requests = V->n_requests;
  /* the buffers, arguments and boxes move to the program (codegen is done
   * with them: free_cg follows); the instructions are put in stream order */
  P->ins = malloc((size_t)(P->n_ins ? P->n_ins : 1) * sizeof *P->ins);
  int32_t *last_recv = malloc((size_t)C->D * sizeof *last_recv);
  if (!P->ins || !last_recv) {
    free(last_recv);
    J->st[d] = PCGC_ERR_NOMEM;
    return;
  }
  for (int i = 0; i < P->n_ins; i++) P->ins[i] = V->ins[J->pos[d][i]];
  free(V->ins);
  V->ins = NULL;
  P->buf = V->buf;
  P->args = V->args;
  P->boxes = V->boxes;
  V->buf = NULL;
  V->args = NULL;
  V->boxes = NULL;
  if (!P->buf) P->buf = malloc(sizeof *P->buf); /* never NULL, as before: callers copy from them */
  if (!P->args) P->args = malloc(sizeof *P->args);
  if (!P->boxes) P->boxes = malloc(sizeof *P->boxes);
  if (!P->buf || !P->args || !P->boxes || hoist_zeros(P, J->gp[d]) != PCGC_OK || merge_zeros(P, J->gp[d]) != PCGC_OK ||
      (C->o.hoist_work && hoist_work(P, J->gp[d]) != PCGC_OK)) {
    free(last_recv);
    J->st[d] = PCGC_ERR_NOMEM;
    return;
  }
  for (int i = 0; i < P->n_ins; i++) {
    const pcgc_ins *I = &P->ins[i];
    P->count_by_kind[I->kind]++;
    if (is_kernel(I->kind)) {
      int64_t w = 0; /* each bf16 argument widened to f32 once */
      for (int j = 0; j < I->n_args; j++) {
        int b = P->args[I->args + j];
        if (b >= 0 && P->buf[b].dtype == PCGC_BF16) w += pcgc_widened_bytes(&P->buf[b]);
      }
      if (w > P->widen_bytes) P->widen_bytes = w;
    }
    if (I->box < 0) continue;
    int b = I->dst >= 0 ? I->dst : I->src;
    int64_t bytes = box_bytes(&P->boxes[I->box], b >= 0 ? P->buf[b].dtype : PCGC_F32);
    if (I->kind == PCGC_INS_ALLREDUCE_START && !pcgc_allreduce_in_place(P, I)) P->request_bytes += align64(bytes);
    /* (a blocking all-reduce in place still counts: a GPU reducing through MPI stages it on the host) */
    if (I->kind != PCGC_INS_COPY && (I->kind == PCGC_INS_ALLREDUCE || !pcgc_allreduce_in_place(P, I)) &&
        bytes > P->max_message_bytes)
      P->max_message_bytes = bytes;
  }
  for (int e = 0; e < C->D; e++) last_recv[e] = -1;
  J->st[d] = plan_sends(C, P, d, J->gp[d], last_recv, &J->in_order[d], &J->err[d]);
  free(last_recv);
  int32_t *g0 = J->st[d] == PCGC_OK ? malloc((size_t)(P->n_ins ? P->n_ins : 1) * sizeof *g0) : NULL;
  if (J->st[d] == PCGC_OK && !g0) J->st[d] = PCGC_ERR_NOMEM;
  if (g0) memcpy(g0, J->gp[d], (size_t)P->n_ins * sizeof *g0);
  if (J->st[d] == PCGC_OK) J->st[d] = sink_recvs(C, P, d, J->gp[d], g0);
  if (J->st[d] == PCGC_OK) J->st[d] = first_sets(P, J->gp[d], g0);
  if (J->st[d] == PCGC_OK) J->st[d] = alias_copies(P, J->gp[d], g0);
  if (J->st[d] == PCGC_OK) J->st[d] = sends_done(C, P, d, g0);
  free(g0);
  if (J->st[d] != PCGC_OK) return;
  for (int i = 0; i < P->n_ins; i++) { /* the receive staging holds a run of unpacked messages */
    int64_t bytes;
    int n = pcgc_recv_unpack_run(P, i, NULL, &bytes);
    if (n > 1 && bytes > P->max_message_bytes) P->max_message_bytes = bytes;
    if (n > 1) i += n - 1;
  }
  lifetimes(P);
  J->lay[d] = layout_hash(P);
}

static void dev_memory(void *ctx, int k, int worker) {
  (void)worker;
  dev_job *J = ctx;
  int d = J->plan[k];
  J->st[d] = plan_memory(&J->p->dev[d]);
}

/* ZeRO-2 (lower.c, sync_cell): the WAIT of a reduce-scatter from a full
 * gradient that does not persist into its slab's buffer moves up to right
 * after the device's first gradient start (all-reduce or reduce-scatter)
 * that follows its own with a kernel between them (the starts of one op's
 * weights come together), so that the full gradient dies while backward
 * goes on: its reduce-scatter runs beside the next op's backward, and the
 * stream waits for it only then. Taking the global position of that
 * start keeps the positions in stream order. It cannot deadlock: everything
 * before the start in the global order needs nothing after it, and the WAIT
 * needs only its own collective, which every member starts at its place in
 * the global order. pos[d] / gp[d] of n instructions are rearranged in place. */
static pcgc_status early_waits(const cg *C, int d, int32_t *pos, int32_t *gp, int64_t n) {
  const cg_dev *V = &C->dv[d];
  int64_t n_req = V->n_requests, moved = 0;
  size_t nn = (size_t)(n ? n : 1);
  /* target[i]: the stream index of the start instruction i moves after (-1: stays); start_at[r]:
   * where request r starts; first/next/last: after start i, the instructions that move there,
   * in their order */
  int64_t *target = malloc(nn * sizeof *target), *start_at = malloc((size_t)(n_req ? n_req : 1) * sizeof *start_at),
          *first = malloc(nn * sizeof *first), *next = malloc(nn * sizeof *next), *last = malloc(nn * sizeof *last);
  int32_t *np = malloc(nn * sizeof *np), *ng = malloc(nn * sizeof *ng);
  pcgc_status st = target && start_at && first && next && last && np && ng ? PCGC_OK : PCGC_ERR_NOMEM;
  for (int64_t r = 0; !st && r < n_req; r++) start_at[r] = -1;
  for (int64_t i = 0; !st && i < n; i++) {
    const pcgc_ins *I = &V->ins[pos[i]];
    target[i] = first[i] = last[i] = next[i] = -1;
    if ((I->kind == PCGC_INS_ALLREDUCE_START || I->kind == PCGC_INS_REDUCESCATTER_START) && I->tag >= 0 &&
        I->tag < n_req)
      start_at[I->tag] = i;
  }
  for (int64_t i = 0; !st && i < n; i++) {
    const pcgc_ins *W = &V->ins[pos[i]];
    if (W->kind != PCGC_INS_WAIT || W->src < 0 || V->buf[W->src].persistent || W->tag < 0 || W->tag >= n_req ||
        start_at[W->tag] < 0)
      continue;
    int64_t t = -1;
    bool computed = false; /* a kernel since the start: a start right after it (an op's other weight) is passed */
    for (int64_t k = start_at[W->tag] + 1; k < i && t < 0; k++) {
      int kind = V->ins[pos[k]].kind;
      if (computed && (kind == PCGC_INS_ALLREDUCE_START || kind == PCGC_INS_REDUCESCATTER_START)) t = k;
      computed |= is_kernel(kind);
    }
    if (t >= 0) {
      target[i] = t;
      moved++;
    }
  }
  if (!st && moved) {
    for (int64_t j = 0; j < n; j++) {
      int64_t t = target[j];
      if (t < 0) continue;
      if (last[t] < 0) first[t] = j;
      else next[last[t]] = j;
      last[t] = j;
    }
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
      if (target[i] >= 0) continue;
      np[m] = pos[i];
      ng[m++] = gp[i];
      for (int64_t j = first[i]; j >= 0; j = next[j]) { /* later than i: each placed once */
        np[m] = pos[j];
        ng[m++] = gp[i];
      }
    }
    memcpy(pos, np, (size_t)n * sizeof *pos);
    memcpy(gp, ng, (size_t)n * sizeof *gp);
  }
  free(target);
  free(start_at);
  free(first);
  free(next);
  free(last);
  free(np);
  free(ng);
  return st;
}

pcgc_status pcgc__cg_schedule(cg *C, pcgc_program **out) {
  int64_t nt = C->nt;
  int64_t *off = calloc((size_t)nt + 1, sizeof *off);
  int *succ = malloc((size_t)(C->ne ? C->ne : 1) * sizeof *succ), *indeg = calloc((size_t)(nt ? nt : 1), sizeof *indeg);
  hitem *heap = malloc((size_t)(nt ? nt : 1) * sizeof *heap);
  int32_t **pos = calloc((size_t)C->D, sizeof *pos), **gp = calloc((size_t)C->D, sizeof *gp);
  int64_t *npos = calloc((size_t)C->D, sizeof *npos);
  uint64_t *lay = calloc((size_t)C->D, sizeof *lay);
  /* after[t]: 1 + the position among all-reduce starts of the latest one t depends on
   * through update-phase tasks (0: none) */
  int64_t *after = calloc((size_t)(nt ? nt : 1), sizeof *after), n_starts = 0;
  int32_t *lvl = NULL; /* per task: the longest path from it to the step's end (kernels 4, others 1) */
  pcgc_program *p = calloc(1, sizeof *p);
  pcgc_status st = PCGC_OK;
  if (!off || !succ || !indeg || !heap || !pos || !gp || !npos || !lay || !after || !p) {
    st = PCGC_ERR_NOMEM;
    goto done;
  }
  for (int d = 0; d < C->D; d++) {
    pos[d] = malloc((size_t)(C->dv[d].n_ins ? C->dv[d].n_ins : 1) * sizeof **pos);
    gp[d] = malloc((size_t)(C->dv[d].n_ins ? C->dv[d].n_ins : 1) * sizeof **gp);
    if (!pos[d] || !gp[d]) {
      st = PCGC_ERR_NOMEM;
      goto done;
    }
  }
  for (int64_t i = 0; i < C->ne; i++) {
    off[C->e[i].a + 1]++;
    indeg[C->e[i].b]++;
  }
  for (int64_t i = 0; i < nt; i++) off[i + 1] += off[i];
  {
    int64_t *fill = malloc((size_t)(nt ? nt : 1) * sizeof *fill);
    if (!fill) {
      st = PCGC_ERR_NOMEM;
      goto done;
    }
    memcpy(fill, off, (size_t)nt * sizeof *fill);
    for (int64_t i = 0; i < C->ne; i++) succ[fill[C->e[i].a]++] = C->e[i].b;
    free(fill);
  }
  int64_t nh = 0, done_n = 0;
  if (C->o.order == 1 && !(lvl = longest_paths(C, off, succ, indeg))) { /* the longest path to the end first */
    st = PCGC_ERR_NOMEM;
    goto done;
  }
  for (int64_t t = 0; t < nt; t++)
    if (!indeg[t]) hpush(heap, &nh, key_of(C, (int)t, after, lvl));
  while (nh) {
    hitem h = hpop(heap, &nh);
    const cg_task *T = &C->t[h.id];
    for (int k = 0; k < T->n_em; k++) {
      const cg_emit *E = &C->em[T->first_em + k];
      gp[E->dev][npos[E->dev]] = (int32_t)done_n;
      pos[E->dev][npos[E->dev]++] = E->ins;
    }
    done_n++;
    int64_t a = T->allreduce ? ++n_starts : T->phase == CG_UPD ? after[h.id] : 0;
    for (int64_t k = off[h.id]; k < off[h.id + 1]; k++) {
      if (a > after[succ[k]]) after[succ[k]] = a;
      if (--indeg[succ[k]] == 0) hpush(heap, &nh, key_of(C, succ[k], after, lvl));
    }
  }
  if (done_n != nt) {
    st = pcgc_error_set(C->err, PCGC_ERR_GRAPH, "codegen: the task graph has a cycle (%lld of %lld tasks ordered)",
                        (long long)done_n, (long long)nt);
    goto done;
  }
  p->n_devices = C->D;
  p->micro = C->M;
  p->stages = C->stages;
  p->schedule = C->o.schedule;
  p->n_tasks = nt;
  p->dev = calloc((size_t)C->D, sizeof *p->dev);
  p->n_groups = C->n_groups;
  p->group_off = calloc((size_t)C->n_groups + 1, sizeof *p->group_off);
  if (!p->dev || !p->group_off) {
    st = PCGC_ERR_NOMEM;
    goto done;
  }
  {
    cg_group *g, *tmp;
    int total = 0;
    HASH_ITER(hh, C->groups, g, tmp) total += g->n;
    p->group_dev = malloc((size_t)(total ? total : 1) * sizeof *p->group_dev);
    int *cnt = calloc((size_t)C->n_groups + 1, sizeof *cnt);
    if (!p->group_dev || !cnt) {
      free(cnt);
      st = PCGC_ERR_NOMEM;
      goto done;
    }
    HASH_ITER(hh, C->groups, g, tmp) cnt[g->id] = g->n;
    for (int k = 0; k < C->n_groups; k++) p->group_off[k + 1] = p->group_off[k] + cnt[k];
    HASH_ITER(hh, C->groups, g, tmp) memcpy(p->group_dev + p->group_off[g->id], g->devs, (size_t)g->n * sizeof *g->devs);
    free(cnt);
  }
  for (int d = 0; d < C->D && st == PCGC_OK; d++)
    if (C->o.zero) st = early_waits(C, d, pos[d], gp[d], npos[d]);
  if (st != PCGC_OK) goto done;
  if ((st = receive_positions(C, pos, gp)) != PCGC_OK) goto done;
  {
    /* each device's stream, sends and lifetimes on worker threads; then its
     * memory, planned once per layout (the data-parallel copies share one) */
    dev_job J = {.C = C, .p = p, .pos = pos, .gp = gp, .lay = lay};
    J.st = calloc((size_t)C->D, sizeof *J.st);
    J.err = calloc((size_t)C->D, sizeof *J.err);
    J.in_order = malloc((size_t)C->D * sizeof *J.in_order);
    J.like = malloc((size_t)C->D * sizeof *J.like);
    J.plan = malloc((size_t)C->D * sizeof *J.plan);
    if (!J.st || !J.err || !J.in_order || !J.like || !J.plan) st = PCGC_ERR_NOMEM;
    int threads = C->o.threads > 0 ? C->o.threads : 1;
    if (st == PCGC_OK) pcgc_parallel_run(C->D, threads, dev_stream, &J);
    p->p2p_in_order = true;
    for (int d = 0; d < C->D && st == PCGC_OK; d++) {
      if ((st = J.st[d]) != PCGC_OK && C->err && J.err[d].message[0]) *C->err = J.err[d];
      p->p2p_in_order = p->p2p_in_order && J.in_order[d];
    }
    int n_plan = 0;
    for (int d = 0; d < C->D && st == PCGC_OK; d++) {
      J.like[d] = -1;
      for (int e = d - 1; e >= 0 && J.like[d] < 0; e--) /* the most recent alike: dp copies are usually neighbours */
        if (lay[e] == lay[d] && same_layout(&p->dev[e], &p->dev[d])) J.like[d] = e;
      if (J.like[d] < 0) J.plan[n_plan++] = d;
    }
    if (st == PCGC_OK) {
      for (int d = 0; d < C->D; d++) J.st[d] = PCGC_OK;
      pcgc_parallel_run(n_plan, threads, dev_memory, &J);
      for (int k = 0; k < n_plan && st == PCGC_OK; k++) st = J.st[J.plan[k]];
    }
    for (int d = 0; d < C->D && st == PCGC_OK; d++) /* in order: a device's like is planned or copied before it */
      if (J.like[d] >= 0) copy_layout(&p->dev[d], &p->dev[J.like[d]]);
    free(J.st);
    free(J.err);
    free(J.in_order);
    free(J.like);
    free(J.plan);
    if (st != PCGC_OK) goto done;
  }
  p->digest = digest(p);
done:
  for (int d = 0; d < C->D; d++) {
    if (pos) free(pos[d]);
    if (gp) free(gp[d]);
  }
  free(pos);
  free(gp);
  free(npos);
  free(lay);
  free(after);
  free(lvl);
  free(off);
  free(succ);
  free(indeg);
  free(heap);
  if (st) {
    if (!C->err || !C->err->message[0]) pcgc_error_set(C->err, st, "codegen: out of memory");
    pcgc_program_free(p);
    return st;
  }
  *out = p;
  return PCGC_OK;
}

bool pcgc_allreduce_span(const pcgc_device_program *P, const pcgc_ins *I, int64_t *addr, int64_t *bytes) {
  if (!is_bucket(I) || I->kind == PCGC_INS_UPDATE) return false;
  return list_span(P, P->args + I->args, I->n_args, addr, bytes);
}

bool pcgc_update_spans(const pcgc_device_program *P, const pcgc_ins *I, int64_t at[4], int64_t *bytes) {
  if (!is_bucket(I) || I->kind != PCGC_INS_UPDATE) return false;
  int k = I->n_args / 4;
  const int *a = P->args + I->args;
  int64_t b0 = -1;
  for (int q = 0; q < 4; q++) {
    at[q] = -1;
    bool none = true, all = true; /* a state list is all absent or all there */
    for (int j = 0; j < k; j++) {
      none &= a[q * k + j] < 0;
      all &= a[q * k + j] >= 0;
    }
    if (none && q >= 2) continue;
    int64_t b;
    if (!all || !list_span(P, a + q * k, k, &at[q], &b) || (b0 >= 0 && b != b0)) return false;
    for (int j = 0; q > 0 && j < k; j++) /* alike, buffer by buffer */
      if (P->buf[a[q * k + j]].bytes != P->buf[a[j]].bytes || P->buf[a[q * k + j]].addr - at[q] != P->buf[a[j]].addr - at[0])
        return false;
    b0 = b;
  }
  *bytes = b0;
  return true;
}

bool pcgc_recv_in_place(const pcgc_device_program *P, const pcgc_ins *I, int64_t *at) {
  if (I->kind != PCGC_INS_RECV || I->add || I->dst < 0 || I->dst >= P->n_buf) return false;
  const pcgc_plan_buf *B = &P->buf[I->dst];
  pcgc_box whole, x;
  pcgc_plan_buf_box(B, &whole);
  x = I->box >= 0 ? P->boxes[I->box] : whole;
  int64_t first;
  if (!pcgc_box_contiguous_in(&x, &whole, &first)) return false;
  *at = first * (int64_t)pcgc_dtype_size(B->dtype);
  return true;
}

int pcgc_sends_done_order(const pcgc_device_program *P, int *out) {
  int n = 0;
  for (int k = 0; P->send_done && k < P->n_sends; k++) { /* a stable insertion */
    if (P->send_done[k] < 0 || P->send_done[k] >= P->n_ins) continue; /* at the step's end */
    int j = n++;
    while (j > 0 && P->send_done[out[j - 1]] > P->send_done[k]) {
      out[j] = out[j - 1];
      j--;
    }
    out[j] = k;
  }
  return n;
}

int pcgc_send_pack_run(const pcgc_device_program *P, int pc, int k) {
  int n = 0;
  for (int i = pc; i < P->n_ins && n < PCGC_PACK_MAX && P->ins[i].kind == PCGC_INS_SEND && k + n < P->n_sends &&
                  (!P->send_done || P->send_done[k + n] < 0); /* one from its buffer is not packed */
       i++) {
    for (int w = P->send_wait_off[k + n]; n > 0 && w < P->send_wait_off[k + n + 1]; w++)
      if (P->send_wait[w] >= k) return n; /* it reuses the staging of a send of this run */
    n++;
  }
  return n;
}

int pcgc_recv_unpack_run(const pcgc_device_program *P, int pc, int64_t *off, int64_t *bytes) {
  int64_t at = 0, in;
  int n = 0, recvs = 0, csrc[PCGC_PACK_MAX], nc = 0; /* the roots the run's copies read */
  pcgc_box x[PCGC_PACK_MAX];
  for (int i = pc; i < P->n_ins && n < PCGC_PACK_MAX; i++) {
    const pcgc_ins *I = &P->ins[i];
    bool copy = I->kind == PCGC_INS_COPY;
    if (copy) { /* a local piece moved by the same launch: one type, f32 if added, read from outside the run */
      if (I->dst < 0 || I->dst >= P->n_buf || I->src < 0 || I->src >= P->n_buf || root_of(P, I->src) == root_of(P, I->dst) ||
          P->buf[I->src].dtype != P->buf[I->dst].dtype || (I->add && P->buf[I->dst].dtype != PCGC_F32) ||
          !copy_region(P, I, &x[n]))
        break;
      bool outside = true;
      for (int j = 0; j < n && outside; j++) outside = root_of(P, P->ins[pc + j].dst) != root_of(P, I->src);
      if (!outside) break;
    } else {
      if (I->kind != PCGC_INS_RECV || I->dst < 0 || I->dst >= P->n_buf || pcgc_recv_in_place(P, I, &in)) break;
      if (I->box >= 0) x[n] = P->boxes[I->box];
      else pcgc_plan_buf_box(&P->buf[I->dst], &x[n]);
    }
    const pcgc_plan_buf *D = &P->buf[I->dst];
    bool alone = !copy && I->add && D->dtype != PCGC_F32; /* move_list adds f32 only */
    if (alone && n > 0) break;
    bool apart = true;
    for (int j = 0; j < n && apart; j++) {
      int b = P->ins[pc + j].dst;
      if (b == I->dst) apart = !boxes_meet(&x[j], &x[n]);
      else apart = root_of(P, b) != root_of(P, I->dst);
    }
    for (int j = 0; j < nc && apart; j++) apart = csrc[j] != root_of(P, I->dst); /* nor writes what a copy reads */
    if (!apart) break;
    if (copy) {
      csrc[nc++] = root_of(P, I->src);
      if (off) off[n] = -1; /* no staging */
    } else {
      if (off) off[n] = at;
      at += align64(pcgc_box_elems(&x[n]) * (int64_t)pcgc_dtype_size(D->dtype));
    }
    n++;
    recvs += !copy;
    if (alone) break;
  }
  if (!recvs) n = 0, at = 0; /* copies alone are no run */
  if (bytes) *bytes = at;
  return n;
}

/* A blocking ALLREDUCE's region as one contiguous run of its buffer: its first element in *first. */
static bool allreduce_run(const pcgc_device_program *P, const pcgc_ins *I, int64_t *first) {
  if (I->kind != PCGC_INS_ALLREDUCE || I->dst < 0 || I->dst >= P->n_buf) return false;
  pcgc_box whole, x;
  pcgc_plan_buf_box(&P->buf[I->dst], &whole);
  x = I->box >= 0 ? P->boxes[I->box] : whole;
  return pcgc_box_contiguous_in(&x, &whole, first);
}

int64_t pcgc_allreduce_at(const pcgc_device_program *P, const pcgc_ins *I) {
  int64_t first = 0;
  return allreduce_run(P, I, &first) ? first * (int64_t)pcgc_dtype_size(P->buf[I->dst].dtype) : 0;
}

bool pcgc_allreduce_in_place(const pcgc_device_program *P, const pcgc_ins *I) {
  int64_t first;
  if (I->kind == PCGC_INS_ALLREDUCE) return allreduce_run(P, I, &first);
  if (is_bucket(I)) return I->kind != PCGC_INS_UPDATE;
  if ((I->kind != PCGC_INS_ALLREDUCE_START && I->kind != PCGC_INS_REDUCESCATTER_START && I->kind != PCGC_INS_WAIT) ||
      I->box < 0 || I->dst < 0)
    return false;
  if (I->src >= 0) return true; /* a reduce-scatter from the full gradient into its slab: no staging */
  const pcgc_plan_buf *B = &P->buf[I->dst];
  return box_bytes(&P->boxes[I->box], B->dtype) == B->bytes;
}

void pcgc_program_free(pcgc_program *p) {
  if (!p) return;
  if (p->dev)
    for (int d = 0; d < p->n_devices; d++) {
      free(p->dev[d].ins);
      free(p->dev[d].buf);
      free(p->dev[d].args);
      free(p->dev[d].boxes);
      free(p->dev[d].send_off);
      free(p->dev[d].send_wait_off);
      free(p->dev[d].send_wait);
      free(p->dev[d].send_done);
    }
  free(p->dev);
  free(p->group_off);
  free(p->group_dev);
  free(p);
}

void pcgc_plan_buf_box(const pcgc_plan_buf *b, pcgc_box *box) {
  box->rank = b->rank;
  for (int d = 0; d < b->rank; d++) {
    box->lo[d] = b->offset[d];
    box->len[d] = b->dims[d];
  }
}

/* ----------------------------------------------------- instructions */

/* Which buffers instruction I reads and writes (codegen_internal.h). */
int pcgc__cg_ins_access(const pcgc_ins *I, const int *args, int *rd, int *nrd, int *wr, int *nwr) {
  int r = 0, w = 0;
#define R(x)                                                                                                   \
  do {                                                                                                         \
    if ((x) >= 0) rd[r++] = (x);                                                                               \
  } while (0)
#define W(x)                                                                                                   \
  do {                                                                                                         \
    if ((x) >= 0) wr[w++] = (x);                                                                               \
  } while (0)
  switch ((pcgc_ins_kind)I->kind) {
  case PCGC_INS_FORWARD:
  case PCGC_INS_BACKWARD:
  case PCGC_INS_BN_STATS:
  case PCGC_INS_BN_APPLY:
  case PCGC_INS_BN_BWD_STATS:
  case PCGC_INS_BN_BWD_APPLY:
  case PCGC_INS_UPDATE:
    if (I->kind == PCGC_INS_UPDATE && I->dst < 0) { /* a bucket's: weights, gradients, m, v; all but the gradients written */
      int k = I->n_args / 4;
      for (int i = 0; i < I->n_args; i++) R(args[I->args + i]);
      for (int i = 0; i < I->n_args; i++)
        if (i < k || i >= 2 * k) W(args[I->args + i]);
      break;
    }
    /* args: the kinds' layouts name which are written; dst lists them too */
    for (int i = 0; i < I->n_args; i++) R(args[I->args + i]);
    W(I->dst);
    R(I->src);
    break;
  case PCGC_INS_COPY:
    R(I->src);
    if (I->add) R(I->dst);
    W(I->dst);
    break;
  case PCGC_INS_ZERO:
    for (int i = 0; I->dst < 0 && i < I->n_args; i++) W(args[I->args + i]);
    W(I->dst);
    break;
  case PCGC_INS_SEED:
    W(I->dst);
    break;
  case PCGC_INS_SEND:
  case PCGC_INS_LOSS:
    R(I->src);
    break;
  case PCGC_INS_RECV:
  case PCGC_INS_BCAST:
  case PCGC_INS_REDUCE:
    R(I->src);
    if (I->add) R(I->dst);
    W(I->dst);
    break;
  case PCGC_INS_ALLREDUCE:
  case PCGC_INS_ALLREDUCE_START:
  case PCGC_INS_WAIT:
  case PCGC_INS_ALLGATHER:
  case PCGC_INS_REDUCESCATTER_START:
    for (int i = 0; is_bucket(I) && i < I->n_args; i++) { /* a bucket */
      R(args[I->args + i]);
      W(args[I->args + i]);
    }
    R(I->dst);
    W(I->dst);
    if (I->src >= 0) R(I->src); /* a reduce-scatter out of place (ZeRO-2) and its WAIT: the full gradient */
    break;
  default:
    break;
  }
#undef R
#undef W
  *nrd = r;
  *nwr = w;
  return r + w;
}

/* ----------------------------------------------------------------- printing */

const char *pcgc_buf_role_name(pcgc_buf_role r) {
  static const char *const names[] = {"value", "grad",  "source",     "source-grad", "opt-m", "opt-v",
                                      "view",  "view-grad", "stage", "stage-grad", "scratch", "recompute",
                                      "saved", "gathered"};
  _Static_assert(sizeof names / sizeof *names == PCGC_BUF_ROLE_COUNT, "one name per buffer role");
  return (unsigned)r < PCGC_BUF_ROLE_COUNT ? names[r] : "?";
}

const char *pcgc_ins_kind_name(pcgc_ins_kind k) {
  static const char *const names[] = {"forward", "backward", "bn-stats", "bn-apply", "bn-bwd-stats", "bn-bwd-apply",
                                      "copy",    "zero",     "send",     "recv",     "bcast",        "reduce",
                                      "allreduce", "allreduce-start", "wait", "update", "loss", "seed",
                                      "allgather", "reducescatter-start"};
  _Static_assert(sizeof names / sizeof *names == PCGC_INS_KIND_COUNT, "one name per instruction kind");
  return (unsigned)k < PCGC_INS_KIND_COUNT ? names[k] : "?";
}

static void fmt_bytes(char *buf, size_t n, int64_t b) {
  if (b < 1024) snprintf(buf, n, "%lld B", (long long)b);
  else if (b < 1024 * 1024) snprintf(buf, n, "%.1f KiB", (double)b / 1024);
  else if (b < (int64_t)1 << 30) snprintf(buf, n, "%.1f MiB", (double)b / (1024.0 * 1024));
  else snprintf(buf, n, "%.2f GiB", (double)b / (1024.0 * 1024 * 1024));
}

static void print_box(FILE *f, const pcgc_box *b) {
  fputc('[', f);
  for (int d = 0; d < b->rank; d++) fprintf(f, "%s%" PRId64 ":%" PRId64, d ? "," : "", b->lo[d], b->lo[d] + b->len[d]);
  fputc(']', f);
}

static const char *node_name(const pcgc_graph *g, int node) {
  return node >= 0 && node < g->n_nodes ? g->nodes[node].name : "-";
}

static void print_buf_ref(FILE *f, const pcgc_device_program *P, const pcgc_graph *g, int b) {
  if (b < 0) {
    fputs("-", f);
    return;
  }
  (void)P;
  (void)g;
  fprintf(f, "b%d", b);
}

void pcgc_program_print(FILE *f, const pcgc_program *p, const pcgc_graph *g, int device, bool streams) {
  char a[32], b[32], c[32];
  fprintf(f, "program: %d devices, %d device groups, %d micro-batch%s (%s), %d stage%s, digest %016llx\n",
          p->n_devices, p->n_groups, p->micro, p->micro == 1 ? "" : "es", pcgc_schedule_name(p->schedule), p->stages,
          p->stages == 1 ? "" : "s", (unsigned long long)p->digest);
  if (p->recompute)
    fprintf(f, "activations recomputed: %lld kernel pieces run again before backward\n", (long long)p->recomputed_pieces);
  if (p->bf16) {
    int64_t w = 0;
    for (int d = 0; d < p->n_devices; d++)
      if (p->dev[d].widen_bytes > w && (device < 0 || d == device)) w = p->dev[d].widen_bytes;
    fmt_bytes(a, sizeof a, w);
    fprintf(f, "bf16 storage: activations and their gradients in bf16, weights and optimizer state in f32; "
               "kernels widen their bf16 arguments into a workspace of up to %s (in staging)\n", a);
  }
  if (!p->p2p_in_order)
    fprintf(f, "messages: some are received in another order than they are sent (host MPI carries them, not NCCL)\n");
  fprintf(f, "%-7s %8s %10s %10s %10s %10s %10s %10s %6s %6s %6s %6s\n", "device", "instrs", "arena", "persistent",
          "peak", "no-reuse", "sends", "staging", "kernel", "p2p", "coll", "bufs");
  for (int d = 0; d < p->n_devices; d++) {
    if (device >= 0 && d != device) continue;
    const pcgc_device_program *P = &p->dev[d];
    const int64_t *k = P->count_by_kind;
    char u[32];
    fmt_bytes(a, sizeof a, P->arena_bytes);
    fmt_bytes(b, sizeof b, P->persistent_bytes);
    fmt_bytes(c, sizeof c, P->peak_bytes);
    fmt_bytes(u, sizeof u, P->unplanned_bytes);
    char sn[32], st[32];
    fmt_bytes(sn, sizeof sn, P->send_bytes);
    fmt_bytes(st, sizeof st, P->send_bytes + P->max_message_bytes + P->request_bytes + P->widen_bytes);
    fprintf(f, "%-7d %8d %10s %10s %10s %10s %10s %10s %6lld %6lld %6lld %6d\n", d, P->n_ins, a, b, c, u, sn, st,
            (long long)(k[PCGC_INS_FORWARD] + k[PCGC_INS_BACKWARD] + k[PCGC_INS_BN_APPLY] + k[PCGC_INS_BN_BWD_APPLY]),
            (long long)(k[PCGC_INS_SEND] + k[PCGC_INS_RECV]),
            (long long)(k[PCGC_INS_BCAST] + k[PCGC_INS_REDUCE] + k[PCGC_INS_ALLREDUCE] + k[PCGC_INS_ALLREDUCE_START] +
                          k[PCGC_INS_ALLGATHER] + k[PCGC_INS_REDUCESCATTER_START]),
            P->n_buf);
  }
  if (!streams) return;
  for (int d = 0; d < p->n_devices; d++) {
    if (device >= 0 && d != device) continue;
    const pcgc_device_program *P = &p->dev[d];
    fprintf(f, "\ndevice %d buffers (id role tensor piece micro bytes at lifetime):\n", d);
    for (int i = 0; i < P->n_buf; i++) {
      const pcgc_plan_buf *B = &P->buf[i];
      pcgc_box bx;
      pcgc_plan_buf_box(B, &bx);
      fmt_bytes(a, sizeof a, B->bytes);
      fprintf(f, "  b%-5d %-11s %-24s %4lld %3d %9s @%-9lld ", i, pcgc_buf_role_name((pcgc_buf_role)B->role),
              node_name(g, B->node), (long long)B->piece, B->micro, a, (long long)B->addr);
      if (B->persistent) fputs("always ", f);
      else if (B->first < 0) fputs("unused ", f);
      else fprintf(f, "%d..%d ", B->first, B->last);
      print_box(f, &bx);
      if (B->alias >= 0) fprintf(f, " in b%d at +%lld", B->alias, (long long)B->alias_at);
      fputc('\n', f);
    }
    fprintf(f, "device %d stream:\n", d);
    for (int i = 0, run_end = 0, k = 0; i < P->n_ins; i++) {
      const pcgc_ins *I = &P->ins[i];
      fprintf(f, "  %5d %-15s %-24s", i, pcgc_ins_kind_name((pcgc_ins_kind)I->kind), node_name(g, I->node));
      if (I->piece >= 0) fprintf(f, " p%lld", (long long)I->piece);
      if (p->micro > 1) fprintf(f, " mb%d", I->micro);
      if (I->dst >= 0) {
        fputs(I->add ? " +=" : " ->", f);
        print_buf_ref(f, P, g, I->dst);
      }
      if (I->src >= 0) {
        fputs(" <-", f);
        print_buf_ref(f, P, g, I->src);
      }
      if (is_bucket(I)) /* the weights of a gradient bucket */
        fprintf(f, " bucket of %d", I->kind == PCGC_INS_UPDATE ? I->n_args / 4 : I->n_args);
      if (I->n_args) {
        fputs(" (", f);
        for (int j = 0; j < I->n_args; j++) {
          if (j) fputc(' ', f);
          print_buf_ref(f, P, g, P->args[I->args + j]);
        }
        fputc(')', f);
      }
      switch ((pcgc_ins_kind)I->kind) {
      case PCGC_INS_SEND: fprintf(f, " to %d tag %d", I->peer, I->tag); break;
      case PCGC_INS_RECV: fprintf(f, " from %d tag %d", I->peer, I->tag); break;
      case PCGC_INS_BCAST:
      case PCGC_INS_REDUCE:
      case PCGC_INS_ALLREDUCE:
      case PCGC_INS_ALLREDUCE_START:
      case PCGC_INS_ALLGATHER:
      case PCGC_INS_REDUCESCATTER_START: {
        fprintf(f, " group {");
        for (int k = p->group_off[I->peer]; k < p->group_off[I->peer + 1]; k++)
          fprintf(f, "%s%d", k > p->group_off[I->peer] ? "," : "", p->group_dev[k]);
        fputc('}', f);
        if (I->root >= 0) fprintf(f, " root %d", I->root);
        if (I->kind == PCGC_INS_ALLREDUCE_START || I->kind == PCGC_INS_REDUCESCATTER_START) fprintf(f, " req %d", I->tag);
        break;
      }
      case PCGC_INS_WAIT: fprintf(f, " req %d", I->tag); break;
      default: break;
      }
      if (I->box >= 0) {
        fputc(' ', f);
        print_box(f, &P->boxes[I->box]);
      }
      if (I->kind == PCGC_INS_SEND && k < P->n_sends && P->send_done && P->send_done[k++] >= 0) {
        if (P->send_done[k - 1] < P->n_ins) fprintf(f, " (from its buffer, done before %d)", P->send_done[k - 1]);
        else fputs(" (from its buffer, done at the end)", f);
      }
      int run = i >= run_end ? pcgc_recv_unpack_run(P, i, NULL, NULL) : 0;
      if (run > 1) { /* received together, unpacked by one launch */
        fprintf(f, " (unpacks %d at once)", run);
        run_end = i + run;
      }
      fputc('\n', f);
    }
  }
}
