/*
 * name_index.c — an index of names kept elsewhere: open addressing with
 * linear probing over one machine word a slot, at most 80% full (a graph at
 * the model node limit, 100,000, fits 131,072 slots). A value
 * names its record (a node id + 1, a pointer); the caller's `key` gives the
 * record's name, so the index stores no string. A uthash entry took 56
 * bytes of handle plus its bucket; this takes 10 to 20 bytes a name (issue 17:
 * a model's memory against its text).
 */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "internal.h"

static uint64_t hash_of(const char *s) { return XXH3_64bits(s, strlen(s)); }

uintptr_t pcgc__name_index_find(const pcgc__name_index *x, const char *name, pcgc__name_key key,
                                const void *ctx) {
  if (!x->cap) return 0;
  size_t mask = x->cap - 1;
  for (size_t i = (size_t)hash_of(name) & mask;; i = (i + 1) & mask) {
    uintptr_t v = x->slot[i];
    if (!v || strcmp(key(ctx, v), name) == 0) return v;
  }
}

pcgc_status pcgc__name_index_add(pcgc__name_index *x, uintptr_t v, pcgc__name_key key, const void *ctx) {
  if ((x->n + 1) * 5 > x->cap * 4) {
    size_t cap = x->cap ? x->cap * 2 : 16;
    uintptr_t *slot = calloc(cap, sizeof *slot);
    if (!slot) return PCGC_ERR_NOMEM;
    for (size_t k = 0; k < x->cap; k++) {
      if (!x->slot[k]) continue;
      size_t i = (size_t)hash_of(key(ctx, x->slot[k])) & (cap - 1);
      while (slot[i]) i = (i + 1) & (cap - 1);
      slot[i] = x->slot[k];
    }
    free(x->slot);
    x->slot = slot;
    x->cap = cap;
  }
  size_t i = (size_t)hash_of(key(ctx, v)) & (x->cap - 1);
  while (x->slot[i]) i = (i + 1) & (x->cap - 1);
  x->slot[i] = v;
  x->n++;
  return PCGC_OK;
}

void pcgc__name_index_free(pcgc__name_index *x) {
  free(x->slot);
  memset(x, 0, sizeof *x);
}
