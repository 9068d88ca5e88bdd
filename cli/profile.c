/*
 * profile.c — `pcgc profile MODEL --machine M -o DB`: measures the CPU
 * backend's kernels (runtime/cpu, f32, one BLAS thread) for every distinct
 * (op, attributes, input shapes) of MODEL and writes a profile database
 * (search/search.h, pcgc_profile_write) that `pcgc simulate --profile DB`
 * uses in place of the roofline.
 *
 * Per distinct kernel (cli/profile_kernels.c times it): buffers of the input
 * and output shapes filled with seeded synthetic data (as the reference
 * trainer draws it), a warm-up call, then N timed calls of forward and N of
 * backward; the database keeps the median of each. Backward is timed together with zeroing the gradients it
 * accumulates into (the kernels add into din, so every caller zeroes them
 * first; the reference trainer does it per step) and computes only the input
 * gradients the model needs (data inputs get none), or with --all-gradients
 * every float input's, as the reference interpreter does. Every weight shape
 * also gets the time of one optimizer update, for each of sgd, momentum and
 * adam (op "weight", attrs "optimizer=NAME"). The
 * measuring lives here, not in search/, so that the search library stays
 * free of runtime dependencies.
 *
 * For a GPU machine M the kernels run on this host's GPU (the CUDA backend,
 * device 0) and the database records one of M's GPUs as the device.
 * For a CPU machine it records what the kernels ran as (pcgc_profile_thread_device):
 * --machine M describes this host, its devices sharing the host's cores, so
 * `threads` BLAS threads (1 by default) had M's per-node rates × threads /
 * cores. The simulator carries the times from that device to the one it
 * simulates. --append adds to an existing database of the same device
 * (another batch size, another model), measuring only what it lacks.
 *
 * --copies N measures as the N processes of a run on this host compute: N - 1
 * forked copies measure the same kernels in the same order, as load, for as
 * long as the measurement lasts, so the times include the contention for
 * memory bandwidth and caches. With more processes than cores they also
 * take turns on the cores: the device recorded is then one process's share,
 * threads / (N x threads) of the node, and a kernel's time is the mean of its
 * calls, not the median. A median is a call that kept its core: the CNN's
 * kernels are shorter than the scheduler's slices, and medians with the
 * share predicted its data-parallel step on 4 processes at 22.0 ms against
 * 48.9 measured, while the transformer block's (longer than a slice) were
 * right; the mean counts the calls that waited, as the run's wall time does.
 *
 * --links N (cli/profile_links.c) also times the all-reduces of N MPI
 * processes of this host and records them with the link fitted to them
 * (cost.h, pcgc_profile_link); without MODEL, only that.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "cli.h"
#include "search.h"

void pcgc_cli_profile_help(FILE *f) {
  fprintf(f,
          "usage: pcgc profile MODEL --machine M -o DB [--append] [--repeat N] [--rounds R] [--threads N] [--cores N]\n"
          "                    [--copies N] [--links N] [--no-dropout] [--all-gradients] [--precision P] [--batch B]\n"
          "                    [--set NAME=VALUE]...\n"
          "       pcgc profile --links N --machine M -o DB [--append]\n"
          "\n"
          "Measures the local CPU backend's kernels (f32, one BLAS thread) for every distinct\n"
          "operator, attributes and input shapes MODEL needs: a warm-up call, then the median of N\n"
          "calls, forward and backward. Writes the profile database DB (JSON, atomically) that\n"
          "`pcgc simulate --profile DB` uses in place of the roofline estimate, with the device the\n"
          "kernels ran as: M's per-node rates x threads / cores (M describes this host), from which\n"
          "the simulator carries the times to the device it simulates. For a GPU machine the\n"
          "kernels run on this host's GPU (CUDA backend) and the device is one of M's GPUs.\n"
          "\n"
          "options:\n"
          "  --machine M        the machine this host is (preset or file); required\n"
          "  -o, --output DB    database file to write; required\n"
          "  --append           keep DB's entries (it must be for the same device) and measure only\n"
          "                     the kernels it lacks: profiles of several batch sizes in one file\n"
          "  --repeat N         timed calls per kernel (default 10); the median is kept\n"
          "  --rounds R         measure every kernel in R passes over the model and keep its fastest\n"
          "                     median (default 1): a pass slowed by other load does not count\n"
          "  --threads N        BLAS threads (default 1)\n"
          "  --cores N          cores of this host that M's devices share (default: the online CPUs)\n"
          "  --copies N         measure while N - 1 copies of this measurement run beside it, as the\n"
          "                     N processes of `pcgc run` on this host do (CPU machines; default 1):\n"
          "                     the times include their contention for memory bandwidth and caches;\n"
          "                     with more processes than cores the device recorded is one process's\n"
          "                     share of the host and each time the mean of its calls\n"
          "  --links N          also time the all-reduces and messages of N processes of this host\n"
          "                     as `pcgc run`'s ranks do them over MPI (8 B to 16 MiB): `--profile DB`\n"
          "                     on a one-node machine of N devices (cpu-N) then times all-reduces over\n"
          "                     all of them as measured, and messages and smaller groups by a link\n"
          "                     fitted to the measured messages. Without MODEL, only this (CPU\n"
          "                     machines; 2 <= N <= 256; stopped after 120 s, or PCGC_LINKS_TIMEOUT\n"
          "                     seconds)\n"
          "  --no-dropout       time dropout as at inference (as `pcgc train --no-dropout`)\n"
          "  --all-gradients    backward computes the gradient of every float input, data inputs\n"
          "                     included, as the reference trainer does (default: only what\n"
          "                     training needs: weights and what depends on them)\n"
          "  --precision P      f32 | tf32 | bf16 (GPU machines; default f32): the arithmetic of\n"
          "                     GEMMs and convolutions, as `pcgc compile --precision`; the device is\n"
          "                     recorded at that precision's rates, so a plan compiled with the same\n"
          "                     precision takes the measured times as they are\n"
          "  --batch B          batch size (`const B`, or an ONNX model's symbolic batch dim)\n"
          "  --set NAME=VALUE   override a `const` of the model; repeatable\n"
          "  -h, --help         show this help\n");
}

static pcgc_status profile_graph(const pcgc_graph *g, pcgc_profile *p, bool training, bool all_grads, int repeat,
                                 pcgc_backend *be, pcgc_error *err) {
  int *order = malloc((size_t)g->n_nodes * sizeof *order);
  bool *grad = calloc((size_t)g->n_nodes, sizeof *grad);
  pcgc_status st = order && grad ? pcgc_graph_topo_order(g, order, err)
                                 : pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  int measured = 0, reused = 0, updates = 0;
  for (int k = 0; k < g->n_nodes && st == PCGC_OK; k++) {
    const pcgc_node *n = &g->nodes[order[k]];
    pcgc_op_class cls = pcgc_op_class_of(n->kind);
    bool flt = false, any = false;
    for (int j = 0; j < n->n_out; j++) flt |= pcgc_dtype_is_float(n->out[j].dtype);
    for (int i = 0; i < n->n_in; i++) any |= grad[n->in[i].node];
    if (cls == PCGC_CLASS_SOURCE) grad[n->id] = (all_grads || n->kind == PCGC_OP_WEIGHT) && flt;
    else grad[n->id] = any && flt;
    pcgc_profile_entry e;
    if (n->kind == PCGC_OP_WEIGHT && flt) {
      for (int o = PCGC_OPTIM_SGD; o <= PCGC_OPTIM_ADAM && st == PCGC_OK; o++) {
        pcgc_profile_update_key((pcgc_optim_kind)o, &n->out[0], &e);
        if (pcgc_profile_find(p, &e)) continue;
        if ((st = pcgc__cli_profile_update(&n->out[0], o, repeat, be, &e.fwd, err)) != PCGC_OK) break;
        if ((st = pcgc_profile_add(p, &e, err)) != PCGC_OK) break;
        updates++;
      }
      continue;
    }
    if (cls != PCGC_CLASS_COMPUTE && cls != PCGC_CLASS_LOSS) continue;
    if ((st = pcgc_profile_key(g, n->id, &e, err)) != PCGC_OK) break;
    if (pcgc_profile_find(p, &e)) {
      reused++;
      continue;
    }
    if ((st = pcgc__cli_profile_measure(g, n->id, grad, training, repeat, be, &e.fwd, &e.bwd, err)) != PCGC_OK) break;
    if ((st = pcgc_profile_add(p, &e, err)) != PCGC_OK) break;
    measured++;
    printf("%-22s %-24s fwd %10.3f us  bwd %10.3f us\n", pcgc_op_name(n->kind), n->name, e.fwd * 1e6, e.bwd * 1e6);
  }
  if (st == PCGC_OK)
    printf("%d kernels and %d optimizer updates measured (sgd, momentum, adam per weight shape; %d nodes share a measured kernel), median of %d calls\n",
           measured, updates, reused, repeat);
  free(order);
  free(grad);
  return st;
}

/* One pass over g measuring what p's first `kept` entries (those --append
 * kept) lack, into a scratch profile; each time measured goes into p, or
 * lowers p's time of the same kernel (from an earlier round): a round slowed
 * by other load on the machine does not count. */
static pcgc_status measure_round(const pcgc_graph *g, const pcgc_machine *m, pcgc_profile *p, int kept, bool training,
                                 bool all_grads, int repeat, pcgc_backend *be, pcgc_error *err) {
  pcgc_profile *q = pcgc_profile_new(m->name);
  if (!q) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  pcgc_status st = PCGC_OK;
  for (int i = 0; i < kept && st == PCGC_OK; i++) st = pcgc_profile_add(q, pcgc_profile_entry_at(p, i), err);
  if (st == PCGC_OK) st = profile_graph(g, q, training, all_grads, repeat, be, err);
  for (int i = kept; i < pcgc_profile_size(q) && st == PCGC_OK; i++) {
    pcgc_profile_entry e = *pcgc_profile_entry_at(q, i);
    const pcgc_profile_entry *old = pcgc_profile_find(p, &e);
    if (old && old->fwd < e.fwd) e.fwd = old->fwd;
    if (old && old->bwd < e.bwd) e.bwd = old->bwd;
    st = pcgc_profile_add(p, &e, err);
  }
  pcgc_profile_free(q);
  return st;
}

/* --copies: n - 1 processes measuring the model over and over (their output
 * dropped) from the moment the caller starts measuring; stop_copies ends them. */
static pid_t *start_copies(int n, const pcgc_graph *g, const pcgc_machine *m, bool training, bool all_grads,
                           int repeat) {
  pid_t *pids = calloc((size_t)n, sizeof *pids), parent = getpid();
  int go[2];
  if (!pids || pipe(go) != 0) {
    free(pids);
    return NULL;
  }
  fflush(stdout);
  for (int i = 1; i < n; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      close(go[1]);
      prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the measurement */
      if (getppid() != parent) _exit(0);
      int null = open("/dev/null", O_WRONLY);
      if (null >= 0) dup2(null, 1);
      char b;
      while (read(go[0], &b, 1) < 0 && errno == EINTR) {
      }
      for (;;) {
        pcgc_error e;
        pcgc_error_clear(&e);
        pcgc_profile *q = pcgc_profile_new(m->name);
        if (!q || profile_graph(g, q, training, all_grads, repeat, NULL, &e) != PCGC_OK) _exit(1);
        pcgc_profile_free(q);
      }
    }
    pids[i] = pid; /* a failed fork leaves -1: fewer copies, said by the caller */
  }
  close(go[0]);
  close(go[1]); /* every copy starts now */
  return pids;
}

static int stop_copies(pid_t *pids, int n) {
  int ran = 0;
  for (int i = 1; pids && i < n; i++)
    if (pids[i] > 0) kill(pids[i], SIGTERM);
  for (int i = 1; pids && i < n; i++)
    if (pids[i] > 0) {
      int status;
      waitpid(pids[i], &status, 0);
      ran += WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM;
    }
  free(pids);
  return ran;
}

/* --append: DB's entries, when DB exists; it must be for the same device. */
static pcgc_status open_append(const char *path, const pcgc_machine *m, const pcgc_profile_device *dev, pcgc_profile **p,
                               pcgc_error *err) {
  if (access(path, F_OK) != 0 && errno == ENOENT) return PCGC_OK; /* a new database */
  pcgc_status st = pcgc_profile_load(path, p, err);
  if (st != PCGC_OK) return st;
  const pcgc_profile_device *d = pcgc_profile_device_of(*p);
  bool same = d && d->kind == dev->kind && d->threads == dev->threads && d->cores == dev->cores &&
              d->memory_bandwidth == dev->memory_bandwidth;
  for (int t = 0; same && t < PCGC_DTYPE_COUNT; t++) same = d->flops[t] == dev->flops[t];
  if (strcmp(pcgc_profile_machine(*p), m->name) == 0 && same) return PCGC_OK;
  pcgc_error_set(err, PCGC_ERR_INVALID, "--append: %s was measured on '%s'%s, not as this run would measure ('%s', %d of %d cores)",
                 path, pcgc_profile_machine(*p), d ? "" : " with no device record", m->name, dev->threads, dev->cores);
  pcgc_error_hint(err, "append with the machine, --threads and --cores the database was written with, or write a new one");
  pcgc_profile_free(*p);
  *p = NULL;
  return PCGC_ERR_INVALID;
}

/* --links N: measures and fits the link among N processes; says what it found. */
static pcgc_status measure_links(const pcgc_machine *m, int n, pcgc_profile *p, pcgc_error *err) {
  if (m->device.kind != PCGC_DEVICE_CPU)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "--links measures MPI among CPU processes; '%s' has GPUs", m->name);
  printf("measuring the all-reduces of %d processes of this host (8 B to 16 MiB)\n", n);
  pcgc_profile_link l;
  double worst = 0;
  pcgc_status st = pcgc__cli_measure_links(n, m, &l, &worst, err);
  if (st == PCGC_OK) st = pcgc_profile_add_link(p, &l, err);
  if (st != PCGC_OK) return st;
  char a[32], b[32], c[32], d[32], e[32];
  printf("  %-10s %-14s %-14s %-14s %-14s %s\n", "bytes", "all-reduce", "as the file", "message", "fitted link",
         "as the file");
  for (int i = 0; i < l.n_points; i++)
    printf("  %-10.0f %-14s %-14s %-14s %-14s %s\n", l.bytes[i], pcgc_cli_fmt_time(a, sizeof a, l.seconds[i]),
           pcgc_cli_fmt_time(b, sizeof b, pcgc_profile_link_time(m, &m->intra, n, l.bytes[i])),
           i < l.n_msg ? pcgc_cli_fmt_time(c, sizeof c, l.msg_seconds[i]) : "",
           i < l.n_msg ? pcgc_cli_fmt_time(d, sizeof d, l.link.latency + l.msg_bytes[i] / l.link.bandwidth) : "",
           i < l.n_msg ? pcgc_cli_fmt_time(e, sizeof e, pcgc_comm_p2p_time(m, true, 1, l.msg_bytes[i])) : "");
  printf("link among %d processes, fitted to the messages: %.3g GB/s, %.3g us%s, within %.0f%% (the machine file's: "
         "%.3g GB/s, %.3g us); all-reduces over all %d take the measured times\n",
         n, l.link.bandwidth / 1e9, l.link.latency * 1e6, l.link.shared ? ", shared" : "", 100 * worst,
         m->intra.bandwidth / 1e9, m->intra.latency * 1e6, n);
  return PCGC_OK;
}

/* pcgc profile --links N --machine M -o DB [--append], without a model. */
static int profile_links_only(const char *machine, const char *output, int n, bool append) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_machine m;
  pcgc_profile *p = NULL;
  pcgc_status st = pcgc_machine_load(machine, &m, &err);
  if (st == PCGC_OK && append && !(access(output, F_OK) != 0 && errno == ENOENT)) st = pcgc_profile_load(output, &p, &err);
  if (st == PCGC_OK && !p && !(p = pcgc_profile_new(m.name))) st = pcgc_error_set(&err, PCGC_ERR_NOMEM, "out of memory");
  if (st == PCGC_OK) st = measure_links(&m, n, p, &err);
  if (st == PCGC_OK) st = pcgc_profile_write(p, output, &err);
  if (st == PCGC_OK)
    printf("wrote %s (%d kernel entries, links of %d process count%s)\n", output, pcgc_profile_size(p),
           pcgc_profile_n_links(p), pcgc_profile_n_links(p) == 1 ? "" : "s");
  else pcgc_error_print(stderr, &err);
  pcgc_profile_free(p);
  return pcgc_cli_exit_code(st);
}

int pcgc_cli_profile(int argc, char **argv) {
  const char *model = NULL, *machine = NULL, *output = NULL;
  pcgc_precision precision = PCGC_PREC_F32;
  pcgc_cli_sets sets = {0};
  int repeat = 10, threads = 1, cores = 0, rounds = 1, copies = 1, links = 0;
  bool training = true, all_grads = false, append = false;
  long long batch = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      pcgc_cli_profile_help(stdout);
      return EXIT_OK;
    } else if (strcmp(a, "--no-dropout") == 0) {
      training = false;
    } else if (strcmp(a, "--all-gradients") == 0) {
      all_grads = true;
    } else if (strcmp(a, "--append") == 0) {
      append = true;
    } else if (a[0] == '-' && a[1] && !v) {
      return pcgc_cli_usage_error("profile", "%s needs a value", a);
    } else if (strcmp(a, "--links-rank") == 0 && getenv("PCGC_LAUNCHED")) { /* internal: one rank of --links */
      return pcgc__cli_links_rank(v);
    } else if (strcmp(a, "--machine") == 0) {
      machine = argv[++i];
    } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
      output = argv[++i];
    } else if (strcmp(a, "--repeat") == 0 || strcmp(a, "--batch") == 0 || strcmp(a, "--threads") == 0 ||
               strcmp(a, "--cores") == 0 || strcmp(a, "--rounds") == 0 || strcmp(a, "--copies") == 0 ||
               strcmp(a, "--links") == 0) {
      char *end;
      long long x = strtoll(argv[++i], &end, 10);
      if (!*argv[i] || *end || x < 1 || x > 1000000000LL)
        return pcgc_cli_usage_error("profile", "expected a positive integer, not '%s'", argv[i]);
      if (strcmp(a, "--links") == 0) {
        if (x < 2 || x > 256) return pcgc_cli_usage_error("profile", "--links takes 2 to 256 processes, not %s", argv[i]);
        links = (int)x;
      } else if (strcmp(a, "--copies") == 0) {
        if (x > 256) return pcgc_cli_usage_error("profile", "--copies takes at most 256, not %s", argv[i]);
        copies = (int)x;
      } else if (a[2] == 'r') {
        if (x > 100000)
          return pcgc_cli_usage_error("profile", "--repeat and --rounds take at most 100000, not %s", argv[i]);
        *(a[3] == 'e' ? &repeat : &rounds) = (int)x;
      } else if (a[2] == 't' || a[2] == 'c') {
        if (x > 65536) return pcgc_cli_usage_error("profile", "--threads and --cores take at most 65536, not %s", argv[i]);
        *(a[2] == 't' ? &threads : &cores) = (int)x;
      } else {
        batch = x;
      }
    } else if (strcmp(a, "--precision") == 0) {
      int k = pcgc_precision_from_name(argv[++i]);
      if (k < 0) return pcgc_cli_usage_error("profile", "unknown precision '%s' (f32, tf32, bf16)", argv[i]);
      precision = (pcgc_precision)k;
    } else if (strcmp(a, "--set") == 0) {
      int r = pcgc_cli_add_set("profile", argv[++i], &sets);
      if (r >= 0) return r;
    } else if (a[0] == '-' && a[1]) {
      return pcgc_cli_usage_error("profile", "unknown option '%s'", a);
    } else if (!model) {
      model = a;
    } else {
      return pcgc_cli_usage_error("profile", "unexpected argument '%s' (one MODEL only)", a);
    }
  }
  if (!model && !links) return pcgc_cli_usage_error("profile", "missing MODEL (or --links N alone)%s", "");
  if (!machine) return pcgc_cli_usage_error("profile", "missing --machine M (cpu-local, or a file)%s", "");
  if (!output) return pcgc_cli_usage_error("profile", "missing -o DB (the database file to write)%s", "");
  if (!model) return profile_links_only(machine, output, links, append);
  int code = EXIT_OK;
  pcgc_graph *g = pcgc_cli_load(model, sets.n, sets.names, sets.values, batch, -1, &code);
  if (!g) return code;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_machine m;
  pcgc_profile *p = NULL;
  pcgc_status st = pcgc_machine_load(machine, &m, &err);
  bool gpu = st == PCGC_OK && m.device.kind == PCGC_DEVICE_GPU;
  if (st == PCGC_OK && gpu && copies > 1) {
    pcgc_graph_free(g);
    return pcgc_cli_usage_error("profile", "--copies is for CPU machines (a GPU machine's kernels run on one GPU)%s",
                                "");
  }
  if (st == PCGC_OK && !gpu && precision != PCGC_PREC_F32) {
    pcgc_graph_free(g);
    return pcgc_cli_usage_error("profile", "--precision %s needs a GPU machine; CPU machines compute in f32",
                                pcgc_precision_name(precision));
  }
  pcgc_backend be;
  memset(&be, 0, sizeof be);
  if (gpu && (st = pcgc_backend_open(&be, "cuda", 0, &err)) != PCGC_OK)
    pcgc_error_hint(&err, "machine '%s' has GPUs: its kernels are measured on this host's GPU (profile a CPU "
                          "machine such as cpu-local to measure this host's CPU)", m.name);
  if (st == PCGC_OK && gpu && precision != PCGC_PREC_F32)
    st = be.set_precision(&be, pcgc_precision_name(precision), &err);
  if (!cores) {
    long c = sysconf(_SC_NPROCESSORS_ONLN); /* what `pcgc run` divides among its processes */
    cores = c > 0 && c <= 65536 ? (int)c : 1;
  }
  if (threads > cores && !gpu)
    fprintf(stderr, "pcgc profile: warning: %d BLAS threads on %d cores; the device recorded has %d\n", threads, cores,
            cores);
  pcgc_profile_device dev = {0};
  /* more processes than cores: one process's share, and mean times */
  bool shared = copies * threads > cores;
  if (st == PCGC_OK && !gpu) dev = pcgc_profile_thread_device(&m, threads, shared ? copies * threads : cores);
  pcgc__cli_profile_use_mean(shared);
  if (st == PCGC_OK && gpu) dev = pcgc_profile_gpu_device(&m, precision); /* one of M's GPUs, as M rates it */
  if (st == PCGC_OK && append) st = open_append(output, &m, &dev, &p, &err);
  if (st == PCGC_OK && !p && !(p = pcgc_profile_new(m.name))) st = pcgc_error_set(&err, PCGC_ERR_NOMEM, "out of memory");
  if (st == PCGC_OK) pcgc_profile_set_device(p, &dev);
  if (st == PCGC_OK && links) st = measure_links(&m, links, p, &err); /* before the copies start */
  if (st == PCGC_OK && gpu) printf("measuring on %s\n", be.desc);
  /* One BLAS thread by default: a profile measures one core's kernels, and
   * the calibration runs the reference trainer with OPENBLAS_NUM_THREADS=1. */
  openblas_set_num_threads(threads);
  int before = pcgc_profile_size(p), ran = 0;
  pid_t *load = st == PCGC_OK && copies > 1 ? start_copies(copies, g, &m, training, all_grads, repeat) : NULL;
  if (copies > 1 && st == PCGC_OK) printf("measuring beside %d copies of this measurement\n", copies - 1);
  for (int r = 0; r < rounds && st == PCGC_OK; r++) {
    if (rounds > 1) printf("round %d of %d\n", r + 1, rounds);
    st = measure_round(g, &m, p, before, training, all_grads, repeat, gpu ? &be : NULL, &err);
  }
  if (load) ran = stop_copies(load, copies);
  if (st == PCGC_OK && copies > 1 && ran != copies - 1)
    st = pcgc_error_set(&err, PCGC_ERR_IO, "%d of the %d copies ran until the measurement ended", ran, copies - 1);
  if (st == PCGC_OK) st = pcgc_profile_write(p, output, &err);
  if (st == PCGC_OK && gpu)
    printf("wrote %s (%d entries%s, machine %s, measured in %s on one GPU rated %.3g TFLOP/s and %.3g TB/s)\n",
           output, pcgc_profile_size(p), append && before ? ", some kept" : "", m.name, pcgc_precision_name(precision),
           dev.flops[PCGC_F32] / 1e12, dev.memory_bandwidth / 1e12);
  else if (st == PCGC_OK)
    printf("wrote %s (%d entries%s, machine %s, measured as %.3g GFLOP/s f32 and %.3g GB/s: %d of %d cores%s)\n",
           output, pcgc_profile_size(p), append && before ? ", some kept" : "", m.name, dev.flops[PCGC_F32] / 1e9,
           dev.memory_bandwidth / 1e9, dev.threads, dev.cores,
           shared ? ", one process's share; mean times" : copies > 1 ? ", beside the copies" : "");
  else pcgc_error_print(stderr, &err);
  pcgc_backend_close(&be);
  pcgc_profile_free(p);
  pcgc_graph_free(g);
  return pcgc_cli_exit_code(st);
}
