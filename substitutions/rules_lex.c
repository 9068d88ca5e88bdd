/*
 * rules_lex.c — the tokenizer of rule files (docs/rules.md), errors at a
 * source position, and the token-stream helpers of the parser.
 *
 * The lexer hands out one token at a time: the reader first runs it over
 * the whole text keeping nothing (so lexical errors come first), then parses
 * from a window of tokens lexed on demand (pcgc__tokwin). Tokens are: names
 * (keywords are names the parser recognises), integers, floats, punctuation
 * (the two-character comparisons and `...` are single tokens) and a final
 * end of file. Newlines
 * mean nothing: statements end with ';'. `#` starts a comment to the end of
 * the line, which may hold any bytes but NUL. Outside comments only printable
 * ASCII and whitespace are allowed; anything else is an error naming the byte.
 *
 * The parser keeps a stack of the brackets it has opened: at the end of the
 * file inside a construct, the error points at the bracket that is never
 * closed rather than at the end of the file; a missing ';' is reported just
 * after the token it should follow.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules_parse.h"

/* --------------------------------------------------------------- errors */

pcgc_status pcgc__rules_fail(const pcgc__src *src, pcgc_srcloc loc, int len, const char *fmt, ...) {
  char msg[sizeof src->err->message];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pcgc_error_set(src->err, PCGC_ERR_PARSE, "%s", msg);
  /* underline up to the end of the line at most */
  size_t off = 0;
  int line = 1;
  while (off < src->len && line < loc.line) {
    if (src->text[off] == '\n') line++;
    off++;
  }
  if (line == 1 && src->len >= 3 && memcmp(src->text, "\xEF\xBB\xBF", 3) == 0) off = 3; /* BOM */
  off += loc.col > 0 ? (size_t)(loc.col - 1) : 0;
  int n = 0;
  while (n < len && off + (size_t)n < src->len && src->text[off + (size_t)n] != '\n' &&
         src->text[off + (size_t)n] != '\r')
    n++;
  if (n < 1) n = 1;
  loc.file = src->file;
  pcgc_error_at(src->err, loc, n, src->text, src->len);
  return PCGC_ERR_PARSE;
}

/* ------------------------------------------------------------- keywords */

static const char *const keywords[] = {"rule", "match", "rewrite", "where", "input", "yield", "degree", "dim",
                                       "rank", "size",  "deg",     "sum",   "rep",   "micro", "true",   "false"};

bool pcgc__rules_is_keyword(const char *s, size_t n) {
  for (size_t i = 0; i < sizeof keywords / sizeof *keywords; i++)
    if (strlen(keywords[i]) == n && memcmp(keywords[i], s, n) == 0) return true;
  return false;
}

/* ---------------------------------------------------------------- lexer */

typedef pcgc__rules_lexer lexer;

static bool is_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool is_alnum(unsigned char c) { return is_alpha(c) || is_digit(c); }

static pcgc_srcloc loc_at(const lexer *L, size_t off) {
  pcgc_srcloc loc = {L->src->file, L->line, (int)(off - L->line_start) + 1};
  return loc;
}

static pcgc_status fail_at(const lexer *L, size_t off, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static pcgc_status fail_at(const lexer *L, size_t off, size_t len, const char *fmt, ...) {
  char msg[sizeof L->src->err->message];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return pcgc__rules_fail(L->src, loc_at(L, off), (int)(len > 200 ? 200 : len), "%s", msg);
}

static void make(const lexer *L, pcgc__rtok *tk, pcgc__rtok_kind kind, int p, size_t off, size_t len) {
  memset(tk, 0, sizeof *tk);
  tk->kind = kind;
  tk->p = p;
  tk->sp = (pcgc__span){(int)off, (int)len, L->line, (int)(off - L->line_start) + 1};
}

static pcgc_status lex_name(lexer *L, pcgc__rtok *tk) {
  const unsigned char *t = (const unsigned char *)L->src->text;
  size_t start = L->i, i = L->i;
  while (i < L->src->len && is_alnum(t[i])) i++;
  if (i - start > PCGC__RULES_MAX_NAME) {
    fail_at(L, start, i - start, "name is too long (%zu characters; at most %d)", i - start, PCGC__RULES_MAX_NAME);
    pcgc_error_hint(L->src->err, "use a shorter name");
    return PCGC_ERR_PARSE;
  }
  make(L, tk, PCGC__RT_NAME, 0, start, i - start);
  L->i = i;
  return PCGC_OK;
}

/* number = digits ["." digits] [("e"|"E") ["+"|"-"] digits] */
static pcgc_status lex_number(lexer *L, pcgc__rtok *tk) {
  const pcgc__src *src = L->src;
  const unsigned char *t = (const unsigned char *)src->text;
  size_t start = L->i, i = L->i, n = src->len;
  bool is_float = false;
  while (i < n && is_digit(t[i])) i++;
  if (i + 1 < n && t[i] == '.' && is_digit(t[i + 1])) {
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
  size_t len = i - start;
  if (i < n && is_alnum(t[i])) {
    size_t e = i;
    while (e < n && is_alnum(t[e])) e++;
    fail_at(L, start, e - start, "malformed number '%.*s'", (int)(e - start > 60 ? 60 : e - start), src->text + start);
    pcgc_error_hint(src->err, "numbers are written 4, 0.5, 1e-5; names start with a letter or _");
    return PCGC_ERR_PARSE;
  }
  if (!is_float) {
    int64_t v = 0;
    for (size_t k = start; k < i; k++) {
      int d = t[k] - '0';
      if (v > (INT64_MAX - d) / 10) {
        fail_at(L, start, len, "integer '%.*s' is too large", (int)(len > 40 ? 40 : len), src->text + start);
        pcgc_error_hint(src->err, "integers range up to 9223372036854775807");
        return PCGC_ERR_PARSE;
      }
      v = v * 10 + d;
    }
    make(L, tk, PCGC__RT_INT, 0, start, len);
    tk->i = v;
    L->i = i;
    return PCGC_OK;
  }
  char buf[64];
  if (len >= sizeof buf) {
    fail_at(L, start, len, "number '%.*s...' is too long", 20, src->text + start);
    pcgc_error_hint(src->err, "write it with an exponent: 1.5e-7");
    return PCGC_ERR_PARSE;
  }
  memcpy(buf, src->text + start, len);
  buf[len] = '\0';
  double v = strtod(buf, NULL);
  if (!isfinite(v)) {
    fail_at(L, start, len, "number '%s' is out of range", buf);
    pcgc_error_hint(src->err, "floats range up to about 1.8e308");
    return PCGC_ERR_PARSE;
  }
  make(L, tk, PCGC__RT_FLOAT, 0, start, len);
  tk->f = v;
  L->i = i;
  return PCGC_OK;
}

static pcgc_status stray(lexer *L, unsigned char c) {
  const pcgc__src *src = L->src;
  if (c >= 0x80) {
    fail_at(L, L->i, 1, "unexpected byte 0x%02X (not ASCII)", c);
    pcgc_error_hint(src->err, "only ASCII may appear outside # comments");
    return PCGC_ERR_PARSE;
  }
  if (c < 0x20 || c == 0x7F) {
    fail_at(L, L->i, 1, c == 0 ? "NUL byte in the rules text" : "control character 0x%02X", c);
    pcgc_error_hint(src->err, "a rules file is text; remove the binary data");
    return PCGC_ERR_PARSE;
  }
  fail_at(L, L->i, 1, c == '\'' ? "unexpected character \"%c\"" : "unexpected character '%c'", c);
  switch (c) {
  case '"':
  case '\'':
  case '`': pcgc_error_hint(src->err, "names are written without quotes"); break;
  case '!': pcgc_error_hint(src->err, "'!' only appears in '!='"); break;
  case '&':
  case '|': pcgc_error_hint(src->err, "write each condition on its own, ending with ';': all must hold"); break;
  default: pcgc_error_hint(src->err, "names use letters, digits and _; comments start with '#'"); break;
  }
  return PCGC_ERR_PARSE;
}

void pcgc__rules_lex_init(lexer *L, const pcgc__src *src) {
  const unsigned char *t = (const unsigned char *)src->text;
  *L = (lexer){src, 0, 0, 1};
  if (src->len >= 3 && t[0] == 0xEF && t[1] == 0xBB && t[2] == 0xBF) L->i = L->line_start = 3;
}

pcgc_status pcgc__rules_lex_next(lexer *L, pcgc__rtok *tk) {
  const pcgc__src *src = L->src;
  const unsigned char *t = (const unsigned char *)src->text;
  size_t n = src->len;
  while (L->i < n) {
    unsigned char c = t[L->i];
    if (c == '\n') {
      L->i++;
      L->line++;
      L->line_start = L->i;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      L->i++;
    } else if (c == '#') {
      while (L->i < n && t[L->i] != '\n') {
        if (t[L->i] == 0) {
          fail_at(L, L->i, 1, "NUL byte in a comment");
          pcgc_error_hint(src->err, "a rules file is text; remove the binary data");
          return PCGC_ERR_PARSE;
        }
        L->i++;
      }
    } else if (is_alpha(c)) {
      return lex_name(L, tk);
    } else if (is_digit(c)) {
      return lex_number(L, tk);
    } else if (c == '.' && L->i + 2 < n && t[L->i + 1] == '.' && t[L->i + 2] == '.') {
      make(L, tk, PCGC__RT_PUNCT, PCGC__RP_ELLIPSIS, L->i, 3);
      L->i += 3;
      return PCGC_OK;
    } else if ((c == '=' || c == '!' || c == '<' || c == '>') && L->i + 1 < n && t[L->i + 1] == '=') {
      int p = c == '=' ? PCGC__RP_EQ : c == '!' ? PCGC__RP_NE : c == '<' ? PCGC__RP_LE : PCGC__RP_GE;
      make(L, tk, PCGC__RT_PUNCT, p, L->i, 2);
      L->i += 2;
      return PCGC_OK;
    } else if (c != 0 && strchr("()[]{},;:=.*+-/%<>", c)) {
      make(L, tk, PCGC__RT_PUNCT, c, L->i, 1);
      L->i++;
      return PCGC_OK;
    } else {
      return stray(L, c);
    }
  }
  make(L, tk, PCGC__RT_EOF, 0, n, 0);
  return PCGC_OK;
}

pcgc_status pcgc__rules_lex_check(const pcgc__src *src) {
  lexer L;
  pcgc__rtok tk;
  pcgc__rules_lex_init(&L, src);
  pcgc_status s;
  while ((s = pcgc__rules_lex_next(&L, &tk)) == PCGC_OK && tk.kind != PCGC__RT_EOF) continue;
  return s;
}

/* --------------------------------------------------------- token stream */

typedef pcgc__rparser parser;

/* A token's text as a NUL-terminated string (names are at most 64 bytes). */
const char *pcgc__rp_tokstr(const parser *P, const pcgc__rtok *t, char *buf) {
  int n = t->sp.len > PCGC__RULES_MAX_NAME ? PCGC__RULES_MAX_NAME : t->sp.len;
  memcpy(buf, text(P, t), (size_t)n);
  buf[n] = '\0';
  return buf;
}

const char *pcgc__rp_describe(const parser *P, const pcgc__rtok *t, char *buf, size_t n) {
  int len = t->sp.len > 40 ? 40 : t->sp.len;
  switch (t->kind) {
  case PCGC__RT_NAME: snprintf(buf, n, "%s'%.*s'", is_keyword(P, t) ? "keyword " : "", len, text(P, t)); break;
  case PCGC__RT_INT:
  case PCGC__RT_FLOAT: snprintf(buf, n, "number '%.*s'", len, text(P, t)); break;
  case PCGC__RT_PUNCT: snprintf(buf, n, "'%.*s'", len, text(P, t)); break;
  case PCGC__RT_EOF: snprintf(buf, n, "the end of the file"); break;
  }
  return buf;
}

pcgc_status pcgc__rp_fail(parser *P, pcgc_srcloc loc, int len, const char *fmt, ...) {
  char msg[sizeof P->src->err->message];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return pcgc__rules_fail(P->src, loc, len, "%s", msg);
}

pcgc_status pcgc__rp_hint(const parser *P, const char *fmt, ...) {
  char buf[sizeof P->src->err->hint];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  pcgc_error_hint(P->src->err, "%s", buf);
  return P->src->err->status;
}

pcgc_status pcgc__rp_oom(const parser *P) {
  return pcgc_error_set(P->src->err, PCGC_ERR_NOMEM, "out of memory reading rules");
}

pcgc_status pcgc__rp_open(parser *P, const char *what) {
  if (P->n_open == PCGC__RULES_MAX_OPEN) {
    FAIL(P, peek(P), "brackets are nested too deeply");
    return pcgc__rp_hint(P, "simplify the expression");
  }
  P->open[P->n_open] = P->pos;
  P->open_what[P->n_open++] = what;
  advance(P);
  return PCGC_OK;
}
void pcgc__rp_close(parser *P) { advance(P), P->n_open--; }

/* "expected X, found Y"; at the end of the file, the innermost unclosed
 * bracket is the likely fault. */
pcgc_status pcgc__rp_expected(parser *P, const char *what, const char *hint_text) {
  const pcgc__rtok *t = peek(P);
  if (t->kind == PCGC__RT_EOF && P->n_open > 0) {
    const pcgc__rtok *o = tok_at(P, P->open[P->n_open - 1]);
    const char *w = P->open_what[P->n_open - 1];
    if (w)
      FAIL(P, o, "'%c' of %s is never closed", o->p, w);
    else
      FAIL(P, o, "'%c' is never closed", o->p);
    return pcgc__rp_hint(P, "the file ends before its '%c'", o->p == '(' ? ')' : o->p == '[' ? ']' : '}');
  }
  FAIL(P, t, "expected %s, found %s", what, DESC(t));
  return pcgc__rp_hint(P, "%s", hint_text);
}

/* A ';' ending a statement; a missing one is reported just after the token
 * before it, where it belongs. */
pcgc_status pcgc__rp_expect_semi(parser *P, const char *after) {
  if (is_p(peek(P), ';')) {
    advance(P);
    return PCGC_OK;
  }
  if (peek(P)->kind == PCGC__RT_EOF && P->n_open > 0) return pcgc__rp_expected(P, "';'", "");
  const pcgc__rtok *prev = tok_at(P, P->pos - 1);
  pcgc_srcloc loc = {P->src->file, prev->sp.line, prev->sp.col + prev->sp.len};
  pcgc__rp_fail(P, loc, 1, "expected ';' after %s, found %s", after, DESC(peek(P)));
  return pcgc__rp_hint(P, "every statement ends with ';'");
}

pcgc_status pcgc__rp_expect_p(parser *P, int c, const char *what, const char *hint_text) {
  if (is_p(peek(P), c)) {
    advance(P);
    return PCGC_OK;
  }
  return pcgc__rp_expected(P, what, hint_text);
}
