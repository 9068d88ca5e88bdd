/*
 * checkpoint.h — training checkpoints (docs/checkpoint-format.md): the
 * logical weights and optimizer state of a model after some step, one
 * whole tensor per weight, not per shard, so a plan of any strategy of the
 * same model can load it.
 *
 * The file: a text header, the f32 data, an XXH3-64 of everything before it.
 *
 *     pcgc-checkpoint 1
 *     model mlp
 *     step 10
 *     seed 1
 *     optimizer adam
 *     tensors 6
 *     h1.weight 2 784 512 3        name, rank, dims, states (1 weight, 2 +m, 3 +m +v)
 *     ...
 *     data
 *     <weight, m, v of each tensor in order: little-endian f32>
 *     <8 bytes: XXH3-64 of every byte above, little-endian>
 *
 * Writing is atomic (a temporary file beside it, fsync, rename), so a
 * crash never leaves a half-written checkpoint under the final name; the
 * directory's `latest` file names the newest one and is replaced the same
 * way after it.
 */
#ifndef PCGC_CHECKPOINT_H
#define PCGC_CHECKPOINT_H

#include <stdint.h>

#include "pcg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PCGC_CKPT_NAME_MAX 256

typedef struct pcgc_ckpt_tensor {
  char name[PCGC_CKPT_NAME_MAX];
  int rank;
  int64_t dims[PCGC_MAX_RANK];
  int64_t numel;
  int states;        /* 1: the weight; 2: and its first moment; 3: and its second */
  float *data[3];    /* [states] arrays of numel (owned) */
} pcgc_ckpt_tensor;

typedef struct pcgc_checkpoint {
  char model[PCGC_CKPT_NAME_MAX];
  int64_t step;      /* steps trained */
  uint64_t seed;
  char optimizer[16];/* "sgd", "momentum", "adam" */
  int n;
  pcgc_ckpt_tensor *t;
} pcgc_checkpoint;

/* An empty checkpoint with room for n tensors (all zero); NULL when out of memory. */
pcgc_checkpoint *pcgc_checkpoint_new(int n);
void pcgc_checkpoint_free(pcgc_checkpoint *c); /* accepts NULL */
/* Sets tensor i's name and shape and allocates its `states` arrays (zeroed). */
pcgc_status pcgc_checkpoint_tensor_init(pcgc_checkpoint *c, int i, const char *name, int rank, const int64_t *dims,
                                        int states, pcgc_error *err);
/* The tensor named `name`, or NULL. */
const pcgc_ckpt_tensor *pcgc_checkpoint_find(const pcgc_checkpoint *c, const char *name);

/* Writes c as DIR/step-NNNNNNNN.ckpt and then DIR/latest, both atomically;
 * creates DIR if missing. path (may be NULL) receives the file written. */
pcgc_status pcgc_checkpoint_save(const char *dir, const pcgc_checkpoint *c, char *path, size_t path_size,
                                 pcgc_error *err);
/* Parses a checkpoint file's bytes (path names it in messages). Every
 * defect (a wrong magic, a cut-off file, a bad checksum, a malformed
 * header line) is PCGC_ERR_PARSE naming the file and what to do. */
pcgc_status pcgc_checkpoint_parse(const char *bytes, size_t len, const char *path, pcgc_checkpoint **out,
                                  pcgc_error *err);
pcgc_status pcgc_checkpoint_read(const char *path, pcgc_checkpoint **out, pcgc_error *err);
/* The newest checkpoint of DIR (its `latest` file): its path. PCGC_ERR_IO
 * when DIR holds none. */
pcgc_status pcgc_checkpoint_latest(const char *dir, char *path, size_t path_size, pcgc_error *err);

#ifdef __cplusplus
}
#endif
#endif /* PCGC_CHECKPOINT_H */
