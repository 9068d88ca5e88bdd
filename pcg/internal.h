/*
 * internal.h — helpers shared between the files of pcg/ (not public API).
 */
#ifndef PCGC_PCG_INTERNAL_H
#define PCGC_PCG_INTERNAL_H

#include "pcg.h"

/* pcgc_op_infer, with messages naming the node: "linear 'fc2': ...". */
pcgc_status pcgc__op_infer_named(pcgc_op_kind kind, const char *node, const pcgc_attrs *a, int n_in,
                                 const pcgc_ptensor *in, pcgc_ptensor *out, pcgc_error *err);

/* Whether attribute i of `a` affects what the node computes (the scale of a
 * weight initialised to zeros or ones does not). Hashing, equality and the
 * text writer skip attributes that do not matter. */
bool pcgc__attr_matters(const pcgc_attrs *a, int i);

#endif
