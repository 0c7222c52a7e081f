// Decode products with a trellis weight stored transposed (axis 0: Wᵀ coded along the outputs,
// as down projections are): y[n, out] = x[n, in] · Wᵀ for n ≤ 8 bf16 input rows, the codes
// decoded in registers and never written out, f32 accumulation. (Affine weights and trellis
// weights coded along their rows take the decode GEMV: gemv_kernel.cuh.)
//
// A block of threads owns 256 outputs and a slice of the inputs; each warp adds x[i]·scale[i]
// times the decoded stored row i into its lanes' 8 outputs, the warps meet in shared memory, and
// the slices' partial sums are added in a fixed order by a second kernel (no atomics: the result
// does not depend on scheduling), which stores y or adds it into the residual stream.
#include <algorithm>

#include "backend/cuda/packed_decode.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxRows = 8;
constexpr int kTrellisUnroll = 4;  // stored rows whose words a warp loads before decoding them

// Block (output block ob, input slice s): partials[s][r][ob·256 + t] = Σ_{i in slice}
// x[r, i]·scale[i] · y_int(i, ob·256 + t), before the 1/147.8.
template <int K, int N>
__global__ void __launch_bounds__(kWarps * 32)
    trellis_cols_kernel(const __nv_bfloat16* x, int n, PackedTen w, float* partials, int slices) {
  constexpr int kWords = kTrellisBlock * K / 32;
  __shared__ float red[kWarps][kTrellisBlock];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t ob = blockIdx.x, s = blockIdx.y, in = w.in, out = w.out;
  const int64_t oblocks = out / kTrellisBlock;
  const int64_t i0 = s * in / slices, i1 = (s + 1) * in / slices;
  float acc[N][8] = {};
  for (int64_t i = i0 + warp; i < i1; i += int64_t(kWarps) * kTrellisUnroll) {
    uint32_t words[kTrellisUnroll];
#pragma unroll
    for (int u = 0; u < kTrellisUnroll; ++u) {
      const int64_t r = i + int64_t(u) * kWarps;
      words[u] = (lane < kWords && r < i1)
                     ? ld_stream_u32(w.codes + (r * oblocks + ob) * kWords + lane)
                     : 0u;
    }
#pragma unroll
    for (int u = 0; u < kTrellisUnroll; ++u) {
      const int64_t r = i + int64_t(u) * kWarps;
      if (r >= i1) break;  // uniform across the warp
      float v[8];
      trellis_lane_values<K>(words[u], lane, v);
      const float sc = ld(w.scales, kF16, r);
#pragma unroll
      for (int q = 0; q < N; ++q) {
        if (q >= n) break;
        const float c = __bfloat162float(x[q * in + r]) * sc;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[q][j] = fmaf(c, v[j], acc[q][j]);
      }
    }
  }
#pragma unroll
  for (int q = 0; q < N; ++q) {
    if (q >= n) break;  // uniform across the block
#pragma unroll
    for (int j = 0; j < 8; ++j) red[warp][lane * 8 + j] = acc[q][j];
    __syncthreads();
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kWarps; ++k) sum += red[k][threadIdx.x];
    partials[(s * n + q) * out + ob * kTrellisBlock + threadIdx.x] = sum;
    __syncthreads();
  }
}

// y = Σ_s partials[s] / 147.8 + bias; with resid set, resid += rounded(y to ydt) * scale.
__global__ void partials_sum_kernel(Ten y, const float* partials, int slices, int n, int64_t out,
                                    const void* bias, int bdt, Ten resid, float scale) {
  const int64_t total = int64_t(n) * out;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < slices; ++s) v += partials[int64_t(s) * total + i];
    v /= kTrellis1madScale;
    if (bias) v += ld(bias, bdt, i % out);
    if (resid.p)
      st(resid.p, resid.dtype, i, ld(resid.p, resid.dtype, i) + rounded(y.dtype, v) * scale);
    else
      st(y.p, y.dtype, i, v);
  }
}

// Input slices of a transposed trellis product: enough blocks for two waves of the GPU, each
// slice at least 64 inputs.
int cols_slices(const Ctx& ctx, const PackedTen& w) {
  const int64_t oblocks = w.out / kTrellisBlock;
  const int64_t want = (2 * int64_t(ctx.sm_count) + oblocks - 1) / oblocks;
  return int(std::max<int64_t>(1, std::min(want, w.in / 64)));
}

template <int N>
auto cols_kernel(const PackedTen& w) {
  switch (w.bits) {
    case 2:
      return trellis_cols_kernel<2, N>;
    case 3:
      return trellis_cols_kernel<3, N>;
    default:
      return trellis_cols_kernel<4, N>;
  }
}

template <int N>
void launch_cols(Ctx& ctx, const __nv_bfloat16* x, int n, const PackedTen& w, float* partials,
                 int slices) {
  const dim3 grid(unsigned(w.out / kTrellisBlock), unsigned(slices));
  cols_kernel<N>(w)<<<grid, kWarps * 32, 0, ctx.stream>>>(x, n, w, partials, slices);
}

}  // namespace

bool packed_gemv_fits(const Ten& x, const PackedTen& w) {
  return x.rows() <= kMaxRows && x.dtype == kBF16 && x.cols() == w.in && w.transposed() &&
         w.bits >= 2 && w.bits <= 4 && w.out % kTrellisBlock == 0;
}

size_t packed_partials_bytes(const Ctx& ctx, const PackedTen& w) {
  if (!w.transposed() || w.out % kTrellisBlock != 0) return 0;
  return size_t(cols_slices(ctx, w)) * kMaxRows * size_t(w.out) * sizeof(float);
}

void packed_gemv(Ctx& ctx, const Ten& y, const Ten& x, const PackedTen& w, const Ten& bias,
                 float* partials, const Ten& resid, float scale) {
  const int n = int(x.rows());
  const auto* xp = static_cast<const __nv_bfloat16*>(x.p);
  const int slices = cols_slices(ctx, w);
  if (n == 1)
    launch_cols<1>(ctx, xp, n, w, partials, slices);
  else
    launch_cols<kMaxRows>(ctx, xp, n, w, partials, slices);
  HEARTH_CUDA_LAUNCHED();
  partials_sum_kernel<<<grid_for(int64_t(n) * w.out, 256), 256, 0, ctx.stream>>>(
      y, partials, slices, n, w.out, bias.p, bias.dtype, resid, scale);
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
