/*
 * strategy.c — baseline strategies: a parallel graph and its mapping built
 * from a sequential graph by fixed rules, for `pcgc simulate` and as the
 * yardsticks the search is compared with.
 *
 *   sequential     the graph unchanged, every node on device 0.
 *   data-parallel  after every data input a partition(dim=0, degree=N),
 *                  after every weight a replicate(degree=N); the graph is
 *                  then re-inferred, so the sequential operators take the
 *                  batch-sharded types by themselves (the loss becomes N
 *                  partial sums) and weights reach every device. Every
 *                  node's view is {start 0, stride 1}: piece p on device p.
 *
 * Inputs are assumed batch-major (dim 0 is the batch), as in every model
 * pcgc ships; a scalar input is replicated.
 */
#include <stdlib.h>
#include <string.h>

#include "search.h"

const char *pcgc_strategy_name(pcgc_strategy s) {
  switch (s) {
  case PCGC_STRATEGY_SEQUENTIAL: return "sequential";
  case PCGC_STRATEGY_DATA_PARALLEL: return "data-parallel";
  case PCGC_STRATEGY_COUNT: break;
  }
  return "?";
}

int pcgc_strategy_from_name(const char *name) {
  for (int s = 0; name && s < PCGC_STRATEGY_COUNT; s++)
    if (strcmp(name, pcgc_strategy_name((pcgc_strategy)s)) == 0) return s;
  return -1;
}

/* A fresh node name "<base>.dp", "<base>.dp2", ... */
static void fresh_name(const pcgc_graph *g, const char *base, char *out, size_t n) {
  snprintf(out, n, "%.200s.dp", base);
  for (int k = 2; pcgc_graph_find(g, out) >= 0; k++) snprintf(out, n, "%.200s.dp%d", base, k);
}

static pcgc_status data_parallel(pcgc_graph *pg, int N, pcgc_error *err) {
  int n0 = pg->n_nodes;
  int *repl = malloc((size_t)(n0 ? n0 : 1) * sizeof *repl);
  if (!repl) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  pcgc_status st = PCGC_OK;
  for (int i = 0; i < n0 && st == PCGC_OK; i++) {
    repl[i] = -1;
    const pcgc_node *x = &pg->nodes[i];
    if (pcgc_op_class_of(x->kind) != PCGC_CLASS_SOURCE) continue;
    const pcgc_ptensor *t = &x->out[0];
    pcgc_attrs a;
    pcgc_op_kind k;
    if (x->kind == PCGC_OP_INPUT && t->rank > 0) {
      if (t->dims[0] % N) {
        st = pcgc_error_set(err, PCGC_ERR_INVALID,
                            "data parallelism over %d devices needs the batch (dim 0 of input '%s', size %lld) to be "
                            "divisible by %d",
                            N, x->name, (long long)t->dims[0], N);
        pcgc_error_hint(err, "use a batch that is a multiple of %d (--batch or --set B=...), or fewer devices", N);
        break;
      }
      k = PCGC_OP_PARTITION;
      pcgc_attrs_init(&a, k);
      pcgc_attrs_set_int(&a, "dim", 0);
    } else {
      k = PCGC_OP_REPLICATE;
      pcgc_attrs_init(&a, k);
    }
    pcgc_attrs_set_int(&a, "degree", N);
    char name[256];
    fresh_name(pg, x->name, name, sizeof name);
    int id = pcgc_graph_add_node(pg, k, name, &a, 1, (pcgc_ref[]){{i, 0}});
    if (id < 0) st = pcgc_error_set(err, (pcgc_status)id, "cannot add '%s' to the graph", name);
    repl[i] = id;
  }
  for (int j = 0; j < n0 && st == PCGC_OK; j++) { /* the original consumers read the distributed copies */
    pcgc_node *x = &pg->nodes[j];
    for (int i = 0; i < x->n_in; i++)
      if (x->in[i].node < n0 && repl[x->in[i].node] >= 0) x->in[i].node = repl[x->in[i].node];
  }
  free(repl);
  if (st != PCGC_OK) return st;
  if ((st = pcgc_graph_infer(pg, err)) != PCGC_OK && err) {
    char tmp[sizeof err->message];
    snprintf(tmp, sizeof tmp, "data-parallel over %d devices: %.900s", N, err->message);
    memcpy(err->message, tmp, sizeof tmp);
  }
  return st;
}

pcgc_status pcgc_strategy_build(pcgc_strategy s, const pcgc_graph *seq, const pcgc_machine *m, int n_devices,
                                pcgc_graph **out, pcgc_mapping *mp, pcgc_error *err) {
  if (out) *out = NULL;
  if (mp) memset(mp, 0, sizeof *mp);
  if (!seq || !m || !out || !mp || (unsigned)s >= PCGC_STRATEGY_COUNT)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_strategy_build: bad argument");
  int D = pcgc_machine_num_devices(m), N = n_devices > 0 ? n_devices : D;
  if (s == PCGC_STRATEGY_SEQUENTIAL) N = 1;
  if (n_devices < 0 || N > D) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "%d devices asked for, but machine '%s' has %d", n_devices, m->name, D);
    pcgc_error_hint(err, "ask for at most %d, or 0 for all of them", D);
    return PCGC_ERR_INVALID;
  }
  for (int i = 0; i < seq->n_nodes; i++) {
    const pcgc_node *x = &seq->nodes[i];
    if (!x->typed) {
      pcgc_error_set(err, PCGC_ERR_TYPE, "%s '%s' has no type", pcgc_op_name(x->kind), x->name);
      pcgc_error_hint(err, "infer the graph (pcgc_graph_infer) first");
      return PCGC_ERR_TYPE;
    }
    if (pcgc_op_class_of(x->kind) == PCGC_CLASS_PARALLEL) {
      pcgc_error_set(err, PCGC_ERR_INVALID, "strategy %s needs a sequential model, but it has %s '%s'",
                     pcgc_strategy_name(s), pcgc_op_name(x->kind), x->name);
      pcgc_error_hint(err, "baselines parallelise sequential models; simulate a parallel graph with its own mapping");
      return PCGC_ERR_INVALID;
    }
  }
  pcgc_graph *pg = pcgc_graph_clone(seq);
  if (!pg) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  pcgc_status st = PCGC_OK;
  pcgc_view v = {0, 0};
  if (s == PCGC_STRATEGY_DATA_PARALLEL && N > 1) {
    st = data_parallel(pg, N, err);
    v.stride = 1;
  }
  if (st == PCGC_OK) st = pcgc_mapping_init(mp, pg->n_nodes, v, err);
  if (st != PCGC_OK) {
    pcgc_graph_free(pg);
    return st;
  }
  *out = pg;
  return PCGC_OK;
}

pcgc_status pcgc_simulate_strategy(const pcgc_graph *seq, const char *strategy, const pcgc_machine *m, int n_devices,
                                   const pcgc_sim_options *o, FILE *f, pcgc_error *err) {
  int s = pcgc_strategy_from_name(strategy);
  if (s < 0) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "unknown strategy '%s'", strategy ? strategy : "(null)");
    pcgc_error_hint(err, "strategies: sequential, data-parallel");
    return PCGC_ERR_INVALID;
  }
  pcgc_graph *pg = NULL;
  pcgc_mapping mp;
  pcgc_status st = pcgc_strategy_build((pcgc_strategy)s, seq, m, n_devices, &pg, &mp, err);
  if (st != PCGC_OK) return st;
  pcgc_sim_result r;
  st = pcgc_simulate(pg, &mp, m, o, &r, err);
  if (st == PCGC_OK) {
    char title[512];
    snprintf(title, sizeof title, "%s: %s on %d device%s", seq->name ? seq->name : "model", pcgc_strategy_name(s),
             s == PCGC_STRATEGY_SEQUENTIAL ? 1 : (n_devices > 0 ? n_devices : pcgc_machine_num_devices(m)),
             s == PCGC_STRATEGY_SEQUENTIAL || n_devices == 1 ? "" : "s");
    pcgc_sim_report(f, &r, m, title);
  }
  pcgc_sim_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  return st;
}
