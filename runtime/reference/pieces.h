/*
 * pieces.h — private to the reference interpreter: how a parallel tensor's
 * pieces are laid out, and each operator's axis map.
 *
 * Piece p of a tensor of type t is, in mixed radix,
 *     p = ((c[0] * deg[1] + c[1]) ... * deg[r-1] + c[r-1]) * sum + s) * replica + rep
 * and, when pipelined, each piece is further held as `micro` buffers.
 * Along dim d the piece holds the logical rows starting at
 *     c[d] * dims[d] / deg[d]  (+ mu * local size, for micro-batch mu on micro_dim)
 * i.e. shards are outer and micro-batches inner ("each device pipelines its
 * shard").
 *
 * An axis map says, for an ordinary op, how each input dim relates to the
 * op's grid of pieces: it follows output dim j (AX_OUT(j)), is contracted
 * along a contraction axis c whose pieces become partial sums (AX_CON(c)),
 * or is never split (AX_NONE); and whether an input's partial sums pass
 * through to the output along a sum axis (AX_SUM(a)). The output's sum
 * index decomposes over the contraction and sum axes; everything a piece of
 * an input does not depend on becomes its replica index.
 */
#ifndef PCGC_REFERENCE_PIECES_H
#define PCGC_REFERENCE_PIECES_H

#include "kernels.h"

#define AX_NONE (-1)
#define AX_OUT(j) (j)
#define AX_CON(c) (8 + (c))
#define AX_SUM(a) (16 + (a))
#define AX_COUNT 20

typedef struct pcgc__axmap {
  int dim[PCGC_VARIADIC][PCGC_MAX_RANK];
  int sum[PCGC_VARIADIC];   /* AX_SUM(a) or AX_NONE */
} pcgc__axmap;

/* Fills the axis map of node kind k (types of inputs and output 0). */
pcgc_status pcgc__axes(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_ptensor *in,
                       const pcgc_ptensor *out, pcgc__axmap *m, pcgc_error *err);

/* Attributes as one piece's kernel must see them (reshape's target shape
 * and conv2d's groups follow the local sizes; attention reads its piece's
 * heads from the kernel context itself). */
void pcgc__localize(pcgc_op_kind k, pcgc_attrs *a, const pcgc_ptensor *in_t, int n_in, const pcgc_buf *in,
                    int n_out, const pcgc_buf *out);

#endif
