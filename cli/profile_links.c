/*
 * profile_links.c — `pcgc profile --links N`: the all-reduces of N processes
 * of this host, timed as `pcgc run`'s ranks do them (MPI_Iallreduce and
 * MPI_Wait on float buffers, the processes started by the same mpirun
 * command line, yielding their cores when they outnumber them), and the link
 * that makes the simulator's all-reduce take those times
 * (pcgc_profile_fit_link, cost.h).
 *
 * The measuring process starts the N ranks (pcgc profile --links-rank FILE,
 * an internal mode) and waits; rank 0 writes "a bytes seconds" lines (the
 * all-reduces) and "m bytes seconds" lines (messages) to FILE. Per size: a
 * warm-up call, then three batches of back-to-back calls that last about
 * 0.1 s each (at least 3 calls, at most 2000, rank 0's choice for all); a
 * batch's time is its slowest rank's mean per call, and the median batch is
 * kept. A message is half of a ping-pong between ranks 0 and 1 (MPI_Send and
 * MPI_Recv, as the runtime's messages; the other ranks wait in a barrier,
 * as ranks waiting for a message do). The measuring process waits at most
 * 120 s (PCGC_LINKS_TIMEOUT), then stops mpirun and says so.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <mpi.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

static const double link_sizes[] = {8, 64, 512, 4096, 32768, 262144, 1048576, 4194304, 16777216};
#define N_SIZES ((int)(sizeof link_sizes / sizeof link_sizes[0]))

/* One batch of k all-reduces of buf (n floats), or with msg k ping-pongs
 * between ranks 0 and 1: the slowest rank's mean per all-reduce or per
 * one-way message, on rank 0 (others get their own). */
static double batch(float *buf, int n, int k, bool msg, int rank) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  for (int i = 0; i < k; i++) {
    if (msg && rank < 2) {
      if (rank == 0) {
        MPI_Send(buf, n, MPI_FLOAT, 1, 7, MPI_COMM_WORLD);
        MPI_Recv(buf, n, MPI_FLOAT, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf, n, MPI_FLOAT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, n, MPI_FLOAT, 0, 7, MPI_COMM_WORLD);
      }
    } else if (!msg) {
      MPI_Request r;
      MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
  }
  if (msg) MPI_Barrier(MPI_COMM_WORLD); /* the waiting ranks' time is the pair's */
  t = (MPI_Wtime() - t) / k / (msg ? 2 : 1);
  double worst = t;
  MPI_Reduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  return worst;
}

static void nap(double s) {
  struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&t, NULL);
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int pcgc__cli_links_rank(const char *out) {
  if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
    fprintf(stderr, "pcgc profile: error: MPI_Init failed\n");
    return EXIT_IO;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  float *buf = calloc((size_t)link_sizes[N_SIZES - 1] / sizeof(float), sizeof(float));
  int ok = buf != NULL, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  FILE *f = NULL;
  if (all && rank == 0 && !(f = fopen(out, "w"))) fprintf(stderr, "pcgc profile: error: cannot write %s: %s\n", out, strerror(errno));
  for (int s = 0; all && s < 2 * N_SIZES; s++) {
    bool msg = s >= N_SIZES;
    int n = (int)(link_sizes[s % N_SIZES] / sizeof(float));
    double once = batch(buf, n, 1, msg, rank); /* the warm-up, and how many calls make 0.1 s */
    int k = once > 0 ? (int)(0.1 / (msg ? 2 * once : once)) : 2000;
    k = k < 3 ? 3 : k > 2000 ? 2000 : k;
    MPI_Bcast(&k, 1, MPI_INT, 0, MPI_COMM_WORLD);
    double t[3];
    for (int b = 0; b < 3; b++) t[b] = batch(buf, n, k, msg, rank);
    qsort(t, 3, sizeof *t, by_value);
    if (f) fprintf(f, "%c %.0f %.9g\n", msg ? 'm' : 'a', link_sizes[s % N_SIZES], t[1]);
  }
  bool wrote = f && fclose(f) == 0;
  free(buf);
  MPI_Finalize();
  return rank != 0 || wrote ? EXIT_OK : EXIT_IO;
}

pcgc_status pcgc__cli_measure_links(int n, const pcgc_machine *m, pcgc_profile_link *l, double *worst,
                                    pcgc_error *err) {
  char path[4096];
  const char *tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/pcgc-links-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0) return pcgc_error_set(err, PCGC_ERR_IO, "cannot make a temporary file in %s: %s", path, strerror(errno));
  close(fd);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    unlink(path);
    return pcgc_error_set(err, PCGC_ERR_IO, "cannot start the measuring processes: %s", strerror(errno));
  }
  if (pid == 0) {
    char *args[] = {"--links-rank", path};
    pcgc_cli_exec_mpirun("profile", n, "profile", 2, args);
    _exit(127);
  }
  /* never forever: a rank that hangs (or an mpirun that never starts them)
   * ends the measurement after the limit, mpirun told to stop its ranks */
  const char *lim = getenv("PCGC_LINKS_TIMEOUT");
  double limit = lim && atof(lim) > 0 ? atof(lim) : 120, waited = 0;
  int status = 0;
  pid_t got = 0;
  while ((got = waitpid(pid, &status, WNOHANG)) == 0 || (got < 0 && errno == EINTR)) {
    if (waited >= limit) {
      kill(pid, SIGTERM);
      for (int i = 0; i < 40 && waitpid(pid, &status, WNOHANG) == 0; i++) nap(0.05);
      if (waitpid(pid, &status, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
      }
      unlink(path);
      return pcgc_error_set(err, PCGC_ERR_IO, "the %d processes measuring the link did not finish within %g s; "
                            "stopped them (PCGC_LINKS_TIMEOUT sets the limit)", n, limit);
    }
    nap(0.05);
    waited += 0.05;
  }
  memset(l, 0, sizeof *l);
  l->devices = n;
  FILE *f = WIFEXITED(status) && WEXITSTATUS(status) == 0 ? fopen(path, "r") : NULL;
  char kind;
  double b, t;
  while (f && fscanf(f, " %c %lf %lf", &kind, &b, &t) == 3) {
    int *cnt = kind == 'm' ? &l->n_msg : &l->n_points;
    if (*cnt >= N_SIZES) break;
    (kind == 'm' ? l->msg_bytes : l->bytes)[*cnt] = b;
    (kind == 'm' ? l->msg_seconds : l->seconds)[(*cnt)++] = t;
  }
  if (f) fclose(f);
  unlink(path);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || l->n_points != N_SIZES || l->n_msg != N_SIZES)
    return pcgc_error_set(err, PCGC_ERR_IO, "measuring the link among %d processes failed (mpirun %s %d, %d and %d of "
                          "%d sizes measured)", n, WIFEXITED(status) ? "exited with" : "ended by signal",
                          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), l->n_points, l->n_msg, N_SIZES);
  return pcgc_profile_fit_link(m, l, worst, err);
}
