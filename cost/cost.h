/*
 * cost.h — the machine model and the cost model: what a device and a link
 * can do, how long a piece of an operator, a transfer or a collective takes,
 * and what a device must hold. Everything here runs without a GPU. The
 * search (search/) ranks candidates with it, the simulators (search/sim.c,
 * codegen/predict.c) time every task of an iteration with it.
 *
 *   machine   nodes × devices per node; per device the peak FLOP/s per dtype,
 *             memory bandwidth and capacity, kernel launch overhead; an
 *             intra-node and an inter-node link (bandwidth per direction,
 *             latency, shared per node or one per device). Read from a
 *             machine file (docs/machine-format.md); presets in machines/.
 *   op time   roofline: max(flops / (peak × efficiency), bytes / bandwidth)
 *             + launch overhead, for one piece of an operator, forward and
 *             backward (cost/cost.c has the efficiency table).
 *   comm      alpha-beta times of point-to-point transfers and of collectives
 *             (all-reduce, reduce-scatter, all-gather, broadcast, all-to-all)
 *             by ring or tree, flat within a node and hierarchical across
 *             nodes, with shared links dividing their bandwidth.
 *   memory    per device: weights, gradients, optimizer state, activations
 *             kept for backward, communication buffers.
 *
 * The simulators build the task graph of one iteration (taskgraph/) and ask
 * these functions for the duration of every task; the device-mapping DP and the
 * Unity search call them millions of times, so they are pure, allocate
 * nothing and take well under a microsecond.
 *
 * Worked example: how long does one data-parallel step of a 4096×4096 bf16
 * linear layer take on a DGX H100 (batch 8192 split 8 ways)?
 *
 *     pcgc_error err = {0};
 *     pcgc_machine m;
 *     if (pcgc_machine_load("dgx-h100", &m, &err) != PCGC_OK) {
 *       pcgc_error_print(stderr, &err);          // file:line:col, caret, hint
 *       return 1;
 *     }
 *     // node `fc` of a typed graph g whose input is partitioned 8 ways:
 *     pcgc_op_time t;
 *     pcgc_cost_node_time(&m, g, fc, &t, &err);
 *     // t.fwd = 2·1024·4096·4096 / (989e12 · 0.70) + 5 us ≈ 54.6 us
 *     // gradient sync: ring all-reduce of the 32 MiB weight over 8 GPUs
 *     pcgc_comm_group grp = {.nodes = 1, .per_node = 8, .concurrent = 1};
 *     double ar = pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, grp,
 *                                4096.0 * 4096 * 2);
 *     // ar = 2·7/8 · 32 MiB / 450 GB/s + 14 · 2 us ≈ 158 us
 *
 * Units: seconds, bytes, bytes/s and FLOP/s throughout (doubles).
 * Errors: functions that can fail return a pcgc_status and fill a pcgc_error
 * with file:line:col, the source line and a hint. Nothing here calls exit().
 */
#ifndef PCGC_COST_H
#define PCGC_COST_H

#include <stdbool.h>
#include <stddef.h>

#include "pcg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- machine */

#define PCGC_MACHINE_NAME_MAX 64    /* bytes, with the NUL */
#define PCGC_MACHINE_DESC_MAX 256
/* Limits a machine file may ask for; larger values are errors. */
#define PCGC_MACHINE_MAX_NODES 65536
#define PCGC_MACHINE_MAX_DEVICES_PER_NODE 4096

typedef enum pcgc_device_kind { PCGC_DEVICE_GPU, PCGC_DEVICE_CPU } pcgc_device_kind;

/* One class of link. `bandwidth` is per direction (full duplex: a device can
 * send and receive at this rate at once). Not shared: every device has its
 * own port at `bandwidth` (NVLink, one NIC per GPU). Shared: the node has one
 * port at `bandwidth`, divided among the devices of the node that use it at
 * the same time (one NIC per node, a PCIe bus). `latency` is the alpha term:
 * the fixed cost of one message or collective step. bandwidth 0: no link. */
typedef struct pcgc_link {
  double bandwidth;   /* bytes/s per direction */
  double latency;     /* s */
  bool shared;
} pcgc_link;

typedef struct pcgc_device {
  pcgc_device_kind kind;
  double flops[PCGC_DTYPE_COUNT]; /* peak FLOP/s by dtype; the i32/i64 entries
                                     copy f32 (integer ops are index math) */
  double memory;                  /* capacity, bytes */
  double memory_reserved;         /* bytes the runtime and libraries keep
                                     (CUDA context, NCCL buffers) */
  double memory_bandwidth;        /* bytes/s */
  double launch_overhead;         /* s per kernel */
} pcgc_device;

/* All-reduces measured among `devices` devices (processes) of one node:
 * `pcgc profile --links`, applied with `--profile DB` (machine files have
 * none). n_points 0: none. */
#define PCGC_LINK_CURVE_POINTS 16
typedef struct pcgc_link_curve {
  int devices, n_points;
  double bytes[PCGC_LINK_CURVE_POINTS];    /* ascending */
  double seconds[PCGC_LINK_CURVE_POINTS];
} pcgc_link_curve;

/* A homogeneous cluster. Device d (0-based) is local device
 * d % devices_per_node of node d / devices_per_node. The struct owns no
 * memory: copy it, embed it, compare it with pcgc_machine_equal. */
typedef struct pcgc_machine {
  char name[PCGC_MACHINE_NAME_MAX];         /* "dgx-h100" */
  char description[PCGC_MACHINE_DESC_MAX];  /* may be empty */
  int nodes, devices_per_node;
  pcgc_device device;
  pcgc_link intra;   /* between devices of one node */
  pcgc_link inter;   /* between nodes */
  pcgc_link_curve allreduce;   /* measured; pcgc_comm_time says where it applies */
} pcgc_machine;

/* Parses machine-file text (docs/machine-format.md). `filename` names the
 * file in messages; the machine's name defaults to its base name without
 * ".machine". On error returns PCGC_ERR_PARSE (or PCGC_ERR_INVALID for a
 * NULL argument) with file:line:col, the source line and a hint in `err`;
 * `m` is then zeroed. Never reads past text[len - 1]; NULs are errors. */
pcgc_status pcgc_machine_parse(const char *text, size_t len, const char *filename, pcgc_machine *m,
                               pcgc_error *err);

/* Resolves a machine argument to a file path (written to path[0..n)):
 *   - text containing '/' or ending in ".machine" is a path, used as is;
 *   - otherwise it is a preset name: DIR/NAME.machine, where DIR is the
 *     environment variable PCGC_MACHINES_DIR when set and non-empty, else the
 *     compiled-in PCGC_MACHINES_DIR, else PCGC_SOURCE_DIR "/machines" (the
 *     build defines PCGC_SOURCE_DIR for search/).
 * An unknown preset is PCGC_ERR_IO with a did-you-mean and the list of
 * presets found in DIR. Write ./NAME for a file in the current directory. */
pcgc_status pcgc_machine_find(const char *name_or_path, char *path, size_t n, pcgc_error *err);

/* pcgc_machine_find, then reads and parses the file. */
pcgc_status pcgc_machine_load(const char *name_or_path, pcgc_machine *m, pcgc_error *err);

/* Writes `m` as a machine file (every key, canonical units, a summary
 * comment at the top) that parses back to an equal machine. Returns the
 * number of characters it wanted to write, like snprintf. */
int pcgc_machine_format(char *buf, size_t n, const pcgc_machine *m);

bool pcgc_machine_equal(const pcgc_machine *a, const pcgc_machine *b);

int pcgc_machine_num_devices(const pcgc_machine *m);           /* nodes × per node */
static inline int pcgc_machine_node_of(const pcgc_machine *m, int device) {
  return device / m->devices_per_node;
}
/* Memory a plan may use on one device: memory - memory_reserved. */
double pcgc_machine_usable_memory(const pcgc_machine *m);

/* Quantities of the machine format, for printing with a unit. */
typedef enum pcgc_quantity {
  PCGC_QTY_BYTES,      /* B KB MB GB TB KiB MiB GiB TiB */
  PCGC_QTY_BYTE_RATE,  /* B/s .. TB/s, KiB/s .. TiB/s; bits: b/s .. Tb/s */
  PCGC_QTY_FLOP_RATE,  /* FLOP/s .. PFLOP/s (also FLOPS .. PFLOPS) */
  PCGC_QTY_TIME,       /* s ms us ns */
} pcgc_quantity;

/* "80 GiB", "450 GB/s", "989 TFLOP/s", "5 us": the largest unit the value
 * reaches, with the fewest digits (up to 17) that read back exactly. Returns
 * what snprintf returns. */
int pcgc_quantity_format(char *buf, size_t n, double value, pcgc_quantity q);

/* ------------------------------------------------------- operator time */

/* How well an op kind uses the device, from the one table in cost/cost.c.
 * `matrix` ops (linear, matmul, batch_matmul, conv2d, attention) run on the
 * matrix units at peak[dtype]; the rest run on the vector units at
 * min(peak[dtype], peak[f32]). `kernel` is false for ops that launch nothing
 * here: sources, views, and the parallel operators (their cost is
 * communication, from pcgc_comm_*). */
typedef struct pcgc_op_efficiency {
  bool kernel;
  bool matrix;
  double gpu, cpu;   /* fraction of peak FLOP/s reached, by device kind */
} pcgc_op_efficiency;

const pcgc_op_efficiency *pcgc_cost_efficiency(pcgc_op_kind kind);

/* Time of one kernel doing `flops` and moving `bytes` on one device:
 *   max(flops / (peak × efficiency[kind]), bytes / memory_bandwidth) + launch
 * and 0 when the op launches no kernel or does no work. */
/* A program's memory work, as a vector op: copying `bytes` (read and
 * written; add: added into the target, which is read too) and filling
 * `bytes` (zeroing a gradient before it accumulates). 0 for no bytes. The
 * search's estimate (search/sim.c) and a program's simulation
 * (codegen/predict.c) both charge these. */
double pcgc_cost_copy_time(const pcgc_machine *m, double bytes, bool add);
double pcgc_cost_fill_time(const pcgc_machine *m, double bytes);
/* bf16 storage: widening `bf16_bytes` of bf16 into f32 (or rounding f32
 * back into them), as the runtime does around each kernel: a pass that
 * reads one form and writes the other, 3x the bf16 bytes in all. */
double pcgc_cost_widen_time(const pcgc_machine *m, double bf16_bytes);

double pcgc_cost_roofline(const pcgc_machine *m, pcgc_op_kind kind, pcgc_dtype dtype, double flops,
                          double bytes);

/* Forward and backward time of one task: one piece of one micro-batch. */
typedef struct pcgc_op_time {
  double fwd, bwd;
} pcgc_op_time;

/* The dtype an op computes in: its first floating-point output, else its
 * first floating-point input, else f32. */
pcgc_dtype pcgc_cost_op_dtype(int n_in, const pcgc_ptensor *in, int n_out, const pcgc_ptensor *out);

/* Into how many equal shares an op's work is cut, from its first output:
 *   prod(degree) × micro × out.sum / max(in[i].sum)
 * Shard degrees and micro-batches divide the work. A sum degree the op
 * creates (a contracted dim sharded d ways) divides it too; one it inherits
 * (adding partial sums) does not: each piece is full-size. Replicas repeat
 * their piece's work, so they do not divide it. */
double pcgc_cost_work_split(int n_in, const pcgc_ptensor *in, const pcgc_ptensor *out);

/* Bytes of one piece of `t` on one device (one micro-batch slice):
 * logical bytes / (prod(degree) × micro). Partial sums and replicas are
 * full-size pieces. */
double pcgc_cost_piece_bytes(const pcgc_ptensor *t);

/* Per-task counts from pcgc_op_cost_of's logical counts: FLOPs divided by
 * pcgc_cost_work_split; bytes scaled by (sum of the piece bytes of inputs and
 * outputs) / (their logical bytes), which is exact for the ops whose bytes are
 * their inputs plus outputs and proportional for the others. `params` is
 * copied. */
void pcgc_cost_op_piece(int n_in, const pcgc_ptensor *in, int n_out, const pcgc_ptensor *out,
                        const pcgc_op_cost *logical, pcgc_op_cost *piece);

/* Roofline of a per-task cost, forward and backward (one launch each). */
pcgc_op_time pcgc_cost_op_time(const pcgc_machine *m, pcgc_op_kind kind, pcgc_dtype dtype,
                               const pcgc_op_cost *piece);

/* All of the above for node `node` of a typed graph: pcgc_op_cost_of over its
 * logical types, pcgc_cost_op_piece, pcgc_cost_op_time. PCGC_ERR_INVALID if
 * the node or its inputs are not typed. */
pcgc_status pcgc_cost_node_time(const pcgc_machine *m, const pcgc_graph *g, int node, pcgc_op_time *t,
                                pcgc_error *err);

/* -------------------------------------------------------- communication */

typedef enum pcgc_collective {
  PCGC_COLL_ALL_REDUCE,      /* bytes: the buffer on every device (in = out) */
  PCGC_COLL_REDUCE_SCATTER,  /* bytes: the input on every device; each keeps 1/p */
  PCGC_COLL_ALL_GATHER,      /* bytes: the output on every device; each gives 1/p */
  PCGC_COLL_BROADCAST,       /* bytes: the root's buffer */
  PCGC_COLL_ALL_TO_ALL,      /* bytes: the send buffer of every device, 1/p per peer */
  PCGC_COLL_COUNT
} pcgc_collective;

typedef enum pcgc_comm_algo {
  PCGC_ALGO_AUTO,  /* the faster of ring and tree, chosen per phase */
  PCGC_ALGO_RING,  /* p-1 steps, bandwidth-optimal */
  PCGC_ALGO_TREE,  /* ceil(log2 p) steps: double binary tree, recursive
                      halving/doubling, binomial tree, Bruck */
  PCGC_ALGO_COUNT
} pcgc_comm_algo;

const char *pcgc_collective_name(pcgc_collective c);   /* "all-reduce" */
/* How many times a collective's n bytes (as pcgc_collective counts them)
 * are counted in the bytes-moved reports of the simulator and a program's
 * simulation, per member off the root's node: 1 for a broadcast, all-gather
 * or reduce-scatter, 2 for the others (an all-reduce is a reduce-scatter and
 * an all-gather). */
double pcgc_collective_passes(pcgc_collective c);
const char *pcgc_comm_algo_name(pcgc_comm_algo a);     /* "ring" */

/* One collective over p devices on one link with latency alpha (s) and
 * bandwidth beta (bytes/s per direction per device), n = bytes (see
 * pcgc_collective). With L = ceil(log2 p):
 *
 *                   ring                              tree
 *   all-reduce      2(p-1)a + 2(p-1)/p n/b            2L a + 2 n/b  (double binary tree)
 *   reduce-scatter  (p-1)a + (p-1)/p n/b              L a + (p-1)/p n/b  (recursive halving)
 *   all-gather      (p-1)a + (p-1)/p n/b              L a + (p-1)/p n/b  (recursive doubling)
 *   broadcast       (p-1)a + n/b  (pipelined chain)   L (a + n/b)  (binomial tree)
 *   all-to-all      (p-1)a + (p-1)/p n/b  (pairwise)  L a + L n/(2b)  (Bruck)
 *
 * AUTO takes the minimum. 0 when p <= 1 or n <= 0. */
double pcgc_comm_flat_time(pcgc_collective c, pcgc_comm_algo algo, int p, double alpha, double beta,
                           double n);

/* Where a communicating group sits: `nodes` nodes with `per_node` of its
 * devices on each (for an uneven group, the largest count). `concurrent`:
 * how many such groups run the same collective at the same time on each node
 * (data-parallel groups beside tensor-parallel ones), so that shared links
 * divide their bandwidth among all of them; 0 counts as 1. */
typedef struct pcgc_comm_group {
  int nodes;
  int per_node;
  int concurrent;
} pcgc_comm_group;

/* The group of n device ids (distinct nodes; most devices on one node).
 * O(n^2) without allocating; concurrent = 1. */
pcgc_comm_group pcgc_comm_group_of(const pcgc_machine *m, int n, const int *devices);

/* Time of a collective over group g on machine m, n bytes as in
 * pcgc_collective. One node: pcgc_comm_flat_time on the intra link. Several
 * nodes with one device each: flat on the inter link. Several nodes with k
 * devices each, hierarchically:
 *   all-reduce      intra reduce-scatter(n) + inter all-reduce(n/k) + intra all-gather(n)
 *   reduce-scatter  intra reduce-scatter(n) + inter reduce-scatter(n/k)
 *   all-gather      inter all-gather(n/k) + intra all-gather(n)
 *   broadcast       inter broadcast(n) + intra broadcast(n)
 *   all-to-all      ring: intra and inter traffic at once,
 *                   (k-1)a_i + (g-1)k a_e + max((k-1)/p n/b_i, (g-1)k/p n/b_e);
 *                   tree: Bruck over all p on the slower link
 * A shared intra link gives each device b/(k·concurrent); a shared inter
 * link gives b/s, s = devices of the node crossing nodes at once: k·concurrent
 * (all-reduce, reduce-scatter, all-gather, all-to-all: every local rank
 * carries 1/k) or concurrent (broadcast). INFINITY if g does not fit m.
 * An all-reduce over exactly the devices of m's measured curve
 * (m->allreduce: one node, no other group at once) takes the measured time
 * instead, interpolated log-log between its sizes (the smallest size's time
 * below them, proportional to n above them). */
double pcgc_comm_time(const pcgc_machine *m, pcgc_collective c, pcgc_comm_algo algo, pcgc_comm_group g,
                      double n);

/* One transfer of n bytes between two devices: latency + n / bandwidth of
 * the intra or inter link; a shared link divides its bandwidth among
 * `concurrent` transfers of the node (0 counts as 1). 0 when n <= 0;
 * INFINITY when the machine has no such link. */
double pcgc_comm_p2p_time(const pcgc_machine *m, bool same_node, int concurrent, double n);
/* Of a transfer taking `time` (pcgc_comm_p2p_time), the link's latency,
 * which follows its bytes rather than holding the link's ports: messages to
 * different peers overlap their latencies (0 where time does not exceed
 * it: an empty message). */
double pcgc_comm_p2p_latency(const pcgc_machine *m, bool same_node, double time);
/* Of a collective taking `time` (pcgc_comm_time of the same arguments), the
 * part that is latency (its time for one byte, at most `time`): like a
 * message's, it holds no link port. */
double pcgc_comm_latency(const pcgc_machine *m, pcgc_collective c, pcgc_comm_algo algo, pcgc_comm_group g,
                         double time);
/* Whether a message or collective taking `time`, `latency` of it latency, is
 * latency-bound: its bytes take no longer than its latency. Links carry it
 * between the packets of the messages already on them (they interleave
 * flows), so it waits for no port to come free; a larger one takes its turn
 * on the ports, first come, first served. */
static inline bool pcgc_comm_slips_in(double time, double latency) { return time - latency <= latency; }

/* ---------------------------------------------------------------- memory */

typedef enum pcgc_optim_kind {
  PCGC_OPTIM_SGD,       /* no state */
  PCGC_OPTIM_MOMENTUM,  /* one buffer per weight */
  PCGC_OPTIM_ADAM,      /* two: first and second moments */
} pcgc_optim_kind;

/* Bytes on one device, by what they hold. */
typedef struct pcgc_memory {
  double weights;      /* weight pieces on the device */
  double gradients;    /* = weights: one gradient per weight element */
  double optimizer;    /* 0, 1 or 2 × weights */
  double activations;  /* outputs kept from forward for backward */
  double workspace;    /* the gradients one backward piece holds at once (its outputs' and
                          inputs'; the simulator's estimate: in a program they are in the arena) */
  double comm;         /* staging: the messages the device has sent and not yet seen received
                          (codegen.h, "Send staging"), and the largest one it receives or a
                          collective stages */
  double total;
} pcgc_memory;

/* weight_bytes: sum of pcgc_cost_piece_bytes of the weights placed on the
 * device; activation_bytes: of the activations it keeps for backward (all
 * micro-batches in flight); comm_bytes: the staging of its messages (the
 * simulator: an estimate of the sends in flight, plus the largest message
 * received or collective staged, as codegen's program allocates them). Compare total
 * with pcgc_machine_usable_memory. */
pcgc_memory pcgc_cost_memory(pcgc_optim_kind opt, double weight_bytes, double activation_bytes,
                             double comm_bytes);

/* Counts of one optimizer update of the piece of weight type t on one
 * device, in fwd_flops and fwd_bytes (the rest 0): per element 2 FLOPs
 * (sgd), 4 (momentum), 12 (adam), and bytes of 3, 5, 7 element-sized
 * streams (read w, g and the state; write w and the state). It is timed
 * as a vector op: pcgc_cost_roofline(m, PCGC_OP_MUL, t->dtype, ...). */
pcgc_op_cost pcgc_cost_update(pcgc_optim_kind opt, const pcgc_ptensor *t);

/* ------------------------------------------------------ profile database
 * Measured kernel times (cost/profile.c), written by `pcgc profile` and
 * read by `pcgc simulate --profile DB`. An entry is keyed by op kind, the
 * text of every attribute (pcgc_profile_attrs_text: the pcgc_attr_format
 * strings joined by spaces), the op's dtype (pcgc_cost_op_dtype) and the
 * shape of every input *piece* (pcgc_profile_piece_dims), and holds forward
 * and backward seconds of one call on one device. JSON, version 2:
 *
 *   {"format": "pcgc-profile", "version": 2, "machine": "cpu-local",
 *    "device": {"kind": "cpu", "threads": 1, "cores": 2,
 *               "flops": {"f32": 1.05e11, "f16": 1.05e11, "bf16": 1.05e11, "f64": 5.25e10},
 *               "memory_bandwidth": 1.9e10},
 *    "entries": [{"op": "linear", "attrs": "act=relu",
 *                 "inputs": [[64, 784], [784, 512], [512]], "dtype": "f32",
 *                 "forward": 1.2e-4, "backward": 2.5e-4}]}
 *
 * "device" is what the kernels were measured *as*: the share of the
 * measuring host that `threads` BLAS threads had (pcgc_profile_thread_device:
 * the machine's per-node rates × threads / cores), or null when unknown.
 * Version 1 files (no "device") are read as measured on the simulated
 * device itself.
 *
 * Using a database on a machine (pcgc_profile_node_time), every time is a
 * measured slowdown over the roofline carried to the simulated device:
 *
 *   t(x on m) = L + (t(k) - L) × R_m(x) / R_p(k)
 *
 * k is x's own entry when the database has it, else the nearest measured
 * kernel of x's op kind and dtype (same attributes and input ranks first,
 * then the same input ranks, then the rest; within a tier the smallest sum
 * of |log| ratios of input sizes, then the earliest entry). R_p(k) is the
 * roofline without launch of k's counts (its input shapes, x's attributes)
 * at the rates the measurement had, R_m(x) that of x's piece on m's device,
 * L m's launch overhead. A linear or conv2d with a fused activation
 * (act=gelu) and no entry of its own takes the time of the op with act=none
 * plus that of the activation op over its output (for GELU, backward one
 * more forward of the op: the CPU backend recomputes the pre-activation),
 * each part measured or from its nearest.
 *
 * Rates, from a CPU to a CPU: R_m takes m's device's rates but at most the
 * profile's. So a kernel keeps its time on a device like the one measured;
 * takes twice as long on half of it (cpu-4: 4 processes on 2 cores, half a
 * core each), compute- or memory-bound alike; and is not assumed faster on
 * more cores than it was measured with, since how well BLAS (and the
 * threaded vector kernels) use them depends on the shapes: measure with
 * `pcgc profile --threads N` where the run uses N threads (cpu-local's one
 * process has 2). A tensor-parallel slice nobody measured takes its
 * neighbour's measured efficiency instead of the ideal roofline's. Other
 * device kinds: R_p on the profile's device, R_m on m's, uncapped. Without
 * a device record, R_p is taken on m. */

#define PCGC_PROFILE_MAX_INPUTS 16
#define PCGC_PROFILE_ATTRS_MAX 512

typedef struct pcgc_profile pcgc_profile;

typedef struct pcgc_profile_entry {
  pcgc_op_kind kind;
  char attrs[PCGC_PROFILE_ATTRS_MAX];
  pcgc_dtype dtype;
  int n_in;
  int rank[PCGC_PROFILE_MAX_INPUTS];
  int64_t dims[PCGC_PROFILE_MAX_INPUTS][PCGC_MAX_RANK];
  double fwd, bwd;   /* s */
} pcgc_profile_entry;

/* What a database's kernels ran as: device kind, peak FLOP/s per dtype
 * (i32/i64 copy f32, as in pcgc_device) and memory bandwidth of the share
 * of the host the measurement had, its BLAS threads and the host's cores. */
typedef struct pcgc_profile_device {
  pcgc_device_kind kind;
  int threads, cores;
  double flops[PCGC_DTYPE_COUNT];   /* FLOP/s */
  double memory_bandwidth;          /* bytes/s */
} pcgc_profile_device;

pcgc_profile *pcgc_profile_new(const char *machine);   /* NULL on out of memory */
void pcgc_profile_free(pcgc_profile *p);               /* accepts NULL */
const char *pcgc_profile_machine(const pcgc_profile *p);
int pcgc_profile_size(const pcgc_profile *p);
const pcgc_profile_entry *pcgc_profile_entry_at(const pcgc_profile *p, int i);
/* The device record: NULL when the database has none (version 1, or null). */
const pcgc_profile_device *pcgc_profile_device_of(const pcgc_profile *p);
void pcgc_profile_set_device(pcgc_profile *p, const pcgc_profile_device *d);   /* NULL: none */

/* The share of machine m's node that `threads` threads of a host with
 * `cores` cores have, m describing that host (its devices_per_node devices
 * share the cores): every rate × devices_per_node × threads / cores. One
 * thread on the 2 cores of cpu-local (one device of 210 GFLOP/s, 38 GB/s),
 * or of cpu-2 or cpu-4: 105 GFLOP/s, 19 GB/s. */
pcgc_profile_device pcgc_profile_thread_device(const pcgc_machine *m, int threads, int cores);

/* Key parts: attribute text of a node, piece dims of a tensor type (logical
 * dims divided by shard degree and, on the pipelined dim, by micro, rounded
 * up), and the whole key of node `node` of a typed graph (fwd = bwd = 0). */
void pcgc_profile_attrs_text(char *buf, size_t n, const pcgc_attrs *a);
void pcgc_profile_piece_dims(const pcgc_ptensor *t, int64_t *dims);
pcgc_status pcgc_profile_key(const pcgc_graph *g, int node, pcgc_profile_entry *key, pcgc_error *err);

/* Adds an entry (replacing one with the same key); the entry with `key`'s
 * key, or NULL. */
pcgc_status pcgc_profile_add(pcgc_profile *p, const pcgc_profile_entry *e, pcgc_error *err);
const pcgc_profile_entry *pcgc_profile_find(const pcgc_profile *p, const pcgc_profile_entry *key);

/* How a time came from a database. */
typedef enum pcgc_profile_source {
  PCGC_PROFILE_NONE,       /* nothing of the kind measured: the caller keeps the roofline */
  PCGC_PROFILE_MEASURED,   /* the kernel's own entry */
  PCGC_PROFILE_NEAREST,    /* estimated from the nearest measured kernel of its kind */
  PCGC_PROFILE_SOURCE_COUNT
} pcgc_profile_source;

/* Forward and backward time of node `node` of g (one task) on machine m's
 * device by the rule above; *t is left alone when PCGC_PROFILE_NONE. */
pcgc_profile_source pcgc_profile_node_time(const pcgc_profile *p, const pcgc_machine *m, const pcgc_graph *g,
                                           int node, pcgc_op_time *t);
/* Optimizer updates are entries too: op "weight", attrs "optimizer=NAME"
 * (pcgc_optimizer_name), the weight's dtype and piece dims as its one input;
 * `fwd` holds the seconds of one update of that piece (bwd is 0). The key of
 * the update of a piece of weight type t; and its time on m by the rule
 * above (counts from pcgc_cost_update; the nearest is an update of the same
 * optimizer and dtype), *seconds left alone when PCGC_PROFILE_NONE. */
void pcgc_profile_update_key(pcgc_optim_kind o, const pcgc_ptensor *t, pcgc_profile_entry *key);
pcgc_profile_source pcgc_profile_update_time(const pcgc_profile *p, const pcgc_machine *m, pcgc_optim_kind o,
                                             const pcgc_ptensor *t, double *seconds);

/* Links measured among processes of one node (`pcgc profile --links`): the
 * all-reduces that `pcgc run`'s processes do over MPI, timed at sizes from 8
 * bytes to 16 MiB among `devices` processes on the measuring host, and the
 * one-way times of messages between two of them (half a ping-pong, the
 * others waiting); and the link (alpha-beta, shared or not as the machine's)
 * fitted by least squares on log times to the messages (a message of n
 * bytes: latency + n / bandwidth), or where none were measured to the
 * all-reduces (the simulator's over `devices` devices of one node,
 * pcgc_comm_time, AUTO). In the database: "links": [{"devices": 4,
 * "bandwidth": 1.2e9, "latency": 6e-6, "shared": true, "points": [[8,
 * 1.1e-5], ...], "messages": [[8, 1e-6], ...]}], one per process count;
 * "messages" and the member itself are optional (databases without it keep
 * the machine's links). */
#define PCGC_PROFILE_LINK_POINTS 16
#define PCGC_PROFILE_MAX_LINKS 16
typedef struct pcgc_profile_link {
  int devices;                               /* processes that all-reduced together */
  pcgc_link link;                            /* fitted */
  int n_points;
  double bytes[PCGC_PROFILE_LINK_POINTS];    /* all-reduced per process */
  double seconds[PCGC_PROFILE_LINK_POINTS];  /* one all-reduce, mean over calls, slowest process */
  int n_msg;
  double msg_bytes[PCGC_PROFILE_LINK_POINTS];   /* a message between two processes */
  double msg_seconds[PCGC_PROFILE_LINK_POINTS]; /* its one-way time, mean over calls */
} pcgc_profile_link;

int pcgc_profile_n_links(const pcgc_profile *p);
const pcgc_profile_link *pcgc_profile_link_at(const pcgc_profile *p, int i);
/* Adds l, replacing a link of the same process count. */
pcgc_status pcgc_profile_add_link(pcgc_profile *p, const pcgc_profile_link *l, pcgc_error *err);
/* Fits l->link (shared as m's intra link): the latency and bandwidth
 * minimising the sum of squared log ratios of the modelled time to each
 * measured one, of l's messages where it has two or more, else of its
 * all-reduces over l->devices devices of one node of m; *worst gets the
 * largest |ratio - 1| left (may be NULL). PCGC_ERR_INVALID without two points
 * of distinct sizes, with devices < 2, or non-positive values.
 * Deterministic: a grid, then refinement, over log values. */
pcgc_status pcgc_profile_fit_link(const pcgc_machine *m, pcgc_profile_link *l, double *worst, pcgc_error *err);
/* The simulator's all-reduce time of n bytes over `devices` devices of one
 * node of m with its intra link replaced by `link`. */
double pcgc_profile_link_time(const pcgc_machine *m, const pcgc_link *link, int devices, double n);
/* The link measured among m's devices_per_node processes, or NULL. */
const pcgc_profile_link *pcgc_profile_link_for(const pcgc_profile *p, const pcgc_machine *m);
/* Applies that link to a one-node machine m: its fitted link becomes m's
 * intra link (point-to-point messages, collectives over fewer devices) and
 * its points m->allreduce (all-reduces over all of them). The link, or NULL
 * (m unchanged). */
const pcgc_profile_link *pcgc_profile_apply_link(const pcgc_profile *p, pcgc_machine *m);

/* Reads a database (text of length len; `path` names it in messages).
 * Malformed JSON or a bad entry is PCGC_ERR_PARSE with a message that starts
 * with the file name; a missing file PCGC_ERR_IO. *out owned by the caller. */
pcgc_status pcgc_profile_parse(const char *text, size_t len, const char *path, pcgc_profile **out,
                               pcgc_error *err);
pcgc_status pcgc_profile_load(const char *path, pcgc_profile **out, pcgc_error *err);
/* Writes atomically: a temporary file beside `path`, fsync, rename. */
pcgc_status pcgc_profile_write(const pcgc_profile *p, const char *path, pcgc_error *err);

/* ------------------------------------------------------ names and precision */

const char *pcgc_optimizer_name(pcgc_optim_kind o);          /* "sgd", "momentum", "adam" */
int pcgc_optimizer_from_name(const char *name);            /* -1 if unknown */

/* The arithmetic of GEMMs and convolutions on GPUs (`compile --precision`,
 * recorded in the plan, run by the CUDA backend): f32; tf32 (tensor cores,
 * f32 storage); bf16 (operands rounded to bf16, f32 accumulation; weights,
 * optimizer state and activations stay f32, so memory is f32's). */
typedef enum pcgc_precision { PCGC_PREC_F32, PCGC_PREC_TF32, PCGC_PREC_BF16 } pcgc_precision;
const char *pcgc_precision_name(pcgc_precision p);        /* "f32", "tf32", "bf16" */
int pcgc_precision_from_name(const char *name);            /* -1 if unknown */
/* m's GPUs computing in precision p: their f32 FLOP rate becomes the tensor
 * cores' (bf16: device.flops.bf16; tf32: half of it, as on A100 and H100),
 * which is what GEMMs and convolutions reach; every other f32 kernel is
 * bandwidth-bound on these devices, so its roofline time does not move.
 * CPUs and f32 leave m as it is. */
void pcgc_machine_set_precision(pcgc_machine *m, pcgc_precision p);

/* One of GPU machine m's devices computing in precision p (pcgc_machine_set_precision):
 * what `pcgc profile --machine m --precision p` measures its kernels as, so that a plan
 * compiled with the same precision takes them as measured, and one compiled with
 * another carries them by the rooflines' ratio. */
pcgc_profile_device pcgc_profile_gpu_device(const pcgc_machine *m, pcgc_precision p);

#ifdef __cplusplus
}
#endif
#endif /* PCGC_COST_H */
