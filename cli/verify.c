/*
 * verify.c — `pcgc verify PLAN`: checks a plan by execution at small sizes.
 *
 * A plan records how it was derived (search.h, pcgc_derivation): the model
 * text, the constants set on compile's command line, the expert choice and
 * the joint search's rewrites after it (its trace, pcgc_joint_replay).
 * Deriving is pcgc_expert_build of the choice, then the trace replayed on it.
 * verify
 *   1. derives the strategy again at the plan's own sizes and requires the
 *      plan's graph (same operators, names, parallel types): a plan whose
 *      graph was edited, or that this pcgc derives differently, is refused,
 *      naming the first operator that differs;
 *   2. shrinks every integer constant of the model that is a plain literal
 *      (not a repeat count: the layer count stays) to the smallest value,
 *      2 at least (a size of 1 would hide a transposed or swapped
 *      dimension), among 2..64 and the divisors of its value, for which the same choice still derives the same
 *      operators and lowers on the same devices (every shard degree, head
 *      count and micro-batch count stays valid), greedily, a few passes;
 *      --set fixes a constant instead;
 *   3. writes that plan (the plan's views, by operator name) and runs it as
 *      `pcgc run PLAN --check --check-report` on the CPU backend, one MPI
 *      process per device, against the single-device reference interpreter;
 *      the run prints per weight the largest relative difference and either
 *      matches or names the first weight, in the model's order, that
 *      differs and the operator that reads it.
 * Plans the joint search rewrote without recording its steps (a segmented
 * search whose splice its steps did not reproduce, or a plan written before
 * the trace was recorded) are refused.
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "codegen.h"
#include "reference.h"
#include "runtime.h"
#include "search.h"
#include "substitutions.h"

void pcgc_cli_verify_help(FILE *f) {
  fprintf(f,
          "usage: pcgc verify PLAN [--set NAME=VALUE]... [--steps K] [--tolerance T] [--machine M]\n"
          "\n"
          "Checks PLAN (written by `pcgc compile -o PLAN`) by execution at small sizes: derives the\n"
          "same strategy again (the plan must be what its derivation gives), shrinks the model's\n"
          "size constants to the smallest values (2 at least) that keep every shard degree, head\n"
          "count and micro-batch count valid (the device count, the layer count and every parallel\n"
          "decision stay) and every normalised row at least 8 wide and attention head at least 4\n"
          "(narrower ones, through dozens of layers, turn f32 rounding into differences larger\n"
          "than the tolerance), trains that plan for K steps as one CPU process per device under MPI and the\n"
          "single-device reference interpreter on the same model, and prints per weight the\n"
          "largest relative difference. The last line says verified, or names the first weight and\n"
          "operator that differ.\n"
          "\n"
          "  --set NAME=VALUE   keep a constant at VALUE instead of shrinking it (repeatable)\n"
          "  --steps K          training steps (default 3)\n"
          "  --tolerance T      relative tolerance of losses and weights (default 1e-4; plain SGD)\n"
          "  --machine M        the machine to derive on, when the plan's cannot be loaded by name\n"
          "\n"
          "Exit codes: 0 verified, 1 a mismatch or a plan that cannot be verified, 2 bad command\n"
          "line, 3 a file could not be read.\n");
}

/* ----------------------------------------------------------- constants */

typedef struct konst {
  char name[64];
  int64_t value;     /* now */
  int64_t original;
  bool shrink;       /* a plain integer literal, not a repeat count, not fixed by --set */
} konst;

#define MAX_KONST 64

/* The top-level `const NAME = INTEGER` lines of a model's text (`const`
 * stands only at the top level, one per line: docs/model-format.md), and
 * which of them a `repeat(NAME)` uses. */
static int scan_consts(const char *src, konst *k) {
  int n = 0;
  for (const char *line = src; line && *line && n < MAX_KONST;) {
    const char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (strncmp(p, "const", 5) == 0 && (p[5] == ' ' || p[5] == '\t')) {
      p += 5;
      while (*p == ' ' || *p == '\t') p++;
      size_t len = 0;
      while (isalnum((unsigned char)p[len]) || p[len] == '_') len++;
      const char *q = p + len;
      while (*q == ' ' || *q == '\t') q++;
      if (len > 0 && len < sizeof k[0].name && *q == '=') {
        q++;
        while (*q == ' ' || *q == '\t') q++;
        char *end;
        long long v = strtoll(q, &end, 10);
        const char *e = end;
        while (*e == ' ' || *e == '\t') e++;
        bool literal = end != q && isdigit((unsigned char)*q) && (*e == '\n' || *e == '#' || *e == '\r' || !*e);
        memset(&k[n], 0, sizeof k[n]);
        memcpy(k[n].name, p, len);
        k[n].value = k[n].original = literal ? v : 0;
        k[n].shrink = literal && v > 2;
        n++;
      }
    }
    line = strchr(line, '\n');
    if (line) line++;
  }
  /* repeat counts keep the layer count */
  for (const char *r = strstr(src, "repeat"); r; r = strstr(r + 6, "repeat")) {
    const char *p = r + 6;
    while (*p == ' ') p++;
    if (*p != '(') continue;
    p++;
    while (*p == ' ') p++;
    for (int i = 0; i < n; i++) {
      size_t len = strlen(k[i].name);
      if (strncmp(p, k[i].name, len) == 0 && !(isalnum((unsigned char)p[len]) || p[len] == '_')) k[i].shrink = false;
    }
  }
  return n;
}

/* ------------------------------------------------------------ deriving */

typedef struct verify_ctx {
  const char *path;
  pcgc_derivation d;
  pcgc_strategy_info info;
  pcgc_graph *plan_g;       /* the plan's graph and views */
  pcgc_mapping plan_mp;
  pcgc_machine m;
  pcgc_ruleset *rules;      /* the rule library, for the trace (NULL: no trace) */
  konst k[MAX_KONST];
  int n_k;
} verify_ctx;

/* The strategy of the plan's choice for the model with the constants now in
 * v->k (and the derivation's other --set values): canonical graph and the
 * plan's views by operator name. *why: a reason when it cannot be had. */
static pcgc_status derive(verify_ctx *v, pcgc_graph **out, pcgc_mapping *omp, char *why, size_t why_n) {
  const char *names[MAX_KONST + PCGC_DERIVATION_MAX_SETS], *values[MAX_KONST + PCGC_DERIVATION_MAX_SETS];
  char vbuf[MAX_KONST][32];
  int n = 0;
  for (int i = 0; i < v->d.n_set; i++) { /* compile's own --set values that are not literal constants */
    bool ours = false;
    for (int j = 0; j < v->n_k; j++) ours |= strcmp(v->k[j].name, v->d.set_names[i]) == 0 && v->k[j].original > 0;
    if (ours) continue;
    names[n] = v->d.set_names[i];
    values[n++] = v->d.set_values[i];
  }
  for (int j = 0; j < v->n_k; j++) {
    if (v->k[j].original <= 0) continue;
    snprintf(vbuf[j], sizeof vbuf[j], "%lld", (long long)v->k[j].value);
    names[n] = v->k[j].name;
    values[n++] = vbuf[j];
  }
  pcgc_error err;
  pcgc_error_clear(&err);
  *out = NULL;
  memset(omp, 0, sizeof *omp);
  pcgc_model_options mo = {n, names, values};
  pcgc_graph *seq = pcgc_model_parse(v->d.source, strlen(v->d.source), v->d.file, &mo, &err), *g = NULL, *c = NULL;
  pcgc_expert *x = NULL;
  pcgc_mapping mp = {0, NULL}, cmp = {0, NULL};
  pcgc_status st = seq ? pcgc_graph_validate(seq, &err) : (err.status ? err.status : PCGC_ERR_INVALID);
  if (st == PCGC_OK && v->d.loss >= 0) st = pcgc_graph_add_loss(seq, (pcgc_op_kind)v->d.loss, &err);
  if (st == PCGC_OK) st = pcgc_expert_new(seq, &v->m, NULL, &x, &err);
  if (st == PCGC_OK) st = pcgc_expert_build(x, v->info.choice, &g, &mp, &err);
  if (st == PCGC_OK && v->d.n_trace > 0) { /* the joint search's rewrites again */
    pcgc_graph *rg = NULL;
    st = pcgc_joint_replay(g, v->d.n_trace, (const char *const *)v->d.trace, &v->m, v->rules, &rg, &err);
    pcgc_mapping_destroy(&mp); /* views come from the plan, by name */
    if (st == PCGC_OK) {
      pcgc_graph_free(g);
      g = rg;
      st = pcgc_mapping_init(&mp, rg->n_nodes, (pcgc_view){0, 1}, &err);
    }
  }
  if (st == PCGC_OK) st = pcgc_strategy_canonical(g, &mp, &c, &cmp, &err);
  if (st == PCGC_OK) st = pcgc_mapping_init(omp, c->n_nodes, (pcgc_view){0, 1}, &err);
  for (int i = 0; st == PCGC_OK && i < c->n_nodes; i++) { /* the plan's views, by name */
    int j = pcgc_graph_find(v->plan_g, c->nodes[i].name);
    if (j < 0 || v->plan_g->nodes[j].kind != c->nodes[i].kind) {
      snprintf(err.message, sizeof err.message, "%s '%s' is not in the plan", pcgc_op_name(c->nodes[i].kind),
               c->nodes[i].name);
      st = PCGC_ERR_INVALID;
      break;
    }
    omp->view[i] = v->plan_mp.view[j];
  }
  if (st == PCGC_OK && c->n_nodes != v->plan_g->n_nodes) {
    snprintf(err.message, sizeof err.message, "it has %d operators, the plan %d", c->n_nodes, v->plan_g->n_nodes);
    st = PCGC_ERR_INVALID;
  }
  if (st != PCGC_OK) snprintf(why, why_n, "%s", err.message);
  pcgc_expert_free(x);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
  pcgc_graph_free(seq);
  if (st == PCGC_OK) {
    *out = c;
  } else {
    pcgc_mapping_destroy(omp);
    pcgc_mapping_destroy(&cmp);
    pcgc_graph_free(c);
    return st;
  }
  pcgc_mapping_destroy(&cmp);
  return PCGC_OK;
}

/* The first operator (in canonical order) where a and b differ, or -1. */
static int first_difference(const pcgc_graph *a, const pcgc_graph *b) {
  int n = a->n_nodes < b->n_nodes ? a->n_nodes : b->n_nodes;
  for (int i = 0; i < n; i++) {
    const pcgc_node *x = &a->nodes[i], *y = &b->nodes[i];
    if (x->kind != y->kind || strcmp(x->name, y->name) != 0 || x->n_out != y->n_out || x->n_in != y->n_in ||
        !pcgc_attrs_equal(x->attrs, y->attrs))
      return i;
    for (int j = 0; j < x->n_in; j++) /* inputs by producer name and slot */
      if (x->in[j].slot != y->in[j].slot || strcmp(a->nodes[x->in[j].node].name, b->nodes[y->in[j].node].name) != 0)
        return i;
    for (int j = 0; j < x->n_out; j++)
      if (!pcgc_ptensor_equal(&x->out[j], &y->out[j])) return i;
  }
  return a->n_nodes == b->n_nodes ? -1 : n;
}

static void widths(const pcgc_graph *g, int64_t *norm, int64_t *head);

/* The constants now in v->k give a strategy that lowers on the plan's
 * devices, with every normalised row at least norm_floor wide and every
 * attention head at least head_floor (widths). */
static bool feasible_at(verify_ctx *v, int64_t norm_floor, int64_t head_floor) {
  pcgc_graph *g;
  pcgc_mapping mp;
  char why[1024];
  if (derive(v, &g, &mp, why, sizeof why) != PCGC_OK) return false;
  int64_t norm, head;
  widths(g, &norm, &head);
  if (norm < norm_floor || head < head_floor) {
    pcgc_mapping_destroy(&mp);
    pcgc_graph_free(g);
    return false;
  }
  pcgc_codegen_options co;
  pcgc_codegen_options_default(&co);
  co.schedule = v->info.choice.schedule;
  co.recompute = v->info.choice.recompute;
  co.zero = v->info.choice.zero;
  if (v->info.has_program) co.order = v->info.program_order;
  co.optimizer = PCGC_OPTIM_SGD;
  pcgc_program *p = NULL;
  pcgc_error err;
  pcgc_error_clear(&err);
  bool ok = pcgc_codegen(g, &mp, v->info.devices, &co, &p, &err) == PCGC_OK;
  pcgc_program_free(p);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
  return ok;
}

static bool feasible(verify_ctx *v) { return feasible_at(v, 0, 0); }

/* The narrowest row a layernorm or rmsnorm normalises and the narrowest
 * attention head (projection width over heads) of g; INT64_MAX where none. */
static void widths(const pcgc_graph *g, int64_t *norm, int64_t *head) {
  *norm = *head = INT64_MAX;
  for (int i = 0; i < g->n_nodes; i++) {
    const pcgc_node *n = &g->nodes[i];
    if ((n->kind == PCGC_OP_LAYERNORM || n->kind == PCGC_OP_RMSNORM) && n->n_in > 0) {
      const pcgc_ptensor *t = pcgc_graph_ref_type(g, n->in[0]);
      int64_t axes = pcgc_attrs_int(n->attrs, "axes"), w = 1;
      for (int d = t->rank - (int)axes; d < t->rank; d++)
        if (d >= 0) w *= t->dims[d];
      if (w < *norm) *norm = w;
    } else if (n->kind == PCGC_OP_ATTENTION && n->n_in > 3) {
      const pcgc_ptensor *wq = pcgc_graph_ref_type(g, n->in[3]);
      int64_t heads = pcgc_attrs_int(n->attrs, "heads");
      if (heads > 0 && wq->rank == 2 && wq->dims[1] / heads < *head) *head = wq->dims[1] / heads;
    }
  }
}

/* The check's least widths (shrink): rows normalised at least 8 wide and
 * heads at least 4, or as narrow as the model already is. Narrower ones
 * make the check ill-conditioned rather than small: GPT-3 2.7B's plan at 4
 * wide with heads of 1 and 32 layers differed from the reference by 2.5e-3
 * of a weight in f32 (the tolerance is 1e-4) and by 4.5e-6 at 16 wide with
 * heads of 4; data parallelism alone at such sizes matched or not with the
 * number of positions. */
#define NORM_FLOOR 8
#define HEAD_FLOOR 4

/* Greedy: each shrinkable constant to its smallest feasible divisor that
 * keeps the least widths above; again while anything moved (one constant's
 * value can free another's). */
static void shrink(verify_ctx *v) {
  int64_t norm_floor = NORM_FLOOR, head_floor = HEAD_FLOOR;
  {
    pcgc_graph *g;
    pcgc_mapping mp;
    char why[1024];
    if (derive(v, &g, &mp, why, sizeof why) == PCGC_OK) {
      int64_t norm, head;
      widths(g, &norm, &head);
      if (norm < norm_floor) norm_floor = norm;
      if (head < head_floor) head_floor = head;
      pcgc_mapping_destroy(&mp);
      pcgc_graph_free(g);
    }
  }
  for (int pass = 0; pass < 4; pass++) {
    bool moved = false;
    for (int i = 0; i < v->n_k; i++) {
      if (!v->k[i].shrink) continue;
      int64_t now = v->k[i].value;
      /* every value up to 64, then the divisors of the value: 2 at least, so
       * that a transposed or swapped dim still shows */
      for (int64_t d = 2; d < now; d++) {
        if (d > 64 && now % d) continue;
        v->k[i].value = d;
        if (feasible_at(v, norm_floor, head_floor)) {
          moved = true;
          break;
        }
        v->k[i].value = now;
      }
    }
    if (!moved) break;
  }
}

/* How far the model itself carries rounding at the check's sizes: the
 * reference trained as `pcgc run --check` trains it (seed 1, dropout on,
 * SGD), beside a copy whose initial weights are one ulp off (up or down by
 * element), compared after each step by the check's measures (each weight
 * and the step's gradient against the tensor's largest element, gradients
 * at a tenth, at least 1e-3 of the model's largest gradient; the loss).
 * Deep stacks of batch norms at a handful of samples (Inception-v3 at
 * batch 8) amplify a difference in the last bit into whole percents within
 * two steps: where a last bit moves the reference by ten times the
 * tolerance, runs that round differently part ways whatever the plan.
 * (Changing every weight's last bit is a larger push than a plan's other
 * order of summation: GPT-3's copy is 1.9e-4 off after 2 steps where its
 * plans match within 1e-4 over 3; Inception-v3's at batch 8 is 1.4e-1 off
 * after one, and its plans 9e-2 after two.) Returns the steps, from 0 to
 * `steps`, over which the copy stays within 10 tol (*spread: the copy's
 * difference at step *at, the first past them; 0 when all stay within);
 * -1 when the reference cannot run. */
static int steady_steps(const pcgc_graph *g, int steps, double tol, double *spread, int *at) {
  *spread = 0;
  *at = 0;
  pcgc_ref_options ro;
  pcgc_ref_options_default(&ro);
  ro.seed = 1;
  ro.training = true;
  pcgc_optimizer_default(&ro.opt, PCGC_SGD);
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_reference *a = pcgc_ref_new(g, &ro, &err), *b = a ? pcgc_ref_new(g, &ro, &err) : NULL;
  int64_t most = 1;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].kind == PCGC_OP_WEIGHT && pcgc_dtype_is_float(g->nodes[i].out[0].dtype)) {
      int64_t n = pcgc_ptensor_numel(&g->nodes[i].out[0]);
      if (n > most) most = n;
    }
  float *x = malloc((size_t)most * sizeof *x), *y = malloc((size_t)most * sizeof *y);
  pcgc_status st = a && b && x && y ? PCGC_OK : PCGC_ERR_NOMEM;
  for (int i = 0; i < g->n_nodes && st == PCGC_OK; i++) { /* b: every weight one ulp off */
    const pcgc_node *n = &g->nodes[i];
    if (n->kind != PCGC_OP_WEIGHT || !pcgc_dtype_is_float(n->out[0].dtype)) continue;
    int64_t N = pcgc_ptensor_numel(&n->out[0]);
    st = pcgc_ref_get(b, n->name, PCGC_F32, x, N, &err);
    for (int64_t e = 0; e < N && st == PCGC_OK; e++)
      x[e] = nextafterf(x[e], ((uint64_t)e * 0x9e3779b97f4a7c15ULL) >> 63 ? INFINITY : -INFINITY);
    if (st == PCGC_OK) st = pcgc_ref_set(b, n->name, PCGC_F32, x, N, &err);
  }
  int good = steps;
  for (int s = 0; s < steps && st == PCGC_OK && good == steps; s++) {
    double la = 0, lb = 0, gmax = 0;
    st = pcgc_ref_train_step(a, &la, &err);
    if (st == PCGC_OK) st = pcgc_ref_train_step(b, &lb, &err);
    if (st != PCGC_OK) break;
    double worst = fabs(la - lb) / fmax(fabs(la), 1e-6);
    for (int pass = 0; pass < 2 && st == PCGC_OK; pass++) /* gradients: the model's largest first */
      for (int i = 0; i < g->n_nodes && st == PCGC_OK; i++) {
        const pcgc_node *n = &g->nodes[i];
        if (n->kind != PCGC_OP_WEIGHT || !pcgc_dtype_is_float(n->out[0].dtype)) continue;
        int64_t N = pcgc_ptensor_numel(&n->out[0]);
        st = pcgc_ref_get_grad(a, n->name, PCGC_F32, x, N, &err);
        if (st == PCGC_OK && pass == 0) {
          for (int64_t e = 0; e < N; e++) gmax = fmax(gmax, fabs(x[e]));
          continue;
        }
        if (st == PCGC_OK) st = pcgc_ref_get_grad(b, n->name, PCGC_F32, y, N, &err);
        if (st == PCGC_OK) worst = fmax(worst, pcgc_check_grad_diff(x, y, N, gmax));
        if (st == PCGC_OK) st = pcgc_ref_get(a, n->name, PCGC_F32, x, N, &err);
        if (st == PCGC_OK) st = pcgc_ref_get(b, n->name, PCGC_F32, y, N, &err);
        if (st == PCGC_OK) worst = fmax(worst, pcgc_check_weight_diff(x, y, N, 0));
      }
    if (st == PCGC_OK && worst > 10 * tol) {
      good = s;
      *spread = worst;
      *at = s + 1;
    }
  }
  free(x);
  free(y);
  pcgc_ref_free(a);
  pcgc_ref_free(b);
  return st == PCGC_OK ? good : -1;
}

/* Runs `pcgc run plan ...` as a child and waits: its exit code. */
static int run_child(const char *plan, int steps, double tol) {
  char self[4096], st[32], tl[32];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return EXIT_IO;
  self[n] = 0;
  snprintf(st, sizeof st, "%d", steps);
  snprintf(tl, sizeof tl, "%g", tol);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "pcgc verify: error: cannot start `pcgc run`: %s\n", strerror(errno));
    return EXIT_IO;
  }
  if (pid == 0) {
    char *av[] = {self, "run", (char *)plan, "--steps", st, "--check", "--check-report", "--tolerance", tl,
                  "--optimizer", "sgd", "--backend", "cpu", "--quiet", NULL};
    execv(self, av);
    /* e.g. the binary was replaced while verify ran: /proc/self/exe names the old, deleted one */
    fprintf(stderr, "pcgc verify: error: cannot run %s: %s\nhint: run the verify again (was pcgc rebuilt or "
            "moved while it ran?)\n", self, strerror(errno));
    _exit(EXIT_IO);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return EXIT_IO;
  return WIFEXITED(status) ? WEXITSTATUS(status) : EXIT_INTERNAL;
}

int pcgc__cli_verify_plan(const char *path, const char *shown, const char *machine, int n_fixed,
                          const char *const *fixed_names, const char *const *fixed_values, int steps, double tol) {
  if (!shown) shown = path;
  verify_ctx v;
  memset(&v, 0, sizeof v);
  v.path = path;
  pcgc_error err;
  pcgc_error_clear(&err);
  int code = EXIT_OK;
  pcgc_graph *g0 = NULL, *small = NULL;
  pcgc_mapping mp0 = {0, NULL}, smp = {0, NULL};
  char why[1024] = "", tmpdir[64] = "", plan[128] = "";
  pcgc_status st = pcgc_strategy_file_load(path, 0, &v.plan_g, &v.plan_mp, &v.info, &err);
  if (st == PCGC_OK) st = pcgc_strategy_file_derivation(path, &v.d, &err);
  if (st != PCGC_OK) {
    pcgc_error_print(stderr, &err);
    code = pcgc_cli_exit_code(st);
    goto out;
  }
  if (!v.d.file[0] || !v.info.has_choice || v.info.devices < 1) {
    fprintf(stderr, "pcgc verify: error: %s does not record how it was derived (written by an older pcgc)\n"
                    "  hint: compile it again with this pcgc\n", path);
    code = EXIT_INVALID;
    goto out;
  }
  if (!v.d.source) {
    fprintf(stderr, "pcgc verify: error: %s was compiled from %s, whose text the plan does not hold (ONNX models "
                    "are not verified yet)\n", path, v.d.file);
    code = EXIT_INVALID;
    goto out;
  }
  if (v.d.rewrites > 0 && !v.d.has_trace) {
    fprintf(stderr, "pcgc verify: error: the joint search rewrote %s's graph after its expert strategy (%d "
                    "rewrite%s) and the plan does not record its steps, so it cannot be derived again\n"
                    "  hint: `pcgc run %s --check` checks it at its own sizes; `pcgc compile --budget 0`, or "
                    "--segment-nodes 0 for a model the search splits, makes plans that verify can check\n",
            path, v.d.rewrites, v.d.rewrites == 1 ? "" : "s", path);
    code = EXIT_INVALID;
    goto out;
  }
  if (v.d.n_trace > 0) {
    v.rules = pcgc_ruleset_new();
    st = v.rules ? pcgc_ruleset_load_dir(v.rules, pcgc_rules_default_dir(), &err)
                 : pcgc_error_set(&err, PCGC_ERR_NOMEM, "out of memory");
    if (st != PCGC_OK) {
      pcgc_error_print(stderr, &err);
      code = pcgc_cli_exit_code(st);
      goto out;
    }
  }
  st = pcgc_machine_load(machine ? machine : v.info.machine, &v.m, &err);
  if (st != PCGC_OK) {
    pcgc_error_print(stderr, &err);
    fprintf(stderr, "  hint: name the machine the plan was compiled for with --machine FILE\n");
    code = pcgc_cli_exit_code(st);
    goto out;
  }
  v.n_k = scan_consts(v.d.source, v.k);
  for (int i = 0; i < v.n_k; i++) /* compile's --set values are the plan's sizes */
    for (int j = 0; j < v.d.n_set; j++)
      if (strcmp(v.k[i].name, v.d.set_names[j]) == 0 && v.k[i].original > 0) {
        long long x = strtoll(v.d.set_values[j], NULL, 10);
        if (x > 0) v.k[i].value = v.k[i].original = x;
        v.k[i].shrink = v.k[i].shrink && x > 1;
      }
  /* 1. the plan is what its derivation gives */
  if (derive(&v, &g0, &mp0, why, sizeof why) != PCGC_OK) {
    fprintf(stderr, "pcgc verify: error: %s cannot be derived again from its record: %s\n", path, why);
    code = EXIT_INVALID;
    goto out;
  }
  int at = first_difference(g0, v.plan_g);
  if (at >= 0) {
    const pcgc_graph *h = at < v.plan_g->n_nodes ? v.plan_g : g0;
    fprintf(stderr, "pcgc verify: error: %s's graph is not what its derivation gives: it differs at %s '%s' "
                    "(operator %d of %d)\n  hint: the plan was edited, or another pcgc compiled it; compile it "
                    "again\n",
            path, pcgc_op_name(h->nodes[at].kind), h->nodes[at].name, at + 1, v.plan_g->n_nodes);
    code = EXIT_INVALID;
    goto out;
  }
  printf("verify %s: %s, %d devices; derived again at its sizes%s: the same %d operators\n", shown,
         v.d.file, v.info.devices, v.d.n_trace > 0 ? " with the joint search's rewrites" : "", g0->n_nodes);
  /* 2. small sizes */
  for (int f = 0; f < n_fixed; f++) {
    int i = 0;
    while (i < v.n_k && strcmp(v.k[i].name, fixed_names[f]) != 0) i++;
    char *end;
    long long x = strtoll(fixed_values[f], &end, 10);
    if (i == v.n_k || v.k[i].original <= 0 || *end || x < 1) {
      fprintf(stderr, "pcgc verify: error: --set %s=%s: %s\n", fixed_names[f], fixed_values[f],
              i == v.n_k || v.k[i].original <= 0 ? "the model has no integer constant of that name"
                                                 : "the value must be a positive integer");
      code = EXIT_USAGE;
      goto out;
    }
    v.k[i].value = x;
    v.k[i].shrink = false;
  }
  if (n_fixed && !feasible(&v)) {
    derive(&v, &small, &smp, why, sizeof why);
    fprintf(stderr, "pcgc verify: error: the --set values do not give the plan's strategy: %s\n",
            why[0] ? why : "it does not lower on the plan's devices");
    code = EXIT_INVALID;
    goto out;
  }
  shrink(&v);
  printf("sizes for the check:");
  for (int i = 0; i < v.n_k; i++)
    if (v.k[i].original > 0)
      printf(v.k[i].value != v.k[i].original ? " %s=%lld (was %lld)" : " %s=%lld", v.k[i].name,
             (long long)v.k[i].value, (long long)v.k[i].original);
  printf("\n");
  if (derive(&v, &small, &smp, why, sizeof why) != PCGC_OK) {
    fprintf(stderr, "pcgc verify: internal error: %s\n", why);
    code = EXIT_INTERNAL;
    goto out;
  }
  /* 3. run it */
  snprintf(tmpdir, sizeof tmpdir, "/tmp/pcgc-verify-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    fprintf(stderr, "pcgc verify: error: cannot make a temporary directory\n");
    code = EXIT_IO;
    goto out;
  }
  snprintf(plan, sizeof plan, "%s/plan.json", tmpdir);
  pcgc_strategy_info si = v.info;
  si.has_program = false;
  si.has_predicted = false;
  si.derivation = NULL;
  si.has_optimizer = true;
  si.optimizer = PCGC_OPTIM_SGD;
  si.precision = PCGC_PREC_F32;
  if ((st = pcgc_strategy_file_write(plan, small, &smp, &si, &err)) != PCGC_OK) {
    pcgc_error_print(stderr, &err);
    code = pcgc_cli_exit_code(st);
    goto out;
  }
  /* 3. as many steps as the model keeps rounding within the tolerance at these sizes */
  double spread = 0;
  int past = 0, steady = steps > 1 ? steady_steps(small, steps, tol, &spread, &past) : -1; /* one: nothing to spare */
  bool fewer = steady >= 0 && steady < steps;
  if (fewer) {
    int k = steady > 0 ? steady : 1;
    printf("at these sizes the model amplifies rounding: the reference trained from weights one ulp off differs "
           "by %.2e after %d step%s (more than 10x the tolerance), so runs that round differently part "
           "ways whatever the plan; checking %d step%s, from the same weights\n", spread, past,
           past == 1 ? "" : "s", k, k == 1 ? "" : "s");
    steps = k;
  }
  code = run_child(plan, steps, tol);
  if (code == EXIT_OK)
    printf("verified: %d step%s of %s on %d processes match%s the single-device reference within %g%s\n", steps,
           steps == 1 ? "" : "s", shown, v.info.devices, steps == 1 ? "es" : "", tol,
           fewer ? " (fewer steps than asked: the model amplifies rounding, above)" : "");
  else
    printf("NOT verified: %s (see above)\n", shown);
out:
  if (plan[0]) remove(plan);
  if (tmpdir[0]) rmdir(tmpdir);
  pcgc_mapping_destroy(&smp);
  pcgc_graph_free(small);
  pcgc_mapping_destroy(&mp0);
  pcgc_graph_free(g0);
  pcgc_mapping_destroy(&v.plan_mp);
  pcgc_graph_free(v.plan_g);
  pcgc_derivation_free(&v.d);
  pcgc_ruleset_free(v.rules);
  return code;
}

int pcgc_cli_verify(int argc, char **argv) {
  const char *path = NULL, *machine = NULL;
  pcgc_cli_sets sets = {0};
  double steps = 3, tol = 1e-4;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      pcgc_cli_verify_help(stdout);
      return EXIT_OK;
    } else if (a[0] == '-' && a[1] && i + 1 >= argc) {
      return pcgc_cli_usage_error("verify", "%s needs a value", a);
    } else if (strcmp(a, "--set") == 0) {
      int r = pcgc_cli_add_set("verify", argv[++i], &sets);
      if (r >= 0) return r;
    } else if (strcmp(a, "--machine") == 0) {
      machine = argv[++i];
    } else if (strcmp(a, "--steps") == 0 || strcmp(a, "--tolerance") == 0) {
      char *end;
      double x = strtod(argv[++i], &end);
      if (!*argv[i] || *end || !(x > 0) || x > 1e6 || (a[2] == 's' && x != (int)x))
        return pcgc_cli_usage_error("verify", a[2] == 's' ? "%s must be a positive integer" : "%s must be a positive "
                                    "number", a);
      *(a[2] == 's' ? &steps : &tol) = x;
    } else if (a[0] == '-' && a[1]) {
      return pcgc_cli_usage_error("verify", "unknown option '%s'", a);
    } else if (path) {
      return pcgc_cli_usage_error("verify", "unexpected argument '%s' (one PLAN only)", a);
    } else {
      path = a;
    }
  }
  if (!path) return pcgc_cli_usage_error("verify", "missing PLAN%s", "");
  return pcgc__cli_verify_plan(path, NULL, machine, sets.n, sets.names, sets.values, (int)steps, tol);
}
