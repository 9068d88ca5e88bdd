/*
 * search.h — how pcgc predicts the cost of a parallel plan: the machine model
 * and the first layer of the cost model. Everything here runs without a GPU.
 *
 *   machine   nodes × devices per node; per device the peak FLOP/s per dtype,
 *             memory bandwidth and capacity, kernel launch overhead; an
 *             intra-node and an inter-node link (bandwidth per direction,
 *             latency, shared per node or one per device). Read from a
 *             machine file (docs/machine-format.md); presets in machines/.
 *   op time   roofline: max(flops / (peak × efficiency), bytes / bandwidth)
 *             + launch overhead, for one piece of an operator, forward and
 *             backward (search/cost.c has the efficiency table).
 *   comm      alpha-beta times of point-to-point transfers and of collectives
 *             (all-reduce, reduce-scatter, all-gather, broadcast, all-to-all)
 *             by ring or tree, flat within a node and hierarchical across
 *             nodes, with shared links dividing their bandwidth.
 *   memory    per device: weights, gradients, optimizer state, activations
 *             kept for backward, communication buffers.
 *
 * The simulator (next) builds the task graph of one iteration and asks these
 * functions for the duration of every task; the device-mapping DP and the
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
#ifndef PCGC_SEARCH_H
#define PCGC_SEARCH_H

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

/* How well an op kind uses the device, from the one table in search/cost.c.
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
 * carries 1/k) or concurrent (broadcast). INFINITY if g does not fit m. */
double pcgc_comm_time(const pcgc_machine *m, pcgc_collective c, pcgc_comm_algo algo, pcgc_comm_group g,
                      double n);

/* One transfer of n bytes between two devices: latency + n / bandwidth of
 * the intra or inter link; a shared link divides its bandwidth among
 * `concurrent` transfers of the node (0 counts as 1). 0 when n <= 0;
 * INFINITY when the machine has no such link. */
double pcgc_comm_p2p_time(const pcgc_machine *m, bool same_node, int concurrent, double n);

/* ---------------------------------------------------------------- memory */

typedef enum pcgc_optimizer {
  PCGC_OPTIM_SGD,       /* no state */
  PCGC_OPTIM_MOMENTUM,  /* one buffer per weight */
  PCGC_OPTIM_ADAM,      /* two: first and second moments */
} pcgc_optimizer;

/* Bytes on one device, by what they hold. */
typedef struct pcgc_memory {
  double weights;      /* weight pieces on the device */
  double gradients;    /* = weights: one gradient per weight element */
  double optimizer;    /* 0, 1 or 2 × weights */
  double activations;  /* outputs kept from forward for backward */
  double comm;         /* receive/staging buffer of the largest transfer */
  double total;
} pcgc_memory;

/* weight_bytes: sum of pcgc_cost_piece_bytes of the weights placed on the
 * device; activation_bytes: of the activations it keeps for backward (all
 * micro-batches in flight); comm_bytes: the largest transfer or collective
 * buffer it stages at once. Compare total with pcgc_machine_usable_memory. */
pcgc_memory pcgc_cost_memory(pcgc_optimizer opt, double weight_bytes, double activation_bytes,
                             double comm_bytes);

#ifdef __cplusplus
}
#endif
#endif /* PCGC_SEARCH_H */
