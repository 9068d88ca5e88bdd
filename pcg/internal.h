/*
 * internal.h — helpers shared between the files of pcg/ (not public API).
 */
#ifndef PCGC_PCG_INTERNAL_H
#define PCGC_PCG_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "pcg.h"

/* An index of records held elsewhere, by a key each holds (index.c).
 * Values are nonzero words that identify a record (a node id + 1, a
 * pointer); `key` returns a value's key (a name without its NUL, the bytes
 * of an attribute set), which must not change while indexed. Zeroed is
 * empty. Records are not removed; find returns 0 for an absent key. */
typedef struct pcgc__key {
  const void *p;
  size_t n;
} pcgc__key;
typedef pcgc__key (*pcgc__index_key)(const void *ctx, uintptr_t v);
typedef struct pcgc__index {
  uintptr_t *slot;
  size_t cap, n;
} pcgc__index;
uintptr_t pcgc__index_find(const pcgc__index *x, pcgc__key k, pcgc__index_key key, const void *ctx);
/* Adds v, whose key is not yet in the index. */
pcgc_status pcgc__index_add(pcgc__index *x, uintptr_t v, pcgc__index_key key, const void *ctx);
void pcgc__index_free(pcgc__index *x);
static inline pcgc__key pcgc__key_str(const char *s) { return (pcgc__key){s, strlen(s)}; }

/* pcgc_op_infer, with messages naming the node: "linear 'fc2': ...". */
pcgc_status pcgc__op_infer_named(pcgc_op_kind kind, const char *node, const pcgc_attrs *a, int n_in,
                                 const pcgc_ptensor *in, pcgc_ptensor *out, pcgc_error *err);

/* Whether attribute i of `a` affects what the node computes (the scale of a
 * weight initialised to zeros or ones does not). Hashing, equality and the
 * text writer skip attributes that do not matter. */
bool pcgc__attr_matters(const pcgc_attrs *a, int i);

#endif
