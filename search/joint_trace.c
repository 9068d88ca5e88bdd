/*
 * joint_trace.c — the joint search's trace (search.h, pcgc_joint_replay):
 * writing a rewrite as a text line, and applying lines again to a start
 * graph, which may be the same strategy at other sizes.
 *
 * A line names the rule instance (rule name, then its parameters as
 * NAME=VALUE in declaration order) and either the matched nodes by name
 * ("at A B C") or a rule-wide application ("everywhere N": the first match,
 * N times). Replaying finds the instance among those the search would make
 * for the machine, then the match whose nodes carry the recorded names;
 * sizes play no part in either, so a trace recorded at one value of the
 * model's constants applies at another as long as the rule still matches.
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "joint_internal.h"
#include "rules_internal.h" /* rule->match.n_nodes: how many nodes a match names */

/* ------------------------------------------------------------ writing */

typedef struct sbuf {
  char *s;
  size_t n, cap;
  bool nomem;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t len) {
  if (b->nomem) return;
  if (b->n + len + 1 > b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 128;
    while (cap < b->n + len + 1) cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) {
      b->nomem = true;
      return;
    }
    b->s = p;
    b->cap = cap;
  }
  memcpy(b->s + b->n, s, len);
  b->n += len;
  b->s[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* A node name as one token: space, '%' and control characters as %XX. */
static void sb_name(sbuf *b, const char *name) {
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    if (*p <= ' ' || *p == '%' || *p == 0x7f) {
      char x[4];
      snprintf(x, sizeof x, "%%%02X", *p);
      sb_str(b, x);
    } else {
      sb_put(b, (const char *)p, 1);
    }
  }
}

static char *sb_done(sbuf *b) {
  if (b->nomem) {
    free(b->s);
    return NULL;
  }
  if (!b->s) return strdup("");
  return b->s;
}

static void sb_inst(sbuf *b, const pcgc_rule_inst *ri) {
  sb_str(b, pcgc_rule_name(ri->rule));
  for (int i = 0; i < pcgc_rule_num_params(ri->rule); i++) {
    char v[48];
    snprintf(v, sizeof v, "=%lld", (long long)ri->params[i]);
    sb_str(b, " ");
    sb_str(b, pcgc_rule_param_name(ri->rule, i));
    sb_str(b, v);
  }
}

char *pcgc__trace_step(const pcgc_rule_inst *ri, const pcgc_graph *g, const pcgc_match *m, int wide_n) {
  sbuf b = {0};
  sb_inst(&b, ri);
  if (!m) {
    char v[32];
    snprintf(v, sizeof v, " everywhere %d", wide_n);
    sb_str(&b, v);
    return sb_done(&b);
  }
  sb_str(&b, " at");
  for (int p = 0; p < ri->rule->match.n_nodes; p++) {
    sb_str(&b, " ");
    sb_name(&b, g->nodes[m->nodes[p]].name);
  }
  return sb_done(&b);
}

char *pcgc__trace_join(const char *a, const char *b) {
  sbuf s = {0};
  if (a && *a) {
    sb_str(&s, a);
    if (b && *b) sb_str(&s, "\n");
  }
  if (b) sb_str(&s, b);
  return sb_done(&s);
}

pcgc_status pcgc__trace_split(const char *joined, pcgc_joint_result *r) {
  r->n_trace = 0;
  r->trace = NULL;
  if (!joined || !*joined) return PCGC_OK;
  int n = 1;
  for (const char *p = joined; *p; p++) n += *p == '\n';
  if (!(r->trace = calloc((size_t)n, sizeof *r->trace))) return PCGC_ERR_NOMEM;
  for (const char *p = joined; r->n_trace < n;) {
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (!(r->trace[r->n_trace] = strndup(p, len))) return PCGC_ERR_NOMEM;
    r->n_trace++;
    if (!e) break;
    p = e + 1;
  }
  return PCGC_OK;
}

void pcgc__trace_free(pcgc_joint_result *r) {
  for (int i = 0; i < r->n_trace; i++) free(r->trace[i]);
  free(r->trace);
  r->trace = NULL;
  r->n_trace = 0;
}

/* ------------------------------------------------------------ reading */

typedef struct step {
  char rule[128];
  int n_params;
  char pname[PCGC_RULE_MAX_PARAMS][64];
  int64_t pval[PCGC_RULE_MAX_PARAMS];
  bool wide;
  int wide_n;
  int n_nodes;
  char node[PCGC_RULE_MAX_NODES][600];
} step;

/* Token [p, p + len) into buf, %XX decoded; false when it does not fit or
 * an escape is malformed. */
static bool decode(const char *p, size_t len, char *buf, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < len; i++) {
    char c = p[i];
    if (c == '%') {
      if (i + 2 >= len || !isxdigit((unsigned char)p[i + 1]) || !isxdigit((unsigned char)p[i + 2])) return false;
      char hex[3] = {p[i + 1], p[i + 2], 0};
      c = (char)strtol(hex, NULL, 16);
      i += 2;
    }
    if (k + 1 >= n) return false;
    buf[k++] = c;
  }
  buf[k] = 0;
  return k > 0;
}

/* One trace line; false with why when it does not parse. */
static bool parse_step(const char *line, step *s, char *why, size_t why_n) {
  memset(s, 0, sizeof *s);
  const char *tok[2 + PCGC_RULE_MAX_PARAMS + 1 + PCGC_RULE_MAX_NODES + 1];
  size_t len[sizeof tok / sizeof *tok];
  int n = 0;
  for (const char *p = line; *p;) {
    while (*p == ' ') p++;
    if (!*p) break;
    const char *e = p;
    while (*e && *e != ' ') e++;
    if (n == (int)(sizeof tok / sizeof *tok)) {
      snprintf(why, why_n, "too many words");
      return false;
    }
    tok[n] = p;
    len[n++] = (size_t)(e - p);
    p = e;
  }
  if (n < 2 || len[0] >= sizeof s->rule) {
    snprintf(why, why_n, "expected RULE [PARAM=VALUE]... at NODE... or everywhere N");
    return false;
  }
  memcpy(s->rule, tok[0], len[0]);
  int i = 1;
  for (; i < n; i++) {
    const char *eq = memchr(tok[i], '=', len[i]);
    if (!eq) break;
    size_t nl = (size_t)(eq - tok[i]);
    char *end;
    char num[32];
    size_t vl = len[i] - nl - 1;
    if (s->n_params == PCGC_RULE_MAX_PARAMS || nl == 0 || nl >= sizeof s->pname[0] || vl == 0 || vl >= sizeof num) {
      snprintf(why, why_n, "bad parameter '%.*s'", (int)len[i], tok[i]);
      return false;
    }
    memcpy(num, eq + 1, vl);
    num[vl] = 0;
    long long v = strtoll(num, &end, 10);
    if (*end) {
      snprintf(why, why_n, "parameter '%.*s' is not NAME=INTEGER", (int)len[i], tok[i]);
      return false;
    }
    memcpy(s->pname[s->n_params], tok[i], nl);
    s->pval[s->n_params++] = v;
  }
  if (i < n && len[i] == 10 && strncmp(tok[i], "everywhere", 10) == 0) {
    char num[32], *end;
    if (n != i + 2 || len[i + 1] >= sizeof num) {
      snprintf(why, why_n, "expected everywhere N");
      return false;
    }
    memcpy(num, tok[i + 1], len[i + 1]);
    num[len[i + 1]] = 0;
    long v = strtol(num, &end, 10);
    if (*end || v < 1 || v > 1000000) {
      snprintf(why, why_n, "expected everywhere N with N a positive integer");
      return false;
    }
    s->wide = true;
    s->wide_n = (int)v;
    return true;
  }
  if (i < n && len[i] == 2 && strncmp(tok[i], "at", 2) == 0 && n > i + 1) {
    if (n - i - 1 > PCGC_RULE_MAX_NODES) { /* with fewer parameters, more words than a match has nodes */
      snprintf(why, why_n, "%d node names (a rule matches at most %d)", n - i - 1, PCGC_RULE_MAX_NODES);
      return false;
    }
    for (int k = i + 1; k < n; k++)
      if (!decode(tok[k], len[k], s->node[s->n_nodes++], sizeof s->node[0])) {
        snprintf(why, why_n, "bad node name '%.*s'", (int)len[k], tok[k]);
        return false;
      }
    return true;
  }
  snprintf(why, why_n, "expected 'at NODE...' or 'everywhere N' after the rule and its parameters");
  return false;
}

/* The instance the step names, or NULL with why. */
static const pcgc_rule_inst *find_inst(const step *s, const pcgc_rule_inst *insts, int n_insts, char *why,
                                       size_t why_n) {
  bool rule_seen = false;
  for (int i = 0; i < n_insts; i++) {
    const pcgc_rule *r = insts[i].rule;
    if (strcmp(pcgc_rule_name(r), s->rule) != 0) continue;
    rule_seen = true;
    if (pcgc_rule_num_params(r) != s->n_params) continue;
    bool same = true;
    for (int k = 0; k < s->n_params && same; k++)
      same = strcmp(pcgc_rule_param_name(r, k), s->pname[k]) == 0 && insts[i].params[k] == s->pval[k];
    if (same) return &insts[i];
  }
  if (rule_seen) snprintf(why, why_n, "rule '%s' has no instance with these parameters on this machine", s->rule);
  else snprintf(why, why_n, "the rule library has no rule '%s'", s->rule);
  return NULL;
}

typedef struct named_match {
  const step *s;
  const pcgc_graph *g;
  pcgc_match m;
  bool found;
} named_match;

static bool match_named(const pcgc_match *m, void *ctx) {
  named_match *q = ctx;
  for (int p = 0; p < q->s->n_nodes; p++)
    if (strcmp(q->g->nodes[m->nodes[p]].name, q->s->node[p]) != 0) return false;
  q->m = *m;
  q->found = true;
  return true;
}

static bool match_first(const pcgc_match *m, void *ctx) {
  named_match *q = ctx;
  q->m = *m;
  q->found = true;
  return true;
}

/* Applies step s to *g (replaced by the result). */
static pcgc_status apply_step(const step *s, const pcgc_rule_inst *ri, pcgc_graph **g, char *why, size_t why_n) {
  int times = s->wide ? s->wide_n : 1;
  if (!s->wide && s->n_nodes != ri->rule->match.n_nodes) {
    snprintf(why, why_n, "rule '%s' matches %d nodes, the step names %d", s->rule, ri->rule->match.n_nodes,
             s->n_nodes);
    return PCGC_ERR_INVALID;
  }
  for (int k = 0; k < times; k++) {
    pcgc_error e = {0};
    pcgc_graph_index *ix = pcgc_graph_index_new(*g, &e);
    if (!ix) {
      snprintf(why, why_n, "%s", e.message);
      return e.status ? e.status : PCGC_ERR_NOMEM;
    }
    named_match q = {.s = s, .g = *g};
    pcgc_status st = pcgc_rule_find_matches(ri, *g, ix, s->wide ? match_first : match_named, &q, &e);
    pcgc_graph_index_free(ix);
    if (st != PCGC_OK) {
      snprintf(why, why_n, "%s", e.message);
      return st;
    }
    if (!q.found) {
      if (s->wide) {
        snprintf(why, why_n, "rule '%s' matches %d time%s, the step applies it %d times", s->rule, k,
                 k == 1 ? "" : "s", times);
      } else {
        int w = snprintf(why, why_n, "rule '%s' no longer matches at", s->rule);
        for (int p = 0; p < s->n_nodes && w > 0 && (size_t)w < why_n; p++)
          w += snprintf(why + w, why_n - (size_t)w, " '%s'", s->node[p]);
      }
      return PCGC_ERR_INVALID;
    }
    pcgc_graph *g2 = NULL;
    if ((st = pcgc_rule_apply(*g, &q.m, &g2, &e)) != PCGC_OK) {
      snprintf(why, why_n, "%s", e.message);
      return st;
    }
    pcgc_graph_free(*g);
    *g = g2;
  }
  return PCGC_OK;
}

/* A region move's line, "@branches S... at JOIN", applied to *g. */
static pcgc_status apply_branches(const char *line, pcgc_graph **g, char *why, size_t why_n) {
  int size[64], k = 0;
  const char *p = line + strlen(PCGC__BRANCHES_STEP);
  for (;;) {
    while (*p == ' ') p++;
    if (strncmp(p, "at ", 3) == 0) break;
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || (*end != ' ' && *end) || v < 1 || v > 1000000 || k == 64) {
      snprintf(why, why_n, "expected " PCGC__BRANCHES_STEP " DEVICES... at NODE");
      return PCGC_ERR_INVALID;
    }
    size[k++] = (int)v;
    p = end;
  }
  p += 3;
  while (*p == ' ') p++;
  size_t len = strcspn(p, " ");
  char join[600];
  if (!decode(p, len, join, sizeof join) || p[len]) {
    snprintf(why, why_n, "expected one node name after 'at'");
    return PCGC_ERR_INVALID;
  }
  return pcgc__branches_apply(g, join, k, size, why, why_n);
}

pcgc_status pcgc__joint_replay(const pcgc_graph *start, int n_steps, const char *const *steps,
                               const pcgc_rule_inst *insts, int n_insts, pcgc_graph **out, pcgc_error *err) {
  *out = NULL;
  pcgc_graph *g = pcgc_graph_clone(start);
  if (!g) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory replaying the trace");
  for (int i = 0; i < n_steps; i++) {
    step s;
    char why[1400] = "";
    pcgc_status st = PCGC_ERR_INVALID;
    const pcgc_rule_inst *ri = NULL;
    bool region = strncmp(steps[i], PCGC__BRANCHES_STEP " ", strlen(PCGC__BRANCHES_STEP) + 1) == 0;
    if (region) st = apply_branches(steps[i], &g, why, sizeof why);
    else if (parse_step(steps[i], &s, why, sizeof why) && (ri = find_inst(&s, insts, n_insts, why, sizeof why)))
      st = apply_step(&s, ri, &g, why, sizeof why);
    if (st != PCGC_OK || (!ri && !region)) {
      pcgc_graph_free(g);
      if (st == PCGC_OK) st = PCGC_ERR_INVALID;
      return pcgc_error_set(err, st, "trace step %d of %d (%.300s): %s", i + 1, n_steps, steps[i], why);
    }
  }
  *out = g;
  return PCGC_OK;
}

pcgc_status pcgc_joint_replay(const pcgc_graph *start, int n_steps, const char *const *steps, const pcgc_machine *m,
                              const pcgc_ruleset *rs, pcgc_graph **out, pcgc_error *err) {
  if (out) *out = NULL;
  if (!start || !m || !rs || !out || n_steps < 0 || (n_steps > 0 && !steps))
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_joint_replay: bad argument");
  int64_t deg[64];
  int nd = pcgc_rules_machine_degrees(pcgc_machine_num_devices(m), deg, 64);
  pcgc_rule_inst *insts = NULL;
  int n_insts = 0;
  pcgc_status st = pcgc_ruleset_instantiate(rs, deg, nd, pcgc_rules_max_rank(start), &insts, &n_insts, err);
  if (st == PCGC_OK) st = pcgc__joint_replay(start, n_steps, steps, insts, n_insts, out, err);
  free(insts);
  return st;
}

char *pcgc__trace_rename(const char *line, void (*fn)(void *ctx, const char *name, char *buf, size_t n), void *ctx) {
  const char *at = strstr(line, " at ");
  if (!at) return strdup(line);
  sbuf b = {0};
  sb_put(&b, line, (size_t)(at - line) + 3);
  for (const char *p = at + 4; *p;) {
    const char *e = strchr(p, ' ');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    char name[600], mapped[1300];
    if (!decode(p, len, name, sizeof name)) {
      free(b.s);
      return NULL;
    }
    fn(ctx, name, mapped, sizeof mapped);
    sb_str(&b, " ");
    sb_name(&b, mapped);
    if (!e) break;
    p = e + 1;
  }
  return sb_done(&b);
}
