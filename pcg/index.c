/*
 * index.c — an index of records kept elsewhere, by a key each record holds
 * (a name, the bytes of an attribute set): open addressing with linear
 * probing over one machine word a slot, at most 80% full (a graph at the
 * model node limit, 100,000, fits 131,072 slots). A value names its record
 * (a node id + 1, a pointer); the caller's `key` gives the record's key, so
 * the index stores none. A uthash entry took 56 bytes of handle plus its
 * bucket; this takes 10 to 20 bytes a record (issue 17: a model's memory
 * against its text).
 */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "internal.h"

static size_t slot_of(pcgc__key k, size_t cap) { return (size_t)XXH3_64bits(k.p, k.n) & (cap - 1); }

uintptr_t pcgc__index_find(const pcgc__index *x, pcgc__key k, pcgc__index_key key, const void *ctx) {
  if (!x->cap) return 0;
  size_t mask = x->cap - 1;
  for (size_t i = slot_of(k, x->cap);; i = (i + 1) & mask) {
    uintptr_t v = x->slot[i];
    if (!v) return 0;
    pcgc__key h = key(ctx, v);
    if (h.n == k.n && memcmp(h.p, k.p, k.n) == 0) return v;
  }
}

pcgc_status pcgc__index_add(pcgc__index *x, uintptr_t v, pcgc__index_key key, const void *ctx) {
  if ((x->n + 1) * 5 > x->cap * 4) {
    size_t cap = x->cap ? x->cap * 2 : 16;
    uintptr_t *slot = calloc(cap, sizeof *slot);
    if (!slot) return PCGC_ERR_NOMEM;
    for (size_t k = 0; k < x->cap; k++) {
      if (!x->slot[k]) continue;
      size_t i = slot_of(key(ctx, x->slot[k]), cap);
      while (slot[i]) i = (i + 1) & (cap - 1);
      slot[i] = x->slot[k];
    }
    free(x->slot);
    x->slot = slot;
    x->cap = cap;
  }
  size_t i = slot_of(key(ctx, v), x->cap);
  while (x->slot[i]) i = (i + 1) & (x->cap - 1);
  x->slot[i] = v;
  x->n++;
  return PCGC_OK;
}

void pcgc__index_free(pcgc__index *x) {
  free(x->slot);
  memset(x, 0, sizeof *x);
}
