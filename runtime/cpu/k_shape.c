/*
 * k_shape.c — CPU kernels of data movement: concat, split, reshape,
 * transpose, flatten.
 *
 * Forward only moves elements, so it works for every dtype (indices, f16);
 * backward adds the moved gradient back (f32 and f64). Concat and split view
 * a tensor as [outer, axis, inner] and move contiguous runs of axis*inner
 * elements; reshape and flatten are copies of the row-major buffer; transpose
 * walks the output with the input's strides permuted.
 */
#include "k_common_impl.h"

/* Resolves a possibly negative axis (inference has checked the range). */
static int axis_of(const pcgc__kargs *k, int rank) {
  int64_t a = pcgc_attrs_int(k->a, "axis");
  return (int)(a < 0 ? a + rank : a);
}

static void add_f32(int64_t n, const float *restrict s, float *restrict d) { KX_FOR(i, n, d[i] += s[i]); }
static void add_f64(int64_t n, const double *restrict s, double *restrict d) { KX_FOR(i, n, d[i] += s[i]); }

/* dst[i] += src[i] for n elements of float buffers (of one dtype) at
 * element offsets; the runs of concat, split, reshape and flatten never
 * overlap (else: one element at a time). */
static void add_run(pcgc_buf *dst, int64_t di, const pcgc_buf *src, int64_t si, int64_t n) {
  if (!kx_disjoint(dst, src)) {
    for (int64_t e = 0; e < n; e++) kx_add(dst, di + e, kx_get(src, si + e));
    return;
  }
  if (dst->dtype == PCGC_F32) add_f32(n, (const float *)src->data + si, (float *)dst->data + di);
  else add_f64(n, (const double *)src->data + si, (double *)dst->data + di);
}

static void copy_run(pcgc_buf *dst, int64_t di, const pcgc_buf *src, int64_t si, int64_t n) {
  size_t es = pcgc_dtype_size(src->dtype);
  memcpy((char *)dst->data + (size_t)di * es, (const char *)src->data + (size_t)si * es, (size_t)n * es);
}

/* ------------------------------------------------------ concat and split */

/* The gathered tensor `whole` is [outer, N, inner] and part p is
 * [outer, n_p, inner] at offset pos_p along the axis. to_whole: concat. */
static void gather(pcgc_buf *whole, int n_parts, pcgc_buf *parts, int axis, bool to_whole, bool add) {
  int64_t outer = kx_prod(whole->dims, 0, axis), inner = kx_prod(whole->dims, axis + 1, whole->rank);
  int64_t N = whole->dims[axis];
  for (int64_t o = 0; o < outer; o++) {
    int64_t pos = 0;
    for (int p = 0; p < n_parts; p++) {
      int64_t np = parts[p].dims[axis], run = np * inner;
      int64_t wi = (o * N + pos) * inner, pi = o * run;
      pos += np;
      if (!parts[p].data) continue;
      if (to_whole) add ? add_run(whole, wi, &parts[p], pi, run) : copy_run(whole, wi, &parts[p], pi, run);
      else add ? add_run(&parts[p], pi, whole, wi, run) : copy_run(&parts[p], pi, whole, wi, run);
    }
  }
}

pcgc_status pcgc__cpu_fwd_concat(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, KX_ANY_DTYPE));
  /* gather() writes only the whole tensor here; the parts are read */
  gather(&k->out[0], k->n_in, (pcgc_buf *)k->in, axis_of(k, k->out[0].rank), true, false);
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_concat(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, 0));
  pcgc_buf parts[PCGC_VARIADIC];
  for (int i = 0; i < k->n_in; i++) {
    parts[i] = k->in[i];
    parts[i].data = kx_want(&k->din[i]) ? k->din[i].data : NULL;
  }
  gather((pcgc_buf *)&k->dout[0], k->n_in, parts, axis_of(k, k->dout[0].rank), false, true);
  return PCGC_OK;
}

pcgc_status pcgc__cpu_fwd_split(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, KX_ANY_DTYPE));
  gather((pcgc_buf *)&k->in[0], k->n_out, k->out, axis_of(k, k->in[0].rank), false, false);
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_split(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, 0));
  if (!kx_want(&k->din[0])) return PCGC_OK;
  gather(&k->din[0], k->n_out, (pcgc_buf *)k->dout, axis_of(k, k->in[0].rank), true, true);
  return PCGC_OK;
}

/* ---------------------------------------------------- reshape, flatten */

pcgc_status pcgc__cpu_fwd_reshape(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, KX_ANY_DTYPE | KX_NO_INFER));
  KX_TRY(pcgc__kcheck_reshape(k, &k->out[0]));
  memmove(k->out[0].data, k->in[0].data, (size_t)pcgc_buf_numel(&k->in[0]) * pcgc_dtype_size(k->in[0].dtype));
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_reshape(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, KX_NO_INFER));
  KX_TRY(pcgc__kcheck_reshape(k, &k->dout[0]));
  if (kx_want(&k->din[0])) add_run(&k->din[0], 0, &k->dout[0], 0, pcgc_buf_numel(&k->in[0]));
  return PCGC_OK;
}

pcgc_status pcgc__cpu_fwd_flatten(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, KX_ANY_DTYPE));
  memmove(k->out[0].data, k->in[0].data, (size_t)pcgc_buf_numel(&k->in[0]) * pcgc_dtype_size(k->in[0].dtype));
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_flatten(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, 0));
  if (kx_want(&k->din[0])) add_run(&k->din[0], 0, &k->dout[0], 0, pcgc_buf_numel(&k->in[0]));
  return PCGC_OK;
}

/* ------------------------------------------------------------ transpose */

/* A loop over the output y whose first offset walks y and second the
 * input x (out dim i is input dim perm[i]). */
static kx_iter transpose_iter(const pcgc__kargs *k, const pcgc_buf *x, const pcgc_buf *y) {
  pcgc_ints perm = pcgc_attrs_ints(k->a, "perm");
  int64_t xs[PCGC_MAX_RANK];
  kx_strides(x->rank, x->dims, xs);
  kx_iter it;
  memset(&it, 0, sizeof it);
  it.rank = y->rank;
  memcpy(it.dims, y->dims, sizeof it.dims);
  kx_strides(y->rank, y->dims, it.st[0]);
  for (int i = 0; i < y->rank; i++) {
    int64_t p = perm.v[i] < 0 ? perm.v[i] + x->rank : perm.v[i];
    it.st[1][i] = xs[p];
  }
  return it;
}

pcgc_status pcgc__cpu_fwd_transpose(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, false, KX_ANY_DTYPE));
  const pcgc_buf *x = &k->in[0];
  pcgc_buf *y = &k->out[0];
  kx_iter it = transpose_iter(k, x, y);
  int64_t n = pcgc_buf_numel(y);
  size_t es = pcgc_dtype_size(x->dtype);
  const char *src = x->data;
  char *dst = y->data;
  for (int64_t i = 0; i < n; i++, kx_iter_next(&it))
    memcpy(dst + (size_t)i * es, src + (size_t)it.off[1] * es, es);
  return PCGC_OK;
}

pcgc_status pcgc__cpu_bwd_transpose(const pcgc__kargs *k) {
  KX_TRY(pcgc__kcheck(k, true, 0));
  pcgc_buf *dx = &k->din[0];
  if (!kx_want(dx)) return PCGC_OK;
  const pcgc_buf *dy = &k->dout[0];
  kx_iter it = transpose_iter(k, &k->in[0], dy);
  int64_t n = pcgc_buf_numel(dy);
  for (int64_t i = 0; i < n; i++, kx_iter_next(&it)) kx_add(dx, it.off[1], kx_get(dy, i));
  return PCGC_OK;
}
