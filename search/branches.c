/*
 * branches.c — the joint search's region move (joint_internal.h): the
 * branches of a fork-join region each narrowed to a data-parallel group of
 * its own, the groups on disjoint devices. Unity's inception result: the
 * towers of a module run side by side on parts of the machine, each on a
 * larger slice of the batch, so that every device launches a fraction of
 * the module's kernels, updates a fraction of its weights and all-reduces
 * their gradients over a smaller group.
 *
 * A region is a concat whose inputs (its branches) are computed from
 * outside tensors by subgraphs no other branch reads, every tensor entering
 * or leaving a branch split d ways along the same (batch) dim and nothing
 * else: data parallelism over d devices. Narrowing branch i to s_i of them
 * (s_i divides d) inserts
 *
 *     combine(x, dim=b, degree=d/s_i)        before the branch, per entry x
 *     replicate(w, degree=s_i)               in place of replicate(w, degree=d)
 *     partition(y_i, dim=b, degree=d/s_i)    between the branch and the concat
 *
 * (an input that only branch i reads, split d ways, is split s_i ways
 * instead) which moves data and nothing else, so the result computes what the start
 * did (the reference interpreter and `pcgc verify` check the plans like any
 * other). A trace line records it: "@branches s_1 ... s_k at CONCAT"
 * (pcgc__joint_replay applies it again).
 *
 * The group sizes come from the cost model: each branch's kernels cost
 * their launches plus their work scaled by d/s, its weights an update
 * each, its entry and exit tensors a transfer; the branches are grouped
 * and the groups sized (halvings of d, summing to d) to minimise the
 * busiest group's time, and the region is narrowed only where that beats
 * running every branch on all d devices. Groups are laid out strided
 * (group of s at offsets o + k·d/s of the region's d devices), so each
 * device of a group gathers its slice of the batch from the d/s devices
 * next to it: within a node where the region spans several.
 *
 * pcgc__branches_narrow narrows every region it finds worth it at once;
 * the joint search (segment.c) simulates that on its result and keeps it
 * when faster.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "joint_internal.h" /* declarations only: nothing here calls the search */

#define MAX_BRANCHES 8
#define MAX_SIZES 16
#define MAX_ENTRIES 64 /* tensors a branch reads from outside */

/* ------------------------------------------------------------ regions */

typedef struct consumers {
  int *first; /* per node: its consumers are list[first[v] .. first[v + 1]) */
  int *list;
} consumers;

static void consumers_free(consumers *C) {
  free(C->first);
  free(C->list);
}

static bool consumers_build(const pcgc_graph *g, consumers *C) {
  int n = g->n_nodes, e = 0;
  C->first = calloc((size_t)n + 2, sizeof *C->first);
  for (int v = 0; C->first && v < n; v++) e += g->nodes[v].n_in;
  C->list = malloc((size_t)(e ? e : 1) * sizeof *C->list);
  if (!C->first || !C->list) {
    consumers_free(C);
    return false;
  }
  for (int v = 0; v < n; v++)
    for (int s = 0; s < g->nodes[v].n_in; s++) C->first[g->nodes[v].in[s].node + 2]++;
  for (int v = 0; v < n; v++) C->first[v + 2] += C->first[v + 1];
  for (int v = 0; v < n; v++)
    for (int s = 0; s < g->nodes[v].n_in; s++) C->list[C->first[g->nodes[v].in[s].node + 1]++] = v;
  return true;
}

/* Split d ways along one dim and nothing else; that dim, or -1. */
static int dp_dim(const pcgc_ptensor *t, int *d) {
  if (t->sum != 1 || t->replica != 1 || t->micro != 1) return -1;
  int b = -1;
  for (int i = 0; i < t->rank; i++) {
    if (t->degree[i] == 1) continue;
    if (b >= 0) return -1;
    b = i;
  }
  if (b >= 0) *d = t->degree[b];
  return b;
}

typedef struct region {
  int join, k, dim, d;
  bool free[MAX_BRANCHES]; /* computes nothing: stays on all d devices */
  unsigned *mask; /* per node: bit i set where input i of the join reads it (caller's array) */
} region;

static bool in_branch(const region *R, int v, int i) { return R->mask[v] == 1u << i; }

/* Whether node `join` of g closes a region (the top comment); fills R
 * (R->mask: g->n_nodes entries, overwritten). */
static bool region_at(const pcgc_graph *g, const consumers *C, int join, region *R, int *stack) {
  const pcgc_node *J = &g->nodes[join];
  if (J->kind != PCGC_OP_CONCAT || J->n_in < 2 || J->n_in > MAX_BRANCHES || !J->typed) return false;
  R->join = join;
  R->k = J->n_in;
  R->dim = dp_dim(&J->out[0], &R->d);
  if (R->dim < 0 || R->d < 2 || pcgc_attrs_int(J->attrs, "axis") == R->dim) return false;
  for (int i = 0; i < R->k; i++) {
    int d2 = 0;
    if (dp_dim(pcgc_graph_ref_type(g, J->in[i]), &d2) != R->dim || d2 != R->d) return false;
  }
  memset(R->mask, 0, (size_t)g->n_nodes * sizeof *R->mask);
  for (int i = 0; i < R->k; i++) {
    int top = 0;
    unsigned bit = 1u << i;
    if (!(R->mask[J->in[i].node] & bit)) {
      R->mask[J->in[i].node] |= bit;
      stack[top++] = J->in[i].node;
    }
    while (top > 0) {
      const pcgc_node *n = &g->nodes[stack[--top]];
      for (int s = 0; s < n->n_in; s++) {
        int u = n->in[s].node;
        if (R->mask[u] & bit) continue;
        R->mask[u] |= bit;
        stack[top++] = u;
      }
    }
  }
  for (int i = 0; i < R->k; i++) {
    if (!in_branch(R, J->in[i].node, i)) return false; /* the fork itself, or read by another branch */
    for (int s = 0; s < R->k; s++)
      if (s != i && J->in[s].node == J->in[i].node) return false;
  }
  bool computes[MAX_BRANCHES] = {false};
  for (int v = 0; v < g->n_nodes; v++) {
    unsigned mk = R->mask[v];
    if (!mk || (mk & (mk - 1))) continue; /* outside, or shared by branches */
    int i = __builtin_ctz(mk);
    const pcgc_node *n = &g->nodes[v];
    pcgc_op_class cl = pcgc_op_class_of(n->kind);
    if (cl == PCGC_CLASS_LOSS || n->kind == PCGC_OP_PIPELINE || n->kind == PCGC_OP_UNPIPELINE) return false;
    computes[i] |= cl == PCGC_CLASS_COMPUTE;
    if (n->kind == PCGC_OP_REPLICATE && pcgc_attrs_int(n->attrs, "degree") != R->d) return false;
    for (int c = C->first[v]; c < C->first[v + 1]; c++) /* nothing leaves but into the join */
      if (R->mask[C->list[c]] != mk && !(C->list[c] == join && v == J->in[i].node)) return false;
    if (cl == PCGC_CLASS_SOURCE) continue;
    for (int s = 0; s < n->n_in; s++) { /* what enters is split along the same dim the same way */
      if (in_branch(R, n->in[s].node, i)) continue;
      int d2 = 0;
      if (cl != PCGC_CLASS_COMPUTE || dp_dim(pcgc_graph_ref_type(g, n->in[s]), &d2) != R->dim || d2 != R->d)
        return false;
    }
  }
  int busy = 0; /* branches that compute; the others (an input passed straight on) stay as they are */
  for (int i = 0; i < R->k; i++) {
    R->free[i] = !computes[i];
    busy += computes[i];
  }
  return busy >= 2;
}

/* ------------------------------------------------------------ narrowing */

/* A name of g not taken: base, else base.2, base.3, ... */
static void fresh_name(const pcgc_graph *g, const char *base, char *buf, size_t n) {
  snprintf(buf, n, "%s", base);
  for (int k = 2; pcgc_graph_find(g, buf) >= 0; k++) snprintf(buf, n, "%s.%d", base, k);
}

static int add_relayout(pcgc_graph *g, pcgc_op_kind kind, const char *base, int dim, int degree, pcgc_ref in) {
  pcgc_attrs a;
  pcgc_attrs_init(&a, kind);
  if (pcgc_attrs_set_int(&a, "dim", dim) != PCGC_OK || pcgc_attrs_set_int(&a, "degree", degree) != PCGC_OK)
    return PCGC_ERR_INVALID;
  char name[700];
  fresh_name(g, base, name, sizeof name);
  return pcgc_graph_add_node(g, kind, name, &a, 1, &in);
}

/* Where a region's groups go (narrow with views): the region's devices
 * (base: its entries' view), each branch's estimated time on its group
 * (load), and what earlier regions put on each of the machine's D devices
 * (acc, updated), so that the heaviest groups of successive regions do not
 * land on the same devices. */
typedef struct placer {
  pcgc_view base;
  int D;
  const double *load;
  double *acc;
} placer;

/* Offsets of the groups (grp[i]: branch i's; size[i] its size) among the
 * region's d devices, laid out strided: group of s at o, o + d/s, ...; the
 * largest groups first, then the busiest, each at the free offset whose
 * devices carry the least so far. false when they do not fit. */
static bool layout(int k, const int *grp, const int *size, int d, const placer *pl, int *offset) {
  bool *used = calloc((size_t)d, sizeof *used);
  if (!used) return false;
  int order[MAX_BRANCHES], n = 0;
  double gl[MAX_BRANCHES] = {0}; /* per branch: its group's load */
  for (int i = 0; i < k; i++)
    for (int j = 0; j < k; j++)
      if (grp[j] == grp[i]) gl[i] += pl->load[j];
  for (int i = 0; i < k; i++) {
    bool first = size[i] < d; /* a branch on all d devices is not moved */
    for (int j = 0; j < i && first; j++) first = grp[j] != grp[i];
    if (first) order[n++] = i;
  }
  for (int a = 1; a < n; a++) /* stable: larger first, then busier */
    for (int b = a; b > 0; b--) {
      int x = order[b], y = order[b - 1];
      if (size[x] < size[y] || (size[x] == size[y] && !(gl[x] > gl[y]))) break;
      order[b] = y;
      order[b - 1] = x;
    }
  bool ok = true;
  for (int a = 0; a < n && ok; a++) {
    int i = order[a], s = size[i], st = d / s, best = -1;
    double best_max = 0;
    for (int o = 0; o < st; o++) {
      bool free_all = true;
      double most = 0;
      for (int q = 0; q < s && free_all; q++) {
        free_all = !used[o + q * st];
        double x = pl->acc[pcgc_view_device(pl->base, o + q * st, pl->D)];
        most = x > most ? x : most;
      }
      if (free_all && (best < 0 || most < best_max)) {
        best = o;
        best_max = most;
      }
    }
    if (best < 0) {
      ok = false;
      break;
    }
    for (int q = 0; q < s; q++) {
      used[best + q * st] = true;
      pl->acc[pcgc_view_device(pl->base, best + q * st, pl->D)] += gl[i];
    }
    for (int j = 0; j < k; j++)
      if (grp[j] == grp[i] && size[j] < d) offset[j] = best;
  }
  free(used);
  return ok;
}

/* The view of the tensors entering region R (the first one found), where
 * its groups' devices are counted from. */
static pcgc_view region_base(const pcgc_graph *g, const region *R, const pcgc_mapping *mp) {
  for (int v = 0; v < g->n_nodes; v++) {
    unsigned mk = R->mask[v];
    if (!mk || (mk & (mk - 1)) || pcgc_op_class_of(g->nodes[v].kind) != PCGC_CLASS_COMPUTE) continue;
    int i = __builtin_ctz(mk);
    for (int s = 0; s < g->nodes[v].n_in; s++)
      if (!in_branch(R, g->nodes[v].in[s].node, i)) return mp->view[g->nodes[v].in[s].node];
  }
  return mp->view[R->join];
}

/* Narrows the region closed by node `join_name` of *g: branch i to size[i]
 * devices (a divisor of the region's d). *g is replaced by the result. With
 * mp (views of *g; replaced too), the branches of a group (grp) share their
 * devices, laid out by `layout`; without, views are not kept. why: on
 * failure, what is wrong. */
static pcgc_status narrow(pcgc_graph **gp, pcgc_mapping *mp, const char *join_name, int k, const int *size,
                          const int *grp, placer *pl, char *why, size_t why_n) {
  const pcgc_graph *g = *gp;
  int join = pcgc_graph_find(g, join_name);
  if (join < 0) {
    snprintf(why, why_n, "no node '%s'", join_name);
    return PCGC_ERR_INVALID;
  }
  consumers C = {0};
  region R = {0};
  int *stack = malloc((size_t)(g->n_nodes + 1) * sizeof *stack);
  R.mask = malloc((size_t)(g->n_nodes + 1) * sizeof *R.mask);
  if (!stack || !R.mask || !consumers_build(g, &C)) {
    free(stack);
    free(R.mask);
    snprintf(why, why_n, "out of memory");
    return PCGC_ERR_NOMEM;
  }
  pcgc_status st = PCGC_OK;
  pcgc_graph *g2 = NULL;
  int n0 = g->n_nodes;
  if (!region_at(g, &C, join, &R, stack)) {
    snprintf(why, why_n, "'%s' does not close branches that are data parallel alone", join_name);
    st = PCGC_ERR_INVALID;
  } else if (R.k != k) {
    snprintf(why, why_n, "'%s' has %d branches, the step sizes %d", join_name, R.k, k);
    st = PCGC_ERR_INVALID;
  }
  for (int i = 0; st == PCGC_OK && i < k; i++)
    if (size[i] < 1 || size[i] > R.d || R.d % size[i]) {
      snprintf(why, why_n, "branch %d of '%s': %d devices does not divide its %d", i + 1, join_name, size[i], R.d);
      st = PCGC_ERR_INVALID;
    }
  int offset[MAX_BRANCHES] = {0};
  if (st == PCGC_OK && mp) pl->base = region_base(g, &R, mp);
  if (st == PCGC_OK && mp && !layout(k, grp, size, R.d, pl, offset)) {
    snprintf(why, why_n, "the groups of '%s' do not fit on its %d devices", join_name, R.d);
    st = PCGC_ERR_INVALID;
  }
  if (st == PCGC_OK && !(g2 = pcgc_graph_clone(g))) st = PCGC_ERR_NOMEM;
  int *branch_of = NULL; /* per node of g2: the branch whose group it runs on (-1: none) */
  if (st == PCGC_OK && !(branch_of = malloc((size_t)(n0 + MAX_BRANCHES * (MAX_ENTRIES + 1) + 1) * sizeof *branch_of)))
    st = PCGC_ERR_NOMEM;
  for (int v = 0; st == PCGC_OK && v < n0; v++) {
    unsigned mk = R.mask[v];
    branch_of[v] = mk && !(mk & (mk - 1)) ? __builtin_ctz(mk) : -1;
  }
  for (int i = 0; st == PCGC_OK && i < k; i++) {
    int f = R.d / size[i];
    if (f == 1) continue;
    pcgc_ref ent_from[MAX_ENTRIES];
    int ent_node[MAX_ENTRIES], n_ent = 0;
    for (int v = 0; st == PCGC_OK && v < n0; v++) {
      if (!in_branch(&R, v, i)) continue;
      const pcgc_node *n = &g->nodes[v];
      /* the group's copies of its weights, and its slices of an input only it reads */
      bool input_split = n->kind == PCGC_OP_PARTITION && in_branch(&R, n->in[0].node, i) &&
                         g->nodes[n->in[0].node].kind == PCGC_OP_INPUT &&
                         pcgc_attrs_int(n->attrs, "dim") == R.dim && pcgc_attrs_int(n->attrs, "degree") == R.d;
      if (n->kind == PCGC_OP_REPLICATE || input_split) {
        pcgc_attrs a = *n->attrs;
        if (pcgc_attrs_set_int(&a, "degree", size[i]) != PCGC_OK || pcgc_graph_set_attrs(g2, v, &a) != PCGC_OK)
          st = PCGC_ERR_NOMEM;
        continue;
      }
      if (pcgc_op_class_of(n->kind) == PCGC_CLASS_SOURCE) continue;
      for (int s = 0; st == PCGC_OK && s < n->n_in; s++) {
        pcgc_ref u = n->in[s];
        if (in_branch(&R, u.node, i)) continue;
        int e = 0;
        while (e < n_ent && (ent_from[e].node != u.node || ent_from[e].slot != u.slot)) e++;
        if (e == n_ent) {
          if (n_ent == MAX_ENTRIES) {
            snprintf(why, why_n, "branch %d of '%s' reads more than %d tensors from outside", i + 1, join_name,
                     MAX_ENTRIES);
            st = PCGC_ERR_INVALID;
            break;
          }
          char base[600];
          snprintf(base, sizeof base, "%s.in%d", join_name, i);
          int c = add_relayout(g2, PCGC_OP_COMBINE, base, R.dim, f, u);
          if (c < 0) {
            st = (pcgc_status)c;
            break;
          }
          branch_of[c] = i;
          ent_from[n_ent] = u;
          ent_node[n_ent++] = c;
        }
        g2->nodes[v].in[s] = (pcgc_ref){ent_node[e], 0};
      }
    }
    if (st != PCGC_OK) break;
    char base[600];
    snprintf(base, sizeof base, "%s.out%d", join_name, i);
    int p = add_relayout(g2, PCGC_OP_PARTITION, base, R.dim, f, g->nodes[join].in[i]);
    if (p < 0) {
      st = (pcgc_status)p;
      break;
    }
    branch_of[p] = -1;
    g2->nodes[join].in[i] = (pcgc_ref){p, 0};
  }
  pcgc_error e = {0};
  if (st == PCGC_OK && pcgc_graph_infer(g2, &e) != PCGC_OK) {
    snprintf(why, why_n, "narrowing the branches of '%s': %s", join_name, e.message);
    st = PCGC_ERR_INVALID;
  }
  if (st == PCGC_OK && mp) {
    pcgc_mapping nm;
    if (pcgc_mapping_init(&nm, g2->n_nodes, (pcgc_view){0, 1}, &e) != PCGC_OK) {
      st = PCGC_ERR_NOMEM;
    } else {
      memcpy(nm.view, mp->view, (size_t)n0 * sizeof *nm.view);
      pcgc_view base = pl->base;
      for (int v = 0; v < g2->n_nodes; v++) {
        int i = branch_of[v];
        if (v >= n0 && g2->nodes[v].kind == PCGC_OP_PARTITION) nm.view[v] = mp->view[join];
        if (i < 0 || R.d / size[i] == 1) continue;
        nm.view[v] = (pcgc_view){(base.start + base.stride * offset[i]) % pl->D, base.stride * (R.d / size[i])};
      }
      pcgc_mapping_destroy(mp);
      *mp = nm;
    }
  }
  if (st == PCGC_OK) {
    pcgc_graph_free(*gp);
    *gp = g2;
    g2 = NULL;
  } else if (st == PCGC_ERR_NOMEM) {
    snprintf(why, why_n, "out of memory");
  }
  pcgc_graph_free(g2);
  free(branch_of);
  free(stack);
  free(R.mask);
  consumers_free(&C);
  return st;
}

pcgc_status pcgc__branches_apply(pcgc_graph **g, const char *join, int k, const int *size, char *why, size_t why_n) {
  if (k < 1 || k > MAX_BRANCHES) {
    snprintf(why, why_n, "%d branches (at most %d)", k, MAX_BRANCHES);
    return PCGC_ERR_INVALID;
  }
  return narrow(g, NULL, join, k, size, NULL, NULL, why, why_n);
}

/* ------------------------------------------------------------ choosing */

/* A branch on s of the region's d devices: its kernels (their launches,
 * their work scaled by d/s) and the transfers into and out of its group on
 * the critical path; its weights' updates; and beside them, on the links,
 * the all-reduce of its gradients over the group. */
typedef struct bcost {
  double launches; /* s: every kernel's launch, and two per weight (zeroing, update) */
  double work;     /* s on each of d devices: the rest of the kernels' time */
  double bytes;    /* entering and leaving, logical */
} bcost;

static double compute_on(const bcost *c, int d, int s, double bw) {
  double f = (double)d / s;
  return c->launches + c->work * f + (s < d && bw > 0 ? 2 * c->bytes * (f - 1) / d / bw : 0);
}

static void branch_costs(const pcgc_graph *g, const pcgc_machine *m, const region *R, bcost *bc) {
  double L = m->device.launch_overhead;
  memset(bc, 0, (size_t)R->k * sizeof *bc);
  for (int v = 0; v < g->n_nodes; v++) {
    unsigned mk = R->mask[v];
    if (!mk || (mk & (mk - 1))) continue;
    int i = __builtin_ctz(mk);
    const pcgc_node *n = &g->nodes[v];
    if (n->kind == PCGC_OP_REPLICATE) { /* the weight's update, and its gradient zeroed */
      bc[i].launches += 2 * L;
      continue;
    }
    if (pcgc_op_class_of(n->kind) != PCGC_CLASS_COMPUTE) continue;
    pcgc_op_time t;
    pcgc_error e = {0};
    if (pcgc_cost_node_time(m, g, v, &t, &e) != PCGC_OK) continue;
    int nl = (t.fwd > 0) + (t.bwd > 0);
    bc[i].launches += nl * L;
    bc[i].work += t.fwd + t.bwd - nl * L;
    for (int s = 0; s < n->n_in; s++)
      if (!in_branch(R, n->in[s].node, i) && pcgc_op_class_of(g->nodes[n->in[s].node].kind) != PCGC_CLASS_SOURCE)
        bc[i].bytes += (double)pcgc_ptensor_bytes(pcgc_graph_ref_type(g, n->in[s]));
  }
  for (int i = 0; i < R->k; i++)
    bc[i].bytes += (double)pcgc_ptensor_bytes(pcgc_graph_ref_type(g, g->nodes[R->join].in[i]));
}

/* Where a group of s of region R's devices sits, laid out strided from
 * `base` (offset 0 stands for any: the shape is the same); devs: room for
 * R->d device ids. */
static pcgc_comm_group group_shape(const pcgc_machine *m, const region *R, pcgc_view base, int s, int *devs) {
  int D = pcgc_machine_num_devices(m);
  for (int q = 0; q < s; q++) devs[q] = pcgc_view_device((pcgc_view){base.start, base.stride * (R->d / s)}, q, D);
  return pcgc_comm_group_of(m, s, devs);
}

/* Branch i's all-reduces over a group shaped grp: with bn false, its
 * weights' gradients (beside the compute); with bn true, its batch norms'
 * statistics, forward and backward (blocking, on the compute's path; as
 * the simulator's bn_sync). */
static double sync_on(const pcgc_graph *g, const pcgc_machine *m, const region *R, int i, pcgc_comm_group grp,
                      bool bn) {
  double t = 0;
  for (int v = 0; v < g->n_nodes; v++) {
    const pcgc_node *n = &g->nodes[v];
    if (!in_branch(R, v, i)) continue;
    if (!bn && n->kind == PCGC_OP_REPLICATE)
      t += pcgc_comm_time(m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, grp,
                          (double)pcgc_ptensor_bytes(pcgc_graph_ref_type(g, n->in[0])));
    if (bn && n->kind == PCGC_OP_BATCHNORM && n->out[0].rank > 1 && n->out[0].degree[1] == 1)
      t += 2 * pcgc_comm_time(m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, grp, 2.0 * sizeof(double) * (double)n->out[0].dims[1]);
  }
  return t;
}

typedef struct chooser {
  int k, d, n_opt, opt[MAX_SIZES];
  double tc[MAX_BRANCHES][MAX_SIZES], ts[MAX_BRANCHES][MAX_SIZES]; /* branch i on opt[j] devices */
  int lab[MAX_BRANCHES], gsz[MAX_BRANCHES];
  double best;
  int best_lab[MAX_BRANCHES], best_gsz[MAX_BRANCHES];
} chooser;

static void sizes_for(chooser *X, int m, int g, int left) {
  if (g == m) {
    if (left) return;
    double worst = 0;
    for (int q = 0; q < m; q++) {
      double c = 0, s = 0;
      for (int i = 0; i < X->k; i++)
        if (X->lab[i] == q) {
          c += X->tc[i][X->gsz[q]];
          s += X->ts[i][X->gsz[q]];
        }
      double tq = c > s ? c : s;
      worst = tq > worst ? tq : worst;
    }
    if (worst < X->best) {
      X->best = worst;
      memcpy(X->best_lab, X->lab, sizeof X->lab);
      memcpy(X->best_gsz, X->gsz, sizeof X->gsz);
    }
    return;
  }
  for (int j = 0; j < X->n_opt; j++)
    if (X->opt[j] <= left - (m - g - 1)) {
      X->gsz[g] = j;
      sizes_for(X, m, g + 1, left - X->opt[j]);
    }
}

/* Every grouping of the branches (restricted growth strings), two groups
 * or more, each sized. */
static void groupings(chooser *X, int i, int m) {
  if (i == X->k) {
    if (m >= 2) sizes_for(X, m, 0, X->d);
    return;
  }
  for (int q = 0; q <= m; q++) {
    X->lab[i] = q;
    groupings(X, i + 1, q == m ? m + 1 : m);
  }
}

/* The sizes to narrow region R to (size[i], grp[i] per branch), or false
 * where every branch on all d devices is as fast by the estimate. A group
 * takes the longer of its branches' compute and their gradients'
 * all-reduces, which overlap. */
static bool choose(const pcgc_graph *g, const pcgc_machine *m, const pcgc_mapping *mp, const region *R, int *size,
                   int *grp, double *load) {
  bcost bc[MAX_BRANCHES];
  branch_costs(g, m, R, bc);
  chooser X = {.k = 0, .d = R->d, .best = INFINITY};
  for (int s = R->d / 2; s >= 1 && X.n_opt < MAX_SIZES; s /= 2) {
    X.opt[X.n_opt++] = s;
    if (s % 2) break;
  }
  pcgc_view base = mp->view[g->nodes[R->join].in[0].node];
  int *devs = malloc((size_t)R->d * sizeof *devs);
  if (!devs) return false; /* not narrowed */
  pcgc_comm_group all_grp = group_shape(m, R, base, R->d, devs), shape[MAX_SIZES];
  for (int j = 0; j < X.n_opt; j++) shape[j] = group_shape(m, R, base, X.opt[j], devs);
  free(devs);
  double c_all = 0, s_all = 0, bw = m->intra.bandwidth;
  int busy[MAX_BRANCHES];
  for (int i = 0; i < R->k; i++) {
    c_all += compute_on(&bc[i], R->d, R->d, bw) + sync_on(g, m, R, i, all_grp, true);
    s_all += sync_on(g, m, R, i, all_grp, false);
    if (R->free[i]) continue;
    busy[X.k] = i;
    for (int j = 0; j < X.n_opt; j++) {
      X.tc[X.k][j] = compute_on(&bc[i], R->d, X.opt[j], bw) + (X.opt[j] > 1 ? sync_on(g, m, R, i, shape[j], true) : 0);
      X.ts[X.k][j] = sync_on(g, m, R, i, shape[j], false);
    }
    X.k++;
  }
  groupings(&X, 0, 0);
  double all = c_all > s_all ? c_all : s_all;
  if (!(X.best < all)) return false;
  for (int i = 0; i < R->k; i++) { /* the branches that compute nothing stay on all d */
    grp[i] = MAX_BRANCHES + i;
    size[i] = R->d;
    load[i] = 0;
  }
  for (int b = 0; b < X.k; b++) {
    grp[busy[b]] = X.best_lab[b];
    size[busy[b]] = X.opt[X.best_gsz[X.best_lab[b]]];
    load[busy[b]] = X.tc[b][X.best_gsz[X.best_lab[b]]];
  }
  return true;
}

/* A node name that is one word of a trace line as it is (no escaping
 * here: joint_trace.c reads these lines, and this file writes them). */
static bool plain_name(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s <= ' ' || *s == '%' || *s == 0x7f) return false;
  return true;
}

static char *branches_line(const char *join, int k, const int *size) {
  size_t n = strlen(PCGC__BRANCHES_STEP) + strlen(join) + 8 + 12 * (size_t)k;
  char *line = malloc(n);
  if (!line) return NULL;
  size_t w = (size_t)snprintf(line, n, "%s", PCGC__BRANCHES_STEP);
  for (int i = 0; i < k; i++) w += (size_t)snprintf(line + w, n - w, " %d", size[i]);
  snprintf(line + w, n - w, " at %s", join);
  return line;
}

pcgc_status pcgc__branches_narrow(const pcgc_machine *m, const pcgc_graph *g, const pcgc_mapping *mp,
                                  pcgc_graph **out, pcgc_mapping *out_mp, char ***lines_out, int *n_lines_out,
                                  pcgc_error *err) {
  *out = NULL;
  memset(out_mp, 0, sizeof *out_mp);
  *lines_out = NULL;
  *n_lines_out = 0;
  int n = g->n_nodes;
  consumers C = {0};
  region R = {0};
  int *stack = malloc((size_t)(n + 1) * sizeof *stack);
  R.mask = malloc((size_t)(n + 1) * sizeof *R.mask);
  typedef struct planned {
    int join, k, size[MAX_BRANCHES], grp[MAX_BRANCHES];
    double load[MAX_BRANCHES];
  } planned;
  planned *plan = malloc((size_t)(n + 1) * sizeof *plan);
  int *order = malloc((size_t)(n + 1) * sizeof *order);
  bool *inside = calloc((size_t)n + 1, sizeof *inside);
  int n_plan = 0;
  if (!stack || !R.mask || !plan || !order || !inside || !consumers_build(g, &C)) {
    free(stack);
    free(R.mask);
    free(plan);
    free(order);
    free(inside);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
  }
  /* outer regions first: a region inside a branch narrowed already stays */
  bool ok = pcgc_graph_topo_order(g, order, NULL) == PCGC_OK;
  for (int q = n - 1; ok && q >= 0; q--) {
    int v = order[q];
    if (inside[v] || !plain_name(g->nodes[v].name) || !region_at(g, &C, v, &R, stack)) continue;
    planned p = {.join = v, .k = R.k};
    if (!choose(g, m, mp, &R, p.size, p.grp, p.load)) continue;
    plan[n_plan++] = p;
    for (int u = 0; u < n; u++) inside[u] |= R.mask[u] != 0 && !(R.mask[u] & (R.mask[u] - 1));
  }
  free(order);
  free(inside);
  free(stack);
  free(R.mask);
  consumers_free(&C);
  for (int a = 0, b = n_plan - 1; a < b; a++, b--) { /* in topological order */
    planned t = plan[a];
    plan[a] = plan[b];
    plan[b] = t;
  }
  pcgc_status st = PCGC_OK;
  pcgc_graph *gw = n_plan ? pcgc_graph_clone(g) : NULL;
  pcgc_mapping mw = {0};
  char **lines = NULL;
  int n_lines = 0;
  if (n_plan && (!gw || pcgc_mapping_init(&mw, mp->n_nodes, (pcgc_view){0, 1}, err) != PCGC_OK ||
                 !(lines = calloc((size_t)n_plan, sizeof *lines))))
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
  if (st == PCGC_OK && n_plan) memcpy(mw.view, mp->view, (size_t)mp->n_nodes * sizeof *mw.view);
  double *acc = n_plan ? calloc((size_t)pcgc_machine_num_devices(m), sizeof *acc) : NULL;
  if (n_plan && !acc) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
  for (int i = 0; st == PCGC_OK && i < n_plan; i++) {
    char why[800];
    const char *jn = g->nodes[plan[i].join].name;
    placer pl = {.D = pcgc_machine_num_devices(m), .load = plan[i].load, .acc = acc};
    pcgc_status s2 = narrow(&gw, &mw, jn, plan[i].k, plan[i].size, plan[i].grp, &pl, why, sizeof why);
    if (s2 == PCGC_ERR_NOMEM) st = pcgc_error_set(err, s2, "out of memory in the search");
    if (s2 != PCGC_OK) continue; /* this region stays as it was */
    if (!(lines[n_lines++] = branches_line(jn, plan[i].k, plan[i].size)))
      st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
  }
  free(plan);
  free(acc);
  if (st != PCGC_OK || !n_lines) {
    for (int i = 0; i < n_lines; i++) free(lines[i]);
    free(lines);
    pcgc_graph_free(gw);
    pcgc_mapping_destroy(&mw);
    return st;
  }
  *out = gw;
  *out_mp = mw;
  *lines_out = lines;
  *n_lines_out = n_lines;
  return PCGC_OK;
}
