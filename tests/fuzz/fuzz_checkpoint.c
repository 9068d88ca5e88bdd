/*
 * fuzz_checkpoint.c — libFuzzer target for the readers of `pcgc run`'s
 * files: checkpoints (pcgc_checkpoint_parse, docs/checkpoint-format.md)
 * and, on the same bytes, .npy headers (pcgc_npy_parse, --data). Besides memory
 * safety it checks that an accepted checkpoint is consistent (every
 * tensor's arrays allocated, sizes matching its dims), and that a file
 * refused says which line. The checksum makes almost every mutation a
 * refusal, so each input is also tried with its checksum recomputed, which
 * lets the fuzzer reach the header and data parsing behind it.
 *
 * Build: CC=clang-14 cmake -S . -B build-fuzz -DPCGC_FUZZ=ON && cmake --build build-fuzz
 * Run:   build-fuzz/fuzz_checkpoint tests/fuzz/corpus/checkpoint -max_total_time=30
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "checkpoint.h"
#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one(const char *b, size_t n) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_checkpoint *c = NULL;
  pcgc_status st = pcgc_checkpoint_parse(b, n, "fuzz.ckpt", &c, &err);
  if (st == PCGC_OK) {
    if (!c) abort();
    for (int i = 0; i < c->n; i++) {
      int64_t numel = 1;
      for (int d = 0; d < c->t[i].rank; d++) numel *= c->t[i].dims[d];
      if (numel != c->t[i].numel || c->t[i].states < 1 || c->t[i].states > 3) abort();
      for (int s = 0; s < c->t[i].states; s++)
        if (!c->t[i].data[s]) abort();
    }
    pcgc_checkpoint_free(c);
  } else if (c || (st == PCGC_ERR_PARSE && !strstr(err.message, "fuzz.ckpt:"))) {
    fprintf(stderr, "fuzz_checkpoint: refusal without a place: %s\n", err.message);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  one((const char *)data, size);
  pcgc_npy f;
  pcgc_error err;
  pcgc_error_clear(&err);
  if (pcgc_npy_parse((const char *)data, size, (int64_t)size, "fuzz.npy", &f, &err) == PCGC_OK &&
      (f.rank < 1 || f.elem < 1 || f.data_offset + f.shape[0] * f.row_elems * f.elem > (int64_t)size))
    abort(); /* an accepted header promises no more than the file holds */
  if (size >= 8) { /* the same bytes with a valid checksum */
    char *b = malloc(size);
    if (!b) return 0;
    memcpy(b, data, size);
    uint64_t h = XXH3_64bits(b, size - 8);
    for (int k = 0; k < 8; k++) b[size - 8 + (size_t)k] = (char)(h >> (8 * k));
    one(b, size);
    free(b);
  }
  return 0;
}
