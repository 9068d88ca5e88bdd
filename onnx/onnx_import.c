/*
 * onnx_import.c — ONNX models as PCGs: the entry points and the driver.
 *
 * A model goes through four steps:
 *   1. a nesting check of the protobuf bytes (protobuf-c recurses once per
 *      nested message and has no depth limit, so bytes nesting graphs in
 *      attributes in graphs ... could exhaust the stack), then
 *      protobuf-c's own decoding;
 *   2. the value table: every tensor name with its consumers, initializers
 *      as (still undecoded) constants, Constant nodes evaluated;
 *   3. pattern matching of decomposed operators (onnx_fuse.c);
 *   4. graph inputs become input nodes, then each node in file order is
 *      either evaluated at import time (all its inputs are constants:
 *      shape arithmetic, transposed weights; onnx_fold.c) or mapped onto
 *      pcgc operators (onnx_ops.c). Each pcgc node is inferred as soon as
 *      it is added, so a shape error names the ONNX node.
 * Everything but the graph lives in one arena freed at the end.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

/* ------------------------------------------------------------------ arena */

typedef struct onnx_chunk {
  struct onnx_chunk *next;
  size_t used, cap;
  _Alignas(max_align_t) unsigned char data[];
} onnx_chunk;

#define ARENA_CHUNK ((size_t)64 << 10)

void *pcgc__onnx_alloc(onnx_arena *a, size_t n) {
  const size_t align = _Alignof(max_align_t);
  if (n > SIZE_MAX - align - sizeof(onnx_chunk)) return NULL;
  n = (n + align - 1) / align * align;
  if (n == 0) n = align;
  onnx_chunk *h = a->head;
  if (n > ARENA_CHUNK / 4) { /* big blocks get a chunk of their own, behind the current one */
    onnx_chunk *b = calloc(1, sizeof *b + n);
    if (!b) return NULL;
    b->used = b->cap = n;
    if (h) {
      b->next = h->next;
      h->next = b;
    } else {
      a->head = b;
    }
    return b->data;
  }
  if (!h || h->cap - h->used < n) {
    onnx_chunk *c = calloc(1, sizeof *c + ARENA_CHUNK);
    if (!c) return NULL;
    c->cap = ARENA_CHUNK;
    c->next = h;
    a->head = h = c;
  }
  void *p = h->data + h->used;
  h->used += n;
  return p;
}

char *pcgc__onnx_strdup(onnx_arena *a, const char *s) {
  size_t n = strlen(s);
  char *d = pcgc__onnx_alloc(a, n + 1);
  if (d) memcpy(d, s, n + 1);
  return d;
}

void pcgc__onnx_arena_free(onnx_arena *a) {
  onnx_chunk *c = a->head;
  while (c) {
    onnx_chunk *next = c->next;
    free(c);
    c = next;
  }
  a->head = NULL;
}

/* ----------------------------------------------------------------- errors */

const char *pcgc__onnx_str(const char *s) { return s ? s : ""; }

const char *pcgc__onnx_node_name(const Onnx__NodeProto *n) {
  if (n->name && n->name[0]) return n->name;
  if (n->n_output && n->output[0] && n->output[0][0]) return n->output[0];
  return pcgc__onnx_str(n->op_type);
}

static void at_file(onnx_ctx *c) {
  pcgc_error_at(c->err, (pcgc_srcloc){c->file, 0, 0}, 0, NULL, 0);
}

pcgc_status pcgc__onnx_fail(onnx_ctx *c, pcgc_status s, const char *fmt, ...) {
  if (!c->err) return s;
  char msg[sizeof c->err->message];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (c->cur)
    pcgc_error_set(c->err, s, "node '%.200s': %s", pcgc__onnx_node_name(c->cur), msg);
  else
    pcgc_error_set(c->err, s, "%s", msg);
  at_file(c);
  return s;
}

pcgc_status pcgc__onnx_nomem(onnx_ctx *c) {
  return pcgc__onnx_fail(c, PCGC_ERR_NOMEM, "out of memory");
}

/* ------------------------------------------------------- protobuf nesting */

/* The messages of onnx.proto through which messages can nest without bound
 * (graphs in attributes, types in types), and their fields that lead there.
 * Every other field is skipped whatever its content. */
typedef enum { PB_MODEL, PB_TRAINING, PB_FUNCTION, PB_GRAPH, PB_NODE, PB_ATTR, PB_VALUEINFO,
               PB_TYPE, PB_TYPE_ELEM, PB_TYPE_MAP, PB_NONE } pb_msg;

static pb_msg pb_child(pb_msg m, uint64_t field) {
  switch (m) {
  case PB_MODEL: return field == 7 ? PB_GRAPH : field == 20 ? PB_TRAINING : field == 25 ? PB_FUNCTION : PB_NONE;
  case PB_TRAINING: return field == 1 || field == 2 ? PB_GRAPH : PB_NONE;
  case PB_FUNCTION: return field == 7 ? PB_NODE : PB_NONE;
  case PB_GRAPH: return field == 1 ? PB_NODE : field >= 11 && field <= 13 ? PB_VALUEINFO : PB_NONE;
  case PB_NODE: return field == 5 ? PB_ATTR : PB_NONE;
  case PB_ATTR: return field == 6 || field == 11 ? PB_GRAPH : field == 14 || field == 15 ? PB_TYPE : PB_NONE;
  case PB_VALUEINFO: return field == 2 ? PB_TYPE : PB_NONE;
  case PB_TYPE: return field == 4 || field == 9 ? PB_TYPE_ELEM : field == 5 ? PB_TYPE_MAP : PB_NONE;
  case PB_TYPE_ELEM: return field == 1 ? PB_TYPE : PB_NONE;   /* Sequence, Optional */
  case PB_TYPE_MAP: return field == 2 ? PB_TYPE : PB_NONE;
  case PB_NONE: break;
  }
  return PB_NONE;
}

static bool pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  uint64_t r = 0;
  for (int shift = 0; shift < 70 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    if (shift < 64) r |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = r;
      return true;
    }
  }
  return false;
}

/* False when the bytes are malformed or nest deeper than ONNX_MAX_DEPTH. */
static bool pb_nesting_ok(const uint8_t *p, const uint8_t *end, pb_msg m, int depth, bool *too_deep) {
  while (p < end) {
    uint64_t key, len;
    if (!pb_varint(&p, end, &key)) return false;
    switch (key & 7) {
    case 0:
      if (!pb_varint(&p, end, &len)) return false;
      break;
    case 1:
      if (end - p < 8) return false;
      p += 8;
      break;
    case 5:
      if (end - p < 4) return false;
      p += 4;
      break;
    case 2: {
      if (!pb_varint(&p, end, &len) || len > (uint64_t)(end - p)) return false;
      pb_msg child = pb_child(m, key >> 3);
      if (child != PB_NONE) {
        if (depth + 1 > ONNX_MAX_DEPTH) {
          *too_deep = true;
          return false;
        }
        if (!pb_nesting_ok(p, p + len, child, depth + 1, too_deep)) return false;
      }
      p += len;
      break;
    }
    default: /* groups (3, 4) are not used by onnx.proto; 6, 7 do not exist */
      return false;
    }
  }
  return true;
}

/* ------------------------------------------------------------------ names */

typedef struct onnx_name {
  const char *key;
  int next;            /* as a base name: the next suffix to try */
  UT_hash_handle hh;
} onnx_name;

static const char *const keywords[] = {"model", "const", "input", "weight", "block", "return",
                                       "repeat", "tensor", "int", "float", "true", "false"};

static bool is_word(int ch) { return isalnum(ch) || ch == '_'; }

/* The model format's spelling of `s` (docs/model-format.md, canonical form):
 * bytes other than letters, digits, '_' and '.' become '_', an empty dotted
 * part becomes '_', a leading digit gets a '_', a name longer than the
 * 256 characters the parser reads is cut to 240, a keyword gets a '_'
 * suffix. Valid names come out unchanged. `s` has at most NAME_IN bytes;
 * `buf` has room for 2 * NAME_IN + 3. */
#define NAME_IN 500
#define NAME_MAX_LEN 256
#define NAME_CUT 240
#define NAME_BUF (2 * NAME_IN + 16) /* a sanitized name and a "_N" suffix */
static void sanitize(const char *s, char *buf) {
  char *o = buf;
  bool part_start = true, first_part = true;
  for (const char *p = s; *p; p++) {
    unsigned char ch = (unsigned char)*p;
    if (ch == '.') {
      if (part_start) *o++ = '_';
      *o++ = '.';
      part_start = true;
      first_part = false;
      continue;
    }
    if (part_start && first_part && isdigit(ch)) *o++ = '_';
    *o++ = is_word(ch) ? (char)ch : '_';
    part_start = false;
  }
  if (part_start) *o++ = '_';
  *o = '\0';
  if (o - buf > NAME_MAX_LEN) {
    o = buf + NAME_CUT;
    if (o[-1] == '.') o[-1] = '_';
    *o = '\0';
  }
  for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
    if (strcmp(buf, keywords[i]) == 0) {
      *o++ = '_';
      *o = '\0';
    }
}

static onnx_name *name_entry(onnx_ctx *c, const char *s) {
  onnx_name *e = NULL;
  HASH_FIND_STR(c->names, s, e);
  return e;
}

static bool name_taken(onnx_ctx *c, const char *s) { return name_entry(c, s) || pcgc_graph_find(c->g, s) >= 0; }

static pcgc_status take_name(onnx_ctx *c, const char *s) {
  onnx_name *e = pcgc__onnx_alloc(&c->arena, sizeof *e);
  char *key = e ? pcgc__onnx_strdup(&c->arena, s) : NULL;
  if (!key) return pcgc__onnx_nomem(c);
  e->key = key;
  e->next = 2;
  HASH_ADD_KEYPTR(hh, c->names, e->key, strlen(e->key), e);
  return PCGC_OK;
}

/* A fresh pcgc name for `base` (+ `suffix`), recorded as taken. Suffixes
 * _2, _3, ... continue where the last clash of the same base stopped, so
 * many equal names cost linear time. */
static pcgc_status unique_name(onnx_ctx *c, const char *base, const char *suffix, char *out, size_t n) {
  char want[NAME_IN + 1], clean[2 * NAME_IN + 3];
  snprintf(want, sizeof want, "%.480s%s", base, suffix ? suffix : "");
  sanitize(want, clean);
  snprintf(out, n, "%s", clean);
  onnx_name *b = name_entry(c, clean);
  if (b || pcgc_graph_find(c->g, out) >= 0) {
    if (!b) {
      pcgc_status s = take_name(c, clean);
      if (s != PCGC_OK) return s;
      b = name_entry(c, clean);
    }
    do snprintf(out, n, "%s_%d", clean, b->next++);
    while (name_taken(c, out));
  }
  return take_name(c, out);
}

/* ------------------------------------------------------------------ nodes */

static pcgc_status add_node(onnx_ctx *c, pcgc_op_kind k, const char *name, const pcgc_attrs *a, int n_in,
                            const pcgc_ref *in, int *node) {
  int id = pcgc_graph_add_node(c->g, k, name, a, n_in, in);
  if (id < 0) return id == PCGC_ERR_NOMEM ? pcgc__onnx_nomem(c) : pcgc__onnx_fail(c, (pcgc_status)id,
                                                                                   "cannot add node '%s'", name);
  pcgc_error e;
  pcgc_error_clear(&e);
  pcgc_status s = pcgc_graph_infer_node(c->g, id, &e);
  if (s != PCGC_OK) {
    if (c->cur)
      pcgc__onnx_fail(c, s, "%s: %s", pcgc__onnx_str(c->cur->op_type), e.message);
    else
      pcgc__onnx_fail(c, s, "%s", e.message);
    if (c->err) snprintf(c->err->hint, sizeof c->err->hint, "%s", e.hint);
    return s;
  }
  *node = id;
  return PCGC_OK;
}

pcgc_status pcgc__onnx_emit(onnx_ctx *c, pcgc_op_kind k, const char *suffix, const pcgc_attrs *a, int n_in,
                            const pcgc_ref *in, int *node) {
  char name[NAME_BUF];
  const char *base = c->name_base ? c->name_base : pcgc__onnx_node_name(c->cur);
  pcgc_status s = unique_name(c, base, suffix, name, sizeof name);
  if (s != PCGC_OK) return s;
  s = add_node(c, k, name, a, n_in, in, node);
  if (s != PCGC_OK) return s;
  /* multi-output nodes (split): outputs keep the ONNX names when there are enough */
  const pcgc_node *nd = &c->g->nodes[*node];
  if (nd->n_out > 1 && !suffix && (size_t)nd->n_out == c->cur->n_output) {
    for (int i = 1; i < nd->n_out; i++) {
      const char *o = c->cur->output[i];
      if (!o || !o[0]) continue;
      char oname[NAME_BUF];
      if ((s = unique_name(c, o, NULL, oname, sizeof oname)) != PCGC_OK) return s;
      if (pcgc_graph_set_output_name(c->g, *node, i, oname) != PCGC_OK) return pcgc__onnx_nomem(c);
    }
  }
  return PCGC_OK;
}

const pcgc_ptensor *pcgc__onnx_type(onnx_ctx *c, pcgc_ref r) { return pcgc_graph_ref_type(c->g, r); }

/* ----------------------------------------------------------------- values */

onnx_value *pcgc__onnx_value(onnx_ctx *c, const char *name) {
  onnx_value *v = NULL;
  if (name) HASH_FIND_STR(c->values, name, v);
  return v;
}

static onnx_value *value_get(onnx_ctx *c, const char *name) {
  onnx_value *v = pcgc__onnx_value(c, name);
  if (v) return v;
  v = pcgc__onnx_alloc(&c->arena, sizeof *v);
  char *key = v ? pcgc__onnx_strdup(&c->arena, name) : NULL;
  if (!key) return NULL;
  v->name = key;
  v->weight = -1;
  v->def_node = -1;
  HASH_ADD_KEYPTR(hh, c->values, v->name, strlen(v->name), v);
  return v;
}

static pcgc_status add_user(onnx_ctx *c, onnx_value *v, int user) {
  if (v->n_users == v->cap_users) {
    int cap = v->cap_users ? 2 * v->cap_users : 2;
    int *u = pcgc__onnx_alloc(&c->arena, (size_t)cap * sizeof *u);
    if (!u) return pcgc__onnx_nomem(c);
    if (v->n_users) memcpy(u, v->users, (size_t)v->n_users * sizeof *u);
    v->users = u;
    v->cap_users = cap;
  }
  v->users[v->n_users++] = user;
  return PCGC_OK;
}

int pcgc__onnx_users(onnx_ctx *c, const char *name) {
  onnx_value *v = pcgc__onnx_value(c, name);
  return v ? v->n_users : 0;
}

pcgc_status pcgc__onnx_input(onnx_ctx *c, int i, onnx_value **out) {
  *out = NULL;
  if (i >= (int)c->cur->n_input || !c->cur->input[i] || !c->cur->input[i][0]) return PCGC_OK;
  const char *name = c->cur->input[i];
  onnx_value *v = pcgc__onnx_value(c, name);
  if (!v || v->kind == OV_UNDEFINED)
    return pcgc__onnx_fail(c, PCGC_ERR_GRAPH, "input '%.200s' is not defined before this node", name);
  if (v->kind == OV_DROPPED)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "input '%.200s' is %s, which pcgc does not support", name,
                           pcgc__onnx_str(v->producer));
  *out = v;
  return PCGC_OK;
}

static pcgc_status def(onnx_ctx *c, int i, onnx_value **out) {
  *out = NULL;
  if (i >= (int)c->cur->n_output || !c->cur->output[i] || !c->cur->output[i][0]) return PCGC_OK; /* unused */
  onnx_value *v = value_get(c, c->cur->output[i]);
  if (!v) return pcgc__onnx_nomem(c);
  if (v->kind != OV_UNDEFINED)
    return pcgc__onnx_fail(c, PCGC_ERR_GRAPH, "tensor '%.200s' is defined twice", v->name);
  v->producer = pcgc__onnx_node_name(c->cur);
  *out = v;
  return PCGC_OK;
}

pcgc_status pcgc__onnx_def_act(onnx_ctx *c, int i, pcgc_ref r) {
  onnx_value *v;
  pcgc_status s = def(c, i, &v);
  if (s == PCGC_OK && v) {
    v->kind = OV_ACT;
    v->ref = r;
  }
  return s;
}

pcgc_status pcgc__onnx_def_const(onnx_ctx *c, int i, onnx_tensor *t) {
  onnx_value *v;
  pcgc_status s = def(c, i, &v);
  if (s == PCGC_OK && v) {
    v->kind = OV_CONST;
    v->t = t;
  }
  return s;
}

pcgc_status pcgc__onnx_def_padded(onnx_ctx *c, int i, pcgc_ref r, const int64_t pad[2]) {
  onnx_value *v;
  pcgc_status s = def(c, i, &v);
  if (s == PCGC_OK && v) {
    v->kind = OV_PADDED;
    v->ref = r;
    v->pad[0] = pad[0];
    v->pad[1] = pad[1];
  }
  return s;
}

pcgc_status pcgc__onnx_drop_outputs(onnx_ctx *c, int from, const char *what) {
  for (int i = from; i < (int)c->cur->n_output; i++) {
    onnx_value *v;
    pcgc_status s = def(c, i, &v);
    if (s != PCGC_OK) return s;
    if (!v) continue;
    for (int k = 0; k < v->n_users; k++)
      if (v->users[k] >= 0)
        return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "output %d ('%.200s', %s) is used by node '%.200s', "
                               "but pcgc does not produce it", i, v->name, what,
                               pcgc__onnx_node_name(c->gp->node[v->users[k]]));
    char buf[300];
    snprintf(buf, sizeof buf, "%s of node '%.200s'", what, pcgc__onnx_node_name(c->cur));
    v->kind = OV_DROPPED;
    v->producer = pcgc__onnx_strdup(&c->arena, buf);
    if (!v->producer) return pcgc__onnx_nomem(c);
  }
  return PCGC_OK;
}

pcgc_status pcgc__onnx_const(onnx_ctx *c, onnx_value *v, onnx_tensor **out) {
  if (!v->t && v->init) {
    pcgc_status s = pcgc__onnx_decode(c, v->init, v->name, &v->t);
    if (s != PCGC_OK) return s;
    v->t->origin = v->name;
  }
  *out = v->t;
  return v->t ? PCGC_OK : pcgc__onnx_fail(c, PCGC_ERR_GRAPH, "'%.200s' has no value", v->name);
}

pcgc_status pcgc__onnx_weight(onnx_ctx *c, const onnx_tensor *t, const char *name, int rank, const int64_t *shape,
                              int *node) {
  if (!pcgc__onnx_type_is_float(t->type))
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "constant '%.200s' of type %s is used as a tensor; "
                           "only floating-point constants can become weights", name,
                           pcgc__onnx_type_name(t->type));
  if (!shape) {
    rank = t->rank;
    shape = t->dims;
  }
  if (rank > PCGC_MAX_RANK)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "constant '%.200s' has rank %d; pcgc tensors have at most %d dims",
                           name, rank, PCGC_MAX_RANK);
  pcgc_status st = pcgc__onnx_spend(c, t->numel);
  if (st != PCGC_OK) return st;
  pcgc_attrs a;
  pcgc_attrs_init(&a, PCGC_OP_WEIGHT);
  pcgc_attrs_set_ints(&a, "shape", rank, shape);
  pcgc_attrs_set_int(&a, "dtype", PCGC_F32);
  char wname[NAME_BUF];
  pcgc_status s = unique_name(c, name, NULL, wname, sizeof wname);
  if (s == PCGC_OK) s = add_node(c, PCGC_OP_WEIGHT, wname, &a, 0, NULL, node);
  if (s != PCGC_OK) return s;
  s = pcgc_graph_set_value(c->g, *node, pcgc__onnx_floats(t), t->numel);
  if (s == PCGC_ERR_NOMEM) return pcgc__onnx_nomem(c);
  if (s != PCGC_OK) return pcgc__onnx_fail(c, s, "weight '%.200s': its %lld values do not fill its shape", name,
                                           (long long)t->numel);
  return PCGC_OK;
}

pcgc_status pcgc__onnx_tensor_ref(onnx_ctx *c, onnx_value *v, int rank, const int64_t *shape, pcgc_ref *out) {
  if (v->kind == OV_ACT) {
    *out = v->ref;
    return PCGC_OK;
  }
  if (v->kind == OV_PADDED)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "'%.200s' comes from a Pad that only AveragePool and Conv "
                           "can absorb", v->name);
  onnx_tensor *t;
  pcgc_status s = pcgc__onnx_const(c, v, &t);
  if (s != PCGC_OK) return s;
  bool same = !shape || (rank == t->rank && memcmp(shape, t->dims, (size_t)rank * sizeof *shape) == 0);
  if (same && v->weight >= 0) {
    *out = (pcgc_ref){v->weight, 0};
    return PCGC_OK;
  }
  int node;
  s = pcgc__onnx_weight(c, t, t->origin ? t->origin : v->name, rank, shape, &node);
  if (s != PCGC_OK) return s;
  if (same) v->weight = node;
  *out = (pcgc_ref){node, 0};
  return PCGC_OK;
}

/* ------------------------------------------------------------------ steps */

static bool default_domain(const char *d) { return !d || !d[0] || strcmp(d, "ai.onnx") == 0; }

static pcgc_status index_values(onnx_ctx *c) {
  const Onnx__GraphProto *gp = c->gp;
  if (gp->n_node > ONNX_MAX_NODES)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "the graph has %zu nodes, more than the limit %d",
                           gp->n_node, ONNX_MAX_NODES);
  for (size_t i = 0; i < gp->n_initializer; i++) {
    const Onnx__TensorProto *tp = gp->initializer[i];
    if (!tp->name || !tp->name[0]) return pcgc__onnx_fail(c, PCGC_ERR_GRAPH, "initializer %zu has no name", i);
    onnx_value *v = value_get(c, tp->name);
    if (!v) return pcgc__onnx_nomem(c);
    if (v->kind != OV_UNDEFINED)
      return pcgc__onnx_fail(c, PCGC_ERR_GRAPH, "initializer '%.200s' is defined twice", tp->name);
    v->kind = OV_CONST;
    v->init = tp;
    v->producer = "an initializer";
  }
  for (size_t i = 0; i < gp->n_sparse_initializer; i++) {
    const Onnx__SparseTensorProto *sp = gp->sparse_initializer[i];
    const char *name = sp->values ? sp->values->name : NULL;
    if (!name || !name[0]) continue;
    onnx_value *v = value_get(c, name);
    if (!v) return pcgc__onnx_nomem(c);
    if (v->kind == OV_UNDEFINED) {
      v->kind = OV_DROPPED;
      v->producer = "a sparse initializer";
    }
  }
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *n = gp->node[i];
    for (size_t k = 0; k < n->n_output; k++) {
      if (!n->output[k] || !n->output[k][0]) continue;
      onnx_value *v = value_get(c, n->output[k]);
      if (!v) return pcgc__onnx_nomem(c);
      if (v->def_node < 0) v->def_node = (int)i;
    }
    for (size_t k = 0; k < n->n_input; k++) {
      if (!n->input[k] || !n->input[k][0]) continue;
      onnx_value *v = value_get(c, n->input[k]);
      if (!v) return pcgc__onnx_nomem(c);
      pcgc_status s = add_user(c, v, (int)i);
      if (s != PCGC_OK) return s;
    }
  }
  for (size_t i = 0; i < gp->n_output; i++) {
    const char *name = gp->output[i]->name;
    onnx_value *v = name && name[0] ? pcgc__onnx_value(c, name) : NULL;
    if (v) {
      pcgc_status s = add_user(c, v, -1);
      if (s != PCGC_OK) return s;
    }
  }
  /* Constant nodes have no inputs: evaluate them all now, so the pattern
   * matcher sees their values wherever they stand in the node list. */
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *n = gp->node[i];
    if (strcmp(pcgc__onnx_str(n->op_type), "Constant") != 0 || !default_domain(n->domain)) continue;
    c->cur = n;
    onnx_tensor *t;
    pcgc_status s = pcgc__onnx_constant_value(c, n, &t);
    if (s == PCGC_OK) s = pcgc__onnx_def_const(c, 0, t);
    if (s != PCGC_OK) return s;
    c->fused[i].kind = OF_SKIP;
  }
  c->cur = NULL;
  return PCGC_OK;
}

static pcgc_status add_inputs(onnx_ctx *c) {
  const Onnx__GraphProto *gp = c->gp;
  for (size_t i = 0; i < gp->n_input; i++) {
    const Onnx__ValueInfoProto *vi = gp->input[i];
    const char *name = pcgc__onnx_str(vi->name);
    if (!name[0]) return pcgc__onnx_fail(c, PCGC_ERR_GRAPH, "graph input %zu has no name", i);
    onnx_value *v = pcgc__onnx_value(c, name);
    if (v && v->kind == OV_CONST) continue; /* IR < 4 lists initializers as inputs too */
    if (!v && !(v = value_get(c, name))) return pcgc__onnx_nomem(c);
    if (v->kind != OV_UNDEFINED)
      return pcgc__onnx_fail(c, PCGC_ERR_GRAPH, "graph input '%.200s' is declared twice", name);
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
      return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "graph input '%.200s' is not a tensor", name);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    pcgc_dtype dt;
    switch (tt->elem_type) {
    case OT_FLOAT: dt = PCGC_F32; break;
    case OT_INT64: dt = PCGC_I64; break;
    case OT_INT32: dt = PCGC_I32; break;
    default: {
      pcgc_status s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "graph input '%.200s' has element type %s",
                                      name, pcgc__onnx_type_name(tt->elem_type));
      pcgc_error_hint(c->err, "inputs may be FLOAT (f32), INT64 (i64) or INT32 (i32)");
      return s;
    }
    }
    if (!tt->shape)
      return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "graph input '%.200s' has no shape", name);
    if (tt->shape->n_dim > PCGC_MAX_RANK)
      return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "graph input '%.200s' has %zu dims; pcgc tensors have "
                             "at most %d", name, tt->shape->n_dim, PCGC_MAX_RANK);
    int64_t dims[PCGC_MAX_RANK];
    int rank = (int)tt->shape->n_dim;
    for (int d = 0; d < rank; d++) {
      const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
      if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
        if (dim->dim_value < 1)
          return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "graph input '%.200s': dim %d has size %lld; sizes "
                                 "must be positive", name, d, (long long)dim->dim_value);
        dims[d] = dim->dim_value;
      } else {
        dims[d] = c->batch; /* dim_param (or unknown): the batch size */
      }
    }
    pcgc_attrs a;
    pcgc_attrs_init(&a, PCGC_OP_INPUT);
    pcgc_attrs_set_ints(&a, "shape", rank, dims);
    pcgc_attrs_set_int(&a, "dtype", dt);
    char pname[NAME_BUF];
    int node = -1;
    pcgc_status s = unique_name(c, name, NULL, pname, sizeof pname);
    if (s == PCGC_OK) s = add_node(c, PCGC_OP_INPUT, pname, &a, 0, NULL, &node);
    if (s != PCGC_OK) return s;
    v->kind = OV_ACT;
    v->ref = (pcgc_ref){node, 0};
    v->producer = "a graph input";
  }
  return PCGC_OK;
}

/* A Gather or Slice of a parameter (a floating constant derived from an
 * initializer) with constant indices, such as the first S rows of a
 * position embedding, or an Expand of one (ViT's class token repeated for
 * the batch): converted as a split or concat of the whole weight rather
 * than folded, so the weight keeps its name and size (the parameter count
 * matches the framework's). */
static bool param_subset(onnx_ctx *c, const Onnx__NodeProto *n) {
  if (strcmp(n->op_type, "Gather") != 0 && strcmp(n->op_type, "Slice") != 0 && strcmp(n->op_type, "Expand") != 0)
    return false;
  onnx_value *v = pcgc__onnx_value(c, n->n_input ? n->input[0] : NULL);
  onnx_tensor *t;
  if (!v || v->kind != OV_CONST || pcgc__onnx_const(c, v, &t) != PCGC_OK) return false;
  return t->origin && pcgc__onnx_type_is_float(t->type) && t->rank >= 1 && t->rank <= PCGC_MAX_RANK;
}

static pcgc_status convert_nodes(onnx_ctx *c) {
  const Onnx__GraphProto *gp = c->gp;
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *n = gp->node[i];
    c->cur = n;
    const onnx_fused *f = &c->fused[i];
    pcgc_status s = PCGC_OK;
    if (f->kind == OF_SKIP) continue;
    if (f->kind != OF_NONE) {
      s = pcgc__onnx_emit_fused(c, f);
    } else if (!default_domain(n->domain) || !n->op_type) {
      s = pcgc__onnx_unsupported(c);
    } else {
      bool all_const = n->n_input > 0 && pcgc__onnx_foldable(n->op_type);
      for (size_t k = 0; all_const && k < n->n_input; k++) {
        onnx_value *v;
        if ((s = pcgc__onnx_input(c, (int)k, &v)) != PCGC_OK) return s;
        if (v && v->kind != OV_CONST) all_const = false;
      }
      if (all_const && param_subset(c, n)) all_const = false;
      bool shape_only = strcmp(n->op_type, "Shape") == 0 || strcmp(n->op_type, "Size") == 0;
      s = all_const || shape_only ? pcgc__onnx_fold(c) : pcgc__onnx_convert(c);
    }
    if (s != PCGC_OK) return s;
  }
  c->cur = NULL;
  return PCGC_OK;
}

static pcgc_status find_opset(onnx_ctx *c, const Onnx__ModelProto *m) {
  c->opset = -1;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = m->opset_import[i];
    if (default_domain(o->domain) && o->has_version) c->opset = o->version;
  }
  if (c->opset < 1) {
    pcgc_status s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "the model imports no opset of the default "
                                    "ONNX domain");
    pcgc_error_hint(c->err, "every ONNX model lists opset_import { domain: \"\" version: N }");
    return s;
  }
  return PCGC_OK;
}

static pcgc_graph *build(onnx_ctx *c, const Onnx__ModelProto *m) {
  if (!m->graph) {
    pcgc__onnx_fail(c, PCGC_ERR_PARSE, "not a valid ONNX model (it has no graph)");
    pcgc_error_hint(c->err, "the file is empty, damaged or not an ONNX model");
    return NULL;
  }
  pcgc_status s = find_opset(c, m);
  if (s != PCGC_OK) return NULL;
  c->gp = m->graph;
  c->g = pcgc_graph_new();
  c->fused = pcgc__onnx_alloc(&c->arena, (m->graph->n_node + 1) * sizeof *c->fused);
  if (!c->g || !c->fused) {
    pcgc__onnx_nomem(c);
    pcgc_graph_free(c->g);
    return NULL;
  }
  if (m->graph->name && m->graph->name[0]) {
    char want[NAME_IN + 1], clean[2 * NAME_IN + 3];
    snprintf(want, sizeof want, "%s", m->graph->name);
    sanitize(want, clean);
    c->g->name = malloc(strlen(clean) + 1);
    if (c->g->name) memcpy(c->g->name, clean, strlen(clean) + 1);
  }
  s = index_values(c);
  if (s == PCGC_OK) s = pcgc__onnx_find_fusions(c);
  if (s == PCGC_OK) s = add_inputs(c);
  if (s == PCGC_OK) s = convert_nodes(c);
  if (s != PCGC_OK) {
    pcgc_graph_free(c->g);
    return NULL;
  }
  return c->g;
}

/* --------------------------------------------------------------- entry points */

pcgc_graph *pcgc_onnx_parse(const void *data, size_t len, const char *name, const char *dir,
                            const pcgc_onnx_options *opts, pcgc_error *err) {
  onnx_ctx c = {0};
  c.err = err;
  c.file = name ? name : "<onnx>";
  c.dir = dir;
  c.batch = opts && opts->batch > 0 ? opts->batch : 1;
  c.budget = ONNX_BUDGET_BASE;
  if (!data && len) {
    pcgc__onnx_fail(&c, PCGC_ERR_INVALID, "no data");
    return NULL;
  }
  if (len > ONNX_MAX_FILE) {
    pcgc__onnx_fail(&c, PCGC_ERR_UNSUPPORTED, "the file has %zu bytes; ONNX (protobuf) files stop at 2 GiB", len);
    pcgc_error_hint(err, "store the weights as external data");
    return NULL;
  }
  bool too_deep = false;
  const uint8_t *p = data;
  if (!pb_nesting_ok(p, p + len, PB_MODEL, 0, &too_deep)) {
    pcgc__onnx_fail(&c, PCGC_ERR_PARSE, too_deep ? "not a valid ONNX model (messages nested more than %d deep)"
                                                 : "not a valid ONNX model (protobuf decoding failed)",
                    ONNX_MAX_DEPTH);
    pcgc_error_hint(err, "the file is damaged, truncated or not an ONNX model");
    return NULL;
  }
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, p);
  if (!m) {
    pcgc__onnx_fail(&c, PCGC_ERR_PARSE, "not a valid ONNX model (protobuf decoding failed)");
    pcgc_error_hint(err, "the file is damaged, truncated or not an ONNX model");
    return NULL;
  }
  pcgc_graph *g = build(&c, m);
  HASH_CLEAR(hh, c.values);
  HASH_CLEAR(hh, c.names);
  pcgc__onnx_arena_free(&c.arena);
  onnx__model_proto__free_unpacked(m, NULL);
  return g;
}

pcgc_graph *pcgc_onnx_load(const char *path, const pcgc_onnx_options *opts, pcgc_error *err) {
  size_t len;
  char *data = pcgc_read_file(path, &len, err);
  if (!data) return NULL;
  /* external data lives beside the model */
  const char *slash = strrchr(path, '/');
  char *dir = slash ? malloc((size_t)(slash - path) + 2) : NULL;
  if (slash && !dir) {
    free(data);
    pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    return NULL;
  }
  if (dir) {
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    memcpy(dir, path, n);
    dir[n] = '\0';
  }
  pcgc_graph *g = pcgc_onnx_parse(data, len, path, dir ? dir : ".", opts, err);
  free(dir);
  free(data);
  return g;
}

bool pcgc_onnx_is_onnx_path(const char *path) {
  if (!path) return false;
  size_t n = strlen(path);
  if (n < 5) return false;
  const char *ext = path + n - 5;
  for (int i = 0; i < 5; i++)
    if (tolower((unsigned char)ext[i]) != ".onnx"[i]) return false;
  return true;
}
