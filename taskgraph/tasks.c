/*
 * tasks.c — the vocabulary of an iteration's task graph (taskgraph.h):
 * views, schedules, task kinds, the task arrays, timing options and
 * results, and pipeline stages.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "taskgraph.h"

/* ------------------------------------------------------------- views */

pcgc_status pcgc_mapping_init(pcgc_mapping *mp, int n_nodes, pcgc_view all, pcgc_error *err) {
  mp->n_nodes = 0;
  mp->view = NULL;
  if (n_nodes < 0) return pcgc_error_set(err, PCGC_ERR_INVALID, "a mapping needs n_nodes >= 0, got %d", n_nodes);
  mp->view = malloc((size_t)(n_nodes ? n_nodes : 1) * sizeof *mp->view);
  if (!mp->view) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  mp->n_nodes = n_nodes;
  for (int i = 0; i < n_nodes; i++) mp->view[i] = all;
  return PCGC_OK;
}

void pcgc_mapping_destroy(pcgc_mapping *mp) {
  if (!mp) return;
  free(mp->view);
  mp->view = NULL;
  mp->n_nodes = 0;
}

double pcgc_sim_result_max_memory(const pcgc_sim_result *r) {
  double mx = 0;
  for (int d = 0; d < r->n_devices; d++)
    if (r->device[d].memory.total > mx) mx = r->device[d].memory.total;
  return mx;
}

void pcgc_sim_result_destroy(pcgc_sim_result *r) {
  if (!r) return;
  free(r->device);
  r->device = NULL;
}

/* ------------------------------------------------------------- names */

const char *pcgc_schedule_name(pcgc_schedule s) {
  switch (s) {
  case PCGC_SCHEDULE_GPIPE: return "gpipe";
  case PCGC_SCHEDULE_1F1B: return "1f1b";
  case PCGC_SCHEDULE_COUNT: break;
  }
  return "?";
}

int pcgc_schedule_from_name(const char *name) {
  for (int s = 0; name && s < PCGC_SCHEDULE_COUNT; s++)
    if (strcmp(name, pcgc_schedule_name((pcgc_schedule)s)) == 0) return s;
  return -1;
}

const char *pcgc_task_kind_name(pcgc_task_kind k) {
  switch (k) {
  case PCGC_TASK_FORWARD: return "forward";
  case PCGC_TASK_BACKWARD: return "backward";
  case PCGC_TASK_ADD: return "add";
  case PCGC_TASK_OPTIMIZER: return "optimizer";
  case PCGC_TASK_TRANSFER: return "transfer";
  case PCGC_TASK_COLLECTIVE: return "collective";
  case PCGC_TASK_JOIN: return "join";
  case PCGC_TASK_STAGE: return "staging";
  case PCGC_TASK_KIND_COUNT: break;
  }
  return "?";
}

void pcgc_sim_options_default(pcgc_sim_options *o) {
  memset(o, 0, sizeof *o);
  o->optimizer = PCGC_OPTIM_ADAM;
  o->schedule = PCGC_SCHEDULE_GPIPE;
  o->algo = PCGC_ALGO_AUTO;
  o->overlap = true;
}

/* ------------------------------------------------------------- tasks */

void pcgc_tasks_release(pcgc_tasks *T) {
  free(T->dur);
  free(T->kind);
  free(T->phase);
  free(T->coll);
  free(T->dev);
  free(T->peer);
  free(T->node);
  free(T->piece);
  free(T->micro);
  free(T->res_off);
  free(T->res_n);
  free(T->bytes);
  free(T->lat);
  free(T->start);
  free(T->res);
  memset(T, 0, sizeof *T);
}

/* ---------------------------------------------------------- schedules */

static _Thread_local const int *span_first; /* pcgc_pipeline_stages' sort key */

static int by_span_first(const void *a, const void *b) {
  int x = span_first[*(const int *)a], y = span_first[*(const int *)b];
  if (x != y) return (x > y) - (x < y);
  return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

int pcgc_pipeline_stages(int D, const int *first, const int *last, int *stage, int *tmp) {
  int n = 0, s = 0;
  for (int d = 0; d < D; d++) {
    stage[d] = -1;
    if (first[d] >= 0) tmp[n++] = d;
  }
  span_first = first;
  qsort(tmp, (size_t)n, sizeof *tmp, by_span_first);
  span_first = NULL;
  int end = -1;
  for (int i = 0; i < n; i++) {
    int d = tmp[i];
    if (i > 0 && first[d] > end) s++; /* past every span so far: a new stage */
    if (last[d] > end) end = last[d];
    stage[d] = s;
  }
  return n > 0 ? s + 1 : 1;
}

