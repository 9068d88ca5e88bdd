/*
 * onnx_internal.h — what the files of onnx/ share (not public API).
 *
 *   onnx_import.c  entry points: reading, the protobuf nesting check,
 *                  decoding, the value table, graph inputs, the node loop,
 *                  names and errors
 *   onnx_tensor.c  constant tensors: decoding TensorProtos (raw, typed and
 *                  external data), attributes, conversions
 *   onnx_fold.c    import-time evaluation of constant subgraphs (shape
 *                  arithmetic, transposed weights)
 *   onnx_ops.c     the operator mapping: ONNX node -> pcgc nodes
 *   onnx_fuse.c    pattern matching of decomposed operators (GELU from
 *                  Erf/Tanh, LayerNormalization from its reductions)
 *
 * Every ONNX tensor name has one `onnx_value`: a pcgc tensor (a ref to a
 * node output, the ACT kind) or a constant known at import time (CONST:
 * initializers, Constant nodes, and everything computed only from
 * constants and shapes). Constants become weight nodes lazily, when an
 * operator consumes them as tensors; until then they are plain data.
 */
#ifndef PCGC_ONNX_INTERNAL_H
#define PCGC_ONNX_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uthash.h>

#include "onnx.pb-c.h"
#include "onnx_import.h"

/* Limits, so that no file can exhaust memory or time. */
#define ONNX_MAX_RANK 8                /* constants; pcgc tensors stop at PCGC_MAX_RANK */
#define ONNX_MAX_DEPTH 64              /* nesting of protobuf messages */
#define ONNX_MAX_NODES 1000000         /* nodes of the ONNX graph */
#define ONNX_MAX_FOLD_NUMEL (1 << 24)  /* elements a folded constant may grow to */
#define ONNX_BUDGET_BASE ((int64_t)1 << 26)  /* elements folds and weights may make, plus
                                                3x what the file's tensors hold */
#define ONNX_MAX_FILE ((size_t)INT32_MAX)  /* protobuf's own 2 GiB limit */

/* ONNX element types, shorter. */
enum {
  OT_UNDEFINED = 0, OT_FLOAT = 1, OT_UINT8 = 2, OT_INT8 = 3, OT_UINT16 = 4, OT_INT16 = 5,
  OT_INT32 = 6, OT_INT64 = 7, OT_STRING = 8, OT_BOOL = 9, OT_FLOAT16 = 10, OT_DOUBLE = 11,
  OT_UINT32 = 12, OT_UINT64 = 13, OT_COMPLEX64 = 14, OT_COMPLEX128 = 15, OT_BFLOAT16 = 16,
};

/* ------------------------------------------------------------------ arena */

typedef struct onnx_arena {
  struct onnx_chunk *head;
} onnx_arena;

/* Zeroed memory that lives until pcgc__onnx_arena_free; NULL on out of memory. */
void *pcgc__onnx_alloc(onnx_arena *a, size_t n);
char *pcgc__onnx_strdup(onnx_arena *a, const char *s);
void pcgc__onnx_arena_free(onnx_arena *a);

/* ------------------------------------------------------- constant tensors */

/* A tensor known at import time. Floating types are held as float, integer
 * and bool types as int64. Tensors are immutable once made, so folds that
 * only move or relabel data (reshape, identity) share the buffers. */
typedef struct onnx_tensor {
  int32_t type;                  /* ONNX element type (OT_*) */
  int rank;
  int64_t dims[ONNX_MAX_RANK];
  int64_t numel;
  float *f;                      /* floating types */
  int64_t *i;                    /* integer and bool types */
  const char *origin;            /* initializer it was derived from by moving data
                                    (transpose, reshape, cast): weights keep its name */
} onnx_tensor;

bool pcgc__onnx_type_is_float(int32_t t);
bool pcgc__onnx_type_is_int(int32_t t);   /* integer or bool */
const char *pcgc__onnx_type_name(int32_t t);

/* ------------------------------------------------------------------ values */

typedef enum onnx_vkind {
  OV_UNDEFINED,  /* named by some node, not (yet) produced */
  OV_ACT,        /* a pcgc tensor: `ref` */
  OV_CONST,      /* known at import time: `t`, or `init` not decoded yet */
  OV_PADDED,     /* `ref` zero-padded by `pad` (a Pad folded into its consumer) */
  OV_DROPPED,    /* an output pcgc does not produce (masks, running statistics) */
} onnx_vkind;

typedef struct onnx_value {
  const char *name;              /* key (arena) */
  onnx_vkind kind;
  pcgc_ref ref;
  int64_t pad[2];                /* OV_PADDED: symmetric padding of H and W */
  onnx_tensor *t;
  const Onnx__TensorProto *init; /* an initializer, decoded on first use */
  int weight;                    /* weight node made from this constant, or -1 */
  int n_users, cap_users;
  int *users;                    /* consuming node indices; -1 = a graph output */
  const char *producer;          /* the node that produced it (for messages) */
  int def_node;                  /* index of the node with this output, or -1 */
  UT_hash_handle hh;
} onnx_value;

/* Per ONNX node: whether a fusion swallowed it, or replaces it. */
typedef enum onnx_fuse_kind { OF_NONE, OF_SKIP, OF_GELU, OF_LAYERNORM, OF_SILU, OF_RMSNORM, OF_ROPE } onnx_fuse_kind;

typedef struct onnx_fused {
  onnx_fuse_kind kind;
  const char *x;                 /* the input of the fused operator */
  const char *scale, *bias;      /* layernorm (either may be NULL), rmsnorm (scale, may be NULL) */
  double eps;                    /* rope: theta */
  int n_axes;
  int64_t axes[ONNX_MAX_RANK];   /* layernorm: the reduced axes as written; rope: the
                                    tables' positions T and width D, the Concat's axis,
                                    the Slice nodes of x[..., h:] and x[..., :h] */
  const char *first;             /* name of the pattern's first node, for messages */
  bool gelu_tanh;                /* gelu: the tanh approximation */
} onnx_fused;

typedef struct onnx_ctx {
  pcgc_graph *g;
  pcgc_error *err;
  const char *file;              /* for messages */
  const char *dir;               /* external data folder, may be NULL */
  int64_t batch;
  int64_t opset;                 /* of the default domain */
  onnx_arena arena;
  const Onnx__GraphProto *gp;
  onnx_value *values;            /* uthash by name */
  onnx_fused *fused;             /* one per node */
  const Onnx__NodeProto *cur;    /* node being converted (for messages) */
  const char *name_base;         /* when set, pcgc names start from it instead of cur's */
  struct onnx_name *names;       /* pcgc names taken (uthash) */
  int64_t budget;                /* elements folds and weights may still allocate */
} onnx_ctx;

/* ------------------------------------------------------- onnx_import.c */

/* Errors: "node 'NAME': <message>" for the current node, with the file. */
pcgc_status pcgc__onnx_fail(onnx_ctx *c, pcgc_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
pcgc_status pcgc__onnx_nomem(onnx_ctx *c);
const char *pcgc__onnx_node_name(const Onnx__NodeProto *n);  /* name, or first output */
const char *pcgc__onnx_str(const char *s);                   /* "" for NULL */

onnx_value *pcgc__onnx_value(onnx_ctx *c, const char *name);     /* NULL if unknown */
/* Input `i` of the current node: NULL (and no error) when absent or empty;
 * an error when it names a tensor that is not defined. */
pcgc_status pcgc__onnx_input(onnx_ctx *c, int i, onnx_value **out);
/* Defines output `i` of the current node. */
pcgc_status pcgc__onnx_def_act(onnx_ctx *c, int i, pcgc_ref r);
pcgc_status pcgc__onnx_def_const(onnx_ctx *c, int i, onnx_tensor *t);
pcgc_status pcgc__onnx_def_padded(onnx_ctx *c, int i, pcgc_ref r, const int64_t pad[2]);
/* Marks outputs from `from` on as not produced; an error if a node uses one. */
pcgc_status pcgc__onnx_drop_outputs(onnx_ctx *c, int from, const char *what);
int pcgc__onnx_users(onnx_ctx *c, const char *name);

/* The constant of a CONST value (decoding an initializer on first use). */
pcgc_status pcgc__onnx_const(onnx_ctx *c, onnx_value *v, onnx_tensor **out);
/* The pcgc tensor for an ACT or CONST value; a constant becomes a weight
 * node (f32, its values attached) with shape `shape` (or its own when NULL;
 * same element count). */
pcgc_status pcgc__onnx_tensor_ref(onnx_ctx *c, onnx_value *v, int rank, const int64_t *shape,
                                  pcgc_ref *out);
/* A weight node holding `t` with the given shape (numel must match). */
pcgc_status pcgc__onnx_weight(onnx_ctx *c, const onnx_tensor *t, const char *name, int rank,
                              const int64_t *shape, int *node);
const pcgc_ptensor *pcgc__onnx_type(onnx_ctx *c, pcgc_ref r);

/* Adds and infers a pcgc node named after the current ONNX node (plus
 * `suffix`, may be NULL); inference errors name the ONNX node. */
pcgc_status pcgc__onnx_emit(onnx_ctx *c, pcgc_op_kind k, const char *suffix, const pcgc_attrs *a,
                            int n_in, const pcgc_ref *in, int *node);

/* ------------------------------------------------------- onnx_tensor.c */

/* Decodes an initializer or a Constant's tensor. `what` names it in messages. */
pcgc_status pcgc__onnx_decode(onnx_ctx *c, const Onnx__TensorProto *tp, const char *what,
                              onnx_tensor **out);
onnx_tensor *pcgc__onnx_tensor_new(onnx_ctx *c, int32_t type, int rank, const int64_t *dims);
/* Takes n elements from c->budget; an error when it is spent. Every fold
 * and weight pays for what it allocates, every decoded tensor adds three
 * times its size, so memory stays proportional to the model's own data
 * however many nodes copy it. */
pcgc_status pcgc__onnx_spend(onnx_ctx *c, int64_t n);
/* Element e as double / int64 whatever the storage. */
double pcgc__onnx_get_f(const onnx_tensor *t, int64_t e);
int64_t pcgc__onnx_get_i(const onnx_tensor *t, int64_t e);
int64_t pcgc__onnx_f2i(double v);   /* saturating, NaN -> 0 */
/* The f32 data of a floating constant (shared, not copied). */
const float *pcgc__onnx_floats(const onnx_tensor *t);

/* Attributes of the current node. Missing: the default (`found` false).
 * Wrong type: an error naming the attribute. */
const Onnx__AttributeProto *pcgc__onnx_attr(const Onnx__NodeProto *n, const char *name);
pcgc_status pcgc__onnx_attr_int(onnx_ctx *c, const char *name, int64_t def, int64_t *out);
pcgc_status pcgc__onnx_attr_float(onnx_ctx *c, const char *name, double def, double *out);
/* `n` < 0 when missing. At most `max` values. */
pcgc_status pcgc__onnx_attr_ints(onnx_ctx *c, const char *name, int max, int64_t *v, int *n);
pcgc_status pcgc__onnx_attr_string(onnx_ctx *c, const char *name, const char *def, const char **out);
/* A float attribute as the shortest decimal that reads back to the same
 * float (1e-05 instead of 9.999999747378752e-06). */
double pcgc__onnx_nice_float(float f);
/* The tensor of a Constant node (value, value_float(s), value_int(s)). */
pcgc_status pcgc__onnx_constant_value(onnx_ctx *c, const Onnx__NodeProto *n, onnx_tensor **out);

/* --------------------------------------------------------- onnx_fold.c */

/* Whether op_type can be evaluated on constants. */
bool pcgc__onnx_foldable(const char *op_type);
/* Evaluates the current node, all of whose inputs are constants (Shape and
 * Size only need their input's type); defines its outputs. */
pcgc_status pcgc__onnx_fold(onnx_ctx *c);
/* Reads a constant input as a list of integers (shape, axes, pads...). */
pcgc_status pcgc__onnx_const_ints(onnx_ctx *c, onnx_value *v, const char *what, int max, int64_t *out,
                                  int *n);
/* Axes from attribute `axes` (older opsets) or input `input`; n = -1 if neither. */
pcgc_status pcgc__onnx_axes(onnx_ctx *c, int input, int max, int64_t *axes, int *n);
/* Output dims of the current Reshape, Flatten, Squeeze or Unsqueeze node
 * for an input of dims `dims`. */
pcgc_status pcgc__onnx_reshape_dims(onnx_ctx *c, int rank, const int64_t *dims, int *orank, int64_t *odims);
/* The current Slice node's ranges, normalised: per dim the first index,
 * the element count and the step (unsliced dims: 0, dim, 1). */
pcgc_status pcgc__onnx_slice_ranges(onnx_ctx *c, int rank, const int64_t *dims, int64_t *start, int64_t *count,
                                    int64_t *step);
/* Sizes of the current Split node's outputs along a dim of size `dim`. */
pcgc_status pcgc__onnx_split_sizes(onnx_ctx *c, int64_t dim, int n_out, int64_t *sizes);
/* Transposes a constant (perm may be NULL: reverse). */
pcgc_status pcgc__onnx_transpose(onnx_ctx *c, const onnx_tensor *t, const int64_t *perm,
                                 onnx_tensor **out);

/* ---------------------------------------------------------- onnx_ops.c */

/* Converts the current node (not fused, not all-constant). */
pcgc_status pcgc__onnx_convert(onnx_ctx *c);
/* Emits a fused operator recorded by onnx_fuse.c at its last node. */
pcgc_status pcgc__onnx_emit_fused(onnx_ctx *c, const onnx_fused *f);
/* The error for an operator pcgc cannot map: "node 'N': unsupported
 * operator 'OP' (opset N)", with the supported operators as a hint. */
pcgc_status pcgc__onnx_unsupported(onnx_ctx *c);

/* --------------------------------------------------------- onnx_fuse.c */

/* Finds decomposed GELUs and layer norms; fills c->fused. Constant nodes
 * must already be evaluated (their values are looked up). */
pcgc_status pcgc__onnx_find_fusions(onnx_ctx *c);

#endif
