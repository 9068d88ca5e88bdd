/*
 * ruleset.c — a set of parsed rules (the first section of substitutions.h):
 * loading text, files and directories, lookup, removal, and the accessors of
 * one rule; plus the AST helpers the parser uses (pcgc__rx_new,
 * pcgc__rule_free).
 *
 * The set owns a copy of every file's name: rule, symbol and expression
 * locations point at it. It keeps no copy of the text (issue 17: a rule
 * set's memory against its text); messages that quote a source line are
 * made while parsing, from the caller's text.
 * Loading is all-or-nothing per call: a text, file or directory with an
 * error adds nothing.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <assert.h>
#include <stdbool.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Out of memory in the name index must be an error, not uthash's exit(). */
static _Thread_local bool index_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (index_oom = true)
#include <uthash.h>

#include "rules_parse.h"

typedef struct rs_file {
  char *path;
} rs_file;

struct pcgc__rule_name {
  const char *name; /* the rule's */
  pcgc_rule *rule;
  UT_hash_handle hh;
};

struct pcgc_ruleset {
  pcgc_rule **rules;
  int n, cap;
  pcgc__rule_name *index; /* rules by name */
  rs_file *files;
  int n_files, cap_files;
};

/* ----------------------------------------------------------- AST helpers */

int32_t pcgc__rx_new(pcgc_rule *r, rx_kind kind) {
  if (r->n_ex == r->cap_ex) {
    if (r->cap_ex > INT32_MAX / 2) return -1;
    int cap = r->cap_ex ? r->cap_ex * 2 : 32;
    rx *v = realloc(r->ex, (size_t)cap * sizeof *v);
    if (!v) return -1;
    r->ex = v;
    r->cap_ex = cap;
  }
  rx *x = &r->ex[r->n_ex];
  memset(x, 0, sizeof *x);
  x->kind = kind;
  x->sym = x->tensor = x->attr = -1;
  x->a = x->b = -1;
  return r->n_ex++;
}

void pcgc__rule_free(pcgc_rule *r) {
  if (!r) return;
  if (!r->packed) {
    free(r->name);
    for (int i = 0; i < r->n_syms; i++) free(r->syms[i].name);
    for (int i = 0; i < r->n_tensors; i++) free(r->tensors[i].name);
    free(r->ex);
  }
  free(r);
}

const rtype pcgc__rtype_any = {.dtype = RT_DTYPE_ANY, .ellipsis_at = -1, .ellipsis_sym = -1};

/* Bump allocation inside the packed block: every piece is 8-aligned (the
 * structs hold pointers or int64s), so the pieces can come in any order. */
typedef struct pack {
  char *p;
  size_t used;
} pack;

static size_t pack_round(size_t n) { return (n + 7) & ~(size_t)7; }

static void *pack_take(pack *k, const void *src, size_t n) {
  if (n == 0) return NULL;
  void *d = k->p + k->used;
  memcpy(d, src, n);
  k->used += pack_round(n);
  return d;
}

static char *pack_str(pack *k, const char *s) { return s ? pack_take(k, s, strlen(s) + 1) : NULL; }

pcgc_rule *pcgc__rule_pack(const pcgc_rule *r) {
  const rside *sides[2] = {&r->match, &r->rewrite};
  size_t n = pack_round(sizeof *r) + pack_round(strlen(r->name) + 1);
  n += pack_round((size_t)r->n_syms * sizeof(rsym)) + pack_round((size_t)r->n_inputs * sizeof(int32_t));
  n += pack_round((size_t)r->n_tensors * sizeof(rtensor)) + pack_round((size_t)r->n_conds * sizeof(rcond));
  n += pack_round((size_t)r->n_ex * sizeof(rx));
  for (int i = 0; i < r->n_syms; i++) n += pack_round(strlen(r->syms[i].name) + 1);
  for (int i = 0; i < r->n_tensors; i++)
    n += pack_round(strlen(r->tensors[i].name) + 1);
  for (int i = 0; i < r->n_inputs; i++) {
    const rtype *ty = r->tensors[r->inputs[i]].type;
    n += pack_round(sizeof *ty) + pack_round((size_t)ty->n_pitems * sizeof(rpitem));
  }
  for (int sd = 0; sd < 2; sd++) {
    n += pack_round((size_t)sides[sd]->n_nodes * sizeof(rnode)) + pack_round((size_t)sides[sd]->n_yields * sizeof(int32_t));
    for (int i = 0; i < sides[sd]->n_nodes; i++) {
      const rnode *nd = &sides[sd]->nodes[i];
      n += pack_round((size_t)nd->n_args * sizeof(int32_t)) + pack_round((size_t)nd->n_attrs * sizeof(rattr)) +
           pack_round((size_t)nd->n_outs * sizeof(int32_t));
    }
  }
  pack k = {malloc(n), 0};
  if (!k.p) return NULL;
  pcgc_rule *q = pack_take(&k, r, sizeof *r);
  q->packed = true;
  q->name = pack_str(&k, r->name);
  q->syms = pack_take(&k, r->syms, (size_t)r->n_syms * sizeof(rsym));
  for (int i = 0; i < r->n_syms; i++) q->syms[i].name = pack_str(&k, r->syms[i].name);
  q->inputs = pack_take(&k, r->inputs, (size_t)r->n_inputs * sizeof(int32_t));
  q->tensors = pack_take(&k, r->tensors, (size_t)r->n_tensors * sizeof(rtensor));
  for (int i = 0; i < r->n_tensors; i++) q->tensors[i].name = pack_str(&k, r->tensors[i].name);
  for (int i = 0; i < r->n_inputs; i++) {
    const rtype *ty = r->tensors[r->inputs[i]].type;
    rtype *qt = pack_take(&k, ty, sizeof *ty);
    qt->pitems = pack_take(&k, ty->pitems, (size_t)ty->n_pitems * sizeof(rpitem));
    q->tensors[r->inputs[i]].type = qt;
  }
  rside *qs[2] = {&q->match, &q->rewrite};
  for (int sd = 0; sd < 2; sd++) {
    qs[sd]->nodes = pack_take(&k, sides[sd]->nodes, (size_t)sides[sd]->n_nodes * sizeof(rnode));
    qs[sd]->yields = pack_take(&k, sides[sd]->yields, (size_t)sides[sd]->n_yields * sizeof(int32_t));
    for (int i = 0; i < sides[sd]->n_nodes; i++) {
      const rnode *nd = &sides[sd]->nodes[i];
      rnode *qn = &qs[sd]->nodes[i];
      qn->args = pack_take(&k, nd->args, (size_t)nd->n_args * sizeof(int32_t));
      qn->attrs = pack_take(&k, nd->attrs, (size_t)nd->n_attrs * sizeof(rattr));
      qn->outs = pack_take(&k, nd->outs, (size_t)nd->n_outs * sizeof(int32_t));
    }
  }
  q->conds = pack_take(&k, r->conds, (size_t)r->n_conds * sizeof(rcond));
  q->ex = pack_take(&k, r->ex, (size_t)r->n_ex * sizeof(rx));
  q->cap_ex = q->n_ex;
  assert(k.used == n);
  return q;
}

/* ------------------------------------------------------------ name index */

pcgc_status pcgc__rule_index_add(pcgc__rule_name **index, pcgc_rule *r) {
  pcgc__rule_name *e = malloc(sizeof *e);
  if (!e) return PCGC_ERR_NOMEM;
  e->name = r->name;
  e->rule = r;
  index_oom = false;
  HASH_ADD_KEYPTR(hh, *index, e->name, strlen(e->name), e);
  if (index_oom) {
    free(e);
    return PCGC_ERR_NOMEM;
  }
  return PCGC_OK;
}

pcgc_rule *pcgc__rule_index_find(pcgc__rule_name *index, const char *name) {
  pcgc__rule_name *e = NULL;
  HASH_FIND_STR(index, name, e);
  return e ? e->rule : NULL;
}

void pcgc__rule_index_del(pcgc__rule_name **index, const char *name) {
  pcgc__rule_name *e = NULL;
  HASH_FIND_STR(*index, name, e);
  if (!e) return;
  HASH_DEL(*index, e);
  free(e);
}

void pcgc__rule_index_clear(pcgc__rule_name **index) {
  pcgc__rule_name *e, *tmp;
  HASH_ITER(hh, *index, e, tmp) {
    HASH_DEL(*index, e);
    free(e);
  }
}

/* --------------------------------------------------------------- the set */

pcgc_ruleset *pcgc_ruleset_new(void) { return calloc(1, sizeof(pcgc_ruleset)); }

/* Drops rules and files past the first n and n_files. */
static void truncate_set(pcgc_ruleset *rs, int n, int n_files) {
  while (rs->n > n) {
    pcgc_rule *r = rs->rules[--rs->n];
    pcgc__rule_index_del(&rs->index, r->name);
    pcgc__rule_free(r);
  }
  while (rs->n_files > n_files) {
    rs_file *f = &rs->files[--rs->n_files];
    free(f->path);
  }
}

void pcgc_ruleset_free(pcgc_ruleset *rs) {
  if (!rs) return;
  truncate_set(rs, 0, 0);
  pcgc__rule_index_clear(&rs->index);
  free(rs->rules);
  free(rs->files);
  free(rs);
}

pcgc_status pcgc_ruleset_parse(pcgc_ruleset *rs, const char *text, size_t len, const char *path, pcgc_error *err) {
  pcgc_error local;
  if (!err) err = &local;
  if (!rs || (!text && len > 0))
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_ruleset_parse: no rule set or text");
  if (!path) path = "<rules>";
  if (len > PCGC__RULES_MAX_TEXT) {
    pcgc_error_set(err, PCGC_ERR_PARSE, "rules text is too large (%zu bytes; at most %d)", len, PCGC__RULES_MAX_TEXT);
    pcgc_error_at(err, (pcgc_srcloc){path, 0, 0}, 0, NULL, 0);
    return PCGC_ERR_PARSE;
  }
  /* room for the file and its rules first, so that success cannot fail half-way */
  if (rs->n_files == rs->cap_files) {
    int cap = rs->cap_files ? rs->cap_files * 2 : 8;
    rs_file *v = realloc(rs->files, (size_t)cap * sizeof *v);
    if (!v) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory reading rules");
    rs->files = v;
    rs->cap_files = cap;
  }
  rs_file f = {strdup(path)};
  if (!f.path) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory reading rules");

  pcgc__src src = {text ? text : "", len, f.path, err};
  pcgc_rule **rules = NULL;
  int n = 0;
  pcgc_status s = pcgc__rules_parse(&src, rs, &rules, &n);
  if (s == PCGC_OK && rs->n + n > rs->cap) {
    int cap = rs->cap ? rs->cap : 16;
    while (cap < rs->n + n) cap *= 2;
    pcgc_rule **v = realloc(rs->rules, (size_t)cap * sizeof *v);
    if (!v)
      s = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory reading rules");
    else
      rs->rules = v, rs->cap = cap;
  }
  if (s != PCGC_OK) {
    for (int i = 0; i < n; i++) pcgc__rule_free(rules[i]);
    free(rules);
    free(f.path);
    return s;
  }
  int n0 = rs->n;
  rs->files[rs->n_files++] = f;
  for (int i = 0; i < n; i++) rs->rules[rs->n++] = rules[i];
  free(rules);
  for (int i = n0; i < rs->n; i++)
    if (pcgc__rule_index_add(&rs->index, rs->rules[i]) != PCGC_OK) {
      truncate_set(rs, n0, rs->n_files - 1);
      return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory reading rules");
    }
  return PCGC_OK;
}

pcgc_status pcgc_ruleset_load_file(pcgc_ruleset *rs, const char *path, pcgc_error *err) {
  size_t len;
  char *text = pcgc_read_file(path, &len, err);
  if (!text) return err ? err->status : PCGC_ERR_IO;
  pcgc_status s = pcgc_ruleset_parse(rs, text, len, path, err);
  free(text);
  return s;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n > k && strcmp(s + n - k, suffix) == 0;
}

pcgc_status pcgc_ruleset_load_dir(pcgc_ruleset *rs, const char *dir, pcgc_error *err) {
  pcgc_error local;
  if (!err) err = &local;
  if (!rs || !dir) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_ruleset_load_dir: no rule set or directory");
  DIR *d = opendir(dir);
  if (!d) {
    int e = errno;
    pcgc_error_set(err, PCGC_ERR_IO, "cannot open rules directory '%s': %s", dir, strerror(e));
    pcgc_error_at(err, (pcgc_srcloc){dir, 0, 0}, 0, NULL, 0);
    pcgc_error_hint(err, e == ENOENT ? "check the path given with --rules" : "check the directory's permissions");
    return PCGC_ERR_IO;
  }
  char **names = NULL;
  int n = 0, cap = 0;
  pcgc_status s = PCGC_OK;
  struct dirent *e;
  while (s == PCGC_OK && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || !has_suffix(e->d_name, ".rules")) continue;
    size_t plen = strlen(dir) + strlen(e->d_name) + 2;
    char *p = malloc(plen);
    if (!p) {
      s = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory listing '%s'", dir);
      break;
    }
    size_t dl = strlen(dir);
    snprintf(p, plen, "%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/", e->d_name); /* no "rules//x" */
    struct stat st;
    if (stat(p, &st) != 0 || S_ISDIR(st.st_mode)) {
      free(p);
      continue;
    }
    if (n == cap) {
      int nc = cap ? cap * 2 : 16;
      char **v = realloc(names, (size_t)nc * sizeof *v);
      if (!v) {
        free(p);
        s = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory listing '%s'", dir);
        break;
      }
      names = v;
      cap = nc;
    }
    names[n++] = p;
  }
  closedir(d);
  if (n > 1) qsort(names, (size_t)n, sizeof *names, cmp_names);
  int n0 = rs->n, f0 = rs->n_files;
  for (int i = 0; s == PCGC_OK && i < n; i++) s = pcgc_ruleset_load_file(rs, names[i], err);
  if (s != PCGC_OK) truncate_set(rs, n0, f0);
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  return s;
}

int pcgc_ruleset_size(const pcgc_ruleset *rs) { return rs ? rs->n : 0; }

const pcgc_rule *pcgc_ruleset_rule(const pcgc_ruleset *rs, int i) {
  return rs && i >= 0 && i < rs->n ? rs->rules[i] : NULL;
}

const pcgc_rule *pcgc_ruleset_find(const pcgc_ruleset *rs, const char *name) {
  return rs && name ? pcgc__rule_index_find(rs->index, name) : NULL;
}

void pcgc_ruleset_remove(pcgc_ruleset *rs, int i) {
  if (!rs || i < 0 || i >= rs->n) return;
  pcgc__rule_index_del(&rs->index, rs->rules[i]->name);
  pcgc__rule_free(rs->rules[i]);
  memmove(&rs->rules[i], &rs->rules[i + 1], (size_t)(rs->n - i - 1) * sizeof *rs->rules);
  rs->n--;
}

/* ------------------------------------------------------------ one rule */

const char *pcgc_rule_name(const pcgc_rule *r) { return r ? r->name : NULL; }

pcgc_srcloc pcgc_rule_loc(const pcgc_rule *r) { return r ? r->loc : (pcgc_srcloc){NULL, 0, 0}; }

int pcgc_rule_num_params(const pcgc_rule *r) { return r ? r->n_params : 0; }

const char *pcgc_rule_param_name(const pcgc_rule *r, int i) {
  return r && i >= 0 && i < r->n_params ? r->syms[i].name : NULL;
}

bool pcgc_rule_param_is_degree(const pcgc_rule *r, int i) {
  return r && i >= 0 && i < r->n_params && r->syms[i].kind == RS_DEGREE;
}
