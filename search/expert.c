/*
 * expert.c — expert strategies and `pcgc compile` v1 (search.h, "Expert
 * strategies and compile"): data × tensor (Megatron) × pipeline parallelism
 * built from a sequential graph by fixed recipes, each costed by the
 * simulator, the fastest that fits in memory kept.
 *
 * Building strategy (dp b, tp t, pp s, micro m):
 *  1. Tensor parallelism, on the sequential graph: the Megatron rules of the
 *     library (block_rules below) with degree t, applied greedily, each time
 *     to the match of any of them whose anchor (first pattern node) comes
 *     first in topological order and is still sequential, until none is
 *     left (a match that fails to apply is skipped); then the single-
 *     operator splits (single_rules) likewise. Sequential anchors keep a rule
 *     from matching its own rewrite again (megatron_mlp's two linears match
 *     megatron_mlp). Both orders type-check (rules on the data-parallel
 *     graph too: infer.c lines weight replicas up with batch shards, and
 *     either way partition(w) stacks on replicate(w) and replicate(x) on
 *     partition(x), the same graph); rules first is the order used, since
 *     the rewrite is then computed once per degree and reused for every dp
 *     and pp, and the sequential-anchor test stays simple.
 *  2. Distribution: after every data input a partition(dim=0, degree=b) and a
 *     pipeline(dim=0, degree=m), after every weight a replicate(degree=b);
 *     the graph is re-inferred.
 *  3. Stages: the sequential graph's nodes, in order, are cut into s ranges
 *     of equal forward FLOPs (a node goes where its FLOP midpoint falls); a
 *     node of the parallel graph takes the stage of the sequential node of
 *     its name, or of its name's first '/'-part (rewrite nodes are named
 *     "<anchor>/<tensor>"), and never less than its producers'. Stage k runs
 *     on the device block [k·b·t, (k+1)·b·t).
 *  4. Views, greedily in topological order (the rule): a node whose pieces
 *     are computed (sources and the parallel operators that only distribute
 *     them are placed by their readers) takes, among
 *        its pieces spread evenly over the block {base, B/P} (or {base, 1}),
 *        its main producer's view (the producer it reads most bytes from),
 *        consecutive devices {base, 1}, every t-th device {base, t},
 *     restricted to views that keep its pieces on distinct devices of its
 *     block, the one under which the fewest bytes of its producers' pieces
 *     sit on other devices than the pieces that read them (ties: the first).
 *     B/P puts the b batch shards after a reduce on the first device of
 *     each tensor-parallel group, where one of their partial sums already is.
 *
 * The search (pcgc_compile) enumerates the combinations, builds and
 * simulates each, and keeps the fastest feasible one; data parallel on
 * every device is tried first, so nothing slower is ever chosen.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "joint_internal.h"
#include "search.h"
#include "substitutions.h"

/* Where the fullest device's memory goes, for --verbose on a candidate that
 * does not fit. */
static void log_fullest(FILE *log, const pcgc_sim_result *sr) {
  int worst = -1;
  for (int d = 0; d < sr->n_devices; d++)
    if (worst < 0 || sr->device[d].memory.total > sr->device[worst].memory.total) worst = d;
  if (worst < 0) return;
  const pcgc_memory *m = &sr->device[worst].memory;
  const double G = 1073741824.0;
  fprintf(log, "  %-30s device %d: weights %.3g + gradients %.3g + optimizer %.3g + activations %.3g + backward "
          "workspace %.3g + staging %.3g GiB\n", "", worst, m->weights / G, m->gradients / G, m->optimizer / G,
          m->activations / G, m->workspace / G, m->comm / G);
}

/* ------------------------------------------------------------- rules */

/* Megatron blocks, in the order they are tried: self-attention before the
 * general attention (one replicate of x, not three), MLPs by pattern, then
 * mixture-of-experts layers by expert parallelism (tp splits the experts
 * t ways: each tensor-parallel group holds the experts once, X/t each; a
 * pattern of experts no rule splits so falls to megatron_expert_swiglu).
 * Any other library rule named megatron_* or *_heads follows, in library
 * order. */
static const char *const block_rules[] = {
    "megatron_self_attention_bias", "partition_self_attention_heads", "partition_attention_heads",
    "megatron_mlp_bias_relu",       "megatron_mlp_bias",              "megatron_mlp_relu_op",
    "megatron_mlp",                 "partition_experts_swiglu",       "partition_experts_bias",
    "partition_experts",
};
/* One operator split alone: applied only where the weight outweighs the
 * activations the split moves (input and output), since otherwise the
 * activations' all-gather costs more than the weight's all-reduce saves. */
static const char *const single_rules[] = {
    "partition_embedding_columns", "partition_embedding_rows", "partition_linear_bias_column",
    "partition_linear_column",
};

#define MAX_TP_RULES 64
#define MAX_TP_CACHE 32

typedef struct tp_rule {
  const pcgc_rule *rule;
  bool single;
} tp_rule;

typedef struct tp_entry {
  int t, applied;
  pcgc_graph *g;   /* NULL when applied == 0 */
} tp_entry;

struct pcgc_expert {
  const pcgc_graph *seq;
  pcgc_machine m;
  pcgc_ruleset *rs;
  tp_rule rules[MAX_TP_RULES];
  int n_rules;
  tp_entry tp[MAX_TP_CACHE];
  int n_tp;
  double *flops;   /* [seq nodes] forward FLOPs */
  int *seq_order;  /* [seq nodes] topological order */
  size_t n_seq;    /* seq nodes, at least 1 (array sizes) */
  int64_t batch;
  int layers;
};

static bool has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

static bool one_degree_param(const pcgc_rule *r) {
  return pcgc_rule_num_params(r) == 1 && pcgc_rule_param_is_degree(r, 0);
}

static void add_rule(pcgc_expert *x, const pcgc_rule *r, bool single) {
  if (!r || !one_degree_param(r) || x->n_rules >= MAX_TP_RULES) return;
  for (int i = 0; i < x->n_rules; i++)
    if (x->rules[i].rule == r) return;
  x->rules[x->n_rules++] = (tp_rule){r, single};
}

static void pick_rules(pcgc_expert *x) {
  for (size_t i = 0; i < sizeof block_rules / sizeof *block_rules; i++)
    add_rule(x, pcgc_ruleset_find(x->rs, block_rules[i]), false);
  for (int i = 0; i < pcgc_ruleset_size(x->rs); i++) {
    const pcgc_rule *r = pcgc_ruleset_rule(x->rs, i);
    const char *nm = pcgc_rule_name(r);
    if (strncmp(nm, "megatron_", 9) == 0 || has_suffix(nm, "_heads")) add_rule(x, r, false);
  }
  for (size_t i = 0; i < sizeof single_rules / sizeof *single_rules; i++)
    add_rule(x, pcgc_ruleset_find(x->rs, single_rules[i]), true);
}

/* ----------------------------------------------------------- the model */

static bool is_data(const pcgc_node *n) { return n->kind == PCGC_OP_INPUT && n->out[0].rank > 0; }

pcgc_status pcgc_expert_new(const pcgc_graph *seq, const pcgc_machine *m, const char *rules_dir, pcgc_expert **out,
                            pcgc_error *err) {
  if (out) *out = NULL;
  if (!seq || !m || !out) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_expert_new: bad argument");
  for (int i = 0; i < seq->n_nodes; i++) {
    const pcgc_node *n = &seq->nodes[i];
    if (!n->typed) {
      pcgc_error_set(err, PCGC_ERR_TYPE, "%s '%s' has no type", pcgc_op_name(n->kind), n->name);
      pcgc_error_hint(err, "infer the graph (pcgc_graph_infer) first");
      return PCGC_ERR_TYPE;
    }
    if (pcgc_op_class_of(n->kind) == PCGC_CLASS_PARALLEL) {
      pcgc_error_set(err, PCGC_ERR_INVALID, "expert strategies need a sequential model, but it has %s '%s'",
                     pcgc_op_name(n->kind), n->name);
      pcgc_error_hint(err, "compile the sequential model; simulate a parallel graph with its own views");
      return PCGC_ERR_INVALID;
    }
  }
  int losses = 0;
  for (int i = 0; i < seq->n_nodes; i++) losses += pcgc_op_class_of(seq->nodes[i].kind) == PCGC_CLASS_LOSS;
  if (losses != 1) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "model '%s' has %d losses; a training iteration needs exactly one",
                   seq->name ? seq->name : "model", losses);
    pcgc_error_hint(err, losses ? "sum them into one in the model" :
                    "an exported ONNX inference graph has none: `--loss softmax_cross_entropy` or `--loss mse` "
                    "adds one on its output");
    return PCGC_ERR_INVALID;
  }
  pcgc_expert *x = calloc(1, sizeof *x);
  if (!x) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  x->seq = seq;
  x->m = *m;
  x->n_seq = seq->n_nodes > 0 ? (size_t)seq->n_nodes : 1;
  x->flops = calloc(x->n_seq, sizeof *x->flops);
  x->seq_order = calloc(x->n_seq, sizeof *x->seq_order);
  x->rs = pcgc_ruleset_new();
  if (!x->flops || !x->seq_order || !x->rs) {
    pcgc_expert_free(x);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  }
  pcgc_status st = pcgc_graph_topo_order(seq, x->seq_order, err);
  if (st == PCGC_OK) st = pcgc_ruleset_load_dir(x->rs, rules_dir ? rules_dir : pcgc_rules_default_dir(), err);
  if (st != PCGC_OK) {
    pcgc_expert_free(x);
    return st;
  }
  pick_rules(x);
  for (int i = 0; i < seq->n_nodes; i++) {
    const pcgc_node *n = &seq->nodes[i];
    if (is_data(n) && (x->batch == 0 || n->out[0].dims[0] < x->batch)) x->batch = n->out[0].dims[0];
    if (pcgc_op_class_of(n->kind) == PCGC_CLASS_SOURCE || pcgc_op_class_of(n->kind) == PCGC_CLASS_PARALLEL) continue;
    if (pcgc_cost_efficiency(n->kind)->matrix) x->layers++;
    pcgc_ptensor in[PCGC_VARIADIC];
    for (int k = 0; k < n->n_in; k++) in[k] = *pcgc_graph_ref_type(seq, n->in[k]);
    pcgc_op_cost c;
    pcgc_op_cost_of(n->kind, n->attrs, n->n_in, in, n->n_out, n->out, &c);
    x->flops[i] = c.fwd_flops > 0 ? c.fwd_flops : 0;
  }
  *out = x;
  return PCGC_OK;
}

void pcgc_expert_free(pcgc_expert *x) {
  if (!x) return;
  for (int i = 0; i < x->n_tp; i++) pcgc_graph_free(x->tp[i].g);
  pcgc_ruleset_free(x->rs);
  free(x->flops);
  free(x->seq_order);
  free(x);
}

int64_t pcgc_expert_batch(const pcgc_expert *x) { return x ? x->batch : 0; }
int pcgc_expert_layers(const pcgc_expert *x) { return x ? x->layers : 0; }

/* ------------------------------------------------- tensor parallelism */

static bool all_sequential(const pcgc_graph *g, const pcgc_node *n) {
  for (int k = 0; k < n->n_out; k++)
    if (!pcgc_ptensor_is_sequential(&n->out[k])) return false;
  for (int k = 0; k < n->n_in; k++)
    if (!pcgc_ptensor_is_sequential(pcgc_graph_ref_type(g, n->in[k]))) return false;
  return true;
}

/* For single-operator rules: the weight (input 1) has more elements than
 * the activations (input 0 and the output). */
static bool weight_heavy(const pcgc_graph *g, const pcgc_node *n) {
  if (n->n_in < 2) return false;
  double w = (double)pcgc_ptensor_numel(pcgc_graph_ref_type(g, n->in[1]));
  double a = (double)pcgc_ptensor_numel(pcgc_graph_ref_type(g, n->in[0])) + (double)pcgc_ptensor_numel(&n->out[0]);
  return w > a;
}

/* A match already found not to apply: its rule and anchor node's name. */
typedef struct tp_skip {
  const pcgc_rule *rule;
  char *anchor;
} tp_skip;

/* Looking for the match, over the rules of one phase, whose anchor comes
 * first in topological order (pos[]), so that Megatron pairs form from the
 * input side: linears 1-2 and 3-4 of a chain of four, not 2-3. */
typedef struct tp_find {
  const pcgc_graph *g;
  const int *pos;
  const pcgc_rule *rule;
  bool single;
  const tp_skip *skip;
  int n_skip;
  pcgc_match m;     /* the best so far; m.inst points at `inst` */
  pcgc_rule_inst inst;
  int best;         /* its anchor's position, -1: none */
} tp_find;

static bool tp_on_match(const pcgc_match *m, void *ctx) {
  tp_find *f = ctx;
  const pcgc_node *n = &f->g->nodes[m->nodes[0]];
  if (f->best >= 0 && f->pos[n->id] >= f->best) return false;
  if (!all_sequential(f->g, n) || (f->single && !weight_heavy(f->g, n))) return false;
  for (int i = 0; i < f->n_skip; i++)
    if (f->skip[i].rule == f->rule && strcmp(f->skip[i].anchor, n->name) == 0) return false;
  f->m = *m;
  f->inst = *m->inst;
  f->m.inst = &f->inst;
  f->best = f->pos[n->id];
  return false;
}

/* The rules of one phase (block or single-operator rules), applied with
 * degree t to the earliest match until none is left. */
static pcgc_status tp_phase(const pcgc_expert *x, int t, bool single, pcgc_graph **gp, int *applied, tp_skip **skip,
                            int *n_skip, pcgc_error *err) {
  pcgc_status st = PCGC_OK;
  int *order = NULL, *pos = NULL;
  for (;;) {
    pcgc_graph *g = *gp;
    free(order);
    free(pos);
    order = malloc((size_t)g->n_nodes * sizeof *order);
    pos = malloc((size_t)g->n_nodes * sizeof *pos);
    if (!order || !pos) {
      st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
      break;
    }
    if ((st = pcgc_graph_topo_order(g, order, err)) != PCGC_OK) break;
    for (int k = 0; k < g->n_nodes; k++) pos[order[k]] = k;
    pcgc_graph_index *ix = pcgc_graph_index_new(g, err);
    if (!ix) {
      st = err ? err->status : PCGC_ERR_NOMEM;
      break;
    }
    tp_find f = {.g = g, .pos = pos, .skip = *skip, .n_skip = *n_skip, .best = -1};
    for (int r = 0; r < x->n_rules && st == PCGC_OK; r++) {
      if (x->rules[r].single != single) continue;
      pcgc_rule_inst ri = {x->rules[r].rule, {t}};
      f.rule = ri.rule;
      f.single = single;
      st = pcgc_rule_find_matches(&ri, g, ix, tp_on_match, &f, err);
    }
    pcgc_graph_index_free(ix);
    if (st != PCGC_OK || f.best < 0) break;
    pcgc_graph *g2 = NULL;
    pcgc_error e2;
    pcgc_status s2 = pcgc_rule_apply(g, &f.m, &g2, &e2);
    if (s2 == PCGC_ERR_NOMEM) {
      st = pcgc_error_set(err, s2, "out of memory applying rule '%s'", pcgc_rule_name(f.inst.rule));
      break;
    }
    if (s2 == PCGC_OK) {
      pcgc_graph_free(g);
      *gp = g2;
      (*applied)++;
      continue;
    }
    /* does not type-check here: leave this occurrence alone */
    const char *nm = g->nodes[f.m.nodes[0]].name;
    tp_skip *sk = realloc(*skip, (size_t)(*n_skip + 1) * sizeof *sk);
    char *cp = sk ? malloc(strlen(nm) + 1) : NULL;
    if (sk) *skip = sk;
    if (!cp) {
      st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
      break;
    }
    strcpy(cp, nm);
    (*skip)[(*n_skip)++] = (tp_skip){f.inst.rule, cp};
  }
  free(order);
  free(pos);
  return st;
}

static pcgc_status apply_tp(const pcgc_expert *x, int t, pcgc_graph **out, int *applied, pcgc_error *err) {
  *out = NULL;
  *applied = 0;
  pcgc_graph *g = pcgc_graph_clone(x->seq);
  if (!g) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  tp_skip *skip = NULL;
  int n_skip = 0;
  pcgc_status st = tp_phase(x, t, false, &g, applied, &skip, &n_skip, err);
  if (st == PCGC_OK) st = tp_phase(x, t, true, &g, applied, &skip, &n_skip, err);
  for (int i = 0; i < n_skip; i++) free(skip[i].anchor);
  free(skip);
  if (st != PCGC_OK || *applied == 0) {
    pcgc_graph_free(g);
    return st;
  }
  *out = g;
  return PCGC_OK;
}

static tp_entry *tp_get(pcgc_expert *x, int t, pcgc_error *err) {
  for (int i = 0; i < x->n_tp; i++)
    if (x->tp[i].t == t) return &x->tp[i];
  if (x->n_tp >= MAX_TP_CACHE) { /* evict the oldest */
    pcgc_graph_free(x->tp[0].g);
    memmove(x->tp, x->tp + 1, (size_t)(MAX_TP_CACHE - 1) * sizeof *x->tp);
    x->n_tp--;
  }
  tp_entry e = {t, 0, NULL};
  if (apply_tp(x, t, &e.g, &e.applied, err) != PCGC_OK) return NULL;
  x->tp[x->n_tp] = e;
  return &x->tp[x->n_tp++];
}

int pcgc_expert_tp_matches(pcgc_expert *x, int t, pcgc_error *err) {
  if (!x || t < 2) return 0;
  tp_entry *e = tp_get(x, t, err);
  return e ? e->applied : 0;
}

/* -------------------------------------------------------- distribution */

static int fresh_node(pcgc_graph *g, pcgc_op_kind k, const char *base, const char *suffix, const pcgc_attrs *a,
                      int src) {
  char name[320];
  snprintf(name, sizeof name, "%.250s.%s", base, suffix);
  for (int i = 2; pcgc_graph_find(g, name) >= 0; i++) snprintf(name, sizeof name, "%.250s.%s%d", base, suffix, i);
  return pcgc_graph_add_node(g, k, name, a, 1, (pcgc_ref[]){{src, 0}});
}

/* partition(dim 0, b) and pipeline(dim 0, m) after data inputs, replicate(b)
 * after weights and scalar inputs; consumers read the last one added. */
static pcgc_status distribute(pcgc_graph *pg, int b, int m, pcgc_error *err) {
  int n0 = pg->n_nodes;
  int *last = malloc((size_t)(n0 ? n0 : 1) * sizeof *last);
  if (!last) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  pcgc_status st = PCGC_OK;
  for (int i = 0; i < n0 && st == PCGC_OK; i++) {
    last[i] = -1;
    if (pcgc_op_class_of(pg->nodes[i].kind) != PCGC_CLASS_SOURCE) continue;
    bool data = is_data(&pg->nodes[i]);
    int64_t n = data ? pg->nodes[i].out[0].dims[0] : 0;
    char base[256];
    snprintf(base, sizeof base, "%s", pg->nodes[i].name); /* nodes[] may move as nodes are added */
    int cur = i;
    pcgc_attrs a;
    if (data && (n % b || (n / b) % m)) {
      st = pcgc_error_set(err, PCGC_ERR_INVALID,
                          "%d-way data parallelism with %d micro-batches needs dim 0 of input '%s' (%lld) to be "
                          "divisible by %d",
                          b, m, base, (long long)n, b * m);
      pcgc_error_hint(err, "use a batch that is a multiple of %d (--batch or --set B=...)", b * m);
      break;
    }
    if (b > 1) {
      pcgc_attrs_init(&a, data ? PCGC_OP_PARTITION : PCGC_OP_REPLICATE);
      if (data) pcgc_attrs_set_int(&a, "dim", 0);
      pcgc_attrs_set_int(&a, "degree", b);
      cur = fresh_node(pg, a.kind, base, "dp", &a, cur);
    }
    if (cur >= 0 && data && m > 1) {
      pcgc_attrs_init(&a, PCGC_OP_PIPELINE);
      pcgc_attrs_set_int(&a, "dim", 0);
      pcgc_attrs_set_int(&a, "degree", m);
      cur = fresh_node(pg, a.kind, base, "mb", &a, cur);
    }
    if (cur < 0) st = pcgc_error_set(err, (pcgc_status)cur, "cannot distribute '%s'", base);
    else if (cur != i) last[i] = cur;
  }
  for (int j = 0; j < n0 && st == PCGC_OK; j++) {
    pcgc_node *x = &pg->nodes[j];
    for (int k = 0; k < x->n_in; k++)
      if (x->in[k].node < n0 && last[x->in[k].node] >= 0) x->in[k].node = last[x->in[k].node];
  }
  free(last);
  if (st == PCGC_OK && (st = pcgc_graph_infer(pg, err)) != PCGC_OK && err) {
    char tmp[sizeof err->message];
    snprintf(tmp, sizeof tmp, "dp %d, micro %d: %.900s", b, m, err->message);
    memcpy(err->message, tmp, sizeof tmp);
  }
  return st;
}

/* -------------------------------------------------------------- stages */

static void assign_stages(const pcgc_expert *x, const pcgc_graph *pg, const int *order, const bool *res, int s,
                          int *stage) {
  const pcgc_graph *seq = x->seq;
  double total = 0, cum = 0;
  for (int i = 0; i < seq->n_nodes; i++) total += x->flops[i];
  int *sst = malloc(x->n_seq * sizeof *sst);
  for (size_t k = 0; sst && k < x->n_seq; k++) {
    int i = x->seq_order[k];
    double mid = cum + x->flops[i] / 2;
    int st = total > 0 ? (int)(mid * s / total) : 0;
    sst[i] = st < s ? st : s - 1;
    cum += x->flops[i];
  }
  for (int k = 0; k < pg->n_nodes; k++) {
    const pcgc_node *n = &pg->nodes[order[k]];
    int st = 0;
    if (sst) {
      int id = pcgc_graph_find(seq, n->name);
      const char *slash = strchr(n->name, '/');
      if (id < 0 && slash && slash - n->name < 256) {
        char base[256];
        memcpy(base, n->name, (size_t)(slash - n->name));
        base[slash - n->name] = '\0';
        id = pcgc_graph_find(seq, base);
      }
      if (id >= 0) st = sst[id];
    }
    for (int i = 0; i < n->n_in; i++)
      if (!res[n->in[i].node] && stage[n->in[i].node] > st) st = stage[n->in[i].node];
    stage[n->id] = res[n->id] ? 0 : st;
  }
  free(sst);
}

/* -------------------------------------------------------------- build */

static pcgc_status check_choice(const pcgc_expert *x, pcgc_expert_choice c, pcgc_error *err) {
  int D = pcgc_machine_num_devices(&x->m);
  if (c.dp < 1 || c.tp < 1 || c.pp < 1 || c.micro < 1)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "dp %d, tp %d, pp %d, micro %d: every degree must be at least 1",
                          c.dp, c.tp, c.pp, c.micro);
  if ((int64_t)c.dp * c.tp * c.pp > D) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "dp %d x tp %d x pp %d needs %lld devices, but machine '%s' has %d", c.dp,
                   c.tp, c.pp, (long long)c.dp * c.tp * c.pp, x->m.name, D);
    pcgc_error_hint(err, "choose degrees whose product is at most %d", D);
    return PCGC_ERR_INVALID;
  }
  return PCGC_OK;
}

pcgc_status pcgc_expert_build(pcgc_expert *x, pcgc_expert_choice c, pcgc_graph **out, pcgc_mapping *mp,
                              pcgc_error *err) {
  if (out) *out = NULL;
  if (mp) memset(mp, 0, sizeof *mp);
  if (!x || !out || !mp) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_expert_build: bad argument");
  pcgc_status st = check_choice(x, c, err);
  if (st != PCGC_OK) return st;
  if (c.tp == 1 && c.pp == 1 && c.micro == 1)
    return pcgc_strategy_build(PCGC_STRATEGY_DATA_PARALLEL, x->seq, &x->m, c.dp, out, mp, err);
  const pcgc_graph *base = x->seq;
  if (c.tp > 1) {
    tp_entry *e = tp_get(x, c.tp, err);
    if (!e) return err ? err->status : PCGC_ERR_NOMEM;
    if (!e->applied) {
      pcgc_error_set(err, PCGC_ERR_INVALID, "no Megatron rule matches model '%s' with degree %d",
                     x->seq->name ? x->seq->name : "model", c.tp);
      pcgc_error_hint(err, "tensor parallelism needs attention heads, MLP widths or weight dims divisible by %d",
                      c.tp);
      return PCGC_ERR_INVALID;
    }
    base = e->g;
  }
  pcgc_graph *pg = pcgc_graph_clone(base);
  if (!pg) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  int n = 0, *order = NULL, *stage = NULL;
  bool *res = NULL;
  if ((st = distribute(pg, c.dp, c.micro, err)) != PCGC_OK) goto fail;
  n = pg->n_nodes;
  order = malloc((size_t)n * sizeof *order);
  stage = calloc((size_t)n, sizeof *stage);
  res = calloc((size_t)n, sizeof *res);
  if (!order || !stage || !res) {
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    goto fail;
  }
  if ((st = pcgc_graph_topo_order(pg, order, err)) != PCGC_OK) goto fail;
  pcgc_resident_nodes(pg, order, res);
  assign_stages(x, pg, order, res, c.pp, stage);
  if ((st = pcgc_mapping_init(mp, n, (pcgc_view){0, 1}, err)) != PCGC_OK) goto fail;
  st = pcgc_views_place(pg, order, res, stage, c.dp * c.tp, c.tp, &x->m, NULL, mp->view, err);
  if (st != PCGC_OK) goto fail;
  free(order);
  free(stage);
  free(res);
  *out = pg;
  return PCGC_OK;
fail:
  free(order);
  free(stage);
  free(res);
  pcgc_mapping_destroy(mp);
  pcgc_graph_free(pg);
  return st;
}

/* -------------------------------------------------------------- search */

void pcgc_compile_options_default(pcgc_compile_options *o) {
  memset(o, 0, sizeof *o);
  pcgc_sim_options_default(&o->sim);
  pcgc_joint_options_default(&o->joint);
  o->threads = pcgc_threads_default();
  o->rerank_margin = 0.10;
  o->rerank_max = 4;
  o->rerank_max_tasks = 100000;
}

void pcgc_compile_result_destroy(pcgc_compile_result *r) {
  if (!r) return;
  pcgc_graph_free(r->graph);
  r->graph = NULL;
  pcgc_mapping_destroy(&r->mapping);
  pcgc_sim_result_destroy(&r->sim);
  pcgc_joint_result_destroy(&r->joint); /* its trace (graph and mapping moved out) */
  pcgc_graph_free(r->start_graph);
  r->start_graph = NULL;
  pcgc_mapping_destroy(&r->start_mapping);
  pcgc_sim_result_destroy(&r->start_sim);
}

/* The joint search compares estimates, and a rewrite's program may wait
 * where its estimate does not (a stream's fixed order, messages queued
 * behind collectives). Its runner-ups within rerank_margin of its best are
 * lowered with it, as the expert grid's best few are, and the fastest
 * program is the rewrite: its graph, mapping, time and trace take the
 * best's place. */
static pcgc_status rerank_joint(const pcgc_compile_options *o, pcgc_compile_result *r, pcgc_error *err) {
  pcgc_joint_result *j = &r->joint;
  double first = o->program_time(o->program_ctx, j->graph, &j->mapping, r->choice);
  if (!(first >= 0)) return PCGC_OK; /* the best's program is unknown: nothing to rank against */
  double bestp = first;
  int pick = -1, n = 1;
  for (int k = 0; k < j->n_alt && n < o->rerank_max; k++) {
    if (j->alt[k].time > j->time * (1 + o->rerank_margin)) break; /* fastest first */
    double p = o->program_time(o->program_ctx, j->alt[k].graph, &j->alt[k].mapping, r->choice);
    if (!(p >= 0)) continue;
    n++;
    if (p < bestp) {
      bestp = p;
      pick = k;
    }
  }
  r->joint_reranked = n;
  r->joint_by_estimate_time = j->time;
  r->joint_by_estimate_program = first;
  r->joint_chosen_program = bestp;
  if (pick < 0) return PCGC_OK;
  pcgc_joint_alt *a = &j->alt[pick];
  pcgc_joint_result lines;
  memset(&lines, 0, sizeof lines);
  if (pcgc__trace_split(a->trace, &lines) != PCGC_OK) {
    pcgc__trace_free(&lines);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory in the search");
  }
  pcgc__trace_free(j);
  j->trace = lines.trace;
  j->n_trace = lines.n_trace;
  pcgc_graph *g = j->graph;
  j->graph = a->graph;
  a->graph = g;
  pcgc_mapping mp = j->mapping;
  j->mapping = a->mapping;
  a->mapping = mp;
  double t = j->time;
  j->time = a->time;
  a->time = t;
  /* the last line names its rule: "RULE [P=V]... at ..." or "... everywhere N" */
  const char *last = j->n_trace ? j->trace[j->n_trace - 1] : "";
  int len = (int)strcspn(last, " ");
  snprintf(j->last_rule, sizeof j->last_rule, "%.*s%s", len, last, strstr(last, " everywhere ") ? " (everywhere)" : "");
  r->joint_rerank_changed = true;
  return PCGC_OK;
}

typedef struct cand_list {
  pcgc_expert_choice *c;
  int n, cap;
} cand_list;

bool pcgc_expert_choice_equal(const pcgc_expert_choice *a, const pcgc_expert_choice *b) {
  return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp && a->micro == b->micro && a->schedule == b->schedule &&
         a->recompute == b->recompute && a->zero == b->zero;
}

static bool cand_add(cand_list *L, pcgc_expert_choice c) {
  for (int i = 0; i < L->n; i++)
    if (pcgc_expert_choice_equal(&L->c[i], &c)) return true;
  if (L->n == L->cap) {
    int cap = L->cap ? 2 * L->cap : 64;
    pcgc_expert_choice *p = realloc(L->c, (size_t)cap * sizeof *p);
    if (!p) return false;
    L->c = p;
    L->cap = cap;
  }
  L->c[L->n++] = c;
  return true;
}

/* The candidates, in the order they are tried: data parallel on every
 * device, then by dp descending, tp and pp ascending, micro ascending. */
/* One (b, t, s) and its micro-batch counts, if the model allows them. */
static pcgc_status cand_triple(pcgc_expert *x, cand_list *L, int b, int t, int s, pcgc_error *err) {
  int64_t batch = x->batch;
  if (batch ? batch % b != 0 : b > 1) return PCGC_OK;
  if (s > 1 && s > x->layers) return PCGC_OK;
  if (t > 1) {
    pcgc_error e;
    pcgc_error_clear(&e);
    int a = pcgc_expert_tp_matches(x, t, &e);
    if (e.status == PCGC_ERR_NOMEM) return pcgc_error_set(err, PCGC_ERR_NOMEM, "%s", e.message);
    if (a == 0) return PCGC_OK;
  }
  for (int f = 1; f <= 4; f *= 2) {
    int64_t mm = s == 1 ? 1 : (int64_t)s * f;
    if (s > 1 && (batch == 0 || (batch / b) % mm)) continue;
    if (!cand_add(L, (pcgc_expert_choice){b, t, s, (int)mm, PCGC_SCHEDULE_GPIPE, false, false}))
      return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    if (s == 1) break;
  }
  /* and micro-batches of one sample, as Megatron-LM trains large models
   * (the least activation memory per micro-batch), up to 256 of them */
  int64_t one = batch ? batch / b : 0;
  if (s > 1 && one > 4 * (int64_t)s && one <= 256 &&
      !cand_add(L, (pcgc_expert_choice){b, t, s, (int)one, PCGC_SCHEDULE_GPIPE, false, false}))
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  return PCGC_OK;
}

static pcgc_status enumerate(pcgc_expert *x, cand_list *L, pcgc_error *err) {
  int D = pcgc_machine_num_devices(&x->m), nd = 0, nsmall = 0;
  for (int64_t d = 1; d * d <= D; d++) /* divisor pairs (d, D/d) */
    if (D % d == 0) nd += d * d == D ? 1 : 2;
  int *div = malloc((size_t)(nd ? nd : 1) * sizeof *div);
  if (!div) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  for (int64_t d = 1; d * d <= D; d++)
    if (D % d == 0) {
      div[nsmall] = (int)d;
      div[nd - 1 - nsmall++] = (int)(D / d);
    }
  pcgc_status st = PCGC_OK;
  if (!cand_add(L, (pcgc_expert_choice){D, 1, 1, 1, PCGC_SCHEDULE_GPIPE, false, false})) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  /* every device used (b t s = D), or one kind of parallelism alone on fewer */
  for (int i = nd - 1; i >= 0 && st == PCGC_OK; i--)
    for (int j = 0; j < nd && st == PCGC_OK; j++) {
      int b = div[i], t = div[j];
      if ((int64_t)b * t > D || D % (b * t)) continue;
      for (int k = 0; k < nd && st == PCGC_OK; k++) {
        int s = div[k];
        bool pure = (t == 1 && s == 1) || (b == 1 && s == 1) || (b == 1 && t == 1);
        if ((int64_t)b * t * s == D || (pure && D % (b * t * s) == 0)) st = cand_triple(x, L, b, t, s, err);
        if ((int64_t)b * t * s >= D && !(b == 1 && t == 1)) break; /* s ascending: nothing more fits */
      }
    }
  free(div);
  return st;
}

static void ref_update(pcgc_compile_ref *f, pcgc_expert_choice c, bool feasible, double time, const char *why) {
  if (feasible && (!f->feasible || time < f->time)) {
    f->feasible = true;
    f->choice = c;
    f->time = time;
    f->note[0] = '\0';
  } else if (!f->feasible && why) { /* the last reason: the largest degree tried */
    f->choice = c;
    snprintf(f->note, sizeof f->note, "%.500s", why);
  }
  f->tried = true;
}

static void fmt_choice(char *buf, size_t n, pcgc_expert_choice c) {
  snprintf(buf, n, "dp %d tp %d pp %d micro %d%s%s", c.dp, c.tp, c.pp, c.micro,
           c.schedule == PCGC_SCHEDULE_1F1B ? " 1f1b" : "", c.recompute ? " recompute" : "");
}

/* A candidate out of memory, simulated again with what saves memory:
 *   1. pipelined, in 1F1B order, which keeps at most s - k micro-batches'
 *      activations on stage k (GPipe keeps them all); kept when it fits,
 *      or is faster while neither fits;
 *   2. still out of memory and data parallel, with its optimizer state
 *      sharded over the copies (ZeRO-1: its gradient reduce-scattered and
 *      its weights all-gathered, the bytes an all-reduce moves); kept when
 *      it fits or needs less memory while neither fits;
 *   3. still out of memory, data parallel with one micro-batch, with its
 *      gradients sharded as well (ZeRO-2: each keeps its slab, the full
 *      gradient only while in flight; the stream waits for each
 *      reduce-scatter at the next one's start); kept likewise;
 *   4. still out of memory, data parallel with one micro-batch, with its weights sharded as well
 *      (ZeRO-3: each keeps its slab and all-gathers a weight before its first
 *      read in forward and again in backward); kept likewise;
 *   5. still out of memory, or fitting only with ZeRO-3, with its
 *      activations recomputed as well (a forward more per backward) at the
 *      highest ZeRO stage below 3 tried; kept when it fits (and, against
 *      ZeRO-3, when it is faster);
 *   6. still out of memory: recomputed at ZeRO-3; kept when it fits.
 * *sr, c->schedule, c->zero and c->recompute follow what is kept. Not tried when
 * the candidate fits: 1F1B takes about GPipe's time (the simulator gives
 * BERT-Large with 8 stages 303 and 302 ms) and recomputing only costs, and
 * each try is another simulation. Only what the caller left at the
 * defaults (GPipe, no recomputation) is varied. */
static pcgc_status fit_in_memory(const pcgc_graph *pg, const pcgc_mapping *mp, const pcgc_machine *m,
                                 const pcgc_sim_options *so, pcgc_expert_choice *c, pcgc_sim_result *sr,
                                 pcgc_error *err) {
  bool pipelined = c->pp > 1 && c->micro > 1 && so->schedule == PCGC_SCHEDULE_GPIPE;
  int given = so->zero > c->zero ? so->zero : c->zero; /* the stage asked for */
  int low = given < 3 ? given : 2;                      /* the highest stage below 3 tried or ruled out */
  bool hopeless = false; /* recomputed at `low` it was out of memory by more than ZeRO-3 could save */
  for (int step = pipelined ? 1 : 2; step <= 6; step++) {
    /* ZeRO-3 fit: recomputation at the stage below may be faster (a forward more against
     * another all-gather of every weight) */
    bool compare = step == 5 && sr->oom_devices == 0 && c->zero == 3 && given < 3 && !so->recompute;
    if (sr->oom_devices == 0 && !compare) break;
    if (step == 6 && (given >= 3 || c->dp < 2 || c->micro > 1 || hopeless)) break; /* at ZeRO-3: step 5 was it */
    int stage = step >= 2 && step <= 4 ? step - 1 : 0; /* the ZeRO stage this step tries */
    if (stage && (given >= stage || c->dp < 2 || (stage >= 2 && c->micro > 1))) continue;
    if (stage && stage < 3) low = stage;
    if (stage) { /* the most sharding saves: all but 1/dp of a device's optimizer state (and gradients, weights) */
      double worst = 0;
      for (int d = 0; d < sr->n_devices; d++) {
        const pcgc_memory *x = &sr->device[d].memory;
        double cut = x->optimizer + (stage >= 2 ? x->gradients : 0) + (stage == 3 ? x->weights : 0);
        worst = fmax(worst, x->total - cut * (1 - 1.0 / c->dp));
      }
      if (worst > pcgc_machine_usable_memory(m)) continue; /* it cannot fit alone: recomputation tries it with */
    }
    if (step >= 5 && so->recompute) break;
    pcgc_sim_options o = *so;
    if (pipelined) o.schedule = PCGC_SCHEDULE_1F1B;
    o.zero = step == 6 ? 3 : step == 5 ? low : stage > given ? stage : given;
    o.recompute = so->recompute || step >= 5;
    pcgc_sim_result r2;
    pcgc_status st = pcgc_simulate(pg, mp, m, &o, &r2, err);
    if (st != PCGC_OK) return st;
    bool fits = r2.oom_devices == 0;
    /* neither fits (and neither was run): keep the one that needs less memory */
    bool less = !isfinite(r2.iteration_time) && !isfinite(sr->iteration_time) && pcgc_sim_result_max_memory(&r2) < pcgc_sim_result_max_memory(sr);
    bool keep = compare ? fits && r2.iteration_time < sr->iteration_time
                        : fits || (step == 1 && (r2.iteration_time < sr->iteration_time || less)) || (stage && less);
    if (step == 5 && !fits) { /* what ZeRO-3 would save at most besides */
      double worst = 0, k = 1 - 1.0 / c->dp;
      for (int d = 0; d < r2.n_devices; d++) {
        const pcgc_memory *x = &r2.device[d].memory;
        double cut = x->weights + (low < 2 && c->micro == 1 ? x->gradients : 0) + (low < 1 ? x->optimizer : 0);
        worst = fmax(worst, x->total - cut * k);
      }
      hopeless = worst > pcgc_machine_usable_memory(m);
    }
    if (keep) {
      pcgc_sim_result t = *sr;
      *sr = r2;
      r2 = t;
      c->schedule = o.schedule;
      c->zero = o.zero;
      c->recompute = o.recompute;
    }
    pcgc_sim_result_destroy(&r2);
    if (compare) break;
  }
  return PCGC_OK;
}

/* ------------------------------------------------ the grid on worker threads
 * Each candidate is built and simulated on a worker thread (its own
 * pcgc_expert: the Megatron graphs it caches are per expert; the DP's memo
 * is shared under its lock) into an outcome; outcomes are then taken in
 * candidate order, so the best, the families and the log are those of a
 * run on one thread. A candidate's simulation gives up past the best time
 * any finished candidate has, which may be a later one's: such a candidate
 * is slower than that one and chosen in neither order, so what is chosen
 * does not depend on the thread count. */

enum { OUT_SKIPPED, OUT_HEAVY, OUT_FAILED, OUT_FATAL, OUT_SIMULATED };

typedef struct outcome {
  bool done;              /* set under the grid's lock once the rest is written */
  int state;
  pcgc_expert_choice c;   /* as simulated (fit_in_memory may change the schedule) */
  pcgc_compile_ref *fam;
  pcgc_graph *pg;
  pcgc_mapping mp;
  pcgc_sim_result sr;
  pcgc_status status;     /* OUT_FATAL */
  char why[640];          /* OUT_HEAVY, OUT_FAILED, OUT_FATAL, and out of memory */
  char *log;              /* the candidate's log lines (NULL: none) */
  size_t log_len;
} outcome;

typedef struct grid {
  const pcgc_compile_options *o;
  const pcgc_machine *m;
  const cand_list *L;
  pcgc_compile_result *r;
  pcgc_expert **x;        /* [threads]: worker w builds with x[w] */
  pcgc_views_memo *memo;
  double wbytes, t0;
  outcome *out;
  pthread_mutex_t lock;   /* everything below, the progress callback and the log */
  double bound;           /* the best time of any candidate finished: others give up past it */
  int merged;             /* outcomes taken, in order */
  bool stop;              /* a fatal error: start no more candidates */
  /* the best feasible candidates by estimate, fastest first (top[0] the
   * best): up to RERANK_MAX of them, with their graphs, for the re-rank */
  int n_top, max_top;
  struct top_entry {
    pcgc_expert_choice c;
    double time;
    int64_t tasks;
    pcgc_graph *g;
    pcgc_mapping mp;
  } top[8], dp;           /* dp: data parallel on every device (candidate 0), compared too */
  bool has_dp;
  pcgc_status st;
  pcgc_error *err;
} grid;

/* Keeps candidate (c, time) among G->top (taking g and mp) or frees them. */
static void top_add(grid *G, pcgc_expert_choice c, double time, int64_t tasks, pcgc_graph *g, pcgc_mapping *mp) {
  int k = G->n_top;
  while (k > 0 && time < G->top[k - 1].time) k--; /* after equal times: the earlier candidate first */
  if (k >= G->max_top) {
    pcgc_graph_free(g);
    pcgc_mapping_destroy(mp);
    return;
  }
  if (G->n_top == G->max_top) { /* the last one drops out */
    pcgc_graph_free(G->top[G->n_top - 1].g);
    pcgc_mapping_destroy(&G->top[G->n_top - 1].mp);
    G->n_top--;
  }
  memmove(&G->top[k + 1], &G->top[k], (size_t)(G->n_top - k) * sizeof G->top[0]);
  G->top[k] = (struct top_entry){c, time, tasks, g, *mp};
  memset(mp, 0, sizeof *mp);
  G->n_top++;
}

/* Candidate i built and simulated into G->out[i] (worker w). */
static void grid_eval(grid *G, int i, int w) {
  const pcgc_compile_options *o = G->o;
  const pcgc_machine *m = G->m;
  const cand_list *L = G->L;
  outcome *u = &G->out[i];
  pcgc_expert_choice c = L->c[i];
  pthread_mutex_lock(&G->lock);
  bool skip = G->stop || (i > 0 && o->time_limit > 0 && pcgc_now() - G->t0 > o->time_limit);
  double bound = G->bound;
  if (!skip && o->progress) o->progress(o->progress_ctx, i, L->n, c);
  pthread_mutex_unlock(&G->lock);
  if (skip) {
    u->state = OUT_SKIPPED;
    return;
  }
  u->fam = c.dp == L->c[0].dp && c.tp == 1 && c.pp == 1 ? &G->r->data_parallel
           : c.dp == 1 && c.pp == 1 && c.tp > 1         ? &G->r->megatron
           : c.dp == 1 && c.tp == 1 && c.pp > 1         ? &G->r->pipeline
                                                        : NULL;
  FILE *log = o->log ? open_memstream(&u->log, &u->log_len) : NULL;
  char cs[96];
  fmt_choice(cs, sizeof cs, c);
  /* optimizer state shared out over the copies (ZeRO-1) where there are several */
  pcgc_memory wm = pcgc_cost_memory(o->sim.optimizer, G->wbytes / ((double)c.tp * c.pp), 0, 0);
  double share = wm.total - (c.dp > 1 ? wm.optimizer * (1 - 1.0 / c.dp) : 0);
  if (share > pcgc_machine_usable_memory(m)) {
    snprintf(u->why, sizeof u->why, "%s is out of memory: its weights, gradients and optimizer state alone need "
             "%.3g GiB per device on average (%.3g GiB usable)", cs, share / 1073741824.0,
             pcgc_machine_usable_memory(m) / 1073741824.0);
    if (log) fprintf(log, "  %-30s not simulated: weights need %.3g GiB per device\n", cs, share / 1073741824.0);
    u->state = OUT_HEAVY;
    u->c = c;
    if (log) fclose(log);
    return;
  }
  pcgc_graph *pg = NULL;
  pcgc_mapping mp;
  memset(&mp, 0, sizeof mp);
  pcgc_error e;
  pcgc_error_clear(&e);
  pcgc_status s = pcgc_expert_build(G->x[w], c, &pg, &mp, &e);
  pcgc_sim_result sr;
  memset(&sr, 0, sizeof sr);
  /* the dp copies are laid out alike (step 3 above): the simulator runs one */
  pcgc_sim_options so = o->sim;
  so.replicas = c.dp;
  so.replica_stride = c.tp;
  so.copies_alike = true; /* built alike: only copy 0's tasks are made */
  so.oom_skips_run = true; /* a candidate that does not fit needs no time */
  /* nor one slower than the best so far: its simulation stops there (the
   * families' best are reported with their times, so theirs run to the end) */
  so.give_up_after = u->fam || !isfinite(bound) ? 0 : o->program_time ? bound * (1 + o->rerank_margin) : bound;
  so.schedule = c.schedule; /* as given by --choice (the grid's start in GPipe order) */
  so.recompute = so.recompute || c.recompute;
  if (c.zero > so.zero) so.zero = c.zero;
  if (s == PCGC_OK) s = pcgc_simulate(pg, &mp, m, &so, &sr, &e);
  /* the DP's views need not keep the copies alike: their simulations
   * check it (options.replicas alone) */
  so.copies_alike = false;
  bool dp_changed; /* the DP's views replace the greedy's where they simulate better */
  if (s == PCGC_OK) s = pcgc_views_dp_if_better(pg, c.dp * c.tp, c.tp, m, &so, G->memo, &mp, &sr, &dp_changed, &e);
  so.copies_alike = s == PCGC_OK && !dp_changed; /* the greedy's views, built alike, kept */
  if (s == PCGC_OK) s = fit_in_memory(pg, &mp, m, &so, &c, &sr, &e);
  if (s == PCGC_OK) fmt_choice(cs, sizeof cs, c);
  u->c = c;
  if (s == PCGC_ERR_NOMEM || (s != PCGC_OK && o->only)) {
    u->state = OUT_FATAL;
    u->status = s;
    snprintf(u->why, sizeof u->why, "%s: %.500s", cs, e.message);
  } else if (s != PCGC_OK) {
    u->state = OUT_FAILED;
    snprintf(u->why, sizeof u->why, "%.600s", e.message);
    if (log) fprintf(log, "  %-30s not built: %s\n", cs, e.message);
  } else {
    u->state = OUT_SIMULATED;
    bool ok = sr.oom_devices == 0;
    if (!ok) {
      snprintf(u->why, sizeof u->why, "%s is out of memory on %d of its %d devices (%.3g GiB needed, %.3g GiB usable)",
               cs, sr.oom_devices, sr.used_devices, pcgc_sim_result_max_memory(&sr) / 1073741824.0,
               sr.capacity / 1073741824.0);
    }
    if (log && sr.stopped_building) {
      fprintf(log, "  %-30s %12s     (stopped after %lld tasks: a device's own work passed the best so far, "
              "%.6f ms, in %.3f s)\n", cs, "slower", (long long)sr.n_tasks, bound * 1e3, sr.build_seconds);
    } else if (log && sr.gave_up) {
      fprintf(log, "  %-30s %12s     %.3g GiB  (%lld tasks%s; built in %.3f s, run in %.3f s until its clock "
              "passed the best so far, %.6f ms)\n", cs, "slower", pcgc_sim_result_max_memory(&sr) / 1073741824.0,
              (long long)sr.n_tasks, sr.symmetric ? ", one dp copy run" : "", sr.build_seconds, sr.run_seconds,
              bound * 1e3);
    } else if (log) {
      fprintf(log, "  %-30s %12.6f ms  %.3g GiB%s  (%lld tasks%s; built in %.3f s, run in %.3f s)\n", cs,
              sr.iteration_time * 1e3, pcgc_sim_result_max_memory(&sr) / 1073741824.0, ok ? "" : " (out of memory)",
              (long long)sr.n_tasks, sr.symmetric ? ", one dp copy run" : "", sr.build_seconds, sr.run_seconds);
      if (!ok) log_fullest(log, &sr);
    }
    if (ok && !sr.gave_up) {
      u->pg = pg;
      u->mp = mp;
      pg = NULL;
      memset(&mp, 0, sizeof mp);
    }
    u->sr = sr;
    memset(&sr, 0, sizeof sr);
  }
  if (log) fclose(log);
  pcgc_sim_result_destroy(&sr);
  pcgc_graph_free(pg);
  pcgc_mapping_destroy(&mp);
}

/* Outcome i taken into the result (in candidate order; under G->lock). */
static void grid_merge(grid *G, int i) {
  outcome *u = &G->out[i];
  pcgc_compile_result *r = G->r;
  if (u->log && G->o->log) fwrite(u->log, 1, u->log_len, G->o->log);
  switch (u->state) {
  case OUT_SKIPPED: r->skipped++; break;
  case OUT_HEAVY:
    if (u->fam) ref_update(u->fam, u->c, false, 0, u->why);
    r->tried++;
    break;
  case OUT_FAILED:
    if (u->fam) ref_update(u->fam, u->c, false, 0, u->why);
    break;
  case OUT_FATAL:
    if (G->st == PCGC_OK) G->st = pcgc_error_set(G->err, u->status, "%s", u->why);
    G->stop = true;
    break;
  case OUT_SIMULATED: {
    bool ok = u->sr.oom_devices == 0 && !u->sr.stopped_building;
    r->tried++;
    r->feasible += ok;
    r->stopped += u->sr.stopped_building;
    if (u->fam) ref_update(u->fam, u->c, ok, u->sr.iteration_time, ok ? NULL : u->why);
    if (ok && u->pg && i == 0 && (G->max_top > 1 || G->o->joint.budget > 0) && !G->o->only) { /* a copy of data parallel's */
      pcgc_graph *c = pcgc_graph_clone(u->pg);
      pcgc_mapping cm;
      pcgc_error e;
      if (c && pcgc_mapping_init(&cm, u->mp.n_nodes, (pcgc_view){0, 1}, &e) == PCGC_OK) {
        memcpy(cm.view, u->mp.view, (size_t)u->mp.n_nodes * sizeof *cm.view);
        G->dp = (struct top_entry){u->c, u->sr.iteration_time, u->sr.n_tasks * (int64_t)u->c.dp, c, cm};
        G->has_dp = true;
      } else {
        pcgc_graph_free(c);
      }
    }
    /* the program's size, roughly: the tasks of every data-parallel copy
     * (the grid builds copy 0's alone where the copies are alike) */
    int64_t size = u->sr.n_tasks * (int64_t)u->c.dp;
    if (ok && u->pg) {
      top_add(G, u->c, u->sr.iteration_time, size, u->pg, &u->mp);
      u->pg = NULL;
    }
    break;
  }
  }
  free(u->log);
  u->log = NULL;
  pcgc_sim_result_destroy(&u->sr);
  pcgc_graph_free(u->pg);
  pcgc_mapping_destroy(&u->mp);
  u->pg = NULL;
}

static void grid_work(void *ctx, int i, int w) {
  grid *G = ctx;
  grid_eval(G, i, w);
  pthread_mutex_lock(&G->lock);
  outcome *u = &G->out[i];
  u->done = true;
  if (u->state == OUT_SIMULATED && !u->sr.oom_devices && !u->sr.gave_up && u->sr.iteration_time < G->bound)
    G->bound = u->sr.iteration_time;
  /* take every finished outcome that is next in order */
  while (G->merged < G->L->n && G->out[G->merged].done) grid_merge(G, G->merged++);
  pthread_mutex_unlock(&G->lock);
}

/* The simulation options of expert choice c: its schedule, recomputation
 * and ZeRO stage, one data-parallel copy run where the copies are alike (the
 * simulator checks; the results are those of running every copy). */
static pcgc_sim_options choice_sim_options(const pcgc_compile_options *o, pcgc_expert_choice c) {
  pcgc_sim_options so = o->sim;
  so.schedule = c.schedule;
  so.recompute = so.recompute || c.recompute;
  if (c.zero > so.zero) so.zero = c.zero;
  so.replicas = c.dp;
  so.replica_stride = c.tp;
  return so;
}

/* The joint search from g (views mp, expert choice c) within what is left
 * of compile's time limit. */
static pcgc_status joint_from(const pcgc_compile_options *o, const pcgc_machine *m, pcgc_ruleset *rs,
                              pcgc_views_memo *memo, double t0, const pcgc_graph *g, const pcgc_mapping *mp,
                              pcgc_expert_choice c, pcgc_joint_result *jr, pcgc_error *err) {
  pcgc_joint_options jo = o->joint;
  /* rewrites of an expert strategy keep its dp copies mostly: the simulator
   * runs one where they are still alike (it checks), and skips the event
   * loop of a rewrite that does not fit */
  pcgc_sim_options js = choice_sim_options(o, c);
  js.oom_skips_run = true;
  jo.sim = &js;
  if (!jo.memo) jo.memo = memo;
  jo.threads = o->threads;
  if (o->time_limit > 0) {
    double left = o->time_limit - (pcgc_now() - t0);
    if (jo.time_limit <= 0 || jo.time_limit > left) jo.time_limit = left > 0.001 ? left : 0.001;
  }
  return pcgc_joint_search(g, mp, c.dp * c.tp, c.tp, m, rs, &jo, jr, err);
}

pcgc_status pcgc_compile(const pcgc_graph *seq, const pcgc_machine *m, const pcgc_compile_options *o,
                         pcgc_compile_result *r, pcgc_error *err) {
  if (r) memset(r, 0, sizeof *r);
  if (!seq || !m || !r) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_compile: bad argument");
  pcgc_compile_options def;
  if (!o) {
    pcgc_compile_options_default(&def);
    o = &def;
  }
  double t0 = pcgc_now();
  pcgc_expert *x = NULL;
  cand_list L = {0};
  pcgc_graph *best = NULL;
  pcgc_mapping best_mp = {0};
  pcgc_views_memo *memo = NULL; /* the DP's terms, shared by the candidates */
  pcgc_status st = pcgc_expert_new(seq, m, o->rules_dir, &x, err);
  if (st == PCGC_OK && o->only) {
    if (!(L.c = malloc(sizeof *L.c))) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "pcgc_compile: out of memory");
    else L.c[L.n++] = *o->only;
  } else if (st == PCGC_OK) {
    st = enumerate(x, &L, err);
  }
  if (st == PCGC_OK) st = pcgc_views_memo_new(&memo, err);
  int D = pcgc_machine_num_devices(m);
  double best_time = INFINITY;
  pcgc_graph *dp_seed = NULL; /* data parallel on every device, where it fits and is not the best */
  pcgc_mapping dp_seed_mp = {0};
  pcgc_expert_choice dp_seed_c = {0};
  /* the weights with their gradients and optimizer state: spread over the
   * tp × pp devices of a copy at best, so a candidate whose average share
   * exceeds a device's memory cannot fit, whatever its views */
  double wbytes = 0;
  for (int i = 0; i < seq->n_nodes; i++)
    if (seq->nodes[i].kind == PCGC_OP_WEIGHT) wbytes += pcgc_cost_piece_bytes(&seq->nodes[i].out[0]);
  int threads = o->threads > 0 ? o->threads : 1;
  if (threads > L.n) threads = L.n > 0 ? L.n : 1;
  pcgc_expert **xs = st == PCGC_OK ? calloc((size_t)threads, sizeof *xs) : NULL;
  outcome *out = st == PCGC_OK && L.n ? calloc((size_t)L.n, sizeof *out) : NULL;
  if (st == PCGC_OK && (!xs || (L.n && !out))) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "pcgc_compile: out of memory");
  if (xs) xs[0] = x;
  for (int w = 1; w < threads && st == PCGC_OK; w++) st = pcgc_expert_new(seq, m, o->rules_dir, &xs[w], err);
  if (st == PCGC_OK) {
    grid G = {.o = o, .m = m, .L = &L, .r = r, .x = xs, .memo = memo, .wbytes = wbytes, .t0 = t0, .out = out,
              .bound = INFINITY, .st = PCGC_OK, .err = err};
    G.max_top = o->program_time ? (o->rerank_max < 1 ? 1 : o->rerank_max > 8 ? 8 : o->rerank_max) : 1;
    pthread_mutex_init(&G.lock, NULL);
    pcgc_parallel_run(L.n, threads, grid_work, &G);
    pthread_mutex_destroy(&G.lock);
    st = G.st;
    int pick = 0;
    r->dp_program = NAN;
    /* the best few, ranked by their programs (none when the best estimate's
     * program is itself too large to lower more than once) */
    if (st == PCGC_OK && o->program_time && G.n_top > 1 && G.top[0].tasks <= o->rerank_max_tasks) {
      double bestp = INFINITY, first = NAN;
      for (int k = 0; k < G.n_top; k++) {
        if (k > 0 && (G.top[k].time > G.top[0].time * (1 + o->rerank_margin) || G.top[k].tasks > o->rerank_max_tasks))
          continue;
        double p = o->program_time(o->program_ctx, G.top[k].g, &G.top[k].mp, G.top[k].c);
        if (!(p >= 0)) continue; /* unknown (infinite: it does not fit) */
        r->reranked++;
        if (k == 0) first = p;
        if (G.has_dp && pcgc_expert_choice_equal(&G.top[k].c, &G.dp.c)) r->dp_program = p;
        if (p < bestp) {
          bestp = p;
          pick = k;
        }
      }
      /* data parallel on every device too, so that the choice never runs slower than it */
      bool dp_in = false;
      for (int k = 0; k < G.n_top; k++) dp_in |= G.has_dp && pcgc_expert_choice_equal(&G.top[k].c, &G.dp.c) &&
                                                 G.top[k].time <= G.top[0].time * (1 + o->rerank_margin);
      if (G.has_dp && !dp_in && G.dp.tasks <= o->rerank_max_tasks && r->reranked > 0) {
        double p = o->program_time(o->program_ctx, G.dp.g, &G.dp.mp, G.dp.c);
        if (p >= 0) {
          r->reranked++;
          r->dp_program = p;
          if (p < bestp) { /* it takes the place of the top entry that would have been picked */
            bestp = p;
            pick = -1;
          }
        }
      }
      if (pick != 0 && r->reranked > 1) {
        r->rerank_changed = true;
        r->by_estimate = G.top[0].c;
        r->by_estimate_program = first;
        r->chosen_program = bestp;
      }
    }
    for (int k = 0; k < G.n_top; k++) {
      if (k == pick) continue;
      pcgc_graph_free(G.top[k].g);
      pcgc_mapping_destroy(&G.top[k].mp);
    }
    if (pick < 0) {
      best = G.dp.g;
      best_mp = G.dp.mp;
      best_time = G.dp.time;
      r->choice = G.dp.c;
    } else {
      if (G.has_dp && G.n_top > 0 && !pcgc_expert_choice_equal(&G.dp.c, &G.top[pick].c)) {
        /* the joint search's second start (below) */
        dp_seed = G.dp.g;
        dp_seed_mp = G.dp.mp;
        dp_seed_c = G.dp.c;
      } else if (G.has_dp) {
        pcgc_graph_free(G.dp.g);
        pcgc_mapping_destroy(&G.dp.mp);
      }
      if (G.n_top > 0) {
        best = G.top[pick].g;
        best_mp = G.top[pick].mp;
        best_time = G.top[pick].time;
        r->choice = G.top[pick].c;
      }
    }
  }
  for (int w = 1; xs && w < threads; w++) pcgc_expert_free(xs[w]);
  free(xs);
  free(out);
  if (st == PCGC_OK && !r->data_parallel.tried)
    snprintf(r->data_parallel.note, sizeof r->data_parallel.note, "not tried");
  if (st == PCGC_OK && !best) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "no strategy of model '%s' fits on '%s' (%d devices, %.3g GiB usable each)",
                   seq->name ? seq->name : "model", m->name, D, pcgc_machine_usable_memory(m) / 1073741824.0);
    pcgc_error_hint(err, "data parallel: %.300s; try a smaller batch or a machine with more memory",
                    r->data_parallel.note[0] ? r->data_parallel.note : "out of memory");
    st = PCGC_ERR_INVALID;
  }
  r->expert_time = best_time;
  if (st == PCGC_OK && o->joint.budget > 0) {
    /* the rule-driven joint search from the best expert strategy, with the
     * library checked by execution first */
    if (o->extra_rules_dir) st = pcgc_ruleset_load_dir(x->rs, o->extra_rules_dir, err);
    r->rules = pcgc_ruleset_size(x->rs);
    pcgc_check_options co;
    pcgc_check_options_default(&co);
    co.threads = o->threads > 0 ? o->threads : 1;
    /* the library's check is not search: its seconds (the same for every
     * machine and model size) do not count against the time limit */
    double tv = pcgc_now();
    if (st == PCGC_OK) st = pcgc_ruleset_verify(x->rs, &co, o->allow_unsound, o->rules_report, &r->rules_unsound, NULL, err);
    double ts = t0 + (pcgc_now() - tv);
    if (st == PCGC_OK) st = joint_from(o, m, x->rs, memo, ts, best, &best_mp, r->choice, &r->joint, err);
    r->start_choice = r->choice;
    /* then from data parallel on every device, where that is not the start:
     * rewrites that move one region off data parallelism (DLRM's tables onto
     * device groups beside data-parallel MLPs) start from there, and the
     * expert strategy (tensor parallelism everywhere) may be too far from
     * them for single rewrites that each simulate faster */
    if (st == PCGC_OK && dp_seed && !(o->time_limit > 0 && pcgc_now() - ts > o->time_limit)) {
      pcgc_joint_result j2;
      double before = r->joint.improvements ? r->joint.time : best_time;
      st = joint_from(o, m, x->rs, memo, ts, dp_seed, &dp_seed_mp, dp_seed_c, &j2, err);
      if (st == PCGC_OK && j2.improvements > 0 && j2.time < before) { /* the rewrites of data parallel win */
        pcgc_joint_result_add_counts(&j2, &r->joint);
        pcgc_joint_result_destroy(&r->joint);
        r->joint = j2;
        r->joint_from_dp = true;
        r->choice = dp_seed_c;
      } else if (st == PCGC_OK) {
        pcgc_joint_result_add_counts(&r->joint, &j2);
        pcgc_joint_result_destroy(&j2);
      }
    }
    if (st == PCGC_OK && o->program_time && r->joint.improvements > 0 && r->joint.n_alt > 0)
      st = rerank_joint(o, r, err);
    pcgc__joint_alts_free(&r->joint);
    if (st == PCGC_OK && r->joint.improvements > 0) { /* the start, kept for the caller */
      pcgc_sim_options sf = choice_sim_options(o, r->start_choice);
      st = pcgc_strategy_canonical(best, &best_mp, &r->start_graph, &r->start_mapping, err);
      if (st == PCGC_OK) st = pcgc_simulate(r->start_graph, &r->start_mapping, m, &sf, &r->start_sim, err);
    }
    if (st == PCGC_OK) {
      r->joint_ran = true;
      pcgc_graph_free(best);
      pcgc_mapping_destroy(&best_mp);
      best = r->joint.graph;
      best_mp = r->joint.mapping;
      r->joint.graph = NULL;
      memset(&r->joint.mapping, 0, sizeof r->joint.mapping);
    } else {
      pcgc_joint_result_destroy(&r->joint);
    }
  }
  pcgc_graph_free(dp_seed);
  pcgc_mapping_destroy(&dp_seed_mp);
  /* the final simulation: run one dp copy where the copies are alike (the
   * simulator checks; the results are those of running every copy) */
  pcgc_sim_options fin = choice_sim_options(o, r->choice);
  if (st == PCGC_OK) st = pcgc_strategy_canonical(best, &best_mp, &r->graph, &r->mapping, err);
  if (st == PCGC_OK) st = pcgc_simulate(r->graph, &r->mapping, m, &fin, &r->sim, err);
  pcgc_graph_free(best);
  pcgc_mapping_destroy(&best_mp);
  pcgc_views_memo_free(memo);
  free(L.c);
  pcgc_expert_free(x);
  r->seconds = pcgc_now() - t0;
  if (st != PCGC_OK) {
    pcgc_compile_result_destroy(r);
    pcgc_compile_ref keep[3] = {r->data_parallel, r->megatron, r->pipeline};
    memset(r, 0, sizeof *r);
    r->data_parallel = keep[0];
    r->megatron = keep[1];
    r->pipeline = keep[2];
  }
  return st;
}
