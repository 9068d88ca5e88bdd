/*
 * model.c — the public entry points of the model-file reader:
 * pcgc_model_parse, pcgc_model_load and pcgc_read_file.
 *
 * Reading runs in three stages, each in its own file: model_lex.c turns the
 * text into tokens, model_parse.c the tokens into the syntax tree of one
 * statement at a time, and model_build.c runs each tree into a typed graph.
 * This file checks the caller's input and the --set overrides (each must
 * name a constant of the model, and be integer or float text; checking them
 * reads the file once more first), runs the stages, and frees everything but
 * the graph, whatever happens.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

typedef pcgc__num num;

/* Reads "--set" value text: an integer or a float, nothing else. */
static bool parse_set_value(const char *text, num *out) {
  if (!text || !*text) return false;
  char *end;
  errno = 0;
  long long i = strtoll(text, &end, 10);
  if (*end == '\0' && errno == 0 && end != text) {
    *out = (num){false, i, 0};
    return true;
  }
  errno = 0;
  double f = strtod(text, &end);
  if (*end == '\0' && end != text && isfinite(f) && text[0] != ' ' && text[0] != '\t') {
    *out = (num){true, 0, f};
    return true;
  }
  return false;
}

/* The names of the file's constants, read statement by statement (the
 * file's syntax was checked); the caller frees them. */
typedef struct const_names {
  int n;
  char **names;
} const_names;

static pcgc_status read_consts(const pcgc__src *src, const_names *out) {
  pcgc__model_reader *R = pcgc__model_reader_new(src);
  pcgc__arena arena = {0};
  pcgc_status s = R ? PCGC_OK : PCGC_ERR_NOMEM;
  const pcgc__stmt *st;
  int cap = 0;
  while (s == PCGC_OK && (s = pcgc__model_reader_next(R, &arena, NULL, &st)) == PCGC_OK && st) {
    if (st->kind == PCGC__ST_CONST) {
      if (out->n == cap) {
        cap = cap ? 2 * cap : 16;
        char **v = realloc(out->names, (size_t)cap * sizeof *v);
        if (!v) s = PCGC_ERR_NOMEM;
        else out->names = v;
      }
      size_t len = strlen(st->name.s) + 1;
      char *c = s == PCGC_OK ? malloc(len) : NULL;
      if (c) out->names[out->n++] = memcpy(c, st->name.s, len);
      else s = PCGC_ERR_NOMEM;
    }
    pcgc__arena_reset(&arena);
  }
  pcgc__arena_free(&arena);
  pcgc__model_reader_free(R);
  if (s == PCGC_ERR_NOMEM) pcgc_error_set(src->err, PCGC_ERR_NOMEM, "out of memory reading the model");
  return s;
}

static pcgc_status check_options(const pcgc__src *src, const const_names *consts, const pcgc_model_options *o,
                                 num *vals) {
  pcgc_error *err = src->err;
  pcgc_srcloc loc = {src->file, 0, 0};
  if (o->n_set < 0 || (o->n_set > 0 && (!o->set_names || !o->set_values)))
    return pcgc_error_set(err, PCGC_ERR_INVALID, "bad model options: %d overrides without names or values", o->n_set);
  for (int i = 0; i < o->n_set; i++) {
    const char *name = o->set_names[i], *value = o->set_values[i];
    if (!name || !value) return pcgc_error_set(err, PCGC_ERR_INVALID, "bad model options: override %d is NULL", i);
    bool found = false;
    pcgc__suggest sg;
    pcgc__suggest_init(&sg, name);
    char list[300] = "";
    size_t k = 0;
    for (int j = 0; j < consts->n; j++) {
      const char *c = consts->names[j];
      if (strcmp(c, name) == 0) found = true;
      pcgc__suggest_add(&sg, c);
      if (k < sizeof list) k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", k ? ", " : "", c);
    }
    if (!found) {
      pcgc_error_set(err, PCGC_ERR_INVALID, "--set %.200s=%.200s: the model has no constant '%.200s'", name, value,
                     name);
      pcgc_error_at(err, loc, 0, NULL, 0);
      if (pcgc__suggest_best(&sg)) pcgc_error_hint(err, "did you mean '%s'?", pcgc__suggest_best(&sg));
      else if (list[0]) pcgc_error_hint(err, "its constants: %s", list);
      else pcgc_error_hint(err, "the model defines no constants (const NAME = ...)");
      return PCGC_ERR_INVALID;
    }
    if (!parse_set_value(value, &vals[i])) {
      pcgc_error_set(err, PCGC_ERR_INVALID, "--set %.200s=%.200s: '%.200s' is not a number", name, value, value);
      pcgc_error_at(err, loc, 0, NULL, 0);
      pcgc_error_hint(err, "write an integer (--set B=256) or a float (--set P=0.1)");
      return PCGC_ERR_INVALID;
    }
  }
  return PCGC_OK;
}

pcgc_graph *pcgc_model_parse(const char *text, size_t len, const char *filename, const pcgc_model_options *opts,
                             pcgc_error *err) {
  pcgc_error local;
  if (!err) err = &local;
  pcgc_error_clear(err);
  const char *file = filename ? filename : "<model>";
  pcgc__src src = {text ? text : "", text ? len : 0, file, err};
  if (!text && len) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "no model text");
    return NULL;
  }
  if (len > PCGC__MODEL_MAX_TEXT) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "the model is too large (%zu bytes; at most %d)", len,
                   PCGC__MODEL_MAX_TEXT);
    pcgc_error_at(err, (pcgc_srcloc){file, 0, 0}, 0, NULL, 0);
    pcgc_error_hint(err, "a model file describes layers, not data; is this the right file?");
    return NULL;
  }
  num *set_vals = NULL;
  pcgc_graph *g = NULL;
  const_names consts = {0, NULL};
  /* lexical errors anywhere come first; with overrides, so do syntax errors
   * (the overrides are checked against the constants before building) */
  pcgc_status rc = opts && opts->n_set > 0 ? pcgc__model_check_syntax(&src) : pcgc__model_lex_check(&src);
  if (rc == PCGC_OK && opts && opts->n_set > 0) {
    set_vals = calloc((size_t)opts->n_set, sizeof *set_vals);
    rc = set_vals ? read_consts(&src, &consts) : pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory reading the model");
    if (rc == PCGC_OK) rc = check_options(&src, &consts, opts, set_vals);
  } else if (rc == PCGC_OK && opts && opts->n_set < 0) {
    rc = pcgc_error_set(err, PCGC_ERR_INVALID, "bad model options: n_set is %d", opts->n_set);
  }
  for (int i = 0; i < consts.n; i++) free(consts.names[i]);
  free(consts.names);
  if (rc == PCGC_OK) rc = pcgc__model_build(&src, opts, set_vals, &g);
  free(set_vals);
  if (rc != PCGC_OK) {
    if (err->status == PCGC_OK) err->status = rc;
    return NULL;
  }
  /* the node array grew by doubling: keep what the graph holds (issue 17) */
  if (g->n_nodes > 0 && g->cap > g->n_nodes) {
    pcgc_node *nodes = realloc(g->nodes, (size_t)g->n_nodes * sizeof *nodes);
    if (nodes) g->nodes = nodes, g->cap = g->n_nodes;
  }
  pcgc_error_clear(err);
  return g;
}

char *pcgc_read_file(const char *path, size_t *len, pcgc_error *err) {
  if (len) *len = 0;
  if (!path) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "no file name");
    return NULL;
  }
  pcgc_srcloc loc = {path, 0, 0};
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    pcgc_error_set(err, PCGC_ERR_IO, "cannot open '%s': %s", path, strerror(e));
    pcgc_error_at(err, loc, 0, NULL, 0);
    pcgc_error_hint(err, e == ENOENT ? "check the path" : "check the file's permissions");
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (!buf) {
      fclose(f);
      pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory reading '%s'", path);
      return NULL;
    }
    n += fread(buf + n, 1, cap - 1 - n, f);
    if (ferror(f)) {
      int e = errno;
      free(buf);
      fclose(f);
      pcgc_error_set(err, PCGC_ERR_IO, "cannot read '%s': %s", path, strerror(e));
      pcgc_error_at(err, loc, 0, NULL, 0);
      pcgc_error_hint(err, e == EISDIR ? "this is a directory; give a file" : "check the file");
      return NULL;
    }
    if (feof(f)) break;
    if (n == cap - 1) {
      if (cap > SIZE_MAX / 2) {
        free(buf);
        buf = NULL;
        continue;
      }
      char *nb = realloc(buf, cap * 2);
      if (!nb) free(buf);
      buf = nb;
      cap *= 2;
    }
  }
  fclose(f);
  buf[n] = '\0';
  if (len) *len = n;
  return buf;
}

pcgc_graph *pcgc_model_load(const char *path, const pcgc_model_options *opts, pcgc_error *err) {
  size_t len;
  char *text = pcgc_read_file(path, &len, err);
  if (!text) return NULL;
  pcgc_graph *g = pcgc_model_parse(text, len, path, opts, err);
  if (g) { /* a model file must compute something (a text snippet parsed by a program may not) */
    int ops = 0;
    for (int i = 0; i < g->n_nodes; i++) ops += pcgc_op_class_of(g->nodes[i].kind) != PCGC_CLASS_SOURCE;
    if (ops == 0) {
      bool blank = true;
      for (size_t i = 0; i < len && blank; i++) blank = text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r';
      pcgc_error_set(err, PCGC_ERR_INVALID, blank ? "the model file is empty" : "the model computes nothing: it has %s",
                     g->n_nodes ? "no operator, only inputs and weights" : "no input, weight or operator");
      pcgc_error_at(err, (pcgc_srcloc){path, 1, 1}, 0, NULL, 0);
      pcgc_error_hint(err, "a model declares its inputs and computes from them, e.g.\n"
                           "  input x: f32[B, 784]\n  h = linear(x, out=10)\n(docs/model-format.md; models/mlp.pcg)");
      pcgc_graph_free(g);
      g = NULL;
    }
  }
  free(text);
  return g;
}
