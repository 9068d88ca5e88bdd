/*
 * runtime.h — runs a program from codegen/ as one process per device: the
 * CPU backend (runtime/cpu kernels, OpenBLAS) with Open MPI for
 * communication. Rank r of MPI_COMM_WORLD is device r (without MPI: rank r of
 * the options' TCP control plane, ctl.h, with the messages through NCCL).
 *
 * Before the first step every rank allocates its whole arena (the plan's
 * buffer offsets), staging for its sends and collectives, and one
 * communicator per device group it belongs to; weights are initialised and
 * synthetic data drawn exactly as the reference interpreter does (the same
 * seeded streams, each rank drawing only its boxes), so runs compare with
 * `pcgc train`. The step loop allocates nothing.
 *
 *     MPI_Init(&argc, &argv);
 *     pcgc_run_options o;
 *     pcgc_run_options_default(&o);
 *     o.steps = 3;
 *     pcgc_run_result r;
 *     pcgc_status st = pcgc_run(g, program, &o, &r, &err);   // every rank
 *     MPI_Finalize();
 */
#ifndef PCGC_RUNTIME_H
#define PCGC_RUNTIME_H

#include <stdbool.h>
#include <stdint.h>

#include "codegen.h"
#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pcgc_run_options {
  int steps;               /* default 3 */
  uint64_t seed;           /* weights, data, dropout (default 1) */
  bool training;           /* dropout active (default true) */
  pcgc_optimizer opt;      /* default SGD lr 0.01 */
  bool quiet;              /* rank 0 prints no per-step line */
  bool check;              /* rank 0 also runs the reference interpreter on the
                              same graph and compares losses and final weights */
  bool check_report;       /* with check: rank 0 prints per weight its largest relative
                              difference (the largest few) and, on a mismatch, the first
                              weight in the model's order beyond tolerance and its reader */
  double tolerance;        /* relative, for check (default 1e-4); with Adam each weight
                              element may differ by 2 lr steps more, since Adam makes
                              rounding noise in a zero gradient a whole step */
  double step_timeout;     /* s a step may take before the run is aborted (0: none) */
  const char *save_weights;/* rank 0 writes the final logical weights here (raw
                              f32, one tensor after another in node order) */
  const char *checkpoint_dir; /* checkpoints (runtime/checkpoint.h) go here (NULL: none) */
  int checkpoint_every;    /* after every this many steps, and after the last (0: never) */
  bool resume;             /* start from checkpoint_dir's newest checkpoint: `steps` is
                              then the total, so steps after it are trained */
  struct pcgc_backend *backend; /* kernels and memory (backend.h); NULL: the CPU backend */
  bool device_comm;        /* messages through the backend's communicators (NCCL) where it
                              has them; false: staged through host MPI */
  const char *trace_path;  /* rank 0 writes a Chrome trace of the last step here: every
                              rank's instructions with their measured times
                              (pcgc_program_trace_write); the ranks start that step
                              together, and a backend that runs asynchronously
                              synchronises after each instruction in it */
  const char *data_dir;    /* NULL: seeded synthetic data; else DIR/NAME.npy per input
                              (runtime/npy.h): step s trains on batch (s-1) mod the
                              batches the files hold, each rank reading its rows only */
  struct pcgc_ctl *ctl;    /* how the processes agree (ctl.h): NULL: MPI_COMM_WORLD where MPI
                              is initialised, else one process. A TCP control plane (no MPI)
                              needs device_comm: the program's messages then go through NCCL */
} pcgc_run_options;

void pcgc_run_options_default(pcgc_run_options *o);

typedef struct pcgc_run_result {
  int steps;               /* the last step trained (counting a resumed checkpoint's) */
  int first_step;          /* steps a resumed checkpoint had trained (0: none) */
  double loss[64];         /* rank 0: the loss of the first 64 steps */
  double last_loss;
  double seconds;          /* wall time of the step loop (rank 0) */
  double step_seconds_min; /* fastest step */
  double max_loss_diff, max_weight_diff;  /* with check: largest relative differences */
  char worst_tensor[128];  /* with check: the weight with the largest difference */
  bool checked, check_ok;
} pcgc_run_result;

/* Checks that DIR holds a .npy file for every data input of g that fits it
 * (dtype kind, dims after the first, at least one batch); *batches (may be
 * NULL) receives how many whole batches the files hold (the smallest over
 * the inputs). Errors name the file and the fix. */
pcgc_status pcgc_run_check_data(const pcgc_graph *g, const char *dir, int64_t *batches, pcgc_error *err);

/* The measures of `--check` (and of pcgc verify's rounding control): a
 * weight's largest difference from the reference's, less `slack` per
 * element, over the reference tensor's largest element (at least 1e-6); a
 * gradient's over its largest element or 1e-3 of the model's largest
 * gradient `gmax`, whichever is more, and a tenth of that (a sum over
 * devices shows reassociation more than the weight it moves by lr). */
double pcgc_check_weight_diff(const float *want, const float *got, int64_t n, double slack);
double pcgc_check_grad_diff(const float *want, const float *got, int64_t n, double gmax);

/* Runs o->steps training steps of program p (lowered from g) on this rank's
 * device. Every rank calls it; MPI must be initialised and the world's size
 * must equal p->n_devices; a one-device plan also runs without MPI (no
 * MPI_Init). Errors leave a message; the caller should then
 * abort the job (MPI_Abort) so that no rank waits forever. */
pcgc_status pcgc_run(const pcgc_graph *g, const pcgc_program *p, const pcgc_run_options *o, pcgc_run_result *r,
                     pcgc_error *err);

#ifdef __cplusplus
}
#endif
#endif
