/*
 * toy_machine.h — machines written inline for the simulator tests
 * (tests/search/test_sim.c, tests/codegen/test_predict.c): a machine file's
 * text parsed, and the toy machine whose numbers the hand-computed times use.
 * Static functions only: each test program includes it once.
 */
#ifndef PCGC_TESTS_TOY_MACHINE_H
#define PCGC_TESTS_TOY_MACHINE_H

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "search.h"

static pcgc_machine machine_text(const char *text) {
  pcgc_machine m;
  pcgc_error err = {0};
  ck_assert_msg(pcgc_machine_parse(text, strlen(text), "inline.machine", &m, &err) == PCGC_OK, "%s", err.message);
  return m;
}

/* 1 node x n devices: 10 TFLOP/s, 1 TB/s memory, 100 GB/s links with 1 us latency, 5 us launches */
static pcgc_machine toy_machine(int n, const char *memory) {
  char text[1024];
  snprintf(text, sizeof text,
           "name toy\nnodes 1\ndevices_per_node %d\ndevice.flops.f32 10 TFLOP/s\ndevice.memory %s\n"
           "device.memory_bandwidth 1 TB/s\ndevice.launch_overhead 5 us\nintra.bandwidth 100 GB/s\n"
           "intra.latency 1 us\n",
           n, memory);
  return machine_text(text);
}

#endif
