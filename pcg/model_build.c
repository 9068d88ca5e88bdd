/*
 * model_build.c — builds a typed pcgc_graph from the syntax tree of a model
 * file (model_parse.c), walking it statement by statement like an
 * interpreter:
 *
 *  - Expressions are evaluated exactly: int64 arithmetic with overflow
 *    checks and exact division; a float anywhere makes the result a float.
 *  - Scopes are tables of names (records in the scope's arena, indexed by
 *    index.c: about 80 bytes a name, where uthash took 200; issue 17).
 *    The file scope holds constants,
 *    blocks and tensors; a block instance gets a fresh scope with its
 *    parameters and its own layers, a name prefix ("h.3"), and sees the file
 *    scope only for constants and blocks. A separate table maps every full
 *    tensor name in the graph to its node and slot, so a scope may also name
 *    tensors created inside it (weights "h.weight", instance internals
 *    "enc.3.attn") by their path.
 *  - A layer's attributes are converted by the op's schema (ops.def); a
 *    layer with only its data inputs creates its weights from keys such as
 *    out= (the table `creators`), with PyTorch's default initialisation.
 *  - Every node is added with its source position and inferred at once, so a
 *    shape error points at the layer that caused it.
 *  - A block is instantiated by running its body's syntax tree in a new
 *    scope; repeat(n) runs it n times, chaining results into the first tensor
 *    parameters. Blocks may only call blocks defined before them, so
 *    recursion cannot happen (a self-call is reported at definition).
 *
 * Size limits (model_internal.h) bound nodes, statements run, repeat counts
 * and nesting; a repeat is refused after its first instance when the
 * projected total exceeds a limit, so huge models fail fast.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "model_internal.h"

/* ------------------------------------------------------------ structures */

typedef pcgc__num num;

typedef enum sym_kind { SYM_TENSOR, SYM_NUM, SYM_BLOCK } sym_kind;

/* A name in a scope. */
typedef struct sym {
  struct sym *next;         /* the scope's names in order of definition */
  pcgc__span def;
  union {
    pcgc_ref ref;             /* SYM_TENSOR */
    num val;                  /* SYM_NUM */
    const pcgc__stmt *block;  /* SYM_BLOCK */
  };
  sym_kind kind;
  char name[];
} sym;

typedef struct sym_table {
  pcgc__index index;        /* of sym pointers */
  sym *first, *last;
  pcgc__arena arena;        /* the records */
} sym_table;

typedef struct scope {
  const char *prefix;       /* "" in the file scope, "h.3" in an instance */
  struct scope *top;        /* the file scope; NULL for the file scope itself */
  const pcgc__stmt *block;  /* the block this scope instantiates */
  sym_table syms;
} scope;

typedef struct builder {
  pcgc__src src;
  pcgc_graph *g;
  pcgc__index outputs;      /* the graph's outputs after the first, by name:
                               out_name() values; a node's name (its first
                               output) is in the graph's own index */
  struct {
    int line, col;
  } *defs;                  /* by node id: where its outputs' names were
                               defined (the names are not kept twice) */
  int n_defs;
  sym *found;               /* scope_find's answer for a name of the file
                               scope bound without a record */
  const pcgc_model_options *opts;
  const num *set_vals;
  int64_t tensors;          /* outputs of the graph's nodes */
  int nesting;
  int64_t work;
  bool noted; /* the instance context is already in the message */
} builder;

typedef char name_buf[PCGC__MODEL_MAX_NAME + 32];

#define FAIL(b, sp, st, ...) pcgc__model_fail(&(b)->src, (sp), (st), __VA_ARGS__)

static pcgc_status hint(builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static pcgc_status hint(builder *b, const char *fmt, ...) {
  char buf[sizeof b->src.err->hint];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  pcgc_error_hint(b->src.err, "%s", buf);
  return b->src.err->status;
}

static pcgc_status nomem(builder *b) {
  return pcgc_error_set(b->src.err, PCGC_ERR_NOMEM, "out of memory building the model graph");
}

static const char *plural(int64_t n) { return n == 1 ? "" : "s"; }

/* ------------------------------------------------------------ name tables */

static pcgc__key sym_name(const void *ctx, uintptr_t v) { return pcgc__key_str(((const sym *)v)->name); }

/* Output `slot` of node `id` as a value of b->outputs, and its name. */
_Static_assert(PCGC_MAX_INTS < 256, "a split's outputs fit 8 bits");
static uintptr_t out_value(int id, int slot) { return ((uintptr_t)id << 8 | (uintptr_t)slot) + 1; }
static pcgc__key out_name(const void *g, uintptr_t v) {
  const pcgc_node *n = &((const pcgc_graph *)g)->nodes[(v - 1) >> 8];
  return pcgc__key_str(n->out_names[(v - 1) & 0xFF]);
}

static sym *sym_find(const sym_table *t, const char *name) {
  return (sym *)pcgc__index_find(&t->index, pcgc__key_str(name), sym_name, NULL);
}

static pcgc_status sym_add(builder *b, scope *s, const char *name, sym_kind kind, pcgc__span def, sym **out) {
  size_t n = strlen(name);
  sym *y = pcgc__arena_alloc(&s->syms.arena, sizeof *y + n + 1);
  if (!y) return nomem(b);
  memcpy(y->name, name, n + 1);
  y->kind = kind;
  y->def = def;
  if (pcgc__index_add(&s->syms.index, (uintptr_t)y, sym_name, NULL)) return nomem(b);
  if (s->syms.last) s->syms.last->next = y;
  else s->syms.first = y;
  s->syms.last = y;
  *out = y;
  return PCGC_OK;
}

static void syms_free(sym_table *t) {
  pcgc__index_free(&t->index);
  pcgc__arena_free(&t->arena);
  t->first = t->last = NULL;
}

/* The node and slot of full tensor name `name`, and where it was defined
 * (either may be NULL). */
static bool gname_find(builder *b, const char *name, pcgc_ref *ref, pcgc__span *def) {
  int id = pcgc_graph_find(b->g, name), slot = 0;
  if (id < 0) {
    uintptr_t v = pcgc__index_find(&b->outputs, pcgc__key_str(name), out_name, b->g);
    if (!v) return false;
    id = (int)((v - 1) >> 8);
    slot = (int)((v - 1) & 0xFF);
  }
  if (ref) *ref = (pcgc_ref){id, slot};
  if (def) *def = id < b->n_defs ? (pcgc__span){0, 0, b->defs[id].line, b->defs[id].col} : (pcgc__span){0};
  return true;
}

/* Name `name` in scope `s`. The file scope binds a tensor named like its
 * node without a record of its own (bind_tensor): it is found through the
 * graph, as a record in b->found. */
static sym *scope_find(builder *b, const scope *s, const char *name) {
  sym *y = sym_find(&s->syms, name);
  if (y || s->top || strchr(name, '.')) return y;
  pcgc_ref ref;
  pcgc__span def;
  if (!gname_find(b, name, &ref, &def)) return NULL;
  b->found->kind = SYM_TENSOR;
  b->found->ref = ref;
  b->found->def = def;
  return b->found;
}

static void gnames_free(builder *b) {
  pcgc__index_free(&b->outputs);
  free(b->defs);
  free(b->found);
}

/* out = prefix.name (or name at top level), with an optional ".index". */
static pcgc_status full_name(builder *b, const scope *s, const char *name, int64_t index, pcgc__span sp,
                             name_buf out) {
  int n;
  if (index >= 0)
    n = snprintf(out, sizeof(name_buf), "%s%s%s.%lld", s->prefix, s->prefix[0] ? "." : "", name,
                 (long long)index);
  else
    n = snprintf(out, sizeof(name_buf), "%s%s%s", s->prefix, s->prefix[0] ? "." : "", name);
  if (n < 0 || n > PCGC__MODEL_MAX_NAME) {
    FAIL(b, sp, PCGC_ERR_INVALID, "the full name of '%s' is too long (more than %d characters)", name,
         PCGC__MODEL_MAX_NAME);
    return hint(b, "blocks nested deeply inside each other make long names; use shorter names");
  }
  return PCGC_OK;
}

static pcgc_status join_name(builder *b, const char *base, const char *suffix, pcgc__span sp, name_buf out) {
  int n = snprintf(out, sizeof(name_buf), "%s.%s", base, suffix);
  if (n < 0 || n > PCGC__MODEL_MAX_NAME) {
    FAIL(b, sp, PCGC_ERR_INVALID, "the name '%.60s...' is too long (more than %d characters)", base,
         PCGC__MODEL_MAX_NAME);
    return hint(b, "use shorter names");
  }
  return PCGC_OK;
}

/* A name about to be defined in scope `s` must be new there. */
static pcgc_status check_new(builder *b, scope *s, const pcgc__ident *id) {
  sym *y = scope_find(b, s, id->s);
  if (!y) return PCGC_OK;
  FAIL(b, id->sp, PCGC_ERR_PARSE, "'%s' is already defined", id->s);
  return hint(b, "it was first defined at line %d, column %d; choose another name", y->def.line, y->def.col);
}

/* A full graph name about to be created must be new. */
static pcgc_status check_new_full(builder *b, const char *full, pcgc__span sp) {
  pcgc__span def;
  if (!gname_find(b, full, NULL, &def)) return PCGC_OK;
  FAIL(b, sp, PCGC_ERR_PARSE, "tensor '%s' is already defined", full);
  return hint(b, "it was first defined at line %d, column %d; choose another name", def.line, def.col);
}

/* ------------------------------------------------------------ expressions */

static double num_f(num v) { return v.is_float ? v.f : (double)v.i; }

/* The statement that defines `name` in `stmts`, if it comes after offset `off`. */
static const pcgc__stmt *defined_later(const pcgc__stmt *const *stmts, int n, const char *name, int off) {
  for (int i = 0; i < n; i++) {
    const pcgc__stmt *st = stmts[i];
    if (st->sp.off <= off) continue;
    switch (st->kind) {
    case PCGC__ST_CONST:
    case PCGC__ST_INPUT:
    case PCGC__ST_WEIGHT:
    case PCGC__ST_BLOCK:
      if (strcmp(st->name.s, name) == 0) return st;
      break;
    case PCGC__ST_LAYER:
      for (int k = 0; k < st->n_lhs; k++)
        if (strcmp(st->lhs[k].s, name) == 0) return st;
      break;
    default: break;
    }
  }
  return NULL;
}

/* The top-level statement that defines `name` after offset `off`, if any:
 * the trees of the statements run so far are gone, so the file is read
 * again, into `arena` (which then holds the answer; the caller frees it).
 * Only error messages ask, once. A syntax error further on ends the search
 * (the parse that is building reports it instead of this error). */
static const pcgc__stmt *defined_later_in_file(builder *b, const char *name, int off, pcgc__arena *arena) {
  pcgc_error scratch;
  pcgc_error_clear(&scratch);
  pcgc__src src = b->src;
  src.err = &scratch;
  pcgc__model_reader *R = pcgc__model_reader_new(&src);
  if (!R) return NULL;
  const pcgc__stmt *st, *found = NULL;
  while (!found && pcgc__model_reader_next(R, arena, NULL, &st) == PCGC_OK && st) {
    found = defined_later(&st, 1, name, off);
    if (!found) pcgc__arena_reset(arena);
  }
  pcgc__model_reader_free(R);
  return found;
}

static void suggest_syms(pcgc__suggest *sg, const sym_table *table, sym_kind kind) {
  for (const sym *y = table->first; y; y = y->next)
    if (y->kind == kind) pcgc__suggest_add(sg, y->name);
}

static pcgc_status unknown_number(builder *b, scope *s, const pcgc__expr *e) {
  FAIL(b, e->sp, PCGC_ERR_PARSE, "unknown name '%s'", e->name);
  scope *top = s->top ? s->top : s;
  pcgc__arena arena = {0};
  const pcgc__stmt *later = defined_later_in_file(b, e->name, e->sp.off, &arena);
  int later_line = later && later->kind == PCGC__ST_CONST ? later->sp.line : 0;
  pcgc__arena_free(&arena);
  if (later_line)
    return hint(b, "constant '%s' is defined later, at line %d; define it before its use", e->name, later_line);
  pcgc__suggest sg;
  pcgc__suggest_init(&sg, e->name);
  suggest_syms(&sg, &s->syms, SYM_NUM);
  if (s->top) suggest_syms(&sg, &top->syms, SYM_NUM);
  if (pcgc__suggest_best(&sg)) return hint(b, "did you mean '%s'?", pcgc__suggest_best(&sg));
  return hint(b, "numbers come from constants (const NAME = ...) and int or float block parameters");
}

static pcgc_status lookup_number(builder *b, scope *s, const pcgc__expr *e, num *out) {
  sym *y = scope_find(b, s, e->name);
  if (!y && s->top) y = scope_find(b, s->top, e->name);
  if (!y) return unknown_number(b, s, e);
  if (y->kind == SYM_NUM) {
    *out = y->val;
    return PCGC_OK;
  }
  FAIL(b, e->sp, PCGC_ERR_PARSE, "'%s' is a %s, not a number", e->name, y->kind == SYM_TENSOR ? "tensor" : "block");
  return hint(b, "numbers come from constants (const NAME = ...) and int or float block parameters");
}

static pcgc_status arith(builder *b, const pcgc__expr *e, num l, num r, num *out) {
  if (!l.is_float && !r.is_float) {
    int64_t x = l.i, y = r.i, z = 0;
    bool ovf = false;
    switch (e->op) {
    case '+': ovf = __builtin_add_overflow(x, y, &z); break;
    case '-': ovf = __builtin_sub_overflow(x, y, &z); break;
    case '*': ovf = __builtin_mul_overflow(x, y, &z); break;
    case '/':
    case '%':
      if (y == 0) {
        FAIL(b, e->sp, PCGC_ERR_INVALID, "%s by zero in %lld %c %lld", e->op == '/' ? "division" : "modulo",
             (long long)x, e->op, (long long)y);
        return hint(b, "check the values of the constants and parameters used here");
      }
      if (e->op == '%') {
        z = y == -1 ? 0 : x % y;
      } else if (x == INT64_MIN && y == -1) {
        ovf = true;
      } else if (x % y != 0) {
        FAIL(b, e->sp, PCGC_ERR_INVALID, "division %lld / %lld is not exact", (long long)x, (long long)y);
        return hint(b, "integer division must be exact so shapes stay exact; write %lld.0 / %lld for a float",
                    (long long)x, (long long)y);
      } else {
        z = x / y;
      }
      break;
    default: break;
    }
    if (ovf) {
      FAIL(b, e->sp, PCGC_ERR_INVALID, "integer overflow in %lld %c %lld", (long long)x, e->op, (long long)y);
      return hint(b, "integers must fit in 64 bits");
    }
    *out = (num){false, z, 0};
    return PCGC_OK;
  }
  double x = num_f(l), y = num_f(r), z = 0;
  switch (e->op) {
  case '+': z = x + y; break;
  case '-': z = x - y; break;
  case '*': z = x * y; break;
  case '/':
    if (y == 0) {
      FAIL(b, e->sp, PCGC_ERR_INVALID, "division by zero in %g / %g", x, y);
      return hint(b, "check the values of the constants and parameters used here");
    }
    z = x / y;
    break;
  case '%':
    FAIL(b, e->sp, PCGC_ERR_INVALID, "'%%' needs integers, got %g %% %g", x, y);
    return hint(b, "the remainder is defined for integers only");
  default: break;
  }
  if (!isfinite(z)) {
    FAIL(b, e->sp, PCGC_ERR_INVALID, "the result of %g %c %g is out of range", x, e->op, y);
    return hint(b, "floats range up to about 1.8e308");
  }
  *out = (num){true, 0, z};
  return PCGC_OK;
}

/* Recursion depth is bounded by the parser's limit on tree height. */
static pcgc_status eval(builder *b, scope *s, const pcgc__expr *e, num *out) {
  num l, r;
  pcgc_status st;
  switch (e->kind) {
  case PCGC__EX_INT: *out = (num){false, e->i, 0}; return PCGC_OK;
  case PCGC__EX_FLOAT: *out = (num){true, 0, e->f}; return PCGC_OK;
  case PCGC__EX_BOOL:
    FAIL(b, e->sp, PCGC_ERR_INVALID, "'%s' is not a number", e->i ? "true" : "false");
    return hint(b, "true and false are the values of bool attributes such as bias=false");
  case PCGC__EX_NAME: return lookup_number(b, s, e, out);
  case PCGC__EX_NEG:
    if ((st = eval(b, s, e->l, &l))) return st;
    if (l.is_float) {
      *out = (num){true, 0, -l.f};
    } else if (l.i == INT64_MIN) {
      FAIL(b, e->sp, PCGC_ERR_INVALID, "integer overflow in -(%lld)", (long long)l.i);
      return hint(b, "integers must fit in 64 bits");
    } else {
      *out = (num){false, -l.i, 0};
    }
    return PCGC_OK;
  case PCGC__EX_BIN:
    if ((st = eval(b, s, e->l, &l)) || (st = eval(b, s, e->r, &r))) return st;
    return arith(b, e, l, r, out);
  }
  return PCGC_OK;
}

static pcgc_status eval_int(builder *b, scope *s, const pcgc__expr *e, const char *what, int64_t *out) {
  num v;
  pcgc_status st = eval(b, s, e, &v);
  if (st) return st;
  if (v.is_float) {
    FAIL(b, e->sp, PCGC_ERR_INVALID, "%s must be an integer, got %g", what, v.f);
    return hint(b, "write a whole number; an expression with a float in it is a float");
  }
  *out = v.i;
  return PCGC_OK;
}

/* ------------------------------------------------------------ node helpers */

static pcgc_status add_node(builder *b, pcgc_op_kind kind, const char *name, const pcgc_attrs *a, int n_in,
                            const pcgc_ref *in, pcgc__span where, int *id_out) {
  if (b->g->n_nodes >= PCGC__MODEL_MAX_NODES) {
    FAIL(b, where, PCGC_ERR_INVALID, "the model has more than %d nodes", PCGC__MODEL_MAX_NODES);
    return hint(b, "check the repeat counts and how often blocks call blocks");
  }
  int n_out = a ? pcgc_op_num_outputs(kind, a) : 1;
  if (b->tensors + n_out > PCGC__MODEL_MAX_TENSORS) {
    FAIL(b, where, PCGC_ERR_INVALID, "the model has more than %d tensors (outputs of its nodes)",
         PCGC__MODEL_MAX_TENSORS);
    return hint(b, "each output of a split counts; check the repeat counts and the splits");
  }
  int id = pcgc_graph_add_node(b->g, kind, name, a, n_in, in);
  if (id == PCGC_ERR_NOMEM) return nomem(b);
  if (id < 0) {
    FAIL(b, where, PCGC_ERR_INVALID, "cannot add %s '%s' to the graph (%s)", pcgc_op_name(kind), name,
         pcgc_status_str((pcgc_status)id));
    return hint(b, "tensor names must be unique");
  }
  b->g->nodes[id].loc = (pcgc_srcloc){b->src.file, where.line, where.col};
  b->tensors += b->g->nodes[id].n_out;
  *id_out = id;
  return PCGC_OK;
}

/* Infers node `id`; a failure keeps the message and hint of the inference
 * and points at `where` (the layer's operator). */
static pcgc_status infer(builder *b, int id, pcgc__span where) {
  pcgc_error *err = b->src.err;
  pcgc_status st = pcgc_graph_infer_node(b->g, id, err);
  if (st == PCGC_OK || st == PCGC_ERR_NOMEM) return st;
  char msg[sizeof err->message], h[sizeof err->hint];
  memcpy(msg, err->message, sizeof msg);
  memcpy(h, err->hint, sizeof h);
  msg[sizeof msg - 1] = h[sizeof h - 1] = '\0';
  FAIL(b, where, st, "%s", msg[0] ? msg : pcgc_status_str(st));
  if (h[0]) {
    pcgc_error_hint(err, "%s", h);
    return st;
  }
  /* no hint from inference: show the input types, which is what to check */
  const pcgc_node *n = &b->g->nodes[id];
  size_t k = (size_t)snprintf(h, sizeof h, "the input%s: ", plural(n->n_in));
  for (int i = 0; i < n->n_in && k < sizeof h; i++) {
    const pcgc_ptensor *t = pcgc_graph_ref_type(b->g, n->in[i]);
    char tb[160] = "?";
    if (t) pcgc_ptensor_format(tb, sizeof tb, t);
    k += (size_t)snprintf(h + k, sizeof h - k, "%s%s %s", i ? ", " : "", b->g->nodes[n->in[i].node].out_names[n->in[i].slot], tb);
  }
  if (n->n_in == 0) snprintf(h, sizeof h, "check the attributes");
  pcgc_error_hint(err, "%s", h);
  return st;
}

/* Registers the names of every output of node `id`. */
static pcgc_status register_outputs(builder *b, int id, pcgc__span def) {
  const pcgc_node *n = &b->g->nodes[id];
  if (id >= b->n_defs) {
    int cap = b->n_defs ? b->n_defs : 64;
    while (cap <= id) cap *= 2;
    void *d = realloc(b->defs, (size_t)cap * sizeof *b->defs);
    if (!d) return nomem(b);
    b->defs = d;
    memset(b->defs + b->n_defs, 0, (size_t)(cap - b->n_defs) * sizeof *b->defs);
    b->n_defs = cap;
  }
  b->defs[id].line = def.line;
  b->defs[id].col = def.col;
  for (int k = 1; k < n->n_out; k++)
    if (pcgc__index_add(&b->outputs, out_value(id, k), out_name, b->g)) return nomem(b);
  return PCGC_OK;
}

/* Checks a shape's size: every dim positive, elements and bytes within int64. */
static pcgc_status check_size(builder *b, const char *name, pcgc_dtype dt, int rank, const int64_t *dims,
                              pcgc__span sp) {
  int64_t n = (int64_t)pcgc_dtype_size(dt);
  for (int i = 0; i < rank; i++) {
    if (dims[i] <= 0) {
      FAIL(b, sp, PCGC_ERR_INVALID, "dim %d of '%s' is %lld; sizes must be positive", i, name, (long long)dims[i]);
      return hint(b, "every dimension of a tensor must be at least 1");
    }
    if (__builtin_mul_overflow(n, dims[i], &n)) {
      FAIL(b, sp, PCGC_ERR_INVALID, "'%s' is too large: its size overflows 64 bits", name);
      return hint(b, "a tensor may hold at most 2^63 bytes; check its dimensions");
    }
  }
  return PCGC_OK;
}

/* ------------------------------------------------------ inputs and weights */

static pcgc_status eval_shape(builder *b, scope *s, const pcgc__type *ty, const char *name, int64_t *dims) {
  if (ty->rank > PCGC_MAX_RANK) {
    FAIL(b, ty->sp, PCGC_ERR_INVALID, "'%s' has %d dims; at most %d are supported", name, ty->rank, PCGC_MAX_RANK);
    return hint(b, "reshape the data to at most %d dims", PCGC_MAX_RANK);
  }
  for (int i = 0; i < ty->rank; i++) {
    pcgc_status st = eval_int(b, s, ty->dims[i], "a dimension", &dims[i]);
    if (st) return st;
    if (dims[i] <= 0) {
      FAIL(b, ty->dims[i]->sp, PCGC_ERR_INVALID, "dim %d of '%s' is %lld; sizes must be positive", i, name,
           (long long)dims[i]);
      return hint(b, "every dimension of a tensor must be at least 1");
    }
  }
  return check_size(b, name, ty->dtype, ty->rank, dims, ty->sp);
}

static pcgc_status bind_tensor(builder *b, scope *s, const pcgc__ident *id, pcgc_ref ref) {
  pcgc_ref named;
  if (!s->top && gname_find(b, id->s, &named, NULL) && named.node == ref.node && named.slot == ref.slot)
    return PCGC_OK; /* `y = op(...)` in the file scope: the graph knows y (scope_find) */
  sym *y = NULL;
  pcgc_status st = sym_add(b, s, id->s, SYM_TENSOR, id->sp, &y);
  if (st == PCGC_OK) y->ref = ref;
  return st;
}

/* input NAME: type  |  weight NAME: type [= init] */
static pcgc_status exec_source(builder *b, scope *s, const pcgc__stmt *st) {
  bool w = st->kind == PCGC__ST_WEIGHT;
  name_buf full;
  int64_t dims[PCGC_MAX_RANK];
  pcgc_status rc;
  if ((rc = check_new(b, s, &st->name)) || (rc = full_name(b, s, st->name.s, -1, st->name.sp, full)) ||
      (rc = check_new_full(b, full, st->name.sp)) || (rc = eval_shape(b, s, &st->type, st->name.s, dims)))
    return rc;
  if (w && !pcgc_dtype_is_float(st->type.dtype)) {
    FAIL(b, st->type.sp, PCGC_ERR_TYPE, "weight '%s' must be floating point, not %s", st->name.s,
         pcgc_dtype_name(st->type.dtype));
    return hint(b, "weights are f32, f16, bf16 or f64; integer data are inputs");
  }
  pcgc_attrs a;
  pcgc_attrs_init(&a, w ? PCGC_OP_WEIGHT : PCGC_OP_INPUT);
  pcgc_attrs_set_ints(&a, "shape", st->type.rank, dims);
  pcgc_attrs_set_int(&a, "dtype", st->type.dtype);
  if (w && st->init >= 0) {
    pcgc_attrs_set_int(&a, "init", st->init);
    if (st->init_arg) {
      num v;
      if ((rc = eval(b, s, st->init_arg, &v))) return rc;
      if (num_f(v) < 0) {
        FAIL(b, st->init_sp, PCGC_ERR_INVALID, "the %s of '%s' is negative (%g)",
             st->init == PCGC_INIT_UNIFORM ? "bound" : "standard deviation", st->name.s, num_f(v));
        return hint(b, "uniform(a) draws from [-a, a] and normal(s) has deviation s: both need a >= 0");
      }
      pcgc_attrs_set_float(&a, "scale", num_f(v));
    }
  }
  int id;
  if ((rc = add_node(b, a.kind, full, &a, 0, NULL, st->name.sp, &id)) || (rc = infer(b, id, st->name.sp)) ||
      (rc = register_outputs(b, id, st->name.sp)))
    return rc;
  return bind_tensor(b, s, &st->name, (pcgc_ref){id, 0});
}

/* A weight created by a layer: BASE.SUFFIX. */
static pcgc_status make_weight(builder *b, const char *base, const char *suffix, pcgc_dtype dt, int rank,
                               const int64_t *dims, pcgc_init init, double scale, pcgc__span where,
                               pcgc_ref *out) {
  name_buf name;
  pcgc_status rc;
  if ((rc = join_name(b, base, suffix, where, name)) || (rc = check_new_full(b, name, where)) ||
      (rc = check_size(b, name, dt, rank, dims, where)))
    return rc;
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_WEIGHT);
  pcgc_attrs_set_ints(&a, "shape", rank, dims);
  pcgc_attrs_set_int(&a, "dtype", dt);
  pcgc_attrs_set_int(&a, "init", init);
  if (init == PCGC_INIT_UNIFORM || init == PCGC_INIT_NORMAL) pcgc_attrs_set_float(&a, "scale", scale);
  int id;
  if ((rc = add_node(b, PCGC_OP_WEIGHT, name, &a, 0, NULL, where, &id)) || (rc = infer(b, id, where)) ||
      (rc = register_outputs(b, id, where)))
    return rc;
  *out = (pcgc_ref){id, 0};
  return PCGC_OK;
}

/* ----------------------------------------------------- weight-creating keys */

/* Layers that create their own weights when given only their data inputs. */
typedef struct creator {
  pcgc_op_kind op;
  int n_data;
  const char *keys[3];
} creator;

static const creator creators[] = {
    {PCGC_OP_LINEAR, 1, {"out", "bias"}},
    {PCGC_OP_CONV2D, 1, {"out", "kernel", "bias"}},
    {PCGC_OP_BATCHNORM, 1, {"affine"}},
    {PCGC_OP_LAYERNORM, 1, {"affine"}},
    {PCGC_OP_RMSNORM, 1, {"affine"}},
    {PCGC_OP_EMBEDDING, 1, {"num", "dim"}},
    {PCGC_OP_ATTENTION, 3, {"embed", "bias", "kv_heads"}},
    {PCGC_OP_EXPERT_LINEAR, 1, {"out", "bias"}},
};

/* Values of the creating keys. */
typedef struct create_args {
  bool has_out, has_kernel, has_num, has_dim, has_embed, has_kv;
  int64_t out, kernel[2], num, dim, embed, kv; /* kv: attention's key/value heads (grouped-query) */
  bool bias, affine;
} create_args;

static const creator *find_creator(pcgc_op_kind op) {
  for (size_t i = 0; i < sizeof creators / sizeof *creators; i++)
    if (creators[i].op == op) return &creators[i];
  return NULL;
}

static bool is_create_key(const creator *cr, const char *key) {
  for (int i = 0; cr && i < 3 && cr->keys[i]; i++)
    if (strcmp(cr->keys[i], key) == 0) return true;
  return false;
}

static pcgc_status need_scalar(builder *b, const pcgc__kv *kv, const char *what, const char *kind) {
  if (kv->val.e) return PCGC_OK;
  FAIL(b, kv->val.sp, PCGC_ERR_INVALID, "%s must be %s, not a list", what, kind);
  return hint(b, "write %s=VALUE", kv->key.s);
}

/* An integer attribute value: a clear message when the value is a name
 * that is not a number, true/false or a float. */
static pcgc_status value_int(builder *b, scope *s, const pcgc__kv *kv, const char *what, int64_t *out) {
  pcgc_status rc = need_scalar(b, kv, what, "an integer");
  if (rc) return rc;
  const pcgc__expr *e = kv->val.e;
  if (e->kind == PCGC__EX_BOOL || (e->kind == PCGC__EX_NAME && !scope_find(b, s, e->name) &&
                                   !(s->top && scope_find(b, s->top, e->name)))) {
    FAIL(b, e->sp, PCGC_ERR_INVALID, "%s must be an integer, got '%s'", what,
         e->kind == PCGC__EX_BOOL ? (e->i ? "true" : "false") : e->name);
    if (e->kind == PCGC__EX_NAME) {
      pcgc__suggest sg;
      pcgc__suggest_init(&sg, e->name);
      suggest_syms(&sg, &s->syms, SYM_NUM);
      if (s->top) suggest_syms(&sg, &s->top->syms, SYM_NUM);
      if (pcgc__suggest_best(&sg)) return hint(b, "did you mean '%s'?", pcgc__suggest_best(&sg));
    }
    return hint(b, "write a whole number or an integer expression: %s=256", kv->key.s);
  }
  return eval_int(b, s, e, what, out);
}

static pcgc_status value_positive(builder *b, scope *s, const pcgc__kv *kv, const char *what, int64_t *out) {
  pcgc_status rc = value_int(b, s, kv, what, out);
  if (rc) return rc;
  if (*out >= 1) return PCGC_OK;
  FAIL(b, kv->val.sp, PCGC_ERR_INVALID, "%s must be positive, got %lld", what, (long long)*out);
  return hint(b, "sizes are at least 1");
}

static pcgc_status value_bool(builder *b, const pcgc__kv *kv, const char *what, bool *out) {
  const pcgc__expr *e = kv->val.e;
  if (e && e->kind == PCGC__EX_BOOL) {
    *out = e->i != 0;
    return PCGC_OK;
  }
  FAIL(b, kv->val.sp, PCGC_ERR_INVALID, "%s must be true or false", what);
  return hint(b, "write %s=true or %s=false", kv->key.s, kv->key.s);
}

/* An integer or a list of two ("kernel=3", "stride=[2, 1]"). */
static pcgc_status value_ints2(builder *b, scope *s, const pcgc__kv *kv, const char *what, int64_t out[2]) {
  if (kv->val.e) {
    pcgc_status rc = value_int(b, s, kv, what, &out[0]);
    out[1] = out[0];
    return rc;
  }
  if (kv->val.n != 2) {
    FAIL(b, kv->val.sp, PCGC_ERR_INVALID, "%s takes one integer or a list of two, got %d entries", what, kv->val.n);
    return hint(b, "write %s=3 or %s=[3, 1] (height, width)", kv->key.s, kv->key.s);
  }
  for (int i = 0; i < 2; i++) {
    pcgc_status rc = eval_int(b, s, kv->val.items[i], what, &out[i]);
    if (rc) return rc;
  }
  return PCGC_OK;
}

static pcgc_status set_create_arg(builder *b, scope *s, const pcgc__kv *kv, const char *op, create_args *ca) {
  char what[96];
  snprintf(what, sizeof what, "'%s' of %s", kv->key.s, op);
  const char *k = kv->key.s;
  if (strcmp(k, "out") == 0) return ca->has_out = true, value_positive(b, s, kv, what, &ca->out);
  if (strcmp(k, "num") == 0) return ca->has_num = true, value_positive(b, s, kv, what, &ca->num);
  if (strcmp(k, "dim") == 0) return ca->has_dim = true, value_positive(b, s, kv, what, &ca->dim);
  if (strcmp(k, "embed") == 0) return ca->has_embed = true, value_positive(b, s, kv, what, &ca->embed);
  if (strcmp(k, "kv_heads") == 0) return ca->has_kv = true, value_positive(b, s, kv, what, &ca->kv);
  if (strcmp(k, "bias") == 0) return value_bool(b, kv, what, &ca->bias);
  if (strcmp(k, "affine") == 0) return value_bool(b, kv, what, &ca->affine);
  /* kernel */
  ca->has_kernel = true;
  pcgc_status rc = value_ints2(b, s, kv, what, ca->kernel);
  if (rc == PCGC_OK && (ca->kernel[0] < 1 || ca->kernel[1] < 1)) {
    FAIL(b, kv->val.sp, PCGC_ERR_INVALID, "%s must be positive", what);
    return hint(b, "kernel sizes are at least 1");
  }
  return rc;
}

/* The last dim of a data input, for weight shapes. */
static pcgc_status last_dim(builder *b, const pcgc__stmt *st, const pcgc_ptensor *t, const char *what,
                            int64_t *out) {
  if (t->rank >= 1) {
    *out = t->dims[t->rank - 1];
    return PCGC_OK;
  }
  FAIL(b, st->callee.sp, PCGC_ERR_TYPE, "%s '%s': %s is a scalar, so there is no feature dim to size the "
       "weights by", st->callee.s, st->lhs[0].s, what);
  return hint(b, "pass a tensor with at least one dim");
}

/* Creates the weights of layer `base` and appends them to its inputs. */
static pcgc_status create_weights(builder *b, const pcgc__stmt *st, pcgc_op_kind op, const pcgc_attrs *a,
                                  const create_args *ca, const char *base, pcgc_ref *args, int *n_in) {
  const pcgc_ptensor *x = pcgc_graph_ref_type(b->g, args[0]);
  if (!x) return FAIL(b, st->callee.sp, PCGC_ERR_GRAPH, "internal error: input of '%s' has no type", base);
  pcgc_dtype dt = pcgc_dtype_is_float(x->dtype) ? x->dtype : PCGC_F32;
  pcgc__span at = st->callee.sp;
  pcgc_status rc = PCGC_OK;
  int n = *n_in;
#define W(suffix, rank, dims, init, scale) \
  do { if ((rc = make_weight(b, base, suffix, dt, rank, dims, init, scale, at, &args[n]))) return rc; n++; } while (0)
  switch (op) {
  case PCGC_OP_LINEAR: {
    int64_t k = 0;
    if ((rc = last_dim(b, st, x, "the input", &k))) return rc;
    double bound = 1.0 / sqrt((double)k);
    W("weight", 2, ((int64_t[]){k, ca->out}), PCGC_INIT_UNIFORM, bound);
    if (ca->bias) W("bias", 1, ((int64_t[]){ca->out}), PCGC_INIT_UNIFORM, bound);
    break;
  }
  case PCGC_OP_CONV2D: {
    if (x->rank != 4) {
      char tb[160];
      pcgc_ptensor_format(tb, sizeof tb, x);
      FAIL(b, at, PCGC_ERR_TYPE, "conv2d '%s': the input must be [N, C, H, W], got %s", base, tb);
      return hint(b, "conv2d takes 4-dim inputs (batch, channels, height, width)");
    }
    int64_t c = x->dims[1], g = pcgc_attrs_int(a, "groups");
    if (g < 1 || c % g != 0 || ca->out % g != 0) {
      FAIL(b, at, PCGC_ERR_TYPE, "conv2d '%s': groups=%lld must divide the %lld input and %lld output channels",
           base, (long long)g, (long long)c, (long long)ca->out);
      return hint(b, "choose groups to divide both channel counts");
    }
    int64_t kh = ca->kernel[0], kw = ca->kernel[1], fan_in;
    if (__builtin_mul_overflow(c / g, kh, &fan_in) || __builtin_mul_overflow(fan_in, kw, &fan_in)) {
      FAIL(b, at, PCGC_ERR_INVALID, "conv2d '%s': the kernel is too large", base);
      return hint(b, "check kernel=");
    }
    double bound = 1.0 / sqrt((double)fan_in);
    W("weight", 4, ((int64_t[]){ca->out, c / g, kh, kw}), PCGC_INIT_UNIFORM, bound);
    if (ca->bias) W("bias", 1, ((int64_t[]){ca->out}), PCGC_INIT_UNIFORM, bound);
    break;
  }
  case PCGC_OP_BATCHNORM:
    if (!ca->affine) break;
    if (x->rank < 2) {
      FAIL(b, at, PCGC_ERR_TYPE, "batchnorm '%s': the input must be [N, C, ...], got %d dim%s", base, x->rank,
           plural(x->rank));
      return hint(b, "batchnorm normalises each channel (dim 1) over the batch");
    }
    W("scale", 1, &x->dims[1], PCGC_INIT_ONES, 0);
    W("bias", 1, &x->dims[1], PCGC_INIT_ZEROS, 0);
    break;
  case PCGC_OP_LAYERNORM:
  case PCGC_OP_RMSNORM: {
    if (!ca->affine) break;
    int64_t axes = pcgc_attrs_int(a, "axes");
    if (axes < 1 || axes > x->rank) {
      FAIL(b, at, PCGC_ERR_TYPE, "%s '%s': axes=%lld, but the input has %d dim%s", pcgc_op_name(op), base,
           (long long)axes, x->rank, plural(x->rank));
      return hint(b, "axes counts the trailing dims to normalise over: 1 to the input's rank");
    }
    const int64_t *d = &x->dims[x->rank - axes];
    W("scale", (int)axes, d, PCGC_INIT_ONES, 0);
    if (op == PCGC_OP_LAYERNORM) W("bias", (int)axes, d, PCGC_INIT_ZEROS, 0); /* RMSNorm has no bias */
    break;
  }
  case PCGC_OP_EMBEDDING:
    W("weight", 2, ((int64_t[]){ca->num, ca->dim}), PCGC_INIT_NORMAL, 1.0);
    break;
  case PCGC_OP_EXPERT_LINEAR: { /* each expert as a linear layer of its own */
    if (x->rank != 4) {
      char tb[160];
      pcgc_ptensor_format(tb, sizeof tb, x);
      FAIL(b, at, PCGC_ERR_TYPE, "expert_linear '%s': the input must be [G, X, C, M], got %s", base, tb);
      return hint(b, "expert_linear takes moe_dispatch's output: groups, experts, slots, features");
    }
    double bound = 1.0 / sqrt((double)x->dims[3]);
    W("weight", 3, ((int64_t[]){x->dims[1], x->dims[3], ca->out}), PCGC_INIT_UNIFORM, bound);
    if (ca->bias) W("bias", 2, ((int64_t[]){x->dims[1], ca->out}), PCGC_INIT_UNIFORM, bound);
    break;
  }
  case PCGC_OP_ATTENTION: {
    int64_t eq = 0, ek = 0, ev = 0;
    const pcgc_ptensor *k = pcgc_graph_ref_type(b->g, args[1]), *v = pcgc_graph_ref_type(b->g, args[2]);
    if (!k || !v) return FAIL(b, at, PCGC_ERR_GRAPH, "internal error: input of '%s' has no type", base);
    if ((rc = last_dim(b, st, x, "q", &eq)) || (rc = last_dim(b, st, k, "k", &ek)) ||
        (rc = last_dim(b, st, v, "v", &ev)))
      return rc;
    int64_t e = ca->has_embed ? ca->embed : eq, f = e, heads = pcgc_attrs_int(a, "heads");
    if (ca->has_kv) { /* grouped-query attention: k and v project to kv_heads heads of e / heads */
      if (heads < 1 || e % heads || heads % ca->kv) {
        FAIL(b, at, PCGC_ERR_TYPE, "attention '%s': kv_heads=%lld must divide heads=%lld, and heads the "
             "projection size %lld", base, (long long)ca->kv, (long long)heads, (long long)e);
        return hint(b, "grouped-query attention shares each key/value head among heads / kv_heads query heads: "
                    "choose kv_heads dividing heads");
      }
      f = e / heads * ca->kv;
    }
    /* Xavier uniform per projection: sqrt(6 / (fan_in + fan_out)) */
#define XAVIER(fi, fo) sqrt(6.0 / ((double)(fi) + (double)(fo)))
    W("wq", 2, ((int64_t[]){eq, e}), PCGC_INIT_UNIFORM, XAVIER(eq, e));
    W("wk", 2, ((int64_t[]){ek, f}), PCGC_INIT_UNIFORM, XAVIER(ek, f));
    W("wv", 2, ((int64_t[]){ev, f}), PCGC_INIT_UNIFORM, XAVIER(ev, f));
    W("wo", 2, ((int64_t[]){e, e}), PCGC_INIT_UNIFORM, XAVIER(e, e));
#undef XAVIER
    if (ca->bias) {
      W("bq", 1, &e, PCGC_INIT_ZEROS, 0);
      W("bk", 1, &f, PCGC_INIT_ZEROS, 0);
      W("bv", 1, &f, PCGC_INIT_ZEROS, 0);
      W("bo", 1, &e, PCGC_INIT_ZEROS, 0);
    }
    break;
  }
  default: break;
  }
#undef W
  *n_in = n;
  return PCGC_OK;
}

/* ------------------------------------------------------------- attributes */

static void enum_list(pcgc_enum_type e, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = '\0';
  for (int i = 0; pcgc_enum_value_name(e, i) && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", pcgc_enum_value_name(e, i));
}

/* Converts a key=value to the schema type of attribute `idx` and sets it. */
static pcgc_status set_attr(builder *b, scope *s, pcgc_attrs *a, int idx, const pcgc__kv *kv) {
  const pcgc_attr_desc *d = pcgc_op_attr(a->kind, idx);
  const char *op = pcgc_op_name(a->kind);
  char what[96];
  snprintf(what, sizeof what, "attribute '%s' of %s", d->name, op);
  pcgc_status rc = PCGC_OK;
  int64_t iv[PCGC_MAX_INTS];
  switch (d->type) {
  case PCGC_ATTR_INT:
    if ((rc = value_int(b, s, kv, what, &iv[0]))) return rc;
    rc = pcgc_attrs_set_int(a, d->name, iv[0]);
    break;
  case PCGC_ATTR_FLOAT: {
    if ((rc = need_scalar(b, kv, what, "a number"))) return rc;
    const pcgc__expr *e = kv->val.e;
    if (e->kind == PCGC__EX_NAME && !scope_find(b, s, e->name) && !(s->top && scope_find(b, s->top, e->name))) {
      FAIL(b, e->sp, PCGC_ERR_INVALID, "%s must be a number, got '%s'", what, e->name);
      return hint(b, "write a number or an expression: %s=0.1", d->name);
    }
    num v;
    if ((rc = eval(b, s, e, &v))) return rc;
    rc = pcgc_attrs_set_float(a, d->name, num_f(v));
    break;
  }
  case PCGC_ATTR_BOOL: {
    bool v = false;
    if ((rc = value_bool(b, kv, what, &v))) return rc;
    rc = pcgc_attrs_set_int(a, d->name, v);
    break;
  }
  case PCGC_ATTR_INTS:
    if (kv->val.e) {
      FAIL(b, kv->val.sp, PCGC_ERR_INVALID, "%s must be a list such as [0, 1]", what);
      return hint(b, "write %s=[...], even for one entry", d->name);
    }
    if (kv->val.n > PCGC_MAX_INTS) {
      FAIL(b, kv->val.sp, PCGC_ERR_INVALID, "%s has %d entries; at most %d are allowed", what, kv->val.n,
           PCGC_MAX_INTS);
      return hint(b, "tensors have at most %d dims", PCGC_MAX_RANK);
    }
    for (int i = 0; i < kv->val.n; i++)
      if ((rc = eval_int(b, s, kv->val.items[i], what, &iv[i]))) return rc;
    rc = pcgc_attrs_set_ints(a, d->name, kv->val.n, iv);
    break;
  case PCGC_ATTR_INTS2:
    if ((rc = value_ints2(b, s, kv, what, iv))) return rc;
    rc = pcgc_attrs_set_ints(a, d->name, 2, iv);
    break;
  case PCGC_ATTR_ENUM: {
    char values[200];
    enum_list(d->enum_type, values, sizeof values);
    const pcgc__expr *e = kv->val.e;
    if (!e || e->kind != PCGC__EX_NAME) {
      FAIL(b, kv->val.sp, PCGC_ERR_INVALID, "%s must be one of: %s", what, values);
      return hint(b, "write the name without quotes: %s=%s", d->name,
                  pcgc_enum_value_name(d->enum_type, d->required ? 0 : d->def_i));
    }
    int v = pcgc_enum_value_from_name(d->enum_type, e->name);
    if (v < 0) {
      FAIL(b, e->sp, PCGC_ERR_INVALID, "unknown %s '%s' for %s", pcgc_enum_type_name(d->enum_type), e->name, what);
      pcgc__suggest sg;
      pcgc__suggest_init(&sg, e->name);
      for (int i = 0; pcgc_enum_value_name(d->enum_type, i); i++)
        pcgc__suggest_add(&sg, pcgc_enum_value_name(d->enum_type, i));
      if (pcgc__suggest_best(&sg)) return hint(b, "did you mean '%s'? choices: %s", pcgc__suggest_best(&sg), values);
      return hint(b, "choices: %s", values);
    }
    rc = pcgc_attrs_set_int(a, d->name, v);
    break;
  }
  }
  if (rc) {
    FAIL(b, kv->val.sp, PCGC_ERR_INVALID, "cannot set %s", what);
    return hint(b, "check the value's type");
  }
  return PCGC_OK;
}

static pcgc_status unknown_attr(builder *b, pcgc_op_kind op, const creator *cr, const pcgc__ident *key) {
  const char *name = pcgc_op_name(op);
  FAIL(b, key->sp, PCGC_ERR_PARSE, "%s has no attribute '%s'", name, key->s);
  pcgc__suggest sg;
  pcgc__suggest_init(&sg, key->s);
  char list[300] = "";
  size_t k = 0;
  for (int i = 0; i < pcgc_op_num_attrs(op); i++) {
    pcgc__suggest_add(&sg, pcgc_op_attr(op, i)->name);
    k += (size_t)snprintf(list + k, k < sizeof list ? sizeof list - k : 0, "%s%s", k ? ", " : "",
                          pcgc_op_attr(op, i)->name);
  }
  for (int i = 0; cr && i < 3 && cr->keys[i]; i++) {
    pcgc__suggest_add(&sg, cr->keys[i]);
    if (k < sizeof list)
      k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", k ? ", " : "", cr->keys[i]);
  }
  if (pcgc__suggest_best(&sg)) return hint(b, "did you mean '%s'?", pcgc__suggest_best(&sg));
  if (!list[0]) return hint(b, "%s takes no attributes", name);
  return hint(b, "%s's attributes: %s", name, list);
}

static void arity_text(int lo, int hi, char *buf, size_t n) {
  if (lo == hi) snprintf(buf, n, "%d tensor%s", lo, plural(lo));
  else if (hi >= PCGC_VARIADIC) snprintf(buf, n, "at least %d tensor%s", lo, plural(lo));
  else snprintf(buf, n, "%d to %d tensors", lo, hi);
}

/* --------------------------------------------------------------- layers */

static pcgc_status exec_stmt(builder *b, scope *s, const pcgc__stmt *st);

static pcgc_status count_work(builder *b, pcgc__span sp) {
  if (++b->work <= PCGC__MODEL_MAX_WORK) return PCGC_OK;
  FAIL(b, sp, PCGC_ERR_INVALID, "the model is too large: more than %d statements to run", PCGC__MODEL_MAX_WORK);
  return hint(b, "check the repeat counts and how often blocks call blocks");
}

/* After the first of `reps` instances, refuses a repeat whose projected
 * size exceeds the limits. */
static pcgc_status check_projection(builder *b, const pcgc__stmt *st, int64_t reps, int64_t nodes0,
                                    int64_t tensors0, int64_t work0) {
  int64_t per_nodes = b->g->n_nodes - nodes0, per_work = b->work - work0, per_tensors = b->tensors - tensors0;
  if (nodes0 + per_nodes * reps > PCGC__MODEL_MAX_NODES) {
    FAIL(b, st->repeat->sp, PCGC_ERR_INVALID, "repeat(%lld) would make the model about %lld nodes; at most %d "
         "are allowed", (long long)reps, (long long)(nodes0 + per_nodes * reps), PCGC__MODEL_MAX_NODES);
    return hint(b, "lower the repeat count");
  }
  if (tensors0 + per_tensors * reps > PCGC__MODEL_MAX_TENSORS) {
    FAIL(b, st->repeat->sp, PCGC_ERR_INVALID, "repeat(%lld) would make the model about %lld tensors; at most %d "
         "are allowed", (long long)reps, (long long)(tensors0 + per_tensors * reps), PCGC__MODEL_MAX_TENSORS);
    return hint(b, "lower the repeat count");
  }
  if (work0 + per_work * reps > PCGC__MODEL_MAX_WORK) {
    FAIL(b, st->repeat->sp, PCGC_ERR_INVALID, "repeat(%lld) would run about %lld statements; at most %d are "
         "allowed", (long long)reps, (long long)(work0 + per_work * reps), PCGC__MODEL_MAX_WORK);
    return hint(b, "lower the repeat count");
  }
  return PCGC_OK;
}

static pcgc__span lhs_span(const pcgc__stmt *st) {
  pcgc__span sp = st->lhs[0].sp;
  const pcgc__span *last = &st->lhs[st->n_lhs - 1].sp;
  sp.len = last->off + last->len - sp.off;
  return sp;
}

/* Applies operator `op` (possibly repeated) and binds its outputs. */
static pcgc_status exec_op(builder *b, scope *s, const pcgc__stmt *st, pcgc_op_kind op, int64_t reps,
                           const pcgc_ref *in) {
  const char *opname = pcgc_op_name(op);
  const creator *cr = find_creator(op);
  bool creating = cr && st->n_pos == cr->n_data;
  pcgc_attrs a;
  pcgc_attrs_init(&a, op);
  create_args ca = {.bias = true, .affine = true};
  pcgc_status rc;
  for (int i = 0; i < st->n_kv; i++) {
    const pcgc__kv *kv = &st->kv[i];
    int idx = pcgc_op_attr_index(op, kv->key.s);
    if (idx >= 0) {
      rc = set_attr(b, s, &a, idx, kv);
    } else if (is_create_key(cr, kv->key.s)) {
      if (!creating) {
        FAIL(b, kv->key.sp, PCGC_ERR_PARSE, "'%s' creates the weights of %s, but they were given as tensors",
             kv->key.s, opname);
        return hint(b, "pass only the data input%s with %s=..., or every weight and no %s=", plural(cr->n_data),
                    kv->key.s, kv->key.s);
      }
      rc = set_create_arg(b, s, kv, opname, &ca);
    } else {
      rc = unknown_attr(b, op, cr, &kv->key);
    }
    if (rc) return rc;
  }
  for (int i = 0; i < pcgc_op_num_attrs(op); i++) {
    const pcgc_attr_desc *d = pcgc_op_attr(op, i);
    if (!d->required || a.set[i]) continue;
    FAIL(b, st->callee.sp, PCGC_ERR_PARSE, "%s needs attribute '%s'", opname, d->name);
    if (d->type == PCGC_ATTR_ENUM) {
      char values[200];
      enum_list(d->enum_type, values, sizeof values);
      return hint(b, "add %s=..., one of: %s", d->name, values);
    }
    return hint(b, "add %s=%s", d->name,
                d->type == PCGC_ATTR_INTS ? "[...]" : d->type == PCGC_ATTR_FLOAT ? "0.5" : "N");
  }
  if ((rc = pcgc_attrs_check(&a, b->src.err))) {
    char msg[sizeof b->src.err->message];
    memcpy(msg, b->src.err->message, sizeof msg);
    FAIL(b, st->callee.sp, rc, "%s", msg);
    return hint(b, "check the attribute values");
  }
  if (creating) {
    const char *missing = NULL;
    if ((op == PCGC_OP_LINEAR || op == PCGC_OP_CONV2D || op == PCGC_OP_EXPERT_LINEAR) && !ca.has_out) missing = "out";
    else if (op == PCGC_OP_CONV2D && !ca.has_kernel) missing = "kernel";
    else if (op == PCGC_OP_EMBEDDING && !ca.has_num) missing = "num";
    else if (op == PCGC_OP_EMBEDDING && !ca.has_dim) missing = "dim";
    if (missing) {
      FAIL(b, st->callee.sp, PCGC_ERR_PARSE, "%s needs %s= to create its weights", opname, missing);
      return hint(b, "add %s=N, or pass the weight tensors after the data input%s", missing, plural(cr->n_data));
    }
  } else if (st->n_pos < pcgc_op_min_inputs(op) || st->n_pos > pcgc_op_max_inputs(op)) {
    char ar[64];
    arity_text(pcgc_op_min_inputs(op), pcgc_op_max_inputs(op), ar, sizeof ar);
    FAIL(b, st->callee.sp, PCGC_ERR_PARSE, "%s takes %s, got %d", opname, ar, st->n_pos);
    if (cr) return hint(b, "or only its data input%s and the keys that create its weights", plural(cr->n_data));
    return hint(b, "check the operator's inputs in docs/model-format.md");
  }
  int n_out = pcgc_op_num_outputs(op, &a);
  if (n_out != st->n_lhs) {
    FAIL(b, lhs_span(st), PCGC_ERR_PARSE, "%s gives %d output%s, but %d name%s %s on the left of '='", opname,
         n_out, plural(n_out), st->n_lhs, plural(st->n_lhs), st->n_lhs == 1 ? "is" : "are");
    return hint(b, "give %d name%s on the left, one per output", n_out, plural(n_out));
  }
  if (st->repeat && n_out > st->n_pos) {
    FAIL(b, st->repeat->sp, PCGC_ERR_PARSE, "repeat cannot chain %s: it gives %d outputs but takes %d tensor%s",
         opname, n_out, st->n_pos, plural(st->n_pos));
    return hint(b, "each instance's outputs feed the next instance's first tensor arguments");
  }
  pcgc_ref cur[PCGC_VARIADIC];
  memcpy(cur, in, (size_t)st->n_pos * sizeof *in);
  int64_t nodes0 = b->g->n_nodes, tensors0 = b->tensors, work0 = b->work;
  int id = -1;
  for (int64_t r = 0; r < reps; r++) {
    if (r > 0 && (rc = count_work(b, st->sp))) return rc;
    int64_t index = st->repeat ? r : -1;
    name_buf base;
    if ((rc = full_name(b, s, st->lhs[0].s, index, st->lhs[0].sp, base))) return rc;
    for (int k = 0; k < n_out; k++) {
      name_buf out;
      if ((rc = full_name(b, s, st->lhs[k].s, index, st->lhs[k].sp, out)) ||
          (rc = check_new_full(b, out, st->lhs[k].sp)))
        return rc;
    }
    pcgc_ref args[PCGC_VARIADIC];
    int n_in = st->n_pos;
    memcpy(args, cur, (size_t)n_in * sizeof *args);
    if (creating && (rc = create_weights(b, st, op, &a, &ca, base, args, &n_in))) return rc;
    if ((rc = add_node(b, op, base, &a, n_in, args, st->callee.sp, &id))) return rc;
    for (int k = 1; k < n_out; k++) {
      name_buf out;
      if ((rc = full_name(b, s, st->lhs[k].s, index, st->lhs[k].sp, out))) return rc;
      if (pcgc_graph_set_output_name(b->g, id, k, out) != PCGC_OK) return nomem(b);
    }
    if ((rc = infer(b, id, st->callee.sp)) || (rc = register_outputs(b, id, st->lhs[0].sp))) return rc;
    for (int k = 0; k < n_out; k++) cur[k] = (pcgc_ref){id, k};
    if (r == 0 && reps > 1 && (rc = check_projection(b, st, reps, nodes0, tensors0, work0))) return rc;
  }
  for (int k = 0; k < n_out; k++)
    if ((rc = bind_tensor(b, s, &st->lhs[k], (pcgc_ref){id, k}))) return rc;
  return PCGC_OK;
}

/* Adds " (in 'h.3', an instance of block 'enc' called at line 20)" to the
 * message of an error raised inside a block instance, once. */
static void note_instance(builder *b, const char *inst, const pcgc__stmt *blk, const pcgc__stmt *call) {
  pcgc_error *err = b->src.err;
  if (b->noted || err->status == PCGC_ERR_NOMEM) return;
  b->noted = true;
  char msg[sizeof err->message];
  snprintf(msg, sizeof msg, "%.700s (in '%.120s', an instance of block '%.60s' called at line %d)", err->message,
           inst, blk->name.s, call->sp.line);
  memcpy(err->message, msg, sizeof msg);
}

static pcgc_status resolve_tensor(builder *b, scope *s, const pcgc__ident *id, pcgc_ref *out);

/* Runs one instance of block `blk` named `inst`. */
static pcgc_status instantiate(builder *b, scope *caller, const pcgc__stmt *call, const pcgc__stmt *blk,
                               const char *inst, const pcgc_ref *targs, const num *vals, const bool *given,
                               pcgc_ref *rets) {
  scope bs = {.prefix = inst, .top = caller->top ? caller->top : caller, .block = blk};
  pcgc_status rc = count_work(b, call->sp);
  int ti = 0;
  b->nesting++;
  for (int i = 0; rc == PCGC_OK && i < blk->n_params; i++) {
    const pcgc__param *p = &blk->params[i];
    num v = {0};
    if (p->kind != PCGC__P_TENSOR && !given[i]) {
      if ((rc = eval(b, &bs, p->def, &v))) break;
      if (p->kind == PCGC__P_INT && v.is_float) {
        rc = FAIL(b, p->def->sp, PCGC_ERR_INVALID, "the default of int parameter '%s' is %g, not an integer",
                  p->name.s, v.f);
        hint(b, "declare it 'float %s' or make the default an integer", p->name.s);
        break;
      }
    } else if (p->kind != PCGC__P_TENSOR) {
      v = vals[i];
    }
    if (p->kind == PCGC__P_FLOAT && !v.is_float) v = (num){true, 0, (double)v.i};
    sym *y;
    if ((rc = sym_add(b, &bs, p->name.s, p->kind == PCGC__P_TENSOR ? SYM_TENSOR : SYM_NUM, p->name.sp, &y)))
      break;
    if (p->kind == PCGC__P_TENSOR) y->ref = targs[ti++];
    else y->val = v;
  }
  for (int i = 0; rc == PCGC_OK && i < blk->n_body - 1; i++) rc = exec_stmt(b, &bs, blk->body[i]);
  const pcgc__stmt *ret = blk->body[blk->n_body - 1];
  for (int k = 0; rc == PCGC_OK && k < ret->n_ret; k++) rc = resolve_tensor(b, &bs, &ret->ret[k], &rets[k]);
  b->nesting--;
  syms_free(&bs.syms);
  if (rc) note_instance(b, inst, blk, call);
  return rc;
}

/* Calls block `blk` (possibly repeated) and binds its results. */
static pcgc_status exec_call(builder *b, scope *s, const pcgc__stmt *st, const pcgc__stmt *blk, int64_t reps,
                             const pcgc_ref *in) {
  int n_tensor = 0;
  char tnames[200] = "";
  for (int i = 0; i < blk->n_params; i++)
    if (blk->params[i].kind == PCGC__P_TENSOR) {
      size_t k = strlen(tnames);
      if (k < sizeof tnames)
        snprintf(tnames + k, sizeof tnames - k, "%s%s", n_tensor ? ", " : "", blk->params[i].name.s);
      n_tensor++;
    }
  if (st->n_pos != n_tensor) {
    FAIL(b, st->callee.sp, PCGC_ERR_PARSE, "block '%s' takes %d tensor argument%s, got %d", blk->name.s, n_tensor,
         plural(n_tensor), st->n_pos);
    if (n_tensor == 0) return hint(b, "it takes no tensors; its int and float parameters are passed as key=value");
    return hint(b, "its tensor parameters: %s (defined at line %d)", tnames, blk->sp.line);
  }
  num vals[PCGC__MODEL_MAX_PARAMS];
  bool given[PCGC__MODEL_MAX_PARAMS] = {false};
  pcgc_status rc;
  for (int i = 0; i < st->n_kv; i++) {
    const pcgc__kv *kv = &st->kv[i];
    int p = -1;
    for (int j = 0; j < blk->n_params; j++)
      if (strcmp(blk->params[j].name.s, kv->key.s) == 0) p = j;
    if (p < 0) {
      FAIL(b, kv->key.sp, PCGC_ERR_PARSE, "block '%s' has no parameter '%s'", blk->name.s, kv->key.s);
      pcgc__suggest sg;
      pcgc__suggest_init(&sg, kv->key.s);
      for (int j = 0; j < blk->n_params; j++)
        if (blk->params[j].kind != PCGC__P_TENSOR) pcgc__suggest_add(&sg, blk->params[j].name.s);
      if (pcgc__suggest_best(&sg)) return hint(b, "did you mean '%s'?", pcgc__suggest_best(&sg));
      return hint(b, "block '%s' is defined at line %d", blk->name.s, blk->sp.line);
    }
    const pcgc__param *pa = &blk->params[p];
    if (pa->kind == PCGC__P_TENSOR) {
      FAIL(b, kv->key.sp, PCGC_ERR_PARSE, "tensor parameter '%s' is passed by position, not as key=value",
           kv->key.s);
      return hint(b, "pass tensors first, in the order of the block's tensor parameters: %s", tnames);
    }
    if (!kv->val.e) {
      FAIL(b, kv->val.sp, PCGC_ERR_INVALID, "parameter '%s' of block '%s' takes a number, not a list", kv->key.s,
           blk->name.s);
      return hint(b, "write %s=VALUE", kv->key.s);
    }
    char what[128];
    snprintf(what, sizeof what, "parameter '%s' of block '%s'", kv->key.s, blk->name.s);
    if ((rc = eval(b, s, kv->val.e, &vals[p]))) return rc;
    if (pa->kind == PCGC__P_INT && vals[p].is_float) {
      FAIL(b, kv->val.sp, PCGC_ERR_INVALID, "%s is an int, got %g", what, vals[p].f);
      return hint(b, "pass an integer, or declare the parameter 'float %s'", kv->key.s);
    }
    given[p] = true;
  }
  for (int i = 0; i < blk->n_params; i++) {
    const pcgc__param *pa = &blk->params[i];
    if (pa->kind == PCGC__P_TENSOR || given[i] || pa->def) continue;
    FAIL(b, st->callee.sp, PCGC_ERR_PARSE, "block '%s' needs parameter '%s'", blk->name.s, pa->name.s);
    return hint(b, "add %s=... to the call", pa->name.s);
  }
  const pcgc__stmt *ret = blk->body[blk->n_body - 1];
  int n_ret = ret->n_ret;
  if (st->repeat && n_ret > n_tensor) {
    FAIL(b, st->repeat->sp, PCGC_ERR_PARSE, "repeat cannot chain block '%s': it returns %d tensor%s but takes %d "
         "tensor parameter%s", blk->name.s, n_ret, plural(n_ret), n_tensor, plural(n_tensor));
    return hint(b, "each instance's results feed the next instance's first tensor parameters, so a repeated "
                   "block returns at most as many tensors as it takes");
  }
  if (st->n_lhs != n_ret) {
    FAIL(b, lhs_span(st), PCGC_ERR_PARSE, "block '%s' returns %d tensor%s, but %d name%s %s on the left of '='",
         blk->name.s, n_ret, plural(n_ret), st->n_lhs, plural(st->n_lhs), st->n_lhs == 1 ? "is" : "are");
    return hint(b, "its return statement is at line %d", ret->sp.line);
  }
  if (b->nesting >= PCGC__MODEL_MAX_NESTING) {
    FAIL(b, st->callee.sp, PCGC_ERR_INVALID, "blocks are nested too deeply (more than %d instances inside each "
         "other)", PCGC__MODEL_MAX_NESTING);
    return hint(b, "flatten the chain of blocks calling blocks");
  }
  pcgc_ref cur[PCGC__MODEL_MAX_ARGS], rets[PCGC__MODEL_MAX_ARGS];
  memcpy(cur, in, (size_t)st->n_pos * sizeof *in);
  int64_t nodes0 = b->g->n_nodes, tensors0 = b->tensors, work0 = b->work;
  for (int64_t r = 0; r < reps; r++) {
    name_buf inst;
    if ((rc = full_name(b, s, st->lhs[0].s, st->repeat ? r : -1, st->lhs[0].sp, inst))) return rc;
    if ((rc = instantiate(b, s, st, blk, inst, cur, vals, given, rets))) return rc;
    memcpy(cur, rets, (size_t)n_ret * sizeof *rets);
    if (r == 0 && reps > 1 && (rc = check_projection(b, st, reps, nodes0, tensors0, work0))) return rc;
  }
  for (int k = 0; k < n_ret; k++)
    if ((rc = bind_tensor(b, s, &st->lhs[k], rets[k]))) return rc;
  return PCGC_OK;
}

static pcgc_status resolve_tensor(builder *b, scope *s, const pcgc__ident *id, pcgc_ref *out) {
  sym *y = scope_find(b, s, id->s);
  if (y && y->kind == SYM_TENSOR) {
    *out = y->ref;
    return PCGC_OK;
  }
  if (!y) {
    name_buf full;
    pcgc_status rc = full_name(b, s, id->s, -1, id->sp, full);
    if (rc) return rc;
    if (gname_find(b, full, out, NULL)) return PCGC_OK;
    if (s->top) y = scope_find(b, s->top, id->s);
    if (y && y->kind == SYM_TENSOR) {
      FAIL(b, id->sp, PCGC_ERR_PARSE, "unknown tensor '%s' in block '%s'", id->s, s->block->name.s);
      return hint(b, "a block sees only its parameters, its own layers and the constants; pass '%s' as a tensor "
                     "parameter", id->s);
    }
  }
  if (y) {
    FAIL(b, id->sp, PCGC_ERR_PARSE, "'%s' is a %s, not a tensor", id->s, y->kind == SYM_NUM ? "number" : "block");
    return hint(b, y->kind == SYM_NUM ? "numbers are passed as key=value attributes"
                                      : "call a block on its own line: y = block(x, ...)");
  }
  FAIL(b, id->sp, PCGC_ERR_PARSE, "unknown tensor '%s'", id->s);
  pcgc__arena arena = {0};
  const pcgc__stmt *later =
      s->block ? defined_later((const pcgc__stmt *const *)s->block->body, s->block->n_body, id->s, id->sp.off)
               : defined_later_in_file(b, id->s, id->sp.off, &arena);
  int later_line = later ? later->sp.line : 0;
  pcgc__arena_free(&arena);
  if (later_line) return hint(b, "'%s' is defined later, at line %d; define it before its use", id->s, later_line);
  pcgc__suggest sg;
  pcgc__suggest_init(&sg, id->s);
  suggest_syms(&sg, &s->syms, SYM_TENSOR);
  for (int i = 0; !s->top && i < b->g->n_nodes; i++) /* the file scope's tensors without a record */
    for (int k = 0; k < b->g->nodes[i].n_out; k++)
      if (!strchr(b->g->nodes[i].out_names[k], '.')) pcgc__suggest_add(&sg, b->g->nodes[i].out_names[k]);
  if (pcgc__suggest_best(&sg)) return hint(b, "did you mean '%s'?", pcgc__suggest_best(&sg));
  return hint(b, "tensors are inputs, weights and layers defined before this line");
}

static pcgc_status unknown_callee(builder *b, scope *s, const pcgc__ident *id, const char *in_block) {
  scope *top = s->top ? s->top : s;
  sym *y = scope_find(b, top, id->s);
  if (y && y->kind != SYM_BLOCK) {
    FAIL(b, id->sp, PCGC_ERR_PARSE, "'%s' is a %s, not an operator or block", id->s,
         y->kind == SYM_NUM ? "number" : "tensor");
    return hint(b, "an operator or block is called as op(tensors..., key=value)");
  }
  pcgc__arena arena = {0};
  const pcgc__stmt *later = defined_later_in_file(b, id->s, id->sp.off, &arena);
  if (later && later->kind == PCGC__ST_BLOCK) {
    FAIL(b, id->sp, PCGC_ERR_PARSE, "block '%s' is used before its definition", id->s);
    bool mutual = false;
    for (int i = 0; in_block && i < later->n_body && !mutual; i++)
      mutual = later->body[i]->kind == PCGC__ST_LAYER && strcmp(later->body[i]->callee.s, in_block) == 0;
    int line = later->sp.line;
    pcgc__arena_free(&arena);
    if (mutual) return hint(b, "blocks '%s' and '%s' call each other; recursion is not allowed", in_block, id->s);
    return hint(b, "define block %s (line %d) before using it", id->s, line);
  }
  pcgc__arena_free(&arena);
  FAIL(b, id->sp, PCGC_ERR_PARSE, "unknown operator '%s'", id->s);
  pcgc__suggest sg;
  pcgc__suggest_init(&sg, id->s);
  for (int i = 0; i < PCGC_OP_COUNT; i++)
    if (i != PCGC_OP_INPUT && i != PCGC_OP_WEIGHT) pcgc__suggest_add(&sg, pcgc_op_name((pcgc_op_kind)i));
  suggest_syms(&sg, &top->syms, SYM_BLOCK);
  if (pcgc__suggest_best(&sg)) return hint(b, "did you mean '%s'?", pcgc__suggest_best(&sg));
  return hint(b, "the operators are listed in docs/model-format.md; blocks must be defined before use");
}

/* NAME... = [repeat(n)] callee(args) */
static pcgc_status exec_layer(builder *b, scope *s, const pcgc__stmt *st) {
  pcgc_status rc;
  for (int k = 0; k < st->n_lhs; k++)
    if ((rc = check_new(b, s, &st->lhs[k]))) return rc;
  scope *top = s->top ? s->top : s;
  int op = pcgc_op_from_name(st->callee.s);
  const pcgc__stmt *blk = NULL;
  if (op == PCGC_OP_INPUT || op == PCGC_OP_WEIGHT) {
    FAIL(b, st->callee.sp, PCGC_ERR_PARSE, "'%s' is not called like an operator", st->callee.s);
    return hint(b, "declare it with '%s NAME: f32[...]'", st->callee.s);
  }
  if (op < 0) {
    sym *y = scope_find(b, top, st->callee.s);
    if (!y || y->kind != SYM_BLOCK) return unknown_callee(b, s, &st->callee, NULL);
    blk = y->block;
  }
  int64_t reps = 1;
  if (st->repeat) {
    if ((rc = eval_int(b, s, st->repeat, "the repeat count", &reps))) return rc;
    if (reps < 1 || reps > PCGC__MODEL_MAX_REPEAT) {
      FAIL(b, st->repeat->sp, PCGC_ERR_INVALID, "repeat count %lld is out of range", (long long)reps);
      return hint(b, "repeat(n) needs 1 <= n <= %d", PCGC__MODEL_MAX_REPEAT);
    }
  }
  pcgc_ref in[PCGC__MODEL_MAX_ARGS];
  for (int i = 0; i < st->n_pos; i++)
    if ((rc = resolve_tensor(b, s, &st->pos[i], &in[i]))) return rc;
  return blk ? exec_call(b, s, st, blk, reps, in) : exec_op(b, s, st, (pcgc_op_kind)op, reps, in);
}

/* block NAME(...) { ... }: checks what it calls, then records it. */
static pcgc_status exec_block_def(builder *b, scope *s, const pcgc__stmt *st) {
  pcgc_status rc = check_new(b, s, &st->name);
  if (rc) return rc;
  for (int i = 0; i < st->n_body; i++) {
    const pcgc__stmt *body = st->body[i];
    if (body->kind != PCGC__ST_LAYER || pcgc_op_from_name(body->callee.s) >= 0) continue;
    if (strcmp(body->callee.s, st->name.s) == 0) {
      FAIL(b, body->callee.sp, PCGC_ERR_PARSE, "block '%s' calls itself", st->name.s);
      return hint(b, "recursion is not allowed; use repeat(n) to chain copies of a block");
    }
    sym *y = scope_find(b, s, body->callee.s);
    if (!y || y->kind != SYM_BLOCK) return unknown_callee(b, s, &body->callee, st->name.s);
  }
  sym *y;
  if ((rc = sym_add(b, s, st->name.s, SYM_BLOCK, st->name.sp, &y))) return rc;
  y->block = st;
  return PCGC_OK;
}

static pcgc_status exec_const(builder *b, scope *s, const pcgc__stmt *st) {
  pcgc_status rc = check_new(b, s, &st->name);
  num v;
  if (rc || (rc = eval(b, s, st->expr, &v))) return rc;
  const pcgc_model_options *o = b->opts;
  for (int i = 0; o && i < o->n_set; i++)
    if (strcmp(o->set_names[i], st->name.s) == 0) v = b->set_vals[i];
  sym *y;
  if ((rc = sym_add(b, s, st->name.s, SYM_NUM, st->name.sp, &y))) return rc;
  y->val = v;
  return PCGC_OK;
}

static pcgc_status exec_stmt(builder *b, scope *s, const pcgc__stmt *st) {
  pcgc_status rc = count_work(b, st->sp);
  if (rc) return rc;
  switch (st->kind) {
  case PCGC__ST_MODEL: {
    size_t n = strlen(st->name.s);
    char *name = malloc(n + 1);
    if (!name) return nomem(b);
    memcpy(name, st->name.s, n + 1);
    free(b->g->name);
    b->g->name = name;
    return PCGC_OK;
  }
  case PCGC__ST_CONST: return exec_const(b, s, st);
  case PCGC__ST_INPUT:
  case PCGC__ST_WEIGHT: return exec_source(b, s, st);
  case PCGC__ST_LAYER: return exec_layer(b, s, st);
  case PCGC__ST_BLOCK: return exec_block_def(b, s, st);
  case PCGC__ST_RETURN: return PCGC_OK; /* run by instantiate() */
  }
  return PCGC_OK;
}

/* ------------------------------------------------------------ entry point */

pcgc_status pcgc__model_build(const pcgc__src *src, const pcgc_model_options *opts, const pcgc__num *set_vals,
                              pcgc_graph **out) {
  *out = NULL;
  pcgc_graph *g = pcgc_graph_new();
  pcgc__model_reader *R = pcgc__model_reader_new(src);
  if (!g || !R) {
    pcgc_graph_free(g);
    pcgc__model_reader_free(R);
    return pcgc_error_set(src->err, PCGC_ERR_NOMEM, "out of memory");
  }
  builder b = {.src = *src, .g = g, .opts = opts, .set_vals = set_vals};
  /* node locations point at the graph's own copy of the file name */
  if (src->file) {
    size_t n = strlen(src->file) + 1;
    if (!(g->file = malloc(n))) {
      pcgc_graph_free(g);
      pcgc__model_reader_free(R);
      return pcgc_error_set(src->err, PCGC_ERR_NOMEM, "out of memory");
    }
    memcpy(g->file, src->file, n);
    b.src.file = g->file;
  }
  if (!(b.found = calloc(1, sizeof *b.found + 1))) {
    pcgc_graph_free(g);
    pcgc__model_reader_free(R);
    return pcgc_error_set(src->err, PCGC_ERR_NOMEM, "out of memory");
  }
  scope top = {.prefix = ""};
  /* each statement's tree is dropped once run, but blocks': their
   * symbols point at them */
  pcgc__arena arena = {0}, blocks = {0};
  pcgc_error *built = NULL; /* the first error of building, kept while the parse goes on */
  pcgc_status rc, brc = PCGC_OK;
  const pcgc__stmt *st;
  while ((rc = pcgc__model_reader_next(R, &arena, &blocks, &st)) == PCGC_OK && st) {
    if (brc == PCGC_OK && (brc = exec_stmt(&b, &top, st)) != PCGC_OK) {
      if ((built = malloc(sizeof *built))) *built = *src->err;
      else brc = pcgc_error_set(src->err, PCGC_ERR_NOMEM, "out of memory");
    }
    pcgc__arena_reset(&arena);
  }
  if (rc == PCGC_OK && brc != PCGC_OK) { /* no syntax error after it */
    rc = brc;
    if (built) *src->err = *built;
  }
  free(built);
  pcgc__arena_free(&arena);
  pcgc__arena_free(&blocks);
  pcgc__model_reader_free(R);
  syms_free(&top.syms);
  gnames_free(&b);
  if (rc != PCGC_OK) {
    pcgc_graph_free(g);
    return rc;
  }
  *out = g;
  return PCGC_OK;
}
