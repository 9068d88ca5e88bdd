/*
 * json_strict.c — what cJSON lets through and pcgc's JSON files must not
 * hold (pcg.h, pcgc_json_check_strict): a NUL character (also written
 * \u0000, where cJSON would end the string), bytes that are not UTF-8, and
 * an object member named twice, escapes decoded ("a" and "\u0061" are one
 * name; cJSON would silently use the first). One pass over the text with a small tokenizer; a syntax error
 * ends the pass quietly, since the JSON parser that runs next reports it
 * with its position.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "uthash.h"

typedef struct jkey {
  char *s;       /* the member name, escapes decoded (owned) */
  size_t n;
  size_t at;     /* offset of its opening quote */
  UT_hash_handle hh;
} jkey;

typedef struct jscan {
  const char *t;
  size_t n, i;
  const char *path;
  pcgc_error *err;
  pcgc_status st;
  int depth;
} jscan;

static pcgc_srcloc loc(const jscan *J, size_t off) { return pcgc_srcloc_at(J->t, J->n, off, J->path); }

static void fail(jscan *J, size_t off, const char *msg) {
  if (J->st) return;
  J->st = pcgc_error_set(J->err, PCGC_ERR_PARSE, "%s", msg);
  pcgc_error_at(J->err, loc(J, off), 1, J->t, J->n);
}

/* Length of the UTF-8 sequence at t[i] (1..4), or 0 when it is not one:
 * overlong forms, surrogates and code points above U+10FFFF are refused. */
static int utf8_len(const unsigned char *t, size_t n, size_t i) {
  unsigned c = t[i];
  if (c < 0x80) return 1;
  int len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (!len || i + (size_t)len > n) return 0;
  for (int k = 1; k < len; k++)
    if ((t[i + (size_t)k] & 0xC0) != 0x80) return 0;
  unsigned c1 = t[i + 1];
  if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F))
    return 0;
  return len;
}

static void ws(jscan *J) {
  while (J->i < J->n && (J->t[J->i] == ' ' || J->t[J->i] == '\t' || J->t[J->i] == '\n' || J->t[J->i] == '\r')) J->i++;
}

static int hex4(const char *t, size_t n, size_t i) {
  if (i + 4 > n) return -1;
  int v = 0;
  for (int k = 0; k < 4; k++) {
    char c = t[i + (size_t)k];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

/* At '"': past the closing quote; false on a syntax error. A \u0000 fails. */
static bool string(jscan *J) {
  for (J->i++; J->i < J->n; J->i++) {
    char c = J->t[J->i];
    if (c == '"') {
      J->i++;
      return true;
    }
    if (c == '\\') {
      if (J->i + 1 < J->n && J->t[J->i + 1] == 'u' && hex4(J->t, J->n, J->i + 2) == 0) {
        fail(J, J->i, "the string holds \\u0000, a NUL character, where pcgc's JSON files never need one "
                      "(the reader would end the string there)");
        return false;
      }
      J->i++;
    }
  }
  return false;
}

/* The member name between t[a] and t[b] (the quotes excluded), escapes
 * decoded to UTF-8 (an invalid escape is kept as written: the parser
 * reports it), in a new string; NULL on out of memory. */
static char *decode(const char *t, size_t a, size_t b, size_t *len) {
  char *d = malloc(b - a + 1), *o = d;
  if (!d) return NULL;
  for (size_t i = a; i < b; i++) {
    if (t[i] != '\\' || i + 1 >= b) {
      *o++ = t[i];
      continue;
    }
    char e = t[++i];
    const char *plain = strchr("\"\\/", e), *ctl = strchr("bfnrt", e);
    if (plain) {
      *o++ = e;
    } else if (ctl) {
      *o++ = "\b\f\n\r\t"[ctl - "bfnrt"];
    } else if (e == 'u' && hex4(t, b, i + 1) >= 0) {
      unsigned cp = (unsigned)hex4(t, b, i + 1);
      i += 4;
      if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 < b + 1 && t[i + 1] == '\\' && t[i + 2] == 'u') {
        int lo = hex4(t, b, i + 3);
        if (lo >= 0xDC00 && lo <= 0xDFFF) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned)lo - 0xDC00);
          i += 6;
        }
      }
      if (cp < 0x80) {
        *o++ = (char)cp;
      } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | cp >> 6);
        *o++ = (char)(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | cp >> 12);
        *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
      } else {
        *o++ = (char)(0xF0 | cp >> 18);
        *o++ = (char)(0x80 | (cp >> 12 & 0x3F));
        *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
      }
    } else {
      *o++ = '\\';
      *o++ = e;
    }
  }
  *len = (size_t)(o - d);
  return d;
}

static bool value(jscan *J);

static bool object(jscan *J) {
  jkey *keys = NULL, *e, *tmp;
  bool ok = false;
  J->i++; /* '{' */
  ws(J);
  if (J->i < J->n && J->t[J->i] == '}') {
    J->i++;
    return true;
  }
  for (;;) {
    ws(J);
    if (J->i >= J->n || J->t[J->i] != '"') break;
    size_t at = J->i;
    if (!string(J)) break;
    jkey *k = malloc(sizeof *k);
    if (!k) {
      J->st = pcgc_error_set(J->err, PCGC_ERR_NOMEM, "out of memory checking %s", J->path);
      break;
    }
    k->at = at;
    if (!(k->s = decode(J->t, at + 1, J->i - 1, &k->n))) {
      free(k);
      J->st = pcgc_error_set(J->err, PCGC_ERR_NOMEM, "out of memory checking %s", J->path);
      break;
    }
    HASH_FIND(hh, keys, k->s, k->n, e);
    if (e) {
      char msg[400];
      pcgc_srcloc first = loc(J, e->at);
      snprintf(msg, sizeof msg, "the member \"%.*s\" is given twice (first at line %d, column %d); keep one",
               (int)(k->n < 200 ? k->n : 200), k->s, first.line, first.col);
      free(k->s);
      free(k);
      fail(J, at, msg);
      break;
    }
    HASH_ADD_KEYPTR(hh, keys, k->s, k->n, k);
    ws(J);
    if (J->i >= J->n || J->t[J->i] != ':') break;
    J->i++;
    if (!value(J) || J->st) break;
    ws(J);
    if (J->i < J->n && J->t[J->i] == ',') {
      J->i++;
      continue;
    }
    if (J->i < J->n && J->t[J->i] == '}') {
      J->i++;
      ok = true;
    }
    break;
  }
  HASH_ITER(hh, keys, e, tmp) {
    HASH_DEL(keys, e);
    free(e->s);
    free(e);
  }
  return ok;
}

static bool value(jscan *J) {
  ws(J);
  if (J->i >= J->n) return false;
  char c = J->t[J->i];
  if (c == '"') return string(J);
  if (c == '{' || c == '[') {
    if (++J->depth > 1000) return false; /* the parser refuses such nesting itself */
    bool ok;
    if (c == '{') {
      ok = object(J);
    } else {
      J->i++;
      ws(J);
      ok = true;
      if (J->i < J->n && J->t[J->i] == ']') {
        J->i++;
      } else {
        for (;;) {
          if (!value(J) || J->st) {
            ok = false;
            break;
          }
          ws(J);
          if (J->i < J->n && J->t[J->i] == ',') {
            J->i++;
            continue;
          }
          ok = J->i < J->n && J->t[J->i] == ']';
          if (ok) J->i++;
          break;
        }
      }
    }
    J->depth--;
    return ok;
  }
  while (J->i < J->n && !strchr(",}] \t\r\n", J->t[J->i])) J->i++; /* number, true, false, null */
  return true;
}

pcgc_status pcgc_json_check_strict(const char *text, size_t len, const char *path, pcgc_error *err) {
  jscan J = {text, len, 0, path ? path : "<json>", err, PCGC_OK, 0};
  for (size_t i = 0; i < len;) {
    if (text[i] == '\0') {
      fail(&J, i, "the file holds a NUL character; a JSON text never does (a damaged or binary file?)");
      return J.st;
    }
    int k = utf8_len((const unsigned char *)text, len, i);
    if (!k) {
      char msg[160];
      snprintf(msg, sizeof msg, "byte 0x%02X is not valid UTF-8; JSON files are UTF-8 text", (unsigned char)text[i]);
      fail(&J, i, msg);
      return J.st;
    }
    i += (size_t)k;
  }
  value(&J);
  return J.st;
}
