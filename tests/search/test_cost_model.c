/*
 * test_cost_model.c — the first layer of the cost model (cost/cost.c), against
 * hand-computed numbers on the shipped presets:
 *   - the efficiency table covers every op, matrix ops are the five GEMM
 *     families, no-kernel ops cost nothing;
 *   - roofline: a compute-bound bf16 matmul and a memory-bound relu on
 *     dgx-h100, vector ops capped at the f32 rate, CPU efficiencies;
 *   - pieces: work splits by shards, created sums and micro-batches but not
 *     by replicas or inherited sums; the data-parallel linear of search.h's
 *     worked example costs what the header says;
 *   - communication: every flat ring/tree formula; ring all-reduce in a node
 *     = 2(p-1)/p·N/B + 2(p-1)·α; the tree/ring crossover; hierarchical
 *     collectives across nodes; shared links dividing bandwidth; groups that
 *     do not fit; point-to-point;
 *   - memory per device by optimizer;
 *   - speed: a cost call takes well under a microsecond.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "search.h"

#ifndef PCGC_SOURCE_DIR
#error "PCGC_SOURCE_DIR must be defined to the source tree"
#endif

#define GiB 1073741824.0
#define MiB 1048576.0

/* ------------------------------------------------------------- helpers */

#define close_to(got, want) close_to_at(got, want, __FILE__, __LINE__)
static void close_to_at(double got, double want, const char *file, int line) {
  ck_assert_msg(fabs(got - want) <= 1e-9 * fabs(want) + 1e-18, "%s:%d: got %.17g, want %.17g", file, line, got,
                want);
}

/* A preset by path (test_machine.c checks lookup by name). */
static pcgc_machine machine(const char *name) {
  pcgc_machine m;
  pcgc_error err = {0};
  char path[4096];
  snprintf(path, sizeof path, "%s/machines/%s.machine", PCGC_SOURCE_DIR, name);
  pcgc_status s = pcgc_machine_load(path, &m, &err);
  ck_assert_msg(s == PCGC_OK, "%s: %s", name, err.message);
  return m;
}

static pcgc_ptensor ten(pcgc_dtype dt, int rank, const int64_t *dims) {
  pcgc_ptensor t;
  pcgc_ptensor_init(&t, dt, rank, dims);
  return t;
}
#define T(dt, ...) ten(dt, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static pcgc_attrs no_attrs(pcgc_op_kind k) {
  pcgc_attrs a;
  pcgc_attrs_init(&a, k);
  return a;
}

/* --------------------------------------------------------- efficiency */

START_TEST(efficiency_table) {
  for (int k = 0; k < PCGC_OP_COUNT; k++) {
    const pcgc_op_efficiency *e = pcgc_cost_efficiency((pcgc_op_kind)k);
    pcgc_op_class c = pcgc_op_class_of((pcgc_op_kind)k);
    bool view = k == PCGC_OP_RESHAPE || k == PCGC_OP_FLATTEN;
    bool want_kernel = (c == PCGC_CLASS_COMPUTE || c == PCGC_CLASS_LOSS) && !view;
    ck_assert_msg(e->kernel == want_kernel, "%s: kernel %d", pcgc_op_name((pcgc_op_kind)k), e->kernel);
    bool want_matrix = k == PCGC_OP_LINEAR || k == PCGC_OP_MATMUL || k == PCGC_OP_BATCH_MATMUL ||
                       k == PCGC_OP_CONV2D || k == PCGC_OP_ATTENTION || k == PCGC_OP_EXPERT_LINEAR;
    ck_assert_msg(e->matrix == want_matrix, "%s: matrix %d", pcgc_op_name((pcgc_op_kind)k), e->matrix);
    if (e->kernel)
      ck_assert_msg(e->gpu > 0 && e->gpu <= 1 && e->cpu > 0 && e->cpu <= 1, "%s: efficiency %g/%g",
                    pcgc_op_name((pcgc_op_kind)k), e->gpu, e->cpu);
  }
  close_to(pcgc_cost_efficiency(PCGC_OP_LINEAR)->gpu, 0.70);
  close_to(pcgc_cost_efficiency(PCGC_OP_MATMUL)->cpu, 0.85);
  close_to(pcgc_cost_efficiency(PCGC_OP_RELU)->gpu, 0.5);
  ck_assert(!pcgc_cost_efficiency((pcgc_op_kind)PCGC_OP_COUNT)->kernel);
  ck_assert(!pcgc_cost_efficiency((pcgc_op_kind)-1)->kernel);
}
END_TEST

/* ------------------------------------------------------------- roofline */

START_TEST(roofline_matmul_compute_bound) {
  pcgc_machine m = machine("dgx-h100");
  pcgc_ptensor in[2] = {T(PCGC_BF16, 8192, 8192), T(PCGC_BF16, 8192, 8192)}, out = T(PCGC_BF16, 8192, 8192);
  pcgc_attrs a = no_attrs(PCGC_OP_MATMUL);
  pcgc_op_cost c;
  pcgc_op_cost_of(PCGC_OP_MATMUL, &a, 2, in, 1, &out, &c);
  double f = 2.0 * 8192 * 8192 * 8192; /* 1.1e12 FLOPs, 402 MB */
  close_to(c.fwd_flops, f);
  close_to(c.fwd_bytes, 3.0 * 8192 * 8192 * 2);
  pcgc_op_time t = pcgc_cost_op_time(&m, PCGC_OP_MATMUL, PCGC_BF16, &c);
  /* compute: 1.1e12 / (989e12 × 0.70) = 1.588 ms > memory: 402 MB / 3.35 TB/s = 0.120 ms */
  close_to(t.fwd, f / (989e12 * 0.70) + 5e-6);
  close_to(t.bwd, 2 * f / (989e12 * 0.70) + 5e-6);
  ck_assert(t.fwd > 1.59e-3 && t.fwd < 1.60e-3);
  /* f32 runs on the CUDA cores: 67 TFLOP/s */
  close_to(pcgc_cost_roofline(&m, PCGC_OP_MATMUL, PCGC_F32, f, 0), f / (67e12 * 0.70) + 5e-6);
}
END_TEST

START_TEST(roofline_elementwise_memory_bound) {
  pcgc_machine m = machine("dgx-h100");
  pcgc_ptensor x = T(PCGC_BF16, 8192, 8192), y = x;
  pcgc_attrs a = no_attrs(PCGC_OP_RELU);
  pcgc_op_cost c;
  pcgc_op_cost_of(PCGC_OP_RELU, &a, 1, &x, 1, &y, &c);
  double n = 8192.0 * 8192;
  close_to(c.fwd_flops, n);
  close_to(c.fwd_bytes, 2 * n * 2); /* read x, write y: 268 MB */
  pcgc_op_time t = pcgc_cost_op_time(&m, PCGC_OP_RELU, PCGC_BF16, &c);
  /* memory: 268 MB / 3.35 TB/s = 80.1 us > compute: 67e6 / (67e12 × 0.5) = 2 us */
  close_to(t.fwd, 4 * n / 3.35e12 + 5e-6);
  close_to(t.bwd, 8 * n / 3.35e12 + 5e-6);
  ck_assert(t.fwd > 85e-6 && t.fwd < 85.2e-6);
  /* vector ops never reach the bf16 tensor peak: capped at f32's 67 TFLOP/s */
  close_to(pcgc_cost_roofline(&m, PCGC_OP_GELU, PCGC_F16, 1e12, 0), 1e12 / (67e12 * 0.5) + 5e-6);
  close_to(pcgc_cost_roofline(&m, PCGC_OP_MATMUL, PCGC_F16, 1e12, 0), 1e12 / (989e12 * 0.7) + 5e-6);
  /* both terms: the larger wins */
  close_to(pcgc_cost_roofline(&m, PCGC_OP_ADD, PCGC_F32, 1e9, 3.35e9), 1e-3 + 5e-6);
}
END_TEST

START_TEST(roofline_no_work) {
  pcgc_machine m = machine("dgx-h100");
  ck_assert(pcgc_cost_roofline(&m, PCGC_OP_RESHAPE, PCGC_F32, 0, 0) == 0);
  ck_assert(pcgc_cost_roofline(&m, PCGC_OP_PARTITION, PCGC_F32, 1e9, 1e9) == 0);
  ck_assert(pcgc_cost_roofline(&m, PCGC_OP_WEIGHT, PCGC_F32, 0, 1e9) == 0);
  ck_assert(pcgc_cost_roofline(&m, PCGC_OP_RELU, PCGC_F32, 0, 0) == 0);
  /* a copy: bytes only */
  close_to(pcgc_cost_roofline(&m, PCGC_OP_TRANSPOSE, PCGC_F32, 0, 3.35e9), 1e-3 + 5e-6);
  /* integer dtypes use the f32 entry */
  close_to(pcgc_cost_roofline(&m, PCGC_OP_ADD, PCGC_I64, 67e12 * 0.5, 0), 1 + 5e-6);
}
END_TEST

START_TEST(roofline_cpu) {
  pcgc_machine m = machine("cpu-local");
  close_to(pcgc_cost_roofline(&m, PCGC_OP_LINEAR, PCGC_F32, 1e12, 1e6), 1e12 / (210e9 * 0.85) + 0.3e-6);
  close_to(pcgc_cost_roofline(&m, PCGC_OP_LINEAR, PCGC_F64, 1e12, 1e6), 1e12 / (105e9 * 0.85) + 0.3e-6);
  close_to(pcgc_cost_roofline(&m, PCGC_OP_GELU, PCGC_F32, 8e9, 8e9), 8e9 / (210e9 * 0.1) + 0.3e-6);
  close_to(pcgc_cost_roofline(&m, PCGC_OP_ADD, PCGC_F32, 1e9, 12e9), 12e9 / 38e9 + 0.3e-6);
}
END_TEST

/* --------------------------------------------------------------- pieces */

START_TEST(work_split) {
  /* linear with its contracted dim sharded 4 ways: output sum 4, a quarter each */
  pcgc_ptensor in[2] = {T(PCGC_F32, 64, 256), T(PCGC_F32, 256, 128)}, out;
  in[0].degree[1] = 4;
  in[1].degree[0] = 4;
  pcgc_attrs a = no_attrs(PCGC_OP_LINEAR);
  pcgc_error err = {0};
  ck_assert_int_eq(pcgc_op_infer(PCGC_OP_LINEAR, &a, 2, in, &out, &err), PCGC_OK);
  ck_assert_int_eq(out.sum, 4);
  close_to(pcgc_cost_work_split(2, in, &out), 4);
  /* adding partial sums: every piece is full-size */
  pcgc_ptensor p[2] = {out, out}, q;
  a = no_attrs(PCGC_OP_ADD);
  ck_assert_int_eq(pcgc_op_infer(PCGC_OP_ADD, &a, 2, p, &q, &err), PCGC_OK);
  ck_assert_int_eq(q.sum, 4);
  close_to(pcgc_cost_work_split(2, p, &q), 1);
  /* replicas repeat the work */
  pcgc_ptensor r = T(PCGC_F32, 64, 128);
  r.replica = 4;
  close_to(pcgc_cost_work_split(1, &r, &r), 1);
  /* shards and micro-batches divide it */
  pcgc_ptensor s = T(PCGC_F32, 64, 128);
  s.degree[0] = 2;
  s.degree[1] = 3;
  s.micro = 4;
  s.micro_dim = 0;
  close_to(pcgc_cost_work_split(1, &s, &s), 24);
  /* a loss accumulated over micro-batches: its input's micro-batches count */
  pcgc_ptensor loss = T(PCGC_F32, 64);
  loss.rank = 0;
  loss.micro = 4;
  loss.micro_dim = -1;
  close_to(pcgc_cost_work_split(1, &s, &loss), 4);
}
END_TEST

START_TEST(piece_bytes) {
  pcgc_ptensor t = T(PCGC_F32, 64, 256); /* 64 KiB */
  close_to(pcgc_cost_piece_bytes(&t), 65536);
  t.degree[0] = 4;
  close_to(pcgc_cost_piece_bytes(&t), 16384);
  t.sum = 2; /* partial sums are full-size */
  t.replica = 3;
  close_to(pcgc_cost_piece_bytes(&t), 16384);
  t.micro = 2;
  t.micro_dim = 1;
  close_to(pcgc_cost_piece_bytes(&t), 8192);
  t.micro_dim = -1;
  close_to(pcgc_cost_piece_bytes(&t), 16384);
}
END_TEST

START_TEST(op_dtype) {
  pcgc_ptensor idx = T(PCGC_I32, 8), tab = T(PCGC_F32, 100, 16), out = T(PCGC_F32, 8, 16);
  ck_assert_int_eq(pcgc_cost_op_dtype(2, (pcgc_ptensor[]){idx, tab}, 1, &out), PCGC_F32);
  out.dtype = PCGC_BF16;
  ck_assert_int_eq(pcgc_cost_op_dtype(2, (pcgc_ptensor[]){idx, tab}, 1, &out), PCGC_BF16);
  out.dtype = PCGC_I64;
  ck_assert_int_eq(pcgc_cost_op_dtype(1, &idx, 1, &out), PCGC_F32);
  tab.dtype = PCGC_F16;
  ck_assert_int_eq(pcgc_cost_op_dtype(2, (pcgc_ptensor[]){idx, tab}, 1, &out), PCGC_F16);
}
END_TEST

/* The worked example of search.h: data-parallel linear over 8 H100s. */
START_TEST(node_time_data_parallel_linear) {
  pcgc_machine m = machine("dgx-h100");
  pcgc_graph *g = pcgc_graph_new();
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_INPUT);
  pcgc_attrs_set_ints(&a, "shape", 2, (int64_t[]){8192, 4096});
  pcgc_attrs_set_int(&a, "dtype", PCGC_BF16);
  int x = pcgc_graph_add_node(g, PCGC_OP_INPUT, "x", &a, 0, NULL);
  pcgc_attrs_init(&a, PCGC_OP_WEIGHT);
  pcgc_attrs_set_ints(&a, "shape", 2, (int64_t[]){4096, 4096});
  pcgc_attrs_set_int(&a, "dtype", PCGC_BF16);
  int w = pcgc_graph_add_node(g, PCGC_OP_WEIGHT, "w", &a, 0, NULL);
  pcgc_attrs_init(&a, PCGC_OP_PARTITION);
  pcgc_attrs_set_int(&a, "dim", 0);
  pcgc_attrs_set_int(&a, "degree", 8);
  int xp = pcgc_graph_add_node(g, PCGC_OP_PARTITION, "xp", &a, 1, (pcgc_ref[]){{x, 0}});
  pcgc_attrs_init(&a, PCGC_OP_REPLICATE);
  pcgc_attrs_set_int(&a, "degree", 8);
  int wr = pcgc_graph_add_node(g, PCGC_OP_REPLICATE, "wr", &a, 1, (pcgc_ref[]){{w, 0}});
  pcgc_attrs_init(&a, PCGC_OP_LINEAR);
  int fc = pcgc_graph_add_node(g, PCGC_OP_LINEAR, "fc", &a, 2, (pcgc_ref[]){{xp, 0}, {wr, 0}});
  ck_assert(x >= 0 && w >= 0 && xp >= 0 && wr >= 0 && fc >= 0);

  pcgc_error err = {0};
  pcgc_op_time t;
  ck_assert_int_eq(pcgc_cost_node_time(&m, g, fc, &t, &err), PCGC_ERR_INVALID); /* not typed yet */
  ck_assert_msg(strstr(err.message, "no type"), "%s", err.message);
  ck_assert_int_eq(pcgc_graph_infer(g, &err), PCGC_OK);
  ck_assert_int_eq(pcgc_cost_node_time(&m, g, fc, &t, &err), PCGC_OK);
  double f = 2.0 * 1024 * 4096 * 4096; /* per GPU: 1024 rows */
  close_to(t.fwd, f / (989e12 * 0.70) + 5e-6);
  close_to(t.bwd, 2 * f / (989e12 * 0.70) + 5e-6);
  ck_assert(t.fwd > 54.6e-6 && t.fwd < 54.7e-6);

  /* the piece's bytes: x/8 + w (a whole replica) + y/8 */
  const pcgc_node *n = &g->nodes[fc];
  pcgc_ptensor in[2] = {g->nodes[xp].out[0], g->nodes[wr].out[0]};
  pcgc_op_cost logical, piece;
  pcgc_op_cost_of(n->kind, n->attrs, 2, in, 1, n->out, &logical);
  pcgc_cost_op_piece(2, in, 1, n->out, &logical, &piece);
  close_to(piece.fwd_flops, f);
  close_to(piece.fwd_bytes, (8 + 32 + 8) * MiB);
  close_to(piece.bwd_bytes, 2 * 48 * MiB);

  /* parallel operators and sources cost nothing here */
  ck_assert_int_eq(pcgc_cost_node_time(&m, g, xp, &t, &err), PCGC_OK);
  ck_assert(t.fwd == 0 && t.bwd == 0);
  ck_assert_int_eq(pcgc_cost_node_time(&m, g, w, &t, &err), PCGC_OK);
  ck_assert(t.fwd == 0 && t.bwd == 0);
  ck_assert_int_eq(pcgc_cost_node_time(&m, g, 99, &t, &err), PCGC_ERR_INVALID);
  pcgc_graph_free(g);
}
END_TEST

/* -------------------------------------------------------- communication */

START_TEST(flat_formulas) {
  const double a = 1e-5, b = 1e10, n = 1e8, p = 6, L = 3; /* ceil(log2 6) = 3 */
  const struct {
    pcgc_collective c;
    double ring, tree;
  } cases[] = {
      {PCGC_COLL_ALL_REDUCE, 2 * (p - 1) * a + 2 * (p - 1) / p * n / b, 2 * L * a + 2 * n / b},
      {PCGC_COLL_REDUCE_SCATTER, (p - 1) * a + (p - 1) / p * n / b, L * a + (p - 1) / p * n / b},
      {PCGC_COLL_ALL_GATHER, (p - 1) * a + (p - 1) / p * n / b, L * a + (p - 1) / p * n / b},
      {PCGC_COLL_BROADCAST, (p - 1) * a + n / b, L * (a + n / b)},
      {PCGC_COLL_ALL_TO_ALL, (p - 1) * a + (p - 1) / p * n / b, L * a + L * n / (2 * b)},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    close_to(pcgc_comm_flat_time(cases[i].c, PCGC_ALGO_RING, 6, a, b, n), cases[i].ring);
    close_to(pcgc_comm_flat_time(cases[i].c, PCGC_ALGO_TREE, 6, a, b, n), cases[i].tree);
    close_to(pcgc_comm_flat_time(cases[i].c, PCGC_ALGO_AUTO, 6, a, b, n), fmin(cases[i].ring, cases[i].tree));
    ck_assert(pcgc_comm_flat_time(cases[i].c, PCGC_ALGO_AUTO, 1, a, b, n) == 0);
    ck_assert(pcgc_comm_flat_time(cases[i].c, PCGC_ALGO_AUTO, 6, a, b, 0) == 0);
  }
  ck_assert_str_eq(pcgc_collective_name(PCGC_COLL_REDUCE_SCATTER), "reduce-scatter");
  ck_assert_str_eq(pcgc_comm_algo_name(PCGC_ALGO_TREE), "tree");
}
END_TEST

START_TEST(ring_all_reduce_in_a_node) {
  pcgc_machine m = machine("dgx-h100");
  const double N = GiB, B = 450e9, alpha = 2e-6;
  for (int p = 2; p <= 8; p++) {
    pcgc_comm_group g = {1, p, 1};
    double want = 2.0 * (p - 1) / p * N / B + 2.0 * (p - 1) * alpha;
    close_to(pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_RING, g, N), want);
    /* 1 GiB: bandwidth-bound, so AUTO takes the ring */
    close_to(pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, g, N), want);
  }
  /* 8 GPUs: 2 × 7/8 × 1 GiB / 450 GB/s + 14 × 2 us = 4.204 ms */
  pcgc_comm_group g8 = {1, 8, 0};
  double t = pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_RING, g8, N);
  ck_assert(t > 4.20e-3 && t < 4.21e-3);
  /* search.h's worked example: the 32 MiB weight gradient */
  close_to(pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, g8, 32 * MiB),
           2 * 7.0 / 8 * 32 * MiB / B + 14 * alpha);
}
END_TEST

START_TEST(tree_or_ring) {
  pcgc_machine m = machine("dgx-h100");
  const double B = 450e9, alpha = 2e-6;
  pcgc_comm_group g = {1, 8, 1};
  /* ring - tree = 2α(p-1-L) - 2N/(pB): zero at N* = p·B·α·(p-1-L) = 28.8 MB */
  const double Nstar = 8 * B * alpha * (8 - 1 - 3);
  close_to(Nstar, 28.8e6);
  double ring = pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_RING, g, Nstar);
  double tree = pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_TREE, g, Nstar);
  close_to(ring, tree);
  for (double N = 1e3; N < 1e10; N *= 3) {
    double r = pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_RING, g, N);
    double t = pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_TREE, g, N);
    double a = pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, g, N);
    ck_assert_msg(N < Nstar ? t < r && a == t : r < t && a == r, "N = %g: ring %g tree %g auto %g", N, r, t, a);
  }
  /* small messages: tree = 2·3·α + 2N/B beats ring = 14α + 1.75 N/B */
  close_to(pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, g, 1e4), 6 * alpha + 2 * 1e4 / B);
  /* two devices: the ring always wins (same steps, half the bytes) */
  pcgc_comm_group g2 = {1, 2, 1};
  for (double N = 1; N < 1e10; N *= 10)
    close_to(pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, g2, N), 2 * alpha + N / B);
}
END_TEST

START_TEST(hierarchical_all_reduce) {
  /* 4 nodes × 8 GPUs, one NIC per GPU */
  pcgc_machine m = machine("h100-4x8");
  const double N = GiB, ai = 2e-6, bi = 450e9, ae = 5e-6, be = 50e9;
  pcgc_comm_group g = {4, 8, 1};
  double rs = 7 * ai + 7.0 / 8 * N / bi;                   /* intra reduce-scatter */
  double ar = 2 * 3 * ae + 2 * 3.0 / 4 * (N / 8) / be;      /* inter all-reduce of N/8, 8 NICs at once */
  double ag = rs;                                           /* intra all-gather */
  close_to(pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_RING, g, N), rs + ar + ag);
  /* AUTO picks per phase: recursive halving/doubling inside, double tree or ring across */
  double rs_a = fmin(rs, 3 * ai + 7.0 / 8 * N / bi);
  double ar_a = fmin(ar, 2 * 2 * ae + 2 * (N / 8) / be);
  close_to(pcgc_comm_time(&m, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, g, N), 2 * rs_a + ar_a);

  /* Summit: one pair of rails per node shared by its 6 GPUs */
  pcgc_machine s = machine("summit-v100");
  const double si = 50e9, se = 25e9;
  pcgc_comm_group gs = {32, 6, 1};
  double srs = 5 * ai + 5.0 / 6 * N / si;
  double sar = 2 * 31 * ae + 2 * 31.0 / 32 * (N / 6) / (se / 6); /* six streams share 25 GB/s */
  close_to(pcgc_comm_time(&s, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_RING, gs, N), 2 * srs + sar);
  /* so the inter phase costs what one stream of all N would */
  close_to(sar, 2 * 31 * ae + 2 * 31.0 / 32 * N / se);
}
END_TEST

START_TEST(shared_links_and_concurrency) {
  const double N = GiB, ae = 5e-6;
  /* data parallel across Summit's nodes beside 6-way tensor parallel inside:
   * six groups of one GPU per node share the rails */
  pcgc_machine s = machine("summit-v100");
  pcgc_comm_group one = {32, 1, 1}, six = {32, 1, 6};
  close_to(pcgc_comm_time(&s, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_RING, one, N),
           2 * 31 * ae + 2 * 31.0 / 32 * N / 25e9);
  close_to(pcgc_comm_time(&s, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_RING, six, N),
           2 * 31 * ae + 2 * 31.0 / 32 * N / (25e9 / 6));
  /* a NIC per GPU does not share: concurrency changes nothing */
  pcgc_machine h = machine("h100-4x8");
  pcgc_comm_group h1 = {4, 1, 1}, h8 = {4, 1, 8};
  close_to(pcgc_comm_time(&h, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_RING, h8, N),
           pcgc_comm_time(&h, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_RING, h1, N));
  close_to(pcgc_comm_time(&h, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_RING, h1, N), 2 * 3 * ae + 2 * 3.0 / 4 * N / 50e9);
  /* a shared intra link (a PCIe bus): p devices split it */
  pcgc_machine bus = machine("k80-16x4");
  bus.intra.shared = true;
  pcgc_comm_group b4 = {1, 4, 1};
  close_to(pcgc_comm_time(&bus, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_RING, b4, N),
           2 * 3 * 5e-6 + 2 * 3.0 / 4 * N / (12e9 / 4));
}
END_TEST

START_TEST(hierarchical_other_collectives) {
  pcgc_machine m = machine("h100-4x8");
  const double N = 256 * MiB, ai = 2e-6, bi = 450e9, ae = 5e-6, be = 50e9;
  pcgc_comm_group g = {4, 8, 1};
  double intra_rs = 7 * ai + 7.0 / 8 * N / bi, inter_rs = 3 * ae + 3.0 / 4 * (N / 8) / be;
  close_to(pcgc_comm_time(&m, PCGC_COLL_REDUCE_SCATTER, PCGC_ALGO_RING, g, N), intra_rs + inter_rs);
  close_to(pcgc_comm_time(&m, PCGC_COLL_ALL_GATHER, PCGC_ALGO_RING, g, N), inter_rs + intra_rs);
  close_to(pcgc_comm_time(&m, PCGC_COLL_BROADCAST, PCGC_ALGO_RING, g, N),
           (3 * ae + N / be) + (7 * ai + N / bi));
  close_to(pcgc_comm_time(&m, PCGC_COLL_ALL_TO_ALL, PCGC_ALGO_RING, g, N),
           7 * ai + 24 * ae + fmax(7.0 / 32 * N / bi, 24.0 / 32 * N / be));
  close_to(pcgc_comm_time(&m, PCGC_COLL_ALL_TO_ALL, PCGC_ALGO_TREE, g, N), 5 * ae + 5 * N / (2 * be));
  /* one GPU per node: flat on the inter link */
  pcgc_comm_group g1 = {4, 1, 1};
  close_to(pcgc_comm_time(&m, PCGC_COLL_ALL_GATHER, PCGC_ALGO_RING, g1, N), 3 * ae + 3.0 / 4 * N / be);
}
END_TEST

START_TEST(groups_that_do_not_fit) {
  pcgc_machine d = machine("dgx-h100"), h = machine("h100-4x8"), c = machine("cpu-local");
  pcgc_comm_group two_nodes = {2, 8, 1}, nine = {1, 9, 1}, crowded = {1, 4, 3}, single = {1, 1, 1};
  ck_assert(isinf(pcgc_comm_time(&d, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, two_nodes, 1e6)));
  ck_assert(isinf(pcgc_comm_time(&h, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, nine, 1e6)));
  ck_assert(isinf(pcgc_comm_time(&h, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, crowded, 1e6)));
  ck_assert(pcgc_comm_time(&c, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, single, 1e6) == 0);
  ck_assert(pcgc_comm_time(&h, PCGC_COLL_ALL_REDUCE, PCGC_ALGO_AUTO, two_nodes, 0) == 0);
  ck_assert(isinf(pcgc_comm_p2p_time(&d, false, 1, 1e6)));
  ck_assert(isinf(pcgc_comm_p2p_time(&c, true, 1, 1e6)));
}
END_TEST

START_TEST(group_of_devices) {
  pcgc_machine m = machine("h100-4x8");
  pcgc_comm_group g = pcgc_comm_group_of(&m, 8, (int[]){0, 1, 2, 3, 4, 5, 6, 7});
  ck_assert(g.nodes == 1 && g.per_node == 8 && g.concurrent == 1);
  g = pcgc_comm_group_of(&m, 4, (int[]){0, 8, 16, 24});
  ck_assert(g.nodes == 4 && g.per_node == 1);
  g = pcgc_comm_group_of(&m, 5, (int[]){10, 0, 8, 1, 9});
  ck_assert(g.nodes == 2 && g.per_node == 3);
  g = pcgc_comm_group_of(&m, 0, NULL);
  ck_assert(g.nodes == 0 && g.per_node == 0);
}
END_TEST

START_TEST(point_to_point) {
  pcgc_machine d = machine("dgx-h100"), s = machine("summit-v100"), h = machine("h100-4x8");
  close_to(pcgc_comm_p2p_time(&d, true, 1, GiB), 2e-6 + GiB / 450e9);
  close_to(pcgc_comm_p2p_time(&s, false, 3, GiB), 5e-6 + GiB / (25e9 / 3));
  close_to(pcgc_comm_p2p_time(&s, false, 0, GiB), 5e-6 + GiB / 25e9);
  close_to(pcgc_comm_p2p_time(&h, false, 8, GiB), 5e-6 + GiB / 50e9);
  ck_assert(pcgc_comm_p2p_time(&h, false, 8, 0) == 0);
}
END_TEST

/* ---------------------------------------------------------------- memory */

START_TEST(memory_per_device) {
  pcgc_memory r = pcgc_cost_memory(PCGC_OPTIM_ADAM, 1e9, 3e9, 0.5e9);
  close_to(r.weights, 1e9);
  close_to(r.gradients, 1e9);
  close_to(r.optimizer, 2e9);
  close_to(r.activations, 3e9);
  close_to(r.comm, 0.5e9);
  close_to(r.total, 7.5e9);
  close_to(pcgc_cost_memory(PCGC_OPTIM_MOMENTUM, 1e9, 0, 0).total, 3e9);
  close_to(pcgc_cost_memory(PCGC_OPTIM_SGD, 1e9, 0, 0).total, 2e9);
  /* BERT-Large's 335M f32 parameters with Adam: 16 bytes each, 5.36 GB:
   * fits a 16 GB V100 with room for activations */
  pcgc_machine s = machine("summit-v100");
  pcgc_memory b = pcgc_cost_memory(PCGC_OPTIM_ADAM, 335e6 * 4, 4e9, 256 * MiB);
  ck_assert(b.total < pcgc_machine_usable_memory(&s));
  ck_assert(pcgc_cost_memory(PCGC_OPTIM_ADAM, 335e6 * 4, 11e9, 0).total > pcgc_machine_usable_memory(&s));
}
END_TEST

/* ----------------------------------------------------------------- speed */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

START_TEST(speed) {
  pcgc_machine m = machine("summit-v100");
  pcgc_comm_group g = {32, 6, 1};
  const int n = 1000000;
  volatile double sink = 0;
  double t0 = now();
  for (int i = 0; i < n; i++) {
    sink += pcgc_comm_time(&m, (pcgc_collective)(i % PCGC_COLL_COUNT), PCGC_ALGO_AUTO, g, 1e3 + i);
    sink += pcgc_cost_roofline(&m, PCGC_OP_LINEAR, PCGC_F16, 1e9 + i, 1e6);
  }
  double per = (now() - t0) / n;
  printf("speed: %.0f ns per collective + roofline pair\n", per * 1e9);
  ck_assert(sink > 0);
  ck_assert_msg(per < 5e-6, "%.0f ns per call pair", per * 1e9); /* loose: sanitizers, valgrind */
}
END_TEST

/* ---------------------------------------------------------------- suite */

static Suite *suite(void) {
  Suite *s = suite_create("cost");
  TCase *tc = tcase_create("op time");
  tcase_add_test(tc, efficiency_table);
  tcase_add_test(tc, roofline_matmul_compute_bound);
  tcase_add_test(tc, roofline_elementwise_memory_bound);
  tcase_add_test(tc, roofline_no_work);
  tcase_add_test(tc, roofline_cpu);
  tcase_add_test(tc, work_split);
  tcase_add_test(tc, piece_bytes);
  tcase_add_test(tc, op_dtype);
  tcase_add_test(tc, node_time_data_parallel_linear);
  suite_add_tcase(s, tc);
  tc = tcase_create("communication");
  tcase_add_test(tc, flat_formulas);
  tcase_add_test(tc, ring_all_reduce_in_a_node);
  tcase_add_test(tc, tree_or_ring);
  tcase_add_test(tc, hierarchical_all_reduce);
  tcase_add_test(tc, shared_links_and_concurrency);
  tcase_add_test(tc, hierarchical_other_collectives);
  tcase_add_test(tc, groups_that_do_not_fit);
  tcase_add_test(tc, group_of_devices);
  tcase_add_test(tc, point_to_point);
  suite_add_tcase(s, tc);
  tc = tcase_create("memory and speed");
  tcase_add_test(tc, memory_per_device);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, speed);
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
