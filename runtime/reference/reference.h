/*
 * reference.h — the reference interpreter: executes any PCG in one process,
 * with the parallel operators executed literally, forward, loss, backward
 * and optimizer step. It is the oracle every other part of pcgc is checked
 * against.
 *
 * Every tensor is held as its pieces: a tensor of parallel type
 * f32[64/4, 256]{sum=2, rep=3} is 4 x 2 x 3 = 24 buffers of 16 x 256, one
 * per device that would hold it. Partition cuts pieces, combine concatenates
 * them, replicate copies them, reduce adds partial sums, pipeline cuts the
 * pipelined dim into micro-batches that every operator then processes one
 * after another. An ordinary operator runs once per piece of its output, on
 * exactly the input pieces that device would hold, with the CPU kernels of
 * runtime/cpu; the piece-to-piece mapping follows the op's parallel-type
 * rules (pcg/infer.c). Weights and inputs are whole tensors (one piece):
 * the parallel operators that follow them distribute them, and the
 * optimizer updates the whole weight from its (reduced) gradient.
 *
 * Typical use:
 *
 *     pcgc_ref_options o;
 *     pcgc_ref_options_default(&o);
 *     pcgc_reference *r = pcgc_ref_new(graph, &o, &err);   // weights initialised, data drawn
 *     for (int step = 0; step < 3; step++) {
 *       double loss;
 *       pcgc_ref_train_step(r, &loss, &err);          // forward, backward, update
 *     }
 *     pcgc_ref_get(r, "h1.weight", PCGC_F64, buf, n, &err);
 *     pcgc_ref_free(r);
 */
#ifndef PCGC_RUNTIME_REFERENCE_H
#define PCGC_RUNTIME_REFERENCE_H

#include "kernels.h"
#include "pcg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pcgc_reference pcgc_reference;

typedef struct pcgc_ref_options {
  pcgc_dtype dtype;        /* F32 (default) or F64: every float tensor of the run */
  uint64_t seed;           /* weights, synthetic data and dropout derive from it */
  bool training;           /* dropout active (default true) */
  pcgc_optimizer opt;      /* default SGD lr 0.01 */
  bool allow_no_loss;      /* accept a graph without a loss: forward computes every
                              tensor (the loss reads 0), backward only through
                              pcgc_ref_backward_from (default false) */
} pcgc_ref_options;

void pcgc_ref_options_default(pcgc_ref_options *o);

/* Prepares a run: checks the graph is typed and has exactly one loss (a
 * sink of class LOSS), allocates every piece, initialises weights from
 * their init attributes and fills inputs with seeded synthetic data (floats
 * N(0,1); integer ids uniform over the table rows, labels over the
 * classes). The graph must outlive the run. */
pcgc_reference *pcgc_ref_new(const pcgc_graph *g, const pcgc_ref_options *o, pcgc_error *err);
void pcgc_ref_free(pcgc_reference *r);

/* Sets a weight or input (a source node, by name) to the given whole
 * logical tensor of n elements, converted from `dtype` (F32, F64, I32, I64). */
pcgc_status pcgc_ref_set(pcgc_reference *r, const char *name, pcgc_dtype dtype, const void *data, int64_t n,
                         pcgc_error *err);
/* Reads the logical value of a tensor (a node's first output, or a
 * multi-output's output by its name): shards are reassembled, partial sums
 * added, micro-batches concatenated, replica 0 taken. */
pcgc_status pcgc_ref_get(pcgc_reference *r, const char *name, pcgc_dtype dtype, void *data, int64_t n,
                         pcgc_error *err);
/* Reads the gradient of the loss with respect to a tensor, after backward. */
pcgc_status pcgc_ref_get_grad(pcgc_reference *r, const char *name, pcgc_dtype dtype, void *data, int64_t n,
                              pcgc_error *err);

/* Forward: computes every tensor and the loss (the sum of its partial sums
 * and micro-batches). NaN or Inf in the loss is an error naming the loss. */
pcgc_status pcgc_ref_forward(pcgc_reference *r, double *loss, pcgc_error *err);
/* Backward from d loss = 1: gradients of every tensor (after forward). */
pcgc_status pcgc_ref_backward(pcgc_reference *r, pcgc_error *err);
/* Backward from chosen tensors instead of the loss (after forward): grads[k]
 * is the whole logical gradient of tensor names[k] (its numel elements, in
 * `dtype`); every other gradient starts at zero. Used to check rules, whose
 * graphs end in several tensors rather than a loss. */
pcgc_status pcgc_ref_backward_from(pcgc_reference *r, int n, const char *const *names, pcgc_dtype dtype,
                                   const void *const *grads, pcgc_error *err);
/* One optimizer step on every weight (after backward). */
pcgc_status pcgc_ref_update(pcgc_reference *r, pcgc_error *err);
/* forward + backward + update. */
pcgc_status pcgc_ref_train_step(pcgc_reference *r, double *loss, pcgc_error *err);

/* Bound of the synthetic integer data of input `node`: the rows of the
 * table or the classes of the loss it feeds (0: not an index input). Every
 * runtime draws data the same way (pcgc_cpu_fill_random with this bound). */
int64_t pcgc_ref_data_bound(const pcgc_graph *g, int node);

/* Attributes as the kernel of one piece must see them (conv2d's groups follow
 * the piece's channels); the distributed runtime runs pieces the same way. */
void pcgc_ref_localize(pcgc_op_kind k, pcgc_attrs *a, const pcgc_ptensor *in_t, int n_in, const pcgc_buf *in, int n_out,
                       const pcgc_buf *out);

/* The loss node's id. */
int pcgc_ref_loss_node(const pcgc_reference *r);

#ifdef __cplusplus
}
#endif
#endif
