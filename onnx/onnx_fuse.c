/*
 * onnx_fuse.c — decomposed operators recognised as one pcgc operator.
 *
 * Exporters without a GELU or LayerNormalization operator (torch 1.13 at
 * opsets below 20 and 17) write them out elementwise. pcgc has neither Erf
 * nor Sqrt, so these chains must be recognised before conversion:
 *
 *   GELU (erf):  x * 0.5 * (1 + erf(x / sqrt 2))         Div|Mul -> Erf -> Add -> Mul -> Mul
 *   GELU (tanh): 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
 *   LayerNorm:   d = x - mean(x); d / sqrt(mean(d^2) + eps) [* scale] [+ bias]
 *                ReduceMean -> Sub -> Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul -> Add
 *   RMSNorm:     x / sqrt(mean(x^2) + eps) [* scale]     Pow|Mul -> ReduceMean -> Add -> Sqrt ->
 *                (Hugging Face's LlamaRMSNorm)             (Reciprocal|Div(1, .) -> Mul(x, .)) | Div(x, .)
 *                                                          [-> Mul(scale)]
 *   RoPE:        x * cos + cat(-x2, x1) * sin           Slice(x, h:) -> Neg -> Concat(., Slice(x, :h)) ->
 *                (LLaMA's rotate-half; cos, sin the        Mul(sin) -> Add(Mul(x, cos), .)
 *                constant tables of one theta)
 *   SiLU:        x * sigmoid(x)                          Sigmoid -> Mul (x either side)
 *                (no ONNX operator before opset 23; a Sigmoid whose product is
 *                not with its own input stays a sigmoid)
 *
 * The matcher walks forward from an anchor (Erf, Tanh, the first
 * ReduceMean) along single consumers, accepting the operand orders
 * exporters use (commutative operands either way round; the 0.5 multiplied
 * first or last). Every intermediate tensor must be used only inside the
 * pattern and not be a graph output, so removing the chain changes nothing
 * else. On a match the last node becomes the fused operator and the others
 * are skipped; constants are compared with a tolerance of 1e-3 relative.
 */
#include <math.h>
#include <string.h>

#include "onnx_internal.h"

#define TRY(x) do { pcgc_status s_ = (x); if (s_ != PCGC_OK) return s_; } while (0)
#define MAX_CHAIN 16
#define SQRT_2_OVER_PI 0.7978845608028654

typedef struct chain {
  int n;
  int nodes[MAX_CHAIN];
} chain;

static const Onnx__NodeProto *node_at(onnx_ctx *c, int i) { return c->gp->node[i]; }

/* Node i is a free `op` of the default domain with `n_in` inputs. */
static bool is_op(onnx_ctx *c, int i, const char *op, size_t n_in) {
  if (i < 0) return false;
  const Onnx__NodeProto *n = node_at(c, i);
  return c->fused[i].kind == OF_NONE && (!n->domain || !n->domain[0]) && n->op_type &&
         strcmp(n->op_type, op) == 0 && n->n_input == n_in && n->n_output >= 1 && n->output[0] &&
         (n_in < 1 || n->input[0]) && (n_in < 2 || n->input[1]);
}

static const char *out0(onnx_ctx *c, int i) { return node_at(c, i)->output[0]; }
static const char *in_k(onnx_ctx *c, int i, int k) { return node_at(c, i)->input[k]; }

/* The one node consuming `name` (-1 when there are more, or it is a graph output). */
static int sole_user(onnx_ctx *c, const char *name) {
  onnx_value *v = pcgc__onnx_value(c, name);
  if (!v || v->n_users < 1 || v->n_users > 4 || v->users[0] < 0) return -1;
  for (int k = 1; k < v->n_users; k++)
    if (v->users[k] != v->users[0]) return -1;
  return v->users[0];
}

/* The node producing `name`, when `name` is used by that one consumer only. */
static int private_producer(onnx_ctx *c, const char *name) {
  onnx_value *v = pcgc__onnx_value(c, name);
  if (!v || sole_user(c, name) < 0) return -1;
  return v->def_node;
}

static bool near(double v, double want) { return fabs(v - want) <= 1e-3 * fabs(want) + 1e-12; }

/* `name` is a one-element floating constant close to `want`. */
static bool is_scalar(onnx_ctx *c, const char *name, double want, pcgc_status *st) {
  onnx_value *v = pcgc__onnx_value(c, name);
  if (!v || v->kind != OV_CONST) return false;
  onnx_tensor *t;
  if (v->init && !v->t && (v->init->n_dims > 1 || (v->init->n_dims == 1 && v->init->dims[0] != 1))) return false;
  if ((*st = pcgc__onnx_const(c, v, &t)) != PCGC_OK) return false;
  return t->numel == 1 && near(pcgc__onnx_get_f(t, 0), want);
}

static bool is_const(onnx_ctx *c, const char *name) {
  onnx_value *v = pcgc__onnx_value(c, name);
  return v && v->kind == OV_CONST;
}

/* Binary node i has operands {a, b} in either order, with `a` == want_a when
 * want_a is given; the other operand is returned. */
static const char *other_operand(onnx_ctx *c, int i, const char *known) {
  if (strcmp(in_k(c, i, 0), known) == 0) return in_k(c, i, 1);
  if (strcmp(in_k(c, i, 1), known) == 0) return in_k(c, i, 0);
  return NULL;
}

static void push(chain *ch, int i) {
  if (ch->n < MAX_CHAIN) ch->nodes[ch->n++] = i;
}

/* The common tail of both GELUs, from t = (1 + erf(...)) or (1 + tanh(...)):
 * x * t * 0.5 in the three orders exporters write. Returns the root. */
static int gelu_tail(onnx_ctx *c, const char *x, const char *t, chain *ch, pcgc_status *st) {
  int m1 = sole_user(c, t);
  if (!is_op(c, m1, "Mul", 2)) return -1;
  const char *o = other_operand(c, m1, t);
  if (!o) return -1;
  if (strcmp(o, x) == 0) { /* (x * t) * 0.5 */
    int m2 = sole_user(c, out0(c, m1));
    const char *h = is_op(c, m2, "Mul", 2) ? other_operand(c, m2, out0(c, m1)) : NULL;
    if (!h || !is_scalar(c, h, 0.5, st)) return -1;
    push(ch, m1);
    return m2;
  }
  if (is_scalar(c, o, 0.5, st)) { /* x * (t * 0.5) */
    int m2 = sole_user(c, out0(c, m1));
    const char *h = is_op(c, m2, "Mul", 2) ? other_operand(c, m2, out0(c, m1)) : NULL;
    if (!h || strcmp(h, x) != 0) return -1;
    push(ch, m1);
    return m2;
  }
  int hn = private_producer(c, o); /* (x * 0.5) * t */
  if (is_op(c, hn, "Mul", 2)) {
    const char *k = other_operand(c, hn, x);
    if (k && is_scalar(c, k, 0.5, st)) {
      push(ch, hn);
      return m1;
    }
  }
  return -1;
}

/* 1 + u: the Add's output, or NULL. */
static const char *plus_one(onnx_ctx *c, const char *u, chain *ch, pcgc_status *st) {
  int a = sole_user(c, u);
  const char *k = is_op(c, a, "Add", 2) ? other_operand(c, a, u) : NULL;
  if (!k || !is_scalar(c, k, 1.0, st)) return NULL;
  push(ch, a);
  return out0(c, a);
}

static int match_gelu_erf(onnx_ctx *c, int e, const char **x, chain *ch, pcgc_status *st) {
  int d = private_producer(c, in_k(c, e, 0));
  const char *k;
  if (is_op(c, d, "Div", 2) && is_scalar(c, in_k(c, d, 1), sqrt(2.0), st)) *x = in_k(c, d, 0);
  else if (is_op(c, d, "Mul", 2) && (k = in_k(c, d, 1)) && is_scalar(c, k, sqrt(0.5), st)) *x = in_k(c, d, 0);
  else if (is_op(c, d, "Mul", 2) && is_scalar(c, in_k(c, d, 0), sqrt(0.5), st)) *x = in_k(c, d, 1);
  else return -1;
  if (is_const(c, *x)) return -1;
  push(ch, d);
  push(ch, e);
  const char *t = plus_one(c, out0(c, e), ch, st);
  return t ? gelu_tail(c, *x, t, ch, st) : -1;
}

/* Sigmoid s of x, whose one consumer multiplies it by x. Returns the Mul. */
static int match_silu(onnx_ctx *c, int s, const char **x, chain *ch) {
  *x = in_k(c, s, 0);
  if (is_const(c, *x)) return -1;
  int m = sole_user(c, out0(c, s));
  const char *o = is_op(c, m, "Mul", 2) ? other_operand(c, m, out0(c, s)) : NULL;
  if (!o || strcmp(o, *x) != 0) return -1;
  push(ch, s);
  return m;
}

/* x^3 as Pow(x, 3), x * (x * x) or (x * x) * x. */
static bool is_cube(onnx_ctx *c, const char *cube, const char *x, chain *ch, pcgc_status *st) {
  int p = private_producer(c, cube);
  if (is_op(c, p, "Pow", 2)) {
    if (strcmp(in_k(c, p, 0), x) != 0 || !is_scalar(c, in_k(c, p, 1), 3.0, st)) return false;
    push(ch, p);
    return true;
  }
  if (!is_op(c, p, "Mul", 2)) return false;
  const char *sq = other_operand(c, p, x);
  int s = sq ? private_producer(c, sq) : -1;
  if (!is_op(c, s, "Mul", 2) || strcmp(in_k(c, s, 0), x) != 0 || strcmp(in_k(c, s, 1), x) != 0) return false;
  push(ch, s);
  push(ch, p);
  return true;
}

static int match_gelu_tanh(onnx_ctx *c, int th, const char **x, chain *ch, pcgc_status *st) {
  int p1 = private_producer(c, in_k(c, th, 0)); /* beta * (x + kappa * x^3) */
  if (!is_op(c, p1, "Mul", 2)) return -1;
  const char *beta_in = is_scalar(c, in_k(c, p1, 0), SQRT_2_OVER_PI, st) ? in_k(c, p1, 1)
                        : is_scalar(c, in_k(c, p1, 1), SQRT_2_OVER_PI, st) ? in_k(c, p1, 0) : NULL;
  int p2 = beta_in ? private_producer(c, beta_in) : -1;
  if (!is_op(c, p2, "Add", 2)) return -1;
  for (int side = 0; side < 2; side++) {
    chain tmp = *ch;
    const char *xs = in_k(c, p2, side), *k = in_k(c, p2, 1 - side);
    int p3 = private_producer(c, k);
    if (!is_op(c, p3, "Mul", 2) || is_const(c, xs)) continue;
    const char *cube = is_scalar(c, in_k(c, p3, 0), 0.044715, st) ? in_k(c, p3, 1)
                       : is_scalar(c, in_k(c, p3, 1), 0.044715, st) ? in_k(c, p3, 0) : NULL;
    if (!cube || !is_cube(c, cube, xs, &tmp, st)) continue;
    push(&tmp, p3);
    push(&tmp, p2);
    push(&tmp, p1);
    push(&tmp, th);
    const char *t = plus_one(c, out0(c, th), &tmp, st);
    int root = t ? gelu_tail(c, xs, t, &tmp, st) : -1;
    if (root >= 0) {
      *x = xs;
      *ch = tmp;
      return root;
    }
  }
  return -1;
}

/* Axes and keepdims of ReduceMean node i. */
static bool reduce_axes(onnx_ctx *c, int i, int64_t *axes, int *n, pcgc_status *st) {
  const Onnx__NodeProto *saved = c->cur;
  c->cur = node_at(c, i);
  int64_t keep = 1;
  *n = -1;
  *st = pcgc__onnx_attr_int(c, "keepdims", 1, &keep);
  if (*st == PCGC_OK) *st = pcgc__onnx_attr_ints(c, "axes", ONNX_MAX_RANK, axes, n);
  if (*st == PCGC_OK && *n < 0 && c->cur->n_input > 1) {
    onnx_value *v = pcgc__onnx_value(c, c->cur->input[1]);
    if (v && v->kind == OV_CONST) *st = pcgc__onnx_const_ints(c, v, "axes", ONNX_MAX_RANK, axes, n);
  }
  c->cur = saved;
  return *st == PCGC_OK && keep == 1 && *n >= 1;
}

/* The pattern ending at `root` grows by the `op` (Mul: a scale, Add: a
 * bias) of its output with a constant when that is its sole user: the
 * constant goes to *k and the new end is returned. */
static int absorb(onnx_ctx *c, chain *ch, int root, const char *op, const char **k) {
  int m = sole_user(c, out0(c, root));
  const char *w = is_op(c, m, op, 2) ? other_operand(c, m, out0(c, root)) : NULL;
  if (!w || !is_const(c, w)) return root;
  push(ch, root);
  *k = w;
  return m;
}

/* After the mean of squares r: Add(r, eps) with a positive constant, then
 * Sqrt. Returns the Sqrt node (-1: no match), *add and *eps. */
static int match_eps_sqrt(onnx_ctx *c, int r, int *add, double *eps, pcgc_status *st) {
  int a = sole_user(c, out0(c, r));
  const char *eps_name = is_op(c, a, "Add", 2) ? other_operand(c, a, out0(c, r)) : NULL;
  onnx_value *ev = eps_name ? pcgc__onnx_value(c, eps_name) : NULL;
  onnx_tensor *et;
  if (!ev || ev->kind != OV_CONST || (*st = pcgc__onnx_const(c, ev, &et)) != PCGC_OK || et->numel != 1 ||
      !pcgc__onnx_type_is_float(et->type) || !(et->f[0] > 0))
    return -1;
  int sq = sole_user(c, out0(c, a));
  if (!is_op(c, sq, "Sqrt", 1)) return -1;
  *add = a;
  *eps = et->f[0];
  return sq;
}

static int match_layernorm(onnx_ctx *c, int r1, onnx_fused *f, chain *ch, pcgc_status *st) {
  int n1, n2;
  int64_t ax2[ONNX_MAX_RANK];
  const Onnx__NodeProto *rn = node_at(c, r1);
  if (rn->n_input < 1 || rn->n_input > 2 || !rn->input[0] || !reduce_axes(c, r1, f->axes, &n1, st)) return -1;
  const char *x = rn->input[0];
  if (is_const(c, x)) return -1;
  int sub = sole_user(c, out0(c, r1));
  if (!is_op(c, sub, "Sub", 2) || strcmp(in_k(c, sub, 0), x) != 0 || strcmp(in_k(c, sub, 1), out0(c, r1)) != 0)
    return -1;
  /* d = x - mean feeds the square and the division, nothing else */
  const char *d = out0(c, sub);
  onnx_value *dv = pcgc__onnx_value(c, d);
  int sq = -1, div = -1;
  if (!dv || dv->n_users > 4) return -1;
  for (int k = 0; k < dv->n_users; k++) {
    int u = dv->users[k];
    if (u < 0) return -1;
    if (u == sq || u == div) continue;
    if ((is_op(c, u, "Pow", 2) && strcmp(in_k(c, u, 0), d) == 0 && is_scalar(c, in_k(c, u, 1), 2.0, st)) ||
        (is_op(c, u, "Mul", 2) && strcmp(in_k(c, u, 0), d) == 0 && strcmp(in_k(c, u, 1), d) == 0)) {
      if (sq >= 0) return -1;
      sq = u;
    } else if (is_op(c, u, "Div", 2) && strcmp(in_k(c, u, 0), d) == 0) {
      if (div >= 0) return -1;
      div = u;
    } else {
      return -1;
    }
  }
  if (sq < 0 || div < 0) return -1;
  int r2 = sole_user(c, out0(c, sq));
  if (r2 < 0 || !is_op(c, r2, "ReduceMean", node_at(c, r2)->n_input) || node_at(c, r2)->n_input > 2 ||
      !reduce_axes(c, r2, ax2, &n2, st) || n1 != n2 || memcmp(f->axes, ax2, (size_t)n1 * sizeof *ax2) != 0)
    return -1;
  int add;
  double eps;
  int sqrt_n = match_eps_sqrt(c, r2, &add, &eps, st);
  if (sqrt_n < 0 || sole_user(c, out0(c, sqrt_n)) != div || strcmp(in_k(c, div, 1), out0(c, sqrt_n)) != 0)
    return -1;
  int chain_nodes[] = {r1, sub, sq, r2, add, sqrt_n};
  for (size_t k = 0; k < sizeof chain_nodes / sizeof chain_nodes[0]; k++) push(ch, chain_nodes[k]);
  f->eps = pcgc__onnx_nice_float(eps);
  f->n_axes = n1;
  f->x = x;
  f->first = pcgc__onnx_node_name(rn);
  int root = absorb(c, ch, div, "Mul", &f->scale);
  return absorb(c, ch, root, "Add", &f->bias);
}

/* RMSNorm from its square (Pow(x, 2) or Mul(x, x)) on. */
static int match_rmsnorm(onnx_ctx *c, int sq, onnx_fused *f, chain *ch, pcgc_status *st) {
  const char *x = NULL;
  if (is_op(c, sq, "Pow", 2) && is_scalar(c, in_k(c, sq, 1), 2.0, st)) x = in_k(c, sq, 0);
  else if (is_op(c, sq, "Mul", 2) && strcmp(in_k(c, sq, 0), in_k(c, sq, 1)) == 0) x = in_k(c, sq, 0);
  if (!x || is_const(c, x)) return -1;
  int r = sole_user(c, out0(c, sq)), n = 0;
  if (r < 0 || !is_op(c, r, "ReduceMean", node_at(c, r)->n_input) || node_at(c, r)->n_input > 2 ||
      !reduce_axes(c, r, f->axes, &n, st))
    return -1;
  int add;
  double eps;
  int sqrt_n = match_eps_sqrt(c, r, &add, &eps, st);
  if (sqrt_n < 0) return -1;
  /* (pushed as matched: a chain that fails is dropped by the caller) */
  push(ch, sq);
  push(ch, r);
  push(ch, add);
  push(ch, sqrt_n);
  int root = sole_user(c, out0(c, sqrt_n));
  bool div = is_op(c, root, "Div", 2) && strcmp(in_k(c, root, 1), out0(c, sqrt_n)) == 0;
  if (!(div && strcmp(in_k(c, root, 0), x) == 0)) { /* not x / sqrt(.): rsqrt, then x * it */
    if (!is_op(c, root, "Reciprocal", 1) && !(div && is_scalar(c, in_k(c, root, 0), 1.0, st))) return -1;
    int m = sole_user(c, out0(c, root));
    const char *o = is_op(c, m, "Mul", 2) ? other_operand(c, m, out0(c, root)) : NULL;
    if (!o || strcmp(o, x) != 0) return -1;
    push(ch, root);
    root = m;
  }
  f->eps = pcgc__onnx_nice_float(eps);
  f->n_axes = n;
  f->x = x;
  f->first = pcgc__onnx_node_name(node_at(c, sq));
  return absorb(c, ch, root, "Mul", &f->scale);
}

/* A one-element integer constant. */
static bool const_int(onnx_ctx *c, const char *name, int64_t *v, pcgc_status *st) {
  onnx_value *cv = pcgc__onnx_value(c, name);
  onnx_tensor *t;
  if (!cv || cv->kind != OV_CONST || (*st = pcgc__onnx_const(c, cv, &t)) != PCGC_OK || t->numel != 1 ||
      !pcgc__onnx_type_is_int(t->type))
    return false;
  *v = pcgc__onnx_get_i(t, 0);
  return true;
}

/* Slice i (opset >= 10) whose steps are absent or 1. Its start, end and
 * axis when they are constants of one element already (*known); exporters
 * often compute them from the input's shape (x.shape[-1] // 2), which is
 * evaluated only during conversion, so then the caller checks them when
 * the fused operator is emitted. */
static bool slice_range(onnx_ctx *c, int i, int64_t *v, bool *known, pcgc_status *st) {
  const Onnx__NodeProto *n = node_at(c, i);
  if (c->fused[i].kind != OF_NONE || !n->op_type || strcmp(n->op_type, "Slice") != 0 || n->n_input < 4 ||
      n->n_output < 1 || (n->domain && n->domain[0]))
    return false;
  int64_t step = 1;
  if (n->n_input >= 5 && n->input[4][0] && (!is_const(c, n->input[4]) || !const_int(c, n->input[4], &step, st)))
    return false;
  *known = true;
  for (int k = 0; k < 3; k++)
    if (!const_int(c, n->input[1 + k], &v[k], st)) *known = false;
  return step == 1;
}

/* The rotary table `name` ([..., T, D], leading dims 1) holds f(t theta^(-2 (i mod D/2) / D)) for f = cos (or
 * sin), within 1e-5: the tables LLaMA precomputes (in f32). */
static bool rope_table(onnx_ctx *c, const char *name, bool is_sin, int64_t D, double *theta, int64_t *T,
                       pcgc_status *st) {
  onnx_value *v = pcgc__onnx_value(c, name);
  onnx_tensor *t;
  if (!v || v->kind != OV_CONST || (*st = pcgc__onnx_const(c, v, &t)) != PCGC_OK || t->rank < 2 ||
      !pcgc__onnx_type_is_float(t->type) || t->dims[t->rank - 1] != D || D < 4)
    return false;
  for (int d = 0; d < t->rank - 2; d++)
    if (t->dims[d] != 1) return false;
  *T = t->dims[t->rank - 2];
  if (*T < 2) return false;
  int64_t h = D / 2;
  for (int64_t r = 0; r < *T; r++)
    for (int64_t i = 0; i < D; i++) {
      double a = (double)r * pow(*theta, -2.0 * (double)(i % h) / (double)D);
      if (fabs(pcgc__onnx_get_f(t, r * D + i) - (is_sin ? sin(a) : cos(a))) > 1e-5) return false;
    }
  return true;
}

/* The angle of position 1, pair 1 from the tables: theta^(-2/D). */
static bool rope_theta(onnx_ctx *c, const char *cosn, const char *sinn, int64_t D, double *theta, pcgc_status *st) {
  onnx_value *cv = pcgc__onnx_value(c, cosn), *sv = pcgc__onnx_value(c, sinn);
  onnx_tensor *ct, *stt;
  if (!cv || !sv || cv->kind != OV_CONST || sv->kind != OV_CONST) return false;
  if ((*st = pcgc__onnx_const(c, cv, &ct)) != PCGC_OK || (*st = pcgc__onnx_const(c, sv, &stt)) != PCGC_OK)
    return false;
  if (ct->rank < 2 || ct->dims[ct->rank - 1] != D || ct->numel < 2 * D || stt->numel != ct->numel) return false;
  double a = atan2(pcgc__onnx_get_f(stt, D + 1), pcgc__onnx_get_f(ct, D + 1));
  if (!(a > 0 && a < 1)) return false;
  *theta = pcgc__onnx_nice_float((float)pow(a, -(double)D / 2));
  return *theta > 1;
}

/* Rotary embeddings in the rotate-half form, x * cos + cat(-x2, x1) * sin
 * with x1, x2 the halves of x's last dim and cos, sin constant tables:
 * Slice(x, h:) -> Neg -> Concat(., Slice(x, :h)) -> Mul(sin) -> Add(Mul(x, cos), .),
 * anchored at the Neg. */
static int match_rope(onnx_ctx *c, int ng, onnx_fused *f, chain *ch, pcgc_status *st) {
  int s2 = private_producer(c, in_k(c, ng, 0));
  int64_t r2[3], r1[3];
  bool k2, k1;
  if (s2 < 0 || !slice_range(c, s2, r2, &k2, st)) return -1;
  const char *x = in_k(c, s2, 0);
  if (is_const(c, x)) return -1;
  int cat = sole_user(c, out0(c, ng));
  if (!is_op(c, cat, "Concat", 2) || strcmp(in_k(c, cat, 0), out0(c, ng)) != 0) return -1;
  const Onnx__AttributeProto *aa = pcgc__onnx_attr(node_at(c, cat), "axis");
  int s1 = private_producer(c, in_k(c, cat, 1));
  if (!aa || s1 < 0 || !slice_range(c, s1, r1, &k1, st) || strcmp(in_k(c, s1, 0), x) != 0) return -1;
  int ms = sole_user(c, out0(c, cat));
  const char *sinn = is_op(c, ms, "Mul", 2) ? other_operand(c, ms, out0(c, cat)) : NULL;
  int add = sinn ? sole_user(c, out0(c, ms)) : -1;
  const char *mc_out = is_op(c, add, "Add", 2) ? other_operand(c, add, out0(c, ms)) : NULL;
  int mc = mc_out ? private_producer(c, mc_out) : -1;
  const char *cosn = is_op(c, mc, "Mul", 2) ? other_operand(c, mc, x) : NULL;
  onnx_value *cv = cosn ? pcgc__onnx_value(c, cosn) : NULL;
  onnx_tensor *ct;
  if (!cv || cv->kind != OV_CONST || (*st = pcgc__onnx_const(c, cv, &ct)) != PCGC_OK || ct->rank < 2) return -1;
  int64_t D = ct->dims[ct->rank - 1], h = D / 2;
  if (k2 && (r2[0] != h || r2[1] < D)) return -1;                 /* x[..., h:] */
  if (k1 && (r1[0] != 0 || r1[1] != h || r1[2] != r2[2])) return -1; /* x[..., :h] */
  double theta = 0;
  int64_t T, T2;
  if (!rope_theta(c, cosn, sinn, D, &theta, st) || !rope_table(c, cosn, false, D, &theta, &T, st) ||
      !rope_table(c, sinn, true, D, &theta, &T2, st) || T != T2)
    return -1;
  push(ch, s2);
  push(ch, ng);
  push(ch, s1);
  push(ch, cat);
  push(ch, ms);
  push(ch, mc);
  f->x = x;
  f->eps = theta;
  f->n_axes = 5; /* checked on emission: T, the Concat's axis, the two Slices */
  f->axes[0] = T;
  f->axes[1] = aa->i;
  f->axes[2] = s2;
  f->axes[3] = s1;
  f->axes[4] = D;
  return add;
}

static void commit(onnx_ctx *c, const chain *ch, int root, const onnx_fused *f) {
  for (int k = 0; k < ch->n; k++) c->fused[ch->nodes[k]].kind = OF_SKIP;
  c->fused[root] = *f;
}

pcgc_status pcgc__onnx_find_fusions(onnx_ctx *c) {
  const Onnx__GraphProto *gp = c->gp;
  pcgc_status st = PCGC_OK;
  for (size_t i = 0; i < gp->n_node; i++) {
    int n = (int)i;
    chain ch = {0};
    onnx_fused f = {.kind = OF_NONE};
    const char *x = NULL;
    int root = -1;
    if (is_op(c, n, "Erf", 1)) {
      root = match_gelu_erf(c, n, &x, &ch, &st);
      f.kind = OF_GELU;
    } else if (is_op(c, n, "Tanh", 1)) {
      root = match_gelu_tanh(c, n, &x, &ch, &st);
      f.kind = OF_GELU;
      f.gelu_tanh = true;
    } else if (is_op(c, n, "Sigmoid", 1)) {
      root = match_silu(c, n, &x, &ch);
      f.kind = OF_SILU;
    } else if (is_op(c, n, "Neg", 1)) {
      root = match_rope(c, n, &f, &ch, &st);
      f.kind = OF_ROPE;
      x = f.x;
    } else if (is_op(c, n, "Pow", 2) || is_op(c, n, "Mul", 2)) {
      root = match_rmsnorm(c, n, &f, &ch, &st);
      f.kind = OF_RMSNORM;
      x = f.x;
    } else if (is_op(c, n, "ReduceMean", gp->node[i]->n_input)) {
      root = match_layernorm(c, n, &f, &ch, &st);
      f.kind = OF_LAYERNORM;
      x = f.x;
    }
    TRY(st);
    if (root < 0 || ch.n >= MAX_CHAIN) continue;
    f.x = x;
    if (!f.first) f.first = pcgc__onnx_node_name(gp->node[ch.nodes[0]]);
    commit(c, &ch, root, &f);
  }
  return PCGC_OK;
}
