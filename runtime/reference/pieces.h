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
 * Which input pieces an ordinary op's output piece reads is the op's axis
 * map (pcg.h, pcgc_op_piece_inputs).
 */
#ifndef PCGC_REFERENCE_PIECES_H
#define PCGC_REFERENCE_PIECES_H

#include "kernels.h"

/* Attributes as one piece's kernel must see them (reshape's target shape
 * and conv2d's groups follow the local sizes; attention reads its piece's
 * heads from the kernel context itself). */
void pcgc__localize(pcgc_op_kind k, pcgc_attrs *a, const pcgc_ptensor *in_t, int n_in, const pcgc_buf *in,
                    int n_out, const pcgc_buf *out);

#endif
