/*
 * k_check.c — validation of a kernel call, shared by the CPU kernels and
 * the CUDA kernels (k_check.h says what it checks).
 */
#include <string.h>

#include "k_common_impl.h"

/* A buffer's type is well formed and it has data. */
static pcgc_status check_buf(const pcgc__kargs *k, const pcgc_buf *b, const char *what, int i) {
  if (b->rank < 0 || b->rank > PCGC_MAX_RANK)
    return pcgc__kfail(k, "%s %d has rank %d (0..%d allowed)", what, i, b->rank, PCGC_MAX_RANK);
  if ((unsigned)b->dtype >= PCGC_DTYPE_COUNT) return pcgc__kfail(k, "%s %d has an invalid dtype", what, i);
  for (int d = 0; d < b->rank; d++)
    if (b->dims[d] < 1)
      return pcgc__kfail(k, "%s %d has size %lld in dim %d; sizes must be positive", what, i,
                         (long long)b->dims[d], d);
  if (!b->data) return pcgc__kfail(k, "%s %d has no data", what, i);
  return PCGC_OK;
}

/* Buffer b must have type t (dtype and dims). */
static pcgc_status check_type(const pcgc__kargs *k, const pcgc_buf *b, const pcgc_ptensor *t, const char *what,
                              int i) {
  KX_TRY(check_buf(k, b, what, i));
  bool ok = b->dtype == t->dtype && b->rank == t->rank;
  for (int d = 0; ok && d < b->rank; d++) ok = b->dims[d] == t->dims[d];
  if (ok) return PCGC_OK;
  char s1[128], s2[128];
  return pcgc__kfail(k, "%s %d is %s but must be %s", what, i, KX_FMT(s1, b),
                     kx_fmt(s2, sizeof s2, t->dtype, t->rank, t->dims));
}

/* A piece descriptor must place a buffer inside its logical tensor. */
static pcgc_status check_piece(const pcgc__kargs *k, const pcgc_piece *p, const pcgc_buf *b, const char *what,
                               int i) {
  for (int d = 0; d < b->rank; d++)
    if (p->offset[d] < 0 || p->global[d] < 1 || p->offset[d] + b->dims[d] > p->global[d])
      return pcgc__kfail(k, "the piece of %s %d does not fit its logical tensor: dim %d has %lld "
                         "elements at offset %lld of %lld", what, i, d, (long long)b->dims[d],
                         (long long)p->offset[d], (long long)p->global[d]);
  return PCGC_OK;
}

/* A float dtype the backend computes in. */
static bool computes_in(pcgc_dtype t, unsigned flags) {
  return (flags & KX_F32_ONLY) ? t == PCGC_F32 : kx_is_f(t);
}

/* Unsupported dtype: a valid request the backend's kernels cannot do. */
static pcgc_status unsupported(const pcgc__kargs *k, pcgc_dtype dt, unsigned flags) {
  if (flags & KX_F32_ONLY)
    return pcgc__kfail_st(k, PCGC_ERR_UNSUPPORTED, "the CUDA kernels compute in f32, not %s", pcgc_dtype_name(dt));
  return pcgc__kfail_st(k, PCGC_ERR_UNSUPPORTED, "the CPU kernels compute in f32 and f64, not %s",
                        pcgc_dtype_name(dt));
}

pcgc_status pcgc__kinfer_fail(const pcgc__kargs *k, const pcgc_error *e) {
  const char *msg = e->message;
  size_t nl = strlen(pcgc_op_name(k->kind));
  if (strncmp(msg, pcgc_op_name(k->kind), nl) == 0 && msg[nl] == ':') msg += nl + 1;
  while (*msg == ' ') msg++;
  return pcgc__kfail(k, "%s", msg);
}

pcgc_status pcgc__kcheck(const pcgc__kargs *k, bool backward, unsigned flags) {
  if (!k->a) return pcgc__kfail(k, "no attributes given");
  if (k->a->kind != k->kind)
    return pcgc__kfail(k, "the attributes belong to operator '%s'", pcgc_op_name(k->a->kind));
  int lo = pcgc_op_min_inputs(k->kind), hi = pcgc_op_max_inputs(k->kind);
  if (k->n_in < lo || k->n_in > hi || (k->n_in > 0 && !k->in))
    return pcgc__kfail(k, "takes %d to %d inputs, got %d", lo, hi, k->in ? k->n_in : 0);
  int n_out = pcgc_op_num_outputs(k->kind, k->a);
  const pcgc_buf *outs = backward ? k->dout : k->out;
  /* n_out is 1..PCGC_MAX_INTS for every operator; the bound guards tout */
  if (n_out < 0 || n_out > PCGC_MAX_INTS || k->n_out != n_out || !outs)
    return pcgc__kfail(k, "has %d outputs, got %d", n_out, outs ? k->n_out : 0);
  if (backward && (flags & KX_READS_OUT) && !k->out) return pcgc__kfail(k, "backward needs the forward outputs");
  if (backward && !k->din) return pcgc__kfail(k, "no input gradient buffers given");

  pcgc_ptensor tin[PCGC_VARIADIC], tout[PCGC_MAX_INTS];
  for (int i = 0; i < k->n_in; i++) {
    KX_TRY(check_buf(k, &k->in[i], "input", i));
    pcgc_ptensor_init(&tin[i], k->in[i].dtype, k->in[i].rank, k->in[i].dims);
  }
  if (!(flags & KX_NO_INFER)) {
    pcgc_error e;
    pcgc_error_clear(&e);
    if (pcgc_op_infer(k->kind, k->a, k->n_in, tin, tout, &e) != PCGC_OK) return pcgc__kinfer_fail(k, &e);
  }
  for (int i = 0; i < k->n_in; i++)
    if (pcgc_dtype_is_float(k->in[i].dtype) && !computes_in(k->in[i].dtype, flags) &&
        (backward || !(flags & KX_ANY_DTYPE)))
      return unsupported(k, k->in[i].dtype, flags);
  for (int j = 0; j < n_out; j++) {
    if (!(flags & KX_NO_INFER)) {
      KX_TRY(check_type(k, &outs[j], &tout[j], backward ? "output gradient" : "output", j));
      if (backward && (flags & KX_READS_OUT)) KX_TRY(check_type(k, &k->out[j], &tout[j], "output", j));
    } else {
      KX_TRY(check_buf(k, &outs[j], backward ? "output gradient" : "output", j));
    }
    if (k->ctx->out) KX_TRY(check_piece(k, &k->ctx->out[j], &outs[j], "output", j));
  }
  /* in backward every float input is one the backend computes in (checked
   * above), so kx_is_f is "gets a gradient" on both backends */
  for (int i = 0; i < k->n_in; i++) {
    if (k->ctx->in) KX_TRY(check_piece(k, &k->ctx->in[i], &k->in[i], "input", i));
    if (!backward || !k->din[i].data || !kx_is_f(k->in[i].dtype)) continue;
    KX_TRY(check_type(k, &k->din[i], &tin[i], "gradient of input", i));
  }
  return PCGC_OK;
}

/* Reshape: the logical input must reshape to the logical output. */
pcgc_status pcgc__kcheck_reshape(const pcgc__kargs *k, const pcgc_buf *y) {
  const pcgc_buf *x = &k->in[0];
  char s1[128], s2[128];
  if (y->dtype != x->dtype || pcgc_buf_numel(y) != pcgc_buf_numel(x))
    return pcgc__kfail(k, "output %s does not hold the elements of the input %s", KX_FMT(s1, y), KX_FMT(s2, x));
  pcgc_ptensor tin, tout;
  pcgc_ptensor_init(&tin, x->dtype, x->rank, k->ctx->in ? k->ctx->in[0].global : x->dims);
  pcgc_error e;
  pcgc_error_clear(&e);
  if (pcgc_op_infer(k->kind, k->a, 1, &tin, &tout, &e) != PCGC_OK) return pcgc__kinfer_fail(k, &e);
  const int64_t *gy = k->ctx->out ? k->ctx->out[0].global : y->dims;
  bool ok = tout.rank == y->rank;
  for (int d = 0; ok && d < y->rank; d++) ok = gy[d] == tout.dims[d];
  if (!ok)
    return pcgc__kfail(k, "the output is %s but the shape attribute gives %s",
                       kx_fmt(s1, sizeof s1, y->dtype, y->rank, gy),
                       kx_fmt(s2, sizeof s2, tout.dtype, tout.rank, tout.dims));
  return PCGC_OK;
}

/* Batch normalisation on a piece that splits only the channels. */
pcgc_status pcgc__kcheck_whole_batch(const pcgc__kargs *k, const char *api) {
  if (!k->ctx->in) return PCGC_OK;
  const pcgc_buf *x = &k->in[0];
  const pcgc_piece *p = &k->ctx->in[0];
  for (int d = 0; d < x->rank; d++)
    if (d != 1 && x->dims[d] != p->global[d])
      return pcgc__kfail(k, "dim %d of the input is split (this piece holds %lld of %lld), so the batch "
                         "statistics span several pieces: use %s_batchnorm_stats/apply", d,
                         (long long)x->dims[d], (long long)p->global[d], api);
  return PCGC_OK;
}
