/*
 * text.c — the canonical text form of a PCG (docs/model-format.md,
 * "Canonical form").
 *
 * pcgc_graph_write_text writes a graph in the model-file format so that
 * parsing the text gives a graph with the same hash, pcgc_graph_equal to the
 * original, and writing that graph again gives the same bytes:
 *
 *   # pcgc canonical form; parse with pcgc
 *   model mlp
 *
 *   input x: f32[64, 784]
 *
 *   weight h.weight: f32[784, 256] = uniform(0.03571428571428571)
 *   h = linear(x, h.weight, act=relu)
 *
 * Order: the data inputs, then every other node in topological order (ties
 * broken by node id). Since the parser numbers nodes in text order, that
 * order is itself topological with increasing ids, so a re-parsed graph
 * writes back identically. Weights are declared explicitly; every other node
 * is `out1, out2 = op(inputs..., key=value, ...)` with every attribute of the
 * op's schema in schema order. batchnorm/layernorm nodes without weight
 * inputs also get `affine=false`, because the parser would otherwise create
 * their scale and bias.
 *
 * Values: integers in decimal; floats as the shortest "%.Ng" (N = 1..17) that
 * strtod reads back to the same double, with '+' dropped from the exponent
 * and ".0" appended when the text would read as an integer; lists and ints2
 * as "[a, b]"; enums by name; bools true/false. Non-finite floats cannot be
 * written in the format and are an error.
 *
 * Names: the format spells tensor names as identifiers with dotted parts
 * (parts after the first may start with a digit) and reserves a few
 * keywords. A name that is already valid is written unchanged (the first
 * one in output order wins if two outputs share it). Any other name is
 * sanitized: each byte that is not an ASCII letter, digit or '_' becomes
 * '_', an empty part becomes "_", a leading digit gets a '_' prefix, a name
 * longer than the parser reads (256 bytes) is cut to 240, a keyword gets a
 * '_' suffix; then "_2", "_3", ... is appended until the name differs from
 * every other name written. Names do not enter the hash or
 * pcgc_graph_equal, so renaming keeps the graph equal.
 */
#include "pcg.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define HASH_NONFATAL_OOM 1
#include <uthash.h>

#include "model_internal.h" /* PCGC__MODEL_MAX_IDENT: the longest name the parser reads */

/* Sanitized names are cut to this many bytes, leaving room for "_<n>". */
#define TEXT_NAME_CUT (PCGC__MODEL_MAX_IDENT - 16)

/* ---------------------------------------------------------------- output */

/* A FILE with sticky failure: the first failing write records errno, later
 * writes are skipped, and text_finish turns it into PCGC_ERR_IO. */
typedef struct text_out {
  FILE *f;
  bool failed;
  int err_no;
} text_out;

static void out_fail(text_out *o)
{
  if (!o->failed) {
    o->failed = true;
    o->err_no = errno;
  }
}

static void out_puts(text_out *o, const char *s)
{
  if (o->failed) return;
  size_t n = strlen(s);
  if (n != 0 && fwrite(s, 1, n, o->f) != n) out_fail(o);
}

static void out_printf(text_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void out_printf(text_out *o, const char *fmt, ...)
{
  if (o->failed) return;
  va_list ap;
  va_start(ap, fmt);
  int r = vfprintf(o->f, fmt, ap);
  va_end(ap);
  if (r < 0) out_fail(o);
}

static pcgc_status out_finish(text_out *o, pcgc_error *err)
{
  if (!o->failed && (fflush(o->f) != 0 || ferror(o->f))) out_fail(o);
  if (o->failed) {
    return pcgc_error_set(err, PCGC_ERR_IO, "cannot write the canonical text: %s",
                          o->err_no ? strerror(o->err_no) : "write error");
  }
  return PCGC_OK;
}

/* ---------------------------------------------------------------- numbers */

/* Shortest "%.Ng" that reads back exactly, spelled so the model lexer reads
 * it as a float: "0.1", "1e-05", "1e20", "3.0". `x` must be finite. */
static void format_float(char *buf, size_t n, double x)
{
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, n, "%.*g", prec, x);
    if (strtod(buf, NULL) == x) break;
  }
  char *e = strchr(buf, 'e');
  if (e != NULL) {
    if (e[1] == '+') memmove(e + 1, e + 2, strlen(e + 2) + 1);
  } else if (strchr(buf, '.') == NULL) {
    size_t len = strlen(buf);
    if (len + 3 <= n) memcpy(buf + len, ".0", 3);
  }
}

/* ------------------------------------------------------------------ names */

static const char *const keywords[] = {
    "model", "const", "input", "weight", "block", "return",
    "repeat", "tensor", "int", "float", "true", "false",
};

static bool is_keyword(const char *s)
{
  for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++) {
    if (strcmp(s, keywords[i]) == 0) return true;
  }
  return false;
}

static bool is_letter(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_word(int c) { return is_letter(c) || is_digit(c) || c == '_'; }

/* A NAME of the model format that is not a keyword. */
static bool is_valid_name(const char *s)
{
  if (!is_letter((unsigned char)s[0]) && s[0] != '_') return false;
  bool part_empty = false;
  for (const char *p = s; *p != '\0'; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == '.') {
      if (part_empty) return false;
      part_empty = true;
    } else if (is_word(c)) {
      part_empty = false;
    } else {
      return false;
    }
  }
  return !part_empty && !is_keyword(s) && strlen(s) <= PCGC__MODEL_MAX_IDENT;
}

/* The sanitized spelling of `s` (see the top of the file); malloc'd. */
static char *sanitize_name(const char *s)
{
  size_t n = strlen(s);
  char *buf = malloc(2 * n + 3); /* each part may grow by one, plus keyword '_' */
  if (buf == NULL) return NULL;
  char *o = buf;
  bool part_start = true, first_part = true;
  for (const char *p = s; *p != '\0'; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == '.') {
      if (part_start) *o++ = '_';
      *o++ = '.';
      part_start = true;
      first_part = false;
      continue;
    }
    if (part_start && first_part && is_digit(c)) *o++ = '_';
    *o++ = is_word(c) ? (char)c : '_';
    part_start = false;
  }
  if (part_start) *o++ = '_';
  *o = '\0';
  if (o - buf > TEXT_NAME_CUT) {
    o = buf + TEXT_NAME_CUT;
    if (o[-1] == '.') o[-1] = '_';
    *o = '\0';
  }
  if (is_keyword(buf)) {
    *o++ = '_';
    *o = '\0';
  }
  return buf;
}

/* The set of names taken so far. */
typedef struct name_entry {
  const char *key; /* points into the names[] array of a name_map */
  UT_hash_handle hh;
} name_entry;

/* The name written for every output of every node: names[base[node] + slot]. */
typedef struct name_map {
  int *base;
  char **names;
  bool *owned; /* names[i] was allocated here (else it points into the graph) */
  int total;
  name_entry *entries, *set;
} name_map;

static void name_map_destroy(name_map *m)
{
  HASH_CLEAR(hh, m->set);
  if (m->names != NULL) {
    for (int i = 0; i < m->total; i++) {
      if (m->owned[i]) free(m->names[i]);
    }
  }
  free(m->base);
  free(m->names);
  free(m->owned);
  free(m->entries);
}

static bool name_taken(const name_map *m, const char *s)
{
  name_entry *e = NULL;
  HASH_FIND_STR(m->set, s, e);
  return e != NULL;
}

/* Adds names[i] to the set; false when out of memory. */
static bool name_take(name_map *m, int i)
{
  name_entry *e = &m->entries[i];
  e->key = m->names[i];
  unsigned before = HASH_COUNT(m->set);
  HASH_ADD_KEYPTR(hh, m->set, e->key, strlen(e->key), e);
  return HASH_COUNT(m->set) == before + 1;
}

static const char *graph_out_name(const pcgc_node *nd, int slot)
{
  if (nd->out_names != NULL && nd->out_names[slot] != NULL) return nd->out_names[slot];
  if (slot == 0 && nd->name != NULL) return nd->name;
  return "";
}

/* Picks the written name of every output, visiting nodes in `order`. */
static pcgc_status name_map_build(name_map *m, const pcgc_graph *g, const int *order,
                                  pcgc_error *err)
{
  memset(m, 0, sizeof *m);
  m->base = malloc(((size_t)g->n_nodes + 1) * sizeof *m->base);
  if (m->base == NULL) goto fail_nomem;
  m->total = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    m->base[i] = m->total;
    m->total += g->nodes[i].n_out;
  }
  m->base[g->n_nodes] = m->total;
  size_t total = (size_t)m->total + 1;
  m->names = calloc(total, sizeof *m->names);
  m->owned = calloc(total, sizeof *m->owned);
  m->entries = calloc(total, sizeof *m->entries);
  if (m->names == NULL || m->owned == NULL || m->entries == NULL) goto fail_nomem;

  /* Valid names first, so a sanitized name never takes a valid one. */
  bool *pending = calloc(total, sizeof *pending);
  if (pending == NULL) goto fail_nomem;
  for (int k = 0; k < g->n_nodes; k++) {
    const pcgc_node *nd = &g->nodes[order[k]];
    for (int s = 0; s < nd->n_out; s++) {
      int i = m->base[nd->id] + s;
      const char *name = graph_out_name(nd, s);
      if (is_valid_name(name) && !name_taken(m, name)) {
        m->names[i] = (char *)name;
        if (!name_take(m, i)) goto fail_pending;
      } else {
        pending[i] = true;
      }
    }
  }
  for (int k = 0; k < g->n_nodes; k++) {
    const pcgc_node *nd = &g->nodes[order[k]];
    for (int s = 0; s < nd->n_out; s++) {
      int i = m->base[nd->id] + s;
      if (!pending[i]) continue;
      char *base = sanitize_name(graph_out_name(nd, s));
      if (base == NULL) goto fail_pending;
      char *name = base;
      for (unsigned long suffix = 2; name_taken(m, name); suffix++) {
        if (name != base) free(name);
        size_t len = strlen(base) + 24;
        name = malloc(len);
        if (name == NULL) {
          free(base);
          goto fail_pending;
        }
        snprintf(name, len, "%s_%lu", base, suffix);
      }
      if (name != base) free(base);
      m->names[i] = name;
      m->owned[i] = true;
      if (!name_take(m, i)) goto fail_pending;
    }
  }
  free(pending);
  return PCGC_OK;

fail_pending:
  free(pending);
fail_nomem:
  name_map_destroy(m);
  memset(m, 0, sizeof *m);
  return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing the canonical text");
}

static void write_name(text_out *o, const name_map *m, int node, int slot)
{
  out_puts(o, m->names[m->base[node] + slot]);
}

/* ------------------------------------------------------------- attributes */

static pcgc_status write_float(text_out *o, const pcgc_node *nd, const char *what, double x,
                               pcgc_error *err)
{
  if (!isfinite(x)) {
    return pcgc_error_set(err, PCGC_ERR_INVALID,
                          "node '%s': %s is %g, which the model format cannot express",
                          nd->name ? nd->name : "?", what, x);
  }
  char buf[64];
  format_float(buf, sizeof buf, x);
  out_puts(o, buf);
  return PCGC_OK;
}

/* The lexer reads "-N" as minus N, and N = 2^63 does not fit an integer. */
static void write_int(text_out *o, int64_t x)
{
  if (x == INT64_MIN) {
    out_puts(o, "-9223372036854775807 - 1");
  } else {
    out_printf(o, "%" PRId64, x);
  }
}

static void write_int_list(text_out *o, pcgc_ints v)
{
  out_puts(o, "[");
  for (int j = 0; j < v.n; j++) {
    if (j) out_puts(o, ", ");
    write_int(o, v.v[j]);
  }
  out_puts(o, "]");
}

/* Writes the value of attribute i of node nd. */
static pcgc_status write_attr_value(text_out *o, const pcgc_node *nd, int i, pcgc_error *err)
{
  const pcgc_attr_desc *d = pcgc_op_attr(nd->kind, i);
  int64_t vi = pcgc_attrs_int_at(nd->attrs, i);
  switch (d->type) {
  case PCGC_ATTR_INT:
    write_int(o, vi);
    return PCGC_OK;
  case PCGC_ATTR_FLOAT:
    return write_float(o, nd, d->name, pcgc_attrs_float_at(nd->attrs, i), err);
  case PCGC_ATTR_BOOL:
    out_puts(o, vi ? "true" : "false");
    return PCGC_OK;
  case PCGC_ATTR_INTS:
  case PCGC_ATTR_INTS2: {
    pcgc_ints l = pcgc_attrs_ints_at(nd->attrs, i);
    if (l.n > PCGC_MAX_INTS) {
      return pcgc_error_set(err, PCGC_ERR_INVALID, "node '%s': attribute %s has %d entries",
                            nd->name ? nd->name : "?", d->name, l.n);
    }
    write_int_list(o, l);
    return PCGC_OK;
  }
  case PCGC_ATTR_ENUM: {
    const char *name = pcgc_enum_value_name(d->enum_type, vi);
    if (name == NULL) {
      return pcgc_error_set(err, PCGC_ERR_INVALID,
                            "node '%s': attribute %s has no %s value %" PRId64,
                            nd->name ? nd->name : "?", d->name,
                            pcgc_enum_type_name(d->enum_type), vi);
    }
    out_puts(o, name);
    return PCGC_OK;
  }
  }
  return pcgc_error_set(err, PCGC_ERR_INVALID, "node '%s': attribute %s has an unknown type",
                        nd->name ? nd->name : "?", d->name);
}

/* ------------------------------------------------------------------ nodes */

/* "f32[64, 784]" from a source node's shape and dtype attributes. */
static pcgc_status write_source_type(text_out *o, const pcgc_node *nd, pcgc_error *err)
{
  pcgc_ints shape = pcgc_attrs_ints(nd->attrs, "shape");
  int64_t dt = pcgc_attrs_int(nd->attrs, "dtype");
  if (dt < 0 || dt >= PCGC_DTYPE_COUNT) {
    return pcgc_error_set(err, PCGC_ERR_INVALID, "node '%s': unknown dtype %" PRId64,
                          nd->name ? nd->name : "?", dt);
  }
  if (shape.n > PCGC_MAX_INTS) {
    return pcgc_error_set(err, PCGC_ERR_INVALID, "node '%s': shape has %d entries",
                          nd->name ? nd->name : "?", shape.n);
  }
  out_puts(o, pcgc_dtype_name((pcgc_dtype)dt));
  write_int_list(o, shape);
  return PCGC_OK;
}

static pcgc_status write_node(text_out *o, const pcgc_graph *g, const name_map *m,
                              const pcgc_node *nd, pcgc_error *err)
{
  pcgc_status st;
  if (nd->kind == PCGC_OP_INPUT || nd->kind == PCGC_OP_WEIGHT) {
    out_puts(o, nd->kind == PCGC_OP_INPUT ? "input " : "weight ");
    write_name(o, m, nd->id, 0);
    out_puts(o, ": ");
    if ((st = write_source_type(o, nd, err)) != PCGC_OK) return st;
    if (nd->kind == PCGC_OP_WEIGHT) {
      int64_t init = pcgc_attrs_int(nd->attrs, "init");
      const char *init_name = pcgc_enum_value_name(PCGC_ENUM_INIT, init);
      if (init_name == NULL) {
        return pcgc_error_set(err, PCGC_ERR_INVALID, "weight '%s': unknown init %" PRId64,
                              nd->name ? nd->name : "?", init);
      }
      out_printf(o, " = %s", init_name);
      if (init == PCGC_INIT_UNIFORM || init == PCGC_INIT_NORMAL) {
        out_puts(o, "(");
        st = write_float(o, nd, "the init scale", pcgc_attrs_float(nd->attrs, "scale"), err);
        if (st != PCGC_OK) return st;
        out_puts(o, ")");
      }
    }
    out_puts(o, "\n");
    return PCGC_OK;
  }

  if (nd->n_out < 1) {
    return pcgc_error_set(err, PCGC_ERR_INVALID,
                          "node '%s' has no outputs; the model format cannot express it",
                          nd->name ? nd->name : "?");
  }
  for (int s = 0; s < nd->n_out; s++) {
    if (s) out_puts(o, ", ");
    write_name(o, m, nd->id, s);
  }
  out_printf(o, " = %s(", pcgc_op_name(nd->kind));
  bool first = true;
  for (int i = 0; i < nd->n_in; i++) {
    pcgc_ref r = nd->in[i];
    if (r.node < 0 || r.node >= g->n_nodes || r.slot < 0 || r.slot >= g->nodes[r.node].n_out) {
      return pcgc_error_set(err, PCGC_ERR_GRAPH, "node '%s': input %d refers to %d:%d, "
                            "which does not exist", nd->name ? nd->name : "?", i,
                            r.node, r.slot);
    }
    if (!first) out_puts(o, ", ");
    write_name(o, m, r.node, r.slot);
    first = false;
  }
  int n_attrs = pcgc_op_num_attrs(nd->kind);
  for (int i = 0; i < n_attrs; i++) {
    if (!first) out_puts(o, ", ");
    out_printf(o, "%s=", pcgc_op_attr(nd->kind, i)->name);
    if ((st = write_attr_value(o, nd, i, err)) != PCGC_OK) return st;
    first = false;
  }
  /* Without weight inputs the parser would create scale and bias. */
  if ((nd->kind == PCGC_OP_BATCHNORM || nd->kind == PCGC_OP_LAYERNORM || nd->kind == PCGC_OP_RMSNORM) &&
      nd->n_in == 1) {
    out_puts(o, first ? "affine=false" : ", affine=false");
  }
  out_puts(o, ")\n");
  return PCGC_OK;
}

/* ------------------------------------------------------------------ entry */

pcgc_status pcgc_graph_write_text(FILE *f, const pcgc_graph *g, pcgc_error *err)
{
  if (f == NULL || g == NULL) {
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_graph_write_text: NULL argument");
  }
  pcgc_status st;
  int *order = malloc(((size_t)g->n_nodes + 1) * sizeof *order);
  if (order == NULL) {
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing the canonical text");
  }
  if ((st = pcgc_graph_topo_order(g, order, err)) != PCGC_OK) goto done_order;

  /* Data inputs first; the rest keeps its topological order. */
  int *seq = malloc(((size_t)g->n_nodes + 1) * sizeof *seq);
  if (seq == NULL) {
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing the canonical text");
    goto done_order;
  }
  int n_seq = 0, n_inputs = 0;
  for (int k = 0; k < g->n_nodes; k++) {
    if (g->nodes[order[k]].kind == PCGC_OP_INPUT) seq[n_seq++] = order[k];
  }
  n_inputs = n_seq;
  for (int k = 0; k < g->n_nodes; k++) {
    if (g->nodes[order[k]].kind != PCGC_OP_INPUT) seq[n_seq++] = order[k];
  }

  name_map m;
  if ((st = name_map_build(&m, g, seq, err)) != PCGC_OK) goto done_seq;

  text_out o = {.f = f};
  out_puts(&o, "# pcgc canonical form; parse with pcgc\n");
  if (g->name != NULL) {
    char *model = is_valid_name(g->name) ? NULL : sanitize_name(g->name);
    if (!is_valid_name(g->name) && model == NULL) {
      st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing the canonical text");
      goto done_map;
    }
    out_printf(&o, "model %s\n", model ? model : g->name);
    free(model);
  }
  for (int k = 0; k < n_seq && !o.failed; k++) {
    if (k == 0 || k == n_inputs) out_puts(&o, "\n");
    if ((st = write_node(&o, g, &m, &g->nodes[seq[k]], err)) != PCGC_OK) goto done_map;
  }
  st = out_finish(&o, err);

done_map:
  name_map_destroy(&m);
done_seq:
  free(seq);
done_order:
  free(order);
  return st;
}
