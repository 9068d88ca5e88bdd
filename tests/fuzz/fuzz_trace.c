/*
 * fuzz_trace.c — libFuzzer target for the joint search's trace lines, which
 * plan files carry and `pcgc verify` replays (pcgc_joint_replay; docs/plan-format.md,
 * "Derivation"): the input bytes, split at newlines, replayed as a trace on a
 * fixed data-parallel graph with an inception-style region (three towers
 * from one input, concatenated) over 4 devices, with one rule. Rule lines
 * ("RULE P=V... at NODE..." / "everywhere N") and region moves ("@branches
 * S... at CONCAT") both parse here. Besides memory safety it checks that a
 * replay that succeeds gives a graph that validates, and that one that fails
 * says why.
 *
 * Build: CC=clang-14 cmake -S . -B build-fuzz -DPCGC_FUZZ=ON -DWITH_CUDA=OFF && cmake --build build-fuzz
 * Run:   build-fuzz/fuzz_trace NEW_CORPUS tests/fuzz/corpus/trace
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search.h"
#include "substitutions.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *MODEL =
    "model towers\n"
    "input x: f32[8, 4, 6, 6]\n"
    "input t: f32[8, 12, 6, 6]\n"
    "weight wa: f32[4, 4, 1, 1]\n"
    "weight wb: f32[4, 4, 3, 3]\n"
    "weight wc: f32[4, 4, 1, 1]\n"
    "xp = partition(x, dim=0, degree=4)\n"
    "tp = partition(t, dim=0, degree=4)\n"
    "ra = replicate(wa, degree=4)\n"
    "rb = replicate(wb, degree=4)\n"
    "rc = replicate(wc, degree=4)\n"
    "a = conv2d(xp, ra, stride=[1, 1], padding=[0, 0], dilation=[1, 1], groups=1, act=relu)\n"
    "b = conv2d(xp, rb, stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1, act=none)\n"
    "c1 = pool2d(xp, kind=avg, kernel=[3, 3], stride=[1, 1], padding=[1, 1], global=false)\n"
    "c = conv2d(c1, rc, stride=[1, 1], padding=[0, 0], dilation=[1, 1], groups=1, act=none)\n"
    "y = concat(a, b, c, axis=1)\n"
    "loss = mse(y, tp)\n";

static const char *RULES = "rule combine_partition_cancel(d: degree, k: dim) {\n"
                           "  match {\n"
                           "    input x: {deg[k] = e};\n"
                           "    c = combine(x, dim=k, degree=d);\n"
                           "    p = partition(c, dim=k, degree=d);\n"
                           "    yield p;\n"
                           "  }\n"
                           "  where { e % d == 0; }\n"
                           "  rewrite {\n"
                           "    yield x;\n"
                           "  }\n"
                           "}\n";

static const char *MACHINE = "name fuzz4\nnodes 1\ndevices_per_node 4\ndevice.kind gpu\n"
                             "device.flops.f32 10 TFLOP/s\ndevice.memory 16 GiB\n"
                             "device.memory_bandwidth 1 TB/s\nintra.bandwidth 100 GB/s\nintra.latency 2 us\n";

static pcgc_graph *start;
static pcgc_ruleset *rules;
static pcgc_machine machine;

static void setup(void) {
  pcgc_error err = {0};
  start = pcgc_model_parse(MODEL, strlen(MODEL), "towers.pcg", NULL, &err);
  rules = pcgc_ruleset_new();
  if (!start || pcgc_graph_infer(start, &err) != PCGC_OK || !rules ||
      pcgc_ruleset_parse(rules, RULES, strlen(RULES), "fuzz.rules", &err) != PCGC_OK ||
      pcgc_machine_parse(MACHINE, strlen(MACHINE), "fuzz4.machine", &machine, &err) != PCGC_OK) {
    fprintf(stderr, "fuzz_trace: setup: %s\n", err.message);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!start) setup();
  if (size > 8192 || memchr(data, 0, size)) return 0;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  const char *lines[64];
  int n = 0;
  for (char *p = text; n < 64;) {
    lines[n++] = p;
    char *e = strchr(p, '\n');
    if (!e) break;
    *e = 0;
    p = e + 1;
  }
  pcgc_graph *out = NULL;
  pcgc_error err = {0};
  pcgc_status st = pcgc_joint_replay(start, n, lines, &machine, rules, &out, &err);
  if (st == PCGC_OK) {
    if (!out || pcgc_graph_validate(out, &err) != PCGC_OK) {
      fprintf(stderr, "fuzz_trace: a replayed trace gave a graph that does not validate: %s\n", err.message);
      abort();
    }
  } else if (out || !err.message[0]) {
    fprintf(stderr, "fuzz_trace: a refused trace left a graph or no reason\n");
    abort();
  }
  pcgc_graph_free(out);
  free(text);
  return 0;
}
