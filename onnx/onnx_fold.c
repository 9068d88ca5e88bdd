/*
 * onnx_fold.c — evaluating constant subgraphs at import time.
 *
 * Exporters compute shapes at run time: Shape -> Gather -> Unsqueeze ->
 * Concat -> Reshape, with Div, Mul, Cast and Slice in between, and they
 * transpose weights with a Transpose of the initializer. With the input
 * shapes fixed (symbolic dims take the batch size) all of this is known
 * while importing, so every node whose inputs are all constants (Shape and
 * Size: whose input has a known type) is evaluated here on the host.
 *
 * Folds that only move or relabel data (Identity, Transpose, Reshape, Cast
 * ...) keep the tensor's `origin`, so a transposed initializer that ends up
 * as a weight is still named after the initializer. Integer arithmetic
 * wraps instead of overflowing, float-to-int conversions saturate, and a
 * fold may not grow a tensor past ONNX_MAX_FOLD_NUMEL elements (or its
 * largest input), so no bytes make the importer misbehave.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

#define TRY(x) do { pcgc_status s_ = (x); if (s_ != PCGC_OK) return s_; } while (0)

typedef pcgc_status (*fold_fn)(onnx_ctx *c);

/* Input i as a constant; NULL when absent. */
static pcgc_status in_const(onnx_ctx *c, int i, onnx_tensor **out) {
  onnx_value *v;
  *out = NULL;
  TRY(pcgc__onnx_input(c, i, &v));
  if (!v) return PCGC_OK;
  if (v->kind != OV_CONST)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "input %d ('%.200s') must be known at import time", i, v->name);
  return pcgc__onnx_const(c, v, out);
}

static pcgc_status need_const(onnx_ctx *c, int i, onnx_tensor **out) {
  TRY(in_const(c, i, out));
  if (!*out) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "input %d is missing", i);
  return PCGC_OK;
}

static onnx_tensor *share(onnx_ctx *c, const onnx_tensor *t, int rank, const int64_t *dims) {
  onnx_tensor *r = pcgc__onnx_alloc(&c->arena, sizeof *r);
  if (!r) return NULL;
  *r = *t;
  r->rank = rank;
  memmove(r->dims, dims, (size_t)rank * sizeof *dims);
  return r;
}

static pcgc_status too_big(onnx_ctx *c, int64_t n) {
  return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "folding this constant would make %lld elements, more than "
                         "the limit %d", (long long)n, ONNX_MAX_FOLD_NUMEL);
}

static pcgc_status new_tensor(onnx_ctx *c, int32_t type, int rank, const int64_t *dims, int64_t limit,
                              onnx_tensor **out) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) {
    if (dims[d] < 0) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "dim %d would be %lld", d, (long long)dims[d]);
    if (dims[d] && n > INT64_MAX / dims[d]) return too_big(c, INT64_MAX);
    n *= dims[d];
  }
  if (limit < ONNX_MAX_FOLD_NUMEL) limit = ONNX_MAX_FOLD_NUMEL;
  if (n > limit) return too_big(c, n);
  if (rank > ONNX_MAX_RANK)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "a folded constant would have %d dims", rank);
  TRY(pcgc__onnx_spend(c, n));
  *out = pcgc__onnx_tensor_new(c, type, rank, dims);
  return *out ? PCGC_OK : pcgc__onnx_nomem(c);
}

static void set_elem(onnx_tensor *t, int64_t e, double f, int64_t i) {
  if (t->f) t->f[e] = (float)(isfinite(f) && fabs(f) > 3.4e38 ? copysign(INFINITY, f) : f);
  else t->i[e] = i;
}

/* Copies element `from` of s to element `to` of d (same storage class or not). */
static void copy_elem(onnx_tensor *d, int64_t to, const onnx_tensor *s, int64_t from) {
  if (d->f) d->f[to] = s->f ? s->f[from] : (float)s->i[from];
  else d->i[to] = s->i ? s->i[from] : pcgc__onnx_f2i(s->f[from]);
}

static int norm_axis(int64_t a, int rank, int *out) {
  if (a < -rank || a >= rank) return -1;
  *out = (int)(a < 0 ? a + rank : a);
  return 0;
}

static pcgc_status bad_axis(onnx_ctx *c, int64_t a, int rank) {
  return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)a, rank);
}

/* Row-major strides. */
static void strides_of(int rank, const int64_t *dims, int64_t *st) {
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    st[d] = s;
    s *= dims[d];
  }
}

/* ------------------------------------------------------ shared with ops */

pcgc_status pcgc__onnx_const_ints(onnx_ctx *c, onnx_value *v, const char *what, int max, int64_t *out, int *n) {
  if (v->kind != OV_CONST)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "%s ('%.200s') must be known at import time (a constant or "
                           "computed from shapes)", what, v->name);
  onnx_tensor *t;
  TRY(pcgc__onnx_const(c, v, &t));
  if (t->rank > 1 || !pcgc__onnx_type_is_int(t->type))
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "%s ('%.200s') must be a list of integers", what, v->name);
  if (t->numel > max)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "%s ('%.200s') has %lld values, more than %d", what, v->name,
                           (long long)t->numel, max);
  for (int64_t i = 0; i < t->numel; i++) out[i] = t->i[i];
  *n = (int)t->numel;
  return PCGC_OK;
}

/* Axes from attribute `axes` (older opsets) or input `input`; n = -1 if neither. */
pcgc_status pcgc__onnx_axes(onnx_ctx *c, int input, int max, int64_t *axes, int *n) {
  TRY(pcgc__onnx_attr_ints(c, "axes", max, axes, n));
  if (*n >= 0) return PCGC_OK;
  onnx_value *v;
  TRY(pcgc__onnx_input(c, input, &v));
  if (v) TRY(pcgc__onnx_const_ints(c, v, "axes", max, axes, n));
  return PCGC_OK;
}

pcgc_status pcgc__onnx_reshape_dims(onnx_ctx *c, int rank, const int64_t *dims, int *orank, int64_t *odims) {
  const char *op = c->cur->op_type;
  int64_t numel = 1;
  for (int d = 0; d < rank; d++) numel *= dims[d];
  if (strcmp(op, "Reshape") == 0) {
    onnx_value *sv;
    int64_t spec[ONNX_MAX_RANK];
    int n;
    TRY(pcgc__onnx_input(c, 1, &sv));
    if (!sv) {
      int64_t shape_attr[ONNX_MAX_RANK];
      TRY(pcgc__onnx_attr_ints(c, "shape", ONNX_MAX_RANK, shape_attr, &n)); /* opset < 5 */
      if (n < 0) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Reshape has no shape");
      memcpy(spec, shape_attr, sizeof spec);
    } else {
      TRY(pcgc__onnx_const_ints(c, sv, "the shape", ONNX_MAX_RANK, spec, &n));
    }
    int64_t allowzero;
    TRY(pcgc__onnx_attr_int(c, "allowzero", 0, &allowzero));
    int infer_at = -1;
    int64_t known = 1;
    for (int i = 0; i < n; i++) {
      int64_t v = spec[i];
      if (v == 0 && !allowzero) {
        if (i >= rank) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "shape entry %d is 0 (copy), but the input has "
                                              "only %d dims", i, rank);
        v = dims[i];
      }
      if (v == -1) {
        if (infer_at >= 0) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "the shape has two -1 entries");
        infer_at = i;
        odims[i] = -1;
        continue;
      }
      if (v < 0) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "shape entry %d is %lld", i, (long long)v);
      if (v && known > INT64_MAX / v) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "the shape overflows");
      known *= v;
      odims[i] = v;
    }
    if (infer_at >= 0) {
      if (known == 0 || numel % known)
        return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "cannot reshape %lld elements to the shape (-1 cannot be "
                               "inferred)", (long long)numel);
      odims[infer_at] = numel / known;
    } else if (known != numel) {
      return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "cannot reshape %lld elements into a shape of %lld",
                             (long long)numel, (long long)known);
    }
    *orank = n;
    return PCGC_OK;
  }
  if (strcmp(op, "Flatten") == 0) {
    int64_t axis;
    TRY(pcgc__onnx_attr_int(c, "axis", 1, &axis));
    if (axis < 0) axis += rank;
    if (axis < 0 || axis > rank) return bad_axis(c, axis, rank);
    odims[0] = odims[1] = 1;
    for (int d = 0; d < rank; d++) odims[d < axis ? 0 : 1] *= dims[d];
    *orank = 2;
    return PCGC_OK;
  }
  int64_t axes[ONNX_MAX_RANK];
  int n;
  TRY(pcgc__onnx_axes(c, 1, ONNX_MAX_RANK, axes, &n));
  bool mark[ONNX_MAX_RANK + 1] = {false};
  if (strcmp(op, "Squeeze") == 0) {
    for (int i = 0; i < n; i++) {
      int a;
      if (norm_axis(axes[i], rank, &a)) return bad_axis(c, axes[i], rank);
      if (dims[a] != 1)
        return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "cannot squeeze dim %d of size %lld", a, (long long)dims[a]);
      mark[a] = true;
    }
    int r = 0;
    for (int d = 0; d < rank; d++)
      if (!(n >= 0 ? mark[d] : dims[d] == 1)) odims[r++] = dims[d];
    *orank = r;
    return PCGC_OK;
  }
  /* Unsqueeze */
  if (n < 0) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Unsqueeze has no axes");
  int out_rank = rank + n;
  if (out_rank > ONNX_MAX_RANK)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "the result would have %d dims", out_rank);
  for (int i = 0; i < n; i++) {
    int a;
    if (norm_axis(axes[i], out_rank, &a)) return bad_axis(c, axes[i], out_rank);
    if (mark[a]) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "axis %d is listed twice", a);
    mark[a] = true;
  }
  for (int d = 0, k = 0; d < out_rank; d++) odims[d] = mark[d] ? 1 : dims[k++];
  *orank = out_rank;
  return PCGC_OK;
}

pcgc_status pcgc__onnx_slice_ranges(onnx_ctx *c, int rank, const int64_t *dims, int64_t *start, int64_t *count,
                                    int64_t *step) {
  int64_t st[ONNX_MAX_RANK], en[ONNX_MAX_RANK], ax[ONNX_MAX_RANK], sp[ONNX_MAX_RANK];
  int ns, ne, na = -1, np = -1;
  TRY(pcgc__onnx_attr_ints(c, "starts", ONNX_MAX_RANK, st, &ns));
  if (ns >= 0) { /* opset < 10: attributes */
    TRY(pcgc__onnx_attr_ints(c, "ends", ONNX_MAX_RANK, en, &ne));
    TRY(pcgc__onnx_attr_ints(c, "axes", ONNX_MAX_RANK, ax, &na));
  } else {
    onnx_value *v[5];
    for (int i = 1; i < 5; i++) TRY(pcgc__onnx_input(c, i, &v[i]));
    if (!v[1] || !v[2]) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Slice needs starts and ends");
    TRY(pcgc__onnx_const_ints(c, v[1], "starts", ONNX_MAX_RANK, st, &ns));
    TRY(pcgc__onnx_const_ints(c, v[2], "ends", ONNX_MAX_RANK, en, &ne));
    if (v[3]) TRY(pcgc__onnx_const_ints(c, v[3], "axes", ONNX_MAX_RANK, ax, &na));
    if (v[4]) TRY(pcgc__onnx_const_ints(c, v[4], "steps", ONNX_MAX_RANK, sp, &np));
  }
  if (ne != ns || (na >= 0 && na != ns) || (np >= 0 && np != ns))
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "starts, ends, axes and steps differ in length");
  bool seen[ONNX_MAX_RANK] = {false};
  for (int d = 0; d < rank; d++) {
    start[d] = 0;
    count[d] = dims[d];
    step[d] = 1;
  }
  for (int i = 0; i < ns; i++) {
    int a;
    int64_t axis = na >= 0 ? ax[i] : i;
    if (norm_axis(axis, rank, &a)) return bad_axis(c, axis, rank);
    if (seen[a]) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "axis %d is sliced twice", a);
    seen[a] = true;
    int64_t dim = dims[a], s = st[i], e = en[i], k = np >= 0 ? sp[i] : 1;
    if (k == 0) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "a slice step is 0");
    if (k == INT64_MIN) k = -INT64_MAX;
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    int64_t n;
    if (k > 0) {
      s = s < 0 ? 0 : s > dim ? dim : s;
      e = e < 0 ? 0 : e > dim ? dim : e;
      n = e > s ? (e - s - 1) / k + 1 : 0;
    } else {
      s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
      e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
      n = s > e ? (s - e - 1) / -k + 1 : 0;
    }
    start[a] = s;
    count[a] = n;
    step[a] = k;
  }
  return PCGC_OK;
}

pcgc_status pcgc__onnx_transpose(onnx_ctx *c, const onnx_tensor *t, const int64_t *perm, onnx_tensor **out) {
  int r = t->rank, p[ONNX_MAX_RANK];
  bool seen[ONNX_MAX_RANK] = {false};
  for (int i = 0; i < r; i++) {
    int64_t v = perm ? perm[i] : r - 1 - i;
    if (norm_axis(v, r, &p[i]) || seen[p[i]]) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "perm is not a permutation");
    seen[p[i]] = true;
  }
  int64_t dims[ONNX_MAX_RANK] = {0}, ist[ONNX_MAX_RANK], idx[ONNX_MAX_RANK] = {0};
  for (int i = 0; i < r; i++) dims[i] = t->dims[p[i]];
  TRY(new_tensor(c, t->type, r, dims, t->numel, out));
  strides_of(r, t->dims, ist);
  for (int64_t e = 0; e < t->numel; e++) {
    int64_t src = 0;
    for (int i = 0; i < r; i++) src += idx[i] * ist[p[i]];
    copy_elem(*out, e, t, src);
    for (int i = r - 1; i >= 0; i--) {
      if (++idx[i] < dims[i]) break;
      idx[i] = 0;
    }
  }
  (*out)->origin = t->origin;
  return PCGC_OK;
}

/* ------------------------------------------------------------ data moving */

static pcgc_status fold_identity(onnx_ctx *c) {
  onnx_tensor *t;
  TRY(need_const(c, 0, &t));
  return pcgc__onnx_def_const(c, 0, t);
}

static pcgc_status fold_reshape(onnx_ctx *c) {
  onnx_tensor *t, *r;
  TRY(need_const(c, 0, &t));
  int rank;
  int64_t dims[ONNX_MAX_RANK];
  TRY(pcgc__onnx_reshape_dims(c, t->rank, t->dims, &rank, dims));
  if (!(r = share(c, t, rank, dims))) return pcgc__onnx_nomem(c);
  return pcgc__onnx_def_const(c, 0, r);
}

static pcgc_status fold_cast(onnx_ctx *c) {
  onnx_tensor *t, *r;
  int64_t to;
  TRY(need_const(c, 0, &t));
  TRY(pcgc__onnx_attr_int(c, "to", OT_UNDEFINED, &to));
  if (!pcgc__onnx_type_is_float((int32_t)to) && !pcgc__onnx_type_is_int((int32_t)to))
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Cast to %s is not supported", pcgc__onnx_type_name((int32_t)to));
  TRY(new_tensor(c, (int32_t)to, t->rank, t->dims, t->numel, &r));
  for (int64_t e = 0; e < t->numel; e++) {
    copy_elem(r, e, t, e);
    if (to == OT_BOOL) r->i[e] = r->i[e] != 0 || (t->f && t->f[e] != 0);
  }
  r->origin = t->origin;
  return pcgc__onnx_def_const(c, 0, r);
}

static pcgc_status fold_transpose(onnx_ctx *c) {
  onnx_tensor *t, *r;
  int64_t perm[ONNX_MAX_RANK];
  int n;
  TRY(need_const(c, 0, &t));
  TRY(pcgc__onnx_attr_ints(c, "perm", ONNX_MAX_RANK, perm, &n));
  if (n >= 0 && n != t->rank)
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "perm has %d entries for rank %d", n, t->rank);
  TRY(pcgc__onnx_transpose(c, t, n >= 0 ? perm : NULL, &r));
  return pcgc__onnx_def_const(c, 0, r);
}

static pcgc_status fold_shape(onnx_ctx *c) {
  onnx_value *v;
  TRY(pcgc__onnx_input(c, 0, &v));
  if (!v) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Shape has no input");
  int rank;
  const int64_t *dims;
  if (v->kind == OV_CONST) {
    onnx_tensor *t;
    TRY(pcgc__onnx_const(c, v, &t));
    rank = t->rank;
    dims = t->dims;
  } else if (v->kind == OV_ACT) {
    const pcgc_ptensor *pt = pcgc__onnx_type(c, v->ref);
    rank = pt->rank;
    dims = pt->dims;
  } else {
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "the shape of '%.200s' is not known here", v->name);
  }
  int64_t numel = 1;
  for (int d = 0; d < rank; d++) numel *= dims[d];
  onnx_tensor *r;
  if (strcmp(c->cur->op_type, "Size") == 0) {
    TRY(new_tensor(c, OT_INT64, 0, NULL, 1, &r));
    r->i[0] = numel;
    return pcgc__onnx_def_const(c, 0, r);
  }
  int64_t start, end;
  TRY(pcgc__onnx_attr_int(c, "start", 0, &start));
  TRY(pcgc__onnx_attr_int(c, "end", rank, &end));
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = start < 0 ? 0 : start > rank ? rank : start;
  end = end < start ? start : end > rank ? rank : end;
  int64_t n = end - start;
  TRY(new_tensor(c, OT_INT64, 1, &n, n, &r));
  for (int64_t i = 0; i < n; i++) r->i[i] = dims[start + i];
  return pcgc__onnx_def_const(c, 0, r);
}

static pcgc_status fold_concat(onnx_ctx *c) {
  int64_t axis;
  TRY(pcgc__onnx_attr_int(c, "axis", 0, &axis));
  onnx_tensor *ts[PCGC_VARIADIC];
  int n = 0;
  int64_t total = 0, limit = 0;
  bool is_float = false;
  if (c->cur->n_input > PCGC_VARIADIC)
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Concat of more than %d tensors", PCGC_VARIADIC);
  for (size_t i = 0; i < c->cur->n_input; i++) {
    onnx_tensor *t;
    TRY(in_const(c, (int)i, &t));
    if (t) ts[n++] = t;
  }
  if (!n) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Concat has no inputs");
  int a, rank = ts[0]->rank;
  if (norm_axis(axis, rank, &a)) return bad_axis(c, axis, rank);
  for (int i = 0; i < n; i++) {
    if (ts[i]->rank != rank) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Concat inputs differ in rank");
    for (int d = 0; d < rank; d++)
      if (d != a && ts[i]->dims[d] != ts[0]->dims[d])
        return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Concat inputs differ in dim %d", d);
    total += ts[i]->dims[a];
    limit += ts[i]->numel;
    is_float |= ts[i]->f != NULL;
  }
  int64_t dims[ONNX_MAX_RANK];
  memcpy(dims, ts[0]->dims, sizeof dims);
  dims[a] = total;
  onnx_tensor *r;
  int32_t type = ts[0]->type;
  if (is_float && !pcgc__onnx_type_is_float(type)) type = OT_FLOAT;
  TRY(new_tensor(c, type, rank, dims, limit, &r));
  int64_t outer = 1, inner = 1, e = 0;
  for (int d = 0; d < a; d++) outer *= dims[d];
  for (int d = a + 1; d < rank; d++) inner *= dims[d];
  for (int64_t o = 0; o < outer; o++)
    for (int i = 0; i < n; i++) {
      int64_t block = ts[i]->dims[a] * inner;
      for (int64_t k = 0; k < block; k++) copy_elem(r, e++, ts[i], o * block + k);
    }
  return pcgc__onnx_def_const(c, 0, r);
}

/* out = t[start[d] + step[d] * k for k < count[d]] */
static pcgc_status slice_tensor(onnx_ctx *c, const onnx_tensor *t, const int64_t *start, const int64_t *count,
                                const int64_t *step, onnx_tensor **out) {
  int r = t->rank;
  int64_t st[ONNX_MAX_RANK], idx[ONNX_MAX_RANK] = {0};
  TRY(new_tensor(c, t->type, r, count, t->numel, out));
  strides_of(r, t->dims, st);
  for (int64_t e = 0; e < (*out)->numel; e++) {
    int64_t src = 0;
    for (int d = 0; d < r; d++) src += (start[d] + idx[d] * step[d]) * st[d];
    copy_elem(*out, e, t, src);
    for (int d = r - 1; d >= 0; d--) {
      if (++idx[d] < count[d]) break;
      idx[d] = 0;
    }
  }
  return PCGC_OK;
}

static pcgc_status fold_slice(onnx_ctx *c) {
  onnx_tensor *t, *r;
  TRY(need_const(c, 0, &t));
  int64_t start[ONNX_MAX_RANK], count[ONNX_MAX_RANK], step[ONNX_MAX_RANK];
  TRY(pcgc__onnx_slice_ranges(c, t->rank, t->dims, start, count, step));
  TRY(slice_tensor(c, t, start, count, step, &r));
  return pcgc__onnx_def_const(c, 0, r);
}

pcgc_status pcgc__onnx_split_sizes(onnx_ctx *c, int64_t dim, int n_out, int64_t *sizes) {
  int64_t attr[PCGC_MAX_INTS];
  int n;
  TRY(pcgc__onnx_attr_ints(c, "split", PCGC_MAX_INTS, attr, &n));
  if (n < 0) {
    onnx_value *v;
    TRY(pcgc__onnx_input(c, 1, &v));
    if (v) TRY(pcgc__onnx_const_ints(c, v, "the split sizes", PCGC_MAX_INTS, attr, &n));
  }
  if (n >= 0) {
    if (n != n_out)
      return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "%d split sizes for %d outputs", n, n_out);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
      if (attr[i] < 0 || attr[i] > dim) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "split size %lld",
                                                               (long long)attr[i]);
      sizes[i] = attr[i];
      total += attr[i];
    }
    if (total != dim)
      return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "split sizes add up to %lld, but the dim is %lld",
                             (long long)total, (long long)dim);
    return PCGC_OK;
  }
  if (n_out < 1) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Split has no outputs");
  int64_t part = (dim + n_out - 1) / n_out; /* equal parts, the last one smaller (opset 18) */
  for (int i = 0; i < n_out; i++) {
    int64_t left = dim - part * i;
    sizes[i] = left < 0 ? 0 : left < part ? left : part;
  }
  if (dim % n_out && part * (n_out - 1) >= dim)
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "dim %lld cannot be split in %d parts", (long long)dim, n_out);
  return PCGC_OK;
}

static pcgc_status fold_split(onnx_ctx *c) {
  onnx_tensor *t;
  TRY(need_const(c, 0, &t));
  int64_t axis;
  TRY(pcgc__onnx_attr_int(c, "axis", 0, &axis));
  int a, n_out = (int)c->cur->n_output;
  if (norm_axis(axis, t->rank, &a)) return bad_axis(c, axis, t->rank);
  if (n_out > PCGC_MAX_INTS) return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "Split into %d parts", n_out);
  int64_t sizes[PCGC_MAX_INTS], start[ONNX_MAX_RANK] = {0}, count[ONNX_MAX_RANK], step[ONNX_MAX_RANK];
  TRY(pcgc__onnx_split_sizes(c, t->dims[a], n_out, sizes));
  for (int d = 0; d < t->rank; d++) {
    count[d] = t->dims[d];
    step[d] = 1;
  }
  for (int i = 0; i < n_out; i++) {
    onnx_tensor *r;
    count[a] = sizes[i];
    TRY(slice_tensor(c, t, start, count, step, &r));
    TRY(pcgc__onnx_def_const(c, i, r));
    start[a] += sizes[i];
  }
  return PCGC_OK;
}

static pcgc_status fold_gather(onnx_ctx *c) {
  onnx_tensor *t, *idx, *r;
  TRY(need_const(c, 0, &t));
  TRY(need_const(c, 1, &idx));
  int64_t axis;
  int a;
  TRY(pcgc__onnx_attr_int(c, "axis", 0, &axis));
  if (norm_axis(axis, t->rank, &a)) return bad_axis(c, axis, t->rank);
  if (!pcgc__onnx_type_is_int(idx->type)) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Gather indices must be integers");
  int rank = t->rank - 1 + idx->rank;
  if (rank > ONNX_MAX_RANK) return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "the result would have %d dims", rank);
  int64_t dims[ONNX_MAX_RANK], outer = 1, inner = 1, n = t->dims[a];
  int k = 0;
  for (int d = 0; d < a; d++) outer *= (dims[k++] = t->dims[d]);
  for (int d = 0; d < idx->rank; d++) dims[k++] = idx->dims[d];
  for (int d = a + 1; d < t->rank; d++) inner *= (dims[k++] = t->dims[d]);
  TRY(new_tensor(c, t->type, rank, dims, t->numel > idx->numel ? t->numel : idx->numel, &r));
  int64_t e = 0;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < idx->numel; j++) {
      int64_t i = idx->i[j];
      if (i < 0) i += n;
      if (i < 0 || i >= n)
        return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Gather index %lld is out of range for size %lld",
                               (long long)idx->i[j], (long long)n);
      for (int64_t q = 0; q < inner; q++) copy_elem(r, e++, t, (o * n + i) * inner + q);
    }
  return pcgc__onnx_def_const(c, 0, r);
}

/* ----------------------------------------------------------- elementwise */

/* Broadcast shape of n tensors (numpy rules). */
static pcgc_status bcast_dims(onnx_ctx *c, int n, onnx_tensor *const *ts, int *rank, int64_t *dims) {
  int r = 0;
  for (int i = 0; i < n; i++) r = ts[i]->rank > r ? ts[i]->rank : r;
  for (int d = 0; d < r; d++) {
    int64_t v = 1;
    for (int i = 0; i < n; i++) {
      int k = d - (r - ts[i]->rank);
      int64_t x = k >= 0 ? ts[i]->dims[k] : 1;
      if (x == v || x == 1) continue;
      if (v != 1) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "operands do not broadcast (dim %d: %lld vs %lld)",
                                         d, (long long)v, (long long)x);
      v = x;
    }
    dims[d] = v;
  }
  *rank = r;
  return PCGC_OK;
}

/* Offsets of element e of the broadcast result in each input. */
typedef struct bcast_it {
  int n, rank;
  int64_t dims[ONNX_MAX_RANK], idx[ONNX_MAX_RANK];
  int64_t st[3][ONNX_MAX_RANK], off[3];
} bcast_it;

static void bcast_init(bcast_it *it, int n, onnx_tensor *const *ts, int rank, const int64_t *dims) {
  memset(it, 0, sizeof *it);
  it->n = n;
  it->rank = rank;
  memcpy(it->dims, dims, (size_t)rank * sizeof *dims);
  for (int i = 0; i < n; i++) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
      int k = d - (rank - ts[i]->rank);
      int64_t x = k >= 0 ? ts[i]->dims[k] : 1;
      it->st[i][d] = x == 1 ? 0 : s;
      s *= x;
    }
  }
}

static void bcast_next(bcast_it *it) {
  for (int d = it->rank - 1; d >= 0; d--) {
    for (int i = 0; i < it->n; i++) it->off[i] += it->st[i][d];
    if (++it->idx[d] < it->dims[d]) return;
    for (int i = 0; i < it->n; i++) it->off[i] -= it->st[i][d] * it->dims[d];
    it->idx[d] = 0;
  }
}

typedef enum { B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MIN, B_MAX, B_EQ, B_LT, B_GT, B_LE, B_GE, B_AND, B_OR,
               B_MOD } bop;

static const struct { const char *name; bop op; } binary_ops[] = {
    {"Add", B_ADD}, {"Sub", B_SUB}, {"Mul", B_MUL}, {"Div", B_DIV}, {"Pow", B_POW}, {"Min", B_MIN},
    {"Max", B_MAX}, {"Equal", B_EQ}, {"Less", B_LT}, {"Greater", B_GT}, {"LessOrEqual", B_LE},
    {"GreaterOrEqual", B_GE}, {"And", B_AND}, {"Or", B_OR}, {"Mod", B_MOD},
};

static int64_t ipow(int64_t b, int64_t e) {
  if (e < 0) return b == 1 ? 1 : b == -1 ? (e % 2 ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)b;
  while (e) {
    if (e & 1) r *= x;
    x *= x;
    e >>= 1;
  }
  return (int64_t)r;
}

static pcgc_status ibin(onnx_ctx *c, bop op, int64_t a, int64_t b, int64_t *r) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  switch (op) {
  case B_ADD: *r = (int64_t)(ua + ub); break;
  case B_SUB: *r = (int64_t)(ua - ub); break;
  case B_MUL: *r = (int64_t)(ua * ub); break;
  case B_DIV:
  case B_MOD:
    if (b == 0) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "integer division by zero");
    if (a == INT64_MIN && b == -1) *r = op == B_DIV ? INT64_MIN : 0;
    else if (op == B_DIV) *r = a / b;
    else *r = (a % b != 0 && ((a % b < 0) != (b < 0))) ? a % b + b : a % b; /* sign of the divisor */
    break;
  case B_POW: *r = ipow(a, b); break;
  case B_MIN: *r = a < b ? a : b; break;
  case B_MAX: *r = a > b ? a : b; break;
  case B_EQ: *r = a == b; break;
  case B_LT: *r = a < b; break;
  case B_GT: *r = a > b; break;
  case B_LE: *r = a <= b; break;
  case B_GE: *r = a >= b; break;
  case B_AND: *r = a && b; break;
  case B_OR: *r = a || b; break;
  }
  return PCGC_OK;
}

static double fbin(bop op, double a, double b) {
  switch (op) {
  case B_ADD: return a + b;
  case B_SUB: return a - b;
  case B_MUL: return a * b;
  case B_DIV: return a / b;
  case B_POW: return pow(a, b);
  case B_MIN: return a < b ? a : b;
  case B_MAX: return a > b ? a : b;
  case B_EQ: return a == b;
  case B_LT: return a < b;
  case B_GT: return a > b;
  case B_LE: return a <= b;
  case B_GE: return a >= b;
  case B_AND: return a != 0 && b != 0;
  case B_OR: return a != 0 || b != 0;
  case B_MOD: return fmod(a, b);
  }
  return 0;
}

static pcgc_status fold_binary(onnx_ctx *c) {
  bop op = B_ADD;
  for (size_t i = 0; i < sizeof binary_ops / sizeof binary_ops[0]; i++)
    if (strcmp(c->cur->op_type, binary_ops[i].name) == 0) op = binary_ops[i].op;
  onnx_tensor *ts[2], *r;
  TRY(need_const(c, 0, &ts[0]));
  TRY(need_const(c, 1, &ts[1]));
  int rank;
  int64_t dims[ONNX_MAX_RANK];
  TRY(bcast_dims(c, 2, ts, &rank, dims));
  bool cmp = op >= B_EQ && op <= B_OR;
  bool is_float = (ts[0]->f || ts[1]->f) && op != B_AND && op != B_OR;
  int32_t type = cmp ? OT_BOOL : ts[0]->type;
  if (!cmp && is_float && !pcgc__onnx_type_is_float(type)) type = ts[1]->type;
  TRY(new_tensor(c, type, rank, dims, ts[0]->numel > ts[1]->numel ? ts[0]->numel : ts[1]->numel, &r));
  bcast_it it;
  bcast_init(&it, 2, ts, rank, dims);
  for (int64_t e = 0; e < r->numel; e++, bcast_next(&it)) {
    if (is_float) {
      double v = fbin(op, pcgc__onnx_get_f(ts[0], it.off[0]), pcgc__onnx_get_f(ts[1], it.off[1]));
      set_elem(r, e, v, pcgc__onnx_f2i(v));
    } else {
      int64_t v = 0;
      TRY(ibin(c, op, pcgc__onnx_get_i(ts[0], it.off[0]), pcgc__onnx_get_i(ts[1], it.off[1]), &v));
      set_elem(r, e, (double)v, v);
    }
  }
  return pcgc__onnx_def_const(c, 0, r);
}

static pcgc_status fold_where(onnx_ctx *c) {
  onnx_tensor *ts[3], *r;
  for (int i = 0; i < 3; i++) TRY(need_const(c, i, &ts[i]));
  int rank;
  int64_t dims[ONNX_MAX_RANK], limit = 0;
  TRY(bcast_dims(c, 3, ts, &rank, dims));
  for (int i = 0; i < 3; i++) limit = ts[i]->numel > limit ? ts[i]->numel : limit;
  TRY(new_tensor(c, ts[1]->type, rank, dims, limit, &r));
  bcast_it it;
  bcast_init(&it, 3, ts, rank, dims);
  for (int64_t e = 0; e < r->numel; e++, bcast_next(&it)) {
    int k = pcgc__onnx_get_f(ts[0], it.off[0]) != 0 ? 1 : 2;
    copy_elem(r, e, ts[k], it.off[k]);
  }
  return pcgc__onnx_def_const(c, 0, r);
}

static pcgc_status fold_expand(onnx_ctx *c) {
  onnx_tensor *ts[2], *r;
  onnx_value *sv;
  TRY(need_const(c, 0, &ts[0]));
  TRY(pcgc__onnx_input(c, 1, &sv));
  if (!sv) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Expand has no shape");
  int64_t shape[ONNX_MAX_RANK];
  int n;
  TRY(pcgc__onnx_const_ints(c, sv, "the shape", ONNX_MAX_RANK, shape, &n));
  onnx_tensor fake = {.rank = n};
  memcpy(fake.dims, shape, sizeof shape);
  for (int d = 0; d < n; d++)
    if (shape[d] < 0) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Expand to a negative size");
  ts[1] = &fake;
  int rank;
  int64_t dims[ONNX_MAX_RANK];
  TRY(bcast_dims(c, 2, ts, &rank, dims));
  TRY(new_tensor(c, ts[0]->type, rank, dims, ts[0]->numel, &r));
  bcast_it it;
  bcast_init(&it, 1, ts, rank, dims);
  for (int64_t e = 0; e < r->numel; e++, bcast_next(&it)) copy_elem(r, e, ts[0], it.off[0]);
  return pcgc__onnx_def_const(c, 0, r);
}

static pcgc_status fold_unary(onnx_ctx *c) {
  const char *op = c->cur->op_type;
  onnx_tensor *t, *r;
  TRY(need_const(c, 0, &t));
  bool is_not = strcmp(op, "Not") == 0;
  TRY(new_tensor(c, is_not ? OT_BOOL : t->type, t->rank, t->dims, t->numel, &r));
  for (int64_t e = 0; e < t->numel; e++) {
    if (t->i && !is_not) { /* integers: Neg, Abs, Relu (the rest keep integers as they are) */
      int64_t v = t->i[e];
      if (strcmp(op, "Neg") == 0) v = (int64_t)(0 - (uint64_t)v);
      else if (strcmp(op, "Abs") == 0) v = v < 0 ? (int64_t)(0 - (uint64_t)v) : v;
      else if (strcmp(op, "Relu") == 0) v = v < 0 ? 0 : v;
      else if (strcmp(op, "Sign") == 0) v = (v > 0) - (v < 0);
      else if (strcmp(op, "Floor") != 0 && strcmp(op, "Ceil") != 0)
        return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "%s of integers is not supported", op);
      r->i[e] = v;
      continue;
    }
    double x = pcgc__onnx_get_f(t, e), y;
    if (is_not) y = x == 0;
    else if (strcmp(op, "Neg") == 0) y = -x;
    else if (strcmp(op, "Abs") == 0) y = fabs(x);
    else if (strcmp(op, "Sqrt") == 0) y = sqrt(x);
    else if (strcmp(op, "Exp") == 0) y = exp(x);
    else if (strcmp(op, "Log") == 0) y = log(x);
    else if (strcmp(op, "Erf") == 0) y = erf(x);
    else if (strcmp(op, "Tanh") == 0) y = tanh(x);
    else if (strcmp(op, "Sigmoid") == 0) y = 1 / (1 + exp(-x));
    else if (strcmp(op, "Relu") == 0) y = x < 0 ? 0 : x;
    else if (strcmp(op, "Reciprocal") == 0) y = 1 / x;
    else if (strcmp(op, "Floor") == 0) y = floor(x);
    else if (strcmp(op, "Ceil") == 0) y = ceil(x);
    else if (strcmp(op, "Sign") == 0) y = (x > 0) - (x < 0);
    else return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "%s cannot be folded", op);
    set_elem(r, e, y, pcgc__onnx_f2i(y));
  }
  return pcgc__onnx_def_const(c, 0, r);
}

static pcgc_status fold_constant_of_shape(onnx_ctx *c) {
  onnx_value *sv;
  TRY(pcgc__onnx_input(c, 0, &sv));
  int64_t shape[ONNX_MAX_RANK];
  int n;
  TRY(pcgc__onnx_const_ints(c, sv, "the shape", ONNX_MAX_RANK, shape, &n));
  onnx_tensor *val = NULL, *r;
  const Onnx__AttributeProto *a = pcgc__onnx_attr(c->cur, "value");
  if (a && a->t) {
    TRY(pcgc__onnx_decode(c, a->t, "value", &val));
    if (val->numel != 1) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "the value must have one element");
  }
  TRY(new_tensor(c, val ? val->type : OT_FLOAT, n, shape, 0, &r));
  for (int64_t e = 0; e < r->numel; e++)
    if (val) copy_elem(r, e, val, 0);
  return pcgc__onnx_def_const(c, 0, r);
}

static pcgc_status fold_range(onnx_ctx *c) {
  onnx_tensor *ts[3], *r;
  for (int i = 0; i < 3; i++) {
    TRY(need_const(c, i, &ts[i]));
    if (ts[i]->numel != 1) return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Range takes scalars");
  }
  double s = pcgc__onnx_get_f(ts[0], 0), l = pcgc__onnx_get_f(ts[1], 0), d = pcgc__onnx_get_f(ts[2], 0);
  if (d == 0 || !isfinite(s) || !isfinite(l) || !isfinite(d))
    return pcgc__onnx_fail(c, PCGC_ERR_INVALID, "Range with delta 0 or a non-finite bound");
  double nd = ceil((l - s) / d);
  if (nd > ONNX_MAX_FOLD_NUMEL) return too_big(c, pcgc__onnx_f2i(nd));
  int64_t n = nd > 0 ? (int64_t)nd : 0;
  TRY(new_tensor(c, ts[0]->type, 1, &n, n, &r));
  for (int64_t e = 0; e < n; e++) {
    if (r->f) r->f[e] = (float)(s + (double)e * d);
    else r->i[e] = (int64_t)((uint64_t)pcgc__onnx_get_i(ts[0], 0) + (uint64_t)e * (uint64_t)pcgc__onnx_get_i(ts[2], 0));
  }
  return pcgc__onnx_def_const(c, 0, r);
}

static pcgc_status fold_reduce(onnx_ctx *c) {
  const char *op = c->cur->op_type;
  onnx_tensor *t, *r;
  TRY(need_const(c, 0, &t));
  int64_t axes[ONNX_MAX_RANK], keep, noop;
  int n;
  TRY(pcgc__onnx_axes(c, 1, ONNX_MAX_RANK, axes, &n));
  TRY(pcgc__onnx_attr_int(c, "keepdims", 1, &keep));
  TRY(pcgc__onnx_attr_int(c, "noop_with_empty_axes", 0, &noop));
  if (n <= 0 && noop) return pcgc__onnx_def_const(c, 0, t);
  bool red[ONNX_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) {
    int a;
    if (norm_axis(axes[i], t->rank, &a)) return bad_axis(c, axes[i], t->rank);
    red[a] = true;
  }
  int64_t dims[ONNX_MAX_RANK], idx[ONNX_MAX_RANK] = {0}, cnt = 1;
  int rank = 0;
  for (int d = 0; d < t->rank; d++) {
    if (n <= 0) red[d] = true;
    if (red[d]) cnt *= t->dims[d];
    if (!red[d]) dims[rank++] = t->dims[d];
    else if (keep) dims[rank++] = 1;
  }
  TRY(new_tensor(c, t->type, rank, dims, t->numel, &r));
  bool prod = strcmp(op, "ReduceProd") == 0, mx = strcmp(op, "ReduceMax") == 0, mn = strcmp(op, "ReduceMin") == 0;
  double *acc = pcgc__onnx_alloc(&c->arena, (size_t)(r->numel ? r->numel : 1) * sizeof *acc);
  bool *seen = pcgc__onnx_alloc(&c->arena, (size_t)(r->numel ? r->numel : 1) * sizeof *seen);
  if (!acc || !seen) return pcgc__onnx_nomem(c);
  for (int64_t e = 0; e < t->numel; e++) {
    int64_t o = 0;
    for (int d = 0; d < t->rank; d++)
      if (!red[d]) o = o * t->dims[d] + idx[d];
    double x = pcgc__onnx_get_f(t, e);
    if (!seen[o]) acc[o] = x;
    else if (prod) acc[o] *= x;
    else if (mx) acc[o] = x > acc[o] ? x : acc[o];
    else if (mn) acc[o] = x < acc[o] ? x : acc[o];
    else acc[o] += x;
    seen[o] = true;
    for (int d = t->rank - 1; d >= 0; d--) {
      if (++idx[d] < t->dims[d]) break;
      idx[d] = 0;
    }
  }
  for (int64_t o = 0; o < r->numel; o++) {
    double v = !seen[o] ? (prod ? 1 : 0) : strcmp(op, "ReduceMean") == 0 ? acc[o] / (double)cnt : acc[o];
    set_elem(r, o, v, pcgc__onnx_f2i(v));
  }
  return pcgc__onnx_def_const(c, 0, r);
}

/* ------------------------------------------------------------------ table */

static const struct {
  const char *op;
  fold_fn fn;
} fold_table[] = {
    {"Abs", fold_unary}, {"Add", fold_binary}, {"And", fold_binary}, {"Cast", fold_cast},
    {"Ceil", fold_unary}, {"Concat", fold_concat}, {"ConstantOfShape", fold_constant_of_shape},
    {"Div", fold_binary}, {"Equal", fold_binary}, {"Erf", fold_unary}, {"Exp", fold_unary},
    {"Expand", fold_expand}, {"Flatten", fold_reshape}, {"Floor", fold_unary}, {"Gather", fold_gather},
    {"Greater", fold_binary}, {"GreaterOrEqual", fold_binary}, {"Identity", fold_identity},
    {"Less", fold_binary}, {"LessOrEqual", fold_binary}, {"Log", fold_unary}, {"Max", fold_binary},
    {"Min", fold_binary}, {"Mod", fold_binary}, {"Mul", fold_binary}, {"Neg", fold_unary},
    {"Not", fold_unary}, {"Or", fold_binary}, {"Pow", fold_binary}, {"Range", fold_range},
    {"Reciprocal", fold_unary}, {"ReduceMax", fold_reduce}, {"ReduceMean", fold_reduce},
    {"ReduceMin", fold_reduce}, {"ReduceProd", fold_reduce}, {"ReduceSum", fold_reduce},
    {"Relu", fold_unary}, {"Reshape", fold_reshape}, {"Shape", fold_shape}, {"Sigmoid", fold_unary},
    {"Sign", fold_unary}, {"Size", fold_shape}, {"Slice", fold_slice}, {"Split", fold_split},
    {"Sqrt", fold_unary}, {"Squeeze", fold_reshape}, {"Sub", fold_binary}, {"Tanh", fold_unary},
    {"Transpose", fold_transpose}, {"Unsqueeze", fold_reshape}, {"Where", fold_where},
};

static fold_fn find_fold(const char *op) {
  for (size_t i = 0; i < sizeof fold_table / sizeof fold_table[0]; i++)
    if (strcmp(op, fold_table[i].op) == 0) return fold_table[i].fn;
  return NULL;
}

bool pcgc__onnx_foldable(const char *op_type) { return find_fold(op_type) != NULL; }

pcgc_status pcgc__onnx_fold(onnx_ctx *c) {
  fold_fn fn = find_fold(c->cur->op_type);
  if (!fn) return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "%s cannot be evaluated at import time",
                                  c->cur->op_type);
  /* Min and Max are variadic; fold the common two-input form only */
  if ((fn == fold_binary && c->cur->n_input != 2) || (fn == fold_where && c->cur->n_input != 3))
    return pcgc__onnx_fail(c, PCGC_ERR_UNSUPPORTED, "%s with %zu inputs cannot be evaluated at import time",
                           c->cur->op_type, c->cur->n_input);
  return fn(c);
}
