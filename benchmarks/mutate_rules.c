/*
 * mutate_rules.c — how strong the soundness checker is, measured by mutation
 * (issue 17).
 *
 *   bench_mutate_rules [SOURCE_DIR] [--rules DIR] [--rule NAME] [--max N]
 *                      [--equivalent FILE] [--verbose] [--text] [--log]
 *
 * For every rule of the library (SOURCE_DIR/rules, or --rules DIR) it makes
 * mutants of the rule's REWRITE side only, by text: the rule's source is cut
 * out of its file, the rewrite block is read into statements
 * (`outs = op(args);`, `yield ...;`), one statement or the yield is changed,
 * and the block is printed back into the rule's text. The mutations:
 *
 *   swap    two tensor operands of a node swapped (every pair, up to 4 args)
 *   drop    a single-output node removed, its readers reading one of its
 *           tensor inputs instead (each input in turn)
 *   add     relu, scalar_mul(scalar=2) or scalar_add(scalar=1) inserted on a
 *           rewrite tensor or on a match input the rewrite reads
 *   op      an operator replaced by one of its family (relu/gelu/sigmoid/
 *           tanh/exp/identity; add/sub/mul/div; the scalar ops;
 *           reduce_sum/reduce_mean; partition/pipeline; combine/unpipeline;
 *           replicate/reduce)
 *   attr    an enum attribute set to each other value, a bool flipped, a
 *           float doubled, a list's entries swapped or rotated (a perm), an
 *           attribute removed (it takes its default, or the y.* copy), a
 *           y.* copy removed, an attribute the node leaves out given a
 *           non-default value (with y.*: every value the match does not pin)
 *   expr    integer arithmetic in an attribute (axis, dim, degree, sizes,
 *           perm entries...): the whole expression and every leaf +1, -1, *2,
 *           /2; every + - * / % replaced (+<->-, *<->/, /<->%); the operands
 *           of - / % swapped; a unary minus removed
 *   yield   two yields swapped
 *
 * Mutants whose text equals the original or another mutant are dropped. With
 * --max N (default 0: all) a rule keeps N mutants, taken round-robin
 * over the kinds above in a fixed pseudo-random order, so runs repeat.
 *
 * Each mutant is parsed and validated alone (pcgc_ruleset_parse: a failure is
 * "invalid", not a kill) and then checked by pcgc_rule_check with the default
 * options, the entry point of `pcgc rules check`. A mutant the checker refuses
 * is killed (by type: the rewrite does not type-check or yields another
 * type; by value: a yield or gradient differs); one it accepts survived.
 * Survivors listed in the equivalent-mutants file (default
 * SOURCE_DIR/benchmarks/mutants_equivalent.txt; lines `rule | mutant |
 * reason`, `#` comments) are equivalent to the rule and not counted against
 * the checker. Prints a line per rule, every other survivor as
 * `SURVIVED rule | mutant` (paste it into the file with a reason when it is
 * equivalent), allow-list entries no mutant matched, and finally
 * `N of M non-equivalent mutants rejected (P%)` and the rules with survivors.
 * Exit 0 when every non-equivalent mutant was rejected, 1 otherwise.
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "substitutions.h"

#ifndef PCGC_SOURCE_DIR
#define PCGC_SOURCE_DIR "."
#endif

/* ------------------------------------------------------------ tokens */

#define TOKLEN 64
#define MAX_TOKS 4096

typedef struct tok {
  char s[TOKLEN];
  size_t pos;   /* offset in the text */
} tok;

static bool is_ident(const char *s) { return isalpha((unsigned char)s[0]) || s[0] == '_'; }
static bool is_int(const char *s) { return isdigit((unsigned char)s[0]) && !strpbrk(s, ".eE"); }

/* Tokens of text[0..len): names, numbers (floats whole), one-character
 * punctuation; `#` comments skipped. Returns the count (-1: too many). */
static int lex(const char *text, size_t len, tok *t, int cap) {
  int n = 0;
  size_t i = 0;
  while (i < len) {
    char c = text[i];
    if (c == '#') {
      while (i < len && text[i] != '\n') i++;
      continue;
    }
    if (isspace((unsigned char)c)) {
      i++;
      continue;
    }
    if (n == cap) return -1;
    size_t j = i + 1;
    if (isalpha((unsigned char)c) || c == '_') {
      while (j < len && (isalnum((unsigned char)text[j]) || text[j] == '_')) j++;
    } else if (isdigit((unsigned char)c)) {
      while (j < len && (isalnum((unsigned char)text[j]) || text[j] == '.' ||
                         ((text[j] == '-' || text[j] == '+') && (text[j - 1] == 'e' || text[j - 1] == 'E'))))
        j++;
    }
    size_t k = j - i < TOKLEN ? j - i : TOKLEN - 1;
    memcpy(t[n].s, text + i, k);
    t[n].s[k] = 0;
    t[n].pos = i;
    n++;
    i = j;
  }
  return n;
}

/* --------------------------------------------------------- expressions */

typedef enum { E_NUM, E_ATOM, E_NEG, E_BIN } ekind;

typedef struct ex {
  ekind k;
  char op;              /* E_BIN: + - * / % */
  char text[160];       /* E_NUM, E_ATOM */
  struct ex *l, *r;
} ex;

typedef struct eparser {
  const tok *t;
  int i, n;
  ex pool[128];
  int used;
  bool bad;
} eparser;

static ex *enew(eparser *p, ekind k) {
  if (p->used == 128) {
    p->bad = true;
    return &p->pool[0];
  }
  ex *e = &p->pool[p->used++];
  memset(e, 0, sizeof *e);
  e->k = k;
  return e;
}

static bool at(const eparser *p, const char *s) { return p->i < p->n && strcmp(p->t[p->i].s, s) == 0; }

static ex *p_expr(eparser *p);

/* Appends tokens [a, b) to buf as text (used for opaque atoms). */
static void toks_text(const tok *t, int a, int b, char *buf, size_t n);

static ex *p_atom(eparser *p) {
  if (p->i >= p->n) {
    p->bad = true;
    return enew(p, E_NUM);
  }
  const char *s = p->t[p->i].s;
  if (is_int(s)) {
    ex *e = enew(p, E_NUM);
    snprintf(e->text, sizeof e->text, "%s", s);
    p->i++;
    return e;
  }
  if (strcmp(s, "(") == 0) {
    p->i++;
    ex *e = p_expr(p);
    if (!at(p, ")")) p->bad = true;
    p->i++;
    return e;
  }
  if (!is_ident(s)) {
    p->bad = true;
    return enew(p, E_NUM);
  }
  int a = p->i++;
  if ((strcmp(s, "rank") == 0 || strcmp(s, "size") == 0) && at(p, "(")) {
    int depth = 0;
    do {
      if (at(p, "(")) depth++;
      if (at(p, ")")) depth--;
      p->i++;
    } while (p->i < p->n && depth > 0);
  } else if (at(p, ".")) {
    p->i += 2;
    if (at(p, "[")) {
      int depth = 0;
      do {
        if (at(p, "[")) depth++;
        if (at(p, "]")) depth--;
        p->i++;
      } while (p->i < p->n && depth > 0);
    }
  }
  ex *e = enew(p, E_ATOM);
  toks_text(p->t, a, p->i, e->text, sizeof e->text);
  return e;
}

static ex *p_unary(eparser *p) {
  if (at(p, "-")) {
    p->i++;
    ex *e = enew(p, E_NEG);
    e->l = p_unary(p);
    return e;
  }
  return p_atom(p);
}

static ex *p_term(eparser *p) {
  ex *l = p_unary(p);
  while (at(p, "*") || at(p, "/") || at(p, "%")) {
    ex *e = enew(p, E_BIN);
    e->op = p->t[p->i++].s[0];
    e->l = l;
    e->r = p_unary(p);
    l = e;
  }
  return l;
}

static ex *p_expr(eparser *p) {
  ex *l = p_term(p);
  while (at(p, "+") || at(p, "-")) {
    ex *e = enew(p, E_BIN);
    e->op = p->t[p->i++].s[0];
    e->l = l;
    e->r = p_term(p);
    l = e;
  }
  return l;
}

/* The value of an expression of integer literals only; false when it reads
 * a name or divides by zero. */
static bool ex_const(const ex *e, long long *v) {
  long long a, b;
  switch (e->k) {
  case E_NUM:
    *v = strtoll(e->text, NULL, 10);
    return true;
  case E_ATOM:
    return false;
  case E_NEG:
    if (!ex_const(e->l, &a)) return false;
    *v = -a;
    return true;
  case E_BIN:
    if (!ex_const(e->l, &a) || !ex_const(e->r, &b)) return false;
    if ((e->op == '/' || e->op == '%') && b == 0) return false;
    *v = e->op == '+' ? a + b : e->op == '-' ? a - b : e->op == '*' ? a * b : e->op == '/' ? a / b : a % b;
    return true;
  }
  return false;
}

static int prec(const ex *e) {
  if (e->k == E_BIN) return e->op == '+' || e->op == '-' ? 1 : 2;
  return e->k == E_NEG ? 3 : 4;
}

/* Prints e with the parentheses its precedence needs. */
static void ex_print(const ex *e, char *buf, size_t n) {
  char a[512], b[512];
  switch (e->k) {
  case E_NUM:
  case E_ATOM:
    snprintf(buf, n, "%s", e->text);
    return;
  case E_NEG:
    ex_print(e->l, a, sizeof a);
    snprintf(buf, n, prec(e->l) < 3 ? "-(%s)" : "-%s", a);
    return;
  case E_BIN: {
    int pe = prec(e);
    ex_print(e->l, a, sizeof a);
    ex_print(e->r, b, sizeof b);
    bool pl = prec(e->l) < pe, pr = prec(e->r) <= pe && !(prec(e->r) == pe && (e->op == '+' || e->op == '*'));
    if (snprintf(buf, n, "%s%s%s %c %s%s%s", pl ? "(" : "", a, pl ? ")" : "", e->op, pr ? "(" : "", b, pr ? ")" : "") >=
        (int)n)
      buf[n - 1] = '\0'; /* longer than any shipped rule's expression: cut (the mutant then fails to parse) */
    return;
  }
  }
}

/* ------------------------------------------------------------ statements */

#define MAX_ARGS 16
#define MAX_STMTS 24
#define MAX_OUTS 8

typedef enum { A_TENSOR, A_COPY, A_ATTR } akind;

typedef struct arg {
  akind k;
  char name[TOKLEN];    /* tensor, copied node's output, or attribute key */
  char val[512];        /* A_ATTR: the value's text */
} arg;

typedef struct stmt {
  bool yield;
  int n_out;
  char outs[MAX_OUTS][TOKLEN];  /* yield: the yielded names */
  char op[TOKLEN];
  int n_arg;
  arg args[MAX_ARGS];
} stmt;

typedef struct block {
  int n;
  stmt s[MAX_STMTS];
} block;

static void toks_text(const tok *t, int a, int b, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = a; i < b && used + 1 < n; i++) {
    const char *s = t[i].s, *prev = i > a ? t[i - 1].s : "";
    /* a unary minus: after an operator, an opening bracket, a comma or `=` */
    bool unary = strcmp(prev, "-") == 0 && (i - 1 == a || strchr("([,=+-*/%", t[i - 2].s[0]) != NULL);
    bool tight = i == a || unary || !strcmp(s, ".") || !strcmp(prev, ".") || !strcmp(s, ",") || !strcmp(s, ")") ||
                 !strcmp(s, "]") || !strcmp(prev, "(") || !strcmp(prev, "[") ||
                 (!strcmp(s, "(") && (!strcmp(prev, "rank") || !strcmp(prev, "size"))) ||
                 (!strcmp(s, "[") && is_ident(prev));
    int w = snprintf(buf + used, n - used, "%s%s", tight ? "" : " ", s);
    if (w > 0) used += (size_t)w;
  }
}

/* Reads statements from tokens [a, b): `outs = op(args);`, `yield ...;`, and
 * skips `input ...;` (match blocks). false when a statement is not one. */
static bool read_block(const tok *t, int a, int b, block *blk) {
  blk->n = 0;
  int i = a;
  while (i < b) {
    int end = i;
    while (end < b && strcmp(t[end].s, ";") != 0) end++;
    if (end == b) return false;
    if (strcmp(t[i].s, "input") == 0) {
      i = end + 1;
      continue;
    }
    if (blk->n == MAX_STMTS) return false;
    stmt *s = &blk->s[blk->n++];
    memset(s, 0, sizeof *s);
    if (strcmp(t[i].s, "yield") == 0) {
      s->yield = true;
      for (int k = i + 1; k < end; k += 2) {
        if (s->n_out == MAX_OUTS) return false;
        snprintf(s->outs[s->n_out++], TOKLEN, "%s", t[k].s);
      }
      i = end + 1;
      continue;
    }
    int k = i;
    while (k < end && strcmp(t[k].s, "=") != 0) {
      if (strcmp(t[k].s, ",") != 0) {
        if (s->n_out == MAX_OUTS) return false;
        snprintf(s->outs[s->n_out++], TOKLEN, "%s", t[k].s);
      }
      k++;
    }
    if (k + 2 >= end || strcmp(t[k + 2].s, "(") != 0 || strcmp(t[end - 1].s, ")") != 0) return false;
    snprintf(s->op, TOKLEN, "%s", t[k + 1].s);
    int p = k + 3, close = end - 1;
    while (p < close) {
      int q = p, depth = 0;
      while (q < close && !(depth == 0 && strcmp(t[q].s, ",") == 0)) {
        if (!strcmp(t[q].s, "(") || !strcmp(t[q].s, "[")) depth++;
        if (!strcmp(t[q].s, ")") || !strcmp(t[q].s, "]")) depth--;
        q++;
      }
      if (s->n_arg == MAX_ARGS) return false;
      arg *ag = &s->args[s->n_arg++];
      snprintf(ag->name, TOKLEN, "%s", t[p].s);
      if (q - p >= 3 && strcmp(t[p + 1].s, "=") == 0) {
        ag->k = A_ATTR;
        toks_text(t, p + 2, q, ag->val, sizeof ag->val);
      } else if (q - p == 3 && strcmp(t[p + 1].s, ".") == 0 && strcmp(t[p + 2].s, "*") == 0) {
        ag->k = A_COPY;
      } else if (q - p == 1) {
        ag->k = A_TENSOR;
      } else {
        return false;
      }
      p = q + 1;
    }
    i = end + 1;
  }
  return true;
}

static void print_stmt(const stmt *s, char *buf, size_t n) {
  size_t used = 0;
  int w;
#define PUT(...) (w = snprintf(buf + used, used < n ? n - used : 0, __VA_ARGS__), used += w > 0 ? (size_t)w : 0)
  buf[0] = 0;
  if (s->yield) {
    PUT("yield");
    for (int i = 0; i < s->n_out; i++) PUT("%s %s", i ? "," : "", s->outs[i]);
    PUT(";");
    return;
  }
  for (int i = 0; i < s->n_out; i++) PUT("%s%s", i ? ", " : "", s->outs[i]);
  PUT(" = %s(", s->op);
  for (int i = 0; i < s->n_arg; i++) {
    const arg *a = &s->args[i];
    if (i) PUT(", ");
    if (a->k == A_TENSOR) PUT("%s", a->name);
    else if (a->k == A_COPY) PUT("%s.*", a->name);
    else PUT("%s=%s", a->name, a->val);
  }
  PUT(");");
#undef PUT
}

/* ------------------------------------------------------------- mutants */

enum { K_SWAP, K_DROP, K_ADD, K_OP, K_ATTR, K_EXPR, K_YIELD, K_COUNT };
static const char *const KIND_NAME[K_COUNT] = {"swap", "drop", "add", "op", "attr", "expr", "yield"};

typedef struct mutant {
  int kind;
  char desc[1400];
  char *text;       /* the whole mutated rule */
} mutant;

typedef struct mlist {
  mutant *m;
  int n, cap;
} mlist;

/* One rule being mutated. */
typedef struct rulesrc {
  const char *name;
  const char *text;       /* the rule's source, `rule` .. its closing brace */
  size_t len;
  size_t body_a, body_b;  /* the rewrite block's contents: text[body_a..body_b) */
  block rw;               /* the rewrite block */
  block mt;               /* the match block (for y.* sources) */
  mlist *out;
  int fresh;              /* counter for inserted tensor names */
} rulesrc;

static void add_mutant(rulesrc *R, int kind, const block *b, const char *fmt, ...) {
  char body[8192];
  size_t used = 0;
  for (int i = 0; i < b->n && used < sizeof body; i++) {
    char st[1024];
    print_stmt(&b->s[i], st, sizeof st);
    int w = snprintf(body + used, sizeof body - used, "\n    %s", st);
    if (w > 0) used += (size_t)w;
  }
  if (used >= sizeof body) return;
  size_t n = R->body_a + used + 3 + (R->len - R->body_b);
  char *text = malloc(n + 1);
  if (!text) return;
  memcpy(text, R->text, R->body_a);
  memcpy(text + R->body_a, body, used);
  memcpy(text + R->body_a + used, "\n  ", 3);
  memcpy(text + R->body_a + used + 3, R->text + R->body_b, R->len - R->body_b);
  text[n] = 0;
  /* the same rule again, or a mutant already made */
  bool same = n == R->len && memcmp(text, R->text, n) == 0;
  for (int i = 0; i < R->out->n && !same; i++) same = strcmp(R->out->m[i].text, text) == 0;
  char desc[1400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(desc, sizeof desc, fmt, ap);
  va_end(ap);
  for (int i = 0; i < R->out->n && !same; i++) same = strcmp(R->out->m[i].desc, desc) == 0;
  if (same) {
    free(text);
    return;
  }
  if (R->out->n == R->out->cap) {
    int cap = R->out->cap ? 2 * R->out->cap : 64;
    mutant *m = realloc(R->out->m, (size_t)cap * sizeof *m);
    if (!m) {
      free(text);
      return;
    }
    R->out->m = m;
    R->out->cap = cap;
  }
  mutant *m = &R->out->m[R->out->n++];
  m->kind = kind;
  snprintf(m->desc, sizeof m->desc, "%s", desc);
  m->text = text;
}

/* A node statement changed: records it as `kind: old -> new`. */
static void add_changed(rulesrc *R, int kind, const block *b, int i) {
  char was[1024], now[1024];
  print_stmt(&R->rw.s[i], was, sizeof was);
  print_stmt(&b->s[i], now, sizeof now);
  add_mutant(R, kind, b, "%s: `%s` -> `%s`", KIND_NAME[kind], was, now);
}

/* Readers of `from` in statements [first, n) read `to` instead. */
static void rename_uses(block *b, int first, const char *from, const char *to) {
  for (int i = first; i < b->n; i++) {
    stmt *s = &b->s[i];
    if (s->yield) {
      for (int k = 0; k < s->n_out; k++)
        if (strcmp(s->outs[k], from) == 0) snprintf(s->outs[k], TOKLEN, "%s", to);
      continue;
    }
    for (int k = 0; k < s->n_arg; k++)
      if (s->args[k].k == A_TENSOR && strcmp(s->args[k].name, from) == 0) snprintf(s->args[k].name, TOKLEN, "%s", to);
  }
}

static int n_tensor_args(const stmt *s) {
  int n = 0;
  while (n < s->n_arg && s->args[n].k == A_TENSOR) n++;
  return n;
}

static void mut_swap(rulesrc *R) {
  for (int i = 0; i < R->rw.n; i++) {
    const stmt *s = &R->rw.s[i];
    /* add and mul commute: swapping their operands makes only equivalent mutants */
    if (s->yield || !strcmp(s->op, "add") || !strcmp(s->op, "mul")) continue;
    int nt = n_tensor_args(s);
    if (nt > 4) nt = 4;
    for (int a = 0; a < nt; a++)
      for (int c = a + 1; c < nt; c++) {
        if (strcmp(s->args[a].name, s->args[c].name) == 0) continue;
        block b = R->rw;
        arg t = b.s[i].args[a];
        b.s[i].args[a] = b.s[i].args[c];
        b.s[i].args[c] = t;
        add_changed(R, K_SWAP, &b, i);
      }
  }
}

static void mut_drop(rulesrc *R) {
  for (int i = 0; i < R->rw.n; i++) {
    const stmt *s = &R->rw.s[i];
    if (s->yield || s->n_out != 1) continue;
    int nt = n_tensor_args(s);
    for (int a = 0; a < nt; a++) {
      bool seen = false;
      for (int c = 0; c < a; c++) seen |= strcmp(s->args[c].name, s->args[a].name) == 0;
      if (seen) continue;
      block b = R->rw;
      memmove(&b.s[i], &b.s[i + 1], (size_t)(b.n - i - 1) * sizeof b.s[0]);
      b.n--;
      rename_uses(&b, i, s->outs[0], s->args[a].name);
      char was[1024];
      print_stmt(s, was, sizeof was);
      add_mutant(R, K_DROP, &b, "drop: `%s`, its readers read %s", was, s->args[a].name);
    }
  }
}

/* Inserts `fresh = op(T)` before statement `at` and renames later uses of T. */
static void insert_op(rulesrc *R, int at_, const char *t, const char *op, const char *attr) {
  if (R->rw.n == MAX_STMTS) return;
  block b = R->rw;
  memmove(&b.s[at_ + 1], &b.s[at_], (size_t)(b.n - at_) * sizeof b.s[0]);
  b.n++;
  stmt *s = &b.s[at_];
  memset(s, 0, sizeof *s);
  char name[TOKLEN];
  snprintf(name, sizeof name, "mut_%s_%s", t, op);
  snprintf(s->outs[0], TOKLEN, "%s", name);
  s->n_out = 1;
  snprintf(s->op, TOKLEN, "%s", op);
  s->n_arg = 1;
  s->args[0].k = A_TENSOR;
  snprintf(s->args[0].name, TOKLEN, "%s", t);
  if (attr) {
    s->args[1].k = A_ATTR;
    const char *eq = strchr(attr, '=');
    snprintf(s->args[1].name, TOKLEN, "%.*s", (int)(eq - attr), attr);
    snprintf(s->args[1].val, sizeof s->args[1].val, "%s", eq + 1);
    s->n_arg = 2;
  }
  rename_uses(&b, at_ + 1, t, name);
  char ins[1024];
  print_stmt(s, ins, sizeof ins);
  add_mutant(R, K_ADD, &b, "add: `%s` (readers of %s read it)", ins, t);
}

static void mut_add(rulesrc *R) {
  static const char *const OPS[][2] = {{"relu", NULL}, {"scalar_mul", "scalar=2"}, {"scalar_add", "scalar=1"}};
  /* match inputs the rewrite reads (names read but not defined in the rewrite) */
  char seen[64][TOKLEN];
  int n_seen = 0;
  for (int i = 0; i < R->rw.n; i++) {
    const stmt *s = &R->rw.s[i];
    int nt = s->yield ? s->n_out : n_tensor_args(s);
    for (int a = 0; a < nt; a++) {
      const char *nm = s->yield ? s->outs[a] : s->args[a].name;
      bool defined = false, dup = false;
      for (int j = 0; j < i && !defined; j++)
        for (int o = 0; o < R->rw.s[j].n_out && !R->rw.s[j].yield; o++) defined |= strcmp(R->rw.s[j].outs[o], nm) == 0;
      for (int k = 0; k < n_seen; k++) dup |= strcmp(seen[k], nm) == 0;
      if (defined || dup || n_seen == 64) continue;
      snprintf(seen[n_seen++], TOKLEN, "%s", nm);
      for (int o = 0; o < 3; o++) insert_op(R, 0, nm, OPS[o][0], OPS[o][1]);
    }
  }
  /* every rewrite tensor, right after its node */
  for (int i = 0; i < R->rw.n; i++) {
    const stmt *s = &R->rw.s[i];
    if (s->yield) continue;
    for (int k = 0; k < s->n_out; k++) {
      if (strcmp(s->outs[k], "_") == 0) continue;
      for (int o = 0; o < 3; o++) insert_op(R, i + 1, s->outs[k], OPS[o][0], OPS[o][1]);
    }
  }
}

static const char *const FAMILIES[][13] = {
    {"relu", "gelu", "sigmoid", "silu", "relu6", "hardsigmoid", "hardswish", "leaky_relu", "tanh", "exp", "identity",
     NULL},
    {"add", "sub", "mul", "div", NULL},
    {"scalar_add", "scalar_sub", "scalar_mul", "scalar_div", NULL},
    {"reduce_sum", "reduce_mean", NULL},
    {"partition", "pipeline", NULL},
    {"combine", "unpipeline", NULL},
    {"replicate", "reduce", NULL},
};

static void mut_op(rulesrc *R) {
  for (int i = 0; i < R->rw.n; i++) {
    const stmt *s = &R->rw.s[i];
    if (s->yield) continue;
    for (size_t f = 0; f < sizeof FAMILIES / sizeof FAMILIES[0]; f++) {
      bool in = false;
      for (int k = 0; FAMILIES[f][k]; k++) in |= strcmp(FAMILIES[f][k], s->op) == 0;
      if (!in) continue;
      for (int k = 0; FAMILIES[f][k]; k++) {
        if (strcmp(FAMILIES[f][k], s->op) == 0) continue;
        block b = R->rw;
        snprintf(b.s[i].op, TOKLEN, "%s", FAMILIES[f][k]);
        add_changed(R, K_OP, &b, i);
      }
    }
  }
}

/* Variants of an integer expression, each printed into out[] (at most cap). */
static int expr_variants(const char *text, char (*out)[512], int cap) {
  tok t[256];
  int n = lex(text, strlen(text), t, 256);
  if (n <= 0) return 0;
  eparser *p = calloc(1, sizeof *p);
  if (!p) return 0;
  p->t = t;
  p->n = n;
  ex *root = p_expr(p);
  int got = 0;
  if (p->bad || p->i != n) {
    free(p);
    return 0;
  }
  int base = p->used;
  long long c0 = 0, c1;
  bool is_const = ex_const(root, &c0);
  /* a constant expression mutated to the same value is the same rule */
#define EMIT()                                                                   \
  do {                                                                           \
    if (!(is_const && ex_const(root, &c1) && c1 == c0)) ex_print(root, out[got++], 512); \
  } while (0)
  /* every node in turn: wrap it, change its operator, swap or unwrap */
  for (int idx = 0; idx < base && got < cap; idx++) {
    ex *e = &p->pool[idx];
    ex saved = *e;
    bool leaf_or_root = e == root || e->k == E_NUM || e->k == E_ATOM;
    if (leaf_or_root) {
      static const struct { char op; const char *v; } W[] = {{'+', "1"}, {'-', "1"}, {'*', "2"}, {'/', "2"}};
      for (int w = 0; w < 4 && got < cap; w++) {
        ex *inner = enew(p, E_NUM), *k = enew(p, E_NUM);
        *inner = saved;
        snprintf(k->text, sizeof k->text, "%s", W[w].v);
        e->k = E_BIN;
        e->op = W[w].op;
        e->l = inner;
        e->r = k;
        EMIT();
        *e = saved;
        p->used -= 2;
      }
    }
    if (e->k == E_BIN) {
      const char *to = e->op == '+' ? "-" : e->op == '-' ? "+" : e->op == '*' ? "/" : e->op == '/' ? "*%" : "/";
      for (const char *c = to; *c && got < cap; c++) {
        e->op = *c;
        EMIT();
        *e = saved;
      }
      if ((e->op == '-' || e->op == '/' || e->op == '%') && got < cap) {
        e->l = saved.r;
        e->r = saved.l;
        EMIT();
        *e = saved;
      }
    }
    if (e->k == E_NEG && got < cap) {
      *e = *saved.l;
      EMIT();
      *e = saved;
    }
  }
#undef EMIT
  free(p);
  return got;
}

/* The match statement defining tensor `name`, or NULL. */
static const stmt *match_def(const rulesrc *R, const char *name) {
  for (int i = 0; i < R->mt.n; i++)
    for (int k = 0; k < R->mt.s[i].n_out && !R->mt.s[i].yield; k++)
      if (strcmp(R->mt.s[i].outs[k], name) == 0) return &R->mt.s[i];
  return NULL;
}

static const char *attr_val(const stmt *s, const char *key) {
  for (int k = 0; s && k < s->n_arg; k++)
    if (s->args[k].k == A_ATTR && strcmp(s->args[k].name, key) == 0) return s->args[k].val;
  return NULL;
}

/* Replaces attribute k's value of node i with v. */
static void set_attr(rulesrc *R, int kind, int i, int k, const char *v) {
  block b = R->rw;
  snprintf(b.s[i].args[k].val, sizeof b.s[i].args[k].val, "%s", v);
  add_changed(R, kind, &b, i);
}

/* A list value `[e0, e1, ...]` split into its entries; -1 when not a list. */
static int list_entries(const char *v, char (*e)[512], int cap) {
  tok t[256];
  int n = lex(v, strlen(v), t, 256);
  if (n < 2 || strcmp(t[0].s, "[") != 0 || strcmp(t[n - 1].s, "]") != 0) return -1;
  int got = 0, p = 1;
  while (p < n - 1 && got < cap) {
    int q = p, depth = 0;
    while (q < n - 1 && !(depth == 0 && strcmp(t[q].s, ",") == 0)) {
      if (!strcmp(t[q].s, "(") || !strcmp(t[q].s, "[")) depth++;
      if (!strcmp(t[q].s, ")") || !strcmp(t[q].s, "]")) depth--;
      q++;
    }
    toks_text(t, p, q, e[got++], 512);
    p = q + 1;
  }
  return got;
}

static void list_print(char (*e)[512], int n, char *buf, size_t cap) {
  size_t used = 0;
  int w = snprintf(buf, cap, "[");
  used = w > 0 ? (size_t)w : 0;
  for (int i = 0; i < n && used < cap; i++) {
    w = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", e[i]);
    if (w > 0) used += (size_t)w;
  }
  if (used < cap) snprintf(buf + used, cap - used, "]");
}

static void mut_attr_value(rulesrc *R, int i, int k) {
  const stmt *s = &R->rw.s[i];
  const arg *a = &s->args[k];
  int op = pcgc_op_from_name(s->op);
  int ai = op >= 0 ? pcgc_op_attr_index((pcgc_op_kind)op, a->name) : -1;
  if (ai < 0) return;
  const pcgc_attr_desc *d = pcgc_op_attr((pcgc_op_kind)op, ai);
  char v[512];
  switch (d->type) {
  case PCGC_ATTR_ENUM:
    for (int e = 0; pcgc_enum_value_name(d->enum_type, e); e++) set_attr(R, K_ATTR, i, k, pcgc_enum_value_name(d->enum_type, e));
    break;
  case PCGC_ATTR_BOOL:
    set_attr(R, K_ATTR, i, k, "true");
    set_attr(R, K_ATTR, i, k, "false");
    break;
  case PCGC_ATTR_FLOAT: {
    char *end;
    double f = strtod(a->val, &end);
    if (*end) f = 1;
    snprintf(v, sizeof v, "%.17g", f == 0 ? 0.5 : 2 * f);
    if (!strpbrk(v, ".e")) strcat(v, ".0");
    set_attr(R, K_ATTR, i, k, v);
    break;
  }
  case PCGC_ATTR_INTS:
  case PCGC_ATTR_INTS2: {
    char e[PCGC_MAX_INTS][512];
    int n = list_entries(a->val, e, PCGC_MAX_INTS);
    if (n > 0) {
      /* a permutation: swap neighbours, rotate */
      for (int p = 0; p + 1 < n; p++) {
        char t2[PCGC_MAX_INTS][512];
        memcpy(t2, e, sizeof e);
        memcpy(t2[p], e[p + 1], 512);
        memcpy(t2[p + 1], e[p], 512);
        list_print(t2, n, v, sizeof v);
        set_attr(R, K_ATTR, i, k, v);
      }
      if (n >= 3) {
        char t2[PCGC_MAX_INTS][512];
        for (int p = 0; p < n; p++) memcpy(t2[p], e[(p + 1) % n], 512);
        list_print(t2, n, v, sizeof v);
        set_attr(R, K_ATTR, i, k, v);
      }
      /* each entry's arithmetic */
      for (int p = 0; p < n; p++) {
        char var[24][512];
        int nv = expr_variants(e[p], var, 24);
        for (int q = 0; q < nv; q++) {
          char t2[PCGC_MAX_INTS][512];
          memcpy(t2, e, sizeof e);
          memcpy(t2[p], var[q], 512);
          list_print(t2, n, v, sizeof v);
          set_attr(R, K_EXPR, i, k, v);
        }
      }
      break;
    }
  }
    /* a scalar for a list (every entry): */
    /* fall through */
  case PCGC_ATTR_INT: {
    char var[48][512];
    int nv = expr_variants(a->val, var, 48);
    for (int q = 0; q < nv; q++) set_attr(R, K_EXPR, i, k, var[q]);
    break;
  }
  }
}

/* Values to give attribute d of a node that leaves it out: non-default ones,
 * or with a y.* copy every value the match node does not pin. */
static int new_values(const pcgc_attr_desc *d, const char *src, const char *pinned, char (*out)[512], int cap) {
  int n = 0;
  switch (d->type) {
  case PCGC_ATTR_ENUM:
    for (int e = 0; pcgc_enum_value_name(d->enum_type, e) && n < cap; e++) {
      const char *nm = pcgc_enum_value_name(d->enum_type, e);
      if (src ? pinned && strcmp(pinned, nm) == 0 : e == d->def_i) continue;
      snprintf(out[n++], 512, "%s", nm);
    }
    break;
  case PCGC_ATTR_BOOL:
    for (int e = 0; e < 2 && n < cap; e++) {
      const char *nm = e ? "true" : "false";
      if (src ? pinned && strcmp(pinned, nm) == 0 : e == d->def_i) continue;
      snprintf(out[n++], 512, "%s", nm);
    }
    break;
  case PCGC_ATTR_FLOAT:
    snprintf(out[n++], 512, "%.17g", d->def_f == 0 ? 0.5 : 2 * d->def_f);
    if (!strpbrk(out[n - 1], ".e")) strcat(out[n - 1], ".0");
    break;
  case PCGC_ATTR_INT:
    if (src) snprintf(out[n++], 512, "%s.%s + 1", src, d->name);
    else snprintf(out[n++], 512, "%lld", (long long)d->def_i + 1);
    break;
  case PCGC_ATTR_INTS2:
    if (src) {
      snprintf(out[n++], 512, "[%s.%s[1], %s.%s[0]]", src, d->name, src, d->name);
      snprintf(out[n++], 512, "[%s.%s[0] + 1, %s.%s[1]]", src, d->name, src, d->name);
    } else {
      snprintf(out[n++], 512, "%lld", (long long)d->def_i + 1);
    }
    break;
  case PCGC_ATTR_INTS:
    break;
  }
  return n;
}

static void mut_attr(rulesrc *R) {
  for (int i = 0; i < R->rw.n; i++) {
    const stmt *s = &R->rw.s[i];
    if (s->yield) continue;
    const char *src = NULL;
    for (int k = 0; k < s->n_arg; k++) {
      const arg *a = &s->args[k];
      if (a->k == A_ATTR) {
        mut_attr_value(R, i, k);
      }
      if (a->k == A_TENSOR) continue;
      if (a->k == A_COPY) {
        src = a->name;
        int opk = pcgc_op_from_name(s->op);
        if (opk >= 0 && pcgc_op_num_attrs((pcgc_op_kind)opk) == 0) continue;   /* copies nothing */
      }
      /* removed: the attribute takes its default (or the copy's value) */
      block b = R->rw;
      memmove(&b.s[i].args[k], &b.s[i].args[k + 1], (size_t)(s->n_arg - k - 1) * sizeof s->args[0]);
      b.s[i].n_arg--;
      add_changed(R, K_ATTR, &b, i);
    }
    /* attributes the node leaves out */
    int op = pcgc_op_from_name(s->op);
    if (op < 0) continue;
    const stmt *def = src ? match_def(R, src) : NULL;
    for (int ai = 0; ai < pcgc_op_num_attrs((pcgc_op_kind)op); ai++) {
      const pcgc_attr_desc *d = pcgc_op_attr((pcgc_op_kind)op, ai);
      if (d->required || attr_val(s, d->name) || s->n_arg == MAX_ARGS) continue;
      char vals[8][512];
      int nv = new_values(d, src, def ? attr_val(def, d->name) : NULL, vals, 8);
      for (int q = 0; q < nv; q++) {
        block b = R->rw;
        arg *na = &b.s[i].args[b.s[i].n_arg++];
        na->k = A_ATTR;
        snprintf(na->name, TOKLEN, "%s", d->name);
        snprintf(na->val, sizeof na->val, "%s", vals[q]);
        add_changed(R, K_ATTR, &b, i);
      }
    }
  }
}

static void mut_yield(rulesrc *R) {
  for (int i = 0; i < R->rw.n; i++) {
    const stmt *s = &R->rw.s[i];
    if (!s->yield) continue;
    for (int a = 0; a < s->n_out; a++)
      for (int c = a + 1; c < s->n_out; c++) {
        if (strcmp(s->outs[a], s->outs[c]) == 0) continue;
        block b = R->rw;
        snprintf(b.s[i].outs[a], TOKLEN, "%s", s->outs[c]);
        snprintf(b.s[i].outs[c], TOKLEN, "%s", s->outs[a]);
        add_changed(R, K_YIELD, &b, i);
      }
  }
}

/* Finds the block `KEYWORD { ... }` at brace depth 1 of the rule: the
 * tokens strictly inside its braces. */
static bool find_block(const tok *t, int n, const char *kw, int *a, int *b) {
  int depth = 0;
  for (int i = 0; i < n; i++) {
    if (!strcmp(t[i].s, "{")) depth++;
    else if (!strcmp(t[i].s, "}")) depth--;
    else if (depth == 1 && !strcmp(t[i].s, kw) && i + 1 < n && !strcmp(t[i + 1].s, "{")) {
      int d = 0, j = i + 1;
      for (; j < n; j++) {
        if (!strcmp(t[j].s, "{")) d++;
        if (!strcmp(t[j].s, "}") && --d == 0) break;
      }
      if (j == n) return false;
      *a = i + 2;
      *b = j;
      return true;
    }
  }
  return false;
}

/* Every mutant of one rule into out. false when the rule's text is not
 * understood (then it is reported and skipped). */
static bool mutate(const char *name, const char *text, size_t len, mlist *out) {
  static tok t[MAX_TOKS];
  int n = lex(text, len, t, MAX_TOKS);
  int ra, rb, ma, mb;
  if (n < 0 || !find_block(t, n, "rewrite", &ra, &rb) || !find_block(t, n, "match", &ma, &mb)) return false;
  rulesrc *R = calloc(1, sizeof *R);
  if (!R) return false;
  R->name = name;
  R->text = text;
  R->len = len;
  R->body_a = t[ra - 1].pos + 1;
  R->body_b = t[rb].pos;
  R->out = out;
  bool ok = read_block(t, ra, rb, &R->rw) && read_block(t, ma, mb, &R->mt);
  if (ok) {
    mut_swap(R);
    mut_drop(R);
    mut_add(R);
    mut_op(R);
    mut_attr(R);
    mut_yield(R);
  }
  free(R);
  return ok;
}

/* ------------------------------------------------------ rules from files */

typedef struct rule_text {
  char name[TOKLEN];
  char file[256];
  int line;
  char *text;
  size_t len;
} rule_text;

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  fclose(f);
  if (s) {
    s[n] = 0;
    *len = (size_t)n;
  }
  return s;
}

/* Cuts every `rule NAME ... { ... }` out of a file's text. */
static int split_rules(const char *file, const char *s, size_t len, rule_text **rules, int *n, int *cap) {
  static tok t[1 << 17];
  int nt = lex(s, len, t, 1 << 17);
  if (nt < 0) return -1;
  int depth = 0;
  for (int i = 0; i < nt; i++) {
    if (!strcmp(t[i].s, "{")) depth++;
    else if (!strcmp(t[i].s, "}")) depth--;
    else if (depth == 0 && !strcmp(t[i].s, "rule") && i + 1 < nt) {
      int j = i, d = 0;
      while (j < nt && strcmp(t[j].s, "{")) j++;
      for (; j < nt; j++) {
        if (!strcmp(t[j].s, "{")) d++;
        if (!strcmp(t[j].s, "}") && --d == 0) break;
      }
      if (j == nt) return -1;
      if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        rule_text *r = realloc(*rules, (size_t)*cap * sizeof *r);
        if (!r) return -1;
        *rules = r;
      }
      rule_text *r = &(*rules)[(*n)++];
      snprintf(r->name, sizeof r->name, "%s", t[i + 1].s);
      snprintf(r->file, sizeof r->file, "%s", file);
      r->line = 1;
      for (size_t p = 0; p < t[i].pos; p++) r->line += s[p] == '\n';
      r->len = t[j].pos + 1 - t[i].pos;
      r->text = malloc(r->len + 2);
      if (!r->text) return -1;
      memcpy(r->text, s + t[i].pos, r->len);
      r->text[r->len++] = '\n';
      r->text[r->len] = 0;
      i = j;
    }
  }
  return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* -------------------------------------------------------- the allow-list */

typedef struct equiv {
  char *rule, *desc;
  bool used;
} equiv;

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
  return s;
}

/* Lines `rule | mutant | reason`; `#` at the start of a line is a comment. */
static int load_equiv(const char *path, equiv **out) {
  size_t len;
  char *s = read_all(path, &len);
  if (!s) return 0;
  int n = 0, cap = 0;
  *out = NULL;
  for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
    char *l = trim(line);
    if (!*l || *l == '#') continue;
    char *bar1 = strstr(l, " | ");
    char *bar2 = bar1 ? strstr(bar1 + 3, " | ") : NULL;
    if (!bar1) continue;
    *bar1 = 0;
    if (bar2) *bar2 = 0;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      equiv *e = realloc(*out, (size_t)cap * sizeof *e);
      if (!e) break;
      *out = e;
    }
    (*out)[n].rule = strdup(trim(l));
    (*out)[n].desc = strdup(trim(bar1 + 3));
    (*out)[n].used = false;
    n++;
  }
  free(s);
  return n;
}

/* ------------------------------------------------------------------ main */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Keeps at most max mutants: round-robin over the kinds, each kind's
 * mutants in a fixed pseudo-random order (seeded by the rule's name). */
static void sample(mlist *ml, int max, const char *rule) {
  if (max <= 0 || ml->n <= max) return;
  uint64_t seed = 0x6d757461;
  for (const char *c = rule; *c; c++) seed = seed * 131 + (uint8_t)*c;
  int *order = malloc((size_t)ml->n * sizeof *order);
  uint64_t *key = malloc((size_t)ml->n * sizeof *key);
  mutant *keep = malloc((size_t)max * sizeof *keep);
  bool *taken = calloc((size_t)ml->n, sizeof *taken);
  if (!order || !key || !keep || !taken) goto done;
  for (int i = 0; i < ml->n; i++) {
    order[i] = i;
    key[i] = mix(seed + (uint64_t)i * 0x9E3779B97F4A7C15ull);
  }
  for (int i = 1; i < ml->n; i++)   /* by key (insertion sort: small n) */
    for (int j = i; j > 0 && key[order[j]] < key[order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  int got = 0;
  while (got < max) {
    int before = got;
    for (int k = 0; k < K_COUNT && got < max; k++)
      for (int i = 0; i < ml->n; i++)
        if (!taken[order[i]] && ml->m[order[i]].kind == k) {
          taken[order[i]] = true;
          keep[got++] = ml->m[order[i]];
          break;
        }
    if (got == before) break;
  }
  for (int i = 0; i < ml->n; i++)
    if (!taken[i]) free(ml->m[i].text);
  memcpy(ml->m, keep, (size_t)got * sizeof *keep);
  ml->n = got;
done:
  free(order);
  free(key);
  free(keep);
  free(taken);
}

static int usage(void) {
  fprintf(stderr, "usage: bench_mutate_rules [SOURCE_DIR] [--rules DIR] [--rule NAME] [--max N] [--equivalent FILE] "
                  "[--verbose] [--text] [--log]\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *dir = getenv("PCGC_SOURCE_DIR");
  if (!dir || !*dir) dir = PCGC_SOURCE_DIR;
  const char *rules_dir = NULL, *only = NULL, *equiv_path = NULL;
  int max = 0;
  bool verbose = false, show_text = false, log_instances = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--rules") && v) rules_dir = argv[++i];
    else if (!strcmp(a, "--rule") && v) only = argv[++i];
    else if (!strcmp(a, "--max") && v) max = atoi(argv[++i]);
    else if (!strcmp(a, "--equivalent") && v) equiv_path = argv[++i];
    else if (!strcmp(a, "--verbose")) verbose = true;
    else if (!strcmp(a, "--text")) show_text = true;
    else if (!strcmp(a, "--log")) log_instances = true;
    else if (a[0] != '-') dir = a;
    else return usage();
  }
  char path[4096], equiv_default[4096];
  if (!rules_dir) {
    snprintf(path, sizeof path, "%s/rules", dir);
    rules_dir = path;
  }
  if (!equiv_path) {
    snprintf(equiv_default, sizeof equiv_default, "%s/benchmarks/mutants_equivalent.txt", dir);
    equiv_path = equiv_default;
  }
  equiv *eq = NULL;
  int n_eq = load_equiv(equiv_path, &eq);

  /* the rule texts, files in name order */
  DIR *d = opendir(rules_dir);
  if (!d) {
    fprintf(stderr, "bench_mutate_rules: cannot open '%s'\n", rules_dir);
    return 2;
  }
  char *names[256];
  int n_files = 0;
  for (struct dirent *e; (e = readdir(d)) && n_files < 256;) {
    size_t l = strlen(e->d_name);
    if (l > 6 && !strcmp(e->d_name + l - 6, ".rules")) names[n_files++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n_files, sizeof names[0], cmp_str);
  rule_text *rules = NULL;
  int n_rules = 0, cap = 0;
  for (int f = 0; f < n_files; f++) {
    char fp[4096];
    size_t len;
    char *s = snprintf(fp, sizeof fp, "%s/%s", rules_dir, names[f]) < (int)sizeof fp ? read_all(fp, &len) : NULL;
    if (!s || split_rules(names[f], s, len, &rules, &n_rules, &cap) != 0) {
      fprintf(stderr, "bench_mutate_rules: cannot read the rules of '%s'\n", fp);
      return 2;
    }
    free(s);
    free(names[f]);
  }

  pcgc_check_options o;
  pcgc_check_options_default(&o);
  if (log_instances) o.log = stdout;
  long t_made = 0, t_invalid = 0, t_killed = 0, t_killed_type = 0, t_surv = 0, t_equiv = 0;
  int kind_made[K_COUNT] = {0}, kind_killed[K_COUNT] = {0}, kind_surv[K_COUNT] = {0}, skipped = 0, weak_rules = 0;
  char weak[8192] = "";
  double t0 = now();
  printf("%-40s %5s %7s %6s %5s %8s %5s\n", "rule", "made", "invalid", "killed", "type", "survived", "equiv");
  for (int r = 0; r < n_rules; r++) {
    rule_text *rt = &rules[r];
    if (only && strcmp(only, rt->name) != 0) continue;
    pcgc_error err;
    pcgc_error_clear(&err);
    /* the rule itself must load and be sound */
    pcgc_ruleset *rs = pcgc_ruleset_new();
    pcgc_check_result res;
    if (!rs || pcgc_ruleset_parse(rs, rt->text, rt->len, rt->file, &err) != PCGC_OK ||
        pcgc_rule_check(pcgc_ruleset_rule(rs, 0), &o, &res, &err) != PCGC_OK || !res.ok) {
      printf("%-40s skipped: the rule itself does not load or is unsound (%s)\n", rt->name,
             err.message[0] ? err.message : res.message);
      pcgc_ruleset_free(rs);
      skipped++;
      continue;
    }
    pcgc_ruleset_free(rs);
    mlist ml = {0};
    if (!mutate(rt->name, rt->text, rt->len, &ml)) {
      printf("%-40s skipped: its rewrite block is not understood by the mutator\n", rt->name);
      skipped++;
      continue;
    }
    sample(&ml, max, rt->name);
    int made = 0, invalid = 0, killed = 0, ktype = 0, surv = 0, equ = 0;
    for (int i = 0; i < ml.n; i++) {
      mutant *m = &ml.m[i];
      made++;
      kind_made[m->kind]++;
      pcgc_error_clear(&err);
      rs = pcgc_ruleset_new();
      if (!rs) return 3;
      if (pcgc_ruleset_parse(rs, m->text, strlen(m->text), rt->file, &err) != PCGC_OK) {
        invalid++;
        if (verbose) printf("  invalid   %s | %s\n            (%s)\n", rt->name, m->desc, err.message);
        pcgc_ruleset_free(rs);
        continue;
      }
      if (pcgc_rule_check(pcgc_ruleset_rule(rs, 0), &o, &res, &err) != PCGC_OK) {
        pcgc_error_print(stderr, &err);
        return 3;
      }
      pcgc_ruleset_free(rs);
      if (!res.ok) {
        killed++;
        kind_killed[m->kind]++;
        bool by_type = strstr(res.message, "cannot be built") || strstr(res.message, "does not") ||
                       strstr(res.message, " has type ") || strstr(res.message, "cannot run");
        ktype += by_type;
        if (verbose) printf("  killed    %s | %s\n            (%.300s)\n", rt->name, m->desc, res.message);
        continue;
      }
      bool is_eq = false;
      for (int k = 0; k < n_eq; k++)
        if (!strcmp(eq[k].rule, rt->name) && !strcmp(eq[k].desc, m->desc)) eq[k].used = is_eq = true;
      if (is_eq) {
        equ++;
        if (verbose) printf("  equivalent %s | %s\n", rt->name, m->desc);
        continue;
      }
      surv++;
      kind_surv[m->kind]++;
      printf("  SURVIVED %s | %s\n", rt->name, m->desc);
      if (show_text) printf("%s\n", m->text);
    }
    printf("%-40s %5d %7d %6d %5d %8d %5d\n", rt->name, made, invalid, killed, ktype, surv, equ);
    fflush(stdout);
    if (surv) {
      weak_rules++;
      size_t l = strlen(weak);
      snprintf(weak + l, sizeof weak - l, "%s%s (%d)", l ? ", " : "", rt->name, surv);
    }
    t_made += made;
    t_invalid += invalid;
    t_killed += killed;
    t_killed_type += ktype;
    t_surv += surv;
    t_equiv += equ;
    for (int i = 0; i < ml.n; i++) free(ml.m[i].text);
    free(ml.m);
  }
  double t = now() - t0;
  for (int k = 0; k < n_eq; k++)
    if (!eq[k].used && (!only || !strcmp(only, eq[k].rule)))
      printf("allow-list entry matched no surviving mutant (killed now, or the rule changed): %s | %s\n", eq[k].rule,
             eq[k].desc);
  printf("\nby kind:");
  for (int k = 0; k < K_COUNT; k++)
    printf("  %s %d made, %d killed, %d survived;", KIND_NAME[k], kind_made[k], kind_killed[k], kind_surv[k]);
  char cap_text[48] = "all mutants";
  if (max > 0) snprintf(cap_text, sizeof cap_text, "at most %d per rule", max);
  printf("\n%ld mutants of %d rules (%d skipped) in %.1f s (%s): %ld invalid, %ld killed (%ld by type, "
         "%ld by value), %ld equivalent, %ld survived\n",
         t_made, n_rules - skipped, skipped, t, cap_text, t_invalid, t_killed, t_killed_type, t_killed - t_killed_type,
         t_equiv, t_surv);
  long nonequiv = t_killed + t_surv;
  printf("%ld of %ld non-equivalent mutants rejected (%.*f%%)%s%s\n", t_killed, nonequiv, t_surv ? 2 : 0,
         nonequiv ? 100.0 * (double)t_killed / (double)nonequiv : 100.0, t_surv ? "; survivors in " : "",
         t_surv ? weak : "");
  (void)weak_rules;
  for (int r = 0; r < n_rules; r++) free(rules[r].text);
  free(rules);
  for (int k = 0; k < n_eq; k++) {
    free(eq[k].rule);
    free(eq[k].desc);
  }
  free(eq);
  return t_surv ? 1 : 0;
}
