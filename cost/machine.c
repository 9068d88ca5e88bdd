/*
 * machine.c — machine files (docs/machine-format.md): the parser, preset
 * lookup, the canonical writer and quantities with units.
 *
 * The format is line-based: `key value [unit]`, `#` comments. The parser
 * reads one line at a time, looks the key up in `keys[]` (the one table of
 * what a file may say: kind of value, whether required, an example for
 * hints), converts the value and stores it through a field accessor. After
 * the last line it applies defaults and checks required and conditionally
 * required keys. Every error names file:line:col with the source line and a
 * hint; the fuzzer (tests/fuzz/fuzz_machine.c) holds it to never crashing and
 * to writing machines that read back equal.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cost.h"

/* ------------------------------------------------------------ suggestions */

/* "did you mean": the candidate closest to `target` by optimal string
 * alignment distance (edits and swaps of neighbours), if it is a typo: at
 * most 2 edits and fewer than half the letters of the shorter word. */
#define SUGGEST_MAX 64

typedef struct suggest {
  const char *target;
  const char *best;
  int best_dist;
} suggest;

static int edit_distance(const char *a, size_t na, const char *b, size_t nb) {
  int d[SUGGEST_MAX + 1][SUGGEST_MAX + 1];
  for (size_t i = 0; i <= na; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= nb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= na; i++)
    for (size_t j = 1; j <= nb; j++) {
      int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[na][nb];
}

static void suggest_init(suggest *s, const char *target) { *s = (suggest){target, NULL, 0}; }

static void suggest_add(suggest *s, const char *cand) {
  size_t nt = strlen(s->target), nc = strlen(cand);
  if (nt > SUGGEST_MAX || nc > SUGGEST_MAX || strcmp(cand, s->target) == 0) return;
  int d = edit_distance(s->target, nt, cand, nc);
  size_t shorter = nt < nc ? nt : nc;
  if (d > 2 || (size_t)d * 2 > shorter + 1) return;
  if (!s->best || d < s->best_dist) {
    s->best = cand;
    s->best_dist = d;
  }
}

/* ------------------------------------------------------------------ units */

typedef struct unit {
  const char *name;
  double mul, div;  /* base units (B, B/s, FLOP/s, s) = number × mul / div */
} unit;

/* Dividing by 1e6 rather than multiplying by 1e-6 keeps "5 us" equal to
 * the double 5e-6 (the quotient of exact numbers is correctly rounded). */
static const unit units_bytes[] = {
    {"B", 1, 1},    {"KB", 1e3, 1},  {"kB", 1e3, 1},  {"MB", 1e6, 1},        {"GB", 1e9, 1},
    {"TB", 1e12, 1}, {"KiB", 1024.0, 1}, {"MiB", 1048576.0, 1}, {"GiB", 1073741824.0, 1},
    {"TiB", 1099511627776.0, 1}, {NULL, 0, 0}};
static const unit units_rate[] = {
    {"B/s", 1, 1},      {"KB/s", 1e3, 1},   {"kB/s", 1e3, 1},    {"MB/s", 1e6, 1},     {"GB/s", 1e9, 1},
    {"TB/s", 1e12, 1},  {"KiB/s", 1024.0, 1}, {"MiB/s", 1048576.0, 1}, {"GiB/s", 1073741824.0, 1},
    {"TiB/s", 1099511627776.0, 1},
    {"b/s", 1, 8},      {"Kb/s", 1e3, 8},   {"kb/s", 1e3, 8},    {"Mb/s", 1e6, 8},     {"Gb/s", 1e9, 8},
    {"Tb/s", 1e12, 8},  {"bit/s", 1, 8},    {"Kbit/s", 1e3, 8},  {"kbit/s", 1e3, 8},  {"Mbit/s", 1e6, 8},
    {"Gbit/s", 1e9, 8}, {"Tbit/s", 1e12, 8}, {NULL, 0, 0}};
static const unit units_flops[] = {
    {"FLOP/s", 1, 1},     {"KFLOP/s", 1e3, 1}, {"kFLOP/s", 1e3, 1}, {"MFLOP/s", 1e6, 1},
    {"GFLOP/s", 1e9, 1},  {"TFLOP/s", 1e12, 1}, {"PFLOP/s", 1e15, 1}, {"FLOPS", 1, 1},
    {"KFLOPS", 1e3, 1},   {"kFLOPS", 1e3, 1},  {"MFLOPS", 1e6, 1},  {"GFLOPS", 1e9, 1},
    {"TFLOPS", 1e12, 1},  {"PFLOPS", 1e15, 1}, {NULL, 0, 0}};
static const unit units_time[] = {
    {"s", 1, 1}, {"ms", 1, 1e3}, {"us", 1, 1e6}, {"\xc2\xb5s", 1, 1e6} /* µ U+00B5 */,
    {"\xce\xbcs", 1, 1e6} /* μ U+03BC */, {"ns", 1, 1e9}, {NULL, 0, 0}};

static const unit *const unit_tables[] = {units_bytes, units_rate, units_flops, units_time};
static const char *const unit_lists[] = {
    "B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)",
    "B/s, KB/s, MB/s, GB/s, TB/s, GiB/s (bytes) or b/s, Kb/s, Mb/s, Gb/s, Tb/s (bits)",
    "FLOP/s, GFLOP/s, TFLOP/s, PFLOP/s (or GFLOPS, TFLOPS, PFLOPS)",
    "s, ms, us, ns",
};
static const char *const quantity_what[] = {"a size in bytes", "a bandwidth", "a FLOP rate", "a time"};

/* Units chosen when writing, largest first. */
static const unit fmt_bytes_bin[] = {{"TiB", 1099511627776.0, 1}, {"GiB", 1073741824.0, 1},
                                     {"MiB", 1048576.0, 1}, {"KiB", 1024.0, 1}, {NULL, 0, 0}};
static const unit fmt_bytes_dec[] = {{"TB", 1e12, 1}, {"GB", 1e9, 1}, {"MB", 1e6, 1}, {"KB", 1e3, 1},
                                     {"B", 1, 1},     {NULL, 0, 0}};
static const unit fmt_rate[] = {{"TB/s", 1e12, 1}, {"GB/s", 1e9, 1}, {"MB/s", 1e6, 1}, {"KB/s", 1e3, 1},
                                {"B/s", 1, 1},     {NULL, 0, 0}};
static const unit fmt_flops[] = {{"PFLOP/s", 1e15, 1}, {"TFLOP/s", 1e12, 1}, {"GFLOP/s", 1e9, 1},
                                 {"MFLOP/s", 1e6, 1},  {"FLOP/s", 1, 1},     {NULL, 0, 0}};
static const unit fmt_time[] = {{"s", 1, 1}, {"ms", 1, 1e3}, {"us", 1, 1e6}, {"ns", 1, 1e9}, {NULL, 0, 0}};

static double unit_value(double number, const unit *u) { return number * u->mul / u->div; }

static const unit *find_unit(const unit *table, const char *s, size_t n) {
  for (const unit *u = table; u->name; u++)
    if (strlen(u->name) == n && memcmp(u->name, s, n) == 0) return u;
  return NULL;
}

/* Writes value in unit u with the fewest significant digits that read back
 * to exactly `value` (as the parser computes it). Returns the digits needed,
 * or 0 if none up to 17 do. */
static int exact_digits(char *num, size_t n, double value, const unit *u) {
  double x = value * u->div / u->mul;
  for (int p = 1; p <= 17; p++) {
    snprintf(num, n, "%.*g", p, x);
    if (strchr(num, 'e') && x >= 1e-4 && x < 1e15) continue; /* "8e+01": write 80 */
    if (unit_value(strtod(num, NULL), u) == value) return p;
  }
  return 0;
}

/* Tries units largest first: the first the value reaches and that writes in
 * at most `max_digits` digits. Returns the digits used, 0 if none did. */
static int format_with(char *out, size_t n, int *wrote, double value, const unit *table, int max_digits) {
  char num[64];
  for (const unit *u = table; u->name; u++) {
    if (value < u->mul / u->div && u[1].name) continue;
    int p = exact_digits(num, sizeof num, value, u);
    if (p == 0 || p > max_digits) continue;
    *wrote = snprintf(out, n, "%s %s", num, u->name);
    return p;
  }
  return 0;
}

int pcgc_quantity_format(char *buf, size_t n, double value, pcgc_quantity q) {
  int w = 0;
  if (!isfinite(value) || value <= 0) {
    const char *base[] = {"B", "B/s", "FLOP/s", "s"};
    return snprintf(buf, n, "%.17g %s", value, base[(unsigned)q < 4 ? q : 0]);
  }
  switch (q) {
  case PCGC_QTY_BYTES: {
    /* binary units unless decimal ones need fewer digits: 80 GiB, 80 GB */
    char dec[96];
    int wd = 0, pd = format_with(dec, sizeof dec, &wd, value, fmt_bytes_dec, 17);
    int pb = value >= 1024 ? format_with(NULL, 0, &w, value, fmt_bytes_bin, 8) : 0;
    if (pb && (!pd || pb <= pd)) return format_with(buf, n, &w, value, fmt_bytes_bin, 8) ? w : 0;
    if (pd) return snprintf(buf, n, "%s", dec);
    break;
  }
  case PCGC_QTY_BYTE_RATE:
    if (format_with(buf, n, &w, value, fmt_rate, 17)) return w;
    break;
  case PCGC_QTY_FLOP_RATE:
    if (format_with(buf, n, &w, value, fmt_flops, 17)) return w;
    break;
  case PCGC_QTY_TIME:
    if (format_with(buf, n, &w, value, fmt_time, 17)) return w;
    break;
  }
  const char *base[] = {"B", "B/s", "FLOP/s", "s"};
  return snprintf(buf, n, "%.17g %s", value, base[(unsigned)q < 4 ? q : 0]);
}

/* ------------------------------------------------------------------- keys */

typedef enum key_kind {
  K_NAME,     /* [A-Za-z0-9._-]+ */
  K_TEXT,     /* the rest of the line */
  K_COUNT,    /* a positive integer */
  K_QTY,      /* a number with a unit of `qty` */
  K_BOOL,     /* yes no true false */
  K_DEVKIND,  /* gpu cpu */
} key_kind;

typedef enum required_when { OPTIONAL, ALWAYS, MULTI_DEVICE, MULTI_NODE } required_when;

typedef struct key_desc {
  const char *name;
  key_kind kind;
  pcgc_quantity qty;
  required_when required;
  bool zero_ok;          /* quantities: 0 allowed (times, reserved memory) */
  const char *example;   /* a line for hints */
  const char *what;
} key_desc;

enum {
  KEY_NAME, KEY_DESCRIPTION, KEY_NODES, KEY_DEVICES_PER_NODE, KEY_DEVICE_KIND,
  KEY_FLOPS_F32, KEY_FLOPS_F16, KEY_FLOPS_BF16, KEY_FLOPS_F64,
  KEY_MEMORY, KEY_MEMORY_RESERVED, KEY_MEMORY_BANDWIDTH, KEY_LAUNCH_OVERHEAD,
  KEY_INTRA_BANDWIDTH, KEY_INTRA_LATENCY, KEY_INTRA_SHARED,
  KEY_INTER_BANDWIDTH, KEY_INTER_LATENCY, KEY_INTER_SHARED,
  KEY_COUNT
};

static const key_desc keys[] = {
    [KEY_NAME] = {"name", K_NAME, 0, OPTIONAL, false, "name dgx-h100", "the machine's name"},
    [KEY_DESCRIPTION] = {"description", K_TEXT, 0, OPTIONAL, false, "description 8x H100 SXM, NVLink 4",
                         "one line about the machine"},
    [KEY_NODES] = {"nodes", K_COUNT, 0, ALWAYS, false, "nodes 4", "the number of nodes"},
    [KEY_DEVICES_PER_NODE] = {"devices_per_node", K_COUNT, 0, ALWAYS, false, "devices_per_node 8",
                              "the number of devices in each node"},
    [KEY_DEVICE_KIND] = {"device.kind", K_DEVKIND, 0, OPTIONAL, false, "device.kind gpu", "the kind of device: gpu or cpu"},
    [KEY_FLOPS_F32] = {"device.flops.f32", K_QTY, PCGC_QTY_FLOP_RATE, ALWAYS, false,
                       "device.flops.f32 67 TFLOP/s", "the peak f32 FLOP/s of one device"},
    [KEY_FLOPS_F16] = {"device.flops.f16", K_QTY, PCGC_QTY_FLOP_RATE, OPTIONAL, false,
                       "device.flops.f16 989 TFLOP/s", "the peak f16 FLOP/s of one device"},
    [KEY_FLOPS_BF16] = {"device.flops.bf16", K_QTY, PCGC_QTY_FLOP_RATE, OPTIONAL, false,
                        "device.flops.bf16 989 TFLOP/s", "the peak bf16 FLOP/s of one device"},
    [KEY_FLOPS_F64] = {"device.flops.f64", K_QTY, PCGC_QTY_FLOP_RATE, OPTIONAL, false,
                       "device.flops.f64 67 TFLOP/s", "the peak f64 FLOP/s of one device"},
    [KEY_MEMORY] = {"device.memory", K_QTY, PCGC_QTY_BYTES, ALWAYS, false, "device.memory 80 GiB",
                    "the memory capacity of one device"},
    [KEY_MEMORY_RESERVED] = {"device.memory_reserved", K_QTY, PCGC_QTY_BYTES, OPTIONAL, true,
                             "device.memory_reserved 1 GiB", "the memory the runtime keeps for itself"},
    [KEY_MEMORY_BANDWIDTH] = {"device.memory_bandwidth", K_QTY, PCGC_QTY_BYTE_RATE, ALWAYS, false,
                              "device.memory_bandwidth 3.35 TB/s", "the memory bandwidth of one device"},
    [KEY_LAUNCH_OVERHEAD] = {"device.launch_overhead", K_QTY, PCGC_QTY_TIME, OPTIONAL, true,
                             "device.launch_overhead 5 us", "the fixed cost of one kernel"},
    [KEY_INTRA_BANDWIDTH] = {"intra.bandwidth", K_QTY, PCGC_QTY_BYTE_RATE, MULTI_DEVICE, false,
                             "intra.bandwidth 450 GB/s", "the bandwidth per direction between devices of a node"},
    [KEY_INTRA_LATENCY] = {"intra.latency", K_QTY, PCGC_QTY_TIME, MULTI_DEVICE, true, "intra.latency 2 us",
                           "the latency between devices of a node"},
    [KEY_INTRA_SHARED] = {"intra.shared", K_BOOL, 0, OPTIONAL, false, "intra.shared no",
                          "whether the devices of a node share one intra-node link"},
    [KEY_INTER_BANDWIDTH] = {"inter.bandwidth", K_QTY, PCGC_QTY_BYTE_RATE, MULTI_NODE, false,
                             "inter.bandwidth 400 Gb/s", "the bandwidth per direction between nodes"},
    [KEY_INTER_LATENCY] = {"inter.latency", K_QTY, PCGC_QTY_TIME, MULTI_NODE, true, "inter.latency 5 us",
                           "the latency between nodes"},
    [KEY_INTER_SHARED] = {"inter.shared", K_BOOL, 0, OPTIONAL, false, "inter.shared yes",
                          "whether the devices of a node share one network port"},
};
_Static_assert(sizeof keys / sizeof keys[0] == KEY_COUNT, "one entry per key");

static double *qty_field(pcgc_machine *m, int key) {
  switch (key) {
  case KEY_FLOPS_F32: return &m->device.flops[PCGC_F32];
  case KEY_FLOPS_F16: return &m->device.flops[PCGC_F16];
  case KEY_FLOPS_BF16: return &m->device.flops[PCGC_BF16];
  case KEY_FLOPS_F64: return &m->device.flops[PCGC_F64];
  case KEY_MEMORY: return &m->device.memory;
  case KEY_MEMORY_RESERVED: return &m->device.memory_reserved;
  case KEY_MEMORY_BANDWIDTH: return &m->device.memory_bandwidth;
  case KEY_LAUNCH_OVERHEAD: return &m->device.launch_overhead;
  case KEY_INTRA_BANDWIDTH: return &m->intra.bandwidth;
  case KEY_INTRA_LATENCY: return &m->intra.latency;
  case KEY_INTER_BANDWIDTH: return &m->inter.bandwidth;
  case KEY_INTER_LATENCY: return &m->inter.latency;
  default: return NULL;
  }
}

/* Largest file read: a machine file is a few dozen lines; this keeps columns
 * in an int and every parse fast. */
#define MACHINE_MAX_TEXT (1 << 20)

/* Largest quantity a file may state: far above any machine, far below
 * overflow in the cost formulas. */
#define QTY_MAX 1e30

/* ----------------------------------------------------------------- parser */

typedef struct parser {
  const char *text;
  size_t len;
  const char *file;
  pcgc_error *err;
  pcgc_machine *m;
  int line;             /* current line, 1-based */
  size_t line_start;    /* offset of its first byte */
  int key_line[KEY_COUNT];
  size_t key_value_pos[KEY_COUNT];  /* offset of the value, for later checks */
  size_t key_value_len[KEY_COUNT];
  int last_line;        /* last line with any text, and its length */
  size_t last_line_len;
} parser;

static bool is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_space(int c) { return c == ' ' || c == '\t'; }
static bool is_key_char(int c) { return is_alpha(c) || is_digit(c) || c == '_' || c == '.'; }
static bool is_name_char(int c) { return is_alpha(c) || is_digit(c) || c == '_' || c == '.' || c == '-'; }

/* Records an error at byte offset `pos` of the current line, `len` bytes long. */
__attribute__((format(printf, 4, 5))) static pcgc_status err_at(parser *P, size_t pos, size_t len,
                                                               const char *fmt, ...) {
  if (!P->err) return PCGC_ERR_PARSE;
  char msg[sizeof P->err->message];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pcgc_error_set(P->err, PCGC_ERR_PARSE, "%s", msg);
  int col = (int)(pos - P->line_start) + 1;
  pcgc_srcloc loc = {P->file, P->line, col};
  pcgc_error_at(P->err, loc, len > 200 ? 200 : (int)(len ? len : 1), P->text, P->len);
  return PCGC_ERR_PARSE;
}

__attribute__((format(printf, 3, 4))) static pcgc_status hint(parser *P, pcgc_status s, const char *fmt,
                                                             ...) {
  if (!P->err) return s;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(P->err->hint, sizeof P->err->hint, fmt, ap);
  va_end(ap);
  return s;
}

/* Writes at most `max` bytes of s[0..n) for a message, with "..." if cut. */
static const char *excerpt(char *buf, size_t bufsize, const char *s, size_t n) {
  size_t max = bufsize - 4;
  if (n <= max) {
    memcpy(buf, s, n);
    buf[n] = '\0';
  } else {
    memcpy(buf, s, max);
    memcpy(buf + max, "...", 4);
  }
  return buf;
}

static int lookup_key(const char *s, size_t n) {
  for (int k = 0; k < KEY_COUNT; k++)
    if (strlen(keys[k].name) == n && memcmp(keys[k].name, s, n) == 0) return k;
  return -1;
}

static pcgc_status unknown_key(parser *P, size_t pos, size_t n) {
  char name[80];
  excerpt(name, sizeof name, P->text + pos, n);
  pcgc_status s = err_at(P, pos, n, "unknown key '%s'", name);
  suggest sg;
  suggest_init(&sg, name);
  for (int k = 0; k < KEY_COUNT; k++) suggest_add(&sg, keys[k].name);
  if (sg.best) return hint(P, s, "did you mean '%s'?", sg.best);
  /* a prefix of known keys: "device.flops" */
  char list[400] = "";
  size_t used = 0;
  for (int k = 0; k < KEY_COUNT; k++)
    if (strncmp(keys[k].name, name, strlen(name)) == 0 && keys[k].name[strlen(name)] == '.') {
      int w = snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", keys[k].name);
      if (w > 0 && (size_t)w < sizeof list - used) used += (size_t)w;
    }
  if (used) return hint(P, s, "did you mean one of: %s?", list);
  return hint(P, s, "keys: nodes, devices_per_node, device.*, intra.*, inter.* (docs/machine-format.md)");
}

/* A number at text[pos..end): [+-] digits [. digits] [e [+-] digits]. Sets
 * *numlen to its length (0 if there is none) and *neg if it has a '-'. */
static size_t scan_number(const char *t, size_t pos, size_t end, bool *neg, bool *integer) {
  size_t i = pos;
  *neg = false;
  *integer = true;
  if (i < end && (t[i] == '-' || t[i] == '+')) {
    *neg = t[i] == '-';
    i++;
  }
  size_t digits = 0;
  while (i < end && is_digit(t[i])) i++, digits++;
  if (i < end && t[i] == '.') {
    *integer = false;
    i++;
    while (i < end && is_digit(t[i])) i++, digits++;
  }
  if (digits == 0) return 0;
  if (i < end && (t[i] == 'e' || t[i] == 'E')) {
    size_t j = i + 1;
    if (j < end && (t[j] == '-' || t[j] == '+')) j++;
    if (j < end && is_digit(t[j])) {
      *integer = false;
      while (j < end && is_digit(t[j])) j++;
      i = j;
    }
  }
  return i - pos;
}

/* Reports anything left on the line after a value. */
static pcgc_status expect_end(parser *P, size_t pos, size_t end, const key_desc *kd) {
  while (pos < end && is_space(P->text[pos])) pos++;
  if (pos >= end) return PCGC_OK;
  size_t n = 0;
  while (pos + n < end && !is_space(P->text[pos + n])) n++;
  char tok[64];
  excerpt(tok, sizeof tok, P->text + pos, n);
  pcgc_status s = err_at(P, pos, n, "unexpected '%s' after the value of '%s'", tok, kd->name);
  if (kd->kind == K_COUNT) return hint(P, s, "%s is a plain number without a unit: '%s'", kd->name, kd->example);
  return hint(P, s, "one value per line, e.g. '%s'; comments start with '#'", kd->example);
}

static pcgc_status bad_unit(parser *P, const key_desc *kd, size_t pos, size_t n) {
  char u[64];
  excerpt(u, sizeof u, P->text + pos, n);
  /* a unit of another quantity */
  for (int q = 0; q < 4; q++) {
    if (q == (int)kd->qty) continue;
    if (find_unit(unit_tables[q], P->text + pos, n)) {
      pcgc_status s = err_at(P, pos, n, "'%s' is %s, but %s takes %s", u, quantity_what[q], kd->name,
                             quantity_what[kd->qty]);
      return hint(P, s, "use %s, e.g. '%s'", unit_lists[kd->qty], kd->example);
    }
  }
  pcgc_status s = err_at(P, pos, n, "unknown unit '%s' for %s", u, kd->name);
  /* case-insensitive matches: "gib" -> GiB; "gb/s" is GB/s or Gb/s */
  const char *ci[2] = {NULL, NULL};
  int nci = 0;
  for (const unit *un = unit_tables[kd->qty]; un->name; un++)
    if (strlen(un->name) == n && strncasecmp(un->name, P->text + pos, n) == 0 && nci < 2) ci[nci++] = un->name;
  if (nci == 2 && kd->qty == PCGC_QTY_BYTE_RATE)
    return hint(P, s, "units are case-sensitive: '%s' is bytes per second, '%s' bits per second",
                strchr(ci[0], 'B') ? ci[0] : ci[1], strchr(ci[0], 'B') ? ci[1] : ci[0]);
  if (nci >= 1) return hint(P, s, "units are case-sensitive: did you mean '%s'?", ci[0]);
  suggest sg;
  suggest_init(&sg, u);
  for (const unit *un = unit_tables[kd->qty]; un->name; un++)
    if ((unsigned char)un->name[0] < 0x80) suggest_add(&sg, un->name);
  if (sg.best)
    return hint(P, s, "did you mean '%s'? units: %s", sg.best, unit_lists[kd->qty]);
  return hint(P, s, "units for %s: %s", quantity_what[kd->qty], unit_lists[kd->qty]);
}

/* Converts the number at t[pos..pos+n); false if out of range. */
static bool to_double(const char *t, size_t pos, size_t n, double *v) {
  char buf[64];
  if (n >= sizeof buf) return false;
  memcpy(buf, t + pos, n);
  buf[n] = '\0';
  *v = strtod(buf, NULL);
  return isfinite(*v);
}

static pcgc_status parse_quantity(parser *P, int key, size_t pos, size_t end) {
  const key_desc *kd = &keys[key];
  const char *t = P->text;
  bool neg, integer;
  size_t nl = scan_number(t, pos, end, &neg, &integer);
  if (nl == 0) {
    size_t n = 0;
    while (pos + n < end && !is_space(t[pos + n])) n++;
    char tok[64];
    pcgc_status s = err_at(P, pos, n, "expected a number for %s, got '%s'", kd->name,
                           excerpt(tok, sizeof tok, t + pos, n));
    return hint(P, s, "write a number and a unit, e.g. '%s'", kd->example);
  }
  double v;
  if (!to_double(t, pos, nl, &v) || fabs(v) > QTY_MAX) {
    pcgc_status s = err_at(P, pos, nl, "number out of range for %s", kd->name);
    return hint(P, s, "write it with a larger unit, e.g. '%s'", kd->example);
  }
  size_t u = pos + nl;
  while (u < end && is_space(t[u])) u++;
  size_t un = 0;
  while (u + un < end && !is_space(t[u + un])) un++;
  if (un == 0) {
    pcgc_status s = err_at(P, pos + nl, 1, "missing unit after %.*s for %s", (int)nl, t + pos, kd->name);
    return hint(P, s, "%s takes %s: %s, e.g. '%s'", kd->name, quantity_what[kd->qty], unit_lists[kd->qty],
                kd->example);
  }
  const unit *unt = find_unit(unit_tables[kd->qty], t + u, un);
  if (!unt) return bad_unit(P, kd, u, un);
  pcgc_status st = expect_end(P, u + un, end, kd);
  if (st) return st;
  double value = unit_value(v, unt);
  if (neg && value != 0) {
    pcgc_status s = err_at(P, pos, nl, "%s cannot be negative", kd->name);
    return hint(P, s, "%s is %s, e.g. '%s'", kd->name, kd->what, kd->example);
  }
  value = fabs(value); /* -0 */
  if (!kd->zero_ok && value == 0) {
    pcgc_status s = err_at(P, pos, nl, "%s must be positive", kd->name);
    return hint(P, s, "%s is %s, e.g. '%s'", kd->name, kd->what, kd->example);
  }
  if (value > QTY_MAX || (value > 0 && value < 1e-30)) {
    pcgc_status s = err_at(P, pos, u + un - pos, "%s is out of range", kd->name);
    return hint(P, s, "values must lie between 1e-30 and 1e30 in base units (%s)", kd->example);
  }
  *qty_field(P->m, key) = value;
  return PCGC_OK;
}

static pcgc_status parse_count(parser *P, int key, size_t pos, size_t end) {
  const key_desc *kd = &keys[key];
  const char *t = P->text;
  bool neg, integer;
  size_t nl = scan_number(t, pos, end, &neg, &integer);
  if (nl == 0) {
    size_t n = 0;
    while (pos + n < end && !is_space(t[pos + n])) n++;
    char tok[64];
    pcgc_status s = err_at(P, pos, n, "expected a whole number for %s, got '%s'", kd->name,
                           excerpt(tok, sizeof tok, t + pos, n));
    return hint(P, s, "e.g. '%s'", kd->example);
  }
  int max = key == KEY_NODES ? PCGC_MACHINE_MAX_NODES : PCGC_MACHINE_MAX_DEVICES_PER_NODE;
  double v = 0;
  bool ok = to_double(t, pos, nl, &v); /* false: too long or too large */
  if (!integer) {
    pcgc_status s = err_at(P, pos, nl, "%s must be a whole number", kd->name);
    return hint(P, s, "%s is %s, e.g. '%s'", kd->name, kd->what, kd->example);
  }
  if (neg && (!ok || v != 0)) {
    pcgc_status s = err_at(P, pos, nl, "%s cannot be negative", kd->name);
    return hint(P, s, "%s is %s, e.g. '%s'", kd->name, kd->what, kd->example);
  }
  if (ok && v == 0) {
    pcgc_status s = err_at(P, pos, nl, "%s must be positive", kd->name);
    return hint(P, s, "%s is %s, e.g. '%s'", kd->name, kd->what, kd->example);
  }
  if (!ok || v > max) {
    pcgc_status s = err_at(P, pos, nl, "%s is too large (at most %d)", kd->name, max);
    return hint(P, s, "%s is %s", kd->name, kd->what);
  }
  pcgc_status st = expect_end(P, pos + nl, end, kd);
  if (st) return st;
  if (key == KEY_NODES)
    P->m->nodes = (int)v;
  else
    P->m->devices_per_node = (int)v;
  return PCGC_OK;
}

/* One word from `choices` (NULL-terminated); its index in *out. */
static pcgc_status parse_word(parser *P, int key, size_t pos, size_t end, const char *const *choices,
                              int *out) {
  const key_desc *kd = &keys[key];
  size_t n = 0;
  while (pos + n < end && !is_space(P->text[pos + n])) n++;
  for (int i = 0; choices[i]; i++)
    if (strlen(choices[i]) == n && memcmp(choices[i], P->text + pos, n) == 0) {
      *out = i;
      return expect_end(P, pos + n, end, kd);
    }
  char w[64], list[128] = "";
  excerpt(w, sizeof w, P->text + pos, n);
  size_t used = 0;
  suggest sg;
  suggest_init(&sg, w);
  for (int i = 0; choices[i]; i++) {
    suggest_add(&sg, choices[i]);
    int wr = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", choices[i]);
    if (wr > 0 && (size_t)wr < sizeof list - used) used += (size_t)wr;
  }
  pcgc_status s = err_at(P, pos, n, "'%s' is not a value of %s", w, kd->name);
  if (sg.best) return hint(P, s, "did you mean '%s'? choices: %s", sg.best, list);
  return hint(P, s, "choices: %s", list);
}

static pcgc_status parse_value(parser *P, int key, size_t pos, size_t end) {
  const key_desc *kd = &keys[key];
  const char *t = P->text;
  switch (kd->kind) {
  case K_QTY: return parse_quantity(P, key, pos, end);
  case K_COUNT: return parse_count(P, key, pos, end);
  case K_BOOL: {
    static const char *const choices[] = {"no", "yes", "false", "true", NULL};
    int i = 0;
    pcgc_status s = parse_word(P, key, pos, end, choices, &i);
    if (s) return s;
    (key == KEY_INTRA_SHARED ? &P->m->intra : &P->m->inter)->shared = i % 2 == 1;
    return PCGC_OK;
  }
  case K_DEVKIND: {
    static const char *const choices[] = {"gpu", "cpu", NULL};
    int i = 0;
    pcgc_status s = parse_word(P, key, pos, end, choices, &i);
    if (s) return s;
    P->m->device.kind = i == 0 ? PCGC_DEVICE_GPU : PCGC_DEVICE_CPU;
    return PCGC_OK;
  }
  case K_NAME: {
    size_t n = 0;
    while (pos + n < end && is_name_char(t[pos + n])) n++;
    if (n == 0 || (pos + n < end && !is_space(t[pos + n]))) {
      size_t bad = pos + n;
      pcgc_status s = err_at(P, bad, 1, "'%c' cannot appear in a machine name", t[bad]);
      return hint(P, s, "names use letters, digits, '_', '.' and '-', e.g. '%s'", kd->example);
    }
    if (n >= PCGC_MACHINE_NAME_MAX) {
      pcgc_status s = err_at(P, pos, n, "machine name is too long (%zu characters)", n);
      return hint(P, s, "at most %d characters", PCGC_MACHINE_NAME_MAX - 1);
    }
    memcpy(P->m->name, t + pos, n);
    P->m->name[n] = '\0';
    return expect_end(P, pos + n, end, kd);
  }
  case K_TEXT: {
    size_t n = end - pos;
    if (n >= PCGC_MACHINE_DESC_MAX) {
      pcgc_status s = err_at(P, pos, n, "description is too long (%zu bytes)", n);
      return hint(P, s, "at most %d bytes; put more in comments", PCGC_MACHINE_DESC_MAX - 1);
    }
    memcpy(P->m->description, t + pos, n);
    P->m->description[n] = '\0';
    return PCGC_OK;
  }
  }
  return PCGC_OK;
}

/* Checks the bytes of line [start, end): no NUL or control characters;
 * outside comments only ASCII, except in a description and the µ of µs. */
static pcgc_status check_chars(parser *P, size_t start, size_t end, size_t comment, bool text_value) {
  for (size_t i = start; i < end; i++) {
    unsigned char c = (unsigned char)P->text[i];
    if (c == 0) {
      pcgc_status s = err_at(P, i, 1, "NUL byte in a machine file");
      return hint(P, s, "machine files are text; is this the right file?");
    }
    if (c < 32 && c != '\t') {
      pcgc_status s = err_at(P, i, 1, "control character 0x%02x", c);
      return hint(P, s, "remove it; machine files are plain text");
    }
    if (c == 127) {
      pcgc_status s = err_at(P, i, 1, "control character 0x7f");
      return hint(P, s, "remove it; machine files are plain text");
    }
    if (c >= 0x80 && i < comment && !text_value) {
      bool micro = i + 2 < end && ((c == 0xc2 && (unsigned char)P->text[i + 1] == 0xb5) ||
                                   (c == 0xce && (unsigned char)P->text[i + 1] == 0xbc)) &&
                   P->text[i + 2] == 's';
      if (micro) {
        i++;
        continue;
      }
      pcgc_status s = err_at(P, i, 1, "non-ASCII character outside a comment or description");
      return hint(P, s, "write units in ASCII (us for microseconds, x for times)");
    }
  }
  return PCGC_OK;
}

static pcgc_status parse_line(parser *P, size_t start, size_t end) {
  const char *t = P->text;
  size_t comment = start;
  while (comment < end && t[comment] != '#') comment++;
  size_t i = start;
  while (i < comment && is_space(t[i])) i++;
  /* the key, to know whether the value is free text */
  size_t k0 = i;
  while (i < comment && is_key_char(t[i])) i++;
  size_t kn = i - k0;
  int key = kn ? lookup_key(t + k0, kn) : -1;
  pcgc_status st = check_chars(P, start, end, comment, key == KEY_DESCRIPTION);
  if (st) return st;
  if (k0 < end) {
    P->last_line = P->line;
    P->last_line_len = end - start;
  }
  if (k0 == comment) return PCGC_OK; /* blank or comment */
  if (kn == 0 || !is_alpha(t[k0])) {
    pcgc_status s = err_at(P, k0, 1, "expected a key at the start of the line, got '%c'", t[k0]);
    return hint(P, s, "lines are 'key value', e.g. 'nodes 4'; comments start with '#'");
  }
  if (key < 0) return unknown_key(P, k0, kn);
  const key_desc *kd = &keys[key];
  if (i < comment && !is_space(t[i]) && t[i] != '=' && t[i] != ':') {
    pcgc_status s = err_at(P, i, 1, "unexpected '%c' after key '%s'", t[i], kd->name);
    return hint(P, s, "separate key and value with a space: '%s'", kd->example);
  }
  while (i < comment && is_space(t[i])) i++;
  if (i < comment && (t[i] == '=' || t[i] == ':')) {
    pcgc_status s = err_at(P, i, 1, "unexpected '%c' after key '%s'", t[i], kd->name);
    return hint(P, s, "write the value after a space, without '=' or ':': '%s'", kd->example);
  }
  size_t vend = comment;
  while (vend > i && is_space(t[vend - 1])) vend--;
  if (i == vend) {
    pcgc_status s = err_at(P, k0 + kn, 1, "missing value after '%s'", kd->name);
    return hint(P, s, "%s is %s, e.g. '%s'", kd->name, kd->what, kd->example);
  }
  if (P->key_line[key]) {
    pcgc_status s = err_at(P, k0, kn, "duplicate key '%s'", kd->name);
    return hint(P, s, "'%s' was already set at line %d; keep one of them", kd->name, P->key_line[key]);
  }
  st = parse_value(P, key, i, vend);
  if (st) return st;
  P->key_line[key] = P->line;
  P->key_value_pos[key] = i;
  P->key_value_len[key] = vend - i;
  return PCGC_OK;
}

/* Puts the error position on line `line` (the value of a key, if known). */
static pcgc_status err_at_key(parser *P, int key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static pcgc_status err_at_key(parser *P, int key, const char *fmt, ...) {
  if (!P->err) return PCGC_ERR_PARSE;
  char msg[sizeof P->err->message];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pcgc_error_set(P->err, PCGC_ERR_PARSE, "%s", msg);
  /* the start of the key's line */
  size_t ls = P->key_value_pos[key];
  while (ls > 0 && P->text[ls - 1] != '\n') ls--;
  pcgc_srcloc loc = {P->file, P->key_line[key], (int)(P->key_value_pos[key] - ls) + 1};
  pcgc_error_at(P->err, loc, (int)(P->key_value_len[key] > 200 ? 200 : P->key_value_len[key]), P->text, P->len);
  return PCGC_ERR_PARSE;
}

/* A missing key is reported just past the end of the last line with text. */
static pcgc_status missing(parser *P, int key) {
  const key_desc *kd = &keys[key];
  if (P->err) {
    pcgc_error_set(P->err, PCGC_ERR_PARSE, "missing required key '%s' (%s)", kd->name, kd->what);
    int line = P->last_line ? P->last_line : 1;
    pcgc_srcloc loc = {P->file, line, (int)P->last_line_len + 1};
    pcgc_error_at(P->err, loc, 1, P->text, P->len);
  }
  return hint(P, PCGC_ERR_PARSE, "add a line such as '%s'", kd->example);
}

static pcgc_status check_required(parser *P) {
  for (int k = 0; k < KEY_COUNT; k++)
    if (keys[k].required == ALWAYS && !P->key_line[k]) return missing(P, k);
  for (int k = 0; k < KEY_COUNT; k++) {
    if (P->key_line[k]) continue;
    if (keys[k].required == MULTI_DEVICE && P->m->devices_per_node > 1) {
      pcgc_status s = err_at_key(P, KEY_DEVICES_PER_NODE, "missing key '%s': a node has %d devices", keys[k].name,
                                 P->m->devices_per_node);
      return hint(P, s, "add '%s' (%s)", keys[k].example, keys[k].what);
    }
    if (keys[k].required == MULTI_NODE && P->m->nodes > 1) {
      pcgc_status s = err_at_key(P, KEY_NODES, "missing key '%s': the machine has %d nodes", keys[k].name,
                                 P->m->nodes);
      return hint(P, s, "add '%s' (%s)", keys[k].example, keys[k].what);
    }
  }
  if ((double)P->m->nodes * P->m->devices_per_node > (double)PCGC_MACHINE_MAX_NODES * 16) {
    pcgc_status s = err_at_key(P, KEY_DEVICES_PER_NODE, "too many devices: %d nodes x %d", P->m->nodes,
                               P->m->devices_per_node);
    return hint(P, s, "at most %d devices in all", PCGC_MACHINE_MAX_NODES * 16);
  }
  if (P->key_line[KEY_MEMORY_RESERVED] && P->m->device.memory_reserved >= P->m->device.memory) {
    pcgc_status s = err_at_key(P, KEY_MEMORY_RESERVED, "device.memory_reserved is not less than device.memory");
    return hint(P, s, "the reserved part must leave some memory for the plan (device.memory at line %d)",
                P->key_line[KEY_MEMORY]);
  }
  return PCGC_OK;
}

/* The base name of `file` without ".machine", as a default machine name. */
static void default_name(char *out, const char *file) {
  const char *b = file ? strrchr(file, '/') : NULL;
  b = b ? b + 1 : (file ? file : "");
  size_t n = strlen(b);
  if (n > 8 && strcmp(b + n - 8, ".machine") == 0) n -= 8;
  size_t j = 0;
  for (size_t i = 0; i < n && j < PCGC_MACHINE_NAME_MAX - 1; i++)
    out[j++] = is_name_char(b[i]) ? b[i] : '_';
  if (j == 0) memcpy(out, "machine", (j = 7));
  out[j] = '\0';
}

pcgc_status pcgc_machine_parse(const char *text, size_t len, const char *filename, pcgc_machine *m,
                               pcgc_error *err) {
  if (!m || (!text && len)) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_machine_parse: NULL argument");
  memset(m, 0, sizeof *m);
  parser P = {.text = text, .len = len, .file = filename ? filename : "<machine>", .err = err, .m = m};
  if (len > MACHINE_MAX_TEXT) {
    P.line = 1;
    pcgc_status s = err_at(&P, 0, 1, "machine file is too large (%zu bytes)", len);
    return hint(&P, s, "a machine file is a few dozen lines; is this the right file?");
  }
  size_t pos = 0;
  if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) pos = 3; /* a UTF-8 byte-order mark */
  for (P.line = 1; pos < len; P.line++) {
    P.line_start = pos;
    size_t end = pos;
    while (end < len && text[end] != '\n') end++;
    size_t next = end < len ? end + 1 : len;
    if (end > pos && text[end - 1] == '\r') end--;
    pcgc_status st = parse_line(&P, pos, end);
    if (st) {
      memset(m, 0, sizeof *m);
      return st;
    }
    pos = next;
  }
  pcgc_status st = check_required(&P);
  if (st) {
    memset(m, 0, sizeof *m);
    return st;
  }
  /* defaults */
  double f32 = m->device.flops[PCGC_F32];
  for (int d = 0; d < PCGC_DTYPE_COUNT; d++)
    if (m->device.flops[d] == 0) m->device.flops[d] = f32;
  if (!P.key_line[KEY_NAME]) default_name(m->name, P.file);
  pcgc_error_clear(err);
  return PCGC_OK;
}

/* ------------------------------------------------------------------ files */

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static const char *presets_dir(void) {
  const char *env = getenv("PCGC_MACHINES_DIR");
  if (env && env[0]) return env;
#if defined(PCGC_MACHINES_DIR)
  return PCGC_MACHINES_DIR;
#elif defined(PCGC_SOURCE_DIR)
  return PCGC_SOURCE_DIR "/machines";
#else
  return NULL;
#endif
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Error for an unknown preset: did-you-mean and the list found in `dir`. */
static pcgc_status no_preset(const char *name, const char *dir, const char *path, pcgc_error *err) {
  pcgc_error_set(err, PCGC_ERR_IO, "no machine preset '%s' (looked for %s)", name, path);
  DIR *d = opendir(dir);
  if (!d) {
    pcgc_error_hint(err, "the presets directory %s cannot be read; set PCGC_MACHINES_DIR or give a path", dir);
    return PCGC_ERR_IO;
  }
  char *names[64];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < 64) {
    if (!has_suffix(e->d_name, ".machine") || e->d_name[0] == '.') continue;
    size_t len = strlen(e->d_name) - 8;
    names[n] = malloc(len + 1);
    if (!names[n]) break;
    memcpy(names[n], e->d_name, len);
    names[n][len] = '\0';
    n++;
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], cmp_str);
  char list[400] = "";
  size_t used = 0;
  suggest sg;
  suggest_init(&sg, name);
  for (int i = 0; i < n; i++) {
    suggest_add(&sg, names[i]);
    int w = snprintf(list + used, sizeof list - used, "%s%s", i ? " " : "", names[i]);
    if (w > 0 && (size_t)w < sizeof list - used) used += (size_t)w;
  }
  if (sg.best)
    pcgc_error_hint(err, "did you mean '%s'? presets: %s", sg.best, list);
  else if (n)
    pcgc_error_hint(err, "presets: %s (or give the path of a .machine file)", list);
  else
    pcgc_error_hint(err, "%s has no .machine files; set PCGC_MACHINES_DIR or give a path", dir);
  /* the suggestion points into names[]: the hint is already written */
  for (int i = 0; i < n; i++) free(names[i]);
  return PCGC_ERR_IO;
}

pcgc_status pcgc_machine_find(const char *arg, char *path, size_t n, pcgc_error *err) {
  if (!arg || !path || n == 0) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_machine_find: NULL argument");
  path[0] = '\0';
  if (!arg[0]) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "empty machine name");
    pcgc_error_hint(err, "give a preset such as dgx-h100, or the path of a .machine file");
    return PCGC_ERR_INVALID;
  }
  if (strchr(arg, '/') || has_suffix(arg, ".machine")) {
    if ((size_t)snprintf(path, n, "%s", arg) >= n)
      return pcgc_error_set(err, PCGC_ERR_INVALID, "machine path is too long");
    return PCGC_OK;
  }
  const char *dir = presets_dir();
  if (!dir) {
    pcgc_error_set(err, PCGC_ERR_IO, "no presets directory for machine '%s'", arg);
    pcgc_error_hint(err, "set PCGC_MACHINES_DIR to pcgc's machines/ directory, or give a path");
    return PCGC_ERR_IO;
  }
  if ((size_t)snprintf(path, n, "%s/%s.machine", dir, arg) >= n)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "machine path is too long");
  FILE *f = fopen(path, "rb");
  if (!f) return no_preset(arg, dir, path, err);
  fclose(f);
  return PCGC_OK;
}

pcgc_status pcgc_machine_load(const char *arg, pcgc_machine *m, pcgc_error *err) {
  char path[4096];
  if (m) memset(m, 0, sizeof *m);
  pcgc_status st = pcgc_machine_find(arg, path, sizeof path, err);
  if (st) return st;
  size_t len;
  char *text = pcgc_read_file(path, &len, err);
  if (!text) return err && err->status ? err->status : PCGC_ERR_IO;
  st = pcgc_machine_parse(text, len, path, m, err);
  free(text);
  return st;
}

/* ---------------------------------------------------------------- writing */

typedef struct out {
  char *buf;
  size_t n;
  size_t used;  /* characters wanted so far */
} out;

__attribute__((format(printf, 2, 3))) static void put(out *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = o->used < o->n ? o->n - o->used : 0;
  int w = vsnprintf(room ? o->buf + o->used : NULL, room, fmt, ap);
  va_end(ap);
  if (w > 0) o->used += (size_t)w;
}

static void put_qty(out *o, const char *key, double v, pcgc_quantity q) {
  char b[96];
  pcgc_quantity_format(b, sizeof b, v, q);
  put(o, "%s %s\n", key, b);
}

int pcgc_machine_format(char *buf, size_t n, const pcgc_machine *m) {
  out o = {buf, n, 0};
  if (n) buf[0] = '\0';
  char b1[96], b2[96];
  int devs = pcgc_machine_num_devices(m);
  pcgc_quantity_format(b1, sizeof b1, m->device.flops[PCGC_BF16] * devs, PCGC_QTY_FLOP_RATE);
  pcgc_quantity_format(b2, sizeof b2, m->device.memory * devs, PCGC_QTY_BYTES);
  put(&o, "# %s: %d node%s x %d device%s = %d; %s bf16 and %s in all\n", m->name, m->nodes,
      m->nodes == 1 ? "" : "s", m->devices_per_node, m->devices_per_node == 1 ? "" : "s", devs, b1, b2);
  put(&o, "name %s\n", m->name);
  if (m->description[0]) put(&o, "description %s\n", m->description);
  put(&o, "nodes %d\n", m->nodes);
  put(&o, "devices_per_node %d\n", m->devices_per_node);
  put(&o, "device.kind %s\n", m->device.kind == PCGC_DEVICE_CPU ? "cpu" : "gpu");
  put_qty(&o, "device.flops.f32", m->device.flops[PCGC_F32], PCGC_QTY_FLOP_RATE);
  put_qty(&o, "device.flops.f16", m->device.flops[PCGC_F16], PCGC_QTY_FLOP_RATE);
  put_qty(&o, "device.flops.bf16", m->device.flops[PCGC_BF16], PCGC_QTY_FLOP_RATE);
  put_qty(&o, "device.flops.f64", m->device.flops[PCGC_F64], PCGC_QTY_FLOP_RATE);
  put_qty(&o, "device.memory", m->device.memory, PCGC_QTY_BYTES);
  if (m->device.memory_reserved > 0) put_qty(&o, "device.memory_reserved", m->device.memory_reserved, PCGC_QTY_BYTES);
  put_qty(&o, "device.memory_bandwidth", m->device.memory_bandwidth, PCGC_QTY_BYTE_RATE);
  if (m->device.launch_overhead > 0)
    put_qty(&o, "device.launch_overhead", m->device.launch_overhead, PCGC_QTY_TIME);
  else
    put(&o, "device.launch_overhead 0 s\n");
  const struct {
    const char *prefix;
    const pcgc_link *l;
  } links[] = {{"intra", &m->intra}, {"inter", &m->inter}};
  for (int i = 0; i < 2; i++) {
    /* a link a machine does not use may still state some of its keys */
    const pcgc_link *l = links[i].l;
    bool used = l->bandwidth > 0;
    char key[32];
    if (used) {
      snprintf(key, sizeof key, "%s.bandwidth", links[i].prefix);
      put_qty(&o, key, l->bandwidth, PCGC_QTY_BYTE_RATE);
    }
    if (l->latency > 0) {
      snprintf(key, sizeof key, "%s.latency", links[i].prefix);
      put_qty(&o, key, l->latency, PCGC_QTY_TIME);
    } else if (used) {
      put(&o, "%s.latency 0 s\n", links[i].prefix);
    }
    if (used || l->shared) put(&o, "%s.shared %s\n", links[i].prefix, l->shared ? "yes" : "no");
  }
  return o.used > INT32_MAX ? INT32_MAX : (int)o.used;
}

/* ------------------------------------------------------------ accessors */

bool pcgc_machine_equal(const pcgc_machine *a, const pcgc_machine *b) {
  if (strcmp(a->name, b->name) || strcmp(a->description, b->description)) return false;
  if (a->nodes != b->nodes || a->devices_per_node != b->devices_per_node) return false;
  const pcgc_device *x = &a->device, *y = &b->device;
  if (x->kind != y->kind || x->memory != y->memory || x->memory_reserved != y->memory_reserved ||
      x->memory_bandwidth != y->memory_bandwidth || x->launch_overhead != y->launch_overhead)
    return false;
  for (int d = 0; d < PCGC_DTYPE_COUNT; d++)
    if (x->flops[d] != y->flops[d]) return false;
  const pcgc_link *la[2] = {&a->intra, &a->inter}, *lb[2] = {&b->intra, &b->inter};
  for (int i = 0; i < 2; i++)
    if (la[i]->bandwidth != lb[i]->bandwidth || la[i]->latency != lb[i]->latency ||
        la[i]->shared != lb[i]->shared)
      return false;
  return true;
}

int pcgc_machine_num_devices(const pcgc_machine *m) { return m->nodes * m->devices_per_node; }

double pcgc_machine_usable_memory(const pcgc_machine *m) {
  return m->device.memory - m->device.memory_reserved;
}

void pcgc_machine_set_precision(pcgc_machine *m, pcgc_precision p) {
  if (m->device.kind != PCGC_DEVICE_GPU || p == PCGC_PREC_F32) return;
  double tensor = m->device.flops[PCGC_BF16] / (p == PCGC_PREC_TF32 ? 2 : 1);
  if (tensor > m->device.flops[PCGC_F32]) m->device.flops[PCGC_F32] = tensor;
  m->device.flops[PCGC_I32] = m->device.flops[PCGC_I64] = m->device.flops[PCGC_F32];
}
