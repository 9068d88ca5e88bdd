/*
 * fuzz_machine.c — libFuzzer target for the machine-file reader: parses the
 * input bytes (pcgc_machine_parse) and, when that succeeds, checks two
 * properties besides memory safety:
 *   - the canonical text (pcgc_machine_format) parses back to an equal
 *     machine;
 *   - the cost model gives no NaN and no negative time on it: a roofline,
 *     every collective by every algorithm over the whole machine, and a
 *     point-to-point transfer within and across nodes.
 * A failed property aborts, which libFuzzer reports with the input.
 *
 * Build: CC=clang-14 cmake -S . -B build-fuzz -DPCGC_FUZZ=ON && cmake --build build-fuzz
 * Run:   build-fuzz/fuzz_machine tests/fuzz/corpus/machine -max_total_time=30
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "search.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_time(double t, const char *what) {
  if (isnan(t) || t < 0) {
    fprintf(stderr, "fuzz_machine: %s gave %g\n", what, t);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pcgc_error err;
  pcgc_machine m, back;
  if (pcgc_machine_parse((const char *)data, size, "fuzz.machine", &m, &err) != PCGC_OK) {
    if (err.line < 1 || err.col < 1) {
      fprintf(stderr, "fuzz_machine: error without a position: %s\n", err.message);
      abort();
    }
    return 0;
  }
  static char text[8192];
  int n = pcgc_machine_format(text, sizeof text, &m);
  if (n <= 0 || (size_t)n >= sizeof text) abort();
  if (pcgc_machine_parse(text, (size_t)n, "fuzz.machine", &back, &err) != PCGC_OK) {
    fprintf(stderr, "fuzz_machine: canonical text does not parse: %d:%d: %s\n%s", err.line, err.col,
            err.message, text);
    abort();
  }
  if (!pcgc_machine_equal(&m, &back)) {
    fprintf(stderr, "fuzz_machine: canonical text gives another machine:\n%s", text);
    abort();
  }
  check_time(pcgc_cost_roofline(&m, PCGC_OP_LINEAR, PCGC_BF16, 1e12, 1e9), "roofline");
  pcgc_comm_group all = {m.nodes, m.devices_per_node, 1};
  for (int c = 0; c < PCGC_COLL_COUNT; c++)
    for (int a = 0; a < PCGC_ALGO_COUNT; a++)
      check_time(pcgc_comm_time(&m, (pcgc_collective)c, (pcgc_comm_algo)a, all, 1e8), "collective");
  check_time(pcgc_comm_p2p_time(&m, true, m.devices_per_node, 1e6), "p2p intra");
  check_time(pcgc_comm_p2p_time(&m, false, m.devices_per_node, 1e6), "p2p inter");
  return 0;
}
