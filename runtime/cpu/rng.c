/*
 * rng.c — counter-based random numbers, weight initialisation and synthetic
 * data. A value is a pure function of (seed, stream, counter): a 64-bit mix
 * (the splitmix64 finaliser applied to a combination of the three), so a
 * piece of a tensor draws exactly its part of the sequential draw. Normal
 * variates use Box-Muller on two uniforms of the same counter.
 */
#include <math.h>
#include <string.h>

#include "kernels_internal.h"

uint64_t pcgc_rng_u64(uint64_t seed, uint64_t stream, uint64_t counter) {
  return pcgc__rng_u64_at(pcgc__rng_key(seed, stream), counter);
}

double pcgc_rng_uniform(uint64_t seed, uint64_t stream, uint64_t counter) {
  return pcgc__rng_uniform_at(pcgc__rng_key(seed, stream), counter);
}

/* The normal variate of a draw r: Box-Muller on two 32-bit uniforms in
 * (0, 1] and [0, 1). */
static double normal_of(uint64_t r) {
  double u1 = ((double)(r >> 32) + 1.0) * 0x1.0p-32;
  double u2 = (double)(r & 0xffffffffu) * 0x1.0p-32;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925286766559 * u2);
}

double pcgc_rng_normal(uint64_t seed, uint64_t stream, uint64_t counter) {
  return normal_of(pcgc_rng_u64(seed, stream, counter));
}

uint64_t pcgc_rng_stream(const char *name) {
  uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a, then mixed */
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001b3ULL;
  return pcgc__rng_mix(h);
}

int64_t pcgc_buf_numel(const pcgc_buf *b) {
  int64_t n = 1;
  for (int i = 0; i < b->rank; i++) n *= b->dims[i];
  return n;
}

/* Logical flat index of local flat index `i` of a piece. */
static uint64_t logical_index(const pcgc_buf *b, const pcgc_piece *p, int64_t i) {
  if (!p) return (uint64_t)i;
  int64_t idx[PCGC_MAX_RANK];
  for (int d = b->rank - 1; d >= 0; d--) {
    idx[d] = i % b->dims[d];
    i /= b->dims[d];
  }
  uint64_t g = 0;
  for (int d = 0; d < b->rank; d++) g = g * (uint64_t)p->global[d] + (uint64_t)(idx[d] + p->offset[d]);
  return g;
}

static void put(pcgc_buf *b, int64_t i, double v) {
  switch (b->dtype) {
  case PCGC_F32: ((float *)b->data)[i] = (float)v; break;
  case PCGC_F64: ((double *)b->data)[i] = v; break;
  case PCGC_I32: ((int32_t *)b->data)[i] = (int32_t)v; break;
  case PCGC_I64: ((int64_t *)b->data)[i] = (int64_t)v; break;
  default: break;
  }
}

void pcgc_cpu_init_weight(pcgc_buf *w, pcgc_init init, double scale, uint64_t seed, uint64_t stream,
                          const pcgc_piece *piece) {
  int64_t n = pcgc_buf_numel(w);
  uint64_t key = pcgc__rng_key(seed, stream);
  for (int64_t i = 0; i < n; i++) {
    uint64_t c = logical_index(w, piece, i);
    double v;
    switch (init) {
    case PCGC_INIT_ZEROS: v = 0; break;
    case PCGC_INIT_ONES: v = 1; break;
    case PCGC_INIT_UNIFORM: v = (2 * pcgc__rng_uniform_at(key, c) - 1) * scale; break;
    default: v = normal_of(pcgc__rng_u64_at(key, c)) * scale; break;
    }
    put(w, i, v);
  }
}

void pcgc_cpu_fill_random(pcgc_buf *b, int64_t bound, uint64_t seed, uint64_t stream,
                          const pcgc_piece *piece) {
  int64_t n = pcgc_buf_numel(b);
  bool is_float = b->dtype == PCGC_F32 || b->dtype == PCGC_F64;
  uint64_t key = pcgc__rng_key(seed, stream);
  for (int64_t i = 0; i < n; i++) {
    uint64_t c = logical_index(b, piece, i);
    if (is_float) put(b, i, normal_of(pcgc__rng_u64_at(key, c)));
    else put(b, i, bound > 0 ? (double)(pcgc__rng_u64_at(key, c) % (uint64_t)bound) : 0);
  }
}
