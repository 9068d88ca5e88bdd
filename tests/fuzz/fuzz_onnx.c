/*
 * fuzz_onnx.c — libFuzzer target for the ONNX importer: parses the input
 * bytes as an ONNX model (pcgc_onnx_parse, no folder, so external data is
 * refused without touching the file system) and, when that succeeds,
 * validates and hashes the graph so that everything the importer built is
 * also walked. Any crash, sanitizer report or leak is a bug; errors are
 * expected.
 *
 * Build: CC=clang-14 cmake -S . -B build-fuzz -DPCGC_FUZZ=ON -DWITH_CUDA=OFF && cmake --build build-fuzz
 * Run:   build-fuzz/fuzz_onnx NEW_CORPUS tests/fuzz/corpus/onnx -max_total_time=120
 *
 * The seed corpus holds the small models of tests/onnx/models and the
 * malformed files of tests/data/bad-onnx (copied, so the corpus is one
 * folder of small files).
 */
#include <stddef.h>
#include <stdint.h>

#include "onnx_import.h"
#include "pcg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pcgc_error err;
  /* a batch other than 1 exercises the symbolic-dimension path */
  pcgc_onnx_options opts = {.batch = 3};
  pcgc_graph *g = pcgc_onnx_parse(data, size, "fuzz.onnx", NULL, &opts, &err);
  if (g) {
    if (pcgc_graph_validate(g, &err) != PCGC_OK) __builtin_trap(); /* an import must be valid */
    /* see fuzz_model.c: hashing is slow on very long chains */
    if (g->n_nodes <= 2000) {
      volatile uint64_t h = pcgc_graph_hash(g);
      (void)h;
    }
    pcgc_graph_free(g);
  }
  return 0;
}
