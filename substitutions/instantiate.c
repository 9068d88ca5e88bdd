/*
 * instantiate.c — rule instances for a machine and a model: every binding
 * of a rule's parameters (degrees over the machine's divisors, dims over
 * the model's ranks), minus the bindings a parameter-only condition rules
 * out.
 */
#include <stdlib.h>
#include <string.h>

#include "rules_internal.h"

int pcgc_rules_machine_degrees(int devices, int64_t *degrees, int cap) {
  int n = 0;
  for (int d = 2; d <= devices && n < cap; d++)
    if (devices % d == 0) degrees[n++] = d;
  return n;
}

/* Do the parameter-only conditions hold for these parameter values? */
static bool params_hold(const pcgc_rule *r, const int64_t *params) {
  rx_env env;
  memset(&env, 0, sizeof env);
  env.rule = r;
  for (int i = 0; i < r->n_params; i++) {
    env.sym[i] = params[i];
    env.sym_set[i] = true;
  }
  for (int c = 0; c < r->n_conds; c++) {
    if (!r->conds[c].params_only) continue;
    bool holds = true;
    if (pcgc__rc_eval(&env, &r->conds[c], &holds) == RX_OK && !holds) return false;
  }
  return true;
}

bool pcgc__rule_params_hold(const pcgc_rule *r, const int64_t *params) { return params_hold(r, params); }

pcgc_status pcgc_ruleset_instantiate(const pcgc_ruleset *rs, const int64_t *degrees, int n_degrees, int max_rank,
                                     pcgc_rule_inst **out, int *n_out, pcgc_error *err) {
  *out = NULL;
  *n_out = 0;
  int n = 0, cap = 0;
  pcgc_rule_inst *v = NULL;
  for (int i = 0; i < pcgc_ruleset_size(rs); i++) {
    const pcgc_rule *r = pcgc_ruleset_rule(rs, i);
    /* odometer over the parameters' ranges */
    int np = r->n_params, idx[PCGC_RULE_MAX_PARAMS] = {0}, len[PCGC_RULE_MAX_PARAMS];
    bool empty = false;
    for (int p = 0; p < np; p++) {
      len[p] = r->syms[p].kind == RS_DEGREE ? n_degrees : max_rank;
      if (len[p] <= 0) empty = true;
    }
    while (!empty) {
      pcgc_rule_inst ri;
      memset(&ri, 0, sizeof ri);
      ri.rule = r;
      for (int p = 0; p < np; p++) ri.params[p] = r->syms[p].kind == RS_DEGREE ? degrees[idx[p]] : idx[p];
      if (params_hold(r, ri.params)) {
        if (n == cap) {
          int nc = cap ? 2 * cap : 64;
          pcgc_rule_inst *nv = realloc(v, (size_t)nc * sizeof *nv);
          if (!nv) {
            free(v);
            return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory instantiating rules");
          }
          v = nv;
          cap = nc;
        }
        v[n++] = ri;
      }
      int p = np - 1;
      while (p >= 0 && ++idx[p] == len[p]) idx[p--] = 0;
      if (p < 0) break;
    }
  }
  *out = v;
  *n_out = n;
  return PCGC_OK;
}
