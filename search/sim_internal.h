/*
 * sim_internal.h — private to the simulator (sim.c builds and runs the task
 * graph, sim_report.c prints results and writes Chrome traces): the task
 * arrays, one entry per task, structure-of-arrays so the event loop touches
 * only what it needs.
 */
#ifndef PCGC_SEARCH_SIM_INTERNAL_H
#define PCGC_SEARCH_SIM_INTERNAL_H

#include <stdint.h>

#include "search.h"

/* Phase of the iteration a task belongs to. */
enum { PCGC__SIM_FWD, PCGC__SIM_BWD, PCGC__SIM_UPDATE };

/* The reduce collective (timed as an all-reduce), beside pcgc_collective. */
#define PCGC__COLL_REDUCE PCGC_COLL_COUNT

typedef struct pcgc__sim_tasks {
  int32_t n, cap;
  double *dur;       /* s */
  uint8_t *kind;     /* pcgc_task_kind */
  uint8_t *phase;    /* PCGC__SIM_* */
  uint8_t *coll;     /* collectives: pcgc_collective or PCGC__COLL_REDUCE */
  int32_t *dev;      /* compute: its device; transfer: the sender; collective: its first device */
  int32_t *peer;     /* transfer: the receiver; collective: the number of devices */
  int32_t *node;     /* the graph node it belongs to (-1: none) */
  int32_t *piece;    /* output piece (-1: none) */
  int32_t *micro;    /* micro-batch */
  int32_t *res_off;  /* communication: resources res[res_off .. res_off + res_n) */
  int32_t *res_n;
  double *bytes;     /* communication: bytes of the piece moved */
  double *start;     /* filled by the event loop */
  int32_t *res;
  int64_t n_res, cap_res;
} pcgc__sim_tasks;

/* Frees every array of T (NULL ones too) and zeroes it. */
void pcgc__sim_tasks_release(pcgc__sim_tasks *T);

static inline bool pcgc__task_is_compute(int kind) {
  return kind == PCGC_TASK_FORWARD || kind == PCGC_TASK_BACKWARD || kind == PCGC_TASK_ADD ||
         kind == PCGC_TASK_OPTIMIZER;
}

/* An ordinary op's piece-to-piece map in closed form (sim.c explains why it
 * exists): in_piece(p) = sum_j c_j w[j][i] + g[s * n_in + i] + r for output
 * piece p = (c, s, r). */
typedef struct pcgc__piece_map {
  int64_t w[PCGC_MAX_RANK][PCGC_VARIADIC];
  int64_t *g;       /* [sum][n_in], owned; free(g) when done */
  int64_t gcap;
} pcgc__piece_map;

/* Fills pm for node n (input types tin); false when the closed form does
 * not reproduce pcgc_op_piece_inputs on the corner pieces, or (unless
 * `always`) when the op has too few pieces for it to pay. */
bool pcgc__piece_map_build(pcgc__piece_map *pm, const pcgc_node *n, const pcgc_ptensor *tin, bool always);
void pcgc__piece_map_apply(const pcgc__piece_map *pm, const pcgc_node *n, int64_t p, int64_t *in_piece);

/* Pipeline stages from the span of topological positions of the pipelined
 * ops each device runs (first[d] < 0: none): devices whose spans overlap
 * work on the same layers (the tensor-parallel ranks of a stage, whose first
 * ops differ, and the data-parallel copies) and share a stage; stages are
 * numbered in the order of their spans. stage[d] = -1 for devices without
 * one; tmp has room for D ints. Returns the number of stages (1 if none).
 * The simulator and codegen both use it, so 1F1B holds the same
 * micro-batches in flight in both. */
int pcgc__pipeline_stages(int D, const int *first, const int *last, int *stage, int *tmp);

/* Writes every task but the joins as a Chrome trace (JSON object format):
 * one process per device, compute on thread 0, communication on thread 1
 * (transfers on the sender, collectives on their first device). Atomic:
 * written to PATH.tmp, flushed, fsync'ed, renamed over PATH. */
pcgc_status pcgc__sim_write_trace(const char *path, const pcgc_graph *g, const pcgc_machine *m,
                                  const pcgc__sim_tasks *t, pcgc_error *err);

/* Writes a JSON document (and a final newline) to `path` atomically
 * (search/profile.c; profile databases and strategy files). */
struct cJSON;
pcgc_status pcgc__write_json(const struct cJSON *root, const char *path, pcgc_error *err);

/* The pieces a node reads (search/mapping.c): piece p of node n reads piece
 * q of producer src, `bytes` of it; only producers that are not resident
 * (res[src] false: sources and the parallel ops that only distribute them
 * are placed by their readers). Used by the view placements. */
typedef struct pcgc__read {
  int64_t p;
  int src;
  int64_t q;
  double bytes;
} pcgc__read;

typedef struct pcgc__reads {
  pcgc__read *r;
  int64_t n, cap;
  pcgc__piece_map pm;
} pcgc__reads;

pcgc_status pcgc__collect_reads(pcgc__reads *R, const pcgc_graph *g, const bool *res, const pcgc_node *n,
                                pcgc_error *err);
void pcgc__reads_destroy(pcgc__reads *R);

/* Monotonic wall-clock seconds (search/sim.c), for timings and time limits. */
double pcgc__now(void);

/* res[node] for every node of g, visited in topological order `order`: a
 * source, or a parallel operator whose input is resident (it only
 * distributes a source): placed where it is read, nothing computed
 * (search/mapping.c). */
void pcgc__find_resident(const pcgc_graph *g, const int *order, bool *res);

#endif
