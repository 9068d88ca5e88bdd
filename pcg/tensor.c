/*
 * tensor.c — dtypes and parallel tensor types: sizes, piece counts,
 * comparison and the printed form "f32[64/4, 256]{sum=2, rep=2}".
 */
#include <string.h>

#include "pcg.h"

static const struct {
  const char *name;
  size_t size;
  bool is_float;
} dtypes[PCGC_DTYPE_COUNT] = {
    [PCGC_F32] = {"f32", 4, true},  [PCGC_F16] = {"f16", 2, true},
    [PCGC_BF16] = {"bf16", 2, true}, [PCGC_F64] = {"f64", 8, true},
    [PCGC_I32] = {"i32", 4, false}, [PCGC_I64] = {"i64", 8, false},
};

const char *pcgc_dtype_name(pcgc_dtype t) {
  return (unsigned)t < PCGC_DTYPE_COUNT ? dtypes[t].name : "?";
}

int pcgc_dtype_from_name(const char *name) {
  for (int i = 0; i < PCGC_DTYPE_COUNT; i++)
    if (strcmp(dtypes[i].name, name) == 0) return i;
  return -1;
}

size_t pcgc_dtype_size(pcgc_dtype t) {
  return (unsigned)t < PCGC_DTYPE_COUNT ? dtypes[t].size : 0;
}

bool pcgc_dtype_is_float(pcgc_dtype t) {
  return (unsigned)t < PCGC_DTYPE_COUNT && dtypes[t].is_float;
}

void pcgc_ptensor_init(pcgc_ptensor *t, pcgc_dtype dtype, int rank, const int64_t *dims) {
  memset(t, 0, sizeof *t);
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < PCGC_MAX_RANK; i++) {
    t->dims[i] = i < rank ? dims[i] : 0;
    t->degree[i] = 1;
  }
  t->sum = t->replica = t->micro = 1;
  t->micro_dim = -1;
}

int64_t pcgc_ptensor_numel(const pcgc_ptensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

size_t pcgc_ptensor_bytes(const pcgc_ptensor *t) {
  return (size_t)pcgc_ptensor_numel(t) * pcgc_dtype_size(t->dtype);
}

int64_t pcgc_ptensor_pieces(const pcgc_ptensor *t) {
  int64_t p = (int64_t)t->sum * t->replica;
  for (int i = 0; i < t->rank; i++) p *= t->degree[i];
  return p;
}

bool pcgc_ptensor_is_sequential(const pcgc_ptensor *t) {
  return pcgc_ptensor_pieces(t) == 1 && t->micro == 1;
}

bool pcgc_ptensor_equal(const pcgc_ptensor *a, const pcgc_ptensor *b) {
  if (a->dtype != b->dtype || a->rank != b->rank || a->sum != b->sum ||
      a->replica != b->replica || a->micro != b->micro)
    return false;
  if (a->micro > 1 && a->micro_dim != b->micro_dim) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i] || a->degree[i] != b->degree[i]) return false;
  return true;
}

int pcgc_ptensor_format(char *buf, size_t n, const pcgc_ptensor *t) {
  char tmp[256];
  size_t k = 0;
#define OUT(...) k += (size_t)snprintf(tmp + k, k < sizeof tmp ? sizeof tmp - k : 0, __VA_ARGS__)
  OUT("%s[", pcgc_dtype_name(t->dtype));
  for (int i = 0; i < t->rank; i++) {
    OUT("%s%lld", i ? ", " : "", (long long)t->dims[i]);
    if (t->degree[i] > 1) OUT("/%d", t->degree[i]);
  }
  OUT("]");
  if (t->sum > 1 || t->replica > 1 || t->micro > 1) {
    const char *sep = "{";
    if (t->sum > 1) { OUT("%ssum=%d", sep, t->sum); sep = ", "; }
    if (t->replica > 1) { OUT("%srep=%d", sep, t->replica); sep = ", "; }
    if (t->micro > 1) {
      if (t->micro_dim >= 0) OUT("%smicro=%d@%d", sep, t->micro, t->micro_dim);
      else OUT("%smicro=%d", sep, t->micro);
    }
    OUT("}");
  }
#undef OUT
  return snprintf(buf, n, "%s", tmp);
}
