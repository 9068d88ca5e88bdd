/*
 * model_lex.c — the lexer of the model format (docs/model-format.md), and the
 * small utilities the parser and elaborator share: an arena, errors at a
 * source span, and edit-distance suggestions.
 *
 * The lexer hands out one token at a time (pcgc__model_lex_next); readers
 * first run it over the whole text keeping nothing, so that lexical errors
 * come before syntax errors, then parse from a window of tokens lexed on
 * demand (pcgc__tokwin, also here), which keeps their memory proportional to
 * the text rather than to the number of tokens. It counts the nesting of ( and [ so that newlines inside them vanish (a call
 * or a list may span lines). '{' and '}' reset that count: they never occur
 * inside brackets in a valid file, and resetting keeps one missing ')' from
 * swallowing every line of a block. A ';' outside brackets is an end of
 * statement, like a newline; runs of them collapse into one token.
 *
 * Every byte is checked: NUL, control characters, stray punctuation and
 * anything non-ASCII outside comments are errors naming the character (and a
 * likely intended ASCII one for common look-alikes such as U+2212 minus);
 * comments may hold any valid UTF-8. A UTF-8 byte-order mark at the start is
 * skipped.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

/* ---------------------------------------------------------------- arena */

typedef struct pcgc__chunk {
  struct pcgc__chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} pcgc__chunk;

#define ARENA_CHUNK (64 * 1024)

void *pcgc__arena_alloc(pcgc__arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n == 0) n = 16;
  pcgc__chunk *c = a->head;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
    if (cap > SIZE_MAX - sizeof *c) return NULL;
    c = malloc(sizeof *c + cap);
    if (!c) return NULL;
    c->used = 0;
    c->cap = cap;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
}

char *pcgc__arena_strndup(pcgc__arena *a, const char *s, size_t n) {
  if (n == SIZE_MAX) return NULL;
  char *d = pcgc__arena_alloc(a, n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

void pcgc__arena_reset(pcgc__arena *a) {
  pcgc__chunk *c = a->head;
  if (!c) return;
  pcgc__chunk *rest = c->next;
  c->next = NULL;
  c->used = 0;
  a->head = rest;
  pcgc__arena_free(a);
  a->head = c;
}

void pcgc__arena_free(pcgc__arena *a) {
  pcgc__chunk *c = a->head;
  while (c) {
    pcgc__chunk *next = c->next;
    free(c);
    c = next;
  }
  a->head = NULL;
}

/* --------------------------------------------------------------- errors */

pcgc_status pcgc__model_fail(const pcgc__src *src, pcgc__span sp, pcgc_status st, const char *fmt,
                             ...) {
  char msg[sizeof src->err->message];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pcgc_error_set(src->err, st, "%s", msg);
  /* underline up to the end of the line at most */
  int len = 0;
  if (sp.off >= 0 && (size_t)sp.off <= src->len) {
    size_t end = (size_t)sp.off + (size_t)(sp.len > 0 ? sp.len : 0);
    if (end > src->len) end = src->len;
    for (size_t i = (size_t)sp.off; i < end && src->text[i] != '\n' && src->text[i] != '\r'; i++)
      len++;
  }
  if (len < 1) len = 1;
  pcgc_srcloc loc = {src->file, sp.line, sp.col};
  pcgc_error_at(src->err, loc, len, src->text, src->len);
  return st;
}

/* ---------------------------------------------------------- suggestions */

#define SUGGEST_MAX_LEN 64

/* Optimal string alignment distance (Levenshtein plus swaps of neighbours). */
static int edit_distance(const char *a, size_t na, const char *b, size_t nb) {
  int d[SUGGEST_MAX_LEN + 1][SUGGEST_MAX_LEN + 1];
  for (size_t i = 0; i <= na; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= nb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= na; i++)
    for (size_t j = 1; j <= nb; j++) {
      int cost = a[i - 1] != b[j - 1];
      int v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[na][nb];
}

void pcgc__suggest_init(pcgc__suggest *s, const char *target) {
  s->target = target;
  s->best = NULL;
  s->best_dist = 0;
}

void pcgc__suggest_add(pcgc__suggest *s, const char *cand) {
  if (!cand || !s->target) return;
  size_t nt = strlen(s->target), nc = strlen(cand);
  if (nt > SUGGEST_MAX_LEN || nc > SUGGEST_MAX_LEN || strcmp(cand, s->target) == 0) return;
  int d = edit_distance(s->target, nt, cand, nc);
  /* a typo: at most 2 edits, and fewer than half the letters of the shorter */
  size_t shorter = nt < nc ? nt : nc;
  if (d > 2 || (size_t)d * 2 > shorter + 1) return;
  if (!s->best || d < s->best_dist) {
    s->best = cand;
    s->best_dist = d;
  }
}

const char *pcgc__suggest_best(const pcgc__suggest *s) { return s->best; }

/* ------------------------------------------------------------- keywords */

static const char *const keywords[] = {"model", "const",  "input", "weight", "block", "return",
                                       "repeat", "tensor", "int",   "float",  "true",  "false"};

bool pcgc__model_is_keyword(const char *s, size_t len) {
  for (size_t i = 0; i < sizeof keywords / sizeof *keywords; i++)
    if (strlen(keywords[i]) == len && memcmp(keywords[i], s, len) == 0) return true;
  return false;
}

/* ---------------------------------------------------------------- lexer */

typedef pcgc__model_lexer lexer;

static bool is_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool is_alnum(unsigned char c) { return is_alpha(c) || is_digit(c); }

static pcgc__span span_at(const lexer *L, size_t off, size_t len) {
  pcgc__span sp = {(int)off, (int)len, L->line, (int)(off - L->line_start) + 1};
  return sp;
}

static void make(const lexer *L, pcgc__tok *tk, pcgc__tok_kind kind, size_t off, size_t len) {
  memset(tk, 0, sizeof *tk);
  tk->kind = kind;
  tk->sp = span_at(L, off, len);
}

/* Decodes one UTF-8 sequence at s[0..n); returns its length and the code
 * point, or 0 if the bytes are not valid UTF-8 (overlong forms, surrogates
 * and values past U+10FFFF included). */
static int utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
  if (n == 0) return 0;
  unsigned char c = s[0];
  int len;
  uint32_t v, min;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    len = 2, v = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, v = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if ((size_t)len > n) return 0;
  for (int k = 1; k < len; k++) {
    if ((s[k] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (s[k] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

/* A non-ASCII byte outside a comment: name the character, suggest ASCII. */
static pcgc_status bad_unicode(lexer *L) {
  const pcgc__src *src = L->src;
  const unsigned char *s = (const unsigned char *)src->text + L->i;
  uint32_t cp = 0;
  int n = utf8_decode(s, src->len - L->i, &cp);
  if (n == 0) {
    pcgc__model_fail(src, span_at(L, L->i, 1), PCGC_ERR_PARSE, "invalid UTF-8 byte 0x%02X", s[0]);
    pcgc_error_hint(src->err, "a model file must be UTF-8 text");
    return PCGC_ERR_PARSE;
  }
  /* underline one character (its bytes count once on screen) */
  pcgc__model_fail(src, span_at(L, L->i, 1), PCGC_ERR_PARSE, "unexpected character U+%04X '%.*s'",
                   (unsigned)cp, n, (const char *)s);
  const char *ascii = NULL;
  switch (cp) {
  case 0x2212: case 0x2010: case 0x2011: case 0x2012: case 0x2013: case 0x2014: ascii = "-"; break;
  case 0x00D7: case 0x2217: case 0x22C5: ascii = "*"; break;
  case 0x00F7: case 0x2215: ascii = "/"; break;
  case 0x00A0: case 0x2007: case 0x202F: case 0x2009: case 0x200B: case 0xFEFF: ascii = " "; break;
  case 0xFF08: ascii = "("; break;
  case 0xFF09: ascii = ")"; break;
  case 0xFF0C: ascii = ","; break;
  case 0xFF1D: ascii = "="; break;
  default: break;
  }
  if (ascii && ascii[0] == ' ')
    pcgc_error_hint(src->err, "this is an invisible or special space; replace it with an ordinary space");
  else if (ascii)
    pcgc_error_hint(src->err, "did you mean '%s'? only ASCII is allowed outside comments", ascii);
  else if (cp == 0x2018 || cp == 0x2019 || cp == 0x201C || cp == 0x201D)
    pcgc_error_hint(src->err, "names are written without quotes");
  else
    pcgc_error_hint(src->err, "only ASCII letters, digits and _ may form names; other characters "
                              "may appear in # comments");
  return PCGC_ERR_PARSE;
}

/* A comment runs to the end of the line; it may hold any valid UTF-8. */
static pcgc_status lex_comment(lexer *L) {
  const pcgc__src *src = L->src;
  const unsigned char *t = (const unsigned char *)src->text;
  while (L->i < src->len && t[L->i] != '\n') {
    unsigned char c = t[L->i];
    if (c == 0) {
      pcgc__model_fail(src, span_at(L, L->i, 1), PCGC_ERR_PARSE, "NUL byte in a comment");
      pcgc_error_hint(src->err, "a model file is text; this one holds binary data");
      return PCGC_ERR_PARSE;
    }
    if (c < 0x80) {
      L->i++;
      continue;
    }
    uint32_t cp;
    int n = utf8_decode(t + L->i, src->len - L->i, &cp);
    if (n == 0) {
      pcgc__model_fail(src, span_at(L, L->i, 1), PCGC_ERR_PARSE, "invalid UTF-8 byte 0x%02X in a comment", c);
      pcgc_error_hint(src->err, "a model file must be UTF-8 text");
      return PCGC_ERR_PARSE;
    }
    L->i += (size_t)n;
  }
  return PCGC_OK;
}

/* name = (letter | _) {letter | digit | _} {"." (letter | digit | _)+} */
static pcgc_status lex_name(lexer *L, pcgc__tok *tk) {
  const pcgc__src *src = L->src;
  const unsigned char *t = (const unsigned char *)src->text;
  size_t start = L->i, i = L->i;
  while (i < src->len && is_alnum(t[i])) i++;
  while (i < src->len && t[i] == '.') {
    if (i + 1 >= src->len || !is_alnum(t[i + 1])) {
      pcgc__model_fail(src, span_at(L, start, i + 1 - start), PCGC_ERR_PARSE,
                       "name '%.*s' ends with '.'", (int)(i + 1 - start > 80 ? 80 : i + 1 - start),
                       src->text + start);
      pcgc_error_hint(src->err, "each part of a dotted name needs letters or digits: enc.3.attn");
      return PCGC_ERR_PARSE;
    }
    i++;
    while (i < src->len && is_alnum(t[i])) i++;
  }
  if (i - start > PCGC__MODEL_MAX_IDENT) {
    pcgc__model_fail(src, span_at(L, start, i - start), PCGC_ERR_PARSE,
                     "name is too long (%zu characters; at most %d)", i - start, PCGC__MODEL_MAX_IDENT);
    pcgc_error_hint(src->err, "use a shorter name");
    return PCGC_ERR_PARSE;
  }
  make(L, tk, PCGC__TK_NAME, start, i - start);
  L->i = i;
  return PCGC_OK;
}

/* number = digits ["." digits] [("e"|"E") ["+"|"-"] digits] | "." digits [...] */
static pcgc_status lex_number(lexer *L, pcgc__tok *tk) {
  const pcgc__src *src = L->src;
  const unsigned char *t = (const unsigned char *)src->text;
  size_t start = L->i, i = L->i, n = src->len;
  bool is_float = false;
  while (i < n && is_digit(t[i])) i++;
  if (i < n && t[i] == '.') {
    is_float = true;
    i++;
    while (i < n && is_digit(t[i])) i++;
  }
  if (i < n && (t[i] == 'e' || t[i] == 'E')) {
    size_t k = i + 1;
    if (k < n && (t[k] == '+' || t[k] == '-')) k++;
    if (k < n && is_digit(t[k])) {
      is_float = true;
      i = k;
      while (i < n && is_digit(t[i])) i++;
    }
  }
  if (i < n && (is_alnum(t[i]) || t[i] == '.')) {
    size_t e = i;
    while (e < n && (is_alnum(t[e]) || t[e] == '.')) e++;
    size_t shown = e - start > 80 ? 80 : e - start;
    pcgc__model_fail(src, span_at(L, start, e - start), PCGC_ERR_PARSE, "malformed number '%.*s'",
                     (int)shown, src->text + start);
    if (t[i] == 'e' || t[i] == 'E')
      pcgc_error_hint(src->err, "an exponent needs digits: 1e-5");
    else
      pcgc_error_hint(src->err, "numbers are written 1024, 0.1, 1e-5; names start with a letter or _");
    return PCGC_ERR_PARSE;
  }
  size_t len = i - start;
  if (!is_float) {
    int64_t v = 0;
    for (size_t k = start; k < i; k++) {
      int d = t[k] - '0';
      if (v > (INT64_MAX - d) / 10) {
        pcgc__model_fail(src, span_at(L, start, len), PCGC_ERR_PARSE, "integer '%.*s' is too large",
                         (int)(len > 40 ? 40 : len), src->text + start);
        pcgc_error_hint(src->err, "integers range up to 9223372036854775807");
        return PCGC_ERR_PARSE;
      }
      v = v * 10 + d;
    }
    make(L, tk, PCGC__TK_INT, start, len);
    tk->i = v;
  } else {
    char buf[128];
    char *copy = len < sizeof buf ? buf : malloc(len + 1);
    if (!copy) return pcgc_error_set(src->err, PCGC_ERR_NOMEM, "out of memory reading the model");
    memcpy(copy, src->text + start, len);
    copy[len] = '\0';
    errno = 0;
    double v = strtod(copy, NULL);
    if (copy != buf) free(copy);
    if (!isfinite(v)) {
      pcgc__model_fail(src, span_at(L, start, len), PCGC_ERR_PARSE, "number '%.*s' is out of range",
                       (int)(len > 40 ? 40 : len), src->text + start);
      pcgc_error_hint(src->err, "floats range up to about 1.8e308");
      return PCGC_ERR_PARSE;
    }
    make(L, tk, PCGC__TK_FLOAT, start, len);
    tk->f = v;
  }
  L->i = i;
  return PCGC_OK;
}

static pcgc_status stray(lexer *L, unsigned char c) {
  const pcgc__src *src = L->src;
  pcgc__span sp = span_at(L, L->i, 1);
  if (c < 0x20 || c == 0x7F) {
    pcgc__model_fail(src, sp, PCGC_ERR_PARSE, c == 0 ? "NUL byte in the model text" : "control character 0x%02X",
                     c);
    pcgc_error_hint(src->err, "a model file is text; remove the binary data");
    return PCGC_ERR_PARSE;
  }
  pcgc__model_fail(src, sp, PCGC_ERR_PARSE, "unexpected character '%c'", c);
  switch (c) {
  case '"':
  case '\'':
  case '`': pcgc_error_hint(src->err, "names are written without quotes"); break;
  case '.': pcgc_error_hint(src->err, "a name cannot start with '.'"); break;
  case '<':
  case '>':
  case '!':
  case '&':
  case '|':
  case '^':
  case '~': pcgc_error_hint(src->err, "expressions use + - * / %% and parentheses"); break;
  case '\\': pcgc_error_hint(src->err, "lines need no continuation: newlines inside ( ) and [ ] are ignored"); break;
  default: pcgc_error_hint(src->err, "names use letters, digits, _ and '.'; comments start with '#'"); break;
  }
  return PCGC_ERR_PARSE;
}

void pcgc__model_lex_init(lexer *L, const pcgc__src *src) {
  const unsigned char *t = (const unsigned char *)src->text;
  *L = (lexer){src, 0, 0, 1, 0, -1};
  if (src->len >= 3 && t[0] == 0xEF && t[1] == 0xBB && t[2] == 0xBF) L->i = L->line_start = 3;
}

pcgc_status pcgc__model_lex_next(lexer *L, pcgc__tok *tk) {
  const unsigned char *t = (const unsigned char *)L->src->text;
  size_t n = L->src->len;
  pcgc_status s = PCGC_OK;
  tk->kind = PCGC__TK_EOF;
  while (L->i < n) {
    unsigned char c = t[L->i];
    bool got = false;
    if (c == '\n') {
      /* one end-of-statement token for a run of newlines and ';' */
      if (L->depth == 0 && L->last != -1 && L->last != PCGC__TK_EOL) make(L, tk, PCGC__TK_EOL, L->i, 1), got = true;
      L->i++;
      L->line++;
      L->line_start = L->i;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      L->i++;
    } else if (c == '#') {
      s = lex_comment(L);
    } else if (c >= 0x80) {
      s = bad_unicode(L);
    } else if (is_alpha(c)) {
      s = lex_name(L, tk), got = true;
    } else if (is_digit(c) || (c == '.' && L->i + 1 < n && is_digit(t[L->i + 1]))) {
      s = lex_number(L, tk), got = true;
    } else if (strchr("()[]{},=:;+-*/%", c) && c != 0) {
      if (c == ';' && L->depth == 0) {
        if (L->last != -1 && L->last != PCGC__TK_EOL) make(L, tk, PCGC__TK_EOL, L->i, 1), got = true;
      } else {
        if (c == '(' || c == '[') L->depth++;
        if ((c == ')' || c == ']') && L->depth > 0) L->depth--;
        if (c == '{' || c == '}') L->depth = 0;
        make(L, tk, PCGC__TK_PUNCT, L->i, 1), got = true;
      }
      L->i++;
    } else {
      s = stray(L, c);
    }
    if (s) return s;
    if (got) {
      L->last = (int)tk->kind;
      return PCGC_OK;
    }
  }
  make(L, tk, PCGC__TK_EOF, n, 0);
  L->last = PCGC__TK_EOF;
  return PCGC_OK;
}

pcgc_status pcgc__model_lex_check(const pcgc__src *src) {
  lexer L;
  pcgc__tok tk;
  pcgc__model_lex_init(&L, src);
  pcgc_status s;
  while ((s = pcgc__model_lex_next(&L, &tk)) == PCGC_OK && tk.kind != PCGC__TK_EOF) continue;
  return s;
}

/* --------------------------------------------------------- token window */

void pcgc__tokwin_init(pcgc__tokwin *w, size_t elem, pcgc__lex_fn lex, void *lexer, const void *eof_tok) {
  *w = (pcgc__tokwin){.elem = elem, .lex = lex, .lexer = lexer, .eof_tok = eof_tok};
}

void pcgc__tokwin_free(pcgc__tokwin *w) {
  for (int c = 0; c < w->n_chunk; c++) free(w->chunk[c]);
  free(w->chunk);
  w->chunk = NULL;
  w->n_chunk = w->cap_chunk = w->n = 0;
}

const void *pcgc__tokwin_fill(pcgc__tokwin *w, int k) {
  while (!w->eof && w->status == PCGC_OK && w->n <= k) {
    int c = w->n >> PCGC__TOKWIN_SHIFT;
    if (c == w->n_chunk) {
      if (w->n_chunk == w->cap_chunk) {
        int cap = w->cap_chunk ? w->cap_chunk * 2 : 16;
        unsigned char **v = realloc(w->chunk, (size_t)cap * sizeof *v);
        if (!v) {
          w->status = PCGC_ERR_NOMEM;
          break;
        }
        w->chunk = v;
        w->cap_chunk = cap;
      }
      if (!(w->chunk[c] = malloc(PCGC__TOKWIN_CHUNK * w->elem))) {
        w->status = PCGC_ERR_NOMEM;
        break;
      }
      w->n_chunk++;
    }
    void *tok = w->chunk[c] + (size_t)(w->n & (PCGC__TOKWIN_CHUNK - 1)) * w->elem;
    if ((w->status = w->lex(w->lexer, tok)) != PCGC_OK) break;
    w->n++;
    /* every token type starts with its kind (an enum) */
    w->eof = *(const int *)tok == *(const int *)w->eof_tok;
  }
  if (k < w->n) return pcgc__tokwin_at(w, k);
  if (w->eof) return pcgc__tokwin_at(w, w->n - 1);
  return w->eof_tok;
}

void pcgc__tokwin_drop(pcgc__tokwin *w, int k) {
  for (; w->first < w->n_chunk && (w->first + 1) * PCGC__TOKWIN_CHUNK <= k; w->first++) {
    free(w->chunk[w->first]);
    w->chunk[w->first] = NULL;
  }
}
