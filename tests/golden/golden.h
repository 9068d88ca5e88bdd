/*
 * golden.h — reader for the golden tensor files of tests/golden (written by
 * gen_golden.py; the format is in README.md there):
 *
 *     "PCGT"  u32 version (1)  u32 count
 *     count times: u32 name_len, name, u32 dtype (0 f32, 1 f64, 2 i32),
 *                  u32 rank, i64 dims[rank], prod(dims) elements
 *
 * all little-endian. The whole file is checked while it is read: magic,
 * version, every length against the bytes that remain, dims >= 0 and their
 * product, unknown dtypes, duplicate names, trailing bytes. A bad file is an
 * error naming the file, the byte offset and what was wrong, never a crash.
 *
 *     golden_file f;
 *     if (golden_load("mlp.f64.bin", &f) != 0) fprintf(stderr, "%s\n", f.error);
 *     const golden_tensor *t = golden_find(&f, "fwd/loss");
 *     double loss = golden_at(t, 0);
 *     golden_free(&f);
 *
 * Include it in exactly one test file (static functions).
 */
#ifndef PCGC_TESTS_GOLDEN_H
#define PCGC_TESTS_GOLDEN_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN_MAX_RANK 8
#define GOLDEN_MAX_NAME 4096

typedef enum golden_dtype { GOLDEN_F32 = 0, GOLDEN_F64 = 1, GOLDEN_I32 = 2 } golden_dtype;

typedef struct golden_tensor {
  char *name;                     /* NUL-terminated */
  golden_dtype dtype;
  int rank;
  int64_t dims[GOLDEN_MAX_RANK];
  int64_t n;                      /* prod(dims); 1 for a scalar */
  void *data;                     /* n elements, native byte order */
} golden_tensor;

typedef struct golden_file {
  int count;
  golden_tensor *t;               /* in file order */
  char error[512];                /* set when load/parse fails */
} golden_file;

/* ---------------------------------------------------------- internals */

typedef struct golden__cursor {
  const unsigned char *p;
  size_t len, pos;
  const char *what;               /* file name, for messages */
  golden_file *f;
} golden__cursor;

static int golden__fail(golden__cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int golden__fail(golden__cursor *c, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(c->f->error, sizeof c->f->error, "%s: byte %zu: %s", c->what, c->pos, msg);
  return -1;
}

/* Takes `n` bytes for `field`; fails if fewer remain. */
static const unsigned char *golden__take(golden__cursor *c, size_t n, const char *field) {
  if (n > c->len - c->pos) {
    golden__fail(c, "truncated: %s needs %zu bytes, %zu left", field, n, c->len - c->pos);
    return NULL;
  }
  const unsigned char *q = c->p + c->pos;
  c->pos += n;
  return q;
}

static uint64_t golden__le(const unsigned char *q, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--) v = v << 8 | q[i];
  return v;
}

static int golden__u32(golden__cursor *c, uint32_t *v, const char *field) {
  const unsigned char *q = golden__take(c, 4, field);
  if (!q) return -1;
  *v = (uint32_t)golden__le(q, 4);
  return 0;
}

static void golden_free(golden_file *f) {
  if (!f) return;
  for (int i = 0; i < f->count; i++) {
    free(f->t[i].name);
    free(f->t[i].data);
  }
  free(f->t);
  f->t = NULL;
  f->count = 0;
}

static size_t golden_dtype_size(golden_dtype d) { return d == GOLDEN_F64 ? 8 : 4; }

static const char *golden_dtype_name(golden_dtype d) {
  return d == GOLDEN_F32 ? "f32" : d == GOLDEN_F64 ? "f64" : d == GOLDEN_I32 ? "i32" : "?";
}

static const golden_tensor *golden_find(const golden_file *f, const char *name) {
  for (int i = 0; i < f->count; i++)
    if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
  return NULL;
}

/* Element i as a double. */
static double golden_at(const golden_tensor *t, int64_t i) {
  switch (t->dtype) {
  case GOLDEN_F32: return ((const float *)t->data)[i];
  case GOLDEN_F64: return ((const double *)t->data)[i];
  case GOLDEN_I32: return ((const int32_t *)t->data)[i];
  }
  return 0;
}

static int golden__tensor(golden__cursor *c, golden_tensor *t, int index) {
  char field[64];
  uint32_t name_len, dtype, rank;
  snprintf(field, sizeof field, "tensor %d's name length", index);
  if (golden__u32(c, &name_len, field)) return -1;
  if (name_len == 0 || name_len > GOLDEN_MAX_NAME)
    return golden__fail(c, "tensor %d: name length %u is not in 1..%d", index, name_len, GOLDEN_MAX_NAME);
  snprintf(field, sizeof field, "tensor %d's name", index);
  const unsigned char *q = golden__take(c, name_len, field);
  if (!q) return -1;
  if (memchr(q, 0, name_len)) return golden__fail(c, "tensor %d: name holds a NUL byte", index);
  t->name = malloc(name_len + 1);
  if (!t->name) return golden__fail(c, "out of memory");
  memcpy(t->name, q, name_len);
  t->name[name_len] = '\0';

  if (golden__u32(c, &dtype, "dtype") || golden__u32(c, &rank, "rank")) return -1;
  if (dtype > GOLDEN_I32) return golden__fail(c, "'%s': unknown dtype %u (0 f32, 1 f64, 2 i32)", t->name, dtype);
  if (rank > GOLDEN_MAX_RANK) return golden__fail(c, "'%s': rank %u exceeds %d", t->name, rank, GOLDEN_MAX_RANK);
  t->dtype = (golden_dtype)dtype;
  t->rank = (int)rank;
  t->n = 1;
  for (int d = 0; d < t->rank; d++) {
    snprintf(field, sizeof field, "'%.40s' dim %d", t->name, d);
    q = golden__take(c, 8, field);
    if (!q) return -1;
    int64_t v = (int64_t)golden__le(q, 8);
    if (v < 0) return golden__fail(c, "'%s': dim %d is negative (%lld)", t->name, d, (long long)v);
    if (v > 0 && t->n > (int64_t)(SIZE_MAX / 8) / v)
      return golden__fail(c, "'%s': %d dims overflow", t->name, t->rank);
    t->dims[d] = v;
    t->n *= v;
  }
  size_t es = golden_dtype_size(t->dtype), bytes = (size_t)t->n * es;
  snprintf(field, sizeof field, "'%.40s' data", t->name);
  q = golden__take(c, bytes, field);
  if (!q) return -1;
  t->data = malloc(bytes ? bytes : 1);
  if (!t->data) return golden__fail(c, "out of memory");
  for (int64_t i = 0; i < t->n; i++) {
    uint64_t v = golden__le(q + (size_t)i * es, (int)es);
    if (es == 8) memcpy((char *)t->data + i * 8, &v, 8);
    else {
      uint32_t w = (uint32_t)v;
      memcpy((char *)t->data + i * 4, &w, 4);
    }
  }
  return 0;
}

/* Parses a whole file image. On failure returns -1 with f->error set and
 * nothing left allocated. */
static int golden_parse(const void *buf, size_t len, const char *what, golden_file *f) {
  memset(f, 0, sizeof *f);
  golden__cursor c = {buf, len, 0, what, f};
  const unsigned char *q = golden__take(&c, 4, "magic");
  if (!q) return -1;
  if (memcmp(q, "PCGT", 4) != 0) {
    c.pos = 0;
    return golden__fail(&c, "not a golden tensor file (magic is not \"PCGT\")");
  }
  uint32_t version, count;
  if (golden__u32(&c, &version, "version")) return -1;
  if (version != 1) return golden__fail(&c, "version %u, this reader knows version 1", version);
  if (golden__u32(&c, &count, "count")) return -1;
  /* each tensor takes at least 13 bytes: a bound that also caps the allocation */
  if (count > (len - c.pos) / 13) return golden__fail(&c, "truncated: %u tensors cannot fit in %zu bytes", count, len - c.pos);
  f->t = calloc(count ? count : 1, sizeof *f->t);
  if (!f->t) return golden__fail(&c, "out of memory");
  for (uint32_t i = 0; i < count; i++) {
    f->count = (int)i + 1;
    if (golden__tensor(&c, &f->t[i], (int)i)) goto fail;
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(f->t[j].name, f->t[i].name) == 0) {
        golden__fail(&c, "tensor %u: duplicate name '%s'", i, f->t[i].name);
        goto fail;
      }
  }
  if (c.pos != len) {
    golden__fail(&c, "%zu trailing bytes after the last tensor", len - c.pos);
    goto fail;
  }
  return 0;
fail:;
  char keep[sizeof f->error];
  memcpy(keep, f->error, sizeof keep);
  golden_free(f);
  memcpy(f->error, keep, sizeof keep);
  return -1;
}

static int golden_load(const char *path, golden_file *f) {
  memset(f, 0, sizeof *f);
  FILE *fp = fopen(path, "rb");
  if (!fp) {
    snprintf(f->error, sizeof f->error, "%s: cannot open", path);
    return -1;
  }
  size_t cap = 1 << 16, len = 0;
  unsigned char *buf = malloc(cap);
  for (;;) {
    if (!buf) break;
    len += fread(buf + len, 1, cap - len, fp);
    if (len < cap) break;
    unsigned char *nb = realloc(buf, cap * 2);
    if (!nb) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  int bad = ferror(fp);
  fclose(fp);
  if (!buf || bad) {
    free(buf);
    snprintf(f->error, sizeof f->error, "%s: %s", path, bad ? "read error" : "out of memory");
    return -1;
  }
  int rc = golden_parse(buf, len, path, f);
  free(buf);
  return rc;
}

#endif
