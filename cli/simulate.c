/*
 * simulate.c — `pcgc simulate MODEL --machine M [--strategy S] ...`: one
 * training iteration of a baseline strategy, simulated (search/search.h,
 * pcgc_simulate_strategy does the work and prints the report); or, when
 * MODEL is a strategy file written by `pcgc compile -o` (a .json file, or
 * one starting with '{' that says "pcgc-strategy"), its parallel graph with
 * its own views.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "codegen.h"
#include "search.h"

void pcgc_cli_simulate_help(FILE *f) {
  fprintf(f,
          "usage: pcgc simulate MODEL --machine M [--strategy S] [--devices N] [--optimizer O]\n"
          "                     [--schedule gpipe|1f1b] [--no-overlap] [--recompute] [--zero|--zero2|--zero3] [--trace FILE] [--profile DB] [--batch B] [--set NAME=VALUE]...\n"
          "       pcgc simulate STRATEGY.json --machine M [--optimizer O] [--schedule S] [--no-overlap] [--recompute]\n"
          "                     [--zero|--zero2|--zero3] [--trace FILE] [--estimate-trace FILE] [--profile DB]\n"
          "\n"
          "Simulates one training iteration of MODEL parallelised by a baseline strategy on machine M\n"
          "(a preset name or a .machine file) and prints the iteration time, compute and idle time per\n"
          "device, bytes moved within and between nodes, memory per device against capacity, the\n"
          "number of tasks and how long the simulation took. Given a strategy file written by\n"
          "`pcgc compile -o` (docs/plan-format.md), simulates its parallel graph with its views.\n"
          "\n"
          "options:\n"
          "  --machine M        machine preset (machines/) or file; required\n"
          "  --strategy S       sequential | data-parallel (default data-parallel)\n"
          "  --devices N        devices to use (default: all of the machine's)\n"
          "  --optimizer O      sgd | momentum | adam (default adam; for a plan, the one pcgc compile\n"
          "                     chose): optimizer state and update cost\n"
          "  --schedule S       gpipe | 1f1b: micro-batch order of a pipelined model (default gpipe;\n"
          "                     for a strategy file, the schedule pcgc compile chose)\n"
          "  --no-overlap       communication does not overlap computation\n"
          "  --recompute        recompute activations between bottleneck tensors in backward instead\n"
          "                     of keeping them (a strategy file compiled that way does so anyway)\n"
          "  --zero             shard the optimizer state over the devices that keep a weight whole\n"
          "                     (ZeRO-1: they reduce-scatter its gradient, each updates 1/n of it,\n"
          "                     then they all-gather it; a strategy file compiled that way does so\n"
          "                     anyway)\n"
          "  --zero2            ZeRO-2: the gradients as well where a step has one micro-batch (each\n"
          "                     keeps its 1/n, a full gradient lives only while it is reduced)\n"
          "  --zero3            ZeRO-3: the weights as well (each keeps its 1/n and all-gathers a\n"
          "                     weight before its first use in forward and again in backward)\n"
          "  --trace FILE       write a Chrome trace of every task (chrome://tracing, ui.perfetto.dev);\n"
          "                     for a strategy file, of the program pcgc run executes\n"
          "  --estimate-trace FILE\n"
          "                     for a strategy file: also write the search's estimate as a Chrome trace,\n"
          "                     to set beside the program's (where the two disagree, and why)\n"
          "  --batch B          batch size (`const B`, or an ONNX model's symbolic batch dim)\n"
          "  --set NAME=VALUE   override a `const` of the model; repeatable\n"
          PCGC_CLI_LOSS_HELP
          "  -h, --help         show this help\n");
}

/* A strategy file: its graph with its views. */
/* schedule_given: --schedule was on the command line; otherwise the file's
 * schedule (the one compile chose) applies. */
static int simulate_file(const char *path, const char *machine, const char *profile, bool schedule_given,
                         bool optimizer_given, const char *estimate_trace, pcgc_sim_options *o) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_machine m;
  pcgc_profile *p = NULL;
  pcgc_graph *g = NULL;
  pcgc_mapping mp = {0};
  pcgc_strategy_info info;
  pcgc_status st = pcgc_machine_load(machine, &m, &err);
  /* a plan may be simulated on another machine (what if?) with at least its devices */
  int D = pcgc_machine_num_devices(&m);
  if (st == PCGC_OK) st = pcgc_strategy_file_load(path, 0, &g, &mp, &info, &err);
  /* a version 1 file records no device count: its machine's (the one given here), as pcgc run
   * has it (its views' largest start, taken before, lowered a file whose views all start at
   * device 0 on one device) */
  int used = info.devices;
  if (st == PCGC_OK && used > D)
    st = pcgc_error_set(&err, PCGC_ERR_INVALID, "%s uses %d devices, but machine '%s' has %d", path, used, m.name, D);
  if (st == PCGC_OK) {
    if (strcmp(info.machine, m.name) != 0)
      fprintf(stderr, "pcgc simulate: warning: %s was compiled for '%s', not '%s'\n", path, info.machine, m.name);
    pcgc_machine_set_precision(&m, info.precision); /* the plan's GEMM arithmetic */
    /* a profile is carried to the plan's device at the plan's precision */
    if (profile && (st = pcgc_cli_load_profile("simulate", profile, &m, &p, &err)) == PCGC_OK) o->profile = p;
  }
  if (st == PCGC_OK) {
    pcgc_sim_result r;
    if (info.has_choice && !schedule_given) o->schedule = info.choice.schedule;
    if (info.has_optimizer && !optimizer_given) o->optimizer = info.optimizer; /* the one compile costed */
    if (info.has_choice && info.choice.recompute) o->recompute = true;
    if (info.has_choice && info.choice.zero > o->zero) o->zero = info.choice.zero;
    o->bf16 = info.precision == PCGC_PREC_BF16; /* activations stored in bf16 */
    /* the search's estimate; the trace draws the program (below) unless it cannot be lowered */
    pcgc_sim_options est = *o;
    est.trace_path = estimate_trace;
    st = pcgc_simulate(g, &mp, &m, &est, &r, &err);
    /* the prediction: the program pcgc run executes, simulated stream by stream */
    pcgc_sim_result pr;
    memset(&pr, 0, sizeof pr);
    pcgc_program *prog = NULL;
    pcgc_error cerr;
    pcgc_error_clear(&cerr);
    bool lowered = false;
    if (st == PCGC_OK) {
      pcgc_codegen_options co;
      pcgc_codegen_options_default(&co);
      co.optimizer = o->optimizer;
      co.schedule = o->schedule;
      co.recompute = o->recompute;
      co.zero = o->zero;
      co.bf16 = o->bf16;
      /* as pcgc run lowers it: by the plan's device kind, else the machine's */
      co.save_for_backward = (info.has_device_kind ? info.device_kind : m.device.kind) == PCGC_DEVICE_CPU;
      lowered = pcgc_cli_lower_plan(&info, g, &mp, used > 0 ? used : D, &co, &m, o, &prog, &cerr) == PCGC_OK;
      /* a program that lowers but does not simulate (a deadlock, a trace not written) is an error */
      if (lowered) st = pcgc_program_simulate(prog, g, &m, o, &pr, &err);
      else if (o->trace_path) { /* no program: trace the estimate instead */
        pcgc_sim_result_destroy(&r);
        st = pcgc_simulate(g, &mp, &m, o, &r, &err);
      }
    }
    if (st == PCGC_OK) {
      char title[512], ch[128] = "", a[32], b[32];
      if (info.has_choice) pcgc_cli_format_choice(ch, sizeof ch, info.choice);
      snprintf(title, sizeof title, "%s: strategy %s%s%s%s", g->name ? g->name : "model", path, ch[0] ? " (" : "", ch,
               ch[0] ? ")" : "");
      pcgc_sim_report(stdout, lowered ? &pr : &r, &m, title);
      if (lowered)
        printf("  program        what pcgc run executes, simulated instruction by instruction; the search's task-graph "
               "estimate is %s (%+.1f%%), its memory %s\n", pcgc_cli_fmt_time(a, sizeof a, r.iteration_time),
               pr.iteration_time > 0 ? 100 * (r.iteration_time - pr.iteration_time) / pr.iteration_time : 0.0,
               pcgc_cli_fmt_bytes(b, sizeof b, pcgc_sim_result_max_memory(&r)));
      else
        printf("  program        cannot be lowered, so this is the search's task-graph estimate: %s\n", cerr.message);
      double now_s = lowered ? pr.iteration_time : r.iteration_time;
      if (info.has_predicted)
        printf("  predicted      %.6g s by pcgc compile, %.6g s now%s\n", info.iteration_s, now_s,
               fabs(now_s - info.iteration_s) <= 1e-9 * info.iteration_s ? "" : " (they differ: another "
               "machine, options or pcgc version?)");
    }
    pcgc_program_free(prog);
    pcgc_sim_result_destroy(&pr);
    pcgc_sim_result_destroy(&r);
  }
  if (st != PCGC_OK) pcgc_error_print(stderr, &err);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
  pcgc_profile_free(p);
  return pcgc_cli_exit_code(st);
}

int pcgc_cli_simulate(int argc, char **argv) {
  const char *model = NULL, *machine = NULL, *profile = NULL, *strategy = "data-parallel", *estimate_trace = NULL;
  pcgc_cli_sets sets = {0};
  int loss = -1; /* --loss: an op kind */
  int devices = 0;
  long long batch = 0;
  pcgc_sim_options o;
  pcgc_sim_options_default(&o);
  bool schedule_given = false, optimizer_given = false;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int k;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      pcgc_cli_simulate_help(stdout);
      return EXIT_OK;
    } else if (strcmp(a, "--no-overlap") == 0) {
      o.overlap = false;
    } else if (strcmp(a, "--recompute") == 0) {
      o.recompute = true;
    } else if (strcmp(a, "--zero") == 0) {
      if (o.zero < 1) o.zero = 1;
    } else if (strcmp(a, "--zero2") == 0) {
      if (o.zero < 2) o.zero = 2;
    } else if (strcmp(a, "--zero3") == 0) {
      o.zero = 3;
    } else if (a[0] == '-' && a[1] && !v) {
      return pcgc_cli_usage_error("simulate", "%s needs a value", a);
    } else if (strcmp(a, "--machine") == 0) {
      machine = argv[++i];
    } else if (strcmp(a, "--strategy") == 0) {
      strategy = argv[++i];
    } else if (strcmp(a, "--trace") == 0) {
      o.trace_path = argv[++i];
    } else if (strcmp(a, "--estimate-trace") == 0) {
      estimate_trace = argv[++i];
    } else if (strcmp(a, "--profile") == 0) {
      profile = argv[++i];
    } else if (strcmp(a, "--devices") == 0 || strcmp(a, "--batch") == 0) {
      char *end;
      long long x = strtoll(argv[++i], &end, 10);
      if (!*argv[i] || *end || x < 1 || x > 1000000000LL)
        return pcgc_cli_usage_error("simulate", "expected a positive integer, not '%s'", argv[i]);
      if (a[2] == 'd') devices = (int)x;
      else batch = x;
    } else if (strcmp(a, "--optimizer") == 0) {
      if ((k = pcgc_optimizer_from_name(argv[++i])) < 0)
        return pcgc_cli_usage_error("simulate", "unknown optimizer '%s' (sgd, momentum, adam)", argv[i]);
      o.optimizer = (pcgc_optim_kind)k;
      optimizer_given = true;
    } else if (strcmp(a, "--schedule") == 0) {
      if ((k = pcgc_schedule_from_name(argv[++i])) < 0)
        return pcgc_cli_usage_error("simulate", "unknown schedule '%s' (gpipe, 1f1b)", argv[i]);
      o.schedule = (pcgc_schedule)k;
      schedule_given = true;
    } else if (strcmp(a, "--loss") == 0) {
      int r = pcgc_cli_loss_kind("simulate", argv[++i], &loss);
      if (r >= 0) return r;
    } else if (strcmp(a, "--set") == 0) {
      int r = pcgc_cli_add_set("simulate", argv[++i], &sets);
      if (r >= 0) return r;
    } else if (a[0] == '-' && a[1]) {
      return pcgc_cli_usage_error("simulate", "unknown option '%s'", a);
    } else if (!model) {
      model = a;
    } else {
      return pcgc_cli_usage_error("simulate", "unexpected argument '%s' (one MODEL only)", a);
    }
  }
  if (!model) return pcgc_cli_usage_error("simulate", "missing MODEL%s", "");
  if (!machine) return pcgc_cli_usage_error("simulate", "missing --machine M (a preset such as dgx-h100, or a file)%s", "");
  if (pcgc_strategy_file_detect(model)) {
    if (sets.n || batch || devices || loss >= 0 || strcmp(strategy, "data-parallel") != 0)
      return pcgc_cli_usage_error("simulate", "--strategy, --devices, --batch, --set and --loss apply to models, not "
                                              "to strategy files like '%s'", model);
    return simulate_file(model, machine, profile, schedule_given, optimizer_given, estimate_trace, &o);
  }
  if (estimate_trace)
    return pcgc_cli_usage_error("simulate", "--estimate-trace applies to strategy files; for a model, --trace is "
                                            "the estimate's trace%s", "");
  int code = EXIT_OK;
  pcgc_graph *g = pcgc_cli_load(model, sets.n, sets.names, sets.values, batch, loss, &code);
  if (!g) return code;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_machine m;
  pcgc_profile *p = NULL;
  pcgc_status st = pcgc_machine_load(machine, &m, &err);
  if (st == PCGC_OK && profile && (st = pcgc_cli_load_profile("simulate", profile, &m, &p, &err)) == PCGC_OK)
    o.profile = p;
  if (st == PCGC_OK) st = pcgc_simulate_strategy(g, strategy, &m, devices, &o, stdout, &err);
  if (st != PCGC_OK) pcgc_error_print(stderr, &err);
  pcgc_profile_free(p);
  pcgc_graph_free(g);
  return pcgc_cli_exit_code(st);
}
