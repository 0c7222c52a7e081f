// The decode GEMV's instances for trellis weights coded along their rows (gemv_kernel.cuh,
// gemv_formats.cuh): k = 2, 3 and 4; one input row or up to eight. Weights stored transposed
// (axis 0) take packed_gemv.cu's column kernels instead.
#include "backend/cuda/gemv_formats.cuh"

namespace hearth::cuda::gemv {

namespace {

template <int K>
void launch_k(Ctx& ctx, Args& a, int64_t total_rows, bool glu) {
  if (glu)
    launch<TrellisRows<K>, true>(ctx, a, total_rows);
  else
    launch<TrellisRows<K>, false>(ctx, a, total_rows);
}

template <int K>
void allow_k() {
  allow_norm_smem<TrellisRows<K>, 1>();
  allow_norm_smem<TrellisRows<K>, 8>();
}

}  // namespace

void launch_trellis(Ctx& ctx, Args& a, int64_t total_rows, int k, bool glu) {
  switch (k) {
    case 2:
      return launch_k<2>(ctx, a, total_rows, glu);
    case 3:
      return launch_k<3>(ctx, a, total_rows, glu);
    default:
      return launch_k<4>(ctx, a, total_rows, glu);
  }
}

void trellis_init() {
  allow_k<2>();
  allow_k<3>();
  allow_k<4>();
}

}  // namespace hearth::cuda::gemv
