// The decode GEMV's instances for MLX affine weights (gemv_kernel.cuh, gemv_formats.cuh): bits
// 2, 3, 4, 5, 6 and 8; one input row or up to eight.
#include "backend/cuda/gemv_formats.cuh"

namespace hearth::cuda::gemv {

namespace {

template <int BITS>
void launch_bits(Ctx& ctx, Args& a, int64_t total_rows, bool glu) {
  if (glu)
    launch<AffineRows<BITS>, true>(ctx, a, total_rows);
  else
    launch<AffineRows<BITS>, false>(ctx, a, total_rows);
}

template <int BITS>
void allow_bits() {
  allow_norm_smem<AffineRows<BITS>, 1>();
  allow_norm_smem<AffineRows<BITS>, 8>();
}

}  // namespace

void launch_affine(Ctx& ctx, Args& a, int64_t total_rows, int bits, bool glu) {
  switch (bits) {
    case 2:
      return launch_bits<2>(ctx, a, total_rows, glu);
    case 3:
      return launch_bits<3>(ctx, a, total_rows, glu);
    case 4:
      return launch_bits<4>(ctx, a, total_rows, glu);
    case 5:
      return launch_bits<5>(ctx, a, total_rows, glu);
    case 6:
      return launch_bits<6>(ctx, a, total_rows, glu);
    default:
      return launch_bits<8>(ctx, a, total_rows, glu);
  }
}

void affine_init() {
  allow_bits<2>();
  allow_bits<3>();
  allow_bits<4>();
  allow_bits<5>();
  allow_bits<6>();
  allow_bits<8>();
}

}  // namespace hearth::cuda::gemv
