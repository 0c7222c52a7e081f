// The decode GEMV's instances for trellis weights coded along their rows (gemv_kernel.cuh,
// gemv_formats.cuh): k = 2, 3 and 4; one input row or up to eight. Weights stored transposed
// (axis 0) take packed_gemv.cu's column kernels instead.
#include "backend/cuda/gemv_formats.cuh"

namespace hearth::cuda::gemv {

void launch_trellis(Ctx& ctx, Args& a, int64_t total_rows, int k, bool glu) {
  switch (k) {
    case 2:
      return launch_glu_or_not<TrellisRows<2>>(ctx, a, total_rows, glu);
    case 3:
      return launch_glu_or_not<TrellisRows<3>>(ctx, a, total_rows, glu);
    default:
      return launch_glu_or_not<TrellisRows<4>>(ctx, a, total_rows, glu);
  }
}

void trellis_init() {
  allow_packed_norm_smem<TrellisRows<2>>();
  allow_packed_norm_smem<TrellisRows<3>>();
  allow_packed_norm_smem<TrellisRows<4>>();
}

}  // namespace hearth::cuda::gemv
