/*
 * test_machine.c — machine files (cost/machine.c): every preset in
 * machines/ loads by name with its published numbers and writes back to an
 * equal machine; every malformed file in tests/data/bad-machines fails at the
 * line:col its first line states, with that message, the source line and a
 * hint; units convert as docs/machine-format.md says; defaults apply; preset
 * lookup honours PCGC_MACHINES_DIR and suggests names; no prefix or byte
 * flip of a preset crashes the parser.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/expect_header.h"
#include "search.h"

#ifndef PCGC_SOURCE_DIR
#error "PCGC_SOURCE_DIR must be defined to the source tree"
#endif

#define GiB 1073741824.0
#define MACHINES PCGC_SOURCE_DIR "/machines"

/* ------------------------------------------------------------- helpers */

static void assert_close(double got, double want, const char *what) {
  ck_assert_msg(fabs(got - want) <= 1e-12 * fabs(want), "%s: got %.17g, want %.17g", what, got, want);
}

static pcgc_status parse(const char *text, pcgc_machine *m, pcgc_error *err) {
  return pcgc_machine_parse(text, strlen(text), "test.machine", m, err);
}

static void parse_ok(const char *text, pcgc_machine *m) {
  pcgc_error err = {0};
  pcgc_status s = parse(text, m, &err);
  if (s) pcgc_error_print(stderr, &err);
  ck_assert_msg(s == PCGC_OK, "parse failed: %d:%d: %s", err.line, err.col, err.message);
}

/* Parses `text`, which must fail at line:col with `msg` in the message and
 * `hint` (if not NULL) in the hint. */
static void expect_error(const char *text, int line, int col, const char *msg, const char *hint) {
  pcgc_error err = {0};
  pcgc_machine m;
  pcgc_status s = parse(text, &m, &err);
  ck_assert_msg(s == PCGC_ERR_PARSE, "expected an error containing '%s'", msg);
  ck_assert_int_eq(err.status, PCGC_ERR_PARSE);
  ck_assert_msg(err.line == line && err.col == col, "'%s': expected %d:%d, got %d:%d (%s)", msg, line, col,
                err.line, err.col, err.message);
  ck_assert_msg(strstr(err.message, msg) != NULL, "message '%s' lacks '%s'", err.message, msg);
  ck_assert_str_eq(err.file, "test.machine");
  ck_assert_msg(err.hint[0] != '\0', "error '%s' has no hint", err.message);
  if (hint) ck_assert_msg(strstr(err.hint, hint) != NULL, "hint '%s' lacks '%s'", err.hint, hint);
  ck_assert_int_eq(m.nodes, 0); /* zeroed on error */
}

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The smallest valid file, and the same with one more line. */
#define MINIMAL                    \
  "nodes 1\n"                      \
  "devices_per_node 1\n"           \
  "device.flops.f32 10 TFLOP/s\n"  \
  "device.memory 16 GiB\n"         \
  "device.memory_bandwidth 900 GB/s\n"

static char *read_all(const char *path, size_t *len) {
  pcgc_error err = {0};
  char *t = pcgc_read_file(path, len, &err);
  ck_assert_msg(t != NULL, "%s: %s", path, err.message);
  return t;
}

/* -------------------------------------------------------------- presets */

static void load_preset(const char *name, pcgc_machine *m) {
  pcgc_error err = {0};
  pcgc_status s = pcgc_machine_load(name, m, &err);
  if (s) pcgc_error_print(stderr, &err);
  ck_assert_msg(s == PCGC_OK, "%s: %s", name, err.message);
  ck_assert_str_eq(m->name, name);
  ck_assert_msg(m->description[0], "%s has no description", name);
}

START_TEST(preset_dgx_h100) {
  pcgc_machine m;
  load_preset("dgx-h100", &m);
  ck_assert_int_eq(m.nodes, 1);
  ck_assert_int_eq(m.devices_per_node, 8);
  ck_assert_int_eq(pcgc_machine_num_devices(&m), 8);
  ck_assert_int_eq(m.device.kind, PCGC_DEVICE_GPU);
  assert_close(m.device.flops[PCGC_BF16], 989e12, "bf16");
  assert_close(m.device.flops[PCGC_F16], 989e12, "f16");
  assert_close(m.device.flops[PCGC_F32], 67e12, "f32");
  assert_close(m.device.flops[PCGC_F64], 67e12, "f64");
  assert_close(m.device.flops[PCGC_I32], 67e12, "i32 copies f32");
  assert_close(m.device.memory, 80 * GiB, "memory");
  assert_close(pcgc_machine_usable_memory(&m), 79 * GiB, "usable memory");
  assert_close(m.device.memory_bandwidth, 3.35e12, "HBM3");
  assert_close(m.device.launch_overhead, 5e-6, "launch");
  assert_close(m.intra.bandwidth, 450e9, "NVLink 4 per direction");
  assert_close(m.intra.latency, 2e-6, "NVLink latency");
  ck_assert(!m.intra.shared);
  ck_assert(m.inter.bandwidth == 0);
}
END_TEST

START_TEST(preset_h100_4x8) {
  pcgc_machine m;
  load_preset("h100-4x8", &m);
  ck_assert_int_eq(m.nodes, 4);
  ck_assert_int_eq(m.devices_per_node, 8);
  ck_assert_int_eq(pcgc_machine_num_devices(&m), 32);
  assert_close(m.device.flops[PCGC_BF16], 989e12, "bf16");
  assert_close(m.intra.bandwidth, 450e9, "NVLink");
  assert_close(m.inter.bandwidth, 50e9, "400 Gb/s");
  assert_close(m.inter.latency, 5e-6, "IB latency");
  ck_assert(!m.inter.shared);
  ck_assert_int_eq(pcgc_machine_node_of(&m, 17), 2);
}
END_TEST

START_TEST(preset_summit) {
  pcgc_machine m;
  load_preset("summit-v100", &m);
  ck_assert_int_eq(m.nodes, 32);
  ck_assert_int_eq(m.devices_per_node, 6);
  ck_assert_int_eq(pcgc_machine_num_devices(&m), 192);
  assert_close(m.device.flops[PCGC_F32], 15.7e12, "f32");
  assert_close(m.device.flops[PCGC_F16], 125e12, "f16 tensor");
  assert_close(m.device.flops[PCGC_BF16], 15.7e12, "bf16 = f32 on V100");
  assert_close(m.device.flops[PCGC_F64], 7.8e12, "f64");
  assert_close(m.device.memory, 16 * GiB, "memory");
  assert_close(m.device.memory_bandwidth, 900e9, "HBM2");
  assert_close(m.intra.bandwidth, 50e9, "NVLink 2");
  ck_assert(!m.intra.shared);
  assert_close(m.inter.bandwidth, 25e9, "2 x 100 Gb/s");
  ck_assert(m.inter.shared);
}
END_TEST

START_TEST(preset_flexflow_clusters) {
  pcgc_machine m;
  load_preset("p100-4x4", &m);
  ck_assert_int_eq(pcgc_machine_num_devices(&m), 16);
  assert_close(m.device.flops[PCGC_F32], 10.6e12, "P100 f32");
  assert_close(m.device.flops[PCGC_F16], 21.2e12, "P100 f16");
  assert_close(m.device.memory_bandwidth, 732e9, "P100 HBM2");
  assert_close(m.device.memory, 16 * GiB, "P100 memory");
  assert_close(m.inter.bandwidth, 12.5e9, "100 Gb/s");
  ck_assert(m.inter.shared);

  load_preset("k80-16x4", &m);
  ck_assert_int_eq(m.nodes, 16);
  ck_assert_int_eq(m.devices_per_node, 4);
  assert_close(m.device.flops[PCGC_F32], 4.37e12, "GK210 f32");
  assert_close(m.device.flops[PCGC_F64], 1.46e12, "GK210 f64");
  assert_close(m.device.memory, 12 * GiB, "GK210 memory");
  assert_close(m.device.memory_bandwidth, 240e9, "GK210 GDDR5");
  assert_close(m.intra.bandwidth, 12e9, "PCIe 3.0 x16");
  assert_close(m.inter.bandwidth, 7e9, "56 Gb/s");
  ck_assert(m.inter.shared);
}
END_TEST

START_TEST(preset_cpu_local) {
  pcgc_machine m;
  load_preset("cpu-local", &m);
  ck_assert_int_eq(pcgc_machine_num_devices(&m), 1);
  ck_assert_int_eq(m.device.kind, PCGC_DEVICE_CPU);
  assert_close(m.device.flops[PCGC_F32], 210e9, "sgemm");
  assert_close(m.device.flops[PCGC_F64], 105e9, "dgemm");
  assert_close(m.device.memory, 24684092 * 1024.0, "MemTotal");
  assert_close(m.device.memory_bandwidth, 38e9, "triad");
  assert_close(m.device.launch_overhead, 0.3e-6, "launch");
  ck_assert(m.intra.bandwidth == 0 && m.inter.bandwidth == 0);
}
END_TEST

/* Every preset file: parses, and its canonical text parses back equal. */
START_TEST(presets_round_trip) {
  DIR *d = opendir(MACHINES);
  ck_assert_ptr_nonnull(d);
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!has_suffix(e->d_name, ".machine")) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", MACHINES, e->d_name);
    pcgc_machine m, back;
    pcgc_error err = {0};
    ck_assert_msg(pcgc_machine_load(path, &m, &err) == PCGC_OK, "%s: %s", e->d_name, err.message);
    int n = pcgc_machine_format(NULL, 0, &m);
    ck_assert_int_gt(n, 100);
    char *text = malloc((size_t)n + 1);
    ck_assert_int_eq(pcgc_machine_format(text, (size_t)n + 1, &m), n);
    ck_assert_int_eq((int)strlen(text), n);
    pcgc_status s = pcgc_machine_parse(text, (size_t)n, "back.machine", &back, &err);
    if (s) fprintf(stderr, "%s\n", text);
    ck_assert_msg(s == PCGC_OK, "%s: canonical text fails: %d:%d: %s", e->d_name, err.line, err.col, err.message);
    ck_assert_msg(pcgc_machine_equal(&m, &back), "%s: canonical text gives another machine:\n%s", e->d_name, text);
    /* a truncated buffer holds a prefix and is terminated */
    char small[16];
    ck_assert_int_eq(pcgc_machine_format(small, sizeof small, &m), n);
    ck_assert_int_eq((int)strlen(small), 15);
    free(text);
    count++;
  }
  closedir(d);
  ck_assert_int_ge(count, 6);
}
END_TEST

START_TEST(format_shows_units) {
  pcgc_machine m;
  load_preset("dgx-h100", &m);
  char buf[4096];
  pcgc_machine_format(buf, sizeof buf, &m);
  ck_assert_msg(strstr(buf, "device.memory 80 GiB\n"), "%s", buf);
  ck_assert_msg(strstr(buf, "device.flops.bf16 989 TFLOP/s\n"), "%s", buf);
  ck_assert_msg(strstr(buf, "device.memory_bandwidth 3.35 TB/s\n"), "%s", buf);
  ck_assert_msg(strstr(buf, "intra.bandwidth 450 GB/s\n"), "%s", buf);
  ck_assert_msg(strstr(buf, "device.launch_overhead 5 us\n"), "%s", buf);
  ck_assert_msg(strstr(buf, "# dgx-h100: 1 node x 8 devices = 8;"), "%s", buf);
}
END_TEST

/* --------------------------------------------------------- bad machines */

START_TEST(bad_machines) {
  const char *dir = PCGC_SOURCE_DIR "/tests/data/bad-machines";
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "cannot open %s", dir);
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!has_suffix(e->d_name, ".machine")) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    int line, col;
    char want[512];
    expect_header(path, e->d_name, &line, &col, want, sizeof want);
    pcgc_error err = {0};
    pcgc_machine m;
    pcgc_status s = pcgc_machine_load(path, &m, &err);
    ck_assert_msg(s == PCGC_ERR_PARSE, "%s: expected a parse error, got %d", e->d_name, s);
    ck_assert_msg(err.line == line && err.col == col, "%s: expected the error at %d:%d, got %d:%d: %s", e->d_name,
                  line, col, err.line, err.col, err.message);
    ck_assert_msg(strstr(err.message, want) != NULL, "%s: message '%s' lacks '%s'", e->d_name, err.message, want);
    ck_assert_msg(err.hint[0] != '\0', "%s: no hint for '%s'", e->d_name, err.message);
    ck_assert_msg(err.source_line[0] != '\0', "%s: no source line", e->d_name);
    ck_assert_msg(strcmp(err.file, path) == 0, "%s: error names file '%s'", e->d_name, err.file);
    /* the printed report: file:line:col, the line, a caret, the hint */
    char *out = NULL;
    size_t outlen = 0;
    FILE *mf = open_memstream(&out, &outlen);
    pcgc_error_print(mf, &err);
    fclose(mf);
    char head[4200];
    snprintf(head, sizeof head, "%s:%d:%d: error: ", path, line, col);
    ck_assert_msg(strncmp(out, head, strlen(head)) == 0, "%s: report starts '%.80s'", e->d_name, out);
    ck_assert_msg(strchr(out, '^') && strstr(out, "\nhint: "), "%s: report:\n%s", e->d_name, out);
    free(out);
    count++;
  }
  closedir(d);
  ck_assert_msg(count >= 12, "only %d malformed machines in %s", count, dir);
}
END_TEST

/* ----------------------------------------------------- inline errors */

START_TEST(errors_keys) {
  expect_error(MINIMAL "devices_per_nod 8\n", 6, 1, "unknown key 'devices_per_nod'", "did you mean 'devices_per_node'?");
  expect_error(MINIMAL "Device.memory_reserved 1 GiB\n", 6, 1, "unknown key", "'device.memory_reserved'");
  expect_error(MINIMAL "device.flops.fp16 20 TFLOP/s\n", 6, 1, "unknown key", "did you mean 'device.flops.f16'?");
  expect_error(MINIMAL "device.flops 20 TFLOP/s\n", 6, 1, "unknown key 'device.flops'",
               "device.flops.f32, device.flops.f16, device.flops.bf16, device.flops.f64");
  expect_error(MINIMAL "gpus 8\n", 6, 1, "unknown key 'gpus'", "devices_per_node");
  expect_error(MINIMAL "nodes 2\n", 6, 1, "duplicate key 'nodes'", "already set at line 1");
  expect_error("nodes=2\n", 1, 6, "unexpected '=' after key 'nodes'", "without '='");
  expect_error("nodes = 2\n", 1, 7, "unexpected '=' after key 'nodes'", "'nodes 4'");
  expect_error("device.memory: 80 GiB\n", 1, 14, "unexpected ':' after key 'device.memory'", NULL);
  expect_error("nodes\n", 1, 6, "missing value after 'nodes'", "'nodes 4'");
  expect_error("nodes   # four of them\n", 1, 6, "missing value after 'nodes'", NULL);
  expect_error("  8 nodes\n", 1, 3, "expected a key at the start of the line, got '8'", NULL);
  expect_error("nodes/2 4\n", 1, 6, "unexpected '/' after key 'nodes'", "space");
}
END_TEST

START_TEST(errors_values) {
  expect_error(MINIMAL "device.launch_overhead -5 us\n", 6, 24, "device.launch_overhead cannot be negative", NULL);
  expect_error("nodes -2\n", 1, 7, "nodes cannot be negative", NULL);
  expect_error("nodes 0\n", 1, 7, "nodes must be positive", NULL);
  expect_error("nodes 2.5\n", 1, 7, "nodes must be a whole number", NULL);
  expect_error("nodes 1e9\n", 1, 7, "nodes must be a whole number", NULL);
  expect_error("nodes 100000\n", 1, 7, "nodes is too large (at most 65536)", NULL);
  expect_error("devices_per_node 99999999999999999999999999999999999999999999999999999999999999999999\n", 1, 18,
               "too large", NULL);
  expect_error("nodes 4 GPUs\n", 1, 9, "unexpected 'GPUs' after the value of 'nodes'", "without a unit");
  expect_error("nodes four\n", 1, 7, "expected a whole number for nodes, got 'four'", NULL);
  expect_error("device.memory 0 GiB\n", 1, 15, "device.memory must be positive", NULL);
  expect_error("device.memory GiB\n", 1, 15, "expected a number for device.memory, got 'GiB'", "80 GiB");
  expect_error("device.memory 80\n", 1, 17, "missing unit after 80 for device.memory", "KiB, MiB, GiB");
  expect_error("device.memory 80 Gib\n", 1, 18, "unknown unit 'Gib' for device.memory", "did you mean 'GiB'?");
  expect_error("device.memory 80 GB/s\n", 1, 18, "'GB/s' is a bandwidth, but device.memory takes a size in bytes",
               NULL);
  expect_error("device.memory_bandwidth 3 TFLOP/s\n", 1, 27, "'TFLOP/s' is a FLOP rate", NULL);
  expect_error("inter.bandwidth 100 gb/s\n", 1, 21, "unknown unit 'gb/s'",
               "'GB/s' is bytes per second, 'Gb/s' bits per second");
  expect_error("intra.latency 2 usec\n", 1, 17, "unknown unit 'usec'", NULL);
  expect_error("device.memory 80 GiB per GPU\n", 1, 22, "unexpected 'per' after the value", "comments start with '#'");
  expect_error("device.memory 1e40 GiB\n", 1, 15, "number out of range", NULL);
  expect_error("device.launch_overhead 1e-40 s\n", 1, 24, "out of range", NULL);
  expect_error("inter.shared maybe\n", 1, 14, "'maybe' is not a value of inter.shared", "yes");
  expect_error("inter.shared ye\n", 1, 14, "not a value", "did you mean 'yes'?");
  expect_error("device.kind tpu\n", 1, 13, "'tpu' is not a value of device.kind", "did you mean 'gpu'?");
  expect_error("name dgx/h100\n", 1, 9, "'/' cannot appear in a machine name", NULL);
  expect_error("name dgx h100\n", 1, 10, "unexpected 'h100'", NULL);
  expect_error("intra.bandwidth 450 GB\xe2\x88\x95s\n", 1, 23, "non-ASCII character", "ASCII");
  expect_error("nodes 1\x01\n", 1, 8, "control character 0x01", NULL);
  /* a NUL byte (strlen would stop there) */
  pcgc_error err = {0};
  pcgc_machine m;
  ck_assert_int_eq(pcgc_machine_parse("nodes 1\n\0nodes 2\n", 17, "test.machine", &m, &err), PCGC_ERR_PARSE);
  ck_assert_int_eq(err.line, 2);
  ck_assert_int_eq(err.col, 1);
  ck_assert_msg(strstr(err.message, "NUL byte"), "%s", err.message);
}
END_TEST

START_TEST(errors_missing) {
  /* missing keys point just past the last line with text */
  expect_error("nodes 1\ndevices_per_node 1\n# the device:\n", 3, 14, "missing required key 'device.flops.f32'",
               "add a line such as 'device.flops.f32 67 TFLOP/s'");
  expect_error("", 1, 1, "missing required key 'nodes'", NULL);
  expect_error("# nothing\n\n\n", 1, 10, "missing required key 'nodes'", NULL);
  /* links a machine needs, at the count that needs them */
  expect_error("nodes 1\ndevices_per_node 8\ndevice.flops.f32 1 TFLOP/s\ndevice.memory 1 GiB\n"
               "device.memory_bandwidth 1 TB/s\n",
               2, 18, "missing key 'intra.bandwidth': a node has 8 devices", "intra.bandwidth 450 GB/s");
  expect_error("nodes 4\ndevices_per_node 1\ndevice.flops.f32 1 TFLOP/s\ndevice.memory 1 GiB\n"
               "device.memory_bandwidth 1 TB/s\ninter.bandwidth 100 Gb/s\n",
               1, 7, "missing key 'inter.latency': the machine has 4 nodes", NULL);
  expect_error(MINIMAL "device.memory_reserved 16 GiB\n", 6, 24,
               "device.memory_reserved is not less than device.memory", "line 4");
  expect_error("nodes 65536\ndevices_per_node 4096\n" "device.flops.f32 10 TFLOP/s\ndevice.memory 16 GiB\n"
               "device.memory_bandwidth 900 GB/s\nintra.bandwidth 1 GB/s\nintra.latency 0 s\n"
               "inter.bandwidth 1 GB/s\ninter.latency 0 s\n",
               2, 18, "too many devices", NULL);
}
END_TEST

/* --------------------------------------------------------------- units */

/* Parses MINIMAL with `line` added and returns the field it sets. */
static double value_of(const char *line, const double *field_of_m, const pcgc_machine *m) {
  char text[512];
  snprintf(text, sizeof text, MINIMAL "%s\n", line);
  parse_ok(text, (pcgc_machine *)m);
  return *field_of_m;
}

START_TEST(units) {
  pcgc_machine m;
  const struct {
    const char *line;
    const double *field;
    double want;
  } cases[] = {
      {"device.memory_reserved 1 B", &m.device.memory_reserved, 1},
      {"device.memory_reserved 1 KB", &m.device.memory_reserved, 1e3},
      {"device.memory_reserved 1 kB", &m.device.memory_reserved, 1e3},
      {"device.memory_reserved 1 KiB", &m.device.memory_reserved, 1024},
      {"device.memory_reserved 2 MiB", &m.device.memory_reserved, 2 * 1048576.0},
      {"device.memory_reserved 1.5 GB", &m.device.memory_reserved, 1.5e9},
      {"device.memory_reserved 3 GiB", &m.device.memory_reserved, 3 * GiB},
      {"device.memory_reserved .5 GiB", &m.device.memory_reserved, 0.5 * GiB},
      {"device.memory_reserved 3. GB", &m.device.memory_reserved, 3e9},
      {"device.memory_reserved 0 B", &m.device.memory_reserved, 0},
      {"intra.bandwidth 450 GB/s", &m.intra.bandwidth, 450e9},
      {"intra.bandwidth 1 TB/s", &m.intra.bandwidth, 1e12},
      {"intra.bandwidth 1 GiB/s", &m.intra.bandwidth, GiB},
      {"intra.bandwidth 400 Gb/s", &m.intra.bandwidth, 50e9},
      {"intra.bandwidth 56 Gbit/s", &m.intra.bandwidth, 7e9},
      {"intra.bandwidth 100 Mb/s", &m.intra.bandwidth, 12.5e6},
      {"intra.bandwidth 8 b/s", &m.intra.bandwidth, 1},
      {"intra.bandwidth 1e3 GB/s", &m.intra.bandwidth, 1e12},
      {"intra.bandwidth 2.5E+2 MB/s", &m.intra.bandwidth, 250e6},
      {"device.flops.f16 989 TFLOP/s", &m.device.flops[PCGC_F16], 989e12},
      {"device.flops.f16 1 PFLOP/s", &m.device.flops[PCGC_F16], 1e15},
      {"device.flops.f16 5 TFLOPS", &m.device.flops[PCGC_F16], 5e12},
      {"device.flops.f16 110 GFLOP/s", &m.device.flops[PCGC_F16], 110e9},
      {"device.flops.f16 7 FLOP/s", &m.device.flops[PCGC_F16], 7},
      {"device.launch_overhead 5 us", &m.device.launch_overhead, 5e-6},
      {"device.launch_overhead 5 \xc2\xb5s", &m.device.launch_overhead, 5e-6},
      {"device.launch_overhead 5 \xce\xbcs", &m.device.launch_overhead, 5e-6},
      {"device.launch_overhead 5us", &m.device.launch_overhead, 5e-6},
      {"device.launch_overhead 2 ms", &m.device.launch_overhead, 2e-3},
      {"device.launch_overhead 300 ns", &m.device.launch_overhead, 300e-9},
      {"device.launch_overhead 1e-6 s", &m.device.launch_overhead, 1e-6},
      {"device.launch_overhead 0 s", &m.device.launch_overhead, 0},
      {"device.launch_overhead\t4 us\t# tabs", &m.device.launch_overhead, 4e-6},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double got = value_of(cases[i].line, cases[i].field, &m);
    ck_assert_msg(fabs(got - cases[i].want) <= 1e-12 * fabs(cases[i].want), "'%s' gives %.17g, want %.17g",
                  cases[i].line, got, cases[i].want);
  }
}
END_TEST

START_TEST(quantity_format) {
  const struct {
    double v;
    pcgc_quantity q;
    const char *want;
  } cases[] = {
      {80 * GiB, PCGC_QTY_BYTES, "80 GiB"},      {80e9, PCGC_QTY_BYTES, "80 GB"},
      {512, PCGC_QTY_BYTES, "512 B"},            {1536, PCGC_QTY_BYTES, "1.5 KiB"},
      {24684092 * 1024.0, PCGC_QTY_BYTES, "24684092 KiB"},
      {450e9, PCGC_QTY_BYTE_RATE, "450 GB/s"},   {3.35e12, PCGC_QTY_BYTE_RATE, "3.35 TB/s"},
      {12.5e9, PCGC_QTY_BYTE_RATE, "12.5 GB/s"}, {989e12, PCGC_QTY_FLOP_RATE, "989 TFLOP/s"},
      {4.37e12, PCGC_QTY_FLOP_RATE, "4.37 TFLOP/s"}, {210e9, PCGC_QTY_FLOP_RATE, "210 GFLOP/s"},
      {5e-6, PCGC_QTY_TIME, "5 us"},             {0.3e-6, PCGC_QTY_TIME, "300 ns"},
      {1.5, PCGC_QTY_TIME, "1.5 s"},             {2e-3, PCGC_QTY_TIME, "2 ms"},
      {0, PCGC_QTY_TIME, "0 s"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char buf[64];
    int n = pcgc_quantity_format(buf, sizeof buf, cases[i].v, cases[i].q);
    ck_assert_str_eq(buf, cases[i].want);
    ck_assert_int_eq(n, (int)strlen(cases[i].want));
  }
}
END_TEST

/* ------------------------------------------------------------ defaults */

START_TEST(defaults) {
  pcgc_machine m;
  parse_ok(MINIMAL, &m);
  ck_assert_str_eq(m.name, "test"); /* from test.machine */
  ck_assert_str_eq(m.description, "");
  ck_assert_int_eq(m.device.kind, PCGC_DEVICE_GPU);
  for (int d = 0; d < PCGC_DTYPE_COUNT; d++) assert_close(m.device.flops[d], 10e12, "dtype defaults to f32");
  ck_assert(m.device.launch_overhead == 0 && m.device.memory_reserved == 0);
  ck_assert(m.intra.bandwidth == 0 && m.inter.bandwidth == 0 && !m.intra.shared && !m.inter.shared);
  assert_close(pcgc_machine_usable_memory(&m), 16 * GiB, "usable");

  /* links a one-node, one-device machine does not use may still be given */
  parse_ok(MINIMAL "inter.bandwidth 100 Gb/s\nintra.shared yes\ninter.shared true\n", &m);
  assert_close(m.inter.bandwidth, 12.5e9, "unused inter link");
  ck_assert(m.intra.shared && m.inter.shared);

  /* name and description; a description may hold UTF-8 and '#' ends it */
  parse_ok("name my_box-2.0\ndescription  8\xc3\x97 H100,  NVLink   # the rest is a comment\n" MINIMAL, &m);
  ck_assert_str_eq(m.name, "my_box-2.0");
  ck_assert_str_eq(m.description, "8\xc3\x97 H100,  NVLink");

  /* the default name is the file's base name */
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_machine_parse(MINIMAL, strlen(MINIMAL), "/a/b/big box.machine", &m, &err), PCGC_OK);
  ck_assert_str_eq(m.name, "big_box");
}
END_TEST

START_TEST(line_endings) {
  size_t len;
  char *text = read_all(MACHINES "/h100-4x8.machine", &len);
  pcgc_machine a, b;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_machine_parse(text, len, "a.machine", &a, &err), PCGC_OK);
  /* CRLF, a byte-order mark, no final newline */
  char *crlf = malloc(2 * len + 4);
  size_t n = 0;
  memcpy(crlf, "\xef\xbb\xbf", 3);
  n = 3;
  for (size_t i = 0; i < len; i++) {
    if (text[i] == '\n') crlf[n++] = '\r';
    crlf[n++] = text[i];
  }
  while (n > 0 && (crlf[n - 1] == '\n' || crlf[n - 1] == '\r')) n--;
  ck_assert_int_eq(pcgc_machine_parse(crlf, n, "a.machine", &b, &err), PCGC_OK);
  ck_assert(pcgc_machine_equal(&a, &b));
  /* an error in a CRLF file has the right column and no \r in its line */
  const char *bad = "nodes 1\r\ndevices_per_node x\r\n";
  ck_assert_int_eq(pcgc_machine_parse(bad, strlen(bad), "c.machine", &b, &err), PCGC_ERR_PARSE);
  ck_assert_int_eq(err.line, 2);
  ck_assert_int_eq(err.col, 18);
  ck_assert_str_eq(err.source_line, "devices_per_node x");
  free(crlf);
  free(text);
}
END_TEST

/* ----------------------------------------------------------- robustness */

/* Every prefix and many byte flips of a preset either parse or fail with a
 * position inside the text; never crash (ASan/UBSan builds check memory). */
START_TEST(prefixes_and_flips) {
  size_t len;
  char *text = read_all(MACHINES "/summit-v100.machine", &len);
  char *buf = malloc(len + 1);
  pcgc_machine m;
  int lines = 1;
  for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
  for (size_t cut = 0; cut <= len; cut++) {
    memcpy(buf, text, cut);
    pcgc_error err = {0};
    pcgc_status s = pcgc_machine_parse(buf, cut, "cut.machine", &m, &err);
    if (s) ck_assert_msg(err.line >= 1 && err.line <= lines && err.col >= 1, "cut %zu: %d:%d", cut, err.line, err.col);
  }
  static const unsigned char bytes[] = {0, '\n', '\r', '#', ' ', '-', '.', 'e', '9', 0x80, 0xff, '=', 'x'};
  unsigned seed = 1;
  for (int trial = 0; trial < 3000; trial++) {
    memcpy(buf, text, len);
    seed = seed * 1103515245u + 12345u;
    size_t at = (seed >> 8) % len;
    buf[at] = (char)bytes[(seed >> 4) % sizeof bytes];
    pcgc_error err = {0};
    pcgc_status s = pcgc_machine_parse(buf, len, "flip.machine", &m, &err);
    if (s == PCGC_OK) {
      ck_assert_int_ge(m.nodes, 1);
    } else {
      ck_assert_int_eq(s, PCGC_ERR_PARSE);
      ck_assert_int_ge(err.line, 1);
      ck_assert_int_ge(err.col, 1);
    }
  }
  /* a file far larger than any machine */
  size_t big = (1 << 20) + 1;
  char *huge = malloc(big);
  memset(huge, '#', big);
  pcgc_error err0 = {0};
  ck_assert_int_eq(pcgc_machine_parse(huge, big, "huge.machine", &m, &err0), PCGC_ERR_PARSE);
  ck_assert_msg(strstr(err0.message, "too large") && err0.line == 1 && err0.col == 1, "%s", err0.message);
  free(huge);
  /* NULL arguments */
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_machine_parse(NULL, 5, "x", &m, &err), PCGC_ERR_INVALID);
  ck_assert_int_eq(pcgc_machine_parse("nodes 1", 7, "x", NULL, &err), PCGC_ERR_INVALID);
  ck_assert_int_eq(pcgc_machine_parse(MINIMAL, strlen(MINIMAL), NULL, &m, NULL), PCGC_OK);
  ck_assert_int_eq(pcgc_machine_parse("nodes x", 7, NULL, &m, NULL), PCGC_ERR_PARSE);
  free(buf);
  free(text);
}
END_TEST

/* ------------------------------------------------------------- lookup */

START_TEST(lookup) {
  char path[4096];
  pcgc_error err = {0};
  /* paths are taken as given */
  ck_assert_int_eq(pcgc_machine_find("./mine", path, sizeof path, &err), PCGC_OK);
  ck_assert_str_eq(path, "./mine");
  ck_assert_int_eq(pcgc_machine_find("box.machine", path, sizeof path, &err), PCGC_OK);
  ck_assert_str_eq(path, "box.machine");
  /* a preset resolves under the compiled-in directory */
  unsetenv("PCGC_MACHINES_DIR");
  ck_assert_int_eq(pcgc_machine_find("dgx-h100", path, sizeof path, &err), PCGC_OK);
  ck_assert_str_eq(path, PCGC_SOURCE_DIR "/machines/dgx-h100.machine");
  /* unknown presets: did you mean, and the list */
  pcgc_machine m;
  ck_assert_int_eq(pcgc_machine_load("dgx-h10", &m, &err), PCGC_ERR_IO);
  ck_assert_msg(strstr(err.message, "no machine preset 'dgx-h10'"), "%s", err.message);
  ck_assert_msg(strstr(err.hint, "did you mean 'dgx-h100'?"), "%s", err.hint);
  ck_assert_msg(strstr(err.hint, "cpu-2 cpu-4 cpu-8 cpu-local dgx-h100 h100-128x8 h100-32x8 h100-4x8 h100-8x8 k80-16x4 p100-4x4 "
                                     "summit-v100"), "%s", err.hint);
  ck_assert_int_eq(pcgc_machine_load("tpu-pod", &m, &err), PCGC_ERR_IO);
  ck_assert_msg(strstr(err.hint, "presets: cpu-2 cpu-4"), "%s", err.hint);
  ck_assert_int_eq(pcgc_machine_load("", &m, &err), PCGC_ERR_INVALID);
  ck_assert_int_eq(pcgc_machine_load("/nonexistent/x.machine", &m, &err), PCGC_ERR_IO);
  ck_assert_msg(strstr(err.message, "cannot open"), "%s", err.message);
  /* PCGC_MACHINES_DIR overrides the compiled-in directory */
  char dir[] = "/tmp/pcgc-machines-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char file[4096];
  snprintf(file, sizeof file, "%s/lab.machine", dir);
  FILE *f = fopen(file, "w");
  ck_assert_ptr_nonnull(f);
  fputs(MINIMAL, f);
  fclose(f);
  setenv("PCGC_MACHINES_DIR", dir, 1);
  ck_assert_int_eq(pcgc_machine_load("lab", &m, &err), PCGC_OK);
  ck_assert_str_eq(m.name, "lab");
  ck_assert_int_eq(pcgc_machine_load("dgx-h100", &m, &err), PCGC_ERR_IO);
  ck_assert_msg(strstr(err.hint, "presets: lab"), "%s", err.hint);
  setenv("PCGC_MACHINES_DIR", "", 1); /* empty: as if unset */
  ck_assert_int_eq(pcgc_machine_load("dgx-h100", &m, &err), PCGC_OK);
  unsetenv("PCGC_MACHINES_DIR");
  unlink(file);
  rmdir(dir);
}
END_TEST

/* ---------------------------------------------------------------- suite */

static Suite *suite(void) {
  Suite *s = suite_create("machine");
  TCase *tc = tcase_create("presets");
  tcase_add_test(tc, preset_dgx_h100);
  tcase_add_test(tc, preset_h100_4x8);
  tcase_add_test(tc, preset_summit);
  tcase_add_test(tc, preset_flexflow_clusters);
  tcase_add_test(tc, preset_cpu_local);
  tcase_add_test(tc, presets_round_trip);
  tcase_add_test(tc, format_shows_units);
  suite_add_tcase(s, tc);
  tc = tcase_create("errors");
  tcase_add_test(tc, bad_machines);
  tcase_add_test(tc, errors_keys);
  tcase_add_test(tc, errors_values);
  tcase_add_test(tc, errors_missing);
  suite_add_tcase(s, tc);
  tc = tcase_create("format");
  tcase_add_test(tc, units);
  tcase_add_test(tc, quantity_format);
  tcase_add_test(tc, defaults);
  tcase_add_test(tc, line_endings);
  tcase_add_test(tc, lookup);
  suite_add_tcase(s, tc);
  tc = tcase_create("robustness");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, prefixes_and_flips);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
