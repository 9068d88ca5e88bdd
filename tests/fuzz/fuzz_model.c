/*
 * fuzz_model.c — libFuzzer target for the model-file reader: parses the input
 * bytes as a model (pcgc_model_parse) and, when that succeeds, hashes the
 * graph (pcgc_graph_hash) so that everything the parser builds is also walked.
 * Any crash, sanitizer report or leak is a bug; errors are expected.
 *
 * Build: CC=clang-14 cmake -S . -B build-fuzz -DPCGC_FUZZ=ON && cmake --build build-fuzz
 * Run:   build-fuzz/fuzz_model tests/fuzz/corpus/model -max_total_time=120
 */
#include <stddef.h>
#include <stdint.h>

#include "pcg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pcgc_error err;
  pcgc_graph *g = pcgc_model_parse((const char *)data, size, "fuzz.pcg", NULL, &err);
  if (g) {
    /* pcgc_graph_hash refines colours round by round, which is slow on the
     * long chains a fuzzer makes (a 5,000-node chain takes 1.5 s); hash graphs of
     * every realistic size */
    if (g->n_nodes <= 2000) {
      volatile uint64_t h = pcgc_graph_hash(g);
      (void)h;
    }
    pcgc_graph_free(g);
  }
  return 0;
}
