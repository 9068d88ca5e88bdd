/*
 * localize.c — attributes as one piece's kernel must see them: reshape's
 * target shape and conv2d's groups follow the piece's local sizes
 * (attention reads its piece's heads from the kernel context itself).
 */
#include "pieces.h"

void pcgc__localize(pcgc_op_kind k, pcgc_attrs *a, const pcgc_ptensor *in_t, int n_in, const pcgc_buf *in,
                    int n_out, const pcgc_buf *out) {
  (void)n_in;
  (void)n_out;
  switch (k) {
  case PCGC_OP_RESHAPE:
    pcgc_attrs_set_ints(a, "shape", out[0].rank, out[0].dims);
    break;
  case PCGC_OP_CONV2D: {
    /* a piece holding C/k input channels of a grouped convolution holds
     * groups/k of its groups */
    int64_t g = pcgc_attrs_int(a, "groups");
    if (g > 1) {
      int64_t per = in[1].dims[1]; /* channels per group, never split */
      pcgc_attrs_set_int(a, "groups", in[0].dims[1] / per);
    }
    break;
  }
  default:
    break;
  }
}
