// The CUDA backend: construction, and the dispatch of every Backend op to its launcher (one .cu
// per op family). The class and its invariants: cuda_backend_impl.h.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_backend_impl.h"
#include "core/error.h"

namespace hearth {

namespace cuda {

void cuda_fail(const char* call, const char* error, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  fail("CUDA error: {} failed: {} ({}:{})", call, error, base ? base + 1 : file, line);
}

namespace {

std::atomic<int64_t> g_gdn_mixer_fused{0};

}  // namespace

CudaBackend::CudaBackend(int device, const CudaOptions& options)
    : device_(device), options_(options) {
  const int count = cuda_device_count();
  if (count == 0) fail("device 'cuda:{}': no CUDA device is available", device);
  if (device < 0 || device >= count)
    fail("device 'cuda:{}' does not exist ({} CUDA device(s) present)", device, count);
  HEARTH_CUDA_CHECK(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  HEARTH_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  name_ = std::string("cuda:") + std::to_string(device_) + " (" + prop.name + ")";
  ctx_.sm_count = prop.multiProcessorCount;
  ctx_.pdl = prop.major >= 9 && options_.pdl;
  // The one-kernel mixer needs thread-block clusters (sm_90).
  // Deterministic: a decode token's Gated DeltaNet runs the same four kernels as a prompt's
  // (the recurrence), and attention splits keys in pieces of a fixed length.
  gdn_mixer_ = prop.major >= 9 && options_.gdn_mixer && !options_.deterministic;
  ctx_.gemv_max_rows = gemv_rows(8);
  ctx_.attention_split_keys = options_.deterministic ? kDeterministicSplitKeys : 0;
  ctx_.fixed_order = options_.deterministic;
  decode_blocks_ =
      options_.decode_blocks > 0 ? std::min(options_.decode_blocks, ctx_.sm_count) : ctx_.sm_count;
  HEARTH_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking));
  HEARTH_CUBLAS_CHECK(cublasLtCreate(&ctx_.lt));
  HEARTH_CUDA_CHECK(cudaMalloc(&ctx_.lt_workspace, kLtWorkspace));
  ctx_.lt_workspace_bytes = kLtWorkspace;
  HEARTH_CUDA_CHECK(
      cudaHostAlloc(reinterpret_cast<void**>(&dyn_host_), kDynInts * 4, cudaHostAllocDefault));
  HEARTH_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&dyn_dev_), kDynInts * 4));
  HEARTH_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&graph_dyn_host_),
                                  kDynAreas * kGraphDynInts * 4, cudaHostAllocDefault));
  for (cudaEvent_t& e : dyn_copied_)
    HEARTH_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  HEARTH_CUDA_CHECK(
      cudaHostAlloc(reinterpret_cast<void**>(&ahead_host_), kAheadSlots * 4, cudaHostAllocDefault));
  for (cudaEvent_t& e : ahead_ready_)
    HEARTH_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  ring_ = kGraphDynInts;
  attention_init();
  gemv_init();
  if (options_.deterministic) linear_fixed_init();
  pick_token_init(ctx_);
  gated_delta_init();
  if (gdn_mixer_) gated_delta_mixer_init();
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  cudaStreamSynchronize(ctx_.stream);
  for (auto& [slot, g] : graphs_)
    if (g.exec) cudaGraphExecDestroy(g.exec);
  weights_.clear();
  moe_tables_.clear();
  step_layers_dev_ = DeviceBuffer();
  linear_plans_clear();
  cudaFree(ctx_.attn_ws);
  cudaFree(ctx_.lt_workspace);
  cudaFree(out_dev_);
  cudaFree(tmp_dev_);
  cudaFree(step_ws_);
  cudaFree(token_dev_);
  cudaFree(picks_dev_);
  cudaFree(packed_partials_);
  cudaFree(dequant_);
  cudaFree(stacked_out_);
  cudaFreeHost(out_host_);
  cudaFreeHost(dyn_host_);
  cudaFreeHost(moe_ids_host_);
  cudaFree(dyn_dev_);
  for (void* p : staging_) cudaFreeHost(p);
  cudaFreeHost(graph_dyn_host_);
  cudaFreeHost(ahead_host_);
  for (cudaEvent_t e : dyn_copied_) cudaEventDestroy(e);
  for (cudaEvent_t e : ahead_ready_) cudaEventDestroy(e);
  cublasLtDestroy(ctx_.lt);
  if (ctx_.blas) cublasDestroy(ctx_.blas);
  disown_blocks();  // after weights_ and the other buffers gave theirs back
  cudaStreamDestroy(ctx_.stream);
}

void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
  bind();
  if (src.device == Device::CPU) return copy_from_host(dst, src.data);
  submit<&cuda::copy_bytes>(Ten(dst), Ten(src));
}

void CudaBackend::linear(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) {
  bind();
  if (y.device == Device::CPU) return linear_to_host(y, x, w, bias);
  submit_linear(Ten(y), x, w, bias);
}

void CudaBackend::linear_many(const Tensor& x, const LinearOut* outs, int n_outs,
                              const InputNorm* norm) {
  bind();
  GemvJobs jobs;
  bool fits = n_outs <= kGemvMaxSegs && gemv_takes_norm(x, norm);
  for (int i = 0; fits && i < n_outs; ++i) {
    const LinearOut& o = outs[i];
    fits = o.y.device == Device::CUDA && gemv_weight(x, o.w, jobs.w[i]) &&
           jobs.w[i].same_format(jobs.w[0]);
    jobs.y[i] = Ten(o.y);
    jobs.bias[i] = Ten(o.bias);
  }
  if (fits) {
    jobs.n = n_outs;
    return submit<&cuda::gemv_many>(Ten(x), jobs, gemv_norm(norm));
  }
  // More rows: the composed form normalises into scratch and comes back here without a norm.
  const Tensor w = norm || n_outs > kGemvMaxSegs ? Tensor() : stacked_weight(x, outs, n_outs);
  if (w.empty()) return Backend::linear_many(x, outs, n_outs, norm);
  // One GEMM for all of them, then each output's columns (and bias) copied out.
  const Ten all = stacked_output(x.rows(), w.dim(0), outs[0].y.dtype);
  submit_linear(all, x, w, Tensor());
  ColumnParts parts;
  parts.n = n_outs;
  for (int i = 0; i < n_outs; ++i) {
    parts.y[i] = outs[i].y.data;
    parts.bias[i] = outs[i].bias.data;
    parts.bias_dtype[i] = int32_t(outs[i].bias.dtype);
    parts.cols[i] = outs[i].w.dim(0);
  }
  submit<&cuda::split_columns>(all, parts);
}

Tensor CudaBackend::stacked_weight(const Tensor& x, const LinearOut* outs, int n_outs) const {
  const int64_t n = x.rows();
  if (n_outs < 2 || n <= ctx_.gemv_max_rows || n > kStackedRows || x.device != Device::CUDA ||
      x.dtype != DType::BF16 || x.ndim != 2)
    return Tensor();
  int64_t rows = 0;
  for (int i = 0; i < n_outs; ++i) {
    const LinearOut& o = outs[i];
    // Part i starts where part i - 1 ends (bf16 rows of x.cols()).
    const void* expected = static_cast<const std::byte*>(outs[0].w.data) + rows * x.cols() * 2;
    const bool ok =
        !o.w.is_packed() && o.w.device == Device::CUDA && o.w.dtype == DType::BF16 &&
        o.w.ndim == 2 && o.w.dim(1) == x.cols() && o.w.data == expected &&
        o.y.device == Device::CUDA && o.y.dtype == outs[0].y.dtype &&
        (o.y.dtype == DType::BF16 || o.y.dtype == DType::F32) && o.y.numel() == n * o.w.dim(0) &&
        (o.bias.empty() || (o.bias.device == Device::CUDA && o.bias.numel() == o.w.dim(0)));
    if (!ok) return Tensor();
    rows += o.w.dim(0);
  }
  return Tensor(outs[0].w.data, DType::BF16, {rows, x.cols()}, Device::CUDA);
}

Ten CudaBackend::stacked_output(int64_t rows, int64_t cols, DType dtype) {
  const size_t bytes = size_t(rows * cols) * dtype_size(dtype);
  if (bytes > stacked_out_bytes_) regrow_device(&stacked_out_, stacked_out_bytes_, bytes);
  Ten t;
  t.p = stacked_out_;
  t.dtype = dtype == DType::F32 ? kF32 : kBF16;
  t.ndim = 2;
  t.d[0] = rows;
  t.d[1] = cols;
  return t;
}

void CudaBackend::linear_glu(const Tensor& y, const Tensor& up_scratch, const Tensor& x,
                             const LinearOut& gate, const LinearOut& up, Activation act,
                             const InputNorm* norm) {
  bind();
  GemvWeight g, u;
  if (gemv_weight(x, gate.w, g) && gemv_weight(x, up.w, u) && g.same_format(u) &&
      gemv_takes_norm(x, norm))
    return submit<&cuda::gemv_glu>(Ten(y), Ten(x), g, Ten(gate.bias), u, Ten(up.bias), int32_t(act),
                                   gemv_norm(norm));
  // More rows, gate and up stacked (the composed form normalises and comes back here): one
  // GEMM, then the GLU reads its two halves.
  const LinearOut both[] = {gate, up};
  const bool halves = !norm && gate.bias.empty() && up.bias.empty() && y.dtype == DType::BF16 &&
                      reinterpret_cast<uintptr_t>(y.data) % 16 == 0 && gate.w.ndim == 2 &&
                      gate.w.dim(0) == up.w.dim(0) && gate.w.dim(0) % 8 == 0;
  const Tensor w = halves ? stacked_weight(x, both, 2) : Tensor();
  if (w.empty()) return Backend::linear_glu(y, up_scratch, x, gate, up, act, norm);
  const Ten all = stacked_output(x.rows(), w.dim(0), DType::BF16);
  submit_linear(all, x, w, Tensor());
  submit<&cuda::glu_halves>(Ten(y), all, int32_t(act));
}

void CudaBackend::linear_residual(const Tensor& x, const Tensor& in, const LinearOut& proj,
                                  float scale) {
  bind();
  const bool same = x.dtype == proj.y.dtype && x.numel() == proj.y.numel();
  if (options_.deterministic && same && !proj.w.is_packed() &&
      cuda::linear_fixed_fits(Ten(x), Ten(in), Ten(proj.w)))
    return submit<&cuda::linear_fixed>(Ten(x), x.cols(), Ten(in),
                                       static_cast<const void*>(proj.w.data), proj.w.dim(0),
                                       Ten(proj.bias), scale, true, false);
  GemvWeight w;
  if (same && gemv_weight(in, proj.w, w))
    return submit<&cuda::gemv_residual>(Ten(x), scale, Ten(in), w, Ten(proj.bias),
                                        int32_t(proj.y.dtype));
  if (same && proj.w.is_packed() && packed_residual(x, in, proj, scale)) return;
  // More rows (prefill, steps of several sequences): the add rides in the GEMM.
  if (same && proj.bias.empty() && !proj.w.is_packed() &&
      cuda::linear_accumulate_fits(ctx_, Ten(x), Ten(in), Ten(proj.w)))
    return submit<&cuda::linear_accumulate>(Ten(x), Ten(in), Ten(proj.w), scale);
  Backend::linear_residual(x, in, proj, scale);
}

bool CudaBackend::gemv_weight(const Tensor& x, const Tensor& w, GemvWeight& g) const {
  if (options_.deterministic) return false;  // the GEMV sums differently from linear_fixed
  if (!w.is_packed()) {
    if (x.rows() > ctx_.gemv_max_rows || !gemv_fits(Ten(x), Ten(w))) return false;
    g = GemvWeight(Ten(w));
    return true;
  }
  if (w.device != Device::CUDA || w.ndim != 2) return false;
  const PackedTen p(w);
  if (!gemv_fits(Ten(x), p)) return false;
  g = GemvWeight(p);
  return true;
}

bool CudaBackend::gemv_takes_norm(const Tensor& x, const InputNorm* norm) {
  return !norm || (norm->w.device == Device::CUDA && gemv_norm_fits(Ten(x), Ten(norm->w)));
}

GemvNorm CudaBackend::gemv_norm(const InputNorm* norm) {
  GemvNorm g;
  if (norm) {
    g.w = Ten(norm->w);
    g.eps = norm->eps;
    g.offset = norm->offset;
  }
  return g;
}

void CudaBackend::qk_norm_rope_store(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& q_norm, const Tensor& k_norm, float eps,
                                     float off, const RopeParams* rope, const KvView& kv,
                                     const int32_t* positions) {
  bind();
  const int32_t rot = rope ? int32_t(rope->rotary_dim) : 0;
  if (!qk_norm_rope_store_fused(q, k, q_norm, k_norm, rot))
    return Backend::qk_norm_rope_store(q, k, v, q_norm, k_norm, eps, off, rope, kv, positions);
  const int32_t* d_pos = upload_ints(positions, q.dim(0), 1);
  const float* d_freq =
      rot > 0 ? reinterpret_cast<const float*>(upload_ints(rope->inv_freq, rot / 2, 2)) : nullptr;
  submit<&cuda::qk_norm_rope_store>(Ten(q), Ten(k), Ten(v), Ten(q_norm), Ten(k_norm), eps, off,
                                    kv_dev(kv), d_pos, d_freq, rot,
                                    rope ? rope->attention_factor : 1.0f);
}

bool CudaBackend::qk_norm_rope_store_fused(const Tensor& q, const Tensor& k, const Tensor& q_norm,
                                           const Tensor& k_norm, int32_t rotary_dim) {
  if (q.ndim != 3) return false;
  const int64_t hd = q.dim(2);
  const bool per_head = (q_norm.empty() || q_norm.numel() == hd) &&
                        (k_norm.empty() || k_norm.numel() == hd) &&
                        q_norm.empty() == k_norm.empty();
  return per_head && qk_rope_store_fits(hd, rotary_dim) && k.dim(2) == hd;
}

void CudaBackend::embedding(const Tensor& y, const Tensor& table, const int32_t* ids, float s) {
  bind();
  const int32_t* d_ids = upload_ints(ids, y.rows(), 0);
  if (table.is_packed()) return submit<&cuda::packed_embedding>(Ten(y), PackedTen(table), d_ids, s);
  submit<&cuda::embedding>(Ten(y), Ten(table), d_ids, s);
}

void CudaBackend::rms_norm(const Tensor& y, const Tensor& x, const Tensor& w, float eps,
                           float off) {
  bind();
  submit<&cuda::rms_norm>(Ten(y), Ten(x), Ten(w), eps, off);
}

void CudaBackend::rope(const Tensor& x, const int32_t* positions, const RopeParams& rp) {
  bind();
  const int32_t* d_pos = upload_ints(positions, x.dim(0), 1);
  const float* d_freq =
      reinterpret_cast<const float*>(upload_ints(rp.inv_freq, rp.rotary_dim / 2, 2));
  submit<&cuda::rope>(Ten(x), d_pos, d_freq, int32_t(rp.rotary_dim), rp.attention_factor);
}

void CudaBackend::kv_store(const KvView& kv, const Tensor& k, const Tensor& v,
                           const int32_t* positions) {
  bind();
  const int32_t* d_pos = upload_ints(positions, k.dim(0), 1);
  submit<&cuda::kv_store>(kv_dev(kv), Ten(k), Ten(v), d_pos);
}

void CudaBackend::attention(const Tensor& out, const Tensor& q, const KvView& kv,
                            const int32_t* positions, const AttentionParams& p) {
  bind();
  if (options_.deterministic) {
    // Every query row through the rows kernel, a row of its own over the same cache: prompt
    // chunks, decode tokens and steps of many sequences then sum a row's keys alike.
    std::vector<KvView>& views = det_views_;
    views.assign(size_t(q.dim(0)), kv);
    return attention_rows(out, q, views.data(), positions, p);
  }
  const KvDev d = kv_dev(kv);
  ensure_attention_workspace(attention_workspace_bytes(ctx_, q.dim(0), p, d.span));
  const int32_t* d_pos = upload_ints(positions, q.dim(0), 1);
  submit<&cuda::attention>(Ten(out), Ten(q), d, d_pos, packed(p));
}

void CudaBackend::ensure_attention_workspace(size_t bytes) {
  if (bytes <= ctx_.attn_ws_bytes) return;
  regrow_device(reinterpret_cast<void**>(&ctx_.attn_ws), ctx_.attn_ws_bytes, bytes);
  // The split-K arrival counters in it start at zero; every launch leaves them so.
  HEARTH_CUDA_CHECK(cudaMemsetAsync(ctx_.attn_ws, 0, ctx_.attn_ws_bytes, ctx_.stream));
}

void CudaBackend::glu(const Tensor& y, const Tensor& gate, const Tensor& up, Activation act) {
  bind();
  submit<&cuda::glu>(Ten(y), Ten(gate), Ten(up), int32_t(act));
}

void CudaBackend::add(const Tensor& y, const Tensor& a, const Tensor& b, float b_scale) {
  bind();
  submit<&cuda::add>(Ten(y), Ten(a), Ten(b), b_scale);
}

void CudaBackend::scale(const Tensor& x, float s) {
  bind();
  if (x.device == Device::CPU) {
    if (const Ten* d = pending_host_output(x)) return submit<&cuda::scale>(*d, s);
    float* p = x.as<float>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) p[i] *= s;
    return;
  }
  submit<&cuda::scale>(Ten(x), s);
}

void CudaBackend::softcap(const Tensor& x, float cap) {
  bind();
  if (x.device == Device::CPU) {
    if (const Ten* d = pending_host_output(x)) return submit<&cuda::softcap>(*d, cap);
    float* p = x.as<float>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) p[i] = std::tanh(p[i] / cap) * cap;
    return;
  }
  submit<&cuda::softcap>(Ten(x), cap);
}

void CudaBackend::conv1d_causal_silu(const Tensor& y, const Tensor& x, const Tensor& state,
                                     const Tensor& w) {
  bind();
  submit<&cuda::conv1d_causal_silu>(Ten(y), Ten(x), Ten(state), Ten(w));
}

void CudaBackend::gated_delta_gates(const Tensor& g, const Tensor& beta, const Tensor& a,
                                    const Tensor& b, const Tensor& a_log, const Tensor& dt_bias) {
  bind();
  submit<&cuda::gated_delta_gates>(Ten(g), Ten(beta), Ten(a), Ten(b), Ten(a_log), Ten(dt_bias));
}

void CudaBackend::gated_delta(const Tensor& out, const Tensor& qkv, const Tensor& g,
                              const Tensor& beta, const Tensor& state, const GatedDeltaParams& p) {
  bind();
  submit<&cuda::gated_delta>(Ten(out), Ten(qkv), Ten(g), Ten(beta), Ten(state), packed(p));
}

void CudaBackend::rms_norm_gated(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& z,
                                 float eps) {
  bind();
  submit<&cuda::rms_norm_gated>(Ten(y), Ten(x), Ten(w), Ten(z), eps);
}

GdnMixerArgs CudaBackend::gdn_mixer_args(const Tensor& normed, const Tensor& qkv,
                                         const Tensor& conv_state, const Tensor& conv_w,
                                         const Tensor& a, const Tensor& b, const Tensor& a_log,
                                         const Tensor& dt_bias, const Tensor& state,
                                         const GatedDeltaParams& p, const Tensor& norm_w,
                                         const Tensor& z, float eps, const GatedDeltaScratch& s) {
  GdnMixerArgs m;
  std::memset(static_cast<void*>(&m), 0, sizeof m);  // records compare bytewise
  m.normed = Ten(normed);
  m.qkv = Ten(qkv);
  m.conv_state = Ten(conv_state);
  m.conv_w = Ten(conv_w);
  m.a = Ten(a);
  m.b = Ten(b);
  m.a_log = Ten(a_log);
  m.dt_bias = Ten(dt_bias);
  m.state = Ten(state);
  m.norm_w = Ten(norm_w);
  m.z = Ten(z);
  m.hk = p.n_k_heads;
  m.hv = p.n_v_heads;
  m.dk = p.k_dim;
  m.dv = p.v_dim;
  m.conv_dt = int32_t(s.conv.dtype);
  m.g_dt = int32_t(s.g.dtype);
  m.beta_dt = int32_t(s.beta.dtype);
  m.core_dt = int32_t(s.core.dtype);
  m.eps = eps;
  return m;
}

void CudaBackend::gated_delta_mixer(const Tensor& normed, const Tensor& qkv,
                                    const Tensor& conv_state, const Tensor& conv_w, const Tensor& a,
                                    const Tensor& b, const Tensor& a_log, const Tensor& dt_bias,
                                    const Tensor& state, const GatedDeltaParams& p,
                                    const Tensor& norm_w, const Tensor& z, float eps,
                                    const GatedDeltaScratch& s) {
  bind();
  if (gdn_mixer_ && qkv.rows() == 1 && normed.device == Device::CUDA) {
    const GdnMixerArgs m = gdn_mixer_args(normed, qkv, conv_state, conv_w, a, b, a_log, dt_bias,
                                          state, p, norm_w, z, eps, s);
    if (gated_delta_mixer_fits(m)) {
      submit<&cuda::gated_delta_mixer>(m);
      g_gdn_mixer_fused.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  Backend::gated_delta_mixer(normed, qkv, conv_state, conv_w, a, b, a_log, dt_bias, state, p,
                             norm_w, z, eps, s);
}

void CudaBackend::mul_sigmoid(const Tensor& y, const Tensor& x, const Tensor& gate) {
  bind();
  submit<&cuda::mul_sigmoid>(Ten(y), Ten(x), Ten(gate));
}

void CudaBackend::fill(const Tensor& y, float value) {
  bind();
  submit<&cuda::fill>(Ten(y), value);
}

void CudaBackend::gather_rows(const Tensor& y, const Tensor& x, const int32_t* rows) {
  bind();
  const int32_t* d_rows = upload_ints(rows, y.rows(), 3);
  submit<&cuda::gather_rows>(Ten(y), Ten(x), d_rows);
}

void CudaBackend::scatter_add_rows(const Tensor& y, const Tensor& x, const int32_t* rows,
                                   const float* weights) {
  bind();
  const int32_t* d_rows = upload_ints(rows, x.rows(), 3);
  const float* d_w = reinterpret_cast<const float*>(upload_ints(weights, x.rows(), 4));
  submit<&cuda::scatter_add_rows>(Ten(y), Ten(x), d_rows, d_w);
}

void* const* CudaBackend::upload_kv_table(const KvView& kv, int64_t* span) {
  if (!kv.paged() || kv.block_size != kKvBlock || kv.row_bytes % 16 != 0 || kv.k_offset % 16 != 0 ||
      kv.v_offset % 16 != 0 || kv.end > INT32_MAX)
    fail(
        "CUDA backend: a KV cache view must be paged in blocks of {} positions with 16-byte "
        "aligned rows (got block size {}, row of {} bytes)",
        kKvBlock, kv.block_size, kv.row_bytes);
  const int64_t n = (kv.end + kKvBlock - 1) / kKvBlock;
  const int64_t entries = int64_t(std::bit_ceil(uint64_t(std::max<int64_t>(n, 4))));
  block_table_.assign(size_t(entries), nullptr);
  for (int64_t i = 0; i < n; ++i) block_table_[size_t(i)] = kv.blocks[i];
  *span = entries * kKvBlock;
  // Tag 8: a group's table, the same for each of its layers (uploaded once per step).
  return reinterpret_cast<void* const*>(upload_ints(block_table_.data(), entries * 2, 8));
}

KvDev CudaBackend::kv_dev(const KvView& kv) {
  KvDev d;
  d.blocks = upload_kv_table(kv, &d.span);
  d.k_off = kv.k_offset / 2;  // bf16 elements
  d.v_off = kv.v_offset / 2;
  const int32_t first = int32_t(kv.first);
  d.first = upload_ints(&first, 1, 5);
  return d;
}

}  // namespace cuda

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> make_cuda_backend(int device, const CudaOptions& options) {
  return std::make_unique<cuda::CudaBackend>(device, options);
}

// Test-only access to graph statistics and the graph switch (declared in the CUDA tests).
void cuda_backend_set_graphs(Backend& b, bool on) {
  if (auto* c = dynamic_cast<cuda::CudaBackend*>(&b)) c->set_graphs_enabled(on);
}
int64_t cuda_gdn_mixer_fused() { return cuda::g_gdn_mixer_fused.load(std::memory_order_relaxed); }
int64_t cuda_backend_graphs_replayed(const Backend& b) {
  auto* c = dynamic_cast<const cuda::CudaBackend*>(&b);
  return c ? c->graphs_replayed() : 0;
}
int64_t cuda_backend_graphs_captured(const Backend& b) {
  auto* c = dynamic_cast<const cuda::CudaBackend*>(&b);
  return c ? c->graphs_captured() : 0;
}

}  // namespace hearth
