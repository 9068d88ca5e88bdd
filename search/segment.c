/*
 * segment.c — pcgc_joint_search (search.h): graphs too small to split are
 * searched whole by the core (joint.c); large ones are split at bottleneck
 * tensors, each distinct segment searched alone, and spliced:
 *
 *   1. Cuts (taskgraph/cuts.c): the graph is cut at bottleneck tensors into segments
 *      of about `segment_nodes` computed nodes.
 *   2. Resident nodes (sources and the parallel ops that only distribute
 *      them) belong to the one segment that reads their component (weight
 *      and its partitions/replicas); a component read by several segments
 *      (a tied weight, a data input) stays outside every segment.
 *   3. Each segment as a graph of its own: every tensor it reads from outside
 *      is a stub (an input rebuilt to the same parallel type by partition,
 *      pipeline and replicate ops), its nodes are copied under their names,
 *      and unless it holds the model's loss, its output feeds mse against a
 *      stub label of the same type. Views are the start's.
 *   4. Segments are grouped by canonical hash and isomorphism; the first of
 *      each group is searched by the core (joint.c), refusing rewrites that
 *      touch a stub, with the time limit shared among the groups left.
 *   5. Splice: a new graph of the start's nodes outside improved segments
 *      plus each improved segment's rewrite, named through the isomorphism
 *      for the copies; views re-placed (pcgc_views_replace); kept only when
 *      it simulates faster than the start.
 *   6. Trace: every improved segment's steps (its group's, rule-wide moves
 *      as their single matches) with names carried through the isomorphism,
 *      in segment order, replayed on the start. When that gives the spliced
 *      graph (pcgc_graph_equal), the replayed graph replaces it, so that the
 *      trace reproduces the result exactly, names and node order included;
 *      otherwise the spliced graph stays, untraced (r->untraced).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "joint_internal.h"

/* ------------------------------------------------------ one segment */

#define STUB_PREFIX "__seg"

typedef struct segment {
  int index;
  pcgc_graph *g;          /* standalone: stubs, copied nodes, label and loss */
  pcgc_mapping mp;
  int *from;              /* node of g -> node of the start (-1: a stub node) */
  int n_stubs;            /* stub, label and loss nodes: names below */
  char **stub_names;
  pcgc_ref *stub_for;     /* per stub end (by node of g): the start's tensor */
  int group;              /* index of the first segment isomorphic to it */
  int *iso;               /* group leader's node -> this one's node */
  bool ok;                /* built and typed */
} segment;

static void segment_free(segment *s) {
  pcgc_graph_free(s->g);
  pcgc_mapping_destroy(&s->mp);
  free(s->from);
  for (int i = 0; i < s->n_stubs; i++) free(s->stub_names[i]);
  free(s->stub_names);
  free(s->stub_for);
  free(s->iso);
}

static bool is_stub(const segment *s, const char *name) {
  for (int i = 0; i < s->n_stubs; i++)
    if (strcmp(s->stub_names[i], name) == 0) return true;
  return false;
}

/* Adds a node named after the stub counter; records its name. */
static int stub_node(segment *s, pcgc_op_kind kind, const pcgc_attrs *a, int n_in, const pcgc_ref *in) {
  char name[64];
  int k = s->n_stubs;
  do snprintf(name, sizeof name, STUB_PREFIX "%d_%d", s->index, k++);
  while (pcgc_graph_find(s->g, name) >= 0);
  char **v = realloc(s->stub_names, (size_t)(s->n_stubs + 1) * sizeof *v);
  if (!v) return PCGC_ERR_NOMEM;
  s->stub_names = v;
  if (!(v[s->n_stubs] = malloc(strlen(name) + 1))) return PCGC_ERR_NOMEM;
  strcpy(v[s->n_stubs++], name);
  return pcgc_graph_add_node(s->g, kind, name, a, n_in, in);
}

/* An input rebuilt to parallel type t: input, partitions, pipeline,
 * replicate. Returns the end node, or < 0 (PCGC_ERR_INVALID: a type these
 * ops cannot make, such as partial sums). */
static int build_stub(segment *s, const pcgc_ptensor *t) {
  if (t->sum != 1) return PCGC_ERR_INVALID;
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_INPUT);
  pcgc_error e = {0};
  if (pcgc_attrs_set_ints(&a, "shape", t->rank, t->dims) != PCGC_OK) return PCGC_ERR_INVALID;
  pcgc_attrs_set_int(&a, "dtype", t->dtype);
  int id = stub_node(s, PCGC_OP_INPUT, &a, 0, NULL);
  for (int d = 0; id >= 0 && d <= t->rank; d++) {
    if (d < t->rank && t->degree[d] > 1) {
      pcgc_attrs_init(&a, PCGC_OP_PARTITION);
      pcgc_attrs_set_int(&a, "dim", d);
      pcgc_attrs_set_int(&a, "degree", t->degree[d]);
      id = stub_node(s, PCGC_OP_PARTITION, &a, 1, &(pcgc_ref){id, 0});
    }
    if (id >= 0 && d == t->rank && t->micro > 1) {
      pcgc_attrs_init(&a, PCGC_OP_PIPELINE);
      pcgc_attrs_set_int(&a, "dim", t->micro_dim);
      pcgc_attrs_set_int(&a, "degree", t->micro);
      id = stub_node(s, PCGC_OP_PIPELINE, &a, 1, &(pcgc_ref){id, 0});
    }
    if (id >= 0 && d == t->rank && t->replica > 1) {
      pcgc_attrs_init(&a, PCGC_OP_REPLICATE);
      pcgc_attrs_set_int(&a, "degree", t->replica);
      id = stub_node(s, PCGC_OP_REPLICATE, &a, 1, &(pcgc_ref){id, 0});
    }
  }
  if (id < 0) return id;
  /* type the chain now: it must come out exactly as t */
  for (int i = 0; i < s->g->n_nodes; i++)
    if (!s->g->nodes[i].typed && pcgc_graph_infer_node(s->g, i, &e) != PCGC_OK) return PCGC_ERR_INVALID;
  return pcgc_ptensor_equal(&s->g->nodes[id].out[0], t) ? id : PCGC_ERR_INVALID;
}

/* Step 3 for segment k. s->ok false when it cannot stand alone (a stub
 * type the parallel ops cannot build, an output the loss cannot take). */
static pcgc_status segment_build(segment *s, const pcgc_cuts *P, int k, const pcgc_mapping *mp) {
  const pcgc_graph *g = P->g;
  memset(s, 0, sizeof *s);
  s->index = k;
  s->group = k;
  s->g = pcgc_graph_new();
  int *id = malloc((size_t)P->n * sizeof *id);     /* start node -> segment node */
  int *stub = malloc((size_t)P->n * 8 * sizeof *stub); /* (node, slot < 8) -> stub end */
  /* nodes at most: the copies, and a stub of at most rank + 3 nodes per
   * input read plus the label */
  size_t cap = 1;
  for (int x = 0; x < P->n; x++)
    if (P->seg[x] == k) cap += 1 + (size_t)g->nodes[x].n_in * (PCGC_MAX_RANK + 3);
  cap += PCGC_MAX_RANK + 4;
  s->from = malloc(cap * sizeof *s->from);
  s->stub_for = malloc(cap * sizeof *s->stub_for);
  if (!s->g || !id || !stub || !s->from || !s->stub_for) {
    free(id);
    free(stub);
    return PCGC_ERR_NOMEM;
  }
  for (size_t i = 0; i < cap; i++) s->stub_for[i] = (pcgc_ref){-1, -1};
  for (int i = 0; i < P->n; i++) id[i] = -1;
  for (int i = 0; i < 8 * P->n; i++) stub[i] = -1;
  pcgc_status st = PCGC_OK;
  s->ok = true;
  pcgc_ref in[PCGC_VARIADIC > 64 ? 64 : PCGC_VARIADIC];
  for (int q = 0; q < P->n && s->ok && st == PCGC_OK; q++) {
    int x = P->order[q];
    const pcgc_node *nd = &g->nodes[x];
    if (P->seg[x] != k) continue;
    if (nd->n_in > (int)(sizeof in / sizeof *in)) {
      s->ok = false;
      break;
    }
    for (int j = 0; j < nd->n_in && s->ok; j++) {
      pcgc_ref r = nd->in[j];
      if (P->seg[r.node] == k) {
        in[j] = (pcgc_ref){id[r.node], r.slot};
        continue;
      }
      if (r.slot >= 8) {
        s->ok = false;
        break;
      }
      int *e = &stub[8 * r.node + r.slot];
      if (*e < 0) {
        int n0 = s->g->n_nodes;
        *e = build_stub(s, &g->nodes[r.node].out[r.slot]);
        if (*e == PCGC_ERR_NOMEM) st = PCGC_ERR_NOMEM;
        if (*e < 0) {
          s->ok = false;
          break;
        }
        for (int i = n0; i < s->g->n_nodes; i++) s->from[i] = -1;
        s->stub_for[*e] = r;
      }
      in[j] = (pcgc_ref){*e, 0};
    }
    if (!s->ok) break;
    int nid = pcgc_graph_copy_node(s->g, g, x, NULL, in);
    if (nid < 0) {
      st = nid == PCGC_ERR_NOMEM ? PCGC_ERR_NOMEM : PCGC_OK;
      s->ok = false;
      break;
    }
    id[x] = nid;
    s->from[nid] = x;
  }
  pcgc_ref o = P->out[k];
  if (s->ok && st == PCGC_OK && o.node >= 0) {
    /* the output into mse against a label of its type */
    int n0 = s->g->n_nodes;
    int label = build_stub(s, &g->nodes[o.node].out[o.slot]);
    pcgc_attrs a;
    pcgc_attrs_init(&a, PCGC_OP_MSE);
    pcgc_ref li[2] = {{id[o.node], o.slot}, {label, 0}};
    int loss = label >= 0 && id[o.node] >= 0 ? stub_node(s, PCGC_OP_MSE, &a, 2, li) : -1;
    if (label == PCGC_ERR_NOMEM || loss == PCGC_ERR_NOMEM) st = PCGC_ERR_NOMEM;
    if (loss < 0) s->ok = false;
    for (int i = n0; s->ok && i < s->g->n_nodes; i++) s->from[i] = -1;
  }
  pcgc_error e = {0};
  if (s->ok && st == PCGC_OK && pcgc_graph_infer(s->g, &e) != PCGC_OK) s->ok = false;
  if (s->ok && st == PCGC_OK) {
    st = pcgc_mapping_init(&s->mp, s->g->n_nodes, (pcgc_view){0, 1}, NULL);
    for (int i = 0; st == PCGC_OK && i < s->g->n_nodes; i++) {
      int x = s->from[i] >= 0 ? s->from[i] : o.node;
      if (x >= 0) s->mp.view[i] = mp->view[x];
    }
  }
  free(id);
  free(stub);
  return st;
}

/* The core's accept hook: every stub node is still there, unchanged, and
 * nothing but stubs reads a stub other than a stub end. */
typedef struct accept_ctx {
  const segment *s;
} accept_ctx;

static bool stubs_intact(void *ctx, const pcgc_graph *g2) {
  const segment *s = ((accept_ctx *)ctx)->s;
  const pcgc_graph *g = s->g;
  for (int i = 0; i < s->n_stubs; i++) {
    int a = pcgc_graph_find(g, s->stub_names[i]), b = pcgc_graph_find(g2, s->stub_names[i]);
    if (b < 0) return false;
    const pcgc_node *na = &g->nodes[a], *nb = &g2->nodes[b];
    if (na->kind != nb->kind || na->n_in != nb->n_in || !pcgc_attrs_equal(na->attrs, nb->attrs)) return false;
    bool loss = na->kind == PCGC_OP_MSE;
    for (int k = loss ? 1 : 0; k < na->n_in; k++)
      if (strcmp(g->nodes[na->in[k].node].name, g2->nodes[nb->in[k].node].name) != 0) return false;
  }
  for (int i = 0; i < g2->n_nodes; i++) {
    const pcgc_node *x = &g2->nodes[i];
    if (is_stub(s, x->name)) continue;
    for (int k = 0; k < x->n_in; k++) {
      const char *src = g2->nodes[x->in[k].node].name;
      if (!is_stub(s, src)) continue;
      int a = pcgc_graph_find(g, src);
      if (s->stub_for[a].node < 0) return false; /* not a stub end */
    }
  }
  return true;
}

/* ------------------------------------------------------------ splice */

/* The name of a leader-result node for member s: names of leader nodes map
 * through the isomorphism; rewrite names "<leader name>/<rest>" keep their
 * rest; anything else gets a "#k" suffix. */
static void member_name(const segment *lead, const segment *s, const char *name, char *buf, size_t n) {
  if (s == lead) {
    snprintf(buf, n, "%s", name);
    return;
  }
  size_t len = strlen(name);
  for (size_t cut = len;; cut--) {
    if (cut == len || name[cut] == '/') {
      char head[600];
      snprintf(head, sizeof head, "%.*s", (int)(cut < 599 ? cut : 599), name);
      int a = pcgc_graph_find(lead->g, head);
      if (a >= 0 && s->iso[a] >= 0) {
        snprintf(buf, n, "%s%s", s->g->nodes[s->iso[a]].name, name + cut);
        return;
      }
    }
    if (cut == 0) break;
  }
  snprintf(buf, n, "%s#%d", name, s->index);
}

typedef struct splice {
  const pcgc_cuts *P;
  segment *segs;
  pcgc_graph **best;      /* per segment: its group's best rewrite (NULL: unchanged) */
  int *kid;               /* start node -> new node (-1: replaced) */
  int **rid;              /* per segment: best-graph node -> new node */
  pcgc_ref *out_new;      /* per improved segment: where its output now is */
} splice;

static pcgc_ref map_start_ref(const splice *S, pcgc_ref r) {
  int k = S->P->seg[r.node];
  if (k >= 0 && S->best[k]) return S->out_new[k];
  return (pcgc_ref){S->kid[r.node], r.slot};
}

static pcgc_ref map_seg_ref(const splice *S, int k, pcgc_ref r) {
  const pcgc_graph *b = S->best[k];
  const segment *lead = &S->segs[S->segs[k].group];
  const char *name = b->nodes[r.node].name;
  if (is_stub(lead, name)) {
    int a = pcgc_graph_find(lead->g, name);
    /* the leader's stub stands for a tensor of the leader's segment; the
     * member's stub at the isomorphic place stands for its own */
    int m = S->segs[k].iso ? S->segs[k].iso[a] : a;
    return map_start_ref(S, S->segs[k].stub_for[m]);
  }
  return (pcgc_ref){S->rid[k][r.node], r.slot};
}

/* The start with every improved segment replaced (untyped until inferred). */
static pcgc_status splice_build(splice *S, pcgc_graph **out) {
  const pcgc_cuts *P = S->P;
  const pcgc_graph *g = P->g;
  pcgc_graph *ng = pcgc_graph_new();
  if (!ng) return PCGC_ERR_NOMEM;
  if (g->name && !(ng->name = strdup(g->name))) goto nomem;
  int next = 0;
  for (int x = 0; x < P->n; x++) {
    int k = P->seg[x];
    S->kid[x] = k >= 0 && S->best[k] ? -1 : next++;
  }
  for (int k = 0; k < P->n_seg; k++) {
    const pcgc_graph *b = S->best[k];
    if (!b) continue;
    const segment *lead = &S->segs[S->segs[k].group];
    for (int i = 0; i < b->n_nodes; i++) S->rid[k][i] = is_stub(lead, b->nodes[i].name) ? -1 : next++;
  }
  /* outputs: what each segment's mse reads (its last stub), in order, so
   * an output that is a stub passed through finds the one before */
  for (int k = 0; k < P->n_seg; k++) {
    const pcgc_graph *b = S->best[k];
    if (!b || P->out[k].node < 0) continue;
    const segment *lead = &S->segs[S->segs[k].group];
    int loss = pcgc_graph_find(b, lead->stub_names[lead->n_stubs - 1]);
    if (loss < 0) goto invalid;
    S->out_new[k] = map_seg_ref(S, k, b->nodes[loss].in[0]);
  }
  pcgc_ref in[64];
  for (int x = 0; x < P->n; x++) {
    if (S->kid[x] < 0) continue;
    const pcgc_node *nd = &g->nodes[x];
    if (nd->n_in > 64) goto invalid;
    for (int j = 0; j < nd->n_in; j++) in[j] = map_start_ref(S, nd->in[j]);
    int id = pcgc_graph_copy_node(ng, g, x, NULL, in);
    if (id == PCGC_ERR_NOMEM) goto nomem;
    if (id != S->kid[x]) goto invalid;
  }
  for (int k = 0; k < P->n_seg; k++) {
    const pcgc_graph *b = S->best[k];
    if (!b) continue;
    const segment *lead = &S->segs[S->segs[k].group];
    for (int i = 0; i < b->n_nodes; i++) {
      if (S->rid[k][i] < 0) continue;
      const pcgc_node *nd = &b->nodes[i];
      if (nd->n_in > 64) goto invalid;
      for (int j = 0; j < nd->n_in; j++) in[j] = map_seg_ref(S, k, nd->in[j]);
      char name[1300];
      member_name(lead, &S->segs[k], nd->name, name, sizeof name);
      size_t base = strlen(name);
      for (int v = 2; pcgc_graph_find(ng, name) >= 0; v++) snprintf(name + base, sizeof name - base, "_%d", v);
      int id = pcgc_graph_copy_node(ng, b, i, name, in);
      if (id == PCGC_ERR_NOMEM) goto nomem;
      if (id != S->rid[k][i]) goto invalid;
    }
  }
  *out = ng;
  return PCGC_OK;
nomem:
  pcgc_graph_free(ng);
  return PCGC_ERR_NOMEM;
invalid:
  pcgc_graph_free(ng);
  return PCGC_ERR_INVALID;
}

/* ------------------------------------------------------------ trace */

typedef struct rename_ctx {
  const segment *lead, *s;
} rename_ctx;

static void rename_member(void *ctx, const char *name, char *buf, size_t n) {
  const rename_ctx *c = ctx;
  member_name(c->lead, c->s, name, buf, n);
}

/* Step 6: the whole graph's trace into *lines (n of them). */
static pcgc_status splice_trace(const segment *segs, int n_seg, pcgc_graph *const *best, const pcgc_joint_result *res,
                                char ***lines, int *n) {
  int total = 0;
  for (int k = 0; k < n_seg; k++)
    if (best[k]) total += res[segs[k].group].n_trace;
  *n = 0;
  if (!(*lines = calloc((size_t)(total ? total : 1), sizeof **lines))) return PCGC_ERR_NOMEM;
  for (int k = 0; k < n_seg; k++) {
    if (!best[k]) continue;
    const pcgc_joint_result *lr = &res[segs[k].group];
    rename_ctx c = {&segs[segs[k].group], &segs[k]};
    for (int i = 0; i < lr->n_trace; i++) {
      if (!((*lines)[*n] = pcgc__trace_rename(lr->trace[i], rename_member, &c))) return PCGC_ERR_NOMEM;
      (*n)++;
    }
  }
  return PCGC_OK;
}

/* ------------------------------------------------------------ driver */

/* The caller's progress callback, told which segment is being searched. */
typedef struct seg_progress {
  const pcgc_joint_options *o;
  int segment, segments;
} seg_progress;

static void forward_progress(void *ctx, const pcgc_joint_progress *p) {
  const seg_progress *sp = ctx;
  pcgc_joint_progress q = *p;
  q.segment = sp->segment;
  q.segments = sp->segments;
  sp->o->progress(sp->o->progress_ctx, &q);
}

/* Whether iso maps stubs to stubs and copies to copies: a data input read
 * by the first segment itself looks like a stub of the next one, and the
 * model's loss like a segment's mse. */
static bool same_roles(const segment *lead, const segment *s, const int *iso) {
  for (int a = 0; a < lead->g->n_nodes; a++)
    if (is_stub(lead, lead->g->nodes[a].name) != is_stub(s, s->g->nodes[iso[a]].name) ||
        (lead->stub_for[a].node >= 0) != (s->stub_for[iso[a]].node >= 0))
      return false;
  return true;
}

/* Step 4: groups by hash, then isomorphism with the leader (with the same
 * roles). */
static pcgc_status group_segments(segment *segs, int n) {
  uint64_t *h = malloc((size_t)n * sizeof *h);
  if (!h) return PCGC_ERR_NOMEM;
  for (int k = 0; k < n; k++) h[k] = segs[k].ok ? pcgc_graph_hash(segs[k].g) : 0;
  pcgc_status st = PCGC_OK;
  for (int k = 0; k < n && st == PCGC_OK; k++) {
    if (!segs[k].ok) continue;
    for (int j = 0; j < k; j++) {
      if (!segs[j].ok || segs[j].group != j || h[j] != h[k] || segs[j].g->n_nodes != segs[k].g->n_nodes) continue;
      int *iso = malloc((size_t)segs[j].g->n_nodes * sizeof *iso);
      if (!iso) {
        st = PCGC_ERR_NOMEM;
        break;
      }
      if (pcgc_graph_isomorphism(segs[j].g, segs[k].g, iso) && same_roles(&segs[j], &segs[k], iso)) {
        segs[k].group = j;
        segs[k].iso = iso;
        break;
      }
      free(iso);
    }
  }
  free(h);
  return st;
}

pcgc_status pcgc__joint_segmented(const pcgc_graph *start, const pcgc_mapping *start_mp, int block, int t,
                                  const pcgc_machine *m, const pcgc_rule_inst *insts, int n_insts,
                                  const pcgc_joint_options *o, pcgc_joint_result *r, bool *done, pcgc_error *err) {
  *done = false;
  double t0 = pcgc_now();
  pcgc_cuts P;
  if (!pcgc_cuts_build(&P, start, o->segment_nodes)) {
    pcgc_cuts_free(&P);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory splitting the graph");
  }
  if (P.n_seg < 2) {
    pcgc_cuts_free(&P);
    return PCGC_OK;
  }
  pcgc_status st = PCGC_OK;
  segment *segs = calloc((size_t)P.n_seg, sizeof *segs);
  pcgc_graph **best = calloc((size_t)P.n_seg, sizeof *best);
  pcgc_joint_result *res = calloc((size_t)P.n_seg, sizeof *res);
  if (!segs || !best || !res) st = PCGC_ERR_NOMEM;
  for (int k = 0; k < P.n_seg && st == PCGC_OK; k++) st = segment_build(&segs[k], &P, k, start_mp);
  if (st == PCGC_OK) st = group_segments(segs, P.n_seg);
  int groups = 0;
  for (int k = 0; k < P.n_seg && st == PCGC_OK; k++) groups += segs[k].ok && segs[k].group == k;
  memset(r, 0, sizeof *r);
  r->instances = n_insts;
  r->segments = P.n_seg;
  double t_sim = pcgc_now();
  r->start_time = pcgc__joint_cost(start, start_mp, m, o);
  /* kept back from the time limit: the splice (step 5: its trace replayed,
   * its views, its simulation, which need not find the copies alike as the
   * start's did; about 3% of the limit on LLaMA-3 70B), the last batch of rewrites
   * of a segment that passed its share (up to 3% more), and the caller's
   * simulation of the result */
  double reserve = 2 * (pcgc_now() - t_sim) + 0.08 * o->time_limit;
  /* step 4: search each group's leader */
  int left = groups;
  for (int k = 0; k < P.n_seg && st == PCGC_OK; k++) {
    if (!segs[k].ok || segs[k].group != k) continue;
    pcgc_joint_options so = *o;
    so.alts = 0; /* a segment's runner-ups would not be spliced: none cloned */
    if (o->time_limit > 0) {
      double remain = o->time_limit - (pcgc_now() - t0) - reserve;
      if (remain <= 0) {
        r->time_hit = true;
        break;
      }
      so.time_limit = remain / left;
    }
    left--;
    if (o->log) fprintf(o->log, "segment %d of %d (%d nodes)\n", k + 1, P.n_seg, segs[k].g->n_nodes);
    seg_progress sp = {o, k + 1, P.n_seg};
    if (o->progress) {
      so.progress = forward_progress;
      so.progress_ctx = &sp;
    }
    accept_ctx ac = {&segs[k]};
    st = pcgc__joint_run(segs[k].g, &segs[k].mp, block, t, m, insts, n_insts, &so, stubs_intact, &ac, &res[k], err);
    if (st != PCGC_OK) break;
    r->segments_searched++;
    pcgc_joint_result_add_counts(r, &res[k]);
    if (res[k].time < res[k].start_time) {
      r->improvements += res[k].improvements;
      snprintf(r->last_rule, sizeof r->last_rule, "%s", res[k].last_rule);
    }
  }
  /* step 5: splice the improved groups into every member */
  for (int k = 0; k < P.n_seg && st == PCGC_OK; k++) {
    int ld = segs[k].group;
    if (segs[k].ok && res[ld].graph && res[ld].time < res[ld].start_time) {
      best[k] = res[ld].graph;
      r->segments_improved++;
    }
  }
  pcgc_graph *ng = NULL;
  pcgc_mapping nmp = {0};
  double ntime = INFINITY;
  if (st == PCGC_OK && r->segments_improved > 0) {
    splice S = {.P = &P, .segs = segs, .best = best};
    S.kid = malloc((size_t)P.n * sizeof *S.kid);
    S.rid = calloc((size_t)P.n_seg, sizeof *S.rid);
    S.out_new = calloc((size_t)P.n_seg, sizeof *S.out_new);
    bool ok = S.kid && S.rid && S.out_new;
    for (int k = 0; ok && k < P.n_seg; k++)
      if (best[k]) ok = (S.rid[k] = malloc((size_t)best[k]->n_nodes * sizeof **S.rid)) != NULL;
    pcgc_status s2 = ok ? splice_build(&S, &ng) : PCGC_ERR_NOMEM;
    if (s2 == PCGC_ERR_NOMEM) st = pcgc_error_set(err, s2, "out of memory splicing the segments");
    pcgc_error e = {0};
    if (s2 == PCGC_OK && pcgc_graph_infer(ng, &e) == PCGC_OK) {
      /* step 6: the replayed trace in place of the splice when it gives the same graph */
      char **lines = NULL;
      int n_lines = 0;
      pcgc_graph *rg = NULL;
      pcgc_status s3 = splice_trace(segs, P.n_seg, best, res, &lines, &n_lines);
      if (s3 == PCGC_ERR_NOMEM) st = pcgc_error_set(err, s3, "out of memory recording the trace");
      if (s3 == PCGC_OK &&
          pcgc__joint_replay(start, n_lines, (const char *const *)lines, insts, n_insts, &rg, &e) == PCGC_OK &&
          pcgc_graph_equal(rg, ng)) {
        pcgc_graph_free(ng);
        ng = rg;
        rg = NULL;
        r->trace = lines;
        r->n_trace = n_lines;
        lines = NULL;
      } else {
        r->untraced = true;
      }
      pcgc_graph_free(rg);
      for (int i = 0; lines && i < n_lines; i++) free(lines[i]);
      free(lines);
      if (st == PCGC_OK && pcgc_views_replace(ng, start, start_mp, block, t, m, o->memo, &nmp, &e) == PCGC_OK)
        ntime = pcgc__joint_cost(ng, &nmp, m, o);
    }
    free(S.kid);
    for (int k = 0; S.rid && k < P.n_seg; k++) free(S.rid[k]);
    free(S.rid);
    free(S.out_new);
  }
  if (st == PCGC_OK) {
    if (ntime < r->start_time) {
      r->graph = ng;
      r->mapping = nmp;
      r->time = ntime;
      ng = NULL;
      memset(&nmp, 0, sizeof nmp);
    } else {
      r->splice_rejected = r->segments_improved > 0;
      r->improvements = 0;
      r->last_rule[0] = 0;
      pcgc__trace_free(r);
      r->untraced = false;
      r->graph = pcgc_graph_clone(start);
      if (!r->graph || pcgc_mapping_init(&r->mapping, start_mp->n_nodes, (pcgc_view){0, 1}, err) != PCGC_OK)
        st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
      else memcpy(r->mapping.view, start_mp->view, (size_t)start_mp->n_nodes * sizeof *r->mapping.view);
      r->time = r->start_time;
    }
  }
  pcgc_graph_free(ng);
  pcgc_mapping_destroy(&nmp);
  for (int k = 0; segs && k < P.n_seg; k++) {
    segment_free(&segs[k]);
    if (res) pcgc_joint_result_destroy(&res[k]);
  }
  free(segs);
  free(best);
  free(res);
  pcgc_cuts_free(&P);
  r->seconds = pcgc_now() - t0;
  if (st != PCGC_OK) {
    pcgc_joint_result_destroy(r);
    return err && err->status ? err->status : st;
  }
  *done = true;
  return PCGC_OK;
}

/* ------------------------------------------------------- entry point */

/* The region move (branches.c) on r's graph and, where the rules changed
 * it, on the start (a rule's rewrite inside a branch, such as a pipelined
 * layer, leaves no region to narrow); the fastest of those and r kept: the
 * move's lines appended to r's trace, or in place of it. */
static pcgc_status try_branches(const pcgc_graph *start, const pcgc_mapping *start_mp, const pcgc_machine *m,
                                const pcgc_joint_options *o, pcgc_joint_result *r, pcgc_error *err) {
  pcgc_status st = PCGC_OK;
  bool rules_changed = r->n_trace > 0; /* else r is the start, narrowed already */
  for (int from_start = 0; from_start < 2 && st == PCGC_OK; from_start++) {
    if (from_start && !rules_changed) break;
    const pcgc_graph *g = from_start ? start : r->graph;
    pcgc_graph *bg = NULL;
    pcgc_mapping bm;
    char **lines = NULL;
    int n_lines = 0;
    st = pcgc__branches_narrow(m, g, from_start ? start_mp : &r->mapping, &bg, &bm, &lines, &n_lines, err);
    if (st != PCGC_OK || !bg) continue;
    double t = pcgc__joint_cost(bg, &bm, m, o);
    r->evaluated++;
    if (o->log)
      fprintf(o->log, "  %-36s %d regions of the %s%s\n", PCGC__BRANCHES_STEP, n_lines, from_start ? "start" : "result",
              t < r->time ? ": faster" : "");
    int keep = from_start ? 0 : r->n_trace;
    if (t < r->time) /* the rules' lines go where the move starts from the start */
      for (; r->n_trace > keep; r->n_trace--) free(r->trace[r->n_trace - 1]);
    char **v = t < r->time ? realloc(r->trace, (size_t)(keep + n_lines) * sizeof *v) : NULL;
    if (t < r->time && !v) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
    if (v) {
      r->trace = v;
      for (int i = 0; i < n_lines; i++) {
        r->trace[r->n_trace++] = lines[i];
        lines[i] = NULL;
      }
      pcgc_graph_free(r->graph);
      r->graph = bg;
      bg = NULL;
      pcgc_mapping_destroy(&r->mapping);
      r->mapping = bm;
      memset(&bm, 0, sizeof bm);
      r->time = t;
      r->improvements = from_start ? 1 : r->improvements + 1;
      snprintf(r->last_rule, sizeof r->last_rule, "%s (branches of %d regions on disjoint devices)",
               PCGC__BRANCHES_STEP, n_lines);
    }
    for (int i = 0; i < n_lines; i++) free(lines[i]);
    free(lines);
    pcgc_graph_free(bg);
    pcgc_mapping_destroy(&bm);
  }
  return st;
}

/* The joint search (search.h): segment by segment where the graph splits,
 * else whole (joint.c). */
pcgc_status pcgc_joint_search(const pcgc_graph *start, const pcgc_mapping *start_mp, int block, int t,
                              const pcgc_machine *m, const pcgc_ruleset *rs, const pcgc_joint_options *opt,
                              pcgc_joint_result *r, pcgc_error *err) {
  memset(r, 0, sizeof *r);
  pcgc_joint_options o;
  if (opt) o = *opt;
  else pcgc_joint_options_default(&o);
  int64_t deg[64];
  int nd = pcgc_rules_machine_degrees(pcgc_machine_num_devices(m), deg, 64);
  pcgc_rule_inst *insts = NULL;
  int n_insts = 0;
  pcgc_status st = pcgc_ruleset_instantiate(rs, deg, nd, pcgc_rules_max_rank(start), &insts, &n_insts, err);
  if (st != PCGC_OK) return st;
  pcgc_views_memo *own = NULL;
  if (o.views_dp && !o.memo) {
    if ((st = pcgc_views_memo_new(&own, err)) != PCGC_OK) {
      free(insts);
      return st;
    }
    o.memo = own;
  }
  /* one memo of the operators found built alike for every rewrite's simulation */
  pcgc_sim_options so;
  if (o.sim) so = *o.sim;
  else pcgc_sim_options_default(&so);
  pcgc_sim_memo *own_sim = NULL;
  if (!so.memo && so.replicas > 1 && (st = pcgc_sim_memo_new(&own_sim, err)) != PCGC_OK) {
    pcgc_views_memo_free(own);
    free(insts);
    return st;
  }
  if (own_sim) so.memo = own_sim;
  o.sim = &so;
  bool done = false;
  if (o.segment_nodes > 0)
    st = pcgc__joint_segmented(start, start_mp, block, t, m, insts, n_insts, &o, r, &done, err);
  if (st == PCGC_OK && !done) st = pcgc__joint_run(start, start_mp, block, t, m, insts, n_insts, &o, NULL, NULL, r, err);
  /* the region move on what the rules found (branches.c) */
  if (st == PCGC_OK && o.branches && !r->untraced && !(o.time_limit > 0 && r->seconds > o.time_limit))
    st = try_branches(start, start_mp, m, &o, r, err);
  pcgc_sim_memo_stats(so.memo, &r->alike_hits, &r->alike_misses);
  pcgc_sim_memo_free(own_sim);
  pcgc_views_memo_free(own);
  free(insts);
  return st;
}
