/*
 * profile.c — the profile database: measured forward and backward times of
 * operator kernels, keyed by (op kind, attribute text, input piece shapes,
 * dtype), read and written as JSON (cJSON). `pcgc profile` (cli/profile.c)
 * measures the entries with the CPU backend; the simulator looks every task
 * up here before falling back to the roofline (pcgc_sim_options.profile).
 *
 * This file only stores, loads, writes and looks up; it measures nothing, so
 * search/ stays free of runtime dependencies. Lookup is a linear scan: a
 * database holds the few dozen distinct kernels of a model, and the
 * simulator looks each node up once per simulation, not per task.
 *
 * Format (version 1):
 *   {"format": "pcgc-profile", "version": 1, "machine": "cpu-local",
 *    "entries": [{"op": "linear", "attrs": "out=512 act=relu bias=true",
 *                 "inputs": [[64, 784], [784, 512], [512]], "dtype": "f32",
 *                 "forward": 1.2e-4, "backward": 2.5e-4}, ...]}
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "search.h"
#include "sim_internal.h"

struct pcgc_profile {
  char machine[PCGC_MACHINE_NAME_MAX];
  int n, cap;
  pcgc_profile_entry *e;
};

pcgc_profile *pcgc_profile_new(const char *machine) {
  pcgc_profile *p = calloc(1, sizeof *p);
  if (p && machine) snprintf(p->machine, sizeof p->machine, "%s", machine);
  return p;
}

void pcgc_profile_free(pcgc_profile *p) {
  if (!p) return;
  free(p->e);
  free(p);
}

const char *pcgc_profile_machine(const pcgc_profile *p) { return p ? p->machine : ""; }
int pcgc_profile_size(const pcgc_profile *p) { return p ? p->n : 0; }
const pcgc_profile_entry *pcgc_profile_entry_at(const pcgc_profile *p, int i) {
  return p && i >= 0 && i < p->n ? &p->e[i] : NULL;
}

void pcgc_profile_attrs_text(char *buf, size_t n, const pcgc_attrs *a) {
  if (!n) return;
  buf[0] = '\0';
  size_t used = 0;
  for (int i = 0; i < pcgc_op_num_attrs(a->kind); i++) {
    char one[256];
    pcgc_attr_format(one, sizeof one, a, i);
    int w = snprintf(buf + used, n - used, "%s%s", i ? " " : "", one);
    if (w < 0 || (size_t)w >= n - used) break;
    used += (size_t)w;
  }
}

void pcgc_profile_piece_dims(const pcgc_ptensor *t, int64_t *dims) {
  for (int d = 0; d < t->rank; d++) {
    int64_t div = t->degree[d] > 0 ? t->degree[d] : 1;
    if (t->micro > 1 && t->micro_dim == d) div *= t->micro;
    dims[d] = (t->dims[d] + div - 1) / div;
  }
}

static bool same_key(const pcgc_profile_entry *a, const pcgc_profile_entry *b) {
  if (a->kind != b->kind || a->dtype != b->dtype || a->n_in != b->n_in || strcmp(a->attrs, b->attrs) != 0)
    return false;
  for (int i = 0; i < a->n_in; i++) {
    if (a->rank[i] != b->rank[i]) return false;
    for (int d = 0; d < a->rank[i]; d++)
      if (a->dims[i][d] != b->dims[i][d]) return false;
  }
  return true;
}

pcgc_status pcgc_profile_key(const pcgc_graph *g, int node, pcgc_profile_entry *key, pcgc_error *err) {
  memset(key, 0, sizeof *key);
  if (!g || node < 0 || node >= g->n_nodes)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_profile_key: bad node %d", node);
  const pcgc_node *n = &g->nodes[node];
  if (!n->typed)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "%s '%s' has no type yet", pcgc_op_name(n->kind), n->name);
  if (n->n_in > PCGC_PROFILE_MAX_INPUTS)
    return pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "%s '%s' has %d inputs; a profile entry holds at most %d",
                          pcgc_op_name(n->kind), n->name, n->n_in, PCGC_PROFILE_MAX_INPUTS);
  pcgc_ptensor in[PCGC_PROFILE_MAX_INPUTS];
  for (int i = 0; i < n->n_in; i++) {
    const pcgc_ptensor *t = pcgc_graph_ref_type(g, n->in[i]);
    if (!t)
      return pcgc_error_set(err, PCGC_ERR_INVALID, "%s '%s': input %d has no type", pcgc_op_name(n->kind), n->name, i);
    in[i] = *t;
    key->rank[i] = t->rank;
    pcgc_profile_piece_dims(t, key->dims[i]);
  }
  key->kind = n->kind;
  key->n_in = n->n_in;
  key->dtype = pcgc_cost_op_dtype(n->n_in, in, n->n_out, n->out);
  pcgc_profile_attrs_text(key->attrs, sizeof key->attrs, &n->attrs);
  return PCGC_OK;
}

const pcgc_profile_entry *pcgc_profile_find(const pcgc_profile *p, const pcgc_profile_entry *key) {
  if (!p || !key) return NULL;
  for (int i = 0; i < p->n; i++)
    if (same_key(&p->e[i], key)) return &p->e[i];
  return NULL;
}

pcgc_status pcgc_profile_add(pcgc_profile *p, const pcgc_profile_entry *e, pcgc_error *err) {
  if (!p || !e || e->n_in < 0 || e->n_in > PCGC_PROFILE_MAX_INPUTS || (unsigned)e->kind >= PCGC_OP_COUNT ||
      (unsigned)e->dtype >= PCGC_DTYPE_COUNT || !(e->fwd >= 0) || !(e->bwd >= 0))
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_profile_add: bad entry");
  for (int i = 0; i < p->n; i++)
    if (same_key(&p->e[i], e)) {
      p->e[i] = *e;
      return PCGC_OK;
    }
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 16;
    pcgc_profile_entry *ne = realloc(p->e, (size_t)cap * sizeof *ne);
    if (!ne) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory growing a profile");
    p->e = ne;
    p->cap = cap;
  }
  p->e[p->n++] = *e;
  return PCGC_OK;
}

bool pcgc_profile_node_time(const pcgc_profile *p, const pcgc_graph *g, int node, pcgc_op_time *t) {
  if (!p || !p->n) return false;
  pcgc_profile_entry key;
  if (pcgc_profile_key(g, node, &key, NULL) != PCGC_OK) return false;
  const pcgc_profile_entry *e = pcgc_profile_find(p, &key);
  if (!e) return false;
  t->fwd = e->fwd;
  t->bwd = e->bwd;
  return true;
}

void pcgc_profile_update_key(pcgc_optim_kind o, const pcgc_ptensor *t, pcgc_profile_entry *key) {
  memset(key, 0, sizeof *key);
  key->kind = PCGC_OP_WEIGHT;
  snprintf(key->attrs, sizeof key->attrs, "optimizer=%s", pcgc_optimizer_name(o));
  key->dtype = t->dtype;
  key->n_in = 1;
  key->rank[0] = t->rank;
  pcgc_profile_piece_dims(t, key->dims[0]);
}

bool pcgc_profile_update_time(const pcgc_profile *p, pcgc_optim_kind o, const pcgc_ptensor *t, double *seconds) {
  if (!p || !p->n || !t) return false;
  pcgc_profile_entry key;
  pcgc_profile_update_key(o, t, &key);
  const pcgc_profile_entry *e = pcgc_profile_find(p, &key);
  if (e) *seconds = e->fwd;
  return e != NULL;
}

/* ------------------------------------------------------------- loading */

/* A parse error in `path`: the message names the entry (index from 0) when
 * there is one; file:line:col and the source line where the JSON is bad. */
static pcgc_status bad(pcgc_error *err, const char *path, int entry, const char *what) {
  if (entry >= 0) pcgc_error_set(err, PCGC_ERR_PARSE, "profile database: entry %d: %s", entry, what);
  else pcgc_error_set(err, PCGC_ERR_PARSE, "profile database: %s", what);
  pcgc_error_at(err, (pcgc_srcloc){path, 0, 0}, 0, NULL, 0);
  pcgc_error_hint(err, "profile databases are written by `pcgc profile MODEL --machine M -o FILE`");
  return PCGC_ERR_PARSE;
}

static pcgc_status parse_entry(const cJSON *j, const char *path, int i, pcgc_profile_entry *e, pcgc_error *err) {
  memset(e, 0, sizeof *e);
  const cJSON *op = cJSON_GetObjectItemCaseSensitive(j, "op"), *at = cJSON_GetObjectItemCaseSensitive(j, "attrs"),
              *ins = cJSON_GetObjectItemCaseSensitive(j, "inputs"), *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype"),
              *fw = cJSON_GetObjectItemCaseSensitive(j, "forward"), *bw = cJSON_GetObjectItemCaseSensitive(j, "backward");
  if (!cJSON_IsObject(j)) return bad(err, path, i, "is not an object");
  if (!cJSON_IsString(op) || pcgc_op_from_name(op->valuestring) < 0)
    return bad(err, path, i, "\"op\" must name an operator");
  if (!cJSON_IsString(at) || strlen(at->valuestring) >= sizeof e->attrs)
    return bad(err, path, i, "\"attrs\" must be a string (pcgc_attr_format text)");
  if (!cJSON_IsString(dt) || pcgc_dtype_from_name(dt->valuestring) < 0)
    return bad(err, path, i, "\"dtype\" must name a dtype (f32, ...)");
  if (!cJSON_IsNumber(fw) || !(fw->valuedouble >= 0) || !cJSON_IsNumber(bw) || !(bw->valuedouble >= 0))
    return bad(err, path, i, "\"forward\" and \"backward\" must be seconds >= 0");
  if (!cJSON_IsArray(ins) || cJSON_GetArraySize(ins) > PCGC_PROFILE_MAX_INPUTS)
    return bad(err, path, i, "\"inputs\" must be an array of at most 16 shapes");
  e->kind = (pcgc_op_kind)pcgc_op_from_name(op->valuestring);
  e->dtype = (pcgc_dtype)pcgc_dtype_from_name(dt->valuestring);
  snprintf(e->attrs, sizeof e->attrs, "%s", at->valuestring);
  e->fwd = fw->valuedouble;
  e->bwd = bw->valuedouble;
  const cJSON *shape;
  cJSON_ArrayForEach(shape, ins) {
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > PCGC_MAX_RANK)
      return bad(err, path, i, "each input shape must be an array of at most 6 sizes");
    int r = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) {
      if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble != floor(d->valuedouble) ||
          d->valuedouble > 9.0e15) /* exact in a double, and within int64 */
        return bad(err, path, i, "sizes must be non-negative integers (at most 9e15)");
      e->dims[e->n_in][r++] = (int64_t)d->valuedouble;
    }
    e->rank[e->n_in++] = r;
  }
  return PCGC_OK;
}

pcgc_status pcgc_profile_parse(const char *text, size_t len, const char *path, pcgc_profile **out,
                               pcgc_error *err) {
  if (out) *out = NULL;
  if (!text || !out) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_profile_parse: bad argument");
  if (!path) path = "<profile>";
  cJSON *root = cJSON_ParseWithLength(text, len);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    int line = 1, col = 1;
    for (const char *c = text; at && c < at && c < text + len; c++) {
      col = *c == '\n' ? 1 : col + 1;
      line += *c == '\n';
    }
    bad(err, path, -1, "malformed JSON");
    pcgc_error_at(err, (pcgc_srcloc){path, line, col}, 1, text, len);
    return PCGC_ERR_PARSE;
  }
  pcgc_status st = PCGC_OK;
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format"),
              *ver = cJSON_GetObjectItemCaseSensitive(root, "version"),
              *mach = cJSON_GetObjectItemCaseSensitive(root, "machine"),
              *ents = cJSON_GetObjectItemCaseSensitive(root, "entries");
  pcgc_profile *p = NULL;
  if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "pcgc-profile") != 0) {
    st = bad(err, path, -1, "not a profile database (no \"format\": \"pcgc-profile\")");
  } else if (!cJSON_IsNumber(ver) || ver->valueint != 1) {
    st = bad(err, path, -1, "unsupported \"version\" (this build reads version 1)");
  } else if (!cJSON_IsString(mach) || strlen(mach->valuestring) >= PCGC_MACHINE_NAME_MAX) {
    st = bad(err, path, -1, "\"machine\" must be a machine name");
  } else if (!cJSON_IsArray(ents)) {
    st = bad(err, path, -1, "\"entries\" must be an array");
  } else if (!(p = pcgc_profile_new(mach->valuestring))) {
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory reading %s", path);
  } else {
    int i = 0;
    const cJSON *j;
    cJSON_ArrayForEach(j, ents) {
      pcgc_profile_entry e;
      if ((st = parse_entry(j, path, i++, &e, err)) != PCGC_OK) break;
      if ((st = pcgc_profile_add(p, &e, err)) != PCGC_OK) break;
    }
  }
  cJSON_Delete(root);
  if (st != PCGC_OK) {
    pcgc_profile_free(p);
    return st;
  }
  *out = p;
  return PCGC_OK;
}

pcgc_status pcgc_profile_load(const char *path, pcgc_profile **out, pcgc_error *err) {
  if (out) *out = NULL;
  if (!path || !out) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_profile_load: bad argument");
  FILE *f = fopen(path, "rb");
  if (!f) return pcgc_error_set(err, PCGC_ERR_IO, "cannot open profile '%s': %s", path, strerror(errno));
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? 2 * cap : 65536;
      char *t = realloc(text, cap);
      if (!t) {
        free(text);
        fclose(f);
        return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory reading %s", path);
      }
      text = t;
    }
    size_t r = fread(text + len, 1, cap - len, f);
    len += r;
    if (r == 0) break;
  }
  bool rerr = ferror(f);
  fclose(f);
  if (rerr) {
    free(text);
    return pcgc_error_set(err, PCGC_ERR_IO, "cannot read profile '%s'", path);
  }
  pcgc_status st = pcgc_profile_parse(text, len, path, out, err);
  free(text);
  return st;
}

/* ------------------------------------------------------------- writing */

static cJSON *to_json(const pcgc_profile *p) {
  cJSON *root = cJSON_CreateObject(), *ents = NULL;
  if (!root || !cJSON_AddStringToObject(root, "format", "pcgc-profile") || !cJSON_AddNumberToObject(root, "version", 1) ||
      !cJSON_AddStringToObject(root, "machine", p->machine) || !(ents = cJSON_AddArrayToObject(root, "entries")))
    goto fail;
  for (int i = 0; i < p->n; i++) {
    const pcgc_profile_entry *e = &p->e[i];
    cJSON *j = cJSON_CreateObject(), *ins;
    if (!j || !cJSON_AddItemToArray(ents, j)) {
      cJSON_Delete(j);
      goto fail;
    }
    if (!cJSON_AddStringToObject(j, "op", pcgc_op_name(e->kind)) || !cJSON_AddStringToObject(j, "attrs", e->attrs) ||
        !(ins = cJSON_AddArrayToObject(j, "inputs")))
      goto fail;
    for (int k = 0; k < e->n_in; k++) {
      cJSON *s = cJSON_CreateArray();
      if (!s || !cJSON_AddItemToArray(ins, s)) {
        cJSON_Delete(s);
        goto fail;
      }
      for (int d = 0; d < e->rank[k]; d++) {
        cJSON *v = cJSON_CreateNumber((double)e->dims[k][d]);
        if (!v || !cJSON_AddItemToArray(s, v)) {
          cJSON_Delete(v);
          goto fail;
        }
      }
    }
    if (!cJSON_AddStringToObject(j, "dtype", pcgc_dtype_name(e->dtype)) || !cJSON_AddNumberToObject(j, "forward", e->fwd) ||
        !cJSON_AddNumberToObject(j, "backward", e->bwd))
      goto fail;
  }
  return root;
fail:
  cJSON_Delete(root);
  return NULL;
}

pcgc_status pcgc_profile_write(const pcgc_profile *p, const char *path, pcgc_error *err) {
  if (!p || !path) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_profile_write: bad argument");
  cJSON *root = to_json(p);
  if (!root) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing %s", path);
  pcgc_status st = pcgc__write_json(root, path, err);
  cJSON_Delete(root);
  return st;
}

pcgc_status pcgc__write_json(const cJSON *root, const char *path, pcgc_error *err) {
  char *text = cJSON_Print(root);
  size_t len = text ? strlen(text) : 0;
  char *withnl = text ? realloc(text, len + 2) : NULL;
  if (!withnl) {
    free(text);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing %s", path);
  }
  withnl[len] = '\n'; /* the JSON and a final newline, written atomically */
  withnl[len + 1] = '\0';
  pcgc_status st = pcgc_write_file_atomic(path, withnl, len + 1, err);
  free(withnl);
  return st;
}
