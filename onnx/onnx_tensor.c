/*
 * onnx_tensor.c — constant tensors and attributes.
 *
 * A TensorProto holds its elements in one of three places: raw_data
 * (little-endian bytes, possibly unaligned, so every element is read with
 * memcpy), the typed repeated fields (float_data, int64_data, int32_data
 * for the small types and half floats, double_data, uint64_data), or a file
 * beside the model (data_location = EXTERNAL, with location/offset/length
 * entries). The declared dims are checked against the bytes that are
 * actually there before anything is allocated, so a tensor claiming 2^60
 * elements costs nothing. Floating types are converted to float, integer
 * and bool types to int64.
 */
#define _POSIX_C_SOURCE 200809L /* fseeko, ftello */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

/* ------------------------------------------------------------------ types */

bool pcgc__onnx_type_is_float(int32_t t) {
  return t == OT_FLOAT || t == OT_DOUBLE || t == OT_FLOAT16 || t == OT_BFLOAT16;
}

bool pcgc__onnx_type_is_int(int32_t t) {
  switch (t) {
  case OT_UINT8: case OT_INT8: case OT_UINT16: case OT_INT16: case OT_INT32: case OT_INT64:
  case OT_BOOL: case OT_UINT32: case OT_UINT64:
    return true;
  default:
    return false;
  }
}

const char *pcgc__onnx_type_name(int32_t t) {
  static const char *const names[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32",
                                      "INT64", "STRING", "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64",
                                      "COMPLEX64", "COMPLEX128", "BFLOAT16"};
  if (t >= 0 && t < (int32_t)(sizeof names / sizeof names[0])) return names[t];
  return "an unknown type";
}

/* Bytes per element in raw_data and external files; 0 if not supported. */
static size_t elem_size(int32_t t) {
  switch (t) {
  case OT_UINT8: case OT_INT8: case OT_BOOL: return 1;
  case OT_UINT16: case OT_INT16: case OT_FLOAT16: case OT_BFLOAT16: return 2;
  case OT_FLOAT: case OT_INT32: case OT_UINT32: return 4;
  case OT_INT64: case OT_DOUBLE: case OT_UINT64: return 8;
  default: return 0;
  }
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);           /* inf, nan */
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);   /* normal */
  } else if (man == 0) {
    bits = sign;                                       /* zero */
  } else {                                             /* subnormal: normalise */
    int e = -1;
    do {
      e++;
      man <<= 1;
    } while (!(man & 0x400));
    bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static float bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* double -> float without undefined behaviour for values out of range */
static float d2f(double d) {
  if (d > FLT_MAX) return INFINITY;
  if (d < -FLT_MAX) return -INFINITY;
  return (float)d;
}

int64_t pcgc__onnx_f2i(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}

double pcgc__onnx_get_f(const onnx_tensor *t, int64_t e) {
  return t->f ? (double)t->f[e] : (double)t->i[e];
}

int64_t pcgc__onnx_get_i(const onnx_tensor *t, int64_t e) {
  return t->i ? t->i[e] : pcgc__onnx_f2i(t->f[e]);
}

const float *pcgc__onnx_floats(const onnx_tensor *t) { return t->f; }

onnx_tensor *pcgc__onnx_tensor_new(onnx_ctx *c, int32_t type, int rank, const int64_t *dims) {
  if (rank < 0 || rank > ONNX_MAX_RANK) return NULL;
  onnx_tensor *t = pcgc__onnx_alloc(&c->arena, sizeof *t);
  if (!t) return NULL;
  t->type = type;
  t->rank = rank;
  t->numel = 1;
  for (int d = 0; d < rank; d++) {
    if (dims[d] < 0) return NULL;
    t->dims[d] = dims[d];
    if (dims[d] && t->numel > INT64_MAX / 16 / dims[d]) return NULL;
    t->numel *= dims[d];
  }
  size_t n = (size_t)(t->numel ? t->numel : 1);
  if (pcgc__onnx_type_is_float(type)) t->f = pcgc__onnx_alloc(&c->arena, n * sizeof *t->f);
  else t->i = pcgc__onnx_alloc(&c->arena, n * sizeof *t->i);
  return t->f || t->i ? t : NULL;
}

/* ---------------------------------------------------------------- decoding */

/* Element e of little-endian bytes of type `type` into t. */
static void store_raw(onnx_tensor *t, int32_t type, const uint8_t *p, int64_t e) {
  switch (type) {
  case OT_FLOAT: { float v; memcpy(&v, p, 4); t->f[e] = v; break; }
  case OT_DOUBLE: { double v; memcpy(&v, p, 8); t->f[e] = d2f(v); break; }
  case OT_FLOAT16: { uint16_t v; memcpy(&v, p, 2); t->f[e] = half_to_float(v); break; }
  case OT_BFLOAT16: { uint16_t v; memcpy(&v, p, 2); t->f[e] = bf16_to_float(v); break; }
  case OT_UINT8: t->i[e] = p[0]; break;
  case OT_BOOL: t->i[e] = p[0] != 0; break;
  case OT_INT8: { int8_t v; memcpy(&v, p, 1); t->i[e] = v; break; }
  case OT_UINT16: { uint16_t v; memcpy(&v, p, 2); t->i[e] = v; break; }
  case OT_INT16: { int16_t v; memcpy(&v, p, 2); t->i[e] = v; break; }
  case OT_INT32: { int32_t v; memcpy(&v, p, 4); t->i[e] = v; break; }
  case OT_UINT32: { uint32_t v; memcpy(&v, p, 4); t->i[e] = v; break; }
  case OT_INT64: { int64_t v; memcpy(&v, p, 8); t->i[e] = v; break; }
  case OT_UINT64: { uint64_t v; memcpy(&v, p, 8); t->i[e] = (int64_t)(v > INT64_MAX ? INT64_MAX : v); break; }
  default: break;
  }
}

static const char *ext_key(const Onnx__TensorProto *tp, const char *key) {
  for (size_t i = 0; i < tp->n_external_data; i++) {
    const Onnx__StringStringEntryProto *e = tp->external_data[i];
    if (e->key && strcmp(e->key, key) == 0) return pcgc__onnx_str(e->value);
  }
  return NULL;
}

static bool parse_size(const char *s, int64_t *out) {
  if (!s || !*s) return false;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (*end || errno || v < 0) return false;
  *out = v;
  return true;
}

/* A location that stays inside the model's folder: relative, no "..". */
static bool safe_location(const char *loc) {
  if (!loc[0] || loc[0] == '/' || loc[0] == '\\') return false;
  const char *p = loc;
  while (*p) {
    const char *q = p;
    while (*q && *q != '/' && *q != '\\') q++;
    if (q - p == 2 && p[0] == '.' && p[1] == '.') return false;
    p = *q ? q + 1 : q;
  }
  return true;
}

static pcgc_status read_external(onnx_ctx *c, const Onnx__TensorProto *tp, const char *what, size_t want,
                                 uint8_t **out) {
  *out = NULL;
  const char *loc = ext_key(tp, "location");
  if (!loc)
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "tensor '%.200s' is stored externally but names no location",
                           what);
  if (!safe_location(loc)) {
    pcgc_status s = pcgc__onnx_fail(c, PCGC_ERR_INVALID, "tensor '%.200s': external data location '%.200s' "
                                    "leaves the model's folder", what, loc);
    pcgc_error_hint(c->err, "locations must be relative paths without '..'");
    return s;
  }
  if (!c->dir)
    return pcgc__onnx_fail(c, PCGC_ERR_IO, "tensor '%.200s' is stored in '%.200s', but the model was given "
                           "without a folder to read it from", what, loc);
  int64_t offset = 0, length = (int64_t)want;
  const char *off_s = ext_key(tp, "offset"), *len_s = ext_key(tp, "length");
  if ((off_s && !parse_size(off_s, &offset)) || (len_s && !parse_size(len_s, &length)))
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "tensor '%.200s': bad external data offset or length", what);
  if ((uint64_t)length != want)
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "tensor '%.200s': external data length %lld does not match its "
                           "shape (%zu bytes)", what, (long long)length, want);
  size_t plen = strlen(c->dir) + strlen(loc) + 2;
  char *path = malloc(plen);
  if (!path) return pcgc__onnx_nomem(c);
  snprintf(path, plen, "%s/%s", c->dir, loc);
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    pcgc_status s = pcgc__onnx_fail(c, PCGC_ERR_IO, "tensor '%.200s': cannot open external data '%.300s': %s",
                                    what, path, strerror(e));
    free(path);
    return s;
  }
  /* the file must hold the bytes before they are allocated */
  pcgc_status s = PCGC_OK;
  uint8_t *buf = NULL;
  off_t size = fseeko(f, 0, SEEK_END) == 0 ? ftello(f) : -1;
  if (size < 0 || (uint64_t)offset > (uint64_t)size || want > (uint64_t)size - (uint64_t)offset) {
    s = pcgc__onnx_fail(c, PCGC_ERR_IO, "tensor '%.200s': '%.300s' ends before the %zu bytes at offset %lld",
                        what, path, want, (long long)offset);
  } else if (want && !(buf = malloc(want))) {
    s = pcgc__onnx_nomem(c);
  } else if (fseeko(f, (off_t)offset, SEEK_SET) != 0 || (want && fread(buf, 1, want, f) != want)) {
    s = pcgc__onnx_fail(c, PCGC_ERR_IO, "tensor '%.200s': cannot read %zu bytes at offset %lld of '%.300s'",
                        what, want, (long long)offset, path);
  }
  fclose(f);
  free(path);
  if (s != PCGC_OK) {
    free(buf);
    return s;
  }
  *out = buf;
  return PCGC_OK;
}

pcgc_status pcgc__onnx_decode(onnx_ctx *c, const Onnx__TensorProto *tp, const char *what, onnx_tensor **out) {
  int32_t type = tp->data_type;
  size_t es = elem_size(type);
  if (!es) {
    pcgc_status s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "tensor '%.200s' has element type %s", what,
                                    pcgc__onnx_type_name(type));
    pcgc_error_hint(c->err, "pcgc reads numeric and bool tensors");
    return s;
  }
  if (tp->n_dims > ONNX_MAX_RANK)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "tensor '%.200s' has %zu dims, more than %d", what,
                           tp->n_dims, ONNX_MAX_RANK);
  if (tp->segment)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "tensor '%.200s' is segmented", what);
  int64_t numel = 1;
  for (size_t d = 0; d < tp->n_dims; d++) {
    int64_t n = tp->dims[d];
    if (n < 0) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "tensor '%.200s': dim %zu is %lld", what, d, (long long)n);
    if (n && numel > INT64_MAX / 16 / n)
      return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "tensor '%.200s': its dims overflow", what);
    numel *= n;
  }
  /* how many elements each source holds, before allocating anything */
  bool external = tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  const float *fd = NULL;
  const double *dd = NULL;
  const int32_t *i32 = NULL;
  const int64_t *i64 = NULL;
  const uint64_t *u64 = NULL;
  size_t have;
  if (external || tp->has_raw_data) {
    have = external ? (size_t)numel : tp->raw_data.len / es;
    if (!external && tp->raw_data.len % es) have = SIZE_MAX;
  } else {
    switch (type) {
    case OT_FLOAT: fd = tp->float_data; have = tp->n_float_data; break;
    case OT_DOUBLE: dd = tp->double_data; have = tp->n_double_data; break;
    case OT_INT64: i64 = tp->int64_data; have = tp->n_int64_data; break;
    case OT_UINT32: case OT_UINT64: u64 = tp->uint64_data; have = tp->n_uint64_data; break;
    default: i32 = tp->int32_data; have = tp->n_int32_data; break;
    }
  }
  if (have != (size_t)numel)
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "tensor '%.200s' has %lld elements by its dims, but its data "
                           "holds %s", what, (long long)numel,
                           have == SIZE_MAX ? "a partial element" : have < (size_t)numel ? "fewer" : "more");
  uint8_t *ext = NULL;
  const uint8_t *raw = NULL;
  if (external) {
    pcgc_status s = read_external(c, tp, what, (size_t)numel * es, &ext);
    if (s != PCGC_OK) return s;
    raw = ext;
  } else if (tp->has_raw_data) {
    raw = tp->raw_data.data;
  }
  onnx_tensor *t = pcgc__onnx_tensor_new(c, type, (int)tp->n_dims, tp->dims);
  if (!t) {
    free(ext);
    return pcgc__onnx_nomem(c);
  }
  for (int64_t e = 0; e < numel; e++) {
    if (raw) store_raw(t, type, raw + (size_t)e * es, e);
    else if (fd) t->f[e] = fd[e];
    else if (dd) t->f[e] = d2f(dd[e]);
    else if (i64) t->i[e] = i64[e];
    else if (u64) t->i[e] = (int64_t)(u64[e] > INT64_MAX ? INT64_MAX : u64[e]);
    else if (type == OT_FLOAT16) t->f[e] = half_to_float((uint16_t)i32[e]);
    else if (type == OT_BFLOAT16) t->f[e] = bf16_to_float((uint16_t)i32[e]);
    else if (type == OT_BOOL) t->i[e] = i32[e] != 0;
    else t->i[e] = i32[e];
  }
  free(ext);
  c->budget += numel < INT64_MAX / 4 - c->budget ? 3 * numel : 0;
  *out = t;
  return PCGC_OK;
}

pcgc_status pcgc__onnx_spend(onnx_ctx *c, int64_t n) {
  if (n <= c->budget) {
    c->budget -= n;
    return PCGC_OK;
  }
  pcgc_status s = pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "evaluating constants would allocate more than %lld "
                                  "elements beyond the model's own tensors", (long long)ONNX_BUDGET_BASE);
  pcgc_error_hint(c->err, "the model copies its constants many times over");
  return s;
}

/* ------------------------------------------------------------- attributes */

const Onnx__AttributeProto *pcgc__onnx_attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t i = 0; i < n->n_attribute; i++)
    if (n->attribute[i]->name && strcmp(n->attribute[i]->name, name) == 0) return n->attribute[i];
  return NULL;
}

/* The attribute's type; old writers leave `type` out, so then guess it. */
static int attr_type(const Onnx__AttributeProto *a) {
  if (a->has_type) return a->type;
  if (a->n_ints) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  if (a->n_floats) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
  if (a->has_i) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  if (a->has_f) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
  if (a->has_s) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
  if (a->t) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
  return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED;
}

static pcgc_status wrong_type(onnx_ctx *c, const char *name, const char *want) {
  return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "attribute '%s' must be %s", name, want);
}

pcgc_status pcgc__onnx_attr_int(onnx_ctx *c, const char *name, int64_t def, int64_t *out) {
  const Onnx__AttributeProto *a = pcgc__onnx_attr(c->cur, name);
  *out = def;
  if (!a) return PCGC_OK;
  if (attr_type(a) != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT) return wrong_type(c, name, "an integer");
  *out = a->i;
  return PCGC_OK;
}

pcgc_status pcgc__onnx_attr_float(onnx_ctx *c, const char *name, double def, double *out) {
  const Onnx__AttributeProto *a = pcgc__onnx_attr(c->cur, name);
  *out = def;
  if (!a) return PCGC_OK;
  if (attr_type(a) != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT) return wrong_type(c, name, "a float");
  *out = pcgc__onnx_nice_float(a->f);
  return PCGC_OK;
}

pcgc_status pcgc__onnx_attr_ints(onnx_ctx *c, const char *name, int max, int64_t *v, int *n) {
  const Onnx__AttributeProto *a = pcgc__onnx_attr(c->cur, name);
  *n = -1;
  if (!a) return PCGC_OK;
  int t = attr_type(a);
  if (t != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS && t != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED)
    return wrong_type(c, name, "a list of integers");
  if (a->n_ints > (size_t)max)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "attribute '%s' has %zu values, more than %d", name,
                           a->n_ints, max);
  for (size_t i = 0; i < a->n_ints; i++) v[i] = a->ints[i];
  *n = (int)a->n_ints;
  return PCGC_OK;
}

pcgc_status pcgc__onnx_attr_string(onnx_ctx *c, const char *name, const char *def, const char **out) {
  const Onnx__AttributeProto *a = pcgc__onnx_attr(c->cur, name);
  *out = def;
  if (!a) return PCGC_OK;
  if (attr_type(a) != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING) return wrong_type(c, name, "a string");
  size_t n = a->s.len;
  if (n > 4096) n = 4096;
  char *s = pcgc__onnx_alloc(&c->arena, n + 1);
  if (!s) return pcgc__onnx_nomem(c);
  if (n) memcpy(s, a->s.data, n);
  s[n] = '\0';
  *out = s;
  return PCGC_OK;
}

double pcgc__onnx_nice_float(float f) {
  if (!isfinite(f)) return f;
  char buf[32];
  for (int n = 1; n <= 9; n++) {
    snprintf(buf, sizeof buf, "%.*g", n, (double)f);
    if (strtof(buf, NULL) == f) return strtod(buf, NULL);
  }
  return f;
}

pcgc_status pcgc__onnx_constant_value(onnx_ctx *c, const Onnx__NodeProto *n, onnx_tensor **out) {
  if (n->n_attribute != 1)
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "a Constant has exactly one attribute, this one has %zu",
                           n->n_attribute);
  const Onnx__AttributeProto *a = n->attribute[0];
  const char *name = pcgc__onnx_str(a->name);
  int t = attr_type(a);
  const char *what = n->n_output && n->output[0] ? n->output[0] : "Constant";
  if (strcmp(name, "value") == 0 && t == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR && a->t)
    return pcgc__onnx_decode(c, a->t, what, out);
  onnx_tensor *r = NULL;
  int64_t len = 0;
  if (strcmp(name, "value_float") == 0 && t == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT) {
    if ((r = pcgc__onnx_tensor_new(c, OT_FLOAT, 0, NULL))) r->f[0] = a->f;
  } else if (strcmp(name, "value_int") == 0 && t == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT) {
    if ((r = pcgc__onnx_tensor_new(c, OT_INT64, 0, NULL))) r->i[0] = a->i;
  } else if (strcmp(name, "value_floats") == 0 && t == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS) {
    len = (int64_t)a->n_floats;
    if ((r = pcgc__onnx_tensor_new(c, OT_FLOAT, 1, &len)))
      for (int64_t i = 0; i < len; i++) r->f[i] = a->floats[i];
  } else if (strcmp(name, "value_ints") == 0 && t == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS) {
    len = (int64_t)a->n_ints;
    if ((r = pcgc__onnx_tensor_new(c, OT_INT64, 1, &len)))
      for (int64_t i = 0; i < len; i++) r->i[i] = a->ints[i];
  } else {
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Constant with attribute '%.100s' is not supported", name);
  }
  if (!r) return pcgc__onnx_nomem(c);
  *out = r;
  return PCGC_OK;
}
