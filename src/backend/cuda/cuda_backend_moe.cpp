// The CUDA backend: mixture-of-experts layers (routing on the device; decode experts from device
// memory; prefill grouped by expert).
#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"

namespace hearth::cuda {

int64_t CudaBackend::moe_experts(const Tensor& y, const Tensor& x, const Tensor& logits,
                                 const MoeExperts& ex, const MoeScratch& s) {
  bind();
  // Deterministic: the composed form, whose products are linear_fixed's and whose combine adds
  // a token's experts in index order.
  if (options_.deterministic || !moe_supported(y, x, logits, ex, s))
    return Backend::moe_experts(y, x, logits, ex, s);
  const int64_t n = x.rows(), E = ex.n_expert, k = s.ids.cols();
  if (n == 0) return 0;
  if (moe_decode_fits(Ten(x), Ten(s.gate), k) && moe_aligned(ex)) {
    const MoeMats m = moe_mats(ex);  // may run the step so far eagerly (first use of a table)
    submit<&cuda::moe_route>(Ten(logits), Ten(s.ids), Ten(s.weights), int32_t(ex.norm_topk_prob));
    submit<&cuda::moe_decode>(Ten(y), Ten(x), Ten(s.ids), Ten(s.weights), m.gate, m.up, m.down,
                              Ten(s.gate), int32_t(ex.act));
    return std::min(E, n * k);  // the host does not see which experts ran
  }
  return moe_grouped(y, x, logits, ex, s);
}

bool CudaBackend::moe_supported(const Tensor& y, const Tensor& x, const Tensor& logits,
                                const MoeExperts& ex, const MoeScratch& s) {
  const int64_t n = x.rows(), H = x.cols(), E = ex.n_expert, k = std::min(ex.n_used, E);
  if (!moe_route_fits(E, k) || x.device != Device::CUDA || y.device != Device::CUDA ||
      y.rows() != n || y.cols() != H || logits.device != Device::CUDA ||
      logits.dtype != DType::F32 || logits.rows() != n || logits.cols() != E || s.ids.cols() != k ||
      s.ids.rows() != n || s.weights.numel() != n * k)
    return false;
  const int64_t I = ex.gate[0].rows();
  auto ok = [](const Tensor& w, int64_t rows, int64_t cols) {
    return w.device == Device::CUDA && w.dtype == DType::BF16 && w.ndim == 2 && w.rows() == rows &&
           w.cols() == cols;
  };
  for (int64_t e = 0; e < E; ++e)
    if (!ok(ex.gate[e], I, H) || !ok(ex.up[e], I, H) || !ok(ex.down[e], H, I)) return false;
  return true;
}

bool CudaBackend::moe_aligned(const MoeExperts& ex) {
  for (int64_t e = 0; e < ex.n_expert; ++e)
    if (!cuda::aligned16(ex.gate[e].data) || !cuda::aligned16(ex.up[e].data) ||
        !cuda::aligned16(ex.down[e].data))
      return false;
  return true;
}

CudaBackend::MoeMats CudaBackend::moe_mats(const MoeExperts& ex) {
  MoeMats m;
  if (moe_strided(ex.gate, ex.n_expert, m.gate) && moe_strided(ex.up, ex.n_expert, m.up) &&
      moe_strided(ex.down, ex.n_expert, m.down))
    return m;
  const void* const* table = moe_table(ex);
  m = MoeMats{};
  m.gate.table = table;
  m.up.table = table + ex.n_expert;
  m.down.table = table + 2 * ex.n_expert;
  return m;
}

bool CudaBackend::moe_strided(const Tensor* mats, int64_t E, MoeMat& m) {
  const char* base = static_cast<const char*>(mats[0].data);
  const int64_t stride = E > 1 ? static_cast<const char*>(mats[1].data) - base : 0;
  for (int64_t e = 0; e < E; ++e)
    if (static_cast<const char*>(mats[e].data) != base + e * stride) return false;
  m.base = base;
  m.stride = stride;
  return true;
}

const void* const* CudaBackend::moe_table(const MoeExperts& ex) {
  const int64_t E = ex.n_expert;
  std::vector<const void*> want(size_t(3 * E));
  for (int64_t e = 0; e < E; ++e) {
    want[size_t(e)] = ex.gate[e].data;
    want[size_t(E + e)] = ex.up[e].data;
    want[size_t(2 * E + e)] = ex.down[e].data;
  }
  MoeTable& t = moe_tables_[ex.gate[0].data];
  if (t.host != want) {
    t.dev = DeviceBuffer();
    t.dev = alloc(want.size() * sizeof(void*));
    t.host = std::move(want);
    copy_from_host(Tensor(t.dev.data(), DType::U64, {3 * E}, Device::CUDA), t.host.data());
  }
  return static_cast<const void* const*>(t.dev.data());
}

int64_t CudaBackend::moe_grouped(const Tensor& y, const Tensor& x, const Tensor& logits,
                                 const MoeExperts& ex, const MoeScratch& s) {
  const int64_t n = x.rows(), E = ex.n_expert, k = s.ids.cols(), P = n * k;
  submit<&cuda::moe_route>(Ten(logits), Ten(s.ids), Ten(s.weights), int32_t(ex.norm_topk_prob));
  stop_recording();
  if (size_t(P) > moe_ids_host_n_) {
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    cudaFreeHost(moe_ids_host_);
    moe_ids_host_ = nullptr;
    moe_ids_host_n_ = 0;
    HEARTH_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&moe_ids_host_),
                                    size_t(P) * sizeof(int32_t), cudaHostAllocDefault));
    moe_ids_host_n_ = size_t(P);
  }
  HEARTH_CUDA_CHECK(cudaMemcpyAsync(moe_ids_host_, s.ids.data, size_t(P) * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, ctx_.stream));
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  moe_rows_.group(moe_ids_host_, n, k, E);
  const int32_t* d_src = upload_ints(moe_rows_.src.data(), P, 7);
  const int32_t* d_pos = upload_ints(moe_rows_.pos.data(), P, 8);
  const Tensor xg = s.xg.slice_rows(0, P), g = s.gate.slice_rows(0, P), u = s.up.slice_rows(0, P),
               o = s.out.slice_rows(0, P);
  submit<&cuda::gather_rows>(Ten(xg), Ten(x), d_src);
  moe_products(g, xg, ex.gate, 10);
  moe_products(u, xg, ex.up, 11);
  submit<&cuda::glu>(Ten(g), Ten(g), Ten(u), int32_t(ex.act));
  moe_products(o, g, ex.down, 12);
  submit<&cuda::moe_combine>(Ten(y), Ten(o), d_pos, Ten(s.weights));
  return moe_rows_.active;
}

void CudaBackend::moe_products(const Tensor& out, const Tensor& in, const Tensor* w, int tag) {
  const int64_t E = int64_t(moe_rows_.offset.size()) - 1, O = out.cols(), K = in.cols();
  std::vector<const void*> ptrs;
  std::vector<int> rows;
  std::vector<int64_t> experts;
  for (int64_t e = 0; e < E; ++e)
    if (moe_rows_.offset[size_t(e + 1)] > moe_rows_.offset[size_t(e)]) experts.push_back(e);
  const bool grouped = out.dtype == DType::BF16 && in.dtype == DType::BF16 && O % 8 == 0 &&
                       K % 8 == 0 && !experts.empty();
  if (grouped) {
    const size_t c = experts.size();
    ptrs.resize(3 * c);
    rows.resize(c);
    for (size_t i = 0; i < c; ++i) {
      const int64_t e = experts[i], lo = moe_rows_.offset[size_t(e)],
                    hi = moe_rows_.offset[size_t(e + 1)];
      ptrs[i] = w[e].data;
      ptrs[c + i] = in.slice_rows(lo, hi).data;
      ptrs[2 * c + i] = out.slice_rows(lo, hi).data;
      rows[i] = int(hi - lo);
    }
    const auto* d_ptrs = reinterpret_cast<const void* const*>(
        upload_ints(ptrs.data(), int64_t(ptrs.size()) * int64_t(sizeof(void*) / 4), tag));
    if (cuda::linear_grouped(ctx_, d_ptrs, rows.data(), int(c), O, K)) return;
  }
  for (int64_t e : experts) {
    const int64_t lo = moe_rows_.offset[size_t(e)], hi = moe_rows_.offset[size_t(e + 1)];
    submit<&cuda::linear>(Ten(out.slice_rows(lo, hi)), Ten(in.slice_rows(lo, hi)), Ten(w[e]),
                          Ten());
  }
}

}  // namespace hearth::cuda
