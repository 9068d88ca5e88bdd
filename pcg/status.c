/*
 * status.c — error reports: status names, messages with a source position,
 * and printing in the compiler style (file:line:col, the source line, a caret
 * under the fault, a hint).
 */
#include <stdarg.h>
#include <string.h>

#include "pcg.h"

const char *pcgc_status_str(pcgc_status s) {
  switch (s) {
  case PCGC_OK: return "ok";
  case PCGC_ERR_NOMEM: return "out of memory";
  case PCGC_ERR_IO: return "I/O error";
  case PCGC_ERR_PARSE: return "syntax error";
  case PCGC_ERR_TYPE: return "type error";
  case PCGC_ERR_INVALID: return "invalid argument";
  case PCGC_ERR_GRAPH: return "malformed graph";
  case PCGC_ERR_UNSUPPORTED: return "unsupported";
  }
  return "unknown error";
}

void pcgc_error_clear(pcgc_error *err) {
  if (err) memset(err, 0, sizeof *err);
}

pcgc_status pcgc_error_set(pcgc_error *err, pcgc_status s, const char *fmt, ...) {
  if (!err) return s;
  pcgc_error_clear(err);
  err->status = s;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
  return s;
}

pcgc_srcloc pcgc_srcloc_at(const char *text, size_t len, size_t off, const char *file) {
  pcgc_srcloc l = {file, 1, 1};
  for (size_t i = 0; i < off && i < len; i++) {
    if (text[i] == '\n') {
      l.line++;
      l.col = 1;
    } else {
      l.col++;
    }
  }
  return l;
}

void pcgc_error_at(pcgc_error *err, pcgc_srcloc loc, int len, const char *source,
                   size_t source_len) {
  if (!err) return;
  snprintf(err->file, sizeof err->file, "%s", loc.file ? loc.file : "");
  err->line = loc.line;
  err->col = loc.col;
  err->len = len;
  err->source_line[0] = '\0';
  if (!source || loc.line <= 0) return;
  /* find the start of line `loc.line` */
  size_t i = 0;
  for (int line = 1; line < loc.line && i < source_len; i++)
    if (source[i] == '\n') line++;
  size_t j = i;
  while (j < source_len && source[j] != '\n' && source[j] != '\r') j++;
  err->caret = 0;
  size_t n = j - i, from = 0, shown = n, at = 0;
  if (n > 160) { /* a long line: 150 characters around the column, "..." where cut */
    size_t c = loc.col > 0 ? (size_t)loc.col - 1 : 0;
    from = c > 70 ? c - 70 : 0;
    if (from + 150 > n) from = n > 150 ? n - 150 : 0;
    shown = n - from < 150 ? n - from : 150;
    if (from) {
      memcpy(err->source_line, "...", 3);
      at = 3;
    }
    err->caret = (int)(c - from + at) + 1;
  }
  /* tabs become spaces so the caret lines up */
  for (size_t k = 0; k < shown && at < sizeof err->source_line - 4; k++) {
    char c = source[i + from + k];
    err->source_line[at++] = (c == '\t' || (unsigned char)c < 32) ? ' ' : c;
  }
  if (from + shown < n) {
    memcpy(err->source_line + at, "...", 3);
    at += 3;
  }
  err->source_line[at] = '\0';
}

void pcgc_error_hint(pcgc_error *err, const char *fmt, ...) {
  if (!err) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->hint, sizeof err->hint, fmt, ap);
  va_end(ap);
}

void pcgc_error_print(FILE *f, const pcgc_error *err) {
  if (!err) return;
  if (err->file[0] && err->line > 0)
    fprintf(f, "%s:%d:%d: ", err->file, err->line, err->col);
  else if (err->file[0])
    fprintf(f, "%s: ", err->file);
  fprintf(f, "error: %s\n", err->message[0] ? err->message : pcgc_status_str(err->status));
  if (err->source_line[0] && err->line > 0) {
    char num[16];
    int w = snprintf(num, sizeof num, "%d", err->line);
    fprintf(f, " %s | %s\n", num, err->source_line);
    fprintf(f, " %*s | ", w, "");
    int col = err->caret > 0 ? err->caret : err->col > 0 ? err->col : 1;
    int width = (int)strlen(err->source_line);
    if (col > width + 1) col = width + 1;
    for (int i = 1; i < col; i++) fputc(' ', f);
    fputc('^', f);
    for (int i = 1; i < err->len && col + i <= width; i++) fputc('~', f);
    fputc('\n', f);
  }
  if (err->hint[0]) fprintf(f, "hint: %s\n", err->hint);
}
