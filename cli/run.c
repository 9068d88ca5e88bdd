/*
 * run.c — `pcgc run PLAN` (one process per device over MPI) and
 * `pcgc plan show PLAN` (the lowered program, readably).
 *
 * `pcgc run` outside a launcher starts the plan's N processes itself by
 * executing mpirun on its own binary (allowed as root, oversubscribed where
 * the machine has fewer cores); under mpirun or srun it is one rank. A plan
 * of one device runs in this process, without MPI.
 *
 * The backend: --backend, else the plan's device kind (a GPU machine: cuda,
 * which fails clearly where this node has no GPU or pcgc was built without
 * CUDA); each process takes GPU (local rank mod GPUs of the node).
 *
 * Without MPI (PCGC_RENDEZVOUS set, runtime/ctl.h): each process is one rank
 * of a TCP control plane around rank 0, and a GPU plan's messages and
 * collectives go through NCCL alone.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "codegen.h"
#include "backend.h"
#include "ctl.h"
#include "runtime.h"

void openblas_set_num_threads(int n); /* OpenBLAS */

void pcgc_cli_run_help(FILE *f) {
  fprintf(f,
          "usage: pcgc run PLAN [--steps K] [--seed S] [--optimizer O] [--lr X] [--momentum M]\n"
          "                     [--no-dropout] [--check] [--tolerance T] [--threads N]\n"
          "                     [--step-timeout S] [--save-weights FILE] [--trace FILE] [--quiet]\n"
          "                     [--checkpoint DIR [--every K] [--resume]] [--data DIR]\n"
          "                     [--backend cpu|cuda] [--comm auto|nccl|mpi] [--precision P]\n"
          "\n"
          "Trains the model of PLAN (written by `pcgc compile -o PLAN`) as one process per device\n"
          "of the plan, communicating with MPI. Outside a launcher it starts the processes\n"
          "itself through mpirun (a one-device plan runs in this process, without MPI; the\n"
          "environment variable PCGC_MPIRUN names another launcher); under `mpirun -np N` or\n"
          "`srun` each process is one device. Without MPI (torchrun, a Kubernetes job set,\n"
          "ssh), set PCGC_RENDEZVOUS=HOST:PORT (rank 0's host and a free port), PCGC_RANK and\n"
          "PCGC_WORLD_SIZE (or torchrun's RANK, WORLD_SIZE, LOCAL_RANK) in every process: they\n"
          "meet over TCP and a GPU plan's messages go through NCCL (docs/cli.md).\n"
          "Rank 0 prints the loss of every step. Weights and synthetic data are drawn as\n"
          "`pcgc train` draws them, so the two runs compare.\n"
          "\n"
          "  --steps K          training steps (default 3)\n"
          "  --seed S           seed of weights, data and dropout (default 1)\n"
          "  --optimizer O      sgd, momentum (sgd, momentum 0.9) or adam (default: the plan's, which\n"
          "                     `pcgc compile --optimizer` chose; sgd for version 1 files);\n"
          "                     --lr, --momentum as for `pcgc train`\n"
          "  --no-dropout       disable dropout\n"
          "  --check            rank 0 also trains the single-process reference interpreter on the\n"
          "                     same graph and compares losses and final weights; exit 1 on a mismatch\n"
          "                     (with adam a weight element may differ by 2 x lr x steps more: adam\n"
          "                     turns rounding noise in a zero gradient into a whole step; check\n"
          "                     plans with sgd for the strictest comparison)\n"
          "  --tolerance T      relative tolerance of --check (default 1e-4; 1e-1 for bf16 activations)\n"
          "  --check-report     --check, printing the weights that differ most and, on a mismatch,\n"
          "                     the first weight in the model's order beyond tolerance and its reader\n"
          "  --threads N        BLAS threads per process (default: cores / processes on this machine)\n"
          "  --step-timeout S   abort the job when a step takes longer than S seconds (default 300):\n"
          "                     a rank that died or hangs never leaves the others waiting forever\n"
          "  --save-weights F   write the final weights (raw f32, node order) to F\n"
          "  --trace F          write a Chrome trace of the last step to F: every process's instructions\n"
          "                     with their measured times (chrome://tracing, ui.perfetto.dev); compare\n"
          "                     it with the prediction's, `pcgc simulate PLAN --trace`. The processes\n"
          "                     start that step together; on GPUs each instruction is waited for\n"
          );
  fprintf(f,
          "  --checkpoint DIR   save the weights and optimizer state to DIR after every K steps and\n"
          "                     the last (atomically: DIR/step-N.ckpt, then DIR/latest names it);\n"
          "                     whole logical tensors, so any plan of the same model can resume it\n"
          "  --every K          steps between checkpoints (default 100)\n"
          "  --data DIR         train on DIR/NAME.npy for every input NAME of the model (first dim:\n"
          "                     samples); step s takes batch (s-1) mod the batches the files hold,\n"
          "                     each process reading only its rows (default: seeded synthetic data)\n"
          "  --resume           continue from DIR's newest checkpoint up to --steps in all; the\n"
          "                     same plan, seed and optimizer repeat the uninterrupted run bit for bit\n"
          "  --backend B        cpu (OpenBLAS) or cuda (one GPU per process: local rank mod the\n"
          "                     node's GPUs); default: cuda for plans compiled for a GPU machine,\n"
          "                     cpu otherwise\n"
          "  --precision P      f32, tf32 or bf16: the arithmetic of GEMMs and convolutions on GPUs\n"
          "                     (default: the plan's, `pcgc compile --precision`); bf16 also stores\n"
          "                     activations and their gradients in bf16 (the CPU backend computes\n"
          "                     in f32 on them; it refuses tf32)\n"
          "  --comm C           how GPUs exchange messages: nccl (NCCL communicators, one per device\n"
          "                     group and per direction of point-to-point messages, bootstrapped over\n"
          "                     MPI or TCP), mpi (staged through host memory) or auto (default: nccl when every\n"
          "                     process of a node has a GPU of its own, else mpi)\n"
          "  --quiet            no per-step lines\n"
          "\n"
          "Exit codes: 0 trained (and matched with --check), 1 invalid plan or mismatch,\n"
          "2 bad command line, 3 a file could not be read, 4 internal error.\n");
}

void pcgc_cli_plan_help(FILE *f) {
  fprintf(f,
          "usage: pcgc plan show PLAN [--device D] [--streams]\n"
          "\n"
          "Lowers PLAN's strategy to per-device programs and prints, per device, its\n"
          "instruction count, planned arena, persistent bytes (weights, gradients, state,\n"
          "data), peak live bytes and the bytes without reuse. --streams adds every\n"
          "buffer (role, tensor, piece, bytes, lifetime) and the ordered instruction stream.\n");
}

static bool under_launcher(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") || getenv("SLURM_PROCID") ||
         getenv("PCGC_RENDEZVOUS");
}

/* Notes about the plan are printed once: by the process the user started
 * (pcgc run, or rank 0 under the user's own launcher). */
static bool says_notes(void) {
  if (!under_launcher()) return true;
  const char *r = getenv("PCGC_RENDEZVOUS") ? getenv("PCGC_RANK") ? getenv("PCGC_RANK") : getenv("RANK") : NULL;
  if (!r) r = getenv("OMPI_COMM_WORLD_RANK");
  if (!r) r = getenv("PMI_RANK");
  if (!r) r = getenv("SLURM_PROCID");
  return !getenv("PCGC_LAUNCHED") && (!r || strcmp(r, "0") == 0);
}

/* Loads a plan and lowers it, with the optimizer state buffers of `need`
 * (-1: the plan's optimizer) where the plan's are fewer. */
/* prec: the precision to lower for (-1: the plan's): bf16 stores activations in bf16 */
static int load_program(const char *cmd, const char *path, int need, int prec, pcgc_graph **g, pcgc_mapping *mp,
                        pcgc_strategy_info *info, pcgc_program **prog) {
  pcgc_error err;
  pcgc_error_clear(&err);
  if (pcgc_strategy_file_load(path, 0, g, mp, info, &err) != PCGC_OK) {
    pcgc_error_print(stderr, &err);
    return pcgc_cli_exit_code(err.status);
  }
  pcgc_codegen_options co;
  pcgc_codegen_options_default(&co);
  /* every rank lowers the plan at once: the cores shared among this machine's ranks */
  const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!local && getenv("PCGC_RENDEZVOUS")) local = getenv("PCGC_LOCAL_WORLD_SIZE");
  if (!local && getenv("PCGC_RENDEZVOUS")) local = getenv("LOCAL_WORLD_SIZE");
  if (local && atoi(local) > 1) co.threads = co.threads / atoi(local) > 0 ? co.threads / atoi(local) : 1;
  if (info->has_optimizer) co.optimizer = info->optimizer;
  bool relowered = need >= 0 && need > (int)co.optimizer;
  if (relowered && says_notes())
    fprintf(stderr, "pcgc %s: note: %s was compiled for %s; lowered again with %s's state (more memory than planned)\n",
            cmd, path, pcgc_optimizer_name(co.optimizer), pcgc_optimizer_name((pcgc_optim_kind)need));
  if (relowered) co.optimizer = (pcgc_optim_kind)need;
  if (info->has_choice) {
    co.schedule = info->choice.schedule;
    co.recompute = info->choice.recompute;
    co.zero = info->choice.zero;
  }
  if (info->has_program) co.order = info->program_order; /* as compile lowered it */
  co.bf16 = (prec >= 0 ? (pcgc_precision)prec : info->precision) == PCGC_PREC_BF16;
  /* as compile lowered it: CPU plans keep attention's projections for backward (the CUDA backend
   * computes them again; the CPU backend does either) */
  co.save_for_backward = !info->has_device_kind || info->device_kind == PCGC_DEVICE_CPU;
  bool reprec = prec >= 0 && (pcgc_precision)prec != info->precision;
  int D = info->devices; /* a version 1 file records none: its machine's */
  pcgc_machine m;
  if (!D && pcgc_machine_load(info->machine, &m, &err) != PCGC_OK) {
    fprintf(stderr, "pcgc %s: error: %s was written for machine '%s', which cannot be loaded:\n", cmd, path,
            info->machine);
    pcgc_error_print(stderr, &err);
    return pcgc_cli_exit_code(err.status);
  }
  /* a version 1 file (no device count, no program record) is lowered in the order compile would
   * keep, its programs simulated on its machine */
  pcgc_sim_options so;
  pcgc_sim_options_default(&so);
  so.optimizer = co.optimizer;
  so.schedule = co.schedule;
  so.recompute = co.recompute;
  so.zero = co.zero;
  so.bf16 = co.bf16;
  if (!D) pcgc_machine_set_precision(&m, info->precision);
  bool v1 = !D;
  if (!D) D = pcgc_machine_num_devices(&m);
  if (pcgc_cli_lower_plan(info, *g, mp, D, &co, v1 ? &m : NULL, &so, prog, &err) != PCGC_OK) {
    fprintf(stderr, "pcgc %s: ", cmd);
    pcgc_error_print(stderr, &err);
    return pcgc_cli_exit_code(err.status);
  }
  if (info->has_program && !relowered && !reprec && (*prog)->digest != info->program_digest && says_notes())
    fprintf(stderr, "pcgc %s: warning: this pcgc lowers %s to another program than the pcgc that compiled it "
                    "(digest %016llx, the plan's %016llx): its memory and times may differ from the plan's; "
                    "compile it again to refresh them\n",
            cmd, path, (unsigned long long)(*prog)->digest, (unsigned long long)info->program_digest);
  return EXIT_OK;
}

int pcgc_cli_plan(int argc, char **argv) {
  if (argc < 1 || strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0) {
    pcgc_cli_plan_help(argc < 1 ? stderr : stdout);
    return argc < 1 ? EXIT_USAGE : EXIT_OK;
  }
  if (strcmp(argv[0], "show") != 0) return pcgc_cli_usage_error("plan", "unknown subcommand '%s' (show)", argv[0]);
  const char *path = NULL;
  int device = -1;
  bool streams = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      pcgc_cli_plan_help(stdout);
      return EXIT_OK;
    } else if (strcmp(argv[i], "--streams") == 0) {
      streams = true;
    } else if (strcmp(argv[i], "--device") == 0) {
      char *end = NULL;
      if (i + 1 >= argc) return pcgc_cli_usage_error("plan", "--device needs a value%s", "");
      long d = strtol(argv[++i], &end, 10);
      if (!*argv[i] || *end || d < 0 || d > 1000000)
        return pcgc_cli_usage_error("plan", "--device must be a device number, not '%s'", argv[i]);
      device = (int)d;
    } else if (argv[i][0] == '-') {
      return pcgc_cli_usage_error("plan", "unknown option '%s'", argv[i]);
    } else if (path) {
      return pcgc_cli_usage_error("plan", "unexpected argument '%s' (one PLAN only)", argv[i]);
    } else {
      path = argv[i];
    }
  }
  if (!path) return pcgc_cli_usage_error("plan", "missing PLAN%s", "");
  pcgc_graph *g = NULL;
  pcgc_mapping mp = {0, NULL};
  pcgc_strategy_info info;
  pcgc_program *prog = NULL;
  int code = load_program("plan", path, -1, -1, &g, &mp, &info, &prog);
  if (code == EXIT_OK) {
    if (device >= prog->n_devices) {
      fprintf(stderr, "pcgc plan: error: the plan has devices 0..%d, not %d\n", prog->n_devices - 1, device);
      code = EXIT_USAGE;
    } else {
      printf("%s: %s, machine %s\n", path, g->name ? g->name : "model", info.machine[0] ? info.machine : "?");
      pcgc_program_print(stdout, prog, g, device, streams);
    }
  }
  pcgc_program_free(prog);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
  return code;
}

static int parse_double(const char *cmd, const char *name, const char *val, double *out) {
  char *end = NULL;
  if (!val) return pcgc_cli_usage_error(cmd, "%s needs a value", name);
  *out = strtod(val, &end);
  if (!*val || *end || !isfinite(*out)) return pcgc_cli_usage_error(cmd, "bad number '%s'", val);
  return -1;
}

/* Starts N copies of this command under mpirun and waits for them (exec). */
static int self_launch(int n, int argc, char **argv) {
  pcgc_cli_exec_mpirun("run", n, "run", argc, argv);
  return EXIT_IO;
}

int pcgc_cli_run(int argc, char **argv) {
  const char *path = NULL, *save = NULL, *trace = NULL, *ckpt = NULL, *data = NULL, *backend = NULL, *comm = "auto",
             *precision = NULL;
  bool resume = false;
  double every = 100, steps = 3, seed = 1, lr = -1, momentum = 0, tol = 1e-4, threads = 0, timeout = 300;
  bool tol_given = false;
  int optim = -1; /* pcgc_optim_kind; -1: the plan's */
  bool dropout = true, check = false, quiet = false, check_report = false;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      pcgc_cli_run_help(stdout);
      return EXIT_OK;
    } else if (strcmp(a, "--no-dropout") == 0) {
      dropout = false;
    } else if (strcmp(a, "--check") == 0) {
      check = true;
    } else if (strcmp(a, "--check-report") == 0) {
      check = check_report = true;
    } else if (strcmp(a, "--quiet") == 0) {
      quiet = true;
    } else if (strcmp(a, "--resume") == 0) {
      resume = true;
    } else if (strcmp(a, "--data") == 0) {
      if (i + 1 >= argc) return pcgc_cli_usage_error("run", "--data needs a directory of .npy files%s", "");
      data = argv[++i];
    } else if (strcmp(a, "--backend") == 0) {
      if (i + 1 >= argc) return pcgc_cli_usage_error("run", "--backend needs cpu or cuda%s", "");
      backend = argv[++i];
      if (strcmp(backend, "cpu") != 0 && strcmp(backend, "cuda") != 0)
        return pcgc_cli_usage_error("run", "--backend must be cpu or cuda, not '%s'", backend);
    } else if (strcmp(a, "--precision") == 0) {
      if (i + 1 >= argc) return pcgc_cli_usage_error("run", "--precision needs f32, tf32 or bf16%s", "");
      precision = argv[++i];
      if (pcgc_precision_from_name(precision) < 0)
        return pcgc_cli_usage_error("run", "--precision must be f32, tf32 or bf16, not '%s'", precision);
    } else if (strcmp(a, "--comm") == 0) {
      if (i + 1 >= argc) return pcgc_cli_usage_error("run", "--comm needs auto, nccl or mpi%s", "");
      comm = argv[++i];
      if (strcmp(comm, "auto") != 0 && strcmp(comm, "nccl") != 0 && strcmp(comm, "mpi") != 0)
        return pcgc_cli_usage_error("run", "--comm must be auto, nccl or mpi, not '%s'", comm);
    } else if (strcmp(a, "--checkpoint") == 0) {
      if (i + 1 >= argc) return pcgc_cli_usage_error("run", "--checkpoint needs a directory%s", "");
      ckpt = argv[++i];
    } else if (strcmp(a, "--save-weights") == 0) {
      if (i + 1 >= argc) return pcgc_cli_usage_error("run", "--save-weights needs a file%s", "");
      save = argv[++i];
    } else if (strcmp(a, "--trace") == 0) {
      if (i + 1 >= argc) return pcgc_cli_usage_error("run", "--trace needs a file%s", "");
      trace = argv[++i];
    } else if (strcmp(a, "--optimizer") == 0) {
      if (i + 1 >= argc) return pcgc_cli_usage_error("run", "--optimizer needs sgd, momentum or adam%s", "");
      const char *v = argv[++i];
      if ((optim = pcgc_optimizer_from_name(v)) < 0)
        return pcgc_cli_usage_error("run", "--optimizer must be sgd, momentum or adam, not '%s'", v);
    } else if (a[0] == '-' && a[1] == '-') {
      double *dst = strcmp(a, "--steps") == 0 ? &steps : strcmp(a, "--seed") == 0 ? &seed : strcmp(a, "--lr") == 0 ? &lr
                  : strcmp(a, "--momentum") == 0   ? &momentum
                  : strcmp(a, "--tolerance") == 0  ? &tol
                  : strcmp(a, "--threads") == 0    ? &threads
                  : strcmp(a, "--step-timeout") == 0 ? &timeout
                  : strcmp(a, "--every") == 0      ? &every
                                                     : NULL;
      if (!dst) return pcgc_cli_usage_error("run", "unknown option '%s'", a);
      if (dst == &tol) tol_given = true;
      int r = parse_double("run", a, i + 1 < argc ? argv[++i] : NULL, dst);
      if (r >= 0) return r;
    } else if (path) {
      return pcgc_cli_usage_error("run", "unexpected argument '%s' (one PLAN only)", a);
    } else {
      path = a;
    }
  }
  if (!path) return pcgc_cli_usage_error("run", "missing PLAN%s", "");
  if (steps < 0 || steps != floor(steps) || steps > 1e9)
    return pcgc_cli_usage_error("run", "--steps must be a non-negative integer%s", "");
  if (every < 1 || every != floor(every) || every > 1e9)
    return pcgc_cli_usage_error("run", "--every must be a positive number of steps%s", "");
  if (resume && !ckpt) return pcgc_cli_usage_error("run", "--resume needs --checkpoint DIR (where to resume from)%s", "");
  if (seed < 0 || seed != floor(seed)) return pcgc_cli_usage_error("run", "--seed must be a non-negative integer%s", "");
  if (lr == 0 || lr < -1 || momentum < 0 || !(tol > 0) || threads < 0 || threads != floor(threads) || timeout < 0)
    return pcgc_cli_usage_error("run", "--lr, --tolerance must be positive; --momentum, --threads, --step-timeout not negative%s", "");

  /* the plan is loaded and lowered before any process starts: errors come once, from here */
  pcgc_graph *g = NULL;
  pcgc_mapping mp = {0, NULL};
  pcgc_strategy_info info;
  pcgc_program *prog = NULL;
  bool launched = under_launcher();
  int need = optim >= 0 && optim != PCGC_OPTIM_SGD ? optim : momentum > 0 ? PCGC_OPTIM_MOMENTUM : -1;
  int code = load_program("run", path, need, precision ? pcgc_precision_from_name(precision) : -1, &g, &mp, &info,
                          &prog);
  if (code != EXIT_OK) goto out;
  if (data) { /* inputs that disagree with the plan are refused before any process starts */
    pcgc_error err;
    pcgc_error_clear(&err);
    int64_t batches = 0;
    if (pcgc_run_check_data(g, data, &batches, &err) != PCGC_OK) {
      pcgc_error_print(stderr, &err);
      code = pcgc_cli_exit_code(err.status);
      goto out;
    }
    if (!launched) printf("data: %s, %lld batch%s\n", data, (long long)batches, batches == 1 ? "" : "es");
  }
  if (optim < 0) optim = info.has_optimizer ? (int)info.optimizer : PCGC_OPTIM_SGD;
  if (optim == PCGC_OPTIM_MOMENTUM && momentum == 0) momentum = 0.9;
  bool adam = optim == PCGC_OPTIM_ADAM;
  if (!backend) { /* the plan's device kind; older plans: their machine's, where it loads */
    pcgc_machine m;
    pcgc_error e2;
    pcgc_error_clear(&e2);
    int kind = info.has_device_kind ? (int)info.device_kind
               : info.machine[0] && pcgc_machine_load(info.machine, &m, &e2) == PCGC_OK ? (int)m.device.kind
                                                                                       : PCGC_DEVICE_CPU;
    backend = kind == PCGC_DEVICE_GPU ? "cuda" : "cpu";
  }
  if (!precision) precision = pcgc_precision_name(info.precision);
  if (strcmp(precision, "tf32") == 0 && strcmp(backend, "cpu") == 0) {
    if (says_notes())
      fprintf(stderr, "pcgc run: error: %s computes in %s, but the cpu backend computes in f32 only\n"
                      "  hint: run it with --precision f32 (the CPU reference is f32) or bf16 (activations stored "
                      "in bf16), or on GPUs\n",
              path, precision);
    code = EXIT_INVALID;
    goto out;
  }
  int n_gpus = 1;
  { /* a backend this node cannot run is refused once, before any process starts */
    pcgc_error err;
    pcgc_error_clear(&err);
    if ((n_gpus = pcgc_backend_devices(backend, &err)) <= 0) {
      if (says_notes()) {
        fprintf(stderr, "pcgc run: %s (machine %s) on the %s backend: ", path, info.machine[0] ? info.machine : "?",
                backend);
        pcgc_error_print(stderr, &err);
      }
      code = pcgc_cli_exit_code(err.status);
      goto out;
    }
  }
  pcgc_rendezvous rv;
  bool tcp = false; /* a TCP control plane instead of MPI (runtime/ctl.h) */
  {
    pcgc_error err;
    pcgc_error_clear(&err);
    if (pcgc_rendezvous_from_env(&rv, &tcp, &err) != PCGC_OK) {
      fprintf(stderr, "pcgc run: ");
      pcgc_error_print(stderr, &err);
      code = EXIT_USAGE;
      goto out;
    }
  }
  bool mpi = !tcp && (launched || prog->n_devices > 1);
  if (!launched && mpi) {
    int n = prog->n_devices;
    pcgc_program_free(prog);
    pcgc_mapping_destroy(&mp);
    pcgc_graph_free(g);
    printf("pcgc run: starting %d process%s with %s\n", n, n == 1 ? "" : "es", pcgc_cli_mpirun_path());
    return self_launch(n, argc, argv);
  }
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  if (tcp) {
    rank = rv.rank, size = rv.size, local_rank = rv.local_rank;
    local_size = rv.local_size > 0 ? rv.local_size : 1;
  }
  if (mpi) {
    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  if (size != prog->n_devices) { /* every rank sees the same sizes: all leave, rank 0 says why */
    if (rank == 0)
      fprintf(stderr, "pcgc run: error: %s is a plan for %d devices, but %d processes were started\n"
                      "  hint: %s%d, or run `pcgc run %s` without a launcher\n",
              path, prog->n_devices, size, tcp ? "start one process per device, each with PCGC_WORLD_SIZE="
                                               : "start it with mpirun -np ",
              prog->n_devices, path);
    if (mpi) MPI_Finalize();
    code = EXIT_INVALID;
    goto out;
  }
  if (mpi) {
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &local_size);
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);
  }
  pcgc_backend be;
  {
    pcgc_error err;
    pcgc_error_clear(&err);
    if (pcgc_backend_open(&be, backend, local_rank % n_gpus, &err) != PCGC_OK) {
      fprintf(stderr, "pcgc run: rank %d: ", rank);
      pcgc_error_print(stderr, &err);
      if (mpi) MPI_Abort(MPI_COMM_WORLD, pcgc_cli_exit_code(err.status));
      code = pcgc_cli_exit_code(err.status);
      goto out;
    }
  }
  /* without MPI the program's messages can only go through the backend's communicators (NCCL) */
  const char *no_tcp = !tcp || size == 1 ? NULL
                       : !be.comm_open   ? "its messages would go through MPI: the %s backend has no communicators "
                                           "of its own"
                       : strcmp(comm, "mpi") == 0 ? "--comm mpi needs MPI (the %s backend's messages then go through "
                                                    "NCCL)"
                       : local_size > n_gpus ? "NCCL needs a GPU per process, and this node's processes share its "
                                               "GPUs (%s backend)"
                                             : NULL;
  if (no_tcp) {
    fprintf(stderr, "pcgc run: rank %d: error: %s cannot run without MPI (PCGC_RENDEZVOUS is set): ", rank, path);
    fprintf(stderr, no_tcp, be.name);
    fprintf(stderr, "\n  hint: start it under mpirun -np %d (or run `pcgc run %s` without a launcher, which "
                    "starts mpirun itself)\n", size, path);
    pcgc_backend_close(&be);
    code = EXIT_INVALID;
    goto out;
  }
  pcgc_ctl ctl;
  pcgc_ctl_init_solo(&ctl);
  if (tcp) {
    pcgc_error err;
    pcgc_error_clear(&err);
    if (pcgc_ctl_init_tcp(&ctl, &rv, prog->digest, &err) != PCGC_OK) {
      fprintf(stderr, "pcgc run: rank %d: ", rank);
      pcgc_error_print(stderr, &err);
      pcgc_backend_close(&be);
      code = pcgc_cli_exit_code(err.status);
      goto out;
    }
  }
  if (strcmp(precision, "f32") != 0 && !(strcmp(precision, "bf16") == 0 && strcmp(be.name, "cpu") == 0)) {
    pcgc_error err;
    pcgc_error_clear(&err);
    pcgc_status ps = be.set_precision ? be.set_precision(&be, precision, &err)
                                      : pcgc_error_set(&err, PCGC_ERR_UNSUPPORTED, "the %s backend computes in f32 only, "
                                                       "not %s", be.name, precision);
    if (ps != PCGC_OK) {
      if (rank == 0) {
        fprintf(stderr, "pcgc run: ");
        pcgc_error_print(stderr, &err);
        fprintf(stderr, "  hint: run it with --precision f32, or on GPUs\n");
      }
      pcgc_backend_close(&be);
      pcgc_ctl_destroy(&ctl);
      if (mpi) MPI_Finalize();
      code = pcgc_cli_exit_code(ps);
      goto out;
    }
  }
  /* NCCL where every process of the node has a GPU of its own (NCCL refuses two ranks on one GPU) */
  bool dcomm = be.comm_open && (mpi || tcp) && size > 1 &&
               (strcmp(comm, "nccl") == 0 || (strcmp(comm, "auto") == 0 && local_size <= n_gpus));
  if (dcomm) {
    /* connect every communicator when it is opened (in one global order),
     * not at its first collective, where ranks meeting different groups first
     * would wait for each other; keep NCCL's kernels in the order of the calls */
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", 0);
  }
  {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int t = threads > 0 ? (int)threads : (int)(cores / local_size > 0 ? cores / local_size : 1);
    openblas_set_num_threads(t);
    if (rank == 0 && !quiet) {
      if (be.host)
        printf("running %s on %d process%s (%d BLAS thread%s each%s): %s, %d step%s\n", path, size,
               size == 1 ? "" : "es", t, t == 1 ? "" : "s",
               prog->bf16 ? "; activations stored in bf16, arithmetic in f32" : "", adam ? "adam" : momentum > 0 ? "sgd with momentum" : "sgd",
               (int)steps, steps == 1 ? "" : "s");
      else
        printf("running %s on %d process%s (rank 0: %s, %s%s%s): %s, %d step%s\n", path, size, size == 1 ? "" : "es",
               be.desc, precision, prog->bf16 ? ", activations stored in bf16" : "",
               size == 1 ? "" : tcp ? "; messages over NCCL, met over TCP" : dcomm ? "; messages over NCCL"
                                                                           : "; messages staged through host MPI",
               adam ? "adam" : momentum > 0 ? "sgd with momentum" : "sgd", (int)steps, steps == 1 ? "" : "s");
    }
  }
  pcgc_run_options o;
  pcgc_run_options_default(&o);
  o.steps = (int)steps;
  o.seed = (uint64_t)seed;
  o.training = dropout;
  pcgc_optimizer_default(&o.opt, adam ? PCGC_ADAM : PCGC_SGD);
  if (lr > 0) o.opt.lr = lr;
  o.opt.momentum = momentum;
  o.check = check;
  o.check_report = check_report;
  /* bf16 activations keep 8 significant bits against f32; a gradient summed with cancellation (a
   * batch norm's bias) keeps fewer: CNN weights differ by up to 6e-2 after 3 steps */
  if (prog->bf16 && !tol_given) tol = 1e-1;
  o.tolerance = tol;
  o.quiet = quiet;
  o.step_timeout = timeout;
  o.save_weights = save;
  o.trace_path = trace;
  o.checkpoint_dir = ckpt;
  o.checkpoint_every = (int)every;
  o.resume = resume;
  o.data_dir = data;
  o.backend = &be;
  o.device_comm = dcomm;
  o.ctl = tcp ? &ctl : NULL;
  pcgc_run_result r;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_status st = pcgc_run(g, prog, &o, &r, &err);
  if (st != PCGC_OK) {
    fprintf(stderr, "pcgc run: rank %d: ", rank);
    pcgc_error_print(stderr, &err);
    fflush(stderr);
    if (mpi) MPI_Abort(MPI_COMM_WORLD, pcgc_cli_exit_code(st));
    code = pcgc_cli_exit_code(st);
    pcgc_ctl_destroy(&ctl); /* the other ranks see the connection close */
    tcp = false;
  } else if (rank == 0) {
    if (r.first_step > 0)
      printf("resumed after step %d\n", r.first_step);
    if (r.steps > r.first_step)
      printf("%d steps in %.3f s (fastest step %.2f ms)\n", r.steps - r.first_step, r.seconds,
             1e3 * r.step_seconds_min);
    if (trace && r.steps > r.first_step) printf("trace of step %d written to %s\n", r.steps, trace);
    if (r.checked) {
      printf("check against the reference interpreter: losses differ by at most %.2e, weights by %.2e (%s)%s; "
             "tolerance %.0e: %s\n",
             r.max_loss_diff, r.max_weight_diff, r.worst_tensor[0] ? r.worst_tensor : "-",
             adam ? " beyond adam's allowance of 2 x lr x steps" : "", tol, r.check_ok ? "match" : "MISMATCH");
      if (!r.check_ok) code = EXIT_INVALID;
    }
  }
  pcgc_backend_close(&be);
  if (mpi) {
    MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
  } else if (tcp) {
    pcgc_error err;
    pcgc_error_clear(&err);
    pcgc_ctl_bcast(&ctl, &code, sizeof code, &err); /* every rank leaves with rank 0's verdict */
  }
  pcgc_ctl_destroy(&ctl);
out:
  pcgc_program_free(prog);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
  return code;
}
