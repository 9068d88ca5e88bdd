/*
 * rules_parse.h — private interface of the rule-file reader (not public API),
 * shared by its stages:
 *
 *   rules_lex.c       text -> tokens, one at a time; errors at a source
 *                     position; the parser's token stream (peek, expect,
 *                     unclosed brackets)
 *   rules_parse.c     tokens -> struct pcgc_rule (recursive descent, names
 *                     resolved as they are read: a bare unknown name in the
 *                     match creates a variable, elsewhere it is an error)
 *   rules_validate.c  the static checks: names (defined, not taken, readable
 *                     where they are read), node outputs and required
 *                     attributes, bindable variables, unused definitions
 *   ruleset.c         the public pcgc_ruleset_* API; owns file names and
 *                     texts; the index of rules by name
 *
 * Language: docs/rules.md. Every limit below is an error with a message.
 */
#ifndef PCGC_RULES_PARSE_H
#define PCGC_RULES_PARSE_H

#include "model_internal.h" /* pcgc__src, pcgc__span, pcgc__suggest */
#include "rules_internal.h"

#define PCGC__RULES_MAX_TEXT (16 << 20) /* bytes of one rules file */
#define PCGC__RULES_MAX_NAME 64         /* characters of one name */
#define PCGC__RULES_MAX_DEPTH 64        /* nesting of ( and unary minus; expression tree height */
#define PCGC__RULES_MAX_EXPRS 4096      /* expressions of one rule */
#define PCGC__RULES_MAX_RULES 10000     /* rules of one set */

typedef enum pcgc__rtok_kind {
  PCGC__RT_NAME,  /* identifier or keyword */
  PCGC__RT_INT,   /* .i */
  PCGC__RT_FLOAT, /* .f */
  PCGC__RT_PUNCT, /* .p: the character, or one of PCGC__RP_* */
  PCGC__RT_EOF,
} pcgc__rtok_kind;

enum { PCGC__RP_EQ = 256, PCGC__RP_NE, PCGC__RP_LE, PCGC__RP_GE, PCGC__RP_ELLIPSIS };

typedef struct pcgc__rtok {
  pcgc__rtok_kind kind;
  int p;
  pcgc__span sp;
  int64_t i;
  double f;
} pcgc__rtok;

/* The lexer's state: tokens come one at a time, and the parser reads them
 * through a pcgc__tokwin (model_internal.h), so its memory does not grow with
 * the number of tokens of the file (issue 17). */
typedef struct pcgc__rules_lexer {
  const pcgc__src *src;
  size_t i;          /* next byte */
  size_t line_start; /* offset of the current line's first byte */
  int line;
} pcgc__rules_lexer;

void pcgc__rules_lex_init(pcgc__rules_lexer *L, const pcgc__src *src);
/* The next token; after the end of the text, PCGC__RT_EOF again. */
pcgc_status pcgc__rules_lex_next(pcgc__rules_lexer *L, pcgc__rtok *tok);
/* Lexes the whole text keeping nothing: the first lexical error, if any
 * (reported before any syntax error, as when all tokens were read first). */
pcgc_status pcgc__rules_lex_check(const pcgc__src *src);

/* True if s[0..n) is a keyword of the rule language. */
bool pcgc__rules_is_keyword(const char *s, size_t n);

/* Records a PCGC_ERR_PARSE error at loc (file:line:col, the source line and a
 * caret of len characters, cut at the end of the line). Returns the status. */
pcgc_status pcgc__rules_fail(const pcgc__src *src, pcgc_srcloc loc, int len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Parses every rule of the text (lexical errors first, then rule by rule;
 * names checked against `rs` and each other). On success *out is a malloc'd array of *n_out rules the caller
 * owns; on error nothing is returned. Rule and symbol locations point at
 * src->file, which must outlive the rules. */
pcgc_status pcgc__rules_parse(const pcgc__src *src, const pcgc_ruleset *rs, pcgc_rule ***out, int *n_out);

/* ------------------------------------------------------------- parser
 * State shared by the parser's files: rules_parse.c (the grammar),
 * rules_lex.c (the token stream and its errors), rules_validate.c (names,
 * definitions and node checks). */

enum { SIDE_MATCH, SIDE_WHERE, SIDE_REWRITE };
#define PCGC__RULES_MAX_OPEN (PCGC__RULES_MAX_DEPTH + 16)

typedef struct pcgc__rule_name pcgc__rule_name; /* an index of rules by name */

/* Room for the rule being read, at the language's limits; the finished rule
 * is packed to its size (pcgc__rule_pack). Side 0 is the match, 1 the rewrite. */
typedef struct pcgc__rule_scratch {
  rsym syms[PCGC_RULE_MAX_SYMS];
  int32_t inputs[PCGC_RULE_MAX_INPUTS];
  rtensor tensors[PCGC_RULE_MAX_TENSORS];
  rtype types[PCGC_RULE_MAX_INPUTS];                         /* of match input i */
  rpitem pitems[PCGC_RULE_MAX_INPUTS][PCGC_RULE_MAX_PITEMS]; /* of match input i */
  rnode nodes[2][PCGC_RULE_MAX_NODES];
  int32_t args[2][PCGC_RULE_MAX_NODES][PCGC_RULE_MAX_ARGS];
  rattr attrs[2][PCGC_RULE_MAX_NODES][PCGC_RULE_MAX_ATTRS];
  int32_t outs[2][PCGC_RULE_MAX_NODES][PCGC_RULE_MAX_OUTS];
  int32_t yields[2][PCGC_RULE_MAX_YIELDS];
  rcond conds[PCGC_RULE_MAX_CONDS];
} pcgc__rule_scratch;

typedef struct pcgc__rparser {
  const pcgc__src *src;
  pcgc__tokwin *win; /* tokens, lexed on demand; those before a rule are dropped when it starts */
  int pos;
  const pcgc_ruleset *rs;
  pcgc_rule **rules; /* finished rules of this file */
  int n_rules, cap_rules;
  pcgc__rule_name *names; /* the same by name */
  pcgc_rule *r; /* the rule being read: its arrays point into *scratch */
  pcgc__rule_scratch *scratch;
  int side;     /* SIDE_*: what a name may mean */
  int depth;    /* open ( and unary minus in the current expression */
  int *height;  /* per expression of r: tree height */
  int cap_ex;
  uint32_t *same;  /* the where block's expressions by content (intern_rx):
                      gen << 16 | index + 1, slots of older stamps empty */
  uint32_t same_gen; /* stamp of the where block being read */
  bool same_on;      /* in a where block */
  int open[PCGC__RULES_MAX_OPEN]; /* token indices of unclosed brackets */
  const char *open_what[PCGC__RULES_MAX_OPEN];
  int n_open;
} pcgc__rparser;

/* Token k of the file (the end of file past it); valid until the next rule starts. */
static inline const pcgc__rtok *tok_at(const pcgc__rparser *P, int k) { return pcgc__tokwin_at(P->win, k); }
static inline const pcgc__rtok *peek(const pcgc__rparser *P) { return tok_at(P, P->pos); }
static inline const pcgc__rtok *peek2(const pcgc__rparser *P) { return tok_at(P, P->pos + 1); }
static inline const pcgc__rtok *advance(pcgc__rparser *P) {
  const pcgc__rtok *t = peek(P);
  if (t->kind != PCGC__RT_EOF) P->pos++;
  return t;
}
static inline const char *text(const pcgc__rparser *P, const pcgc__rtok *t) { return P->src->text + t->sp.off; }
static inline bool is_p(const pcgc__rtok *t, int c) { return t->kind == PCGC__RT_PUNCT && t->p == c; }
static inline bool is_kw(const pcgc__rparser *P, const pcgc__rtok *t, const char *kw) {
  size_t n = strlen(kw);
  return t->kind == PCGC__RT_NAME && (size_t)t->sp.len == n && memcmp(text(P, t), kw, n) == 0;
}
static inline bool is_keyword(const pcgc__rparser *P, const pcgc__rtok *t) {
  return t->kind == PCGC__RT_NAME && pcgc__rules_is_keyword(text(P, t), (size_t)t->sp.len);
}
static inline bool is_name(const pcgc__rparser *P, const pcgc__rtok *t) {
  return t->kind == PCGC__RT_NAME && !is_keyword(P, t);
}
static inline bool is_under(const pcgc__rparser *P, const pcgc__rtok *t) {
  return t->kind == PCGC__RT_NAME && t->sp.len == 1 && text(P, t)[0] == '_';
}
static inline pcgc_srcloc loc_of(const pcgc__rparser *P, const pcgc__rtok *t) {
  return (pcgc_srcloc){P->src->file, t->sp.line, t->sp.col};
}
static inline int prev_end(const pcgc__rparser *P) {
  const pcgc__rtok *t = tok_at(P, P->pos > 0 ? P->pos - 1 : 0);
  return t->sp.off + t->sp.len;
}
/* A token's text as a NUL-terminated string (names are at most 64 bytes). */
#define TOKSTR(P, t) pcgc__rp_tokstr((P), (t), (char[PCGC__RULES_MAX_NAME + 1]){0})
const char *pcgc__rp_tokstr(const pcgc__rparser *P, const pcgc__rtok *t, char *buf);
/* "'foo'", "keyword 'rule'", "number '2'", "the end of the file" */
#define DESC(t) pcgc__rp_describe(P, (t), (char[96]){0}, 96)
const char *pcgc__rp_describe(const pcgc__rparser *P, const pcgc__rtok *t, char *buf, size_t n);
/* An error at loc (or at token t), and its hint; both return the status. */
pcgc_status pcgc__rp_fail(pcgc__rparser *P, pcgc_srcloc loc, int len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define FAIL(P, t, ...) pcgc__rp_fail((P), loc_of((P), (t)), (t)->sp.len, __VA_ARGS__)
pcgc_status pcgc__rp_hint(const pcgc__rparser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
pcgc_status pcgc__rp_oom(const pcgc__rparser *P);
/* Steps over an opening bracket (what: "the match", or NULL), or its closer. */
pcgc_status pcgc__rp_open(pcgc__rparser *P, const char *what);
void pcgc__rp_close(pcgc__rparser *P);
/* "expected WHAT, found X"; at the end of the file, the innermost bracket
 * that is never closed. */
pcgc_status pcgc__rp_expected(pcgc__rparser *P, const char *what, const char *hint_text);
pcgc_status pcgc__rp_expect_semi(pcgc__rparser *P, const char *after);
pcgc_status pcgc__rp_expect_p(pcgc__rparser *P, int c, const char *what, const char *hint_text);

/* names (rules_validate.c) */
int pcgc__rp_find_tensor(const pcgc_rule *r, const char *s);
int pcgc__rp_find_sym(const pcgc_rule *r, const char *s);
const char *pcgc__rp_sym_kind_name(rsym_kind k);
/* A new tensor or symbol name at t: not a keyword, not `_`, not taken. */
pcgc_status pcgc__rp_check_new_name(pcgc__rparser *P, const pcgc__rtok *t, const char *what);
pcgc_status pcgc__rp_add_sym(pcgc__rparser *P, const pcgc__rtok *t, rsym_kind kind, int32_t *out);
pcgc_status pcgc__rp_add_tensor(pcgc__rparser *P, const pcgc__rtok *t, int side, int node, int slot, int32_t *out);
const char *pcgc__rp_suggest_name(const pcgc__rparser *P, const char *s, bool tensors, bool syms);
/* A tensor read by name at t; use: 'a' node argument, 'y' yield, 'c' NAME.*
 * or NAME.KEY, 's' rank()/size(). */
pcgc_status pcgc__rp_ref_tensor(pcgc__rparser *P, const pcgc__rtok *t, int use, int32_t *out);
pcgc_status pcgc__rp_attr_key_hint(const pcgc__rparser *P, pcgc_op_kind op, const char *key);
/* After a node's arguments: its outputs fit the op, not all are `_`, and a
 * rewrite node has its required attributes. out_tok: the output names' tokens. */
pcgc_status pcgc__rp_check_node(pcgc__rparser *P, rnode *nd, const pcgc__rtok *op_tok, const int *out_tok);

/* Rules by name (a uthash table, ruleset.c). add: PCGC_ERR_NOMEM or OK. */
pcgc_status pcgc__rule_index_add(pcgc__rule_name **index, pcgc_rule *r);
pcgc_rule *pcgc__rule_index_find(pcgc__rule_name *index, const char *name);
void pcgc__rule_index_del(pcgc__rule_name **index, const char *name);
void pcgc__rule_index_clear(pcgc__rule_name **index);

/* After the match block: every variable has a bare occurrence that binds it. */
pcgc_status pcgc__rules_validate_match(const pcgc__src *src, const pcgc_rule *r);
/* After the whole rule: no unused parameter, input or tensor. */
pcgc_status pcgc__rules_validate(const pcgc__src *src, const pcgc_rule *r);

#endif
