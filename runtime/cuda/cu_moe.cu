/*
 * cu_moe.cu — the mixture-of-experts routing families on the CUDA backend:
 * moe_route, moe_dispatch and moe_combine, as runtime/cpu/k_moe.c computes
 * them (see there for the layout and the semantics), in f32. expert_linear
 * is in cu_dense.cu.
 *
 * moe_route: a thread per token finds its top k (k <= 16 here) and gates;
 * a thread per group then hands out the slots in GShard's order (first
 * choices in token order, then second choices), which is sequential within
 * a group; backward counts each group's choices per expert the same way
 * and a thread per token adds its gradient. moe_dispatch and moe_combine
 * are gathers: a thread per (token, feature) or per (token, choice).
 * Unlike the CPU, the kernels do not check the slot ids (moe_route makes
 * them): an id outside the piece's experts is skipped, and moe_dispatch
 * does not detect a slot given twice.
 */
#include <math.h>

#include "cu_internal.h"
#include "k_check.h"

#define TRY(x)                    \
  do {                            \
    pcgc_status s_ = (x);         \
    if (s_ != PCGC_OK) return s_; \
  } while (0)

#define MAX_K 16

#define GRID_LOOP(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* ------------------------------------------------------------ moe_route */

/* the k choices of the X logits at l, best first, ties to the lower expert */
static __device__ void top_k(const float *__restrict__ l, int64_t X, int k, int *ch) {
  for (int j = 0; j < k; j++) {
    int best = -1;
    float bv = 0;
    for (int64_t e = 0; e < X; e++) {
      bool taken = false;
      for (int i = 0; i < j; i++) taken = taken || ch[i] == e;
      if (taken) continue;
      float v = l[e];
      if (best < 0 || v > bv || (isnan(v) && !isnan(bv))) {
        best = (int)e;
        bv = v;
      }
    }
    ch[j] = best;
  }
}

/* per token: choices into ch[t k + j], gates softmax of the chosen logits */
static __global__ void route_choose_kernel(int64_t T, int64_t X, int k, const float *__restrict__ l,
                                           int *__restrict__ ch, float *__restrict__ gate) {
  GRID_LOOP(t, T) {
    int c[MAX_K];
    const float *row = l + t * X;
    top_k(row, X, k, c);
    float m = row[c[0]], z = 0;
    for (int j = 0; j < k; j++) z += expf(row[c[j]] - m);
    for (int j = 0; j < k; j++) {
      ch[t * k + j] = c[j];
      if (gate) gate[t * k + j] = expf(row[c[j]] - m) / z;
    }
  }
}

/* per group: the slots in priority order; fill[g X + e] counts expert e's */
static __global__ void route_slots_kernel(int64_t G, int64_t S, int64_t X, int k, int64_t C,
                                          const int *__restrict__ ch, int *__restrict__ fill,
                                          int32_t *__restrict__ slot) {
  GRID_LOOP(g, G) {
    int *f = fill + g * X;
    for (int64_t e = 0; e < X; e++) f[e] = 0;
    for (int j = 0; j < k; j++)
      for (int64_t t = 0; t < S; t++) {
        int64_t i = (g * S + t) * k + j;
        int e = ch[i];
        slot[i] = f[e] < C ? (int32_t)(e * C + f[e]++) : -1;
      }
  }
}

/* per group: n[g X + e] = the group's choices of expert e */
static __global__ void route_count_kernel(int64_t G, int64_t S, int64_t X, int k, const int *__restrict__ ch,
                                          float *__restrict__ n) {
  GRID_LOOP(g, G) {
    float *ng = n + g * X;
    for (int64_t e = 0; e < X; e++) ng[e] = 0;
    for (int64_t i = g * S * k; i < (g + 1) * S * k; i++) ng[ch[i]] += 1;
  }
}

/* per token: the gates' softmax Jacobian, and the balancing term's
 * gradient scale * n_e through the softmax over all logits */
static __global__ void route_bwd_kernel(int64_t T, int64_t S, int64_t X, int k, float scale,
                                        const float *__restrict__ l, const int *__restrict__ ch,
                                        const float *__restrict__ n, const float *__restrict__ dgate,
                                        float *__restrict__ dl) {
  GRID_LOOP(t, T) {
    const float *row = l + t * X;
    float *drow = dl + t * X;
    const int *c = ch + t * k;
    float m = row[c[0]], z = 0, v = 0, gk[MAX_K];
    for (int j = 0; j < k; j++) z += gk[j] = expf(row[c[j]] - m);
    for (int j = 0; j < k; j++) {
      gk[j] /= z;
      v += gk[j] * dgate[t * k + j];
    }
    for (int j = 0; j < k; j++) drow[c[j]] += gk[j] * (dgate[t * k + j] - v);
    if (scale <= 0) continue;
    const float *ng = n + (t / S) * X;
    float mx = -INFINITY, zs = 0, u = 0;
    for (int64_t e = 0; e < X; e++) mx = fmaxf(mx, row[e]);
    for (int64_t e = 0; e < X; e++) zs += expf(row[e] - mx);
    for (int64_t e = 0; e < X; e++) u += expf(row[e] - mx) / zs * ng[e] * scale;
    for (int64_t e = 0; e < X; e++) {
      float p = expf(row[e] - mx) / zs;
      drow[e] += p * (ng[e] * scale - u);
    }
  }
}

typedef struct route_geo {
  int64_t G, S, X, C, G_all;
  int k;
  float aux;
} route_geo;

static pcgc_status route_check(const pcgc__cukargs *k, bool bwd, route_geo *g) {
  TRY(pcgc__kcheck(k, bwd, KX_F32_ONLY));
  const pcgc_buf *l = &k->in[0];
  int64_t kk = pcgc_attrs_int(k->a, "k");
  if (kk > MAX_K)
    return pcgc__kfail_st(k, PCGC_ERR_UNSUPPORTED, "k=%lld: the CUDA kernel routes at most %d experts per token",
                          (long long)kk, MAX_K);
  *g = (route_geo){l->dims[0], l->dims[1], l->dims[2], pcgc_attrs_int(k->a, "capacity"),
                   pcgc__in_piece(k, 0).global[0], (int)kk, (float)pcgc_attrs_float(k->a, "aux")};
  return PCGC_OK;
}

pcgc_status pcgc__cu_fwd_moe_route(const pcgc__cukargs *k) {
  route_geo g;
  TRY(route_check(k, false, &g));
  int64_t T = g.G * g.S;
  int *ch = (int *)pcgc__cu_scratch(k, (size_t)(T * g.k + g.G * g.X) * sizeof(int));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  if (!ch) return PCGC_ERR_NOMEM; /* the error is set */
  cudaStream_t st = k->cu->stream;
  route_choose_kernel<<<pcgc__cu_blocks(T), PCGC_CU_THREADS, 0, st>>>(T, g.X, g.k, (const float *)k->in[0].data, ch,
                                                                     (float *)k->out[0].data);
  TRY(pcgc__cu_launched(k, "routing"));
  route_slots_kernel<<<pcgc__cu_blocks(g.G), PCGC_CU_THREADS, 0, st>>>(g.G, g.S, g.X, g.k, g.C, ch, ch + T * g.k,
                                                                      (int32_t *)k->out[1].data);
  return pcgc__cu_launched(k, "slots");
}

pcgc_status pcgc__cu_bwd_moe_route(const pcgc__cukargs *k) {
  route_geo g;
  TRY(route_check(k, true, &g));
  float *dl = (float *)k->din[0].data;
  int64_t T = g.G * g.S;
  char *room = (char *)pcgc__cu_scratch(k, (size_t)(T * g.k) * sizeof(int) + (size_t)(g.G * g.X) * sizeof(float));
  if (pcgc__cu_measuring(k) || !dl) return PCGC_OK;
  if (!room) return PCGC_ERR_NOMEM; /* the error is set */
  int *ch = (int *)room;
  float *n = (float *)(room + (size_t)(T * g.k) * sizeof(int));
  cudaStream_t st = k->cu->stream;
  const float *l = (const float *)k->in[0].data;
  route_choose_kernel<<<pcgc__cu_blocks(T), PCGC_CU_THREADS, 0, st>>>(T, g.X, g.k, l, ch, NULL);
  TRY(pcgc__cu_launched(k, "routing"));
  route_count_kernel<<<pcgc__cu_blocks(g.G), PCGC_CU_THREADS, 0, st>>>(g.G, g.S, g.X, g.k, ch, n);
  TRY(pcgc__cu_launched(k, "choices per expert"));
  float scale = g.aux > 0 ? (float)((double)g.aux * (double)g.X / ((double)g.G_all * (double)g.S * (double)g.S)) : 0;
  route_bwd_kernel<<<pcgc__cu_blocks(T), PCGC_CU_THREADS, 0, st>>>(T, g.S, g.X, g.k, scale, l, ch, n,
                                                                  (const float *)k->dout[0].data, dl);
  return pcgc__cu_launched(k, "routing backward");
}

/* ------------------------------------------------ dispatch and combine */

typedef struct slot_geo {
  int64_t G, S, k; /* groups (local), tokens, choices */
  int64_t X, C, N; /* local experts, slots per expert, local features */
  int64_t x0;      /* first logical expert of the piece */
} slot_geo;

/* the local slot row of choice i (slot id s), or -1 outside the piece */
static __device__ __forceinline__ int64_t slot_row(int64_t i, int64_t S, int64_t k, int64_t X, int64_t C, int64_t x0,
                                                   const int32_t *__restrict__ slot) {
  int64_t id = (int64_t)slot[i] - x0 * C;
  if (slot[i] < 0 || id < 0 || id >= X * C) return -1;
  return (i / (S * k)) * X * C + id;
}

static __global__ void dispatch_fwd_kernel(slot_geo g, const float *__restrict__ x, const int32_t *__restrict__ s,
                                           float *__restrict__ y) {
  GRID_LOOP(i, g.G * g.S * g.k * g.N) {
    int64_t ch = i / g.N, n = i % g.N, row = slot_row(ch, g.S, g.k, g.X, g.C, g.x0, s);
    if (row >= 0) y[row * g.N + n] = x[(ch / g.k) * g.N + n];
  }
}

static __global__ void dispatch_bwd_kernel(slot_geo g, const float *__restrict__ dy, const int32_t *__restrict__ s,
                                           float *__restrict__ dx) {
  GRID_LOOP(i, g.G * g.S * g.N) {
    int64_t tok = i / g.N, n = i % g.N;
    float acc = 0;
    for (int64_t j = 0; j < g.k; j++) {
      int64_t row = slot_row(tok * g.k + j, g.S, g.k, g.X, g.C, g.x0, s);
      if (row >= 0) acc += dy[row * g.N + n];
    }
    dx[i] += acc;
  }
}

static __global__ void combine_fwd_kernel(slot_geo g, const float *__restrict__ y, const float *__restrict__ gate,
                                          const int32_t *__restrict__ s, float *__restrict__ o) {
  GRID_LOOP(i, g.G * g.S * g.N) {
    int64_t tok = i / g.N, n = i % g.N;
    float acc = 0;
    for (int64_t j = 0; j < g.k; j++) {
      int64_t row = slot_row(tok * g.k + j, g.S, g.k, g.X, g.C, g.x0, s);
      if (row >= 0) acc += gate[tok * g.k + j] * y[row * g.N + n];
    }
    o[i] = acc;
  }
}

/* dy[slot row] += gate dout (a thread per (choice, feature): each slot has one choice) */
static __global__ void combine_bwd_y_kernel(slot_geo g, const float *__restrict__ gate, const int32_t *__restrict__ s,
                                            const float *__restrict__ dout, float *__restrict__ dy) {
  GRID_LOOP(i, g.G * g.S * g.k * g.N) {
    int64_t ch = i / g.N, n = i % g.N, row = slot_row(ch, g.S, g.k, g.X, g.C, g.x0, s);
    if (row >= 0) atomicAdd(&dy[row * g.N + n], gate[ch] * dout[(ch / g.k) * g.N + n]);
  }
}

/* dgate[choice] += dout . y[slot row] */
static __global__ void combine_bwd_gate_kernel(slot_geo g, const float *__restrict__ y,
                                               const int32_t *__restrict__ s, const float *__restrict__ dout,
                                               float *__restrict__ dg) {
  GRID_LOOP(ch, g.G * g.S * g.k) {
    int64_t row = slot_row(ch, g.S, g.k, g.X, g.C, g.x0, s);
    if (row < 0) continue;
    float dot = 0;
    for (int64_t n = 0; n < g.N; n++) dot += dout[(ch / g.k) * g.N + n] * y[row * g.N + n];
    dg[ch] += dot;
  }
}

static pcgc_status slot_check(const pcgc__cukargs *k, bool bwd, const pcgc_buf *d, pcgc_piece pd, const pcgc_buf *s,
                              slot_geo *g) {
  TRY(pcgc__kcheck(k, bwd, KX_F32_ONLY));
  if (s->dtype != PCGC_I32)
    return pcgc__kfail_st(k, PCGC_ERR_UNSUPPORTED, "the CUDA kernels read i32 slots (moe_route's), not %s",
                          pcgc_dtype_name(s->dtype));
  *g = (slot_geo){s->dims[0], s->dims[1], s->dims[2], d->dims[1], d->dims[2], d->dims[3], pd.offset[1]};
  return PCGC_OK;
}

pcgc_status pcgc__cu_fwd_moe_dispatch(const pcgc__cukargs *k) {
  slot_geo g;
  pcgc_buf *y = &k->out[0];
  TRY(slot_check(k, false, y, pcgc__out_piece(k, 0), &k->in[1], &g));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  cudaStream_t st = k->cu->stream;
  TRY(pcgc__cu_check(k, cudaMemsetAsync(y->data, 0, (size_t)pcgc_buf_numel(y) * sizeof(float), st), "zero"));
  dispatch_fwd_kernel<<<pcgc__cu_blocks(g.G * g.S * g.k * g.N), PCGC_CU_THREADS, 0, st>>>(
      g, (const float *)k->in[0].data, (const int32_t *)k->in[1].data, (float *)y->data);
  return pcgc__cu_launched(k, "dispatch");
}

pcgc_status pcgc__cu_bwd_moe_dispatch(const pcgc__cukargs *k) {
  slot_geo g;
  TRY(slot_check(k, true, &k->dout[0], pcgc__out_piece(k, 0), &k->in[1], &g));
  if (pcgc__cu_measuring(k) || !k->din[0].data) return PCGC_OK;
  dispatch_bwd_kernel<<<pcgc__cu_blocks(g.G * g.S * g.N), PCGC_CU_THREADS, 0, k->cu->stream>>>(
      g, (const float *)k->dout[0].data, (const int32_t *)k->in[1].data, (float *)k->din[0].data);
  return pcgc__cu_launched(k, "dispatch backward");
}

pcgc_status pcgc__cu_fwd_moe_combine(const pcgc__cukargs *k) {
  slot_geo g;
  TRY(slot_check(k, false, &k->in[0], pcgc__in_piece(k, 0), &k->in[2], &g));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  combine_fwd_kernel<<<pcgc__cu_blocks(g.G * g.S * g.N), PCGC_CU_THREADS, 0, k->cu->stream>>>(
      g, (const float *)k->in[0].data, (const float *)k->in[1].data, (const int32_t *)k->in[2].data,
      (float *)k->out[0].data);
  return pcgc__cu_launched(k, "combine");
}

pcgc_status pcgc__cu_bwd_moe_combine(const pcgc__cukargs *k) {
  slot_geo g;
  TRY(slot_check(k, true, &k->in[0], pcgc__in_piece(k, 0), &k->in[2], &g));
  if (pcgc__cu_measuring(k)) return PCGC_OK;
  cudaStream_t st = k->cu->stream;
  const float *dout = (const float *)k->dout[0].data;
  const int32_t *s = (const int32_t *)k->in[2].data;
  float *dy = (float *)k->din[0].data, *dg = (float *)k->din[1].data;
  if (dy) {
    combine_bwd_y_kernel<<<pcgc__cu_blocks(g.G * g.S * g.k * g.N), PCGC_CU_THREADS, 0, st>>>(
        g, (const float *)k->in[1].data, s, dout, dy);
    TRY(pcgc__cu_launched(k, "combine backward"));
  }
  if (dg) {
    combine_bwd_gate_kernel<<<pcgc__cu_blocks(g.G * g.S * g.k), PCGC_CU_THREADS, 0, st>>>(
        g, (const float *)k->in[0].data, s, dout, dg);
    TRY(pcgc__cu_launched(k, "gates backward"));
  }
  return PCGC_OK;
}
