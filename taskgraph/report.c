/*
 * sim_report.c — what the simulator shows: the text report of a result
 * (pcgc_sim_report) and the Chrome trace of every task
 * (pcgc_tasks_write_trace, open it in chrome://tracing or ui.perfetto.dev).
 *
 * The trace is streamed one event at a time (each built with cJSON and
 * printed unformatted), so a 200,000-task iteration does not hold a JSON
 * tree in memory; it is written to PATH.tmp and renamed over PATH once
 * flushed and fsync'ed, so a reader never sees half a file.
 */
#define _POSIX_C_SOURCE 200809L
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "taskgraph.h"

/* ------------------------------------------------------------- report */

/* Three significant digits and a unit: "12.3 ms", "1.25 GiB". */
static const char *fmt_time(char *b, size_t n, double s) {
  const char *u[] = {"s", "ms", "us", "ns"};
  int i = 0;
  double v = s;
  while (i < 3 && v != 0 && fabs(v) < 1) {
    v *= 1000;
    i++;
  }
  snprintf(b, n, "%.3g %s", v, u[i]);
  return b;
}

static const char *fmt_bytes(char *b, size_t n, double x) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (i < 5 && fabs(x) >= 1024) {
    x /= 1024;
    i++;
  }
  snprintf(b, n, i ? "%.3g %s" : "%.0f %s", x, u[i]);
  return b;
}

static const char *fmt_count(char *b, size_t n, int64_t v) {
  char tmp[32];
  int len = snprintf(tmp, sizeof tmp, "%lld", (long long)v), o = 0;
  for (int i = 0; i < len && o + 2 < (int)n; i++) {
    if (i && tmp[i] != '-' && (len - i) % 3 == 0 && tmp[i - 1] != '-') b[o++] = ',';
    b[o++] = tmp[i];
  }
  b[o] = '\0';
  return b;
}

void pcgc_sim_report(FILE *f, const pcgc_sim_result *r, const pcgc_machine *m, const char *title) {
  char a[32], b[32], c[32], d[32], e[32], g[32];
  int D = r->n_devices;
  if (title) fprintf(f, "%s\n", title);
  fprintf(f, "  machine        %s: %d node%s x %d device%s; optimizer %s", m->name, m->nodes, m->nodes == 1 ? "" : "s",
          m->devices_per_node, m->devices_per_node == 1 ? "" : "s", pcgc_optimizer_name(r->optimizer));
  if (r->micro_batches > 1)
    fprintf(f, "; %d micro-batches, %d stage%s, %s", r->micro_batches, r->stages, r->stages == 1 ? "" : "s",
            pcgc_schedule_name(r->schedule));
  if (r->recompute) fprintf(f, "; activations recomputed");
  fprintf(f, "\n");
  fprintf(f, "  iteration      %s (forward done at %s; critical path %s)\n", fmt_time(a, sizeof a, r->iteration_time),
          fmt_time(b, sizeof b, r->forward_time), fmt_time(c, sizeof c, r->critical_path));
  if (r->profiled) {
    const int *k = r->profile_kernels, *u = r->profile_updates;
    fprintf(f, "  profile        kernels: %d measured, %d from the nearest measured, %d roofline; "
               "updates: %d measured, %d from the nearest, %d roofline\n",
            k[PCGC_PROFILE_MEASURED], k[PCGC_PROFILE_NEAREST], k[PCGC_PROFILE_NONE], u[PCGC_PROFILE_MEASURED],
            u[PCGC_PROFILE_NEAREST], u[PCGC_PROFILE_NONE]);
  }
  if (D < 1 || !r->device) return;
  double imin = INFINITY, imax = 0, imean = 0;
  int busiest = 0, used = r->used_devices > 0 ? r->used_devices : D;
  for (int i = 0; i < D; i++) {
    const pcgc_sim_device *dv = &r->device[i];
    if (r->used_devices && !(dv->compute > 0 || dv->memory.total > 0)) continue;
    double x = dv->idle;
    if (x < imin) imin = x;
    if (x > imax) imax = x;
    imean += x / used;
    if (r->device[i].compute > r->device[busiest].compute) busiest = i;
  }
  fprintf(f, "  compute        min %s, mean %s, max %s (device %d) over the %d device%s used", fmt_time(a, sizeof a, r->compute_min),
          fmt_time(b, sizeof b, r->compute_mean), fmt_time(c, sizeof c, r->compute_max), busiest, used,
          used == 1 ? "" : "s");
  if (used < D) fprintf(f, " (of %d)", D);
  fprintf(f, "\n");
  fprintf(f, "  idle           min %s, mean %s, max %s (%.1f%% of device time)\n", fmt_time(a, sizeof a, imin),
          fmt_time(b, sizeof b, imean), fmt_time(c, sizeof c, imax),
          r->iteration_time > 0 ? 100 * imean / r->iteration_time : 0.0);
  fprintf(f, "  bytes moved    %s within nodes, %s between nodes\n", fmt_bytes(a, sizeof a, r->bytes_intra),
          fmt_bytes(b, sizeof b, r->bytes_inter));
  int top = 0;
  double mmin = INFINITY;
  for (int i = 0; i < D; i++) {
    const pcgc_sim_device *dv = &r->device[i];
    if (dv->memory.total > r->device[top].memory.total) top = i;
    if ((!r->used_devices || dv->compute > 0 || dv->memory.total > 0) && dv->memory.total < mmin) mmin = dv->memory.total;
  }
  const pcgc_memory *mm = &r->device[top].memory;
  fprintf(f, "  memory         max %s on device %d of %s usable (%.0f%%), min %s\n", fmt_bytes(a, sizeof a, mm->total),
          top, fmt_bytes(b, sizeof b, r->capacity), r->capacity > 0 ? 100 * mm->total / r->capacity : 0.0,
          fmt_bytes(c, sizeof c, mmin));
  char w[32];
  fprintf(f, "                 weights %s, gradients %s, optimizer %s, activations %s, backward workspace %s, "
          "buffers %s\n", fmt_bytes(a, sizeof a, mm->weights), fmt_bytes(b, sizeof b, mm->gradients),
          fmt_bytes(c, sizeof c, mm->optimizer), fmt_bytes(d, sizeof d, mm->activations),
          fmt_bytes(w, sizeof w, mm->workspace), fmt_bytes(e, sizeof e, mm->comm));
  if (r->oom_devices)
    fprintf(f, "  OUT OF MEMORY  %d of %d device%s need more than %s (device %d: %s)\n", r->oom_devices, D,
            D == 1 ? "" : "s", fmt_bytes(a, sizeof a, r->capacity), top, fmt_bytes(b, sizeof b, mm->total));
  fprintf(f, "  %-15s%s:", r->program ? "instructions" : "tasks", fmt_count(a, sizeof a, r->n_tasks));
  const char *sep = "";
  for (int k = 0; k < PCGC_TASK_KIND_COUNT; k++) {
    if (!r->tasks_by_kind[k]) continue;
    /* a program's instructions, counted by the task kind they stand for */
    static const char *const ins_names[PCGC_TASK_KIND_COUNT] = {
        [PCGC_TASK_FORWARD] = "forward", [PCGC_TASK_BACKWARD] = "backward", [PCGC_TASK_ADD] = "copy or zero",
        [PCGC_TASK_OPTIMIZER] = "update", [PCGC_TASK_TRANSFER] = "send", [PCGC_TASK_COLLECTIVE] = "collective",
        [PCGC_TASK_JOIN] = "receive or wait", [PCGC_TASK_STAGE] = "staging"};
    fprintf(f, "%s %s %s", sep, fmt_count(b, sizeof b, r->tasks_by_kind[k]),
            r->program ? ins_names[k] : pcgc_task_kind_name((pcgc_task_kind)k));
    sep = ",";
  }
  fprintf(f, "; %s %s\n", fmt_count(g, sizeof g, r->n_edges), r->program ? "messages and collectives" : "dependencies");
  double wall = r->build_seconds + r->run_seconds;
  if (r->program) {
    fprintf(f, "  simulated in   %s: every device's stream in order, with and without link contention\n",
            fmt_time(a, sizeof a, wall));
    return;
  }
  fprintf(f, "  simulated in   %s (task graph %s, event loop %s): %.3g tasks/s\n", fmt_time(a, sizeof a, wall),
          fmt_time(b, sizeof b, r->build_seconds), fmt_time(c, sizeof c, r->run_seconds),
          wall > 0 ? (double)r->n_tasks / wall : 0.0);
}

/* -------------------------------------------------------------- trace */

static const char *coll_name(int c) {
  return c == PCGC_COLL_REDUCE ? "reduce" : pcgc_collective_name((pcgc_collective)c);
}

static bool put_event(FILE *f, cJSON *ev, bool *first) {
  char *s = cJSON_PrintUnformatted(ev);
  cJSON_Delete(ev);
  if (!s) return false;
  bool ok = fputs(*first ? "\n" : ",\n", f) >= 0 && fputs(s, f) >= 0;
  *first = false;
  free(s);
  return ok;
}

static cJSON *meta(const char *what, int pid, int tid, const char *name) {
  cJSON *ev = cJSON_CreateObject(), *args = cJSON_CreateObject();
  cJSON_AddStringToObject(ev, "name", what);
  cJSON_AddStringToObject(ev, "ph", "M");
  cJSON_AddNumberToObject(ev, "pid", pid);
  cJSON_AddNumberToObject(ev, "tid", tid);
  cJSON_AddStringToObject(args, "name", name);
  cJSON_AddItemToObject(ev, "args", args);
  return ev;
}

static cJSON *task_event(const pcgc_graph *g, const pcgc_tasks *t, int32_t i) {
  int k = t->kind[i];
  const char *node = t->node[i] >= 0 ? g->nodes[t->node[i]].name : "";
  char name[320];
  if (k == PCGC_TASK_COLLECTIVE)
    snprintf(name, sizeof name, "%s %.256s", coll_name(t->coll[i]), node);
  else if (k == PCGC_TASK_TRANSFER)
    snprintf(name, sizeof name, "%s %.256s -> %d", t->phase[i] == PCGC_PHASE_BACKWARD ? "grad" : "send", node, t->peer[i]);
  else
    snprintf(name, sizeof name, "%.256s", node);
  cJSON *ev = cJSON_CreateObject(), *args = cJSON_CreateObject();
  cJSON_AddStringToObject(ev, "name", name);
  cJSON_AddStringToObject(ev, "cat", pcgc_task_kind_name((pcgc_task_kind)k));
  cJSON_AddStringToObject(ev, "ph", "X");
  cJSON_AddNumberToObject(ev, "ts", t->start[i] * 1e6);
  cJSON_AddNumberToObject(ev, "dur", t->dur[i] * 1e6);
  cJSON_AddNumberToObject(ev, "pid", t->dev[i]);
  cJSON_AddNumberToObject(ev, "tid", pcgc_task_is_compute(k) ? 0 : 1);
  if (t->node[i] >= 0) cJSON_AddStringToObject(args, "op", pcgc_op_name(g->nodes[t->node[i]].kind));
  cJSON_AddNumberToObject(args, "piece", t->piece[i]);
  cJSON_AddNumberToObject(args, "micro_batch", t->micro[i]);
  if (k == PCGC_TASK_TRANSFER) cJSON_AddNumberToObject(args, "to", t->peer[i]);
  if (k == PCGC_TASK_COLLECTIVE) cJSON_AddNumberToObject(args, "devices", t->peer[i]);
  if (k == PCGC_TASK_TRANSFER || k == PCGC_TASK_COLLECTIVE) cJSON_AddNumberToObject(args, "bytes", t->bytes[i]);
  cJSON_AddItemToObject(ev, "args", args);
  return ev;
}

pcgc_status pcgc_tasks_write_trace(const char *path, const pcgc_graph *g, const pcgc_machine *m,
                                  const pcgc_tasks *t, pcgc_error *err) {
  size_t n = strlen(path);
  char *tmp = malloc(n + 5);
  if (!tmp) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  memcpy(tmp, path, n);
  memcpy(tmp + n, ".tmp", 5);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    pcgc_error_set(err, PCGC_ERR_IO, "cannot write the trace '%s': %s", tmp, strerror(errno));
    free(tmp);
    return PCGC_ERR_IO;
  }
  bool ok = fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", f) >= 0, first = true;
  int D = pcgc_machine_num_devices(m);
  for (int d = 0; ok && d < D; d++) {
    char name[64];
    snprintf(name, sizeof name, "device %d (node %d)", d, pcgc_machine_node_of(m, d));
    ok = put_event(f, meta("process_name", d, 0, name), &first) &&
         put_event(f, meta("thread_name", d, 0, "compute"), &first) &&
         put_event(f, meta("thread_name", d, 1, "communication"), &first);
  }
  for (int32_t i = 0; ok && i < t->n; i++)
    if (t->kind[i] != PCGC_TASK_JOIN) ok = put_event(f, task_event(g, t, i), &first);
  ok = ok && fputs("\n]}\n", f) >= 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
  int saved = errno;
  ok = fclose(f) == 0 && ok;
  if (ok && rename(tmp, path) != 0) {
    saved = errno;
    ok = false;
  }
  if (!ok) {
    remove(tmp);
    pcgc_error_set(err, PCGC_ERR_IO, "cannot write the trace '%s': %s", path, strerror(saved ? saved : EIO));
  }
  free(tmp);
  return ok ? PCGC_OK : PCGC_ERR_IO;
}
