/*
 * model_parse.c — recursive-descent parser of the model format: tokens from
 * model_lex.c in, a syntax tree (model_internal.h) out, one function per rule
 * of the grammar in docs/model-format.md. Tokens are lexed as the parser
 * reaches them, into a window that drops those before each statement, and
 * the tree comes one top-level statement at a time (pcgc__model_reader_next),
 * so that the builder can drop each statement's tree once it has run it.
 *
 * The parser checks syntax and where statements may stand (a second `model`
 * line, `const`/`input`/`block` inside a block, `return` outside one or not
 * last); what names mean, values and shapes are checked while building the
 * graph (model.c). The first error stops the parse.
 *
 * A bracket that is never closed makes the lexer swallow the following
 * newlines, so the parser would trip over a token lines later. When a list
 * or call stops at a token with no matching closer before the end of the
 * statement, the error points at the opening bracket instead ("'(' is never
 * closed"), as Python does. Expression nesting is bounded (MAX_DEPTH, and a
 * tree height limit for long operator chains) so that neither parsing nor
 * evaluation can exhaust the stack.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

typedef struct parser {
  const pcgc__src *src;
  pcgc__tokwin *win; /* tokens, lexed on demand */
  int pos;
  pcgc__arena *arena;
  int depth;                 /* open ( and unary minus in the current expression */
  bool named;                /* a `model` statement was read ... */
  pcgc__span model_sp;       /* ... here */
} parser;

/* ------------------------------------------------------------- helpers */

/* Token k. Pointers to tokens stay valid until the next statement starts
 * (parse_stmt drops the tokens before it). */
static const pcgc__tok *tok_at(const parser *P, int k) { return pcgc__tokwin_at(P->win, k); }

static const pcgc__tok *peek(const parser *P) { return tok_at(P, P->pos); }

static const pcgc__tok *peek2(const parser *P) { return tok_at(P, P->pos + 1); }

static const pcgc__tok *advance(parser *P) {
  const pcgc__tok *t = peek(P);
  if (t->kind != PCGC__TK_EOF) P->pos++;
  return t;
}

static const char *tok_text(const parser *P, const pcgc__tok *t) { return P->src->text + t->sp.off; }

static bool is_punct(const parser *P, const pcgc__tok *t, char c) {
  return t->kind == PCGC__TK_PUNCT && tok_text(P, t)[0] == c;
}

static bool is_kw(const parser *P, const pcgc__tok *t, const char *kw) {
  size_t n = strlen(kw);
  return t->kind == PCGC__TK_NAME && (size_t)t->sp.len == n && memcmp(tok_text(P, t), kw, n) == 0;
}

static bool is_keyword_tok(const parser *P, const pcgc__tok *t) {
  return t->kind == PCGC__TK_NAME && pcgc__model_is_keyword(tok_text(P, t), (size_t)t->sp.len);
}

static bool is_end(const pcgc__tok *t) { return t->kind == PCGC__TK_EOL || t->kind == PCGC__TK_EOF; }

/* "'foo'", "number '12'", "end of line", ... for messages. */
static const char *describe(const parser *P, const pcgc__tok *t, char *buf, size_t n) {
  int len = t->sp.len > 60 ? 60 : t->sp.len;
  switch (t->kind) {
  case PCGC__TK_NAME:
    snprintf(buf, n, "%s'%.*s'", is_keyword_tok(P, t) ? "keyword " : "", len, tok_text(P, t));
    break;
  case PCGC__TK_INT:
  case PCGC__TK_FLOAT: snprintf(buf, n, "number '%.*s'", len, tok_text(P, t)); break;
  case PCGC__TK_PUNCT: snprintf(buf, n, "'%c'", tok_text(P, t)[0]); break;
  case PCGC__TK_EOL: snprintf(buf, n, "%s", tok_text(P, t)[0] == ';' ? "';'" : "end of line"); break;
  case PCGC__TK_EOF: snprintf(buf, n, "end of file"); break;
  }
  return buf;
}

#define DESC(t) describe(P, (t), (char[96]){0}, 96)

#define FAIL(P, sp, ...) pcgc__model_fail((P)->src, (sp), PCGC_ERR_PARSE, __VA_ARGS__)

/* Sets the hint of the error just recorded and returns its status. */
static pcgc_status hint(const parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static pcgc_status hint(const parser *P, const char *fmt, ...) {
  char buf[sizeof P->src->err->hint];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  pcgc_error_hint(P->src->err, "%s", buf);
  return P->src->err->status;
}

static pcgc_status oom(const parser *P) {
  return pcgc_error_set(P->src->err, PCGC_ERR_NOMEM, "out of memory parsing the model");
}

static pcgc__span join(pcgc__span a, pcgc__span b) {
  pcgc__span s = a;
  s.len = b.off + b.len - a.off;
  return s;
}

/* Arena-backed growable arrays: PUSH(P, arr, n, cap, value). */
static void *grow(parser *P, void *arr, int n, int *cap, size_t elem) {
  int nc = *cap ? *cap * 2 : 4;
  void *na = pcgc__arena_alloc(P->arena, (size_t)nc * elem);
  if (!na) return NULL;
  if (n) memcpy(na, arr, (size_t)n * elem);
  *cap = nc;
  return na;
}

#define PUSH(P, arr, n, cap, val)                                 \
  do {                                                            \
    if ((n) == (cap)) {                                           \
      void *p_ = grow((P), (arr), (n), &(cap), sizeof *(arr));    \
      if (!p_) return oom(P);                                     \
      (arr) = p_;                                                 \
    }                                                             \
    (arr)[(n)++] = (val);                                         \
  } while (0)

static const char *intern(parser *P, const pcgc__tok *t) {
  return pcgc__arena_strndup(P->arena, tok_text(P, t), (size_t)t->sp.len);
}

/* A name that is not a keyword. */
static pcgc_status expect_name(parser *P, const char *what, pcgc__ident *id) {
  const pcgc__tok *t = peek(P);
  if (t->kind == PCGC__TK_NAME && !is_keyword_tok(P, t)) {
    if (!(id->s = intern(P, t))) return oom(P);
    id->sp = t->sp;
    advance(P);
    return PCGC_OK;
  }
  if (t->kind == PCGC__TK_NAME) {
    FAIL(P, t->sp, "'%.*s' is a keyword and cannot be used as %s", t->sp.len, tok_text(P, t), what);
    return hint(P, "choose another name, e.g. '%.*s_'", t->sp.len, tok_text(P, t));
  }
  FAIL(P, t->sp, "expected %s, found %s", what, DESC(t));
  return hint(P, "names start with a letter or _, then letters, digits and _");
}

/* True if an unmatched `close` follows before the statement ends. */
static bool closed_later(const parser *P, char close) {
  int d = 0;
  for (int k = P->pos;; k++) {
    const pcgc__tok *t = tok_at(P, k);
    if (is_end(t)) return false;
    if (t->kind != PCGC__TK_PUNCT) continue;
    char c = tok_text(P, t)[0];
    if (c == '{' || c == '}') return false;
    if (c == '(' || c == '[') d++;
    if (c == ')' || c == ']') {
      if (d == 0) return c == close;
      d--;
    }
  }
  return false;
}

/* At a token that is neither ',' nor `close` inside a bracketed list. */
static pcgc_status bad_in_list(parser *P, const pcgc__tok *open, char close, const char *what,
                               bool comma) {
  const pcgc__tok *t = peek(P);
  if (!closed_later(P, close)) {
    FAIL(P, open->sp, "'%c' is never closed", tok_text(P, open)[0]);
    if (t->kind == PCGC__TK_EOF)
      return hint(P, "add '%c' to close %s", close, what);
    return hint(P, "add '%c' to close %s (expected it before %s at %d:%d)", close, what, DESC(t),
                t->sp.line, t->sp.col);
  }
  if (comma) FAIL(P, t->sp, "expected ',' or '%c' in %s, found %s", close, what, DESC(t));
  else FAIL(P, t->sp, "expected '%c' after %s, found %s", close, what, DESC(t));
  return hint(P, comma ? "separate the entries with ','" : "check the brackets");
}

/* --------------------------------------------------------- expressions */

static pcgc_status parse_expr(parser *P, pcgc__expr **out);

static pcgc__expr *new_expr(parser *P, pcgc__expr_kind kind, pcgc__span sp) {
  bool leaf = kind != PCGC__EX_NEG && kind != PCGC__EX_BIN;
  pcgc__expr *e = pcgc__arena_alloc(P->arena, leaf ? PCGC__EXPR_LEAF_SIZE : sizeof *e);
  if (e) {
    e->kind = kind;
    e->sp = sp;
    e->height = 1;
  }
  return e;
}

static pcgc_status too_deep(parser *P, pcgc__span sp) {
  FAIL(P, sp, "expression is nested too deeply (more than %d levels)", PCGC__MODEL_MAX_DEPTH);
  return hint(P, "split it into several const definitions");
}

/* primary = NUMBER | NAME | "true" | "false" | "(" expr ")" */
static pcgc_status parse_primary(parser *P, pcgc__expr **out) {
  const pcgc__tok *t = peek(P);
  pcgc__expr *e = NULL;
  if (t->kind == PCGC__TK_INT || t->kind == PCGC__TK_FLOAT) {
    if (!(e = new_expr(P, t->kind == PCGC__TK_INT ? PCGC__EX_INT : PCGC__EX_FLOAT, t->sp))) return oom(P);
    if (t->kind == PCGC__TK_INT)
      e->i = t->i;
    else
      e->f = t->f;
    advance(P);
  } else if (is_kw(P, t, "true") || is_kw(P, t, "false")) {
    if (!(e = new_expr(P, PCGC__EX_BOOL, t->sp))) return oom(P);
    e->i = is_kw(P, t, "true");
    advance(P);
  } else if (t->kind == PCGC__TK_NAME && !is_keyword_tok(P, t)) {
    if (!(e = new_expr(P, PCGC__EX_NAME, t->sp)) || !(e->name = intern(P, t))) return oom(P);
    advance(P);
  } else if (is_punct(P, t, '(')) {
    if (++P->depth > PCGC__MODEL_MAX_DEPTH) return too_deep(P, t->sp);
    const pcgc__tok *open = advance(P);
    pcgc_status s = parse_expr(P, &e);
    if (s) return s;
    if (!is_punct(P, peek(P), ')')) return bad_in_list(P, open, ')', "the parenthesised expression", false);
    e->sp = join(open->sp, advance(P)->sp);
    P->depth--;
  } else {
    FAIL(P, t->sp, "expected a number or a name, found %s", DESC(t));
    if (t->kind == PCGC__TK_NAME)
      return hint(P, "keywords other than true and false cannot appear in a value");
    return hint(P, "a value is a number, a constant, an expression such as 4 * H, or a name like relu");
  }
  *out = e;
  return PCGC_OK;
}

/* unary = "-" unary | primary */
static pcgc_status parse_unary(parser *P, pcgc__expr **out) {
  const pcgc__tok *t = peek(P);
  if (!is_punct(P, t, '-')) return parse_primary(P, out);
  if (++P->depth > PCGC__MODEL_MAX_DEPTH) return too_deep(P, t->sp);
  advance(P);
  pcgc__expr *inner;
  pcgc_status s = parse_unary(P, &inner);
  if (s) return s;
  P->depth--;
  pcgc__expr *e = new_expr(P, PCGC__EX_NEG, join(t->sp, inner->sp));
  if (!e) return oom(P);
  e->op = '-';
  e->l = inner;
  e->height = inner->height + 1;
  *out = e;
  return PCGC_OK;
}

static pcgc_status make_bin(parser *P, const pcgc__tok *op, pcgc__expr *l, pcgc__expr *r, pcgc__expr **out) {
  pcgc__expr *e = new_expr(P, PCGC__EX_BIN, join(l->sp, r->sp));
  if (!e) return oom(P);
  e->op = tok_text(P, op)[0];
  e->l = l;
  e->r = r;
  int height = (l->height > r->height ? l->height : r->height) + 1;
  e->height = (short)height;
  if (height > PCGC__MODEL_MAX_EXPR) {
    FAIL(P, op->sp, "expression is too long (more than %d operators deep)", PCGC__MODEL_MAX_EXPR);
    return hint(P, "split it into several const definitions");
  }
  *out = e;
  return PCGC_OK;
}

/* term = unary { ("*" | "/" | "%") unary } */
static pcgc_status parse_term(parser *P, pcgc__expr **out) {
  pcgc__expr *l;
  pcgc_status s = parse_unary(P, &l);
  while (s == PCGC_OK && (is_punct(P, peek(P), '*') || is_punct(P, peek(P), '/') || is_punct(P, peek(P), '%'))) {
    const pcgc__tok *op = advance(P);
    pcgc__expr *r;
    if ((s = parse_unary(P, &r)) == PCGC_OK) s = make_bin(P, op, l, r, &l);
  }
  *out = l;
  return s;
}

/* expr = term { ("+" | "-") term } */
static pcgc_status parse_expr(parser *P, pcgc__expr **out) {
  pcgc__expr *l;
  pcgc_status s = parse_term(P, &l);
  while (s == PCGC_OK && (is_punct(P, peek(P), '+') || is_punct(P, peek(P), '-'))) {
    const pcgc__tok *op = advance(P);
    pcgc__expr *r;
    if ((s = parse_term(P, &r)) == PCGC_OK) s = make_bin(P, op, l, r, &l);
  }
  *out = l;
  return s;
}

/* list = "[" [ expr { "," expr } [","] ] "]" */
static pcgc_status parse_list(parser *P, const char *what, pcgc__expr ***items, int *n_items, pcgc__span *sp) {
  const pcgc__tok *open = advance(P);
  pcgc__expr **v = NULL;
  int n = 0, cap = 0;
  while (!is_punct(P, peek(P), ']')) {
    pcgc__expr *e;
    pcgc_status s = parse_expr(P, &e);
    if (s) return s;
    if (n == PCGC__MODEL_MAX_LIST) {
      FAIL(P, e->sp, "%s has too many entries (at most %d)", what, PCGC__MODEL_MAX_LIST);
      return hint(P, "tensors have at most %d dims and lists at most %d entries", PCGC_MAX_RANK, PCGC_MAX_INTS);
    }
    PUSH(P, v, n, cap, e);
    if (is_punct(P, peek(P), ',')) advance(P);
    else if (!is_punct(P, peek(P), ']')) return bad_in_list(P, open, ']', what, true);
  }
  *sp = join(open->sp, advance(P)->sp);
  *items = v;
  *n_items = n;
  return PCGC_OK;
}

/* value = expr | list */
static pcgc_status parse_value(parser *P, pcgc__value *v) {
  if (is_punct(P, peek(P), '[')) return parse_list(P, "the list", &v->items, &v->n, &v->sp);
  pcgc_status s = parse_expr(P, &v->e);
  if (s == PCGC_OK) v->sp = v->e->sp;
  return s;
}

/* ---------------------------------------------------------- statements */

static const char *const dtype_names[] = {"f32", "f16", "bf16", "f64", "i32", "i64"};
_Static_assert(sizeof dtype_names / sizeof *dtype_names == PCGC_DTYPE_COUNT, "dtype names");

/* type = DTYPE "[" [ expr { "," expr } ] "]" */
static pcgc_status parse_type(parser *P, pcgc__type *ty) {
  const pcgc__tok *t = peek(P);
  if (t->kind != PCGC__TK_NAME) {
    FAIL(P, t->sp, "expected a type such as f32[64, 784], found %s", DESC(t));
    return hint(P, "dtypes: f32 f16 bf16 f64 i32 i64; the shape follows in brackets");
  }
  const char *name = intern(P, t);
  if (!name) return oom(P);
  int dt = pcgc_dtype_from_name(name);
  if (dt < 0) {
    FAIL(P, t->sp, "unknown dtype '%s'", name);
    pcgc__suggest sg;
    pcgc__suggest_init(&sg, name);
    for (int i = 0; i < PCGC_DTYPE_COUNT; i++) pcgc__suggest_add(&sg, dtype_names[i]);
    if (pcgc__suggest_best(&sg))
      return hint(P, "did you mean '%s'? dtypes: f32 f16 bf16 f64 i32 i64", pcgc__suggest_best(&sg));
    return hint(P, "dtypes: f32 f16 bf16 f64 i32 i64");
  }
  advance(P);
  if (!is_punct(P, peek(P), '[')) {
    FAIL(P, peek(P)->sp, "expected '[' after dtype '%s', found %s", name, DESC(peek(P)));
    return hint(P, "write the shape in brackets: %s[64, 784]; a scalar is %s[]", name, name);
  }
  ty->dtype = (pcgc_dtype)dt;
  pcgc__span lsp;
  pcgc_status s = parse_list(P, "the shape", &ty->dims, &ty->rank, &lsp);
  if (s == PCGC_OK) ty->sp = join(t->sp, lsp);
  return s;
}

/* init = "zeros" | "ones" | "uniform" "(" expr ")" | "normal" "(" expr ")" */
static pcgc_status parse_init(parser *P, pcgc__stmt *st) {
  const pcgc__tok *t = peek(P);
  const char *name = t->kind == PCGC__TK_NAME ? intern(P, t) : NULL;
  if (t->kind == PCGC__TK_NAME && !name) return oom(P);
  int init = name ? pcgc_enum_value_from_name(PCGC_ENUM_INIT, name) : -1;
  if (init < 0) {
    FAIL(P, t->sp, "unknown initializer %s", DESC(t));
    pcgc__suggest sg;
    pcgc__suggest_init(&sg, name);
    for (int i = 0; pcgc_enum_value_name(PCGC_ENUM_INIT, i); i++)
      pcgc__suggest_add(&sg, pcgc_enum_value_name(PCGC_ENUM_INIT, i));
    if (pcgc__suggest_best(&sg))
      return hint(P, "did you mean '%s'? initializers: zeros, ones, uniform(a), normal(s)", pcgc__suggest_best(&sg));
    return hint(P, "initializers: zeros, ones, uniform(a), normal(s)");
  }
  advance(P);
  st->init = init;
  st->init_sp = t->sp;
  bool takes_arg = init == PCGC_INIT_UNIFORM || init == PCGC_INIT_NORMAL;
  if (!takes_arg) {
    if (is_punct(P, peek(P), '(')) {
      FAIL(P, peek(P)->sp, "initializer '%s' takes no argument", name);
      return hint(P, "write '= %s'", name);
    }
    return PCGC_OK;
  }
  if (!is_punct(P, peek(P), '(')) {
    FAIL(P, peek(P)->sp, "initializer '%s' needs its %s in parentheses", name,
         init == PCGC_INIT_UNIFORM ? "bound" : "standard deviation");
    return hint(P, init == PCGC_INIT_UNIFORM ? "uniform(a) draws from [-a, a]: uniform(0.05)"
                                             : "normal(s) draws with mean 0 and deviation s: normal(0.02)");
  }
  const pcgc__tok *open = advance(P);
  pcgc_status s = parse_expr(P, &st->init_arg);
  if (s) return s;
  if (!is_punct(P, peek(P), ')')) return bad_in_list(P, open, ')', "the initializer's argument", false);
  st->init_sp = join(t->sp, advance(P)->sp);
  return PCGC_OK;
}

static pcgc_status expect_punct_after(parser *P, char c, const char *after, const char *example) {
  const pcgc__tok *t = peek(P);
  if (is_punct(P, t, c)) {
    advance(P);
    return PCGC_OK;
  }
  FAIL(P, t->sp, "expected '%c' after %s, found %s", c, after, DESC(t));
  return hint(P, "write it as: %s", example);
}

/* Arguments of a call: positional tensors, then key=value attributes. */
static pcgc_status parse_args(parser *P, pcgc__stmt *st) {
  const pcgc__tok *open = advance(P);
  int cap_pos = 0, cap_kv = 0;
  char what[160];
  snprintf(what, sizeof what, "the arguments of '%s'", st->callee.s);
  while (!is_punct(P, peek(P), ')')) {
    const pcgc__tok *t = peek(P);
    if (t->kind == PCGC__TK_NAME && is_punct(P, peek2(P), '=')) {
      pcgc__kv kv;
      memset(&kv, 0, sizeof kv);
      if (!(kv.key.s = intern(P, t))) return oom(P);
      kv.key.sp = t->sp;
      advance(P);
      advance(P);
      for (int i = 0; i < st->n_kv; i++)
        if (strcmp(st->kv[i].key.s, kv.key.s) == 0) {
          FAIL(P, t->sp, "attribute '%s' is given twice", kv.key.s);
          return hint(P, "it was first given at %d:%d; keep one", st->kv[i].key.sp.line, st->kv[i].key.sp.col);
        }
      pcgc_status s = parse_value(P, &kv.val);
      if (s) return s;
      if (st->n_kv == PCGC__MODEL_MAX_ARGS) {
        FAIL(P, t->sp, "too many attributes (at most %d)", PCGC__MODEL_MAX_ARGS);
        return hint(P, "no operator has that many attributes");
      }
      PUSH(P, st->kv, st->n_kv, cap_kv, kv);
    } else if (t->kind == PCGC__TK_NAME && !is_keyword_tok(P, t)) {
      if (st->n_kv > 0) {
        FAIL(P, t->sp, "tensor argument '%.*s' after attributes", t->sp.len, tok_text(P, t));
        return hint(P, "write the tensor arguments first, then the key=value attributes");
      }
      if (st->n_pos == PCGC__MODEL_MAX_ARGS) {
        FAIL(P, t->sp, "too many tensor arguments (at most %d)", PCGC__MODEL_MAX_ARGS);
        return hint(P, "concatenate tensors in steps");
      }
      pcgc__ident id = {intern(P, t), t->sp};
      if (!id.s) return oom(P);
      PUSH(P, st->pos, st->n_pos, cap_pos, id);
      advance(P);
    } else {
      FAIL(P, t->sp, "expected a tensor name or key=value, found %s", DESC(t));
      if (t->kind == PCGC__TK_INT || t->kind == PCGC__TK_FLOAT || is_punct(P, t, '-'))
        return hint(P, "arguments are tensors; numbers are attributes, written key=value (e.g. out=%.*s)",
                    t->sp.len > 20 ? 20 : t->sp.len, tok_text(P, t));
      if (is_punct(P, t, '['))
        return hint(P, "lists are attribute values, written key=[...]");
      if (is_punct(P, t, '('))
        return hint(P, "calls cannot be nested: give the inner call a name on a line of its own");
      return hint(P, "arguments are tensor names, then key=value attributes");
    }
    if (is_punct(P, peek(P), ',')) {
      advance(P);
    } else if (!is_punct(P, peek(P), ')')) {
      if (is_punct(P, peek(P), '(') && st->n_kv == 0 && st->n_pos > 0) {
        FAIL(P, peek(P)->sp, "calls cannot be nested");
        return hint(P, "give the inner call a name on a line of its own: t = %s(...)",
                    st->pos[st->n_pos - 1].s);
      }
      return bad_in_list(P, open, ')', what, true);
    }
  }
  advance(P);
  return PCGC_OK;
}

/* layer = NAME { "," NAME } "=" [ "repeat" "(" expr ")" ] NAME "(" args ")" */
static pcgc_status parse_layer(parser *P, pcgc__stmt *st) {
  int cap = 0;
  st->kind = PCGC__ST_LAYER;
  for (;;) {
    pcgc__ident id;
    pcgc_status s = expect_name(P, "a name", &id);
    if (s) return s;
    for (int i = 0; i < st->n_lhs; i++)
      if (strcmp(st->lhs[i].s, id.s) == 0) {
        FAIL(P, id.sp, "'%s' appears twice on the left of '='", id.s);
        return hint(P, "give each output its own name");
      }
    if (st->n_lhs == PCGC__MODEL_MAX_ARGS) {
      FAIL(P, id.sp, "too many names on the left of '=' (at most %d)", PCGC__MODEL_MAX_ARGS);
      return hint(P, "split the layer");
    }
    PUSH(P, st->lhs, st->n_lhs, cap, id);
    if (!is_punct(P, peek(P), ',')) break;
    advance(P);
  }
  const pcgc__tok *t = peek(P);
  if (!is_punct(P, t, '=')) {
    const char *first = st->lhs[0].s;
    if (is_punct(P, t, ':')) {
      FAIL(P, t->sp, "expected '=' after '%s', found ':'", first);
      return hint(P, "declare a data input with 'input %s: f32[...]', a weight with 'weight %s: f32[...]'",
                  first, first);
    }
    if (is_punct(P, t, '(')) {
      FAIL(P, t->sp, "expected '=' after '%s', found '('", first);
      return hint(P, "a layer needs a name: y = %s(...)", first);
    }
    FAIL(P, t->sp, "expected '=' after '%s', found %s", first, DESC(t));
    return hint(P, "a layer is written NAME = op(tensors..., key=value)");
  }
  advance(P);
  if (is_kw(P, peek(P), "repeat")) {
    advance(P);
    pcgc_status s = expect_punct_after(P, '(', "'repeat'", "h = repeat(24) block(x, key=value)");
    if (s) return s;
    const pcgc__tok *open = tok_at(P, P->pos - 1);
    if ((s = parse_expr(P, &st->repeat))) return s;
    if (!is_punct(P, peek(P), ')')) return bad_in_list(P, open, ')', "the repeat count", false);
    advance(P);
  }
  t = peek(P);
  if (t->kind != PCGC__TK_NAME || is_keyword_tok(P, t)) {
    FAIL(P, t->sp, "expected an operator or block call after '=', found %s", DESC(t));
    if (t->kind == PCGC__TK_INT || t->kind == PCGC__TK_FLOAT || is_punct(P, t, '-') || is_punct(P, t, '('))
      return hint(P, "numbers are named with 'const %s = ...'", st->lhs[0].s);
    return hint(P, "a layer is written NAME = op(tensors..., key=value)");
  }
  pcgc_status s = expect_name(P, "an operator", &st->callee);
  if (s) return s;
  if (!is_punct(P, peek(P), '(')) {
    FAIL(P, peek(P)->sp, "expected '(' after '%s', found %s", st->callee.s, DESC(peek(P)));
    if (is_end(peek(P)))
      return hint(P, "operators and blocks are called with parentheses; to give a tensor a second name, "
                     "write %s = identity(%s)", st->lhs[0].s, st->callee.s);
    return hint(P, "a layer is written NAME = op(tensors..., key=value)");
  }
  return parse_args(P, st);
}

/* The end of a statement: a newline, ';', the end of the file, or a block's '}'. */
static pcgc_status end_stmt(parser *P, bool in_block) {
  const pcgc__tok *t = peek(P);
  if (t->kind == PCGC__TK_EOL) {
    advance(P);
    return PCGC_OK;
  }
  if (t->kind == PCGC__TK_EOF || (in_block && is_punct(P, t, '}'))) return PCGC_OK;
  if (is_punct(P, t, ')') || is_punct(P, t, ']')) {
    FAIL(P, t->sp, "unmatched '%c'", tok_text(P, t)[0]);
    return hint(P, "remove it, or check the brackets before it");
  }
  FAIL(P, t->sp, "expected the end of the statement, found %s", DESC(t));
  if (is_punct(P, t, '(') || is_punct(P, t, '['))
    return hint(P, "check the statement's syntax: NAME = op(tensors..., key=value)");
  return hint(P, "put one statement per line, or separate statements with ';'");
}

static pcgc_status parse_stmt(parser *P, bool in_block, const char *block_name, pcgc__stmt **out);

/* block = "block" NAME "(" [bparam {"," bparam}] ")" "{" {statement} "}" */
static pcgc_status parse_block(parser *P, pcgc__stmt *st) {
  advance(P);
  pcgc_status s = expect_name(P, "a block name", &st->name);
  if (s) return s;
  if (pcgc_op_from_name(st->name.s) >= 0) {
    FAIL(P, st->name.sp, "block '%s' has the name of an operator", st->name.s);
    return hint(P, "choose another name, e.g. '%s_block'", st->name.s);
  }
  if (!is_punct(P, peek(P), '(')) {
    FAIL(P, peek(P)->sp, "expected '(' after 'block %s', found %s", st->name.s, DESC(peek(P)));
    return hint(P, "a block is written: block %s(tensor x, int n = 4) { ... return y }", st->name.s);
  }
  const pcgc__tok *open = advance(P);
  int cap = 0;
  while (!is_punct(P, peek(P), ')')) {
    const pcgc__tok *t = peek(P);
    pcgc__param p = {0};
    if (is_kw(P, t, "tensor")) p.kind = PCGC__P_TENSOR;
    else if (is_kw(P, t, "int")) p.kind = PCGC__P_INT;
    else if (is_kw(P, t, "float")) p.kind = PCGC__P_FLOAT;
    else {
      FAIL(P, t->sp, "expected a parameter ('tensor NAME', 'int NAME' or 'float NAME'), found %s", DESC(t));
      if (t->kind == PCGC__TK_NAME && !is_keyword_tok(P, t))
        return hint(P, "give the parameter a kind: tensor %.*s, int %.*s or float %.*s", t->sp.len,
                    tok_text(P, t), t->sp.len, tok_text(P, t), t->sp.len, tok_text(P, t));
      return hint(P, "block parameters are 'tensor NAME', 'int NAME [= default]', 'float NAME [= default]'");
    }
    advance(P);
    if ((s = expect_name(P, "a parameter name", &p.name))) return s;
    for (int i = 0; i < st->n_params; i++)
      if (strcmp(st->params[i].name.s, p.name.s) == 0) {
        FAIL(P, p.name.sp, "parameter '%s' is declared twice", p.name.s);
        return hint(P, "rename one of them");
      }
    if (is_punct(P, peek(P), '=')) {
      if (p.kind == PCGC__P_TENSOR) {
        FAIL(P, peek(P)->sp, "tensor parameter '%s' cannot have a default", p.name.s);
        return hint(P, "only int and float parameters have defaults");
      }
      advance(P);
      if ((s = parse_expr(P, &p.def))) return s;
    }
    if (st->n_params == PCGC__MODEL_MAX_PARAMS) {
      FAIL(P, p.name.sp, "too many parameters (at most %d)", PCGC__MODEL_MAX_PARAMS);
      return hint(P, "split the block");
    }
    PUSH(P, st->params, st->n_params, cap, p);
    if (is_punct(P, peek(P), ',')) advance(P);
    else if (!is_punct(P, peek(P), ')')) return bad_in_list(P, open, ')', "the parameter list", true);
  }
  advance(P);
  while (peek(P)->kind == PCGC__TK_EOL) advance(P);
  if (!is_punct(P, peek(P), '{')) {
    FAIL(P, peek(P)->sp, "expected '{' to open the body of block '%s', found %s", st->name.s, DESC(peek(P)));
    return hint(P, "a block is written: block %s(tensor x) { y = relu(x); return y }", st->name.s);
  }
  const pcgc__tok brace = *advance(P); /* a copy: the body's statements drop the tokens before them */
  cap = 0;
  for (;;) {
    while (peek(P)->kind == PCGC__TK_EOL) advance(P);
    const pcgc__tok *t = peek(P);
    if (is_punct(P, t, '}')) break;
    if (t->kind == PCGC__TK_EOF) {
      FAIL(P, brace.sp, "block '%s' is never closed", st->name.s);
      return hint(P, "add '}' after its return statement");
    }
    if (st->n_body > 0 && st->body[st->n_body - 1]->kind == PCGC__ST_RETURN) {
      FAIL(P, t->sp, "statement after 'return' in block '%s'", st->name.s);
      return hint(P, "'return' must be the last statement of a block");
    }
    pcgc__stmt *b;
    if ((s = parse_stmt(P, true, st->name.s, &b))) return s;
    PUSH(P, st->body, st->n_body, cap, b);
  }
  const pcgc__tok *close = advance(P);
  if (st->n_body == 0 || st->body[st->n_body - 1]->kind != PCGC__ST_RETURN) {
    FAIL(P, close->sp, "block '%s' does not end with 'return'", st->name.s);
    return hint(P, "end the block with 'return NAME', naming the tensor(s) it gives back");
  }
  return PCGC_OK;
}

/* return = "return" NAME { "," NAME } */
static pcgc_status parse_return(parser *P, pcgc__stmt *st) {
  advance(P);
  int cap = 0;
  for (;;) {
    pcgc__ident id;
    pcgc_status s = expect_name(P, "the name of a tensor to return", &id);
    if (s) return s;
    if (st->n_ret == PCGC__MODEL_MAX_ARGS) {
      FAIL(P, id.sp, "too many returned tensors (at most %d)", PCGC__MODEL_MAX_ARGS);
      return hint(P, "split the block");
    }
    PUSH(P, st->ret, st->n_ret, cap, id);
    if (!is_punct(P, peek(P), ',')) return PCGC_OK;
    advance(P);
  }
}

static pcgc_status not_in_block(parser *P, const pcgc__tok *t, const char *block_name) {
  if (is_kw(P, t, "const")) {
    FAIL(P, t->sp, "'const' inside block '%s'", block_name);
    return hint(P, "constants are defined at top level; use an int or float block parameter instead");
  }
  if (is_kw(P, t, "input")) {
    FAIL(P, t->sp, "'input' inside block '%s'", block_name);
    return hint(P, "declare inputs at top level and pass them as tensor parameters");
  }
  if (is_kw(P, t, "model")) {
    FAIL(P, t->sp, "'model' inside block '%s'", block_name);
    return hint(P, "name the model once, at top level");
  }
  FAIL(P, t->sp, "block definitions cannot be nested (inside block '%s')", block_name);
  return hint(P, "define blocks at top level; a block may call blocks defined before it");
}

/* statement = model | const | input | weight | layer | block | return */
static pcgc_status parse_stmt(parser *P, bool in_block, const char *block_name, pcgc__stmt **out) {
  /* no token before the statement is looked at again (keep one, as a guard) */
  pcgc__tokwin_drop(P->win, P->pos - 1);
  const pcgc__tok *t = peek(P);
  pcgc__stmt *st = pcgc__arena_alloc(P->arena, sizeof *st);
  if (!st) return oom(P);
  st->sp = t->sp;
  st->init = -1;
  pcgc_status s;
  if (in_block && (is_kw(P, t, "const") || is_kw(P, t, "input") || is_kw(P, t, "model") || is_kw(P, t, "block")))
    return not_in_block(P, t, block_name);
  if (is_kw(P, t, "model")) {
    st->kind = PCGC__ST_MODEL;
    if (P->named) {
      FAIL(P, t->sp, "the model is named twice");
      return hint(P, "a file has at most one 'model' line; the first is at %d:%d", P->model_sp.line,
                  P->model_sp.col);
    }
    advance(P);
    if ((s = expect_name(P, "a model name after 'model'", &st->name))) return s;
    P->named = true;
    P->model_sp = st->sp;
  } else if (is_kw(P, t, "const")) {
    st->kind = PCGC__ST_CONST;
    advance(P);
    if ((s = expect_name(P, "a constant name", &st->name))) return s;
    if ((s = expect_punct_after(P, '=', "the constant's name", "const B = 64"))) return s;
    if ((s = parse_expr(P, &st->expr))) return s;
  } else if (is_kw(P, t, "input") || is_kw(P, t, "weight")) {
    bool w = is_kw(P, t, "weight");
    st->kind = w ? PCGC__ST_WEIGHT : PCGC__ST_INPUT;
    advance(P);
    if ((s = expect_name(P, w ? "a weight name" : "an input name", &st->name))) return s;
    if ((s = expect_punct_after(P, ':', w ? "the weight's name" : "the input's name",
                                w ? "weight w: f32[784, 256] = normal(0.02)" : "input x: f32[64, 784]")))
      return s;
    if ((s = parse_type(P, &st->type))) return s;
    if (w && is_punct(P, peek(P), '=')) {
      advance(P);
      if ((s = parse_init(P, st))) return s;
    }
  } else if (is_kw(P, t, "block")) {
    st->kind = PCGC__ST_BLOCK;
    if ((s = parse_block(P, st))) return s;
  } else if (is_kw(P, t, "return")) {
    st->kind = PCGC__ST_RETURN;
    if (!in_block) {
      FAIL(P, t->sp, "'return' outside a block");
      return hint(P, "'return' ends a block: block f(tensor x) { y = relu(x); return y }");
    }
    if ((s = parse_return(P, st))) return s;
  } else if (t->kind == PCGC__TK_NAME && !is_keyword_tok(P, t)) {
    if ((s = parse_layer(P, st))) return s;
  } else {
    FAIL(P, t->sp, "expected a statement, found %s", DESC(t));
    if (is_kw(P, t, "tensor") || is_kw(P, t, "int") || is_kw(P, t, "float"))
      return hint(P, "'%.*s' declares a block parameter, inside block NAME( ... )", t->sp.len, tok_text(P, t));
    if (is_punct(P, t, '}'))
      return hint(P, "this '}' closes no block");
    return hint(P, "statements are: model, const, input, weight, block, and layers NAME = op(...)");
  }
  if ((s = end_stmt(P, in_block))) return s;
  *out = st;
  return PCGC_OK;
}

static pcgc_status lex_next(void *lexer, void *tok) { return pcgc__model_lex_next(lexer, tok); }

struct pcgc__model_reader {
  pcgc__model_lexer lexer;
  pcgc__tokwin win;
  parser P;
};

static const pcgc__tok eof_tok = {.kind = PCGC__TK_EOF};

pcgc__model_reader *pcgc__model_reader_new(const pcgc__src *src) {
  pcgc__model_reader *R = calloc(1, sizeof *R);
  if (!R) return NULL;
  pcgc__model_lex_init(&R->lexer, src);
  pcgc__tokwin_init(&R->win, sizeof(pcgc__tok), lex_next, &R->lexer, &eof_tok);
  R->P = (parser){.src = src, .win = &R->win};
  return R;
}

void pcgc__model_reader_free(pcgc__model_reader *R) {
  if (!R) return;
  pcgc__tokwin_free(&R->win);
  free(R);
}

pcgc_status pcgc__model_reader_next(pcgc__model_reader *R, pcgc__arena *arena, pcgc__arena *keep,
                                    const pcgc__stmt **out) {
  parser *P = &R->P;
  *out = NULL;
  pcgc_status s = PCGC_OK;
  for (;;) {
    const pcgc__tok *t = peek(P);
    if (t->kind == PCGC__TK_EOL) {
      advance(P);
      continue;
    }
    if (t->kind == PCGC__TK_EOF) break;
    /* a block lives on: its instances run its tree whenever it is called */
    P->arena = keep && is_kw(P, t, "block") ? keep : arena;
    pcgc__stmt *st;
    if ((s = parse_stmt(P, false, NULL, &st)) == PCGC_OK) *out = st;
    break;
  }
  /* the lexer already read the text once, so only memory can fail it */
  assert(R->win.status == PCGC_OK || R->win.status == PCGC_ERR_NOMEM);
  if (R->win.status != PCGC_OK) s = oom(P);
  return s;
}

pcgc_status pcgc__model_check_syntax(const pcgc__src *src) {
  pcgc_status s = pcgc__model_lex_check(src);
  if (s) return s;
  pcgc__model_reader *R = pcgc__model_reader_new(src);
  if (!R) return pcgc_error_set(src->err, PCGC_ERR_NOMEM, "out of memory parsing the model");
  pcgc__arena arena = {0};
  const pcgc__stmt *st;
  while ((s = pcgc__model_reader_next(R, &arena, NULL, &st)) == PCGC_OK && st) pcgc__arena_reset(&arena);
  pcgc__arena_free(&arena);
  pcgc__model_reader_free(R);
  return s;
}
