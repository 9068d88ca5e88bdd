/*
 * ops.c — the operator registry built from ops.def: names, arity, classes,
 * attribute schemas, enum names, and the attribute values of a node.
 *
 * Attribute schemas are written in ops.def as short strings
 * ("stride:ints2=1 groups:int=1 act:act=none") and parsed once, on first
 * use, into pcgc_attr_desc tables. A malformed schema is a programming error
 * and aborts with a message (the tests walk every op, so it cannot ship).
 */
#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct op_info {
  const char *name;
  int min_in, max_in, n_out;
  const char *schema;
} op_info;

static const op_info op_table[PCGC_OP_COUNT] = {
#define PCGC_OP(id, name, fn, min_in, max_in, n_out, schema) \
  [PCGC_OP_##id] = {name, min_in, max_in, n_out, schema},
#include "ops.def"
#undef PCGC_OP
};

/* --------------------------------------------------------------- enums */

static const char *const enum_values[PCGC_ENUM_COUNT][8] = {
    [PCGC_ENUM_NONE] = {NULL},
    [PCGC_ENUM_ACT] = {"none", "relu", "gelu", "sigmoid", "tanh", NULL},
    [PCGC_ENUM_POOL] = {"max", "avg", NULL},
    [PCGC_ENUM_BAG] = {"none", "sum", "mean", NULL},
    [PCGC_ENUM_DTYPE] = {"f32", "f16", "bf16", "f64", "i32", "i64", NULL},
    [PCGC_ENUM_INIT] = {"zeros", "ones", "uniform", "normal", NULL},
    [PCGC_ENUM_REDUCTION] = {"mean", "sum", NULL},
};
static const char *const enum_type_names[PCGC_ENUM_COUNT] = {
    "", "act", "pool", "bag", "dtype", "init", "reduction"};

_Static_assert(PCGC_DTYPE_COUNT == 6, "update PCGC_ENUM_DTYPE names with pcgc_dtype");

const char *pcgc_enum_value_name(pcgc_enum_type e, int64_t v) {
  if ((unsigned)e >= PCGC_ENUM_COUNT || v < 0 || v >= 8) return NULL;
  for (int64_t i = 0; i <= v; i++)
    if (!enum_values[e][i]) return NULL;
  return enum_values[e][v];
}

int pcgc_enum_value_from_name(pcgc_enum_type e, const char *name) {
  if ((unsigned)e >= PCGC_ENUM_COUNT) return -1;
  for (int i = 0; i < 8 && enum_values[e][i]; i++)
    if (strcmp(enum_values[e][i], name) == 0) return i;
  return -1;
}

const char *pcgc_enum_type_name(pcgc_enum_type e) {
  return (unsigned)e < PCGC_ENUM_COUNT ? enum_type_names[e] : "?";
}

/* ------------------------------------------------------------ op table */

const char *pcgc_op_name(pcgc_op_kind k) {
  return (unsigned)k < PCGC_OP_COUNT ? op_table[k].name : "?";
}

int pcgc_op_from_name(const char *name) {
  for (int i = 0; i < PCGC_OP_COUNT; i++)
    if (strcmp(op_table[i].name, name) == 0) return i;
  return -1;
}

pcgc_op_class pcgc_op_class_of(pcgc_op_kind k) {
  switch (k) {
  case PCGC_OP_INPUT:
  case PCGC_OP_WEIGHT: return PCGC_CLASS_SOURCE;
  case PCGC_OP_SOFTMAX_CROSS_ENTROPY:
  case PCGC_OP_MSE: return PCGC_CLASS_LOSS;
  case PCGC_OP_PARTITION:
  case PCGC_OP_COMBINE:
  case PCGC_OP_REPLICATE:
  case PCGC_OP_REDUCE:
  case PCGC_OP_PIPELINE:
  case PCGC_OP_UNPIPELINE: return PCGC_CLASS_PARALLEL;
  default: return PCGC_CLASS_COMPUTE;
  }
}

int pcgc_op_min_inputs(pcgc_op_kind k) { return op_table[k].min_in; }
int pcgc_op_max_inputs(pcgc_op_kind k) { return op_table[k].max_in; }

int pcgc_op_backward_pair(pcgc_op_kind k) {
  switch (k) {
  case PCGC_OP_PARTITION: return PCGC_OP_COMBINE;
  case PCGC_OP_COMBINE: return PCGC_OP_PARTITION;
  case PCGC_OP_REPLICATE: return PCGC_OP_REDUCE;
  case PCGC_OP_REDUCE: return PCGC_OP_REPLICATE;
  case PCGC_OP_PIPELINE: return PCGC_OP_UNPIPELINE;
  case PCGC_OP_UNPIPELINE: return PCGC_OP_PIPELINE;
  default: return -1;
  }
}

int pcgc_op_num_outputs(pcgc_op_kind k, const pcgc_attrs *a) {
  if (op_table[k].n_out >= 0) return op_table[k].n_out;
  assert(k == PCGC_OP_SPLIT);
  int n = a ? pcgc_attrs_ints(a, "sizes").n : 0;
  return n > 0 ? n : 1;
}

/* ------------------------------------------------------------- schemas */

#define NAME_MAX_LEN 24
static pcgc_attr_desc schemas[PCGC_OP_COUNT][PCGC_MAX_ATTRS];
static char schema_names[PCGC_OP_COUNT][PCGC_MAX_ATTRS][NAME_MAX_LEN];
static int schema_count[PCGC_OP_COUNT];
static uint8_t schema_off[PCGC_OP_COUNT][PCGC_MAX_ATTRS]; /* where each list sits in ints[] */
static pthread_once_t schema_once = PTHREAD_ONCE_INIT;

static void schema_fail(int op, const char *why) {
  fprintf(stderr, "pcgc: internal error: bad attribute schema of op '%s' in ops.def: %s\n",
          op_table[op].name, why);
  abort();
}

/* Parses one "name:type[=default]" item of op `op`'s schema. */
static void parse_schema_item(int op, const char *item, size_t len) {
  char buf[64];
  if (len >= sizeof buf) schema_fail(op, "item too long");
  memcpy(buf, item, len);
  buf[len] = '\0';
  char *colon = strchr(buf, ':');
  if (!colon) schema_fail(op, "missing ':'");
  *colon = '\0';
  char *type = colon + 1;
  char *def = strchr(type, '=');
  if (def) *def++ = '\0';
  int i = schema_count[op]++;
  if (i >= PCGC_MAX_ATTRS) schema_fail(op, "too many attributes");
  if (strlen(buf) >= NAME_MAX_LEN) schema_fail(op, "name too long");
  strcpy(schema_names[op][i], buf);
  pcgc_attr_desc *d = &schemas[op][i];
  d->name = schema_names[op][i];
  d->required = def == NULL;
  d->enum_type = PCGC_ENUM_NONE;
  if (strcmp(type, "int") == 0) d->type = PCGC_ATTR_INT;
  else if (strcmp(type, "float") == 0) d->type = PCGC_ATTR_FLOAT;
  else if (strcmp(type, "bool") == 0) d->type = PCGC_ATTR_BOOL;
  else if (strcmp(type, "ints") == 0) d->type = PCGC_ATTR_INTS;
  else if (strcmp(type, "ints2") == 0) d->type = PCGC_ATTR_INTS2;
  else {
    d->type = PCGC_ATTR_ENUM;
    int e;
    for (e = 1; e < PCGC_ENUM_COUNT; e++)
      if (strcmp(enum_type_names[e], type) == 0) break;
    if (e == PCGC_ENUM_COUNT) schema_fail(op, "unknown attribute type");
    d->enum_type = (pcgc_enum_type)e;
  }
  if (!def) return;
  char *end = NULL;
  switch (d->type) {
  case PCGC_ATTR_INT:
  case PCGC_ATTR_INTS2:
    d->def_i = strtoll(def, &end, 10);
    if (*end) schema_fail(op, "bad integer default");
    break;
  case PCGC_ATTR_FLOAT:
    d->def_f = strtod(def, &end);
    if (*end) schema_fail(op, "bad float default");
    break;
  case PCGC_ATTR_BOOL:
    if (strcmp(def, "true") == 0) d->def_i = 1;
    else if (strcmp(def, "false") == 0) d->def_i = 0;
    else schema_fail(op, "bad bool default");
    break;
  case PCGC_ATTR_INTS:
    if (strcmp(def, "[]") != 0) schema_fail(op, "ints default must be []");
    break;
  case PCGC_ATTR_ENUM:
    d->def_i = pcgc_enum_value_from_name(d->enum_type, def);
    if (d->def_i < 0) schema_fail(op, "bad enum default");
    break;
  }
}

static void parse_schemas(void) {
  for (int op = 0; op < PCGC_OP_COUNT; op++) {
    const char *s = op_table[op].schema;
    while (*s) {
      while (*s == ' ') s++;
      const char *e = s;
      while (*e && *e != ' ') e++;
      if (e > s) parse_schema_item(op, s, (size_t)(e - s));
      s = e;
    }
    /* every list gets a place of its largest size in the pool */
    int used = 0;
    for (int i = 0; i < schema_count[op]; i++) {
      pcgc_attr_type t = schemas[op][i].type;
      if (t != PCGC_ATTR_INTS && t != PCGC_ATTR_INTS2) continue;
      schema_off[op][i] = (uint8_t)used;
      used += t == PCGC_ATTR_INTS ? PCGC_MAX_INTS : 2;
    }
    if (used > PCGC_MAX_INTS) schema_fail(op, "its lists need more than PCGC_MAX_INTS entries");
  }
}

static void ensure_schemas(void) { pthread_once(&schema_once, parse_schemas); }

int pcgc_op_num_attrs(pcgc_op_kind k) {
  ensure_schemas();
  return (unsigned)k < PCGC_OP_COUNT ? schema_count[k] : 0;
}

const pcgc_attr_desc *pcgc_op_attr(pcgc_op_kind k, int i) {
  ensure_schemas();
  if ((unsigned)k >= PCGC_OP_COUNT || i < 0 || i >= schema_count[k]) return NULL;
  return &schemas[k][i];
}

int pcgc_op_attr_index(pcgc_op_kind k, const char *name) {
  ensure_schemas();
  if ((unsigned)k >= PCGC_OP_COUNT) return -1;
  for (int i = 0; i < schema_count[k]; i++)
    if (strcmp(schemas[k][i].name, name) == 0) return i;
  return -1;
}

/* ---------------------------------------------------------- attributes */

void pcgc_attrs_init(pcgc_attrs *a, pcgc_op_kind kind) {
  ensure_schemas();
  memset(a, 0, sizeof *a);
  a->kind = kind;
  if ((unsigned)kind >= PCGC_OP_COUNT) return;
  for (int i = 0; i < schema_count[kind]; i++) {
    const pcgc_attr_desc *d = &schemas[kind][i];
    a->off[i] = schema_off[kind][i];
    switch (d->type) {
    case PCGC_ATTR_FLOAT: a->val[i].f = d->def_f; break;
    case PCGC_ATTR_INTS2:
      a->n[i] = 2;
      a->ints[a->off[i]] = a->ints[a->off[i] + 1] = d->def_i;
      break;
    case PCGC_ATTR_INTS: a->n[i] = 0; break;
    default: a->val[i].i = d->def_i; break;
    }
  }
}

static int attr_lookup(const pcgc_attrs *a, const char *name, pcgc_error *err) {
  int i = pcgc_op_attr_index(a->kind, name);
  if (i < 0)
    pcgc_error_set(err, PCGC_ERR_INVALID, "operator '%s' has no attribute '%s'",
                   pcgc_op_name(a->kind), name);
  return i;
}

pcgc_status pcgc_attrs_set_int(pcgc_attrs *a, const char *name, int64_t v) {
  int i = attr_lookup(a, name, NULL);
  if (i < 0) return PCGC_ERR_INVALID;
  const pcgc_attr_desc *d = &schemas[a->kind][i];
  switch (d->type) {
  case PCGC_ATTR_INT:
  case PCGC_ATTR_ENUM: a->val[i].i = v; break;
  case PCGC_ATTR_BOOL: a->val[i].i = v != 0; break;
  case PCGC_ATTR_FLOAT: a->val[i].f = (double)v; break;
  case PCGC_ATTR_INTS2:
    a->n[i] = 2;
    a->ints[a->off[i]] = a->ints[a->off[i] + 1] = v;
    break;
  case PCGC_ATTR_INTS:
    a->n[i] = 1;
    a->ints[a->off[i]] = v;
    break;
  }
  a->set[i] = true;
  return PCGC_OK;
}

pcgc_status pcgc_attrs_set_float(pcgc_attrs *a, const char *name, double v) {
  int i = attr_lookup(a, name, NULL);
  if (i < 0 || schemas[a->kind][i].type != PCGC_ATTR_FLOAT) return PCGC_ERR_INVALID;
  a->val[i].f = v;
  a->set[i] = true;
  return PCGC_OK;
}

pcgc_status pcgc_attrs_set_ints(pcgc_attrs *a, const char *name, int n, const int64_t *v) {
  int i = attr_lookup(a, name, NULL);
  if (i < 0 || n < 0 || n > PCGC_MAX_INTS) return PCGC_ERR_INVALID;
  pcgc_attr_type t = schemas[a->kind][i].type;
  if (t != PCGC_ATTR_INTS && t != PCGC_ATTR_INTS2) return PCGC_ERR_INVALID;
  if (t == PCGC_ATTR_INTS2 && n != 2) return PCGC_ERR_INVALID;
  a->n[i] = (uint8_t)n;
  for (int k = 0; k < n; k++) a->ints[a->off[i] + k] = v[k];
  a->set[i] = true;
  return PCGC_OK;
}

/* The index of attribute `name`, which must exist. */
static int attr_must(const pcgc_attrs *a, const char *name) {
  int i = pcgc_op_attr_index(a->kind, name);
  if (i < 0) {
    fprintf(stderr, "pcgc: internal error: op '%s' has no attribute '%s'\n",
            pcgc_op_name(a->kind), name);
    abort();
  }
  return i;
}

int64_t pcgc_attrs_int(const pcgc_attrs *a, const char *name) {
  return pcgc_attrs_int_at(a, attr_must(a, name));
}

double pcgc_attrs_float(const pcgc_attrs *a, const char *name) {
  return pcgc_attrs_float_at(a, attr_must(a, name));
}

pcgc_ints pcgc_attrs_ints(const pcgc_attrs *a, const char *name) {
  return pcgc_attrs_ints_at(a, attr_must(a, name));
}

pcgc_status pcgc_attrs_check(const pcgc_attrs *a, pcgc_error *err) {
  ensure_schemas();
  if ((unsigned)a->kind >= PCGC_OP_COUNT)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "unknown operator kind %d", (int)a->kind);
  const char *op = pcgc_op_name(a->kind);
  for (int i = 0; i < schema_count[a->kind]; i++) {
    const pcgc_attr_desc *d = &schemas[a->kind][i];
    int64_t vi = a->val[i].i;
    if (d->required && !a->set[i]) {
      pcgc_error_set(err, PCGC_ERR_INVALID, "%s: missing required attribute '%s'", op, d->name);
      pcgc_error_hint(err, "write %s=... in the call", d->name);
      return PCGC_ERR_INVALID;
    }
    switch (d->type) {
    case PCGC_ATTR_ENUM:
      if (!pcgc_enum_value_name(d->enum_type, vi))
        return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: attribute '%s' has no value %lld",
                              op, d->name, (long long)vi);
      break;
    case PCGC_ATTR_BOOL:
      if (vi != 0 && vi != 1)
        return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: attribute '%s' must be true or false",
                              op, d->name);
      break;
    case PCGC_ATTR_FLOAT:
      if (!isfinite(a->val[i].f))
        return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: attribute '%s' must be a finite number",
                              op, d->name);
      break;
    case PCGC_ATTR_INTS:
    case PCGC_ATTR_INTS2:
      if (a->n[i] > PCGC_MAX_INTS || (d->type == PCGC_ATTR_INTS2 && a->n[i] != 2))
        return pcgc_error_set(err, PCGC_ERR_INVALID, "%s: attribute '%s' has %d entries",
                              op, d->name, a->n[i]);
      break;
    case PCGC_ATTR_INT: break;
    }
  }
  return PCGC_OK;
}

bool pcgc__attr_matters(const pcgc_attrs *a, int i) {
  /* a weight initialised to zeros or ones has no scale */
  if (a->kind == PCGC_OP_WEIGHT && strcmp(schemas[a->kind][i].name, "scale") == 0) {
    int64_t init = pcgc_attrs_int(a, "init");
    return init == PCGC_INIT_UNIFORM || init == PCGC_INIT_NORMAL;
  }
  return true;
}

bool pcgc_attrs_equal(const pcgc_attrs *x, const pcgc_attrs *y) {
  if (x->kind != y->kind) return false;
  int n = pcgc_op_num_attrs(x->kind);
  for (int i = 0; i < n; i++) {
    bool ma = pcgc__attr_matters(x, i), mb = pcgc__attr_matters(y, i);
    if (ma != mb) return false;
    if (!ma) continue;
    switch (schemas[x->kind][i].type) {
    case PCGC_ATTR_FLOAT:
      if (x->val[i].f != y->val[i].f) return false; /* values are finite; -0.0 equals 0.0 */
      break;
    case PCGC_ATTR_INTS:
    case PCGC_ATTR_INTS2: {
      pcgc_ints a = pcgc_attrs_ints_at(x, i), b = pcgc_attrs_ints_at(y, i);
      if (a.n != b.n) return false;
      for (int k = 0; k < a.n; k++)
        if (a.v[k] != b.v[k]) return false;
      break;
    }
    default:
      if (x->val[i].i != y->val[i].i) return false;
    }
  }
  return true;
}

/* Shortest decimal form of `x` that reads back to the same double. */
static void format_double(char *buf, size_t n, double x) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, n, "%.*g", prec, x);
    if (strtod(buf, NULL) == x) break;
  }
  /* keep it a float literal for the parser: "1" -> "1.0" is not needed since
   * attribute types are known from the schema; but make ints look like floats
   * to a reader */
  if (!strpbrk(buf, ".eEn") && strlen(buf) + 2 < n) strcat(buf, ".0");
}

int pcgc_attr_format(char *buf, size_t n, const pcgc_attrs *a, int i) {
  const pcgc_attr_desc *d = pcgc_op_attr(a->kind, i);
  if (!d) return snprintf(buf, n, "?");
  char val[512];
  size_t k = 0;
  switch (d->type) {
  case PCGC_ATTR_INT: snprintf(val, sizeof val, "%lld", (long long)a->val[i].i); break;
  case PCGC_ATTR_FLOAT: format_double(val, sizeof val, a->val[i].f); break;
  case PCGC_ATTR_BOOL: snprintf(val, sizeof val, "%s", a->val[i].i ? "true" : "false"); break;
  case PCGC_ATTR_ENUM: {
    const char *name = pcgc_enum_value_name(d->enum_type, a->val[i].i);
    snprintf(val, sizeof val, "%s", name ? name : "?");
    break;
  }
  case PCGC_ATTR_INTS:
  case PCGC_ATTR_INTS2: {
    pcgc_ints l = pcgc_attrs_ints_at(a, i);
    val[k++] = '[';
    for (int j = 0; j < l.n && k < sizeof val - 32; j++)
      k += (size_t)snprintf(val + k, sizeof val - k, "%s%lld", j ? ", " : "", (long long)l.v[j]);
    snprintf(val + k, sizeof val - k, "]");
    break;
  }
  }
  return snprintf(buf, n, "%s=%s", d->name, val);
}
