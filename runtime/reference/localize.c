/*
 * localize.c — attributes as one piece's kernel must see them: conv2d's
 * groups follow the piece's local sizes (attention reads its piece's heads
 * from the kernel context itself; reshape checks its logical `shape`
 * against the piece's global dims, so it keeps the logical attribute).
 */
#include "pieces.h"

void pcgc__localize(pcgc_op_kind k, pcgc_attrs *a, const pcgc_ptensor *in_t, int n_in, const pcgc_buf *in,
                    int n_out, const pcgc_buf *out) {
  (void)n_in;
  (void)n_out;
  (void)out;
  switch (k) {
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
