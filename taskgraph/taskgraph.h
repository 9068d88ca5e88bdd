/*
 * taskgraph.h — one training iteration of a mapped parallel graph as tasks:
 * what both simulators and codegen walk, so that what the search predicts,
 * what codegen lowers and what the program's simulation times are built
 * from the same pieces, reads, stages and recomputation units.
 *
 *   views      where each node's pieces run (pcgc_view, pcgc_mapping)
 *   pieces     which input pieces each output piece reads, and how many
 *              bytes (pcgc_piece_map: the closed form; pcgc_piece_reads:
 *              every pair, parallel ops included; pcgc_relayout_cells: the
 *              overlapping input cells of a partition/combine/pipeline
 *              slice); which nodes are resident (sources and what only
 *              distributes them: placed where read, nothing computed)
 *   schedule   pipeline stages from the spans of pipelined ops each device
 *              runs; micro-batches in GPipe or 1F1B order
 *   recompute  the graph cut at bottleneck tensors into units (pcgc_cuts):
 *              kernels inside a unit are computed again before backward
 *   tasks      forward, backward, add, optimizer, transfer, collective and
 *              join tasks as arrays (pcgc_tasks), their timing options and
 *              results (pcgc_sim_options, pcgc_sim_result), the report and
 *              the Chrome trace of a timed iteration
 *
 * Who builds what on it: search/sim.c builds the search's estimate (one
 * task per piece, micro-batch and movement, timed event by event);
 * codegen/lower.c builds the program (the same pieces and movements with
 * buffers, copies and staging) and codegen/predict.c times that program
 * into the same pcgc_sim_result. Both take the pieces each piece reads,
 * the relayout cells, the stages and the recomputed nodes from here.
 *
 * Depends on pcg/ (the graph) and cost/ (machines, collectives, optimizer
 * kinds, profiles); nothing here searches.
 */
#ifndef PCGC_TASKGRAPH_H
#define PCGC_TASKGRAPH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cost.h"
#include "pcg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ views */

/* Where a node runs: piece p of its outputs (numbered as pcgc_piece_coords
 * says: shards outermost, then partial sums, then replicas) lives on device
 *     (start + p * stride) mod n_devices.
 * stride 0 puts every piece on `start`, stride 1 on consecutive devices.
 * Ignored for sources, which live wherever they are read (a device loads its
 * data shard and keeps its weight pieces; nothing moves), and for parallel
 * operators that only distribute a source (partition/replicate of an input
 * or a weight): they cost nothing in forward, and their backward is the
 * gradient synchronisation of the weight (see pcgc_simulate). */
typedef struct pcgc_view {
  int start;
  int stride;
} pcgc_view;

/* One view per node: view[node id]. */
typedef struct pcgc_mapping {
  int n_nodes;
  pcgc_view *view;
} pcgc_mapping;

/* The device of piece p under view v on n_devices devices. The common case
 * (p and the stride below D, nothing negative) takes one division at most
 * instead of three, with the same result: the views' loops over every read
 * of a 1,024-device graph spent most of their time dividing. */
static inline int pcgc_view_device(pcgc_view v, int64_t p, int n_devices) {
  int64_t D = n_devices;
  if (p >= 0 && p < D && v.stride >= 0 && v.stride < D && v.start >= 0) {
    int64_t x = p * v.stride + v.start;
    return (int)(x < D ? x : x % D);
  }
  return (int)(((p % D) * (v.stride % D) + v.start) % D);
}

/* dev[p] = pcgc_view_device(v, p, n_devices) for p < P, by adding the
 * stride instead of dividing: loops over every piece of a 1,024-device
 * graph spent most of their time there. */
static inline void pcgc_view_devices(pcgc_view v, int64_t P, int n_devices, int32_t *dev) {
  int64_t D = n_devices;
  if (v.stride >= 0 && v.start >= 0) { /* (p * stride + start) mod D */
    int64_t step = v.stride % D, d = v.start % D;
    for (int64_t p = 0; p < P; p++) {
      dev[p] = (int32_t)d;
      d += step;
      if (d >= D) d -= D;
    }
  } else {
    for (int64_t p = 0; p < P; p++) dev[p] = pcgc_view_device(v, p, n_devices);
  }
}

/* Allocates n_nodes views, each set to `all`. */
pcgc_status pcgc_mapping_init(pcgc_mapping *mp, int n_nodes, pcgc_view all, pcgc_error *err);
void pcgc_mapping_destroy(pcgc_mapping *mp);

/* Order of micro-batches where the loss is pipelined. GPIPE: every forward
 * micro-batch, then every backward one. 1F1B: a device of pipeline stage k
 * (of s; stages are told apart by the first pipelined operator each device
 * runs) starts micro-batch i's forward only after micro-batch i-(s-k)'s
 * backward, so at most s-k micro-batches are in flight on it. */
typedef enum pcgc_schedule { PCGC_SCHEDULE_GPIPE, PCGC_SCHEDULE_1F1B, PCGC_SCHEDULE_COUNT } pcgc_schedule;

const char *pcgc_schedule_name(pcgc_schedule s);            /* "gpipe", "1f1b" */
int pcgc_schedule_from_name(const char *name);             /* -1 if unknown */

/* ----------------------------------------------------------------- pieces */

/* res[node] for every node of g (order: a topological order): a source, or
 * a parallel operator whose input is resident (it only distributes a
 * source), so it is placed where it is read and computes nothing. */
void pcgc_resident_nodes(const pcgc_graph *g, const int *order, bool *res);

/* An ordinary op's piece-to-piece map in closed form: in_piece(p) =
 * sum_j c_j w[j][i] + g[s * n_in + i] + r for output piece p = (c, s, r).
 * By pcg.h's axis maps the input piece an output piece reads is linear in
 * its shard coordinates and replica index plus a term of the sum index
 * alone, so rank + sum calls of pcgc_op_piece_inputs give every piece. */
typedef struct pcgc_piece_map {
  int64_t w[PCGC_MAX_RANK][PCGC_VARIADIC];
  int64_t *g;       /* [sum][n_in], owned; free(g) when done */
  int64_t gcap;
} pcgc_piece_map;

/* Fills pm for node n (input types tin); false when the closed form does
 * not reproduce pcgc_op_piece_inputs on the corner pieces, or (unless
 * `always`) when the op has too few pieces for it to pay: then call
 * pcgc_op_piece_inputs per piece. */
bool pcgc_piece_map_build(pcgc_piece_map *pm, const pcgc_node *n, const pcgc_ptensor *tin, bool always);
void pcgc_piece_map_apply(const pcgc_piece_map *pm, const pcgc_node *n, int64_t p, int64_t *in_piece);

/* A box of a tensor: per dim its first index and length. */
typedef struct pcgc_box {
  int rank;
  int64_t lo[PCGC_MAX_RANK], len[PCGC_MAX_RANK];
} pcgc_box;

/* How a program stores a tensor of dtype t: floating point in f32, the
 * rest as it is. Weights, their gradients, optimizer state and input data
 * are always stored so (f32 master weights). Codegen sizes its buffers by
 * it; the search's estimate its copies and zeroing. */
static inline pcgc_dtype pcgc_stored_dtype(pcgc_dtype t) { return pcgc_dtype_is_float(t) ? PCGC_F32 : t; }

/* How a program stores value `slot` of node `node` of g, and its
 * gradient: pcgc_stored_dtype, except that with bf16 storage (mixed
 * precision, `--precision bf16`) every floating activation and activation
 * gradient is bf16. A loss's output stays f32, and so do sources; a
 * parallel operator's value is stored as its input's. Kernels compute in
 * f32 on bf16 values (the runtime widens a kernel's bf16 arguments into
 * its workspace and rounds its results back to nearest even). */
pcgc_dtype pcgc_value_dtype(const pcgc_graph *g, int node, int slot, bool bf16);
/* The bytes of value (node, slot) as stored (pcgc_value_dtype) over the
 * bytes of its type: what the search's estimate and the device-mapping DP
 * scale a piece's bytes by (1/2 for an f32 activation under bf16). */
double pcgc_value_scale(const pcgc_graph *g, int node, int slot, bool bf16);

/* The box of piece q of t, micro-batch slice mu (of t->micro; 0 when t is
 * not pipelined): its shard, cut into micro-batch slices on the pipelined dim. */
void pcgc_piece_box(const pcgc_ptensor *t, int64_t q, int mu, pcgc_box *b);

/* Batch norm whose output is sharded on a dim other than its channels
 * (dim 1): each channel group's statistics are summed over its pieces
 * before they normalise, forward and backward (codegen's BN_STATS, an
 * all-reduce over the group, BN_APPLY; the simulator's two halves around
 * the same all-reduce). A piece's group is pcgc_bn_group: pieces with the
 * same channel shard and replica index, degree[1] * replica groups in all;
 * the all-reduce carries 2 f64 per local channel. */
bool pcgc_bn_synced(const pcgc_node *n);
int64_t pcgc_bn_group(const pcgc_ptensor *o, int64_t p);

/* One read: piece p of a node reads `bytes` of piece q of input `slot`. */
typedef bool (*pcgc_read_fn)(void *ctx, int64_t p, int slot, int64_t q, double bytes);

/* Every (piece, input piece) pair of node n, in piece order, to fn (false
 * from fn: out of memory). Ordinary ops by their piece map; partition,
 * combine, pipeline and unpipeline read the input piece(s) their piece
 * covers (bytes: the output piece's, combine: each input piece's);
 * replicate the piece it copies, reduce its d partial sums. Inputs whose
 * node is marked in `skip` (may be NULL) are left out. pm: scratch. */
pcgc_status pcgc_piece_reads(const pcgc_graph *g, const pcgc_node *n, const bool *skip, pcgc_piece_map *pm,
                             pcgc_read_fn fn, void *ctx, pcgc_error *err);

/* The reads of a node as a list (pcgc_collect_reads): piece p of node n
 * reads piece q of producer src (its input `slot`), `bytes` of it; only
 * producers that are not resident (res[src] false; res may be NULL: all). */
typedef struct pcgc_read {
  int64_t p;
  int src, slot;
  int64_t q;
  double bytes;
} pcgc_read;

typedef struct pcgc_reads {
  pcgc_read *r;
  int64_t n, cap;
  pcgc_piece_map pm;
} pcgc_reads;

pcgc_status pcgc_collect_reads(pcgc_reads *R, const pcgc_graph *g, const bool *res, const pcgc_node *n,
                               pcgc_error *err);
void pcgc_reads_destroy(pcgc_reads *R);

/* A relayout (partition, combine, pipeline, unpipeline) moves, into output
 * slice (p, mu) of node n, the overlapping part of every input cell with
 * the same sum and replica index: input piece q, micro-batch slice mi, the
 * box `part` (coordinates of the whole tensor, micro-batch slicing
 * included) and its bytes. Cells come in the order of their coordinates
 * (the pipelined dim's micro-batch slice inside its shard). fn returns
 * false to stop. Both the simulator's transfers and codegen's copies and
 * messages are these cells. */
typedef bool (*pcgc_cell_fn)(void *ctx, int64_t q, int mi, const pcgc_box *part, double bytes);
void pcgc_relayout_cells(const pcgc_graph *g, const pcgc_node *n, pcgc_ref src, int64_t p, int mu, pcgc_cell_fn fn,
                         void *ctx);

/* Relayout chains. A partition (one micro-batch slice in and out) whose
 * output one partition or combine alone reads is passed through: codegen
 * lowers no copy or message for it and the simulator no transfer; its
 * reader moves its cells straight from the partition's input, src above:
 * pcgc_relayout_source, the input of the partitions passed through before
 * n, else n's own. Each output piece of a partition lies in one input
 * piece, so the reader moves no more cells than before, in one hop where
 * the chain took two (DLRM's rows split from a table's column shard to a
 * device that only forwards them to their gatherer). */
bool pcgc_relayout_through(const pcgc_graph *g, const pcgc_node *n);
pcgc_ref pcgc_relayout_source(const pcgc_graph *g, const pcgc_node *n);

/* The same cells collected: L->n of them appended at L->c (grown as
 * needed; free L->c when done), L->oom set when memory ran out. */
typedef struct pcgc_cell {
  int64_t q;
  int mi;
  pcgc_box part;
  double bytes;
} pcgc_cell;
typedef struct pcgc_cell_list {
  pcgc_cell *c;
  int64_t n, cap;
  bool oom;
} pcgc_cell_list;
void pcgc_relayout_cell_list(const pcgc_graph *g, const pcgc_node *n, pcgc_ref src, int64_t p, int mu,
                             pcgc_cell_list *L);

/* Whether the backward of relayout n sets its input's gradient instead of
 * adding into it: n is the only reader of its input, and the input and
 * output have the same partial sums and replicas (and, both pipelined, the
 * same micro-batch split), so that n's cells move every element of every
 * input slice exactly once and their gradients cover the input's gradient
 * once, with nothing else adding into it. Then no zeroing, and a message
 * lands in place where its part is a run of the input slice. For a
 * computed input (not resident); codegen and the simulator both ask. The
 * input is the chain's (pcgc_relayout_source): the partitions passed
 * through are each their input's only reader. */
bool pcgc_relayout_grad_sets(const pcgc_graph *g, const pcgc_node *n);

/* How many inputs of g's nodes read r, counting up to `most`. */
int pcgc_graph_readers(const pcgc_graph *g, pcgc_ref r, int most);

/* The most messages a device packs into its send staging in one launch:
 * consecutive sends (codegen's pcgc_send_pack_run; the simulator's
 * transfers of one relayout's piece from one device) pay one launch. */
#define PCGC_PACK_MAX 32

/* The most kernels a zeroing moves up its stream past to join the zeroing
 * before it, one launch for both (codegen's hoist_zeros; the simulator
 * charges a backward's zeroing no launch within so many kernels of the
 * last one it charged on that device). */
#define PCGC_ZERO_HOIST 4
/* Farther up, a zeroing still joins the one before it while the zeroings so
 * joined clear at most so many bytes in all: the buffers they keep alive
 * longer, and the fills they move earlier, stay small (a small layer's
 * gradients, not an embedding table's). */
#define PCGC_ZERO_HOIST_BYTES (256 * 1024)

/* ------------------------------------------------------------------ fans */

/* Replicate and reduce are mirror images (taskgraph/sync.c): one piece on
 * the narrow side (replicate's input piece, reduce's output piece) and the
 * d pieces it fans out to or in from on the wide side (replicate's copies,
 * reduce's partial sums). Data flows narrow -> wide in replicate's forward
 * and reduce's backward (a spread), wide -> narrow otherwise (a gather).
 * How it moves is decided here, once, for the simulator's tasks and
 * codegen's instructions alike (pcgc_fan_move_of). */
typedef enum pcgc_fan_move {
  PCGC_FAN_LOCAL,      /* every wide piece on the narrow piece's device: copies or adds there */
  PCGC_FAN_MESSAGE,    /* one other device: one message between it and the narrow device */
  PCGC_FAN_COLLECTIVE, /* more: one broadcast or reduce over grp[0..n_grp), rooted at the
                          narrow piece's device grp[0] */
  PCGC_FAN_RELAY,      /* more, none of them the narrow piece's device (another pipeline
                          stage's), in a gather or in a spread of values: a broadcast or
                          reduce over dev[0..n_dev) rooted at dev[0], and one message
                          between dev[0] and the narrow device, so that no collective
                          spans two stages (a stage's streams would wait for the next) */
} pcgc_fan_move;

typedef struct pcgc_fan {
  int64_t d;            /* wide pieces: the operator's degree */
  int64_t cap;          /* the largest degree f has room for */
  int64_t *wide;        /* [d]: the wide pieces, in the order of their index j */
  int *wdev;            /* [d]: the device of each */
  int *member;          /* [d]: the index in dev[] of each one's device */
  int *at;              /* [D]: at[X] is X's index in dev[] (for X in dev[] only) */
  int *dev;             /* the distinct devices of the wide pieces, in order of first appearance */
  int n_dev;
  int narrow;           /* the narrow piece's device */
  bool narrow_member;   /* narrow is one of dev[] */
  int *grp;             /* narrow, then the other devices of dev[] in their order */
  int n_grp;            /* 1 + the devices other than narrow */
  int D;
  int *stamp;           /* scratch: [D] */
  int gen;
} pcgc_fan;

/* Room for the fans of replicates and reduces of degree up to max_degree on D devices. */
pcgc_status pcgc_fan_init(pcgc_fan *f, int64_t max_degree, int D, pcgc_error *err);
void pcgc_fan_destroy(pcgc_fan *f);
/* The fan of narrow piece q of replicate or reduce n (non-resident) under mp. */
void pcgc_fan_at(pcgc_fan *f, const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_node *n, int64_t q);
/* How the fan moves data: spread (narrow -> wide) or gather; add: the
 * targets are added into (gradients). A spread of gradients never relays
 * (the relay's first member would forward its own sum with the message). */
pcgc_fan_move pcgc_fan_move_of(const pcgc_fan *f, bool spread, bool add);

/* ------------------------------------------------------ weight gradients */

/* Weight synchronisation (taskgraph/sync.c): each device that reads a weight
 * keeps the box of it its pieces read (a weight read through partitions
 * and replicates: the union of those pieces' boxes, pcgc_piece_box of
 * each; parallel operators keep the logical shape), accumulates that box's
 * gradient and updates it. Devices whose boxes share a cell (the weight
 * cut at every holder's box boundaries) all-reduce that cell's gradient
 * before they update. pcgc_weight_sync_cells calls fn once per cell held
 * by at least min_group of the nh holders (devices hold[i], boxes box[i]),
 * with those holders in hold's order: codegen lowers one non-blocking
 * all-reduce per cell shared by 2 or more, the simulator times the same
 * (min_group 1 where it builds copy 0 alone: the copies share every cell).
 * A scalar weight is one cell. fn returns false to stop; false back when
 * it did or memory ran out (*oom then). */
typedef bool (*pcgc_sync_fn)(void *ctx, const pcgc_box *cell, const int *grp, int ng);

/* The source (weight or input) that node, through the parallel operators
 * that only distribute it, comes from. */
static inline int pcgc_source_of(const pcgc_graph *g, int node) {
  while (pcgc_op_class_of(g->nodes[node].kind) == PCGC_CLASS_PARALLEL) node = g->nodes[node].in[0].node;
  return node;
}
bool pcgc_weight_sync_cells(int rank, int nh, const int *hold, const pcgc_box *box, int min_group, pcgc_sync_fn fn,
                            void *ctx, bool *oom);

/* Gradient buckets. Small all-reduces cost their latency, not their bytes
 * (2(p-1) steps of a ring: 28 us over 8 H100s in the cost model), so the
 * cells that the same devices all-reduce are summed together: one
 * all-reduce over the cells' gradients lying back to back (codegen places
 * each bucket's buffers so in the arena), as PyTorch DDP's buckets. A
 * bucket starts once the last of its cells' gradients is done; buckets
 * form in the order backward finishes the weights (pcgc_weight_grad_order,
 * latest first), so the first to start holds the weights backward reaches
 * first. A bucket holds at most PCGC_BUCKET_BYTES (4 MiB: what an
 * all-reduce moves in the time of its latency between the 8 GPUs of an
 * H100 node is 7 MiB; over PCIe about 1 MiB) and PCGC_BUCKET_MAX cells.
 * Only a cell that every member holds whole (its gradient buffer is the
 * cell: reduced in place) is bucketed; the others keep an all-reduce each.
 * Each member then updates a bucket's weights with one optimizer step over
 * the span of them (their weights, gradients and state lie back to back in
 * the same order: the step is elementwise), one launch instead of one per
 * weight.
 * The cap does not depend on the machine, so a plan lowers to the same
 * program wherever it runs. The simulator and codegen both call this on
 * the same cells, so the estimate times the buckets the program runs. */
#define PCGC_BUCKET_MAX 32
#define PCGC_BUCKET_BYTES (4.0 * 1024 * 1024)

typedef struct pcgc_grad_cell {
  int weight;       /* the weight node */
  int order;        /* its pcgc_weight_grad_order key */
  int ng;           /* members, grp[0..ng), in any order */
  const int *grp;
  double bytes;     /* the cell's gradient */
  bool bucketable;  /* held whole by every member (reduced in place), not split by ZeRO */
} pcgc_grad_cell;

/* key[w] for every weight node w (others -1): the topological position of
 * the first operator that reads it (through parallel operators), which is
 * the last whose backward adds into its gradient. order: a topological
 * order of g. */
void pcgc_weight_grad_order(const pcgc_graph *g, const int *order, int *key);

/* bucket[i] for each of the n cells: cells in one bucket share their
 * members and are bucketable; cells not bucketed are alone in theirs.
 * Buckets are numbered in the order they form. Returns the number of
 * buckets, -1 out of memory. */
int pcgc_grad_buckets(int n, const pcgc_grad_cell *cells, int *bucket);

/* The cells of each of nb buckets: bucket k's are ord[off[k] .. off[k + 1]),
 * in ascending order (off has room for nb + 1, ord for n). False: out of
 * memory. */
bool pcgc_grad_bucket_cells(int n, const int *bucket, int nb, int *off, int *ord);

/* The bytes a bucket's cells span in the arena: each cell's bytes rounded
 * up to 64 (codegen's buffer alignment). */
static inline double pcgc_bucket_bytes(double bytes) { return (double)(((int64_t)bytes + 63) & ~(int64_t)63); }

/* ZeRO-1 (sharded optimizer state): the members of a cell that each hold
 * exactly that cell (their box is the cell) split its update. Member j of
 * n (the group's devices in ascending order: the runtime's group ranks)
 * keeps slab j of n along the cell's first dim longer than 1 (rows
 * [j L / n, (j + 1) L / n) of its L, rounded down: they differ by one row
 * at most), contiguous in the row-major buffer of the cell: it updates
 * that slab alone and keeps optimizer state for it alone, and the members
 * then all-gather the updated slabs in place. False (the cell's update is
 * not split) for a scalar cell, n < 2, or fewer rows than members. */
bool pcgc_zero_shard(const pcgc_box *cell, int n, int j, pcgc_box *out);

/* Box arithmetic: the intersection (false: empty), the smallest box
 * holding both (into a), equality, and the elements of a box. */
bool pcgc_box_intersect(const pcgc_box *a, const pcgc_box *b, pcgc_box *out);
void pcgc_box_union(pcgc_box *a, const pcgc_box *b);
bool pcgc_box_equal(const pcgc_box *a, const pcgc_box *b);
int64_t pcgc_box_elems(const pcgc_box *b);
/* Whether box x, inside box `in`, is one contiguous run of in's row-major
 * elements (whole in every dim inside its outermost partial one, one wide
 * outside it): a message of x then lands in place, with no unpacking.
 * *first (may be NULL): the run's first element's index in `in`. */
bool pcgc_box_contiguous_in(const pcgc_box *x, const pcgc_box *in, int64_t *first);

/* --------------------------------------------------------------- schedule */

/* Pipeline stages from the span of topological positions of the pipelined
 * ops each device runs (first[d] < 0: none): devices whose spans overlap
 * work on the same layers (the tensor-parallel ranks of a stage, whose
 * first ops differ, and the data-parallel copies) and share a stage;
 * stages are numbered in the order of their spans. stage[d] = -1 for
 * devices without one; tmp has room for D ints. Returns the number of
 * stages (1 if none). The simulator and codegen both use it, so 1F1B holds
 * the same micro-batches in flight in both. */
int pcgc_pipeline_stages(int D, const int *first, const int *last, int *stage, int *tmp);

/* -------------------------------------------------------------- recompute */

/* A graph cut at bottleneck tensors (taskgraph/cuts.c): in the topological
 * order, a cut after position i is crossed by the tensors of computed
 * nodes at or before i that are read after i; one crossed by exactly one
 * tensor, not a partial sum, is a bottleneck. Used by recomputation's
 * units and by the segmented joint search (search/segment.c). */
typedef struct pcgc_cuts {
  const pcgc_graph *g;
  int n;
  int *order, *pos;     /* topological order, and each node's position in it */
  bool *res;            /* resident, or computed from weights alone */
  int *seg;             /* node -> segment, -1: outside every segment */
  int n_seg;
  pcgc_ref *out;        /* per segment: the tensor it hands on ({-1, -1}: none) */
} pcgc_cuts;

/* Cuts g into segments of about `target` computed nodes (0: about sqrt(n)
 * of its n). false on out of memory; P is to be freed either way. */
bool pcgc_cuts_build(pcgc_cuts *P, const pcgc_graph *g, int target);
void pcgc_cuts_free(pcgc_cuts *P);

/* The recomputation units of g: g cut at bottleneck tensors into segments
 * of about sqrt(n) of its n computed nodes. Returns unit[node] (-1:
 * resident, or computed from weights alone and read in several units),
 * *n_units, and (*checkpoint)[node]: its output is the one tensor crossing
 * a cut. One unit when there is no bottleneck. NULL on out of memory; the
 * caller frees both. */
int *pcgc_checkpoint_units(const pcgc_graph *g, int *n_units, bool **checkpoint);

/* Activation recomputation (pcgc_sim_options.recompute): recomputed[x] is
 * true for the kernels (not the loss) whose outputs are not kept but
 * computed again before backward: those inside a unit that are not the
 * unit's cut tensor. What the simulator costs is what codegen lowers.
 * recomputed has n_nodes entries. */
pcgc_status pcgc_recomputed_nodes(const pcgc_graph *g, bool *recomputed, pcgc_error *err);

/* ------------------------------------------------------------------ tasks */

typedef struct pcgc_sim_options {
  pcgc_optim_kind optimizer;  /* state kept per weight, update cost (default Adam) */
  pcgc_schedule schedule;    /* default GPipe */
  pcgc_comm_algo algo;       /* collectives (default AUTO) */
  bool overlap;              /* default true; false: a transfer or collective also
                                holds the compute stream of every device it
                                involves (no communication/compute overlap). On a
                                CPU machine a gradient all-reduce holds its members'
                                streams either way (the ranks' cores do its work) */
  const char *trace_path;    /* Chrome trace JSON of every task (NULL: none),
                                written atomically (temporary file, rename) */
  const pcgc_profile *profile; /* measured kernel times (NULL, the default: none).
                                When a node's op, attribute text, dtype and input
                                piece shapes match an entry, its forward and
                                backward tasks take the entry's times in place of
                                the roofline (launch overhead included); other
                                tasks keep the roofline. Not owned. */
  bool recompute;            /* activation recomputation (default false): see
                                pcgc_simulate's memory rule */
  int zero;                  /* ZeRO stage (default 0): 1, the holders of a weight cell
                                that each hold it whole reduce-scatter its gradient,
                                update one slab of it each, keep optimizer state for
                                that slab alone and all-gather the slabs after
                                (pcgc_zero_shard); 2, where a step has one micro-batch,
                                each keeps its gradient's slab alone as well, the full
                                gradient only while in flight; 3, with one micro-batch, the weights as well:
                                each keeps its slab and all-gathers the cell before its
                                first read in forward and again in backward (their memory:
                                the slabs and the cells of the op that reads the most);
                                as codegen's option of the same name */
  bool bf16;                 /* bf16 storage (default false): activations and their
                                gradients kept, moved and zeroed in bf16, each kernel's
                                bf16 arguments widened to f32 in its workspace, as
                                codegen's option of the same name (pcgc_value_dtype) */
  int replicas, replica_stride; /* a hint (default 0: none) from a builder that laid
                                the strategy out as `replicas` identical copies:
                                within each block of replicas × replica_stride
                                devices, copy r on devices [r·stride, (r+1)·stride),
                                talking to the others only through collectives
                                (the expert grid's data parallelism). Where the
                                machine's ports are not shared and the copies are
                                built alike (each operator's pieces on every copy
                                paired with copy 0's, on its devices moved by the
                                copy's offset, reading paired pieces), only copy
                                0's tasks are built, as with copies_alike; where
                                they are not but every device carries its first
                                copy's load, only copy 0 runs in the event loop,
                                the others take its times; else (or when a
                                transfer crosses copies) all run. Copies, then
                                pairs of copies, fours, ... are tried. */
  bool copies_alike;         /* with replicas: the builder vouches that the copies
                                are alike (the expert grid builds them so), and
                                only copy 0's tasks are built at all, with the
                                collectives they take part in over every copy;
                                the other copies take copy 0's times and memory.
                                A transfer that crosses copies (nothing the grid
                                builds) makes it build everything instead.
                                Default false. */
  struct pcgc_sim_memo *memo; /* with replicas: operators whose copies were found
                                built alike, by content (pcgc_sim_memo_new), so a
                                search that simulates many rewrites of one graph
                                checks each operator once, not per rewrite and per
                                copy. Shared by threads; not owned. Default NULL */
  bool oom_skips_run;        /* a search that wants no time of a strategy that does
                                not fit (default false): when a device's memory
                                exceeds the machine's, the event loop is skipped and
                                iteration_time is infinite (memory is complete) */
  double give_up_after;      /* s (default 0: never): a search's bound, the best time
                                found so far. Once the simulated clock passes it the
                                event loop stops: iteration_time is infinite and
                                gave_up set (memory is complete; times are not).
                                Sooner, while the task graph is built: once the tasks
                                made so far that hold one device's compute stream
                                take longer than it (the stream runs them one at a
                                time, so no schedule is faster), the build stops too
                                (stopped_building: memory not known either) */
} pcgc_sim_options;

void pcgc_sim_options_default(pcgc_sim_options *o);

typedef enum pcgc_task_kind {
  PCGC_TASK_FORWARD,     /* one piece of one micro-batch of an ordinary op */
  PCGC_TASK_BACKWARD,    /* its backward */
  PCGC_TASK_ADD,         /* a reduce adding partial sums that arrived point to point */
  PCGC_TASK_OPTIMIZER,   /* update of one weight piece on one device */
  PCGC_TASK_TRANSFER,    /* point to point, one link */
  PCGC_TASK_COLLECTIVE,  /* all-reduce, broadcast or reduce over a device group */
  PCGC_TASK_JOIN,        /* bookkeeping: no duration, no resource */
  PCGC_TASK_STAGE,       /* a message's bytes copied into its send buffer, or out of the receive buffer */
  PCGC_TASK_KIND_COUNT
} pcgc_task_kind;

const char *pcgc_task_kind_name(pcgc_task_kind k);         /* "forward", ... */

typedef struct pcgc_sim_device {
  double compute;       /* s its compute stream is busy */
  double idle;          /* iteration_time - compute */
  pcgc_memory memory;   /* at the forward/backward boundary, the peak (see pcgc_simulate) */
  bool oom;             /* memory.total > pcgc_machine_usable_memory */
} pcgc_sim_device;

typedef struct pcgc_sim_result {
  double iteration_time;  /* s: when the last task ends */
  double forward_time;    /* s: when the last forward task (compute or transfer) ends */
  double critical_path;   /* s: the longest chain of dependent tasks, ignoring contention:
                             a lower bound of iteration_time */
  double task_time;       /* s: the sum of every task's duration: an upper bound */
  double compute_min, compute_mean, compute_max;  /* over the devices used, s */
  double bytes_intra, bytes_inter;  /* bytes moved over each link class (collectives:
                                       their ring algorithm's traffic) */
  double capacity;        /* usable memory per device, bytes */
  int n_devices;          /* of the machine: device[] has them all */
  int used_devices;       /* that run a task or hold memory */
  int oom_devices;        /* devices whose memory exceeds capacity */
  int stages, micro_batches;  /* pipeline stages and micro-batches (1, 1 if none) */
  pcgc_optim_kind optimizer;
  pcgc_schedule schedule;
  bool recompute;
  bool profiled;              /* o->profile was set: then by pcgc_profile_source (NONE: the
                                 roofline), the nodes with kernels and the weight pieces
                                 whose updates took each kind of time */
  int profile_kernels[PCGC_PROFILE_SOURCE_COUNT];
  int profile_updates[PCGC_PROFILE_SOURCE_COUNT];
  pcgc_sim_device *device;    /* [n_devices], owned */
  int64_t n_tasks, n_edges;
  int64_t tasks_by_kind[PCGC_TASK_KIND_COUNT];
  double build_seconds, run_seconds;  /* wall time: task graph, event loop */
  bool symmetric;                     /* only the first of the replicas ran (options.replicas) */
  bool gave_up;                       /* the clock passed options.give_up_after: iteration_time
                                         is infinite, the per-device times partial */
  bool stopped_building;              /* gave up before the event loop: the tasks made so far that
                                         hold one device's compute stream (its kernels, the
                                         broadcasts and reduces it takes part in) already took
                                         longer than options.give_up_after. Memory, devices and
                                         task counts are then partial (oom_devices 0);
                                         critical_path and task_time hold that device's time */
  bool program;               /* a program's simulation (codegen.h, pcgc_program_simulate): n_tasks
                                 counts instructions, n_edges messages and collectives */
} pcgc_sim_result;

void pcgc_sim_result_destroy(pcgc_sim_result *r);
/* The largest memory of any device of r (bytes). */
double pcgc_sim_result_max_memory(const pcgc_sim_result *r);

/* Prints the result: iteration time, compute and idle per device (min,
 * mean, max), bytes per link class, memory per device against capacity and
 * the devices out of memory, tasks by kind, simulation wall time. `title`
 * (may be NULL) heads it. */
void pcgc_sim_report(FILE *f, const pcgc_sim_result *r, const pcgc_machine *m, const char *title);

/* Phase of the iteration a task belongs to. */
enum { PCGC_PHASE_FORWARD, PCGC_PHASE_BACKWARD, PCGC_PHASE_UPDATE };

/* The reduce collective (timed as an all-reduce), beside pcgc_collective. */
#define PCGC_COLL_REDUCE PCGC_COLL_COUNT

/* The tasks of an iteration, one entry per task, structure-of-arrays so an
 * event loop touches only what it needs. */
typedef struct pcgc_tasks {
  int32_t n, cap;
  double *dur;       /* s */
  uint8_t *kind;     /* pcgc_task_kind */
  uint8_t *phase;    /* PCGC_PHASE_* */
  uint8_t *coll;     /* collectives: pcgc_collective or PCGC_COLL_REDUCE */
  int32_t *dev;      /* compute: its device; transfer: the sender; collective: its first device */
  int32_t *peer;     /* transfer: the receiver; collective: the number of devices */
  int32_t *node;     /* the graph node it belongs to (-1: none) */
  int32_t *piece;    /* output piece (-1: none) */
  int32_t *micro;    /* micro-batch */
  int32_t *res_off;  /* communication: resources res[res_off .. res_off + res_n) */
  int32_t *res_n;
  double *bytes;     /* communication: bytes of the piece moved */
  double *lat;       /* communication: the part of dur that is latency, on no link port (pcgc_comm_latency) */
  double *start;     /* filled by the event loop */
  int32_t *res;
  int64_t n_res, cap_res;
} pcgc_tasks;

/* Frees every array of T (NULL ones too) and zeroes it. */
void pcgc_tasks_release(pcgc_tasks *T);

static inline bool pcgc_task_is_compute(int kind) {
  return kind == PCGC_TASK_FORWARD || kind == PCGC_TASK_BACKWARD || kind == PCGC_TASK_ADD ||
         kind == PCGC_TASK_OPTIMIZER || kind == PCGC_TASK_STAGE;
}

/* Writes every task but the joins as a Chrome trace (JSON object format):
 * one process per device, compute on thread 0, communication on thread 1
 * (transfers on the sender, collectives on their first device). Atomic:
 * written to PATH.tmp, flushed, fsync'ed, renamed over PATH. */
pcgc_status pcgc_tasks_write_trace(const char *path, const pcgc_graph *g, const pcgc_machine *m,
                                   const pcgc_tasks *t, pcgc_error *err);

#ifdef __cplusplus
}
#endif
#endif /* PCGC_TASKGRAPH_H */
