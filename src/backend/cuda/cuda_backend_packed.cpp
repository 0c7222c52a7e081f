// The CUDA backend's packed weights (MLX affine, trellis): upload, and the product's choice
// between the decode GEMV (gemv_kernel.cuh, which also serves the fused norm, GLU and residual
// forms), the transposed trellis kernels (packed_gemv.cu) and dequantized rows through the bf16
// GEMM (packed_dequant.cu, linear.cu). Model code is format-blind: it calls linear() and
// embedding() as for any weight. The one-kernel decode step takes bf16 weights only, so a model
// with packed weights runs its decode through the per-op path (one CUDA graph per step).
#include <algorithm>

#include "backend/cuda/cuda_backend_impl.h"
#include "core/error.h"

namespace hearth::cuda {

namespace {

// A 2-D packed weight's PackedTen for the sizes of one matrix of a stacked [.., out, in] one.
PackedTen matrix_view(const Tensor& w) {
  Tensor m = w;
  m.ndim = 2;
  m.shape = {w.dim(-2), w.dim(-1), 0, 0};
  return PackedTen(m);
}

}  // namespace

Tensor CudaBackend::prepare_packed(const Tensor& host) {
  bind();
  if (host.device == Device::CUDA) return host;
  const PackedWeight& pk = host.packed;
  const bool affine = pk.format == WeightFormat::Affine;
  if (!affine && pk.format != WeightFormat::Trellis)
    fail("{}: packed weight {} has a format the CUDA backend does not read", name_,
         host.describe());
  // Scales and biases: what the weight stores beyond its codes, in equal parts for affine.
  const size_t param_bytes = host.stored_bytes() - host.nbytes();
  const size_t scale_bytes = affine ? param_bytes / 2 : param_bytes;
  Tensor t = host;
  t.device = Device::CUDA;
  auto put = [&](const void* src, size_t bytes) -> void* {
    DeviceBuffer buf = alloc(bytes);
    upload(buf.data(), src, bytes);
    void* p = buf.data();
    weights_.push_back(std::move(buf));
    return p;
  };
  t.data = put(host.data, host.nbytes());
  t.packed.scales = put(pk.scales, scale_bytes);
  t.packed.biases = affine ? put(pk.biases, scale_bytes) : nullptr;
  ensure_partials(matrix_view(t));
  return t;
}

void CudaBackend::submit_linear(const Ten& y, const Tensor& x, const Tensor& w,
                                const Tensor& bias) {
  if (w.is_packed()) return linear_packed(y, x, w, bias);
  if (options_.deterministic && cuda::linear_fixed_fits(y, Ten(x), Ten(w)))
    return submit<&cuda::linear_fixed>(y, y.cols(), Ten(x), static_cast<const void*>(w.data),
                                       w.dim(0), Ten(bias), 1.0f, false, false);
  if (recording_) cuda::linear_prepare(ctx_, y, Ten(x), Ten(w));
  submit<&cuda::linear>(y, Ten(x), Ten(w), Ten(bias));
}

void CudaBackend::linear_packed(const Ten& y, const Tensor& x, const Tensor& w,
                                const Tensor& bias) {
  if (w.device != Device::CUDA || w.ndim != 2)
    fail("{}: packed weight {} is not a prepared matrix", name_, w.describe());
  const PackedTen p(w);
  if (options_.deterministic) return linear_packed_fixed(y, x, p, bias);
  if (gemv_fits(Ten(x), p)) return submit<&cuda::gemv_one>(y, Ten(x), GemvWeight(p), Ten(bias));
  if (packed_gemv_fits(Ten(x), p)) {
    ensure_partials(p);
    return submit<&cuda::packed_gemv>(y, Ten(x), p, Ten(bias),
                                      static_cast<float*>(packed_partials_), Ten(), 1.0f);
  }
  // Stored rows (Wᵀ's for a transposed trellis weight, which go to the GEMM in one piece).
  const int64_t rows = p.transposed() ? p.in : p.out, cols = p.transposed() ? p.out : p.in;
  const int64_t per_slice =
      p.transposed() ? rows : std::clamp<int64_t>(int64_t(kDequantBytes) / (cols * 2), 1, rows);
  const size_t need = size_t(per_slice * cols) * 2;
  if (need > dequant_bytes_) regrow_device(&dequant_, dequant_bytes_, need);
  for (int64_t r0 = 0; r0 < rows; r0 += per_slice) {
    const int64_t r1 = std::min(rows, r0 + per_slice);
    submit<&cuda::packed_dequantize>(dequant_, p, r0, r1);
    if (p.transposed())
      submit<&cuda::linear_rows>(y, Ten(x), static_cast<const void*>(dequant_), p.out, int64_t(0),
                                 true);
    else
      submit<&cuda::linear_rows>(y, Ten(x), static_cast<const void*>(dequant_), r1 - r0, r0, false);
  }
  if (!bias.empty()) submit<&cuda::add_bias>(y, Ten(bias));
}

void CudaBackend::linear_packed_fixed(const Ten& y, const Tensor& x, const PackedTen& p,
                                      const Tensor& bias) {
  // Dequantized slices of rows, each through linear_fixed into its columns of y (a transposed
  // trellis matrix whole, as Wᵀ): the same sums at any row count (the decode kernels sum a
  // row's codes in their own order).
  Ten slice;  // a dequantized slice: bf16 rows of p.in, 16-byte aligned
  slice.p = dequant_;
  slice.dtype = cuda::kBF16;
  if (!cuda::linear_fixed_fits(y, Ten(x), slice) || (p.transposed() && p.out % 8 != 0))
    fail(
        "{}: --deterministic needs bf16 activations of a multiple of 8 columns (and a multiple "
        "of 8 outputs for a transposed trellis matrix)",
        name_);
  if (p.transposed()) {
    const size_t need = size_t(p.in * p.out) * 2;
    if (need > dequant_bytes_) regrow_device(&dequant_, dequant_bytes_, need);
    submit<&cuda::packed_dequantize>(dequant_, p, int64_t(0), p.in);
    submit<&cuda::linear_fixed>(y, y.cols(), Ten(x), static_cast<const void*>(dequant_), p.out,
                                Ten(bias), 1.0f, false, true);
    return;
  }
  const int64_t per_slice = std::clamp<int64_t>(int64_t(kDequantBytes) / (p.in * 2), 1, p.out);
  const size_t need = size_t(per_slice * p.in) * 2;
  if (need > dequant_bytes_) regrow_device(&dequant_, dequant_bytes_, need);
  const size_t elem = y.dtype == cuda::kF32 ? 4 : 2;
  for (int64_t r0 = 0; r0 < p.out; r0 += per_slice) {
    const int64_t r1 = std::min(p.out, r0 + per_slice);
    submit<&cuda::packed_dequantize>(dequant_, p, r0, r1);
    Ten cols = y;
    cols.p = static_cast<char*>(y.p) + size_t(r0) * elem;
    submit<&cuda::linear_fixed>(cols, y.cols(), Ten(x), static_cast<const void*>(dequant_), r1 - r0,
                                Ten(), 1.0f, false, false);
  }
  if (!bias.empty()) submit<&cuda::add_bias>(y, Ten(bias));
}

bool CudaBackend::packed_residual(const Tensor& x, const Tensor& in, const LinearOut& proj,
                                  float scale) {
  if (options_.deterministic) return false;  // composed: linear_packed_fixed, then the add
  if (proj.w.device != Device::CUDA || proj.w.ndim != 2) return false;
  const PackedTen p(proj.w);
  if (!packed_gemv_fits(Ten(in), p)) return false;
  ensure_partials(p);
  submit<&cuda::packed_gemv>(Ten(proj.y), Ten(in), p, Ten(proj.bias),
                             static_cast<float*>(packed_partials_), Ten(x), scale);
  return true;
}

void CudaBackend::ensure_partials(const PackedTen& p) {
  const size_t need = packed_partials_bytes(ctx_, p);
  if (need > packed_partials_bytes_) regrow_device(&packed_partials_, packed_partials_bytes_, need);
}

}  // namespace hearth::cuda
