/*
 * profile.c — the profile database: measured forward and backward times of
 * operator kernels, keyed by (op kind, attribute text, input piece shapes,
 * dtype), with the device they were measured as, read and written as JSON
 * (cJSON). `pcgc profile` (cli/profile.c) measures the entries with the CPU
 * backend; the simulator asks here for every task's time before falling
 * back to the roofline (pcgc_sim_options.profile).
 *
 * This file only stores, loads, writes and looks up; it measures nothing, so
 * search/ stays free of runtime dependencies. Lookup is a linear scan: a
 * database holds the few dozen distinct kernels of a model, and the
 * simulator looks each node up once per simulation, not per task.
 *
 * Times on a machine (cost.h states the rule): a measured time is a
 * slowdown over the roofline of the device it was measured as, carried to
 * the simulated device, t = L + (t_k - L) × R_m(x) / R_p(k). k is the node's
 * own entry, or the nearest measured kernel of its kind: candidates ranked
 * by (tier, distance, entry index), tier 0 for the same attributes and input
 * ranks, 1 for the same input ranks, 2 for the rest; distance the sum over
 * the inputs they share of |log| size ratios. k's counts come from its
 * input shapes and the node's attributes (pcgc_op_infer, pcgc_op_cost_of); a
 * candidate they do not type is passed over for the next in rank order. A
 * linear or conv2d with a fused activation nobody measured (compile's fusion
 * rules make them) is first taken apart as the CPU backend runs it: the op
 * without the activation, plus the activation over its output.
 *
 * Format (version 2; version 1 is the same without "device"):
 *   {"format": "pcgc-profile", "version": 2, "machine": "cpu-local",
 *    "device": {"kind": "cpu", "threads": 1, "cores": 2,
 *               "flops": {"f32": 1.05e11, "f16": 1.05e11, "bf16": 1.05e11, "f64": 5.25e10},
 *               "memory_bandwidth": 1.9e10},
 *    "entries": [{"op": "linear", "attrs": "act=relu",
 *                 "inputs": [[64, 784], [784, 512], [512]], "dtype": "f32",
 *                 "forward": 1.2e-4, "backward": 2.5e-4}, ...],
 *    "links": [{"devices": 2, "bandwidth": 2.1e9, "latency": 1.5e-6, "shared": true,
 *               "points": [[8, 1.2e-6], ...], "messages": [[8, 4e-7], ...]}]}
 * "links" is optional (`pcgc profile --links`; cost.h, pcgc_profile_link).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "cost.h"

struct pcgc_profile {
  char machine[PCGC_MACHINE_NAME_MAX];
  bool has_device;
  pcgc_profile_device device;
  int n, cap;
  pcgc_profile_entry *e;
  int n_links;
  pcgc_profile_link links[PCGC_PROFILE_MAX_LINKS];
};

pcgc_profile *pcgc_profile_new(const char *machine) {
  pcgc_profile *p = calloc(1, sizeof *p);
  if (p && machine) snprintf(p->machine, sizeof p->machine, "%s", machine);
  return p;
}

void pcgc_profile_free(pcgc_profile *p) {
  if (!p) return;
  free(p->e);
  free(p);
}

const char *pcgc_profile_machine(const pcgc_profile *p) { return p ? p->machine : ""; }
int pcgc_profile_size(const pcgc_profile *p) { return p ? p->n : 0; }
const pcgc_profile_entry *pcgc_profile_entry_at(const pcgc_profile *p, int i) {
  return p && i >= 0 && i < p->n ? &p->e[i] : NULL;
}

const pcgc_profile_device *pcgc_profile_device_of(const pcgc_profile *p) {
  return p && p->has_device ? &p->device : NULL;
}

void pcgc_profile_set_device(pcgc_profile *p, const pcgc_profile_device *d) {
  if (!p) return;
  p->has_device = d != NULL;
  if (d) p->device = *d;
}

int pcgc_profile_n_links(const pcgc_profile *p) { return p ? p->n_links : 0; }
const pcgc_profile_link *pcgc_profile_link_at(const pcgc_profile *p, int i) {
  return p && i >= 0 && i < p->n_links ? &p->links[i] : NULL;
}

pcgc_status pcgc_profile_add_link(pcgc_profile *p, const pcgc_profile_link *l, pcgc_error *err) {
  if (!p || !l || l->devices < 2 || l->n_points < 0 || l->n_points > PCGC_PROFILE_LINK_POINTS)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_profile_add_link: bad argument");
  int i = 0;
  while (i < p->n_links && p->links[i].devices != l->devices) i++;
  if (i == PCGC_PROFILE_MAX_LINKS)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "a profile database holds links of at most %d process counts",
                          PCGC_PROFILE_MAX_LINKS);
  p->links[i] = *l;
  if (i == p->n_links) p->n_links++;
  return PCGC_OK;
}

const pcgc_profile_link *pcgc_profile_link_for(const pcgc_profile *p, const pcgc_machine *m) {
  for (int i = 0; p && m && i < p->n_links; i++)
    if (p->links[i].devices == m->devices_per_node) return &p->links[i];
  return NULL;
}

const pcgc_profile_link *pcgc_profile_apply_link(const pcgc_profile *p, pcgc_machine *m) {
  const pcgc_profile_link *l = pcgc_profile_link_for(p, m);
  if (!l || m->nodes != 1) return NULL;
  m->intra = l->link;
  memset(&m->allreduce, 0, sizeof m->allreduce);
  m->allreduce.devices = l->devices;
  for (int i = 0; i < l->n_points; i++) { /* ascending sizes, one time per size */
    int at = m->allreduce.n_points;
    while (at > 0 && m->allreduce.bytes[at - 1] > l->bytes[i]) at--;
    if (at > 0 && m->allreduce.bytes[at - 1] == l->bytes[i]) continue;
    memmove(m->allreduce.bytes + at + 1, m->allreduce.bytes + at, (size_t)(m->allreduce.n_points - at) * sizeof(double));
    memmove(m->allreduce.seconds + at + 1, m->allreduce.seconds + at, (size_t)(m->allreduce.n_points - at) * sizeof(double));
    m->allreduce.bytes[at] = l->bytes[i];
    m->allreduce.seconds[at] = l->seconds[i];
    m->allreduce.n_points++;
  }
  return l;
}

double pcgc_profile_link_time(const pcgc_machine *m, const pcgc_link *link, int devices, double n) {
  pcgc_machine one = *m;
  one.nodes = 1;
  if (one.devices_per_node < devices) one.devices_per_node = devices;
  one.intra = *link;
  memset(&one.allreduce, 0, sizeof one.allreduce);
  return pcgc_comm_time(&one, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, (pcgc_comm_group){1, devices, 1}, n);
}

/* The modelled time of what l measured at point i with link k: a message
 * (msg) or an all-reduce. */
static double link_model(const pcgc_machine *m, const pcgc_profile_link *l, const pcgc_link *k, bool msg, int i) {
  return msg ? k->latency + l->msg_bytes[i] / k->bandwidth : pcgc_profile_link_time(m, k, l->devices, l->bytes[i]);
}

/* Sum of squared log ratios, model over measured, at log10 latency a and
 * log10 bandwidth b. */
static double link_misfit(const pcgc_machine *m, const pcgc_profile_link *l, bool msg, double a, double b) {
  pcgc_link k = {pow(10, b), pow(10, a), m->intra.shared};
  double s = 0;
  for (int i = 0; i < (msg ? l->n_msg : l->n_points); i++) {
    double r = log(link_model(m, l, &k, msg, i) / (msg ? l->msg_seconds[i] : l->seconds[i]));
    s += r * r;
  }
  return s;
}

pcgc_status pcgc_profile_fit_link(const pcgc_machine *m, pcgc_profile_link *l, double *worst, pcgc_error *err) {
  bool msg = l && l->n_msg >= 2;
  int np = !l ? 0 : msg ? l->n_msg : l->n_points;
  if (!m || !l || l->devices < 2 || np < 2 || np > PCGC_PROFILE_LINK_POINTS ||
      l->n_msg > PCGC_PROFILE_LINK_POINTS)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "fitting a link needs 2 or more processes and 2 to %d measurements",
                          PCGC_PROFILE_LINK_POINTS);
  const double *xb = msg ? l->msg_bytes : l->bytes, *xs = msg ? l->msg_seconds : l->seconds;
  bool distinct = false;
  for (int i = 0; i < np; i++) {
    if (!(xb[i] > 0) || !(xs[i] > 0) || !isfinite(xb[i]) || !isfinite(xs[i]))
      return pcgc_error_set(err, PCGC_ERR_INVALID, "a link's measurement %d is not positive (%g bytes, %g s)", i,
                            xb[i], xs[i]);
    distinct = distinct || xb[i] != xb[0];
  }
  if (!distinct) return pcgc_error_set(err, PCGC_ERR_INVALID, "fitting a link needs measurements of two sizes");
  /* a grid over 1 ns..1 s of latency and 1 MB/s..10 TB/s, then a pattern
   * search around the best point with halving steps */
  double ba = -9, bb = 6, best = INFINITY;
  for (double a = -9; a <= 0 + 1e-9; a += 0.1)
    for (double b = 6; b <= 13 + 1e-9; b += 0.1) {
      double f = link_misfit(m, l, msg, a, b);
      if (f < best) best = f, ba = a, bb = b;
    }
  for (double step = 0.05; step > 1e-5; step /= 2) {
    bool moved = true;
    while (moved) {
      moved = false;
      for (int da = -1; da <= 1; da++)
        for (int db = -1; db <= 1; db++) {
          if (!da && !db) continue;
          double f = link_misfit(m, l, msg, ba + da * step, bb + db * step);
          if (f < best - 1e-15) best = f, ba += da * step, bb += db * step, moved = true;
        }
    }
  }
  l->link = (pcgc_link){pow(10, bb), pow(10, ba), m->intra.shared};
  if (worst) {
    *worst = 0;
    for (int i = 0; i < np; i++) {
      double r = fabs(link_model(m, l, &l->link, msg, i) / xs[i] - 1);
      if (r > *worst) *worst = r;
    }
  }
  return PCGC_OK;
}

pcgc_profile_device pcgc_profile_thread_device(const pcgc_machine *m, int threads, int cores) {
  pcgc_profile_device d;
  memset(&d, 0, sizeof d);
  d.kind = m->device.kind;
  d.cores = cores > 0 ? cores : 1;
  d.threads = threads < 1 ? 1 : threads > d.cores ? d.cores : threads;
  double share = (double)m->devices_per_node * d.threads / d.cores;
  for (int t = 0; t < PCGC_DTYPE_COUNT; t++) d.flops[t] = m->device.flops[t] * share;
  d.memory_bandwidth = m->device.memory_bandwidth * share;
  return d;
}

pcgc_profile_device pcgc_profile_gpu_device(const pcgc_machine *m, pcgc_precision p) {
  pcgc_machine at = *m;
  pcgc_machine_set_precision(&at, p);
  pcgc_profile_device d;
  memset(&d, 0, sizeof d);
  d.kind = at.device.kind;
  d.threads = d.cores = 1;
  memcpy(d.flops, at.device.flops, sizeof d.flops);
  d.memory_bandwidth = at.device.memory_bandwidth;
  return d;
}

void pcgc_profile_attrs_text(char *buf, size_t n, const pcgc_attrs *a) {
  if (!n) return;
  buf[0] = '\0';
  size_t used = 0;
  for (int i = 0; i < pcgc_op_num_attrs(a->kind); i++) {
    char one[256];
    pcgc_attr_format(one, sizeof one, a, i);
    int w = snprintf(buf + used, n - used, "%s%s", i ? " " : "", one);
    if (w < 0 || (size_t)w >= n - used) break;
    used += (size_t)w;
  }
}

void pcgc_profile_piece_dims(const pcgc_ptensor *t, int64_t *dims) {
  for (int d = 0; d < t->rank; d++) {
    int64_t div = t->degree[d] > 0 ? t->degree[d] : 1;
    if (t->micro > 1 && t->micro_dim == d) div *= t->micro;
    dims[d] = (t->dims[d] + div - 1) / div;
  }
}

static bool same_key(const pcgc_profile_entry *a, const pcgc_profile_entry *b) {
  if (a->kind != b->kind || a->dtype != b->dtype || a->n_in != b->n_in || strcmp(a->attrs, b->attrs) != 0)
    return false;
  for (int i = 0; i < a->n_in; i++) {
    if (a->rank[i] != b->rank[i]) return false;
    for (int d = 0; d < a->rank[i]; d++)
      if (a->dims[i][d] != b->dims[i][d]) return false;
  }
  return true;
}

pcgc_status pcgc_profile_key(const pcgc_graph *g, int node, pcgc_profile_entry *key, pcgc_error *err) {
  memset(key, 0, sizeof *key);
  if (!g || node < 0 || node >= g->n_nodes)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_profile_key: bad node %d", node);
  const pcgc_node *n = &g->nodes[node];
  if (!n->typed)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "%s '%s' has no type yet", pcgc_op_name(n->kind), n->name);
  if (n->n_in > PCGC_PROFILE_MAX_INPUTS)
    return pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "%s '%s' has %d inputs; a profile entry holds at most %d",
                          pcgc_op_name(n->kind), n->name, n->n_in, PCGC_PROFILE_MAX_INPUTS);
  pcgc_ptensor in[PCGC_PROFILE_MAX_INPUTS];
  for (int i = 0; i < n->n_in; i++) {
    const pcgc_ptensor *t = pcgc_graph_ref_type(g, n->in[i]);
    if (!t)
      return pcgc_error_set(err, PCGC_ERR_INVALID, "%s '%s': input %d has no type", pcgc_op_name(n->kind), n->name, i);
    in[i] = *t;
    key->rank[i] = t->rank;
    pcgc_profile_piece_dims(t, key->dims[i]);
  }
  key->kind = n->kind;
  key->n_in = n->n_in;
  key->dtype = pcgc_cost_op_dtype(n->n_in, in, n->n_out, n->out);
  pcgc_profile_attrs_text(key->attrs, sizeof key->attrs, n->attrs);
  return PCGC_OK;
}

const pcgc_profile_entry *pcgc_profile_find(const pcgc_profile *p, const pcgc_profile_entry *key) {
  if (!p || !key) return NULL;
  for (int i = 0; i < p->n; i++)
    if (same_key(&p->e[i], key)) return &p->e[i];
  return NULL;
}

pcgc_status pcgc_profile_add(pcgc_profile *p, const pcgc_profile_entry *e, pcgc_error *err) {
  if (!p || !e || e->n_in < 0 || e->n_in > PCGC_PROFILE_MAX_INPUTS || (unsigned)e->kind >= PCGC_OP_COUNT ||
      (unsigned)e->dtype >= PCGC_DTYPE_COUNT || !(e->fwd >= 0) || !(e->bwd >= 0))
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_profile_add: bad entry");
  for (int i = 0; i < p->n; i++)
    if (same_key(&p->e[i], e)) {
      p->e[i] = *e;
      return PCGC_OK;
    }
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 16;
    pcgc_profile_entry *ne = realloc(p->e, (size_t)cap * sizeof *ne);
    if (!ne) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory growing a profile");
    p->e = ne;
    p->cap = cap;
  }
  p->e[p->n++] = *e;
  return PCGC_OK;
}

void pcgc_profile_update_key(pcgc_optim_kind o, const pcgc_ptensor *t, pcgc_profile_entry *key) {
  memset(key, 0, sizeof *key);
  key->kind = PCGC_OP_WEIGHT;
  snprintf(key->attrs, sizeof key->attrs, "optimizer=%s", pcgc_optimizer_name(o));
  key->dtype = t->dtype;
  key->n_in = 1;
  key->rank[0] = t->rank;
  pcgc_profile_piece_dims(t, key->dims[0]);
}

/* ------------------------------------------------ times on a machine */

/* Rates a kernel runs at: peak FLOP/s per dtype and memory bandwidth. */
typedef struct rates {
  pcgc_device_kind kind;
  const double *flops;
  double bw;
} rates;

/* The roofline without launch overhead of a kernel doing F FLOPs and moving
 * B bytes at rates r (pcgc_cost_roofline's rule). */
static double roof(const rates *r, pcgc_op_kind kind, pcgc_dtype dtype, double F, double B) {
  const pcgc_op_efficiency *e = pcgc_cost_efficiency(kind);
  if (!e->kernel) return 0;
  double peak = r->flops[(unsigned)dtype < PCGC_DTYPE_COUNT ? dtype : PCGC_F32];
  if (!e->matrix && r->flops[PCGC_F32] < peak) peak = r->flops[PCGC_F32];
  double eff = r->kind == PCGC_DEVICE_CPU ? e->cpu : e->gpu;
  double tc = F > 0 && peak > 0 && eff > 0 ? F / (peak * eff) : 0;
  double tm = B > 0 && r->bw > 0 ? B / r->bw : 0;
  return tc > tm ? tc : tm;
}

/* Where a time is carried from (p) and to (m). Without a device record the
 * profile counts as measured on m. From a CPU to a CPU, m's rates are taken
 * at most at the profile's (`capped`): a device that is a smaller share of
 * a core than measured slows a kernel in proportion (time slicing), but
 * more cores than the measurement had are not assumed to speed it up, since
 * how well BLAS and the threaded vector kernels use them depends on the
 * shapes (2 threads against 1 on the 2-core box: ×1.0-1.1 for the CNN's
 * convolutions and the MLP's 64-row GEMMs, ×1.8-2.0 for the transformer's
 * 2048-row ones). */
static void carry_rates(const pcgc_profile *p, const pcgc_machine *m, rates *from, rates *to, double *capped) {
  *to = (rates){m->device.kind, m->device.flops, m->device.memory_bandwidth};
  if (!p->has_device) {
    *from = *to;
    return;
  }
  const pcgc_profile_device *d = &p->device;
  *from = (rates){d->kind, d->flops, d->memory_bandwidth};
  if (d->kind != PCGC_DEVICE_CPU || m->device.kind != PCGC_DEVICE_CPU) return;
  for (int t = 0; t < PCGC_DTYPE_COUNT; t++)
    capped[t] = m->device.flops[t] < d->flops[t] ? m->device.flops[t] : d->flops[t];
  to->flops = capped;
  if (d->memory_bandwidth < to->bw) to->bw = d->memory_bandwidth;
}

/* t measured for counts whose roofline was rp, carried to counts whose
 * roofline is rm: L + (t - L) × rm / rp; t itself when the rooflines agree. */
static double carry(double t, double rp, double rm, double L) {
  if (rm == rp || !(rp > 0)) return t;
  double s = t > L ? t - L : 0;
  return L + s * rm / rp;
}

/* Rank of entry e as a stand-in for key x: (tier, distance); false when it
 * cannot stand in (another op, dtype, or update of another optimizer). */
static bool rank_of(const pcgc_profile_entry *e, const pcgc_profile_entry *x, int *tier, double *dist) {
  if (e->kind != x->kind || e->dtype != x->dtype) return false;
  bool same_attrs = strcmp(e->attrs, x->attrs) == 0;
  if (x->kind == PCGC_OP_WEIGHT && !same_attrs) return false; /* an update of another optimizer */
  bool ranks = e->n_in == x->n_in;
  double d = 0;
  int n = e->n_in < x->n_in ? e->n_in : x->n_in;
  for (int i = 0; i < n; i++) {
    if (e->rank[i] != x->rank[i]) {
      ranks = false;
      double ne = 1, nx = 1;
      for (int k = 0; k < e->rank[i]; k++) ne *= e->dims[i][k] > 1 ? (double)e->dims[i][k] : 1;
      for (int k = 0; k < x->rank[i]; k++) nx *= x->dims[i][k] > 1 ? (double)x->dims[i][k] : 1;
      d += fabs(log(nx / ne));
      continue;
    }
    for (int k = 0; k < e->rank[i]; k++) {
      double a = e->dims[i][k] > 1 ? (double)e->dims[i][k] : 1, b = x->dims[i][k] > 1 ? (double)x->dims[i][k] : 1;
      d += fabs(log(b / a));
    }
  }
  *tier = !ranks ? 2 : same_attrs ? 0 : 1;
  *dist = d;
  return true;
}

/* The best-ranked entry for x ranked after (tier, dist, index) `after`
 * (index -1: from the start), or -1. */
static int next_nearest(const pcgc_profile *p, const pcgc_profile_entry *x, int after_tier, double after_dist,
                        int after) {
  int best = -1, bt = 0;
  double bd = 0;
  for (int i = 0; i < p->n; i++) {
    int t;
    double d;
    if (!rank_of(&p->e[i], x, &t, &d)) continue;
    if (after >= 0 && (t < after_tier || (t == after_tier && (d < after_dist || (d == after_dist && i <= after)))))
      continue; /* ranked at or before `after` */
    if (best < 0 || t < bt || (t == bt && d < bd)) {
      best = i;
      bt = t;
      bd = d;
    }
  }
  return best;
}

/* Per-task counts of node n of g with attributes a (pcgc_cost_node_time's:
 * its logical counts cut to one piece); its input types and dtype. */
static bool node_counts(const pcgc_graph *g, const pcgc_node *n, const pcgc_attrs *a, pcgc_ptensor *in,
                        pcgc_op_cost *piece, pcgc_dtype *dtype) {
  if (!n->typed || n->n_in > PCGC_VARIADIC) return false;
  for (int i = 0; i < n->n_in; i++) {
    const pcgc_ptensor *t = pcgc_graph_ref_type(g, n->in[i]);
    if (!t) return false;
    in[i] = *t;
  }
  pcgc_op_cost logical;
  pcgc_op_cost_of(n->kind, a, n->n_in, in, n->n_out, n->out, &logical);
  pcgc_cost_op_piece(n->n_in, in, n->n_out, n->out, &logical, piece);
  *dtype = pcgc_cost_op_dtype(n->n_in, in, n->n_out, n->out);
  return true;
}

/* Counts of entry e run as op `kind` with attributes a: its input shapes as
 * whole tensors (dtypes of `in`, n_in of them, else e's), outputs inferred.
 * False when they do not type. */
static bool entry_counts(const pcgc_profile_entry *e, pcgc_op_kind kind, const pcgc_attrs *a, int n_in,
                         const pcgc_ptensor *in, pcgc_op_cost *c) {
  pcgc_ptensor ein[PCGC_PROFILE_MAX_INPUTS], out[PCGC_VARIADIC];
  int n_out = pcgc_op_num_outputs(kind, a);
  if (n_out < 1 || n_out > PCGC_VARIADIC) return false;
  for (int i = 0; i < e->n_in; i++)
    pcgc_ptensor_init(&ein[i], i < n_in ? in[i].dtype : e->dtype, e->rank[i], e->dims[i]);
  if (pcgc_op_infer(kind, a, e->n_in, ein, out, NULL) != PCGC_OK) return false;
  pcgc_op_cost_of(kind, a, e->n_in, ein, n_out, out, c);
  return true;
}

/* A kernel to time on m: its key, op, attributes, input types (dtypes) and
 * per-task counts x. */
typedef struct kernel {
  const pcgc_profile_entry *key;
  pcgc_op_kind kind;
  const pcgc_attrs *a;
  int n_in;
  const pcgc_ptensor *in;
  pcgc_op_cost x;
  pcgc_dtype dtype;
} kernel;

/* The kernel's time on m from its own entry or (nearest) the nearest one
 * whose counts can be had. */
static pcgc_profile_source kernel_time(const pcgc_profile *p, const pcgc_machine *m, const kernel *x, bool nearest,
                                       pcgc_op_time *t) {
  const pcgc_profile_entry *e = pcgc_profile_find(p, x->key);
  pcgc_op_cost k = x->x;
  pcgc_profile_source src = PCGC_PROFILE_MEASURED;
  if (!e) {
    if (!nearest || !pcgc_cost_efficiency(x->kind)->kernel) return PCGC_PROFILE_NONE;
    int i = -1, tier = 0;
    double dist = 0;
    while ((i = next_nearest(p, x->key, tier, dist, i)) >= 0) {
      rank_of(&p->e[i], x->key, &tier, &dist);
      if (entry_counts(&p->e[i], x->kind, x->a, x->n_in, x->in, &k)) break;
    }
    if (i < 0) return PCGC_PROFILE_NONE;
    e = &p->e[i];
    src = PCGC_PROFILE_NEAREST;
  }
  rates from, to;
  double capped[PCGC_DTYPE_COUNT], L = m->device.launch_overhead;
  carry_rates(p, m, &from, &to, capped);
  t->fwd = carry(e->fwd, roof(&from, x->kind, x->dtype, k.fwd_flops, k.fwd_bytes),
                 roof(&to, x->kind, x->dtype, x->x.fwd_flops, x->x.fwd_bytes), L);
  t->bwd = carry(e->bwd, roof(&from, x->kind, x->dtype, k.bwd_flops, k.bwd_bytes),
                 roof(&to, x->kind, x->dtype, x->x.bwd_flops, x->x.bwd_bytes), L);
  return src;
}

/* A linear or conv2d with a fused activation nobody measured, as the CPU
 * backend runs it (runtime/cpu/k_dense.c): the op without it, then the
 * activation over its output; backward recomputes the pre-activation of a
 * fused GELU, one more forward GEMM. Each part from its own entry or the
 * nearest; false when either has none. A batchnorm's relu rides in its own
 * passes over the data (k_norm.c): the batchnorm's time alone. */
static bool fused_time(const pcgc_profile *p, const pcgc_machine *m, const pcgc_graph *g, const pcgc_node *n,
                       const pcgc_profile_entry *key, pcgc_op_time *t) {
  int ai = -1;
  for (int i = 0; i < pcgc_op_num_attrs(n->kind); i++)
    if (strcmp(pcgc_op_attr(n->kind, i)->name, "act") == 0) ai = i;
  if (ai < 0 || pcgc_attrs_int_at(n->attrs, ai) == PCGC_ACT_NONE || n->n_out != 1) return false;
  static const pcgc_op_kind act_op[] = {[PCGC_ACT_RELU] = PCGC_OP_RELU, [PCGC_ACT_GELU] = PCGC_OP_GELU,
                                        [PCGC_ACT_SIGMOID] = PCGC_OP_SIGMOID, [PCGC_ACT_TANH] = PCGC_OP_TANH};
  int64_t act = pcgc_attrs_int_at(n->attrs, ai);
  if (act < PCGC_ACT_RELU || act > PCGC_ACT_TANH) return false;

  pcgc_attrs plain = *n->attrs; /* the op alone */
  plain.val[ai].i = PCGC_ACT_NONE;
  pcgc_profile_entry bkey = *key;
  pcgc_profile_attrs_text(bkey.attrs, sizeof bkey.attrs, &plain);
  pcgc_ptensor in[PCGC_VARIADIC];
  kernel b = {.key = &bkey, .kind = n->kind, .a = &plain, .n_in = n->n_in, .in = in, .dtype = PCGC_F32};
  if (!node_counts(g, n, &plain, in, &b.x, &b.dtype)) return false;
  if (n->kind == PCGC_OP_BATCHNORM) return kernel_time(p, m, &b, true, t) != PCGC_PROFILE_NONE;

  pcgc_attrs aa; /* the activation over the output piece */
  pcgc_attrs_init(&aa, act_op[act]);
  pcgc_profile_entry akey;
  memset(&akey, 0, sizeof akey);
  akey.kind = act_op[act];
  akey.dtype = b.dtype;
  akey.n_in = 1;
  akey.rank[0] = n->out[0].rank;
  pcgc_profile_piece_dims(&n->out[0], akey.dims[0]);
  pcgc_profile_attrs_text(akey.attrs, sizeof akey.attrs, &aa);
  pcgc_ptensor y;
  pcgc_ptensor_init(&y, n->out[0].dtype, akey.rank[0], akey.dims[0]);
  kernel a = {.key = &akey, .kind = akey.kind, .a = &aa, .n_in = 1, .in = &y, .dtype = b.dtype};
  pcgc_op_cost_of(akey.kind, &aa, 1, &y, 1, &y, &a.x);

  pcgc_op_time tb, ta;
  if (!kernel_time(p, m, &b, true, &tb) || !kernel_time(p, m, &a, true, &ta)) return false;
  t->fwd = tb.fwd + ta.fwd;
  t->bwd = tb.bwd + ta.bwd + (act == PCGC_ACT_GELU ? tb.fwd : 0);
  return true;
}

pcgc_profile_source pcgc_profile_node_time(const pcgc_profile *p, const pcgc_machine *m, const pcgc_graph *g,
                                           int node, pcgc_op_time *t) {
  if (!p || !p->n || !m || !g || !t) return PCGC_PROFILE_NONE;
  pcgc_profile_entry key;
  if (pcgc_profile_key(g, node, &key, NULL) != PCGC_OK) return PCGC_PROFILE_NONE;
  const pcgc_node *n = &g->nodes[node];
  pcgc_ptensor in[PCGC_VARIADIC];
  kernel x = {.key = &key, .kind = n->kind, .a = n->attrs, .n_in = n->n_in, .in = in, .dtype = PCGC_F32};
  if (!node_counts(g, n, n->attrs, in, &x.x, &x.dtype)) return PCGC_PROFILE_NONE;
  if (kernel_time(p, m, &x, false, t) == PCGC_PROFILE_MEASURED) return PCGC_PROFILE_MEASURED;
  if (fused_time(p, m, g, n, &key, t)) return PCGC_PROFILE_NEAREST;
  return kernel_time(p, m, &x, true, t);
}

pcgc_profile_source pcgc_profile_update_time(const pcgc_profile *p, const pcgc_machine *m, pcgc_optim_kind o,
                                             const pcgc_ptensor *t, double *seconds) {
  if (!p || !p->n || !m || !t || !seconds) return PCGC_PROFILE_NONE;
  pcgc_profile_entry key;
  pcgc_profile_update_key(o, t, &key);
  const pcgc_profile_entry *e = pcgc_profile_find(p, &key);
  pcgc_profile_source src = PCGC_PROFILE_MEASURED;
  if (!e) {
    int i = next_nearest(p, &key, 0, 0, -1);
    if (i < 0 || p->e[i].n_in != 1) return PCGC_PROFILE_NONE;
    e = &p->e[i];
    src = PCGC_PROFILE_NEAREST;
  }
  pcgc_ptensor w; /* the entry's piece as a whole tensor */
  pcgc_ptensor_init(&w, e->dtype, e->rank[0], e->dims[0]);
  pcgc_op_cost x = pcgc_cost_update(o, t), k = src == PCGC_PROFILE_MEASURED ? x : pcgc_cost_update(o, &w);
  rates from, to;
  double capped[PCGC_DTYPE_COUNT];
  carry_rates(p, m, &from, &to, capped);
  *seconds = carry(e->fwd, roof(&from, PCGC_OP_MUL, t->dtype, k.fwd_flops, k.fwd_bytes),
                   roof(&to, PCGC_OP_MUL, t->dtype, x.fwd_flops, x.fwd_bytes), m->device.launch_overhead);
  return src;
}

/* ------------------------------------------------------------- loading */

/* A parse error in `path`: the message names the entry (index from 0) when
 * there is one; file:line:col and the source line where the JSON is bad. */
static pcgc_status bad(pcgc_error *err, const char *path, int entry, const char *what) {
  if (entry >= 0) pcgc_error_set(err, PCGC_ERR_PARSE, "profile database: entry %d: %s", entry, what);
  else pcgc_error_set(err, PCGC_ERR_PARSE, "profile database: %s", what);
  pcgc_error_at(err, (pcgc_srcloc){path, 0, 0}, 0, NULL, 0);
  pcgc_error_hint(err, "profile databases are written by `pcgc profile MODEL --machine M -o FILE`");
  return PCGC_ERR_PARSE;
}

static pcgc_status parse_entry(const cJSON *j, const char *path, int i, pcgc_profile_entry *e, pcgc_error *err) {
  memset(e, 0, sizeof *e);
  const cJSON *op = cJSON_GetObjectItemCaseSensitive(j, "op"), *at = cJSON_GetObjectItemCaseSensitive(j, "attrs"),
              *ins = cJSON_GetObjectItemCaseSensitive(j, "inputs"), *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype"),
              *fw = cJSON_GetObjectItemCaseSensitive(j, "forward"), *bw = cJSON_GetObjectItemCaseSensitive(j, "backward");
  if (!cJSON_IsObject(j)) return bad(err, path, i, "is not an object");
  if (!cJSON_IsString(op) || pcgc_op_from_name(op->valuestring) < 0)
    return bad(err, path, i, "\"op\" must name an operator");
  if (!cJSON_IsString(at) || strlen(at->valuestring) >= sizeof e->attrs)
    return bad(err, path, i, "\"attrs\" must be a string (pcgc_attr_format text)");
  if (!cJSON_IsString(dt) || pcgc_dtype_from_name(dt->valuestring) < 0)
    return bad(err, path, i, "\"dtype\" must name a dtype (f32, ...)");
  if (!cJSON_IsNumber(fw) || !(fw->valuedouble >= 0) || !cJSON_IsNumber(bw) || !(bw->valuedouble >= 0))
    return bad(err, path, i, "\"forward\" and \"backward\" must be seconds >= 0");
  if (!cJSON_IsArray(ins) || cJSON_GetArraySize(ins) > PCGC_PROFILE_MAX_INPUTS)
    return bad(err, path, i, "\"inputs\" must be an array of at most 16 shapes");
  e->kind = (pcgc_op_kind)pcgc_op_from_name(op->valuestring);
  e->dtype = (pcgc_dtype)pcgc_dtype_from_name(dt->valuestring);
  snprintf(e->attrs, sizeof e->attrs, "%s", at->valuestring);
  e->fwd = fw->valuedouble;
  e->bwd = bw->valuedouble;
  const cJSON *shape;
  cJSON_ArrayForEach(shape, ins) {
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > PCGC_MAX_RANK)
      return bad(err, path, i, "each input shape must be an array of at most 6 sizes");
    int r = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) {
      if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble != floor(d->valuedouble) ||
          d->valuedouble > 9.0e15) /* exact in a double, and within int64 */
        return bad(err, path, i, "sizes must be non-negative integers (at most 9e15)");
      e->dims[e->n_in][r++] = (int64_t)d->valuedouble;
    }
    e->rank[e->n_in++] = r;
  }
  return PCGC_OK;
}

/* The "device" record of a version 2 file: null, or an object. */
static pcgc_status parse_device(const cJSON *j, const char *path, pcgc_profile *p, pcgc_error *err) {
  if (cJSON_IsNull(j)) return PCGC_OK;
  const char *need = "\"device\" must be null or {\"kind\": \"cpu\" or \"gpu\", \"threads\": N >= 1, "
                     "\"cores\": N >= 1, \"flops\": {\"f32\": FLOP/s > 0, ...}, \"memory_bandwidth\": bytes/s > 0}";
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(j, "kind"), *th = cJSON_GetObjectItemCaseSensitive(j, "threads"),
              *co = cJSON_GetObjectItemCaseSensitive(j, "cores"), *fl = cJSON_GetObjectItemCaseSensitive(j, "flops"),
              *bw = cJSON_GetObjectItemCaseSensitive(j, "memory_bandwidth");
  if (!cJSON_IsObject(j) || !cJSON_IsString(kind) || (strcmp(kind->valuestring, "cpu") && strcmp(kind->valuestring, "gpu")) ||
      !cJSON_IsNumber(th) || !(th->valuedouble >= 1 && th->valuedouble <= 1e6) || th->valuedouble != floor(th->valuedouble) ||
      !cJSON_IsNumber(co) || !(co->valuedouble >= 1 && co->valuedouble <= 1e6) || co->valuedouble != floor(co->valuedouble) ||
      !cJSON_IsObject(fl) || !cJSON_IsNumber(bw) || !(bw->valuedouble > 0) || !isfinite(bw->valuedouble))
    return bad(err, path, -1, need);
  pcgc_profile_device d;
  memset(&d, 0, sizeof d);
  d.kind = strcmp(kind->valuestring, "cpu") == 0 ? PCGC_DEVICE_CPU : PCGC_DEVICE_GPU;
  d.threads = (int)th->valuedouble;
  d.cores = (int)co->valuedouble;
  d.memory_bandwidth = bw->valuedouble;
  const cJSON *f32 = cJSON_GetObjectItemCaseSensitive(fl, "f32");
  if (!cJSON_IsNumber(f32) || !(f32->valuedouble > 0) || !isfinite(f32->valuedouble)) return bad(err, path, -1, need);
  for (int t = 0; t < PCGC_DTYPE_COUNT; t++) { /* a float dtype left out, and the integers, as f32 */
    const cJSON *v = pcgc_dtype_is_float((pcgc_dtype)t) ? cJSON_GetObjectItemCaseSensitive(fl, pcgc_dtype_name((pcgc_dtype)t)) : NULL;
    if (v && (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble))) return bad(err, path, -1, need);
    d.flops[t] = v ? v->valuedouble : f32->valuedouble;
  }
  pcgc_profile_set_device(p, &d);
  return PCGC_OK;
}

/* The optional "links" member: an array of measured links. */
static pcgc_status parse_links(const cJSON *j, const char *path, pcgc_profile *p, pcgc_error *err) {
  if (!j) return PCGC_OK;
  if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) > PCGC_PROFILE_MAX_LINKS)
    return bad(err, path, -1, "\"links\" must be an array of at most 16 measured links");
  const cJSON *k;
  int i = 0;
  cJSON_ArrayForEach(k, j) {
    char what[160];
    const cJSON *dv = cJSON_GetObjectItemCaseSensitive(k, "devices"), *bw = cJSON_GetObjectItemCaseSensitive(k, "bandwidth"),
                *lat = cJSON_GetObjectItemCaseSensitive(k, "latency"), *sh = cJSON_GetObjectItemCaseSensitive(k, "shared"),
                *pts = cJSON_GetObjectItemCaseSensitive(k, "points");
    pcgc_profile_link l;
    memset(&l, 0, sizeof l);
    snprintf(what, sizeof what, "link %d: ", i);
    size_t w = strlen(what);
    if (!cJSON_IsObject(k))
      snprintf(what + w, sizeof what - w, "is not an object");
    else if (!cJSON_IsNumber(dv) || !(dv->valuedouble >= 2 && dv->valuedouble <= 65536) || dv->valuedouble != floor(dv->valuedouble))
      snprintf(what + w, sizeof what - w, "\"devices\" must be an integer from 2 to 65536");
    else if (!cJSON_IsNumber(bw) || !(bw->valuedouble > 0) || !isfinite(bw->valuedouble))
      snprintf(what + w, sizeof what - w, "\"bandwidth\" must be a positive number of bytes/s");
    else if (!cJSON_IsNumber(lat) || !(lat->valuedouble >= 0) || !isfinite(lat->valuedouble))
      snprintf(what + w, sizeof what - w, "\"latency\" must be a number of seconds, 0 or more");
    else if (!cJSON_IsBool(sh))
      snprintf(what + w, sizeof what - w, "\"shared\" must be true or false");
    else if (!cJSON_IsArray(pts) || cJSON_GetArraySize(pts) > PCGC_PROFILE_LINK_POINTS)
      snprintf(what + w, sizeof what - w, "\"points\" must be an array of at most 16 [bytes, seconds] pairs");
    else
      what[0] = 0;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(k, "messages");
    if (!what[0] && msgs && (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) > PCGC_PROFILE_LINK_POINTS))
      snprintf(what, sizeof what, "link %d: \"messages\" must be an array of at most 16 [bytes, seconds] pairs", i);
    for (int part = 0; part < 2 && !what[0]; part++) {
      const cJSON *pt, *arr = part ? msgs : pts;
      int *cnt = part ? &l.n_msg : &l.n_points;
      double *xb = part ? l.msg_bytes : l.bytes, *xs = part ? l.msg_seconds : l.seconds;
      cJSON_ArrayForEach(pt, arr) {
        const cJSON *b = cJSON_GetArrayItem(pt, 0), *t = cJSON_GetArrayItem(pt, 1);
        if (!cJSON_IsArray(pt) || cJSON_GetArraySize(pt) != 2 || !cJSON_IsNumber(b) || !(b->valuedouble > 0) ||
            !isfinite(b->valuedouble) || !cJSON_IsNumber(t) || !(t->valuedouble > 0) || !isfinite(t->valuedouble)) {
          snprintf(what, sizeof what, "link %d: %s %d must be [bytes, seconds], both positive", i,
                   part ? "message" : "point", *cnt);
          break;
        }
        xb[*cnt] = b->valuedouble;
        xs[(*cnt)++] = t->valuedouble;
      }
    }
    if (what[0]) return bad(err, path, -1, what);
    l.devices = (int)dv->valuedouble;
    l.link = (pcgc_link){bw->valuedouble, lat->valuedouble, cJSON_IsTrue(sh)};
    for (int e = 0; e < p->n_links; e++)
      if (p->links[e].devices == l.devices) {
        snprintf(what, sizeof what, "link %d: a second link of %d processes", i, l.devices);
        return bad(err, path, -1, what);
      }
    pcgc_status st = pcgc_profile_add_link(p, &l, err);
    if (st != PCGC_OK) return st;
    i++;
  }
  return PCGC_OK;
}

pcgc_status pcgc_profile_parse(const char *text, size_t len, const char *path, pcgc_profile **out,
                               pcgc_error *err) {
  if (out) *out = NULL;
  if (!text || !out) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_profile_parse: bad argument");
  if (!path) path = "<profile>";
  /* duplicated members, invalid UTF-8 and NUL characters: file:line:col */
  pcgc_status strict = pcgc_json_check_strict(text, len, path, err);
  if (strict != PCGC_OK) {
    if (strict == PCGC_ERR_PARSE && err) {
      char msg[sizeof err->message];
      snprintf(msg, sizeof msg, "profile database: %.1000s", err->message);
      memcpy(err->message, msg, sizeof msg);
    }
    return strict;
  }
  cJSON *root = cJSON_ParseWithLength(text, len);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    int line = 1, col = 1;
    for (const char *c = text; at && c < at && c < text + len; c++) {
      col = *c == '\n' ? 1 : col + 1;
      line += *c == '\n';
    }
    bad(err, path, -1, "malformed JSON");
    pcgc_error_at(err, (pcgc_srcloc){path, line, col}, 1, text, len);
    return PCGC_ERR_PARSE;
  }
  pcgc_status st = PCGC_OK;
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format"),
              *ver = cJSON_GetObjectItemCaseSensitive(root, "version"),
              *mach = cJSON_GetObjectItemCaseSensitive(root, "machine"),
              *ents = cJSON_GetObjectItemCaseSensitive(root, "entries"),
              *dev = cJSON_GetObjectItemCaseSensitive(root, "device");
  pcgc_profile *p = NULL;
  if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "pcgc-profile") != 0) {
    st = bad(err, path, -1, "not a profile database (no \"format\": \"pcgc-profile\")");
  } else if (!cJSON_IsNumber(ver) || (ver->valuedouble != 1 && ver->valuedouble != 2)) {
    st = bad(err, path, -1, "unsupported \"version\" (this build reads versions 1 and 2)");
  } else if (ver->valuedouble == 2 && !dev) {
    st = bad(err, path, -1, "version 2 needs \"device\": what the kernels were measured as, or null");
  } else if (!cJSON_IsString(mach) || strlen(mach->valuestring) >= PCGC_MACHINE_NAME_MAX) {
    st = bad(err, path, -1, "\"machine\" must be a machine name");
  } else if (!cJSON_IsArray(ents)) {
    st = bad(err, path, -1, "\"entries\" must be an array");
  } else if (!(p = pcgc_profile_new(mach->valuestring))) {
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory reading %s", path);
  } else if ((ver->valuedouble == 1 || (st = parse_device(dev, path, p, err)) == PCGC_OK) &&
             (st = parse_links(cJSON_GetObjectItemCaseSensitive(root, "links"), path, p, err)) == PCGC_OK) {
    int i = 0;
    const cJSON *j;
    cJSON_ArrayForEach(j, ents) {
      pcgc_profile_entry e;
      if ((st = parse_entry(j, path, i++, &e, err)) != PCGC_OK) break;
      if ((st = pcgc_profile_add(p, &e, err)) != PCGC_OK) break;
    }
  }
  cJSON_Delete(root);
  if (st != PCGC_OK) {
    pcgc_profile_free(p);
    return st;
  }
  *out = p;
  return PCGC_OK;
}

pcgc_status pcgc_profile_load(const char *path, pcgc_profile **out, pcgc_error *err) {
  if (out) *out = NULL;
  if (!path || !out) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_profile_load: bad argument");
  FILE *f = fopen(path, "rb");
  if (!f) return pcgc_error_set(err, PCGC_ERR_IO, "cannot open profile '%s': %s", path, strerror(errno));
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? 2 * cap : 65536;
      char *t = realloc(text, cap);
      if (!t) {
        free(text);
        fclose(f);
        return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory reading %s", path);
      }
      text = t;
    }
    size_t r = fread(text + len, 1, cap - len, f);
    len += r;
    if (r == 0) break;
  }
  bool rerr = ferror(f);
  fclose(f);
  if (rerr) {
    free(text);
    return pcgc_error_set(err, PCGC_ERR_IO, "cannot read profile '%s'", path);
  }
  pcgc_status st = pcgc_profile_parse(text, len, path, out, err);
  free(text);
  return st;
}

/* ------------------------------------------------------------- writing */

static cJSON *device_json(const pcgc_profile *p) {
  if (!p->has_device) return cJSON_CreateNull();
  const pcgc_profile_device *d = &p->device;
  cJSON *j = cJSON_CreateObject(), *fl;
  if (!j || !cJSON_AddStringToObject(j, "kind", d->kind == PCGC_DEVICE_CPU ? "cpu" : "gpu") ||
      !cJSON_AddNumberToObject(j, "threads", d->threads) || !cJSON_AddNumberToObject(j, "cores", d->cores) ||
      !(fl = cJSON_AddObjectToObject(j, "flops")))
    goto fail;
  for (int t = 0; t < PCGC_DTYPE_COUNT; t++)
    if (pcgc_dtype_is_float((pcgc_dtype)t) && !cJSON_AddNumberToObject(fl, pcgc_dtype_name((pcgc_dtype)t), d->flops[t]))
      goto fail;
  if (!cJSON_AddNumberToObject(j, "memory_bandwidth", d->memory_bandwidth)) goto fail;
  return j;
fail:
  cJSON_Delete(j);
  return NULL;
}

/* A new object appended to array a, or NULL (out of memory). */
static cJSON *append_object(cJSON *a) {
  cJSON *j = cJSON_CreateObject();
  if (j && !cJSON_AddItemToArray(a, j)) {
    cJSON_Delete(j);
    return NULL;
  }
  return j;
}

/* [bytes, seconds] pairs appended to array a; false on out of memory. */
static bool add_pairs(cJSON *a, int n, const double *bytes, const double *seconds) {
  for (int k = 0; k < n; k++) {
    const double v[2] = {bytes[k], seconds[k]};
    cJSON *pt = cJSON_CreateDoubleArray(v, 2);
    if (!pt || !cJSON_AddItemToArray(a, pt)) {
      cJSON_Delete(pt);
      return false;
    }
  }
  return true;
}

static cJSON *to_json(const pcgc_profile *p) {
  cJSON *root = cJSON_CreateObject(), *ents = NULL, *dev = NULL;
  if (!root || !cJSON_AddStringToObject(root, "format", "pcgc-profile") || !cJSON_AddNumberToObject(root, "version", 2) ||
      !cJSON_AddStringToObject(root, "machine", p->machine))
    goto fail;
  if (!(dev = device_json(p)) || !cJSON_AddItemToObject(root, "device", dev)) {
    cJSON_Delete(dev);
    goto fail;
  }
  if (p->n_links) {
    cJSON *links = cJSON_AddArrayToObject(root, "links");
    if (!links) goto fail;
    for (int i = 0; i < p->n_links; i++) {
      const pcgc_profile_link *l = &p->links[i];
      cJSON *j = append_object(links), *pts;
      if (!j) goto fail;
      if (!cJSON_AddNumberToObject(j, "devices", l->devices) || !cJSON_AddNumberToObject(j, "bandwidth", l->link.bandwidth) ||
          !cJSON_AddNumberToObject(j, "latency", l->link.latency) || !cJSON_AddBoolToObject(j, "shared", l->link.shared) ||
          !(pts = cJSON_AddArrayToObject(j, "points")))
        goto fail;
      if (!add_pairs(pts, l->n_points, l->bytes, l->seconds)) goto fail;
      if (l->n_msg && (!(pts = cJSON_AddArrayToObject(j, "messages")) ||
                       !add_pairs(pts, l->n_msg, l->msg_bytes, l->msg_seconds)))
        goto fail;
    }
  }
  if (!(ents = cJSON_AddArrayToObject(root, "entries"))) goto fail;
  for (int i = 0; i < p->n; i++) {
    const pcgc_profile_entry *e = &p->e[i];
    cJSON *j = append_object(ents), *ins;
    if (!j) goto fail;
    if (!cJSON_AddStringToObject(j, "op", pcgc_op_name(e->kind)) || !cJSON_AddStringToObject(j, "attrs", e->attrs) ||
        !(ins = cJSON_AddArrayToObject(j, "inputs")))
      goto fail;
    for (int k = 0; k < e->n_in; k++) {
      cJSON *s = cJSON_CreateArray();
      if (!s || !cJSON_AddItemToArray(ins, s)) {
        cJSON_Delete(s);
        goto fail;
      }
      for (int d = 0; d < e->rank[k]; d++) {
        cJSON *v = cJSON_CreateNumber((double)e->dims[k][d]);
        if (!v || !cJSON_AddItemToArray(s, v)) {
          cJSON_Delete(v);
          goto fail;
        }
      }
    }
    if (!cJSON_AddStringToObject(j, "dtype", pcgc_dtype_name(e->dtype)) || !cJSON_AddNumberToObject(j, "forward", e->fwd) ||
        !cJSON_AddNumberToObject(j, "backward", e->bwd))
      goto fail;
  }
  return root;
fail:
  cJSON_Delete(root);
  return NULL;
}

/* Writes a JSON document (and a final newline) to `path` atomically. */
static pcgc_status write_json(const cJSON *root, const char *path, pcgc_error *err) {
  char *text = cJSON_Print(root);
  size_t len = text ? strlen(text) : 0;
  char *withnl = text ? realloc(text, len + 2) : NULL;
  if (!withnl) {
    free(text);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing %s", path);
  }
  withnl[len] = '\n'; /* the JSON and a final newline, written atomically */
  withnl[len + 1] = '\0';
  pcgc_status st = pcgc_write_file_atomic(path, withnl, len + 1, err);
  free(withnl);
  return st;
}

pcgc_status pcgc_profile_write(const pcgc_profile *p, const char *path, pcgc_error *err) {
  if (!p || !path) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_profile_write: bad argument");
  cJSON *root = to_json(p);
  if (!root) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing %s", path);
  pcgc_status st = write_json(root, path, err);
  cJSON_Delete(root);
  return st;
}

