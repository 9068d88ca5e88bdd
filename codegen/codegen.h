/*
 * codegen.h — lowering a mapped parallel graph to one ordered instruction
 * stream per device: the program the runtime executes (runtime/runtime.h).
 *
 * Placement is the simulator's (search.h, pcgc_view): piece p of a computed
 * node lives on device (start + p * stride) mod N; sources (weights, inputs)
 * and the parallel operators that only distribute them are "resident": each
 * device keeps the box of the source that its kernels read (the bounding box
 * of the pieces), so nothing moves in forward.
 *
 * What each part of the graph becomes, per device:
 *   - an ordinary op: FORWARD per output piece and micro-batch on its device,
 *     BACKWARD the same (only where a gradient reaches a weight); a sharded
 *     batch norm becomes BN_STATS, an ALLREDUCE of the statistics over the
 *     devices of its channel group, BN_APPLY (and the same in backward);
 *   - an input piece on another device: SEND on its owner, RECV on the
 *     reader (once per piece and reader); its gradient comes back the same way
 *     and is added;
 *   - partition, combine, pipeline, unpipeline: the overlapping boxes of
 *     input and output pieces: COPY when both are on one device, SEND/RECV
 *     otherwise;
 *   - replicate: nothing locally (the replica on its source's device is the
 *     source's buffer), SEND/RECV to one other device, BCAST to two or
 *     more; backward sums the copies' gradients (REDUCE to the owner);
 *   - reduce: partial sums COPY-added locally, RECV-added from one other
 *     device, REDUCE from two or more; backward broadcasts the gradient;
 *   - a BCAST whose root is not one of the devices it reaches (the source
 *     on one pipeline stage, the copies on the next stage's tensor-parallel
 *     group) is a SEND to the first of them and a BCAST among them, and a
 *     REDUCE whose root is not among the summed devices a REDUCE to the
 *     first of them and a SEND on: no collective spans two stages, whose
 *     streams would otherwise wait for each other (LLaMA-3 70B at dp 2 x
 *     tp 8 x pp 16: the program's step 191.9 s, now 105.6 s);
 *   - a weight: the devices that keep an element of it all-reduce its
 *     gradient (ALLREDUCE_START, non-blocking, as soon as the last backward
 *     that writes it is done; WAIT before UPDATE), then every copy takes the
 *     optimizer step, so copies stay identical; with options.zero each of a
 *     cell's holders steps its slab and they all-gather the slabs (ZeRO-3:
 *     each keeps only its slab, and the cell is all-gathered into a
 *     transient buffer before its first read in forward and in backward).
 *
 * Order. The instructions form a task graph whose edges are the buffers'
 * read/write dependencies in a sequential order (forward, backward, update)
 * plus send->receive and, for 1F1B, "micro-batch i's forward on a stage-k
 * device after micro-batch i-(s-k)'s backward". One global list schedule
 * (smallest priority first among ready tasks: micro-batch slot, then
 * topological position) orders it; each device's stream is its projection.
 * So every device meets the collectives of a group in the same order, a
 * receive always follows its send in that order, and with non-blocking sends
 * no stream can wait for another in a cycle: a plan cannot deadlock. Then a
 * RECV moves down its stream past the device's own sends that follow it
 * (schedule.c, sink_recvs), passing only instructions that wait for nothing
 * received after it in the global order, so the argument still holds.
 * And a kernel or a zeroing moves up past the receives just before it that
 * it does not need (a forward kernel also past the sends that pass on what
 * they bring: a relay; a zeroing also past a non-blocking collective's
 * start), so that a device's own work does not wait behind others'
 * messages (schedule.c, hoist_work): that is another valid global order,
 * kernels and zeroings wait for nothing.
 *
 * Recomputation (options.recompute): the kernels pcgc_recomputed_nodes
 * names keep their outputs only through forward; before the first backward
 * that reads such a piece, its device runs the piece's FORWARD again into a
 * RECOMPUTE buffer (and, first, those of its inputs that are recomputed on
 * the same device), so a unit is made again from its kept cut tensor and
 * lives only while its backward runs (a local replica of a recomputed piece
 * reads the recomputed one). Pieces received from other devices, sharded
 * batch norms and inputs of other units stay kept. A backward piece's
 * zeroing of the gradients it adds into and its recomputation wait for the
 * gradients of its outputs: the global order would otherwise run them as
 * soon as they are ready (a stage waiting for its gradient would zero and
 * recompute every layer at once, and hold all of it).
 * Pipeline stages (1F1B's in-flight limit): devices whose spans of
 * pipelined ops overlap share a stage, as in the simulator.
 * Memory. After ordering, each buffer lives from its first to its last
 * instruction in the step (weights, their gradients and optimizer state, and
 * input data all the time); buffers whose lifetimes do not overlap share
 * bytes (greedy first fit by size). A local COPY of one buffer whole into a
 * contiguous run of another, or of a whole buffer out of a run of another,
 * is not run where nothing else touches those bytes differently: the whole
 * one lies inside the other (`alias`; schedule.c, alias_copies). The runtime allocates one arena per
 * device of `arena_bytes` before the first step.
 *
 * Send staging. A SEND packs its box into the device's send staging
 * (`send_off[k]` for its k-th SEND) and goes on. Its bytes are free again
 * from the sender's first instruction that comes after the matching RECV in
 * the global order: a SEND that reuses bytes first completes the sends that
 * held them (`send_wait`: the runtime waits for them, the prediction until
 * they arrive), which cannot deadlock, because each of those receives
 * comes earlier in the one order that every stream follows. Staging offsets are planned like the arena (first fit over those
 * lifetimes), so a pipeline stage holds the messages of the micro-batches
 * in flight, not of the whole step; `send_bytes` is the planned size.
 *
 * Sends from their buffers. A SEND of a contiguous run of a buffer that is
 * not persistent and that no instruction writes after the SEND is not
 * staged (`send_off[k]` -1, options.sends_in_place): it goes straight from
 * the buffer, which lives until the send completes, before instruction
 * `send_done[k]`: the first from which on every instruction of the stream
 * was placed after the matching RECV in the global order. "Placed" is the
 * position an instruction had before sink_recvs moved receives down (each
 * keeps it through the later passes). That wait cannot deadlock either:
 * take the stream whose earliest instruction not yet done comes first in
 * the global order (at position x). Its RECVs and collectives have nothing
 * moved past them from before, so a RECV or collective it waits at sits at
 * x, after its send or beside its peers in the order, which then cannot be
 * waiting at anything placed before x; a send it completes has its receive
 * placed before x, so done on a stream whose pending work is all placed at
 * x or later. A GPU sending through host MPI copies the run to a host
 * buffer of that send's own; NCCL sends from the buffer itself.
 *
 * Example:
 *     pcgc_program *p;
 *     pcgc_codegen_options o;
 *     pcgc_codegen_options_default(&o);
 *     if (pcgc_codegen(g, &mp, n_devices, &o, &p, &err) == PCGC_OK) {
 *       pcgc_program_print(stdout, p, g, -1, false);  // per device buffers and totals
 *       pcgc_program_free(p);
 *     }
 */
#ifndef PCGC_CODEGEN_H
#define PCGC_CODEGEN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cost.h"
#include "pcg.h"
#include "taskgraph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pcgc_buf_role {
  PCGC_BUF_VALUE,       /* a piece (and micro-batch) of a computed tensor */
  PCGC_BUF_GRAD,        /* its gradient */
  PCGC_BUF_SOURCE,      /* the box of a weight or input this device keeps */
  PCGC_BUF_SOURCE_GRAD, /* a weight box's gradient */
  PCGC_BUF_OPT_M,       /* optimizer state of a weight box (momentum / Adam m) */
  PCGC_BUF_OPT_V,       /* Adam v */
  PCGC_BUF_VIEW,        /* a resident piece cut out of the source box */
  PCGC_BUF_VIEW_GRAD,
  PCGC_BUF_STAGE,       /* a piece of another device's tensor, received */
  PCGC_BUF_STAGE_GRAD,  /* the gradient to send back */
  PCGC_BUF_SCRATCH,     /* partial sums to reduce, batch-norm statistics (f64) */
  PCGC_BUF_RECOMPUTE,   /* a piece computed again before backward (recomputation) */
  PCGC_BUF_SAVED,       /* what a kernel piece's forward keeps for its backward (save_for_backward) */
  PCGC_BUF_GATHER,      /* ZeRO-3: a weight cell all-gathered from its holders' slabs, for forward
                           (micro 0) or backward (micro 1) alone */
  PCGC_BUF_ROLE_COUNT
} pcgc_buf_role;

const char *pcgc_buf_role_name(pcgc_buf_role r);

/* A buffer of one device: a box of the logical tensor of (node, slot). */
typedef struct pcgc_plan_buf {
  uint8_t role;          /* pcgc_buf_role */
  pcgc_dtype dtype;      /* storage: f32 for float tensors, f64 scratch, i32/i64 */
  int node, slot;        /* the tensor (for sources: the weight or input node) */
  int64_t piece;         /* piece index (-1: a box that is no piece) */
  int micro;
  int rank;
  int64_t dims[PCGC_MAX_RANK];    /* local dims */
  int64_t offset[PCGC_MAX_RANK];  /* first logical index in each dim */
  int64_t bytes;
  int64_t addr;          /* byte offset in the device's arena */
  int first, last;       /* instructions that use it first and last (-1: unused) */
  bool persistent;       /* lives across steps (weights, state, data) */
  int alias;             /* -1, or the buffer whose bytes it shares: it lies at addr = that
                            buffer's addr + alias_at (a local copy the program does not run) */
  int64_t alias_at;
} pcgc_plan_buf;

/* The most buffers one ZERO instruction clears (PCGC_ZERO_HOIST, the most
 * kernels a zeroing moves up past to join the one before it: taskgraph.h). */
#define PCGC_ZERO_MAX 32

typedef enum pcgc_ins_kind {
  PCGC_INS_FORWARD,     /* kernel: args in[n_in], out[n_out] (then a SAVED buffer, if any) */
  PCGC_INS_BACKWARD,    /* kernel: args in, out, dout, din (-1: not wanted); adds into din */
  PCGC_INS_BN_STATS,    /* adds a piece's per-channel sum, sumsq into src scratch [0, 2C) */
  PCGC_INS_BN_APPLY,    /* normalises with the scratch statistics */
  PCGC_INS_BN_BWD_STATS,/* adds dsum, dxsum into scratch [2C, 4C) */
  PCGC_INS_BN_BWD_APPLY,
  PCGC_INS_COPY,        /* dst (+)= src over `box` */
  PCGC_INS_ZERO,        /* dst = 0; dst -1: every buffer args[args .. args + n_args) = 0, at most
                           PCGC_ZERO_MAX, in one launch (a backward piece's gradients) */
  PCGC_INS_SEND,        /* src over `box` to device `peer` (non-blocking), `tag` */
  PCGC_INS_RECV,        /* dst (+)= `box` from device `peer`, `tag` (set over a contiguous run of
                           dst: received in place, pcgc_recv_in_place) */
  PCGC_INS_BCAST,       /* group `peer`, root device `root`: root's src box to every dst (+)= */
  PCGC_INS_REDUCE,      /* group `peer`: the sum of every member's src box into root's dst (+)= */
  PCGC_INS_ALLREDUCE,   /* group `peer`: dst box summed over the group, in place (blocking) */
  PCGC_INS_ALLREDUCE_START, /* the same, non-blocking: request slot `tag`. dst -1: a gradient
                           bucket, the whole buffers args[args .. args + n_args) (pcgc_grad_buckets,
                           at most PCGC_BUCKET_MAX), summed by one all-reduce over the span they
                           lie in (pcgc_allreduce_span) */
  PCGC_INS_WAIT,        /* completes request slot `tag`: dst over `box` (or a bucket's buffers in
                           args), as its START named them */
  PCGC_INS_UPDATE,      /* optimizer step: dst weight box, src gradient, args m, v; with a box
                           (ZeRO-1): that slab of dst and src alone, m and v hold just it. dst -1:
                           a gradient bucket's weights, args their weights, gradients, m and v
                           (k each, -1 where the optimizer keeps no such state), each list lying
                           back to back in the arena in the same order: one step over the spans
                           (pcgc_update_spans) */
  PCGC_INS_LOSS,        /* adds src's element (replica 0) to the step's loss, read once the step
                           is done (src lives to the stream's end): no wait in the step */
  PCGC_INS_SEED,        /* dst = d loss / d loss piece: 1 for replica 0, else 0; dst is kept
                           (persistent), so the runtime writes it in its first step only */
  PCGC_INS_ALLGATHER,   /* group `peer` of n: dst (whole) is n slabs, the j-th member's slab j
                           (pcgc_zero_shard); each member's slab to all, in place (blocking).
                           src >= 0 (ZeRO-3): src, a buffer of slab j alone, is that slab */
  PCGC_INS_REDUCESCATTER_START, /* group `peer` of n, non-blocking, request slot `tag`: the cell
                           (`box`, a whole buffer) is n slabs as ALLGATHER's. src -1: dst is the
                           cell, and the j-th member's slab j becomes the group's sum in place (its
                           other slabs are left undefined). src >= 0 (ZeRO-2): src is the cell and
                           dst, a buffer of slab j alone, receives the sum. WAIT (with the same dst
                           and src) ends it */
  PCGC_INS_KIND_COUNT
} pcgc_ins_kind;

const char *pcgc_ins_kind_name(pcgc_ins_kind k);

typedef struct pcgc_ins {
  uint8_t kind;          /* pcgc_ins_kind */
  bool add;              /* COPY, RECV, BCAST, REDUCE: add into dst instead of setting it */
  int node;              /* the graph node it belongs to (-1: none) */
  int64_t piece;
  int micro;
  int dst, src;          /* buffer ids of this device (-1: none) */
  int peer;              /* SEND/RECV: device; collectives: group id */
  int root;              /* BCAST/REDUCE: root device */
  int tag;               /* SEND/RECV: message tag; START/WAIT: request slot */
  int args, n_args;      /* kernels, UPDATE: buffer ids at program args[args ..] */
  int box;               /* region (index into boxes, -1: the whole dst) */
} pcgc_ins;

typedef struct pcgc_device_program {
  int n_ins, n_buf, n_args, n_box;
  pcgc_ins *ins;
  pcgc_plan_buf *buf;
  int *args;
  pcgc_box *boxes;
  int n_requests;              /* non-blocking collective slots */
  int64_t arena_bytes;         /* one allocation holds every buffer */
  int64_t persistent_bytes;    /* of which weights, gradients, state, data */
  int64_t peak_bytes;          /* most bytes live at one instruction (<= arena) */
  int64_t unplanned_bytes;     /* sum of every buffer's bytes, without reuse */
  int64_t send_bytes;          /* staging for non-blocking sends: the most they hold at once */
  int n_sends;                 /* SEND instructions in the stream */
  int64_t *send_off;           /* [n_sends]: the k-th SEND's staging offset (see "Send staging"); -1: sent from its buffer */
  int *send_wait_off;          /* [n_sends + 1]: before packing, the k-th SEND completes the sends */
  int *send_wait;              /* send_wait[send_wait_off[k] .. send_wait_off[k + 1]) (earlier ones
                                  whose bytes it reuses and that no SEND between completed) */
  int *send_done;              /* [n_sends] or NULL (none): -1 for a SEND through staging; for one
                                  straight from its buffer (a contiguous run that nothing writes
                                  after it; send_off -1), the instruction before which it is
                                  completed (n_ins: at the step's end); the buffer lives until
                                  then ("Sends from their buffers" above) */
  int64_t max_message_bytes;   /* largest receive or collective region */
  int64_t request_bytes;       /* staging of the non-blocking all-reduces that are not in place */
  int64_t widen_bytes;         /* bf16 storage: the f32 copies of one kernel's bf16 arguments, the
                                  most any kernel needs (the runtime's widening workspace) */
  int64_t count_by_kind[PCGC_INS_KIND_COUNT];
} pcgc_device_program;

typedef struct pcgc_program {
  int n_devices;
  pcgc_device_program *dev;    /* [n_devices] */
  int n_groups;
  int *group_off;              /* group k: devices group_dev[group_off[k] .. group_off[k+1]), ascending */
  int *group_dev;
  int micro;                   /* micro-batches (1: none) */
  int stages;
  pcgc_schedule schedule;
  bool recompute;              /* activations recomputed (pcgc_recomputed_nodes) */
  int zero;                    /* ZeRO stage (options.zero) */
  bool bf16;                   /* activations stored in bf16 (options.bf16) */
  int64_t recomputed_pieces;   /* FORWARD instructions run again in backward, over all devices */
  bool p2p_in_order;           /* every device receives each peer's messages in the order the peer
                                  sends them: what NCCL's point to point needs (it matches by order;
                                  MPI by tag). The runtime uses host MPI for messages otherwise */
  uint64_t digest;             /* xxHash of every stream and buffer table */
  int64_t n_tasks;
} pcgc_program;

typedef struct pcgc_codegen_options {
  pcgc_schedule schedule;      /* order of micro-batches (default GPipe) */
  pcgc_optim_kind optimizer;   /* state buffers kept (default Adam: m and v) */
  bool recompute;              /* activation recomputation, as the simulator's (see above) */
  int zero;                    /* ZeRO stage. 1: the devices that hold a weight cell whole each
                                  sum one slab of its gradient (REDUCESCATTER_START, in place of
                                  the all-reduce), update that slab alone (pcgc_zero_shard: an
                                  UPDATE with a box, optimizer state for the slab alone) and
                                  all-gather the slabs (ALLGATHER); other cells update whole, as
                                  without. 2: where the step has one micro-batch, besides, each
                                  keeps a buffer of its gradient's slab alone, which the
                                  reduce-scatter fills from the full gradient; that one lives from
                                  its backward until the WAIT, right after the device's next
                                  gradient start (ZeRO-2). 3: where the step has one micro-batch,
                                  the weights as well: each member
                                  keeps only its slab (the update's, a persistent SOURCE buffer)
                                  and all-gathers the cell into a transient GATHER buffer before
                                  its first read in forward and again in backward; no all-gather
                                  after the update (ZeRO-3) */
  bool bf16;                   /* bf16 storage (mixed precision): activations and their gradients
                                  in bf16, weights, their gradients and optimizer state in f32
                                  (pcgc_value_dtype); kernels compute in f32 on widened copies */
  int threads;                 /* devices' streams and memory planned at once (default
                                  pcgc_threads_default(); the program does not depend on it) */
  int order;                   /* the global list schedule's tie-break within a micro-batch slot:
                                  0 (default) topological position; 1 (critical path) the
                                  longest path of tasks from the task to the step's end first
                                  (a kernel counts 4, any other task 1), then topological
                                  position. pcgc compile lowers both and keeps the faster
                                  program; the plan records which ("program"."order") */
  bool save_for_backward;      /* a SAVED buffer per kernel piece that keeps something for its
                                  backward (pcgc_op_saved_elems: attention's projections and
                                  context), written by the FORWARD (the recomputing one where the
                                  piece is recomputed) and read by the BACKWARD, its last argument
                                  past the kernel's. The CPU backend uses them (pcgc compile, run
                                  and simulate set it for CPU machines); off, backward computes
                                  them again */
  bool hoist_work;             /* a kernel or zeroing goes ahead of the receives just before it
                                  that it does not depend on (a forward kernel also ahead of the
                                  relays of what they bring) (schedule.c, hoist_work; default true) */
  bool sends_in_place;         /* a SEND of a contiguous run of a buffer that nothing writes
                                  after it goes straight from the buffer, without staging
                                  (send_done; default true) */
} pcgc_codegen_options;

void pcgc_codegen_options_default(pcgc_codegen_options *o);

/* Lowers the typed parallel graph g (exactly one loss) with views mp onto
 * n_devices devices. Errors: an untyped graph, views out of range, a graph
 * without a loss, out of memory. */
pcgc_status pcgc_codegen(const pcgc_graph *g, const pcgc_mapping *mp, int n_devices, const pcgc_codegen_options *o,
                         pcgc_program **out, pcgc_error *err);
void pcgc_program_free(pcgc_program *p);

/* Whether an ALLREDUCE_START (or its WAIT) reduces its region where it
 * lies: when the region is all of its buffer (a weight's whole gradient, the
 * common case). Otherwise the region is packed into a staging buffer of its
 * own, held from the start to the wait (request_bytes counts them). A
 * blocking ALLREDUCE (a batch norm's statistics) reduces its region where it
 * lies when the region is one contiguous run of its buffer
 * (pcgc_box_contiguous_in), at byte offset pcgc_allreduce_at; otherwise
 * through the message staging, packed in and out. */
bool pcgc_allreduce_in_place(const pcgc_device_program *P, const pcgc_ins *ins);
/* Of an all-reduce in place (pcgc_allreduce_in_place), the byte offset of
 * its region in its buffer (0 for a whole buffer). */
int64_t pcgc_allreduce_at(const pcgc_device_program *P, const pcgc_ins *ins);
/* The sends of P from their buffers that complete within the step
 * (send_done[k] an instruction of the stream), in the order they complete:
 * by send_done, ties in send order. Writes their send indices to out
 * (room for P->n_sends) and returns how many. The runtime and the
 * prediction both walk them so. */
int pcgc_sends_done_order(const pcgc_device_program *P, int *out);
/* A RECV that sets (not adds) a region lying as one contiguous run of its
 * buffer (pcgc_box_contiguous_in): the message is received in place, with
 * no staging and no unpacking; *at: the run's byte offset in the buffer. */
bool pcgc_recv_in_place(const pcgc_device_program *P, const pcgc_ins *ins, int64_t *at);
/* Consecutive SENDs pack their boxes into staging in one launch: the run
 * that starts at instruction `pc` (a SEND, the stream's k-th): the SENDs
 * that follow it with nothing between, at most PCGC_PACK_MAX, stopping
 * before one that must first complete a send of the run (its send_wait
 * names one: their staging bytes overlap). Returns the run's length (0:
 * pc is no SEND). The runtime packs so (backend move_list) and the
 * prediction charges one launch a run (PCGC_PACK_MAX: taskgraph.h). */
int pcgc_send_pack_run(const pcgc_device_program *P, int pc, int k);
/* The run of RECVs that unpack (not received in place) starting at
 * instruction `pc`: the ones that follow it with nothing between, at most
 * PCGC_PACK_MAX, whose regions lie apart (a buffer's own, or buffers that
 * share no bytes: alias) and that add only in f32; one that adds in bf16
 * runs alone. A COPY joins it too, before, among or after its RECVs (a
 * gatherer's own piece among those it receives), where its two buffers share
 * no bytes, it keeps one type (f32 if it adds), its region lies apart from
 * the run's and it reads nothing the run writes: moved at the run's
 * unpacking, it takes no staging (off[i] -1). A run holds a RECV at least. Their messages land in the receive staging back to back
 * (off[i], 64-byte aligned, when off is not NULL; *bytes: the run's
 * staging), then one launch unpacks them all (backend move_list): the
 * runtime receives so at the run's first RECV and the prediction charges
 * it so. Returns the run's length (0: pc starts no run). A run
 * starts at the first RECV or COPY past the one before, so the runtime, the
 * prediction and codegen's staging size find the same runs. */
int pcgc_recv_unpack_run(const pcgc_device_program *P, int pc, int64_t *off, int64_t *bytes);
/* A gradient bucket's ALLREDUCE_START or WAIT (dst -1: its buffers in args,
 * laid back to back in the arena by the memory plan): the span's offset and
 * bytes, which one all-reduce of f32 sums in place (64-byte gaps between the
 * buffers included). False when I is no bucket, or its buffers are not
 * persistent f32 ones lying so (the runtime refuses the program). */
bool pcgc_allreduce_span(const pcgc_device_program *P, const pcgc_ins *ins, int64_t *span_at, int64_t *span_bytes);
/* A bucket's UPDATE (dst -1): the offsets of the spans of its weights,
 * gradients, m and v (-1: no such state) and their common bytes. False when
 * I is no such UPDATE or the lists do not lie back to back alike. */
bool pcgc_update_spans(const pcgc_device_program *P, const pcgc_ins *ins, int64_t span_at[4], int64_t *span_bytes);

/* Readable listing: per device its totals, and with `streams` its buffers
 * (role, tensor, piece, bytes, lifetime) and its instruction stream.
 * device >= 0 prints that device only. */
void pcgc_program_print(FILE *f, const pcgc_program *p, const pcgc_graph *g, int device, bool streams);

/* Simulates one training step of program p (lowered from the typed graph
 * g) on machine m: every device runs its instruction stream in order, as
 * pcgc run does, kernels timed by the cost model or o->profile (as
 * pcgc_simulate times them), copies and staging by memory bandwidth,
 * messages and collectives by the machine's links with the runtime's
 * blocking rules (predict.c states them). r gets the step's time
 * (iteration_time), the time with no link contention (critical_path), each
 * device's busy time and its planned memory (the arena plus staging
 * buffers: what pcgc run allocates), in pcgc_sim_result's terms; n_tasks
 * counts instructions. o may be NULL (defaults); its optimizer should be the
 * one the program was lowered for. Errors: a machine with fewer devices, a
 * program that deadlocks (a codegen bug), out of memory. */
pcgc_status pcgc_program_simulate(const pcgc_program *p, const pcgc_graph *g, const pcgc_machine *m,
                                  const pcgc_sim_options *o, pcgc_sim_result *r, pcgc_error *err);

/* Writes a Chrome trace (as pcgc_simulate's) of one step of p as it ran:
 * start[i], dur[i] in seconds for instruction pc of device d at
 * i = (instructions of devices before d) + pc. Kernels, copies and updates
 * are drawn on each device's compute row, SENDs and collectives on its
 * communication row. Atomic, like every trace. */
pcgc_status pcgc_program_trace_write(const char *path, const pcgc_program *p, const pcgc_graph *g,
                                     const double *start, const double *dur, pcgc_error *err);

/* bf16 storage: the bytes of buffer b's f32 copy in the widening
 * workspace (twice its bytes, 64-byte aligned); codegen sums them into
 * widen_bytes, the runtime places copies by them. */
static inline int64_t pcgc_widened_bytes(const pcgc_plan_buf *b) { return (b->bytes * 2 + 63) & ~(int64_t)63; }

/* The logical box a buffer holds. */
void pcgc_plan_buf_box(const pcgc_plan_buf *b, pcgc_box *box);

#ifdef __cplusplus
}
#endif
#endif /* PCGC_CODEGEN_H */
