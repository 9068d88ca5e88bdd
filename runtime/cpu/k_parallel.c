/*
 * k_parallel.c — the parallel loop of the CPU kernels: the large
 * elementwise, pooling and normalisation loops run on as many threads as
 * BLAS has (openblas_get_num_threads(): 1 under OPENBLAS_NUM_THREADS=1, in
 * `pcgc profile` and where `pcgc run` puts one process per core).
 *
 * The range [0, n) is cut into one contiguous chunk per thread, fixed by n
 * and the thread count alone; the callers only split work whose every
 * result is computed by one thread in the order one thread would compute
 * it (an element, a channel's or a row's sums), so the results do not
 * depend on the thread count. Threads are started per call (tens of
 * microseconds), so callers pass a grain: chunks smaller than that are not
 * worth a thread. A thread that cannot start leaves its chunk to the caller.
 */
#include <cblas.h>
#include <pthread.h>

#include "kernels_internal.h"

#define PAR_MAX 64

typedef struct par_job {
  pcgc__range_fn fn;
  void *arg;
  int64_t lo, hi;
} par_job;

static void *par_main(void *p) {
  par_job *j = p;
  j->fn(j->arg, j->lo, j->hi);
  return NULL;
}

static int threads(void) {
  int t = openblas_get_num_threads();
  return t < 1 ? 1 : t > PAR_MAX ? PAR_MAX : t;
}

int pcgc_cpu_set_threads(int n) {
  int was = threads();
  openblas_set_num_threads(n < 1 ? 1 : n);
  return was;
}

void pcgc__parallel_for(int64_t n, int64_t grain, pcgc__range_fn fn, void *arg) {
  if (n <= 0) return;
  int t = threads();
  int64_t most = n / (grain > 1 ? grain : 1);
  if (t > most) t = (int)most;
  if (t <= 1) {
    fn(arg, 0, n);
    return;
  }
  par_job job[PAR_MAX];
  pthread_t th[PAR_MAX];
  bool started[PAR_MAX];
  for (int i = 0; i < t; i++) job[i] = (par_job){fn, arg, n * i / t, n * (i + 1) / t};
  for (int i = 1; i < t; i++) started[i] = pthread_create(&th[i], NULL, par_main, &job[i]) == 0;
  fn(arg, job[0].lo, job[0].hi);
  for (int i = 1; i < t; i++) {
    if (started[i]) pthread_join(th[i], NULL);
    else fn(arg, job[i].lo, job[i].hi);
  }
}
