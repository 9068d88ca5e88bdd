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
  size_t n = j - i;
  if (n >= sizeof err->source_line) n = sizeof err->source_line - 1;
  /* tabs become spaces so the caret lines up */
  for (size_t k = 0; k < n; k++) {
    char c = source[i + k];
    err->source_line[k] = (c == '\t' || (unsigned char)c < 32) ? ' ' : c;
  }
  err->source_line[n] = '\0';
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
    int col = err->col > 0 ? err->col : 1;
    for (int i = 1; i < col; i++) fputc(' ', f);
    fputc('^', f);
    for (int i = 1; i < err->len; i++) fputc('~', f);
    fputc('\n', f);
  }
  if (err->hint[0]) fprintf(f, "hint: %s\n", err->hint);
}
