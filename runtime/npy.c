/*
 * npy.c — the .npy reader of `pcgc run --data` (npy.h). The header is a
 * Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (1000, 784), }
 * after a magic string, a version and a little-endian header length. Rows
 * are read with pread at their offset, so a rank touches only its shard.
 */
#define _POSIX_C_SOURCE 200809L
#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static pcgc_status bad(pcgc_error *err, const char *path, const char *what) {
  pcgc_error_set(err, PCGC_ERR_PARSE, "%s: %s", path, what);
  pcgc_error_hint(err, "write it with numpy.save(path, array) from a C-ordered float32/float64 (features) or "
                       "int32/int64/uint8 (ids, labels) array whose first dim is the samples (docs/cli.md, --data)");
  return PCGC_ERR_PARSE;
}

/* The value after 'key': in the dict text, or NULL. */
static const char *value_of(const char *h, const char *key) {
  char k[32];
  snprintf(k, sizeof k, "'%s'", key);
  const char *p = strstr(h, k);
  if (!p) return NULL;
  p += strlen(k);
  while (*p == ' ') p++;
  if (*p != ':') return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

pcgc_status pcgc_npy_parse(const char *b, size_t n, int64_t file_size, const char *path, pcgc_npy *f,
                           pcgc_error *err) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  snprintf(f->path, sizeof f->path, "%s", path);
  const unsigned char *pre = (const unsigned char *)b;
  uint32_t hlen = 0;
  size_t pre_len = 0;
  if (n < 10 || memcmp(pre, "\x93NUMPY", 6) != 0) return bad(err, path, "not a .npy file (no \\x93NUMPY magic)");
  if (pre[6] < 1 || pre[6] > 3) return bad(err, path, "unsupported .npy format version (1.0 to 3.0 are read)");
  if (pre[6] == 1) {
    hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
    pre_len = 10;
  } else if (n < 12) {
    return bad(err, path, "the file is cut off in its header");
  } else {
    hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    pre_len = 12;
  }
  if (hlen > 1u << 20 || (int64_t)pre_len + hlen > file_size || pre_len + hlen > n)
    return bad(err, path, "the header length is larger than the file");
  char *h = calloc(hlen + 1, 1);
  if (!h) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  memcpy(h, b + pre_len, hlen);
  if (memchr(h, '\0', hlen)) {
    free(h);
    return bad(err, path, "the header holds a NUL byte");
  }
  pcgc_status st = PCGC_OK;
  f->data_offset = (int64_t)pre_len + hlen;
  const char *d = value_of(h, "descr"), *fo = value_of(h, "fortran_order"), *sh = value_of(h, "shape");
  char what[256];
  if (!d || !fo || !sh || *d != '\'') {
    st = bad(err, path, "the header lacks 'descr', 'fortran_order' or 'shape'");
  } else if (strncmp(fo, "False", 5) != 0) {
    st = bad(err, path, "the array is in Fortran order; save a C-ordered array (numpy.ascontiguousarray)");
  } else {
    size_t k = strcspn(d + 1, "'");
    snprintf(f->descr, sizeof f->descr, "%.*s", (int)(k < 7 ? k : 7), d + 1);
    static const struct { const char *d; int elem; bool fl, un; } ok[] = {
        {"<f4", 4, true, false}, {"<f8", 8, true, false}, {"<i4", 4, false, false},
        {"<i8", 8, false, false}, {"|u1", 1, false, true}, {"<u1", 1, false, true}};
    for (size_t j = 0; j < sizeof ok / sizeof ok[0] && !f->elem; j++)
      if (strcmp(f->descr, ok[j].d) == 0) {
        f->elem = ok[j].elem;
        f->is_float = ok[j].fl;
        f->is_unsigned = ok[j].un;
      }
    if (!f->elem) {
      snprintf(what, sizeof what, "its dtype '%s' is not one pcgc reads (<f4, <f8, <i4, <i8, |u1)", f->descr);
      st = bad(err, path, what);
    }
  }
  if (st == PCGC_OK) { /* shape: (a, b, c) or (a,) or () */
    const char *p = sh;
    if (*p++ != '(') st = bad(err, path, "'shape' is not a tuple");
    while (st == PCGC_OK) {
      while (*p == ' ') p++;
      if (*p == ')') break;
      char *end;
      errno = 0;
      long long x = strtoll(p, &end, 10);
      if (end == p || errno || x < 0 || x > ((int64_t)1 << 48) || f->rank >= PCGC_MAX_RANK) {
        st = bad(err, path, "'shape' is not a tuple of at most 8 sizes");
        break;
      }
      f->shape[f->rank++] = x;
      p = end;
      while (*p == ' ') p++;
      if (*p == ',') p++;
    }
  }
  free(h);
  if (st == PCGC_OK && f->rank < 1) st = bad(err, path, "the array is a scalar; its first dim must be the samples");
  if (st != PCGC_OK) return st;
  double elems = 1;
  for (int i = 1; i < f->rank; i++) elems *= (double)f->shape[i];
  if (elems > 1e15) return bad(err, path, "a sample is larger than any file");
  f->row_elems = (int64_t)elems;
  double need = (double)f->data_offset + (double)f->shape[0] * elems * f->elem;
  if (need > (double)file_size) {
    snprintf(what, sizeof what, "the file is cut off: its header promises %lld samples (%.0f bytes), it has %lld bytes",
             (long long)f->shape[0], need, (long long)file_size);
    return bad(err, path, what);
  }
  return PCGC_OK;
}

pcgc_status pcgc_npy_open(const char *path, pcgc_npy *f, pcgc_error *err) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  int fd = open(path, O_RDONLY);
  if (fd < 0) return pcgc_error_set(err, PCGC_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
  struct stat sb;
  size_t cap = (1u << 20) + 12;
  char *head = malloc(cap);
  ssize_t got = head && fstat(fd, &sb) == 0 ? pread(fd, head, cap, 0) : -1;
  pcgc_status st = got < 0 ? pcgc_error_set(err, PCGC_ERR_IO, "cannot read '%s'", path)
                           : pcgc_npy_parse(head, (size_t)got, (int64_t)sb.st_size, path, f, err);
  free(head);
  if (st == PCGC_OK) f->fd = fd;
  else close(fd);
  return st;
}

void pcgc_npy_close(pcgc_npy *f) {
  if (f && f->fd >= 0) close(f->fd);
  if (f) f->fd = -1;
}

pcgc_status pcgc_npy_check(const pcgc_npy *f, const char *name, const pcgc_ptensor *t, pcgc_error *err) {
  char shape[160] = "", want[160] = "";
  int u = 0, w = 0;
  for (int i = 0; i < f->rank && u < 140; i++) u += snprintf(shape + u, sizeof shape - (size_t)u, "%s%lld", i ? ", " : "", (long long)f->shape[i]);
  w += snprintf(want, sizeof want, "SAMPLES");
  for (int i = 1; i < t->rank && w < 140; i++) w += snprintf(want + w, sizeof want - (size_t)w, ", %lld", (long long)t->dims[i]);
  bool same = f->rank == t->rank;
  for (int i = 1; same && i < t->rank; i++) same = f->shape[i] == t->dims[i];
  if (pcgc_dtype_is_float(t->dtype) != f->is_float) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "%s: input '%s' is %s, but the file holds %s", f->path, name,
                   pcgc_dtype_name(t->dtype), f->descr);
    pcgc_error_hint(err, "save it as %s", pcgc_dtype_is_float(t->dtype) ? "float32" : "int32 or int64");
    return PCGC_ERR_INVALID;
  }
  if (t->rank < 1 || !same) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "%s: shape (%s) does not fit input '%s', which needs (%s)", f->path, shape,
                   name, want);
    return PCGC_ERR_INVALID;
  }
  if (f->shape[0] < t->dims[0]) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "%s: %lld samples, fewer than one batch of input '%s' (%lld)", f->path,
                   (long long)f->shape[0], name, (long long)t->dims[0]);
    pcgc_error_hint(err, "give at least one batch, or compile with a smaller --batch");
    return PCGC_ERR_INVALID;
  }
  return PCGC_OK;
}

pcgc_status pcgc_npy_read_rows(const pcgc_npy *f, int64_t row0, int64_t n, pcgc_dtype want, int64_t bound, void *dst,
                               void *scratch, pcgc_error *err) {
  if (row0 < 0 || n < 0 || row0 + n > f->shape[0])
    return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: samples %lld..%lld are outside its %lld", f->path,
                          (long long)row0, (long long)(row0 + n - 1), (long long)f->shape[0]);
  int64_t count = n * f->row_elems;
  size_t bytes = (size_t)count * (size_t)f->elem;
  unsigned char *raw = scratch ? scratch : malloc(bytes ? bytes : 1);
  if (!raw) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory reading %s", f->path);
  int fd = f->fd >= 0 ? f->fd : open(f->path, O_RDONLY);
  pcgc_status st = PCGC_OK;
  size_t done = 0;
  off_t at = (off_t)(f->data_offset + row0 * f->row_elems * f->elem);
  while (fd >= 0 && done < bytes) {
    ssize_t k = pread(fd, raw + done, bytes - done, at + (off_t)done);
    if (k <= 0) break;
    done += (size_t)k;
  }
  if (fd < 0 || done < bytes)
    st = pcgc_error_set(err, PCGC_ERR_IO, "cannot read samples %lld.. of '%s'%s%s", (long long)row0, f->path,
                        fd < 0 ? ": " : " (the file shrank?)", fd < 0 ? strerror(errno) : "");
  if (fd >= 0 && fd != f->fd) close(fd);
  for (int64_t i = 0; i < count && st == PCGC_OK; i++) {
    const unsigned char *p = raw + (size_t)i * (size_t)f->elem;
    if (f->is_float) {
      double v;
      if (f->elem == 4) {
        float x;
        memcpy(&x, p, 4);
        v = x;
      } else {
        memcpy(&v, p, 8);
      }
      if (want == PCGC_F32) ((float *)dst)[i] = (float)v;
      else ((double *)dst)[i] = v;
      continue;
    }
    int64_t v;
    if (f->elem == 1) v = *p;
    else if (f->elem == 4) {
      int32_t x;
      memcpy(&x, p, 4);
      v = x;
    } else {
      memcpy(&v, p, 8);
    }
    if ((bound > 0 && (v < 0 || v >= bound)) || (want == PCGC_I32 && (v < INT32_MIN || v > INT32_MAX))) {
      st = pcgc_error_set(err, PCGC_ERR_INVALID, "%s: sample %lld holds %lld, outside 0..%lld", f->path,
                          (long long)(row0 + i / (f->row_elems ? f->row_elems : 1)), (long long)v,
                          (long long)(bound > 0 ? bound - 1 : INT32_MAX));
      break;
    }
    if (want == PCGC_I32) ((int32_t *)dst)[i] = (int32_t)v;
    else ((int64_t *)dst)[i] = v;
  }
  if (raw != scratch) free(raw);
  return st;
}
