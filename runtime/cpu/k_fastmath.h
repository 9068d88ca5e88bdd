/*
 * k_fastmath.h — exp and erf in single precision, written so that gcc -O2
 * vectorises the loops that call them (no libm call, no branch: clamps and
 * selects only). The f32 GELU kernels use them (k_elementwise_impl.h); a
 * libm call in double per element made GELU 16% of a transformer block's
 * training step on the CPU.
 *
 * kx_exp_f32: e^v = 2^n e^r with n = round(v / ln 2) and r = v - n ln 2
 * (ln 2 in two parts, so r is exact to a few ulp), e^r by its Taylor
 * polynomial of degree 7 (|r| <= ln 2 / 2: truncation below 5e-9), 2^n
 * built in the exponent bits of two factors. Below -87 it is 0 (expf would give a
 * subnormal), above ln(FLT_MAX) infinity; NaN stays NaN. Relative error
 * <= 2e-7 elsewhere (tests/runtime/test_fastmath.c).
 *
 * kx_erf_f32: erf(x) = x P(x^2) / Q(x^2) for |x| <= 4 (and +-1 beyond,
 * where erf is within 2e-8 of it), P of degree 6 and Q of degree 5, fitted
 * here by iterated weighted least squares on erf(x)/x over [0, 4]. Absolute
 * error <= 4e-7 in float arithmetic (tests/runtime/test_fastmath.c), about what PyTorch's
 * vectorised float erf has.
 */
#ifndef PCGC_K_FASTMATH_H
#define PCGC_K_FASTMATH_H

#include <stdint.h>
#include <string.h>

static inline __attribute__((always_inline)) float kx_exp_f32(float v) {
  float in = v;
  v = v != v ? 0.0f : v;
  v = v < -87.0f ? -87.0f : v;
  v = v > 88.7228394f ? 88.7228394f : v;
  float z = v * 1.44269504088896341f;
  int32_t n = (int32_t)(z + (z < 0 ? -0.5f : 0.5f));
  float fn = (float)n;
  float r = v - fn * 0.693145751953125f; /* ln 2, high bits: fn * it is exact */
  r = r - fn * 1.42860682030941723e-6f;  /* and the rest */
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  /* 2^n as 2^h 2^(n-h), h = n/2: both factors normal for n in [-126, 128] */
  int32_t h = n >> 1, b1 = (h + 127) << 23, b2 = (n - h + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  float e = p * s1 * s2;
  e = in < -87.0f ? 0.0f : e;                   /* underflow, as expf's (subnormals flushed) */
  e = in > 88.7228394f ? __builtin_inff() : e;  /* overflow */
  return in != in ? in : e;
}

static inline __attribute__((always_inline)) float kx_erf_f32(float x) {
  float c = x < -4.0f ? -4.0f : x > 4.0f ? 4.0f : x;
  float t = c * c;
  float p = -1.2140018074147108e-08f;
  p = p * t + 4.475081999411046e-06f;
  p = p * t + 0.00037189571043939537f;
  p = p * t + 0.003835385968403806f;
  p = p * t + 0.05416739956186413f;
  p = p * t + 0.185436814375587f;
  p = p * t + 1.1283791681572424f;
  float q = 6.111685218120923e-05f;
  q = q * t + 0.0012942459437838578f;
  q = q * t + 0.01540721643479798f;
  q = q * t + 0.1138951202296873f;
  q = q * t + 0.49767247408942966f;
  q = q * t + 1.0f;
  float e = c * p / q;
  e = e > 1.0f ? 1.0f : e;
  return e < -1.0f ? -1.0f : e;
}

/* GELU, the erf form, and its derivative Phi(x) + x phi(x), in float. */
static inline __attribute__((always_inline)) float kx_gelu_f32(float x) {
  return 0.5f * x * (1.0f + kx_erf_f32(x * 0.70710678118654752f));
}

static inline __attribute__((always_inline)) float kx_gelu_grad_f32(float x) {
  float cdf = 0.5f * (1.0f + kx_erf_f32(x * 0.70710678118654752f));
  return cdf + x * kx_exp_f32(-0.5f * x * x) * 0.39894228040143268f;
}

#endif
