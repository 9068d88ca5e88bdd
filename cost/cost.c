/*
 * cost.c — the first layer of the cost model: operator times by roofline,
 * communication times by the alpha-beta model, memory per device.
 *
 * Operator time (one task = one piece of one micro-batch on one device):
 *
 *   t = max(F / (P × e), B / W) + L
 *
 * F, B: the op's FLOPs and bytes (pcg/cost.c's logical counts cut down to one
 * piece: pcgc_cost_op_piece); P: the device's peak FLOP/s for the op's dtype
 * (vector ops: at most the f32 rate, since only matrix units reach the
 * f16/bf16 tensor peaks); e: the efficiency of the op kind (the table below);
 * W: memory bandwidth; L: launch overhead. Forward and backward are one
 * kernel launch each.
 *
 * Communication (Hockney's alpha-beta model; the ring and tree formulas of
 * Thakur, Rabenseifner & Gropp, "Optimization of collective communication
 * operations in MPICH", IJHPCA 2005, and NCCL's double binary trees): a step
 * costs alpha (link latency) plus its bytes over beta (bandwidth per
 * direction). Groups within a node use the intra link; groups across nodes
 * run hierarchically (cost.h has every formula). Shared links divide their
 * bandwidth among the devices that use them at once.
 *
 * Everything here is pure: no allocation, no globals written, no errors
 * beyond INFINITY for what the machine cannot do.
 */
#include <math.h>
#include <string.h>

#include "cost.h"

/* ------------------------------------------------------- efficiency table */

/* Fraction of peak FLOP/s an op family reaches on large shapes, by device
 * kind. GPU: cuBLAS GEMMs reach 70-80% of dense tensor peak on large
 * shapes (0.70), batched GEMMs of attention-sized matrices less (0.60),
 * cuDNN convolutions ~55%, unfused attention (GEMMs around a softmax) ~50%.
 * CPU: the GEMM families call OpenBLAS, whose large sgemm reaches the
 * machine's measured peak (cpu-local measures it with sgemm), so 0.85 leaves
 * room for the smaller shapes of real layers; conv2d pays for im2col (0.6),
 * batch_matmul and attention run a GEMM per batch entry or head (0.6, 0.5).
 * Vector ops (everything else): 0.5 on GPUs, where they are memory-bound
 * anyway; 0.1 on CPUs, whose scalar libm calls (tanhf, expf) make gelu,
 * sigmoid and softmax slower than their FLOP counts say. Copies (concat,
 * split, transpose) do no FLOPs and are timed by bytes. Measured profiles
 * (pcgc profile) override all of this per shape.
 *
 * One row per op family of ops.def: a new op of an existing family inherits
 * its row; a new family does not compile until it has one. */
#define EFF_NONE {false, false, 0, 0}          /* no kernel here */
#define EFF_MATRIX(g, c) {true, true, g, c}
#define EFF_VECTOR {true, false, 0.5, 0.1}
#define EFF_COPY {true, false, 1, 1}

#define EFF_source EFF_NONE
#define EFF_linear EFF_MATRIX(0.70, 0.85)
#define EFF_matmul EFF_MATRIX(0.70, 0.85)
#define EFF_bmm EFF_MATRIX(0.60, 0.60)
#define EFF_conv2d EFF_MATRIX(0.55, 0.60)
#define EFF_attention EFF_MATRIX(0.50, 0.50)
#define EFF_expert_linear EFF_MATRIX(0.65, 0.80) /* a GEMM per (group, expert) */
#define EFF_pool2d EFF_VECTOR
#define EFF_batchnorm EFF_VECTOR
#define EFF_layernorm EFF_VECTOR
#define EFF_rmsnorm EFF_VECTOR
#define EFF_embedding EFF_VECTOR
#define EFF_unary EFF_VECTOR
#define EFF_binary EFF_VECTOR
#define EFF_softmax EFF_VECTOR
#define EFF_reduce EFF_VECTOR
#define EFF_mask EFF_VECTOR
#define EFF_rope EFF_VECTOR
#define EFF_xent EFF_VECTOR
#define EFF_mse EFF_VECTOR
#define EFF_moe_route EFF_VECTOR
#define EFF_moe_dispatch EFF_COPY
#define EFF_moe_combine EFF_VECTOR
#define EFF_concat EFF_COPY
#define EFF_split EFF_COPY
#define EFF_transpose EFF_COPY
#define EFF_reshape EFF_NONE /* views */
#define EFF_flatten EFF_NONE
#define EFF_partition EFF_NONE /* parallel operators: communication */
#define EFF_combine EFF_NONE
#define EFF_replicate EFF_NONE
#define EFF_reduce_p EFF_NONE
#define EFF_pipeline EFF_NONE
#define EFF_unpipeline EFF_NONE

static const pcgc_op_efficiency eff_table[] = {
#define PCGC_OP(id, name, fn, min_in, max_in, n_out, schema) [PCGC_OP_##id] = EFF_##fn,
#include "ops.def"
#undef PCGC_OP
};
_Static_assert(sizeof eff_table / sizeof eff_table[0] == PCGC_OP_COUNT, "one efficiency per op");

static const pcgc_op_efficiency eff_none = EFF_NONE;

const pcgc_op_efficiency *pcgc_cost_efficiency(pcgc_op_kind kind) {
  return (unsigned)kind < PCGC_OP_COUNT ? &eff_table[kind] : &eff_none;
}

/* ------------------------------------------------------------ op time */

double pcgc_cost_roofline(const pcgc_machine *m, pcgc_op_kind kind, pcgc_dtype dtype, double flops,
                          double bytes) {
  const pcgc_op_efficiency *e = pcgc_cost_efficiency(kind);
  if (!e->kernel || (!(flops > 0) && !(bytes > 0))) return 0;
  const pcgc_device *d = &m->device;
  double peak = d->flops[(unsigned)dtype < PCGC_DTYPE_COUNT ? dtype : PCGC_F32];
  if (!e->matrix && d->flops[PCGC_F32] < peak) peak = d->flops[PCGC_F32];
  double eff = d->kind == PCGC_DEVICE_CPU ? e->cpu : e->gpu;
  double tc = flops > 0 ? flops / (peak * eff) : 0;
  double tm = bytes > 0 ? bytes / d->memory_bandwidth : 0;
  return (tc > tm ? tc : tm) + d->launch_overhead;
}

double pcgc_cost_copy_time(const pcgc_machine *m, double bytes, bool add) {
  if (!(bytes > 0)) return 0;
  return pcgc_cost_roofline(m, PCGC_OP_ADD, PCGC_F32, add ? bytes / 4 : 0, (add ? 3 : 2) * bytes);
}

double pcgc_cost_widen_time(const pcgc_machine *m, double bf16_bytes) {
  return bf16_bytes > 0 ? pcgc_cost_roofline(m, PCGC_OP_ADD, PCGC_F32, 0, 3 * bf16_bytes) : 0;
}

double pcgc_cost_fill_time(const pcgc_machine *m, double bytes) {
  return bytes > 0 ? pcgc_cost_roofline(m, PCGC_OP_ADD, PCGC_F32, 0, bytes) : 0;
}

pcgc_dtype pcgc_cost_op_dtype(int n_in, const pcgc_ptensor *in, int n_out, const pcgc_ptensor *out) {
  for (int i = 0; i < n_out; i++)
    if (pcgc_dtype_is_float(out[i].dtype)) return out[i].dtype;
  for (int i = 0; i < n_in; i++)
    if (pcgc_dtype_is_float(in[i].dtype)) return in[i].dtype;
  return PCGC_F32;
}

static double shard_degree(const pcgc_ptensor *t) {
  double d = 1;
  for (int i = 0; i < t->rank && i < PCGC_MAX_RANK; i++)
    if (t->degree[i] > 1) d *= t->degree[i];
  return d;
}

double pcgc_cost_work_split(int n_in, const pcgc_ptensor *in, const pcgc_ptensor *out) {
  double split = shard_degree(out);
  int micro = out->micro, in_sum = 1;
  for (int i = 0; i < n_in; i++) {
    if (in[i].micro > micro) micro = in[i].micro;
    if (in[i].sum > in_sum) in_sum = in[i].sum;
  }
  if (micro > 1) split *= micro;
  if (out->sum > in_sum) split *= (double)out->sum / in_sum;
  return split;
}

double pcgc_cost_piece_bytes(const pcgc_ptensor *t) {
  double d = shard_degree(t);
  if (t->micro > 1 && t->micro_dim >= 0) d *= t->micro;
  return (double)pcgc_ptensor_bytes(t) / d;
}

void pcgc_cost_op_piece(int n_in, const pcgc_ptensor *in, int n_out, const pcgc_ptensor *out,
                        const pcgc_op_cost *logical, pcgc_op_cost *piece) {
  *piece = *logical;
  if (n_out < 1) return;
  double split = pcgc_cost_work_split(n_in, in, &out[0]);
  piece->fwd_flops = logical->fwd_flops / split;
  piece->bwd_flops = logical->bwd_flops / split;
  double whole = 0, part = 0;
  for (int i = 0; i < n_in; i++) {
    whole += (double)pcgc_ptensor_bytes(&in[i]);
    part += pcgc_cost_piece_bytes(&in[i]);
  }
  for (int i = 0; i < n_out; i++) {
    whole += (double)pcgc_ptensor_bytes(&out[i]);
    part += pcgc_cost_piece_bytes(&out[i]);
  }
  double ratio = whole > 0 ? part / whole : 1 / split;
  piece->fwd_bytes = logical->fwd_bytes * ratio;
  piece->bwd_bytes = logical->bwd_bytes * ratio;
}

pcgc_op_time pcgc_cost_op_time(const pcgc_machine *m, pcgc_op_kind kind, pcgc_dtype dtype,
                               const pcgc_op_cost *piece) {
  pcgc_op_time t = {pcgc_cost_roofline(m, kind, dtype, piece->fwd_flops, piece->fwd_bytes),
                    pcgc_cost_roofline(m, kind, dtype, piece->bwd_flops, piece->bwd_bytes)};
  return t;
}

pcgc_status pcgc_cost_node_time(const pcgc_machine *m, const pcgc_graph *g, int node, pcgc_op_time *t,
                                pcgc_error *err) {
  if (t) *t = (pcgc_op_time){0, 0};
  if (!m || !g || !t || node < 0 || node >= g->n_nodes)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_cost_node_time: bad argument (node %d)", node);
  const pcgc_node *n = &g->nodes[node];
  if (!n->typed || n->n_in > PCGC_VARIADIC) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "%s '%s' has no type yet", pcgc_op_name(n->kind), n->name);
    pcgc_error_hint(err, "run pcgc_graph_infer before costing the graph");
    return PCGC_ERR_INVALID;
  }
  pcgc_ptensor in[PCGC_VARIADIC];
  for (int i = 0; i < n->n_in; i++) {
    const pcgc_ptensor *p = pcgc_graph_ref_type(g, n->in[i]);
    if (!p) {
      pcgc_error_set(err, PCGC_ERR_INVALID, "%s '%s': input %d has no type", pcgc_op_name(n->kind), n->name, i);
      pcgc_error_hint(err, "run pcgc_graph_infer before costing the graph");
      return PCGC_ERR_INVALID;
    }
    in[i] = *p;
  }
  pcgc_op_cost logical, piece;
  pcgc_op_cost_of(n->kind, n->attrs, n->n_in, in, n->n_out, n->out, &logical);
  pcgc_cost_op_piece(n->n_in, in, n->n_out, n->out, &logical, &piece);
  *t = pcgc_cost_op_time(m, n->kind, pcgc_cost_op_dtype(n->n_in, in, n->n_out, n->out), &piece);
  return PCGC_OK;
}

/* ------------------------------------------------------- communication */

double pcgc_collective_passes(pcgc_collective c) {
  return c == PCGC_COLL_BROADCAST || c == PCGC_COLL_ALL_GATHER || c == PCGC_COLL_REDUCE_SCATTER ? 1 : 2;
}

const char *pcgc_collective_name(pcgc_collective c) {
  switch (c) {
  case PCGC_COLL_ALL_REDUCE: return "all-reduce";
  case PCGC_COLL_REDUCE_SCATTER: return "reduce-scatter";
  case PCGC_COLL_ALL_GATHER: return "all-gather";
  case PCGC_COLL_BROADCAST: return "broadcast";
  case PCGC_COLL_ALL_TO_ALL: return "all-to-all";
  case PCGC_COLL_COUNT: break;
  }
  return "?";
}

const char *pcgc_comm_algo_name(pcgc_comm_algo a) {
  switch (a) {
  case PCGC_ALGO_AUTO: return "auto";
  case PCGC_ALGO_RING: return "ring";
  case PCGC_ALGO_TREE: return "tree";
  case PCGC_ALGO_COUNT: break;
  }
  return "?";
}

static int ceil_log2(int p) { return p <= 1 ? 0 : 32 - __builtin_clz((unsigned)(p - 1)); }

static double ring_time(pcgc_collective c, double p, double a, double b, double n) {
  switch (c) {
  case PCGC_COLL_ALL_REDUCE: return 2 * (p - 1) * a + 2 * (p - 1) / p * n / b;
  case PCGC_COLL_REDUCE_SCATTER:
  case PCGC_COLL_ALL_GATHER:
  case PCGC_COLL_ALL_TO_ALL: return (p - 1) * a + (p - 1) / p * n / b;
  case PCGC_COLL_BROADCAST: return (p - 1) * a + n / b;
  case PCGC_COLL_COUNT: break;
  }
  return INFINITY;
}

static double tree_time(pcgc_collective c, double p, double L, double a, double b, double n) {
  switch (c) {
  case PCGC_COLL_ALL_REDUCE: return 2 * L * a + 2 * n / b;
  case PCGC_COLL_REDUCE_SCATTER:
  case PCGC_COLL_ALL_GATHER: return L * a + (p - 1) / p * n / b;
  case PCGC_COLL_BROADCAST: return L * (a + n / b);
  case PCGC_COLL_ALL_TO_ALL: return L * a + L * n / (2 * b);
  case PCGC_COLL_COUNT: break;
  }
  return INFINITY;
}

double pcgc_comm_flat_time(pcgc_collective c, pcgc_comm_algo algo, int p, double alpha, double beta, double n) {
  if (p <= 1 || !(n > 0)) return 0;
  double ring = ring_time(c, p, alpha, beta, n);
  if (algo == PCGC_ALGO_RING) return ring;
  double tree = tree_time(c, p, ceil_log2(p), alpha, beta, n);
  if (algo == PCGC_ALGO_TREE) return tree;
  return tree < ring ? tree : ring;
}

/* Bandwidth one device gets on a link that `users` devices of its node use
 * at once. */
static double link_bw(const pcgc_link *l, int users) {
  return l->shared && users > 1 ? l->bandwidth / users : l->bandwidth;
}

pcgc_comm_group pcgc_comm_group_of(const pcgc_machine *m, int n, const int *devices) {
  pcgc_comm_group g = {0, 0, 1};
  int dpn = m->devices_per_node > 0 ? m->devices_per_node : 1;
  for (int i = 0; i < n; i++) {
    int node = devices[i] / dpn;
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = devices[j] / dpn == node;
    if (seen) continue;
    int count = 0;
    for (int j = i; j < n; j++) count += devices[j] / dpn == node;
    g.nodes++;
    if (count > g.per_node) g.per_node = count;
  }
  return g;
}

/* All-to-all across nodes: the intra and inter shares of every device's
 * traffic move at once on their own links (ring: pairwise exchange), or
 * Bruck over all p on the slower link (tree). */
static double all_to_all_hier(pcgc_comm_algo algo, int G, int k, double ai, double bi, double ae, double be,
                              double n) {
  double p = (double)G * k;
  double ring_bw_i = (k - 1) / p * n / bi, ring_bw_e = (G - 1) * k / p * n / be;
  double ring = (k - 1) * ai + (G - 1) * (double)k * ae + (ring_bw_i > ring_bw_e ? ring_bw_i : ring_bw_e);
  if (algo == PCGC_ALGO_RING) return ring;
  double L = ceil_log2(G * k);
  double tree = L * (ai > ae ? ai : ae) + L * n / (2 * (bi < be ? bi : be));
  if (algo == PCGC_ALGO_TREE) return tree;
  return tree < ring ? tree : ring;
}

/* A measured all-reduce time of n bytes (cost.h, pcgc_link_curve). */
static double curve_time(const pcgc_link_curve *c, double n) {
  int last = c->n_points - 1;
  if (n <= c->bytes[0]) return c->seconds[0];
  if (n >= c->bytes[last]) return c->seconds[last] * n / c->bytes[last];
  int i = 1;
  while (c->bytes[i] < n) i++;
  double x0 = log(c->bytes[i - 1]), x1 = log(c->bytes[i]), y0 = log(c->seconds[i - 1]), y1 = log(c->seconds[i]);
  return x1 > x0 ? exp(y0 + (y1 - y0) * (log(n) - x0) / (x1 - x0)) : c->seconds[i];
}

double pcgc_comm_time(const pcgc_machine *m, pcgc_collective c, pcgc_comm_algo algo, pcgc_comm_group g,
                      double n) {
  int conc = g.concurrent > 0 ? g.concurrent : 1;
  if (g.nodes < 1 || g.per_node < 1 || (double)g.nodes * g.per_node <= 1 || !(n > 0)) return 0;
  if (g.nodes > m->nodes || g.per_node > m->devices_per_node ||
      (double)g.per_node * conc > m->devices_per_node || (unsigned)c >= PCGC_COLL_COUNT)
    return INFINITY;
  int G = g.nodes, k = g.per_node;
  double ai = m->intra.latency, bi = link_bw(&m->intra, k * conc);
  if (G == 1 && c == PCGC_COLL_ALL_REDUCE && conc == 1 && m->allreduce.n_points >= 2 && m->allreduce.devices == k)
    return curve_time(&m->allreduce, n);
  if (G == 1) return m->intra.bandwidth > 0 ? pcgc_comm_flat_time(c, algo, k, ai, bi, n) : INFINITY;
  if (!(m->inter.bandwidth > 0) || (k > 1 && !(m->intra.bandwidth > 0))) return INFINITY;
  double ae = m->inter.latency;
  if (k == 1) return pcgc_comm_flat_time(c, algo, G, ae, link_bw(&m->inter, conc), n);
  double be = link_bw(&m->inter, k * conc); /* every local rank carries 1/k across */
  switch (c) {
  case PCGC_COLL_ALL_REDUCE:
    return pcgc_comm_flat_time(PCGC_COLL_REDUCE_SCATTER, algo, k, ai, bi, n) +
           pcgc_comm_flat_time(PCGC_COLL_ALL_REDUCE, algo, G, ae, be, n / k) +
           pcgc_comm_flat_time(PCGC_COLL_ALL_GATHER, algo, k, ai, bi, n);
  case PCGC_COLL_REDUCE_SCATTER:
    return pcgc_comm_flat_time(PCGC_COLL_REDUCE_SCATTER, algo, k, ai, bi, n) +
           pcgc_comm_flat_time(PCGC_COLL_REDUCE_SCATTER, algo, G, ae, be, n / k);
  case PCGC_COLL_ALL_GATHER:
    return pcgc_comm_flat_time(PCGC_COLL_ALL_GATHER, algo, G, ae, be, n / k) +
           pcgc_comm_flat_time(PCGC_COLL_ALL_GATHER, algo, k, ai, bi, n);
  case PCGC_COLL_BROADCAST:
    return pcgc_comm_flat_time(PCGC_COLL_BROADCAST, algo, G, ae, link_bw(&m->inter, conc), n) +
           pcgc_comm_flat_time(PCGC_COLL_BROADCAST, algo, k, ai, bi, n);
  case PCGC_COLL_ALL_TO_ALL: return all_to_all_hier(algo, G, k, ai, bi, ae, be, n);
  case PCGC_COLL_COUNT: break;
  }
  return INFINITY;
}

double pcgc_comm_p2p_time(const pcgc_machine *m, bool same_node, int concurrent, double n) {
  if (!(n > 0)) return 0;
  const pcgc_link *l = same_node ? &m->intra : &m->inter;
  if (!(l->bandwidth > 0)) return INFINITY;
  return l->latency + n / link_bw(l, concurrent > 0 ? concurrent : 1);
}

double pcgc_comm_p2p_latency(const pcgc_machine *m, bool same_node, double time) {
  double l = same_node ? m->intra.latency : m->inter.latency;
  return time > l ? l : 0;
}

double pcgc_comm_latency(const pcgc_machine *m, pcgc_collective c, pcgc_comm_algo algo, pcgc_comm_group g,
                         double time) {
  double l = pcgc_comm_time(m, c, algo, g, 1);
  return isfinite(l) && l < time ? l : isfinite(time) ? time : 0;
}

/* ---------------------------------------------------------------- memory */

pcgc_memory pcgc_cost_memory(pcgc_optim_kind opt, double weight_bytes, double activation_bytes,
                             double comm_bytes) {
  pcgc_memory r;
  r.weights = weight_bytes;
  r.gradients = weight_bytes;
  r.optimizer = opt == PCGC_OPTIM_ADAM ? 2 * weight_bytes : opt == PCGC_OPTIM_MOMENTUM ? weight_bytes : 0;
  r.activations = activation_bytes;
  r.workspace = 0;
  r.comm = comm_bytes;
  r.total = r.weights + r.gradients + r.optimizer + r.activations + r.comm;
  return r;
}

pcgc_op_cost pcgc_cost_update(pcgc_optim_kind opt, const pcgc_ptensor *t) {
  /* per element: FLOPs, and streams of element size (read w, g, state; write w, state) */
  double flops = opt == PCGC_OPTIM_ADAM ? 12 : opt == PCGC_OPTIM_MOMENTUM ? 4 : 2;
  double streams = opt == PCGC_OPTIM_ADAM ? 7 : opt == PCGC_OPTIM_MOMENTUM ? 5 : 3;
  double bytes = pcgc_cost_piece_bytes(t), es = (double)pcgc_dtype_size(t->dtype);
  pcgc_op_cost c = {0};
  c.fwd_flops = flops * bytes / es;
  c.fwd_bytes = streams * bytes;
  return c;
}

/* ------------------------------------------------------------- names */

const char *pcgc_optimizer_name(pcgc_optim_kind o) {
  switch (o) {
  case PCGC_OPTIM_SGD: return "sgd";
  case PCGC_OPTIM_MOMENTUM: return "momentum";
  case PCGC_OPTIM_ADAM: return "adam";
  }
  return "?";
}

int pcgc_optimizer_from_name(const char *name) {
  for (int o = PCGC_OPTIM_SGD; name && o <= PCGC_OPTIM_ADAM; o++)
    if (strcmp(name, pcgc_optimizer_name((pcgc_optim_kind)o)) == 0) return o;
  return -1;
}

const char *pcgc_precision_name(pcgc_precision p) {
  switch (p) {
  case PCGC_PREC_F32: return "f32";
  case PCGC_PREC_TF32: return "tf32";
  case PCGC_PREC_BF16: return "bf16";
  }
  return "?";
}

int pcgc_precision_from_name(const char *name) {
  for (int p = PCGC_PREC_F32; name && p <= PCGC_PREC_BF16; p++)
    if (strcmp(name, pcgc_precision_name((pcgc_precision)p)) == 0) return p;
  return -1;
}
