/*
 * cu_moe.cu — the mixture-of-experts families on the CUDA backend.
 *
 * Not written yet: moe_route, moe_dispatch, expert_linear and moe_combine
 * refuse with PCGC_ERR_UNSUPPORTED and a message, so a plan that holds
 * them fails before its first step instead of computing something wrong.
 * The CPU backend (runtime/cpu/k_moe.c, k_dense.c) runs them.
 */
#include "cu_internal.h"

#define NO_CUDA_KERNEL(fn)                                                                          \
  pcgc_status pcgc__cu_fwd_##fn(const pcgc__cukargs *k) {                                          \
    return pcgc__kfail_st(k, PCGC_ERR_UNSUPPORTED,                                                 \
                          "the CUDA backend has no kernel for this operator yet; run the plan on " \
                          "the CPU backend (pcgc run --backend cpu)");                             \
  }                                                                                                 \
  pcgc_status pcgc__cu_bwd_##fn(const pcgc__cukargs *k) { return pcgc__cu_fwd_##fn(k); }
NO_CUDA_KERNEL(moe_route)
NO_CUDA_KERNEL(moe_dispatch)
NO_CUDA_KERNEL(expert_linear)
NO_CUDA_KERNEL(moe_combine)
