/*
 * infer.c — shape and parallel-type inference for every operator.
 *
 * One function per op family computes, from the input types, the output
 * dims *and* degrees: a sequential graph is just the case where every degree
 * is 1. The rules follow DESIGN.md's parallel-type algebra:
 *
 *  - A tensor occupies pieces = prod(shard degrees) * sum * replica. An op
 *    runs as P pieces (one per device); every input must arrive as exactly P
 *    pieces, so an input that a piece does not split (a weight under a
 *    sample-sharded input, say) must carry the matching replica degree. The
 *    error messages say which replicate() is missing.
 *  - Sharding a contraction dim (linear's K, conv's input channels, a reduced
 *    dim, an embedding's rows) yields partial sums (sum degree).
 *  - Partial sums pass only through linear maps; a nonlinearity (activation,
 *    softmax, normalisation, bias addition) of partial sums is illegal.
 *  - Dims an op normalises or mixes (softmax axis, layernorm dims, conv
 *    kernel windows that straddle a cut) may not be sharded.
 *
 * Pipelining is handled once for all ops (infer_pipelined): the op is
 * inferred twice, once ignoring micro-batches and once with the micro-batch
 * split folded into the pipelined dim as if it were a shard (weights count as
 * replicated in time). The output dim whose degree grew is the output's
 * pipelined dim; if the fold is illegal, pipelining through the op is.
 */
#include <stdarg.h>
#include <string.h>

#include "internal.h"

typedef struct ictx {
  pcgc_op_kind kind;
  const pcgc_attrs *a;
  int n_in;
  const pcgc_ptensor *in;
  pcgc_ptensor *out;
  int n_out;
  pcgc_error *err;
  const pcgc_ptensor *unfolded; /* while inferring with micro-batches folded into shards: the real inputs */
} ictx;

static pcgc_status fail(ictx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static pcgc_status fail(ictx *c, const char *fmt, ...) {
  if (!c->err) return PCGC_ERR_TYPE;
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return pcgc_error_set(c->err, PCGC_ERR_TYPE, "%s", msg);
}

static void hint(ictx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hint(ictx *c, const char *fmt, ...) {
  if (!c->err) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err->hint, sizeof c->err->hint, fmt, ap);
  va_end(ap);
}

/* Names of input slots, for messages. */
static const char *slot_name(pcgc_op_kind k, int i) {
  static const char *const lin[] = {"input", "weight", "bias"};
  static const char *const norm[] = {"input", "scale", "bias"};
  static const char *const emb[] = {"indices", "table"};
  static const char *const att[] = {"q", "k", "v", "wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo"};
  static const char *const two[] = {"a", "b"};
  static const char *const loss[] = {"prediction", "target"};
  static const char *const xl[] = {"input", "weight", "bias"};
  static const char *const disp[] = {"x", "slot"};
  static const char *const comb[] = {"y", "gate", "slot"};
  static _Thread_local char buf[PCGC_VARIADIC][12];
  switch (k) {
  case PCGC_OP_LINEAR:
  case PCGC_OP_CONV2D: return i < 3 ? lin[i] : "?";
  case PCGC_OP_BATCHNORM:
  case PCGC_OP_LAYERNORM:
  case PCGC_OP_RMSNORM: return i < 3 ? norm[i] : "?";
  case PCGC_OP_EMBEDDING: return i < 2 ? emb[i] : "?";
  case PCGC_OP_ATTENTION: return i < 11 ? att[i] : "?";
  case PCGC_OP_MATMUL:
  case PCGC_OP_BATCH_MATMUL:
  case PCGC_OP_ADD:
  case PCGC_OP_SUB:
  case PCGC_OP_MUL:
  case PCGC_OP_DIV: return i < 2 ? two[i] : "?";
  case PCGC_OP_SOFTMAX_CROSS_ENTROPY: return i == 0 ? "logits" : "labels";
  case PCGC_OP_MSE: return i < 2 ? loss[i] : "?";
  case PCGC_OP_MOE_ROUTE: return i == 0 ? "logits" : "?";
  case PCGC_OP_MOE_DISPATCH: return i < 2 ? disp[i] : "?";
  case PCGC_OP_EXPERT_LINEAR: return i < 3 ? xl[i] : "?";
  case PCGC_OP_MOE_COMBINE: return i < 3 ? comb[i] : "?";
  default:
    if (pcgc_op_max_inputs(k) == 1) return "input";
    if (i < 0 || i >= PCGC_VARIADIC) return "?";
    /* not thread-safe only in the text of a message for variadic ops */
    snprintf(buf[i], sizeof buf[i], "input %d", i);
    return buf[i];
  }
}

static const char *fmt_type(char *buf, size_t n, const pcgc_ptensor *t) {
  pcgc_ptensor_format(buf, n, t);
  return buf;
}

/* Sets out[i] to a sequential tensor of the given shape. */
static void out_init(ictx *c, int i, pcgc_dtype dt, int rank, const int64_t *dims) {
  pcgc_ptensor_init(&c->out[i], dt, rank, dims);
}

static int64_t prod_deg(const pcgc_ptensor *t, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) p *= t->degree[i];
  return p;
}

static pcgc_status need_rank(ictx *c, int i, int lo, int hi) {
  int r = c->in[i].rank;
  if (r >= lo && r <= hi) return PCGC_OK;
  char t[128];
  if (lo == hi)
    return fail(c, "%s must have rank %d, got %s", slot_name(c->kind, i), lo,
                fmt_type(t, sizeof t, &c->in[i]));
  return fail(c, "%s must have rank %d to %d, got %s", slot_name(c->kind, i), lo, hi,
              fmt_type(t, sizeof t, &c->in[i]));
}

static pcgc_status need_float(ictx *c, int i) {
  if (pcgc_dtype_is_float(c->in[i].dtype)) return PCGC_OK;
  return fail(c, "%s must be a floating-point tensor, got %s", slot_name(c->kind, i),
              pcgc_dtype_name(c->in[i].dtype));
}

static pcgc_status need_same_dtype(ictx *c, int i, int j) {
  if (c->in[i].dtype == c->in[j].dtype) return PCGC_OK;
  return fail(c, "%s is %s but %s is %s", slot_name(c->kind, i), pcgc_dtype_name(c->in[i].dtype),
              slot_name(c->kind, j), pcgc_dtype_name(c->in[j].dtype));
}

static pcgc_status need_dim(ictx *c, int i, int d, int64_t want, const char *what) {
  if (c->in[i].dims[d] == want) return PCGC_OK;
  char t[128];
  return fail(c, "%s %s is %lld but must be %lld (%s is %s)", slot_name(c->kind, i), what,
              (long long)c->in[i].dims[d], (long long)want, slot_name(c->kind, i),
              fmt_type(t, sizeof t, &c->in[i]));
}

/* Input i may not be a partial sum. */
static pcgc_status no_sum(ictx *c, int i, const char *why) {
  if (c->in[i].sum == 1) return PCGC_OK;
  pcgc_status s = fail(c, "%s is a partial sum (sum degree %d), but %s", slot_name(c->kind, i),
                       c->in[i].sum, why);
  hint(c, "insert reduce(degree=%d) before this operator", c->in[i].sum);
  return s;
}

/* Input i's dim d may not be sharded. */
static pcgc_status unsharded(ictx *c, int i, int d, const char *why) {
  if (c->in[i].degree[d] == 1) return PCGC_OK;
  pcgc_status s = fail(c, "%s dim %d is sharded %d ways, but %s", slot_name(c->kind, i), d,
                       c->in[i].degree[d], why);
  hint(c, "insert combine(dim=%d, degree=%d) before this operator", d, c->in[i].degree[d]);
  return s;
}

/* Input i must have replica degree `want` so that it arrives as one piece
 * per device of the op. */
static pcgc_status need_replica(ictx *c, int i, int64_t want) {
  int64_t have = c->in[i].replica;
  if (have == want) return PCGC_OK;
  pcgc_status s = fail(c, "%s has replica degree %lld, but this sharding needs %lld "
                       "(one copy for each piece of the other inputs it is combined with)",
                       slot_name(c->kind, i), (long long)have, (long long)want);
  if (want > have && want % have == 0)
    hint(c, "insert replicate(degree=%lld) on the %s", (long long)(want / have), slot_name(c->kind, i));
  else if (have > want && have % want == 0)
    hint(c, "the %s is replicated %lld times more than its consumers are split: reduce the "
         "replication or shard the other inputs further", slot_name(c->kind, i),
         (long long)(have / want));
  return s;
}

/* Output replica degree R = have / split, which must divide. */
static pcgc_status out_replica(ictx *c, int i, int64_t split, int64_t *r) {
  int64_t have = c->in[i].replica;
  if (split > 0 && have % split == 0) {
    *r = have / split;
    return PCGC_OK;
  }
  pcgc_status s = fail(c, "%s has replica degree %lld, but the other inputs split the output "
                       "%lld ways, which needs a multiple of %lld copies",
                       slot_name(c->kind, i), (long long)have, (long long)split, (long long)split);
  hint(c, "insert replicate(degree=%lld) on the %s", (long long)split, slot_name(c->kind, i));
  return s;
}

static pcgc_status norm_axis(ictx *c, int64_t axis, int rank, const char *what, int *out) {
  *out = 0;
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    pcgc_status s = fail(c, "%s %lld is out of range for a rank-%d tensor", what, (long long)axis, rank);
    if (rank == 0)
      hint(c, "a rank-0 tensor has no dims to name");
    else
      hint(c, "use 0..%d, or -1..-%d to count from the end", rank - 1, rank);
    return s;
  }
  *out = (int)a;
  return PCGC_OK;
}

#define TRY(x) do { pcgc_status s_ = (x); if (s_ != PCGC_OK) return s_; } while (0)

/* --------------------------------------------------------------- sources */

static pcgc_status infer_source(ictx *c) {
  pcgc_ints shape = pcgc_attrs_ints(c->a, "shape");
  int64_t dt = pcgc_attrs_int(c->a, "dtype");
  if (shape.n > PCGC_MAX_RANK)
    return fail(c, "rank %d is more than the maximum %d", shape.n, PCGC_MAX_RANK);
  int64_t numel = 1;
  for (int i = 0; i < shape.n; i++) {
    if (shape.v[i] <= 0)
      return fail(c, "dim %d has size %lld; sizes must be positive", i, (long long)shape.v[i]);
    if (numel > INT64_MAX / shape.v[i])
      return fail(c, "the shape has more than 2^63 elements");
    numel *= shape.v[i];
  }
  if (c->kind == PCGC_OP_WEIGHT && !pcgc_dtype_is_float((pcgc_dtype)dt))
    return fail(c, "a weight must be floating point, got %s", pcgc_dtype_name((pcgc_dtype)dt));
  if (c->kind == PCGC_OP_WEIGHT && pcgc_attrs_float(c->a, "scale") < 0)
    return fail(c, "init scale must not be negative");
  out_init(c, 0, (pcgc_dtype)dt, shape.n, shape.v);
  return PCGC_OK;
}

/* ------------------------------------------------------ linear, matmul */

/* A product's epilogue (activation, bias) cannot act on partial sums. */
static pcgc_status epilogue_whole(ictx *c, int32_t sum, int act, bool bias) {
  if (sum > 1 && act != PCGC_ACT_NONE) {
    pcgc_status s = fail(c, "the output is a partial sum (sum degree %d) and %s of a partial sum "
                         "is not the partial sum of %s", sum,
                         pcgc_enum_value_name(PCGC_ENUM_ACT, act), pcgc_enum_value_name(PCGC_ENUM_ACT, act));
    hint(c, "use act=none here and apply the activation after reduce()");
    return s;
  }
  if (bias && sum > 1) {
    pcgc_status s = fail(c, "the output is a partial sum (sum degree %d), so the bias would be "
                         "added %d times", sum, sum);
    hint(c, "drop the bias here and add it after reduce()");
    return s;
  }
  return bias ? no_sum(c, 2, "a bias must be whole") : PCGC_OK;
}

/* x[..., K] times w[K, N] (+ b[N]), optionally an activation. */
static pcgc_status infer_dense(ictx *c, bool has_act) {
  const pcgc_ptensor *x = &c->in[0], *w = &c->in[1];
  TRY(need_rank(c, 0, 1, PCGC_MAX_RANK));
  TRY(need_rank(c, 1, 2, 2));
  TRY(need_float(c, 0));
  TRY(need_same_dtype(c, 0, 1));
  int r = x->rank;
  if (w->dims[0] != x->dims[r - 1]) {
    char t1[128], t2[128];
    pcgc_status s = fail(c, "input has %lld features (last dim of %s) but the weight expects %lld "
                         "(first dim of %s)", (long long)x->dims[r - 1], fmt_type(t1, sizeof t1, x),
                         (long long)w->dims[0], fmt_type(t2, sizeof t2, w));
    hint(c, "the weight must be [%lld, N]", (long long)x->dims[r - 1]);
    return s;
  }
  bool bias = c->n_in == 3;
  if (bias) {
    TRY(need_rank(c, 2, 1, 1));
    TRY(need_same_dtype(c, 0, 2));
    TRY(need_dim(c, 2, 0, w->dims[1], "size"));
  }
  int act = has_act ? (int)pcgc_attrs_int(c->a, "act") : PCGC_ACT_NONE;
  int64_t dims[PCGC_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  dims[r - 1] = w->dims[1];
  out_init(c, 0, x->dtype, r, dims);

  /* parallel type */
  TRY(no_sum(c, 1, "a weight must be whole"));
  if (w->degree[0] != x->degree[r - 1]) {
    pcgc_status s = fail(c, "the contraction dim is split %d ways in the input but %d ways in the weight",
                         x->degree[r - 1], w->degree[0]);
    hint(c, "partition the input's last dim and the weight's dim 0 by the same degree");
    return s;
  }
  int64_t k = w->degree[0], n = w->degree[1], b = prod_deg(x, 0, r - 1);
  pcgc_ptensor *o = &c->out[0];
  for (int i = 0; i < r - 1; i++) o->degree[i] = x->degree[i];
  o->degree[r - 1] = (int32_t)n;
  o->sum = (int32_t)(k * x->sum);
  int64_t R;
  TRY(out_replica(c, 0, n, &R));
  o->replica = (int32_t)R;
  TRY(need_replica(c, 1, b * x->sum * R));
  TRY(epilogue_whole(c, o->sum, act, bias));
  if (bias) {
    if (c->in[2].degree[0] != n)
      return fail(c, "the bias is split %d ways but the output features %lld ways",
                  c->in[2].degree[0], (long long)n);
    TRY(need_replica(c, 2, b * R));
  }
  return PCGC_OK;
}

static pcgc_status infer_linear(ictx *c) { return infer_dense(c, true); }
static pcgc_status infer_matmul(ictx *c) { return infer_dense(c, false); }

/* a[..., M, K] x b[..., K, N] with equal leading dims; transpose_b: b[..., N, K]. */
static pcgc_status infer_bmm(ictx *c) {
  const pcgc_ptensor *a = &c->in[0], *b = &c->in[1];
  TRY(need_rank(c, 0, 2, PCGC_MAX_RANK));
  TRY(need_rank(c, 1, a->rank, a->rank));
  TRY(need_float(c, 0));
  TRY(need_same_dtype(c, 0, 1));
  int r = a->rank;
  bool tb = pcgc_attrs_int(c->a, "transpose_b") != 0;
  int bk = tb ? r - 1 : r - 2, bn = tb ? r - 2 : r - 1;
  for (int i = 0; i < r - 2; i++)
    if (a->dims[i] != b->dims[i])
      return fail(c, "batch dim %d differs: %lld in a, %lld in b", i, (long long)a->dims[i],
                  (long long)b->dims[i]);
  if (a->dims[r - 1] != b->dims[bk]) {
    pcgc_status s = fail(c, "a has %lld columns but b has %lld %s", (long long)a->dims[r - 1],
                         (long long)b->dims[bk], tb ? "columns (transpose_b=true)" : "rows");
    hint(c, "batch_matmul multiplies [..., M, K] by [..., K, N]%s", tb ? " (b given as [..., N, K])" : "");
    return s;
  }
  int64_t dims[PCGC_MAX_RANK];
  memcpy(dims, a->dims, sizeof dims);
  dims[r - 1] = b->dims[bn];
  out_init(c, 0, a->dtype, r, dims);

  for (int i = 0; i < r - 2; i++)
    if (a->degree[i] != b->degree[i])
      return fail(c, "batch dim %d is split %d ways in a but %d ways in b", i, a->degree[i], b->degree[i]);
  if (a->degree[r - 1] != b->degree[bk])
    return fail(c, "the contraction dim is split %d ways in a but %d ways in b", a->degree[r - 1],
                b->degree[bk]);
  if (a->sum > 1 && b->sum > 1)
    return fail(c, "both a and b are partial sums; a product of two partial sums is not a partial "
                "sum of products");
  int64_t batch = prod_deg(a, 0, r - 2), m = a->degree[r - 2], k = a->degree[r - 1], n = b->degree[bn];
  pcgc_ptensor *o = &c->out[0];
  for (int i = 0; i < r - 2; i++) o->degree[i] = a->degree[i];
  o->degree[r - 2] = (int32_t)m;
  o->degree[r - 1] = (int32_t)n;
  o->sum = (int32_t)(k * a->sum * b->sum);
  int64_t R;
  TRY(out_replica(c, 0, n * b->sum, &R));
  o->replica = (int32_t)R;
  (void)batch;
  TRY(need_replica(c, 1, m * a->sum * R));
  return PCGC_OK;
}

/* ----------------------------------------------------------- convolution */

/* Window attributes above this are refused, so that window arithmetic on
 * dims below 2^62 cannot overflow. */
#define ATTR_MAX ((int64_t)1 << 31)

/* Output size of a window; 0 (refused by the callers) when the window is
 * larger than the padded input, whatever the stride: C's division would
 * round that negative numerator toward zero and give 1. */
static int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  int64_t num = in + 2 * p - d * (k - 1) - 1;
  return num < 0 ? 0 : num / s + 1;
}

/* Spatial dim `d` (2 or 3) of x sharded `deg` ways is exact only when
 * windows never straddle a cut: kernel 1 (or kernel == stride), no padding,
 * and each piece holds whole strides. */
static pcgc_status spatial_ok(ictx *c, int d, int64_t k, int64_t s, int64_t p, int64_t dil) {
  const pcgc_ptensor *x = &c->in[0];
  int deg = x->degree[d];
  if (deg == 1) return PCGC_OK;
  int64_t piece = x->dims[d] / deg;
  int64_t span = dil * (k - 1) + 1;
  if (p == 0 && span <= s && piece % s == 0) return PCGC_OK;
  pcgc_status st = fail(c, "spatial dim %d is split %d ways, but a %lldx window (stride %lld, "
                        "padding %lld) straddles the cuts", d, deg, (long long)k, (long long)s, (long long)p);
  hint(c, "spatial sharding needs halo exchange, which pcgc does not do yet: shard the batch or "
       "channel dims instead, or combine(dim=%d) first", d);
  return st;
}

static pcgc_status infer_conv2d(ictx *c) {
  const pcgc_ptensor *x = &c->in[0], *w = &c->in[1];
  TRY(need_rank(c, 0, 4, 4));
  TRY(need_rank(c, 1, 4, 4));
  TRY(need_float(c, 0));
  TRY(need_same_dtype(c, 0, 1));
  pcgc_ints st = pcgc_attrs_ints(c->a, "stride"), pad = pcgc_attrs_ints(c->a, "padding"),
            dil = pcgc_attrs_ints(c->a, "dilation");
  int64_t g = pcgc_attrs_int(c->a, "groups");
  int act = (int)pcgc_attrs_int(c->a, "act");
  for (int i = 0; i < 2; i++) {
    if (st.v[i] > ATTR_MAX || pad.v[i] > ATTR_MAX || dil.v[i] > ATTR_MAX || w->dims[2 + i] > ATTR_MAX)
      return fail(c, "stride, padding, dilation and kernel size must be at most %lld", (long long)ATTR_MAX);
    if (st.v[i] < 1) return fail(c, "stride must be at least 1, got %lld", (long long)st.v[i]);
    if (dil.v[i] < 1) return fail(c, "dilation must be at least 1, got %lld", (long long)dil.v[i]);
    if (pad.v[i] < 0) return fail(c, "padding must not be negative, got %lld", (long long)pad.v[i]);
  }
  if (g < 1) return fail(c, "groups must be at least 1, got %lld", (long long)g);
  int64_t C = x->dims[1], O = w->dims[0];
  if (C % g || O % g)
    return fail(c, "groups=%lld must divide the input channels (%lld) and output channels (%lld)",
                (long long)g, (long long)C, (long long)O);
  if (w->dims[1] != C / g) {
    pcgc_status s = fail(c, "the weight has %lld input channels per group but the input has %lld "
                         "channels in %lld groups (%lld per group)", (long long)w->dims[1],
                         (long long)C, (long long)g, (long long)(C / g));
    hint(c, "the weight must be [O, %lld, kh, kw]", (long long)(C / g));
    return s;
  }
  int64_t dims[4] = {x->dims[0], O, 0, 0};
  for (int i = 0; i < 2; i++) {
    dims[2 + i] = conv_out(x->dims[2 + i], w->dims[2 + i], st.v[i], pad.v[i], dil.v[i]);
    if (dims[2 + i] < 1)
      return fail(c, "the %lldx%lld kernel does not fit the %lldx%lld input (with padding %lld, "
                  "dilation %lld)", (long long)w->dims[2], (long long)w->dims[3],
                  (long long)x->dims[2], (long long)x->dims[3], (long long)pad.v[i], (long long)dil.v[i]);
  }
  bool bias = c->n_in == 3;
  if (bias) {
    TRY(need_rank(c, 2, 1, 1));
    TRY(need_same_dtype(c, 0, 2));
    TRY(need_dim(c, 2, 0, O, "size"));
  }
  out_init(c, 0, x->dtype, 4, dims);

  TRY(no_sum(c, 1, "a weight must be whole"));
  TRY(unsharded(c, 1, 2, "kernel dims cannot be sharded"));
  TRY(unsharded(c, 1, 3, "kernel dims cannot be sharded"));
  for (int i = 0; i < 2; i++)
    TRY(spatial_ok(c, 2 + i, w->dims[2 + i], st.v[i], pad.v[i], dil.v[i]));
  int64_t n = x->degree[0], cdeg = x->degree[1], h = x->degree[2], wd = x->degree[3];
  int64_t oc = w->degree[0], sum, R;
  pcgc_ptensor *o = &c->out[0];
  if (g == 1) {
    if (w->degree[1] != cdeg)
      return fail(c, "input channels are split %lld ways in the input but %d ways in the weight",
                  (long long)cdeg, w->degree[1]);
    sum = cdeg * x->sum;
    TRY(out_replica(c, 0, oc, &R));
  } else {
    if (w->degree[1] != 1)
      return fail(c, "with groups=%lld the weight's dim 1 (channels per group) cannot be sharded",
                  (long long)g);
    if (cdeg > 1 && cdeg != oc) {
      pcgc_status s = fail(c, "grouped convolution: input channels split %lld ways must match output "
                           "channels split %lld ways", (long long)cdeg, (long long)oc);
      hint(c, "shard the weight's dim 0 by %lld", (long long)cdeg);
      return s;
    }
    if (g % oc)
      return fail(c, "grouped convolution: %lld groups cannot be split %lld ways", (long long)g,
                  (long long)oc);
    sum = x->sum;
    TRY(out_replica(c, 0, oc / cdeg, &R));
  }
  o->degree[0] = (int32_t)n;
  o->degree[1] = (int32_t)oc;
  o->degree[2] = (int32_t)h;
  o->degree[3] = (int32_t)wd;
  o->sum = (int32_t)sum;
  o->replica = (int32_t)R;
  TRY(need_replica(c, 1, n * h * wd * x->sum * R));
  if (sum > 1 && act != PCGC_ACT_NONE) {
    pcgc_status s = fail(c, "the output is a partial sum (sum degree %lld) and an activation of a "
                         "partial sum is not a partial sum", (long long)sum);
    hint(c, "use act=none here and apply the activation after reduce()");
    return s;
  }
  if (bias) {
    if (sum > 1) {
      pcgc_status s = fail(c, "the output is a partial sum (sum degree %lld), so the bias would be "
                           "added %lld times", (long long)sum, (long long)sum);
      hint(c, "drop the bias here and add it after reduce()");
      return s;
    }
    TRY(no_sum(c, 2, "a bias must be whole"));
    if (c->in[2].degree[0] != oc)
      return fail(c, "the bias is split %d ways but the output channels %lld ways", c->in[2].degree[0],
                  (long long)oc);
    TRY(need_replica(c, 2, n * h * wd * R));
  }
  return PCGC_OK;
}

static pcgc_status infer_pool2d(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  TRY(need_rank(c, 0, 4, 4));
  TRY(need_float(c, 0));
  bool global = pcgc_attrs_int(c->a, "global") != 0;
  bool is_max = pcgc_attrs_int(c->a, "kind") == PCGC_POOL_MAX;
  pcgc_ints k = pcgc_attrs_ints(c->a, "kernel"), st = pcgc_attrs_ints(c->a, "stride"),
            pad = pcgc_attrs_ints(c->a, "padding");
  int64_t dims[4] = {x->dims[0], x->dims[1], 1, 1};
  if (!global) {
    for (int i = 0; i < 2; i++) {
      if (k.v[i] > ATTR_MAX || st.v[i] > ATTR_MAX || pad.v[i] > ATTR_MAX)
        return fail(c, "kernel, stride and padding must be at most %lld", (long long)ATTR_MAX);
      if (k.v[i] < 1 || st.v[i] < 1 || pad.v[i] < 0)
        return fail(c, "kernel and stride must be at least 1 and padding not negative");
      if (pad.v[i] * 2 > k.v[i])
        return fail(c, "padding %lld is more than half the kernel %lld", (long long)pad.v[i],
                    (long long)k.v[i]);
      dims[2 + i] = conv_out(x->dims[2 + i], k.v[i], st.v[i], pad.v[i], 1);
      if (dims[2 + i] < 1)
        return fail(c, "the %lldx%lld window does not fit the %lldx%lld input", (long long)k.v[0],
                    (long long)k.v[1], (long long)x->dims[2], (long long)x->dims[3]);
    }
  }
  out_init(c, 0, x->dtype, 4, dims);
  pcgc_ptensor *o = &c->out[0];
  if (is_max) TRY(no_sum(c, 0, "max of partial sums is not a partial sum"));
  o->degree[0] = x->degree[0];
  o->degree[1] = x->degree[1];
  o->sum = x->sum;
  o->replica = x->replica;
  if (global) {
    /* an average over a spatial piece, divided by the whole area, is a partial sum */
    int64_t sp = (int64_t)x->degree[2] * x->degree[3];
    if (sp > 1 && is_max) {
      pcgc_status s = fail(c, "global max pooling over a spatially sharded input needs a max-reduction");
      hint(c, "combine the spatial dims first");
      return s;
    }
    o->sum = (int32_t)(x->sum * sp);
  } else {
    for (int i = 0; i < 2; i++) TRY(spatial_ok(c, 2 + i, k.v[i], st.v[i], pad.v[i], 1));
    o->degree[2] = x->degree[2];
    o->degree[3] = x->degree[3];
  }
  return PCGC_OK;
}

/* --------------------------------------------------------- normalisation */

static pcgc_status infer_batchnorm(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  TRY(need_rank(c, 0, 2, PCGC_MAX_RANK));
  TRY(need_float(c, 0));
  if (c->n_in == 2) return fail(c, "batchnorm takes an input and optionally both scale and bias, not one of them");
  if (pcgc_attrs_float(c->a, "eps") <= 0) return fail(c, "eps must be positive");
  double mom = pcgc_attrs_float(c->a, "momentum");
  if (mom < 0 || mom > 1) return fail(c, "momentum must be in [0, 1], got %g", mom);
  int act = (int)pcgc_attrs_int(c->a, "act");
  if (act != PCGC_ACT_NONE && act != PCGC_ACT_RELU) {
    pcgc_status s = fail(c, "act=%s is not fused into a batchnorm", pcgc_enum_value_name(PCGC_ENUM_ACT, act));
    hint(c, "write act=relu or act=none, and the activation as an op of its own");
    return s;
  }
  for (int i = 1; i < c->n_in; i++) {
    TRY(need_rank(c, i, 1, 1));
    TRY(need_same_dtype(c, 0, i));
    TRY(need_dim(c, i, 0, x->dims[1], "size (the channel count)"));
  }
  if (c->unfolded && c->unfolded[0].micro > 1 && c->unfolded[0].micro_dim != 1)
    return fail(c, "batch statistics span all micro-batches, which run one after another");
  c->out[0] = *x;
  /* Sharding any dim is legal: batch statistics are synchronised across
   * pieces (synchronised batch norm), so results equal the sequential op. */
  TRY(no_sum(c, 0, "normalisation of a partial sum is not a partial sum"));
  int64_t rest = pcgc_ptensor_pieces(x) / x->degree[1];
  for (int i = 1; i < c->n_in; i++) {
    TRY(no_sum(c, i, "a weight must be whole"));
    if (c->in[i].degree[0] != x->degree[1])
      return fail(c, "%s is split %d ways but the channels %d ways", slot_name(c->kind, i),
                  c->in[i].degree[0], x->degree[1]);
    TRY(need_replica(c, i, rest));
  }
  return PCGC_OK;
}

/* layernorm's and rmsnorm's input and attributes: a float x, 1 <= axes <= rank, eps > 0 */
static pcgc_status norm_attrs(ictx *c, int64_t *axes) {
  TRY(need_float(c, 0));
  *axes = pcgc_attrs_int(c->a, "axes");
  if (*axes < 1 || *axes > c->in[0].rank)
    return fail(c, "axes=%lld must be between 1 and the input rank %d", (long long)*axes, c->in[0].rank);
  if (pcgc_attrs_float(c->a, "eps") <= 0) return fail(c, "eps must be positive");
  return PCGC_OK;
}

static pcgc_status infer_layernorm(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  int64_t axes;
  TRY(norm_attrs(c, &axes));
  if (c->n_in == 2) return fail(c, "layernorm takes an input and optionally both scale and bias, not one of them");
  int r = x->rank, first = r - (int)axes;
  for (int i = 1; i < c->n_in; i++) {
    TRY(need_rank(c, i, (int)axes, (int)axes));
    TRY(need_same_dtype(c, 0, i));
    for (int d = 0; d < axes; d++)
      if (c->in[i].dims[d] != x->dims[first + d]) {
        char t1[128], t2[128];
        return fail(c, "%s is %s but must match the last %lld dims of the input %s", slot_name(c->kind, i),
                    fmt_type(t1, sizeof t1, &c->in[i]), (long long)axes, fmt_type(t2, sizeof t2, x));
      }
  }
  c->out[0] = *x;
  TRY(no_sum(c, 0, "normalisation of a partial sum is not a partial sum"));
  for (int d = first; d < r; d++) TRY(unsharded(c, 0, d, "layernorm normalises over it"));
  for (int i = 1; i < c->n_in; i++) {
    TRY(no_sum(c, i, "a weight must be whole"));
    for (int d = 0; d < axes; d++) TRY(unsharded(c, i, d, "the normalised dims are whole"));
    TRY(need_replica(c, i, pcgc_ptensor_pieces(x)));
  }
  return PCGC_OK;
}

/* x / sqrt(mean(x^2 over the last `axes` dims) + eps) [* scale]: layernorm
 * without centring and without bias (LLaMA's RMSNorm) */
static pcgc_status infer_rmsnorm(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  int64_t axes;
  TRY(norm_attrs(c, &axes));
  int r = x->rank, first = r - (int)axes;
  if (c->n_in == 2) {
    TRY(need_rank(c, 1, (int)axes, (int)axes));
    TRY(need_same_dtype(c, 0, 1));
    for (int d = 0; d < axes; d++)
      if (c->in[1].dims[d] != x->dims[first + d]) {
        char t1[128], t2[128];
        return fail(c, "scale is %s but must match the last %lld dims of the input %s", fmt_type(t1, sizeof t1, &c->in[1]),
                    (long long)axes, fmt_type(t2, sizeof t2, x));
      }
  }
  c->out[0] = *x;
  TRY(no_sum(c, 0, "normalisation of a partial sum is not a partial sum"));
  for (int d = first; d < r; d++) TRY(unsharded(c, 0, d, "rmsnorm normalises over it"));
  if (c->n_in == 2) {
    TRY(no_sum(c, 1, "a weight must be whole"));
    for (int d = 0; d < axes; d++) TRY(unsharded(c, 1, d, "the normalised dims are whole"));
    TRY(need_replica(c, 1, pcgc_ptensor_pieces(x)));
  }
  return PCGC_OK;
}

/* ------------------------------------------------------------- embedding */

static pcgc_status infer_embedding(ictx *c) {
  const pcgc_ptensor *idx = &c->in[0], *tab = &c->in[1];
  if (pcgc_dtype_is_float(idx->dtype)) {
    pcgc_status s = fail(c, "indices must be integers (i32 or i64), got %s", pcgc_dtype_name(idx->dtype));
    hint(c, "declare the input as i32[...]");
    return s;
  }
  TRY(need_rank(c, 1, 2, 2));
  TRY(need_float(c, 1));
  int bag = (int)pcgc_attrs_int(c->a, "bag");
  int r = idx->rank;
  if (bag != PCGC_BAG_NONE) TRY(need_rank(c, 0, 1, PCGC_MAX_RANK));
  else TRY(need_rank(c, 0, 0, PCGC_MAX_RANK - 1));
  int keep = bag != PCGC_BAG_NONE ? r - 1 : r; /* idx dims kept in the output */
  int64_t dims[PCGC_MAX_RANK];
  for (int i = 0; i < keep; i++) dims[i] = idx->dims[i];
  dims[keep] = tab->dims[1];
  out_init(c, 0, tab->dtype, keep + 1, dims);

  TRY(no_sum(c, 0, "indices cannot be partial sums"));
  TRY(no_sum(c, 1, "a weight must be whole"));
  int64_t v = tab->degree[0], dcol = tab->degree[1];
  int64_t l = bag != PCGC_BAG_NONE ? idx->degree[r - 1] : 1;
  pcgc_ptensor *o = &c->out[0];
  for (int i = 0; i < keep; i++) o->degree[i] = idx->degree[i];
  o->degree[keep] = (int32_t)dcol;
  /* a row-sharded table gives zeros for ids other pieces hold: partial sums */
  o->sum = (int32_t)(v * l);
  int64_t R;
  TRY(out_replica(c, 0, dcol * v, &R));
  o->replica = (int32_t)R;
  TRY(need_replica(c, 1, prod_deg(idx, 0, keep) * l * R));
  return PCGC_OK;
}

/* ----------------------------------------------------------- elementwise */

static bool is_linear_unary(pcgc_op_kind k) {
  return k == PCGC_OP_IDENTITY || k == PCGC_OP_SCALAR_MUL || k == PCGC_OP_SCALAR_DIV ||
         k == PCGC_OP_DROPOUT;
}

static pcgc_status infer_unary(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  if (c->kind != PCGC_OP_IDENTITY) TRY(need_float(c, 0));
  if (c->kind == PCGC_OP_SCALAR_DIV && pcgc_attrs_float(c->a, "scalar") == 0)
    return fail(c, "division by zero (scalar=0)");
  if (c->kind == PCGC_OP_DROPOUT) {
    double p = pcgc_attrs_float(c->a, "rate");
    if (p < 0 || p >= 1) return fail(c, "rate must be in [0, 1), got %g", p);
  }
  c->out[0] = *x;
  if (!is_linear_unary(c->kind) && x->sum > 1) {
    char why[96];
    snprintf(why, sizeof why, "%s of a partial sum is not the partial sum of %s",
             pcgc_op_name(c->kind), pcgc_op_name(c->kind));
    return no_sum(c, 0, why);
  }
  return PCGC_OK;
}

static pcgc_status infer_binary(ictx *c) {
  const pcgc_ptensor *a = &c->in[0], *b = &c->in[1];
  TRY(need_float(c, 0));
  TRY(need_same_dtype(c, 0, 1));
  int r = a->rank > b->rank ? a->rank : b->rank;
  int64_t dims[PCGC_MAX_RANK];
  int32_t deg[PCGC_MAX_RANK];
  for (int i = 0; i < r; i++) {
    int ia = i - (r - a->rank), ib = i - (r - b->rank);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      char t1[128], t2[128];
      pcgc_status s = fail(c, "shapes %s and %s do not broadcast: dim %d is %lld vs %lld",
                           fmt_type(t1, sizeof t1, a), fmt_type(t2, sizeof t2, b), i, (long long)da,
                           (long long)db);
      hint(c, "sizes must be equal or 1, aligned from the last dim");
      return s;
    }
    dims[i] = da > db ? da : db;
    int32_t ga = ia >= 0 ? a->degree[ia] : 1, gb = ib >= 0 ? b->degree[ib] : 1;
    bool fa = da == dims[i], fb = db == dims[i]; /* not broadcast along i */
    if (fa && fb && ga != gb)
      return fail(c, "dim %d is split %d ways in a but %d ways in b", i, ga, gb);
    deg[i] = fa ? ga : gb;
  }
  out_init(c, 0, a->dtype, r, dims);
  pcgc_ptensor *o = &c->out[0];
  for (int i = 0; i < r; i++) o->degree[i] = deg[i];
  switch (c->kind) {
  case PCGC_OP_ADD:
  case PCGC_OP_SUB:
    if (a->sum != b->sum) {
      pcgc_status s = fail(c, "a has sum degree %d and b has %d: adding a whole tensor to each "
                           "partial sum would count it several times", a->sum, b->sum);
      hint(c, "reduce() the partial sums first, or make both partial sums of the same degree");
      return s;
    }
    o->sum = a->sum;
    break;
  case PCGC_OP_MUL:
    if (a->sum > 1 && b->sum > 1)
      return fail(c, "both inputs are partial sums; their product is not a partial sum");
    o->sum = a->sum * b->sum;
    break;
  default: /* div: a partial numerator over a whole denominator is fine */
    TRY(no_sum(c, 1, "dividing by a partial sum is not linear"));
    o->sum = a->sum;
  }
  int64_t p = pcgc_ptensor_pieces(a), per = prod_deg(o, 0, r) * o->sum;
  if (p % per != 0 || pcgc_ptensor_pieces(b) != p) {
    pcgc_status s = fail(c, "a arrives as %lld pieces and b as %lld, but they must meet piece by "
                         "piece (%lld pieces for this output sharding)", (long long)p,
                         (long long)pcgc_ptensor_pieces(b), (long long)per);
    hint(c, "replicate() the input that is broadcast or less sharded");
    return s;
  }
  o->replica = (int32_t)(p / per);
  return PCGC_OK;
}

/* --------------------------------------------------------- data movement */

static pcgc_status infer_concat(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  int axis;
  TRY(norm_axis(c, pcgc_attrs_int(c->a, "axis"), x->rank, "axis", &axis));
  int64_t total = 0;
  for (int i = 0; i < c->n_in; i++) {
    const pcgc_ptensor *t = &c->in[i];
    TRY(need_same_dtype(c, 0, i));
    if (t->rank != x->rank)
      return fail(c, "input %d has rank %d but input 0 has rank %d", i, t->rank, x->rank);
    for (int d = 0; d < x->rank; d++)
      if (d != axis && t->dims[d] != x->dims[d]) {
        char t1[128], t2[128];
        return fail(c, "input %d is %s but input 0 is %s: all dims but the axis (%d) must match", i,
                    fmt_type(t1, sizeof t1, t), fmt_type(t2, sizeof t2, x), axis);
      }
    total += t->dims[axis];
  }
  int64_t dims[PCGC_MAX_RANK];
  memcpy(dims, x->dims, sizeof dims);
  dims[axis] = total;
  out_init(c, 0, x->dtype, x->rank, dims);
  pcgc_ptensor *o = &c->out[0];
  for (int i = 0; i < c->n_in; i++) {
    const pcgc_ptensor *t = &c->in[i];
    TRY(unsharded(c, i, axis, "concatenating along a sharded dim would interleave the pieces"));
    for (int d = 0; d < x->rank; d++)
      if (t->degree[d] != x->degree[d])
        return fail(c, "dim %d is split %d ways in input %d but %d ways in input 0", d, t->degree[d], i,
                    x->degree[d]);
    if (t->sum != x->sum || t->replica != x->replica)
      return fail(c, "input %d has sum/replica degrees %d/%d but input 0 has %d/%d", i, t->sum,
                  t->replica, x->sum, x->replica);
  }
  memcpy(o->degree, x->degree, sizeof o->degree);
  o->sum = x->sum;
  o->replica = x->replica;
  return PCGC_OK;
}

static pcgc_status infer_split(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  int axis;
  TRY(norm_axis(c, pcgc_attrs_int(c->a, "axis"), x->rank, "axis", &axis));
  pcgc_ints sz = pcgc_attrs_ints(c->a, "sizes");
  if (sz.n < 1) return fail(c, "sizes must list at least one size");
  int64_t total = 0;
  for (int i = 0; i < sz.n; i++) {
    if (sz.v[i] < 1) return fail(c, "size %d is %lld; sizes must be positive", i, (long long)sz.v[i]);
    total += sz.v[i];
  }
  if (total != x->dims[axis]) {
    pcgc_status s = fail(c, "sizes add up to %lld but dim %d has size %lld", (long long)total, axis,
                         (long long)x->dims[axis]);
    hint(c, "the sizes must add up to the size of the split dim");
    return s;
  }
  TRY(unsharded(c, 0, axis, "splitting along a sharded dim does not follow the cuts"));
  for (int i = 0; i < sz.n; i++) {
    c->out[i] = *x;
    c->out[i].dims[axis] = sz.v[i];
  }
  return PCGC_OK;
}

/* Maps shard degrees through a reshape: a sharded input dim i stays sharded
 * on the output dim j that starts at the same flat offset (equal products of
 * the dims before them) when dims[j] is divisible by the degree; each piece
 * is then the same contiguous range of the flat tensor in both shapes. */
static pcgc_status reshape_degrees(ictx *c, const int64_t *dims, int rank) {
  const pcgc_ptensor *x = &c->in[0];
  pcgc_ptensor *o = &c->out[0];
  for (int i = 0; i < x->rank; i++) {
    if (x->degree[i] == 1) continue;
    int64_t pre = 1;
    for (int k = 0; k < i; k++) pre *= x->dims[k];
    int64_t opre = 1;
    int j = 0;
    while (j < rank && opre < pre) opre *= dims[j++];
    while (j < rank && opre == pre && dims[j] == 1) j++; /* unit dims hold no piece */
    if (opre != pre || j >= rank || dims[j] % x->degree[i] != 0) {
      pcgc_status s = fail(c, "dim %d is split %d ways, and its pieces are not contiguous blocks of "
                           "any dim of the new shape", i, x->degree[i]);
      hint(c, "combine(dim=%d) before reshaping, or reshape so that dim %d stays outermost of its group",
           i, i);
      return s;
    }
    o->degree[j] = x->degree[i];
  }
  o->sum = x->sum;
  o->replica = x->replica;
  return PCGC_OK;
}

static pcgc_status infer_reshape(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  pcgc_ints sh = pcgc_attrs_ints(c->a, "shape");
  if (sh.n > PCGC_MAX_RANK) return fail(c, "rank %d is more than the maximum %d", sh.n, PCGC_MAX_RANK);
  int64_t dims[PCGC_MAX_RANK], known = 1, numel = pcgc_ptensor_numel(x);
  int infer_at = -1;
  for (int i = 0; i < sh.n; i++) {
    dims[i] = sh.v[i];
    if (dims[i] == -1) {
      if (infer_at >= 0) return fail(c, "only one dim of the shape may be -1");
      infer_at = i;
    } else if (dims[i] < 1) {
      return fail(c, "dim %d of the shape is %lld; sizes must be positive (or one -1)", i, (long long)dims[i]);
    } else {
      if (known > INT64_MAX / dims[i]) return fail(c, "the shape has too many elements");
      known *= dims[i];
    }
  }
  if (infer_at >= 0) {
    if (numel % known) {
      pcgc_status s = fail(c, "cannot infer the -1 dim: %lld elements are not divisible by %lld",
                           (long long)numel, (long long)known);
      return s;
    }
    dims[infer_at] = numel / known;
    known = numel;
  }
  if (known != numel) {
    char t[128];
    pcgc_status s = fail(c, "the new shape has %lld elements but the input %s has %lld", (long long)known,
                         fmt_type(t, sizeof t, x), (long long)numel);
    hint(c, "reshape keeps the number of elements; use -1 for one dim to infer it");
    return s;
  }
  out_init(c, 0, x->dtype, sh.n, dims);
  return reshape_degrees(c, dims, sh.n);
}

static pcgc_status infer_flatten(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  int64_t axis = pcgc_attrs_int(c->a, "axis");
  if (axis < 0) axis += x->rank;
  if (axis < 0 || axis > x->rank)
    return fail(c, "axis %lld is out of range for a rank-%d tensor", (long long)pcgc_attrs_int(c->a, "axis"),
                x->rank);
  int64_t dims[2] = {1, 1};
  for (int i = 0; i < x->rank; i++) dims[i < axis ? 0 : 1] *= x->dims[i];
  out_init(c, 0, x->dtype, 2, dims);
  return reshape_degrees(c, dims, 2);
}

static pcgc_status infer_transpose(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  pcgc_ints perm = pcgc_attrs_ints(c->a, "perm");
  if (perm.n != x->rank) {
    pcgc_status s = fail(c, "perm has %d entries but the input has rank %d", perm.n, x->rank);
    hint(c, "perm lists every dim once, e.g. perm=[0, 2, 1, 3]");
    return s;
  }
  bool seen[PCGC_MAX_RANK] = {false};
  int p[PCGC_MAX_RANK];
  for (int i = 0; i < x->rank; i++) {
    int d;
    TRY(norm_axis(c, perm.v[i], x->rank, "perm entry", &d));
    if (seen[d]) return fail(c, "perm lists dim %d twice", d);
    seen[d] = true;
    p[i] = d;
  }
  int64_t dims[PCGC_MAX_RANK];
  for (int i = 0; i < x->rank; i++) dims[i] = x->dims[p[i]];
  out_init(c, 0, x->dtype, x->rank, dims);
  pcgc_ptensor *o = &c->out[0];
  for (int i = 0; i < x->rank; i++) o->degree[i] = x->degree[p[i]];
  o->sum = x->sum;
  o->replica = x->replica;
  return PCGC_OK;
}

/* ------------------------------------------------ softmax and reductions */

static pcgc_status infer_softmax(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  TRY(need_float(c, 0));
  int axis;
  TRY(norm_axis(c, pcgc_attrs_int(c->a, "axis"), x->rank, "axis", &axis));
  c->out[0] = *x;
  char why[64];
  snprintf(why, sizeof why, "%s of a partial sum is not a partial sum", pcgc_op_name(c->kind));
  TRY(no_sum(c, 0, why));
  snprintf(why, sizeof why, "%s normalises along it", pcgc_op_name(c->kind));
  TRY(unsharded(c, 0, axis, why));
  return PCGC_OK;
}

static pcgc_status infer_reduce(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  TRY(need_float(c, 0));
  pcgc_ints dl = pcgc_attrs_ints(c->a, "dims");
  bool keep = pcgc_attrs_int(c->a, "keepdims") != 0;
  if (dl.n < 1) return fail(c, "dims must list at least one dim to reduce");
  bool red[PCGC_MAX_RANK] = {false};
  for (int i = 0; i < dl.n; i++) {
    int d;
    TRY(norm_axis(c, dl.v[i], x->rank, "dims entry", &d));
    if (red[d]) return fail(c, "dims lists dim %d twice", d);
    red[d] = true;
  }
  if (c->kind == PCGC_OP_REDUCE_MAX) { /* the max of pieces is no sum of them */
    TRY(no_sum(c, 0, "the maximum of a partial sum is not a partial sum"));
    for (int i = 0; i < x->rank; i++)
      if (red[i]) TRY(unsharded(c, 0, i, "reduce_max takes the maximum over it"));
  }
  int64_t dims[PCGC_MAX_RANK];
  int32_t deg[PCGC_MAX_RANK];
  int r = 0;
  int64_t sum = x->sum;
  for (int i = 0; i < x->rank; i++) {
    if (red[i]) {
      sum *= x->degree[i]; /* each piece reduces its part: partial sums */
      if (keep) { dims[r] = 1; deg[r++] = 1; }
    } else {
      dims[r] = x->dims[i];
      deg[r++] = x->degree[i];
    }
  }
  out_init(c, 0, x->dtype, r, dims);
  pcgc_ptensor *o = &c->out[0];
  for (int i = 0; i < r; i++) o->degree[i] = deg[i];
  o->sum = (int32_t)sum;
  o->replica = x->replica;
  return PCGC_OK;
}

/* ----------------------------------------------------------------- masking */

/* causal_mask: rows and columns are the last two dims, and which elements
 * are masked depends on both indices, so neither may be sharded. */
static pcgc_status infer_mask(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  TRY(need_float(c, 0));
  if (x->rank < 2) return fail(c, "input must have at least 2 dims (rows and columns), has %d", x->rank);
  c->out[0] = *x;
  TRY(no_sum(c, 0, "masking a partial sum with -inf is not a partial sum"));
  TRY(unsharded(c, 0, x->rank - 2, "the mask depends on the row index"));
  TRY(unsharded(c, 0, x->rank - 1, "the mask depends on the column index"));
  return PCGC_OK;
}

/* rope: x [..., T, D], position t = index along dim -2; D even and
 * neither dim sharded (a piece would need its positions). A rotation is
 * linear, so partial sums pass through. */
static pcgc_status infer_rope(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  TRY(need_float(c, 0));
  if (x->rank < 2) return fail(c, "input must have at least 2 dims (positions and features), has %d", x->rank);
  if (x->dims[x->rank - 1] % 2)
    return fail(c, "the last dim (%lld) must be even: rope rotates its two halves together",
                (long long)x->dims[x->rank - 1]);
  double th = pcgc_attrs_float(c->a, "theta");
  if (!(th > 1)) return fail(c, "theta must be above 1, got %g", th);
  c->out[0] = *x;
  TRY(unsharded(c, 0, x->rank - 2, "rope rotates by the position along it"));
  TRY(unsharded(c, 0, x->rank - 1, "rope pairs its two halves"));
  return PCGC_OK;
}

/* ------------------------------------------------------------- attention */

static pcgc_status infer_attention(ictx *c) {
  /* 10 inputs: projection biases without bo, the form a head split needs
   * (its output is a partial sum, so bo is added once after the reduce) */
  if (c->n_in != 7 && c->n_in != 10 && c->n_in != 11) {
    pcgc_status s = fail(c, "attention takes 7 inputs (q, k, v, wq, wk, wv, wo), 10 (plus bq, bk, bv) or 11 "
                         "(plus bq, bk, bv, bo), got %d", c->n_in);
    return s;
  }
  const pcgc_ptensor *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
  const pcgc_ptensor *wq = &c->in[3], *wo = &c->in[6];
  for (int i = 0; i < 3; i++) TRY(need_rank(c, i, 3, 3));
  for (int i = 3; i < 7; i++) TRY(need_rank(c, i, 2, 2));
  for (int i = 0; i < c->n_in; i++) {
    TRY(need_float(c, i));
    TRY(need_same_dtype(c, 0, i));
  }
  int64_t heads = pcgc_attrs_int(c->a, "heads");
  double drop = pcgc_attrs_float(c->a, "dropout");
  if (drop < 0 || drop >= 1) return fail(c, "dropout must be in [0, 1), got %g", drop);
  if (k->dims[0] != q->dims[0] || v->dims[0] != q->dims[0])
    return fail(c, "q, k and v must have the same batch size (%lld, %lld, %lld)", (long long)q->dims[0],
                (long long)k->dims[0], (long long)v->dims[0]);
  if (k->dims[1] != v->dims[1])
    return fail(c, "k and v must have the same sequence length (%lld vs %lld)", (long long)k->dims[1],
                (long long)v->dims[1]);
  /* grouped-query attention: wk and wv project to F = kv_heads * head size
   * columns, fewer than wq's E when kv heads are shared by groups of heads */
  int64_t E = wq->dims[1], F = c->in[4].dims[1];
  TRY(need_dim(c, 3, 0, q->dims[2], "dim 0 (q's features)"));
  TRY(need_dim(c, 4, 0, k->dims[2], "dim 0 (k's features)"));
  TRY(need_dim(c, 5, 0, v->dims[2], "dim 0 (v's features)"));
  TRY(need_dim(c, 5, 1, F, "dim 1 (wk's projection size)"));
  TRY(need_dim(c, 6, 0, E, "dim 0 (projection size)"));
  if (heads < 1 || E % heads) {
    pcgc_status s = fail(c, "heads=%lld must divide the projection size %lld", (long long)heads, (long long)E);
    return s;
  }
  int64_t kv = F / (E / heads);
  if (F % (E / heads) || kv < 1 || heads % kv) {
    pcgc_status s = fail(c, "wk and wv project to %lld features, which is not a number of key/value heads of size "
                         "%lld (E/heads = %lld/%lld) that divides heads=%lld", (long long)F, (long long)(E / heads),
                         (long long)E, (long long)heads, (long long)heads);
    hint(c, "for grouped-query attention give wk and wv kv_heads * %lld columns, kv_heads dividing %lld; for "
         "multi-head attention %lld", (long long)(E / heads), (long long)heads, (long long)E);
    return s;
  }
  if (pcgc_attrs_int(c->a, "rope") && ((E / heads) % 2 || !(pcgc_attrs_float(c->a, "rope_theta") > 1))) {
    pcgc_status s = fail(c, "rotary embeddings need an even head size and rope_theta > 1 (head size %lld, "
                         "rope_theta %g)", (long long)(E / heads), pcgc_attrs_float(c->a, "rope_theta"));
    return s;
  }
  if (pcgc_attrs_int(c->a, "causal") && q->dims[1] != k->dims[1])
    return fail(c, "a causal mask needs equal query and key lengths (%lld vs %lld)", (long long)q->dims[1],
                (long long)k->dims[1]);
  bool bias = c->n_in >= 10, bias_o = c->n_in == 11;
  if (bias) {
    for (int i = 7; i < c->n_in; i++) TRY(need_rank(c, i, 1, 1));
    TRY(need_dim(c, 7, 0, E, "size"));
    for (int i = 8; i < 10; i++) TRY(need_dim(c, i, 0, F, "size (wk's and wv's columns)"));
  }
  if (bias_o) TRY(need_dim(c, 10, 0, wo->dims[1], "size"));
  int64_t dims[3] = {q->dims[0], q->dims[1], wo->dims[1]};
  out_init(c, 0, q->dtype, 3, dims);

  for (int i = 0; i < c->n_in; i++) TRY(no_sum(c, i, "attention is not linear in its inputs"));
  for (int i = 0; i < 3; i++) TRY(unsharded(c, i, 2, "the feature dim is contracted before the softmax"));
  TRY(unsharded(c, 1, 1, "every query needs all keys"));
  TRY(unsharded(c, 2, 1, "every query needs all values"));
  if (k->degree[0] != q->degree[0] || v->degree[0] != q->degree[0])
    return fail(c, "q, k and v must split the batch the same way (%d, %d, %d)", q->degree[0], k->degree[0],
                v->degree[0]);
  int64_t h = wq->degree[1];
  for (int i = 3; i < 6; i++) {
    TRY(unsharded(c, i, 0, "the input features are contracted before the softmax"));
    if (c->in[i].degree[1] != h)
      return fail(c, "wq, wk and wv must be split the same way by heads (%lld vs %d)", (long long)h,
                  c->in[i].degree[1]);
  }
  if (wo->degree[0] != h)
    return fail(c, "wo's dim 0 must be split like the heads (%lld ways), got %d", (long long)h, wo->degree[0]);
  TRY(unsharded(c, 6, 1, "the output features are not split by heads"));
  if (heads % h || kv % h) {
    if (kv == heads) {
      pcgc_status s = fail(c, "%lld heads cannot be split %lld ways", (long long)heads, (long long)h);
      hint(c, "use a degree that divides heads=%lld", (long long)heads);
      return s;
    }
    pcgc_status s = fail(c, "%lld heads (%lld key/value heads) cannot be split %lld ways", (long long)heads,
                         (long long)kv, (long long)h);
    hint(c, "use a degree that divides both heads=%lld and the %lld key/value heads", (long long)heads,
         (long long)kv);
    return s;
  }
  int64_t b = q->degree[0], s = q->degree[1];
  pcgc_ptensor *o = &c->out[0];
  o->degree[0] = (int32_t)b;
  o->degree[1] = (int32_t)s;
  o->sum = (int32_t)h; /* each head group contributes its share of the output projection */
  int64_t R;
  TRY(out_replica(c, 0, h, &R));
  o->replica = (int32_t)R;
  TRY(need_replica(c, 1, s * h * R));
  TRY(need_replica(c, 2, s * h * R));
  for (int i = 3; i < 7; i++) TRY(need_replica(c, i, b * s * R));
  if (bias) {
    for (int i = 7; i < 10; i++) {
      if (c->in[i].degree[0] != h)
        return fail(c, "%s must be split like the heads (%lld ways)", slot_name(c->kind, i), (long long)h);
      TRY(need_replica(c, i, b * s * R));
    }
  }
  if (bias_o) {
    if (h > 1) {
      pcgc_status st = fail(c, "with heads split %lld ways the output is a partial sum, so the output bias bo "
                            "would be added %lld times", (long long)h, (long long)h);
      hint(c, "leave bo out (10 inputs: q, k, v, wq, wk, wv, wo, bq, bk, bv) and add bo after reduce()");
      return st;
    }
    TRY(unsharded(c, 10, 0, "attention does not split the output features"));
    TRY(need_replica(c, 10, b * s * R));
  }
  return PCGC_OK;
}

/* ------------------------------------------------------ mixture of experts
 *
 * GShard's layout: tokens come as G groups of S, each group routed on its
 * own (its experts' capacity C is per group), so the group dim is the one
 * data parallelism splits. Experts are a dim of their own (X), split by
 * expert parallelism after the dispatch: moving the dispatched tokens from
 * group-split to expert-split pieces is the all-to-all. */

static pcgc_status need_int(ictx *c, int i) {
  if (!pcgc_dtype_is_float(c->in[i].dtype)) return PCGC_OK;
  return fail(c, "%s must be an integer tensor (moe_route's slot output), got %s", slot_name(c->kind, i),
              pcgc_dtype_name(c->in[i].dtype));
}

static pcgc_status need_positive(ictx *c, const char *attr, int64_t max) {
  int64_t v = pcgc_attrs_int(c->a, attr);
  if (v >= 1 && v <= max) return PCGC_OK;
  return fail(c, "%s must be in [1, %lld], got %lld", attr, (long long)max, (long long)v);
}

/* slot[G,S,k] read by dispatch and combine: groups and tokens of x (or the
 * gates), split alike on dim 0 and nowhere else */
static pcgc_status need_routing(ictx *c, int i, const pcgc_ptensor *like, int like_i) {
  const pcgc_ptensor *s = &c->in[i];
  TRY(need_rank(c, i, 3, 3));
  TRY(need_dim(c, i, 0, like->dims[0], "dim 0 (groups)"));
  TRY(need_dim(c, i, 1, like->dims[1], "dim 1 (tokens)"));
  TRY(no_sum(c, i, "routing cannot be partial sums"));
  TRY(unsharded(c, i, 1, "a group's tokens are routed together"));
  TRY(unsharded(c, i, 2, "a token's choices are routed together"));
  if (s->degree[0] != like->degree[0])
    return fail(c, "%s splits the groups %d ways but %s %d ways", slot_name(c->kind, i), s->degree[0],
                slot_name(c->kind, like_i), like->degree[0]);
  return PCGC_OK;
}

static pcgc_status infer_moe_route(ictx *c) {
  const pcgc_ptensor *l = &c->in[0];
  TRY(need_rank(c, 0, 3, 3));
  TRY(need_float(c, 0));
  int64_t X = l->dims[2], k = pcgc_attrs_int(c->a, "k");
  if (k < 1 || k > X) {
    pcgc_status s = fail(c, "k=%lld experts per token, but the logits score %lld experts", (long long)k,
                         (long long)X);
    hint(c, "k must be in [1, %lld]", (long long)X);
    return s;
  }
  TRY(need_positive(c, "capacity", (int64_t)1 << 30));
  if (X * pcgc_attrs_int(c->a, "capacity") > INT32_MAX)
    return fail(c, "experts x capacity = %lld slots is more than an i32 slot id holds",
                (long long)(X * pcgc_attrs_int(c->a, "capacity")));
  double aux = pcgc_attrs_float(c->a, "aux");
  if (!(aux >= 0)) return fail(c, "aux must be a weight >= 0, got %g", aux);
  int64_t dims[3] = {l->dims[0], l->dims[1], k};
  out_init(c, 0, l->dtype, 3, dims);
  out_init(c, 1, PCGC_I32, 3, dims);
  TRY(no_sum(c, 0, "top-k of a partial sum is not the top-k of the sum"));
  TRY(unsharded(c, 0, 1, "a group's tokens share its experts' capacity"));
  TRY(unsharded(c, 0, 2, "a token's top-k needs all its experts' logits"));
  for (int j = 0; j < 2; j++) {
    c->out[j].degree[0] = l->degree[0];
    c->out[j].replica = l->replica;
  }
  return PCGC_OK;
}

static pcgc_status infer_moe_dispatch(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  TRY(need_rank(c, 0, 3, 3));
  TRY(need_float(c, 0));
  TRY(need_int(c, 1));
  TRY(need_positive(c, "experts", (int64_t)1 << 30));
  TRY(need_positive(c, "capacity", (int64_t)1 << 30));
  int64_t X = pcgc_attrs_int(c->a, "experts"), C = pcgc_attrs_int(c->a, "capacity");
  if (X * C > INT32_MAX) return fail(c, "experts x capacity = %lld slots is more than an i32 slot id holds", (long long)(X * C));
  TRY(need_routing(c, 1, x, 0));
  int64_t dims[4] = {x->dims[0], X, C, x->dims[2]};
  out_init(c, 0, x->dtype, 4, dims);
  TRY(no_sum(c, 0, "dispatch copies whole tokens"));
  TRY(unsharded(c, 0, 1, "a group's tokens are dispatched together"));
  pcgc_ptensor *o = &c->out[0];
  o->degree[0] = x->degree[0];
  o->degree[3] = x->degree[2];
  o->replica = x->replica;
  return need_replica(c, 1, (int64_t)x->degree[2] * x->replica);
}

static pcgc_status infer_expert_linear(ictx *c) {
  const pcgc_ptensor *x = &c->in[0], *w = &c->in[1];
  TRY(need_rank(c, 0, 4, 4));
  TRY(need_rank(c, 1, 3, 3));
  TRY(need_float(c, 0));
  TRY(need_same_dtype(c, 0, 1));
  if (w->dims[0] != x->dims[1] || w->dims[1] != x->dims[3]) {
    char t1[128], t2[128];
    pcgc_status s = fail(c, "the input %s holds %lld experts of %lld features, but the weight is %s",
                         fmt_type(t1, sizeof t1, x), (long long)x->dims[1], (long long)x->dims[3],
                         fmt_type(t2, sizeof t2, w));
    hint(c, "the weight must be [%lld, %lld, N]", (long long)x->dims[1], (long long)x->dims[3]);
    return s;
  }
  bool bias = c->n_in == 3;
  if (bias) {
    TRY(need_rank(c, 2, 2, 2));
    TRY(need_same_dtype(c, 0, 2));
    TRY(need_dim(c, 2, 0, w->dims[0], "dim 0 (experts)"));
    TRY(need_dim(c, 2, 1, w->dims[2], "dim 1 (features)"));
  }
  int act = (int)pcgc_attrs_int(c->a, "act");
  int64_t dims[4] = {x->dims[0], x->dims[1], x->dims[2], w->dims[2]};
  out_init(c, 0, x->dtype, 4, dims);

  TRY(no_sum(c, 1, "a weight must be whole"));
  if (w->degree[0] != x->degree[1]) {
    pcgc_status s = fail(c, "the experts are split %d ways in the input but %d ways in the weight",
                         x->degree[1], w->degree[0]);
    hint(c, "partition the input's dim 1 and the weight's dim 0 by the same degree");
    return s;
  }
  if (w->degree[1] != x->degree[3]) {
    pcgc_status s = fail(c, "the contraction dim is split %d ways in the input but %d ways in the weight",
                         x->degree[3], w->degree[1]);
    hint(c, "partition the input's dim 3 and the weight's dim 1 by the same degree");
    return s;
  }
  int64_t n = w->degree[2];
  pcgc_ptensor *o = &c->out[0];
  o->degree[0] = x->degree[0];
  o->degree[1] = x->degree[1];
  o->degree[2] = x->degree[2];
  o->degree[3] = (int32_t)n;
  o->sum = (int32_t)((int64_t)x->degree[3] * x->sum);
  int64_t R;
  TRY(out_replica(c, 0, n, &R));
  o->replica = (int32_t)R;
  /* the weight does not depend on the groups or the slots */
  TRY(need_replica(c, 1, (int64_t)x->degree[0] * x->degree[2] * x->sum * R));
  TRY(epilogue_whole(c, o->sum, act, bias));
  if (bias) {
    const pcgc_ptensor *b = &c->in[2];
    if (b->degree[0] != x->degree[1] || b->degree[1] != n)
      return fail(c, "the bias is split %d x %d ways but the output's experts and features %d x %lld ways",
                  b->degree[0], b->degree[1], x->degree[1], (long long)n);
    TRY(need_replica(c, 2, (int64_t)x->degree[0] * x->degree[2] * R));
  }
  return PCGC_OK;
}

static pcgc_status infer_moe_combine(ictx *c) {
  const pcgc_ptensor *y = &c->in[0], *g = &c->in[1];
  TRY(need_rank(c, 0, 4, 4));
  TRY(need_float(c, 0));
  TRY(need_rank(c, 1, 3, 3));
  TRY(need_same_dtype(c, 0, 1));
  TRY(need_int(c, 2));
  TRY(need_dim(c, 1, 0, y->dims[0], "dim 0 (groups)"));
  TRY(need_routing(c, 2, g, 1));
  TRY(need_dim(c, 2, 2, g->dims[2], "dim 2 (choices)"));
  TRY(no_sum(c, 1, "the gates scale the experts' outputs"));
  TRY(unsharded(c, 1, 1, "a group's tokens are combined together"));
  TRY(unsharded(c, 1, 2, "a token's choices are combined together"));
  TRY(unsharded(c, 0, 2, "a token's slots are read whole"));
  if (g->degree[0] != y->degree[0])
    return fail(c, "the gates split the groups %d ways but the experts' output %d ways", g->degree[0],
                y->degree[0]);
  int64_t dims[3] = {y->dims[0], g->dims[1], y->dims[3]};
  out_init(c, 0, y->dtype, 3, dims);
  pcgc_ptensor *o = &c->out[0];
  o->degree[0] = y->degree[0];
  o->degree[2] = y->degree[3];
  /* a piece holding some experts sums only their slots: partial sums */
  o->sum = (int32_t)((int64_t)y->degree[1] * y->sum);
  o->replica = y->replica;
  int64_t want = (int64_t)y->degree[3] * y->degree[1] * y->sum * y->replica;
  TRY(need_replica(c, 1, want));
  return need_replica(c, 2, want);
}

/* ---------------------------------------------------------------- losses */

static pcgc_status infer_xent(ictx *c) {
  const pcgc_ptensor *x = &c->in[0], *y = &c->in[1];
  TRY(need_rank(c, 0, 1, PCGC_MAX_RANK));
  TRY(need_float(c, 0));
  if (pcgc_dtype_is_float(y->dtype)) {
    pcgc_status s = fail(c, "labels must be integer class ids, got %s", pcgc_dtype_name(y->dtype));
    hint(c, "declare the labels input as i32[...]");
    return s;
  }
  int r = x->rank;
  bool ok = y->rank == r - 1;
  for (int i = 0; ok && i < r - 1; i++) ok = y->dims[i] == x->dims[i];
  if (!ok) {
    char t1[128], t2[128];
    pcgc_status s = fail(c, "labels %s must have the logits' shape %s without the class dim",
                         fmt_type(t1, sizeof t1, y), fmt_type(t2, sizeof t2, x));
    return s;
  }
  out_init(c, 0, x->dtype, 0, NULL);
  TRY(no_sum(c, 0, "softmax of a partial sum is not a partial sum"));
  TRY(no_sum(c, 1, "class ids cannot be added up"));
  TRY(unsharded(c, 0, r - 1, "softmax normalises over the classes"));
  for (int i = 0; i < r - 1; i++)
    if (y->degree[i] != x->degree[i])
      return fail(c, "dim %d is split %d ways in the logits but %d ways in the labels", i, x->degree[i],
                  y->degree[i]);
  if (y->replica != x->replica)
    return fail(c, "logits and labels have replica degrees %d and %d", x->replica, y->replica);
  /* each piece's share of the (mean or sum) loss: partial sums */
  c->out[0].sum = (int32_t)prod_deg(x, 0, r - 1);
  c->out[0].replica = x->replica;
  return PCGC_OK;
}

static pcgc_status infer_mse(ictx *c) {
  const pcgc_ptensor *x = &c->in[0], *y = &c->in[1];
  TRY(need_float(c, 0));
  TRY(need_same_dtype(c, 0, 1));
  bool ok = x->rank == y->rank;
  for (int i = 0; ok && i < x->rank; i++) ok = x->dims[i] == y->dims[i];
  if (!ok) {
    char t1[128], t2[128];
    return fail(c, "prediction %s and target %s must have the same shape", fmt_type(t1, sizeof t1, x),
                fmt_type(t2, sizeof t2, y));
  }
  out_init(c, 0, x->dtype, 0, NULL);
  TRY(no_sum(c, 0, "the square of a partial sum is not a partial sum"));
  TRY(no_sum(c, 1, "the square of a partial sum is not a partial sum"));
  for (int i = 0; i < x->rank; i++)
    if (y->degree[i] != x->degree[i])
      return fail(c, "dim %d is split %d ways in the prediction but %d ways in the target", i,
                  x->degree[i], y->degree[i]);
  if (y->replica != x->replica)
    return fail(c, "prediction and target have replica degrees %d and %d", x->replica, y->replica);
  c->out[0].sum = (int32_t)prod_deg(x, 0, x->rank);
  c->out[0].replica = x->replica;
  return PCGC_OK;
}

/* --------------------------------------------------- parallel operators */

static pcgc_status degree_attr(ictx *c, int64_t *d) {
  *d = pcgc_attrs_int(c->a, "degree");
  if (*d < 1 || *d > (1 << 20)) return fail(c, "degree must be between 1 and 2^20, got %lld", (long long)*d);
  return PCGC_OK;
}

static pcgc_status infer_partition(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  int64_t d;
  int dim;
  TRY(degree_attr(c, &d));
  TRY(norm_axis(c, pcgc_attrs_int(c->a, "dim"), x->rank, "dim", &dim));
  int64_t pieces = (int64_t)x->degree[dim] * d * (x->micro_dim == dim ? x->micro : 1);
  if (x->dims[dim] % pieces) {
    pcgc_status s = fail(c, "dim %d has size %lld, which cannot be cut into %lld equal pieces", dim,
                         (long long)x->dims[dim], (long long)pieces);
    hint(c, "use a degree that divides %lld", (long long)(x->dims[dim] / (pieces / d)));
    return s;
  }
  c->out[0] = *x;
  c->out[0].degree[dim] = (int32_t)(x->degree[dim] * d);
  return PCGC_OK;
}

static pcgc_status infer_combine(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  int64_t d;
  int dim;
  TRY(degree_attr(c, &d));
  TRY(norm_axis(c, pcgc_attrs_int(c->a, "dim"), x->rank, "dim", &dim));
  if (x->degree[dim] % d) {
    pcgc_status s = fail(c, "dim %d is split %d ways, which cannot be combined by %lld", dim, x->degree[dim],
                         (long long)d);
    hint(c, "the degree must divide the dim's current shard degree %d", x->degree[dim]);
    return s;
  }
  c->out[0] = *x;
  c->out[0].degree[dim] = (int32_t)(x->degree[dim] / d);
  return PCGC_OK;
}

static pcgc_status infer_replicate(ictx *c) {
  int64_t d;
  TRY(degree_attr(c, &d));
  c->out[0] = c->in[0];
  if ((int64_t)c->in[0].replica * d > (1 << 20)) return fail(c, "replica degree too large");
  c->out[0].replica = (int32_t)(c->in[0].replica * d);
  return PCGC_OK;
}

static pcgc_status infer_reduce_p(ictx *c) {
  int64_t d;
  TRY(degree_attr(c, &d));
  if (c->in[0].sum % d) {
    pcgc_status s = fail(c, "the input has sum degree %d, which cannot be reduced by %lld", c->in[0].sum,
                         (long long)d);
    hint(c, "the degree must divide the sum degree %d", c->in[0].sum);
    return s;
  }
  c->out[0] = c->in[0];
  c->out[0].sum = (int32_t)(c->in[0].sum / d);
  return PCGC_OK;
}

static pcgc_status infer_pipeline(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  int64_t d;
  int dim;
  TRY(degree_attr(c, &d));
  TRY(norm_axis(c, pcgc_attrs_int(c->a, "dim"), x->rank, "dim", &dim));
  if (x->micro > 1) {
    pcgc_status s = fail(c, "the input is already pipelined (%d micro-batches on dim %d)", x->micro, x->micro_dim);
    hint(c, "unpipeline it first; nested pipelines are not supported");
    return s;
  }
  if (x->dims[dim] % (x->degree[dim] * d)) {
    pcgc_status s = fail(c, "dim %d has size %lld, which cannot be cut into %lld micro-batches of equal size "
                         "(it is also split %d ways)", dim, (long long)x->dims[dim], (long long)d, x->degree[dim]);
    return s;
  }
  c->out[0] = *x;
  c->out[0].micro = (int32_t)d;
  c->out[0].micro_dim = d > 1 ? dim : -1;
  return PCGC_OK;
}

static pcgc_status infer_unpipeline(ictx *c) {
  const pcgc_ptensor *x = &c->in[0];
  int64_t d;
  int dim;
  TRY(degree_attr(c, &d));
  TRY(norm_axis(c, pcgc_attrs_int(c->a, "dim"), x->rank, "dim", &dim));
  if (x->micro != d || (d > 1 && x->micro_dim != dim)) {
    pcgc_status s = fail(c, "the input has %d micro-batches on dim %d, not %lld on dim %d", x->micro,
                         x->micro_dim, (long long)d, dim);
    hint(c, "unpipeline must mirror the pipeline it closes");
    return s;
  }
  c->out[0] = *x;
  c->out[0].micro = 1;
  c->out[0].micro_dim = -1;
  return PCGC_OK;
}

/* -------------------------------------------------------------- dispatch */

typedef pcgc_status (*infer_fn)(ictx *);
static const infer_fn infer_table[PCGC_OP_COUNT] = {
#define PCGC_OP(id, name, fn, min_in, max_in, n_out, schema) [PCGC_OP_##id] = infer_##fn,
#include "ops.def"
#undef PCGC_OP
};

/* Every input must be a well-formed parallel type. */
static pcgc_status check_input(ictx *c, int i) {
  const pcgc_ptensor *t = &c->in[i];
  if (t->rank < 0 || t->rank > PCGC_MAX_RANK || (unsigned)t->dtype >= PCGC_DTYPE_COUNT)
    return fail(c, "%s has an invalid type", slot_name(c->kind, i));
  if (t->sum < 1 || t->replica < 1 || t->micro < 1)
    return fail(c, "%s has a degree below 1", slot_name(c->kind, i));
  for (int d = 0; d < t->rank; d++)
    if (t->dims[d] < 1 || t->degree[d] < 1 || t->dims[d] % t->degree[d])
      return fail(c, "%s dim %d (size %lld) has invalid shard degree %d", slot_name(c->kind, i), d,
                  (long long)t->dims[d], t->degree[d]);
  return PCGC_OK;
}

static pcgc_status run(ictx *c) {
  for (int i = 0; i < c->n_in; i++) TRY(check_input(c, i));
  return infer_table[c->kind](c);
}

/* Infers an op one or more of whose inputs are pipelined (see the top). */
static pcgc_status infer_pipelined(ictx *c, int32_t m) {
  pcgc_ptensor plain[PCGC_VARIADIC], folded[PCGC_VARIADIC];
  pcgc_ptensor out_f[PCGC_MAX_INTS];
  for (int i = 0; i < c->n_in; i++) {
    plain[i] = folded[i] = c->in[i];
    plain[i].micro = folded[i].micro = 1;
    plain[i].micro_dim = folded[i].micro_dim = -1;
    if (c->in[i].micro > 1) {
      if (c->in[i].micro != m)
        return fail(c, "inputs are pipelined into different numbers of micro-batches (%d and %d)", m,
                    c->in[i].micro);
      if (c->in[i].micro_dim < -1 || c->in[i].micro_dim >= c->in[i].rank)
        return fail(c, "%s has micro_dim %d, which is not a dim of a rank-%d tensor",
                    slot_name(c->kind, i), c->in[i].micro_dim, c->in[i].rank);
      if (c->in[i].micro_dim < 0) {
        pcgc_status s = fail(c, "%s is a loss summed over micro-batches, which is a final result: "
                             "no operator may consume it", slot_name(c->kind, i));
        hint(c, "compute the loss on an unpipelined tensor if it must feed other operators");
        return s;
      }
      folded[i].degree[c->in[i].micro_dim] *= m;
    } else {
      folded[i].replica *= m; /* a weight is used by every micro-batch */
    }
  }
  ictx cp = *c, cf = *c;
  cp.in = plain;
  cf.in = folded;
  cf.out = out_f;
  cf.unfolded = c->in;
  TRY(run(&cp));
  pcgc_status s = run(&cf);
  if (s != PCGC_OK) {
    char why[900] = "";
    if (c->err) snprintf(why, sizeof why, "%.800s", c->err->message);
    fail(c, "cannot pipeline through this operator: with its %d micro-batches as pieces, %s", m, why);
    hint(c, "unpipeline before this operator");
    return PCGC_ERR_TYPE;
  }
  for (int j = 0; j < c->n_out; j++) {
    pcgc_ptensor *o = &c->out[j];
    int dim = -1;
    for (int d = 0; d < o->rank; d++)
      if (out_f[j].degree[d] == o->degree[d] * m) { dim = d; break; }
    if (dim >= 0) {
      o->micro = m;
      o->micro_dim = dim;
    } else if (out_f[j].sum == o->sum * m && pcgc_op_class_of(c->kind) == PCGC_CLASS_LOSS) {
      o->micro = m; /* the loss accumulates over micro-batches */
      o->micro_dim = -1;
    } else {
      pcgc_status st = fail(c, "cannot pipeline through this operator: its output does not keep the "
                            "micro-batch dim");
      hint(c, "unpipeline before this operator");
      return st;
    }
  }
  return PCGC_OK;
}

static pcgc_status infer_parallel_op(ictx *c) {
  /* partition/combine/replicate/reduce carry micro-batches through; the
   * pipeline ops manage them */
  TRY(run(c));
  return PCGC_OK;
}

static pcgc_status infer_unnamed(pcgc_op_kind kind, const pcgc_attrs *a, int n_in, const pcgc_ptensor *in,
                                 pcgc_ptensor *out, pcgc_error *err) {
  if (a->kind != kind)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "the attributes belong to operator '%s'",
                          pcgc_op_name(a->kind));
  int lo = pcgc_op_min_inputs(kind), hi = pcgc_op_max_inputs(kind);
  if (n_in < lo || n_in > hi) {
    if (lo == hi)
      pcgc_error_set(err, PCGC_ERR_TYPE, "takes %d input%s, got %d", lo, lo == 1 ? "" : "s", n_in);
    else
      pcgc_error_set(err, PCGC_ERR_TYPE, "takes %d to %d inputs, got %d", lo, hi, n_in);
    return PCGC_ERR_TYPE;
  }
  pcgc_status s = pcgc_attrs_check(a, err);
  if (s != PCGC_OK) return s;
  ictx c = {kind, a, n_in, in, out, pcgc_op_num_outputs(kind, a), err, NULL};
  int32_t m = 1;
  for (int i = 0; i < n_in; i++)
    if (in[i].micro > 1) m = in[i].micro;
  if (m == 1 || kind == PCGC_OP_PIPELINE || kind == PCGC_OP_UNPIPELINE)
    s = run(&c);
  else if (pcgc_op_class_of(kind) == PCGC_CLASS_PARALLEL)
    s = infer_parallel_op(&c);
  else
    s = infer_pipelined(&c, m);
  if (s != PCGC_OK) return s;
  for (int j = 0; j < c.n_out; j++) {
    pcgc_ptensor *o = &out[j];
    int64_t numel = 1;
    for (int d = 0; d < o->rank; d++) {
      if (o->dims[d] < 1 || numel > ((int64_t)1 << 62) / o->dims[d])
        return fail(&c, "output %d would have %s elements", j,
                    o->dims[d] < 1 ? "a dim without" : "more than 2^62");
      numel *= o->dims[d];
    }
    for (int d = 0; d < o->rank; d++)
      if (o->dims[d] % o->degree[d] != 0)
        return fail(&c, "output dim %d (size %lld) cannot be split %d ways", d, (long long)o->dims[d],
                    o->degree[d]);
    if (pcgc_ptensor_pieces(o) > (1 << 24)) return fail(&c, "the output is split into too many pieces");
  }
  return PCGC_OK;
}

pcgc_status pcgc__op_infer_named(pcgc_op_kind kind, const char *node, const pcgc_attrs *a, int n_in,
                                 const pcgc_ptensor *in, pcgc_ptensor *out, pcgc_error *err) {
  if ((unsigned)kind >= PCGC_OP_COUNT)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "unknown operator kind %d", (int)kind);
  pcgc_status s = infer_unnamed(kind, a, n_in, in, out, err);
  if (s != PCGC_OK && err) {
    /* attrs_check messages already start with the op name */
    const char *msg = err->message;
    size_t nl = strlen(pcgc_op_name(kind));
    if (strncmp(msg, pcgc_op_name(kind), nl) == 0 && msg[nl] == ':') msg += nl + 1;
    while (*msg == ' ') msg++;
    char tmp[sizeof err->message];
    if (node)
      snprintf(tmp, sizeof tmp, "%s '%.200s': %.780s", pcgc_op_name(kind), node, msg);
    else
      snprintf(tmp, sizeof tmp, "%s: %.980s", pcgc_op_name(kind), msg);
    memcpy(err->message, tmp, sizeof tmp);
  }
  return s;
}

pcgc_status pcgc_op_infer(pcgc_op_kind kind, const pcgc_attrs *a, int n_in, const pcgc_ptensor *in,
                          pcgc_ptensor *out, pcgc_error *err) {
  return pcgc__op_infer_named(kind, NULL, a, n_in, in, out, err);
}
