/*
 * substitutions.h — substitution rules written as text (files NAME.rules in rules/,
 * language in docs/rules.md): loading, instantiation for a machine and a
 * model, matching against a PCG, rewriting, and soundness checking by
 * execution in the reference interpreter.
 *
 *     pcgc_ruleset *rs = pcgc_ruleset_new();
 *     pcgc_ruleset_load_dir(rs, "rules", &err);            // parse + static checks
 *     int64_t deg[8];
 *     int nd = pcgc_rules_machine_degrees(8, deg, 8);       // 2, 4, 8
 *     pcgc_rule_inst *ri; int n;
 *     pcgc_ruleset_instantiate(rs, deg, nd, 4, &ri, &n, &err);
 *     pcgc_graph_index *ix = pcgc_graph_index_new(g, &err);
 *     pcgc_rule_find_matches(&ri[0], g, ix, on_match, ctx, &err);   // calls on_match per match
 *     pcgc_graph *g2;
 *     pcgc_rule_apply(g, &match, &g2, &err);                 // g untouched
 *
 * A rule has symbolic parameters (sort `degree` or `dim`), a match pattern
 * (inputs with optional dtype/shape/parallel-type constraints, operator
 * nodes with optional attribute constraints, yields), `where` conditions,
 * and a rewrite (operators whose attributes are literals, expressions, or
 * copied from a match node with NAME.*). An instance binds every parameter
 * to a number.
 */
#ifndef PCGC_SUBSTITUTIONS_H
#define PCGC_SUBSTITUTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "pcg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PCGC_RULE_MAX_PARAMS 4      /* parameters of a rule */
#define PCGC_RULE_MAX_SYMS 32       /* parameters + size/attribute symbols + ellipses */
#define PCGC_RULE_MAX_NODES 16      /* operator nodes per side */
#define PCGC_RULE_MAX_TENSORS 48    /* inputs + node outputs, both sides */
#define PCGC_RULE_MAX_YIELDS 8
#define PCGC_RULE_MAX_INPUTS 16     /* match inputs */
#define PCGC_RULE_MAX_ARGS 12       /* tensor arguments of one node */

typedef struct pcgc_rule pcgc_rule;         /* one parsed rule (rules_internal.h) */
typedef struct pcgc_ruleset pcgc_ruleset;   /* rules from any number of files */

pcgc_ruleset *pcgc_ruleset_new(void);                 /* NULL on out of memory */
void pcgc_ruleset_free(pcgc_ruleset *rs);             /* accepts NULL */

/* Parses the text of one rules file (len bytes; `path` names it in messages
 * and rule locations, copied) and validates every rule statically (syntax,
 * unknown operators or attributes, arity, unbound names, unused or duplicate
 * definitions, yield counts, rule names unique across the set). On error
 * nothing is added and err has file:line:col, the source line and a caret. */
pcgc_status pcgc_ruleset_parse(pcgc_ruleset *rs, const char *text, size_t len, const char *path,
                               pcgc_error *err);
pcgc_status pcgc_ruleset_load_file(pcgc_ruleset *rs, const char *path, pcgc_error *err);
/* Every DIR/ *.rules file, in name order. */
pcgc_status pcgc_ruleset_load_dir(pcgc_ruleset *rs, const char *dir, pcgc_error *err);

int pcgc_ruleset_size(const pcgc_ruleset *rs);
const pcgc_rule *pcgc_ruleset_rule(const pcgc_ruleset *rs, int i);
const pcgc_rule *pcgc_ruleset_find(const pcgc_ruleset *rs, const char *name);  /* NULL if none */
/* Removes rule i (a rule the checker refused). */
void pcgc_ruleset_remove(pcgc_ruleset *rs, int i);

const char *pcgc_rule_name(const pcgc_rule *r);
pcgc_srcloc pcgc_rule_loc(const pcgc_rule *r);
int pcgc_rule_num_params(const pcgc_rule *r);
const char *pcgc_rule_param_name(const pcgc_rule *r, int i);
bool pcgc_rule_param_is_degree(const pcgc_rule *r, int i);   /* else a dim */

/* ------------------------------------------------------- instantiation */

typedef struct pcgc_rule_inst {
  const pcgc_rule *rule;
  int64_t params[PCGC_RULE_MAX_PARAMS];   /* in declaration order */
} pcgc_rule_inst;

/* The degrees a machine of `devices` devices allows: its divisors >= 2, in
 * increasing order (at most cap). Returns how many. */
int pcgc_rules_machine_degrees(int devices, int64_t *degrees, int cap);
/* The largest rank of any tensor of g (the range of `dim` parameters). */
int pcgc_rules_max_rank(const pcgc_graph *g);

/* Every instance of every rule: degree parameters over degrees[0..n_degrees),
 * dim parameters over 0..max_rank-1; instances whose `where` conditions that
 * mention only parameters are false are dropped. *out is malloc'd. */
pcgc_status pcgc_ruleset_instantiate(const pcgc_ruleset *rs, const int64_t *degrees, int n_degrees, int max_rank,
                                     pcgc_rule_inst **out, int *n_out, pcgc_error *err);

/* ------------------------------------------------------------ matching */

/* Consumers of every tensor and nodes by op kind, for matching in g. */
typedef struct pcgc_graph_index pcgc_graph_index;
pcgc_graph_index *pcgc_graph_index_new(const pcgc_graph *g, pcgc_error *err);
void pcgc_graph_index_free(pcgc_graph_index *ix);

/* One occurrence of an instance in a graph. */
typedef struct pcgc_match {
  const pcgc_rule_inst *inst;
  int nodes[PCGC_RULE_MAX_NODES];           /* graph node of match node i */
  pcgc_ref inputs[PCGC_RULE_MAX_INPUTS];    /* graph tensor bound to match input i */
  int64_t sym[PCGC_RULE_MAX_SYMS];          /* value of every scalar symbol */
} pcgc_match;

/* Calls fn for every match of `ri` in the typed graph g (ix from
 * pcgc_graph_index_new(g)): node pattern, attribute and type constraints
 * and every `where` condition hold, and no intermediate tensor of the
 * pattern (one not yielded) is used outside it. fn returns true to stop.
 * Matches are reported in a deterministic order, each once. */
typedef bool (*pcgc_match_fn)(const pcgc_match *m, void *ctx);
pcgc_status pcgc_rule_find_matches(const pcgc_rule_inst *ri, const pcgc_graph *g, const pcgc_graph_index *ix,
                                   pcgc_match_fn fn, void *ctx, pcgc_error *err);
/* How many matches (stops counting at `limit` if > 0). */
int64_t pcgc_rule_count_matches(const pcgc_rule_inst *ri, const pcgc_graph *g, const pcgc_graph_index *ix,
                                int64_t limit, pcgc_error *err);

/* Rewrites a match: a new typed graph without the matched nodes and with
 * the rewrite's nodes, consumers of the i-th match yield reading the i-th
 * rewrite yield. g is untouched. PCGC_ERR_TYPE when the rewrite does not
 * type-check or a yield's type differs from the tensor it replaces;
 * PCGC_ERR_INVALID when the result would have a cycle. */
pcgc_status pcgc_rule_apply(const pcgc_graph *g, const pcgc_match *m, pcgc_graph **out, pcgc_error *err);

/* ---------------------------------------------------------- soundness */

/* The behaviours of the integer size space an instance exercises (a value
 * of some size or variable of the rule): its parity, odd above 4, a prime;
 * at, just below or just above a bound of a `where` condition; at, just
 * below or just above a value where an integer division or remainder of the
 * rule changes; a seeded random value up to 64; the first instance of a
 * parameter binding; a seeded random combination of several sizes. Besides
 * sizes: "attr", an attribute the match leaves open (stride, act, keepdims,
 * approximate...) at a value other than its default; "training", run with
 * dropout active (rules with a dropout or an attention). */
typedef enum pcgc_check_class {
  PCGC_CHECK_BASE,
  PCGC_CHECK_EVEN,
  PCGC_CHECK_ODD,
  PCGC_CHECK_ODD_GT4,
  PCGC_CHECK_PRIME,
  PCGC_CHECK_BOUND_BELOW,
  PCGC_CHECK_BOUND,
  PCGC_CHECK_BOUND_ABOVE,
  PCGC_CHECK_DIV_BELOW,
  PCGC_CHECK_DIV,
  PCGC_CHECK_DIV_ABOVE,
  PCGC_CHECK_RANDOM,
  PCGC_CHECK_MIXED,
  PCGC_CHECK_ATTR,
  PCGC_CHECK_TRAINING,
  PCGC_CHECK_N_CLASSES
} pcgc_check_class;

/* "base", "even", "odd", "odd>4", "prime", "where-bound-1", "where-bound",
 * "where-bound+1", "div-change-1", "div-change", "div-change+1", "random",
 * "mixed", "attr", "training". */
const char *pcgc_check_class_name(pcgc_check_class c);
/* The names of the classes in the mask (bit 1 << class), comma-separated,
 * in enum order; like snprintf, returns the length it wanted. */
int pcgc_check_classes_format(char *buf, size_t n, unsigned classes);

typedef struct pcgc_check_options {
  int seeds;            /* random inputs per instance (default 3) */
  int instances;        /* least instances per parameter binding (default 3) */
  int budget;           /* instances per rule, spread over its bindings (default 24);
                           each binding gets max(instances, budget / bindings) */
  uint64_t seed;        /* varies every draw; 0 (default) is the reproducible library check */
  int64_t degrees[4];   /* degree values tried (default 1, 2, 4) */
  int n_degrees;
  int max_tries;        /* draws tried per parameter binding (default 400) */
  FILE *log;            /* per-instance lines and a per-rule summary when not NULL */
  int threads;          /* pcgc_ruleset_verify: rules checked at once (default
                           pcgc_threads_default(); 1 with a log); the results
                           do not depend on it */
} pcgc_check_options;

void pcgc_check_options_default(pcgc_check_options *o);

typedef struct pcgc_check_result {
  bool ok;              /* every instance agreed */
  int instances;        /* instances run (parameter bindings x sizes) */
  int executions;       /* instances x seeds */
  int bindings;         /* parameter bindings with at least one instance */
  unsigned classes;     /* pcgc_check_class bits the instances covered */
  int class_instances[PCGC_CHECK_N_CLASSES];  /* instances covering each class */
  char message[2048];   /* on failure: instance, seed, first differing element */
} pcgc_check_result;

/* Runs both sides of rule r on random small-integer-valued tensors in the
 * reference interpreter (f64), forward and backward, for instances that
 * satisfy its conditions, and compares every yield's value and every
 * input's gradient. The instances cover the size space: for every size
 * (match variables, ellipsis dims, dims of unshaped inputs) the values of
 * every pcgc_check_class, each with the other sizes at a base instance,
 * then seeded random combinations, within the budget. Returns PCGC_OK with
 * res->ok false when the rule is wrong (res->message says where); an error
 * status only when the check itself could not run (out of memory). */
pcgc_status pcgc_rule_check(const pcgc_rule *r, const pcgc_check_options *o, pcgc_check_result *res,
                            pcgc_error *err);

/* Checks every rule of rs with pcgc_rule_check, printing one line per rule
 * to `report` when not NULL. Unsound rules are removed from the set unless
 * allow_unsound (then they stay, reported). *n_unsound (may be NULL) counts
 * them; *n_executions (may be NULL) adds up the executions run. */
pcgc_status pcgc_ruleset_verify(pcgc_ruleset *rs, const pcgc_check_options *o, bool allow_unsound, FILE *report,
                                int *n_unsound, int64_t *n_executions, pcgc_error *err);

/* The shipped rule library: $PCGC_RULES_DIR, else the source tree's rules/. */
const char *pcgc_rules_default_dir(void);

#ifdef __cplusplus
}
#endif
#endif
