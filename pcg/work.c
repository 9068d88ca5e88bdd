/*
 * work.c — worker threads for the search (pcg.h, "threads"): a shared
 * counter hands out indices, so a slow item does not hold up the others;
 * callers keep results by index and use them in index order, which keeps
 * every result independent of the thread count.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "pcg.h"

#define MAX_THREADS 256

int pcgc_threads_default(void) {
  const char *env = getenv("PCGC_THREADS");
  if (env && env[0]) {
    char *end;
    long v = strtol(env, &end, 10);
    if (!*end && v >= 1 && v <= MAX_THREADS) return (int)v;
  }
  long c = sysconf(_SC_NPROCESSORS_ONLN);
  return c < 1 ? 1 : c > 16 ? 16 : (int)c;
}

typedef struct job {
  void (*fn)(void *ctx, int i, int worker);
  void *ctx;
  int n;
  atomic_int next;
} job;

typedef struct worker {
  job *j;
  int id;
} worker;

static void drain(job *j, int id) {
  for (;;) {
    int i = atomic_fetch_add(&j->next, 1);
    if (i >= j->n) return;
    j->fn(j->ctx, i, id);
  }
}

static void *worker_main(void *p) {
  worker *w = p;
  drain(w->j, w->id);
  return NULL;
}

int pcgc_parallel_run(int n, int threads, void (*fn)(void *ctx, int i, int worker), void *ctx) {
  if (n <= 0 || !fn) return 1;
  if (threads > n) threads = n;
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  job j = {.fn = fn, .ctx = ctx, .n = n};
  atomic_init(&j.next, 0);
  if (threads <= 1) {
    drain(&j, 0);
    return 1;
  }
  pthread_t th[MAX_THREADS];
  worker w[MAX_THREADS];
  int started = 1;
  for (int t = 1; t < threads; t++) {
    w[started] = (worker){&j, started};
    if (pthread_create(&th[started], NULL, worker_main, &w[started]) == 0) started++;
  }
  drain(&j, 0);
  for (int t = 1; t < started; t++) pthread_join(th[t], NULL);
  return started;
}

double pcgc_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
