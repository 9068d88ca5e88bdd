/*
 * ctl.h — the control plane of a run: how the processes that run one plan
 * find each other and agree, beside the data path (the program's messages and
 * collectives go through host MPI or the backend's communicators, NCCL).
 *
 * Three transports, one interface:
 *   - solo: one process, nothing to agree on;
 *   - MPI: a duplicate of MPI_COMM_WORLD (its tags never meet the program's);
 *   - TCP: for launchers without MPI (torchrun, Kubernetes job sets, a shell
 *     loop over ssh). Rank 0 listens on the rendezvous port, every other rank
 *     connects to it and says who it is (rank, size, the plan's digest); the
 *     connections stay open and carry every later operation, star-shaped
 *     around rank 0. What a GPU run then needs to agree on is small: the
 *     NCCL communicators' ids, error flags, the loss, traces and (for --check,
 *     --save-weights and checkpoints) the weights gathered to rank 0.
 *
 * Every operation is collective (all ranks call it in the same order), except
 * pcgc_ctl_send0/pcgc_ctl_recv, a rank's bytes to rank 0. Each TCP frame
 * carries its operation and length, so ranks that disagree about where they
 * are fail with a message instead of reading each other's bytes.
 *
 * The environment of a TCP run (pcgc_rendezvous_from_env):
 *   PCGC_RENDEZVOUS=HOST:PORT   rank 0's address ([v6addr]:PORT too)
 *   PCGC_RANK, PCGC_WORLD_SIZE  this process and how many (else RANK, WORLD_SIZE, as torchrun sets)
 *   PCGC_LOCAL_RANK             its GPU on the node (else LOCAL_RANK; default: the rank)
 *   PCGC_RENDEZVOUS_TIMEOUT     seconds to wait for every process to join (default 300)
 */
#ifndef PCGC_CTL_H
#define PCGC_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pcg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pcgc_ctl_kind { PCGC_CTL_SOLO, PCGC_CTL_MPI, PCGC_CTL_TCP } pcgc_ctl_kind;

typedef struct pcgc_ctl {
  pcgc_ctl_kind kind;
  int rank, size;
  void *impl; /* the transport's state */
} pcgc_ctl;

/* Where and how a TCP run meets. */
typedef struct pcgc_rendezvous {
  char host[256];
  int port;
  int rank, size, local_rank, local_size; /* local_size 0: not known */
  double timeout_s;
} pcgc_rendezvous;

/* Reads PCGC_RENDEZVOUS and the variables beside it. *present is false (and
 * PCGC_OK returned) when PCGC_RENDEZVOUS is unset; a malformed value is an
 * error that names the variable. */
pcgc_status pcgc_rendezvous_from_env(pcgc_rendezvous *rv, bool *present, pcgc_error *err);

void pcgc_ctl_init_solo(pcgc_ctl *c);
/* MPI must be initialised; collective over MPI_COMM_WORLD. */
pcgc_status pcgc_ctl_init_mpi(pcgc_ctl *c, pcgc_error *err);
/* Meets the other rv->size - 1 processes within rv->timeout_s. `token` (the
 * plan's digest) must be the same in every process: a process started with
 * another plan is turned away. */
pcgc_status pcgc_ctl_init_tcp(pcgc_ctl *c, const pcgc_rendezvous *rv, uint64_t token, pcgc_error *err);
void pcgc_ctl_destroy(pcgc_ctl *c);

/* Rank 0's n bytes of buf to every rank. */
pcgc_status pcgc_ctl_bcast(pcgc_ctl *c, void *buf, size_t n, pcgc_error *err);
/* Rank r's n bytes to rank 0, which receives counts[r] bytes from each rank
 * into `all` in rank order (all, counts: rank 0 only). */
pcgc_status pcgc_ctl_gather(pcgc_ctl *c, const void *mine, size_t n, void *all, const size_t *counts,
                            pcgc_error *err);
/* Rank 0's counts[r] bytes of `all` (in rank order) to each rank r, which
 * receives n of them. */
pcgc_status pcgc_ctl_scatter(pcgc_ctl *c, const void *all, const size_t *counts, void *mine, size_t n,
                             pcgc_error *err);
/* Sum of every rank's v, in rank order, at rank 0 (*total; others: their v). */
pcgc_status pcgc_ctl_sum(pcgc_ctl *c, double v, double *total, pcgc_error *err);
pcgc_status pcgc_ctl_barrier(pcgc_ctl *c, pcgc_error *err);
/* Point to point with rank 0: a rank > 0 sends n bytes; rank 0 receives
 * them from rank `from` (in the order that rank sent them). */
pcgc_status pcgc_ctl_send0(pcgc_ctl *c, const void *buf, size_t n, pcgc_error *err);
pcgc_status pcgc_ctl_recv(pcgc_ctl *c, int from, void *buf, size_t n, pcgc_error *err);

#ifdef __cplusplus
}
#endif
#endif
