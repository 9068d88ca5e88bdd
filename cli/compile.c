/*
 * compile.c — `pcgc compile MODEL --machine M [-o STRATEGY]`: searches the
 * expert strategy space (data × tensor × pipeline parallelism, search.h's
 * pcgc_compile), prints the chosen strategy operator by operator and its
 * predicted iteration time against the baselines and against the
 * perfect-scaling bound, and writes the strategy file
 * (docs/plan-format.md) that `pcgc simulate STRATEGY.json` reads.
 *
 * The bound: under the roofline cost model (cost/cost.c) a piece of an
 * operator costs max(F/(P·e), B/W) + L with e fixed per op kind, so the
 * pieces of a split operator together cost at least the whole (max is
 * subadditive, split inputs are read whole or more, each piece pays L), and
 * communication only adds. The total work of any parallelisation of the
 * model's operators is therefore at least the sequential strategy's, and
 * one of D devices does at least 1/D of it: sequential time / D is a lower
 * bound on every strategy's iteration time. It is one extra simulation, of
 * the unsplit graph on one device (memory is ignored). It does not hold for
 * measured kernel times, nor for rewrites that remove work (fusion,
 * algebraic rules of the joint search); the output says when the chosen
 * strategy is below it.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "codegen.h"
#include "onnx_import.h"
#include "search.h"

void pcgc_cli_compile_help(FILE *f) {
  fprintf(f,
          "usage: pcgc compile MODEL --machine M [-o STRATEGY] [--batch B] [--set NAME=VALUE]...\n"
          "                    [--time-limit S] [--optimizer O] [--profile DB] [--verbose]\n"
          "\n"
          "Searches parallel strategies for training MODEL on machine M (a preset name or a .machine\n"
          "file): data parallelism b x tensor (Megatron) parallelism t x pipeline parallelism s with\n"
          "m micro-batches, over the divisors of the device count. Every candidate is simulated\n"
          "(as `pcgc simulate` does); of those whose memory fits every device, the best four within\n"
          "10%% of the fastest estimate are lowered to the programs `pcgc run` would execute (each in\n"
          "two orders, topological and longest remaining path first) and the fastest program is\n"
          "chosen; data parallelism on all devices is always a candidate. If the\n"
          "chosen program does not fit although the search's estimate did, the search runs again\n"
          "with less memory (at most twice).\n"
          "Then the joint search rewrites the chosen one with the rule library (docs/rules.md;\n"
          "every rule checked by execution first): best-first over rewritten graphs, each simulated,\n"
          "duplicates recognised by their canonical hash, within --budget, --alpha and the time limit;\n"
          "where data parallelism on all devices fits and was not chosen, it searches again from\n"
          "there (rewrites that move one region off data parallelism, such as DLRM's tables onto\n"
          "groups of devices of their own, start from it), and the faster result is the rewrite.\n"
          "On each search's result, the branches of fork-join regions that run data parallel\n"
          "(an inception module's towers) are narrowed onto disjoint groups of its devices, sized\n"
          "by the cost model, where that simulates faster (trace lines \"@branches\").\n"
          "Where the graph was searched whole, its best rewrites within 10%% of the fastest estimate\n"
          "are lowered too and the fastest program is the rewrite.\n"
          "The rewrite is kept only if its program is faster than the expert strategy's.\n"
          "Prints the strategy per operator (output type with its shard degrees, partial sums,\n"
          "replicas and micro-batches; the devices it runs on), the predicted iteration time against\n"
          "data parallel and the best pure tensor-parallel and pure pipeline candidates, the largest\n"
          "memory of a device, and how many candidates were tried in how long.\n"
          "The perfect-scaling bound is the sequential strategy's iteration time (`pcgc simulate MODEL\n"
          "--strategy sequential`, memory ignored) over the device count: under the roofline cost model\n"
          "splitting an operator never reduces its work and communication only adds, so no strategy of\n"
          "the model's operators is faster, and none beats data parallel by more than data parallel's\n"
          "time / the bound. Rewrites that remove work (fusion, algebraic rules) can go below it; the\n"
          "line then says so.\n"
          "\n"
          "options:\n"
          "  --machine M        machine preset (machines/) or file; required\n"
          "  -o, --output FILE  write the plan (JSON, docs/plan-format.md) atomically: `pcgc run FILE`\n"
          "                     trains with it, `pcgc simulate FILE --machine M` replays it\n"
          "  --batch B          batch size (`const B`, or an ONNX model's symbolic batch dim)\n"
          "  --set NAME=VALUE   override a `const` of the model; repeatable\n"
          PCGC_CLI_LOSS_HELP
          "  --time-limit S     stop the search after S seconds (default 30; 0: no limit): the expert grid\n"
          "                     and the joint search share it (the rule library's check before the\n"
          "                     joint search does not count); the search is deterministic unless\n"
          "                     the limit cuts it short\n"
          "  --optimizer O      sgd | momentum | adam (default adam): memory and update cost\n"
          );
  fprintf(f,
          "  --operators        list every operator's sharding and devices (by default only graphs of at\n"
          "                     most 40 operators are listed)\n"
          "  --verify           before writing the plan, check it by execution (pcgc verify): the same\n"
          "                     strategy derived for the smallest sizes, trained as one process per\n"
          "                     device against the reference; the plan is written only if it matches\n"
          "  --precision P      f32 | tf32 | bf16 (default f32): the arithmetic of GEMMs and\n"
          "                     convolutions on GPUs, costed at the tensor cores' rate and recorded in\n"
          "                     the plan for `pcgc run`; bf16 is mixed precision: activations and their\n"
          "                     gradients stored in bf16 (half the memory and messages), weights,\n"
          "                     their gradients and optimizer state in f32 (on CPU machines only the\n"
          "                     storage changes: they compute in f32; tf32 needs a GPU machine)\n"
          "  --verbose          one line per candidate, and what the bound cost (on standard error)\n"
          "  --threads N        worker threads for the search and the lowering (default: $PCGC_THREADS,\n"
          "                     else the cores, at most 16); the plan does not depend on it\n"
          "  --budget N         graphs the joint search expands from each start (default 4; 0: expert\n"
          "                     strategies only)\n"
          "  --alpha A          the joint search keeps candidates up to A x the best (default 1.05)\n"
          "  --rerank N         lower the best N candidates within 10%% of the fastest estimate and\n"
          "                     choose the fastest program (default 4, at most 8; 0 or 1: the best\n"
          "                     estimate); likewise the joint search's best rewrites (at most 4)\n"
          "  --segment-nodes N  split graphs of more than 2N computed nodes at bottleneck tensors into\n"
          "                     segments of about N, searched one by one, identical ones once\n"
          "                     (default 40; 0: search the graph whole)\n"
          "  --choice C         start from this one expert strategy instead of searching the grid:\n"
          "                     dp=D,tp=T,pp=P[,micro=M][,schedule=gpipe|1f1b][,recompute][,zero[=1|2|3]]\n"
          "                     (degrees default 1, micro default pp; zero: optimizer state sharded over\n"
          "                     the data-parallel copies, zero=2 gradients too where there is one\n"
          "                     micro-batch, zero=3 weights too); with --budget 0 the plan is exactly it\n"
          "  --profile DB       kernel times measured by `pcgc profile` (on a GPU machine's GPU, with the\n"
          "                     same --precision) in place of the roofline, for the search and the\n"
          "                     program's prediction\n"
          "  --rules DIR        more rules (*.rules) for the joint search, beside the shipped library\n"
          "  --allow-unsound    use rules the checker refutes (they are checked, reported and left\n"
          "                     out otherwise)\n"
          "  -h, --help         show this help\n"
          "\n"
          "exit codes: 0 ok, 1 invalid model or no strategy fits, 2 usage, 3 I/O\n");
}

/* The devices of a node's pieces: "3", "0..7", "0..6 step 2". */
static void fmt_devices(char *b, size_t n, pcgc_view v, int64_t pieces, int D) {
  if (pieces <= 1 || v.stride == 0) {
    snprintf(b, n, "%d", v.start);
    return;
  }
  int64_t last = (v.start + (pieces - 1) * (int64_t)v.stride) % D;
  if (v.start + (pieces - 1) * (int64_t)v.stride >= D) snprintf(b, n, "%d+%d*p mod %d", v.start, v.stride, D);
  else if (v.stride == 1) snprintf(b, n, "%d..%lld", v.start, (long long)last);
  else snprintf(b, n, "%d..%lld step %d", v.start, (long long)last, v.stride);
}

/* On a terminal: "candidate 12/33: dp 4 x tp 2 x pp 1 ..." rewritten in place. */
static void progress(void *ctx, int index, int total, pcgc_expert_choice c) {
  FILE *f = ctx;
  fprintf(f, "\r\033[Kcandidate %d/%d: dp %d x tp %d x pp %d, %d micro-batches", index + 1, total, c.dp, c.tp, c.pp,
          c.micro);
  fflush(f);
}

/* On a terminal: "joint search: segment 2/6, 3 graphs expanded, ..." in place. */
static void joint_progress(void *ctx, const pcgc_joint_progress *p) {
  FILE *f = ctx;
  char seg[48] = "";
  if (p->segments) snprintf(seg, sizeof seg, "segment %d/%d: ", p->segment, p->segments);
  fprintf(f, "\r\033[Kjoint search: %s%d graphs expanded, %d rewrites simulated, %s %.4g ms (from %.4g ms)", seg,
          p->expanded, p->evaluated, p->segments ? "its best" : "best", p->best * 1e3, p->start * 1e3);
  fflush(f);
}

/* The chosen strategy per operator: every row with `all` or for graphs of at
 * most TABLE_ROWS shown operators, else one line saying how to see them. */
#define TABLE_ROWS 40
static void print_table(const pcgc_compile_result *r, const pcgc_machine *m, bool all) {
  const pcgc_graph *g = r->graph;
  int D = pcgc_machine_num_devices(m), hidden = 0;
  bool *res = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *res);
  if (!res) return;
  size_t w = 8, wk = 4, wt = 6;
  for (int i = 0; i < g->n_nodes; i++) { /* node ids are topological in a canonical graph */
    const pcgc_node *n = &g->nodes[i];
    pcgc_op_class c = pcgc_op_class_of(n->kind);
    res[i] = c == PCGC_CLASS_SOURCE || (c == PCGC_CLASS_PARALLEL && res[n->in[0].node]);
    if (res[i]) continue;
    char ty[160];
    size_t lt = (size_t)pcgc_ptensor_format(ty, sizeof ty, &n->out[0]);
    if (strlen(n->name) > w) w = strlen(n->name);
    if (strlen(pcgc_op_name(n->kind)) > wk) wk = strlen(pcgc_op_name(n->kind));
    if (lt > wt) wt = lt;
  }
  if (w > 40) w = 40;
  if (wt > 60) wt = 60;
  int rows = 0;
  for (int i = 0; i < g->n_nodes; i++) rows += !res[i];
  if (!all && rows > TABLE_ROWS) {
    printf("  %d operators: --operators lists each with its sharding and devices (or `pcgc plan show PLAN`)\n",
           rows);
    free(res);
    return;
  }
  printf("\n  %-*s  %-*s  %-*s  %s\n", (int)w, "operator", (int)wk, "kind", (int)wt, "output", "devices");
  for (int i = 0; i < g->n_nodes; i++) {
    const pcgc_node *n = &g->nodes[i];
    if (res[i]) {
      hidden += pcgc_op_class_of(n->kind) == PCGC_CLASS_PARALLEL;
      continue;
    }
    char ty[160], dv[64];
    pcgc_ptensor_format(ty, sizeof ty, &n->out[0]);
    fmt_devices(dv, sizeof dv, r->mapping.view[i], pcgc_ptensor_pieces(&n->out[0]), D);
    printf("  %-*s  %-*s  %-*s  %s\n", (int)w, n->name, (int)wk, pcgc_op_name(n->kind), (int)wt, ty, dv);
  }
  printf("  (output: dtype[dim/shards, ...]{sum=partial sums, rep=replicas, micro=micro-batches@dim};\n"
         "   devices: of piece 0..last, from the node's view {start, stride}");
  if (hidden)
    printf(";\n   %d partition/replicate/pipeline nodes that distribute inputs and weights are not shown:\n"
           "   their pieces live on the devices that read them",
           hidden);
  printf(")\n");
  free(res);
}

/* The sequential strategy's iteration time (*seq; on one device with nothing
 * to send it is that device's compute, the model's whole work) and the wall
 * time finding it took (*seconds). The bound is *seq / D (top of this file). */
static pcgc_status perfect_bound(const pcgc_graph *g, const pcgc_machine *m, const pcgc_sim_options *so, double *seq,
                                 double *seconds, pcgc_error *err) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pcgc_graph *pg = NULL;
  pcgc_mapping mp = {0};
  pcgc_sim_result r;
  memset(&r, 0, sizeof r);
  pcgc_sim_options o = *so;
  o.trace_path = NULL;
  pcgc_status st = pcgc_strategy_build(PCGC_STRATEGY_SEQUENTIAL, g, m, 1, &pg, &mp, err);
  if (st == PCGC_OK) st = pcgc_simulate(pg, &mp, m, &o, &r, err);
  if (st == PCGC_OK) *seq = r.iteration_time;
  pcgc_sim_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  *seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  return st;
}

/* "perfect-scaling bound  37.03 ms = sequential 7.11 s / 192 devices; ..." */
static void print_bound(const pcgc_graph *g, const pcgc_machine *m, const pcgc_compile_options *o,
                        const pcgc_compile_result *r, double best) {
  const char *label = "perfect-scaling bound";
  char a[32], b[32];
  if (o->sim.profile) { /* measured times need not add up as the roofline's do */
    printf("  %-26s none: measured kernel times (--profile) make no such bound\n", label);
    return;
  }
  pcgc_error err;
  pcgc_error_clear(&err);
  double seq = 0, seconds = 0;
  int D = pcgc_machine_num_devices(m);
  if (perfect_bound(g, m, &o->sim, &seq, &seconds, &err) != PCGC_OK || !(seq > 0)) {
    printf("  %-26s none: the sequential strategy does not simulate: %s\n", label, err.message);
    return;
  }
  double bound = seq / D;
  if (o->log) fprintf(o->log, "perfect-scaling bound: sequential simulated in %.3g ms\n", seconds * 1e3);
  printf("  %-26s %s = sequential %s / %d device%s; the chosen time is %.2fx it", label, pcgc_cli_fmt_time(a, sizeof a, bound),
         pcgc_cli_fmt_time(b, sizeof b, seq), D, D == 1 ? "" : "s", best / bound);
  if (best < bound * (1 - 1e-9))
    printf(" (rewrites of the joint search removed work the bound counts)");
  else if (r->data_parallel.feasible)
    printf("; no strategy beats data parallel by more than %.2fx", r->data_parallel.time / bound);
  printf("\n");
}

static void print_ref(const char *label, const pcgc_compile_ref *f, double best) {
  char a[32], c[96];
  if (!f->tried) {
    printf("  %-26s %s\n", label, f->note[0] ? f->note : "no candidate (no Megatron rule matches, or too few layers)");
    return;
  }
  if (!f->feasible) {
    printf("  %-26s infeasible: %s\n", label, f->note);
    return;
  }
  pcgc_cli_format_choice(c, sizeof c, f->choice);
  printf("  %-26s %-10s %6.2fx the chosen time  (%s)\n", label, pcgc_cli_fmt_time(a, sizeof a, f->time),
         best > 0 ? f->time / best : 0, c);
}

/* What a chosen plan lowers to: the program pcgc run executes, its memory
 * planned, and its step simulated instruction by instruction: that is the
 * prediction (the search ranked candidates by its task-graph estimate). */
typedef struct lowered {
  pcgc_program *prog;  /* NULL when the plan cannot be lowered (cerr says why) */
  pcgc_sim_result pr;
  bool predicted;      /* the program simulated */
  int64_t planned, arena, instructions;
  double pmem;         /* the program's largest memory of a device */
  int order;           /* pcgc_codegen_options.order */
  pcgc_error cerr;
} lowered;

static void lowered_free(lowered *L) {
  pcgc_program_free(L->prog);
  pcgc_sim_result_destroy(&L->pr);
  memset(L, 0, sizeof *L);
}

static void lower_once(const pcgc_graph *g, const pcgc_mapping *mp, pcgc_expert_choice choice, const pcgc_machine *m,
                       const pcgc_compile_options *o, int D, int order, lowered *L) {
  memset(L, 0, sizeof *L);
  pcgc_error_clear(&L->cerr);
  L->order = order;
  pcgc_codegen_options co;
  pcgc_codegen_options_default(&co);
  co.optimizer = o->sim.optimizer;
  co.schedule = choice.schedule;
  co.recompute = choice.recompute;
  co.zero = choice.zero;
  co.bf16 = o->sim.bf16;
  co.threads = o->threads;
  co.save_for_backward = m->device.kind == PCGC_DEVICE_CPU; /* the CPU backend's kernels use it */
  co.order = order;
  if (pcgc_codegen(g, mp, D, &co, &L->prog, &L->cerr) != PCGC_OK) return;
  for (int d = 0; d < L->prog->n_devices; d++) {
    if (L->prog->dev[d].peak_bytes > L->planned) L->planned = L->prog->dev[d].peak_bytes;
    if (L->prog->dev[d].arena_bytes > L->arena) L->arena = L->prog->dev[d].arena_bytes;
    L->instructions += L->prog->dev[d].n_ins;
  }
  L->predicted = pcgc_program_simulate(L->prog, g, m, &o->sim, &L->pr, &L->cerr) == PCGC_OK;
  if (L->predicted) L->pmem = pcgc_sim_result_max_memory(&L->pr);
}

/* The plan lowered with each order of the global schedule (codegen.h,
 * options.order): the one whose program fits on more devices, then the
 * faster, then topological. Which is better depends on the graph: ordering
 * by the longest remaining path runs a pipeline's stages sooner (CANDLE-Uno
 * on h100-4x8: 14.2 -> 12.64 ms) and DLRM's tables later (1.213 -> 1.234 ms).
 * Programs of more than a million instructions keep the first: lowering
 * LLaMA-3 70B on 1,024 GPUs (4.2 million) twice took 10 s and 0.9 GB more
 * for the same program. */
static void lower_plan(const pcgc_graph *g, const pcgc_mapping *mp, pcgc_expert_choice choice, const pcgc_machine *m,
                       const pcgc_compile_options *o, int D, lowered *L) {
  lower_once(g, mp, choice, m, o, D, 0, L);
  if (!L->predicted || L->instructions > PCGC_CLI_LOWER_TWICE_MAX_INSTRUCTIONS) return;
  lowered P;
  lower_once(g, mp, choice, m, o, D, 1, &P);
  if (P.predicted && pcgc_cli_better_program(&P.pr, &L->pr)) {
    lowered t = *L;
    *L = P;
    P = t;
  }
  lowered_free(&P);
}

/* pcgc_compile_options.program_time: a candidate's program simulated
 * (infinite when it does not fit; -1 when it cannot be lowered). */
typedef struct program_ctx {
  const pcgc_machine *m;
  const pcgc_compile_options *o;
  int D;
} program_ctx;

static double program_time(void *ctx, const pcgc_graph *g, const pcgc_mapping *mp, pcgc_expert_choice c) {
  const program_ctx *P = ctx;
  lowered L;
  lower_plan(g, mp, c, P->m, P->o, P->D, &L);
  double t = !L.predicted ? -1 : L.pr.oom_devices ? INFINITY : L.pr.iteration_time;
  lowered_free(&L);
  return t;
}

/* --choice dp=D,tp=T,pp=P[,micro=M][,schedule=gpipe|1f1b][,recompute]:
 * -1 when parsed, else the usage error's exit code. */
static int parse_choice(const char *text, pcgc_expert_choice *c) {
  *c = (pcgc_expert_choice){1, 1, 1, 1, PCGC_SCHEDULE_GPIPE, false, false};
  char buf[256];
  if (strlen(text) >= sizeof buf) return pcgc_cli_usage_error("compile", "--choice is too long: '%.40s...'", text);
  strcpy(buf, text);
  bool micro_given = false;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(tok, '=');
    if (strcmp(tok, "recompute") == 0) {
      c->recompute = true;
      continue;
    }
    if (strcmp(tok, "zero") == 0) {
      c->zero = 1;
      continue;
    }
    if (eq && strncmp(tok, "zero", 4) == 0 && eq == tok + 4) { /* zero=1 (ZeRO-1) .. zero=3 (ZeRO-3) */
      if (strcmp(eq + 1, "0") && strcmp(eq + 1, "1") && strcmp(eq + 1, "2") && strcmp(eq + 1, "3"))
        return pcgc_cli_usage_error("compile", "--choice: zero=%s: the ZeRO stage is 0, 1, 2 or 3", eq + 1);
      c->zero = eq[1] - '0';
      continue;
    }
    if (!eq) return pcgc_cli_usage_error("compile", "--choice: expected NAME=VALUE, not '%s' (dp=4,tp=2,pp=1,micro=1)", tok);
    *eq = '\0';
    const char *v = eq + 1;
    if (strcmp(tok, "schedule") == 0) {
      int k = pcgc_schedule_from_name(v);
      if (k < 0) return pcgc_cli_usage_error("compile", "--choice: unknown schedule '%s' (gpipe, 1f1b)", v);
      c->schedule = (pcgc_schedule)k;
      continue;
    }
    int *field = strcmp(tok, "dp") == 0 ? &c->dp : strcmp(tok, "tp") == 0 ? &c->tp : strcmp(tok, "pp") == 0 ? &c->pp
                 : strcmp(tok, "micro") == 0 ? &c->micro : NULL;
    if (!field)
      return pcgc_cli_usage_error("compile", "--choice: unknown degree '%s' (dp, tp, pp, micro, schedule, recompute, zero)", tok);
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < 1 || x > 1000000)
      return pcgc_cli_usage_error("compile", "--choice: degrees are positive integers, not '%s'", v);
    *field = (int)x;
    micro_given |= field == &c->micro;
  }
  if (!micro_given && c->pp > 1) c->micro = c->pp;
  return -1;
}

/* --profile DB, freed when the command ends (compile returns from many places) */
static pcgc_profile *compile_profile;

static int compile_main(int argc, char **argv);

int pcgc_cli_compile(int argc, char **argv) {
  int rc = compile_main(argc, argv);
  pcgc_profile_free(compile_profile);
  compile_profile = NULL;
  return rc;
}

static int compile_main(int argc, char **argv) {
  const char *model = NULL, *machine = NULL, *output = NULL, *profile = NULL;
  pcgc_cli_sets sets = {0};
  int loss = -1; /* --loss: an op kind */
  long long batch = 0;
  pcgc_compile_options o;
  pcgc_compile_options_default(&o);
  o.time_limit = 30;
  pcgc_expert_choice only;
  pcgc_precision precision = PCGC_PREC_F32;
  bool verify = false, operators = false;
  int rerank = 4;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int k;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      pcgc_cli_compile_help(stdout);
      return EXIT_OK;
    } else if (strcmp(a, "--verbose") == 0) {
      o.log = stderr;
      o.joint.log = stderr;
      o.rules_report = stderr;
    } else if (strcmp(a, "--allow-unsound") == 0) {
      o.allow_unsound = true;
    } else if (strcmp(a, "--verify") == 0) {
      verify = true;
    } else if (strcmp(a, "--operators") == 0) {
      operators = true;
    } else if (a[0] == '-' && a[1] && !v) {
      return pcgc_cli_usage_error("compile", "%s needs a value", a);
    } else if (strcmp(a, "--machine") == 0) {
      machine = argv[++i];
    } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
      output = argv[++i];
    } else if (strcmp(a, "--batch") == 0) {
      char *end;
      long long x = strtoll(argv[++i], &end, 10);
      if (!*argv[i] || *end || x < 1 || x > 1000000000LL)
        return pcgc_cli_usage_error("compile", "--batch must be a positive integer, not '%s'", argv[i]);
      batch = x;
    } else if (strcmp(a, "--time-limit") == 0) {
      char *end;
      double x = strtod(argv[++i], &end);
      if (!*argv[i] || *end || !(x >= 0) || x > 1e7)
        return pcgc_cli_usage_error("compile", "--time-limit must be seconds >= 0, not '%s'", argv[i]);
      o.time_limit = x;
      o.joint.time_limit = x; /* the joint search's own limit (30 s) would still stop it at 0 */
    } else if (strcmp(a, "--optimizer") == 0) {
      if ((k = pcgc_optimizer_from_name(argv[++i])) < 0)
        return pcgc_cli_usage_error("compile", "unknown optimizer '%s' (sgd, momentum, adam)", argv[i]);
      o.sim.optimizer = (pcgc_optim_kind)k;
    } else if (strcmp(a, "--precision") == 0) {
      if ((k = pcgc_precision_from_name(argv[++i])) < 0)
        return pcgc_cli_usage_error("compile", "unknown precision '%s' (f32, tf32, bf16)", argv[i]);
      precision = (pcgc_precision)k;
    } else if (strcmp(a, "--loss") == 0) {
      int r = pcgc_cli_loss_kind("compile", argv[++i], &loss);
      if (r >= 0) return r;
    } else if (strcmp(a, "--set") == 0) {
      int r = pcgc_cli_add_set("compile", argv[++i], &sets);
      if (r >= 0) return r;
    } else if (strcmp(a, "--rules") == 0) {
      o.extra_rules_dir = argv[++i];
    } else if (strcmp(a, "--profile") == 0) {
      profile = argv[++i];
    } else if (strcmp(a, "--choice") == 0) {
      int r = parse_choice(argv[++i], &only);
      if (r >= 0) return r;
      o.only = &only;
    } else if (strcmp(a, "--budget") == 0) {
      char *end;
      long x = strtol(argv[++i], &end, 10);
      if (!*argv[i] || *end || x < 0 || x > 1000000)
        return pcgc_cli_usage_error("compile", "--budget must be a number of graphs >= 0, not '%s'", argv[i]);
      o.joint.budget = (int)x;
    } else if (strcmp(a, "--threads") == 0) {
      char *end;
      long x = strtol(argv[++i], &end, 10);
      if (!*argv[i] || *end || x < 1 || x > 256)
        return pcgc_cli_usage_error("compile", "--threads must be a number from 1 to 256, not '%s'", argv[i]);
      o.threads = (int)x; /* pcgc_compile passes it to the rule check and the joint search */
    } else if (strcmp(a, "--rerank") == 0) {
      char *end;
      long x = strtol(argv[++i], &end, 10);
      if (!*argv[i] || *end || x < 0 || x > 8)
        return pcgc_cli_usage_error("compile", "--rerank must be a number of candidates from 0 to 8, not '%s'", argv[i]);
      rerank = (int)x;
    } else if (strcmp(a, "--segment-nodes") == 0) {
      char *end;
      long x = strtol(argv[++i], &end, 10);
      if (!*argv[i] || *end || x < 0 || x > 1000000)
        return pcgc_cli_usage_error("compile", "--segment-nodes must be a number of nodes >= 0, not '%s'", argv[i]);
      o.joint.segment_nodes = (int)x;
    } else if (strcmp(a, "--alpha") == 0) {
      char *end;
      double x = strtod(argv[++i], &end);
      if (!*argv[i] || *end || !(x >= 1) || x > 100)
        return pcgc_cli_usage_error("compile", "--alpha must be a number from 1 to 100, not '%s'", argv[i]);
      o.joint.alpha = x;
    } else if (a[0] == '-' && a[1]) {
      return pcgc_cli_usage_error("compile", "unknown option '%s'", a);
    } else if (!model) {
      model = a;
    } else {
      return pcgc_cli_usage_error("compile", "unexpected argument '%s' (one MODEL only)", a);
    }
  }
  if (!model) return pcgc_cli_usage_error("compile", "missing MODEL%s", "");
  if (!machine)
    return pcgc_cli_usage_error("compile", "missing --machine M (a preset such as dgx-h100, or a file)%s", "");
  int code = EXIT_OK;
  pcgc_graph *g = pcgc_cli_load(model, sets.n, sets.names, sets.values, batch, loss, &code);
  if (!g) return code;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_machine m;
  pcgc_compile_result r;
  memset(&r, 0, sizeof r);
  pcgc_status st = pcgc_machine_load(machine, &m, &err);
  if (st == PCGC_OK && precision == PCGC_PREC_TF32 && m.device.kind != PCGC_DEVICE_GPU) {
    st = pcgc_error_set(&err, PCGC_ERR_INVALID, "--precision %s needs a GPU machine; '%s' has CPUs, which compute in f32",
                        pcgc_precision_name(precision), m.name);
    pcgc_error_hint(&err, "--precision bf16 works there: activations stored in bf16, arithmetic in f32");
  }
  o.sim.bf16 = precision == PCGC_PREC_BF16; /* mixed precision: activations stored in bf16 */
  if (st != PCGC_OK) {
    pcgc_error_print(stderr, &err);
    pcgc_graph_free(g);
    return pcgc_cli_exit_code(st);
  }
  pcgc_machine_set_precision(&m, precision);
  if (profile) { /* measured kernel times for the search, the program's prediction and the bound */
    if ((st = pcgc_cli_load_profile("compile", profile, &m, &compile_profile, &err)) != PCGC_OK) {
      pcgc_error_print(stderr, &err);
      pcgc_graph_free(g);
      return pcgc_cli_exit_code(st);
    }
    o.sim.profile = compile_profile;
  }
  int D = pcgc_machine_num_devices(&m);
  /* the grid's best few candidates ranked by their programs (what runs) */
  program_ctx pctx = {&m, &o, D};
  if (rerank > 1) {
    o.program_time = program_time;
    o.program_ctx = &pctx;
    o.rerank_max = rerank;
  }
  bool tty = !o.log && isatty(fileno(stderr));
  if (tty) {
    o.progress = progress;
    o.progress_ctx = stderr;
    o.joint.progress = joint_progress;
    o.joint.progress_ctx = stderr;
  }
  /* The search ranks candidates by its task-graph estimate, memory
   * included; the chosen plan is then lowered to the program pcgc run
   * executes, whose planned memory is the truth. Where that program does
   * not fit although the estimate did, the search runs again with its usable
   * memory lowered by the ratio between the two (at most twice), so that a
   * plan compile writes is one that runs. */
  pcgc_machine ms = m; /* the search's machine */
  double cap = pcgc_machine_usable_memory(&m), searched_cap = cap;
  lowered L;
  memset(&L, 0, sizeof L);
  double rewrites_time = 0, start_time = 0;
  bool kept_start = false, rewrites_oom = false;
  for (int attempt = 0;; attempt++) {
    st = pcgc_compile(g, &ms, &o, &r, &err);
    if (tty) fprintf(stderr, "\r\033[K");
    if (st != PCGC_OK) {
      fprintf(stderr, "pcgc compile: ");
      pcgc_error_print(stderr, &err);
      pcgc_compile_result_destroy(&r);
      pcgc_graph_free(g);
      return pcgc_cli_exit_code(st);
    }
    lower_plan(r.graph, &r.mapping, r.choice, &m, &o, D, &L);
    /* The joint search compares estimates; a rewrite that shortens the
     * estimate may add copies and messages its program pays for, or memory
     * its estimate missed. Where it improved, the expert strategy it started
     * from is lowered too, and kept when its program fits where the
     * rewrites' does not, or fits as well and is faster. */
    kept_start = rewrites_oom = false;
    if (r.start_graph && L.predicted) {
      lowered Ls;
      lower_plan(r.start_graph, &r.start_mapping, r.start_choice, &m, &o, D, &Ls);
      if (Ls.predicted && pcgc_cli_better_program(&Ls.pr, &L.pr)) {
        rewrites_time = L.pr.iteration_time;
        rewrites_oom = L.pr.oom_devices > 0;
        start_time = Ls.pr.iteration_time;
        kept_start = true;
        r.choice = r.start_choice;
        pcgc_graph *tg = r.graph;
        r.graph = r.start_graph;
        r.start_graph = tg;
        pcgc_mapping tm = r.mapping;
        r.mapping = r.start_mapping;
        r.start_mapping = tm;
        pcgc_sim_result ts = r.sim;
        r.sim = r.start_sim;
        r.start_sim = ts;
        lowered tl = L;
        L = Ls;
        Ls = tl;
      }
      lowered_free(&Ls);
    }
    double est = pcgc_sim_result_max_memory(&r.sim);
    if (!L.predicted || !L.pr.oom_devices || o.only || attempt == 2 || !(est > 0) || !(L.pmem > est)) break;
    char a1[32], a2[32], a3[32], cc[128];
    pcgc_cli_format_choice(cc, sizeof cc, r.choice);
    searched_cap = pcgc_machine_usable_memory(&ms) * (cap / L.pmem) * 0.98;
    fprintf(stderr, "pcgc compile: the program of %s needs %s per device where the search estimated %s; searching "
            "again as if %s were usable\n", cc, pcgc_cli_fmt_bytes(a1, sizeof a1, L.pmem),
            pcgc_cli_fmt_bytes(a2, sizeof a2, est), pcgc_cli_fmt_bytes(a3, sizeof a3, searched_cap));
    ms.device.memory_reserved = ms.device.memory - searched_cap;
    lowered_free(&L);
    pcgc_compile_result_destroy(&r);
    memset(&r, 0, sizeof r);
  }
  char a[64], b[64], c[128], c2[64];
  const char *name = g->name ? g->name : model;
  pcgc_cli_format_choice(c, sizeof c, r.choice);
  printf("pcgc compile: %s on %s (%d device%s)\n", name, m.name, D, D == 1 ? "" : "s");
  printf("strategy: %s on %d of %d devices\n", c, r.choice.dp * r.choice.tp * r.choice.pp, D);
  print_table(&r, &m, operators);
  double best = r.sim.iteration_time, mem = pcgc_sim_result_max_memory(&r.sim);
  pcgc_program *prog = L.prog;
  pcgc_sim_result pr = L.pr;
  int64_t planned = L.planned, arena = L.arena, instructions = L.instructions;
  double pmem = L.pmem;
  bool predicted = L.predicted;
  pcgc_error cerr = L.cerr;
  if (searched_cap < cap)
    printf("%-28s searched as if %s per device were usable: the first choice's program needed more memory than "
           "the search estimated\n", "memory margin", pcgc_cli_fmt_bytes(a, sizeof a, searched_cap));
  if (predicted) {
    printf("\n%-28s %s (the program pcgc run executes, simulated instruction by instruction; the search's "
           "estimate %s)\n", "predicted iteration time", pcgc_cli_fmt_time(a, sizeof a, pr.iteration_time),
           pcgc_cli_fmt_time(b, sizeof b, best));
  } else {
    printf("\n%-28s %s (the search's estimate)\n", "predicted iteration time", pcgc_cli_fmt_time(a, sizeof a, best));
  }
  if (predicted && r.data_parallel.feasible && isfinite(r.dp_program)) { /* compared as programs */
    pcgc_cli_format_choice(c, sizeof c, r.data_parallel.choice);
    printf("  %-26s %-10s %6.2fx the chosen program  (%s, its program)\n", "data parallel",
           pcgc_cli_fmt_time(a, sizeof a, r.dp_program), pr.iteration_time > 0 ? r.dp_program / pr.iteration_time : 0, c);
  } else {
    print_ref("data parallel", &r.data_parallel, best);
  }
  print_ref("best pure Megatron", &r.megatron, best);
  print_ref("best pure pipeline", &r.pipeline, best);
  print_bound(g, &m, &o, &r, best);
  if (precision == PCGC_PREC_BF16)
    printf("%-28s bf16 mixed precision: activations and their gradients stored in bf16 (the outputs above), "
           "weights, their gradients and optimizer state in f32%s\n", "precision",
           m.device.kind == PCGC_DEVICE_GPU ? "; GEMMs in bf16 with f32 accumulation"
                                            : "; arithmetic in f32 (a CPU machine)");
  else if (precision == PCGC_PREC_TF32)
    printf("%-28s tf32 GEMMs and convolutions, everything stored in f32\n", "precision");
  if (predicted) {
    char e1[64], e2[64];
    printf("%-28s %s of %s usable (the arena of planned buffers, %s at its peak, plus message staging; the "
           "search's estimate %s)\n", "memory per device (max)", pcgc_cli_fmt_bytes(a, sizeof a, pmem),
           pcgc_cli_fmt_bytes(b, sizeof b, cap), pcgc_cli_fmt_bytes(e1, sizeof e1, (double)planned),
           pcgc_cli_fmt_bytes(e2, sizeof e2, mem));
    if (pr.oom_devices)
      printf("%-28s %d device%s need%s more memory than the %s usable: pcgc run cannot allocate it there (a "
             "smaller --batch, or --choice with recompute, needs less)\n", "OUT OF MEMORY", pr.oom_devices,
             pr.oom_devices == 1 ? "" : "s", pr.oom_devices == 1 ? "s" : "", pcgc_cli_fmt_bytes(a, sizeof a, cap));
    int64_t starts = 0, buckets = 0, bucketed = 0; /* gradient all-reduces, and those that are buckets */
    for (int d = 0; d < prog->n_devices; d++)
      for (int i = 0; i < prog->dev[d].n_ins; i++) {
        const pcgc_ins *I = &prog->dev[d].ins[i];
        if (I->kind != PCGC_INS_ALLREDUCE_START) continue;
        starts++;
        if (I->dst < 0) buckets++, bucketed += I->n_args;
      }
    printf("%-28s %lld instructions over %d device%s", "program", (long long)instructions, prog->n_devices,
           prog->n_devices == 1 ? "" : "s");
    if (buckets)
      printf("; %lld gradient all-reduces on all devices, %lld of them buckets of %.1f weights on average",
             (long long)starts,
             (long long)buckets, (double)bucketed / (double)buckets);
    putchar('\n');
  } else {
    printf("%-28s %s of %s usable\n", "memory per device (max)", pcgc_cli_fmt_bytes(a, sizeof a, mem),
           pcgc_cli_fmt_bytes(b, sizeof b, cap));
    printf("%-28s cannot be lowered yet: %s (pcgc run will refuse this plan)\n", "program", cerr.message);
  }
  printf("%-28s %d simulated", "candidates", r.tried);
  if (r.stopped) printf(" (%d stopped early: slower than the best)", r.stopped);
  printf(", %d fit in memory, %.2f s", r.feasible, r.seconds);
  if (r.skipped) printf(" (time limit: %d not tried)", r.skipped);
  printf("\n");
  if (r.rerank_changed) {
    char bc[128];
    pcgc_cli_format_choice(bc, sizeof bc, r.by_estimate);
    if (isinf(r.by_estimate_program))
      printf("%-28s the best %d by estimate lowered and ranked by their programs: the program of %s, the best "
             "estimate, does not fit in memory; the chosen one runs in %s\n", "", r.reranked, bc,
             pcgc_cli_fmt_time(b, sizeof b, r.chosen_program));
    else
      printf("%-28s the best %d by estimate lowered and ranked by their programs: %s, the best estimate, runs in "
             "%s; the chosen one in %s\n", "", r.reranked, bc, pcgc_cli_fmt_time(a, sizeof a, r.by_estimate_program),
             pcgc_cli_fmt_time(b, sizeof b, r.chosen_program));
  }
  if (r.joint_ran) {
    const pcgc_joint_result *j = &r.joint;
    printf("%-28s %d rules (%d refused by the checker%s), %d instances; %d graphs expanded, %d rewrites "
           "simulated (%d rule-wide, %d faster with the DP's views), %d duplicates, %d refused; %.2f s%s\n",
           "joint search", r.rules, r.rules_unsound, o.allow_unsound && r.rules_unsound ? ", used anyway" : "",
           j->instances, j->expanded, j->evaluated, j->wide, j->dp_better, j->duplicates, j->refused, j->seconds,
           j->time_hit ? " (time limit)" : j->budget_hit ? " (budget)" : j->exhausted ? " (no graph left within alpha)" : "");
    if (j->segments)
      printf("%-28s split at bottleneck tensors into %d segments: %d distinct ones searched, %d replaced by a "
             "faster rewrite%s\n",
             "", j->segments, j->segments_searched, j->segments_improved,
             j->splice_rejected ? " (the whole graph was not faster: kept the start)" : "");
    printf("%-28s %s the expert strategy's %s", "", j->improvements ? "improved on" : "no rewrite improved on",
           pcgc_cli_fmt_time(a, sizeof a, r.expert_time));
    if (j->improvements)
      printf(" to %s (%d improvement%s%s, the last by %s)", pcgc_cli_fmt_time(b, sizeof b, j->time),
             j->improvements, j->improvements == 1 ? "" : "s",
             r.joint_from_dp ? " of data parallel on every device, its second start" : "", j->last_rule);
    printf("\n");
    if (r.joint_reranked > 1 && r.joint_rerank_changed)
      printf("%-28s the best %d rewrites by estimate lowered and ranked by their programs: the fastest estimate "
             "(%s) runs in %s, the chosen one in %s\n", "", r.joint_reranked,
             pcgc_cli_fmt_time(a, sizeof a, r.joint_by_estimate_time),
             pcgc_cli_fmt_time(b, sizeof b, r.joint_by_estimate_program),
             pcgc_cli_fmt_time(c2, sizeof c2, r.joint_chosen_program));
    else if (r.joint_reranked > 1)
      printf("%-28s the best %d rewrites by estimate lowered and ranked by their programs: the fastest estimate's "
             "is the fastest (%s)\n", "", r.joint_reranked, pcgc_cli_fmt_time(a, sizeof a, r.joint_chosen_program));
    if (kept_start && rewrites_oom)
      printf("%-28s but as a program the rewritten plan did not fit in memory (the search's estimate missed "
             "some): kept the expert strategy (%s)\n", "", pcgc_cli_fmt_time(b, sizeof b, start_time));
    else if (kept_start)
      printf("%-28s but as programs the rewrites were slower (%s against the expert strategy's %s): kept the "
             "expert strategy\n", "", pcgc_cli_fmt_time(a, sizeof a, rewrites_time),
             pcgc_cli_fmt_time(b, sizeof b, start_time));
    if (j->untraced && !kept_start)
      printf("%-28s the segments' rewrites could not be recorded as one trace: `pcgc verify` cannot derive this "
             "plan (--segment-nodes 0 searches the graph whole)\n", "");
  }
  if (output) {
    pcgc_strategy_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.machine, sizeof info.machine, "%s", m.name);
    info.has_predicted = true;
    info.iteration_s = predicted ? pr.iteration_time : best;
    info.search_estimate_s = best;
    info.data_parallel_s = r.data_parallel.feasible ? r.data_parallel.time : -1;
    info.has_choice = true;
    info.choice = r.choice;
    info.devices = D;
    info.has_device_kind = true;
    info.precision = precision;
    info.device_kind = m.device.kind;
    info.has_optimizer = true;
    info.optimizer = o.sim.optimizer;
    info.predicted_peak_bytes = predicted ? pmem : mem;
    if (prog) {
      info.has_program = true;
      info.program_digest = prog->digest;
      info.program_order = L.order;
      info.program_tasks = prog->n_tasks;
      info.program_instructions = instructions;
      info.planned_peak_bytes = planned;
      info.planned_arena_bytes = arena;
    }
    /* how it was derived, for pcgc verify */
    pcgc_derivation d;
    memset(&d, 0, sizeof d);
    snprintf(d.file, sizeof d.file, "%s", model);
    if (!pcgc_onnx_is_onnx_path(model)) d.source = pcgc_read_file(model, NULL, NULL);
    for (int i = 0; i < sets.n && d.n_set < PCGC_DERIVATION_MAX_SETS; i++, d.n_set++) {
      snprintf(d.set_names[d.n_set], sizeof d.set_names[0], "%s", sets.names[i]);
      snprintf(d.set_values[d.n_set], sizeof d.set_values[0], "%s", sets.values[i]);
    }
    if (batch > 0 && d.n_set < PCGC_DERIVATION_MAX_SETS) {
      snprintf(d.set_names[d.n_set], sizeof d.set_names[0], "B");
      snprintf(d.set_values[d.n_set++], sizeof d.set_values[0], "%lld", batch);
    }
    d.loss = loss;
    d.rewrites = r.joint_ran && !kept_start ? r.joint.improvements : 0;
    /* the rewrites as the joint search's trace (none recorded when a
     * segmented search's steps did not reproduce its splice; none when the
     * expert strategy was kept) */
    d.has_trace = !(r.joint_ran && r.joint.untraced) || kept_start;
    if (d.has_trace && r.joint_ran && !kept_start && r.joint.n_trace > 0) {
      if (!(d.trace = calloc((size_t)r.joint.n_trace, sizeof *d.trace))) d.has_trace = false;
      for (int i = 0; d.trace && i < r.joint.n_trace; i++)
        if (!(d.trace[d.n_trace++] = strdup(r.joint.trace[i]))) d.has_trace = false;
    }
    info.derivation = &d;
    if (verify) { /* checked by execution before the plan is written */
      char tmp[4200];
      snprintf(tmp, sizeof tmp, "%s.verify.tmp", output);
      st = pcgc_strategy_file_write(tmp, r.graph, &r.mapping, &info, &err);
      int vc = st == PCGC_OK ? pcgc__cli_verify_plan(tmp, output, machine, 0, NULL, NULL, 3, 1e-4) : EXIT_IO;
      if (st == PCGC_OK && vc == EXIT_OK) {
        if (rename(tmp, output) != 0) st = pcgc_error_set(&err, PCGC_ERR_IO, "cannot rename %s to %s", tmp, output);
      } else {
        remove(tmp);
        if (st == PCGC_OK) {
          fprintf(stderr, "pcgc compile: error: the plan failed verification; %s was not written\n", output);
          pcgc_derivation_free(&d);
          pcgc_program_free(prog);
          pcgc_sim_result_destroy(&pr);
          pcgc_compile_result_destroy(&r);
          pcgc_graph_free(g);
          return vc;
        }
      }
    } else {
      st = pcgc_strategy_file_write(output, r.graph, &r.mapping, &info, &err);
    }
    pcgc_derivation_free(&d);
    if (st != PCGC_OK) {
      fprintf(stderr, "pcgc compile: ");
      pcgc_error_print(stderr, &err);
    } else {
      printf("wrote %s\n", output);
    }
  }
  pcgc_program_free(prog);
  pcgc_sim_result_destroy(&pr);
  pcgc_compile_result_destroy(&r);
  pcgc_graph_free(g);
  return pcgc_cli_exit_code(st);
}
