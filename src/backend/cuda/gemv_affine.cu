// The decode GEMV's instances for MLX affine weights (gemv_kernel.cuh, gemv_formats.cuh): bits
// 2, 3, 4, 5, 6 and 8; one input row or up to eight.
#include "backend/cuda/gemv_formats.cuh"

namespace hearth::cuda::gemv {

void launch_affine(Ctx& ctx, Args& a, int64_t total_rows, int bits, bool glu) {
  switch (bits) {
    case 2:
      return launch_glu_or_not<AffineRows<2>>(ctx, a, total_rows, glu);
    case 3:
      return launch_glu_or_not<AffineRows<3>>(ctx, a, total_rows, glu);
    case 4:
      return launch_glu_or_not<AffineRows<4>>(ctx, a, total_rows, glu);
    case 5:
      return launch_glu_or_not<AffineRows<5>>(ctx, a, total_rows, glu);
    case 6:
      return launch_glu_or_not<AffineRows<6>>(ctx, a, total_rows, glu);
    default:
      return launch_glu_or_not<AffineRows<8>>(ctx, a, total_rows, glu);
  }
}

void affine_init() {
  allow_packed_norm_smem<AffineRows<2>>();
  allow_packed_norm_smem<AffineRows<3>>();
  allow_packed_norm_smem<AffineRows<4>>();
  allow_packed_norm_smem<AffineRows<5>>();
  allow_packed_norm_smem<AffineRows<6>>();
  allow_packed_norm_smem<AffineRows<8>>();
}

}  // namespace hearth::cuda::gemv
