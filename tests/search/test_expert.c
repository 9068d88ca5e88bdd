/*
 * test_expert.c — expert strategies and `pcgc compile` v1 (search/expert.c)
 * and strategy files (search/strategy_file.c):
 *   - a linear whose 8192 x 8192 weight dwarfs its activations: tensor
 *     parallelism wins over data parallelism (which all-reduces 256 MiB of
 *     gradients per step);
 *   - a convolution stack with small weights and a large batch: data
 *     parallelism on every device is the choice;
 *   - an embedding table that does not fit one device: data parallelism is
 *     infeasible and the chosen strategy shards the table;
 *   - a convolution stack that fits only as a pipeline in 1F1B order (GPipe
 *     holds every micro-batch's activations), and on smaller devices only
 *     with its activations recomputed as well: compile chooses so and the
 *     strategy file keeps it;
 *   - the search is deterministic; dp x 1 x 1 is exactly the baseline;
 *     pipelines have the stages and micro-batches asked for; views keep
 *     pieces inside their stage's device block;
 *   - strategy files round-trip (graph hash, views, simulated time) and bad
 *     ones are refused with file:line:col.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "search.h"

#include "../common/check_main.h"

/* ------------------------------------------------------------- helpers */

static pcgc_graph *model(const char *text) {
  pcgc_error err = {0};
  pcgc_graph *g = pcgc_model_parse(text, strlen(text), "inline.pcg", NULL, &err);
  ck_assert_msg(g != NULL, "model: %s (line %d)", err.message, err.line);
  return g;
}

static pcgc_machine preset(const char *name) {
  pcgc_machine m;
  pcgc_error err = {0};
  ck_assert_msg(pcgc_machine_load(name, &m, &err) == PCGC_OK, "%s: %s", name, err.message);
  return m;
}

/* A machine file in a temporary folder, loaded by path. */
static pcgc_machine machine_file(const char *text) {
  char dir[] = "/tmp/pcgc-expert-XXXXXX", path[256];
  ck_assert(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/small.machine", dir);
  FILE *f = fopen(path, "w");
  ck_assert(f != NULL);
  fputs(text, f);
  fclose(f);
  pcgc_machine m;
  pcgc_error err = {0};
  ck_assert_msg(pcgc_machine_load(path, &m, &err) == PCGC_OK, "%s", err.message);
  unlink(path);
  rmdir(dir);
  return m;
}

/* The expert strategies of g on m (they must build). */
static pcgc_expert *expert(const pcgc_graph *g, const pcgc_machine *m) {
  pcgc_error err = {0};
  pcgc_expert *x = NULL;
  ck_assert_msg(pcgc_expert_new(g, m, NULL, &x, &err) == PCGC_OK, "expert: %s", err.message);
  return x;
}

static void compile(const pcgc_graph *g, const pcgc_machine *m, pcgc_compile_result *r) {
  pcgc_error err = {0};
  pcgc_compile_options o;
  pcgc_compile_options_default(&o);
  ck_assert_msg(pcgc_compile(g, m, &o, r, &err) == PCGC_OK, "compile: %s", err.message);
  ck_assert_ptr_nonnull(r->graph);
  ck_assert_int_eq(r->sim.oom_devices, 0);
  ck_assert_int_gt(r->tried, 0);
  ck_assert_int_le(r->feasible + r->stopped, r->tried);
}

static const char *big_linear =
    "model big_linear\n"
    "input x: f32[64, 8192]\n"
    "input y: f32[64, 8192]\n"
    "h = linear(x, out=8192, bias=false)\n"
    "loss = mse(h, y)\n";

static const char *conv_stack =
    "model convs\n"
    "input x: f32[256, 3, 32, 32]\n"
    "input labels: i32[256]\n"
    "c1 = conv2d(x, out=32, kernel=3, padding=1, act=relu)\n"
    "c2 = conv2d(c1, out=32, kernel=3, padding=1, act=relu)\n"
    "p1 = pool2d(c2, kind=max, kernel=2, stride=2)\n"
    "c3 = conv2d(p1, out=64, kernel=3, padding=1, act=relu)\n"
    "c4 = conv2d(c3, out=64, kernel=3, padding=1, act=relu)\n"
    "p2 = pool2d(c4, kind=max, kernel=2, stride=2)\n"
    "f = flatten(p2)\n"
    "logits = linear(f, out=10)\n"
    "loss = softmax_cross_entropy(logits, labels)\n";

/* A 1,048,576 x 128 f32 table: 512 MiB, 2 GiB with its gradient and Adam's
 * two moments; the machine below has 1 GiB per device. */
static const char *big_table =
    "model big_table\n"
    "input ids: i32[64]\n"
    "input labels: i32[64]\n"
    "e = embedding(ids, num=1048576, dim=128)\n"
    "logits = linear(e, out=10)\n"
    "loss = softmax_cross_entropy(logits, labels)\n";

static const char *small_machine =
    "name small8\n"
    "nodes 1\n"
    "devices_per_node 8\n"
    "device.flops.f32 20 TFLOP/s\n"
    "device.memory 1 GiB\n"
    "device.memory_bandwidth 1 TB/s\n"
    "device.launch_overhead 5 us\n"
    "intra.bandwidth 100 GB/s\n"
    "intra.latency 2 us\n";

/* --------------------------------------------------------------- search */

START_TEST(tensor_parallel_beats_data_parallel) {
  pcgc_graph *g = model(big_linear);
  pcgc_machine m = preset("dgx-h100");
  pcgc_compile_result r;
  compile(g, &m, &r);
  ck_assert_msg(r.choice.tp > 1, "chose dp %d tp %d pp %d", r.choice.dp, r.choice.tp, r.choice.pp);
  ck_assert(r.data_parallel.feasible);
  ck_assert_int_eq(r.data_parallel.choice.dp, 8);
  ck_assert_msg(r.sim.iteration_time < 0.5 * r.data_parallel.time, "%g vs data parallel %g", r.sim.iteration_time,
                r.data_parallel.time);
  ck_assert(r.megatron.feasible);
  ck_assert_double_le(r.sim.iteration_time, r.megatron.time);
  /* the weight is sharded: its partition's degree on the output dim */
  bool sharded = false;
  for (int i = 0; i < r.graph->n_nodes; i++) {
    const pcgc_node *n = &r.graph->nodes[i];
    if (n->kind == PCGC_OP_LINEAR) sharded |= pcgc_graph_ref_type(r.graph, n->in[1])->degree[1] == r.choice.tp;
  }
  ck_assert(sharded);
  pcgc_compile_result_destroy(&r);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(data_parallel_for_convolutions) {
  pcgc_graph *g = model(conv_stack);
  pcgc_machine m = preset("dgx-h100");
  pcgc_compile_result r;
  compile(g, &m, &r);
  ck_assert_msg(r.choice.dp == 8 && r.choice.tp == 1 && r.choice.pp == 1, "chose dp %d tp %d pp %d micro %d",
                r.choice.dp, r.choice.tp, r.choice.pp, r.choice.micro);
  ck_assert(r.data_parallel.feasible);
  ck_assert_double_eq(r.sim.iteration_time, r.data_parallel.time);
  ck_assert(!r.megatron.tried); /* no Megatron rule matches convolutions */
  pcgc_compile_result_destroy(&r);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(table_too_large_is_sharded) {
  pcgc_graph *g = model(big_table);
  pcgc_machine m = machine_file(small_machine);
  pcgc_compile_result r;
  compile(g, &m, &r);
  ck_assert(r.data_parallel.tried);
  ck_assert(!r.data_parallel.feasible);
  ck_assert_msg(strstr(r.data_parallel.note, "out of memory") != NULL, "%s", r.data_parallel.note);
  ck_assert_int_gt(r.choice.tp, 1);
  int64_t shards = 0;
  for (int i = 0; i < r.graph->n_nodes; i++) {
    const pcgc_node *n = &r.graph->nodes[i];
    if (n->kind != PCGC_OP_EMBEDDING) continue;
    const pcgc_ptensor *t = pcgc_graph_ref_type(r.graph, n->in[1]);
    shards = (int64_t)t->degree[0] * t->degree[1];
  }
  ck_assert_int_eq(shards, r.choice.tp);
  double mx = 0;
  for (int d = 0; d < r.sim.n_devices; d++)
    if (r.sim.device[d].memory.total > mx) mx = r.sim.device[d].memory.total;
  ck_assert_double_le(mx, pcgc_machine_usable_memory(&m));
  pcgc_compile_result_destroy(&r);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(nothing_fits_is_an_error) {
  pcgc_graph *g = model(big_table);
  pcgc_machine m = machine_file("name tiny\nnodes 1\ndevices_per_node 2\ndevice.flops.f32 1 TFLOP/s\n"
                                "device.memory 64 MiB\ndevice.memory_bandwidth 1 TB/s\n"
                                "intra.bandwidth 10 GB/s\nintra.latency 2 us\n");
  pcgc_compile_options o;
  pcgc_compile_options_default(&o);
  pcgc_compile_result r;
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_compile(g, &m, &o, &r, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "no strategy") != NULL, "%s", err.message);
  ck_assert_ptr_null(r.graph);
  ck_assert(!r.data_parallel.feasible);
  pcgc_compile_result_destroy(&r);
  pcgc_graph_free(g);
}
END_TEST

/* 16 convolutions of 1024 channels (576 MiB of weights, 2.25 GiB with Adam)
 * at batch 256 on four 1 GiB devices: only 4 stages hold the weights, and
 * their activations fit only when few micro-batches are in flight, as
 * 1F1B allows (at most 4 of 16 on the first stage); on 800 MiB devices,
 * only when recomputed as well. */
static char *deep_convs(void) {
  size_t cap = 4096, n = 0;
  char *t = malloc(cap);
  ck_assert_ptr_nonnull(t);
  n += (size_t)snprintf(t + n, cap - n, "model convs\ninput x: f32[256, 1024, 16, 16]\n"
                                        "input t: f32[256, 1024, 16, 16]\nc0 = conv2d(x, out=1024, kernel=[3, 3], "
                                        "padding=[1, 1], act=relu)\n");
  for (int i = 1; i < 16; i++)
    n += (size_t)snprintf(t + n, cap - n,
                          "c%d = conv2d(c%d, out=1024, kernel=[3, 3], padding=[1, 1], act=relu)\n", i, i - 1);
  snprintf(t + n, cap - n, "loss = mse(c15, t)\n");
  return t;
}

/* Four devices of `memory` each, on one node. */
static pcgc_machine four_devices(const char *memory) {
  char text[512];
  snprintf(text, sizeof text,
           "name small4\nnodes 1\ndevices_per_node 4\ndevice.flops.f32 20 TFLOP/s\ndevice.memory %s\n"
           "device.memory_bandwidth 1 TB/s\ndevice.launch_overhead 5 us\nintra.bandwidth 100 GB/s\n"
           "intra.latency 2 us\n",
           memory);
  return machine_file(text);
}

START_TEST(one_f_one_b_and_recompute_where_gpipe_does_not_fit) {
  char *text = deep_convs();
  pcgc_graph *g = model(text);
  free(text);
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_graph_infer(g, &err), PCGC_OK);
  /* 1.5 GiB: GPipe's estimate is 2.33 GiB, 1F1B's 1.31 GiB (its program 1.42 GiB) */
  pcgc_machine m = four_devices("1536 MiB");
  pcgc_compile_options o;
  pcgc_compile_options_default(&o);
  o.joint.budget = 0;
  pcgc_compile_result r;
  ck_assert_msg(pcgc_compile(g, &m, &o, &r, &err) == PCGC_OK, "%s", err.message);
  /* micro-batches of one sample (128 per dp copy) hold the fewest activations */
  ck_assert_int_eq(r.choice.dp, 2);
  ck_assert_int_eq(r.choice.pp, 2);
  ck_assert_int_eq(r.choice.micro, 128);
  ck_assert_int_eq(r.choice.schedule, PCGC_SCHEDULE_1F1B);
  ck_assert(!r.choice.recompute); /* fits without: recomputing would only cost time */
  ck_assert_int_eq(r.sim.oom_devices, 0);
  ck_assert_int_eq(r.sim.schedule, PCGC_SCHEDULE_1F1B);
  /* data parallel fits only with its weights sharded too (ZeRO-3), and is slower */
  printf("data parallel: zero %d, recompute %d, %.4g s against %.4g s\n", r.data_parallel.choice.zero,
         r.data_parallel.choice.recompute, r.data_parallel.time, r.sim.iteration_time);
  ck_assert(r.data_parallel.feasible);
  ck_assert_int_eq(r.data_parallel.choice.zero, 3);
  ck_assert(r.data_parallel.time > r.sim.iteration_time);
  /* the same graph and views under GPipe: out of memory */
  pcgc_sim_options so;
  pcgc_sim_options_default(&so);
  pcgc_sim_result gp;
  ck_assert_int_eq(pcgc_simulate(r.graph, &r.mapping, &m, &so, &gp, &err), PCGC_OK);
  ck_assert_int_gt(gp.oom_devices, 0);
  pcgc_sim_result_destroy(&gp);
  /* the strategy file keeps the schedule */
  char path[] = "/tmp/pcgc-1f1b-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  pcgc_strategy_info info = {.has_choice = true, .choice = r.choice, .devices = 4};
  snprintf(info.machine, sizeof info.machine, "%s", m.name);
  ck_assert_int_eq(pcgc_strategy_file_write(path, r.graph, &r.mapping, &info, &err), PCGC_OK);
  pcgc_graph *g2 = NULL;
  pcgc_mapping mp2;
  pcgc_strategy_info info2;
  ck_assert_msg(pcgc_strategy_file_load(path, 4, &g2, &mp2, &info2, &err) == PCGC_OK, "%s", err.message);
  ck_assert(info2.has_choice);
  ck_assert_int_eq(info2.choice.schedule, PCGC_SCHEDULE_1F1B);
  ck_assert(!info2.choice.recompute);
  pcgc_mapping_destroy(&mp2);
  pcgc_graph_free(g2);
  pcgc_compile_result_destroy(&r);

  /* pp 4 with 16 micro-batches on 850 MiB: GPipe does not fit, nor does 1F1B (944 MiB):
   * the activations are recomputed (768 MiB) */
  m = four_devices("850 MiB");
  pcgc_expert_choice pp4 = {1, 1, 4, 16, PCGC_SCHEDULE_GPIPE, false, false};
  o.only = &pp4;
  ck_assert_msg(pcgc_compile(g, &m, &o, &r, &err) == PCGC_OK, "%s", err.message);
  ck_assert_int_eq(r.choice.pp, 4);
  ck_assert_int_eq(r.choice.micro, 16);
  ck_assert_int_eq(r.choice.schedule, PCGC_SCHEDULE_1F1B);
  ck_assert(r.choice.recompute);
  ck_assert(r.sim.recompute);
  ck_assert_int_eq(r.sim.oom_devices, 0);
  so.schedule = PCGC_SCHEDULE_1F1B;
  ck_assert_int_eq(pcgc_simulate(r.graph, &r.mapping, &m, &so, &gp, &err), PCGC_OK);
  printf("pp 4, 16 micro-batches: 1F1B %.4g MiB, with recomputation %.4g MiB\n", pcgc_sim_result_max_memory(&gp) / 1048576,
         pcgc_sim_result_max_memory(&r.sim) / 1048576);
  ck_assert_int_gt(gp.oom_devices, 0); /* without recomputation */
  ck_assert(gp.iteration_time < r.sim.iteration_time); /* which costs time */
  pcgc_sim_result_destroy(&gp);
  info.choice = r.choice;
  ck_assert_int_eq(pcgc_strategy_file_write(path, r.graph, &r.mapping, &info, &err), PCGC_OK);
  ck_assert_msg(pcgc_strategy_file_load(path, 4, &g2, &mp2, &info2, &err) == PCGC_OK, "%s", err.message);
  ck_assert(info2.choice.recompute);
  unlink(path);
  pcgc_mapping_destroy(&mp2);
  pcgc_graph_free(g2);
  pcgc_compile_result_destroy(&r);
  pcgc_graph_free(g);
}
END_TEST

/* Twice the same plan. Which slower candidates stop while they are built
 * depends on the best time known when each starts, so on how the worker
 * threads interleave, and with it how many are known to fit; on one thread
 * that is fixed too. */
/* options.program_time: the best candidates by estimate are ranked by the
 * callback's times, and data parallel on every device is always among
 * them; a callback that knows nothing (-1) leaves the choice alone. */
typedef struct fake_programs {
  int D, calls, dp_calls;
} fake_programs;

static double favour_dp(void *ctx, const pcgc_graph *g, const pcgc_mapping *mp, pcgc_expert_choice c) {
  (void)g;
  (void)mp;
  fake_programs *f = ctx;
  f->calls++;
  bool dp = c.dp == f->D && c.tp == 1 && c.pp == 1;
  f->dp_calls += dp;
  return dp ? 0.5 : 1.0;
}

static double unknown_program(void *ctx, const pcgc_graph *g, const pcgc_mapping *mp, pcgc_expert_choice c) {
  (void)g;
  (void)mp;
  (void)c;
  ((fake_programs *)ctx)->calls++;
  return -1;
}

START_TEST(ranked_by_programs) {
  pcgc_graph *g = model(big_linear);
  pcgc_machine m = preset("h100-4x8");
  pcgc_compile_result plain, dp, same;
  compile(g, &m, &plain);
  ck_assert_int_eq(plain.reranked, 0);
  ck_assert(!(plain.choice.dp == 32 && plain.choice.tp == 1 && plain.choice.pp == 1)); /* not data parallel */
  pcgc_error err = {0};
  pcgc_compile_options o;
  pcgc_compile_options_default(&o);
  o.joint.budget = 0;
  fake_programs f = {.D = 32};
  o.program_time = favour_dp;
  o.program_ctx = &f;
  ck_assert_msg(pcgc_compile(g, &m, &o, &dp, &err) == PCGC_OK, "%s", err.message);
  ck_assert(dp.choice.dp == 32 && dp.choice.tp == 1 && dp.choice.pp == 1);
  ck_assert_int_eq(f.dp_calls, 1);
  ck_assert_int_ge(f.calls, 2);
  ck_assert_int_eq(dp.reranked, f.calls);
  ck_assert(dp.rerank_changed && pcgc_expert_choice_equal(&dp.by_estimate, &plain.choice));
  ck_assert(dp.chosen_program == 0.5 && dp.by_estimate_program == 1.0 && dp.dp_program == 0.5);
  f = (fake_programs){.D = 32};
  o.program_time = unknown_program;
  o.rerank_margin = 1.0; /* several candidates asked about, not only the best */
  ck_assert_msg(pcgc_compile(g, &m, &o, &same, &err) == PCGC_OK, "%s", err.message);
  ck_assert(pcgc_expert_choice_equal(&same.choice, &plain.choice));
  ck_assert_int_ge(f.calls, 2);
  ck_assert_int_eq(same.reranked, 0);
  ck_assert(!same.rerank_changed);
  pcgc_compile_result_destroy(&plain);
  pcgc_compile_result_destroy(&dp);
  pcgc_compile_result_destroy(&same);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(deterministic) {
  pcgc_graph *g = model(big_linear);
  pcgc_machine m = preset("h100-4x8");
  pcgc_compile_result a, b;
  compile(g, &m, &a);
  compile(g, &m, &b);
  ck_assert(pcgc_expert_choice_equal(&a.choice, &b.choice));
  ck_assert_double_eq(a.sim.iteration_time, b.sim.iteration_time);
  ck_assert_int_eq(a.tried, b.tried);
  pcgc_compile_result c[2];
  for (int k = 0; k < 2; k++) {
    pcgc_error err = {0};
    pcgc_compile_options o;
    pcgc_compile_options_default(&o);
    o.threads = 1;
    ck_assert_msg(pcgc_compile(g, &m, &o, &c[k], &err) == PCGC_OK, "compile: %s", err.message);
  }
  ck_assert_int_eq(c[0].feasible, c[1].feasible);
  ck_assert_int_eq(c[0].stopped, c[1].stopped);
  ck_assert(pcgc_expert_choice_equal(&a.choice, &c[0].choice));
  for (int k = 0; k < 2; k++) pcgc_compile_result_destroy(&c[k]);
  ck_assert(pcgc_graph_hash(a.graph) == pcgc_graph_hash(b.graph));
  ck_assert_mem_eq(a.mapping.view, b.mapping.view, (size_t)a.mapping.n_nodes * sizeof *a.mapping.view);
  pcgc_compile_result_destroy(&a);
  pcgc_compile_result_destroy(&b);
  pcgc_graph_free(g);
}
END_TEST

/* -------------------------------------------------------------- building */

static double simulate(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m, pcgc_sim_result *keep) {
  pcgc_sim_options o;
  pcgc_sim_options_default(&o);
  pcgc_sim_result r;
  pcgc_error err = {0};
  ck_assert_msg(pcgc_simulate(g, mp, m, &o, &r, &err) == PCGC_OK, "%s", err.message);
  double t = r.iteration_time;
  if (keep) *keep = r;
  else pcgc_sim_result_destroy(&r);
  return t;
}

START_TEST(plain_data_parallel_is_the_baseline) {
  pcgc_graph *g = model(conv_stack);
  pcgc_machine m = preset("dgx-h100");
  pcgc_error err = {0};
  pcgc_expert *x = expert(g, &m);
  ck_assert_int_eq(pcgc_expert_batch(x), 256);
  ck_assert_int_eq(pcgc_expert_layers(x), 5);
  ck_assert_int_eq(pcgc_expert_tp_matches(x, 2, &err), 0); /* convolutions: no Megatron rule */
  pcgc_graph *a, *b;
  pcgc_mapping ma, mb;
  ck_assert_int_eq(pcgc_expert_build(x, (pcgc_expert_choice){4, 1, 1, 1, PCGC_SCHEDULE_GPIPE, false, false}, &a, &ma, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_strategy_build(PCGC_STRATEGY_DATA_PARALLEL, g, &m, 4, &b, &mb, &err), PCGC_OK);
  ck_assert(pcgc_graph_equal(a, b));
  ck_assert_double_eq(simulate(a, &ma, &m, NULL), simulate(b, &mb, &m, NULL));
  pcgc_mapping_destroy(&mb);
  pcgc_graph_free(b);
  ck_assert_int_eq(pcgc_expert_build(x, (pcgc_expert_choice){4, 2, 1, 1, PCGC_SCHEDULE_GPIPE, false, false}, &b, &mb, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "no Megatron rule") != NULL, "%s", err.message);
  ck_assert_int_eq(pcgc_expert_build(x, (pcgc_expert_choice){4, 1, 4, 1, PCGC_SCHEDULE_GPIPE, false, false}, &b, &mb, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "16 devices") != NULL, "%s", err.message);
  ck_assert_int_eq(pcgc_expert_build(x, (pcgc_expert_choice){3, 1, 1, 1, PCGC_SCHEDULE_GPIPE, false, false}, &b, &mb, &err), PCGC_ERR_INVALID);
  pcgc_mapping_destroy(&ma);
  pcgc_graph_free(a);
  pcgc_expert_free(x);
  pcgc_graph_free(g);
}
END_TEST

/* Every non-resident node's pieces sit on distinct devices of its block. */
static void check_blocks(const pcgc_graph *g, const pcgc_mapping *mp, int block, int D) {
  bool *res = calloc((size_t)g->n_nodes, sizeof *res);
  int *order = malloc((size_t)g->n_nodes * sizeof *order);
  ck_assert_int_eq(pcgc_graph_topo_order(g, order, NULL), PCGC_OK);
  for (int k = 0; k < g->n_nodes; k++) {
    const pcgc_node *n = &g->nodes[order[k]];
    pcgc_op_class c = pcgc_op_class_of(n->kind);
    res[n->id] = c == PCGC_CLASS_SOURCE || (c == PCGC_CLASS_PARALLEL && res[n->in[0].node]);
    if (res[n->id]) continue;
    pcgc_view v = mp->view[n->id];
    int64_t P = pcgc_ptensor_pieces(&n->out[0]);
    int lo = v.start / block * block;
    for (int64_t p = 0; p < P; p++) {
      int64_t dev = (v.start + p * v.stride) % D;
      ck_assert_msg(dev >= lo && dev < lo + block, "%s piece %lld on device %lld, outside [%d, %d)", n->name,
                    (long long)p, (long long)dev, lo, lo + block);
      if (p > 0) ck_assert_msg(v.stride > 0, "%s: %lld pieces on one device", n->name, (long long)P);
    }
  }
  free(order);
  free(res);
}

START_TEST(hybrid_and_pipeline_builds) {
  static const char *mlp =
      "model mlp4\n"
      "input x: f32[64, 256]\n"
      "input labels: i32[64]\n"
      "h1 = linear(x, out=512, act=relu)\n"
      "h2 = linear(h1, out=256)\n"
      "h3 = linear(h2, out=512, act=relu)\n"
      "h4 = linear(h3, out=256)\n"
      "logits = linear(h4, out=10)\n"
      "loss = softmax_cross_entropy(logits, labels)\n";
  pcgc_graph *g = model(mlp);
  pcgc_machine m = preset("dgx-h100");
  pcgc_error err = {0};
  pcgc_expert *x = expert(g, &m);
  ck_assert_int_eq(pcgc_expert_tp_matches(x, 2, &err), 2); /* two Megatron MLPs */
  pcgc_graph *pg;
  pcgc_mapping mp;
  pcgc_sim_result r;
  /* 2 x 2 x 2 with 4 micro-batches */
  ck_assert_int_eq(pcgc_expert_build(x, (pcgc_expert_choice){2, 2, 2, 4, PCGC_SCHEDULE_GPIPE, false, false}, &pg, &mp, &err), PCGC_OK);
  int reduces = 0;
  for (int i = 0; i < pg->n_nodes; i++) reduces += pg->nodes[i].kind == PCGC_OP_REDUCE;
  ck_assert_int_eq(reduces, 2);
  ck_assert_int_eq(pg->nodes[pcgc_graph_find(pg, "loss")].out[0].micro, 4);
  check_blocks(pg, &mp, 4, 8);
  simulate(pg, &mp, &m, &r);
  ck_assert_int_eq(r.stages, 2);
  ck_assert_int_eq(r.micro_batches, 4);
  ck_assert_int_eq(r.used_devices, 8);
  pcgc_sim_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  /* pure pipeline over 4 devices: every device one stage */
  ck_assert_int_eq(pcgc_expert_build(x, (pcgc_expert_choice){1, 1, 4, 8, PCGC_SCHEDULE_GPIPE, false, false}, &pg, &mp, &err), PCGC_OK);
  check_blocks(pg, &mp, 1, 8);
  simulate(pg, &mp, &m, &r);
  ck_assert_int_eq(r.stages, 4);
  ck_assert_int_eq(r.used_devices, 4);
  pcgc_sim_result_destroy(&r);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  /* a batch that dp x micro does not divide */
  ck_assert_int_eq(pcgc_expert_build(x, (pcgc_expert_choice){2, 1, 2, 64, PCGC_SCHEDULE_GPIPE, false, false}, &pg, &mp, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "divisible by 128") != NULL, "%s", err.message);
  /* after a reduce, the batch shards sit where a partial sum already is */
  ck_assert_int_eq(pcgc_expert_build(x, (pcgc_expert_choice){4, 2, 1, 1, PCGC_SCHEDULE_GPIPE, false, false}, &pg, &mp, &err), PCGC_OK);
  for (int i = 0; i < pg->n_nodes; i++)
    if (pg->nodes[i].kind == PCGC_OP_REDUCE) {
      ck_assert_int_eq(mp.view[i].start, 0);
      ck_assert_int_eq(mp.view[i].stride, 2);
    }
  check_blocks(pg, &mp, 8, 8);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  pcgc_expert_free(x);
  pcgc_graph_free(g);
}
END_TEST

/* The expert grid's data-parallel copies are simulated once
 * (options.replicas): the same times, per-device loads and memory as
 * simulating every copy, on a machine of 32 devices in 4 nodes; not on one
 * whose inter-node port is shared by a node's devices. */
START_TEST(one_dp_copy_simulated_for_all) {
  static const char *net =
      "model net\n"
      "const B = 64\n"
      "input x: f32[B, 16, 64]\n"
      "input t: f32[B, 16, 64]\n"
      "block layer(tensor h) {\n"
      "  n = layernorm(h)\n"
      "  a = attention(n, n, n, heads=8, kv_heads=4, causal=true, bias=false)\n"
      "  r = add(h, a)\n"
      "  u = linear(r, out=256, act=gelu)\n"
      "  d = linear(u, out=64)\n"
      "  o = add(r, d)\n"
      "  return o\n"
      "}\n"
      "y = repeat(4) layer(x)\n"
      "loss = mse(y, t)\n";
  pcgc_graph *g = model(net);
  pcgc_machine m = preset("h100-4x8");
  pcgc_error err = {0};
  pcgc_expert *x = expert(g, &m);
  const pcgc_expert_choice cs[] = {
      {32, 1, 1, 1, PCGC_SCHEDULE_GPIPE, false, false}, {8, 4, 1, 1, PCGC_SCHEDULE_GPIPE, false, false},
      {4, 2, 4, 4, PCGC_SCHEDULE_1F1B, false, false}, {2, 4, 4, 8, PCGC_SCHEDULE_GPIPE, true, false},
      {16, 2, 1, 1, PCGC_SCHEDULE_GPIPE, false, false}, {4, 1, 2, 2, PCGC_SCHEDULE_GPIPE, false, false},
  };
  for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
    pcgc_graph *pg;
    pcgc_mapping mp;
    ck_assert_msg(pcgc_expert_build(x, cs[i], &pg, &mp, &err) == PCGC_OK, "%zu: %s", i, err.message);
    pcgc_sim_options o;
    pcgc_sim_options_default(&o);
    o.schedule = cs[i].schedule;
    o.recompute = cs[i].recompute;
    pcgc_sim_result full, one;
    ck_assert_int_eq(pcgc_simulate(pg, &mp, &m, &o, &full, &err), PCGC_OK);
    o.replicas = cs[i].dp;
    o.replica_stride = cs[i].tp;
    ck_assert_int_eq(pcgc_simulate(pg, &mp, &m, &o, &one, &err), PCGC_OK);
    ck_assert_msg(one.symmetric && !full.symmetric, "choice %zu: one copy run %d", i, one.symmetric);
    ck_assert_msg(fabs(one.iteration_time - full.iteration_time) <= 1e-12 * full.iteration_time,
                  "choice %zu: %.12g s for one copy, %.12g s for all", i, one.iteration_time, full.iteration_time);
    ck_assert_double_eq_tol(one.critical_path, full.critical_path, 1e-12 * full.critical_path);
    ck_assert_double_eq_tol(one.task_time, full.task_time, 1e-9 * full.task_time);
    for (int d = 0; d < full.n_devices; d++) {
      ck_assert_double_eq_tol(one.device[d].compute, full.device[d].compute, 1e-12 * (full.device[d].compute + 1));
      ck_assert_double_eq(one.device[d].memory.total, full.device[d].memory.total);
    }
    /* copies_alike: copy 0's tasks are all that is built, with the same results */
    pcgc_sim_result built;
    o.copies_alike = true;
    ck_assert_int_eq(pcgc_simulate(pg, &mp, &m, &o, &built, &err), PCGC_OK);
    ck_assert_msg(fabs(built.iteration_time - full.iteration_time) <= 1e-12 * full.iteration_time,
                  "choice %zu: %.12g s from copy 0's tasks, %.12g s for all", i, built.iteration_time,
                  full.iteration_time);
    ck_assert_double_eq_tol(built.critical_path, full.critical_path, 1e-12 * full.critical_path);
    ck_assert_double_eq_tol(built.task_time, full.task_time, 1e-9 * full.task_time);
    ck_assert_double_eq_tol(built.bytes_intra, full.bytes_intra, 1e-9 * (full.bytes_intra + 1));
    ck_assert_double_eq_tol(built.bytes_inter, full.bytes_inter, 1e-9 * (full.bytes_inter + 1));
    for (int d = 0; d < full.n_devices; d++) {
      ck_assert_double_eq_tol(built.device[d].compute, full.device[d].compute, 1e-12 * (full.device[d].compute + 1));
      ck_assert_msg(built.device[d].memory.total == full.device[d].memory.total,
                    "choice %zu device %d: %.17g bytes from copy 0's tasks, %.17g for all", i, d,
                    built.device[d].memory.total, full.device[d].memory.total);
    }
    ck_assert_msg(cs[i].dp == 1 || built.n_tasks < full.n_tasks, "choice %zu: %lld tasks built, %lld for all", i,
                  (long long)built.n_tasks, (long long)full.n_tasks);
    /* the hint alone: the simulator finds the copies built alike itself and builds copy 0's tasks alone too */
    ck_assert_msg(cs[i].dp == 1 || one.n_tasks == built.n_tasks, "choice %zu: %lld tasks with the hint, %lld built alike",
                  i, (long long)one.n_tasks, (long long)built.n_tasks);
    pcgc_sim_result_destroy(&built);
    pcgc_sim_result_destroy(&full);
    pcgc_sim_result_destroy(&one);
    pcgc_mapping_destroy(&mp);
    pcgc_graph_free(pg);
  }
  /* a shared inter-node port: copies of one device each send nothing of their own across it
   * (copies_apart), so copy 0 alone still gives what simulating all of them does */
  pcgc_machine sh = preset("p100-4x4");
  pcgc_expert *y = expert(g, &sh);
  pcgc_graph *pg;
  pcgc_mapping mp;
  ck_assert_int_eq(pcgc_expert_build(y, (pcgc_expert_choice){16, 1, 1, 1, PCGC_SCHEDULE_GPIPE, false, false}, &pg, &mp, &err),
                   PCGC_OK);
  pcgc_sim_options o;
  pcgc_sim_options_default(&o);
  o.replicas = 16;
  o.replica_stride = 1;
  pcgc_sim_result r, all;
  ck_assert_int_eq(pcgc_simulate(pg, &mp, &sh, &o, &r, &err), PCGC_OK);
  ck_assert(r.symmetric);
  pcgc_sim_options_default(&o);
  ck_assert_int_eq(pcgc_simulate(pg, &mp, &sh, &o, &all, &err), PCGC_OK);
  ck_assert(!all.symmetric);
  printf("p100-4x4, dp 16: %.9g s from copy 0, %.9g s from all (%lld and %lld tasks run)\n", r.iteration_time,
         all.iteration_time, (long long)r.n_tasks, (long long)all.n_tasks);
  ck_assert_double_eq_tol(r.iteration_time, all.iteration_time, 1e-9 * all.iteration_time);
  ck_assert_double_eq_tol(r.bytes_inter, all.bytes_inter, 1e-9 * (all.bytes_inter + 1));
  for (int d = 0; d < all.n_devices; d++)
    ck_assert_double_eq(r.device[d].memory.total, all.device[d].memory.total);
  int64_t one16 = r.n_tasks;
  pcgc_sim_result_destroy(&r);
  /* 4 copies at stride 2 (copy 0: devices 0, 1, 8, 9) would share nodes 0 and 2's port with
   * copy 1's own messages: pairs of them at stride 4 (whole nodes) are run instead */
  o.replicas = 4;
  o.replica_stride = 2;
  ck_assert_int_eq(pcgc_simulate(pg, &mp, &sh, &o, &r, &err), PCGC_OK);
  ck_assert(r.symmetric);
  printf("p100-4x4, 4 copies at stride 2: %lld of %lld tasks run\n", (long long)r.n_tasks, (long long)all.n_tasks);
  ck_assert(r.n_tasks < all.n_tasks && r.n_tasks > one16);
  ck_assert_double_eq_tol(r.iteration_time, all.iteration_time, 1e-9 * all.iteration_time);
  pcgc_sim_result_destroy(&r);
  pcgc_sim_result_destroy(&all);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  /* copies of two devices, three to a node... here two: dp 8 x tp 2, a copy's messages on its node */
  ck_assert_int_eq(pcgc_expert_build(y, (pcgc_expert_choice){8, 2, 1, 1, PCGC_SCHEDULE_GPIPE, false, false}, &pg, &mp, &err),
                   PCGC_OK);
  o.replicas = 8;
  o.replica_stride = 2;
  ck_assert_int_eq(pcgc_simulate(pg, &mp, &sh, &o, &r, &err), PCGC_OK);
  pcgc_sim_options_default(&o);
  ck_assert_int_eq(pcgc_simulate(pg, &mp, &sh, &o, &all, &err), PCGC_OK);
  printf("p100-4x4, dp 8 x tp 2: %.12g s from copy 0 (%d), %.12g s from all\n", r.iteration_time, r.symmetric,
         all.iteration_time);
  ck_assert(r.symmetric);
  ck_assert_double_eq_tol(r.iteration_time, all.iteration_time, 1e-9 * all.iteration_time);
  pcgc_sim_result_destroy(&r);
  pcgc_sim_result_destroy(&all);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  pcgc_expert_free(y);
  pcgc_expert_free(x);
  pcgc_graph_free(g);
}
END_TEST

/* The hint alone (options.replicas, as the joint search simulates its
 * rewrites): where one operator's pieces are moved onto the next copy's
 * devices, copy 0 reads another copy's pieces, so every copy is built and
 * run, and the result is exactly that of simulating without the hint. */
START_TEST(copies_checked_before_copy_0_alone_is_built) {
  static const char *net =
      "model net\n"
      "const B = 64\n"
      "input x: f32[B, 16, 64]\n"
      "input t: f32[B, 16, 64]\n"
      "h = linear(x, out=256, act=gelu)\n"
      "u = linear(h, out=64)\n"
      "v = add(x, u)\n"
      "loss = mse(v, t)\n";
  pcgc_graph *g = model(net);
  pcgc_machine m = preset("h100-4x8");
  pcgc_error err = {0};
  pcgc_expert *x = expert(g, &m);
  pcgc_graph *pg;
  pcgc_mapping mp;
  const pcgc_expert_choice c = {8, 4, 1, 1, PCGC_SCHEDULE_GPIPE, false, false};
  ck_assert_msg(pcgc_expert_build(x, c, &pg, &mp, &err) == PCGC_OK, "%s", err.message);
  pcgc_sim_options o;
  pcgc_sim_options_default(&o);
  pcgc_sim_result full, hint;
  ck_assert_int_eq(pcgc_simulate(pg, &mp, &m, &o, &full, &err), PCGC_OK);
  o.replicas = c.dp;
  o.replica_stride = c.tp;
  ck_assert_int_eq(pcgc_simulate(pg, &mp, &m, &o, &hint, &err), PCGC_OK);
  ck_assert(hint.symmetric && hint.n_tasks * 4 <= full.n_tasks); /* copy 0 of 8 built */
  ck_assert_double_eq_tol(hint.iteration_time, full.iteration_time, 1e-12 * full.iteration_time);
  /* with a memo (pcgc_sim_options.memo): the first simulation checks every
   * operator, the second finds them all, and both give the same result */
  pcgc_sim_memo *memo;
  ck_assert_int_eq(pcgc_sim_memo_new(&memo, &err), PCGC_OK);
  o.memo = memo;
  int64_t hits, misses, checked;
  for (int round = 0; round < 2; round++) {
    pcgc_sim_result r;
    ck_assert_int_eq(pcgc_simulate(pg, &mp, &m, &o, &r, &err), PCGC_OK);
    ck_assert(r.symmetric && r.n_tasks == hint.n_tasks);
    ck_assert_double_eq(r.iteration_time, hint.iteration_time);
    pcgc_sim_memo_stats(memo, &hits, &misses);
    if (round == 0) {
      ck_assert_msg(hits == 0 && misses > 0, "%lld hits, %lld misses", (long long)hits, (long long)misses);
      checked = misses;
    } else {
      ck_assert_msg(hits == checked && misses == checked, "%lld hits, %lld misses", (long long)hits, (long long)misses);
    }
    pcgc_sim_result_destroy(&r);
  }
  o.memo = NULL;
  pcgc_sim_result_destroy(&hint);
  pcgc_sim_result_destroy(&full);
  /* the add's pieces one copy on: they read the other copies' pieces */
  int v = pcgc_graph_find(pg, "v");
  ck_assert_int_ge(v, 0);
  mp.view[v].start = (mp.view[v].start + c.tp) % 32;
  o.replicas = 0;
  ck_assert_int_eq(pcgc_simulate(pg, &mp, &m, &o, &full, &err), PCGC_OK);
  o.replicas = c.dp;
  ck_assert_int_eq(pcgc_simulate(pg, &mp, &m, &o, &hint, &err), PCGC_OK);
  ck_assert_msg(!hint.symmetric && hint.n_tasks == full.n_tasks, "%lld tasks with the hint, %lld without",
                (long long)hint.n_tasks, (long long)full.n_tasks);
  ck_assert_double_eq(hint.iteration_time, full.iteration_time);
  for (int d = 0; d < full.n_devices; d++) ck_assert_double_eq(hint.device[d].memory.total, full.device[d].memory.total);
  /* the memo filled by the alike layout does not vouch for this one */
  pcgc_sim_result_destroy(&hint);
  o.memo = memo;
  ck_assert_int_eq(pcgc_simulate(pg, &mp, &m, &o, &hint, &err), PCGC_OK);
  ck_assert(!hint.symmetric && hint.n_tasks == full.n_tasks);
  ck_assert_double_eq(hint.iteration_time, full.iteration_time);
  pcgc_sim_memo_free(memo);
  pcgc_sim_result_destroy(&hint);
  pcgc_sim_result_destroy(&full);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(pg);
  pcgc_expert_free(x);
  pcgc_graph_free(g);
}
END_TEST

START_TEST(parallel_model_is_refused) {
  pcgc_graph *g = model("input x: f32[8, 4]\nxp = partition(x, dim=0, degree=2)\ny = relu(xp)\n");
  pcgc_machine m = preset("dgx-h100");
  pcgc_error err = {0};
  pcgc_expert *x = NULL;
  ck_assert_int_eq(pcgc_expert_new(g, &m, NULL, &x, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "sequential") != NULL, "%s", err.message);
  ck_assert_ptr_null(x);
  pcgc_graph_free(g);
}
END_TEST

/* ------------------------------------------------------- strategy files */

static char *slurp(const char *path) {
  pcgc_error err = {0};
  size_t n;
  char *t = pcgc_read_file(path, &n, &err);
  ck_assert_msg(t != NULL, "%s", err.message);
  return t;
}

START_TEST(strategy_file_round_trip) {
  pcgc_graph *g = model(big_linear);
  pcgc_machine m = preset("dgx-h100");
  pcgc_compile_result r;
  compile(g, &m, &r);
  char dir[] = "/tmp/pcgc-strategy-XXXXXX", path[256];
  ck_assert(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/s.json", dir);
  pcgc_strategy_info info = {.has_predicted = true,
                             .iteration_s = r.sim.iteration_time,
                             .data_parallel_s = r.data_parallel.time,
                             .has_choice = true,
                             .choice = r.choice,
                             .devices = 8,
                             .has_optimizer = true,
                             .optimizer = PCGC_OPTIM_MOMENTUM,
                             .has_program = true,
                             .program_digest = 0xfedcba9876543210ULL,
                             .program_tasks = 77,
                             .planned_peak_bytes = 123456789};
  snprintf(info.machine, sizeof info.machine, "%s", m.name);
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_strategy_file_write(path, r.graph, &r.mapping, &info, &err), PCGC_OK);
  ck_assert(pcgc_strategy_file_detect(path));
  pcgc_graph *g2;
  pcgc_mapping mp2;
  pcgc_strategy_info in;
  ck_assert_msg(pcgc_strategy_file_load(path, 8, &g2, &mp2, &in, &err) == PCGC_OK, "%s", err.message);
  ck_assert(pcgc_graph_hash(g2) == pcgc_graph_hash(r.graph));
  ck_assert_int_eq(g2->n_nodes, r.graph->n_nodes);
  for (int i = 0; i < g2->n_nodes; i++) {
    ck_assert_str_eq(g2->nodes[i].name, r.graph->nodes[i].name);
    if (pcgc_op_class_of(g2->nodes[i].kind) == PCGC_CLASS_SOURCE) continue;
    ck_assert_int_eq(mp2.view[i].start, r.mapping.view[i].start);
    ck_assert_int_eq(mp2.view[i].stride, r.mapping.view[i].stride);
  }
  ck_assert_str_eq(in.machine, "dgx-h100");
  ck_assert(in.has_predicted && in.has_choice);
  ck_assert_double_eq(in.iteration_s, r.sim.iteration_time);
  ck_assert(pcgc_expert_choice_equal(&in.choice, &r.choice));
  ck_assert_int_eq(in.version, 2);
  ck_assert_int_eq(in.devices, 8);
  ck_assert(in.has_optimizer && in.optimizer == PCGC_OPTIM_MOMENTUM);
  ck_assert(in.has_program && in.program_digest == 0xfedcba9876543210ULL);
  ck_assert_int_eq(in.program_tasks, 77);
  ck_assert_int_eq(in.planned_peak_bytes, 123456789);
  ck_assert_double_eq(simulate(g2, &mp2, &m, NULL), r.sim.iteration_time);
  { /* one changed digit that still parses, or a cut-off end: refused */
    char *t = slurp(path), *it = strstr(t, "\"iteration_s\":");
    ck_assert_ptr_nonnull(it);
    char *dig = strpbrk(it + 14, "123456789");
    *dig = *dig == '9' ? '8' : (char)(*dig + 1);
    pcgc_graph *g3 = NULL;
    pcgc_mapping mp3;
    ck_assert_int_eq(pcgc_strategy_file_parse(t, strlen(t), "x.json", 8, &g3, &mp3, NULL, &err), PCGC_ERR_PARSE);
    ck_assert_msg(strstr(err.message, "checksum does not match") != NULL, "%s", err.message);
    *dig = *dig == '8' ? '9' : (char)(*dig - 1);
    ck_assert_int_eq(pcgc_strategy_file_parse(t, strlen(t) - 40, "x.json", 8, &g3, &mp3, NULL, &err), PCGC_ERR_PARSE);
    ck_assert_msg(strstr(err.message, "malformed JSON") != NULL, "%s", err.message);
    ck_assert_int_eq(pcgc_strategy_file_parse(t, strlen(t), "x.json", 8, &g3, &mp3, NULL, &err), PCGC_OK);
    pcgc_mapping_destroy(&mp3);
    pcgc_graph_free(g3);
    free(t);
  }
  /* the written text is the canonical graph's: writing again gives the same bytes */
  char *t1 = slurp(path);
  ck_assert_int_eq(pcgc_strategy_file_write(path, g2, &mp2, &in, &err), PCGC_OK);
  char *t2 = slurp(path);
  ck_assert_str_eq(t1, t2);
  free(t1);
  free(t2);
  unlink(path);
  rmdir(dir);
  pcgc_mapping_destroy(&mp2);
  pcgc_graph_free(g2);
  pcgc_compile_result_destroy(&r);
  pcgc_graph_free(g);
}
END_TEST

/* A malformed strategy: its text, the position and a piece of the message. */
typedef struct bad_case {
  const char *text;
  int line, col;
  const char *want;
} bad_case;

#define HEAD "{\"format\": \"pcgc-strategy\", \"version\": 1, \"machine\": \"dgx-h100\",\n"
#define MODEL "\"model\": \"input x: f32[8, 4]\\nxp = partition(x, dim=0, degree=2)\\ny = relu(xp)\\n\",\n"

static const bad_case bad_cases[] = {
    {"{\"format\": \"pcgc-strategy\",\n \"version\": 1,,\n}", 2, 16, "malformed JSON"},
    {"[1, 2]", 1, 1, "expected a JSON object"},
    {"{\"format\": \"pcgc-plan\",\n \"views\": {\"a\": 1, \"b\": 2,\n  \"a\": 3}}", 3, 3,
     "the member \"a\" is given twice (first at line 2, column 12)"},
    {"{\"format\": \"pcgc-\xff\"}", 1, 18, "byte 0xFF is not valid UTF-8"},
    {"{\"format\": \"pcgc-plan\",\n \"a\": 1, \"\\u0061\": 2}", 2, 10,
     "the member \"a\" is given twice (first at line 2, column 2)"},
    {"{\"format\": \"pcgc-\\u0000plan\"}", 1, 18, "\\u0000, a NUL character"},
    {"{\"format\": \"\xed\xa0\x80\"}", 1, 13, "byte 0xED is not valid UTF-8"},
    {"{\"format\": \"pcgc-plot\", \"version\": 1}", 1, 12, "not a pcgc plan"},
    {"{\"format\": \"pcgc-plan\", \"version\": 1}", 1, 36, "unsupported \"version\""},
    {"{\"format\": \"pcgc-plan\", \"version\": 2, \"machine\": \"m\",\n \"devices\": 0}", 2, 13, "\"devices\" must be"},
    {"{\"format\": \"pcgc-plan\", \"version\": 2, \"machine\": \"m\",\n \"devices\": 4}", 2, 13,
     "the plan was lowered for 4 devices, but the machine has 8"},
    {"{\"format\": \"pcgc-plan\", \"version\": 2, \"machine\": \"m\", \"devices\": 8,\n \"optimizer\": \"lion\"}", 2, 15,
     "\"optimizer\" must be"},
    {"{\"format\": \"pcgc-plan\", \"version\": 2, \"machine\": \"m\", \"devices\": 8, \"optimizer\": \"sgd\",\n"
     " \"program\": null}", 1, 1, "no \"checksum\""},
    {"{\"format\": \"pcgc-strategy\",\n  \"version\": 7}", 2, 14, "unsupported \"version\""},
    {HEAD "\"model\": 42, \"views\": {}}", 2, 10, "\"model\" must be a string"},
    {HEAD MODEL "\"views\": {\"xp\": [0, 1], \"y\": [0, 1], \"z\": [0, 1]}}", 3, 38, "no node of the model"},
    {HEAD MODEL "\"views\": {\"xp\": [0, 1],\n  \"y\": [0, -1]}}", 4, 8, "[start, stride]"},
    {HEAD MODEL "\"views\": {\"xp\": [0, 1], \"y\": [9, 1]}}", 3, 30, "the machine has 8 devices"},
    {HEAD MODEL "\"views\": {\"xp\": [0, 1]}}", 3, 10, "no view for relu 'y'"},
    {HEAD "\"model\": \"input x: f32[8, 4]\\ny = rleu(x)\\n\",\n\"views\": {}}", 2, 35, "in \"model\" (its line 2)"},
    {HEAD MODEL "\"views\": {\"xp\": [0, 1], \"y\": [0, 1]},\n\"choice\": {\"dp\": 0, \"tp\": 1, \"pp\": 1, \"micro\": 1}}",
     4, 18, "\"choice\".\"dp\""},
    {HEAD MODEL "\"views\": {\"xp\": [0, 1], \"y\": [0, 1]},\n\"choice\": {\"dp\": 1, \"tp\": 1, \"pp\": 1, \"micro\": 1, "
                "\"schedule\": \"zigzag\"}}",
     4, 63, "\"choice\".\"schedule\" must be \"gpipe\" or \"1f1b\""},
    {HEAD MODEL "\"views\": {\"xp\": [0, 1], \"y\": [0, 1]},\n\"choice\": {\"dp\": 1, \"tp\": 1, \"pp\": 1, \"micro\": 1, "
                "\"recompute\": 1}}",
     4, 64, "\"choice\".\"recompute\" must be true or false"},
    {HEAD MODEL "\"views\": {\"xp\": [0, 1], \"y\": [0, 1]},\n\"choice\": {\"dp\": 1, \"tp\": 1, \"pp\": 1, \"micro\": 1, "
                "\"zero\": \"yes\"}}",
     4, 59, "\"choice\".\"zero\" must be true, false or the ZeRO stage 0, 1, 2 or 3"},
    {HEAD MODEL "\"views\": {\"xp\": [0, 1], \"y\": [0, 1]},\n\"choice\": {\"dp\": 1, \"tp\": 1, \"pp\": 1, \"micro\": 1, "
                "\"zero\": 4}}",
     4, 59, "\"choice\".\"zero\" must be true, false or the ZeRO stage 0, 1, 2 or 3"},
    {HEAD MODEL "\"views\": {\"xp\": [0, 1], \"y\": [0, 1]},\n\"predicted\": {\"iteration_s\": \"fast\"}}", 4, 30,
     "\"iteration_s\""},
    {HEAD MODEL "\"views\": {\"xp\": [0, 1], \"y\": [0, 1]},\n\"program\": {\"digest\": \"0123456789abcdef\", \"tasks\": 1, "
                "\"instructions\": 1, \"peak_bytes\": 0, \"arena_bytes\": 0, \"order\": \"sideways\"}}",
     4, 118, "\"program\".\"order\" must be \"topological\" or \"critical-path\""},
};

START_TEST(malformed_strategy_files) {
  const bad_case *c = &bad_cases[_i];
  pcgc_graph *g = (pcgc_graph *)1;
  pcgc_mapping mp;
  pcgc_error err = {0};
  pcgc_status st = pcgc_strategy_file_parse(c->text, strlen(c->text), "bad.json", 8, &g, &mp, NULL, &err);
  ck_assert_msg(st == PCGC_ERR_PARSE, "case %d: status %d", _i, st);
  ck_assert_ptr_null(g);
  ck_assert_ptr_null(mp.view);
  ck_assert_str_eq(err.file, "bad.json");
  ck_assert_msg(err.line == c->line && err.col == c->col, "case %d: at %d:%d, want %d:%d (%s)", _i, err.line, err.col,
                c->line, c->col, err.message);
  ck_assert_msg(strstr(err.message, c->want) != NULL, "case %d: '%s' lacks '%s'", _i, err.message, c->want);
}
END_TEST

START_TEST(good_minimal_strategy) {
  const char *t = HEAD MODEL "\"views\": {\"xp\": [0, 1], \"y\": [2, 3]}}";
  pcgc_graph *g;
  pcgc_mapping mp;
  pcgc_strategy_info in;
  pcgc_error err = {0};
  ck_assert_msg(pcgc_strategy_file_parse(t, strlen(t), "ok.json", 8, &g, &mp, &in, &err) == PCGC_OK, "%s",
                err.message);
  int y = pcgc_graph_find(g, "y");
  ck_assert_int_eq(mp.view[y].start, 2);
  ck_assert_int_eq(mp.view[y].stride, 3);
  ck_assert(!in.has_predicted && !in.has_choice);
  pcgc_mapping_destroy(&mp);
  pcgc_graph_free(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("expert");
  TCase *tc = tcase_create("search");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, tensor_parallel_beats_data_parallel);
  tcase_add_test(tc, data_parallel_for_convolutions);
  tcase_add_test(tc, table_too_large_is_sharded);
  tcase_add_test(tc, one_f_one_b_and_recompute_where_gpipe_does_not_fit);
  tcase_add_test(tc, nothing_fits_is_an_error);
  tcase_add_test(tc, deterministic);
  tcase_add_test(tc, ranked_by_programs);
  suite_add_tcase(s, tc);
  tc = tcase_create("build");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, plain_data_parallel_is_the_baseline);
  tcase_add_test(tc, hybrid_and_pipeline_builds);
  tcase_add_test(tc, one_dp_copy_simulated_for_all);
  tcase_add_test(tc, copies_checked_before_copy_0_alone_is_built);
  tcase_add_test(tc, parallel_model_is_refused);
  suite_add_tcase(s, tc);
  tc = tcase_create("files");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, strategy_file_round_trip);
  tcase_add_loop_test(tc, malformed_strategy_files, 0, (int)(sizeof bad_cases / sizeof *bad_cases));
  tcase_add_test(tc, good_minimal_strategy);
  suite_add_tcase(s, tc);
  return s;
}

PCGC_CHECK_MAIN(suite)
