/*
 * model_internal.h — private interface of the model-file reader, shared by
 * its three stages (not public API):
 *
 *   model_lex.c    text -> tokens, one at a time, and the token window both
 *                  readers parse from; also the arena, error reporting at a
 *                  source span and "did you mean" suggestions
 *   model_parse.c  tokens -> syntax tree (recursive descent, one function
 *                  per grammar rule of docs/model-format.md)
 *   model_build.c  syntax tree -> typed pcgc_graph (evaluates expressions,
 *                  instantiates blocks, creates weights, infers shapes)
 *   model.c        the public pcgc_model_parse / pcgc_model_load /
 *                  pcgc_read_file, and the --set overrides
 *
 * The builder runs each top-level statement as the parser hands it over and
 * then drops its syntax tree (issue 17: memory stays proportional to the
 * text; only blocks are kept, to be instantiated from their tree at each
 * call). Errors come as if the whole file were parsed first: lexical errors
 * anywhere before syntax errors (the lexer checks the whole text before
 * parsing starts), and a syntax error anywhere, unused blocks included,
 * before an error of building (the parse goes on to the end after one).
 */
#ifndef PCGC_MODEL_INTERNAL_H
#define PCGC_MODEL_INTERNAL_H

#include <stddef.h>

#include "pcg.h"

/* Limits: every one is an error with a clear message, never a crash. They
 * keep any input to about a second and a few hundred MB: a 100,000-node graph
 * takes ~0.7 s to build (~1.3 s under ASan), while real models are far
 * smaller (BERT-Large: 625 nodes; a 1000-layer ResNet: ~10,000). */
#define PCGC__MODEL_MAX_TEXT (64 << 20)   /* bytes of model text */
#define PCGC__MODEL_MAX_IDENT 256         /* characters of one written name */
#define PCGC__MODEL_MAX_NAME 1024         /* characters of a full (prefixed) name */
#define PCGC__MODEL_MAX_DEPTH 64          /* nested ( ) and unary minus in one expression */
#define PCGC__MODEL_MAX_EXPR 256          /* height of one expression tree */
#define PCGC__MODEL_MAX_LIST 64           /* entries of one [ ] list */
#define PCGC__MODEL_MAX_ARGS 64           /* tensors in one call, tensor params of a block */
#define PCGC__MODEL_MAX_PARAMS 64         /* parameters of one block */
#define PCGC__MODEL_MAX_REPEAT 10000      /* n of repeat(n) */
#define PCGC__MODEL_MAX_NODES 100000      /* nodes of one graph */
#define PCGC__MODEL_MAX_TENSORS 100000    /* tensors (node outputs) of one graph: a split
                                             names 16 at about 10 bytes of text each, and
                                             each keeps its type (issue 17) */
#define PCGC__MODEL_MAX_WORK 1000000      /* statements run, over all block instances */
#define PCGC__MODEL_MAX_NESTING 64        /* block instances inside block instances */

/* ------------------------------------------------------------ utilities */

/* A piece of the source: byte offset and length, and the 1-based line and
 * column of its first byte. */
typedef struct pcgc__span {
  int off, len, line, col;
} pcgc__span;

/* The text being read and where its errors go (never NULL). */
typedef struct pcgc__src {
  const char *text;
  size_t len;
  const char *file; /* name for messages */
  pcgc_error *err;
} pcgc__src;

/* Records an error at `sp`: message, file:line:col, the length to underline
 * (cut at the end of the line) and the source line. Returns `st`. */
pcgc_status pcgc__model_fail(const pcgc__src *src, pcgc__span sp, pcgc_status st, const char *fmt,
                             ...) __attribute__((format(printf, 4, 5)));

/* Phase-scoped memory: everything of one parse is freed at once. Allocations
 * are zeroed; NULL on out of memory. */
typedef struct pcgc__arena {
  struct pcgc__chunk *head;
} pcgc__arena;

void *pcgc__arena_alloc(pcgc__arena *a, size_t n);
char *pcgc__arena_strndup(pcgc__arena *a, const char *s, size_t n);
/* Frees everything but the newest chunk, which is emptied for reuse. */
void pcgc__arena_reset(pcgc__arena *a);
void pcgc__arena_free(pcgc__arena *a);

/* "Did you mean": keeps the candidate closest to `target` by edit distance
 * (insertions, deletions, substitutions and swaps of neighbours), if it is
 * close enough to be a plausible typo. */
typedef struct pcgc__suggest {
  const char *target;
  const char *best;
  int best_dist;
} pcgc__suggest;

void pcgc__suggest_init(pcgc__suggest *s, const char *target);
void pcgc__suggest_add(pcgc__suggest *s, const char *candidate);
/* The best candidate so far, or NULL when none is close enough. */
const char *pcgc__suggest_best(const pcgc__suggest *s);

/* -------------------------------------------------------------- tokens */

typedef enum pcgc__tok_kind {
  PCGC__TK_NAME,  /* identifier or keyword, dotted paths included */
  PCGC__TK_INT,   /* integer literal (value in .i) */
  PCGC__TK_FLOAT, /* float literal (value in .f) */
  PCGC__TK_PUNCT, /* one of ( ) [ ] { } , = : ; + - * / % */
  PCGC__TK_EOL,   /* end of statement: a newline, or ';' outside brackets */
  PCGC__TK_EOF,
} pcgc__tok_kind;

typedef struct pcgc__tok {
  pcgc__tok_kind kind;
  pcgc__span sp;
  int64_t i;
  double f;
} pcgc__tok;

/* The lexer's state: tokens come one at a time, so no reader holds more
 * than the few it is looking at (issue 17: memory stays proportional to the
 * text, not to its tokens). */
typedef struct pcgc__model_lexer {
  const pcgc__src *src;
  size_t i;          /* next byte */
  size_t line_start; /* offset of the current line's first byte */
  int line;
  int depth; /* open ( and [ */
  int last;  /* kind of the last token, -1 before the first */
} pcgc__model_lexer;

void pcgc__model_lex_init(pcgc__model_lexer *L, const pcgc__src *src);
/* The next token; after the end of the text, PCGC__TK_EOF again. */
pcgc_status pcgc__model_lex_next(pcgc__model_lexer *L, pcgc__tok *tok);
/* Lexes the whole text, keeping nothing: the first lexical error, if any.
 * Readers call this before parsing, so that a bad character anywhere is
 * reported before any syntax error, as when all tokens were read first. */
pcgc_status pcgc__model_lex_check(const pcgc__src *src);

/* A window on a token stream, shared by the model and rule readers. Tokens
 * (of any type; `elem` bytes each, starting with their kind) are lexed when
 * first looked at and kept in chunks of PCGC__TOKWIN_CHUNK; a token's address
 * stays valid until pcgc__tokwin_drop drops the chunk that holds it, so a
 * parser may keep pointers to the tokens of the construct it is reading, and
 * drops what lies before each statement. The lexer must not fail (the text
 * was checked first) except for lack of memory: then, as when a chunk cannot
 * be had, the window answers its end-of-file token and sets `status`. */
#define PCGC__TOKWIN_SHIFT 8
#define PCGC__TOKWIN_CHUNK (1 << PCGC__TOKWIN_SHIFT)

typedef pcgc_status (*pcgc__lex_fn)(void *lexer, void *tok);

typedef struct pcgc__tokwin {
  size_t elem;
  pcgc__lex_fn lex;
  void *lexer;
  unsigned char **chunk; /* chunk c holds tokens [c * CHUNK, (c + 1) * CHUNK); NULL once dropped */
  int n_chunk, cap_chunk;
  int first;     /* chunks before it are dropped */
  int n;         /* tokens lexed */
  bool eof;      /* the last lexed token is the end of the file */
  pcgc_status status;
  const void *eof_tok; /* answered on failure */
} pcgc__tokwin;

void pcgc__tokwin_init(pcgc__tokwin *w, size_t elem, pcgc__lex_fn lex, void *lexer, const void *eof_tok);
void pcgc__tokwin_free(pcgc__tokwin *w);
const void *pcgc__tokwin_fill(pcgc__tokwin *w, int k);
/* Token k (0-based, never a dropped one); past the end of the file, the
 * end-of-file token. */
static inline const void *pcgc__tokwin_at(pcgc__tokwin *w, int k) {
  if (k < w->n) return w->chunk[k >> PCGC__TOKWIN_SHIFT] + (size_t)(k & (PCGC__TOKWIN_CHUNK - 1)) * w->elem;
  return pcgc__tokwin_fill(w, k);
}
/* Frees the chunks that hold only tokens before token k. */
void pcgc__tokwin_drop(pcgc__tokwin *w, int k);

/* ---------------------------------------------------------- syntax tree */

typedef enum pcgc__expr_kind {
  PCGC__EX_INT,
  PCGC__EX_FLOAT,
  PCGC__EX_BOOL, /* true / false (value in .i) */
  PCGC__EX_NAME,
  PCGC__EX_NEG,  /* -l */
  PCGC__EX_BIN,  /* l op r */
} pcgc__expr_kind;

/* 32 bytes for a leaf, 48 with operands (issue 17: a model's memory stays
 * proportional to its text, and a constant expression has about one node per
 * two or three characters): the value fields share storage, read by kind, and
 * leaves are allocated without l and r (PCGC__EXPR_LEAF_SIZE), so only
 * PCGC__EX_NEG and PCGC__EX_BIN nodes may be read past the value. */
typedef struct pcgc__expr {
  pcgc__span sp;                /* the whole expression */
  pcgc__expr_kind kind : 8;
  char op;                      /* + - * / % for PCGC__EX_BIN */
  short height;                 /* of the tree below, for the depth limit (<= PCGC__MODEL_MAX_EXPR + 1) */
  union {
    int64_t i;                  /* PCGC__EX_INT, PCGC__EX_BOOL */
    double f;                   /* PCGC__EX_FLOAT */
    const char *name;           /* PCGC__EX_NAME */
  };
  struct pcgc__expr *l, *r;     /* PCGC__EX_NEG: l; PCGC__EX_BIN: l and r */
} pcgc__expr;

#define PCGC__EXPR_LEAF_SIZE offsetof(pcgc__expr, l)

/* A name as written, and where. */
typedef struct pcgc__ident {
  const char *s;
  pcgc__span sp;
} pcgc__ident;

/* An attribute value: a scalar expression (e) or a [ ] list (items). */
typedef struct pcgc__value {
  pcgc__expr *e;
  int n;
  pcgc__expr **items;
  pcgc__span sp;
} pcgc__value;

typedef struct pcgc__kv {
  pcgc__ident key;
  pcgc__value val;
} pcgc__kv;

/* A tensor type "f32[B, 784]". */
typedef struct pcgc__type {
  pcgc_dtype dtype;
  int rank;
  pcgc__expr **dims;
  pcgc__span sp; /* from the dtype to the ']' */
} pcgc__type;

typedef enum pcgc__param_kind { PCGC__P_TENSOR, PCGC__P_INT, PCGC__P_FLOAT } pcgc__param_kind;

typedef struct pcgc__param {
  pcgc__param_kind kind;
  pcgc__ident name;
  pcgc__expr *def; /* default, or NULL */
} pcgc__param;

typedef enum pcgc__stmt_kind {
  PCGC__ST_MODEL,
  PCGC__ST_CONST,
  PCGC__ST_INPUT,
  PCGC__ST_WEIGHT,
  PCGC__ST_LAYER,
  PCGC__ST_BLOCK,
  PCGC__ST_RETURN,
} pcgc__stmt_kind;

typedef struct pcgc__stmt {
  pcgc__stmt_kind kind;
  pcgc__span sp;     /* the statement's first token */
  pcgc__ident name;  /* model, const, input, weight, block */
  pcgc__expr *expr;  /* const value */
  pcgc__type type;   /* input, weight */
  int init;          /* weight: a pcgc_init, or -1 for the default */
  pcgc__expr *init_arg;
  pcgc__span init_sp;
  /* layer: lhs... = [repeat(n)] callee(pos..., kv...) */
  int n_lhs;
  pcgc__ident *lhs;
  pcgc__expr *repeat;
  pcgc__ident callee;
  int n_pos;
  pcgc__ident *pos;
  int n_kv;
  pcgc__kv *kv;
  /* block: params and body; the body's last statement is its return */
  int n_params;
  pcgc__param *params;
  int n_body;
  struct pcgc__stmt **body;
  /* return */
  int n_ret;
  pcgc__ident *ret;
} pcgc__stmt;

/* Reads the top-level statements of a text whose lexical check passed
 * (pcgc__model_lex_check), one at a time: syntax errors and misplaced
 * statements (return outside a block, a second model line, ...); names and
 * shapes are checked while building. Tokens are read on demand, a
 * statement's worth at a time. */
typedef struct pcgc__model_reader pcgc__model_reader;

pcgc__model_reader *pcgc__model_reader_new(const pcgc__src *src); /* NULL on out of memory */
void pcgc__model_reader_free(pcgc__model_reader *R);
/* The next statement's tree in *out, allocated in `arena`, or in `keep`
 * (when not NULL) for a block definition; *out is NULL after the last. */
pcgc_status pcgc__model_reader_next(pcgc__model_reader *R, pcgc__arena *arena, pcgc__arena *keep,
                                    const pcgc__stmt **out);
/* The lexical check, then every statement read and dropped: the first
 * lexical or syntax error, if any. */
pcgc_status pcgc__model_check_syntax(const pcgc__src *src);

/* True if s[0..len) is a keyword of the format. */
bool pcgc__model_is_keyword(const char *s, size_t len);

/* ------------------------------------------------------------- building */

/* A number of the model: exact integer or float. */
typedef struct pcgc__num {
  bool is_float;
  int64_t i;
  double f;
} pcgc__num;

/* Parses (from a text whose lexical check passed) and builds the graph, one
 * statement at a time. `set_vals[i]` is the value of the override
 * opts->set_names[i] (each names a constant of the file). On error, *out is
 * NULL and src->err says why: the first syntax error of the file if there
 * is one, else the first error of building. */
pcgc_status pcgc__model_build(const pcgc__src *src, const pcgc_model_options *opts, const pcgc__num *set_vals,
                              pcgc_graph **out);

#endif /* PCGC_MODEL_INTERNAL_H */
