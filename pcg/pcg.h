/*
 * pcg.h — the parallel computation graph (PCG) core of pcgc.
 *
 * A PCG is a DAG of operator nodes. Every node has typed attributes (from
 * the op table in ops.def) and produces one or more tensors, each with a
 * *parallel tensor type*: a dtype, a logical shape, and the degrees that say
 * how the tensor is spread over devices:
 *
 *   degree[d]  shard degree of dim d (the dim is cut into degree[d] pieces)
 *   sum        sum degree: the tensor is the sum of `sum` partial tensors
 *   replica    replica degree: `replica` identical copies exist
 *   micro      micro-batch degree: dim `micro_dim` is processed in `micro`
 *              slices one after another in time (pipelining)
 *
 * The logical shape never changes under parallelisation, only degrees do.
 * A tensor occupies prod(degree) * sum * replica pieces, one per device of the
 * operator that consumes it. Weights are explicit nodes (op `weight`), so the
 * parallel operators (partition, combine, replicate, reduce, pipeline,
 * unpipeline) apply to them like to any tensor.
 *
 * Worked example (data-parallel linear layer over 4 devices):
 *
 *     pcgc_error err = {0};
 *     pcgc_graph *g = pcgc_graph_new();
 *     pcgc_attrs a;
 *     pcgc_attrs_init(&a, PCGC_OP_INPUT);
 *     pcgc_attrs_set_ints(&a, "shape", 2, (int64_t[]){64, 784});
 *     int x = pcgc_graph_add_node(g, PCGC_OP_INPUT, "x", &a, 0, NULL);
 *     ... weight w [784, 256] likewise ...
 *     pcgc_attrs_init(&a, PCGC_OP_PARTITION);
 *     pcgc_attrs_set_int(&a, "dim", 0);
 *     pcgc_attrs_set_int(&a, "degree", 4);
 *     int xp = pcgc_graph_add_node(g, PCGC_OP_PARTITION, "xp", &a, 1,
 *                                  (pcgc_ref[]){{x, 0}});
 *     ... wr = replicate(w, degree=4); y = linear(xp, wr) ...
 *     if (pcgc_graph_infer(g, &err) != PCGC_OK) pcgc_error_print(stderr, &err);
 *     // y's type: f32[64, 256] with degree[0] = 4: 4 pieces, one per device.
 *
 * Errors: functions that can fail return a pcgc_status (0 or negative) and,
 * given a non-NULL pcgc_error, leave a message there with a source position
 * when one is known. Nothing here calls exit().
 */
#ifndef PCGC_PCG_H
#define PCGC_PCG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PCGC_VERSION_STRING "0.1.0"

/* ------------------------------------------------------------------ status */

typedef enum pcgc_status {
  PCGC_OK = 0,
  PCGC_ERR_NOMEM = -1,       /* allocation failed */
  PCGC_ERR_IO = -2,          /* a file could not be read or written */
  PCGC_ERR_PARSE = -3,       /* syntax error in a text file */
  PCGC_ERR_TYPE = -4,        /* shape or parallel-type inference failed */
  PCGC_ERR_INVALID = -5,     /* bad argument or attribute value */
  PCGC_ERR_GRAPH = -6,       /* malformed graph: cycle, dangling input */
  PCGC_ERR_UNSUPPORTED = -7, /* valid request this build cannot do */
} pcgc_status;

/* A source position: file name (not owned), 1-based line and column. */
typedef struct pcgc_srcloc {
  const char *file;
  int line, col;
} pcgc_srcloc;

/* An error report. Fixed-size so it can live on the stack and survive the
 * objects it talks about. `line`/`col` are 0 when there is no position. */
typedef struct pcgc_error {
  pcgc_status status;
  char file[256];
  int line, col, len;     /* len: characters to underline (0 = 1) */
  char message[1024];
  char source_line[512];  /* the offending source line, if known: of a long
                             line only the part around col, "..." marking cuts */
  int caret;              /* column of col in source_line (0: col itself) */
  char hint[768];         /* what to do about it, if known */
} pcgc_error;

const char *pcgc_status_str(pcgc_status s);
/* Records an error (if err != NULL) and returns `s`. printf-style message. */
pcgc_status pcgc_error_set(pcgc_error *err, pcgc_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Adds a source position (and the source line, when `source` is given: the
 * whole text of the file, of length `source_len`). */
void pcgc_error_at(pcgc_error *err, pcgc_srcloc loc, int len, const char *source,
                   size_t source_len);
void pcgc_error_hint(pcgc_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prints "file:line:col: error: message", the source line with a caret under
 * the fault, and "hint: ..." */
void pcgc_error_print(FILE *f, const pcgc_error *err);
void pcgc_error_clear(pcgc_error *err);

/* ------------------------------------------------------------ tensor types */

#define PCGC_MAX_RANK 6

typedef enum pcgc_dtype {
  PCGC_F32 = 0, PCGC_F16, PCGC_BF16, PCGC_F64, PCGC_I32, PCGC_I64,
  PCGC_DTYPE_COUNT
} pcgc_dtype;

const char *pcgc_dtype_name(pcgc_dtype t);          /* "f32" */
int pcgc_dtype_from_name(const char *name);         /* -1 if unknown */
size_t pcgc_dtype_size(pcgc_dtype t);               /* bytes per element */
bool pcgc_dtype_is_float(pcgc_dtype t);

/* bf16 as stored: the high half of an f32, rounded to nearest even (NaN
 * stays NaN); widening is exact. */
static inline uint16_t pcgc_bf16_from_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float pcgc_f32_from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* A parallel tensor type. A sequential tensor has every degree 1. */
typedef struct pcgc_ptensor {
  pcgc_dtype dtype;
  int rank;                       /* 0..PCGC_MAX_RANK; 0 is a scalar */
  int64_t dims[PCGC_MAX_RANK];    /* logical sizes */
  int32_t degree[PCGC_MAX_RANK];  /* shard degree per dim */
  int32_t sum;                    /* number of partial sums */
  int32_t replica;                /* number of identical copies */
  int32_t micro;                  /* micro-batch degree (1 = not pipelined) */
  int32_t micro_dim;              /* pipelined dim, or -1 (also for micro=1 and
                                     for losses accumulated over micro-batches) */
} pcgc_ptensor;

/* Sets a sequential type: all degrees 1. */
void pcgc_ptensor_init(pcgc_ptensor *t, pcgc_dtype dtype, int rank, const int64_t *dims);
int64_t pcgc_ptensor_numel(const pcgc_ptensor *t);     /* logical elements */
size_t pcgc_ptensor_bytes(const pcgc_ptensor *t);      /* logical bytes */
int64_t pcgc_ptensor_pieces(const pcgc_ptensor *t);    /* prod(degree)*sum*replica */
bool pcgc_ptensor_is_sequential(const pcgc_ptensor *t);
bool pcgc_ptensor_equal(const pcgc_ptensor *a, const pcgc_ptensor *b);
/* "f32[64, 256]" or, when parallel, "f32[64/4, 256]{sum=2, rep=2, micro=4@0}".
 * Returns the number of characters it wanted to write (like snprintf). */
int pcgc_ptensor_format(char *buf, size_t n, const pcgc_ptensor *t);

/* -------------------------------------------------------------- operators */

typedef enum pcgc_op_kind {
#define PCGC_OP(id, name, fn, min_in, max_in, n_out, schema) PCGC_OP_##id,
#include "ops.def"
#undef PCGC_OP
  PCGC_OP_COUNT
} pcgc_op_kind;

/* What kind of thing an op is, for the CLI, DOT drawing and the search. */
typedef enum pcgc_op_class {
  PCGC_CLASS_SOURCE,    /* input, weight */
  PCGC_CLASS_COMPUTE,   /* ordinary operators */
  PCGC_CLASS_LOSS,      /* losses */
  PCGC_CLASS_PARALLEL,  /* partition, combine, replicate, reduce, (un)pipeline */
} pcgc_op_class;

const char *pcgc_op_name(pcgc_op_kind k);       /* "linear" */
int pcgc_op_from_name(const char *name);        /* -1 if unknown */
pcgc_op_class pcgc_op_class_of(pcgc_op_kind k);
int pcgc_op_min_inputs(pcgc_op_kind k);
int pcgc_op_max_inputs(pcgc_op_kind k);         /* PCGC_VARIADIC for concat */
#define PCGC_VARIADIC 64
/* The op whose forward is this op's backward, for parallel operators:
 * partition <-> combine, replicate <-> reduce, pipeline <-> unpipeline.
 * Attributes carry over unchanged (dim, degree). Returns -1 for other ops. */
int pcgc_op_backward_pair(pcgc_op_kind k);

/* ------------------------------------------------------------- attributes */

#define PCGC_MAX_ATTRS 6  /* ops.def has at most 5 */
#define PCGC_MAX_INTS 16

typedef enum pcgc_attr_type {
  PCGC_ATTR_INT,     /* int64 */
  PCGC_ATTR_FLOAT,   /* double */
  PCGC_ATTR_BOOL,    /* stored in .i as 0/1 */
  PCGC_ATTR_INTS,    /* list of up to PCGC_MAX_INTS int64 (one per op at most) */
  PCGC_ATTR_INTS2,   /* exactly two ints; a scalar given for it is repeated */
  PCGC_ATTR_ENUM,    /* stored in .i; names from one of the enums below */
} pcgc_attr_type;

typedef enum pcgc_enum_type {
  PCGC_ENUM_NONE = 0,
  PCGC_ENUM_ACT,        /* none relu gelu sigmoid tanh */
  PCGC_ENUM_POOL,       /* max avg */
  PCGC_ENUM_BAG,        /* none sum mean */
  PCGC_ENUM_DTYPE,      /* the dtype names, order of pcgc_dtype */
  PCGC_ENUM_INIT,       /* zeros ones uniform normal */
  PCGC_ENUM_REDUCTION,  /* mean sum */
  PCGC_ENUM_COUNT
} pcgc_enum_type;

typedef enum { PCGC_ACT_NONE, PCGC_ACT_RELU, PCGC_ACT_GELU, PCGC_ACT_SIGMOID, PCGC_ACT_TANH } pcgc_act;
typedef enum { PCGC_POOL_MAX, PCGC_POOL_AVG } pcgc_pool_kind;
typedef enum { PCGC_BAG_NONE, PCGC_BAG_SUM, PCGC_BAG_MEAN } pcgc_bag;
typedef enum { PCGC_INIT_ZEROS, PCGC_INIT_ONES, PCGC_INIT_UNIFORM, PCGC_INIT_NORMAL } pcgc_init;
typedef enum { PCGC_REDUCTION_MEAN, PCGC_REDUCTION_SUM } pcgc_reduction;

/* Names of an enum's values; NULL past the end. */
const char *pcgc_enum_value_name(pcgc_enum_type e, int64_t v);
int pcgc_enum_value_from_name(pcgc_enum_type e, const char *name); /* -1 if unknown */
const char *pcgc_enum_type_name(pcgc_enum_type e);                 /* "act" */

/* One attribute of an op's schema. */
typedef struct pcgc_attr_desc {
  const char *name;
  pcgc_attr_type type;
  pcgc_enum_type enum_type;  /* for PCGC_ATTR_ENUM */
  bool required;             /* no default: must be given */
  int64_t def_i;             /* default for INT/BOOL/ENUM/INTS2 (each entry) */
  double def_f;              /* default for FLOAT */
} pcgc_attr_desc;

/* Number of attributes of op k, and the i-th one (schema order). */
int pcgc_op_num_attrs(pcgc_op_kind k);
const pcgc_attr_desc *pcgc_op_attr(pcgc_op_kind k, int i);
int pcgc_op_attr_index(pcgc_op_kind k, const char *name);  /* -1 if none */

/* The attribute values of one node, in its op's schema order: a plain value
 * (copied by `=`, compared with pcgc_attrs_equal), small because graphs are
 * copied for every rewrite the search tries. A scalar sits in val[i] (INT,
 * BOOL, ENUM in .i; FLOAT in .f). A list (INTS, INTS2) has n[i] entries at
 * ints + off[i]: every list of an op has its own place in the one pool,
 * PCGC_MAX_INTS entries for INTS and 2 for INTS2, fixed by the schema (ops.c
 * checks that an op's lists fit the pool) and set by pcgc_attrs_init. Read
 * values with the accessors below. `set` marks values given explicitly (the
 * rest hold defaults). */
typedef struct pcgc_attrs {
  pcgc_op_kind kind;
  bool set[PCGC_MAX_ATTRS];
  uint8_t n[PCGC_MAX_ATTRS];     /* list entries */
  uint8_t off[PCGC_MAX_ATTRS];   /* where a list starts in ints[] */
  union {
    int64_t i;
    double f;
  } val[PCGC_MAX_ATTRS];
  int64_t ints[PCGC_MAX_INTS];
} pcgc_attrs;

/* A list attribute as read: n entries at v, which points into the
 * pcgc_attrs it was read from (valid as long as that is). */
typedef struct pcgc_ints {
  int n;
  const int64_t *v;
} pcgc_ints;

/* Attribute i (schema order) of a, by type: INT/BOOL/ENUM, FLOAT, lists. */
static inline int64_t pcgc_attrs_int_at(const pcgc_attrs *a, int i) { return a->val[i].i; }
static inline double pcgc_attrs_float_at(const pcgc_attrs *a, int i) { return a->val[i].f; }
static inline pcgc_ints pcgc_attrs_ints_at(const pcgc_attrs *a, int i) {
  pcgc_ints l = {a->n[i], a->ints + a->off[i]};
  return l;
}

/* Fills every attribute with its default (required ones with 0/empty). */
void pcgc_attrs_init(pcgc_attrs *a, pcgc_op_kind kind);
/* Setters by name; return PCGC_ERR_INVALID (with a message) if the op has no
 * such attribute or the type is wrong. */
pcgc_status pcgc_attrs_set_int(pcgc_attrs *a, const char *name, int64_t v);
pcgc_status pcgc_attrs_set_float(pcgc_attrs *a, const char *name, double v);
pcgc_status pcgc_attrs_set_ints(pcgc_attrs *a, const char *name, int n, const int64_t *v);
/* Getters by name; the name must exist in the schema (asserted). */
int64_t pcgc_attrs_int(const pcgc_attrs *a, const char *name);
double pcgc_attrs_float(const pcgc_attrs *a, const char *name);
pcgc_ints pcgc_attrs_ints(const pcgc_attrs *a, const char *name);
/* Checks required attributes are set and values are in range. */
pcgc_status pcgc_attrs_check(const pcgc_attrs *a, pcgc_error *err);
bool pcgc_attrs_equal(const pcgc_attrs *x, const pcgc_attrs *y);
/* Writes "key=value" for attribute i (its canonical text form). */
int pcgc_attr_format(char *buf, size_t n, const pcgc_attrs *a, int i);

/* ------------------------------------------------------ inference & costs */

/* Number of outputs for these attributes (split: one per size). */
int pcgc_op_num_outputs(pcgc_op_kind k, const pcgc_attrs *a);

/* Infers output types from input types for op `kind` with attributes `a`.
 * Handles both sequential shapes (all degrees 1) and parallel types: which
 * dims may be sharded, which sharding yields partial sums, what is illegal.
 * `out` has room for pcgc_op_num_outputs() entries. On failure returns
 * PCGC_ERR_TYPE with a message naming the problem and what to do. */
pcgc_status pcgc_op_infer(pcgc_op_kind kind, const pcgc_attrs *a, int n_in,
                          const pcgc_ptensor *in, pcgc_ptensor *out, pcgc_error *err);

/* Work and size of one op over its logical (whole) tensors. */
typedef struct pcgc_op_cost {
  double fwd_flops, bwd_flops;   /* floating-point operations */
  double fwd_bytes, bwd_bytes;   /* bytes read + written by the kernels */
  int64_t params;                /* trainable parameters (weight nodes) */
} pcgc_op_cost;

void pcgc_op_cost_of(pcgc_op_kind kind, const pcgc_attrs *a, int n_in,
                     const pcgc_ptensor *in, int n_out, const pcgc_ptensor *out,
                     pcgc_op_cost *cost);

/* --------------------------------------------------------------- axis maps */

/* How an ordinary op's pieces meet (the piece-level form of the parallel
 * type rules, used by the reference interpreter and the simulator): each
 * input dim follows output dim j (PCGC_AX_OUT(j)), is contracted along a
 * contraction axis c whose pieces become partial sums (PCGC_AX_CON(c)), or is
 * never split (PCGC_AX_NONE); an input's partial sums pass to the output
 * along a sum axis (PCGC_AX_SUM(a); add/sub pair theirs on one axis). The
 * output's sum index decomposes over the contraction and sum axes (in
 * increasing axis order, over the axes of degree > 1); every axis an input
 * piece does not depend on, then the output's replica, form its replica
 * index. pcgc_op_piece_inputs applies this. */
#define PCGC_AX_NONE (-1)
#define PCGC_AX_OUT(j) (j)
#define PCGC_AX_CON(c) (8 + (c))
#define PCGC_AX_SUM(a) (16 + (a))
#define PCGC_AX_COUNT 20

typedef struct pcgc_axmap {
  int dim[PCGC_VARIADIC][PCGC_MAX_RANK];
  int sum[PCGC_VARIADIC];
} pcgc_axmap;

/* The axis map of op k for these input types and output 0's type. */
pcgc_status pcgc_op_axes(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_ptensor *in,
                         const pcgc_ptensor *out, pcgc_axmap *m, pcgc_error *err);

/* Coordinates of piece p of a tensor: shard coordinate per dim, sum index,
 * replica index (p = mixed radix over degree[0..r-1], sum, replica). */
void pcgc_piece_coords(const pcgc_ptensor *t, int64_t p, int64_t *c, int64_t *s, int64_t *r);
int64_t pcgc_piece_index(const pcgc_ptensor *t, const int64_t *c, int64_t s, int64_t r);

/* For output piece p of an ordinary op: the piece index of every input.
 * Fails (internal error) if the axis map disagrees with inference. */
pcgc_status pcgc_op_piece_inputs(pcgc_op_kind k, const pcgc_attrs *a, int n_in, const pcgc_ptensor *in,
                                 const pcgc_ptensor *out, int64_t p, int64_t *in_piece, pcgc_error *err);

/* Elements of the op's compute dtype that a forward keeps for its backward
 * (runtime/cpu/kernels.h, pcgc_kernel_ctx.saved), so that backward does not
 * compute them again; in_dims[i]: the dims of input i's piece. attention:
 * its projected queries, keys and values and its context, 2 B Sq E + 2 B Sk E
 * (q [B, Sq, .], k [B, Sk, .], wq [., E]). 0 for every other op. */
int64_t pcgc_op_saved_elems(pcgc_op_kind k, int n_in, const int64_t *const *in_dims);
/* Whether op k keeps anything for its backward at all (the cheap test before
 * pcgc_op_saved_elems), and the dtype it keeps it in for an op whose output
 * is of dtype `out`: its compute dtype, f64 for f64 ops, else f32 (bf16
 * storage included: kernels compute on f32 copies). */
bool pcgc_op_saves(pcgc_op_kind k);
pcgc_dtype pcgc_op_saved_dtype(pcgc_dtype out);

/* ------------------------------------------------------------------ graph */

/* A reference to output `slot` of node `node`. */
typedef struct pcgc_ref {
  int node;
  int slot;
} pcgc_ref;

typedef struct pcgc_node {
  int id;                 /* index in graph->nodes */
  int16_t n_in;           /* at most PCGC_VARIADIC */
  int16_t n_out;
  pcgc_op_kind kind : 16;
  bool typed;             /* out[] holds inferred types */
  char *name;             /* unique within the graph */
  const pcgc_attrs *attrs;/* owned by the graph, shared by the nodes whose
                             attributes are equal byte for byte (so a node
                             costs a pointer, not 200 bytes; issue 17); never
                             NULL; change with pcgc_graph_set_attrs */
  pcgc_ref *in;           /* input slot i reads `in[i]` */
  pcgc_ptensor *out;      /* inferred output types */
  char **out_names;       /* name of each output (out_names[0] == name, the
                             same string unless renamed) */
  pcgc_srcloc loc;        /* where the model file defined it (file may be NULL) */
  float *value;           /* weights imported with values (ONNX): numel floats in
                             row-major order, used instead of the init attribute;
                             NULL otherwise. Not part of the hash or equality. */
} pcgc_node;

typedef struct pcgc_graph {
  int n_nodes, cap;
  pcgc_node *nodes;
  char *name;             /* model name, may be NULL */
  char *file;             /* file the graph was read from (owned), may be NULL;
                             node locations point into it */
  struct pcgc__graph_tables *tables; /* private: node names -> ids, and the
                                        distinct attribute sets */
} pcgc_graph;

pcgc_graph *pcgc_graph_new(void);
/* Room for n nodes in all, so that adding up to that many moves none. */
pcgc_status pcgc_graph_reserve(pcgc_graph *g, int n);
void pcgc_graph_free(pcgc_graph *g);
/* Deep copy; NULL on out of memory. */
pcgc_graph *pcgc_graph_clone(const pcgc_graph *g);

/* Adds a node and returns its id (>= 0), or a negative pcgc_status. Inputs
 * are recorded as given (they may refer to nodes added later); nothing is
 * inferred until pcgc_graph_infer / pcgc_graph_infer_node. The node is named
 * `name` (copied) or, if NULL, "<op>_<id>". Multi-output nodes name their
 * outputs "<name>", "<name>.1", ... unless pcgc_graph_set_output_name is used. */
int pcgc_graph_add_node(pcgc_graph *g, pcgc_op_kind kind, const char *name,
                        const pcgc_attrs *attrs, int n_in, const pcgc_ref *in);
pcgc_status pcgc_graph_set_output_name(pcgc_graph *g, int node, int slot, const char *name);
/* Gives node `node` the attributes *a (copied; a->kind must be its kind and
 * its number of outputs must stay the same). The node is left untyped. */
pcgc_status pcgc_graph_set_attrs(pcgc_graph *g, int node, const pcgc_attrs *a);
/* Gives weight `node` its initial value (n floats, copied; n must equal the
 * weight's element count once typed). */
pcgc_status pcgc_graph_set_value(pcgc_graph *g, int node, const float *data, int64_t n);
/* Adds a copy of node `node` of src to dst: its kind, attributes, output
 * names, location and value, named `name` (NULL: its own name; a renamed
 * copy renames outputs "<old>.k" to "<name>.k"), reading `in` (NULL: the
 * same refs as in src). Untyped. Returns the id or a negative status. */
int pcgc_graph_copy_node(pcgc_graph *dst, const pcgc_graph *src, int node, const char *name, const pcgc_ref *in);
/* Finds a node by name; -1 if none. */
int pcgc_graph_find(const pcgc_graph *g, const char *name);

/* Infers the types of one node whose inputs are already typed. */
pcgc_status pcgc_graph_infer_node(pcgc_graph *g, int node, pcgc_error *err);
/* Infers every node in topological order; fails on cycles, dangling inputs
 * and type errors (naming the node). */
pcgc_status pcgc_graph_infer(pcgc_graph *g, pcgc_error *err);
/* Checks structure (dangling inputs, bad slots, cycles, arity) and that the
 * stored types equal what inference gives now (type mismatch). */
pcgc_status pcgc_graph_validate(const pcgc_graph *g, pcgc_error *err);

/* Topological order: writes n_nodes node ids to `order` (inputs before
 * users, ties broken by node id). Returns PCGC_ERR_GRAPH on a cycle. */
pcgc_status pcgc_graph_topo_order(const pcgc_graph *g, int *order, pcgc_error *err);
/* The type of the tensor a ref points at (NULL if the ref is bad). */
const pcgc_ptensor *pcgc_graph_ref_type(const pcgc_graph *g, pcgc_ref r);

/* Canonical 64-bit hash (xxHash): independent of node creation order and of
 * names; changes with any change of operators, attributes, edges (including
 * which input slot) or types. Requires an acyclic graph. */
uint64_t pcgc_graph_hash(const pcgc_graph *g);
/* Exact structural equality up to node order and names (an isomorphism that
 * preserves ops, attributes, types and input slots). */
bool pcgc_graph_equal(const pcgc_graph *a, const pcgc_graph *b);
/* pcgc_graph_equal that also gives the isomorphism when there is one:
 * map[i] = the node of b that node i of a corresponds to (map: a->n_nodes
 * ints, may be NULL). */
bool pcgc_graph_isomorphism(const pcgc_graph *a, const pcgc_graph *b, int *map);

/* Adds a training loss to a graph that has none (an exported inference
 * graph): `kind` (PCGC_OP_SOFTMAX_CROSS_ENTROPY or PCGC_OP_MSE) of its one
 * output (the one float tensor of the computed nodes none of whose outputs
 * is read)
 * against a new input "labels" (a unique name): class ids i32[the output's
 * dims but the last] for cross entropy, the output's type for mse. Types
 * the graph first. Errors name what is wrong: a loss already there, no
 * output or several (listed), an output of the wrong kind. */
pcgc_status pcgc_graph_add_loss(pcgc_graph *g, pcgc_op_kind kind, pcgc_error *err);

/* Totals over a graph, for `pcgc check`. */
typedef struct pcgc_graph_stats {
  int n_nodes;
  int count_by_kind[PCGC_OP_COUNT];
  int64_t params;            /* trainable parameters */
  double param_bytes;
  double fwd_flops, bwd_flops;
  double activation_bytes;   /* outputs of compute ops kept for backward */
  double input_bytes;        /* data inputs */
} pcgc_graph_stats;

pcgc_status pcgc_graph_stats_compute(const pcgc_graph *g, pcgc_graph_stats *s, pcgc_error *err);

/* ------------------------------------------------------- text and drawing */

/* Writes the canonical text form of the graph in the model-file format
 * (docs/model-format.md): every node explicit, weights declared, every
 * attribute written, topological order. Parsing it gives a graph with the
 * same hash. */
pcgc_status pcgc_graph_write_text(FILE *f, const pcgc_graph *g, pcgc_error *err);
/* Graphviz DOT; parallel operators drawn as distinct shapes and colours. */
pcgc_status pcgc_graph_write_dot(FILE *f, const pcgc_graph *g, pcgc_error *err);

/* ------------------------------------------------------------ model files */

/* Overrides of top-level constants, as from `--set NAME=VALUE`. */
typedef struct pcgc_model_options {
  int n_set;
  const char *const *set_names;
  const char *const *set_values;   /* integer or float text */
} pcgc_model_options;

/* Parses model text (docs/model-format.md) into a typed graph. `filename`
 * is used in messages. NULL on error, with `err` filled (file:line:col,
 * source line, hint). `opts` may be NULL. */
pcgc_graph *pcgc_model_parse(const char *text, size_t len, const char *filename,
                             const pcgc_model_options *opts, pcgc_error *err);
/* Reads and parses a model file. */
pcgc_graph *pcgc_model_load(const char *path, const pcgc_model_options *opts,
                            pcgc_error *err);

/* Reads a whole file into a NUL-terminated buffer (caller frees). */
char *pcgc_read_file(const char *path, size_t *len, pcgc_error *err);
/* The line and column (from 1, in bytes) of byte `off` of text[0..len). */
pcgc_srcloc pcgc_srcloc_at(const char *text, size_t len, size_t off, const char *file);

/* What a JSON file pcgc reads must not hold although JSON parsers let it
 * through (pcg/json_strict.c): a NUL character, bytes that are not UTF-8,
 * an object member given twice. PCGC_ERR_PARSE at path:line:col naming the
 * problem; a syntax error is left to the JSON parser (PCGC_OK). */
pcgc_status pcgc_json_check_strict(const char *text, size_t len, const char *path, pcgc_error *err);

/* Writes len bytes as the whole of `path`, atomically (pcg/fileio.c): a
 * temporary file beside it, fsync, rename. PCGC_ERR_IO naming the file. */
pcgc_status pcgc_write_file_atomic(const char *path, const char *data, size_t len, pcgc_error *err);

/* ------------------------------------------------------------- threads
 * The search uses the machine's cores (pcg/work.c): independent pieces of
 * work (candidates, rewrites, rules to check) run on worker threads, and
 * their results are used in index order, so what is computed does not
 * depend on the thread count. */

/* Worker threads to use: $PCGC_THREADS when set to 1..256, else the online
 * cores (at most 16). */
int pcgc_threads_default(void);

/* Calls fn(ctx, i, worker) for every i in [0, n), on `threads` threads
 * (<= 1: this one, in order; worker 0 is always the calling thread), each
 * taking the next index not yet taken. fn must be safe to run concurrently
 * for different i; worker (0 .. threads - 1) indexes per-thread state.
 * Returns the number of threads used (a thread that cannot start leaves
 * its share to the others). */
int pcgc_parallel_run(int n, int threads, void (*fn)(void *ctx, int i, int worker), void *ctx);

/* Monotonic wall-clock seconds (pcg/work.c), for timings and time limits. */
double pcgc_now(void);

#ifdef __cplusplus
}
#endif
#endif /* PCGC_PCG_H */
