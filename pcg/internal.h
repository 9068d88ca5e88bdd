/*
 * internal.h — helpers shared between the files of pcg/ (not public API).
 */
#ifndef PCGC_PCG_INTERNAL_H
#define PCGC_PCG_INTERNAL_H

#include <stdint.h>

#include "pcg.h"

/* An index of names held by records elsewhere (name_index.c). Values are
 * nonzero words that identify a record (a node id + 1, a pointer); `key`
 * returns a value's name, which must not change while indexed. Zeroed is
 * empty. Names are not removed; find returns 0 for an absent name. */
typedef const char *(*pcgc__name_key)(const void *ctx, uintptr_t v);
typedef struct pcgc__name_index {
  uintptr_t *slot;
  size_t cap, n;
} pcgc__name_index;
uintptr_t pcgc__name_index_find(const pcgc__name_index *x, const char *name, pcgc__name_key key,
                                const void *ctx);
/* Adds v, whose name is not yet in the index. */
pcgc_status pcgc__name_index_add(pcgc__name_index *x, uintptr_t v, pcgc__name_key key, const void *ctx);
void pcgc__name_index_free(pcgc__name_index *x);

/* pcgc_op_infer, with messages naming the node: "linear 'fc2': ...". */
pcgc_status pcgc__op_infer_named(pcgc_op_kind kind, const char *node, const pcgc_attrs *a, int n_in,
                                 const pcgc_ptensor *in, pcgc_ptensor *out, pcgc_error *err);

/* Whether attribute i of `a` affects what the node computes (the scale of a
 * weight initialised to zeros or ones does not). Hashing, equality and the
 * text writer skip attributes that do not matter. */
bool pcgc__attr_matters(const pcgc_attrs *a, int i);

#endif
