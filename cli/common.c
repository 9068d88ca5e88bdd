/*
 * common.c — what the commands of `pcgc` share (cli.h): usage errors and
 * exit codes, --set and --loss, loading a model file or an ONNX file, and
 * the formats of times, sizes and strategy choices in their reports, the
 * profile databases they read, and starting this binary's ranks under mpirun.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "codegen.h"
#include "onnx_import.h"

static const char *prog = "pcgc";

int pcgc_cli_usage_error(const char *cmd, const char *fmt, const char *arg) {
  fprintf(stderr, "%s%s%s: error: ", prog, cmd ? " " : "", cmd ? cmd : "");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nhint: run '%s %s%s--help' for usage\n", prog, cmd ? cmd : "", cmd ? " " : "");
  return EXIT_USAGE;
}

int pcgc_cli_add_set(const char *cmd, const char *kv, pcgc_cli_sets *s) {
  const char *eq = strchr(kv, '=');
  if (!eq || eq == kv || !eq[1]) return pcgc_cli_usage_error(cmd, "--set expects NAME=VALUE, got '%s'", kv);
  if (s->n >= PCGC_CLI_MAX_SETS) return pcgc_cli_usage_error(cmd, "too many --set options (at most 64)%s", "");
  size_t nl = (size_t)(eq - kv);
  if (nl >= sizeof s->buf[0]) return pcgc_cli_usage_error(cmd, "--set name too long: '%s'", kv);
  memcpy(s->buf[s->n], kv, nl);
  s->buf[s->n][nl] = '\0';
  s->names[s->n] = s->buf[s->n];
  s->values[s->n] = eq + 1;
  s->n++;
  return -1;
}

int pcgc_cli_exit_code(pcgc_status s) {
  switch (s) {
  case PCGC_OK: return EXIT_OK;
  case PCGC_ERR_IO: return EXIT_IO;
  case PCGC_ERR_NOMEM: return EXIT_INTERNAL;
  default: return EXIT_INVALID;
  }
}

void pcgc_cli_format_choice(char *b, size_t n, pcgc_expert_choice c) {
  snprintf(b, n, "dp %d x tp %d x pp %d, %d micro-batch%s%s%s%s", c.dp, c.tp, c.pp, c.micro, c.micro == 1 ? "" : "es",
           c.schedule == PCGC_SCHEDULE_1F1B ? " in 1F1B order" : "", c.recompute ? ", activations recomputed" : "",
           !c.zero                           ? ""
           : c.zero >= 3 && c.micro == 1     ? ", weights, gradients and optimizer state sharded (ZeRO-3)"
           : c.zero >= 2 && c.micro == 1     ? ", optimizer state and gradients sharded (ZeRO-2)"
                                             : ", optimizer state sharded (ZeRO-1)");
}

int pcgc_cli_loss_kind(const char *cmd, const char *name, int *kind) {
  int k = pcgc_op_from_name(name);
  if (k != PCGC_OP_SOFTMAX_CROSS_ENTROPY && k != PCGC_OP_MSE)
    return pcgc_cli_usage_error(cmd, "--loss must be softmax_cross_entropy or mse, not '%s'", name);
  *kind = k;
  return -1;
}

/* --loss: the loss put on the model's output; EXIT_OK or the printed error's code. */
static int add_loss(pcgc_graph *g, int kind) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_status st = pcgc_graph_add_loss(g, (pcgc_op_kind)kind, &err);
  if (st == PCGC_OK) return EXIT_OK;
  fprintf(stderr, "pcgc: ");
  pcgc_error_print(stderr, &err);
  return pcgc_cli_exit_code(st);
}

pcgc_graph *pcgc_cli_load(const char *path, int n_set, const char *const *names, const char *const *values,
                          int64_t batch, int loss, int *code) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_graph *g;
  if (pcgc_onnx_is_onnx_path(path)) {
    if (n_set > 0) {
      fprintf(stderr, "pcgc: error: --set applies to model files; an ONNX model takes only --batch\n");
      *code = EXIT_USAGE;
      return NULL;
    }
    pcgc_onnx_options oo = {batch};
    g = pcgc_onnx_load(path, &oo, &err);
  } else {
    const char *nm[66], *vl[66];
    char bbuf[32];
    int n = 0;
    for (; n < n_set && n < 64; n++) {
      nm[n] = names[n];
      vl[n] = values[n];
    }
    if (batch > 0) {
      snprintf(bbuf, sizeof bbuf, "%lld", (long long)batch);
      nm[n] = "B";
      vl[n++] = bbuf;
    }
    pcgc_model_options mo = {n, nm, vl};
    g = pcgc_model_load(path, &mo, &err);
  }
  if (!g) {
    pcgc_error_print(stderr, &err);
    *code = pcgc_cli_exit_code(err.status ? err.status : PCGC_ERR_INVALID);
    return NULL;
  }
  if (pcgc_graph_validate(g, &err) != PCGC_OK) {
    pcgc_error_print(stderr, &err);
    pcgc_graph_free(g);
    *code = EXIT_INVALID;
    return NULL;
  }
  if (loss >= 0 && (*code = add_loss(g, loss)) != EXIT_OK) {
    pcgc_graph_free(g);
    return NULL;
  }
  return g;
}

/* "12.3 ms" with four significant digits. */
const char *pcgc_cli_fmt_time(char *b, size_t n, double s) {
  const char *u[] = {"s", "ms", "us", "ns"};
  int i = 0;
  while (i < 3 && s != 0 && s < 1) {
    s *= 1000;
    i++;
  }
  snprintf(b, n, "%.4g %s", s, u[i]);
  return b;
}

const char *pcgc_cli_fmt_bytes(char *b, size_t n, double x) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (i < 4 && x >= 1024) {
    x /= 1024;
    i++;
  }
  snprintf(b, n, "%.3g %s", x, u[i]);
  return b;
}

/* Loads --profile DB and says on stderr how its times reach m's device; a
 * link measured among m's devices per node is applied to m
 * (pcgc_profile_apply_link). */
pcgc_status pcgc_cli_load_profile(const char *cmd, const char *profile, pcgc_machine *m, pcgc_profile **p,
                                  pcgc_error *err) {
  pcgc_status st = pcgc_profile_load(profile, p, err);
  if (st != PCGC_OK) return st;
  pcgc_link was = m->intra;
  const pcgc_profile_link *l = pcgc_profile_apply_link(*p, m);
  if (l) {
    fprintf(stderr, "pcgc %s: note: %s measured the all-reduces of %d processes: they take the measured times, "
                    "messages a link of %.3g GB/s and %.3g us fitted to the measured ones (%s's file says %.3g GB/s, "
                    "%.3g us)\n",
            cmd, profile, l->devices, l->link.bandwidth / 1e9, l->link.latency * 1e6, m->name, was.bandwidth / 1e9,
            was.latency * 1e6);
  } else if (pcgc_profile_n_links(*p) && m->nodes == 1) {
    fprintf(stderr, "pcgc %s: note: %s measured links among", cmd, profile);
    for (int i = 0; i < pcgc_profile_n_links(*p); i++)
      fprintf(stderr, "%s %d", i ? "," : "", pcgc_profile_link_at(*p, i)->devices);
    fprintf(stderr, " processes, not %s's %d: the machine file's link is used\n", m->name, m->devices_per_node);
  }
  const pcgc_profile_device *d = pcgc_profile_device_of(*p);
  const pcgc_device *t = &m->device;
  if (!d) {
    if (pcgc_profile_size(*p) && strcmp(pcgc_profile_machine(*p), m->name) != 0)
      fprintf(stderr, "pcgc %s: warning: %s was measured on '%s', not '%s', and does not say as what device: its "
                      "times are used as measured\n", cmd, profile, pcgc_profile_machine(*p), m->name);
  } else if (d->kind != t->kind) {
    fprintf(stderr, "pcgc %s: warning: %s was measured on a %s ('%s'); its times are carried to '%s''s %s by peak "
                    "rates alone, a rough estimate\n", cmd, profile, d->kind == PCGC_DEVICE_CPU ? "CPU" : "GPU",
            pcgc_profile_machine(*p), m->name, t->kind == PCGC_DEVICE_CPU ? "CPU" : "GPU");
  } else if (d->flops[PCGC_F32] != t->flops[PCGC_F32] || d->memory_bandwidth != t->memory_bandwidth ||
             (t->kind == PCGC_DEVICE_CPU && d->threads > 1)) {
    fprintf(stderr, "pcgc %s: note: %s was measured as %.3g GFLOP/s f32, %.3g GB/s (%d thread%s of %d cores of "
                    "'%s'); times carried to '%s''s device, %.3g GFLOP/s, %.3g GB/s (no kernel faster than measured)\n",
            cmd, profile, d->flops[PCGC_F32] / 1e9, d->memory_bandwidth / 1e9, d->threads, d->threads == 1 ? "" : "s", d->cores,
            pcgc_profile_machine(*p), m->name, t->flops[PCGC_F32] / 1e9, t->memory_bandwidth / 1e9);
  }
  return PCGC_OK;
}

const char *pcgc_cli_mpirun_path(void) {
  const char *mpirun = getenv("PCGC_MPIRUN");
  return mpirun && *mpirun ? mpirun : PCGC_MPIRUN;
}

void pcgc_cli_exec_mpirun(const char *cmd, int n, const char *sub, int argc, char **argv) {
  const char *mpirun = pcgc_cli_mpirun_path();
  if (!*mpirun) {
    fprintf(stderr, "pcgc %s: error: mpirun was not found at build time\n"
                    "  hint: apt-get install openmpi-bin, or start the processes yourself: mpirun -np %d pcgc %s ...\n",
            cmd, n, sub);
    return;
  }
  char np[16], self[4096];
  snprintf(np, sizeof np, "%d", n);
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k <= 0) {
    fprintf(stderr, "pcgc %s: error: cannot find its own executable (/proc/self/exe)\n", cmd);
    return;
  }
  self[k] = 0;
  char **av = calloc((size_t)argc + 12, sizeof *av);
  if (!av) return;
  int j = 0;
  av[j++] = (char *)mpirun;
  av[j++] = "-np";
  av[j++] = np;
  av[j++] = "--bind-to";
  av[j++] = "none";
  av[j++] = self;
  av[j++] = (char *)sub;
  for (int i = 0; i < argc; i++) av[j++] = argv[i];
  av[j] = NULL;
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  /* more ranks than cores: a rank waiting for a message yields its core to one that computes */
  if (n > sysconf(_SC_NPROCESSORS_ONLN)) setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  setenv("PCGC_LAUNCHED", "1", 1);
  fflush(stdout);
  fflush(stderr);
  execvp(mpirun, av);
  fprintf(stderr, "pcgc %s: error: cannot start %s\n", cmd, mpirun);
  free(av);
}

bool pcgc_cli_better_program(const pcgc_sim_result *a, const pcgc_sim_result *b) {
  return a->oom_devices < b->oom_devices || (a->oom_devices == b->oom_devices && a->iteration_time < b->iteration_time);
}

static int64_t instructions_of(const pcgc_program *p) {
  int64_t n = 0;
  for (int d = 0; d < p->n_devices; d++) n += p->dev[d].n_ins;
  return n;
}

pcgc_status pcgc_cli_lower_plan(const pcgc_strategy_info *info, const pcgc_graph *g, const pcgc_mapping *mp, int D,
                                const pcgc_codegen_options *co, const pcgc_machine *m, const pcgc_sim_options *so,
                                pcgc_program **prog, pcgc_error *err) {
  pcgc_codegen_options c = *co;
  bool pick = !info->has_program && m;
  c.order = info->has_program ? info->program_order : 0;
  pcgc_status st = pcgc_codegen(g, mp, D, &c, prog, err);
  if (st != PCGC_OK || !pick || instructions_of(*prog) > PCGC_CLI_LOWER_TWICE_MAX_INSTRUCTIONS) return st;
  pcgc_sim_options o = *so;
  o.trace_path = NULL;
  pcgc_sim_result r0, r1;
  memset(&r0, 0, sizeof r0);
  memset(&r1, 0, sizeof r1);
  pcgc_program *p1 = NULL;
  pcgc_error e;
  pcgc_error_clear(&e);
  c.order = 1;
  if (pcgc_program_simulate(*prog, g, m, &o, &r0, &e) == PCGC_OK && pcgc_codegen(g, mp, D, &c, &p1, &e) == PCGC_OK &&
      pcgc_program_simulate(p1, g, m, &o, &r1, &e) == PCGC_OK && pcgc_cli_better_program(&r1, &r0)) {
    pcgc_program *t = *prog;
    *prog = p1;
    p1 = t;
  }
  pcgc_program_free(p1);
  pcgc_sim_result_destroy(&r0);
  pcgc_sim_result_destroy(&r1);
  return PCGC_OK;
}
