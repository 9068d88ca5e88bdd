/*
 * rules_internal.h — the parsed form of a rule (the AST every part of
 * substitutions/ shares): symbols, tensors, nodes of both sides,
 * conditions, and an expression pool. Language: docs/rules.md.
 *
 * Indices, not pointers: expressions refer to each other by index into
 * rule->ex, nodes and yields to tensors by index into rule->tensors. Match
 * nodes and rewrite nodes are each in definition order, which is a
 * topological order (names are defined before use).
 *
 * Every array of a rule holds exactly what the rule has (issue 17: a rules
 * file's memory stays proportional to its text): while a rule is read, its
 * arrays point into the parser's fixed-size scratch (the PCGC_RULE_MAX_*
 * limits); when it is complete, pcgc__rule_pack copies the rule, its arrays
 * and its names into one allocation sized to fit, which pcgc__rule_free frees.
 * Arrays are read as before (r->tensors[i], r->match.nodes[n].attrs[a]) and
 * never grow after packing.
 */
#ifndef PCGC_RULES_INTERNAL_H
#define PCGC_RULES_INTERNAL_H

#include "substitutions.h"

#define PCGC_RULE_MAX_OUTS 8       /* outputs of one node (split) */
#define PCGC_RULE_MAX_ATTRS 12     /* attributes given on one node */
#define PCGC_RULE_MAX_CONDS 32
#define PCGC_RULE_MAX_PITEMS 8     /* parallel-type items of one input type */

/* ---------------------------------------------------------- expressions */

typedef enum rx_kind {
  RX_INT,      /* v */
  RX_SYM,      /* sym */
  RX_ATTR,     /* tensor.KEY: attribute `attr` of the match node producing `tensor`
                  (int; bool as 0/1; enum as its value index; float only as the
                  whole value of a float attribute: a copy) */
  RX_ATTR_AT,  /* tensor.KEY[a]: element a of an ints/ints2 attribute */
  RX_RANK,     /* rank(tensor) */
  RX_SIZE,     /* size(tensor, a): a < 0 counts from the end */
  RX_NEG,      /* -a */
  RX_ADD, RX_SUB, RX_MUL, RX_DIV, RX_MOD /* a op b; / and % as in C, on int64 */
} rx_kind;

/* 8 bytes: a rule may hold thousands (up to one per byte of the text of
 * its conditions; issue 17), so the fields a kind does not read share
 * storage, operands are 13-bit indices (PCGC__RULES_MAX_EXPRS, 4096, fits)
 * packed with the kind in one word, an integer literal is at most 2^31 - 1
 * (the parser says so), and an expression keeps no source position:
 * messages point at the condition or attribute that holds it. */
typedef struct rx {
  union {
    int32_t v;           /* RX_INT (evaluated in int64) */
    int32_t sym;         /* RX_SYM */
    struct {
      int16_t tensor;    /* RX_ATTR, RX_ATTR_AT, RX_RANK, RX_SIZE */
      int16_t attr;      /* RX_ATTR, RX_ATTR_AT */
    };
  };
  signed int a : 13, b : 13; /* operand expressions, -1 when absent (every kind) */
  rx_kind kind : 6;
} rx;

/* -------------------------------------------------------------- symbols */

typedef enum rsym_kind {
  RS_DEGREE,    /* parameter: instantiated over the machine's degrees */
  RS_DIM,       /* parameter: instantiated over 0 .. max rank - 1 */
  RS_VAR,       /* bound by the match: a bare name in an input shape, a
                   parallel-type item or a match attribute binds it where it
                   first occurs, later occurrences must agree */
  RS_ELLIPSIS   /* `...NAME` in an input shape: any number of dims; a second
                   occurrence must match the same dims */
} rsym_kind;

typedef struct rsym {
  char *name;
  rsym_kind kind;
  pcgc_srcloc loc;
} rsym;

/* ---------------------------------------------------------------- types */

#define RT_DTYPE_ANY -1     /* no dtype given */
#define RT_DTYPE_FLOAT -2   /* `float`: any float dtype */
#define RT_DTYPE_INT -3     /* `int`: any integer dtype */

typedef enum rpitem_kind { RP_DEG, RP_SUM, RP_REP, RP_MICRO } rpitem_kind;

typedef struct rpitem {
  rpitem_kind kind;
  int32_t index;         /* RP_DEG: the dim (expression; < 0 from the end); else -1 */
  int32_t value;         /* expression */
  pcgc_srcloc loc;
} rpitem;

/* The constraint on a match input: x: DTYPE [dims] {items}; every part optional. */
typedef struct rtype {
  int dtype;             /* a pcgc_dtype, or RT_DTYPE_* */
  bool has_shape;
  int n_dims;            /* explicit dims (the ellipsis not counted) */
  int32_t dims[PCGC_MAX_RANK];  /* expressions */
  int ellipsis_at;       /* explicit dims before the ellipsis, or -1 for none */
  int32_t ellipsis_sym;  /* its RS_ELLIPSIS symbol, or -1 */
  int n_pitems;          /* unlisted parallel items are unconstrained */
  rpitem *pitems;        /* n_pitems (at most PCGC_RULE_MAX_PITEMS) */
} rtype;

/* ---------------------------------------------------------------- nodes */

typedef enum rv_kind {
  RV_EXPR,    /* int attribute; an ints/ints2 attribute given one value for every
                 entry, or a bare RX_ATTR copying a whole list; a bool given a
                 bare variable (bound 0/1 in a match) or a copy; for enum and
                 float attributes only a bare RX_ATTR (a copy) */
  RV_LIST,    /* [e, e, ...] for ints/ints2 */
  RV_ENUM,    /* an enum value name: ival */
  RV_BOOL,    /* true/false: ival */
  RV_FLOAT    /* a float literal: f */
} rv_kind;

typedef struct rattr {
  int attr;              /* index in the op's attribute schema */
  rv_kind kind;
  int32_t expr;          /* RV_EXPR */
  int n;                 /* RV_LIST */
  int32_t list[PCGC_MAX_RANK];
  int64_t ival;          /* RV_ENUM, RV_BOOL */
  double f;              /* RV_FLOAT */
  pcgc_srcloc loc;
  int len;
} rattr;

typedef struct rnode {            /* counts in 16 bits: a rule holds up to 32 (issue 17) */
  pcgc_op_kind op;
  int16_t n_args;
  int16_t n_attrs;
  int16_t copy_from;                  /* rewrite only: NAME.* copies the attributes of
                                         the match node producing tensor NAME (same op),
                                         then attrs[] override; -1 for none */
  int16_t n_outs;
  int32_t len;
  int32_t *args;                      /* n_args tensor indices (at most PCGC_RULE_MAX_ARGS) */
  rattr *attrs;                       /* n_attrs (at most PCGC_RULE_MAX_ATTRS);
                                         match: constraints (unlisted: any);
                                         rewrite: values (after copy_from) */
  int32_t *outs;                      /* n_outs tensor indices; -1 for `_` */
  pcgc_srcloc loc;                    /* the op name (len: its length) */
} rnode;

/* -------------------------------------------------------------- tensors */

typedef struct rtensor {   /* indices in 16 bits: a rule holds up to 48 (issue 17) */
  char *name;
  pcgc_srcloc loc;
  int16_t side;          /* 0 match, 1 rewrite */
  int16_t node;          /* producing node within its side; -1 for a match input */
  int16_t slot;          /* output slot of that node */
  int16_t input;         /* match input index, or -1 */
  const rtype *type;     /* match inputs: the constraint (in the packed rule
                            or the parser's scratch); other tensors share
                            pcgc__rtype_any. Never NULL. A pointer, not the
                            64 bytes themselves: most tensors are not inputs
                            (issue 17) */
} rtensor;

/* No constraint: any dtype, any shape, no parallel items. */
extern const rtype pcgc__rtype_any;

typedef struct rside {
  int n_nodes;
  rnode *nodes;                          /* n_nodes (at most PCGC_RULE_MAX_NODES) */
  int n_yields;
  int32_t *yields;                       /* n_yields tensor indices */
  pcgc_srcloc yield_loc;
} rside;

/* ----------------------------------------------------------- conditions */

typedef enum rc_op { RC_EQ, RC_NE, RC_LT, RC_LE, RC_GT, RC_GE } rc_op;

typedef struct rcond {
  rc_op op;
  int32_t a, b;          /* expressions */
  bool params_only;      /* mentions only parameters: decided at instantiation */
  pcgc_srcloc loc;
  int len;
} rcond;

/* ----------------------------------------------------------------- rule */

struct pcgc_rule {
  char *name;
  pcgc_srcloc loc;               /* loc.file is owned by the rule set */
  int n_params;                  /* symbols 0 .. n_params-1, in declaration order */
  int n_syms;
  rsym *syms;                    /* n_syms (at most PCGC_RULE_MAX_SYMS) */
  int n_inputs;
  int32_t *inputs;               /* tensor index of match input i */
  int n_tensors;
  rtensor *tensors;              /* n_tensors (at most PCGC_RULE_MAX_TENSORS) */
  rside match, rewrite;
  int n_conds;
  rcond *conds;                  /* n_conds (at most PCGC_RULE_MAX_CONDS) */
  int n_ex, cap_ex;
  rx *ex;                        /* expression pool (grown while parsing) */
  bool packed;                   /* one allocation (pcgc__rule_pack), else arrays in the parser's scratch */
};

/* --------------------------------------------------- shared evaluation
 * (substitutions/expr.c) */

/* What an expression is evaluated against. sym_set[i] says whether sym[i]
 * has a value; tensor types and node attributes come from callbacks so that
 * the matcher (graph nodes) and the checker (its own graphs) can share it. */
typedef struct rx_env {
  const pcgc_rule *rule;
  int64_t sym[PCGC_RULE_MAX_SYMS];
  bool sym_set[PCGC_RULE_MAX_SYMS];
  /* type of rule tensor t (a match tensor), or NULL when unknown */
  const pcgc_ptensor *(*type_of)(void *ctx, int tensor);
  /* attributes of the match node producing rule tensor t, or NULL */
  const pcgc_attrs *(*attrs_of)(void *ctx, int tensor);
  void *ctx;
} rx_env;

typedef enum rx_result {
  RX_OK,         /* *out holds the value */
  RX_UNBOUND,    /* needs a symbol, type or attribute not known yet */
  RX_UNDEFINED   /* division by zero, index out of range: the condition is false */
} rx_result;

rx_result pcgc__rx_eval(const rx_env *env, int32_t e, int64_t *out);
/* A condition: RX_OK with *holds set, or why it could not be decided. */
rx_result pcgc__rc_eval(const rx_env *env, const rcond *c, bool *holds);
/* True when expression e is a bare symbol (RX_SYM); *sym gets it. */
bool pcgc__rx_is_sym(const pcgc_rule *r, int32_t e, int32_t *sym);
/* Writes expression e as source-like text (for messages). */
void pcgc__rx_format(const pcgc_rule *r, int32_t e, char *buf, size_t n);

/* Sets the attributes of a rewrite node (or a match node, for the checker:
 * constrained attributes take their values, the rest their schema defaults)
 * into *a: copy_from first, then every given attribute evaluated in env.
 * PCGC_ERR_INVALID with a message when a value cannot be computed (an
 * unbound symbol, a required attribute left out). */
pcgc_status pcgc__rnode_attrs(const rx_env *env, const rnode *n, pcgc_attrs *a, pcgc_error *err);
/* The same without the final pcgc_attrs_check: required attributes may be
 * left unset (a->set[i] false), for the checker to draw. */
pcgc_status pcgc__rnode_attrs_partial(const rx_env *env, const rnode *n, pcgc_attrs *a, pcgc_error *err);

/* ruleset internals the parser fills (substitutions/ruleset.c) */
/* A packed rule: one allocation; an unpacked one: its names and expression
 * pool (its other arrays belong to the parser). */
void pcgc__rule_free(pcgc_rule *r);
/* A packed copy of r (one allocation holding the rule, every array sized to
 * its count, and every name), or NULL on out of memory; r is left as it was. */
pcgc_rule *pcgc__rule_pack(const pcgc_rule *r);
int32_t pcgc__rx_new(pcgc_rule *r, rx_kind kind);  /* -1 on out of memory */

#endif
