/*
 * fuzz_strategy.c — libFuzzer target for the strategy-file reader
 * (pcgc_strategy_file_parse, docs/plan-format.md) and, on the same
 * bytes, the profile-database reader (pcgc_profile_parse): both are JSON
 * read with positions. Besides memory safety it checks that every refusal
 * carries a position, and that an accepted strategy's graph is typed and
 * its views are in range of the 8 devices it was checked against.
 *
 * Build: CC=clang-14 cmake -S . -B build-fuzz -DPCGC_FUZZ=ON && cmake --build build-fuzz
 * Run:   build-fuzz/fuzz_strategy tests/fuzz/corpus/strategy -max_total_time=30
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "search.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_graph *g = NULL;
  pcgc_mapping mp;
  pcgc_strategy_info info;
  pcgc_status st = pcgc_strategy_file_parse((const char *)data, size, "fuzz.json", 8, &g, &mp, &info, &err);
  if (st == PCGC_OK) {
    if (!g || mp.n_nodes != g->n_nodes) abort();
    for (int i = 0; i < g->n_nodes; i++) {
      if (!g->nodes[i].typed) abort();
      if (mp.view[i].start < 0 || mp.view[i].start >= 8 || mp.view[i].stride < 0) {
        fprintf(stderr, "fuzz_strategy: view {%d, %d} of '%s' out of range\n", mp.view[i].start, mp.view[i].stride,
                g->nodes[i].name);
        abort();
      }
    }
    pcgc_mapping_destroy(&mp);
    pcgc_graph_free(g);
  } else if (st == PCGC_ERR_PARSE && (err.line < 1 || err.col < 1)) {
    fprintf(stderr, "fuzz_strategy: error without a position: %s\n", err.message);
    abort();
  }
  pcgc_profile *p = NULL;
  pcgc_error_clear(&err);
  if (pcgc_profile_parse((const char *)data, size, "fuzz.json", &p, &err) == PCGC_OK) pcgc_profile_free(p);
  return 0;
}
